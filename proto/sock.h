/* SPDX-License-Identifier: MIT */
/*
 * Whether a process accepts connections on the unix socket at path, asked
 * before a daemon (pgpdecd, pgpdecd-milter) replaces a socket file that is
 * left there: 1 yes (connect succeeded, or EAGAIN/EINPROGRESS: a listener
 * with a full backlog is alive), 0 nobody (ECONNREFUSED: a stale socket, or
 * ENOENT: gone), -errno when that cannot be told (a socket this user may not
 * connect to).  Non-blocking.  Header only: proto's library does no I/O.
 */
#pragma once

#include <errno.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static inline int pd_unix_socket_answers(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int r, fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 || errno == EAGAIN || errno == EINPROGRESS)
		r = 1;
	else
		r = errno == ECONNREFUSED || errno == ENOENT ? 0 : -errno;
	close(fd);
	return r;
}
