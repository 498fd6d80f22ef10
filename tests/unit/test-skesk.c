/* SPDX-License-Identifier: MIT */
/* SKESK v4/v5/v6: RFC 9580 A.9-A.11 (v6 + SEIPD v2), A.12 (v4 + Argon2,
 * opt-in), LibrePGP A.3 (v5 + tag 20), rnp 0.16 output (v5 + tag 20), and
 * hand-built v4 packets. */
#include "aead-testutil.h"
#include "pgp/skesk.h"

static uint64_t seed = 0x1234567;

static const struct pd_limits lim = {
	.max_aead_chunk_log = 16, .max_argon2_kib = 1u << 21, .max_s2k_count = 65011712,
};

static struct {
	const char *file, *s2k, *kek, *sk, *padding;
	uint8_t aead;
} rfc[] = {
	{ "aead/a09-skesk6-aead-eax-message.pgp", "154967e590aa1f923e1c0ac64c88f23d",
	  "2fce331f39dd955cc41e95d870c72139", "3881bafe985412459b86c36f98cb9a5e",
	  "d50eae5bf0cd6705500355816cb0c8ff", PD_AEAD_EAX },
	{ "aead/a10-skesk6-aead-ocb-message.pgp", "e80de243a362d93b9dc607ede96a7356",
	  "38a9b345b5680bb61bb65d73eec7ecd9", "28e79ab82397d3c63de24ac217d7b791",
	  "d50eae6aa1649b56aa835b2613902bd2", PD_AEAD_OCB },
	{ "aead/a11-skesk6-aead-gcm-message.pgp", "250281715bba7828ef71ef64c4784753",
	  "7a6f9ab7f99f7ef8dbef841c650800f5", "1936fc8568980274bb900d8319360c77",
	  "d50e1ce2269a9eddef81032172b7ed7c", PD_AEAD_GCM },
};

struct msg {
	uint8_t *file;
	struct tu_pkt esk, data;
};

static void load(struct msg *m, const char *name)
{
	size_t len, pos = 0;
	m->file = tu_read(name, &len);
	tu_next_packet(m->file, len, &pos, &m->esk);
	tu_next_packet(m->file, len, &pos, &m->data);
	assert_int_equal(m->esk.tag, 3);
	assert_int_equal(pos, len);
}

static void unload(struct msg *m)
{
	free(m->file);
	free(m->esk.body);
	free(m->data.body);
}

/* Decrypt the container with sk and compare with want. */
static void check_data(const struct msg *m, const struct pd_sesskey *sk, const uint8_t *want, size_t wantlen)
{
	size_t hdrlen;
	assert_int_equal(pd_aead_header_len(m->data.tag, m->data.body, &hdrlen), 0);
	for (int mode = TU_WHOLE; mode <= TU_RANDOM; mode++) {
		uint8_t *out;
		size_t outn;
		assert_int_equal(tu_decrypt(m->data.tag, m->data.body, m->data.len, hdrlen, sk, mode, &seed, &out, &outn), 1);
		assert_int_equal(outn, wantlen);
		assert_memory_equal(out, want, wantlen);
		free(out);
	}
}

/* Every truncation of a valid SKESK body is refused without a crash and
 * without a session key: a parse error, or (v4/v5, where the ESK length
 * is only bounded) a failed check. */
static void check_truncations(const struct tu_pkt *p, const uint8_t *s2k_key, size_t v4_no_esk_len)
{
	for (size_t l = 0; l < p->len; l++) {
		uint8_t *b = malloc(l ? l : 1); /* exact size: ASan sees any overread */
		memcpy(b, p->body, l);
		struct pd_skesk s;
		struct pd_sesskey k = { 0 };
		int r = pd_skesk_parse(b, l, &s);
		if (r == 0) {
			r = pd_skesk_unlock(NULL, &s, s2k_key, &k);
			/* A v4 cut right after its S2K is a valid packet without ESK. */
			if (l == v4_no_esk_len && r == 0 && k.algo == p->body[1])
				r = PD_EBADPASS;
			if (r != PD_EBADPASS)
				fail_msg("truncated to %zu: %d", l, r);
		} else if (r != PD_EMALFORMED) {
			fail_msg("truncated to %zu: %d", l, r);
		}
		free(b);
	}
}

static void test_rfc9580_v6(void **state)
{
	(void)state;
	for (size_t i = 0; i < PD_ARRAY_SIZE(rfc); i++) {
		struct msg m;
		load(&m, rfc[i].file);
		assert_int_equal(m.data.tag, 18);
		struct pd_skesk s;
		assert_int_equal(pd_skesk_parse(m.esk.body, m.esk.len, &s), 0);
		assert_int_equal(s.version, 6);
		assert_int_equal(s.cipher, 7);
		assert_int_equal(s.aead, rfc[i].aead);
		assert_int_equal(s.s2k.type, 3);
		assert_int_equal(s.esk_len, 16);

		/* From the RFC's S2K output (independent of the S2K code). */
		uint8_t s2k[32], want_sk[32], want[64];
		tu_unhex(rfc[i].s2k, s2k, sizeof(s2k));
		size_t sklen = tu_unhex(rfc[i].sk, want_sk, sizeof(want_sk));
		struct pd_sesskey k;
		memset(&k, 0xAA, sizeof(k));
		assert_int_equal(pd_skesk_unlock(NULL, &s, s2k, &k), 0);
		assert_int_equal(k.algo, 0);
		assert_int_equal(k.len, sklen);
		assert_memory_equal(k.key, want_sk, sklen);

		/* The README's KEK: HKDF-SHA256(no salt, S2K key, C3 06 cipher aead). */
		uint8_t kek[16], want_kek[16];
		const uint8_t info[4] = { 0xC3, 6, 7, rfc[i].aead };
		tu_unhex(rfc[i].kek, want_kek, sizeof(want_kek));
		assert_int_equal(pd_hkdf(GCRY_MD_SHA256, NULL, 0, s2k, 16, info, 4, kek, 16), 0);
		assert_memory_equal(kek, want_kek, 16);

		/* The whole path from the password. */
		memset(&k, 0, sizeof(k));
		assert_int_equal(pd_skesk_decrypt(NULL, m.esk.body, m.esk.len, "password", 8, &lim, &k), 0);
		assert_int_equal(k.len, sklen);
		assert_memory_equal(k.key, want_sk, sklen);

		size_t wl = tu_unhex("cb1362000000000048656c6c6f2c20776f726c6421", want, sizeof(want));
		wl += tu_unhex(rfc[i].padding, want + wl, sizeof(want) - wl);
		check_data(&m, &k, want, wl);

		/* Wrong password, wrong S2K key, a flipped tag: PD_EBADPASS, out untouched. */
		struct pd_sesskey k2 = { 0 };
		assert_int_equal(pd_skesk_decrypt(NULL, m.esk.body, m.esk.len, "passwore", 8, &lim, &k2), PD_EBADPASS);
		assert_int_equal(k2.len, 0);
		s2k[0] ^= 1;
		assert_int_equal(pd_skesk_unlock(NULL, &s, s2k, &k2), PD_EBADPASS);
		s2k[0] ^= 1;
		m.esk.body[m.esk.len - 1] ^= 0x80;
		assert_int_equal(pd_skesk_decrypt(NULL, m.esk.body, m.esk.len, "password", 8, &lim, &k2), PD_EBADPASS);
		m.esk.body[m.esk.len - 1] ^= 0x80;
		assert_int_equal(k2.len, 0);

		/* The v6 field count must match. */
		m.esk.body[1]++;
		assert_int_equal(pd_skesk_parse(m.esk.body, m.esk.len, &s), PD_EMALFORMED);
		m.esk.body[1]--;
		/* The S2K cost cap applies. */
		struct pd_limits small = lim;
		small.max_s2k_count = 1u << 20;
		assert_int_equal(pd_skesk_decrypt(NULL, m.esk.body, m.esk.len, "password", 8, &small, &k2), PD_ELIMIT);

		check_truncations(&m.esk, s2k, 0);
		unload(&m);
	}
}

static void test_librepgp_a3(void **state)
{
	(void)state;
	struct msg m;
	load(&m, "aead/librepgp-a3.pgp");
	assert_int_equal(m.data.tag, 20);
	struct pd_skesk s;
	assert_int_equal(pd_skesk_parse(m.esk.body, m.esk.len, &s), 0);
	assert_int_equal(s.version, 5);
	assert_int_equal(s.aead, PD_AEAD_OCB);
	assert_int_equal(s.s2k.count, 524288);
	uint8_t s2k[16], cek[16], want[32];
	tu_unhex("eb9da78a9d5df80ec7020596399b6508", s2k, sizeof(s2k));
	tu_unhex("d1f01ba30e130aa7d2582c16e050ae44", cek, sizeof(cek));
	struct pd_sesskey k;
	assert_int_equal(pd_skesk_unlock(NULL, &s, s2k, &k), 0);
	assert_int_equal(k.len, 16);
	assert_memory_equal(k.key, cek, 16);
	memset(&k, 0, sizeof(k));
	assert_int_equal(pd_skesk_decrypt(NULL, m.esk.body, m.esk.len, "password", 8, &lim, &k), 0);
	assert_memory_equal(k.key, cek, 16);
	size_t wl = tu_unhex("cb1462000000000048656c6c6f2c20776f726c64210a", want, sizeof(want));
	check_data(&m, &k, want, wl);
	assert_int_equal(pd_skesk_decrypt(NULL, m.esk.body, m.esk.len, "Password", 8, &lim, &k), PD_EBADPASS);
	check_truncations(&m.esk, s2k, 0);
	unload(&m);
}

/* rnp 0.16.3 (Debian 12): v5 SKESK (AES-256, iterated S2K) + tag 20,
 * written with --no-wrap -z 0, so the container holds the file itself. */
static void test_rnp(void **state)
{
	(void)state;
	static const struct { const char *msg, *plain; uint8_t aead; } cases[] = {
		{ "aead/rnp-ocb-c4.pgp", "aead/plain5000.bin", PD_AEAD_OCB },
		{ "aead/rnp-eax-c4.pgp", "aead/plain5000.bin", PD_AEAD_EAX },
		{ "aead/rnp-ocb-c4-exact.pgp", "aead/plain4096.bin", PD_AEAD_OCB },
	};
	for (size_t i = 0; i < PD_ARRAY_SIZE(cases); i++) {
		struct msg m;
		size_t plen;
		load(&m, cases[i].msg);
		uint8_t *plain = tu_read(cases[i].plain, &plen);
		assert_int_equal(m.data.tag, 20);
		assert_int_equal(m.data.body[2], cases[i].aead);
		assert_int_equal(m.data.body[3], 4);
		struct pd_sesskey k = { 0 };
		assert_int_equal(pd_skesk_decrypt(NULL, m.esk.body, m.esk.len, "x", 1, &lim, &k), 0);
		assert_int_equal(k.len, 32);
		check_data(&m, &k, plain, plen);
		assert_int_equal(pd_skesk_decrypt(NULL, m.esk.body, m.esk.len, "y", 1, &lim, &k), PD_EBADPASS);
		free(plain);
		unload(&m);
	}
	/* Default rnp output: a literal (maybe compressed) packet inside. */
	static const char *const hello[] = { "aead/rnp-ocb-hello.pgp", "aead/rnp-eax-hello.pgp" };
	for (size_t i = 0; i < PD_ARRAY_SIZE(hello); i++) {
		struct msg m;
		load(&m, hello[i]);
		struct pd_sesskey k = { 0 };
		assert_int_equal(pd_skesk_decrypt(NULL, m.esk.body, m.esk.len, "x", 1, &lim, &k), 0);
		size_t hdrlen;
		assert_int_equal(pd_aead_header_len(20, m.data.body, &hdrlen), 0);
		uint8_t *out;
		size_t outn;
		assert_int_equal(tu_decrypt(20, m.data.body, m.data.len, hdrlen, &k, TU_ONE, &seed, &out, &outn), 1);
		assert_true(outn > 2);
		/* new-format compressed (8) or literal (11) packet */
		assert_true(out[0] == 0xC8 || out[0] == 0xCB);
		free(out);
		unload(&m);
	}
}

/* v4 packets built here: S2K iterated+salted SHA-256, ESK by CFB. */
static size_t build_v4(uint8_t *b, uint8_t cipher, const char *pw, const uint8_t *esk_plain, size_t esk_plain_len,
                       uint8_t *ret_s2k)
{
	static const uint8_t salt[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	size_t n = 0, keylen = pd_sym_keylen(cipher);
	b[n++] = 4;
	b[n++] = cipher;
	b[n++] = 3;
	b[n++] = 8;
	memcpy(b + n, salt, 8);
	n += 8;
	b[n++] = 0x60; /* (16 + 0) << (6 + 6) = 65536 octets */
	assert_int_equal(gcry_kdf_derive(pw, strlen(pw), GCRY_KDF_ITERSALTED_S2K, GCRY_MD_SHA256, salt, 8, 65536,
	                                 keylen, ret_s2k), 0);
	if (esk_plain_len) {
		gcry_cipher_hd_t h;
		assert_int_equal(gcry_cipher_open(&h, pd_sym_gcry(cipher), GCRY_CIPHER_MODE_CFB, 0), 0);
		assert_int_equal(gcry_cipher_setkey(h, ret_s2k, keylen), 0);
		assert_int_equal(gcry_cipher_encrypt(h, b + n, esk_plain_len, esk_plain, esk_plain_len), 0);
		gcry_cipher_close(h);
		n += esk_plain_len;
	}
	return n;
}

static void test_v4(void **state)
{
	(void)state;
	uint8_t b[128], s2k[32], plain[40];
	struct pd_sesskey k;
	struct pd_skesk s;

	/* No ESK: the S2K output is the session key for the packet's cipher. */
	size_t n = build_v4(b, 9, "pw", NULL, 0, s2k);
	assert_int_equal(pd_skesk_decrypt(NULL, b, n, "pw", 2, &lim, &k), 0);
	assert_int_equal(k.algo, 9);
	assert_int_equal(k.len, 32);
	assert_memory_equal(k.key, s2k, 32);

	/* ESK: algo || key under CFB with a zero IV, also with a 64-bit cipher. */
	static const uint8_t ciphers[] = { 7, 3, 13 };
	for (size_t i = 0; i < sizeof(ciphers); i++) {
		plain[0] = 9;
		gcry_randomize(plain + 1, 32, GCRY_WEAK_RANDOM);
		n = build_v4(b, ciphers[i], "secret", plain, 33, s2k);
		memset(&k, 0, sizeof(k));
		assert_int_equal(pd_skesk_decrypt(NULL, b, n, "secret", 6, &lim, &k), 0);
		assert_int_equal(k.algo, 9);
		assert_int_equal(k.len, 32);
		assert_memory_equal(k.key, plain + 1, 32);
		check_truncations(&(struct tu_pkt){ .tag = 3, .body = b, .len = n }, s2k, 13);
	}
	/* An invalid algorithm octet or a length that does not fit it: the
	 * only wrong-password signal v4 has. */
	plain[0] = 5;
	n = build_v4(b, 7, "secret", plain, 17, s2k);
	assert_int_equal(pd_skesk_decrypt(NULL, b, n, "secret", 6, &lim, &k), PD_EBADPASS);
	plain[0] = 7;
	n = build_v4(b, 7, "secret", plain, 33, s2k);
	assert_int_equal(pd_skesk_decrypt(NULL, b, n, "secret", 6, &lim, &k), PD_EBADPASS);
	plain[0] = 0;
	n = build_v4(b, 7, "secret", plain, 17, s2k);
	assert_int_equal(pd_skesk_decrypt(NULL, b, n, "secret", 6, &lim, &k), PD_EBADPASS);
	/* Too long an ESK; a one-octet ESK. */
	n = build_v4(b, 7, "secret", plain, 34, s2k);
	assert_int_equal(pd_skesk_parse(b, n, &s), PD_EMALFORMED);
	n = build_v4(b, 7, "secret", plain, 1, s2k);
	assert_int_equal(pd_skesk_parse(b, n, &s), PD_EMALFORMED);
	/* Unknown version / cipher / S2K; the GnuPG no-secret S2K. */
	n = build_v4(b, 7, "secret", NULL, 0, s2k);
	b[0] = 3;
	assert_int_equal(pd_skesk_parse(b, n, &s), PD_EUNSUPPORTED);
	b[0] = 4;
	b[1] = 5;
	assert_int_equal(pd_skesk_parse(b, n, &s), PD_EUNSUPPORTED);
	b[1] = 7;
	b[2] = 2;
	assert_int_equal(pd_skesk_parse(b, n, &s), PD_EUNSUPPORTED);
	static const uint8_t gnu[] = { 4, 7, 101, 2, 'G', 'N', 'U', 1 };
	assert_int_equal(pd_skesk_parse(gnu, sizeof(gnu), &s), PD_EMALFORMED);
	assert_int_equal(pd_skesk_parse(gnu, 0, &s), PD_EMALFORMED);
}

/* RFC 9580 A.12: v4 SKESK with Argon2id (2 GiB, ~10 s): PD_SLOW_TESTS=1. */
static void test_argon2_slow(void **state)
{
	(void)state;
	const char *slow = getenv("PD_SLOW_TESTS");
	if (!slow || strcmp(slow, "1") != 0)
		skip();
	struct msg m;
	size_t len, pos = 0;
	m.file = tu_read("aead/a12-1-skesk4-argon2-aes128-message.pgp", &len);
	tu_next_packet(m.file, len, &pos, &m.esk);
	struct pd_skesk s;
	assert_int_equal(pd_skesk_parse(m.esk.body, m.esk.len, &s), 0);
	assert_int_equal(s.s2k.type, 4);
	assert_int_equal(s.s2k.m, 21);
	struct pd_sesskey k = { 0 };
	struct pd_limits small = lim;
	small.max_argon2_kib = 1u << 20;
	assert_int_equal(pd_skesk_decrypt(NULL, m.esk.body, m.esk.len, "password", 8, &small, &k), PD_ELIMIT);
	assert_int_equal(pd_skesk_decrypt(NULL, m.esk.body, m.esk.len, "password", 8, &lim, &k), 0);
	uint8_t want[16];
	tu_unhex("01FE16BBACFD1E7B78EF3B865187374F", want, sizeof(want));
	assert_int_equal(k.algo, 7);
	assert_int_equal(k.len, 16);
	assert_memory_equal(k.key, want, 16);
	free(m.esk.body);
	free(m.file);
}

/* The Argon2 cap is checked before any memory is spent (fast). */
static void test_argon2_cap(void **state)
{
	(void)state;
	size_t len, pos = 0;
	uint8_t *f = tu_read("aead/a12-1-skesk4-argon2-aes128-message.pgp", &len);
	struct tu_pkt p;
	tu_next_packet(f, len, &pos, &p);
	struct pd_limits small = lim;
	small.max_argon2_kib = 1u << 16;
	struct pd_sesskey k = { 0 };
	assert_int_equal(pd_skesk_decrypt(NULL, p.body, p.len, "password", 8, &small, &k), PD_ELIMIT);
	assert_int_equal(k.len, 0);
	free(p.body);
	free(f);
}

int main(void)
{
	if (pd_lib_init(0) < 0)
		return 1;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rfc9580_v6),
		cmocka_unit_test(test_librepgp_a3),
		cmocka_unit_test(test_rnp),
		cmocka_unit_test(test_v4),
		cmocka_unit_test(test_argon2_cap),
		cmocka_unit_test(test_argon2_slow),
	};
	int r = cmocka_run_group_tests(tests, NULL, NULL);
	pd_lib_deinit();
	return r;
}
