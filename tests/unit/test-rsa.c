/* SPDX-License-Identifier: MIT */
/*
 * RSA backends: OpenSSL and libgcrypt give the same raw c^d mod n, on
 * random round trips and on a fixed PKESK that GnuPG wrote
 * (tests/data/keys/rsa2048-msg.gpg, encrypted to the subkey of
 * rsa2048.gpg), including from several worker threads at once; and the
 * split CRT path (PD_RSA_SPLIT=1) through a helper that runs the q half on
 * a real second thread, one that refuses, and one that never takes it.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <gcrypt.h>
#include <openssl/crypto.h>

#include "pd-config.h"
#include "pgp/rsa.h"
#include "worker.h"

static uint8_t *load(const char *name, size_t *ret_len)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/keys/%s", PD_TEST_DATA, name);
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	uint8_t *buf = malloc(1 << 16);
	assert_non_null(buf);
	size_t n = fread(buf, 1, 1 << 16, f);
	fclose(f);
	assert_true(n > 0 && n < (1 << 16));
	*ret_len = n;
	return buf;
}

static struct pd_keyring *ring(enum pd_rsa_backend b)
{
	size_t len;
	uint8_t *buf = load("rsa2048.gpg", &len);
	struct pd_keyring *kr;
	char detail[256];
	assert_int_equal(pd_keyring_new(&kr, b), 0);
	/* the subkey only: the primary's key flags are certify+sign */
	assert_int_equal(pd_keyring_add(kr, buf, len, NULL, 0, detail, sizeof(detail)), 1);
	free(buf);
	return kr;
}

/* The encryption subkey 220D6AE0...8DFB60D40DBB7820, the only key. */
static const struct pd_key *subkey(struct pd_keyring *kr)
{
	const struct pd_key *k = pd__keyring_get(kr, 0);
	const uint8_t kid[8] = { 0x8d, 0xfb, 0x60, 0xd4, 0x0d, 0xbb, 0x78, 0x20 };
	assert_non_null(k);
	assert_memory_equal(k->keyid, kid, 8);
	return k;
}

static void test_fixed_pkesk(void **state)
{
	(void)state;
	size_t len;
	uint8_t *msg = load("rsa2048-msg.gpg", &len);
	/* old-format tag 1, 2-octet length: 85 01 0c, v3, key ID, algo 1, MPI */
	assert_int_equal(msg[0], 0x85);
	assert_int_equal(msg[3], 3);
	assert_int_equal(msg[12], 1);
	size_t bits = pd_be16(msg + 13), clen = (bits + 7) / 8;
	const uint8_t *c = msg + 15;
	assert_int_equal(clen, 256);

	struct pd_keyring *ko = ring(PD_RSA_OPENSSL), *kg = ring(PD_RSA_GCRYPT);
	const struct pd_key *a = subkey(ko), *b = subkey(kg);
	assert_int_equal(a->rsa_backend, PD_RSA_OPENSSL);
	assert_int_equal(b->rsa_backend, PD_RSA_GCRYPT);
	uint8_t oa[256], ob[256];
	assert_int_equal(pd_rsa_decrypt_raw(a, 0, NULL, c, clen, oa, 256), 0);
	assert_non_null(a->rsa_ctx[0]); /* the worker's context was made lazily */
	assert_int_equal(pd_rsa_decrypt_raw(b, 0, NULL, c, clen, ob, 256), 0);
	assert_memory_equal(oa, ob, 256);
	/* EME-PKCS1-v1_5: 00 02 PS(nonzero, >= 8) 00 algo key csum16 */
	assert_int_equal(oa[0], 0);
	assert_int_equal(oa[1], 2);
	size_t i = 2;
	while (i < 256 && oa[i])
		i++;
	assert_true(i >= 10 && i < 256);
	size_t mlen = 256 - i - 1;
	const uint8_t *m = oa + i + 1;
	assert_int_equal(mlen, 1 + 32 + 2); /* AES-256 session key */
	assert_int_equal(m[0], 9);
	uint32_t s = 0;
	for (size_t j = 1; j < 33; j++)
		s += m[j];
	assert_int_equal((uint16_t)s, pd_be16(m + 33));

	/* Same result through another worker slot and the one-off path. */
	uint8_t oc[256];
	assert_int_equal(pd_rsa_decrypt_raw(a, 255, NULL, c, clen, oc, 256), 0);
	assert_memory_equal(oa, oc, 256);
	assert_int_equal(pd_rsa_decrypt_raw(a, PD_MAX_WORKERS + 5, NULL, c, clen, oc, 256), 0);
	assert_memory_equal(oa, oc, 256);

	/* Leading zero octets on the ciphertext are accepted. */
	uint8_t cz[260] = { 0 };
	memcpy(cz + 4, c, clen);
	assert_int_equal(pd_rsa_decrypt_raw(b, 1, NULL, cz, sizeof(cz), oc, 256), 0);
	assert_memory_equal(oa, oc, 256);

	pd_keyring_free(ko);
	pd_keyring_free(kg);
	free(msg);
}

/* pd_keyring_set_workers: a key keeps state for that many workers only
 * (an RSA key held 256 slots, 4 KiB, whatever the worker count); a worker
 * past them decrypts the same with state made per operation. */
static void test_worker_slots(void **state)
{
	(void)state;
	size_t len, klen;
	uint8_t *msg = load("rsa2048-msg.gpg", &len);
	const uint8_t *c = msg + 15;
	klen = 256;
	uint8_t *buf = load("rsa2048.gpg", &len);
	struct pd_keyring *kr, *other;
	char detail[256];
	assert_int_equal(pd_keyring_new(&kr, PD_RSA_OPENSSL), 0);
	assert_int_equal(pd_keyring_set_workers(kr, 0), -EINVAL);
	assert_int_equal(pd_keyring_set_workers(kr, PD_MAX_WORKERS + 1), -EINVAL);
	assert_int_equal(pd_keyring_set_workers(kr, 2), 0);
	assert_int_equal(pd_keyring_add(kr, buf, len, NULL, 0, detail, sizeof(detail)), 1);
	assert_int_equal(pd_keyring_set_workers(kr, 3), -EBUSY);
	const struct pd_key *k = subkey(kr);
	assert_int_equal(k->slots, 2);
	uint8_t o1[256], o2[256], o3[256];
	/* each filled slot is counted for its worker (worker.h), and given back when the key goes */
	unsigned b0 = pd__worker_key_states(0), b1 = pd__worker_key_states(1), b2 = pd__worker_key_states(2);
	assert_int_equal(pd_rsa_decrypt_raw(k, 1, NULL, c, klen, o1, klen), 0);
	assert_non_null(k->rsa_ctx[1]);
	assert_null(k->rsa_ctx[0]);
	assert_int_equal(pd__worker_key_states(1), b1 + 1);
	assert_int_equal(pd_rsa_decrypt_raw(k, 2, NULL, c, klen, o2, klen), 0);
	assert_memory_equal(o1, o2, klen);
	assert_int_equal(pd__worker_key_states(2), b2); /* past the slots: a one-off */
	assert_int_equal(pd_rsa_decrypt_raw(k, 0, NULL, c, klen, o3, klen), 0);
	assert_memory_equal(o1, o3, klen);
	assert_non_null(k->rsa_ctx[0]);
	assert_int_equal(pd__worker_key_states(0), b0 + 1);
	/* rings of different worker counts do not merge */
	assert_int_equal(pd_keyring_new(&other, PD_RSA_OPENSSL), 0);
	assert_int_equal(pd_keyring_merge(kr, other, detail, sizeof(detail)), -EINVAL);
	assert_int_equal(pd_keyring_set_workers(other, 2), 0);
	assert_int_equal(pd_keyring_merge(kr, other, detail, sizeof(detail)), 0);
	/* a ring left at the default keeps PD_MAX_WORKERS slots */
	struct pd_keyring *dflt = ring(PD_RSA_OPENSSL);
	assert_int_equal(subkey(dflt)->slots, PD_MAX_WORKERS);
	pd_keyring_free(dflt);
	pd_keyring_free(kr);
	assert_int_equal(pd__worker_key_states(0), b0);
	assert_int_equal(pd__worker_key_states(1), b1);
	free(buf);
	free(msg);
}

static int by_address(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)*(void *const *)a, y = (uintptr_t)*(void *const *)b;
	return x < y ? -1 : x > y;
}

/* A key that does not fit in OpenSSL's secure heap is refused with
 * -ENOMEM, whichever OpenSSL step runs out: the daemon turns that into "set
 * secmem-size = ..." and anything else into "internal error".  The heap is
 * filled with 16-octet blocks, which are then given back in address order,
 * so that the free room grows in 16-octet steps, and the key is tried at
 * each step until it loads.  (EVP_PKEY_fromdata running out said
 * PD_EINTERNAL: test_many_keys' secmem-size test failed 9 times in 80.) */
static void test_secure_heap_full(void **state)
{
	(void)state;
	size_t len, total, used, cap = 1 << 17, n = 0;
	uint8_t *buf = load("rsa2048.gpg", &len);
	void **blocks = malloc(cap * sizeof(*blocks));
	char detail[256];
	assert_non_null(blocks);
	pd_secure_heap(&total, &used);
	assert_true(total > 0);
	while (n < cap && (blocks[n] = OPENSSL_secure_malloc(16)) != NULL)
		n++;
	assert_true(n < cap);
	pd_secure_heap(&total, &used);
	assert_int_equal(used, total);
	qsort(blocks, n, sizeof(*blocks), by_address);
	int r = -ENOMEM;
	size_t freed = 0, nomem = 0;
	for (; freed < n && r == -ENOMEM; freed++) {
		OPENSSL_secure_free(blocks[freed]);
		struct pd_keyring *kr;
		if (pd_keyring_new(&kr, PD_RSA_OPENSSL) || pd_keyring_set_workers(kr, 1))
			break;
		r = pd_keyring_add(kr, buf, len, NULL, 0, detail, sizeof(detail));
		nomem += r == -ENOMEM;
		pd_keyring_free(kr);
	}
	for (size_t i = freed; i < n; i++) /* the heap back before any assertion */
		OPENSSL_secure_free(blocks[i]);
	free(blocks);
	free(buf);
	print_message("RSA-2048 key: -ENOMEM at %zu sizes, then %d (%s) with %zu octets of the heap free\n", nomem, r,
	              detail, freed * 16);
	assert_int_equal(r, 1);
	/* it ran out at many places before it fitted, in 16-octet steps */
	assert_true(nomem > 64);
}

static void test_round_trips(void **state)
{
	(void)state;
	struct pd_keyring *ko = ring(PD_RSA_OPENSSL), *kg = ring(PD_RSA_GCRYPT);
	for (size_t which = 0; which < pd__keyring_n(ko); which++) {
		const struct pd_key *a = pd__keyring_get(ko, which), *b = pd__keyring_get(kg, which);
		unsigned nbits = gcry_mpi_get_nbits(a->n);
		size_t klen = (nbits + 7) / 8;
		for (int t = 0; t < 20; t++) {
			gcry_mpi_t m = gcry_mpi_new(0), c = gcry_mpi_new(0);
			/* include small m (result with many leading zero octets) */
			if (t == 0)
				gcry_mpi_set_ui(m, 1);
			else if (t == 1)
				gcry_mpi_set_ui(m, 0);
			else {
				gcry_mpi_randomize(m, nbits - (unsigned)(t * 37 % 300), GCRY_WEAK_RANDOM);
				gcry_mpi_clear_highbit(m, nbits - 1);
			}
			gcry_mpi_powm(c, m, a->e, a->n);
			uint8_t cb[512], want[512], oa[512], ob[512];
			size_t cl;
			assert_int_equal(gcry_mpi_print(GCRYMPI_FMT_USG, cb, sizeof(cb), &cl, c), 0);
			memset(want, 0, klen);
			size_t ml = (gcry_mpi_get_nbits(m) + 7) / 8;
			if (ml)
				assert_int_equal(gcry_mpi_print(GCRYMPI_FMT_USG, want + klen - ml, ml, NULL, m), 0);
			assert_int_equal(pd_rsa_decrypt_raw(a, (unsigned)t, NULL, cb, cl, oa, klen), 0);
			assert_int_equal(pd_rsa_decrypt_raw(b, (unsigned)t, NULL, cb, cl, ob, klen), 0);
			assert_memory_equal(oa, want, klen);
			assert_memory_equal(ob, want, klen);
			gcry_mpi_release(m);
			gcry_mpi_release(c);
		}
	}
	pd_keyring_free(ko);
	pd_keyring_free(kg);
}

static void test_public_errors(void **state)
{
	(void)state;
	struct pd_keyring *ko = ring(PD_RSA_OPENSSL), *kg = ring(PD_RSA_GCRYPT);
	const struct pd_key *keys[2] = { subkey(ko), subkey(kg) };
	for (int i = 0; i < 2; i++) {
		const struct pd_key *k = keys[i];
		uint8_t nb[256], out[256], big[257];
		size_t nl;
		assert_int_equal(gcry_mpi_print(GCRYMPI_FMT_USG, nb, sizeof(nb), &nl, k->n), 0);
		assert_int_equal(nl, 256);
		/* c == n and c > n: refused the same way by both backends */
		assert_int_equal(pd_rsa_decrypt_raw(k, 0, NULL, nb, nl, out, 256), PD_EMALFORMED);
		memset(big, 0xFF, sizeof(big));
		assert_int_equal(pd_rsa_decrypt_raw(k, 0, NULL, big, 256, out, 256), PD_EMALFORMED);
		assert_int_equal(pd_rsa_decrypt_raw(k, 0, NULL, big, 257, out, 256), PD_EMALFORMED);
		/* wrong output size is a caller bug */
		assert_int_equal(pd_rsa_decrypt_raw(k, 0, NULL, nb, 10, out, 255), PD_EINTERNAL);
	}
	pd_keyring_free(ko);
	pd_keyring_free(kg);
}

static void test_default_backend(void **state)
{
	(void)state;
	const char *old = getenv("PD_RSA_BACKEND");
	char *save = old ? strdup(old) : NULL;
	setenv("PD_RSA_BACKEND", "gcrypt", 1);
	assert_int_equal(pd_rsa_default_backend(), PD_RSA_GCRYPT);
	struct pd_keyring *kr = ring(PD_RSA_DEFAULT);
	assert_int_equal(subkey(kr)->rsa_backend, PD_RSA_GCRYPT);
	pd_keyring_free(kr);
	setenv("PD_RSA_BACKEND", "openssl", 1);
	assert_int_equal(pd_rsa_default_backend(), PD_RSA_OPENSSL);
	kr = ring(PD_RSA_DEFAULT);
	assert_int_equal(subkey(kr)->rsa_backend, PD_RSA_OPENSSL);
	pd_keyring_free(kr);
	unsetenv("PD_RSA_BACKEND");
	assert_int_equal(pd_rsa_default_backend(), PD_RSA_DEFAULT_BACKEND);
	if (save) {
		setenv("PD_RSA_BACKEND", save, 1);
		free(save);
	}
}

struct thr {
	const struct pd_key *k;
	unsigned worker;
	const uint8_t *c;
	size_t clen;
	uint8_t out[256];
	int r;
};

static void *thr_main(void *arg)
{
	struct thr *t = arg;
	for (int i = 0; i < 20 && t->r == 0; i++)
		t->r = pd_rsa_decrypt_raw(t->k, t->worker, NULL, t->c, t->clen, t->out, 256);
	return NULL;
}

/* Per-worker contexts: four threads, four slots, one key. */
static void test_threads(void **state)
{
	(void)state;
	size_t len;
	uint8_t *msg = load("rsa2048-msg.gpg", &len);
	for (int be = PD_RSA_OPENSSL; be <= PD_RSA_GCRYPT; be++) {
		struct pd_keyring *kr = ring((enum pd_rsa_backend)be);
		const struct pd_key *k = subkey(kr);
		uint8_t ref[256];
		assert_int_equal(pd_rsa_decrypt_raw(k, 9, NULL, msg + 15, 256, ref, 256), 0);
		struct thr t[4];
		pthread_t th[4];
		for (unsigned i = 0; i < 4; i++) {
			t[i] = (struct thr){ .k = k, .worker = i, .c = msg + 15, .clen = 256 };
			assert_int_equal(pthread_create(&th[i], NULL, thr_main, &t[i]), 0);
		}
		for (unsigned i = 0; i < 4; i++) {
			pthread_join(th[i], NULL);
			assert_int_equal(t[i].r, 0);
			assert_memory_equal(t[i].out, ref, 256);
		}
		pd_keyring_free(kr);
	}
	free(msg);
}

/* A pd_helper with one thread and a one-task mailbox.  mode: 0 the thread
 * runs the task (finish() waits for it), 1 start() refuses, 2 start()
 * accepts but the thread never takes it (finish() then runs it on the
 * caller, as the pool does when no worker came). */
struct helper {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t th;
	struct pd_task *box;
	bool quit;
	int mode;
	unsigned starts, accepted, remote, inline_runs;
};

static void *helper_main(void *arg)
{
	struct helper *h = arg;
	pthread_mutex_lock(&h->lock);
	for (;;) {
		while (!h->quit && !(h->box && h->mode == 0 && h->box->state == 0))
			pthread_cond_wait(&h->cond, &h->lock);
		if (h->quit)
			break;
		struct pd_task *t = h->box;
		t->state = 1;
		pthread_mutex_unlock(&h->lock);
		t->fn(t->arg);
		pthread_mutex_lock(&h->lock);
		t->state = 2;
		h->remote++;
		pthread_cond_broadcast(&h->cond);
	}
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

static bool h_start(void *ctx, struct pd_task *t)
{
	struct helper *h = ctx;
	pthread_mutex_lock(&h->lock);
	h->starts++;
	bool ok = h->mode != 1 && !h->box;
	if (ok) {
		t->state = 0;
		h->box = t;
		h->accepted++;
		pthread_cond_broadcast(&h->cond);
	}
	pthread_mutex_unlock(&h->lock);
	return ok;
}

static void h_finish(void *ctx, struct pd_task *t)
{
	struct helper *h = ctx;
	pthread_mutex_lock(&h->lock);
	assert_ptr_equal(h->box, t);
	if (t->state == 0 && h->mode == 2) {
		h->box = NULL;
		h->inline_runs++;
		pthread_mutex_unlock(&h->lock);
		t->fn(t->arg);
		return;
	}
	while (t->state != 2)
		pthread_cond_wait(&h->cond, &h->lock);
	h->box = NULL;
	pthread_mutex_unlock(&h->lock);
}

/* c = m^e for a random m (every 4th with many leading zero octets). */
static void random_pair(const struct pd_key *k, int i, uint8_t *cb, size_t *cl, uint8_t *want, size_t klen)
{
	unsigned nbits = gcry_mpi_get_nbits(k->n);
	gcry_mpi_t m = gcry_mpi_new(0), c = gcry_mpi_new(0);
	gcry_mpi_randomize(m, i % 4 == 0 ? 64 : nbits, GCRY_WEAK_RANDOM);
	gcry_mpi_clear_highbit(m, nbits - 1);
	gcry_mpi_powm(c, m, k->e, k->n);
	assert_int_equal(gcry_mpi_print(GCRYMPI_FMT_USG, cb, 512, cl, c), 0);
	memset(want, 0, klen);
	size_t ml = (gcry_mpi_get_nbits(m) + 7) / 8;
	if (ml)
		assert_int_equal(gcry_mpi_print(GCRYMPI_FMT_USG, want + klen - ml, ml, NULL, m), 0);
	gcry_mpi_release(m);
	gcry_mpi_release(c);
}

/* A helper with no thread: every half runs on the caller. */
static bool refuse_task(void *ctx, struct pd_task *t)
{
	(void)ctx;
	(void)t;
	return false;
}

static void never_finish(void *ctx, struct pd_task *t)
{
	(void)ctx;
	(void)t;
	fail_msg("finish() without a start()");
}

static void test_split(void **state)
{
	(void)state;
	/* 70 operations per mode: the blinding pair is renewed every 32. */
	enum { OPS = 70 };
	assert_int_equal(setenv("PD_RSA_SPLIT", "1", 1), 0);
	struct pd_keyring *kr = ring(PD_RSA_OPENSSL);
	unsetenv("PD_RSA_SPLIT");
	const struct pd_key *k = subkey(kr);
	assert_non_null(k->rsa_crt);
	size_t klen = (gcry_mpi_get_nbits(k->n) + 7) / 8;
	/* the count is the process's: test_secure_heap_full's keys fail to split */
	unsigned long failures = pd_split_failures();

	for (int mode = 0; mode < 3; mode++) {
		struct helper h = { .mode = mode };
		pthread_mutex_init(&h.lock, NULL);
		pthread_cond_init(&h.cond, NULL);
		assert_int_equal(pthread_create(&h.th, NULL, helper_main, &h), 0);
		struct pd_helper ops = { .start = h_start, .finish = h_finish, .ctx = &h };
		for (int i = 0; i < OPS; i++) {
			uint8_t cb[512], want[512], out[512];
			size_t cl;
			random_pair(k, i, cb, &cl, want, klen);
			/* Workers 3 and PD_MAX_WORKERS (one-off state) alternate. */
			unsigned w = i % 2 ? 3 : PD_MAX_WORKERS;
			assert_int_equal(pd_rsa_decrypt_raw(k, w, &ops, cb, cl, out, klen), 0);
			assert_memory_equal(out, want, klen);
		}
		pthread_mutex_lock(&h.lock);
		h.quit = true;
		pthread_cond_broadcast(&h.cond);
		pthread_mutex_unlock(&h.lock);
		pthread_join(h.th, NULL);
		assert_int_equal(pd_split_failures(), failures); /* no result came from the EVP fallback */
		assert_int_equal(h.starts, OPS);
		assert_int_equal(h.accepted, mode == 1 ? 0 : OPS);
		assert_int_equal(h.remote, mode == 0 ? OPS : 0);
		assert_int_equal(h.inline_runs, mode == 2 ? OPS : 0);
		pthread_mutex_destroy(&h.lock);
		pthread_cond_destroy(&h.cond);
	}

	/* A fault in either half (or in recombination) is caught by the check
	 * m^e == c (mod p and mod q) and the result is redone on the EVP path:
	 * still byte-exact, and counted.  A fault in the q half leaves m mod p
	 * right, and one in the p half leaves m mod q right, so each of the two
	 * checks is needed. */
	struct pd_helper none = { .start = refuse_task, .finish = never_finish };
	/* One worker's blinding pairs over two refills of its stock (8 fresh
	 * pairs per inversion, each used 32 times): a wrong inverse anywhere
	 * would unblind to a wrong result. */
	for (int i = 0; i < 2 * 8 * 32 + 1; i++) {
		uint8_t cb[512], want[512], out[512];
		size_t cl;
		random_pair(k, 1000 + i, cb, &cl, want, klen);
		assert_int_equal(pd_rsa_decrypt_raw(k, 5, &none, cb, cl, out, klen), 0);
		assert_memory_equal(out, want, klen);
	}
	assert_int_equal(pd_split_failures(), failures);
	for (int half = 1; half <= 2; half++) {
		uint8_t cb[512], want[512], out[512];
		size_t cl;
		unsigned long before = pd_split_failures();
		random_pair(k, 100 + half, cb, &cl, want, klen);
		pd__rsa_inject_fault(half);
		assert_int_equal(pd_rsa_decrypt_raw(k, 3, &none, cb, cl, out, klen), 0);
		assert_memory_equal(out, want, klen);
		assert_int_equal(pd_split_failures(), before + 1);
		/* the injection was used up: the next operation splits cleanly */
		assert_int_equal(pd_rsa_decrypt_raw(k, 3, &none, cb, cl, out, klen), 0);
		assert_memory_equal(out, want, klen);
		assert_int_equal(pd_split_failures(), before + 1);
	}
	pd_keyring_free(kr);

	/* PD_RSA_SPLIT=0: the helper is never asked. */
	assert_int_equal(setenv("PD_RSA_SPLIT", "0", 1), 0);
	kr = ring(PD_RSA_OPENSSL);
	unsetenv("PD_RSA_SPLIT");
	k = subkey(kr);
	struct helper h = { .mode = 1 };
	struct pd_helper ops = { .start = h_start, .finish = h_finish, .ctx = &h };
	pthread_mutex_init(&h.lock, NULL);
	pthread_cond_init(&h.cond, NULL);
	uint8_t cb[512], want[512], out[512];
	size_t cl;
	random_pair(k, 1, cb, &cl, want, klen);
	assert_int_equal(pd_rsa_decrypt_raw(k, 0, &ops, cb, cl, out, klen), 0);
	assert_memory_equal(out, want, klen);
	assert_int_equal(h.starts, 0);
	pthread_mutex_destroy(&h.lock);
	pthread_cond_destroy(&h.cond);
	pd_keyring_free(kr);
}

/* OpenSSL's allocator, replaced in main() before any OpenSSL allocation: on
 * this thread, the fail_at-th allocation after arming fails. */
static _Thread_local unsigned long fail_at, allocs;
static bool ossl_faults;

static bool fails(void)
{
	return fail_at && ++allocs == fail_at;
}

static void *f_malloc(size_t n, const char *file, int line)
{
	(void)file;
	(void)line;
	return fails() ? NULL : malloc(n);
}

static void *f_realloc(void *p, size_t n, const char *file, int line)
{
	(void)file;
	(void)line;
	return fails() ? NULL : realloc(p, n);
}

static void f_free(void *p, const char *file, int line)
{
	(void)file;
	(void)line;
	free(p);
}

/* OpenSSL renews an RSA key's blinding every 32 operations; an allocation
 * of the renewal that fails leaves the pair inconsistent, and the next 31
 * EVP operations on the key succeeded with a wrong result: 32 messages
 * INTEGRITY (implicit rejection) for one transient malloc failure (the
 * open finding of daemon/README).  Each armed run of 33 operations fails
 * the nth allocation of every operation, so one of them is a renewal's
 * nth; whatever an armed operation returns, it is never a wrong result,
 * and the 40 unarmed operations after it are all right. */
static void test_evp_after_a_failed_allocation(void **state)
{
	(void)state;
	if (!ossl_faults)
		skip();
	struct pd_keyring *kr = ring(PD_RSA_OPENSSL);
	const struct pd_key *k = subkey(kr);
	size_t klen = (gcry_mpi_get_nbits(k->n) + 7) / 8;
	uint8_t cb[512], want[512], out[512];
	size_t cl;
	unsigned failed = 0, wrong = 0;
	for (unsigned long n = 1; n <= 40; n++) {
		for (int i = 0; i < 33; i++) {
			random_pair(k, i, cb, &cl, want, klen);
			allocs = 0;
			fail_at = n;
			int r = pd_rsa_decrypt_raw(k, 0, NULL, cb, cl, out, klen);
			fail_at = 0;
			failed += r != 0;
			wrong += r == 0 && memcmp(out, want, klen) != 0;
		}
		for (int i = 0; i < 40; i++) {
			random_pair(k, i, cb, &cl, want, klen);
			int r = pd_rsa_decrypt_raw(k, 0, NULL, cb, cl, out, klen);
			if (r != 0 || memcmp(out, want, klen) != 0)
				fail_msg("n=%lu: unarmed operation %d after the armed run: %d%s", n, i, r,
				         r ? "" : " and a wrong result");
		}
	}
	print_message("armed operations that failed: %u, wrong results: %u\n", failed, wrong);
	assert_true(failed > 0);
	assert_int_equal(wrong, 0);
	pd_keyring_free(kr);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fixed_pkesk),
		cmocka_unit_test(test_round_trips),
		cmocka_unit_test(test_worker_slots),
		cmocka_unit_test(test_secure_heap_full),
		cmocka_unit_test(test_public_errors),
		cmocka_unit_test(test_default_backend),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_split),
		cmocka_unit_test(test_evp_after_a_failed_allocation),
	};
	ossl_faults = CRYPTO_set_mem_functions(f_malloc, f_realloc, f_free) == 1;
	if (pd_lib_init(1 << 20))
		return 1;
	int r = cmocka_run_group_tests(tests, NULL, NULL);
	pd_lib_deinit();
	return r;
}
