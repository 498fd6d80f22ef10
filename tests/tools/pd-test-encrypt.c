/* SPDX-License-Identifier: MIT */
/*
 * pd-test-encrypt: test-only writer of complete password-encrypted AEAD
 * OpenPGP messages, so that the decryptor meets chunk boundaries, empty
 * final chunks, partial body lengths and tampering far beyond the RFC
 * samples.  Never a real encryptor: its randomness comes from --seed.
 *
 *   v2:     SKESK v6 (iterated+salted S2K SHA-256, KEK by HKDF, RFC 9580
 *           §5.3.2) + SEIPD v2 (OCB, EAX, GCM) holding literal [+ padding]
 *   ocbpkt: SKESK v5 + LibrePGP OCB Encrypted Data packet (tag 20, OCB/EAX)
 *
 * The literal data packet (optionally inside a ZLIB compressed packet) and
 * the encrypted packet are written with random partial body lengths (the
 * first part >= 512 octets) or one definite length.  --fault damages the
 * container body before it is framed, so the packet framing stays valid;
 * --layout writes where every chunk ended up in the output file.
 */
#include <errno.h>
#include <gcrypt.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "aeadenc.h"
#include "pgp/algo.h"
#include "pgp/hkdf.h"

#define S2K_COUNT_OCTET 0x60 /* 65536 octets hashed: fast, still iterated */

static void die(const char *msg)
{
	fprintf(stderr, "pd-test-encrypt: %s\n", msg);
	exit(1);
}

/* ---- seeded PRNG (xorshift64*): reproducible messages ------------------ */

static uint64_t rng_state;

static uint64_t rnd64(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ull;
}

static size_t rnd_range(size_t lo, size_t hi) /* [lo, hi] */
{
	return lo + (size_t)(rnd64() % (hi - lo + 1));
}

static void rnd_bytes(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(rnd64() >> 56);
}

/* ---- growable buffer ----------------------------------------------------- */

struct buf {
	uint8_t *p;
	size_t len, cap;
};

static void put(struct buf *b, const void *d, size_t n)
{
	if (n > SIZE_MAX - b->len)
		die("too large");
	if (b->len + n > b->cap) {
		size_t c = b->cap ? b->cap : 4096;
		while (c < b->len + n)
			c *= 2;
		b->p = realloc(b->p, c);
		if (!b->p)
			die("out of memory");
		b->cap = c;
	}
	if (n)
		memcpy(b->p + b->len, d, n);
	b->len += n;
}

static void put1(struct buf *b, uint8_t v)
{
	put(b, &v, 1);
}

/* New-format definite length. */
static void put_len(struct buf *b, size_t n)
{
	if (n < 192) {
		put1(b, (uint8_t)n);
	} else if (n < 8384) {
		put1(b, (uint8_t)(((n - 192) >> 8) + 192));
		put1(b, (uint8_t)((n - 192) & 0xFF));
	} else {
		if (n > UINT32_MAX)
			die("packet too large");
		uint8_t l[5] = { 0xFF, (uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n };
		put(b, l, 5);
	}
}

static int log2_floor(size_t n)
{
	int k = 0;
	while (n >>= 1)
		k++;
	return k;
}

/*
 * Frame body as packet `tag`.  partial: random partial body lengths (only
 * when the body has >= 512 octets: the first part must be that long), then
 * a definite-length last part (possibly empty).  If map is given, map[i]
 * receives the output offset of body octet i.
 */
static void put_packet(struct buf *b, uint8_t tag, const uint8_t *body, size_t len, bool partial,
                       size_t *map)
{
	size_t o = 0;

	put1(b, (uint8_t)(0xC0 | tag));
	if (partial && len >= 512) {
		bool first = true;
		for (;;) {
			size_t left = len - o;
			int maxk = PD_MIN(log2_floor(left), 20);
			int mink = first ? 9 : 0;
			if (left < 512 && first)
				break;
			if (!first && (left == 0 || rnd_range(0, 7) == 0))
				break; /* end with a definite part */
			/* Small parts now and then, mostly large ones. */
			int k = (int)rnd_range((size_t)(rnd_range(0, 3) ? PD_MAX(mink, maxk - 4) : mink), (size_t)maxk);
			size_t part = (size_t)1 << k;
			put1(b, (uint8_t)(224 + k));
			if (map)
				for (size_t i = 0; i < part; i++)
					map[o + i] = b->len + i;
			put(b, body + o, part);
			o += part;
			first = false;
		}
	}
	put_len(b, len - o);
	if (map)
		for (size_t i = o; i < len; i++)
			map[i] = b->len + i - o;
	put(b, body + o, len - o);
}

/* ---- arguments ------------------------------------------------------------- */

struct opts {
	bool v2;
	uint8_t aead, cipher;
	int chunk;        /* chunk octet, -1: random 0..16 */
	bool partial;
	bool zlib;
	bool empty_final;
	const char *password_file, *layout, *in, *out;
	uint64_t seed;
	/* faults applied to the container body */
	long flip_chunk;  /* -1 none; nchunks: the final tag */
	long drop_chunk, swap_chunk;
	size_t cut;       /* octets cut from the end of the body (the final tag) */
	size_t flip_off;  /* octet within the flipped chunk (mod its length) */
};

static void usage(FILE *f)
{
	fputs("Usage: pd-test-encrypt [OPTION]... IN OUT   (test code: NOT an encryptor to use)\n"
	      "  --format v2|ocbpkt        SKESK v6 + SEIPD v2, or SKESK v5 + tag-20 OCB packet\n"
	      "  --aead ocb|eax|gcm        AEAD mode (ocbpkt: ocb or eax)\n"
	      "  --cipher aes128|aes192|aes256\n"
	      "  --chunk N|random          chunk octet c (chunk = 2^(c+6)); random: 0..16\n"
	      "  --partial random|none     partial body lengths of random sizes, or definite\n"
	      "  --compress none|zlib      literal packet inside a ZLIB compressed packet\n"
	      "  --empty-final-chunk       add an empty chunk before the final tag\n"
	      "                            (plaintext must be a multiple of the chunk size)\n"
	      "  --password-file F         password: F's first line\n"
	      "  --seed N                  PRNG seed (default 1): same seed, same message\n"
	      "  --layout F                write the layout (JSON) to F\n"
	      "  --fault flip:I[:OFF]      flip a bit of chunk I (its ciphertext or tag; I = number\n"
	      "                            of chunks: the final tag)\n"
	      "  --fault drop:I            leave chunk I (and its tag) out\n"
	      "  --fault swap:I            swap chunks I and I+1\n"
	      "  --fault cut:N             cut N octets from the end of the container body\n",
	      f);
}

static long parse_num(const char *s, long max)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 0 || v > max)
		die("bad number");
	return v;
}

static void parse_fault(struct opts *o, const char *s)
{
	if (!strncmp(s, "flip:", 5)) {
		const char *c = strchr(s + 5, ':');
		char tmp[32];
		size_t n = c ? (size_t)(c - s - 5) : strlen(s + 5);
		if (n >= sizeof(tmp))
			die("bad --fault");
		memcpy(tmp, s + 5, n);
		tmp[n] = 0;
		o->flip_chunk = parse_num(tmp, 1L << 40);
		o->flip_off = c ? (size_t)parse_num(c + 1, 1L << 40) : 0;
	} else if (!strncmp(s, "drop:", 5)) {
		o->drop_chunk = parse_num(s + 5, 1L << 40);
	} else if (!strncmp(s, "swap:", 5)) {
		o->swap_chunk = parse_num(s + 5, 1L << 40);
	} else if (!strncmp(s, "cut:", 4)) {
		o->cut = (size_t)parse_num(s + 4, 1L << 40);
	} else {
		die("bad --fault");
	}
}

static void parse_args(int argc, char **argv, struct opts *o)
{
	enum { O_FORMAT = 256, O_AEAD, O_CIPHER, O_CHUNK, O_PARTIAL, O_COMPRESS, O_EMPTY, O_PW, O_SEED,
	       O_LAYOUT, O_FAULT };
	static const struct option lo[] = {
		{ "format", required_argument, NULL, O_FORMAT },
		{ "aead", required_argument, NULL, O_AEAD },
		{ "cipher", required_argument, NULL, O_CIPHER },
		{ "chunk", required_argument, NULL, O_CHUNK },
		{ "partial", required_argument, NULL, O_PARTIAL },
		{ "compress", required_argument, NULL, O_COMPRESS },
		{ "empty-final-chunk", no_argument, NULL, O_EMPTY },
		{ "password-file", required_argument, NULL, O_PW },
		{ "seed", required_argument, NULL, O_SEED },
		{ "layout", required_argument, NULL, O_LAYOUT },
		{ "fault", required_argument, NULL, O_FAULT },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int c;

	*o = (struct opts){ .v2 = true, .aead = PD_AEAD_OCB, .cipher = 9, .chunk = -1, .seed = 1,
		            .flip_chunk = -1, .drop_chunk = -1, .swap_chunk = -1 };
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case O_FORMAT:
			if (!strcmp(optarg, "v2"))
				o->v2 = true;
			else if (!strcmp(optarg, "ocbpkt"))
				o->v2 = false;
			else
				die("--format must be v2 or ocbpkt");
			break;
		case O_AEAD:
			if (!strcmp(optarg, "eax"))
				o->aead = PD_AEAD_EAX;
			else if (!strcmp(optarg, "ocb"))
				o->aead = PD_AEAD_OCB;
			else if (!strcmp(optarg, "gcm"))
				o->aead = PD_AEAD_GCM;
			else
				die("--aead must be ocb, eax or gcm");
			break;
		case O_CIPHER:
			if (!strcmp(optarg, "aes128"))
				o->cipher = 7;
			else if (!strcmp(optarg, "aes192"))
				o->cipher = 8;
			else if (!strcmp(optarg, "aes256"))
				o->cipher = 9;
			else
				die("--cipher must be aes128, aes192 or aes256");
			break;
		case O_CHUNK:
			o->chunk = strcmp(optarg, "random") ? (int)parse_num(optarg, 16) : -1;
			break;
		case O_PARTIAL:
			if (strcmp(optarg, "random") && strcmp(optarg, "none"))
				die("--partial must be random or none");
			o->partial = !strcmp(optarg, "random");
			break;
		case O_COMPRESS:
			if (strcmp(optarg, "zlib") && strcmp(optarg, "none"))
				die("--compress must be none or zlib");
			o->zlib = !strcmp(optarg, "zlib");
			break;
		case O_EMPTY: o->empty_final = true; break;
		case O_PW: o->password_file = optarg; break;
		case O_SEED: o->seed = strtoull(optarg, NULL, 0); break;
		case O_LAYOUT: o->layout = optarg; break;
		case O_FAULT: parse_fault(o, optarg); break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (argc - optind != 2 || !o->password_file) {
		usage(stderr);
		exit(2);
	}
	if (!o->v2 && o->aead == PD_AEAD_GCM)
		die("the OCB packet has no GCM");
	o->in = argv[optind];
	o->out = argv[optind + 1];
}

static uint8_t *read_file(const char *path, size_t *ret_len, bool first_line)
{
	FILE *f = fopen(path, "rb");
	struct buf b = { 0 };
	uint8_t tmp[65536];
	size_t n;

	if (!f)
		die("cannot open an input file");
	while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0)
		put(&b, tmp, n);
	if (ferror(f))
		die("read error");
	fclose(f);
	put1(&b, 0);
	b.len--;
	if (first_line) {
		uint8_t *nl = memchr(b.p, '\n', b.len);
		if (nl)
			b.len = (size_t)(nl - b.p);
		if (b.len && b.p[b.len - 1] == '\r')
			b.len--;
	}
	*ret_len = b.len;
	return b.p;
}

/* ---- the message ----------------------------------------------------------- */

/* Literal data packet (binary, no name, date 0), optionally compressed;
 * records where the file's octets sit in the stream (uncompressed only). */
static void inner_stream(const struct opts *o, const uint8_t *data, size_t len, struct buf *inner,
                         size_t **ret_litmap)
{
	struct buf lit = { 0 }, litpkt = { 0 };
	size_t *map = NULL;

	put(&lit, (const uint8_t[]){ 'b', 0, 0, 0, 0, 0 }, 6);
	put(&lit, data, len);
	if (!o->zlib) {
		map = malloc((lit.len + 1) * sizeof(size_t));
		if (!map)
			die("out of memory");
	}
	put_packet(&litpkt, 11, lit.p, lit.len, o->partial, map);
	if (o->zlib) {
		uLongf zl = compressBound(litpkt.len);
		uint8_t *z = malloc(zl + 1);
		if (!z)
			die("out of memory");
		z[0] = 2; /* ZLIB */
		if (compress2(z + 1, &zl, litpkt.p, litpkt.len, 6) != Z_OK)
			die("compress2 failed");
		put_packet(inner, 8, z, zl + 1, o->partial, NULL);
		free(z);
	} else {
		put(inner, litpkt.p, litpkt.len);
		/* The file's octet i is literal body octet 6 + i. */
		memmove(map, map + 6, len * sizeof(size_t));
	}
	*ret_litmap = map;
	free(lit.p);
	free(litpkt.p);
}

/* Iterated+salted S2K (type 3, SHA-256) of the password to keylen octets. */
static void s2k(const uint8_t *pw, size_t pwlen, const uint8_t *salt, uint8_t *key, size_t keylen,
                uint8_t *spec)
{
	unsigned long count = (16ul + (S2K_COUNT_OCTET & 15)) << ((S2K_COUNT_OCTET >> 4) + 6);
	spec[0] = 3;
	spec[1] = 8;
	memcpy(spec + 2, salt, 8);
	spec[10] = S2K_COUNT_OCTET;
	if (gcry_kdf_derive(pw, pwlen, GCRY_KDF_ITERSALTED_S2K, GCRY_MD_SHA256, salt, 8, count, keylen, key))
		die("S2K failed");
}

static void seal(uint8_t cipher, uint8_t aead, const uint8_t *key, const uint8_t *nonce, const uint8_t *ad,
                 size_t adlen, uint8_t *data, size_t len, uint8_t *tag)
{
	gcry_cipher_hd_t h;
	if (gcry_cipher_open(&h, pd_sym_gcry(cipher), pd_aead_gcry_mode(aead), 0) ||
	    gcry_cipher_setkey(h, key, pd_sym_keylen(cipher)) ||
	    gcry_cipher_setiv(h, nonce, pd_aead_noncelen(aead)) || gcry_cipher_authenticate(h, ad, adlen) ||
	    gcry_cipher_final(h) || gcry_cipher_encrypt(h, data, len, NULL, 0) || gcry_cipher_gettag(h, tag, 16))
		die("AEAD failed");
	gcry_cipher_close(h);
}

/* SKESK v6 (v2) or v5 (ocbpkt) carrying session key sk. */
static void skesk(const struct opts *o, const uint8_t *pw, size_t pwlen, const uint8_t *sk, struct buf *out)
{
	size_t keylen = pd_sym_keylen(o->cipher), nlen = pd_aead_noncelen(o->aead);
	uint8_t salt[8], spec[11], s2kkey[32], kek[32], nonce[16], esk[32], tag[16];
	uint8_t ad[4] = { 0xC3, o->v2 ? 6 : 5, o->cipher, o->aead };
	struct buf b = { 0 };

	rnd_bytes(salt, 8);
	rnd_bytes(nonce, nlen);
	s2k(pw, pwlen, salt, s2kkey, keylen, spec);
	if (o->v2) {
		/* KEK = HKDF-SHA256(no salt, S2K output, C3 06 cipher aead). */
		if (pd_hkdf(GCRY_MD_SHA256, NULL, 0, s2kkey, keylen, ad, 4, kek, keylen) < 0)
			die("HKDF failed");
	} else {
		memcpy(kek, s2kkey, keylen); /* LibrePGP: the S2K output is the KEK */
	}
	memcpy(esk, sk, keylen);
	seal(o->cipher, o->aead, kek, nonce, ad, 4, esk, keylen, tag);
	put1(&b, ad[1]);
	if (o->v2)
		put1(&b, (uint8_t)(3 + sizeof(spec) + nlen)); /* count of cipher .. nonce */
	put1(&b, o->cipher);
	put1(&b, o->aead);
	if (o->v2)
		put1(&b, sizeof(spec));
	put(&b, spec, sizeof(spec));
	put(&b, nonce, nlen);
	put(&b, esk, keylen);
	put(&b, tag, 16);
	put_packet(out, 3, b.p, b.len, false, NULL);
	free(b.p);
}

/* Apply --fault to the container body; keeps ct's offsets meaning "before". */
static void apply_faults(const struct opts *o, struct te_ct *ct)
{
	if (o->flip_chunk >= 0) {
		size_t i = (size_t)o->flip_chunk, off, span;
		if (i > ct->nchunks)
			die("flip: no such chunk");
		if (i == ct->nchunks) {
			off = ct->final_off;
			span = 16;
		} else {
			off = ct->chunk_off[i];
			span = ct->chunk_len[i] + 16;
		}
		off += o->flip_off % span;
		ct->body[off] ^= (uint8_t)(1u << (o->flip_off % 8));
	}
	if (o->swap_chunk >= 0) {
		size_t i = (size_t)o->swap_chunk;
		if (i + 1 >= ct->nchunks || ct->chunk_len[i] != ct->chunk_len[i + 1])
			die("swap: needs two chunks of the same length");
		size_t l = ct->chunk_len[i] + 16;
		uint8_t *t = malloc(l);
		if (!t)
			die("out of memory");
		memcpy(t, ct->body + ct->chunk_off[i], l);
		memmove(ct->body + ct->chunk_off[i], ct->body + ct->chunk_off[i + 1], l);
		memcpy(ct->body + ct->chunk_off[i + 1], t, l);
		free(t);
	}
	if (o->drop_chunk >= 0) {
		size_t i = (size_t)o->drop_chunk;
		if (i >= ct->nchunks)
			die("drop: no such chunk");
		size_t off = ct->chunk_off[i], l = ct->chunk_len[i] + 16;
		memmove(ct->body + off, ct->body + off + l, ct->len - off - l);
		ct->len -= l;
	}
	if (o->cut) {
		if (o->cut > ct->len - ct->hdrlen)
			die("cut: longer than the body");
		ct->len -= o->cut;
	}
}

int main(int argc, char **argv)
{
	struct opts o;
	size_t datalen, pwlen;

	parse_args(argc, argv, &o);
	if (!gcry_check_version(GCRYPT_VERSION))
		die("libgcrypt version mismatch");
	gcry_control(GCRYCTL_DISABLE_SECMEM, 0); /* test tool: no secrets worth locking */
	gcry_control(GCRYCTL_INITIALIZATION_FINISHED, 0);
	rng_state = o.seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
	if (!rng_state)
		rng_state = 1;

	uint8_t *data = read_file(o.in, &datalen, false);
	uint8_t *pw = read_file(o.password_file, &pwlen, true);
	uint8_t c = o.chunk < 0 ? (uint8_t)rnd_range(0, 16) : (uint8_t)o.chunk;
	size_t chunk = (size_t)1 << (c + 6);

	/* The plaintext stream inside the container. */
	struct buf inner = { 0 };
	size_t *litmap = NULL;
	inner_stream(&o, data, datalen, &inner, &litmap);
	size_t padlen = 0;
	if (o.v2) {
		/* Padding packet (tag 21) of random octets. */
		uint8_t pad[64];
		padlen = rnd_range(1, sizeof(pad));
		rnd_bytes(pad, padlen);
		put_packet(&inner, 21, pad, padlen, false, NULL);
	}
	if (o.empty_final && inner.len % chunk) {
		/* Pad the stream to a chunk multiple so that an empty chunk may
		 * follow: grow the padding packet (v2) or refuse. */
		if (!o.v2)
			die("--empty-final-chunk: the stream is not a multiple of the chunk size");
		size_t base = inner.len - padlen - 2;
		size_t want = (base + 2 + chunk - 1) / chunk * chunk;
		size_t pl = 0;
		/* The length octets grow with the padding: try each header size. */
		for (bool found = false; !found; want += chunk) {
			static const size_t hls[] = { 2, 3, 6 };
			for (size_t h = 0; h < 3 && !found; h++) {
				if (want < base + hls[h] + 1)
					continue;
				pl = want - base - hls[h];
				found = (hls[h] == 2 && pl < 192) || (hls[h] == 3 && pl >= 192 && pl < 8384) ||
				        (hls[h] == 6 && pl >= 8384);
			}
			if (found)
				break;
		}
		uint8_t *pad = calloc(1, pl + 1);
		if (!pad)
			die("out of memory");
		rnd_bytes(pad, pl);
		inner.len = base;
		put_packet(&inner, 21, pad, pl, false, NULL);
		free(pad);
		if (inner.len % chunk)
			die("internal: padding did not reach a chunk boundary");
	}

	/* Session key, SKESK, container. */
	size_t keylen = pd_sym_keylen(o.cipher);
	uint8_t sk[32], hdrrnd[32];
	rnd_bytes(sk, keylen);
	rnd_bytes(hdrrnd, sizeof(hdrrnd));
	struct buf msg = { 0 };
	skesk(&o, pw, pwlen, sk, &msg);
	struct te_ct ct;
	if (te_encrypt(&ct, o.v2 ? 18 : 20, o.cipher, o.aead, c, sk, hdrrnd, inner.p, inner.len, o.empty_final) < 0)
		die("encryption failed");
	apply_faults(&o, &ct);
	size_t *map = malloc((ct.len + 1) * sizeof(size_t));
	if (!map)
		die("out of memory");
	put_packet(&msg, o.v2 ? 18 : 20, ct.body, ct.len, o.partial, map);

	FILE *f = fopen(o.out, "wb");
	if (!f || fwrite(msg.p, 1, msg.len, f) != msg.len || fclose(f))
		die("cannot write the output");

	if (o.layout) {
		/* Offsets of the unfaulted layout, mapped into the output file
		 * (valid for flips; drop/cut shift what follows). */
		FILE *l = fopen(o.layout, "w");
		if (!l)
			die("cannot write the layout");
		fprintf(l, "{\"chunk_octet\": %u, \"chunk\": %zu, \"nchunks\": %zu, \"inner_len\": %zu, "
		           "\"file_len\": %zu, \"body_len\": %zu, \"hdrlen\": %zu,\n",
		        c, chunk, ct.nchunks, inner.len, msg.len, ct.len, ct.hdrlen);
		/* Per chunk: [file offset of its first ciphertext octet, file
		 * offset of its tag, ciphertext length, inner offset]. */
		fputs(" \"chunks\": [", l);
		for (size_t i = 0; i < ct.nchunks; i++) {
			size_t co = ct.chunk_off[i], tl = co + ct.chunk_len[i];
			fprintf(l, "%s[%zu, %zu, %zu, %zu]", i ? ", " : "", co < ct.len ? map[co] : 0,
			        tl < ct.len ? map[tl] : 0, ct.chunk_len[i], i * chunk);
		}
		fprintf(l, "],\n \"final_tag\": %zu,\n", ct.final_off < ct.len ? map[ct.final_off] : 0);
		/* Inner offset of each file octet is monotone: give the inner
		 * offset of the first file octet of every chunk-aligned run, as
		 * the count of file octets wholly before inner offset k*chunk. */
		fputs(" \"data_before_chunk\": ", l);
		if (litmap) {
			fputc('[', l);
			size_t j = 0;
			for (size_t i = 0; i <= ct.nchunks; i++) {
				size_t lim = i * chunk;
				while (j < datalen && litmap[j] < lim)
					j++;
				fprintf(l, "%s%zu", i ? ", " : "", j);
			}
			fputs("]\n", l);
		} else {
			fputs("null\n", l);
		}
		fputs("}\n", l);
		if (fclose(l))
			die("cannot write the layout");
	}
	free(map);
	te_ct_free(&ct);
	free(msg.p);
	free(inner.p);
	free(litmap);
	free(data);
	free(pw);
	return 0;
}
