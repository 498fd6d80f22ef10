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
/** 0 if what s costs stays within the per-derivation caps of lim (NULL: no
 * caps): iteration count, Argon2 memory, passes and lanes; else PD_ELIMIT. */
PD_HIDDEN int pd_s2k_check(const struct pd_s2k *s, const struct pd_limits *lim);
/** The work one derivation of s into keylen octets takes, in KiB hashed
 * (iterated S2K: its count, once per hash-sized block of key; Argon2:
 * memory x passes / 2, which runs about twice as fast per octet on
 * libgcrypt 1.10); what pd_limits.max_kdf_mib caps per message. */
PD_HIDDEN uint64_t pd_s2k_work_kib(const struct pd_s2k *s, size_t keylen);
/** Derive outlen octets from pass; PD_ELIMIT if the cost exceeds lim. */
PD_HIDDEN int pd_s2k_derive(const struct pd_s2k *s, const char *pass, size_t passlen, uint8_t *out,
                            size_t outlen, const struct pd_limits *lim);
