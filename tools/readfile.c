/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "readfile.h"

/* Key files and passphrases come through here: no copy of their bytes is
 * left in memory given back to the allocator.  So read(2), not stdio (whose
 * buffer would hold a copy), and growth by allocate, copy, wipe, free:
 * realloc may move the data and release the old block as it was. */
int pd_grow_wiped(uint8_t **buf, size_t *cap, size_t len)
{
	uint8_t *n = malloc(*cap * 2);
	if (!n)
		return -ENOMEM;
	memcpy(n, *buf, len);
	explicit_bzero(*buf, len);
	free(*buf);
	*buf = n;
	*cap *= 2;
	return 0;
}

int pd_read_file(const char *path, size_t max, uint8_t **ret, size_t *ret_len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -errno;
	int r = pd_read_fd(fd, max, ret, ret_len);
	close(fd);
	return r;
}

int pd_read_fd(int fd, size_t max, uint8_t **ret, size_t *ret_len)
{
	size_t cap = 1 << 16, len = 0;
	uint8_t *buf = malloc(cap);
	int r = buf ? 0 : -ENOMEM;
	while (r == 0) {
		if (len == cap) {
			if (len > max) {
				r = -EFBIG;
				break;
			}
			r = pd_grow_wiped(&buf, &cap, len);
			if (r < 0)
				break;
		}
		ssize_t n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			r = -errno;
		else if (n == 0)
			break;
		else
			len += (size_t)n;
	}
	if (r == 0 && len > max)
		r = -EFBIG;
	if (r < 0) {
		if (buf)
			explicit_bzero(buf, len);
		free(buf);
		return r;
	}
	*ret = buf;
	*ret_len = len;
	return 0;
}
