/* SPDX-License-Identifier: MIT */
/*
 * pd_listener: one listening socket (unix or TCP, bound by us or handed over
 * by systemd socket activation) and the accept path.  The session it
 * accepts into is told the listener's kind, whether it is TLS and its name,
 * and has peer.c check the connection caps and unix-socket allow-lists.
 * Plain TCP is refused unless allow-plain-tcp is set and the address is
 * loopback.  A unix socket left by a previous run (nobody answers on it) is
 * replaced; one another process answers on is not.
 */
#pragma once

#include <stdbool.h>
#include <uv.h>

struct pd_config;

/** Bind every --listen of c (or take the sockets systemd passed), start
 * listening.  On failure a sentence goes to err, and the result says why:
 * -EISCONN another process answers on a unix: socket path (it is never
 * taken over), -ENOENT/-ENOTDIR the directory of a unix: socket is
 * missing, other negative errno values (a port in use: -EADDRINUSE). */
int pd_listeners_start(uv_loop_t *loop, const struct pd_config *c, char *err, size_t errlen);
/** Close every listener (unix socket files we created are removed). */
void pd_listeners_stop(void);
