/* SPDX-License-Identifier: MIT */
/*
 * Seeds for fuzz-client (tests/fuzz/corpus/client/): server byte streams
 * made with the real frame encoders, each after the octet that says which
 * requests the client queues (see fuzz-client.c; ids are 1, 2, ... in the
 * order DECRYPT, PING, STATS, KEYS, second DECRYPT).  From the source tree:
 *   cc -D_GNU_SOURCE -Iproto -Ilib -Ibuild-fz tests/fuzz/make-client-corpus.c \
 *     proto/frame.c proto/status.c -o /tmp/mkc && /tmp/mkc tests/fuzz/corpus/client
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "status.h"

static uint8_t buf[1 << 16];
static size_t len;

static void add(int n)
{
	if (n < 0) {
		fprintf(stderr, "encode failed\n");
		exit(1);
	}
	len += (size_t)n;
}

static void start(uint8_t mask, uint32_t max_inflight)
{
	struct pd_hello h = { .version_min = 1, .version_max = 1, .max_frame = 65536, .max_inflight = max_inflight };
	snprintf(h.software, sizeof(h.software), "pgpdecd/seed");
	len = 0;
	buf[len++] = mask;
	add(pd_frame_encode_server_hello(buf + len, sizeof(buf) - len, &h));
}

static void data(uint32_t id, const char *s)
{
	add(pd_frame_encode(buf + len, sizeof(buf) - len, PD_FT_DATA, id, s, strlen(s)));
}

static void result(uint32_t id, uint16_t status, uint8_t integrity, const char *errname, const char *sentence,
                   const struct pd_msginfo *info)
{
	struct pd_result r = { .status = status, .integrity = integrity, .bytes_in = 70, .bytes_out = 11 };
	if (errname)
		snprintf(r.errname, sizeof(r.errname), "%s", errname);
	if (sentence)
		snprintf(r.sentence, sizeof(r.sentence), "%s", sentence);
	add(pd_frame_encode_result(buf + len, sizeof(buf) - len, id, &r, info));
}

static void save(const char *dir, const char *name)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
		perror(path);
		exit(1);
	}
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	const char *dir = argv[1];
	struct pd_msginfo info;
	memset(&info, 0, sizeof(info));
	info.container = 18;
	info.container_version = 1;
	info.sym_algo = 9;
	info.pk_algo = 1;
	info.key_fpr_len = 20;
	memset(info.key_fpr, 0xab, 20);
	info.has_literal = true;
	info.literal_format = 'b';
	info.literal_name_len = 5;
	memcpy(info.literal_name, "x.txt", 6);
	info.n_compression = 1;
	info.compression[0] = 2;
	info.n_recipients = 1;
	info.n_recipients_total = 1;
	info.recipients[0].version = 3;
	info.recipients[0].pk_algo = 1;
	info.integrity = PD_INTEGRITY_MDC;

	start(0x01, 4); /* one DECRYPT, answered OK */
	data(1, "hello world");
	result(1, PD_ST_OK, PD_INTEGRITY_MDC, NULL, NULL, &info);
	save(dir, "decrypt-ok");

	start(0x21, 4); /* with metadata first */
	add(pd_frame_encode_metadata(buf + len, sizeof(buf) - len, 1, &info));
	data(1, "hello world");
	result(1, PD_ST_OK, PD_INTEGRITY_MDC, NULL, NULL, &info);
	save(dir, "decrypt-metadata");

	start(0x01, 4); /* the fixed integrity failure, after provisional plaintext */
	data(1, "provisional");
	result(1, PD_ST_INTEGRITY, PD_INTEGRITY_NONE, "EINTEGRITY",
	       "integrity check failed: the message was modified, or the session key is wrong", NULL);
	save(dir, "decrypt-integrity");

	start(0x0f, 4); /* DECRYPT, PING, STATS, KEYS */
	data(1, "plain");
	result(1, PD_ST_OK, PD_INTEGRITY_AEAD, NULL, NULL, NULL);
	add(pd_frame_encode(buf + len, sizeof(buf) - len, PD_FT_PONG, 2, NULL, 0));
	data(3, "{\"requests\": 1}");
	result(3, PD_ST_OK, 0, NULL, NULL, NULL);
	struct pd_keyinfo k = { .version = 4, .pk_algo = 18, .bits = 256, .fpr_len = 20, .primary_fpr_len = 20,
	                        .created = 1700000000 };
	memset(k.fpr, 0x11, 20);
	memset(k.primary_fpr, 0x22, 20);
	memset(k.keyid, 0x33, 8);
	snprintf(k.curve, sizeof(k.curve), "Curve25519");
	static const char addrs[] = "cv@test\0@example.org";
	add(pd_frame_encode_key(buf + len, sizeof(buf) - len, 4, &k, addrs, sizeof(addrs)));
	result(4, PD_ST_OK, 0, NULL, NULL, NULL);
	save(dir, "all-four");

	/* DECRYPT, PING and a password DECRYPT; with one in flight the PONG
	 * comes before the client could send its PING: a violation */
	for (int inflight = 1; inflight <= 4; inflight += 3) {
		start(0x43, (uint32_t)inflight);
		result(1, PD_ST_NO_KEY, PD_INTEGRITY_NONE, "ENOKEY", "no secret key for any recipient", NULL);
		add(pd_frame_encode(buf + len, sizeof(buf) - len, PD_FT_PONG, 2, NULL, 0));
		data(3, "secret");
		result(3, PD_ST_OK, PD_INTEGRITY_AEAD, NULL, NULL, NULL);
		save(dir, inflight == 1 ? "pipelined-inflight1" : "pipelined");
	}

	start(0x03, 4); /* an ERROR ends the connection midway */
	data(1, "par");
	add(pd_frame_encode_error(buf + len, sizeof(buf) - len, PD_ST_SHUTTING_DOWN, "ESHUTDOWN", "shutting down"));
	save(dir, "error-midway");

	start(0x01, 4); /* a reply for a request that does not exist */
	result(7, PD_ST_OK, PD_INTEGRITY_MDC, NULL, NULL, NULL);
	save(dir, "wrong-id");

	start(0x02, 4); /* a second HELLO */
	add(pd_frame_encode_server_hello(buf + len, sizeof(buf) - len,
	                                 &(struct pd_hello){ .version_min = 1, .version_max = 1, .max_frame = 65536 }));
	save(dir, "second-hello");

	start(0x01, 4); /* the server stops in the middle of a frame */
	data(1, "truncated frame");
	len -= 4;
	save(dir, "cut-midframe");

	/* refused at the handshake */
	len = 0;
	buf[len++] = 0x01;
	add(pd_frame_encode_error(buf + len, sizeof(buf) - len, PD_ST_OVERLOADED, "EOVERLOADED", "too many connections"));
	save(dir, "refused");

	start(0x01, 4); /* HELLO alone, then nothing: the server shuts its side */
	len = 1;
	struct pd_hello h = { .version_min = 1, .version_max = 1, .max_frame = 65536, .max_inflight = 4 };
	add(pd_frame_encode_server_hello(buf + len, sizeof(buf) - len, &h));
	save(dir, "hello-only");
	return 0;
}
