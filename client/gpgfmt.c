/* SPDX-License-Identifier: MIT */
/* gpg-compatible text: session keys, status lines (see gpgfmt.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gpgfmt.h"

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

int pdc_sk_parse(const char *s, size_t n, uint8_t *ret_algo, uint8_t *key, size_t *ret_len)
{
	size_t i = 0;
	unsigned algo = 0;
	uint8_t k[PDC_SESSION_KEY_MAX];

	while (n && is_space(s[n - 1]))
		n--;
	while (i < n && is_space(s[i]))
		i++;
	size_t d0 = i;
	for (; i < n && s[i] >= '0' && s[i] <= '9' && i - d0 < 3; i++)
		algo = algo * 10 + (unsigned)(s[i] - '0');
	if (i == d0 || i >= n || s[i] != ':' || algo == 0 || algo > 255)
		return -EINVAL;
	i++;
	size_t hex = n - i;
	if (hex == 0 || hex % 2 || hex / 2 > sizeof(k))
		return -EINVAL;
	for (size_t j = 0; j < hex / 2; j++) {
		int hi = hexval(s[i + 2 * j]), lo = hexval(s[i + 2 * j + 1]);
		if (hi < 0 || lo < 0) {
			explicit_bzero(k, sizeof(k));
			return -EINVAL;
		}
		k[j] = (uint8_t)(hi << 4 | lo);
	}
	memcpy(key, k, hex / 2);
	explicit_bzero(k, sizeof(k));
	*ret_algo = (uint8_t)algo;
	*ret_len = hex / 2;
	return 0;
}

int pdc_sk_format(char *buf, size_t cap, uint8_t algo, const uint8_t *key, size_t len)
{
	static const char hx[] = "0123456789ABCDEF";
	int n = snprintf(buf, cap, "%u:", (unsigned)algo);
	if (n < 0 || (size_t)n + 2 * len + 1 > cap)
		return -ENOBUFS;
	for (size_t i = 0; i < len; i++) {
		buf[n++] = hx[key[i] >> 4];
		buf[n++] = hx[key[i] & 15];
	}
	buf[n] = 0;
	return n;
}
