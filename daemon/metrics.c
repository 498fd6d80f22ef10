/* SPDX-License-Identifier: MIT */
/* The HTTP /metrics endpoint, libmicrohttpd driven by the libuv loop (see metrics.h). */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "pd-config.h"
#include "addr.h"
#include "config.h"
#include "daemon.h"
#include "keys.h"
#include "log.h"
#include "metrics.h"
#include "pgpdec.h"
#include "stats.h"

#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

static struct {
	struct MHD_Daemon *mhd;
	uv_poll_t poll;   /* MHD's epoll descriptor */
	uv_timer_t timer; /* MHD_get_timeout: connection timeouts, pending work */
	bool handles;     /* poll and timer initialised and not closed */
	char name[INET6_ADDRSTRLEN + 8];
} g;

/* ---------------------------------------------------------------- */
/* The text: STATS, then the process and build-info metrics */

/* /proc/self/stat after the command name (which may hold spaces and
 * parentheses, hence the last ')'): field 3 is the state, 14 utime, 15
 * stime, 22 starttime (clock ticks after boot), 23 vsize (bytes), 24 rss
 * (pages). */
static bool read_stat(unsigned long long f[25])
{
	char buf[1024], *save = NULL;
	FILE *sf = fopen("/proc/self/stat", "re");
	if (!sf)
		return false;
	size_t n = fread(buf, 1, sizeof(buf) - 1, sf);
	fclose(sf);
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	if (!p)
		return false;
	int i = 3;
	for (char *tok = strtok_r(p + 1, " \n", &save); tok && i <= 24; tok = strtok_r(NULL, " \n", &save), i++)
		f[i] = strtoull(tok, NULL, 10);
	return i > 24;
}

static long open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	long n = 0;
	if (!d)
		return -1;
	for (struct dirent *e; (e = readdir(d));)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* not the one opendir held */
}

static void put_process(FILE *f)
{
	unsigned long long st[25];
	long tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
	if (tck > 0 && page > 0 && read_stat(st)) {
		/* starttime counts from boot, like CLOCK_BOOTTIME: the wall-clock
		 * start is now less the time since then (/proc/stat's btime is
		 * not visible under ProcSubset=pid). */
		struct timespec real, boot, cpu;
		clock_gettime(CLOCK_REALTIME, &real);
		clock_gettime(CLOCK_BOOTTIME, &boot);
		/* CPU time to the nanosecond (all threads, ended ones too): the
		 * clock ticks of /proc's utime+stime read 0 for a daemon that has
		 * used less than one tick, and move in 10 ms steps. */
		double cpu_s = clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu) == 0 ?
		               (double)cpu.tv_sec + cpu.tv_nsec / 1e9 : (double)(st[14] + st[15]) / (double)tck;
		double start = (double)real.tv_sec + real.tv_nsec / 1e9 - ((double)boot.tv_sec + boot.tv_nsec / 1e9) +
		               (double)st[22] / (double)tck;
		fprintf(f, "# HELP process_cpu_seconds_total User and system CPU time of the daemon, in seconds.\n"
		           "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total %.6f\n"
		           "# HELP process_resident_memory_bytes Resident memory, in bytes.\n"
		           "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %llu\n"
		           "# HELP process_virtual_memory_bytes Virtual memory, in bytes.\n"
		           "# TYPE process_virtual_memory_bytes gauge\nprocess_virtual_memory_bytes %llu\n"
		           "# HELP process_start_time_seconds Start of the daemon, in seconds since the Unix epoch.\n"
		           "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %.2f\n",
		        cpu_s, st[24] * (unsigned long long)page, st[23], start);
	}
	long fds = open_fds();
	if (fds >= 0)
		fprintf(f, "# HELP process_open_fds Open file descriptors.\n"
		           "# TYPE process_open_fds gauge\nprocess_open_fds %ld\n", fds);
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		fprintf(f, "# HELP process_max_fds Most file descriptors the daemon may open (RLIMIT_NOFILE).\n"
		           "# TYPE process_max_fds gauge\nprocess_max_fds %llu\n", (unsigned long long)rl.rlim_cur);
}

static void put_label(FILE *f, const char *name, const char *v)
{
	fprintf(f, "%s=\"", name);
	for (; *v; v++)
		if (*v == '\\' || *v == '"')
			fprintf(f, "\\%c", *v);
		else if (*v == '\n')
			fputs("\\n", f);
		else
			fputc(*v, f);
	fputc('"', f);
}

static void put_build_info(FILE *f)
{
	const char *gcrypt, *openssl;
	pd_lib_versions(&gcrypt, &openssl);
	/* The backends of the key set in use (resolved: never "default"):
	 * rsa-backend and ecdh-backend may change on reload. */
	const struct pd_keyring *kr = pd_d.keys ? pd_keyset_ring(pd_d.keys) : NULL;
	const char *backend = !kr ? "none" : pd_keyring_backend(kr) == PD_RSA_OPENSSL ? "openssl" : "gcrypt";
	const char *ecdh = !kr ? "none" : pd_keyring_ecdh_backend(kr) == PD_ECDH_OPENSSL ? "openssl" : "gcrypt";
	fputs("# HELP pgpdecd_build_info Version of the daemon, its RSA and ECDH backends and the libraries it runs "
	      "with.\n"
	      "# TYPE pgpdecd_build_info gauge\npgpdecd_build_info{", f);
	put_label(f, "version", PD_VERSION);
	fputc(',', f);
	put_label(f, "rsa_backend", backend);
	fputc(',', f);
	put_label(f, "ecdh_backend", ecdh);
	fputc(',', f);
	put_label(f, "libgcrypt", gcrypt);
	fputc(',', f);
	put_label(f, "openssl", openssl);
	fputc(',', f);
	put_label(f, "gnutls", gnutls_check_version(NULL));
	fputc(',', f);
	put_label(f, "libuv", uv_version_string());
	fputc(',', f);
	put_label(f, "libmicrohttpd", MHD_get_version());
	fputs("} 1\n", f);
}

static char *render(size_t *ret_len)
{
	size_t slen, tlen = 0;
	char *tail = NULL, *stats = pd_stats_render(&slen);
	if (!stats)
		return NULL;
	FILE *f = open_memstream(&tail, &tlen);
	if (!f) {
		free(stats);
		return NULL;
	}
	put_process(f);
	put_build_info(f);
	char *all = NULL;
	if (fclose(f) == 0 && tail)
		all = realloc(stats, slen + tlen + 1);
	if (!all) {
		free(stats);
		free(tail);
		return NULL;
	}
	memcpy(all + slen, tail, tlen + 1);
	free(tail);
	*ret_len = slen + tlen;
	return all;
}

/* ---------------------------------------------------------------- */
/* HTTP */

static enum MHD_Result reply_text(struct MHD_Connection *conn, unsigned code, const char *text, const char *allow)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
	if (allow)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
	enum MHD_Result ret = MHD_queue_response(conn, code, r);
	MHD_destroy_response(r);
	return ret;
}

/* Every request is answered at the first call, before any body: none is
 * wanted, and MHD closes a connection whose body it has not read rather
 * than read it.  Nothing of the request is echoed or logged. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **req_cls)
{
	(void)cls;
	(void)version;
	(void)upload_data;
	(void)upload_data_size;
	(void)req_cls;
	if (strcmp(url, "/metrics"))
		return reply_text(conn, MHD_HTTP_NOT_FOUND, "not found: the metrics are at /metrics\n", NULL);
	if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
		return reply_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed: use GET\n", "GET, HEAD");
	size_t len;
	char *body = render(&len);
	if (!body)
		return reply_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n", NULL);
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, CONTENT_TYPE);
	enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return ret;
}

/* MHD's own complaints (a client over a limit, a malformed request) are a
 * client's doing: debug level only, so that no scraper can flood the log. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	if (!pd_log_is_debug())
		return;
	char line[256];
	vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\r\n")] = 0;
	pd_log_debug("NET", "metrics %s: %s", g.name, line);
}

/* ---------------------------------------------------------------- */
/* The loop drives MHD */

static void on_timer(uv_timer_t *t);

static unsigned connections(void)
{
	const union MHD_DaemonInfo *i = MHD_get_daemon_info(g.mhd, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
	return i ? i->num_connections : 0;
}

static void run(void)
{
	MHD_UNSIGNED_LONG_LONG ms;
	if (!g.mhd)
		return;
	unsigned before = connections();
	MHD_run(g.mhd);
	/* At the connection limit MHD takes its listening socket out of its
	 * epoll set, and puts it back only at the start of a run with fewer
	 * connections: when this run closed some, run once more, or the
	 * connections waiting in the backlog would wait for an event that
	 * never comes. */
	if (connections() < before)
		MHD_run(g.mhd);
	/* MHD must run again within its timeout, or at once (0) when it still
	 * has work its epoll descriptor will not signal again (edge-triggered
	 * sockets it has not drained). */
	if (MHD_get_timeout(g.mhd, &ms) == MHD_YES)
		uv_timer_start(&g.timer, on_timer, ms, 0);
	else
		uv_timer_stop(&g.timer);
}

static void on_timer(uv_timer_t *t)
{
	(void)t;
	run();
}

static void on_poll(uv_poll_t *h, int status, int events)
{
	(void)h;
	(void)events;
	if (status < 0)
		pd_log_warn("NET", "metrics %s: poll: %s", g.name, uv_strerror(status));
	run();
}

int pd_metrics_start(uv_loop_t *loop, const struct pd_config *c, char *err, size_t errlen)
{
	const struct sockaddr *sa = (const struct sockaddr *)&c->metrics_addr;
	char host[INET6_ADDRSTRLEN];
	int r, one = 1;

	if (!c->metrics_addr_len || g.mhd)
		return 0;
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		snprintf(g.name, sizeof(g.name), "[%s]:%u", host, ntohs(in6->sin6_port));
	} else {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		snprintf(g.name, sizeof(g.name), "%s:%u", host, ntohs(in->sin_port));
	}
	/* Our own socket, for an exact reason when bind fails; MHD owns it
	 * from MHD_start_daemon on. */
	int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		r = -errno;
		snprintf(err, errlen, "metrics-listen %s: socket: %s", g.name, strerror(-r));
		return r;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, sa, c->metrics_addr_len) < 0 || listen(fd, PD_METRICS_CONNECTIONS) < 0) {
		r = -errno;
		close(fd);
		snprintf(err, errlen, "metrics-listen %s: %s%s", g.name, strerror(-r),
		         r == -EADDRINUSE ? ": another process listens there (choose another port)" :
		         r == -EADDRNOTAVAIL ? ": not an address of this host" :
		         r == -EACCES ? ": ports below 1024 need privileges (choose another port)" : "");
		return r;
	}
	g.mhd = MHD_start_daemon(MHD_USE_EPOLL | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, NULL,
	                         MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL, /* first, or MHD prints */
	                         MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
	                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)PD_METRICS_CONNECTIONS,
	                         MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)PD_METRICS_PER_IP,
	                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)PD_METRICS_TIMEOUT_S,
	                         MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)PD_METRICS_MEMORY,
	                         MHD_OPTION_SIGPIPE_HANDLED_BY_APP, 1,
	                         MHD_OPTION_END);
	if (!g.mhd) {
		/* (whether MHD closed fd on its way out is not said; the daemon exits) */
		snprintf(err, errlen, "metrics-listen %s: libmicrohttpd could not start", g.name);
		return -ENOMEM;
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(g.mhd, MHD_DAEMON_INFO_EPOLL_FD);
	r = info ? uv_poll_init(loop, &g.poll, info->epoll_fd) : -EINVAL;
	if (r == 0 && (r = uv_timer_init(loop, &g.timer)) < 0)
		uv_close((uv_handle_t *)&g.poll, NULL);
	if (r < 0) {
		snprintf(err, errlen, "metrics-listen %s: %s", g.name, uv_strerror(r));
		MHD_stop_daemon(g.mhd);
		g.mhd = NULL;
		return r;
	}
	g.handles = true;
	uv_poll_start(&g.poll, UV_READABLE, on_poll);
	run();
	pd_log_info("NET", "metrics on http://%s/metrics", g.name);
	if (!pd_addr_is_loopback(sa))
		pd_log_notice("NET", "metrics %s: not a loopback address (metrics-allow-remote): anyone who can reach "
		              "it reads the counters; restrict it with a firewall", g.name);
	return 0;
}

void pd_metrics_stop(void)
{
	if (g.handles) {
		/* Off libuv's epoll before MHD closes the descriptor. */
		uv_close((uv_handle_t *)&g.poll, NULL);
		uv_close((uv_handle_t *)&g.timer, NULL);
		g.handles = false;
	}
	if (g.mhd) {
		MHD_stop_daemon(g.mhd);
		g.mhd = NULL;
		pd_log_info("NET", "metrics %s: closed", g.name);
	}
}
