/* SPDX-License-Identifier: MIT */
/*
 * Wire status codes: the stable, documented outcome of a request or the
 * reason a connection ended (proto/PROTOCOL.md, "Status codes").
 *
 * This is the only place where engine and system error codes (PD_E*,
 * -errno) become wire status codes, and where wire status codes become the
 * client's sysexits(3) exit codes.  The tens digit of a status is its class;
 * a client that meets a code it does not know acts on the class.  Never
 * renumber: deployed clients and Postfix transports depend on these.
 */
#pragma once

#include <stdint.h>

enum pd_status {
	PD_ST_OK = 0,
	/* 1x: the message itself is bad (exit 65, EX_DATAERR) */
	PD_ST_MALFORMED = 10,     /* malformed OpenPGP packet or armor */
	PD_ST_NOT_PGP = 11,       /* not an OpenPGP message at all */
	PD_ST_TRUNCATED = 12,     /* the ciphertext ended mid-message */
	PD_ST_INTEGRITY = 13,     /* MDC or AEAD tag check failed: tampered or wrong key */
	PD_ST_UNSUPPORTED = 14,   /* algorithm, version or feature not supported */
	PD_ST_SED_REFUSED = 15,   /* no integrity protection (SED packet), refused by policy */
	PD_ST_LIMIT = 16,         /* a configured limit was exceeded (size, packets, depth ...) */
	PD_ST_BOMB = 17,          /* decompression output or ratio limit exceeded */
	/* 2x: no key can open it (exit 69, EX_UNAVAILABLE) */
	PD_ST_NO_KEY = 20,        /* no loaded secret key for any recipient */
	PD_ST_NO_PASSWORD = 21,   /* password-encrypted and no (right) password given */
	/* 3x: try again later (exit 75, EX_TEMPFAIL) */
	PD_ST_OVERLOADED = 30,    /* queue full or out of memory */
	PD_ST_TIMEOUT = 31,       /* per-message or idle timeout */
	PD_ST_SHUTTING_DOWN = 32, /* the daemon is stopping */
	PD_ST_INTERNAL = 33,      /* a bug in the daemon; the message may be fine */
	/* 4x: not allowed (exit 77, EX_NOPERM) */
	PD_ST_ACCESS_DENIED = 40,
	/* 5x: the peers do not understand each other (exit 75: never the message's fault) */
	PD_ST_PROTOCOL = 50,      /* protocol violation; the connection ends */
	PD_ST_VERSION = 51,       /* no common protocol version */
	PD_ST_BAD_REQUEST = 52,   /* unknown flag or critical option in a request */
};

/* sysexits.h values, repeated so that users of this header need not include it. */
#define PD_EXIT_OK 0
#define PD_EXIT_USAGE 64
#define PD_EXIT_DATAERR 65
#define PD_EXIT_NOINPUT 66
#define PD_EXIT_UNAVAILABLE 69
#define PD_EXIT_SOFTWARE 70
#define PD_EXIT_CANTCREAT 73
#define PD_EXIT_IOERR 74
#define PD_EXIT_TEMPFAIL 75
#define PD_EXIT_NOPERM 77
#define PD_EXIT_CONFIG 78

/** The wire status for an engine or system error code (0 gives PD_ST_OK). */
uint16_t pd_status_from_err(int err);
/** Stable upper-case name of a status ("INTEGRITY"); "UNKNOWN" for codes this version lacks. */
const char *pd_status_name(uint16_t status);
/** Default sentence for a status, used when a peer sent none. */
const char *pd_status_text(uint16_t status);
/** The client's sysexits(3) exit code for a status (unknown codes by class). */
int pd_status_exit_code(uint16_t status);
/** True for statuses that are worth retrying later (class 3x and 5x). */
int pd_status_is_temporary(uint16_t status);
