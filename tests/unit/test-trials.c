/* SPDX-License-Identifier: MIT */
/*
 * The key-trial policy (pgp/trials.c) when a trial runs out of memory:
 * -ENOMEM, the retryable failure, whatever the other trials gave, and the
 * same answer whether they decoded or not (a result that depended on it
 * would say which trial decoded before the container's integrity check).
 * PKESKs: RFC 9580 A.8 (v6, X25519, to the A.4 key) twice; SKESKs: two v4
 * packets with an ESK built here.  Either may be tampered with so that it
 * does not decode; every take of a handle or secure block in the trials
 * is made to fail in turn (pd__worker_inject_nomem).
 */
#include "aead-testutil.h"
#include "pgp/trials.h"

/* The trials' answer, as the caller sees it. */
struct outcome {
	int r;
	char detail[256];
	uint8_t key_fpr_len, pk_algo;
	struct pd_sesskey sk;
};

/* The PKESK (else SKESK) trials of t with the nth take failing (0: none);
 * *fired tells whether it did. */
static struct outcome run(bool pkesk, const struct pd_trials *t, const struct pd_keyring *kr,
                          struct pd_worker *w, unsigned nth, bool *fired)
{
	struct pd_trial_result res = { 0 };
	struct pd_sesskey *sk = gcry_calloc_secure(1, sizeof(*sk));
	struct outcome o = { 0 };
	assert_non_null(sk);
	pd__worker_inject_nomem(nth);
	o.r = pkesk ? pd_trials_pkesk(t, kr, w, sk, &res) : pd_trials_skesk(t, "secret", 6, w, sk, &res);
	*fired = nth && pd__worker_inject_nomem(0) == 0;
	memcpy(o.detail, res.detail, sizeof(o.detail));
	o.key_fpr_len = res.key_fpr_len;
	o.pk_algo = res.pk_algo;
	o.sk = *sk;
	pd_wipe(sk, sizeof(*sk));
	gcry_free(sk);
	return o;
}

/* The four ways two trials can decode: with bit i of `tamper` set, octet
 * `at` of esk[i] is changed so that it does not decode.  For each take n
 * the trials make, in turn failing: -ENOMEM with the same sentence and no
 * key in all four; without a failure, 0 in all four, with the key want
 * (wlen octets) unless neither decodes.  Returns the takes the trials make. */
static unsigned sweep(bool pkesk, struct pd_esk esk[2], size_t at, const struct pd_trials *t,
                      const struct pd_keyring *kr, struct pd_worker *w, const uint8_t *want, size_t wlen,
                      const char *what)
{
	unsigned n, nomem = 0, wrong = 0;
	for (n = 1;; n++) {
		struct outcome first = { 0 };
		bool fired = false;
		for (unsigned tamper = 0; tamper < 4; tamper++) {
			for (size_t i = 0; i < 2; i++)
				if (tamper >> i & 1)
					esk[i].body[at] ^= 0x01;
			struct outcome o = run(pkesk, t, kr, w, n, &fired);
			for (size_t i = 0; i < 2; i++)
				if (tamper >> i & 1)
					esk[i].body[at] ^= 0x01;
			if (!fired) {
				assert_int_equal(o.r, 0);
				assert_int_equal(memcmp(o.sk.key, want, wlen) == 0, tamper != 3);
				continue;
			}
			if (o.r != -ENOMEM) {
				print_message("%s: take %u failing, trial 1 %s, trial 2 %s: %d (%s)\n", what, n,
				              tamper & 1 ? "tampered" : "good", tamper & 2 ? "tampered" : "good", o.r,
				              o.r ? pd_errname(o.r) : "a session key");
				wrong++;
				continue;
			}
			nomem++;
			assert_int_equal(o.key_fpr_len, 0);
			assert_int_equal(o.pk_algo, 0);
			assert_int_equal(o.sk.len, 0);
			if (tamper == 0)
				first = o;
			else
				assert_memory_equal(&o, &first, sizeof(o));
		}
		if (!fired)
			break;
	}
	print_message("%s: %u takes, each failing in 4 ways: %u -ENOMEM, %u something else\n", what, n - 1, nomem,
	              wrong);
	assert_int_equal(wrong, 0);
	return n - 1;
}

static void test_pkesk(void **state)
{
	(void)state;
	size_t klen, mlen, pos = 0;
	uint8_t *kb = tu_read("keys/a04-v6-secret-key.gpg", &klen);
	uint8_t *mb = tu_read("aead/a08-x25519-aead-ocb-message.pgp", &mlen);
	struct tu_pkt pk, data;
	tu_next_packet(mb, mlen, &pos, &pk);
	tu_next_packet(mb, mlen, &pos, &data);
	assert_int_equal(pk.tag, 1);
	assert_int_equal(data.tag, 18);
	struct pd_keyring *kr;
	char detail[200] = "";
	assert_int_equal(pd_keyring_new(&kr, PD_RSA_DEFAULT), 0);
	if (pd_keyring_add(kr, kb, klen, NULL, 0, detail, sizeof(detail)) != 1)
		fail_msg("a04: %s", detail);
	struct pd_worker *w;
	assert_int_equal(pd_worker_new(&w, 0), 0);
	struct pd_limits lim;
	pd_limits_default(&lim);
	/* the same PKESK twice: two trials of the one key */
	struct pd_esk esk[2] = { { 1, pk.len, pk.body }, { 1, pk.len, malloc(pk.len) } };
	assert_non_null(esk[1].body);
	memcpy(esk[1].body, pk.body, pk.len);
	const struct pd_trials t = {
		.esks = esk, .n_esk = 2, .container = 18, .container_version = 2,
		.hdr_sym_algo = data.body[1], .lim = &lim,
	};
	/* the key the A.8 PKESK carries, once a trial decodes */
	uint8_t want[16];
	tu_unhex("dd708f6fa1ed65114d68d2343e7c2f1d", want, sizeof(want));
	/* one take for the candidate, three a trial (scratch, hash, key wrap);
	 * the ESK's last octet tampered with fails the key wrap's check */
	assert_int_equal(sweep(true, esk, pk.len - 1, &t, kr, w, want, 16, "PKESK"), 7);
	pd_worker_free(w);
	pd_keyring_free(kr);
	free(esk[1].body);
	free(pk.body);
	free(data.body);
	free(kb);
	free(mb);
}

/* A v4 SKESK of AES-128 for pw with an ESK (iterated and salted SHA-256,
 * 65536 octets): the AES-256 key under CFB with a zero IV, into b; its
 * length.  Its only check is a known cipher of the right size, a secret. */
static size_t skesk_v4(uint8_t *b, const char *pw, const uint8_t key[32])
{
	static const uint8_t salt[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	uint8_t s2k[16], plain[33];
	size_t n = 0;
	b[n++] = 4;
	b[n++] = 7;
	b[n++] = 3;
	b[n++] = 8;
	memcpy(b + n, salt, 8);
	n += 8;
	b[n++] = 0x60;
	assert_int_equal(gcry_kdf_derive(pw, strlen(pw), GCRY_KDF_ITERSALTED_S2K, GCRY_MD_SHA256, salt, 8, 65536, 16,
	                                 s2k), 0);
	plain[0] = 9;
	memcpy(plain + 1, key, 32);
	gcry_cipher_hd_t h;
	assert_int_equal(gcry_cipher_open(&h, GCRY_CIPHER_AES128, GCRY_CIPHER_MODE_CFB, 0), 0);
	assert_int_equal(gcry_cipher_setkey(h, s2k, 16), 0);
	assert_int_equal(gcry_cipher_encrypt(h, b + n, sizeof(plain), plain, sizeof(plain)), 0);
	gcry_cipher_close(h);
	return n + sizeof(plain);
}

static void test_skesk(void **state)
{
	(void)state;
	uint8_t b[2][64], key[32];
	gcry_randomize(key, sizeof(key), GCRY_WEAK_RANDOM);
	size_t len = skesk_v4(b[0], "secret", key);
	memcpy(b[1], b[0], len);
	struct pd_esk esk[2] = { { 3, len, b[0] }, { 3, len, b[1] } };
	struct pd_worker *w;
	assert_int_equal(pd_worker_new(&w, 0), 0);
	struct pd_limits lim;
	pd_limits_default(&lim);
	const struct pd_trials t = { .esks = esk, .n_esk = 2, .container = 18, .container_version = 1, .lim = &lim };
	/* the candidate and the fallback key, then one cipher a trial; the
	 * ESK's first octet (algo 9 -> 8, AES-192 of 24 octets) tampered with
	 * fails the check */
	assert_int_equal(sweep(false, esk, 13, &t, NULL, w, key, 32, "SKESK"), 4);
	pd_worker_free(w);
}

int main(void)
{
	assert_int_equal(pd_lib_init(0), 0);
	gcry_control(GCRYCTL_ENABLE_QUICK_RANDOM, 0); /* see test-unwrap.c */
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pkesk),
		cmocka_unit_test(test_skesk),
	};
	int r = cmocka_run_group_tests(tests, NULL, NULL);
	pd_lib_deinit();
	return r;
}
