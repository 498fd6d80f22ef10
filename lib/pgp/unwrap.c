/* SPDX-License-Identifier: MIT */
/*
 * PKESK parsing and session-key recovery (RFC 9580 §5.1, §11.5, RFC 6637).
 *
 * Shape of every unwrap below, in this order:
 *   1. parse and check the public fields (lengths, MPIs, points, algorithm
 *      ids); any problem here returns an error and touches nothing;
 *   2. compute the implicit-rejection key (HMAC of the fields under the
 *      key's ir_secret) *before* the secret operation, so that success and
 *      failure do the same work;
 *   3. the secret operation (RSA/ElGamal raw decrypt, ECDH/X25519/X448 plus
 *      KDF and AES key unwrap; the RSA and ECDH steps through the backends
 *      of pgp/rsa.c and pgp/ecdh.c, which never decide on secret data);
 *   4. a constant-time decode that turns every secret-dependent check
 *      (padding, separator, algorithm octet, length, checksum, key-wrap
 *      integrity value, all-zero shared secret) into a 0/~0 mask, and a
 *      constant-time select between the decoded key and the rejection key.
 * After step 3 nothing branches on secret data and nothing returns an error,
 * so the caller sees "a key" either way and the failure shows up only at the
 * SEIPD integrity check, like every other wrong key.
 *
 * Every intermediate secret (EM, shared secret, KDF input, KEK, unwrapped
 * key) lives in libgcrypt secure memory and is wiped before it is freed;
 * the keys' own secrets are with their backends (pgp/rsa.h, pgp/ecdh.h:
 * OpenSSL's secure heap by default) and ir_secret in OpenSSL's.
 */
#include <gcrypt.h>

#include "pgp/ecdh.h"
#include "pgp/hkdf.h"
#include "pgp/rsa.h"
#include "pgp/unwrap.h"

#define MAX_MODULUS_OCTETS 2048u /* 16384-bit RSA/ElGamal: the cap of DECRYPTION-NOTES §12.7 */
#define MAX_WRAPPED 254u         /* RFC 9580 §11.5: size octet 255 is reserved */

static const uint8_t anonymous_sender[20] = "Anonymous Sender    ";

/* Secure scratch of one unwrap: everything secret that is not the caller's. */
struct scratch {
	struct pd_sesskey fb;          /* implicit-rejection key */
	uint8_t shared[3 * 56];        /* X25519/X448 HKDF input eph||pub||s, or ECDH ZB */
	uint8_t kek[64];               /* KDF output (ECDH: hash output, first keklen used) */
	uint8_t unwrapped[MAX_WRAPPED]; /* AES key unwrap output */
	uint8_t pad[64];               /* make_fallback: the HMAC key, padded, xor ipad then opad */
	uint8_t inner[32];             /* make_fallback: the inner hash */
};

/* Hide a mask from the optimiser so it cannot turn selects into branches. */
static inline uint32_t ct_barrier(uint32_t x)
{
	__asm__("" : "+r"(x));
	return x;
}

static inline uint32_t ct_sel32(uint32_t mask, uint32_t a, uint32_t b) { return (mask & a) | (~mask & b); }

/* ---------------------------------------------------------------------- */
/* PKESK header */

int pd_pkesk_parse(const uint8_t *body, size_t len, struct pd_pkesk *ret)
{
	struct pd_pkesk p = { 0 };
	size_t off;

	if (!body || len < 1)
		return PD_EMALFORMED;
	p.version = body[0];
	if (p.version == 3) {
		if (len < 10)
			return PD_EMALFORMED;
		memcpy(p.keyid, body + 1, 8);
		static const uint8_t zero[8];
		p.wildcard = memcmp(p.keyid, zero, 8) == 0;
		p.pk_algo = body[9];
		off = 10;
	} else if (p.version == 6) {
		if (len < 3)
			return PD_EMALFORMED;
		size_t n = body[1];
		if (n == 0) {
			p.wildcard = true;
		} else {
			/* n counts the key version octet and the fingerprint. */
			if ((uint64_t)len < 2 + (uint64_t)n + 1)
				return PD_EMALFORMED;
			p.key_version = body[2];
			if (p.key_version == 4)
				p.fpr_len = 20;
			else if (p.key_version == 6)
				p.fpr_len = 32;
			else
				return PD_EUNSUPPORTED;
			if (n != 1u + p.fpr_len)
				return PD_EMALFORMED;
			memcpy(p.fpr, body + 3, p.fpr_len);
			/* v4 key ID: low 8 octets of the fingerprint; v6: high 8. */
			memcpy(p.keyid, p.key_version == 4 ? p.fpr + 12 : p.fpr, 8);
		}
		p.pk_algo = body[2 + n];
		off = 3 + n;
	} else {
		return PD_EUNSUPPORTED;
	}
	p.fields = body + off;
	p.fields_len = len - off;
	*ret = p;
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Constant-time decoding */

/*
 * The session-key payload is [algo (v3)] || key || csum16.  The candidates
 * are the known symmetric algorithms, or sym_algo alone when the container
 * names its cipher (always for v6, the OCB packet for v3); each has a
 * public key length and so a public position in buf: at the end of buf
 * (right, PKCS#1) or at its start (ECDH).  For every candidate, in a loop
 * whose trip count depends on public values only, compute the mask
 * "payload length, algorithm octet and checksum all fit" and select its
 * key into out under that mask.  At most one candidate can match (the
 * length and the algorithm octet pin it down).  plen is the secret payload
 * length found by the unpadding, base_ok its own verdict.  Returns the mask.
 */
static uint32_t select_payload(const uint8_t *buf, size_t len, bool right, size_t min_off, uint32_t plen,
                               bool v3, uint8_t sym_algo, uint32_t base_ok, struct pd_sesskey *out)
{
	const size_t a = v3; /* the algorithm octet in front of the key */
	uint32_t ok = 0;

	/* Every known algorithm (the table's order and size are public), not
	 * ids 1..255 of which most are unknown. */
	unsigned id;
	for (size_t i = 0; (id = pd_sym_id(i)) != 0; i++) {
		if (sym_algo && id != sym_algo)
			continue;
		size_t kl = pd_sym_keylen((int)id); /* public: id comes from the table */
		if (!kl || kl > sizeof(out->key))
			continue;
		size_t need = a + kl + 2;
		if (need > len)
			continue;
		size_t off = right ? len - need : 0;
		if (off < min_off)
			continue;
		const uint8_t *pl = buf + off, *key = pl + a;

		uint32_t m = base_ok & pd_ct_eq32(plen, (uint32_t)need);
		if (v3)
			m &= pd_ct_eq32(pl[0], id);
		uint32_t sum = 0;
		for (size_t j = 0; j < kl; j++)
			sum += key[j];
		m &= pd_ct_eq32(sum & 0xffff, pd_be16(key + kl));
		m = ct_barrier(m);
		for (size_t j = 0; j < sizeof(out->key); j++)
			out->key[j] = pd_ct_sel8(m, j < kl ? key[j] : 0, out->key[j]);
		out->len = pd_ct_sel8(m, (uint8_t)kl, out->len);
		out->algo = pd_ct_sel8(m, (uint8_t)id, out->algo);
		ok |= m;
	}
	return ok;
}

/* EME-PKCS1-v1_5 + session-key decode; v3: an algorithm octet is present
 * (and must equal sym_algo when that is not 0). */
static uint32_t pkcs1_decode(const uint8_t *em, size_t k, bool v3, uint8_t sym_algo,
                             const struct pd_sesskey *fallback, struct pd_sesskey *out)
{
	/* Start from the fallback; a matching candidate overwrites it under its mask. */
	memmove(out, fallback, sizeof(*out));
	/* k is the modulus length: public.  00 02 PS(>=8) 00 needs 11 octets. */
	if (k < 11 + 2 + 1 || k > MAX_MODULUS_OCTETS)
		return 0;

	uint32_t ok = pd_ct_is_zero32(em[0]) & pd_ct_eq32(em[1], 2);
	/* The separator is the first zero octet after 00 02: scan all k octets,
	 * remember the first hit under a mask, never stop early. */
	uint32_t found = 0, sep = 0;
	for (size_t i = 2; i < k; i++) {
		uint32_t z = ct_barrier(pd_ct_is_zero32(em[i])) & ~found;
		sep = ct_sel32(z, (uint32_t)i, sep);
		found |= z;
	}
	ok &= found;
	/* PS >= 8 means the separator sits at index >= 10.  select_payload
	 * demands the payload start at >= 11 (min_off) and the payload length
	 * k - 1 - sep to match the candidate exactly, which pins sep. */
	ok &= ~pd_ct_lt32(sep, 10);
	uint32_t plen = (uint32_t)k - 1 - sep;
	return select_payload(em, k, true, 11, plen, v3, sym_algo, ct_barrier(ok), out);
}

uint32_t pd_pkcs1_decode_sesskey(const uint8_t *em, size_t k, uint8_t sym_algo,
                                 const struct pd_sesskey *fallback, struct pd_sesskey *out)
{
	return pkcs1_decode(em, k, sym_algo == 0, sym_algo, fallback, out);
}

/* ---------------------------------------------------------------------- */
/* Helpers on public data */

/* One MPI at *off; *ret points at its value octets (leading zero octets
 * stripped).  Bits above the stated count are malformed; strict (v6) also
 * demands the exact count. */
static int read_mpi(const uint8_t *f, size_t len, size_t *off, bool strict, const uint8_t **ret, size_t *ret_len)
{
	if (len - *off < 2)
		return PD_EMALFORMED;
	unsigned bits = pd_be16(f + *off);
	size_t n = (bits + 7) / 8;
	const uint8_t *v = f + *off + 2;
	if (len - *off - 2 < n)
		return PD_EMALFORMED;
	if (n) {
		unsigned top = bits - 8 * (unsigned)(n - 1); /* 1..8 bits in the first octet */
		if (v[0] >> top)
			return PD_EMALFORMED;
		if (strict && !(v[0] >> (top - 1)))
			return PD_EMALFORMED;
	}
	*off += 2 + n;
	while (n && !v[0]) {
		v++;
		n--;
	}
	*ret = v;
	*ret_len = n;
	return 0;
}

/* Implicit-rejection key: HMAC-SHA256(ir_secret, PKESK fields), truncated
 * to the key length, into s->fb.  Its algo/len are set by the caller when
 * the cipher is public (v6, the OCB packet, X25519/X448 v3: in the clear).
 * When it is not (fb.algo 0: a v3 RSA, ElGamal or ECDH PKESK, the cipher in
 * the secret payload), the rejection's cipher is drawn from the same HMAC
 * (its last four octets, big-endian, modulo the number of known ciphers
 * whose payload fits in max_need octets, in table order), uniform over
 * the ciphers a passing decode may name:
 * with a fixed cipher, a container pass that ran another one (its time
 * differs, 3DES against AES-256) would say that the decode passed.
 *
 * The HMAC (RFC 2104) is built here on the worker's plain SHA-256 handle.
 * libgcrypt 1.10's own opens a handle in its secure pool and closes it
 * again for every HMAC it finishes, each a trip through the pool's one
 * lock and its walk over every block: on a cv25519 message that was 2 of
 * 8 such trips, and the workers queued for the lock on every message. */
static int make_fallback(struct pd_worker *w, const struct pd_key *k, const struct pd_pkesk *p,
                         struct scratch *s, size_t max_need)
{
	gcry_md_hd_t h;
	int r = pd_worker_take_md(w, GCRY_MD_SHA256, 0, &h);
	if (r < 0)
		return r;
	for (size_t i = 0; i < sizeof(s->pad); i++)
		s->pad[i] = (uint8_t)((i < 32 ? k->ir_secret[i] : 0) ^ 0x36);
	gcry_md_write(h, s->pad, sizeof(s->pad));
	gcry_md_write(h, p->fields, p->fields_len);
	memcpy(s->inner, gcry_md_read(h, GCRY_MD_SHA256), sizeof(s->inner));
	gcry_md_reset(h);
	for (size_t i = 0; i < sizeof(s->pad); i++)
		s->pad[i] ^= 0x36 ^ 0x5c;
	gcry_md_write(h, s->pad, sizeof(s->pad));
	gcry_md_write(h, s->inner, sizeof(s->inner));
	memcpy(s->fb.key, gcry_md_read(h, GCRY_MD_SHA256), 32);
	pd_worker_give_md(w, h, GCRY_MD_SHA256, 0);
	if (!s->fb.algo) {
		/* Only the ciphers whose payload (algorithm octet, key, checksum)
		 * fits in max_need octets (public: the modulus, the wrapped
		 * key's length): an ECDH key wrapped in 32 octets names a
		 * 16-octet key when it decodes, so its rejection must too.
		 * When none fits (no decode can pass), any. */
		size_t n = 0, fit = 0;
		unsigned id;
		for (; (id = pd_sym_id(n)) != 0; n++)
			fit += 1 + pd_sym_keylen((int)id) + 2 <= max_need;
		size_t pick = pd_be32(s->fb.key + 28) % (fit ? fit : n);
		for (size_t i = 0; (id = pd_sym_id(i)) != 0; i++)
			if (!fit || 1 + pd_sym_keylen((int)id) + 2 <= max_need) {
				if (!pick--)
					break;
			}
		s->fb.algo = (uint8_t)id;
		s->fb.len = (uint8_t)pd_sym_keylen((int)id);
		pd_require(s->fb.len && s->fb.len <= sizeof(s->fb.key));
	}
	for (size_t j = s->fb.len; j < sizeof(s->fb.key); j++)
		s->fb.key[j] = 0;
	return 0;
}

/* RFC 3394 unwrap of in (inlen octets, multiple of 8) into out (inlen-8).
 * The integrity check is secret-dependent: its verdict comes back as a
 * mask in *ok, never as an error.  Errors are for setup problems only. */
static int aes_unwrap(struct pd_worker *w, int gcry_algo, const uint8_t *kek, size_t keklen,
                      const uint8_t *in, size_t inlen, uint8_t *out, uint32_t *ok)
{
	gcry_cipher_hd_t h;
	int r = pd_worker_take_cipher(w, gcry_algo, GCRY_CIPHER_MODE_AESWRAP, 0, &h);
	if (r < 0)
		return r;
	r = pd_err_from_gcry(gcry_cipher_setkey(h, kek, keklen));
	if (r == 0) {
		/* Only GPG_ERR_CHECKSUM can come back here (lengths are checked). */
		gcry_error_t e = gcry_cipher_decrypt(h, out, inlen - 8, in, inlen);
		*ok = ct_barrier(pd_ct_is_zero32((uint32_t)gcry_err_code(e)));
	}
	pd_worker_give_cipher(w, h, gcry_algo, GCRY_CIPHER_MODE_AESWRAP, 0);
	return r;
}

/* Select the key[kl] (secret, ok mask) or the fallback into out. */
static void select_key(uint32_t ok, const uint8_t *key, size_t kl, const struct pd_sesskey *fb,
                       struct pd_sesskey *out)
{
	for (size_t j = 0; j < sizeof(out->key); j++)
		out->key[j] = pd_ct_sel8(ok, j < kl ? key[j] : 0, fb->key[j]);
	out->len = fb->len;
	out->algo = fb->algo;
}

/* ---------------------------------------------------------------------- */
/* RSA and ElGamal */

static int unwrap_rsa(struct pd_worker *w, const struct pd_key *k, const struct pd_pkesk *p, uint8_t sym_algo,
                      struct scratch *s, struct pd_sesskey *out, uint32_t *ok_mask)
{
	const uint8_t *c;
	size_t clen, off = 0;
	uint8_t *em = NULL;
	gcry_mpi_t cm = NULL;
	int r;

	if (!k->n)
		return PD_EINTERNAL;
	size_t klen = (gcry_mpi_get_nbits(k->n) + 7) / 8;
	if (klen > MAX_MODULUS_OCTETS)
		return PD_ELIMIT;
	r = read_mpi(p->fields, p->fields_len, &off, p->version == 6, &c, &clen);
	if (r < 0)
		return r;
	if (off != p->fields_len || clen == 0 || clen > klen)
		return PD_EMALFORMED;
	/* c < n: a public check, done here whatever the backend does. */
	r = pd_err_from_gcry(gcry_mpi_scan(&cm, GCRYMPI_FMT_USG, c, clen, NULL));
	if (r < 0)
		return r;
	bool too_big = gcry_mpi_cmp(cm, k->n) >= 0;
	gcry_mpi_release(cm);
	if (too_big)
		return PD_EMALFORMED;

	r = make_fallback(w, k, p, s, klen >= 11 ? klen - 11 : 0);
	if (r < 0)
		return r;
	em = pd_worker_take_secure(w, klen);
	if (!em)
		return -ENOMEM;
	r = pd_rsa_decrypt_raw(k, pd_worker_index(w), pd_worker_helper(w), c, clen, em, klen);
	if (r < 0)
		goto out;
	*ok_mask = pkcs1_decode(em, klen, p->version == 3, sym_algo, &s->fb, out);
	r = 0;
out:
	pd_worker_give_secure(w, em, klen);
	return r;
}

/* m = b * a^-x mod p into mm (secure), with the exponentiation blinded, on
 * libgcrypt MPIs in its secure pool only: no S-expression ever holds x
 * (gcry_pk_decrypt copied the key's parameters out of a secure
 * S-expression into the normal heap and freed them unwiped).
 *
 * Blinding: a random r in [1, p-1] and a random h of 64 bits;
 * x' = x + h*(p-1), so that z^x' = z^x for every z prime to p (Fermat),
 * while the exponent the square-and-multiply walks changes per message.
 *   t1 = r^x'            (mod p)
 *   t2 = ((a*r)^x')^-1   = a^-x' * r^-x'
 *   t1 * t2 = a^-x'      = s^-1, s = a^x the shared secret
 *   m = b * s^-1
 * Both exponentiations see a base independent of the attacker's a (r is
 * uniform, so a*r is), and the inverse is taken of a uniformly random
 * value.  Every temporary that depends on x is a secure MPI.  t2 has no
 * inverse only if a*r shares a factor with p, a property of the public a
 * and the random r (never of x): mm is then 0, whose PKCS#1 decode fails
 * like any wrong key's. */
static int elgamal_raw(const struct pd_key *k, gcry_mpi_t am, gcry_mpi_t bm, gcry_mpi_t mm)
{
	unsigned nbits = gcry_mpi_get_nbits(k->p);
	gcry_mpi_t r = gcry_mpi_snew(nbits), h = gcry_mpi_snew(64), xb = gcry_mpi_snew(nbits + 64);
	gcry_mpi_t t1 = gcry_mpi_snew(nbits), t2 = gcry_mpi_snew(nbits), ar = gcry_mpi_snew(nbits);
	int r_ = 0;

	if (!r || !h || !xb || !t1 || !t2 || !ar) {
		r_ = -ENOMEM;
		goto out;
	}
	do {
		gcry_mpi_randomize(r, nbits, GCRY_WEAK_RANDOM);
		gcry_mpi_mod(r, r, k->p);
	} while (gcry_mpi_cmp_ui(r, 0) == 0);
	gcry_mpi_randomize(h, 64, GCRY_WEAK_RANDOM);
	gcry_mpi_sub_ui(t1, k->p, 1); /* t1 = p-1, public */
	gcry_mpi_mul(xb, t1, h);
	gcry_mpi_add(xb, xb, k->x); /* x' = x + h*(p-1) */
	gcry_mpi_powm(t1, r, xb, k->p);
	gcry_mpi_mulm(ar, am, r, k->p);
	gcry_mpi_powm(t2, ar, xb, k->p);
	if (!gcry_mpi_invm(t2, t2, k->p))
		gcry_mpi_set_ui(t2, 0);
	gcry_mpi_mulm(t1, t1, t2, k->p); /* a^-x */
	gcry_mpi_mulm(mm, bm, t1, k->p);
out:
	/* secure MPIs are wiped by libgcrypt on release */
	gcry_mpi_release(r);
	gcry_mpi_release(h);
	gcry_mpi_release(xb);
	gcry_mpi_release(t1);
	gcry_mpi_release(t2);
	gcry_mpi_release(ar);
	return r_;
}

static int unwrap_elgamal(struct pd_worker *w, const struct pd_key *k, const struct pd_pkesk *p, uint8_t sym_algo,
                          struct scratch *s, struct pd_sesskey *out, uint32_t *ok_mask)
{
	const uint8_t *a, *b;
	size_t alen, blen, off = 0;
	gcry_mpi_t am = NULL, bm = NULL, mm = NULL;
	uint8_t *em = NULL;
	size_t klen = 0, mlen = 0;
	int r;

	if (!k->p || !k->g || !k->y || !k->x)
		return PD_EINTERNAL;
	klen = (gcry_mpi_get_nbits(k->p) + 7) / 8;
	if (klen > MAX_MODULUS_OCTETS)
		return PD_ELIMIT;
	bool strict = p->version == 6;
	if ((r = read_mpi(p->fields, p->fields_len, &off, strict, &a, &alen)) < 0 ||
	    (r = read_mpi(p->fields, p->fields_len, &off, strict, &b, &blen)) < 0)
		return r;
	if (off != p->fields_len || !alen || !blen || alen > klen || blen > klen)
		return PD_EMALFORMED;
	if ((r = pd_err_from_gcry(gcry_mpi_scan(&am, GCRYMPI_FMT_USG, a, alen, NULL))) < 0 ||
	    (r = pd_err_from_gcry(gcry_mpi_scan(&bm, GCRYMPI_FMT_USG, b, blen, NULL))) < 0)
		goto out;
	/* 0 < a, b < p: public range checks. */
	if (gcry_mpi_cmp(am, k->p) >= 0 || gcry_mpi_cmp(bm, k->p) >= 0) {
		r = PD_EMALFORMED;
		goto out;
	}

	r = make_fallback(w, k, p, s, klen >= 11 ? klen - 11 : 0);
	if (r < 0)
		goto out;
	/* Raw decrypt, blinded (elgamal_raw); the PKCS#1 decode is ours
	 * (libgcrypt 1.10.1's is neither constant time nor implicit). */
	mm = gcry_mpi_snew(gcry_mpi_get_nbits(k->p));
	if (!mm) {
		r = -ENOMEM;
		goto out;
	}
	r = elgamal_raw(k, am, bm, mm);
	if (r < 0)
		goto out;
	em = pd_worker_take_secure(w, klen);
	if (!em) {
		r = -ENOMEM;
		goto out;
	}
	/* m < p, so it fits; left-pad to klen octets.  (The length of m is
	 * a property of the MPI library's output format, as with any raw
	 * decrypt; no decision on the padding is taken here.) */
	r = pd_err_from_gcry(gcry_mpi_print(GCRYMPI_FMT_USG, NULL, 0, &mlen, mm));
	if (r < 0)
		goto out;
	if (mlen > klen) {
		r = PD_EINTERNAL;
		goto out;
	}
	r = pd_err_from_gcry(gcry_mpi_print(GCRYMPI_FMT_USG, em + (klen - mlen), mlen, NULL, mm));
	if (r < 0)
		goto out;
	*ok_mask = pkcs1_decode(em, klen, p->version == 3, sym_algo, &s->fb, out);
	r = 0;
out:
	pd_worker_give_secure(w, em, klen);
	gcry_mpi_release(mm); /* secure MPIs are wiped by libgcrypt on release */
	gcry_mpi_release(am);
	gcry_mpi_release(bm);
	return r;
}

/* ---------------------------------------------------------------------- */
/* ECDH (RFC 9580 §11.5, RFC 6637) */

static int unwrap_ecdh(struct pd_worker *w, const struct pd_key *k, const struct pd_pkesk *p, uint8_t sym_algo,
                       struct scratch *s, struct pd_sesskey *out, uint32_t *ok_mask)
{
	const bool cv25519 = k->curve == PD_CURVE_CV25519;
	const uint8_t *pt, *oid;
	size_t ptlen, oidlen, off = 0;
	int r;

	switch (k->curve) {
	case PD_CURVE_P256: case PD_CURVE_P384: case PD_CURVE_P521: case PD_CURVE_BP256:
	case PD_CURVE_BP384: case PD_CURVE_BP512: case PD_CURVE_CV25519:
		break;
	default:
		return PD_EUNSUPPORTED;
	}
	size_t fsize = pd_curve_fsize(k->curve);
	oid = pd_curve_oid(k->curve, &oidlen);
	if (!fsize || !oid || !oidlen || oidlen > 10 || fsize > sizeof(((struct scratch *)0)->shared))
		return PD_EINTERNAL;
	/* KDF and KEK come from the key, never from the message. */
	int md = pd_hash_gcry(k->kdf_hash);
	size_t mdlen = pd_hash_len(k->kdf_hash);
	int kek_gcry;
	switch (k->kdf_kek) {
	case 7: kek_gcry = GCRY_CIPHER_AES128; break;
	case 8: kek_gcry = GCRY_CIPHER_AES192; break;
	case 9: kek_gcry = GCRY_CIPHER_AES256; break;
	default: return PD_EUNSUPPORTED;
	}
	size_t keklen = pd_sym_keylen(k->kdf_kek);
	if (!md || mdlen < keklen || mdlen > sizeof(s->kek))
		return PD_EUNSUPPORTED;
	if (k->fpr_len != 20 && k->fpr_len != 32)
		return PD_EINTERNAL;

	/* Fields: MPI(point) || size || wrapped.  The MPI keeps its prefix
	 * octet (40 or 04), so no leading-zero stripping can apply. */
	if ((r = read_mpi(p->fields, p->fields_len, &off, p->version == 6, &pt, &ptlen)) < 0)
		return r;
	if (cv25519 ? (ptlen != 33 || pt[0] != 0x40) : (ptlen != 1 + 2 * fsize || pt[0] != 0x04))
		return PD_EMALFORMED;
	if (off >= p->fields_len)
		return PD_EMALFORMED;
	size_t wlen = p->fields[off];
	const uint8_t *wrapped = p->fields + off + 1;
	if (p->fields_len - off - 1 != wlen || wlen > MAX_WRAPPED || wlen % 8 || wlen < 24)
		return PD_EMALFORMED;

	r = make_fallback(w, k, p, s, wlen - 9); /* wlen >= 24: unwrapped, less a pad octet */
	if (r < 0)
		return r;

	/* Shared secret ZB.  A low-order cv25519 point gives an all-zero
	 * result on both backends: folded into the mask below. */
	uint8_t *zb = s->shared;
	r = pd_ecdh_derive(k, pd_worker_index(w), cv25519 ? pt + 1 : pt, cv25519 ? 32 : ptlen,
	                   zb, fsize);
	if (r < 0)
		return r;
	uint32_t nonzero = cv25519 ? pd_ct_memneq(zb, (const uint8_t[32]){ 0 }, 32) : ~0u;

	/* KEK = leftmost keklen octets of H(00000001 || ZB || Param). */
	uint8_t param[1 + 10 + 1 + 4 + 20 + 32];
	size_t pl = 0;
	param[pl++] = (uint8_t)oidlen;
	memcpy(param + pl, oid, oidlen);
	pl += oidlen;
	param[pl++] = PD_PK_ECDH;
	param[pl++] = 0x03;
	param[pl++] = 0x01;
	param[pl++] = k->kdf_hash;
	param[pl++] = k->kdf_kek;
	memcpy(param + pl, anonymous_sender, 20);
	pl += 20;
	memcpy(param + pl, k->fpr, k->fpr_len);
	pl += k->fpr_len;

	gcry_md_hd_t h;
	r = pd_worker_take_md(w, md, 0, &h);
	if (r < 0)
		return r;
	gcry_md_write(h, "\x00\x00\x00\x01", 4);
	gcry_md_write(h, zb, fsize);
	gcry_md_write(h, param, pl);
	memcpy(s->kek, gcry_md_read(h, md), mdlen);
	pd_worker_give_md(w, h, md, 0);

	uint32_t ok = 0;
	size_t ulen = wlen - 8;
	r = aes_unwrap(w, kek_gcry, s->kek, keklen, wrapped, wlen, s->unwrapped, &ok);
	if (r < 0)
		return r;

	/* PKCS#5 unpad in constant time: pad = last octet, 1 <= pad <= ulen,
	 * and the last pad octets all equal pad.  Scan every octet. */
	const uint8_t *u = s->unwrapped;
	uint32_t pad = u[ulen - 1];
	uint32_t pad_ok = ~pd_ct_is_zero32(pad) & ~pd_ct_lt32((uint32_t)ulen, pad);
	pad = ct_sel32(ct_barrier(pad_ok), pad, 1);
	uint32_t start = (uint32_t)ulen - pad, bad = 0;
	for (size_t i = 0; i < ulen; i++)
		bad |= ~pd_ct_lt32((uint32_t)i, start) & ~pd_ct_eq32(u[i], pad);
	ok &= nonzero & pad_ok & ~bad;

	memmove(out, &s->fb, sizeof(*out));
	*ok_mask = select_payload(u, ulen, false, 0, start, p->version == 3, sym_algo, ct_barrier(ok), out);
	return 0;
}

/* ---------------------------------------------------------------------- */
/* X25519 (25) and X448 (26), RFC 9580 §5.1.6/§5.1.7 */

static int unwrap_x(struct pd_worker *w, const struct pd_key *k, const struct pd_pkesk *p, uint8_t sym_algo,
                    struct scratch *s, struct pd_sesskey *out, uint32_t *ok_mask)
{
	const bool x448 = p->pk_algo == PD_PK_X448;
	const size_t L = x448 ? 56 : 32;
	const int md = x448 ? GCRY_MD_SHA512 : GCRY_MD_SHA256;
	const int kek_gcry = x448 ? GCRY_CIPHER_AES256 : GCRY_CIPHER_AES128;
	const size_t keklen = x448 ? 32 : 16;
	const char *info = x448 ? "OpenPGP X448" : "OpenPGP X25519";
	int r;

	if (k->native_sk_len != L || k->q_len != L) /* the scalar is with its backend (pgp/ecdh.h) */
		return PD_EINTERNAL;
	/* Fields: eph(L) || size || [algo (v3, in the clear)] || ESK. */
	if (p->fields_len < L + 1 || p->fields_len - L - 1 != p->fields[L])
		return PD_EMALFORMED;
	const uint8_t *eph = p->fields, *esk = p->fields + L + 1;
	size_t esklen = p->fields[L];
	uint8_t algo = sym_algo;
	if (p->version == 3) {
		if (esklen < 1)
			return PD_EMALFORMED;
		algo = esk[0];
		esk++;
		esklen--;
		if (algo != 7 && algo != 8 && algo != 9)
			return PD_EUNSUPPORTED;
		if (sym_algo && algo != sym_algo) /* both public */
			return PD_EMALFORMED;
	}
	size_t kl = pd_sym_keylen(algo);
	if (!kl || esklen != kl + 8)
		return PD_EMALFORMED;

	/* Here the algorithm is public, so the rejection key has its size. */
	s->fb.algo = algo;
	s->fb.len = (uint8_t)kl;
	r = make_fallback(w, k, p, s, SIZE_MAX); /* fb.algo is set: not drawn */
	if (r < 0)
		return r;

	/* HKDF input: eph || recipient public || shared secret. */
	uint8_t *ikm = s->shared;
	memcpy(ikm, eph, L);
	memcpy(ikm + L, k->q, L);
	r = pd_ecdh_derive(k, pd_worker_index(w), eph, L, ikm + 2 * L, L);
	if (r < 0)
		return r;
	/* A low-order point gives s = 0 (RFC 7748 §6): reject without a branch. */
	uint32_t ok = pd_ct_memneq(ikm + 2 * L, (const uint8_t[56]){ 0 }, L);
	r = pd_hkdf(md, NULL, 0, ikm, 3 * L, (const uint8_t *)info, strlen(info), s->kek, keklen);
	if (r < 0)
		return r;
	uint32_t wrap_ok = 0;
	r = aes_unwrap(w, kek_gcry, s->kek, keklen, esk, esklen, s->unwrapped, &wrap_ok);
	if (r < 0)
		return r;
	/* No checksum and no padding here: the key-wrap check is the check. */
	*ok_mask = ct_barrier(ok & wrap_ok);
	select_key(*ok_mask, s->unwrapped, kl, &s->fb, out);
	return 0;
}

/* ---------------------------------------------------------------------- */

static bool algo_matches(uint8_t key_algo, uint8_t pkesk_algo)
{
	bool key_rsa = key_algo == PD_PK_RSA || key_algo == PD_PK_RSA_E;
	bool pkesk_rsa = pkesk_algo == PD_PK_RSA || pkesk_algo == PD_PK_RSA_E;
	return key_rsa ? pkesk_rsa : key_algo == pkesk_algo;
}

int pd_unwrap(struct pd_worker *w, const struct pd_key *k, const struct pd_pkesk *p, uint8_t sym_algo,
              struct pd_sesskey *out, uint32_t *ok_mask)
{
	struct scratch *s = NULL;
	int r;

	pd_require(k && p && out && ok_mask);
	if (p->version != 3 && p->version != 6)
		return PD_EUNSUPPORTED;
	switch (p->pk_algo) {
	case PD_PK_RSA: case PD_PK_RSA_E: case PD_PK_ELGAMAL: case PD_PK_ECDH: case PD_PK_X25519: case PD_PK_X448:
		break;
	default:
		return PD_EUNSUPPORTED;
	}
	if (!algo_matches(k->pk_algo, p->pk_algo))
		return PD_ENOKEY;
	if (!k->ir_secret)
		return PD_EINTERNAL;
	/* v6: the container's cipher is required (no algorithm octet).  v3:
	 * the algorithm travels with the key; a cipher the container names
	 * (the OCB packet) must match it. */
	if ((p->version == 6 || sym_algo) && !pd_sym_keylen(sym_algo))
		return PD_EUNSUPPORTED;

	s = pd_worker_take_secure(w, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->fb.algo = sym_algo; /* 0: drawn by make_fallback, or set by unwrap_x */
	s->fb.len = (uint8_t)pd_sym_keylen(sym_algo);

	switch (p->pk_algo) {
	case PD_PK_RSA: case PD_PK_RSA_E:
		r = unwrap_rsa(w, k, p, sym_algo, s, out, ok_mask);
		break;
	case PD_PK_ELGAMAL:
		r = unwrap_elgamal(w, k, p, sym_algo, s, out, ok_mask);
		break;
	case PD_PK_ECDH:
		r = unwrap_ecdh(w, k, p, sym_algo, s, out, ok_mask);
		break;
	default:
		r = unwrap_x(w, k, p, sym_algo, s, out, ok_mask);
		break;
	}
	pd_worker_give_secure(w, s, sizeof(*s));
	return r;
}
