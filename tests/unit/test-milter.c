/* SPDX-License-Identifier: MIT */
/* mail/milter-hdr.c (header parse and per-name diff) and mail/milter-config.c. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "milter-config.h"
#include "milter-hdr.h"
#include "pdmail.h"

static int tmpfile_with(const char *text)
{
	char path[] = "/tmp/pd-test-milter-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	return fd;
}

/* The edits, recorded as text: "C Name 2 value|D Name 3|A Name value". */
struct rec {
	char buf[4096];
};

static int record(void *arg, enum pd_hdr_op kind, const char *name, unsigned idx, const char *value)
{
	struct rec *r = arg;
	size_t l = strlen(r->buf);
	if (kind == PD_HDR_CHANGE)
		snprintf(r->buf + l, sizeof(r->buf) - l, "C %s %u%s|", name, idx, value);
	else if (kind == PD_HDR_DELETE)
		snprintf(r->buf + l, sizeof(r->buf) - l, "D %s %u|", name, idx);
	else
		snprintf(r->buf + l, sizeof(r->buf) - l, "A %s%s|", name, value);
	return 0;
}

static void list(struct pd_hdr_list *l, const char *const *kv)
{
	for (; *kv; kv += 2)
		assert_int_equal(pd_hdr_list_add(l, kv[0], kv[1]), 0);
}

static int add_field(void *arg, const char *name, const char *value)
{
	return pd_hdr_list_add(arg, name, value);
}

/* The new header list comes from GMime's reading of the written message. */
static void test_parse(void **state)
{
	int fd = tmpfile_with("Received: from a\n\tby b; Mon\nSubject: x\nX-Empty:\nName :y\n"
	                      "Content-Type: text/plain\n\nbody\n");
	struct pd_hdr_list l = { 0 };
	int64_t off = -1;
	assert_int_equal(pd_mail_header_fields(fd, add_field, &l, &off), 0);
	assert_int_equal(l.n, 5);
	assert_string_equal(l.v[0].name, "Received");
	assert_string_equal(l.v[0].value, " from a\n\tby b; Mon");
	assert_string_equal(l.v[1].value, " x");
	assert_string_equal(l.v[2].value, "");
	assert_string_equal(l.v[3].name, "Name");
	assert_string_equal(l.v[4].name, "Content-Type");   /* GMime keeps it on the body part: in order */
	assert_string_equal(l.v[4].value, " text/plain");
	char b[8] = { 0 };
	assert_int_equal(pread(fd, b, 4, off), 4);
	assert_string_equal(b, "body");
	pd_hdr_list_clear(&l);
	close(fd);

	/* no body */
	fd = tmpfile_with("A: 1\nB: 2\n");
	assert_int_equal(pd_mail_header_fields(fd, add_field, &l, &off), 0);
	assert_int_equal(l.n, 2);
	assert_int_equal(off, 10);
	pd_hdr_list_clear(&l);
	close(fd);
}

static void test_diff(void **state)
{
	struct pd_hdr_list o = { 0 }, n = { 0 };
	struct rec r = { "" };
	/* the MTA's Received (leading space differs: same), a changed
	 * Content-Type, two of three X-Pgpdecd-Status removed (forged), a new
	 * result header, a second Subject added. */
	list(&o, (const char *const[]){ "Received", " from x\n\tby y", "Subject", " s", "Content-Type",
	                                " multipart/encrypted", "X-Pgpdecd-Status", " forged1", "X-Pgpdecd-Status",
	                                " forged2", "x-pgpdecd-status", " forged3", NULL });
	list(&n, (const char *const[]){ "Received", "from x\r\n\tby y", "Subject", " s", "Content-Type",
	                                " text/plain", "X-Pgpdecd-Status", " decrypted", "X-Pgpdecd-Key", " abc",
	                                "Subject", " second", NULL });
	assert_int_equal(pd_hdr_diff(&o, &n, record, &r), 0);
	assert_string_equal(r.buf, "C Content-Type 1 text/plain|C X-Pgpdecd-Status 1 decrypted|"
	                           "D X-Pgpdecd-Status 3|D X-Pgpdecd-Status 2|A X-Pgpdecd-Key abc|A Subject second|");
	/* nothing to do */
	r.buf[0] = 0;
	assert_int_equal(pd_hdr_diff(&o, &o, record, &r), 0);
	assert_string_equal(r.buf, "");
	/* everything deleted */
	struct pd_hdr_list e = { 0 };
	assert_int_equal(pd_hdr_diff(&n, &e, record, &r), 0);
	assert_string_equal(r.buf, "D Received 1|D Subject 2|D Subject 1|D Content-Type 1|D X-Pgpdecd-Status 1|"
	                           "D X-Pgpdecd-Key 1|");
	pd_hdr_list_clear(&o);
	pd_hdr_list_clear(&n);
	assert_true(pd_hdr_value_eq(" a\r\n b", "a\n b"));
	assert_false(pd_hdr_value_eq(" a", " a "));
}

static int stop_at_second(void *arg, enum pd_hdr_op kind, const char *name, unsigned idx, const char *value)
{
	int *n = arg;
	return ++*n == 2 ? -EIO : 0;
}

static void test_diff_stops(void **state)
{
	struct pd_hdr_list o = { 0 }, n = { 0 };
	int calls = 0;
	list(&n, (const char *const[]){ "A", "1", "B", "2", "C", "3", NULL });
	assert_int_equal(pd_hdr_diff(&o, &n, stop_at_second, &calls), -EIO);
	assert_int_equal(calls, 2);
	pd_hdr_list_clear(&n);
}

static int count_op(void *arg, enum pd_hdr_op kind, const char *name, unsigned idx, const char *value)
{
	unsigned *c = arg;
	c[kind]++;
	return 0;
}

/* A section of 9,990 fields: the diff is linear (it took 1.8 s when it
 * compared names pairwise) and still right. */
static void test_diff_many(void **state)
{
	struct pd_hdr_list o = { 0 }, n = { 0 };
	char name[32];
	for (int i = 0; i < 9990; i++) {
		snprintf(name, sizeof(name), "X-H%d", i);
		assert_int_equal(pd_hdr_list_add(&o, name, " v"), 0);
		assert_int_equal(pd_hdr_list_add(&n, name, i % 2 ? " v" : " w"), 0);
	}
	assert_int_equal(pd_hdr_list_add(&n, "X-New", " 1"), 0);
	unsigned c[3] = { 0 };
	assert_int_equal(pd_hdr_diff(&o, &n, count_op, c), 0);
	assert_int_equal(c[PD_HDR_CHANGE], 4995);
	assert_int_equal(c[PD_HDR_DELETE], 0);
	assert_int_equal(c[PD_HDR_ADD], 1);
	pd_hdr_list_clear(&o);
	pd_hdr_list_clear(&n);
	for (int i = 0; i < 9990; i++)
		assert_int_equal(pd_hdr_list_add(&o, i % 2 ? "Received" : "received", " v"), 0);
	assert_int_equal(pd_hdr_list_add(&n, "RECEIVED", " v"), 0);
	memset(c, 0, sizeof(c));
	assert_int_equal(pd_hdr_diff(&o, &n, count_op, c), 0);
	assert_int_equal(c[PD_HDR_CHANGE], 0);
	assert_int_equal(c[PD_HDR_DELETE], 9989);
	assert_int_equal(c[PD_HDR_ADD], 0);
	pd_hdr_list_clear(&o);
	pd_hdr_list_clear(&n);
}

static void test_limits(void **state)
{
	struct pd_hdr_list l = { 0 };
	int r = 0;
	for (unsigned i = 0; i <= PD_HDR_MAX_FIELDS && r == 0; i++)
		r = pd_hdr_list_add(&l, "X", "y");
	assert_int_equal(r, -E2BIG);
	assert_int_equal(l.n, PD_HDR_MAX_FIELDS);
	pd_hdr_list_clear(&l);
}

/* ---------------------------------------------------------------- */

#define ARGV(...) ((char *[]){ "pgpdecd-milter", __VA_ARGS__, NULL })
#define ARGC(...) ((int)(sizeof((char *[]){ "pgpdecd-milter", __VA_ARGS__ }) / sizeof(char *)))
#define LOAD(ret, err, ...) pd_milter_config_load(ret, ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), err, sizeof(err))

static char *write_ini(const char *text)
{
	static char path[64];
	snprintf(path, sizeof(path), "/tmp/pd-test-milter-conf-XXXXXX");
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

static void test_config(void **state)
{
	struct pd_milter_config *c = NULL;
	char err[512] = "";
	char *p = write_ini("# comment\nlisten = inet:8891@127.0.0.1\nconnect = [::1]:7000\n"
	                          "tls-pin = sha256:00\ntimeout = 500ms\nconcurrency = 3\nmax-message-size = 10M\n"
	                          "on-no-key = reject\non-failure = quarantine\nprotected-headers = all\n"
	                          "keep-original = yes\nspool-dir = /var/tmp\nrecipient-binding = Domain\n");
	assert_int_equal(LOAD(&c, err, "-c", p, "--foreground"), 0);
	assert_string_equal(c->listen, "inet:8891@127.0.0.1");
	assert_string_equal(c->connect_host, "::1");
	assert_string_equal(c->connect_port, "7000");
	assert_int_equal(c->timeout_ms, 500);
	assert_int_equal(c->concurrency, 3);
	assert_int_equal(c->max_message_size, 10u << 20);
	assert_int_equal(c->policy.on_no_key, PD_MAIL_REJECT);
	assert_int_equal(c->policy.on_failure, PD_MAIL_QUARANTINE);
	assert_int_equal(c->policy.protected_headers, PD_MAIL_HP_ALL);
	assert_true(c->policy.keep_original);
	assert_int_equal(c->binding, PD_BIND_DOMAIN);
	assert_string_equal(c->policy.tmpdir, "/var/tmp");
	assert_true(c->foreground);
	struct pdc_config pc;
	pd_milter_config_client(c, &pc);
	assert_string_equal(pc.host, "::1");
	assert_string_equal(pc.tls_pin, "sha256:00");
	assert_int_equal(pc.timeout_ms, 500);
	c = pd_milter_config_free(c);
	unlink(p);

	/* defaults (no file given, and the default file absent or valid) */
	p = write_ini("");
	assert_int_equal(LOAD(&c, err, "--config", p), 0);
	assert_string_equal(c->listen, PD_MILTER_DEFAULT_LISTEN);
	assert_string_equal(c->socket, PDC_DEFAULT_SOCKET);
	assert_null(c->connect_host);
	assert_int_equal(c->socket_mode, 0660);
	assert_int_equal(c->concurrency, 8);
	assert_int_equal(c->policy.on_failure, PD_MAIL_REJECT);
	assert_int_equal(c->binding, PD_BIND_NONE);
	c = pd_milter_config_free(c);
	unlink(p);
}

static void expect_error(const char *ini, const char *want)
{
	struct pd_milter_config *c = NULL;
	char err[512] = "";
	char *p = write_ini(ini);
	int r = LOAD(&c, err, "-c", p);
	if (r != -EINVAL || !strstr(err, want))
		fail_msg("'%s': got %d '%s', want '%s'", ini, r, err, want);
	assert_null(c);
	unlink(p);
}

static void test_config_errors(void **state)
{
	expect_error("timeout = 5s\nbogus = 1\n", ":2: unknown setting 'bogus'");
	expect_error("[milter]\nlisten = unix:/x\n", ":2: unknown section");
	expect_error("on-failure = maybe\n", ":1: on-failure wants pass, reject or quarantine");
	expect_error("on-no-key = quarantine\n", "wants pass or reject");
	expect_error("protected-headers = some\n", "none, subject or all");
	expect_error("timeout = soon\n", "duration");
	expect_error("listen = tcp:1.2.3.4:25\n", "want unix:PATH or inet:PORT@HOST");
	expect_error("listen = inet:0@localhost\n", "inet:PORT@HOST");
	expect_error("listen = unix:relative\n", "absolute");
	expect_error("connect = nohost\n", "HOST:PORT");
	expect_error("tls-ca = /x\n", "need connect");
	expect_error("connect = h:1\ntls-cert = /c\n", "both tls-cert and tls-key");
	expect_error("concurrency = 0\n", "concurrency");
	/* each level may parse one more decrypted entity: the sum is bounded */
	expect_error("max-depth = 17\n", "max-depth must be at most 16");
	expect_error("recipient-binding = yes\n", "wants none, address or domain");
	expect_error("socket-group = no-such-group-here\n", "no such group");
	expect_error("this is not ini\n", ":1: syntax error");
	/* inih reads on after an error: the first one is what is reported */
	expect_error("socket-mode = 9999\ntimeout = 5s\n", ":1: socket-mode wants an octal mode");
	expect_error("socket-mode = 9999\nconcurrency = x\n", ":1: socket-mode wants an octal mode");

	struct pd_milter_config *c = NULL;
	char err[256] = "";
	assert_int_equal(LOAD(&c, err, "-c", "/nonexistent/milter.conf"), -EINVAL);
	assert_non_null(strstr(err, "No such file"));
	assert_int_equal(LOAD(&c, err, "--frobnicate"), -EDOM);
	assert_int_equal(LOAD(&c, err, "-c"), -EDOM);
	assert_null(c);
}

int main(void)
{
	pd_mail_global_init();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_diff),
		cmocka_unit_test(test_diff_stops),
		cmocka_unit_test(test_diff_many),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_config),
		cmocka_unit_test(test_config_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
