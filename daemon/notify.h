/* SPDX-License-Identifier: MIT */
/*
 * systemd integration in one place: READY=1 once listening with keys
 * loaded, STATUS= with live counts, RELOADING=1/READY=1 around a reload,
 * STOPPING=1, and WATCHDOG=1 at half of WatchdogSec, sent only after a
 * no-op job has just round-tripped the worker pool (proof that the loop
 * and the workers are alive).  Every call is a no-op without NOTIFY_SOCKET
 * or when built without libsystemd.
 */
#pragma once

#include <uv.h>

/** Start the watchdog timer if the service manager asks for one. */
int pd_notify_init(uv_loop_t *loop);
void pd_notify_ready(void);
void pd_notify_reloading(void);
void pd_notify_stopping(void);
/** STATUS= with the current counts (also sent by the watchdog/status timer). */
void pd_notify_status(void);
/** Stop the timers. */
void pd_notify_deinit(void);
