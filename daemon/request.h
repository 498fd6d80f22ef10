/* SPDX-License-Identifier: MIT */
/*
 * pd_request: one reply owed to a client, in the order the requests came.
 * A DECRYPT request owns a pd_msg, the key set it started with, a bounded
 * ciphertext buffer on each side of the worker hand-off and the encoded
 * frames (METADATA, DATA, RESULT) not yet given to the session's writer.
 * PING, STATS and KEYS replies are requests born answered, built once they
 * are next to be written.
 *
 * Threads: everything here runs on the loop thread; the engine calls
 * (pd_msg_step, pd_msg_recover_key, pd_msg_free) run in pool jobs, at most
 * one job per request at a time, which keeps output in order and lets the
 * pd_msg move between workers without being shared.
 *
 * Back-pressure point (ii): no job is submitted while the request's unsent
 * output is at its limit or, for the head request, while the session's
 * write queue is above its high watermark.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "obuf.h"

struct pd_request;
struct pd_decrypt_req;
struct pd_reply_cursor;

/** Begin a DECRYPT reply.  Admission (queue length) is decided here: an
 * overloaded daemon answers RETRY at once and the request discards its input. */
/** What a request needs of the connection it answers on.  The session
 * provides it and keeps it alive while it holds the request; request.c
 * knows nothing else of sessions. */
struct pd_request_owner {
	void *ctx;
	void (*wake)(void *ctx);           /* output ready or input room: process soon */
	bool (*write_pressure)(void *ctx); /* back-pressure (ii) for the head request */
	size_t (*write_room)(void *ctx);   /* unsent output it takes before its high watermark */
	bool (*is_head)(void *ctx, const struct pd_request *r); /* r's output is the next written */
	uint32_t max_frame;                /* payload limit announced to the client */
	const char *peer;                  /* who (peer.c's name), copied for the log line */
};

/** may_export: the peer may have the session key (peer.c), asked only when
 * dr has WANT_SESSION_KEY.  dr's password and session key are copied into
 * secure memory. */
int pd_request_new_decrypt(struct pd_request **ret, const struct pd_request_owner *o, uint32_t id,
                           const struct pd_decrypt_req *dr, bool may_export);
/** A reply that is complete at birth: frames already encoded in out. */
int pd_request_new_done(struct pd_request **ret, const struct pd_request_owner *o, uint32_t id,
                        struct pd_obuf_list *out);
/** A built-in reply (PING, STATS, KEYS: reply.h) owed for a frame of this
 * type and payload (len <= PD_PING_MAX), built only when it is next to be
 * written (pd_request_builtin_pending): replies waiting behind a request in
 * progress then hold a few octets each, not a KEYS of every key. */
int pd_request_new_builtin(struct pd_request **ret, const struct pd_request_owner *o, uint32_t id,
                           uint8_t type, const uint8_t *p, size_t len);
/** Whether r is a built-in reply not built yet (or not to its end), for
 * which frame, and the cursor its pieces are built with (reply.h). */
bool pd_request_builtin_pending(struct pd_request *r, uint8_t *type, const uint8_t **p, size_t *len,
                                struct pd_reply_cursor **cur);
/** Whether r is a built-in reply with pieces still to build. */
bool pd_request_builtin_more(const struct pd_request *r);
/** A piece of its frames, built once the piece before was taken: out is
 * moved into r; with last, r is then complete. */
void pd_request_builtin_put(struct pd_request *r, struct pd_obuf_list *out, bool last);
/** Free (or, with a job in flight, detach and free when it returns). */
void pd_request_free(struct pd_request *r);

uint32_t pd_request_id(const struct pd_request *r);
/** Free room for ciphertext (0 while the buffer is full). */
size_t pd_request_room(const struct pd_request *r);
/** Append ciphertext (len <= pd_request_room(), or anything once answered:
 * discarded).  Does not submit a job: the session calls pd_request_kick()
 * once it has taken every frame of a read, so that a small message that
 * arrived whole (DECRYPT, DATA, END) costs one job, not one per frame. */
void pd_request_feed(struct pd_request *r, const uint8_t *p, size_t len);
/** The client sent END. */
void pd_request_end(struct pd_request *r);
/** Whether the request still waits for ciphertext frames (DATA/END). */
bool pd_request_receiving(const struct pd_request *r);
/** Move output the session may write now into out (and submit the next job
 * at once, sized with out counted as unsent); true once the terminal
 * frame is among it (the request is then finished with, except for input). */
bool pd_request_take_output(struct pd_request *r, struct pd_obuf_list *out, bool head);
/** Conditions changed (write progress, became head): submit a job if one can go. */
void pd_request_kick(struct pd_request *r);
/** End the request now with status (timeout, shutdown); output not yet taken is dropped. */
void pd_request_abort(struct pd_request *r, uint16_t status, const char *sentence);
/** Whether a DECRYPT has had its first ciphertext (holds a slot), or a
 * reply is of another kind. */
bool pd_request_started(const struct pd_request *r);
/** uv_now() time by which the request must be answered (0: none): its
 * message-timeout, or idle-timeout for a DECRYPT not started yet. */
uint64_t pd_request_deadline(const struct pd_request *r);
