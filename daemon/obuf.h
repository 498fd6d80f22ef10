/* SPDX-License-Identifier: MIT */
/*
 * pd_obuf: one heap buffer of whole encoded frames on their way to the
 * socket.  Built by a request (on a worker for plaintext, on the loop for
 * everything else), then owned by the session's writer until its write
 * callback.  The uv_write_t lives inside, so a write costs no allocation.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h> /* explicit_bzero */
#include <uv.h>

struct pd_obuf {
	struct pd_obuf *next;
	uv_write_t wr;
	void *owner;  /* the session while being written */
	size_t len;   /* bytes used */
	size_t cap;
	uint8_t data[];
};

struct pd_obuf_list { /* public, by value */
	struct pd_obuf *head, *tail;
	size_t bytes; /* the memory of its buffers: pd_obuf_held() */
};

static inline struct pd_obuf *pd_obuf_new(size_t cap)
{
	struct pd_obuf *o = malloc(sizeof(*o) + cap);
	if (o) {
		o->next = NULL;
		o->owner = NULL;
		o->len = 0;
		o->cap = cap;
	}
	return o;
}

/** The memory o holds (its allocation, less malloc's own overhead): what
 * a write queue and a list count for it. */
static inline size_t pd_obuf_held(const struct pd_obuf *o) { return sizeof(*o) + o->cap; }

static inline void pd_obuf_push(struct pd_obuf_list *l, struct pd_obuf *o)
{
	o->next = NULL;
	if (l->tail)
		l->tail->next = o;
	else
		l->head = o;
	l->tail = o;
	l->bytes += pd_obuf_held(o);
}

static inline struct pd_obuf *pd_obuf_pop(struct pd_obuf_list *l)
{
	struct pd_obuf *o = l->head;
	if (o) {
		l->head = o->next;
		if (!l->head)
			l->tail = NULL;
		l->bytes -= pd_obuf_held(o);
		o->next = NULL;
	}
	return o;
}

static inline void pd_obuf_free(struct pd_obuf *o);

/** o, of which the octets from *off on are still to go: o itself when they
 * fill at least a quarter of it, else a copy of them in a buffer of their
 * size (o wiped and freed, *off set to 0).  What waits in a write queue
 * then holds about what is left to send, however large the buffer it was
 * built in or however much of it went.  o itself when the copy cannot be
 * made. */
static inline struct pd_obuf *pd_obuf_fit_rest(struct pd_obuf *o, size_t *off)
{
	size_t rest = o->len - *off;
	if (rest >= o->cap / 4)
		return o;
	struct pd_obuf *n = pd_obuf_new(rest);
	if (!n)
		return o;
	memcpy(n->data, o->data + *off, rest);
	n->len = rest;
	pd_obuf_free(o);
	*off = 0;
	return n;
}

/** pd_obuf_fit_rest() of a buffer none of which has gone. */
static inline struct pd_obuf *pd_obuf_fit(struct pd_obuf *o)
{
	size_t off = 0;
	return pd_obuf_fit_rest(o, &off);
}

/** Free one buffer, its bytes (plaintext) wiped first; accepts NULL. */
static inline void pd_obuf_free(struct pd_obuf *o)
{
	if (!o)
		return;
	explicit_bzero(o->data, o->len);
	free(o);
}

/** Free every buffer of the list (plaintext wiped first). */
static inline void pd_obuf_list_clear(struct pd_obuf_list *l)
{
	struct pd_obuf *o;
	while ((o = pd_obuf_pop(l)))
		pd_obuf_free(o);
}
