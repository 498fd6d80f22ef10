/* SPDX-License-Identifier: MIT */
/*
 * AEAD containers: SEIPD v2 (RFC 9580 §5.13.2) and LibrePGP OCB Encrypted
 * Data (tag 20, draft-koch-librepgp §5.16).  Both cut the plaintext into
 * chunks of 2^(c+6) octets, each followed by a 16-octet tag, and end with a
 * final tag over the empty string that binds the chunk count and total.
 *
 * One buffer of chunk + 32 octets holds the ciphertext of the current chunk,
 * its tag and 16 more octets: only when those 16 octets exist (or at eof) do
 * we know where the chunk ends.  The chunk is decrypted in place, released
 * only after its tag verified, and wiped on any failure: libgcrypt writes
 * the plaintext before checktag fails, so nothing is decrypted into `out`.
 */
#include <gcrypt.h>

#include "pgp/algo.h"
#include "pgp/hkdf.h"
#include "buf.h"
#include "pgp/seipd.h"
#include "worker.h"

#define TAGLEN 16
#define V2_SALTLEN 32
#define CHUNK_LOG_MAX 16

struct pd_aead {
	gcry_cipher_hd_t h;
	int galgo, gmode;
	uint8_t tag;            /* packet tag: 18 or 20 */
	uint8_t adpre[5];       /* D2 02 / D4 01, cipher, aead, chunk octet */
	uint8_t iv[16];         /* v2: noncelen - 8 octets (HKDF); tag 20: noncelen (header) */
	size_t noncelen;
	size_t chunk;           /* chunk size in octets */
	uint64_t index;         /* chunks verified so far */
	uint64_t total;         /* plaintext octets verified so far */
	struct pd_buf b;        /* chunk + 2 tags of ciphertext, then the verified
	                         * plaintext in place (buf.h; its start stays 0) */
	size_t pt_off, pt_end;  /* verified plaintext not yet handed out */
	size_t keep_off;        /* where the octets after a verified chunk start */
	bool pending;           /* a verified chunk is being handed out */
	bool done;              /* final tag verified */
	int err;                /* sticky failure */
};

uint64_t pd_aead_memory(uint8_t c)
{
	return sizeof(struct pd_aead) + ((uint64_t)1 << (PD_MIN(c, CHUNK_LOG_MAX) + 6)) + 2 * TAGLEN;
}

int pd_aead_header_len(uint8_t tag, const uint8_t *hdr4, size_t *ret_len)
{
	size_t len;

	if (tag == 18) {
		if (hdr4[0] != 2)
			return PD_EUNSUPPORTED;
		len = 4 + V2_SALTLEN;
	} else if (tag == 20) {
		if (hdr4[0] != 1)
			return PD_EUNSUPPORTED;
		/* LibrePGP defines OCB, and EAX for old data; never GCM. */
		if (hdr4[2] != PD_AEAD_OCB && hdr4[2] != PD_AEAD_EAX)
			return PD_EUNSUPPORTED;
		len = 4 + pd_aead_noncelen(hdr4[2]);
	} else {
		return -EINVAL;
	}
	if (!pd_sym_gcry(hdr4[1]) || !pd_aead_gcry_mode(hdr4[2]))
		return PD_EUNSUPPORTED;
	/* Every AEAD mode here is defined over 128-bit blocks only. */
	if (pd_sym_blklen(hdr4[1]) != 16)
		return PD_EMALFORMED;
	*ret_len = len;
	return 0;
}

int pd_aead_new(struct pd_aead **ret, struct pd_worker *w, uint8_t tag, const uint8_t *hdr,
                size_t hdrlen, const struct pd_sesskey *sk, const struct pd_limits *lim)
{
	struct pd_aead *a = NULL;
	uint8_t okm[32 + 16];
	size_t need, keylen;
	int r;

	if (hdrlen < 4)
		return PD_EMALFORMED;
	r = pd_aead_header_len(tag, hdr, &need);
	if (r < 0)
		return r;
	if (hdrlen != need)
		return PD_EMALFORMED;
	uint32_t maxlog = lim ? PD_MIN(lim->max_aead_chunk_log, CHUNK_LOG_MAX) : CHUNK_LOG_MAX;
	if (hdr[3] > maxlog)
		return PD_ELIMIT;
	keylen = pd_sym_keylen(hdr[1]);
	/* A session key for another cipher (or of the wrong length) is
	 * reported like a bad tag (RFC 9580 §13.5: no distinct error).
	 * algo 0 is a key not bound to a cipher (v5/v6 SKESK). */
	if ((sk->algo != 0 && sk->algo != hdr[1]) || sk->len != keylen)
		return PD_EINTEGRITY;

	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->tag = tag;
	a->adpre[0] = (uint8_t)(0xC0 | tag);
	memcpy(a->adpre + 1, hdr, 4);
	a->noncelen = pd_aead_noncelen(hdr[2]);
	a->chunk = (size_t)1 << (hdr[3] + 6);
	a->galgo = pd_sym_gcry(hdr[1]);
	a->gmode = pd_aead_gcry_mode(hdr[2]);
	if (pd_buf_init(&a->b, a->chunk + 2 * TAGLEN) < 0) {
		r = -ENOMEM;
		goto out;
	}
	r = pd_worker_take_cipher(w, a->galgo, a->gmode, 0, &a->h);
	if (r < 0)
		goto out;

	if (tag == 18) {
		/* Message key || IV = HKDF-SHA256(salt, session key, D2 02 cipher aead c). */
		size_t ivlen = a->noncelen - 8;
		r = pd_hkdf(GCRY_MD_SHA256, hdr + 4, V2_SALTLEN, sk->key, sk->len, a->adpre, 5, okm,
		            keylen + ivlen);
		if (r < 0)
			goto out;
		memcpy(a->iv, okm + keylen, ivlen);
		r = pd_err_from_gcry(gcry_cipher_setkey(a->h, okm, keylen));
	} else {
		memcpy(a->iv, hdr + 4, a->noncelen);
		r = pd_err_from_gcry(gcry_cipher_setkey(a->h, sk->key, keylen));
	}
	if (r < 0)
		goto out;
	*ret = TAKE_PTR(a);
	r = 0;
out:
	pd_wipe(okm, sizeof(okm));
	pd_aead_free(a, w);
	return r;
}

struct pd_aead *pd_aead_free(struct pd_aead *a, struct pd_worker *w)
{
	if (!a)
		return NULL;
	if (a->h)
		pd_worker_give_cipher(w, a->h, a->galgo, a->gmode, 0);
	pd_buf_free(&a->b);
	pd_wipe(a, sizeof(*a));
	free(a);
	return NULL;
}

/* Chunk i's nonce: v2 IV || be64(i); tag 20 IV with be64(i) XORed into its
 * low eight octets. */
static void make_nonce(const struct pd_aead *a, uint64_t i, uint8_t *nonce)
{
	uint8_t be[8];

	pd_put_be64(be, i);
	if (a->tag == 18) {
		memcpy(nonce, a->iv, a->noncelen - 8);
		memcpy(nonce + a->noncelen - 8, be, 8);
	} else {
		memcpy(nonce, a->iv, a->noncelen);
		for (size_t k = 0; k < 8; k++)
			nonce[a->noncelen - 8 + k] ^= be[k];
	}
}

/* Decrypt data[0..len) in place under nonce index i and check tag.  OCB in
 * libgcrypt 1.10 needs gcry_cipher_final before the last (here: only)
 * decrypt call, and a decrypt call (even of 0 octets) before checktag. */
static int open_one(struct pd_aead *a, uint64_t i, const uint8_t *ad, size_t adlen, uint8_t *data,
                    size_t len, const uint8_t *tag)
{
	uint8_t nonce[16];
	gcry_error_t e;

	make_nonce(a, i, nonce);
	gcry_cipher_reset(a->h);
	e = gcry_cipher_setiv(a->h, nonce, a->noncelen);
	if (!e)
		e = gcry_cipher_authenticate(a->h, ad, adlen);
	if (!e)
		e = gcry_cipher_final(a->h);
	if (!e)
		e = gcry_cipher_decrypt(a->h, data, len, NULL, 0);
	if (!e)
		e = gcry_cipher_checktag(a->h, tag, TAGLEN);
	if (!e)
		return 0;
	pd_wipe(data, len);
	return gcry_err_code(e) == GPG_ERR_CHECKSUM ? PD_EINTEGRITY : pd_err_from_gcry(e);
}

/* Chunk AD: v2 the 5-octet prefix; tag 20 adds be64(index). */
static size_t chunk_ad(const struct pd_aead *a, uint64_t i, uint8_t *ad)
{
	memcpy(ad, a->adpre, 5);
	if (a->tag == 18)
		return 5;
	pd_put_be64(ad + 5, i);
	return 13;
}

/* Verify the chunk at buf[0..clen) with its tag after it; on success it
 * becomes the pending plaintext. */
static int open_chunk(struct pd_aead *a, size_t clen)
{
	uint8_t ad[13];
	size_t adlen = chunk_ad(a, a->index, ad);
	int r = open_one(a, a->index, ad, adlen, a->b.d, clen, a->b.d + clen);

	if (r < 0)
		return r;
	if (a->index == UINT64_MAX)
		return PD_EINTEGRITY;
	a->index++;
	a->total += clen;
	a->pt_off = 0;
	a->pt_end = clen;
	a->keep_off = clen + TAGLEN;
	a->pending = true;
	return 0;
}

/* The final tag: nonce index = number of chunks, AD = chunk AD for that
 * index || be64(total plaintext octets). */
static int open_final(struct pd_aead *a, const uint8_t *tag)
{
	uint8_t ad[21];
	uint8_t empty[1];
	size_t adlen = chunk_ad(a, a->index, ad);

	pd_put_be64(ad + adlen, a->total);
	return open_one(a, a->index, ad, adlen + 8, empty, 0, tag);
}

/* At eof with n < cap octets buffered: an optional short last chunk (it may
 * be empty) with its tag, then the final tag. */
static int finish(struct pd_aead *a)
{
	int r;

	size_t n = pd_buf_len(&a->b);
	if (n == TAGLEN)
		return open_final(a, a->b.d);
	if (n < 2 * TAGLEN)
		return PD_EINTEGRITY; /* truncated */
	r = open_chunk(a, n - 2 * TAGLEN);
	if (r < 0)
		return r;
	/* Hold the last chunk back until the final tag proves nothing was cut. */
	r = open_final(a, a->b.d + n - TAGLEN);
	if (r < 0)
		return r;
	a->keep_off = n;
	return 0;
}

int pd_aead_run(struct pd_aead *a, const uint8_t *in, size_t inlen, size_t *ret_used,
                uint8_t *out, size_t outcap, size_t *ret_out, bool eof)
{
	size_t used = 0, outn = 0;
	int r = 0;

	*ret_used = 0;
	*ret_out = 0;
	if (a->err)
		return a->err;
	for (;;) {
		if (a->pending) {
			size_t k = PD_MIN(a->pt_end - a->pt_off, outcap - outn);
			if (k) {
				memcpy(out + outn, a->b.d + a->pt_off, k);
				a->pt_off += k;
				outn += k;
			}
			if (a->pt_off < a->pt_end)
				break; /* out is full */
			/* Chunk handed out: move the octets after its tag down
			 * (compaction wipes what they leave behind; when nothing
			 * is left, as after the last chunk, wipe the chunk here). */
			if (a->keep_off == pd_buf_len(&a->b))
				pd_wipe(a->b.d, a->keep_off);
			pd_buf_consume(&a->b, a->keep_off);
			pd_buf_compact(&a->b);
			a->pending = false;
		}
		if (a->done) {
			if (used < inlen) {
				r = PD_EINTEGRITY; /* data after the final tag */
				goto fail;
			}
			r = 1;
			break;
		}
		size_t k = PD_MIN(pd_buf_tail_room(&a->b), inlen - used);
		if (k) {
			pd_buf_put(&a->b, in + used, k);
			used += k;
		}
		if (!pd_buf_tail_room(&a->b)) {
			/* A full chunk + tag + 16 more octets: the chunk is full-size
			 * whether or not it is the last one. */
			r = open_chunk(a, a->chunk);
			if (r < 0)
				goto fail;
			continue;
		}
		if (eof && used == inlen) {
			r = finish(a);
			if (r < 0)
				goto fail;
			a->done = true;
			continue;
		}
		r = 0;
		break;
	}
	*ret_used = used;
	*ret_out = outn;
	return r;
fail:
	/* Nothing unverified was handed out; wipe what is held. */
	pd_buf_wipe(&a->b);
	a->pending = false;
	a->err = r;
	*ret_used = used;
	*ret_out = outn;
	return r;
}
