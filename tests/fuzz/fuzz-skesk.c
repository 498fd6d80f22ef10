/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for password key derivation under small caps (lib/pgp/skesk.c,
 * s2k.c and the SKESK planning of lib/msg.c): a hostile sender chooses the
 * S2K of every SKESK, so every cost it names must be capped before any work.
 * The first octet picks the mode:
 *
 *   even: the rest is a list of SKESK bodies, each after a one-octet length,
 *         given to pd_skesk_try() and pd_skesk_decrypt() with the password
 *         "password";
 *   odd:  the rest is a whole message (armored or binary) given to pd_msg
 *         with that password and an empty key ring.
 *
 * The caps (CAPS below) are tiny.  pd_s2k_derive is wrapped at link time
 * (-Wl,--wrap=pd_s2k_derive), so the harness sees every derivation asked
 * for and checks, with its own reading of the caps, that:
 *
 *   - a derivation whose S2K exceeds a cap (iterated count, Argon2 memory,
 *     passes, lanes) does no work and fails with PD_ELIMIT;
 *   - one SKESK costs at most one derivation; a message at most
 *     max_skesk_trials, whose work (pd_s2k_work_kib) adds up to at most
 *     max_kdf_mib, and a SKESK over a cap is PD_ELIMIT from pd_skesk_try;
 *   - pd_skesk_try and pd_skesk_decrypt agree: a key that passed its check
 *     (the mask all ones) is what decrypt returns, a failed mask is
 *     PD_EBADPASS there, an error is the same error; the mask is 0 or ~0;
 *   - a failed message leaves its information scrubbed (as fuzz-msg checks).
 *
 * libFuzzer: contrib/fuzz.sh builds it; fuzz-main.c replays
 * tests/fuzz/corpus/skesk/ (tests/fuzz/make-skesk-corpus.py writes the
 * seeds).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gcrypt.h>

#include "internal.h"
#include "pgp/s2k.h"
#include "pgp/skesk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "fuzz-skesk: check failed: %s\n", #x); abort(); } } while (0)

static const struct pd_limits CAPS = {
	.max_output = 1u << 20, .max_aead_chunk_log = 16,
	.max_s2k_count = 65536,  /* 64 KiB hashed */
	.max_argon2_kib = 64, .max_argon2_passes = 2, .max_argon2_lanes = 2,
	.max_skesk_trials = 24, .max_kdf_mib = 1, /* 1 MiB: 16 derivations at the caps */
	.max_esk = 32, .max_packets = 64, .max_partials = 64,
	.max_depth = 4, .max_ratio = 100, .ratio_grace = 1u << 16, .max_key_trials = 4,
};
static const char PW[] = "password";

static struct pd_worker *wk;
static struct pd_keyring *kr;
static unsigned n_derive;   /* derivations that did work, since the last reset */
static uint64_t work_kib;   /* and their pd_s2k_work_kib() */

/* The caps as this harness reads them (independently of pd_s2k_check). */
static bool over_caps(const struct pd_s2k *s)
{
	if (s->type == 3)
		return s->count > CAPS.max_s2k_count;
	if (s->type == 4)
		return (s->m >= 32 || (1ull << s->m) > CAPS.max_argon2_kib) || s->t > CAPS.max_argon2_passes ||
		       s->p > CAPS.max_argon2_lanes;
	return false;
}

int __real_pd_s2k_derive(const struct pd_s2k *s, const char *pass, size_t passlen, uint8_t *out, size_t outlen,
                         const struct pd_limits *lim);
int __wrap_pd_s2k_derive(const struct pd_s2k *s, const char *pass, size_t passlen, uint8_t *out, size_t outlen,
                         const struct pd_limits *lim);
int __wrap_pd_s2k_derive(const struct pd_s2k *s, const char *pass, size_t passlen, uint8_t *out, size_t outlen,
                         const struct pd_limits *lim)
{
	int r = __real_pd_s2k_derive(s, pass, passlen, out, outlen, lim);
	if (over_caps(s)) {
		CHECK(r == PD_ELIMIT);
		return r;
	}
	n_derive++;
	work_kib += pd_s2k_work_kib(s, outlen);
	return r;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	if (!wk) {
		CHECK(pd_lib_init(1 << 20) == 0);
		CHECK(pd_worker_new(&wk, 0) == 0);
		CHECK(pd_keyring_new(&kr, PD_RSA_DEFAULT) == 0);
	}
	return 0;
}

static void one_skesk(const uint8_t *b, size_t n)
{
	struct pd_skesk s;
	int pr = pd_skesk_parse(b, n, &s);
	bool over = pr == 0 && over_caps(&s.s2k);

	struct pd_sesskey *k1 = gcry_malloc_secure(sizeof(*k1)), *k2 = gcry_malloc_secure(sizeof(*k2));
	CHECK(k1 && k2);
	memset(k1, 0, sizeof(*k1));
	memset(k2, 0xee, sizeof(*k2));
	uint32_t ok = 0x5a5a5a5a;
	n_derive = 0;
	int r = pd_skesk_try(wk, b, n, PW, strlen(PW), &CAPS, k1, &ok);
	CHECK(n_derive <= 1);
	if (pr < 0)
		CHECK(r < 0 && n_derive == 0);
	if (over)
		CHECK(r == PD_ELIMIT && n_derive == 0);
	if (r == 0)
		CHECK(ok == 0 || ok == UINT32_MAX);
	CHECK(r != PD_EINTERNAL);
	if (getenv("FUZZ_SKESK_VERBOSE"))
		fprintf(stderr, "fuzz-skesk: skesk: %s, ok %d, %u derivations%s\n", r < 0 ? pd_errname(r) : "0", ok != 0,
		        n_derive, over ? " (over a cap)" : "");

	n_derive = 0;
	int r2 = pd_skesk_decrypt(wk, b, n, PW, strlen(PW), &CAPS, k2);
	CHECK(n_derive <= 1);
	if (r == 0 && ok) {
		CHECK(r2 == 0);
		CHECK(k1->algo == k2->algo && k1->len == k2->len && k1->len <= sizeof(k1->key));
		CHECK(memcmp(k1->key, k2->key, k1->len) == 0);
	} else if (r == 0) {
		CHECK(r2 == PD_EBADPASS);
	} else {
		CHECK(r2 == r);
	}
	pd_wipe(k1, sizeof(*k1));
	pd_wipe(k2, sizeof(*k2));
	gcry_free(k1);
	gcry_free(k2);
}

static void check_scrubbed(const struct pd_msginfo *info)
{
	CHECK(info->pk_algo == 0 && info->key_fpr_len == 0 && !info->has_literal && info->n_compression == 0);
	CHECK(info->n_issuers == 0 && info->n_signatures == 0 && info->integrity == PD_INTEGRITY_NONE);
	CHECK(info->bytes_out == 0);
	if (!(info->container == 20 || (info->container == 18 && info->container_version == 2)))
		CHECK(info->sym_algo == 0);
}

static void one_message(const uint8_t *in, size_t len)
{
	static uint8_t out[4096];
	struct pd_msg *m = NULL;
	CHECK(pd_msg_new(&m, &CAPS) == 0);
	CHECK(pd_msg_set_password(m, PW, strlen(PW)) == 0);
	n_derive = 0;
	work_kib = 0;
	size_t pos = 0;
	bool closed = false;
	int st = 0;
	for (int guard = 0; guard < 1000000; guard++) {
		size_t used = 0;
		if (pos < len && pd_msg_input_space(m) > 0) {
			st = pd_msg_write(m, in + pos, len - pos, &used);
			if (st < 0)
				break;
			pos += used;
		}
		if (pos == len && !closed) {
			st = pd_msg_close_input(m);
			if (st < 0)
				break;
			closed = true;
		}
		size_t got = 0;
		st = pd_msg_step(m, wk, out, sizeof(out), &got);
		if (st == PD_STEP_NEED_KEY) {
			st = pd_msg_recover_key(m, kr, wk);
			if (st < 0)
				break;
			continue;
		}
		if (st == PD_STEP_NEED_INPUT) {
			CHECK(!closed && pd_msg_input_space(m) > 0);
			continue;
		}
		if (st == PD_STEP_OUTPUT || st == PD_STEP_METADATA)
			continue;
		break;
	}
	if (getenv("FUZZ_SKESK_VERBOSE"))
		fprintf(stderr, "fuzz-skesk: message: %s (%s), %u derivations, %llu KiB\n",
		        st < 0 ? pd_errname(st) : st == PD_STEP_DONE ? "DONE" : "?", pd_msg_detail(m), n_derive,
		        (unsigned long long)work_kib);
	CHECK(st == PD_STEP_DONE || st < 0);
	CHECK(st != PD_EINTERNAL);
	CHECK(n_derive <= CAPS.max_skesk_trials);
	CHECK(work_kib <= (uint64_t)CAPS.max_kdf_mib * 1024);
	if (st < 0)
		check_scrubbed(pd_msg_info(m));
	pd_msg_free(m, wk);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	LLVMFuzzerInitialize(NULL, NULL);
	if (size < 1 || size > (1u << 16))
		return 0;
	if (data[0] & 1) {
		one_message(data + 1, size - 1);
		return 0;
	}
	for (size_t pos = 1; pos < size;) {
		size_t n = data[pos++];
		if (n > size - pos)
			n = size - pos;
		one_skesk(data + pos, n);
		pos += n;
	}
	return 0;
}
