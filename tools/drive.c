/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "drive.h"

/* Next slice: at most n octets, in *ret_p.  A memory source hands out its
 * own octets (no copy: pd-decrypt --bench measures the engine, not this). */
static ssize_t source_read(struct pd_drive *d, const uint8_t **ret_p)
{
	*ret_p = d->in;
	if (d->mem) {
		size_t k = d->mem_len - d->mem_off;
		if (k > d->slice)
			k = d->slice;
		*ret_p = d->mem + d->mem_off;
		d->mem_off += k;
		return (ssize_t)k;
	}
	for (;;) {
		ssize_t k = read(d->fd, d->in, d->slice);
		if (k >= 0 || errno != EINTR)
			return k < 0 ? -errno : k;
	}
}

int pd_drive_run(struct pd_msg *m, struct pd_worker *w, struct pd_drive *d, char *detail, size_t detail_len)
{
	size_t in_len = 0, in_off = 0;
	const uint8_t *inp = NULL;
	bool closed = false;
	unsigned stalls = 0;
	int r;

	detail[0] = 0;
	for (;;) {
		size_t n = 0;
		r = pd_msg_step(m, w, d->out, d->out_cap, &n);
		if (r < 0) {
			snprintf(detail, detail_len, "%s", pd_msg_detail(m));
			return r;
		}
		switch (r) {
		case PD_STEP_NEED_INPUT:
			if (in_off == in_len && !closed) {
				ssize_t k = source_read(d, &inp);
				if (k < 0) {
					snprintf(detail, detail_len, "reading input: %s", strerror((int)-k));
					return (int)k;
				}
				in_len = (size_t)k;
				in_off = 0;
				if (k == 0) {
					r = pd_msg_close_input(m);
					if (r < 0) {
						snprintf(detail, detail_len, "%s", pd_msg_detail(m));
						return r;
					}
					closed = true;
					continue;
				}
			} else if (closed) {
				/* The engine must finish or fail once input is closed;
				 * asking again would loop forever. */
				snprintf(detail, detail_len, "engine asked for input after end of input");
				return PD_EINTERNAL;
			}
			size_t used = 0;
			r = pd_msg_write(m, inp + in_off, in_len - in_off, &used);
			if (r < 0) {
				snprintf(detail, detail_len, "%s", pd_msg_detail(m));
				return r;
			}
			in_off += used;
			/* NEED_INPUT with a full buffer, over and over, is an
			 * engine bug: fail instead of spinning. */
			stalls = used ? 0 : stalls + 1;
			if (stalls > 1000) {
				snprintf(detail, detail_len, "engine asks for input but accepts none");
				return PD_EINTERNAL;
			}
			break;
		case PD_STEP_NEED_KEY:
			r = d->need_key(d->ctx, m, w);
			if (r < 0) {
				snprintf(detail, detail_len, "%s", pd_msg_detail(m));
				return r;
			}
			break;
		case PD_STEP_METADATA:
			break;
		case PD_STEP_OUTPUT:
			if (n > d->out_cap) {
				snprintf(detail, detail_len, "engine returned more output than room");
				return PD_EINTERNAL;
			}
			d->out_hw = n > d->out_hw ? n : d->out_hw;
			r = d->output(d->ctx, d->out, n);
			if (r < 0) {
				snprintf(detail, detail_len, "writing output: %s", strerror(-r));
				return r;
			}
			break;
		case PD_STEP_DONE:
			return 0;
		default:
			snprintf(detail, detail_len, "unknown step code %d", r);
			return PD_EINTERNAL;
		}
	}
}
