/* SPDX-License-Identifier: MIT */
/* Frame codec and status mapping: round trips, any slicing, violations. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "frame.h"
#include "status.h"

/* Decode all of in in slices whose sizes come from next_slice; collect frames. */
struct got {
	int n;
	struct pd_frame_hdr hdr[32];
	uint8_t *payload[32];
};

static void got_free(struct got *g)
{
	for (int i = 0; i < g->n; i++)
		free(g->payload[i]);
	g->n = 0;
}

static int decode_sliced(enum pd_frame_role role, uint32_t max, const uint8_t *in, size_t len,
                         size_t (*next_slice)(size_t pos, void *arg), void *arg, struct got *g)
{
	struct pd_frame_decoder *d = NULL;
	assert_int_equal(pd_frame_decoder_new(&d, role, max), 0);
	size_t pos = 0;
	int r = 0;
	while (pos < len) {
		size_t s = next_slice(pos, arg);
		if (s > len - pos)
			s = len - pos;
		size_t off = 0;
		while (off < s) {
			size_t used;
			struct pd_frame_hdr h;
			const uint8_t *p;
			r = pd_frame_decode(d, in + pos + off, s - off, &used, &h, &p);
			assert_true(used <= s - off);
			off += used;
			if (r < 0)
				goto out;
			if (r == 1) {
				assert_true(g->n < 32);
				g->hdr[g->n] = h;
				g->payload[g->n] = malloc(h.len + 1);
				memcpy(g->payload[g->n], p, h.len);
				g->n++;
			} else {
				assert_int_equal(off, s);
			}
		}
		pos += s;
	}
	r = (int)pd_frame_decoder_pending(d);
out:
	pd_frame_decoder_free(d);
	return r;
}

static size_t slice_all(size_t pos, void *arg) { (void)pos; (void)arg; return SIZE_MAX; }
static size_t slice_one(size_t pos, void *arg) { (void)pos; (void)arg; return 1; }
static size_t slice_split(size_t pos, void *arg)
{
	size_t at = *(size_t *)arg;
	return pos < at ? at - pos : SIZE_MAX;
}
static size_t slice_rand(size_t pos, void *arg)
{
	(void)pos;
	unsigned *seed = arg;
	*seed = *seed * 1103515245u + 12345u;
	return 1 + (*seed >> 16) % 97;
}

static void fill_info(struct pd_msginfo *m)
{
	memset(m, 0, sizeof(*m));
	m->armored = true;
	m->container = 18;
	m->container_version = 2;
	m->sym_algo = 9;
	m->aead_algo = 2;
	m->aead_chunk_log = 10;
	m->pk_algo = 1;
	m->key_fpr_len = 32;
	for (int i = 0; i < 32; i++)
		m->key_fpr[i] = (uint8_t)(0xA0 + i);
	m->n_compression = 2;
	m->compression[0] = 2;
	m->compression[1] = 1;
	m->has_literal = true;
	m->literal_format = 'b';
	memcpy(m->literal_name, "r\xc3\xa9sum\xc3\xa9.txt", 11);
	m->literal_name_len = 11;
	m->literal_date = 1700000000u;
	m->n_recipients = PD_MAX_RECIPIENTS;
	for (int i = 0; i < PD_MAX_RECIPIENTS; i++) {
		struct pd_recipient *r = &m->recipients[i];
		r->version = i % 2 ? 6 : 3;
		r->pk_algo = (uint8_t)(i % 3 ? 1 : 25);
		r->wildcard = i == 5;
		memset(r->keyid, i, 8);
		r->fpr_len = i % 2 ? 32 : 0;
		memset(r->fpr, 0x40 + i, r->fpr_len);
	}
	m->n_recipients_total = 1000;
	m->n_skesk = 2;
	m->n_issuers = PD_MAX_ISSUERS;
	for (int i = 0; i < PD_MAX_ISSUERS; i++)
		memset(m->issuers[i], 0x10 + i, 8);
	m->n_signatures = 3;
}

static void assert_info_equal(const struct pd_msginfo *a, const struct pd_msginfo *b)
{
	assert_int_equal(a->armored, b->armored);
	assert_int_equal(a->container, b->container);
	assert_int_equal(a->container_version, b->container_version);
	assert_int_equal(a->sym_algo, b->sym_algo);
	assert_int_equal(a->aead_algo, b->aead_algo);
	assert_int_equal(a->aead_chunk_log, b->aead_chunk_log);
	assert_int_equal(a->pk_algo, b->pk_algo);
	assert_int_equal(a->key_fpr_len, b->key_fpr_len);
	assert_memory_equal(a->key_fpr, b->key_fpr, a->key_fpr_len);
	assert_int_equal(a->n_compression, b->n_compression);
	assert_memory_equal(a->compression, b->compression, a->n_compression);
	assert_int_equal(a->has_literal, b->has_literal);
	assert_int_equal(a->literal_format, b->literal_format);
	assert_int_equal(a->literal_name_len, b->literal_name_len);
	assert_memory_equal(a->literal_name, b->literal_name, a->literal_name_len);
	assert_int_equal(a->literal_date, b->literal_date);
	assert_int_equal(a->n_recipients, b->n_recipients);
	for (size_t i = 0; i < a->n_recipients; i++) {
		assert_int_equal(a->recipients[i].version, b->recipients[i].version);
		assert_int_equal(a->recipients[i].pk_algo, b->recipients[i].pk_algo);
		assert_int_equal(a->recipients[i].wildcard, b->recipients[i].wildcard);
		assert_memory_equal(a->recipients[i].keyid, b->recipients[i].keyid, 8);
		assert_int_equal(a->recipients[i].fpr_len, b->recipients[i].fpr_len);
		assert_memory_equal(a->recipients[i].fpr, b->recipients[i].fpr, a->recipients[i].fpr_len);
	}
	assert_int_equal(a->n_recipients_total, b->n_recipients_total);
	assert_int_equal(a->n_skesk, b->n_skesk);
	assert_int_equal(a->n_issuers, b->n_issuers);
	assert_memory_equal(a->issuers, b->issuers, 8 * a->n_issuers);
	assert_int_equal(a->n_signatures, b->n_signatures);
}

/* A client stream and a server stream exercising every frame type. */
static size_t client_stream(uint8_t *buf, size_t cap)
{
	size_t n = 0;
	int r;
	struct pd_hello h = { .version_min = 1, .version_max = 3 };
	strcpy(h.software, "test-client/1");
	r = pd_frame_encode_client_hello(buf + n, cap - n, &h);
	assert_true(r > 0); n += (size_t)r;
	struct pd_decrypt_req d = { .flags = PD_DF_VERIFIED_ONLY | PD_DF_WANT_METADATA,
	                            .password = (const uint8_t *)"s3cr\0t", .password_len = 6,
	                            .size_hint = 0x0102030405060708ull, .has_size_hint = true };
	r = pd_frame_encode_decrypt(buf + n, cap - n, 7, &d);
	assert_true(r > 0); n += (size_t)r;
	uint8_t data[3000];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 7);
	r = pd_frame_encode(buf + n, cap - n, PD_FT_DATA, 7, data, sizeof(data));
	assert_int_equal(r, PD_FRAME_HDR_LEN + 3000); n += (size_t)r;
	r = pd_frame_encode(buf + n, cap - n, PD_FT_DATA, 7, "", 0);
	assert_int_equal(r, PD_FRAME_HDR_LEN); n += (size_t)r;
	r = pd_frame_encode(buf + n, cap - n, PD_FT_END, 7, NULL, 0);
	assert_true(r > 0); n += (size_t)r;
	r = pd_frame_encode(buf + n, cap - n, PD_FT_PING, 8, "abc", 3);
	assert_true(r > 0); n += (size_t)r;
	r = pd_frame_encode(buf + n, cap - n, PD_FT_STATS, 9, NULL, 0);
	assert_true(r > 0); n += (size_t)r;
	r = pd_frame_encode(buf + n, cap - n, PD_FT_KEYS, 0xFFFFFFFFu, NULL, 0);
	assert_true(r > 0); n += (size_t)r;
	return n;
}

static void check_client_frames(const struct got *g)
{
	assert_int_equal(g->n, 8);
	static const uint8_t types[] = { PD_FT_HELLO, PD_FT_DECRYPT, PD_FT_DATA, PD_FT_DATA, PD_FT_END,
	                                 PD_FT_PING, PD_FT_STATS, PD_FT_KEYS };
	static const uint32_t ids[] = { 0, 7, 7, 7, 7, 8, 9, 0xFFFFFFFFu };
	for (int i = 0; i < 8; i++) {
		assert_int_equal(g->hdr[i].type, types[i]);
		assert_int_equal(g->hdr[i].id, ids[i]);
	}
	struct pd_hello h;
	assert_int_equal(pd_parse_hello(g->payload[0], g->hdr[0].len, PD_FROM_CLIENT, &h), 0);
	assert_int_equal(h.version_min, 1);
	assert_int_equal(h.version_max, 3);
	assert_string_equal(h.software, "test-client/1");
	struct pd_decrypt_req d;
	assert_int_equal(pd_parse_decrypt(g->payload[1], g->hdr[1].len, &d), 0);
	assert_int_equal(d.flags, PD_DF_VERIFIED_ONLY | PD_DF_WANT_METADATA);
	assert_int_equal(d.password_len, 6);
	assert_memory_equal(d.password, "s3cr\0t", 6);
	assert_true(d.has_size_hint);
	assert_true(d.size_hint == 0x0102030405060708ull);
	assert_int_equal(g->hdr[2].len, 3000);
	for (size_t i = 0; i < 3000; i++)
		assert_int_equal(g->payload[2][i], (uint8_t)(i * 7));
	assert_int_equal(g->hdr[3].len, 0);
	assert_int_equal(g->hdr[5].len, 3);
	assert_memory_equal(g->payload[5], "abc", 3);
}

static void test_client_roundtrip_any_slicing(void **state)
{
	(void)state;
	static uint8_t buf[16384];
	size_t n = client_stream(buf, sizeof(buf));
	struct got g = { 0 };

	assert_int_equal(decode_sliced(PD_FROM_CLIENT, PD_FRAME_MAX_DEFAULT, buf, n, slice_all, NULL, &g), 0);
	check_client_frames(&g);
	got_free(&g);
	assert_int_equal(decode_sliced(PD_FROM_CLIENT, PD_FRAME_MAX_DEFAULT, buf, n, slice_one, NULL, &g), 0);
	check_client_frames(&g);
	got_free(&g);
	/* Every two-slice split point. */
	for (size_t at = 1; at < n; at++) {
		assert_int_equal(decode_sliced(PD_FROM_CLIENT, PD_FRAME_MAX_DEFAULT, buf, n, slice_split, &at, &g), 0);
		check_client_frames(&g);
		got_free(&g);
	}
	for (unsigned seed = 1; seed < 200; seed++) {
		unsigned s = seed;
		assert_int_equal(decode_sliced(PD_FROM_CLIENT, PD_FRAME_MAX_DEFAULT, buf, n, slice_rand, &s, &g), 0);
		check_client_frames(&g);
		got_free(&g);
	}
}

static void test_server_roundtrip(void **state)
{
	(void)state;
	static uint8_t buf[65536];
	size_t n = 0;
	int r;
	struct pd_hello h = { .version_min = 1, .version_max = 1, .max_frame = 65536,
	                      .max_message = 1ull << 40, .max_inflight = 16 };
	strcpy(h.software, "pgpdecd/0.1.0");
	r = pd_frame_encode_server_hello(buf + n, sizeof(buf) - n, &h);
	assert_true(r > 0); n += (size_t)r;
	struct pd_msginfo info;
	fill_info(&info);
	r = pd_frame_encode_metadata(buf + n, sizeof(buf) - n, 42, &info);
	assert_true(r > 0 && r <= PD_FRAME_STRUCT_MAX); n += (size_t)r;
	r = pd_frame_encode(buf + n, sizeof(buf) - n, PD_FT_DATA, 42, "hello", 5);
	assert_true(r > 0); n += (size_t)r;
	struct pd_result res = { .status = PD_ST_INTEGRITY, .integrity = PD_INTEGRITY_NONE,
	                         .bytes_in = 123456789012ull, .bytes_out = 5 };
	strcpy(res.errname, "EINTEGRITY");
	memset(res.sentence, 'x', PD_SENTENCE_MAX);
	res.sentence[PD_SENTENCE_MAX] = 0;
	r = pd_frame_encode_result(buf + n, sizeof(buf) - n, 42, &res, &info);
	assert_true(r > 0 && r <= PD_FRAME_STRUCT_MAX); n += (size_t)r;
	r = pd_frame_encode(buf + n, sizeof(buf) - n, PD_FT_PONG, 43, "abc", 3);
	assert_true(r > 0); n += (size_t)r;
	struct pd_keyinfo k = { .version = 4, .pk_algo = 18, .bits = 256, .fpr_len = 20,
	                        .primary_fpr_len = 20, .created = 1600000000u };
	memset(k.fpr, 0x11, 20);
	memset(k.primary_fpr, 0x22, 20);
	memset(k.keyid, 0x33, 8);
	strcpy(k.curve, "Curve25519");
	static const char addrs[] = "a@b.example\0bad\nline@x\0";
	r = pd_frame_encode_key(buf + n, sizeof(buf) - n, 44, &k, addrs, sizeof(addrs) - 1);
	assert_true(r > 0); n += (size_t)r;
	r = pd_frame_encode_error(buf + n, sizeof(buf) - n, PD_ST_PROTOCOL, "EPROTO", "bad frame");
	assert_true(r > 0); n += (size_t)r;

	struct got g = { 0 };
	unsigned seed = 99;
	assert_int_equal(decode_sliced(PD_FROM_SERVER, 65536, buf, n, slice_rand, &seed, &g), 0);
	assert_int_equal(g.n, 7);

	struct pd_hello h2;
	assert_int_equal(pd_parse_hello(g.payload[0], g.hdr[0].len, PD_FROM_SERVER, &h2), 0);
	assert_int_equal(h2.version_min, 1);
	assert_int_equal(h2.max_frame, 65536);
	assert_true(h2.max_message == 1ull << 40);
	assert_int_equal(h2.max_inflight, 16);
	assert_string_equal(h2.software, "pgpdecd/0.1.0");

	struct pd_msginfo m2;
	assert_int_equal(g.hdr[1].type, PD_FT_METADATA);
	assert_int_equal(pd_parse_metadata(g.payload[1], g.hdr[1].len, &m2), 0);
	assert_info_equal(&info, &m2);

	assert_int_equal(g.hdr[3].type, PD_FT_RESULT);
	struct pd_result res2;
	assert_int_equal(pd_parse_result(g.payload[3], g.hdr[3].len, &res2, &m2), 0);
	assert_int_equal(res2.status, PD_ST_INTEGRITY);
	assert_true(res2.bytes_in == 123456789012ull);
	assert_true(res2.bytes_out == 5);
	assert_string_equal(res2.errname, "EINTEGRITY");
	assert_string_equal(res2.sentence, res.sentence);
	assert_info_equal(&info, &m2);
	/* Without info the metadata TLVs are still skipped cleanly. */
	assert_int_equal(pd_parse_result(g.payload[3], g.hdr[3].len, &res2, NULL), 0);

	struct pd_keyinfo k2;
	struct pd_key_addrs ka;
	assert_int_equal(pd_parse_key(g.payload[5], g.hdr[5].len, &k2, &ka), 0);
	assert_int_equal(ka.n, 2);
	assert_int_equal(ka.len[0], 11);
	assert_memory_equal(ka.v[0], "a@b.example", 11);
	assert_memory_equal(ka.v[1], "bad?line@x", 10); /* one line of text, always */
	assert_int_equal(k2.pk_algo, 18);
	assert_int_equal(k2.bits, 256);
	assert_int_equal(k2.created, 1600000000u);
	assert_memory_equal(k2.fpr, k.fpr, 20);
	assert_memory_equal(k2.primary_fpr, k.primary_fpr, 20);
	assert_memory_equal(k2.keyid, k.keyid, 8);
	assert_string_equal(k2.curve, "Curve25519");

	struct pd_result e;
	assert_int_equal(pd_parse_error(g.payload[6], g.hdr[6].len, &e), 0);
	assert_int_equal(e.status, PD_ST_PROTOCOL);
	assert_string_equal(e.errname, "EPROTO");
	assert_string_equal(e.sentence, "bad frame");
	got_free(&g);
}

/* Known bytes, so the layout in PROTOCOL.md is pinned down. */
static void test_wire_layout(void **state)
{
	(void)state;
	uint8_t b[64];
	int r = pd_frame_encode(b, sizeof(b), PD_FT_DATA, 0x01020304u, "xy", 2);
	static const uint8_t want[] = { 0, 0, 0, 2, 0x11, 1, 2, 3, 4, 'x', 'y' };
	assert_int_equal(r, sizeof(want));
	assert_memory_equal(b, want, sizeof(want));
	struct pd_hello h = { .version_min = 1, .version_max = 1 };
	r = pd_frame_encode_client_hello(b, sizeof(b), &h);
	static const uint8_t hello[] = { 0, 0, 0, 8, 0x01, 0, 0, 0, 0, 'P', 'G', 'P', 'D', 0, 1, 0, 1 };
	assert_int_equal(r, sizeof(hello));
	assert_memory_equal(b, hello, sizeof(hello));
	/* Too small an output buffer. */
	assert_int_equal(pd_frame_encode(b, 10, PD_FT_DATA, 1, "xy", 2), -ENOBUFS);
	assert_int_equal(pd_frame_encode(b, 4, PD_FT_END, 1, NULL, 0), -ENOBUFS);
}

static int decode_once(enum pd_frame_role role, uint32_t max, const uint8_t *in, size_t len,
                       struct pd_frame_decoder **ret_d)
{
	struct pd_frame_decoder *d = NULL;
	assert_int_equal(pd_frame_decoder_new(&d, role, max), 0);
	size_t used;
	struct pd_frame_hdr h;
	const uint8_t *p;
	int r = pd_frame_decode(d, in, len, &used, &h, &p);
	if (ret_d)
		*ret_d = d;
	else
		pd_frame_decoder_free(d);
	return r;
}

static void test_oversize(void **state)
{
	(void)state;
	uint8_t hdr[PD_FRAME_HDR_LEN];
	struct pd_frame_decoder *d;
	/* The header alone is enough to refuse: nothing is buffered for it. */
	pd_frame_put_hdr(hdr, PD_FT_DATA, 1, PD_FRAME_MAX_FLOOR + 1);
	assert_int_equal(decode_once(PD_FROM_CLIENT, PD_FRAME_MAX_FLOOR, hdr, sizeof(hdr), &d), -EMSGSIZE);
	assert_non_null(strstr(pd_frame_decoder_detail(d), "exceeds"));
	/* Sticky: more input does not revive it. */
	size_t used;
	struct pd_frame_hdr h;
	const uint8_t *p;
	uint8_t ok[PD_FRAME_HDR_LEN];
	pd_frame_put_hdr(ok, PD_FT_END, 1, 0);
	assert_int_equal(pd_frame_decode(d, ok, sizeof(ok), &used, &h, &p), -EMSGSIZE);
	assert_int_equal(used, 0);
	pd_frame_decoder_free(d);
	/* Exactly the limit passes. */
	pd_frame_put_hdr(hdr, PD_FT_DATA, 1, PD_FRAME_MAX_FLOOR);
	assert_int_equal(decode_once(PD_FROM_CLIENT, PD_FRAME_MAX_FLOOR, hdr, sizeof(hdr), NULL), 0);
	/* The ceiling wins over a larger configured limit. */
	pd_frame_put_hdr(hdr, PD_FT_DATA, 1, PD_FRAME_MAX_CEILING + 1);
	assert_int_equal(decode_once(PD_FROM_CLIENT, UINT32_MAX, hdr, sizeof(hdr), NULL), -EMSGSIZE);
	pd_frame_put_hdr(hdr, PD_FT_DATA, 1, UINT32_MAX);
	assert_int_equal(decode_once(PD_FROM_SERVER, PD_FRAME_MAX_DEFAULT, hdr, sizeof(hdr), NULL), -EMSGSIZE);
	/* Per-type caps: END has no payload, PING at most 64, HELLO at most 2048. */
	pd_frame_put_hdr(hdr, PD_FT_END, 1, 1);
	assert_int_equal(decode_once(PD_FROM_CLIENT, PD_FRAME_MAX_DEFAULT, hdr, sizeof(hdr), NULL), -EMSGSIZE);
	pd_frame_put_hdr(hdr, PD_FT_PING, 1, PD_PING_MAX + 1);
	assert_int_equal(decode_once(PD_FROM_CLIENT, PD_FRAME_MAX_DEFAULT, hdr, sizeof(hdr), NULL), -EMSGSIZE);
	pd_frame_put_hdr(hdr, PD_FT_HELLO, 0, PD_FRAME_HELLO_MAX + 1);
	assert_int_equal(decode_once(PD_FROM_CLIENT, PD_FRAME_MAX_DEFAULT, hdr, sizeof(hdr), NULL), -EMSGSIZE);
	pd_frame_put_hdr(hdr, PD_FT_DECRYPT, 1, PD_FRAME_STRUCT_MAX + 1);
	assert_int_equal(decode_once(PD_FROM_CLIENT, PD_FRAME_MAX_DEFAULT, hdr, sizeof(hdr), NULL), -EMSGSIZE);
	/* "GET / HTTP/1.1": type '/' is unknown (and the length 1.2 GB). */
	assert_int_equal(decode_once(PD_FROM_CLIENT, PD_FRAME_MAX_DEFAULT, (const uint8_t *)"GET / HTTP/1.1\r\n", 16, NULL),
	                 -EPROTO);
	/* A TLS ClientHello record: 0x16 0x03 0x01 ...: refused at the header too. */
	static const uint8_t tls[] = { 0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc };
	assert_true(decode_once(PD_FROM_CLIENT, PD_FRAME_MAX_DEFAULT, tls, sizeof(tls), NULL) < 0);
	/* Raising the limit after the handshake. */
	assert_int_equal(pd_frame_decoder_new(&d, PD_FROM_SERVER, PD_FRAME_MAX_FLOOR), 0);
	pd_frame_decoder_set_max(d, 1u << 20);
	pd_frame_put_hdr(hdr, PD_FT_DATA, 1, 1u << 20);
	assert_int_equal(pd_frame_decode(d, hdr, sizeof(hdr), &used, &h, &p), 0);
	assert_int_equal(pd_frame_decoder_pending(d), PD_FRAME_HDR_LEN);
	pd_frame_decoder_free(d);
}

static void test_truncated(void **state)
{
	(void)state;
	uint8_t buf[PD_FRAME_STRUCT_MAX];
	struct pd_decrypt_req dr = { .flags = 0 };
	int n = pd_frame_encode_decrypt(buf, sizeof(buf), 3, &dr);
	assert_int_equal(n, PD_FRAME_HDR_LEN + 4);
	/* Every proper prefix leaves a pending, incomplete frame. */
	for (int cut = 1; cut < n; cut++) {
		struct got g = { 0 };
		int pending = decode_sliced(PD_FROM_CLIENT, PD_FRAME_MAX_DEFAULT, buf, (size_t)cut, slice_one, NULL, &g);
		assert_int_equal(g.n, 0);
		assert_int_equal(pending, cut);
	}
	/* Payload parsers refuse short or cut payloads. */
	struct pd_result res;
	struct pd_msginfo info;
	struct pd_hello h;
	struct pd_keyinfo k;
	uint8_t p[64] = { 0 };
	assert_int_equal(pd_parse_result(p, 19, &res, &info), -EPROTO);
	assert_int_equal(pd_parse_decrypt(p, 3, &dr), -EPROTO);
	assert_int_equal(pd_parse_error(p, 1, &res), -EPROTO);
	assert_int_equal(pd_parse_key(p, 7, &k, NULL), -EPROTO);
	memcpy(p, "PGPD\0\1\0\1", 8);
	assert_int_equal(pd_parse_hello(p, 8, PD_FROM_CLIENT, &h), 0);
	assert_int_equal(pd_parse_hello(p, 7, PD_FROM_CLIENT, &h), -EPROTO);
	assert_int_equal(pd_parse_hello(p, 8, PD_FROM_SERVER, &h), -EPROTO);
	/* TLV running past the payload. */
	static const uint8_t cut_tlv[] = { PD_T_SYM_ALGO, 0, 2, 9 };
	assert_int_equal(pd_parse_metadata(cut_tlv, sizeof(cut_tlv), &info), -EPROTO);
	assert_int_equal(pd_parse_metadata(cut_tlv, 2, &info), -EPROTO);
	/* Wrong fixed lengths. */
	static const uint8_t bad_len[] = { PD_T_LITERAL_DATE, 0, 3, 1, 2, 3 };
	assert_int_equal(pd_parse_metadata(bad_len, sizeof(bad_len), &info), -EPROTO);
	static const uint8_t bad_fpr[] = { PD_T_KEY_FPR, 0, 1, 1 };
	assert_int_equal(pd_parse_metadata(bad_fpr, sizeof(bad_fpr), &info), -EPROTO);
}

static void test_unknown_and_misdirected(void **state)
{
	(void)state;
	uint8_t hdr[PD_FRAME_HDR_LEN];
	struct pd_frame_decoder *d;
	pd_frame_put_hdr(hdr, 0x7f, 1, 0);
	assert_int_equal(decode_once(PD_FROM_CLIENT, PD_FRAME_MAX_DEFAULT, hdr, sizeof(hdr), &d), -EPROTO);
	assert_non_null(strstr(pd_frame_decoder_detail(d), "unknown frame type 0x7f"));
	pd_frame_decoder_free(d);
	pd_frame_put_hdr(hdr, 0x00, 1, 0);
	assert_int_equal(decode_once(PD_FROM_SERVER, PD_FRAME_MAX_DEFAULT, hdr, sizeof(hdr), NULL), -EPROTO);
	/* Server frames from a client and client frames from a server. */
	static const uint8_t server_only[] = { PD_FT_METADATA, PD_FT_RESULT, PD_FT_PONG, PD_FT_KEY };
	static const uint8_t client_only[] = { PD_FT_DECRYPT, PD_FT_END, PD_FT_PING, PD_FT_STATS, PD_FT_KEYS };
	for (size_t i = 0; i < sizeof(server_only); i++) {
		pd_frame_put_hdr(hdr, server_only[i], 1, 0);
		assert_int_equal(decode_once(PD_FROM_CLIENT, PD_FRAME_MAX_DEFAULT, hdr, sizeof(hdr), NULL), -EPROTO);
		assert_int_equal(decode_once(PD_FROM_SERVER, PD_FRAME_MAX_DEFAULT, hdr, sizeof(hdr), NULL), 1);
	}
	for (size_t i = 0; i < sizeof(client_only); i++) {
		pd_frame_put_hdr(hdr, client_only[i], 1, 0);
		assert_int_equal(decode_once(PD_FROM_SERVER, PD_FRAME_MAX_DEFAULT, hdr, sizeof(hdr), NULL), -EPROTO);
		assert_int_equal(decode_once(PD_FROM_CLIENT, PD_FRAME_MAX_DEFAULT, hdr, sizeof(hdr), NULL), 1);
	}
	/* Request id rules. */
	pd_frame_put_hdr(hdr, PD_FT_DATA, 0, 0);
	assert_int_equal(decode_once(PD_FROM_CLIENT, PD_FRAME_MAX_DEFAULT, hdr, sizeof(hdr), NULL), -EPROTO);
	pd_frame_put_hdr(hdr, PD_FT_HELLO, 5, 0);
	assert_int_equal(decode_once(PD_FROM_CLIENT, PD_FRAME_MAX_DEFAULT, hdr, sizeof(hdr), NULL), -EPROTO);
	pd_frame_put_hdr(hdr, PD_FT_ERROR, 5, 0);
	assert_int_equal(decode_once(PD_FROM_SERVER, PD_FRAME_MAX_DEFAULT, hdr, sizeof(hdr), NULL), -EPROTO);
	/* Unknown DECRYPT flags and critical TLVs are refused; non-critical skipped. */
	struct pd_decrypt_req dr;
	static const uint8_t flag4[] = { 0, 0, 0, 8 }; /* 4 is WANT_SESSION_KEY */
	assert_int_equal(pd_parse_decrypt(flag4, sizeof(flag4), &dr), -EPROTO);
	static const uint8_t crit[] = { 0, 0, 0, 1, 0x86, 0, 1, 7 }; /* 0x85 is BIND */
	assert_int_equal(pd_parse_decrypt(crit, sizeof(crit), &dr), -EPROTO);
	static const uint8_t noncrit[] = { 0, 0, 0, 1, 0x65, 0, 1, 7, PD_T_PASSWORD, 0, 2, 'p', 'w' };
	assert_int_equal(pd_parse_decrypt(noncrit, sizeof(noncrit), &dr), 0);
	assert_int_equal(dr.flags, PD_DF_VERIFIED_ONLY);
	assert_int_equal(dr.password_len, 2);
	static const uint8_t twopw[] = { 0, 0, 0, 0, PD_T_PASSWORD, 0, 1, 'a', PD_T_PASSWORD, 0, 1, 'b' };
	assert_int_equal(pd_parse_decrypt(twopw, sizeof(twopw), &dr), -EPROTO);
	/* Embedded NUL in a text field. */
	struct pd_result res;
	static const uint8_t nul[] = { 0, 10, PD_T_SENTENCE, 0, 3, 'a', 0, 'b' };
	assert_int_equal(pd_parse_error(nul, sizeof(nul), &res), -EPROTO);
	/* Server HELLO with limits out of range. */
	uint8_t b[64];
	struct pd_hello h = { .version_min = 1, .max_frame = 1024, .max_inflight = 1 }, h2;
	int n = pd_frame_encode_server_hello(b, sizeof(b), &h);
	assert_true(n > 0);
	assert_int_equal(pd_parse_hello(b + PD_FRAME_HDR_LEN, (size_t)n - PD_FRAME_HDR_LEN, PD_FROM_SERVER, &h2), -EPROTO);
}

static void test_garbage(void **state)
{
	(void)state;
	/* Random streams: the decoder must end in an error or in frames that the
	 * parsers accept or refuse, never crash, and never consume past the input. */
	uint8_t buf[4096];
	unsigned seed = 12345;
	int errors = 0, frames = 0;
	for (int iter = 0; iter < 3000; iter++) {
		size_t len = 1 + (size_t)(iter * 37) % sizeof(buf);
		for (size_t i = 0; i < len; i++) {
			seed = seed * 1103515245u + 12345u;
			buf[i] = (uint8_t)(seed >> 16);
		}
		/* Make some headers plausible so payload parsers get exercised. */
		if (iter % 2) {
			static const uint8_t types[] = { PD_FT_HELLO, PD_FT_METADATA, PD_FT_RESULT, PD_FT_KEY, PD_FT_ERROR };
			uint8_t t = types[iter % 5];
			uint32_t plen = (uint32_t)((len - PD_FRAME_HDR_LEN < 2000 ? len - PD_FRAME_HDR_LEN : 2000));
			if (len > PD_FRAME_HDR_LEN)
				pd_frame_put_hdr(buf, t, t == PD_FT_HELLO || t == PD_FT_ERROR ? 0 : 1, plen);
		}
		struct pd_frame_decoder *d;
		assert_int_equal(pd_frame_decoder_new(&d, PD_FROM_SERVER, PD_FRAME_MAX_DEFAULT), 0);
		size_t off = 0;
		while (off < len) {
			size_t used;
			struct pd_frame_hdr h;
			const uint8_t *p;
			int r = pd_frame_decode(d, buf + off, len - off, &used, &h, &p);
			assert_true(used <= len - off);
			off += used;
			if (r < 0) {
				errors++;
				break;
			}
			if (r == 1) {
				frames++;
				struct pd_msginfo info;
				struct pd_result res;
				struct pd_hello hh;
				struct pd_keyinfo k;
				switch (h.type) {
				case PD_FT_HELLO: (void)pd_parse_hello(p, h.len, PD_FROM_SERVER, &hh); break;
				case PD_FT_METADATA: (void)pd_parse_metadata(p, h.len, &info); break;
				case PD_FT_RESULT: (void)pd_parse_result(p, h.len, &res, &info); break;
				case PD_FT_KEY: (void)pd_parse_key(p, h.len, &k, NULL); break;
				case PD_FT_ERROR: (void)pd_parse_error(p, h.len, &res); break;
				default: break;
				}
			}
		}
		pd_frame_decoder_free(d);
	}
	assert_true(errors > 1000);
	assert_true(frames > 100);
}

/* A payload split across calls is gathered in the decoder's buffer; once the
 * caller has had it (the next call), that copy is wiped.  White-box: p stays
 * readable because the decoder keeps its buffer for the next frame. */
static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* What a hostile server may not make a client hold: an integrity octet
 * outside 0..3, a sentence or name of several lines.  Our own encoder
 * never sends one: a control octet goes out as '?'. */
static void test_result_values_checked(void **state)
{
	(void)state;
	uint8_t buf[PD_FRAME_STRUCT_MAX];
	struct pd_result res = { .status = 13, .integrity = 0 }, got;
	snprintf(res.errname, sizeof(res.errname), "EINTEGRITY");
	snprintf(res.sentence, sizeof(res.sentence), "first line\nforged: OK\r");
	int n = pd_frame_encode_result(buf, sizeof(buf), 7, &res, NULL);
	assert_true(n > 0);
	uint8_t *p = buf + PD_FRAME_HDR_LEN;
	size_t len = (size_t)n - PD_FRAME_HDR_LEN;
	assert_int_equal(pd_parse_result(p, len, &got, NULL), 0);
	assert_string_equal(got.sentence, "first line?forged: OK?");
	/* the same bytes with the line break put back: refused */
	uint8_t *q = memmem(p, len, "line?", 5);
	assert_non_null(q);
	q[4] = '\n';
	assert_int_equal(pd_parse_result(p, len, &got, NULL), -EPROTO);
	q[4] = '?';
	for (unsigned v = 0; v < 256; v++) {
		p[2] = (uint8_t)v;
		assert_int_equal(pd_parse_result(p, len, &got, NULL), v <= 3 ? 0 : -EPROTO);
	}
}

static void test_consumed_payload_wiped(void **state)
{
	(void)state;
	static const char secret[] = "password and plaintext";
	const size_t n = sizeof(secret) - 1;
	uint8_t buf[2 * PD_FRAME_HDR_LEN + 64];
	pd_frame_put_hdr(buf, PD_FT_DATA, 1, (uint32_t)n);
	memcpy(buf + PD_FRAME_HDR_LEN, secret, n);
	pd_frame_put_hdr(buf + PD_FRAME_HDR_LEN + n, PD_FT_DATA, 1, (uint32_t)n);
	struct pd_frame_decoder *d;
	assert_int_equal(pd_frame_decoder_new(&d, PD_FROM_CLIENT, PD_FRAME_MAX_DEFAULT), 0);
	size_t used, split = PD_FRAME_HDR_LEN + 5;
	struct pd_frame_hdr h;
	const uint8_t *p, *p0 = NULL;
	assert_int_equal(pd_frame_decode(d, buf, split, &used, &h, &p), 0);
	assert_int_equal(used, split);
	assert_int_equal(pd_frame_decode(d, buf + split, PD_FRAME_HDR_LEN + n - split, &used, &h, &p0), 1);
	assert_true(p0 < buf || p0 >= buf + sizeof(buf)); /* the decoder's copy */
	assert_memory_equal(p0, secret, n);
	/* Next call, one octet of the next header: the copy is gone. */
	assert_int_equal(pd_frame_decode(d, buf + PD_FRAME_HDR_LEN + n, 1, &used, &h, &p), 0);
	assert_true(all_zero(p0, n));
	pd_frame_decoder_free(d);

	/* A violation after it: still nothing left. */
	assert_int_equal(pd_frame_decoder_new(&d, PD_FROM_CLIENT, PD_FRAME_MAX_DEFAULT), 0);
	assert_int_equal(pd_frame_decode(d, buf, split, &used, &h, &p), 0);
	assert_int_equal(pd_frame_decode(d, buf + split, PD_FRAME_HDR_LEN + n - split, &used, &h, &p0), 1);
	assert_memory_equal(p0, secret, n);
	uint8_t junk[PD_FRAME_HDR_LEN];
	pd_frame_put_hdr(junk, 0x7f, 1, 0);
	assert_int_equal(pd_frame_decode(d, junk, sizeof(junk), &used, &h, &p), -EPROTO);
	assert_true(all_zero(p0, n));
	pd_frame_decoder_free(d);
}

/* pd_frame_decode_stream: DATA payloads come out in slices of at most the
 * room given, pointing into the input (no copy in the decoder), in order;
 * an empty DATA frame is one empty slice; other frames whole; a DATA frame
 * cut short is pending at the end. */
static void test_stream_data(void **state)
{
	(void)state;
	const size_t big = 70000; /* larger than any read buffer of ours */
	size_t cap = 3 * PD_FRAME_HDR_LEN + big + 8 + 64;
	uint8_t *buf = malloc(cap), *got = malloc(big);
	assert_non_null(buf);
	assert_non_null(got);
	size_t len = 0;
	pd_frame_put_hdr(buf, PD_FT_DATA, 3, (uint32_t)big);
	len = PD_FRAME_HDR_LEN;
	for (size_t i = 0; i < big; i++)
		buf[len++] = (uint8_t)(i * 7 + 1);
	pd_frame_put_hdr(buf + len, PD_FT_DATA, 3, 0); /* empty */
	len += PD_FRAME_HDR_LEN;
	pd_frame_put_hdr(buf + len, PD_FT_PING, 4, 8);
	memcpy(buf + len + PD_FRAME_HDR_LEN, "12345678", 8);
	len += PD_FRAME_HDR_LEN + 8;
	pd_frame_put_hdr(buf + len, PD_FT_DATA, 5, 40); /* cut short after 10 octets */
	memset(buf + len + PD_FRAME_HDR_LEN, 0xee, 10);
	len += PD_FRAME_HDR_LEN + 10;

	struct pd_frame_decoder *d;
	assert_int_equal(pd_frame_decoder_new(&d, PD_FROM_CLIENT, 1u << 17), 0);
	size_t off = 0, n_got = 0, slices = 0, empties = 0, pings = 0, tail = 0;
	while (off < len) {
		size_t in = len - off < 1000 ? len - off : 1000, used;
		struct pd_frame_hdr h;
		const uint8_t *p;
		int r = pd_frame_decode_stream(d, buf + off, in, 300, &used, &h, &p);
		assert_true(r >= 0);
		if (r == 1 && h.type == PD_FT_DATA) {
			assert_true(h.len <= 300);
			assert_true(p >= buf + off && p + h.len <= buf + off + used);
			if (h.id == 3 && h.len) {
				memcpy(got + n_got, p, h.len);
				n_got += h.len;
				slices++;
			} else if (h.id == 3) {
				empties++;
			} else {
				assert_int_equal(h.id, 5);
				tail += h.len;
			}
		} else if (r == 1) {
			assert_int_equal(h.type, PD_FT_PING);
			assert_int_equal(h.len, 8);
			assert_memory_equal(p, "12345678", 8);
			pings++;
		}
		off += used;
	}
	assert_int_equal(n_got, big);
	assert_memory_equal(got, buf + PD_FRAME_HDR_LEN, big);
	assert_true(slices >= big / 300);
	assert_int_equal(empties, 1);
	assert_int_equal(pings, 1);
	assert_int_equal(tail, 10);
	assert_int_equal(pd_frame_decoder_pending(d), PD_FRAME_HDR_LEN + 10);
	/* room 0: the payload waits, the header is taken */
	pd_frame_decoder_free(d);
	assert_int_equal(pd_frame_decoder_new(&d, PD_FROM_CLIENT, 1u << 17), 0);
	size_t used;
	struct pd_frame_hdr h;
	const uint8_t *p;
	assert_int_equal(pd_frame_decode_stream(d, buf, 100, 0, &used, &h, &p), 0);
	assert_int_equal(used, PD_FRAME_HDR_LEN);
	assert_int_equal(pd_frame_decode_stream(d, buf + used, 100, 50, &used, &h, &p), 1);
	assert_int_equal(h.len, 50);
	assert_ptr_equal(p, buf + PD_FRAME_HDR_LEN);
	pd_frame_decoder_free(d);
	free(buf);
	free(got);
}

/* Session keys: the DECRYPT's SESSION_KEY_IN and flag, the RESULT's
 * SESSION_KEY or SESSION_KEY_REFUSED, byte for byte, and their bounds. */
static void test_session_key_tlvs(void **state)
{
	(void)state;
	uint8_t buf[PD_FRAME_STRUCT_MAX], key[32];
	for (int i = 0; i < 32; i++)
		key[i] = (uint8_t)(0xa0 + i);
	struct pd_decrypt_req d = { .flags = PD_DF_WANT_SESSION_KEY, .session_key = key, .session_key_len = 16,
	                            .session_key_algo = 7 };
	int n = pd_frame_encode_decrypt(buf, sizeof(buf), 5, &d);
	assert_int_equal(n, PD_FRAME_HDR_LEN + 4 + 3 + 17);
	static const uint8_t head[] = { 0, 0, 0, 4, 0x04, 0, 17, 7, 0xa0 };
	assert_memory_equal(buf + PD_FRAME_HDR_LEN, head, sizeof(head));
	struct pd_decrypt_req back;
	assert_int_equal(pd_parse_decrypt(buf + PD_FRAME_HDR_LEN, (size_t)n - PD_FRAME_HDR_LEN, &back), 0);
	assert_int_equal(back.flags, PD_DF_WANT_SESSION_KEY);
	assert_int_equal(back.session_key_algo, 7);
	assert_int_equal(back.session_key_len, 16);
	assert_memory_equal(back.session_key, key, 16);
	/* 0 octets or more than 32 of key: not encodable, not parsed */
	d.session_key_len = 33;
	assert_int_equal(pd_frame_encode_decrypt(buf, sizeof(buf), 5, &d), -EINVAL);
	d.session_key_len = 0;
	assert_int_equal(pd_frame_encode_decrypt(buf, sizeof(buf), 5, &d), -EINVAL);
	uint8_t p[64] = { 0, 0, 0, 0, 0x04, 0, 1, 9 };
	assert_int_equal(pd_parse_decrypt(p, 8, &back), -EPROTO);
	p[6] = 34;
	assert_int_equal(pd_parse_decrypt(p, 7 + 34, &back), -EPROTO);
	/* twice */
	static const uint8_t twice[] = { 0, 0, 0, 0, 4, 0, 2, 9, 1, 4, 0, 2, 9, 1 };
	assert_int_equal(pd_parse_decrypt(twice, sizeof(twice), &back), -EPROTO);
	/* an unknown flag still is a bad request */
	static const uint8_t flag8[] = { 0, 0, 0, 8 };
	assert_int_equal(pd_parse_decrypt(flag8, 4, &back), -EPROTO);

	struct pd_result r = { .status = 0, .integrity = 1, .sk_algo = 9, .sk_len = 32 };
	memcpy(r.sk, key, 32);
	n = pd_frame_encode_result(buf, sizeof(buf), 5, &r, NULL);
	assert_true(n > 0);
	struct pd_result rb;
	struct pd_msginfo mi;
	assert_int_equal(pd_parse_result(buf + PD_FRAME_HDR_LEN, (size_t)n - PD_FRAME_HDR_LEN, &rb, &mi), 0);
	assert_int_equal(rb.sk_algo, 9);
	assert_int_equal(rb.sk_len, 32);
	assert_memory_equal(rb.sk, key, 32);
	assert_int_equal(rb.sk_refused, 0);
	/* without the info pointer too: the key is the RESULT's own field */
	memset(&rb, 0, sizeof(rb));
	assert_int_equal(pd_parse_result(buf + PD_FRAME_HDR_LEN, (size_t)n - PD_FRAME_HDR_LEN, &rb, NULL), 0);
	assert_int_equal(rb.sk_len, 32);
	struct pd_result refused = { .status = 0, .integrity = 1, .sk_refused = PD_SKR_POLICY };
	n = pd_frame_encode_result(buf, sizeof(buf), 5, &refused, NULL);
	assert_int_equal(pd_parse_result(buf + PD_FRAME_HDR_LEN, (size_t)n - PD_FRAME_HDR_LEN, &rb, &mi), 0);
	assert_int_equal(rb.sk_refused, PD_SKR_POLICY);
	assert_int_equal(rb.sk_len, 0);
	/* a refusal reason of 0, or a SESSION_KEY in an ERROR: violations / skipped */
	uint8_t res0[20 + 4] = { 0, 0, 1, 0 };
	res0[20] = 0x33; res0[21] = 0; res0[22] = 1; res0[23] = 0;
	assert_int_equal(pd_parse_result(res0, sizeof(res0), &rb, &mi), -EPROTO);
}

/* BIND: repeated critical TLVs, byte for byte, their bounds, and the
 * value syntax the client library and the mail filter check. */
static void test_bind_tlvs(void **state)
{
	(void)state;
	uint8_t buf[PD_FRAME_STRUCT_MAX];
	struct pd_decrypt_req d = { .n_bind = 2 };
	d.bind[0] = (const uint8_t *)"bob@example.org";
	d.bind_len[0] = 15;
	d.bind[1] = (const uint8_t *)"@other.example";
	d.bind_len[1] = 14;
	int n = pd_frame_encode_decrypt(buf, sizeof(buf), 5, &d);
	assert_int_equal(n, PD_FRAME_HDR_LEN + 4 + 3 + 15 + 3 + 14);
	static const uint8_t head[] = { 0, 0, 0, 0, 0x85, 0, 15, 'b', 'o', 'b' };
	assert_memory_equal(buf + PD_FRAME_HDR_LEN, head, sizeof(head));
	struct pd_decrypt_req back;
	assert_int_equal(pd_parse_decrypt(buf + PD_FRAME_HDR_LEN, (size_t)n - PD_FRAME_HDR_LEN, &back), 0);
	assert_int_equal(back.n_bind, 2);
	assert_int_equal(back.bind_len[1], 14);
	assert_memory_equal(back.bind[1], "@other.example", 14);
	/* 16 values are fine, 17 are a bad request; so are 0 and 255 octets */
	uint8_t p[4 + 17 * 6] = { 0 };
	for (int i = 0; i < 17; i++)
		memcpy(p + 4 + 6 * i, "\x85\0\3a@b", 6);
	assert_int_equal(pd_parse_decrypt(p, 4 + 16 * 6, &back), 0);
	assert_int_equal(back.n_bind, 16);
	assert_int_equal(pd_parse_decrypt(p, sizeof(p), &back), -EPROTO);
	static const uint8_t empty[] = { 0, 0, 0, 0, 0x85, 0, 0 };
	assert_int_equal(pd_parse_decrypt(empty, sizeof(empty), &back), -EPROTO);
	uint8_t big[4 + 3 + 255] = { 0, 0, 0, 0, 0x85, 0, 255 };
	memset(big + 7, 'a', 255);
	assert_int_equal(pd_parse_decrypt(big, sizeof(big), &back), -EPROTO);
	big[6] = 254;
	assert_int_equal(pd_parse_decrypt(big, sizeof(big) - 1, &back), 0);
	d.n_bind = 17;
	assert_int_equal(pd_frame_encode_decrypt(buf, sizeof(buf), 5, &d), -EINVAL);
	d.n_bind = 1;
	d.bind_len[0] = 0;
	assert_int_equal(pd_frame_encode_decrypt(buf, sizeof(buf), 5, &d), -EINVAL);

	/* KEY's ADDRESS: at most 16, each one line of 1..254 octets */
	struct pd_keyinfo k = { .version = 4, .pk_algo = 1, .fpr_len = 20 }, k2;
	struct pd_key_addrs ka;
	char many[20 * 4];
	for (int i = 0; i < 20; i++)
		memcpy(many + 4 * i, "a@b", 4);
	n = pd_frame_encode_key(buf, sizeof(buf), 5, &k, many, sizeof(many));
	assert_int_equal(pd_parse_key(buf + PD_FRAME_HDR_LEN, (size_t)n - PD_FRAME_HDR_LEN, &k2, &ka), 0);
	assert_int_equal(ka.n, PD_KEY_ADDRS_MAX);
	uint8_t kp[8 + 23 + 17 * 6] = { 4, 1, 0, 0, 0, 0, 0, 0, PD_T_KEY_FPR, 0, 20 };
	for (int i = 0; i < 17; i++)
		memcpy(kp + 31 + 6 * i, "\x23\0\3a@b", 6);
	assert_int_equal(pd_parse_key(kp, 31 + 16 * 6, &k2, &ka), 0);
	assert_int_equal(pd_parse_key(kp, sizeof(kp), &k2, &ka), -EPROTO);
	kp[31 + 2] = 0;
	assert_int_equal(pd_parse_key(kp, 31 + 3, &k2, &ka), -EPROTO);

	static const char *const good[] = { "a@b", "@b", "Bob@Example.ORG", "x.y+z@[192.0.2.1]" };
	static const char *const bad[] = { "", "a", "@", "a@", "a@b@c", "a b@c", "<a@b>", "a@b\n", "a\x7f@b" };
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		assert_true(pd_bind_value_ok(good[i], strlen(good[i])));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_false(pd_bind_value_ok(bad[i], strlen(bad[i])));
	memset(big, 'a', sizeof(big));
	big[0] = '@';
	assert_true(pd_bind_value_ok((const char *)big, 254));
	assert_false(pd_bind_value_ok((const char *)big, 255));
}

static void test_status_mapping(void **state)
{
	(void)state;
	static const struct { int err; uint16_t st; int exit; } map[] = {
		{ 0, PD_ST_OK, 0 },
		{ PD_EMALFORMED, PD_ST_MALFORMED, 65 },
		{ PD_EINTEGRITY, PD_ST_INTEGRITY, 65 },
		{ PD_ENOTPGP, PD_ST_NOT_PGP, 65 },
		{ PD_ETRUNCATED, PD_ST_TRUNCATED, 65 },
		{ PD_ESED, PD_ST_SED_REFUSED, 65 },
		{ PD_EBOMB, PD_ST_BOMB, 65 },
		{ PD_ELIMIT, PD_ST_LIMIT, 65 },
		{ PD_EUNSUPPORTED, PD_ST_UNSUPPORTED, 65 },
		{ PD_ENOKEY, PD_ST_NO_KEY, 69 },
		{ PD_ENOPASSWORD, PD_ST_NO_PASSWORD, 69 },
		{ PD_EBADPASS, PD_ST_NO_PASSWORD, 69 }, /* an AEAD-checked SKESK said: wrong password */
		{ PD_EINTERNAL, PD_ST_INTERNAL, 75 },
		{ -EAGAIN, PD_ST_OVERLOADED, 75 },
		{ -ENOMEM, PD_ST_OVERLOADED, 75 },
		{ -ETIMEDOUT, PD_ST_TIMEOUT, 75 },
		{ -ESHUTDOWN, PD_ST_SHUTTING_DOWN, 75 },
		{ -EACCES, PD_ST_ACCESS_DENIED, 77 },
		{ -EPROTO, PD_ST_PROTOCOL, 75 },
		{ -EMSGSIZE, PD_ST_PROTOCOL, 75 },
		{ -EPROTONOSUPPORT, PD_ST_VERSION, 75 },
		{ -EINVAL, PD_ST_BAD_REQUEST, 75 },
		{ -EIO, PD_ST_INTERNAL, 75 },
	};
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
		assert_int_equal(pd_status_from_err(map[i].err), map[i].st);
		assert_int_equal(pd_status_exit_code(map[i].st), map[i].exit);
		assert_string_not_equal(pd_status_name(map[i].st), "UNKNOWN");
	}
	/* Codes a newer server may add are mapped by class. */
	assert_int_equal(pd_status_exit_code(19), 65);
	assert_int_equal(pd_status_exit_code(29), 69);
	assert_int_equal(pd_status_exit_code(49), 77);
	assert_int_equal(pd_status_exit_code(999), 75);
	assert_string_equal(pd_status_name(999), "UNKNOWN");
	assert_true(pd_status_is_temporary(PD_ST_OVERLOADED));
	assert_false(pd_status_is_temporary(PD_ST_INTEGRITY));
	assert_false(pd_status_is_temporary(PD_ST_OK));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_client_roundtrip_any_slicing),
		cmocka_unit_test(test_server_roundtrip),
		cmocka_unit_test(test_wire_layout),
		cmocka_unit_test(test_oversize),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_result_values_checked),
		cmocka_unit_test(test_unknown_and_misdirected),
		cmocka_unit_test(test_garbage),
		cmocka_unit_test(test_consumed_payload_wiped),
		cmocka_unit_test(test_stream_data),
		cmocka_unit_test(test_status_mapping),
		cmocka_unit_test(test_session_key_tlvs),
		cmocka_unit_test(test_bind_tlvs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
