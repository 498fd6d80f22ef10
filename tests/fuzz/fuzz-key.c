/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the key ring (lib/pgp/keyring.c, s2k.c, the RSA/ECC/
 * ElGamal key checks): hostile key files.  Key files come from the operator,
 * but a daemon that loads a directory of them must still say "bad key file"
 * rather than crash.  Each input is added, armored or binary, to a fresh ring
 * with the passphrase of the protected test keys; beyond "no crash, no leak"
 * it checks that a ring reports exactly the keys it says it added, that
 * every one of them describes itself (a 20- or 32-octet fingerprint, no two
 * alike: keys already held are skipped), that every key it skips is named
 * with a reason, and that adding the same data again adds nothing and
 * changes nothing.
 *
 * libFuzzer: build as fuzz-msg.c says, with this file; corpus seeds are
 * tests/fuzz/corpus/key/ (copies of tests/data/keys/, without the A.5 key:
 * its 2 GiB Argon2 takes seconds per run, and crafted-*: the keys of
 * tests/integration/keycraft.py that no peer writes, v3, v5, SM2, ML-KEM,
 * a v6 key with the legacy Curve25519 OID, an RSA key without key flags).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pgpdec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "fuzz-key: check failed: %s\n", #x); abort(); } } while (0)

static bool ready;

/* Every skipped key is named and has a reason. */
static void on_skip(void *ctx, const struct pd_keyskip *s)
{
	(*(unsigned *)ctx)++;
	CHECK(s->kind >= PD_KEYSKIP_UNSUPPORTED && s->kind <= PD_KEYSKIP_NO_SECRET);
	CHECK(s->name && s->name[0] && strlen(s->name) < 200);
	CHECK(s->reason && s->reason[0] && strlen(s->reason) < 200);
	CHECK(s->fpr_len == 0 || s->fpr_len == 20 || s->fpr_len == 32);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	if (!ready) {
		CHECK(pd_lib_init(1 << 20) == 0);
		ready = true;
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char pass[] = "test passphrase";
	struct pd_keyring *kr;
	char detail[256];

	LLVMFuzzerInitialize(NULL, NULL);
	if (size > (1 << 20))
		return 0;
	CHECK(pd_keyring_new(&kr, PD_RSA_DEFAULT) == 0);
	detail[0] = 0;
	unsigned skipped = 0;
	int r = pd_keyring_add_report(kr, data, size, pass, strlen(pass), on_skip, &skipped, detail, sizeof(detail));
	CHECK(memchr(detail, 0, sizeof(detail)) != NULL);
	/* "nothing usable" because of unusable keys names one of them */
	if ((r == PD_EUNSUPPORTED || r == PD_EMALFORMED) && !strncmp(detail, "no usable", 9))
		CHECK(skipped > 0 && (strstr(detail, ": key ") || strstr(detail, ": the ")));
	if (r >= 0) {
		size_t n = pd_keyring_count(kr);
		CHECK((size_t)r == n);
		struct pd_keyinfo *ki = calloc(n ? n : 1, sizeof(*ki));
		CHECK(ki);
		for (size_t i = 0; i < n; i++) {
			CHECK(pd_keyring_info(kr, i, &ki[i]) == 0);
			CHECK(ki[i].fpr_len == 20 || ki[i].fpr_len == 32);
			for (size_t j = 0; j < i; j++)
				CHECK(ki[j].fpr_len != ki[i].fpr_len || memcmp(ki[j].fpr, ki[i].fpr, ki[i].fpr_len) != 0);
		}
		if (r > 0) {
			CHECK(pd_keyring_add(kr, data, size, pass, strlen(pass), detail, sizeof(detail)) == 0);
			CHECK(pd_keyring_count(kr) == n);
		}
		free(ki);
	} else {
		CHECK(pd_keyring_count(kr) == 0); /* on error nothing is added */
	}
	pd_keyring_free(kr);
	return 0;
}
