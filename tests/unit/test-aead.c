/* SPDX-License-Identifier: MIT */
/* AEAD containers: RFC 9580 A.8, LibrePGP A.3, round trips through a test
 * encryptor with every slicing, and tampering that must never release
 * unauthenticated plaintext. */
#include "aead-testutil.h"

static uint64_t seed = 0x9e3779b97f4a7c15ull;

static const char hello_v2[] = /* literal "Hello, world!" (RFC 9580 README) */
	"cb1362000000000048656c6c6f2c20776f726c6421";

static struct pd_sesskey mkkey(uint8_t algo, const char *hex)
{
	struct pd_sesskey k = { .algo = algo };
	k.len = (uint8_t)tu_unhex(hex, k.key, sizeof(k.key));
	return k;
}

static void check_vector(uint8_t tag, const uint8_t *body, size_t len, size_t hdrlen,
                         const struct pd_sesskey *sk, const uint8_t *want, size_t wantlen)
{
	for (int m = TU_WHOLE; m <= TU_RANDOM; m++) {
		uint8_t *out;
		size_t outn;
		int r = tu_decrypt(tag, body, len, hdrlen, sk, m, &seed, &out, &outn);
		assert_int_equal(r, 1);
		assert_int_equal(outn, wantlen);
		assert_memory_equal(out, want, wantlen);
		free(out);
	}
}

static void test_rfc9580_a8(void **state)
{
	(void)state;
	size_t len, pos = 0, hdrlen;
	uint8_t *f = tu_read("aead/a08-x25519-aead-ocb-message.pgp", &len);
	struct tu_pkt pk, se;
	tu_next_packet(f, len, &pos, &pk);
	tu_next_packet(f, len, &pos, &se);
	assert_int_equal(pk.tag, 1);
	assert_int_equal(se.tag, 18);
	assert_int_equal(pos, len);
	assert_int_equal(pd_aead_header_len(18, se.body, &hdrlen), 0);
	assert_int_equal(hdrlen, 36);
	uint8_t want[64];
	size_t wl = tu_unhex(hello_v2, want, sizeof(want));
	wl += tu_unhex("d50ec5a293072991628147d72c8f86b7", want + wl, sizeof(want) - wl);
	struct pd_sesskey sk = mkkey(7, "dd708f6fa1ed65114d68d2343e7c2f1d");
	/* The derivation the test encryptor uses gives the README's message
	 * key and IV (HKDF info D2 02 07 02 06). */
	uint8_t okm[23], want_okm[23];
	const uint8_t info[5] = { 0xD2, 2, 7, 2, 6 };
	assert_memory_equal(se.body, info + 1, 4);
	tu_unhex("4512f7149d863341527c6567d5bffc42" "5faf3250212ff9", want_okm, sizeof(want_okm));
	assert_int_equal(pd_hkdf(GCRY_MD_SHA256, se.body + 4, 32, sk.key, 16, info, 5, okm, 23), 0);
	assert_memory_equal(okm, want_okm, 23);
	check_vector(18, se.body, se.len, hdrlen, &sk, want, wl);
	/* Unbound key (v6 SKESK style) of the right length works too. */
	sk.algo = 0;
	check_vector(18, se.body, se.len, hdrlen, &sk, want, wl);
	/* Bound to another cipher, or another length: uniform integrity error. */
	sk.algo = 9;
	uint8_t *out;
	size_t outn;
	assert_int_equal(tu_decrypt(18, se.body, se.len, hdrlen, &sk, TU_WHOLE, &seed, &out, &outn), PD_EINTEGRITY);
	free(out);
	sk = mkkey(7, "dd708f6fa1ed65114d68d2343e7c2f1d00000000");
	assert_int_equal(tu_decrypt(18, se.body, se.len, hdrlen, &sk, TU_WHOLE, &seed, &out, &outn), PD_EINTEGRITY);
	free(out);
	/* One wrong key bit: the first chunk fails, nothing comes out. */
	sk = mkkey(7, "dd708f6fa1ed65114d68d2343e7c2f1c");
	assert_int_equal(tu_decrypt(18, se.body, se.len, hdrlen, &sk, TU_WHOLE, &seed, &out, &outn), PD_EINTEGRITY);
	assert_int_equal(outn, 0);
	free(out);
	free(pk.body);
	free(se.body);
	free(f);
}

static void test_librepgp_a3(void **state)
{
	(void)state;
	size_t len, pos = 0, hdrlen;
	uint8_t *f = tu_read("aead/librepgp-a3.pgp", &len);
	struct tu_pkt sk_pkt, oe;
	tu_next_packet(f, len, &pos, &sk_pkt);
	tu_next_packet(f, len, &pos, &oe);
	assert_int_equal(oe.tag, 20);
	assert_int_equal(pd_aead_header_len(20, oe.body, &hdrlen), 0);
	assert_int_equal(hdrlen, 19);
	uint8_t want[32];
	size_t wl = tu_unhex("cb1462000000000048656c6c6f2c20776f726c64210a", want, sizeof(want));
	struct pd_sesskey sk = mkkey(7, "d1f01ba30e130aa7d2582c16e050ae44");
	check_vector(20, oe.body, oe.len, hdrlen, &sk, want, wl);
	free(sk_pkt.body);
	free(oe.body);
	free(f);
}

static void test_header_len(void **state)
{
	(void)state;
	size_t n = 0;
	assert_int_equal(pd_aead_header_len(18, (const uint8_t[]){ 2, 9, 3, 16 }, &n), 0);
	assert_int_equal(n, 36);
	assert_int_equal(pd_aead_header_len(20, (const uint8_t[]){ 1, 7, 1, 0 }, &n), 0);
	assert_int_equal(n, 20);
	assert_int_equal(pd_aead_header_len(20, (const uint8_t[]){ 1, 7, 2, 0 }, &n), 0);
	assert_int_equal(n, 19);
	/* GCM is not LibrePGP; unknown versions, ciphers, modes. */
	assert_int_equal(pd_aead_header_len(20, (const uint8_t[]){ 1, 7, 3, 0 }, &n), PD_EUNSUPPORTED);
	assert_int_equal(pd_aead_header_len(18, (const uint8_t[]){ 1, 7, 2, 0 }, &n), PD_EUNSUPPORTED);
	assert_int_equal(pd_aead_header_len(18, (const uint8_t[]){ 3, 7, 2, 0 }, &n), PD_EUNSUPPORTED);
	assert_int_equal(pd_aead_header_len(20, (const uint8_t[]){ 2, 7, 2, 0 }, &n), PD_EUNSUPPORTED);
	assert_int_equal(pd_aead_header_len(18, (const uint8_t[]){ 2, 5, 2, 0 }, &n), PD_EUNSUPPORTED);
	assert_int_equal(pd_aead_header_len(18, (const uint8_t[]){ 2, 7, 4, 0 }, &n), PD_EUNSUPPORTED);
	/* 64-bit block ciphers have no AEAD mode. */
	assert_int_equal(pd_aead_header_len(18, (const uint8_t[]){ 2, 3, 2, 0 }, &n), PD_EMALFORMED);
}

static void test_limits(void **state)
{
	(void)state;
	struct pd_aead *a = NULL;
	struct pd_sesskey sk = mkkey(7, "000102030405060708090a0b0c0d0e0f");
	uint8_t hdr[36] = { 2, 7, 2, 17 };
	struct pd_limits lim = { .max_aead_chunk_log = 16 };
	assert_int_equal(pd_aead_new(&a, NULL, 18, hdr, 36, &sk, &lim), PD_ELIMIT);
	/* A generous configured limit is still capped at 16 (RFC maximum). */
	lim.max_aead_chunk_log = 30;
	assert_int_equal(pd_aead_new(&a, NULL, 18, hdr, 36, &sk, &lim), PD_ELIMIT);
	hdr[3] = 5;
	lim.max_aead_chunk_log = 4;
	assert_int_equal(pd_aead_new(&a, NULL, 18, hdr, 36, &sk, &lim), PD_ELIMIT);
	lim.max_aead_chunk_log = 5;
	assert_int_equal(pd_aead_new(&a, NULL, 18, hdr, 35, &sk, &lim), PD_EMALFORMED);
	assert_int_equal(pd_aead_new(&a, NULL, 18, hdr, 36, &sk, &lim), 0);
	assert_null(pd_aead_free(a, NULL));
	assert_null(pd_aead_free(NULL, NULL));

	/* No whole-message buffering: with no output room, a c=16 stream of
	 * 3 MiB is taken at most one chunk + 32 octets at a time. */
	size_t big = 3u << 20;
	uint8_t *pt = calloc(1, big);
	struct tu_ct ct;
	tu_encrypt(&ct, 18, 7, PD_AEAD_OCB, 10, sk.key, pt, big);
	lim.max_aead_chunk_log = 16;
	assert_int_equal(pd_aead_new(&a, NULL, 18, ct.body, ct.hdrlen, &sk, &lim), 0);
	size_t used, got;
	uint8_t o[1];
	assert_int_equal(pd_aead_run(a, ct.body + ct.hdrlen, ct.len - ct.hdrlen, &used, o, 0, &got, true), 0);
	assert_int_equal(used, (1u << 16) + 32);
	assert_int_equal(got, 0);
	a = pd_aead_free(a, NULL);
	te_ct_free(&ct);
	free(pt);
}

/* Every size class around the chunk size, every chunk octet 0..4, both
 * containers, every mode, every slicing. */
static void test_roundtrip(void **state)
{
	(void)state;
	static const struct { uint8_t tag, aead, cipher; } cfgs[] = {
		{ 18, PD_AEAD_OCB, 7 }, { 18, PD_AEAD_EAX, 9 }, { 18, PD_AEAD_GCM, 8 }, { 18, PD_AEAD_OCB, 13 },
		{ 20, PD_AEAD_OCB, 9 }, { 20, PD_AEAD_EAX, 7 }, { 20, PD_AEAD_OCB, 10 },
	};
	uint8_t *pt = malloc(8 * 1024 + 100);
	gcry_randomize(pt, 8 * 1024 + 100, GCRY_WEAK_RANDOM);
	for (size_t ci = 0; ci < PD_ARRAY_SIZE(cfgs); ci++) {
		for (uint8_t c = 0; c <= 4; c++) {
			size_t chunk = (size_t)1 << (c + 6);
			size_t sizes[] = { 0, 1, chunk - 1, chunk, chunk + 1, 5 * chunk + 3, 7 * chunk,
			                   tu_rand_range(&seed, 0, 8 * chunk) };
			for (size_t si = 0; si < PD_ARRAY_SIZE(sizes); si++) {
				struct pd_sesskey sk = { .algo = cfgs[ci].cipher, .len = (uint8_t)pd_sym_keylen(cfgs[ci].cipher) };
				gcry_randomize(sk.key, sk.len, GCRY_WEAK_RANDOM);
				struct tu_ct ct;
				tu_encrypt(&ct, cfgs[ci].tag, cfgs[ci].cipher, cfgs[ci].aead, c, sk.key, pt, sizes[si]);
				for (int m = TU_WHOLE; m <= TU_RANDOM; m++) {
					uint8_t *out;
					size_t outn;
					int r = tu_decrypt(cfgs[ci].tag, ct.body, ct.len, ct.hdrlen, &sk, m, &seed, &out, &outn);
					if (r != 1)
						fail_msg("cfg %zu c %u size %zu mode %d: %d len %zu outn %zu", ci, c, sizes[si], m, r, ct.len, outn);
					assert_int_equal(outn, sizes[si]);
					assert_memory_equal(out, pt, outn);
					free(out);
				}
				te_ct_free(&ct);
			}
		}
	}
	free(pt);
}

/* Decrypt a tampered body; it must fail with PD_EINTEGRITY having released
 * only a prefix of the plaintext of at most `allowed` octets (exactly that
 * many when fed whole). */
static void expect_fail(uint8_t tag, const uint8_t *body, size_t len, size_t hdrlen, const struct pd_sesskey *sk,
                        const uint8_t *pt, size_t allowed, bool header_change, const char *what)
{
	for (int m = TU_WHOLE; m <= TU_RANDOM; m++) {
		uint8_t *out;
		size_t outn;
		int r = tu_decrypt(tag, body, len, hdrlen, sk, m, &seed, &out, &outn);
		if (header_change ? r >= 0 : r != PD_EINTEGRITY)
			fail_msg("%s (mode %d): r = %d", what, m, r);
		if (outn > allowed || (m == TU_WHOLE && outn != allowed))
			fail_msg("%s (mode %d): released %zu octets, allowed %zu", what, m, outn, allowed);
		assert_memory_equal(out, pt, outn);
		free(out);
	}
}

/* Plaintext octets a correct decryptor may have released from the first
 * len octets of ct's body: every full chunk followed by its tag and at
 * least 16 more octets. */
static size_t released(const struct tu_ct *ct, size_t chunk, size_t len)
{
	size_t r = 0;
	for (size_t i = 0; i < ct->nchunks; i++)
		if (ct->chunk_len[i] == chunk && ct->chunk_off[i] + chunk + 32 <= len)
			r = (i + 1) * chunk;
	return r;
}

static void tamper_one(uint8_t tag, uint8_t aead, uint8_t c, size_t ptlen)
{
	size_t chunk = (size_t)1 << (c + 6);
	uint8_t *pt = malloc(ptlen + 1);
	gcry_randomize(pt, ptlen + 1, GCRY_WEAK_RANDOM);
	struct pd_sesskey sk = { .algo = 7, .len = 16 };
	gcry_randomize(sk.key, 16, GCRY_WEAK_RANDOM);
	struct tu_ct ct;
	tu_encrypt(&ct, tag, 7, aead, c, sk.key, pt, ptlen);
	size_t n = ct.nchunks;
	/* A full chunk is released once its tag verified and 16 more octets
	 * exist (it may be the last one: it is authenticated either way); a
	 * short last chunk waits for the final tag. */
	size_t last_hold = released(&ct, chunk, ct.len);
	uint8_t *b = malloc(ct.len + 200);
	char what[128];

	/* A bit flip anywhere. */
	for (size_t p = 0; p < ct.len; p++) {
		memcpy(b, ct.body, ct.len);
		b[p] ^= (uint8_t)(1u << (p % 8));
		size_t allowed = 0;
		bool hdr = p < ct.hdrlen;
		if (!hdr) {
			if (p >= ct.final_off)
				allowed = last_hold;
			else
				for (size_t i = 0; i < n; i++)
					if (p >= ct.chunk_off[i] && p < ct.chunk_off[i] + ct.chunk_len[i] + 16)
						allowed = PD_MIN(i * chunk, last_hold);
		}
		snprintf(what, sizeof(what), "tag %u flip at %zu", tag, p);
		/* Header flips are either refused up front or fail the first chunk. */
		expect_fail(tag, b, ct.len, ct.hdrlen, &sk, pt, allowed, hdr, what);
	}
	/* A dropped chunk; two swapped chunks. */
	for (size_t k = 0; k < n; k++) {
		size_t o = ct.chunk_off[k], l = ct.chunk_len[k] + 16;
		memcpy(b, ct.body, o);
		memcpy(b + o, ct.body + o + l, ct.len - o - l);
		snprintf(what, sizeof(what), "tag %u drop chunk %zu/%zu", tag, k, n);
		expect_fail(tag, b, ct.len - l, ct.hdrlen, &sk, pt, PD_MIN(k * chunk, last_hold), false, what);
		if (k + 1 < n && ct.chunk_len[k + 1] == chunk) {
			memcpy(b, ct.body, ct.len);
			memcpy(b + o, ct.body + o + l, l);
			memcpy(b + o + l, ct.body + o, l);
			snprintf(what, sizeof(what), "tag %u swap chunks %zu,%zu", tag, k, k + 1);
			expect_fail(tag, b, ct.len, ct.hdrlen, &sk, pt, PD_MIN(k * chunk, last_hold), false, what);
		}
	}
	/* Truncation: part of the final tag, all of it, into the last chunks. */
	for (size_t cut = 1; cut <= 40 && cut <= ct.len - ct.hdrlen; cut++) {
		snprintf(what, sizeof(what), "tag %u cut %zu", tag, cut);
		size_t allowed = released(&ct, chunk, ct.len - cut);
		expect_fail(tag, ct.body, ct.len - cut, ct.hdrlen, &sk, pt, allowed, false, what);
	}
	/* Extra octets after the final tag. */
	static const size_t extra[] = { 1, 15, 16, 17, 33, 100 };
	for (size_t e = 0; e < PD_ARRAY_SIZE(extra); e++) {
		memcpy(b, ct.body, ct.len);
		gcry_randomize(b + ct.len, extra[e], GCRY_WEAK_RANDOM);
		snprintf(what, sizeof(what), "tag %u extra %zu", tag, extra[e]);
		/* The final tag is then read as the last chunk: nothing after the
		 * last full chunk may appear. */
		size_t allowed = released(&ct, chunk, ct.len + extra[e]);
		expect_fail(tag, b, ct.len + extra[e], ct.hdrlen, &sk, pt, allowed, false, what);
	}
	free(b);
	te_ct_free(&ct);
	free(pt);
}

static void test_tamper(void **state)
{
	(void)state;
	tamper_one(18, PD_AEAD_OCB, 0, 5 * 64 + 7);
	tamper_one(18, PD_AEAD_GCM, 0, 4 * 64);
	tamper_one(20, PD_AEAD_EAX, 1, 3 * 128 + 1);
	tamper_one(20, PD_AEAD_OCB, 0, 4 * 64);
	tamper_one(18, PD_AEAD_EAX, 2, 0);
	tamper_one(20, PD_AEAD_OCB, 2, 0);
}

/* Garbage bodies under random keys: a clean PD_EINTEGRITY, no output. */
static void test_garbage(void **state)
{
	(void)state;
	uint8_t b[700];
	for (int i = 0; i < 300; i++) {
		uint8_t tag = i & 1 ? 20 : 18;
		size_t len = tu_rand_range(&seed, 0, sizeof(b));
		gcry_randomize(b, sizeof(b), GCRY_WEAK_RANDOM);
		b[0] = tag == 18 ? 2 : 1;
		b[1] = 7;
		b[2] = tag == 18 ? (uint8_t)tu_rand_range(&seed, 1, 3) : (uint8_t)tu_rand_range(&seed, 1, 2);
		b[3] = (uint8_t)tu_rand_range(&seed, 0, 3);
		size_t hdrlen;
		assert_int_equal(pd_aead_header_len(tag, b, &hdrlen), 0);
		if (len < hdrlen)
			len = hdrlen;
		struct pd_sesskey sk = { .algo = 7, .len = 16 };
		gcry_randomize(sk.key, 16, GCRY_WEAK_RANDOM);
		uint8_t *out;
		size_t outn;
		int r = tu_decrypt(tag, b, len, hdrlen, &sk, (enum tu_slice)(i % 3), &seed, &out, &outn);
		assert_int_equal(r, PD_EINTEGRITY);
		assert_int_equal(outn, 0);
		free(out);
	}
}

/* The largest chunk size (4 MiB): a full chunk and a one-octet one. */
static void test_chunk16(void **state)
{
	(void)state;
	size_t len = (4u << 20) + 1;
	uint8_t *pt = malloc(len);
	gcry_randomize(pt, len, GCRY_WEAK_RANDOM);
	struct pd_sesskey sk = { .algo = 9, .len = 32 };
	gcry_randomize(sk.key, 32, GCRY_WEAK_RANDOM);
	for (uint8_t tag = 18; tag <= 20; tag += 2) {
		struct tu_ct ct;
		tu_encrypt(&ct, tag, 9, PD_AEAD_OCB, 16, sk.key, pt, len);
		assert_int_equal(ct.nchunks, 2);
		uint8_t *out;
		size_t outn;
		assert_int_equal(tu_decrypt(tag, ct.body, ct.len, ct.hdrlen, &sk, TU_RANDOM, &seed, &out, &outn), 1);
		assert_int_equal(outn, len);
		assert_memory_equal(out, pt, len);
		free(out);
		te_ct_free(&ct);
	}
	free(pt);
}

/* After the final tag verified, any further input is an error; an empty
 * body is truncated. */
static void test_after_end(void **state)
{
	(void)state;
	struct pd_sesskey sk = { .algo = 7, .len = 16 };
	struct tu_ct ct;
	uint8_t pt[100] = { 1, 2, 3 }, out[200];
	struct pd_aead *a;
	size_t used, got;
	tu_encrypt(&ct, 18, 7, PD_AEAD_OCB, 0, sk.key, pt, sizeof(pt));
	assert_int_equal(pd_aead_new(&a, NULL, 18, ct.body, ct.hdrlen, &sk, NULL), 0);
	assert_int_equal(pd_aead_run(a, ct.body + ct.hdrlen, ct.len - ct.hdrlen, &used, out, sizeof(out), &got, true), 1);
	assert_int_equal(got, sizeof(pt));
	assert_int_equal(pd_aead_run(a, NULL, 0, &used, out, sizeof(out), &got, true), 1);
	assert_int_equal(got, 0);
	assert_int_equal(pd_aead_run(a, pt, 1, &used, out, sizeof(out), &got, true), PD_EINTEGRITY);
	/* Sticky. */
	assert_int_equal(pd_aead_run(a, NULL, 0, &used, out, sizeof(out), &got, true), PD_EINTEGRITY);
	a = pd_aead_free(a, NULL);

	assert_int_equal(pd_aead_new(&a, NULL, 18, ct.body, ct.hdrlen, &sk, NULL), 0);
	assert_int_equal(pd_aead_run(a, NULL, 0, &used, out, sizeof(out), &got, true), PD_EINTEGRITY);
	a = pd_aead_free(a, NULL);
	te_ct_free(&ct);
}

int main(void)
{
	const char *s = getenv("PD_TEST_SEED");
	if (s)
		seed = strtoull(s, NULL, 0);
	fprintf(stderr, "seed 0x%llx\n", (unsigned long long)seed);
	if (pd_lib_init(0) < 0)
		return 1;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_len),
		cmocka_unit_test(test_rfc9580_a8),
		cmocka_unit_test(test_librepgp_a3),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_tamper),
		cmocka_unit_test(test_after_end),
		cmocka_unit_test(test_garbage),
		cmocka_unit_test(test_chunk16),
	};
	int r = cmocka_run_group_tests(tests, NULL, NULL);
	pd_lib_deinit();
	return r;
}
