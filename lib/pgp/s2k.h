/* SPDX-License-Identifier: MIT */
/*
 * String-to-key specifiers (RFC 9580 §3.7): simple, salted,
 * iterated+salted, Argon2, and the GnuPG extension 101 (no secret).
 * Costs are capped by pd_limits (iteration count, Argon2 memory).
 */
#pragma once
#include "internal.h"

struct pd_s2k {
	uint8_t type;           /* 0, 1, 3, 4, 101 */
	uint8_t hash;           /* OpenPGP hash id (0-3) */
	uint8_t salt[16];       /* 8 octets (1, 3) or 16 (4) */
	uint32_t count;         /* iterated: octets to hash (decoded) */
	uint8_t t, p, m;        /* Argon2 passes, parallelism, log2(memory KiB) */
	uint8_t gnu_mode;       /* 101: 1 gnu-dummy, 2 divert-to-card */
};

/** Parse a specifier at p (len octets available); *ret_used = its length. */
PD_HIDDEN int pd_s2k_parse(const uint8_t *p, size_t len, struct pd_s2k *ret, size_t *ret_used);
/** Derive outlen octets from pass; PD_ELIMIT if the cost exceeds lim. */
PD_HIDDEN int pd_s2k_derive(const struct pd_s2k *s, const char *pass, size_t passlen, uint8_t *out,
                            size_t outlen, const struct pd_limits *lim);
