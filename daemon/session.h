/* SPDX-License-Identifier: MIT */
/*
 * pd_session: one client connection.  Layers, bottom up: the libuv stream
 * (unix or TCP), [TLS], the proto frame decoder, the ordered list of
 * replies (pd_request).  Owns the connection's lifecycle state (ACCEPTED,
 * HANDSHAKE, HELLO, OPEN, FAILING, SHUT, CLOSING: checked transitions), the
 * read buffer, the frame dispatch (built-in replies: reply.c; who may
 * connect: peer.c), the writer with the write budget of all sessions
 * together, the timeouts and the close chain; memory is freed only from
 * the uv_close callback.
 *
 * Back-pressure point (i): frames are taken from the read buffer only while
 * the write queue is below the high watermark (hysteresis down to the low
 * watermark), the receiving request has room (DATA is taken in slices of
 * whatever room there is) and, between requests, fewer than
 * max-requests-per-connection replies are owed; the
 * socket is read only while the read buffer has room.  So a client that
 * does not read its plaintext stops the daemon reading its ciphertext.
 *
 * Re-entrancy: requests never call into session processing; they only mark
 * the session (pd_session_wake) and the loop processes it later, at the top
 * level, so no callback can free an object further up its own stack.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "peer.h"

struct pd_session;

/** Allocate a session whose stream handle a listener accepts into (tls: a TLS listener's). */
struct pd_session *pd_session_alloc(enum pd_peer_kind kind, bool tls);
/** The stream to uv_accept() into (already initialised on the loop). */
uv_stream_t *pd_session_stream(struct pd_session *s);
/** Start serving an accepted connection (peer.c's limits and allow-lists
 * first); where names the listener in logs. */
void pd_session_start(struct pd_session *s, const char *where);
/** Close without a word (the close callback frees). */
void pd_session_close(struct pd_session *s);

/** Something changed for this session (output ready, input room): process it soon. */
void pd_session_wake(struct pd_session *s);

/** Connections being served (accepted and not refused): max-connections counts these. */
unsigned pd_sessions_count(void);
/** Connections accepted and served since start. */
uint64_t pd_sessions_accepted(void);
/** Output queued for writing on all sessions (back-pressure (iii)). */
uint64_t pd_sessions_unsent(void);
/** Whether that reached max-write-buffer (and has not fallen to half of it since). */
bool pd_sessions_write_paused(void);

/** Start the periodic sweep (timeouts) and the deferred-processing handle. */
int pd_sessions_init(uv_loop_t *loop);
/** Shutdown: idle sessions get ERROR SHUTTING_DOWN, busy ones finish first. */
void pd_sessions_drain(void);
/** Close every session now (drain deadline passed). */
void pd_sessions_close_all(void);
/** Stop the sweep and deferred-processing handles. */
void pd_sessions_deinit(void);
