/* SPDX-License-Identifier: MIT */
/*
 * The key ring: transferable secret keys (RFC 9580 §10.2) parsed, unlocked
 * once with the passphrase, validated against their public halves and kept
 * in load order.  Only decryption-capable (sub)keys are kept; signing-only
 * keys are parsed so that their fingerprints (primary_fpr of the subkeys
 * that follow) are known.  User IDs, signatures and trust packets are
 * skipped unverified: the operator vouches for the key file.
 *
 * pd_keyring_add() is all or nothing: keys are collected in a batch and
 * appended only when the whole input parsed and unlocked.
 */
#include <gcrypt.h>

#include "armor.h"
#include "pgp/hkdf.h"
#include "pgp/key.h"
#include "pgp/rsa.h"
#include "pgp/s2k.h"
#include "worker.h"

#define MAX_KEY_PACKET (1u << 20) /* largest secret/public key packet accepted */
#define MAX_MPI_BITS 16392u       /* RSA/ElGamal up to 16384 bits (and a little slack) */
#define MAX_KEYS 4096             /* (sub)keys in one ring */
/* Key files are configuration, not attacker input, but still capped: the
 * RFC 9580 A.5 example (Argon2id, 2 GiB) must load.  Other S2K caps are
 * pd_limits_default()'s. */
#define KEYRING_MAX_ARGON2_KIB (1u << 21)

/* The key IDs of the ring, sorted (then by position): a message's PKESKs
 * are matched against the ring with a binary search, so naming keys costs
 * log(keys) per PKESK however many keys an audit host holds. */
struct kid {
	uint64_t id;              /* the key ID, big-endian as a number */
	size_t idx;               /* into keys[] */
};

struct pd_keyring {
	enum pd_rsa_backend backend;
	struct pd_key **keys;
	size_t n, cap;
	struct kid *ids;          /* n of them, sorted; cap of room */
};

struct batch {
	struct pd_key **keys;
	size_t n, cap;
};

/* Per-call parse context. */
struct ctx {
	const struct pd_keyring *kr;
	const char *pass;
	size_t passlen;
	char *detail;
	size_t detail_len;
	uint8_t primary_fpr[32];
	uint8_t primary_fpr_len;
	unsigned n_secret;       /* secret key packets seen */
	unsigned n_stub;         /* without secret (gnu-dummy, card) */
	unsigned n_unsupported;  /* skipped: unknown version or algorithm */
	unsigned n_signing;      /* signing-only secret keys */
	unsigned n_dup;          /* decryption keys already held */
};

/* ------------------------------------------------------------------ */
/* Small readers over one packet body: never past end. */

struct rd {
	const uint8_t *p;
	size_t len, off;
};

static int rd_u8(struct rd *r, uint8_t *v)
{
	if (r->off >= r->len)
		return PD_EMALFORMED;
	*v = r->p[r->off++];
	return 0;
}

static int rd_bytes(struct rd *r, size_t n, const uint8_t **v)
{
	if (n > r->len - r->off)
		return PD_EMALFORMED;
	*v = r->p + r->off;
	r->off += n;
	return 0;
}

/* An MPI: returns its magnitude octets (leading zero octets stripped, as a
 * non-minimal v4 encoding may carry them).  v6 requires the exact bit count. */
static int rd_mpi(struct rd *r, bool strict, const uint8_t **v, size_t *vlen)
{
	const uint8_t *h;
	int e = rd_bytes(r, 2, &h);
	if (e)
		return e;
	unsigned bits = pd_be16(h);
	if (bits > MAX_MPI_BITS)
		return PD_ELIMIT;
	size_t n = (bits + 7) / 8;
	e = rd_bytes(r, n, v);
	if (e)
		return e;
	while (n > 0 && (*v)[0] == 0) {
		(*v)++;
		n--;
	}
	if (strict) {
		unsigned actual = n ? (unsigned)(8 * (n - 1)) + 1 : 0;
		if (n)
			for (uint8_t top = (*v)[0]; top >>= 1;)
				actual++;
		if (actual != bits)
			return PD_EMALFORMED;
	}
	*vlen = n;
	return 0;
}

static int mpi_from(const uint8_t *v, size_t n, bool secure, gcry_mpi_t *ret)
{
	gcry_mpi_t m = secure ? gcry_mpi_snew(0) : gcry_mpi_new(0);
	if (!m)
		return -ENOMEM;
	if (n) {
		/* Scanning from a secure buffer yields a secure MPI; v is secure
		 * whenever secure is asked for (see parse_secret). */
		gcry_mpi_t t;
		if (gcry_mpi_scan(&t, GCRYMPI_FMT_USG, v, n, NULL)) {
			gcry_mpi_release(m);
			return PD_EMALFORMED;
		}
		gcry_mpi_set(m, t);
		gcry_mpi_release(t);
	}
	*ret = m;
	return 0;
}

/* ------------------------------------------------------------------ */

struct pd_key *pd_key_free(struct pd_key *k)
{
	if (!k)
		return NULL;
	pd_rsa_cleanup(k);
	gcry_mpi_release(k->n);
	gcry_mpi_release(k->e);
	gcry_mpi_release(k->p);
	gcry_mpi_release(k->g);
	gcry_mpi_release(k->y);
	/* gcry_mpi_release wipes the limbs of secure MPIs. */
	gcry_mpi_release(k->d);
	gcry_mpi_release(k->sp);
	gcry_mpi_release(k->sq);
	gcry_mpi_release(k->u);
	gcry_mpi_release(k->x);
	if (k->native_sk) {
		pd_wipe(k->native_sk, k->native_sk_len);
		gcry_free(k->native_sk);
	}
	if (k->ir_secret) {
		pd_wipe(k->ir_secret, 32);
		gcry_free(k->ir_secret);
	}
	pd_wipe(k, sizeof(*k));
	free(k);
	return NULL;
}

static bool is_decryption_algo(int a)
{
	return a == PD_PK_RSA || a == PD_PK_RSA_E || a == PD_PK_ELGAMAL || a == PD_PK_ECDH ||
	       a == PD_PK_X25519 || a == PD_PK_X448;
}

static unsigned curve_bits(enum pd_curve c)
{
	switch (c) {
	case PD_CURVE_P521: return 521;
	case PD_CURVE_CV25519: case PD_CURVE_X25519: case PD_CURVE_ED25519_LEGACY: case PD_CURVE_ED25519: return 255;
	case PD_CURVE_X448: return 448;
	case PD_CURVE_ED448: return 448;
	default: return (unsigned)pd_curve_fsize(c) * 8;
	}
}

/* Public fields of algorithm a; fills k (public MPIs, curve, q, kdf) for
 * decryption algorithms.  Unknown algorithm: PD_EUNSUPPORTED. */
static int parse_public(struct rd *r, struct pd_key *k, bool strict)
{
	const uint8_t *v;
	size_t n;
	int e;
	uint8_t b;

	switch (k->pk_algo) {
	case PD_PK_RSA: case PD_PK_RSA_E: case PD_PK_RSA_S:
		if ((e = rd_mpi(r, strict, &v, &n)))
			return e;
		if (k->pk_algo != PD_PK_RSA_S && (e = mpi_from(v, n, false, &k->n)))
			return e;
		k->bits = (uint16_t)PD_MIN(n * 8, 65535);
		if (n)
			for (uint8_t t = v[0]; !(t & 0x80); t <<= 1)
				k->bits--;
		if ((e = rd_mpi(r, strict, &v, &n)))
			return e;
		if (k->pk_algo != PD_PK_RSA_S && (e = mpi_from(v, n, false, &k->e)))
			return e;
		return 0;
	case PD_PK_DSA:
		for (int i = 0; i < 4; i++)
			if ((e = rd_mpi(r, strict, &v, &n)))
				return e;
		return 0;
	case PD_PK_ELGAMAL:
		if ((e = rd_mpi(r, strict, &v, &n)) || (e = mpi_from(v, n, false, &k->p)))
			return e;
		k->bits = (uint16_t)gcry_mpi_get_nbits(k->p);
		if ((e = rd_mpi(r, strict, &v, &n)) || (e = mpi_from(v, n, false, &k->g)))
			return e;
		if ((e = rd_mpi(r, strict, &v, &n)) || (e = mpi_from(v, n, false, &k->y)))
			return e;
		return 0;
	case PD_PK_ECDH: case PD_PK_ECDSA: case PD_PK_EDDSA_LEGACY: {
		const uint8_t *oid;
		if ((e = rd_u8(r, &b)))
			return e;
		if (b == 0 || b == 0xFF)
			return PD_EMALFORMED;
		if ((e = rd_bytes(r, b, &oid)))
			return e;
		k->curve = pd_curve_from_oid(oid, b);
		if ((e = rd_mpi(r, false, &v, &n)))
			return e;
		if (k->pk_algo == PD_PK_ECDH) {
			const uint8_t *kdf;
			if ((e = rd_u8(r, &b)))
				return e;
			if (b < 3 || (e = rd_bytes(r, b, &kdf)))
				return e ? e : PD_EMALFORMED;
			if (kdf[0] != 1)
				return PD_EUNSUPPORTED;
			k->kdf_hash = kdf[1];
			k->kdf_kek = kdf[2];
			if (!pd_hash_len(k->kdf_hash) || pd_hash_len(k->kdf_hash) < 32 ||
			    (k->kdf_kek != 7 && k->kdf_kek != 8 && k->kdf_kek != 9))
				return PD_EUNSUPPORTED;
			if (k->curve == PD_CURVE_NONE || k->curve == PD_CURVE_ED25519_LEGACY)
				return PD_EUNSUPPORTED;
			if (n > sizeof(k->q))
				return PD_EMALFORMED;
			memcpy(k->q, v, n);
			k->q_len = n;
		}
		k->bits = (uint16_t)curve_bits(k->curve);
		return 0;
	}
	case PD_PK_X25519: case PD_PK_X448: case PD_PK_ED25519: case PD_PK_ED448: {
		size_t len = k->pk_algo == PD_PK_X25519 || k->pk_algo == PD_PK_ED25519 ? 32
		           : k->pk_algo == PD_PK_X448 ? 56 : 57;
		if ((e = rd_bytes(r, len, &v)))
			return e;
		k->curve = k->pk_algo == PD_PK_X25519 ? PD_CURVE_X25519 : k->pk_algo == PD_PK_X448 ? PD_CURVE_X448
		         : k->pk_algo == PD_PK_ED25519 ? PD_CURVE_ED25519 : PD_CURVE_ED448;
		memcpy(k->q, v, len);
		k->q_len = len;
		k->bits = (uint16_t)curve_bits(k->curve);
		return 0;
	}
	default:
		return PD_EUNSUPPORTED;
	}
}

static void fingerprint(struct pd_key *k, const uint8_t *body, size_t publen)
{
	uint8_t hdr[5];
	gcry_md_hd_t h;
	if (k->version == 4) {
		hdr[0] = 0x99;
		hdr[1] = (uint8_t)(publen >> 8);
		hdr[2] = (uint8_t)publen;
		if (gcry_md_open(&h, GCRY_MD_SHA1, 0))
			return;
		gcry_md_write(h, hdr, 3);
	} else {
		hdr[0] = 0x9B;
		pd_put_be32(hdr + 1, (uint32_t)publen);
		if (gcry_md_open(&h, GCRY_MD_SHA256, 0))
			return;
		gcry_md_write(h, hdr, 5);
	}
	gcry_md_write(h, body, publen);
	k->fpr_len = k->version == 4 ? 20 : 32;
	memcpy(k->fpr, gcry_md_read(h, 0), k->fpr_len);
	gcry_md_close(h);
	memcpy(k->keyid, k->version == 4 ? k->fpr + 12 : k->fpr, 8);
}

/* ------------------------------------------------------------------ */
/* Secret fields (cleartext, in secure memory), exact length. */

static int parse_secret_fields(struct pd_key *k, const uint8_t *s, size_t slen, size_t *ret_used)
{
	struct rd r = { s, slen, 0 };
	const uint8_t *v;
	size_t n;
	int e;
	bool strict = k->version == 6;

	switch (k->pk_algo) {
	case PD_PK_RSA: case PD_PK_RSA_E:
		if ((e = rd_mpi(&r, strict, &v, &n)) || (e = mpi_from(v, n, true, &k->d)))
			return e;
		if ((e = rd_mpi(&r, strict, &v, &n)) || (e = mpi_from(v, n, true, &k->sp)))
			return e;
		if ((e = rd_mpi(&r, strict, &v, &n)) || (e = mpi_from(v, n, true, &k->sq)))
			return e;
		if ((e = rd_mpi(&r, strict, &v, &n)) || (e = mpi_from(v, n, true, &k->u)))
			return e;
		break;
	case PD_PK_ELGAMAL:
		if ((e = rd_mpi(&r, strict, &v, &n)) || (e = mpi_from(v, n, true, &k->x)))
			return e;
		break;
	case PD_PK_ECDH:
		if ((e = rd_mpi(&r, strict, &v, &n)))
			return e;
		if (k->curve == PD_CURVE_CV25519) {
			/* Curve25519Legacy: big-endian MPI of the native scalar. */
			if (n > 32)
				return PD_EMALFORMED;
			k->native_sk = gcry_malloc_secure(32);
			if (!k->native_sk)
				return -ENOMEM;
			k->native_sk_len = 32;
			memset(k->native_sk, 0, 32);
			for (size_t i = 0; i < n; i++)
				k->native_sk[i] = v[n - 1 - i];
		} else {
			if (n > pd_curve_fsize(k->curve))
				return PD_EMALFORMED;
			if ((e = mpi_from(v, n, true, &k->x)))
				return e;
		}
		break;
	case PD_PK_X25519: case PD_PK_X448: {
		size_t len = k->pk_algo == PD_PK_X25519 ? 32 : 56;
		if ((e = rd_bytes(&r, len, &v)))
			return e;
		k->native_sk = gcry_malloc_secure(len);
		if (!k->native_sk)
			return -ENOMEM;
		k->native_sk_len = len;
		memcpy(k->native_sk, v, len);
		break;
	}
	default:
		return PD_EINTERNAL;
	}
	*ret_used = r.off;
	return 0;
}

static uint16_t csum16(const uint8_t *p, size_t n)
{
	uint32_t s = 0;
	for (size_t i = 0; i < n; i++)
		s += p[i];
	return (uint16_t)s;
}

/* Check the secret against the public key. */
static int validate(struct pd_key *k, enum pd_rsa_backend backend)
{
	switch (k->pk_algo) {
	case PD_PK_RSA: case PD_PK_RSA_E:
		return pd_rsa_setup(k, backend);
	case PD_PK_ELGAMAL: {
		/* Sane group first: libgcrypt aborts on a zero modulus. */
		unsigned pbits = gcry_mpi_get_nbits(k->p);
		if (pbits < 512 || pbits > MAX_MPI_BITS || !gcry_mpi_test_bit(k->p, 0) ||
		    gcry_mpi_cmp_ui(k->g, 1) <= 0 || gcry_mpi_cmp(k->g, k->p) >= 0 ||
		    gcry_mpi_cmp_ui(k->y, 1) <= 0 || gcry_mpi_cmp(k->y, k->p) >= 0)
			return PD_EUNSUPPORTED;
		if (gcry_mpi_cmp_ui(k->x, 1) <= 0 || gcry_mpi_cmp(k->x, k->p) >= 0)
			return PD_EINTEGRITY;
		gcry_mpi_t t = gcry_mpi_snew(0);
		if (!t)
			return -ENOMEM;
		gcry_mpi_powm(t, k->g, k->x, k->p);
		int ok = gcry_mpi_cmp(t, k->y) == 0;
		gcry_mpi_release(t);
		return ok ? 0 : PD_EINTEGRITY;
	}
	case PD_PK_ECDH:
		if (k->curve == PD_CURVE_CV25519) {
			uint8_t base[32] = { 9 }, pub[32];
			if (k->q_len != 33 || k->q[0] != 0x40)
				return PD_EMALFORMED;
			if (gcry_ecc_mul_point(GCRY_ECC_CURVE25519, pub, k->native_sk, base))
				return PD_EINTERNAL;
			return memcmp(pub, k->q + 1, 32) == 0 ? 0 : PD_EINTEGRITY;
		} else {
			/* ecc_check_secret_key in libgcrypt verifies Q == d*G. */
			gcry_sexp_t s;
			const char *name = pd_curve_gcry_name(k->curve);
			if (!name || k->q_len < 1 || k->q[0] != 0x04)
				return PD_EMALFORMED;
			if (gcry_sexp_build(&s, NULL, "(private-key(ecc(curve %s)(q%b)(d%m)))", name,
			                    (int)k->q_len, k->q, k->x))
				return -ENOMEM;
			gcry_error_t e = gcry_pk_testkey(s);
			gcry_sexp_release(s);
			return e ? PD_EINTEGRITY : 0;
		}
	case PD_PK_X25519: case PD_PK_X448: {
		uint8_t base[56] = { 0 }, pub[56];
		bool x448 = k->pk_algo == PD_PK_X448;
		base[0] = x448 ? 5 : 9;
		if (gcry_ecc_mul_point(x448 ? GCRY_ECC_CURVE448 : GCRY_ECC_CURVE25519, pub, k->native_sk, base))
			return PD_EINTERNAL;
		return memcmp(pub, k->q, k->q_len) == 0 ? 0 : PD_EINTEGRITY;
	}
	default:
		return PD_EINTERNAL;
	}
}

/* Decrypt the protected secret (usage 253/254/255/cipher id).  out is a
 * secure buffer of dlen octets; *ret_len is the plaintext length (for AEAD
 * the tag is removed). */
static int unprotect(struct ctx *c, const struct pd_key *k, uint8_t tag, uint8_t usage, uint8_t cipher,
                     uint8_t aead, const struct pd_s2k *s2k, const uint8_t *iv, size_t ivlen,
                     const uint8_t *pub, size_t publen, const uint8_t *data, size_t dlen,
                     uint8_t *out, size_t *ret_len)
{
	struct pd_limits lim;
	pd_limits_default(&lim);
	/* Key files come from the operator, not from senders: allow the
	 * RFC 9580 A.5 cost (2 GiB) that the message default refuses. */
	lim.max_argon2_kib = PD_MAX(lim.max_argon2_kib, KEYRING_MAX_ARGON2_KIB);
	lim.max_argon2_passes = lim.max_argon2_lanes = 0;
	size_t keylen = pd_sym_keylen(cipher);
	int galgo = pd_sym_gcry(cipher);
	uint8_t *kek = gcry_malloc_secure(64);
	gcry_cipher_hd_t h = NULL;
	gcry_error_t ge;
	int r;

	if (!kek)
		return -ENOMEM;
	r = pd_s2k_derive(s2k, c->pass, c->passlen, kek, keylen, &lim);
	if (r)
		goto out;
	if (usage == 253) {
		uint8_t info[4] = { (uint8_t)(0xC0 | tag), k->version, cipher, aead };
		uint8_t *ikm = gcry_malloc_secure(keylen);
		r = -ENOMEM;
		if (!ikm)
			goto out;
		memcpy(ikm, kek, keylen);
		r = pd_hkdf(GCRY_MD_SHA256, NULL, 0, ikm, keylen, info, 4, kek, keylen);
		pd_wipe(ikm, keylen);
		gcry_free(ikm);
		if (r)
			goto out;
		r = PD_EMALFORMED;
		if (dlen < 16)
			goto out;
		ge = gcry_cipher_open(&h, galgo, pd_aead_gcry_mode(aead), GCRY_CIPHER_SECURE);
		if (!ge)
			ge = gcry_cipher_setkey(h, kek, keylen);
		if (!ge)
			ge = gcry_cipher_setiv(h, iv, ivlen);
		/* AD = packet type octet || public key packet body, passed in one
		 * piece (OCB accepts split AD only at block multiples). */
		uint8_t *ad = malloc(1 + publen);
		if (!ad) {
			r = -ENOMEM;
			goto out;
		}
		ad[0] = (uint8_t)(0xC0 | tag);
		memcpy(ad + 1, pub, publen);
		if (!ge)
			ge = gcry_cipher_authenticate(h, ad, 1 + publen);
		free(ad);
		if (!ge)
			ge = gcry_cipher_final(h);
		if (!ge)
			ge = gcry_cipher_decrypt(h, out, dlen - 16, data, dlen - 16);
		if (!ge)
			ge = gcry_cipher_checktag(h, data + dlen - 16, 16);
		if (ge) {
			r = gcry_err_code(ge) == GPG_ERR_CHECKSUM ? PD_EBADPASS : pd_err_from_gcry(ge);
			pd_wipe(out, dlen);
			goto out;
		}
		*ret_len = dlen - 16;
		r = 0;
		goto out;
	}
	/* CFB without resync, IV from the packet. */
	ge = gcry_cipher_open(&h, galgo, GCRY_CIPHER_MODE_CFB, GCRY_CIPHER_SECURE);
	if (!ge)
		ge = gcry_cipher_setkey(h, kek, keylen);
	if (!ge)
		ge = gcry_cipher_setiv(h, iv, ivlen);
	if (!ge)
		ge = gcry_cipher_decrypt(h, out, dlen, data, dlen);
	if (ge) {
		r = pd_err_from_gcry(ge);
		goto out;
	}
	*ret_len = dlen;
	r = 0;
out:
	gcry_cipher_close(h);
	pd_wipe(kek, 64);
	gcry_free(kek);
	return r;
}

static const char *keyid_hex(const struct pd_key *k, char buf[17])
{
	pd_hex(buf, k->keyid, 8);
	return buf;
}

/* One secret key packet (tag 5 or 7).  *ret is the key if it is a usable
 * decryption key, NULL if it was parsed but is not kept. */
static int parse_secret_key(struct ctx *c, uint8_t tag, const uint8_t *body, size_t blen, struct pd_key **ret)
{
	struct rd r = { body, blen, 0 };
	struct pd_key *k;
	const uint8_t *v;
	uint8_t *plain = NULL;
	size_t plain_cap = 0, publen;
	char kid[17];
	int e;

	*ret = NULL;
	k = calloc(1, sizeof(*k));
	if (!k)
		return -ENOMEM;
	if ((e = rd_u8(&r, &k->version)))
		goto out;
	if (k->version != 4 && k->version != 6) {
		/* v5 (LibrePGP) and v3 keys are not supported: skipped, counted. */
		c->n_unsupported++;
		if (tag == 5)
			c->primary_fpr_len = 0;
		e = 0;
		goto out;
	}
	if ((e = rd_bytes(&r, 4, &v)))
		goto out;
	k->created = pd_be32(v);
	if ((e = rd_u8(&r, &k->pk_algo)))
		goto out;
	if (k->version == 6) {
		if ((e = rd_bytes(&r, 4, &v)))
			goto out;
		uint64_t pklen = pd_be32(v);
		if (pklen > r.len - r.off) {
			e = PD_EMALFORMED;
			goto out;
		}
		/* The public fields must fill pklen exactly. */
		struct rd pr = { body, r.off + (size_t)pklen, r.off };
		e = parse_public(&pr, k, true);
		if (e == PD_EUNSUPPORTED) {
			/* Known length: the fingerprint is still computable. */
			fingerprint(k, body, r.off + (size_t)pklen);
			if (tag == 5) {
				memcpy(c->primary_fpr, k->fpr, 32);
				c->primary_fpr_len = 32;
			}
			c->n_unsupported++;
			e = 0;
			goto out;
		}
		if (e)
			goto out;
		if (pr.off != pr.len) {
			e = PD_EMALFORMED;
			goto out;
		}
		r.off = pr.off;
	} else {
		e = parse_public(&r, k, false);
		if (e == PD_EUNSUPPORTED) {
			c->n_unsupported++;
			if (tag == 5)
				c->primary_fpr_len = 0;
			e = 0;
			goto out;
		}
		if (e)
			goto out;
		if (r.off > 0xFFFF) {
			e = PD_EMALFORMED;
			goto out;
		}
	}
	publen = r.off;
	fingerprint(k, body, publen);
	if (!k->fpr_len) {
		e = -ENOMEM;
		goto out;
	}
	if (tag == 5) {
		memcpy(c->primary_fpr, k->fpr, k->fpr_len);
		c->primary_fpr_len = k->fpr_len;
	}
	memcpy(k->primary_fpr, c->primary_fpr, c->primary_fpr_len);
	k->primary_fpr_len = c->primary_fpr_len;
	c->n_secret++;
	if (!is_decryption_algo(k->pk_algo)) {
		c->n_signing++;
		e = 0;
		goto out; /* signing-only: its secret is not needed */
	}

	/* S2K usage and protection parameters. */
	uint8_t usage, cipher = 0, aead = 0;
	struct pd_s2k s2k = { 0 };
	const uint8_t *iv = NULL;
	size_t ivlen = 0;
	if ((e = rd_u8(&r, &usage)))
		goto out;
	size_t params_end = 0;
	if (k->version == 6 && usage != 0) {
		uint8_t cnt;
		if ((e = rd_u8(&r, &cnt)))
			goto out;
		params_end = r.off + cnt;
		if (usage != 253 && usage != 254) {
			e = pd_fail(c->detail, c->detail_len, PD_EMALFORMED,
			            "key %s: S2K usage %u is not allowed in a v6 key", keyid_hex(k, kid), usage);
			goto out;
		}
	}
	if (usage == 253 || usage == 254 || usage == 255) {
		size_t used;
		if ((e = rd_u8(&r, &cipher)))
			goto out;
		if (usage == 253 && (e = rd_u8(&r, &aead)))
			goto out;
		size_t s2kmax = r.len - r.off;
		if (k->version == 6) {
			uint8_t s2klen;
			if ((e = rd_u8(&r, &s2klen)))
				goto out;
			if (s2klen > r.len - r.off) {
				e = PD_EMALFORMED;
				goto out;
			}
			s2kmax = s2klen;
		}
		e = pd_s2k_parse(body + r.off, s2kmax, &s2k, &used);
		if (e) {
			e = pd_fail(c->detail, c->detail_len, e, "key %s: %s S2K specifier", keyid_hex(k, kid),
			            e == PD_EUNSUPPORTED ? "unsupported" : "malformed");
			goto out;
		}
		if (k->version == 6 && used != s2kmax) {
			e = PD_EMALFORMED;
			goto out;
		}
		r.off += used;
		if (s2k.type == 101) {
			/* gnu-dummy or divert-to-card: no secret here. */
			c->n_stub++;
			e = 0;
			goto out;
		}
		if (s2k.type == 4 && usage != 253) {
			e = pd_fail(c->detail, c->detail_len, PD_EMALFORMED,
			            "key %s: Argon2 S2K is only allowed with AEAD protection", keyid_hex(k, kid));
			goto out;
		}
		if (k->version == 6 && s2k.type != 4 && s2k.type != 3) {
			e = pd_fail(c->detail, c->detail_len, PD_EMALFORMED,
			            "key %s: v6 keys need an iterated or Argon2 S2K", keyid_hex(k, kid));
			goto out;
		}
		if (k->version == 6 && s2k.type == 3 &&
		    (s2k.hash == PD_HASH_MD5 || s2k.hash == PD_HASH_SHA1 || s2k.hash == PD_HASH_RMD160)) {
			e = pd_fail(c->detail, c->detail_len, PD_EMALFORMED,
			            "key %s: weak S2K hash in a v6 key", keyid_hex(k, kid));
			goto out;
		}
		if (usage == 253) {
			ivlen = pd_aead_noncelen(aead);
			if (!ivlen || pd_sym_blklen(cipher) != 16) {
				e = pd_fail(c->detail, c->detail_len, PD_EUNSUPPORTED,
				            "key %s: unsupported AEAD protection (cipher %u, aead %u)",
				            keyid_hex(k, kid), cipher, aead);
				goto out;
			}
		} else {
			ivlen = pd_sym_blklen(cipher);
		}
	} else if (usage != 0) {
		/* Legacy: the usage octet is the cipher, S2K is simple MD5. */
		if (k->version == 6) {
			e = PD_EMALFORMED;
			goto out;
		}
		cipher = usage;
		s2k.type = 0;
		s2k.hash = PD_HASH_MD5;
		ivlen = pd_sym_blklen(cipher);
	}
	if (usage != 0) {
		if (!pd_sym_gcry(cipher) || !ivlen) {
			e = pd_fail(c->detail, c->detail_len, PD_EUNSUPPORTED,
			            "key %s: unsupported protection cipher %u", keyid_hex(k, kid), cipher);
			goto out;
		}
		if ((e = rd_bytes(&r, ivlen, &iv)))
			goto out;
		if (k->version == 6 && r.off != params_end) {
			e = PD_EMALFORMED;
			goto out;
		}
		if (!c->pass) {
			e = pd_fail(c->detail, c->detail_len, PD_ENEEDPASS,
			            "key %s is protected and no passphrase was given", keyid_hex(k, kid));
			goto out;
		}
	}

	/* The secret data: rest of the packet, worked on in secure memory. */
	size_t dlen = r.len - r.off, slen = 0;
	plain_cap = dlen ? dlen : 1;
	plain = gcry_malloc_secure(plain_cap);
	if (!plain) {
		e = -ENOMEM;
		goto out;
	}
	if (usage == 0) {
		memcpy(plain, body + r.off, dlen);
		slen = dlen;
	} else {
		e = unprotect(c, k, tag, usage, cipher, aead, &s2k, iv, ivlen, body, publen, body + r.off, dlen,
		              plain, &slen);
		if (e) {
			if (e == PD_EBADPASS)
				e = pd_fail(c->detail, c->detail_len, e, "key %s: wrong passphrase", keyid_hex(k, kid));
			else if (e == PD_ELIMIT)
				e = pd_fail(c->detail, c->detail_len, e, "key %s: S2K cost exceeds the limit",
				            keyid_hex(k, kid));
			goto out;
		}
	}
	/* Check value after the fields: v4 usage 0/255/legacy csum16, 254
	 * SHA-1, v6 usage 0 and 253 none (AEAD tag already checked). */
	size_t check = usage == 254 ? 20 : (usage == 253 || (usage == 0 && k->version == 6)) ? 0 : 2;
	size_t used = 0;
	int bad = 0;
	if (slen < check) {
		bad = 1;
	} else {
		e = parse_secret_fields(k, plain, slen - check, &used);
		if (e == -ENOMEM)
			goto out;
		if (e || used != slen - check)
			bad = 1;
	}
	if (!bad && check == 20) {
		uint8_t dig[20];
		gcry_md_hash_buffer(GCRY_MD_SHA1, dig, plain, used);
		bad = memcmp(dig, plain + used, 20) != 0;
	} else if (!bad && check == 2) {
		bad = csum16(plain, used) != pd_be16(plain + used);
	}
	if (bad) {
		/* With encryption, garbage means a wrong passphrase (the S2K/CFB
		 * check is all there is); in the clear it is a malformed key. */
		e = pd_fail(c->detail, c->detail_len, usage == 0 ? PD_EMALFORMED : PD_EBADPASS,
		            usage == 0 ? "key %s: malformed secret key material" : "key %s: wrong passphrase",
		            keyid_hex(k, kid));
		goto out;
	}
	e = validate(k, c->kr->backend);
	if (e) {
		if (e == PD_EINTEGRITY || e == PD_EMALFORMED)
			e = pd_fail(c->detail, c->detail_len, PD_EMALFORMED,
			            "key %s: secret key does not match its public key", keyid_hex(k, kid));
		else if (e == PD_EUNSUPPORTED)
			e = pd_fail(c->detail, c->detail_len, e, "key %s: unsupported key parameters",
			            keyid_hex(k, kid));
		goto out;
	}
	k->ir_secret = gcry_malloc_secure(32);
	if (!k->ir_secret) {
		e = -ENOMEM;
		goto out;
	}
	gcry_randomize(k->ir_secret, 32, GCRY_STRONG_RANDOM);
	*ret = TAKE_PTR(k);
	e = 0;
out:
	if (plain) {
		pd_wipe(plain, plain_cap);
		gcry_free(plain);
	}
	if (e == PD_EMALFORMED && c->detail && !c->detail[0] && k && k->fpr_len)
		pd_fail(c->detail, c->detail_len, e, "key %s: malformed key packet", keyid_hex(k, kid));
	pd_key_free(k);
	return e;
}

/* ------------------------------------------------------------------ */

static bool have_fpr(const struct pd_key *const *keys, size_t n, const struct pd_key *k)
{
	for (size_t i = 0; i < n; i++)
		if (keys[i]->fpr_len == k->fpr_len && memcmp(keys[i]->fpr, k->fpr, k->fpr_len) == 0)
			return true;
	return false;
}

static int batch_push(struct batch *b, struct pd_key *k)
{
	if (b->n == b->cap) {
		size_t nc = b->cap ? 2 * b->cap : 8;
		struct pd_key **nk = realloc(b->keys, nc * sizeof(*nk));
		if (!nk)
			return -ENOMEM;
		b->keys = nk;
		b->cap = nc;
	}
	b->keys[b->n++] = k;
	return 0;
}

/* Walk the packets of a binary transferable-key sequence. */
static int parse_packets(struct ctx *c, const uint8_t *p, size_t len, struct batch *b)
{
	size_t off = 0;

	while (off < len) {
		size_t start = off;
		uint8_t ctb = p[off++], tag;
		uint64_t plen;
		if (!(ctb & 0x80))
			return pd_fail(c->detail, c->detail_len, PD_EMALFORMED,
			               "invalid packet header at offset %zu", start);
		if (ctb & 0x40) {
			tag = ctb & 0x3F;
			if (off >= len)
				goto trunc;
			uint8_t o = p[off++];
			if (o < 192) {
				plen = o;
			} else if (o < 224) {
				if (off >= len)
					goto trunc;
				plen = ((uint64_t)(o - 192) << 8) + p[off++] + 192;
			} else if (o == 255) {
				if (len - off < 4)
					goto trunc;
				plen = pd_be32(p + off);
				off += 4;
			} else {
				return pd_fail(c->detail, c->detail_len, PD_EMALFORMED,
				               "partial length on a key-file packet at offset %zu", start);
			}
		} else {
			tag = (ctb >> 2) & 15;
			unsigned lt = ctb & 3;
			if (lt == 3) {
				/* Indeterminate: only sensible for data packets. */
				return pd_fail(c->detail, c->detail_len, PD_EMALFORMED,
				               "indeterminate length on a key-file packet at offset %zu", start);
			}
			size_t nl = (size_t)1 << lt;
			if (len - off < nl)
				goto trunc;
			plen = 0;
			for (size_t i = 0; i < nl; i++)
				plen = (plen << 8) | p[off++];
		}
		if (tag == 0)
			return pd_fail(c->detail, c->detail_len, PD_EMALFORMED, "packet tag 0 at offset %zu", start);
		if (plen > len - off)
			goto trunc;
		const uint8_t *body = p + off;
		off += (size_t)plen;
		if (tag == 5 || tag == 7 || tag == 6 || tag == 14) {
			if (plen > MAX_KEY_PACKET)
				return pd_fail(c->detail, c->detail_len, PD_ELIMIT,
				               "key packet at offset %zu is too large", start);
		}
		if (tag == 6) {
			/* A public primary key starts a new certificate: its
			 * subkeys (tag 14) are skipped, but remember the
			 * fingerprint in case secret subkeys follow. */
			struct pd_key tmp = { 0 };
			c->primary_fpr_len = 0;
			if (plen >= 6 && (body[0] == 6 || (body[0] == 4 && plen <= 0xFFFF))) {
				tmp.version = body[0];
				fingerprint(&tmp, body, (size_t)plen);
				memcpy(c->primary_fpr, tmp.fpr, tmp.fpr_len);
				c->primary_fpr_len = tmp.fpr_len;
			}
			continue;
		}
		if (tag != 5 && tag != 7)
			continue; /* user IDs, signatures, trust, public subkeys, ... */
		struct pd_key *k = NULL;
		int e = parse_secret_key(c, tag, body, (size_t)plen, &k);
		if (e) {
			if (c->detail && !c->detail[0])
				pd_fail(c->detail, c->detail_len, e, "secret key packet at offset %zu: %s", start,
				        pd_strerror(e));
			return e;
		}
		if (!k)
			continue;
		if (have_fpr((const struct pd_key *const *)c->kr->keys, c->kr->n, k) ||
		    have_fpr((const struct pd_key *const *)b->keys, b->n, k)) {
			pd_key_free(k); /* the same key twice: keep the first */
			c->n_dup++;
			continue;
		}
		if (c->kr->n + b->n >= MAX_KEYS) {
			pd_key_free(k);
			return pd_fail(c->detail, c->detail_len, PD_ELIMIT, "too many keys in the ring");
		}
		if ((e = batch_push(b, k))) {
			pd_key_free(k);
			return e;
		}
	}
	return 0;
trunc:
	return pd_fail(c->detail, c->detail_len, PD_ETRUNCATED, "key file is truncated");
}

int pd_keyring_new(struct pd_keyring **ret, enum pd_rsa_backend backend)
{
	if (!ret)
		return -EINVAL;
	if (backend == PD_RSA_DEFAULT)
		backend = pd_rsa_default_backend();
	if (backend != PD_RSA_OPENSSL && backend != PD_RSA_GCRYPT)
		return -EINVAL;
	struct pd_keyring *kr = calloc(1, sizeof(*kr));
	if (!kr)
		return -ENOMEM;
	kr->backend = backend;
	*ret = kr;
	return 0;
}

struct pd_keyring *pd_keyring_free(struct pd_keyring *kr)
{
	if (!kr)
		return NULL;
	for (size_t i = 0; i < kr->n; i++)
		pd_key_free(kr->keys[i]);
	free(kr->keys);
	free(kr->ids);
	free(kr);
	return NULL;
}

static uint64_t kid_of(const uint8_t *keyid)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | keyid[i];
	return v;
}

/* First position in ids whose id is >= id (or > id with after). */
static size_t kid_bound(const struct pd_keyring *kr, uint64_t id, bool after)
{
	size_t lo = 0, hi = kr->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (kr->ids[mid].id < id || (after && kr->ids[mid].id == id))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* keys[kr->n] joins the index, after the keys with the same ID. */
static void kid_insert(struct pd_keyring *kr)
{
	uint64_t id = kid_of(kr->keys[kr->n]->keyid);
	size_t at = kid_bound(kr, id, true);
	memmove(kr->ids + at + 1, kr->ids + at, (kr->n - at) * sizeof(*kr->ids));
	kr->ids[at] = (struct kid){ id, kr->n };
}

int pd_keyring_add(struct pd_keyring *kr, const uint8_t *data, size_t len, const char *pass, size_t passlen,
                   char *detail, size_t detail_len)
{
	struct ctx c = { .kr = kr, .pass = pass, .passlen = pass ? passlen : 0,
	                 .detail = detail, .detail_len = detail_len };
	struct batch b = { 0 };
	uint8_t *dec = NULL;
	size_t declen = 0;
	int r;

	if (detail && detail_len)
		detail[0] = 0;
	if (!kr || (!data && len))
		return -EINVAL;
	if (len == 0)
		return pd_fail(detail, detail_len, PD_ENOSECRET, "key file is empty");
	r = pd_armor_detect(data, len, true);
	if (r == 1) {
		r = pd_armor_decode_all_secure(data, len, &dec, &declen);
		if (r < 0)
			return pd_fail(detail, detail_len, r, "key file armor: %s", pd_strerror(r));
		data = dec;
		len = declen;
	} else if (r != 0) {
		return pd_fail(detail, detail_len, PD_ENOTPGP, "key file is neither armored nor binary OpenPGP");
	}

	r = parse_packets(&c, data, len, &b);
	/* Nothing usable is an error; a file that only repeats keys already
	 * held is not (0 added). */
	if (r == 0 && b.n == 0 && c.n_dup == 0 && c.n_unsupported > 0 && c.n_secret == c.n_signing + c.n_stub)
		r = pd_fail(detail, detail_len, PD_EUNSUPPORTED,
		            "no usable secret decryption key: %u key packets of unsupported version or algorithm "
		            "(LibrePGP v5 keys are not supported)", c.n_unsupported);
	else if (r == 0 && b.n == 0 && c.n_dup == 0)
		r = pd_fail(detail, detail_len, PD_ENOSECRET,
		            "no usable secret decryption key (%u secret key packets: %u without secret, "
		            "%u signing-only, %u unsupported)",
		            c.n_secret, c.n_stub, c.n_signing, c.n_unsupported);
	if (r == 0 && b.n) {
		if (kr->n + b.n > kr->cap) {
			size_t nc = PD_MAX(kr->cap * 2, kr->n + b.n);
			struct pd_key **nk = realloc(kr->keys, nc * sizeof(*nk));
			if (!nk) {
				r = -ENOMEM;
				goto out;
			}
			kr->keys = nk;
			struct kid *ni = realloc(kr->ids, nc * sizeof(*ni));
			if (!ni) {
				r = -ENOMEM;
				goto out;
			}
			kr->ids = ni;
			kr->cap = nc;
		}
		for (size_t i = 0; i < b.n; i++) {
			kr->keys[kr->n] = b.keys[i];
			kid_insert(kr);
			kr->n++;
		}
		r = (int)b.n;
		b.n = 0;
	}
out:
	for (size_t i = 0; i < b.n; i++)
		pd_key_free(b.keys[i]);
	free(b.keys);
	if (dec) {
		pd_wipe(dec, declen);
		gcry_free(dec);
	}
	return r;
}

enum pd_rsa_backend pd_keyring_backend(const struct pd_keyring *kr) { return kr->backend; }

size_t pd_keyring_count(const struct pd_keyring *kr)
{
	return kr ? kr->n : 0;
}

int pd_keyring_info(const struct pd_keyring *kr, size_t i, struct pd_keyinfo *ret)
{
	if (!kr || !ret || i >= kr->n)
		return -EINVAL;
	const struct pd_key *k = kr->keys[i];
	struct pd_keyinfo info = { 0 };
	info.version = k->version;
	info.pk_algo = k->pk_algo;
	info.bits = k->bits;
	info.fpr_len = k->fpr_len;
	memcpy(info.fpr, k->fpr, sizeof(info.fpr));
	memcpy(info.keyid, k->keyid, 8);
	info.primary_fpr_len = k->primary_fpr_len;
	memcpy(info.primary_fpr, k->primary_fpr, sizeof(info.primary_fpr));
	info.created = k->created;
	snprintf(info.curve, sizeof(info.curve), "%s", pd_curve_name(k->curve));
	*ret = info;
	return 0;
}

size_t pd__keyring_n(const struct pd_keyring *kr)
{
	return kr ? kr->n : 0;
}

const struct pd_key *pd__keyring_get(const struct pd_keyring *kr, size_t i)
{
	return kr && i < kr->n ? kr->keys[i] : NULL;
}

const struct pd_key *pd__keyring_by_keyid(const struct pd_keyring *kr, const uint8_t keyid[8], size_t nth)
{
	if (!kr || !kr->n)
		return NULL;
	uint64_t id = kid_of(keyid);
	size_t at = kid_bound(kr, id, false) + nth;
	return at < kr->n && kr->ids[at].id == id ? kr->keys[kr->ids[at].idx] : NULL;
}
