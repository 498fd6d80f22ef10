/* SPDX-License-Identifier: MIT */
/*
 * Numeric socket addresses: the loopback test that decides where plain TCP
 * and the metrics endpoint may listen, and the parser of metrics-listen
 * (PORT, IPV4:PORT or [IPV6]:PORT; never a name, so nothing is resolved).
 * Pure functions, any thread.
 */
#pragma once

#include <stdbool.h>
#include <sys/socket.h>

/** Whether sa is 127.0.0.0/8, ::1 or an IPv4-mapped 127.x address. */
bool pd_addr_is_loopback(const struct sockaddr *sa);
/** Parse "PORT" (meaning 127.0.0.1:PORT), "IPV4:PORT" or "[IPV6]:PORT",
 * numeric only, port 1-65535.  0, or -EINVAL with *ret untouched. */
int pd_addr_parse(const char *spec, struct sockaddr_storage *ret, socklen_t *ret_len);
