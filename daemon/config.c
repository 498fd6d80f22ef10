/* SPDX-License-Identifier: MIT */
/* Defaults, INI file and flags into one struct pd_config (see config.h). */
#include <errno.h>
#include <grp.h>
#include <ini.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pd-config.h"
#include "addr.h"
#include "config.h"
#include "log.h"
#include "units.h"

enum opt_type { T_STR, T_LIST, T_UINT, T_SIZE, T_MS, T_BOOL, T_MODE, T_LEVEL, T_LEVEL_OFF };

struct opt {
	const char *name;
	char shortopt;
	enum opt_type type;
	size_t off;
	const char *arg;  /* for --help */
	const char *help;
};

#define O(f) offsetof(struct pd_config, f)
static const struct opt opts[] = {
	{ "listen", 'l', T_LIST, O(listen), "unix:PATH|tcp:HOST:PORT", "listen there (repeatable)" },
	{ "key", 'k', T_LIST, O(keys), "FILE", "secret key file, binary or armored (repeatable)" },
	{ "keydir", 0, T_STR, O(keydir), "DIR", "load every regular file in DIR as a key file (not *.passphrase)" },
	{ "passphrase-file", 0, T_STR, O(passphrase_file), "FILE", "first line unlocks protected keys without a passphrase of their own" },
	{ "key-passphrase", 0, T_LIST, O(key_passphrases), "KEYFILE:PASSFILE", "passphrase of one key file (repeatable; else FILE.passphrase, else passphrase-file)" },
	{ "strict-keys", 0, T_BOOL, O(strict_keys), "BOOL", "refuse to start or reload when a key is skipped as unusable (default no)" },
	{ "workers", 'w', T_UINT, O(workers), "N", "decryption threads (default: one per CPU)" },
	{ "rsa-backend", 0, T_STR, O(rsa_backend), "openssl|gcrypt", "RSA private-key backend" },
	{ "ecdh-backend", 0, T_STR, O(ecdh_backend), "openssl|gcrypt", "ECDH (cv25519, X25519, X448, NIST, brainpool) backend" },
	{ "secmem-size", 0, T_SIZE, O(secmem_size), "BYTES", "locked secure memory for keys (default 0: sized from the key files, at least 4M)" },
	{ "log-level", 0, T_LEVEL, O(log_level), "LEVEL", "err, warning, notice, info (default), debug" },
	{ "log-requests", 0, T_LEVEL_OFF, O(log_requests), "LEVEL|off", "level of the line logged per finished request (default info)" },
	{ "queue-length", 0, T_UINT, O(queue_length), "N", "messages being decrypted at once (a request counts from its first ciphertext); more get OVERLOADED (default 512)" },
	{ "max-connections", 0, T_UINT, O(max_connections), "N", "open connections (default 1024)" },
	{ "max-connections-per-peer", 0, T_UINT, O(max_connections_per_peer), "N", "per uid or address, 0 = no limit (default 0)" },
	{ "max-requests-per-connection", 0, T_UINT, O(max_requests_per_connection), "N", "pipelined requests (default 16)" },
	{ "max-message-size", 0, T_SIZE, O(max_message_size), "BYTES", "ciphertext per message, 0 = no limit (default 4G)" },
	{ "max-output-size", 0, T_SIZE, O(max_output_size), "BYTES", "plaintext per message, 0 = no limit (default 16G)" },
	{ "max-frame-size", 0, T_SIZE, O(max_frame_size), "BYTES", "largest frame payload, announced in HELLO (default 64K)" },
	{ "idle-timeout", 0, T_MS, O(idle_timeout_ms), "TIME", "close connections idle this long (default 60s)" },
	{ "message-timeout", 0, T_MS, O(message_timeout_ms), "TIME", "one decryption at most this long (default 10m)" },
	{ "write-timeout", 0, T_MS, O(write_timeout_ms), "TIME", "peer reading nothing this long is dropped (default 5m)" },
	{ "drain-timeout", 0, T_MS, O(drain_timeout_ms), "TIME", "on SIGTERM, in-flight work gets this long (default 30s)" },
	{ "write-high-watermark", 0, T_SIZE, O(write_high_watermark), "BYTES", "unsent output per connection that stops reading (default 1M)" },
	{ "write-low-watermark", 0, T_SIZE, O(write_low_watermark), "BYTES", "resume reading below this (default 256K)" },
	{ "max-write-buffer", 0, T_SIZE, O(max_write_buffer), "BYTES", "unsent output of all connections together that pauses decryption until it drains (default 256M)" },
	{ "request-buffer", 0, T_SIZE, O(request_buffer), "BYTES", "ciphertext and plaintext buffered per request (default 128K)" },
	{ "request-buffer-max", 0, T_SIZE, O(request_buffer_max), "BYTES", "request-buffer grows to this while a large message streams in (default 512K)" },
	{ "max-verified-size", 0, T_SIZE, O(max_verified_size), "BYTES", "plaintext held for one verified-only request (default 64M)" },
	{ "max-verified-total", 0, T_SIZE, O(max_verified_total), "BYTES", "plaintext held for all verified-only requests (default 256M)" },
	{ "max-memory", 0, T_SIZE, O(max_memory), "BYTES", "memory of all messages in progress: buffers, decompressors, AEAD chunks, Argon2 (default 1G)" },
	{ "max-key-trials", 0, T_UINT, O(max_key_trials), "N", "private-key operations per message (default 8)" },
	{ "max-argon2-memory", 0, T_SIZE, O(max_argon2_memory), "BYTES", "Argon2 memory a password-encrypted message may demand, 0 = no Argon2 (default 256M)" },
	{ "max-argon2-passes", 0, T_UINT, O(max_argon2_passes), "N", "Argon2 passes (t) a message may demand (default 8)" },
	{ "max-argon2-lanes", 0, T_UINT, O(max_argon2_lanes), "N", "Argon2 lanes (p) a message may demand (default 16)" },
	{ "max-skesk-trials", 0, T_UINT, O(max_skesk_trials), "N", "password-encrypted session key packets tried per message (default 4)" },
	{ "max-kdf-work", 0, T_SIZE, O(max_kdf_work), "BYTES", "key derivation per message, as bytes hashed (Argon2: memory x passes / 2; default 256M, about 1 s)" },
	{ "allow-sed", 0, T_BOOL, O(allow_sed), "BOOL", "decrypt SED packets without integrity (default no)" },
	{ "socket-mode", 0, T_MODE, O(socket_mode), "OCTAL", "unix socket permissions (default 0660)" },
	{ "socket-owner", 0, T_STR, O(socket_owner), "USER", "unix socket owner" },
	{ "socket-group", 0, T_STR, O(socket_group), "GROUP", "unix socket group" },
	{ "allow-user", 0, T_LIST, O(allow_users), "USER", "unix peers allowed by uid (repeatable)" },
	{ "allow-group", 0, T_LIST, O(allow_groups), "GROUP", "unix peers allowed by gid (repeatable)" },
	{ "allow-session-key-export", 0, T_BOOL, O(allow_session_key_export), "BOOL", "give session keys of verified messages to the peers named by session-key-export-* who ask (default no)" },
	{ "session-key-export-user", 0, T_LIST, O(sk_export_users), "USER", "unix peer (uid) that may have session keys (repeatable)" },
	{ "session-key-export-group", 0, T_LIST, O(sk_export_groups), "GROUP", "unix peers of this group that may have session keys (repeatable)" },
	{ "session-key-export-pin", 0, T_LIST, O(sk_export_pins_hex), "SHA256", "TLS client certificate (hex SHA-256) that may have session keys (repeatable)" },
	{ "allow-plain-tcp", 0, T_BOOL, O(allow_plain_tcp), "BOOL", "plain TCP on loopback when no TLS is set (default no)" },
	{ "tls-cert", 0, T_STR, O(tls_cert), "FILE", "TLS server certificate chain (PEM)" },
	{ "tls-key", 0, T_STR, O(tls_key), "FILE", "TLS server private key (PEM)" },
	{ "tls-ca", 0, T_STR, O(tls_ca), "FILE", "CA certificates for client certificates (PEM)" },
	{ "tls-require-client-cert", 0, T_BOOL, O(tls_require_client_cert), "BOOL", "mutual TLS (default yes)" },
	{ "tls-pin", 0, T_LIST, O(tls_pins), "SHA256", "accept only client certificates with this hex SHA-256 (repeatable)" },
	{ "tls-min-version", 0, T_STR, O(tls_min_version), "1.2|1.3", "oldest TLS version (default 1.3)" },
	{ "tls-handshake-timeout", 0, T_MS, O(tls_handshake_timeout_ms), "TIME", "close connections not through the TLS handshake by then (default 10s)" },
	{ "metrics-listen", 0, T_STR, O(metrics_listen), "[HOST:]PORT", "serve GET /metrics (Prometheus) over HTTP there; HOST is numeric, 127.0.0.1 if omitted (default off)" },
	{ "metrics-allow-remote", 0, T_BOOL, O(metrics_allow_remote), "BOOL", "let metrics-listen be a non-loopback address (default no)" },
};
#undef O

static void set_defaults(struct pd_config *c)
{
	c->secmem_size = 0; /* sized from the key files at start: pd_keyset_secmem_auto */
	c->log_level = PD_LOG_INFO;
	c->log_requests = PD_LOG_INFO;
	c->queue_length = 512;
	c->max_connections = 1024;
	c->max_requests_per_connection = 16;
	c->max_message_size = 4ull << 30;
	c->max_output_size = 16ull << 30;
	c->max_frame_size = 64u << 10;
	c->idle_timeout_ms = 60000;
	c->message_timeout_ms = 600000;
	c->write_timeout_ms = 300000;
	c->drain_timeout_ms = 30000;
	c->write_high_watermark = 1u << 20;
	c->write_low_watermark = 256u << 10;
	c->max_write_buffer = 256u << 20;
	c->request_buffer = 128u << 10;
	c->request_buffer_max = 512u << 10;
	c->max_key_trials = 8;
	c->max_argon2_memory = 256ull << 20;
	c->max_argon2_passes = 8;
	c->max_argon2_lanes = 16;
	c->max_skesk_trials = 4;
	c->max_kdf_work = 256ull << 20;
	c->max_verified_size = 64u << 20;
	c->max_verified_total = 256u << 20;
	c->max_memory = 1ull << 30;
	c->socket_mode = 0660;
	c->tls_require_client_cert = true;
	c->tls_handshake_timeout_ms = 10000;
}

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* A pin: 64 hex digits (colons allowed between them); decoded into out
 * when it is not NULL. */
static int check_pin(const char *opt, const char *pin, uint8_t *out, char *err, size_t errlen)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = 0;
	for (const char *p = pin; *p; p++) {
		if (*p == ':')
			continue;
		char ch = *p >= 'A' && *p <= 'F' ? (char)(*p - 'A' + 'a') : *p;
		const char *d = strchr(hex, ch);
		if (!d)
			return fail(err, errlen, "%s %s: not hex", opt, pin);
		unsigned v = (unsigned)(d - hex);
		if (out && n < 64)
			out[n / 2] = (uint8_t)(n % 2 ? (out[n / 2] | v) : (v << 4));
		n++;
	}
	if (n != 64)
		return fail(err, errlen, "%s %s: want 64 hex digits (SHA-256)", opt, pin);
	return 0;
}

static int strv_add(struct pd_strv *l, const char *s)
{
	if (l->n >= 4096)
		return -E2BIG;
	char **nv = realloc(l->v, (l->n + 2) * sizeof(*nv));
	if (!nv)
		return -ENOMEM;
	l->v = nv;
	if (!(l->v[l->n] = strdup(s)))
		return -ENOMEM;
	l->v[++l->n] = NULL;
	return 0;
}

static void strv_clear(struct pd_strv *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = 0;
}

static const struct opt *find_opt(const char *name)
{
	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
		if (!strcmp(opts[i].name, name))
			return &opts[i];
	return NULL;
}

/* cli_seen: list options already replaced on the command line. */
static int set_opt(struct pd_config *c, const struct opt *o, const char *val, bool *cli_seen,
                   char *err, size_t errlen, const char *where)
{
	void *p = (char *)c + o->off;
	uint64_t v;
	int r = 0;

	switch (o->type) {
	case T_STR:
		free(*(char **)p);
		if (!(*(char **)p = strdup(val)))
			return -ENOMEM;
		break;
	case T_LIST:
		if (cli_seen && !cli_seen[o - opts]) {
			strv_clear(p);
			cli_seen[o - opts] = true;
		}
		r = strv_add(p, val);
		if (r == -E2BIG)
			return fail(err, errlen, "%s: too many values for %s", where, o->name);
		break;
	case T_UINT:
		r = pd_parse_size(val, &v);
		if (r < 0 || v > UINT32_MAX)
			return fail(err, errlen, "%s: %s wants a number, not '%s'", where, o->name, val);
		*(unsigned *)p = (unsigned)v;
		break;
	case T_SIZE:
		if (pd_parse_size(val, &v) < 0)
			return fail(err, errlen, "%s: %s wants a size such as 64K or 2G, not '%s'", where, o->name, val);
		if (o->off == offsetof(struct pd_config, max_frame_size)) {
			if (v > UINT32_MAX)
				return fail(err, errlen, "%s: %s is too large", where, o->name);
			*(uint32_t *)p = (uint32_t)v;
		} else if (o->off == offsetof(struct pd_config, max_message_size) ||
		           o->off == offsetof(struct pd_config, max_output_size) ||
		           o->off == offsetof(struct pd_config, max_verified_size) ||
		           o->off == offsetof(struct pd_config, max_verified_total) ||
		           o->off == offsetof(struct pd_config, max_argon2_memory) ||
		           o->off == offsetof(struct pd_config, max_kdf_work) ||
		           o->off == offsetof(struct pd_config, max_memory)) {
			*(uint64_t *)p = v;
		} else {
			if (v > SIZE_MAX / 4)
				return fail(err, errlen, "%s: %s is too large", where, o->name);
			*(size_t *)p = (size_t)v;
		}
		break;
	case T_MS:
		if (pd_parse_ms(val, &v) < 0)
			return fail(err, errlen, "%s: %s wants a duration such as 30s or 500ms, not '%s'", where, o->name, val);
		*(uint64_t *)p = v;
		break;
	case T_BOOL:
		if (pd_parse_bool(val, p) < 0)
			return fail(err, errlen, "%s: %s wants yes or no, not '%s'", where, o->name, val);
		break;
	case T_MODE: {
		char *end;
		unsigned long m = strtoul(val, &end, 8);
		if (*val == 0 || *end || m > 07777)
			return fail(err, errlen, "%s: %s wants an octal mode such as 0660, not '%s'", where, o->name, val);
		*(mode_t *)p = (mode_t)m;
		break;
	}
	case T_LEVEL_OFF:
		if (!strcasecmp(val, "off") || !strcasecmp(val, "no")) {
			*(int *)p = -1;
			r = 0;
			break;
		}
		/* fall through */
	case T_LEVEL:
		r = pd_log_level_parse(val);
		if (r < 0)
			return fail(err, errlen, "%s: %s wants err, warning, notice, info, debug%s, not '%s'", where, o->name,
			            o->type == T_LEVEL_OFF ? " or off" : "", val);
		*(int *)p = r;
		r = 0;
		break;
	}
	if (r == -ENOMEM)
		return fail(err, errlen, "out of memory");
	return r;
}

struct ini_ctx {
	struct pd_config *c;
	char *err;
	size_t errlen;
	int r;
};

/* A relative path in the file names a file beside it, whatever the working
 * directory (the command line's stay relative to it): the options whose
 * argument is a FILE or a DIR, and unix: listeners.  Returns value itself
 * or a new string. */
static char *file_relative(const char *config_file, const struct opt *o, char *value)
{
	const char *slash = strrchr(config_file, '/');
	const char *path = value, *prefix = "";
	if (o->off == offsetof(struct pd_config, listen)) {
		if (strncmp(value, "unix:", 5))
			return value;
		path += 5;
		prefix = "unix:";
	} else if (strcmp(o->arg, "FILE") && strcmp(o->arg, "DIR")) {
		return value;
	}
	if (!slash || !*path || *path == '/')
		return value;
	char *r;
	if (asprintf(&r, "%s%.*s/%s", prefix, (int)(slash - config_file), config_file, path) < 0)
		return NULL;
	free(value);
	return r;
}

static int ini_cb(void *user, const char *section, const char *name, const char *value)
{
	struct ini_ctx *x = user;
	char where[PATH_MAX + 64];
	const struct opt *o = find_opt(name);
	if (x->r < 0) /* inih goes on after an error: keep the first one */
		return 0;

	snprintf(where, sizeof(where), "%s [%s] %s", x->c->config_file, section, name);
	if (!o || o->off == offsetof(struct pd_config, config_file)) {
		x->r = fail(x->err, x->errlen, "%s: unknown setting", where);
		return 0;
	}
	/* "workers = 4 # per CPU": the inline comment is not the value */
	char *v = strndup(value, pd_ini_value_len(value));
	if (v)
		v = file_relative(x->c->config_file, o, v);
	if (!v) {
		x->r = fail(x->err, x->errlen, "out of memory");
		return 0;
	}
	x->r = set_opt(x->c, o, v, NULL, x->err, x->errlen, where);
	free(v);
	return x->r == 0;
}

void pd_config_usage(void)
{
	printf("Usage: pgpdecd [--config FILE] [--listen unix:PATH|tcp:HOST:PORT]... [--key FILE]...\n"
	       "               [--keydir DIR] [--passphrase-file FILE] [--workers N] [OPTION VALUE]...\n\n"
	       "OpenPGP bulk-decryption daemon.  Runs in the foreground and logs to stderr.\n"
	       "Every option is also a key of the INI config file (same name, without --);\n"
	       "the command line overrides the file.  Sizes take K/M/G suffixes, durations\n"
	       "ms/s/m/h (a bare number is seconds).\n\n"
	       "  -c, --config FILE                  INI config file (default none)\n");
	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
		char left[80];
		if (opts[i].shortopt)
			snprintf(left, sizeof(left), "-%c, --%s %s", opts[i].shortopt, opts[i].name, opts[i].arg);
		else
			snprintf(left, sizeof(left), "    --%s %s", opts[i].name, opts[i].arg);
		if (strlen(left) < 34)
			printf("  %-35s%s\n", left, opts[i].help);
		else /* too wide for the column: the text on a line of its own */
			printf("  %s\n  %-35s%s\n", left, "", opts[i].help);
	}
	printf("  -h, --help                         this text\n"
	       "  -V, --version                      version\n\n"
	       "Signals: SIGHUP reloads keys and config (the old set stays on failure);\n"
	       "SIGTERM/SIGINT stop accepting, finish in-flight messages within\n"
	       "drain-timeout and exit 0.\n");
}

bool pd_config_tls(const struct pd_config *c) { return c->tls_cert || c->tls_key; }

static int check(struct pd_config *c, char *err, size_t errlen)
{
	if (!c->listen.n && getenv("LISTEN_FDS") == NULL)
		return fail(err, errlen, "nothing to listen on: give --listen unix:PATH or tcp:HOST:PORT");
	for (size_t i = 0; i < c->listen.n; i++) {
		const char *l = c->listen.v[i];
		if (!strncmp(l, "unix:", 5)) {
			if (!l[5])
				return fail(err, errlen, "listen %s: no socket path after unix:", l);
			if (strlen(l + 5) >= 108) /* sun_path */
				return fail(err, errlen, "listen %s: socket path longer than 107 bytes (%zu): use a shorter one",
				            l, strlen(l + 5));
		} else if (!strncmp(l, "tcp:", 4)) {
			if (!strrchr(l + 4, ':'))
				return fail(err, errlen, "listen %s: want tcp:HOST:PORT", l);
			/* here, not when binding: before the keys are read */
			if (!pd_config_tls(c) && !c->allow_plain_tcp)
				return fail(err, errlen, "listen %s: plain TCP needs allow-plain-tcp = yes (on a loopback "
				            "address only), or tls-cert and tls-key for TLS", l);
		} else {
			return fail(err, errlen, "listen %s: want unix:PATH or tcp:HOST:PORT", l);
		}
	}
	if (!c->keys.n && !c->keydir)
		return fail(err, errlen, "no keys: give --key FILE or --keydir DIR");
	for (size_t i = 0; i < c->key_passphrases.n; i++) {
		const char *kp = c->key_passphrases.v[i], *colon = strchr(kp, ':');
		if (!colon || colon == kp || !colon[1])
			return fail(err, errlen, "key-passphrase %s: want KEYFILE:PASSFILE (the key file's path "
			            "has no colon)", kp);
	}
	if (c->workers > 256)
		return fail(err, errlen, "workers: at most 256");
	if (!c->queue_length || !c->max_connections || !c->max_requests_per_connection)
		return fail(err, errlen, "queue-length, max-connections and max-requests-per-connection must be at least 1");
	if (!c->max_skesk_trials || !c->max_argon2_passes || !c->max_argon2_lanes)
		return fail(err, errlen, "max-skesk-trials, max-argon2-passes and max-argon2-lanes must be at least 1");
	if (c->max_kdf_work < (1u << 20) || c->max_kdf_work / (1u << 20) > UINT32_MAX)
		return fail(err, errlen, "max-kdf-work must be between 1M and 4P");
	if (c->max_memory < (16u << 20))
		return fail(err, errlen, "max-memory must be at least 16M");
	if (c->max_memory <= c->max_argon2_memory)
		return fail(err, errlen, "max-memory must be larger than max-argon2-memory: an Argon2 derivation "
		            "is drawn from it (raise max-memory too)");
	if (c->max_frame_size < (16u << 10) || c->max_frame_size > (16u << 20))
		return fail(err, errlen, "max-frame-size must be between 16K and 16M");
	if (c->request_buffer < 4096 || c->request_buffer > (64u << 20))
		return fail(err, errlen, "request-buffer must be between 4K and 64M");
	if (c->request_buffer_max < 4096 || c->request_buffer_max > (64u << 20))
		return fail(err, errlen, "request-buffer-max must be between 4K and 64M");
	if (c->write_low_watermark >= c->write_high_watermark)
		return fail(err, errlen, "write-low-watermark must be below write-high-watermark");
	if (c->max_write_buffer < c->write_high_watermark)
		return fail(err, errlen, "max-write-buffer must be at least write-high-watermark");
	if (c->rsa_backend && strcmp(c->rsa_backend, "default") && strcmp(c->rsa_backend, "openssl") &&
	    strcmp(c->rsa_backend, "gcrypt"))
		return fail(err, errlen, "rsa-backend: want openssl or gcrypt, not '%s'", c->rsa_backend);
	if (c->ecdh_backend && strcmp(c->ecdh_backend, "default") && strcmp(c->ecdh_backend, "openssl") &&
	    strcmp(c->ecdh_backend, "gcrypt"))
		return fail(err, errlen, "ecdh-backend: want openssl or gcrypt, not '%s'", c->ecdh_backend);
	if (!c->tls_handshake_timeout_ms)
		return fail(err, errlen, "tls-handshake-timeout must be more than 0");
	if (c->tls_min_version && strcmp(c->tls_min_version, "1.2") && strcmp(c->tls_min_version, "1.3"))
		return fail(err, errlen, "tls-min-version: want 1.2 or 1.3");
	if (pd_config_tls(c) && (!c->tls_cert || !c->tls_key))
		return fail(err, errlen, "TLS needs both tls-cert and tls-key");
	if (pd_config_tls(c) && c->tls_require_client_cert && !c->tls_ca && !c->tls_pins.n)
		return fail(err, errlen, "client certificates are required (tls-require-client-cert): give tls-ca or tls-pin");
	if (c->tls_pins.n > PD_TLS_MAX_PINS)
		return fail(err, errlen, "tls-pin: at most %d pins, not %zu", PD_TLS_MAX_PINS, c->tls_pins.n);
	for (size_t i = 0; i < c->tls_pins.n; i++)
		if (check_pin("tls-pin", c->tls_pins.v[i], NULL, err, errlen) < 0)
			return -EINVAL;
	if (c->sk_export_pins_hex.n > PD_TLS_MAX_PINS)
		return fail(err, errlen, "session-key-export-pin: at most %d pins, not %zu", PD_TLS_MAX_PINS,
		            c->sk_export_pins_hex.n);
	if (c->sk_export_pins_hex.n &&
	    !(c->sk_export_pins = calloc(c->sk_export_pins_hex.n, sizeof(*c->sk_export_pins))))
		return fail(err, errlen, "out of memory");
	for (size_t i = 0; i < c->sk_export_pins_hex.n; i++, c->n_sk_export_pins++)
		if (check_pin("session-key-export-pin", c->sk_export_pins_hex.v[i], c->sk_export_pins[i], err, errlen) < 0)
			return -EINVAL;
	/* Exporting session keys is named, never "anyone who can connect". */
	if (c->allow_session_key_export && !c->sk_export_users.n && !c->sk_export_groups.n && !c->sk_export_pins_hex.n)
		return fail(err, errlen, "allow-session-key-export needs session-key-export-user, -group or -pin: "
		            "name who may have session keys");
	if (c->metrics_listen && *c->metrics_listen) {
		if (pd_addr_parse(c->metrics_listen, &c->metrics_addr, &c->metrics_addr_len) < 0)
			return fail(err, errlen, "metrics-listen %s: want PORT, IPV4:PORT or [IPV6]:PORT (numeric, "
			            "port 1-65535)", c->metrics_listen);
		/* Plain HTTP without authentication: elsewhere than loopback only
		 * when the operator says so. */
		if (!c->metrics_allow_remote && !pd_addr_is_loopback((const struct sockaddr *)&c->metrics_addr))
			return fail(err, errlen, "metrics-listen %s: not a loopback address; the endpoint has no TLS "
			            "and no authentication: set metrics-allow-remote = yes to serve it there",
			            c->metrics_listen);
	}
	return 0;
}

/* A user or group name (or number) to its id.  The _r functions: a reload
 * loads its config on a thread of its own. */
static int lookup_id(const char *name, bool group, unsigned *ret)
{
	char *end, *buf = NULL;
	size_t cap = 4096;
	int r;

	errno = 0;
	unsigned long v = strtoul(name, &end, 10);
	if (*name && !*end) {
		if (errno || v >= (unsigned)-1)
			return -ERANGE;
		*ret = (unsigned)v;
		return 0;
	}
	for (;;) {
		char *nb = realloc(buf, cap);
		if (!nb) {
			free(buf);
			return -ENOMEM;
		}
		buf = nb;
		if (group) {
			struct group g, *res = NULL;
			r = getgrnam_r(name, &g, buf, cap, &res);
			if (r == 0 && res)
				*ret = g.gr_gid;
			else if (r == 0)
				r = ENOENT;
		} else {
			struct passwd p, *res = NULL;
			r = getpwnam_r(name, &p, buf, cap, &res);
			if (r == 0 && res)
				*ret = p.pw_uid;
			else if (r == 0)
				r = ENOENT;
		}
		if (r != ERANGE || cap >= (1u << 20))
			break;
		cap *= 2;
	}
	free(buf);
	return -r;
}

static int resolve_list(const struct pd_strv *names, bool group, struct pd_idv *ret, const char *opt,
                        char *err, size_t errlen)
{
	if (!names->n)
		return 0;
	if (!(ret->v = calloc(names->n, sizeof(*ret->v))))
		return fail(err, errlen, "out of memory");
	for (size_t i = 0; i < names->n; i++) {
		int r = lookup_id(names->v[i], group, &ret->v[i]);
		if (r == -ENOENT)
			return fail(err, errlen, "%s %s: no such %s", opt, names->v[i], group ? "group" : "user");
		if (r < 0)
			return fail(err, errlen, "%s %s: %s", opt, names->v[i], strerror(-r));
		ret->n++;
	}
	return 0;
}

static int resolve_names(struct pd_config *c, char *err, size_t errlen)
{
	struct pd_strv owner = { &c->socket_owner, c->socket_owner ? 1 : 0 };
	struct pd_strv group = { &c->socket_group, c->socket_group ? 1 : 0 };
	struct pd_idv uid = { 0 }, gid = { 0 };
	int r = resolve_list(&c->allow_users, false, &c->allow_uids, "allow-user", err, errlen);
	if (r == 0)
		r = resolve_list(&c->allow_groups, true, &c->allow_gids, "allow-group", err, errlen);
	if (r == 0)
		r = resolve_list(&c->sk_export_users, false, &c->sk_export_uids, "session-key-export-user", err, errlen);
	if (r == 0)
		r = resolve_list(&c->sk_export_groups, true, &c->sk_export_gids, "session-key-export-group", err, errlen);
	if (r == 0)
		r = resolve_list(&owner, false, &uid, "socket-owner", err, errlen);
	if (r == 0)
		r = resolve_list(&group, true, &gid, "socket-group", err, errlen);
	c->socket_uid = uid.n ? (uid_t)uid.v[0] : (uid_t)-1;
	c->socket_gid = gid.n ? (gid_t)gid.v[0] : (gid_t)-1;
	free(uid.v);
	free(gid.v);
	return r;
}

struct pd_config *pd_config_free(struct pd_config *c)
{
	if (!c)
		return NULL;
	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
		void *p = (char *)c + opts[i].off;
		if (opts[i].type == T_STR)
			free(*(char **)p);
		else if (opts[i].type == T_LIST)
			strv_clear(p);
	}
	free(c->allow_uids.v);
	free(c->allow_gids.v);
	free(c->sk_export_uids.v);
	free(c->sk_export_gids.v);
	free(c->sk_export_pins);
	free(c->config_file);
	free(c);
	return NULL;
}

/* Splits "--name=value"; returns the option, or NULL. */
static const struct opt *match_flag(const char *a, const char **ret_inline)
{
	*ret_inline = NULL;
	if (a[0] == '-' && a[1] != '-' && a[1] && !a[2]) {
		for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
			if (opts[i].shortopt == a[1])
				return &opts[i];
		return NULL;
	}
	if (strncmp(a, "--", 2))
		return NULL;
	char name[64];
	const char *eq = strchr(a, '=');
	size_t n = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
	if (n >= sizeof(name))
		return NULL;
	memcpy(name, a + 2, n);
	name[n] = 0;
	if (eq)
		*ret_inline = eq + 1;
	return find_opt(name);
}

int pd_config_load(struct pd_config **ret, int argc, char **argv, char *err, size_t errlen)
{
	struct pd_config *c = calloc(1, sizeof(*c));
	bool cli_seen[sizeof(opts) / sizeof(opts[0])] = { 0 };
	int r;

	if (!c)
		return -ENOMEM;
	set_defaults(c);
	/* First pass: --config, --help, --version (the file comes before flags). */
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			pd_config_usage();
			pd_config_free(c);
			return 1;
		}
		if (!strcmp(a, "-V") || !strcmp(a, "--version")) {
			printf("pgpdecd %s\n", PD_VERSION);
			pd_config_free(c);
			return 1;
		}
		const char *v;
		if (!strcmp(a, "-c") || !strcmp(a, "--config")) {
			if (i + 1 >= argc) {
				pd_config_free(c);
				return fail(err, errlen, "--config needs a file name");
			}
			v = argv[++i];
		} else if (!strncmp(a, "--config=", 9)) {
			v = a + 9;
		} else {
			continue;
		}
		free(c->config_file);
		if (!(c->config_file = strdup(v))) {
			pd_config_free(c);
			return -ENOMEM;
		}
	}
	if (c->config_file) {
		struct ini_ctx x = { c, err, errlen, 0 };
		FILE *f = fopen(c->config_file, "re");
		if (!f) {
			r = -errno;
			fail(err, errlen, "config %s: %s", c->config_file, strerror(-r));
			pd_config_free(c);
			return r;
		}
		struct stat st;
		if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
			/* fopen() takes a directory, and inih reads it as an empty file */
			fclose(f);
			fail(err, errlen, "config %s is a directory: give the INI file (such as %s/pgpdecd.conf)",
			     c->config_file, c->config_file);
			pd_config_free(c);
			return -EISDIR;
		}
		r = ini_parse_file(f, ini_cb, &x);
		fclose(f);
		if (x.r < 0 || r != 0) {
			if (x.r == 0)
				fail(err, errlen, "config %s: syntax error on line %d", c->config_file, r);
			pd_config_free(c);
			return -EINVAL;
		}
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val;
		if (!strcmp(a, "-c") || !strcmp(a, "--config")) {
			i++;
			continue;
		}
		if (!strncmp(a, "--config=", 9))
			continue;
		const struct opt *o = match_flag(a, &val);
		if (!o) {
			pd_config_free(c);
			return fail(err, errlen, "unknown argument '%s' (see --help)", a);
		}
		if (!val) {
			if (o->type == T_BOOL && (i + 1 >= argc || argv[i + 1][0] == '-')) {
				val = "yes"; /* "--allow-plain-tcp" alone means yes */
			} else {
				if (i + 1 >= argc) {
					pd_config_free(c);
					return fail(err, errlen, "--%s needs a value", o->name);
				}
				val = argv[++i];
			}
		}
		char where[80];
		snprintf(where, sizeof(where), "--%s", o->name);
		r = set_opt(c, o, val, cli_seen, err, errlen, where);
		if (r < 0) {
			pd_config_free(c);
			return r;
		}
	}
	r = check(c, err, errlen);
	if (r == 0)
		r = resolve_names(c, err, errlen);
	if (r < 0) {
		pd_config_free(c);
		return r;
	}
	*ret = c;
	return 0;
}
