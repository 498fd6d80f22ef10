/* SPDX-License-Identifier: MIT */
/* Algorithm tables: the mappings that differ from libgcrypt's numbering. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <gcrypt.h>

#include "pgp/algo.h"

static void test_camellia_mapping(void **state)
{
	(void)state;
	assert_int_equal(pd_sym_gcry(11), GCRY_CIPHER_CAMELLIA128);
	assert_int_equal(pd_sym_gcry(13), GCRY_CIPHER_CAMELLIA256);
	assert_int_equal(pd_sym_keylen(9), 32);
	assert_int_equal(pd_sym_blklen(3), 8);
	assert_int_equal(pd_sym_gcry(0), 0);
	assert_int_equal(pd_sym_gcry(5), 0);
}

static void test_curves(void **state)
{
	(void)state;
	const uint8_t cv[] = { 0x2B, 0x06, 0x01, 0x04, 0x01, 0x97, 0x55, 0x01, 0x05, 0x01 };
	assert_int_equal(pd_curve_from_oid(cv, sizeof(cv)), PD_CURVE_CV25519);
	assert_int_equal(pd_curve_from_oid(cv, sizeof(cv) - 1), PD_CURVE_NONE);
	assert_int_equal(pd_curve_fsize(PD_CURVE_P521), 66);
	size_t n;
	assert_non_null(pd_curve_oid(PD_CURVE_P256, &n));
	assert_int_equal(n, 8);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_camellia_mapping),
		cmocka_unit_test(test_curves),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
