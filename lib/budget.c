/* SPDX-License-Identifier: MIT */
/*
 * pd_budget: a memory budget that messages on several threads draw from
 * (see pgpdec.h).  One atomic counter, taken by compare-and-swap: it never
 * passes the limit, not even for a moment.
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
	/* compare-and-swap: a take that does not fit never shows in used, so
	 * a concurrent one never fails because of it */
	uint64_t cur = __atomic_load_n(&b->used, __ATOMIC_RELAXED);
	do {
		if (n > b->limit || cur > b->limit - n)
			return -ENOMEM;
	} while (!__atomic_compare_exchange_n(&b->used, &cur, cur + n, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
	return 0;
}

void pd_budget_give(struct pd_budget *b, uint64_t n)
{
	uint64_t before = __atomic_fetch_sub(&b->used, n, __ATOMIC_RELAXED);
	if (before < n) /* a give without its take: a bug, never a wrapped counter */
		abort();
}
