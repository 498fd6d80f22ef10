/* SPDX-License-Identifier: MIT */
/* Peer identity, allow-lists and connection limits (see peer.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "config.h"
#include "daemon.h"
#include "log.h"
#include "peer.h"

#define REFUSAL_LOG_MS 60000 /* one log line a minute at most per connection limit */

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59 /* Linux 4.13 */
#endif

/* Refusals over one connection limit: the sentence the peer gets, and a
 * log line at most once a minute, the ones after it as a count (log.c). */
struct refusal {
	const char *limit; /* the setting's name */
	const char *sentence;
	struct pd_log_limit log;
};

static struct {
	uint64_t refused; /* limits and allow-lists */
	struct refusal over_max, over_peer;
} g = {
	.over_max = { .limit = "max-connections", .sentence = "too many connections; retry later",
	              .log = PD_LOG_LIMIT("connections refused over max-connections", 1, REFUSAL_LOG_MS) },
	.over_peer = { .limit = "max-connections-per-peer",
	               .sentence = "too many connections from this peer; retry later",
	               .log = PD_LOG_LIMIT("connections refused over max-connections-per-peer", 1, REFUSAL_LOG_MS) },
};

/* A local user can knock as often as it likes: a few lines a minute. */
static struct pd_log_limit denied_log = PD_LOG_LIMIT("unix peers denied access", 10, 60000);

int pd_peer_identify(struct pd_peer *p, enum pd_peer_kind kind, uv_stream_t *st)
{
	p->kind = kind;
	if (kind == PD_PEER_UNIX) {
		uv_os_fd_t fd = -1;
		socklen_t len = sizeof(p->cred);
		if (uv_fileno((uv_handle_t *)st, &fd) < 0)
			return -EBADF;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &p->cred, &len) < 0)
			return -errno;
		snprintf(p->name, sizeof(p->name), "uid %u", (unsigned)p->cred.uid);
		return 0;
	}
	struct sockaddr_storage ss;
	int len = sizeof(ss);
	char host[INET6_ADDRSTRLEN] = "?";
	if (uv_tcp_getpeername((uv_tcp_t *)st, (struct sockaddr *)&ss, &len) == 0) {
		if (ss.ss_family == AF_INET)
			uv_ip4_name((struct sockaddr_in *)&ss, host, sizeof(host));
		else if (ss.ss_family == AF_INET6)
			uv_ip6_name((struct sockaddr_in6 *)&ss, host, sizeof(host));
	}
	snprintf(p->name, sizeof(p->name), "%s", host);
	return 0;
}

/* ---------------------------------------------------------------- */
/* Connection limits */

const char *pd_peer_over_limit(const struct pd_peer *p, unsigned n_open, unsigned (*same)(const struct pd_peer *p))
{
	const struct pd_config *c = pd_d.cfg;
	struct refusal *over = NULL;
	unsigned value = 0;

	if (n_open >= c->max_connections) {
		over = &g.over_max;
		value = c->max_connections;
	} else if (c->max_connections_per_peer && same(p) >= c->max_connections_per_peer) {
		over = &g.over_peer;
		value = c->max_connections_per_peer;
	}
	if (!over)
		return NULL;
	g.refused++;
	pd_log_limited(&over->log, PD_LOG_WARN, "NET", "%s (%u) reached: refusing connections (logged once a minute at most)",
	               over->limit, value);
	pd_log_debug("NET", "%s: refused (%s)", p->name, over->limit);
	return over->sentence;
}

uint64_t pd_peer_refused(void) { return g.refused; }

/* ---------------------------------------------------------------- */
/* Allow-lists */

static bool id_listed(const struct pd_idv *l, unsigned id)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i] == id)
			return true;
	return false;
}

/* SO_PEERCRED allow-lists (resolved to ids at load): if neither is set,
 * anyone who can open the socket is served; otherwise the peer's uid must
 * be listed, or its gid, or one of the supplementary groups the peer
 * process had when it connected (SO_PEERGROUPS, from the kernel: never the
 * user database, which may be a network service and would block the loop). */
static bool cred_listed(uv_os_fd_t fd, const struct ucred *cr, const struct pd_idv *uids, const struct pd_idv *gids)
{
	gid_t some[64], *groups = some;
	socklen_t len = sizeof(some);
	bool ok = false;

	if (id_listed(uids, cr->uid) || id_listed(gids, cr->gid))
		return true;
	if (!gids->n)
		return false;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0) {
		if (errno != ERANGE || !(groups = malloc(len)) ||
		    getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0) {
			pd_log_debug("NET", "uid %u: SO_PEERGROUPS: %s", (unsigned)cr->uid, strerror(errno));
			len = 0;
		}
	}
	for (size_t i = 0; i < len / sizeof(gid_t) && !ok; i++)
		ok = id_listed(gids, groups[i]);
	if (groups != some)
		free(groups);
	return ok;
}

static bool cred_allowed(uv_os_fd_t fd, const struct ucred *cr)
{
	const struct pd_config *c = pd_d.cfg;
	if (!c->allow_uids.n && !c->allow_gids.n)
		return true;
	return cred_listed(fd, cr, &c->allow_uids, &c->allow_gids);
}

bool pd_peer_may_export(const struct pd_peer *p, uv_stream_t *st, const uint8_t *cert_sha256)
{
	const struct pd_config *c = pd_d.cfg;
	uv_os_fd_t fd = -1;

	if (!c->allow_session_key_export)
		return false;
	if (p->kind == PD_PEER_UNIX)
		return uv_fileno((uv_handle_t *)st, &fd) == 0 &&
		       cred_listed(fd, &p->cred, &c->sk_export_uids, &c->sk_export_gids);
	if (!cert_sha256)
		return false;
	for (size_t i = 0; i < c->n_sk_export_pins; i++)
		if (!memcmp(cert_sha256, c->sk_export_pins[i], 32))
			return true;
	return false;
}

bool pd_peer_allowed(const struct pd_peer *p, uv_stream_t *st, const char *listener)
{
	uv_os_fd_t fd = -1;
	if (p->kind != PD_PEER_UNIX)
		return true;
	if (uv_fileno((uv_handle_t *)st, &fd) == 0 && cred_allowed(fd, &p->cred))
		return true;
	g.refused++;
	pd_log_limited(&denied_log, PD_LOG_NOTICE, "NET", "access denied to unix peer uid %u gid %u pid %d on %s",
	               (unsigned)p->cred.uid, (unsigned)p->cred.gid, (int)p->cred.pid, listener);
	return false;
}
