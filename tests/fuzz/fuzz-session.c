/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the daemon's session and request state machines, in
 * process: the real session.c, request.c, admission.c, pool.c (one worker)
 * and the engine behind them, a key ring holding tests/data/keys/rsa2048.gpg,
 * and one connection per input over a socketpair.  The input is what the
 * client sends, then it closes its side; when its first octet is odd, that
 * octet is replaced by a valid HELLO (so that most inputs get past the
 * handshake).
 *
 * Beyond "no crash, no leak, no sanitizer report" it checks what the
 * daemon owes every peer: the connection ends (the daemon closes it, or
 * answers and sees the client's EOF) within a bounded time, and once it
 * is gone every budget is whole again: no admission slot taken, no held
 * verified-only plaintext, nothing drawn from the memory budget.
 *
 * libFuzzer: contrib/fuzz.sh builds it (fuzz-session-libfuzzer); fuzz-main.c
 * replays tests/fuzz/corpus/session/ as a meson test.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "admission.h"
#include "config.h"
#include "daemon.h"
#include "frame.h"
#include "keys.h"
#include "log.h"
#include "pgpdec.h"
#include "pool.h"
#include "session.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "fuzz-session: check failed: %s\n", #x); abort(); } } while (0)

#define DEADLINE_MS 8000 /* an input the daemon does not finish by then is a hang */

static bool ready;
static void teardown(void);
static bool verbose; /* FUZZ_SESSION_VERBOSE=1: what came back, per input */

static void init_once(void)
{
	char err[512] = "";
	char *argv[] = {
		"pgpdecd", "--key", PD_TEST_DATA "/keys/rsa2048.gpg", "--listen", "unix:/nonexistent/fuzz.sock",
		"--workers", "1", "--log-level", "err", "--idle-timeout", "5s", "--message-timeout", "5s",
		"--max-memory", "64M", "--max-argon2-memory", "1M", "--max-kdf-work", "8M",
		/* small, so that throttling and the global pause are reached */
		"--write-high-watermark", "64K", "--write-low-watermark", "16K", "--max-write-buffer", "96K", NULL,
	};
	int argc = (int)(sizeof(argv) / sizeof(argv[0])) - 1;

	verbose = getenv("FUZZ_SESSION_VERBOSE") != NULL;
	pd_log_init();
	CHECK(pd_config_load(&pd_d.cfg, argc, argv, err, sizeof(err)) == 0);
	pd_log_set_level(PD_LOG_ERR);
	CHECK(pd_lib_init(pd_d.cfg->secmem_size) == 0);
	if (pd_keyset_load(&pd_d.keys, pd_d.cfg, 0, err, sizeof(err)) < 0) {
		fprintf(stderr, "fuzz-session: %s\n", err);
		abort();
	}
	pd_d.loop = uv_default_loop();
	CHECK(pd_pool_new(&pd_d.pool, pd_d.loop, 1, pd_d.cfg->queue_length + 16) == 0);
	CHECK(pd_sessions_init(pd_d.loop) == 0);
	atexit(teardown);
	ready = true;
}

/* At exit, what main.c does when the daemon stops: no leak report for
 * what the process still held (the key ring's OpenSSL keys, the workers). */
static void teardown(void)
{
	pd_sessions_deinit();
	pd_pool_stop(pd_d.pool);
	pd_d.pool = NULL;
	uv_run(pd_d.loop, UV_RUN_DEFAULT); /* the close callbacks */
	uv_loop_close(pd_d.loop);
	pd_d.keys = pd_keyset_unref(pd_d.keys);
	pd_config_free(pd_d.cfg);
	pd_d.cfg = NULL;
	pd_lib_deinit();
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* One turn of the loop; a short nap when it had nothing to do (a worker
 * may be busy). */
static void turn(bool idle)
{
	uv_run(pd_d.loop, UV_RUN_NOWAIT);
	if (idle)
		usleep(200);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint8_t hello[] = { 0, 0, 0, 8, PD_FT_HELLO, 0, 0, 0, 0, 'P', 'G', 'P', 'D', 0, 1, 0, 1 };
	if (!ready)
		init_once();

	int fds[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
	CHECK(fcntl(fds[1], F_SETFL, O_NONBLOCK) == 0);
	struct pd_session *s = pd_session_alloc(PD_PEER_UNIX, false);
	CHECK(s);
	CHECK(uv_pipe_open((uv_pipe_t *)pd_session_stream(s), fds[0]) == 0);
	pd_session_start(s, "fuzz");

	/* what the client sends: HELLO for an odd first octet, the input, EOF */
	size_t pre = 0;
	if (size && (data[0] & 1)) {
		pre = sizeof(hello);
		data++;
		size--;
	}
	size_t total = pre + size, sent = 0;
	bool shut = false, server_eof = false;
	uint64_t t0 = now_ms();
	uint8_t sink[65536];
	size_t got = 0;
	while (!server_eof || pd_sessions_count() || pd_adm_slots()) {
		CHECK(now_ms() - t0 < DEADLINE_MS);
		bool moved = false;
		while (sent < total && !server_eof) {
			const uint8_t *p = sent < pre ? hello + sent : data + (sent - pre);
			size_t n = sent < pre ? pre - sent : total - sent;
			ssize_t w = send(fds[1], p, n, MSG_NOSIGNAL);
			if (w <= 0)
				break;
			sent += (size_t)w;
			moved = true;
		}
		if (sent == total && !shut) {
			shutdown(fds[1], SHUT_WR);
			shut = true;
		}
		while (!server_eof) {
			ssize_t r = recv(fds[1], sink, sizeof(sink), 0);
			if (r > 0) {
				if (verbose && got < 64)
					for (ssize_t i = 0; i < r && got + (size_t)i < 64; i++)
						fprintf(stderr, "%02x", sink[i]);
				got += (size_t)r;
				moved = true;
				continue;
			}
			if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
				/* the daemon closed (or reset) its side: we close ours */
				server_eof = true;
				close(fds[1]);
				fds[1] = -1;
			}
			break;
		}
		turn(!moved);
	}
	if (fds[1] >= 0)
		close(fds[1]);
	if (verbose)
		fprintf(stderr, " ... %zu octets back in %llu ms\n", got, (unsigned long long)(now_ms() - t0));
	/* the session is gone: every budget whole again */
	CHECK(pd_adm_slots() == 0);
	CHECK(pd_adm_held() == 0);
	CHECK(pd_budget_used(pd_adm_memory()) == 0);
	CHECK(pd_sessions_unsent() == 0);
	return 0;
}
