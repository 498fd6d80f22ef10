/* SPDX-License-Identifier: MIT */
/*
 * RSA private-key backends: OpenSSL 3 (EVP_PKEY, RSA_NO_PADDING, one
 * EVP_PKEY_CTX per worker) and libgcrypt ((flags raw) gcry_pk_decrypt).
 * Both compute the raw m = c^d mod n with blinding; padding is checked by
 * the caller.  For the libgcrypt backend k->rsa_pkey holds the key's
 * gcry_sexp_t (secure memory, since it is built from secure MPIs).
 */
#include <gcrypt.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/params.h>
#include <openssl/rsa.h>

#include "pd-config.h"
#include "pgp/rsa.h"
#include "worker.h"

enum pd_rsa_backend pd_rsa_default_backend(void)
{
	/* The environment override lets the test suite run everything against
	 * both backends without rebuilding. */
	const char *env = getenv("PD_RSA_BACKEND");
	if (env && strcmp(env, "openssl") == 0)
		return PD_RSA_OPENSSL;
	if (env && strcmp(env, "gcrypt") == 0)
		return PD_RSA_GCRYPT;
	return PD_RSA_DEFAULT_BACKEND;
}

/* gcry MPI -> OpenSSL BIGNUM in OpenSSL's secure heap, via a secure buffer. */
static BIGNUM *mpi_to_bn(gcry_mpi_t m)
{
	unsigned char *buf = NULL;
	size_t len = 0;
	if (gcry_mpi_aprint(GCRYMPI_FMT_USG, &buf, &len, m))
		return NULL;
	BIGNUM *bn = BN_secure_new();
	if (bn && !BN_bin2bn(buf, (int)len, bn)) {
		BN_clear_free(bn);
		bn = NULL;
	}
	pd_wipe(buf, len);
	gcry_free(buf);
	return bn;
}

static int setup_openssl(struct pd_key *k)
{
	BIGNUM *n = NULL, *e = NULL, *d = NULL, *p = NULL, *q = NULL;
	BIGNUM *dp = NULL, *dq = NULL, *qinv = NULL, *t = NULL;
	BN_CTX *bctx = NULL;
	OSSL_PARAM_BLD *bld = NULL;
	OSSL_PARAM *params = NULL;
	EVP_PKEY_CTX *pctx = NULL;
	EVP_PKEY *pkey = NULL;
	int r = -ENOMEM;

	n = mpi_to_bn(k->n); e = mpi_to_bn(k->e); d = mpi_to_bn(k->d);
	p = mpi_to_bn(k->sp); q = mpi_to_bn(k->sq);
	dp = BN_secure_new(); dq = BN_secure_new(); qinv = BN_secure_new(); t = BN_secure_new();
	bctx = BN_CTX_secure_new();
	if (!n || !e || !d || !p || !q || !dp || !dq || !qinv || !t || !bctx)
		goto out;
	/* OpenPGP stores u = p^-1 mod q; OpenSSL wants the CRT values
	 * d mod (p-1), d mod (q-1) and q^-1 mod p: compute them. */
	r = PD_EINTERNAL;
	BN_set_flags(d, BN_FLG_CONSTTIME);
	BN_set_flags(p, BN_FLG_CONSTTIME);
	BN_set_flags(q, BN_FLG_CONSTTIME);
	if (!BN_sub(t, p, BN_value_one()) || !BN_mod(dp, d, t, bctx) ||
	    !BN_sub(t, q, BN_value_one()) || !BN_mod(dq, d, t, bctx) ||
	    !BN_mod_inverse(qinv, q, p, bctx))
		goto out;
	bld = OSSL_PARAM_BLD_new();
	if (!bld ||
	    !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, n) ||
	    !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, e) ||
	    !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_D, d) ||
	    !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_FACTOR1, p) ||
	    !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_FACTOR2, q) ||
	    !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_EXPONENT1, dp) ||
	    !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_EXPONENT2, dq) ||
	    !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_COEFFICIENT1, qinv))
		goto out;
	params = OSSL_PARAM_BLD_to_param(bld);
	pctx = EVP_PKEY_CTX_new_from_name(NULL, "RSA", NULL);
	if (!params || !pctx || EVP_PKEY_fromdata_init(pctx) <= 0 ||
	    EVP_PKEY_fromdata(pctx, &pkey, EVP_PKEY_KEYPAIR, params) <= 0)
		goto out;
	k->rsa_pkey = pkey;
	r = 0;
out:
	EVP_PKEY_CTX_free(pctx);
	OSSL_PARAM_free(params); /* also clear-frees the secure block it owns */
	OSSL_PARAM_BLD_free(bld);
	BN_CTX_free(bctx);
	BN_free(n); BN_free(e);
	BN_clear_free(d); BN_clear_free(p); BN_clear_free(q);
	BN_clear_free(dp); BN_clear_free(dq); BN_clear_free(qinv); BN_clear_free(t);
	return r;
}

static int setup_gcrypt(struct pd_key *k)
{
	gcry_sexp_t s;
	gcry_error_t e = gcry_sexp_build(&s, NULL, "(private-key(rsa(n%m)(e%m)(d%m)(p%m)(q%m)(u%m)))",
	                                 k->n, k->e, k->d, k->sp, k->sq, k->u);
	if (e)
		return pd_err_from_gcry(e);
	k->rsa_pkey = s;
	return 0;
}

static int decrypt_openssl(const struct pd_key *k, unsigned worker, const uint8_t *c, uint8_t *out, size_t klen)
{
	EVP_PKEY_CTX *ctx = NULL, *tmp = NULL;

	if (worker < PD_MAX_WORKERS)
		ctx = k->rsa_ctx[worker];
	if (!ctx) {
		ctx = EVP_PKEY_CTX_new_from_pkey(NULL, k->rsa_pkey, NULL);
		if (!ctx)
			return -ENOMEM;
		if (EVP_PKEY_decrypt_init(ctx) <= 0 || EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_NO_PADDING) <= 0) {
			EVP_PKEY_CTX_free(ctx);
			return PD_EINTERNAL;
		}
		/* Only worker `worker` ever touches this slot (pgp/key.h), so the
		 * lazy fill needs no lock; out-of-range callers get a one-off. */
		if (worker < PD_MAX_WORKERS)
			((struct pd_key *)k)->rsa_ctx[worker] = ctx;
		else
			tmp = ctx;
	}
	size_t outlen = klen;
	int ok = EVP_PKEY_decrypt(ctx, out, &outlen, c, klen);
	EVP_PKEY_CTX_free(tmp);
	if (ok <= 0 || outlen != klen)
		return PD_EINTERNAL;
	return 0;
}

static int decrypt_gcrypt(const struct pd_key *k, const uint8_t *c, uint8_t *out, size_t klen)
{
	gcry_sexp_t data = NULL, res = NULL;
	gcry_mpi_t m = NULL;
	size_t mlen = 0;
	int r;

	gcry_error_t e = gcry_sexp_build(&data, NULL, "(enc-val(flags raw)(rsa(a%b)))", (int)klen, c);
	if (!e)
		e = gcry_pk_decrypt(&res, data, k->rsa_pkey);
	if (e) {
		r = pd_err_from_gcry(e);
		goto out;
	}
	/* (flags raw) gives (value EM); older forms give a bare MPI.  Read in
	 * place: gcry_sexp_find_token would copy EM into ordinary memory. */
	size_t tn = 0;
	const char *t = gcry_sexp_nth_data(res, 0, &tn);
	bool is_value = t && tn == 5 && memcmp(t, "value", 5) == 0;
	m = gcry_sexp_nth_mpi(res, is_value ? 1 : 0, GCRYMPI_FMT_USG);
	r = PD_EINTERNAL;
	if (!m)
		goto out;
	mlen = (gcry_mpi_get_nbits(m) + 7) / 8;
	if (mlen > klen)
		goto out;
	memset(out, 0, klen - mlen);
	if (gcry_mpi_print(GCRYMPI_FMT_USG, out + (klen - mlen), mlen, NULL, m))
		goto out;
	r = 0;
out:
	gcry_mpi_release(m);
	gcry_sexp_release(res);
	gcry_sexp_release(data);
	return r;
}

int pd_rsa_decrypt_raw(const struct pd_key *k, unsigned worker, const uint8_t *c, size_t clen,
                       uint8_t *out, size_t klen)
{
	size_t nlen = (gcry_mpi_get_nbits(k->n) + 7) / 8;
	uint8_t *cp;
	gcry_mpi_t cm = NULL;
	int r;

	if (!k->rsa_pkey || klen != nlen || nlen == 0)
		return PD_EINTERNAL;
	/* Strip leading zeros of the (public) ciphertext, then left-pad to k. */
	while (clen > 0 && c[0] == 0) {
		c++;
		clen--;
	}
	if (clen > klen)
		return PD_EMALFORMED;
	cp = calloc(1, klen);
	if (!cp)
		return -ENOMEM;
	memcpy(cp + (klen - clen), c, clen);
	/* c >= n is refused here, identically for both backends. */
	r = PD_EMALFORMED;
	if (gcry_mpi_scan(&cm, GCRYMPI_FMT_USG, cp, klen, NULL) || gcry_mpi_cmp(cm, k->n) >= 0)
		goto out;
	if (k->rsa_backend == PD_RSA_OPENSSL)
		r = decrypt_openssl(k, worker, cp, out, klen);
	else
		r = decrypt_gcrypt(k, cp, out, klen);
	if (r)
		pd_wipe(out, klen);
out:
	gcry_mpi_release(cm);
	free(cp);
	return r;
}

/* Round trip of a random m through the private key: proves d (and the CRT
 * values each backend uses) belong to n, e. */
static int self_test(struct pd_key *k, size_t klen)
{
	gcry_mpi_t m = gcry_mpi_snew(0), c = gcry_mpi_new(0), back = NULL;
	uint8_t *cbuf = NULL, *obuf = gcry_malloc_secure(klen);
	size_t clen = 0;
	int r = -ENOMEM;

	if (!m || !c || !obuf)
		goto out;
	/* gcry_mpi_randomize rounds up to whole octets: clear the top bits
	 * so that m < n. */
	gcry_mpi_randomize(m, (unsigned)gcry_mpi_get_nbits(k->n), GCRY_WEAK_RANDOM);
	gcry_mpi_clear_highbit(m, gcry_mpi_get_nbits(k->n) - 1);
	gcry_mpi_powm(c, m, k->e, k->n);
	if (gcry_mpi_aprint(GCRYMPI_FMT_USG, &cbuf, &clen, c))
		goto out;
	r = pd_rsa_decrypt_raw(k, PD_MAX_WORKERS, cbuf, clen, obuf, klen);
	if (r)
		goto out;
	r = PD_EINTEGRITY;
	if (gcry_mpi_scan(&back, GCRYMPI_FMT_USG, obuf, klen, NULL) == 0 && gcry_mpi_cmp(back, m) == 0)
		r = 0;
out:
	gcry_mpi_release(m);
	gcry_mpi_release(c);
	gcry_mpi_release(back);
	gcry_free(cbuf);
	if (obuf) {
		pd_wipe(obuf, klen);
		gcry_free(obuf);
	}
	return r;
}

int pd_rsa_setup(struct pd_key *k, enum pd_rsa_backend backend)
{
	int r;

	if (!k->n || !k->e || !k->d || !k->sp || !k->sq)
		return PD_EINTERNAL;
	if (backend == PD_RSA_DEFAULT)
		backend = pd_rsa_default_backend();
	if (backend != PD_RSA_OPENSSL && backend != PD_RSA_GCRYPT)
		return PD_EUNSUPPORTED;
	unsigned nbits = gcry_mpi_get_nbits(k->n);
	if (nbits < 512 || nbits > 16384 + 8 || gcry_mpi_get_nbits(k->e) < 2)
		return PD_EUNSUPPORTED;

	/* n == p*q, and p < q with u = p^-1 mod q as libgcrypt expects: swap
	 * and recompute u for keys written the other way round. */
	gcry_mpi_t t = gcry_mpi_snew(0);
	if (!t)
		return -ENOMEM;
	gcry_mpi_mul(t, k->sp, k->sq);
	/* Both factors of real size: a factor 1 would make the CRT divide by
	 * zero (libgcrypt aborts on that). */
	int same = gcry_mpi_cmp(t, k->n) == 0 && gcry_mpi_get_nbits(k->sp) >= nbits / 4 &&
	           gcry_mpi_get_nbits(k->sq) >= nbits / 4 && gcry_mpi_test_bit(k->e, 0);
	if (same && gcry_mpi_cmp(k->sp, k->sq) > 0)
		gcry_mpi_swap(k->sp, k->sq);
	if (same) {
		if (!k->u)
			k->u = gcry_mpi_snew(0);
		if (!k->u || !gcry_mpi_invm(k->u, k->sp, k->sq))
			same = 0;
	}
	gcry_mpi_release(t);
	if (!same)
		return PD_EINTEGRITY;

	k->rsa_backend = backend;
	r = backend == PD_RSA_OPENSSL ? setup_openssl(k) : setup_gcrypt(k);
	if (r)
		return r;
	r = self_test(k, (nbits + 7) / 8);
	if (r)
		pd_rsa_cleanup(k);
	return r;
}

void pd_rsa_cleanup(struct pd_key *k)
{
	if (!k)
		return;
	for (size_t i = 0; i < PD_MAX_WORKERS; i++) {
		EVP_PKEY_CTX_free(k->rsa_ctx[i]);
		k->rsa_ctx[i] = NULL;
	}
	if (k->rsa_pkey) {
		if (k->rsa_backend == PD_RSA_OPENSSL)
			EVP_PKEY_free(k->rsa_pkey);
		else
			gcry_sexp_release(k->rsa_pkey);
	}
	k->rsa_pkey = NULL;
}
