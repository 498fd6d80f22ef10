/* SPDX-License-Identifier: MIT */
/* GnuTLS over our own buffers (see tls.h); the only module calling GnuTLS. */
#include <errno.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <gnutls/crypto.h>
#include <gnutls/x509.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "buf.h"
#include "obuf.h"
#include "tls.h"

#define TIN_SIZE (64u << 10) /* a few records of ciphertext */
#define OUT_MIN (16u << 10)  /* gathering buffer for handshake flights and alerts */
#define REC_FULL (16u << 10) /* plaintext of a full record (TLS's most) */

struct pd_tls_creds {
	atomic_uint n_ref;
	gnutls_certificate_credentials_t x509;
	gnutls_priority_t prio;
	bool require_cert;
	bool verify_ca;
	size_t n_pins;
	uint8_t pins[PD_TLS_MAX_PINS][32];
};

struct pd_tls {
	gnutls_session_t s;
	struct pd_tls_creds *cr;
	pd_tls_push_fn push;
	void *user;
	struct pd_buf in;         /* ciphertext read, not yet pulled (buf.h) */
	struct pd_obuf *out;      /* records of the current call, gathered for one push */
	size_t out_hint;          /* room the next gathering buffer starts with */
	size_t rec;               /* plaintext per record the peer takes (its record_size_limit, once seen) */
	bool ready;
	char detail[160];
};

static int err_from_gnutls(int e)
{
	switch (e) {
	case GNUTLS_E_MEMORY_ERROR: return -ENOMEM;
	case GNUTLS_E_FILE_ERROR: return -ENOENT;
	default: return -EPROTO;
	}
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9') return c - '0';
	if (c >= 'a' && c <= 'f') return c - 'a' + 10;
	if (c >= 'A' && c <= 'F') return c - 'A' + 10;
	return -1;
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

int pd_tls_creds_load(struct pd_tls_creds **ret, const struct pd_config *c, char *err, size_t errlen)
{
	struct pd_tls_creds *cr = calloc(1, sizeof(*cr));
	/* TLS 1.2 only with what TLS 1.3 has anyway: AEAD ciphers and ECDHE
	 * (forward secrecy).  NORMAL also offers AES-CBC with HMAC, whose
	 * records cost the loop three times a GCM record's (and come with
	 * CBC's padding-oracle history), and RSA key exchange.  Both: elliptic
	 * groups only.  The key exchange runs on the loop before any
	 * certificate check, and NORMAL lets a TLS 1.3 client pick a
	 * finite-field group (RFC 7919): ffdhe8192 took the loop 234 ms a
	 * handshake, X25519 1.5 ms.  Both: AES-GCM only.  Every record is
	 * sealed and opened on the loop, and the client picks the cipher:
	 * with GnuTLS 3.7 and nettle 3.8 a 64 MiB reply took the loop 80-90 ms
	 * with AES-GCM, 220 ms with AES-128-CCM and 530-540 ms with
	 * ChaCha20-Poly1305 (no vector code in nettle 3.8).  Every TLS 1.3
	 * client has AES-128-GCM (RFC 8446 9.1). */
#define PD_TLS_GROUPS ":-GROUP-ALL:+GROUP-X25519:+GROUP-SECP256R1:+GROUP-SECP384R1:+GROUP-X448:+GROUP-SECP521R1"
#define PD_TLS_CIPHERS ":-CIPHER-ALL:+AES-256-GCM:+AES-128-GCM"
	const char *prio = c->tls_min_version && !strcmp(c->tls_min_version, "1.2")
	                       ? "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2" PD_TLS_CIPHERS
	                         ":-MAC-ALL:+AEAD:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA" PD_TLS_GROUPS
	                       : "NORMAL:-VERS-ALL:+VERS-TLS1.3" PD_TLS_CIPHERS PD_TLS_GROUPS;
	int r;

	if (!cr)
		return -ENOMEM;
	atomic_init(&cr->n_ref, 1);
	cr->require_cert = c->tls_require_client_cert;
	r = gnutls_certificate_allocate_credentials(&cr->x509);
	if (r < 0) {
		free(cr);
		return -ENOMEM;
	}
	r = gnutls_certificate_set_x509_key_file(cr->x509, c->tls_cert, c->tls_key, GNUTLS_X509_FMT_PEM);
	if (r < 0) {
		const char *why;
		if ((why = unreadable(c->tls_cert)))
			snprintf(err, errlen, "tls-cert %s cannot be read: %s", c->tls_cert, why);
		else if ((why = unreadable(c->tls_key)))
			snprintf(err, errlen, "tls-key %s cannot be read: %s", c->tls_key, why);
		else
			snprintf(err, errlen, "tls-cert %s / tls-key %s: %s", c->tls_cert, c->tls_key, gnutls_strerror(r));
		goto fail;
	}
	if (c->tls_ca) {
		r = gnutls_certificate_set_x509_trust_file(cr->x509, c->tls_ca, GNUTLS_X509_FMT_PEM);
		if (r <= 0) {
			const char *why = unreadable(c->tls_ca);
			if (why)
				snprintf(err, errlen, "tls-ca %s cannot be read: %s", c->tls_ca, why);
			else
				snprintf(err, errlen, "tls-ca %s: %s", c->tls_ca,
				         r == 0 ? "no certificate in it" : gnutls_strerror(r));
			r = r == 0 ? GNUTLS_E_FILE_ERROR : r;
			goto fail;
		}
		cr->verify_ca = true;
	}
	if (c->tls_pins.n > PD_TLS_MAX_PINS) { /* the config's check says so first */
		snprintf(err, errlen, "tls-pin: at most %d pins", PD_TLS_MAX_PINS);
		r = GNUTLS_E_INVALID_REQUEST;
		goto fail;
	}
	for (size_t i = 0; i < c->tls_pins.n; i++) {
		const char *p = c->tls_pins.v[i];
		size_t n = 0;
		for (; *p && n < 64; p++) {
			if (*p == ':')
				continue;
			int v = hexval(*p);
			if (n & 1)
				cr->pins[cr->n_pins][n / 2] |= (uint8_t)v;
			else
				cr->pins[cr->n_pins][n / 2] = (uint8_t)(v << 4);
			n++;
		}
		cr->n_pins++;
	}
	r = gnutls_priority_init(&cr->prio, prio, NULL);
	if (r < 0) {
		snprintf(err, errlen, "TLS priorities: %s", gnutls_strerror(r));
		goto fail;
	}
	*ret = cr;
	return 0;
fail:
	gnutls_certificate_free_credentials(cr->x509);
	free(cr);
	return err_from_gnutls(r);
}

struct pd_tls_creds *pd_tls_creds_ref(struct pd_tls_creds *cr)
{
	atomic_fetch_add(&cr->n_ref, 1);
	return cr;
}

struct pd_tls_creds *pd_tls_creds_unref(struct pd_tls_creds *cr)
{
	if (!cr || atomic_fetch_sub(&cr->n_ref, 1) != 1)
		return NULL;
	gnutls_priority_deinit(cr->prio);
	gnutls_certificate_free_credentials(cr->x509);
	free(cr);
	return NULL;
}

/* GnuTLS asks for ciphertext: give it what the session read, or EAGAIN. */
static ssize_t pull(gnutls_transport_ptr_t ptr, void *buf, size_t len)
{
	struct pd_tls *t = ptr;
	size_t n = pd_buf_len(&t->in);
	if (!n) {
		gnutls_transport_set_errno(t->s, EAGAIN);
		return -1;
	}
	if (n > len)
		n = len;
	memcpy(buf, pd_buf_data(&t->in), n);
	pd_buf_consume(&t->in, n);
	return (ssize_t)n;
}

/* The octets of the records that carry len octets of plaintext, at t->rec
 * a record (gnutls_record_overhead_size: the most a record adds). */
static size_t records_size(const struct pd_tls *t, size_t len)
{
	return len + (len + t->rec - 1) / t->rec * gnutls_record_overhead_size(t->s);
}

size_t pd_tls_plain_room(const struct pd_tls *t, size_t room)
{
	size_t ovh = gnutls_record_overhead_size(t->s), full = t->rec + ovh, rest = room % full;
	return room / full * t->rec + (rest > ovh ? rest - ovh : 0);
}

/* The gathering buffer, with room for more octets: moved to a buffer of
 * what it holds and more (never more than that: the buffer is what a slow
 * reader's write queue holds).  False: no memory. */
static bool out_reserve(struct pd_tls *t, size_t more)
{
	if (!t->out) {
		t->out_hint = more;
		return true;
	}
	if (t->out->cap - t->out->len >= more)
		return true;
	struct pd_obuf *n = pd_obuf_new(t->out->len + more);
	if (!n)
		return false;
	memcpy(n->data, t->out->data, t->out->len);
	n->len = t->out->len;
	pd_obuf_free(t->out);
	t->out = n;
	return true;
}

/* Records out: GnuTLS pushes each record as it makes it (a 16 KiB record
 * per push for a large frame).  They are gathered into one buffer and handed
 * to the session's writer once, when the call that made them returns
 * (flush_out): one write(2) for a whole output buffer rather than one per
 * record, which on loopback TCP was most of the loop's TLS cost. */
static void flush_out(struct pd_tls *t)
{
	struct pd_obuf *o = t->out;
	t->out = NULL;
	t->out_hint = OUT_MIN;
	if (o && o->len)
		t->push(t->user, pd_obuf_fit(o)); /* a flight in a 16 KiB buffer queues in its size */
	else
		pd_obuf_free(o);
}

static ssize_t vec_push(gnutls_transport_ptr_t ptr, const giovec_t *iov, int iovcnt)
{
	struct pd_tls *t = ptr;
	size_t total = 0;
	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	/* A write's records fit the room pd_tls_write sized or reserved
	 * (gnutls_record_overhead_size is the most a record adds); this
	 * grows a handshake flight larger than OUT_MIN, record by record. */
	if (t->out && !out_reserve(t, total))
		flush_out(t); /* no memory for more: what there is goes first, in order */
	if (!t->out) {
		t->out = pd_obuf_new(total > t->out_hint ? total : t->out_hint);
		if (!t->out) {
			gnutls_transport_set_errno(t->s, ENOMEM);
			return -1;
		}
	}
	for (int i = 0; i < iovcnt; i++) {
		memcpy(t->out->data + t->out->len, iov[i].iov_base, iov[i].iov_len);
		t->out->len += iov[i].iov_len;
	}
	return (ssize_t)total;
}

/* Before a client's CertificateVerify is checked (on the loop, during the
 * handshake, before the CA or the pins are): a signature of an RSA key
 * costs what its public exponent makes it, and a client may send a key
 * whose exponent is as large as its modulus (8192 bits: 89 ms of the
 * loop, against 2 ms for e = 65537).  An exponent over 64 bits (OpenSSL's
 * own limit above 3072-bit moduli) or a modulus over 16384 bits is
 * refused here, before that check. */
static int cert_verify_hook(gnutls_session_t s, unsigned htype, unsigned when, unsigned incoming,
                            const gnutls_datum_t *msg)
{
	struct pd_tls *t = gnutls_transport_get_ptr(s);
	unsigned n = 0;
	const gnutls_datum_t *certs = gnutls_certificate_get_peers(s, &n);
	gnutls_x509_crt_t crt;
	gnutls_datum_t m = { 0 }, e = { 0 };
	int r = 0;

	(void)htype;
	(void)when;
	(void)msg;
	if (!incoming || !certs || !n)
		return 0;
	if (gnutls_x509_crt_init(&crt) < 0)
		return GNUTLS_E_MEMORY_ERROR;
	if (gnutls_x509_crt_import(crt, &certs[0], GNUTLS_X509_FMT_DER) < 0) {
		r = GNUTLS_E_CERTIFICATE_ERROR;
	} else {
		int pk = gnutls_x509_crt_get_pk_algorithm(crt, NULL);
		if ((pk == GNUTLS_PK_RSA || pk == GNUTLS_PK_RSA_PSS) && gnutls_x509_crt_get_pk_rsa_raw(crt, &m, &e) == 0) {
			size_t eb = e.size, mb = m.size; /* octets, leading zeros stripped below */
			const unsigned char *ep = e.data, *mp = m.data;
			while (eb && !*ep) {
				ep++;
				eb--;
			}
			while (mb && !*mp) {
				mp++;
				mb--;
			}
			if (eb > 8 || mb > 2048) {
				snprintf(t->detail, sizeof(t->detail), "client certificate refused: its RSA key's public "
				         "exponent of %zu bits (modulus %zu bits) costs too much to check (at most 64 and 16384)",
				         eb ? 8 * (eb - 1) + 32 - (size_t)__builtin_clz(ep[0]) : 0, 8 * mb);
				r = GNUTLS_E_CERTIFICATE_ERROR;
			}
			gnutls_free(m.data);
			gnutls_free(e.data);
		}
	}
	gnutls_x509_crt_deinit(crt);
	return r;
}

int pd_tls_new(struct pd_tls **ret, struct pd_tls_creds *cr, pd_tls_push_fn push, void *user)
{
	struct pd_tls *t = calloc(1, sizeof(*t));
	int r;

	if (!t || pd_buf_init(&t->in, TIN_SIZE) < 0) {
		free(t);
		return -ENOMEM;
	}
	r = gnutls_init(&t->s, GNUTLS_SERVER | GNUTLS_NONBLOCK | GNUTLS_NO_SIGNAL);
	if (r < 0) {
		pd_buf_free(&t->in);
		free(t);
		return err_from_gnutls(r);
	}
	t->cr = pd_tls_creds_ref(cr);
	t->push = push;
	t->user = user;
	t->out_hint = OUT_MIN;
	t->rec = REC_FULL; /* until the peer's records show its record_size_limit */
	gnutls_priority_set(t->s, cr->prio);
	gnutls_credentials_set(t->s, GNUTLS_CRD_CERTIFICATE, cr->x509);
	if (cr->require_cert)
		gnutls_certificate_server_set_request(t->s, GNUTLS_CERT_REQUIRE);
	else if (cr->verify_ca || cr->n_pins)
		gnutls_certificate_server_set_request(t->s, GNUTLS_CERT_REQUEST);
	gnutls_transport_set_ptr(t->s, t);
	gnutls_transport_set_pull_function(t->s, pull);
	gnutls_transport_set_vec_push_function(t->s, vec_push);
	if (cr->require_cert || cr->verify_ca || cr->n_pins)
		gnutls_handshake_set_hook_function(t->s, GNUTLS_HANDSHAKE_CERTIFICATE_VERIFY, GNUTLS_HOOK_POST,
		                                   cert_verify_hook);
	gnutls_handshake_set_timeout(t->s, 0); /* the session's sweep enforces it */
	*ret = t;
	return 0;
}

struct pd_tls *pd_tls_free(struct pd_tls *t)
{
	if (!t)
		return NULL;
	gnutls_deinit(t->s);
	pd_tls_creds_unref(t->cr);
	pd_buf_free(&t->in);
	pd_obuf_free(t->out);
	free(t);
	return NULL;
}

size_t pd_tls_in_room(struct pd_tls *t, uint8_t **ret_p)
{
	if (!pd_buf_tail_room(&t->in))
		pd_buf_compact(&t->in);
	*ret_p = pd_buf_tail(&t->in);
	return pd_buf_tail_room(&t->in);
}

void pd_tls_in_commit(struct pd_tls *t, size_t n) { pd_buf_commit(&t->in, n); }

/* The client's own certificate must name clientAuth among its extended key
 * usages: GnuTLS's chain check takes a certificate without the extension as
 * good for any purpose, and pins alone check no purpose at all. */
static bool for_clients(const gnutls_datum_t *der)
{
	gnutls_x509_crt_t crt;
	bool ok = false;

	if (gnutls_x509_crt_init(&crt) < 0)
		return false;
	if (gnutls_x509_crt_import(crt, der, GNUTLS_X509_FMT_DER) == 0) {
		for (unsigned i = 0; !ok; i++) {
			char oid[128];
			size_t len = sizeof(oid);
			int r = gnutls_x509_crt_get_key_purpose_oid(crt, i, oid, &len, NULL);
			if (r == GNUTLS_E_SHORT_MEMORY_BUFFER)
				continue; /* not the one we look for */
			if (r < 0)
				break;
			ok = !strcmp(oid, GNUTLS_KP_TLS_WWW_CLIENT);
		}
	}
	gnutls_x509_crt_deinit(crt);
	return ok;
}

/* With a CA: chain, validity and purpose (of the chain's certificates
 * that name one) by GnuTLS. */
static bool chain_ok(struct pd_tls *t)
{
	gnutls_typed_vdata_st purpose = { .type = GNUTLS_DT_KEY_PURPOSE_OID,
	                                  .data = (unsigned char *)GNUTLS_KP_TLS_WWW_CLIENT };
	gnutls_datum_t why = { 0 };
	unsigned st = 0;

	if (gnutls_certificate_verify_peers(t->s, &purpose, 1, &st) < 0)
		st = GNUTLS_CERT_INVALID;
	if (!st)
		return true;
	if (st & GNUTLS_CERT_PURPOSE_MISMATCH) {
		snprintf(t->detail, sizeof(t->detail),
		         "client certificate refused: it is not for clientAuth (extended key usage)");
	} else if (gnutls_certificate_verification_status_print(st, GNUTLS_CRT_X509, &why, 0) == 0) {
		snprintf(t->detail, sizeof(t->detail), "client certificate refused: %s", why.data);
		gnutls_free(why.data);
	} else {
		snprintf(t->detail, sizeof(t->detail), "client certificate refused");
	}
	return false;
}

/* After the handshake, before any record is read: a client certificate, if
 * sent (GnuTLS has enforced tls-require-client-cert), must pass the CA and
 * be for TLS clients; with pins every client needs one whose SHA-256 (of the
 * DER) is listed, whether certificates are required or not.  Checked here
 * rather than by GnuTLS during the handshake, which fails a client that
 * sends none even when certificates are optional.  false: t->detail says why. */
static bool peer_ok(struct pd_tls *t)
{
	unsigned n = 0;
	const gnutls_datum_t *certs = gnutls_certificate_get_peers(t->s, &n);
	uint8_t h[32];

	if (!certs || !n) {
		if (!t->cr->n_pins)
			return true;
		snprintf(t->detail, sizeof(t->detail), "no client certificate, and tls-pin is set");
		return false;
	}
	if (t->cr->verify_ca && !chain_ok(t))
		return false;
	if (!for_clients(&certs[0])) {
		snprintf(t->detail, sizeof(t->detail),
		         "client certificate refused: it lacks the clientAuth extended key usage");
		return false;
	}
	if (!t->cr->n_pins)
		return true;
	if (gnutls_hash_fast(GNUTLS_DIG_SHA256, certs[0].data, certs[0].size, h) == 0)
		for (size_t i = 0; i < t->cr->n_pins; i++)
			if (!memcmp(h, t->cr->pins[i], 32))
				return true;
	snprintf(t->detail, sizeof(t->detail), "client certificate is not among tls-pin");
	return false;
}

bool pd_tls_peer_sha256(const struct pd_tls *t, uint8_t out[32])
{
	unsigned n = 0;
	const gnutls_datum_t *certs;

	if (!t->ready)
		return false;
	certs = gnutls_certificate_get_peers(t->s, &n);
	return certs && n && gnutls_hash_fast(GNUTLS_DIG_SHA256, certs[0].data, certs[0].size, out) == 0;
}

static ssize_t tls_read(struct pd_tls *t, uint8_t *out, size_t cap)
{
	int r;
	if (!t->ready) {
		r = gnutls_handshake(t->s);
		if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED)
			return 0;
		if (r < 0) {
			if (t->detail[0])
				; /* said why (cert_verify_hook) */
			else if (r == GNUTLS_E_CERTIFICATE_REQUIRED || r == GNUTLS_E_NO_CERTIFICATE_FOUND)
				snprintf(t->detail, sizeof(t->detail), "TLS handshake failed: no client certificate, "
				         "and tls-require-client-cert is on");
			else
				snprintf(t->detail, sizeof(t->detail), "TLS handshake failed: %s", gnutls_strerror(r));
			/* The alert tells the client why ("certificate required"),
			 * rather than a connection that just ends. */
			gnutls_alert_send_appropriate(t->s, r);
			return -EPROTO;
		}
		if (!peer_ok(t)) {
			gnutls_alert_send(t->s, GNUTLS_AL_FATAL, GNUTLS_A_BAD_CERTIFICATE); /* the client learns why */
			return -EACCES;
		}
		t->ready = true;
	}
	if (!cap)
		return 0;
	ssize_t n = gnutls_record_recv(t->s, out, cap);
	if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED)
		return 0;
	if (n == 0)
		return -EPIPE;
	if (n < 0) {
		snprintf(t->detail, sizeof(t->detail), "TLS: %s", gnutls_strerror((int)n));
		return -EPROTO;
	}
	return n;
}

ssize_t pd_tls_read(struct pd_tls *t, uint8_t *out, size_t cap)
{
	ssize_t n = tls_read(t, out, cap); /* may push a handshake flight or an alert */
	flush_out(t);
	return n;
}

bool pd_tls_ready(const struct pd_tls *t) { return t->ready; }

int pd_tls_write(struct pd_tls *t, const uint8_t *p, size_t len)
{
	/* Each gnutls_record_send makes one record of at most what the peer
	 * takes; the gathering buffer is sized for the records of len at
	 * t->rec a record.  GnuTLS does not tell the peer's record_size_limit
	 * (gnutls_record_get_max_size is ours), so t->rec starts at full
	 * records and learns the peer's from the first record that came out
	 * smaller than what was left: the buffer then grows once, to what the
	 * rest takes, and the next calls are sized right from the start.
	 * Never more: the buffer goes to the session's write queue as it is,
	 * and what it holds counts against write-high-watermark. */
	t->out_hint = records_size(t, len);
	int r = 0;
	while (len) {
		ssize_t n = gnutls_record_send(t->s, p, len);
		if (n < 0) {
			if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED)
				continue;
			snprintf(t->detail, sizeof(t->detail), "TLS: %s", gnutls_strerror((int)n));
			r = -EPROTO;
			break;
		}
		p += n;
		len -= (size_t)n;
		if (len && n > 0 && (size_t)n < t->rec) {
			t->rec = (size_t)n;
			if (!out_reserve(t, records_size(t, len))) {
				flush_out(t); /* no memory to grow: what there is goes first, in order */
				t->out_hint = records_size(t, len);
			}
		}
	}
	flush_out(t);
	return r;
}

void pd_tls_bye(struct pd_tls *t)
{
	if (t->ready)
		gnutls_bye(t->s, GNUTLS_SHUT_WR);
	flush_out(t);
}

const char *pd_tls_detail(const struct pd_tls *t) { return t->detail; }
