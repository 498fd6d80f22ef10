/* SPDX-License-Identifier: MIT */
/* Defaults, INI file and flags into one struct pd_milter_config (see milter-config.h). */
#include <errno.h>
#include <grp.h>
#include <ini.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pd-config.h"
#include "milter-config.h"
#include "units.h"

enum opt_type { T_STR, T_UINT, T_SIZE, T_MS, T_BOOL, T_MODE, T_ACTION, T_HP, T_BIND };

struct opt {
	const char *name;
	enum opt_type type;
	size_t off;
};

#define O(f) offsetof(struct pd_milter_config, f)
static const struct opt opts[] = {
	{ "listen", T_STR, O(listen) },
	{ "socket-mode", T_MODE, O(socket_mode) },
	{ "socket-group", T_STR, O(socket_group) },
	{ "socket", T_STR, O(socket) },
	{ "connect", T_STR, O(connect) },
	{ "allow-plain-tcp", T_BOOL, O(allow_plain_tcp) },
	{ "tls-ca", T_STR, O(tls_ca) },
	{ "tls-cert", T_STR, O(tls_cert) },
	{ "tls-key", T_STR, O(tls_key) },
	{ "tls-server-name", T_STR, O(tls_server_name) },
	{ "tls-pin", T_STR, O(tls_pin) },
	{ "timeout", T_MS, O(timeout_ms) },
	{ "concurrency", T_UINT, O(concurrency) },
	{ "spool-dir", T_STR, O(spool_dir) },
	{ "max-message-size", T_SIZE, O(max_message_size) },
	{ "on-no-key", T_ACTION, O(policy.on_no_key) },
	{ "on-failure", T_ACTION, O(policy.on_failure) },
	{ "protected-headers", T_HP, O(policy.protected_headers) },
	{ "keep-original", T_BOOL, O(policy.keep_original) },
	{ "max-depth", T_UINT, O(policy.max_depth) },
	{ "max-parts", T_UINT, O(policy.max_parts) },
	{ "max-plaintext-size", T_SIZE, O(policy.max_plaintext) },
	{ "recipient-binding", T_BIND, O(binding) },
};
#undef O
#define N_OPTS (sizeof(opts) / sizeof(opts[0]))

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static int set_defaults(struct pd_milter_config *c)
{
	if (!(c->listen = strdup(PD_MILTER_DEFAULT_LISTEN)) || !(c->socket = strdup(PDC_DEFAULT_SOCKET)))
		return -ENOMEM;
	c->socket_mode = 0660;
	c->socket_gid = (gid_t)-1;
	c->timeout_ms = 60000;
	c->concurrency = 8;
	c->max_message_size = 64u << 20;
	pd_mail_policy_default(&c->policy);
	return 0;
}

static int set_opt(struct pd_milter_config *c, const struct opt *o, const char *val, char *err, size_t errlen,
                   const char *where)
{
	void *p = (char *)c + o->off;
	uint64_t v;

	switch (o->type) {
	case T_STR:
		free(*(char **)p);
		*(char **)p = NULL;
		if (!*val) /* "tls-ca =" unsets */
			break;
		if (!(*(char **)p = strdup(val)))
			return fail(err, errlen, "out of memory");
		break;
	case T_UINT:
		if (pd_parse_size(val, &v) < 0 || v > UINT32_MAX)
			return fail(err, errlen, "%s%s wants a number, not '%s'", where, o->name, val);
		*(unsigned *)p = (unsigned)v;
		break;
	case T_SIZE:
		if (pd_parse_size(val, &v) < 0)
			return fail(err, errlen, "%s%s wants a size such as 64K or 2G, not '%s'", where, o->name, val);
		*(uint64_t *)p = v;
		break;
	case T_MS:
		if (pd_parse_ms(val, &v) < 0)
			return fail(err, errlen, "%s%s wants a duration such as 30s or 500ms, not '%s'", where, o->name, val);
		*(uint64_t *)p = v;
		break;
	case T_BOOL:
		if (pd_parse_bool(val, p) < 0)
			return fail(err, errlen, "%s%s wants yes or no, not '%s'", where, o->name, val);
		break;
	case T_MODE: {
		char *end;
		unsigned long m = strtoul(val, &end, 8);
		if (*val == 0 || *end || m > 0777)
			return fail(err, errlen, "%s%s wants an octal mode such as 0660, not '%s'", where, o->name, val);
		*(mode_t *)p = (mode_t)m;
		break;
	}
	case T_ACTION: {
		enum pd_mail_action a;
		if (pd_mail_action_parse(val, &a) < 0)
			return fail(err, errlen, "%s%s wants pass, reject or quarantine, not '%s'", where, o->name, val);
		if (o->off == offsetof(struct pd_milter_config, policy.on_no_key) && a == PD_MAIL_QUARANTINE)
			return fail(err, errlen, "%s%s wants pass or reject, not '%s'", where, o->name, val);
		*(enum pd_mail_action *)p = a;
		break;
	}
	case T_HP: {
		enum pd_mail_hp h;
		if (pd_mail_hp_parse(val, &h) < 0)
			return fail(err, errlen, "%s%s wants none, subject or all, not '%s'", where, o->name, val);
		*(enum pd_mail_hp *)p = h;
		break;
	}
	case T_BIND: {
		static const char *const names[] = { "none", "address", "domain" };
		size_t i = 0;
		while (i < 3 && strcasecmp(val, names[i]))
			i++;
		if (i == 3)
			return fail(err, errlen, "%s%s wants none, address or domain, not '%s'", where, o->name, val);
		*(enum pd_milter_binding *)p = (enum pd_milter_binding)i;
		break;
	}
	}
	return 0;
}

struct ini_ctx {
	struct pd_milter_config *c;
	char *err;
	size_t errlen;
	int r;
	char msg[512]; /* the handler's message; the line number comes from ini_parse_file() */
};

static int ini_cb(void *user, const char *section, const char *name, const char *value)
{
	struct ini_ctx *x = user;
	const struct opt *o = NULL;
	if (x->r < 0) /* inih goes on after an error: keep the first one */
		return 0;

	for (size_t i = 0; i < N_OPTS; i++)
		if (!strcmp(opts[i].name, name))
			o = &opts[i];
	if (section && *section) {
		x->r = fail(x->msg, sizeof(x->msg), "unknown section [%s] (the keys have no section)", section);
		return 0;
	}
	if (!o) {
		x->r = fail(x->msg, sizeof(x->msg), "unknown setting '%s'", name);
		return 0;
	}
	/* "concurrency = 4 # four": the inline comment is not the value */
	char *v = strndup(value, pd_ini_value_len(value));
	if (!v) {
		x->r = fail(x->msg, sizeof(x->msg), "out of memory");
		return 0;
	}
	x->r = set_opt(x->c, o, v, x->msg, sizeof(x->msg), "");
	free(v);
	return x->r == 0;
}

static int lookup_group(const char *name, gid_t *ret)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(name, &end, 10);
	if (*name && !*end) {
		if (errno || v >= (gid_t)-1)
			return -ERANGE;
		*ret = (gid_t)v;
		return 0;
	}
	size_t cap = 4096;
	char *buf = NULL;
	int r;
	for (;;) {
		char *nb = realloc(buf, cap);
		if (!nb) {
			free(buf);
			return -ENOMEM;
		}
		buf = nb;
		struct group g, *res = NULL;
		r = getgrnam_r(name, &g, buf, cap, &res);
		if (r == 0 && res)
			*ret = g.gr_gid;
		else if (r == 0)
			r = ENOENT;
		if (r != ERANGE || cap >= (1u << 20))
			break;
		cap *= 2;
	}
	free(buf);
	return -r;
}

static int check(struct pd_milter_config *c, char *err, size_t errlen)
{
	const char *l = c->listen;
	if (!l)
		return fail(err, errlen, "listen: nothing to listen on");
	if (!strncmp(l, "unix:", 5) || !strncmp(l, "local:", 6)) {
		const char *path = strchr(l, ':') + 1;
		if (*path != '/' || strlen(path) >= 108)
			return fail(err, errlen, "listen %s: want an absolute unix socket path (at most 107 octets)", l);
	} else if (!strncmp(l, "inet:", 5) || !strncmp(l, "inet6:", 6)) {
		const char *port = strchr(l, ':') + 1;
		char *end;
		unsigned long p = strtoul(port, &end, 10);
		if (end == port || p == 0 || p > 65535 || (*end && *end != '@') || (*end == '@' && !end[1]))
			return fail(err, errlen, "listen %s: want inet:PORT@HOST or inet:PORT", l);
	} else {
		return fail(err, errlen, "listen %s: want unix:PATH or inet:PORT@HOST", l);
	}
	if (c->socket_group) {
		int r = lookup_group(c->socket_group, &c->socket_gid);
		if (r == -ENOENT)
			return fail(err, errlen, "socket-group %s: no such group", c->socket_group);
		if (r < 0)
			return fail(err, errlen, "socket-group %s: %s", c->socket_group, strerror(-r));
	}
	if (c->connect) {
		const char *colon = strrchr(c->connect, ':');
		if (!colon || colon == c->connect || !colon[1])
			return fail(err, errlen, "connect %s: want HOST:PORT", c->connect);
		const char *h = c->connect;
		size_t hl = (size_t)(colon - h);
		if (h[0] == '[' && hl > 2 && h[hl - 1] == ']') { /* [::1]:2000 */
			h++;
			hl -= 2;
		}
		if (!(c->connect_host = strndup(h, hl)) || !(c->connect_port = strdup(colon + 1)))
			return fail(err, errlen, "out of memory");
	} else if (c->tls_ca || c->tls_cert || c->tls_key || c->tls_server_name || c->tls_pin) {
		return fail(err, errlen, "tls-ca, tls-cert, tls-key, tls-server-name and tls-pin need connect = HOST:PORT");
	}
	if (!c->connect && !c->socket)
		return fail(err, errlen, "give socket = PATH or connect = HOST:PORT");
	if (!!c->tls_cert != !!c->tls_key)
		return fail(err, errlen, "a TLS client certificate needs both tls-cert and tls-key");
	if (c->allow_plain_tcp && (c->tls_ca || c->tls_cert || c->tls_pin))
		return fail(err, errlen, "allow-plain-tcp contradicts the tls-* settings");
	if (c->timeout_ms < 100 || c->timeout_ms > 86400000)
		return fail(err, errlen, "timeout must be between 100ms and 24h");
	if (c->concurrency < 1 || c->concurrency > 1024)
		return fail(err, errlen, "concurrency must be between 1 and 1024");
	if (c->max_message_size < 4096)
		return fail(err, errlen, "max-message-size must be at least 4K");
	if (c->spool_dir && c->spool_dir[0] != '/')
		return fail(err, errlen, "spool-dir must be an absolute path");
	if (!c->policy.max_depth || !c->policy.max_parts)
		return fail(err, errlen, "max-depth and max-parts must be at least 1");
	if (c->policy.max_depth > PD_MAIL_MAX_DEPTH)
		return fail(err, errlen, "max-depth must be at most 16 (each level may parse one more entity)");
	c->policy.tmpdir = c->spool_dir;
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "Usage: pgpdecd-milter [-c FILE] [--foreground] [--check-config] [-h] [-V]\n\n"
	           "Milter for Postfix and Sendmail that decrypts OpenPGP mail through pgpdecd.\n\n"
	           "  -c, --config FILE   INI config file (default " PD_MILTER_DEFAULT_CONFIG ")\n"
	           "  -f, --foreground    do not detach (what systemd runs)\n"
	           "      --check-config  load the config, report, exit (0 valid, 78 not)\n"
	           "  -h, --help          this text\n"
	           "  -V, --version       version\n\n"
	           "Logs go to standard error, one line per message.  See pgpdecd-milter(8).\n");
}

int pd_milter_config_load(struct pd_milter_config **ret, int argc, char **argv, char *err, size_t errlen)
{
	struct pd_milter_config *c = calloc(1, sizeof(*c));
	const char *file = NULL;
	int r;

	if (!c || set_defaults(c) < 0) {
		pd_milter_config_free(c);
		return -ENOMEM;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			pd_milter_config_free(c);
			return 1;
		} else if (!strcmp(a, "-V") || !strcmp(a, "--version")) {
			printf("pgpdecd-milter %s\n", PD_VERSION);
			pd_milter_config_free(c);
			return 1;
		} else if (!strcmp(a, "-c") || !strcmp(a, "--config")) {
			if (i + 1 >= argc) {
				pd_milter_config_free(c);
				fail(err, errlen, "%s needs a file name", a);
				return -EDOM;
			}
			file = argv[++i];
		} else if (!strncmp(a, "--config=", 9)) {
			file = a + 9;
		} else if (!strcmp(a, "-f") || !strcmp(a, "--foreground")) {
			c->foreground = true;
		} else if (!strcmp(a, "--check-config")) {
			c->check_only = true;
		} else {
			pd_milter_config_free(c);
			fail(err, errlen, "unknown argument '%s' (see --help)", a);
			return -EDOM;
		}
	}
	bool explicit = file != NULL;
	if (!file)
		file = PD_MILTER_DEFAULT_CONFIG;
	FILE *f = fopen(file, "re");
	if (!f && (explicit || errno != ENOENT)) {
		r = -errno;
		fail(err, errlen, "config %s: %s", file, strerror(-r));
		pd_milter_config_free(c);
		return r == -ENOMEM ? r : -EINVAL;
	}
	struct stat st;
	if (f && fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
		/* fopen() takes a directory, and inih reads it as an empty file */
		fclose(f);
		fail(err, errlen, "config %s is a directory: give the file (such as %s/milter.conf)", file, file);
		pd_milter_config_free(c);
		return -EINVAL;
	}
	if (f) {
		struct ini_ctx x = { .c = c, .err = err, .errlen = errlen };
		if (!(c->config_file = strdup(file))) {
			fclose(f);
			pd_milter_config_free(c);
			return -ENOMEM;
		}
		r = ini_parse_file(f, ini_cb, &x);
		fclose(f);
		if (r != 0) {
			if (r < 0)
				fail(err, errlen, "%s: cannot read (%d)", file, r);
			else if (x.r < 0)
				fail(err, errlen, "%s:%d: %s", file, r, x.msg);
			else
				fail(err, errlen, "%s:%d: syntax error", file, r);
			pd_milter_config_free(c);
			return -EINVAL;
		}
	}
	r = check(c, err, errlen);
	if (r < 0) {
		pd_milter_config_free(c);
		return r;
	}
	*ret = c;
	return 0;
}

void pd_milter_config_client(const struct pd_milter_config *c, struct pdc_config *ret)
{
	memset(ret, 0, sizeof(*ret));
	ret->socket_path = c->socket;
	ret->host = c->connect_host;
	ret->port = c->connect_port;
	ret->no_tls = c->allow_plain_tcp;
	ret->tls_ca = c->tls_ca;
	ret->tls_cert = c->tls_cert;
	ret->tls_key = c->tls_key;
	ret->tls_server_name = c->tls_server_name;
	ret->tls_pin = c->tls_pin;
	ret->timeout_ms = (int)c->timeout_ms;
	ret->software = "pgpdecd-milter/" PD_VERSION;
}

struct pd_milter_config *pd_milter_config_free(struct pd_milter_config *c)
{
	if (!c)
		return NULL;
	for (size_t i = 0; i < N_OPTS; i++)
		if (opts[i].type == T_STR)
			free(*(char **)((char *)c + opts[i].off));
	free(c->connect_host);
	free(c->connect_port);
	free(c->config_file);
	free(c);
	return NULL;
}
