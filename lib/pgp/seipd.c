/* SPDX-License-Identifier: MIT */
/*
 * SEIPD v1 (CFB + MDC) and SED (OpenPGP CFB with resync), see seipd.h.
 *
 * The decrypted stream is prefix (blocklen + 2) || packets || D3 14 || SHA-1.
 * We cannot know where the MDC starts until the input ends, so the last 22
 * plaintext octets are always held back; everything before them is hashed
 * and released.  The quick check in the prefix is ignored on purpose: for
 * public-key session keys it would be an oracle (RFC 9580 §13.4), and the
 * MDC decides anyway.
 */
#include "pgp/seipd.h"

#include "pgp/algo.h"

#define MDC_LEN 22
#define STEP 4096

struct pd_cfb {
	gcry_cipher_hd_t h;
	gcry_md_hd_t md;
	int galgo;
	unsigned flags;
	bool sed;
	size_t bs;
	size_t prefix_left;   /* plaintext octets of the prefix still to drop */
	bool synced;          /* SED: resync done after the prefix */
	uint8_t hold[MDC_LEN];
	size_t hold_n;
	bool done;
};

int pd_cfb_new(struct pd_cfb **ret, struct pd_worker *w, const struct pd_sesskey *sk, bool sed)
{
	int galgo = pd_sym_gcry(sk->algo);
	size_t bs = pd_sym_blklen(sk->algo);
	int r;

	if (!galgo)
		return PD_EUNSUPPORTED;
	/* A key of the wrong length cannot come from a valid PKESK; treat it
	 * like any other wrong key. */
	if (sk->len != pd_sym_keylen(sk->algo))
		return PD_EINTEGRITY;
	struct pd_cfb *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->galgo = galgo;
	c->bs = bs;
	c->sed = sed;
	c->flags = sed ? GCRY_CIPHER_ENABLE_SYNC : 0;
	c->prefix_left = bs + 2;
	r = pd_worker_take_cipher(w, galgo, GCRY_CIPHER_MODE_CFB, c->flags, &c->h);
	if (r < 0)
		goto fail;
	r = pd_err_from_gcry(gcry_cipher_setkey(c->h, sk->key, sk->len));
	if (r == 0)
		r = pd_err_from_gcry(gcry_cipher_setiv(c->h, NULL, 0));
	if (r < 0)
		goto fail;
	if (!sed) {
		r = pd_worker_take_md(w, GCRY_MD_SHA1, 0, &c->md);
		if (r < 0)
			goto fail;
	}
	*ret = c;
	return 0;
fail:
	pd_cfb_free(c, w);
	return r;
}

struct pd_cfb *pd_cfb_free(struct pd_cfb *c, struct pd_worker *w)
{
	if (!c)
		return NULL;
	pd_worker_give_cipher(w, c->h, c->galgo, GCRY_CIPHER_MODE_CFB, c->flags);
	pd_worker_give_md(w, c->md, GCRY_MD_SHA1, 0);
	pd_wipe(c, sizeof(*c));
	free(c);
	return NULL;
}

/* Release n plaintext octets from p: drop what belongs to the prefix. */
static size_t emit(struct pd_cfb *c, const uint8_t *p, size_t n, uint8_t *out)
{
	size_t drop = PD_MIN(n, c->prefix_left);
	c->prefix_left -= drop;
	memcpy(out, p + drop, n - drop);
	return n - drop;
}

static int run_sed(struct pd_cfb *c, const uint8_t *in, size_t inlen, size_t *ret_used,
                   uint8_t *out, size_t outcap, size_t *ret_out, bool eof)
{
	size_t used = 0, produced = 0, touched = 0;
	uint8_t tmp[STEP];

	while (used < inlen && produced < outcap) {
		size_t k = PD_MIN(PD_MIN(inlen - used, outcap - produced), sizeof(tmp));
		if (!c->synced)
			k = PD_MIN(k, c->prefix_left);
		touched = PD_MAX(touched, k);
		gcry_error_t e = gcry_cipher_decrypt(c->h, tmp, k, in + used, k);
		if (e) {
			pd_wipe(tmp, touched);
			return pd_err_from_gcry(e);
		}
		used += k;
		produced += emit(c, tmp, k, out + produced);
		if (!c->synced && c->prefix_left == 0) {
			gcry_cipher_sync(c->h);
			c->synced = true;
		}
	}
	pd_wipe(tmp, touched);
	*ret_used = used;
	*ret_out = produced;
	if (eof && used == inlen) {
		if (!c->synced)
			return PD_ETRUNCATED;
		return 1;
	}
	return 0;
}

/* One round in s: S = hold || decrypt(in, k).  All of S but its last
 * MDC_LEN octets is certainly not MDC: hash it (*rel octets, left at the
 * start of s) and keep the tail as the new hold. */
static int mdc_round(struct pd_cfb *c, uint8_t *s, const uint8_t *in, size_t k, size_t *rel)
{
	memcpy(s, c->hold, c->hold_n);
	gcry_error_t e = gcry_cipher_decrypt(c->h, s + c->hold_n, k, in, k);
	if (e)
		return pd_err_from_gcry(e);
	size_t total = c->hold_n + k;
	*rel = total > MDC_LEN ? total - MDC_LEN : 0;
	gcry_md_write(c->md, s, *rel);
	c->hold_n = total - *rel;
	memcpy(c->hold, s + *rel, c->hold_n);
	return 0;
}

int pd_cfb_run(struct pd_cfb *c, const uint8_t *in, size_t inlen, size_t *ret_used,
               uint8_t *out, size_t outcap, size_t *ret_out, bool eof)
{
	size_t used = 0, produced = 0;
	uint8_t tmp[MDC_LEN + STEP];
	size_t touched = 0; /* of tmp: only that much is wiped (most calls never use it) */
	int r = 0;

	*ret_used = *ret_out = 0;
	if (c->done)
		return 1;
	if (c->sed)
		return run_sed(c, in, inlen, ret_used, out, outcap, ret_out, eof);

	/* Each round: S = hold || decrypt(k octets).  All of S but its last
	 * MDC_LEN octets is certainly not MDC: hash it, release it (minus the
	 * prefix), keep the tail as the new hold.  Released <= k <= room.
	 *
	 * Bulk rounds build S in the output itself (no copy of the plaintext
	 * through tmp): hold is written at out[produced], the ciphertext
	 * decrypted right behind it.  The first round (prefix to drop) and
	 * rounds with little room go through tmp. */
	while (used < inlen && produced < outcap) {
		size_t room = outcap - produced;
		if (!c->prefix_left && room >= c->hold_n + 2 * MDC_LEN) {
			uint8_t *s = out + produced;
			size_t k = PD_MIN(inlen - used, room - c->hold_n), rel;
			r = mdc_round(c, s, in + used, k, &rel);
			if (r < 0)
				goto out;
			used += k;
			pd_wipe(s + rel, c->hold_n); /* beyond what is released: leave no plaintext */
			produced += rel;
			continue;
		}
		size_t k = PD_MIN(PD_MIN(inlen - used, room), (size_t)STEP), rel;
		touched = PD_MAX(touched, c->hold_n + k);
		r = mdc_round(c, tmp, in + used, k, &rel);
		if (r < 0)
			goto out;
		used += k;
		produced += emit(c, tmp, rel, out + produced);
	}
	*ret_used = used;
	*ret_out = produced;
	if (eof && used == inlen) {
		/* The stream must end with exactly D3 14 || SHA-1(everything before
		 * the 20 hash octets), and the prefix must be complete.  One
		 * verdict for every failure. */
		if (c->hold_n != MDC_LEN || c->prefix_left != 0) {
			r = PD_EINTEGRITY;
			goto out;
		}
		gcry_md_write(c->md, c->hold, 2);
		const uint8_t *dg = gcry_md_read(c->md, GCRY_MD_SHA1);
		uint32_t bad = pd_ct_memneq(dg, c->hold + 2, 20);
		bad |= (uint32_t)(c->hold[0] ^ 0xD3) | (uint32_t)(c->hold[1] ^ 0x14);
		if (bad) {
			r = PD_EINTEGRITY;
			goto out;
		}
		c->done = true;
		r = 1;
	}
out:
	pd_wipe(tmp, touched);
	return r;
}
