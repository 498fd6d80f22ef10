/* SPDX-License-Identifier: MIT */
/*
 * Per-thread crypto context: a cache of opened libgcrypt cipher and hash
 * handles, lent to messages and given back when they end, so that no
 * message pays gcry_cipher_open()/gcry_md_open().  A handle is owned by
 * exactly one holder at a time (the worker's cache or one message), so no
 * lock is needed; a message may give a handle back to another worker than
 * the one it took it from.  The same for a few blocks of secure memory
 * (a message's scratch), which libgcrypt's pool would otherwise hand out
 * and take back under its one lock on every message; those are taken and
 * given back within one call, on one thread.
 */
#pragma once
#include <gcrypt.h>

#include "internal.h"

/** Index of this worker (selects per-worker RSA and ECDH contexts);
 * PD_MAX_WORKERS for no worker: state made per operation, never a slot. */
PD_HIDDEN unsigned pd_worker_index(const struct pd_worker *w);
/** This worker's helper (pd_worker_set_helper), or NULL; NULL w gives NULL. */
PD_HIDDEN const struct pd_helper *pd_worker_helper(const struct pd_worker *w);
/** Prepared per-key state a worker keeps (an OpenSSL context in its slot
 * of a key: pgp/key.h) is counted per worker index, at most
 * PD_WORKER_KEY_STATES keys each: past that a worker makes the state per
 * operation and frees it after (the same result, a little slower), so
 * what messages naming many keys make a worker keep is bounded by the
 * worker count, not by the ring's size times it (from the review: 2.6 KiB
 * per NIST key, 0.7 KiB per X25519 key, for every key a message names).
 * Take before filling a slot (false: make a one-off instead); give back
 * when the slot's state is freed, from any thread. */
#define PD_WORKER_KEY_STATES 1024
PD_HIDDEN bool pd_worker_key_state_take(unsigned index);
PD_HIDDEN void pd_worker_key_state_give(unsigned index);
/** Tests: the count of worker index, and a lower cap (0: the default). */
PD_HIDDEN unsigned pd__worker_key_states(unsigned index);
PD_HIDDEN void pd__worker_key_states_cap(unsigned cap);
/** Tests: the nth take (cipher, hash or secure block, on any worker or
 * none) from now on fails as out of memory; 0 disarms.  Returns the takes
 * that were still to go (0 after an injection: it fired). */
PD_HIDDEN unsigned pd__worker_inject_nomem(unsigned nth);
/** Take an opened cipher handle (GCRY_CIPHER_SECURE) for algo/mode/flags;
 * NULL w is allowed (opens a new one).  Returns 0 or a negative error. */
PD_HIDDEN int pd_worker_take_cipher(struct pd_worker *w, int algo, int mode, unsigned flags,
                                    gcry_cipher_hd_t *ret);
/** Give a cipher handle back (reset and cached, or closed if w is NULL or full). */
PD_HIDDEN void pd_worker_give_cipher(struct pd_worker *w, gcry_cipher_hd_t h, int algo, int mode, unsigned flags);
/** Same for hash handles (flags: 0 or GCRY_MD_FLAG_HMAC, always secure). */
PD_HIDDEN int pd_worker_take_md(struct pd_worker *w, int algo, unsigned flags, gcry_md_hd_t *ret);
PD_HIDDEN void pd_worker_give_md(struct pd_worker *w, gcry_md_hd_t h, int algo, unsigned flags);
/** A zeroed block of len octets of libgcrypt secure memory, from this
 * worker's cache when one of that length was given back (so a message's
 * scratch costs no trip through the pool's lock and block walk), else
 * gcry_calloc_secure.  NULL when out of secure memory. */
PD_HIDDEN void *pd_worker_take_secure(struct pd_worker *w, size_t len);
/** Give it back: wiped, then cached (a few blocks) or freed. */
PD_HIDDEN void pd_worker_give_secure(struct pd_worker *w, void *p, size_t len);
/** libgcrypt error to project error (the single conversion point for lib/). */
PD_HIDDEN int pd_err_from_gcry(gcry_error_t e);
