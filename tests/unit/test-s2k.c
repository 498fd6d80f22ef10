/* SPDX-License-Identifier: MIT */
/* S2K: parsing, RFC 9580 known answers, Argon2id against the argon2 CLI,
 * limits.  The 2 GiB RFC 9580 A.5 derivation runs only with PD_SLOW_TESTS=1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <gcrypt.h>

#include "pgp/s2k.h"

static void unhex(const char *h, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		assert_int_equal(sscanf(h + 2 * i, "%2x", &v), 1);
		out[i] = (uint8_t)v;
	}
}

static void check(const char *spec_hex, const char *pass, const char *want_hex)
{
	uint8_t spec[32] = { 0 }, want[64] = { 0 }, got[64];
	size_t slen = strlen(spec_hex) / 2, wlen = strlen(want_hex) / 2, used = 0;
	struct pd_s2k s;
	struct pd_limits lim = { .max_s2k_count = 65011712, .max_argon2_kib = 1024 };

	unhex(spec_hex, spec, slen);
	unhex(want_hex, want, wlen);
	assert_int_equal(pd_s2k_parse(spec, slen, &s, &used), 0);
	assert_int_equal(used, slen);
	/* Every truncation of the specifier is refused. */
	for (size_t i = 0; i < slen; i++) {
		size_t u2;
		struct pd_s2k s2;
		assert_int_equal(pd_s2k_parse(spec, i, &s2, &u2), PD_EMALFORMED);
	}
	memset(got, 0xAA, sizeof(got));
	assert_int_equal(pd_s2k_derive(&s, pass, pass ? strlen(pass) : 0, got, wlen, &lim), 0);
	assert_memory_equal(got, want, wlen);
}

/* RFC 9580 A.9.1-A.11.1: iterated+salted SHA2-256, count 65011712. */
static void test_rfc9580_iterated(void **state)
{
	(void)state;
	check("0308a5ae579d1fc5d82bff", "password", "154967e590aa1f923e1c0ac64c88f23d");
	check("030856a298d2f5e36453ff", "password", "e80de243a362d93b9dc607ede96a7356");
	check("0308e9d39785b2070008ff", "password", "250281715bba7828ef71ef64c4784753");
}

/* Values computed independently with Python's hashlib. */
static void test_other_s2k(void **state)
{
	(void)state;
	/* simple SHA-1, 32 octets: two contexts, the second preloaded with one zero */
	check("0002", "password", "5baa61e4c9b93f3f0682250b6cf8331b7ee68fd89d33953d511c74f6c70241d2");
	/* iterated SHA-1, coded count 0 (1024 octets), 24 octets out */
	check("0302a5ae579d1fc5d82b00", "password", "c445c2909768ec1d9d258fa80904d85a4236347813991600");
	/* empty passphrase: hashed by hand (libgcrypt refuses it) */
	check("0308a5ae579d1fc5d82bff", "", "755002a2258fa0a3bff79d1aefce062d");
	check("0308a5ae579d1fc5d82bff", NULL, "755002a2258fa0a3bff79d1aefce062d");
}

/* Argon2id, t=3, m=2^6 KiB, p=2, salt "somesalt12345678": expected values
 * from the reference implementation (Debian package argon2:
 * `printf password | argon2 somesalt12345678 -id -t 3 -k 64 -p 2 -l N -r`). */
static void test_argon2_small(void **state)
{
	(void)state;
	check("04736f6d6573616c743132333435363738030206", "password",
	      "7ad81051e93c71dd6e2a472c021e737475f25f7765cdf8d184d9f6d1910ab114");
	check("04736f6d6573616c743132333435363738030206", "password", "c62d11d4baa3d0bfee67dc029ddcefb1");
}

static void test_limits_and_errors(void **state)
{
	(void)state;
	struct pd_s2k s;
	size_t used;
	uint8_t out[32];
	struct pd_limits lim = { .max_s2k_count = 1u << 20, .max_argon2_kib = 32 };

	uint8_t it[] = { 3, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0xff };
	assert_int_equal(pd_s2k_parse(it, sizeof(it), &s, &used), 0);
	assert_int_equal(s.count, 65011712);
	assert_int_equal(pd_s2k_derive(&s, "x", 1, out, 16, &lim), PD_ELIMIT);

	uint8_t a2[] = { 4, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 1, 1, 6 };
	assert_int_equal(pd_s2k_parse(a2, sizeof(a2), &s, &used), 0);
	assert_int_equal(pd_s2k_derive(&s, "x", 1, out, 16, &lim), PD_ELIMIT);
	a2[19] = 2; /* m too small for p = 1 (needs m >= 3) */
	assert_int_equal(pd_s2k_parse(a2, sizeof(a2), &s, &used), PD_EMALFORMED);
	a2[19] = 32; /* m > 31 */
	assert_int_equal(pd_s2k_parse(a2, sizeof(a2), &s, &used), PD_EMALFORMED);
	a2[19] = 6;
	a2[17] = 0; /* t = 0 */
	assert_int_equal(pd_s2k_parse(a2, sizeof(a2), &s, &used), PD_EMALFORMED);
	a2[17] = 1;
	a2[18] = 16; /* p = 16 needs m >= 7 */
	assert_int_equal(pd_s2k_parse(a2, sizeof(a2), &s, &used), PD_EMALFORMED);

	uint8_t t2[] = { 2, 8 };
	assert_int_equal(pd_s2k_parse(t2, sizeof(t2), &s, &used), PD_EUNSUPPORTED);
	uint8_t badhash[] = { 0, 99 };
	assert_int_equal(pd_s2k_parse(badhash, sizeof(badhash), &s, &used), PD_EUNSUPPORTED);

	uint8_t gnu[] = { 101, 0, 'G', 'N', 'U', 1 };
	assert_int_equal(pd_s2k_parse(gnu, sizeof(gnu), &s, &used), 0);
	assert_int_equal(s.type, 101);
	assert_int_equal(s.gnu_mode, 1);
	assert_int_equal(used, 6);
	assert_int_equal(pd_s2k_derive(&s, "x", 1, out, 16, &lim), PD_EUNSUPPORTED);
	gnu[3] = 'X';
	assert_int_equal(pd_s2k_parse(gnu, sizeof(gnu), &s, &used), PD_EUNSUPPORTED);
}

/* RFC 9580 A.5: Argon2id t=1 p=4 m=21 (2 GiB), primary key S2K output. */
static void test_argon2_rfc9580_a5(void **state)
{
	(void)state;
	const char *slow = getenv("PD_SLOW_TESTS");
	if (!slow || strcmp(slow, "1") != 0) {
		skip();
		return;
	}
	struct pd_limits lim = { .max_argon2_kib = 1u << 21 };
	struct pd_s2k s;
	size_t used;
	uint8_t spec[20], want[32], got[32];
	unhex("045d6fd71c9e096d1eb6917b6e6e1eecae010415", spec, 20);
	unhex("832bd2662a5c2b251ee3fc82aec349a766ca539015880133002e5a21960b3bcf", want, 32);
	assert_int_equal(pd_s2k_parse(spec, 20, &s, &used), 0);
	lim.max_argon2_kib = (1u << 21) - 1;
	assert_int_equal(pd_s2k_derive(&s, "correct horse battery staple", 28, got, 32, &lim), PD_ELIMIT);
	lim.max_argon2_kib = 1u << 21;
	assert_int_equal(pd_s2k_derive(&s, "correct horse battery staple", 28, got, 32, &lim), 0);
	assert_memory_equal(got, want, 32);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rfc9580_iterated),
		cmocka_unit_test(test_other_s2k),
		cmocka_unit_test(test_argon2_small),
		cmocka_unit_test(test_limits_and_errors),
		cmocka_unit_test(test_argon2_rfc9580_a5),
	};
	if (pd_lib_init(0))
		return 1;
	int r = cmocka_run_group_tests(tests, NULL, NULL);
	pd_lib_deinit();
	return r;
}
