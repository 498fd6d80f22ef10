/* SPDX-License-Identifier: MIT */
/* One client connection: read buffer -> frame decoder -> ordered replies ->
 * writer (see session.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd-config.h"
#include "buf.h"
#include "daemon.h"
#include "frame.h"
#include "keys.h"
#include "log.h"
#include "peer.h"
#include "pool.h"
#include "reply.h"
#include "request.h"
#include "session.h"
#include "stats.h"
#include "status.h"
#include "tls.h"

#define RBUF_SIZE (64u << 10)
#define TLS_TURN_READS 8u      /* full reads of a TLS connection a turn (on_read) */
#define TLS_TURN_RECORDS 256u  /* records opened a turn before it yields (on_read) */
#define FAIL_LINGER_MS 2000 /* an ERROR frame gets this long to leave */
#define SWEEP_MS 250

/* A session's lifecycle, in order.  Only set_state() moves it, and only
 * along the arrows of next_ok[]: a state is never re-entered, so a second
 * close, a second ERROR or a half-close before the ERROR cannot happen
 * unnoticed.
 *
 *   ACCEPTED -> HANDSHAKE (TLS) -> HELLO -> OPEN -> FAILING -> SHUT
 *          `-----------------------^  any of them ---------------> CLOSING
 */
enum sstate {
	SS_ACCEPTED,  /* allocated, accepted into; pd_session_start not yet run */
	SS_HANDSHAKE, /* TLS handshake under way (tls-handshake-timeout) */
	SS_HELLO,     /* waiting for the client's HELLO */
	SS_OPEN,      /* HELLO exchanged: serving requests */
	SS_FAILING,   /* ERROR frame queued, requests dropped, input read and dropped */
	SS_SHUT,      /* ERROR written and half-closed: lingering for the peer's EOF */
	SS_CLOSING,   /* uv_close called: on_close frees */
};

#define SS_BIT(x) (1u << (x))
static const unsigned next_ok[] = {
	[SS_ACCEPTED] = SS_BIT(SS_HANDSHAKE) | SS_BIT(SS_HELLO) | SS_BIT(SS_CLOSING),
	[SS_HANDSHAKE] = SS_BIT(SS_HELLO) | SS_BIT(SS_CLOSING),
	[SS_HELLO] = SS_BIT(SS_OPEN) | SS_BIT(SS_FAILING) | SS_BIT(SS_CLOSING),
	[SS_OPEN] = SS_BIT(SS_FAILING) | SS_BIT(SS_CLOSING),
	[SS_FAILING] = SS_BIT(SS_SHUT) | SS_BIT(SS_CLOSING),
	[SS_SHUT] = SS_BIT(SS_CLOSING),
	[SS_CLOSING] = 0,
};
static const char *const sstate_name[] = {
	[SS_ACCEPTED] = "ACCEPTED", [SS_HANDSHAKE] = "HANDSHAKE", [SS_HELLO] = "HELLO", [SS_OPEN] = "OPEN",
	[SS_FAILING] = "FAILING",   [SS_SHUT] = "SHUT",           [SS_CLOSING] = "CLOSING",
};

struct pd_session {
	struct pd_session *prev, *next; /* g.all */
	struct pd_session *run_next;    /* wake list */
	bool woken;
	union {
		uv_handle_t h;
		uv_stream_t s;
		uv_tcp_t tcp;
		uv_pipe_t pipe;
	} io;
	bool tls_wanted;    /* accepted on a TLS listener */
	enum sstate state;  /* set_state() only */
	bool started;       /* counted in g.n_served (accepted and not refused) */
	struct pd_peer peer; /* who, for the limits, the allow-lists and debug logs */

	struct pd_frame_decoder *dec;
	struct pd_buf rb;         /* read buffer (RBUF_SIZE), buf.h */
	struct pd_request_owner owner; /* what its requests may ask of it */
	bool reading, eof, throttled;
	bool tls_full;            /* the TLS layer stopped for want of read-buffer room */
	/* TLS, this turn of the loop (on_read): full reads, records opened,
	 * octets read and plaintext octets they gave */
	unsigned turn_reads, turn_records;
	size_t turn_in, turn_plain;
	uv_shutdown_t shutdown_req;

	struct pd_request **reqs; /* ring of owed replies, oldest first */
	unsigned rq_head, rq_n, rq_cap;
	struct pd_request *rx;    /* receiving DATA/END (also in the ring) */
	bool rx_discard;          /* DATA/END of an answered request are swallowed */
	uint32_t rx_discard_id;

	struct pd_tls *tls;       /* NULL: plain stream */
	uint16_t refusal;         /* TLS: ERROR to send once the handshake is done */
	char refusal_why[96];
	uint64_t t_accept;

	uint32_t max_frame;
	unsigned max_inflight;
	size_t wbytes;            /* memory held by uv_writes not yet completed (pd_obuf_held) */
	uint64_t last_activity, last_write, fail_time;
};

static struct {
	uv_timer_t sweep;
	uv_idle_t idle;
	struct pd_session *run; /* woken sessions */
	bool init;
	struct pd_session *all; /* every accepted session, through prev/next */
	unsigned n_served;      /* sessions with started set: max-connections */
	uint64_t accepted;      /* sessions ever started (connections_total) */
	/* Back-pressure (iii): output held for writing by all sessions (the
	 * sum of their wbytes), and whether it reached max-write-buffer. */
	uint64_t unsent;
	bool write_paused;
} g;

static void process(struct pd_session *s);
static void update_reading(struct pd_session *s);
static void finish_fail(struct pd_session *s);
static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);
static void on_idle(uv_idle_t *h);
static bool under_pressure(const struct pd_session *s);

/* ---------------------------------------------------------------- */
/* Lifecycle state */

/* The one place the state moves.  An arrow not in next_ok[] is a bug that
 * would free or write through a session twice: abort, whatever NDEBUG says. */
static void set_state(struct pd_session *s, enum sstate to)
{
	if (!(next_ok[s->state] & SS_BIT(to))) {
		pd_log_err("SYS", "session state %s -> %s is not allowed", sstate_name[s->state], sstate_name[to]);
		abort();
	}
	s->state = to;
}

static bool is_closing(const struct pd_session *s) { return s->state == SS_CLOSING; }
/* FAILING, SHUT or CLOSING: no more frames are taken or answered. */
static bool is_ending(const struct pd_session *s) { return s->state >= SS_FAILING; }

/* ---------------------------------------------------------------- */
/* Reply ring */

static struct pd_request *rq_at(const struct pd_session *s, unsigned i)
{
	return s->reqs[(s->rq_head + i) % s->rq_cap];
}

static int rq_push(struct pd_session *s, struct pd_request *r)
{
	if (s->rq_n == s->rq_cap) {
		unsigned ncap = s->rq_cap ? s->rq_cap * 2 : 8;
		struct pd_request **nv = malloc(ncap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		for (unsigned i = 0; i < s->rq_n; i++)
			nv[i] = rq_at(s, i);
		free(s->reqs);
		s->reqs = nv;
		s->rq_head = 0;
		s->rq_cap = ncap;
	}
	s->reqs[(s->rq_head + s->rq_n) % s->rq_cap] = r;
	s->rq_n++;
	return 0;
}

static struct pd_request *rq_pop(struct pd_session *s)
{
	struct pd_request *r = s->reqs[s->rq_head];
	s->rq_head = (s->rq_head + 1) % s->rq_cap;
	s->rq_n--;
	return r;
}

static void drop_requests(struct pd_session *s)
{
	while (s->rq_n)
		pd_request_free(rq_pop(s));
	s->rx = NULL;
}

/* ---------------------------------------------------------------- */
/* Close chain */

static void on_close(uv_handle_t *h)
{
	struct pd_session *s = h->data;
	pd_tls_free(s->tls);
	pd_frame_decoder_free(s->dec);
	pd_buf_free(&s->rb);
	free(s->reqs);
	free(s);
}

void pd_session_close(struct pd_session *s)
{
	if (is_closing(s))
		return;
	set_state(s, SS_CLOSING);
	if (s->woken) { /* on_close may run before the idle callback */
		for (struct pd_session **pp = &g.run; *pp; pp = &(*pp)->run_next)
			if (*pp == s) {
				*pp = s->run_next;
				break;
			}
		s->woken = false;
	}
	drop_requests(s);
	if (s->prev)
		s->prev->next = s->next;
	else
		g.all = s->next;
	if (s->next)
		s->next->prev = s->prev;
	if (s->started)
		g.n_served--;
	/* Pending writes complete with UV_ECANCELED before on_close. */
	uv_close(&s->io.h, on_close);
	pd_daemon_maybe_exit();
}

/* ---------------------------------------------------------------- */
/* Writer */

/* Back-pressure (iii), global: while the unsent output of all sessions
 * together is at max-write-buffer (until it is back below half of it), a
 * session whose own output is still unsent takes no frames and submits no
 * jobs; a session whose client has read everything goes on (one job's
 * output at a time), so readers are served and the pause never waits for
 * clients that do not read.  The sum stays near the cap instead of growing
 * to connections x write-high-watermark. */
static void resume(struct pd_session *s)
{
	if (is_closing(s))
		return;
	for (unsigned i = 0; i < s->rq_n; i++)
		pd_request_kick(rq_at(s, i));
	pd_session_wake(s);
}

/* Rare (once per crossing), so a walk over all sessions. */
static void write_resume_all(void)
{
	g.write_paused = false;
	for (struct pd_session *s = g.all; s; s = s->next)
		resume(s);
}

static void unsent_add(struct pd_session *s, size_t n)
{
	s->wbytes += n;
	g.unsent += n;
	if (g.unsent >= pd_d.cfg->max_write_buffer)
		g.write_paused = true;
}

static void unsent_sub(struct pd_session *s, size_t n)
{
	s->wbytes -= n;
	g.unsent -= n;
	if (g.write_paused && g.unsent <= pd_d.cfg->max_write_buffer / 2)
		write_resume_all();
	else if (g.write_paused && !s->wbytes)
		resume(s); /* its client read everything: it may go on */
}

static void on_write(uv_write_t *wr, int status)
{
	struct pd_obuf *o = wr->data;
	struct pd_session *s = o->owner;
	size_t n = pd_obuf_held(o); /* as counted by write_raw */

	pd_obuf_free(o);
	unsent_sub(s, n);
	s->last_write = uv_now(pd_d.loop);
	if (is_closing(s))
		return;
	if (status < 0) {
		pd_log_debug("NET", "%s: write failed: %s", s->peer.name, uv_strerror(status));
		pd_session_close(s);
		return;
	}
	if (is_ending(s)) {
		if (!s->wbytes)
			finish_fail(s);
		return;
	}
	if (s->throttled && s->wbytes <= pd_d.cfg->write_low_watermark) {
		s->throttled = false;
		pd_session_wake(s);
	}
}

/* Write one buffer: try_write first (libuv refuses it while writes are
 * queued, which keeps order), the rest with uv_write. */
static void write_raw(struct pd_session *s, struct pd_obuf *o)
{
	size_t off = 0;
	int r;

	if (is_closing(s)) {
		pd_obuf_free(o);
		return;
	}
	if (!s->wbytes) {
		uv_buf_t b = uv_buf_init((char *)o->data, (unsigned)o->len);
		r = uv_try_write(&s->io.s, &b, 1);
		if (r > 0)
			off = (size_t)r;
		else if (r != UV_EAGAIN && r != UV_ENOSYS) {
			pd_obuf_free(o);
			pd_log_debug("NET", "%s: write failed: %s", s->peer.name, uv_strerror(r));
			pd_session_close(s);
			return;
		}
	}
	if (off == o->len) {
		pd_obuf_free(o);
		return;
	}
	/* What waits is counted as the memory it holds (pd_obuf_held), so the
	 * buffer must not be much larger than what is left of it: a reply
	 * frame of a hundred octets in its 8 KiB buffer, or the last octets
	 * of a job's output the socket took most of, go in a copy of their
	 * size. */
	o = pd_obuf_fit_rest(o, &off);
	uv_buf_t b = uv_buf_init((char *)o->data + off, (unsigned)(o->len - off));
	o->owner = s;
	o->wr.data = o;
	if (!s->wbytes)
		s->last_write = uv_now(pd_d.loop);
	r = uv_write(&o->wr, &s->io.s, &b, 1, on_write);
	if (r < 0) {
		pd_obuf_free(o);
		pd_session_close(s);
		return;
	}
	unsent_add(s, pd_obuf_held(o));
	if (s->wbytes >= pd_d.cfg->write_high_watermark)
		s->throttled = true;
}

/* TLS records, gathered by tls.c into one buffer per call. */
static void tls_push(void *user, struct pd_obuf *o) { write_raw(user, o); }

/* Frames to the peer: through TLS when the session has it. */
static void write_obuf(struct pd_session *s, struct pd_obuf *o)
{
	if (!s->tls || is_closing(s)) {
		write_raw(s, o);
		return;
	}
	int r = pd_tls_write(s->tls, o->data, o->len);
	pd_obuf_free(o);
	if (r < 0) {
		pd_log_debug("TLS", "%s: %s", s->peer.name, pd_tls_detail(s->tls));
		pd_session_close(s);
	}
}

static void write_list(struct pd_session *s, struct pd_obuf_list *l)
{
	struct pd_obuf *o;
	while ((o = pd_obuf_pop(l)))
		write_obuf(s, o);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
	struct pd_session *s = req->data;
	if (status < 0 && !is_closing(s))
		pd_session_close(s);
}

/* The ERROR frame is out: half-close and wait for the peer's EOF (closing
 * with its data unread would make TCP send a reset that can destroy the
 * ERROR frame before the peer reads it); the sweep ends the linger. */
static void finish_fail(struct pd_session *s)
{
	if (s->state != SS_FAILING)
		return; /* already half-closed, or closed */
	set_state(s, SS_SHUT);
	if (s->tls) {
		pd_tls_bye(s->tls); /* close_notify goes out before the FIN */
		if (is_closing(s))
			return; /* its write failed */
	}
	s->shutdown_req.data = s;
	if (s->eof || uv_shutdown(&s->shutdown_req, &s->io.s, on_shutdown) < 0)
		pd_session_close(s);
}

/* Lines a peer causes, limited (log.h): a flood costs a few lines a minute. */
static struct pd_log_limit lim_proto = PD_LOG_LIMIT("protocol errors", 20, 60000);
static struct pd_log_limit lim_tls = PD_LOG_LIMIT("TLS failures", 20, 60000);
static struct pd_log_limit lim_net = PD_LOG_LIMIT("timeouts", 20, 60000);

/* Send an ERROR frame and close once it is written (or after a linger). */
static void session_fail(struct pd_session *s, uint16_t status, const char *sentence)
{
	if (is_ending(s))
		return;
	if (status == PD_ST_PROTOCOL || status == PD_ST_VERSION)
		pd_log_limited(&lim_proto, PD_LOG_NOTICE, "PROTO", "closing the connection of %s: %s", s->peer.name,
		               sentence);
	else
		pd_log_debug("NET", "%s: closing: %s", s->peer.name, sentence);
	set_state(s, SS_FAILING);
	s->fail_time = uv_now(pd_d.loop);
	drop_requests(s);
	pd_buf_wipe(&s->rb); /* from now on, input is read and dropped */
	struct pd_obuf *o = pd_obuf_new(PD_FRAME_HELLO_MAX);
	if (o) {
		int n = pd_frame_encode_error(o->data, o->cap, status, pd_status_name(status), sentence);
		if (n > 0) {
			o->len = (size_t)n;
			write_obuf(s, o);
		} else {
			pd_obuf_free(o);
		}
	}
	if (!is_closing(s) && !s->wbytes)
		finish_fail(s);
	if (!is_closing(s))
		update_reading(s);
}

/* A built-in reply is built when it is next to be written: one waiting
 * behind a request in progress holds its frame, not a KEYS of every key.
 * Not under write pressure (the session's watermark, or the global pause
 * while it has output waiting): up to max-requests-per-connection of them
 * taken at once would each be built past both; on_write and resume() wake
 * the session.  A KEYS comes a piece at a time, the next once the one
 * before went to the writer and while the session is still not under
 * pressure: a listing waits in the daemon as at most the watermark and a
 * piece per session (max-write-buffer and a piece per session in all),
 * not as every key.  False: not now (or the session failed). */
static bool build_builtin(struct pd_session *s, struct pd_request *r)
{
	struct pd_obuf_list l = { 0 };
	struct pd_reply_cursor *cur;
	const uint8_t *p;
	size_t len;
	uint8_t type;

	if (!pd_request_builtin_pending(r, &type, &p, &len, &cur))
		return true;
	if (under_pressure(s))
		return false;
	int more = pd_reply_builtin(type, pd_request_id(r), p, len, s->max_frame, cur, &l);
	if (more < 0) {
		pd_obuf_list_clear(&l);
		session_fail(s, PD_ST_OVERLOADED, "out of memory");
		return false;
	}
	pd_request_builtin_put(r, &l, more == 0);
	return true;
}

/* Move output of the head replies to the writer, in order. */
static void flush(struct pd_session *s)
{
	while (s->rq_n && !is_ending(s)) {
		struct pd_request *r = rq_at(s, 0);
		if (!build_builtin(s, r))
			break;
		struct pd_obuf_list out = { 0 };
		bool done = pd_request_take_output(r, &out, true);
		write_list(s, &out);
		if (is_closing(s))
			break;
		if (!done) {
			if (pd_request_builtin_more(r))
				continue; /* its next piece, if the piece just written left room */
			break;
		}
		rq_pop(s);
		if (r == s->rx) { /* answered early: swallow the rest of its input */
			s->rx = NULL;
			s->rx_discard = true;
			s->rx_discard_id = pd_request_id(r);
		}
		pd_request_free(r);
		if (s->rq_n)
			pd_request_kick(rq_at(s, 0)); /* it just became head */
	}
}

/* ---------------------------------------------------------------- */
/* Frames */

static bool id_in_use(const struct pd_session *s, uint32_t id)
{
	for (unsigned i = 0; i < s->rq_n; i++)
		if (pd_request_id(rq_at(s, i)) == id)
			return true;
	return false;
}

static void handle_hello(struct pd_session *s, const uint8_t *p, size_t len)
{
	struct pd_hello h;
	if (pd_parse_hello(p, len, PD_FROM_CLIENT, &h) < 0) {
		session_fail(s, PD_ST_PROTOCOL, "malformed HELLO");
		return;
	}
	if (h.version_min > PD_PROTO_VERSION || h.version_max < PD_PROTO_VERSION) {
		session_fail(s, PD_ST_VERSION, "no common protocol version (this daemon speaks version 1)");
		return;
	}
	struct pd_hello out = { 0 };
	out.version_min = out.version_max = PD_PROTO_VERSION;
	out.max_frame = s->max_frame;
	out.max_message = pd_d.cfg->max_message_size;
	out.max_inflight = s->max_inflight;
	snprintf(out.software, sizeof(out.software), "pgpdecd %s", PD_VERSION);
	struct pd_obuf *o = pd_obuf_new(PD_FRAME_HELLO_MAX);
	int n = o ? pd_frame_encode_server_hello(o->data, o->cap, &out) : -ENOMEM;
	if (n < 0) {
		pd_obuf_free(o);
		session_fail(s, PD_ST_INTERNAL, "cannot encode HELLO");
		return;
	}
	o->len = (size_t)n;
	write_obuf(s, o);
	if (is_ending(s))
		return; /* the write failed: closed */
	set_state(s, SS_OPEN);
	pd_frame_decoder_set_max(s->dec, s->max_frame);
}

static void add_reply(struct pd_session *s, struct pd_request *r)
{
	if (rq_push(s, r) < 0) {
		pd_request_free(r);
		session_fail(s, PD_ST_OVERLOADED, "out of memory");
	}
}

static void handle_frame(struct pd_session *s, const struct pd_frame_hdr *h, const uint8_t *p)
{
	struct pd_obuf_list l = { 0 };
	struct pd_request *r;
	char why[160];
	int err;

	if (s->state == SS_HELLO) {
		if (h->type != PD_FT_HELLO)
			session_fail(s, PD_ST_PROTOCOL, "the first frame must be HELLO");
		else
			handle_hello(s, p, h->len);
		return;
	}
	switch (h->type) {
	case PD_FT_HELLO:
		session_fail(s, PD_ST_PROTOCOL, "HELLO sent twice");
		return;
	case PD_FT_ERROR:
		pd_log_debug("NET", "%s: client sent ERROR", s->peer.name);
		pd_session_close(s);
		return;
	case PD_FT_DATA:
	case PD_FT_END:
		if (s->rx && pd_request_id(s->rx) == h->id) {
			if (h->type == PD_FT_DATA) {
				pd_request_feed(s->rx, p, h->len);
			} else {
				pd_request_end(s->rx);
				s->rx = NULL;
			}
		} else if (s->rx_discard && s->rx_discard_id == h->id) {
			pd_stats_bytes_in(h->len);
			if (h->type == PD_FT_END)
				s->rx_discard = false;
		} else {
			snprintf(why, sizeof(why), "%s for request %u, which is not receiving",
			         pd_frame_type_name(h->type), h->id);
			session_fail(s, PD_ST_PROTOCOL, why);
		}
		return;
	default:
		break;
	}
	/* Every other frame begins a reply. */
	if (s->rx || s->rx_discard) {
		snprintf(why, sizeof(why), "%s before END of request %u", pd_frame_type_name(h->type),
		         s->rx ? pd_request_id(s->rx) : s->rx_discard_id);
		session_fail(s, PD_ST_PROTOCOL, why);
		return;
	}
	if (id_in_use(s, h->id)) {
		snprintf(why, sizeof(why), "request id %u is already in use", h->id);
		session_fail(s, PD_ST_PROTOCOL, why);
		return;
	}
	if (h->type == PD_FT_DECRYPT) {
		struct pd_decrypt_req dr;
		if (pd_parse_decrypt(p, h->len, &dr) < 0) {
			/* A request this version cannot honour: refuse it, keep the connection. */
			if (pd_reply_result(&l, h->id, PD_ST_BAD_REQUEST, "unknown flag or critical option in DECRYPT") < 0) {
				session_fail(s, PD_ST_INTERNAL, "out of memory");
				return;
			}
			err = pd_request_new_done(&r, &s->owner, h->id, &l);
			if (err < 0) {
				pd_obuf_list_clear(&l);
				session_fail(s, PD_ST_OVERLOADED, "out of memory");
				return;
			}
			s->rx_discard = true;
			s->rx_discard_id = h->id;
			add_reply(s, r);
			return;
		}
		/* Session-key export is decided per request, by the config of now. */
		bool may_export = false;
		if (dr.flags & PD_DF_WANT_SESSION_KEY) {
			uint8_t pin[32];
			bool has_pin = s->tls && pd_tls_peer_sha256(s->tls, pin);
			may_export = pd_peer_may_export(&s->peer, &s->io.s, has_pin ? pin : NULL);
		}
		err = pd_request_new_decrypt(&r, &s->owner, h->id, &dr, may_export);
		if (err < 0) {
			session_fail(s, PD_ST_OVERLOADED, "out of memory");
			return;
		}
		add_reply(s, r);
		if (!is_ending(s))
			s->rx = r;
		return;
	}
	/* The rest are built-in replies (reply.c), built by flush() when they
	 * are next to be written. */
	if (!pd_reply_is_builtin(h->type)) {
		snprintf(why, sizeof(why), "unexpected %s frame", pd_frame_type_name(h->type));
		session_fail(s, PD_ST_PROTOCOL, why);
		return;
	}
	if (pd_request_new_builtin(&r, &s->owner, h->id, h->type, p, h->len) < 0) {
		session_fail(s, PD_ST_OVERLOADED, "out of memory");
		return;
	}
	add_reply(s, r);
}

/* ---------------------------------------------------------------- */
/* Read side */

/* Back-pressure point (i): may the next frame be taken? */
static bool can_take_frame(const struct pd_session *s)
{
	/* Its watermark, or (iii) (see resume()).  Whatever the frame: a PING,
	 * STATS or KEYS answered to a client that does not read would pile up
	 * too. */
	if (under_pressure(s))
		return false;
	/* While a request receives only its DATA and END are valid, and DATA is
	 * taken in slices of whatever room the request has (take_frames), so
	 * any room will do; a whole max-frame-size of room made a request
	 * whose buffer is smaller than two frames (request-buffer below
	 * max-frame-size) wait for a job before its END. */
	if (s->rx)
		return pd_request_room(s->rx) > 0;
	if (!s->rx_discard && s->rq_n >= s->max_inflight)
		return false;
	return true;
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	struct pd_session *s = h->data;
	if (s->tls) {
		uint8_t *p;
		size_t room = pd_tls_in_room(s->tls, &p);
		*buf = uv_buf_init((char *)p, (unsigned)room);
		return;
	}
	*buf = uv_buf_init((char *)pd_buf_tail(&s->rb), (unsigned)pd_buf_tail_room(&s->rb));
}

static void update_reading(struct pd_session *s)
{
	uint8_t *p;
	bool want = !is_closing(s) && !s->eof &&
	            (s->tls ? pd_tls_in_room(s->tls, &p) > 0 : pd_buf_tail_room(&s->rb) > 0);
	if (want && !s->reading) {
		if (uv_read_start(&s->io.s, on_alloc, on_read) == 0)
			s->reading = true;
	} else if (!want && s->reading) {
		uv_read_stop(&s->io.s);
		s->reading = false;
	}
}

static void turn_reset(struct pd_session *s)
{
	s->turn_reads = s->turn_records = 0;
	s->turn_in = s->turn_plain = 0;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
	struct pd_session *s = st->data;

	if (nread == 0 || is_closing(s))
		return;
	if (is_ending(s)) { /* after ERROR: drain until the peer closes */
		if (nread < 0)
			pd_session_close(s);
		else if (!s->tls)
			explicit_bzero(buf->base, (size_t)nread);
		return;
	}
	if (nread < 0) {
		if (nread != UV_EOF) {
			pd_log_debug("NET", "%s: read failed: %s", s->peer.name, uv_strerror((int)nread));
			pd_session_close(s);
			return;
		}
		s->eof = true;
		uv_read_stop(&s->io.s);
		s->reading = false;
	} else {
		if (s->tls)
			pd_tls_in_commit(s->tls, (size_t)nread);
		else
			pd_buf_commit(&s->rb, (size_t)nread);
		s->last_activity = uv_now(pd_d.loop);
	}
	process(s);
	/* TLS: a bounded share of each turn of the loop.  libuv reads a
	 * stream up to 32 times a turn while each read fills the buffer, and
	 * every TLS record is opened here, on the loop, at a cost per record:
	 * a client sending 1-octet records (23 octets each on the wire) made
	 * 32 reads about 30 ms of the loop's time, for each such connection,
	 * before anyone else was served.  So once a connection has had
	 * TLS_TURN_RECORDS records or TLS_TURN_READS full reads in a turn
	 * (one 64 KiB read of the smallest records, eight of full ones), or
	 * its input gave less than half as much plaintext (empty records,
	 * which GnuTLS opens up to 200 at a time inside one call and so are
	 * not counted as records), it stops, and reads again at the next
	 * turn (the wake list runs process() there, which starts reading
	 * again).  Stopping after every full read cost a 64 MiB message 10%
	 * more loop time.  A session ending (after ERROR) keeps reading: its
	 * process() does nothing more, and the drain must see the EOF. */
	if (!s->tls || nread <= 0)
		return;
	if ((size_t)nread < buf->len) { /* libuv reads this stream no more this turn */
		turn_reset(s);
		return;
	}
	s->turn_in += (size_t)nread;
	if ((++s->turn_reads >= TLS_TURN_READS || s->turn_records >= TLS_TURN_RECORDS ||
	     s->turn_plain < s->turn_in / 2) &&
	    s->reading && !is_ending(s) && !is_closing(s)) {
		turn_reset(s);
		uv_read_stop(&s->io.s);
		s->reading = false;
		pd_session_wake(s);
	}
}

/* TLS: handshake, then decrypt into the read buffer while it has room;
 * ciphertext that does not fit stays in the TLS layer.  false: closed. */
static bool tls_pump(struct pd_session *s)
{
	bool was_ready = pd_tls_ready(s->tls);
	s->tls_full = false;
	for (;;) {
		if (!pd_buf_tail_room(&s->rb))
			pd_buf_compact(&s->rb); /* the stale copy is wiped */
		if (!pd_buf_tail_room(&s->rb) && pd_tls_ready(s->tls)) {
			s->tls_full = true; /* more may wait inside TLS: pump again once there is room */
			break;
		}
		ssize_t n = pd_tls_read(s->tls, pd_buf_tail(&s->rb), pd_buf_tail_room(&s->rb));
		if (is_closing(s))
			return false; /* what it wrote (a handshake flight) failed, and closed us */
		if (n > 0) {
			pd_buf_commit(&s->rb, (size_t)n);
			s->turn_records++; /* one non-empty record a call (gnutls_record_recv) */
			s->turn_plain += (size_t)n;
			continue;
		}
		if (n == 0)
			break;
		if (n == -EPIPE) { /* close_notify: as good as EOF */
			s->eof = true;
			break;
		}
		pd_log_limited(&lim_tls, PD_LOG_NOTICE, "TLS", "closing a TLS connection from %s: %s", s->peer.name,
		               pd_tls_detail(s->tls));
		pd_session_close(s);
		return false;
	}
	if (!was_ready && pd_tls_ready(s->tls)) {
		pd_log_debug("TLS", "%s: handshake done", s->peer.name);
		set_state(s, SS_HELLO);
		if (s->refusal) {
			session_fail(s, s->refusal, s->refusal_why);
			return false;
		}
	}
	return true;
}

/* Take frames from the read buffer while back-pressure allows. */
static void take_frames(struct pd_session *s)
{
	while (!is_ending(s) && pd_buf_len(&s->rb) && can_take_frame(s)) {
		struct pd_frame_hdr h;
		const uint8_t *p;
		size_t at = s->rb.start, used = 0;
		/* DATA is taken in slices straight from the read buffer, as much as
		 * the receiving request has room for (a frame is larger than the
		 * read buffer, so whole frames were gathered in the decoder: a copy
		 * and a wipe of each); other frames whole. */
		size_t room = s->rx ? pd_request_room(s->rx) : SIZE_MAX;
		int r = pd_frame_decode_stream(s->dec, pd_buf_data(&s->rb), pd_buf_len(&s->rb), room, &used, &h, &p);
		s->rb.start += used; /* consumed; the octets are wiped below, after use */
		if (r < 0) {
			char why[200];
			snprintf(why, sizeof(why), "%s", pd_frame_decoder_detail(s->dec));
			session_fail(s, PD_ST_PROTOCOL, *why ? why : "protocol violation");
			break;
		}
		if (r > 0)
			handle_frame(s, &h, p);
		/* Read bytes (a PASSWORD TLV, TLS plaintext) do not stay behind;
		 * handle_frame copied what it keeps.  A failing session has wiped
		 * its whole buffer, a closing one wipes it in on_close. */
		if (!is_closing(s) && s->rb.end >= at + used)
			explicit_bzero(s->rb.d + at, used);
		if (r == 0)
			break;
	}
	if (is_closing(s))
		return;
	/* Ciphertext fed above goes to a worker now, in one job. */
	if (s->rx && !is_ending(s))
		pd_request_kick(s->rx);
	if (!pd_buf_len(&s->rb))
		s->rb.start = s->rb.end = 0; /* all read, so all wiped */
	else if (s->rb.start > RBUF_SIZE / 2)
		pd_buf_compact(&s->rb);
}

static void process(struct pd_session *s)
{
	if (is_closing(s))
		return;
	for (;;) {
		/* Decrypted data held inside TLS never makes the socket readable
		 * again: pump again whenever taking frames made room for it. */
		do {
			if (s->tls && !is_ending(s) && !tls_pump(s))
				return;
			if (s->state == SS_HANDSHAKE) {
				if (s->eof)
					pd_session_close(s);
				else
					update_reading(s);
				return;
			}
			take_frames(s);
			if (is_closing(s))
				return;
		} while (s->tls && s->tls_full && pd_buf_tail_room(&s->rb) && !is_ending(s));
		unsigned before = s->rq_n;
		flush(s);
		if (is_ending(s))
			return;
		/* Replies that went out make room under max-requests-per-connection:
		 * the frames already read (or held by TLS) are taken now, not at the
		 * next read or sweep, which may never come for a client waiting for
		 * its replies.  Each round answers a request, so it ends. */
		if (s->rq_n < before && (pd_buf_len(&s->rb) || (s->tls && s->tls_full)))
			continue;
		break;
	}
	if (s->eof) {
		/* The client will send nothing more.  A frame cut short is a
		 * protocol error; a request without END can never finish. */
		if (pd_frame_decoder_pending(s->dec) && !pd_buf_len(&s->rb)) {
			session_fail(s, PD_ST_PROTOCOL, "connection closed in the middle of a frame");
			return;
		}
		if (s->rx && !pd_buf_len(&s->rb)) {
			pd_request_abort(s->rx, PD_ST_TRUNCATED, "connection closed before END");
			s->rx = NULL;
			flush(s);
		}
		if (!s->rq_n && !s->wbytes && !is_closing(s)) {
			pd_session_close(s);
			return;
		}
	}
	/* Stopping: once every reply is out, the session ends, also while the
	 * client still sends the input of an answered request (rx_discard: a
	 * request answered SHUTTING_DOWN by the drain before its ciphertext
	 * came); the ERROR's linger drops the rest. */
	if (pd_d.stopping && !s->rq_n && !s->rx) {
		session_fail(s, PD_ST_SHUTTING_DOWN, "the daemon is stopping");
		return;
	}
	update_reading(s);
}

/* ---------------------------------------------------------------- */
/* Wake list: deferred processing at the loop's top level */

void pd_session_wake(struct pd_session *s)
{
	if (!s || s->woken || is_closing(s))
		return;
	s->woken = true;
	s->run_next = g.run;
	g.run = s;
	uv_idle_start(&g.idle, on_idle);
}

static void on_idle(uv_idle_t *h)
{
	while (g.run) {
		struct pd_session *s = g.run;
		g.run = s->run_next;
		s->woken = false;
		process(s);
	}
	uv_idle_stop(h);
}

/* The owner interface of its requests (request.h). */
static void owner_wake(void *ctx) { pd_session_wake(ctx); }

/* The write queue is above its high watermark, or all sessions' together
 * reached max-write-buffer and this one still has unsent output (its
 * requests are kicked again once it drains). */
static bool under_pressure(const struct pd_session *s)
{
	return s->throttled || (g.write_paused && s->wbytes);
}

static bool owner_pressure(void *ctx) { return under_pressure(ctx); }

static bool owner_is_head(void *ctx, const struct pd_request *r)
{
	const struct pd_session *s = ctx;
	return s->rq_n && rq_at(s, 0) == r;
}

/* In plaintext: over TLS, what the records of a job's output take must
 * fit, not the output (4% more at the 511-octet records of the smallest
 * record_size_limit GnuTLS grants, about 10% with TLS 1.2's AES-CBC, 0.1%
 * with full records). */
static size_t owner_write_room(void *ctx)
{
	const struct pd_session *s = ctx;
	size_t hw = pd_d.cfg->write_high_watermark, room = s->wbytes < hw ? hw - s->wbytes : 0;
	return s->tls ? pd_tls_plain_room(s->tls, room) : room;
}

unsigned pd_sessions_count(void) { return g.n_served; }
uint64_t pd_sessions_accepted(void) { return g.accepted; }
uint64_t pd_sessions_unsent(void) { return g.unsent; }
bool pd_sessions_write_paused(void) { return g.write_paused; }

/* ---------------------------------------------------------------- */
/* Life cycle */

struct pd_session *pd_session_alloc(enum pd_peer_kind kind, bool tls)
{
	struct pd_session *s = calloc(1, sizeof(*s));
	int r;
	if (!s)
		return NULL;
	s->peer.kind = kind;
	s->tls_wanted = kind == PD_PEER_TCP && tls;
	r = kind == PD_PEER_TCP ? uv_tcp_init(pd_d.loop, &s->io.tcp) : uv_pipe_init(pd_d.loop, &s->io.pipe, 0);
	if (r < 0) {
		free(s);
		return NULL;
	}
	s->io.h.data = s;
	s->state = SS_ACCEPTED;
	s->next = g.all;
	if (s->next)
		s->next->prev = s;
	g.all = s;
	return s;
}

uv_stream_t *pd_session_stream(struct pd_session *s) { return &s->io.s; }

/* Served sessions from the same peer (max-connections-per-peer). */
static unsigned same_peer(const struct pd_peer *p)
{
	unsigned n = 0;
	for (struct pd_session *x = g.all; x; x = x->next)
		n += x->started && !is_closing(x) && !strcmp(x->peer.name, p->name);
	return n;
}

/* Refuse with an ERROR; over TLS the ERROR can only go after the handshake. */
static void refuse(struct pd_session *s, uint16_t status, const char *why)
{
	if (!s->tls) {
		session_fail(s, status, why);
		return;
	}
	s->refusal = status;
	snprintf(s->refusal_why, sizeof(s->refusal_why), "%s", why);
	if (uv_read_start(&s->io.s, on_alloc, on_read) == 0)
		s->reading = true;
	else
		pd_session_close(s);
}

void pd_session_start(struct pd_session *s, const char *where)
{
	const struct pd_config *c = pd_d.cfg;
	bool tls = s->tls_wanted;
	const char *over;
	int r;

	s->max_frame = c->max_frame_size;
	s->owner = (struct pd_request_owner){ .ctx = s, .wake = owner_wake, .write_pressure = owner_pressure,
	                                      .write_room = owner_write_room, .is_head = owner_is_head,
	                                      .max_frame = s->max_frame, .peer = s->peer.name };
	s->max_inflight = c->max_requests_per_connection;
	s->last_activity = s->last_write = s->t_accept = uv_now(pd_d.loop);
	if (pd_peer_identify(&s->peer, s->peer.kind, &s->io.s) < 0) {
		pd_session_close(s);
		return;
	}
	if (s->peer.kind == PD_PEER_TCP)
		uv_tcp_nodelay(&s->io.tcp, 1);
	/* Refused connections are not counted as served, so they must not
	 * cost anything or last: over TLS one is closed at once, before any
	 * handshake (a handshake costs the daemon more than the client); a plain
	 * stream gets its ERROR frame and the short linger of session_fail(). */
	over = pd_peer_over_limit(&s->peer, g.n_served, same_peer);
	if (over && tls) {
		pd_session_close(s);
		return;
	}
	r = pd_buf_init(&s->rb, RBUF_SIZE) == 0 ? pd_frame_decoder_new(&s->dec, PD_FROM_CLIENT, PD_FRAME_HELLO_MAX)
	                                        : -ENOMEM;
	if (r == 0 && tls)
		r = pd_d.tls_creds ? pd_tls_new(&s->tls, pd_d.tls_creds, tls_push, s) : -EINVAL;
	if (r < 0) {
		pd_session_close(s);
		return;
	}
	set_state(s, s->tls ? SS_HANDSHAKE : SS_HELLO);
	if (over) {
		session_fail(s, PD_ST_OVERLOADED, over);
		return;
	}
	if (!pd_peer_allowed(&s->peer, &s->io.s, where)) {
		session_fail(s, PD_ST_ACCESS_DENIED, "access denied");
		return;
	}
	if (pd_d.stopping) {
		refuse(s, PD_ST_SHUTTING_DOWN, "the daemon is stopping");
		return;
	}
	s->started = true;
	g.n_served++;
	g.accepted++;
	pd_log_debug("NET", "%s: connected on %s", s->peer.name, where);
	if (uv_read_start(&s->io.s, on_alloc, on_read) == 0)
		s->reading = true;
	else
		pd_session_close(s);
}

/* ---------------------------------------------------------------- */
/* Timeouts and shutdown */

static void sweep_one(struct pd_session *s, uint64_t now)
{
	const struct pd_config *c = pd_d.cfg;

	if (is_ending(s)) {
		if (now - s->fail_time > FAIL_LINGER_MS)
			pd_session_close(s);
		return;
	}
	if (s->state == SS_HANDSHAKE) {
		if (now - s->t_accept > c->tls_handshake_timeout_ms) {
			pd_log_limited(&lim_tls, PD_LOG_NOTICE, "TLS", "TLS handshake of %s not done after %llu ms: closing",
			               s->peer.name, (unsigned long long)(now - s->t_accept));
			pd_session_close(s);
		}
		return;
	}
	if (s->wbytes && c->write_timeout_ms && now - s->last_write > c->write_timeout_ms) {
		pd_log_limited(&lim_net, PD_LOG_NOTICE, "NET", "%s read nothing for %llu ms: closing its connection",
		               s->peer.name, (unsigned long long)(now - s->last_write));
		pd_session_close(s);
		return;
	}
	for (unsigned i = 0; i < s->rq_n; i++) {
		struct pd_request *r = rq_at(s, i);
		uint64_t d = pd_request_deadline(r);
		if (d && now >= d) {
			bool started = pd_request_started(r);
			pd_log_limited(&lim_net, PD_LOG_NOTICE, "REQ", "request %u of %s timed out: %s", pd_request_id(r),
			               s->peer.name, started ? "message-timeout" : "no ciphertext within idle-timeout");
			pd_request_abort(r, PD_ST_TIMEOUT, started ? "message-timeout exceeded" :
			                 "no ciphertext within idle-timeout");
		}
	}
	if (!s->rq_n && !s->rx && !s->wbytes && c->idle_timeout_ms &&
	    now - s->last_activity > c->idle_timeout_ms) {
		session_fail(s, PD_ST_TIMEOUT, "idle timeout");
		return;
	}
	process(s);
}

static void on_sweep(uv_timer_t *t)
{
	uint64_t now = uv_now(pd_d.loop);
	struct pd_session *s = g.all, *next;
	pd_log_limits_flush(false);
	pd_keyset_secmem_watch();
	for (; s; s = next) {
		next = s->next; /* s may close (unlinks itself, memory stays until on_close) */
		sweep_one(s, now);
	}
}

int pd_sessions_init(uv_loop_t *loop)
{
	int r = uv_timer_init(loop, &g.sweep);
	if (r == 0)
		r = uv_idle_init(loop, &g.idle);
	if (r < 0)
		return r;
	g.init = true;
	uv_unref((uv_handle_t *)&g.sweep);
	return uv_timer_start(&g.sweep, on_sweep, SWEEP_MS, SWEEP_MS);
}

/* SIGTERM: requests not started (no ciphertext yet, so no slot) are
 * answered SHUTTING_DOWN at once, so that their clients send them
 * elsewhere now rather than after the drain; started ones finish within
 * drain-timeout.  Each session then ends once its replies are out. */
void pd_sessions_drain(void)
{
	for (struct pd_session *s = g.all; s; s = s->next) {
		if (is_closing(s))
			continue;
		for (unsigned i = 0; i < s->rq_n; i++) {
			struct pd_request *r = rq_at(s, i);
			if (!pd_request_started(r))
				pd_request_abort(r, PD_ST_SHUTTING_DOWN, "the daemon is stopping; send it again");
		}
		pd_session_wake(s);
	}
}

void pd_sessions_close_all(void)
{
	struct pd_session *s, *next;
	for (s = g.all; s; s = next) {
		next = s->next;
		pd_session_close(s);
	}
}

void pd_sessions_deinit(void)
{
	if (!g.init)
		return;
	pd_log_limits_flush(true); /* counts not lost at exit */
	uv_timer_stop(&g.sweep);
	uv_close((uv_handle_t *)&g.sweep, NULL);
	uv_close((uv_handle_t *)&g.idle, NULL);
	g.init = false;
}
