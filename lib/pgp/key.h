/* SPDX-License-Identifier: MIT */
/*
 * One unlocked secret (sub)key, as the key ring holds it, and the key ring's
 * lookup functions.  Keys are immutable after pd_keyring_add() returns, with
 * one exception: rsa_ctx[i], rsa_crtw[i] and ecdh_ctx[i] (i < slots) are
 * filled lazily by worker i only (each worker touches its own slot, so no
 * lock is needed); workers with an index of slots or more make one-off
 * state per operation.
 *
 * Secret material lives in libgcrypt secure memory: the MPIs are created
 * with gcry_mpi_snew()/from secure buffers, native scalars and the
 * implicit-rejection secret are gcry_malloc_secure() buffers.
 */
#pragma once
#include <stdatomic.h>

#include <gcrypt.h>

#include "pgp/algo.h"

struct pd_key {
	uint8_t version;          /* 4 or 6 */
	uint8_t pk_algo;          /* enum pd_pk_algo */
	uint8_t fpr_len;          /* 20 or 32 */
	uint8_t fpr[32];
	uint8_t keyid[8];
	uint8_t primary_fpr_len;
	uint8_t primary_fpr[32];
	uint32_t created;
	uint16_t bits;            /* RSA/ElGamal modulus bits, curve bits for ECC */
	/* The addresses of its certificate's User IDs, normalised
	 * (pd_address_norm), a NUL after each; NULL when it has none.  What
	 * binds the key to mail recipients (pd_msg_bind). */
	char *addrs;
	uint16_t addrs_len;

	/* public material */
	gcry_mpi_t n, e;          /* RSA */
	gcry_mpi_t p, g, y;       /* ElGamal */
	enum pd_curve curve;      /* ECDH (18), X25519 (25), X448 (26) */
	uint8_t q[140];           /* ECC public point as stored: 04||x||y, 40||x, or native */
	size_t q_len;
	uint8_t kdf_hash;         /* ECDH KDF hash id (from the key, never the message) */
	uint8_t kdf_kek;          /* ECDH key-wrap cipher id */

	/* secret material (secure memory) */
	gcry_mpi_t d, sp, sq, u;  /* RSA d, p, q, u (u = p^-1 mod q) */
	gcry_mpi_t x;             /* ElGamal x; NIST/brainpool ECDH scalar */
	uint8_t *native_sk;       /* cv25519/X25519/X448 scalar, native little-endian */
	size_t native_sk_len;
	uint8_t *ir_secret;       /* 32 random octets, in OpenSSL's secure heap: key for implicit-rejection session keys */

	/* Per-worker slots of the arrays below (the ring's pd_keyring_set_workers). */
	unsigned slots;

	/* RSA backend state (pgp/rsa.c) */
	enum pd_rsa_backend rsa_backend;
	void *rsa_pkey;           /* EVP_PKEY * (OpenSSL backend) or gcry_sexp_t (libgcrypt) */
	void **rsa_ctx;           /* OpenSSL: slots EVP_PKEY_CTX *, per worker, lazily; else NULL */
	void *rsa_crt;            /* OpenSSL backend: CRT values for split operations, or NULL */
	void **rsa_crtw;          /* OpenSSL: slots per-worker split states (BN_CTXs, blinding), lazily */
	atomic_bool rsa_evp_suspect; /* an EVP operation failed: OpenSSL's blinding of the key may be
	                                wrong, every EVP result is checked from then on (pgp/rsa.c) */

	/* ECDH backend state (pgp/ecdh.c), for ECDH/X25519/X448 keys */
	enum pd_ecdh_backend ecdh_backend; /* 0 until pd_ecdh_setup() */
	void *ecdh_pkey;          /* EVP_PKEY * (OpenSSL backend; cv25519/X25519/X448 on both), else NULL */
	void **ecdh_ctx;          /* OpenSSL: slots per-worker contexts (pgp/ecdh.c), lazily */
};

/** An address as keys and pd_msg_bind() compare it: in (n octets) is
 * local@domain, or @domain when domain_ok; exactly one '@', a non-empty
 * domain, no space, control octet, '<' or '>', at most PD_ADDRESS_MAX
 * octets.  Writes it lowercased (ASCII) and NUL-terminated to out (room
 * for PD_ADDRESS_MAX + 1) and returns its length; 0 when it is not one. */
PD_HIDDEN size_t pd_address_norm(const char *in, size_t n, bool domain_ok, char *out);
/** Whether k is bound to every one of the n normalised values of vals
 * (a NUL after each): local@domain when one of its addresses is that
 * one, @domain when one of its addresses is in that domain.  True when
 * n is 0. */
PD_HIDDEN bool pd_key_bound(const struct pd_key *k, const char *vals, size_t n);

/** Free a key and wipe its secrets; accepts NULL, returns NULL. */
PD_HIDDEN struct pd_key *pd_key_free(struct pd_key *k);

/** Tests: a lower cap of keys a ring holds (pd_keyring_max_keys; 0: the
 * default, 100,000).  Returns the cap it replaced. */
PD_HIDDEN size_t pd__keyring_set_max_keys(size_t n);
/** Number of keys in the ring and the i-th one. */
PD_HIDDEN size_t pd__keyring_n(const struct pd_keyring *kr);
PD_HIDDEN const struct pd_key *pd__keyring_get(const struct pd_keyring *kr, size_t i);
/** The nth key (0, 1, ...) whose key ID is keyid, in ring order; NULL past
 * the last.  A binary search: O(log keys). */
PD_HIDDEN const struct pd_key *pd__keyring_by_keyid(const struct pd_keyring *kr, const uint8_t keyid[8],
                                                    size_t nth);
