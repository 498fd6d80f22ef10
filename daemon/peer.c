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

/* Refusals over one connection limit, logged at most once a minute: the
 * first at once, the ones after it as a count when the minute is over (by
 * the session sweep) or when the daemon stops. */
struct refusal_log {
	const char *limit; /* the setting's name */
	const char *sentence;
	unsigned value;    /* its value at the last refusal */
	uint64_t last;     /* when a line was last logged */
	uint64_t since;    /* refused since then, not logged yet */
	bool logged;
};

static struct {
	uint64_t refused; /* limits and allow-lists */
	struct refusal_log over_max, over_peer;
} g = {
	.over_max = { .limit = "max-connections", .sentence = "too many connections; retry later" },
	.over_peer = { .limit = "max-connections-per-peer",
	               .sentence = "too many connections from this peer; retry later" },
};

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

static void refusal_flush(struct refusal_log *rl, uint64_t now)
{
	if (!rl->since)
		return;
	pd_log_warn("NET", "%s (%u) reached: %llu more connection%s refused in the last %llu s", rl->limit,
	            rl->value, (unsigned long long)rl->since, rl->since == 1 ? "" : "s",
	            (unsigned long long)((now - rl->last) / 1000));
	rl->since = 0;
	rl->last = now;
}

static void refusal_note(struct refusal_log *rl, unsigned value)
{
	uint64_t now = uv_now(pd_d.loop);
	g.refused++;
	rl->value = value;
	if (rl->logged && now - rl->last < REFUSAL_LOG_MS) {
		rl->since++;
		return;
	}
	refusal_flush(rl, now); /* nothing left after a quiet minute; a count otherwise */
	pd_log_warn("NET", "%s (%u) reached: refusing connections (logged once a minute at most)", rl->limit, value);
	rl->logged = true;
	rl->last = now;
}

const char *pd_peer_over_limit(const struct pd_peer *p, unsigned n_open, unsigned (*same)(const struct pd_peer *p))
{
	const struct pd_config *c = pd_d.cfg;
	struct refusal_log *over = NULL;
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
	refusal_note(over, value);
	pd_log_debug("NET", "%s: refused (%s)", p->name, over->limit);
	return over->sentence;
}

void pd_peer_flush(uint64_t now, bool force)
{
	if (force || now - g.over_max.last >= REFUSAL_LOG_MS)
		refusal_flush(&g.over_max, now);
	if (force || now - g.over_peer.last >= REFUSAL_LOG_MS)
		refusal_flush(&g.over_peer, now);
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
static bool cred_allowed(uv_os_fd_t fd, const struct ucred *cr)
{
	const struct pd_config *c = pd_d.cfg;
	gid_t some[64], *groups = some;
	socklen_t len = sizeof(some);
	bool ok = false;

	if (!c->allow_uids.n && !c->allow_gids.n)
		return true;
	if (id_listed(&c->allow_uids, cr->uid) || id_listed(&c->allow_gids, cr->gid))
		return true;
	if (!c->allow_gids.n)
		return false;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0) {
		if (errno != ERANGE || !(groups = malloc(len)) ||
		    getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0) {
			pd_log_debug("NET", "uid %u: SO_PEERGROUPS: %s", (unsigned)cr->uid, strerror(errno));
			len = 0;
		}
	}
	for (size_t i = 0; i < len / sizeof(gid_t) && !ok; i++)
		ok = id_listed(&c->allow_gids, groups[i]);
	if (groups != some)
		free(groups);
	return ok;
}

bool pd_peer_allowed(const struct pd_peer *p, uv_stream_t *st, const char *listener)
{
	uv_os_fd_t fd = -1;
	if (p->kind != PD_PEER_UNIX)
		return true;
	if (uv_fileno((uv_handle_t *)st, &fd) == 0 && cred_allowed(fd, &p->cred))
		return true;
	g.refused++;
	pd_log_notice("NET", "access denied to unix peer uid %u gid %u pid %d on %s", (unsigned)p->cred.uid,
	              (unsigned)p->cred.gid, (int)p->cred.pid, listener);
	return false;
}
