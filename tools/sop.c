/* SPDX-License-Identifier: MIT */
/*
 * pgpdecd-sop: the Stateless OpenPGP command-line interface
 * (draft-dkg-openpgp-stateless-cli) over the engine, for the subcommands a
 * decryption-only engine can honour: "version" and "decrypt".  Every other
 * subcommand answers UNSUPPORTED_SUBCOMMAND.
 *
 * Stateless like pd-decrypt: keys are read from the files named on the
 * command line, no daemon, no key store.  decrypt reads the whole message
 * from standard input and holds the plaintext until the message verified:
 * a SOP caller gets plaintext on standard output only with exit code 0, and
 * a session key that fails (it is only known at the end, at the MDC) can be
 * followed by the next way in, from the start of the same octets.
 *
 * Exit codes are the draft's ("Failure Modes"); anything it does not name
 * is 1.  Every sentence on standard error comes from the caller's own
 * arguments or from the engine, which says nothing that depends on octets
 * that did not authenticate.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <gcrypt.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "drive.h"
#include "pd-config.h"
#include "pgpdec.h"
#include "readfile.h"

#define PROG "pgpdecd-sop"
/* The revision of the draft this follows; "~": only in part (version and
 * decrypt, and decrypt without signature verification). */
#define SOP_SPEC "~draft-dkg-openpgp-stateless-cli-10"
#define OUTBUF (64 * 1024)
#define MAX_ARGS 64 /* of each repeatable kind */

/* The draft's return codes (the ones this program can give). */
enum {
	SOP_OK = 0,
	SOP_FAILURE = 1,                     /* anything the draft does not name */
	SOP_MISSING_ARG = 19,
	SOP_CANNOT_DECRYPT = 29,
	SOP_UNSUPPORTED_OPTION = 37,
	SOP_BAD_DATA = 41,
	SOP_OUTPUT_EXISTS = 59,
	SOP_MISSING_INPUT = 61,
	SOP_KEY_IS_PROTECTED = 67,
	SOP_UNSUPPORTED_SUBCOMMAND = 69,
	SOP_UNSUPPORTED_SPECIAL_PREFIX = 71,
	SOP_AMBIGUOUS_INPUT = 73,
};

static const char *code_name(int code)
{
	switch (code) {
	case SOP_MISSING_ARG: return "MISSING_ARG";
	case SOP_CANNOT_DECRYPT: return "CANNOT_DECRYPT";
	case SOP_UNSUPPORTED_OPTION: return "UNSUPPORTED_OPTION";
	case SOP_BAD_DATA: return "BAD_DATA";
	case SOP_OUTPUT_EXISTS: return "OUTPUT_EXISTS";
	case SOP_MISSING_INPUT: return "MISSING_INPUT";
	case SOP_KEY_IS_PROTECTED: return "KEY_IS_PROTECTED";
	case SOP_UNSUPPORTED_SUBCOMMAND: return "UNSUPPORTED_SUBCOMMAND";
	case SOP_UNSUPPORTED_SPECIAL_PREFIX: return "UNSUPPORTED_SPECIAL_PREFIX";
	case SOP_AMBIGUOUS_INPUT: return "AMBIGUOUS_INPUT";
	default: return "FAILURE";
	}
}

__attribute__((format(printf, 2, 3)))
static int fail(int code, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, PROG ": %s: ", code_name(code));
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return code;
}

static void usage(FILE *f)
{
	fputs("Usage: " PROG " version [--backend|--extended|--sop-spec]\n"
	      "       " PROG " decrypt [--with-password=PASSWORD]... [--with-key-password=PASSWORD]...\n"
	      "                   [--with-session-key=SESSIONKEY]... [--session-key-out=SESSIONKEY]\n"
	      "                   [--] [KEYS...] < CIPHERTEXT > PLAINTEXT\n"
	      "The Stateless OpenPGP interface (version and decrypt only) over libpgpdec.\n"
	      "PASSWORD, SESSIONKEY and KEYS are files, @ENV:NAME or @FD:N; a session key\n"
	      "is ALGO:HEX.  Other subcommands exit 69 (UNSUPPORTED_SUBCOMMAND); signature\n"
	      "verification (--verify-with, --verifications-out) exits 37 (UNSUPPORTED_OPTION).\n",
	      f);
}

/* ---- secrets in memory ------------------------------------------------- */

struct blob {
	uint8_t *p;
	size_t len;
};

static void blob_wipe(struct blob *b)
{
	if (b->p) {
		explicit_bzero(b->p, b->len);
		free(b->p);
	}
	b->p = NULL;
	b->len = 0;
}

/* ---- indirect data (the draft's @ENV: and @FD: designators) ------------- */

static int parse_fd(const char *s, int *ret)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 0 || v > INT_MAX || !isdigit((unsigned char)*s))
		return -EINVAL;
	*ret = (int)v;
	return 0;
}

/* Read the input an argument names: a file, @ENV:NAME or @FD:N.  Returns
 * SOP_OK with *ret filled, or the draft's code (a sentence already said). */
static int read_indirect(const char *what, const char *arg, struct blob *ret)
{
	struct stat st;
	int r, fd;

	if (arg[0] == '@') {
		/* "@..." names a designator; a file of that very name makes the
		 * argument mean two things */
		if (lstat(arg, &st) == 0)
			return fail(SOP_AMBIGUOUS_INPUT, "%s '%s': a file of that name exists", what, arg);
		if (!strncmp(arg, "@ENV:", 5)) {
			const char *v = getenv(arg + 5);
			if (!v)
				return fail(SOP_MISSING_INPUT, "%s '%s': no such environment variable", what, arg);
			size_t n = strlen(v);
			ret->p = malloc(n ? n : 1);
			if (!ret->p)
				return fail(SOP_FAILURE, "out of memory");
			memcpy(ret->p, v, n);
			ret->len = n;
			return SOP_OK;
		}
		if (!strncmp(arg, "@FD:", 4)) {
			if (parse_fd(arg + 4, &fd) < 0 || fcntl(fd, F_GETFD) < 0)
				return fail(SOP_MISSING_INPUT, "%s '%s': no such open file descriptor", what, arg);
			r = pd_read_fd(fd, PD_TOOL_MAX_FILE, &ret->p, &ret->len);
			if (r < 0)
				return fail(SOP_FAILURE, "%s '%s': %s", what, arg, strerror(-r));
			return SOP_OK;
		}
		return fail(SOP_UNSUPPORTED_SPECIAL_PREFIX, "%s '%s': unknown special designator", what, arg);
	}
	r = pd_read_file(arg, PD_TOOL_MAX_FILE, &ret->p, &ret->len);
	if (r == -ENOENT)
		return fail(SOP_MISSING_INPUT, "%s '%s': no such file", what, arg);
	if (r < 0)
		return fail(SOP_FAILURE, "%s '%s': %s", what, arg, strerror(-r));
	return SOP_OK;
}

/* Where an output goes: a file that must not exist yet, or @FD:N.
 * Checked before any work; the file is created (O_EXCL) only at the end. */
static int check_output(const char *what, const char *arg)
{
	struct stat st;
	int fd;

	if (arg[0] == '@') {
		if (!strncmp(arg, "@FD:", 4)) {
			if (parse_fd(arg + 4, &fd) < 0 || fcntl(fd, F_GETFD) < 0)
				return fail(SOP_FAILURE, "%s '%s': no such open file descriptor", what, arg);
			return SOP_OK;
		}
		/* @ENV: is for inputs only */
		return fail(SOP_UNSUPPORTED_SPECIAL_PREFIX, "%s '%s': not a designator an output can use", what,
		            arg);
	}
	if (lstat(arg, &st) == 0)
		return fail(SOP_OUTPUT_EXISTS, "%s '%s': the file exists", what, arg);
	return SOP_OK;
}

static int write_all(int fd, const void *buf, size_t n)
{
	const uint8_t *p = buf;
	while (n) {
		ssize_t k = write(fd, p, n);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

static int write_output(const char *what, const char *arg, const char *text, size_t n)
{
	int fd, r;
	if (!strncmp(arg, "@FD:", 4)) {
		parse_fd(arg + 4, &fd); /* checked by check_output() */
		r = write_all(fd, text, n);
	} else {
		fd = open(arg, O_WRONLY | O_CREAT | O_EXCL | O_NOCTTY | O_CLOEXEC, 0600);
		if (fd < 0 && errno == EEXIST)
			return fail(SOP_OUTPUT_EXISTS, "%s '%s': the file exists", what, arg);
		if (fd < 0)
			return fail(SOP_FAILURE, "%s '%s': %s", what, arg, strerror(errno));
		r = write_all(fd, text, n);
		if (close(fd) < 0 && r == 0)
			r = -errno;
	}
	if (r < 0)
		return fail(SOP_FAILURE, "%s '%s': %s", what, arg, strerror(-r));
	return SOP_OK;
}

/* ---- arguments --------------------------------------------------------- */

struct opt {
	const char *name;
	bool has_arg;
	int id;
};

/* The draft's syntax: --name=value or --name value, no abbreviations, no
 * short options, "--" ends the options.  Calls on() for each option and
 * pos() for each positional argument; returns SOP_OK or a code. */
static int parse_args(int argc, char **argv, const struct opt *opts, const char *sub,
                      int (*on)(void *ctx, int id, const char *name, const char *val),
                      int (*pos)(void *ctx, const char *arg), void *ctx)
{
	bool only_pos = false;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		int r;
		if (only_pos || a[0] != '-' || !strcmp(a, "-")) {
			r = pos(ctx, a);
			if (r)
				return r;
			continue;
		}
		if (!strcmp(a, "--")) {
			only_pos = true;
			continue;
		}
		if (a[1] != '-')
			return fail(SOP_UNSUPPORTED_OPTION, "%s: unsupported option '%s'", sub, a);
		const char *eq = strchr(a, '=');
		size_t nl = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
		const struct opt *o = opts;
		while (o->name && !(strlen(o->name) == nl && !strncmp(o->name, a + 2, nl)))
			o++;
		if (!o->name)
			return fail(SOP_UNSUPPORTED_OPTION, "%s: unsupported option '%.*s'", sub, (int)nl + 2, a);
		const char *val = NULL;
		if (o->has_arg) {
			if (eq) {
				val = eq + 1;
			} else if (i + 1 < argc) {
				val = argv[++i];
			} else {
				return fail(SOP_MISSING_ARG, "%s: --%s needs a value", sub, o->name);
			}
		} else if (eq) {
			return fail(SOP_UNSUPPORTED_OPTION, "%s: --%s takes no value", sub, o->name);
		}
		r = on(ctx, o->id, o->name, val);
		if (r)
			return r;
	}
	return SOP_OK;
}

/* ---- version ----------------------------------------------------------- */

enum { V_BACKEND = 1, V_EXTENDED, V_SOPSPEC };

struct vctx {
	int which;
};

static int version_opt(void *ctx, int id, const char *name, const char *val)
{
	struct vctx *v = ctx;
	(void)val;
	if (v->which && v->which != id)
		return fail(SOP_FAILURE, "version: --%s cannot be combined with another version option", name);
	v->which = id;
	return SOP_OK;
}

static int version_pos(void *ctx, const char *arg)
{
	(void)ctx;
	return fail(SOP_UNSUPPORTED_OPTION, "version: unexpected argument '%s'", arg);
}

static void print_backend(void)
{
	printf("libpgpdec %s (libgcrypt %s, %s)\n", PD_VERSION, gcry_check_version(NULL),
	       OpenSSL_version(OPENSSL_VERSION));
}

static int cmd_version(int argc, char **argv)
{
	static const struct opt opts[] = {
		{ "backend", false, V_BACKEND },
		{ "extended", false, V_EXTENDED },
		{ "sop-spec", false, V_SOPSPEC },
		{ 0 },
	};
	struct vctx v = { 0 };
	int r = parse_args(argc, argv, opts, "version", version_opt, version_pos, &v);
	if (r)
		return r;
	switch (v.which) {
	case V_BACKEND:
		print_backend();
		break;
	case V_EXTENDED:
		printf("%s %s\n", PROG, PD_VERSION);
		print_backend();
		printf("RSA private-key operations: %s\n", PD_RSA_DEFAULT_BACKEND == PD_RSA_OPENSSL ?
		       "OpenSSL" : "libgcrypt");
		printf("%s: subcommands version and decrypt; decrypt does not verify signatures\n", SOP_SPEC);
		break;
	case V_SOPSPEC:
		printf("%s\n", SOP_SPEC);
		printf("Only the version and decrypt subcommands; decrypt does not verify signatures "
		       "(--verify-with and --verifications-out exit 37, UNSUPPORTED_OPTION).\n");
		break;
	default:
		printf("%s %s\n", PROG, PD_VERSION);
	}
	return fflush(stdout) == 0 ? SOP_OK : fail(SOP_FAILURE, "writing standard output: %s", strerror(errno));
}

/* ---- decrypt ----------------------------------------------------------- */

enum { D_WITH_PASSWORD = 1, D_WITH_KEY_PASSWORD, D_WITH_SESSION_KEY, D_SESSION_KEY_OUT, D_VERIFY };

struct dctx {
	const char *keys[MAX_ARGS], *passwords[MAX_ARGS], *key_passwords[MAX_ARGS], *session_keys[MAX_ARGS];
	size_t n_keys, n_passwords, n_key_passwords, n_session_keys;
	const char *session_key_out;
};

static int add_arg(const char **list, size_t *n, const char *what, const char *val)
{
	if (*n == MAX_ARGS)
		return fail(SOP_FAILURE, "decrypt: more than %d %s", MAX_ARGS, what);
	list[(*n)++] = val;
	return SOP_OK;
}

static int decrypt_opt(void *ctx, int id, const char *name, const char *val)
{
	struct dctx *d = ctx;
	switch (id) {
	case D_WITH_PASSWORD: return add_arg(d->passwords, &d->n_passwords, "passwords", val);
	case D_WITH_KEY_PASSWORD: return add_arg(d->key_passwords, &d->n_key_passwords, "key passwords", val);
	case D_WITH_SESSION_KEY: return add_arg(d->session_keys, &d->n_session_keys, "session keys", val);
	case D_SESSION_KEY_OUT:
		if (d->session_key_out)
			return fail(SOP_UNSUPPORTED_OPTION, "decrypt: --session-key-out given twice");
		d->session_key_out = val;
		return SOP_OK;
	default:
		/* Accepting these and writing no verification would read as "no
		 * valid signature" to a caller that asked for one. */
		return fail(SOP_UNSUPPORTED_OPTION, "decrypt: --%s: pgpdecd-sop decrypts only and cannot "
		            "verify signatures", name);
	}
}

static int decrypt_pos(void *ctx, const char *arg)
{
	struct dctx *d = ctx;
	return add_arg(d->keys, &d->n_keys, "keys", arg);
}

/* A password as given and, if it ends in whitespace (a file's newline),
 * without it: the two tries the draft asks of decrypt for passwords read
 * from files. */
static size_t trimmed_len(const struct blob *b)
{
	size_t n = b->len;
	while (n && (b->p[n - 1] == ' ' || b->p[n - 1] == '\t' || b->p[n - 1] == '\r' || b->p[n - 1] == '\n'))
		n--;
	return n;
}

/* "ALGO:HEX" (gpg's and the draft's form), surrounding whitespace allowed. */
static int parse_session_key(const struct blob *b, uint8_t *ret_algo, uint8_t *key, size_t *ret_len)
{
	size_t i = 0, n = trimmed_len(b);
	const uint8_t *p = b->p;
	unsigned algo = 0;

	while (i < n && isspace(p[i]))
		i++;
	size_t d0 = i;
	while (i < n && isdigit(p[i]) && algo < 1000)
		algo = algo * 10 + (p[i++] - '0');
	if (i == d0 || i - d0 > 3 || algo > 255 || i >= n || p[i] != ':')
		return -EINVAL;
	i++;
	size_t hex = n - i;
	if (hex == 0 || hex % 2 || hex / 2 > PD_SESSION_KEY_MAX)
		return -EINVAL;
	for (size_t k = 0; k < hex / 2; k++) {
		int v = 0;
		for (int h = 0; h < 2; h++) {
			int c = p[i + 2 * k + h];
			if (!isxdigit(c))
				return -EINVAL;
			v = v * 16 + (isdigit(c) ? c - '0' : tolower(c) - 'a' + 10);
		}
		key[k] = (uint8_t)v;
	}
	*ret_algo = (uint8_t)algo;
	*ret_len = hex / 2;
	return 0;
}

/* One way into the message. */
struct attempt {
	const struct pd_keyring *kr; /* private keys, or an empty ring */
	const uint8_t *password;     /* or NULL */
	size_t password_len;
	bool have_sk;                /* a session key instead of any key operation */
	uint8_t sk_algo, sk[PD_SESSION_KEY_MAX];
	size_t sk_len;
	/* the plaintext, held until the message verified */
	uint8_t *out;
	size_t out_len, out_cap;
	uint64_t max_out;
};

static int on_key(void *ctx, struct pd_msg *m, struct pd_worker *w)
{
	struct attempt *a = ctx;
	if (a->password) {
		int r = pd_msg_set_password(m, (const char *)a->password, a->password_len);
		if (r < 0)
			return r;
	}
	return pd_msg_recover_key(m, a->kr, w);
}

static int on_output(void *ctx, const uint8_t *p, size_t n)
{
	struct attempt *a = ctx;
	if (a->out_len + n > a->max_out)
		return -EFBIG; /* the engine's max_output stops it first */
	while (a->out_len + n > a->out_cap) {
		if (!a->out) {
			a->out_cap = 1 << 16;
			a->out = malloc(a->out_cap);
			if (!a->out)
				return -ENOMEM;
			continue;
		}
		if (pd_grow_wiped(&a->out, &a->out_cap, a->out_len) < 0)
			return -ENOMEM;
	}
	memcpy(a->out + a->out_len, p, n);
	a->out_len += n;
	return 0;
}

static void attempt_clear(struct attempt *a)
{
	if (a->out) {
		explicit_bzero(a->out, a->out_len);
		free(a->out);
	}
	a->out = NULL;
	a->out_len = a->out_cap = 0;
	explicit_bzero(a->sk, sizeof(a->sk));
}

/* How a failed try counts: BAD_DATA (the input is not a message we can
 * parse, whatever the key), FAILURE (a limit, memory), CANNOT_DECRYPT (the
 * key, password or session key does not open it).  The worst one wins. */
static int classify(int err, const struct pd_msginfo *mi)
{
	switch (err) {
	case PD_ENOTPGP:
	case PD_EMALFORMED:
	case PD_ETRUNCATED:
		return SOP_BAD_DATA;
	case PD_EUNSUPPORTED:
		/* no encrypted data packet at all: a key, a signed message */
		return mi->container ? SOP_CANNOT_DECRYPT : SOP_BAD_DATA;
	case PD_ENOKEY:
	case PD_EINTEGRITY:
	case PD_EBADPASS:
	case PD_ENOPASSWORD:
	case PD_ESED:
		return SOP_CANNOT_DECRYPT;
	default:
		return SOP_FAILURE;
	}
}

static int rank(int code)
{
	return code == SOP_BAD_DATA ? 3 : code == SOP_FAILURE ? 2 : code == SOP_CANNOT_DECRYPT ? 1 : 0;
}

/* Run one try over the ciphertext: 0, or the engine's error (detail set,
 * *ret_code its classification). */
static int try_once(struct attempt *a, const struct blob *ct, struct pd_worker *w, uint8_t *outbuf, int *ret_code,
                    char *detail, size_t detail_len)
{
	struct pd_limits lim;
	struct pd_msg *m = NULL;

	pd_limits_default(&lim);
	/* the plaintext is held in memory: at most what a tool reads whole */
	if (!lim.max_output || lim.max_output > PD_TOOL_MAX_FILE)
		lim.max_output = PD_TOOL_MAX_FILE;
	a->max_out = lim.max_output;
	int r = pd_msg_new(&m, &lim);
	if (r < 0) {
		snprintf(detail, detail_len, "%s", pd_strerror(r));
		*ret_code = SOP_FAILURE;
		return r;
	}
	pd_msg_set_keyring(m, a->kr);
	if (a->have_sk) {
		r = pd_msg_set_session_key(m, a->sk_algo, a->sk, a->sk_len);
		if (r < 0) {
			/* the caller's own key: its fault may be told */
			snprintf(detail, detail_len, "session key %u:...: %s", a->sk_algo,
			         r == -EINVAL ? "wrong length for its algorithm" : pd_strerror(r));
			*ret_code = SOP_CANNOT_DECRYPT;
			pd_msg_free(m, w);
			return r;
		}
	}
	struct pd_drive d = {
		.fd = -1, .mem = ct->p ? ct->p : (const uint8_t *)"", .mem_len = ct->len,
		.slice = 1 << 16, .out = outbuf, .out_cap = OUTBUF,
		.need_key = on_key, .output = on_output, .ctx = a,
	};
	r = pd_drive_run(m, w, &d, detail, detail_len);
	if (r == 0) {
		/* what the engine verified, not merely what was given to it */
		r = pd_msg_session_key(m, &a->sk_algo, a->sk, sizeof(a->sk), &a->sk_len);
		if (r < 0) {
			snprintf(detail, detail_len, "no session key after a verified message: %s", pd_strerror(r));
			*ret_code = SOP_FAILURE;
		}
	} else {
		if (!*detail)
			snprintf(detail, detail_len, "%s", pd_strerror(r));
		*ret_code = classify(r, pd_msg_info(m));
	}
	pd_msg_free(m, w);
	explicit_bzero(outbuf, d.out_hw);
	return r;
}

/* Load one KEYS argument, unlocking it with the key passwords if it is
 * protected (each as given, then without trailing whitespace). */
static int load_key(struct pd_keyring *kr, const char *arg, struct blob *kpw, size_t n_kpw)
{
	struct blob data = { 0 };
	char kd[512] = "";
	int code = read_indirect("key", arg, &data);
	if (code)
		return code;
	int r = pd_keyring_add(kr, data.p, data.len, NULL, 0, kd, sizeof kd);
	for (size_t i = 0; r == PD_ENEEDPASS || r == PD_EBADPASS; i++) {
		if (i == 2 * n_kpw)
			break;
		struct blob *b = &kpw[i / 2];
		size_t n = i % 2 ? trimmed_len(b) : b->len;
		if (i % 2 && n == b->len)
			continue;
		r = pd_keyring_add(kr, data.p, data.len, (const char *)b->p, n, kd, sizeof kd);
	}
	blob_wipe(&data);
	if (r >= 0)
		return SOP_OK;
	if (r == PD_ENEEDPASS || r == PD_EBADPASS)
		return fail(SOP_KEY_IS_PROTECTED, "key '%s': %s", arg, n_kpw ? "no --with-key-password unlocks it" :
		            "it is protected with a password and no --with-key-password was given");
	if (r == PD_ENOSECRET || r == PD_EMALFORMED || r == PD_ENOTPGP || r == PD_EUNSUPPORTED ||
	    r == PD_ETRUNCATED)
		return fail(SOP_BAD_DATA, "key '%s': %s", arg, *kd ? kd : pd_strerror(r));
	return fail(SOP_FAILURE, "key '%s': %s", arg, *kd ? kd : pd_strerror(r));
}

static int session_key_text(const struct attempt *a, char *buf, size_t cap)
{
	size_t o = (size_t)snprintf(buf, cap, "%u:", a->sk_algo);
	for (size_t i = 0; i < a->sk_len && o + 3 < cap; i++)
		o += (size_t)snprintf(buf + o, cap - o, "%02X", a->sk[i]);
	if (o + 2 > cap)
		return -ENOSPC;
	buf[o++] = '\n';
	buf[o] = 0;
	return (int)o;
}

static int cmd_decrypt(int argc, char **argv)
{
	static const struct opt opts[] = {
		{ "with-password", true, D_WITH_PASSWORD },
		{ "with-key-password", true, D_WITH_KEY_PASSWORD },
		{ "with-session-key", true, D_WITH_SESSION_KEY },
		{ "session-key-out", true, D_SESSION_KEY_OUT },
		{ "verify-with", true, D_VERIFY },
		{ "verifications-out", true, D_VERIFY },
		{ "verify-out", true, D_VERIFY }, /* the older drafts' name */
		{ "verify-not-before", true, D_VERIFY },
		{ "verify-not-after", true, D_VERIFY },
		{ 0 },
	};
	struct dctx d = { 0 };
	struct blob pw[MAX_ARGS] = { { 0 } }, kpw[MAX_ARGS] = { { 0 } }, ct = { 0 };
	struct attempt sks[MAX_ARGS];
	struct pd_keyring *kr = NULL, *empty = NULL;
	struct pd_worker *w = NULL;
	uint8_t *outbuf = NULL;
	char detail[1024] = "", best_detail[1024] = "";
	struct attempt ok = { 0 };
	int code, best = SOP_OK, r;
	bool done = false;

	memset(sks, 0, sizeof(sks));
	code = parse_args(argc, argv, opts, "decrypt", decrypt_opt, decrypt_pos, &d);
	if (code)
		return code;
	if (!d.n_keys && !d.n_passwords && !d.n_session_keys)
		return fail(SOP_MISSING_ARG, "decrypt: no KEYS, --with-password or --with-session-key given");
	if (d.session_key_out && (code = check_output("--session-key-out", d.session_key_out)))
		return code;

	/* keys, passwords and plaintext in this process: no core dump, no ptrace by peers */
	prctl(PR_SET_DUMPABLE, 0);
	r = pd_lib_init(0);
	if (r < 0)
		return fail(SOP_FAILURE, "initialising the crypto libraries: %s", pd_strerror(r));
	if ((r = pd_keyring_new(&kr, PD_RSA_DEFAULT)) < 0 || (r = pd_keyring_new(&empty, PD_RSA_DEFAULT)) < 0 ||
	    (r = pd_worker_new(&w, 0)) < 0 || !(outbuf = malloc(OUTBUF))) {
		code = fail(SOP_FAILURE, "setting up: %s", pd_strerror(r < 0 ? r : -ENOMEM));
		goto out;
	}
	for (size_t i = 0; i < d.n_key_passwords; i++)
		if ((code = read_indirect("key password", d.key_passwords[i], &kpw[i])))
			goto out;
	for (size_t i = 0; i < d.n_passwords; i++)
		if ((code = read_indirect("password", d.passwords[i], &pw[i])))
			goto out;
	for (size_t i = 0; i < d.n_session_keys; i++) {
		struct blob b = { 0 };
		if ((code = read_indirect("session key", d.session_keys[i], &b)))
			goto out;
		r = parse_session_key(&b, &sks[i].sk_algo, sks[i].sk, &sks[i].sk_len);
		blob_wipe(&b);
		if (r < 0) {
			code = fail(SOP_BAD_DATA, "session key '%s': not of the form ALGO:HEX", d.session_keys[i]);
			goto out;
		}
		sks[i].have_sk = true;
		sks[i].kr = empty;
	}
	for (size_t i = 0; i < d.n_keys; i++)
		if ((code = load_key(kr, d.keys[i], kpw, d.n_key_passwords)))
			goto out;
	r = pd_read_fd(STDIN_FILENO, PD_TOOL_MAX_FILE, &ct.p, &ct.len);
	if (r < 0) {
		code = fail(SOP_FAILURE, "reading standard input: %s", strerror(-r));
		goto out;
	}

	/* The ways in, cheapest first: session keys, the private keys, then
	 * each password (as given, then without trailing whitespace).  The
	 * first that verifies wins; each other one starts from the first octet
	 * again. */
	for (size_t i = 0; !done && i < d.n_session_keys + 1 + 2 * d.n_passwords; i++) {
		struct attempt a = { 0 };
		if (i < d.n_session_keys) {
			a = sks[i];
		} else if (i == d.n_session_keys) {
			if (!d.n_keys)
				continue;
			a.kr = kr;
		} else {
			size_t k = i - d.n_session_keys - 1;
			struct blob *b = &pw[k / 2];
			a.kr = empty;
			a.password = b->p ? b->p : (const uint8_t *)"";
			a.password_len = k % 2 ? trimmed_len(b) : b->len;
			if (k % 2 && a.password_len == b->len)
				continue;
		}
		int c = SOP_FAILURE;
		r = try_once(&a, &ct, w, outbuf, &c, detail, sizeof detail);
		if (r == 0) {
			ok = a;
			done = true;
			break;
		}
		attempt_clear(&a);
		if (rank(c) > rank(best)) {
			best = c;
			snprintf(best_detail, sizeof best_detail, "%s", detail);
		}
		/* not OpenPGP at all: no other key makes it so */
		if (r == PD_ENOTPGP)
			break;
	}
	if (!done) {
		code = fail(best ? best : SOP_CANNOT_DECRYPT, "decrypt: %s", *best_detail ? best_detail :
		            "no key, password or session key opens the message");
		goto out;
	}
	if (d.session_key_out) {
		char text[2 * PD_SESSION_KEY_MAX + 8];
		int n = session_key_text(&ok, text, sizeof text);
		code = n < 0 ? fail(SOP_FAILURE, "formatting the session key") :
		       write_output("--session-key-out", d.session_key_out, text, (size_t)n);
		explicit_bzero(text, sizeof text);
		if (code)
			goto out;
	}
	r = write_all(STDOUT_FILENO, ok.out ? ok.out : (const uint8_t *)"", ok.out_len);
	code = r < 0 ? fail(SOP_FAILURE, "writing standard output: %s", strerror(-r)) : SOP_OK;

out:
	attempt_clear(&ok);
	for (size_t i = 0; i < MAX_ARGS; i++) {
		blob_wipe(&pw[i]);
		blob_wipe(&kpw[i]);
		explicit_bzero(sks[i].sk, sizeof(sks[i].sk));
	}
	blob_wipe(&ct);
	free(outbuf);
	pd_worker_free(w);
	pd_keyring_free(kr);
	pd_keyring_free(empty);
	pd_lib_deinit();
	return code;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return fail(SOP_MISSING_ARG, "no subcommand");
	}
	const char *sub = argv[1];
	if (!strcmp(sub, "--help") || !strcmp(sub, "help")) {
		usage(stdout);
		return SOP_OK;
	}
	if (!strcmp(sub, "version"))
		return cmd_version(argc - 2, argv + 2);
	if (!strcmp(sub, "decrypt"))
		return cmd_decrypt(argc - 2, argv + 2);
	return fail(SOP_UNSUPPORTED_SUBCOMMAND, "'%s': pgpdecd-sop implements only version and decrypt", sub);
}
