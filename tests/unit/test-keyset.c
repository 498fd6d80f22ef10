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
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include <gcrypt.h>

#include "config.h"
#include "keys.h"
#include "log.h"
#include "pgpdec.h"
#include "pgp/key.h" /* pd__keyring_set_max_keys */

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

/* A key directory for the cap: file i of dir holds nkeys cv25519 subkeys,
 * all of them cv25519.gpg's (its Ed25519 primary, user ID and
 * certification, then nkeys copies of the subkey and its binding), each
 * with its own creation time and so its own fingerprint: the keys of group
 * g (file i's unless dup) are distinct from every other group's. */
static void write_keyfile(const char *dir, unsigned i, unsigned group, unsigned nkeys)
{
	static uint8_t src[1024];
	static size_t len;
	enum { SUB = 255, SIG = 350 }; /* offsets of the subkey and its binding (gpg --list-packets) */
	if (!len) {
		FILE *f = fopen(PD_TEST_DATA "/keys/cv25519.gpg", "rb");
		assert_non_null(f);
		len = fread(src, 1, sizeof(src), f);
		fclose(f);
		assert_true(len > SIG && src[SUB] == 0x9c && src[SIG] == 0x88);
	}
	char path[512];
	snprintf(path, sizeof(path), "%s/k%03u.gpg", dir, i);
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	fwrite(src, 1, SUB, f);
	for (unsigned k = 0; k < nkeys; k++) {
		uint8_t sub[SIG - SUB];
		memcpy(sub, src + SUB, sizeof(sub));
		uint32_t created = 1700000000u + group * 1000u + k; /* body octets 1-4, after the 2-octet header */
		sub[3] = (uint8_t)(created >> 24);
		sub[4] = (uint8_t)(created >> 16);
		sub[5] = (uint8_t)(created >> 8);
		sub[6] = (uint8_t)created;
		fwrite(sub, 1, sizeof(sub), f);
		fwrite(src + SIG, 1, len - SIG, f);
	}
	assert_int_equal(fclose(f), 0);
}

static int load_dir(const char *dir, struct pd_keyset **ks, char *err, size_t errlen)
{
	char *argv[] = { "pgpdecd", "--listen", "unix:/nonexistent/s", "--workers", "4", "--keydir", (char *)dir, NULL };
	struct pd_config *c = NULL;
	if (pd_config_load(&c, 7, argv, err, errlen) != 0)
		fail_msg("%s", err);
	*ks = NULL;
	int r = pd_keyset_load(ks, c, 4, err, errlen);
	pd_config_free(c);
	return r;
}

static void rm_dir(const char *dir)
{
	DIR *d = opendir(dir);
	assert_non_null(d);
	for (struct dirent *e; (e = readdir(d));) {
		char p[512];
		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		if (unlink(p) < 0)
			assert_int_equal(rmdir(p), 0);
	}
	closedir(d);
	assert_int_equal(rmdir(dir), 0);
}

/* The ring's cap of keys (100,000; 50 here) was checked only when the
 * per-file rings were merged, after every file of the directory had been
 * unlocked (its S2K, its RSA checks): 60 files of 5 keys were all
 * unlocked for a load that fails at the 11th.  The unlock now stops once
 * the keys unlocked pass the cap, and the load says what a one-by-one
 * load says: the cap at the file that passes it, or an earlier file's own
 * error, and keys that repeat others' do not count. */
static void test_key_cap_stops_the_unlock(void **state)
{
	(void)state;
	enum { FILES = 60, PER = 5, CAP = 50, THREADS = 4 };
	char dir[] = "/tmp/pd-keyset-cap-XXXXXX", err[1024], want[1024], p[512];
	struct pd_keyset *ks;
	assert_non_null(mkdtemp(dir));
	for (unsigned i = 0; i < FILES; i++)
		write_keyfile(dir, i, i, PER);
	size_t old = pd__keyring_set_max_keys(CAP);
	assert_int_equal(old, 100000);
	assert_int_equal(pd_keyring_max_keys(), CAP);
	pd__keyset_files_unlocked();

	/* 50 keys in k000-k009, the 51st in k010: the load fails there, having
	 * unlocked about the cap's worth of files and what was in flight */
	snprintf(want, sizeof(want), "key file %s/k010.gpg: %s: too many keys in the ring", dir, pd_strerror(PD_ELIMIT));
	for (int round = 0; round < 5; round++) {
		assert_int_equal(load_dir(dir, &ks, err, sizeof(err)), PD_ELIMIT);
		assert_string_equal(err, want);
		size_t n = pd__keyset_files_unlocked();
		print_message("cap %d: %zu of %d files unlocked\n", CAP, n, FILES);
		assert_true(n >= CAP / PER + 1 && n <= CAP / PER + 1 + THREADS);
	}

	/* an earlier file's own error is the one reported, not the cap's */
	snprintf(p, sizeof(p), "%s/k009.gpg.passphrase", dir);
	assert_int_equal(mkdir(p, 0700), 0);
	snprintf(want, sizeof(want), "passphrase file %s (for %s/k009.gpg): Is a directory", p, dir);
	for (int round = 0; round < 5; round++) {
		assert_int_equal(load_dir(dir, &ks, err, sizeof(err)), -EISDIR);
		assert_string_equal(err, want);
	}
	assert_int_equal(rmdir(p), 0);
	/* ... and one after the cap's file is not */
	snprintf(p, sizeof(p), "%s/k012.gpg.passphrase", dir);
	assert_int_equal(mkdir(p, 0700), 0);
	snprintf(want, sizeof(want), "key file %s/k010.gpg: %s: too many keys in the ring", dir, pd_strerror(PD_ELIMIT));
	for (int round = 0; round < 5; round++) {
		assert_int_equal(load_dir(dir, &ks, err, sizeof(err)), PD_ELIMIT);
		assert_string_equal(err, want);
	}
	assert_int_equal(rmdir(p), 0);

	/* Keys that repeat others' do not count: 60 files of 8 groups (40
	 * distinct keys, 300 unlocked) load, the set that of a load without
	 * the cap's stop */
	for (unsigned i = 0; i < FILES; i++)
		write_keyfile(dir, i, i % 8, PER);
	pd__keyset_files_unlocked();
	assert_int_equal(load_dir(dir, &ks, err, sizeof(err)), 0);
	assert_int_equal(pd_keyset_count(ks), 8 * PER);
	assert_int_equal(pd__keyset_files_unlocked(), FILES);
	char *listing = strdup(pd_keyset_listing(ks));
	assert_null(pd_keyset_unref(ks));
	pd__keyring_set_max_keys(0);
	assert_int_equal(load_dir(dir, &ks, err, sizeof(err)), 0);
	assert_string_equal(pd_keyset_listing(ks), listing);
	assert_null(pd_keyset_unref(ks));
	free(listing);
	/* ... and 41 distinct keys, the 41st in the last file, fail there */
	pd__keyring_set_max_keys(8 * PER);
	write_keyfile(dir, FILES - 1, 100, 1);
	snprintf(want, sizeof(want), "key file %s/k%03u.gpg: %s: too many keys in the ring", dir, FILES - 1,
	         pd_strerror(PD_ELIMIT));
	assert_int_equal(load_dir(dir, &ks, err, sizeof(err)), PD_ELIMIT);
	assert_string_equal(err, want);
	pd_keyset_wait_freed();
	pd__keyring_set_max_keys(0);
	pd__keyset_files_unlocked();
	rm_dir(dir);
}

/* An ordinary allocation of the load that fails (pd__keyset_inject_nomem:
 * the key file's own ring, then the record of its Ed25519 primary, which
 * is not a decryption key) is out of memory, and says so: the load said
 * "out of secure memory" and named a secmem-size to set, which would not
 * have helped.  A secure buffer that cannot be had still names it. */
static void test_out_of_memory_is_not_secure_memory(void **state)
{
	(void)state;
	char err[1024], want[1024], *argv[] = { "pgpdecd", "--listen", "unix:/nonexistent/s", "--workers", "1", "--key",
	                                        PD_TEST_DATA "/keys/cv25519.gpg", NULL };
	struct pd_config *c = NULL;
	struct pd_keyset *ks = NULL;
	static const char *const what[] = { "setting up its key ring", "recording the keys it skips" };

	if (pd_config_load(&c, 7, argv, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	for (unsigned nth = 1; nth <= 2; nth++) {
		pd__keyset_inject_nomem(nth);
		int r = pd_keyset_load(&ks, c, 1, err, sizeof(err));
		assert_int_equal(pd__keyset_inject_nomem(0), 0); /* it fired */
		print_message("allocation %u: %s\n", nth, err);
		assert_int_equal(r, -ENOMEM);
		snprintf(want, sizeof(want), "key file %s/keys/cv25519.gpg: out of memory (the process's ordinary memory, "
		         "not secure memory: secmem-size is not the cause) while %s", PD_TEST_DATA, what[nth - 1]);
		assert_string_equal(err, want);
	}
	/* the next allocation: nothing fails */
	pd__keyset_inject_nomem(3);
	assert_int_equal(pd_keyset_load(&ks, c, 1, err, sizeof(err)), 0);
	assert_int_not_equal(pd__keyset_inject_nomem(0), 0);
	assert_null(pd_keyset_unref(ks));
	pd_keyset_wait_freed();
	pd_config_free(c);
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
		cmocka_unit_test(test_key_cap_stops_the_unlock),
		cmocka_unit_test(test_out_of_memory_is_not_secure_memory),
	};
	int r = cmocka_run_group_tests(tests, NULL, NULL);
	pd_lib_deinit();
	return r;
}
