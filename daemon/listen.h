/* SPDX-License-Identifier: MIT */
/*
 * pd_listener: one listening socket (unix or TCP, bound by us or handed over
 * by systemd socket activation) and the accept path: connection cap,
 * per-peer cap and unix-socket allow-lists are checked by the session it
 * accepts into.  Plain TCP is refused unless allow-plain-tcp is set and the
 * address is loopback.
 */
#pragma once

#include <stdbool.h>
#include <uv.h>

struct pd_config;
struct pd_listener;

/** Bind every --listen of c (or take the sockets systemd passed), start listening. */
int pd_listeners_start(uv_loop_t *loop, const struct pd_config *c, char *err, size_t errlen);
/** Close every listener (unix socket files we created are removed). */
void pd_listeners_stop(void);
/** Whether connections of this listener are TLS. */
bool pd_listener_tls(const struct pd_listener *ls);
/** Short printable name ("unix:/run/pgpdecd.sock"). */
const char *pd_listener_name(const struct pd_listener *ls);
