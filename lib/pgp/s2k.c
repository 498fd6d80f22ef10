/* SPDX-License-Identifier: MIT */
/*
 * String-to-key specifiers (RFC 9580 §3.7).  Parsing is pure; derivation
 * goes to libgcrypt (gcry_kdf_derive for the OpenPGP S2Ks, gcry_kdf_open
 * for Argon2id).  Every cost the specifier chooses is checked against
 * pd_limits before any work starts.
 */
#include <gcrypt.h>

#include "pgp/algo.h"
#include "pgp/s2k.h"
#include "worker.h"

int pd_s2k_parse(const uint8_t *p, size_t len, struct pd_s2k *ret, size_t *ret_used)
{
	struct pd_s2k s = { 0 };
	size_t need;

	if (len < 1)
		return PD_EMALFORMED;
	s.type = p[0];
	switch (s.type) {
	case 0: need = 2; break;
	case 1: need = 10; break;
	case 3: need = 11; break;
	case 4: need = 20; break;
	case 101: need = 6; break; /* 65 hash 'G' 'N' 'U' mode */
	default: return PD_EUNSUPPORTED;
	}
	if (len < need)
		return PD_EMALFORMED;
	switch (s.type) {
	case 3: {
		uint8_t c = p[10];
		s.count = (uint32_t)(16 + (c & 15)) << ((c >> 4) + 6);
	}
		/* fall through */
	case 1:
		memcpy(s.salt, p + 2, 8);
		/* fall through */
	case 0:
		s.hash = p[1];
		if (!pd_hash_gcry(s.hash))
			return PD_EUNSUPPORTED;
		break;
	case 4:
		memcpy(s.salt, p + 1, 16);
		s.t = p[17];
		s.p = p[18];
		s.m = p[19];
		/* RFC 9580 §3.7.1.4: t, p >= 1 and 3 + ceil(log2 p) <= m <= 31. */
		if (s.t == 0 || s.p == 0 || s.m > 31)
			return PD_EMALFORMED;
		{
			unsigned lg = 0;
			while ((1u << lg) < s.p)
				lg++;
			if (s.m < 3 + lg)
				return PD_EMALFORMED;
		}
		break;
	case 101:
		s.hash = p[1];
		if (memcmp(p + 2, "GNU", 3) != 0)
			return PD_EUNSUPPORTED;
		/* GnuPG stores mode 1000+n as the octet n: 1 gnu-dummy, 2 divert-to-card. */
		s.gnu_mode = p[5];
		break;
	}
	*ret = s;
	*ret_used = need;
	return 0;
}

int pd_s2k_check(const struct pd_s2k *s, const struct pd_limits *lim)
{
	if (!lim)
		return 0;
	if (s->type == 3 && lim->max_s2k_count && s->count > lim->max_s2k_count)
		return PD_ELIMIT;
	if (s->type == 4) {
		uint64_t kib = (uint64_t)1 << s->m;
		if ((lim->max_argon2_kib && kib > lim->max_argon2_kib) ||
		    (lim->max_argon2_passes && s->t > lim->max_argon2_passes) ||
		    (lim->max_argon2_lanes && s->p > lim->max_argon2_lanes))
			return PD_ELIMIT;
	}
	return 0;
}

uint64_t pd_s2k_work_kib(const struct pd_s2k *s, size_t keylen)
{
	switch (s->type) {
	case 3: {
		/* OpenPGP S2K hashes the whole count again for each block of key
		 * beyond the hash's size (SHA-1 for an AES-256 key: twice) */
		int md = pd_hash_gcry(s->hash);
		size_t dl = md ? gcry_md_get_algo_dlen(md) : 0;
		uint64_t passes = dl ? (keylen + dl - 1) / dl : 1;
		return PD_MAX((uint64_t)s->count / 1024, 1) * PD_MAX(passes, 1);
	}
	case 4:
		return PD_MAX(((uint64_t)s->t << s->m) / 2, 1);
	default:
		return 1; /* simple, salted: one hash of the password */
	}
}

int pd_s2k_derive(const struct pd_s2k *s, const char *pass, size_t passlen, uint8_t *out,
                  size_t outlen, const struct pd_limits *lim)
{
	gcry_error_t e;

	if (!out || outlen == 0 || outlen > 64)
		return PD_EINTERNAL;
	if (!pass)
		passlen = 0;
	if (pd_s2k_check(s, lim) < 0)
		return PD_ELIMIT;
	switch (s->type) {
	case 0: case 1: case 3: {
		int md = pd_hash_gcry(s->hash);
		if (!md)
			return PD_EUNSUPPORTED;
		/* libgcrypt refuses an empty passphrase; an empty one still has a
		 * well-defined S2K output, so hash it by hand (cheap: nothing to
		 * iterate over but the salt). */
		if (passlen == 0)
			break;
		int algo = s->type == 0 ? GCRY_KDF_SIMPLE_S2K
		         : s->type == 1 ? GCRY_KDF_SALTED_S2K : GCRY_KDF_ITERSALTED_S2K;
		e = gcry_kdf_derive(pass, passlen, algo, md, s->type ? s->salt : NULL, s->type ? 8 : 0,
		                    s->type == 3 ? s->count : 0, outlen, out);
		return pd_err_from_gcry(e);
	}
	case 4: {
		uint64_t kib = (uint64_t)1 << s->m;
		unsigned long param[4] = { outlen, s->t, (unsigned long)kib, s->p };
		gcry_kdf_hd_t hd;
		/* An empty password is legal for Argon2 (RFC 9106). */
		e = gcry_kdf_open(&hd, GCRY_KDF_ARGON2, GCRY_KDF_ARGON2ID, param, 4, pass ? pass : "",
		                  passlen, s->salt, 16, NULL, 0, NULL, 0);
		if (e)
			return pd_err_from_gcry(e);
		e = gcry_kdf_compute(hd, NULL);
		if (!e)
			e = gcry_kdf_final(hd, outlen, out);
		gcry_kdf_close(hd);
		return pd_err_from_gcry(e);
	}
	case 101:
		return PD_EUNSUPPORTED;
	default:
		return PD_EUNSUPPORTED;
	}

	/* Empty passphrase, types 0/1/3: hash contexts preloaded with i zero
	 * octets, each fed the salt (the "iterated" count covers the salt too,
	 * and at least one full salt||pass is always hashed). */
	int md = pd_hash_gcry(s->hash);
	size_t hlen = pd_hash_len(s->hash);
	uint8_t zeros[64] = { 0 }, rep[1024];
	for (size_t i = 0; i < sizeof(rep); i += 8)
		memcpy(rep + i, s->salt, 8);
	for (size_t done = 0, i = 0; done < outlen; i++) {
		gcry_md_hd_t h;
		e = gcry_md_open(&h, md, GCRY_MD_FLAG_SECURE);
		if (e)
			return pd_err_from_gcry(e);
		gcry_md_write(h, zeros, i);
		if (s->type == 1)
			gcry_md_write(h, s->salt, 8);
		else if (s->type == 3)
			for (uint64_t left = PD_MAX(s->count, 8u); left; left -= PD_MIN(left, sizeof(rep)))
				gcry_md_write(h, rep, PD_MIN(left, sizeof(rep)));
		size_t n = PD_MIN(hlen, outlen - done);
		memcpy(out + done, gcry_md_read(h, md), n);
		gcry_md_close(h);
		done += n;
	}
	return 0;
}
