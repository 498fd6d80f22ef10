/* SPDX-License-Identifier: MIT */
/*
 * Process-wide crypto setup, called once from main() before any thread:
 * libgcrypt secure memory (mlock'd) for keys and session keys, and
 * OpenSSL's secure heap for the RSA backend's private keys.
 */
#include <errno.h>

#include <gcrypt.h>
#include <openssl/crypto.h>
#include <openssl/err.h>

#include "internal.h"

#define DEFAULT_SECMEM (1u << 20)

static size_t secure_heap_size;
static size_t secmem_size;

size_t pd_secmem_size(void) { return secmem_size; }

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
