/* SPDX-License-Identifier: MIT */
/*
 * Test-only helpers shared by test-aead.c and test-skesk.c: reading files
 * from tests/data, splitting new-format packets, hex, a seeded PRNG, a
 * chunked AEAD *encryptor* (SEIPD v2 and tag 20) and a driver that feeds a
 * pd_aead with arbitrary input and output slicing.
 */
#pragma once
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <gcrypt.h>

#include "pgp/algo.h"
#include "pgp/hkdf.h"
#include "pgp/seipd.h"
#include "worker.h"
#include "aeadenc.h"

#ifndef PD_TEST_DATA
#error "PD_TEST_DATA must name tests/data"
#endif

static inline uint8_t *tu_read(const char *name, size_t *ret_len)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", PD_TEST_DATA, name);
	FILE *f = fopen(path, "rb");
	if (!f)
		fail_msg("cannot open %s", path);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *p = malloc(n ? (size_t)n : 1);
	assert_non_null(p);
	assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*ret_len = (size_t)n;
	return p;
}

static inline size_t tu_unhex(const char *hex, uint8_t *out, size_t cap)
{
	size_t n = 0;
	for (const char *p = hex; *p;) {
		if (*p == ' ' || *p == '\n') {
			p++;
			continue;
		}
		unsigned v;
		assert_true(sscanf(p, "%2x", &v) == 1);
		assert_true(n < cap);
		out[n++] = (uint8_t)v;
		p += 2;
	}
	return n;
}

struct tu_pkt {
	uint8_t tag;
	uint8_t *body; /* malloc'd (partial lengths joined) */
	size_t len;
};

/* Next new-format packet at *pos; body copied (partial parts joined). */
static inline void tu_next_packet(const uint8_t *p, size_t len, size_t *pos, struct tu_pkt *pkt)
{
	size_t o = *pos;
	assert_true(o < len);
	assert_true((p[o] & 0xC0) == 0xC0);
	pkt->tag = p[o++] & 0x3F;
	pkt->body = NULL;
	pkt->len = 0;
	for (;;) {
		size_t l;
		bool partial = false;
		assert_true(o < len);
		if (p[o] < 192) {
			l = p[o++];
		} else if (p[o] < 224) {
			assert_true(o + 1 < len);
			l = ((size_t)(p[o] - 192) << 8) + p[o + 1] + 192;
			o += 2;
		} else if (p[o] == 255) {
			assert_true(o + 4 < len);
			l = pd_be32(p + o + 1);
			o += 5;
		} else {
			l = (size_t)1 << (p[o] & 0x1F);
			o++;
			partial = true;
		}
		assert_true(l <= len - o);
		pkt->body = realloc(pkt->body, pkt->len + l + 1);
		assert_non_null(pkt->body);
		memcpy(pkt->body + pkt->len, p + o, l);
		pkt->len += l;
		o += l;
		if (!partial)
			break;
	}
	*pos = o;
}

/* xorshift64*: deterministic slicing, reproducible from the seed. */
static inline uint64_t tu_rand(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}
static inline size_t tu_rand_range(uint64_t *s, size_t lo, size_t hi) /* [lo, hi] */
{
	return lo + (size_t)(tu_rand(s) % (hi - lo + 1));
}

/* ---- test-only encryptor -------------------------------------------- */

/* The encryptor itself is shared with tests/tools/pd-test-encrypt. */
#define tu_ct te_ct

/* Encrypt pt as a SEIPD v2 (tag 18) or tag-20 body with session key sk
 * and a random salt/nonce. */
static inline void tu_encrypt(struct tu_ct *ct, uint8_t tag, uint8_t cipher, uint8_t aead, uint8_t c,
                              const uint8_t *sk, const uint8_t *pt, size_t ptlen)
{
	uint8_t rnd[32];
	gcry_randomize(rnd, sizeof(rnd), GCRY_WEAK_RANDOM);
	assert_int_equal(te_encrypt(ct, tag, cipher, aead, c, sk, rnd, pt, ptlen, false), 0);
}

/* ---- driver ----------------------------------------------------------- */

enum tu_slice { TU_WHOLE, TU_ONE, TU_RANDOM };

/* Feed body[hdrlen..len) to a fresh pd_aead; collect output into *ret_out
 * (malloc'd).  Returns the final run() result (1 or negative) and the
 * output count, which on failure is what was released before it. */
static inline int tu_decrypt(uint8_t tag, const uint8_t *body, size_t len, size_t hdrlen,
                             const struct pd_sesskey *sk, enum tu_slice mode, uint64_t *seed,
                             uint8_t **ret_out, size_t *ret_outlen)
{
	struct pd_aead *a = NULL;
	struct pd_limits lim = { .max_aead_chunk_log = 16 };
	size_t cap = len + 64, outn = 0, pos = hdrlen;
	uint8_t *out = malloc(cap);
	assert_non_null(out);
	*ret_out = out;
	*ret_outlen = 0;
	int r = pd_aead_new(&a, NULL, tag, body, hdrlen, sk, &lim);
	if (r < 0)
		return r;
	int stuck = 0;
	for (;;) {
		size_t in_n, out_n, used, got;
		switch (mode) {
		case TU_WHOLE:
			in_n = len - pos;
			out_n = cap - outn;
			break;
		case TU_ONE:
			in_n = PD_MIN(1, len - pos);
			out_n = PD_MIN(1, cap - outn);
			break;
		default: /* (PD_MIN evaluates its arguments twice) */
			in_n = tu_rand_range(seed, 0, 3000);
			out_n = tu_rand_range(seed, 0, 3000);
			in_n = PD_MIN(in_n, len - pos);
			out_n = PD_MIN(out_n, cap - outn);
			break;
		}
		if (stuck > 4) { /* the slicer starved it: give everything */
			in_n = len - pos;
			out_n = cap - outn;
		}
		bool eof = pos + in_n == len;
		if (getenv("TU_TRACE"))
			fprintf(stderr, "run pos %zu in %zu out %zu eof %d\n", pos - hdrlen, in_n, out_n, eof);
		r = pd_aead_run(a, body + pos, in_n, &used, out + outn, out_n, &got, eof);
		assert_true(used <= in_n);
		assert_true(got <= out_n);
		pos += used;
		outn += got;
		if (r != 0)
			break;
		if (used == 0 && got == 0) {
			stuck++;
			assert_true(stuck < 10); /* no progress with all input and room */
		} else {
			stuck = 0;
		}
	}
	if (r == 1)
		assert_int_equal(pos, len);
	pd_aead_free(a, NULL);
	*ret_out = out;
	*ret_outlen = outn;
	return r;
}
