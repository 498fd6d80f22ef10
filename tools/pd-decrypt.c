/* SPDX-License-Identifier: MIT */
/*
 * pd-decrypt: the engine's test driver.  It uses only the public API of
 * lib/pgpdec.h, exactly as the daemon does (push slices, pull events,
 * recover the session key as a separate call), so that the interop suite
 * exercises the same paths.  It is a test tool, not a user-facing gpg
 * replacement: plaintext is streamed as the engine releases it and is
 * provisional until the final verdict (exit code 0).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "drive.h"
#include "readfile.h"
#include "pgpdec.h"

#define EXIT_USAGE 2
#define MAX_KEYS 64
#define OUTBUF (64 * 1024)

/* Exit codes per engine error: stable, the interop tests depend on them. */
static const struct { int err; int code; } exit_codes[] = {
	{ PD_ENOKEY, 10 },      { PD_EMALFORMED, 11 }, { PD_EUNSUPPORTED, 12 },
	{ PD_EINTEGRITY, 13 },  { PD_ELIMIT, 14 },     { PD_EBADPASS, 15 },
	{ PD_ESED, 16 },        { PD_ENOTPGP, 17 },    { PD_ETRUNCATED, 18 },
	{ PD_ENEEDPASS, 19 },   { PD_ENOSECRET, 20 },  { PD_ENOPASSWORD, 21 },
	{ PD_EBOMB, 22 },
};

struct opts {
	const char *keys[MAX_KEYS];
	size_t n_keys;
	const char *passphrase_file;
	const char *password_file;
	enum pd_rsa_backend backend;
	enum pd_ecdh_backend ecdh_backend;
	size_t slice;
	struct pd_limits lim;
	bool info;
	const char *out;
	const char *in;
	bool bench;
	double bench_seconds;
};

static void usage(FILE *f)
{
	fputs("Usage: pd-decrypt [OPTION]... [IN]\n"
	      "       pd-decrypt --bench [OPTION]... IN\n"
	      "Decrypt an OpenPGP message (binary or armored) through libpgpdec.\n"
	      "Reads IN (default stdin), writes the plaintext to stdout or OUT.\n"
	      "\n"
	      "  --key FILE             transferable secret key(s) to load (repeatable)\n"
	      "  --passphrase-file FILE passphrase unlocking protected keys (first line)\n"
	      "  --password-file FILE   password for password-encrypted messages (first line)\n"
	      "  --rsa-backend B        openssl or gcrypt (default: the build's default)\n"
	      "  --ecdh-backend B       openssl or gcrypt, for cv25519/X25519/X448/NIST/brainpool\n"
	      "                         (default: $PD_ECDH_BACKEND, else the build's default)\n"
	      "  --slice N              feed the engine N bytes at a time (default 65536)\n"
	      "  --allow-sed            decrypt SED packets (no integrity protection)\n"
	      "  --max-output N         limit on plaintext bytes (0 = unlimited)\n"
	      "  --max-ratio N          limit on the decompression ratio\n"
	      "  --max-depth N          limit on compressed-packet nesting\n"
	      "  --max-argon2-kib N     cap on the Argon2 memory of password-encrypted messages\n"
	      "  --max-skesk-trials N   password-encrypted session key packets tried (default 4)\n"
	      "  --max-kdf-mib N        key-derivation work per message, MiB hashed (default 256)\n"
	      "  --info                 print the message metadata as one JSON object on stderr\n"
	      "  -o, --output OUT       write the plaintext to OUT (mode 0600, renamed into\n"
	      "                         place from a temporary file only on success)\n"
	      "  --bench                decrypt IN repeatedly for >= 2 s and print MB/s\n"
	      "  --bench-seconds S      duration of --bench (default 2)\n"
	      "  -h, --help             this text\n"
	      "\n"
	      "On error: 'pd-decrypt: <ERRNAME>: <detail>' on stderr.  Exit codes:\n"
	      "   0 ok                  10 ENOKEY            11 EMALFORMED\n"
	      "  12 EUNSUPPORTED        13 EINTEGRITY        14 ELIMIT\n"
	      "  15 EBADPASS            16 ESED              17 ENOTPGP\n"
	      "  18 ETRUNCATED          19 ENEEDPASS         20 ENOSECRET\n"
	      "  21 ENOPASSWORD         22 EBOMB\n"
	      "   2 usage error          1 any other error (system, internal)\n",
	      f);
}

static int exit_code(int err)
{
	for (size_t i = 0; i < sizeof exit_codes / sizeof exit_codes[0]; i++)
		if (exit_codes[i].err == err)
			return exit_codes[i].code;
	return 1;
}

static int fail(int err, const char *detail)
{
	fprintf(stderr, "pd-decrypt: %s: %s\n", pd_errname(err),
	        detail && *detail ? detail : pd_strerror(err));
	return exit_code(err);
}

static int parse_u64(const char *s, uint64_t *ret)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || *s == '-')
		return -EINVAL;
	*ret = v;
	return 0;
}

/* A key the engine did not load: said on stderr, as the daemon logs it
 * (a file left with no decryption key at all is still an error here). */
static void on_skip(void *ctx, const struct pd_keyskip *s)
{
	if (s->kind == PD_KEYSKIP_UNSUPPORTED || s->kind == PD_KEYSKIP_MALFORMED)
		fprintf(stderr, "pd-decrypt: warning: %s in %s skipped: %s\n", s->name, (const char *)ctx, s->reason);
}

/* First line of a file, without its line ending: passphrases and passwords. */
static int read_secret_line(const char *path, char **ret, size_t *ret_len)
{
	uint8_t *buf;
	size_t len;
	int r = pd_read_file(path, PD_TOOL_MAX_FILE, &buf, &len);
	if (r < 0)
		return r;
	size_t n = 0;
	while (n < len && buf[n] != '\n')
		n++;
	if (n > 0 && buf[n - 1] == '\r')
		n--;
	char *s = malloc(n + 1);
	if (!s) {
		explicit_bzero(buf, len);
		free(buf);
		return -ENOMEM;
	}
	memcpy(s, buf, n);
	s[n] = 0;
	explicit_bzero(buf, len);
	free(buf);
	*ret = s;
	*ret_len = n;
	return 0;
}

/* ---- JSON metadata ---------------------------------------------------- */

static void json_str(FILE *f, const char *s, size_t n)
{
	fputc('"', f);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			fprintf(f, "\\u%04x", c); /* raw octets shown as Latin-1 */
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void json_hex(FILE *f, const uint8_t *p, size_t n)
{
	fputc('"', f);
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%02X", p[i]);
	fputc('"', f);
}

static void json_name(FILE *f, const char *name, int id)
{
	if (name && *name)
		json_str(f, name, strlen(name));
	else
		fprintf(f, "\"%d\"", id);
}

static const char *integrity_name(enum pd_integrity i)
{
	switch (i) {
	case PD_INTEGRITY_MDC: return "mdc";
	case PD_INTEGRITY_AEAD: return "aead";
	case PD_INTEGRITY_UNPROTECTED: return "unprotected";
	default: return "none";
	}
}

static void print_info(const struct pd_msginfo *mi, const char *result)
{
	FILE *f = stderr;
	fprintf(f, "{\"result\":\"%s\",\"armored\":%s", result, mi->armored ? "true" : "false");
	fprintf(f, ",\"recipients\":[");
	for (size_t i = 0; i < mi->n_recipients && i < PD_MAX_RECIPIENTS; i++) {
		const struct pd_recipient *r = &mi->recipients[i];
		fprintf(f, "%s{\"version\":%u,\"pk_algo\":", i ? "," : "", r->version);
		json_name(f, pd_pk_name(r->pk_algo), r->pk_algo);
		fprintf(f, ",\"pk_algo_id\":%u,\"wildcard\":%s,\"keyid\":", r->pk_algo,
		        r->wildcard ? "true" : "false");
		json_hex(f, r->keyid, 8);
		if (r->fpr_len && r->fpr_len <= 32) {
			fprintf(f, ",\"fpr\":");
			json_hex(f, r->fpr, r->fpr_len);
		}
		fputc('}', f);
	}
	fprintf(f, "],\"n_recipients_total\":%zu,\"n_skesk\":%zu", mi->n_recipients_total, mi->n_skesk);
	fprintf(f, ",\"container\":%u,\"container_version\":%u", mi->container, mi->container_version);
	fprintf(f, ",\"sym_algo\":");
	if (mi->sym_algo)
		json_name(f, pd_sym_name(mi->sym_algo), mi->sym_algo);
	else
		fputs("null", f);
	fprintf(f, ",\"sym_algo_id\":%u,\"aead_algo\":", mi->sym_algo);
	if (mi->aead_algo)
		json_name(f, pd_aead_name(mi->aead_algo), mi->aead_algo);
	else
		fputs("null", f);
	fprintf(f, ",\"aead_chunk_log\":%u,\"pk_algo\":", mi->aead_chunk_log);
	if (mi->pk_algo)
		json_name(f, pd_pk_name(mi->pk_algo), mi->pk_algo);
	else
		fputs("null", f);
	fprintf(f, ",\"key_fpr\":");
	if (mi->key_fpr_len && mi->key_fpr_len <= 32)
		json_hex(f, mi->key_fpr, mi->key_fpr_len);
	else
		fputs("null", f);
	fprintf(f, ",\"compression\":[");
	for (size_t i = 0; i < mi->n_compression && i < sizeof mi->compression; i++) {
		if (i)
			fputc(',', f);
		json_name(f, pd_compress_name(mi->compression[i]), mi->compression[i]);
	}
	fprintf(f, "],\"literal\":");
	if (mi->has_literal) {
		size_t nl = mi->literal_name_len;
		if (nl > sizeof mi->literal_name - 1)
			nl = sizeof mi->literal_name - 1;
		fprintf(f, "{\"format\":");
		json_str(f, &mi->literal_format, 1);
		fprintf(f, ",\"name\":");
		json_str(f, mi->literal_name, nl);
		fprintf(f, ",\"date\":%" PRIu32 "}", mi->literal_date);
	} else {
		fputs("null", f);
	}
	fprintf(f, ",\"issuers\":[");
	for (size_t i = 0; i < mi->n_issuers && i < PD_MAX_ISSUERS; i++) {
		if (i)
			fputc(',', f);
		json_hex(f, mi->issuers[i], 8);
	}
	fprintf(f, "],\"n_signatures\":%zu,\"integrity\":\"%s\"", mi->n_signatures,
	        integrity_name(mi->integrity));
	fprintf(f, ",\"bytes_in\":%" PRIu64 ",\"bytes_out\":%" PRIu64 "}\n", mi->bytes_in, mi->bytes_out);
}

/* ---- the output file -------------------------------------------------- */

/* Plaintext is provisional until the verdict, so -o OUT writes a new file
 * next to OUT and renames it into place only on success.  mkostemp creates
 * it with O_EXCL and mode 0600 under a name nobody can guess: a symlink or
 * file planted beforehand is never written through, and OUT's mode never
 * comes from a file that was there before.  An OUT that exists and is not a
 * regular file (/dev/null, a FIFO) is written directly, as stdout would be.
 * *ret_tmp is the temporary path, or NULL when writing directly. */
static int open_output(const char *out, int *ret_fd, char **ret_tmp)
{
	struct stat st;
	char *tmp;
	int fd;

	if (stat(out, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
		fd = open(out, O_WRONLY | O_NOCTTY | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		*ret_fd = fd;
		*ret_tmp = NULL;
		return 0;
	}
	if (asprintf(&tmp, "%s.pd-tmp.XXXXXX", out) < 0)
		return -ENOMEM;
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		int r = -errno;
		free(tmp);
		return r;
	}
	*ret_fd = fd;
	*ret_tmp = tmp;
	return 0;
}

/* ---- the decryption loop (drive.c) ------------------------------------ */

static int write_all(int fd, const uint8_t *p, size_t n)
{
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

struct run_ctx {
	struct pd_keyring *kr;
	const char *password;
	size_t password_len;
	int out_fd; /* < 0: the plaintext is discarded (--bench) */
};

static int on_key(void *ctx, struct pd_msg *m, struct pd_worker *w)
{
	struct run_ctx *c = ctx;
	if (c->password) {
		int r = pd_msg_set_password(m, c->password, c->password_len);
		if (r < 0)
			return r;
	}
	return pd_msg_recover_key(m, c->kr, w);
}

static int on_output(void *ctx, const uint8_t *p, size_t n)
{
	struct run_ctx *c = ctx;
	return c->out_fd >= 0 ? write_all(c->out_fd, p, n) : 0;
}

/* Decrypt one message from src (fd or memory).  out_fd < 0 discards the
 * plaintext (--bench).  Returns 0 or a negative error; *ret_detail then
 * describes it. */
static int decrypt(const struct opts *o, struct pd_keyring *kr, struct pd_worker *w,
                   const char *password, size_t password_len, struct pd_drive *src, int out_fd,
                   bool print_meta, uint64_t *ret_out, char *detail, size_t detail_len)
{
	struct pd_msg *m = NULL;
	/* The driver's own buffers live as long as the process (--bench runs
	 * many messages): their malloc/free would otherwise be billed to the
	 * engine's per-message cost. */
	static uint8_t *in, *out;
	if (!in)
		in = malloc(o->slice);
	if (!out)
		out = malloc(OUTBUF);
	struct run_ctx c = { kr, password, password_len, out_fd };
	int r;

	detail[0] = 0;
	if (!in || !out) {
		r = -ENOMEM;
		goto out;
	}
	r = pd_msg_new(&m, &o->lim);
	if (r < 0)
		goto out;
	pd_msg_set_keyring(m, kr);
	src->in = in;
	src->slice = o->slice;
	src->out = out;
	src->out_cap = OUTBUF;
	src->out_hw = 0;
	src->need_key = on_key;
	src->output = on_output;
	src->ctx = &c;
	r = pd_drive_run(m, w, src, detail, detail_len);
out:
	if (ret_out && m)
		*ret_out = pd_msg_info(m)->bytes_out;
	if (print_meta && m)
		print_info(pd_msg_info(m), r == 0 ? "ok" : pd_errname(r));
	pd_msg_free(m, w);
	if (out)
		explicit_bzero(out, src->out_hw); /* only what held plaintext: a 4 KiB message wipes 4 KiB */
	return r;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int bench(const struct opts *o, struct pd_keyring *kr, struct pd_worker *w,
                 const char *password, size_t password_len)
{
	uint8_t *data;
	size_t len;
	char detail[512];
	int r = pd_read_file(o->in, PD_TOOL_MAX_FILE, &data, &len);
	if (r < 0) {
		snprintf(detail, sizeof detail, "%s: %s", o->in, strerror(-r));
		return fail(r, detail);
	}
	unsigned runs = 0;
	double t0 = now(), c0 = cpu_now(), t;
	uint64_t out_total = 0;
	do {
		struct pd_drive src = { .fd = -1, .mem = data, .mem_len = len };
		/* A zero-length buffer still counts as a memory source. */
		if (!len)
			src.mem = (const uint8_t *)"";
		uint64_t n = 0;
		r = decrypt(o, kr, w, password, password_len, &src, -1, false, &n, detail, sizeof detail);
		if (r < 0) {
			free(data);
			return fail(r, detail);
		}
		out_total += n;
		runs++;
		t = now() - t0;
	} while (t < o->bench_seconds || runs < 2);
	double cpu = cpu_now() - c0;

	/* MB = 10^6 bytes.  Each run includes the session-key recovery,
	 * as a daemon request would. */
	printf("bench: %s: %u runs in %.2f s, %zu bytes ciphertext, %" PRIu64 " bytes plaintext each\n",
	       o->in, runs, t, len, out_total / runs);
	printf("bench: %.1f MB/s plaintext, %.1f MB/s ciphertext, %.2f ms per message\n",
	       (double)out_total / 1e6 / t, (double)len * runs / 1e6 / t, t * 1000.0 / runs);
	/* CPU time of this process: on a shared machine it is the steadier figure */
	printf("bench: CPU time %.1f MB/s plaintext, %.3f ms per message\n", (double)out_total / 1e6 / cpu,
	       cpu * 1000.0 / runs);
	free(data);
	return 0;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	enum { O_KEY = 256, O_PASSPHRASE, O_PASSWORD, O_BACKEND, O_ECDH_BACKEND, O_SLICE, O_SED, O_MAXOUT,
	       O_MAXRATIO, O_MAXDEPTH, O_MAXARGON2, O_MAXSKESK, O_MAXKDF, O_INFO, O_BENCH, O_BENCHSEC };
	static const struct option lo[] = {
		{ "key", required_argument, NULL, O_KEY },
		{ "passphrase-file", required_argument, NULL, O_PASSPHRASE },
		{ "password-file", required_argument, NULL, O_PASSWORD },
		{ "rsa-backend", required_argument, NULL, O_BACKEND },
		{ "ecdh-backend", required_argument, NULL, O_ECDH_BACKEND },
		{ "slice", required_argument, NULL, O_SLICE },
		{ "allow-sed", no_argument, NULL, O_SED },
		{ "max-output", required_argument, NULL, O_MAXOUT },
		{ "max-ratio", required_argument, NULL, O_MAXRATIO },
		{ "max-depth", required_argument, NULL, O_MAXDEPTH },
		{ "max-argon2-kib", required_argument, NULL, O_MAXARGON2 },
		{ "max-skesk-trials", required_argument, NULL, O_MAXSKESK },
		{ "max-kdf-mib", required_argument, NULL, O_MAXKDF },
		{ "info", no_argument, NULL, O_INFO },
		{ "output", required_argument, NULL, 'o' },
		{ "bench", no_argument, NULL, O_BENCH },
		{ "bench-seconds", required_argument, NULL, O_BENCHSEC },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	uint32_t *lim;
	uint64_t v;
	int c, idx = 0;

	o->slice = 65536;
	o->bench_seconds = 2.0;
	pd_limits_default(&o->lim);
	while ((c = getopt_long(argc, argv, "ho:", lo, &idx)) != -1) {
		switch (c) {
		case O_KEY:
			if (o->n_keys == MAX_KEYS) {
				fprintf(stderr, "pd-decrypt: too many --key options\n");
				return -EINVAL;
			}
			o->keys[o->n_keys++] = optarg;
			break;
		case O_PASSPHRASE: o->passphrase_file = optarg; break;
		case O_PASSWORD: o->password_file = optarg; break;
		case O_BACKEND:
			if (!strcmp(optarg, "openssl"))
				o->backend = PD_RSA_OPENSSL;
			else if (!strcmp(optarg, "gcrypt"))
				o->backend = PD_RSA_GCRYPT;
			else {
				fprintf(stderr, "pd-decrypt: --rsa-backend must be openssl or gcrypt\n");
				return -EINVAL;
			}
			break;
		case O_ECDH_BACKEND:
			if (!strcmp(optarg, "openssl"))
				o->ecdh_backend = PD_ECDH_OPENSSL;
			else if (!strcmp(optarg, "gcrypt"))
				o->ecdh_backend = PD_ECDH_GCRYPT;
			else {
				fprintf(stderr, "pd-decrypt: --ecdh-backend must be openssl or gcrypt\n");
				return -EINVAL;
			}
			break;
		case O_SLICE:
			if (parse_u64(optarg, &v) < 0 || v == 0 || v > (1u << 30)) {
				fprintf(stderr, "pd-decrypt: bad --slice '%s'\n", optarg);
				return -EINVAL;
			}
			o->slice = (size_t)v;
			break;
		case O_SED: o->lim.allow_sed = true; break;
		case O_MAXOUT:
			if (parse_u64(optarg, &v) < 0) {
				fprintf(stderr, "pd-decrypt: bad --max-output '%s'\n", optarg);
				return -EINVAL;
			}
			o->lim.max_output = v;
			break;
		case O_MAXRATIO: lim = &o->lim.max_ratio; goto u32;
		case O_MAXDEPTH: lim = &o->lim.max_depth; goto u32;
		case O_MAXARGON2: lim = &o->lim.max_argon2_kib; goto u32;
		case O_MAXSKESK: lim = &o->lim.max_skesk_trials; goto u32;
		case O_MAXKDF: lim = &o->lim.max_kdf_mib; goto u32;
		u32: /* a 32-bit limit of struct pd_limits */
			if (parse_u64(optarg, &v) < 0 || v > UINT32_MAX) {
				fprintf(stderr, "pd-decrypt: bad --%s '%s'\n", lo[idx].name, optarg);
				return -EINVAL;
			}
			*lim = (uint32_t)v;
			break;
		case O_INFO: o->info = true; break;
		case 'o': o->out = optarg; break;
		case O_BENCH: o->bench = true; break;
		case O_BENCHSEC: {
			char *end;
			o->bench_seconds = strtod(optarg, &end);
			if (*end || !(o->bench_seconds > 0 && o->bench_seconds < 3600)) {
				fprintf(stderr, "pd-decrypt: bad --bench-seconds '%s'\n", optarg);
				return -EINVAL;
			}
			break;
		}
		case 'h': usage(stdout); exit(0);
		default: return -EINVAL;
		}
	}
	if (optind < argc)
		o->in = argv[optind++];
	if (optind < argc) {
		fprintf(stderr, "pd-decrypt: too many arguments\n");
		return -EINVAL;
	}
	if (o->bench && (!o->in || !strcmp(o->in, "-"))) {
		fprintf(stderr, "pd-decrypt: --bench needs an input file\n");
		return -EINVAL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o = { 0 };
	struct pd_keyring *kr = NULL;
	struct pd_worker *w = NULL;
	char *passphrase = NULL, *password = NULL;
	size_t passphrase_len = 0, password_len = 0;
	char detail[1024] = "";
	char *tmp = NULL;
	int in_fd = -1, out_fd = -1, rc, r;

	if (parse_opts(argc, argv, &o) < 0) {
		usage(stderr);
		return EXIT_USAGE;
	}
	r = pd_lib_init(0);
	if (r < 0)
		return fail(r, "initialising the crypto libraries");

	if (o.passphrase_file) {
		r = read_secret_line(o.passphrase_file, &passphrase, &passphrase_len);
		if (r < 0) {
			snprintf(detail, sizeof detail, "%s: %s", o.passphrase_file, strerror(-r));
			rc = fail(r, detail);
			goto out;
		}
	}
	if (o.password_file) {
		r = read_secret_line(o.password_file, &password, &password_len);
		if (r < 0) {
			snprintf(detail, sizeof detail, "%s: %s", o.password_file, strerror(-r));
			rc = fail(r, detail);
			goto out;
		}
	}
	r = pd_keyring_new(&kr, o.backend);
	if (r == 0)
		r = pd_keyring_set_ecdh_backend(kr, o.ecdh_backend);
	if (r < 0) {
		rc = fail(r, "creating the key ring");
		goto out;
	}
	for (size_t i = 0; i < o.n_keys; i++) {
		uint8_t *data;
		size_t len;
		r = pd_read_file(o.keys[i], PD_TOOL_MAX_FILE, &data, &len);
		if (r == -EISDIR) { /* a usage error: 2, as in --help */
			fprintf(stderr, "pd-decrypt: %s is a directory: give the key files in it (one --key each)\n",
			        o.keys[i]);
			rc = EXIT_USAGE;
			goto out;
		}
		if (r < 0) {
			snprintf(detail, sizeof detail, "%s: %s", o.keys[i], strerror(-r));
			rc = fail(r, detail);
			goto out;
		}
		char kd[512] = "";
		r = pd_keyring_add_report(kr, data, len, passphrase, passphrase_len, on_skip, (void *)o.keys[i], kd,
		                          sizeof kd);
		explicit_bzero(data, len);
		free(data);
		if (r < 0) {
			snprintf(detail, sizeof detail, "%s: %s", o.keys[i], *kd ? kd : pd_strerror(r));
			rc = fail(r, detail);
			goto out;
		}
	}
	r = pd_worker_new(&w, 0);
	if (r < 0) {
		rc = fail(r, "creating the worker context");
		goto out;
	}

	if (o.bench) {
		rc = bench(&o, kr, w, password, password_len);
		goto out;
	}

	if (o.in && strcmp(o.in, "-")) {
		in_fd = open(o.in, O_RDONLY | O_CLOEXEC);
		if (in_fd < 0) {
			r = -errno;
			snprintf(detail, sizeof detail, "%s: %s", o.in, strerror(errno));
			rc = fail(r, detail);
			goto out;
		}
		struct stat st;
		if (fstat(in_fd, &st) == 0 && S_ISDIR(st.st_mode)) {
			fprintf(stderr, "pd-decrypt: %s is a directory: give a message file\n", o.in);
			rc = EXIT_USAGE;
			goto out;
		}
	} else {
		in_fd = STDIN_FILENO;
	}
	if (o.out && strcmp(o.out, "-")) {
		r = open_output(o.out, &out_fd, &tmp);
		if (r < 0) {
			snprintf(detail, sizeof detail, "%s: cannot create the output: %s", o.out,
			         strerror(-r));
			rc = fail(r, detail);
			goto out;
		}
	} else {
		out_fd = STDOUT_FILENO;
	}

	struct pd_drive src = { .fd = in_fd };
	r = decrypt(&o, kr, w, password, password_len, &src, out_fd, o.info, NULL, detail, sizeof detail);
	if (r == 0 && tmp) {
		if (close(out_fd) < 0 || rename(tmp, o.out) < 0) {
			r = -errno;
			snprintf(detail, sizeof detail, "%s: %s", o.out, strerror(errno));
		}
		out_fd = -1;
	}
	rc = r < 0 ? fail(r, detail) : 0;

out:
	if (tmp) {
		if (rc != 0)
			unlink(tmp);
		free(tmp);
	}
	if (out_fd > STDERR_FILENO)
		close(out_fd);
	if (in_fd > STDERR_FILENO)
		close(in_fd);
	if (passphrase) {
		explicit_bzero(passphrase, passphrase_len);
		free(passphrase);
	}
	if (password) {
		explicit_bzero(password, password_len);
		free(password);
	}
	pd_worker_free(w);
	pd_keyring_free(kr);
	pd_lib_deinit();
	return rc;
}
