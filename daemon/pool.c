/* SPDX-License-Identifier: MIT */
/* Bounded FIFO pthread pool with eventfd completions (see pool.h). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "pgpdec.h"
#include "pool.h"
#include "sigmask.h"

struct fifo {
	struct pd_job *head, *tail;
};

struct pd_pool {
	uv_loop_t *loop;
	uv_poll_t poll;         /* on efd: completions are waiting */
	int efd;                /* written by a worker only when wake is false */
	uv_poll_t tpoll;        /* on tfd: completions have been held HOLD_NS */
	int tfd;                /* timerfd, armed by the worker that holds the first completion */
	unsigned n_open;        /* of poll and tpoll, not yet closed (loop thread) */
	bool wake;              /* efd written, the loop has not yet found done empty (lock) */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct fifo queue;      /* waiting jobs (lock) */
	struct fifo done;       /* finished jobs (lock) */
	unsigned n_held;        /* of them, finished since the loop was last told (lock) */
	struct timespec held_since; /* when the first of those finished (lock) */
	unsigned n_queued;      /* (lock) */
	struct pd_task *help;   /* helper tasks waiting, served before jobs (lock) */
	unsigned n_help;        /* (lock) */
	unsigned n_idle;        /* workers waiting for work (lock) */
	atomic_ullong n_helped; /* helper tasks run by another worker */
	unsigned long long n_wakes; /* times the loop was woken for completions (loop thread) */
	unsigned long long n_timer_wakes; /* of them, by the timer of held completions */
	unsigned long long n_jobs;  /* jobs finished and handed back (loop thread) */
	pthread_cond_t help_done; /* a helper task finished (lock) */
	struct pd_helper helper; /* lent to every worker */
	atomic_uint n_running;
	unsigned queue_max;
	bool stop;              /* (lock) */
	unsigned n_threads;
	pthread_t *threads;
	struct pd_worker **workers;
};

enum { TASK_QUEUED, TASK_RUNNING, TASK_DONE }; /* pd_task.state */

/* How long a worker spins for a helper's half before it sleeps: longer
 * than the two halves of one operation usually differ, far shorter than a
 * half. */
#define SPIN_NS 300000L

static inline void spin_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* Worker thread: the loop has completions to run. */
static void wake_loop(struct pd_pool *p)
{
	uint64_t one = 1;
	while (write(p->efd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
	/* EAGAIN would need 2^64 - 1 unread writes; wake is set until read. */
}

/* While the queue holds at least HOLD_QUEUED jobs per worker, a worker
 * need not wake the loop for each job it finishes: the workers stay busy
 * until the loop hands out the results and reads the next requests.  On a
 * machine where every core is busy each wake-up of the loop preempts a
 * worker, and on a virtual machine a context switch costs tens of
 * microseconds, as much as the rest of a small message's work.  So the
 * loop is told once HOLD_SHARE of the queue has finished meanwhile (which
 * leaves the workers the rest to run while the clients send more), at
 * HOLD_MAX finished jobs, or at the first completion HOLD_NS after the
 * first one held.  The worker that holds the first one arms a timerfd the
 * loop polls, so that the results are handed out HOLD_NS later even when
 * every worker has gone on to a long job (an Argon2 derivation, a large
 * message's step) and no completion comes to decide again; the worker
 * that wakes the loop disarms it.  A job that took HOLD_NS or more is not
 * held at all (nor are those held before it): with jobs that long the
 * wake-ups cost little.  HOLD_NS is 3 ms: with RSA-2048 (0.27 ms a job)
 * the loop was told every 1 ms, about 7 jobs, far below half of a deep
 * queue; at 3 ms it answers about 22 at a time, and RSA-2048 at
 * concurrency 50 ran 2-8% faster with P99 latency unchanged (6,210-6,464
 * -> 6,585-6,733 msg/s, interleaved); cv25519 and RSA-4096 did not move. */
#define HOLD_QUEUED 2u
#define HOLD_SHARE 2u       /* held >= queued / HOLD_SHARE: tell the loop */
#define HOLD_MAX 32u
#define HOLD_NS 3000000L

static long ns_since(const struct timespec *t0)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (now.tv_sec - t0->tv_sec) * 1000000000L + (now.tv_nsec - t0->tv_nsec);
}

enum hold { TELL, HOLD, HOLD_FIRST };

/* A job that started at `started` was just pushed to done and the loop is
 * not woken (lock held): TELL the loop now, or HOLD it back (HOLD_FIRST:
 * the first one held, arm the timer). */
static enum hold hold_completion(struct pd_pool *p, const struct timespec *started)
{
	if (p->n_queued < HOLD_QUEUED * p->n_threads || ns_since(started) >= HOLD_NS)
		return TELL;
	if (p->n_held == 0) {
		clock_gettime(CLOCK_MONOTONIC, &p->held_since);
		p->n_held = 1;
		return HOLD_FIRST;
	}
	if ((p->n_held + 1) * HOLD_SHARE >= p->n_queued || p->n_held + 1 >= HOLD_MAX ||
	    ns_since(&p->held_since) >= HOLD_NS)
		return TELL;
	p->n_held++;
	return HOLD;
}

/* Worker thread, under the lock: arm (HOLD_NS) or disarm (0) the timer.
 * A timer that fires after the loop was told anyway only makes it find
 * done empty. */
static void set_timer(struct pd_pool *p, long ns)
{
	struct itimerspec it = { .it_value = { .tv_sec = ns / 1000000000L, .tv_nsec = ns % 1000000000L } };
	(void)timerfd_settime(p->tfd, 0, &it, NULL);
}

struct thread_arg {
	struct pd_pool *p;
	unsigned index;
};

static void fifo_push(struct fifo *f, struct pd_job *j)
{
	j->next = NULL;
	if (f->tail)
		f->tail->next = j;
	else
		f->head = j;
	f->tail = j;
}

static struct pd_job *fifo_pop(struct fifo *f)
{
	struct pd_job *j = f->head;
	if (j) {
		f->head = j->next;
		if (!f->head)
			f->tail = NULL;
		j->next = NULL;
	}
	return j;
}

static void *worker_main(void *arg)
{
	struct pd_pool *p = ((struct thread_arg *)arg)->p;
	unsigned index = ((struct thread_arg *)arg)->index;
	struct pd_worker *w = p->workers[index];

	free(arg);
	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->help && !p->queue.head && !p->stop) {
			p->n_idle++;
			pthread_cond_wait(&p->cond, &p->lock);
			p->n_idle--;
		}
		if (p->stop)
			break;
		if (p->help) {
			/* Half of another worker's operation: it is waiting for it. */
			struct pd_task *t = p->help;
			p->help = t->next;
			p->n_help--;
			t->state = TASK_RUNNING;
			pthread_mutex_unlock(&p->lock);
			t->fn(t->arg);
			pthread_mutex_lock(&p->lock);
			__atomic_store_n(&t->state, TASK_DONE, __ATOMIC_RELEASE);
			atomic_fetch_add(&p->n_helped, 1);
			pthread_cond_broadcast(&p->help_done);
			continue;
		}
		struct pd_job *j = fifo_pop(&p->queue);
		p->n_queued--;
		atomic_fetch_add(&p->n_running, 1);
		pthread_mutex_unlock(&p->lock);

		struct timespec started;
		clock_gettime(CLOCK_MONOTONIC, &started);
		j->work(j, w);

		pthread_mutex_lock(&p->lock);
		atomic_fetch_sub(&p->n_running, 1);
		fifo_push(&p->done, j);
		/* One write per batch: the loop drains until it finds done empty
		 * and only then clears wake, so a job finishing meanwhile needs no
		 * second wake-up, and this worker goes on to the next job in the
		 * same hold of the lock.  The write is outside the lock, so that
		 * the loop never waits on it for a system call (pd_pool_stop joins
		 * every worker before it closes efd). */
		if (p->wake)
			continue;
		enum hold h = hold_completion(p, &started);
		if (h == HOLD)
			continue;
		/* The timer is set under the lock, in the order of the decisions
		 * (timerfd_settime does not block): set outside it, the disarm
		 * for a batch the loop has already taken could come after the
		 * arm for the next batch, which would then wait for a completion
		 * however long the running jobs take. */
		if (h == HOLD_FIRST) {
			set_timer(p, HOLD_NS);
			continue;
		}
		if (p->n_held > 0)
			set_timer(p, 0);
		p->wake = true;
		p->n_held = 0;
		pthread_mutex_unlock(&p->lock);
		wake_loop(p);
		pthread_mutex_lock(&p->lock);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* ---- the pd_helper lent to each worker (see pgpdec.h) ---- */

/* Only when a worker would otherwise sit idle: jobs waiting in the queue
 * have the idle workers first, so at load nothing is split and throughput
 * is unchanged; with a lone message its half runs beside it. */
static bool helper_start(void *ctx, struct pd_task *t)
{
	struct pd_pool *p = ctx;
	bool ok = false;
	pthread_mutex_lock(&p->lock);
	if (!p->stop && p->n_idle > p->n_queued + p->n_help) {
		t->state = TASK_QUEUED;
		t->next = NULL;
		struct pd_task **pp = &p->help;
		while (*pp)
			pp = &(*pp)->next;
		*pp = t;
		p->n_help++;
		pthread_cond_signal(&p->cond);
		ok = true;
	}
	pthread_mutex_unlock(&p->lock);
	return ok;
}

/* The half is running on another core and takes about as long as the one
 * the caller just finished: spin up to SPIN_NS for it before sleeping, since
 * a wake-up through the condition variable costs tens of microseconds of a
 * 2 ms operation (and more on a virtual machine whose idle CPU has halted). */
static bool spin_until_done(struct pd_task *t)
{
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (unsigned i = 1;; i++) {
		if (__atomic_load_n(&t->state, __ATOMIC_ACQUIRE) == TASK_DONE)
			return true;
		spin_pause();
		if (i % 64 == 0) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			if ((now.tv_sec - t0.tv_sec) * 1000000000L + (now.tv_nsec - t0.tv_nsec) > SPIN_NS)
				return false;
		}
	}
}

static void helper_finish(void *ctx, struct pd_task *t)
{
	struct pd_pool *p = ctx;
	pthread_mutex_lock(&p->lock);
	if (t->state == TASK_QUEUED) {
		/* Nobody took it (yet): take it back and run it here. */
		struct pd_task **pp = &p->help;
		while (*pp != t)
			pp = &(*pp)->next;
		*pp = t->next;
		p->n_help--;
		pthread_mutex_unlock(&p->lock);
		t->fn(t->arg);
		return;
	}
	pthread_mutex_unlock(&p->lock);
	if (spin_until_done(t))
		return;
	pthread_mutex_lock(&p->lock);
	while (t->state != TASK_DONE)
		pthread_cond_wait(&p->help_done, &p->lock);
	pthread_mutex_unlock(&p->lock);
}

/* Loop thread: run done callbacks until the list stays empty; a done
 * callback may submit the next job, whose completion can race this drain.
 * wake is cleared only when done is found empty, under the lock: a job
 * pushed after that writes efd again, one pushed before is in a batch. */
static void drain(struct pd_pool *p)
{
	for (;;) {
		pthread_mutex_lock(&p->lock);
		struct fifo batch = p->done;
		p->done.head = p->done.tail = NULL;
		p->n_held = 0;
		if (!batch.head)
			p->wake = false;
		pthread_mutex_unlock(&p->lock);
		if (!batch.head)
			return;
		struct pd_job *j;
		while ((j = fifo_pop(&batch))) {
			p->n_jobs++;
			j->done(j);
		}
	}
}

/* Read fd's counter, then drain: a write after this read wakes us again. */
static void read_and_drain(struct pd_pool *p, int fd)
{
	uint64_t n;
	while (read(fd, &n, sizeof(n)) < 0 && errno == EINTR)
		;
	drain(p);
}

static void on_poll(uv_poll_t *h, int status, int events)
{
	struct pd_pool *p = h->data;
	(void)status;
	(void)events;
	p->n_wakes++;
	read_and_drain(p, p->efd);
}

/* The timer of held completions fired: hand them out. */
static void on_timer(uv_poll_t *h, int status, int events)
{
	struct pd_pool *p = h->data;
	(void)status;
	(void)events;
	p->n_timer_wakes++;
	read_and_drain(p, p->tfd);
}

static unsigned ncpus(void)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
		return (unsigned)CPU_COUNT(&set);
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned)n : 1;
}

unsigned pd_pool_resolve_threads(unsigned configured)
{
	unsigned n = configured ? configured : ncpus();
	return n > PD_MAX_WORKERS ? PD_MAX_WORKERS : n;
}

static void free_pool(struct pd_pool *p)
{
	for (unsigned i = 0; i < p->n_threads; i++)
		pd_worker_free(p->workers[i]);
	free(p->workers);
	free(p->threads);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->cond);
	pthread_cond_destroy(&p->help_done);
	if (p->efd >= 0)
		close(p->efd);
	if (p->tfd >= 0)
		close(p->tfd);
	free(p);
}

/* The pool is freed when the last of its poll handles has closed. */
static void on_close(uv_handle_t *h)
{
	struct pd_pool *p = h->data;
	if (--p->n_open == 0)
		free_pool(p);
}

static void close_polls(struct pd_pool *p, uv_close_cb cb)
{
	uv_close((uv_handle_t *)&p->poll, cb);
	if (p->n_open == 2)
		uv_close((uv_handle_t *)&p->tpoll, cb);
}

int pd_pool_new(struct pd_pool **ret, uv_loop_t *loop, unsigned nthreads, unsigned queue_max)
{
	struct pd_pool *p = calloc(1, sizeof(*p));
	sigset_t old;
	int r;

	if (!p)
		return -ENOMEM;
	nthreads = pd_pool_resolve_threads(nthreads);
	p->loop = loop;
	p->efd = -1;
	p->tfd = -1;
	p->queue_max = queue_max;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	pthread_cond_init(&p->help_done, NULL);
	p->helper = (struct pd_helper){ .start = helper_start, .finish = helper_finish, .ctx = p };
	p->threads = calloc(nthreads, sizeof(*p->threads));
	p->workers = calloc(nthreads, sizeof(*p->workers));
	if (!p->threads || !p->workers) {
		free_pool(p);
		return -ENOMEM;
	}
	p->n_threads = nthreads;
	for (unsigned i = 0; i < nthreads; i++) {
		r = pd_worker_new(&p->workers[i], i);
		if (r < 0) {
			free_pool(p);
			return r;
		}
		if (nthreads > 1)
			pd_worker_set_helper(p->workers[i], &p->helper);
	}
	p->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (p->efd < 0) {
		r = -errno;
		free_pool(p);
		return r;
	}
	p->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (p->tfd < 0) {
		r = -errno;
		free_pool(p);
		return r;
	}
	r = uv_poll_init(loop, &p->poll, p->efd);
	if (r < 0) {
		free_pool(p);
		return r;
	}
	p->poll.data = p;
	p->n_open = 1;
	r = uv_poll_init(loop, &p->tpoll, p->tfd);
	if (r == 0) {
		p->tpoll.data = p;
		p->n_open = 2;
		r = uv_poll_start(&p->poll, UV_READABLE, on_poll);
	}
	if (r == 0)
		r = uv_poll_start(&p->tpoll, UV_READABLE, on_timer);
	if (r < 0) {
		close_polls(p, on_close); /* frees the pool if the loop runs again */
		return r;
	}
	/* Workers never take signals: they belong to the loop's uv_signal. */
	pd_block_async_signals(&old);
	for (unsigned i = 0; i < nthreads; i++) {
		struct thread_arg *a = malloc(sizeof(*a));
		if (a) {
			a->p = p;
			a->index = i;
		}
		r = a ? pthread_create(&p->threads[i], NULL, worker_main, a) : ENOMEM;
		if (r) {
			free(a);
			pthread_sigmask(SIG_SETMASK, &old, NULL);
			p->n_threads = i;
			pthread_mutex_lock(&p->lock);
			p->stop = true;
			pthread_cond_broadcast(&p->cond);
			pthread_mutex_unlock(&p->lock);
			for (unsigned k = 0; k < i; k++)
				pthread_join(p->threads[k], NULL);
			p->n_threads = nthreads; /* free every pd_worker */
			close_polls(p, on_close); /* as above */
			return -r;
		}
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	*ret = p;
	return 0;
}

int pd_pool_submit(struct pd_pool *p, struct pd_job *j)
{
	int r = 0;
	j->cancelled = false;
	pthread_mutex_lock(&p->lock);
	if (p->stop)
		r = -ESHUTDOWN;
	else if (p->n_queued >= p->queue_max)
		r = -EAGAIN;
	else {
		fifo_push(&p->queue, j);
		p->n_queued++;
	}
	bool idle = r == 0 && p->n_idle > 0;
	pthread_mutex_unlock(&p->lock);
	/* After the unlock, so that the worker woken does not at once wait for
	 * the lock we hold (the pool outlives every submit). */
	if (idle)
		pthread_cond_signal(&p->cond);
	return r;
}

unsigned pd_pool_queued(const struct pd_pool *p)
{
	pthread_mutex_lock((pthread_mutex_t *)&p->lock);
	unsigned n = p->n_queued;
	pthread_mutex_unlock((pthread_mutex_t *)&p->lock);
	return n;
}

unsigned pd_pool_running(const struct pd_pool *p) { return atomic_load(&((struct pd_pool *)p)->n_running); }
unsigned pd_pool_threads(const struct pd_pool *p) { return p->n_threads; }
unsigned long long pd_pool_helped(const struct pd_pool *p) { return atomic_load(&((struct pd_pool *)p)->n_helped); }
unsigned long long pd_pool_wakeups(const struct pd_pool *p) { return p->n_wakes + p->n_timer_wakes; }
unsigned long long pd_pool_timer_wakeups(const struct pd_pool *p) { return p->n_timer_wakes; }
unsigned long long pd_pool_jobs(const struct pd_pool *p) { return p->n_jobs; }


void pd_pool_stop(struct pd_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	for (unsigned i = 0; i < p->n_threads; i++)
		pthread_join(p->threads[i], NULL);
	/* Threads are gone: no lock needed from here on. */
	struct pd_job *j;
	while ((j = fifo_pop(&p->queue))) {
		j->cancelled = true;
		fifo_push(&p->done, j);
	}
	p->n_queued = 0;
	drain(p);
	close_polls(p, on_close);
}
