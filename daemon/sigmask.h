/* SPDX-License-Identifier: MIT */
/*
 * The signal mask of the daemon's helper threads (workers, reload, key
 * loading and freeing): every signal belongs to the loop's uv_signal
 * handles, except the ones a fault raises in the faulting thread itself.
 * Blocked, those are delivered with their default action: the process dies
 * without a sanitizer report or a core dump of the fault (a SIGSEGV in a
 * key-set freeing thread did exactly that in CI).
 */
#pragma once
#include <pthread.h>
#include <signal.h>

/** Block what a helper thread must not take; the mask before goes to *old
 * (restore it with pthread_sigmask(SIG_SETMASK, old, NULL) once the thread
 * is created: it inherits the mask). */
static inline void pd_block_async_signals(sigset_t *old)
{
	sigset_t s;
	sigfillset(&s);
	sigdelset(&s, SIGSEGV);
	sigdelset(&s, SIGBUS);
	sigdelset(&s, SIGFPE);
	sigdelset(&s, SIGILL);
	sigdelset(&s, SIGTRAP);
	sigdelset(&s, SIGSYS);
	pthread_sigmask(SIG_BLOCK, &s, old);
}
