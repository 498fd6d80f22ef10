/* SPDX-License-Identifier: MIT */
/* SKESK v4/v5/v6: see skesk.h.  KEKs and keys live in secure memory only. */
#include <gcrypt.h>

#include "pgp/algo.h"
#include "pgp/hkdf.h"
#include "pgp/skesk.h"
#include "worker.h"

#define TAGLEN 16

/* An AEAD-wrapped session key must be a key length some cipher has. */
static bool valid_keylen(size_t n)
{
	return n == 16 || n == 24 || n == 32;
}

static int parse_s2k(const uint8_t *p, size_t len, struct pd_s2k *s2k, size_t *ret_used)
{
	int r = pd_s2k_parse(p, len, s2k, ret_used);

	if (r < 0)
		return r;
	/* The GnuPG "no secret" extension means nothing in an SKESK. */
	if (s2k->type == 101)
		return PD_EMALFORMED;
	return 0;
}

static int parse_v4(const uint8_t *body, size_t len, struct pd_skesk *s)
{
	size_t used;
	int r;

	if (len < 3)
		return PD_EMALFORMED;
	s->cipher = body[1];
	if (!pd_sym_gcry(s->cipher))
		return PD_EUNSUPPORTED;
	r = parse_s2k(body + 2, len - 2, &s->s2k, &used);
	if (r < 0)
		return r;
	size_t off = 2 + used;
	s->esk_len = len - off;
	if (s->esk_len == 0)
		return 0;
	/* algo octet + a key of at most 32 octets. */
	if (s->esk_len < 2 || s->esk_len > 33)
		return PD_EMALFORMED;
	s->esk = body + off;
	return 0;
}

/* v5: 05 cipher aead S2K nonce ESK tag; v6: 06 count cipher aead s2klen
 * S2K nonce ESK tag (count covers cipher .. nonce). */
static int parse_aead(const uint8_t *body, size_t len, struct pd_skesk *s)
{
	size_t off = 1, used, s2klen = 0;
	int r;

	if (s->version == 6) {
		if (len < 5)
			return PD_EMALFORMED;
		off = 2;
	} else if (len < 4) {
		return PD_EMALFORMED;
	}
	s->cipher = body[off];
	s->aead = body[off + 1];
	off += 2;
	if (!pd_sym_gcry(s->cipher) || !pd_aead_gcry_mode(s->aead))
		return PD_EUNSUPPORTED;
	if (pd_sym_blklen(s->cipher) != 16)
		return PD_EMALFORMED;
	size_t noncelen = pd_aead_noncelen(s->aead);
	if (s->version == 6) {
		s2klen = body[off++];
		if ((size_t)body[1] != 3 + s2klen + noncelen || s2klen > len - off)
			return PD_EMALFORMED;
		r = parse_s2k(body + off, s2klen, &s->s2k, &used);
		if (r < 0)
			return r;
		if (used != s2klen)
			return PD_EMALFORMED;
	} else {
		r = parse_s2k(body + off, len - off, &s->s2k, &used);
		if (r < 0)
			return r;
	}
	off += used;
	/* off <= len here; 64-bit sums cannot wrap for packet-sized inputs. */
	if ((uint64_t)off + noncelen + TAGLEN > len)
		return PD_EMALFORMED;
	s->nonce = body + off;
	off += noncelen;
	s->esk = body + off;
	s->esk_len = len - off - TAGLEN;
	s->tag = body + len - TAGLEN;
	if (!valid_keylen(s->esk_len))
		return PD_EMALFORMED;
	return 0;
}

int pd_skesk_parse(const uint8_t *body, size_t len, struct pd_skesk *ret)
{
	struct pd_skesk s = { 0 };
	int r;

	if (len < 1)
		return PD_EMALFORMED;
	s.version = body[0];
	switch (s.version) {
	case 4:
		r = parse_v4(body, len, &s);
		break;
	case 5:
	case 6:
		r = parse_aead(body, len, &s);
		break;
	default:
		return PD_EUNSUPPORTED;
	}
	if (r < 0)
		return r;
	*ret = s;
	return 0;
}

/* v4 ESK: CFB with a zero IV, no resync; the result is algo || key.  Its
 * only check (a known cipher of the right size) is about unauthenticated
 * octets: its verdict is the mask *ok, never a branch, and key is filled
 * either way (the caller selects in constant time). */
static int unlock_v4(struct pd_worker *w, const struct pd_skesk *s, const uint8_t *kek, uint8_t *buf,
                     struct pd_sesskey *key, uint32_t *ok)
{
	int galgo = pd_sym_gcry(s->cipher);
	gcry_cipher_hd_t h;
	int r = pd_worker_take_cipher(w, galgo, GCRY_CIPHER_MODE_CFB, 0, &h);

	if (r < 0)
		return r;
	r = pd_err_from_gcry(gcry_cipher_setkey(h, kek, pd_sym_keylen(s->cipher)));
	if (r == 0)
		r = pd_err_from_gcry(gcry_cipher_setiv(h, NULL, 0));
	if (r == 0)
		r = pd_err_from_gcry(gcry_cipher_decrypt(h, buf, s->esk_len, s->esk, s->esk_len));
	pd_worker_give_cipher(w, h, galgo, GCRY_CIPHER_MODE_CFB, 0);
	if (r < 0)
		return r;
	/* The only check a v4 ESK offers: a known cipher of the right size. */
	uint32_t klen = pd_sym_keylen_ct(buf[0]);
	*ok = ~pd_ct_is_zero32(klen) & pd_ct_eq32(klen, (uint32_t)(s->esk_len - 1));
	key->algo = buf[0];
	key->len = (uint8_t)(s->esk_len - 1);
	memcpy(key->key, buf + 1, s->esk_len - 1);
	return 0;
}

/* v5/v6 ESK: one AEAD message, nonce from the packet, AD C3 version cipher
 * aead.  Decrypted into the secure buf, released only after checktag. */
static int unlock_aead(struct pd_worker *w, const struct pd_skesk *s, const uint8_t *kek, uint8_t *buf,
                       struct pd_sesskey *key)
{
	int galgo = pd_sym_gcry(s->cipher), gmode = pd_aead_gcry_mode(s->aead);
	const uint8_t ad[4] = { 0xC3, s->version, s->cipher, s->aead };
	gcry_cipher_hd_t h;
	gcry_error_t e;
	int r = pd_worker_take_cipher(w, galgo, gmode, 0, &h);

	if (r < 0)
		return r;
	e = gcry_cipher_setkey(h, kek, pd_sym_keylen(s->cipher));
	if (!e)
		e = gcry_cipher_setiv(h, s->nonce, pd_aead_noncelen(s->aead));
	if (!e)
		e = gcry_cipher_authenticate(h, ad, sizeof(ad));
	if (!e)
		e = gcry_cipher_final(h);
	if (!e)
		e = gcry_cipher_decrypt(h, buf, s->esk_len, s->esk, s->esk_len);
	if (!e)
		e = gcry_cipher_checktag(h, s->tag, TAGLEN);
	pd_worker_give_cipher(w, h, galgo, gmode, 0);
	if (gcry_err_code(e) == GPG_ERR_CHECKSUM)
		return PD_EBADPASS;
	if (e)
		return pd_err_from_gcry(e);
	key->algo = 0; /* bound by the container's cipher */
	key->len = (uint8_t)s->esk_len;
	memcpy(key->key, buf, s->esk_len);
	return 0;
}

/* Unlock into *out (garbage when the mask *ok is 0).  PD_EBADPASS only for
 * a v5/v6 tag mismatch, which is authenticated and so public. */
static int unlock(struct pd_worker *w, const struct pd_skesk *s, const uint8_t *s2k_key,
                  struct pd_sesskey *out, uint32_t *ok)
{
	size_t keylen = pd_sym_keylen(s->cipher);
	struct pd_sesskey *key = NULL;
	uint8_t *buf = NULL, *kek = NULL;
	int r;

	if (!keylen)
		return PD_EUNSUPPORTED;
	key = gcry_malloc_secure(sizeof(*key));
	buf = gcry_malloc_secure(64);
	kek = gcry_malloc_secure(32);
	if (!key || !buf || !kek) {
		r = -ENOMEM;
		goto out;
	}
	memset(key, 0, sizeof(*key));
	*ok = 0xFFFFFFFFu;
	switch (s->version) {
	case 4:
		if (!s->esk) {
			key->algo = s->cipher;
			key->len = (uint8_t)keylen;
			memcpy(key->key, s2k_key, keylen);
			r = 0;
		} else {
			r = unlock_v4(w, s, s2k_key, buf, key, ok);
		}
		break;
	case 5:
		/* LibrePGP: the S2K output is the KEK itself. */
		r = unlock_aead(w, s, s2k_key, buf, key);
		break;
	case 6: {
		const uint8_t info[4] = { 0xC3, 6, s->cipher, s->aead };
		r = pd_hkdf(GCRY_MD_SHA256, NULL, 0, s2k_key, keylen, info, sizeof(info), kek, keylen);
		if (r == 0)
			r = unlock_aead(w, s, kek, buf, key);
		break;
	}
	default:
		r = PD_EUNSUPPORTED;
	}
	if (r == 0)
		*out = *key;
out:
	/* gcry_free wipes secure memory, but only up to what it knows: wipe
	 * explicitly with the tracked sizes. */
	if (key)
		pd_wipe(key, sizeof(*key));
	pd_wipe(buf, buf ? 64 : 0);
	pd_wipe(kek, kek ? 32 : 0);
	gcry_free(key);
	gcry_free(buf);
	gcry_free(kek);
	return r;
}

/* For callers that want a verdict, not a mask (pd_skesk_unlock/_decrypt):
 * PD_EBADPASS when the check failed, *out written only on success; tmp
 * (secure memory) wiped and freed. */
static int to_verdict(int r, uint32_t ok, struct pd_sesskey *tmp, struct pd_sesskey *out)
{
	if (r == 0 && !ok)
		r = PD_EBADPASS;
	if (r == 0)
		*out = *tmp;
	pd_wipe(tmp, sizeof(*tmp));
	gcry_free(tmp);
	return r;
}

int pd_skesk_unlock(struct pd_worker *w, const struct pd_skesk *s, const uint8_t *s2k_key,
                    struct pd_sesskey *out)
{
	struct pd_sesskey *tmp = gcry_malloc_secure(sizeof(*tmp));
	uint32_t ok = 0;

	if (!tmp)
		return -ENOMEM;
	int r = unlock(w, s, s2k_key, tmp, &ok); /* before ok is read */
	return to_verdict(r, ok, tmp, out);
}

int pd_skesk_try(struct pd_worker *w, const uint8_t *body, size_t len, const char *pw, size_t pwlen,
                 const struct pd_limits *lim, struct pd_sesskey *out, uint32_t *ok)
{
	struct pd_skesk s;
	uint8_t *s2k_key;
	size_t keylen;
	int r = pd_skesk_parse(body, len, &s);

	*ok = 0;
	if (r < 0)
		return r;
	keylen = pd_sym_keylen(s.cipher);
	s2k_key = gcry_malloc_secure(32);
	if (!s2k_key)
		return -ENOMEM;
	r = pd_s2k_derive(&s.s2k, pw, pwlen, s2k_key, keylen, lim);
	if (r == 0)
		r = unlock(w, &s, s2k_key, out, ok);
	pd_wipe(s2k_key, 32);
	gcry_free(s2k_key);
	return r;
}

int pd_skesk_decrypt(struct pd_worker *w, const uint8_t *body, size_t len, const char *pw, size_t pwlen,
                     const struct pd_limits *lim, struct pd_sesskey *out)
{
	struct pd_sesskey *tmp = gcry_malloc_secure(sizeof(*tmp));
	uint32_t ok = 0;

	if (!tmp)
		return -ENOMEM;
	int r = pd_skesk_try(w, body, len, pw, pwlen, lim, tmp, &ok); /* before ok is read */
	return to_verdict(r, ok, tmp, out);
}
