/* SPDX-License-Identifier: MIT */
/*
 * The value syntax of the configuration files (pgpdecd.conf(5) and the
 * milter's milter.conf): sizes, durations and booleans, shared by the
 * daemon and pgpdecd-milter so that both read "64M" or "30s" alike.
 * No I/O; errors are -EINVAL.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** "123", "64K", "1M", "2G", "1T" (binary multiples; "KiB", "MB" spellings accepted). */
int pd_parse_size(const char *s, uint64_t *ret);
/** Milliseconds of "30" (seconds), "500ms", "30s", "5m"/"5min", "1h". */
int pd_parse_ms(const char *s, uint64_t *ret);
/** yes/true/on/1 and no/false/off/0. */
int pd_parse_bool(const char *s, bool *ret);
/** Length of an INI value without its inline comment: a '#' or ';' right
 * after a space or tab starts one, to the end of the line, and the blanks
 * before it go with it ("4 # four" is "4"; "a#b" stays whole).  libinih as
 * Debian builds it strips only ';' comments of that kind; both files
 * (pgpdecd.conf(5), milter.conf) document both. */
size_t pd_ini_value_len(const char *value);
