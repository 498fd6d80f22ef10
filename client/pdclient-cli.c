/* SPDX-License-Identifier: MIT */
/*
 * pgpdecd-client: decrypt files through pgpdecd, and the ping, stats, keys
 * and bench subcommands.  Built on libpdclient; exit codes are sysexits(3)
 * so that a Postfix pipe(8) transport defers or bounces correctly.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

#include <gnutls/crypto.h>

#include "pd-config.h"
#include "gpgfmt.h"
#include "outfile.h"
#include "pdclient.h"
#include "pdmail.h"

static const char *prog = "pgpdecd-client";
static int verbose;

struct job;

static void usage_text(FILE *f)
{
	fprintf(f,
"Usage: pgpdecd-client [OPTION]... [FILE]...\n"
"       pgpdecd-client [OPTION]... ping|stats|keys\n"
"       pgpdecd-client [OPTION]... bench [--concurrency N] [--requests M] [--pipeline K]\n"
"                      [--threads T] [--no-digest] [--json] FILE...\n"
"       pgpdecd-client [OPTION]... --mime [FILE]\n"
"\n"
"Decrypt OpenPGP messages with the keys held by the pgpdecd daemon.\n"
"\n"
"With no FILE, or when FILE is -, the message is read from standard input.\n"
"Several FILEs are sent one after another over one connection without\n"
"waiting for each reply (pipelined); replies arrive in order.  A first\n"
"operand of ping, stats, keys or bench is a subcommand: write ./ping to\n"
"decrypt a file of that name.\n"
"\n"
"Connection:\n"
"  -s, --socket PATH        Unix socket of the daemon (default: $PGPDECD_SOCKET,\n"
"                           else " PDC_DEFAULT_SOCKET "); repeat it to fail\n"
"                           over between daemons (also --connect)\n"
"  -c, --connect HOST:PORT  connect over TCP with TLS instead ([v6addr]:PORT\n"
"                           for IPv6 literals)\n"
"      --tls-ca FILE        PEM CA certificates to verify the daemon with\n"
"                           (default: the system's, unless --tls-pin is given)\n"
"      --tls-cert FILE      PEM client certificate (the daemon requires one\n"
"                           by default)\n"
"      --tls-key FILE       PEM private key of the client certificate\n"
"      --tls-server-name NAME\n"
"                           name the daemon's certificate must carry, also sent\n"
"                           as SNI (default: HOST)\n"
"      --tls-pin SHA256     accept the daemon's certificate if its SHA-256\n"
"                           fingerprint is this (64 hex digits, colons and a\n"
"                           sha256: prefix allowed), instead of or, with\n"
"                           --tls-ca, in addition to CA verification\n"
"      --no-tls             plain TCP (only a daemon on loopback that\n"
"                           explicitly allows it serves this)\n"
"  -t, --timeout SECONDS    give up when the daemon makes no progress for this\n"
"                           long, and on connecting; a failed message is sent\n"
"                           again for this long (default 60; 0 = never)\n"
"      --no-retry           never send a message again: by default what did not\n"
"                           finish (connection lost, daemon restarting, stopping\n"
"                           or overloaded) is sent again with backoff, to the\n"
"                           next daemon that answers, unless part of its\n"
"                           plaintext already went to standard output\n"
"\n"
"Decryption:\n"
"  -o, --output PATH        write the plaintext to PATH instead of standard\n"
"                           output.  It is written to an unnamed file in the\n"
"                           same directory (mode 0600; where the file system\n"
"                           has no O_TMPFILE, a temporary .NAME.pgpdecd-XXXXXX)\n"
"                           linked or renamed to PATH only when the daemon\n"
"                           reported success with the integrity verified;\n"
"                           otherwise it is removed and PATH is left untouched.\n"
"                           On SIGINT, SIGTERM or SIGHUP it is removed too, and\n"
"                           the client dies of the signal.\n"
"                           If PATH is an existing directory, each\n"
"                           FILE's plaintext goes to PATH/NAME, where NAME is\n"
"                           FILE's base name without a .gpg, .pgp or .asc\n"
"                           suffix (with .out appended if it had none).\n"
"                           Several FILEs need -o DIR (or no -o).\n"
"      --verified-only      have the daemon hold back all plaintext until the\n"
"                           whole message is verified: nothing unverified ever\n"
"                           reaches standard output\n"
"      --password-file FILE password for password-encrypted (SKESK) messages:\n"
"                           the first line of FILE\n"
"      --with-session-key FILE\n"
"                           decrypt with the session key in FILE, in gpg's\n"
"                           ALGO:HEX form (gpg --show-session-key prints it):\n"
"                           no key of the daemon is needed.  One FILE only\n"
"      --session-key-out FILE\n"
"                           ask the daemon for the message's session key and,\n"
"                           once the message is verified, write it to FILE\n"
"                           (mode 0600) as ALGO:HEX; the daemon gives it only\n"
"                           to clients its allow-session-key-export names\n"
"                           (refused: the plaintext is still written, exit 77).\n"
"                           One FILE only\n"
"      --status-fd N        write gpg's status lines for each message to file\n"
"                           descriptor N (as gpg --status-fd does for -d)\n"
"      --bind ADDR          use only the daemon's keys whose User IDs carry\n"
"                           the address ADDR (local@domain), or one in the\n"
"                           domain (@domain); repeated, up to 16: keys bound\n"
"                           to every one.  With --mime, for every piece\n"
"  -v, --verbose            print a line per message on standard error: status,\n"
"                           integrity, key, algorithms, sizes, literal name\n"
"\n"
"  Without -o and without --verified-only, plaintext streams to standard\n"
"  output as it is decrypted.  For messages in the older SEIPD v1 format it\n"
"  is verified only at the end: if the exit status is not 0, discard what\n"
"  was written.  With several FILEs and no -o, the plaintexts are written to\n"
"  standard output one after the other.\n"
"\n"
"Whole e-mail (--mime):\n"
"      --mime               FILE (or standard input) is one RFC 5322 message:\n"
"                           decrypt what is encrypted in it (PGP/MIME, inline\n"
"                           PGP in text parts, encrypted attachments) and write\n"
"                           the message with the plaintext in place and\n"
"                           X-Pgpdecd-* result headers, to standard output or\n"
"                           -o PATH.  Always verified-only.  Exit 0 when the\n"
"                           message was written (decrypted, partly, or passed\n"
"                           through by policy), 65 when a piece failed and\n"
"                           --on-failure is reject, 69 when no key opens it and\n"
"                           --on-no-key is reject, 75 when the daemon is\n"
"                           unavailable, 78 when a setting of ours cannot work\n"
"                           (nothing is written then)\n"
"      --on-failure pass|reject\n"
"                           a tampered, malformed or unsupported piece: pass the\n"
"                           mail on with that piece as it was, tagged, or\n"
"                           reject it (default reject)\n"
"      --on-no-key pass|reject\n"
"                           encrypted, but to no key the daemon holds (default\n"
"                           pass: written unchanged, tagged)\n"
"      --protected-headers none|subject|all\n"
"                           which protected headers of a decrypted PGP/MIME\n"
"                           message replace the outer ones (default subject)\n"
"      --keep-original      attach the original message (message/rfc822)\n"
"      --spool-dir DIR      temporary files (default $TMPDIR or /tmp)\n"
"      --max-plaintext MIB  plaintext of all pieces of the mail, at most (default\n"
"                           256); a piece past it fails LIMIT\n"
"\n"
"Subcommands:\n"
"  ping                     check that the daemon answers; prints the round trip\n"
"  stats                    print the daemon's counters (Prometheus text format)\n"
"  keys                     list the decryption keys the daemon holds\n"
"  bench FILE...            load FILEs into memory and decrypt them repeatedly,\n"
"                           printing throughput (messages/s, MB/s of ciphertext\n"
"                           and plaintext) and latency P50/P95/P99/max, measured\n"
"                           with CLOCK_MONOTONIC from submission to result\n"
"      --concurrency N      requests in flight at once (default 1)\n"
"      --requests M         requests in total (default 100)\n"
"      --pipeline K         requests in flight per connection (default 1, so N\n"
"                           connections); N/K connections are opened\n"
"      --threads T          client threads driving the connections (default 1)\n"
"      --no-digest          compare only the length of each plaintext with the\n"
"                           first of its file, not its content (without it,\n"
"                           plaintexts above 256 KiB are hashed, ~0.6 ms of CPU\n"
"                           per MB: for measuring the daemon on its cores)\n"
"      --json               print the figures as one JSON object\n"
"\n"
"  -h, --help               show this help and exit\n"
"  -V, --version            show the version and exit\n"
"\n"
"Exit status (sysexits.h), with the reason on standard error in one line:\n"
"  0   success: every message decrypted and its integrity verified\n"
"  64  usage error (EX_USAGE)\n"
"  65  bad or tampered data: malformed, not OpenPGP, truncated, integrity\n"
"      failure, unsupported, unprotected (SED), a limit or decompression bomb\n"
"      (EX_DATAERR)\n"
"  66  an input FILE cannot be read (EX_NOINPUT)\n"
"  69  no key held by the daemon can decrypt the message (EX_UNAVAILABLE)\n"
"  71  out of memory, or a thread could not be created (EX_OSERR)\n"
"  73  the output file cannot be created (EX_CANTCREAT)\n"
"  74  writing the output failed (EX_IOERR)\n"
"  75  daemon unreachable, overloaded, shutting down or timed out, or a\n"
"      protocol error: try again later (EX_TEMPFAIL)\n"
"  77  access denied: the socket's permissions, the daemon's allow-lists, or\n"
"      a client certificate the daemon requires (EX_NOPERM)\n"
"  78  a setting of ours cannot work: a socket path too long, TLS files that\n"
"      cannot be loaded, a bad --tls-pin (EX_CONFIG)\n"
"  With several FILEs, the status is that of the first one that failed.\n"
"\n"
"Environment:\n"
"  PGPDECD_SOCKET           default Unix socket path\n"
"\n"
"The wire protocol is described in PROTOCOL.md; see also pgpdecd(8).\n");
}

__attribute__((format(printf, 2, 3), noreturn))
static void die(int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: ", prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	pd_outfile_remove_all();
	exit(code);
}

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void hex(char *out, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02X", p[i]);
	out[2 * n] = 0;
}

/* One line, printable: the sentence and literal names come from elsewhere. */
static void sanitize(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			*s = '?';
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* decrypt */

struct job {
	const char *name;       /* for messages */
	int index;              /* position on the command line */
	int in_fd;
	int out_fd;
	char *final_path;       /* -o: the file the plaintext goes to once verified */
	bool to_file;           /* out_fd is out's (final_path is not there yet) */
	struct pd_outfile out;
	int exit_code;          /* local failure before the request, or the outcome */
	int write_err;          /* writing the plaintext failed (-errno) */
	bool wrote;             /* plaintext went to out_fd (standard output cannot take it back) */
	bool done;
	struct pdc_result res;
};

/* Wiped by the handler of a fatal signal too (pd_outfile_catch_signals). */
static void wipe_password(void);

/* The last job (by index) whose plaintext went to standard output. */
static int last_stdout_writer = -1;

static int job_data(void *arg, const uint8_t *p, size_t n)
{
	struct job *j = arg;
	j->wrote = true;
	if (!j->to_file && j->index > last_stdout_writer)
		last_stdout_writer = j->index;
	int r = write_all(j->out_fd, p, n);
	if (r < 0)
		j->write_err = r;
	return r;
}

/* libpdclient asks before it sends a request again: a temporary file is
 * started over; standard output cannot take back what reached it. */
static int job_retry(void *arg)
{
	struct job *j = arg;
	if (j->to_file)
		return pd_outfile_rewind(&j->out) < 0 ? -1 : 0;
	/* Standard output: only if nothing of it was written, and no message
	 * after it has written yet (the plaintexts keep their order). */
	return j->wrote || last_stdout_writer > j->index ? -1 : 0;
}

static void job_done(void *arg, const struct pdc_result *r)
{
	struct job *j = arg;
	j->done = true;
	j->res = *r;
}

static void report(const struct job *j)
{
	const struct pdc_result *r = &j->res;
	char s[1100];
	snprintf(s, sizeof(s), "%s", r->sentence);
	sanitize(s);
	if (r->err == 0 && r->status == PDC_OK) {
		if (!verbose)
			return;
		const struct pdc_info *i = &r->info;
		char fpr[65] = "-", name[256];
		if (i->key_fpr_len)
			hex(fpr, i->key_fpr, i->key_fpr_len);
		snprintf(name, sizeof(name), "%s", i->literal_name);
		sanitize(name);
		fprintf(stderr, "%s: %s: OK integrity=%s key=%s pk=%s cipher=%s%s%s in=%" PRIu64 " out=%" PRIu64
		        " literal=%c:\"%s\"\n", prog, j->name,
		        r->integrity == PDC_INTEGRITY_MDC ? "MDC" : r->integrity == PDC_INTEGRITY_AEAD ? "AEAD" : "NONE",
		        fpr, pdc_pk_name(i->pk_algo), pdc_sym_name(i->sym_algo), i->aead_algo ? "/" : "",
		        i->aead_algo ? pdc_aead_name(i->aead_algo) : "", r->bytes_in, r->bytes_out,
		        i->literal_format ? i->literal_format : '-', name);
		return;
	}
	if (r->err == 0)
		fprintf(stderr, "%s: %s: %s: %s\n", prog, j->name, pdc_status_name(r->status), s);
	else
		fprintf(stderr, "%s: %s: %s%s\n", prog, j->name, s,
		        j->wrote && !j->to_file && r->err != -EIO ?
		        " (not sent again: part of its plaintext had gone to standard output)" : "");
}

static char *output_name(const char *dir, const char *in)
{
	char *copy = strdup(in);
	if (!copy)
		die(EX_OSERR, "out of memory");
	char *base = basename(copy);
	size_t n = strlen(base);
	const char *suffix = ".out";
	static const char *const strip[] = { ".gpg", ".pgp", ".asc" };
	for (size_t i = 0; i < 3; i++)
		if (n > 4 && strcmp(base + n - 4, strip[i]) == 0) {
			base[n - 4] = 0;
			suffix = "";
			break;
		}
	char *out;
	if (asprintf(&out, "%s/%s%s", dir, base, suffix) < 0)
		die(EX_OSERR, "out of memory");
	free(copy);
	return out;
}

static bool is_dir(int fd)
{
	struct stat st;
	return fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
}

static int cmp_final_path(const void *a, const void *b)
{
	const struct job *x = *(const struct job *const *)a, *y = *(const struct job *const *)b;
	int c = strcmp(x->final_path, y->final_path);
	return c ? c : x < y ? -1 : x > y;
}

/* -o DIR a/x.gpg b/x.gpg: the second plaintext would replace the first.
 * Refused before anything is decrypted, naming the first such pair. */
static void refuse_same_outputs(struct job *jobs, int n)
{
	struct job **v = calloc((size_t)n, sizeof(*v));
	if (!v)
		die(EX_OSERR, "out of memory");
	for (int i = 0; i < n; i++)
		v[i] = &jobs[i];
	qsort(v, (size_t)n, sizeof(*v), cmp_final_path);
	const struct job *a = NULL, *b = NULL;
	for (int i = 1; i < n; i++)
		if (!strcmp(v[i - 1]->final_path, v[i]->final_path) && (!a || v[i - 1] < a))
			a = v[i - 1], b = v[i];
	free(v);
	if (a)
		die(EX_USAGE, "%s and %s would both be written to %s: decrypt them into different directories",
		    a->name, b->name, a->final_path);
}

/* The output file: unnamed (or under a temporary name) until the message
 * verified; then it becomes final_path (outfile.h). */
static int open_tmp(struct job *j)
{
	int r = pd_outfile_open(&j->out, j->final_path);
	if (r == -ENOMEM)
		die(EX_OSERR, "out of memory");
	if (r < 0) {
		fprintf(stderr, "%s: %s: cannot create a temporary file for %s: %s\n", prog, j->name, j->final_path,
		        strerror(-r));
		return -1;
	}
	j->to_file = true;
	j->out_fd = j->out.fd;
	return 0;
}

/* The request failed before it was sent: its output file goes. */
static void discard_tmp(struct job *j)
{
	if (!j->to_file)
		return;
	pd_outfile_discard(&j->out);
	j->out_fd = -1;
}

/* A job's output file, when there is one, is committed (fsync, then named
 * final_path) if code is 0, else thrown away.  Returns the exit code, with
 * why[] saying what failed when committing did. */
static int commit_tmp(struct job *j, int code, char *why, size_t n)
{
	if (!j->to_file)
		return code;
	j->out_fd = -1;
	if (code != 0) {
		pd_outfile_discard(&j->out);
		return code;
	}
	const char *what = "";
	int r = pd_outfile_commit(&j->out, &what);
	if (r < 0) {
		bool io = !strcmp(what, "fsync") || !strcmp(what, "close");
		code = io ? EX_IOERR : EX_CANTCREAT;
		snprintf(why, n, "%s %s: %s", !strcmp(what, "rename") ? "rename to" : what, j->final_path,
		         strerror(-r));
	}
	return code;
}

static int finish_job(struct job *j)
{
	int code;
	if (j->exit_code) {
		discard_tmp(j);
		return j->exit_code;
	}
	const struct pdc_result *r = &j->res;
	if (r->err == 0 && r->status == PDC_OK && !pdc_verified(r)) {
		j->res.status = PDC_ST_SED_REFUSED;
		snprintf(j->res.sentence, sizeof(j->res.sentence), "message has no integrity protection");
	}
	if (j->write_err) {
		code = EX_IOERR;
		snprintf(j->res.sentence, sizeof(j->res.sentence), "writing the plaintext failed: %s", strerror(-j->write_err));
		j->res.status = 0;
	} else {
		code = pdc_exit_code(r);
	}
	code = commit_tmp(j, code, j->res.sentence, sizeof(j->res.sentence));
	if (code == EX_IOERR || code == EX_CANTCREAT)
		j->res.err = -EIO; /* reported as a local failure */
	report(j);
	return code;
}

/* The password read from --password-file: wiped when the client is done
 * with it, and on every exit (die(), a failed connect, a fatal signal). */
static char *volatile password;

static void wipe_password(void)
{
	char *p = password;
	if (p)
		explicit_bzero(p, 1025);
}

static char *read_password(const char *path, size_t *ret_len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die(EX_NOINPUT, "cannot open password file %s: %s", path, strerror(errno));
	char *buf = calloc(1, 1025);
	if (!buf)
		die(EX_OSERR, "out of memory");
	password = buf;
	atexit(wipe_password);
	size_t n = 0;
	for (;;) {
		ssize_t r = read(fd, buf + n, 1024 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			die(EX_NOINPUT, "cannot read password file %s: %s", path, strerror(errno));
		if (r == 0 || (n += (size_t)r) == 1024)
			break;
	}
	close(fd);
	char *nl = memchr(buf, '\n', n);
	if (nl)
		n = (size_t)(nl - buf);
	else if (n == 1024)
		die(EX_USAGE, "password in %s is longer than 1024 octets", path);
	if (n && buf[n - 1] == '\r')
		n--;
	*ret_len = n;
	return buf;
}

/* --with-session-key FILE: ALGO:HEX, read whole (it is short). */
static void read_session_key(const char *path, uint8_t *ret_algo, uint8_t *key, size_t *ret_len)
{
	char buf[256];
	size_t n = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die(EX_NOINPUT, "cannot open session key file %s: %s", path, strerror(errno));
	for (;;) {
		ssize_t r = read(fd, buf + n, sizeof(buf) - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			explicit_bzero(buf, sizeof(buf));
			die(EX_NOINPUT, "cannot read session key file %s: %s", path, strerror(errno));
		}
		if (r == 0 || (n += (size_t)r) == sizeof(buf))
			break;
	}
	close(fd);
	int r = n < sizeof(buf) ? pdc_sk_parse(buf, n, ret_algo, key, ret_len) : -EINVAL;
	explicit_bzero(buf, sizeof(buf));
	if (r < 0)
		die(EX_USAGE, "session key file %s: not of the form ALGO:HEX (e.g. 9:0123...)", path);
}

/* --session-key-out FILE: the key of a verified message, mode 0600.  0, or
 * the exit code. */
static int write_session_key(const char *path, const struct pdc_result *r)
{
	char text[8 + 2 * PDC_SESSION_KEY_MAX];
	if (r->session_key_refused == PDC_SK_REFUSED_POLICY || !r->session_key_len) {
		fprintf(stderr, "%s: %s: %s\n", prog, path, r->session_key_refused == PDC_SK_REFUSED_POLICY ?
		        "the daemon does not give session keys to this client (allow-session-key-export)" :
		        "no session key: the message has no integrity protection");
		return r->session_key_refused == PDC_SK_REFUSED_POLICY ? EX_NOPERM : EX_DATAERR;
	}
	int n = pdc_sk_format(text, sizeof(text), r->session_key_algo, r->session_key, r->session_key_len);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int code = 0;
	if (fd < 0) {
		fprintf(stderr, "%s: cannot create %s: %s\n", prog, path, strerror(errno));
		code = EX_CANTCREAT;
	} else {
		text[n] = '\n';
		if (write_all(fd, (const uint8_t *)text, (size_t)n + 1) < 0 || close(fd) < 0) {
			fprintf(stderr, "%s: writing %s: %s\n", prog, path, strerror(errno));
			code = EX_IOERR;
		}
	}
	explicit_bzero(text, sizeof(text));
	return code;
}

struct opts {
	struct pdc_config cfg;
	const char *output;
	bool verified_only;
	const char *password_file;
	const char *sk_in_file, *sk_out_file; /* --with-session-key, --session-key-out */
	int status_fd;              /* --status-fd: gpg's status lines (gpgfmt.h), -1: none */
	const char *bind[PDC_MAX_BIND]; /* --bind: only keys bound to every one */
	size_t n_bind;
	long concurrency, requests, pipeline, threads;
	bool no_digest;           /* bench: lengths compared, no SHA-256 */
	bool json, bench_opts;
	bool mime, mime_opts;
	struct pd_mail_policy policy;
};

static int connect_or_die(const struct opts *o, struct pdc_conn **ret)
{
	struct pdc_result e;
	int r = pdc_connect(ret, &o->cfg, &e);
	if (r < 0) {
		sanitize(e.sentence);
		fprintf(stderr, "%s: %s\n", prog, e.sentence);
		exit(pdc_exit_code(&e));
	}
	return 0;
}

/* --status-fd: the daemon's keys, for DECRYPTION_KEY's primary fingerprint */
struct keylist {
	struct pdc_key *v;
	size_t n, cap;
};

static int keylist_add(void *arg, const struct pdc_key *k)
{
	struct keylist *l = arg;
	if (l->n == l->cap) {
		size_t nc = l->cap ? 2 * l->cap : 16;
		struct pdc_key *nv = nc < 65536 ? realloc(l->v, nc * sizeof(*nv)) : NULL;
		if (!nv)
			return 0;
		l->v = nv;
		l->cap = nc;
	}
	l->v[l->n++] = *k;
	l->v[l->n - 1].addresses = NULL; /* the callback's only */
	l->v[l->n - 1].addresses_len = 0;
	return 0;
}

static void keylist_done(void *arg, const struct pdc_result *r)
{
	(void)arg;
	(void)r;
}

static int cmd_decrypt(const struct opts *o, int nfiles, char **files)
{
	struct keylist keys = { 0 };
	static char *stdin_name[] = { "-" };
	if (nfiles == 0) {
		nfiles = 1;
		files = stdin_name;
	}
	bool to_dir = false;
	struct stat st;
	if (o->output && strcmp(o->output, "-") != 0 && stat(o->output, &st) == 0 && S_ISDIR(st.st_mode))
		to_dir = true;
	if (o->output && !to_dir && strcmp(o->output, "-") != 0 && nfiles > 1)
		die(EX_USAGE, "several FILEs need -o DIRECTORY (an existing directory) or standard output");
	struct job *jobs = calloc((size_t)nfiles, sizeof(*jobs));
	if (!jobs)
		die(EX_OSERR, "out of memory");
	pd_outfile_catch_signals(wipe_password);
	for (int i = 0; i < nfiles; i++) {
		bool is_stdin = strcmp(files[i], "-") == 0;
		if (to_dir && is_stdin)
			die(EX_USAGE, "-o DIRECTORY needs FILE names to name the outputs");
		jobs[i].name = is_stdin ? "(stdin)" : files[i];
		jobs[i].index = i;
		jobs[i].out_fd = STDOUT_FILENO;
		jobs[i].in_fd = -1;
		if (to_dir)
			jobs[i].final_path = output_name(o->output, files[i]);
	}
	if (to_dir)
		refuse_same_outputs(jobs, nfiles);
	size_t pwlen = 0;
	char *pw = o->password_file ? read_password(o->password_file, &pwlen) : NULL;
	bool pw_given = pw != NULL;
	uint8_t sk[PDC_SESSION_KEY_MAX], sk_algo = 0;
	size_t sk_len = 0;
	if ((o->sk_in_file || o->sk_out_file) && nfiles > 1)
		die(EX_USAGE, "--with-session-key and --session-key-out take one FILE");
	if (o->sk_in_file)
		read_session_key(o->sk_in_file, &sk_algo, sk, &sk_len);

	struct pdc_conn *c;
	connect_or_die(o, &c);
	if (o->status_fd >= 0)
		(void)pdc_submit_keys(c, keylist_add, keylist_done, &keys);
	for (int i = 0; i < nfiles; i++) {
		struct job *j = &jobs[i];
		if (strcmp(files[i], "-") == 0) {
			j->in_fd = STDIN_FILENO;
		} else {
			j->in_fd = open(files[i], O_RDONLY | O_CLOEXEC);
			if (j->in_fd < 0) {
				fprintf(stderr, "%s: %s: cannot open: %s\n", prog, files[i], strerror(errno));
				j->exit_code = EX_NOINPUT;
				continue;
			}
			if (is_dir(j->in_fd)) { /* it reads as empty input: a bounce for "bad data" */
				fprintf(stderr, "%s: %s is a directory: name the message files in it\n", prog, files[i]);
				j->exit_code = EX_NOINPUT;
				continue;
			}
		}
		if (!to_dir && o->output && strcmp(o->output, "-") != 0)
			j->final_path = strdup(o->output);
		if (j->final_path && open_tmp(j) < 0) {
			j->exit_code = EX_CANTCREAT;
			continue;
		}
		struct pdc_decrypt d = {
			.flags = (o->verified_only ? PDC_VERIFIED_ONLY : 0) | (o->sk_out_file ? PDC_WANT_SESSION_KEY : 0),
			.password = pw, .password_len = pwlen,
			.session_key = sk_len ? sk : NULL, .session_key_len = sk_len, .session_key_algo = sk_algo,
			.in_fd = j->in_fd,
			.on_data = job_data, .on_done = job_done, .arg = j,
			.on_retry = job_retry,
			.bind = o->bind, .n_bind = o->n_bind,
		};
		int r = pdc_submit_decrypt(c, &d);
		if (r < 0) {
			fprintf(stderr, "%s: %s: %s\n", prog, j->name, strerror(-r));
			j->exit_code = EX_TEMPFAIL;
		}
	}
	(void)pdc_run(c);
	pdc_close(c);
	explicit_bzero(sk, sizeof(sk));
	if (pw) {
		wipe_password();
		password = NULL;
		free(pw);
	}
	int code = 0;
	for (int i = 0; i < nfiles; i++) {
		struct job *j = &jobs[i];
		if (o->status_fd >= 0) {
			struct pdc_gpg_status sl = { .fd = o->status_fd };
			struct pdc_gpg_outcome oc = { .r = &j->res, .keys = keys.v, .n_keys = keys.n,
			                              .password_given = pw_given, .session_key_given = sk_len > 0 };
			if (j->exit_code == 0)
				(void)pdc_gpg_status_decrypt(&sl, &oc);
		}
		int k = finish_job(j);
		if (k == 0 && o->sk_out_file)
			k = write_session_key(o->sk_out_file, &j->res);
		explicit_bzero(j->res.session_key, sizeof(j->res.session_key));
		if (k && !code)
			code = k;
		if (j->in_fd > STDIN_FILENO)
			close(j->in_fd);
		pd_outfile_free(&j->out);
		free(j->final_path);
	}
	free(jobs);
	free(keys.v);
	return code;
}

/* ------------------------------------------------------------------ */
/* ping, stats, keys */

static void simple_done(void *arg, const struct pdc_result *r)
{
	*(struct pdc_result *)arg = *r;
}

static int simple_finish(const struct pdc_result *r)
{
	if (r->err == 0 && r->status == PDC_OK)
		return 0;
	char s[1100];
	snprintf(s, sizeof(s), "%s", r->sentence);
	sanitize(s);
	fprintf(stderr, "%s: %s%s%s\n", prog, r->err ? "" : pdc_status_name(r->status), r->err ? "" : ": ", s);
	return pdc_exit_code(r);
}

static int cmd_ping(const struct opts *o)
{
	struct pdc_conn *c;
	int64_t t0 = now_ns();
	connect_or_die(o, &c);
	int64_t t1 = now_ns();
	struct pdc_result r;
	if (pdc_submit_ping(c, simple_done, &r) < 0)
		die(EX_TEMPFAIL, "cannot send PING");
	pdc_run(c);
	int64_t t2 = now_ns();
	const struct pdc_server *s = pdc_server(c);
	int code = simple_finish(&r);
	if (code == 0) {
		char sw[65];
		snprintf(sw, sizeof(sw), "%s", s->software[0] ? s->software : "pgpdecd");
		sanitize(sw);
		printf("pong from %s (protocol %u): round trip %.3f ms, connect+handshake %.3f ms; "
		       "limits: frame %" PRIu32 ", message %" PRIu64 ", in flight %" PRIu32 "\n",
		       sw, s->version, (double)(t2 - t1) / 1e6, (double)(t1 - t0) / 1e6, s->max_frame, s->max_message,
		       s->max_inflight);
	}
	pdc_close(c);
	return code;
}

static int stats_data(void *arg, const uint8_t *p, size_t n)
{
	(void)arg;
	return write_all(STDOUT_FILENO, p, n);
}

static int cmd_stats(const struct opts *o)
{
	struct pdc_conn *c;
	connect_or_die(o, &c);
	struct pdc_result r;
	if (pdc_submit_stats(c, stats_data, simple_done, &r) < 0)
		die(EX_TEMPFAIL, "cannot send STATS");
	pdc_run(c);
	pdc_close(c);
	return simple_finish(&r);
}

static int key_line(void *arg, const struct pdc_key *k)
{
	(void)arg;
	char fpr[65], pfpr[65] = "-", date[32] = "-";
	hex(fpr, k->fpr, k->fpr_len);
	if (k->primary_fpr_len)
		hex(pfpr, k->primary_fpr, k->primary_fpr_len);
	time_t t = (time_t)k->created;
	struct tm tm;
	if (gmtime_r(&t, &tm))
		strftime(date, sizeof(date), "%Y-%m-%d", &tm);
	char curve[24];
	snprintf(curve, sizeof(curve), "%s", k->curve);
	sanitize(curve);
	printf("%s v%u %s%s%s %u bits created %s primary %s", fpr, k->version, pdc_pk_name(k->pk_algo),
	       curve[0] ? "/" : "", curve, k->bits, date, pfpr);
	/* the addresses --bind and recipient-binding match: sanitized, they
	 * come from the daemon's key files */
	for (size_t o = 0; o < k->addresses_len; o += strlen(k->addresses + o) + 1) {
		char a[PDC_ADDRESS_MAX + 1];
		snprintf(a, sizeof(a), "%s", k->addresses + o);
		sanitize(a);
		printf("%s%s", o ? "," : " bound ", a);
	}
	putchar('\n');
	return 0;
}

static int cmd_keys(const struct opts *o)
{
	struct pdc_conn *c;
	connect_or_die(o, &c);
	struct pdc_result r;
	if (pdc_submit_keys(c, key_line, simple_done, &r) < 0)
		die(EX_TEMPFAIL, "cannot send KEYS");
	pdc_run(c);
	pdc_close(c);
	return simple_finish(&r);
}

/* ------------------------------------------------------------------ */
/* bench */

struct bench;

struct slot {
	struct bench *b;
	struct pdc_conn *c;
	int64_t t0;
	uint64_t out;
	int file;
	gnutls_hash_hd_t h;       /* SHA-256 of this request's plaintext */
	/* Once its file has a reference plaintext (below), a plaintext is
	 * compared with it as it comes, not hashed: on a small machine the
	 * client shares the cores with the daemon it measures, and SHA-256
	 * of every plaintext costs more than the comparison. */
	const uint8_t *ref;       /* the file's reference, or NULL: hashed */
	size_t ref_len;
	bool differs;             /* a compared octet differed */
	/* Hashed, and this slot is its file's keeper (one at a time, see
	 * keepers): the plaintext is copied too, while it fits REF_MAX, to
	 * become the reference. */
	uint8_t *keep;            /* REF_MAX octets while the slot keeps, else NULL */
	size_t keep_len;
	bool keep_over;
};

/* Plaintexts up to this long become their file's reference. */
#define REF_MAX (256 * 1024)

struct bench {
	const struct opts *o;
	uint8_t **data;
	size_t *len;
	int nfiles;
	long total;
	atomic_long next;         /* requests handed out */
	atomic_long ok, failed;
	atomic_ullong bytes_in, bytes_out;
	double *lat_ms;           /* per completed request */
	atomic_long n_lat;
	atomic_int first_fail_code;
	char first_fail[1100];
	pthread_mutex_t fail_lock;
	/* Every plaintext of a file must be the same: the first one's digest,
	 * and how many differed. */
	uint8_t (*digest)[32];
	uint64_t *plain_len;      /* the first plaintext's length, per file */
	bool *have_digest;
	uint8_t **ref;            /* the first plaintext itself, when it fit REF_MAX (fail_lock) */
	int *keepers;             /* per file, 1 while a slot keeps a copy (atomic) */
	atomic_long mismatched;
	struct pdc_conn **conns;
	long n_conns;
};

static int bench_data(void *arg, const uint8_t *p, size_t n)
{
	struct slot *s = arg;
	if (s->b->o->no_digest) {
		s->out += n;
		return 0;
	}
	if (s->ref) {
		if (s->out > s->ref_len || n > s->ref_len - s->out || memcmp(s->ref + s->out, p, n) != 0)
			s->differs = true;
		s->out += n;
		return 0;
	}
	gnutls_hash(s->h, p, n);
	if (s->keep && !s->keep_over && n <= REF_MAX - s->keep_len) {
		memcpy(s->keep + s->keep_len, p, n);
		s->keep_len += n;
	} else {
		s->keep_over = true;
	}
	s->out += n;
	return 0;
}

/* The slot's request is over: a keeper lets go (its copy freed), so that
 * another slot may keep one if no reference came of it. */
static void keep_release(struct slot *s)
{
	if (!s->keep)
		return;
	free(s->keep);
	s->keep = NULL;
	__atomic_store_n(&s->b->keepers[s->file], 0, __ATOMIC_RELEASE);
}

/* At submission: the file has no reference yet and its first plaintext
 * (if one came) fit REF_MAX, and no other slot keeps a copy: this one does.
 * So at most one REF_MAX buffer per file exists at a time. */
static void keep_claim(struct slot *s)
{
	struct bench *b = s->b;
	int f = s->file, zero = 0;
	s->keep_len = 0;
	s->keep_over = false;
	if (b->o->no_digest || s->ref)
		return;
	if (__atomic_load_n(&b->have_digest[f], __ATOMIC_ACQUIRE) && b->plain_len[f] > REF_MAX)
		return;
	if (!__atomic_compare_exchange_n(&b->keepers[f], &zero, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return;
	s->keep = malloc(REF_MAX);
	if (!s->keep)
		__atomic_store_n(&b->keepers[f], 0, __ATOMIC_RELEASE);
}

/* Sent again (retry): what came of the first attempt is forgotten. */
static int bench_retry(void *arg)
{
	struct slot *s = arg;
	uint8_t dummy[32];
	s->out = 0;
	s->differs = false;
	s->keep_len = 0;
	s->keep_over = false;
	gnutls_hash_output(s->h, dummy); /* resets the running hash */
	return 0;
}

static void bench_done(void *arg, const struct pdc_result *r);

static void bench_submit(struct slot *s)
{
	struct bench *b = s->b;
	long i = atomic_fetch_add(&b->next, 1);
	if (i >= b->total)
		return;
	int f = (int)(i % b->nfiles);
	struct pdc_decrypt d = {
		.flags = b->o->verified_only ? PDC_VERIFIED_ONLY : 0,
		.in_fd = -1, .in_buf = b->data[f], .in_len = b->len[f],
		.on_data = bench_data, .on_done = bench_done, .on_retry = bench_retry, .arg = s,
	};
	s->out = 0;
	s->file = f;
	s->differs = false;
	/* the reference, once set, never changes: an acquire read pairs with
	 * the release store in check_hashed() */
	s->ref = __atomic_load_n(&b->ref[f], __ATOMIC_ACQUIRE);
	s->ref_len = s->ref ? (size_t)b->plain_len[f] : 0;
	keep_claim(s);
	s->t0 = now_ns();
	int r = pdc_submit_decrypt(s->c, &d);
	if (r < 0) {
		/* The connection is gone: this request fails and the slot stops (no
		 * recursion through bench_done); live connections take the rest. */
		keep_release(s);
		atomic_fetch_add(&b->failed, 1);
		int expect = 0;
		atomic_compare_exchange_strong(&b->first_fail_code, &expect, EX_TEMPFAIL);
	}
}

/* A plaintext hashed (its file had no reference when it was sent): the
 * first of its file gives the digest, and the reference when it fit; the
 * others must match.  False when it differs. */
static bool check_hashed(struct slot *s)
{
	struct bench *b = s->b;
	uint8_t dg[32];
	bool same = true;
	gnutls_hash_output(s->h, dg);
	pthread_mutex_lock(&b->fail_lock);
	if (!b->have_digest[s->file]) {
		memcpy(b->digest[s->file], dg, 32);
		b->plain_len[s->file] = s->out;
		__atomic_store_n(&b->have_digest[s->file], true, __ATOMIC_RELEASE);
	} else {
		same = b->plain_len[s->file] == s->out && memcmp(b->digest[s->file], dg, 32) == 0;
	}
	/* the keeper's copy, when it matches the first digest, is the reference */
	if (same && s->keep && !s->keep_over && !b->ref[s->file]) {
		uint8_t *ref = malloc(s->keep_len ? s->keep_len : 1);
		if (ref) {
			memcpy(ref, s->keep, s->keep_len);
			__atomic_store_n(&b->ref[s->file], ref, __ATOMIC_RELEASE);
		}
	}
	pthread_mutex_unlock(&b->fail_lock);
	return same;
}

static void bench_done(void *arg, const struct pdc_result *r)
{
	struct slot *s = arg;
	struct bench *b = s->b;
	double ms = (double)(now_ns() - s->t0) / 1e6;
	long k = atomic_fetch_add(&b->n_lat, 1);
	if (k < b->total)
		b->lat_ms[k] = ms;
	if (r->err == 0 && r->status == PDC_OK) {
		if (s->ref ? s->differs || s->out != s->ref_len : !check_hashed(s))
			atomic_fetch_add(&b->mismatched, 1);
		atomic_fetch_add(&b->ok, 1);
		atomic_fetch_add(&b->bytes_in, r->bytes_in);
		atomic_fetch_add(&b->bytes_out, s->out);
	} else {
		uint8_t dummy[32];
		gnutls_hash_output(s->h, dummy); /* resets it for the slot's next request */
		atomic_fetch_add(&b->failed, 1);
		int expect = 0;
		if (atomic_compare_exchange_strong(&b->first_fail_code, &expect, pdc_exit_code(r) ? pdc_exit_code(r) : 75)) {
			pthread_mutex_lock(&b->fail_lock);
			snprintf(b->first_fail, sizeof(b->first_fail), "%s%s%s", r->err ? "" : pdc_status_name(r->status),
			         r->err ? "" : ": ", r->sentence);
			pthread_mutex_unlock(&b->fail_lock);
		}
	}
	keep_release(s);
	/* A connection that failed for good (retries spent) takes no more:
	 * the requests never handed out count as failed. */
	if (r->err)
		return;
	bench_submit(s);
}

struct bench_thread {
	struct bench *b;
	long first, count;       /* connections driven by this thread */
	struct slot *slots;
};

static void *bench_thread(void *arg)
{
	struct bench_thread *t = arg;
	struct bench *b = t->b;
	long per = b->o->pipeline;
	for (long i = 0; i < t->count * per; i++)
		bench_submit(&t->slots[i]);
	struct pollfd *pfd = calloc((size_t)t->count, sizeof(*pfd));
	long *idx = calloc((size_t)t->count, sizeof(*idx));
	if (!pfd || !idx)
		die(EX_OSERR, "out of memory");
	for (;;) {
		nfds_t n = 0;
		for (long i = 0; i < t->count; i++) {
			struct pdc_conn *c = b->conns[t->first + i];
			if (!c || pdc_pending(c) == 0)
				continue;
			short ev = pdc_events(c);
			if (!ev) {
				/* The connection ended or its server is stopping: a new
				 * one (another target), with what may be sent again. */
				if (pdc_recover(c) < 0 || pdc_pending(c) == 0 || !(ev = pdc_events(c)))
					continue;
			}
			pfd[n].fd = pdc_fd(c);
			pfd[n].events = ev;
			pfd[n].revents = 0;
			idx[n++] = t->first + i;
		}
		if (n == 0)
			break;
		/* Requests waiting out a backoff (OVERLOADED) go when it ends. */
		int wake = -1;
		for (nfds_t i = 0; i < n; i++) {
			int w = pdc_backoff_ms(b->conns[idx[i]]);
			if (w >= 0 && (wake < 0 || w < wake))
				wake = w;
		}
		int tmo = b->o->cfg.timeout_ms > 0 ? b->o->cfg.timeout_ms : -1;
		bool backoff = wake >= 0 && (tmo < 0 || wake < tmo);
		int r = poll(pfd, n, backoff ? wake : tmo);
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0 && backoff) {
			for (nfds_t i = 0; i < n; i++)
				(void)pdc_process(b->conns[idx[i]], 0);
			continue;
		}
		for (nfds_t i = 0; i < n; i++) {
			/* Timeout: fail every connection that still waits (poll returned 0). */
			if (r == 0) {
				pdc_close(b->conns[idx[i]]);
				b->conns[idx[i]] = NULL;
				continue;
			}
			if (pfd[i].revents)
				(void)pdc_process(b->conns[idx[i]], pfd[i].revents);
		}
		if (r == 0)
			break;
	}
	free(pfd);
	free(idx);
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(const double *v, long n, double p)
{
	if (n == 0)
		return 0;
	long k = (long)ceil(p * (double)n) - 1; /* nearest rank */
	if (k < 0) k = 0;
	if (k >= n) k = n - 1;
	return v[k];
}

static void load_file(const char *path, uint8_t **ret, size_t *ret_len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		die(EX_NOINPUT, "%s: cannot open: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode) || st.st_size > (1 << 30))
		die(EX_USAGE, "%s: bench needs regular files of at most 1 GiB", path);
	uint8_t *p = malloc((size_t)st.st_size + 1);
	if (!p)
		die(EX_OSERR, "out of memory");
	size_t n = 0;
	while (n < (size_t)st.st_size) {
		ssize_t r = read(fd, p + n, (size_t)st.st_size - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			die(EX_NOINPUT, "%s: read failed", path);
		n += (size_t)r;
	}
	close(fd);
	*ret = p;
	*ret_len = n;
}

static int cmd_bench(const struct opts *o, int nfiles, char **files)
{
	if (nfiles == 0)
		die(EX_USAGE, "bench needs at least one FILE");
	if (o->concurrency < 1 || o->requests < 1 || o->pipeline < 1 || o->threads < 1)
		die(EX_USAGE, "bench: --concurrency, --requests, --pipeline and --threads must be positive");
	struct bench b = { .o = o, .nfiles = nfiles, .total = o->requests };
	pthread_mutex_init(&b.fail_lock, NULL);
	b.data = calloc((size_t)nfiles, sizeof(*b.data));
	b.len = calloc((size_t)nfiles, sizeof(*b.len));
	b.lat_ms = calloc((size_t)o->requests, sizeof(double));
	b.digest = calloc((size_t)nfiles, sizeof(*b.digest));
	b.have_digest = calloc((size_t)nfiles, sizeof(*b.have_digest));
	b.plain_len = calloc((size_t)nfiles, sizeof(*b.plain_len));
	b.ref = calloc((size_t)nfiles, sizeof(*b.ref));
	b.keepers = calloc((size_t)nfiles, sizeof(*b.keepers));
	if (!b.data || !b.len || !b.lat_ms || !b.digest || !b.have_digest || !b.plain_len || !b.ref || !b.keepers)
		die(EX_OSERR, "out of memory");
	for (int i = 0; i < nfiles; i++)
		load_file(files[i], &b.data[i], &b.len[i]);
	struct opts oo = *o;
	oo.pipeline = o->pipeline > o->concurrency ? o->concurrency : o->pipeline;
	b.o = &oo;
	b.n_conns = (o->concurrency + oo.pipeline - 1) / oo.pipeline;
	long per = oo.pipeline;
	b.conns = calloc((size_t)b.n_conns, sizeof(*b.conns));
	struct slot *slots = calloc((size_t)(b.n_conns * per), sizeof(*slots));
	if (!b.conns || !slots)
		die(EX_OSERR, "out of memory");
	/* With several targets, connection i starts at target i mod n: the
	 * load is spread, and each fails over to the others. */
	size_t nt_ = oo.cfg.n_targets;
	struct pdc_target *rot = nt_ > 1 ? calloc((size_t)b.n_conns * nt_, sizeof(*rot)) : NULL;
	if (nt_ > 1 && !rot)
		die(EX_OSERR, "out of memory");
	for (long i = 0; i < b.n_conns; i++) {
		struct opts oc = oo;
		if (rot) {
			for (size_t k = 0; k < nt_; k++)
				rot[(size_t)i * nt_ + k] = oo.cfg.targets[((size_t)i + k) % nt_];
			oc.cfg.targets = rot + (size_t)i * nt_;
		}
		connect_or_die(&oc, &b.conns[i]);
		for (long k = 0; k < per; k++)
		{
			slots[i * per + k] = (struct slot){ .b = &b, .c = b.conns[i] };
			if (gnutls_hash_init(&slots[i * per + k].h, GNUTLS_DIG_SHA256) < 0)
				die(EX_OSERR, "cannot set up SHA-256");
		}
	}
	long nt = o->threads > b.n_conns ? b.n_conns : o->threads;
	pthread_t *th = calloc((size_t)nt, sizeof(*th));
	struct bench_thread *bt = calloc((size_t)nt, sizeof(*bt));
	if (!th || !bt)
		die(EX_OSERR, "out of memory");
	int64_t t0 = now_ns();
	long first = 0;
	for (long i = 0; i < nt; i++) {
		long cnt = b.n_conns / nt + (i < b.n_conns % nt);
		bt[i] = (struct bench_thread){ .b = &b, .first = first, .count = cnt, .slots = slots + first * per };
		first += cnt;
		if (pthread_create(&th[i], NULL, bench_thread, &bt[i]) != 0)
			die(EX_OSERR, "cannot create a thread");
	}
	for (long i = 0; i < nt; i++)
		pthread_join(th[i], NULL);
	int64_t t1 = now_ns();
	unsigned long resent = 0;
	for (long i = 0; i < b.n_conns; i++) {
		if (b.conns[i])
			resent += pdc_resent(b.conns[i]);
		pdc_close(b.conns[i]);
	}
	for (long i = 0; i < b.n_conns * per; i++) {
		gnutls_hash_deinit(slots[i].h, NULL);
		free(slots[i].keep);
	}
	long mismatched = atomic_load(&b.mismatched);
	char digests[64 * 70 + 8] = "";
	for (int f = 0, off = 0; f < nfiles && off < (int)sizeof(digests) - 72; f++) {
		char hx[65] = "";
		if (b.have_digest[f] && !o->no_digest)
			hex(hx, b.digest[f], 32);
		off += snprintf(digests + off, sizeof(digests) - (size_t)off, "%s\"%s\"", f ? "," : "", hx);
	}

	long n = atomic_load(&b.n_lat);
	if (n > b.total)
		n = b.total;
	long ok = atomic_load(&b.ok), failed = atomic_load(&b.failed);
	long lost = b.total - ok - failed; /* never answered (timeout) */
	qsort(b.lat_ms, (size_t)n, sizeof(double), cmp_double);
	double secs = (double)(t1 - t0) / 1e9, mean = 0;
	for (long i = 0; i < n; i++)
		mean += b.lat_ms[i];
	mean = n ? mean / (double)n : 0;
	double mps = (double)ok / secs;
	double mb_in = (double)atomic_load(&b.bytes_in) / 1e6 / secs, mb_out = (double)atomic_load(&b.bytes_out) / 1e6 / secs;
	if (o->json) {
		printf("{\"requests\":%ld,\"ok\":%ld,\"failed\":%ld,\"concurrency\":%ld,\"connections\":%ld,"
		       "\"pipeline\":%ld,\"threads\":%ld,\"elapsed_s\":%.6f,\"msgs_per_s\":%.2f,"
		       "\"mb_per_s_in\":%.4f,\"mb_per_s_out\":%.4f,\"latency_ms\":{\"p50\":%.3f,\"p95\":%.3f,"
		       "\"p99\":%.3f,\"max\":%.3f,\"mean\":%.3f},\"resent\":%lu,\"mismatched\":%ld,"
		       "\"digest\":%s,\"plaintext_sha256\":[%s]}\n",
		       b.total, ok, failed + lost, o->concurrency, b.n_conns, per, nt, secs, mps, mb_in, mb_out,
		       pct(b.lat_ms, n, 0.50), pct(b.lat_ms, n, 0.95), pct(b.lat_ms, n, 0.99), n ? b.lat_ms[n - 1] : 0, mean,
		       resent, mismatched, o->no_digest ? "false" : "true", digests);
	} else {
		printf("requests %ld: ok %ld, failed %ld; concurrency %ld (%ld connections x %ld in flight, %ld threads)\n",
		       b.total, ok, failed + lost, o->concurrency, b.n_conns, per, nt);
		printf("elapsed %.3f s; throughput %.1f msg/s, %.3f MB/s ciphertext, %.3f MB/s plaintext\n", secs, mps,
		       mb_in, mb_out);
		printf("latency ms: p50 %.3f  p95 %.3f  p99 %.3f  max %.3f  mean %.3f\n", pct(b.lat_ms, n, 0.50),
		       pct(b.lat_ms, n, 0.95), pct(b.lat_ms, n, 0.99), n ? b.lat_ms[n - 1] : 0, mean);
		printf("sent again %lu; plaintexts differing from the first of their file %ld%s\n", resent, mismatched,
		       o->no_digest ? " (in length: --no-digest)" : "");
	}
	int code = 0;
	if (mismatched) {
		fprintf(stderr, "%s: bench: %ld plaintexts differ from the first plaintext of the same file\n", prog,
		        mismatched);
		code = EX_SOFTWARE;
	}
	if (failed + lost) {
		code = atomic_load(&b.first_fail_code);
		if (!code)
			code = EX_TEMPFAIL;
		sanitize(b.first_fail);
		fprintf(stderr, "%s: bench: %ld of %ld requests failed; first: %s\n", prog, failed + lost, b.total,
		        b.first_fail[0] ? b.first_fail : "no reply (timeout)");
	}
	for (int i = 0; i < nfiles; i++)
		free(b.data[i]);
	free(b.data);
	free(b.len);
	free(b.lat_ms);
	free(b.digest);
	free(b.have_digest);
	free(b.plain_len);
	for (int i = 0; i < nfiles; i++)
		free(b.ref[i]);
	free(b.ref);
	free(b.keepers);
	free(rot);
	free(b.conns);
	free(slots);
	free(th);
	free(bt);
	pthread_mutex_destroy(&b.fail_lock);
	return code;
}

/* ------------------------------------------------------------------ */

static long num(const char *opt, const char *s, long min, long max)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || !*s || *end || v < min || v > max)
		die(EX_USAGE, "%s: not a number in %ld..%ld: %s", opt, min, max, s);
	return v;
}

enum {
	O_TLS_CA = 256, O_TLS_CERT, O_TLS_KEY, O_TLS_NAME, O_TLS_PIN, O_NO_TLS, O_VERIFIED, O_PWFILE,
	O_CONC, O_REQS, O_PIPE, O_THREADS, O_JSON, O_NO_DIGEST,
	O_MIME, O_ON_FAILURE, O_ON_NO_KEY, O_HP, O_KEEP_ORIG, O_SPOOL, O_MAX_PLAIN, O_NO_RETRY, O_SK_IN, O_SK_OUT, O_STATUS_FD, O_BIND,
};

/* --mime: one whole mail through the MIME decryptor (mail/pdmail.c). */
static int cmd_mime(const struct opts *o, int nfiles, char **files)
{
	if (nfiles > 1)
		die(EX_USAGE, "--mime takes one FILE: one message");
	const char *file = nfiles ? files[0] : "-";
	struct job *j = calloc(1, sizeof(*j));
	if (!j)
		die(EX_OSERR, "out of memory");
	j->name = strcmp(file, "-") == 0 ? "(stdin)" : file;
	j->out_fd = STDOUT_FILENO;
	j->in_fd = STDIN_FILENO;
	if (strcmp(file, "-") != 0) {
		j->in_fd = open(file, O_RDONLY | O_CLOEXEC);
		if (j->in_fd < 0)
			die(EX_NOINPUT, "%s: cannot open: %s", file, strerror(errno));
		if (is_dir(j->in_fd))
			die(EX_NOINPUT, "%s is a directory: name the mail file", file);
	}
	struct stat st;
	if (o->output && strcmp(o->output, "-") != 0) {
		if (stat(o->output, &st) == 0 && S_ISDIR(st.st_mode))
			die(EX_USAGE, "--mime -o takes a file name, not a directory");
		j->final_path = strdup(o->output);
		if (!j->final_path)
			die(EX_OSERR, "out of memory");
		pd_outfile_catch_signals(wipe_password);
	}
	int code = 0;
	char why[128] = "";
	if (j->final_path && open_tmp(j) < 0) {
		code = EX_CANTCREAT; /* open_tmp said why */
		goto out;
	}
	pd_mail_global_init();
	struct pd_mail *m;
	if (pd_mail_new(&m, &o->cfg, &o->policy) < 0 || pd_mail_set_bind(m, o->bind, o->n_bind) < 0)
		die(EX_OSERR, "out of memory");
	struct pd_mail_report rep;
	int err = pd_mail_process(m, j->in_fd, j->out_fd, &rep);
	m = pd_mail_free(m);
	if (err < 0) {
		code = err == -EINVAL ? EX_DATAERR : EX_TEMPFAIL;
		snprintf(why, sizeof(why), "%s", err == -EINVAL ? "not a mail message" : strerror(-err));
	} else if (rep.verdict == PD_MAIL_WRITTEN || rep.verdict == PD_MAIL_HOLD) {
		code = 0;
		snprintf(why, sizeof(why), "%s", pd_mail_outcome_name(rep.outcome));
	} else if (rep.verdict == PD_MAIL_TEMPFAIL && rep.outcome == PD_MAIL_UNAVAILABLE &&
	           pdc_exit_code(&(struct pdc_result){ .err = rep.err }) == EX_CONFIG) {
		/* our own settings (socket path, TLS files): retrying cannot help */
		code = EX_CONFIG;
		snprintf(why, sizeof(why), "not decrypted: a setting of the client cannot work (the same options "
		         "with ping say which)");
	} else {
		code = rep.verdict == PD_MAIL_TEMPFAIL ? EX_TEMPFAIL : rep.n_failed ? EX_DATAERR : EX_UNAVAILABLE;
		pd_mail_reason(&rep, why, sizeof(why));
	}
	int committed = commit_tmp(j, code, why, sizeof(why));
	if (committed != code) {
		/* Committing -o failed: a local failure (fsync: try again later),
		 * named by the final path, never the temporary one. */
		code = committed == EX_IOERR ? EX_TEMPFAIL : committed;
		snprintf(why, sizeof(why), "cannot write %s", j->final_path);
	}
	/* One line: what pipe(8) puts in a bounce or the log.  The status
	 * name only, never the engine's sentence or a path of ours. */
	if (code != 0)
		fprintf(stderr, "%s: %s\n", prog, why);
	else if (verbose)
		fprintf(stderr, "%s: %s: %s; pieces=%u decrypted=%u no-key=%u failed=%u embedded=%u\n", prog,
		        j->name, why, rep.n_pieces, rep.n_decrypted, rep.n_no_key, rep.n_failed, rep.n_embedded);
out:
	if (j->in_fd > STDERR_FILENO)
		close(j->in_fd);
	free(j->final_path);
	pd_outfile_free(&j->out);
	free(j);
	return code;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "connect", required_argument, NULL, 'c' },
		{ "output", required_argument, NULL, 'o' },
		{ "timeout", required_argument, NULL, 't' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ "tls-ca", required_argument, NULL, O_TLS_CA },
		{ "tls-cert", required_argument, NULL, O_TLS_CERT },
		{ "tls-key", required_argument, NULL, O_TLS_KEY },
		{ "tls-server-name", required_argument, NULL, O_TLS_NAME },
		{ "tls-pin", required_argument, NULL, O_TLS_PIN },
		{ "no-tls", no_argument, NULL, O_NO_TLS },
		{ "verified-only", no_argument, NULL, O_VERIFIED },
		{ "password-file", required_argument, NULL, O_PWFILE },
		{ "concurrency", required_argument, NULL, O_CONC },
		{ "requests", required_argument, NULL, O_REQS },
		{ "pipeline", required_argument, NULL, O_PIPE },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "json", no_argument, NULL, O_JSON },
		{ "no-digest", no_argument, NULL, O_NO_DIGEST },
		{ "mime", no_argument, NULL, O_MIME },
		{ "on-failure", required_argument, NULL, O_ON_FAILURE },
		{ "on-no-key", required_argument, NULL, O_ON_NO_KEY },
		{ "protected-headers", required_argument, NULL, O_HP },
		{ "keep-original", no_argument, NULL, O_KEEP_ORIG },
		{ "spool-dir", required_argument, NULL, O_SPOOL },
		{ "max-plaintext", required_argument, NULL, O_MAX_PLAIN },
		{ "no-retry", no_argument, NULL, O_NO_RETRY },
		{ "with-session-key", required_argument, NULL, O_SK_IN },
		{ "session-key-out", required_argument, NULL, O_SK_OUT },
		{ "status-fd", required_argument, NULL, O_STATUS_FD },
		{ "bind", required_argument, NULL, O_BIND },
		{ 0 },
	};
	struct opts o = { .concurrency = 1, .requests = 100, .pipeline = 1, .threads = 1, .status_fd = -1 };
	pd_mail_policy_default(&o.policy);
	o.cfg.software = "pgpdecd-client/" PD_VERSION;
	long timeout_s = 60;
	enum { MAX_TARGETS = 16 };
	const char *hostports[MAX_TARGETS], *sockets[MAX_TARGETS];
	size_t n_hostports = 0, n_sockets = 0;
	static struct pdc_target targets[MAX_TARGETS];
	char *hps[MAX_TARGETS] = { 0 };
	bool tls_opt = false;
	int ch;
	while ((ch = getopt_long(argc, argv, "s:c:o:t:vhV", lo, NULL)) != -1) {
		switch (ch) {
		case 's':
			if (n_sockets == MAX_TARGETS)
				die(EX_USAGE, "at most %d --socket options", MAX_TARGETS);
			sockets[n_sockets++] = optarg;
			break;
		case 'c':
			if (n_hostports == MAX_TARGETS)
				die(EX_USAGE, "at most %d --connect options", MAX_TARGETS);
			hostports[n_hostports++] = optarg;
			break;
		case O_NO_RETRY: o.cfg.no_retry = true; break;
		case 'o': o.output = optarg; break;
		case 't': timeout_s = num("--timeout", optarg, 0, 86400); break;
		case 'v': verbose = 1; break;
		case 'h': usage_text(stdout); return 0;
		case 'V': printf("pgpdecd-client %s (protocol 1)\n", PD_VERSION); return 0;
		case O_TLS_CA: o.cfg.tls_ca = optarg; tls_opt = true; break;
		case O_TLS_CERT: o.cfg.tls_cert = optarg; tls_opt = true; break;
		case O_TLS_KEY: o.cfg.tls_key = optarg; tls_opt = true; break;
		case O_TLS_NAME: o.cfg.tls_server_name = optarg; tls_opt = true; break;
		case O_TLS_PIN: o.cfg.tls_pin = optarg; tls_opt = true; break;
		case O_NO_TLS: o.cfg.no_tls = true; break;
		case O_VERIFIED: o.verified_only = true; break;
		case O_PWFILE: o.password_file = optarg; break;
		case O_SK_IN: o.sk_in_file = optarg; break;
		case O_SK_OUT: o.sk_out_file = optarg; break;
		case O_STATUS_FD: o.status_fd = (int)num("--status-fd", optarg, 0, 1 << 20); break;
		case O_BIND:
			if (o.n_bind == PDC_MAX_BIND)
				die(EX_USAGE, "at most %d --bind options", PDC_MAX_BIND);
			if (!pdc_bind_value_ok(optarg))
				die(EX_USAGE, "--bind: expected local@domain or @domain, got %s", optarg);
			o.bind[o.n_bind++] = optarg;
			break;
		case O_CONC: o.concurrency = num("--concurrency", optarg, 1, 100000); o.bench_opts = true; break;
		case O_REQS: o.requests = num("--requests", optarg, 1, 100000000); o.bench_opts = true; break;
		case O_PIPE: o.pipeline = num("--pipeline", optarg, 1, 100000); o.bench_opts = true; break;
		case O_THREADS: o.threads = num("--threads", optarg, 1, 1024); o.bench_opts = true; break;
		case O_JSON: o.json = true; o.bench_opts = true; break;
		case O_NO_DIGEST: o.no_digest = true; o.bench_opts = true; break;
		case O_MIME: o.mime = true; break;
		case O_ON_FAILURE:
			if (pd_mail_action_parse(optarg, &o.policy.on_failure) < 0 || o.policy.on_failure == PD_MAIL_QUARANTINE)
				die(EX_USAGE, "--on-failure: expected pass or reject, got %s (quarantine is the milter's)", optarg);
			o.mime_opts = true;
			break;
		case O_ON_NO_KEY:
			if (pd_mail_action_parse(optarg, &o.policy.on_no_key) < 0 || o.policy.on_no_key == PD_MAIL_QUARANTINE)
				die(EX_USAGE, "--on-no-key: expected pass or reject, got %s", optarg);
			o.mime_opts = true;
			break;
		case O_HP:
			if (pd_mail_hp_parse(optarg, &o.policy.protected_headers) < 0)
				die(EX_USAGE, "--protected-headers: expected none, subject or all, got %s", optarg);
			o.mime_opts = true;
			break;
		case O_KEEP_ORIG: o.policy.keep_original = true; o.mime_opts = true; break;
		case O_SPOOL: o.policy.tmpdir = optarg; o.mime_opts = true; break;
		case O_MAX_PLAIN:
			o.policy.max_plaintext = (uint64_t)num("--max-plaintext", optarg, 1, 1 << 20) << 20;
			o.mime_opts = true;
			break;
		default:
			fprintf(stderr, "Try '%s --help' for more information.\n", prog);
			return EX_USAGE;
		}
	}
	o.cfg.timeout_ms = timeout_s == 0 ? -1 : (int)(timeout_s * 1000);
	if (n_hostports && n_sockets)
		die(EX_USAGE, "--socket and --connect exclude each other");
	for (size_t i = 0; i < n_sockets; i++)
		targets[i] = (struct pdc_target){ .socket_path = sockets[i] };
	for (size_t i = 0; i < n_hostports; i++) {
		const char *hostport = hostports[i];
		char *colon, *hp = hps[i] = strdup(hostport);
		if (!hp)
			die(EX_OSERR, "out of memory");
		if (hp[0] == '[') {
			char *end = strchr(hp, ']');
			if (!end || end[1] != ':' || !end[2])
				die(EX_USAGE, "--connect: expected [ADDRESS]:PORT, got %s", hostport);
			*end = 0;
			targets[i] = (struct pdc_target){ .host = hp + 1, .port = end + 2 };
		} else {
			colon = strrchr(hp, ':');
			if (!colon || colon == hp || !colon[1])
				die(EX_USAGE, "--connect: expected HOST:PORT, got %s", hostport);
			*colon = 0;
			targets[i] = (struct pdc_target){ .host = hp, .port = colon + 1 };
		}
	}
	if (n_sockets == 1) {
		o.cfg.socket_path = sockets[0];
	} else if (n_hostports == 1) {
		o.cfg.host = targets[0].host;
		o.cfg.port = targets[0].port;
	} else if (n_sockets || n_hostports) {
		o.cfg.targets = targets;
		o.cfg.n_targets = n_sockets + n_hostports;
	}
	if (n_hostports) {
		if (o.cfg.no_tls && tls_opt)
			die(EX_USAGE, "--no-tls excludes the --tls-* options");
	} else if (tls_opt || o.cfg.no_tls) {
		die(EX_USAGE, "--tls-* and --no-tls need --connect HOST:PORT");
	}
	if (!!o.cfg.tls_cert != !!o.cfg.tls_key)
		die(EX_USAGE, "--tls-cert and --tls-key go together");

	int nargs = argc - optind;
	char **args = argv + optind;
	const char *cmd = nargs > 0 ? args[0] : "";
	bool is_bench = strcmp(cmd, "bench") == 0;
	int code;
	if (o.bench_opts && !is_bench)
		die(EX_USAGE, "--concurrency, --requests, --pipeline, --threads, --no-digest and --json belong to bench");
	if (o.mime_opts && !o.mime)
		die(EX_USAGE, "--on-failure, --on-no-key, --protected-headers, --keep-original, --spool-dir and --max-plaintext belong to --mime");
	if (o.mime) {
		if (o.password_file || o.sk_in_file || o.sk_out_file || o.status_fd >= 0)
			die(EX_USAGE, "--mime does not take --password-file, --with-session-key, --session-key-out or --status-fd");
		code = cmd_mime(&o, nargs, args);
		for (size_t i = 0; i < n_hostports; i++)
			free(hps[i]);
		return code;
	}
	if (strcmp(cmd, "ping") == 0 || strcmp(cmd, "stats") == 0 || strcmp(cmd, "keys") == 0) {
		if (nargs != 1)
			die(EX_USAGE, "%s takes no arguments", cmd);
		if (o.output || o.verified_only || o.password_file || o.sk_in_file || o.sk_out_file || o.status_fd >= 0 ||
		    o.n_bind)
			die(EX_USAGE, "-o, --verified-only, --password-file, --bind and the session key options are for decryption");
		code = cmd[0] == 'p' ? cmd_ping(&o) : cmd[0] == 's' ? cmd_stats(&o) : cmd_keys(&o);
	} else if (is_bench) {
		if (o.output)
			die(EX_USAGE, "bench discards the plaintext: -o makes no sense");
		if (o.sk_in_file || o.sk_out_file || o.status_fd >= 0 || o.n_bind)
			die(EX_USAGE, "bench takes neither the session key options, --bind nor --status-fd");
		code = cmd_bench(&o, nargs - 1, args + 1);
	} else {
		code = cmd_decrypt(&o, nargs, args);
	}
	for (size_t i = 0; i < n_hostports; i++)
		free(hps[i]);
	return code;
}
