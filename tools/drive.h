/* SPDX-License-Identifier: MIT */
/*
 * The loop the command-line tools (pd-decrypt, pgpdecd-sop) run over one
 * message, through the public API of pgpdec.h only: ciphertext pushed in
 * slices, the engine's requests answered, plaintext passed on as the
 * engine releases it (provisional until pd_drive_run() returns 0).
 */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "pgpdec.h"

struct pd_drive {
	/* ciphertext: from fd, or from memory when mem is set (handed to the
	 * engine in place, no copy) */
	int fd;
	const uint8_t *mem;
	size_t mem_len, mem_off;
	/* the caller's buffers: in (slice octets, for fd), out (out_cap) */
	uint8_t *in;
	size_t slice;
	uint8_t *out;
	size_t out_cap;
	size_t out_hw;  /* most plaintext out ever held: what the caller wipes */
	/* PD_STEP_NEED_KEY: set a password and recover, or set a session key;
	 * 0 or a negative error (the message's detail then says why) */
	int (*need_key)(void *ctx, struct pd_msg *m, struct pd_worker *w);
	/* n octets of plaintext; 0 or a negative error (-errno) */
	int (*output)(void *ctx, const uint8_t *p, size_t n);
	void *ctx;
};

/** Run m to its end: 0 when it verified, else a negative error and a
 * sentence in detail. */
int pd_drive_run(struct pd_msg *m, struct pd_worker *w, struct pd_drive *d, char *detail, size_t detail_len);
