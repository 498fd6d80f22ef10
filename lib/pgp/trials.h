/* SPDX-License-Identifier: MIT */
/*
 * The key-trial policy [runs on workers]: which (key, PKESK) pairs and
 * which SKESKs a message tries, in which order and within which caps, and
 * how the session key is picked from them without branching on a secret.
 *
 *  - PKESKs that go with the container and name a key held come first,
 *    then anonymous (wildcard) ones against every key of a compatible
 *    algorithm; max_key_trials caps them all.  With a binding
 *    (pd_msg_bind) only the keys bound to it take part, as if the ring
 *    held no other: an unbound key is never tried, so nothing of the
 *    reply depends on it.  Every planned trial runs; the
 *    first whose decoding passed is taken in constant time, the first
 *    trial's implicit-rejection key when none did (the container fails
 *    then, in the same way and time as for any wrong key).  A trial out of
 *    memory ends them all as -ENOMEM, whatever the others gave (the same
 *    for SKESKs): retryable, and no word of which decoded.  When no trial
 *    ran and a wildcard was among them (its ciphertext fits none of our
 *    keys, public: RSA c >= n, another curve's point), a random key goes
 *    on: an anonymous message for someone else always ends as INTEGRITY
 *    (out of memory or an internal error is said as such instead).
 *  - SKESKs only when no PKESK trial fits and a password was given: the
 *    plan (at most max_skesk_trials, each within the per-derivation caps,
 *    all within max_kdf_mib) comes from the packets alone, before any
 *    derivation; a v4 ESK's check is a mask, never a verdict.
 *
 * Everything a plan looks at is public (the outer packets); what a trial
 * yields is secret until the container's integrity check.
 */
#pragma once
#include "pgp/key.h"
#include "pgp/skesk.h"
#include "pgp/unwrap.h"

struct pd_esk {              /* a collected session key packet */
	uint8_t tag;             /* 1 PKESK, 3 SKESK */
	size_t len;
	uint8_t *body;
};

struct pd_trials {           /* what a message offers the trials: all public */
	const struct pd_esk *esks;
	size_t n_esk;
	uint8_t container, container_version;
	uint8_t hdr_sym_algo;    /* the cipher an AEAD header names (else 0) */
	const struct pd_limits *lim;
	const int *cancel;       /* nonzero (atomic load): stop before the next trial */
	struct pd_budget *budget; /* Argon2 memory is taken from it during a derivation */
	const char *bind;        /* pd_msg_bind(): only keys bound to these n_bind values */
	size_t n_bind;
};

struct pd_trial_result {
	uint8_t key_fpr[32];     /* the (sub)key taken; secret until the container verifies */
	uint8_t key_fpr_len;
	uint8_t pk_algo;         /* 0: a password opened it */
	size_t n_fit;            /* PKESKs that go with the container */
	char detail[256];        /* the sentence of an error */
};

/** Whether p names a key of kr (by key ID, or fingerprint for a v6 PKESK)
 * of a compatible algorithm and bound to the n_bind values of bind
 * (pd_key_bound): a PKESK the trials would try.  Public data only. */
PD_HIDDEN bool pd_trials_names_held_key(const struct pd_keyring *kr, const struct pd_pkesk *p, const char *bind,
                                        size_t n_bind);
/** Private-key trials: 0 with *sk chosen, 1 when no trial fits (the
 * caller turns to passwords, or reports no key), or an error with
 * res->detail (-ECANCELED, -ENOMEM, the public reason every trial failed). */
PD_HIDDEN int pd_trials_pkesk(const struct pd_trials *t, const struct pd_keyring *kr, struct pd_worker *w,
                              struct pd_sesskey *sk, struct pd_trial_result *res);
/** Password trials: 0 with *sk chosen (maybe a random key, see above), or
 * an error with res->detail (PD_ELIMIT from the plan, PD_EBADPASS when
 * every check was an authenticated one and failed, PD_EUNSUPPORTED, ...). */
PD_HIDDEN int pd_trials_skesk(const struct pd_trials *t, const char *pw, size_t pwlen, struct pd_worker *w,
                              struct pd_sesskey *sk, struct pd_trial_result *res);
