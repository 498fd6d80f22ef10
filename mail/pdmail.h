/* SPDX-License-Identifier: MIT */
/*
 * libpdmail: the gateway's MIME-aware decryptor, a layer above libpdclient.
 *
 * It reads one whole RFC 5322 message, finds what is encrypted in it
 * (RFC 3156 PGP/MIME, inline PGP in text parts in any transfer encoding,
 * encrypted attachments), sends every piece to the daemon pipelined on one
 * connection with verified-only semantics, and writes the message back with
 * each piece replaced by its plaintext, plus result headers (X-Pgpdecd-*).
 * MIME parsing and writing is GMime's.  It never links the engine and never
 * holds a key: hostile MIME is parsed here, in the gateway's process, never
 * in the daemon that holds the private keys.
 *
 * Memory is bounded whatever the mail's size: the input is parsed from a
 * seekable file (parts stay on disk as offsets into it), ciphertext streams
 * to the daemon through GMime's decoders, plaintext is spooled to unlinked
 * temporary files and written out by GMime's encoders.
 *
 * A struct pd_mail holds one connection to the daemon (opened on first use,
 * reopened once when the daemon closed it) and belongs to one thread at a
 * time.  Errors are 0 or negative errno values.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pdclient.h"

struct pd_mail;

/* The largest max_depth: what GMime builds for a mail is bounded by
 * (max_depth + 2) times the shape bounds below. */
#define PD_MAIL_MAX_DEPTH 16

/* What happens to a mail by outcome. */
enum pd_mail_action {
	PD_MAIL_PASS,        /* write it (the original for what could not be decrypted), tagged */
	PD_MAIL_REJECT,      /* do not deliver: a permanent failure (bounce, 5xx, exit 65/69) */
	PD_MAIL_QUARANTINE,  /* write it tagged and ask the MTA to hold it (milter only) */
};

/* Which protected headers (RFC 9788, and the older protected-headers="v1")
 * of a decrypted PGP/MIME message replace the outer ones. */
enum pd_mail_hp {
	PD_MAIL_HP_NONE,     /* keep the outer header section as it is */
	PD_MAIL_HP_SUBJECT,  /* the protected Subject replaces the outer one (default) */
	PD_MAIL_HP_ALL,      /* every protected header field replaces the outer field(s) of its name */
};

struct pd_mail_policy { /* public, by value; pd_mail_policy_default() fills it */
	enum pd_mail_action on_no_key;   /* default PASS: not for us, delivered unchanged (tagged) */
	enum pd_mail_action on_failure;  /* tampered, malformed, unsupported...: default REJECT */
	enum pd_mail_hp protected_headers;
	bool keep_original;              /* attach the original mail as message/rfc822 when decrypted */
	unsigned max_depth;              /* nesting of encrypted inside decrypted (default 4, at most
	                                    PD_MAIL_MAX_DEPTH: each level parses one more entity) */
	unsigned max_parts;              /* encrypted pieces per mail (default 64); more: LIMIT */
	/* The next three bound what GMime builds in memory; they are counted
	 * before it parses anything, for the mail and for each decrypted
	 * PGP/MIME entity alone (at most max_depth + 1 of them a mail).  Past
	 * one: the mail is not parsed (or that entity is not), LIMIT. */
	unsigned max_mime_parts;         /* lines starting with "--" (MIME parts, nesting) (default 10000) */
	unsigned max_header_fields;      /* lines GMime takes as a header field ("name:", any
	                                    octets but controls and blanks in the name) (default 50000) */
	unsigned max_header_items;       /* items of the fields GMime parses into objects (Content-*,
	                                    addresses, Date, ...): words of letters and digits and
	                                    other octets but blanks (default 200000) */
	uint64_t max_plaintext;          /* plaintext octets of all pieces of a mail, spooled
	                                    (default 256 MiB); more: that piece fails LIMIT */
	const char *tmpdir;              /* spool directory (NULL: $TMPDIR or /tmp) */
};

/* The outcome of one mail, as the X-Pgpdecd-Status header names it. */
enum pd_mail_outcome {
	PD_MAIL_NOT_ENCRYPTED,  /* "not-encrypted": nothing encrypted found */
	PD_MAIL_DECRYPTED,      /* "decrypted": every encrypted piece decrypted and verified */
	PD_MAIL_PARTLY,         /* "partly-decrypted": some pieces, the others (or embedded ones) left
	                           as they were */
	PD_MAIL_NO_KEY,         /* "no-key": encrypted, none of it to a key the daemon holds */
	PD_MAIL_FAILED,         /* "failed": a piece failed (status names why) and nothing decrypted */
	PD_MAIL_UNAVAILABLE,    /* "unavailable": daemon down, overloaded, timeout: try again later */
	PD_MAIL_EMBEDDED,       /* "embedded": encrypted content only inside other content (a
	                           multipart/encrypted or inline block that is not its message's whole
	                           body), left encrypted for the mail reader (EFAIL; pdmail.c walk()) */
};

/* What the caller must do with the mail. */
enum pd_mail_verdict {
	PD_MAIL_WRITTEN,     /* the output holds the message to deliver */
	PD_MAIL_HOLD,        /* written, and to be quarantined (policy QUARANTINE) */
	PD_MAIL_BOUNCE,      /* do not deliver: permanent (exit 65 or 69, SMTP 5xx) */
	PD_MAIL_TEMPFAIL,    /* do not deliver now: temporary (exit 75, SMTP 4xx) */
};

struct pd_mail_report { /* public, by value */
	enum pd_mail_outcome outcome;
	enum pd_mail_verdict verdict;
	unsigned status;          /* wire status of the piece that decided a failure (0 if none) */
	char status_name[24];     /* its name ("INTEGRITY"), or "" */
	unsigned n_pieces, n_decrypted, n_no_key, n_failed;
	unsigned n_embedded;      /* encrypted content left as it is: not its message's whole body */
	unsigned n_keys;          /* distinct key fingerprints used, below */
	uint8_t key_fpr_len[8];
	uint8_t key_fpr[8][32];
	bool mdc, aead;           /* integrity kinds seen among the decrypted pieces */
	uint64_t bytes_in, bytes_out; /* mail octets read and written */
	int err;                  /* PD_MAIL_UNAVAILABLE: the client's -errno (pdc_result.err), or 0 */
};

/** The default policy. */
void pd_mail_policy_default(struct pd_mail_policy *p);
/** Parse a policy word ("pass", "reject", "quarantine"; "none", "subject", "all"); 0 or -EINVAL. */
int pd_mail_action_parse(const char *s, enum pd_mail_action *ret);
int pd_mail_hp_parse(const char *s, enum pd_mail_hp *ret);
/** Stable names of outcomes ("partly-decrypted") and actions. */
const char *pd_mail_outcome_name(enum pd_mail_outcome o);
const char *pd_mail_action_name(enum pd_mail_action a);

/** Once per process, before threads: initialise GMime. */
void pd_mail_global_init(void);
/** A decryptor for one thread; cfg and policy are copied (their strings must outlive it).
 * -EINVAL for a max_depth over PD_MAIL_MAX_DEPTH. */
int pd_mail_new(struct pd_mail **ret, const struct pdc_config *cfg, const struct pd_mail_policy *policy);
/** Close its connection and free it; accepts NULL, returns NULL. */
struct pd_mail *pd_mail_free(struct pd_mail *m);

/**
 * Bind the next mails (until called again) to their recipients: the daemon
 * opens their pieces only with keys bound to every one of the n values
 * ("local@domain" or "@domain": BIND, PROTOCOL.md 5.1), so that whoever can
 * mail an address behind the gateway cannot have a ciphertext meant for
 * someone else decrypted into their mailbox.  n 0: any key (the default).
 * A value that is no address (pdc_bind_value_ok), or more than PDC_MAX_BIND
 * values: no key can be bound to all of them, and every piece is answered
 * NO_KEY without asking the daemon (what it would say of a key bound to
 * none).  The values are copied.  0 or -ENOMEM.
 */
int pd_mail_set_bind(struct pd_mail *m, const char *const *vals, size_t n);

/**
 * Decrypt one mail.  in_fd: the whole message (headers and body), readable;
 * if it is not seekable it is spooled to a temporary file first.  out_fd:
 * where the resulting message is written, from its current offset (written
 * only for verdicts WRITTEN and HOLD; for BOUNCE and TEMPFAIL nothing is
 * written).  Returns 0 with *ret filled (the verdict says what to do), or a
 * negative errno for a local failure (unreadable input, output write error,
 * out of memory), which the caller treats as temporary.
 */
int pd_mail_process(struct pd_mail *m, int in_fd, int out_fd, struct pd_mail_report *ret);

/**
 * The header section of the message in fd (read from offset 0), as GMime
 * parses it: cb(arg, name, value) for each field in order, value being what
 * follows the colon with folds as written (LF line ends, the field's last
 * line end dropped).  *ret_body_off: the body's first octet (after the empty
 * line; the size of the file when there is no body).  For the milter, which
 * turns the written message into header edits.  0, cb's first nonzero
 * return, -EBADMSG, or a negative errno.
 */
int pd_mail_header_fields(int fd, int (*cb)(void *arg, const char *name, const char *value),
                          void *arg, int64_t *ret_body_off);

/** The SMTP-safe one-line reason for a report: "not decrypted: INTEGRITY". */
void pd_mail_reason(const struct pd_mail_report *r, char *buf, size_t n);

/** Tests and fuzzing only: answer every piece in-process, as if the daemon had
 * decrypted it to its own (decoded) ciphertext octets with MDC integrity,
 * instead of connecting; so that hostile "plaintext" reaches every path. */
void pd__mail_set_loopback(struct pd_mail *m, bool on);
