/* SPDX-License-Identifier: MIT */
/*
 * pd-tls-relay: test-only TLS client (GnuTLS) that relays its standard input
 * to a TLS server and what the server sends to its standard output, octet
 * for octet, in both directions at once.  It exists for what Python's ssl
 * module cannot ask: --record-size N sends the record_size_limit extension
 * (RFC 8449), so that the server must send records of at most N octets.
 * The integration tests pass one end of a socketpair as both stdin and
 * stdout and speak the pgpdecd protocol over the other.
 *
 * Flow control both ways, never blocking: it reads the server only while its
 * buffer towards stdout has room, so a test that reads slowly makes the
 * server see a slow reader; and it goes on reading stdin while the server
 * takes no input.  At exit it says on stderr how many records came and the
 * largest one's plaintext.
 *
 * --priority sets GnuTLS's priority string (NORMAL:%ALLOW_SMALL_RECORDS lets
 * it ask for less than 512 octets).
 *
 *   pd-tls-relay [--record-size N] [--priority P] --ca CA.pem
 *                [--cert C.pem --key K.pem] [--name HOSTNAME] HOST PORT
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <gnutls/gnutls.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF (64u << 10)
#define REC (16u << 10) /* the most plaintext a record carries */

static unsigned char up[BUF], down[BUF];
static size_t down_off, down_len;

/* Whether down has room for a whole record, made at its start if need
 * be: each gnutls_record_recv then returns one whole record. */
static int down_room(void)
{
	if (down_off == down_len) {
		down_off = down_len = 0;
	} else if (down_off && BUF - down_len < REC) {
		memmove(down, down + down_off, down_len - down_off);
		down_len -= down_off;
		down_off = 0;
	}
	return BUF - down_len >= REC;
}

static void die(const char *what, const char *why)
{
	fprintf(stderr, "pd-tls-relay: %s: %s\n", what, why);
	exit(1);
}

static void gt(int r, const char *what)
{
	if (r < 0)
		die(what, gnutls_strerror(r));
}

static int connect_to(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai, *p;
	int r = getaddrinfo(host, port, &hints, &ai), fd = -1;
	if (r)
		die(host, gai_strerror(r));
	for (p = ai; p && fd < 0; p = p->ai_next) {
		fd = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
		if (fd >= 0 && connect(fd, p->ai_addr, p->ai_addrlen) < 0) {
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(ai);
	if (fd < 0)
		die(host, strerror(errno));
	return fd;
}

static void nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

int main(int argc, char **argv)
{
	const char *ca = NULL, *cert = NULL, *key = NULL, *name = "localhost", *prio = NULL;
	unsigned record = 0;
	static const struct option opts[] = {
		{ "record-size", required_argument, NULL, 'r' }, { "ca", required_argument, NULL, 'a' },
		{ "cert", required_argument, NULL, 'c' },        { "key", required_argument, NULL, 'k' },
		{ "name", required_argument, NULL, 'n' },        { "priority", required_argument, NULL, 'p' },
		{ 0 }
	};
	for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
		switch (o) {
		case 'r': record = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'a': ca = optarg; break;
		case 'c': cert = optarg; break;
		case 'k': key = optarg; break;
		case 'n': name = optarg; break;
		case 'p': prio = optarg; break;
		default: return 2;
		}
	}
	if (optind + 2 != argc || !ca || !cert != !key) {
		fprintf(stderr, "usage: pd-tls-relay [--record-size N] [--priority P] --ca CA [--cert C --key K] "
		                "[--name H] HOST PORT\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);

	gnutls_certificate_credentials_t cred;
	gnutls_session_t s;
	gt(gnutls_certificate_allocate_credentials(&cred), "credentials");
	if (gnutls_certificate_set_x509_trust_file(cred, ca, GNUTLS_X509_FMT_PEM) <= 0)
		die(ca, "no CA certificate read");
	if (cert)
		gt(gnutls_certificate_set_x509_key_file(cred, cert, key, GNUTLS_X509_FMT_PEM), cert);
	gt(gnutls_init(&s, GNUTLS_CLIENT), "gnutls_init");
	gt(prio ? gnutls_priority_set_direct(s, prio, NULL) : gnutls_set_default_priority(s), "priority");
	gt(gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, cred), "credentials");
	gnutls_session_set_verify_cert(s, name, 0);
	if (record)
		gt((int)gnutls_record_set_max_recv_size(s, record), "--record-size");

	int fd = connect_to(argv[optind], argv[optind + 1]);
	gnutls_transport_set_int(s, fd);
	int r;
	do
		r = gnutls_handshake(s);
	while (r < 0 && !gnutls_error_is_fatal(r));
	gt(r, "handshake");
	nonblock(fd);
	nonblock(0);
	nonblock(1);

	size_t up_len = 0, sending = 0, largest = 0;
	unsigned long long records = 0;
	int in_eof = 0, tls_eof = 0;

	while (!(tls_eof && down_off == down_len)) {
		int moved = 0; /* anything moved: go round again before poll */
		/* stdin -> server: a record at a time; after EAGAIN GnuTLS wants
		 * the same call again, so up stays as it is until it went. */
		if (up_len && !tls_eof) {
			ssize_t n = gnutls_record_send(s, up, sending ? sending : up_len);
			if (n >= 0) {
				moved = 1;
				memmove(up, up + n, up_len - (size_t)n);
				up_len -= (size_t)n;
				sending = 0;
			} else if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED) {
				sending = sending ? sending : up_len;
			} else {
				die("send", gnutls_strerror((int)n));
			}
		}
		/* server -> stdout: only while there is room to keep it. */
		while (!tls_eof && down_room()) {
			ssize_t n = gnutls_record_recv(s, down + down_len, BUF - down_len);
			if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED)
				break;
			if (n == 0 || n == GNUTLS_E_PREMATURE_TERMINATION) {
				tls_eof = 1;
				break;
			}
			if (n < 0)
				die("receive", gnutls_strerror((int)n));
			moved = 1;
			records++;
			if ((size_t)n > largest)
				largest = (size_t)n;
			down_len += (size_t)n;
		}
		if (down_off < down_len) {
			ssize_t n = write(1, down + down_off, down_len - down_off);
			if (n > 0) {
				down_off += (size_t)n;
				moved = 1;
			} else if (n < 0 && errno != EAGAIN && errno != EINTR) {
				break; /* the test went away */
			}
		}
		if (!in_eof && up_len < BUF && !sending) {
			ssize_t n = read(0, up + up_len, BUF - up_len);
			if (n > 0) {
				up_len += (size_t)n;
				moved = 1;
			} else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
				in_eof = 1;
			}
		}
		if (in_eof && !up_len)
			break; /* the test hung up: done */
		if (moved || (gnutls_record_check_pending(s) && down_room()))
			continue;

		struct pollfd p[3] = { { .fd = 0 }, { .fd = 1 }, { .fd = fd } };
		if (!in_eof && up_len < BUF && !sending)
			p[0].events = POLLIN;
		if (down_off < down_len)
			p[1].events = POLLOUT;
		if (!tls_eof && down_room())
			p[2].events |= POLLIN;
		if (sending)
			p[2].events |= gnutls_record_get_direction(s) ? POLLOUT : POLLIN;
		if (poll(p, 3, -1) < 0 && errno != EINTR)
			die("poll", strerror(errno));
	}
	fprintf(stderr, "pd-tls-relay: %llu records, largest %zu octets\n", records, largest);
	gnutls_deinit(s);
	gnutls_certificate_free_credentials(cred);
	close(fd);
	return 0;
}
