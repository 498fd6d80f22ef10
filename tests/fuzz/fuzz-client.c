/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for libpdclient's reply parsing (client/pdclient.c): a hostile
 * server.  The first input octet says which requests the client queues once
 * connected (bit 0 a DECRYPT of a short armored message, bit 1 a PING, bit 2 STATS, bit 3
 * KEYS, bit 6 a second DECRYPT; bits 4-5 the DECRYPT flags VERIFIED_ONLY and
 * WANT_METADATA); the rest is everything the server sends.  Its first frame
 * (by the length in its header) is sent alone, as a server sends its HELLO,
 * the rest once the requests are queued, then the server shuts its side.
 * The connection is a real Unix socket: a thread accepts it and sends the
 * first frame while pdc_connect() waits for it.
 *
 * Beyond "no crash, no leak" it checks the library's contract: on_done
 * exactly once for every accepted request, in request order, none for a
 * refused one; no callback of a request after its on_done; the plaintext
 * delivered no more than the server sent; what a result and a failed
 * connect carry is well-formed (sentence and name NUL-terminated, the
 * sentence one line, integrity a known verdict, counts within their
 * arrays, literal name NUL-terminated at its length).
 *
 * libFuzzer: contrib/fuzz.sh builds it; fuzz-main.c replays
 * tests/fuzz/corpus/client/ as a meson test.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "pdclient.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "fuzz-client: check failed: %s\n", #x); abort(); } } while (0)

#define MAX_REQ 5

static char sock_path[108];
static int lfd = -1;

struct server {
	const uint8_t *first;
	size_t first_len;
	bool last;        /* the first frame is all there is */
	int fd;
};

struct req {
	int idx;          /* submission order */
	int done;         /* on_done calls */
	int before_done;  /* callbacks before on_done */
	int after_done;   /* callbacks after it (must stay 0) */
	uint64_t data;    /* plaintext octets delivered */
};

static int done_order[MAX_REQ], n_done;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	if (lfd >= 0)
		return 0;
	signal(SIGPIPE, SIG_IGN);
	/* $TMPDIR if the path fits: a run that aborts (a finding) leaves its
	 * socket behind, and contrib/fuzz.sh points TMPDIR at its own output */
	const char *tmp = getenv("TMPDIR");
	if (!tmp || !*tmp || strlen(tmp) > sizeof(sock_path) - 40)
		tmp = "/tmp";
	snprintf(sock_path, sizeof(sock_path), "%s/pd-fuzz-client-%d.sock", tmp, (int)getpid());
	unlink(sock_path);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(lfd >= 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	memcpy(sa.sun_path, sock_path, strlen(sock_path) + 1);
	CHECK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	CHECK(listen(lfd, 4) == 0);
	return 0;
}

__attribute__((destructor)) static void cleanup(void)
{
	if (lfd >= 0)
		unlink(sock_path);
}

static void send_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return; /* the client hung up: what it had is what it got */
		p += w;
		n -= (size_t)w;
	}
}

static void *serve(void *arg)
{
	struct server *s = arg;
	s->fd = accept(lfd, NULL, NULL);
	if (s->fd >= 0) {
		send_all(s->fd, s->first, s->first_len);
		if (s->last)
			shutdown(s->fd, SHUT_WR); /* nothing more: do not let the client wait */
	}
	return NULL;
}

static bool one_line(const char *s, size_t cap)
{
	const char *end = memchr(s, 0, cap);
	return end && !memchr(s, '\n', (size_t)(end - s)) && !memchr(s, '\r', (size_t)(end - s));
}

static void check_info(const struct pdc_info *i)
{
	CHECK(i->n_recipients <= 64 && i->n_recipients <= i->n_recipients_total);
	CHECK(i->n_issuers <= 16 && i->n_compression <= 8);
	CHECK(i->key_fpr_len <= 32);
	CHECK(i->literal_name[i->literal_name_len] == 0);
	for (uint32_t k = 0; k < i->n_recipients; k++)
		CHECK(i->recipients[k].fpr_len <= 32);
}

static void check_result(const struct pdc_result *r)
{
	CHECK(one_line(r->sentence, sizeof(r->sentence)));
	CHECK(memchr(r->errname, 0, sizeof(r->errname)) != NULL);
	CHECK(r->err <= 0);
	CHECK(r->integrity <= PDC_INTEGRITY_UNPROTECTED);
	check_info(&r->info);
}

static void on_done(void *arg, const struct pdc_result *r)
{
	struct req *q = arg;
	check_result(r);
	CHECK(n_done < MAX_REQ);
	if (getenv("FUZZ_CLIENT_VERBOSE"))
		fprintf(stderr, "fuzz-client: request %d: err %d status %u: %s\n", q->idx, r->err, r->status, r->sentence);
	done_order[n_done++] = q->idx;
	q->done++;
}

static int on_data(void *arg, const uint8_t *p, size_t n)
{
	struct req *q = arg;
	(void)p;
	if (q->done)
		q->after_done++;
	q->before_done++;
	q->data += n;
	return 0;
}

static int on_metadata(void *arg, const struct pdc_info *i)
{
	struct req *q = arg;
	check_info(i);
	if (q->done)
		q->after_done++;
	q->before_done++;
	return 0;
}

static int on_key(void *arg, const struct pdc_key *k)
{
	struct req *q = arg;
	CHECK(k->fpr_len <= 32 && k->primary_fpr_len <= 32);
	CHECK(memchr(k->curve, 0, sizeof(k->curve)) != NULL);
	if (q->done)
		q->after_done++;
	q->before_done++;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint8_t cipher[] = "-----BEGIN PGP MESSAGE-----\n\nbm90IHJlYWxseQ==\n-----END PGP MESSAGE-----\n";
	LLVMFuzzerInitialize(NULL, NULL);
	if (size < 1 || size > (1u << 16))
		return 0;
	uint8_t mask = data[0];
	const uint8_t *stream = data + 1;
	size_t len = size - 1, first = len;
	if (len >= 9) { /* the first frame: 4-octet length, type, 4-octet id, payload */
		uint64_t flen = 9 + ((uint64_t)stream[0] << 24 | (uint64_t)stream[1] << 16 | stream[2] << 8 | stream[3]);
		if (flen < first)
			first = (size_t)flen;
	}

	struct server s = { .first = stream, .first_len = first, .last = first == len, .fd = -1 };
	pthread_t th;
	CHECK(pthread_create(&th, NULL, serve, &s) == 0);
	/* One scripted connection per input: no retry (a reconnect would meet
	 * the next input's server; retry is tested against real daemons in
	 * tests/integration/test_retry.py and test_haproxy.py). */
	struct pdc_config cfg = { .socket_path = sock_path, .timeout_ms = 5000, .software = "fuzz-client",
	                          .no_retry = true };
	struct pdc_conn *c = NULL;
	struct pdc_result e;
	memset(&e, 0x5a, sizeof(e));
	int r = pdc_connect(&c, &cfg, &e);
	CHECK(pthread_join(th, NULL) == 0);
	CHECK(s.fd >= 0);
	if (r < 0) {
		CHECK(c == NULL);
		check_result(&e);
		close(s.fd);
		return 0;
	}
	CHECK(r == 0 && c);

	struct req q[MAX_REQ];
	memset(q, 0, sizeof(q));
	int n_req = 0;
	n_done = 0;
	uint32_t flags = ((mask & 0x10) ? PDC_VERIFIED_ONLY : 0) | ((mask & 0x20) ? PDC_WANT_METADATA : 0);
	for (int k = 0; k < MAX_REQ; k++) {
		static const uint8_t bit[MAX_REQ] = { 0x01, 0x02, 0x04, 0x08, 0x40 };
		if (!(mask & bit[k]))
			continue;
		struct req *x = &q[n_req];
		x->idx = n_req;
		int sr;
		if (k == 0 || k == 4) {
			struct pdc_decrypt d = { .flags = flags, .in_fd = -1, .in_buf = cipher, .in_len = sizeof(cipher) - 1,
			                         .on_metadata = on_metadata, .on_data = on_data, .on_done = on_done, .arg = x };
			if (k == 4) {
				d.password = "password";
				d.password_len = 8;
			}
			sr = pdc_submit_decrypt(c, &d);
		} else if (k == 1) {
			sr = pdc_submit_ping(c, on_done, x);
		} else if (k == 2) {
			sr = pdc_submit_stats(c, on_data, on_done, x);
		} else {
			sr = pdc_submit_keys(c, on_key, on_done, x);
		}
		if (sr < 0) {
			CHECK(x->done == 0 && x->before_done == 0); /* refused: never called back */
			continue;
		}
		n_req++;
	}

	send_all(s.fd, stream + first, len - first);
	shutdown(s.fd, SHUT_WR);
	r = pdc_run(c);
	CHECK(r <= 0);
	CHECK(pdc_pending(c) == 0);
	uint64_t delivered = 0;
	for (int k = 0; k < n_req; k++) {
		CHECK(q[k].done == 1);
		CHECK(q[k].after_done == 0);
		delivered += q[k].data;
	}
	CHECK(n_done == n_req);
	for (int k = 0; k < n_done; k++)
		CHECK(done_order[k] == k);
	CHECK(delivered <= len);

	/* The connection is over (the server shut its side): a new request is
	 * refused at once or completes exactly once. */
	struct req late = { .idx = n_req };
	if (n_req < MAX_REQ && pdc_submit_ping(c, on_done, &late) == 0) {
		pdc_run(c);
		CHECK(late.done == 1);
	} else {
		CHECK(late.done == 0);
	}
	pdc_close(c);
	close(s.fd);
	return 0;
}
