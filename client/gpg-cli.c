/* SPDX-License-Identifier: MIT */
/*
 * pgpdecd-gpg: gpg's decryption command line over libpdclient, so that
 * programs written against `gpg --decrypt` (python-gnupg, GPGME, pass,
 * scripts) decrypt through the daemon when this program is first on their
 * PATH as `gpg` (or is named as their gpg binary).  It takes the options
 * those programs write (pgpdecd-gpg(1) lists them), writes the status lines
 * gpg 2.2 writes for a decryption (gpgfmt.c) and exits as gpg does: 0, or 2.
 * Whatever it cannot honour is refused with exit 2, never ignored when it
 * would change the meaning; options that only tune gpg's own machinery
 * (its home, agent, keyrings for other commands, charset) are accepted and
 * have no effect.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gpg-error.h>

#include "pd-config.h"
#include "gpgfmt.h"
#include "outfile.h"
#include "pdclient.h"

#define GPG_COMPAT_VERSION "2.2.40" /* the gpg whose status output this matches */
#define PW_MAX 1024

static const char *prog = "gpg";
static int log_fd = STDERR_FILENO;
static bool quiet;

__attribute__((format(printf, 1, 2)))
static void say(const char *fmt, ...)
{
	char line[1400];
	va_list ap;
	int n = snprintf(line, sizeof(line), "%s: ", prog);
	va_start(ap, fmt);
	int k = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (k < 0)
		return;
	n += k < (int)(sizeof(line) - (size_t)n - 1) ? k : (int)(sizeof(line) - (size_t)n - 2);
	for (int i = 0; i < n; i++) /* daemon sentences and names: one line, no control octets */
		if ((unsigned char)line[i] < 0x20)
			line[i] = '?';
	line[n++] = '\n';
	if (write(log_fd, line, (size_t)n) < 0) {
		/* nowhere left to say it */
	}
}

/* ------------------------------------------------------------------ */
/* Command line */

enum act {
	A_IGNORE,        /* accepted, no effect on a decryption */
	A_IGNORE_ARG,    /* the same, with an argument */
	A_DECRYPT, A_VERSION, A_LIST_CONFIG, A_HELP,
	A_OUTPUT, A_STATUS_FD, A_LOGGER_FD, A_PASSPHRASE_FD, A_PASSPHRASE, A_PASSPHRASE_FILE,
	A_PINENTRY_MODE, A_COMMAND_FD, A_SHOW_SK, A_OVERRIDE_SK, A_OVERRIDE_SK_FD, A_YES, A_QUIET,
	A_VERBOSE, A_WITH_COLONS, A_EXIT_ON_STATUS_ERR,
};

struct optspec {
	const char *name;
	enum act act;
	bool arg;
};

static const struct optspec optspecs[] = {
	{ "decrypt", A_DECRYPT, false },
	{ "version", A_VERSION, false },
	{ "list-config", A_LIST_CONFIG, false },
	{ "help", A_HELP, false },
	{ "output", A_OUTPUT, true },
	{ "status-fd", A_STATUS_FD, true },
	{ "logger-fd", A_LOGGER_FD, true },
	{ "passphrase-fd", A_PASSPHRASE_FD, true },
	{ "passphrase", A_PASSPHRASE, true },
	{ "passphrase-file", A_PASSPHRASE_FILE, true },
	{ "pinentry-mode", A_PINENTRY_MODE, true },
	{ "command-fd", A_COMMAND_FD, true },
	{ "show-session-key", A_SHOW_SK, false },
	{ "override-session-key", A_OVERRIDE_SK, true },
	{ "override-session-key-fd", A_OVERRIDE_SK_FD, true },
	{ "yes", A_YES, false },
	{ "quiet", A_QUIET, false },
	{ "verbose", A_VERBOSE, false },
	{ "with-colons", A_WITH_COLONS, false },
	{ "exit-on-status-write-error", A_EXIT_ON_STATUS_ERR, false },
	/* gpg's own machinery, or output details of other commands */
	{ "batch", A_IGNORE, false },
	{ "no-tty", A_IGNORE, false },
	{ "no-verbose", A_IGNORE, false },
	{ "fixed-list-mode", A_IGNORE, false },
	{ "no-sk-comments", A_IGNORE, false },
	{ "enable-progress-filter", A_IGNORE, false },
	{ "enable-special-filenames", A_IGNORE, false },
	{ "no-keyring", A_IGNORE, false },
	{ "no-encrypt-to", A_IGNORE, false },
	{ "use-agent", A_IGNORE, false },
	{ "no-use-agent", A_IGNORE, false },
	{ "no-secmem-warning", A_IGNORE, false },
	{ "no-permission-warning", A_IGNORE, false },
	{ "no-greeting", A_IGNORE, false },
	{ "no-options", A_IGNORE, false },
	{ "utf8-strings", A_IGNORE, false },
	{ "always-trust", A_IGNORE, false },
	{ "no-auto-check-trustdb", A_IGNORE, false },
	{ "homedir", A_IGNORE_ARG, true },
	{ "charset", A_IGNORE_ARG, true },
	{ "display-charset", A_IGNORE_ARG, true },
	{ "compress-algo", A_IGNORE_ARG, true },
	{ "trust-model", A_IGNORE_ARG, true },
	{ "keyid-format", A_IGNORE_ARG, true },
	{ "display", A_IGNORE_ARG, true },
	{ "ttyname", A_IGNORE_ARG, true },
	{ "ttytype", A_IGNORE_ARG, true },
	{ "lc-ctype", A_IGNORE_ARG, true },
	{ "lc-messages", A_IGNORE_ARG, true },
	{ "input-size-hint", A_IGNORE_ARG, true },
	{ "request-origin", A_IGNORE_ARG, true },
};

/* gpg commands and options that are not decryption: named in the refusal. */
static const char *const not_ours[] = {
	"encrypt", "symmetric", "sign", "clearsign", "clear-sign", "detach-sign", "verify", "list-keys",
	"list-public-keys", "list-secret-keys", "list-sigs", "check-sigs", "fingerprint", "import", "export",
	"export-secret-keys", "gen-key", "full-gen-key", "generate-key", "quick-gen-key", "quick-add-key",
	"delete-keys", "delete-secret-keys", "edit-key", "sign-key", "recv-keys", "send-keys", "search-keys",
	"list-only", "list-packets", "store", "keyring", "secret-keyring", "default-key", "local-user",
	"recipient", "multifile", "decrypt-files", "card-status", "gen-revoke", "armor", "textmode",
	"ignore-mdc-error", "allow-multiple-messages", "skip-verify", "unwrap", "try-secret-key",
	"try-all-secrets", "hidden-recipient", "set-filename", "dry-run",
};

struct gopts {
	bool decrypt, version, list_config, help;
	bool show_sk, yes, with_colons, exit_on_status_err;
	const char *output;
	int status_fd, logger_fd, passphrase_fd, command_fd, override_sk_fd;
	const char *passphrase, *passphrase_file, *override_sk, *pinentry_mode;
	int n_inputs;
	const char *input;
};

__attribute__((noreturn))
static void usage_exit(const char *why, const char *what)
{
	say("%s \"%s\"", why, what);
	exit(2);
}

static int fd_arg(const char *opt, const char *v)
{
	char *end;
	errno = 0;
	long n = strtol(v, &end, 10);
	if (!*v || *end || errno || n < 0 || n > INT_MAX) {
		say("%s: not a file descriptor: \"%s\"", opt, v);
		exit(2);
	}
	return (int)n;
}

static void apply(struct gopts *o, const struct optspec *s, const char *v)
{
	switch (s->act) {
	case A_IGNORE: case A_IGNORE_ARG: break;
	case A_DECRYPT: o->decrypt = true; break;
	case A_VERSION: o->version = true; break;
	case A_LIST_CONFIG: o->list_config = true; break;
	case A_HELP: o->help = true; break;
	case A_OUTPUT: o->output = v; break;
	case A_STATUS_FD: o->status_fd = fd_arg("--status-fd", v); break;
	case A_LOGGER_FD: o->logger_fd = fd_arg("--logger-fd", v); break;
	case A_PASSPHRASE_FD: o->passphrase_fd = fd_arg("--passphrase-fd", v); break;
	case A_PASSPHRASE: o->passphrase = v; break;
	case A_PASSPHRASE_FILE: o->passphrase_file = v; break;
	case A_PINENTRY_MODE:
		if (strcmp(v, "loopback") && strcmp(v, "default") && strcmp(v, "ask") && strcmp(v, "cancel") &&
		    strcmp(v, "error"))
			usage_exit("invalid pinentry mode", v);
		o->pinentry_mode = v;
		break;
	case A_COMMAND_FD: o->command_fd = fd_arg("--command-fd", v); break;
	case A_SHOW_SK: o->show_sk = true; break;
	case A_OVERRIDE_SK: o->override_sk = v; break;
	case A_OVERRIDE_SK_FD: o->override_sk_fd = fd_arg("--override-session-key-fd", v); break;
	case A_YES: o->yes = true; break;
	case A_QUIET: quiet = true; break;
	case A_VERBOSE: quiet = false; break;
	case A_WITH_COLONS: o->with_colons = true; break;
	case A_EXIT_ON_STATUS_ERR: o->exit_on_status_err = true; break;
	}
}

static void parse(struct gopts *o, int argc, char **argv)
{
	bool operands = false;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (operands || a[0] != '-' || !strcmp(a, "-") || !strncmp(a, "-&", 2)) {
			o->n_inputs++;
			o->input = a;
			continue;
		}
		if (!strcmp(a, "--")) {
			operands = true;
			continue;
		}
		if (a[1] != '-') { /* short options, bundled: -d, -q, -v, -o FILE / -oFILE */
			for (const char *p = a + 1; *p; p++) {
				if (*p == 'd')
					o->decrypt = true;
				else if (*p == 'q')
					quiet = true;
				else if (*p == 'v')
					quiet = false;
				else if (*p == 'h')
					o->help = true;
				else if (*p == 'o') {
					if (p[1])
						o->output = p + 1;
					else if (i + 1 < argc)
						o->output = argv[++i];
					else
						usage_exit("missing argument for option", "-o");
					break;
				} else {
					char opt[3] = { '-', *p, 0 };
					usage_exit("invalid option", opt);
				}
			}
			continue;
		}
		const char *name = a + 2, *eq = strchr(name, '=');
		size_t nl = eq ? (size_t)(eq - name) : strlen(name);
		const struct optspec *s = NULL;
		for (size_t k = 0; k < sizeof(optspecs) / sizeof(optspecs[0]); k++)
			if (strlen(optspecs[k].name) == nl && !strncmp(optspecs[k].name, name, nl))
				s = &optspecs[k];
		if (!s) {
			for (size_t k = 0; k < sizeof(not_ours) / sizeof(not_ours[0]); k++)
				if (strlen(not_ours[k]) == nl && !strncmp(not_ours[k], name, nl)) {
					say("%s is not supported: pgpdecd-gpg only decrypts (-d), through the pgpdecd daemon", a);
					exit(2);
				}
			usage_exit("invalid option", a);
		}
		const char *v = NULL;
		if (s->arg) {
			if (eq)
				v = eq + 1;
			else if (i + 1 < argc)
				v = argv[++i];
			else
				usage_exit("missing argument for option", a);
		} else if (eq) {
			usage_exit("option takes no argument", a);
		}
		apply(o, s, v);
	}
}

/* ------------------------------------------------------------------ */
/* --version, --list-config */

static void print_version(void)
{
	/* The first line is what python-gnupg and GPGME read the version from:
	 * the gpg 2.2 whose decryption interface this speaks. */
	printf("gpg (GnuPG) " GPG_COMPAT_VERSION "\n"
	       "pgpdecd-gpg %s: decryption only, by the pgpdecd daemon; not GnuPG\n"
	       "Home: (none: the daemon holds the keys)\n"
	       "Supported algorithms:\n"
	       "Pubkey: RSA, ELG, ECDH, X25519, X448\n"
	       "Cipher: IDEA, 3DES, CAST5, BLOWFISH, AES, AES192, AES256, TWOFISH, CAMELLIA128,\n"
	       "        CAMELLIA192, CAMELLIA256\n"
	       "AEAD: EAX, OCB, GCM\n"
	       "Hash: (signatures are not verified)\n"
	       "Compression: Uncompressed, ZIP, ZLIB, BZIP2\n", PD_VERSION);
}

static void print_config(void)
{
	printf("cfg:version:" GPG_COMPAT_VERSION "\n"
	       "cfg:pubkey:1;16;18;25;26\n"
	       "cfg:pubkeyname:RSA;ELG;ECDH;X25519;X448\n"
	       "cfg:cipher:1;2;3;4;7;8;9;10;11;12;13\n"
	       "cfg:ciphername:IDEA;3DES;CAST5;BLOWFISH;AES;AES192;AES256;TWOFISH;CAMELLIA128;CAMELLIA192;CAMELLIA256\n"
	       "cfg:digest:\n"
	       "cfg:digestname:\n"
	       "cfg:compress:0;1;2;3\n"
	       "cfg:compressname:Uncompressed;ZIP;ZLIB;BZIP2\n"
	       "cfg:curve:cv25519;ed25519;cv448;nistp256;nistp384;nistp521\n");
}

/* ------------------------------------------------------------------ */
/* Secrets from descriptors and files: one line, read octet by octet so
 * that nothing after it is taken (python-gnupg sends the passphrase and
 * then the message on the same standard input). */

static char *read_line_fd(int fd, const char *what, size_t max, size_t *ret_len)
{
	char *buf = calloc(1, max + 1);
	size_t n = 0;
	if (!buf) {
		say("out of memory");
		exit(2);
	}
	for (;;) {
		char c;
		ssize_t r = read(fd, &c, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			say("reading the %s: %s", what, strerror(errno));
			exit(2);
		}
		if (r == 0 || c == '\n')
			break;
		if (n == max) {
			explicit_bzero(buf, max + 1);
			say("the %s is longer than %zu octets", what, max);
			exit(2);
		}
		buf[n++] = c;
	}
	if (n && buf[n - 1] == '\r')
		buf[--n] = 0;
	*ret_len = n;
	return buf;
}

static void wipe_free(char *p, size_t n)
{
	if (p) {
		explicit_bzero(p, n);
		free(p);
	}
}

/* ------------------------------------------------------------------ */
/* Decryption */

struct run {
	int out_fd;
	int write_err;
	bool wrote;
	struct pdc_result res;
	bool done;
	struct pdc_key *keys;
	size_t n_keys, cap_keys;
};

static int on_data(void *arg, const uint8_t *p, size_t n)
{
	struct run *r = arg;
	r->wrote = true;
	while (n) {
		ssize_t w = write(r->out_fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			r->write_err = errno ? -errno : -EIO;
			return r->write_err;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static void on_done(void *arg, const struct pdc_result *res)
{
	struct run *r = arg;
	r->res = *res;
	r->done = true;
}

static int on_key(void *arg, const struct pdc_key *k)
{
	struct run *r = arg;
	if (r->n_keys == r->cap_keys) {
		size_t nc = r->cap_keys ? 2 * r->cap_keys : 16;
		struct pdc_key *nk = nc < 65536 ? realloc(r->keys, nc * sizeof(*nk)) : NULL;
		if (!nk)
			return 0; /* the primary fingerprint is a nicety: go on without */
		r->keys = nk;
		r->cap_keys = nc;
	}
	r->keys[r->n_keys++] = *k;
	r->keys[r->n_keys - 1].addresses = NULL; /* the callback's only */
	r->keys[r->n_keys - 1].addresses_len = 0;
	return 0;
}

static void keys_done(void *arg, const struct pdc_result *res)
{
	(void)arg;
	(void)res;
}

/* A descriptor that cannot seek (a pipe) copied to an unlinked file, so
 * that a request can be sent again with the password GPGME gives only once
 * asked (--command-fd).  Ciphertext only. */
static int spool_input(int fd)
{
	if (lseek(fd, 0, SEEK_CUR) >= 0)
		return fd;
	const char *dir = getenv("TMPDIR");
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/pgpdecd-gpg-XXXXXX", dir && *dir ? dir : "/tmp");
	int t = mkostemp(path, O_CLOEXEC);
	if (t < 0) {
		say("cannot spool the input: %s", strerror(errno));
		exit(2);
	}
	unlink(path);
	uint8_t buf[65536];
	for (;;) {
		ssize_t r = read(fd, buf, sizeof(buf));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			say("read error: %s", strerror(errno));
			exit(2);
		}
		if (r == 0)
			break;
		if (write(t, buf, (size_t)r) != r) {
			say("cannot spool the input: %s", strerror(errno));
			exit(2);
		}
	}
	lseek(t, 0, SEEK_SET);
	return t;
}

static unsigned errcode_errno(int e)
{
	return (unsigned)gpg_err_make(GPG_ERR_SOURCE_GPG, gpg_err_code_from_errno(e));
}

static int special_fd(const char *name)
{
	return fd_arg(name, name + 2);
}

static int cmd_decrypt(struct gopts *o)
{
	struct pdc_gpg_status st = { .fd = o->status_fd };
	char *pw = NULL, *skline = NULL;
	size_t pwlen = 0, sklen = 0;
	uint8_t sk[PDC_SESSION_KEY_MAX], sk_algo = 0;
	size_t sk_len = 0;

	if (o->n_inputs > 1) {
		say("pgpdecd-gpg decrypts one message at a time (no --multifile)");
		return 2;
	}
	/* The message */
	int in_fd = STDIN_FILENO;
	if (o->input && !strncmp(o->input, "-&", 2))
		in_fd = special_fd(o->input);
	else if (o->input && strcmp(o->input, "-")) {
		in_fd = open(o->input, O_RDONLY | O_CLOEXEC);
		if (in_fd < 0) {
			say("can't open '%s': %s", o->input, strerror(errno));
			pdc_gpg_status(&st, "FAILURE", "decrypt %u", (unsigned)errcode_errno(errno));
			return 2;
		}
	}
	/* Secrets, before any of the message is read */
	if (o->passphrase)
		pw = strdup(o->passphrase), pwlen = strlen(o->passphrase);
	else if (o->passphrase_file) {
		int fd = open(o->passphrase_file, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			say("can't open '%s': %s", o->passphrase_file, strerror(errno));
			return 2;
		}
		pw = read_line_fd(fd, "passphrase", PW_MAX, &pwlen);
		close(fd);
	} else if (o->passphrase_fd >= 0) {
		pw = read_line_fd(o->passphrase_fd, "passphrase", PW_MAX, &pwlen);
	}
	if (o->override_sk)
		skline = strdup(o->override_sk), sklen = strlen(o->override_sk);
	else if (o->override_sk_fd >= 0)
		skline = read_line_fd(o->override_sk_fd, "session key", 200, &sklen);
	if (skline) {
		int k = pdc_sk_parse(skline, sklen, &sk_algo, sk, &sk_len);
		wipe_free(skline, sklen);
		if (k < 0) {
			say("invalid session key: want ALGO:HEX, as --show-session-key prints it");
			return 2;
		}
	}
	if (o->command_fd >= 0 && !pw && !sk_len)
		in_fd = spool_input(in_fd); /* a password may be asked for, then the message sent again */

	/* Where the plaintext goes: a file only once verified (unnamed until
	 * then where the file system allows, else a temporary name beside it
	 * that a signal or an exit removes; outfile.h) */
	int out_fd = STDOUT_FILENO;
	struct pd_outfile of = { .fd = -1 };
	bool to_file = false;
	if (o->output && !strncmp(o->output, "-&", 2)) {
		out_fd = special_fd(o->output);
	} else if (o->output && strcmp(o->output, "-")) {
		struct stat sb;
		if (!o->yes && lstat(o->output, &sb) == 0) {
			say("File '%s' exists. (use --yes to overwrite)", o->output);
			pdc_gpg_status(&st, "FAILURE", "decrypt %u", (unsigned)errcode_errno(EEXIST));
			return 2;
		}
		pd_outfile_catch_signals(NULL);
		atexit(pd_outfile_remove_all); /* exit(2) on a bad passphrase descriptor */
		int k = pd_outfile_open(&of, o->output);
		if (k < 0) {
			say("can't create '%s': %s", o->output, strerror(-k));
			pdc_gpg_status(&st, "FAILURE", "decrypt %u", (unsigned)errcode_errno(-k));
			return 2;
		}
		to_file = true;
		out_fd = of.fd;
	}

	struct pdc_config cfg = { .software = "pgpdecd-gpg/" PD_VERSION };
	struct pdc_conn *c = NULL;
	struct run run = { .out_fd = out_fd };
	struct pdc_result e;
	bool asked = false;
	off_t in_start = lseek(in_fd, 0, SEEK_CUR);
	if (pdc_connect(&c, &cfg, &e) < 0) {
		run.res = e;
		run.res.err = e.err ? e.err : -ECONNREFUSED;
		goto report;
	}
	if (st.fd >= 0)
		(void)pdc_submit_keys(c, on_key, keys_done, &run);
	for (;;) {
		struct pdc_decrypt d = {
			.flags = o->show_sk ? PDC_WANT_SESSION_KEY : 0,
			.password = pw, .password_len = pwlen,
			.session_key = sk_len ? sk : NULL, .session_key_len = sk_len, .session_key_algo = sk_algo,
			.in_fd = in_fd, .on_data = on_data, .on_done = on_done, .arg = &run,
		};
		run.done = false;
		int k = pdc_submit_decrypt(c, &d);
		if (k < 0) {
			run.res = (struct pdc_result){ .err = k };
			snprintf(run.res.sentence, sizeof(run.res.sentence), "%s", strerror(-k));
			break;
		}
		(void)pdc_run(c);
		/* GPGME's loopback: ask on the status fd, answer on the command fd */
		if (!run.res.err && run.res.status == 21 && !pw && o->command_fd >= 0 && !run.wrote && in_start >= 0 &&
		    !asked) {
			asked = true;
			pdc_gpg_status(&st, "NEED_PASSPHRASE_SYM", "0 0 0");
			pdc_gpg_status(&st, "INQUIRE_MAXLEN", "%d", PW_MAX);
			pdc_gpg_status(&st, "GET_HIDDEN", "passphrase.enter");
			pw = read_line_fd(o->command_fd, "passphrase", PW_MAX, &pwlen);
			pdc_gpg_status(&st, "GOT_IT", NULL);
			if (lseek(in_fd, in_start, SEEK_SET) < 0)
				break;
			continue;
		}
		break;
	}
	pdc_close(c);
report:;
	struct pdc_result *r = &run.res;
	if (run.write_err && !r->err) {
		r->err = run.write_err;
		snprintf(r->sentence, sizeof(r->sentence), "write error: %s", strerror(-run.write_err));
	}
	struct pdc_gpg_outcome out = { .r = r, .keys = run.keys, .n_keys = run.n_keys,
	                               .password_given = pw != NULL, .session_key_given = sk_len > 0,
	                               .show_session_key = o->show_sk, .passphrase_asked = asked };
	int code = pdc_gpg_status_decrypt(&st, &out);
	bool ok = code == 0;
	if (ok && o->show_sk) {
		if (r->session_key_len) {
			char text[8 + 2 * PDC_SESSION_KEY_MAX];
			pdc_sk_format(text, sizeof(text), r->session_key_algo, r->session_key, r->session_key_len);
			say("session key: '%s'", text);
			explicit_bzero(text, sizeof(text));
		} else {
			say("session key not available: %s", r->session_key_refused == PDC_SK_REFUSED_POLICY ?
			    "the daemon does not export session keys to this client (allow-session-key-export)" :
			    "the message has no integrity protection");
			pdc_gpg_status(&st, "ERROR", "show_session_key %u", (unsigned)gpg_err_make(GPG_ERR_SOURCE_GPG,
			               GPG_ERR_NOT_SUPPORTED));
			code = 2;
		}
	}
	if (ok && r->info.n_signatures && !quiet)
		say("note: %u signature%s not verified: pgpdecd-gpg decrypts only", r->info.n_signatures,
		    r->info.n_signatures == 1 ? "" : "s");
	if (!ok)
		say("decryption failed: %s", pdc_gpg_errtext(r));
	explicit_bzero(r->session_key, sizeof(r->session_key));
	explicit_bzero(sk, sizeof(sk));
	wipe_free(pw, pwlen);
	free(run.keys);
	if (to_file) {
		int k = code == 0 ? pd_outfile_commit(&of, NULL) : 0;
		if (k < 0) {
			say("can't write '%s': %s", o->output, strerror(-k));
			code = 2;
		}
		if (code != 0)
			pd_outfile_discard(&of);
		pd_outfile_free(&of);
	}
	if (st.failed && o->exit_on_status_err)
		return 2;
	return code;
}

int main(int argc, char **argv)
{
	struct gopts o = { .status_fd = -1, .logger_fd = -1, .passphrase_fd = -1, .command_fd = -1,
	                   .override_sk_fd = -1 };
	const char *base = strrchr(argv[0], '/');
	prog = base ? base + 1 : argv[0];
	parse(&o, argc, argv);
	if (o.logger_fd >= 0)
		log_fd = o.logger_fd;
	if (o.help) {
		printf("Usage: %s [OPTION]... -d [FILE]\n"
		       "gpg's decryption command line, decrypting through the pgpdecd daemon\n"
		       "($PGPDECD_SOCKET, default " PDC_DEFAULT_SOCKET ").  See pgpdecd-gpg(1).\n", prog);
		return 0;
	}
	if (o.version)
		return print_version(), 0;
	if (o.list_config)
		return print_config(), 0;
	if (!o.decrypt) {
		/* gpg guesses a command from the input; only decryption is ours */
		say("no command: pgpdecd-gpg only decrypts (-d, --decrypt)");
		return 2;
	}
	if (o.pinentry_mode && strcmp(o.pinentry_mode, "loopback") && (o.passphrase_fd >= 0 || o.command_fd >= 0)) {
		/* gpg would take the passphrase from a pinentry, not from the descriptor */
		say("--passphrase-fd and --command-fd need --pinentry-mode loopback");
		return 2;
	}
	return cmd_decrypt(&o);
}
