/* SPDX-License-Identifier: MIT */
/* daemon/config.c: defaults, INI file, flags and their precedence, errors. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <netinet/in.h>

#include "config.h"
#include "log.h"

#define ARGV(...) ((char *[]){ "pgpdecd", __VA_ARGS__, NULL })
#define ARGC(...) ((int)(sizeof((char *[]){ "pgpdecd", __VA_ARGS__ }) / sizeof(char *)))
#define LOAD(ret, err, ...) pd_config_load(ret, ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), err, sizeof(err))

static char *write_ini(const char *text)
{
	static char path[64];
	snprintf(path, sizeof(path), "/tmp/pd-test-config-XXXXXX");
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

static void test_flags_and_defaults(void **state)
{
	struct pd_config *c = NULL;
	char err[256] = "";
	int r = LOAD(&c, err, "--listen", "unix:/run/x.sock", "-k", "a.key", "--key=b.key", "--workers=3",
	             "--max-message-size", "10M", "--idle-timeout", "500ms", "--message-timeout", "2m",
	             "--allow-plain-tcp", "--socket-mode", "0600");
	assert_int_equal(r, 0);
	assert_int_equal(c->listen.n, 1);
	assert_string_equal(c->listen.v[0], "unix:/run/x.sock");
	assert_int_equal(c->keys.n, 2);
	assert_string_equal(c->keys.v[1], "b.key");
	assert_int_equal(c->workers, 3);
	assert_int_equal(c->max_message_size, 10u << 20);
	assert_int_equal(c->idle_timeout_ms, 500);
	assert_int_equal(c->message_timeout_ms, 120000);
	assert_true(c->allow_plain_tcp);
	assert_int_equal(c->socket_mode, 0600);
	/* defaults */
	assert_int_equal(c->queue_length, 512);
	assert_int_equal(c->max_frame_size, 65536);
	assert_true(c->tls_require_client_cert);
	assert_int_equal(c->log_level, PD_LOG_INFO);
	pd_config_free(c);
}

static void test_file_then_flags(void **state)
{
	struct pd_config *c = NULL;
	char err[256] = "";
	char *path = write_ini("; comment\n[server]\nlisten = unix:/a\nlisten = unix:/b\nworkers = 2\n"
	                       "[keys]\nkey = k1\n[limits]\nqueue-length = 7\nrequest-buffer = 64K\n");
	int r = LOAD(&c, err, "--config", path, "--listen", "unix:/c", "--workers", "5");
	assert_int_equal(r, 0);
	assert_int_equal(c->listen.n, 1); /* the command line's list replaces the file's */
	assert_string_equal(c->listen.v[0], "unix:/c");
	assert_int_equal(c->keys.n, 1);
	assert_string_equal(c->keys.v[0], "/tmp/k1"); /* relative to the file's directory */
	assert_int_equal(c->workers, 5);
	assert_int_equal(c->queue_length, 7);
	assert_int_equal(c->request_buffer, 64u << 10);
	pd_config_free(c);
	c = NULL;
	r = LOAD(&c, err, "-c", path);
	assert_int_equal(r, 0);
	assert_int_equal(c->listen.n, 2);
	pd_config_free(c);
	unlink(path);
}

/* Inline comments, and paths in the file relative to its directory (those
 * of the command line stay as given). */
static void test_comments_and_relative_paths(void **state)
{
	struct pd_config *c = NULL;
	char err[256] = "";
	char *path = write_ini("[pgpdecd]\nworkers = 3 # three\nqueue-length = 9\t; nine\n"
	                       "key = keys/a.gpg # the key\nkey = /abs/b.gpg\nkeydir = kd\n"
	                       "tls-pin = 01:23#not-a-comment\nlisten = unix:rel.sock ; here\n"
	                       "listen = tcp:127.0.0.1:1\nallow-plain-tcp = yes\n");
	int r = LOAD(&c, err, "--config", path, "--passphrase-file", "pass");
	/* the pin does not parse: "#not-a-comment" is part of the value */
	assert_true(r < 0);
	assert_non_null(strstr(err, "01:23#not-a-comment"));
	unlink(path);
	path = write_ini("[pgpdecd]\nworkers = 3 # three\nqueue-length = 9\t; nine\n"
	                 "key = keys/a.gpg # the key\nkey = /abs/b.gpg\nkeydir = kd\n"
	                 "listen = unix:rel.sock ; here\nlisten = tcp:127.0.0.1:1\nallow-plain-tcp = yes\n");
	r = LOAD(&c, err, "--config", path, "--passphrase-file", "pass");
	assert_int_equal(r, 0);
	assert_int_equal(c->workers, 3);
	assert_int_equal(c->queue_length, 9);
	assert_string_equal(c->keys.v[0], "/tmp/keys/a.gpg");
	assert_string_equal(c->keys.v[1], "/abs/b.gpg");
	assert_string_equal(c->keydir, "/tmp/kd");
	assert_string_equal(c->listen.v[0], "unix:/tmp/rel.sock");
	assert_string_equal(c->listen.v[1], "tcp:127.0.0.1:1");
	assert_string_equal(c->passphrase_file, "pass");
	pd_config_free(c);
	unlink(path);
}

static void expect_error(int r, const char *err, const char *needle)
{
	assert_true(r < 0);
	if (!strstr(err, needle))
		fail_msg("error '%s' lacks '%s'", err, needle);
}

static void test_errors(void **state)
{
	struct pd_config *c = NULL;
	char err[256] = "";
	char *path = write_ini("[limits]\nqueue-lenght = 7\n");
	expect_error(LOAD(&c, err, "--config", path, "--listen", "unix:/x", "--key", "k"), err, "unknown setting");
	unlink(path);
	path = write_ini("[limits\nbroken\n");
	expect_error(LOAD(&c, err, "--config", path, "--listen", "unix:/x", "--key", "k"), err, "line 1");
	unlink(path);
	/* inih reads on after an error: the first one is reported, not the last */
	path = write_ini("[limits]\nqueue-lenght = 7\nqueue-length = 7\n");
	expect_error(LOAD(&c, err, "--config", path, "--listen", "unix:/x", "--key", "k"), err, "queue-lenght");
	unlink(path);
	expect_error(LOAD(&c, err, "--config", "/nonexistent/pgpdecd.conf"), err, "/nonexistent/pgpdecd.conf");
	assert_int_equal(LOAD(&c, err, "--config", "/tmp", "--listen", "unix:/x", "--key", "k"), -EISDIR);
	expect_error(-EISDIR, err, "config /tmp is a directory");
	expect_error(LOAD(&c, err, "--listen", "tcp:127.0.0.1:1", "--key", "k"), err, "allow-plain-tcp");
	expect_error(LOAD(&c, err, "--listen", "unix:", "--key", "k"), err, "no socket path");
	expect_error(LOAD(&c, err, "--listen", "unix:/x"), err, "no keys");
	expect_error(LOAD(&c, err, "--key", "k"), err, "nothing to listen on");
	expect_error(LOAD(&c, err, "--listen", "tcp:localhost", "--key", "k"), err, "tcp:HOST:PORT");
	expect_error(LOAD(&c, err, "--listen", "udp:x", "--key", "k"), err, "unix:PATH");
	expect_error(LOAD(&c, err, "--listen", "unix:/x", "--key", "k", "--max-message-size", "12Q"), err, "size");
	expect_error(LOAD(&c, err, "--listen", "unix:/x", "--key", "k", "--idle-timeout", "-3"), err, "duration");
	expect_error(LOAD(&c, err, "--listen", "unix:/x", "--key", "k", "--workers"), err, "needs a value");
	expect_error(LOAD(&c, err, "--listen", "unix:/x", "--key", "k", "--frobnicate"), err, "unknown argument");
	expect_error(LOAD(&c, err, "--listen", "unix:/x", "--key", "k", "--write-low-watermark", "2M"), err,
	             "low-watermark");
	expect_error(LOAD(&c, err, "--listen", "unix:/x", "--key", "k", "--max-write-buffer", "512K"), err,
	             "max-write-buffer");
	expect_error(LOAD(&c, err, "--listen", "unix:/x", "--key", "k", "--tls-cert", "c.pem", "--tls-key", "k.pem"),
	             err, "tls-ca");
	expect_error(LOAD(&c, err, "--listen", "unix:/x", "--key", "k", "--tls-pin", "abcd"), err, "64 hex");
	expect_error(LOAD(&c, err, "--listen", "unix:/x", "--key", "k", "--log-level", "loud"), err, "log-level");
	expect_error(LOAD(&c, err, "--listen", "unix:/x", "--key", "k", "--socket-mode", "999"), err, "octal");
	assert_null(c); /* untouched on failure */
}

/* metrics-listen: PORT means loopback; numeric addresses only; anything
 * but loopback needs metrics-allow-remote. */
static void test_metrics_listen(void **state)
{
	struct pd_config *c = NULL;
	char err[256] = "";
	const struct sockaddr_in *in;
	const struct sockaddr_in6 *in6;

	assert_int_equal(LOAD(&c, err, "--listen", "unix:/x", "--key", "k"), 0);
	assert_int_equal(c->metrics_addr_len, 0); /* off by default */
	c = pd_config_free(c);
	assert_int_equal(LOAD(&c, err, "--listen", "unix:/x", "--key", "k", "--metrics-listen", "9469"), 0);
	in = (const struct sockaddr_in *)&c->metrics_addr;
	assert_int_equal(c->metrics_addr_len, sizeof(*in));
	assert_int_equal(in->sin_family, AF_INET);
	assert_int_equal(ntohl(in->sin_addr.s_addr), INADDR_LOOPBACK);
	assert_int_equal(ntohs(in->sin_port), 9469);
	c = pd_config_free(c);
	assert_int_equal(LOAD(&c, err, "--listen", "unix:/x", "--key", "k", "--metrics-listen", "127.0.0.2:1"), 0);
	c = pd_config_free(c);
	assert_int_equal(LOAD(&c, err, "--listen", "unix:/x", "--key", "k", "--metrics-listen", "[::1]:65535"), 0);
	in6 = (const struct sockaddr_in6 *)&c->metrics_addr;
	assert_int_equal(in6->sin6_family, AF_INET6);
	assert_true(IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr));
	assert_int_equal(ntohs(in6->sin6_port), 65535);
	c = pd_config_free(c);
	/* an empty value turns a file's setting off */
	char *path = write_ini("metrics-listen = 9469\n");
	assert_int_equal(LOAD(&c, err, "-c", path, "--listen", "unix:/x", "--key", "k", "--metrics-listen", ""), 0);
	assert_int_equal(c->metrics_addr_len, 0);
	c = pd_config_free(c);
	unlink(path);
	/* non-loopback: only when allowed */
	expect_error(LOAD(&c, err, "--listen", "unix:/x", "--key", "k", "--metrics-listen", "0.0.0.0:9469"), err,
	             "metrics-allow-remote = yes");
	expect_error(LOAD(&c, err, "--listen", "unix:/x", "--key", "k", "--metrics-listen", "[::]:9469"), err,
	             "not a loopback address");
	assert_int_equal(LOAD(&c, err, "--listen", "unix:/x", "--key", "k", "--metrics-listen", "192.0.2.1:9469",
	                      "--metrics-allow-remote"), 0);
	assert_true(c->metrics_allow_remote);
	c = pd_config_free(c);
	static char *bad[] = { "localhost:9469", "0", "65536", "127.0.0.1:", ":9469", "127.0.0.1:0",
	                       "127.0.0.1:9469x", "[::1]", "[::1:9469", "::1:9469", "1.2.3:80",
	                       "-1", "127.0.0.1:+80" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		expect_error(LOAD(&c, err, "--listen", "unix:/x", "--key", "k", "--metrics-listen", bad[i]), err,
		             "want PORT, IPV4:PORT or [IPV6]:PORT");
	assert_null(c);
}

static void test_help(void **state)
{
	struct pd_config *c = NULL;
	char err[64];
	FILE *saved = stdout;
	stdout = fopen("/dev/null", "w");
	assert_int_equal(LOAD(&c, err, "--help"), 1);
	assert_int_equal(LOAD(&c, err, "--version"), 1);
	fclose(stdout);
	stdout = saved;
	assert_null(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_flags_and_defaults),
		cmocka_unit_test(test_file_then_flags),
		cmocka_unit_test(test_comments_and_relative_paths),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_metrics_listen),
		cmocka_unit_test(test_help),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
