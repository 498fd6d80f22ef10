/* SPDX-License-Identifier: MIT */
/*
 * ECDH shared-secret backends (see pgp/ecdh.h): OpenSSL 3 (EVP_PKEY_derive)
 * and libgcrypt.  The Montgomery curves (X25519, X448 and cv25519, the
 * same function) go through OpenSSL with either backend: libgcrypt 1.10's
 * X25519/X448 copies the scalar without checking the copies
 * (gcry_ecc_mul_point makes two in its secure pool, and reads a NULL
 * pointer when either allocation fails, which another thread's
 * allocations can make happen at any time, whatever room a probe saw
 * before; gcry_pk_decrypt makes its copies in the normal heap and frees
 * them unwiped).  The libgcrypt backend is then the NIST/brainpool
 * curves' point multiplication (weierstrass_gcrypt: gcry_mpi_ec_mul on a
 * context of the curve's name, never gcry_pk_decrypt, whose S-expression
 * lookups copied d into the normal heap).
 * k->ecdh_pkey is the key's EVP_PKEY, made once at load for every
 * Montgomery key and for a NIST/brainpool key of the OpenSSL backend:
 * X25519/X448 from the raw scalar with EVP_PKEY_new_raw_private_key and
 * EVP_PKEY_dup, which puts it in OpenSSL's secure heap (see setup_openssl);
 * NIST/brainpool with EVP_PKEY_fromdata
 * from the group name, a secure BIGNUM scalar and the public point.  Each
 * worker gets its own derive-initialised EVP_PKEY_CTX on first use (a
 * derive_init fetches the exchange method: too slow per message) and a
 * peer key: for X25519/X448 one EVP_PKEY whose public value each message
 * replaces (EVP_PKEY_set1_encoded_public_key), since making a key
 * (EVP_PKEY_new_raw_public_key, EVP_PKEY_fromdata) looks the key manager up
 * by name each time, through the name map and its locks, 5-6% of a
 * derive; for NIST/brainpool a key-import context made once, the point
 * imported per message (where OpenSSL checks it is on the curve).
 *
 * OpenSSL clamps the Montgomery scalars itself (RFC 7748 §5), which also
 * copes with the unclamped cv25519 secrets older GnuPG wrote, and masks
 * the top bit of a 32-octet u (RFC 7748 §5), as libgcrypt does.  A point
 * of small order yields the all-zero shared secret, as libgcrypt's
 * gcry_ecc_mul_point returns it (the unit tests check both agree); OpenSSL
 * refuses to (its derive fails after computing it).  Whether a
 * point has small order is a property of the public point alone (the
 * clamped scalar is a multiple of the cofactor), so that refusal is no
 * secret; it is turned into the same all-zero output, and the caller's
 * constant-time mask rejects it.
 */
#include <gcrypt.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>

#include "pd-config.h"
#include "pgp/ecdh.h"
#include "worker.h"

enum pd_ecdh_backend pd_ecdh_default_backend(void)
{
	/* As PD_RSA_BACKEND: lets the test suite run everything against both
	 * backends without rebuilding. */
	const char *env = getenv("PD_ECDH_BACKEND");
	if (env && strcmp(env, "openssl") == 0)
		return PD_ECDH_OPENSSL;
	if (env && strcmp(env, "gcrypt") == 0)
		return PD_ECDH_GCRYPT;
	return PD_ECDH_DEFAULT_BACKEND;
}

/* Montgomery-curve key: the OpenSSL key type, the native length. */
static int x_type(const struct pd_key *k, size_t *len)
{
	if (k->pk_algo == PD_PK_X448 && k->curve == PD_CURVE_X448) {
		*len = 56;
		return EVP_PKEY_X448;
	}
	if ((k->pk_algo == PD_PK_X25519 && k->curve == PD_CURVE_X25519) ||
	    (k->pk_algo == PD_PK_ECDH && k->curve == PD_CURVE_CV25519)) {
		*len = 32;
		return EVP_PKEY_X25519;
	}
	return 0;
}

static const char *ossl_group(enum pd_curve c)
{
	switch (c) {
	case PD_CURVE_P256: return "P-256";
	case PD_CURVE_P384: return "P-384";
	case PD_CURVE_P521: return "P-521";
	case PD_CURVE_BP256: return "brainpoolP256r1";
	case PD_CURVE_BP384: return "brainpoolP384r1";
	case PD_CURVE_BP512: return "brainpoolP512r1";
	default: return NULL;
	}
}

/* The public key as stored: native u (X25519/X448) or 40 || u (cv25519). */
static const uint8_t *x_pub(const struct pd_key *k, size_t len)
{
	if (k->pk_algo == PD_PK_ECDH)
		return k->q_len == 1 + len && k->q[0] == 0x40 ? k->q + 1 : NULL;
	return k->q_len == len ? k->q : NULL;
}

/* An EC key of group from params (scalar: a secure BIGNUM, may be NULL)
 * and the encoded point pub.  OpenSSL checks that the point is on the
 * curve when it decodes it. */
static EVP_PKEY *ec_key(const char *group, const BIGNUM *scalar, const uint8_t *pub, size_t publen)
{
	OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
	OSSL_PARAM *params = NULL;
	EVP_PKEY_CTX *pctx = NULL;
	EVP_PKEY *pkey = NULL;

	if (!bld || !OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, group, 0) ||
	    !OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, pub, publen) ||
	    (scalar && !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_PRIV_KEY, scalar)))
		goto out;
	params = OSSL_PARAM_BLD_to_param(bld);
	pctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
	if (!params || !pctx || EVP_PKEY_fromdata_init(pctx) <= 0 ||
	    EVP_PKEY_fromdata(pctx, &pkey, scalar ? EVP_PKEY_KEYPAIR : EVP_PKEY_PUBLIC_KEY, params) <= 0)
		pkey = NULL;
out:
	EVP_PKEY_CTX_free(pctx);
	OSSL_PARAM_free(params); /* also clear-frees the secure block holding the scalar */
	OSSL_PARAM_BLD_free(bld);
	return pkey;
}

/* Per worker per key (k->ecdh_ctx[i]), made on the worker's first use. */
struct ecdh_worker {
	EVP_PKEY_CTX *derive;       /* from k->ecdh_pkey, derive-initialised */
	EVP_PKEY *peer_pk;          /* X25519/X448: the peer, its value replaced per message */
	EVP_PKEY_CTX *peer;         /* NIST/brainpool: "EC", fromdata-initialised */
};

static void ecdh_worker_free(struct ecdh_worker *ew)
{
	if (!ew)
		return;
	EVP_PKEY_CTX_free(ew->derive);
	EVP_PKEY_free(ew->peer_pk);
	EVP_PKEY_CTX_free(ew->peer);
	free(ew);
}

static struct ecdh_worker *ecdh_worker_new(const struct pd_key *k, int type)
{
	struct ecdh_worker *ew = calloc(1, sizeof(*ew));
	if (!ew)
		return NULL;
	ew->derive = EVP_PKEY_CTX_new_from_pkey(NULL, k->ecdh_pkey, NULL);
	bool ok = ew->derive && EVP_PKEY_derive_init(ew->derive) > 0;
	if (type) {
		/* Any valid value to start with: the key's own public key. */
		size_t len = 0;
		x_type(k, &len);
		ew->peer_pk = EVP_PKEY_new_raw_public_key(type, NULL, x_pub(k, len), len);
		ok = ok && ew->peer_pk;
	} else {
		ew->peer = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
		ok = ok && ew->peer && EVP_PKEY_fromdata_init(ew->peer) > 0;
	}
	if (!ok) {
		ecdh_worker_free(ew);
		return NULL;
	}
	return ew;
}

/* The peer's public key from its point (public data): ew->peer_pk with
 * its value replaced (X25519/X448: not to be freed), or a new key imported
 * through ew->peer (NIST/brainpool: *own set, the caller frees it). */
static EVP_PKEY *peer_key(const struct pd_key *k, struct ecdh_worker *ew, const uint8_t *pt, size_t len,
                          EVP_PKEY **own)
{
	*own = NULL;
	if (ew->peer_pk)
		return EVP_PKEY_set1_encoded_public_key(ew->peer_pk, pt, len) > 0 ? ew->peer_pk : NULL;
	OSSL_PARAM params[3];
	params[0] = OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, (char *)ossl_group(k->curve), 0);
	params[1] = OSSL_PARAM_construct_octet_string(OSSL_PKEY_PARAM_PUB_KEY, (void *)pt, len);
	params[2] = OSSL_PARAM_construct_end();
	if (EVP_PKEY_fromdata(ew->peer, own, EVP_PKEY_PUBLIC_KEY, params) <= 0)
		return *own = NULL;
	return *own;
}

static int setup_openssl(struct pd_key *k)
{
	EVP_PKEY *pkey = NULL;
	size_t len = 0;
	int type = x_type(k, &len);
	int r;

	if (type) {
		const uint8_t *pub = x_pub(k, len);
		uint8_t got[56];
		size_t glen = sizeof(got);
		if (!pub) /* cv25519 without the 0x40 prefix: the key's fields (validate() leaves it to here) */
			return PD_EMALFORMED;
		if (!k->native_sk || k->native_sk_len != len)
			return PD_EINTERNAL;
		/* OpenSSL 3.0 imports a raw X25519/X448 scalar into the normal
		 * heap (OSSL_PARAM_get_octet_string allocates it); its key
		 * duplication allocates the scalar in the secure heap.  So import,
		 * duplicate, and free the import, whose copy OpenSSL cleanses on
		 * free (OPENSSL_secure_clear_free of a non-secure pointer). */
		EVP_PKEY *imp = EVP_PKEY_new_raw_private_key(type, NULL, k->native_sk, len);
		if (!imp)
			goto fail;
		pkey = EVP_PKEY_dup(imp);
		EVP_PKEY_free(imp);
		if (!pkey)
			goto fail;
		/* OpenSSL computed the public key from the (clamped) scalar:
		 * it must be the stored one (the key's only check: validate()
		 * in pgp/keyring.c). */
		if (EVP_PKEY_get_raw_public_key(pkey, got, &glen) <= 0 || glen != len) {
			r = PD_EINTERNAL;
			goto out;
		}
		if (memcmp(got, pub, len) != 0) {
			r = PD_EINTEGRITY;
			goto out;
		}
	} else {
		const char *group = ossl_group(k->curve);
		size_t fsize = pd_curve_fsize(k->curve);
		if (!group)
			return PD_EUNSUPPORTED;
		if (!k->x || k->q_len != 1 + 2 * fsize || k->q[0] != 0x04)
			return PD_EINTERNAL;
		/* The scalar: gcry MPI -> secure buffer -> secure BIGNUM. */
		unsigned char *buf = NULL;
		size_t blen = 0;
		if (gcry_mpi_aprint(GCRYMPI_FMT_USG, &buf, &blen, k->x))
			return -ENOMEM;
		BIGNUM *d = BN_secure_new();
		if (d && !BN_bin2bn(buf, (int)blen, d)) {
			BN_clear_free(d);
			d = NULL;
		}
		pd_wipe(buf, blen);
		gcry_free(buf);
		if (!d)
			goto fail;
		BN_set_flags(d, BN_FLG_CONSTTIME);
		pkey = ec_key(group, d, k->q, k->q_len);
		BN_clear_free(d);
		if (!pkey)
			goto fail;
	}
	if (!k->slots) /* a key made outside a ring (tests) */
		k->slots = PD_MAX_WORKERS;
	k->ecdh_ctx = calloc(k->slots, sizeof(void *));
	if (!k->ecdh_ctx) {
		r = -ENOMEM;
		goto out;
	}
	k->ecdh_pkey = pkey;
	return 0;
fail:
	/* Only resources can fail here: the scalar has its length and a
	 * Weierstrass point was checked by libgcrypt (validate_secret). */
	ERR_clear_error();
	return -ENOMEM;
out:
	ERR_clear_error();
	EVP_PKEY_free(pkey);
	return r;
}

int pd_ecdh_setup(struct pd_key *k, enum pd_ecdh_backend backend)
{
	size_t len;
	if (backend == PD_ECDH_DEFAULT)
		backend = pd_ecdh_default_backend();
	if (backend != PD_ECDH_OPENSSL && backend != PD_ECDH_GCRYPT)
		return PD_EUNSUPPORTED;
	if (!x_type(k, &len) && !(k->pk_algo == PD_PK_ECDH && ossl_group(k->curve)))
		return PD_EUNSUPPORTED;
	pd_ecdh_cleanup(k);
	/* A Montgomery key is OpenSSL's with either backend (top of file). */
	if (backend == PD_ECDH_OPENSSL || x_type(k, &len)) {
		int r = setup_openssl(k);
		if (r < 0)
			return r;
	}
	k->ecdh_backend = backend;
	return 0;
}

void pd_ecdh_cleanup(struct pd_key *k)
{
	if (!k)
		return;
	if (k->ecdh_ctx) {
		for (size_t i = 0; i < k->slots; i++)
			if (k->ecdh_ctx[i]) {
				ecdh_worker_free(k->ecdh_ctx[i]);
				pd_worker_key_state_give((unsigned)i);
			}
		free(k->ecdh_ctx);
		k->ecdh_ctx = NULL;
	}
	EVP_PKEY_free(k->ecdh_pkey); /* the secure-heap scalar is cleared on free */
	k->ecdh_pkey = NULL;
	k->ecdh_backend = 0;
}

/* ---- libgcrypt ---- */

/* ZB = x coordinate of d·V on a NIST/brainpool curve, into zb[fsize].
 * On a context made from the curve's name alone (gcry_mpi_ec_new): no
 * S-expression ever holds d, which gcry_pk_decrypt copied out of the
 * key's secure S-expression into the normal heap and freed unwiped
 * (sexp_find_token).  The scalar is the key's secure MPI, which libgcrypt
 * multiplies in constant time; the shared point and its x are secure MPIs.
 * V is decoded and checked to be on the curve as gcry_pk_decrypt did it
 * (invalid-curve attacks): an error here is about the public point only,
 * the same errors as before (PD_EMALFORMED). */
static int weierstrass_gcrypt(const struct pd_key *k, const uint8_t *pt, size_t ptlen, size_t fsize, uint8_t *zb)
{
	const char *curve = pd_curve_gcry_name(k->curve);
	gcry_ctx_t ctx = NULL;
	gcry_mpi_t e = NULL, x = NULL;
	gcry_mpi_point_t v = NULL, s = NULL;
	size_t n = 0;
	int r;

	if (!curve || !k->x || k->q_len != 1 + 2 * fsize)
		return PD_EINTERNAL;
	r = pd_err_from_gcry(gcry_mpi_ec_new(&ctx, NULL, curve));
	if (r < 0)
		goto out;
	e = gcry_mpi_set_opaque_copy(NULL, pt, (unsigned)(8 * ptlen));
	v = gcry_mpi_point_new(0);
	s = gcry_mpi_point_snatch_set(NULL, gcry_mpi_snew(0), gcry_mpi_snew(0), gcry_mpi_snew(0));
	x = gcry_mpi_snew(0);
	if (!e || !v || !s || !x) {
		r = -ENOMEM;
		goto out;
	}
	r = pd_err_from_gcry(gcry_mpi_ec_decode_point(v, e, ctx));
	if (r < 0)
		goto out;
	if (!gcry_mpi_ec_curve_point(v, ctx)) { /* infinity included */
		r = PD_EMALFORMED;
		goto out;
	}
	gcry_mpi_ec_mul(s, k->x, v, ctx);
	if (gcry_mpi_ec_get_affine(x, NULL, s, ctx)) {
		r = PD_EMALFORMED; /* d·V at infinity: V of small order */
		goto out;
	}
	/* x < p: fits fsize octets, left-padded. */
	r = pd_err_from_gcry(gcry_mpi_print(GCRYMPI_FMT_USG, NULL, 0, &n, x));
	if (r < 0)
		goto out;
	if (n > fsize) {
		r = PD_EINTERNAL;
		goto out;
	}
	memset(zb, 0, fsize - n);
	r = pd_err_from_gcry(gcry_mpi_print(GCRYMPI_FMT_USG, zb + (fsize - n), n, NULL, x));
out:
	gcry_mpi_release(x); /* secure MPIs are wiped by libgcrypt on release */
	gcry_mpi_point_release(s);
	gcry_mpi_point_release(v);
	gcry_mpi_release(e);
	gcry_ctx_release(ctx);
	return r;
}

/* ---- OpenSSL ---- */

static int derive_openssl(const struct pd_key *k, unsigned worker, const uint8_t *peer, size_t peer_len,
                          uint8_t *out, size_t out_len)
{
	struct ecdh_worker *ew = NULL, *tmp = NULL;
	EVP_PKEY *pk = NULL, *own = NULL;
	size_t len = 0;
	int type = x_type(k, &len);
	int r;

	if (!k->ecdh_pkey || !k->ecdh_ctx)
		return PD_EINTERNAL;
	ERR_clear_error(); /* only this derive's errors count (pd_ossl_error) */
	if (worker < k->slots)
		ew = k->ecdh_ctx[worker];
	if (!ew) {
		ew = ecdh_worker_new(k, type);
		if (!ew) {
			r = -ENOMEM;
			goto out;
		}
		/* Only worker `worker` ever touches this slot (pgp/key.h), so the
		 * lazy fill needs no lock; out-of-range callers, and a worker
		 * that keeps state for as many keys as it may, get a one-off. */
		if (worker < k->slots && pd_worker_key_state_take(worker))
			k->ecdh_ctx[worker] = ew;
		else
			tmp = ew;
	}
	/* The peer key: public data; an error here is about it alone, or
	 * about memory.  Any 32/56 octets are a u-coordinate; a NIST/brainpool
	 * point is checked to be on the curve when it is decoded, and its
	 * import allocates (an EC key, its point, a BN_CTX): only what the
	 * error queue says tells a point off the curve from a failed
	 * allocation, which must stay retryable. */
	pk = peer_key(k, ew, peer, peer_len, &own);
	if (!pk) {
		r = type ? -ENOMEM : pd_ossl_error(PD_EMALFORMED);
		goto out;
	}
	/* No public-key check of the peer: the decode did the on-curve check,
	 * and small order is handled below. */
	if (EVP_PKEY_derive_set_peer_ex(ew->derive, pk, 0) <= 0) {
		r = pd_ossl_error(PD_EINTERNAL);
		goto out;
	}
	size_t olen = out_len;
	if (EVP_PKEY_derive(ew->derive, out, &olen) <= 0) {
		if (!type) {
			r = pd_ossl_error(PD_EINTERNAL);
			goto out;
		}
		/* The all-zero shared secret of a small-order point (see the top
		 * of this file): the same output as libgcrypt's, no error. */
		pd_wipe(out, out_len);
		olen = out_len;
		ERR_clear_error();
	}
	r = olen == out_len ? 0 : PD_EINTERNAL;
out:
	if (r < 0)
		ERR_clear_error();
	EVP_PKEY_free(own);
	ecdh_worker_free(tmp);
	return r;
}

int pd_ecdh_derive(const struct pd_key *k, unsigned worker, const uint8_t *peer, size_t peer_len, uint8_t *out,
                   size_t out_len)
{
	size_t len = 0;
	if (x_type(k, &len)) {
		if (peer_len != len || out_len != len)
			return PD_EINTERNAL;
	} else if (k->pk_algo != PD_PK_ECDH || out_len != pd_curve_fsize(k->curve) || !out_len ||
	           peer_len != 1 + 2 * out_len || peer[0] != 0x04) {
		return PD_EINTERNAL;
	}
	switch (k->ecdh_backend) {
	case PD_ECDH_OPENSSL:
		return derive_openssl(k, worker, peer, peer_len, out, out_len);
	case PD_ECDH_GCRYPT:
		if (len) /* X25519/X448 through OpenSSL (top of file) */
			return derive_openssl(k, worker, peer, peer_len, out, out_len);
		return weierstrass_gcrypt(k, peer, peer_len, out_len, out);
	default:
		return PD_EINTERNAL; /* not set up */
	}
}
