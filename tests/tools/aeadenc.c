/* SPDX-License-Identifier: MIT */
/* Test-only AEAD container encryptor: see aeadenc.h. */
#include "aeadenc.h"

#include <gcrypt.h>
#include <stdlib.h>
#include <string.h>

#include "pgp/algo.h"
#include "pgp/hkdf.h"

static void be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

/* One AEAD message in libgcrypt's call order (OCB: final before the only
 * encrypt call). */
static int seal(gcry_cipher_hd_t h, const uint8_t *nonce, size_t nlen, const uint8_t *ad,
                size_t adlen, uint8_t *data, size_t len, uint8_t *tag)
{
	uint8_t dummy[1];
	if (gcry_cipher_reset(h) || gcry_cipher_setiv(h, nonce, nlen) ||
	    gcry_cipher_authenticate(h, ad, adlen) || gcry_cipher_final(h) ||
	    gcry_cipher_encrypt(h, len ? data : dummy, len, NULL, 0) || gcry_cipher_gettag(h, tag, 16))
		return -1;
	return 0;
}

void te_ct_free(struct te_ct *ct)
{
	free(ct->body);
	free(ct->chunk_off);
	free(ct->chunk_len);
	memset(ct, 0, sizeof(*ct));
}

int te_encrypt(struct te_ct *ret, uint8_t tag, uint8_t cipher, uint8_t aead, uint8_t c,
               const uint8_t *sk, const uint8_t *rnd, const uint8_t *pt, size_t ptlen,
               bool empty_last)
{
	size_t keylen = pd_sym_keylen(cipher), nlen = pd_aead_noncelen(aead);
	struct te_ct ct = { 0 };
	gcry_cipher_hd_t h = NULL;
	uint8_t key[32], iv[16], okm[48], hdr[36];
	int r = -1;

	if (!keylen || keylen > 32 || !nlen || c > 56 || (tag != 18 && tag != 20))
		return -1;
	size_t chunk = (size_t)1 << (c + 6);
	/* An empty chunk may only follow full ones. */
	if (empty_last && ptlen % chunk)
		return -1;
	size_t n = ptlen / chunk + (ptlen % chunk != 0) + (empty_last ? 1 : 0);
	hdr[1] = cipher;
	hdr[2] = aead;
	hdr[3] = c;
	if (tag == 18) {
		/* Message key || IV = HKDF-SHA256(salt, session key, D2 02 cipher aead c). */
		hdr[0] = 2;
		memcpy(hdr + 4, rnd, 32);
		ct.hdrlen = 36;
		const uint8_t info[5] = { 0xD2, 2, cipher, aead, c };
		if (pd_hkdf(GCRY_MD_SHA256, hdr + 4, 32, sk, keylen, info, 5, okm, keylen + nlen - 8) < 0)
			goto out;
		memcpy(key, okm, keylen);
		memcpy(iv, okm + keylen, nlen - 8);
	} else {
		/* The key is the session key; the nonce is in the header. */
		hdr[0] = 1;
		memcpy(hdr + 4, rnd, nlen);
		ct.hdrlen = 4 + nlen;
		memcpy(key, sk, keylen);
		memcpy(iv, hdr + 4, nlen);
	}
	ct.nchunks = n;
	ct.len = ct.hdrlen + ptlen + 16 * n + 16;
	ct.body = malloc(ct.len);
	ct.chunk_off = calloc(n + 1, sizeof(size_t));
	ct.chunk_len = calloc(n + 1, sizeof(size_t));
	if (!ct.body || !ct.chunk_off || !ct.chunk_len)
		goto out;
	memcpy(ct.body, hdr, ct.hdrlen);
	if (gcry_cipher_open(&h, pd_sym_gcry(cipher), pd_aead_gcry_mode(aead), 0) ||
	    gcry_cipher_setkey(h, key, keylen))
		goto out;
	size_t o = ct.hdrlen, done = 0;
	for (uint64_t i = 0;; i++) {
		uint8_t nonce[16], ad[21], be[8];
		size_t adlen = 5;
		ad[0] = (uint8_t)(0xC0 | tag);
		memcpy(ad + 1, hdr, 4);
		be64(be, i);
		if (tag == 18) {
			/* v2 nonce: IV || be64(i); AD is the 5-octet prefix. */
			memcpy(nonce, iv, nlen - 8);
			memcpy(nonce + nlen - 8, be, 8);
		} else {
			/* tag 20 nonce: IV with be64(i) XORed in; AD adds be64(i). */
			memcpy(nonce, iv, nlen);
			for (int k = 0; k < 8; k++)
				nonce[nlen - 8 + k] ^= be[k];
			memcpy(ad + 5, be, 8);
			adlen = 13;
		}
		if (i == n) {
			/* Final tag over the empty string; AD ends with the total. */
			be64(ad + adlen, ptlen);
			ct.final_off = o;
			if (seal(h, nonce, nlen, ad, adlen + 8, NULL, 0, ct.body + o) < 0)
				goto out;
			o += 16;
			break;
		}
		size_t clen = ptlen - done < chunk ? ptlen - done : chunk;
		ct.chunk_off[i] = o;
		ct.chunk_len[i] = clen;
		if (clen)
			memcpy(ct.body + o, pt + done, clen);
		if (seal(h, nonce, nlen, ad, adlen, ct.body + o, clen, ct.body + o + clen) < 0)
			goto out;
		o += clen + 16;
		done += clen;
	}
	if (o != ct.len)
		goto out;
	*ret = ct;
	memset(&ct, 0, sizeof(ct));
	r = 0;
out:
	if (h)
		gcry_cipher_close(h);
	memset(key, 0, sizeof(key));
	memset(okm, 0, sizeof(okm));
	te_ct_free(&ct);
	return r;
}
