/* SPDX-License-Identifier: MIT */
/* Numeric socket addresses (see addr.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "addr.h"

bool pd_addr_is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
		if (IN6_IS_ADDR_LOOPBACK(a))
			return true;
		if (IN6_IS_ADDR_V4MAPPED(a))
			return a->s6_addr[12] == 127;
	}
	return false;
}

static int parse_port(const char *s, in_port_t *ret)
{
	char *end;
	if (*s < '0' || *s > '9')
		return -EINVAL;
	unsigned long v = strtoul(s, &end, 10);
	if (*end || v == 0 || v > 65535)
		return -EINVAL;
	*ret = htons((in_port_t)v);
	return 0;
}

int pd_addr_parse(const char *spec, struct sockaddr_storage *ret, socklen_t *ret_len)
{
	struct sockaddr_storage ss;
	char host[64];
	const char *colon = strrchr(spec, ':');
	in_port_t port;

	memset(&ss, 0, sizeof(ss));
	if (!colon) { /* a port alone: loopback */
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;
		if (parse_port(spec, &port) < 0)
			return -EINVAL;
		in->sin_family = AF_INET;
		in->sin_port = port;
		in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		*ret = ss;
		*ret_len = sizeof(*in);
		return 0;
	}
	size_t n = (size_t)(colon - spec);
	if (n == 0 || n >= sizeof(host) || parse_port(colon + 1, &port) < 0)
		return -EINVAL;
	memcpy(host, spec, n);
	host[n] = 0;
	if (host[0] == '[') {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
		if (n < 3 || host[n - 1] != ']')
			return -EINVAL;
		host[n - 1] = 0;
		if (inet_pton(AF_INET6, host + 1, &in6->sin6_addr) != 1)
			return -EINVAL;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = port;
		*ret_len = sizeof(*in6);
	} else {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;
		if (inet_pton(AF_INET, host, &in->sin_addr) != 1)
			return -EINVAL;
		in->sin_family = AF_INET;
		in->sin_port = port;
		*ret_len = sizeof(*in);
	}
	*ret = ss;
	return 0;
}
