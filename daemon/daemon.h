/* SPDX-License-Identifier: MIT */
/*
 * The daemon's one shared context (loop thread only): the facts every
 * module may read, and only those — the loop, the current config, key set
 * and TLS credentials (each swapped whole by main.c on reload), the worker
 * pool and whether the daemon is stopping.  Figures a module keeps live in
 * that module and are asked for through its accessors (sessions:
 * session.h, refusals: peer.h, slots and held bytes: admission.h, counters
 * for STATS: stats.h).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "config.h"

struct pd_keyset;
struct pd_tls_creds;
struct pd_pool;

struct pd_daemon {
	uv_loop_t *loop;
	struct pd_config *cfg;       /* current; swapped on reload */
	struct pd_keyset *keys;      /* current; requests hold their own ref */
	struct pd_tls_creds *tls_creds; /* current; sessions hold their own ref */
	struct pd_pool *pool;
	bool stopping;               /* SIGTERM/SIGINT: draining */
};

extern struct pd_daemon pd_d;

/** Something the drain waits for has ended (a session closed, an admission
 * slot was given back): asks the hook main.c registered whether the daemon
 * may exit now.  Safe to call at any time; does nothing before a hook is set. */
void pd_daemon_maybe_exit(void);
/** Register that hook (main.c, once). */
void pd_daemon_set_exit_hook(void (*hook)(void));
