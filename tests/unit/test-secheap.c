/* SPDX-License-Identifier: MIT */
/*
 * No copy of a key's secret in libgcrypt's normal heap during a decrypt.
 *
 * libgcrypt's allocation handlers are replaced (before pd_lib_init, so
 * from libgcrypt's first allocation on): secure blocks come from a region
 * of their own (is_secure is a range check, as libgcrypt's pool is), normal
 * blocks from malloc.  While a PKESK is unwrapped (armed), every normal
 * block libgcrypt frees or reallocates, and every normal block it allocated
 * since arming each time it calls a handler again (a copy wiped before its
 * free shows there), is searched for 8 octets of the key's secret, in both
 * the octet order of an S-expression (big-endian) and the order of MPI
 * limbs (little-endian).  The messages are the PKESKs gpg and rnp wrote
 * (tests/data/unwrap) to the key ring's test keys: ElGamal (always
 * libgcrypt), NIST P-256 with the libgcrypt ECDH backend and RSA-2048 with
 * the libgcrypt RSA backend (x, d, and RSA's d, p and q looked for).
 *
 * Before the fix gcry_pk_decrypt found the key's parameters with
 * sexp_find_token, which copies what it finds out of a secure S-expression
 * into the normal heap, and freed those copies unwiped (4 such blocks
 * freed per ElGamal or P-256 decrypt, 8 per RSA one).
 */
#include <malloc.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/mman.h>
#include <cmocka.h>
#include <gcrypt.h>

#include "pgp/key.h"
#include "pgp/unwrap.h"

/* ---- libgcrypt's allocator ---- */

#define SEC_REGION (512u << 20) /* reserved, touched as used */
#define SEC_HDR 16u             /* size of the block, before it */

static uint8_t *sec_base;
static atomic_size_t sec_top;

static int h_is_secure(const void *p)
{
	return sec_base && (const uint8_t *)p >= sec_base && (const uint8_t *)p < sec_base + SEC_REGION;
}

static void *h_malloc_secure(size_t n)
{
	size_t need = (SEC_HDR + n + 15) & ~(size_t)15;
	size_t at = atomic_fetch_add(&sec_top, need);
	if (at + need > SEC_REGION)
		return NULL;
	memcpy(sec_base + at, &n, sizeof(n));
	return sec_base + at + SEC_HDR;
}

static size_t sec_size(const void *p)
{
	size_t n;
	memcpy(&n, (const uint8_t *)p - SEC_HDR, sizeof(n));
	return n;
}

/* The secrets looked for: 8 octets of each, both orders. */
#define MAX_NEEDLES 8
static uint8_t needle[MAX_NEEDLES][2][8];
static unsigned needles;

/* Normal blocks allocated while armed (live ones looked at on each call). */
#define MAX_LIVE 4096
static struct { void *p; bool seen; } live[MAX_LIVE]; /* live[0..nlive) */
static unsigned nlive;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static bool armed;
static unsigned freed_with_secret, live_with_secret, secure_with_secret, normal_allocs;

static bool holds_secret(const void *p, size_t n)
{
	for (unsigned i = 0; i < needles; i++)
		for (int o = 0; o < 2; o++)
			if (memmem(p, n, needle[i][o], 8))
				return true;
	return false;
}

/* Under lock. */
static void scan_live(void)
{
	for (unsigned i = 0; i < nlive; i++)
		if (!live[i].seen && holds_secret(live[i].p, malloc_usable_size(live[i].p))) {
			live[i].seen = true;
			live_with_secret++;
		}
}

/* A block going away (free, or the old block of a realloc), under lock. */
static void leaving(void *p)
{
	if (!armed || !p)
		return;
	scan_live();
	for (unsigned i = 0; i < nlive; i++)
		if (live[i].p == p) {
			live[i] = live[--nlive];
			break;
		}
	if (h_is_secure(p)) {
		if (holds_secret(p, sec_size(p)))
			secure_with_secret++;
	} else if (holds_secret(p, malloc_usable_size(p))) {
		freed_with_secret++;
	}
}

static void *h_malloc(size_t n)
{
	void *p = calloc(1, n ? n : 1); /* no stale octets from an earlier block */
	pthread_mutex_lock(&lock);
	if (armed) {
		scan_live();
		normal_allocs++;
		if (p && nlive < MAX_LIVE)
			live[nlive++].p = p;
	}
	pthread_mutex_unlock(&lock);
	return p;
}

static void h_free(void *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&lock);
	leaving(p);
	pthread_mutex_unlock(&lock);
	if (h_is_secure(p)) {
		memset(p, 0, sec_size(p)); /* as libgcrypt's pool does; the region is not reused */
		return;
	}
	memset(p, 0, malloc_usable_size(p)); /* no stale octets for a later block */
	free(p);
}

static void *h_realloc(void *p, size_t n)
{
	if (!p)
		return h_malloc(n);
	if (h_is_secure(p)) {
		void *q = h_malloc_secure(n);
		if (!q)
			return NULL;
		size_t old = sec_size(p);
		memcpy(q, p, old < n ? old : n);
		h_free(p);
		return q;
	}
	/* A new block and the old one freed, so that the old one's content
	 * is looked at, and wiped, as any other freed block's. */
	void *q = h_malloc(n);
	if (!q)
		return NULL;
	size_t old = malloc_usable_size(p);
	memcpy(q, p, old < n ? old : n);
	h_free(p);
	return q;
}

static void arm(bool on)
{
	pthread_mutex_lock(&lock);
	if (!on)
		scan_live();
	armed = on;
	nlive = 0;
	pthread_mutex_unlock(&lock);
}

/* ---- the messages ---- */

static uint8_t *slurp(const char *dir, const char *name, size_t *ret_len)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s/%s", PD_TEST_DATA, dir, name);
	FILE *f = fopen(path, "rb");
	if (!f)
		fail_msg("cannot open %s", path);
	uint8_t *b = malloc(1 << 16);
	assert_non_null(b);
	*ret_len = fread(b, 1, 1 << 16, f);
	fclose(f);
	return b;
}

/* 8 octets from the middle of m, as an S-expression holds it and as its
 * limbs do (little-endian: the reverse). */
static void add_needle(gcry_mpi_t m)
{
	assert_true(needles < MAX_NEEDLES);
	assert_true(gcry_mpi_get_flag(m, GCRYMPI_FLAG_SECURE));
	uint8_t *b = NULL;
	size_t n = 0;
	assert_int_equal(gcry_mpi_aprint(GCRYMPI_FMT_USG, &b, &n, m), 0);
	assert_true(h_is_secure(b));
	assert_true(n >= 24);
	size_t at = n / 2 - 4;
	for (int i = 0; i < 8; i++) {
		needle[needles][0][i] = b[at + i];
		needle[needles][1][i] = b[at + 7 - i];
	}
	needles++;
	gcry_free(b);
}

/* Unwrap every PKESK of msg (one of the key's) with the key file's key:
 * how many PKESKs matched; the counters say what the heap held. */
static int unwrap_file(const char *keyfile, const char *msg, enum pd_rsa_backend rbe, enum pd_ecdh_backend ebe)
{
	size_t klen, mlen;
	uint8_t *kb = slurp("keys", keyfile, &klen), *mb = slurp("unwrap", msg, &mlen);
	struct pd_keyring *kr;
	char detail[200] = "";
	assert_int_equal(pd_keyring_new(&kr, rbe), 0);
	assert_int_equal(pd_keyring_set_ecdh_backend(kr, ebe), 0);
	if (pd_keyring_add(kr, kb, klen, NULL, 0, detail, sizeof(detail)) < 0)
		fail_msg("%s: %s", keyfile, detail);
	struct pd_worker *w;
	assert_int_equal(pd_worker_new(&w, 1), 0);
	struct pd_sesskey *out = gcry_malloc_secure(sizeof(*out));
	assert_non_null(out);

	int hits = 0;
	size_t off = 0;
	for (;;) {
		/* the leading PKESK packets (tag 1), either header format */
		size_t body, blen;
		if (off + 3 > mlen || !(mb[off] & 0x80))
			break;
		if (mb[off] & 0x40) {
			if ((mb[off] & 0x3f) != 1 || mb[off + 1] >= 224)
				break;
			if (mb[off + 1] < 192) {
				blen = mb[off + 1];
				body = off + 2;
			} else {
				blen = ((size_t)(mb[off + 1] - 192) << 8) + mb[off + 2] + 192;
				body = off + 3;
			}
		} else {
			if (((mb[off] >> 2) & 15) != 1 || (mb[off] & 3) > 1)
				break;
			blen = (mb[off] & 3) ? (size_t)mb[off + 1] << 8 | mb[off + 2] : mb[off + 1];
			body = off + 2 + (mb[off] & 3);
		}
		assert_true(body + blen <= mlen);
		off = body + blen;
		struct pd_pkesk p;
		assert_int_equal(pd_pkesk_parse(mb + body, blen, &p), 0);
		for (size_t i = 0; i < pd__keyring_n(kr); i++) {
			const struct pd_key *k = pd__keyring_get(kr, i);
			if (!p.wildcard && memcmp(p.keyid, k->keyid, 8) != 0)
				continue;
			needles = 0;
			if (k->pk_algo == PD_PK_RSA || k->pk_algo == PD_PK_RSA_E) {
				add_needle(k->d);
				add_needle(k->sp);
				add_needle(k->sq);
			} else {
				add_needle(k->x); /* ElGamal x, ECDH d */
			}
			uint32_t ok = 0;
			arm(true);
			int r = pd_unwrap(w, k, &p, 0, out, &ok);
			arm(false);
			assert_int_equal(r, 0);
			assert_int_equal(ok, ~0u);
			hits++;
		}
	}
	gcry_free(out);
	pd_worker_free(w);
	pd_keyring_free(kr);
	free(kb);
	free(mb);
	return hits;
}

static void reset(void)
{
	freed_with_secret = live_with_secret = secure_with_secret = normal_allocs = 0;
}

static void report(const char *what)
{
	print_message("%s: normal-heap blocks holding the secret: %u freed, %u seen live; secure blocks holding it "
	              "freed: %u; normal allocations while decrypting: %u\n",
	              what, freed_with_secret, live_with_secret, secure_with_secret, normal_allocs);
}

static void test_elgamal(void **state)
{
	(void)state;
	static const char *const files[] = { "gpg-elg.pgp", "rnp-elg.pgp" };
	for (size_t i = 0; i < 2; i++) {
		reset();
		assert_int_equal(unwrap_file("elg.gpg", files[i], PD_RSA_DEFAULT, PD_ECDH_DEFAULT), 1);
		report(files[i]);
		assert_int_equal(freed_with_secret, 0);
		assert_int_equal(live_with_secret, 0);
	}
}

static void test_p256_gcrypt(void **state)
{
	(void)state;
	static const char *const files[] = { "gpg-p256.pgp", "rnp-p256.pgp", "sq-p256.pgp" };
	for (size_t i = 0; i < 3; i++) {
		reset();
		assert_int_equal(unwrap_file("p256.gpg", files[i], PD_RSA_DEFAULT, PD_ECDH_GCRYPT), 1);
		report(files[i]);
		assert_int_equal(freed_with_secret, 0);
		assert_int_equal(live_with_secret, 0);
	}
}

static void test_rsa_gcrypt(void **state)
{
	(void)state;
	static const char *const files[] = { "gpg-rsa2048.pgp", "rnp-rsa2048.pgp", "sq-rsa2048.pgp" };
	for (size_t i = 0; i < 3; i++) {
		reset();
		assert_int_equal(unwrap_file("rsa2048.gpg", files[i], PD_RSA_GCRYPT, PD_ECDH_DEFAULT), 1);
		report(files[i]);
		assert_int_equal(freed_with_secret, 0);
		assert_int_equal(live_with_secret, 0);
	}
}

int main(void)
{
	sec_base = mmap(NULL, SEC_REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (sec_base == MAP_FAILED)
		return 77; /* skipped */
	/* Before libgcrypt's first allocation: pd_lib_init's GCRYCTL_INIT_SECMEM
	 * still makes (and locks) libgcrypt's pool, which then stays unused:
	 * every secure allocation comes here. */
	gcry_set_allocation_handler(h_malloc, h_malloc_secure, h_is_secure, h_realloc, h_free);
	assert_int_equal(pd_lib_init(0), 0);
	gcry_control(GCRYCTL_ENABLE_QUICK_RANDOM, 0);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_elgamal),
		cmocka_unit_test(test_p256_gcrypt),
		cmocka_unit_test(test_rsa_gcrypt),
	};
	int r = cmocka_run_group_tests(tests, NULL, NULL);
	pd_lib_deinit();
	return r;
}
