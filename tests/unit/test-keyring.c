/* SPDX-License-Identifier: MIT */
/*
 * Key ring: loading the fixed key files under tests/data/keys (made once
 * with GnuPG 2.2.40; fingerprints below are what `gpg --with-colons
 * --list-secret-keys` and `sq inspect` printed), passphrase handling, every
 * S2K usage (re-protected here with an independent encoder), validation of
 * secrets against public keys, and truncation/corruption at every offset.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include <gcrypt.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "pgp/hkdf.h"
#include "pgp/key.h"

#define PASS "test passphrase"

static uint8_t *load(const char *name, size_t *ret_len)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/keys/%s", PD_TEST_DATA, name);
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	uint8_t *buf = malloc(1 << 16);
	assert_non_null(buf);
	size_t n = fread(buf, 1, 1 << 16, f);
	fclose(f);
	assert_true(n > 0 && n < (1 << 16));
	*ret_len = n;
	return buf;
}

static void unhex(const char *h, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		assert_int_equal(sscanf(h + 2 * i, "%2x", &v), 1);
		out[i] = (uint8_t)v;
	}
}

static void assert_fpr(const uint8_t *fpr, size_t len, const char *hex)
{
	uint8_t want[32];
	assert_int_equal(strlen(hex), 2 * len);
	unhex(hex, want, len);
	assert_memory_equal(fpr, want, len);
}

/* A ring of the libgcrypt ECDH backend (the default is OpenSSL's). */
static void new_ring(struct pd_keyring **kr)
{
	assert_int_equal(pd_keyring_new(kr, PD_RSA_DEFAULT), 0);
	assert_int_equal(pd_keyring_set_ecdh_backend(*kr, PD_ECDH_GCRYPT), 0);
}

/* The scalar of a cv25519/X25519/X448 key as loaded, native little-endian,
 * into out[56]; its length.  It is in OpenSSL's key only, with either ECDH
 * backend (pgp/ecdh.c). */
static size_t x_scalar(const struct pd_key *k, uint8_t *out)
{
	size_t len = 56;
	assert_null(k->native_sk);
	assert_non_null(k->ecdh_pkey);
	assert_int_equal(EVP_PKEY_get_raw_private_key(k->ecdh_pkey, out, &len), 1);
	assert_int_equal(len, k->native_sk_len);
	return len;
}

/* Load a file into a fresh ring; returns pd_keyring_add()'s result. */
static int add_file(struct pd_keyring **kr, const char *name, const char *pass, char *detail)
{
	size_t len;
	uint8_t *buf = load(name, &len);
	if (!*kr)
		new_ring(kr);
	int r = pd_keyring_add(*kr, buf, len, pass, pass ? strlen(pass) : 0, detail, 256);
	free(buf);
	return r;
}

struct want {
	const char *file;
	const char *pass;
	int n;              /* keys added */
	int idx;            /* which one to check */
	uint8_t version, algo;
	uint16_t bits;
	const char *fpr, *primary, *curve;
};

static const struct want wants[] = {
	/* The RSA encryption subkey only: the RSA primary (algorithm 1, fit
	 * for decryption as far as the algorithm goes) is flagged
	 * certify+sign by its self-signature. */
	{ "rsa2048.gpg", NULL, 1, 0, 4, 1, 2048, "220D6AE0D1C2B7D94071547C8DFB60D40DBB7820",
	  "E05337ED09CD811F023D99072DE66863842B0FB4", "" },
	{ "rsa2048-protected.gpg", PASS, 1, 0, 4, 1, 2048, "220D6AE0D1C2B7D94071547C8DFB60D40DBB7820",
	  "E05337ED09CD811F023D99072DE66863842B0FB4", "" },
	{ "rsa2048-stub.gpg", PASS, 1, 0, 4, 1, 2048, "220D6AE0D1C2B7D94071547C8DFB60D40DBB7820",
	  "E05337ED09CD811F023D99072DE66863842B0FB4", "" },
	{ "cv25519.gpg", NULL, 1, 0, 4, 18, 255, "8140F323EA3CFB14A8CCF26A756A26217CF25D80",
	  "94FB104CB257D8E06CEC2BCE6C57FFAB8ED940FC", "cv25519" },
	{ "cv25519-protected.gpg", PASS, 1, 0, 4, 18, 255, "8140F323EA3CFB14A8CCF26A756A26217CF25D80",
	  "94FB104CB257D8E06CEC2BCE6C57FFAB8ED940FC", "cv25519" },
	{ "p256.gpg", NULL, 1, 0, 4, 18, 256, "57F5CAFED9C1BC3DA18B443C6C64797A569184EC",
	  "3B55C6218433497D58EE144B94427D77FC73FA2C", "nistp256" },
	{ "p256-stub.gpg", NULL, 1, 0, 4, 18, 256, "57F5CAFED9C1BC3DA18B443C6C64797A569184EC",
	  "3B55C6218433497D58EE144B94427D77FC73FA2C", "nistp256" },
	{ "elg.gpg", NULL, 1, 0, 4, 16, 2048, "24A193BFD4F29706DD20168F40AC87D81AE2DCD7",
	  "1CAE88139586859F12E507AF729980A088A9D99C", "" },
	{ "elg-protected.gpg", PASS, 1, 0, 4, 16, 2048, "24A193BFD4F29706DD20168F40AC87D81AE2DCD7",
	  "1CAE88139586859F12E507AF729980A088A9D99C", "" },
	/* RFC 9580 A.3/A.4 */
	{ "a04-v6-secret-key.gpg", NULL, 1, 0, 6, 25, 255,
	  "12C83F1E706F6308FE151A417743A1F033790E93E9978488D1DB378DA9930885",
	  "CB186C4F0609A697E4D52DFA6C722B0C1F1E27C18A56708F6525EC27BAD9ACC9", "x25519" },
};

static void test_load_files(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(wants) / sizeof(wants[0]); i++) {
		const struct want *w = &wants[i];
		struct pd_keyring *kr = NULL;
		char detail[256];
		int r = add_file(&kr, w->file, w->pass, detail);
		if (r != w->n)
			fail_msg("%s: %d (%s)", w->file, r, detail);
		assert_int_equal(pd_keyring_count(kr), w->n);
		assert_int_equal(pd__keyring_n(kr), w->n);
		struct pd_keyinfo ki;
		assert_int_equal(pd_keyring_info(kr, (size_t)w->idx, &ki), 0);
		assert_int_equal(pd_keyring_info(kr, (size_t)w->n, &ki), -EINVAL);
		assert_int_equal(pd_keyring_info(kr, (size_t)w->idx, &ki), 0);
		assert_int_equal(ki.version, w->version);
		assert_int_equal(ki.pk_algo, w->algo);
		assert_int_equal(ki.bits, w->bits);
		assert_int_equal(ki.fpr_len, strlen(w->fpr) / 2);
		assert_fpr(ki.fpr, ki.fpr_len, w->fpr);
		assert_int_equal(ki.primary_fpr_len, strlen(w->primary) / 2);
		assert_fpr(ki.primary_fpr, ki.primary_fpr_len, w->primary);
		/* key ID: low 64 bits (v4) or high 64 bits (v6) */
		assert_memory_equal(ki.keyid, w->version == 4 ? ki.fpr + 12 : ki.fpr, 8);
		assert_string_equal(ki.curve, w->curve);
		const struct pd_key *k = pd__keyring_get(kr, (size_t)w->idx);
		assert_non_null(k);
		assert_non_null(k->ir_secret);
		assert_true(CRYPTO_secure_allocated(k->ir_secret));
		if (k->native_sk)
			assert_true(gcry_is_secure(k->native_sk));
		assert_null(pd__keyring_get(kr, (size_t)w->n));
		pd_keyring_free(kr);
	}
}

/* RFC 9580 A.4: the X25519 subkey secret, native little-endian. */
static void test_v6_secret(void **state)
{
	(void)state;
	struct pd_keyring *kr = NULL;
	char detail[256];
	assert_int_equal(add_file(&kr, "a04-v6-secret-key.gpg", NULL, detail), 1);
	const struct pd_key *k = pd__keyring_get(kr, 0);
	uint8_t want[32], sk[56];
	unhex("4d600a4f794d44775c57a26e0feefed558e9afffd6ad0d582d57fb2ba2dcedb8", want, 32);
	assert_int_equal(x_scalar(k, sk), 32);
	assert_memory_equal(sk, want, 32);
	assert_int_equal(k->q_len, 32);
	pd_keyring_free(kr);
}

static void test_passphrases(void **state)
{
	(void)state;
	const char *files[] = { "rsa2048-protected.gpg", "cv25519-protected.gpg", "elg-protected.gpg",
	                        "rsa2048-stub.gpg" };
	for (size_t i = 0; i < 4; i++) {
		struct pd_keyring *kr = NULL;
		char detail[256];
		assert_int_equal(add_file(&kr, files[i], NULL, detail), PD_ENEEDPASS);
		assert_non_null(strstr(detail, "no passphrase"));
		assert_int_equal(add_file(&kr, files[i], "wrong", detail), PD_EBADPASS);
		assert_non_null(strstr(detail, "wrong passphrase"));
		assert_int_equal(add_file(&kr, files[i], "", detail), PD_EBADPASS);
		/* all or nothing: nothing was added by the failed calls */
		assert_int_equal(pd_keyring_count(kr), 0);
		assert_true(add_file(&kr, files[i], PASS, detail) > 0);
		pd_keyring_free(kr);
	}
	/* An unprotected key ignores a passphrase. */
	struct pd_keyring *kr = NULL;
	assert_int_equal(add_file(&kr, "cv25519.gpg", "whatever", NULL), 1);
	pd_keyring_free(kr);
}

static void test_no_secret(void **state)
{
	(void)state;
	struct pd_keyring *kr = NULL;
	char detail[256];
	assert_int_equal(add_file(&kr, "rsa2048-public.gpg", NULL, detail), PD_ENOSECRET);
	assert_int_equal(add_file(&kr, "a03-v6-certificate.gpg", NULL, detail), PD_ENOSECRET);
	assert_int_equal(pd_keyring_add(kr, (const uint8_t *)"", 0, NULL, 0, detail, sizeof(detail)), PD_ENOSECRET);
	const uint8_t junk[] = "hello world, not a key";
	assert_int_equal(pd_keyring_add(kr, junk, sizeof(junk), NULL, 0, detail, sizeof(detail)), PD_ENOTPGP);

	/* rsa2048-stub.gpg cut before the secret subkey: only the gnu-dummy
	 * primary remains. */
	size_t len;
	uint8_t *buf = load("rsa2048-stub.gpg", &len);
	size_t off = 0, cut = 0;
	while (off < len) { /* old-format headers, as gpg writes them */
		unsigned lt = buf[off] & 3, tag = (buf[off] >> 2) & 15;
		size_t nl = (size_t)1 << lt, plen = 0;
		assert_true((buf[off] & 0xC0) == 0x80 && lt < 3);
		for (size_t i = 0; i < nl; i++)
			plen = (plen << 8) | buf[off + 1 + i];
		if (tag == 7) {
			cut = off;
			break;
		}
		off += 1 + nl + plen;
	}
	assert_true(cut > 0);
	assert_int_equal(pd_keyring_add(kr, buf, cut, PASS, strlen(PASS), detail, sizeof(detail)), PD_ENOSECRET);
	assert_string_equal(detail, "no usable secret decryption key: key E05337ED09CD811F023D99072DE66863842B0FB4: "
	                            "key flags do not allow encryption (certify, sign)");
	free(buf);
	assert_int_equal(pd_keyring_count(kr), 0);
	pd_keyring_free(kr);
}

/* Armored input: one block with two keys (gpg --armor --export-secret-keys
 * of two keys), the RFC's v6 block, and blocks concatenated. */
static void test_armored(void **state)
{
	(void)state;
	struct pd_keyring *kr = NULL;
	char detail[256];
	int r = add_file(&kr, "rsa-cv-protected.asc", PASS, detail);
	if (r != 2)
		fail_msg("%d %s", r, detail);
	assert_int_equal(add_file(&kr, "a04-v6-secret-key.asc", NULL, detail), 1);
	assert_int_equal(add_file(&kr, "a03-v6-certificate.asc", NULL, detail), PD_ENOSECRET);
	assert_int_equal(add_file(&kr, "rsa-cv-protected.asc", "bad", detail), PD_EBADPASS);
	assert_int_equal(pd_keyring_count(kr), 3);
	struct pd_keyinfo ki;
	assert_int_equal(pd_keyring_info(kr, 1, &ki), 0);
	assert_fpr(ki.fpr, 20, "8140F323EA3CFB14A8CCF26A756A26217CF25D80");
	assert_int_equal(pd_keyring_info(kr, 2, &ki), 0);
	assert_fpr(ki.fpr, 32, "12C83F1E706F6308FE151A417743A1F033790E93E9978488D1DB378DA9930885");
	pd_keyring_free(kr);

	size_t l1, l2;
	uint8_t *a = load("a04-v6-secret-key.asc", &l1), *b = load("rsa-cv-protected.asc", &l2);
	uint8_t *both = malloc(l1 + l2 + 1);
	memcpy(both, a, l1);
	both[l1] = '\n';
	memcpy(both + l1 + 1, b, l2);
	assert_int_equal(pd_keyring_new(&kr, PD_RSA_DEFAULT), 0);
	r = pd_keyring_add(kr, both, l1 + l2 + 1, PASS, strlen(PASS), detail, sizeof(detail));
	if (r != 3)
		fail_msg("%d %s", r, detail);
	pd_keyring_free(kr);
	/* every truncation of the armored v6 key: an error or the key, never a crash */
	for (size_t cut = 1; cut < l1; cut++) {
		uint8_t *p = malloc(cut);
		memcpy(p, a, cut);
		assert_int_equal(pd_keyring_new(&kr, PD_RSA_DEFAULT), 0);
		r = pd_keyring_add(kr, p, cut, NULL, 0, detail, sizeof(detail));
		assert_true(r < 0 || r == 1);
		pd_keyring_free(kr);
		free(p);
	}
	free(both);
	free(a);
	free(b);
}

static void test_several_and_duplicates(void **state)
{
	(void)state;
	const char *files[] = { "rsa2048.gpg", "cv25519.gpg", "p256.gpg", "elg.gpg", "a04-v6-secret-key.gpg" };
	uint8_t *all = NULL;
	size_t total = 0;
	for (size_t i = 0; i < 5; i++) {
		size_t len;
		uint8_t *b = load(files[i], &len);
		all = realloc(all, total + len);
		assert_non_null(all);
		memcpy(all + total, b, len);
		total += len;
		free(b);
	}
	struct pd_keyring *kr;
	char detail[256];
	assert_int_equal(pd_keyring_new(&kr, PD_RSA_GCRYPT), 0);
	assert_int_equal(pd_keyring_add(kr, all, total, NULL, 0, detail, sizeof(detail)), 5);
	/* load order is kept */
	struct pd_keyinfo ki;
	assert_int_equal(pd_keyring_info(kr, 4, &ki), 0);
	assert_int_equal(ki.version, 6);
	assert_int_equal(pd_keyring_info(kr, 3, &ki), 0);
	assert_int_equal(ki.pk_algo, 16);
	/* the same keys again: nothing new, not an error */
	assert_int_equal(pd_keyring_add(kr, all, total, NULL, 0, detail, sizeof(detail)), 0);
	assert_int_equal(pd_keyring_count(kr), 5);
	free(all);
	pd_keyring_free(kr);
}

/* Append a User ID packet (new format) to b at *len. */
static void put_uid(uint8_t *b, size_t *len, const char *uid)
{
	size_t n = strlen(uid);
	assert_true(n < 192);
	b[(*len)++] = 0xC0 | 13;
	b[(*len)++] = (uint8_t)n;
	memcpy(b + *len, uid, n);
	*len += n;
}

/* The addresses a key is bound to (pd_msg_bind): its certificate's User
 * IDs, wherever they stand before the next primary key, lowercased, each
 * once; not a User ID that is no address.  And what a binding value is. */
static void test_addresses(void **state)
{
	(void)state;
	const char *files[] = { "rsa2048.gpg", "cv25519.gpg", "a04-v6-secret-key.gpg" };
	uint8_t *all = malloc(3 << 16);
	size_t total = 0;
	assert_non_null(all);
	for (size_t i = 0; i < 3; i++) {
		size_t len;
		uint8_t *b = load(files[i], &len);
		memcpy(all + total, b, len);
		total += len;
		free(b);
		if (i == 1) {
			/* after cv25519's subkey, still its certificate */
			put_uid(all, &total, "Second <CV2@Test.EXAMPLE>");
			put_uid(all, &total, "bare@Example.org");
			put_uid(all, &total, "No address");
			put_uid(all, &total, "Two ats <a@@b>");
			put_uid(all, &total, "<x@y> then <last@z>");
			put_uid(all, &total, "again <cv@TEST>");
			put_uid(all, &total, "<@nolocal>");
			put_uid(all, &total, "<sp ace@x>");
		}
	}
	struct pd_keyring *kr;
	char detail[256];
	const char *a;
	assert_int_equal(pd_keyring_new(&kr, PD_RSA_GCRYPT), 0);
	assert_int_equal(pd_keyring_add(kr, all, total, NULL, 0, detail, sizeof(detail)), 3);
	size_t n = pd_keyring_addresses(kr, 0, &a);
	assert_int_equal(n, sizeof("rsa@test"));
	assert_string_equal(a, "rsa@test");
	static const char cv[] = "cv@test\0cv2@test.example\0bare@example.org\0last@z";
	n = pd_keyring_addresses(kr, 1, &a);
	assert_int_equal(n, sizeof(cv));
	assert_memory_equal(a, cv, sizeof(cv));
	assert_int_equal(pd_keyring_addresses(kr, 2, &a), 0);
	assert_string_equal(a, "");
	assert_int_equal(pd_keyring_addresses(kr, 3, &a), 0);

	const struct pd_key *rsa = pd__keyring_get(kr, 0), *x = pd__keyring_get(kr, 1), *v6 = pd__keyring_get(kr, 2);
	assert_true(pd_key_bound(rsa, "", 0));
	assert_true(pd_key_bound(v6, "", 0));
	assert_true(pd_key_bound(rsa, "rsa@test", 1));
	assert_true(pd_key_bound(rsa, "@test", 1));
	assert_false(pd_key_bound(rsa, "cv@test", 1));
	assert_false(pd_key_bound(rsa, "@est", 1));
	assert_false(pd_key_bound(rsa, "sa@test", 1));
	assert_false(pd_key_bound(v6, "@test", 1));
	/* several values: bound to every one */
	assert_true(pd_key_bound(x, "cv@test\0@example.org\0last@z", 3));
	assert_false(pd_key_bound(x, "cv@test\0rsa@test", 2));
	assert_false(pd_key_bound(rsa, "rsa@test\0cv@test", 2));

	char out[PD_ADDRESS_MAX + 1], big[PD_ADDRESS_MAX + 2];
	assert_int_equal(pd_address_norm("A@B", 3, false, out), 3);
	assert_string_equal(out, "a@b");
	assert_int_equal(pd_address_norm("@B.C", 4, true, out), 4);
	assert_string_equal(out, "@b.c");
	assert_int_equal(pd_address_norm("@b", 2, false, out), 0);
	assert_int_equal(pd_address_norm("a@", 2, true, out), 0);
	assert_int_equal(pd_address_norm("ab", 2, true, out), 0);
	assert_int_equal(pd_address_norm("a@b@c", 5, true, out), 0);
	assert_int_equal(pd_address_norm("a b@c", 5, true, out), 0);
	assert_int_equal(pd_address_norm("a\n@c", 4, true, out), 0);
	assert_int_equal(pd_address_norm("<a@c>", 5, true, out), 0);
	assert_int_equal(pd_address_norm("a@\x7f", 3, true, out), 0);
	memset(big, 'a', sizeof(big));
	big[1] = '@';
	assert_int_equal(pd_address_norm(big, PD_ADDRESS_MAX, true, out), PD_ADDRESS_MAX);
	assert_int_equal(pd_address_norm(big, PD_ADDRESS_MAX + 1, true, out), 0);
	assert_int_equal(pd_bind_check("@example.org", 12), 0);
	assert_int_equal(pd_bind_check("example.org", 11), -EINVAL);
	assert_int_equal(pd_bind_check(NULL, 0), -EINVAL);
	/* bound before any input: the PKESKs past max_esk are kept by it */
	struct pd_msg *m;
	struct pd_limits lim;
	size_t used = 0;
	pd_limits_default(&lim);
	assert_int_equal(pd_msg_new(&m, &lim), 0);
	assert_int_equal(pd_msg_bind(m, "a@b", 3), 0);
	assert_int_equal(pd_msg_write(m, (const uint8_t *)"\xc1\x05\x03", 3, &used), 0);
	assert_int_equal(pd_msg_bind(m, "c@d", 3), PD_EUSAGE);
	pd_msg_free(m, NULL);
	free(all);
	pd_keyring_free(kr);
}

/* pd_keyring_merge: rings filled apart (as the daemon's load threads do)
 * and merged in order make the ring that adding the files one after
 * another makes: same keys, same order, duplicates dropped (the first
 * stays), and the key-ID index finds every key. */
static void test_merge(void **state)
{
	(void)state;
	const char *files[] = { "rsa2048.gpg", "cv25519.gpg", "p256.gpg", "cv25519-protected.gpg", "elg.gpg",
	                        "a04-v6-secret-key.gpg", "rsa2048-protected.gpg" };
	const int fresh[] = { 1, 1, 1, 0, 1, 1, 0 }; /* the protected ones repeat earlier keys */
	struct pd_keyring *seq = NULL, *kr = NULL, *part[7];
	char detail[256];
	int r;

	for (size_t i = 0; i < 7; i++) {
		r = add_file(&seq, files[i], PASS, detail);
		assert_int_equal(r, fresh[i]);
		part[i] = NULL;
		assert_int_equal(add_file(&part[i], files[i], PASS, detail), 1);
	}
	new_ring(&kr);
	for (size_t i = 0; i < 7; i++) {
		r = pd_keyring_merge(kr, part[i], detail, sizeof(detail));
		assert_int_equal(r, fresh[i]);
	}
	assert_int_equal(pd_keyring_count(kr), pd_keyring_count(seq));
	assert_int_equal(pd_keyring_count(kr), 5);
	for (size_t i = 0; i < pd_keyring_count(kr); i++) {
		struct pd_keyinfo a, b;
		assert_int_equal(pd_keyring_info(kr, i, &a), 0);
		assert_int_equal(pd_keyring_info(seq, i, &b), 0);
		assert_int_equal(a.fpr_len, b.fpr_len);
		assert_memory_equal(a.fpr, b.fpr, a.fpr_len);
		const struct pd_key *k = pd__keyring_by_keyid(kr, a.keyid, 0);
		assert_ptr_equal(k, pd__keyring_get(kr, i));
		assert_null(pd__keyring_by_keyid(kr, a.keyid, 1));
	}
	/* the same file again, after the merges: nothing new */
	assert_int_equal(add_file(&kr, "p256.gpg", NULL, detail), 0);
	/* rings of different RSA backends do not mix; nothing moves */
	struct pd_keyring *o = NULL, *g = NULL;
	assert_int_equal(pd_keyring_new(&o, PD_RSA_OPENSSL), 0);
	assert_int_equal(pd_keyring_new(&g, PD_RSA_GCRYPT), 0);
	assert_int_equal(add_file(&g, "rsa2048.gpg", NULL, detail), 1);
	assert_int_equal(pd_keyring_merge(o, g, detail, sizeof(detail)), -EINVAL);
	assert_int_equal(pd_keyring_count(g), 1);
	assert_int_equal(pd_keyring_merge(o, o, detail, sizeof(detail)), -EINVAL);
	assert_int_equal(pd_keyring_merge(o, NULL, detail, sizeof(detail)), -EINVAL);
	pd_keyring_free(g);
	/* nor do rings of different ECDH backends */
	struct pd_keyring *x = NULL;
	assert_int_equal(pd_keyring_set_ecdh_backend(o, PD_ECDH_OPENSSL), 0);
	assert_int_equal(add_file(&x, "cv25519.gpg", NULL, detail), 1); /* a libgcrypt ECDH ring */
	assert_int_equal(pd_keyring_merge(o, x, detail, sizeof(detail)), -EINVAL);
	assert_int_equal(pd_keyring_count(x), 1);
	pd_keyring_free(x);
	pd_keyring_free(o);
	pd_keyring_free(kr);
	pd_keyring_free(seq);
}

/* Where the body of the first subkey packet (tag 7) of a key file starts. */
static size_t subkey_body(const uint8_t *buf, size_t len)
{
	size_t off = 0;
	while (off + 2 <= len) {
		uint8_t ctb = buf[off], tag = ctb & 0x40 ? ctb & 0x3F : (ctb >> 2) & 15;
		size_t hl, bl;
		if (ctb & 0x40) {
			uint8_t o = buf[off + 1];
			hl = o < 192 ? 2 : o < 224 ? 3 : 6;
			bl = o < 192 ? o : o < 224 ? ((size_t)(o - 192) << 8) + buf[off + 2] + 192
			                           : (size_t)buf[off + 2] << 24 | buf[off + 3] << 16 | buf[off + 4] << 8 | buf[off + 5];
		} else {
			hl = 1 + ((size_t)1 << (ctb & 3));
			bl = 0;
			for (size_t i = 1; i < hl; i++)
				bl = bl << 8 | buf[off + i];
		}
		if (tag == 7)
			return off + hl;
		off += hl + bl;
	}
	fail_msg("no subkey packet");
	return 0;
}

/* A new creation time (after the version octet): a new fingerprint, the
 * same secret. */
static void set_created(uint8_t *buf, size_t sub, uint32_t t)
{
	buf[sub + 1] = (uint8_t)(t >> 24);
	buf[sub + 2] = (uint8_t)(t >> 16);
	buf[sub + 3] = (uint8_t)(t >> 8);
	buf[sub + 4] = (uint8_t)t;
}

/* Thousands of keys: the duplicate check goes through the key-ID index
 * (it was a scan of the ring, N^2/2 fingerprint comparisons for N keys),
 * and the ring holds more than the 4096 keys it used to cap at.  The keys
 * are one cv25519 key file whose creation time is rewritten: each time a
 * new fingerprint, the same secret. */
static void test_many(void **state)
{
	(void)state;
	size_t len;
	uint8_t *buf = load("cv25519.gpg", &len);
	struct pd_keyring *kr;
	char detail[256];
	const size_t n = 6000;

	/* cv25519.gpg: the Ed25519 primary key packet, a user ID, its
	 * self-signature, then the cv25519 subkey with its binding. */
	size_t sub = subkey_body(buf, len);
	assert_int_equal(pd_keyring_new(&kr, PD_RSA_DEFAULT), 0);
	for (size_t i = 0; i < n; i++) {
		set_created(buf, sub, 1262304000u + (uint32_t)i * 3600u);
		int r = pd_keyring_add(kr, buf, len, NULL, 0, detail, sizeof(detail));
		if (r != 1)
			fail_msg("key %zu: %d (%s)", i, r, detail);
	}
	assert_int_equal(pd_keyring_count(kr), n);
	/* the same again: all duplicates, found through the index */
	for (size_t i = 0; i < n; i += 97) {
		set_created(buf, sub, 1262304000u + (uint32_t)i * 3600u);
		assert_int_equal(pd_keyring_add(kr, buf, len, NULL, 0, detail, sizeof(detail)), 0);
	}
	assert_int_equal(pd_keyring_count(kr), n);
	for (size_t i = 0; i < n; i += 13) {
		struct pd_keyinfo ki;
		assert_int_equal(pd_keyring_info(kr, i, &ki), 0);
		assert_int_equal(ki.created, 1262304000u + (uint32_t)i * 3600u);
		assert_ptr_equal(pd__keyring_by_keyid(kr, ki.keyid, 0), pd__keyring_get(kr, i));
	}
	free(buf);
	pd_keyring_free(kr);
}

/* libgcrypt's secure pool: its allocator walks every block on each
 * allocation, so long-lived key secrets there slow every message down with
 * the number of keys.  The count of its blocks in use, from its own stats
 * line ("secmem usage: USED/TOTAL bytes in N blocks"). */
static unsigned secmem_blocks_seen;
static void secmem_log(void *opaque, int level, const char *fmt, va_list ap)
{
	(void)opaque;
	(void)level;
	char line[256];
	unsigned used, n;
	unsigned long total;
	vsnprintf(line, sizeof(line), fmt, ap);
	const char *p = strpbrk(line, "0123456789");
	if (strstr(line, "secmem usage") && p && sscanf(p, "%u/%lu bytes in %u blocks", &used, &total, &n) == 3)
		secmem_blocks_seen = n;
}

static unsigned secmem_blocks(void)
{
	secmem_blocks_seen = ~0u;
	gcry_set_log_handler(secmem_log, NULL);
	gcry_control(GCRYCTL_DUMP_SECMEM_STATS);
	gcry_set_log_handler(NULL, NULL);
	assert_int_not_equal(secmem_blocks_seen, ~0u);
	return secmem_blocks_seen;
}

/* n distinct keys from file: its first subkey (tag 7) with creation times
 * one hour apart, added to kr. */
static void add_copies(struct pd_keyring *kr, const char *file, size_t n)
{
	size_t len;
	uint8_t *buf = load(file, &len);
	size_t sub = subkey_body(buf, len);
	char detail[256];
	for (size_t i = 0; i < n; i++) {
		set_created(buf, sub, 1262304000u + (uint32_t)i * 3600u);
		int r = pd_keyring_add(kr, buf, len, NULL, 0, detail, sizeof(detail));
		if (r != 1)
			fail_msg("%s copy %zu: %d (%s)", file, i, r, detail);
	}
	free(buf);
}

/* With the OpenSSL backends (the defaults) a key leaves nothing in
 * libgcrypt's secure pool: 600 RSA-2048 and 600 cv25519 keys hold no more
 * of its blocks than an empty ring.  (Before: six blocks per RSA key, two
 * per cv25519 key.)  The libgcrypt RSA backend keeps its keys there; a
 * cv25519 key leaves with either ECDH backend (its scalar is OpenSSL's on
 * both: pgp/ecdh.c), so 20 RSA and 20 cv25519 keys hold five blocks per
 * RSA key. */
static void test_keys_leave_gcrypt_pool(void **state)
{
	(void)state;
	struct pd_keyring *kr;
	const unsigned before = secmem_blocks();

	assert_int_equal(pd_keyring_new(&kr, PD_RSA_OPENSSL), 0);
	assert_int_equal(pd_keyring_set_ecdh_backend(kr, PD_ECDH_OPENSSL), 0);
	add_copies(kr, "rsa2048.gpg", 600);
	add_copies(kr, "cv25519.gpg", 600);
	assert_int_equal(pd_keyring_count(kr), 1200);
	unsigned held = secmem_blocks();
	print_message("libgcrypt secure blocks: %u before, %u with 1200 keys (OpenSSL backends)\n", before, held);
	assert_true(held <= before + 4);
	pd_keyring_free(kr);

	assert_int_equal(pd_keyring_new(&kr, PD_RSA_GCRYPT), 0);
	assert_int_equal(pd_keyring_set_ecdh_backend(kr, PD_ECDH_GCRYPT), 0);
	add_copies(kr, "rsa2048.gpg", 20);
	add_copies(kr, "cv25519.gpg", 20);
	held = secmem_blocks();
	print_message("libgcrypt secure blocks: %u with 40 keys (libgcrypt backends)\n", held);
	assert_true(held >= before + 40);
	pd_keyring_free(kr);
	assert_int_equal(pd_keyring_new(&kr, PD_RSA_GCRYPT), 0);
	assert_int_equal(pd_keyring_set_ecdh_backend(kr, PD_ECDH_GCRYPT), 0);
	add_copies(kr, "cv25519.gpg", 20);
	assert_true(secmem_blocks() <= before + 4);
	pd_keyring_free(kr);
	assert_true(secmem_blocks() <= before + 4);
}

/* ------------------------------------------------------------------ */
/* Corruption: every prefix, and every single-octet change. */

static void test_truncation(void **state)
{
	(void)state;
	const char *files[] = { "rsa2048.gpg", "cv25519.gpg", "p256.gpg", "elg.gpg", "a04-v6-secret-key.gpg" };
	const int full[] = { 1, 1, 1, 1, 1 };
	for (size_t f = 0; f < 5; f++) {
		size_t len;
		uint8_t *buf = load(files[f], &len);
		struct pd_keyring *kr;
		assert_int_equal(pd_keyring_new(&kr, PD_RSA_DEFAULT), 0);
		for (size_t cut = 1; cut < len; cut++) {
			/* a copy of exactly cut octets, so ASan sees any over-read */
			uint8_t *p = malloc(cut);
			memcpy(p, buf, cut);
			char detail[256];
			int r = pd_keyring_add(kr, p, cut, NULL, 0, detail, sizeof(detail));
			free(p);
			/* cut at a packet boundary may leave a valid key file */
			assert_true(r < 0 || r <= full[f]);
			if (r < 0)
				assert_true(detail[0] != 0);
			pd_keyring_free(kr);
			assert_int_equal(pd_keyring_new(&kr, PD_RSA_DEFAULT), 0);
		}
		pd_keyring_free(kr);
		free(buf);
	}
}

static void test_bitflips(void **state)
{
	(void)state;
	/* every octet of the small files; every 5th of the RSA/ElGamal ones
	 * (their private-key checks are slower) */
	const char *files[] = { "cv25519.gpg", "p256.gpg", "a04-v6-secret-key.gpg", "elg.gpg", "rsa2048.gpg" };
	for (size_t f = 0; f < 5; f++) {
		size_t len;
		uint8_t *buf = load(files[f], &len);
		for (size_t i = 0; i < len; i += f < 3 ? 1 : 5) {
			for (int v = 0; v < 2; v++) {
				uint8_t *p = malloc(len);
				memcpy(p, buf, len);
				p[i] = v ? (uint8_t)(p[i] ^ 0x01) : 0xFF;
				struct pd_keyring *kr;
				assert_int_equal(pd_keyring_new(&kr, PD_RSA_DEFAULT), 0);
				int r = pd_keyring_add(kr, p, len, NULL, 0, NULL, 0);
				/* 2 for rsa2048.gpg: a change to the primary's
				 * self-signature can drop its key flags (they are
				 * read, not verified), making it a flagless key */
				assert_true(r <= (f == 4 ? 2 : 1));
				pd_keyring_free(kr);
				free(p);
			}
		}
		free(buf);
	}
}

/* ------------------------------------------------------------------ */
/* Re-protection: take an unprotected secret key packet and encrypt its
 * secret with each S2K usage, written from RFC 9580 §5.5.3 / §3.7.2.1. */

struct pkt {
	size_t off, hlen, len; /* header offset, header length, body length */
	uint8_t tag;
};

static int next_pkt(const uint8_t *b, size_t len, size_t off, struct pkt *p)
{
	if (off >= len)
		return 0;
	p->off = off;
	if (b[off] & 0x40) {
		p->tag = b[off] & 0x3F;
		uint8_t o = b[off + 1];
		if (o < 192) { p->len = o; p->hlen = 2; }
		else if (o < 224) { p->len = ((size_t)(o - 192) << 8) + b[off + 2] + 192; p->hlen = 3; }
		else { p->len = pd_be32(b + off + 2); p->hlen = 6; }
	} else {
		p->tag = (b[off] >> 2) & 15;
		size_t nl = (size_t)1 << (b[off] & 3);
		p->len = 0;
		for (size_t i = 0; i < nl; i++)
			p->len = (p->len << 8) | b[off + 1 + i];
		p->hlen = 1 + nl;
	}
	return 1;
}

/* Length of the public part of a v4 ECDH (cv25519) or v6 key body. */
static size_t pub_len(const uint8_t *b)
{
	if (b[0] == 6)
		return 10 + pd_be32(b + 6);
	assert_int_equal(b[5], 18);
	size_t o = 6 + 1 + b[6];
	o += 2 + (pd_be16(b + o) + 7) / 8;
	return o + 1 + b[o];
}

static void cfb(int algo, const uint8_t *key, size_t klen, const uint8_t *iv, uint8_t *buf, size_t n)
{
	gcry_cipher_hd_t h;
	assert_int_equal(gcry_cipher_open(&h, algo, GCRY_CIPHER_MODE_CFB, 0), 0);
	assert_int_equal(gcry_cipher_setkey(h, key, klen), 0);
	assert_int_equal(gcry_cipher_setiv(h, iv, 16), 0);
	assert_int_equal(gcry_cipher_encrypt(h, buf, n, NULL, 0), 0);
	gcry_cipher_close(h);
}

/* Build a key file: the input with the secret subkey packet replaced by
 * one protected with usage (and aead for 253). */
static uint8_t *reprotect(const uint8_t *in, size_t inlen, uint8_t usage, uint8_t aead, size_t *ret_len,
                          size_t *ret_end)
{
	struct pkt p = { 0 };
	size_t off = 0;
	while (next_pkt(in, inlen, off, &p) && p.tag != 7)
		off = p.off + p.hlen + p.len;
	assert_int_equal(p.tag, 7);
	const uint8_t *body = in + p.off + p.hlen;
	uint8_t ver = body[0];
	size_t publen = pub_len(body);
	assert_int_equal(body[publen], 0); /* unprotected */
	const uint8_t *sec = body + publen + 1;
	size_t seclen = p.len - publen - 1 - (ver == 4 ? 2 : 0); /* without csum16 */

	uint8_t key[32], salt[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, iv[16] = { 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6 };
	uint8_t s2k[11] = { 3, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0x10 }; /* iterated SHA-256, 2048 octets */
	size_t s2klen = 11;
	uint8_t cipher = 9; /* AES-256 */
	size_t keylen = 32;
	if (usage < 253) { /* legacy: cipher id, simple MD5 S2K */
		cipher = usage;
		keylen = 16;
		assert_int_equal(gcry_kdf_derive(PASS, strlen(PASS), GCRY_KDF_SIMPLE_S2K, GCRY_MD_MD5, NULL, 0, 0,
		                                 keylen, key), 0);
	} else {
		assert_int_equal(gcry_kdf_derive(PASS, strlen(PASS), GCRY_KDF_ITERSALTED_S2K, GCRY_MD_SHA256, salt, 8,
		                                 2048, keylen, key), 0);
	}
	int galgo = cipher == 7 ? GCRY_CIPHER_AES128 : GCRY_CIPHER_AES256;

	uint8_t *out = malloc(inlen + 256), *q;
	memcpy(out, in, p.off);
	q = out + p.off;
	uint8_t *nb = malloc(p.len + 128), *w = nb;
	memcpy(w, body, publen);
	w += publen;
	*w++ = usage;
	size_t ivlen = usage == 253 ? (aead == 1 ? 16 : aead == 2 ? 15 : 12) : 16;
	if (ver == 6)
		*w++ = (uint8_t)((usage == 253 ? 2 : 1) + 1 + s2klen + ivlen);
	if (usage >= 253) {
		*w++ = cipher;
		if (usage == 253)
			*w++ = aead;
		if (ver == 6)
			*w++ = (uint8_t)s2klen;
		memcpy(w, s2k, s2klen);
		w += s2klen;
	}
	memcpy(w, iv, ivlen);
	w += ivlen;
	memcpy(w, sec, seclen);
	if (usage == 253) {
		uint8_t kek[32], info[4] = { 0xC7, ver, cipher, aead };
		assert_int_equal(pd_hkdf(GCRY_MD_SHA256, NULL, 0, key, keylen, info, 4, kek, 32), 0);
		gcry_cipher_hd_t h;
		int mode = aead == 1 ? GCRY_CIPHER_MODE_EAX : aead == 2 ? GCRY_CIPHER_MODE_OCB : GCRY_CIPHER_MODE_GCM;
		assert_int_equal(gcry_cipher_open(&h, galgo, mode, 0), 0);
		assert_int_equal(gcry_cipher_setkey(h, kek, 32), 0);
		assert_int_equal(gcry_cipher_setiv(h, iv, ivlen), 0);
		uint8_t *ad = malloc(publen + 1);
		ad[0] = 0xC7;
		memcpy(ad + 1, body, publen);
		assert_int_equal(gcry_cipher_authenticate(h, ad, publen + 1), 0);
		free(ad);
		assert_int_equal(gcry_cipher_final(h), 0);
		assert_int_equal(gcry_cipher_encrypt(h, w, seclen, NULL, 0), 0);
		assert_int_equal(gcry_cipher_gettag(h, w + seclen, 16), 0);
		gcry_cipher_close(h);
		w += seclen + 16;
	} else {
		size_t n = seclen;
		if (usage == 254) {
			gcry_md_hash_buffer(GCRY_MD_SHA1, w + seclen, sec, seclen);
			n += 20;
		} else {
			uint32_t s = 0;
			for (size_t i = 0; i < seclen; i++)
				s += sec[i];
			w[seclen] = (uint8_t)(s >> 8);
			w[seclen + 1] = (uint8_t)s;
			n += 2;
		}
		cfb(galgo, key, keylen, iv, w, n);
		w += n;
	}
	size_t nlen = (size_t)(w - nb);
	*q++ = 0xC7;
	*q++ = 0xFF;
	pd_put_be32(q, (uint32_t)nlen);
	q += 4;
	memcpy(q, nb, nlen);
	q += nlen;
	*ret_end = (size_t)(q - out);
	size_t rest = inlen - (p.off + p.hlen + p.len);
	memcpy(q, in + p.off + p.hlen + p.len, rest);
	q += rest;
	free(nb);
	*ret_len = (size_t)(q - out);
	return out;
}

static void test_s2k_usages(void **state)
{
	(void)state;
	const struct { const char *file; uint8_t usage, aead; } cases[] = {
		{ "cv25519.gpg", 254, 0 }, { "cv25519.gpg", 255, 0 }, { "cv25519.gpg", 7, 0 },
		{ "cv25519.gpg", 253, 1 }, { "cv25519.gpg", 253, 2 }, { "cv25519.gpg", 253, 3 },
		{ "a04-v6-secret-key.gpg", 254, 0 }, { "a04-v6-secret-key.gpg", 253, 1 },
		{ "a04-v6-secret-key.gpg", 253, 2 }, { "a04-v6-secret-key.gpg", 253, 3 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len, plen, end;
		uint8_t *in = load(cases[i].file, &len);
		uint8_t *p = reprotect(in, len, cases[i].usage, cases[i].aead, &plen, &end);
		struct pd_keyring *ref = NULL, *kr;
		char detail[256];
		assert_int_equal(add_file(&ref, cases[i].file, NULL, detail), 1);
		new_ring(&kr);
		assert_int_equal(pd_keyring_add(kr, p, plen, NULL, 0, detail, sizeof(detail)), PD_ENEEDPASS);
		assert_int_equal(pd_keyring_add(kr, p, plen, "nope", 4, detail, sizeof(detail)), PD_EBADPASS);
		int r = pd_keyring_add(kr, p, plen, PASS, strlen(PASS), detail, sizeof(detail));
		if (r != 1)
			fail_msg("%s usage %u aead %u: %d %s", cases[i].file, cases[i].usage, cases[i].aead, r, detail);
		const struct pd_key *a = pd__keyring_get(ref, 0), *b = pd__keyring_get(kr, 0);
		assert_memory_equal(a->fpr, b->fpr, a->fpr_len);
		uint8_t ska[56], skb[56];
		size_t la = x_scalar(a, ska);
		assert_int_equal(x_scalar(b, skb), la);
		assert_memory_equal(ska, skb, la);
		pd_keyring_free(kr);
		/* Last octet of the protected data (tag, SHA-1 or checksum)
		 * changed: the unlock check fails like a wrong passphrase. */
		p[end - 1] ^= 0x01;
		new_ring(&kr);
		assert_int_equal(pd_keyring_add(kr, p, plen, PASS, strlen(PASS), detail, sizeof(detail)), PD_EBADPASS);
		pd_keyring_free(kr);
		pd_keyring_free(ref);
		free(p);
		free(in);
	}
	/* v6 forbids usage 255 and raw cipher ids. */
	size_t len, plen, end;
	uint8_t *in = load("a04-v6-secret-key.gpg", &len);
	uint8_t *p = reprotect(in, len, 255, 0, &plen, &end);
	struct pd_keyring *kr;
	char detail[256];
	assert_int_equal(pd_keyring_new(&kr, PD_RSA_DEFAULT), 0);
	assert_int_equal(pd_keyring_add(kr, p, plen, PASS, strlen(PASS), detail, sizeof(detail)), PD_EMALFORMED);
	pd_keyring_free(kr);
	free(p);
	free(in);
}

/* LibrePGP v5 keys are not supported: a file of only v5 keys says so. */
/* A cv25519 subkey whose public point lacks its 0x40 prefix is malformed
 * input, skipped as such with either ECDH backend: the OpenSSL backend's
 * setup (the check of an X key since the libgcrypt check went) took it for
 * an internal error, failing the whole file instead. */
static void test_cv25519_point_prefix(void **state)
{
	(void)state;
	static const uint8_t oid[] = { 0x2B, 0x06, 0x01, 0x04, 0x01, 0x97, 0x55, 0x01, 0x05, 0x01 };
	size_t len;
	uint8_t *buf = load("cv25519.gpg", &len);
	uint8_t *at = NULL;
	for (size_t i = 0; i + sizeof(oid) + 3 <= len && !at; i++)
		if (!memcmp(buf + i, oid, sizeof(oid)))
			at = buf + i + sizeof(oid) + 2; /* past the MPI's bit count: the prefix */
	assert_non_null(at);
	assert_int_equal(*at, 0x40);
	*at = 0x41;
	for (int be = 0; be < 2; be++) {
		struct pd_keyring *kr;
		char detail[256] = "";
		assert_int_equal(pd_keyring_new(&kr, PD_RSA_DEFAULT), 0);
		assert_int_equal(pd_keyring_set_ecdh_backend(kr, be ? PD_ECDH_GCRYPT : PD_ECDH_OPENSSL), 0);
		int r = pd_keyring_add(kr, buf, len, NULL, 0, detail, sizeof(detail));
		if (r != PD_EMALFORMED)
			fail_msg("%s backend: %d (%s): %s", be ? "libgcrypt" : "OpenSSL", r, pd_strerror(r), detail);
		pd_keyring_free(kr);
	}
	free(buf);
}

static void test_v5_rejected(void **state)
{
	(void)state;
	size_t len;
	uint8_t *buf = load("a04-v6-secret-key.gpg", &len);
	struct pkt p = { 0 };
	int n = 0;
	for (size_t off = 0; next_pkt(buf, len, off, &p); off = p.off + p.hlen + p.len)
		if (p.tag == 5 || p.tag == 7) {
			buf[p.off + p.hlen] = 5;
			n++;
		}
	assert_int_equal(n, 2);
	struct pd_keyring *kr;
	char detail[256];
	assert_int_equal(pd_keyring_new(&kr, PD_RSA_DEFAULT), 0);
	assert_int_equal(pd_keyring_add(kr, buf, len, NULL, 0, detail, sizeof(detail)), PD_EUNSUPPORTED);
	assert_non_null(strstr(detail, "v5"));
	pd_keyring_free(kr);
	free(buf);
}

/* A secret that does not belong to its public key is refused. */
static void test_mismatch(void **state)
{
	(void)state;
	const char *files[] = { "cv25519.gpg", "p256.gpg", "elg.gpg", "rsa2048.gpg", "a04-v6-secret-key.gpg" };
	for (size_t f = 0; f < 5; f++) {
		size_t len;
		uint8_t *buf = load(files[f], &len);
		struct pkt p = { 0 };
		size_t off = 0, last7 = 0;
		while (next_pkt(buf, len, off, &p)) {
			if (p.tag == 7)
				last7 = p.off;
			off = p.off + p.hlen + p.len;
		}
		assert_true(next_pkt(buf, len, last7, &p));
		uint8_t *body = buf + p.off + p.hlen;
		size_t v4 = body[0] == 4;
		/* Change the first octet of the secret's first MPI body (RSA: d)
		 * or native secret, and fix the v4 checksum. */
		uint8_t *end = body + p.len;
		size_t seclen;
		uint8_t *sec;
		if (body[0] == 6) {
			sec = end - 32;
			seclen = 32;
		} else {
			/* find the usage octet: after the public fields */
			const uint8_t *b = body;
			size_t o = 6;
			int nmpi = b[5] == 1 ? 2 : b[5] == 16 ? 3 : 0;
			if (b[5] == 18) {
				o += 1 + b[6];
				o += 2 + (pd_be16(b + o) + 7) / 8;
				o += 1 + b[o];
			}
			for (int i = 0; i < nmpi; i++)
				o += 2 + (pd_be16(b + o) + 7) / 8;
			assert_int_equal(b[o], 0);
			sec = body + o + 1;
			seclen = (size_t)(end - 2 - sec);
		}
		size_t at = body[0] == 6 ? 5 : 2 + (files[f][0] == 'r' ? 5 : 3);
		assert_true(at < seclen);
		sec[at] ^= 0x40;
		if (v4) {
			uint32_t s = 0;
			for (size_t i = 0; i < seclen; i++)
				s += sec[i];
			end[-2] = (uint8_t)(s >> 8);
			end[-1] = (uint8_t)s;
		}
		struct pd_keyring *kr;
		char detail[256];
		assert_int_equal(pd_keyring_new(&kr, PD_RSA_DEFAULT), 0);
		int r = pd_keyring_add(kr, buf, len, NULL, 0, detail, sizeof(detail));
		if (r != PD_EMALFORMED || !strstr(detail, "does not match"))
			fail_msg("%s: %d %s", files[f], r, detail);
		pd_keyring_free(kr);
		free(buf);
	}
}

/* ------------------------------------------------------------------ */
/* Hand-made hostile parameters: must be refused, never abort libgcrypt. */

static size_t put_mpi(uint8_t *w, const uint8_t *v, size_t n)
{
	unsigned bits = 0;
	while (n && !v[0]) {
		v++;
		n--;
	}
	if (n) {
		bits = (unsigned)(8 * (n - 1));
		for (uint8_t t = v[0]; t; t >>= 1)
			bits++;
	}
	w[0] = (uint8_t)(bits >> 8);
	w[1] = (uint8_t)bits;
	memcpy(w + 2, v, n);
	return 2 + n;
}

/* v4 unprotected secret subkey packet: algo, public MPIs, secret MPIs. */
static int add_crafted(uint8_t algo, const uint8_t *const *pub, const size_t *publ, size_t npub,
                       const uint8_t *const *sec, const size_t *secl, size_t nsec, char *detail)
{
	uint8_t body[4096], pkt[4200];
	size_t o = 0;
	body[o++] = 4;
	pd_put_be32(body + o, 0x5F000000);
	o += 4;
	body[o++] = algo;
	for (size_t i = 0; i < npub; i++)
		o += put_mpi(body + o, pub[i], publ[i]);
	body[o++] = 0;
	size_t s0 = o;
	for (size_t i = 0; i < nsec; i++)
		o += put_mpi(body + o, sec[i], secl[i]);
	uint32_t cs = 0;
	for (size_t i = s0; i < o; i++)
		cs += body[i];
	body[o++] = (uint8_t)(cs >> 8);
	body[o++] = (uint8_t)cs;
	pkt[0] = 0xC7;
	pkt[1] = 0xFF;
	pd_put_be32(pkt + 2, (uint32_t)o);
	memcpy(pkt + 6, body, o);
	struct pd_keyring *kr;
	assert_int_equal(pd_keyring_new(&kr, PD_RSA_GCRYPT), 0);
	int r = pd_keyring_add(kr, pkt, o + 6, NULL, 0, detail, 256);
	pd_keyring_free(kr);
	return r;
}

static void test_hostile_params(void **state)
{
	(void)state;
	char detail[256];
	uint8_t zero[1] = { 0 }, one[1] = { 1 }, two[1] = { 2 }, three[1] = { 3 }, four[1] = { 4 };
	uint8_t big[64];
	memset(big, 0xA5, sizeof(big));
	big[63] |= 1;
	/* ElGamal with p = 0, and with p = 1 */
	{
		const uint8_t *pub[3] = { zero, two, four }, *sec[1] = { two };
		size_t pl[3] = { 1, 1, 1 }, sl[1] = { 1 };
		assert_true(add_crafted(16, pub, pl, 3, sec, sl, 1, detail) < 0);
		pub[0] = one;
		assert_true(add_crafted(16, pub, pl, 3, sec, sl, 1, detail) < 0);
		/* 512-bit odd p, x = 0 */
		const uint8_t *pub2[3] = { big, two, four }, *sec2[1] = { zero };
		size_t pl2[3] = { 64, 1, 1 };
		assert_true(add_crafted(16, pub2, pl2, 3, sec2, sl, 1, detail) < 0);
	}
	/* RSA: n = 1 * n (p = 1), and n = 0 */
	{
		const uint8_t *pub[2] = { big, three }, *sec[4] = { one, one, big, one };
		size_t pl[2] = { 64, 1 }, sl[4] = { 1, 1, 64, 1 };
		int r = add_crafted(1, pub, pl, 2, sec, sl, 4, detail);
		assert_int_equal(r, PD_EMALFORMED);
		assert_non_null(strstr(detail, "does not match"));
		sec[1] = big;
		sec[2] = one;
		sl[1] = 64;
		sl[2] = 1;
		assert_int_equal(add_crafted(1, pub, pl, 2, sec, sl, 4, detail), PD_EMALFORMED);
		pub[0] = zero;
		pl[0] = 1;
		assert_true(add_crafted(1, pub, pl, 2, sec, sl, 4, detail) < 0);
	}
}

/* ------------------------------------------------------------------ */
/* Keys that are not loaded: skipped one by one, with the reason. */

struct skips {
	int n;
	struct {
		enum pd_keyskip_kind kind;
		bool primary, has_keyid;
		uint8_t version, fpr_len;
		uint8_t fpr[32], keyid[8];
		char name[100], reason[200];
	} v[16];
};

static void record(void *ctx, const struct pd_keyskip *s)
{
	struct skips *k = ctx;
	assert_true(k->n < 16);
	assert_non_null(s->name);
	assert_non_null(s->reason);
	k->v[k->n].kind = s->kind;
	k->v[k->n].primary = s->primary;
	k->v[k->n].has_keyid = s->has_keyid;
	k->v[k->n].version = s->version;
	k->v[k->n].fpr_len = s->fpr_len;
	memcpy(k->v[k->n].fpr, s->fpr, 32);
	memcpy(k->v[k->n].keyid, s->keyid, 8);
	snprintf(k->v[k->n].name, sizeof(k->v[0].name), "%s", s->name);
	snprintf(k->v[k->n].reason, sizeof(k->v[0].reason), "%s", s->reason);
	k->n++;
}

/* Add buf with the report callback to a fresh ring; returns the result. */
static int add_report(const uint8_t *buf, size_t len, struct skips *sk, char *detail, size_t *ret_count)
{
	struct pd_keyring *kr;
	memset(sk, 0, sizeof(*sk));
	assert_int_equal(pd_keyring_new(&kr, PD_RSA_DEFAULT), 0);
	int r = pd_keyring_add_report(kr, buf, len, NULL, 0, record, sk, detail, 256);
	if (ret_count)
		*ret_count = pd_keyring_count(kr);
	pd_keyring_free(kr);
	return r;
}

static size_t new_pkt(uint8_t *out, uint8_t tag, const uint8_t *body, size_t n)
{
	out[0] = (uint8_t)(0xC0 | tag);
	out[1] = 0xFF;
	pd_put_be32(out + 2, (uint32_t)n);
	memcpy(out + 6, body, n);
	return 6 + n;
}

/* Offset of the first octet sequence needle in hay, or -1. */
static long find(const uint8_t *hay, size_t n, const uint8_t *needle, size_t m)
{
	for (size_t i = 0; i + m <= n; i++)
		if (memcmp(hay + i, needle, m) == 0)
			return (long)i;
	return -1;
}

static void hexfpr(char *out, const uint8_t *fpr, size_t n)
{
	static const char d[] = "0123456789ABCDEF";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = d[fpr[i] >> 4];
		out[2 * i + 1] = d[fpr[i] & 15];
	}
	out[2 * n] = 0;
}

/* secp256k1 (gpg 2.2.40 made it; pgpdecd has no such curve): skipped,
 * named, and the file says why nothing is usable. */
static void test_unsupported_curve(void **state)
{
	(void)state;
	size_t len, count;
	uint8_t *buf = load("secp256k1.gpg", &len);
	struct skips sk;
	char detail[256];
	assert_int_equal(add_report(buf, len, &sk, detail, &count), PD_EUNSUPPORTED);
	assert_int_equal(count, 0);
	assert_int_equal(sk.n, 2);
	assert_int_equal(sk.v[0].kind, PD_KEYSKIP_NOT_ENCRYPTION);
	assert_true(sk.v[0].primary);
	assert_string_equal(sk.v[0].reason, "signing key (ECDSA)");
	assert_int_equal(sk.v[1].kind, PD_KEYSKIP_UNSUPPORTED);
	assert_false(sk.v[1].primary);
	assert_string_equal(sk.v[1].name, "key 727A5B70033E1158BC84D9B84FFA80E880A80C66");
	assert_string_equal(sk.v[1].reason, "unsupported curve secp256k1");
	assert_string_equal(detail, "no usable secret decryption key: key 727A5B70033E1158BC84D9B84FFA80E880A80C66: "
	                            "unsupported curve secp256k1 (and 1 more key skipped)");
	/* The same curve beside usable keys: they load, it is skipped. */
	size_t l2;
	uint8_t *cv = load("cv25519.gpg", &l2);
	uint8_t *both = malloc(len + l2);
	memcpy(both, cv, l2);
	memcpy(both + l2, buf, len);
	assert_int_equal(add_report(both, len + l2, &sk, detail, &count), 1);
	assert_int_equal(count, 1);
	assert_int_equal(sk.n, 3); /* Ed25519 and ECDSA primaries, the secp256k1 subkey */
	assert_string_equal(sk.v[2].reason, "unsupported curve secp256k1");
	/* Other curve OIDs: SM2, and one nobody knows, in place of P-256's. */
	size_t pl;
	uint8_t *p256 = load("p256.gpg", &pl);
	const uint8_t oid[8] = { 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07 };
	const uint8_t sm2[8] = { 0x2A, 0x81, 0x1C, 0xCF, 0x55, 0x01, 0x82, 0x2D };
	long at = find(p256, pl, oid, 8), last = -1;
	while (at >= 0) { /* the subkey's is the last one */
		last = at;
		long nx = find(p256 + at + 1, pl - (size_t)at - 1, oid, 8);
		at = nx < 0 ? -1 : at + 1 + nx;
	}
	assert_true(last > 0);
	memcpy(p256 + last, sm2, 8);
	assert_int_equal(add_report(p256, pl, &sk, detail, NULL), PD_EUNSUPPORTED);
	assert_string_equal(sk.v[sk.n - 1].reason, "unsupported curve SM2 (1.2.156.10197.1.301)");
	p256[last + 7] = 0x7F;
	assert_int_equal(add_report(p256, pl, &sk, detail, NULL), PD_EUNSUPPORTED);
	assert_string_equal(sk.v[sk.n - 1].reason, "unsupported curve with the OID 1.2.156.10197.1.383");
	free(p256);
	free(both);
	free(cv);
	free(buf);
}

/* Versions and algorithms that are not loaded, each named. */
static void test_unsupported_versions(void **state)
{
	(void)state;
	struct skips sk;
	char detail[256];
	size_t len;
	uint8_t *rsa = load("rsa2048.gpg", &len);
	uint8_t body[2048], file[4096];
	size_t o, n;

	/* v3: RSA with the subkey's modulus; its key ID is n's low 64 bits. */
	struct pkt p = { 0 };
	size_t off = 0;
	while (next_pkt(rsa, len, off, &p) && p.tag != 7)
		off = p.off + p.hlen + p.len;
	assert_int_equal(p.tag, 7);
	const uint8_t *sub = rsa + p.off + p.hlen;
	size_t nbits = pd_be16(sub + 6), nlen = (nbits + 7) / 8;
	o = 0;
	body[o++] = 3;
	pd_put_be32(body + o, 0x40000000);
	o += 4;
	body[o++] = 0;
	body[o++] = 0;
	body[o++] = 1;
	memcpy(body + o, sub + 6, 2 + nlen + 2 + 3); /* n, e = 65537 */
	o += 2 + nlen + 5;
	body[o++] = 0;
	n = new_pkt(file, 5, body, o);
	assert_int_equal(add_report(file, n, &sk, detail, NULL), PD_EUNSUPPORTED);
	assert_int_equal(sk.n, 1);
	assert_int_equal(sk.v[0].version, 3);
	assert_int_equal(sk.v[0].fpr_len, 0);
	assert_true(sk.v[0].has_keyid);
	assert_memory_equal(sk.v[0].keyid, sub + 8 + nlen - 8, 8);
	assert_string_equal(sk.v[0].reason, "v3 key (obsolete, not supported)");
	assert_non_null(strstr(sk.v[0].name, "key ID "));

	/* v6 ML-KEM-768+X25519 (draft-ietf-openpgp-pqc algorithm 35): the
	 * public key material has a length, so the fingerprint is known. */
	o = 0;
	body[o++] = 6;
	pd_put_be32(body + o, 0x60000000);
	o += 4;
	body[o++] = 35;
	pd_put_be32(body + o, 1216);
	o += 4;
	memset(body + o, 0x5A, 1216);
	o += 1216;
	body[o++] = 0;
	memset(body + o, 0x11, 96);
	o += 96;
	n = new_pkt(file, 7, body, o);
	assert_int_equal(add_report(file, n, &sk, detail, NULL), PD_EUNSUPPORTED);
	assert_int_equal(sk.n, 1);
	assert_int_equal(sk.v[0].fpr_len, 32);
	assert_string_equal(sk.v[0].reason, "unsupported public-key algorithm 35 (ML-KEM-768+X25519)");
	uint8_t want[32];
	uint8_t *h = malloc(5 + 10 + 1216);
	h[0] = 0x9B;
	pd_put_be32(h + 1, 10 + 1216);
	memcpy(h + 5, body, 10 + 1216);
	gcry_md_hash_buffer(GCRY_MD_SHA256, want, h, 5 + 10 + 1216);
	free(h);
	assert_memory_equal(sk.v[0].fpr, want, 32);
	/* The same algorithm in a v4 packet: no length, no fingerprint. */
	body[0] = 4;
	n = new_pkt(file, 7, body, o);
	assert_int_equal(add_report(file, n, &sk, detail, NULL), PD_EUNSUPPORTED);
	assert_int_equal(sk.v[0].fpr_len, 0);
	assert_false(sk.v[0].has_keyid);
	assert_string_equal(sk.v[0].name, "the v4 key packet at offset 0");
	/* A key packet cut short inside a sound file: that packet only. */
	size_t cl;
	uint8_t *cv = load("cv25519.gpg", &cl);
	memcpy(file, cv, cl);
	const uint8_t stub[3] = { 4, 0x5F, 0 };
	n = cl + new_pkt(file + cl, 7, stub, 3);
	assert_int_equal(add_report(file, n, &sk, detail, NULL), 1);
	assert_int_equal(sk.v[sk.n - 1].kind, PD_KEYSKIP_MALFORMED);
	assert_string_equal(sk.v[sk.n - 1].reason, "malformed key packet");
	free(cv);
	free(rsa);
}

/* RFC 9580 9.2: the legacy Curve25519 OID must not be accepted in a v6
 * key.  The A.4 X25519 subkey, rewritten as ECDH with that OID (its
 * secret still matches: pgpdecd could decrypt with it, but must not). */
static void test_v6_legacy_oid_refused(void **state)
{
	(void)state;
	uint8_t native[32], pub[32], body[256], file[512];
	unhex("4d600a4f794d44775c57a26e0feefed558e9afffd6ad0d582d57fb2ba2dcedb8", native, 32);
	unhex("8693248367f9e5015db922f8f48095dda784987f2d5985b12fbad16caf5e4435", pub, 32);
	const uint8_t oid[10] = { 0x2B, 0x06, 0x01, 0x04, 0x01, 0x97, 0x55, 0x01, 0x05, 0x01 };
	size_t o = 0;
	body[o++] = 6;
	pd_put_be32(body + o, 0x60000000);
	o += 4;
	body[o++] = 18;
	size_t lenat = o;
	o += 4;
	body[o++] = 10;
	memcpy(body + o, oid, 10);
	o += 10;
	uint8_t q[33] = { 0x40 };
	memcpy(q + 1, pub, 32);
	o += put_mpi(body + o, q, 33);
	memcpy(body + o, "\x03\x01\x08\x07", 4);
	o += 4;
	pd_put_be32(body + lenat, (uint32_t)(o - lenat - 4));
	body[o++] = 0;
	uint8_t be[32];
	for (int i = 0; i < 32; i++)
		be[i] = native[31 - i];
	o += put_mpi(body + o, be, 32);
	size_t n = new_pkt(file, 7, body, o);
	struct skips sk;
	char detail[256];
	assert_int_equal(add_report(file, n, &sk, detail, NULL), PD_EUNSUPPORTED);
	assert_int_equal(sk.n, 1);
	assert_int_equal(sk.v[0].kind, PD_KEYSKIP_UNSUPPORTED);
	assert_int_equal(sk.v[0].fpr_len, 32);
	assert_string_equal(sk.v[0].reason, "v6 key with the legacy Curve25519 OID (RFC 9580 section 9.2 allows it "
	                                    "only in v4 keys; v6 keys use X25519)");
	/* The same packet as v4 (a 2-octet-less layout: no key material
	 * count) is the ordinary Curve25519Legacy key and loads. */
	uint8_t v4[256];
	size_t m = 0;
	v4[m++] = 4;
	memcpy(v4 + m, body + 1, 5);
	m += 5;
	memcpy(v4 + m, body + 10, o - 10);
	m += o - 10;
	/* v4 usage 0 ends with a checksum of the secret MPI */
	size_t sec = m - (2 + 32);
	uint32_t cs = 0;
	for (size_t i = sec; i < m; i++)
		cs += v4[i];
	v4[m++] = (uint8_t)(cs >> 8);
	v4[m++] = (uint8_t)cs;
	n = new_pkt(file, 7, v4, m);
	if (add_report(file, n, &sk, detail, NULL) != 1)
		fail_msg("v4 Curve25519Legacy: %s", detail);
}

/* A copy of rsa2048.gpg with the octet at 'at' changed to v. */
static uint8_t *rsa_with(size_t *len, long at, uint8_t v)
{
	uint8_t *b = load("rsa2048.gpg", len);
	assert_true(at >= 0 && (size_t)at < *len);
	b[at] = v;
	return b;
}

/* Offsets in rsa2048.gpg of the hashed Key Flags subpacket (02 1B flags)
 * of the primary's self-signature (03) and the subkey's binding (0C). */
static long flags_at(uint8_t flags)
{
	size_t len;
	uint8_t *b = load("rsa2048.gpg", &len);
	const uint8_t sp[3] = { 0x02, 0x1B, flags };
	long at = find(b, len, sp, 3);
	free(b);
	assert_true(at > 0);
	return at;
}

static void test_key_flags(void **state)
{
	(void)state;
	struct skips sk;
	char detail[256];
	size_t len, count;
	char fpr[65];

	/* gpg --quick-gen-key ... rsa2048 cert,sign: no decryption key. */
	uint8_t *cs = load("rsa2048-certsign.gpg", &len);
	assert_int_equal(add_report(cs, len, &sk, detail, &count), PD_ENOSECRET);
	assert_int_equal(sk.n, 1);
	assert_int_equal(sk.v[0].kind, PD_KEYSKIP_NOT_ENCRYPTION);
	hexfpr(fpr, sk.v[0].fpr, sk.v[0].fpr_len);
	assert_string_equal(fpr, "8767BD4782EA4129E50818BE77ABDE86F550F339");
	assert_string_equal(sk.v[0].reason, "key flags do not allow encryption (certify, sign)");
	assert_string_equal(detail, "no usable secret decryption key: key 8767BD4782EA4129E50818BE77ABDE86F550F339: "
	                            "key flags do not allow encryption (certify, sign)");
	free(cs);

	/* The subkey's binding signature says certify+sign: nothing left. */
	uint8_t *b = rsa_with(&len, flags_at(0x0C) + 2, 0x03);
	assert_int_equal(add_report(b, len, &sk, detail, &count), PD_ENOSECRET);
	assert_int_equal(sk.n, 2);
	free(b);
	/* Only encrypt-storage (0x08): still a decryption key. */
	b = rsa_with(&len, flags_at(0x0C) + 2, 0x08);
	assert_int_equal(add_report(b, len, &sk, detail, &count), 1);
	free(b);
	/* The primary without a Key Flags subpacket (its type changed to an
	 * experimental one): a legacy key, used for decryption, as gpg does. */
	b = rsa_with(&len, flags_at(0x03) + 1, 0x65);
	assert_int_equal(add_report(b, len, &sk, detail, &count), 2);
	assert_int_equal(sk.n, 0);
	free(b);

	/* A direct-key signature (0x1F) with encrypt flags right after the
	 * primary outranks the User ID self-signature; one from another key
	 * (issuer fingerprint not the primary's) does not count. */
	size_t rl;
	uint8_t *rsa = load("rsa2048.gpg", &rl);
	struct pkt p = { 0 };
	assert_true(next_pkt(rsa, rl, 0, &p) && p.tag == 5);
	size_t after = p.off + p.hlen + p.len;
	uint8_t primary_fpr[20];
	unhex("E05337ED09CD811F023D99072DE66863842B0FB4", primary_fpr, 20);
	for (int other = 0; other < 2; other++) {
		const uint8_t when[4] = { 0x7F, 0, 0, 0 };
		uint8_t sig[64];
		size_t o = 0;
		sig[o++] = 4;
		sig[o++] = 0x1F;
		sig[o++] = 1;
		sig[o++] = 8;
		sig[o++] = 0;
		sig[o++] = 6 + 3 + 23; /* hashed: creation time, key flags, issuer fingerprint */
		sig[o++] = 5;
		sig[o++] = 2;
		memcpy(sig + o, when, 4);
		o += 4;
		sig[o++] = 2;
		sig[o++] = 27;
		sig[o++] = 0x0C;
		sig[o++] = 22;
		sig[o++] = 33;
		sig[o++] = 4;
		memcpy(sig + o, primary_fpr, 20);
		if (other)
			sig[o] ^= 1;
		o += 20;
		sig[o++] = 0; /* no unhashed subpackets */
		sig[o++] = 0;
		sig[o++] = 0xAB; /* left 16 bits and a dummy MPI: never verified */
		sig[o++] = 0xCD;
		sig[o++] = 0;
		sig[o++] = 1;
		sig[o++] = 1;
		uint8_t *f = malloc(rl + 6 + o);
		memcpy(f, rsa, after);
		size_t n = after + new_pkt(f + after, 2, sig, o);
		memcpy(f + n, rsa + after, rl - after);
		n += rl - after;
		assert_int_equal(add_report(f, n, &sk, detail, &count), other ? 1 : 2);
		free(f);
	}
	free(rsa);
}

static void test_slow_argon2_key(void **state)
{
	(void)state;
	const char *slow = getenv("PD_SLOW_TESTS");
	if (!slow || strcmp(slow, "1") != 0) {
		skip();
		return;
	}
	struct pd_keyring *kr = NULL;
	char detail[256];
	assert_int_equal(add_file(&kr, "a05-v6-secret-key-locked-argon2.gpg", NULL, detail), PD_ENEEDPASS);
	int r = add_file(&kr, "a05-v6-secret-key-locked-argon2.gpg", "correct horse battery staple", detail);
	if (r != 1)
		fail_msg("%d %s", r, detail);
	const struct pd_key *k = pd__keyring_get(kr, 0);
	uint8_t want[32], sk[56];
	unhex("4d600a4f794d44775c57a26e0feefed558e9afffd6ad0d582d57fb2ba2dcedb8", want, 32);
	assert_int_equal(x_scalar(k, sk), 32);
	assert_memory_equal(sk, want, 32);
	assert_fpr(k->fpr, 32, "12C83F1E706F6308FE151A417743A1F033790E93E9978488D1DB378DA9930885");
	pd_keyring_free(kr);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_load_files),
		cmocka_unit_test(test_v6_secret),
		cmocka_unit_test(test_passphrases),
		cmocka_unit_test(test_no_secret),
		cmocka_unit_test(test_armored),
		cmocka_unit_test(test_several_and_duplicates),
		cmocka_unit_test(test_addresses),
		cmocka_unit_test(test_merge),
		cmocka_unit_test(test_many),
		cmocka_unit_test(test_keys_leave_gcrypt_pool),
		cmocka_unit_test(test_s2k_usages),
		cmocka_unit_test(test_mismatch),
		cmocka_unit_test(test_v5_rejected),
		cmocka_unit_test(test_cv25519_point_prefix),
		cmocka_unit_test(test_truncation),
		cmocka_unit_test(test_bitflips),
		cmocka_unit_test(test_hostile_params),
		cmocka_unit_test(test_unsupported_curve),
		cmocka_unit_test(test_unsupported_versions),
		cmocka_unit_test(test_v6_legacy_oid_refused),
		cmocka_unit_test(test_key_flags),
		cmocka_unit_test(test_slow_argon2_key),
	};
	if (pd_lib_init(8 << 20))
		return 1;
	int r = cmocka_run_group_tests(tests, NULL, NULL);
	pd_lib_deinit();
	return r;
}
