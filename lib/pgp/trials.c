/* SPDX-License-Identifier: MIT */
/* The key-trial policy: see trials.h. */
#include <gcrypt.h>

#include "pgp/algo.h"
#include "pgp/trials.h"

__attribute__((format(printf, 3, 4)))
static int failr(struct pd_trial_result *res, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(res->detail, sizeof(res->detail), fmt, ap);
	va_end(ap);
	return err;
}

static bool cancelled(const struct pd_trials *t)
{
	return t->cancel && __atomic_load_n(t->cancel, __ATOMIC_RELAXED);
}

static bool algo_compatible(uint8_t key_algo, uint8_t pkesk_algo)
{
	if ((key_algo == 1 || key_algo == 2) && (pkesk_algo == 1 || pkesk_algo == 2))
		return true;
	return key_algo == pkesk_algo;
}

static bool pkesk_names_key(const struct pd_pkesk *p, const struct pd_key *k)
{
	if (p->wildcard)
		return false;
	if (p->version == 6 && p->fpr_len)
		return p->fpr_len == k->fpr_len && !memcmp(p->fpr, k->fpr, k->fpr_len);
	return !memcmp(p->keyid, k->keyid, 8);
}

bool pd_trials_names_held_key(const struct pd_keyring *kr, const struct pd_pkesk *p, const char *bind,
                              size_t n_bind)
{
	const struct pd_key *k;
	if (p->wildcard)
		return false;
	for (size_t j = 0; (k = pd__keyring_by_keyid(kr, p->keyid, j)); j++)
		if (pkesk_names_key(p, k) && algo_compatible(k->pk_algo, p->pk_algo) && pd_key_bound(k, bind, n_bind))
			return true;
	return false;
}

/* Does the PKESK version go with the container?  (RFC 9580 §10.3.2.1) */
static bool pkesk_fits(const struct pd_trials *t, const struct pd_pkesk *p)
{
	if (t->container == 18 && t->container_version == 2)
		return p->version == 6;
	return p->version == 3;
}

struct trial {
	const struct pd_key *k;
	const struct pd_pkesk *p;
};

/* A failure's result: no session key, no key that opened it. */
static void scrub(struct pd_sesskey *sk, struct pd_trial_result *res)
{
	pd_wipe(sk, sizeof(*sk));
	pd_wipe(res->key_fpr, sizeof(res->key_fpr));
	res->key_fpr_len = 0;
	res->pk_algo = 0;
}

/* Copy src into dst where mask is all ones, in constant time. */
static void sesskey_sel(uint32_t mask, struct pd_sesskey *dst, const struct pd_sesskey *src)
{
	dst->algo = pd_ct_sel8(mask, src->algo, dst->algo);
	dst->len = pd_ct_sel8(mask, src->len, dst->len);
	for (size_t b = 0; b < sizeof(dst->key); b++)
		dst->key[b] = pd_ct_sel8(mask, src->key[b], dst->key[b]);
}

int pd_trials_pkesk(const struct pd_trials *t, const struct pd_keyring *kr, struct pd_worker *w,
                    struct pd_sesskey *sk, struct pd_trial_result *res)
{
	size_t nkeys = kr ? pd__keyring_n(kr) : 0;
	size_t max_trials = t->lim->max_key_trials ? t->lim->max_key_trials : 1;
	struct pd_pkesk *pk = calloc(t->n_esk ? t->n_esk : 1, sizeof(*pk));
	struct trial *tr = calloc(max_trials, sizeof(*tr));
	struct pd_sesskey *cand = pd_worker_take_secure(w, sizeof(*cand));
	size_t npk = 0, ntr = 0, nwild = 0;
	bool *bound = NULL; /* with a binding and wildcards: pd_key_bound of each key */
	int r = 0, last_err = 0;

	if (!pk || !tr || !cand) {
		r = failr(res, -ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < t->n_esk; i++)
		if (t->esks[i].tag == 1 && pd_pkesk_parse(t->esks[i].body, t->esks[i].len, &pk[npk]) == 0 &&
		    pkesk_fits(t, &pk[npk]))
			npk++;
	res->n_fit = npk;
	/* PKESKs naming a key we hold come first, then wildcards against every
	 * key, all capped by max_key_trials. */
	for (size_t i = 0; i < npk; i++) {
		if (pk[i].wildcard) {
			nwild++;
			continue;
		}
		const struct pd_key *k;
		for (size_t j = 0; (k = pd__keyring_by_keyid(kr, pk[i].keyid, j)); j++) {
			if (!pkesk_names_key(&pk[i], k) || !algo_compatible(k->pk_algo, pk[i].pk_algo) ||
			    !pd_key_bound(k, t->bind, t->n_bind))
				continue;
			if (ntr == max_trials) /* the cap: gpg takes 23 s on 1,000 wildcards */
				break;
			tr[ntr++] = (struct trial){ k, &pk[i] };
		}
	}
	/* Which keys the binding leaves, once: every wildcard goes through the
	 * whole ring, and a peer chooses both the wildcards (1,000) and the
	 * values (16), so asking each time cost 0.8 s a request on 5,000 keys. */
	if (nwild && t->n_bind && nkeys && !(bound = malloc(nkeys))) {
		r = failr(res, -ENOMEM, "out of memory");
		goto out;
	}
	for (size_t j = 0; bound && j < nkeys; j++)
		bound[j] = pd_key_bound(pd__keyring_get(kr, j), t->bind, t->n_bind);
	for (size_t i = 0; i < npk && nwild && ntr < max_trials; i++) {
		if (!pk[i].wildcard)
			continue;
		for (size_t j = 0; j < nkeys; j++) {
			const struct pd_key *k = pd__keyring_get(kr, j);
			if (!algo_compatible(k->pk_algo, pk[i].pk_algo) || (bound && !bound[j]))
				continue;
			if (ntr == max_trials) /* the cap: gpg takes 23 s on 1,000 wildcards */
				break;
			tr[ntr++] = (struct trial){ k, &pk[i] };
		}
	}
	if (ntr == 0) {
		r = 1;
		goto out;
	}

	/* Run every trial and pick the first good one without branching on
	 * the secret outcome: the work done does not depend on which (if any)
	 * succeeded.  When none did, the first trial's implicit-rejection key
	 * is used and the failure surfaces as an integrity error later.  A
	 * trial out of memory ends them all as -ENOMEM, whatever the others
	 * gave: it depends on memory, not on a secret, and it is retryable,
	 * which going on would hide (INTEGRITY when none of the others
	 * decoded); ending so only when none decoded would say whether one
	 * did. */
	uint32_t found = 0;
	bool any = false, wild_miss = false;
	int hard_err = 0; /* a bug: said as such when no trial ran */
	for (size_t i = 0; i < ntr; i++) {
		uint32_t ok = 0;
		uint8_t sym = 0;
		if (cancelled(t)) {
			r = failr(res, -ECANCELED, "cancelled by the caller");
			goto out;
		}
		if (tr[i].p->version == 6 || t->container == 20)
			sym = t->hdr_sym_algo;
		int e = pd_unwrap(w, tr[i].k, tr[i].p, sym, cand, &ok);
		if (e == -ENOMEM) {
			r = failr(res, e, "out of memory");
			goto out;
		}
		if (e < 0) { /* public reason: this trial does not count */
			last_err = e;
			if (e == PD_EINTERNAL)
				hard_err = e;
			/* A wildcard names no key, so its ciphertext not fitting this
			 * key (c >= n of another modulus, another curve's point) says
			 * only that it was for someone else: see below. */
			else if (tr[i].p->wildcard)
				wild_miss = true;
			continue;
		}
		uint32_t take = (!any ? 0xFFFFFFFFu : 0) | (ok & ~found);
		any = true;
		sesskey_sel(take, sk, cand);
		/* record the key that opened it (public once the message verifies) */
		for (size_t b = 0; b < 32; b++)
			res->key_fpr[b] = pd_ct_sel8(take, b < tr[i].k->fpr_len ? tr[i].k->fpr[b] : 0, res->key_fpr[b]);
		res->key_fpr_len = pd_ct_sel8(take, tr[i].k->fpr_len, res->key_fpr_len);
		res->pk_algo = pd_ct_sel8(take, tr[i].k->pk_algo, res->pk_algo);
		found |= ok;
	}
	if (!any && wild_miss && !hard_err) {
		/* No trial ran and a wildcard was among them: a random key goes
		 * on, and the message ends as INTEGRITY like every other anonymous
		 * message for someone else, whatever its ciphertext looked like to
		 * our keys (random from one message to the next).  A PKESK naming
		 * our key that failed its public checks beside it ends so too:
		 * deciding on it alone would bring the variation back. */
		sk->algo = t->hdr_sym_algo ? t->hdr_sym_algo : PD_IR_ALGO_V3;
		sk->len = (uint8_t)pd_sym_keylen(sk->algo);
		gcry_randomize(sk->key, sizeof(sk->key), GCRY_STRONG_RANDOM);
		any = true;
	}
	if (!any) {
		if (hard_err)
			last_err = hard_err;
		r = failr(res, last_err, "%s: cannot use the session key packet for key(s) held", pd_strerror(last_err));
		goto out;
	}
	if (t->container == 20) {
		/* The OCB packet names its cipher; a v3 session key carries one too.
		 * Take the header's, whatever the key said: a mismatch (like an
		 * implicit-rejection key) then fails at the first chunk's tag, in
		 * the same way and time as any other wrong key, instead of early. */
		sk->algo = t->hdr_sym_algo;
		sk->len = (uint8_t)pd_sym_keylen(t->hdr_sym_algo);
	}
	r = 0;
out:
	if (r < 0) /* a failure hands out no key, nor which trial opened one */
		scrub(sk, res);
	free(pk);
	free(tr);
	free(bound);
	pd_worker_give_secure(w, cand, sizeof(*cand));
	return r;
}

/* The session key from the SKESKs and the password.
 *
 * Plan first, from the packets alone (public): the SKESKs that go with the
 * container, each within the per-derivation caps, at most max_skesk_trials
 * of them, together within max_kdf_mib; a message asking for more is
 * refused before any work.  Then derive every planned one and take the
 * first whose check passed, in constant time: a v4 ESK's check (a known
 * cipher of the right size) is about unauthenticated octets.  When such a
 * check was among them, no verdict is given here: if none passed, a random
 * key of that cipher goes on and the container fails (INTEGRITY) in the
 * same way and time as with a wrong key.  Only when every check was public
 * (v5/v6 tags, v4 without ESK) is a wrong password PD_EBADPASS at once. */
int pd_trials_skesk(const struct pd_trials *t, const char *pw, size_t pwlen, struct pd_worker *w,
                    struct pd_sesskey *sk, struct pd_trial_result *res)
{
	/* SKESK v4 goes with SEIPD v1, v5 with the OCB packet, v6 with SEIPD v2 */
	const uint8_t want = t->container == 20 ? 5 : t->container_version == 2 ? 6 : 4;
	size_t *plan = calloc(t->n_esk ? t->n_esk : 1, sizeof(*plan));
	struct pd_sesskey *cand = pd_worker_take_secure(w, sizeof(*cand));
	struct pd_sesskey *fb = pd_worker_take_secure(w, sizeof(*fb));
	size_t nplan = 0;
	uint64_t work = 0;
	uint8_t secret_cipher = 0; /* cipher of the first v4 SKESK with an ESK */
	int r, last_err = 0;

	if (!plan || !cand || !fb) {
		r = failr(res, -ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < t->n_esk; i++) {
		const uint8_t *b = t->esks[i].body;
		struct pd_skesk s;
		if (t->esks[i].tag != 3 || !t->esks[i].len || b[0] != want)
			continue;
		int e = pd_skesk_parse(b, t->esks[i].len, &s);
		if (e == 0)
			e = pd_s2k_check(&s.s2k, t->lim);
		if (e < 0) {
			last_err = e;
			continue;
		}
		if (t->lim->max_skesk_trials && nplan == t->lim->max_skesk_trials)
			break;
		work += pd_s2k_work_kib(&s.s2k, pd_sym_keylen(s.cipher));
		if (t->lim->max_kdf_mib && work > (uint64_t)t->lim->max_kdf_mib * 1024) {
			r = failr(res, PD_ELIMIT, "limit exceeded: the password-encrypted session key packets ask for "
			          "more key derivation than %u MiB", t->lim->max_kdf_mib);
			goto out;
		}
		if (s.version == 4 && s.esk && !secret_cipher)
			secret_cipher = s.cipher;
		plan[nplan++] = i;
	}

	uint32_t found = 0;
	for (size_t p = 0; p < nplan; p++) {
		const struct pd_esk *e = &t->esks[plan[p]];
		struct pd_skesk s;
		uint32_t ok = 0;
		if (cancelled(t)) {
			r = failr(res, -ECANCELED, "cancelled by the caller");
			goto out;
		}
		/* Argon2's memory, for the time of the derivation (the plan parsed it) */
		uint64_t amem = pd_skesk_parse(e->body, e->len, &s) == 0 && s.s2k.type == 4 ? (1024ull << s.s2k.m) : 0;
		if (t->budget && amem && pd_budget_take(t->budget, amem) < 0) {
			r = failr(res, -ENOMEM, "memory budget exhausted");
			goto out;
		}
		int er = pd_skesk_try(w, e->body, e->len, pw, pwlen, t->lim, cand, &ok);
		if (t->budget && amem)
			pd_budget_give(t->budget, amem);
		if (er == -ENOMEM) { /* as a PKESK trial's: retryable, whatever the others gave */
			r = failr(res, er, "out of memory");
			goto out;
		}
		if (er < 0) { /* public: a v5/v6 tag mismatch, a setup failure */
			last_err = er;
			continue;
		}
		sesskey_sel(ok & ~found, sk, cand);
		found |= ok;
	}
	if (secret_cipher) {
		fb->algo = secret_cipher;
		fb->len = (uint8_t)pd_sym_keylen(secret_cipher);
		gcry_randomize(fb->key, sizeof(fb->key), GCRY_STRONG_RANDOM);
		sesskey_sel(~found, sk, fb);
	} else if (!found) {
		if (last_err == PD_ELIMIT)
			r = failr(res, last_err, "limit exceeded: the password's key derivation costs more than allowed");
		else if (last_err == PD_EUNSUPPORTED)
			r = failr(res, last_err, "unsupported password-encrypted session key packet");
		else if (last_err == -ENOMEM)
			r = failr(res, last_err, "out of memory");
		else
			r = failr(res, PD_EBADPASS, "wrong password: the message's password-encrypted session key "
			          "packet (AEAD-protected) does not open with it");
		goto out;
	}
	res->pk_algo = 0;
	res->key_fpr_len = 0;
	r = 0;
out:
	if (r < 0)
		scrub(sk, res);
	free(plan);
	pd_worker_give_secure(w, cand, sizeof(*cand));
	pd_worker_give_secure(w, fb, sizeof(*fb));
	return r;
}
