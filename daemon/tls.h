/* SPDX-License-Identifier: MIT */
/*
 * TLS for TCP listeners (GnuTLS), the layer between a session's socket and
 * its frame decoder.  GnuTLS never touches the socket: its pull function
 * reads ciphertext the session has already read into a buffer, its push
 * function hands records to the session's writer, so nothing ever blocks
 * the loop.  Ciphertext that cannot be decrypted yet because the session's
 * read buffer is full stays in the TLS input buffer (back-pressure, never a
 * drop).
 *
 * pd_tls_creds: certificate, key, client-CA and pins, loaded off the loop and
 * shared by reference (sessions keep the credentials they started with
 * across a reload).  Client certificates are required by default and
 * verified against the CA once the handshake is done, before any record is
 * read; they must carry the clientAuth extended key usage.  Pins (SHA-256 of
 * the DER certificate) restrict further, or alone accept self-signed client
 * certificates; with pins, a client without a certificate is refused too.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct pd_config;
struct pd_tls_creds;
struct pd_tls;

/** Load credentials from the config's tls-* settings; a sentence in err on failure. */
int pd_tls_creds_load(struct pd_tls_creds **ret, const struct pd_config *c, char *err, size_t errlen);
struct pd_tls_creds *pd_tls_creds_ref(struct pd_tls_creds *cr);
struct pd_tls_creds *pd_tls_creds_unref(struct pd_tls_creds *cr);

struct pd_obuf;

/** Output callback: the records one call made (pd_tls_read, pd_tls_write,
 * pd_tls_bye), in one buffer for the socket, which the callee now owns. */
typedef void (*pd_tls_push_fn)(void *user, struct pd_obuf *o);

/** Server-side TLS state for one connection. */
int pd_tls_new(struct pd_tls **ret, struct pd_tls_creds *cr, pd_tls_push_fn push, void *user);
/** Free it (wipes buffers); accepts NULL, returns NULL. */
struct pd_tls *pd_tls_free(struct pd_tls *t);
/** Room for ciphertext from the socket, and where to put it. */
size_t pd_tls_in_room(struct pd_tls *t, uint8_t **ret_p);
/** n bytes were written at the place pd_tls_in_room() gave. */
void pd_tls_in_commit(struct pd_tls *t, size_t n);
/** Advance: handshake, then decrypt into out (cap bytes).  Returns the
 * number of plaintext bytes (0: need more input or no room), -EPIPE when the
 * peer closed TLS (close_notify), or another negative error (handshake
 * failure, bad record, verification): the connection must end; detail says why. */
ssize_t pd_tls_read(struct pd_tls *t, uint8_t *out, size_t cap);
/** Whether the handshake is complete (and the peer verified). */
bool pd_tls_ready(const struct pd_tls *t);
/** Encrypt len plaintext bytes (whole, pushed through the push callback). */
int pd_tls_write(struct pd_tls *t, const uint8_t *p, size_t len);
/** The most plaintext whose records fit in room octets, at the record size
 * the peer takes (as far as pd_tls_write has seen it). */
size_t pd_tls_plain_room(const struct pd_tls *t, size_t room);
/** Send close_notify (through push). */
void pd_tls_bye(struct pd_tls *t);
/** SHA-256 of the client certificate (DER) into out: false when it sent none. */
bool pd_tls_peer_sha256(const struct pd_tls *t, uint8_t out[32]);
/** Sentence about the last error. */
const char *pd_tls_detail(const struct pd_tls *t);
