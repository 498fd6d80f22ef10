/* SPDX-License-Identifier: MIT */
/*
 * pd_keyset: the daemon's snapshot of loaded secret keys, a pd_keyring plus
 * the list of fingerprints for the KEYS answer.  Built whole (blocking file
 * reads and S2K work, so off the loop thread) and immutable afterwards;
 * shared by reference: the daemon holds the current one, every request holds
 * the one it started with, so a reload swaps the pointer and in-flight
 * messages finish on the old set.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct pd_config;
struct pd_keyring;
struct pd_keyset;
struct pd_keyinfo;
struct pd_keyinfos;

/** Load every key file of the config (--key, then --keydir), each unlocked
 * with its passphrase (key-passphrase, FILE.passphrase, passphrase-file:
 * see keys.c).  Unusable keys and files are skipped with a warning
 * (strict-keys: they fail the load).  All or nothing: any failure, and a
 * load that leaves no decryption key, leaves *ret untouched and writes why
 * to err.  Blocking: call from a helper thread or before the loop.
 * workers: the pool's threads (0: PD_MAX_WORKERS); each key keeps prepared
 * per-worker state for that many (pd_keyring_set_workers). */
int pd_keyset_load(struct pd_keyset **ret, const struct pd_config *c, unsigned workers, char *err, size_t errlen);
/** Tests: the key files whose unlock step ran (read, S2K, key checks) in
 * the loads since the last call. */
size_t pd__keyset_files_unlocked(void);
/** Tests: the nth ordinary allocation of a load's unlock step from now on
 * (a key file's own ring, the record of a key it skips) fails as out of
 * memory; 0 disarms.  Returns the allocations that were still to go (0
 * after an injection: it fired). */
unsigned pd__keyset_inject_nomem(unsigned nth);
/** The daemon is stopping: a load in progress (a reload) unlocks no
 * further key file and fails with -ECANCELED (the files being unlocked
 * finish their S2K first).  Any thread; final. */
void pd_keyset_load_cancel(void);
/** secmem-size 0 (the default): the secure memory the key files of c
 * want, at start, for two sets of keys (a reload's new beside the old).
 * Twice the bytes of the key files (*ret_times 2), three times when an RSA
 * or ECDH backend is libgcrypt's (3: its keys' MPIs are in libgcrypt's
 * pool), and 1M for the messages in flight, rounded up to a MiB, at least
 * 4M.  Stats the files, reads none. */
size_t pd_keyset_secmem_auto(const struct pd_config *c, uint64_t *ret_bytes, size_t *ret_files, unsigned *ret_times);
/** libgcrypt went on in unlocked memory since the last call (its one
 * warning, pd_secmem_overflow_warnings): log it, as an error, once.  For a
 * timer on the loop. */
void pd_keyset_secmem_watch(void);
/** Take a reference (any thread). */
struct pd_keyset *pd_keyset_ref(struct pd_keyset *ks);
/** Drop a reference (any thread); at zero the set is freed (and wiped) on
 * a thread of its own, never the caller's: freeing 10,000 keys takes a
 * tenth of a second and more.  Accepts NULL, returns NULL. */
struct pd_keyset *pd_keyset_unref(struct pd_keyset *ks);
/** Wait until every set whose last reference was dropped is freed and its
 * thread has ended, joined (at exit, before pd_lib_deinit). */
void pd_keyset_wait_freed(void);
/** The key ring, for pd_msg_recover_key(). */
const struct pd_keyring *pd_keyset_ring(const struct pd_keyset *ks);
/** Number of decryption-capable (sub)keys. */
size_t pd_keyset_count(const struct pd_keyset *ks);
/** One line per key: "FPR ALGO BITS PRIMARY-FPR\n", NUL-terminated, owned by ks. */
const char *pd_keyset_listing(const struct pd_keyset *ks);
/** The public facts (pd_keyinfo) of the set's keys, in its order, with a
 * reference of the caller's: they outlive the set while held, and hold
 * none of its secrets (a KEYS listing half sent keeps these, not the set). */
struct pd_keyinfos *pd_keyset_infos(const struct pd_keyset *ks);
/** The entries, *ret_n of them. */
const struct pd_keyinfo *pd_keyinfos_get(const struct pd_keyinfos *ki, size_t *ret_n);
/** The addresses entry i is bound to (pd_keyring_addresses: a NUL after
 * each) in *ret; their length. */
size_t pd_keyinfos_addresses(const struct pd_keyinfos *ki, size_t i, const char **ret);
/** Drop a reference (any thread); accepts NULL, returns NULL. */
struct pd_keyinfos *pd_keyinfos_unref(struct pd_keyinfos *ki);
/** The files the load read (key files and passphrase files), in the order
 * read, *ret_n of them; owned by ks. */
const char *const *pd_keyset_files(const struct pd_keyset *ks, size_t *ret_n);
/** Log which keys (by fingerprint) are in new and not in old ("added") and
 * the other way ("removed"), or that the keys are unchanged.  No I/O. */
void pd_keyset_log_changes(const struct pd_keyset *old, const struct pd_keyset *new);
