/* SPDX-License-Identifier: MIT */
/*
 * gpg-compatible text for the front ends over libpdclient (pgpdecd-client
 * and pgpdecd-gpg link it): the session key in gpg's "ALGO:HEX" form
 * (--show-session-key, --override-session-key; SOP uses it too), and the
 * --status-fd lines of a decryption as GnuPG's doc/DETAILS defines them
 * and gpg 2.2 writes them.  No I/O beyond the status fd it is given; no
 * state but what a pdc_gpg_status holds.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pdclient.h"

/** Parse "ALGO:HEX" (surrounding white space allowed): 0, or -EINVAL. */
int pdc_sk_parse(const char *s, size_t n, uint8_t *ret_algo, uint8_t *key, size_t *ret_len);
/** Format "ALGO:HEX" (upper-case hex, as gpg prints it) into buf; its length, or -ENOBUFS. */
int pdc_sk_format(char *buf, size_t cap, uint8_t algo, const uint8_t *key, size_t len);

/* Status lines ("[GNUPG:] KEYWORD args\n") to one descriptor.  A write
 * error is remembered: gpg's --exit-on-status-write-error makes it fatal. */
struct pdc_gpg_status { /* public, by value */
	int fd;                     /* -1: no status output */
	bool failed;                /* a write failed */
};
/** One line: keyword and printf-style arguments (fmt NULL: none). */
void pdc_gpg_status(struct pdc_gpg_status *st, const char *keyword, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

struct pdc_gpg_outcome { /* public, by value: what the status lines describe */
	const struct pdc_result *r;  /* the request's result (err set: it never got one) */
	const struct pdc_key *keys;  /* the daemon's keys (KEYS), for DECRYPTION_KEY's primary fingerprint */
	size_t n_keys;
	bool password_given;         /* a password went with the request */
	bool session_key_given;      /* ... or a session key (--override-session-key) */
	bool show_session_key;       /* --show-session-key: SESSION_KEY line */
	bool passphrase_asked;       /* NEED_PASSPHRASE_SYM was written already (asked on --command-fd) */
};
/** The lines gpg 2.2 writes for a decryption with this outcome, in its
 * order (pgpdecd-gpg(1) lists where they differ and why).  Returns gpg's
 * exit code: 0 for a verified message, else 2. */
int pdc_gpg_status_decrypt(struct pdc_gpg_status *st, const struct pdc_gpg_outcome *o);
/** gpg's error value (source GPG) for a result that failed, for ERROR and
 * FAILURE lines. */
unsigned pdc_gpg_errcode(const struct pdc_result *r);
/** gpg's word for it, for "gpg: decryption failed: ..." on standard error. */
const char *pdc_gpg_errtext(const struct pdc_result *r);
