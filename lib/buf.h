/* SPDX-License-Identifier: MIT */
/*
 * pd_buf: the one buffer type for bytes in flight (ciphertext, plaintext,
 * passwords), in the engine and the daemon alike.  A bounded array with a
 * start and an end: data is appended at the end (pd_buf_tail() /
 * pd_buf_commit()) and taken from the start (pd_buf_consume()); compaction
 * moves the data to the front and wipes what it leaves behind; hw (the
 * high-water mark) bounds what was ever written, so freeing or wiping
 * touches only that.  Consumed octets are not wiped one by one (the hot
 * path stays a pointer move); they are overwritten by compaction or wiped
 * when the buffer is freed or reset, which is always done with
 * pd_buf_wipe() / pd_buf_free().  Header only: no linkage, loop and worker
 * threads alike (one owner at a time).
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct pd_buf {
	uint8_t *d;
	size_t cap, start, end, hw;
};

/** Allocate cap octets; 0 or -1 (no memory). */
static inline int pd_buf_init(struct pd_buf *b, size_t cap)
{
	*b = (struct pd_buf){ .d = malloc(cap ? cap : 1), .cap = cap };
	return b->d ? 0 : -1;
}

/** Wipe what was ever written and forget the data; the storage stays. */
static inline void pd_buf_wipe(struct pd_buf *b)
{
	if (b->d && b->hw)
		explicit_bzero(b->d, b->hw);
	b->start = b->end = b->hw = 0;
}

/** Wipe and free; the buffer is empty (and may be initialised again). */
static inline void pd_buf_free(struct pd_buf *b)
{
	pd_buf_wipe(b);
	free(b->d);
	*b = (struct pd_buf){ 0 };
}

static inline size_t pd_buf_len(const struct pd_buf *b) { return b->end - b->start; }
static inline const uint8_t *pd_buf_data(const struct pd_buf *b) { return b->d + b->start; }

/** n octets of the data were used. */
static inline void pd_buf_consume(struct pd_buf *b, size_t n)
{
	b->start += n;
	if (b->start == b->end)
		b->start = b->end = 0;
}

/** Move the data to the front; the octets it leaves behind are wiped. */
static inline void pd_buf_compact(struct pd_buf *b)
{
	if (!b->start)
		return;
	size_t n = b->end - b->start;
	memmove(b->d, b->d + b->start, n);
	explicit_bzero(b->d + n, b->end - n);
	b->start = 0;
	b->end = n;
}

/** Free room at the end, compacting first when the free tail is below half
 * the buffer. */
static inline size_t pd_buf_room(struct pd_buf *b)
{
	if (b->start && b->cap - b->end < b->cap / 2)
		pd_buf_compact(b);
	return b->cap - b->end;
}

/** Room at the end without compacting. */
static inline size_t pd_buf_tail_room(const struct pd_buf *b) { return b->cap - b->end; }
static inline uint8_t *pd_buf_tail(struct pd_buf *b) { return b->d + b->end; }

/** n octets were written at pd_buf_tail(). */
static inline void pd_buf_commit(struct pd_buf *b, size_t n)
{
	b->end += n;
	if (b->end > b->hw)
		b->hw = b->end;
}

/** Append n octets (the caller checked the room). */
static inline void pd_buf_put(struct pd_buf *b, const void *p, size_t n)
{
	if (!n) /* nothing; the buffer may not even exist yet */
		return;
	memcpy(pd_buf_tail(b), p, n);
	pd_buf_commit(b, n);
}

/** Exchange two buffers of one owner (a hand-off without a copy). */
static inline void pd_buf_swap(struct pd_buf *a, struct pd_buf *b)
{
	struct pd_buf t = *a;
	*a = *b;
	*b = t;
}

/** Move to storage of want octets (doubling from cap, at most max); the old
 * storage is wiped.  false when it stays as it is (no memory, or at max). */
static inline bool pd_buf_grow(struct pd_buf *b, size_t want, size_t max)
{
	size_t ncap = b->cap ? b->cap : 1;
	while (ncap < want && ncap < max)
		ncap *= 2;
	if (ncap > max)
		ncap = max;
	if (ncap <= b->cap)
		return false;
	uint8_t *n = malloc(ncap);
	if (!n)
		return false;
	size_t len = pd_buf_len(b);
	memcpy(n, pd_buf_data(b), len);
	pd_buf_free(b);
	*b = (struct pd_buf){ .d = n, .cap = ncap, .start = 0, .end = len, .hw = len };
	return true;
}
