/* SPDX-License-Identifier: MIT */
/*
 * Compressed Data stage: round trips through zlib's deflate and libbz2's
 * compressor with 1-octet input slices and 1-octet output room, gpg's own
 * ZIP/ZLIB/BZip2 packets, corrupt and truncated streams, data after the
 * stream end, and a bomb that must not make the stage allocate.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <malloc.h>
#include <bzlib.h>
#include <zlib.h>

#include "pgp/inflate.h"

#ifndef PD_TEST_DATA
#error "PD_TEST_DATA must name tests/data"
#endif

struct buf { uint8_t *p; size_t len; };

/* algo 1: raw deflate, 2: zlib, 3: bzip2, 0: as is */
static struct buf compress_as(uint8_t algo, const uint8_t *d, size_t n)
{
	struct buf b = { 0 };
	if (algo == 0) {
		b.p = malloc(n ? n : 1);
		assert_non_null(b.p);
		memcpy(b.p, d, n);
		b.len = n;
	} else if (algo == 3) {
		unsigned cap = (unsigned)(n + n / 100 + 600);
		b.p = malloc(cap);
		assert_non_null(b.p);
		assert_int_equal(BZ2_bzBuffToBuffCompress((char *)b.p, &cap, (char *)(uintptr_t)d, (unsigned)n, 9, 0, 0), BZ_OK);
		b.len = cap;
	} else {
		z_stream zs = { 0 };
		assert_int_equal(deflateInit2(&zs, 9, Z_DEFLATED, algo == 1 ? -15 : 15, 8, Z_DEFAULT_STRATEGY), Z_OK);
		size_t cap = deflateBound(&zs, n);
		b.p = malloc(cap);
		assert_non_null(b.p);
		zs.next_in = (Bytef *)(uintptr_t)d;
		zs.avail_in = (uInt)n;
		zs.next_out = b.p;
		zs.avail_out = (uInt)cap;
		assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
		b.len = cap - zs.avail_out;
		deflateEnd(&zs);
	}
	return b;
}

struct res { int r; struct buf out; size_t used; };

/* Feed in slices of inslice octets with outroom octets of room each call. */
static struct res run_sliced(uint8_t algo, const uint8_t *in, size_t len, size_t inslice, size_t outroom)
{
	struct res res = { 0 };
	struct pd_inflate *z = NULL;
	size_t pos = 0, cap = 4096;
	uint8_t *room = malloc(outroom);
	res.out.p = malloc(cap);
	assert_non_null(room);
	assert_non_null(res.out.p);
	assert_int_equal(pd_inflate_new(&z, algo), 0);
	for (unsigned stall = 0;;) {
		size_t n = PD_MIN(inslice, len - pos), used = 0, got = 0;
		bool eof = pos + n == len;
		int r = pd_inflate_run(z, in + pos, n, &used, room, outroom, &got, eof);
		if (r < 0) {
			res.r = r;
			break;
		}
		assert_true(used <= n);
		assert_true(got <= outroom);
		if (res.out.len + got > cap) {
			cap = (res.out.len + got) * 2;
			res.out.p = realloc(res.out.p, cap);
			assert_non_null(res.out.p);
		}
		memcpy(res.out.p + res.out.len, room, got);
		res.out.len += got;
		pos += used;
		if (r == 1) {
			res.r = 1;
			/* ended: stays ended, consumes nothing more */
			assert_int_equal(pd_inflate_run(z, in + pos, len - pos, &used, room, outroom, &got, true), 1);
			assert_int_equal(used, 0);
			assert_int_equal(got, 0);
			break;
		}
		/* input and room were offered: 0 must come with progress */
		stall = used || got ? 0 : stall + 1;
		assert_true(stall < 2);
	}
	res.used = pos;
	pd_inflate_free(z);
	free(room);
	return res;
}

static uint8_t *sample(size_t n)
{
	uint8_t *d = malloc(n ? n : 1);
	assert_non_null(d);
	uint32_t x = 0x9e3779b9;
	for (size_t i = 0; i < n; i++) {
		x = x * 1664525 + 1013904223;
		/* half text-like (compressible), half noise */
		d[i] = (i / 512) % 2 ? (uint8_t)(x >> 24) : (uint8_t)("OpenPGP compressed data "[i % 24]);
	}
	return d;
}

static void check_roundtrip(uint8_t algo, size_t n)
{
	uint8_t *d = sample(n);
	struct buf c = compress_as(algo, d, n);
	struct { size_t in, out; } sl[] = { { c.len + 1, n + 1 }, { 1, 1 }, { 1, 65536 }, { c.len + 1, 1 }, { 7, 13 }, { 4096, 3 } };
	for (size_t k = 0; k < PD_ARRAY_SIZE(sl); k++) {
		if (n > 4096 && k == 1 && algo == 3)
			continue; /* 1-in/1-out on a 1 MiB bzip2 stream: slow and adds nothing over 1/65536 and big/1 */
		struct res r = run_sliced(algo, c.p, c.len, sl[k].in, sl[k].out);
		assert_int_equal(r.r, 1);
		assert_int_equal(r.used, c.len);
		assert_int_equal(r.out.len, n);
		assert_memory_equal(r.out.p, d, n);
		free(r.out.p);
	}
	free(c.p);
	free(d);
}

static void test_roundtrip(void **state)
{
	(void)state;
	static const size_t sizes[] = { 0, 1, 4096, 1 << 20 };
	for (uint8_t algo = 0; algo <= 3; algo++)
		for (size_t i = 0; i < PD_ARRAY_SIZE(sizes); i++)
			check_roundtrip(algo, sizes[i]);
}

/* Data after the end of the compressed stream is left unconsumed. */
static void test_trailing_data(void **state)
{
	(void)state;
	uint8_t *d = sample(10000);
	for (uint8_t algo = 1; algo <= 3; algo++) {
		struct buf c = compress_as(algo, d, 10000);
		uint8_t *cc = malloc(c.len + 9);
		assert_non_null(cc);
		memcpy(cc, c.p, c.len);
		memcpy(cc + c.len, "GARBAGE!!", 9);
		static const size_t slices[] = { 1, 5, 100000 };
		for (size_t k = 0; k < PD_ARRAY_SIZE(slices); k++) {
			struct res r = run_sliced(algo, cc, c.len + 9, slices[k], slices[k] == 1 ? 1 : 100000);
			assert_int_equal(r.r, 1);
			assert_int_equal(r.used, c.len);
			assert_int_equal(r.out.len, 10000);
			assert_memory_equal(r.out.p, d, 10000);
			free(r.out.p);
		}
		free(cc);
		free(c.p);
	}
	free(d);
}

static void test_truncated(void **state)
{
	(void)state;
	uint8_t *d = sample(4096);
	for (uint8_t algo = 1; algo <= 3; algo++) {
		struct buf c = compress_as(algo, d, 4096);
		/* every cut point, whole input at once; a few also one octet at a time */
		for (size_t cut = 0; cut < c.len; cut++) {
			struct res r = run_sliced(algo, c.p, cut, 100000, 100000);
			assert_int_equal(r.r, PD_EINTEGRITY);
			free(r.out.p);
			if (cut % 97 == 0 || cut == c.len - 1) {
				r = run_sliced(algo, c.p, cut, 1, 1);
				assert_int_equal(r.r, PD_EINTEGRITY);
				free(r.out.p);
			}
		}
		free(c.p);
	}
	free(d);
}

static void test_corrupt(void **state)
{
	(void)state;
	uint8_t *d = sample(4096);
	/* raw deflate has no checksum: use a reserved block type (BTYPE=11) */
	static const uint8_t bad_deflate[] = { 0xff, 0xff, 0xff, 0xff };
	struct res r = run_sliced(1, bad_deflate, sizeof(bad_deflate), 1, 1);
	assert_int_equal(r.r, PD_EINTEGRITY);
	free(r.out.p);
	/* zlib and bzip2: any flipped octet is caught by header checks, the
	 * Adler-32 or the block CRCs */
	for (uint8_t algo = 2; algo <= 3; algo++) {
		struct buf c = compress_as(algo, d, 4096);
		for (size_t at = 0; at < c.len; at += c.len / 17 + 1) {
			c.p[at] ^= 0x21;
			r = run_sliced(algo, c.p, c.len, 100000, 100000);
			assert_int_equal(r.r, PD_EINTEGRITY);
			free(r.out.p);
			c.p[at] ^= 0x21;
		}
		/* not a bzip2/zlib stream at all */
		r = run_sliced(algo, (const uint8_t *)"hello, world", 12, 3, 3);
		assert_int_equal(r.r, PD_EINTEGRITY);
		free(r.out.p);
		free(c.p);
	}
	/* errors are sticky */
	struct pd_inflate *z;
	size_t used, got;
	uint8_t out[16];
	assert_int_equal(pd_inflate_new(&z, 2), 0);
	assert_int_equal(pd_inflate_run(z, (const uint8_t *)"\x78\x9d", 2, &used, out, sizeof(out), &got, false), PD_EINTEGRITY);
	assert_int_equal(pd_inflate_run(z, (const uint8_t *)"\x78\x9c", 2, &used, out, sizeof(out), &got, false), PD_EINTEGRITY);
	pd_inflate_free(z);
	free(d);
}

static void test_api(void **state)
{
	(void)state;
	struct pd_inflate *z = NULL;
	assert_int_equal(pd_inflate_new(&z, 4), PD_EUNSUPPORTED);
	assert_int_equal(pd_inflate_new(&z, 110), PD_EUNSUPPORTED);
	assert_null(z);
	assert_null(pd_inflate_free(NULL));
	/* stored: without eof it never ends, with eof it ends once all is out */
	size_t used, got;
	uint8_t out[4];
	assert_int_equal(pd_inflate_new(&z, 0), 0);
	assert_int_equal(pd_inflate_run(z, (const uint8_t *)"abcdef", 6, &used, out, 4, &got, false), 0);
	assert_int_equal(used, 4);
	assert_int_equal(got, 4);
	assert_int_equal(pd_inflate_run(z, (const uint8_t *)"ef", 2, &used, out, 4, &got, true), 1);
	assert_int_equal(used, 2);
	assert_memory_equal(out, "ef", 2);
	assert_null(pd_inflate_free(z));
	/* empty input, no room, no eof: waits */
	assert_int_equal(pd_inflate_new(&z, 1), 0);
	assert_int_equal(pd_inflate_run(z, NULL, 0, &used, out, 0, &got, false), 0);
	assert_int_equal(pd_inflate_run(z, NULL, 0, &used, out, 4, &got, true), PD_EINTEGRITY);
	pd_inflate_free(z);
}

/* gpg -c --compress-algo {zip,zlib,bzip2}, unwrapped with gpg --unwrap: an
 * old-format indeterminate-length Compressed Data packet (0xa3, algo)
 * holding one Literal Data packet for plain.txt. */
static void test_gpg_packets(void **state)
{
	(void)state;
	static const char *const names[] = { NULL, "gpg-zip.pkt", "gpg-zlib.pkt", "gpg-bzip2.pkt" };
	/* plain.txt as the test data script wrote it */
	size_t plen = 0;
	char *plain = malloc(200000);
	assert_non_null(plain);
	for (int i = 0; i < 3000; i++)
		plen += (size_t)sprintf(plain + plen, "line %d: the quick brown fox jumps over the lazy dog\n", i);
	assert_int_equal(plen, 163890);
	for (uint8_t algo = 1; algo <= 3; algo++) {
		char path[512];
		snprintf(path, sizeof(path), "%s/inflate/%s", PD_TEST_DATA, names[algo]);
		FILE *f = fopen(path, "rb");
		assert_non_null(f);
		uint8_t *pkt = malloc(1 << 16);
		assert_non_null(pkt);
		size_t len = fread(pkt, 1, 1 << 16, f);
		fclose(f);
		assert_true(len > 2 && len < (1 << 16));
		assert_int_equal(pkt[0], 0xa3);
		assert_int_equal(pkt[1], algo);
		static const size_t slices[][2] = { { 1 << 16, 1 << 20 }, { 1, 1 }, { 1, 4096 }, { 333, 1 } };
		for (size_t k = 0; k < PD_ARRAY_SIZE(slices); k++) {
			struct res r = run_sliced(algo, pkt + 2, len - 2, slices[k][0], slices[k][1]);
			assert_int_equal(r.r, 1);
			assert_int_equal(r.used, len - 2);
			/* literal header: ae, len32, 'b', 9, "plain.txt", date */
			assert_int_equal(r.out.len, 5 + 1 + 1 + 9 + 4 + plen);
			assert_int_equal(r.out.p[0], 0xae);
			assert_memory_equal(r.out.p + 7, "plain.txt", 9);
			assert_memory_equal(r.out.p + 20, plain, plen);
			free(r.out.p);
		}
		free(pkt);
	}
	free(plain);
}

/* A bomb run with tiny output room: the stage's memory is its fixed state. */
static void check_bomb(uint8_t algo, size_t total, size_t tiny_until)
{
	uint8_t *zeros = calloc(1, total);
	assert_non_null(zeros);
	struct buf c = compress_as(algo, zeros, total);
	free(zeros);
	assert_true(c.len < total / 200);

	struct pd_inflate *z;
	uint8_t room[65536];
	size_t pos = 0, outn = 0, used, got, before = 0;
	int r = 0;
	assert_int_equal(pd_inflate_new(&z, algo), 0);
	while (r == 0) {
		size_t cap = outn < tiny_until ? 1 : sizeof(room);
		r = pd_inflate_run(z, c.p + pos, PD_MIN(c.len - pos, 4096), &used, room, cap, &got, pos + PD_MIN(c.len - pos, 4096) == c.len);
		assert_true(r >= 0);
		static const uint8_t zero[sizeof(room)];
		assert_true(memcmp(room, zero, got) == 0);
		pos += used;
		outn += got;
		if (!before && outn >= 1 << 20) /* the stream state exists by now */
			before = mallinfo2().uordblks;
		if (before && outn % (1 << 20) < got)
			assert_true(mallinfo2().uordblks <= before);
	}
	assert_int_equal(r, 1);
	assert_int_equal(outn, total);
	assert_int_equal(pos, c.len);
	pd_inflate_free(z);
	free(c.p);
}

static void test_bomb(void **state)
{
	(void)state;
	check_bomb(1, 100u << 20, 4u << 20);
	check_bomb(2, 100u << 20, 2u << 20);
	check_bomb(3, 16u << 20, 2u << 20);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_api),
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_trailing_data),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_corrupt),
		cmocka_unit_test(test_gpg_packets),
		cmocka_unit_test(test_bomb),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
