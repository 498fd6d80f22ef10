/* SPDX-License-Identifier: MIT */
/*
 * Process-wide crypto setup, called once from main() before any thread:
 * libgcrypt secure memory (mlock'd) for keys and session keys, and
 * OpenSSL's secure heap for the RSA backend's private keys.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <gcrypt.h>
#include <openssl/crypto.h>
#include <openssl/err.h>

#include "internal.h"

#define DEFAULT_SECMEM (1u << 20)

static size_t secure_heap_size;
static size_t secmem_size;

size_t pd_secmem_size(void) { return secmem_size; }

/*
 * libgcrypt's overflow pools.  When its locked pool is full, libgcrypt's
 * xmalloc-style secure allocations (every MPI: the libgcrypt backends'
 * keys, their per-message secrets) do not fail: they go on in pools it
 * malloc()s, which are not locked and may be swapped out.  It says so once,
 * with "Warning: using insecure memory!" on its log, and offers no way to
 * turn them off (only FIPS mode does), nor to ask about them but
 * GCRYCTL_DUMP_SECMEM_STATS, which logs one line per pool, the locked one
 * first.  So its log handler counts that warning, and pd_secmem_overflow()
 * reads the dump on its own thread.  Every other line goes to stderr, as
 * libgcrypt would write it without a handler.
 */
struct pool_scan {
	unsigned lines;  /* lines seen, the locked pool's first */
	unsigned pools;  /* overflow pools */
	size_t used;     /* bytes in use in them */
};
static __thread struct pool_scan *scan;
static atomic_uint insecure_warnings;

static void gcry_log(void *opaque, int level, const char *fmt, va_list ap)
{
	(void)opaque;
	(void)level;
	if (scan) {
		char line[160];
		unsigned used;
		unsigned long size;

		vsnprintf(line, sizeof(line), fmt, ap);
		const char *p = line + strcspn(line, "0123456789");
		if (sscanf(p, "%u/%lu bytes", &used, &size) == 2 && scan->lines++ > 0) {
			scan->pools++;
			scan->used += used;
		}
		return;
	}
	if (!strncmp(fmt, "Warning: using insecure memory", 30))
		atomic_fetch_add(&insecure_warnings, 1);
	vfprintf(stderr, fmt, ap);
}

unsigned pd_secmem_overflow_warnings(void) { return atomic_load(&insecure_warnings); }

unsigned pd_secmem_overflow(size_t *ret_used)
{
	struct pool_scan s = { 0 };

	/* libgcrypt warns when it makes its first overflow pool: before that
	 * there is none, and no need to walk every block under its lock (a
	 * third of a millisecond for 200,000 blocks; STATS asks each time). */
	if (!secmem_size || !atomic_load(&insecure_warnings)) {
		*ret_used = 0;
		return 0;
	}
	scan = &s;
	gcry_control(GCRYCTL_DUMP_SECMEM_STATS);
	scan = NULL;
	/* A dump this code no longer reads (another libgcrypt) still has the
	 * warning, which comes with the first overflow pool. */
	if (!s.lines && atomic_load(&insecure_warnings))
		s.pools = 1;
	*ret_used = s.used;
	return s.pools;
}

void pd_secure_heap(size_t *ret_size, size_t *ret_used)
{
	*ret_size = secure_heap_size;
	*ret_used = secure_heap_size ? CRYPTO_secure_used() : 0;
}

int pd_ossl_error(int otherwise)
{
	unsigned long e;
	int r = otherwise;

	while ((e = ERR_get_error()) != 0) {
		if (ERR_GET_REASON(e) == ERR_R_MALLOC_FAILURE ||
		    (ERR_GET_LIB(e) == ERR_LIB_CRYPTO && ERR_GET_REASON(e) == CRYPTO_R_SECURE_MALLOC_FAILURE))
			r = -ENOMEM;
	}
	return r;
}

void pd_lib_versions(const char **ret_gcrypt, const char **ret_openssl)
{
	const char *g = gcry_check_version(NULL);
	*ret_gcrypt = g ? g : "unknown";
	*ret_openssl = OpenSSL_version(OPENSSL_VERSION_STRING);
}

/* OpenSSL's secure heap must be a power of two. */
static size_t heap_bytes(size_t secmem_bytes)
{
	size_t oss = 1;
	while (oss < secmem_bytes)
		oss <<= 1;
	return oss;
}

size_t pd_lib_locked_bytes(size_t secmem_bytes)
{
	if (!secmem_bytes)
		secmem_bytes = DEFAULT_SECMEM;
	return secmem_bytes + heap_bytes(secmem_bytes);
}

int pd_lib_init(size_t secmem_bytes)
{
	if (!secmem_bytes)
		secmem_bytes = DEFAULT_SECMEM;
	/* GCRYCTL_INIT_SECMEM takes an unsigned int: more would be cut. */
	if (secmem_bytes > PD_SECMEM_MAX)
		return -E2BIG;
	if (!gcry_check_version("1.10.0"))
		return PD_EUNSUPPORTED;
	gcry_set_log_handler(gcry_log, NULL);
	gcry_control(GCRYCTL_SUSPEND_SECMEM_WARN);
	gcry_control(GCRYCTL_USE_SECURE_RNDPOOL);
	if (gcry_control(GCRYCTL_INIT_SECMEM, secmem_bytes, 0))
		return -ENOMEM;
	secmem_size = secmem_bytes;
	gcry_control(GCRYCTL_RESUME_SECMEM_WARN);
	gcry_control(GCRYCTL_INITIALIZATION_FINISHED, 0);
	/* OpenSSL's secure heap holds the secrets of the OpenSSL backends (the
	 * defaults) and every key's implicit-rejection secret, so it must be
	 * locked like libgcrypt's: CRYPTO_secure_malloc_init returns 2 when
	 * the heap was made but mlock failed (RLIMIT_MEMLOCK too small for
	 * both), 0 when it could not be made; either is a failure here, as a
	 * libgcrypt pool that cannot be locked is. */
	size_t oss = heap_bytes(secmem_bytes);
	if (!CRYPTO_secure_malloc_initialized()) {
		int r = CRYPTO_secure_malloc_init(oss, 16);
		if (r != 1) {
			if (r == 2)
				CRYPTO_secure_malloc_done();
			gcry_control(GCRYCTL_TERM_SECMEM);
			secmem_size = 0;
			return -ENOMEM;
		}
		secure_heap_size = oss;
	}
	return 0;
}

void pd_lib_deinit(void)
{
	gcry_control(GCRYCTL_TERM_SECMEM);
	if (CRYPTO_secure_malloc_initialized() && CRYPTO_secure_malloc_done())
		secure_heap_size = 0;
}
