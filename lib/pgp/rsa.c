/* SPDX-License-Identifier: MIT */
/*
 * RSA private-key backends: OpenSSL 3 (EVP_PKEY, RSA_NO_PADDING, one
 * EVP_PKEY_CTX per worker) and libgcrypt (CRT on its secure MPIs,
 * decrypt_gcrypt; no gcry_pk_decrypt per message).
 * Both compute the raw m = c^d mod n with blinding; padding is checked by
 * the caller.  For the libgcrypt backend k->rsa_pkey holds the key's
 * gcry_sexp_t (secure memory, since it is built from secure MPIs), made
 * at set-up and used by nothing per message.
 *
 * Split operations (OpenSSL backend, large keys): one RSA-CRT operation is
 * two independent half-size exponentiations, c^dp mod p and c^dq mod q.
 * When the worker has a pd_helper and an idle thread takes the q half, the
 * operation finishes in about half the time: that is what a lone message
 * waits for at low load.  It is done here with OpenSSL's BIGNUM primitives
 * (BN_mod_exp_mont_consttime, Montgomery arithmetic) in the same shape as
 * OpenSSL's own RSA: base blinding with a per-worker pair (r^e, r^-1)
 * squared after each use and renewed every 32, Garner recombination in
 * Montgomery form, and a check m^e == c before the result is used (a
 * faulty half falls back to the EVP path).  Whether splitting pays is
 * measured once per prime size when a key is loaded: OpenSSL 3.0 computes
 * both 1024-bit halves of RSA-2048 at once with AVX-512 IFMA, faster than
 * two threads could, so RSA-2048 is normally not split.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include <gcrypt.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/params.h>
#include <openssl/rsa.h>

#include "pd-config.h"
#include "pgp/rsa.h"
#include "worker.h"

static int crt_setup(struct pd_key *k, BIGNUM **n, BIGNUM **e, BIGNUM **p, BIGNUM **q, BIGNUM **dp, BIGNUM **dq,
                     const BIGNUM *qinv, BN_CTX *bctx);

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

	ERR_clear_error(); /* only this setup's errors count (pd_ossl_error) */
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
	r = -ENOMEM;
	if (!k->slots) /* a key made outside a ring (tests) */
		k->slots = PD_MAX_WORKERS;
	k->rsa_ctx = calloc(k->slots, sizeof(void *));
	k->rsa_crtw = calloc(k->slots, sizeof(void *));
	if (!k->rsa_ctx || !k->rsa_crtw)
		goto out;
	/* Unbalanced primes (rare) just never split. */
	r = crt_setup(k, &n, &e, &p, &q, &dp, &dq, qinv, bctx);
	if (r == PD_EUNSUPPORTED)
		r = 0;
out:
	/* The key checked out with libgcrypt (pd_rsa_setup): what fails here
	 * is most often the secure heap (EVP_PKEY_fromdata copies d, p, q,
	 * the CRT values into it), to be reported as such. */
	if (r == PD_EINTERNAL)
		r = pd_ossl_error(r);
	else
		ERR_clear_error();
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

/* Worker `worker` keeps its state for k in its slot (pgp/key.h); others
 * (an index past the ring's worker count, the self-tests) make it per use. */
static bool own_slot(const struct pd_key *k, unsigned worker)
{
	return worker < k->slots && k->rsa_ctx;
}

static int decrypt_openssl(const struct pd_key *k, unsigned worker, const uint8_t *c, uint8_t *out, size_t klen)
{
	EVP_PKEY_CTX *ctx = NULL, *tmp = NULL;

	if (own_slot(k, worker))
		ctx = k->rsa_ctx[worker];
	if (!ctx) {
		ctx = EVP_PKEY_CTX_new_from_pkey(NULL, k->rsa_pkey, NULL);
		if (!ctx)
			return -ENOMEM;
		if (EVP_PKEY_decrypt_init(ctx) <= 0 || EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_NO_PADDING) <= 0) {
			EVP_PKEY_CTX_free(ctx);
			return pd_ossl_error(PD_EINTERNAL);
		}
		/* Only worker `worker` ever touches this slot (pgp/key.h), so the
		 * lazy fill needs no lock; out-of-range callers, and a worker
		 * that keeps state for as many keys as it may, get a one-off. */
		if (own_slot(k, worker) && pd_worker_key_state_take(worker))
			((struct pd_key *)k)->rsa_ctx[worker] = ctx;
		else
			tmp = ctx;
	}
	size_t outlen = klen;
	int ok = EVP_PKEY_decrypt(ctx, out, &outlen, c, klen);
	EVP_PKEY_CTX_free(tmp);
	if (ok <= 0)
		return pd_ossl_error(PD_EINTERNAL);
	return outlen == klen ? 0 : PD_EINTERNAL;
}

/* out^e == c mod n?  0, PD_EINTERNAL when not, -ENOMEM.  The public
 * operation; m is held in OpenSSL's secure heap. */
static int check_result(const struct pd_key *k, const uint8_t *c, const uint8_t *out, size_t klen)
{
	BN_CTX *ctx = BN_CTX_secure_new();
	BIGNUM *m = BN_secure_new(), *n = BN_new(), *e = BN_new(), *t = BN_secure_new(), *cb = BN_new();
	uint8_t *buf = malloc(klen);
	size_t len;
	int r = -ENOMEM;
	if (ctx && m && n && e && t && cb && buf &&
	    !gcry_mpi_print(GCRYMPI_FMT_USG, buf, klen, &len, k->n) && BN_bin2bn(buf, (int)len, n) &&
	    !gcry_mpi_print(GCRYMPI_FMT_USG, buf, klen, &len, k->e) && BN_bin2bn(buf, (int)len, e) &&
	    BN_bin2bn(out, (int)klen, m) && BN_bin2bn(c, (int)klen, cb) && BN_mod_exp(t, m, e, n, ctx))
		r = BN_cmp(t, cb) == 0 ? 0 : PD_EINTERNAL;
	free(buf);
	BN_clear_free(m);
	BN_clear_free(t);
	BN_free(n);
	BN_free(e);
	BN_free(cb);
	BN_CTX_free(ctx);
	ERR_clear_error();
	return r;
}

/* ---- split CRT (see the top of this file) ---- */

struct crt {                    /* per key, read-only after setup */
	BIGNUM *n, *e, *p, *q, *dp, *dq, *qinv_mont; /* qinv_mont = (q^-1 mod p)*R mod p */
	BN_MONT_CTX *mn, *mp, *mq;
	bool split;                 /* worth handing the q half to a helper */
};

#define BLIND_RENEW 32 /* uses of one blinding pair, as OpenSSL's BN_BLINDING */
#define BLIND_BATCH 8  /* fresh pairs made with one inversion */

struct crt_worker {             /* per worker per key */
	BN_CTX *ctx[2];             /* [1] is lent to the q half, wherever it runs */
	BIGNUM *a_mont, *ai_mont;   /* blinding pair r^e and r^-1 mod n, Montgomery form */
	unsigned uses;
	/* Fresh r and r^-1 (Montgomery form) for the next renewals, made
	 * BLIND_BATCH at a time with one inversion; the first n_stock are left. */
	BIGNUM *stock_r[BLIND_BATCH], *stock_ri[BLIND_BATCH];
	unsigned n_stock;
};

static void crt_free(struct crt *c)
{
	if (!c)
		return;
	BN_free(c->n); BN_free(c->e);
	BN_clear_free(c->p); BN_clear_free(c->q);
	BN_clear_free(c->dp); BN_clear_free(c->dq); BN_clear_free(c->qinv_mont);
	BN_MONT_CTX_free(c->mn); BN_MONT_CTX_free(c->mp); BN_MONT_CTX_free(c->mq);
	free(c);
}

static void crtw_free(struct crt_worker *w)
{
	if (!w)
		return;
	BN_CTX_free(w->ctx[0]);
	BN_CTX_free(w->ctx[1]);
	BN_clear_free(w->a_mont);
	BN_clear_free(w->ai_mont);
	for (unsigned i = 0; i < BLIND_BATCH; i++) {
		BN_clear_free(w->stock_r[i]);
		BN_clear_free(w->stock_ri[i]);
	}
	free(w);
}

static struct crt_worker *crtw_new(void)
{
	struct crt_worker *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->ctx[0] = BN_CTX_secure_new();
	w->ctx[1] = BN_CTX_secure_new();
	w->a_mont = BN_secure_new();
	w->ai_mont = BN_secure_new();
	bool ok = w->ctx[0] && w->ctx[1] && w->a_mont && w->ai_mont;
	for (unsigned i = 0; i < BLIND_BATCH; i++) {
		w->stock_r[i] = BN_secure_new();
		w->stock_ri[i] = BN_secure_new();
		ok = ok && w->stock_r[i] && w->stock_ri[i];
	}
	if (!ok) {
		crtw_free(w);
		return NULL;
	}
	return w;
}

/* t = b^e for b in Montgomery form (t too), e public: square-and-multiply
 * over the bits of e, Montgomery multiplications only, so the sequence of
 * operations depends on e alone.  (BN_mod_exp_mont would take its
 * constant-time path for a flagged prime: a window of one bit for a 17-bit
 * exponent and five times slower.)  t != b. */
static bool mont_pow_public(BIGNUM *t, const BIGNUM *b, const BIGNUM *e, BN_MONT_CTX *mont, BN_CTX *ctx)
{
	if (!BN_copy(t, b))
		return false;
	for (int i = BN_num_bits(e) - 2; i >= 0; i--)
		if (!BN_mod_mul_montgomery(t, t, t, mont, ctx) ||
		    (BN_is_bit_set(e, i) && !BN_mod_mul_montgomery(t, t, b, mont, ctx)))
			return false;
	return true;
}

/* BLIND_BATCH fresh values r_i (random in [1, n)) and r_i^-1, Montgomery
 * form, with one inversion mod n for all (Montgomery's trick): a 4096-bit
 * constant-time inversion costs 0.5 ms here, a quarter of a split
 * operation, which one message in 32 would otherwise wait for. */
static bool blinding_refill(const struct crt *c, struct crt_worker *w, BN_CTX *ctx)
{
	BIGNUM **r = w->stock_r, **ri = w->stock_ri;
	bool ok = false;
	BN_CTX_start(ctx);
	BIGNUM *t = BN_CTX_get(ctx), *inv = BN_CTX_get(ctx);
	if (!inv)
		goto out;
	for (int tries = 0; tries < 8 && !ok; tries++) {
		/* ri[i] = r_0 ... r_i for now */
		for (unsigned i = 0; i < BLIND_BATCH; i++) {
			do
				if (!BN_priv_rand_range(t, c->n))
					goto out;
			while (BN_is_zero(t));
			if (!BN_to_montgomery(r[i], t, c->mn, ctx) ||
			    !(i ? BN_mod_mul_montgomery(ri[i], ri[i - 1], r[i], c->mn, ctx) : BN_copy(ri[0], r[0]) != NULL))
				goto out;
		}
		if (!BN_from_montgomery(t, ri[BLIND_BATCH - 1], c->mn, ctx))
			goto out;
		BN_set_flags(t, BN_FLG_CONSTTIME); /* as OpenSSL's blinding does */
		ERR_set_mark();
		BIGNUM *got = BN_mod_inverse(inv, t, c->n, ctx);
		ERR_pop_to_mark(); /* "no inverse" is only a reason to draw again */
		if (!got)
			continue;
		/* inv = (r_0 ... r_i)^-1, so r_i^-1 = inv * (r_0 ... r_i-1) */
		if (!BN_to_montgomery(inv, inv, c->mn, ctx))
			goto out;
		for (unsigned i = BLIND_BATCH - 1; i > 0; i--)
			if (!BN_mod_mul_montgomery(ri[i], inv, ri[i - 1], c->mn, ctx) ||
			    !BN_mod_mul_montgomery(inv, inv, r[i], c->mn, ctx))
				goto out;
		ok = BN_copy(ri[0], inv) != NULL;
	}
out:
	w->n_stock = ok ? BLIND_BATCH : 0;
	if (inv) {
		BN_clear(t);
		BN_clear(inv);
	}
	BN_CTX_end(ctx);
	return ok;
}

/* The blinding pair for the next use: fresh every BLIND_RENEW uses (r^e
 * from the stock's r, 17 multiplications for e = 65537), else the previous
 * pair squared (still r'^e, r'^-1 for r' = r^2). */
static bool blinding_next(const struct crt *c, struct crt_worker *w, BN_CTX *ctx)
{
	if (w->uses++ % BLIND_RENEW != 0)
		return BN_mod_mul_montgomery(w->a_mont, w->a_mont, w->a_mont, c->mn, ctx) &&
		       BN_mod_mul_montgomery(w->ai_mont, w->ai_mont, w->ai_mont, c->mn, ctx);
	bool ok = (w->n_stock > 0 || blinding_refill(c, w, ctx));
	if (ok) {
		unsigned i = --w->n_stock;
		ok = mont_pow_public(w->a_mont, w->stock_r[i], c->e, c->mn, ctx) && BN_copy(w->ai_mont, w->stock_ri[i]);
		BN_clear(w->stock_r[i]);
		BN_clear(w->stock_ri[i]);
	}
	if (!ok)
		w->uses = 0; /* renew next time */
	return ok;
}

struct half {
	BIGNUM *r;
	const BIGNUM *a, *d, *m;
	BN_MONT_CTX *mont;
	BN_CTX *ctx;
	int ok;
};

static void run_half(void *arg)
{
	struct half *h = arg;
	h->ok = BN_mod_exp_mont_consttime(h->r, h->a, h->d, h->m, h->ctx, h->mont);
}

/* x mod p for x < p*R (R of p's Montgomery context), without a division by
 * the secret p: (x R^-1) R mod p, as OpenSSL's own RSA does. */
static bool reduce_mont(BIGNUM *r, const BIGNUM *x, BN_MONT_CTX *mont, BN_CTX *ctx)
{
	return BN_from_montgomery(r, x, mont, ctx) && BN_to_montgomery(r, r, mont, ctx);
}

static atomic_int inject_fault; /* pd__rsa_inject_fault */

void pd__rsa_inject_fault(int half) { atomic_store(&inject_fault, half); }

/* m^e == x mod the prime of mont?  0 if so, PD_EINTERNAL if not (a fault),
 * -ENOMEM when the arithmetic could not allocate.  x is reduced already
 * (reduce_mont), m < n.  t is scratch from ctx's current frame. */
static int check_half(BIGNUM *t, const BIGNUM *m, const BIGNUM *x, const BIGNUM *e, BN_MONT_CTX *mont,
                      BN_CTX *ctx)
{
	BN_CTX_start(ctx);
	BIGNUM *b = BN_CTX_get(ctx);
	int r = -ENOMEM;
	if (b && reduce_mont(b, m, mont, ctx) && BN_to_montgomery(b, b, mont, ctx) &&
	    mont_pow_public(t, b, e, mont, ctx) && BN_from_montgomery(t, t, mont, ctx))
		r = BN_cmp(t, x) == 0 ? 0 : PD_EINTERNAL;
	if (b)
		BN_clear(b);
	BN_CTX_end(ctx);
	return r;
}

/* Room in OpenSSL's secure heap for one more worker's split state for a
 * key of klen bytes (44 * klen measured for RSA-2048: the blinding stock
 * and the two BN_CTX pools; 48 with a margin), keeping half of the heap for
 * everything else: the EVP path's own needs must never be starved by an
 * optimisation. */
static bool heap_has_room(size_t klen)
{
	size_t total, used;
	pd_secure_heap(&total, &used);
	return !total || used + 48 * klen <= total / 2;
}

/* A worker's slot in rsa_crtw once the split path ran out of (secure)
 * memory there: its state is freed, so that the EVP path has the memory,
 * and the worker uses EVP for this key from then on. */
static struct crt_worker split_off_mark;
#define SPLIT_OFF (&split_off_mark)

static bool is_split_off(const struct pd_key *k, unsigned worker)
{
	return own_slot(k, worker) && k->rsa_crtw[worker] == SPLIT_OFF;
}

/* Worker slot `worker` (own_slot) stops splitting for key k; its
 * state w (may be NULL) is freed. */
static void split_off(const struct pd_key *k, unsigned worker, struct crt_worker *w)
{
	crtw_free(w);
	((struct pd_key *)k)->rsa_crtw[worker] = SPLIT_OFF; /* own slot: see pgp/key.h */
}

/* out = c^d mod n on the CRT path, the q half through h when it has an idle
 * thread.  0; PD_EINTERNAL when the result failed its check (a fault); or
 * -ENOMEM, after which this worker does not split for this key again.  The
 * caller then uses EVP. */
static int decrypt_split(const struct pd_key *k, unsigned worker, const struct pd_helper *helper,
                         const uint8_t *cin, uint8_t *out, size_t klen)
{
	const struct crt *c = k->rsa_crt;
	struct crt_worker *w = NULL, *tmp = NULL;
	struct pd_task task = { 0 };
	struct half hq = { 0 };
	bool started = false;
	int r = -ENOMEM;

	if (is_split_off(k, worker)) /* decrypt_raw does not come here then; never use the mark */
		return -ENOMEM;
	bool own = own_slot(k, worker);
	if (own)
		w = k->rsa_crtw[worker];
	if (!w) {
		/* a one-off state (the self-test) is freed right after */
		w = !own || heap_has_room(klen) ? crtw_new() : NULL;
		if (!w) {
			if (own)
				split_off(k, worker, NULL);
			return -ENOMEM;
		}
		if (own) /* own slot: see pgp/key.h */
			((struct pd_key *)k)->rsa_crtw[worker] = w;
		else
			tmp = w;
	}
	BN_CTX *ctx = w->ctx[0];
	BN_CTX_start(ctx);
	BIGNUM *x = BN_CTX_get(ctx), *xp = BN_CTX_get(ctx), *xq = BN_CTX_get(ctx);
	BIGNUM *m1 = BN_CTX_get(ctx), *m2 = BN_CTX_get(ctx), *t = BN_CTX_get(ctx);
	if (!t || !BN_bin2bn(cin, (int)klen, x))
		goto out;
	/* Every failure of the arithmetic below is one to allocate. */
	/* x = c * r^e mod n: everything below sees only blinded values. */
	if (!blinding_next(c, w, ctx) || !BN_mod_mul_montgomery(x, x, w->a_mont, c->mn, ctx) ||
	    !reduce_mont(xp, x, c->mp, ctx) || !reduce_mont(xq, x, c->mq, ctx))
		goto out;
	hq = (struct half){ .r = m2, .a = xq, .d = c->dq, .m = c->q, .mont = c->mq, .ctx = w->ctx[1] };
	task.fn = run_half;
	task.arg = &hq;
	started = helper && c->split && helper->start(helper->ctx, &task);
	int ok1 = BN_mod_exp_mont_consttime(m1, xp, c->dp, c->p, ctx, c->mp);
	if (started)
		helper->finish(helper->ctx, &task); /* hq lives on this stack: always wait */
	else
		run_half(&hq);
	if (!ok1 || !hq.ok)
		goto out;
	int fault = atomic_load_explicit(&inject_fault, memory_order_relaxed);
	if (fault && atomic_compare_exchange_strong(&inject_fault, &fault, 0) && !BN_add_word(fault == 1 ? m1 : m2, 1))
		goto out;
	/* Garner: m = m2 + q * ((m1 - m2) * q^-1 mod p). */
	if (!reduce_mont(t, m2, c->mp, ctx) || !BN_mod_sub_quick(m1, m1, t, c->p) ||
	    !BN_mod_mul_montgomery(m1, m1, c->qinv_mont, c->mp, ctx) || !BN_mul(t, m1, c->q, ctx) ||
	    !BN_add(m1, t, m2))
		goto out;
	/* Fault check: a wrong result must never reach the PKCS#1 decoder (a
	 * wrong half would also reveal a factor of n).  m^e == x mod n is
	 * checked as m^e == x mod p and mod q (the same by the CRT) in about
	 * half the time: 30 us against 55 for RSA-4096 here.  The exponent is
	 * public and the values are blinded; the arithmetic mod the secret
	 * primes is the Montgomery multiplication and reduction that the
	 * halves and reduce_mont use already. */
	if ((r = check_half(t, m1, xp, c->e, c->mp, ctx)) != 0 || (r = check_half(t, m1, xq, c->e, c->mq, ctx)) != 0)
		goto out;
	r = -ENOMEM;
	/* Unblind: m1 * r^-1 mod n. */
	if (!BN_mod_mul_montgomery(m1, m1, w->ai_mont, c->mn, ctx) || BN_bn2binpad(m1, out, (int)klen) != (int)klen)
		goto out;
	r = 0;
out:
	if (t) {
		BN_clear(m1);
		BN_clear(m2);
		BN_clear(t);
	}
	BN_CTX_end(ctx);
	crtw_free(tmp);
	if (r == -ENOMEM && !tmp)
		split_off(k, worker, w);
	return r;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Does handing one half to another thread pay for this prime size?  The
 * answer is measured once per size per process (best of three of a whole
 * EVP operation against one half) and kept; PD_RSA_SPLIT=0|1 overrides. */
static bool split_pays(const struct pd_key *k, const struct crt *c, size_t klen)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static struct { int bits; bool pays; } seen[16];
	static unsigned n_seen;
	const char *env = getenv("PD_RSA_SPLIT");
	if (env && (strcmp(env, "0") == 0 || strcmp(env, "1") == 0))
		return env[0] == '1';

	int bits = BN_num_bits(c->p);
	bool pays = false, found = false;
	pthread_mutex_lock(&lock);
	for (unsigned i = 0; i < n_seen; i++)
		if (seen[i].bits == bits) {
			pays = seen[i].pays;
			found = true;
		}
	pthread_mutex_unlock(&lock);
	if (found)
		return pays;

	BN_CTX *ctx = BN_CTX_secure_new();
	BIGNUM *x = BN_new(), *y = BN_secure_new();
	uint8_t *in = malloc(klen), *res = OPENSSL_secure_malloc(klen);
	double best_full = 1e9, best_half = 1e9;
	if (!ctx || !x || !y || !in || !res || !BN_rand_range(x, c->n) || BN_bn2binpad(x, in, (int)klen) != (int)klen)
		goto out;
	for (int i = 0; i < 3; i++) {
		double t0 = now_s();
		if (decrypt_openssl(k, PD_MAX_WORKERS, in, res, klen) != 0)
			goto out;
		double t1 = now_s();
		if (!reduce_mont(y, x, c->mp, ctx) || !BN_mod_exp_mont_consttime(y, y, c->dp, c->p, ctx, c->mp))
			goto out;
		double t2 = now_s();
		if (t1 - t0 < best_full)
			best_full = t1 - t0;
		if (t2 - t1 < best_half)
			best_half = t2 - t1;
	}
	/* A half must take clearly less than the whole, or two threads lose
	 * to one (hand-off, recombination, the check). */
	pays = best_half < 0.7 * best_full;
	pthread_mutex_lock(&lock);
	if (n_seen < sizeof(seen) / sizeof(seen[0])) {
		seen[n_seen].bits = bits;
		seen[n_seen].pays = pays;
		n_seen++;
	}
	pthread_mutex_unlock(&lock);
out:
	BN_CTX_free(ctx);
	BN_free(x);
	BN_clear_free(y);
	free(in);
	if (res)
		OPENSSL_secure_clear_free(res, klen);
	return pays;
}

/* Keep the CRT values of a freshly built OpenSSL key for split operations
 * (takes p, q, dp, dq, qinv on success; NULLs them in the caller). */
static int crt_setup(struct pd_key *k, BIGNUM **n, BIGNUM **e, BIGNUM **p, BIGNUM **q, BIGNUM **dp, BIGNUM **dq,
                     const BIGNUM *qinv, BN_CTX *bctx)
{
	struct crt *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->qinv_mont = BN_secure_new();
	c->mn = BN_MONT_CTX_new();
	c->mp = BN_MONT_CTX_new();
	c->mq = BN_MONT_CTX_new();
	/* Montgomery reduction of x < n into p's and q's range needs n < p*R
	 * and n < q*R: true when p and q have the same number of words. */
	bool balanced = (BN_num_bits(*p) + BN_BITS2 - 1) / BN_BITS2 == (BN_num_bits(*q) + BN_BITS2 - 1) / BN_BITS2;
	if (!c->qinv_mont || !c->mn || !c->mp || !c->mq || !balanced ||
	    !BN_MONT_CTX_set(c->mn, *n, bctx) || !BN_MONT_CTX_set(c->mp, *p, bctx) ||
	    !BN_MONT_CTX_set(c->mq, *q, bctx) || !BN_to_montgomery(c->qinv_mont, qinv, c->mp, bctx)) {
		crt_free(c);
		return balanced ? -ENOMEM : PD_EUNSUPPORTED;
	}
	c->n = *n; c->e = *e; c->p = *p; c->q = *q; c->dp = *dp; c->dq = *dq;
	*n = *e = *p = *q = *dp = *dq = NULL;
	k->rsa_crt = c;
	c->split = split_pays(k, c, (size_t)BN_num_bytes(c->n));
	return 0;
}

/* m = c^d mod n into out[klen] (left-padded) with libgcrypt MPIs in its
 * secure pool only: no S-expression holds the key per message
 * (gcry_pk_decrypt found the key's parameters with sexp_find_token, which
 * copied them out of the secure k->rsa_pkey into the normal heap and freed
 * them unwiped).  CRT with base and exponent blinding:
 *   r random, prime to n;  c' = c * r^e        (mod n)
 *   m1 = c'^(d mod p-1 + s1(p-1)) mod p,  m2 likewise mod q (s1, s2 random)
 *   m' = m1 + p * ((m2 - m1) * u mod q)       (u = p^-1 mod q, pd_rsa_setup)
 *   m  = m' * r^-1 mod n
 * and m^e == c checked before m is used (a fault in one half would give
 * out a factor of n): a mismatch is PD_EINTERNAL.  Every temporary that
 * depends on the key is a secure MPI; the exponents are secure, which
 * libgcrypt's gcry_mpi_powm takes in constant time. */
/* One CRT half: out = cb^(d mod (prime-1) + s*(prime-1)) mod prime, s a
 * random 64-bit blinding of the exponent; ex, h and s are scratch (secure
 * MPIs of the key's size). */
static void blinded_half(gcry_mpi_t out, gcry_mpi_t cb, gcry_mpi_t d, gcry_mpi_t prime, gcry_mpi_t ex,
                         gcry_mpi_t h, gcry_mpi_t s)
{
	gcry_mpi_sub_ui(h, prime, 1);
	gcry_mpi_mod(ex, d, h);
	gcry_mpi_randomize(s, 64, GCRY_WEAK_RANDOM);
	gcry_mpi_mul(h, h, s);
	gcry_mpi_add(ex, ex, h);
	gcry_mpi_powm(out, cb, ex, prime);
}

static int decrypt_gcrypt(const struct pd_key *k, const uint8_t *c, uint8_t *out, size_t klen)
{
	unsigned nbits = gcry_mpi_get_nbits(k->n);
	gcry_mpi_t cm = NULL;
	gcry_mpi_t bl = gcry_mpi_snew(nbits), bi = gcry_mpi_snew(nbits), cb = gcry_mpi_snew(nbits);
	gcry_mpi_t ex = gcry_mpi_snew(nbits), m1 = gcry_mpi_snew(nbits), m2 = gcry_mpi_snew(nbits);
	gcry_mpi_t h = gcry_mpi_snew(nbits), m = gcry_mpi_snew(nbits);
	size_t mlen = 0;
	int r;

	if (!bl || !bi || !cb || !ex || !m1 || !m2 || !h || !m) {
		r = -ENOMEM;
		goto out;
	}
	r = pd_err_from_gcry(gcry_mpi_scan(&cm, GCRYMPI_FMT_USG, c, klen, NULL));
	if (r < 0)
		goto out;
	do {
		gcry_mpi_randomize(bl, nbits, GCRY_WEAK_RANDOM);
		gcry_mpi_mod(bl, bl, k->n);
	} while (gcry_mpi_cmp_ui(bl, 0) == 0 || !gcry_mpi_invm(bi, bl, k->n));
	gcry_mpi_powm(cb, bl, k->e, k->n);
	gcry_mpi_mulm(cb, cb, cm, k->n); /* c' = c * r^e */
	/* m1 = c'^(d mod p-1 + s1*(p-1)) mod p, m2 likewise mod q: the
	 * exponents blinded too, by random s1, s2 of 64 bits (the same value,
	 * by Fermat), so that an exponent's own length and bits differ from
	 * one operation to the next (libgcrypt's own CRT does the same). */
	blinded_half(m1, cb, k->d, k->sp, ex, h, bl);
	blinded_half(m2, cb, k->d, k->sq, ex, h, bl);
	/* m' = m1 + p * ((m2 - m1) * u mod q) */
	gcry_mpi_subm(h, m2, m1, k->sq);
	gcry_mpi_mulm(h, h, k->u, k->sq);
	gcry_mpi_mul(h, h, k->sp);
	gcry_mpi_add(m, m1, h);
	gcry_mpi_mulm(m, m, bi, k->n); /* unblind */
	gcry_mpi_powm(h, m, k->e, k->n);
	if (gcry_mpi_cmp(h, cm) != 0) {
		r = PD_EINTERNAL;
		goto out;
	}
	r = PD_EINTERNAL;
	mlen = (gcry_mpi_get_nbits(m) + 7) / 8;
	if (mlen > klen)
		goto out;
	memset(out, 0, klen - mlen);
	/* It copies m into secure memory first: that can fail (-ENOMEM). */
	r = pd_err_from_gcry(gcry_mpi_print(GCRYMPI_FMT_USG, out + (klen - mlen), mlen, NULL, m));
out:
	/* secure MPIs are wiped by libgcrypt on release */
	gcry_mpi_release(cm);
	gcry_mpi_release(bl);
	gcry_mpi_release(bi);
	gcry_mpi_release(cb);
	gcry_mpi_release(ex);
	gcry_mpi_release(m1);
	gcry_mpi_release(m2);
	gcry_mpi_release(h);
	gcry_mpi_release(m);
	return r;
}

/* The EVP path with its safeguard.  OpenSSL renews a key's blinding pair
 * every 32 operations; when an allocation of the renewal fails, that
 * operation fails and the pair is left inconsistent, and the key's next 31
 * operations succeed with a wrong result (OpenSSL 3.0), which the caller
 * would take for a wrong key: 32 messages INTEGRITY for one transient
 * failure.  So after any EVP failure on a key (with c < n, only resources
 * fail), every EVP result for it is checked (out^e == c: about 6% of an
 * RSA-2048 operation, paid only from then on); a wrong one is redone on
 * the split path, whose blinding is ours and whose halves are checked, or
 * fails -ENOMEM (temporary) where this worker cannot split. */
static int decrypt_evp(const struct pd_key *k, unsigned worker, const uint8_t *c, uint8_t *out, size_t klen)
{
	bool suspect = atomic_load_explicit(&k->rsa_evp_suspect, memory_order_relaxed);
	int r = decrypt_openssl(k, worker, c, out, klen);
	if (r) {
		atomic_store_explicit(&((struct pd_key *)k)->rsa_evp_suspect, true, memory_order_relaxed);
		return r;
	}
	if (!suspect || (r = check_result(k, c, out, klen)) != PD_EINTERNAL)
		return r;
	pd_wipe(out, klen);
	r = k->rsa_crt && !is_split_off(k, worker) ? decrypt_split(k, worker, NULL, c, out, klen) : -ENOMEM;
	return r == PD_EINTERNAL ? -ENOMEM : r;
}

static atomic_ulong split_failures;

unsigned long pd_split_failures(void) { return atomic_load(&split_failures); }

/* split: -1 never, 0 when the key and helper call for it, 1 always (self test). */
static int decrypt_raw(const struct pd_key *k, unsigned worker, const struct pd_helper *helper, int split,
                       const uint8_t *c, size_t clen, uint8_t *out, size_t klen)
{
	size_t nlen = (gcry_mpi_get_nbits(k->n) + 7) / 8;
	uint8_t *cp;
	gcry_mpi_t cm = NULL;
	int r;

	if (!k->rsa_pkey || klen != nlen || nlen == 0)
		return PD_EINTERNAL;
	/* pd_ossl_error reads the thread's whole queue: what a split half or
	 * an earlier operation left there must not be taken for this one's. */
	ERR_clear_error();
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
	const struct crt *crt = k->rsa_backend == PD_RSA_OPENSSL ? k->rsa_crt : NULL;
	if (crt && !is_split_off(k, worker) && (split > 0 || (split == 0 && helper && crt->split))) {
		r = decrypt_split(k, worker, helper, cp, out, klen);
		if (r)
			atomic_fetch_add(&split_failures, 1);
		if (r && split == 0) /* resources or a fault: the EVP path decides */
			r = decrypt_evp(k, worker, cp, out, klen);
	} else if (k->rsa_backend == PD_RSA_OPENSSL)
		r = decrypt_evp(k, worker, cp, out, klen);
	else
		r = decrypt_gcrypt(k, cp, out, klen);
	if (r)
		pd_wipe(out, klen);
out:
	gcry_mpi_release(cm);
	free(cp);
	return r;
}

int pd_rsa_decrypt_raw(const struct pd_key *k, unsigned worker, const struct pd_helper *helper,
                       const uint8_t *c, size_t clen, uint8_t *out, size_t klen)
{
	return decrypt_raw(k, worker, helper, 0, c, clen, out, klen);
}

/* Round trip of a random m through the private key: proves d (and the CRT
 * values each backend uses, and those of the split path) belong to n, e. */
static int self_test(struct pd_key *k, size_t klen, int split)
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
	r = decrypt_raw(k, PD_MAX_WORKERS, NULL, split, cbuf, clen, obuf, klen);
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
	r = self_test(k, (nbits + 7) / 8, -1);
	if (!r && k->rsa_crt)
		r = self_test(k, (nbits + 7) / 8, 1);
	if (r)
		pd_rsa_cleanup(k);
	return r;
}

void pd_rsa_cleanup(struct pd_key *k)
{
	if (!k)
		return;
	for (size_t i = 0; i < k->slots; i++) {
		if (k->rsa_ctx && k->rsa_ctx[i]) {
			EVP_PKEY_CTX_free(k->rsa_ctx[i]);
			pd_worker_key_state_give((unsigned)i);
		}
		if (k->rsa_crtw && k->rsa_crtw[i] != SPLIT_OFF)
			crtw_free(k->rsa_crtw[i]);
	}
	free(k->rsa_ctx);
	free(k->rsa_crtw);
	k->rsa_ctx = NULL;
	k->rsa_crtw = NULL;
	crt_free(k->rsa_crt);
	k->rsa_crt = NULL;
	if (k->rsa_pkey) {
		if (k->rsa_backend == PD_RSA_OPENSSL)
			EVP_PKEY_free(k->rsa_pkey);
		else
			gcry_sexp_release(k->rsa_pkey);
	}
	k->rsa_pkey = NULL;
}
