/* SPDX-License-Identifier: MIT */
/*
 * ASCII armor decoder: RFC 9580 vectors and gpg/sq/rnp output against
 * `gpg --dearmor`, every input slicing, CRC present/absent/wrong, line
 * endings and lengths, headers, preambles and every refusal.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "armor.h"

#ifndef PD_TEST_DATA
#error "PD_TEST_DATA must name tests/data"
#endif

static uint8_t *read_file(const char *name, size_t *ret_len)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/armor/%s", PD_TEST_DATA, name);
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	uint8_t *buf = NULL;
	size_t len = 0, cap = 0;
	for (;;) {
		if (len == cap) {
			cap = cap ? cap * 2 : 4096;
			buf = realloc(buf, cap);
			assert_non_null(buf);
		}
		size_t n = fread(buf + len, 1, cap - len, f);
		if (!n)
			break;
		len += n;
	}
	fclose(f);
	*ret_len = len;
	return buf;
}

/* Independent CRC24: the bitwise reference of RFC 9580 §6.1.1. */
static uint32_t ref_crc24(const uint8_t *p, size_t len)
{
	uint32_t crc = 0xB704CE;
	while (len--) {
		crc ^= (uint32_t)(*p++) << 16;
		for (int i = 0; i < 8; i++) {
			crc <<= 1;
			if (crc & 0x1000000)
				crc = (crc & 0xFFFFFF) ^ 0x864CFB;
		}
	}
	return crc & 0xFFFFFF;
}

static const char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

struct sbuf { char *p; size_t len, cap; };

static void sb_add(struct sbuf *s, const void *d, size_t n)
{
	if (s->len + n + 1 > s->cap) {
		s->cap = (s->len + n + 1) * 2;
		s->p = realloc(s->p, s->cap);
		assert_non_null(s->p);
	}
	memcpy(s->p + s->len, d, n);
	s->len += n;
	s->p[s->len] = 0;
}
static void sb_str(struct sbuf *s, const char *str) { sb_add(s, str, strlen(str)); }

/* Test-side encoder: base64 of data, wrapped at linelen, with eol line
 * endings; crc: 0 none, 1 correct, 2 wrong. */
static void enc_body(struct sbuf *s, const uint8_t *d, size_t n, size_t linelen, const char *eol, int crc)
{
	char q[4];
	size_t col = 0;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)d[i] << 16;
		if (i + 1 < n) v |= (uint32_t)d[i + 1] << 8;
		if (i + 2 < n) v |= d[i + 2];
		q[0] = b64chars[(v >> 18) & 63];
		q[1] = b64chars[(v >> 12) & 63];
		q[2] = i + 1 < n ? b64chars[(v >> 6) & 63] : '=';
		q[3] = i + 2 < n ? b64chars[v & 63] : '=';
		for (int k = 0; k < 4; k++) {
			sb_add(s, &q[k], 1);
			if (++col == linelen) {
				sb_str(s, eol);
				col = 0;
			}
		}
	}
	if (col)
		sb_str(s, eol);
	if (crc) {
		uint32_t c = ref_crc24(d, n) ^ (crc == 2 ? 1 : 0);
		char l[6] = { '=', b64chars[(c >> 18) & 63], b64chars[(c >> 12) & 63],
		              b64chars[(c >> 6) & 63], b64chars[c & 63], 0 };
		sb_str(s, l);
		sb_str(s, eol);
	}
}

static void enc_armor(struct sbuf *s, const uint8_t *d, size_t n, size_t linelen, const char *eol, int crc)
{
	sb_str(s, "-----BEGIN PGP MESSAGE-----");
	sb_str(s, eol);
	sb_str(s, eol);
	enc_body(s, d, n, linelen, eol, crc);
	sb_str(s, "-----END PGP MESSAGE-----");
	sb_str(s, eol);
}

struct res {
	int r;
	uint8_t *out;
	size_t out_len;
	size_t used;        /* input consumed in total */
	int crc_state;
	uint8_t kind;
};

/* Decode with input slices of inslice octets and outroom octets of output room. */
static struct res decode_sliced(const void *in, size_t len, size_t inslice, size_t outroom)
{
	struct res res = { 0 };
	struct pd_armor a;
	size_t pos = 0, cap = len + 16;
	uint8_t *obuf = malloc(outroom);
	res.out = malloc(cap);
	assert_non_null(obuf);
	assert_non_null(res.out);
	pd_armor_init(&a);
	for (unsigned stall = 0;;) {
		size_t n = PD_MIN(inslice, len - pos), used = 0, got = 0;
		bool eof = pos + n == len;
		int r = pd_armor_decode(&a, (const uint8_t *)in + pos, n, &used, obuf, outroom, &got, eof);
		if (r < 0) {
			res.r = r;
			break;
		}
		assert_true(used <= n);
		assert_true(got <= outroom);
		assert_true(res.out_len + got <= cap);
		memcpy(res.out + res.out_len, obuf, got);
		res.out_len += got;
		pos += used;
		if (r == 1) {
			res.r = 1;
			break;
		}
		stall = used || got ? 0 : stall + 1;
		assert_true(stall < 3); /* 0 with no progress and data/room given must not repeat */
	}
	res.used = pos;
	res.crc_state = a.crc_state;
	res.kind = a.kind;
	free(obuf);
	return res;
}

/* Every slicing 1..maxslice (and whole), with output room 1, 2, 3 and plenty,
 * gives the same result as one call. */
static struct res check_all_slicings(const void *in, size_t len, size_t maxslice)
{
	struct res ref = decode_sliced(in, len, len ? len : 1, len + 16);
	static const size_t rooms[] = { 1, 2, 3, 7, 4096 };
	for (size_t s = 1; s <= maxslice; s++)
		for (size_t k = 0; k < PD_ARRAY_SIZE(rooms); k++) {
			if (s > 8 && k < 4 && s % 7) /* keep the quadratic cases small */
				continue;
			struct res x = decode_sliced(in, len, s, rooms[k]);
			assert_int_equal(x.r, ref.r);
			assert_int_equal(x.out_len, ref.out_len);
			assert_memory_equal(x.out, ref.out, ref.out_len);
			assert_int_equal(x.used, ref.used);
			assert_int_equal(x.crc_state, ref.crc_state);
			free(x.out);
		}
	return ref;
}

static void check_file(const char *stem, int want_crc, uint8_t want_kind)
{
	char name[256];
	size_t alen, blen;
	snprintf(name, sizeof(name), "%s.asc", stem);
	uint8_t *asc = read_file(name, &alen);
	snprintf(name, sizeof(name), "%s.bin", stem);
	uint8_t *bin = read_file(name, &blen);

	struct res r = check_all_slicings(asc, alen, 80);
	assert_int_equal(r.r, 1);
	assert_int_equal(r.out_len, blen);
	assert_memory_equal(r.out, bin, blen);
	assert_int_equal(r.crc_state, want_crc);
	assert_int_equal(r.kind, want_kind);
	assert_int_equal(r.used, alen); /* the END line's newline is consumed */
	free(r.out);

	uint8_t *all;
	size_t all_len;
	assert_int_equal(pd_armor_decode_all(asc, alen, &all, &all_len), 0);
	assert_int_equal(all_len, blen);
	assert_memory_equal(all, bin, blen);
	free(all);
	free(asc);
	free(bin);
}

static void test_vectors(void **state)
{
	(void)state;
	check_file("a01-v4-ed25519legacy-pubkey", 0, 3);   /* RFC 9580 A.1 */
	check_file("a04-v6-secret-key", 0, 2);             /* A.4: v6, no CRC */
	check_file("a08-x25519-aead-ocb-message", 0, 1);   /* A.8: v2 SEIPD, no CRC */
	check_file("gpg-symmetric", 1, 1);                 /* gpg 2.2 -c --armor: 64-char lines + CRC */
	check_file("sq-message", 1, 1);                    /* sq armor */
	check_file("rnp-message", 1, 1);                   /* rnp --enarmor: CRLF, 76-char lines */
}

static uint8_t *pattern(size_t n)
{
	uint8_t *d = malloc(n ? n : 1);
	assert_non_null(d);
	uint32_t x = 0x12345678;
	for (size_t i = 0; i < n; i++) {
		x = x * 1103515245 + 12345;
		d[i] = (uint8_t)(x >> 16);
	}
	return d;
}

static void expect_ok(const struct sbuf *s, const uint8_t *d, size_t n, int crc_state, size_t maxslice)
{
	struct res r = check_all_slicings(s->p, s->len, maxslice);
	assert_int_equal(r.r, 1);
	assert_int_equal(r.out_len, n);
	assert_memory_equal(r.out, d, n);
	assert_int_equal(r.crc_state, crc_state);
	free(r.out);
}

static void test_crc_and_lines(void **state)
{
	(void)state;
	static const size_t sizes[] = { 0, 1, 2, 3, 4, 5, 47, 48, 49, 1000 };
	static const size_t lines[] = { 64, 76, 1000, 1, 3, 5 };
	for (size_t si = 0; si < PD_ARRAY_SIZE(sizes); si++) {
		size_t n = sizes[si];
		uint8_t *d = pattern(n);
		for (size_t li = 0; li < PD_ARRAY_SIZE(lines); li++)
			for (int crc = 0; crc <= 2; crc++)
				for (int crlf = 0; crlf <= 1; crlf++) {
					struct sbuf s = { 0 };
					enc_armor(&s, d, n, lines[li], crlf ? "\r\n" : "\n", crc);
					/* the wrong CRC is only reported (RFC 9580 §6.1) */
					expect_ok(&s, d, n, crc == 0 ? 0 : crc == 1 ? 1 : -1, n < 100 ? 40 : 3);
					free(s.p);
				}
		free(d);
	}
}

static int decode_str(const char *s, struct res *ret)
{
	struct res r = decode_sliced(s, strlen(s), strlen(s) ? strlen(s) : 1, strlen(s) + 16);
	/* and one octet at a time: same verdict */
	struct res r1 = decode_sliced(s, strlen(s), 1, 1);
	assert_int_equal(r1.r, r.r);
	if (r.r == 1) {
		assert_int_equal(r1.out_len, r.out_len);
		assert_memory_equal(r1.out, r.out, r.out_len);
	}
	free(r1.out);
	if (ret)
		*ret = r;
	else
		free(r.out);
	return r.r;
}

#define HELLO_B64 "SGVsbG8sIHdvcmxkIQ==" /* "Hello, world!" */

static void expect_hello(const char *s, int crc_state)
{
	struct res r;
	assert_int_equal(decode_str(s, &r), 1);
	assert_int_equal(r.out_len, 13);
	assert_memory_equal(r.out, "Hello, world!", 13);
	assert_int_equal(r.crc_state, crc_state);
	free(r.out);
}

static void test_headers_and_layout(void **state)
{
	(void)state;
	/* headers, any keys, trailing whitespace on the BEGIN line, whitespace-only blank line */
	expect_hello("-----BEGIN PGP MESSAGE-----  \t\n"
	             "Version: GnuPG v2\nComment: a: b: c\nX-Unknown-Key: whatever\nHash: SHA256\n"
	             " \t\r\n" HELLO_B64 "\n-----END PGP MESSAGE-----\n", 0);
	/* whitespace inside the body, padding split across lines */
	expect_hello("-----BEGIN PGP MESSAGE-----\n\n  SGVs bG8s\tIHdv\r\ncmxk\nIQ=\n=\n-----END PGP MESSAGE-----\n", 0);
	/* no blank line after the BEGIN line (lenient) */
	expect_hello("-----BEGIN PGP MESSAGE-----\n" HELLO_B64 "\n-----END PGP MESSAGE-----\n", 0);
	/* a tail of more than five dashes, as gpg, sq, rnp and gosop accept */
	expect_hello("-----BEGIN PGP MESSAGE-----\n\n" HELLO_B64 "\n-----END PGP MESSAGE--------\n", 0);
	/* headers, then no blank line */
	expect_hello("-----BEGIN PGP MESSAGE-----\nComment: x\n" HELLO_B64 "\n-----END PGP MESSAGE-----\n", 0);
	/* a first body line longer than the header buffer, no blank line */
	{
		struct sbuf s = { 0 };
		uint8_t *d = pattern(3000);
		sb_str(&s, "-----BEGIN PGP MESSAGE-----\n");
		enc_body(&s, d, 3000, 1000, "\n", 1);
		sb_str(&s, "-----END PGP MESSAGE-----\n");
		expect_ok(&s, d, 3000, 1, 3);
		free(s.p);
		free(d);
	}
	/* CRC matches "Hello, world!" */
	{
		uint32_t c = ref_crc24((const uint8_t *)"Hello, world!", 13);
		char s[256];
		snprintf(s, sizeof(s), "-----BEGIN PGP MESSAGE-----\n\n" HELLO_B64 "\n=%c%c%c%c\n-----END PGP MESSAGE-----\n",
		         b64chars[c >> 18], b64chars[(c >> 12) & 63], b64chars[(c >> 6) & 63], b64chars[c & 63]);
		expect_hello(s, 1);
	}
	/* malformed CRC line: recorded, not fatal */
	expect_hello("-----BEGIN PGP MESSAGE-----\n\n" HELLO_B64 "\n=AB\n-----END PGP MESSAGE-----\n", -1);
	/* missing padding (lenient), END without final newline */
	expect_hello("-----BEGIN PGP MESSAGE-----\n\nSGVsbG8sIHdvcmxkIQ\n-----END PGP MESSAGE-----", 0);
	/* CRLF everywhere, trailing spaces on the END line */
	expect_hello("-----BEGIN PGP MESSAGE-----\r\nVersion: 1\r\n\r\n" HELLO_B64 "\r\n-----END PGP MESSAGE-----  \r\n", 0);

	/* kinds */
	struct res r;
	assert_int_equal(decode_str("-----BEGIN PGP SIGNATURE-----\n\n" HELLO_B64 "\n-----END PGP SIGNATURE-----\n", &r), 1);
	assert_int_equal(r.kind, 4);
	free(r.out);
	assert_int_equal(decode_str("-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n-----END PGP PRIVATE KEY BLOCK-----\n", &r), 1);
	assert_int_equal(r.kind, 2);
	assert_int_equal(r.out_len, 0);
	free(r.out);
	/* empty body, END right after BEGIN */
	assert_int_equal(decode_str("-----BEGIN PGP PUBLIC KEY BLOCK-----\n-----END PGP PUBLIC KEY BLOCK-----\n", &r), 1);
	assert_int_equal(r.kind, 3);
	assert_int_equal(r.out_len, 0);
	free(r.out);
}

static void test_preamble_and_trailer(void **state)
{
	(void)state;
	const char *msg = "Subject: hi\nFrom: a@b\n\nHere is the file:\n-----BEGIN PGP maybe not\n"
	                  "-----BEGIN PGP MESSAGE-----\n\n" HELLO_B64 "\n-----END PGP MESSAGE-----\nThanks!\n-----BEGIN PGP";
	struct res r;
	assert_int_equal(decode_str(msg, &r), 1);
	assert_int_equal(r.out_len, 13);
	assert_memory_equal(r.out, "Hello, world!", 13);
	/* text after the END line is left unconsumed */
	assert_string_equal(msg + r.used, "Thanks!\n-----BEGIN PGP");
	free(r.out);

	/* preamble cap */
	struct sbuf s = { 0 };
	for (int i = 0; i < 2000; i++)
		sb_str(&s, "0123456789012345678901234567890123456789\n"); /* 82000 octets */
	sb_str(&s, "-----BEGIN PGP MESSAGE-----\n\n" HELLO_B64 "\n-----END PGP MESSAGE-----\n");
	assert_int_equal(decode_str(s.p, NULL), PD_ENOTPGP);
	assert_int_equal(pd_armor_detect((uint8_t *)s.p, s.len, true), PD_ENOTPGP);
	free(s.p);
	/* a preamble just under the cap works */
	s = (struct sbuf){ 0 };
	for (int i = 0; i < 1500; i++)
		sb_str(&s, "0123456789012345678901234567890123456789\n");
	sb_str(&s, "-----BEGIN PGP MESSAGE-----\n\n" HELLO_B64 "\n-----END PGP MESSAGE-----\n");
	assert_int_equal(pd_armor_detect((uint8_t *)s.p, s.len, true), 1);
	expect_hello(s.p, 0);
	free(s.p);
	/* one endless preamble line */
	s = (struct sbuf){ 0 };
	for (int i = 0; i < 2000; i++)
		sb_str(&s, "0123456789012345678901234567890123456789");
	assert_int_equal(decode_str(s.p, NULL), PD_ENOTPGP);
	assert_int_equal(pd_armor_detect((uint8_t *)s.p, s.len, false), PD_ENOTPGP);
	free(s.p);
}

static void test_refusals(void **state)
{
	(void)state;
	/* missing END */
	assert_int_equal(decode_str("-----BEGIN PGP MESSAGE-----\n\n" HELLO_B64 "\n", NULL), PD_ETRUNCATED);
	assert_int_equal(decode_str("-----BEGIN PGP MESSAGE-----\n\n" HELLO_B64 "\n-----END PGP MESS", NULL), PD_ETRUNCATED);
	assert_int_equal(decode_str("-----BEGIN PGP MESSAGE-----", NULL), PD_ETRUNCATED);
	assert_int_equal(decode_str("-----BEGIN PGP MESSAGE-----\nComment: x", NULL), PD_ETRUNCATED);
	/* no BEGIN at all */
	assert_int_equal(decode_str("hello\nworld\n", NULL), PD_ENOTPGP);
	assert_int_equal(decode_str("", NULL), PD_ENOTPGP);
	/* bad characters in the body */
	assert_int_equal(decode_str("-----BEGIN PGP MESSAGE-----\n\nSGVsbG8s*IHdvcmxkIQ==\n-----END PGP MESSAGE-----\n", NULL), PD_EMALFORMED);
	assert_int_equal(decode_str("-----BEGIN PGP MESSAGE-----\n\nSGVsbG8s\nnot base64 at all!\n-----END PGP MESSAGE-----\n", NULL), PD_EMALFORMED);
	assert_int_equal(decode_str("-----BEGIN PGP MESSAGE-----\n\nSGVsbG8s\xc3\xa9\n-----END PGP MESSAGE-----\n", NULL), PD_EMALFORMED);
	/* data after padding, '=' at a wrong place, dangling sextet */
	assert_int_equal(decode_str("-----BEGIN PGP MESSAGE-----\n\n" HELLO_B64 "SGVs\n-----END PGP MESSAGE-----\n", NULL), PD_EMALFORMED);
	assert_int_equal(decode_str("-----BEGIN PGP MESSAGE-----\n\nS=Vs\n-----END PGP MESSAGE-----\n", NULL), PD_EMALFORMED);
	assert_int_equal(decode_str("-----BEGIN PGP MESSAGE-----\n\nSGVsb\n-----END PGP MESSAGE-----\n", NULL), PD_EMALFORMED);
	/* data after the CRC line */
	assert_int_equal(decode_str("-----BEGIN PGP MESSAGE-----\n\nSGVs\n=AAAA\nbG8s\n-----END PGP MESSAGE-----\n", NULL), PD_EMALFORMED);
	/* END of another kind, text on the END line, a bad header line */
	assert_int_equal(decode_str("-----BEGIN PGP MESSAGE-----\n\n" HELLO_B64 "\n-----END PGP SIGNATURE-----\n", NULL), PD_EMALFORMED);
	assert_int_equal(decode_str("-----BEGIN PGP MESSAGE-----\n\n" HELLO_B64 "\n-----END PGP MESSAGE----- x\n", NULL), PD_EMALFORMED);
	assert_int_equal(decode_str("-----BEGIN PGP MESSAGE-----\n\n" HELLO_B64 "\n-----END PGP MESSAGE----\n", NULL), PD_EMALFORMED);
	assert_int_equal(decode_str("-----BEGIN PGP MESSAGE-----\n\n" HELLO_B64 "\n-----END PGP MESSAGE-------x\n", NULL), PD_EMALFORMED);
	assert_int_equal(decode_str("-----BEGIN PGP MESSAGE-----\nnot a header!\n\n" HELLO_B64 "\n-----END PGP MESSAGE-----\n", NULL), PD_EMALFORMED);
	/* a misshapen BEGIN line is not a BEGIN line */
	assert_int_equal(decode_str("-----BEGIN PGP MESSAGE----- junk\n\n" HELLO_B64 "\n-----END PGP MESSAGE-----\n", NULL), PD_ENOTPGP);
	/* unsupported armor kinds */
	assert_int_equal(decode_str("-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\nhello\n-----BEGIN PGP SIGNATURE-----\n", NULL), PD_EUNSUPPORTED);
	assert_int_equal(decode_str("-----BEGIN PGP MESSAGE, PART 1/2-----\n\n" HELLO_B64 "\n-----END PGP MESSAGE, PART 1/2-----\n", NULL), PD_EUNSUPPORTED);
	assert_int_equal(decode_str("-----BEGIN PGP ARMORED FILE-----\n\n" HELLO_B64 "\n-----END PGP ARMORED FILE-----\n", NULL), PD_EUNSUPPORTED);
	/* huge header */
	struct sbuf s = { 0 };
	sb_str(&s, "-----BEGIN PGP MESSAGE-----\nComment: ");
	for (int i = 0; i < 7000; i++)
		sb_str(&s, "0123456789");
	sb_str(&s, "\n\n" HELLO_B64 "\n-----END PGP MESSAGE-----\n");
	assert_int_equal(decode_str(s.p, NULL), PD_ELIMIT);
	free(s.p);
	s = (struct sbuf){ 0 };
	sb_str(&s, "-----BEGIN PGP MESSAGE-----\n");
	for (int i = 0; i < 7000; i++)
		sb_str(&s, "Comment: x\n");
	sb_str(&s, "\n" HELLO_B64 "\n-----END PGP MESSAGE-----\n");
	assert_int_equal(decode_str(s.p, NULL), PD_ELIMIT);
	free(s.p);

	/* errors are sticky */
	struct pd_armor a;
	size_t used, got;
	uint8_t out[64];
	const char *bad = "-----BEGIN PGP MESSAGE-----\n\n*";
	pd_armor_init(&a);
	assert_int_equal(pd_armor_decode(&a, (const uint8_t *)bad, strlen(bad), &used, out, sizeof(out), &got, false), PD_EMALFORMED);
	assert_int_equal(pd_armor_decode(&a, (const uint8_t *)"SGVs", 4, &used, out, sizeof(out), &got, false), PD_EMALFORMED);
}

static void test_detect(void **state)
{
	(void)state;
	const uint8_t bin[] = { 0xc1, 0x5d, 0x06 };
	assert_int_equal(pd_armor_detect(bin, sizeof(bin), false), 0);
	assert_int_equal(pd_armor_detect(bin, 1, true), 0);
	assert_int_equal(pd_armor_detect(NULL, 0, false), PD_EAGAIN);
	assert_int_equal(pd_armor_detect(NULL, 0, true), PD_ENOTPGP);
	const char *t = "-----BEGIN PGP MESSAGE-----\n";
	for (size_t n = 1; n < 15; n++) {
		assert_int_equal(pd_armor_detect((const uint8_t *)t, n, false), PD_EAGAIN);
		assert_int_equal(pd_armor_detect((const uint8_t *)t, n, true), PD_ENOTPGP);
	}
	assert_int_equal(pd_armor_detect((const uint8_t *)t, 15, false), 1);
	const char *p = "\n\nsome mail text\n  -----BEGIN PGP MESSAGE-----\n-----BEGIN PGP MESSAGE-----\n";
	assert_int_equal(pd_armor_detect((const uint8_t *)p, strlen(p), false), 1);
	assert_int_equal(pd_armor_detect((const uint8_t *)p, 20, false), PD_EAGAIN);
	assert_int_equal(pd_armor_detect((const uint8_t *)p, 20, true), PD_ENOTPGP);
	assert_int_equal(pd_armor_detect((const uint8_t *)"hello\n", 6, true), PD_ENOTPGP);
	/* a line that only looks similar */
	assert_int_equal(pd_armor_detect((const uint8_t *)"-----BEGIN PGX M\n", 17, true), PD_ENOTPGP);
}

static void test_decode_all(void **state)
{
	(void)state;
	size_t l1, l2, b1, b2;
	uint8_t *a1 = read_file("a01-v4-ed25519legacy-pubkey.asc", &l1);
	uint8_t *a2 = read_file("a04-v6-secret-key.asc", &l2);
	uint8_t *x1 = read_file("a01-v4-ed25519legacy-pubkey.bin", &b1);
	uint8_t *x2 = read_file("a04-v6-secret-key.bin", &b2);
	struct sbuf s = { 0 };
	sb_str(&s, "keys follow\n");
	sb_add(&s, a1, l1);
	sb_str(&s, "\n\n");
	sb_add(&s, a2, l2);
	sb_str(&s, "-- \nsignature text\n");
	uint8_t *out;
	size_t out_len;
	assert_int_equal(pd_armor_decode_all((uint8_t *)s.p, s.len, &out, &out_len), 0);
	assert_int_equal(out_len, b1 + b2);
	assert_memory_equal(out, x1, b1);
	assert_memory_equal(out + b1, x2, b2);
	free(out);
	/* binary copied as is */
	assert_int_equal(pd_armor_decode_all(x2, b2, &out, &out_len), 0);
	assert_int_equal(out_len, b2);
	assert_memory_equal(out, x2, b2);
	free(out);
	/* errors in a later block fail the whole */
	sb_str(&s, "-----BEGIN PGP MESSAGE-----\n\nSGVs\n");
	out = NULL;
	assert_int_equal(pd_armor_decode_all((uint8_t *)s.p, s.len, &out, &out_len), PD_ETRUNCATED);
	assert_null(out);
	assert_int_equal(pd_armor_decode_all((const uint8_t *)"text", 4, &out, &out_len), PD_ENOTPGP);
	free(s.p);
	free(a1);
	free(a2);
	free(x1);
	free(x2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_vectors),
		cmocka_unit_test(test_crc_and_lines),
		cmocka_unit_test(test_headers_and_layout),
		cmocka_unit_test(test_preamble_and_trailer),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_detect),
		cmocka_unit_test(test_decode_all),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
