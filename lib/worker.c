/* SPDX-License-Identifier: MIT */
/* Per-thread handle cache: see worker.h. */
#include <assert.h>
#include <stdatomic.h>

#include "worker.h"

#define CACHE_MAX 16
#define BLOCKS_MAX 4

struct slot {
	int kind; /* 0 empty, 1 cipher, 2 md */
	int algo, mode;
	unsigned flags;
	void *h;
};

/* A secure block between messages: wiped, so all zero. */
struct block {
	size_t len; /* 0: empty */
	void *p;
};

struct pd_worker {
	unsigned index;
	const struct pd_helper *helper;
	struct slot slots[CACHE_MAX];
	struct block blocks[BLOCKS_MAX];
	unsigned evict; /* the block a full cache frees next */
};

/* Per-key state kept per worker index: see worker.h.  Taken by the worker
 * itself, given back by whichever thread frees a key. */
static atomic_uint key_states[PD_MAX_WORKERS];
static atomic_uint key_states_cap = PD_WORKER_KEY_STATES;

bool pd_worker_key_state_take(unsigned index)
{
	if (index >= PD_MAX_WORKERS)
		return false;
	unsigned v = atomic_load(&key_states[index]), cap = atomic_load(&key_states_cap);
	do {
		if (v >= cap)
			return false;
	} while (!atomic_compare_exchange_weak(&key_states[index], &v, v + 1));
	return true;
}

void pd_worker_key_state_give(unsigned index)
{
	if (index >= PD_MAX_WORKERS)
		return;
	unsigned old = atomic_fetch_sub(&key_states[index], 1);
	assert(old > 0);
	(void)old;
}

unsigned pd__worker_key_states(unsigned index) { return index < PD_MAX_WORKERS ? atomic_load(&key_states[index]) : 0; }

void pd__worker_key_states_cap(unsigned cap) { atomic_store(&key_states_cap, cap ? cap : PD_WORKER_KEY_STATES); }

static atomic_uint inject_nomem; /* pd__worker_inject_nomem: takes to go, the last one fails */

unsigned pd__worker_inject_nomem(unsigned nth) { return atomic_exchange(&inject_nomem, nth); }

/* Does this take fail, for a test? */
static bool injected(void)
{
	unsigned v = atomic_load_explicit(&inject_nomem, memory_order_relaxed);
	while (v && !atomic_compare_exchange_weak(&inject_nomem, &v, v - 1))
		;
	return v == 1;
}

int pd_err_from_gcry(gcry_error_t e)
{
	switch (gcry_err_code(e)) {
	case GPG_ERR_NO_ERROR: return 0;
	case GPG_ERR_ENOMEM: return -ENOMEM;
	case GPG_ERR_CHECKSUM: return PD_EINTEGRITY;
	case GPG_ERR_CIPHER_ALGO: case GPG_ERR_DIGEST_ALGO: case GPG_ERR_PUBKEY_ALGO:
	case GPG_ERR_NOT_SUPPORTED: case GPG_ERR_UNKNOWN_CURVE:
		return PD_EUNSUPPORTED;
	case GPG_ERR_INV_LENGTH: case GPG_ERR_INV_OBJ: case GPG_ERR_INV_VALUE:
	case GPG_ERR_BAD_MPI: case GPG_ERR_INV_DATA:
		return PD_EMALFORMED;
	default: return PD_EINTERNAL;
	}
}

int pd_worker_new(struct pd_worker **ret, unsigned index)
{
	if (index >= PD_MAX_WORKERS)
		return -EINVAL;
	struct pd_worker *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->index = index;
	*ret = w;
	return 0;
}

struct pd_worker *pd_worker_free(struct pd_worker *w)
{
	if (!w)
		return NULL;
	for (size_t i = 0; i < CACHE_MAX; i++) {
		if (w->slots[i].kind == 1)
			gcry_cipher_close(w->slots[i].h);
		else if (w->slots[i].kind == 2)
			gcry_md_close(w->slots[i].h);
	}
	for (size_t i = 0; i < BLOCKS_MAX; i++)
		gcry_free(w->blocks[i].p); /* wiped when given back */
	free(w);
	return NULL;
}

unsigned pd_worker_index(const struct pd_worker *w)
{
	return w ? w->index : PD_MAX_WORKERS; /* no worker: one-off state, never a worker's slot */
}

const struct pd_helper *pd_worker_helper(const struct pd_worker *w)
{
	return w ? w->helper : NULL;
}

void pd_worker_set_helper(struct pd_worker *w, const struct pd_helper *h)
{
	if (w)
		w->helper = h;
}

static void *take(struct pd_worker *w, int kind, int algo, int mode, unsigned flags)
{
	if (!w)
		return NULL;
	for (size_t i = 0; i < CACHE_MAX; i++) {
		struct slot *s = &w->slots[i];
		if (s->kind == kind && s->algo == algo && s->mode == mode && s->flags == flags) {
			void *h = s->h;
			s->kind = 0;
			s->h = NULL;
			return h;
		}
	}
	return NULL;
}

/* Cache h; returns false when there is no room (caller closes it). */
static bool give(struct pd_worker *w, int kind, void *h, int algo, int mode, unsigned flags)
{
	if (!w)
		return false;
	for (size_t i = 0; i < CACHE_MAX; i++) {
		struct slot *s = &w->slots[i];
		if (s->kind == 0) {
			*s = (struct slot){ kind, algo, mode, flags, h };
			return true;
		}
	}
	return false;
}

int pd_worker_take_cipher(struct pd_worker *w, int algo, int mode, unsigned flags, gcry_cipher_hd_t *ret)
{
	if (injected())
		return -ENOMEM;
	gcry_cipher_hd_t h = take(w, 1, algo, mode, flags);
	if (!h) {
		gcry_error_t e = gcry_cipher_open(&h, algo, mode, flags | GCRY_CIPHER_SECURE);
		if (e)
			return pd_err_from_gcry(e);
	}
	*ret = h;
	return 0;
}

void pd_worker_give_cipher(struct pd_worker *w, gcry_cipher_hd_t h, int algo, int mode, unsigned flags)
{
	if (!h)
		return;
	/* gcry_cipher_reset clears the IV/state but keeps the key schedule; the
	 * next user always sets its own key, so nothing leaks between messages
	 * beyond what setkey overwrites.  Close instead when the cache is full. */
	gcry_cipher_reset(h);
	if (!give(w, 1, h, algo, mode, flags))
		gcry_cipher_close(h);
}

int pd_worker_take_md(struct pd_worker *w, int algo, unsigned flags, gcry_md_hd_t *ret)
{
	if (injected())
		return -ENOMEM;
	gcry_md_hd_t h = take(w, 2, algo, 0, flags);
	if (!h) {
		gcry_error_t e = gcry_md_open(&h, algo, flags | GCRY_MD_FLAG_SECURE);
		if (e)
			return pd_err_from_gcry(e);
	}
	*ret = h;
	return 0;
}

void pd_worker_give_md(struct pd_worker *w, gcry_md_hd_t h, int algo, unsigned flags)
{
	if (!h)
		return;
	gcry_md_reset(h);
	if (!give(w, 2, h, algo, 0, flags))
		gcry_md_close(h);
}

void *pd_worker_take_secure(struct pd_worker *w, size_t len)
{
	if (injected())
		return NULL;
	for (size_t i = 0; w && i < BLOCKS_MAX; i++)
		if (w->blocks[i].len == len) {
			void *p = w->blocks[i].p;
			w->blocks[i] = (struct block){ 0 };
			return p;
		}
	return gcry_calloc_secure(1, len);
}

void pd_worker_give_secure(struct pd_worker *w, void *p, size_t len)
{
	if (!p)
		return;
	pd_wipe(p, len);
	if (!w) {
		gcry_free(p);
		return;
	}
	for (size_t i = 0; i < BLOCKS_MAX; i++)
		if (!w->blocks[i].len) {
			w->blocks[i] = (struct block){ len, p };
			return;
		}
	/* Full: a length no message asks for any more (a key of another size
	 * was used once) must not keep its place for ever. */
	struct block *b = &w->blocks[w->evict++ % BLOCKS_MAX];
	gcry_free(b->p);
	*b = (struct block){ len, p };
}
