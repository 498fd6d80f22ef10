/* SPDX-License-Identifier: MIT */
/* The shared budgets of admission (see admission.h). */
#include <assert.h>

#include "admission.h"
#include "daemon.h"
#include "pgpdec.h"

static unsigned slots;
static uint64_t held;
static struct pd_budget *memory;
static size_t pending_pw;

bool pd_adm_slot_take(void)
{
	if (slots >= pd_d.cfg->queue_length)
		return false;
	slots++;
	return true;
}

void pd_adm_slot_give(void)
{
	assert(slots > 0);
	slots--;
	pd_daemon_maybe_exit();
}

unsigned pd_adm_slots(void) { return slots; }

bool pd_adm_held_take(size_t n)
{
	if (held + n > pd_d.cfg->max_verified_total || held + n < held)
		return false;
	held += n;
	return true;
}

void pd_adm_held_give(size_t n)
{
	assert(n <= held);
	held -= n;
}

uint64_t pd_adm_held(void) { return held; }

bool pd_adm_pending_pw_take(size_t n)
{
	if (n > PD_ADM_PENDING_PW_MAX - pending_pw)
		return false;
	pending_pw += n;
	return true;
}

void pd_adm_pending_pw_give(size_t n)
{
	assert(n <= pending_pw);
	pending_pw -= n;
}

struct pd_budget *pd_adm_memory(void)
{
	if (!memory)
		pd_budget_new(&memory, pd_d.cfg->max_memory);
	return memory;
}
