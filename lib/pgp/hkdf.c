/* SPDX-License-Identifier: MIT */
/* HKDF (RFC 5869) with libgcrypt HMAC, in secure memory. */
#include <gcrypt.h>

#include "pgp/hkdf.h"
#include "worker.h"

int pd_hkdf(int md, const uint8_t *salt, size_t saltlen, const uint8_t *ikm, size_t ikmlen,
            const uint8_t *info, size_t infolen, uint8_t *out, size_t outlen)
{
	size_t hlen = gcry_md_get_algo_dlen(md);
	uint8_t zero[64] = { 0 };
	uint8_t prk[64], t[64];
	gcry_md_hd_t h = NULL;
	int r;

	if (!hlen || hlen > sizeof(prk) || outlen > 255 * hlen)
		return -EINVAL;
	r = pd_err_from_gcry(gcry_md_open(&h, md, GCRY_MD_FLAG_HMAC | GCRY_MD_FLAG_SECURE));
	if (r < 0)
		return r;
	/* Extract: PRK = HMAC(salt or hlen zero octets, IKM). */
	r = pd_err_from_gcry(gcry_md_setkey(h, salt && saltlen ? salt : zero, salt && saltlen ? saltlen : hlen));
	if (r < 0)
		goto out;
	gcry_md_write(h, ikm, ikmlen);
	memcpy(prk, gcry_md_read(h, md), hlen);
	/* Expand: T(i) = HMAC(PRK, T(i-1) || info || i). */
	size_t done = 0, tlen = 0;
	for (uint8_t i = 1; done < outlen; i++) {
		gcry_md_reset(h);
		r = pd_err_from_gcry(gcry_md_setkey(h, prk, hlen));
		if (r < 0)
			goto out;
		gcry_md_write(h, t, tlen);
		gcry_md_write(h, info, infolen);
		gcry_md_write(h, &i, 1);
		memcpy(t, gcry_md_read(h, md), hlen);
		tlen = hlen;
		size_t n = PD_MIN(hlen, outlen - done);
		memcpy(out + done, t, n);
		done += n;
	}
	r = 0;
out:
	pd_wipe(prk, sizeof(prk));
	pd_wipe(t, sizeof(t));
	gcry_md_close(h);
	return r;
}
