/* SPDX-License-Identifier: MIT */
/* Algorithm id tables: OpenPGP numbers to libgcrypt numbers and names. */
#include <gcrypt.h>

#include "pgp/algo.h"

static const struct { int id; int gcry; uint8_t keylen, blklen; const char *name; } syms[] = {
	{ 1, GCRY_CIPHER_IDEA, 16, 8, "IDEA" },
	{ 2, GCRY_CIPHER_3DES, 24, 8, "3DES" },
	{ 3, GCRY_CIPHER_CAST5, 16, 8, "CAST5" },
	{ 4, GCRY_CIPHER_BLOWFISH, 16, 8, "BLOWFISH" },
	{ 7, GCRY_CIPHER_AES128, 16, 16, "AES128" },
	{ 8, GCRY_CIPHER_AES192, 24, 16, "AES192" },
	{ 9, GCRY_CIPHER_AES256, 32, 16, "AES256" },
	{ 10, GCRY_CIPHER_TWOFISH, 32, 16, "TWOFISH" },
	{ 11, GCRY_CIPHER_CAMELLIA128, 16, 16, "CAMELLIA128" },
	{ 12, GCRY_CIPHER_CAMELLIA192, 24, 16, "CAMELLIA192" },
	{ 13, GCRY_CIPHER_CAMELLIA256, 32, 16, "CAMELLIA256" },
};

static const struct { int id; int gcry; uint8_t len; } hashes[] = {
	{ 1, GCRY_MD_MD5, 16 }, { 2, GCRY_MD_SHA1, 20 }, { 3, GCRY_MD_RMD160, 20 },
	{ 8, GCRY_MD_SHA256, 32 }, { 9, GCRY_MD_SHA384, 48 }, { 10, GCRY_MD_SHA512, 64 },
	{ 11, GCRY_MD_SHA224, 28 }, { 12, GCRY_MD_SHA3_256, 32 }, { 14, GCRY_MD_SHA3_512, 64 },
};

static const struct {
	enum pd_curve c; uint8_t oid_len; uint8_t oid[10]; uint8_t fsize; const char *gcry; const char *name;
} curves[] = {
	{ PD_CURVE_P256, 8, { 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07 }, 32, "NIST P-256", "nistp256" },
	{ PD_CURVE_P384, 5, { 0x2B, 0x81, 0x04, 0x00, 0x22 }, 48, "NIST P-384", "nistp384" },
	{ PD_CURVE_P521, 5, { 0x2B, 0x81, 0x04, 0x00, 0x23 }, 66, "NIST P-521", "nistp521" },
	{ PD_CURVE_BP256, 9, { 0x2B, 0x24, 0x03, 0x03, 0x02, 0x08, 0x01, 0x01, 0x07 }, 32, "brainpoolP256r1", "brainpoolP256r1" },
	{ PD_CURVE_BP384, 9, { 0x2B, 0x24, 0x03, 0x03, 0x02, 0x08, 0x01, 0x01, 0x0B }, 48, "brainpoolP384r1", "brainpoolP384r1" },
	{ PD_CURVE_BP512, 9, { 0x2B, 0x24, 0x03, 0x03, 0x02, 0x08, 0x01, 0x01, 0x0D }, 64, "brainpoolP512r1", "brainpoolP512r1" },
	{ PD_CURVE_CV25519, 10, { 0x2B, 0x06, 0x01, 0x04, 0x01, 0x97, 0x55, 0x01, 0x05, 0x01 }, 32, "Curve25519", "cv25519" },
	{ PD_CURVE_ED25519_LEGACY, 9, { 0x2B, 0x06, 0x01, 0x04, 0x01, 0xDA, 0x47, 0x0F, 0x01 }, 32, "Ed25519", "ed25519" },
	{ PD_CURVE_X25519, 0, { 0 }, 32, "Curve25519", "x25519" },
	{ PD_CURVE_X448, 0, { 0 }, 56, "X448", "x448" },
	{ PD_CURVE_ED25519, 0, { 0 }, 32, "Ed25519", "ed25519" },
	{ PD_CURVE_ED448, 0, { 0 }, 57, "Ed448", "ed448" },
};

#define FIND(tab, key, field) \
	for (size_t i_ = 0; i_ < PD_ARRAY_SIZE(tab); i_++) if (tab[i_].key == (field))

int pd_sym_gcry(int algo) { FIND(syms, id, algo) return syms[i_].gcry; return 0; }
unsigned pd_sym_id(size_t i) { return i < PD_ARRAY_SIZE(syms) ? (unsigned)syms[i].id : 0; }
size_t pd_sym_keylen(int algo) { FIND(syms, id, algo) return syms[i_].keylen; return 0; }

uint32_t pd_sym_keylen_ct(uint8_t algo)
{
	uint32_t len = 0;
	for (size_t i = 0; i < PD_ARRAY_SIZE(syms); i++) /* every entry, no early exit */
		len |= pd_ct_eq32(algo, (uint32_t)syms[i].id) & syms[i].keylen;
	return len;
}
size_t pd_sym_blklen(int algo) { FIND(syms, id, algo) return syms[i_].blklen; return 0; }
const char *pd_sym_name(int algo) { FIND(syms, id, algo) return syms[i_].name; return "unknown"; }
int pd_hash_gcry(int algo) { FIND(hashes, id, algo) return hashes[i_].gcry; return 0; }
size_t pd_hash_len(int algo) { FIND(hashes, id, algo) return hashes[i_].len; return 0; }

int pd_aead_gcry_mode(int aead)
{
	switch (aead) {
	case PD_AEAD_EAX: return GCRY_CIPHER_MODE_EAX;
	case PD_AEAD_OCB: return GCRY_CIPHER_MODE_OCB;
	case PD_AEAD_GCM: return GCRY_CIPHER_MODE_GCM;
	default: return 0;
	}
}

size_t pd_aead_noncelen(int aead)
{
	switch (aead) {
	case PD_AEAD_EAX: return 16;
	case PD_AEAD_OCB: return 15;
	case PD_AEAD_GCM: return 12;
	default: return 0;
	}
}

const char *pd_aead_name(int aead)
{
	switch (aead) {
	case 0: return "none";
	case PD_AEAD_EAX: return "EAX";
	case PD_AEAD_OCB: return "OCB";
	case PD_AEAD_GCM: return "GCM";
	default: return "unknown";
	}
}

const char *pd_pk_name(int algo)
{
	switch (algo) {
	case 0: return "password";
	case PD_PK_RSA: case PD_PK_RSA_E: return "RSA";
	case PD_PK_ELGAMAL: return "ElGamal";
	case PD_PK_ECDH: return "ECDH";
	case PD_PK_X25519: return "X25519";
	case PD_PK_X448: return "X448";
	case PD_PK_DSA: return "DSA";
	case PD_PK_ECDSA: return "ECDSA";
	case PD_PK_EDDSA_LEGACY: return "EdDSALegacy";
	case PD_PK_ED25519: return "Ed25519";
	case PD_PK_ED448: return "Ed448";
	default: return "unknown";
	}
}

const char *pd_compress_name(int algo)
{
	switch (algo) {
	case 0: return "uncompressed";
	case 1: return "ZIP";
	case 2: return "ZLIB";
	case 3: return "BZIP2";
	default: return "unknown";
	}
}

enum pd_curve pd_curve_from_oid(const uint8_t *oid, size_t len)
{
	for (size_t i = 0; i < PD_ARRAY_SIZE(curves); i++)
		if (curves[i].oid_len && curves[i].oid_len == len && memcmp(curves[i].oid, oid, len) == 0)
			return curves[i].c;
	return PD_CURVE_NONE;
}

const uint8_t *pd_curve_oid(enum pd_curve c, size_t *ret_len)
{
	FIND(curves, c, c) { *ret_len = curves[i_].oid_len; return curves[i_].oid; }
	*ret_len = 0;
	return NULL;
}

const char *pd_curve_gcry_name(enum pd_curve c) { FIND(curves, c, c) return curves[i_].gcry; return NULL; }
const char *pd_curve_name(enum pd_curve c) { FIND(curves, c, c) return curves[i_].name; return ""; }
size_t pd_curve_fsize(enum pd_curve c) { FIND(curves, c, c) return curves[i_].fsize; return 0; }
