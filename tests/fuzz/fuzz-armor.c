/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the ASCII armor decoder on its own (lib/armor.c): hostile
 * text, decoded in hostile slices.  The first two octets seed the slicing;
 * the rest is the input.  Beyond "no crash, no leak" it checks:
 *
 *   - one call with the whole input and room for everything (eof) finishes:
 *     the END line (1) or an error, never "call again";
 *   - decoding in random slices of input and of output room, down to one
 *     octet each, gives the same verdict, and on success the same octets,
 *     the same input consumed (text after END stays unconsumed), the same
 *     CRC verdict and the same BEGIN kind; a call never uses more input or
 *     writes more output than it was given, and the decoder never stalls
 *     while it has input and room;
 *   - pd_armor_detect on a prefix that is already decided says what it says
 *     on the whole input;
 *   - pd_armor_decode_all of armored input that decodes begins with the
 *     octets of its first block.
 *
 * libFuzzer: contrib/fuzz.sh builds it (tests/fuzz/meson.build, with
 * -Dc_args=-fsanitize=fuzzer-no-link); fuzz-main.c replays
 * tests/fuzz/corpus/armor/ as a meson test.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "armor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "fuzz-armor: check failed: %s\n", #x); abort(); } } while (0)

struct result {
	int r;
	uint8_t *out;
	size_t out_len, used;
	int crc_state;
	uint8_t kind;
};

static uint32_t next(uint32_t *s)
{
	*s = *s * 1664525u + 1013904223u;
	return *s >> 8;
}

/* The whole input in one call, with room for all it can yield. */
static void decode_whole(const uint8_t *in, size_t len, struct result *res)
{
	struct pd_armor a;
	size_t cap = len / 4 * 3 + 3;
	res->out = malloc(cap);
	CHECK(res->out);
	pd_armor_init(&a);
	res->used = res->out_len = 0; /* ret_* stay untouched on failure */
	res->r = pd_armor_decode(&a, in, len, &res->used, res->out, cap, &res->out_len, true);
	CHECK(res->used <= len && res->out_len <= cap);
	CHECK(res->r != 0); /* eof and room for everything: it must finish */
	res->crc_state = a.crc_state;
	res->kind = a.kind;
}

/* Slices of 1 to 2^11 octets of input and of 1 to 2^9 of output room, from
 * the seed.  A call that moves nothing is answered with the whole rest and
 * ample room; if that moves nothing either, the decoder stalls. */
static void decode_sliced(const uint8_t *in, size_t len, uint32_t seed, struct result *res)
{
	struct pd_armor a;
	size_t cap = len / 4 * 3 + 3;
	res->out = malloc(cap);
	CHECK(res->out);
	pd_armor_init(&a);
	size_t pos = 0, o = 0;
	bool generous = false;
	int r;
	for (;;) {
		size_t in_n = len - pos, room = cap - o;
		if (!generous) {
			size_t want = 1 + next(&seed) % ((size_t)1 << (next(&seed) % 12));
			size_t ocap = 1 + next(&seed) % ((size_t)1 << (next(&seed) % 10));
			in_n = in_n < want ? in_n : want;
			room = room < ocap ? room : ocap;
		}
		bool eof = pos + in_n == len;
		size_t used = 0, n = 0;
		r = pd_armor_decode(&a, in + pos, in_n, &used, res->out + o, room, &n, eof);
		CHECK(used <= in_n && n <= room);
		pos += used;
		o += n;
		if (r != 0)
			break;
		if (used || n) {
			generous = false;
			continue;
		}
		CHECK(!generous); /* no progress with all the input and room there is */
		generous = true;
	}
	res->r = r;
	res->out_len = o;
	res->used = pos;
	res->crc_state = a.crc_state;
	res->kind = a.kind;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2 || size > (1u << 20))
		return 0;
	uint32_t seed = (uint32_t)data[0] << 8 | data[1];
	const uint8_t *in = data + 2;
	size_t len = size - 2;

	struct result whole, sliced;
	decode_whole(in, len, &whole);
	decode_sliced(in, len, seed, &sliced);
	CHECK(whole.r == sliced.r);
	if (whole.r == 1) {
		CHECK(whole.out_len == sliced.out_len);
		CHECK(memcmp(whole.out, sliced.out, whole.out_len) == 0);
		CHECK(whole.used == sliced.used);
		CHECK(whole.crc_state == sliced.crc_state);
		CHECK(whole.kind == sliced.kind);
	}

	/* Detection: a decided prefix does not change its mind. */
	int d = pd_armor_detect(in, len, true);
	CHECK(d == 0 || d == 1 || d == PD_ENOTPGP);
	for (size_t k = 0; k < len; k = k ? k * 2 : 1) {
		int dk = pd_armor_detect(in, k, false);
		CHECK(dk == PD_EAGAIN || dk == d);
	}

	uint8_t *all = NULL;
	size_t all_len = 0;
	int ra = pd_armor_decode_all(in, len, &all, &all_len);
	if (ra == 0 && d == 1) {
		CHECK(whole.r == 1);
		CHECK(all_len >= whole.out_len && memcmp(all, whole.out, whole.out_len) == 0);
	}
	if (ra == 0 && d == 0)
		CHECK(all_len == len && memcmp(all, in, len) == 0);
	free(all);
	free(whole.out);
	free(sliced.out);
	return 0;
}
