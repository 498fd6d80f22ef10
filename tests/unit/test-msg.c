/* SPDX-License-Identifier: MIT */
/*
 * The message pipeline with known session keys: gpg-made SEIPD v1 messages
 * (tests/data/msg, see gen.sh there) for every cipher and compression,
 * pushed in slices from 1 octet up and pulled through output buffers from
 * 1 octet up; then tampering, truncation and limits.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gcrypt.h>

#include "internal.h"

static uint8_t *slurp_path(const char *path, size_t *len);

static uint8_t *slurp(const char *name, const char *ext, size_t *len)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/msg/%s.%s", PD_TEST_DATA, name, ext);
	return slurp_path(path, len);
}

static uint8_t *slurp_path(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *b = malloc((size_t)n + 1);
	assert_non_null(b);
	assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	b[n] = 0;
	*len = (size_t)n;
	return b;
}

/* "ALGO:HEX" as gpg prints it */
static void parse_sk(const char *s, uint8_t *algo, uint8_t *key, size_t *klen)
{
	char *colon = strchr(s, ':');
	assert_non_null(colon);
	*algo = (uint8_t)atoi(s);
	*klen = 0;
	for (const char *p = colon + 1; p[0] && p[1] && p[0] != '\n'; p += 2) {
		unsigned v;
		assert_int_equal(sscanf(p, "%2x", &v), 1);
		key[(*klen)++] = (uint8_t)v;
	}
}

struct result {
	int rc;
	uint8_t *out;
	size_t outlen;
	bool saw_meta;
	struct pd_msginfo info;
	char detail[512];
	/* pd_msg_session_key() at the end, and whether it gave anything out
	 * before the message was done */
	int sk_rc;
	uint8_t sk_algo, sk[PD_SESSION_KEY_MAX];
	size_t sk_len;
	bool sk_early;
};

/* Decrypt msg (len) with the given session key, input in slices of `slice`,
 * output through a buffer of `cap` octets. */
static const char *password; /* when set, run() recovers the key from SKESKs */
static struct pd_budget *budget; /* when set, run() draws the message's memory from it */
static bool key_first; /* when set, run() gives the session key before the first step */

static struct result run(const uint8_t *msg, size_t len, uint8_t algo, const uint8_t *key, size_t klen,
                         size_t slice, size_t cap, const struct pd_limits *lim)
{
	struct result res = { 0 };
	struct pd_msg *m;
	uint8_t *buf = malloc(cap);
	size_t pos = 0, outcap = 1024;
	res.out = malloc(outcap);
	assert_int_equal(pd_msg_new(&m, lim), 0);
	if (budget)
		assert_int_equal(pd_msg_set_budget(m, budget), 0);
	if (key_first)
		assert_int_equal(pd_msg_set_session_key(m, algo, key, klen), 0);
	for (;;) {
		size_t n = 0;
		int r = pd_msg_step(m, NULL, buf, cap, &n);
		if (r < 0) {
			res.rc = r;
			break;
		}
		if (r != PD_STEP_DONE && pd_msg_session_key(m, &res.sk_algo, res.sk, sizeof(res.sk), &res.sk_len) !=
		    PD_EUSAGE)
			res.sk_early = true;
		if (r == PD_STEP_NEED_INPUT) {
			if (pos == len) {
				pd_msg_close_input(m);
				continue;
			}
			size_t used;
			assert_int_equal(pd_msg_write(m, msg + pos, PD_MIN(slice, len - pos), &used), 0);
			pos += used;
		} else if (r == PD_STEP_NEED_KEY) {
			if (password) {
				assert_int_equal(pd_msg_set_password(m, password, strlen(password)), 0);
				r = pd_msg_recover_key(m, NULL, NULL);
				if (r < 0) {
					res.rc = r;
					break;
				}
				continue;
			}
			assert_int_equal(pd_msg_set_session_key(m, algo, key, klen), 0);
		} else if (r == PD_STEP_METADATA) {
			res.saw_meta = true;
		} else if (r == PD_STEP_OUTPUT) {
			assert_true(n > 0 && n <= cap);
			while (res.outlen + n > outcap)
				res.out = realloc(res.out, outcap *= 2);
			memcpy(res.out + res.outlen, buf, n);
			res.outlen += n;
		} else if (r == PD_STEP_DONE) {
			res.rc = 0;
			break;
		}
	}
	res.info = *pd_msg_info(m);
	snprintf(res.detail, sizeof(res.detail), "%s", pd_msg_detail(m));
	res.sk_rc = pd_msg_session_key(m, &res.sk_algo, res.sk, sizeof(res.sk), &res.sk_len);
	pd_msg_free(m, NULL);
	free(buf);
	return res;
}

static const char *const fixtures[] = {
	"aes128-none", "aes256-zlib", "aes192-zip", "cast5-bzip2", "twofish-none",
	"camellia256-zip", "3des-none", "blowfish-zlib", "idea-none", "aes256-partial",
};

static void test_fixtures(void **state)
{
	(void)state;
	static const size_t slices[] = { 1, 7, 4096, 1 << 20 };
	static const size_t caps[] = { 1, 13, 65536 };
	for (size_t f = 0; f < PD_ARRAY_SIZE(fixtures); f++) {
		size_t mlen, plen, sklen, klen;
		uint8_t *msg = slurp(fixtures[f], "gpg", &mlen);
		uint8_t *pt = slurp(fixtures[f], "txt", &plen);
		uint8_t *sk = slurp(fixtures[f], "sk", &sklen);
		uint8_t algo, key[32];
		parse_sk((char *)sk, &algo, key, &klen);
		for (size_t s = 0; s < PD_ARRAY_SIZE(slices); s++) {
			for (size_t c = 0; c < PD_ARRAY_SIZE(caps); c++) {
				/* 1-octet slices and outputs on the big inputs only once */
				if (plen > 20000 && (slices[s] == 1) != (caps[c] == 1))
					continue;
				struct result r = run(msg, mlen, algo, key, klen, slices[s], caps[c], NULL);
				if (r.rc != 0)
					fail_msg("%s slice %zu cap %zu: %s: %s", fixtures[f], slices[s], caps[c], pd_errname(r.rc), r.detail);
				assert_int_equal(r.outlen, plen);
				assert_memory_equal(r.out, pt, plen);
				assert_true(r.saw_meta);
				assert_int_equal(r.info.integrity, PD_INTEGRITY_MDC);
				assert_int_equal(r.info.sym_algo, algo);
				assert_int_equal(r.info.n_skesk, 1);
				assert_true(r.info.has_literal);
				free(r.out);
			}
		}
		free(msg);
		free(pt);
		free(sk);
	}
}

static void load(const char *name, uint8_t **msg, size_t *mlen, uint8_t *algo, uint8_t *key, size_t *klen)
{
	size_t sklen;
	*msg = slurp(name, "gpg", mlen);
	uint8_t *sk = slurp(name, "sk", &sklen);
	parse_sk((char *)sk, algo, key, klen);
	free(sk);
}

/* Every single bit flip in the encrypted part must fail, never give other
 * plaintext: integrity (or, in the header area, format) errors. */
static void test_bitflips(void **state)
{
	(void)state;
	uint8_t *msg, algo, key[32];
	size_t mlen, klen;
	load("aes128-none", &msg, &mlen, &algo, key, &klen);
	/* From the SEIPD packet on: the SKESK before it is not used when the
	 * session key is given directly. */
	assert_int_equal(msg[0], 0x8C);
	for (size_t i = 2 + (size_t)msg[1]; i < mlen; i++) {
		for (int b = 0; b < 8; b++) {
			msg[i] ^= (uint8_t)(1u << b);
			struct result r = run(msg, mlen, algo, key, klen, 1 << 20, 65536, NULL);
			msg[i] ^= (uint8_t)(1u << b);
			free(r.out);
			if (r.rc == 0)
				fail_msg("flip of bit %d at offset %zu decrypted", b, i);
		}
	}
	free(msg);
}

static void test_truncation(void **state)
{
	(void)state;
	uint8_t *msg, algo, key[32];
	size_t mlen, klen;
	load("aes256-partial", &msg, &mlen, &algo, key, &klen);
	for (size_t cut = 0; cut < mlen; cut += (cut < 600 ? 1 : 997)) {
		struct result r = run(msg, cut, algo, key, klen, 1 << 20, 65536, NULL);
		free(r.out);
		if (r.rc == 0)
			fail_msg("truncated at %zu decrypted", cut);
		assert_true(r.rc == PD_ETRUNCATED || r.rc == PD_EINTEGRITY || r.rc == PD_ENOTPGP ||
		            r.rc == PD_EMALFORMED);
	}
	free(msg);
}

static void test_wrong_key(void **state)
{
	(void)state;
	uint8_t *msg, algo, key[32];
	size_t mlen, klen;
	load("aes256-zlib", &msg, &mlen, &algo, key, &klen);
	key[0] ^= 1;
	struct result r = run(msg, mlen, algo, key, klen, 4096, 65536, NULL);
	assert_int_equal(r.rc, PD_EINTEGRITY);
	free(r.out);
	free(msg);
}

static void test_output_limit(void **state)
{
	(void)state;
	uint8_t *msg, algo, key[32];
	size_t mlen, klen;
	struct pd_limits lim;
	pd_limits_default(&lim);
	lim.max_output = 1000;
	load("twofish-none", &msg, &mlen, &algo, key, &klen);
	struct result r = run(msg, mlen, algo, key, klen, 4096, 65536, &lim);
	assert_int_equal(r.rc, PD_ELIMIT);
	assert_true(r.outlen <= 1000);
	free(r.out);
	free(msg);
}

static void test_garbage(void **state)
{
	(void)state;
	const uint8_t junk[] = "this is not OpenPGP";
	struct result r = run(junk, sizeof(junk) - 1, 9, junk, 32, 4, 16, NULL);
	assert_int_equal(r.rc, PD_ENOTPGP);
	free(r.out);
	r = run(junk, 0, 9, junk, 32, 4, 16, NULL);
	assert_int_equal(r.rc, PD_ENOTPGP);
	free(r.out);
	/* text without a BEGIN line, longer than the input buffer: decided
	 * (found by the daemon tests: the engine waited for input forever) */
	size_t tl = 300000;
	uint8_t *text = malloc(tl);
	memset(text, 'x', tl);
	r = run(text, tl, 9, junk, 32, 65536, 16, NULL);
	assert_int_equal(r.rc, PD_ENOTPGP);
	free(r.out);
	free(text);
	/* a binary header promising 4 GiB, then nothing */
	const uint8_t big[] = { 0xC1, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x03 };
	r = run(big, sizeof(big), 9, junk, 32, 3, 16, NULL);
	assert_true(r.rc == PD_ETRUNCATED || r.rc == PD_ELIMIT);
	free(r.out);
}

/* The password path through the whole pipeline: SKESK v4 + SEIPD v1 (gpg),
 * v6 + SEIPD v2 (RFC 9580 A.9-A.11), v5 + OCB packet (LibrePGP A.3, rnp). */
static void test_passwords(void **state)
{
	(void)state;
	static const struct { const char *file, *pw, *plain, *text; } v[] = {
		{ "msg/aes128-none.gpg", "test", "msg/aes128-none.txt" },
		{ "msg/aes256-partial.gpg", "test", "msg/aes256-partial.txt" },
		{ "aead/a09-skesk6-aead-eax-message.pgp", "password", NULL },
		{ "aead/a10-skesk6-aead-ocb-message.pgp", "password", NULL },
		{ "aead/a11-skesk6-aead-gcm-message.pgp", "password", NULL },
		{ "aead/librepgp-a3.pgp", "password", NULL, "Hello, world!\n" },
		{ "aead/rnp-ocb-hello.pgp", "x", "aead/hello.txt" },
		{ "aead/rnp-eax-hello.pgp", "x", "aead/hello.txt" },
	};
	for (size_t i = 0; i < PD_ARRAY_SIZE(v); i++) {
		char path[512];
		size_t mlen, plen;
		snprintf(path, sizeof(path), "%s/%s", PD_TEST_DATA, v[i].file);
		uint8_t *msg = slurp_path(path, &mlen);
		uint8_t *pt = (uint8_t *)strdup(v[i].text ? v[i].text : "Hello, world!");
		plen = strlen((char *)pt);
		if (v[i].plain) {
			free(pt);
			snprintf(path, sizeof(path), "%s/%s", PD_TEST_DATA, v[i].plain);
			pt = slurp_path(path, &plen);
		}
		for (size_t slice = 1; slice <= 4096; slice *= 64) {
			password = v[i].pw;
			struct result r = run(msg, mlen, 0, NULL, 0, slice, 100, NULL);
			if (r.rc != 0)
				fail_msg("%s slice %zu: %s: %s", v[i].file, slice, pd_errname(r.rc), r.detail);
			assert_int_equal(r.outlen, plen);
			assert_memory_equal(r.out, pt, plen);
			assert_int_equal(r.info.pk_algo, 0);
			assert_true(r.info.integrity == PD_INTEGRITY_MDC || r.info.integrity == PD_INTEGRITY_AEAD);
			free(r.out);
			/* wrong password: refused, no plaintext claimed valid */
			password = "wrong";
			r = run(msg, mlen, 0, NULL, 0, slice, 100, NULL);
			assert_true(r.rc == PD_EBADPASS || r.rc == PD_EINTEGRITY);
			free(r.out);
		}
		password = NULL;
		free(msg);
		free(pt);
	}
}

/* Session keys in and out: a verified message gives its key (the one
 * gpg printed; for AEAD containers with the header's cipher), which opens
 * it again without the password; a tampered message or a wrong key gives
 * nothing, and nothing comes out before the end. */
static void test_session_key(void **state)
{
	(void)state;
	uint8_t *msg, algo, key[32];
	size_t mlen, klen;

	for (size_t f = 0; f < PD_ARRAY_SIZE(fixtures); f++) {
		load(fixtures[f], &msg, &mlen, &algo, key, &klen);
		struct result r = run(msg, mlen, algo, key, klen, 4096, 65536, NULL);
		assert_int_equal(r.rc, 0);
		assert_false(r.sk_early);
		assert_int_equal(r.sk_rc, 0);
		assert_int_equal(r.sk_algo, algo);
		assert_int_equal(r.sk_len, klen);
		assert_memory_equal(r.sk, key, klen);
		free(r.out);
		/* given before the message asked for it, as a caller that has
		 * it from the start does (the message never asks then) */
		key_first = true;
		r = run(msg, mlen, algo, key, klen, 1, 100, NULL);
		key_first = false;
		if (r.rc != 0)
			fail_msg("%s, session key given first: %s: %s", fixtures[f], pd_errname(r.rc), r.detail);
		assert_int_equal(r.sk_rc, 0);
		assert_memory_equal(r.sk, key, klen);
		free(r.out);
		msg[mlen - 3] ^= 1; /* inside the MDC */
		r = run(msg, mlen, algo, key, klen, 4096, 65536, NULL);
		assert_int_equal(r.rc, PD_EINTEGRITY);
		assert_int_equal(r.sk_rc, PD_EUSAGE);
		assert_false(r.sk_early);
		free(r.out);
		free(msg);
	}

	static const struct { const char *file, *pw; } v[] = {
		{ "msg/aes256-partial.gpg", "test" },                  /* SKESK v4, SEIPD v1 */
		{ "aead/a09-skesk6-aead-eax-message.pgp", "password" }, /* SKESK v6, SEIPD v2 */
		{ "aead/a11-skesk6-aead-gcm-message.pgp", "password" },
		{ "aead/librepgp-a3.pgp", "password" },                 /* SKESK v5, OCB packet */
	};
	for (size_t i = 0; i < PD_ARRAY_SIZE(v); i++) {
		char path[512];
		snprintf(path, sizeof(path), "%s/%s", PD_TEST_DATA, v[i].file);
		msg = slurp_path(path, &mlen);
		password = v[i].pw;
		struct result a = run(msg, mlen, 0, NULL, 0, 4096, 65536, NULL);
		password = NULL;
		assert_int_equal(a.rc, 0);
		assert_int_equal(a.sk_rc, 0);
		assert_false(a.sk_early);
		assert_int_equal(a.sk_algo, a.info.sym_algo);
		assert_true(a.sk_len > 0);
		struct result b = run(msg, mlen, a.sk_algo, a.sk, a.sk_len, 7, 100, NULL);
		if (b.rc != 0)
			fail_msg("%s with its own session key: %s: %s", v[i].file, pd_errname(b.rc), b.detail);
		assert_int_equal(b.outlen, a.outlen);
		assert_memory_equal(b.out, a.out, a.outlen);
		assert_int_equal(b.sk_rc, 0);
		assert_memory_equal(b.sk, a.sk, a.sk_len);
		free(b.out);
		a.sk[0] ^= 0x80; /* a wrong key: the integrity check fails, nothing given out */
		b = run(msg, mlen, a.sk_algo, a.sk, a.sk_len, 4096, 65536, NULL);
		assert_int_equal(b.rc, PD_EINTEGRITY);
		assert_int_equal(b.sk_rc, PD_EUSAGE);
		assert_false(b.sk_early);
		free(b.out);
		free(a.out);
		free(msg);
	}

	/* SED (tag 9, allowed): it decrypts, but nothing authenticated it, so
	 * its key is not given out */
	{
		uint8_t sk16[16], pt[64], sed[80];
		const char body[] = "not authenticated";
		size_t bl = sizeof(body) - 1, n = 0;
		gcry_randomize(sk16, sizeof(sk16), GCRY_WEAK_RANDOM);
		gcry_randomize(pt, 16, GCRY_WEAK_RANDOM);
		pt[16] = pt[14];
		pt[17] = pt[15];
		n = 18;
		pt[n++] = 0xCB; /* literal data, new format */
		pt[n++] = (uint8_t)(6 + bl);
		pt[n++] = 'b';
		pt[n++] = 0;
		memset(pt + n, 0, 4);
		n += 4;
		memcpy(pt + n, body, bl);
		n += bl;
		gcry_cipher_hd_t h;
		assert_int_equal(gcry_cipher_open(&h, GCRY_CIPHER_AES128, GCRY_CIPHER_MODE_CFB,
		                                  GCRY_CIPHER_ENABLE_SYNC), 0);
		assert_int_equal(gcry_cipher_setkey(h, sk16, 16), 0);
		assert_int_equal(gcry_cipher_setiv(h, NULL, 0), 0);
		sed[0] = 0xC9; /* SED, new format */
		sed[1] = (uint8_t)n;
		assert_int_equal(gcry_cipher_encrypt(h, sed + 2, 18, pt, 18), 0);
		gcry_cipher_sync(h);
		assert_int_equal(gcry_cipher_encrypt(h, sed + 20, n - 18, pt + 18, n - 18), 0);
		gcry_cipher_close(h);
		struct pd_limits lim;
		pd_limits_default(&lim);
		lim.allow_sed = true;
		struct result r = run(sed, n + 2, 7, sk16, 16, 4096, 65536, &lim);
		if (r.rc != 0)
			fail_msg("SED: %s: %s", pd_errname(r.rc), r.detail);
		assert_int_equal(r.info.integrity, PD_INTEGRITY_UNPROTECTED);
		assert_int_equal(r.outlen, bl);
		assert_memory_equal(r.out, body, bl);
		assert_int_equal(r.sk_rc, PD_EUSAGE);
		free(r.out);
	}

	/* what the caller gives is checked at once */
	struct pd_msg *m;
	uint8_t k[32] = { 1 };
	assert_int_equal(pd_msg_new(&m, NULL), 0);
	assert_int_equal(pd_msg_set_session_key(m, 0, k, 16), PD_EUNSUPPORTED);
	assert_int_equal(pd_msg_set_session_key(m, 99, k, 16), PD_EUNSUPPORTED);
	assert_int_equal(pd_msg_set_session_key(m, 9, k, 16), -EINVAL);
	assert_int_equal(pd_msg_set_session_key(m, 7, k, 32), -EINVAL);
	/* ... and without a message, the same verdicts (the daemon's loop) */
	assert_int_equal(pd_session_key_check(0, 16), PD_EUNSUPPORTED);
	assert_int_equal(pd_session_key_check(99, 16), PD_EUNSUPPORTED);
	assert_int_equal(pd_session_key_check(9, 16), -EINVAL);
	assert_int_equal(pd_session_key_check(7, 32), -EINVAL);
	assert_int_equal(pd_session_key_check(9, 33), -EINVAL);
	assert_int_equal(pd_session_key_check(7, 16), 0);
	assert_int_equal(pd_session_key_check(9, 32), 0);
	assert_int_equal(pd_msg_set_session_key(m, 9, k, 32), 0);
	assert_int_equal(pd_msg_set_session_key(m, 9, k, 32), PD_EUSAGE);
	uint8_t oa;
	size_t ol;
	assert_int_equal(pd_msg_session_key(m, &oa, k, sizeof(k), &ol), PD_EUSAGE);
	pd_msg_free(m, NULL);
}

/* The memory budget: every fixture within a roomy one gives it all back;
 * a bzip2 layer (3.7 MB of state) does not fit a small one: -ENOMEM once
 * the MDC verified, the fixed integrity failure when it does not (the
 * layer is unauthenticated data), and the budget is whole again after. */
static void test_budget(void **state)
{
	(void)state;
	uint8_t *msg, algo, key[32];
	size_t mlen, klen;

	assert_int_equal(pd_budget_new(&budget, 64u << 20), 0);
	for (size_t f = 0; f < PD_ARRAY_SIZE(fixtures); f++) {
		load(fixtures[f], &msg, &mlen, &algo, key, &klen);
		struct result r = run(msg, mlen, algo, key, klen, 4096, 65536, NULL);
		if (r.rc != 0)
			fail_msg("%s: %s: %s", fixtures[f], pd_errname(r.rc), r.detail);
		assert_int_equal(pd_budget_used(budget), 0);
		free(r.out);
		free(msg);
	}
	budget = pd_budget_free(budget);

	assert_int_equal(pd_budget_new(&budget, PD_MSG_BASE_MEMORY + 2 * 65536 + (1u << 20)), 0);
	load("cast5-bzip2", &msg, &mlen, &algo, key, &klen);
	struct result r = run(msg, mlen, algo, key, klen, 4096, 65536, NULL);
	assert_int_equal(r.rc, -ENOMEM);
	assert_non_null(strstr(r.detail, "memory budget"));
	assert_int_equal(pd_budget_used(budget), 0);
	free(r.out);
	msg[mlen - 3] ^= 1; /* inside the MDC */
	r = run(msg, mlen, algo, key, klen, 4096, 65536, NULL);
	assert_int_equal(r.rc, PD_EINTEGRITY);
	assert_string_equal(r.detail, "integrity check failed: the message was modified, or the session key is wrong");
	assert_int_equal(pd_budget_used(budget), 0);
	free(r.out);
	free(msg);
	budget = pd_budget_free(budget);
}

int main(void)
{
	pd_lib_init(0);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fixtures),
		cmocka_unit_test(test_bitflips),
		cmocka_unit_test(test_truncation),
		cmocka_unit_test(test_wrong_key),
		cmocka_unit_test(test_output_limit),
		cmocka_unit_test(test_garbage),
		cmocka_unit_test(test_passwords),
		cmocka_unit_test(test_budget),
		cmocka_unit_test(test_session_key),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
