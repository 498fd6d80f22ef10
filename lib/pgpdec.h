/* SPDX-License-Identifier: MIT */
/*
 * libpgpdec: the sans-I/O OpenPGP decryption engine.
 *
 * Place in the data path: the daemon (or the test driver) pushes ciphertext
 * bytes into a pd_msg in slices of any size, and pulls events out of it with
 * pd_msg_step(): "need input", "need a session key", "metadata ready",
 * plaintext chunks, and finally "done" or an error.  Session-key recovery is
 * the separate, expensive call pd_msg_recover_key(), meant for a worker
 * thread; it reads the immutable pd_keyring.
 *
 * The engine owns no thread, does no I/O and never blocks.  A pd_msg may be
 * moved between threads between calls, but never used by two at once.  A
 * pd_keyring is immutable after loading and may be read by any number of
 * threads.  A pd_worker belongs to one thread.
 *
 * Errors: every function returns 0 (or a positive step code) on success and a
 * negative code on failure: -errno for system errors, PD_E* for the engine's
 * own.  pd_strerror() names every code in one sentence, pd_errname() gives
 * the stable short name ("ENOKEY", ...).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PD_API __attribute__((visibility("default")))

/* Stable error codes.  Never renumber: the wire status mapping and the
 * tests depend on them. */
enum pd_error {
	PD_EINTERNAL = -4000,    /* a bug: an invariant failed */
	PD_ENOKEY = -4001,       /* no secret key for any recipient */
	PD_EMALFORMED = -4002,   /* malformed packet or armor (offset in detail) */
	PD_EUNSUPPORTED = -4003, /* unsupported algorithm, version or feature */
	PD_EINTEGRITY = -4004,   /* MDC / AEAD tag / session key check failed */
	PD_ELIMIT = -4005,       /* a configured limit was exceeded (which in detail) */
	PD_EBADPASS = -4006,     /* wrong passphrase for a secret key */
	PD_ESED = -4007,         /* symmetrically encrypted data without integrity, refused */
	PD_ENOTPGP = -4008,      /* input is neither armored nor binary OpenPGP */
	PD_ETRUNCATED = -4009,   /* input ended in the middle of the message */
	PD_ENEEDPASS = -4010,    /* a secret key is protected and no passphrase was given */
	PD_ENOSECRET = -4011,    /* key file holds no usable secret decryption key */
	PD_ENOPASSWORD = -4012,  /* message is password-encrypted and no password was given */
	PD_EBOMB = -4013,        /* decompression output or ratio limit exceeded */
	PD_EAGAIN = -4014,       /* internal: more input needed (never returned by the API) */
	PD_EUSAGE = -4015,       /* API misuse (call in the wrong state) */
};

/** One sentence for any code (PD_E* or -errno); never NULL. */
PD_API const char *pd_strerror(int err);
/** Stable short name of a code, e.g. "ENOKEY", "EINTEGRITY", or "ESYS" for -errno. */
PD_API const char *pd_errname(int err);

/* --------------------------------------------------------------------- */
/* Process-wide setup */

/** Initialise libgcrypt (secure memory of secmem_bytes, 0 = default 1 MiB)
 * and OpenSSL's secure heap (secmem_bytes rounded up to a power of two),
 * both locked.  Call once from main() before any thread.  -ENOMEM when
 * either cannot be locked (see pd_lib_locked_bytes), -E2BIG past
 * PD_SECMEM_MAX. */
PD_API int pd_lib_init(size_t secmem_bytes);
/** The most secure memory pd_lib_init takes (libgcrypt's size argument is
 * an unsigned int). */
#define PD_SECMEM_MAX ((size_t)1 << 30)
/** The bytes pd_lib_init(secmem_bytes) locks in all: libgcrypt's pool and
 * OpenSSL's heap (what RLIMIT_MEMLOCK must allow). */
PD_API size_t pd_lib_locked_bytes(size_t secmem_bytes);
/** Release what pd_lib_init() set up (wipes secure memory). */
PD_API void pd_lib_deinit(void);
/** OpenSSL's secure heap (the RSA and ECDH keys of the OpenSSL backends and the state
 * of split operations): its size as pd_lib_init set it up (0: none, such
 * memory then comes from the normal heap) and the bytes in use. */
PD_API void pd_secure_heap(size_t *ret_size, size_t *ret_used);
/** The size of libgcrypt's secure memory as pd_lib_init set it up (0
 * before): the unlocked keys and per-message secrets live in it. */
PD_API size_t pd_secmem_size(void);
/** libgcrypt's unlocked overflow: when its locked pool is full, libgcrypt
 * puts MPIs (the libgcrypt backends' keys and per-message secrets) in pools
 * it mallocs, unlocked, rather than failing.  Returns how many such pools
 * exist (0: it never overflowed; pools are kept until pd_lib_deinit) and
 * puts the bytes in use in them now in *ret_used.  Once there is one, it
 * walks every block of secure memory under libgcrypt's lock (0.3 ms for
 * 200,000 blocks); before, it costs an atomic read. */
PD_API unsigned pd_secmem_overflow(size_t *ret_used);
/** How often libgcrypt warned of it: once, when it made its first
 * overflow pool (an atomic read, cheap enough for a timer). */
PD_API unsigned pd_secmem_overflow_warnings(void);
/** Run-time versions of libgcrypt and OpenSSL libcrypto (for build-info
 * reports; static strings, never NULL). */
PD_API void pd_lib_versions(const char **ret_gcrypt, const char **ret_openssl);

/* --------------------------------------------------------------------- */
/* Limits: every cost a sender chooses is capped. */

struct pd_limits { /* public, by value */
	uint64_t max_output;        /* plaintext bytes per message (0 = unlimited) */
	uint64_t max_input;         /* ciphertext bytes per message (0 = unlimited) */
	uint32_t max_ratio;         /* decompressed/compressed ratio, checked after ratio_grace bytes */
	uint64_t ratio_grace;       /* output allowed before the ratio limit applies */
	uint32_t max_depth;         /* compressed packets nested in each other (at most 14) */
	uint32_t max_packets;       /* packets per message, all layers */
	uint32_t max_partials;      /* partial-length parts per packet */
	uint32_t max_esk;           /* PKESK/SKESK packets kept per message (more are skipped: pd_msg_set_keyring()) */
	uint32_t max_key_trials;    /* private-key operations per message */
	uint32_t max_aead_chunk_log;/* largest SEIPD v2 / OCB chunk octet accepted (<= 16) */
	uint32_t max_argon2_kib;    /* Argon2 memory cap, KiB (0 = none) */
	uint32_t max_s2k_count;     /* iterated+salted S2K octet count cap (0 = none) */
	bool allow_sed;             /* decrypt SED (tag 9, no integrity) */
	/* What a password-encrypted message may make us derive (0 = no cap):
	 * SKESKs tried, the derivations' total work (KiB hashed by iterated
	 * S2K, Argon2 memory x passes / 2; the default, 256 MiB, is about one
	 * second of one core), Argon2 passes t and lanes p.  A message whose
	 * SKESKs ask for more is refused (PD_ELIMIT) before any work. */
	uint32_t max_skesk_trials;
	uint32_t max_kdf_mib;
	uint32_t max_argon2_passes;
	uint32_t max_argon2_lanes;
};

/** Fill *lim with defaults that stop decompression bombs and DoS costs. */
PD_API void pd_limits_default(struct pd_limits *lim);

/* A memory budget several messages (on any threads) draw from: what a
 * message allocates beyond its fixed buffers and because of what the
 * sender chose (layers of compressed data and their decompressor state,
 * an AEAD chunk buffer, Argon2 memory during a derivation) is taken from
 * it first, and given back when freed.  A take that does not fit fails the
 * message with -ENOMEM ("memory budget exhausted").  A caller may take and
 * give on it too (e.g. for its own per-request buffers). */
struct pd_budget;
PD_API int pd_budget_new(struct pd_budget **ret, uint64_t limit);
PD_API struct pd_budget *pd_budget_free(struct pd_budget *b);
/** 0, or -ENOMEM (nothing taken) when used + n would pass the limit. */
PD_API int pd_budget_take(struct pd_budget *b, uint64_t n);
PD_API void pd_budget_give(struct pd_budget *b, uint64_t n);
PD_API uint64_t pd_budget_used(const struct pd_budget *b);
PD_API uint64_t pd_budget_limit(const struct pd_budget *b);

/* --------------------------------------------------------------------- */
/* Key ring: transferable secret keys, unlocked once. */

struct pd_keyring;

enum pd_rsa_backend {
	PD_RSA_DEFAULT = 0, /* the build's default (meson option rsa_backend) */
	PD_RSA_OPENSSL = 1,
	PD_RSA_GCRYPT = 2,
};

/** Create an empty key ring whose RSA keys use the given backend
 * (PD_RSA_DEFAULT: $PD_RSA_BACKEND=openssl|gcrypt if set, else the build's). */
PD_API int pd_keyring_new(struct pd_keyring **ret, enum pd_rsa_backend backend);
/** Free a key ring (wipes secrets); accepts NULL, returns NULL. */
PD_API struct pd_keyring *pd_keyring_free(struct pd_keyring *kr);

/* The backend of the ECDH shared-secret step of NIST and brainpool keys:
 * OpenSSL libcrypto (the scalar in OpenSSL's secure heap, one prepared
 * EVP_PKEY per key, a derive context per worker) or libgcrypt.  Both are
 * constant time and reject the same points.  cv25519, X25519 and X448
 * keys go through OpenSSL with either (libgcrypt 1.10's X25519/X448 can
 * crash when its secure memory is full). */
enum pd_ecdh_backend {
	PD_ECDH_DEFAULT = 0, /* $PD_ECDH_BACKEND=openssl|gcrypt if set, else the build's (meson ecdh_backend) */
	PD_ECDH_OPENSSL = 1,
	PD_ECDH_GCRYPT = 2,
};
/** Choose the ECDH backend of the keys added from now on.  A new key ring
 * has PD_ECDH_DEFAULT, resolved by pd_keyring_new.  -EINVAL for an unknown
 * value, -EBUSY once the ring holds keys (they keep theirs). */
PD_API int pd_keyring_set_ecdh_backend(struct pd_keyring *kr, enum pd_ecdh_backend backend);
/** The ECDH backend its keys use (never PD_ECDH_DEFAULT). */
PD_API enum pd_ecdh_backend pd_keyring_ecdh_backend(const struct pd_keyring *kr);
/** How many workers (pd_worker_new indexes 0..n-1) keep prepared per-key
 * state (OpenSSL contexts, the RSA split state) for the keys added from
 * now on; a worker whose index is n or more still works, with state made
 * and freed per operation.  A new ring has PD_MAX_WORKERS; a process with
 * fewer workers sets its count, so that a key holds n slots and not 256
 * (4 KiB per RSA key, 2 KiB per ECDH key: 40-60 MiB over 10,000 keys).
 * What fills a slot (an OpenSSL context, 0.5-2.6 KiB) is kept for at most
 * 1,024 keys per worker; past that a worker makes it per operation.
 * -EINVAL for 0 or more than PD_MAX_WORKERS, -EBUSY once the ring holds
 * keys. */
PD_API int pd_keyring_set_workers(struct pd_keyring *kr, unsigned n);
/** Add every secret key in data (binary or armored, several keys allowed),
 * unlocking protected ones with pass (may be NULL).  A decryption key is a
 * secret (sub)key of an encryption algorithm whose key flags (RFC 9580
 * 5.2.3.29: the subkey binding signature for a subkey, the direct-key or
 * primary User ID self-signature for a primary key) allow encryption
 * (0x04 or 0x08); a key without any Key Flags subpacket counts as one, as
 * in GnuPG.  Self-signatures are read, not verified: the operator vouches
 * for the key file.  Expiry and revocation are not looked at (messages
 * written before still decrypt, as with gpg).
 *
 * A key packet that cannot be used is skipped, the rest of the file goes
 * on: unsupported versions (v3, LibrePGP v5), algorithms (ML-KEM, ...),
 * curves (secp256k1, SM2, ...), a v6 key with a legacy Curve25519/Ed25519
 * OID (RFC 9580 9.2), a malformed packet, a secret that does not match
 * its public key.  pd_keyring_add_report() says which and why.
 *
 * Returns the number of decryption keys added (keys already held are
 * skipped, so 0 is possible), or a negative error, and then nothing is
 * added: PD_ENEEDPASS, PD_EBADPASS (a protected decryption key, no or the
 * wrong passphrase), PD_ENOTPGP, PD_EMALFORMED or PD_ETRUNCATED (the file
 * is not a packet sequence), or, when no decryption key is in it at all,
 * PD_EUNSUPPORTED or PD_EMALFORMED (after skipped keys of that kind) or
 * PD_ENOSECRET (public keys, stubs, signing keys).  detail (may be NULL)
 * receives a sentence naming the key (fingerprint) and the reason. */
PD_API int pd_keyring_add(struct pd_keyring *kr, const uint8_t *data, size_t len,
                          const char *pass, size_t passlen, char *detail, size_t detail_len);

/* Why a secret key packet was not added. */
enum pd_keyskip_kind {
	PD_KEYSKIP_UNSUPPORTED = 1,    /* version, algorithm, curve or parameters not supported */
	PD_KEYSKIP_MALFORMED = 2,      /* the packet does not parse, or its secret does not match */
	PD_KEYSKIP_NOT_ENCRYPTION = 3, /* a signing key, by its algorithm or its key flags */
	PD_KEYSKIP_NO_SECRET = 4,      /* a stub: gnu-dummy S2K, divert-to-card */
};

struct pd_keyskip { /* public, by value; valid during the callback only */
	enum pd_keyskip_kind kind;
	bool primary;          /* a primary key packet (tag 5), else a subkey (tag 7) */
	uint8_t version;       /* key packet version: 3, 4, 5, 6, ... */
	uint8_t pk_algo;       /* 0 when the packet is too short to tell */
	uint8_t fpr_len;       /* 20 or 32, or 0 when it cannot be computed */
	uint8_t fpr[32];
	bool has_keyid;        /* keyid is known (v3: from the RSA modulus) */
	uint8_t keyid[8];
	const char *name;      /* how sentences name it: "key FPR", "key ID KEYID", "the v4 key
	                        * packet at offset N" */
	const char *reason;    /* e.g. "unsupported curve secp256k1"; never key material */
};

/** Called once for each secret key packet pd_keyring_add_report() does not
 * add (keys already held aside), also when the call fails afterwards. */
typedef void pd_keyskip_fn(void *ctx, const struct pd_keyskip *skip);

/** pd_keyring_add(), telling report (may be NULL) about every key skipped. */
PD_API int pd_keyring_add_report(struct pd_keyring *kr, const uint8_t *data, size_t len,
                                 const char *pass, size_t passlen, pd_keyskip_fn *report, void *ctx,
                                 char *detail, size_t detail_len);
/** Move the keys of from into kr, in from's order, skipping those kr holds
 * already (by fingerprint: the first stays), and free from.  For loading
 * in parallel: each thread fills its own ring with pd_keyring_add(), one
 * thread merges them in file order, and the result is the ring adding the
 * files one after another would have made.  Both rings must use the same
 * RSA backend, the same ECDH backend and the same worker count.  Returns the number of keys added, or a negative error and
 * then nothing moved and from is still the caller's: -EINVAL, -ENOMEM,
 * PD_ELIMIT (the ring would pass its cap of keys). */
PD_API int pd_keyring_merge(struct pd_keyring *kr, struct pd_keyring *from, char *detail, size_t detail_len);
/** The most keys a ring holds (100,000): pd_keyring_merge() fails past it
 * with PD_ELIMIT, and so does pd_keyring_add() for a file that alone would
 * reach it (a loader unlocking files in parallel can stop once the keys
 * unlocked pass it). */
PD_API size_t pd_keyring_max_keys(void);
/** Number of decryption-capable secret (sub)keys held. */
PD_API size_t pd_keyring_count(const struct pd_keyring *kr);
/** The RSA backend its keys use (PD_RSA_DEFAULT resolved at pd_keyring_new). */
PD_API enum pd_rsa_backend pd_keyring_backend(const struct pd_keyring *kr);

struct pd_keyinfo { /* public, by value */
	uint8_t version;       /* 4 or 6 */
	uint8_t pk_algo;       /* OpenPGP public-key algorithm id */
	uint16_t bits;         /* key size in bits (curve size for ECC) */
	uint8_t fpr_len;       /* 20 (v4) or 32 (v6) */
	uint8_t fpr[32];       /* fingerprint of this (sub)key */
	uint8_t keyid[8];
	uint8_t primary_fpr_len;
	uint8_t primary_fpr[32]; /* fingerprint of its primary key */
	uint32_t created;
	char curve[24];        /* "" or curve name for ECC keys */
};
/** Describe the i-th decryption key. */
PD_API int pd_keyring_info(const struct pd_keyring *kr, size_t i, struct pd_keyinfo *ret);
/** The addresses the i-th key is bound to (pd_msg_bind): those of its
 * certificate's User IDs ("Name <local@domain>" or a bare local@domain,
 * lowercased, at most 32 a certificate), each followed by a NUL, in
 * *ret; returns their total length (0: none, or i out of range).  Valid
 * as long as the ring. */
PD_API size_t pd_keyring_addresses(const struct pd_keyring *kr, size_t i, const char **ret);

/* --------------------------------------------------------------------- */
/* Per-thread crypto context: pre-opened cipher/hash handles reused across
 * messages, and the index of this worker for per-worker RSA contexts. */

struct pd_worker;

#define PD_MAX_WORKERS 256

/** Create the context of worker number index (0..PD_MAX_WORKERS-1). */
PD_API int pd_worker_new(struct pd_worker **ret, unsigned index);
/** Free it; accepts NULL, returns NULL. */
PD_API struct pd_worker *pd_worker_free(struct pd_worker *w);

/** One piece of a private-key operation that may run on another thread (the
 * second CRT half of a large RSA key).  fn and arg are set by the engine;
 * next and state belong to the pd_helper that runs it. */
struct pd_task {
	void (*fn)(void *arg);
	void *arg;
	struct pd_task *next;
	int state;
};
/** Idle threads lent to a worker, so that one operation can use two cores
 * when nothing else is waiting (latency at low load; throughput is the
 * same).  Both calls are made from the worker's own thread. */
struct pd_helper {
	/** Hand t to an idle thread and return true; false when no thread is
	 * idle right now (the engine then runs t itself). */
	bool (*start)(void *ctx, struct pd_task *t);
	/** Return once t has run: wait for the thread running it, or run it on
	 * the calling thread if no thread has taken it yet. */
	void (*finish)(void *ctx, struct pd_task *t);
	void *ctx;
};
/** Give w a helper (NULL: none, the default); h must outlive w's use of it.
 * RSA keys whose CRT halves are slower together than apart on this machine
 * (calibrated when the key is loaded; 3072 bits and up with OpenSSL 3.0)
 * then run the two halves in parallel when start() finds an idle thread. */
PD_API void pd_worker_set_helper(struct pd_worker *w, const struct pd_helper *h);
/** Split operations that failed and were redone on one thread, since the
 * start: 0 in a healthy process (the tests assert it).  A rise means the check of a result
 * against the public key failed (a hardware fault) or the secure heap
 * (pd_lib_init's secmem_bytes) is too small for the split path's state. */
PD_API unsigned long pd_split_failures(void);

/* --------------------------------------------------------------------- */
/* One message */

struct pd_msg;

enum pd_step {
	PD_STEP_NEED_INPUT = 1, /* feed more with pd_msg_write() or call pd_msg_close_input() */
	PD_STEP_NEED_KEY = 2,   /* call pd_msg_recover_key() (or pd_msg_set_password() first) */
	PD_STEP_METADATA = 3,   /* pd_msg_info() now has literal name/date/format */
	PD_STEP_OUTPUT = 4,     /* *ret_len plaintext bytes were written to out */
	PD_STEP_DONE = 5,       /* message complete and verified; pd_msg_info() final */
};

enum pd_integrity {
	PD_INTEGRITY_NONE = 0,  /* nothing verified (yet) */
	PD_INTEGRITY_MDC = 1,   /* SEIPD v1, MDC verified */
	PD_INTEGRITY_AEAD = 2,  /* SEIPD v2 or OCB packet, all tags verified */
	PD_INTEGRITY_UNPROTECTED = 3, /* SED allowed by configuration: no integrity */
};

#define PD_MAX_RECIPIENTS 64
#define PD_MAX_ISSUERS 16

struct pd_recipient { /* public, by value */
	uint8_t version;      /* PKESK version 3 or 6 */
	uint8_t pk_algo;
	bool wildcard;        /* anonymous recipient */
	uint8_t keyid[8];     /* v3 key ID, or derived from the v6 fingerprint */
	uint8_t fpr_len;      /* v6 PKESK: 0, 20 or 32 */
	uint8_t fpr[32];
};

struct pd_msginfo { /* public, by value; valid until pd_msg_free() */
	bool armored;
	uint8_t container;       /* packet tag: 18 SEIPD, 20 OCB, 9 SED (0 = not yet) */
	uint8_t container_version; /* 1 or 2 */
	uint8_t sym_algo;        /* OpenPGP symmetric algorithm id */
	uint8_t aead_algo;       /* 0, or 1 EAX, 2 OCB, 3 GCM */
	uint8_t aead_chunk_log;  /* chunk octet c (size 2^(c+6)) */
	uint8_t pk_algo;         /* algorithm of the key that opened it (0 = password) */
	uint8_t key_fpr_len;
	uint8_t key_fpr[32];     /* fingerprint of the (sub)key that opened it */
	uint8_t compression[8];  /* compression algorithms met, outermost first */
	uint8_t n_compression;
	bool has_literal;
	char literal_format;     /* 'b', 't', 'u', 'm', ... */
	uint8_t literal_name_len;
	char literal_name[256];  /* raw octets, NUL-terminated; attacker-controlled */
	uint32_t literal_date;
	size_t n_recipients;
	struct pd_recipient recipients[PD_MAX_RECIPIENTS];
	size_t n_recipients_total; /* including those beyond PD_MAX_RECIPIENTS */
	size_t n_skesk;
	size_t n_issuers;
	uint8_t issuers[PD_MAX_ISSUERS][8]; /* signature / one-pass issuer key IDs */
	size_t n_signatures;
	enum pd_integrity integrity;
	uint64_t bytes_in;
	uint64_t bytes_out;
};

/** Create a message decoder with the given limits (NULL = defaults). */
PD_API int pd_msg_new(struct pd_msg **ret, const struct pd_limits *lim);
/** Free it (wipes key material and buffers); accepts NULL, returns NULL.
 * w (may be NULL) receives the handles the message borrowed. */
PD_API struct pd_msg *pd_msg_free(struct pd_msg *m, struct pd_worker *w);
/** Copy up to len ciphertext bytes into the message's bounded input buffer.
 * *ret_consumed < len means the buffer is full: call pd_msg_step() first. */
PD_API int pd_msg_write(struct pd_msg *m, const uint8_t *in, size_t len, size_t *ret_consumed);
/** Declare the end of the ciphertext. */
PD_API int pd_msg_close_input(struct pd_msg *m);
/** Room left in the input buffer. */
PD_API size_t pd_msg_input_space(const struct pd_msg *m);
/** Run the pipeline as far as it can go: returns a PD_STEP_* code (> 0) or a
 * negative error, which is final (pd_msg_detail() says more).  On
 * PD_STEP_OUTPUT, *ret_len (<= cap) plaintext bytes are in out.  Plaintext is
 * provisional until PD_STEP_DONE: for SEIPD v1 the MDC is checked at the end. */
PD_API int pd_msg_step(struct pd_msg *m, struct pd_worker *w, uint8_t *out, size_t cap, size_t *ret_len);
/** Recover the session key from the PKESKs with the keys of kr (the expensive
 * call, for a worker thread).  0 on success: the next pd_msg_step() goes on.
 * PD_ENOKEY when no PKESK names a key held (detail lists the key IDs).  A
 * PKESK that decrypts badly is not reported here: it leads to the same
 * PD_EINTEGRITY as a tampered message, so that no error or timing tells a
 * padding failure from a wrong session key.  If a password was set, SKESKs
 * are tried too. */
PD_API int pd_msg_recover_key(struct pd_msg *m, const struct pd_keyring *kr, struct pd_worker *w);
/** The key ring the message will be decrypted with, known before its
 * packets arrive (optional; kr must outlive the message).  Past max_esk
 * session key packets the engine keeps only PKESKs naming one of its keys
 * (at most max_key_trials of them) and skips the rest: a message to 10,000
 * recipients decrypts when one is ours.  Without it every packet past
 * max_esk is skipped. */
PD_API void pd_msg_set_keyring(struct pd_msg *m, const struct pd_keyring *kr);
/* Binding: a mail gateway decrypts a message for its recipients only with
 * a key that belongs to them, so that whoever can mail an address behind
 * it cannot have someone else's ciphertext opened into their own mailbox.
 * A key is bound to an address when one of its certificate's User IDs
 * carries it (pd_keyring_addresses), to a domain when one of them is in
 * that domain.  The User IDs are the operator's key files, never
 * verified, like the rest of them. */
#define PD_ADDRESS_MAX 254 /* octets of an address (RFC 5321's path limit less the brackets) */
#define PD_MAX_BIND 16     /* values a message is bound to */
/** Try only the keys bound to val: local@domain (that address) or
 * @domain (an address in that domain), compared after ASCII lowercasing.
 * Called again, a key must be bound to every value given (several
 * recipients share one plaintext).  Passwords and session keys are not
 * affected.  Before any input is written.  0, -EINVAL (not such a
 * value: pd_bind_check), -E2BIG (more than PD_MAX_BIND), PD_EUSAGE (too
 * late), -ENOMEM.  A message whose keys are all unbound fails exactly as
 * if the ring did not hold them (PD_ENOKEY, or INTEGRITY for anonymous
 * recipients). */
PD_API int pd_msg_bind(struct pd_msg *m, const char *val, size_t len);
/** Whether pd_msg_bind() would take val: 0 or -EINVAL. */
PD_API int pd_bind_check(const char *val, size_t len);
/** Supply a password for SKESK packets (before pd_msg_recover_key()). */
PD_API int pd_msg_set_password(struct pd_msg *m, const char *pw, size_t len);

/* Session keys: one message opened without the private key (an auditor
 * discloses a single message), or its key disclosed once it verified.
 * Inside the engine the key lives in secure memory and is wiped with the
 * message; octets handed to or taken from the caller are the caller's to
 * protect and wipe.  The text form "ALGO:HEX" that gpg and SOP use is the
 * caller's business: these calls take and give the algorithm id and the
 * key octets. */
#define PD_SESSION_KEY_MAX 32
/** Decrypt with this session key instead of recovering one (no private-key
 * operation, no password): set it before the message asks for a key, and
 * PD_STEP_NEED_KEY never comes.  algo is the OpenPGP symmetric algorithm
 * id (for SEIPD v2 and OCB containers the one their header names), len its
 * key length.  0, or PD_EUNSUPPORTED (algorithm unknown), -EINVAL (length
 * wrong for it), PD_EUSAGE (a key is already set or recovered).  A wrong
 * key ends as PD_EINTEGRITY, as any wrong key does; pd_msg_info() then has
 * pk_algo 0 and no key fingerprint. */
PD_API int pd_msg_set_session_key(struct pd_msg *m, uint8_t algo, const uint8_t *key, size_t len);
/** What pd_msg_set_session_key() would say of a key of this algorithm and
 * length, without a message: 0, PD_EUNSUPPORTED or -EINVAL.  For a caller
 * that answers a bad key before it makes the message. */
PD_API int pd_session_key_check(uint8_t algo, size_t len);
/** The session key of a message that verified: only after PD_STEP_DONE
 * with integrity MDC or AEAD, its algorithm (for SEIPD v2 and OCB the
 * cipher of the authenticated header) in *ret_algo and *ret_len octets in
 * key (cap PD_SESSION_KEY_MAX is always enough).  PD_EUSAGE in every other
 * case: before the end, after any failure, for SED (no integrity): nothing
 * is given out about a message that did not authenticate.  -ENOSPC when
 * cap is too small. */
PD_API int pd_msg_session_key(const struct pd_msg *m, uint8_t *ret_algo, uint8_t *key, size_t cap,
                              size_t *ret_len);
/** Let the caller give up on a message from another thread: while *flag
 * (read with an atomic load) is nonzero, the next costly step (a round of
 * pd_msg_step(), a key derivation, a private-key trial) does not start and
 * the call fails with -ECANCELED.  flag must outlive the message. */
PD_API void pd_msg_set_cancel(struct pd_msg *m, const int *flag);
/** Draw this message's memory from b (before the first pd_msg_step(); b
 * must outlive the message).  Its fixed buffers (PD_MSG_BASE_MEMORY) are
 * taken at once: -ENOMEM when they do not fit. */
PD_API int pd_msg_set_budget(struct pd_msg *m, struct pd_budget *b);
/** The fixed buffers of a message: input and armor buffers, packet collector. */
#define PD_MSG_BASE_MEMORY (2u * 65536u + 8192u)
/** Metadata gathered so far (complete after PD_STEP_DONE). */
PD_API const struct pd_msginfo *pd_msg_info(const struct pd_msg *m);
/** Sentence describing the last error (or "" if none). */
PD_API const char *pd_msg_detail(const struct pd_msg *m);

/** Printable names of OpenPGP algorithm ids ("AES256", "RSA", "ZLIB", "OCB"). */
PD_API const char *pd_sym_name(int algo);
PD_API const char *pd_pk_name(int algo);
PD_API const char *pd_compress_name(int algo);
PD_API const char *pd_aead_name(int algo);

#ifdef __cplusplus
}
#endif
