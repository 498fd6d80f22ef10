/* SPDX-License-Identifier: MIT */
/* Counters and their Prometheus text exposition (the STATS reply; see stats.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admission.h"
#include "daemon.h"
#include "keys.h"
#include "peer.h"
#include "pgpdec.h"
#include "pool.h"
#include "session.h"
#include "stats.h"
#include "status.h"

#define LAT_BUCKETS 14

static const double bounds[LAT_BUCKETS] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                             0.25, 0.5, 1, 2.5, 5, 10, 30 };

static struct counters {
	uint64_t requests[64];          /* by wire status (index = status, 63 = other) */
	uint64_t lat_count[LAT_BUCKETS + 1]; /* per bucket; cumulated at render time */
	double lat_sum;
	uint64_t reloads, reload_failures;
	uint64_t bytes_in;  /* ciphertext received */
	uint64_t bytes_out; /* plaintext sent */
} g;

void pd_stats_request(uint16_t status, double seconds)
{
	struct counters *st = &g;
	st->requests[status < 63 ? status : 63]++;
	size_t i = 0;
	while (i < LAT_BUCKETS && seconds > bounds[i])
		i++;
	st->lat_count[i]++;
	st->lat_sum += seconds;
}

void pd_stats_bytes_in(uint64_t n) { g.bytes_in += n; }
void pd_stats_bytes_out(uint64_t n) { g.bytes_out += n; }

void pd_stats_reload(bool ok)
{
	if (ok)
		g.reloads++;
	else
		g.reload_failures++;
}

struct sbuf {
	char *p;
	size_t len, cap;
	bool oom;
};

static void put(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	for (;;) {
		if (b->oom)
			return;
		va_start(ap, fmt);
		int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = true;
			return;
		}
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		size_t ncap = b->cap * 2 + (size_t)n;
		char *np = realloc(b->p, ncap);
		if (!np) {
			b->oom = true;
			return;
		}
		b->p = np;
		b->cap = ncap;
	}
}

char *pd_stats_render(size_t *ret_len)
{
	const struct counters *st = &g;
	struct sbuf b = { malloc(4096), 0, 4096, false };
	if (!b.p)
		return NULL;

	put(&b, "# HELP pgpdecd_requests_total Decryption requests answered, by status.\n"
	        "# TYPE pgpdecd_requests_total counter\n");
	for (unsigned s = 0; s < 64; s++)
		if (st->requests[s] || s == 0)
			put(&b, "pgpdecd_requests_total{status=\"%s\"} %llu\n", s == 63 ? "OTHER" : pd_status_name((uint16_t)s),
			    (unsigned long long)st->requests[s]);
	put(&b, "# HELP pgpdecd_bytes_in_total Ciphertext bytes received.\n"
	        "# TYPE pgpdecd_bytes_in_total counter\npgpdecd_bytes_in_total %llu\n",
	    (unsigned long long)g.bytes_in);
	put(&b, "# HELP pgpdecd_bytes_out_total Plaintext bytes produced.\n"
	        "# TYPE pgpdecd_bytes_out_total counter\npgpdecd_bytes_out_total %llu\n",
	    (unsigned long long)g.bytes_out);
	put(&b, "# HELP pgpdecd_in_flight Messages being decrypted: admission slots taken (queue-length at most).\n"
	        "# TYPE pgpdecd_in_flight gauge\npgpdecd_in_flight %u\n", pd_adm_slots());
	struct pd_budget *mem = pd_adm_memory();
	put(&b, "# HELP pgpdecd_memory_bytes Memory of the messages in progress, drawn from max-memory.\n"
	        "# TYPE pgpdecd_memory_bytes gauge\npgpdecd_memory_bytes %llu\n"
	        "# HELP pgpdecd_memory_limit_bytes max-memory.\n"
	        "# TYPE pgpdecd_memory_limit_bytes gauge\npgpdecd_memory_limit_bytes %llu\n",
	    mem ? (unsigned long long)pd_budget_used(mem) : 0ULL, mem ? (unsigned long long)pd_budget_limit(mem) : 0ULL);
	put(&b, "# HELP pgpdecd_verified_held_bytes Memory of the plaintext held back for verified-only requests (max-verified-total).\n"
	        "# TYPE pgpdecd_verified_held_bytes gauge\npgpdecd_verified_held_bytes %llu\n",
	    (unsigned long long)pd_adm_held());
	put(&b, "# HELP pgpdecd_unsent_bytes Memory held by output waiting to be written on all connections, each buffer in full until its last octet is written (max-write-buffer pauses decryption).\n"
	        "# TYPE pgpdecd_unsent_bytes gauge\npgpdecd_unsent_bytes %llu\n", (unsigned long long)pd_sessions_unsent());
	put(&b, "# HELP pgpdecd_write_paused 1 while decryption is paused because max-write-buffer is reached.\n"
	        "# TYPE pgpdecd_write_paused gauge\npgpdecd_write_paused %d\n", pd_sessions_write_paused() ? 1 : 0);
	put(&b, "# HELP pgpdecd_queue_depth Jobs waiting for a worker.\n"
	        "# TYPE pgpdecd_queue_depth gauge\npgpdecd_queue_depth %u\n",
	    pd_d.pool ? pd_pool_queued(pd_d.pool) : 0);
	put(&b, "# HELP pgpdecd_workers Worker threads.\n"
	        "# TYPE pgpdecd_workers gauge\npgpdecd_workers %u\n", pd_d.pool ? pd_pool_threads(pd_d.pool) : 0);
	put(&b, "# HELP pgpdecd_jobs_total Worker jobs finished: a message takes one per request buffer of its ciphertext.\n"
	        "# TYPE pgpdecd_jobs_total counter\npgpdecd_jobs_total %llu\n",
	    pd_d.pool ? pd_pool_jobs(pd_d.pool) : 0ULL);
	put(&b, "# HELP pgpdecd_loop_wakeups_total Times workers woke the event loop to hand back finished jobs (under load, one per batch).\n"
	        "# TYPE pgpdecd_loop_wakeups_total counter\npgpdecd_loop_wakeups_total %llu\n",
	    pd_d.pool ? pd_pool_wakeups(pd_d.pool) : 0ULL);
	put(&b, "# HELP pgpdecd_split_operations_total Private-key operations whose second CRT half ran on an idle worker.\n"
	        "# TYPE pgpdecd_split_operations_total counter\npgpdecd_split_operations_total %llu\n",
	    pd_d.pool ? (unsigned long long)pd_pool_helped(pd_d.pool) : 0ULL);
	put(&b, "# HELP pgpdecd_split_failures_total Split operations redone on one thread: a result that failed its check, or no secure memory.\n"
	        "# TYPE pgpdecd_split_failures_total counter\npgpdecd_split_failures_total %lu\n", pd_split_failures());
	size_t heap_size, heap_used;
	pd_secure_heap(&heap_size, &heap_used);
	put(&b, "# HELP pgpdecd_secure_heap_bytes Size of OpenSSL's locked heap for the OpenSSL backends' RSA and ECDH keys, the keys' implicit-rejection secrets and split operations (secmem-size, rounded up to a power of two).\n"
	        "# TYPE pgpdecd_secure_heap_bytes gauge\npgpdecd_secure_heap_bytes %zu\n", heap_size);
	put(&b, "# HELP pgpdecd_secure_heap_used_bytes Bytes of it in use.\n"
	        "# TYPE pgpdecd_secure_heap_used_bytes gauge\npgpdecd_secure_heap_used_bytes %zu\n", heap_used);
	size_t unlocked;
	unsigned pools = pd_secmem_overflow(&unlocked);
	put(&b, "# HELP pgpdecd_secmem_bytes Size of libgcrypt's locked pool for keys and per-message secrets (secmem-size).\n"
	        "# TYPE pgpdecd_secmem_bytes gauge\npgpdecd_secmem_bytes %zu\n", pd_secmem_size());
	put(&b, "# HELP pgpdecd_secmem_unlocked_pools Pools of unlocked memory libgcrypt made when its locked pool was full (0: it never was; any other value means secrets may have been swapped out: raise secmem-size).\n"
	        "# TYPE pgpdecd_secmem_unlocked_pools gauge\npgpdecd_secmem_unlocked_pools %u\n", pools);
	put(&b, "# HELP pgpdecd_secmem_unlocked_bytes Bytes of secrets in them now.\n"
	        "# TYPE pgpdecd_secmem_unlocked_bytes gauge\npgpdecd_secmem_unlocked_bytes %zu\n", unlocked);
	put(&b, "# HELP pgpdecd_connections Open connections.\n"
	        "# TYPE pgpdecd_connections gauge\npgpdecd_connections %u\n", pd_sessions_count());
	put(&b, "# HELP pgpdecd_connections_total Connections accepted.\n"
	        "# TYPE pgpdecd_connections_total counter\npgpdecd_connections_total %llu\n",
	    (unsigned long long)pd_sessions_accepted());
	put(&b, "# HELP pgpdecd_connections_refused_total Connections refused (limits, access).\n"
	        "# TYPE pgpdecd_connections_refused_total counter\npgpdecd_connections_refused_total %llu\n",
	    (unsigned long long)pd_peer_refused());
	put(&b, "# HELP pgpdecd_keys_loaded Decryption-capable secret (sub)keys loaded.\n"
	        "# TYPE pgpdecd_keys_loaded gauge\npgpdecd_keys_loaded %zu\n",
	    pd_d.keys ? pd_keyset_count(pd_d.keys) : 0);
	put(&b, "# HELP pgpdecd_reloads_total Reloads (SIGHUP), by outcome.\n"
	        "# TYPE pgpdecd_reloads_total counter\n"
	        "pgpdecd_reloads_total{result=\"ok\"} %llu\npgpdecd_reloads_total{result=\"failed\"} %llu\n",
	    (unsigned long long)st->reloads, (unsigned long long)st->reload_failures);
	put(&b, "# HELP pgpdecd_request_duration_seconds Time from DECRYPT to the result.\n"
	        "# TYPE pgpdecd_request_duration_seconds histogram\n");
	uint64_t cum = 0;
	for (size_t i = 0; i < LAT_BUCKETS; i++) {
		cum += st->lat_count[i];
		put(&b, "pgpdecd_request_duration_seconds_bucket{le=\"%g\"} %llu\n", bounds[i], (unsigned long long)cum);
	}
	cum += st->lat_count[LAT_BUCKETS];
	put(&b, "pgpdecd_request_duration_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
	put(&b, "pgpdecd_request_duration_seconds_sum %.6f\npgpdecd_request_duration_seconds_count %llu\n",
	    st->lat_sum, (unsigned long long)cum);
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	*ret_len = b.len;
	return b.p;
}
