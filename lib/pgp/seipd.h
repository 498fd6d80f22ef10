/* SPDX-License-Identifier: MIT */
/*
 * Encrypted containers [run on workers]: the stage between the outer packet
 * reader and the inner packet layers.  Each takes the container body (after
 * the header octets) in slices and yields plaintext.
 *
 *  - SEIPD v1 (tag 18 v1): CFB, zero IV, no resync; SHA-1 MDC over the
 *    prefix and the plaintext; the last 22 octets are held back and checked
 *    at the end.  Plaintext is released before the MDC is checked (the
 *    caller marks it provisional; the verdict comes at the end).
 *  - SED (tag 9): OpenPGP CFB with resync, no integrity, only if allowed.
 *  - SEIPD v2 (tag 18 v2) and LibrePGP OCB (tag 20): AEAD chunks; a chunk's
 *    plaintext is released only after its tag verified (pgp/aead.c).
 *
 * All share the run() shape: 0 = progress possible with more input/room,
 * 1 = done (verified, all output drained), negative = error (PD_EINTEGRITY
 * for any authentication failure).
 */
#pragma once
#include "pgp/unwrap.h"

struct pd_cfb;

/** Start SEIPD v1 (sed=false) or SED (sed=true) with session key sk. */
PD_HIDDEN int pd_cfb_new(struct pd_cfb **ret, struct pd_worker *w, const struct pd_sesskey *sk, bool sed);
PD_HIDDEN int pd_cfb_run(struct pd_cfb *c, const uint8_t *in, size_t inlen, size_t *ret_used,
                         uint8_t *out, size_t outcap, size_t *ret_out, bool eof);
PD_HIDDEN struct pd_cfb *pd_cfb_free(struct pd_cfb *c, struct pd_worker *w);

struct pd_aead;

/** Length of the AEAD container header (after the packet header, including
 * the version octet) given its first 4 octets; PD_EUNSUPPORTED/PD_EMALFORMED
 * for bad versions/algorithms.  tag: 18 (v2) or 20. */
PD_HIDDEN int pd_aead_header_len(uint8_t tag, const uint8_t *hdr4, size_t *ret_len);
/** Start decrypting: hdr is the whole header (pd_aead_header_len octets).
 * sk->algo must equal the header's cipher or be 0 (unbound), and sk->len its
 * key length (checked; a mismatch is PD_EINTEGRITY).  Chunk octets above
 * lim->max_aead_chunk_log are PD_ELIMIT. */
/** Memory an AEAD container with chunk octet c allocates (its chunk buffer). */
PD_HIDDEN uint64_t pd_aead_memory(uint8_t c);
PD_HIDDEN int pd_aead_new(struct pd_aead **ret, struct pd_worker *w, uint8_t tag, const uint8_t *hdr,
                          size_t hdrlen, const struct pd_sesskey *sk, const struct pd_limits *lim);
PD_HIDDEN int pd_aead_run(struct pd_aead *a, const uint8_t *in, size_t inlen, size_t *ret_used,
                          uint8_t *out, size_t outcap, size_t *ret_out, bool eof);
PD_HIDDEN struct pd_aead *pd_aead_free(struct pd_aead *a, struct pd_worker *w);
