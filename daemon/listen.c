/* SPDX-License-Identifier: MIT */
/* Listening sockets and the accept path (see listen.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "pd-config.h"
#include "addr.h"
#include "config.h"
#include "daemon.h"
#include "listen.h"
#include "sock.h"
#include "log.h"
#include "peer.h"
#include "session.h"
#include "status.h"
#ifdef PD_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#define BACKLOG 256

struct pd_listener {
	struct pd_listener *next;
	union {
		uv_handle_t h;
		uv_stream_t s;
		uv_tcp_t tcp;
		uv_pipe_t pipe;
	} io;
	enum pd_peer_kind kind;
	bool tls;
	bool unlink_on_close;
	dev_t dev;                /* the socket file bind made: removed at close only if still there */
	ino_t ino;
	char name[128];
	char path[108];
};

static void on_connection(uv_stream_t *server, int status)
{
	struct pd_listener *ls = server->data;
	struct pd_session *s;

	if (status < 0) {
		pd_log_warn("NET", "accept on %s: %s", ls->name, uv_strerror(status));
		return;
	}
	s = pd_session_alloc(ls->kind, ls->tls);
	if (!s) {
		pd_log_err("NET", "accept on %s: out of memory", ls->name);
		return;
	}
	status = uv_accept(server, pd_session_stream(s));
	if (status < 0) {
		pd_log_warn("NET", "accept on %s: %s", ls->name, uv_strerror(status));
		pd_session_close(s);
		return;
	}
	pd_session_start(s, ls->name);
}

static struct pd_listener *listeners;

static struct pd_listener *new_listener(uv_loop_t *loop, enum pd_peer_kind kind)
{
	struct pd_listener *ls = calloc(1, sizeof(*ls));
	if (!ls)
		return NULL;
	ls->kind = kind;
	int r = kind == PD_PEER_TCP ? uv_tcp_init(loop, &ls->io.tcp) : uv_pipe_init(loop, &ls->io.pipe, 0);
	if (r < 0) {
		free(ls);
		return NULL;
	}
	ls->io.h.data = ls;
	ls->next = listeners;
	listeners = ls;
	return ls;
}

static void dir_of(const char *path, char dir[108])
{
	snprintf(dir, 108, "%s", path);
	char *slash = strrchr(dir, '/');
	if (!slash)
		snprintf(dir, 108, ".");
	else if (slash == dir)
		dir[1] = 0;
	else
		*slash = 0;
}

/* The socket's directory must exist: bind(2)'s ENOENT, which libuv turns
 * into EACCES, would read "permission denied". */
static int check_parent(const char *name, const char *path, char *err, size_t errlen)
{
	char dir[108];
	struct stat st;
	dir_of(path, dir);
	if (stat(dir, &st) < 0) {
		int r = -errno;
		if (r == -ENOENT)
			snprintf(err, errlen, "listen %s: directory %s does not exist: create it, or listen elsewhere",
			         name, dir);
		else
			snprintf(err, errlen, "listen %s: directory %s: %s", name, dir, strerror(-r));
		return r;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "listen %s: %s is not a directory", name, dir);
		return -ENOTDIR;
	}
	return 0;
}

/* Whoever can write the socket's directory can replace the socket (by a
 * symlink to a file of ours, for instance): the daemon never changes
 * anything by path after bind, and says when the directory lets others in. */
static void check_dir(const char *name, const char *path)
{
	char dir[108];
	struct stat st;
	dir_of(path, dir);
	if (stat(dir, &st) < 0)
		return;
	if (((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX)) ||
	    (st.st_uid != geteuid() && st.st_uid != 0))
		pd_log_warn("NET", "listen %s: directory %s (mode %04o, uid %u) can be written by others, who can "
		            "replace the socket: use a directory only the daemon's user can write",
		            name, dir, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid);
}

/* socket-owner/socket-group on the socket bind just made, never on what its
 * name points to by now: the file is opened without following a symlink and
 * changed only if it is still a socket of ours with one name. */
static int set_owner(const char *path, uid_t uid, gid_t gid)
{
	struct stat st;
	int r = 0, fd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		r = -errno;
	else if (!S_ISSOCK(st.st_mode) || st.st_uid != geteuid() || st.st_nlink != 1)
		r = -ESTALE;
	else if (fchownat(fd, "", uid, gid, AT_EMPTY_PATH) < 0)
		r = -errno;
	close(fd);
	return r;
}

static int bind_unix(uv_loop_t *loop, const struct pd_config *c, const char *path, char *err, size_t errlen)
{
	struct stat st;
	struct pd_listener *ls = new_listener(loop, PD_PEER_UNIX);
	int r;

	if (!ls)
		return -ENOMEM;
	snprintf(ls->name, sizeof(ls->name), "unix:%s", path);
	snprintf(ls->path, sizeof(ls->path), "%s", path);
	r = check_parent(ls->name, path, err, errlen);
	if (r < 0)
		return r;
	/* A stale socket from a previous run is removed; one that a process
	 * answers on is not (taking it over would leave that daemon
	 * unreachable, and its socket gone once we stop); any other file is
	 * not ours. */
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "listen %s: exists and is not a socket", ls->name);
			return -EEXIST;
		}
		r = pd_unix_socket_answers(path);
		if (r > 0) {
			snprintf(err, errlen, "listen %s: another pgpdecd is listening on %s (it accepted a connection): "
			         "stop it first, or listen on another path", ls->name, path);
			return -EISCONN;
		}
		if (r < 0) {
			snprintf(err, errlen, "listen %s: a socket exists there and whether a process answers on it "
			         "cannot be told (connect: %s): remove it if it is stale", ls->name, strerror(-r));
			return r;
		}
		unlink(path);
	}
	check_dir(ls->name, path);
	/* bind creates the file with the socket's mode (0777) less the umask:
	 * socket-mode from the start, no chmod by path afterwards.  (Only the
	 * main thread creates files while the listeners are set up.) */
	mode_t old = umask(0777 & ~c->socket_mode);
	r = uv_pipe_bind(&ls->io.pipe, path);
	umask(old);
	if (r < 0) {
		if (r == UV_EACCES)
			snprintf(err, errlen, "listen %s: permission denied: the daemon's user (uid %u) cannot create the "
			         "socket in its directory", ls->name, (unsigned)geteuid());
		else
			snprintf(err, errlen, "listen %s: %s", ls->name, uv_strerror(r));
		return r;
	}
	if (lstat(path, &st) == 0) {
		ls->dev = st.st_dev;
		ls->ino = st.st_ino;
	}
	ls->unlink_on_close = true;
	if (c->socket_uid != (uid_t)-1 || c->socket_gid != (gid_t)-1) {
		r = set_owner(path, c->socket_uid, c->socket_gid);
		if (r == -ESTALE) {
			snprintf(err, errlen, "listen %s: the socket was replaced before its owner could be set "
			         "(someone else can write its directory)", ls->name);
			ls->unlink_on_close = false; /* what is there is not ours */
		} else if (r < 0) {
			snprintf(err, errlen, "listen %s: chown: %s", ls->name, strerror(-r));
		}
		if (r < 0)
			return r;
	}
	r = uv_listen(&ls->io.s, BACKLOG, on_connection);
	if (r < 0)
		snprintf(err, errlen, "listen %s: %s", ls->name, uv_strerror(r));
	return r;
}

static int check_tcp(const struct pd_config *c, struct pd_listener *ls, const struct sockaddr *sa,
                     char *err, size_t errlen)
{
	ls->tls = pd_config_tls(c);
	if (ls->tls)
		return 0; /* TLS with client certificates: any address */
	if (!c->allow_plain_tcp) {
		snprintf(err, errlen, "listen %s: plain TCP needs allow-plain-tcp (or configure TLS)", ls->name);
		return -EPERM;
	}
	if (!pd_addr_is_loopback(sa)) {
		snprintf(err, errlen, "listen %s: plain TCP is allowed on loopback addresses only", ls->name);
		return -EPERM;
	}
	return 0;
}

static int bind_tcp(uv_loop_t *loop, const struct pd_config *c, const char *spec, char *err, size_t errlen)
{
	char host[256], *port;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV }, *res = NULL;
	int r;

	snprintf(host, sizeof(host), "%s", spec);
	port = strrchr(host, ':');
	*port++ = 0;
	if (host[0] == '[' && host[strlen(host) - 1] == ']') { /* [::1]:PORT */
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = 0;
	}
	r = getaddrinfo(host, port, &hints, &res);
	if (r) {
		snprintf(err, errlen, "listen tcp:%s: %s", spec, gai_strerror(r));
		return -EINVAL;
	}
	struct pd_listener *ls = new_listener(loop, PD_PEER_TCP);
	if (!ls) {
		freeaddrinfo(res);
		return -ENOMEM;
	}
	snprintf(ls->name, sizeof(ls->name), "tcp:%s", spec);
	r = check_tcp(c, ls, res->ai_addr, err, errlen);
	if (r == 0) {
		r = uv_tcp_bind(&ls->io.tcp, res->ai_addr, 0);
		if (r == 0)
			r = uv_listen(&ls->io.s, BACKLOG, on_connection);
		if (r < 0)
			snprintf(err, errlen, "listen %s: %s", ls->name, uv_strerror(r));
	}
	freeaddrinfo(res);
	return r;
}

/* Sockets passed by systemd (pgpdecd.socket). */
static int take_activated(uv_loop_t *loop, const struct pd_config *c, char *err, size_t errlen)
{
#ifdef PD_HAVE_SYSTEMD
	/* The environment stays: a reload re-reads the config, whose check
	 * accepts "no --listen" only under socket activation. */
	int n = sd_listen_fds(0);
	if (n <= 0)
		return n;
	for (int fd = SD_LISTEN_FDS_START; fd < SD_LISTEN_FDS_START + n; fd++) {
		struct pd_listener *ls;
		int r;
		if (sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0) > 0) {
			ls = new_listener(loop, PD_PEER_UNIX);
			if (!ls)
				return -ENOMEM;
			snprintf(ls->name, sizeof(ls->name), "unix:(fd %d)", fd);
			r = uv_pipe_open(&ls->io.pipe, fd);
		} else if (sd_is_socket_inet(fd, 0, SOCK_STREAM, 1, 0) > 0) {
			struct sockaddr_storage ss;
			socklen_t len = sizeof(ss);
			ls = new_listener(loop, PD_PEER_TCP);
			if (!ls)
				return -ENOMEM;
			snprintf(ls->name, sizeof(ls->name), "tcp:(fd %d)", fd);
			if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
				return -errno;
			r = check_tcp(c, ls, (struct sockaddr *)&ss, err, errlen);
			if (r < 0)
				return r;
			r = uv_tcp_open(&ls->io.tcp, fd);
		} else {
			snprintf(err, errlen, "socket activation: fd %d is not a listening stream socket", fd);
			return -EINVAL;
		}
		if (r == 0)
			r = uv_listen(&ls->io.s, BACKLOG, on_connection);
		if (r < 0) {
			snprintf(err, errlen, "socket activation: fd %d: %s", fd, uv_strerror(r));
			return r;
		}
		pd_log_info("NET", "listening on %s (socket activation)", ls->name);
	}
	return n;
#else
	return 0;
#endif
}

int pd_listeners_start(uv_loop_t *loop, const struct pd_config *c, char *err, size_t errlen)
{
	int r = take_activated(loop, c, err, errlen);
	if (r < 0)
		return r;
	for (size_t i = 0; i < c->listen.n; i++) {
		const char *l = c->listen.v[i];
		r = !strncmp(l, "unix:", 5) ? bind_unix(loop, c, l + 5, err, errlen)
		                             : bind_tcp(loop, c, l + 4, err, errlen);
		if (r < 0)
			return r;
		pd_log_info("NET", "listening on %s", l);
	}
	if (!listeners) {
		snprintf(err, errlen, "nothing to listen on");
		return -EINVAL;
	}
	return 0;
}

static void on_listener_close(uv_handle_t *h) { free(h->data); }

void pd_listeners_stop(void)
{
	struct pd_listener *ls, *next;
	for (ls = listeners; ls; ls = next) {
		struct stat st;
		next = ls->next;
		/* Only the file bind made: one that replaced it is someone else's. */
		if (ls->unlink_on_close && lstat(ls->path, &st) == 0 && st.st_dev == ls->dev && st.st_ino == ls->ino)
			unlink(ls->path);
		uv_close(&ls->io.h, on_listener_close);
	}
	listeners = NULL;
}
