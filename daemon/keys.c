/* SPDX-License-Identifier: MIT */
/* Key files -> an immutable, refcounted pd_keyring snapshot (see keys.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <gcrypt.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "keys.h"
#include "log.h"
#include "pgpdec.h"

#define MAX_KEYFILE (1u << 20) /* a transferable secret key is a few KiB */
#define MAX_PASS 4096

struct pd_keyset {
	atomic_uint n_ref;
	struct pd_keyring *kr;
	size_t count;
	char *listing;
};

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

/* Files the configuration names for other purposes: a key directory may be
 * systemd's credentials directory, which also holds the passphrase and the
 * TLS files. */
static bool is_other_file(const struct pd_config *c, const struct stat *st)
{
	const char *other[] = { c->passphrase_file, c->tls_key, c->tls_cert, c->tls_ca };
	for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
		struct stat o;
		if (other[i] && stat(other[i], &o) == 0 && o.st_dev == st->st_dev && o.st_ino == st->st_ino)
			return true;
	}
	return false;
}

/* Regular files of dir, sorted; hidden files, editor backups and the
 * configuration's other files (is_other_file) skipped. */
static int list_dir(const struct pd_config *c, const char *dir, char ***ret, size_t *ret_n)
{
	DIR *d = opendir(dir);
	char **v = NULL;
	size_t n = 0;
	struct dirent *e;

	if (!d)
		return -errno;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (e->d_name[0] == '.' || (l && e->d_name[l - 1] == '~'))
			continue;
		char *p;
		if (asprintf(&p, "%s/%s", dir, e->d_name) < 0)
			goto nomem;
		struct stat st;
		if (stat(p, &st) < 0 || !S_ISREG(st.st_mode) || is_other_file(c, &st)) {
			free(p);
			continue;
		}
		char **nv = n < 10000 ? realloc(v, (n + 1) * sizeof(*v)) : NULL;
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
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
	return -ENOMEM;
}

static int add_file(struct pd_keyring *kr, const char *path, const char *pass, size_t passlen,
                    char *err, size_t errlen)
{
	uint8_t *data = NULL;
	size_t len = 0;
	char detail[256] = "";
	int r = read_secure(path, MAX_KEYFILE, &data, &len);

	if (r == -EISDIR) {
		snprintf(err, errlen, "key file %s is a directory (use --keydir %s to load every file in it)", path, path);
		return r;
	}
	if (r < 0) {
		snprintf(err, errlen, "key file %s: %s", path, strerror(-r));
		return r;
	}
	r = pd_keyring_add(kr, data, len, pass, passlen, detail, sizeof(detail));
	free_secure(data, len);
	if (r < 0) {
		snprintf(err, errlen, "key file %s: %s%s%s", path, pd_strerror(r), *detail ? ": " : "", detail);
		return r;
	}
	if (r == 0)
		pd_log_warn("SYS", "key file %s holds no decryption-capable secret key", path);
	else
		pd_log_info("SYS", "key file %s: %d decryption key%s", path, r, r == 1 ? "" : "s");
	return 0;
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

static int build_listing(struct pd_keyset *ks)
{
	size_t per = 64 + 64 + 64 + 32;
	size_t cap = ks->count * per + 1;
	char *s = malloc(cap), *p = s;

	if (!s)
		return -ENOMEM;
	*p = 0;
	for (size_t i = 0; i < ks->count; i++) {
		struct pd_keyinfo ki;
		char fpr[65], pfpr[65];
		if (pd_keyring_info(ks->kr, i, &ki) < 0)
			continue;
		hex(fpr, ki.fpr, ki.fpr_len <= 32 ? ki.fpr_len : 32);
		hex(pfpr, ki.primary_fpr, ki.primary_fpr_len <= 32 ? ki.primary_fpr_len : 32);
		int n = snprintf(p, cap - (size_t)(p - s), "%s %s %u %s\n", fpr,
		                 ki.curve[0] ? ki.curve : pd_pk_name(ki.pk_algo), ki.bits, pfpr);
		if (n < 0 || (size_t)n >= cap - (size_t)(p - s))
			break;
		p += n;
	}
	ks->listing = s;
	return 0;
}

int pd_keyset_load(struct pd_keyset **ret, const struct pd_config *c, char *err, size_t errlen)
{
	enum pd_rsa_backend be = PD_RSA_DEFAULT;
	struct pd_keyset *ks = NULL;
	uint8_t *pass = NULL;
	size_t passfile_len = 0, passlen = 0;
	char **files = NULL;
	size_t nfiles = 0;
	int r;

	if (c->rsa_backend && !strcmp(c->rsa_backend, "openssl"))
		be = PD_RSA_OPENSSL;
	else if (c->rsa_backend && !strcmp(c->rsa_backend, "gcrypt"))
		be = PD_RSA_GCRYPT;
	if (c->passphrase_file) {
		r = read_secure(c->passphrase_file, MAX_PASS, &pass, &passfile_len);
		if (r < 0) {
			snprintf(err, errlen, "passphrase file %s: %s", c->passphrase_file,
			         r == -EFBIG ? "too large" : strerror(-r));
			return r;
		}
		/* The passphrase is the first line, without its line end. */
		while (passlen < passfile_len && pass[passlen] != '\n' && pass[passlen] != '\r')
			passlen++;
	}
	r = -ENOMEM;
	ks = calloc(1, sizeof(*ks));
	if (!ks) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	atomic_init(&ks->n_ref, 1);
	r = pd_keyring_new(&ks->kr, be);
	if (r < 0) {
		snprintf(err, errlen, "key ring: %s", pd_strerror(r));
		goto out;
	}
	for (size_t i = 0; i < c->keys.n; i++) {
		r = add_file(ks->kr, c->keys.v[i], (const char *)pass, passlen, err, errlen);
		if (r < 0)
			goto out;
	}
	if (c->keydir) {
		r = list_dir(c, c->keydir, &files, &nfiles);
		if (r < 0) {
			snprintf(err, errlen, "key directory %s: %s", c->keydir, strerror(-r));
			goto out;
		}
		for (size_t i = 0; i < nfiles; i++) {
			r = add_file(ks->kr, files[i], (const char *)pass, passlen, err, errlen);
			if (r < 0)
				goto out;
		}
	}
	ks->count = pd_keyring_count(ks->kr);
	if (!ks->count) {
		r = PD_ENOSECRET;
		snprintf(err, errlen, "no decryption-capable secret key was loaded");
		goto out;
	}
	r = build_listing(ks);
	if (r < 0) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	*ret = ks;
	ks = NULL;
	r = 0;
out:
	free_secure(pass, passfile_len);
	for (size_t i = 0; i < nfiles; i++)
		free(files[i]);
	free(files);
	pd_keyset_unref(ks);
	return r;
}

struct pd_keyset *pd_keyset_ref(struct pd_keyset *ks)
{
	atomic_fetch_add_explicit(&ks->n_ref, 1, memory_order_relaxed);
	return ks;
}

struct pd_keyset *pd_keyset_unref(struct pd_keyset *ks)
{
	if (!ks || atomic_fetch_sub_explicit(&ks->n_ref, 1, memory_order_acq_rel) != 1)
		return NULL;
	pd_keyring_free(ks->kr);
	free(ks->listing);
	free(ks);
	return NULL;
}

const struct pd_keyring *pd_keyset_ring(const struct pd_keyset *ks) { return ks->kr; }
size_t pd_keyset_count(const struct pd_keyset *ks) { return ks->count; }
const char *pd_keyset_listing(const struct pd_keyset *ks) { return ks->listing; }
