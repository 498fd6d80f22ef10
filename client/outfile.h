/* SPDX-License-Identifier: MIT */
/*
 * An output file whose contents are provisional until a verdict (the
 * plaintext of a message whose integrity is only known at its end): written
 * where no name reaches it, named only at commit.  Shared by pgpdecd-client
 * and pgpdecd-gpg.
 *
 * Where the file system has O_TMPFILE (ext4, xfs, btrfs, tmpfs), the file is
 * unnamed in the final path's directory until commit links it there: a
 * process killed in any way, even SIGKILL, leaves nothing.  Elsewhere it is
 * a temporary .NAME.pgpdecd-XXXXXX beside the final path, renamed at commit,
 * removed on failure and by pd_outfile_catch_signals()'s handler.
 *
 * The file is made with mode 0600 (before the umask), as mkstemp does, and
 * commit replaces whatever is at the final path (rename(2) semantics): an
 * unnamed file is linked to a temporary name and renamed, with the fatal
 * signals blocked (only SIGKILL in those two calls could leave the verified
 * contents under the temporary name).
 */
#ifndef PD_OUTFILE_H
#define PD_OUTFILE_H

#include <signal.h>
#include <stdbool.h>

struct pd_outfile {
	int fd;                         /* write the contents here */
	char *final_path;               /* a copy of the final path */
	char *dir, *base;               /* its directory and last component */
	char *tmp_path;                 /* the temporary name, while there is one */
	volatile sig_atomic_t tmp_live; /* tmp_path exists: the signal handler removes it */
	bool unnamed;                   /* O_TMPFILE: no name before commit */
	struct pd_outfile *volatile next;
};

/* Start an output file for final_path.  0, or -errno (nothing made). */
int pd_outfile_open(struct pd_outfile *f, const char *final_path);

/* Start over (a request sent again): 0 or -errno. */
int pd_outfile_rewind(struct pd_outfile *f);

/* fsync, close and name it final_path.  0, or -errno with *what saying
 * which step failed ("fsync", "close", "link", "rename"); the contents are
 * gone then.  Either way f is finished (pd_outfile_discard() is a no-op). */
int pd_outfile_commit(struct pd_outfile *f, const char **what);

/* Throw the contents away; the final path is untouched. */
void pd_outfile_discard(struct pd_outfile *f);

/* Free the strings of a finished f. */
void pd_outfile_free(struct pd_outfile *f);

/* Every catchable signal whose default action ends the process (SIGINT,
 * SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGALRM, SIGUSR1/2, SIGXCPU, SIGXFSZ,
 * SIGVTALRM, SIGPROF) while it has its default action (an ignored one
 * stays ignored, a handler of the caller's stays): remove the temporary names
 * of every open output file, call also() (async-signal-safe; may be NULL),
 * then die of the signal so that the caller sees why (a shell says 128+N). */
void pd_outfile_catch_signals(void (*also)(void));

/* Async-signal-safe: unlink the temporary names of every open output file
 * (for an exit that skips committing or discarding them). */
void pd_outfile_remove_all(void);

#endif
