/* SPDX-License-Identifier: MIT */
/*
 * libpdclient: connection, TLS, request queue and the send/receive state
 * machine.  One non-blocking socket per connection; pdc_run() is a poll()
 * loop around pdc_process(), so that sending a large message never stops
 * us reading the plaintext the server streams back (PROTOCOL.md section 10:
 * a client that does not read while it writes can deadlock).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <strings.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <gnutls/gnutls.h>
#include <gnutls/crypto.h>
#include <gnutls/x509.h>

#include "pd-config.h"
#include "buf.h"
#include "frame.h"
#include "pdclient.h"
#include "status.h"

#define RBUF_SIZE (64u << 10)
#define CHUNK_MAX (64u << 10)  /* ciphertext per DATA frame (also capped by max_frame) */

enum send_state { S_QUEUED, S_SENDING, S_SENT };

struct req {
	struct req *next;
	uint8_t type;               /* PD_FT_DECRYPT, PING, STATS, KEYS */
	uint32_t id;
	enum send_state st;
	bool answered;              /* terminal frame received */
	bool begun_data;            /* a DATA frame arrived (METADATA must come before) */
	int local_err;              /* input or sink failure */
	struct pdc_decrypt d;
	char *password;             /* our copy, wiped on free */
	uint8_t *skey;              /* our copy of d.session_key, wiped on free */
	char *bind;                 /* our copy of d.bind's values, a NUL after each */
	size_t in_off;
	int (*on_key)(void *, const struct pdc_key *);
	struct pdc_result res;
	/* retry (see pdclient.h) */
	bool delivered;             /* on_metadata/on_data/on_key was called */
	bool input_read;            /* some ciphertext was read from its source */
	bool resend;                /* answered SHUTTING_DOWN/OVERLOADED: send a fresh copy */
	off_t in_start;             /* in_fd: offset at submit, -1 if it cannot seek */
	int spool_fd;               /* in_fd that cannot seek: a copy of what was read, or -1 */
	off_t spool_len, spool_pos; /* octets in the copy; where a resend reads it */
	bool replaying;             /* reading the copy before in_fd again */
	unsigned attempts;          /* sends before this one */
	int64_t retry_deadline;     /* now_ms() after which it is not sent again (0: no failure yet) */
	int64_t not_before;         /* now_ms() before which it is not sent (backoff) */
};

struct pdc_conn {
	int fd;
	gnutls_session_t tls;
	gnutls_certificate_credentials_t cred;
	char *verify_name;
	uint8_t pin[32];
	bool has_pin, has_ca, has_cert;
	int tls_alert;              /* the fatal alert the server sent, or -1 */
	struct pd_buf tin;          /* TLS: ciphertext read ahead of GnuTLS (buf.h) */
	struct pd_buf tout;         /* TLS: records made, not yet sent */
	char tls_detail[256];
	struct pd_frame_decoder *dec;
	struct pdc_server server;
	int timeout_ms;
	uint8_t *out;               /* frames being written */
	size_t out_cap, out_len, out_off;
	bool out_secret;            /* out holds a password: wiped once sent */
	uint8_t *rbuf;
	struct req *head, *tail;    /* every request not yet done, in order */
	uint32_t next_id;
	uint32_t n_outstanding;     /* begun and not answered */
	size_t n_pending;
	bool reading;               /* inside read_some(): callbacks must not re-enter it */
	bool in_run;                /* inside pdc_run(): it can wait for a slow in_fd too */
	int in_wait_fd;             /* in_fd with no data yet: pdc_run() polls it */
	int dead;                   /* error that ended the connection, or 0 */
	unsigned dead_status;
	char dead_sentence[PD_SENTENCE_MAX + 1];
	/* failover and retry */
	struct pdc_config cfg;      /* the caller's (its strings stay the caller's) */
	struct pdc_target *targets; /* n_targets >= 1 */
	size_t n_targets, cur;      /* cur: the target of this connection */
	bool retry;
	bool draining;              /* RESULT SHUTTING_DOWN seen: no new request on this connection */
	const char *sock_from;      /* "PGPDECD_SOCKET" when the one socket path came from there */
	bool tls_failed;            /* a certificate was refused (by us or by an alert of the server): a
	                             * configuration matter, not retried; a handshake cut short is
	                             * (haproxy closing for a dead backend) */
	struct req *rhead, *rtail;  /* waiting for a new connection, in order */
	unsigned long resent;
};

#define RETRY_MAX_ATTEMPTS 16
#define RETRY_DEFAULT_MS 60000

/* ------------------------------------------------------------------ */
/* small helpers */

__attribute__((format(printf, 4, 5)))
static int set_err(struct pdc_result *r, int err, unsigned status, const char *fmt, ...)
{
	if (r) {
		memset(r, 0, sizeof(*r));
		r->err = err;
		r->status = status;
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(r->sentence, sizeof(r->sentence), fmt, ap);
		va_end(ap);
	}
	return err;
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void copy_info(struct pdc_info *o, const struct pd_msginfo *m)
{
	memset(o, 0, sizeof(*o));
	o->armored = m->armored;
	o->container = m->container;
	o->container_version = m->container_version;
	o->sym_algo = m->sym_algo;
	o->aead_algo = m->aead_algo;
	o->aead_chunk_log = m->aead_chunk_log;
	o->pk_algo = m->pk_algo;
	o->key_fpr_len = m->key_fpr_len;
	memcpy(o->key_fpr, m->key_fpr, sizeof(o->key_fpr));
	o->n_compression = m->n_compression;
	memcpy(o->compression, m->compression, sizeof(o->compression));
	o->has_literal = m->has_literal;
	o->literal_format = m->literal_format;
	o->literal_name_len = m->literal_name_len;
	memcpy(o->literal_name, m->literal_name, sizeof(o->literal_name));
	o->literal_date = m->literal_date;
	o->n_recipients = (uint32_t)(m->n_recipients > 64 ? 64 : m->n_recipients);
	o->n_recipients_total = (uint32_t)m->n_recipients_total;
	for (uint32_t i = 0; i < o->n_recipients; i++) {
		const struct pd_recipient *r = &m->recipients[i];
		o->recipients[i].version = r->version;
		o->recipients[i].pk_algo = r->pk_algo;
		o->recipients[i].wildcard = r->wildcard;
		memcpy(o->recipients[i].keyid, r->keyid, 8);
		o->recipients[i].fpr_len = r->fpr_len;
		memcpy(o->recipients[i].fpr, r->fpr, 32);
	}
	o->n_skesk = (uint32_t)m->n_skesk;
	o->n_issuers = (uint32_t)(m->n_issuers > 16 ? 16 : m->n_issuers);
	memcpy(o->issuers, m->issuers, 8 * (size_t)o->n_issuers);
	o->n_signatures = (uint32_t)m->n_signatures;
}

/* ------------------------------------------------------------------ */
/* transport */

/* TLS transport.  GnuTLS reads a record's header and its body with two
 * calls and writes each 16 KiB record with one: straight on the socket
 * that was three system calls per record, most of what a large message
 * cost us.  So the socket is read TLS_IN_SIZE at a time into tin, and the
 * records go into tout and leave in one send (tout_send) when xsend has
 * made them, or when the socket takes more (POLLOUT: pdc_events asks for
 * it while tout holds some).  Before a wait for input, tin is empty: xrecv
 * says -EAGAIN only then, and every reader reads until -EAGAIN. */
#define TLS_IN_SIZE (64u << 10)
#define TLS_OUT_SIZE (256u << 10)

/* One send(2): >= 0 bytes, -EAGAIN, or -errno.  MSG_NOSIGNAL: a vanished
 * server gives EPIPE, not SIGPIPE. */
static ssize_t sock_send(int fd, const uint8_t *p, size_t len)
{
	for (;;) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n >= 0)
			return n;
		if (errno == EINTR)
			continue;
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	}
}

/* Send what tout holds: 0 (all sent, or the socket is full), or -errno. */
static int tout_send(struct pdc_conn *c)
{
	while (pd_buf_len(&c->tout)) {
		ssize_t n = sock_send(c->fd, pd_buf_data(&c->tout), pd_buf_len(&c->tout));
		if (n < 0)
			return n == -EAGAIN ? 0 : (int)n;
		pd_buf_consume(&c->tout, (size_t)n);
	}
	return 0;
}

/* tout sent whole before deadline (handshakes, which wait anyway). */
static int tout_send_wait(struct pdc_conn *c, int64_t deadline);

static ssize_t tls_push(gnutls_transport_ptr_t p, const void *buf, size_t len)
{
	struct pdc_conn *c = p;
	if (pd_buf_tail_room(&c->tout) < len) {
		int r = tout_send(c); /* empties it if the socket takes it all */
		if (r < 0) {
			errno = -r;
			return -1;
		}
		if (pd_buf_tail_room(&c->tout) < len)
			pd_buf_compact(&c->tout); /* at most once per buffer's worth */
		if (pd_buf_tail_room(&c->tout) < len) {
			errno = EAGAIN; /* GnuTLS keeps the record and gives it again */
			return -1;
		}
	}
	pd_buf_put(&c->tout, buf, len);
	return (ssize_t)len;
}

static ssize_t tls_pull(gnutls_transport_ptr_t p, void *buf, size_t len)
{
	struct pdc_conn *c = p;
	if (!pd_buf_len(&c->tin)) { /* refilled only when empty: all of it is room */
		ssize_t n = recv(c->fd, pd_buf_tail(&c->tin), pd_buf_tail_room(&c->tin), 0);
		if (n <= 0)
			return n; /* errno for GnuTLS, or EOF */
		pd_buf_commit(&c->tin, (size_t)n);
	}
	size_t n = pd_buf_len(&c->tin) < len ? pd_buf_len(&c->tin) : len;
	memcpy(buf, pd_buf_data(&c->tin), n);
	pd_buf_consume(&c->tin, n);
	return (ssize_t)n;
}

/* Input is buffered above the socket: poll() would not say so. */
static bool tls_buffered(struct pdc_conn *c)
{
	return c->tls && (pd_buf_len(&c->tin) || gnutls_record_check_pending(c->tls) > 0);
}

/* >0 bytes, -EAGAIN, or another negative error.  Over TLS the bytes taken
 * may still wait in tout (the socket full): pdc_events asks for POLLOUT. */
static ssize_t xsend(struct pdc_conn *c, const uint8_t *p, size_t len)
{
	if (c->tls) {
		size_t done = 0;
		ssize_t n = 0;
		while (done < len) {
			n = gnutls_record_send(c->tls, p + done, len - done);
			if (n < 0)
				break; /* E_AGAIN: the same bytes go again next time */
			done += (size_t)n;
		}
		if (tout_send(c) < 0)
			return -EPIPE;
		if (done)
			return (ssize_t)done; /* a TLS error shows at the next call */
		return n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED ? -EAGAIN : -EPIPE;
	}
	return sock_send(c->fd, p, len);
}

/* >0 bytes, 0 at EOF, -EAGAIN, or another negative error. */
static ssize_t xrecv(struct pdc_conn *c, uint8_t *p, size_t len)
{
	if (c->tls) {
		ssize_t n;
		/* GnuTLS also says E_AGAIN after a post-handshake message (a
		 * session ticket) with more records read: -EAGAIN here means tin
		 * is empty, so that the caller may wait on the socket. */
		do
			n = gnutls_record_recv(c->tls, p, len);
		while ((n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED) && pd_buf_len(&c->tin));
		if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED)
			return -EAGAIN;
		if (n == GNUTLS_E_PREMATURE_TERMINATION)
			return 0;
		if (n < 0) {
			if (n == GNUTLS_E_FATAL_ALERT_RECEIVED)
				c->tls_alert = (int)gnutls_alert_get(c->tls);
			snprintf(c->tls_detail, sizeof(c->tls_detail), "TLS: %s", n == GNUTLS_E_FATAL_ALERT_RECEIVED
			         ? gnutls_alert_get_name(gnutls_alert_get(c->tls)) : gnutls_strerror((int)n));
			/* TLS 1.3: the daemon refuses our certificate (or its lack) only
			 * after the handshake, with an alert. */
			if (n == GNUTLS_E_FATAL_ALERT_RECEIVED)
				c->tls_failed = true;
			return -ECONNRESET;
		}
		return n;
	}
	for (;;) {
		ssize_t n = recv(c->fd, p, len, 0);
		if (n >= 0)
			return n;
		if (errno == EINTR)
			continue;
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	}
}

static int wait_fd(int fd, short events, int64_t deadline)
{
	for (;;) {
		int t = -1;
		if (deadline >= 0) {
			int64_t left = deadline - now_ms();
			if (left <= 0)
				return -ETIMEDOUT;
			t = (int)(left > 1000000 ? 1000000 : left);
		}
		struct pollfd pfd = { .fd = fd, .events = events };
		int r = poll(&pfd, 1, t);
		if (r > 0)
			return 0;
		if (r == 0)
			continue; /* loop re-checks the deadline */
		if (errno != EINTR)
			return -errno;
	}
}

static int tout_send_wait(struct pdc_conn *c, int64_t deadline)
{
	for (;;) {
		int r = tout_send(c);
		if (r < 0 || !pd_buf_len(&c->tout))
			return r;
		if ((r = wait_fd(c->fd, POLLOUT, deadline)) < 0)
			return r;
	}
}

/* A group's name, or its number. */
static void group_name(gid_t gid, char *out, size_t n)
{
	char buf[4096];
	struct group g, *res = NULL;
	if (getgrgid_r(gid, &g, buf, sizeof(buf), &res) == 0 && res)
		snprintf(out, n, "%s", g.gr_name);
	else
		snprintf(out, n, "%u", (unsigned)gid);
}

/* connect(2) said EACCES: find what refused (a directory on the way, which
 * needs search permission, or the socket, which needs write permission)
 * and say which group would let the caller in. */
static int eacces_sentence(struct pdc_result *e, int err, const char *path)
{
	char at[sizeof(((struct sockaddr_un *)0)->sun_path)];
	const char *what = path;
	int need = W_OK;
	for (const char *p = strchr(path + 1, '/'); p; p = strchr(p + 1, '/')) {
		snprintf(at, sizeof(at), "%.*s", (int)(p - path), path);
		if (faccessat(AT_FDCWD, at, X_OK, AT_EACCESS) < 0) {
			what = at;
			need = X_OK;
			break;
		}
	}
	struct stat st;
	if (stat(what, &st) < 0)
		return set_err(e, err, PD_ST_ACCESS_DENIED, "permission denied on %s: set PGPDECD_SOCKET (or --socket) "
		               "to a socket you may open", path);
	char grp[64], own[96] = "";
	group_name(st.st_gid, grp, sizeof(grp));
	if (what != path)
		snprintf(own, sizeof(own), ", the directory of %s", path);
	/* Does the group's permission let its members in? */
	if (st.st_mode & (need == X_OK ? S_IXGRP : S_IWGRP))
		return set_err(e, err, PD_ST_ACCESS_DENIED, "permission denied on %s (group %s)%s: add your user to "
		               "group %s (and log in again) or set PGPDECD_SOCKET to a socket you may open",
		               what, grp, own, grp);
	return set_err(e, err, PD_ST_ACCESS_DENIED, "permission denied on %s (mode %04o, owner uid %u, group %s)%s: "
	               "it lets in only its owner; set PGPDECD_SOCKET to a socket you may open", what,
	               (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid, grp, own);
}

/* from: where path came from, for the sentence ("PGPDECD_SOCKET"), or NULL. */
static int connect_unix(const char *path, const char *from, int64_t deadline, struct pdc_result *e)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path))
		return set_err(e, -ENAMETOOLONG, 0, "socket path longer than %zu bytes (%zu): %s%s%s: use a shorter one",
		               sizeof(sa.sun_path) - 1, strlen(path), path, from ? ", from " : "", from ? from : "");
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return set_err(e, -errno, 0, "socket: %s", strerror(errno));
	(void)deadline; /* a Unix connect does not wait on the network */
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int err = -errno;
		close(fd);
		if (err == -EACCES)
			return eacces_sentence(e, err, path);
		return set_err(e, err, err == -EPERM ? PD_ST_ACCESS_DENIED : 0,
		               "cannot connect to %s: %s", path, strerror(-err));
	}
	return fd;
}

static int connect_tcp(const char *host, const char *port, int64_t deadline, struct pdc_result *e)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_ADDRCONFIG }, *ai = NULL;
	int g = getaddrinfo(host, port, &hints, &ai);
	if (g != 0)
		return set_err(e, -EHOSTUNREACH, 0, "cannot resolve %s:%s: %s", host, port, gai_strerror(g));
	int err = -EHOSTUNREACH;
	for (struct addrinfo *a = ai; a; a = a->ai_next) {
		int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
		if (fd < 0) {
			err = -errno;
			continue;
		}
		if (connect(fd, a->ai_addr, a->ai_addrlen) < 0 && errno != EINPROGRESS) {
			err = -errno;
			close(fd);
			continue;
		}
		int r = wait_fd(fd, POLLOUT, deadline);
		int soerr = 0;
		socklen_t sl = sizeof(soerr);
		if (r == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0) {
			int one = 1;
			(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			freeaddrinfo(ai);
			return fd;
		}
		err = r < 0 ? r : -(soerr ? soerr : EHOSTUNREACH);
		close(fd);
	}
	freeaddrinfo(ai);
	return set_err(e, err, 0, "cannot connect to %s:%s: %s", host, port, strerror(-err));
}

static int parse_pin(const char *s, uint8_t out[32])
{
	if (strncasecmp(s, "sha256:", 7) == 0)
		s += 7;
	size_t n = 0;
	for (; *s; s++) {
		if (*s == ':' || *s == ' ')
			continue;
		int v;
		if (*s >= '0' && *s <= '9') v = *s - '0';
		else if (*s >= 'a' && *s <= 'f') v = *s - 'a' + 10;
		else if (*s >= 'A' && *s <= 'F') v = *s - 'A' + 10;
		else return -EINVAL;
		if (n >= 64)
			return -EINVAL;
		if (n % 2 == 0) out[n / 2] = (uint8_t)(v << 4);
		else out[n / 2] |= (uint8_t)v;
		n++;
	}
	return n == 64 ? 0 : -EINVAL;
}

static int verify_cb(gnutls_session_t s)
{
	struct pdc_conn *c = gnutls_session_get_ptr(s);
	if (c->has_ca || !c->has_pin) {
		unsigned status = 0;
		int r = gnutls_certificate_verify_peers3(s, c->verify_name, &status);
		if (r < 0 || status != 0) {
			gnutls_datum_t txt = { 0 };
			if (r >= 0 && gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &txt, 0) >= 0) {
				snprintf(c->tls_detail, sizeof(c->tls_detail), "server certificate not trusted: %s", txt.data);
				gnutls_free(txt.data);
			} else {
				snprintf(c->tls_detail, sizeof(c->tls_detail), "server certificate not verified: %s",
				         gnutls_strerror(r));
			}
			return GNUTLS_E_CERTIFICATE_ERROR;
		}
	}
	if (c->has_pin) {
		unsigned n = 0;
		const gnutls_datum_t *certs = gnutls_certificate_get_peers(s, &n);
		uint8_t dg[32];
		if (!certs || n == 0 || gnutls_hash_fast(GNUTLS_DIG_SHA256, certs[0].data, certs[0].size, dg) < 0) {
			snprintf(c->tls_detail, sizeof(c->tls_detail), "server sent no certificate");
			return GNUTLS_E_CERTIFICATE_ERROR;
		}
		if (memcmp(dg, c->pin, 32) != 0) {
			char hex[65];
			for (int i = 0; i < 32; i++)
				snprintf(hex + 2 * i, 3, "%02X", dg[i]);
			snprintf(c->tls_detail, sizeof(c->tls_detail),
			         "server certificate SHA-256 fingerprint %s does not match the pinned one", hex);
			return GNUTLS_E_CERTIFICATE_ERROR;
		}
	}
	return 0;
}

static int is_ip_literal(const char *h)
{
	struct in6_addr a6;
	return inet_pton(AF_INET, h, &a6) == 1 || inet_pton(AF_INET6, h, &a6) == 1;
}

/* GnuTLS says "Error while reading file." whatever the reason: the errno
 * of opening the file, or NULL if it opens. */
static const char *unreadable(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return strerror(errno);
	close(fd);
	return NULL;
}

/* The caller's TLS files and pin, before connecting: a mistake in them is
 * a configuration error (-EINVAL), not a daemon that is down. */
static int tls_load(struct pdc_conn *c, const struct pdc_config *cfg, struct pdc_result *e)
{
	int r;
	const char *why;
	if ((r = gnutls_certificate_allocate_credentials(&c->cred)) < 0)
		return set_err(e, -ENOMEM, 0, "TLS: %s", gnutls_strerror(r));
	if (cfg->tls_pin) {
		if (parse_pin(cfg->tls_pin, c->pin) < 0)
			return set_err(e, -EINVAL, 0, "TLS pin is not a SHA-256 fingerprint (64 hex digits): %s", cfg->tls_pin);
		c->has_pin = true;
	}
	if (cfg->tls_ca) {
		r = gnutls_certificate_set_x509_trust_file(c->cred, cfg->tls_ca, GNUTLS_X509_FMT_PEM);
		if (r <= 0 && (why = unreadable(cfg->tls_ca)))
			return set_err(e, -EINVAL, 0, "TLS CA file %s cannot be read: %s", cfg->tls_ca, why);
		if (r <= 0)
			return set_err(e, -EINVAL, 0, "TLS CA file %s: %s", cfg->tls_ca,
			               r == 0 ? "no PEM certificate in it" : gnutls_strerror(r));
		c->has_ca = true;
	} else if (!c->has_pin) {
		r = gnutls_certificate_set_x509_system_trust(c->cred);
		if (r <= 0)
			return set_err(e, -EINVAL, 0, "TLS: no CA given (--tls-ca) and no system CAs");
	}
	if (cfg->tls_cert || cfg->tls_key) {
		if (!cfg->tls_cert || !cfg->tls_key)
			return set_err(e, -EINVAL, 0, "TLS: a client certificate needs both a certificate and a key file");
		r = gnutls_certificate_set_x509_key_file(c->cred, cfg->tls_cert, cfg->tls_key, GNUTLS_X509_FMT_PEM);
		if (r < 0 && (why = unreadable(cfg->tls_cert)))
			return set_err(e, -EINVAL, 0, "TLS client certificate %s cannot be read: %s", cfg->tls_cert, why);
		if (r < 0 && (why = unreadable(cfg->tls_key)))
			return set_err(e, -EINVAL, 0, "TLS client key %s cannot be read: %s", cfg->tls_key, why);
		if (r < 0)
			return set_err(e, -EINVAL, 0, "TLS: cannot load client certificate %s / key %s: %s",
			               cfg->tls_cert, cfg->tls_key, gnutls_strerror(r));
		c->has_cert = true;
	}
	gnutls_certificate_set_verify_function(c->cred, verify_cb);
	return 0;
}

/* The server's "certificate required" alert: the sentence says what to do. */
static int cert_required(struct pdc_conn *c, struct pdc_result *e)
{
	if (c->has_cert)
		return set_err(e, -EACCES, 0, "the daemon requires a client certificate and took none of ours: is "
		               "it signed by a CA the daemon trusts (its tls-ca), or pinned (tls-pin)?");
	return set_err(e, -EACCES, 0, "the daemon requires a client certificate: give one with --tls-cert and "
	               "--tls-key (tls-cert and tls-key in the milter's configuration)");
}

static int tls_start(struct pdc_conn *c, const struct pdc_config *cfg, int64_t deadline, struct pdc_result *e)
{
	int r;
	const char *name = cfg->tls_server_name ? cfg->tls_server_name : cfg->host;
	c->verify_name = strdup(name);
	if (!c->verify_name)
		return set_err(e, -ENOMEM, 0, "out of memory");
	if ((r = gnutls_init(&c->tls, GNUTLS_CLIENT | GNUTLS_NONBLOCK)) < 0)
		return set_err(e, -ENOMEM, 0, "TLS: %s", gnutls_strerror(r));
	gnutls_session_set_ptr(c->tls, c);
	if ((r = gnutls_set_default_priority(c->tls)) < 0 ||
	    (r = gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, c->cred)) < 0)
		return set_err(e, -EINVAL, 0, "TLS: %s", gnutls_strerror(r));
	if (!is_ip_literal(name))
		(void)gnutls_server_name_set(c->tls, GNUTLS_NAME_DNS, name, strlen(name));
	if (pd_buf_init(&c->tin, TLS_IN_SIZE) < 0 || pd_buf_init(&c->tout, TLS_OUT_SIZE) < 0)
		return set_err(e, -ENOMEM, 0, "out of memory");
	gnutls_transport_set_ptr(c->tls, c);
	gnutls_transport_set_push_function(c->tls, tls_push);
	gnutls_transport_set_pull_function(c->tls, tls_pull);
	for (;;) {
		r = gnutls_handshake(c->tls);
		/* Our flight, or the alert of a failure, leaves before we wait. */
		int w = tout_send_wait(c, deadline);
		if (r < 0 && r != GNUTLS_E_AGAIN && r != GNUTLS_E_INTERRUPTED)
			break;
		if (!w && !r)
			return 0;
		if (!w && pd_buf_len(&c->tin))
			continue; /* more read than that step took */
		if (!w)
			w = wait_fd(c->fd, gnutls_record_get_direction(c->tls) ? POLLOUT : POLLIN, deadline);
		if (w < 0)
			return set_err(e, w, w == -ETIMEDOUT ? PD_ST_TIMEOUT : 0, "TLS handshake with %s: %s", name,
			               w == -ETIMEDOUT ? "timed out" : strerror(-w));
	}
	/* Not EACCES: an untrusted server is a configuration problem to retry after fixing. */
	if (c->tls_detail[0]) {
		c->tls_failed = true;
		return set_err(e, -EKEYREJECTED, 0, "TLS handshake with %s: %s", name, c->tls_detail);
	}
	if (r == GNUTLS_E_FATAL_ALERT_RECEIVED) {
		c->tls_failed = true;
		if (gnutls_alert_get(c->tls) == GNUTLS_A_CERTIFICATE_REQUIRED)
			return cert_required(c, e);
		return set_err(e, -ECONNREFUSED, 0, "TLS handshake with %s: the server refused it (%s)", name,
		               gnutls_alert_get_name(gnutls_alert_get(c->tls)));
	}
	return set_err(e, -ECONNREFUSED, 0, "TLS handshake with %s failed: %s", name, gnutls_strerror(r));
}

/* ------------------------------------------------------------------ */
/* requests */

static void req_free(struct req *r)
{
	if (r->spool_fd >= 0)
		close(r->spool_fd);
	if (r->password) {
		explicit_bzero(r->password, r->d.password_len);
		free(r->password);
	}
	if (r->skey) {
		explicit_bzero(r->skey, r->d.session_key_len);
		free(r->skey);
	}
	free(r->bind);
	explicit_bzero(&r->res.info, sizeof(r->res.info));
	explicit_bzero(r->res.session_key, sizeof(r->res.session_key));
	free(r);
}

static int requeue(struct pdc_conn *c, struct req *r, bool same_conn);

/* Its outcome to its on_done, then free it: the only place on_done is called. */
static void finish(struct req *r)
{
	if (r->local_err && !r->res.err) {
		r->res.err = r->local_err;
		if (!r->res.sentence[0] || r->res.status == PD_ST_OK)
			snprintf(r->res.sentence, sizeof(r->res.sentence), "local: %s", strerror(-r->local_err));
	}
	if (r->d.on_done)
		r->d.on_done(r->d.arg, &r->res);
	req_free(r);
}

/* Unlink the head and finish it, or, for a request answered
 * SHUTTING_DOWN/OVERLOADED that may be sent again, queue a fresh copy. */
static void complete_head(struct pdc_conn *c)
{
	struct req *r = c->head;
	c->head = r->next;
	if (!c->head)
		c->tail = NULL;
	c->n_pending--;
	if (r->resend && requeue(c, r, true) == 0) {
		req_free(r);
		return;
	}
	finish(r);
}

static void complete_ready(struct pdc_conn *c)
{
	while (c->head && c->head->answered && c->head->st == S_SENT)
		complete_head(c);
}

/* Requests waiting for a new connection that will not come: each gets
 * this outcome. */
static void fail_waiting(struct pdc_conn *c, int err, unsigned status, const char *sentence)
{
	while (c->rhead) {
		struct req *r = c->rhead;
		c->rhead = r->next;
		if (!c->rhead)
			c->rtail = NULL;
		c->n_pending--;
		memset(&r->res, 0, sizeof(r->res));
		r->res.err = err;
		r->res.status = status;
		snprintf(r->res.sentence, sizeof(r->res.sentence), "%s", sentence);
		snprintf(r->res.errname, sizeof(r->res.errname), "%s", pd_status_name((uint16_t)status));
		finish(r);
	}
}

static unsigned backoff_ms(unsigned attempt)
{
	unsigned ms = attempt >= 6 ? 2000 : 50u << attempt;
	if (ms > 2000)
		ms = 2000;
	/* +-25 %: clients that failed together do not come back together */
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	unsigned j = (unsigned)(ts.tv_nsec ^ (ts.tv_nsec >> 11)) % (ms / 2 + 1);
	return ms - ms / 4 + j;
}

/* Its source back at the first octet: 0, or why not. */
static int rewind_input(struct req *r)
{
	if (!r->input_read)
		return 0;
	if (r->d.in_read)
		return r->d.in_rewind ? r->d.in_rewind(r->d.arg) : -ESPIPE;
	if (r->d.in_fd >= 0) {
		if (r->in_start >= 0)
			return lseek(r->d.in_fd, r->in_start, SEEK_SET) < 0 ? -errno : 0;
		return r->spool_fd >= 0 ? 0 : -ESPIPE; /* the copy is read first (requeue) */
	}
	return 0; /* a buffer: the copy starts at in_off 0 */
}

/* A fresh copy of r (which the caller frees) to be sent again: queued on
 * this connection (same_conn, the connection alive: after its backoff) or
 * for the next one.  0, or r cannot be sent again (the caller completes it). */
static int requeue(struct pdc_conn *c, struct req *r, bool same_conn)
{
	int64_t now = now_ms();
	if (!c->retry || r->local_err || r->attempts + 1 >= RETRY_MAX_ATTEMPTS)
		return -1;
	if (r->retry_deadline && !r->delivered && now >= r->retry_deadline)
		return -1; /* out of time without progress (see below) */
	if (r->d.on_retry ? r->d.on_retry(r->d.arg) != 0 : r->delivered)
		return -1; /* its reply already went somewhere that cannot take it back */
	if (rewind_input(r) < 0)
		return -1;
	struct req *n = calloc(1, sizeof(*n));
	if (!n)
		return -1;
	n->type = r->type;
	n->d = r->d;
	n->on_key = r->on_key;
	n->password = r->password; /* moved: r no longer wipes it */
	r->password = NULL;
	n->skey = r->skey;
	r->skey = NULL;
	n->in_start = r->in_start;
	n->spool_fd = r->spool_fd; /* moved */
	r->spool_fd = -1;
	n->spool_len = n->spool_fd >= 0 ? r->spool_len : 0;
	n->replaying = n->spool_len > 0;
	n->input_read = n->spool_fd >= 0; /* the copy goes on growing as the pipe is read */
	n->attempts = r->attempts + 1;
	/* The window runs from the first failure, and starts again after a
	 * failure that came once the request had made progress (plaintext had
	 * come back): a long message killed twice a few minutes apart is not
	 * out of time, a daemon that never answers it is. */
	n->retry_deadline = r->retry_deadline && !r->delivered ? r->retry_deadline :
	                    now + (c->timeout_ms > 0 ? c->timeout_ms : RETRY_DEFAULT_MS);
	n->not_before = now + backoff_ms(r->attempts);
	n->st = S_QUEUED;
	c->resent++;
	c->n_pending++;
	if (same_conn && !c->dead && !c->draining) {
		if (++c->next_id == 0)
			c->next_id = 1;
		n->id = c->next_id;
		if (c->tail)
			c->tail->next = n;
		else
			c->head = n;
		c->tail = n;
	} else {
		if (c->rtail)
			c->rtail->next = n;
		else
			c->rhead = n;
		c->rtail = n;
	}
	return 0;
}

/* The connection is over: every request not done gets this outcome. */
static int conn_fail(struct pdc_conn *c, int err, unsigned status, const char *sentence)
{
	if (!c->dead) {
		c->dead = err;
		c->dead_status = status;
		snprintf(c->dead_sentence, sizeof(c->dead_sentence), "%s", sentence);
	}
	/* What ended it may be retried: requests not answered go to a new
	 * connection (pdc_run() or pdc_recover() makes it) if they can. */
	bool again = c->retry && (c->dead == -ECONNRESET || c->dead == -EPIPE || c->dead == -ETIMEDOUT ||
	                          c->dead == -ECONNREFUSED || c->dead == -ENOENT || c->dead == -ENOTCONN ||
	                          (c->dead == -ECONNABORTED && (c->dead_status == PD_ST_SHUTTING_DOWN ||
	                                                        c->dead_status == PD_ST_OVERLOADED ||
	                                                        c->dead_status == PD_ST_TIMEOUT)));
	while (c->head) {
		struct req *r = c->head;
		if (!r->answered && again && !r->resend) {
			c->head = r->next;
			if (!c->head)
				c->tail = NULL;
			c->n_pending--;
			if (requeue(c, r, false) == 0) {
				req_free(r);
				continue;
			}
			/* it stays: put it back at the head and complete it below */
			r->next = c->head;
			c->head = r;
			if (!c->tail)
				c->tail = r;
			c->n_pending++;
		}
		if (!r->answered) {
			memset(&r->res, 0, sizeof(r->res));
			/* An ERROR frame from the server is a server outcome (err 0). */
			r->res.err = c->dead == -ECONNABORTED ? 0 : c->dead;
			r->res.status = c->dead_status;
			snprintf(r->res.sentence, sizeof(r->res.sentence), "%s", c->dead_sentence);
			snprintf(r->res.errname, sizeof(r->res.errname), "%s", pd_status_name((uint16_t)c->dead_status));
		}
		r->st = S_SENT;
		r->answered = true;
		complete_head(c);
	}
	if (!again)
		fail_waiting(c, c->dead == -ECONNABORTED ? 0 : c->dead, c->dead_status, c->dead_sentence);
	return c->dead;
}

static int read_some(struct pdc_conn *c);

static int submit(struct pdc_conn *c, struct req *r)
{
	/* On an idle connection, notice first whether the server has closed it
	 * (idle timeout, shutdown): then this request fails at once, before it
	 * is accepted, and the caller can reconnect without losing anything. */
	if (!c->head && !c->dead && !c->reading)
		(void)read_some(c);
	r->in_start = r->d.in_fd >= 0 ? lseek(r->d.in_fd, 0, SEEK_CUR) : -1;
	if (c->dead && c->retry) {
		/* It waits for the next connection, which pdc_run() (or the
		 * caller's pdc_recover()) makes; nothing of it was sent. */
		r->st = S_QUEUED;
		r->retry_deadline = now_ms() + (c->timeout_ms > 0 ? c->timeout_ms : RETRY_DEFAULT_MS);
		c->n_pending++;
		if (c->rtail)
			c->rtail->next = r;
		else
			c->rhead = r;
		c->rtail = r;
		return 0;
	}
	if (c->dead) {
		req_free(r);
		return c->dead;
	}
	if (++c->next_id == 0)
		c->next_id = 1;
	r->id = c->next_id;
	r->st = S_QUEUED;
	if (c->tail)
		c->tail->next = r;
	else
		c->head = r;
	c->tail = r;
	c->n_pending++;
	return 0;
}

bool pdc_bind_value_ok(const char *v) { return v && pd_bind_value_ok(v, strlen(v)); }

int pdc_submit_decrypt(struct pdc_conn *c, const struct pdc_decrypt *d)
{
	int srcs = (d->in_fd >= 0) + (d->in_buf != NULL || (d->in_len == 0 && d->in_fd < 0 && !d->in_read)) +
	           (d->in_read != NULL);
	size_t bind_len = 0;
	if (d->n_bind > PDC_MAX_BIND || (d->n_bind && !d->bind))
		return -EINVAL;
	for (size_t i = 0; i < d->n_bind; i++) {
		if (!pdc_bind_value_ok(d->bind[i]))
			return -EINVAL;
		bind_len += strlen(d->bind[i]) + 1;
	}
	if (srcs != 1 || d->password_len > PD_PASSWORD_MAX ||
	    (d->flags & ~(PDC_VERIFIED_ONLY | PDC_WANT_METADATA | PDC_WANT_SESSION_KEY)) ||
	    (d->session_key && (!d->session_key_len || d->session_key_len > PDC_SESSION_KEY_MAX)))
		return -EINVAL;
	struct req *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->type = PD_FT_DECRYPT;
	r->d = *d;
	r->spool_fd = -1;
	if (d->password) {
		r->password = malloc(d->password_len + 1);
		if (!r->password) {
			free(r);
			return -ENOMEM;
		}
		memcpy(r->password, d->password, d->password_len);
		r->d.password = r->password;
	}
	if (d->session_key) {
		r->skey = malloc(d->session_key_len);
		if (!r->skey) {
			req_free(r);
			return -ENOMEM;
		}
		memcpy(r->skey, d->session_key, d->session_key_len);
		r->d.session_key = r->skey;
	}
	if (d->n_bind) {
		if (!(r->bind = malloc(bind_len))) {
			req_free(r);
			return -ENOMEM;
		}
		size_t o = 0;
		for (size_t i = 0; i < d->n_bind; i++) {
			size_t n = strlen(d->bind[i]);
			memcpy(r->bind + o, d->bind[i], n + 1);
			o += n + 1;
		}
	}
	r->d.bind = NULL; /* the caller's: r->bind holds them */
	return submit(c, r);
}

static int submit_simple(struct pdc_conn *c, uint8_t type, int (*on_data)(void *, const uint8_t *, size_t),
                         int (*on_key)(void *, const struct pdc_key *),
                         void (*on_done)(void *, const struct pdc_result *), void *arg)
{
	struct req *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->type = type;
	r->d.in_fd = -1;
	r->spool_fd = -1;
	r->d.on_data = on_data;
	r->d.on_done = on_done;
	r->d.arg = arg;
	r->on_key = on_key;
	return submit(c, r);
}

int pdc_submit_ping(struct pdc_conn *c, void (*on_done)(void *, const struct pdc_result *), void *arg)
{
	return submit_simple(c, PD_FT_PING, NULL, NULL, on_done, arg);
}

int pdc_submit_stats(struct pdc_conn *c, int (*on_data)(void *, const uint8_t *, size_t),
                     void (*on_done)(void *, const struct pdc_result *), void *arg)
{
	return submit_simple(c, PD_FT_STATS, on_data, NULL, on_done, arg);
}

int pdc_submit_keys(struct pdc_conn *c, int (*on_key)(void *, const struct pdc_key *),
                    void (*on_done)(void *, const struct pdc_result *), void *arg)
{
	return submit_simple(c, PD_FT_KEYS, NULL, on_key, on_done, arg);
}

/* ------------------------------------------------------------------ */
/* sending */

/* A copy of a pipe's ciphertext, so that a resend can read it again:
 * an unlinked file in $TMPDIR (ciphertext only; never plaintext). */
static int spool_open(void)
{
	const char *dir = getenv("TMPDIR");
	if (!dir || !*dir)
		dir = "/tmp";
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
		return fd;
	char path[4096];
	if (snprintf(path, sizeof(path), "%s/.pdclient-XXXXXX", dir) >= (int)sizeof(path))
		return -1;
	fd = mkostemp(path, O_CLOEXEC);
	if (fd >= 0)
		unlink(path);
	return fd;
}

static ssize_t read_input(struct req *r, uint8_t *buf, size_t cap, bool retry)
{
	if (!r->input_read && retry && r->d.in_fd >= 0 && r->in_start < 0)
		r->spool_fd = spool_open(); /* failing that, it cannot be resent once read */
	r->input_read = true;
	if (r->d.in_read)
		return r->d.in_read(r->d.arg, buf, cap);
	if (r->d.in_fd >= 0) {
		if (r->replaying) {
			ssize_t n = pread(r->spool_fd, buf, cap, r->spool_pos);
			if (n < 0)
				return -errno;
			if (n > 0) {
				r->spool_pos += n;
				return n;
			}
			r->replaying = false; /* the copy is sent: on with the pipe */
		}
		for (;;) {
			ssize_t n = read(r->d.in_fd, buf, cap);
			if (n > 0 && r->spool_fd >= 0) {
				if (pwrite(r->spool_fd, buf, (size_t)n, r->spool_len) != n) {
					close(r->spool_fd); /* disk full: this one cannot be resent */
					r->spool_fd = -1;
				} else {
					r->spool_len += n;
				}
			}
			if (n >= 0)
				return n;
			if (errno != EINTR)
				return -errno;
		}
	}
	size_t n = r->d.in_len - r->in_off;
	if (n > cap)
		n = cap;
	if (n)
		memcpy(buf, r->d.in_buf + r->in_off, n);
	r->in_off += n;
	return (ssize_t)n;
}

/* First request not fully sent. */
static struct req *send_req(struct pdc_conn *c)
{
	struct req *r = c->head;
	while (r && r->st == S_SENT)
		r = r->next;
	return r;
}

/* Fill the (empty) output buffer with as many whole frames as fit. */
static void fill_out(struct pdc_conn *c)
{
	uint32_t chunk = c->server.max_frame < CHUNK_MAX ? c->server.max_frame : CHUNK_MAX;
	c->in_wait_fd = -1;
	for (;;) {
		size_t room = c->out_cap - c->out_len;
		uint8_t *o = c->out + c->out_len;
		struct req *r = send_req(c);
		if (!r || room < PD_FRAME_STRUCT_MAX)
			return;
		int n;
		if (r->st == S_QUEUED) {
			if (c->n_outstanding >= c->server.max_inflight)
				return; /* wait for a terminal frame */
			if (c->draining)
				return; /* the server takes no more work: the next connection will */
			if (r->not_before && now_ms() < r->not_before)
				return; /* backoff: pdc_run() wakes for it */
			if (r->type == PD_FT_DECRYPT) {
				struct pd_decrypt_req dr = { .flags = r->d.flags, .password = (const uint8_t *)r->password,
				                             .password_len = r->password ? r->d.password_len : 0,
				                             .session_key = r->skey,
				                             .session_key_len = r->skey ? r->d.session_key_len : 0,
				                             .session_key_algo = r->d.session_key_algo };
				if (r->d.in_buf) {
					dr.has_size_hint = true;
					dr.size_hint = r->d.in_len;
				}
				const char *b = r->bind;
				for (size_t i = 0; i < r->d.n_bind; i++, b += strlen(b) + 1) {
					dr.bind[i] = (const uint8_t *)b;
					dr.bind_len[i] = (uint8_t)strlen(b);
				}
				dr.n_bind = (uint8_t)r->d.n_bind;
				n = pd_frame_encode_decrypt(o, room, r->id, &dr);
				c->out_secret |= dr.password_len > 0 || dr.session_key_len > 0;
				r->st = S_SENDING;
			} else {
				n = pd_frame_encode(o, room, r->type, r->id, NULL, 0);
				r->st = S_SENT;
			}
			c->n_outstanding++;
		} else if (r->answered || r->local_err) {
			/* Early RESULT or unreadable input: end the request. */
			n = pd_frame_encode(o, room, PD_FT_END, r->id, NULL, 0);
			r->st = S_SENT;
		} else {
			if (r->d.in_fd >= 0 && c->in_run && !r->replaying) {
				/* A pipe with nothing to read yet must not stop us reading
				 * the server's replies: let pdc_run() poll it. */
				struct pollfd q = { .fd = r->d.in_fd, .events = POLLIN };
				if (poll(&q, 1, 0) == 0) {
					c->in_wait_fd = r->d.in_fd;
					return;
				}
			}
			size_t want = room - PD_FRAME_HDR_LEN;
			if (want > chunk)
				want = chunk;
			ssize_t got = read_input(r, o + PD_FRAME_HDR_LEN, want, c->retry);
			if (got > 0) {
				pd_frame_put_hdr(o, PD_FT_DATA, r->id, (uint32_t)got);
				n = PD_FRAME_HDR_LEN + (int)got;
			} else {
				if (got < 0)
					r->local_err = (int)got;
				n = pd_frame_encode(o, room, PD_FT_END, r->id, NULL, 0);
				r->st = S_SENT;
			}
		}
		if (n < 0)
			return; /* cannot happen: room >= PD_FRAME_STRUCT_MAX */
		c->out_len += (size_t)n;
	}
}

static int send_failed(struct pdc_conn *c, int err)
{
	/* The server may have said why before it closed: an ERROR frame
	 * or an early RESULT waits in our receive buffer. */
	(void)read_some(c);
	if (c->dead)
		return c->dead;
	char s[128];
	snprintf(s, sizeof(s), "connection to the server lost while sending: %s", strerror(-err));
	return conn_fail(c, err, 0, s);
}

static int flush_out(struct pdc_conn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = xsend(c, c->out + c->out_off, c->out_len - c->out_off);
		if (n == -EAGAIN)
			return 0;
		if (n < 0)
			return send_failed(c, (int)n);
		c->out_off += (size_t)n;
	}
	/* Over TLS the last records may still wait for room in the socket
	 * (pdc_events asks for POLLOUT while they do). */
	int r = c->tls ? tout_send(c) : 0;
	if (r < 0)
		return send_failed(c, -EPIPE);
	if (c->out_secret) {
		explicit_bzero(c->out, c->out_len);
		c->out_secret = false;
	}
	c->out_off = c->out_len = 0;
	/* Requests whose END just left may be complete now. */
	complete_ready(c);
	return 0;
}

/* ------------------------------------------------------------------ */
/* receiving */

__attribute__((format(printf, 2, 3)))
static int violation(struct pdc_conn *c, const char *fmt, ...)
{
	char s[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(s, sizeof(s), fmt, ap);
	va_end(ap);
	/* Tell the server why we hang up; best effort. */
	uint8_t b[PD_FRAME_HELLO_MAX];
	int n = pd_frame_encode_error(b, sizeof(b), PD_ST_PROTOCOL, "EPROTO", s);
	if (n > 0 && c->out_off == c->out_len)
		(void)xsend(c, b, (size_t)n);
	return conn_fail(c, -EPROTO, PD_ST_PROTOCOL, s);
}

static int on_frame(struct pdc_conn *c, const struct pd_frame_hdr *h, const uint8_t *p)
{
	if (h->type == PD_FT_ERROR) {
		struct pd_result e;
		if (pd_parse_error(p, h->len, &e) < 0)
			return violation(c, "malformed ERROR frame from the server");
		char s[PD_SENTENCE_MAX + 64];
		snprintf(s, sizeof(s), "server ended the connection: %s", e.sentence[0] ? e.sentence : pd_status_text(e.status));
		return conn_fail(c, -ECONNABORTED, e.status, s);
	}
	if (h->type == PD_FT_HELLO)
		return violation(c, "server sent a second HELLO");
	/* Replies come in request order: the target is the oldest begun, unanswered request. */
	struct req *r = c->head;
	while (r && r->answered)
		r = r->next;
	if (!r || r->st == S_QUEUED || r->id != h->id)
		return violation(c, "server sent %s for request %u, expected %u", pd_frame_type_name(h->type), h->id,
		                 r && r->st != S_QUEUED ? r->id : 0);
	switch (h->type) {
	case PD_FT_METADATA: {
		if (r->type != PD_FT_DECRYPT || r->begun_data)
			return violation(c, "unexpected METADATA for request %u", r->id);
		struct pd_msginfo *mi = malloc(sizeof(*mi));
		if (!mi)
			return conn_fail(c, -ENOMEM, 0, "out of memory");
		if (pd_parse_metadata(p, h->len, mi) < 0) {
			free(mi);
			return violation(c, "malformed METADATA for request %u", r->id);
		}
		struct pdc_info info;
		copy_info(&info, mi);
		free(mi);
		if (r->d.on_metadata && !r->local_err) {
			r->delivered = true;
			int k = r->d.on_metadata(r->d.arg, &info);
			if (k)
				r->local_err = k < 0 ? k : -ECANCELED;
		}
		return 0;
	}
	case PD_FT_DATA:
		if (r->type != PD_FT_DECRYPT && r->type != PD_FT_STATS)
			return violation(c, "unexpected DATA for request %u", r->id);
		r->begun_data = true;
		if (r->d.on_data && !r->local_err && h->len) {
			r->delivered = true;
			int k = r->d.on_data(r->d.arg, p, h->len);
			if (k)
				r->local_err = k < 0 ? k : -ECANCELED;
		}
		return 0;
	case PD_FT_KEY: {
		if (r->type != PD_FT_KEYS)
			return violation(c, "unexpected KEY for request %u", r->id);
		struct pd_keyinfo k;
		struct pd_key_addrs ka;
		if (pd_parse_key(p, h->len, &k, &ka) < 0)
			return violation(c, "malformed KEY frame");
		char abuf[PD_KEY_ADDRS_MAX * (PD_ADDRESS_MAX + 1)];
		size_t alen = pd_key_addrs_join(&ka, abuf);
		struct pdc_key o = { .version = k.version, .pk_algo = k.pk_algo, .bits = k.bits, .created = k.created,
		                     .fpr_len = k.fpr_len, .primary_fpr_len = k.primary_fpr_len };
		memcpy(o.fpr, k.fpr, 32);
		memcpy(o.primary_fpr, k.primary_fpr, 32);
		memcpy(o.keyid, k.keyid, 8);
		memcpy(o.curve, k.curve, sizeof(o.curve));
		o.addresses = abuf;
		o.addresses_len = alen;
		if (r->on_key && !r->local_err) {
			r->delivered = true;
			int e = r->on_key(r->d.arg, &o);
			if (e)
				r->local_err = e < 0 ? e : -ECANCELED;
		}
		return 0;
	}
	case PD_FT_RESULT: {
		if (r->type == PD_FT_PING)
			return violation(c, "RESULT instead of PONG for request %u", r->id);
		struct pd_msginfo *mi = malloc(sizeof(*mi));
		if (!mi)
			return conn_fail(c, -ENOMEM, 0, "out of memory");
		struct pd_result res;
		int k = pd_parse_result(p, h->len, &res, mi);
		if (k < 0) {
			free(mi);
			return violation(c, "malformed RESULT for request %u", r->id);
		}
		memset(&r->res, 0, sizeof(r->res));
		r->res.status = res.status;
		r->res.integrity = res.integrity;
		r->res.bytes_in = res.bytes_in;
		r->res.bytes_out = res.bytes_out;
		memcpy(r->res.errname, res.errname, sizeof(r->res.errname));
		snprintf(r->res.sentence, sizeof(r->res.sentence), "%s",
		         res.sentence[0] ? res.sentence : pd_status_text(res.status));
		copy_info(&r->res.info, mi);
		free(mi);
		if (res.status == PD_ST_OK && (r->d.flags & PDC_WANT_SESSION_KEY)) {
			r->res.session_key_algo = res.sk_algo;
			r->res.session_key_len = res.sk_len;
			r->res.session_key_refused = res.sk_refused;
			memcpy(r->res.session_key, res.sk, res.sk_len);
		}
		explicit_bzero(res.sk, sizeof(res.sk));
		if (res.status == PD_ST_OK && r->st != S_SENT)
			return violation(c, "RESULT OK for request %u before its END", r->id);
		/* Not decrypted, and nothing wrong with it: send it again (on
		 * the next connection when this server is stopping). */
		if (c->retry && (res.status == PD_ST_SHUTTING_DOWN || res.status == PD_ST_OVERLOADED)) {
			r->resend = true;
			if (res.status == PD_ST_SHUTTING_DOWN)
				c->draining = true;
		}
		break;
	}
	case PD_FT_PONG:
		if (r->type != PD_FT_PING)
			return violation(c, "PONG for a request that is not a PING");
		memset(&r->res, 0, sizeof(r->res));
		snprintf(r->res.sentence, sizeof(r->res.sentence), "pong");
		break;
	default:
		return violation(c, "unexpected %s frame", pd_frame_type_name(h->type));
	}
	r->answered = true;
	c->n_outstanding--;
	complete_ready(c);
	return 0;
}

static int read_some_(struct pdc_conn *c);

/* Frames are dispatched from c->rbuf: a callback that submits must not
 * start another read that would overwrite it. */
static int read_some(struct pdc_conn *c)
{
	if (c->reading)
		return c->dead;
	c->reading = true;
	int r = read_some_(c);
	c->reading = false;
	return r;
}

static int read_some_(struct pdc_conn *c)
{
	/* Until EAGAIN: data GnuTLS has buffered would not wake poll() again. */
	while (!c->dead) {
		ssize_t n = xrecv(c, c->rbuf, RBUF_SIZE);
		if (n == -EAGAIN)
			return 0;
		if (n <= 0) {
			if (n == 0 && !c->head && pd_frame_decoder_pending(c->dec) == 0)
				return conn_fail(c, -ECONNRESET, 0, "server closed the connection");
			char s[128];
			snprintf(s, sizeof(s), "server closed the connection%s%s", n ? ": " : "",
			         n ? strerror((int)-n) : (pd_frame_decoder_pending(c->dec) ? " in the middle of a frame" : ""));
			return conn_fail(c, n ? (int)n : -ECONNRESET, 0, s);
		}
		size_t off = 0;
		while (off < (size_t)n && !c->dead) {
			size_t used;
			struct pd_frame_hdr h;
			const uint8_t *p;
			/* DATA (plaintext) in slices from rbuf, never gathered into
			 * the decoder: a frame is larger than rbuf */
			int r = pd_frame_decode_stream(c->dec, c->rbuf + off, (size_t)n - off, SIZE_MAX, &used, &h, &p);
			off += used;
			if (r < 0)
				return violation(c, "bad frame from the server: %s", pd_frame_decoder_detail(c->dec));
			if (r == 1)
				(void)on_frame(c, &h, p);
		}
		if (!c->tls && (size_t)n < RBUF_SIZE)
			return 0; /* a short plain read: the socket is drained; TLS reads on to EAGAIN */
	}
	return c->dead;
}

/* ------------------------------------------------------------------ */
/* public driving functions */

int pdc_fd(const struct pdc_conn *c) { return c->fd; }
size_t pdc_pending(const struct pdc_conn *c) { return c->n_pending; }
const struct pdc_server *pdc_server(const struct pdc_conn *c) { return &c->server; }

short pdc_events(struct pdc_conn *c)
{
	if (c->dead || (!c->head && c->rhead))
		return 0; /* nothing more here: pdc_recover() */
	if (c->out_len == 0)
		fill_out(c);
	bool more = c->out_len > c->out_off || (c->tls && pd_buf_len(&c->tout));
	return (short)(POLLIN | (more ? POLLOUT : 0));
}

int pdc_process(struct pdc_conn *c, short revents)
{
	if (c->dead)
		return c->dead;
	if (revents & (POLLIN | POLLHUP | POLLERR)) {
		int r = read_some(c);
		if (r < 0)
			return r;
	}
	if (c->out_len == 0)
		fill_out(c);
	if (c->out_len > c->out_off || (c->tls && pd_buf_len(&c->tout)))
		return flush_out(c);
	return 0;
}

/* Milliseconds until the next request waiting out its backoff may go
 * (-1: none waits). */
static int backoff_wait(struct pdc_conn *c)
{
	struct req *r = send_req(c);
	if (!r || r->st != S_QUEUED || !r->not_before || c->draining)
		return -1;
	int64_t left = r->not_before - now_ms();
	return left <= 0 ? 0 : (int)(left > 60000 ? 60000 : left);
}

int pdc_run(struct pdc_conn *c)
{
	int64_t last = now_ms();
	c->in_run = true;
	for (;;) {
		/* Gone, or stopping with requests for another server: reconnect. */
		if (c->dead || (!c->head && c->rhead)) {
			if (!c->rhead || pdc_recover(c) < 0)
				break;
			last = now_ms();
			continue;
		}
		if (!c->head)
			break;
		short ev = pdc_events(c);
		short rev = 0;
		if (tls_buffered(c)) {
			rev = POLLIN; /* data already read, above the socket */
		} else {
			struct pollfd pfd[2] = { { .fd = c->fd, .events = ev }, { .fd = c->in_wait_fd, .events = POLLIN } };
			nfds_t nfd = c->in_wait_fd >= 0 && !(ev & POLLOUT) ? 2 : 1;
			int t = c->timeout_ms;
			if (nfd == 2)
				t = -1; /* waiting for our own input is not the server's silence */
			else if (t > 0) {
				int64_t left = last + t - now_ms();
				t = left <= 0 ? 0 : (int)left;
			}
			int bw = backoff_wait(c);
			bool backing_off = bw >= 0 && (t < 0 || bw < t);
			if (backing_off)
				t = bw;
			int r = poll(pfd, nfd, t);
			if (r < 0) {
				if (errno == EINTR)
					continue;
				r = -errno;
				conn_fail(c, r, 0, "poll failed");
				continue;
			}
			if (r == 0 && backing_off)
				continue; /* a request's backoff is over: pdc_events() sends it */
			if (r == 0) {
				char s[96];
				snprintf(s, sizeof(s), "no progress from the server for %d ms (timed out)", c->timeout_ms);
				conn_fail(c, -ETIMEDOUT, PD_ST_TIMEOUT, s);
				continue;
			}
			rev = pfd[0].revents;
			last = now_ms();
		}
		(void)pdc_process(c, rev);
	}
	c->in_run = false;
	return c->dead;
}

struct one {
	struct pdc_result *ret;
	const struct pdc_decrypt *d;
};

static void one_done(void *arg, const struct pdc_result *r)
{
	struct one *o = arg;
	*o->ret = *r;
	if (o->d->on_done)
		o->d->on_done(o->d->arg, r);
}

static int one_meta(void *arg, const struct pdc_info *i)
{
	struct one *o = arg;
	return o->d->on_metadata ? o->d->on_metadata(o->d->arg, i) : 0;
}

static int one_data(void *arg, const uint8_t *p, size_t n)
{
	struct one *o = arg;
	return o->d->on_data ? o->d->on_data(o->d->arg, p, n) : 0;
}

static ssize_t one_read(void *arg, uint8_t *b, size_t n)
{
	struct one *o = arg;
	return o->d->in_read(o->d->arg, b, n);
}

static int one_rewind(void *arg)
{
	struct one *o = arg;
	return o->d->in_rewind(o->d->arg);
}

static int one_retry(void *arg)
{
	struct one *o = arg;
	return o->d->on_retry(o->d->arg);
}

int pdc_decrypt(struct pdc_conn *c, const struct pdc_decrypt *d, struct pdc_result *ret)
{
	struct one o = { .ret = ret, .d = d };
	struct pdc_decrypt w = *d;
	w.arg = &o;
	w.on_done = one_done;
	w.on_metadata = one_meta;
	w.on_data = one_data;
	if (d->in_read)
		w.in_read = one_read;
	if (d->in_rewind)
		w.in_rewind = one_rewind;
	if (d->on_retry)
		w.on_retry = one_retry;
	int r = pdc_submit_decrypt(c, &w);
	if (r < 0)
		return set_err(ret, r, 0, "cannot submit: %s", strerror(-r));
	r = pdc_run(c);
	return r < 0 ? r : 0;
}

/* ------------------------------------------------------------------ */
/* connect / close */

static int handshake(struct pdc_conn *c, const struct pdc_config *cfg, int64_t deadline, struct pdc_result *e)
{
	struct pd_hello h = { .version_min = PD_PROTO_VERSION, .version_max = PD_PROTO_VERSION };
	snprintf(h.software, sizeof(h.software), "%s", cfg->software ? cfg->software : "libpdclient/" PD_VERSION);
	uint8_t b[PD_FRAME_HELLO_MAX];
	int n = pd_frame_encode_client_hello(b, sizeof(b), &h);
	if (n < 0)
		return set_err(e, n, 0, "cannot encode HELLO");
	size_t off = 0;
	while (off < (size_t)n) {
		ssize_t k = xsend(c, b + off, (size_t)n - off);
		if (k == -EAGAIN) {
			int w = wait_fd(c->fd, POLLOUT, deadline);
			if (w < 0)
				return set_err(e, w, PD_ST_TIMEOUT, "handshake timed out");
			continue;
		}
		if (k < 0)
			break; /* the server may have said why in an ERROR: read it */
		off += (size_t)k;
	}
	if (c->tls && tout_send_wait(c, deadline) == -ETIMEDOUT)
		return set_err(e, -ETIMEDOUT, PD_ST_TIMEOUT, "handshake timed out");
	for (;;) {
		ssize_t k = xrecv(c, c->rbuf, RBUF_SIZE);
		if (k == -EAGAIN) {
			int w = wait_fd(c->fd, POLLIN, deadline);
			if (w < 0)
				return set_err(e, w, w == -ETIMEDOUT ? PD_ST_TIMEOUT : 0, "no HELLO from the server: %s",
				               w == -ETIMEDOUT ? "timed out" : strerror(-w));
			continue;
		}
		/* TLS 1.3: the server checks our certificate after our side of the
		 * handshake is done, and says so with an alert read only here. */
		if (k <= 0 && c->tls && c->tls_alert == GNUTLS_A_CERTIFICATE_REQUIRED)
			return cert_required(c, e);
		if (k <= 0)
			return set_err(e, k ? (int)k : -ECONNRESET, 0, "server closed the connection during the handshake%s%s%s",
			               c->tls_detail[0] ? ": " : "", c->tls_detail,
			               c->tls && !c->has_cert ? " (if the daemon requires client certificates, give "
			               "--tls-cert and --tls-key)" : "");
		size_t used;
		struct pd_frame_hdr fh;
		const uint8_t *p;
		int r = pd_frame_decode_stream(c->dec, c->rbuf, (size_t)k, SIZE_MAX, &used, &fh, &p);
		if (r < 0)
			return set_err(e, -EPROTO, PD_ST_PROTOCOL, "bad frame from the server: %s",
			               pd_frame_decoder_detail(c->dec));
		if (r == 0)
			continue;
		if (fh.type == PD_FT_ERROR) {
			struct pd_result er;
			if (pd_parse_error(p, fh.len, &er) < 0)
				return set_err(e, -EPROTO, PD_ST_PROTOCOL, "malformed ERROR from the server");
			set_err(e, -ECONNABORTED, er.status, "server refused the connection: %s",
			        er.sentence[0] ? er.sentence : pd_status_text(er.status));
			if (e) {
				e->err = 0; /* a server outcome: act on the status */
				snprintf(e->errname, sizeof(e->errname), "%s", pd_status_name(er.status));
			}
			return -ECONNABORTED;
		}
		if (fh.type != PD_FT_HELLO)
			return set_err(e, -EPROTO, PD_ST_PROTOCOL, "server sent %s before HELLO", pd_frame_type_name(fh.type));
		struct pd_hello sh;
		if (pd_parse_hello(p, fh.len, PD_FROM_SERVER, &sh) < 0 || sh.version_min != PD_PROTO_VERSION)
			return set_err(e, -EPROTO, PD_ST_VERSION, "server HELLO is malformed or has an unknown version");
		if (used != (size_t)k) {
			/* Only an ERROR may follow before any request (e.g. a server
			 * that closes at once): report it like a refusal. */
			struct pd_frame_hdr fh2;
			size_t used2;
			pd_frame_decoder_set_max(c->dec, sh.max_frame);
			r = pd_frame_decode_stream(c->dec, c->rbuf + used, (size_t)k - used, SIZE_MAX, &used2, &fh2, &p);
			if (r == 1 && fh2.type == PD_FT_ERROR) {
				struct pd_result er;
				if (pd_parse_error(p, fh2.len, &er) == 0) {
					set_err(e, 0, er.status, "server closed the connection: %s",
					        er.sentence[0] ? er.sentence : pd_status_text(er.status));
					return -ECONNABORTED;
				}
			}
			return set_err(e, -EPROTO, PD_ST_PROTOCOL, "server sent frames after HELLO before any request");
		}
		c->server.version = sh.version_min;
		c->server.max_frame = sh.max_frame;
		c->server.max_message = sh.max_message;
		c->server.max_inflight = sh.max_inflight;
		snprintf(c->server.software, sizeof(c->server.software), "%s", sh.software);
		pd_frame_decoder_set_max(c->dec, sh.max_frame);
		uint32_t chunk = sh.max_frame < CHUNK_MAX ? sh.max_frame : CHUNK_MAX;
		c->out_cap = (size_t)chunk + 2 * PD_FRAME_STRUCT_MAX;
		c->out = malloc(c->out_cap);
		if (!c->out)
			return set_err(e, -ENOMEM, 0, "out of memory");
		return 0;
	}
}

/* The transport of this connection (socket, TLS, decoder state, output
 * buffer) goes; requests, config and targets stay. */
static void transport_close(struct pdc_conn *c)
{
	if (c->tls) {
		if (!c->dead) {
			(void)gnutls_bye(c->tls, GNUTLS_SHUT_WR); /* non-blocking: best effort */
			(void)tout_send(c);
		}
		gnutls_deinit(c->tls);
		c->tls = NULL;
	}
	pd_buf_free(&c->tin);
	pd_buf_free(&c->tout);
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	free(c->verify_name);
	c->verify_name = NULL;
	c->tls_detail[0] = 0;
	c->tls_failed = false;
	c->tls_alert = -1;
	if (c->out) {
		explicit_bzero(c->out, c->out_cap);
		free(c->out);
	}
	c->out = NULL;
	c->out_cap = c->out_len = c->out_off = 0;
	c->out_secret = false;
	pd_frame_decoder_free(c->dec);
	c->dec = NULL;
	memset(&c->server, 0, sizeof(c->server));
	c->n_outstanding = 0;
	c->in_wait_fd = -1;
	c->draining = false;
}

/* Connect to target i and shake hands. */
static int transport_open(struct pdc_conn *c, size_t i, int64_t deadline, struct pdc_result *e)
{
	const struct pdc_target *t = &c->targets[i];
	int r;
	if (pd_frame_decoder_new(&c->dec, PD_FROM_SERVER, PD_FRAME_HELLO_MAX) < 0)
		return set_err(e, -ENOMEM, 0, "out of memory");
	if (t->host) {
		r = connect_tcp(t->host, t->port, deadline, e);
		if (r < 0)
			return r;
		c->fd = r;
		struct pdc_config tc = c->cfg;
		tc.host = t->host;
		if (!c->cfg.no_tls && (r = tls_start(c, &tc, deadline, e)) < 0)
			return r;
	} else {
		r = connect_unix(t->socket_path, c->n_targets == 1 ? c->sock_from : NULL, deadline, e);
		if (r < 0)
			return r;
		c->fd = r;
		int fl = fcntl(c->fd, F_GETFL);
		if (fl < 0 || fcntl(c->fd, F_SETFL, fl | O_NONBLOCK) < 0)
			return set_err(e, -errno, 0, "fcntl: %s", strerror(errno));
	}
	return handshake(c, &c->cfg, deadline, e);
}

/* A Unix socket missing from a directory that exists is a daemon not
 * (yet) listening; a missing directory is a wrong path. */
static bool socket_dir_exists(const char *path)
{
	if (!path)
		return true;
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
	const char *slash = strrchr(path, '/');
	if (!slash)
		return true; /* relative to the working directory, which exists */
	size_t n = (size_t)(slash - path);
	if (n >= sizeof(dir))
		return false;
	memcpy(dir, path, n);
	dir[n] = 0;
	struct stat st;
	return stat(n ? dir : "/", &st) == 0 && S_ISDIR(st.st_mode);
}

/* Whether a failed connection attempt may succeed later: nobody listening
 * yet (a restart), reset, timed out, or a server that is stopping or
 * overloaded.  Not: access denied, TLS verification, protocol, version,
 * usage. */
static bool connect_retriable(int r, const struct pdc_result *e)
{
	if (r == -ECONNABORTED)
		return e->status == PD_ST_SHUTTING_DOWN || e->status == PD_ST_OVERLOADED || e->status == PD_ST_TIMEOUT;
	return r == -ECONNREFUSED || r == -ENOENT || r == -ECONNRESET || r == -ETIMEDOUT || r == -EPIPE ||
	       r == -EHOSTUNREACH || r == -ENETUNREACH || r == -EAGAIN || r == -ENOTCONN;
}

/* Connect to the first target that answers, starting at first; with
 * retry, pass after pass with backoff until deadline while some failure
 * may pass.  0 with c->cur set, or the last error in *e. */
static int connect_any(struct pdc_conn *c, size_t first, int64_t deadline, struct pdc_result *e)
{
	int r = -EHOSTUNREACH;
	for (unsigned pass = 0;; pass++) {
		bool may_pass = false;
		for (size_t k = 0; k < c->n_targets; k++) {
			size_t i = (first + k) % c->n_targets;
			transport_close(c);
			int64_t dl = deadline;
			if (c->timeout_ms && (dl < 0 || now_ms() + c->timeout_ms < dl))
				dl = now_ms() + c->timeout_ms;
			r = transport_open(c, i, dl, e);
			if (r == 0) {
				c->cur = i;
				return 0;
			}
			may_pass |= connect_retriable(r, e) && !c->tls_failed &&
			            (r != -ENOENT || socket_dir_exists(c->targets[i].socket_path));
		}
		transport_close(c);
		if (!c->retry || !may_pass)
			return r;
		int64_t left = deadline < 0 ? INT64_MAX : deadline - now_ms();
		if (left <= 0)
			return r;
		unsigned ms = backoff_ms(pass);
		(void)poll(NULL, 0, (int)((int64_t)ms < left ? (int64_t)ms : left));
	}
}

int pdc_recover(struct pdc_conn *c)
{
	/* A connection still open (its server stopping): what it has not
	 * answered goes to the next one too. */
	if (!c->dead)
		conn_fail(c, -ECONNABORTED, PD_ST_SHUTTING_DOWN, "the server is stopping");
	if (!c->rhead)
		return c->dead;
	int64_t deadline = -1;
	for (struct req *r = c->rhead; r; r = r->next)
		if (r->retry_deadline && (deadline < 0 || r->retry_deadline < deadline))
			deadline = r->retry_deadline;
	if (deadline < 0)
		deadline = now_ms() + (c->timeout_ms > 0 ? c->timeout_ms : RETRY_DEFAULT_MS);
	struct pdc_result e;
	int r = connect_any(c, (c->cur + 1) % c->n_targets, deadline, &e);
	if (r < 0) {
		c->dead = r;
		c->dead_status = e.status;
		snprintf(c->dead_sentence, sizeof(c->dead_sentence), "%s", e.sentence);
		fail_waiting(c, e.err, e.status, e.sentence);
		return r;
	}
	c->dead = 0;
	c->dead_status = 0;
	c->dead_sentence[0] = 0;
	/* The waiting requests, in order, on the new connection. */
	while (c->rhead) {
		struct req *q = c->rhead;
		c->rhead = q->next;
		if (!c->rhead)
			c->rtail = NULL;
		q->next = NULL;
		if (++c->next_id == 0)
			c->next_id = 1;
		q->id = c->next_id;
		q->not_before = 0; /* the backoff was the reconnection's */
		if (c->tail)
			c->tail->next = q;
		else
			c->head = q;
		c->tail = q;
	}
	return 0;
}

int pdc_backoff_ms(struct pdc_conn *c) { return c->dead ? -1 : backoff_wait(c); }

unsigned long pdc_resent(const struct pdc_conn *c) { return c->resent; }

int pdc_connect(struct pdc_conn **ret, const struct pdc_config *cfg, struct pdc_result *e)
{
	struct pdc_conn *c = calloc(1, sizeof(*c));
	if (!c)
		return set_err(e, -ENOMEM, 0, "out of memory");
	c->fd = -1;
	c->in_wait_fd = -1;
	c->cfg = *cfg;
	c->retry = !cfg->no_retry;
	c->tls_alert = -1;
	c->timeout_ms = cfg->timeout_ms == 0 ? 60000 : cfg->timeout_ms < 0 ? 0 : cfg->timeout_ms;
	int64_t deadline = c->timeout_ms ? now_ms() + c->timeout_ms : -1;
	int r;
	c->n_targets = cfg->n_targets ? cfg->n_targets : 1;
	c->targets = calloc(c->n_targets, sizeof(*c->targets));
	c->rbuf = malloc(RBUF_SIZE);
	if (!c->rbuf || !c->targets) {
		r = set_err(e, -ENOMEM, 0, "out of memory");
		goto fail;
	}
	if (cfg->n_targets) {
		memcpy(c->targets, cfg->targets, c->n_targets * sizeof(*c->targets));
	} else if (cfg->host) {
		c->targets[0] = (struct pdc_target){ .host = cfg->host, .port = cfg->port };
	} else {
		const char *path = cfg->socket_path, *from = NULL;
		if (!path && (path = getenv("PGPDECD_SOCKET")) && *path)
			from = "PGPDECD_SOCKET";
		if (!path || !*path)
			path = PDC_DEFAULT_SOCKET;
		c->targets[0] = (struct pdc_target){ .socket_path = path };
		c->sock_from = from;
	}
	bool tcp = false;
	for (size_t i = 0; i < c->n_targets; i++) {
		if (!c->targets[i].host && !c->targets[i].socket_path) {
			r = set_err(e, -EINVAL, 0, "target %zu names neither a socket nor a host", i + 1);
			goto fail;
		}
		if (c->targets[i].host && !c->targets[i].port) {
			r = set_err(e, -EINVAL, 0, "no port given for %s", c->targets[i].host);
			goto fail;
		}
		tcp |= c->targets[i].host != NULL;
	}
	/* TLS files are the client's configuration: loaded once, before any
	 * connect, so that a wrong one is said at once (and never retried). */
	if (tcp && !cfg->no_tls && (r = tls_load(c, cfg, e)) < 0)
		goto fail;
	r = connect_any(c, 0, deadline, e);
	if (r < 0)
		goto fail;
	*ret = c;
	return 0;
fail:
	pdc_close(c);
	return r;
}

struct pdc_conn *pdc_close(struct pdc_conn *c)
{
	if (!c)
		return NULL;
	c->retry = false; /* nothing is sent again now */
	if (c->head)
		conn_fail(c, -ECANCELED, 0, "connection closed by the client");
	fail_waiting(c, -ECANCELED, 0, "connection closed by the client");
	transport_close(c);
	if (c->cred)
		gnutls_certificate_free_credentials(c->cred);
	if (c->rbuf) {
		explicit_bzero(c->rbuf, RBUF_SIZE);
		free(c->rbuf);
	}
	free(c->targets);
	free(c);
	return NULL;
}

/* ------------------------------------------------------------------ */
/* names */

bool pdc_verified(const struct pdc_result *r)
{
	return r->err == 0 && r->status == PDC_OK &&
	       (r->integrity == PDC_INTEGRITY_MDC || r->integrity == PDC_INTEGRITY_AEAD);
}

int pdc_exit_code(const struct pdc_result *r)
{
	if (r->err == 0 || r->status != 0)
		return pd_status_exit_code((uint16_t)r->status);
	if (r->err == -EACCES || r->err == -EPERM)
		return PD_EXIT_NOPERM;
	if (r->err == -EINVAL || r->err == -ENAMETOOLONG)
		return PD_EXIT_CONFIG; /* the caller's settings: retrying cannot cure them */
	return PD_EXIT_TEMPFAIL; /* unreachable, reset, timed out: retry later */
}

const char *pdc_status_name(unsigned status) { return pd_status_name((uint16_t)status); }

const char *pdc_sym_name(unsigned a)
{
	static const char *const n[] = { "plaintext", "IDEA", "3DES", "CAST5", "BLOWFISH", "?", "?", "AES128",
	                                 "AES192", "AES256", "TWOFISH", "CAMELLIA128", "CAMELLIA192", "CAMELLIA256" };
	return a < sizeof(n) / sizeof(n[0]) ? n[a] : "unknown";
}

const char *pdc_aead_name(unsigned a)
{
	switch (a) {
	case 0: return "none";
	case 1: return "EAX";
	case 2: return "OCB";
	case 3: return "GCM";
	default: return "unknown";
	}
}

const char *pdc_pk_name(unsigned a)
{
	switch (a) {
	case 0: return "password";
	case 1: case 2: return "RSA";
	case 16: return "ElGamal";
	case 18: return "ECDH";
	case 25: return "X25519";
	case 26: return "X448";
	default: return "unknown";
	}
}

const char *pdc_compress_name(unsigned a)
{
	switch (a) {
	case 0: return "uncompressed";
	case 1: return "ZIP";
	case 2: return "ZLIB";
	case 3: return "BZIP2";
	default: return "unknown";
	}
}
