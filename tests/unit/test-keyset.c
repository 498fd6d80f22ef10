/* SPDX-License-Identifier: MIT */
/* daemon/keys.c: a key set freed on a thread of its own, joined at exit. */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <gcrypt.h>

#include "config.h"
#include "keys.h"
#include "log.h"
#include "pgpdec.h"

/* Threads of this process not yet exiting.  A joined thread can still be
 * listed in /proc for a moment after pthread_join returns (the kernel wakes
 * the joiner from inside the thread's exit), but it is past its user-space
 * exit handlers by then and carries PF_EXITING (0x4, field 9 of stat). */
static unsigned threads(void)
{
	DIR *d = opendir("/proc/self/task");
	unsigned n = 0;
	assert_non_null(d);
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		char path[300], buf[512];
		snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
		FILE *f = fopen(path, "re");
		if (!f)
			continue; /* gone meanwhile */
		size_t len = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[len] = 0;
		const char *p = strrchr(buf, ')');
		unsigned long flags = 0;
		/* after the name: state ppid pgrp session tty_nr tpgid flags */
		if (p && sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %lu", &flags) == 1 && (flags & 0x4))
			continue;
		n++;
	}
	closedir(d);
	return n;
}

/* pd_keyset_wait_freed() returns only once the threads that freed the sets
 * have ended: main tears the libraries down right after it (pd_lib_deinit,
 * OpenSSL's and libgcrypt's exit handlers), and no freeing thread may still
 * be in its thread-exit handlers then (OpenSSL's per-thread state, made by
 * freeing the keys' OpenSSL objects).  With detached threads that signalled
 * "freed" before they returned, a thread was still there after the wait. */
static void test_wait_freed_joins_the_threads(void **state)
{
	(void)state;
	char err[256] = "", *argv[] = { "pgpdecd", "--listen", "unix:/nonexistent/s", "--key",
	                                PD_TEST_DATA "/keys/cv25519.gpg", "--key", PD_TEST_DATA "/keys/rsa2048.gpg", NULL };
	struct pd_config *c = NULL;
	if (pd_config_load(&c, 7, argv, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	unsigned base = threads();
	for (int i = 0; i < 100; i++) {
		struct pd_keyset *ks = NULL;
		assert_int_equal(pd_keyset_load(&ks, c, 2, err, sizeof(err)), 0);
		assert_true(pd_keyset_count(ks) >= 2);
		/* a second reference held elsewhere (a request) goes first */
		pd_keyset_ref(ks);
		assert_null(pd_keyset_unref(ks));
		assert_null(pd_keyset_unref(ks));
		pd_keyset_wait_freed();
		assert_int_equal(threads(), base);
	}
	pd_config_free(c);
}

/* Sets dropped all at once, so that their threads free them (and trim
 * the heap) at the same time: every one is freed and joined, none is left
 * behind.  Under AddressSanitizer glibc's own allocator is never set up
 * (ASan replaces malloc, and its mallopt does nothing), and concurrent
 * malloc_trim() calls then raced in glibc's lazy set-up: a SIGSEGV in
 * mtrim, or "malloc assertion failure in __malloc_arena_thread_freeres"
 * (the daemon died so after a reload, in CI's sanitizer pass). */
static void test_many_sets_in_flight(void **state)
{
	(void)state;
	char err[256] = "", *argv[] = { "pgpdecd", "--listen", "unix:/nonexistent/s", "--key",
	                                PD_TEST_DATA "/keys/cv25519.gpg", NULL };
	struct pd_config *c = NULL;
	if (pd_config_load(&c, 5, argv, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	unsigned base = threads();
	for (int round = 0; round < 5; round++) {
		struct pd_keyset *ks[16] = { 0 };
		for (size_t i = 0; i < 16; i++)
			assert_int_equal(pd_keyset_load(&ks[i], c, 2, err, sizeof(err)), 0);
		for (size_t i = 0; i < 16; i++)
			pd_keyset_unref(ks[i]);
		pd_keyset_wait_freed();
		assert_int_equal(threads(), base);
	}
	pd_config_free(c);
}

/* Loads of one key file with the locked pool full but for a hole of 64 to
 * 7,680 octets (gcry_malloc_secure fails where libgcrypt's MPIs
 * would go on in unlocked memory, so the fill is exact).  Each load must
 * either succeed with nothing of it outside the locked pool, or fail with
 * -ENOMEM naming secmem-size; and none may crash. */
static void hole_scan(const char *key, const char *backend, unsigned *loaded, unsigned *overflowed)
{
	char err[512] = "", *argv[] = { "pgpdecd", "--listen", "unix:/nonexistent/s", "--rsa-backend", (char *)backend,
	                                "--ecdh-backend", (char *)backend, "--key", (char *)key, NULL };
	struct pd_config *c = NULL;
	enum { BIG = 8192, MAXN = 4096 };
	static void *fill[MAXN], *tiny[MAXN];

	if (pd_config_load(&c, 9, argv, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	for (unsigned hole = 1; hole <= 120; hole++) {
		size_t nfill = 0, ntiny = 0, used;
		void *plug;
		/* Fill it (gcry_malloc_secure fails rather than spill; libgcrypt
		 * takes the first free block that fits, so few large blocks
		 * first), then free the last large one and plug all of it but
		 * the hole's octets. */
		while (nfill < MAXN && (fill[nfill] = gcry_malloc_secure(BIG)))
			nfill++;
		for (size_t sz = 1024; sz >= 16; sz /= 4)
			while (ntiny < MAXN && (tiny[ntiny] = gcry_malloc_secure(sz)))
				ntiny++;
		assert_true(nfill > 0 && nfill < MAXN && ntiny < MAXN);
		gcry_free(fill[--nfill]);
		plug = gcry_malloc_secure(BIG - 64 * hole);
		assert_non_null(plug);
		unsigned pools = pd_secmem_overflow(&used);
		assert_int_equal(used, 0);

		struct pd_keyset *ks = NULL;
		int r = pd_keyset_load(&ks, c, 1, err, sizeof(err));
		unsigned pools_after = pd_secmem_overflow(&used);
		if (r == 0) {
			(*loaded)++;
			if (pools_after != pools || used)
				fail_msg("%s (%s), hole %u: loaded with %zu octets in unlocked memory", key, backend, hole, used);
			assert_null(pd_keyset_unref(ks));
			pd_keyset_wait_freed();
		} else {
			if (r != -ENOMEM || !strstr(err, "secmem-size"))
				fail_msg("%s (%s), hole %u: %d %s", key, backend, hole, r, err);
			if (strstr(err, "overflowed"))
				(*overflowed)++;
		}
		pd_secmem_overflow(&used);
		assert_int_equal(used, 0); /* a failed load's keys are freed */
		for (size_t i = 0; i < nfill; i++)
			gcry_free(fill[i]);
		for (size_t i = 0; i < ntiny; i++)
			gcry_free(tiny[i]);
		gcry_free(plug);
	}
	pd_config_free(c);
}

/* libgcrypt does not fail an MPI its locked pool cannot hold: it puts it
 * in a pool it mallocs, unlocked (pd_secmem_overflow).  A key file's read
 * (gcry_malloc_secure, which does fail) comes before its MPIs, so with a
 * hole in the locked pool that holds the read but not the MPIs too, a load
 * of libgcrypt-backed keys put them in unlocked memory and succeeded (an
 * ElGamal key here).  The same scan found a cv25519 key's check crash in
 * libgcrypt (SIGSEGV: its X25519 multiplication does not check one of its
 * secure copies), and an RSA key's self-test say "internal error" for a
 * secure copy that failed. */
static void test_load_into_full_secure_memory(void **state)
{
	(void)state;
	static const char *const keys[] = { "rsa2048", "elg", "cv25519", "p256", "a04-v6-secret-key" };
	static const char *const backends[] = { "gcrypt", "openssl" };
	unsigned loaded = 0, overflowed = 0;

	for (size_t b = 0; b < 2; b++)
		for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
			char path[256];
			snprintf(path, sizeof(path), "%s/keys/%s.gpg", PD_TEST_DATA, keys[i]);
			hole_scan(path, backends[b], &loaded, &overflowed);
		}
	print_message("%u loads succeeded, %u failed as overflowed\n", loaded, overflowed);
	assert_true(loaded > 0);
	assert_true(overflowed > 0);
	assert_true(pd_secmem_overflow_warnings() >= 1);
}

int main(void)
{
	pd_log_init();
	pd_log_set_level(PD_LOG_ERR);
	if (pd_lib_init(0) < 0)
		return 1;
	const struct CMUnitTest tests[] = {
		/* first: its threads make the process's first malloc_trim calls */
		cmocka_unit_test(test_many_sets_in_flight),
		cmocka_unit_test(test_wait_freed_joins_the_threads),
		cmocka_unit_test(test_load_into_full_secure_memory),
	};
	int r = cmocka_run_group_tests(tests, NULL, NULL);
	pd_lib_deinit();
	return r;
}
