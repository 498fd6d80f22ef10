/* SPDX-License-Identifier: MIT */
/*
 * Built-in replies: the requests the daemon answers at once, from what it
 * already knows (PING -> PONG, STATS -> the Prometheus text as DATA frames,
 * KEYS -> one KEY frame per loaded key), each ending in RESULT OK, and the
 * RESULT that refuses a request this version cannot honour.  Adding such a
 * frame type touches this file only; the session gives it every frame that
 * is not HELLO, ERROR, DECRYPT, DATA or END.
 *
 * Owns nothing between calls but what a cursor holds; never writes, never
 * touches a session.  Loop thread only (STATS and KEYS read the current
 * stats and key set).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "obuf.h"

struct pd_keyset;

/** Where a reply built a piece at a time stands: KEYS lists the key set of
 * its first piece (held here until its last) from key next on.  Zeroed by
 * its owner, which calls pd_reply_cursor_clear when done with it. */
struct pd_reply_cursor {
	size_t next, listed;
	struct pd_keyset *ks;
};

/** The most one piece of a reply built a piece at a time holds. */
#define PD_REPLY_PIECE (16u << 10)

/** Encode the reply to a built-in request of this type (payload p, len)
 * into out, its DATA frames at most max_frame each.  KEYS comes a piece
 * (PD_REPLY_PIECE octets at most) per call, so that a listing of 10,000
 * keys waits for a client that reads slowly as a cursor, not as 1 MB of
 * frames.  0: the reply is complete; 1: more to come (call again with the
 * same cursor once out is written); -ENOENT if the type is not a built-in
 * request (out untouched); -ENOMEM (out may hold frames: the caller clears
 * it). */
int pd_reply_builtin(uint8_t type, uint32_t id, const uint8_t *p, size_t len, uint32_t max_frame,
                     struct pd_reply_cursor *cur, struct pd_obuf_list *out);
/** Drop what cur holds (a key set) and zero it. */
void pd_reply_cursor_clear(struct pd_reply_cursor *cur);
/** Whether type is a built-in request (PING, STATS, KEYS). */
bool pd_reply_is_builtin(uint8_t type);
/** Append a RESULT frame with status and sentence (no trailer): 0 or -ENOMEM. */
int pd_reply_result(struct pd_obuf_list *out, uint32_t id, uint16_t status, const char *sentence);
