/* SPDX-License-Identifier: MIT */
/*
 * Compressed Data stage: a thin streaming wrapper over zlib and libbz2.
 * Memory is the fixed stream state only (zlib's 32 KiB window, bzip2's
 * block arrays sized by the stream header, at most ~3.6 MB with small=0);
 * nothing grows with the output, so a bomb costs time, which the caller's
 * output and ratio limits bound.
 */
#include <limits.h>
#include <bzlib.h>
#include <zlib.h>

#include "pgp/inflate.h"

struct pd_inflate {
	uint8_t algo;
	bool done;          /* the compressed stream has ended */
	int err;            /* sticky error: the libraries' state is undefined after one */
	union {
		z_stream zs;
		bz_stream bz;
	} u;
};

uint64_t pd_inflate_memory(uint8_t algo)
{
	switch (algo) {
	case 1: case 2: /* the state, the 32 KiB window */
		return sizeof(struct pd_inflate) + (48u << 10);
	case 3: /* bzip2, small=0: 64 KiB + 4 x 900k block arrays at level 9 */
		return sizeof(struct pd_inflate) + 3700000u;
	default:
		return sizeof(struct pd_inflate);
	}
}

int pd_inflate_new(struct pd_inflate **ret, uint8_t algo)
{
	if (algo > 3)
		return PD_EUNSUPPORTED;
	struct pd_inflate *z = calloc(1, sizeof(*z));
	if (!z)
		return -ENOMEM;
	z->algo = algo;
	int r = 0;
	if (algo == 1 || algo == 2) {
		/* -15: raw deflate (RFC 1951); 15: zlib wrapper (RFC 1950) */
		r = inflateInit2(&z->u.zs, algo == 1 ? -15 : 15);
		r = r == Z_OK ? 0 : r == Z_MEM_ERROR ? -ENOMEM : PD_EINTERNAL;
	} else if (algo == 3) {
		r = BZ2_bzDecompressInit(&z->u.bz, 0, 0);
		r = r == BZ_OK ? 0 : r == BZ_MEM_ERROR ? -ENOMEM : PD_EINTERNAL;
	}
	if (r < 0) {
		free(z);
		return r;
	}
	*ret = z;
	return 0;
}

/* Both libraries count in unsigned int; larger buffers are simply offered
 * in parts, since returning with input left over is normal. */
static unsigned clamp_uint(size_t n)
{
	return n > UINT_MAX ? UINT_MAX : (unsigned)n;
}

static int run_zlib(struct pd_inflate *z, const uint8_t *in, size_t inlen, size_t *used,
                    uint8_t *out, size_t outcap, size_t *made, bool eof)
{
	z_stream *zs = &z->u.zs;
	for (;;) {
		unsigned ai = clamp_uint(inlen - *used), ao = clamp_uint(outcap - *made);
		/* zlib's API is not const; in/out may be NULL with no octets, and
		 * NULL + 0 is undefined: only offset pointers that point somewhere */
		zs->next_in = in ? (Bytef *)(uintptr_t)(in + *used) : NULL;
		zs->avail_in = ai;
		zs->next_out = out ? out + *made : NULL;
		zs->avail_out = ao;
		int zr = inflate(zs, Z_NO_FLUSH);
		*used += ai - zs->avail_in;
		*made += ao - zs->avail_out;
		if (zr == Z_STREAM_END) {
			z->done = true;
			return 1;
		}
		if (zr == Z_MEM_ERROR)
			return -ENOMEM;
		if (zr != Z_OK && zr != Z_BUF_ERROR) /* Z_DATA_ERROR, Z_NEED_DICT, Z_STREAM_ERROR */
			return PD_EINTEGRITY;
		bool progress = ai != zs->avail_in || ao != zs->avail_out;
		if (*used == inlen || *made == outcap || !progress)
			break;
	}
	/* All input given and room left over: zlib has nothing more to say. */
	if (eof && *used == inlen && *made < outcap)
		return PD_EINTEGRITY;
	return 0;
}

static int run_bzip2(struct pd_inflate *z, const uint8_t *in, size_t inlen, size_t *used,
                     uint8_t *out, size_t outcap, size_t *made, bool eof)
{
	bz_stream *bz = &z->u.bz;
	for (;;) {
		unsigned ai = clamp_uint(inlen - *used), ao = clamp_uint(outcap - *made);
		bz->next_in = in ? (char *)(uintptr_t)(in + *used) : NULL;
		bz->avail_in = ai;
		bz->next_out = out ? (char *)(out + *made) : NULL;
		bz->avail_out = ao;
		int br = BZ2_bzDecompress(bz);
		*used += ai - bz->avail_in;
		*made += ao - bz->avail_out;
		if (br == BZ_STREAM_END) {
			z->done = true;
			return 1;
		}
		if (br == BZ_MEM_ERROR)
			return -ENOMEM;
		if (br != BZ_OK) /* BZ_DATA_ERROR, BZ_DATA_ERROR_MAGIC, BZ_PARAM_ERROR */
			return PD_EINTEGRITY;
		bool progress = ai != bz->avail_in || ao != bz->avail_out;
		if (*used == inlen || *made == outcap || !progress)
			break;
	}
	/* BZ2_bzDecompress returns BZ_OK with room left only when it needs input. */
	if (eof && *used == inlen && *made < outcap)
		return PD_EINTEGRITY;
	return 0;
}

int pd_inflate_run(struct pd_inflate *z, const uint8_t *in, size_t inlen, size_t *ret_used,
                   uint8_t *out, size_t outcap, size_t *ret_out, bool eof)
{
	size_t used = 0, made = 0;
	int r;

	if (z->err) {
		return z->err;
	} else if (z->done) {
		r = 1;
	} else if (z->algo == 0) {
		used = made = PD_MIN(inlen, outcap);
		if (made)
			memcpy(out, in, made);
		r = eof && used == inlen ? 1 : 0;
		z->done = r == 1;
	} else if (z->algo == 3) {
		r = run_bzip2(z, in, inlen, &used, out, outcap, &made, eof);
	} else {
		r = run_zlib(z, in, inlen, &used, out, outcap, &made, eof);
	}
	if (r < 0) {
		z->err = r;
		return r;
	}
	*ret_used = used;
	*ret_out = made;
	return r;
}

struct pd_inflate *pd_inflate_free(struct pd_inflate *z)
{
	if (!z)
		return NULL;
	if (z->algo == 1 || z->algo == 2)
		inflateEnd(&z->u.zs);
	else if (z->algo == 3)
		BZ2_bzDecompressEnd(&z->u.bz);
	free(z);
	return NULL;
}
