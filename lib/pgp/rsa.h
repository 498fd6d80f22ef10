/* SPDX-License-Identifier: MIT */
/*
 * The RSA backend interface: the one private-key operation on the hot path.
 * Two backends: OpenSSL libcrypto (EVP_PKEY_decrypt, RSA_NO_PADDING, key in
 * OpenSSL's secure heap, one pre-initialised EVP_PKEY_CTX per worker per key)
 * and libgcrypt (CRT with blinding on secure MPIs, no S-expression per
 * message: see pgp/rsa.c).  Both return the raw
 * m = c^d mod n; the PKCS#1 v1.5 check is done by the caller in constant
 * time (pgp/unwrap.c), never by the backend.
 */
#pragma once
#include "pgp/key.h"

/** Default backend: the environment variable PD_RSA_BACKEND=openssl|gcrypt
 * if set (the tests run everything against both), else the build's meson
 * option rsa_backend (PD_RSA_DEFAULT_BACKEND in pd-config.h). */
PD_HIDDEN enum pd_rsa_backend pd_rsa_default_backend(void);
/** Prepare k (n, e, d, p, q, u set) for its backend; checks n == p*q
 * (PD_EINTEGRITY if not), reorders p < q and recomputes u, and proves d
 * with one private-key round trip. */
PD_HIDDEN int pd_rsa_setup(struct pd_key *k, enum pd_rsa_backend backend);
/** Release backend state (called by pd_key_free()). */
PD_HIDDEN void pd_rsa_cleanup(struct pd_key *k);
/** out[0..klen) = c^d mod n, left-padded, klen = octets of n.  Fails only for
 * public reasons (c >= n, clen > klen) or resource errors.  worker selects
 * the per-worker contexts (k->slots or more: one-off ones); helper (may be
 * NULL) lets a large key's CRT halves run on two threads (see rsa.c). */
PD_HIDDEN int pd_rsa_decrypt_raw(const struct pd_key *k, unsigned worker, const struct pd_helper *helper,
                                 const uint8_t *c, size_t clen, uint8_t *out, size_t klen);
/** Tests only: the next split operation adds 1 to the result of its p half
 * (half 1) or q half (half 2) before recombination, as a hardware fault
 * would; the fault check must catch it.  0 disarms. */
PD_HIDDEN void pd__rsa_inject_fault(int half);
