/* SPDX-License-Identifier: MIT */
/*
 * pd_metrics: the optional HTTP listener of metrics-listen, serving
 * GET /metrics in the Prometheus text exposition format 0.0.4: the STATS
 * counters (stats.c renders them), the conventional process_* metrics read
 * from /proc/self, and pgpdecd_build_info.  Anything else is 404 (405 for
 * another method on /metrics).
 *
 * libmicrohttpd runs inside the libuv loop, without a thread of its own:
 * its epoll descriptor is watched by a uv_poll and its timeouts by a
 * uv_timer, and MHD_run (non-blocking I/O only) is called from their
 * callbacks, so the request handler runs on the loop thread and reads the
 * loop-only counters directly.  What a scraper can cost is fixed: at most
 * PD_METRICS_CONNECTIONS connections (PD_METRICS_PER_IP from one address),
 * PD_METRICS_MEMORY bytes of request state each, closed after
 * PD_METRICS_TIMEOUT_S idle seconds; a request body is never read.
 * Loop thread only.
 */
#pragma once

#include <stddef.h>
#include <uv.h>

struct pd_config;

#define PD_METRICS_CONNECTIONS 16
#define PD_METRICS_PER_IP 8
#define PD_METRICS_TIMEOUT_S 5
#define PD_METRICS_MEMORY (16u << 10)

/** Bind and listen on c->metrics_listen (nothing if it is unset) and serve
 * it from loop.  0, or a negative errno with a sentence in err. */
int pd_metrics_start(uv_loop_t *loop, const struct pd_config *c, char *err, size_t errlen);
/** Close the listener and its connections (drain, exit); safe to call twice
 * or when never started. */
void pd_metrics_stop(void);
