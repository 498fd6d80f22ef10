/* SPDX-License-Identifier: MIT */
/* Output files named only at commit: see outfile.h. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "outfile.h"

/* The output files that have a temporary name: what a fatal signal must not
 * leave behind.  Changed only with the fatal signals blocked. */
static struct pd_outfile *volatile named_files;
static void (*volatile also_on_signal)(void);

/* The signals whose default action ends the process and that a program can
 * catch: each removes the temporaries first (SIGKILL cannot be caught; the
 * file-system fallback is for that, O_TMPFILE being the rule). */
static const int fatal_sigs[] = {
	SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGALRM, SIGUSR1, SIGUSR2,
	SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPROF,
};
#define N_FATAL (sizeof(fatal_sigs) / sizeof(fatal_sigs[0]))

static void block_fatal(sigset_t *old)
{
	sigset_t s;
	sigemptyset(&s);
	for (size_t i = 0; i < N_FATAL; i++)
		sigaddset(&s, fatal_sigs[i]);
	sigprocmask(SIG_BLOCK, &s, old);
}

static void unblock(const sigset_t *old)
{
	sigprocmask(SIG_SETMASK, old, NULL);
}

/* With the fatal signals blocked. */
static void named_add(struct pd_outfile *f)
{
	f->next = named_files;
	named_files = f;
	f->tmp_live = 1;
}

static void named_remove(struct pd_outfile *f)
{
	f->tmp_live = 0;
	for (struct pd_outfile *volatile *p = &named_files; *p; p = &(*p)->next)
		if (*p == f) {
			*p = f->next;
			break;
		}
	f->next = NULL;
}

void pd_outfile_remove_all(void)
{
	for (struct pd_outfile *f = named_files; f; f = f->next)
		if (f->tmp_live)
			(void)unlink(f->tmp_path);
}

static void on_fatal_signal(int sig)
{
	pd_outfile_remove_all();
	void (*also)(void) = also_on_signal;
	if (also)
		also();
	signal(sig, SIG_DFL);
	raise(sig); /* delivered as the handler returns: the process dies of it */
}

void pd_outfile_catch_signals(void (*also)(void))
{
	struct sigaction sa = { .sa_handler = on_fatal_signal };
	also_on_signal = also;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < N_FATAL; i++)
		sigaddset(&sa.sa_mask, fatal_sigs[i]);
	for (size_t i = 0; i < N_FATAL; i++) {
		struct sigaction old;
		/* An ignored signal (nohup, a parent's choice) stays ignored;
		 * one with a handler of the program's own keeps it. */
		if (sigaction(fatal_sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL)
			(void)sigaction(fatal_sigs[i], &sa, NULL);
	}
}

/* dir/.base.pgpdecd-XXXXXX with the X's random. */
static int tmp_name(const struct pd_outfile *f, char **ret)
{
	static const char chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
	unsigned char r[6];
	char *p;
	if (asprintf(&p, "%s/.%s.pgpdecd-XXXXXX", f->dir, f->base) < 0)
		return -ENOMEM;
	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
		free(p);
		return -EIO;
	}
	char *x = p + strlen(p) - 6;
	for (size_t i = 0; i < 6; i++)
		x[i] = chars[r[i] % (sizeof(chars) - 1)];
	*ret = p;
	return 0;
}

void pd_outfile_free(struct pd_outfile *f)
{
	free(f->final_path);
	free(f->dir);
	free(f->base);
	free(f->tmp_path);
	f->final_path = f->dir = f->base = f->tmp_path = NULL;
}

/* The unnamed file can be linked through /proc/self/fd (which needs no
 * privilege, unlike AT_EMPTY_PATH). */
static bool linkable(int fd)
{
	char proc[64];
	struct stat st;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	return stat(proc, &st) == 0;
}

int pd_outfile_open(struct pd_outfile *f, const char *final_path)
{
	*f = (struct pd_outfile){ .fd = -1 };
	char *c1 = strdup(final_path), *c2 = strdup(final_path);
	f->final_path = strdup(final_path);
	if (c1 && c2) {
		f->dir = strdup(dirname(c1));
		f->base = strdup(basename(c2));
	}
	free(c1);
	free(c2);
	if (!f->final_path || !f->dir || !f->base) {
		pd_outfile_free(f);
		return -ENOMEM;
	}
	int fd = open(f->dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd >= 0 && linkable(fd)) {
		f->fd = fd;
		f->unnamed = true;
		return 0;
	}
	if (fd >= 0)
		close(fd);
	else if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
		int err = -errno;
		pd_outfile_free(f);
		return err;
	}
	/* No O_TMPFILE here: a temporary name, removed by the signal handler. */
	if (asprintf(&f->tmp_path, "%s/.%s.pgpdecd-XXXXXX", f->dir, f->base) < 0) {
		f->tmp_path = NULL;
		pd_outfile_free(f);
		return -ENOMEM;
	}
	sigset_t old;
	block_fatal(&old); /* no fatal signal between making the file and registering it */
	fd = mkostemp(f->tmp_path, O_CLOEXEC);
	int err = -errno;
	if (fd >= 0)
		named_add(f);
	unblock(&old);
	if (fd < 0) {
		pd_outfile_free(f);
		return err;
	}
	f->fd = fd;
	return 0;
}

int pd_outfile_rewind(struct pd_outfile *f)
{
	return ftruncate(f->fd, 0) < 0 || lseek(f->fd, 0, SEEK_SET) < 0 ? -errno : 0;
}

void pd_outfile_discard(struct pd_outfile *f)
{
	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
	if (f->tmp_live) {
		sigset_t old;
		block_fatal(&old);
		(void)unlink(f->tmp_path);
		named_remove(f);
		unblock(&old);
	}
}

/* Give the unnamed file a temporary name beside the final path (linkat
 * fails with EEXIST onto an existing file; rename replaces it). */
static int link_unnamed(struct pd_outfile *f)
{
	char proc[64];
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", f->fd);
	for (int tries = 0; tries < 100; tries++) {
		free(f->tmp_path);
		f->tmp_path = NULL;
		int r = tmp_name(f, &f->tmp_path);
		if (r < 0)
			return r;
		if (linkat(AT_FDCWD, proc, AT_FDCWD, f->tmp_path, AT_SYMLINK_FOLLOW) == 0) {
			named_add(f);
			return 0;
		}
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

int pd_outfile_commit(struct pd_outfile *f, const char **what)
{
	const char *w = NULL;
	int err = 0;
	sigset_t old;
	if (fsync(f->fd) < 0)
		err = -errno, w = "fsync";
	/* From here to the end the file has a name: no fatal signal until it
	 * is the final one, or is gone again. */
	block_fatal(&old);
	if (!err && f->unnamed && (err = link_unnamed(f)) < 0)
		w = "link";
	if (close(f->fd) < 0 && !err)
		err = -errno, w = "close";
	f->fd = -1;
	if (!err && rename(f->tmp_path, f->final_path) < 0)
		err = -errno, w = "rename";
	if (err && f->tmp_live)
		(void)unlink(f->tmp_path);
	if (f->tmp_live)
		named_remove(f);
	unblock(&old);
	if (what)
		*what = w;
	return err;
}
