/* SPDX-License-Identifier: MIT */
/* One reply owed to a client; DECRYPT requests drive a pd_msg through pool
 * jobs (see request.h). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gcrypt.h>

#include "admission.h"
#include "buf.h"
#include "daemon.h"
#include "frame.h"
#include "keys.h"
#include "log.h"
#include "pgpdec.h"
#include "pool.h"
#include "reply.h"
#include "request.h"
#include "stats.h"
#include "status.h"

#define container_of(p, T, m) ((T *)((char *)(p) - offsetof(T, m)))

/* Why the last job stopped: what it waits for before the next one. */
enum wait { W_INPUT, W_ROOM };

struct pd_request {
	const struct pd_request_owner *o; /* NULL once freed by its session (job still out) */
	uint32_t id;
	bool decrypt;
	bool answered;          /* the terminal frame exists (job or abort), or will (builtin) */
	uint8_t builtin;        /* built-in reply still to build: its frame type (0: none) */
	uint8_t builtin_len;
	uint8_t builtin_p[PD_PING_MAX];
	struct pd_reply_cursor builtin_cur; /* a reply built a piece at a time (KEYS) */
	bool terminal_taken;    /* ... and the session has taken it */
	bool input_ended;       /* END received */
	bool verified_only, want_meta;
	bool job_inflight;
	bool slot;              /* holds an admission slot (see admission.h) */
	uint64_t mem;           /* its buffers' share of the memory budget */
	uint64_t mem_in;        /* ... of which lin and jin (given back when answered) */
	bool stats_done;        /* its outcome is counted in the stats */
	int cancel;             /* set (atomically) when answered with a job out: the engine stops */
	enum wait wait;

	/* Until its first ciphertext a request holds no slot and no buffers:
	 * only what DECRYPT said (limits, the password in secure memory). */
	struct pd_limits lim;
	char *password;         /* gcry secure memory, until the first job is back */
	size_t password_len;
	size_t pw_pending;      /* of the pending-password budget (admission.h), until the slot */
	uint8_t *skey;          /* a session key given (SESSION_KEY_IN): secure memory, until then too */
	size_t skey_len;
	uint8_t skey_algo;
	bool skey_given;        /* ... so no private-key operation (the log line says so) */
	char *bind;             /* BIND values, a NUL after each (pd_msg_bind), until the first job is back */
	uint8_t n_bind;
	bool want_sk;           /* WANT_SESSION_KEY */
	bool may_export;        /* ... and the peer may have it (peer.c) */
	uint8_t sk_outcome;     /* 0 not asked, 1 exported, 2 refused (policy), 3 none (failed or SED) */

	struct pd_msg *m;       /* made by the first job (start_msg()) */
	bool start_failed;      /* ... which could not: the loop answers (job_done) */
	struct pd_budget *budget; /* max-memory's, for start_msg() (admission.c is the loop's) */
	struct pd_keyset *ks;
	struct pd_job job;

	/* Ciphertext: the loop appends to lin; at submission lin moves into
	 * jin, which only the job touches while it is out (pd_buf, buf.h). */
	struct pd_buf lin, jin;
	size_t in_cap;
	size_t cap_max;         /* in_cap and out_cap grow to this (request-buffer-max) */
	bool job_end;           /* snapshot: tell the engine the input ended */
	bool end_told;

	/* Job results, read on the loop after done. */
	struct pd_obuf *job_out;
	bool job_terminal;
	uint16_t job_status;
	uint64_t job_plain;

	struct pd_obuf_list outq; /* encoded frames not yet taken by the session */
	size_t out_limit;       /* back-pressure (ii): no job while outq holds this (request-buffer) */
	size_t out_cap;         /* the most one job may write: out_limit, grown with in_cap */
	size_t job_cap;         /* what this job may write (out_cap within the write watermark) */
	size_t taken;           /* output the session took and is about to write (pd_request_take_output) */
	size_t held_limit;      /* verified-only: everything is held until DONE */
	size_t held;            /* memory of outq taken from the held budget (pd_obuf_held) */
	size_t held_plain;      /* ... its plaintext octets (max-verified-size) */
	uint16_t held_over;     /* verified-only: a hold limit was hit (LIMIT or
	                         * OVERLOADED); plaintext is dropped, the message
	                         * decrypted on, and the verdict decides */
	uint32_t max_frame;
	uint64_t bytes_in, max_in;
	uint64_t t_start;       /* uv_hrtime() */
	uint64_t seq;           /* daemon-wide request number, for its log line */
	char peer[64];          /* who asked (peer.c's name), for its log line */
	/* What a verified message's RESULT said (its log line); a failed
	 * message's info is scrubbed by the engine, so these stay empty. */
	uint8_t ok_fpr_len;
	uint8_t ok_fpr[32];
	uint8_t ok_integrity;
	uint64_t result_out;
	uint64_t deadline_ms;   /* uv_now() */
	uint64_t start_deadline_ms; /* uv_now() by which the first ciphertext must come */
};

/* Tell the owner something changed (nothing once it let go). */
static void wake(struct pd_request *r)
{
	if (r->o)
		r->o->wake(r->o->ctx);
}

/* One line per finished DECRYPT request (log-requests), under journald
 * with its fields.  Never plaintext, never the engine's sentence (it may
 * name a file the peer chose); the key only for a verified message (a
 * failed one says nothing of which key or trial decoded, here as on the
 * wire).  Bytes in are what the peer sent, bytes out what the RESULT says. */
/* What opened a request, for its log lines: the subkey's fingerprint (a
 * verified message only), "session-key" or "password" for one that
 * verified without a key, "-" otherwise.  fpr has 65 octets. */
static void key_text(const struct pd_request *r, uint16_t status, char *fpr)
{
	snprintf(fpr, 65, "-");
	if (r->ok_fpr_len) {
		for (size_t i = 0; i < r->ok_fpr_len; i++)
			snprintf(fpr + 2 * i, 3, "%02X", r->ok_fpr[i]);
	} else if (status == PD_ST_OK) {
		snprintf(fpr, 65, r->skey_given ? "session-key" : "password");
	}
}

static void log_outcome(const struct pd_request *r, uint16_t status, double seconds)
{
	int lvl = pd_d.cfg->log_requests;
	static const char *const integ[] = { "none", "mdc", "aead", "unprotected" };
	char fpr[65] = "-", f_req[40], f_id[32], f_peer[80], f_st[48], f_key[80], f_in[48], f_out[48], f_ms[40],
	     f_int[40];

	if (lvl < 0 || !pd_log_enabled((enum pd_log_level)lvl))
		return; /* nine snprintf per request for a line not written */
	key_text(r, status, fpr);
	const char *st = pd_status_name(status);
	const char *in = integ[r->ok_integrity < 4 ? r->ok_integrity : 0];
	snprintf(f_req, sizeof(f_req), "PGPDECD_REQUEST=%llu", (unsigned long long)r->seq);
	snprintf(f_id, sizeof(f_id), "PGPDECD_REQUEST_ID=%u", r->id);
	snprintf(f_peer, sizeof(f_peer), "PGPDECD_PEER=%s", r->peer);
	snprintf(f_st, sizeof(f_st), "PGPDECD_STATUS=%s", st);
	snprintf(f_key, sizeof(f_key), "PGPDECD_KEY=%s", fpr);
	snprintf(f_in, sizeof(f_in), "PGPDECD_BYTES_IN=%llu", (unsigned long long)r->bytes_in);
	snprintf(f_out, sizeof(f_out), "PGPDECD_BYTES_OUT=%llu", (unsigned long long)r->result_out);
	snprintf(f_ms, sizeof(f_ms), "PGPDECD_MS=%.3f", seconds * 1e3);
	snprintf(f_int, sizeof(f_int), "PGPDECD_INTEGRITY=%s", in);
	const char *const fields[] = { f_req, f_id, f_peer, f_st, f_key, f_in, f_out, f_ms, f_int };
	pd_log_fields((enum pd_log_level)lvl, "REQ", fields, sizeof(fields) / sizeof(fields[0]),
	              "request %llu id %u from %s: %s key %s integrity %s in %llu out %llu %.3f ms",
	              (unsigned long long)r->seq, r->id, r->peer, st, fpr, in, (unsigned long long)r->bytes_in,
	              (unsigned long long)r->result_out, seconds * 1e3);
}

/* Every request for a session key gets a line of its own, whatever
 * log-requests says: who asked, for which request, the key that opened the
 * message, and whether the session key went out.  Never the session key. */
static void log_session_key(const struct pd_request *r, uint16_t status)
{
	static const char *const what[] = { "not-given", "exported", "refused", "not-given" };
	char fpr[65] = "-", f_req[40], f_id[32], f_peer[80], f_key[80], f_sk[40], f_st[48];

	if (!r->want_sk)
		return;
	key_text(r, status, fpr);
	/* 0: answered before the engine's end (timeout, limit, shutdown) */
	const char *w = what[r->sk_outcome && r->sk_outcome < 4 ? r->sk_outcome : 3];
	snprintf(f_req, sizeof(f_req), "PGPDECD_REQUEST=%llu", (unsigned long long)r->seq);
	snprintf(f_id, sizeof(f_id), "PGPDECD_REQUEST_ID=%u", r->id);
	snprintf(f_peer, sizeof(f_peer), "PGPDECD_PEER=%s", r->peer);
	snprintf(f_key, sizeof(f_key), "PGPDECD_KEY=%s", fpr);
	snprintf(f_sk, sizeof(f_sk), "PGPDECD_SESSION_KEY=%s", w);
	snprintf(f_st, sizeof(f_st), "PGPDECD_STATUS=%s", pd_status_name(status));
	const char *const fields[] = { f_req, f_id, f_peer, f_key, f_sk, f_st };
	pd_log_fields(PD_LOG_NOTICE, "SKEY", fields, sizeof(fields) / sizeof(fields[0]),
	              "session key of request %llu id %u from %s: %s (status %s, key %s)",
	              (unsigned long long)r->seq, r->id, r->peer, w, pd_status_name(status), fpr);
}

/* The outcome goes into the stats and the log once, when the request is
 * answered. */
static void count_outcome(struct pd_request *r, uint16_t status)
{
	if (r->stats_done || !r->decrypt)
		return;
	r->stats_done = true;
	double seconds = (double)(uv_hrtime() - r->t_start) / 1e9;
	pd_stats_request(status, seconds);
	log_outcome(r, status, seconds);
	log_session_key(r, status);
}

/* The slot goes back once the request is answered and no job is out. */
static void slot_release(struct pd_request *r)
{
	if (!r->slot || r->job_inflight)
		return;
	r->slot = false;
	pd_adm_slot_give();
}

/* Verified-only plaintext held: taken per obuf, given back all at once. */
static bool held_take(struct pd_request *r, size_t n)
{
	if (!pd_adm_held_take(n))
		return false;
	r->held += n;
	return true;
}

static void held_release(struct pd_request *r)
{
	pd_adm_held_give(r->held);
	r->held = 0;
	r->held_plain = 0;
}

/* The pending-password budget covers requests that have not started: once
 * one has its slot, queue-length bounds it (as it bounds the copy the
 * message makes). */
static void pending_release(struct pd_request *r)
{
	pd_adm_pending_pw_give(r->pw_pending);
	r->pw_pending = 0;
}

/* The password and a given session key, held until the first job made the
 * message with them (start_msg()). */
static void drop_password(struct pd_request *r)
{
	if (r->password) {
		explicit_bzero(r->password, r->password_len);
		gcry_free(r->password);
		r->password = NULL;
		r->password_len = 0;
	}
	if (r->skey) {
		explicit_bzero(r->skey, r->skey_len);
		gcry_free(r->skey);
		r->skey = NULL;
		r->skey_len = 0;
	}
	free(r->bind);
	r->bind = NULL;
	pending_release(r);
}

static struct pd_request *alloc_req(const struct pd_request_owner *o, uint32_t id)
{
	struct pd_request *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->o = o;
	r->id = id;
	r->t_start = uv_hrtime();
	static uint64_t seq;
	r->seq = ++seq;
	snprintf(r->peer, sizeof(r->peer), "%s", o->peer ? o->peer : "-");
	return r;
}

/* A RESULT frame into its own obuf (loop side; info may be NULL). */
static struct pd_obuf *result_obuf(uint32_t id, uint16_t status, const char *errname, const char *sentence,
                                   const struct pd_msginfo *info, uint64_t in, uint64_t out)
{
	struct pd_obuf *o = pd_obuf_new(PD_FRAME_STRUCT_MAX);
	struct pd_result res = { 0 };

	if (!o)
		return NULL;
	res.status = status;
	res.integrity = info ? (uint8_t)info->integrity : 0;
	res.bytes_in = in;
	res.bytes_out = out;
	snprintf(res.errname, sizeof(res.errname), "%s", errname ? errname : pd_status_name(status));
	snprintf(res.sentence, sizeof(res.sentence), "%s", sentence ? sentence : pd_status_text(status));
	int n = pd_frame_encode_result(o->data, o->cap, id, &res, info);
	if (n < 0) {
		pd_obuf_free(o);
		return NULL;
	}
	o->len = (size_t)n;
	return o;
}

/* Answered: the ciphertext buffers are of no more use.  Free them and give
 * their share of the memory budget back now, not when the session lets go
 * of the request (its output may wait long behind a slow head); jin only
 * once no job uses it. */
static void drop_input(struct pd_request *r)
{
	pd_buf_free(&r->lin);
	if (r->job_inflight)
		return;
	pd_buf_free(&r->jin);
	if (r->mem_in) {
		pd_budget_give(pd_adm_memory(), r->mem_in);
		r->mem -= r->mem_in;
		r->mem_in = 0;
	}
}

void pd_request_abort(struct pd_request *r, uint16_t status, const char *sentence)
{
	if (r->answered)
		return;
	r->answered = true;
	/* Unsent plaintext of a failed message is provisional: drop it. */
	pd_obuf_list_clear(&r->outq);
	held_release(r);
	drop_input(r);
	if (!r->job_inflight) /* else the first job may be reading it: job_done drops it */
		drop_password(r);
	struct pd_obuf *o = result_obuf(r->id, status, NULL, sentence, NULL, r->bytes_in, 0);
	if (o)
		pd_obuf_push(&r->outq, o); /* never held: it is the answer */
	if (r->job_inflight) {
		/* The job's work is wasted: have the engine stop at its next
		 * costly step.  The slot stays taken until the job is back. */
		__atomic_store_n(&r->cancel, 1, __ATOMIC_RELAXED);
	} else {
		/* No worker holds it: free here (its handles are closed, not cached). */
		r->m = pd_msg_free(r->m, NULL);
		r->ks = pd_keyset_unref(r->ks); /* else a worker may be reading the key ring */
	}
	count_outcome(r, status);
	slot_release(r);
	wake(r);
}

/* ---------------------------------------------------------------- */
/* Worker side */

#define START_FAILED "out of memory, or memory for messages in progress at its limit (max-memory); retry later"

struct frame_writer {
	struct pd_obuf *o;
	size_t frame;     /* offset of the open DATA frame's header, or SIZE_MAX */
	size_t flen;      /* payload bytes in the open frame */
	uint32_t max_frame;
	uint32_t id;
};

static void close_frame(struct frame_writer *fw)
{
	if (fw->frame == SIZE_MAX)
		return;
	if (fw->flen == 0) {
		fw->o->len = fw->frame; /* nothing in it: take the header back */
	} else {
		pd_frame_put_hdr(fw->o->data + fw->frame, PD_FT_DATA, fw->id, (uint32_t)fw->flen);
		fw->o->len = fw->frame + PD_FRAME_HDR_LEN + fw->flen;
	}
	fw->frame = SIZE_MAX;
	fw->flen = 0;
}

/* Room for plaintext in the open frame (opening one if needed); 0 when the
 * buffer is full, keeping PD_FRAME_STRUCT_MAX for the RESULT. */
static size_t frame_room(struct frame_writer *fw, size_t data_limit, uint8_t **ret_p)
{
	struct pd_obuf *o = fw->o;
	if (fw->frame != SIZE_MAX && fw->flen == fw->max_frame)
		close_frame(fw);
	if (fw->frame == SIZE_MAX) {
		if (o->len + PD_FRAME_HDR_LEN + PD_FRAME_STRUCT_MAX >= o->cap || o->len >= data_limit)
			return 0;
		fw->frame = o->len;
		fw->flen = 0;
		o->len += PD_FRAME_HDR_LEN; /* reserved; close_frame() sets the final length */
	}
	size_t start = fw->frame + PD_FRAME_HDR_LEN + fw->flen;
	size_t room = o->cap - PD_FRAME_STRUCT_MAX - start;
	if (room > fw->max_frame - fw->flen)
		room = fw->max_frame - fw->flen;
	if (room == 0)
		return 0;
	*ret_p = o->data + start;
	return room;
}

static void job_result(struct pd_request *r, struct frame_writer *fw, int err, struct pd_worker *w)
{
	const struct pd_msginfo *info = pd_msg_info(r->m);
	struct pd_result res = { 0 };

	close_frame(fw);
	if (err < 0 && r->verified_only) { /* no plaintext at all unless verified */
		explicit_bzero(fw->o->data, fw->o->len); /* a free wipes only up to len */
		fw->o->len = 0;
	}
	res.status = pd_status_from_err(err);
	res.integrity = (uint8_t)info->integrity;
	res.bytes_in = info->bytes_in;
	res.bytes_out = info->bytes_out;
	if (err < 0) {
		const char *d = pd_msg_detail(r->m);
		snprintf(res.errname, sizeof(res.errname), "%s", pd_errname(err));
		/* The engine's detail is a whole sentence; pd_strerror() only when it has none. */
		snprintf(res.sentence, sizeof(res.sentence), "%s", d && *d ? d : pd_strerror(err));
	} else {
		snprintf(res.errname, sizeof(res.errname), "OK");
		snprintf(res.sentence, sizeof(res.sentence), "decrypted");
	}
	/* Only a verified message's key, only to a peer allowed it; a refusal
	 * is said only where a key would have been given (RESULT OK), so it
	 * changes nothing else of the reply. */
	if (r->want_sk && err >= 0) {
		size_t kl = 0;
		if (!r->may_export) {
			res.sk_refused = PD_SKR_POLICY;
			r->sk_outcome = 2;
		} else if (pd_msg_session_key(r->m, &res.sk_algo, res.sk, sizeof(res.sk), &kl) == 0) {
			res.sk_len = (uint8_t)kl;
			r->sk_outcome = 1;
		} else {
			res.sk_refused = PD_SKR_UNPROTECTED;
			r->sk_outcome = 3;
		}
	} else if (r->want_sk) {
		r->sk_outcome = 3;
	}
	int n = pd_frame_encode_result(fw->o->data + fw->o->len, fw->o->cap - fw->o->len, r->id, &res, info);
	explicit_bzero(res.sk, sizeof(res.sk));
	if (n > 0)
		fw->o->len += (size_t)n;
	r->job_terminal = true;
	r->job_status = res.status;
	if (err >= 0) { /* the log line's key and integrity: only once verified */
		r->ok_fpr_len = info->key_fpr_len <= sizeof(r->ok_fpr) ? info->key_fpr_len : 0;
		memcpy(r->ok_fpr, info->key_fpr, r->ok_fpr_len);
		r->ok_integrity = (uint8_t)info->integrity;
		r->result_out = res.bytes_out;
	}
	r->m = pd_msg_free(r->m, w); /* handles go back to this worker's cache */
}

/* The first job makes the message, so that it is made and freed on worker
 * threads (by the same one for a message of one job, the usual small
 * message): the memory of a message made on the loop and freed on a worker
 * goes back to the loop's malloc arena, whose lock the loop and the workers
 * then fight over at every message.  (A message answered early, by a
 * timeout, a limit or the session going, is still freed on the loop.)  What
 * the request alone decides (a session key's length) was checked on the
 * loop in activate(); the password and the key are copied from the
 * request, which keeps them until this job is back (job_done drops them).
 * An error here is the memory's, and the loop answers it as it did when it
 * made the message (job_done). */
static int start_msg(struct pd_request *r)
{
	int err = pd_msg_new(&r->m, &r->lim);
	if (err == 0)
		err = pd_msg_set_budget(r->m, r->budget);
	if (err == 0 && r->password)
		err = pd_msg_set_password(r->m, r->password, r->password_len);
	if (err == 0 && r->skey)
		err = pd_msg_set_session_key(r->m, r->skey_algo, r->skey, r->skey_len);
	const char *b = r->bind;
	for (size_t i = 0; err == 0 && i < r->n_bind; i++, b += strlen(b) + 1)
		err = pd_msg_bind(r->m, b, strlen(b)); /* checked in pd_request_new_decrypt */
	if (err < 0) {
		r->m = pd_msg_free(r->m, NULL);
		return err;
	}
	pd_msg_set_cancel(r->m, &r->cancel);
	pd_msg_set_keyring(r->m, pd_keyset_ring(r->ks)); /* ours is found past max_esk */
	return 0;
}

static void job_work(struct pd_job *j, struct pd_worker *w)
{
	struct pd_request *r = container_of(j, struct pd_request, job);
	struct frame_writer fw = { .frame = SIZE_MAX, .max_frame = r->max_frame, .id = r->id };
	size_t jpos = 0;
	int st;

	r->job_plain = 0;
	r->job_terminal = false;
	fw.o = r->job_out; /* made by the loop (pd_request_kick()), freed there */
	if (!r->m && start_msg(r) < 0) {
		r->start_failed = true;
		return;
	}
	for (;;) {
		/* Feed what we have. */
		while (jpos < pd_buf_len(&r->jin) && pd_msg_input_space(r->m) > 0) {
			size_t used = 0;
			st = pd_msg_write(r->m, pd_buf_data(&r->jin) + jpos, pd_buf_len(&r->jin) - jpos, &used);
			if (st < 0) {
				job_result(r, &fw, st, w);
				goto out;
			}
			if (!used)
				break;
			jpos += used;
		}
		if (jpos == pd_buf_len(&r->jin) && r->job_end && !r->end_told) {
			r->end_told = true;
			st = pd_msg_close_input(r->m);
			if (st < 0) {
				job_result(r, &fw, st, w);
				goto out;
			}
		}
		uint8_t *p = NULL;
		size_t room = frame_room(&fw, r->job_cap, &p);
		size_t got = 0;
		if (!room) {
			r->wait = W_ROOM;
			break;
		}
		st = pd_msg_step(r->m, w, p, room, &got);
		if (st == PD_STEP_OUTPUT) {
			if (got > room)
				got = room;
			fw.flen += got;
			r->job_plain += got;
			continue;
		}
		if (st == PD_STEP_NEED_INPUT) {
			if (jpos < pd_buf_len(&r->jin) && pd_msg_input_space(r->m) > 0)
				continue; /* the engine made room: feed more */
			if (jpos < pd_buf_len(&r->jin)) {
				/* Wants input with a full buffer: it can never progress.
				 * An engine bug, but never a spinning worker. */
				job_result(r, &fw, PD_EINTERNAL, w);
				goto out;
			}
			if (r->end_told) { /* cannot happen with a correct engine */
				job_result(r, &fw, PD_ETRUNCATED, w);
				goto out;
			}
			r->wait = W_INPUT;
			break;
		}
		if (st == PD_STEP_NEED_KEY) {
			st = pd_msg_recover_key(r->m, pd_keyset_ring(r->ks), w);
			if (st < 0) {
				job_result(r, &fw, st, w);
				goto out;
			}
			continue;
		}
		if (st == PD_STEP_METADATA) {
			if (r->want_meta) {
				close_frame(&fw);
				/* Provisional like the plaintext; but which key's trial was
				 * taken, and the session key's cipher, stay secret until the
				 * container verified (only AEAD chunks are verified by
				 * now): not in it for CFB. */
				struct pd_msginfo mi = *pd_msg_info(r->m);
				if (mi.container == 9 || (mi.container == 18 && mi.container_version == 1)) {
					mi.sym_algo = 0;
					mi.pk_algo = 0;
					mi.key_fpr_len = 0;
					memset(mi.key_fpr, 0, sizeof(mi.key_fpr));
				}
				int n = pd_frame_encode_metadata(fw.o->data + fw.o->len, fw.o->cap - fw.o->len - PD_FRAME_STRUCT_MAX,
				                                 r->id, &mi);
				if (n > 0)
					fw.o->len += (size_t)n;
			}
			continue;
		}
		if (st == PD_STEP_DONE) {
			job_result(r, &fw, 0, w);
			goto out;
		}
		job_result(r, &fw, st < 0 ? st : PD_EINTERNAL, w);
		goto out;
	}
	close_frame(&fw);
out:
	/* The unread rest of jin stays for the next job. */
	pd_buf_consume(&r->jin, jpos);
}

/* ---------------------------------------------------------------- */
/* Loop side */

static void free_req(struct pd_request *r)
{
	if (r->m)
		pd_msg_free(r->m, NULL);
	pd_keyset_unref(r->ks);
	pd_reply_cursor_clear(&r->builtin_cur);
	pd_obuf_list_clear(&r->outq);
	held_release(r);
	drop_password(r);
	slot_release(r);
	/* Consumed ciphertext is wiped as it goes; only the rest is left. */
	pd_buf_free(&r->lin);
	pd_buf_free(&r->jin);
	if (r->mem)
		pd_budget_give(pd_adm_memory(), r->mem);
	free(r);
}

/* A split RSA operation that failed was redone on one thread and its
 * message is fine, but the reason is the operator's to know: say so, at most
 * once a minute (pgpdecd_split_failures_total counts them all). */
static void warn_split_failures(void)
{
	static unsigned long seen;
	static uint64_t said_ms;
	unsigned long n = pd_split_failures();
	if (n == seen)
		return;
	uint64_t now = uv_now(pd_d.loop);
	if (said_ms && now - said_ms < 60000)
		return;
	pd_log_warn("POOL", "%lu split RSA operation%s redone on one thread since the start: a result failed its check "
	            "against the public key (a hardware fault?) or the secure heap is too small (secmem-size)",
	            n, n == 1 ? "" : "s");
	seen = n;
	said_ms = now;
}

/* Verified-only: take output o into the held budget.  Over a hold limit,
 * the plaintext is dropped and the message decrypted on: whether the limit
 * was hit depends on how much plaintext unauthenticated octets made, so
 * only the final verdict may say it (LIMIT or OVERLOADED when the message
 * verified, its own failure otherwise).  Returns o, or NULL when dropped. */
static struct pd_obuf *hold(struct pd_request *r, struct pd_obuf *o)
{
	if (!r->held_over) {
		if (r->held_plain + o->len > r->held_limit)
			r->held_over = PD_ST_LIMIT;
		else if (!held_take(r, pd_obuf_held(o)))
			r->held_over = PD_ST_OVERLOADED;
		else {
			r->held_plain += o->len;
			return o;
		}
		pd_obuf_list_clear(&r->outq);
		held_release(r);
	}
	pd_obuf_free(o);
	return NULL;
}

static void job_done(struct pd_job *j)
{
	struct pd_request *r = container_of(j, struct pd_request, job);
	struct pd_obuf *o = r->job_out;

	warn_split_failures();

	r->job_out = NULL;

	r->job_inflight = false;
	drop_password(r); /* the first job copied it into the message, or failed */
	if (!r->o) { /* the session went away while we worked */
		pd_obuf_free(o);
		count_outcome(r, PD_ST_INTERNAL);
		free_req(r);
		return;
	}
	if (r->answered) { /* aborted (timeout, shutdown) while out: result already queued */
		pd_obuf_free(o);
		drop_input(r); /* jin too, now */
		if (r->m)
			r->m = pd_msg_free(r->m, NULL);
		r->ks = pd_keyset_unref(r->ks);
		slot_release(r);
		return;
	}
	if (j->cancelled) {
		pd_obuf_free(o);
		pd_request_abort(r, PD_ST_SHUTTING_DOWN, "the daemon is stopping");
		return;
	}
	if (r->start_failed) {
		pd_obuf_free(o);
		pd_request_abort(r, PD_ST_OVERLOADED, START_FAILED);
		return;
	}
	/* Output that will wait (held until the verdict, or behind the head
	 * request) goes in a buffer of about its size: a client trickling its
	 * ciphertext gets a job, and a few octets of plaintext, per trickle,
	 * each in a job buffer of request-buffer (checked: 27 MiB of RSS for
	 * 157 KiB counted).  The head's goes to the writer, which does so for
	 * what it queues. */
	if (o && o->len && (r->verified_only || !r->o->is_head(r->o->ctx, r)))
		o = pd_obuf_fit(o);
	pd_stats_bytes_out(r->job_plain);
	if (r->verified_only && r->job_terminal && r->job_status != PD_ST_OK) {
		/* held plaintext never leaves; o holds the RESULT alone */
		pd_obuf_list_clear(&r->outq);
		held_release(r);
	} else if (r->verified_only) {
		/* A job that made no plaintext (its ciphertext was all headers,
		 * or came an octet at a time) holds nothing: its empty buffer is
		 * freed below, so it must not take the budget (it took its whole
		 * size, and kept it until the answer: a trickler shut out every
		 * other verified-only request). */
		if (o && o->len)
			o = hold(r, o);
		if (r->job_terminal && r->held_over) { /* verified, but too much to hold */
			char why[160];
			snprintf(why, sizeof(why), r->held_over == PD_ST_LIMIT ?
			         "verified-only delivery holds at most %zu bytes of plaintext" :
			         "verified-only delivery: plaintext held for all requests at its limit "
			         "(max-verified-total); retry later", r->held_limit);
			r->job_status = r->held_over;
			r->result_out = 0;
			o = result_obuf(r->id, r->held_over, NULL, why, NULL, r->bytes_in, 0);
		}
	}
	if (o && o->len) {
		/* A large job's buffer (up to half the write watermark) with
		 * little in it: what waits to be written is counted by its bytes,
		 * so it must not hold much more memory than that. */
		if (o->cap > r->out_limit + 4 * PD_FRAME_STRUCT_MAX)
			o = pd_obuf_fit(o);
		pd_obuf_push(&r->outq, o);
	} else {
		pd_obuf_free(o);
	}
	if (r->job_terminal) {
		r->answered = true;
		drop_input(r);
		count_outcome(r, r->job_status);
		r->ks = pd_keyset_unref(r->ks);
		slot_release(r);
	}
	pd_request_kick(r);
	wake(r);
}

/* A message several times larger than the buffers: they double, up to
 * request-buffer-max, so that a large message moves between the loop and
 * a worker in fewer, larger hand-offs (each one wakes a worker and then
 * the loop: at 128 KiB, 512 of each per 64 MiB, which on a small machine
 * cost more than the copies).  Small messages keep request-buffer.  The
 * memory comes from max-memory like the first buffers; without it the
 * buffers stay as they are.  Loop side, no job out (jin is ours). */
static void grow_buffers(struct pd_request *r)
{
	if (r->in_cap >= r->cap_max || r->input_ended || r->bytes_in < 4 * (uint64_t)r->in_cap)
		return;
	size_t in = r->in_cap * 2 < r->cap_max ? r->in_cap * 2 : r->cap_max;
	/* A job's output and the one before it, still being written, fit
	 * under the write watermark together (see job_cap()): more would
	 * only make the next job wait, or be cut to what fits. */
	size_t half = pd_d.cfg->write_high_watermark / 2;
	size_t out = r->verified_only ? r->out_cap : /* job_cap() keeps request-buffer for them */
	             in < half ? in : half > r->out_cap ? half : r->out_cap;
	uint64_t extra = 2 * (uint64_t)(in - r->in_cap) + 2 * (uint64_t)(out - r->out_cap);
	struct pd_budget *b = pd_adm_memory();
	if (!b || pd_budget_take(b, extra) < 0) {
		r->cap_max = r->in_cap; /* not for this request, then */
		return;
	}
	r->mem += extra;
	r->mem_in += 2 * (uint64_t)(in - r->in_cap);
	/* Both or neither: in_cap changes only when both grew (a larger jin
	 * alone is harmless, its room is counted against in_cap). */
	if (!pd_buf_grow(&r->jin, in, in) || !pd_buf_grow(&r->lin, in, in)) {
		r->cap_max = r->in_cap;
		return;
	}
	r->in_cap = in;
	r->out_cap = out;
}

/* A job writes at most out_cap, and no more than the session can still
 * take below its write-high-watermark with what is queued here: a client
 * that reads slowly sees the unsent output bounded as with request-buffer
 * alone (the watermark and two request-buffers), a fast one gets the
 * large hand-offs.  Only the head request's output is written now: the
 * others hold theirs until they are head and it is then written at once,
 * so they keep request-buffer (two of it held, as before).  Verified-only
 * output is held here, not sent: as before. */
static size_t job_cap(struct pd_request *r)
{
	if (r->verified_only || r->out_cap <= r->out_limit || !r->o->is_head(r->o->ctx, r))
		return r->out_limit;
	size_t room = r->o->write_room(r->o->ctx), queued = r->outq.bytes + r->taken;
	room = room > queued ? room - queued : 0;
	return room < r->out_limit ? r->out_limit : room > r->out_cap ? r->out_cap : room;
}

void pd_request_kick(struct pd_request *r)
{
	int err;

	if (!r->decrypt || r->answered || r->job_inflight || !r->slot || !r->o)
		return;
	if (r->wait == W_INPUT && !pd_buf_len(&r->lin) && !(r->input_ended && !r->end_told))
		return; /* nothing new to feed */
	if (!r->verified_only) {
		if (r->outq.bytes >= r->out_limit)
			return; /* (ii): unsent output at its limit */
		if (r->o->write_pressure(r->o->ctx))
			return;
	}
	grow_buffers(r);
	/* Move ciphertext across the hand-off. */
	size_t n = r->in_cap - pd_buf_len(&r->jin);
	if (n > pd_buf_len(&r->lin))
		n = pd_buf_len(&r->lin);
	if (n && !pd_buf_len(&r->jin) && n == pd_buf_len(&r->lin)) {
		/* The job took all it had and lin fits: the buffers change
		 * places (both in_cap; what either held before is overwritten
		 * or wiped later, as after a consume). */
		pd_buf_swap(&r->lin, &r->jin);
		wake(r);
	} else if (n) {
		if (pd_buf_tail_room(&r->jin) < n)
			pd_buf_compact(&r->jin);
		pd_buf_put(&r->jin, pd_buf_data(&r->lin), n);
		pd_buf_consume(&r->lin, n); /* overwritten or wiped later, see buf.h */
		wake(r); /* room for more ciphertext */
	}
	r->job_end = r->input_ended && !pd_buf_len(&r->lin);
	r->job_cap = job_cap(r);
	/* The job's output buffer is made here and freed here (after the
	 * write), on the loop: see start_msg() for why not on the worker. */
	r->job_out = pd_obuf_new(r->job_cap + 2 * PD_FRAME_STRUCT_MAX + 2 * PD_FRAME_HDR_LEN);
	if (!r->job_out) {
		pd_request_abort(r, PD_ST_OVERLOADED, "out of memory");
		return;
	}
	r->job.work = job_work;
	r->job.done = job_done;
	err = pd_pool_submit(pd_d.pool, &r->job);
	if (err < 0) {
		pd_obuf_free(r->job_out);
		r->job_out = NULL;
		pd_request_abort(r, err == -ESHUTDOWN ? PD_ST_SHUTTING_DOWN : PD_ST_OVERLOADED,
		                 err == -ESHUTDOWN ? "the daemon is stopping" : "the work queue is full; retry later");
		return;
	}
	r->job_inflight = true;
}

int pd_request_new_decrypt(struct pd_request **ret, const struct pd_request_owner *o, uint32_t id,
                           const struct pd_decrypt_req *dr, bool may_export)
{
	const struct pd_config *c = pd_d.cfg;
	struct pd_request *r = alloc_req(o, id);

	if (!r)
		return -ENOMEM;
	r->decrypt = true;
	r->verified_only = dr->flags & PD_DF_VERIFIED_ONLY;
	r->want_meta = dr->flags & PD_DF_WANT_METADATA;
	r->want_sk = dr->flags & PD_DF_WANT_SESSION_KEY;
	r->may_export = r->want_sk && may_export;
	r->max_frame = o->max_frame;
	r->out_limit = r->out_cap = r->job_cap = c->request_buffer;
	r->cap_max = c->request_buffer_max;
	r->held_limit = c->max_verified_size;
	r->max_in = c->max_message_size;
	r->wait = W_INPUT;
	r->deadline_ms = c->message_timeout_ms ? uv_now(pd_d.loop) + c->message_timeout_ms : 0;
	r->start_deadline_ms = c->idle_timeout_ms ? uv_now(pd_d.loop) + c->idle_timeout_ms : 0;
	*ret = r;

	if (pd_d.stopping) {
		pd_request_abort(r, PD_ST_SHUTTING_DOWN, "the daemon is stopping");
		return 0;
	}
	if (dr->has_size_hint && r->max_in && dr->size_hint > r->max_in) {
		char why[128];
		snprintf(why, sizeof(why), "message larger than max-message-size (%llu bytes)", (unsigned long long)r->max_in);
		pd_request_abort(r, PD_ST_LIMIT, why);
		return 0;
	}
	if (dr->n_bind) {
		/* Said before any ciphertext is read: it depends on the request alone. */
		size_t len = 0;
		for (size_t i = 0; i < dr->n_bind; i++) {
			if (pd_bind_check((const char *)dr->bind[i], dr->bind_len[i]) < 0) {
				pd_request_abort(r, PD_ST_BAD_REQUEST, "BIND: not an address (local@domain) or a domain (@domain)");
				return 0;
			}
			len += dr->bind_len[i] + 1u;
		}
		if (!(r->bind = malloc(len))) {
			pd_request_abort(r, PD_ST_OVERLOADED, "out of memory; retry later");
			return 0;
		}
		len = 0;
		for (size_t i = 0; i < dr->n_bind; i++) {
			memcpy(r->bind + len, dr->bind[i], dr->bind_len[i]);
			len += dr->bind_len[i];
			r->bind[len++] = 0;
		}
		r->n_bind = dr->n_bind;
	}
	pd_limits_default(&r->lim);
	r->lim.max_input = c->max_message_size;
	r->lim.max_output = c->max_output_size;
	if (c->max_key_trials)
		r->lim.max_key_trials = c->max_key_trials;
	r->lim.allow_sed = c->allow_sed;
	/* max-argon2-memory 0 refuses Argon2: 1 KiB is below the smallest
	 * memory an Argon2 S2K can ask for (8 KiB). */
	r->lim.max_argon2_kib = c->max_argon2_memory / 1024 > UINT32_MAX ? UINT32_MAX :
	                        c->max_argon2_memory < 1024 ? 1 : (uint32_t)(c->max_argon2_memory / 1024);
	r->lim.max_argon2_passes = c->max_argon2_passes;
	r->lim.max_argon2_lanes = c->max_argon2_lanes;
	r->lim.max_skesk_trials = c->max_skesk_trials;
	r->lim.max_kdf_mib = (uint32_t)(c->max_kdf_work >> 20);
	/* The hand-off buffers must take any one DATA frame whole. */
	r->in_cap = c->request_buffer > r->max_frame ? c->request_buffer : r->max_frame;
	if (r->cap_max < r->in_cap)
		r->cap_max = r->in_cap; /* request-buffer-max below request-buffer: no growth */
	if (dr->password) {
		/* Held in secure memory until the message starts: bounded for
		 * all such requests together (admission.h). */
		if (!pd_adm_pending_pw_take(dr->password_len + 1)) {
			pd_request_abort(r, PD_ST_OVERLOADED, "too many requests with a password waiting to start; retry later");
			return 0;
		}
		r->pw_pending += dr->password_len + 1;
		r->password = gcry_malloc_secure(dr->password_len + 1);
		if (!r->password) {
			pd_request_abort(r, PD_ST_OVERLOADED, "out of memory; retry later");
			return 0;
		}
		memcpy(r->password, dr->password, dr->password_len);
		r->password_len = dr->password_len;
	}
	if (dr->session_key) {
		/* The same bound and the same care as a password: it opens the
		 * message as well as any private key would. */
		if (!pd_adm_pending_pw_take(dr->session_key_len)) {
			pd_request_abort(r, PD_ST_OVERLOADED, "too many requests with a password waiting to start; retry later");
			return 0;
		}
		r->pw_pending += dr->session_key_len;
		r->skey = gcry_malloc_secure(dr->session_key_len);
		if (!r->skey) {
			pd_request_abort(r, PD_ST_OVERLOADED, "out of memory; retry later");
			return 0;
		}
		memcpy(r->skey, dr->session_key, dr->session_key_len);
		r->skey_len = dr->session_key_len;
		r->skey_algo = dr->session_key_algo;
		r->skey_given = true;
	}
	return 0;
}

/* The first ciphertext (or END): now the request has work for a worker.
 * It takes its admission slot and its buffers; false when it was answered
 * instead (OVERLOADED). */
static bool activate(struct pd_request *r)
{
	if (r->slot) /* not r->m: a worker may be freeing it right now */
		return true;
	if (!pd_adm_slot_take()) {
		pd_request_abort(r, PD_ST_OVERLOADED, "too many messages in progress; retry later");
		return false;
	}
	r->slot = true;
	pending_release(r);
	/* Its buffers: the two hand-off buffers, a job's output and as much
	 * again queued (back-pressure (ii)); the engine takes its own share. */
	uint64_t need = 2 * (uint64_t)r->in_cap + 2 * ((uint64_t)r->out_cap + 2 * PD_FRAME_STRUCT_MAX);
	struct pd_budget *b = pd_adm_memory();
	if (!b || pd_budget_take(b, need) < 0) {
		pd_request_abort(r, PD_ST_OVERLOADED, "memory for messages in progress at its limit (max-memory); retry later");
		return false;
	}
	r->mem = need;
	r->mem_in = 2 * (uint64_t)r->in_cap;
	r->budget = b;
	int skerr = r->skey ? pd_session_key_check(r->skey_algo, r->skey_len) : 0;
	if (skerr < 0) {
		/* Said before any ciphertext is read: it depends on the request alone. */
		pd_request_abort(r, PD_ST_BAD_REQUEST, skerr == PD_EUNSUPPORTED ?
		                 "SESSION_KEY_IN: unknown symmetric algorithm" :
		                 "SESSION_KEY_IN: key length wrong for its algorithm");
		return false;
	}
	if (pd_buf_init(&r->lin, r->in_cap) < 0 || pd_buf_init(&r->jin, r->in_cap) < 0) {
		pd_request_abort(r, PD_ST_OVERLOADED, START_FAILED);
		return false;
	}
	/* The message itself is made by the first job (start_msg()). */
	r->ks = pd_keyset_ref(pd_d.keys);
	return true;
}

int pd_request_new_done(struct pd_request **ret, const struct pd_request_owner *o, uint32_t id,
                        struct pd_obuf_list *out)
{
	struct pd_request *r = alloc_req(o, id);
	if (!r)
		return -ENOMEM;
	r->answered = true;
	r->input_ended = true;
	r->outq = *out;
	memset(out, 0, sizeof(*out));
	*ret = r;
	return 0;
}

int pd_request_new_builtin(struct pd_request **ret, const struct pd_request_owner *o, uint32_t id,
                           uint8_t type, const uint8_t *p, size_t len)
{
	if (!type || len > PD_PING_MAX)
		return -EINVAL; /* the session checked both: a bug */
	struct pd_request *r = alloc_req(o, id);
	if (!r)
		return -ENOMEM;
	r->answered = true;
	r->input_ended = true;
	r->builtin = type;
	r->builtin_len = (uint8_t)len;
	if (len)
		memcpy(r->builtin_p, p, len);
	*ret = r;
	return 0;
}

bool pd_request_builtin_pending(struct pd_request *r, uint8_t *type, const uint8_t **p, size_t *len,
                                struct pd_reply_cursor **cur)
{
	if (!r->builtin)
		return false;
	*type = r->builtin;
	*p = r->builtin_p;
	*len = r->builtin_len;
	*cur = &r->builtin_cur;
	return true;
}

bool pd_request_builtin_more(const struct pd_request *r) { return r->builtin; }

void pd_request_builtin_put(struct pd_request *r, struct pd_obuf_list *out, bool last)
{
	/* a piece is built once the one before was taken */
	if (!r->builtin || r->outq.head) {
		pd_log_err("SYS", "request %u: built-in reply built past its end or ahead of its writer", (unsigned)r->id);
		abort();
	}
	if (last)
		r->builtin = 0;
	r->outq = *out;
	memset(out, 0, sizeof(*out));
}

void pd_request_free(struct pd_request *r)
{
	if (!r)
		return;
	if (r->job_inflight) {
		r->o = NULL; /* job_done frees */
		/* Nobody waits for its work any more (the connection went, or the
		 * drain ended): the engine stops at its next costly step, so a
		 * shutdown waits for one such step at most, never a whole message. */
		__atomic_store_n(&r->cancel, 1, __ATOMIC_RELAXED);
		return;
	}
	if (!r->answered)
		count_outcome(r, PD_ST_INTERNAL);
	free_req(r);
}

uint32_t pd_request_id(const struct pd_request *r) { return r->id; }

size_t pd_request_room(const struct pd_request *r)
{
	if (!r->decrypt || r->answered)
		return SIZE_MAX; /* discarding */
	return r->in_cap - pd_buf_len(&r->lin); /* compacted in pd_request_feed() if need be */
}

void pd_request_feed(struct pd_request *r, const uint8_t *p, size_t len)
{
	pd_stats_bytes_in(len);
	if (!r->decrypt || r->answered)
		return;
	if (r->max_in && (r->bytes_in + len > r->max_in || r->bytes_in + len < r->bytes_in)) {
		char why[128];
		snprintf(why, sizeof(why), "message larger than max-message-size (%llu bytes)", (unsigned long long)r->max_in);
		pd_request_abort(r, PD_ST_LIMIT, why);
		return;
	}
	r->bytes_in += len;
	if (!len) /* an empty DATA frame: nothing to do, no slot to take */
		return;
	if (!activate(r))
		return;
	if (len > r->in_cap - pd_buf_len(&r->lin)) { /* the session checks room; never overflow */
		pd_request_abort(r, PD_ST_INTERNAL, "input buffer overflow");
		return;
	}
	if (pd_buf_tail_room(&r->lin) < len)
		pd_buf_compact(&r->lin);
	pd_buf_put(&r->lin, p, len);
}

void pd_request_end(struct pd_request *r)
{
	r->input_ended = true;
	if (r->decrypt && !r->answered && !activate(r))
		return;
	pd_request_kick(r);
}

bool pd_request_receiving(const struct pd_request *r) { return !r->input_ended; }

bool pd_request_take_output(struct pd_request *r, struct pd_obuf_list *out, bool head)
{
	if (!head || r->terminal_taken)
		return r->terminal_taken;
	if (r->verified_only && !r->answered)
		return false; /* held until the verdict */
	if (r->answered && !r->builtin) { /* a built-in reply: its last piece */
		held_release(r);
		r->terminal_taken = true;
	}
	struct pd_obuf *o;
	while ((o = pd_obuf_pop(&r->outq)))
		pd_obuf_push(out, o);
	/* The next job starts now, while the session writes out; it is sized
	 * as if none of out had left yet. */
	r->taken = out->bytes;
	pd_request_kick(r);
	r->taken = 0;
	return r->terminal_taken;
}

bool pd_request_started(const struct pd_request *r) { return !r->decrypt || r->slot || r->answered; }

uint64_t pd_request_deadline(const struct pd_request *r)
{
	if (r->answered)
		return 0;
	/* Until its first ciphertext a request holds no slot but may hold a
	 * password in secure memory: it gets idle-timeout for it, not the whole
	 * message-timeout. */
	if (r->decrypt && !r->slot && r->start_deadline_ms &&
	    (!r->deadline_ms || r->start_deadline_ms < r->deadline_ms))
		return r->start_deadline_ms;
	return r->deadline_ms;
}
