/* SPDX-License-Identifier: MIT */
/* sd_notify: readiness, status, watchdog (see notify.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pd-config.h"
#include "admission.h"
#include "daemon.h"
#include "keys.h"
#include "log.h"
#include "notify.h"
#include "pool.h"
#include "session.h"
#ifdef PD_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#define STATUS_MS 5000

static struct {
	uv_timer_t timer;
	bool init;
	uint64_t wd_usec;     /* 0: no watchdog */
	bool ping_out;        /* the no-op job is in the pool */
	bool ping_back;       /* ... and came back since the last WATCHDOG=1 */
	struct pd_job ping;
} n;

static void notify_send(const char *msg)
{
#ifdef PD_HAVE_SYSTEMD
	sd_notify(0, msg);
#else
	(void)msg;
#endif
}

void pd_notify_status(void)
{
	char buf[256];
	snprintf(buf, sizeof(buf), "STATUS=%zu keys, %u connections, %u messages in progress, %u queued",
	         pd_d.keys ? pd_keyset_count(pd_d.keys) : 0, pd_sessions_count(), pd_adm_slots(),
	         pd_d.pool ? pd_pool_queued(pd_d.pool) : 0);
	notify_send(buf);
}

void pd_notify_ready(void)
{
	notify_send("READY=1");
	pd_notify_status();
}

void pd_notify_reloading(void)
{
	char buf[64];
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	/* MONOTONIC_USEC lets systemd 253+ match the reload with READY=1. */
	snprintf(buf, sizeof(buf), "RELOADING=1\nMONOTONIC_USEC=%llu",
	         (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000);
	notify_send(buf);
}

void pd_notify_stopping(void) { notify_send("STOPPING=1\nSTATUS=stopping: finishing messages in progress"); }

static void ping_work(struct pd_job *j, struct pd_worker *w) { (void)j; (void)w; }

static void ping_done(struct pd_job *j)
{
	n.ping_out = false;
	if (!j->cancelled)
		n.ping_back = true;
}

static void on_timer(uv_timer_t *t)
{
	static uint64_t last_status;
	uint64_t now = uv_now(t->loop);

	if (n.wd_usec) {
		if (n.ping_back) {
			notify_send("WATCHDOG=1");
			n.ping_back = false;
		}
		if (!n.ping_out && pd_d.pool) {
			n.ping.work = ping_work;
			n.ping.done = ping_done;
			if (pd_pool_submit(pd_d.pool, &n.ping) == 0)
				n.ping_out = true;
		}
	}
	if (now - last_status >= STATUS_MS) {
		last_status = now;
		pd_notify_status();
	}
}

int pd_notify_init(uv_loop_t *loop)
{
	uint64_t period = STATUS_MS;
#ifdef PD_HAVE_SYSTEMD
	uint64_t usec = 0;
	if (sd_watchdog_enabled(0, &usec) > 0 && usec) {
		n.wd_usec = usec;
		period = usec / 2000; /* half the interval, in ms */
		if (period == 0)
			period = 1;
		pd_log_info("SYS", "watchdog every %llu ms", (unsigned long long)period);
	}
	if (!getenv("NOTIFY_SOCKET") && !n.wd_usec)
		return 0;
#else
	return 0;
#endif
	int r = uv_timer_init(loop, &n.timer);
	if (r < 0)
		return r;
	n.init = true;
	uv_unref((uv_handle_t *)&n.timer);
	/* Start the first ping right away so the first WATCHDOG=1 is not late. */
	if (n.wd_usec && pd_d.pool) {
		n.ping.work = ping_work;
		n.ping.done = ping_done;
		if (pd_pool_submit(pd_d.pool, &n.ping) == 0)
			n.ping_out = true;
	}
	return uv_timer_start(&n.timer, on_timer, period, period);
}

void pd_notify_deinit(void)
{
	if (!n.init)
		return;
	uv_timer_stop(&n.timer);
	uv_close((uv_handle_t *)&n.timer, NULL);
	n.init = false;
}
