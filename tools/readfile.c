/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "readfile.h"

int pd_read_file(const char *path, size_t max, uint8_t **ret, size_t *ret_len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return -errno;
	size_t cap = 1 << 16, len = 0;
	uint8_t *buf = malloc(cap);
	int r = buf ? 0 : -ENOMEM;
	while (r == 0) {
		if (len == cap) {
			if (cap >= max) {
				r = -EFBIG;
				break;
			}
			uint8_t *n = realloc(buf, cap * 2);
			if (!n) {
				r = -ENOMEM;
				break;
			}
			buf = n;
			cap *= 2;
		}
		size_t got = fread(buf + len, 1, cap - len, f);
		len += got;
		if (got == 0) {
			if (ferror(f))
				r = -EIO;
			break;
		}
	}
	fclose(f);
	if (r < 0) {
		free(buf);
		return r;
	}
	*ret = buf;
	*ret_len = len;
	return 0;
}
