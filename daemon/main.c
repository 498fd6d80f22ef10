/* SPDX-License-Identifier: MIT */
/*
 * pgpdecd: args -> config -> pd_lib_init -> key load -> pool -> listeners ->
 * sd_notify READY -> uv_run.  Signals: SIGHUP reloads keys and config (built
 * off the loop, swapped whole; a failing reload keeps the old set),
 * SIGTERM/SIGINT stop accepting, let in-flight messages finish within
 * drain-timeout, exit 0.
 */
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sysexits.h>
#include <unistd.h>

#include "pd-config.h"
#include "config.h"
#include "admission.h"
#include "daemon.h"
#include "keys.h"
#include "sigmask.h"
#include "listen.h"
#include "log.h"
#include "metrics.h"
#include "notify.h"
#include "pgpdec.h"
#include "pool.h"
#include "session.h"
#include "stats.h"
#include "tls.h"

static struct {
	int argc;
	char **argv;
	uv_signal_t sig_hup, sig_term, sig_int;
	uv_timer_t drain_timer;
	bool drain_timer_on;
	uv_async_t reload_async;  /* the reload thread is done */
	pthread_t reload_thread;
	bool reload_again;
	/* reload results, written by the work thread, read in after_work */
	struct pd_config *new_cfg;
	struct pd_keyset *new_keys;
	struct pd_tls_creds *new_tls;
	int reload_err;
	char reload_msg[512];
	char reload_note[1024];   /* the credentials warning, if any */
	bool reloading;           /* the reload thread runs */
	bool exiting;
	bool drain_expired;
} m;

/* ---------------------------------------------------------------- */
/* Shutdown */

static void on_handle_close(uv_handle_t *h) { (void)h; }

static void finish(void)
{
	if (m.exiting)
		return;
	m.exiting = true;
	pd_log_info("SYS", "stopped");
	pd_notify_deinit();
	pd_metrics_stop();
	pd_sessions_close_all(); /* refused ones still lingering for their peer's EOF */
	pd_sessions_deinit();
	if (m.drain_timer_on) {
		uv_timer_stop(&m.drain_timer);
		uv_close((uv_handle_t *)&m.drain_timer, on_handle_close);
	}
	uv_close((uv_handle_t *)&m.reload_async, on_handle_close);
	uv_close((uv_handle_t *)&m.sig_hup, on_handle_close);
	uv_close((uv_handle_t *)&m.sig_term, on_handle_close);
	uv_close((uv_handle_t *)&m.sig_int, on_handle_close);
	pd_pool_stop(pd_d.pool);
	pd_d.pool = NULL;
}

/* The exit hook (pd_daemon_maybe_exit): the drain is over once no session
 * is served, no message is in progress (or drain-timeout passed: the jobs
 * still out are freed when they return) and no reload runs. */
static void maybe_exit(void)
{
	if (pd_d.stopping && !pd_sessions_count() && (!pd_adm_slots() || m.drain_expired) && !m.reloading)
		finish();
}

static void on_drain_timeout(uv_timer_t *t)
{
	pd_log_warn("SYS", "drain-timeout reached with %u messages in progress: closing connections",
	            pd_adm_slots());
	m.drain_expired = true; /* requests with a job out are freed when it returns */
	pd_sessions_close_all();
	maybe_exit();
}

static void stop(int signum)
{
	if (pd_d.stopping)
		return;
	pd_d.stopping = true;
	pd_log_info("SYS", "%s: stopping; %u messages in progress, %u connections",
	            strsignal(signum), pd_adm_slots(), pd_sessions_count());
	if (m.reloading) /* its result would not be used: stop unlocking keys */
		pd_keyset_load_cancel();
	pd_notify_stopping();
	pd_listeners_stop();
	pd_metrics_stop();
	if (uv_timer_init(pd_d.loop, &m.drain_timer) == 0) {
		m.drain_timer_on = true;
		uv_timer_start(&m.drain_timer, on_drain_timeout, pd_d.cfg->drain_timeout_ms, 0);
	}
	pd_sessions_drain();
	maybe_exit();
}

static void on_signal(uv_signal_t *h, int signum);

/* ---------------------------------------------------------------- */
/* Reload: config and keys are built on a thread of their own (file reads,
 * S2K), then swapped on the loop.  Requests hold their own key set.  A
 * thread that exits, rather than libuv's pool, so that the crypto
 * libraries' per-thread state is released with it. */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Files under $CREDENTIALS_DIRECTORY are the copies systemd made when the
 * service started: a reload reads the same copies again, whatever became
 * of their sources.  Names them in out ("" if none).  On the reload
 * thread: realpath() looks at the file system. */
static void credentials_note(const struct pd_keyset *ks, const struct pd_config *c, char *out, size_t cap)
{
	const char *dir = getenv("CREDENTIALS_DIRECTORY"), *extra[] = { c->tls_cert, c->tls_key, c->tls_ca,
	                                                                c->config_file };
	const char *path[64], *name[64];
	size_t nfiles, n = 0, total = 0;
	const char *const *files = pd_keyset_files(ks, &nfiles);
	char *rp[64] = { 0 }, *rdir;

	out[0] = 0;
	if (!dir || !*dir || !(rdir = realpath(dir, NULL)))
		return;
	size_t rl = strlen(rdir);
	for (size_t i = 0; i < nfiles + sizeof(extra) / sizeof(extra[0]); i++) {
		const char *p = i < nfiles ? files[i] : extra[i - nfiles];
		char *r = p ? realpath(p, NULL) : NULL;
		if (r && strncmp(r, rdir, rl) == 0 && r[rl] == '/') {
			if (n < 64) {
				path[n] = p;
				name[n] = r + rl + 1;
				rp[n++] = r;
				r = NULL;
			}
			total++;
		}
		free(r);
	}
	/* the unit's name: the credentials directory is named after it */
	size_t dl = strlen(dir);
	while (dl > 1 && dir[dl - 1] == '/')
		dl--;
	const char *unit = dir + dl;
	while (unit > dir && unit[-1] != '/')
		unit--;
	int ul = (int)(dir + dl - unit);
	if (total == 1) {
		snprintf(out, cap, "reload re-read %s, a systemd credential: systemctl restart %.*s to pick up a "
		         "changed source file", path[0], ul, unit);
	} else if (total > 1) {
		char list[512] = "";
		size_t o = 0;
		qsort(name, n, sizeof(name[0]), cmp_str);
		for (size_t i = 0; i < n && o < sizeof(list); i++) {
			int w = snprintf(list + o, sizeof(list) - o, "%s%s", i ? ", " : "", name[i]);
			if (w < 0 || (size_t)w >= sizeof(list) - o)
				break;
			o += (size_t)w;
		}
		snprintf(out, cap, "reload re-read %zu systemd credentials in %.*s (%s%s): systemctl restart %.*s to "
		         "pick up changed source files", total, (int)dl, dir, list, total > n ? ", ..." : "", ul, unit);
	}
	for (size_t i = 0; i < n; i++)
		free(rp[i]);
	free(rdir);
}

static void *reload_main(void *arg)
{
	(void)arg;
	m.new_cfg = NULL;
	m.new_keys = NULL;
	m.reload_msg[0] = 0;
	m.reload_note[0] = 0;
	m.reload_err = pd_config_load(&m.new_cfg, m.argc, m.argv, m.reload_msg, sizeof(m.reload_msg));
	if (m.reload_err == 0)
		m.reload_err = pd_keyset_load(&m.new_keys, m.new_cfg, pd_pool_threads(pd_d.pool), m.reload_msg,
		                              sizeof(m.reload_msg)); /* workers change at restart only */
	m.new_tls = NULL;
	if (m.reload_err == 0 && pd_config_tls(m.new_cfg)) {
		m.reload_err = pd_tls_creds_load(&m.new_tls, m.new_cfg, m.reload_msg, sizeof(m.reload_msg));
		if (m.reload_err < 0)
			m.new_keys = pd_keyset_unref(m.new_keys);
	}
	if (m.reload_err == 0)
		credentials_note(m.new_keys, m.new_cfg, m.reload_note, sizeof(m.reload_note));
	uv_async_send(&m.reload_async);
	return NULL;
}

static bool strv_eq(const struct pd_strv *a, const struct pd_strv *b)
{
	if (a->n != b->n)
		return false;
	for (size_t i = 0; i < a->n; i++)
		if (strcmp(a->v[i], b->v[i]))
			return false;
	return true;
}

static bool str_eq(const char *a, const char *b) { return !strcmp(a ? a : "", b ? b : ""); }

static void start_reload(void);

static void reload_done(uv_async_t *h)
{
	if (!m.reloading)
		return;
	pthread_join(m.reload_thread, NULL);
	m.reloading = false;
	if (pd_d.stopping) { /* cancelled, or finished as the daemon stops: not installed */
		pd_keyset_unref(m.new_keys);
		if (m.new_tls)
			pd_tls_creds_unref(m.new_tls);
		pd_config_free(m.new_cfg);
		if (m.reload_err && m.reload_err != -ECANCELED) /* it had failed first: say why */
			pd_log_err("SYS", "reload failed: %s",
			           m.reload_err == 1 ? "--help/--version in arguments" : m.reload_msg);
		pd_log_info("SYS", "reload abandoned: the daemon is stopping");
	} else if (m.reload_err == 0) {
		struct pd_config *old = pd_d.cfg;
		if (!strv_eq(&old->listen, &m.new_cfg->listen) || old->workers != m.new_cfg->workers ||
		    old->secmem_size != m.new_cfg->secmem_size || !str_eq(old->metrics_listen, m.new_cfg->metrics_listen) ||
		    old->metrics_allow_remote != m.new_cfg->metrics_allow_remote)
			pd_log_warn("SYS", "reload: listen, workers, secmem-size and metrics-listen take effect at restart only");
		pd_d.cfg = m.new_cfg;
		pd_config_free(old);
		pd_keyset_log_changes(pd_d.keys, m.new_keys);
		if (m.reload_note[0])
			pd_log_warn("SYS", "%s", m.reload_note);
		pd_keyset_unref(pd_d.keys);
		pd_d.keys = m.new_keys;
		if (m.new_tls) { /* sessions keep the credentials they started with */
			pd_tls_creds_unref(pd_d.tls_creds);
			pd_d.tls_creds = m.new_tls;
		}
		pd_log_set_level((enum pd_log_level)pd_d.cfg->log_level);
		pd_stats_reload(true);
		pd_log_info("SYS", "reloaded: %zu decryption keys", pd_keyset_count(pd_d.keys));
	} else {
		pd_config_free(m.new_cfg);
		pd_stats_reload(false);
		pd_log_err("SYS", "reload failed, keeping the old keys and config: %s",
		           m.reload_err == 1 ? "--help/--version in arguments" : m.reload_msg);
	}
	m.new_cfg = NULL;
	m.new_keys = NULL;
	m.new_tls = NULL;
	explicit_bzero(m.reload_msg, sizeof(m.reload_msg));
	if (!pd_d.stopping) /* STOPPING=1 was said: no READY=1 after it */
		pd_notify_ready();
	if (m.reload_again && !pd_d.stopping) {
		m.reload_again = false;
		start_reload();
		return;
	}
	maybe_exit();
}

static void start_reload(void)
{
	if (m.reloading) {
		m.reload_again = true; /* the running reload may have read old files */
		return;
	}
	pd_log_info("SYS", "reloading keys and config");
	pd_notify_reloading();
	sigset_t old;
	pd_block_async_signals(&old);
	int r = pthread_create(&m.reload_thread, NULL, reload_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r) {
		pd_log_err("SYS", "reload: cannot start a helper thread: %s", strerror(r));
		pd_notify_ready();
		return;
	}
	m.reloading = true;
}

static void on_signal(uv_signal_t *h, int signum)
{
	if (signum == SIGHUP) {
		if (!pd_d.stopping)
			start_reload();
	} else {
		stop(signum);
	}
}

/* ---------------------------------------------------------------- */

/* Nothing secret may reach a core file or another process's ptrace. */
static void harden(void)
{
	struct rlimit rl = { 0, 0 };
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		pd_log_warn("SYS", "prctl(PR_SET_DUMPABLE): %m");
	if (setrlimit(RLIMIT_CORE, &rl) < 0)
		pd_log_warn("SYS", "setrlimit(RLIMIT_CORE): %m");
}

int main(int argc, char **argv)
{
	char err[512] = "";
	int r;

	pd_log_init();
	harden();
	/* Every message allocates and frees a few buffers of 64-256 KiB.  With
	 * glibc's adaptive thresholds they bounce between mmap/munmap and heap
	 * trimming (madvise), each time faulting fresh pages in: fixed
	 * thresholds keep them in the heap for reuse.  Memory stays bounded by
	 * the limits; freed memory is reused, not returned.  The trim threshold
	 * is set again once max-memory is known (below). */
	mallopt(M_MMAP_THRESHOLD, 4 << 20);
	mallopt(M_TRIM_THRESHOLD, 64 << 20);
	signal(SIGPIPE, SIG_IGN);
	m.argc = argc;
	m.argv = argv;
	r = pd_config_load(&pd_d.cfg, argc, argv, err, sizeof(err));
	if (r == 1)
		return 0;
	if (r < 0) {
		fprintf(stderr, "pgpdecd: %s\n", err);
		return r == -EINVAL ? EX_USAGE : EX_CONFIG;
	}
	pd_log_set_level((enum pd_log_level)pd_d.cfg->log_level);
	/* The top of the loop's heap swings by what the messages in progress
	 * hold (their buffers are made and freed there), up to max-memory: a
	 * trim threshold below that trims the heap when a batch of messages
	 * ends and grows it again, page by fresh page, for the next (at
	 * concurrency 200 with 4 KiB messages, 1 of 2 runs fell from about
	 * 28,000 to 12,000 messages/s, with 0.4-1.4 brk calls and 2.5-4 page
	 * faults per message).  So it trims only above max-memory + 64 MiB
	 * (mallopt takes an int: at most INT_MAX, 2 GiB; a key reload's
	 * malloc_trim hands everything free back regardless).  The budget is
	 * made here too, so that it has the max-memory of the start, as
	 * pgpdecd.conf(5) says, whatever a reload before the first request
	 * reads. */
	uint64_t mm = pd_d.cfg->max_memory;
	mallopt(M_TRIM_THRESHOLD, mm >= (uint64_t)INT_MAX - (64u << 20) ? INT_MAX : (int)(mm + (64u << 20)));
	if (!pd_adm_memory()) {
		pd_log_err("SYS", "out of memory");
		pd_config_free(pd_d.cfg);
		return EX_OSERR;
	}
	size_t secmem = pd_d.cfg->secmem_size, key_files = 0;
	uint64_t key_bytes = 0;
	unsigned times = 2;
	if (!secmem)
		secmem = pd_keyset_secmem_auto(pd_d.cfg, &key_bytes, &key_files, &times);
	r = pd_lib_init(secmem);
	if (r < 0) {
		struct rlimit rl;
		const size_t need = pd_lib_locked_bytes(secmem);
		if (r == -E2BIG)
			pd_log_err("SYS", "secmem-size %zuM%s is more than the %zuM libgcrypt can take", secmem >> 20,
			           pd_d.cfg->secmem_size ? "" : " (sized from the key files)", PD_SECMEM_MAX >> 20);
		else if (r == -ENOMEM && getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
		         rl.rlim_cur < need)
			pd_log_err("SYS", "cannot lock %zu KiB of secure memory (secmem-size %zu KiB%s, once for "
			           "libgcrypt and once rounded up to a power of two for OpenSSL): the locked-memory "
			           "limit is %llu KiB; raise it (ulimit -l, LimitMEMLOCK=) or lower secmem-size",
			           need >> 10, secmem >> 10, pd_d.cfg->secmem_size ? "" : ", sized from the key files",
			           (unsigned long long)rl.rlim_cur >> 10);
		else
			pd_log_err("SYS", "crypto library initialisation failed: %s", pd_strerror(r));
		pd_config_free(pd_d.cfg);
		return 1;
	}
	if (!pd_d.cfg->secmem_size)
		pd_log_info("SYS", "secure memory: %zuM (secmem-size 0: %s the %llu bytes of %zu key files and 1M, "
		            "at least 4M)", secmem >> 20, times == 3 ? "three times" : "twice",
		            (unsigned long long)key_bytes, key_files);
	r = pd_keyset_load(&pd_d.keys, pd_d.cfg, pd_pool_resolve_threads(pd_d.cfg->workers), err, sizeof(err));
	if (r < 0) {
		pd_log_err("SYS", "%s", err);
		pd_lib_deinit();
		pd_config_free(pd_d.cfg);
		return EX_CONFIG;
	}
	pd_log_info("SYS", "%zu decryption keys loaded", pd_keyset_count(pd_d.keys));
	if (pd_config_tls(pd_d.cfg)) {
		r = pd_tls_creds_load(&pd_d.tls_creds, pd_d.cfg, err, sizeof(err));
		if (r < 0) {
			pd_log_err("TLS", "%s", err);
			return EX_CONFIG;
		}
	}

	pd_d.loop = uv_default_loop();
	pd_daemon_set_exit_hook(maybe_exit);
	/* Jobs per request are at most one, so queue-length requests never
	 * overflow the queue; the margin is for the watchdog's no-op job. */
	r = pd_pool_new(&pd_d.pool, pd_d.loop, pd_d.cfg->workers, pd_d.cfg->queue_length + 16);
	if (r < 0) {
		pd_log_err("SYS", "worker pool: %s", pd_strerror(r));
		return 1;
	}
	pd_log_info("POOL", "%u workers", pd_pool_threads(pd_d.pool));
	/* Signals first: a SIGTERM that comes as soon as the socket exists is
	 * handled by the loop, not by the default action. */
	uv_async_init(pd_d.loop, &m.reload_async, reload_done);
	uv_signal_init(pd_d.loop, &m.sig_hup);
	uv_signal_init(pd_d.loop, &m.sig_term);
	uv_signal_init(pd_d.loop, &m.sig_int);
	uv_signal_start(&m.sig_hup, on_signal, SIGHUP);
	uv_signal_start(&m.sig_term, on_signal, SIGTERM);
	uv_signal_start(&m.sig_int, on_signal, SIGINT);
	r = pd_sessions_init(pd_d.loop);
	/* The metrics port first: with metrics-listen set, a second daemon
	 * started with the same config fails there before it touches any
	 * socket file. */
	if (r == 0)
		r = pd_metrics_start(pd_d.loop, pd_d.cfg, err, sizeof(err));
	if (r == 0)
		r = pd_listeners_start(pd_d.loop, pd_d.cfg, err, sizeof(err));
	if (r < 0) {
		pd_log_err("NET", "%s", *err ? err : uv_strerror(r));
		pd_metrics_stop();
		pd_listeners_stop();
		pd_sessions_deinit();
		pd_pool_stop(pd_d.pool);
		uv_close((uv_handle_t *)&m.reload_async, NULL);
		uv_close((uv_handle_t *)&m.sig_hup, NULL);
		uv_close((uv_handle_t *)&m.sig_term, NULL);
		uv_close((uv_handle_t *)&m.sig_int, NULL);
		uv_run(pd_d.loop, UV_RUN_DEFAULT);
		/* pgpdecd(8), EXIT STATUS: another daemon on the socket; a socket
		 * directory that does not exist (a setting, as a missing key file) */
		return r == -EISCONN ? EX_UNAVAILABLE : r == -ENOENT || r == -ENOTDIR ? EX_CONFIG : 1;
	}
	pd_notify_init(pd_d.loop);
	pd_notify_ready();
	pd_log_info("SYS", "pgpdecd %s ready", PD_VERSION);

	uv_run(pd_d.loop, UV_RUN_DEFAULT);

	r = uv_loop_close(pd_d.loop);
	if (r < 0)
		pd_log_warn("SYS", "loop closed with handles open: %s", uv_strerror(r));
	pd_keyset_unref(pd_d.keys);
	pd_keyset_wait_freed(); /* their secrets are in the secure heaps pd_lib_deinit frees */
	pd_tls_creds_unref(pd_d.tls_creds);
	pd_config_free(pd_d.cfg);
	pd_lib_deinit();
	return 0;
}
