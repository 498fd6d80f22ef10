/* SPDX-License-Identifier: MIT */
/*
 * Compressed Data packet payload (RFC 9580 §5.6) as a streaming stage
 * [runs on workers]: ZIP (raw deflate), ZLIB, BZip2, and 0 (stored).
 * Limits (total output, ratio) are counted by the caller, which owns the
 * layer; this module only transforms bytes.  A corrupt stream is
 * PD_EINTEGRITY (inside encryption it means tampering, RFC 9580 §13.7).
 */
#pragma once
#include "internal.h"

struct pd_inflate;

/** New decompressor for OpenPGP compression id algo (0-3); PD_EUNSUPPORTED otherwise. */
PD_HIDDEN int pd_inflate_new(struct pd_inflate **ret, uint8_t algo);
/** Memory a decompressor for algo may allocate, at most (what the message
 * takes from its budget before pd_inflate_new()). */
PD_HIDDEN uint64_t pd_inflate_memory(uint8_t algo);
/** Transform: returns 0 (more input or room needed), 1 when the compressed
 * stream has ended (no more output; extra input is left unconsumed), or a
 * negative error.  eof: no more input follows (then an unfinished stream is
 * PD_EINTEGRITY, except for algo 0 where eof ends the data). */
PD_HIDDEN int pd_inflate_run(struct pd_inflate *z, const uint8_t *in, size_t inlen, size_t *ret_used,
                             uint8_t *out, size_t outcap, size_t *ret_out, bool eof);
/** Free (accepts NULL, returns NULL). */
PD_HIDDEN struct pd_inflate *pd_inflate_free(struct pd_inflate *z);
