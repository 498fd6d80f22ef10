/* SPDX-License-Identifier: MIT */
/*
 * pgpdecd-milter: a milter (libmilter, thread per SMTP connection) that
 * spools each message to an unlinked temporary file, hands it at end of
 * message to libpdmail (pd_mail_process) with a second temporary file as
 * output, and applies the result: header edits (milter-hdr.c's diff),
 * replaced body, quarantine, or a 5xx/4xx reply.  The decryptors (one
 * daemon connection each) are a fixed pool of `concurrency`, shared by all
 * connections; a message waits at most `timeout` for one, then tempfails.
 * One log line per message on stderr: queue id, outcome, verdict, status,
 * pieces, size and time; never plaintext, never a subject or address.
 */
#include <errno.h>
#include <fcntl.h>
#include <libmilter/mfapi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

#include "sock.h"
#include "pd-config.h"
#include "milter-config.h"
#include "milter-hdr.h"
#include "pdmail.h"

#define IO_CHUNK (64u << 10)

static struct pd_milter_config *cfg;

/* ---------------------------------------------------------------- */
/* Logging: one line, to stderr (journald under systemd). */

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "pgpdecd-milter: %s\n", line);
}

/* ---------------------------------------------------------------- */
/* The decryptor pool */

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct pd_mail **all, **idle;
	unsigned n, n_idle;
} pool = { .mu = PTHREAD_MUTEX_INITIALIZER };

static int pool_init(unsigned n, const struct pdc_config *pc, const struct pd_mail_policy *pol)
{
	pthread_condattr_t ca;
	int r;
	if (pthread_condattr_init(&ca) || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) ||
	    pthread_cond_init(&pool.cv, &ca))
		return -ENOMEM;
	pthread_condattr_destroy(&ca);
	if (!(pool.all = calloc(n, sizeof(*pool.all))) || !(pool.idle = calloc(n, sizeof(*pool.idle))))
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		if ((r = pd_mail_new(&pool.all[i], pc, pol)) < 0)
			return r;
		pool.idle[pool.n_idle++] = pool.all[i];
		pool.n++;
	}
	return 0;
}

/* NULL when none became free within timeout_ms. */
static struct pd_mail *pool_get(uint64_t timeout_ms)
{
	struct timespec until;
	struct pd_mail *m = NULL;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += (time_t)(timeout_ms / 1000);
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&pool.mu);
	while (!pool.n_idle)
		if (pthread_cond_timedwait(&pool.cv, &pool.mu, &until) == ETIMEDOUT)
			break;
	if (pool.n_idle)
		m = pool.idle[--pool.n_idle];
	pthread_mutex_unlock(&pool.mu);
	return m;
}

static void pool_put(struct pd_mail *m)
{
	pthread_mutex_lock(&pool.mu);
	pool.idle[pool.n_idle++] = m;
	pthread_cond_signal(&pool.cv);
	pthread_mutex_unlock(&pool.mu);
}

/* At exit: free what is idle (libmilter may leave a connection thread behind). */
static void pool_deinit(void)
{
	pthread_mutex_lock(&pool.mu);
	unsigned busy = pool.n - pool.n_idle;
	for (unsigned i = 0; i < pool.n_idle; i++)
		pd_mail_free(pool.idle[i]);
	pool.n_idle = 0;
	pthread_mutex_unlock(&pool.mu);
	if (busy)
		logf_("exiting with %u decryptor(s) still busy", busy);
	else {
		free(pool.all);
		free(pool.idle);
	}
}

/* ---------------------------------------------------------------- */
/* Spool files */

static int write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

static ssize_t read_full(int fd, void *p, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, (char *)p + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

static const char *spool_dir(void)
{
	const char *d = cfg->spool_dir;
	if (!d)
		d = getenv("TMPDIR");
	return d && *d ? d : "/tmp";
}

/* An unlinked file, mode 0600, in the spool directory. */
static int spool_open(void)
{
	const char *dir = spool_dir();
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
		return fd >= 0 ? fd : -errno;
	char path[4096];
	if ((size_t)snprintf(path, sizeof(path), "%s/pgpdecd-milter.XXXXXX", dir) >= sizeof(path))
		return -ENAMETOOLONG;
	fd = mkostemp(path, O_CLOEXEC); /* 0600; no umask(): threads share it */
	if (fd < 0)
		return -errno;
	unlink(path);
	return fd;
}

/* ---------------------------------------------------------------- */
/* Per connection and per message state */

struct msg {
	int fd;                    /* the spooled message */
	uint64_t size;             /* octets spooled */
	bool eoh;                  /* separator written */
	off_t body_off;            /* where the body starts in fd */
	struct pd_hdr_list hdrs;   /* as the MTA passed them */
	struct timespec t0;
};

struct conn {
	bool leadspc;              /* SMFIP_HDR_LEADSPC: values carry their leading space, both ways */
	struct msg *msg;
	/* recipient-binding: the transaction's recipients (their addresses or
	 * @domains, lowercased, each once), at most one more than a request
	 * carries (that one makes the binding one no key meets). */
	char bind[PDC_MAX_BIND + 1][PDC_ADDRESS_MAX + 2];
	size_t n_bind;
};

static struct msg *msg_free(struct msg *m)
{
	if (!m)
		return NULL;
	if (m->fd >= 0)
		close(m->fd);
	pd_hdr_list_clear(&m->hdrs);
	free(m);
	return NULL;
}

static struct conn *conn_get(SMFICTX *ctx)
{
	struct conn *c = smfi_getpriv(ctx);
	if (!c && (c = calloc(1, sizeof(*c))) && smfi_setpriv(ctx, c) != MI_SUCCESS) {
		free(c);
		c = NULL;
	}
	return c;
}

static void msg_reset(SMFICTX *ctx)
{
	struct conn *c = smfi_getpriv(ctx);
	if (c)
		c->msg = msg_free(c->msg);
}

static const char *queue_id(SMFICTX *ctx)
{
	const char *q = smfi_getsymval(ctx, "i");
	if (!q)
		q = smfi_getsymval(ctx, "{i}");
	return q ? q : "NOQUEUE";
}

/* smfi_setreply text: printable, no '%' (libmilter drops text with one). */
static void reply(SMFICTX *ctx, const char *code, const char *xcode, const char *text)
{
	char t[256];
	size_t i = 0;
	for (; text[i] && i < sizeof(t) - 1; i++)
		t[i] = (text[i] >= 32 && text[i] < 127 && text[i] != '%') ? text[i] : '?';
	t[i] = 0;
	smfi_setreply(ctx, (char *)code, (char *)xcode, t);
}

static sfsistat tempfail(SMFICTX *ctx, const char *why)
{
	reply(ctx, "451", "4.3.0", why);
	msg_reset(ctx);
	return SMFIS_TEMPFAIL;
}

/* The current message, created at its first header. NULL: out of memory or no spool. */
static struct msg *msg_get(SMFICTX *ctx, int *ret_err)
{
	struct conn *c = conn_get(ctx);
	if (!c) {
		*ret_err = -ENOMEM;
		return NULL;
	}
	if (c->msg)
		return c->msg;
	struct msg *m = calloc(1, sizeof(*m));
	if (!m) {
		*ret_err = -ENOMEM;
		return NULL;
	}
	clock_gettime(CLOCK_MONOTONIC, &m->t0);
	if ((m->fd = spool_open()) < 0) {
		*ret_err = m->fd;
		logf_("spool %s: %s", spool_dir(), strerror(-m->fd));
		free(m);
		return NULL;
	}
	return c->msg = m;
}

static sfsistat spool(SMFICTX *ctx, struct msg *m, const void *p, size_t n)
{
	if (m->size + n > cfg->max_message_size) {
		reply(ctx, "552", "5.3.4", "message too big to decrypt");
		logf_("%s: rejected: larger than max-message-size", queue_id(ctx));
		msg_reset(ctx);
		return SMFIS_REJECT;
	}
	int r = write_all(m->fd, p, n);
	if (r < 0) {
		logf_("%s: spool write: %s", queue_id(ctx), strerror(-r));
		return tempfail(ctx, "local error: spool");
	}
	m->size += n;
	return SMFIS_CONTINUE;
}

/* ---------------------------------------------------------------- */
/* Callbacks */

#define ACTIONS_NEEDED (SMFIF_ADDHDRS | SMFIF_CHGHDRS | SMFIF_CHGBODY)

static sfsistat on_negotiate(SMFICTX *ctx, unsigned long f0, unsigned long f1, unsigned long f2,
                             unsigned long f3, unsigned long *pf0, unsigned long *pf1, unsigned long *pf2,
                             unsigned long *pf3)
{
	(void)f2;
	(void)f3;
	struct conn *c = conn_get(ctx);
	if (!c)
		return SMFIS_TEMPFAIL;
	if ((f0 & ACTIONS_NEEDED) != ACTIONS_NEEDED) {
		logf_("the MTA does not offer header and body changes (actions 0x%lx): not filtering", f0);
		return SMFIS_REJECT;
	}
	*pf0 = f0 & (ACTIONS_NEEDED | SMFIF_QUARANTINE | SMFIF_SETSYMLIST);
	/* Only the message (and the recipients when they bind the keys): no
	 * connect, HELO, unknown or DATA events. */
	*pf1 = f1 & (SMFIP_NOCONNECT | SMFIP_NOHELO | SMFIP_NORCPT | SMFIP_NOUNKNOWN | SMFIP_NODATA |
	             SMFIP_HDR_LEADSPC);
	if (cfg->binding != PD_BIND_NONE)
		*pf1 &= ~(unsigned long)SMFIP_NORCPT;
	c->leadspc = (*pf1 & SMFIP_HDR_LEADSPC) != 0;
	*pf2 = *pf3 = 0;
	if (*pf0 & SMFIF_SETSYMLIST)
		smfi_setsymlist(ctx, SMFIM_EOM, "i");
	return SMFIS_CONTINUE;
}

/* MAIL FROM: a new message on this connection. */
static sfsistat on_envfrom(SMFICTX *ctx, char **argv)
{
	(void)argv;
	struct conn *c = conn_get(ctx);
	if (c)
		c->n_bind = 0;
	msg_reset(ctx);
	return SMFIS_CONTINUE;
}

/* RCPT TO (only asked for with recipient-binding): what the mail's keys
 * must be bound to.  A recipient that gives no value (no address, too
 * long) is kept as it came, which no key meets: the binding fails closed. */
static sfsistat on_envrcpt(SMFICTX *ctx, char **argv)
{
	struct conn *c = conn_get(ctx);
	if (!c)
		return SMFIS_TEMPFAIL;
	if (cfg->binding == PD_BIND_NONE || c->n_bind > PDC_MAX_BIND)
		return SMFIS_CONTINUE;
	const char *a = argv && argv[0] ? argv[0] : "";
	size_t n = strlen(a);
	if (n >= 2 && a[0] == '<' && a[n - 1] == '>') {
		a++;
		n -= 2;
	}
	const char *colon = a[0] == '@' ? memchr(a, ':', n) : NULL; /* <@relay:user@domain> */
	if (colon) {
		n -= (size_t)(colon + 1 - a);
		a = colon + 1;
	}
	const char *at = cfg->binding == PD_BIND_DOMAIN ? memrchr(a, '@', n) : NULL;
	if (cfg->binding == PD_BIND_ADDRESS && n && a[0] == '@')
		n = 0; /* <@domain>: no local part (the MTA's empty_address_recipient), no address */
	if (at) {
		n -= (size_t)(at - a);
		a = at;
	}
	char v[PDC_ADDRESS_MAX + 2];
	snprintf(v, sizeof(v), "%.*s", (int)(n < sizeof(v) - 1 ? n : sizeof(v) - 1), a);
	for (char *p = v; *p; p++)
		if (*p >= 'A' && *p <= 'Z')
			*p = (char)(*p - 'A' + 'a');
	for (size_t i = 0; i < c->n_bind; i++)
		if (!strcmp(c->bind[i], v))
			return SMFIS_CONTINUE;
	memcpy(c->bind[c->n_bind++], v, sizeof(v));
	return SMFIS_CONTINUE;
}

/* The decryptor's binding for this mail (decryptors serve every
 * connection in turn). */
static int set_bind(struct pd_mail *dec, const struct conn *c)
{
	const char *v[PDC_MAX_BIND + 1];
	size_t n = cfg->binding == PD_BIND_NONE ? 0 : c->n_bind;
	for (size_t i = 0; i < n; i++)
		v[i] = c->bind[i];
	if (cfg->binding != PD_BIND_NONE && !n)
		v[n++] = ""; /* no recipient seen: no key is bound */
	return pd_mail_set_bind(dec, v, n);
}

static sfsistat on_header(SMFICTX *ctx, char *name, char *value)
{
	int err = 0;
	struct msg *m = msg_get(ctx, &err);
	if (!m)
		return tempfail(ctx, "local error: spool");
	struct conn *c = smfi_getpriv(ctx);
	int added = pd_hdr_list_add(&m->hdrs, name, value);
	if (added == -E2BIG) {
		reply(ctx, "552", "5.3.4", "message header too big to decrypt");
		msg_reset(ctx);
		return SMFIS_REJECT;
	}
	if (added < 0) /* out of memory is ours, not the mail's */
		return tempfail(ctx, "local error: memory");
	/* "Name:" [" "] value, each line break as CRLF */
	size_t nl = strlen(name), vl = strlen(value), o = 0;
	char *buf = malloc(nl + 2 + 2 * vl + 2);
	if (!buf)
		return tempfail(ctx, "local error: memory");
	memcpy(buf, name, nl);
	o = nl;
	buf[o++] = ':';
	if (!c->leadspc)
		buf[o++] = ' ';
	for (size_t i = 0; i < vl; i++) {
		if (value[i] == '\r')
			continue;
		if (value[i] == '\n')
			buf[o++] = '\r';
		buf[o++] = value[i];
	}
	buf[o++] = '\r';
	buf[o++] = '\n';
	sfsistat s = spool(ctx, m, buf, o);
	free(buf);
	return s;
}

static sfsistat on_eoh(SMFICTX *ctx)
{
	int err = 0;
	struct msg *m = msg_get(ctx, &err);
	if (!m)
		return tempfail(ctx, "local error: spool");
	m->eoh = true;
	m->body_off = (off_t)m->size + 2;
	return spool(ctx, m, "\r\n", 2);
}

static sfsistat on_body(SMFICTX *ctx, unsigned char *p, size_t n)
{
	int err = 0;
	struct msg *m = msg_get(ctx, &err);
	if (!m)
		return tempfail(ctx, "local error: spool");
	if (!m->eoh) {
		m->eoh = true;
		m->body_off = (off_t)m->size + 2;
		sfsistat s = spool(ctx, m, "\r\n", 2);
		if (s != SMFIS_CONTINUE)
			return s;
	}
	return spool(ctx, m, p, n);
}

/* Header edits through libmilter. */
struct edit_ctx {
	SMFICTX *ctx;
	bool leadspc;
	unsigned n_changed, n_deleted, n_added;
};

static int apply_edit(void *arg, enum pd_hdr_op kind, const char *name, unsigned idx, const char *value)
{
	struct edit_ctx *e = arg;
	char *v = NULL;
	if (value) {
		/* Without LEADSPC the MTA adds the space after the colon itself. */
		if (!e->leadspc)
			while (*value == ' ' || *value == '\t')
				value++;
		v = (char *)value;
	}
	int r;
	switch (kind) {
	case PD_HDR_CHANGE:
		r = smfi_chgheader(e->ctx, (char *)name, (int)idx, v);
		e->n_changed++;
		break;
	case PD_HDR_DELETE:
		r = smfi_chgheader(e->ctx, (char *)name, (int)idx, NULL);
		e->n_deleted++;
		break;
	default:
		r = smfi_addheader(e->ctx, (char *)name, v);
		e->n_added++;
		break;
	}
	return r == MI_SUCCESS ? 0 : -EIO;
}

/* LF -> CRLF (a CR already before an LF stays one CR).  *cr: the last octet seen was CR. */
static size_t to_crlf(const uint8_t *in, size_t n, uint8_t *out, bool *cr)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		if (in[i] == '\n' && !*cr)
			out[o++] = '\r';
		out[o++] = in[i];
		*cr = in[i] == '\r';
	}
	return o;
}

/* Is the output's body (from off, as CRLF) the same as the spooled one's? */
static int body_same(int in_fd, off_t in_off, int out_fd, off_t out_off, uint8_t *a, uint8_t *b, uint8_t *conv)
{
	bool cr = false;
	size_t pend = 0; /* converted octets of the output not yet compared */
	size_t pstart = 0;
	if (lseek(in_fd, in_off, SEEK_SET) < 0 || lseek(out_fd, out_off, SEEK_SET) < 0)
		return -errno;
	for (;;) {
		if (pend == 0) {
			ssize_t n = read_full(out_fd, a, IO_CHUNK);
			if (n < 0)
				return (int)n;
			pend = to_crlf(a, (size_t)n, conv, &cr);
			pstart = 0;
			if (n == 0) { /* output at its end: the input must be too */
				ssize_t k = read_full(in_fd, b, 1);
				return k < 0 ? (int)k : k == 0;
			}
		}
		ssize_t k = read_full(in_fd, b, pend);
		if (k < 0)
			return (int)k;
		if ((size_t)k != pend || memcmp(b, conv + pstart, pend))
			return 0;
		pstart += pend;
		pend = 0;
	}
}

static int replace_body(SMFICTX *ctx, int out_fd, off_t off, uint8_t *a, uint8_t *conv)
{
	bool cr = false;
	size_t total = 0;
	if (lseek(out_fd, off, SEEK_SET) < 0)
		return -errno;
	for (;;) {
		ssize_t n = read_full(out_fd, a, IO_CHUNK);
		if (n < 0)
			return (int)n;
		if (n == 0 && total == 0) {
			/* A zero-length smfi_replacebody sends nothing, and the MTA
			 * would keep the old body: an empty body is one empty line. */
			static char empty[] = "\r\n";
			return smfi_replacebody(ctx, (unsigned char *)empty, 2) == MI_SUCCESS ? 0 : -EIO;
		}
		if (n == 0)
			return 0;
		total += (size_t)n;
		size_t k = to_crlf(a, (size_t)n, conv, &cr);
		if (smfi_replacebody(ctx, conv, (int)k) != MI_SUCCESS)
			return -EIO;
	}
}

static int add_field(void *arg, const char *name, const char *value)
{
	return pd_hdr_list_add(arg, name, value);
}

/* Apply a written message: headers, then the body if it differs. */
static int apply_output(SMFICTX *ctx, struct conn *c, struct msg *m, int out_fd, struct edit_ctx *e,
                        bool *ret_body)
{
	struct pd_hdr_list nh = { 0 };
	int64_t body_off = 0;
	int r = pd_mail_header_fields(out_fd, add_field, &nh, &body_off);
	if (r < 0) {
		pd_hdr_list_clear(&nh);
		return r;
	}
	*e = (struct edit_ctx){ .ctx = ctx, .leadspc = c->leadspc };
	r = pd_hdr_diff(&m->hdrs, &nh, apply_edit, e);
	pd_hdr_list_clear(&nh);
	if (r < 0)
		return r;
	uint8_t *a = malloc(IO_CHUNK), *b = malloc(2 * IO_CHUNK), *conv = malloc(2 * IO_CHUNK);
	if (!a || !b || !conv)
		r = -ENOMEM;
	if (r == 0)
		r = body_same(m->fd, m->body_off, out_fd, body_off, a, b, conv);
	if (r == 0) {
		*ret_body = true;
		r = replace_body(ctx, out_fd, body_off, a, conv);
	} else if (r > 0) {
		r = 0;
	}
	free(a);
	free(b);
	free(conv);
	return r;
}

/* The mail as received, but for our result fields: forged ones deleted
 * (from the last occurrence of a name down, so that indexes hold), and one
 * X-Pgpdecd-Status added. */
static int keep_as_received(struct edit_ctx *e, const struct msg *m, const struct pd_mail_report *rep)
{
	static const char prefix[] = "X-Pgpdecd-";
	int r = 0;
	for (size_t i = m->hdrs.n; i-- > 0 && !r;) {
		const char *name = m->hdrs.v[i].name;
		if (strncasecmp(name, prefix, sizeof(prefix) - 1) != 0)
			continue;
		unsigned idx = 0; /* its occurrence among fields of its name, from 1 */
		for (size_t j = 0; j <= i; j++)
			idx += strcasecmp(m->hdrs.v[j].name, name) == 0;
		r = apply_edit(e, PD_HDR_DELETE, name, idx, NULL);
	}
	char v[256]; /* with its leading space: see apply_edit() */
	snprintf(v, sizeof(v), " failed; pieces=%u; decrypted=0; no-key=%u; failed=%u; status=LIMIT",
	         rep->n_pieces, rep->n_no_key, rep->n_failed ? rep->n_failed : 1);
	if (!r)
		r = apply_edit(e, PD_HDR_ADD, "X-Pgpdecd-Status", 0, v);
	return r;
}

static const char *verdict_name(enum pd_mail_verdict v)
{
	switch (v) {
	case PD_MAIL_WRITTEN: return "written";
	case PD_MAIL_HOLD: return "quarantined";
	case PD_MAIL_BOUNCE: return "rejected";
	case PD_MAIL_TEMPFAIL: return "deferred";
	}
	return "?";
}

static long ms_since(const struct timespec *t0)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long)(t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

static sfsistat on_eom(SMFICTX *ctx)
{
	struct conn *c = smfi_getpriv(ctx);
	struct msg *m = c ? c->msg : NULL;
	const char *qid = queue_id(ctx);
	struct pd_mail_report rep = { 0 };
	char reason[256];
	int out_fd = -1, r;
	sfsistat st;

	if (!m) { /* no header at all: nothing that could be encrypted */
		int err = 0;
		if (!(m = msg_get(ctx, &err)))
			return tempfail(ctx, "local error: spool");
		c = smfi_getpriv(ctx);
	}
	if (!m->eoh) {
		m->eoh = true;
		m->body_off = (off_t)m->size + 2;
		if ((st = spool(ctx, m, "\r\n", 2)) != SMFIS_CONTINUE)
			return st;
	}
	struct pd_mail *dec = pool_get(cfg->timeout_ms);
	if (!dec) {
		logf_("%s: deferred: no decryptor free within timeout (concurrency %u)", qid, cfg->concurrency);
		return tempfail(ctx, "decryptor busy, try again later");
	}
	if ((out_fd = spool_open()) < 0) {
		pool_put(dec);
		logf_("%s: deferred: spool %s: %s", qid, spool_dir(), strerror(-out_fd));
		return tempfail(ctx, "local error: spool");
	}
	r = set_bind(dec, c);
	if (r == 0)
		r = lseek(m->fd, 0, SEEK_SET) < 0 ? -errno : pd_mail_process(dec, m->fd, out_fd, &rep);
	pool_put(dec);
	if (r < 0) {
		close(out_fd);
		logf_("%s: deferred: local error: %s size=%llu ms=%ld", qid, strerror(-r),
		      (unsigned long long)m->size, ms_since(&m->t0));
		return tempfail(ctx, "local error");
	}
	pd_mail_reason(&rep, reason, sizeof(reason));
	struct edit_ctx e = { 0 };
	bool body = false;
	switch (rep.verdict) {
	case PD_MAIL_WRITTEN:
	case PD_MAIL_HOLD:
		r = apply_output(ctx, c, m, out_fd, &e, &body);
		if (r == 0 && rep.verdict == PD_MAIL_HOLD && smfi_quarantine(ctx, reason) != MI_SUCCESS)
			r = -EIO;
		if (r == -E2BIG) {
			/* The written header section is over the milter's bounds
			 * (PD_HDR_MAX_*), found before any edit was made.  The mail
			 * as received was within them (on_header): what pushed it
			 * over is what was decrypted (a protected Subject, an
			 * entity's Content-Type, the status), and a sender padding
			 * the header section around someone's ciphertext would learn
			 * about its plaintext from a reject.  The mail goes on as it
			 * came, not decrypted, the status saying LIMIT. */
			logf_("%s: written header section over the limits: kept as received (outcome=%s)", qid,
			      pd_mail_outcome_name(rep.outcome));
			rep.outcome = PD_MAIL_FAILED;
			rep.n_decrypted = 0;
			snprintf(rep.status_name, sizeof(rep.status_name), "LIMIT");
			e = (struct edit_ctx){ .ctx = ctx, .leadspc = c->leadspc };
			body = false;
			r = keep_as_received(&e, m, &rep);
			if (r == 0 && rep.verdict == PD_MAIL_HOLD && smfi_quarantine(ctx, reason) != MI_SUCCESS)
				r = -EIO;
		}
		if (r < 0) {
			close(out_fd);
			logf_("%s: deferred: applying the result: %s (outcome=%s)", qid, strerror(-r),
			      pd_mail_outcome_name(rep.outcome));
			return tempfail(ctx, "local error: applying the result");
		}
		st = SMFIS_CONTINUE;
		break;
	case PD_MAIL_BOUNCE:
		reply(ctx, "550", "5.7.1", reason);
		st = SMFIS_REJECT;
		break;
	default:
		reply(ctx, "451", "4.7.1", reason);
		st = SMFIS_TEMPFAIL;
		break;
	}
	close(out_fd);
	logf_("%s: %s %s status=%s pieces=%u decrypted=%u no-key=%u failed=%u embedded=%u "
	      "headers=%u/%u/%u body=%s size=%llu ms=%ld",
	      qid, verdict_name(rep.verdict), pd_mail_outcome_name(rep.outcome),
	      rep.status_name[0] ? rep.status_name : "-", rep.n_pieces, rep.n_decrypted, rep.n_no_key,
	      rep.n_failed, rep.n_embedded, e.n_changed, e.n_deleted, e.n_added, body ? "replaced" : "kept",
	      (unsigned long long)m->size, ms_since(&m->t0));
	msg_reset(ctx);
	return st;
}

static sfsistat on_abort(SMFICTX *ctx)
{
	struct conn *c = smfi_getpriv(ctx);
	if (c)
		c->n_bind = 0;
	msg_reset(ctx);
	return SMFIS_CONTINUE;
}

static sfsistat on_close(SMFICTX *ctx)
{
	struct conn *c = smfi_getpriv(ctx);
	if (c) {
		msg_free(c->msg);
		free(c);
		smfi_setpriv(ctx, NULL);
	}
	return SMFIS_CONTINUE;
}

static struct smfiDesc desc = {
	.xxfi_name = "pgpdecd-milter",
	.xxfi_version = SMFI_VERSION,
	.xxfi_flags = SMFIF_ADDHDRS | SMFIF_CHGHDRS | SMFIF_CHGBODY | SMFIF_QUARANTINE,
	.xxfi_envfrom = on_envfrom,
	.xxfi_envrcpt = on_envrcpt,
	.xxfi_header = on_header,
	.xxfi_eoh = on_eoh,
	.xxfi_body = on_body,
	.xxfi_eom = on_eom,
	.xxfi_abort = on_abort,
	.xxfi_close = on_close,
	.xxfi_negotiate = on_negotiate,
};

/* ---------------------------------------------------------------- */

/* libmilter's smfi_opensocket(true) removes any socket at path, a live one
 * too: asked first (proto/sock.h).  Nothing there, or not a socket: 0,
 * libmilter's own check says so. */
static int socket_answers(const char *path)
{
	struct stat st;
	if (lstat(path, &st) < 0 || !S_ISSOCK(st.st_mode))
		return 0;
	return pd_unix_socket_answers(path);
}

static const char *unix_path(const char *listen)
{
	if (!strncmp(listen, "unix:", 5))
		return listen + 5;
	if (!strncmp(listen, "local:", 6))
		return listen + 6;
	return NULL;
}

int main(int argc, char **argv)
{
	char err[1024] = "";
	struct pdc_config pc;
	int r = pd_milter_config_load(&cfg, argc, argv, err, sizeof(err));

	if (r == 1)
		return 0;
	if (r < 0) {
		fprintf(stderr, "pgpdecd-milter: %s\n", err[0] ? err : strerror(-r));
		return r == -EDOM ? EX_USAGE : EX_CONFIG;
	}
	if (cfg->check_only) {
		printf("%s: ok\n", cfg->config_file ? cfg->config_file : "(defaults)");
		pd_milter_config_free(cfg);
		return 0;
	}
	setvbuf(stderr, NULL, _IOLBF, 0);
	pd_mail_global_init();
	pd_milter_config_client(cfg, &pc);
	if ((r = pool_init(cfg->concurrency, &pc, &cfg->policy)) < 0) {
		logf_("decryptors: %s", strerror(-r));
		return EX_SOFTWARE;
	}
	if (smfi_register(desc) != MI_SUCCESS || smfi_setconn(cfg->listen) != MI_SUCCESS) {
		logf_("smfi_register/smfi_setconn %s failed", cfg->listen);
		return EX_SOFTWARE;
	}
	/* libmilter's own timeout (7210 s) stays for the MTA side: it applies
	 * to every read, also between the commands of an idle SMTP session,
	 * and the MTA has its own milter_*_timeout; "timeout" is the daemon's. */
	const char *path = unix_path(cfg->listen);
	if (path && (r = socket_answers(path)) != 0) {
		if (r > 0)
			logf_("another pgpdecd-milter is listening on %s (it accepted a connection): stop it first, "
			      "or listen elsewhere", path);
		else
			logf_("a socket exists at %s and whether a process answers on it cannot be told (connect: %s): "
			      "remove it if it is stale", path, strerror(-r));
		return r > 0 ? EX_UNAVAILABLE : EX_OSERR;
	}
	mode_t old = umask(0777 & ~cfg->socket_mode);
	r = smfi_opensocket(true);
	umask(old);
	if (r != MI_SUCCESS) {
		logf_("cannot listen on %s", cfg->listen);
		return EX_OSERR;
	}
	if (path) {
		if (cfg->socket_gid != (gid_t)-1 && chown(path, (uid_t)-1, cfg->socket_gid) < 0) {
			logf_("socket-group %s on %s: %s", cfg->socket_group, path, strerror(errno));
			return EX_OSERR;
		}
		if (chmod(path, cfg->socket_mode) < 0) {
			logf_("socket-mode on %s: %s", path, strerror(errno));
			return EX_OSERR;
		}
	}
	if (!cfg->foreground && daemon(0, 1) < 0) {
		logf_("daemon: %s", strerror(errno));
		return EX_OSERR;
	}
	logf_("listening on %s, daemon %s%s, concurrency %u, timeout %llus (version %s)", cfg->listen,
	      cfg->connect ? cfg->connect : cfg->socket, cfg->connect && !cfg->allow_plain_tcp ? " (TLS)" : "",
	      cfg->concurrency, (unsigned long long)((cfg->timeout_ms + 999) / 1000), PD_VERSION);
	r = smfi_main();
	logf_("stopped");
	pool_deinit();
	pd_milter_config_free(cfg);
	return r == MI_SUCCESS ? 0 : EX_SOFTWARE;
}
