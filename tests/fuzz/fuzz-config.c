/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the daemon's configuration (daemon/config.c, with log.c,
 * linked as tests/unit/test-daemon-config.c does): a hostile INI file and
 * command line.  The input is the file's text up to the first NUL octet,
 * then the command-line arguments, each ending in NUL.  The harness writes
 * the file to a temporary path and passes --config PATH when the text is not
 * empty; the fuzzer's own --config/-c arguments are dropped (they would name
 * any file, /dev/stdin included).
 *
 * Beyond "no crash, no leak" it checks pd_config_load's contract: 0, 1
 * (--help/--version) or a negative error; *ret untouched unless 0; a
 * failure has a sentence; the same input gives the same outcome twice; and
 * a config that loads holds the rules the loader promises (something to
 * listen on, each listener unix:PATH (< 108 octets) or tcp:HOST:PORT, keys,
 * at most 256 workers, the limits that must be at least 1, max-memory of
 * at least 16M and above max-argon2-memory, the watermarks
 * in order, frame size and request buffer in range, at most 64 pins of 64
 * hex digits, one id for every user and group name).
 *
 * libFuzzer: contrib/fuzz.sh builds it; fuzz-main.c replays
 * tests/fuzz/corpus/config/ as a meson test.
 */
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "fuzz-config: check failed: %s\n", #x); abort(); } } while (0)

#define MAX_ARGS 256

static char ini_path[64];
static int ini_fd = -1, null_fd = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	if (ini_fd < 0) {
		/* tmpfs if there is one: the file is rewritten for every input */
		snprintf(ini_path, sizeof(ini_path), "%s/pd-fuzz-config-XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
		ini_fd = mkstemp(ini_path);
		CHECK(ini_fd >= 0);
		null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
		CHECK(null_fd >= 0);
		unsetenv("LISTEN_FDS"); /* else "nothing to listen on" is allowed */
	}
	return 0;
}

/* Unlinked at exit so that fuzz-main.c runs leave nothing behind. */
__attribute__((destructor)) static void cleanup(void)
{
	if (ini_fd >= 0)
		unlink(ini_path);
}

static bool is_pin(const char *p)
{
	size_t n = 0;
	for (; *p; p++) {
		if (*p == ':')
			continue;
		if (!strchr("0123456789abcdefABCDEF", *p))
			return false;
		n++;
	}
	return n == 64;
}

static void check_config(const struct pd_config *c)
{
	CHECK(c->listen.n >= 1);
	for (size_t i = 0; i < c->listen.n; i++) {
		const char *l = c->listen.v[i];
		CHECK(l);
		if (!strncmp(l, "unix:", 5))
			CHECK(l[5] && strlen(l + 5) < 108);
		else
			CHECK(!strncmp(l, "tcp:", 4) && strchr(l + 4, ':'));
	}
	CHECK(c->keys.n || c->keydir);
	for (size_t i = 0; i < c->keys.n; i++)
		CHECK(c->keys.v[i]);
	CHECK(c->workers <= 256);
	CHECK(c->queue_length && c->max_connections && c->max_requests_per_connection);
	CHECK(c->max_skesk_trials && c->max_argon2_passes && c->max_argon2_lanes);
	CHECK(c->max_kdf_work >= (1u << 20));
	CHECK(c->max_memory >= (16u << 20) && c->max_memory > c->max_argon2_memory);
	CHECK(c->max_frame_size >= (16u << 10) && c->max_frame_size <= (16u << 20));
	CHECK(c->request_buffer >= 4096 && c->request_buffer <= (64u << 20));
	CHECK(c->write_low_watermark < c->write_high_watermark);
	CHECK(c->max_write_buffer >= c->write_high_watermark);
	CHECK(c->tls_handshake_timeout_ms > 0);
	CHECK(!c->tls_min_version || !strcmp(c->tls_min_version, "1.2") || !strcmp(c->tls_min_version, "1.3"));
	CHECK(!pd_config_tls(c) || (c->tls_cert && c->tls_key));
	CHECK(c->tls_pins.n <= PD_TLS_MAX_PINS);
	for (size_t i = 0; i < c->tls_pins.n; i++)
		CHECK(is_pin(c->tls_pins.v[i]));
	CHECK(c->allow_uids.n == c->allow_users.n);
	CHECK(c->allow_gids.n == c->allow_groups.n);
	CHECK((c->socket_owner != NULL) == (c->socket_uid != (uid_t)-1));
	CHECK((c->socket_group != NULL) == (c->socket_gid != (gid_t)-1));
	/* metrics-listen: parsed whenever set, a port, and loopback unless
	 * metrics-allow-remote (checked here without addr.c's own test) */
	CHECK((c->metrics_listen && *c->metrics_listen) == (c->metrics_addr_len != 0));
	if (c->metrics_addr_len) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)&c->metrics_addr;
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&c->metrics_addr;
		static const uint8_t one[16] = { [15] = 1 }, mapped[12] = { [10] = 0xff, [11] = 0xff };
		bool loop;
		if (in->sin_family == AF_INET) {
			CHECK(c->metrics_addr_len == sizeof(*in) && in->sin_port);
			loop = ((const uint8_t *)&in->sin_addr)[0] == 127;
		} else {
			CHECK(in6->sin6_family == AF_INET6 && c->metrics_addr_len == sizeof(*in6) && in6->sin6_port);
			loop = !memcmp(in6->sin6_addr.s6_addr, one, 16) ||
			       (!memcmp(in6->sin6_addr.s6_addr, mapped, 12) && in6->sin6_addr.s6_addr[12] == 127);
		}
		CHECK(loop || c->metrics_allow_remote);
	}
}

/* One load, with stdout (--help, --version) sent to /dev/null. */
static int load(struct pd_config **ret, int argc, char **argv, char *err, size_t errlen)
{
	fflush(stdout);
	int saved = dup(1);
	CHECK(saved >= 0);
	CHECK(dup2(null_fd, 1) == 1);
	int r = pd_config_load(ret, argc, argv, err, errlen);
	fflush(stdout);
	CHECK(dup2(saved, 1) == 1);
	close(saved);
	return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	LLVMFuzzerInitialize(NULL, NULL);
	if (size > (1u << 16))
		return 0;
	const uint8_t *nul = memchr(data, 0, size);
	size_t ini_len = nul ? (size_t)(nul - data) : size;
	CHECK(ftruncate(ini_fd, 0) == 0);
	CHECK(pwrite(ini_fd, data, ini_len, 0) == (ssize_t)ini_len);

	/* Arguments: copies, NUL-terminated (the last one may lack its NUL). */
	char *copy = malloc(size + 1);
	CHECK(copy);
	memcpy(copy, data, size);
	copy[size] = 0;
	char *argv[MAX_ARGS + 4];
	int argc = 0;
	argv[argc++] = "pgpdecd";
	if (ini_len) {
		argv[argc++] = "--config";
		argv[argc++] = ini_path;
	}
	for (size_t pos = ini_len + 1; pos < size && argc < MAX_ARGS;) {
		char *a = copy + pos;
		pos += strlen(a) + 1;
		if (!strcmp(a, "-c") || !strncmp(a, "--config", 8))
			continue;
		argv[argc++] = a;
	}
	argv[argc] = NULL;

	struct pd_config *const untouched = (struct pd_config *)&untouched;
	struct pd_config *c = untouched, *c2 = untouched;
	char err[512], err2[512];
	memset(err, 0, sizeof(err));
	memset(err2, 0, sizeof(err2));
	int r = load(&c, argc, argv, err, sizeof(err));
	CHECK(r == 0 || r == 1 || r < 0);
	CHECK(memchr(err, 0, sizeof(err)) != NULL);
	if (r != 0)
		CHECK(c == untouched);
	if (r < 0)
		CHECK(err[0] != 0);
	if (r == 0) {
		CHECK(c && c != untouched);
		check_config(c);
	}

	/* The same input again: the same outcome. */
	int r2 = load(&c2, argc, argv, err2, sizeof(err2));
	CHECK(r2 == r);
	CHECK(strcmp(err, err2) == 0);
	if (r == 0) {
		CHECK(c2->listen.n == c->listen.n && c2->keys.n == c->keys.n && c2->workers == c->workers);
		CHECK(c2->max_message_size == c->max_message_size && c2->max_frame_size == c->max_frame_size);
		CHECK(c2->socket_mode == c->socket_mode && c2->tls_pins.n == c->tls_pins.n);
		for (size_t i = 0; i < c->listen.n; i++)
			CHECK(strcmp(c->listen.v[i], c2->listen.v[i]) == 0);
		pd_config_free(c);
		pd_config_free(c2);
	}
	free(copy);
	return 0;
}
