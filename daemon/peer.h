/* SPDX-License-Identifier: MIT */
/*
 * Who a connection comes from, and whether it may be served.  Owns the
 * peer's identity (SO_PEERCRED's uid on unix sockets, the address on TCP),
 * the unix-socket allow-lists (allow-user, allow-group: checked against
 * SO_PEERCRED and SO_PEERGROUPS with the ids resolved when the config was
 * loaded), the connection limits (max-connections,
 * max-connections-per-peer), the count of refused connections and the
 * once-a-minute log of refusals.  Adding an access rule touches this file
 * only.  (TLS client certificates and pins are the TLS layer's: tls.c.)
 *
 * Loop thread only; never blocks: no user-database lookups, no DNS.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

enum pd_peer_kind { PD_PEER_UNIX = 1, PD_PEER_TCP = 2 };

struct pd_peer { /* public, by value: inside each session */
	enum pd_peer_kind kind;
	struct ucred cred; /* unix peers: from SO_PEERCRED at connect time */
	char name[64];     /* "uid 1000" / "192.0.2.1": the per-peer limit's key, debug logs */
};

/** Identify the peer of an accepted stream; a negative errno: end the connection. */
int pd_peer_identify(struct pd_peer *p, enum pd_peer_kind kind, uv_stream_t *st);
/** The connection limits for a new connection from p while n_open are
 * served; same(p) counts those from p, asked only when
 * max-connections-per-peer is set.  NULL: within both; otherwise the
 * ERROR's sentence, and the refusal is counted and logged. */
const char *pd_peer_over_limit(const struct pd_peer *p, unsigned n_open, unsigned (*same)(const struct pd_peer *p));
/** The allow-lists: whether p may be served (TCP peers always may); a
 * refusal is counted and logged with the listener's name. */
bool pd_peer_allowed(const struct pd_peer *p, uv_stream_t *st, const char *listener);
/** Whether p may have session keys exported (allow-session-key-export and
 * the session-key-export-* lists): a unix peer by its uid, gid or
 * supplementary groups (asked of the kernel now), a TCP peer by the SHA-256
 * of its TLS client certificate (cert_sha256, NULL when it sent none). */
bool pd_peer_may_export(const struct pd_peer *p, uv_stream_t *st, const uint8_t *cert_sha256);
/** Connections refused so far (limits and allow-lists). */
uint64_t pd_peer_refused(void);
