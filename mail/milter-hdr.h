/* SPDX-License-Identifier: MIT */
/*
 * The milter's header edits: a list of header fields (name, value as the
 * MTA passes it: everything after the colon, folds kept as "\n" plus
 * white space, no CR), and the diff that turns one list into another with
 * the milter's
 * three operations, per field name (the new list comes from
 * pd_mail_header_fields(), GMime's reading of the written message):
 *   - the i-th occurrence (1-based) of a name changes (smfi_chgheader),
 *   - surplus occurrences are deleted from the highest index down, so the
 *     lower indexes stay valid (smfi_chgheader with value NULL),
 *   - further occurrences are appended (smfi_addheader), in the new list's
 *     order.
 * A field whose value is the same apart from CRs and leading white space is
 * left alone: the MTA's own Received: header, which it passes to the milter
 * before-queue, is never deleted or added again.  No I/O and no libmilter,
 * so it is unit-tested alone.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct pd_hdr { /* public, by value */
	char *name;
	char *value;
};

struct pd_hdr_list { /* public, by value; zero-initialise */
	struct pd_hdr *v;
	size_t n, cap;
	size_t bytes; /* octets of names and values, for the caller's limit */
};

enum pd_hdr_op {
	PD_HDR_CHANGE,  /* name, idx (1-based among fields of that name), value */
	PD_HDR_DELETE,  /* name, idx; value NULL */
	PD_HDR_ADD,     /* name, value; idx 0 */
};

#define PD_HDR_MAX_FIELDS 10000
#define PD_HDR_MAX_BYTES (4u << 20)

/** Append a copy of name and value (CRs dropped from the value); 0, -ENOMEM or -E2BIG (limits above). */
int pd_hdr_list_add(struct pd_hdr_list *l, const char *name, const char *value);
/** Free the fields; the list is empty and reusable after. */
void pd_hdr_list_clear(struct pd_hdr_list *l);

/**
 * Call op for each edit that turns old into new, in an order the MTA can
 * apply one after the other; stops at and returns op's first nonzero
 * return, else 0.
 */
int pd_hdr_diff(const struct pd_hdr_list *old, const struct pd_hdr_list *new,
                int (*op)(void *arg, enum pd_hdr_op kind, const char *name, unsigned idx, const char *value),
                void *arg);

/** Values equal apart from CRs and leading white space. */
bool pd_hdr_value_eq(const char *a, const char *b);
