/* SPDX-License-Identifier: MIT */
/*
 * The daemon's one shared context (loop thread only): current config and
 * key set (both swapped whole on reload), the worker pool, the listeners,
 * the open sessions and the counters behind STATS and sd_notify STATUS=.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "config.h"
#include "stats.h" /* request.c reaches pd_stats_request through here */

struct pd_keyset;
struct pd_tls_creds;
struct pd_pool;
struct pd_session;

#define PD_LAT_BUCKETS 14

struct pd_stats {
	uint64_t requests[64];      /* by wire status (index = status, 63 = other) */
	uint64_t bytes_in;          /* ciphertext received */
	uint64_t bytes_out;         /* plaintext sent */
	uint64_t connections_total;
	uint64_t lat_count[PD_LAT_BUCKETS + 1]; /* cumulative at render time; here per bucket */
	double lat_sum;
	uint64_t reloads, reload_failures;
};

struct pd_daemon {
	uv_loop_t *loop;
	struct pd_config *cfg;       /* current; swapped on reload */
	struct pd_keyset *keys;      /* current; requests hold their own ref */
	struct pd_tls_creds *tls_creds; /* current; sessions hold their own ref */
	struct pd_pool *pool;
	struct pd_session *sessions; /* doubly linked through session */
	unsigned n_sessions;
	uint64_t unsent_bytes;       /* queued for writing on all sessions (sum of their wbytes) */
	bool write_paused;           /* unsent_bytes reached max-write-buffer: back-pressure (iii) */
	bool stopping;
	bool reloading;
	struct pd_stats stats;
};

extern struct pd_daemon pd_d;

/** Called when sessions or requests finish: drives drain on shutdown. */
void pd_daemon_maybe_exit(void);
