/* SPDX-License-Identifier: MIT */
/* client/outfile.c: an output file has no name until commit where the file
 * system has O_TMPFILE, and otherwise a temporary one that a failure, a
 * discard or a fatal signal (SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGXFSZ, ...)
 * removes.  open(2) is wrapped (-Wl,--wrap)
 * for the calls outfile.o makes, so that the fallback (a file system without
 * O_TMPFILE: EOPNOTSUPP) is tried on any file system. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "outfile.h"

static bool no_tmpfile; /* the wrapped open() fails O_TMPFILE as old file systems do */

int __real_open64(const char *path, int flags, ...);
int __wrap_open64(const char *path, int flags, ...);
int __real_open(const char *path, int flags, ...);
int __wrap_open(const char *path, int flags, ...);

int __wrap_open64(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
	va_end(ap);
	if (no_tmpfile && (flags & O_TMPFILE) == O_TMPFILE) {
		errno = EOPNOTSUPP;
		return -1;
	}
	return __real_open64(path, flags, mode);
}

int __wrap_open(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
	va_end(ap);
	if (no_tmpfile && (flags & O_TMPFILE) == O_TMPFILE) {
		errno = EOPNOTSUPP;
		return -1;
	}
	return __real_open(path, flags, mode);
}

static char dir[64], final[128];

/* The names in dir, sorted, joined by '/'. */
static const char *listing(void)
{
	static char out[1024];
	struct dirent **v;
	int n = scandir(dir, &v, NULL, alphasort);
	assert_true(n >= 0);
	out[0] = 0;
	for (int i = 0; i < n; i++) {
		if (strcmp(v[i]->d_name, ".") && strcmp(v[i]->d_name, "..")) {
			if (out[0])
				strcat(out, "/");
			strncat(out, v[i]->d_name, sizeof(out) - strlen(out) - 2);
		}
		free(v[i]);
	}
	free(v);
	return out;
}

static void slurp(const char *path, char *buf, size_t cap, mode_t *mode)
{
	struct stat st;
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	ssize_t n = read(fd, buf, cap - 1);
	assert_true(n >= 0);
	buf[n] = 0;
	assert_int_equal(fstat(fd, &st), 0);
	*mode = st.st_mode & 07777;
	close(fd);
}

static void put(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "%s", "/tmp/test-outfile-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(final, sizeof(final), "%s/plain.txt", dir);
	umask(022);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* While open: no name (O_TMPFILE) or only the temporary one. */
static void check_open_listing(const struct pd_outfile *f, const char *before)
{
	char want[512];
	if (f->unnamed) {
		assert_null(f->tmp_path);
		assert_string_equal(listing(), before);
		return;
	}
	assert_non_null(f->tmp_path);
	assert_true(f->tmp_live);
	const char *slash = strrchr(f->tmp_path, '/');
	assert_int_equal(strncmp(slash + 1, ".plain.txt.pgpdecd-", 19), 0);
	snprintf(want, sizeof(want), "%s%s%s", slash + 1, *before ? "/" : "", before);
	assert_string_equal(listing(), want);
}

static void commit_replaces(bool fallback, bool existing)
{
	struct pd_outfile f;
	char buf[256];
	mode_t mode;
	no_tmpfile = fallback;
	if (existing)
		put(final, "previous\n", 0644);
	assert_int_equal(pd_outfile_open(&f, final), 0);
	assert_int_equal(f.unnamed, !fallback);
	check_open_listing(&f, existing ? "plain.txt" : "");
	assert_int_equal(write(f.fd, "discarded by a rewind", 21), 21);
	assert_int_equal(pd_outfile_rewind(&f), 0);
	assert_int_equal(write(f.fd, "verified\n", 9), 9);
	if (existing) {
		slurp(final, buf, sizeof(buf), &mode);
		assert_string_equal(buf, "previous\n");
	}
	const char *what = "unset";
	assert_int_equal(pd_outfile_commit(&f, &what), 0);
	assert_null(what);
	assert_int_equal(f.fd, -1);
	assert_false(f.tmp_live);
	assert_string_equal(listing(), "plain.txt");
	slurp(final, buf, sizeof(buf), &mode);
	assert_string_equal(buf, "verified\n");
	assert_int_equal(mode, 0600); /* mkstemp's mode, whatever was there before */
	pd_outfile_discard(&f);       /* a no-op once committed */
	assert_string_equal(listing(), "plain.txt");
	pd_outfile_free(&f);
}

static void unnamed_new(void **state) { (void)state; commit_replaces(false, false); }
static void unnamed_overwrite(void **state) { (void)state; commit_replaces(false, true); }
static void named_new(void **state) { (void)state; commit_replaces(true, false); }
static void named_overwrite(void **state) { (void)state; commit_replaces(true, true); }

static void discard_leaves_nothing(void **state)
{
	(void)state;
	for (int fallback = 0; fallback < 2; fallback++)
		for (int existing = 0; existing < 2; existing++) {
			struct pd_outfile f;
			char buf[64];
			mode_t mode;
			no_tmpfile = fallback;
			unlink(final);
			if (existing)
				put(final, "previous\n", 0644);
			assert_int_equal(pd_outfile_open(&f, final), 0);
			assert_int_equal(write(f.fd, "unverified", 10), 10);
			pd_outfile_discard(&f);
			assert_int_equal(f.fd, -1);
			assert_string_equal(listing(), existing ? "plain.txt" : "");
			if (existing) {
				slurp(final, buf, sizeof(buf), &mode);
				assert_string_equal(buf, "previous\n");
				assert_int_equal(mode, 0644);
			}
			pd_outfile_free(&f);
		}
}

/* rename(2) cannot replace a directory that is not empty: the commit fails,
 * saying so, and leaves no name behind. */
static void failed_commit_leaves_nothing(void **state)
{
	(void)state;
	char inside[192];
	assert_int_equal(mkdir(final, 0755), 0);
	snprintf(inside, sizeof(inside), "%s/x", final);
	put(inside, "x", 0644);
	for (int fallback = 0; fallback < 2; fallback++) {
		struct pd_outfile f;
		no_tmpfile = fallback;
		assert_int_equal(pd_outfile_open(&f, final), 0);
		assert_int_equal(write(f.fd, "verified", 8), 8);
		const char *what = NULL;
		int r = pd_outfile_commit(&f, &what);
		assert_true(r == -EISDIR || r == -ENOTEMPTY || r == -EEXIST);
		assert_string_equal(what, "rename");
		assert_false(f.tmp_live);
		assert_string_equal(listing(), "plain.txt");
		pd_outfile_free(&f);
	}
}

static void open_error(void **state)
{
	(void)state;
	char missing[192];
	snprintf(missing, sizeof(missing), "%s/no/such/dir/out", dir);
	for (int fallback = 0; fallback < 2; fallback++) {
		struct pd_outfile f;
		no_tmpfile = fallback;
		assert_int_equal(pd_outfile_open(&f, missing), -ENOENT);
		assert_null(f.final_path);
		assert_null(f.tmp_path);
	}
}

/* The also() hook, from the handler: one octet to the test. */
static int also_fd = -1;
static void also(void)
{
	(void)!write(also_fd, "A", 1);
}

/* A child writes an output file and is killed: it dies of the signal,
 * also() ran, and nothing is left in the directory. */
static void killed(int sig, bool fallback, bool existing)
{
	int ready[2], hook[2];
	assert_int_equal(pipe(ready), 0);
	assert_int_equal(pipe(hook), 0);
	unlink(final);
	if (existing)
		put(final, "previous\n", 0644);
	no_tmpfile = fallback;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct pd_outfile f;
		also_fd = hook[1];
		pd_outfile_catch_signals(also);
		if (pd_outfile_open(&f, final) < 0 || f.unnamed == fallback)
			_exit(1);
		if (write(f.fd, "unverified", 10) != 10 || write(ready[1], "R", 1) != 1)
			_exit(2);
		for (;;)
			pause();
	}
	close(ready[1]);
	close(hook[1]);
	char c;
	assert_int_equal(read(ready[0], &c, 1), 1);
	if (fallback)
		assert_true(strstr(listing(), ".plain.txt.pgpdecd-") != NULL);
	else
		assert_string_equal(listing(), existing ? "plain.txt" : "");
	assert_int_equal(kill(pid, sig), 0);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), sig);
	assert_int_equal(read(hook[0], &c, 1), 1);
	assert_int_equal(c, 'A');
	assert_string_equal(listing(), existing ? "plain.txt" : "");
	close(ready[0]);
	close(hook[0]);
}

static void signals_remove_the_file(void **state)
{
	(void)state;
	/* SIGQUIT dumps core: left out here, handled the same way */
	static const int sigs[] = { SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGXFSZ, SIGALRM, SIGUSR1 };
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		for (int fallback = 0; fallback < 2; fallback++)
			for (int existing = 0; existing < 2; existing++)
				killed(sigs[i], fallback, existing);
}

/* An ignored signal stays ignored (nohup). */
static void ignored_signal_stays_ignored(void **state)
{
	(void)state;
	struct sigaction old, now, ign = { .sa_handler = SIG_IGN };
	sigemptyset(&ign.sa_mask);
	assert_int_equal(sigaction(SIGHUP, &ign, &old), 0);
	pd_outfile_catch_signals(NULL);
	assert_int_equal(sigaction(SIGHUP, NULL, &now), 0);
	assert_true(now.sa_handler == SIG_IGN);
	assert_int_equal(sigaction(SIGTERM, NULL, &now), 0);
	assert_true(now.sa_handler != SIG_IGN && now.sa_handler != SIG_DFL);
	struct sigaction dfl = { .sa_handler = SIG_DFL };
	sigemptyset(&dfl.sa_mask);
	sigaction(SIGHUP, &old, NULL);
	sigaction(SIGTERM, &dfl, NULL);
	sigaction(SIGINT, &dfl, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(unnamed_new, setup, teardown),
		cmocka_unit_test_setup_teardown(unnamed_overwrite, setup, teardown),
		cmocka_unit_test_setup_teardown(named_new, setup, teardown),
		cmocka_unit_test_setup_teardown(named_overwrite, setup, teardown),
		cmocka_unit_test_setup_teardown(discard_leaves_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(failed_commit_leaves_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(open_error, setup, teardown),
		cmocka_unit_test_setup_teardown(signals_remove_the_file, setup, teardown),
		cmocka_unit_test(ignored_signal_stays_ignored),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
