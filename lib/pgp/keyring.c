/* SPDX-License-Identifier: MIT */
/*
 * The key ring: transferable secret keys (RFC 9580 §10.2) parsed, unlocked
 * once with the passphrase, validated against their public halves and kept
 * in load order.  Only decryption keys are kept: an encryption algorithm,
 * and key flags that allow encryption (or no key flags at all, as in
 * legacy keys).  Signing keys are parsed so that their fingerprints
 * (primary_fpr of the subkeys that follow) are known.  Signatures are read
 * for their Key Flags and never verified, user IDs are read for their
 * addresses (what binds a key to mail recipients, pd_msg_bind) and trust
 * packets skipped: the operator vouches for the key file.
 *
 * A key packet that cannot be used (unsupported version, algorithm, curve
 * or parameters, malformed contents) is skipped and reported, and the rest
 * of the file goes on; what breaks the packet framing, a missing or wrong
 * passphrase and resource errors fail the call.  pd_keyring_add() is all or
 * nothing: keys are collected in a batch and appended only when the whole
 * input parsed and unlocked.
 */
#include <pthread.h>
#include <stdatomic.h>

#include <gcrypt.h>
#include <openssl/crypto.h>

#include "armor.h"
#include "pgp/ecdh.h"
#include "pgp/hkdf.h"
#include "pgp/key.h"
#include "pgp/rsa.h"
#include "pgp/s2k.h"
#include "worker.h"

#define MAX_KEY_PACKET (1u << 20) /* largest secret/public key packet accepted */
#define MAX_MPI_BITS 16392u       /* RSA/ElGamal up to 16384 bits (and a little slack) */
/* (sub)keys in one ring: an audit host holds years of rotated keys
 * (contrib/bench/keys.sh loads 10,000); the cap only bounds a runaway
 * key directory. */
#define MAX_KEYS 100000
static atomic_size_t max_keys = MAX_KEYS; /* pd__keyring_set_max_keys */
/* Key files are configuration, not attacker input, but still capped: the
 * RFC 9580 A.5 example (Argon2id, 2 GiB) must load.  Other S2K caps are
 * pd_limits_default()'s. */
#define KEYRING_MAX_ARGON2_KIB (1u << 21)

/* The key IDs of the ring, sorted (then by position): a message's PKESKs
 * are matched against the ring with a binary search, so naming keys costs
 * log(keys) per PKESK however many keys an audit host holds. */
struct kid {
	uint64_t id;              /* the key ID, big-endian as a number */
	size_t idx;               /* into keys[] */
};

struct pd_keyring {
	enum pd_rsa_backend backend;
	enum pd_ecdh_backend ecdh_backend;
	unsigned workers;         /* per-worker slots of its keys (pd_keyring_set_workers) */
	struct pd_key **keys;
	size_t n, cap;
	struct kid *ids;          /* n of them, sorted; cap of room */
};

struct batch {
	struct pd_key **keys;
	size_t n, cap;
};

/* A packet of the key file, framed before anything is parsed. */
struct pktref {
	const uint8_t *body;
	size_t len;
	size_t start;  /* offset of its header */
	uint8_t tag;
};

/* Per-call parse context. */
struct ctx {
	const struct pd_keyring *kr;
	const char *pass;
	size_t passlen;
	char *detail;
	size_t detail_len;
	pd_keyskip_fn *report;
	void *report_ctx;
	const struct pktref *pk;
	size_t sig_from, sig_to; /* the packets after the key packet being parsed */
	uint8_t primary_fpr[32];
	uint8_t primary_fpr_len;
	char *addrs;             /* the current certificate's addresses (cert_addresses) */
	uint16_t addrs_len;
	char why[160];           /* why the key packet being parsed is skipped */
	bool kid_known;          /* its key ID is known (v3: from the modulus) */
	uint8_t kid[8];
	unsigned n_dup;          /* decryption keys already held */
	unsigned n_skip;         /* key packets skipped, any reason */
	unsigned n_warn;         /* ... unsupported or malformed */
	int warn_err;            /* PD_EUNSUPPORTED or PD_EMALFORMED of the first of those */
	char first_warn[240];    /* "key FPR: reason" of the first unsupported or malformed key */
	char first_other[240];   /* ... of the first signing key or stub */
};

/* ------------------------------------------------------------------ */
/* Small readers over one packet body: never past end. */

struct rd {
	const uint8_t *p;
	size_t len, off;
};

static int rd_u8(struct rd *r, uint8_t *v)
{
	if (r->off >= r->len)
		return PD_EMALFORMED;
	*v = r->p[r->off++];
	return 0;
}

static int rd_bytes(struct rd *r, size_t n, const uint8_t **v)
{
	if (n > r->len - r->off)
		return PD_EMALFORMED;
	*v = r->p + r->off;
	r->off += n;
	return 0;
}

/* An MPI: returns its magnitude octets (leading zero octets stripped, as a
 * non-minimal v4 encoding may carry them).  v6 requires the exact bit count. */
static int rd_mpi(struct rd *r, bool strict, const uint8_t **v, size_t *vlen)
{
	const uint8_t *h;
	int e = rd_bytes(r, 2, &h);
	if (e)
		return e;
	unsigned bits = pd_be16(h);
	if (bits > MAX_MPI_BITS)
		return PD_ELIMIT;
	size_t n = (bits + 7) / 8;
	e = rd_bytes(r, n, v);
	if (e)
		return e;
	while (n > 0 && (*v)[0] == 0) {
		(*v)++;
		n--;
	}
	if (strict) {
		unsigned actual = n ? (unsigned)(8 * (n - 1)) + 1 : 0;
		if (n)
			for (uint8_t top = (*v)[0]; top >>= 1;)
				actual++;
		if (actual != bits)
			return PD_EMALFORMED;
	}
	*vlen = n;
	return 0;
}

static int mpi_from(const uint8_t *v, size_t n, bool secure, gcry_mpi_t *ret)
{
	gcry_mpi_t m = secure ? gcry_mpi_snew(0) : gcry_mpi_new(0);
	if (!m)
		return -ENOMEM;
	if (n) {
		/* Scanning from a secure buffer yields a secure MPI; v is secure
		 * whenever secure is asked for (see parse_secret). */
		gcry_mpi_t t;
		if (gcry_mpi_scan(&t, GCRYMPI_FMT_USG, v, n, NULL)) {
			gcry_mpi_release(m);
			return PD_EMALFORMED;
		}
		gcry_mpi_set(m, t);
		gcry_mpi_release(t);
	}
	*ret = m;
	return 0;
}

/* ------------------------------------------------------------------ */

struct pd_key *pd_key_free(struct pd_key *k)
{
	if (!k)
		return NULL;
	pd_rsa_cleanup(k);
	pd_ecdh_cleanup(k);
	gcry_mpi_release(k->n);
	gcry_mpi_release(k->e);
	gcry_mpi_release(k->p);
	gcry_mpi_release(k->g);
	gcry_mpi_release(k->y);
	/* gcry_mpi_release wipes the limbs of secure MPIs. */
	gcry_mpi_release(k->d);
	gcry_mpi_release(k->sp);
	gcry_mpi_release(k->sq);
	gcry_mpi_release(k->u);
	gcry_mpi_release(k->x);
	if (k->native_sk) {
		pd_wipe(k->native_sk, k->native_sk_len);
		gcry_free(k->native_sk);
	}
	if (k->ir_secret) {
		OPENSSL_secure_clear_free(k->ir_secret, 32);
	}
	free(k->addrs);
	pd_wipe(k, sizeof(*k));
	free(k);
	return NULL;
}

static bool is_decryption_algo(int a)
{
	return a == PD_PK_RSA || a == PD_PK_RSA_E || a == PD_PK_ELGAMAL || a == PD_PK_ECDH ||
	       a == PD_PK_X25519 || a == PD_PK_X448;
}

static unsigned curve_bits(enum pd_curve c)
{
	switch (c) {
	case PD_CURVE_P521: return 521;
	case PD_CURVE_CV25519: case PD_CURVE_X25519: case PD_CURVE_ED25519_LEGACY: case PD_CURVE_ED25519: return 255;
	case PD_CURVE_X448: return 448;
	case PD_CURVE_ED448: return 448;
	default: return (unsigned)pd_curve_fsize(c) * 8;
	}
}

/* Curves pgpdecd has no arithmetic for, named so that a skipped key says
 * which one it is. */
static const struct { uint8_t len; uint8_t oid[10]; const char *name; } other_curves[] = {
	{ 5, { 0x2B, 0x81, 0x04, 0x00, 0x0A }, "secp256k1" },
	{ 8, { 0x2A, 0x81, 0x1C, 0xCF, 0x55, 0x01, 0x82, 0x2D }, "SM2 (1.2.156.10197.1.301)" },
	{ 3, { 0x2B, 0x65, 0x6F }, "X448 with an ECDH OID (1.3.101.111)" },
	{ 3, { 0x2B, 0x65, 0x71 }, "Ed448 with an OID (1.3.101.113)" },
};

/* Dotted form of a DER OID body, or as much of it as fits. */
static void oid_text(char *out, size_t cap, const uint8_t *oid, size_t len)
{
	size_t o = 0;
	uint64_t v = 0;
	bool first = true;

	out[0] = 0;
	for (size_t i = 0; i < len; i++) {
		v = (v << 7) | (oid[i] & 0x7F);
		if (v > UINT32_MAX)
			return;
		if (oid[i] & 0x80)
			continue;
		int n = first ? snprintf(out + o, cap - o, "%u.%u", v < 80 ? (unsigned)(v / 40) : 2,
		                         v < 80 ? (unsigned)(v % 40) : (unsigned)(v - 80))
		              : snprintf(out + o, cap - o, ".%u", (unsigned)v);
		if (n < 0 || (size_t)n >= cap - o)
			return;
		o += (size_t)n;
		first = false;
		v = 0;
	}
}

static void curve_text(char *out, size_t cap, const uint8_t *oid, size_t len)
{
	for (size_t i = 0; i < PD_ARRAY_SIZE(other_curves); i++)
		if (other_curves[i].len == len && memcmp(other_curves[i].oid, oid, len) == 0) {
			snprintf(out, cap, "%s", other_curves[i].name);
			return;
		}
	char dotted[64];
	oid_text(dotted, sizeof(dotted), oid, len);
	snprintf(out, cap, "with the OID %s", dotted[0] ? dotted : "(malformed)");
}

/* Public-key algorithms that are not RFC 9580's, as a skipped key names
 * them (draft-ietf-openpgp-pqc for 30-36, LibrePGP for 8). */
static const char *other_algo_name(int a)
{
	switch (a) {
	case 8: return "Kyber (LibrePGP)";
	case 20: return "ElGamal encrypt-or-sign, withdrawn";
	case 21: return "X9.42 Diffie-Hellman, reserved";
	case 30: return "ML-DSA-65+Ed25519";
	case 31: return "ML-DSA-87+Ed448";
	case 32: return "SLH-DSA-SHAKE-128s";
	case 33: return "SLH-DSA-SHAKE-128f";
	case 34: return "SLH-DSA-SHAKE-256s";
	case 35: return "ML-KEM-768+X25519";
	case 36: return "ML-KEM-1024+X448";
	default: return a >= 100 && a <= 110 ? "private or experimental" : "unknown";
	}
}

/* Algorithms whose public fields parse_public() knows how to skip: for
 * the others the end of the public part, hence a v4 fingerprint, is not
 * known. */
static bool is_known_algo(int a)
{
	return a == PD_PK_RSA || a == PD_PK_RSA_E || a == PD_PK_RSA_S || a == PD_PK_ELGAMAL ||
	       a == PD_PK_DSA || a == PD_PK_ECDH || a == PD_PK_ECDSA || a == PD_PK_EDDSA_LEGACY ||
	       a == PD_PK_X25519 || a == PD_PK_X448 || a == PD_PK_ED25519 || a == PD_PK_ED448;
}

/* Public fields of algorithm a; fills k (public MPIs, curve, q, kdf) for
 * decryption algorithms.  PD_EUNSUPPORTED (unknown algorithm, curve or
 * KDF parameters) and PD_EMALFORMED say why in why[]. */
static int parse_public(struct rd *r, struct pd_key *k, bool strict, char *why, size_t whylen)
{
	const uint8_t *v;
	size_t n;
	int e;
	uint8_t b;

	switch (k->pk_algo) {
	case PD_PK_RSA: case PD_PK_RSA_E: case PD_PK_RSA_S:
		if ((e = rd_mpi(r, strict, &v, &n)))
			return e;
		if (k->pk_algo != PD_PK_RSA_S && (e = mpi_from(v, n, false, &k->n)))
			return e;
		k->bits = (uint16_t)PD_MIN(n * 8, 65535);
		if (n)
			for (uint8_t t = v[0]; !(t & 0x80); t <<= 1)
				k->bits--;
		if ((e = rd_mpi(r, strict, &v, &n)))
			return e;
		if (k->pk_algo != PD_PK_RSA_S && (e = mpi_from(v, n, false, &k->e)))
			return e;
		return 0;
	case PD_PK_DSA:
		for (int i = 0; i < 4; i++)
			if ((e = rd_mpi(r, strict, &v, &n)))
				return e;
		return 0;
	case PD_PK_ELGAMAL:
		if ((e = rd_mpi(r, strict, &v, &n)) || (e = mpi_from(v, n, false, &k->p)))
			return e;
		k->bits = (uint16_t)gcry_mpi_get_nbits(k->p);
		if ((e = rd_mpi(r, strict, &v, &n)) || (e = mpi_from(v, n, false, &k->g)))
			return e;
		if ((e = rd_mpi(r, strict, &v, &n)) || (e = mpi_from(v, n, false, &k->y)))
			return e;
		return 0;
	case PD_PK_ECDH: case PD_PK_ECDSA: case PD_PK_EDDSA_LEGACY: {
		const uint8_t *oid;
		uint8_t oidlen;
		if ((e = rd_u8(r, &oidlen)))
			return e;
		if (oidlen == 0 || oidlen == 0xFF)
			return pd_fail(why, whylen, PD_EMALFORMED, "curve OID of length %u", oidlen);
		if ((e = rd_bytes(r, oidlen, &oid)))
			return e;
		k->curve = pd_curve_from_oid(oid, oidlen);
		if ((e = rd_mpi(r, false, &v, &n)))
			return e;
		if (k->pk_algo == PD_PK_ECDH) {
			const uint8_t *kdf;
			if ((e = rd_u8(r, &b)))
				return e;
			if (b < 3 || (e = rd_bytes(r, b, &kdf)))
				return e ? e : pd_fail(why, whylen, PD_EMALFORMED, "ECDH KDF parameters too short");
			/* The public part is complete here: what follows only
			 * says whether we can use it. */
			if (k->curve == PD_CURVE_NONE) {
				char name[96];
				curve_text(name, sizeof(name), oid, oidlen);
				return pd_fail(why, whylen, PD_EUNSUPPORTED, "unsupported curve %s", name);
			}
			if (k->curve == PD_CURVE_ED25519_LEGACY)
				return pd_fail(why, whylen, PD_EUNSUPPORTED, "ECDH with the Ed25519 (signing) curve");
			if (kdf[0] != 1)
				return pd_fail(why, whylen, PD_EUNSUPPORTED, "unsupported ECDH KDF parameters version %u",
				               kdf[0]);
			k->kdf_hash = kdf[1];
			k->kdf_kek = kdf[2];
			if (!pd_hash_len(k->kdf_hash) || pd_hash_len(k->kdf_hash) < 32 ||
			    (k->kdf_kek != 7 && k->kdf_kek != 8 && k->kdf_kek != 9))
				return pd_fail(why, whylen, PD_EUNSUPPORTED,
				               "unsupported ECDH KDF (hash %u, key wrap cipher %u)", k->kdf_hash,
				               k->kdf_kek);
			if (n > sizeof(k->q))
				return pd_fail(why, whylen, PD_EMALFORMED, "ECDH public point too long");
			memcpy(k->q, v, n);
			k->q_len = n;
		}
		k->bits = (uint16_t)curve_bits(k->curve);
		return 0;
	}
	case PD_PK_X25519: case PD_PK_X448: case PD_PK_ED25519: case PD_PK_ED448: {
		size_t len = k->pk_algo == PD_PK_X25519 || k->pk_algo == PD_PK_ED25519 ? 32
		           : k->pk_algo == PD_PK_X448 ? 56 : 57;
		if ((e = rd_bytes(r, len, &v)))
			return e;
		k->curve = k->pk_algo == PD_PK_X25519 ? PD_CURVE_X25519 : k->pk_algo == PD_PK_X448 ? PD_CURVE_X448
		         : k->pk_algo == PD_PK_ED25519 ? PD_CURVE_ED25519 : PD_CURVE_ED448;
		memcpy(k->q, v, len);
		k->q_len = len;
		k->bits = (uint16_t)curve_bits(k->curve);
		return 0;
	}
	default:
		return pd_fail(why, whylen, PD_EUNSUPPORTED, "unsupported public-key algorithm %u (%s)", k->pk_algo,
		               other_algo_name(k->pk_algo));
	}
}

static void fingerprint(struct pd_key *k, const uint8_t *body, size_t publen)
{
	uint8_t hdr[5];
	gcry_md_hd_t h;
	if (k->version == 4) {
		hdr[0] = 0x99;
		hdr[1] = (uint8_t)(publen >> 8);
		hdr[2] = (uint8_t)publen;
		if (gcry_md_open(&h, GCRY_MD_SHA1, 0))
			return;
		gcry_md_write(h, hdr, 3);
	} else {
		/* v6; v5 (LibrePGP, only to name a skipped key) hashes the same way with 0x9A. */
		hdr[0] = k->version == 5 ? 0x9A : 0x9B;
		pd_put_be32(hdr + 1, (uint32_t)publen);
		if (gcry_md_open(&h, GCRY_MD_SHA256, 0))
			return;
		gcry_md_write(h, hdr, 5);
	}
	gcry_md_write(h, body, publen);
	k->fpr_len = k->version == 4 ? 20 : 32;
	memcpy(k->fpr, gcry_md_read(h, 0), k->fpr_len);
	gcry_md_close(h);
	memcpy(k->keyid, k->version == 4 ? k->fpr + 12 : k->fpr, 8);
}

/* ------------------------------------------------------------------ */
/* Secret fields (cleartext, in secure memory), exact length. */

static int parse_secret_fields(struct pd_key *k, const uint8_t *s, size_t slen, size_t *ret_used)
{
	struct rd r = { s, slen, 0 };
	const uint8_t *v;
	size_t n;
	int e;
	bool strict = k->version == 6;

	switch (k->pk_algo) {
	case PD_PK_RSA: case PD_PK_RSA_E:
		if ((e = rd_mpi(&r, strict, &v, &n)) || (e = mpi_from(v, n, true, &k->d)))
			return e;
		if ((e = rd_mpi(&r, strict, &v, &n)) || (e = mpi_from(v, n, true, &k->sp)))
			return e;
		if ((e = rd_mpi(&r, strict, &v, &n)) || (e = mpi_from(v, n, true, &k->sq)))
			return e;
		if ((e = rd_mpi(&r, strict, &v, &n)) || (e = mpi_from(v, n, true, &k->u)))
			return e;
		break;
	case PD_PK_ELGAMAL:
		if ((e = rd_mpi(&r, strict, &v, &n)) || (e = mpi_from(v, n, true, &k->x)))
			return e;
		break;
	case PD_PK_ECDH:
		if ((e = rd_mpi(&r, strict, &v, &n)))
			return e;
		if (k->curve == PD_CURVE_CV25519) {
			/* Curve25519Legacy: big-endian MPI of the native scalar. */
			if (n > 32)
				return PD_EMALFORMED;
			k->native_sk = gcry_malloc_secure(32);
			if (!k->native_sk)
				return -ENOMEM;
			k->native_sk_len = 32;
			memset(k->native_sk, 0, 32);
			for (size_t i = 0; i < n; i++)
				k->native_sk[i] = v[n - 1 - i];
		} else {
			if (n > pd_curve_fsize(k->curve))
				return PD_EMALFORMED;
			if ((e = mpi_from(v, n, true, &k->x)))
				return e;
		}
		break;
	case PD_PK_X25519: case PD_PK_X448: {
		size_t len = k->pk_algo == PD_PK_X25519 ? 32 : 56;
		if ((e = rd_bytes(&r, len, &v)))
			return e;
		k->native_sk = gcry_malloc_secure(len);
		if (!k->native_sk)
			return -ENOMEM;
		k->native_sk_len = len;
		memcpy(k->native_sk, v, len);
		break;
	}
	default:
		return PD_EINTERNAL;
	}
	*ret_used = r.off;
	return 0;
}

static uint16_t csum16(const uint8_t *p, size_t n)
{
	uint32_t s = 0;
	for (size_t i = 0; i < n; i++)
		s += p[i];
	return (uint16_t)s;
}

/* Check the secret against the public key. */
static int validate_secret(struct pd_key *k, enum pd_rsa_backend backend);

/* Once an OpenSSL backend holds a key's secret (in OpenSSL's secure heap),
 * libgcrypt's copies go: libgcrypt's secure-memory allocator walks every
 * block in its pool on each allocation, so 10,000 keys' worth of long-lived
 * blocks there made every message's secure allocations (session keys,
 * scratch, cipher handles) 50 times slower.  What stays in libgcrypt's
 * pool is the keys of the libgcrypt backends (ElGamal always). */
static void drop_gcrypt_secrets(struct pd_key *k)
{
	if ((k->pk_algo == PD_PK_RSA || k->pk_algo == PD_PK_RSA_E) && k->rsa_backend == PD_RSA_OPENSSL) {
		gcry_mpi_release(k->d);
		gcry_mpi_release(k->sp);
		gcry_mpi_release(k->sq);
		gcry_mpi_release(k->u);
		k->d = k->sp = k->sq = k->u = NULL;
	}
	/* An ECDH key of the OpenSSL backend, or a Montgomery one of either
	 * (pgp/ecdh.c: OpenSSL's whatever the backend). */
	if ((k->pk_algo == PD_PK_ECDH || k->pk_algo == PD_PK_X25519 || k->pk_algo == PD_PK_X448) && k->ecdh_pkey) {
		gcry_mpi_release(k->x); /* secure MPIs are wiped when freed */
		k->x = NULL;
		if (k->native_sk) {
			pd_wipe(k->native_sk, k->native_sk_len);
			gcry_free(k->native_sk);
			k->native_sk = NULL; /* native_sk_len stays: the scalar's size */
		}
	}
}

/* Check the secret against the public key and prepare the key's backend. */
static int validate(struct pd_key *k, const struct pd_keyring *kr)
{
	k->slots = kr->workers;
	bool x = k->pk_algo == PD_PK_X25519 || k->pk_algo == PD_PK_X448 ||
	         (k->pk_algo == PD_PK_ECDH && k->curve == PD_CURVE_CV25519);
	/* An X key (either ECDH backend, pgp/ecdh.c): pd_ecdh_setup imports
	 * its scalar into OpenSSL and checks it against its public key. */
	int e = x ? 0 : validate_secret(k, kr->backend);
	if (e == 0 && (k->pk_algo == PD_PK_ECDH || k->pk_algo == PD_PK_X25519 || k->pk_algo == PD_PK_X448))
		e = pd_ecdh_setup(k, kr->ecdh_backend);
	if (e == 0)
		drop_gcrypt_secrets(k);
	return e;
}

static int validate_secret(struct pd_key *k, enum pd_rsa_backend backend)
{
	switch (k->pk_algo) {
	case PD_PK_RSA: case PD_PK_RSA_E:
		return pd_rsa_setup(k, backend);
	case PD_PK_ELGAMAL: {
		/* Sane group first: libgcrypt aborts on a zero modulus. */
		unsigned pbits = gcry_mpi_get_nbits(k->p);
		if (pbits < 512 || pbits > MAX_MPI_BITS || !gcry_mpi_test_bit(k->p, 0) ||
		    gcry_mpi_cmp_ui(k->g, 1) <= 0 || gcry_mpi_cmp(k->g, k->p) >= 0 ||
		    gcry_mpi_cmp_ui(k->y, 1) <= 0 || gcry_mpi_cmp(k->y, k->p) >= 0)
			return PD_EUNSUPPORTED;
		if (gcry_mpi_cmp_ui(k->x, 1) <= 0 || gcry_mpi_cmp(k->x, k->p) >= 0)
			return PD_EINTEGRITY;
		gcry_mpi_t t = gcry_mpi_snew(0);
		if (!t)
			return -ENOMEM;
		gcry_mpi_powm(t, k->g, k->x, k->p);
		int ok = gcry_mpi_cmp(t, k->y) == 0;
		gcry_mpi_release(t);
		return ok ? 0 : PD_EINTEGRITY;
	}
	case PD_PK_ECDH: {
		/* NIST/brainpool (cv25519 is checked by pd_ecdh_setup, as X25519
		 * and X448 are: validate()).  ecc_check_secret_key in libgcrypt
		 * verifies Q == d*G. */
		gcry_sexp_t s;
		const char *name = pd_curve_gcry_name(k->curve);
		if (!name || k->q_len < 1 || k->q[0] != 0x04)
			return PD_EMALFORMED;
		if (gcry_sexp_build(&s, NULL, "(private-key(ecc(curve %s)(q%b)(d%m)))", name, (int)k->q_len, k->q,
		                    k->x))
			return -ENOMEM;
		gcry_error_t e = gcry_pk_testkey(s);
		gcry_sexp_release(s);
		return e ? PD_EINTEGRITY : 0;
	}
	default:
		return PD_EINTERNAL;
	}
}

/* Decrypt the protected secret (usage 253/254/255/cipher id).  out is a
 * secure buffer of dlen octets; *ret_len is the plaintext length (for AEAD
 * the tag is removed). */
static int unprotect(struct ctx *c, const struct pd_key *k, uint8_t tag, uint8_t usage, uint8_t cipher,
                     uint8_t aead, const struct pd_s2k *s2k, const uint8_t *iv, size_t ivlen,
                     const uint8_t *pub, size_t publen, const uint8_t *data, size_t dlen,
                     uint8_t *out, size_t *ret_len)
{
	struct pd_limits lim;
	pd_limits_default(&lim);
	/* Key files come from the operator, not from senders: allow the
	 * RFC 9580 A.5 cost (2 GiB) that the message default refuses. */
	lim.max_argon2_kib = PD_MAX(lim.max_argon2_kib, KEYRING_MAX_ARGON2_KIB);
	lim.max_argon2_passes = lim.max_argon2_lanes = 0;
	size_t keylen = pd_sym_keylen(cipher);
	int galgo = pd_sym_gcry(cipher);
	uint8_t *kek = gcry_malloc_secure(64);
	gcry_cipher_hd_t h = NULL;
	gcry_error_t ge;
	int r;

	if (!kek)
		return -ENOMEM;
	if (s2k->type == 4) {
		/* Argon2 (up to 2 GiB each, in the normal heap): one key file's
		 * derivation at a time in the whole process, however many
		 * threads load keys (daemon/keys.c loads files in parallel). */
		static pthread_mutex_t argon2_one = PTHREAD_MUTEX_INITIALIZER;
		pthread_mutex_lock(&argon2_one);
		r = pd_s2k_derive(s2k, c->pass, c->passlen, kek, keylen, &lim);
		pthread_mutex_unlock(&argon2_one);
	} else {
		r = pd_s2k_derive(s2k, c->pass, c->passlen, kek, keylen, &lim);
	}
	if (r)
		goto out;
	if (usage == 253) {
		uint8_t info[4] = { (uint8_t)(0xC0 | tag), k->version, cipher, aead };
		uint8_t *ikm = gcry_malloc_secure(keylen);
		r = -ENOMEM;
		if (!ikm)
			goto out;
		memcpy(ikm, kek, keylen);
		r = pd_hkdf(GCRY_MD_SHA256, NULL, 0, ikm, keylen, info, 4, kek, keylen);
		pd_wipe(ikm, keylen);
		gcry_free(ikm);
		if (r)
			goto out;
		r = PD_EMALFORMED;
		if (dlen < 16)
			goto out;
		ge = gcry_cipher_open(&h, galgo, pd_aead_gcry_mode(aead), GCRY_CIPHER_SECURE);
		if (!ge)
			ge = gcry_cipher_setkey(h, kek, keylen);
		if (!ge)
			ge = gcry_cipher_setiv(h, iv, ivlen);
		/* AD = packet type octet || public key packet body, passed in one
		 * piece (OCB accepts split AD only at block multiples). */
		uint8_t *ad = malloc(1 + publen);
		if (!ad) {
			r = -ENOMEM;
			goto out;
		}
		ad[0] = (uint8_t)(0xC0 | tag);
		memcpy(ad + 1, pub, publen);
		if (!ge)
			ge = gcry_cipher_authenticate(h, ad, 1 + publen);
		free(ad);
		if (!ge)
			ge = gcry_cipher_final(h);
		if (!ge)
			ge = gcry_cipher_decrypt(h, out, dlen - 16, data, dlen - 16);
		if (!ge)
			ge = gcry_cipher_checktag(h, data + dlen - 16, 16);
		if (ge) {
			r = gcry_err_code(ge) == GPG_ERR_CHECKSUM ? PD_EBADPASS : pd_err_from_gcry(ge);
			pd_wipe(out, dlen);
			goto out;
		}
		*ret_len = dlen - 16;
		r = 0;
		goto out;
	}
	/* CFB without resync, IV from the packet. */
	ge = gcry_cipher_open(&h, galgo, GCRY_CIPHER_MODE_CFB, GCRY_CIPHER_SECURE);
	if (!ge)
		ge = gcry_cipher_setkey(h, kek, keylen);
	if (!ge)
		ge = gcry_cipher_setiv(h, iv, ivlen);
	if (!ge)
		ge = gcry_cipher_decrypt(h, out, dlen, data, dlen);
	if (ge) {
		r = pd_err_from_gcry(ge);
		goto out;
	}
	*ret_len = dlen;
	r = 0;
out:
	gcry_cipher_close(h);
	pd_wipe(kek, 64);
	gcry_free(kek);
	return r;
}

/* ------------------------------------------------------------------ */
/* Skipped keys: named, counted, reported. */

static void fpr_hex(const struct pd_key *k, char buf[65])
{
	pd_hex(buf, k->fpr, k->fpr_len <= 32 ? k->fpr_len : 32);
}

/* Report key packet k (parsed as far as it went) as not added, for the
 * reason in c->why. */
static void skip(struct ctx *c, enum pd_keyskip_kind kind, uint8_t tag, const struct pd_key *k, size_t start)
{
	struct pd_keyskip s = { .kind = kind, .primary = tag == 5, .version = k->version,
	                        .pk_algo = k->pk_algo, .fpr_len = k->fpr_len <= 32 ? k->fpr_len : 0,
	                        .has_keyid = k->fpr_len || c->kid_known, .reason = c->why };
	char name[96], hex[65];

	memcpy(s.fpr, k->fpr, sizeof(s.fpr));
	memcpy(s.keyid, k->fpr_len ? k->keyid : c->kid, 8);
	if (s.fpr_len) {
		pd_hex(hex, s.fpr, s.fpr_len);
		snprintf(name, sizeof(name), "key %s", hex);
	} else if (s.has_keyid) {
		pd_hex(hex, s.keyid, 8);
		snprintf(name, sizeof(name), "key ID %s", hex);
	} else if (k->version) {
		snprintf(name, sizeof(name), "the v%u key packet at offset %zu", k->version, start);
	} else {
		snprintf(name, sizeof(name), "the key packet at offset %zu", start);
	}
	s.name = name;
	if (!c->why[0])
		snprintf(c->why, sizeof(c->why), "%s", kind == PD_KEYSKIP_MALFORMED ? "malformed key packet" : "not supported");
	c->n_skip++;
	if (kind == PD_KEYSKIP_UNSUPPORTED || kind == PD_KEYSKIP_MALFORMED) {
		if (!c->n_warn++) {
			c->warn_err = kind == PD_KEYSKIP_MALFORMED ? PD_EMALFORMED : PD_EUNSUPPORTED;
			snprintf(c->first_warn, sizeof(c->first_warn), "%s: %s", name, c->why);
		}
	} else if (!c->first_other[0]) {
		snprintf(c->first_other, sizeof(c->first_other), "%s: %s", name, c->why);
	}
	if (c->report)
		c->report(c->report_ctx, &s);
}

static void set_primary(struct ctx *c, uint8_t tag, const struct pd_key *k)
{
	if (tag != 5 || !k->fpr_len)
		return;
	memcpy(c->primary_fpr, k->fpr, k->fpr_len);
	c->primary_fpr_len = k->fpr_len;
}

/* Key packets of versions that are not loaded, named as well as they can
 * be: v3 by the key ID in its RSA modulus, LibrePGP v5 by its fingerprint. */
static int other_version(struct ctx *c, struct pd_key *k, const uint8_t *body, size_t blen)
{
	struct rd r = { body, blen, 1 };
	const uint8_t *v, *n;
	size_t nlen;

	if (k->version == 2 || k->version == 3) {
		/* created, validity days, algorithm, then RSA n and e */
		if (!rd_bytes(&r, 6, &v) && !rd_u8(&r, &k->pk_algo) && k->pk_algo >= 1 && k->pk_algo <= 3 &&
		    !rd_mpi(&r, false, &n, &nlen) && nlen >= 8) {
			memcpy(c->kid, n + nlen - 8, 8);
			c->kid_known = true;
		}
		return pd_fail(c->why, sizeof(c->why), PD_EUNSUPPORTED, "v%u key (obsolete, not supported)", k->version);
	}
	if (k->version == 5) {
		/* created, algorithm, key material count: the v5 fingerprint */
		if (!rd_bytes(&r, 4, &v) && !rd_u8(&r, &k->pk_algo) && !rd_bytes(&r, 4, &v) &&
		    pd_be32(v) <= r.len - r.off)
			fingerprint(k, body, r.off + pd_be32(v));
		return pd_fail(c->why, sizeof(c->why), PD_EUNSUPPORTED,
		               "LibrePGP v5 key (not supported: RFC 9580 keys are v4 or v6)");
	}
	return pd_fail(c->why, sizeof(c->why), PD_EUNSUPPORTED, "unknown key version %u", k->version);
}

/* ------------------------------------------------------------------ */
/* Key flags (RFC 9580 5.2.3.29) from the self-signatures after a key
 * packet.  Read, not verified. */

struct sig {
	uint8_t type;
	uint32_t created;
	bool has_flags, primary_uid, has_issuer_kid;
	uint8_t flags;
	uint8_t issuer_fpr_len;
	uint8_t issuer_fpr[32];
	uint8_t issuer_kid[8];
};

/* One subpacket area; false if it does not parse.  Key flags, creation
 * time and the primary User ID flag count only in the hashed area. */
static bool subpackets(const uint8_t *p, size_t n, bool hashed, struct sig *s)
{
	size_t o = 0;

	while (o < n) {
		size_t l;
		uint8_t a = p[o++];
		if (a < 192) {
			l = a;
		} else if (a < 255) {
			if (o >= n)
				return false;
			l = ((size_t)(a - 192) << 8) + p[o++] + 192;
		} else {
			if (n - o < 4)
				return false;
			l = pd_be32(p + o);
			o += 4;
		}
		if (l == 0 || l > n - o)
			return false;
		uint8_t type = p[o] & 0x7F;
		const uint8_t *d = p + o + 1;
		size_t dl = l - 1;
		if (hashed && type == 27) {
			s->has_flags = true;
			s->flags = dl ? d[0] : 0; /* an empty list: no flags set */
		} else if (hashed && type == 2 && dl == 4) {
			s->created = pd_be32(d);
		} else if (hashed && type == 25 && dl == 1) {
			s->primary_uid = d[0] != 0;
		} else if (type == 16 && dl == 8) {
			s->has_issuer_kid = true;
			memcpy(s->issuer_kid, d, 8);
		} else if (type == 33 && (dl == 21 || dl == 33)) {
			s->issuer_fpr_len = (uint8_t)(dl - 1);
			memcpy(s->issuer_fpr, d + 1, dl - 1);
		}
		o += l;
	}
	return true;
}

/* A v4 or v6 signature packet's type and subpackets (v3 signatures have
 * no subpackets, so no key flags). */
static bool parse_sig(const uint8_t *b, size_t len, struct sig *s)
{
	size_t o, hl, ul, w;

	if (len < 1 || (b[0] != 4 && b[0] != 6))
		return false;
	w = b[0] == 4 ? 2 : 4; /* octets of the subpacket area counts */
	if (len < 4 + w)
		return false;
	s->type = b[1];
	o = 4;
	hl = w == 2 ? pd_be16(b + o) : pd_be32(b + o);
	o += w;
	if (hl > len - o)
		return false;
	const uint8_t *hashed = b + o;
	o += hl;
	if (len - o < w)
		return false;
	ul = w == 2 ? pd_be16(b + o) : pd_be32(b + o);
	o += w;
	if (ul > len - o)
		return false;
	return subpackets(hashed, hl, true, s) && subpackets(b + o, ul, false, s);
}

/* Made by the primary key, as far as the signature says (no issuer
 * subpacket, or no known primary: taken as a self-signature). */
static bool by_primary(const struct ctx *c, const struct sig *s)
{
	if (!c->primary_fpr_len)
		return true;
	if (s->issuer_fpr_len)
		return s->issuer_fpr_len == c->primary_fpr_len &&
		       memcmp(s->issuer_fpr, c->primary_fpr, c->primary_fpr_len) == 0;
	if (s->has_issuer_kid)
		return memcmp(s->issuer_kid, c->primary_fpr_len == 20 ? c->primary_fpr + 12 : c->primary_fpr, 8) == 0;
	return true;
}

/* The key flags of the key packet being parsed, or -1 when no
 * self-signature states any.  A subkey: its newest binding signature
 * (0x18).  A primary key: its newest direct-key signature (0x1F) that has
 * key flags, else the newest self-certification (0x10-0x13) of the
 * primary User ID, else of any User ID.  Ties go to the later packet. */
static int key_flags(const struct ctx *c, uint8_t tag)
{
	struct sig best = { 0 }, uid = { 0 }, puid = { 0 };
	bool have = false, have_uid = false, have_puid = false;

	for (size_t i = c->sig_from; i < c->sig_to; i++) {
		struct sig s = { 0 };
		if (c->pk[i].tag != 2 || !parse_sig(c->pk[i].body, c->pk[i].len, &s) || !by_primary(c, &s))
			continue;
		if (tag == 7) {
			if (s.type == 0x18 && (!have || s.created >= best.created)) {
				best = s;
				have = true;
			}
		} else if (s.type == 0x1F) {
			if (s.has_flags && (!have || s.created >= best.created)) {
				best = s;
				have = true;
			}
		} else if (s.type >= 0x10 && s.type <= 0x13) {
			if (!have_uid || s.created >= uid.created) {
				uid = s;
				have_uid = true;
			}
			if (s.primary_uid && (!have_puid || s.created >= puid.created)) {
				puid = s;
				have_puid = true;
			}
		}
	}
	if (!have && have_puid) {
		best = puid;
		have = true;
	} else if (!have && have_uid) {
		best = uid;
		have = true;
	}
	return have && best.has_flags ? best.flags : -1;
}

static void flag_text(char *out, size_t cap, int flags)
{
	static const struct { int bit; const char *name; } names[] = {
		{ 0x01, "certify" }, { 0x02, "sign" }, { 0x04, "encrypt communications" },
		{ 0x08, "encrypt storage" }, { 0x10, "split key" }, { 0x20, "authenticate" }, { 0x80, "group key" },
	};
	size_t o = 0;

	out[0] = 0;
	for (size_t i = 0; i < PD_ARRAY_SIZE(names); i++) {
		if (!(flags & names[i].bit))
			continue;
		int n = snprintf(out + o, cap - o, "%s%s", o ? ", " : "", names[i].name);
		if (n < 0 || (size_t)n >= cap - o)
			break;
		o += (size_t)n;
	}
	if (!o)
		snprintf(out, cap, "none");
}

/* ------------------------------------------------------------------ */

/* One secret key packet (tag 5 or 7) at offset start.  *ret is the key if
 * it is a usable decryption key; otherwise, unless an error is returned,
 * the packet was reported as skipped (skip()).  Errors: what must fail the
 * whole call (no or a wrong passphrase, resources); a packet that is
 * malformed or unsupported is skipped, not an error. */
static int parse_secret_key(struct ctx *c, uint8_t tag, const uint8_t *body, size_t blen, size_t start,
                            struct pd_key **ret)
{
	struct rd r = { body, blen, 0 };
	struct pd_key *k;
	const uint8_t *v;
	uint8_t *plain = NULL;
	size_t plain_cap = 0, publen = 0;
	enum pd_keyskip_kind kind = PD_KEYSKIP_MALFORMED;
	bool skipped = false;
	char fpr[65];
	int e;

	*ret = NULL;
	c->why[0] = 0;
	c->kid_known = false;
	if (tag == 5)
		c->primary_fpr_len = 0; /* until this key's fingerprint is known */
	k = calloc(1, sizeof(*k));
	if (!k)
		return -ENOMEM;
	if ((e = rd_u8(&r, &k->version)))
		goto out;
	if (k->version != 4 && k->version != 6) {
		e = other_version(c, k, body, blen);
		set_primary(c, tag, k);
		goto out;
	}
	if ((e = rd_bytes(&r, 4, &v)))
		goto out;
	k->created = pd_be32(v);
	if ((e = rd_u8(&r, &k->pk_algo)))
		goto out;
	if (k->version == 6) {
		if ((e = rd_bytes(&r, 4, &v)))
			goto out;
		uint64_t pklen = pd_be32(v);
		if (pklen > r.len - r.off) {
			e = pd_fail(c->why, sizeof(c->why), PD_EMALFORMED, "public key material longer than the packet");
			goto out;
		}
		/* Known length: the fingerprint names the key even if it is
		 * not usable. */
		publen = r.off + (size_t)pklen;
		fingerprint(k, body, publen);
		if (!k->fpr_len) {
			e = -ENOMEM;
			goto out;
		}
		set_primary(c, tag, k);
		/* The public fields must fill pklen exactly. */
		struct rd pr = { body, publen, r.off };
		e = parse_public(&pr, k, true, c->why, sizeof(c->why));
		if (e == 0 && pr.off != pr.len)
			e = pd_fail(c->why, sizeof(c->why), PD_EMALFORMED, "public key material longer than its fields");
		if (e)
			goto out;
		r.off = pr.off;
	} else {
		e = parse_public(&r, k, false, c->why, sizeof(c->why));
		if ((e == 0 || (e == PD_EUNSUPPORTED && is_known_algo(k->pk_algo))) && r.off > 0xFFFF)
			e = pd_fail(c->why, sizeof(c->why), PD_EMALFORMED, "public key packet over 65535 octets");
		else if (e == PD_EUNSUPPORTED && is_known_algo(k->pk_algo))
			fingerprint(k, body, r.off); /* the end of the public part is known */
		if (e) {
			set_primary(c, tag, k);
			goto out;
		}
		publen = r.off;
		fingerprint(k, body, publen);
		if (!k->fpr_len) {
			e = -ENOMEM;
			goto out;
		}
		set_primary(c, tag, k);
	}
	fpr_hex(k, fpr);
	memcpy(k->primary_fpr, c->primary_fpr, c->primary_fpr_len);
	k->primary_fpr_len = c->primary_fpr_len;
	if (k->version == 6 && (k->curve == PD_CURVE_CV25519 || k->curve == PD_CURVE_ED25519_LEGACY)) {
		bool cv = k->curve == PD_CURVE_CV25519;
		e = pd_fail(c->why, sizeof(c->why), PD_EUNSUPPORTED,
		            "v6 key with the legacy %s OID (RFC 9580 section 9.2 allows it only in v4 keys; "
		            "v6 keys use %s)", cv ? "Curve25519" : "Ed25519", cv ? "X25519" : "Ed25519");
		goto out;
	}
	if (!is_decryption_algo(k->pk_algo)) {
		snprintf(c->why, sizeof(c->why), "signing key (%s)", pd_pk_name(k->pk_algo));
		kind = PD_KEYSKIP_NOT_ENCRYPTION;
		skipped = true;
		goto out; /* its secret is not needed */
	}
	/* A key its holder marked for other uses is not a decryption key:
	 * an RSA signing key must not serve as a decryption oracle. */
	int flags = key_flags(c, tag);
	if (flags >= 0 && !(flags & 0x0C)) {
		char list[96];
		flag_text(list, sizeof(list), flags);
		snprintf(c->why, sizeof(c->why), "key flags do not allow encryption (%s)", list);
		kind = PD_KEYSKIP_NOT_ENCRYPTION;
		skipped = true;
		goto out;
	}

	/* S2K usage and protection parameters. */
	uint8_t usage, cipher = 0, aead = 0;
	struct pd_s2k s2k = { 0 };
	const uint8_t *iv = NULL;
	size_t ivlen = 0;
	if ((e = rd_u8(&r, &usage)))
		goto out;
	size_t params_end = 0;
	if (k->version == 6 && usage != 0) {
		uint8_t cnt;
		if ((e = rd_u8(&r, &cnt)))
			goto out;
		params_end = r.off + cnt;
		if (usage != 253 && usage != 254) {
			e = pd_fail(c->why, sizeof(c->why), PD_EMALFORMED, "S2K usage %u is not allowed in a v6 key", usage);
			goto out;
		}
	}
	if (usage == 253 || usage == 254 || usage == 255) {
		size_t used;
		if ((e = rd_u8(&r, &cipher)))
			goto out;
		if (usage == 253 && (e = rd_u8(&r, &aead)))
			goto out;
		size_t s2kmax = r.len - r.off;
		if (k->version == 6) {
			uint8_t s2klen;
			if ((e = rd_u8(&r, &s2klen)))
				goto out;
			if (s2klen > r.len - r.off) {
				e = PD_EMALFORMED;
				goto out;
			}
			s2kmax = s2klen;
		}
		e = pd_s2k_parse(body + r.off, s2kmax, &s2k, &used);
		if (e) {
			e = pd_fail(c->why, sizeof(c->why), e, "%s S2K specifier",
			            e == PD_EUNSUPPORTED ? "unsupported" : "malformed");
			goto out;
		}
		if (k->version == 6 && used != s2kmax) {
			e = pd_fail(c->why, sizeof(c->why), PD_EMALFORMED, "S2K specifier of the wrong length");
			goto out;
		}
		r.off += used;
		if (s2k.type == 101) {
			snprintf(c->why, sizeof(c->why),
			         "no secret key material (gnu-dummy S2K: a stub, or a key on a smartcard)");
			kind = PD_KEYSKIP_NO_SECRET;
			skipped = true;
			goto out;
		}
		if (s2k.type == 4 && usage != 253) {
			e = pd_fail(c->why, sizeof(c->why), PD_EMALFORMED, "Argon2 S2K is only allowed with AEAD protection");
			goto out;
		}
		if (k->version == 6 && s2k.type != 4 && s2k.type != 3) {
			e = pd_fail(c->why, sizeof(c->why), PD_EMALFORMED, "v6 keys need an iterated or Argon2 S2K");
			goto out;
		}
		if (k->version == 6 && s2k.type == 3 &&
		    (s2k.hash == PD_HASH_MD5 || s2k.hash == PD_HASH_SHA1 || s2k.hash == PD_HASH_RMD160)) {
			e = pd_fail(c->why, sizeof(c->why), PD_EMALFORMED, "weak S2K hash in a v6 key");
			goto out;
		}
		if (usage == 253) {
			ivlen = pd_aead_noncelen(aead);
			if (!ivlen || pd_sym_blklen(cipher) != 16) {
				e = pd_fail(c->why, sizeof(c->why), PD_EUNSUPPORTED,
				            "unsupported AEAD protection (cipher %u, aead %u)", cipher, aead);
				goto out;
			}
		} else {
			ivlen = pd_sym_blklen(cipher);
		}
	} else if (usage != 0) {
		/* Legacy: the usage octet is the cipher, S2K is simple MD5. */
		if (k->version == 6) {
			e = PD_EMALFORMED;
			goto out;
		}
		cipher = usage;
		s2k.type = 0;
		s2k.hash = PD_HASH_MD5;
		ivlen = pd_sym_blklen(cipher);
	}
	if (usage != 0) {
		if (!pd_sym_gcry(cipher) || !ivlen) {
			e = pd_fail(c->why, sizeof(c->why), PD_EUNSUPPORTED, "unsupported protection cipher %u", cipher);
			goto out;
		}
		if ((e = rd_bytes(&r, ivlen, &iv)))
			goto out;
		if (k->version == 6 && r.off != params_end) {
			e = PD_EMALFORMED;
			goto out;
		}
		if (!c->pass) {
			e = pd_fail(c->detail, c->detail_len, PD_ENEEDPASS,
			            "key %s is protected and no passphrase was given", fpr);
			goto out;
		}
	}

	/* The secret data: rest of the packet, worked on in secure memory. */
	size_t dlen = r.len - r.off, slen = 0;
	plain_cap = dlen ? dlen : 1;
	plain = gcry_malloc_secure(plain_cap);
	if (!plain) {
		e = -ENOMEM;
		goto out;
	}
	if (usage == 0) {
		memcpy(plain, body + r.off, dlen);
		slen = dlen;
	} else {
		e = unprotect(c, k, tag, usage, cipher, aead, &s2k, iv, ivlen, body, publen, body + r.off, dlen,
		              plain, &slen);
		if (e) {
			if (e == PD_EBADPASS)
				e = pd_fail(c->detail, c->detail_len, e, "key %s: wrong passphrase", fpr);
			else if (e == PD_ELIMIT)
				e = pd_fail(c->why, sizeof(c->why), PD_EUNSUPPORTED, "S2K cost exceeds the limit");
			goto out;
		}
	}
	/* Check value after the fields: v4 usage 0/255/legacy csum16, 254
	 * SHA-1, v6 usage 0 and 253 none (AEAD tag already checked). */
	size_t check = usage == 254 ? 20 : (usage == 253 || (usage == 0 && k->version == 6)) ? 0 : 2;
	size_t used = 0;
	int bad = 0;
	if (slen < check) {
		bad = 1;
	} else {
		e = parse_secret_fields(k, plain, slen - check, &used);
		if (e == -ENOMEM)
			goto out;
		if (e || used != slen - check)
			bad = 1;
	}
	if (!bad && check == 20) {
		uint8_t dig[20];
		gcry_md_hash_buffer(GCRY_MD_SHA1, dig, plain, used);
		bad = memcmp(dig, plain + used, 20) != 0;
	} else if (!bad && check == 2) {
		bad = csum16(plain, used) != pd_be16(plain + used);
	}
	if (bad) {
		/* With encryption, garbage means a wrong passphrase (the S2K/CFB
		 * check is all there is); in the clear it is a malformed key. */
		if (usage == 0)
			e = pd_fail(c->why, sizeof(c->why), PD_EMALFORMED, "malformed secret key material");
		else
			e = pd_fail(c->detail, c->detail_len, PD_EBADPASS, "key %s: wrong passphrase", fpr);
		goto out;
	}
	e = validate(k, c->kr);
	if (e) {
		/* A protected secret that decrypts and passes a 16-bit checksum
		 * but does not fit: most likely the wrong passphrase. */
		if ((e == PD_EINTEGRITY || e == PD_EMALFORMED) && usage != 0)
			e = pd_fail(c->detail, c->detail_len, PD_EBADPASS,
			            "key %s: wrong passphrase (the secret does not match the public key)", fpr);
		else if (e == PD_EINTEGRITY || e == PD_EMALFORMED)
			e = pd_fail(c->why, sizeof(c->why), PD_EMALFORMED, "secret key does not match its public key");
		else if (e == PD_EUNSUPPORTED)
			e = pd_fail(c->why, sizeof(c->why), e, "unsupported key parameters");
		goto out;
	}
	k->ir_secret = OPENSSL_secure_malloc(32); /* not libgcrypt's pool: see drop_gcrypt_secrets */
	if (!k->ir_secret) {
		e = -ENOMEM;
		goto out;
	}
	gcry_randomize(k->ir_secret, 32, GCRY_STRONG_RANDOM);
	*ret = TAKE_PTR(k);
	e = 0;
out:
	if (plain) {
		pd_wipe(plain, plain_cap);
		gcry_free(plain);
	}
	if (e == PD_EMALFORMED || e == PD_EUNSUPPORTED || e == PD_ELIMIT) {
		/* This packet only: the framing of the file is sound. */
		kind = e == PD_EMALFORMED ? PD_KEYSKIP_MALFORMED : PD_KEYSKIP_UNSUPPORTED;
		if (e == PD_ELIMIT && !c->why[0])
			snprintf(c->why, sizeof(c->why), "key material over the size limit (MPIs of at most %u bits)",
			         MAX_MPI_BITS - 8);
		skipped = true;
		e = 0;
	}
	if (skipped)
		skip(c, kind, tag, k, start);
	pd_key_free(k);
	return e;
}

/* ------------------------------------------------------------------ */

static bool same_fpr(const struct pd_key *a, const struct pd_key *b)
{
	return a->fpr_len == b->fpr_len && memcmp(a->fpr, b->fpr, b->fpr_len) == 0;
}

/* The keys of one file (a batch) are few: a linear scan. */
static bool batch_has(const struct batch *b, const struct pd_key *k)
{
	for (size_t i = 0; i < b->n; i++)
		if (same_fpr(b->keys[i], k))
			return true;
	return false;
}

static bool ring_has(const struct pd_keyring *kr, const struct pd_key *k);

static int batch_push(struct batch *b, struct pd_key *k)
{
	if (b->n == b->cap) {
		size_t nc = b->cap ? 2 * b->cap : 8;
		struct pd_key **nk = realloc(b->keys, nc * sizeof(*nk));
		if (!nk)
			return -ENOMEM;
		b->keys = nk;
		b->cap = nc;
	}
	b->keys[b->n++] = k;
	return 0;
}

/* Frame the packets of a binary transferable-key sequence.  Any framing
 * error fails the whole file: nothing after it can be trusted to start a
 * packet. */
static int frame_packets(struct ctx *c, const uint8_t *p, size_t len, struct pktref **ret, size_t *ret_n)
{
	struct pktref *v = NULL;
	size_t n = 0, cap = 0, off = 0;
	int e;

	while (off < len) {
		size_t start = off;
		uint8_t ctb = p[off++], tag;
		uint64_t plen;
		if (!(ctb & 0x80)) {
			e = pd_fail(c->detail, c->detail_len, PD_EMALFORMED, "invalid packet header at offset %zu", start);
			goto fail;
		}
		if (ctb & 0x40) {
			tag = ctb & 0x3F;
			if (off >= len)
				goto trunc;
			uint8_t o = p[off++];
			if (o < 192) {
				plen = o;
			} else if (o < 224) {
				if (off >= len)
					goto trunc;
				plen = ((uint64_t)(o - 192) << 8) + p[off++] + 192;
			} else if (o == 255) {
				if (len - off < 4)
					goto trunc;
				plen = pd_be32(p + off);
				off += 4;
			} else {
				e = pd_fail(c->detail, c->detail_len, PD_EMALFORMED,
				            "partial length on a key-file packet at offset %zu", start);
				goto fail;
			}
		} else {
			tag = (ctb >> 2) & 15;
			unsigned lt = ctb & 3;
			if (lt == 3) {
				/* Indeterminate: only sensible for data packets. */
				e = pd_fail(c->detail, c->detail_len, PD_EMALFORMED,
				            "indeterminate length on a key-file packet at offset %zu", start);
				goto fail;
			}
			size_t nl = (size_t)1 << lt;
			if (len - off < nl)
				goto trunc;
			plen = 0;
			for (size_t i = 0; i < nl; i++)
				plen = (plen << 8) | p[off++];
		}
		if (tag == 0) {
			e = pd_fail(c->detail, c->detail_len, PD_EMALFORMED, "packet tag 0 at offset %zu", start);
			goto fail;
		}
		if (plen > len - off)
			goto trunc;
		if ((tag == 5 || tag == 7 || tag == 6 || tag == 14) && plen > MAX_KEY_PACKET) {
			e = pd_fail(c->detail, c->detail_len, PD_ELIMIT, "key packet at offset %zu is too large", start);
			goto fail;
		}
		if (n == cap) {
			/* at most one packet per two octets of input */
			size_t nc = cap ? 2 * cap : 64;
			struct pktref *nv = realloc(v, nc * sizeof(*nv));
			if (!nv) {
				e = -ENOMEM;
				goto fail;
			}
			v = nv;
			cap = nc;
		}
		v[n++] = (struct pktref){ .body = p + off, .len = (size_t)plen, .start = start, .tag = tag };
		off += (size_t)plen;
	}
	*ret = v;
	*ret_n = n;
	return 0;
trunc:
	e = pd_fail(c->detail, c->detail_len, PD_ETRUNCATED, "key file is truncated");
fail:
	free(v);
	return e;
}

static bool is_key_packet(uint8_t tag) { return tag == 5 || tag == 6 || tag == 7 || tag == 14; }

size_t pd_address_norm(const char *in, size_t n, bool domain_ok, char *out)
{
	size_t at = n;
	if (n < 2 || n > PD_ADDRESS_MAX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)in[i];
		if (ch <= 0x20 || ch == 0x7f || ch == '<' || ch == '>')
			return 0;
		if (ch == '@') {
			if (at != n)
				return 0;
			at = i;
		}
		out[i] = ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : (char)ch;
	}
	if (at == n || at == n - 1 || (at == 0 && !domain_ok))
		return 0;
	out[n] = 0;
	return n;
}

/* The address of a User ID: inside its last <...>, else the whole of it. */
static size_t uid_address(const uint8_t *u, size_t n, char out[PD_ADDRESS_MAX + 1])
{
	const uint8_t *lt = NULL;
	for (size_t i = 0; i < n; i++)
		if (u[i] == '<')
			lt = u + i;
	if (!lt)
		return pd_address_norm((const char *)u, n, false, out);
	const uint8_t *gt = memchr(lt, '>', n - (size_t)(lt - u));
	return gt ? pd_address_norm((const char *)lt + 1, (size_t)(gt - lt) - 1, false, out) : 0;
}

#define MAX_CERT_ADDRS 32

/* The addresses of the certificate whose primary key is packet from: its
 * User IDs up to the next primary key, each once, at most MAX_CERT_ADDRS
 * (a User ID past them binds nothing: the key is then not bound to that
 * address, which fails closed). */
static int cert_addresses(struct ctx *c, const struct pktref *pk, size_t n, size_t from)
{
	char buf[MAX_CERT_ADDRS * (PD_ADDRESS_MAX + 1)], a[PD_ADDRESS_MAX + 1];
	size_t len = 0, count = 0;

	free(c->addrs);
	c->addrs = NULL;
	c->addrs_len = 0;
	for (size_t i = from + 1; i < n && pk[i].tag != 5 && pk[i].tag != 6 && count < MAX_CERT_ADDRS; i++) {
		size_t al;
		if (pk[i].tag != 13 || !(al = uid_address(pk[i].body, pk[i].len, a)))
			continue;
		bool seen = false;
		for (size_t o = 0; o < len && !seen; o += strlen(buf + o) + 1)
			seen = !strcmp(buf + o, a);
		if (seen)
			continue;
		memcpy(buf + len, a, al + 1);
		len += al + 1;
		count++;
	}
	if (!len)
		return 0;
	if (!(c->addrs = malloc(len)))
		return -ENOMEM;
	memcpy(c->addrs, buf, len);
	c->addrs_len = (uint16_t)len;
	return 0;
}

bool pd_key_bound(const struct pd_key *k, const char *vals, size_t n)
{
	for (size_t v = 0; v < n; v++, vals += strlen(vals) + 1) {
		bool bound = false;
		for (size_t o = 0; o < k->addrs_len && !bound; o += strlen(k->addrs + o) + 1) {
			const char *a = k->addrs + o;
			bound = vals[0] == '@' ? !strcmp(strchr(a, '@'), vals) : !strcmp(a, vals);
		}
		if (!bound)
			return false;
	}
	return true;
}

/* Parse every secret key packet; the signatures between one key packet
 * and the next are its own (key flags). */
static int parse_packets(struct ctx *c, const uint8_t *p, size_t len, struct batch *b)
{
	struct pktref *pk = NULL;
	size_t n = 0;
	int e = frame_packets(c, p, len, &pk, &n);

	if (e)
		return e;
	c->pk = pk;
	for (size_t i = 0; i < n; i++) {
		uint8_t tag = pk[i].tag;
		const uint8_t *body = pk[i].body;
		size_t plen = pk[i].len;
		if ((tag == 5 || tag == 6) && (e = cert_addresses(c, pk, n, i)))
			goto out;
		if (tag == 6) {
			/* A public primary key starts a new certificate: its
			 * subkeys (tag 14) are skipped, but remember the
			 * fingerprint in case secret subkeys follow. */
			struct pd_key tmp = { 0 };
			c->primary_fpr_len = 0;
			if (plen >= 6 && (body[0] == 6 || (body[0] == 4 && plen <= 0xFFFF))) {
				tmp.version = body[0];
				fingerprint(&tmp, body, plen);
				memcpy(c->primary_fpr, tmp.fpr, tmp.fpr_len);
				c->primary_fpr_len = tmp.fpr_len;
			}
			continue;
		}
		if (tag != 5 && tag != 7)
			continue; /* user IDs, signatures, trust, public subkeys, ... */
		c->sig_from = i + 1;
		for (c->sig_to = i + 1; c->sig_to < n && !is_key_packet(pk[c->sig_to].tag); c->sig_to++)
			;
		struct pd_key *k = NULL;
		e = parse_secret_key(c, tag, body, plen, pk[i].start, &k);
		if (e) {
			if (c->detail && !c->detail[0])
				pd_fail(c->detail, c->detail_len, e, "secret key packet at offset %zu: %s", pk[i].start,
				        pd_strerror(e));
			goto out;
		}
		if (!k)
			continue;
		if (c->addrs_len) {
			if (!(k->addrs = malloc(c->addrs_len))) {
				pd_key_free(k);
				e = -ENOMEM;
				goto out;
			}
			memcpy(k->addrs, c->addrs, c->addrs_len);
			k->addrs_len = c->addrs_len;
		}
		if (ring_has(c->kr, k) || batch_has(b, k)) {
			pd_key_free(k); /* the same key twice: keep the first */
			c->n_dup++;
			continue;
		}
		if (c->kr->n + b->n >= atomic_load_explicit(&max_keys, memory_order_relaxed)) {
			pd_key_free(k);
			e = pd_fail(c->detail, c->detail_len, PD_ELIMIT, "too many keys in the ring");
			goto out;
		}
		if ((e = batch_push(b, k))) {
			pd_key_free(k);
			goto out;
		}
	}
out:
	c->pk = NULL;
	free(c->addrs);
	c->addrs = NULL;
	c->addrs_len = 0;
	free(pk);
	return e;
}

int pd_keyring_new(struct pd_keyring **ret, enum pd_rsa_backend backend)
{
	if (!ret)
		return -EINVAL;
	if (backend == PD_RSA_DEFAULT)
		backend = pd_rsa_default_backend();
	if (backend != PD_RSA_OPENSSL && backend != PD_RSA_GCRYPT)
		return -EINVAL;
	struct pd_keyring *kr = calloc(1, sizeof(*kr));
	if (!kr)
		return -ENOMEM;
	kr->backend = backend;
	kr->ecdh_backend = pd_ecdh_default_backend();
	kr->workers = PD_MAX_WORKERS;
	*ret = kr;
	return 0;
}

struct pd_keyring *pd_keyring_free(struct pd_keyring *kr)
{
	if (!kr)
		return NULL;
	for (size_t i = 0; i < kr->n; i++)
		pd_key_free(kr->keys[i]);
	free(kr->keys);
	free(kr->ids);
	free(kr);
	return NULL;
}

static uint64_t kid_of(const uint8_t *keyid)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | keyid[i];
	return v;
}

/* First position in ids whose id is >= id (or > id with after). */
static size_t kid_bound(const struct pd_keyring *kr, uint64_t id, bool after)
{
	size_t lo = 0, hi = kr->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (kr->ids[mid].id < id || (after && kr->ids[mid].id == id))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Whether kr holds k's fingerprint.  Equal fingerprints have equal key
 * IDs (the ID is part of the fingerprint, RFC 9580 5.5.4), so only the
 * keys of k's ID are compared: O(log keys), where a scan of the ring made
 * loading N keys cost N^2/2 comparisons. */
static bool ring_has(const struct pd_keyring *kr, const struct pd_key *k)
{
	uint64_t id = kid_of(k->keyid);
	for (size_t at = kid_bound(kr, id, false); at < kr->n && kr->ids[at].id == id; at++)
		if (same_fpr(kr->keys[kr->ids[at].idx], k))
			return true;
	return false;
}

/* keys[kr->n] joins the index, after the keys with the same ID. */
static void kid_insert(struct pd_keyring *kr)
{
	uint64_t id = kid_of(kr->keys[kr->n]->keyid);
	size_t at = kid_bound(kr, id, true);
	memmove(kr->ids + at + 1, kr->ids + at, (kr->n - at) * sizeof(*kr->ids));
	kr->ids[at] = (struct kid){ id, kr->n };
}

/* Room for n more keys in keys[] and ids[]. */
static int ring_reserve(struct pd_keyring *kr, size_t n)
{
	if (kr->n + n <= kr->cap)
		return 0;
	size_t nc = PD_MAX(kr->cap * 2, kr->n + n);
	struct pd_key **nk = realloc(kr->keys, nc * sizeof(*nk));
	if (!nk)
		return -ENOMEM;
	kr->keys = nk;
	struct kid *ni = realloc(kr->ids, nc * sizeof(*ni));
	if (!ni)
		return -ENOMEM;
	kr->ids = ni;
	kr->cap = nc;
	return 0;
}

int pd_keyring_add_report(struct pd_keyring *kr, const uint8_t *data, size_t len, const char *pass,
                          size_t passlen, pd_keyskip_fn *report, void *report_ctx, char *detail, size_t detail_len)
{
	struct ctx c = { .kr = kr, .pass = pass, .passlen = pass ? passlen : 0,
	                 .detail = detail, .detail_len = detail_len, .report = report, .report_ctx = report_ctx };
	struct batch b = { 0 };
	uint8_t *dec = NULL;
	size_t declen = 0;
	int r;

	if (detail && detail_len)
		detail[0] = 0;
	if (!kr || (!data && len))
		return -EINVAL;
	if (len == 0)
		return pd_fail(detail, detail_len, PD_ENOSECRET, "key file is empty");
	r = pd_armor_detect(data, len, true);
	if (r == 1) {
		r = pd_armor_decode_all_secure(data, len, &dec, &declen);
		if (r < 0)
			return pd_fail(detail, detail_len, r, "key file armor: %s", pd_strerror(r));
		data = dec;
		len = declen;
	} else if (r != 0) {
		return pd_fail(detail, detail_len, PD_ENOTPGP, "key file is neither armored nor binary OpenPGP");
	}

	r = parse_packets(&c, data, len, &b);
	/* Nothing usable is an error, named by the first key that could not
	 * be used; a file that only repeats keys already held is not (0
	 * added). */
	if (r == 0 && b.n == 0 && c.n_dup == 0) {
		char more[64] = "";
		if (c.n_skip > 1)
			snprintf(more, sizeof(more), " (and %u more key%s skipped)", c.n_skip - 1,
			         c.n_skip > 2 ? "s" : "");
		if (c.n_warn)
			r = pd_fail(detail, detail_len, c.warn_err, "no usable secret decryption key: %s%s", c.first_warn,
			            more);
		else if (c.n_skip)
			r = pd_fail(detail, detail_len, PD_ENOSECRET, "no usable secret decryption key: %s%s",
			            c.first_other, more);
		else
			r = pd_fail(detail, detail_len, PD_ENOSECRET, "no secret key in the key file (a certificate?)");
	}
	if (r == 0 && b.n) {
		if ((r = ring_reserve(kr, b.n)) < 0)
			goto out;
		for (size_t i = 0; i < b.n; i++) {
			kr->keys[kr->n] = b.keys[i];
			kid_insert(kr);
			kr->n++;
		}
		r = (int)b.n;
		b.n = 0;
	}
out:
	for (size_t i = 0; i < b.n; i++)
		pd_key_free(b.keys[i]);
	free(b.keys);
	if (dec) {
		pd_wipe(dec, declen);
		gcry_free(dec);
	}
	return r;
}

int pd_keyring_merge(struct pd_keyring *kr, struct pd_keyring *from, char *detail, size_t detail_len)
{
	size_t added = 0;
	int r;

	if (detail && detail_len)
		detail[0] = 0;
	if (!kr || !from || kr == from || kr->backend != from->backend || kr->ecdh_backend != from->ecdh_backend ||
	    kr->workers != from->workers)
		return -EINVAL;
	if ((r = ring_reserve(kr, from->n)) < 0)
		return r;
	/* Nothing moves until the whole of from is known to fit: all or
	 * nothing, as pd_keyring_add. */
	size_t fresh = 0;
	for (size_t i = 0; i < from->n; i++)
		fresh += !ring_has(kr, from->keys[i]);
	if (kr->n + fresh > pd_keyring_max_keys())
		return pd_fail(detail, detail_len, PD_ELIMIT, "too many keys in the ring");
	for (size_t i = 0; i < from->n; i++) {
		struct pd_key *k = from->keys[i];
		if (ring_has(kr, k)) {
			pd_key_free(k); /* the same key twice: keep the first */
			continue;
		}
		kr->keys[kr->n] = k;
		kid_insert(kr);
		kr->n++;
		added++;
	}
	from->n = 0;
	pd_keyring_free(from);
	return (int)added;
}

enum pd_rsa_backend pd_keyring_backend(const struct pd_keyring *kr) { return kr->backend; }

int pd_keyring_set_ecdh_backend(struct pd_keyring *kr, enum pd_ecdh_backend backend)
{
	if (!kr)
		return -EINVAL;
	if (backend == PD_ECDH_DEFAULT)
		backend = pd_ecdh_default_backend();
	if (backend != PD_ECDH_OPENSSL && backend != PD_ECDH_GCRYPT)
		return -EINVAL;
	if (kr->n)
		return -EBUSY;
	kr->ecdh_backend = backend;
	return 0;
}

enum pd_ecdh_backend pd_keyring_ecdh_backend(const struct pd_keyring *kr) { return kr->ecdh_backend; }

int pd_keyring_set_workers(struct pd_keyring *kr, unsigned n)
{
	if (!kr || n == 0 || n > PD_MAX_WORKERS)
		return -EINVAL;
	if (kr->n)
		return -EBUSY;
	kr->workers = n;
	return 0;
}

int pd_keyring_add(struct pd_keyring *kr, const uint8_t *data, size_t len, const char *pass, size_t passlen,
                   char *detail, size_t detail_len)
{
	return pd_keyring_add_report(kr, data, len, pass, passlen, NULL, NULL, detail, detail_len);
}

size_t pd_keyring_max_keys(void) { return atomic_load_explicit(&max_keys, memory_order_relaxed); }

size_t pd__keyring_set_max_keys(size_t n) { return atomic_exchange(&max_keys, n ? n : MAX_KEYS); }

size_t pd_keyring_count(const struct pd_keyring *kr)
{
	return kr ? kr->n : 0;
}

int pd_keyring_info(const struct pd_keyring *kr, size_t i, struct pd_keyinfo *ret)
{
	if (!kr || !ret || i >= kr->n)
		return -EINVAL;
	const struct pd_key *k = kr->keys[i];
	struct pd_keyinfo info = { 0 };
	info.version = k->version;
	info.pk_algo = k->pk_algo;
	info.bits = k->bits;
	info.fpr_len = k->fpr_len;
	memcpy(info.fpr, k->fpr, sizeof(info.fpr));
	memcpy(info.keyid, k->keyid, 8);
	info.primary_fpr_len = k->primary_fpr_len;
	memcpy(info.primary_fpr, k->primary_fpr, sizeof(info.primary_fpr));
	info.created = k->created;
	snprintf(info.curve, sizeof(info.curve), "%s", pd_curve_name(k->curve));
	*ret = info;
	return 0;
}

size_t pd_keyring_addresses(const struct pd_keyring *kr, size_t i, const char **ret)
{
	if (!kr || i >= kr->n || !kr->keys[i]->addrs_len) {
		if (ret)
			*ret = "";
		return 0;
	}
	if (ret)
		*ret = kr->keys[i]->addrs;
	return kr->keys[i]->addrs_len;
}

size_t pd__keyring_n(const struct pd_keyring *kr)
{
	return kr ? kr->n : 0;
}

const struct pd_key *pd__keyring_get(const struct pd_keyring *kr, size_t i)
{
	return kr && i < kr->n ? kr->keys[i] : NULL;
}

const struct pd_key *pd__keyring_by_keyid(const struct pd_keyring *kr, const uint8_t keyid[8], size_t nth)
{
	if (!kr || !kr->n)
		return NULL;
	uint64_t id = kid_of(keyid);
	size_t at = kid_bound(kr, id, false) + nth;
	return at < kr->n && kr->ids[at].id == id ? kr->keys[kr->ids[at].idx] : NULL;
}
