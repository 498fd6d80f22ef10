/* SPDX-License-Identifier: MIT */
/*
 * OpenPGP algorithm ids and their libgcrypt counterparts (RFC 9580 §9).
 * The ids 11-13 (Camellia) do not coincide with libgcrypt's: always map.
 */
#pragma once
#include "internal.h"

enum pd_pk_algo {
	PD_PK_RSA = 1, PD_PK_RSA_E = 2, PD_PK_RSA_S = 3, PD_PK_ELGAMAL = 16, PD_PK_DSA = 17,
	PD_PK_ECDH = 18, PD_PK_ECDSA = 19, PD_PK_EDDSA_LEGACY = 22, PD_PK_X25519 = 25,
	PD_PK_X448 = 26, PD_PK_ED25519 = 27, PD_PK_ED448 = 28,
};
enum pd_aead_algo { PD_AEAD_EAX = 1, PD_AEAD_OCB = 2, PD_AEAD_GCM = 3 };
enum pd_hash_algo {
	PD_HASH_MD5 = 1, PD_HASH_SHA1 = 2, PD_HASH_RMD160 = 3, PD_HASH_SHA256 = 8,
	PD_HASH_SHA384 = 9, PD_HASH_SHA512 = 10, PD_HASH_SHA224 = 11, PD_HASH_SHA3_256 = 12,
	PD_HASH_SHA3_512 = 14,
};
enum pd_curve {
	PD_CURVE_NONE = 0, PD_CURVE_P256, PD_CURVE_P384, PD_CURVE_P521, PD_CURVE_BP256,
	PD_CURVE_BP384, PD_CURVE_BP512, PD_CURVE_CV25519, /* Curve25519Legacy (ECDH 18) */
	PD_CURVE_ED25519_LEGACY, PD_CURVE_X25519, PD_CURVE_X448, PD_CURVE_ED25519, PD_CURVE_ED448,
};

/** libgcrypt cipher id for an OpenPGP symmetric id, 0 if unknown/invalid. */
PD_HIDDEN int pd_sym_gcry(int algo);
/** The i-th symmetric algorithm id this library knows (in increasing
 * order), 0 past the last: loops over the candidates without 255 lookups. */
PD_HIDDEN unsigned pd_sym_id(size_t i);
/** Key length in octets (0 if unknown). */
PD_HIDDEN size_t pd_sym_keylen(int algo);
/** The same for a secret algo octet, in constant time (0 if unknown). */
PD_HIDDEN uint32_t pd_sym_keylen_ct(uint8_t algo);
/** Block length in octets (0 if unknown). */
PD_HIDDEN size_t pd_sym_blklen(int algo);
/** libgcrypt md id for an OpenPGP hash id, 0 if unknown. */
PD_HIDDEN int pd_hash_gcry(int algo);
/** Digest length in octets (0 if unknown). */
PD_HIDDEN size_t pd_hash_len(int algo);
/** libgcrypt cipher mode for an AEAD id, 0 if unknown. */
PD_HIDDEN int pd_aead_gcry_mode(int aead);
/** Nonce length for an AEAD id (EAX 16, OCB 15, GCM 12), 0 if unknown. */
PD_HIDDEN size_t pd_aead_noncelen(int aead);
/** Curve from the OID octets (DER without tag/length), PD_CURVE_NONE if unknown. */
PD_HIDDEN enum pd_curve pd_curve_from_oid(const uint8_t *oid, size_t len);
/** OID octets of a curve (for the ECDH KDF parameters); sets *ret_len. */
PD_HIDDEN const uint8_t *pd_curve_oid(enum pd_curve c, size_t *ret_len);
/** libgcrypt curve name ("NIST P-256", "Curve25519", ...), NULL if none. */
PD_HIDDEN const char *pd_curve_gcry_name(enum pd_curve c);
/** Printable curve name ("nistp256", "cv25519", ...). */
PD_HIDDEN const char *pd_curve_name(enum pd_curve c);
/** Field size in octets (32, 48, 66, 32, 48, 64, 32, ...). */
PD_HIDDEN size_t pd_curve_fsize(enum pd_curve c);
