/* SPDX-License-Identifier: MIT */
/*
 * Key files -> an immutable, refcounted pd_keyring snapshot (see keys.h).
 *
 * Passphrases: each key file is unlocked with one passphrase, chosen so
 * that a key directory can be systemd's credentials directory, where every
 * credential is a flat file: the key-passphrase mapping for that file if
 * there is one, else FILE.passphrase beside it if that exists, else the
 * global passphrase-file.  Files ending in .passphrase are never key
 * files.  A key the chosen passphrase does not unlock fails the load,
 * naming the key file, the key and the passphrase file (never the
 * passphrase): a start must not quietly lose a key to a typo.
 *
 * Unusable keys (unsupported, malformed, not OpenPGP) are skipped with a
 * warning that names the reason; strict-keys makes any of them fail the
 * load, and a load that leaves no decryption key fails anyway.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <gcrypt.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "keys.h"
#include "log.h"
#include "sigmask.h"
#include "pgpdec.h"

#define MAX_KEYFILE (1u << 20) /* a transferable secret key is a few KiB */
#define MAX_PASS 4096
#define PASS_SUFFIX ".passphrase"
#define MAX_DIR_FILES 100000   /* key files in keydir: the key ring's cap */
#define SECMEM_MIN (4u << 20)  /* secmem-size 0: at least this */

/* The public facts of a set's keys, in the set's order, for KEYS: a
 * listing sent a piece at a time holds these, not the set, whose secrets a
 * reload that removed them should not keep. */
struct pd_keyinfos {
	atomic_uint n_ref;
	size_t n;
	char *abuf;     /* the keys' addresses (pd_keyring_addresses), one after another */
	size_t *aoff;   /* key i's are abuf[aoff[i] .. aoff[i + 1]) */
	struct pd_keyinfo v[];
};

struct pd_keyset {
	atomic_uint n_ref;
	struct pd_keyring *kr;
	size_t count;
	char *listing;
	struct pd_keyinfos *infos;
	char **files;  /* every file the load read: key files, passphrase files */
	size_t nfiles;
	char **src;    /* per key: the key file it came from */
	size_t nsrc;
	size_t nkeyfiles; /* key files its load read: its share of live_keyfiles */
};

/* Key files of the sets alive (in use, or held by requests that began
 * with them): what fills secure memory besides a load's own keys.  A
 * reload loads the new set beside the old, so a size that only fits one
 * set makes every reload fail (from the review). */
static atomic_size_t live_keyfiles;

/* Read a whole file into secure memory (key files may hold unprotected
 * secret keys, passphrase files always hold secrets). */
static int read_secure(const char *path, size_t max, uint8_t **ret, size_t *ret_len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	struct stat st;
	int r;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
		close(fd);
		return S_ISREG(st.st_mode) ? -EFBIG : S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
	}
	size_t cap = (size_t)st.st_size + 1;
	uint8_t *buf = gcry_malloc_secure(cap);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	size_t len = 0;
	for (;;) {
		ssize_t n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			explicit_bzero(buf, cap);
			gcry_free(buf);
			close(fd);
			return r;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len == cap) { /* grew while we read */
			explicit_bzero(buf, cap);
			gcry_free(buf);
			close(fd);
			return -EFBIG;
		}
	}
	close(fd);
	*ret = buf;
	*ret_len = len;
	return 0;
}

static void free_secure(uint8_t *p, size_t len)
{
	if (p) {
		explicit_bzero(p, len);
		gcry_free(p);
	}
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool ends_with(const char *s, const char *suffix)
{
	size_t l = strlen(s), n = strlen(suffix);
	return l >= n && strcmp(s + l - n, suffix) == 0;
}

static int strv_push(char ***v, size_t *n, const char *s)
{
	char **nv = *n < 2 * MAX_DIR_FILES + 16 ? realloc(*v, (*n + 1) * sizeof(**v)) : NULL;
	char *d = nv ? strdup(s) : NULL;
	if (!d) {
		if (nv)
			*v = nv;
		return -ENOMEM;
	}
	*v = nv;
	(*v)[(*n)++] = d;
	return 0;
}

static void strv_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static void keyset_free(struct pd_keyset *ks);

/* ------------------------------------------------------------------ */
/* One load */

struct ident {
	dev_t dev;
	ino_t ino;
};

/* key-passphrase = KEYFILE:PASSFILE, the key file identified by inode. */
struct passmap {
	struct ident key;
	const char *keyname;  /* as written, for messages */
	char *passfile;
	bool used;
};

struct load {
	const struct pd_config *c;
	unsigned workers;     /* per-worker key state slots (pd_keyring_set_workers), or 0 */
	struct pd_keyset *ks;
	char *err;
	size_t errlen;
	struct passmap *maps;
	size_t nmaps;
	struct ident *other;  /* files of the config that are not key files */
	size_t nother;
	uint8_t *gpass;       /* the passphrase-file's content */
	size_t gpass_len, gpass_filelen;
	bool in_dir;          /* loading the keydir's files (after the --key ones) */
	size_t nfiles_total;  /* key files of the whole load */
	size_t nfiles_done;   /* ... finished so far */
	unsigned n_skipped;   /* unusable keys and key files, whole load */
	char first_skip[512]; /* the first of them, for the final sentence */
};

static void note_skip(struct load *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note_skip(struct load *L, const char *fmt, ...)
{
	if (!L->n_skipped++) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(L->first_skip, sizeof(L->first_skip), fmt, ap);
		va_end(ap);
	}
}

static int fail(struct load *L, int r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct load *L, int r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(L->err, L->errlen, fmt, ap);
	va_end(ap);
	return r;
}

static bool same(const struct ident *a, const struct stat *st)
{
	return a->dev == st->st_dev && a->ino == st->st_ino;
}

static int add_ident(struct ident **v, size_t *n, const char *path)
{
	struct stat st;
	if (!path || stat(path, &st) < 0)
		return 0;
	struct ident *nv = realloc(*v, (*n + 1) * sizeof(**v));
	if (!nv)
		return -ENOMEM;
	*v = nv;
	(*v)[(*n)++] = (struct ident){ st.st_dev, st.st_ino };
	return 0;
}

/* Record a file the load read (once), for the reload's credentials note. */
static int read_file_noted(struct load *L, const char *path)
{
	for (size_t i = 0; i < L->ks->nfiles; i++)
		if (!strcmp(L->ks->files[i], path))
			return 0;
	return strv_push(&L->ks->files, &L->ks->nfiles, path);
}

/* The passphrase is the first line, without its line end. */
static size_t first_line(const uint8_t *p, size_t n)
{
	size_t l = 0;
	while (l < n && p[l] != '\n' && p[l] != '\r')
		l++;
	return l;
}

static int parse_maps(struct load *L)
{
	const struct pd_strv *kp = &L->c->key_passphrases;
	if (!kp->n)
		return 0;
	L->maps = calloc(kp->n, sizeof(*L->maps));
	if (!L->maps)
		return fail(L, -ENOMEM, "out of memory");
	for (size_t i = 0; i < kp->n; i++) {
		const char *colon = strchr(kp->v[i], ':'); /* checked by config.c */
		struct passmap *m = &L->maps[L->nmaps];
		char *key = strndup(kp->v[i], (size_t)(colon - kp->v[i]));
		struct stat st;
		if (!key || !(m->passfile = strdup(colon + 1))) {
			free(key);
			return fail(L, -ENOMEM, "out of memory");
		}
		L->nmaps++;
		int r = stat(key, &st) < 0 ? -errno : 0;
		if (r < 0) {
			fail(L, r, "key-passphrase %s: %s is not a key file of key or keydir (%s)", kp->v[i], key,
			     strerror(-r));
			free(key);
			return r;
		}
		free(key);
		m->key = (struct ident){ st.st_dev, st.st_ino };
		m->keyname = kp->v[i];
		if (add_ident(&L->other, &L->nother, m->passfile) < 0)
			return fail(L, -ENOMEM, "out of memory");
	}
	return 0;
}

static bool is_other(const struct load *L, const struct stat *st)
{
	for (size_t i = 0; i < L->nother; i++)
		if (same(&L->other[i], st))
			return true;
	return false;
}

/* Regular files of dir, sorted.  Skipped: hidden files, editor backups,
 * *.passphrase files, and the configuration's other files (passphrase,
 * TLS and --key files): a key directory may be systemd's credentials
 * directory, which holds all of them. */
static int list_dir(struct load *L, const char *dir, char ***ret, size_t *ret_n)
{
	DIR *d = opendir(dir);
	char **v = NULL;
	size_t n = 0;
	struct dirent *e;

	if (!d)
		return -errno;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (e->d_name[0] == '.' || (l && e->d_name[l - 1] == '~') || ends_with(e->d_name, PASS_SUFFIX))
			continue;
		char *p;
		if (asprintf(&p, "%s/%s", dir, e->d_name) < 0)
			goto nomem;
		struct stat st;
		if (stat(p, &st) < 0 || !S_ISREG(st.st_mode) || is_other(L, &st)) {
			free(p);
			continue;
		}
		if (n == MAX_DIR_FILES) {
			free(p);
			closedir(d);
			strv_free(v, n);
			return -E2BIG;
		}
		char **nv = realloc(v, (n + 1) * sizeof(*v));
		if (!nv) {
			free(p);
			goto nomem;
		}
		v = nv;
		v[n++] = p;
	}
	closedir(d);
	qsort(v, n, sizeof(*v), cmp_str);
	*ret = v;
	*ret_n = n;
	return 0;
nomem:
	closedir(d);
	strv_free(v, n);
	return -ENOMEM;
}

/* A FILE.passphrase in the key directory without its FILE: a typo the
 * operator wants to hear about (that key would use passphrase-file). */
static void warn_orphans(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.' || !ends_with(e->d_name, PASS_SUFFIX))
			continue;
		char *p;
		struct stat st;
		if (asprintf(&p, "%s/%.*s", dir, (int)(strlen(e->d_name) - strlen(PASS_SUFFIX)), e->d_name) < 0)
			break;
		if (stat(p, &st) < 0)
			pd_log_warn("SYS", "%s/%s: no key file %s beside it, not used", dir, e->d_name, p);
		free(p);
	}
	closedir(d);
}

/* ------------------------------------------------------------------ */
/* One key file, loaded in three steps: prepare (in file order: which
 * passphrase), unlock (on any of the load's threads: reads, S2K, RSA
 * setup, into a ring of its own), finish (in file order again: the log
 * lines, the errors and the merge into the set's ring), so that the set,
 * the messages and the first error reported are those of loading the files
 * one after another, while the CPU work runs on as many threads as there
 * are workers. */

struct skiprec {
	enum pd_keyskip_kind kind;
	char *name, *reason;
};

struct job {
	const char *path;
	char *passpath;            /* its own passphrase file, or NULL for passphrase-file */
	int r;                     /* of the step that failed, or pd_keyring_add's count */
	enum { J_OK, J_FAIL, J_PASSREAD, J_KEYREAD, J_ADD } stage;
	bool pass_read, key_read;  /* for the list of files read */
	bool unlocked;             /* its unlock step ran (or prepare failed): ready to finish */
	struct pd_keyring *kr;     /* what it added, until the merge */
	char detail[512];          /* J_FAIL: the whole sentence; J_ADD: the ring's detail */
	struct skiprec *skips;
	size_t nskips;
	bool skip_lost;            /* a skip could not be recorded (ENOMEM): the load fails */
	bool ring_nomem;           /* -ENOMEM: its own ring could not be made (ordinary memory) */
};

static void job_clear(struct job *j)
{
	for (size_t i = 0; i < j->nskips; i++) {
		free(j->skips[i].name);
		free(j->skips[i].reason);
	}
	free(j->skips);
	free(j->passpath);
	pd_keyring_free(j->kr);
	memset(j, 0, sizeof(*j));
}

static atomic_uint inject_nomem; /* pd__keyset_inject_nomem: allocations to go, the last one fails */

unsigned pd__keyset_inject_nomem(unsigned nth) { return atomic_exchange(&inject_nomem, nth); }

/* Does this allocation fail, for a test? */
static bool injected(void)
{
	unsigned v = atomic_load_explicit(&inject_nomem, memory_order_relaxed);
	while (v && !atomic_compare_exchange_weak(&inject_nomem, &v, v - 1))
		;
	return v == 1;
}

/* The key ring reports each key it does not add: kept for the finish
 * step, which logs them in file order. */
static void on_skip(void *ctx, const struct pd_keyskip *s)
{
	struct job *j = ctx;
	struct skiprec *nv = injected() ? NULL : realloc(j->skips, (j->nskips + 1) * sizeof(*nv));
	if (!nv) {
		j->skip_lost = true; /* strict-keys must not pass on a skip it never saw */
		return;
	}
	j->skips = nv;
	nv[j->nskips] = (struct skiprec){ s->kind, strdup(s->name), strdup(s->reason) };
	if (nv[j->nskips].name && nv[j->nskips].reason) {
		j->nskips++;
	} else {
		free(nv[j->nskips].name);
		free(nv[j->nskips].reason);
		j->skip_lost = true;
	}
}

static void hex(char *out, const uint8_t *in, size_t n)
{
	static const char d[] = "0123456789ABCDEF";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = d[in[i] >> 4];
		out[2 * i + 1] = d[in[i] & 15];
	}
	out[2 * n] = 0;
}

/* "RSA 2048", "ECDH brainpoolP256r1", "X25519" */
static void describe(const struct pd_keyinfo *ki, char *out, size_t cap)
{
	if (!ki->curve[0])
		snprintf(out, cap, "%s %u", pd_pk_name(ki->pk_algo), ki->bits);
	else if (ki->pk_algo == 25 || ki->pk_algo == 26) /* X25519, X448: the algorithm is the curve */
		snprintf(out, cap, "%s", pd_pk_name(ki->pk_algo));
	else
		snprintf(out, cap, "%s %s", pd_pk_name(ki->pk_algo), ki->curve);
}

/* Secrets every local user may read: said on each load (the daemon loads
 * them all the same, as gpg does; ssh refuses such a key). */
static void warn_open_secret(const char *what, const char *path, const struct stat *st)
{
	if (st->st_mode & (S_IROTH | S_IWOTH))
		pd_log_warn("SYS", "%s %s is open to other users (mode %04o): anyone on this host can read or "
		            "change its secrets; chmod o-rwx %s", what, path, (unsigned)(st->st_mode & 07777), path);
}

/* Which passphrase unlocks key file path (st its inode): *ret_path is
 * the file to read, NULL for passphrase-file (or none).  A passphrase
 * file open to other users is named (warn_open_secret). */
static int pass_source(struct load *L, const char *path, const struct stat *st, char **ret_path)
{
	struct stat ps;
	char *p;

	*ret_path = NULL;
	for (size_t i = 0; i < L->nmaps; i++)
		if (same(&L->maps[i].key, st)) {
			L->maps[i].used = true;
			if (stat(L->maps[i].passfile, &ps) == 0)
				warn_open_secret("passphrase file", L->maps[i].passfile, &ps);
			return (*ret_path = strdup(L->maps[i].passfile)) ? 0 : -ENOMEM;
		}
	if (asprintf(&p, "%s%s", path, PASS_SUFFIX) < 0)
		return -ENOMEM;
	if (stat(p, &ps) == 0) {
		warn_open_secret("passphrase file", p, &ps);
		*ret_path = p;
		return 0;
	}
	int r = errno == ENOENT ? 0 : -errno;
	if (r < 0)
		fail(L, r, "passphrase file %s: %s", p, strerror(-r));
	free(p);
	return r;
}

/* Step 1, in file order: which passphrase unlocks path. */
static int prepare_file(struct load *L, struct job *j)
{
	struct stat st;
	int r;

	if (stat(j->path, &st) < 0) {
		r = -errno;
		return fail(L, r, "key file %s: %s", j->path, strerror(-r));
	}
	warn_open_secret("key file", j->path, &st);
	return pass_source(L, j->path, &st, &j->passpath);
}

/* Step 2, on any thread: touches j only (and reads L's constants). */
static void unlock_file(const struct load *L, enum pd_rsa_backend be, struct job *j)
{
	uint8_t *data = NULL, *own = NULL;
	size_t len = 0, ownlen = 0;
	const char *pass = (const char *)L->gpass;
	size_t passlen = L->gpass_len;
	int r;

	if (j->passpath) {
		r = read_secure(j->passpath, MAX_PASS, &own, &ownlen);
		if (r < 0) {
			j->stage = J_FAIL;
			j->r = r;
			snprintf(j->detail, sizeof(j->detail), "passphrase file %s (for %s): %s", j->passpath, j->path,
			         r == -EFBIG ? "too large" : strerror(-r));
			return;
		}
		j->pass_read = true;
		pass = (const char *)own;
		passlen = first_line(own, ownlen);
	}
	r = read_secure(j->path, MAX_KEYFILE, &data, &len);
	if (r < 0) {
		j->stage = J_FAIL;
		j->r = r;
		if (r == -EISDIR)
			snprintf(j->detail, sizeof(j->detail),
			         "key file %s is a directory (use --keydir %s to load every file in it)", j->path, j->path);
		else
			snprintf(j->detail, sizeof(j->detail), "key file %s: %s", j->path, strerror(-r));
		goto out;
	}
	j->key_read = true;
	j->stage = J_ADD;
	j->r = injected() ? -ENOMEM : pd_keyring_new(&j->kr, be);
	if (j->r == 0) /* the ECDH backend of the ring it is merged into */
		j->r = pd_keyring_set_ecdh_backend(j->kr, pd_keyring_ecdh_backend(L->ks->kr));
	if (j->r == 0 && L->workers)
		j->r = pd_keyring_set_workers(j->kr, L->workers);
	j->ring_nomem = j->r == -ENOMEM; /* a calloc: none of it is secure memory */
	if (j->r == 0)
		j->r = pd_keyring_add_report(j->kr, data, len, pass, passlen, on_skip, j, j->detail, sizeof(j->detail));
out:
	free_secure(data, len);
	free_secure(own, ownlen);
}

static void size_text(char *out, size_t cap, uint64_t n)
{
	if (n % (1u << 20) == 0)
		snprintf(out, cap, "%lluM", (unsigned long long)(n >> 20));
	else if (n % 1024 == 0)
		snprintf(out, cap, "%lluK", (unsigned long long)(n >> 10));
	else
		snprintf(out, cap, "%llu", (unsigned long long)n);
}

/* What secmem-size holds two sets of this load's files (a reload loads the
 * new beside the old) and a margin, when filled bytes of it held done key
 * files; rounded up to a MiB, and more than the size now. */
static uint64_t secmem_want(const struct load *L, uint64_t filled, size_t done)
{
	uint64_t want = filled * 2 * L->nfiles_total / (done ? done : 1) * 5 / 4;

	want = (want + (1u << 20) - 1) & ~(uint64_t)((1u << 20) - 1);
	if (want <= pd_secmem_size())
		want = pd_secmem_size() + (1u << 20);
	return want;
}

/* A key that does not fit in secure memory: say which option to set and
 * to what.  The sets alive and the keys this load unlocked so far filled
 * it.  For a secure buffer of the load's own (read_secure), and for the
 * key ring's -ENOMEM, which does not say which heap failed: secure memory
 * is what a load fills (an ordinary allocation known to have failed is
 * fail_heap's). */
static int fail_nomem(struct load *L, const char *path)
{
	size_t size = pd_secmem_size(), done = L->nfiles_done + atomic_load(&live_keyfiles);
	char now[32], need[32];

	size_text(now, sizeof(now), size);
	size_text(need, sizeof(need), secmem_want(L, size, done));
	return fail(L, -ENOMEM,
	            "key file %s: out of secure memory: the %s of secmem-size are full after %zu of %zu key files; "
	            "set secmem-size = %s in the configuration (or --secmem-size %s) and restart", path, now,
	            L->nfiles_done, L->nfiles_total, need, need);
}

/* An ordinary allocation (malloc) that failed: not secure memory, whose
 * sentence would send the operator to a secmem-size that does not help. */
static int fail_heap(struct load *L, const char *path, const char *what)
{
	return fail(L, -ENOMEM,
	            "key file %s: out of memory (the process's ordinary memory, not secure memory: secmem-size is "
	            "not the cause) while %s", path, what);
}

/* After a load: libgcrypt does not fail an MPI (the libgcrypt backends'
 * keys) that its locked pool cannot hold, it puts it in unlocked memory
 * (pd_secmem_overflow).  A load during which it made a new such pool, or
 * after which one holds anything, fails like a key that did not fit, so
 * that no key stays in memory that may be swapped out (freeing the set
 * wipes them). */
static int check_overflow(struct load *L, unsigned pools_before)
{
	size_t used;
	unsigned pools = pd_secmem_overflow(&used);
	char now[32], need[32];

	if (pools <= pools_before && !used)
		return 0;
	size_text(now, sizeof(now), pd_secmem_size());
	size_text(need, sizeof(need),
	          secmem_want(L, pd_secmem_size() + used, L->nfiles_total + atomic_load(&live_keyfiles)));
	return fail(L, -ENOMEM,
	            "out of secure memory: the %s of secmem-size overflowed while %zu key files were loaded "
	            "(libgcrypt went on in unlocked memory, %zu bytes of it in use); "
	            "set secmem-size = %s in the configuration (or --secmem-size %s) and restart",
	            now, L->nfiles_total, used, need, need);
}

/* Step 3, in file order: log, report, merge into the set's ring. */
static int finish_file(struct load *L, struct job *j)
{
	struct pd_keyset *ks = L->ks;
	const char *path = j->path;
	char src[PATH_MAX + 32] = "";
	size_t before = pd_keyring_count(ks->kr);
	unsigned n_warned = 0;
	int r = j->r;

	if (j->passpath)
		snprintf(src, sizeof(src), " (passphrase %s)", j->passpath);
	else if (L->c->passphrase_file)
		snprintf(src, sizeof(src), " (passphrase %s)", L->c->passphrase_file);
	/* The directory's files are distinct, and none is a --key file
	 * (list_dir): no need to look for them among those read already,
	 * which made a load of N files N^2/2 string comparisons. */
	if ((j->pass_read && read_file_noted(L, j->passpath) < 0) ||
	    (j->key_read && (L->in_dir ? strv_push(&L->ks->files, &L->ks->nfiles, path) : read_file_noted(L, path)) < 0))
		return fail(L, -ENOMEM, "out of memory");
	if (j->stage == J_FAIL) /* a file not read; -ENOMEM: no secure buffer for it or its passphrase */
		return r == -ENOMEM ? fail_nomem(L, path)
		                    : fail(L, r, "%s", j->detail);
	if (j->skip_lost) /* its realloc or strdup */
		return fail_heap(L, path, "recording the keys it skips");
	if (j->ring_nomem)
		return fail_heap(L, path, "setting up its key ring");
	for (size_t i = 0; i < j->nskips; i++) {
		const struct skiprec *s = &j->skips[i];
		if (s->kind == PD_KEYSKIP_UNSUPPORTED || s->kind == PD_KEYSKIP_MALFORMED) {
			pd_log_warn("SYS", "%s in %s skipped: %s", s->name, path, s->reason);
			note_skip(L, "%s in %s: %s", s->name, path, s->reason);
			n_warned++;
		} else {
			pd_log_debug("SYS", "%s in %s is not a decryption key: %s", s->name, path, s->reason);
		}
	}
	switch (r) {
	case PD_ENEEDPASS:
		return fail(L, r, "key file %s: %s: put it in %s%s, or set passphrase-file or key-passphrase", path,
		            j->detail, path, PASS_SUFFIX);
	case PD_EBADPASS:
		return fail(L, r, "key file %s: %s%s", path, j->detail, src);
	case PD_ENOSECRET: case PD_EUNSUPPORTED: case PD_EMALFORMED: case PD_ENOTPGP: case PD_ETRUNCATED:
	case PD_ELIMIT:
		/* Nothing of this file is used; the others may be. */
		if (n_warned) {
			pd_log_warn("SYS", "key file %s skipped: no usable secret decryption key", path);
		} else {
			pd_log_warn("SYS", "key file %s skipped: %s", path, j->detail);
			note_skip(L, "key file %s: %s", path, j->detail);
		}
		return 0;
	case -ENOMEM:
		return fail_nomem(L, path);
	default:
		break;
	}
	if (r < 0)
		return fail(L, r, "key file %s: %s%s%s", path, pd_strerror(r), *j->detail ? ": " : "", j->detail);
	if (r > 0) {
		char detail[256];
		r = pd_keyring_merge(ks->kr, j->kr, detail, sizeof(detail));
		if (r < 0)
			return fail(L, r, "key file %s: %s%s%s", path, pd_strerror(r), *detail ? ": " : "", detail);
		j->kr = NULL;
	}
	if (r == 0) {
		pd_log_warn("SYS", "key file %s%s holds no decryption key that is not loaded already", path, src);
		return 0;
	}
	pd_log_info("SYS", "key file %s%s: %d decryption key%s", path, src, r, r == 1 ? "" : "s");
	char **nsrc = realloc(ks->src, (before + (size_t)r) * sizeof(*nsrc));
	if (!nsrc)
		return fail(L, -ENOMEM, "out of memory");
	ks->src = nsrc;
	for (size_t i = ks->nsrc; i < before + (size_t)r; i++)
		ks->src[i] = NULL;
	ks->nsrc = before + (size_t)r;
	for (size_t i = before; i < before + (size_t)r; i++) {
		struct pd_keyinfo ki;
		char fpr[65], what[48];
		if (pd_keyring_info(ks->kr, i, &ki) < 0)
			continue;
		ks->src[i] = strdup(path);
		hex(fpr, ki.fpr, ki.fpr_len <= 32 ? ki.fpr_len : 32);
		describe(&ki, what, sizeof(what));
		pd_log_info("SYS", "loaded key %s (%s) from %s", fpr, what, path);
	}
	return 0;
}

/* The unlock step of the jobs from next on, on nthreads threads (this one
 * too): each takes the next job not taken.  A job past one that failed is
 * not started: the load fails there anyway.  Nor is one taken once the
 * keys unlocked pass the ring's cap (keys, the set's so far and this
 * round's, counted together): a directory of many files of many keys fails
 * with about the cap's worth unlocked, not all of them.  The count is of
 * the keys each file's own ring took, and a key another file holds too is
 * merged once, so the cap passed here need not fail the merge: the finish
 * step, in file order, starts another round at the first job not unlocked
 * (see add_files).  Whatever stopped, the jobs unlocked are those from the
 * round's first to the last taken, all of them: a job is taken only after
 * the checks, and a job taken is unlocked. */
struct unlock_all {
	const struct load *L;
	enum pd_rsa_backend be;
	struct job *jobs;
	size_t n;
	size_t cap;              /* pd_keyring_max_keys() */
	atomic_size_t next;
	atomic_size_t failed_at;
	atomic_size_t keys;      /* the set's keys and the keys unlocked this round */
};

/* Set once the daemon stops: a reload then unlocks nothing more. */
static atomic_bool load_cancelled;

static atomic_size_t files_unlocked; /* pd__keyset_files_unlocked */

size_t pd__keyset_files_unlocked(void) { return atomic_exchange(&files_unlocked, 0); }

void pd_keyset_load_cancel(void) { atomic_store(&load_cancelled, true); }

static void *unlock_thread(void *arg)
{
	struct unlock_all *u = arg;
	for (;;) {
		if (atomic_load(&load_cancelled) || atomic_load(&u->keys) > u->cap)
			return NULL;
		size_t i = atomic_fetch_add(&u->next, 1);
		if (i >= u->n || i > atomic_load(&u->failed_at))
			return NULL;
		struct job *j = &u->jobs[i];
		if (j->unlocked)
			continue; /* prepare failed (or an earlier round unlocked it) */
		j->unlocked = true;
		unlock_file(u->L, u->be, j);
		atomic_fetch_add_explicit(&files_unlocked, 1, memory_order_relaxed);
		if (j->stage == J_ADD && j->r > 0)
			atomic_fetch_add(&u->keys, (size_t)j->r);
		if (j->stage == J_FAIL || j->r == -ENOMEM || j->r == PD_ENEEDPASS || j->r == PD_EBADPASS ||
		    (j->r < 0 && j->r != PD_ENOSECRET && j->r != PD_EUNSUPPORTED && j->r != PD_EMALFORMED &&
		     j->r != PD_ENOTPGP && j->r != PD_ETRUNCATED && j->r != PD_ELIMIT)) {
			size_t f = atomic_load(&u->failed_at);
			while (i < f && !atomic_compare_exchange_weak(&u->failed_at, &f, i))
				;
		}
	}
}

static unsigned load_threads(const struct pd_config *c, size_t njobs)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned n = c->workers ? c->workers : cpus > 0 ? (unsigned)cpus : 1;
	if (n > PD_MAX_WORKERS)
		n = PD_MAX_WORKERS;
	return njobs < n ? (unsigned)(njobs ? njobs : 1) : n;
}

/* Step 2 for the jobs from u->next on, on as many threads as the load has
 * (each stopped as unlock_thread says). */
static void unlock_round(struct unlock_all *u)
{
	unsigned nt = load_threads(u->L->c, u->n - atomic_load(&u->next));
	pthread_t *th = calloc(nt, sizeof(*th));
	unsigned started = 0;
	for (unsigned t = 1; th && t < nt; t++, started++)
		if (pthread_create(&th[t], NULL, unlock_thread, u) != 0)
			break;
	unlock_thread(u);
	for (unsigned t = 1; t <= started; t++)
		pthread_join(th[t], NULL);
	free(th);
}

/* Load files[0..n) in order (see "One key file" above). */
static int add_files(struct load *L, enum pd_rsa_backend be, char **files, size_t n)
{
	struct job *jobs = calloc(n ? n : 1, sizeof(*jobs));
	struct unlock_all u = { .L = L, .be = be, .jobs = jobs, .n = n, .cap = pd_keyring_max_keys() };
	char *err = L->err;
	size_t errlen = L->errlen;
	int r = 0;

	if (!jobs)
		return fail(L, -ENOMEM, "out of memory");
	atomic_init(&u.next, 0);
	atomic_init(&u.failed_at, SIZE_MAX);
	atomic_init(&u.keys, 0);
	/* 1: prepare, in order; a failure is kept in its job (the load stops
	 * at the first failing file, whichever step failed). */
	for (size_t i = 0; i < n; i++) {
		jobs[i].path = files[i];
		L->err = jobs[i].detail;
		L->errlen = sizeof(jobs[i].detail);
		jobs[i].r = prepare_file(L, &jobs[i]);
		if (jobs[i].r < 0) {
			jobs[i].stage = J_FAIL;
			jobs[i].unlocked = true;
			if (atomic_load(&u.failed_at) == SIZE_MAX)
				atomic_store(&u.failed_at, i);
			break;
		}
	}
	L->err = err;
	L->errlen = errlen;
	/* 2: unlock, in parallel, and 3: finish, in order, up to the first
	 * job the unlock left (the cap's stop), then again from there: the
	 * finish step sees every job as a one-by-one load would, so the set,
	 * the messages and the first error are the same whatever stopped the
	 * threads.  A second round comes only when keys repeated across files
	 * made the count pass the cap while the set did not. */
	size_t done = 0;
	while (r == 0 && done < n) {
		size_t first = done;
		atomic_store(&u.next, done);
		atomic_store(&u.keys, pd_keyring_count(L->ks->kr));
		unlock_round(&u);
		if (atomic_load(&load_cancelled)) {
			r = fail(L, -ECANCELED, "the daemon is stopping");
			break;
		}
		for (; done < n && r == 0; done++, L->nfiles_done++) {
			struct job *j = &jobs[done];
			if (!j->unlocked) {
				if (done > first)
					break; /* the next round's */
				/* none taken: the set alone passes the cap, which a
				 * merge never lets it; unlock it here all the same */
				j->unlocked = true;
				unlock_file(L, be, j);
				atomic_fetch_add_explicit(&files_unlocked, 1, memory_order_relaxed);
			}
			r = finish_file(L, j);
			job_clear(j); /* its ring was merged, or the load fails */
		}
	}
	for (size_t i = 0; i < n; i++)
		job_clear(&jobs[i]);
	free(jobs);
	return r;
}

static int build_listing(struct pd_keyset *ks)
{
	size_t per = 64 + 64 + 64 + 32;
	size_t cap = ks->count * per + 1;
	char *s = malloc(cap), *p = s;

	if (!s)
		return -ENOMEM;
	size_t alen = 0;
	for (size_t i = 0; i < ks->count; i++)
		alen += pd_keyring_addresses(ks->kr, i, NULL);
	ks->infos = calloc(1, sizeof(*ks->infos) + ks->count * sizeof(ks->infos->v[0]));
	if (!ks->infos || !(ks->infos->aoff = malloc((ks->count + 1) * sizeof(size_t))) ||
	    !(ks->infos->abuf = malloc(alen ? alen : 1))) {
		free(s);
		if (ks->infos) {
			free(ks->infos->aoff);
			free(ks->infos);
			ks->infos = NULL;
		}
		return -ENOMEM;
	}
	atomic_init(&ks->infos->n_ref, 1);
	ks->infos->n = 0;
	ks->infos->aoff[0] = 0;
	bool full = false;
	*p = 0;
	for (size_t i = 0; i < ks->count; i++) {
		struct pd_keyinfo ki;
		char fpr[65], pfpr[65];
		if (pd_keyring_info(ks->kr, i, &ki) < 0)
			continue;
		const char *a;
		size_t al = pd_keyring_addresses(ks->kr, i, &a), at = ks->infos->aoff[ks->infos->n];
		memcpy(ks->infos->abuf + at, a, al);
		ks->infos->v[ks->infos->n++] = ki;
		ks->infos->aoff[ks->infos->n] = at + al;
		hex(fpr, ki.fpr, ki.fpr_len <= 32 ? ki.fpr_len : 32);
		hex(pfpr, ki.primary_fpr, ki.primary_fpr_len <= 32 ? ki.primary_fpr_len : 32);
		if (full)
			continue; /* the text stopped; KEYS (infos) still lists every key */
		int n = snprintf(p, cap - (size_t)(p - s), "%s %s %u %s\n", fpr,
		                 ki.curve[0] ? ki.curve : pd_pk_name(ki.pk_algo), ki.bits, pfpr);
		if (n < 0 || (size_t)n >= cap - (size_t)(p - s)) {
			*p = 0;
			full = true;
			continue;
		}
		p += n;
	}
	ks->listing = s;
	return 0;
}

/* The backends the config names ("default": $PD_RSA_BACKEND or
 * $PD_ECDH_BACKEND, else the build's: resolved by pd_keyring_new). */
static void backends(const struct pd_config *c, enum pd_rsa_backend *ret_rsa, enum pd_ecdh_backend *ret_ecdh)
{
	*ret_rsa = PD_RSA_DEFAULT;
	if (c->rsa_backend && !strcmp(c->rsa_backend, "openssl"))
		*ret_rsa = PD_RSA_OPENSSL;
	else if (c->rsa_backend && !strcmp(c->rsa_backend, "gcrypt"))
		*ret_rsa = PD_RSA_GCRYPT;
	*ret_ecdh = PD_ECDH_DEFAULT;
	if (c->ecdh_backend && !strcmp(c->ecdh_backend, "openssl"))
		*ret_ecdh = PD_ECDH_OPENSSL;
	else if (c->ecdh_backend && !strcmp(c->ecdh_backend, "gcrypt"))
		*ret_ecdh = PD_ECDH_GCRYPT;
}

static int load(struct load *L)
{
	const struct pd_config *c = L->c;
	enum pd_rsa_backend be;
	enum pd_ecdh_backend ecdh_be;
	char **files = NULL;
	size_t nfiles = 0;
	int r;

	backends(c, &be, &ecdh_be);
	if ((r = parse_maps(L)) < 0)
		return r;
	const char *others[] = { c->passphrase_file, c->tls_key, c->tls_cert, c->tls_ca };
	for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++)
		if (add_ident(&L->other, &L->nother, others[i]) < 0)
			return fail(L, -ENOMEM, "out of memory");
	for (size_t i = 0; i < c->keys.n; i++) /* loaded as --key already */
		if (add_ident(&L->other, &L->nother, c->keys.v[i]) < 0)
			return fail(L, -ENOMEM, "out of memory");
	if (c->passphrase_file) {
		r = read_secure(c->passphrase_file, MAX_PASS, &L->gpass, &L->gpass_filelen);
		if (r < 0)
			return fail(L, r, "passphrase file %s: %s", c->passphrase_file,
			            r == -EFBIG ? "too large" : strerror(-r));
		L->gpass_len = first_line(L->gpass, L->gpass_filelen);
		struct stat ps;
		if (stat(c->passphrase_file, &ps) == 0)
			warn_open_secret("passphrase file", c->passphrase_file, &ps);
		if (read_file_noted(L, c->passphrase_file) < 0)
			return fail(L, -ENOMEM, "out of memory");
	}
	r = pd_keyring_new(&L->ks->kr, be);
	if (r == 0)
		r = pd_keyring_set_ecdh_backend(L->ks->kr, ecdh_be);
	if (r == 0 && L->workers)
		r = pd_keyring_set_workers(L->ks->kr, L->workers);
	if (r < 0)
		return fail(L, r, "key ring: %s", pd_strerror(r));
	if (c->keydir) {
		r = list_dir(L, c->keydir, &files, &nfiles);
		if (r < 0)
			return fail(L, r, "key directory %s: %s", c->keydir,
			            r == -E2BIG ? "more than 100000 key files" : strerror(-r));
		struct stat dst;
		if (stat(c->keydir, &dst) == 0 && (dst.st_mode & (S_IWGRP | S_IWOTH)))
			pd_log_warn("SYS", "key directory %s is writable by %s (mode %04o): whoever can write there adds "
			            "or replaces the keys this daemon loads; chmod go-w %s", c->keydir,
			            dst.st_mode & S_IWOTH ? "every user" : "its group", (unsigned)(dst.st_mode & 07777),
			            c->keydir);
	}
	L->nfiles_total = c->keys.n + nfiles;
	/* --key files first, then the directory's: its listing errors come
	 * after theirs, as they always did */
	r = add_files(L, be, c->keys.v, c->keys.n);
	if (r == 0 && c->keydir) {
		warn_orphans(c->keydir);
		L->in_dir = true;
		r = add_files(L, be, files, nfiles);
	}
	strv_free(files, nfiles);
	if (r < 0)
		return r;
	for (size_t i = 0; i < L->nmaps; i++)
		if (!L->maps[i].used)
			return fail(L, -EINVAL, "key-passphrase %s: not a key file of key or keydir", L->maps[i].keyname);
	if (c->strict_keys && L->n_skipped) {
		char more[64] = "";
		if (L->n_skipped > 1)
			snprintf(more, sizeof(more), " and %u more", L->n_skipped - 1);
		return fail(L, PD_EUNSUPPORTED, "strict-keys: %s%s (remove the key or set strict-keys = no)",
		            L->first_skip, more);
	}
	L->ks->count = pd_keyring_count(L->ks->kr);
	if (!L->ks->count) {
		if (L->n_skipped)
			return fail(L, PD_ENOSECRET, "no usable decryption key was loaded: %s%s", L->first_skip,
			            L->n_skipped > 1 ? " (and more, see the warnings above)" : "");
		return fail(L, PD_ENOSECRET, "no usable decryption key was loaded%s%s",
		            c->keydir && !c->keys.n ? ": no key file in " : "", c->keydir && !c->keys.n ? c->keydir : "");
	}
	if (build_listing(L->ks) < 0)
		return fail(L, -ENOMEM, "out of memory");
	return 0;
}

size_t pd_keyset_secmem_auto(const struct pd_config *c, uint64_t *ret_bytes, size_t *ret_files, unsigned *ret_times)
{
	struct load L = { .c = c };
	char **files = NULL;
	size_t nfiles = 0;
	uint64_t bytes = 0, want;
	struct stat st;

	for (size_t i = 0; i < c->keys.n; i++)
		if (stat(c->keys.v[i], &st) == 0 && S_ISREG(st.st_mode))
			bytes += (uint64_t)st.st_size;
	if (c->keydir && list_dir(&L, c->keydir, &files, &nfiles) == 0)
		for (size_t i = 0; i < nfiles; i++)
			if (stat(files[i], &st) == 0 && st.st_size <= MAX_KEYFILE)
				bytes += (uint64_t)st.st_size;
	strv_free(files, nfiles);
	*ret_bytes = bytes;
	*ret_files = c->keys.n + nfiles;
	/* A set of keys takes up to ~0.8 times its files' bytes in libgcrypt's
	 * pool with the OpenSSL backends (their secrets are in OpenSSL's
	 * heap), ~1.35 times with a libgcrypt backend, and a reload holds two
	 * sets: twice the files, or three times. */
	enum pd_rsa_backend be;
	enum pd_ecdh_backend ecdh_be;
	struct pd_keyring *kr = NULL;
	*ret_times = 2;
	backends(c, &be, &ecdh_be);
	if (pd_keyring_new(&kr, be) == 0 && pd_keyring_set_ecdh_backend(kr, ecdh_be) == 0 &&
	    (pd_keyring_backend(kr) == PD_RSA_GCRYPT || pd_keyring_ecdh_backend(kr) == PD_ECDH_GCRYPT))
		*ret_times = 3;
	pd_keyring_free(kr);
	want = *ret_times * bytes + (1u << 20);
	want = (want + (1u << 20) - 1) & ~(uint64_t)((1u << 20) - 1);
	if (want < SECMEM_MIN)
		want = SECMEM_MIN;
	if (want > SIZE_MAX / 4)
		want = SIZE_MAX / 4;
	return (size_t)want;
}

int pd_keyset_load(struct pd_keyset **ret, const struct pd_config *c, unsigned workers, char *err, size_t errlen)
{
	struct load L = { .c = c, .workers = workers, .err = err, .errlen = errlen };
	int r;

	L.ks = calloc(1, sizeof(*L.ks));
	if (!L.ks) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	atomic_init(&L.ks->n_ref, 1);
	size_t spilled;
	unsigned pools = pd_secmem_overflow(&spilled);
	r = load(&L);
	if (r == 0)
		r = check_overflow(&L, pools);
	free_secure(L.gpass, L.gpass_filelen);
	for (size_t i = 0; i < L.nmaps; i++)
		free(L.maps[i].passfile);
	free(L.maps);
	free(L.other);
	if (r < 0) {
		keyset_free(L.ks); /* here: a load blocks anyway, and pd_lib_deinit may follow */
		return r;
	}
	L.ks->nkeyfiles = L.nfiles_total;
	atomic_fetch_add(&live_keyfiles, L.ks->nkeyfiles);
	*ret = L.ks;
	return 0;
}

void pd_keyset_secmem_watch(void)
{
	static unsigned seen;
	unsigned n = pd_secmem_overflow_warnings();
	char now[32];

	if (n == seen)
		return;
	seen = n;
	size_text(now, sizeof(now), pd_secmem_size());
	pd_log_err("SYS", "out of secure memory: the %s of secmem-size are full and libgcrypt went on in unlocked "
	           "memory, which may be swapped out (pgpdecd_secmem_unlocked_bytes); raise secmem-size and restart",
	           now);
}

struct pd_keyset *pd_keyset_ref(struct pd_keyset *ks)
{
	atomic_fetch_add_explicit(&ks->n_ref, 1, memory_order_relaxed);
	return ks;
}

static void keyset_free(struct pd_keyset *ks)
{
	atomic_fetch_sub(&live_keyfiles, ks->nkeyfiles); /* 0 for a failed load's */
	for (size_t i = 0; i < ks->nsrc; i++)
		free(ks->src[i]);
	free(ks->src);
	pd_keyring_free(ks->kr);
	strv_free(ks->files, ks->nfiles);
	free(ks->listing);
	pd_keyinfos_unref(ks->infos);
	free(ks);
}

/* The last reference to a set is mostly dropped on the loop thread (the
 * reload's swap, or the last request that used the old set), and freeing
 * a large set is slow: 10,000 keys took 117-268 ms there (every RSA and
 * ECDH key's OpenSSL objects and libgcrypt MPIs, each wiped), a stall of
 * every connection.  So a set is freed on a short-lived thread of its own,
 * like the reload's.  The threads are joined, never detached, so that
 * none is still running (its thread-exit handlers: OpenSSL's per-thread
 * state, which freeing OpenSSL keys creates) when main tears the libraries
 * down at exit; a detached one that had said "freed" could be.  Finished
 * ones are joined when the next set is handed over, all of them in
 * pd_keyset_wait_freed() at exit. */
struct reaper {
	pthread_t t;
	struct pd_keyset *ks;
	bool done;            /* (reap_lock) the set is freed; the thread is returning */
	struct reaper *next;  /* (reap_lock) */
};
static pthread_mutex_t reap_lock = PTHREAD_MUTEX_INITIALIZER;
/* One malloc_trim at a time.  Under AddressSanitizer glibc's allocator is
 * never set up (ASan's malloc replaces it, its mallopt does nothing), so
 * the first malloc_trim sets it up, without a lock: two reapers trimming
 * at once (the reload's old set and, at SIGTERM, the last one) crashed in
 * glibc's mtrim (SIGSEGV) or failed its arena assertion (SIGABRT). */
static pthread_mutex_t trim_lock = PTHREAD_MUTEX_INITIALIZER;
static struct reaper *reapers; /* started and not joined yet (reap_lock) */

static double ms_between(const struct timespec *a, const struct timespec *b)
{
	return (double)(b->tv_sec - a->tv_sec) * 1e3 + (double)(b->tv_nsec - a->tv_nsec) / 1e6;
}

static void *reap_thread(void *arg)
{
	struct reaper *rp = arg;
	struct pd_keyset *ks = rp->ks;
	size_t n = ks->count;
	struct timespec t0, t1, t2;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	keyset_free(ks);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	/* The load's threads allocated the set in malloc arenas of their own,
	 * and a later load's threads take the arenas last released, so the
	 * pages of the freed set stayed resident (a 10,000-key daemon went
	 * from 189 MiB to 470 MiB over two reloads): hand them back. */
	pthread_mutex_lock(&trim_lock);
	malloc_trim(0);
	pthread_mutex_unlock(&trim_lock);
	clock_gettime(CLOCK_MONOTONIC, &t2);
	pd_log_debug("SYS", "old key set of %zu keys freed in %.1f ms, memory trimmed in %.1f ms", n,
	             ms_between(&t0, &t1), ms_between(&t1, &t2));
	pthread_mutex_lock(&reap_lock);
	rp->done = true;
	pthread_mutex_unlock(&reap_lock);
	return NULL;
}

/* Join the reapers that are done (all: every one, waiting for each). */
static void join_reapers(bool all)
{
	struct reaper *mine = NULL;
	pthread_mutex_lock(&reap_lock);
	for (struct reaper **pp = &reapers; *pp;) {
		struct reaper *rp = *pp;
		if (all || rp->done) {
			*pp = rp->next;
			rp->next = mine;
			mine = rp;
		} else {
			pp = &rp->next;
		}
	}
	pthread_mutex_unlock(&reap_lock);
	while (mine) {
		struct reaper *rp = mine;
		mine = rp->next;
		pthread_join(rp->t, NULL);
		free(rp);
	}
}

struct pd_keyset *pd_keyset_unref(struct pd_keyset *ks)
{
	if (!ks || atomic_fetch_sub_explicit(&ks->n_ref, 1, memory_order_acq_rel) != 1)
		return NULL;
	join_reapers(false);
	struct reaper *rp = calloc(1, sizeof(*rp));
	int r = ENOMEM;
	if (rp) {
		sigset_t old;
		rp->ks = ks;
		pd_block_async_signals(&old); /* signals stay the loop's */
		pthread_mutex_lock(&reap_lock); /* linked before it can say done */
		r = pthread_create(&rp->t, NULL, reap_thread, rp);
		if (r == 0) {
			rp->next = reapers;
			reapers = rp;
		}
		pthread_mutex_unlock(&reap_lock);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		if (r == 0)
			return NULL;
		free(rp);
	}
	/* No thread to be had: free it here, slow as it is, rather than keep it. */
	pd_log_warn("SYS", "freeing %zu keys on this thread: cannot start a thread: %s", ks->count, strerror(r));
	keyset_free(ks);
	return NULL;
}

void pd_keyset_wait_freed(void)
{
	join_reapers(true);
}

const struct pd_keyring *pd_keyset_ring(const struct pd_keyset *ks) { return ks->kr; }
size_t pd_keyset_count(const struct pd_keyset *ks) { return ks->count; }
const char *pd_keyset_listing(const struct pd_keyset *ks) { return ks->listing; }

struct pd_keyinfos *pd_keyset_infos(const struct pd_keyset *ks)
{
	atomic_fetch_add_explicit(&ks->infos->n_ref, 1, memory_order_relaxed);
	return ks->infos;
}

const struct pd_keyinfo *pd_keyinfos_get(const struct pd_keyinfos *ki, size_t *ret_n)
{
	*ret_n = ki->n;
	return ki->v;
}

size_t pd_keyinfos_addresses(const struct pd_keyinfos *ki, size_t i, const char **ret)
{
	*ret = ki->abuf + ki->aoff[i];
	return ki->aoff[i + 1] - ki->aoff[i];
}

struct pd_keyinfos *pd_keyinfos_unref(struct pd_keyinfos *ki)
{
	if (ki && atomic_fetch_sub_explicit(&ki->n_ref, 1, memory_order_acq_rel) == 1) {
		free(ki->abuf);
		free(ki->aoff);
		free(ki);
	}
	return NULL;
}

const char *const *pd_keyset_files(const struct pd_keyset *ks, size_t *ret_n)
{
	*ret_n = ks->nfiles;
	return (const char *const *)ks->files;
}

/* ------------------------------------------------------------------ */
/* What a reload changed */

struct fprent {
	uint8_t len;
	uint8_t fpr[32];
	size_t idx;
};

static int cmp_fpr(const void *a, const void *b)
{
	const struct fprent *x = a, *y = b;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return memcmp(x->fpr, y->fpr, x->len);
}

/* The keys of ks sorted by fingerprint (NULL on allocation failure). */
static struct fprent *sorted(const struct pd_keyset *ks)
{
	struct fprent *v = calloc(ks->count ? ks->count : 1, sizeof(*v));
	if (!v)
		return NULL;
	for (size_t i = 0; i < ks->count; i++) {
		struct pd_keyinfo ki;
		if (pd_keyring_info(ks->kr, i, &ki) == 0) {
			v[i].len = ki.fpr_len <= 32 ? ki.fpr_len : 32;
			memcpy(v[i].fpr, ki.fpr, v[i].len);
		}
		v[i].idx = i;
	}
	qsort(v, ks->count, sizeof(*v), cmp_fpr);
	return v;
}

static void log_key(const struct pd_keyset *ks, const struct fprent *e, const char *what)
{
	struct pd_keyinfo ki;
	char fpr[65], desc[48] = "";
	hex(fpr, e->fpr, e->len);
	if (pd_keyring_info(ks->kr, e->idx, &ki) == 0)
		describe(&ki, desc, sizeof(desc));
	pd_log_info("SYS", "reload: key %s %s (%s, %s)", fpr, what, desc,
	            e->idx < ks->nsrc && ks->src[e->idx] ? ks->src[e->idx] : "?");
}

void pd_keyset_log_changes(const struct pd_keyset *old, const struct pd_keyset *new)
{
	struct fprent *a = sorted(old), *b = sorted(new);
	size_t i = 0, j = 0, changed = 0;

	if (!a || !b) {
		free(a);
		free(b);
		return;
	}
	/* a merge of the two sorted lists */
	while (i < old->count || j < new->count) {
		int c = i == old->count ? 1 : j == new->count ? -1 : cmp_fpr(&a[i], &b[j]);
		if (c < 0) {
			log_key(old, &a[i++], "removed");
			changed++;
		} else if (c > 0) {
			log_key(new, &b[j++], "added");
			changed++;
		} else {
			i++;
			j++;
		}
	}
	if (!changed)
		pd_log_info("SYS", "reload: keys unchanged (%zu decryption key%s)", new->count,
		            new->count == 1 ? "" : "s");
	free(a);
	free(b);
}
