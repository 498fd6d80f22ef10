/* SPDX-License-Identifier: MIT */
/*
 * pd_config: every setting of the daemon, from built-in defaults, then the
 * INI file (libinih), then the command line, in that order.  Every option
 * has the same name as an INI key and as a flag (`workers = 4` is
 * `--workers 4`).  List options (listen, key, key-passphrase, tls-pin,
 * allow-user, allow-group) accumulate; a list given on the command line
 * replaces the file's.
 *
 * The struct is public (plain data read by every daemon module); it is built
 * whole by pd_config_load() and never changed afterwards, so a reload builds
 * a new one and swaps it in.  User and group names are resolved to ids
 * there (an unknown name is a configuration error), off the loop.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#define PD_TLS_MAX_PINS 64 /* more tls-pin values are a configuration error */

struct pd_strv { /* public, by value: a growable list of strings */
	char **v;
	size_t n;
};

struct pd_idv { /* public, by value: uids or gids */
	unsigned *v;
	size_t n;
};

struct pd_config {
	char *config_file;          /* NULL: none */
	struct pd_strv listen;      /* "unix:PATH" or "tcp:HOST:PORT" */
	struct pd_strv keys;        /* secret key files */
	char *keydir;               /* every regular file in it is a key file */
	char *passphrase_file;      /* first line unlocks protected keys */
	struct pd_strv key_passphrases; /* "KEYFILE:PASSFILE": one key file's own passphrase */
	bool strict_keys;           /* a skipped (unusable) key fails the load */
	unsigned workers;           /* 0 = one per CPU */
	char *rsa_backend;          /* "default", "openssl", "gcrypt" */
	char *ecdh_backend;         /* "default", "openssl", "gcrypt" */
	size_t secmem_size;         /* secure memory bytes, libgcrypt's and OpenSSL's each */
	int log_level;
	int log_requests;           /* level of the per-request line; -1: off */

	/* limits */
	unsigned queue_length;      /* decryptions in progress, all connections */
	unsigned max_connections;
	unsigned max_connections_per_peer; /* per uid (unix) or address (tcp); 0 = off */
	unsigned max_requests_per_connection; /* pipelined requests */
	uint64_t max_message_size;  /* ciphertext bytes per message */
	uint64_t max_output_size;   /* plaintext bytes per message */
	uint32_t max_frame_size;    /* largest frame accepted (also announced) */
	uint64_t idle_timeout_ms;   /* connection with nothing to do */
	uint64_t message_timeout_ms;/* one decryption, first frame to result */
	uint64_t write_timeout_ms;  /* no write progress at all: the peer is gone */
	uint64_t drain_timeout_ms;  /* SIGTERM: in-flight work gets this long */
	size_t write_high_watermark;/* per connection: stop reading above */
	size_t write_low_watermark; /* resume below */
	size_t max_write_buffer;    /* unsent output of all connections that pauses decryption (iii) */
	size_t request_buffer;      /* ciphertext/plaintext buffered per request, each way */
	size_t request_buffer_max;  /* ... grown to while a large message streams in */
	uint64_t max_verified_size; /* plaintext held for one verified-only request */
	uint64_t max_verified_total;/* ... for all of them */
	uint64_t max_memory;        /* messages in progress, all together (admission.h) */
	uint32_t max_key_trials;
	uint64_t max_argon2_memory;  /* bytes; Argon2 of password-encrypted messages (0: none) */
	uint32_t max_argon2_passes, max_argon2_lanes, max_skesk_trials;
	uint64_t max_kdf_work;       /* bytes hashed per message (Argon2: memory x passes / 2) */
	bool allow_sed;

	/* unix sockets */
	mode_t socket_mode;
	char *socket_owner;
	char *socket_group;
	struct pd_strv allow_users; /* SO_PEERCRED allow-lists; empty = anyone who can connect */
	struct pd_strv allow_groups;
	/* The names above as ids, resolved when the config is loaded (the loop
	 * never asks the user database, which may be a network service). */
	struct pd_idv allow_uids;
	struct pd_idv allow_gids;
	uid_t socket_uid;           /* (uid_t)-1: unchanged */
	gid_t socket_gid;           /* (gid_t)-1: unchanged */

	/* Session-key export (WANT_SESSION_KEY): off unless allowed, and then
	 * only for the unix users/groups and TLS client certificates named
	 * (peer.c decides; at least one list is required). */
	bool allow_session_key_export;
	struct pd_strv sk_export_users;
	struct pd_strv sk_export_groups;
	struct pd_strv sk_export_pins_hex; /* as written: hex SHA-256 of client certificates (DER) */
	struct pd_idv sk_export_uids;      /* resolved at load, like allow_uids */
	struct pd_idv sk_export_gids;
	uint8_t (*sk_export_pins)[32];     /* sk_export_pins_hex decoded */
	size_t n_sk_export_pins;

	/* tcp */
	bool allow_plain_tcp;       /* plain TCP (loopback only) when no TLS is configured */
	char *tls_cert;
	char *tls_key;
	char *tls_ca;
	bool tls_require_client_cert;
	struct pd_strv tls_pins;    /* hex SHA-256 of client certificates (DER) */
	char *tls_min_version;      /* "1.2" or "1.3" */
	uint64_t tls_handshake_timeout_ms;

	/* the HTTP /metrics endpoint (metrics.h) */
	char *metrics_listen;       /* NULL or "": off */
	bool metrics_allow_remote;  /* a non-loopback metrics-listen address */
	struct sockaddr_storage metrics_addr; /* metrics_listen parsed; valid when metrics_addr_len */
	socklen_t metrics_addr_len;
};

/** Build a config from defaults, the --config file and argv.  On failure a
 * sentence goes to err (returns -EINVAL or -errno); *ret untouched.
 * Returns 1 (and no config) when --help or --version was handled. */
int pd_config_load(struct pd_config **ret, int argc, char **argv, char *err, size_t errlen);
/** Free a config; accepts NULL, returns NULL. */
struct pd_config *pd_config_free(struct pd_config *c);
/** Print the --help text. */
void pd_config_usage(void);
/** Whether a "tcp:" listener of this config gets TLS. */
bool pd_config_tls(const struct pd_config *c);
