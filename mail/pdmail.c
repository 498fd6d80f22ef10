/* SPDX-License-Identifier: MIT */
/*
 * libpdmail: find what is encrypted in one mail, have the daemon decrypt it
 * (verified-only, pipelined on one connection), write the mail back with
 * the plaintext in place.  See pdmail.h for the contract.
 *
 * The work goes in rounds.  A round walks the MIME tree from its roots and
 * collects "pieces": a PGP/MIME multipart/encrypted, an encrypted
 * attachment, or one armored block of an inline text part.  Every piece of
 * the round is submitted before the replies are read; each plaintext goes to
 * its own unlinked spool file.  Then every decrypted piece is put in place.
 * A decrypted PGP/MIME entity is the root of the next round (encrypted
 * inside encrypted), up to max_depth.
 *
 * Nothing here looks at plaintext before the daemon has verified it: the
 * requests are PDC_VERIFIED_ONLY, and a piece is used only when its result
 * is OK with MDC or AEAD integrity.
 */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gmime/gmime.h>

#include "pdmail.h"

#define HDR_PREFIX "X-Pgpdecd-"
#define MAX_PIECES_HARD 1024

struct pd_mail {
	struct pdc_config cfg;
	struct pd_mail_policy pol;
	struct pdc_conn *conn;
	bool loopback;             /* pd__mail_set_loopback */
	char *bind;                /* pd_mail_set_bind(): the values, a NUL after each */
	const char *bind_v[PDC_MAX_BIND];
	size_t n_bind, n_bind_asked;
	bool bind_over;            /* ... one no address, or more than PDC_MAX_BIND: no key is bound */
};

enum piece_kind { PK_PGPMIME, PK_ATTACH, PK_INLINE };

/* What GMime will build in memory for a text, counted before it is parsed:
 * lines that start with "--" (each MIME part and level of nesting needs
 * one), lines GMime takes as a header field (every field of every part
 * becomes an object), and the items of the fields GMime parses into
 * objects of their own (parameters, addresses, date words).  Each text
 * GMime parses (the mail, each decrypted entity) is held to the policy's
 * bounds alone, with shape_fits(): a count shared with the mail would let
 * a sender who pads the mail around someone's ciphertext learn, from
 * accept or reject, the shape of its plaintext.  The whole-body rule
 * (walk()) parses at most max_depth + 1 entities a mail, so the sum stays
 * bounded. */
struct shape {
	uint64_t dashes, fields, items;
};

/* The scanner of one text, fed chunk by chunk. */
enum { LC_INSIDE, LC_START, LC_DASH, LC_NAME, LC_NAME_WS, LC_VALUE };
struct line_count {
	int state;                 /* LC_*: where in a line the last chunk ended */
	bool in_field;             /* the line before is a field or its continuation */
	bool structured;           /* that field is one GMime parses into items */
	bool word;                 /* LC_VALUE: in a word of a structured value */
	unsigned nlen;             /* octets of the field name so far */
	char name[28];             /* its first octets, lower-cased */
	bool eight_bit;            /* an octet over 127 (the kept original's transfer encoding) */
	bool nul;                  /* ... a NUL: binary */
	bool bare_cr;              /* ... a CR not before LF: binary (RFC 2045 2.7) */
	bool long_line;            /* ... a line over 998 octets: binary */
	bool cr;                   /* the last octet was a CR */
	uint64_t llen;             /* octets of the current line so far, CRs included */
	struct shape n;
};

/* Where an object sits: the body of a message, or a child of a multipart.
 * Recorded by the walk, so that replacing needs no search of the tree. */
struct place {
	GMimeMessage *owner;       /* obj is this message's body, or */
	GMimeMultipart *parent;    /* obj is a child of this multipart */
};

/* A root of the next round: a decrypted entity, where it was put. */
struct root {
	GMimeObject *obj;
	struct place at;
};

/* MIME nesting the walk follows (multiparts and message/rfc822); deeper is
 * LIMIT.  GMime's own recursion is bounded by max_mime_parts. */
#define MAX_NEST 64

/* A protected field longer than this is not promoted (RFC 5322 allows 998
 * octets a line; a reader's Subject is far shorter). */
#define MAX_PROMOTED 8192
enum piece_state { PS_PENDING, PS_OK, PS_NO_KEY, PS_FAILED, PS_UNAVAILABLE };

struct text_job;

struct piece {
	enum piece_kind kind;
	enum piece_state st;
	GMimeObject *obj;          /* the multipart/encrypted, or the part */
	struct place at;           /* where obj is, for its replacement */
	GMimeStream *src;          /* ciphertext, decoded from its transfer encoding */
	int out_fd;                /* plaintext spool (unlinked) */
	int write_err;             /* a failed write to out_fd */
	bool over_budget;          /* its plaintext went past the mail's max_plaintext */
	bool soft;                 /* failed for what its plaintext holds: reported, never the verdict */
	struct run *run;
	struct line_count lines;   /* PK_PGPMIME: of the plaintext, the entity to parse */
	GMimeObject *entity;       /* PK_PGPMIME: the entity, parsed when it is taken */
	struct text_job *tj;       /* PK_INLINE: the text part and its blocks */
	gint64 begin, end;         /* PK_INLINE: the block in the decoded text */
	struct pdc_result res;
	bool done;                 /* res came from on_done */
};

struct text_job {
	GMimePart *part;
	GMimeStream *text;         /* the decoded text, spooled */
	unsigned first, n;         /* its pieces */
};

struct run {
	struct pd_mail *m;
	GMimeMessage *msg;
	struct piece *p;
	unsigned n, cap;
	struct text_job *tj[MAX_PIECES_HARD];
	unsigned n_tj;
	bool over_limit;           /* a bound of the mail as received: the failure policy applies */
	bool inner_limit;          /* a bound reached inside what was decrypted: reported only */
	unsigned round;            /* 0: the mail as received; n: inside n levels of decryption */
	int nomem;                 /* -ENOMEM: a piece could not be recorded */
	struct pd_mail_report *rep;
	uint64_t plaintext;        /* octets spooled for all pieces so far */
};

/* ------------------------------------------------------------------ */
/* Names and policy */

void pd_mail_policy_default(struct pd_mail_policy *p)
{
	*p = (struct pd_mail_policy){
		.on_no_key = PD_MAIL_PASS,
		.on_failure = PD_MAIL_REJECT,
		.protected_headers = PD_MAIL_HP_SUBJECT,
		.keep_original = false,
		.max_depth = 4,
		.max_parts = 64,
		.max_mime_parts = 10000,
		.max_header_fields = 50000,
		.max_header_items = 200000,
		.max_plaintext = 256ull << 20,
	};
}

/* The index of s among three policy words, or -EINVAL. */
static int word_index(const char *s, const char *const names[3])
{
	for (int i = 0; i < 3; i++)
		if (strcmp(s, names[i]) == 0)
			return i;
	return -EINVAL;
}

int pd_mail_action_parse(const char *s, enum pd_mail_action *ret)
{
	static const char *const names[3] = { "pass", "reject", "quarantine" };
	int i = word_index(s, names);
	if (i < 0)
		return i;
	*ret = (enum pd_mail_action)i;
	return 0;
}

int pd_mail_hp_parse(const char *s, enum pd_mail_hp *ret)
{
	static const char *const names[3] = { "none", "subject", "all" };
	int i = word_index(s, names);
	if (i < 0)
		return i;
	*ret = (enum pd_mail_hp)i;
	return 0;
}

const char *pd_mail_outcome_name(enum pd_mail_outcome o)
{
	switch (o) {
	case PD_MAIL_NOT_ENCRYPTED: return "not-encrypted";
	case PD_MAIL_DECRYPTED: return "decrypted";
	case PD_MAIL_PARTLY: return "partly-decrypted";
	case PD_MAIL_NO_KEY: return "no-key";
	case PD_MAIL_FAILED: return "failed";
	case PD_MAIL_UNAVAILABLE: return "unavailable";
	case PD_MAIL_EMBEDDED: return "embedded";
	}
	return "?";
}

const char *pd_mail_action_name(enum pd_mail_action a)
{
	switch (a) {
	case PD_MAIL_PASS: return "pass";
	case PD_MAIL_REJECT: return "reject";
	case PD_MAIL_QUARANTINE: return "quarantine";
	}
	return "?";
}

void pd_mail_reason(const struct pd_mail_report *r, char *buf, size_t n)
{
	switch (r->outcome) {
	case PD_MAIL_FAILED:
	case PD_MAIL_PARTLY:
	case PD_MAIL_UNAVAILABLE:
	case PD_MAIL_NO_KEY:
		if (r->status_name[0]) {
			snprintf(buf, n, "not decrypted: %s", r->status_name);
			return;
		}
		snprintf(buf, n, "not decrypted: %s", pd_mail_outcome_name(r->outcome));
		return;
	default:
		snprintf(buf, n, "%s", pd_mail_outcome_name(r->outcome));
	}
}

void pd_mail_global_init(void)
{
	g_mime_init();
}

int pd_mail_new(struct pd_mail **ret, const struct pdc_config *cfg, const struct pd_mail_policy *policy)
{
	if (policy && policy->max_depth > PD_MAIL_MAX_DEPTH)
		return -EINVAL;
	struct pd_mail *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->cfg = *cfg;
	/* The gateway retries on its own terms (one fresh connection for a
	 * pooled one the daemon closed) and answers a temporary failure, which
	 * the MTA retries later: libpdclient's retry would hold the SMTP
	 * session for up to its timeout. */
	m->cfg.no_retry = true;
	if (policy)
		m->pol = *policy;
	else
		pd_mail_policy_default(&m->pol);
	/* A bound left 0 takes its default. */
	struct pd_mail_policy d;
	pd_mail_policy_default(&d);
	if (!m->pol.max_mime_parts)
		m->pol.max_mime_parts = d.max_mime_parts;
	if (!m->pol.max_header_fields)
		m->pol.max_header_fields = d.max_header_fields;
	if (!m->pol.max_header_items)
		m->pol.max_header_items = d.max_header_items;
	if (!m->pol.max_plaintext)
		m->pol.max_plaintext = d.max_plaintext;
	if (!m->pol.max_parts)
		m->pol.max_parts = d.max_parts;
	if (m->pol.max_parts > MAX_PIECES_HARD)
		m->pol.max_parts = MAX_PIECES_HARD;
	*ret = m;
	return 0;
}

void pd__mail_set_loopback(struct pd_mail *m, bool on)
{
	m->loopback = on;
}

struct pd_mail *pd_mail_free(struct pd_mail *m)
{
	if (!m)
		return NULL;
	pdc_close(m->conn);
	free(m->bind);
	free(m);
	return NULL;
}

int pd_mail_set_bind(struct pd_mail *m, const char *const *vals, size_t n)
{
	size_t len = 0;
	bool none = n > PDC_MAX_BIND;
	for (size_t i = 0; i < n; i++) {
		none |= !pdc_bind_value_ok(vals[i]);
		len += vals[i] ? strlen(vals[i]) + 1 : 0;
	}
	char *b = NULL;
	if (n && !none && !(b = malloc(len)))
		return -ENOMEM;
	free(m->bind);
	m->bind = b;
	m->n_bind = 0;
	m->bind_over = none;
	m->n_bind_asked = n;
	for (size_t i = 0; b && i < n; i++) {
		size_t l = strlen(vals[i]) + 1;
		memcpy(b, vals[i], l);
		m->bind_v[m->n_bind++] = b;
		b += l;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Spool files and streams */

static int spool_fd(struct pd_mail *m)
{
	const char *dir = m->pol.tmpdir;
	if (!dir || !*dir)
		dir = getenv("TMPDIR");
	if (!dir || !*dir)
		dir = "/tmp";
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd >= 0)
		return fd;
	char path[4096];
	if (snprintf(path, sizeof(path), "%s/pgpdecd-mail.XXXXXX", dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	fd = mkostemp(path, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	unlink(path);
	return fd;
}

/* Copy a stream to the end into another; 0 or -EIO. */
static int copy_stream(GMimeStream *from, GMimeStream *to)
{
	return g_mime_stream_write_to_stream(from, to) < 0 ? -EIO : 0;
}

/* The decoded content of a part, as a stream to read from its start.  The
 * returned stream reads the raw (encoded) octets through GMime's decoder. */
static GMimeStream *decoded_stream(GMimePart *part)
{
	GMimeDataWrapper *w = g_mime_part_get_content(part);
	if (!w)
		return NULL;
	GMimeStream *raw = g_mime_data_wrapper_get_stream(w);
	if (!raw)
		return NULL;
	GMimeStream *sub = g_mime_stream_substream(raw, raw->bound_start, raw->bound_end);
	g_mime_stream_reset(sub);
	GMimeContentEncoding enc = g_mime_data_wrapper_get_encoding(w);
	if (enc == GMIME_CONTENT_ENCODING_BASE64 || enc == GMIME_CONTENT_ENCODING_QUOTEDPRINTABLE ||
	    enc == GMIME_CONTENT_ENCODING_UUENCODE) {
		GMimeStream *f = g_mime_stream_filter_new(sub);
		GMimeFilter *dec = g_mime_filter_basic_new(enc, FALSE);
		g_mime_stream_filter_add(GMIME_STREAM_FILTER(f), dec);
		g_object_unref(dec);
		g_object_unref(sub);
		return f;
	}
	return sub;
}

/* Read up to n octets from the start of a part's decoded content. */
static size_t peek_part(GMimePart *part, char *buf, size_t n)
{
	GMimeStream *s = decoded_stream(part);
	size_t got = 0;
	if (!s)
		return 0;
	while (got < n) {
		ssize_t r = g_mime_stream_read(s, buf + got, n - got);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	g_object_unref(s);
	return got;
}

/* ------------------------------------------------------------------ */
/* Finding the pieces */

static bool ieq(const char *a, const char *b)
{
	return a && b && strcasecmp(a, b) == 0;
}

static bool has_suffix(const char *name, const char *suffix)
{
	size_t a = strlen(name), b = strlen(suffix);
	return a > b && strcasecmp(name + a - b, suffix) == 0;
}

static const char *const enc_suffixes[] = { ".pgp", ".gpg", ".asc" };

/* Does this look like the start of an OpenPGP message (armored or binary)? */
static bool looks_encrypted(const char *p, size_t n)
{
	static const char armor[] = "-----BEGIN PGP MESSAGE-----";
	/* Armor may follow some text (up to the peeked window). */
	for (size_t i = 0; i + sizeof(armor) - 1 <= n; i++)
		if ((i == 0 || p[i - 1] == '\n') && memcmp(p + i, armor, sizeof(armor) - 1) == 0)
			return true;
	if (n == 0 || !((unsigned char)p[0] & 0x80))
		return false;
	unsigned tag = ((unsigned char)p[0] & 0x40) ? ((unsigned char)p[0] & 0x3f)
	                                            : (((unsigned char)p[0] >> 2) & 0x0f);
	/* PKESK, SKESK, SED, SEIPD, OCB: what an encrypted message starts with. */
	return tag == 1 || tag == 3 || tag == 9 || tag == 18 || tag == 20;
}

/* A bound is reached.  In the mail as received it is the sender's doing,
 * and the failure policy applies; inside decrypted content it depends on
 * what a plaintext holds, and a sender could pad a mail around someone's
 * ciphertext to ask about it (its pieces, nesting, length): reported in
 * X-Pgpdecd-Status only, the verdict never depends on it. */
static void limit_reached(struct run *r)
{
	if (r->round)
		r->inner_limit = true;
	else
		r->over_limit = true;
}

static struct piece *add_piece(struct run *r, enum piece_kind k, GMimeObject *obj, struct place at)
{
	if (r->n >= r->m->pol.max_parts) {
		limit_reached(r);
		return NULL;
	}
	if (r->n == r->cap) {
		unsigned cap = r->cap ? r->cap * 2 : 8;
		struct piece *np = realloc(r->p, cap * sizeof(*np));
		if (!np) {
			r->nomem = -ENOMEM;
			return NULL;
		}
		r->p = np;
		r->cap = cap;
	}
	struct piece *p = &r->p[r->n++];
	*p = (struct piece){ .kind = k, .obj = obj, .at = at, .out_fd = -1, .run = r,
	                     .lines = { .state = LC_START } };
	return p;
}

/* An END line with more than five dashes after its name, which the engine
 * accepts as gpg, sq, rnp and gosop do. */
static bool long_end_line(const char *l, size_t n)
{
	static const char end[] = "-----END PGP MESSAGE------";
	if (n < sizeof(end) - 1 || memcmp(l, end, sizeof(end) - 1) != 0)
		return false;
	for (size_t i = sizeof(end) - 1; i < n; i++)
		if (l[i] != '-' && l[i] != '\r' && l[i] != '\n' && l[i] != ' ' && l[i] != '\t')
			return false;
	return true;
}

/* An inline text part: find the armored blocks in its decoded text with
 * GMime's OpenPGP filter, one piece per block.  Only a text that has some
 * is spooled (each block is then read from the spool, and the part rebuilt
 * from it); most text parts have none and cost one read.  A text that is
 * not its message's whole body (!whole) has its blocks counted as
 * embedded and nothing else: see walk(). */
static int scan_inline(struct run *r, GMimePart *part, struct place at, bool whole)
{
	GMimeStream *dec = decoded_stream(part);
	if (!dec)
		return 0;

	/* Line by line through the filter; after each END marker note the
	 * block and start over for the next one.  Lines are read in bounded
	 * pieces: a line longer than any armor line (76 octets, RFC 9580
	 * section 6.2) is skipped to its end and the filter starts over after
	 * it, so a text of one huge line costs no more memory than any other. */
	GMimeStream *buffered = g_mime_stream_buffer_new(dec, GMIME_STREAM_BUFFER_BLOCK_READ);
	GMimeFilter *f = g_mime_filter_openpgp_new();
	GMimeFilterOpenPGP *fo = GMIME_FILTER_OPENPGP(f);
	char line[1024];
	gint64 base = 0, pos = 0;
	unsigned first = r->n, n = 0;
	for (;;) {
		ssize_t len = g_mime_stream_buffer_gets(buffered, line, sizeof(line));
		char *out;
		size_t outlen, outpre;
		if (len > 0 && (size_t)len == sizeof(line) - 1 && line[len - 1] != '\n') {
			/* Too long for armor: skip it, start over after it. */
			pos += len;
			while ((len = g_mime_stream_buffer_gets(buffered, line, sizeof(line))) > 0) {
				pos += len;
				if (line[len - 1] == '\n')
					break;
			}
			g_mime_filter_reset(f);
			base = pos;
			if (len <= 0)
				break;
			continue;
		}
		if (len <= 0) {
			/* The last line of a part has no line end when a MIME boundary
			 * follows it (RFC 2046: that line end is the boundary's). */
			len = 0;
			if (fo->state != GMIME_OPENPGP_BEGIN_PGP_MESSAGE)
				break;
			g_mime_filter_filter(f, (char *)"\n", 1, 0, &out, &outlen, &outpre);
			if (fo->state != GMIME_OPENPGP_END_PGP_MESSAGE)
				break;
		} else if (fo->state == GMIME_OPENPGP_BEGIN_PGP_MESSAGE && long_end_line(line, (size_t)len)) {
			/* "-----END PGP MESSAGE--------": GMime knows the five-dash
			 * form only; the block ends after the line as written. */
			static const char end[] = "-----END PGP MESSAGE-----\n";
			g_mime_filter_filter(f, (char *)end, sizeof(end) - 1, 0, &out, &outlen, &outpre);
			pos += len;
		} else {
			g_mime_filter_filter(f, line, (size_t)len, 0, &out, &outlen, &outpre);
			pos += len;
		}
		if (fo->state == GMIME_OPENPGP_END_PGP_MESSAGE && !whole) {
			/* Next to content the sender wrote: counted, left as it is. */
			r->rep->n_embedded++;
			g_mime_filter_reset(f);
			base = pos;
			if (len == 0)
				break;
		} else if (fo->state == GMIME_OPENPGP_END_PGP_MESSAGE) {
			struct piece *p = add_piece(r, PK_INLINE, GMIME_OBJECT(part), at);
			if (!p)
				break;
			p->begin = base + g_mime_filter_openpgp_get_begin_offset(fo);
			p->end = len ? pos : MIN(base + g_mime_filter_openpgp_get_end_offset(fo), pos); /* not the added line end */
			n++;
			g_mime_filter_reset(f);
			base = pos;
			if (len == 0)
				break;
		}
	}
	explicit_bzero(line, sizeof(line));
	g_object_unref(f);
	g_object_unref(buffered);
	g_object_unref(dec);
	if (n == 0)
		return 0;
	int fd = spool_fd(r->m);
	if (fd < 0) {
		r->n -= n;
		return fd;
	}
	GMimeStream *text = g_mime_stream_fs_new(fd);
	dec = decoded_stream(part);
	int err = dec ? copy_stream(dec, text) : -EIO;
	if (dec)
		g_object_unref(dec);
	struct text_job *tj = err ? NULL : calloc(1, sizeof(*tj));
	if (!tj || r->n_tj == MAX_PIECES_HARD) {
		free(tj);
		g_object_unref(text);
		r->n -= n;
		return err ? err : -ENOMEM;
	}
	tj->part = part;
	tj->text = text;
	tj->first = first;
	tj->n = n;
	r->tj[r->n_tj++] = tj;
	for (unsigned i = 0; i < n; i++) {
		struct piece *p = &r->p[first + i];
		p->tj = tj;
		p->src = g_mime_stream_substream(text, p->begin, p->end);
	}
	return 0;
}

static bool is_legacy_display(GMimeObject *o);

/* Is this an encrypted attachment?  (Its first 4 KiB, decoded.) */
static bool encrypted_attachment(GMimePart *part)
{
	char head[4096];
	size_t n = peek_part(part, head, sizeof(head));
	return looks_encrypted(head, n);
}

/* Does o have more than one Content-Type field?  GMime takes the last one,
 * most mail readers (Thunderbird, Python's email) the first: a text/plain
 * for the gateway may be a text/html or a multipart/mixed for the reader. */
static bool ambiguous_type(GMimeObject *o)
{
	GMimeHeaderList *hl = g_mime_object_get_header_list(o);
	unsigned n = 0;
	for (int i = 0; hl && i < g_mime_header_list_get_count(hl); i++) {
		const char *name = g_mime_header_get_name(g_mime_header_list_get_header_at(hl, i));
		size_t len = name ? strlen(name) : 0;
		while (len && (name[len - 1] == ' ' || name[len - 1] == '\t'))
			len--;
		if (len == 12 && g_ascii_strncasecmp(name, "Content-Type", 12) == 0)
			n++;
	}
	return n > 1;
}

/*
 * The whole-body rule (EFAIL, "direct exfiltration"): a mail reader shows
 * the parts of a multipart one after the other, and may join them into one
 * HTML document.  Ciphertext a sender captured, put between two parts of
 * their own (an unclosed <img src="http://...? before it), would come out
 * of the gateway as plaintext inside the sender's markup.  So only an
 * encrypted piece that is the whole of what is shown is decrypted in
 * place: the body of the mail, of a decrypted entity (which took the
 * mail's body), or of a message/rfc822 that is itself such a body, when
 * that body is a multipart/encrypted or a text/plain.  Inside any other
 * multipart (mixed, alternative, related, ...) and in message/rfc822
 * attachments, a multipart/encrypted or an inline block is left as it is,
 * for the mail reader, and counted as embedded; it is never sent to the
 * daemon.  Encrypted attachments are decrypted wherever they are: they stay
 * attachments (application/octet-stream, disposition attachment), which a
 * reader does not render into the text.
 *
 * whole: o is the whole body of its message or entity.
 */
static int walk(struct run *r, GMimeObject *o, struct place at, unsigned level, bool whole)
{
	if (level > MAX_NEST) {
		limit_reached(r);
		return 0;
	}
	/* A body whose type the reader may take otherwise is not a whole
	 * body of the type we see (the pieces in it are embedded). */
	if (whole && ambiguous_type(o))
		whole = false;
	if (GMIME_IS_MULTIPART_SIGNED(o))
		return 0; /* never touched: the MUA verifies it as it is */
	if (GMIME_IS_MULTIPART_ENCRYPTED(o)) {
		GMimeMultipart *mp = GMIME_MULTIPART(o);
		const char *proto = g_mime_object_get_content_type_parameter(o, "protocol");
		if (!ieq(proto, "application/pgp-encrypted") || g_mime_multipart_get_count(mp) < 2)
			return 0;
		GMimeObject *enc = g_mime_multipart_get_part(mp, 1);
		if (!GMIME_IS_PART(enc))
			return 0;
		if (!whole) {
			r->rep->n_embedded++;
			return 0;
		}
		struct piece *p = add_piece(r, PK_PGPMIME, o, at);
		if (p)
			p->src = decoded_stream(GMIME_PART(enc));
		return 0;
	}
	if (GMIME_IS_MULTIPART(o)) {
		GMimeMultipart *mp = GMIME_MULTIPART(o);
		struct place in = { .parent = mp };
		for (int i = 0; i < g_mime_multipart_get_count(mp); i++) {
			int err = walk(r, g_mime_multipart_get_part(mp, i), in, level + 1, false);
			if (err)
				return err;
		}
		return 0;
	}
	if (GMIME_IS_MESSAGE_PART(o)) {
		GMimeMessage *inner = g_mime_message_part_get_message(GMIME_MESSAGE_PART(o));
		GMimeObject *body = inner ? g_mime_message_get_mime_part(inner) : NULL;
		struct place in = { .owner = inner };
		return body ? walk(r, body, in, level + 1, whole) : 0;
	}
	if (!GMIME_IS_PART(o))
		return 0;
	GMimePart *part = GMIME_PART(o);
	GMimeContentType *ct = g_mime_object_get_content_type(o);
	const char *fn = g_mime_part_get_filename(part);
	bool named = false;
	for (unsigned i = 0; fn && i < 3; i++)
		named |= has_suffix(fn, enc_suffixes[i]);
	bool pgp_type = g_mime_content_type_is_type(ct, "application", "pgp-encrypted");
	if (named || pgp_type) {
		if (encrypted_attachment(part)) {
			struct piece *p = add_piece(r, PK_ATTACH, o, at);
			if (p)
				p->src = decoded_stream(part);
			return 0;
		}
		if (named && !g_mime_content_type_is_type(ct, "text", "*"))
			return 0;
	}
	if (g_mime_content_type_is_type(ct, "text", "plain") && !is_legacy_display(o))
		return scan_inline(r, part, at, whole);
	return 0;
}

/* ------------------------------------------------------------------ */
/* The daemon */

static ssize_t piece_read(void *arg, uint8_t *buf, size_t cap)
{
	struct piece *p = arg;
	ssize_t n = g_mime_stream_read(p->src, (char *)buf, cap);
	if (n < 0)
		return g_mime_stream_eos(p->src) ? 0 : -EIO;
	return n;
}

static void count_lines(const char *p, size_t n, struct line_count *lc);
static bool shape_fits(const struct shape *s, const struct pd_mail_policy *pol);

static int piece_data(void *arg, const uint8_t *d, size_t n)
{
	struct piece *p = arg;
	struct run *r = p->run;
	if (n > r->m->pol.max_plaintext - r->plaintext) {
		/* Disk for one mail is bounded: this piece fails LIMIT. */
		p->over_budget = true;
		return -EFBIG;
	}
	r->plaintext += n;
	if (p->kind == PK_PGPMIME)
		count_lines((const char *)d, n, &p->lines);
	while (n) {
		ssize_t w = write(p->out_fd, d, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			p->write_err = -errno;
			return p->write_err;
		}
		d += w;
		n -= (size_t)w;
	}
	return 0;
}

static void piece_done(void *arg, const struct pdc_result *res)
{
	struct piece *p = arg;
	p->res = *res;
	p->done = true;
}

static enum piece_state classify(const struct pdc_result *res)
{
	if (res->err)
		return PS_UNAVAILABLE;
	if (res->status == PDC_OK)
		return pdc_verified(res) ? PS_OK : PS_FAILED; /* unprotected: SED_REFUSED below */
	switch (res->status / 10) {
	case 1: return PS_FAILED;
	case 2: return PS_NO_KEY;
	default: return PS_UNAVAILABLE; /* 3x, 4x (a misconfiguration), 5x: defer */
	}
}

static int submit_all(struct run *r, unsigned from)
{
	for (unsigned i = from; i < r->n; i++) {
		struct piece *p = &r->p[i];
		struct pdc_decrypt d = {
			.flags = PDC_VERIFIED_ONLY,
			.in_fd = -1,
			.in_read = piece_read,
			.on_data = piece_data,
			.on_done = piece_done,
			.arg = p,
			.bind = r->m->bind_v,
			.n_bind = r->m->n_bind,
		};
		int err = pdc_submit_decrypt(r->m->conn, &d);
		if (err)
			return err;
	}
	return 0;
}

/* Rewind every piece of the round for a second attempt. */
static int rewind_round(struct run *r, unsigned from)
{
	for (unsigned i = from; i < r->n; i++) {
		struct piece *p = &r->p[i];
		struct stat st; /* what it spooled goes back to the mail's budget */
		if (fstat(p->out_fd, &st) == 0 && (uint64_t)st.st_size <= r->plaintext)
			r->plaintext -= (uint64_t)st.st_size;
		if (g_mime_stream_reset(p->src) < 0 || ftruncate(p->out_fd, 0) < 0 ||
		    lseek(p->out_fd, 0, SEEK_SET) < 0)
			return -EIO;
		memset(&p->res, 0, sizeof(p->res));
		p->done = false;
		p->over_budget = false;
		p->write_err = 0;
		p->lines = (struct line_count){ .state = LC_START };
	}
	return 0;
}

static int decrypt_round(struct run *r, unsigned from)
{
	struct pd_mail *m = r->m;
	for (unsigned i = from; i < r->n; i++) {
		struct piece *p = &r->p[i];
		if (!p->src)
			return -EIO;
		int fd = spool_fd(m);
		if (fd < 0)
			return fd;
		p->out_fd = fd;
	}
	if (m->loopback) {
		static const uint8_t fpr[20] = { 0xfe, 0xed };
		for (unsigned i = from; i < r->n; i++) {
			struct piece *p = &r->p[i];
			uint8_t buf[4096];
			ssize_t n;
			while ((n = piece_read(p, buf, sizeof(buf))) > 0)
				if (piece_data(p, buf, (size_t)n))
					break;
			struct pdc_result res = { .status = PDC_OK, .integrity = PDC_INTEGRITY_MDC };
			res.info.key_fpr_len = sizeof(fpr);
			memcpy(res.info.key_fpr, fpr, sizeof(fpr));
			piece_done(p, &res);
		}
		return 0;
	}
	if (m->bind_over) {
		/* Bound to a value that is no address, or to more than a request
		 * carries: no key is bound to them all.  Decided by the envelope
		 * alone, never by a piece. */
		for (unsigned i = from; i < r->n; i++) {
			struct pdc_result res = { .status = PDC_ST_NO_KEY };
			snprintf(res.errname, sizeof(res.errname), "ENOKEY");
			snprintf(res.sentence, sizeof(res.sentence), "no key is bound to every recipient of the mail (%zu)",
			         m->n_bind_asked);
			piece_done(&r->p[i], &res);
		}
		return 0;
	}
	/* A connection kept from an earlier mail may have been closed by the
	 * daemon (its idle timeout): then submitting fails at once, nothing was
	 * sent, and one fresh connection is tried. */
	for (int attempt = 0; attempt < 2; attempt++) {
		bool reused = m->conn != NULL;
		if (!m->conn) {
			struct pdc_result cr = { 0 };
			if (pdc_connect(&m->conn, &m->cfg, &cr) < 0) {
				m->conn = NULL;
				for (unsigned i = from; i < r->n; i++) {
					r->p[i].res = cr;
					if (!r->p[i].res.err)
						r->p[i].res.err = -ECONNREFUSED;
				}
				return 0;
			}
		}
		int err = submit_all(r, from);
		if (err) {
			/* Requests already queued get on_done from pdc_close. */
			m->conn = pdc_close(m->conn);
			if (reused && rewind_round(r, from) == 0)
				continue;
			for (unsigned i = from; i < r->n; i++)
				if (!r->p[i].res.err && !r->p[i].res.status)
					r->p[i].res.err = err;
			return 0;
		}
		err = pdc_run(m->conn);
		if (!err)
			return 0;
		m->conn = pdc_close(m->conn);
		/* Nothing reaches the spool before verification, so a round that
		 * the connection ended can be sent again as a whole. */
		bool lost = false;
		for (unsigned i = from; i < r->n; i++)
			lost |= r->p[i].res.err != 0;
		if (!(reused && lost) || rewind_round(r, from) < 0)
			return 0;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Putting plaintext in place */

static bool is_content_header(const char *name)
{
	return g_ascii_strncasecmp(name, "Content-", 8) == 0 || ieq(name, "MIME-Version");
}

static bool is_ours(const char *name)
{
	return g_ascii_strncasecmp(name, HDR_PREFIX, sizeof(HDR_PREFIX) - 1) == 0;
}

static void remove_ours(GMimeObject *o)
{
	GMimeHeaderList *hl = g_mime_object_get_header_list(o);
	for (int i = g_mime_header_list_get_count(hl) - 1; i >= 0; i--)
		if (is_ours(g_mime_header_get_name(g_mime_header_list_get_header_at(hl, i))))
			g_mime_header_list_remove_at(hl, i);
}

static bool is_legacy_display(GMimeObject *o)
{
	GMimeContentType *ct = g_mime_object_get_content_type(o);
	if (g_mime_content_type_is_type(ct, "text", "rfc822-headers") &&
	    g_mime_content_type_get_parameter(ct, "protected-headers"))
		return true;
	return g_mime_content_type_is_type(ct, "text", "*") &&
	       ieq(g_mime_content_type_get_parameter(ct, "hp-legacy-display"), "1");
}

/* Replace old, which sits at at, by new. */
static void put_in_place(struct place at, GMimeObject *old, GMimeObject *new)
{
	if (at.owner) {
		g_mime_message_set_mime_part(at.owner, new);
		return;
	}
	int i = g_mime_multipart_index_of(at.parent, old);
	if (i < 0)
		return;
	GMimeObject *prev = g_mime_multipart_replace(at.parent, i, new);
	if (prev)
		g_object_unref(prev);
}

/* The index of a field protected headers may replace (policy all), or -1:
 * what a reader is
 * shown or replies with (RFC 5322 sections 3.6.2 to 3.6.5).  Never trace
 * or gateway fields (Received, Return-Path, Authentication-Results, ...):
 * the sender writes the protected section and must not replace those. */
static int promotable(const char *name)
{
	static const char *const names[] = {
		"Subject", "From", "Sender", "Reply-To", "To", "Cc", "Date", "Message-ID",
		"In-Reply-To", "References", "Keywords", "Comments",
	};
	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (ieq(name, names[i]))
			return (int)i;
	return -1;
}

/* Protected headers of a decrypted entity that becomes msg's body. */
static void apply_protected_headers(struct run *r, GMimeMessage *owner, GMimeObject *entity)
{
	GMimeContentType *ct = g_mime_object_get_content_type(entity);
	bool protected = g_mime_content_type_get_parameter(ct, "protected-headers") ||
	                 g_mime_content_type_get_parameter(ct, "hp");
	GMimeHeaderList *hl = g_mime_object_get_header_list(entity);
	enum pd_mail_hp pol = r->m->pol.protected_headers;
	if (protected && owner && pol != PD_MAIL_HP_NONE) {
		/* Per name, the first protected field takes the place of the
		 * first outer one and the other outer ones go; further protected
		 * fields of the name follow at the end. */
		GMimeHeaderList *ol = g_mime_object_get_header_list(GMIME_OBJECT(owner));
		unsigned placed = 0; /* bit k: name k of promotable() */
		for (int i = 0; i < g_mime_header_list_get_count(hl); i++) {
			GMimeHeader *h = g_mime_header_list_get_header_at(hl, i);
			const char *name = g_mime_header_get_name(h);
			const char *raw = g_mime_header_get_raw_value(h);
			int k = promotable(name);
			if (k < 0 || (pol == PD_MAIL_HP_SUBJECT && !ieq(name, "Subject")) || !raw ||
			    strlen(raw) > MAX_PROMOTED) /* a 5 MB Subject stays inside the entity */
				continue;
			GMimeHeader *outer = placed & (1u << k) ? NULL : g_mime_header_list_get_header(ol, name);
			placed |= 1u << k;
			if (outer) {
				g_mime_header_set_raw_value(outer, raw);
				for (int j = g_mime_header_list_get_count(ol) - 1; j >= 0; j--) {
					GMimeHeader *x = g_mime_header_list_get_header_at(ol, j);
					if (x != outer && ieq(g_mime_header_get_name(x), name))
						g_mime_header_list_remove_at(ol, j);
				}
				continue;
			}
			g_mime_header_list_append(ol, name, "", NULL);
			GMimeHeader *nh = g_mime_header_list_get_header_at(ol, g_mime_header_list_get_count(ol) - 1);
			g_mime_header_set_raw_value(nh, raw);
		}
	}
	/* The entity's own section keeps only what describes its content. */
	if (owner)
		for (int i = g_mime_header_list_get_count(hl) - 1; i >= 0; i--)
			if (!is_content_header(g_mime_header_get_name(g_mime_header_list_get_header_at(hl, i))))
				g_mime_header_list_remove_at(hl, i);
	/* Legacy display parts are for MUAs that do not read protected headers. */
	if (protected && GMIME_IS_MULTIPART(entity) && !GMIME_IS_MULTIPART_SIGNED(entity)) {
		GMimeMultipart *mp = GMIME_MULTIPART(entity);
		for (int i = g_mime_multipart_get_count(mp) - 1; i >= 0; i--)
			if (is_legacy_display(g_mime_multipart_get_part(mp, i))) {
				GMimeObject *gone = g_mime_multipart_remove_at(mp, i);
				if (gone)
					g_object_unref(gone);
			}
	}
}

/* A piece's plaintext, as a stream of its own over the spool. */
static GMimeStream *spool_stream(struct piece *p)
{
	struct stat st;
	if (fstat(p->out_fd, &st) < 0)
		return NULL;
	int fd = dup(p->out_fd);
	if (fd < 0)
		return NULL;
	return g_mime_stream_fs_new_with_bounds(fd, 0, st.st_size);
}

/* The decrypted entity of a PGP/MIME piece, parsed from its spool:
 * *ret is NULL when GMime makes none of it.  0 or -EIO. */
static int parse_entity(struct piece *p, GMimeObject **ret)
{
	GMimeStream *s = spool_stream(p);
	if (!s)
		return -EIO;
	GMimeParser *ps = g_mime_parser_new_with_stream(s);
	g_mime_parser_set_persist_stream(ps, TRUE);
	*ret = g_mime_parser_construct_part(ps, NULL);
	g_object_unref(ps);
	g_object_unref(s);
	return 0;
}

/* A part of type/subtype with Content-Disposition: attachment, its
 * content the octets of s, written as they are (s is taken). */
static GMimePart *stream_attachment(GMimeStream *s, const char *type, const char *subtype)
{
	GMimePart *np = g_mime_part_new_with_type(type, subtype);
	GMimeDataWrapper *w = g_mime_data_wrapper_new_with_stream(s, GMIME_CONTENT_ENCODING_DEFAULT);
	g_object_unref(s);
	g_mime_part_set_content(np, w);
	g_object_unref(w);
	g_mime_object_set_disposition(GMIME_OBJECT(np), "attachment");
	return np;
}

static GMimeObject *attachment_part(struct piece *p)
{
	GMimePart *old = GMIME_PART(p->obj);
	GMimeStream *s = spool_stream(p);
	if (!s)
		return NULL;
	/* Always an attachment, whatever the sender wrote: a reader must not
	 * show it inline, next to the sender's text (see walk()). */
	GMimePart *np = stream_attachment(s, "application", "octet-stream");
	const char *fn = g_mime_part_get_filename(old);
	if (fn) {
		char *name = g_strdup(fn);
		for (unsigned i = 0; i < 3; i++)
			if (has_suffix(name, enc_suffixes[i])) {
				name[strlen(name) - 4] = 0;
				break;
			}
		g_mime_part_set_filename(np, name);
		g_free(name);
	}
	g_mime_part_set_content_encoding(np, GMIME_CONTENT_ENCODING_BASE64);
	return GMIME_OBJECT(np);
}

/* Rebuild an inline text part: text around the blocks kept, each decrypted
 * block replaced by its plaintext, blocks that failed left as they were. */
static int rebuild_text(struct run *r, struct text_job *tj)
{
	bool any = false;
	for (unsigned i = 0; i < tj->n; i++)
		any |= r->p[tj->first + i].st == PS_OK;
	if (!any)
		return 0;
	int fd = spool_fd(r->m);
	if (fd < 0)
		return fd;
	GMimeStream *out = g_mime_stream_fs_new(fd);
	gint64 at = 0;
	int err = 0;
	for (unsigned i = 0; i < tj->n && !err; i++) {
		struct piece *p = &r->p[tj->first + i];
		GMimeStream *gap = g_mime_stream_substream(tj->text, at, p->begin);
		err = copy_stream(gap, out);
		g_object_unref(gap);
		if (err)
			break;
		GMimeStream *body = p->st == PS_OK ? spool_stream(p)
		                                   : g_mime_stream_substream(tj->text, p->begin, p->end);
		if (!body) {
			err = -EIO;
			break;
		}
		err = copy_stream(body, out);
		g_object_unref(body);
		at = p->end;
	}
	if (!err) {
		GMimeStream *tail = g_mime_stream_substream(tj->text, at, -1);
		err = copy_stream(tail, out);
		g_object_unref(tail);
	}
	if (err) {
		g_object_unref(out);
		return err;
	}
	gint64 len = g_mime_stream_tell(out);
	GMimeStream *content = g_mime_stream_substream(out, 0, len);
	g_object_unref(out);
	GMimeDataWrapper *w = g_mime_data_wrapper_new_with_stream(content, GMIME_CONTENT_ENCODING_DEFAULT);
	g_object_unref(content);
	g_mime_part_set_content(tj->part, w);
	g_object_unref(w);
	/* format=flowed would join a line of the sender's that ends in a space
	 * with the plaintext's first line (delsp=yes: with no space between),
	 * a URL of theirs running into it: the text is shown as written. */
	GMimeContentType *ct = g_mime_object_get_content_type(GMIME_OBJECT(tj->part));
	const char *fmt = ct ? g_mime_content_type_get_parameter(ct, "format") : NULL;
	if (fmt && !ieq(fmt, "fixed"))
		g_mime_content_type_set_parameter(ct, "format", "fixed");
	GMimeContentEncoding old = g_mime_part_get_content_encoding(tj->part);
	if (old != GMIME_CONTENT_ENCODING_BASE64 && old != GMIME_CONTENT_ENCODING_QUOTEDPRINTABLE)
		g_mime_part_set_content_encoding(tj->part,
			g_mime_part_get_best_content_encoding(tj->part, GMIME_ENCODING_CONSTRAINT_7BIT));
	else
		g_mime_part_set_content_encoding(tj->part, old);
	return 0;
}

/* The report's status and its name. */
static void set_status(struct pd_mail_report *rep, unsigned status)
{
	rep->status = status;
	snprintf(rep->status_name, sizeof(rep->status_name), "%s", pdc_status_name(status));
}

static void note_key(struct pd_mail_report *rep, const struct pdc_info *info)
{
	if (!info->key_fpr_len)
		return;
	for (unsigned i = 0; i < rep->n_keys; i++)
		if (rep->key_fpr_len[i] == info->key_fpr_len &&
		    memcmp(rep->key_fpr[i], info->key_fpr, info->key_fpr_len) == 0)
			return;
	if (rep->n_keys == 8)
		return;
	rep->key_fpr_len[rep->n_keys] = info->key_fpr_len;
	memcpy(rep->key_fpr[rep->n_keys], info->key_fpr, info->key_fpr_len);
	rep->n_keys++;
}

/* After a round: count, and put what decrypted in place.  New roots (the
 * decrypted PGP/MIME entities) are returned for the next round. */
static int settle_round(struct run *r, unsigned from, GArray *next)
{
	struct pd_mail_report *rep = r->rep;
	for (unsigned i = from; i < r->n; i++) {
		struct piece *p = &r->p[i];
		if (p->write_err)
			return p->write_err;
		/* A request that never got its on_done was never answered.  Past
		 * the mail's plaintext budget, or a decrypted entity past the
		 * bounds (its own, not shared with the mail: see struct shape):
		 * LIMIT, and it is not parsed.  A plaintext GMime makes no entity
		 * of (empty, a NUL) fails as a malformed piece.  These depend on
		 * what the plaintext holds, and so does every piece found inside
		 * decrypted content: soft failures, reported only (see
		 * limit_reached()). */
		p->st = p->done ? classify(&p->res) : PS_UNAVAILABLE;
		p->soft = r->round > 0;
		if (p->soft && p->st == PS_UNAVAILABLE) {
			/* Found in a plaintext: a timeout or an overload there may
			 * follow from what it holds (its size, its compression), so it
			 * is no reason to defer the mail either: reported, left. */
			p->st = PS_FAILED;
			if (!p->res.status || p->res.status / 10 != 3)
				p->res.status = PDC_ST_OVERLOADED;
		}
		if (p->over_budget ||
		    (p->st == PS_OK && p->kind == PK_PGPMIME && !shape_fits(&p->lines.n, &r->m->pol))) {
			p->st = PS_FAILED;
			p->res.status = PDC_ST_LIMIT;
			p->soft = true;
		} else if (p->st == PS_OK && p->kind == PK_PGPMIME) {
			int err = parse_entity(p, &p->entity);
			if (err)
				return err;
			if (!p->entity) {
				p->st = PS_FAILED;
				p->res.status = PDC_ST_MALFORMED;
				p->soft = true;
			}
		}
		rep->n_pieces++;
		switch (p->st) {
		case PS_OK:
			rep->n_decrypted++;
			note_key(rep, &p->res.info);
			rep->mdc |= p->res.integrity == PDC_INTEGRITY_MDC;
			rep->aead |= p->res.integrity == PDC_INTEGRITY_AEAD;
			break;
		case PS_NO_KEY:
			rep->n_no_key++;
			break;
		case PS_FAILED:
			rep->n_failed++;
			if (!rep->status)
				set_status(rep, p->res.status ? p->res.status : PDC_ST_SED_REFUSED);
			break;
		default:
			break;
		}
	}
	for (unsigned i = from; i < r->n; i++) {
		struct piece *p = &r->p[i];
		if (p->st != PS_OK || p->kind == PK_INLINE)
			continue;
		GMimeObject *repl;
		if (p->kind == PK_PGPMIME) {
			repl = p->entity;
			p->entity = NULL;
			apply_protected_headers(r, p->at.owner, repl);
			struct root nr = { .obj = g_object_ref(repl), .at = p->at };
			g_array_append_val(next, nr);
		} else {
			repl = attachment_part(p);
			if (!repl)
				return -EIO;
		}
		put_in_place(p->at, p->obj, repl);
		p->obj = NULL;
		g_object_unref(repl);
	}
	for (unsigned i = 0; i < r->n_tj; i++) {
		struct text_job *tj = r->tj[i];
		if (tj->first < from || !tj->part)
			continue;
		int err = rebuild_text(r, tj);
		if (err)
			return err;
		tj->part = NULL;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* One mail */

static void free_run(struct run *r)
{
	for (unsigned i = 0; i < r->n; i++) {
		struct piece *p = &r->p[i];
		if (p->src)
			g_object_unref(p->src);
		if (p->entity)
			g_object_unref(p->entity);
		if (p->out_fd >= 0)
			close(p->out_fd);
	}
	free(r->p);
	for (unsigned i = 0; i < r->n_tj; i++) {
		g_object_unref(r->tj[i]->text);
		free(r->tj[i]);
	}
	if (r->msg)
		g_object_unref(r->msg);
}

/* The value of X-Pgpdecd-Status. */
static void status_value(const struct pd_mail_report *rep, char *buf, size_t n)
{
	if (rep->outcome == PD_MAIL_NOT_ENCRYPTED)
		snprintf(buf, n, "not-encrypted");
	else {
		char emb[32] = "";
		if (rep->n_embedded)
			snprintf(emb, sizeof(emb), "; embedded=%u", rep->n_embedded);
		snprintf(buf, n, "%s; pieces=%u; decrypted=%u; no-key=%u; failed=%u%s%s%s",
		         pd_mail_outcome_name(rep->outcome), rep->n_pieces, rep->n_decrypted,
		         rep->n_no_key, rep->n_failed, emb, rep->status_name[0] ? "; status=" : "",
		         rep->status_name);
	}
}

static void add_result_headers(struct run *r, GMimeMessage *msg)
{
	struct pd_mail_report *rep = r->rep;
	GMimeObject *o = GMIME_OBJECT(msg);
	char buf[256];
	/* Prepended in reverse, so that they read in this order at the top. */
	if (rep->n_decrypted)
		g_mime_object_prepend_header(o, HDR_PREFIX "Signatures", "not-verified", NULL);
	if (rep->mdc || rep->aead)
		g_mime_object_prepend_header(o, HDR_PREFIX "Integrity",
			rep->mdc && rep->aead ? "mdc, aead" : rep->mdc ? "mdc" : "aead", NULL);
	for (int k = (int)rep->n_keys - 1; k >= 0; k--) {
		char hex[65];
		for (unsigned j = 0; j < rep->key_fpr_len[k]; j++)
			snprintf(hex + 2 * j, 3, "%02X", rep->key_fpr[k][j]);
		hex[2 * rep->key_fpr_len[k]] = 0;
		g_mime_object_prepend_header(o, HDR_PREFIX "Key", hex, NULL);
	}
	status_value(rep, buf, sizeof(buf));
	g_mime_object_prepend_header(o, HDR_PREFIX "Status", buf, NULL);
}

/* An octet of a field name as GMime's header parser takes it: anything
 * but a control octet, a blank or the colon; 8-bit octets too. */
static bool name_octet(unsigned char c)
{
	return c > 32 && c != 127 && c != ':';
}

/* Is the field one GMime parses into objects of their own (the header
 * names GMime 3.2 knows: Content-* parameters, addresses, dates, message
 * ids)?  Other fields are kept as one string each.  name: the first
 * octets, lower-cased; n: its length, which may be past what was kept. */
static bool structured_field(const char *name, unsigned n)
{
	static const char *const names[] = {
		"from", "sender", "reply-to", "to", "cc", "bcc", "date", "message-id",
		"in-reply-to", "references", "subject", "mime-version", "received",
		"return-path", "disposition-notification-to",
	};
	if ((n >= 8 && memcmp(name, "content-", 8) == 0) || (n >= 7 && memcmp(name, "resent-", 7) == 0))
		return true;
	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strlen(names[i]) == n && memcmp(name, names[i], n) == 0)
			return true;
	return false;
}

/* The items of a structured value, counted so that each object GMime may
 * make of it has one of its own: a word of letters and digits, and every
 * other octet that is not a blank (GMime's tokenizers split at specials,
 * and its date parser at "-", "/" and ","). */
static bool item_word(unsigned char c)
{
	return g_ascii_isalnum(c);
}

/* A field begins at its colon: structured or not by its name. */
static int field_begins(struct line_count *lc)
{
	lc->n.fields++;
	lc->in_field = true;
	lc->structured = structured_field(lc->name, lc->nlen);
	lc->word = false;
	return LC_VALUE;
}

static void count_lines(const char *p, size_t n, struct line_count *lc)
{
	int st = lc->state;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];
		lc->eight_bit |= c > 127;
		lc->nul |= c == 0;
		lc->bare_cr |= lc->cr && c != '\n';
		lc->cr = c == '\r';
		if (c == '\n')
			lc->llen = 0;
		else if (++lc->llen > 998 + (c == '\r')) /* a CR of a CRLF does not count */
			lc->long_line = true;
		if (c == '\n') {
			if (st == LC_START) /* an empty line ends a header section */
				lc->in_field = false;
			st = LC_START;
			continue;
		}
		switch (st) {
		case LC_START:
			lc->nlen = 0;
			if (c == ' ' || c == '\t') {
				/* A continuation of a field; or, where none is open,
				 * blanks that GMime may take before a colon as a name. */
				st = lc->in_field ? LC_VALUE : LC_NAME_WS;
				lc->word = false;
				break;
			}
			lc->in_field = false; /* any other start ends the field (a CR too: CRLF) */
			if (c == '-')
				st = LC_DASH;
			else
				st = name_octet(c) ? LC_NAME : LC_INSIDE;
			if (st != LC_INSIDE)
				lc->name[lc->nlen++] = (char)g_ascii_tolower(c);
			break;
		case LC_DASH:
			if (c == '-') {
				lc->n.dashes++;
				st = LC_INSIDE;
				break;
			}
			/* a name that starts with one dash */
			__attribute__((fallthrough));
		case LC_NAME:
		case LC_NAME_WS:
			if (c == ':')
				st = field_begins(lc);
			else if (c == ' ' || c == '\t')
				st = LC_NAME_WS;
			else if (st == LC_NAME_WS || !name_octet(c))
				st = LC_INSIDE;
			else {
				st = LC_NAME;
				if (lc->nlen < sizeof(lc->name))
					lc->name[lc->nlen] = (char)g_ascii_tolower(c);
				if (lc->nlen < UINT_MAX)
					lc->nlen++;
			}
			break;
		case LC_VALUE:
			if (!lc->structured)
				break;
			if (item_word(c)) {
				lc->n.items += !lc->word;
				lc->word = true;
			} else {
				lc->n.items += c != ' ' && c != '\t' && c != '\r';
				lc->word = false;
			}
			break;
		default:
			break;
		}
	}
	lc->state = st;
}

/* Is one text's shape within the policy's bounds?  (Else: LIMIT.) */
static bool shape_fits(const struct shape *s, const struct pd_mail_policy *pol)
{
	return s->dashes <= pol->max_mime_parts && s->fields <= pol->max_header_fields &&
	       s->items <= pol->max_header_items;
}

/* The input as a seekable spool of our own, line ends made LF (GMime's
 * dos2unix filter), read from a file, a pipe or a socket alike.  Its shape
 * is counted on the way (count_lines()), so that what GMime will build in
 * memory is bounded before it is built. */
static int spool_input(struct pd_mail *m, int in_fd, GMimeStream **ret, uint64_t *ret_len,
                       struct line_count *ret_lines)
{
	int fd = spool_fd(m);
	if (fd < 0)
		return fd;
	int wfd = dup(fd);
	if (wfd < 0) {
		close(fd);
		return -errno;
	}
	/* Written through a pipe stream: its flush does not fsync a spool. */
	GMimeStream *w = g_mime_stream_pipe_new(wfd);
	GMimeStream *filt = g_mime_stream_filter_new(w);
	g_object_unref(w);
	GMimeFilter *d2u = g_mime_filter_dos2unix_new(FALSE);
	g_mime_stream_filter_add(GMIME_STREAM_FILTER(filt), d2u);
	g_object_unref(d2u);
	char buf[65536];
	uint64_t total = 0;
	struct line_count lc = { .state = LC_START };
	int err = 0;
	for (;;) {
		ssize_t n = read(in_fd, buf, sizeof(buf));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			err = -errno;
			break;
		}
		if (n == 0)
			break;
		total += (uint64_t)n;
		count_lines(buf, (size_t)n, &lc);
		if (g_mime_stream_write(filt, buf, (size_t)n) < 0) {
			err = -EIO;
			break;
		}
	}
	if (!err && g_mime_stream_flush(filt) < 0)
		err = -EIO;
	g_object_unref(filt);
	explicit_bzero(buf, sizeof(buf));
	if (err) {
		close(fd);
		return err;
	}
	if (lseek(fd, 0, SEEK_SET) < 0) { /* the stream's bounds start where the fd is */
		err = -errno;
		close(fd);
		return err;
	}
	*ret = g_mime_stream_fs_new(fd);
	*ret_len = total;
	*ret_lines = lc;
	return 0;
}

/* Every field of a header list is written as one field.  GMime keeps raw
 * values as C strings: a NUL octet cuts a value short, line end included,
 * and the field ran into the empty line that ends the section, so that the
 * body's first lines read as header fields (found by fuzz-mail).  A bare CR
 * (dos2unix keeps it) ends a line for parsers that split at CR: a field
 * "Subject: hi\rX-Pgpdecd-Status: ..." forged one of ours (found in
 * review).  So each value ends in its line end, and a CR in it becomes a
 * space; the section is written with LF line ends only. */
static void end_fields(GMimeObject *o)
{
	GMimeHeaderList *hl = g_mime_object_get_header_list(o);
	for (int i = 0; i < g_mime_header_list_get_count(hl); i++) {
		GMimeHeader *h = g_mime_header_list_get_header_at(hl, i);
		const char *raw = g_mime_header_get_raw_value(h);
		size_t n = raw ? strlen(raw) : 0;
		if (n && raw[n - 1] == '\n' && !strchr(raw, '\r'))
			continue;
		char *fixed = g_strconcat(raw ? raw : "", n && raw[n - 1] == '\n' ? "" : "\n", NULL);
		for (char *c = fixed; *c; c++)
			if (*c == '\r')
				*c = ' ';
		g_mime_header_set_raw_value(h, fixed);
		g_free(fixed);
	}
}

/* Write msg to out_fd (a file, a pipe or a socket). */
static int write_message(GMimeMessage *msg, int out_fd, uint64_t *ret_len)
{
	end_fields(GMIME_OBJECT(msg));
	GMimeObject *body = g_mime_message_get_mime_part(msg);
	if (body)
		end_fields(body);
	int ofd = dup(out_fd);
	if (ofd < 0)
		return -errno;
	GMimeStream *os = g_mime_stream_pipe_new(ofd);
	GMimeFormatOptions *fo = g_mime_format_options_clone(NULL);
	g_mime_format_options_set_newline_format(fo, GMIME_NEWLINE_FORMAT_UNIX);
	ssize_t n = g_mime_object_write_to_stream(GMIME_OBJECT(msg), fo, os);
	g_mime_format_options_free(fo);
	g_object_unref(os);
	if (n < 0)
		return -EIO;
	*ret_len = (uint64_t)n;
	return 0;
}

/* A mail too complex to parse, passed on by policy: its header section
 * copied without fields of our names (and their continuation lines), our
 * status on top, the body as it is.  GMime is not asked to build it, and
 * lines are read in bounded pieces. */
static int write_unparsed(GMimeStream *spool, int out_fd, const struct pd_mail_report *rep,
                          uint64_t *ret_len)
{
	int ofd = dup(out_fd);
	if (ofd < 0)
		return -errno;
	GMimeStream *os = g_mime_stream_pipe_new(ofd);
	char line[1024];
	status_value(rep, line, sizeof(line));
	int err = g_mime_stream_printf(os, HDR_PREFIX "Status: %s\n", line) < 0 ? -EIO : 0;
	g_mime_stream_reset(spool);
	GMimeStream *in = g_mime_stream_buffer_new(spool, GMIME_STREAM_BUFFER_BLOCK_READ);
	bool dropping = false, start = true;
	while (!err) {
		ssize_t n = g_mime_stream_buffer_gets(in, line, sizeof(line));
		if (n <= 0)
			break;
		bool end_of_section = start && line[0] == '\n';
		if (start && !end_of_section && line[0] != ' ' && line[0] != '\t')
			dropping = g_ascii_strncasecmp(line, HDR_PREFIX, sizeof(HDR_PREFIX) - 1) == 0;
		/* a bare CR ends a line for some parsers: see end_fields() */
		for (ssize_t k = 0; k < n; k++)
			if (line[k] == '\r' || line[k] == 0)
				line[k] = ' ';
		if (!dropping || end_of_section)
			err = g_mime_stream_write(os, line, (size_t)n) < 0 ? -EIO : 0;
		if (end_of_section)
			break;
		start = line[n - 1] == '\n';
	}
	if (!err)
		err = copy_stream(in, os);
	gint64 n = g_mime_stream_tell(spool);
	g_object_unref(in);
	g_object_unref(os);
	*ret_len = n > 0 ? (uint64_t)n : 0;
	return err;
}

/* What a policy action makes of a mail. */
static enum pd_mail_verdict verdict_of(enum pd_mail_action a)
{
	return a == PD_MAIL_REJECT ? PD_MAIL_BOUNCE : a == PD_MAIL_QUARANTINE ? PD_MAIL_HOLD : PD_MAIL_WRITTEN;
}

/* The decryption rounds over a parsed mail; 0 or a local error. */
static int decrypt_mail(struct run *r)
{
	int err = 0;
	GArray *roots = g_array_new(FALSE, FALSE, sizeof(struct root));
	GMimeObject *body = g_mime_message_get_mime_part(r->msg);
	if (body) {
		struct root top = { .obj = g_object_ref(body), .at = { .owner = r->msg } };
		g_array_append_val(roots, top);
	}
	for (unsigned depth = 0; roots->len; depth++) {
		unsigned from = r->n;
		GArray *next = g_array_new(FALSE, FALSE, sizeof(struct root));
		r->round = depth;
		for (unsigned i = 0; i < roots->len && !err; i++) {
			struct root *rt = &g_array_index(roots, struct root, i);
			err = walk(r, rt->obj, rt->at, 0, true);
		}
		if (!err)
			err = r->nomem;
		if (!err && r->n > from && depth > r->m->pol.max_depth) {
			/* Encrypted deeper than max_depth: left as it is, and LIMIT
			 * (found in a plaintext: reported only, see limit_reached). */
			r->inner_limit = true;
			for (unsigned i = from; i < r->n; i++)
				if (r->p[i].src)
					g_object_unref(r->p[i].src);
			r->n = from;
		}
		if (!err && r->n > from)
			err = decrypt_round(r, from);
		if (!err && r->n > from)
			err = settle_round(r, from, next);
		for (unsigned i = 0; i < roots->len; i++)
			g_object_unref(g_array_index(roots, struct root, i).obj);
		g_array_free(roots, TRUE);
		roots = next;
		if (err)
			break;
	}
	for (unsigned i = 0; i < roots->len; i++)
		g_object_unref(g_array_index(roots, struct root, i).obj);
	g_array_free(roots, TRUE);
	return err;
}

/* The outcome, the status and the verdict, from the pieces' states. */
static void decide(struct run *r)
{
	struct pd_mail_report *rep = r->rep;
	bool limit = r->over_limit || r->inner_limit;
	if (limit) {
		rep->n_failed++;
		if (!rep->status)
			set_status(rep, PDC_ST_LIMIT);
	}
	for (unsigned i = 0; i < r->n; i++)
		if (r->p[i].st == PS_UNAVAILABLE) {
			const struct pdc_result *res = &r->p[i].res;
			rep->outcome = PD_MAIL_UNAVAILABLE;
			rep->status = res->status;
			rep->err = res->err;
			snprintf(rep->status_name, sizeof(rep->status_name), "%s",
			         res->errname[0] ? res->errname : "UNAVAILABLE");
			rep->verdict = PD_MAIL_TEMPFAIL;
			return;
		}
	if (rep->n_pieces == 0 && !limit)
		rep->outcome = rep->n_embedded ? PD_MAIL_EMBEDDED : PD_MAIL_NOT_ENCRYPTED;
	else if (rep->n_decrypted == rep->n_pieces && !limit)
		rep->outcome = rep->n_embedded ? PD_MAIL_PARTLY : PD_MAIL_DECRYPTED;
	else if (rep->n_decrypted)
		rep->outcome = PD_MAIL_PARTLY;
	else if (rep->n_failed)
		rep->outcome = PD_MAIL_FAILED;
	else
		rep->outcome = PD_MAIL_NO_KEY;
	/* status names the first failure; else the first piece no key opened. */
	if (!rep->n_failed && rep->n_no_key)
		for (unsigned i = 0; i < r->n; i++)
			if (r->p[i].st == PS_NO_KEY) {
				set_status(rep, r->p[i].res.status); /* NO_KEY, or NO_PASSWORD */
				break;
			}
	/* The failure policy answers only for failures of the mail as
	 * received: a soft one (what a plaintext holds) is never told. */
	bool hard = r->over_limit;
	for (unsigned i = 0; i < r->n; i++)
		hard |= r->p[i].st == PS_FAILED && !r->p[i].soft;
	enum pd_mail_action act = PD_MAIL_PASS;
	if (hard)
		act = r->m->pol.on_failure;
	else if (rep->outcome == PD_MAIL_NO_KEY)
		act = r->m->pol.on_no_key;
	rep->verdict = verdict_of(act);
}

/* The original, attached after the decrypted content as message/rfc822:
 * the spool as it came (line ends LF), not parsed again, so that GMime
 * builds nothing for it beyond what was counted (a second parse doubled
 * what a mail under the bounds took). */
static int attach_original(GMimeMessage *msg, GMimeStream *spool, const struct line_count *lc)
{
	gint64 len = g_mime_stream_length(spool);
	GMimeStream *s = len < 0 ? NULL : g_mime_stream_substream(spool, 0, len);
	if (!s)
		return -EIO;
	GMimePart *orig = stream_attachment(s, "message", "rfc822");
	/* message/rfc822 is 7bit unless it says otherwise (RFC 2046 5.2.1),
	 * and the original is attached as it came.  7bit and 8bit data have
	 * no NUL, lines of at most 998 octets and no CR but in CRLF (RFC 2045
	 * 2.7, 2.8; the spool keeps a bare CR): otherwise it is binary. */
	bool binary = lc->nul || lc->bare_cr || lc->cr || lc->long_line;
	if (binary || lc->eight_bit)
		g_mime_part_set_content_encoding(orig, binary ? GMIME_CONTENT_ENCODING_BINARY : GMIME_CONTENT_ENCODING_8BIT);
	GMimeMultipart *mixed = g_mime_multipart_new_with_subtype("mixed");
	g_mime_multipart_add(mixed, g_mime_message_get_mime_part(msg));
	g_mime_multipart_add(mixed, GMIME_OBJECT(orig));
	g_object_unref(orig);
	g_mime_message_set_mime_part(msg, GMIME_OBJECT(mixed));
	g_object_unref(mixed);
	g_mime_object_prepend_header(GMIME_OBJECT(msg), HDR_PREFIX "Original", "attached", NULL);
	return 0;
}

int pd_mail_process(struct pd_mail *m, int in_fd, int out_fd, struct pd_mail_report *ret)
{
	struct pd_mail_report rep = { 0 };
	struct run r = { .m = m, .rep = &rep };
	GMimeStream *spool = NULL;
	struct line_count lines = { 0 };
	int err = spool_input(m, in_fd, &spool, &rep.bytes_in, &lines);
	if (err)
		return err;
	if (!shape_fits(&lines.n, &m->pol)) {
		/* More parts or fields than GMime may build: not parsed, LIMIT. */
		r.over_limit = true;
	} else {
		GMimeParser *ps = g_mime_parser_new_with_stream(spool);
		g_mime_parser_set_persist_stream(ps, TRUE);
		r.msg = g_mime_parser_construct_message(ps, NULL);
		g_object_unref(ps);
		if (!r.msg) {
			/* Not a message GMime can parse: nothing we can decrypt in it. */
			err = -EINVAL;
			goto out;
		}
		remove_ours(GMIME_OBJECT(r.msg));
		err = decrypt_mail(&r);
		if (err)
			goto out;
	}
	decide(&r);
	if (rep.verdict != PD_MAIL_WRITTEN && rep.verdict != PD_MAIL_HOLD)
		goto out;
	if (!r.msg) {
		err = write_unparsed(spool, out_fd, &rep, &rep.bytes_out);
		goto out;
	}
	if (m->pol.keep_original && rep.n_decrypted && (err = attach_original(r.msg, spool, &lines)))
		goto out;
	add_result_headers(&r, r.msg);
	err = write_message(r.msg, out_fd, &rep.bytes_out);
out:
	free_run(&r);
	g_object_unref(spool);
	if (!err)
		*ret = rep;
	return err;
}

/* ------------------------------------------------------------------ */
/* The header fields of a written message */

static int by_offset(const void *a, const void *b)
{
	gint64 x = g_mime_header_get_offset(*(GMimeHeader *const *)a);
	gint64 y = g_mime_header_get_offset(*(GMimeHeader *const *)b);
	return x < y ? -1 : x > y;
}

int pd_mail_header_fields(int fd, int (*cb)(void *arg, const char *name, const char *value),
                          void *arg, int64_t *ret_body_off)
{
	int dfd = dup(fd);
	if (dfd < 0)
		return -errno;
	if (lseek(dfd, 0, SEEK_SET) < 0) {
		int err = -errno;
		close(dfd);
		return err;
	}
	struct stat st;
	if (fstat(dfd, &st) < 0) {
		int err = -errno;
		close(dfd);
		return err;
	}
	GMimeStream *s = g_mime_stream_fs_new(dfd);
	/* Only the header section goes to GMime, not the whole mail (which may
	 * hold 10,000 parts): it ends at the first empty line. */
	gint64 section = st.st_size, body = st.st_size;
	{
		GMimeStream *sub = g_mime_stream_substream(s, 0, st.st_size);
		GMimeStream *buf = g_mime_stream_buffer_new(sub, GMIME_STREAM_BUFFER_BLOCK_READ);
		char line[1024];
		gint64 at = 0;
		bool start = true;
		ssize_t n;
		while ((n = g_mime_stream_buffer_gets(buf, line, sizeof(line))) > 0) {
			if (start && (line[0] == '\n' || (n == 2 && line[0] == '\r' && line[1] == '\n'))) {
				section = at;
				body = at + n; /* after the empty line */
				break;
			}
			at += n;
			start = line[n - 1] == '\n';
		}
		g_object_unref(buf);
		g_object_unref(sub);
	}
	GMimeStream *head = g_mime_stream_substream(s, 0, section);
	GMimeParser *ps = g_mime_parser_new_with_stream(head);
	GMimeMessage *msg = g_mime_parser_construct_message(ps, NULL);
	g_object_unref(ps);
	g_object_unref(head);
	if (!msg) {
		g_object_unref(s);
		return -EBADMSG;
	}
	/* GMime keeps the Content-* fields of the top level on the body's
	 * part; both lists together, in file order, are the header section. */
	GPtrArray *all = g_ptr_array_new();
	GMimeObject *objs[2] = { GMIME_OBJECT(msg), g_mime_message_get_mime_part(msg) };
	for (unsigned k = 0; k < 2; k++) {
		if (!objs[k])
			continue;
		GMimeHeaderList *hl = g_mime_object_get_header_list(objs[k]);
		for (int i = 0; i < g_mime_header_list_get_count(hl); i++)
			g_ptr_array_add(all, g_mime_header_list_get_header_at(hl, i));
	}
	g_ptr_array_sort(all, by_offset);
	int err = 0;
	for (unsigned i = 0; i < all->len && !err; i++) {
		GMimeHeader *h = g_ptr_array_index(all, i);
		const char *raw = g_mime_header_get_raw_value(h);
		if (!raw) {
			err = -EBADMSG;
			break;
		}
		char *v = g_strdup(raw);
		size_t n = strlen(v);
		if (n && v[n - 1] == '\n')
			v[--n] = 0;
		if (n && v[n - 1] == '\r')
			v[--n] = 0;
		err = cb(arg, g_mime_header_get_name(h), v);
		g_free(v);
	}
	g_ptr_array_free(all, TRUE);
	g_object_unref(msg);
	g_object_unref(s);
	if (err)
		return err;
	*ret_body_off = body;
	return 0;
}
