/* SPDX-License-Identifier: MIT */
/*
 * pd_milter_config: every setting of pgpdecd-milter, from built-in defaults,
 * then the INI file (libinih; /etc/pgpdecd/milter.conf unless -c), then the
 * few command-line flags.  Key names follow the daemon's (kebab-case, sizes
 * with K/M/G, durations with ms/s/m/h).  An unknown key or a bad value is an
 * error naming FILE:LINE.  The struct is plain data, built whole by
 * pd_milter_config_load() and never changed afterwards.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "pdclient.h"
#include "pdmail.h"

#define PD_MILTER_DEFAULT_CONFIG "/etc/pgpdecd/milter.conf"
#define PD_MILTER_DEFAULT_LISTEN "unix:/run/pgpdecd-milter/milter.sock"

/* Which keys may open a mail's pieces (recipient-binding): any key the
 * daemon holds, or only keys bound to every envelope recipient (its
 * address, or its domain) by their User IDs (pd_mail_set_bind). */
enum pd_milter_binding { PD_BIND_NONE, PD_BIND_ADDRESS, PD_BIND_DOMAIN };

struct pd_milter_config {
	char *config_file;          /* the file read (NULL when none was given and the default is absent) */
	char *listen;               /* libmilter address: unix:PATH, local:PATH, inet:PORT@HOST, inet6:PORT@HOST */
	mode_t socket_mode;         /* unix socket permissions (default 0660) */
	char *socket_group;         /* unix socket group (NULL: the process's) */
	gid_t socket_gid;           /* resolved, (gid_t)-1 if none */
	/* the daemon (struct pdc_config's fields) */
	char *socket;               /* daemon Unix socket (default PDC_DEFAULT_SOCKET) */
	char *connect;              /* HOST:PORT: TCP with TLS instead of the socket */
	char *connect_host, *connect_port; /* split from connect */
	bool allow_plain_tcp;       /* TCP without TLS (a daemon on loopback only) */
	char *tls_ca, *tls_cert, *tls_key, *tls_server_name, *tls_pin;
	uint64_t timeout_ms;        /* daemon I/O, waiting for a free decryptor, the MTA (default 60s) */
	unsigned concurrency;       /* decryptors (daemon connections) shared by all SMTP sessions (default 8) */
	char *spool_dir;            /* temporary files (NULL: $TMPDIR or /tmp) */
	uint64_t max_message_size;  /* spooled octets per mail, beyond: 552 5.3.4 (default 64M) */
	enum pd_milter_binding binding; /* recipient-binding (default none) */
	struct pd_mail_policy policy; /* on-no-key, on-failure, protected-headers, keep-original, max-depth, max-parts */
	/* command line */
	bool foreground;
	bool check_only;
};

/**
 * Load defaults, the file and argv.  Returns 0 (ret set), 1 when -h or -V
 * was answered (nothing to run), -EINVAL with a message in err for a
 * configuration error (exit 78), -EDOM for a usage error (exit 64), or
 * another negative errno.
 */
int pd_milter_config_load(struct pd_milter_config **ret, int argc, char **argv, char *err, size_t errlen);
/** Fill a pdc_config pointing into c (valid while c lives). */
void pd_milter_config_client(const struct pd_milter_config *c, struct pdc_config *ret);
/** Free; accepts NULL, returns NULL. */
struct pd_milter_config *pd_milter_config_free(struct pd_milter_config *c);
