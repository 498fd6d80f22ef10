/* SPDX-License-Identifier: MIT */
/*
 * libpdclient: a small blocking C client for pgpdecd, for mail gateways and
 * other programs that hand OpenPGP messages to the daemon.
 *
 * It connects over a Unix socket or TCP (TLS via GnuTLS, verifying the
 * server name against a CA or a pinned SHA-256 certificate fingerprint),
 * does the protocol handshake, and pipelines requests: queue any number with
 * pdc_submit_*(), then pdc_run() sends them (ciphertext read from an fd, a
 * buffer or a callback) while it streams each reply's plaintext to your
 * callback, in request order.  The wire protocol is proto/PROTOCOL.md.
 *
 * Plaintext handed to on_data is provisional until on_done reports status 0
 * (PDC_OK) with integrity MDC or AEAD: for SEIPD v1 an attacker may have
 * modified it.  Write it somewhere you can throw away (or ask for
 * PDC_VERIFIED_ONLY) and commit only when on_done says so.
 *
 * Callback contract: if a pdc_submit_*() call returns an error, none of that
 * request's callbacks is ever called; otherwise on_done is called exactly
 * once, from pdc_run() or pdc_process(), also when the connection fails.
 * Callbacks may submit further requests on the same connection (that is how
 * a closed-loop benchmark keeps it busy) but must not call pdc_run(),
 * pdc_process() or pdc_close() on it.
 * A pdc_conn belongs to one thread at a time; different connections are
 * independent.  Errors are 0 or negative errno values.
 */
#pragma once

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PDC_API __attribute__((visibility("default")))

#define PDC_DEFAULT_SOCKET "/run/pgpdecd/pgpdecd.sock"

/* Wire status codes (PROTOCOL.md section 8); the tens digit is the class. */
#define PDC_OK 0
#define PDC_ST_MALFORMED 10
#define PDC_ST_INTEGRITY 13
#define PDC_ST_SED_REFUSED 15
#define PDC_ST_LIMIT 16
#define PDC_ST_NO_KEY 20
#define PDC_ST_OVERLOADED 30
#define PDC_ST_TIMEOUT 31
#define PDC_ST_ACCESS_DENIED 40
#define PDC_ST_PROTOCOL 50

/* Integrity verdicts */
#define PDC_INTEGRITY_NONE 0
#define PDC_INTEGRITY_MDC 1
#define PDC_INTEGRITY_AEAD 2
#define PDC_INTEGRITY_UNPROTECTED 3

/* Request flags */
#define PDC_VERIFIED_ONLY 0x1u  /* the server holds all plaintext until verified */
#define PDC_WANT_METADATA 0x2u  /* call on_metadata before the first plaintext */
#define PDC_WANT_SESSION_KEY 0x4u /* a verified message's session key in the result, if the server allows */

/* Why a result asked for a session key has none (session_key_refused) */
#define PDC_SK_REFUSED_POLICY 1      /* the server does not export session keys to this client */
#define PDC_SK_REFUSED_UNPROTECTED 2 /* the message had no integrity protection (SED) */
#define PDC_SESSION_KEY_MAX 32
#define PDC_MAX_BIND 16       /* BIND values of one request */
#define PDC_ADDRESS_MAX 254   /* octets of one */

struct pdc_conn;

struct pdc_target { /* public, by value: one daemon to connect to */
	const char *socket_path;   /* Unix socket, when host is NULL */
	const char *host;          /* TCP host name or address */
	const char *port;          /* TCP port (service) */
};

struct pdc_config { /* public, by value; zero-initialise, then set what you need.  Its strings
                     * (and targets) must stay valid while a connection made with it lives:
                     * it reconnects with them. */
	const char *socket_path;   /* Unix socket; used when host is NULL (NULL: $PGPDECD_SOCKET or the default) */
	const char *host;          /* TCP: host name or address */
	const char *port;          /* TCP: port (service) */
	/* Failover: when n_targets > 0, these replace socket_path/host/port.
	 * A connection goes to the first that answers, in order (after a
	 * failure: starting with the next one); TLS settings are shared, the
	 * server name defaults to each target's host. */
	const struct pdc_target *targets;
	size_t n_targets;
	bool no_retry;             /* turn off retrying (see "Retry" below) */
	bool no_tls;               /* TCP without TLS (only for a daemon on loopback that allows it) */
	const char *tls_ca;        /* PEM file of CAs to verify the server with (NULL: system CAs unless pinned) */
	const char *tls_cert;      /* PEM client certificate (mutual TLS) */
	const char *tls_key;       /* PEM client private key */
	const char *tls_server_name; /* name to verify and send as SNI (NULL: host) */
	const char *tls_pin;       /* SHA-256 fingerprint of the server certificate, hex (colons and a
	                              "sha256:" prefix allowed); with it, no CA is needed */
	int timeout_ms;            /* connect/handshake timeout and longest silence while waiting (0: 60 s, <0: none) */
	const char *software;      /* sent in HELLO (NULL: "libpdclient/VERSION") */
};

struct pdc_server { /* public, by value: what the server announced */
	unsigned version;
	uint32_t max_frame;
	uint64_t max_message;       /* 0 = unlimited */
	uint32_t max_inflight;
	char software[65];
};

struct pdc_recipient { /* public, by value */
	uint8_t version, pk_algo;
	bool wildcard;
	uint8_t keyid[8];
	uint8_t fpr_len;
	uint8_t fpr[32];
};

struct pdc_info { /* public, by value: message metadata (attacker-controlled content) */
	bool armored;
	uint8_t container, container_version; /* packet tag 18 SEIPD / 20 OCB / 9 SED, version */
	uint8_t sym_algo, aead_algo, aead_chunk_log, pk_algo;
	uint8_t key_fpr_len;
	uint8_t key_fpr[32];        /* the (sub)key that opened the message */
	uint8_t n_compression;
	uint8_t compression[8];
	bool has_literal;
	char literal_format;
	uint8_t literal_name_len;
	char literal_name[256];     /* raw octets, NUL-terminated; never use as a path */
	uint32_t literal_date;
	uint32_t n_recipients;      /* listed below (at most 64) */
	uint32_t n_recipients_total;
	struct pdc_recipient recipients[64];
	uint32_t n_skesk;
	uint32_t n_issuers;
	uint8_t issuers[16][8];
	uint32_t n_signatures;
};

struct pdc_result { /* public, by value */
	int err;                    /* 0: status is the server's; else -errno of a local or connection failure */
	unsigned status;            /* wire status; with err != 0, a status describing it (or 0) */
	unsigned integrity;         /* PDC_INTEGRITY_* */
	uint64_t bytes_in, bytes_out;
	char errname[24];
	char sentence[1025];        /* one line, for humans */
	struct pdc_info info;       /* what the RESULT carried */
	/* PDC_WANT_SESSION_KEY: with status 0, the session key (session_key_len
	 * > 0: its OpenPGP symmetric algorithm and octets; yours to wipe) or
	 * why not (session_key_refused, PDC_SK_REFUSED_*).  Only ever for a
	 * verified message. */
	uint8_t session_key_algo, session_key_len, session_key_refused;
	uint8_t session_key[PDC_SESSION_KEY_MAX];
};

struct pdc_key { /* public, by value */
	uint8_t version, pk_algo;
	uint16_t bits;
	uint32_t created;
	uint8_t fpr_len, primary_fpr_len;
	uint8_t fpr[32], primary_fpr[32];
	uint8_t keyid[8];
	char curve[24];
	/* The addresses its User IDs bind it to (the request option bind): a
	 * NUL after each, addresses_len octets in all (0: none); valid during
	 * the callback only. */
	const char *addresses;
	size_t addresses_len;
};

struct pdc_decrypt { /* public, by value: one decryption request */
	uint32_t flags;             /* PDC_VERIFIED_ONLY, PDC_WANT_METADATA, PDC_WANT_SESSION_KEY */
	const char *password;       /* SKESK password (copied at submit), or NULL */
	size_t password_len;
	/* Decrypt with this session key (copied at submit), instead of the
	 * server's keys or a password: NULL, or session_key_len octets
	 * (1..PDC_SESSION_KEY_MAX) for OpenPGP symmetric algorithm session_key_algo. */
	const uint8_t *session_key;
	size_t session_key_len;
	uint8_t session_key_algo;
	/* Decrypt only with the server's keys bound to every one of these
	 * (BIND, copied at submit): n_bind (at most PDC_MAX_BIND) values
	 * "local@domain" or "@domain" (PROTOCOL.md 5.1); NULL and 0: any key. */
	const char *const *bind;
	size_t n_bind;
	/* Ciphertext source, exactly one of: */
	int in_fd;                  /* >= 0: read to EOF (not closed) */
	const uint8_t *in_buf;      /* with in_len; must stay valid until on_done */
	size_t in_len;
	ssize_t (*in_read)(void *arg, uint8_t *buf, size_t cap); /* >0, 0 = EOF, <0 = -errno */
	/* Retry support (both optional, see "Retry"): in_rewind makes in_read
	 * start over from the first octet (0, or -errno).  on_retry, when set,
	 * is asked before the request is sent again: return 0 to allow it
	 * (having discarded what was delivered, a temporary file truncated),
	 * nonzero to have it fail instead.  Without on_retry a request is sent
	 * again only if nothing of its reply was delivered yet. */
	int (*in_rewind)(void *arg);
	int (*on_retry)(void *arg);
	/* Reply sinks (each may be NULL); a nonzero return from on_metadata or on_data
	 * stops delivery to this request (the result then has err set to it). */
	int (*on_metadata)(void *arg, const struct pdc_info *info);
	int (*on_data)(void *arg, const uint8_t *p, size_t n);
	void (*on_done)(void *arg, const struct pdc_result *r);
	void *arg;
};

/** Whether v is a value a request can be bound to (struct pdc_decrypt's
 * bind): "local@domain" or "@domain", exactly one '@', a non-empty domain,
 * no space, control octet, '<' or '>', at most PDC_ADDRESS_MAX octets. */
PDC_API bool pdc_bind_value_ok(const char *v);

/** Connect, handshake (TLS, then HELLO).  On failure *ret_err (may be NULL) says why. */
PDC_API int pdc_connect(struct pdc_conn **ret, const struct pdc_config *cfg, struct pdc_result *ret_err);
/** Close and free (unfinished requests get on_done with -ECANCELED); accepts NULL, returns NULL. */
PDC_API struct pdc_conn *pdc_close(struct pdc_conn *c);
/** The server's version and limits. */
PDC_API const struct pdc_server *pdc_server(const struct pdc_conn *c);

/* Submitting on a connection the server has closed meanwhile (its idle
 * timeout, a shutdown) fails at once with the error that ended it: connect
 * again and resubmit.  Nothing was sent in that case. */

/** Queue a decryption (in_fd = -1 when unused). */
PDC_API int pdc_submit_decrypt(struct pdc_conn *c, const struct pdc_decrypt *d);
/** Queue a PING; on_done gets status 0 when the PONG arrives. */
PDC_API int pdc_submit_ping(struct pdc_conn *c, void (*on_done)(void *, const struct pdc_result *), void *arg);
/** Queue a STATS request: the Prometheus text goes to on_data. */
PDC_API int pdc_submit_stats(struct pdc_conn *c, int (*on_data)(void *, const uint8_t *, size_t),
                             void (*on_done)(void *, const struct pdc_result *), void *arg);
/** Queue a KEYS request: on_key once per loaded key. */
PDC_API int pdc_submit_keys(struct pdc_conn *c, int (*on_key)(void *, const struct pdc_key *),
                            void (*on_done)(void *, const struct pdc_result *), void *arg);

/*
 * Retry (on unless cfg.no_retry).  Decryption is idempotent, so a request
 * that did not finish is sent again, with backoff (50 ms doubling to 2 s,
 * jittered), until it is answered or timeout_ms has passed since its first
 * failure (60 s by default; with timeout_ms < 0, 60 s as well; a failure
 * after plaintext had come back starts that time again), at most 16
 * times, on this connection or, when the connection is gone, on a new one
 * to the next target that answers.  What is retried:
 *  - the connection failing: refused, reset, closed by the server (ERROR
 *    SHUTTING_DOWN, OVERLOADED or TIMEOUT, or no ERROR at all: a daemon
 *    that vanished, killed or restarted), or silent for timeout_ms;
 *  - a RESULT SHUTTING_DOWN (the request goes to another connection once
 *    this one ends: the server no longer takes work) or OVERLOADED (the
 *    same connection, after the backoff).
 * A request is sent again only if its ciphertext can be sent again: a
 * buffer; an fd that can seek (the offset at submit is restored); an fd
 * that cannot (a pipe), whose octets libpdclient copies as it reads them
 * to an unlinked file in $TMPDIR (ciphertext only, never plaintext; mode
 * 0600) and sends again from there; in_read with in_rewind; or any source
 * of which nothing was read yet.  And only
 * if nothing of its reply was delivered yet, or its on_retry allows it.
 * Otherwise it ends with the failure (err set: exit code 75).  Protocol
 * violations, TLS verification failures, access denied and every other
 * status are never retried.  on_done is called once per request, when it
 * is finally answered, so after a retry requests may complete out of
 * submission order.
 *
 * pdc_run() does all of this itself; an event-loop user whose
 * pdc_process() returned an error calls pdc_recover() (which blocks while
 * it reconnects).
 */

/** Send and receive until every queued request is done, reconnecting and
 * resending as "Retry" says.  0, or the error that ended the connection
 * (every request still got its on_done). */
PDC_API int pdc_run(struct pdc_conn *c);
/** After pdc_process() failed: reconnect (blocking: failover and backoff
 * within the requests' retry deadline) and queue again what may be resent.
 * 0 when the connection is usable again (poll pdc_fd() anew: it changed);
 * otherwise the error, and every request has had its on_done. */
PDC_API int pdc_recover(struct pdc_conn *c);
/** Milliseconds until a request waiting out its backoff (after OVERLOADED)
 * is to be sent: an event loop polls at most this long, then calls
 * pdc_process(c, 0).  -1: none waits. */
PDC_API int pdc_backoff_ms(struct pdc_conn *c);
/** Requests sent again so far on this connection object (failovers included). */
PDC_API unsigned long pdc_resent(const struct pdc_conn *c);
/** Submit one decryption and run: *ret receives its result. */
PDC_API int pdc_decrypt(struct pdc_conn *c, const struct pdc_decrypt *d, struct pdc_result *ret);

/* Event-loop integration (what pdc_run does in a loop): poll pdc_fd() for
 * pdc_events(), then call pdc_process() with what poll returned. */
PDC_API int pdc_fd(const struct pdc_conn *c);
/** POLLIN, plus POLLOUT while there is something to send; 0 when the
 * connection can do no more (it ended, or its server is stopping) while
 * pdc_pending() requests wait for another: call pdc_recover(). */
PDC_API short pdc_events(struct pdc_conn *c);
/** Do the I/O that revents allows; 0 or the error that ended the connection. */
PDC_API int pdc_process(struct pdc_conn *c, short revents);
/** Requests queued and not yet done. */
PDC_API size_t pdc_pending(const struct pdc_conn *c);

/** A verified success: status 0 with MDC or AEAD integrity (anything else
 * delivered as status 0 is unprotected plaintext). */
PDC_API bool pdc_verified(const struct pdc_result *r);
/** sysexits(3) code for a result: 0, 65 bad data, 69 no key, 75 retry later, 77 denied (also: the
 * daemon requires a client certificate), 78 the caller's settings (-EINVAL, -ENAMETOOLONG: a socket
 * path too long, TLS files that cannot be loaded, a bad pin). */
PDC_API int pdc_exit_code(const struct pdc_result *r);
/** Stable name of a wire status ("INTEGRITY"). */
PDC_API const char *pdc_status_name(unsigned status);
/** Printable OpenPGP algorithm names. */
PDC_API const char *pdc_sym_name(unsigned algo);
PDC_API const char *pdc_pk_name(unsigned algo);
PDC_API const char *pdc_aead_name(unsigned algo);
PDC_API const char *pdc_compress_name(unsigned algo);

#ifdef __cplusplus
}
#endif
