/* SPDX-License-Identifier: MIT */
/*
 * Internal helpers shared by every lib/ module: cleanup attributes, wiping,
 * constant-time primitives, big-endian loads, error-detail formatting.
 * Nothing here logs, allocates globally or touches threads.
 */
#pragma once

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pgpdec.h"

#define PD_HIDDEN __attribute__((visibility("hidden")))
#define _cleanup_(f) __attribute__((cleanup(f)))
#define PD_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define PD_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PD_MAX(a, b) ((a) > (b) ? (a) : (b))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* Move ownership out of a _cleanup_ variable. */
#define TAKE_PTR(p) ({ __typeof__(p) _tp = (p); (p) = NULL; _tp; })

static inline void pd_freep(void *p) { free(*(void **)p); }

/* Always-on invariant check: corrupting memory is worse than aborting. */
#define pd_require(x) do { if (unlikely(!(x))) pd__require_fail(#x, __FILE__, __LINE__); } while (0)
PD_HIDDEN _Noreturn void pd__require_fail(const char *expr, const char *file, int line);

/** Wipe len bytes (not optimised away). */
static inline void pd_wipe(void *p, size_t len) { if (p && len) explicit_bzero(p, len); }

static inline uint16_t pd_be16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static inline uint32_t pd_be32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline void pd_put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}
static inline void pd_put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--) { p[i] = (uint8_t)v; v >>= 8; }
}

/* Constant-time helpers: masks are 0 or all ones; no branch on their value. */
static inline uint32_t pd_ct_is_zero32(uint32_t x) { return (uint32_t)0 - ((~x & (x - 1)) >> 31); }
static inline uint32_t pd_ct_eq32(uint32_t a, uint32_t b) { return pd_ct_is_zero32(a ^ b); }
static inline uint32_t pd_ct_lt32(uint32_t a, uint32_t b) /* a < b, both < 2^31 */
{ return (uint32_t)0 - ((a - b) >> 31); }
static inline uint8_t pd_ct_sel8(uint32_t mask, uint8_t a, uint8_t b) { return (uint8_t)((mask & a) | (~mask & b)); }
/** 0 when equal, all ones otherwise; time depends on len only. */
static inline uint32_t pd_ct_memneq(const void *a, const void *b, size_t len)
{
	const uint8_t *x = a, *y = b; uint32_t d = 0;
	for (size_t i = 0; i < len; i++) d |= (uint32_t)(x[i] ^ y[i]);
	return ~pd_ct_is_zero32(d);
}

/** Format a sentence into buf (NULL-safe); returns err for `return pd_fail(...)`. */
PD_HIDDEN int pd_fail(char *buf, size_t len, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/** What an OpenSSL call that just failed on this thread means: -ENOMEM when
 *  its error queue holds an allocation failure (the ordinary or the secure
 *  heap: a full secmem-size must be reported as such), else `otherwise`.
 *  Empties the thread's queue either way. */
PD_HIDDEN int pd_ossl_error(int otherwise);

/** Hex-encode n bytes into out (2n+1 bytes). */
PD_HIDDEN void pd_hex(char *out, const uint8_t *in, size_t n);
