/* SPDX-License-Identifier: MIT */
/*
 * Process-wide crypto setup, called once from main() before any thread:
 * libgcrypt secure memory (mlock'd) for keys and session keys, and
 * OpenSSL's secure heap for the RSA backend's private keys.
 */
#include <gcrypt.h>
#include <openssl/crypto.h>

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

void pd_lib_versions(const char **ret_gcrypt, const char **ret_openssl)
{
	const char *g = gcry_check_version(NULL);
	*ret_gcrypt = g ? g : "unknown";
	*ret_openssl = OpenSSL_version(OPENSSL_VERSION_STRING);
}

int pd_lib_init(size_t secmem_bytes)
{
	if (!secmem_bytes)
		secmem_bytes = DEFAULT_SECMEM;
	if (!gcry_check_version("1.10.0"))
		return PD_EUNSUPPORTED;
	gcry_control(GCRYCTL_SUSPEND_SECMEM_WARN);
	gcry_control(GCRYCTL_USE_SECURE_RNDPOOL);
	if (gcry_control(GCRYCTL_INIT_SECMEM, secmem_bytes, 0))
		return -ENOMEM;
	secmem_size = secmem_bytes;
	gcry_control(GCRYCTL_RESUME_SECMEM_WARN);
	gcry_control(GCRYCTL_INITIALIZATION_FINISHED, 0);
	/* OpenSSL's secure heap: size must be a power of two.  Failure (e.g.
	 * RLIMIT_MEMLOCK too small) leaves keys in the normal heap, as OpenSSL
	 * falls back by itself; it is not fatal. */
	size_t oss = 1;
	while (oss < secmem_bytes)
		oss <<= 1;
	if (!CRYPTO_secure_malloc_initialized() && CRYPTO_secure_malloc_init(oss, 16))
		secure_heap_size = oss;
	return 0;
}

void pd_lib_deinit(void)
{
	gcry_control(GCRYCTL_TERM_SECMEM);
	if (CRYPTO_secure_malloc_initialized() && CRYPTO_secure_malloc_done())
		secure_heap_size = 0;
}
