/* SPDX-License-Identifier: MIT */
/*
 * gpg-compatible text for the front ends over libpdclient (pgpdecd-client
 * and pgpdecd-gpg link it): the session key in gpg's "ALGO:HEX" form
 * (--show-session-key, --override-session-key; SOP uses it too), and the
 * --status-fd lines of a decryption as GnuPG's doc/DETAILS defines them
 * and gpg 2.2 writes them.  No I/O beyond the status fd it is given; no
 * state but what a pdc_gpg_status holds.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pdclient.h"

/** Parse "ALGO:HEX" (surrounding white space allowed): 0, or -EINVAL. */
int pdc_sk_parse(const char *s, size_t n, uint8_t *ret_algo, uint8_t *key, size_t *ret_len);
/** Format "ALGO:HEX" (upper-case hex, as gpg prints it) into buf; its length, or -ENOBUFS. */
int pdc_sk_format(char *buf, size_t cap, uint8_t algo, const uint8_t *key, size_t len);
