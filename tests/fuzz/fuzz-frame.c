/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the frame codec (proto/frame.c): hostile bytes from either
 * side, sliced anywhere.  Beyond "no crash, no leak" it checks that whatever
 * the parsers accept re-encodes to something they parse to the same values.
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
		if (pd_parse_key(p, h->len, &key) == 0) {
			n = pd_frame_encode_key(out, sizeof(out), h->id, &key);
			CHECK(n > 0);
			CHECK(pd_parse_key(out + PD_FRAME_HDR_LEN, (size_t)n - PD_FRAME_HDR_LEN, &key2) == 0);
			CHECK(memcmp(key.fpr, key2.fpr, key.fpr_len) == 0 && key.bits == key2.bits);
		}
		break;
	case PD_FT_DECRYPT:
		if (pd_parse_decrypt(p, h->len, &dr) == 0) {
			n = pd_frame_encode_decrypt(out, sizeof(out), h->id, &dr);
			CHECK(n > 0);
			CHECK(pd_parse_decrypt(out + PD_FRAME_HDR_LEN, (size_t)n - PD_FRAME_HDR_LEN, &dr2) == 0);
			CHECK(dr.flags == dr2.flags && dr.password_len == dr2.password_len);
		}
		break;
	case PD_FT_ERROR:
		(void)pd_parse_error(p, h->len, &res);
		break;
	default:
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	enum pd_frame_role role = (data[0] & 1) ? PD_FROM_SERVER : PD_FROM_CLIENT;
	size_t slice = 1 + data[1];
	data += 2;
	size -= 2;
	struct pd_frame_decoder *d;
	if (pd_frame_decoder_new(&d, role, PD_FRAME_MAX_FLOOR) < 0)
		return 0;
	size_t off = 0;
	while (off < size) {
		size_t len = size - off < slice ? size - off : slice;
		size_t used;
		struct pd_frame_hdr h;
		const uint8_t *p;
		int r = pd_frame_decode(d, data + off, len, &used, &h, &p);
		CHECK(used <= len);
		off += used;
		if (r < 0)
			break;
		if (r == 1) {
			CHECK(h.len <= PD_FRAME_MAX_FLOOR);
			check_frame(&h, p);
		} else {
			CHECK(used == len);
		}
	}
	pd_frame_decoder_free(d);
	return 0;
}
