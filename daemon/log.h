/* SPDX-License-Identifier: MIT */
/*
 * Logging for the daemon: one line per event on stderr, with a syslog
 * priority prefix "<N>" when stderr is connected to journald (JOURNAL_STREAM
 * names our stderr) so that journald files each line at the right level.
 *
 * Rules (STYLE.md 15): never log key material, session keys or plaintext;
 * client addresses only at debug level.  Safe to call from any thread: each
 * line is formatted into a local buffer and written with one write(2).
 */
#pragma once

#include <stdbool.h>

enum pd_log_level { PD_LOG_ERR = 3, PD_LOG_WARN = 4, PD_LOG_NOTICE = 5, PD_LOG_INFO = 6, PD_LOG_DEBUG = 7 };

/** Decide the output format (journald prefixes or plain) from the environment. */
void pd_log_init(void);
/** Set the most verbose level written (default PD_LOG_INFO). */
void pd_log_set_level(enum pd_log_level lvl);
/** Parse "err", "warning", "notice", "info", "debug"; -EINVAL otherwise. */
int pd_log_level_parse(const char *s);
/** Whether debug lines are written (guard expensive formatting with it). */
bool pd_log_is_debug(void);
/** Write one line at lvl; group is one of SYS NET TLS PROTO REQ PGP POOL. */
void pd_log(enum pd_log_level lvl, const char *group, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define pd_log_err(g, ...) pd_log(PD_LOG_ERR, g, __VA_ARGS__)
#define pd_log_warn(g, ...) pd_log(PD_LOG_WARN, g, __VA_ARGS__)
#define pd_log_notice(g, ...) pd_log(PD_LOG_NOTICE, g, __VA_ARGS__)
#define pd_log_info(g, ...) pd_log(PD_LOG_INFO, g, __VA_ARGS__)
#define pd_log_debug(g, ...) do { if (pd_log_is_debug()) pd_log(PD_LOG_DEBUG, g, __VA_ARGS__); } while (0)
