/* SPDX-License-Identifier: MIT */
/*
 * pd_budget: a memory budget that messages on several threads draw from
 * (see pgpdec.h).  One atomic counter; a take that would pass the limit is
 * undone and refused, so the counter never stays above it.
 */
#include "internal.h"

struct pd_budget {
	uint64_t limit;
	uint64_t used; /* atomic */
};

int pd_budget_new(struct pd_budget **ret, uint64_t limit)
{
	struct pd_budget *b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->limit = limit;
	*ret = b;
	return 0;
}

struct pd_budget *pd_budget_free(struct pd_budget *b)
{
	free(b);
	return NULL;
}

uint64_t pd_budget_used(const struct pd_budget *b)
{
	return __atomic_load_n(&b->used, __ATOMIC_RELAXED);
}

uint64_t pd_budget_limit(const struct pd_budget *b) { return b->limit; }

int pd_budget_take(struct pd_budget *b, uint64_t n)
{
	uint64_t now = __atomic_add_fetch(&b->used, n, __ATOMIC_RELAXED);
	if (now > b->limit || now < n) {
		__atomic_sub_fetch(&b->used, n, __ATOMIC_RELAXED);
		return -ENOMEM;
	}
	return 0;
}

void pd_budget_give(struct pd_budget *b, uint64_t n)
{
	uint64_t before = __atomic_fetch_sub(&b->used, n, __ATOMIC_RELAXED);
	if (before < n) /* a give without its take: a bug, never a wrapped counter */
		abort();
}
