/* SPDX-License-Identifier: MIT */
/* gpg-compatible text: session keys, status lines (see gpgfmt.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gpgfmt.h"

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

int pdc_sk_parse(const char *s, size_t n, uint8_t *ret_algo, uint8_t *key, size_t *ret_len)
{
	size_t i = 0;
	unsigned algo = 0;
	uint8_t k[PDC_SESSION_KEY_MAX];

	while (n && is_space(s[n - 1]))
		n--;
	while (i < n && is_space(s[i]))
		i++;
	size_t d0 = i;
	for (; i < n && s[i] >= '0' && s[i] <= '9' && i - d0 < 3; i++)
		algo = algo * 10 + (unsigned)(s[i] - '0');
	if (i == d0 || i >= n || s[i] != ':' || algo == 0 || algo > 255)
		return -EINVAL;
	i++;
	size_t hex = n - i;
	if (hex == 0 || hex % 2 || hex / 2 > sizeof(k))
		return -EINVAL;
	for (size_t j = 0; j < hex / 2; j++) {
		int hi = hexval(s[i + 2 * j]), lo = hexval(s[i + 2 * j + 1]);
		if (hi < 0 || lo < 0) {
			explicit_bzero(k, sizeof(k));
			return -EINVAL;
		}
		k[j] = (uint8_t)(hi << 4 | lo);
	}
	memcpy(key, k, hex / 2);
	explicit_bzero(k, sizeof(k));
	*ret_algo = (uint8_t)algo;
	*ret_len = hex / 2;
	return 0;
}

int pdc_sk_format(char *buf, size_t cap, uint8_t algo, const uint8_t *key, size_t len)
{
	static const char hx[] = "0123456789ABCDEF";
	int n = snprintf(buf, cap, "%u:", (unsigned)algo);
	if (n < 0 || (size_t)n + 2 * len + 1 > cap)
		return -ENOBUFS;
	for (size_t i = 0; i < len; i++) {
		buf[n++] = hx[key[i] >> 4];
		buf[n++] = hx[key[i] & 15];
	}
	buf[n] = 0;
	return n;
}

/* ------------------------------------------------------------------ */
/* Status lines (GnuPG doc/DETAILS) */

#include <stdarg.h>
#include <unistd.h>

#include <gpg-error.h>

void pdc_gpg_status(struct pdc_gpg_status *st, const char *keyword, const char *fmt, ...)
{
	char line[2048];
	int n;

	if (st->fd < 0)
		return;
	n = snprintf(line, sizeof(line), "[GNUPG:] %s", keyword);
	if (fmt && n > 0 && (size_t)n < sizeof(line) - 2) {
		va_list ap;
		line[n++] = ' ';
		va_start(ap, fmt);
		int k = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
		va_end(ap);
		if (k > 0)
			n += k < (int)(sizeof(line) - (size_t)n - 1) ? k : (int)(sizeof(line) - (size_t)n - 2);
	}
	if (n < 0)
		return;
	if ((size_t)n > sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	for (size_t off = 0; off < (size_t)n;) {
		ssize_t w = write(st->fd, line + off, (size_t)n - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			st->failed = true;
			return;
		}
		off += (size_t)w;
	}
}

static void hexup(char *out, const uint8_t *p, size_t n)
{
	static const char hx[] = "0123456789ABCDEF";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hx[p[i] >> 4];
		out[2 * i + 1] = hx[p[i] & 15];
	}
	out[2 * n] = 0;
}

/* The literal file name as gpg writes it in PLAINTEXT: percent-escaped
 * where it would break the line or the field (attacker-controlled octets). */
static void escape_name(char *out, size_t cap, const char *name, size_t n)
{
	size_t o = 0;
	for (size_t i = 0; i < n && o + 4 < cap; i++) {
		unsigned char c = (unsigned char)name[i];
		if (c < 0x20 || c == '%' || c == 0x7f || c == ' ')
			o += (size_t)snprintf(out + o, cap - o, "%%%02X", c);
		else
			out[o++] = (char)c;
	}
	out[o] = 0;
}

static unsigned gpgerr(gpg_err_code_t code) { return (unsigned)gpg_err_make(GPG_ERR_SOURCE_GPG, code); }

unsigned pdc_gpg_errcode(const struct pdc_result *r)
{
	if (r->err)
		return gpgerr(r->err == -EACCES ? GPG_ERR_EACCES : r->err == -ETIMEDOUT ? GPG_ERR_TIMEOUT : GPG_ERR_EAGAIN);
	switch (r->status) {
	case 0: return r->integrity == PDC_INTEGRITY_UNPROTECTED ? gpgerr(GPG_ERR_BAD_DATA) : 0; /* SED: gpg refuses it too */
	case 10: return gpgerr(GPG_ERR_INV_PACKET);     /* MALFORMED */
	case 11: return gpgerr(GPG_ERR_NO_DATA);        /* NOT_PGP */
	case 12: return gpgerr(GPG_ERR_TRUNCATED);
	case 13: return gpgerr(GPG_ERR_BAD_DATA);       /* INTEGRITY */
	case 14: return gpgerr(GPG_ERR_UNSUPPORTED_ALGORITHM);
	case 15: return gpgerr(GPG_ERR_BAD_DATA);       /* SED_REFUSED */
	case 16: case 17: return gpgerr(GPG_ERR_TOO_LARGE); /* LIMIT, BOMB */
	case 20: return gpgerr(GPG_ERR_NO_SECKEY);
	case 21: return gpgerr(GPG_ERR_NO_PASSPHRASE);
	case 31: return gpgerr(GPG_ERR_TIMEOUT);
	case 40: return gpgerr(GPG_ERR_EACCES);
	default: return gpgerr(r->status / 10 == 3 || r->status / 10 == 5 ? GPG_ERR_EAGAIN : GPG_ERR_GENERAL);
	}
}

const char *pdc_gpg_errtext(const struct pdc_result *r)
{
	if (r->err)
		return r->sentence;
	switch (r->status) {
	case 13: return "Bad session key"; /* what gpg says for a bad MDC or a wrong key */
	case 20: return "No secret key";
	case 21: return "No passphrase given";
	default: return r->sentence;
	}
}

static const struct pdc_key *find_key(const struct pdc_gpg_outcome *o, const uint8_t *fpr, size_t len)
{
	for (size_t i = 0; i < o->n_keys; i++)
		if (o->keys[i].fpr_len == len && !memcmp(o->keys[i].fpr, fpr, len))
			return &o->keys[i];
	return NULL;
}

int pdc_gpg_status_decrypt(struct pdc_gpg_status *st, const struct pdc_gpg_outcome *o)
{
	const struct pdc_result *r = o->r;
	const struct pdc_info *i = &r->info;
	char hex[65], hex2[65];
	bool cfb = i->container == 18 && i->container_version == 1;

	if (r->err || (r->status / 10 >= 3)) {
		/* Nothing about the message: the daemon did not decrypt it. */
		pdc_gpg_status(st, "ERROR", "decrypt %u", pdc_gpg_errcode(r));
		pdc_gpg_status(st, "FAILURE", "decrypt %u", pdc_gpg_errcode(r));
		return 2;
	}
	/* Not OpenPGP, or nothing of it recognisable (no key packet, no
	 * container): what gpg says of data that is not OpenPGP. */
	if (r->status == 11 || (r->status == 10 && !i->n_recipients && !i->n_skesk && !i->container)) {
		pdc_gpg_status(st, "NODATA", "1");
		pdc_gpg_status(st, "NODATA", "2");
		pdc_gpg_status(st, "FAILURE", "decrypt 4294967295");
		return 2;
	}
	for (uint32_t k = 0; k < i->n_recipients; k++) {
		hexup(hex, i->recipients[k].keyid, 8);
		pdc_gpg_status(st, "ENC_TO", "%s %u 0", hex, i->recipients[k].pk_algo);
	}
	bool by_password = r->status == 0 && !i->key_fpr_len && !o->session_key_given;
	if (i->n_skesk && !o->session_key_given && !o->passphrase_asked &&
	    (by_password || r->status == 21 || (r->status != 0 && !i->n_recipients)))
		pdc_gpg_status(st, "NEED_PASSPHRASE_SYM", "%u 0 0", r->status == 0 ? i->sym_algo : 0);
	if (r->status == 20)
		for (uint32_t k = 0; k < i->n_recipients; k++) {
			hexup(hex, i->recipients[k].keyid, 8);
			pdc_gpg_status(st, "NO_SECKEY", "%s", hex);
		}
	bool verified = r->status == 0 && (r->integrity == PDC_INTEGRITY_MDC || r->integrity == PDC_INTEGRITY_AEAD);
	if (verified && i->key_fpr_len) {
		const struct pdc_key *k = find_key(o, i->key_fpr, i->key_fpr_len);
		hexup(hex, i->key_fpr, i->key_fpr_len);
		if (k && k->primary_fpr_len)
			hexup(hex2, k->primary_fpr, k->primary_fpr_len);
		else
			memcpy(hex2, hex, sizeof(hex));
		/* otrust "-": pgpdecd has no trust database (gpg says "u" for a key
		 * its home trusts ultimately, "-" for an imported one) */
		pdc_gpg_status(st, "DECRYPTION_KEY", "%s %s -", hex, hex2);
	}
	pdc_gpg_status(st, "BEGIN_DECRYPTION", NULL);
	if (!verified) {
		if (r->status == 13 && !i->n_recipients && i->n_skesk && o->password_given)
			pdc_gpg_status(st, "ERROR", "symkey_decrypt.maybe_error 11_BAD_PASSPHRASE"); /* v4 SKESK: cannot tell */
		else if (r->status == 21 && o->password_given)
			pdc_gpg_status(st, "ERROR", "symkey_decrypt.maybe_error 11_BAD_PASSPHRASE");
		else if (r->status == 13 && (cfb || !i->container))
			pdc_gpg_status(st, "BADMDC", NULL);
		else if (r->status != 13 && r->status != 20 && r->status != 21)
			pdc_gpg_status(st, "ERROR", "decrypt %u", pdc_gpg_errcode(r));
		pdc_gpg_status(st, "DECRYPTION_FAILED", NULL);
		pdc_gpg_status(st, "END_DECRYPTION", NULL);
		return 2;
	}
	pdc_gpg_status(st, "DECRYPTION_INFO", "%u %u %u", cfb ? 2u : 0u, i->sym_algo, i->aead_algo);
	if (o->show_session_key && r->session_key_len) {
		char sk[8 + 2 * PDC_SESSION_KEY_MAX];
		if (pdc_sk_format(sk, sizeof(sk), r->session_key_algo, r->session_key, r->session_key_len) > 0)
			pdc_gpg_status(st, "SESSION_KEY", "%s", sk);
		explicit_bzero(sk, sizeof(sk));
	}
	if (i->has_literal) {
		char name[256 * 3 + 1];
		escape_name(name, sizeof(name), i->literal_name, i->literal_name_len);
		pdc_gpg_status(st, "PLAINTEXT", "%02x %u %s", (unsigned char)i->literal_format, i->literal_date, name);
	}
	pdc_gpg_status(st, "PLAINTEXT_LENGTH", "%llu", (unsigned long long)r->bytes_out);
	pdc_gpg_status(st, "DECRYPTION_OKAY", NULL);
	pdc_gpg_status(st, "GOODMDC", NULL);
	pdc_gpg_status(st, "END_DECRYPTION", NULL);
	return 0;
}
