/* SPDX-License-Identifier: MIT */
/*
 * Test-only AEAD *encryptor* of container bodies: SEIPD v2 (tag 18, RFC 9580
 * §5.13.2) and the LibrePGP OCB Encrypted Data packet (tag 20,
 * draft-koch-librepgp-02 §5.16).  Written from the RFC/draft text and
 * independent of lib/pgp/aead.c, so that a shared misreading cannot make a
 * round trip pass.  Shared by the unit tests (tests/unit/aead-testutil.h)
 * and tests/tools/pd-test-encrypt.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct te_ct {
	uint8_t *body;     /* header || chunks (each followed by its tag) || final tag */
	size_t len, hdrlen;
	size_t nchunks;    /* chunks written, an empty final chunk included */
	size_t *chunk_off; /* start of chunk i's ciphertext in body; its tag follows */
	size_t *chunk_len; /* its ciphertext length (without tag) */
	size_t final_off;  /* start of the final tag */
};

/*
 * Encrypt pt[0..ptlen) as a tag 18 (v2) or tag 20 body under session key sk
 * (keylen of cipher) with chunk octet c.  rnd holds the header's random part
 * (v2: 32-octet salt; tag 20: the nonce, 15/16 octets).  empty_last adds an
 * empty chunk (with its tag) before the final tag, as an encryptor that
 * learns of eof only after a full chunk may write.  Returns 0, or -1 (bad
 * algorithm, libgcrypt failure, no memory) with ct untouched.
 */
int te_encrypt(struct te_ct *ct, uint8_t tag, uint8_t cipher, uint8_t aead, uint8_t c,
               const uint8_t *sk, const uint8_t *rnd, const uint8_t *pt, size_t ptlen,
               bool empty_last);
void te_ct_free(struct te_ct *ct);
