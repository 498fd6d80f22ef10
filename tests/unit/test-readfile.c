/* SPDX-License-Identifier: MIT */
/* tools/readfile.c: whole files of any size, and no copy of their bytes left
 * in memory it gives back.  The allocator is wrapped (-Wl,--wrap) for the
 * calls readfile.o makes: every block freed must be all zeros, and realloc,
 * which releases the old block unwiped, must not be used. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "readfile.h"

void *__real_malloc(size_t n);
void __real_free(void *p);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void __wrap_free(void *p);
void *__wrap_realloc(void *p, size_t n);

static struct { void *p; size_t n; } blocks[64];
static unsigned n_freed, n_dirty, n_realloc;
static size_t file_size; /* a freed block's first min(n, file_size) octets held file data */

void *__wrap_malloc(size_t n)
{
	void *p = __real_malloc(n);
	for (size_t i = 0; p && i < sizeof(blocks) / sizeof(blocks[0]); i++)
		if (!blocks[i].p) {
			blocks[i].p = p;
			blocks[i].n = n;
			break;
		}
	return p;
}

void __wrap_free(void *p)
{
	for (size_t i = 0; p && i < sizeof(blocks) / sizeof(blocks[0]); i++)
		if (blocks[i].p == p) {
			const uint8_t *b = p;
			size_t n = blocks[i].n < file_size ? blocks[i].n : file_size;
			for (size_t k = 0; k < n; k++)
				if (b[k]) {
					n_dirty++;
					break;
				}
			n_freed++;
			blocks[i].p = NULL;
			break;
		}
	__real_free(p);
}

void *__wrap_realloc(void *p, size_t n)
{
	n_realloc++;
	for (size_t i = 0; p && i < sizeof(blocks) / sizeof(blocks[0]); i++)
		if (blocks[i].p == p)
			blocks[i].p = NULL;
	return __real_realloc(p, n);
}

static char path[64];

static int setup(void **state)
{
	(void)state;
	snprintf(path, sizeof(path), "/tmp/test-readfile.XXXXXX");
	int fd = mkstemp(path);
	if (fd < 0)
		return -1;
	close(fd);
	memset(blocks, 0, sizeof(blocks));
	n_freed = n_dirty = n_realloc = 0;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unlink(path);
	return 0;
}

/* A file of n octets, none of them zero (a leftover copy must show). */
static uint8_t *write_file(size_t n)
{
	uint8_t *d = __real_malloc(n ? n : 1);
	assert_non_null(d);
	for (size_t i = 0; i < n; i++)
		d[i] = (uint8_t)(1 + i % 251);
	file_size = n;
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(d, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
	return d;
}

/* The caller's side: wipe and free the returned buffer, outside the check. */
static void release(uint8_t *p, size_t len)
{
	for (size_t i = 0; p && i < sizeof(blocks) / sizeof(blocks[0]); i++)
		if (blocks[i].p == p)
			blocks[i].p = NULL;
	explicit_bzero(p, len);
	__real_free(p);
}

static void test_sizes(void **state)
{
	(void)state;
	static const size_t sizes[] = { 0, 1, 65535, 65536, 65537, 300000, 1 << 20 };
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint8_t *want = write_file(sizes[i]), *got = NULL;
		size_t len = 7;
		assert_int_equal(pd_read_file(path, PD_TOOL_MAX_FILE, &got, &len), 0);
		assert_int_equal(len, sizes[i]);
		if (len)
			assert_memory_equal(got, want, len);
		release(got, len);
		release(want, sizes[i]);
	}
	/* 1 MiB grew 64 KiB -> 128 -> 256 -> 512 -> 1 MiB -> 2 MiB: each old block wiped. */
	assert_int_equal(n_realloc, 0);
	assert_true(n_freed > 5);
	assert_int_equal(n_dirty, 0);
}

static void test_too_big(void **state)
{
	(void)state;
	uint8_t *want = write_file(200000), *got = NULL;
	size_t len = 0;
	assert_int_equal(pd_read_file(path, 100000, &got, &len), -EFBIG);
	assert_null(got);
	assert_int_equal(pd_read_file(path, 200000, &got, &len), 0);
	assert_int_equal(len, 200000);
	release(got, len);
	assert_int_equal(pd_read_file(path, 199999, &got, &len), -EFBIG);
	assert_int_equal(pd_read_file("/nonexistent/file", 10, &got, &len), -ENOENT);
	release(want, 200000);
	assert_true(n_freed >= 4); /* the blocks of both failures */
	assert_int_equal(n_dirty, 0);
	assert_int_equal(n_realloc, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_sizes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_too_big, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
