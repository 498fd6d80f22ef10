/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the gateway's MIME decryptor (mail/pdmail.c): a hostile
 * mail.  The first octet picks the policy (failure pass/reject/quarantine,
 * protected headers none/subject/all, keep-original) and whether the pieces
 * are "decrypted" in-process (pd__mail_set_loopback: each piece's plaintext
 * is its own decoded ciphertext, so hostile plaintext reaches the entity
 * parser, header protection, the inline rebuild and the attachment path) or
 * sent to a daemon that is not there (every piece unavailable).  The rest is
 * the mail.
 *
 * Beyond "no crash, no leak, bounded time and memory" it checks
 * pd_mail_process's contract: 0 or a negative errno; counts that add up
 * (decrypted + no-key + failed >= pieces unless a piece was unavailable, and
 * then the verdict is TEMPFAIL); a written mail starts with our
 * one X-Pgpdecd-Status field and carries no other field of that name; BOUNCE
 * and TEMPFAIL write nothing; a daemon that is not there never yields a
 * decrypted piece.
 *
 * libFuzzer: contrib/fuzz.sh builds it; fuzz-main.c replays
 * tests/fuzz/corpus/mail/ as a meson test.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "pdmail.h"

static int memfd(const char *name)
{
	int fd = memfd_create(name, MFD_CLOEXEC);
	if (fd < 0)
		abort();
	return fd;
}

static void write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w <= 0)
			abort();
		p += w;
		n -= (size_t)w;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int init;
	if (!init) {
		pd_mail_global_init();
		init = 1;
	}
	if (size < 1)
		return 0;
	uint8_t sel = data[0];
	data++, size--;

	struct pd_mail_policy pol;
	pd_mail_policy_default(&pol);
	pol.on_failure = (enum pd_mail_action)(sel % 3);
	pol.protected_headers = (enum pd_mail_hp)((sel / 3) % 3);
	pol.keep_original = sel & 0x10;
	pol.on_no_key = (sel & 0x40) ? PD_MAIL_REJECT : PD_MAIL_PASS;
	bool loopback = sel & 0x20;
	pol.tmpdir = getenv("TMPDIR");

	struct pdc_config cfg = { .socket_path = "/nonexistent/pgpdecd-fuzz.sock", .timeout_ms = 1000 };
	struct pd_mail *m;
	if (pd_mail_new(&m, &cfg, &pol) < 0)
		abort();
	pd__mail_set_loopback(m, loopback);

	int in = memfd("mail-in"), out = memfd("mail-out");
	write_all(in, data, size);
	if (lseek(in, 0, SEEK_SET) < 0)
		abort();
	struct pd_mail_report rep;
	memset(&rep, 0xa5, sizeof(rep));
	int err = pd_mail_process(m, in, out, &rep);
	if (err > 0)
		abort();
	if (err == 0) {
		if (rep.outcome != PD_MAIL_UNAVAILABLE &&
		    rep.n_decrypted + rep.n_no_key + rep.n_failed < rep.n_pieces)
			abort();
		if ((rep.outcome == PD_MAIL_UNAVAILABLE) != (rep.verdict == PD_MAIL_TEMPFAIL))
			abort();
		if (!loopback && rep.n_decrypted)
			abort();
		off_t len = lseek(out, 0, SEEK_END);
		if (rep.verdict == PD_MAIL_BOUNCE || rep.verdict == PD_MAIL_TEMPFAIL) {
			if (len != 0)
				abort();
		} else {
			static const char head[] = "X-Pgpdecd-Status: ";
			char *buf = malloc((size_t)len + 1);
			if (!buf || pread(out, buf, (size_t)len, 0) != len)
				abort();
			buf[len] = 0;
			if (len < (off_t)sizeof(head) - 1 || memcmp(buf, head, sizeof(head) - 1) != 0)
				abort();
			/* No second field of the name in the header section. */
			char *end = strstr(buf, "\n\n");
			if (end)
				*end = 0;
			for (char *p = strchr(buf, '\n'); p; p = strchr(p + 1, '\n'))
				if (strncasecmp(p + 1, head, sizeof(head) - 1) == 0)
					abort();
			free(buf);
		}
	}
	close(in);
	close(out);
	pd_mail_free(m);
	return 0;
}
