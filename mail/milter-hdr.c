/* SPDX-License-Identifier: MIT */
/* Header lists and the per-name diff (see milter-hdr.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "milter-hdr.h"

int pd_hdr_list_add(struct pd_hdr_list *l, const char *name, const char *value)
{
	size_t nl = strlen(name), vl = strlen(value);
	if (l->n >= PD_HDR_MAX_FIELDS || l->bytes + nl + vl > PD_HDR_MAX_BYTES)
		return -E2BIG;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 32;
		struct pd_hdr *nv = realloc(l->v, cap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		l->v = nv;
		l->cap = cap;
	}
	char *n = strdup(name), *v = malloc(vl + 1);
	if (!n || !v) {
		free(n);
		free(v);
		return -ENOMEM;
	}
	size_t j = 0;
	for (size_t i = 0; i < vl; i++)
		if (value[i] != '\r')
			v[j++] = value[i];
	v[j] = 0;
	l->v[l->n++] = (struct pd_hdr){ n, v };
	l->bytes += nl + j;
	return 0;
}

void pd_hdr_list_clear(struct pd_hdr_list *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->v[i].name);
		free(l->v[i].value);
	}
	free(l->v);
	*l = (struct pd_hdr_list){ 0 };
}

static const char *skip_lead(const char *s)
{
	while (*s == ' ' || *s == '\t' || *s == '\r')
		s++;
	return s;
}

bool pd_hdr_value_eq(const char *a, const char *b)
{
	a = skip_lead(a);
	b = skip_lead(b);
	for (;;) {
		while (*a == '\r')
			a++;
		while (*b == '\r')
			b++;
		if (*a != *b)
			return false;
		if (!*a)
			return true;
		a++;
		b++;
	}
}

static unsigned count_name(const struct pd_hdr_list *l, const char *name)
{
	unsigned k = 0;
	for (size_t i = 0; i < l->n; i++)
		k += !strcasecmp(l->v[i].name, name);
	return k;
}

/* Has an earlier field of l (before index i) the same name? */
static bool seen_before(const struct pd_hdr_list *l, size_t i)
{
	for (size_t j = 0; j < i; j++)
		if (!strcasecmp(l->v[j].name, l->v[i].name))
			return true;
	return false;
}

/* The k-th (1-based) field named name in l. */
static const struct pd_hdr *nth(const struct pd_hdr_list *l, const char *name, unsigned k)
{
	for (size_t i = 0; i < l->n; i++)
		if (!strcasecmp(l->v[i].name, name) && --k == 0)
			return &l->v[i];
	return NULL;
}

int pd_hdr_diff(const struct pd_hdr_list *old, const struct pd_hdr_list *new,
                int (*op)(void *arg, enum pd_hdr_op kind, const char *name, unsigned idx, const char *value),
                void *arg)
{
	int r;
	/* Changes and deletions, name by name in the old order. */
	for (size_t i = 0; i < old->n; i++) {
		if (seen_before(old, i))
			continue;
		const char *name = old->v[i].name;
		unsigned k = count_name(old, name), m = count_name(new, name);
		for (unsigned j = 1; j <= k && j <= m; j++) {
			const struct pd_hdr *o = nth(old, name, j), *nw = nth(new, name, j);
			if (!pd_hdr_value_eq(o->value, nw->value) && (r = op(arg, PD_HDR_CHANGE, name, j, nw->value)))
				return r;
		}
		for (unsigned j = k; j > m; j--)
			if ((r = op(arg, PD_HDR_DELETE, name, j, NULL)))
				return r;
	}
	/* Additions in the new order: occurrences beyond the old count. */
	for (size_t i = 0; i < new->n; i++) {
		const char *name = new->v[i].name;
		unsigned pos = 0;
		for (size_t j = 0; j <= i; j++)
			pos += !strcasecmp(new->v[j].name, name);
		if (pos > count_name(old, name) && (r = op(arg, PD_HDR_ADD, new->v[i].name, 0, new->v[i].value)))
			return r;
	}
	return 0;
}
