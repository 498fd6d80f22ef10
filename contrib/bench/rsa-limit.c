/* SPDX-License-Identifier: MIT */
/*
 * pd-rsa-limit: the physical limit of pgpdecd on this machine, in RSA
 * private-key operations per second, for each RSA backend.
 *
 * It runs exactly the work a pgpdecd worker does for a v3 RSA PKESK, through
 * the project's own interfaces: the key ring (pgp/key.h) loads and unlocks
 * the key and sets up the backend (pgp/rsa.h); each operation is the raw
 * decrypt pd_rsa_decrypt_raw() followed by the constant-time
 * pd_pkcs1_decode_sesskey() (pgp/unwrap.h), or, with --unwrap, the whole
 * pd_unwrap() (MPI parse, c < n check, implicit-rejection HMAC, decrypt,
 * decode).  T threads, each with its own pd_worker (own EVP_PKEY_CTX, as the
 * daemon's workers), run back to back for S seconds per backend.  The
 * message throughput of pgpdecd can be at most this figure; run.sh divides
 * by it.
 *
 * The PKESK is made here: a random AES-256 session key, PKCS#1 v1.5 padded
 * and encrypted to the key's public part with libgcrypt, and every
 * operation's result is checked against it (a wrong key ends the run).
 */
#include "readfile.h"
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <gcrypt.h>

#include "internal.h"
#include "pgp/key.h"
#include "pgp/rsa.h"
#include "pgp/unwrap.h"
#include "worker.h"

#define EXIT_USAGE 2
#define MAX_PKESK 2100 /* 10 + 2 + 2048 octets: the engine's modulus cap */

struct opts {
	const char *key_file;
	const char *passphrase_file;
	unsigned threads;
	double seconds;
	bool json;
	bool unwrap;
	bool want[3]; /* indexed by enum pd_rsa_backend */
};

/* One backend's run: the key ring, the chosen key and the PKESK made for it. */
struct run {
	enum pd_rsa_backend backend;
	const struct opts *o;
	struct pd_keyring *kr;
	const struct pd_key *k;
	uint8_t pkesk[MAX_PKESK];
	size_t pkesk_len;
	struct pd_pkesk p;
	const uint8_t *c; /* the MPI's octets inside pkesk */
	size_t clen;
	struct pd_sesskey *expect; /* secure memory */
	pthread_barrier_t start;
	atomic_bool stop;
	atomic_int failed;
};

struct thr {
	struct run *run;
	unsigned index;
	pthread_t tid;
	uint64_t ops;
	double t0, t1;
	int err;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *backend_name(enum pd_rsa_backend b)
{
	return b == PD_RSA_OPENSSL ? "openssl" : b == PD_RSA_GCRYPT ? "gcrypt" : "default";
}

static void usage(FILE *f)
{
	fputs("Usage: pd-rsa-limit [OPTION]... KEYFILE\n"
	      "RSA private-key operations per second for each RSA backend of pgpdecd,\n"
	      "through the engine's own key ring, backends and PKCS#1 decoder.\n"
	      "KEYFILE: a secret key as `gpg --export-secret-keys` writes it (binary or\n"
	      "armored); the first RSA decryption (sub)key in it is used.\n"
	      "\n"
	      "  -t, --threads T          threads, each with its own worker (default: CPUs)\n"
	      "  -s, --seconds S          duration per backend (default 3)\n"
	      "  -b, --backend NAME       openssl, gcrypt or both (default both)\n"
	      "      --unwrap             time the whole pd_unwrap() (MPI parse, range check,\n"
	      "                           implicit-rejection HMAC) instead of raw decrypt +\n"
	      "                           PKCS#1 decode\n"
	      "      --passphrase-file F  passphrase of a protected key (first line)\n"
	      "      --json               one JSON object on stdout\n"
	      "  -h, --help               this text\n"
	      "\n"
	      "Exit status: 0 ok, 1 error (bad key file, wrong result), 2 usage.\n",
	      f);
}

/* Make a v3 PKESK for r->k carrying a fresh AES-256 session key. */
static int make_pkesk(struct run *r)
{
	const struct pd_key *k = r->k;
	gcry_sexp_t pub = NULL, data = NULL, enc = NULL, a = NULL;
	gcry_mpi_t cm = NULL;
	uint8_t *msg = NULL;
	int rc = -1;

	r->expect->algo = 9;
	r->expect->len = 32;
	gcry_randomize(r->expect->key, 32, GCRY_STRONG_RANDOM);
	/* algo || key || sum16(key): the v3 session-key encoding */
	msg = gcry_malloc_secure(35);
	if (!msg)
		goto out;
	msg[0] = 9;
	memcpy(msg + 1, r->expect->key, 32);
	unsigned sum = 0;
	for (size_t i = 0; i < 32; i++)
		sum += r->expect->key[i];
	msg[33] = (uint8_t)(sum >> 8);
	msg[34] = (uint8_t)sum;
	if (gcry_sexp_build(&pub, NULL, "(public-key(rsa(n%m)(e%m)))", k->n, k->e) ||
	    gcry_sexp_build(&data, NULL, "(data(flags pkcs1)(value %b))", 35, msg) ||
	    gcry_pk_encrypt(&enc, data, pub))
		goto out;
	a = gcry_sexp_find_token(enc, "a", 0);
	cm = a ? gcry_sexp_nth_mpi(a, 1, GCRYMPI_FMT_USG) : NULL;
	if (!cm)
		goto out;
	unsigned bits = gcry_mpi_get_nbits(cm);
	size_t clen = (bits + 7) / 8;
	if (12 + clen > sizeof(r->pkesk))
		goto out;
	r->pkesk[0] = 3;
	memcpy(r->pkesk + 1, k->keyid, 8);
	r->pkesk[9] = 1; /* RSA */
	r->pkesk[10] = (uint8_t)(bits >> 8);
	r->pkesk[11] = (uint8_t)bits;
	if (gcry_mpi_print(GCRYMPI_FMT_USG, r->pkesk + 12, clen, NULL, cm))
		goto out;
	r->pkesk_len = 12 + clen;
	r->c = r->pkesk + 12;
	r->clen = clen;
	if (pd_pkesk_parse(r->pkesk, r->pkesk_len, &r->p) < 0)
		goto out;
	rc = 0;
out:
	if (msg) {
		pd_wipe(msg, 35);
		gcry_free(msg);
	}
	gcry_mpi_release(cm);
	gcry_sexp_release(a);
	gcry_sexp_release(enc);
	gcry_sexp_release(data);
	gcry_sexp_release(pub);
	return rc;
}

/* One operation, as a worker runs it; 0 and a correct key, or an error. */
static int one_op(struct run *r, struct pd_worker *w, uint8_t *em, size_t klen, struct pd_sesskey *fb,
                  struct pd_sesskey *out)
{
	uint32_t ok = 0;
	int e;
	if (r->o->unwrap) {
		e = pd_unwrap(w, r->k, &r->p, 0, out, &ok);
	} else {
		e = pd_rsa_decrypt_raw(r->k, pd_worker_index(w), pd_worker_helper(w), r->c, r->clen, em, klen);
		if (e == 0)
			ok = pd_pkcs1_decode_sesskey(em, klen, 0, fb, out);
	}
	if (e < 0)
		return e;
	if (!ok || out->algo != r->expect->algo || out->len != r->expect->len ||
	    memcmp(out->key, r->expect->key, 32))
		return PD_EINTEGRITY;
	return 0;
}

static void *thread_main(void *arg)
{
	struct thr *t = arg;
	struct run *r = t->run;
	struct pd_worker *w = NULL;
	size_t klen = (gcry_mpi_get_nbits(r->k->n) + 7) / 8;
	uint8_t *em = gcry_malloc_secure(klen);
	struct pd_sesskey *sk = gcry_malloc_secure(2 * sizeof(*sk));

	t->err = !em || !sk ? -ENOMEM : pd_worker_new(&w, t->index);
	if (t->err == 0) {
		memset(sk, 0, 2 * sizeof(*sk));
		sk[0].algo = 9;
		sk[0].len = 32;
		/* warm-up: the lazy per-worker backend context, handle caches */
		t->err = one_op(r, w, em, klen, &sk[0], &sk[1]);
	}
	if (t->err)
		atomic_store(&r->failed, 1);
	pthread_barrier_wait(&r->start);
	if (atomic_load(&r->failed))
		goto out;
	t->t0 = now();
	while (!atomic_load_explicit(&r->stop, memory_order_relaxed)) {
		t->err = one_op(r, w, em, klen, &sk[0], &sk[1]);
		if (t->err) {
			atomic_store(&r->failed, 1);
			break;
		}
		t->ops++;
	}
	t->t1 = now();
out:
	pd_worker_free(w);
	if (em) {
		pd_wipe(em, klen);
		gcry_free(em);
	}
	if (sk) {
		pd_wipe(sk, 2 * sizeof(*sk));
		gcry_free(sk);
	}
	return NULL;
}

struct result {
	enum pd_rsa_backend backend;
	uint64_t ops;
	double rate;       /* operations per second, all threads */
	double ms_per_op;  /* mean time of one operation on one thread */
	double elapsed;
};

static int load(struct run *r, const uint8_t *keydata, size_t keylen, const char *pass, size_t passlen)
{
	char detail[256] = "";
	int e = pd_keyring_new(&r->kr, r->backend);
	if (e == 0)
		e = pd_keyring_add(r->kr, keydata, keylen, pass, passlen, detail, sizeof detail);
	if (e < 0) {
		fprintf(stderr, "pd-rsa-limit: %s: %s%s%s\n", r->o->key_file, pd_strerror(e), *detail ? ": " : "",
		        detail);
		return -1;
	}
	for (size_t i = 0; i < pd__keyring_n(r->kr) && !r->k; i++) {
		const struct pd_key *k = pd__keyring_get(r->kr, i);
		if ((k->pk_algo == PD_PK_RSA || k->pk_algo == PD_PK_RSA_E) && k->n)
			r->k = k;
	}
	if (!r->k) {
		fprintf(stderr, "pd-rsa-limit: %s: no RSA decryption key in it\n", r->o->key_file);
		return -1;
	}
	r->expect = gcry_malloc_secure(sizeof(*r->expect));
	if (!r->expect || make_pkesk(r) < 0) {
		fprintf(stderr, "pd-rsa-limit: cannot encrypt a test session key to the key\n");
		return -1;
	}
	return 0;
}

static int run_backend(struct run *r, struct result *res)
{
	const struct opts *o = r->o;
	struct thr *t = calloc(o->threads, sizeof(*t));
	unsigned started = 0;
	int rc = -1;

	if (!t)
		return -1;
	atomic_init(&r->stop, false);
	atomic_init(&r->failed, 0);
	pthread_barrier_init(&r->start, NULL, o->threads + 1);
	for (; started < o->threads; started++) {
		t[started] = (struct thr){ .run = r, .index = started };
		if (pthread_create(&t[started].tid, NULL, thread_main, &t[started]))
			break;
	}
	if (started < o->threads) {
		/* cannot reach the barrier count: nothing sensible to do */
		fprintf(stderr, "pd-rsa-limit: cannot start %u threads\n", o->threads);
		exit(1);
	}
	pthread_barrier_wait(&r->start);
	if (!atomic_load(&r->failed)) {
		/* sleep in short steps so that a failing thread ends the run early */
		double end = now() + o->seconds;
		while (now() < end && !atomic_load(&r->failed))
			usleep(20000);
	}
	atomic_store(&r->stop, true);
	for (unsigned i = 0; i < started; i++)
		pthread_join(t[i].tid, NULL);
	pthread_barrier_destroy(&r->start);

	*res = (struct result){ .backend = r->backend };
	double busy = 0;
	for (unsigned i = 0; i < o->threads; i++) {
		if (t[i].err) {
			fprintf(stderr, "pd-rsa-limit: %s, thread %u: %s\n", backend_name(r->backend), i,
			        t[i].err == PD_EINTEGRITY ? "wrong session key decoded" : pd_strerror(t[i].err));
			goto out;
		}
		double el = t[i].t1 - t[i].t0;
		res->ops += t[i].ops;
		if (el > 0)
			res->rate += (double)t[i].ops / el;
		busy += el;
		res->elapsed = PD_MAX(res->elapsed, el);
	}
	res->ms_per_op = res->ops ? busy * 1000.0 / (double)res->ops : 0;
	rc = 0;
out:
	free(t);
	return rc;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	enum { O_JSON = 256, O_UNWRAP, O_PASS };
	static const struct option lo[] = {
		{ "threads", required_argument, NULL, 't' },
		{ "seconds", required_argument, NULL, 's' },
		{ "backend", required_argument, NULL, 'b' },
		{ "unwrap", no_argument, NULL, O_UNWRAP },
		{ "passphrase-file", required_argument, NULL, O_PASS },
		{ "json", no_argument, NULL, O_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	*o = (struct opts){ .threads = ncpu > 0 ? (unsigned)ncpu : 1, .seconds = 3.0 };
	o->want[PD_RSA_OPENSSL] = o->want[PD_RSA_GCRYPT] = true;
	int c;
	while ((c = getopt_long(argc, argv, "t:s:b:h", lo, NULL)) != -1) {
		char *end;
		switch (c) {
		case 't': {
			unsigned long v = strtoul(optarg, &end, 10);
			if (*end || v < 1 || v > PD_MAX_WORKERS) {
				fprintf(stderr, "pd-rsa-limit: --threads must be 1..%d\n", PD_MAX_WORKERS);
				return -1;
			}
			o->threads = (unsigned)v;
			break;
		}
		case 's':
			o->seconds = strtod(optarg, &end);
			if (*end || !(o->seconds > 0 && o->seconds <= 3600)) {
				fprintf(stderr, "pd-rsa-limit: --seconds must be in (0, 3600]\n");
				return -1;
			}
			break;
		case 'b':
			o->want[PD_RSA_OPENSSL] = !strcmp(optarg, "openssl") || !strcmp(optarg, "both");
			o->want[PD_RSA_GCRYPT] = !strcmp(optarg, "gcrypt") || !strcmp(optarg, "both");
			if (!o->want[PD_RSA_OPENSSL] && !o->want[PD_RSA_GCRYPT]) {
				fprintf(stderr, "pd-rsa-limit: --backend: openssl, gcrypt or both\n");
				return -1;
			}
			break;
		case O_UNWRAP: o->unwrap = true; break;
		case O_PASS: o->passphrase_file = optarg; break;
		case O_JSON: o->json = true; break;
		case 'h': usage(stdout); exit(0);
		default: return -1;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "pd-rsa-limit: exactly one KEYFILE expected (--help)\n");
		return -1;
	}
	o->key_file = argv[optind];
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	uint8_t *keydata = NULL, *pass = NULL;
	size_t keylen = 0, passlen = 0, passcap = 0;
	struct run runs[2] = { 0 };
	struct result res[2] = { 0 };
	size_t nres = 0;
	int rc = 1, e;

	if (parse_opts(argc, argv, &o) < 0)
		return EXIT_USAGE;
	e = pd_lib_init(0);
	if (e < 0) {
		fprintf(stderr, "pd-rsa-limit: library setup failed: %s\n", pd_strerror(e));
		return 1;
	}
	if ((e = pd_read_file(o.key_file, PD_TOOL_MAX_FILE, &keydata, &keylen)) < 0) {
		fprintf(stderr, "pd-rsa-limit: %s: %s\n", o.key_file, strerror(-e));
		goto out;
	}
	if (o.passphrase_file) {
		if ((e = pd_read_file(o.passphrase_file, PD_TOOL_MAX_FILE, &pass, &passlen)) < 0) {
			fprintf(stderr, "pd-rsa-limit: %s: %s\n", o.passphrase_file, strerror(-e));
			goto out;
		}
		passcap = passlen;
		size_t nl = 0;
		while (nl < passlen && pass[nl] != '\n')
			nl++;
		passlen = nl;
	}
	static const enum pd_rsa_backend order[2] = { PD_RSA_OPENSSL, PD_RSA_GCRYPT };
	for (size_t i = 0; i < 2; i++) {
		if (!o.want[order[i]])
			continue;
		struct run *r = &runs[nres];
		r->backend = order[i];
		r->o = &o;
		if (load(r, keydata, keylen, (const char *)pass, passlen) < 0 || run_backend(r, &res[nres]) < 0)
			goto out;
		nres++;
	}

	const struct pd_key *k = runs[0].k;
	char fpr[65];
	pd_hex(fpr, k->fpr, k->fpr_len);
	unsigned bits = gcry_mpi_get_nbits(k->n);
	const char *op = o.unwrap ? "pd_unwrap" : "raw decrypt + PKCS#1 decode";
	double ratio = nres == 2 && res[1].rate > 0 ? res[0].rate / res[1].rate : 0;
	if (o.json) {
		printf("{\"key\":\"%s\",\"bits\":%u,\"threads\":%u,\"seconds\":%.3g,\"operation\":\"%s\",\"backends\":{",
		       fpr, bits, o.threads, o.seconds, o.unwrap ? "unwrap" : "raw+pkcs1");
		for (size_t i = 0; i < nres; i++)
			printf("%s\"%s\":{\"ops\":%" PRIu64 ",\"ops_per_s\":%.1f,\"ms_per_op\":%.4f}", i ? "," : "",
			       backend_name(res[i].backend), res[i].ops, res[i].rate, res[i].ms_per_op);
		printf("}");
		if (nres == 2)
			printf(",\"ratio_openssl_gcrypt\":%.3f", ratio);
		printf("}\n");
	} else {
		printf("key %s, RSA-%u; %u thread%s, %.3g s per backend; operation: %s\n", fpr, bits, o.threads,
		       o.threads == 1 ? "" : "s", o.seconds, op);
		for (size_t i = 0; i < nres; i++)
			printf("%-8s %10.1f ops/s  (%" PRIu64 " ops, %.3f ms per op per thread)\n",
			       backend_name(res[i].backend), res[i].rate, res[i].ops, res[i].ms_per_op);
		if (nres == 2)
			printf("ratio openssl/gcrypt: %.2f\n", ratio);
	}
	rc = 0;
out:
	for (size_t i = 0; i < 2; i++) {
		pd_keyring_free(runs[i].kr);
		if (runs[i].expect) {
			pd_wipe(runs[i].expect, sizeof(*runs[i].expect));
			gcry_free(runs[i].expect);
		}
	}
	if (pass) {
		pd_wipe(pass, passcap);
		free(pass);
	}
	free(keydata);
	pd_lib_deinit();
	return rc;
}
