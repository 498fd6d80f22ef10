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

struct pd_keyinfos;

/** Where a reply built a piece at a time stands: KEYS lists the keys of
 * the set loaded at its first piece (their public facts, held here until
 * its last: keys.h) from entry next on.  Zeroed by its owner, which calls
 * pd_reply_cursor_clear when done with it. */
struct pd_reply_cursor {
	size_t next;
	struct pd_keyinfos *keys;
};

/** The most one piece of a reply built a piece at a time holds. */
#define PD_REPLY_PIECE (16u << 10)

/** Encode the reply to a built-in request of this type (payload p, len)
 * into out, its DATA frames at most max_frame each.  KEYS comes a piece
 * (PD_REPLY_PIECE octets at most) per call, so that the writer's bounds
 * (its watermark, max-write-buffer) stop a listing of 10,000 keys (1 MB)
 * a piece past them, not a listing past them.  0: the reply is complete;
 * 1: more to come (call again with the same cursor once out went to the
 * writer); -ENOENT if the type is not a built-in request (out untouched);
 * -ENOMEM (out may hold frames: the caller clears it). */
int pd_reply_builtin(uint8_t type, uint32_t id, const uint8_t *p, size_t len, uint32_t max_frame,
                     struct pd_reply_cursor *cur, struct pd_obuf_list *out);
/** Drop what cur holds (a key listing) and zero it. */
void pd_reply_cursor_clear(struct pd_reply_cursor *cur);
/** Whether type is a built-in request (PING, STATS, KEYS). */
bool pd_reply_is_builtin(uint8_t type);
/** Append a RESULT frame with status and sentence (no trailer): 0 or -ENOMEM. */
int pd_reply_result(struct pd_obuf_list *out, uint32_t id, uint16_t status, const char *sentence);
