/* SPDX-License-Identifier: MIT */
/*
 * libpdclient's callback contract against a scripted in-process server:
 * on_done exactly once per accepted request, in order, also when the
 * connection fails or is closed; a refused submit never calls back; a
 * connection the server closed while idle fails the next submit at once.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "frame.h"
#include "pdclient.h"
#include "status.h"

enum script {
	S_ECHO_ALL,        /* answer every DECRYPT with its ciphertext and RESULT OK */
	S_IDLE_ERROR,      /* after HELLO: ERROR TIMEOUT, close */
	S_CUT_AFTER_ONE,   /* answer the first request, then close */
	S_SILENT,          /* after HELLO, read and never answer */
	S_HELLO_ERROR,     /* HELLO and ERROR SHUTTING_DOWN in one write */
};

struct server {
	char path[108];
	int lfd;
	enum script script;
	pthread_t th;
};

static int read_frame(int fd, struct pd_frame_hdr *h, uint8_t *buf, size_t cap)
{
	uint8_t hdr[PD_FRAME_HDR_LEN];
	size_t n = 0;
	while (n < sizeof(hdr)) {
		ssize_t r = read(fd, hdr + n, sizeof(hdr) - n);
		if (r <= 0)
			return -1;
		n += (size_t)r;
	}
	h->len = ((uint32_t)hdr[0] << 24) | ((uint32_t)hdr[1] << 16) | ((uint32_t)hdr[2] << 8) | hdr[3];
	h->type = hdr[4];
	h->id = ((uint32_t)hdr[5] << 24) | ((uint32_t)hdr[6] << 16) | ((uint32_t)hdr[7] << 8) | hdr[8];
	if (h->len > cap)
		return -1;
	n = 0;
	while (n < h->len) {
		ssize_t r = read(fd, buf + n, h->len - n);
		if (r <= 0)
			return -1;
		n += (size_t)r;
	}
	return 0;
}

static void send_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w <= 0)
			return;
		p += w;
		n -= (size_t)w;
	}
}

static void *serve(void *arg)
{
	struct server *s = arg;
	int fd = accept(s->lfd, NULL, NULL);
	if (fd < 0)
		return NULL;
	static uint8_t buf[1 << 17], out[1 << 17];
	struct pd_frame_hdr h;
	if (read_frame(fd, &h, buf, sizeof(buf)) < 0 || h.type != PD_FT_HELLO)
		goto out;
	struct pd_hello sh = { .version_min = 1, .version_max = 1, .max_frame = 65536, .max_inflight = 4 };
	int n = pd_frame_encode_server_hello(out, sizeof(out), &sh);
	if (s->script == S_HELLO_ERROR) {
		int m = pd_frame_encode_error(out + n, sizeof(out) - (size_t)n, PD_ST_SHUTTING_DOWN, NULL, "stopping");
		send_all(fd, out, (size_t)(n + m));
		goto out;
	}
	send_all(fd, out, (size_t)n);
	if (s->script == S_IDLE_ERROR) {
		usleep(100 * 1000); /* after the client's handshake is complete */
		n = pd_frame_encode_error(out, sizeof(out), PD_ST_TIMEOUT, "ETIMEDOUT", "idle timeout");
		send_all(fd, out, (size_t)n);
		goto out;
	}
	int answered = 0;
	uint64_t in = 0;
	while (read_frame(fd, &h, buf, sizeof(buf)) == 0) {
		if (s->script == S_SILENT)
			continue;
		if (h.type == PD_FT_DATA) {
			in += h.len;
			n = pd_frame_encode(out, sizeof(out), PD_FT_DATA, h.id, buf, h.len);
			send_all(fd, out, (size_t)n);
		} else if (h.type == PD_FT_END) {
			struct pd_result r = { .status = PD_ST_OK, .integrity = PD_INTEGRITY_AEAD, .bytes_in = in, .bytes_out = in };
			n = pd_frame_encode_result(out, sizeof(out), h.id, &r, NULL);
			send_all(fd, out, (size_t)n);
			in = 0;
			if (++answered == 1 && s->script == S_CUT_AFTER_ONE)
				break;
		}
	}
out:
	close(fd);
	return NULL;
}

static void server_start(struct server *s, enum script script)
{
	memset(s, 0, sizeof(*s));
	s->script = script;
	snprintf(s->path, sizeof(s->path), "/tmp/pd-test-pdclient-%d-%d.sock", (int)getpid(), (int)script);
	unlink(s->path);
	s->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	strcpy(sa.sun_path, s->path);
	assert_int_equal(bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(s->lfd, 4), 0);
	assert_int_equal(pthread_create(&s->th, NULL, serve, s), 0);
}

static void server_stop(struct server *s)
{
	pthread_join(s->th, NULL);
	close(s->lfd);
	unlink(s->path);
}

struct rec {
	int calls;
	int order;
	struct pdc_result r;
	uint8_t got[256];
	size_t n;
	const char *src;
	size_t src_off, src_len;
};

static int g_order;

static void on_done(void *arg, const struct pdc_result *r)
{
	struct rec *x = arg;
	x->calls++;
	x->order = ++g_order;
	x->r = *r;
}

static int on_data(void *arg, const uint8_t *p, size_t n)
{
	struct rec *x = arg;
	assert_true(x->n + n <= sizeof(x->got));
	memcpy(x->got + x->n, p, n);
	x->n += n;
	return 0;
}

static ssize_t in_read(void *arg, uint8_t *buf, size_t cap)
{
	struct rec *x = arg;
	size_t n = x->src_len - x->src_off;
	if (n > 3)
		n = 3; /* tiny slices: several DATA frames */
	if (n > cap)
		n = cap;
	memcpy(buf, x->src + x->src_off, n);
	x->src_off += n;
	return (ssize_t)n;
}

/* The scripted server serves one connection: retry (tested with the real
 * daemon in tests/integration/test_retry.py) is off here, except where a
 * test says otherwise. */
static struct pdc_conn *conn(struct server *s)
{
	struct pdc_config cfg = { .socket_path = s->path, .timeout_ms = 5000, .no_retry = true };
	struct pdc_conn *c = NULL;
	struct pdc_result e;
	assert_int_equal(pdc_connect(&c, &cfg, &e), 0);
	assert_int_equal(pdc_server(c)->max_inflight, 4);
	return c;
}

static void submit3(struct pdc_conn *c, struct rec *x)
{
	static const char *msgs[] = { "first message", "", "third, read in slices" };
	for (int i = 0; i < 3; i++) {
		memset(&x[i], 0, sizeof(x[i]));
		x[i].src = msgs[i];
		x[i].src_len = strlen(msgs[i]);
		struct pdc_decrypt d = { .in_fd = -1, .on_data = on_data, .on_done = on_done, .arg = &x[i] };
		if (i == 2)
			d.in_read = in_read;
		else {
			d.in_buf = (const uint8_t *)msgs[i];
			d.in_len = strlen(msgs[i]);
		}
		assert_int_equal(pdc_submit_decrypt(c, &d), 0);
	}
}

static void test_pipelined_in_order(void **state)
{
	(void)state;
	struct server s;
	server_start(&s, S_ECHO_ALL);
	struct pdc_conn *c = conn(&s);
	struct rec x[3];
	g_order = 0;
	submit3(c, x);
	assert_int_equal(pdc_pending(c), 3);
	assert_int_equal(pdc_run(c), 0);
	assert_int_equal(pdc_pending(c), 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(x[i].calls, 1);
		assert_int_equal(x[i].order, i + 1);
		assert_int_equal(x[i].r.err, 0);
		assert_int_equal(x[i].r.status, 0);
		assert_int_equal(x[i].r.integrity, PDC_INTEGRITY_AEAD);
		assert_int_equal(x[i].n, x[i].src_len);
		assert_memory_equal(x[i].got, x[i].src, x[i].n);
		assert_int_equal(x[i].r.bytes_in, x[i].src_len);
	}
	/* A refused submit never calls back. */
	struct rec bad = { 0 };
	struct pdc_decrypt d = { .in_fd = 0, .in_buf = (const uint8_t *)"x", .in_len = 1, .on_done = on_done, .arg = &bad };
	assert_int_equal(pdc_submit_decrypt(c, &d), -EINVAL);
	pdc_close(c);
	assert_int_equal(bad.calls, 0);
	server_stop(&s);
}

static void test_connection_cut(void **state)
{
	(void)state;
	struct server s;
	server_start(&s, S_CUT_AFTER_ONE);
	struct pdc_conn *c = conn(&s);
	struct rec x[3];
	g_order = 0;
	submit3(c, x);
	assert_true(pdc_run(c) < 0);
	assert_int_equal(pdc_pending(c), 0);
	assert_int_equal(x[0].calls, 1);
	assert_int_equal(x[0].r.status, 0);
	for (int i = 1; i < 3; i++) {
		assert_int_equal(x[i].calls, 1);
		assert_int_equal(x[i].order, i + 1);
		assert_true(x[i].r.err < 0);
		assert_int_equal(pdc_exit_code(&x[i].r), 75);
	}
	/* Dead: further submits fail without calling back. */
	struct rec y = { 0 };
	assert_true(pdc_submit_ping(c, on_done, &y) < 0);
	pdc_close(c);
	assert_int_equal(y.calls, 0);
	server_stop(&s);
}

static void test_close_with_pending(void **state)
{
	(void)state;
	struct server s;
	server_start(&s, S_SILENT);
	struct pdc_conn *c = conn(&s);
	struct rec x[3];
	g_order = 0;
	submit3(c, x);
	pdc_close(c);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(x[i].calls, 1);
		assert_int_equal(x[i].r.err, -ECANCELED);
	}
	server_stop(&s);
}

static void test_idle_connection_closed_by_server(void **state)
{
	(void)state;
	struct server s;
	server_start(&s, S_IDLE_ERROR);
	struct pdc_conn *c = conn(&s);
	usleep(400 * 1000); /* the ERROR arrives while we are idle */
	struct rec y = { 0 };
	assert_int_equal(pdc_submit_ping(c, on_done, &y), -ECONNABORTED);
	assert_int_equal(y.calls, 0);
	assert_int_equal(pdc_pending(c), 0);
	pdc_close(c);
	server_stop(&s);
}

static void test_hello_then_error(void **state)
{
	(void)state;
	/* HELLO and ERROR in one read: connect reports the server's status. */
	struct server s;
	server_start(&s, S_HELLO_ERROR);
	struct pdc_config cfg = { .socket_path = s.path, .timeout_ms = 5000, .no_retry = true };
	struct pdc_conn *c = NULL;
	struct pdc_result e;
	assert_int_equal(pdc_connect(&c, &cfg, &e), -ECONNABORTED);
	assert_int_equal(e.err, 0);
	assert_int_equal(e.status, PD_ST_SHUTTING_DOWN);
	assert_int_equal(pdc_exit_code(&e), 75);
	server_stop(&s);
}

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void test_unreachable(void **state)
{
	(void)state;
	/* A directory that does not exist is a mistake, not a restart: no
	 * retry, at once. */
	struct pdc_config cfg = { .socket_path = "/nonexistent/pgpdecd.sock" };
	struct pdc_conn *c = NULL;
	struct pdc_result e;
	int64_t t0 = mono_ms();
	assert_int_equal(pdc_connect(&c, &cfg, &e), -ENOENT);
	assert_true(mono_ms() - t0 < 1000);
	assert_null(c);
	assert_int_equal(pdc_exit_code(&e), 75);
	assert_non_null(strstr(e.sentence, "cannot connect"));
	/* No socket in an existing directory (a daemon restarting): retried
	 * with backoff until the timeout, then the same failure. */
	struct pdc_config cfg2 = { .socket_path = "/tmp/pd-test-no-such.sock", .timeout_ms = 400 };
	t0 = mono_ms();
	assert_int_equal(pdc_connect(&c, &cfg2, &e), -ENOENT);
	int64_t dt = mono_ms() - t0;
	assert_true(dt >= 350 && dt < 3000);
	assert_null(c);
	assert_int_equal(pdc_exit_code(&e), 75);
}

/* The caller's own settings cannot work: 78 (EX_CONFIG), never "retry later". */
static void test_config_errors(void **state)
{
	(void)state;
	char path[200];
	memset(path, 'x', sizeof(path) - 1);
	path[0] = '/';
	path[sizeof(path) - 1] = 0;
	struct pdc_config cfg = { .socket_path = path };
	struct pdc_conn *c = NULL;
	struct pdc_result e;
	assert_int_equal(pdc_connect(&c, &cfg, &e), -ENAMETOOLONG);
	assert_int_equal(pdc_exit_code(&e), 78);
	assert_non_null(strstr(e.sentence, "socket path longer than 107 bytes (199)"));
	/* TLS files are loaded before connecting: port 1 is never tried */
	struct pdc_config t = { .host = "127.0.0.1", .port = "1", .tls_ca = "/nonexistent/ca.pem" };
	assert_int_equal(pdc_connect(&c, &t, &e), -EINVAL);
	assert_int_equal(pdc_exit_code(&e), 78);
	assert_non_null(strstr(e.sentence, "TLS CA file /nonexistent/ca.pem cannot be read: No such file"));
	assert_null(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pipelined_in_order),
		cmocka_unit_test(test_connection_cut),
		cmocka_unit_test(test_close_with_pending),
		cmocka_unit_test(test_idle_connection_closed_by_server),
		cmocka_unit_test(test_hello_then_error),
		cmocka_unit_test(test_unreachable),
		cmocka_unit_test(test_config_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
