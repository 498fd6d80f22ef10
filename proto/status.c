/* SPDX-License-Identifier: MIT */
/* The single mapping PD_E* / -errno -> wire status -> sysexits code. */
#include <errno.h>
#include <stddef.h>

#include "pgpdec.h"
#include "status.h"

uint16_t pd_status_from_err(int err)
{
	switch (err) {
	case 0: return PD_ST_OK;
	case PD_EMALFORMED: return PD_ST_MALFORMED;
	case PD_ENOTPGP: return PD_ST_NOT_PGP;
	case PD_ETRUNCATED: return PD_ST_TRUNCATED;
	case PD_EINTEGRITY: return PD_ST_INTEGRITY;
	case PD_EUNSUPPORTED: return PD_ST_UNSUPPORTED;
	case PD_ESED: return PD_ST_SED_REFUSED;
	case PD_ELIMIT: return PD_ST_LIMIT;
	case PD_EBOMB: return PD_ST_BOMB;
	case PD_ENOKEY: return PD_ST_NO_KEY;
	/* A message's PD_EBADPASS comes from an AEAD-checked SKESK: the
	 * password given is wrong. */
	case PD_ENOPASSWORD: case PD_EBADPASS: return PD_ST_NO_PASSWORD;
	/* Key-loading errors cannot reach a message; if one does, no key opened it. */
	case PD_ENEEDPASS: case PD_ENOSECRET: return PD_ST_NO_KEY;
	case PD_EINTERNAL: case PD_EAGAIN: case PD_EUSAGE: return PD_ST_INTERNAL;
	/* System codes the daemon uses for its own policy decisions. */
	case -ENOMEM: case -ENOBUFS: case -EAGAIN: case -EBUSY: return PD_ST_OVERLOADED;
	case -ETIMEDOUT: return PD_ST_TIMEOUT;
	case -ESHUTDOWN: case -ECANCELED: return PD_ST_SHUTTING_DOWN;
	case -EACCES: case -EPERM: return PD_ST_ACCESS_DENIED;
	case -EPROTO: case -EBADMSG: case -EMSGSIZE: return PD_ST_PROTOCOL;
	case -EPROTONOSUPPORT: return PD_ST_VERSION;
	case -EINVAL: return PD_ST_BAD_REQUEST;
	default: return PD_ST_INTERNAL;
	}
}

static const struct { uint16_t st; const char *name, *text; } statuses[] = {
	{ PD_ST_OK, "OK", "decrypted and verified" },
	{ PD_ST_MALFORMED, "MALFORMED", "malformed OpenPGP data" },
	{ PD_ST_NOT_PGP, "NOT_PGP", "input is not an OpenPGP message" },
	{ PD_ST_TRUNCATED, "TRUNCATED", "message is truncated" },
	{ PD_ST_INTEGRITY, "INTEGRITY", "integrity check failed: the message was modified or the key is wrong" },
	{ PD_ST_UNSUPPORTED, "UNSUPPORTED", "unsupported algorithm or packet version" },
	{ PD_ST_SED_REFUSED, "SED_REFUSED", "message has no integrity protection (SED packet) and was refused" },
	{ PD_ST_LIMIT, "LIMIT", "limit exceeded" },
	{ PD_ST_BOMB, "BOMB", "decompression bomb: output or ratio limit exceeded" },
	{ PD_ST_NO_KEY, "NO_KEY", "no secret key for any recipient" },
	{ PD_ST_NO_PASSWORD, "NO_PASSWORD", "message is password-encrypted and no matching password was given" },
	{ PD_ST_OVERLOADED, "OVERLOADED", "server overloaded, try again later" },
	{ PD_ST_TIMEOUT, "TIMEOUT", "timed out" },
	{ PD_ST_SHUTTING_DOWN, "SHUTTING_DOWN", "server is shutting down" },
	{ PD_ST_INTERNAL, "INTERNAL", "internal server error" },
	{ PD_ST_ACCESS_DENIED, "ACCESS_DENIED", "access denied" },
	{ PD_ST_PROTOCOL, "PROTOCOL", "protocol violation" },
	{ PD_ST_VERSION, "VERSION", "no common protocol version" },
	{ PD_ST_BAD_REQUEST, "BAD_REQUEST", "request has an unknown flag or option" },
};

const char *pd_status_name(uint16_t status)
{
	for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++)
		if (statuses[i].st == status)
			return statuses[i].name;
	return "UNKNOWN";
}

const char *pd_status_text(uint16_t status)
{
	for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++)
		if (statuses[i].st == status)
			return statuses[i].text;
	return "unknown status";
}

int pd_status_exit_code(uint16_t status)
{
	if (status == PD_ST_OK)
		return PD_EXIT_OK;
	/* By class, so that codes added later map sensibly in old clients. */
	switch (status / 10) {
	case 1: return PD_EXIT_DATAERR;
	case 2: return PD_EXIT_UNAVAILABLE;
	case 4: return PD_EXIT_NOPERM;
	default: return PD_EXIT_TEMPFAIL; /* 3x, 5x and anything unknown: defer, never bounce */
	}
}

int pd_status_is_temporary(uint16_t status)
{
	return status != PD_ST_OK && pd_status_exit_code(status) == PD_EXIT_TEMPFAIL;
}
