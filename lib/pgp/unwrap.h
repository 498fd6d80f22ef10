/* SPDX-License-Identifier: MIT */
/*
 * PKESK parsing and session-key recovery [runs on worker threads].
 *
 * Oracle resistance: every secret-dependent failure (padding, algorithm
 * octet, length, checksum, key-wrap check) yields *ok_mask = 0 and a
 * pseudo-random session key derived from the key's ir_secret and the PKESK
 * (implicit rejection), computed in the same time as a success.  Only
 * public problems (unknown algorithm, malformed MPI, key/PKESK algorithm
 * mismatch) return an error.
 */
#pragma once
#include "pgp/key.h"
#include "worker.h"

struct pd_pkesk {
	uint8_t version;        /* 3 or 6 */
	uint8_t pk_algo;
	bool wildcard;
	uint8_t keyid[8];       /* v3: as written; v6: derived from fpr (v4: low 8, v6: high 8) */
	uint8_t key_version;    /* v6 PKESK: 4 or 6 (0 for wildcard) */
	uint8_t fpr_len;
	uint8_t fpr[32];
	const uint8_t *fields;  /* algorithm-specific fields (points into the packet body) */
	size_t fields_len;
};

struct pd_sesskey {          /* kept in secure memory by its owner */
	uint8_t algo;            /* symmetric algorithm id; 0 = not bound (v5/v6 SKESK):
	                          * the container's cipher decides, len must match it */
	uint8_t len;             /* key length in octets */
	uint8_t key[32];
};

/* The cipher of a random key that goes on when no trial ran (public):
 * AES-256.  A v3 PKESK's rejection key, whose cipher a real key would
 * carry inside the secret payload, draws its cipher instead (unwrap.c,
 * make_fallback), so that which cipher the container's pass runs does not
 * say whether the decode passed. */
#define PD_IR_ALGO_V3 9

/** Parse a PKESK packet body (v3 or v6).  PD_EUNSUPPORTED for other
 * versions, PD_EMALFORMED for a short body. */
PD_HIDDEN int pd_pkesk_parse(const uint8_t *body, size_t len, struct pd_pkesk *ret);

/** Recover the session key of p with k.  sym_algo: the cipher the
 * container names, else 0.  Required for v6 PKESKs (SEIPD v2 header; the
 * key length must match it); for v3 PKESKs 0 (SEIPD v1) or the OCB
 * packet's cipher, which the algorithm octet must then equal.
 * Returns 0 and *ok_mask = ~0 (real key) or 0 (pseudo-random key in *out),
 * or a negative error for public reasons: PD_ENOKEY when p's algorithm is
 * not k's, PD_EUNSUPPORTED (algorithm, curve, KDF or v6 sym_algo), and
 * PD_EMALFORMED (MPI or point encoding, lengths, c >= n); *out untouched.
 * The pseudo-random key is HMAC-SHA256(k->ir_secret, p->fields) truncated
 * to its length: sym_algo when given, else algorithm 9 (32 octets) for v3
 * RSA/ElGamal/ECDH and the cleartext algorithm for v3 X25519/X448. */
PD_HIDDEN int pd_unwrap(struct pd_worker *w, const struct pd_key *k, const struct pd_pkesk *p,
                        uint8_t sym_algo, struct pd_sesskey *out, uint32_t *ok_mask);

/** Constant-time EME-PKCS1-v1_5 + OpenPGP session-key decode of em (k octets).
 * v3: em carries algo || key || csum16.  Writes *out and returns the ok
 * mask; sym_algo != 0 demands that algorithm (v6, no algo octet).  On
 * failure *out holds fallback (the caller's pseudo-random key). */
PD_HIDDEN uint32_t pd_pkcs1_decode_sesskey(const uint8_t *em, size_t k, uint8_t sym_algo,
                                           const struct pd_sesskey *fallback, struct pd_sesskey *out);
