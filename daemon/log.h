/* SPDX-License-Identifier: MIT */
/*
 * Logging for the daemon: one line per event on stderr, with a syslog
 * priority prefix "<N>" when stderr is connected to journald (JOURNAL_STREAM
 * names our stderr) so that journald files each line at the right level.
 *
 * Rules (STYLE.md 15): never log key material, session keys or plaintext;
 * client addresses only at debug level, except in the one line per finished
 * request (log-requests), which names its peer because an operator needs to
 * know who sent what.  Safe to call from any thread: each line is formatted
 * into a local buffer and written with one write(2) (or, for structured
 * events under journald, one sd_journal_sendv()).
 *
 * Lines a peer can cause (a failed handshake, a protocol error, a timeout)
 * go through a pd_log_limit, so that a flood of them costs a few lines a
 * minute and a count, not the disk.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum pd_log_level { PD_LOG_ERR = 3, PD_LOG_WARN = 4, PD_LOG_NOTICE = 5, PD_LOG_INFO = 6, PD_LOG_DEBUG = 7 };

/** Decide the output format (journald prefixes or plain) from the environment. */
void pd_log_init(void);
/** Set the most verbose level written (default PD_LOG_INFO). */
void pd_log_set_level(enum pd_log_level lvl);
/** Parse "err", "warning", "notice", "info", "debug"; -EINVAL otherwise. */
int pd_log_level_parse(const char *s);
/** Whether debug lines are written (guard expensive formatting with it). */
bool pd_log_is_debug(void);
/** Whether lines at lvl are written (the same, for any level). */
bool pd_log_enabled(enum pd_log_level lvl);
/** Write one line at lvl; group is one of SYS NET TLS PROTO REQ PGP POOL. */
void pd_log(enum pd_log_level lvl, const char *group, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define pd_log_err(g, ...) pd_log(PD_LOG_ERR, g, __VA_ARGS__)
#define pd_log_warn(g, ...) pd_log(PD_LOG_WARN, g, __VA_ARGS__)
#define pd_log_notice(g, ...) pd_log(PD_LOG_NOTICE, g, __VA_ARGS__)
#define pd_log_info(g, ...) pd_log(PD_LOG_INFO, g, __VA_ARGS__)
#define pd_log_debug(g, ...) do { if (pd_log_is_debug()) pd_log(PD_LOG_DEBUG, g, __VA_ARGS__); } while (0)

#define PD_LOG_MAX_FIELDS 16

/** A structured event: the line pd_log() would write and, under journald,
 * the same text as MESSAGE= plus the fields (each "NAME=value", NAME of
 * [A-Z0-9_], not starting with '_'), so that `journalctl NAME=value` finds
 * it.  Without journald the fields are not written (the text carries them). */
void pd_log_fields(enum pd_log_level lvl, const char *group, const char *const *fields, size_t n_fields,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* A rate limit for lines a peer can cause: at most `burst` lines per
 * `interval_ms`; past it lines are counted, and the count is written as one
 * line when the interval ends (pd_log_limits_flush(), called by the daemon's
 * sweep timer and at exit) or when the next line passes.  Statically
 * allocated, one per call site; any thread. */
struct pd_log_limit {
	const char *what;        /* "TLS handshake failures": names the count */
	unsigned burst;
	unsigned interval_ms;
	/* private */
	enum pd_log_level lvl;
	const char *group;
	uint64_t start_ms;       /* CLOCK_MONOTONIC start of the current interval */
	unsigned n;              /* lines written in it */
	unsigned long suppressed;
	struct pd_log_limit *next; /* registered once it suppressed something */
	bool listed;
};

#define PD_LOG_LIMIT(what_, burst_, ms_) { .what = (what_), .burst = (burst_), .interval_ms = (ms_) }

/** pd_log() through the limit rl. */
void pd_log_limited(struct pd_log_limit *rl, enum pd_log_level lvl, const char *group, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/** Write the counts of limits whose interval ended (all of them with
 * force, at exit). */
void pd_log_limits_flush(bool force);
