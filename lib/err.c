/* SPDX-License-Identifier: MIT */
/* Error names and sentences: the one place PD_E* codes become text. */
#include "internal.h"

static const struct { int code; const char *name; const char *text; } errs[] = {
	{ PD_EINTERNAL, "EINTERNAL", "internal error" },
	{ PD_ENOKEY, "ENOKEY", "no secret key for any recipient" },
	{ PD_EMALFORMED, "EMALFORMED", "malformed OpenPGP data" },
	{ PD_EUNSUPPORTED, "EUNSUPPORTED", "unsupported algorithm or packet version" },
	{ PD_EINTEGRITY, "EINTEGRITY", "integrity check failed: the message was modified or the key is wrong" },
	{ PD_ELIMIT, "ELIMIT", "limit exceeded" },
	{ PD_EBADPASS, "EBADPASS", "bad passphrase" },
	{ PD_ESED, "ESED", "message has no integrity protection (SED packet) and was refused" },
	{ PD_ENOTPGP, "ENOTPGP", "input is not an OpenPGP message" },
	{ PD_ETRUNCATED, "ETRUNCATED", "message is truncated" },
	{ PD_ENEEDPASS, "ENEEDPASS", "secret key is protected and no passphrase was given" },
	{ PD_ENOSECRET, "ENOSECRET", "no usable secret decryption key found" },
	{ PD_ENOPASSWORD, "ENOPASSWORD", "message is password-encrypted and no password was given" },
	{ PD_EBOMB, "EBOMB", "decompression bomb: output or ratio limit exceeded" },
	{ PD_EAGAIN, "EAGAIN", "more input needed" },
	{ PD_EUSAGE, "EUSAGE", "function called in the wrong state" },
};

const char *pd_strerror(int err)
{
	for (size_t i = 0; i < PD_ARRAY_SIZE(errs); i++)
		if (errs[i].code == err)
			return errs[i].text;
	if (err < 0 && err > -4000)
		return strerror(-err);
	return err == 0 ? "success" : "unknown error";
}

const char *pd_errname(int err)
{
	for (size_t i = 0; i < PD_ARRAY_SIZE(errs); i++)
		if (errs[i].code == err)
			return errs[i].name;
	if (err == -ENOMEM)
		return "ENOMEM";
	return err == 0 ? "OK" : "ESYS";
}

int pd_fail(char *buf, size_t len, int err, const char *fmt, ...)
{
	if (buf && len) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(buf, len, fmt, ap);
		va_end(ap);
	}
	return err;
}

void pd_hex(char *out, const uint8_t *in, size_t n)
{
	static const char d[] = "0123456789ABCDEF";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = d[in[i] >> 4];
		out[2 * i + 1] = d[in[i] & 15];
	}
	out[2 * n] = 0;
}

void pd__require_fail(const char *expr, const char *file, int line)
{
	fprintf(stderr, "pgpdec: invariant failed: %s (%s:%d)\n", expr, file, line);
	abort();
}
