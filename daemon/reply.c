/* SPDX-License-Identifier: MIT */
/* Built-in replies: PING, STATS, KEYS (see reply.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "daemon.h"
#include "frame.h"
#include "keys.h"
#include "reply.h"
#include "stats.h"
#include "status.h"

static struct pd_obuf *frame_obuf(uint8_t type, uint32_t id, const void *p, size_t len)
{
	struct pd_obuf *o = pd_obuf_new(PD_FRAME_HDR_LEN + len);
	if (!o)
		return NULL;
	int n = pd_frame_encode(o->data, o->cap, type, id, p, len);
	if (n < 0) {
		pd_obuf_free(o);
		return NULL;
	}
	o->len = (size_t)n;
	return o;
}

static int put_result(struct pd_obuf_list *l, uint32_t id, const struct pd_result *res)
{
	struct pd_obuf *o = pd_obuf_new(PD_FRAME_STRUCT_MAX);
	if (!o)
		return -ENOMEM;
	int n = pd_frame_encode_result(o->data, o->cap, id, res, NULL);
	if (n < 0) {
		pd_obuf_free(o);
		return n;
	}
	o->len = (size_t)n;
	pd_obuf_push(l, o);
	return 0;
}

static int ok_result(struct pd_obuf_list *l, uint32_t id, uint64_t bytes_out)
{
	struct pd_result res = { .status = PD_ST_OK, .bytes_out = bytes_out };
	snprintf(res.errname, sizeof(res.errname), "OK");
	snprintf(res.sentence, sizeof(res.sentence), "ok");
	return put_result(l, id, &res);
}

int pd_reply_result(struct pd_obuf_list *out, uint32_t id, uint16_t status, const char *sentence)
{
	struct pd_result res = { .status = status };
	snprintf(res.errname, sizeof(res.errname), "%s", pd_status_name(status));
	snprintf(res.sentence, sizeof(res.sentence), "%s", sentence);
	return put_result(out, id, &res) < 0 ? -ENOMEM : 0;
}

/* PING: its payload back in a PONG (no RESULT). */
static int build_pong(uint32_t id, const uint8_t *p, size_t len, uint32_t max_frame, struct pd_reply_cursor *cur,
                      struct pd_obuf_list *l)
{
	(void)max_frame, (void)cur;
	struct pd_obuf *o = frame_obuf(PD_FT_PONG, id, p, len);
	if (!o)
		return -ENOMEM;
	pd_obuf_push(l, o);
	return 0;
}

/* STATS: the Prometheus text in DATA frames, RESULT OK with its length. */
static int build_stats(uint32_t id, const uint8_t *p, size_t plen, uint32_t max_frame, struct pd_reply_cursor *cur,
                       struct pd_obuf_list *l)
{
	(void)p, (void)plen, (void)cur;
	size_t len;
	char *text = pd_stats_render(&len);
	if (!text)
		return -ENOMEM;
	for (size_t off = 0; off < len;) {
		size_t n = len - off > max_frame ? max_frame : len - off;
		struct pd_obuf *o = frame_obuf(PD_FT_DATA, id, text + off, n);
		if (!o) {
			free(text);
			return -ENOMEM;
		}
		pd_obuf_push(l, o);
		off += n;
	}
	free(text);
	return ok_result(l, id, len);
}

_Static_assert(PD_REPLY_PIECE >= PD_FRAME_STRUCT_MAX, "a piece holds at least one frame of any kind");

/* KEYS: one KEY frame per key of one set, RESULT OK with the count.  The
 * frames of one piece share a buffer (one buffer per key took 8 KiB for a
 * frame of a few dozen octets).  The set is the current one when the first
 * piece is built; the cursor holds its keys' public facts until the last,
 * so a reload in between changes nothing in a listing half sent and does
 * not keep the old set's secrets. */
static int build_keys(uint32_t id, const uint8_t *p, size_t plen, uint32_t max_frame, struct pd_reply_cursor *cur,
                      struct pd_obuf_list *l)
{
	(void)p, (void)plen, (void)max_frame;
	if (!cur->keys)
		cur->keys = pd_keyset_infos(pd_d.keys);
	size_t n;
	const struct pd_keyinfo *ki = pd_keyinfos_get(cur->keys, &n);
	struct pd_obuf *o = pd_obuf_new(PD_REPLY_PIECE);
	if (!o)
		return -ENOMEM;
	for (; cur->next < n; cur->next++) {
		const char *a;
		size_t al = pd_keyinfos_addresses(cur->keys, cur->next, &a);
		int k = pd_frame_encode_key(o->data + o->len, o->cap - o->len, id, &ki[cur->next], a, al);
		if (k == -ENOBUFS && o->len)
			break; /* the piece is full: this key is the next one's first */
		if (k < 0) {
			pd_obuf_free(o);
			return k;
		}
		o->len += (size_t)k;
	}
	if (o->len)
		pd_obuf_push(l, pd_obuf_fit(o));
	else
		pd_obuf_free(o);
	if (cur->next < n)
		return 1;
	pd_reply_cursor_clear(cur);
	return ok_result(l, id, n);
}

static const struct {
	uint8_t type;
	int (*build)(uint32_t id, const uint8_t *p, size_t len, uint32_t max_frame, struct pd_reply_cursor *cur,
	             struct pd_obuf_list *l);
} builtins[] = {
	{ PD_FT_PING, build_pong },
	{ PD_FT_STATS, build_stats },
	{ PD_FT_KEYS, build_keys },
};

bool pd_reply_is_builtin(uint8_t type)
{
	for (size_t i = 0; i < sizeof(builtins) / sizeof(builtins[0]); i++)
		if (builtins[i].type == type)
			return true;
	return false;
}

int pd_reply_builtin(uint8_t type, uint32_t id, const uint8_t *p, size_t len, uint32_t max_frame,
                     struct pd_reply_cursor *cur, struct pd_obuf_list *out)
{
	for (size_t i = 0; i < sizeof(builtins) / sizeof(builtins[0]); i++)
		if (builtins[i].type == type) {
			int r = builtins[i].build(id, p, len, max_frame, cur, out);
			return r < 0 ? -ENOMEM : r;
		}
	return -ENOENT;
}

void pd_reply_cursor_clear(struct pd_reply_cursor *cur)
{
	cur->keys = pd_keyinfos_unref(cur->keys);
	cur->next = 0;
}
