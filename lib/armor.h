/* SPDX-License-Identifier: MIT */
/*
 * ASCII armor (RFC 9580 §6) as a streaming decoder: the first stage after
 * the input buffer.  Any slicing of the input works, down to one byte.
 * Accepts header lines, any line length, CR/LF/whitespace anywhere in the
 * body, a CRC24 line or none.  A present CRC24 is checked but a mismatch
 * is only reported through crc_state (RFC 9580 §6.1: MUST NOT reject; the
 * MDC/AEAD tag is the integrity check).  Text before the BEGIN line is
 * skipped up to a cap, so mail bodies with a preamble work.
 */
#pragma once
#include "internal.h"

struct pd_armor { /* embedded by value in its owner; fields private to armor.c */
	int state;            /* > 0 a state, < 0 a sticky error */
	uint32_t quad;        /* base64 bits accumulated */
	int nquad;            /* sextets in quad */
	int npad;             /* '=' seen in the current quad */
	bool data_done;       /* '=' padding closed the data: only CRC/END may follow */
	bool line_skip;       /* current line cannot be a marker / overflowed line[] */
	bool maybe_body;      /* header-area line so far looks like base64 */
	bool replay;          /* line[rp_pos..line_len) still goes to the body decoder */
	uint32_t crc;         /* running CRC24 of the decoded data */
	uint32_t crc_given;   /* CRC24 from the armor, if any */
	int crc_state;        /* 0 none, 1 matched, -1 mismatched or malformed */
	size_t line_len;      /* bytes in line[] */
	size_t rp_pos;        /* next line[] octet to replay */
	char line[128];       /* current header/marker line (prefix kept) */
	uint64_t skipped;     /* preamble/header bytes skipped (capped) */
	uint8_t kind;         /* what BEGIN said: 1 MESSAGE, 2 PRIVATE KEY BLOCK, 3 PUBLIC KEY BLOCK, 4 SIGNATURE */
};

/* Text before BEGIN and the armor headers are each capped at this many octets. */
#define PD_ARMOR_PREAMBLE_MAX (64 * 1024)
#define PD_ARMOR_HEADERS_MAX (64 * 1024)

/** Decide whether data is armored: 1 armored, 0 binary, PD_EAGAIN if more
 * input is needed, PD_ENOTPGP if it is neither. eof: no more input follows. */
PD_HIDDEN int pd_armor_detect(const uint8_t *in, size_t len, bool eof);
PD_HIDDEN void pd_armor_init(struct pd_armor *a);
/** Decode: consume up to inlen octets, write up to outcap binary octets.
 * Returns 0 (call again with more input or more room), 1 when the END line
 * was read (nothing more will come; text after it is left unconsumed), or
 * PD_EMALFORMED / PD_ELIMIT / PD_EUNSUPPORTED (cleartext-signed or multi-part
 * armor) / PD_ENOTPGP (no BEGIN line within the preamble cap); errors are
 * sticky.  eof says no input follows (then a missing END line is
 * PD_ETRUNCATED). */
PD_HIDDEN int pd_armor_decode(struct pd_armor *a, const uint8_t *in, size_t inlen, size_t *ret_used,
                              uint8_t *out, size_t outcap, size_t *ret_out, bool eof);
/** Decode a whole buffer holding one or more armored blocks (or binary data,
 * copied) into *ret (malloc'd, caller frees; wiped by caller if secret). */
PD_HIDDEN int pd_armor_decode_all(const uint8_t *in, size_t len, uint8_t **ret, size_t *ret_len);
/** The same into libgcrypt secure memory (for secret key files): free
 * *ret with pd_wipe() and gcry_free(). */
PD_HIDDEN int pd_armor_decode_all_secure(const uint8_t *in, size_t len, uint8_t **ret, size_t *ret_len);
