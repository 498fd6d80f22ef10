/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the frame codec (proto/frame.c): hostile bytes from either
 * side, sliced anywhere.  Beyond "no crash, no leak" it checks that whatever
 * the parsers accept re-encodes to something they parse to the same values,
 * and that the decoder sees the same frames (type, id, payload), the same
 * verdict and the same octets pending at the end whether the stream comes
 * in the fuzzer's slices or in one piece; and that pd_frame_decode_stream,
 * sliced and with a small DATA room, gives the same DATA octets per request
 * and the same other frames, verdict and pending octets.
 *
 * libFuzzer: clang -g -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Iproto -Ilib
 *            tests/fuzz/fuzz-frame.c proto/frame.c proto/status.c
 * Otherwise fuzz-main.c replays tests/fuzz/corpus/frame/ as a meson test.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x) do { if (!(x)) abort(); } while (0)

static void check_frame(const struct pd_frame_hdr *h, const uint8_t *p)
{
	static uint8_t out[PD_FRAME_STRUCT_MAX];
	struct pd_msginfo info, info2;
	struct pd_result res, res2;
	struct pd_hello hello, hello2;
	struct pd_keyinfo key, key2;
	struct pd_key_addrs ka, ka2;
	struct pd_decrypt_req dr, dr2;
	int n;
	switch (h->type) {
	case PD_FT_METADATA:
		if (pd_parse_metadata(p, h->len, &info) == 0) {
			n = pd_frame_encode_metadata(out, sizeof(out), h->id, &info);
			CHECK(n > 0);
			CHECK(pd_parse_metadata(out + PD_FRAME_HDR_LEN, (size_t)n - PD_FRAME_HDR_LEN, &info2) == 0);
			CHECK(info.n_recipients == info2.n_recipients && info.literal_name_len == info2.literal_name_len);
			CHECK(memcmp(info.literal_name, info2.literal_name, info.literal_name_len) == 0);
		}
		break;
	case PD_FT_RESULT:
		if (pd_parse_result(p, h->len, &res, &info) == 0) {
			n = pd_frame_encode_result(out, sizeof(out), h->id, &res, &info);
			CHECK(n > 0);
			CHECK(pd_parse_result(out + PD_FRAME_HDR_LEN, (size_t)n - PD_FRAME_HDR_LEN, &res2, &info2) == 0);
			CHECK(res.status == res2.status && res.bytes_in == res2.bytes_in && res.bytes_out == res2.bytes_out);
			CHECK(strcmp(res.sentence, res2.sentence) == 0 && info.key_fpr_len == info2.key_fpr_len);
		}
		break;
	case PD_FT_HELLO:
		if (pd_parse_hello(p, h->len, PD_FROM_SERVER, &hello) == 0) {
			n = pd_frame_encode_server_hello(out, sizeof(out), &hello);
			CHECK(n > 0);
			CHECK(pd_parse_hello(out + PD_FRAME_HDR_LEN, (size_t)n - PD_FRAME_HDR_LEN, PD_FROM_SERVER, &hello2) == 0);
			CHECK(hello.max_frame == hello2.max_frame && hello.max_message == hello2.max_message);
		}
		if (pd_parse_hello(p, h->len, PD_FROM_CLIENT, &hello) == 0) {
			n = pd_frame_encode_client_hello(out, sizeof(out), &hello);
			CHECK(n > 0);
			CHECK(pd_parse_hello(out + PD_FRAME_HDR_LEN, (size_t)n - PD_FRAME_HDR_LEN, PD_FROM_CLIENT, &hello2) == 0);
			CHECK(hello.version_max == hello2.version_max && strcmp(hello.software, hello2.software) == 0);
		}
		break;
	case PD_FT_KEY:
		if (pd_parse_key(p, h->len, &key, &ka) == 0) {
			char abuf[PD_KEY_ADDRS_MAX * (PD_ADDRESS_MAX + 1)];
			size_t alen = pd_key_addrs_join(&ka, abuf);
			n = pd_frame_encode_key(out, sizeof(out), h->id, &key, abuf, alen);
			CHECK(n > 0);
			CHECK(pd_parse_key(out + PD_FRAME_HDR_LEN, (size_t)n - PD_FRAME_HDR_LEN, &key2, &ka2) == 0);
			CHECK(memcmp(key.fpr, key2.fpr, key.fpr_len) == 0 && key.bits == key2.bits);
			CHECK(ka.n == ka2.n);
			for (size_t i = 0; i < ka.n; i++)
				CHECK(ka.len[i] == ka2.len[i] && memcmp(ka.v[i], ka2.v[i], ka.len[i]) == 0);
		}
		break;
	case PD_FT_DECRYPT:
		if (pd_parse_decrypt(p, h->len, &dr) == 0) {
			n = pd_frame_encode_decrypt(out, sizeof(out), h->id, &dr);
			CHECK(n > 0);
			CHECK(pd_parse_decrypt(out + PD_FRAME_HDR_LEN, (size_t)n - PD_FRAME_HDR_LEN, &dr2) == 0);
			CHECK(dr.flags == dr2.flags && dr.password_len == dr2.password_len);
			CHECK(dr.n_bind == dr2.n_bind && dr.n_bind <= PD_MAX_BIND);
			for (size_t i = 0; i < dr.n_bind; i++) {
				CHECK(dr.bind_len[i] == dr2.bind_len[i] && dr.bind_len[i] >= 1 && dr.bind_len[i] <= PD_ADDRESS_MAX);
				CHECK(memcmp(dr.bind[i], dr2.bind[i], dr.bind_len[i]) == 0);
				(void)pd_bind_value_ok((const char *)dr.bind[i], dr.bind_len[i]);
			}
		}
		break;
	case PD_FT_ERROR:
		(void)pd_parse_error(p, h->len, &res);
		break;
	default:
		break;
	}
}

/* What a decoder made of a stream: frames (and a hash of them), verdict;
 * norm hashes the same with DATA as a byte stream per request (where one
 * DATA frame ends and the next of the same request begins left out). */
struct trace {
	size_t frames, consumed, pending;
	uint64_t hash, norm;
	int verdict;
	bool in_data;
	uint32_t data_id;
};

static void mix(uint64_t *h, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		*h = (*h ^ p[i]) * 0x100000001b3ull; /* FNV-1a */
}

static void record_norm(struct trace *t, const struct pd_frame_hdr *h, const uint8_t *p)
{
	uint8_t hdr[9] = { h->type, (uint8_t)(h->id >> 24), (uint8_t)(h->id >> 16), (uint8_t)(h->id >> 8),
	                   (uint8_t)h->id, (uint8_t)(h->len >> 24), (uint8_t)(h->len >> 16), (uint8_t)(h->len >> 8),
	                   (uint8_t)h->len };
	bool data = h->type == PD_FT_DATA;
	if (!data || !t->in_data || t->data_id != h->id)
		mix(&t->norm, hdr, data ? 5 : sizeof(hdr)); /* DATA: type and id, not the length */
	mix(&t->norm, p, h->len);
	t->in_data = data;
	t->data_id = h->id;
}

static void record(struct trace *t, const struct pd_frame_hdr *h, const uint8_t *p)
{
	uint8_t hdr[9] = { h->type, (uint8_t)(h->id >> 24), (uint8_t)(h->id >> 16), (uint8_t)(h->id >> 8),
	                   (uint8_t)h->id, (uint8_t)(h->len >> 24), (uint8_t)(h->len >> 16), (uint8_t)(h->len >> 8),
	                   (uint8_t)h->len };
	t->frames++;
	mix(&t->hash, hdr, sizeof(hdr));
	mix(&t->hash, p, h->len);
	record_norm(t, h, p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	enum pd_frame_role role = (data[0] & 1) ? PD_FROM_SERVER : PD_FROM_CLIENT;
	size_t slice = 1 + data[1];
	data += 2;
	size -= 2;
	struct trace sliced = { .hash = 0xcbf29ce484222325ull, .norm = 0xcbf29ce484222325ull }, whole = sliced,
	             streamed = sliced;
	struct pd_frame_decoder *d;
	if (pd_frame_decoder_new(&d, role, PD_FRAME_MAX_FLOOR) < 0)
		return 0;

	/* The whole stream in one piece (called again with the rest after each frame). */
	size_t off = 0;
	while (off < size) {
		size_t used;
		struct pd_frame_hdr h;
		const uint8_t *p;
		int r = pd_frame_decode(d, data + off, size - off, &used, &h, &p);
		CHECK(used <= size - off);
		off += used;
		if (r < 0) {
			whole.verdict = r;
			break;
		}
		if (r == 1)
			record(&whole, &h, p);
		else
			CHECK(off == size); /* 0: all of it consumed */
	}
	whole.consumed = off;
	whole.pending = pd_frame_decoder_pending(d);
	pd_frame_decoder_free(d);

	if (pd_frame_decoder_new(&d, role, PD_FRAME_MAX_FLOOR) < 0)
		return 0;
	off = 0;
	while (off < size) {
		size_t len = size - off < slice ? size - off : slice;
		size_t used;
		struct pd_frame_hdr h;
		const uint8_t *p;
		int r = pd_frame_decode(d, data + off, len, &used, &h, &p);
		CHECK(used <= len);
		off += used;
		if (r < 0) {
			sliced.verdict = r;
			break;
		}
		if (r == 1) {
			CHECK(h.len <= PD_FRAME_MAX_FLOOR);
			record(&sliced, &h, p);
			check_frame(&h, p);
		} else {
			CHECK(used == len);
		}
	}
	sliced.consumed = off;
	sliced.pending = pd_frame_decoder_pending(d);
	pd_frame_decoder_free(d);

	CHECK(sliced.frames == whole.frames && sliced.hash == whole.hash);
	CHECK(sliced.verdict == whole.verdict);
	if (!whole.verdict)
		CHECK(sliced.pending == whole.pending && sliced.consumed == whole.consumed);

	/* A DATA frame cut short at the end: streamed, what came of its payload
	 * was handed out; whole, it waits in the decoder.  Counted for the
	 * comparison with the streamed trace below. */
	if (!whole.verdict && whole.pending > PD_FRAME_HDR_LEN) {
		const uint8_t *t = data + size - whole.pending;
		if (t[4] == PD_FT_DATA) {
			struct pd_frame_hdr h = { .len = (uint32_t)(whole.pending - PD_FRAME_HDR_LEN), .type = PD_FT_DATA,
			                          .id = ((uint32_t)t[5] << 24) | ((uint32_t)t[6] << 16) | ((uint32_t)t[7] << 8) | t[8] };
			record_norm(&whole, &h, t + PD_FRAME_HDR_LEN);
		}
	}

	/* Streamed: the same slices, DATA handed out at most room octets at a time. */
	size_t room = 1 + (slice * 37) % 300;
	if (pd_frame_decoder_new(&d, role, PD_FRAME_MAX_FLOOR) < 0)
		return 0;
	off = 0;
	while (off < size) {
		size_t len = size - off < slice ? size - off : slice;
		size_t used;
		struct pd_frame_hdr h;
		const uint8_t *p;
		int r = pd_frame_decode_stream(d, data + off, len, room, &used, &h, &p);
		CHECK(used <= len);
		if (r < 0) {
			streamed.verdict = r;
			break;
		}
		if (r == 1) {
			if (h.type == PD_FT_DATA) /* a slice, never copied */
				CHECK(h.len <= room && p >= data + off && p + h.len <= data + off + used);
			record_norm(&streamed, &h, p);
		} else {
			CHECK(used == len);
		}
		off += used;
	}
	streamed.consumed = off;
	streamed.pending = pd_frame_decoder_pending(d);
	pd_frame_decoder_free(d);
	CHECK(streamed.norm == whole.norm && streamed.verdict == whole.verdict);
	if (!whole.verdict)
		CHECK(streamed.pending == whole.pending && streamed.consumed == whole.consumed);
	return 0;
}
