/* SPDX-License-Identifier: MIT */
/*
 * Password-encrypted session keys (SKESK, tag 3) [run on workers]:
 * v4 (RFC 9580 §5.3.1: S2K, optional CFB-encrypted algo||key), v5
 * (LibrePGP: AEAD-wrapped key, KEK = S2K output) and v6 (RFC 9580 §5.3.2:
 * AEAD-wrapped key, KEK = HKDF-SHA256(S2K output)).
 *
 * A v5/v6 key is AEAD-checked, so a wrong password is PD_EBADPASS.  A v4
 * key has no check: a wrong password yields a wrong key (or, with an ESK,
 * an invalid algorithm octet: a mask from pd_skesk_try(), which the message
 * layer never branches on) and the container's MDC or tag fails later.  A v5/v6 session key carries no cipher: its algo is 0 and
 * the container's cipher (whose key length must match) decides.
 */
#pragma once
#include "pgp/s2k.h"
#include "pgp/unwrap.h"

struct pd_skesk {            /* points into the packet body */
	uint8_t version;         /* 4, 5 or 6 */
	uint8_t cipher;          /* v4: S2K/session cipher; v5/v6: key-wrapping cipher */
	uint8_t aead;            /* v5/v6 AEAD id */
	struct pd_s2k s2k;
	const uint8_t *nonce;    /* v5/v6: pd_aead_noncelen(aead) octets */
	const uint8_t *esk;      /* encrypted session key; NULL for a v4 without one */
	size_t esk_len;
	const uint8_t *tag;      /* v5/v6: 16 octets */
};

/** Parse an SKESK body; PD_EUNSUPPORTED for unknown versions/algorithms/S2K types,
 * PD_EMALFORMED for inconsistent lengths. */
PD_HIDDEN int pd_skesk_parse(const uint8_t *body, size_t len, struct pd_skesk *ret);
/** Recover the session key from a parsed SKESK and its S2K output
 * (pd_sym_keylen(s->cipher) octets).  PD_EBADPASS if the check fails. */
PD_HIDDEN int pd_skesk_unlock(struct pd_worker *w, const struct pd_skesk *s, const uint8_t *s2k_key,
                              struct pd_sesskey *out);
/** Parse, derive the S2K key from pw (costs capped by lim) and unlock into
 * *out, which is written whenever 0 is returned: the mask *ok says whether
 * the key passed its check (a v4 ESK's check is about unauthenticated
 * octets, so the caller must select with it in constant time, never
 * branch).  PD_EBADPASS only for a v5/v6 tag mismatch (authenticated). */
PD_HIDDEN int pd_skesk_try(struct pd_worker *w, const uint8_t *body, size_t len, const char *pw, size_t pwlen,
                           const struct pd_limits *lim, struct pd_sesskey *out, uint32_t *ok);
/** Parse, derive the S2K key from pw (costs capped by lim) and unlock;
 * PD_EBADPASS when the check fails, *out untouched. */
PD_HIDDEN int pd_skesk_decrypt(struct pd_worker *w, const uint8_t *body, size_t len, const char *pw,
                               size_t pwlen, const struct pd_limits *lim, struct pd_sesskey *out);
