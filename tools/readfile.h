/* SPDX-License-Identifier: MIT */
/* Whole-file reading for the command-line tools (pd-decrypt, pgpdecd-sop). */
#pragma once
#include <stddef.h>
#include <stdint.h>

/* Largest file the tools read whole (the 50 MiB bench inputs fit easily). */
#define PD_TOOL_MAX_FILE ((size_t)1 << 30)

/** Read path into a malloc'd buffer; -EFBIG beyond max octets, -errno otherwise.
 * Memory it gives back on the way (growth, failure) is wiped first; the caller
 * wipes *ret before freeing it if the file was secret. */
int pd_read_file(const char *path, size_t max, uint8_t **ret, size_t *ret_len);
/** The same from an open descriptor, read to its end (left open). */
int pd_read_fd(int fd, size_t max, uint8_t **ret, size_t *ret_len);
/** Double *cap: a new block, len octets copied, the old one wiped and freed
 * (realloc would release it unwiped). */
int pd_grow_wiped(uint8_t **buf, size_t *cap, size_t len);
