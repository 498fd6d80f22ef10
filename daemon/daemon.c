/* SPDX-License-Identifier: MIT */
/* The shared context and the exit hook (see daemon.h). */
#include "daemon.h"

struct pd_daemon pd_d;

static void (*exit_hook)(void);

void pd_daemon_set_exit_hook(void (*hook)(void)) { exit_hook = hook; }

void pd_daemon_maybe_exit(void)
{
	if (exit_hook)
		exit_hook();
}
