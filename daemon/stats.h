/* SPDX-License-Identifier: MIT */
/*
 * The counters that exist only to be reported (requests by status and
 * their latency, bytes in and out, reloads) and the Prometheus text of the
 * STATS reply, which also asks the modules that own the other figures
 * (sessions, peers, admission, pool, keys) for theirs.  Loop thread only.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Record one finished request (status, latency in seconds). */
void pd_stats_request(uint16_t status, double seconds);
/** Render the Prometheus text exposition; malloc'd, NUL-terminated, NULL on ENOMEM. */
char *pd_stats_render(size_t *ret_len);
/** Ciphertext received (DATA payloads, including those of answered requests). */
void pd_stats_bytes_in(uint64_t n);
/** Plaintext produced. */
void pd_stats_bytes_out(uint64_t n);
/** One reload (SIGHUP) done: ok, or failed and the old set kept. */
void pd_stats_reload(bool ok);
