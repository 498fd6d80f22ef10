/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the engine (lib/msg.c and every layer under it): hostile
 * messages, fed in hostile slices.  The first input octet picks the mode and
 * the slice size:
 *
 *   even: the rest is a whole message (armored or binary) for a key ring
 *         holding tests/data/keys/rsa2048.gpg and the password "password":
 *         armor, outer packets, PKESK/SKESK parsing, S2K, unwrap (implicit
 *         rejection), SED/SEIPD/AEAD headers;
 *   odd:  the rest is the *plaintext* of a SEIPD v1 packet that this harness
 *         encrypts under a fixed AES-128 session key with a correct MDC, so
 *         the inner layers (packet stream, compressed packets, nested
 *         messages, one-pass signatures, literal data) see the fuzzer's bytes
 *         as they are and the integrity check passes.  With bit 4 set too,
 *         the same plaintext then runs again in a packet whose MDC does not
 *         verify (bits 5-6 pick the forgery: the last or the first octet of
 *         the SHA-1 flipped, the MDC packet's tag octet flipped, or the
 *         ciphertext of the last plaintext octet flipped, which also garbles
 *         the block after it).
 *
 * Beyond "no crash, no leak, no sanitizer report" it checks the engine's
 * promises: output never exceeds the buffer it was given or max_output,
 * DONE comes with integrity MDC/AEAD (never NONE), and after an error or
 * DONE the next step repeats it.  Every failure leaves the message
 * information scrubbed of what the decrypted octets and the key trials
 * decided (no key, no literal, no compression, no signatures, integrity
 * NONE, 0 octets out, no cipher for a SEIPD v1 / SED container).  A forged
 * packet, whatever its plaintext, ends in PD_EINTEGRITY with the one fixed
 * sentence and never in DONE: nothing observable may depend on octets the
 * MDC did not authenticate.  An authentic one never gets that sentence.
 *
 * libFuzzer (from the source tree; PD_TEST_DATA points at tests/data):
 *   CC=clang meson setup build-fuzz -Db_sanitize=address,undefined \
 *     -Dc_args=-fsanitize=fuzzer-no-link && ninja -C build-fuzz lib/libpgpdec.a
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE \
 *     -DPD_TEST_DATA='"tests/data"' -Ilib -Ibuild-fuzz tests/fuzz/fuzz-msg.c \
 *     build-fuzz/lib/libpgpdec.a $(pkg-config --libs libgcrypt zlib libcrypto) \
 *     -lbz2 -o fuzz-msg
 *   ./fuzz-msg -detect_leaks=0 -max_len=65536 corpus-dir tests/fuzz/corpus/msg
 * -detect_leaks=0: libFuzzer's check while the process runs calls OpenSSL's
 * random generators a leak (they are referenced from OpenSSL's secure heap,
 * which LeakSanitizer does not scan).  So leaks are found at exit instead:
 * replay what the run found with the sanitizer build, as the fuzz-regress
 * suite does (that is how a leaked decompressor was found):
 *   build-asan/tests/fuzz/fuzz-msg corpus-dir
 * Otherwise fuzz-main.c replays tests/fuzz/corpus/msg/ as a meson test.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gcrypt.h>

#include "internal.h"
#include "pgpdec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "fuzz-msg: check failed: %s\n", #x); abort(); } } while (0)

#define MAX_OUTPUT (4u << 20)
#define INTEGRITY_SENTENCE "integrity check failed: the message was modified, or the session key is wrong"

enum forgery { F_NONE = -1, F_HASH_LAST, F_HASH_FIRST, F_MDC_TAG, F_PLAIN_LAST };
#define MAX_INNER (1u << 20)

static struct pd_keyring *kr;
static struct pd_worker *wk;
static bool verbose; /* FUZZ_MSG_VERBOSE=1: one line per input */

static int run(const uint8_t *data, size_t size, enum forgery forge);

static void init(void)
{
	char path[1024], detail[256];
	snprintf(path, sizeof(path), "%s/keys/rsa2048.gpg", PD_TEST_DATA);
	FILE *f = fopen(path, "rb");
	CHECK(f);
	static uint8_t key[1 << 16];
	size_t n = fread(key, 1, sizeof(key), f);
	fclose(f);
	CHECK(pd_lib_init(1 << 20) == 0);
	CHECK(pd_keyring_new(&kr, PD_RSA_DEFAULT) == 0);
	CHECK(pd_keyring_add(kr, key, n, NULL, 0, detail, sizeof(detail)) > 0);
	CHECK(pd_worker_new(&wk, 0) == 0);
	verbose = getenv("FUZZ_MSG_VERBOSE") != NULL;
	/* One real decryption first: the worker's lazily made per-key RSA
	 * context and its handle cache live as long as the ring, and libFuzzer
	 * would report them as leaks of whichever input made them. */
	snprintf(path, sizeof(path), "%s/keys/rsa2048-msg.gpg", PD_TEST_DATA);
	f = fopen(path, "rb");
	CHECK(f);
	static uint8_t warm[1 << 16];
	warm[0] = 5 << 1; /* outer, slice 4096 */
	n = fread(warm + 1, 1, sizeof(warm) - 1, f);
	fclose(f);
	CHECK(run(warm, n + 1, F_NONE) == PD_STEP_DONE);
}

/* SEIPD v1 (tag 18, 5-octet length) around plain, under AES-128 key k:
 * CFB with a zero IV over prefix (16 random + 2 repeated) || plain ||
 * D3 14 || SHA-1 of all that before it; then one ciphertext octet is
 * flipped as forge says (F_NONE: none, the MDC verifies).  In CFB a flipped
 * ciphertext octet flips the same plaintext octet and garbles the next
 * block, so every forgery breaks the MDC. */
static uint8_t *seipd_v1(const uint8_t *plain, size_t len, const uint8_t k[16], enum forgery forge, size_t *ret_len)
{
	size_t body = 1 + 18 + len + 22;
	uint8_t *out = malloc(6 + body);
	CHECK(out);
	out[0] = 0xc0 | 18;
	out[1] = 0xff;
	out[2] = (uint8_t)(body >> 24); out[3] = (uint8_t)(body >> 16);
	out[4] = (uint8_t)(body >> 8); out[5] = (uint8_t)body;
	out[6] = 1; /* version */
	uint8_t *p = out + 7;
	memset(p, 0x5a, 16); /* the prefix needs no randomness here */
	p[16] = p[14];
	p[17] = p[15];
	memcpy(p + 18, plain, len);
	p[18 + len] = 0xd3;
	p[19 + len] = 0x14;
	gcry_md_hash_buffer(GCRY_MD_SHA1, p + 20 + len, p, 20 + len);
	gcry_cipher_hd_t h;
	CHECK(gcry_cipher_open(&h, GCRY_CIPHER_AES128, GCRY_CIPHER_MODE_CFB, 0) == 0);
	CHECK(gcry_cipher_setkey(h, k, 16) == 0);
	CHECK(gcry_cipher_encrypt(h, p, body - 1, NULL, 0) == 0);
	gcry_cipher_close(h);
	switch (forge) {
	case F_NONE: break;
	case F_HASH_LAST: p[39 + len] ^= 0x01; break;
	case F_HASH_FIRST: p[20 + len] ^= 0x80; break;
	case F_MDC_TAG: p[18 + len] ^= 0x40; break;
	case F_PLAIN_LAST: p[17 + len] ^= 0x01; break; /* with no plaintext: the prefix's check octet */
	}
	*ret_len = 6 + body;
	return out;
}

/* After any failure: nothing the decrypted octets or the key trials
 * decided is left in the information (lib/msg.c scrub_info()). */
static void check_scrubbed(const struct pd_msginfo *info)
{
	CHECK(info->pk_algo == 0);
	CHECK(info->key_fpr_len == 0);
	CHECK(!info->has_literal);
	CHECK(info->literal_name_len == 0 && info->literal_date == 0 && info->literal_format == 0);
	CHECK(info->n_compression == 0);
	CHECK(info->n_issuers == 0);
	CHECK(info->n_signatures == 0);
	CHECK(info->integrity == PD_INTEGRITY_NONE);
	CHECK(info->bytes_out == 0);
	bool aead = info->container == 20 || (info->container == 18 && info->container_version == 2);
	if (!aead) /* the cipher of a CFB container came from the unauthenticated session key */
		CHECK(info->sym_algo == 0);
}

/* One input, as described at the top; returns the final step or error.
 * forge != F_NONE (inner mode only): the MDC does not verify. */
static int run(const uint8_t *data, size_t size, enum forgery forge)
{
	static const uint8_t sk[16] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };
	static const size_t slices[] = { 1, 3, 7, 64, 1000, 4096, 65536, 1 << 20 };
	static uint8_t out[8192];

	bool inner = data[0] & 1;
	size_t slice = slices[(data[0] >> 1) % 8];
	size_t outcap = (data[0] & 0x80) ? 13 : sizeof(out);
	data++;
	size--;
	if (inner && size > MAX_INNER)
		return 0;

	uint8_t *msg = NULL;
	size_t mlen = size;
	const uint8_t *in = data;
	if (inner) {
		msg = seipd_v1(data, size, sk, forge, &mlen);
		in = msg;
	}

	struct pd_limits lim;
	pd_limits_default(&lim);
	lim.max_output = MAX_OUTPUT;
	lim.ratio_grace = 1 << 16;
	lim.max_argon2_kib = 64;  /* keep each input fast: the limits are what is tested */
	lim.max_s2k_count = 1 << 20;
	lim.max_key_trials = 4;
	struct pd_msg *m = NULL;
	CHECK(pd_msg_new(&m, &lim) == 0);
	if (!inner)
		CHECK(pd_msg_set_password(m, "password", 8) == 0);

	size_t pos = 0;
	bool closed = false;
	uint64_t total = 0;
	int st = 0;
	for (int guard = 0; guard < 10000000; guard++) {
		size_t used = 0;
		size_t n = mlen - pos < slice ? mlen - pos : slice;
		if (n && pd_msg_input_space(m) > 0) {
			st = pd_msg_write(m, in + pos, n, &used);
			if (st < 0)
				break;
			pos += used;
		}
		if (pos == mlen && !closed) {
			st = pd_msg_close_input(m);
			if (st < 0)
				break;
			closed = true;
		}
		size_t got = 0;
		st = pd_msg_step(m, wk, out, outcap, &got);
		if (st == PD_STEP_OUTPUT) {
			CHECK(got <= outcap);
			total += got;
			CHECK(total <= MAX_OUTPUT);
			continue;
		}
		if (st == PD_STEP_NEED_KEY) {
			if (inner) { /* the test hook stands in for a PKESK */
				CHECK(pd_msg_set_session_key(m, 7, sk, sizeof(sk)) == 0);
				continue;
			}
			st = pd_msg_recover_key(m, kr, wk);
			if (st < 0)
				break;
			continue;
		}
		if (st == PD_STEP_NEED_INPUT) {
			/* Only before the end is declared, and only with room for
			 * more: anything else would be a hang. */
			CHECK(!closed && pd_msg_input_space(m) > 0);
			continue;
		}
		if (st == PD_STEP_METADATA)
			continue;
		break; /* DONE or an error */
	}
	const struct pd_msginfo *info = pd_msg_info(m);
	if (forge != F_NONE) {
		CHECK(st == PD_EINTEGRITY);
		CHECK(strcmp(pd_msg_detail(m), INTEGRITY_SENTENCE) == 0);
		CHECK(info->container == 18 && info->container_version == 1);
	} else if (inner && st < 0) {
		/* The MDC verified: a deferred error is reported as itself. */
		CHECK(strcmp(pd_msg_detail(m), INTEGRITY_SENTENCE) != 0);
	}
	if (st < 0)
		check_scrubbed(info);
	if (st == PD_STEP_DONE) {
		CHECK(info->integrity == PD_INTEGRITY_MDC || info->integrity == PD_INTEGRITY_AEAD);
		CHECK(info->bytes_out == total);
	}
	if (st == PD_STEP_DONE || st < 0) {
		/* Final: the next step says the same again. */
		size_t got = 0;
		CHECK(pd_msg_step(m, wk, out, outcap, &got) == st);
		CHECK(pd_msg_detail(m) != NULL);
	}
	if (verbose)
		fprintf(stderr, "fuzz-msg: %s slice %zu: %s (%s), %llu octets out, integrity %d\n",
		        forge != F_NONE ? "forged" : inner ? "inner" : "outer", slice, st < 0 ? pd_errname(st) : st == PD_STEP_DONE ? "DONE" : "?", pd_msg_detail(m), (unsigned long long)total,
		        (int)info->integrity);
	pd_msg_free(m, wk);
	free(msg);
	return st;
}

/* libFuzzer calls this once before any input (so what init() keeps is not
 * counted as a leak of the first input); fuzz-main.c does not, hence the
 * lazy call below too. */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	if (!kr)
		init();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!kr)
		init();
	if (size >= 1) {
		run(data, size, F_NONE);
		if ((data[0] & 0x11) == 0x11) /* inner, and forged too */
			run(data, size, (enum forgery)((data[0] >> 5) & 3));
	}
	return 0;
}
