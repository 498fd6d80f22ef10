/* SPDX-License-Identifier: MIT */
/*
 * The ECDH backend interface: the one secret-scalar operation of an ECDH,
 * X25519 or X448 PKESK, the shared secret of the key's scalar and the
 * sender's ephemeral point.  Two backends: OpenSSL libcrypto (one EVP_PKEY
 * per key with the scalar in OpenSSL's secure heap, one derive-initialised
 * EVP_PKEY_CTX per worker per key, EVP_PKEY_derive) and libgcrypt
 * (gcry_mpi_ec_mul with the key's secure scalar on a context of the curve's
 * name, for the Weierstrass curves: the Montgomery ones,
 * X25519, X448 and cv25519, go through OpenSSL with either backend, since
 * libgcrypt 1.10's X25519/X448 crashes when an allocation fails, see
 * pgp/ecdh.c).  The KDF, key unwrap and every secret-dependent check stay
 * with the caller (pgp/unwrap.c), the same for both.
 */
#pragma once
#include "pgp/key.h"

/** Default backend: the environment variable PD_ECDH_BACKEND=openssl|gcrypt
 * if set (the tests run everything against both), else the build's meson
 * option ecdh_backend (PD_ECDH_DEFAULT_BACKEND in pd-config.h). */
PD_HIDDEN enum pd_ecdh_backend pd_ecdh_default_backend(void);
/** Prepare k (an ECDH/X25519/X448 key) for backend.  For OpenSSL, and for
 * a cv25519/X25519/X448 key whatever the backend, builds its EVP_PKEY and
 * checks that OpenSSL derives the key's public key from its secret
 * (PD_EINTEGRITY if not; PD_EMALFORMED for a cv25519 point without its
 * 0x40 prefix, -ENOMEM); a NIST/brainpool secret must have checked out
 * against its public key already.  PD_EUNSUPPORTED for a curve the
 * backend lacks. */
PD_HIDDEN int pd_ecdh_setup(struct pd_key *k, enum pd_ecdh_backend backend);
/** Release backend state (called by pd_key_free()). */
PD_HIDDEN void pd_ecdh_cleanup(struct pd_key *k);
/**
 * The shared secret of k and the peer's point into out[out_len]:
 * - cv25519, X25519, X448: peer is the native u-coordinate (32 or 56
 *   octets), out the native shared secret of the same size.  A point of
 *   small order gives an all-zero out and returns 0 on both backends (the
 *   caller folds that into its reject mask; OpenSSL's refusal of it is
 *   turned into the same all-zero output here, never an error);
 * - NIST/brainpool: peer is 04 || x || y, out the x coordinate of the shared
 *   point (out_len = field size).  A point not on the curve is a public
 *   fact: PD_EMALFORMED.
 * Other errors are for public reasons or resources only.  worker selects
 * the per-worker context (k->slots or more: a one-off one).
 */
PD_HIDDEN int pd_ecdh_derive(const struct pd_key *k, unsigned worker, const uint8_t *peer, size_t peer_len,
                             uint8_t *out, size_t out_len);
