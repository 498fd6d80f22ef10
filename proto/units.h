/* SPDX-License-Identifier: MIT */
/*
 * The value syntax of the configuration files (pgpdecd.conf(5) and the
 * milter's milter.conf): sizes, durations and booleans, shared by the
 * daemon and pgpdecd-milter so that both read "64M" or "30s" alike.
 * No I/O; errors are -EINVAL.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/** "123", "64K", "1M", "2G", "1T" (binary multiples; "KiB", "MB" spellings accepted). */
int pd_parse_size(const char *s, uint64_t *ret);
/** Milliseconds of "30" (seconds), "500ms", "30s", "5m"/"5min", "1h". */
int pd_parse_ms(const char *s, uint64_t *ret);
/** yes/true/on/1 and no/false/off/0. */
int pd_parse_bool(const char *s, bool *ret);
