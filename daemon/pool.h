/* SPDX-License-Identifier: MIT */
/*
 * pd_pool: our own bounded pthread worker pool (DESIGN.md "worker pool").
 * Every private-key operation and every symmetric/decompression step runs
 * here, never on the loop thread.  Each worker thread owns one pd_worker
 * (pre-opened cipher and hash handles) and hands it to the job it runs.
 *
 * Jobs wait in one FIFO with a hard limit; completions come back to the loop
 * thread through an eventfd (a uv_poll), written only when the loop is not
 * already woken, and are drained in a loop until none is left.  While many
 * jobs are queued, a worker holds its completions back for a while instead
 * of waking the loop for each (hold_completion in pool.c: at most 3 ms, a
 * timerfd the loop polls hands them out then; never when the queue is
 * short).  (Not
 * uv_async: its loop side spins while the sender is inside its write, which
 * on a virtual machine cost a sched_yield per 128 KiB of a large message.)
 *
 * Each worker also gets the pool's pd_helper: a worker in the middle of a
 * large RSA operation may hand one CRT half to a worker that would
 * otherwise be idle (never when jobs are waiting).  Such tasks are served
 * before queued jobs, since a worker is blocked on each.
 *
 * Async contract: if pd_pool_submit() returns an error, done is never
 * called; otherwise done is called exactly once, on the loop thread, after
 * work has run (or with job->cancelled set if the pool stopped first).
 */
#pragma once

#include <stdbool.h>
#include <uv.h>

struct pd_worker;
struct pd_pool;

struct pd_job { /* public, by value: embedded in the owner */
	void (*work)(struct pd_job *j, struct pd_worker *w); /* worker thread */
	void (*done)(struct pd_job *j);                      /* loop thread */
	bool cancelled;                                      /* work did not run */
	struct pd_job *next;                                 /* pool's own */
};

/** Start nthreads workers (0 = one per CPU) with a queue of at most queue_max jobs. */
int pd_pool_new(struct pd_pool **ret, uv_loop_t *loop, unsigned nthreads, unsigned queue_max);
/** Queue a job; -EAGAIN when the queue is full, -ESHUTDOWN when stopping. */
int pd_pool_submit(struct pd_pool *p, struct pd_job *j);
/** Jobs waiting (not yet picked by a worker). */
unsigned pd_pool_queued(const struct pd_pool *p);
/** Jobs being run right now. */
unsigned pd_pool_running(const struct pd_pool *p);
/** Helper tasks (CRT halves) run for another worker since the start. */
unsigned long long pd_pool_helped(const struct pd_pool *p);
/** Times the loop was woken for completions since the start (loop thread). */
unsigned long long pd_pool_wakeups(const struct pd_pool *p);
/** Of them, by the timer of held completions (loop thread). */
unsigned long long pd_pool_timer_wakeups(const struct pd_pool *p);
/** Jobs finished and handed back to the loop (loop thread). */
unsigned long long pd_pool_jobs(const struct pd_pool *p);
/** Number of worker threads. */
unsigned pd_pool_threads(const struct pd_pool *p);
/** The number of worker threads pd_pool_new() makes for `configured` (the
 * workers setting; 0: one per CPU this process may run on), at most
 * PD_MAX_WORKERS.  Any thread. */
unsigned pd_pool_resolve_threads(unsigned configured);
/** Stop: workers finish the job they run and exit (joined here, blocking),
 * queued jobs complete as cancelled, then the poll handle closes and the
 * pool is freed.  Loop thread only. */
void pd_pool_stop(struct pd_pool *p);
