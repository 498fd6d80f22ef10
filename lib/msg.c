/* SPDX-License-Identifier: MIT */
/*
 * The message pipeline: composes the stages of one OpenPGP message.
 *
 *   input buffer -> [armor] -> layer 0 (outer packets: ESKs, container)
 *                -> container (SEIPD v1 / v2 / OCB / SED)  -> layer 1 (packets)
 *                -> [compressed -> inflate]                -> layer 2 ...
 *                -> literal body -> caller's output buffer
 *
 * Each layer holds a bounded buffer of its packet stream and a packet
 * reader (header, partial lengths, current packet state).  A layer whose
 * current packet is a container or compressed packet runs a transform that
 * fills the buffer of the next layer.  pd_msg_step() sweeps the layers until
 * nothing moves: the deepest layer parses, the ones above feed it.  Memory
 * is bounded: one buffer per layer, the depth capped, the collected packets
 * (ESKs, one-pass signatures, signature heads) capped in size.
 *
 * Errors from the inner layers of a SEIPD v1 or SED container arrive before
 * the MDC could be checked, about octets nobody has authenticated: an
 * attacker who replays a captured message with chosen CFB blocks would read
 * the plaintext back from them.  So nothing observable may depend on them.
 * Such an error is deferred (defer()): the inner layers are dropped, the
 * container is decrypted and hashed to its end as if nothing had happened,
 * and then the MDC decides: a mismatch (always, for a forged message) gives
 * PD_EINTEGRITY with the one fixed sentence INTEGRITY_SENTENCE, a match the
 * real error.  SED never authenticates: its deferred errors are always the
 * fixed integrity failure.  On any failure the message information is
 * scrubbed of everything the decrypted octets or the key trials decided
 * (scrub_info()), so a failed result tells no more than the request held.
 * The memory a deferred message had drawn from its budget stays drawn until
 * it is freed (m->draining), so the budget's figures do not show when the
 * error came either.
 */
#include <gcrypt.h>

#include "armor.h"
#include "buf.h"
#include "pgp/algo.h"
#include "pgp/inflate.h"
#include "pgp/key.h"
#include "pgp/seipd.h"
#include "pgp/trials.h"

#define BUF_SIZE (64 * 1024) /* largest buffer of a layer (and of the input) */
#define BUF_MIN (16 * 1024)  /* first size: small messages never need more */
#define COLL_MAX 8192      /* largest ESK / one-pass / signature head collected */
#define LAYERS_MAX 16      /* hard ceiling, whatever the configured depth */
#define CHDR_MAX 64        /* container header (version + AEAD parameters) */

/* The one sentence of a SEIPD v1 / SED integrity failure, whatever the
 * unauthenticated octets held (see the top of this file). */
#define INTEGRITY_SENTENCE "integrity check failed: the message was modified, or the session key is wrong"

/* Internal: an error inside unauthenticated data was deferred.  Unwinds to
 * pd_msg_step(), which drops the inner layers; never returned by the API. */
#define PD_EDEFER (-4099)

/* Buffers (pd_buf, buf.h) start at BUF_MIN and double up to BUF_SIZE only
 * when a producer fills all the room it is given, i.e. for bulk data: a
 * 4 KiB message touches (and later wipes) a few KiB, not 64 KiB per layer,
 * and its allocations stay small enough that malloc does not trim and
 * re-grow the heap around every message. */

enum lstate {
	L_HEADER,       /* expecting a packet header */
	L_COLLECT,      /* copying body octets into m->coll */
	L_SKIP,         /* discarding the rest of a body */
	L_LITERAL,      /* streaming a literal body to the caller */
	L_NEED_KEY,     /* layer 0: container header read, waiting for the session key */
	L_XFORM,        /* feeding the body through a transform into the child layer */
	L_XFORM_DONE,   /* transform finished, the child layer still parsing */
	L_DRAIN,        /* layer 1 after a deferred error: discard until the MDC decides */
};

enum coll_kind { C_PKESK, C_SKESK, C_CONTAINER, C_LITHDR, C_OPS, C_SIG, C_COMPRESSED };
enum xkind { X_NONE, X_CFB, X_AEAD, X_INFLATE };

struct layer {
	struct pd_buf *in;        /* this layer's packet stream */
	struct pd_buf own;        /* storage for it (layer 0 uses the input buffer when binary) */
	bool in_eof;           /* the producer has finished */
	uint64_t off;          /* stream octets consumed, for error offsets */
	enum lstate st;
	/* current packet */
	uint8_t tag;
	uint64_t pkt_off;
	uint64_t part_left;
	bool partial, indet;
	uint32_t nparts;
	/* collection */
	enum coll_kind ckind;
	size_t cwant, chave;
	bool cwhole;           /* collect the whole body (up to COLL_MAX) */
	/* transform into the child layer */
	enum xkind xk;
	struct pd_inflate *z;
	uint64_t zmem;         /* budget taken for z */
	uint64_t bufmem;       /* budget taken for own (layers >= 1) */
	uint64_t x_in, x_out;
	bool x_ended;          /* the compressed stream ended; rest of the body ignored */
};

struct pd_msg {
	struct pd_limits lim;
	struct pd_msginfo info;
	char detail[512];
	int err;
	int deferred;          /* error met in unauthenticated data, reported after the MDC */
	char deferred_detail[512];
	bool done;
	bool input_closed;
	int mode;              /* -1 unknown, 0 binary, 1 armored */
	bool armor_end;
	struct pd_armor armor;
	struct pd_buf raw;        /* caller's input */
	struct layer layers[LAYERS_MAX];
	size_t depth;          /* layers in use */
	uint8_t *coll;         /* COLL_MAX octets */
	size_t coll_hw;        /* octets of coll ever written (wiped at the end) */
	uint32_t npackets;
	/* outer layer */
	struct pd_esk *esks;
	size_t n_esk;
	size_t n_esk_late;     /* of them kept past max_esk (they name a key of ring) */
	const struct pd_keyring *ring; /* pd_msg_set_keyring(), or NULL */
	bool container_seen, container_done;
	uint8_t chdr[CHDR_MAX];
	size_t chdr_len;
	struct pd_sesskey *sk; /* secure memory */
	bool have_key;
	char *password;        /* secure memory */
	size_t password_len;
	char *bind;            /* pd_msg_bind(): n_bind normalised values, a NUL after each */
	size_t bind_len, n_bind;
	struct pd_cfb *cfb;
	struct pd_aead *aead;
	bool metadata_pending;
	uint32_t n_ops;
	const int *cancel;     /* caller's flag, read atomically between costly steps */
	struct pd_budget *budget; /* shared memory budget, or NULL */
	uint64_t mem;          /* taken from it, in all */
	bool draining;         /* a deferred error: memory freed stays drawn until pd_msg_free */
};

_Static_assert(PD_MSG_BASE_MEMORY == 2 * BUF_SIZE + COLL_MAX, "PD_MSG_BASE_MEMORY is the raw, armor and collector buffers");

/* ------------------------------------------------------------------ */
/* buffers */

/* A producer filled all the room it had: the stream is bulk, go bigger
 * (failure is not an error: the buffer simply stays smaller). */
static void buf_filled(struct pd_buf *b)
{
	if (b->cap < BUF_SIZE)
		pd_buf_grow(b, b->cap * 2, BUF_SIZE);
}

static int buf_init(struct pd_buf *b)
{
	return pd_buf_init(b, BUF_MIN) < 0 ? -ENOMEM : 0;
}

/* ------------------------------------------------------------------ */
/* errors */

/* A failed message tells nothing the request did not hold: clear what the
 * decrypted octets (literal, compression, signatures, plaintext length)
 * and the key trials (which key, its algorithm, the session key's cipher
 * for CFB containers) decided.  What stays came from the ciphertext's
 * outer packets: armor, container and AEAD header, recipients, SKESK count,
 * octets in. */
static void scrub_info(struct pd_msg *m)
{
	struct pd_msginfo *i = &m->info;
	bool aead = i->container == 20 || (i->container == 18 && i->container_version == 2);

	i->pk_algo = 0;
	i->key_fpr_len = 0;
	memset(i->key_fpr, 0, sizeof(i->key_fpr));
	if (!aead)
		i->sym_algo = 0; /* from the (unauthenticated) session key */
	i->n_compression = 0;
	memset(i->compression, 0, sizeof(i->compression));
	i->has_literal = false;
	i->literal_format = 0;
	i->literal_name_len = 0;
	memset(i->literal_name, 0, sizeof(i->literal_name));
	i->literal_date = 0;
	i->n_issuers = 0;
	memset(i->issuers, 0, sizeof(i->issuers));
	i->n_signatures = 0;
	i->integrity = PD_INTEGRITY_NONE;
	i->bytes_out = 0;
	/* How far the engine had read when it failed depends on how fast the
	 * layers below consumed, i.e. on the decrypted octets (octets after
	 * the container, padding for instance, show it): 0 too. */
	i->bytes_in = 0;
}

static void vfail(struct pd_msg *m, int err, const char *fmt, va_list ap)
{
	vsnprintf(m->detail, sizeof(m->detail), fmt, ap);
	m->err = err;
	scrub_info(m);
}

__attribute__((format(printf, 3, 4)))
static int fail(struct pd_msg *m, int err, const char *fmt, ...)
{
	if (m->err)
		return m->err;
	va_list ap;
	va_start(ap, fmt);
	vfail(m, err, fmt, ap);
	va_end(ap);
	return err;
}

/* Are the octets of layer li unauthenticated?  Layers >= 1 of a SEIPD v1
 * container until its MDC verified, of a SED container always. */
static bool unauthenticated(const struct pd_msg *m, size_t li)
{
	if (li < 1 || m->layers[0].xk != X_CFB)
		return false;
	return !m->container_done || m->info.container == 9;
}

/* An error about the octets of layer li.  Unauthenticated: deferred while
 * the container still runs (the first one is kept), the fixed integrity
 * failure once it ended (SED); otherwise reported at once. */
__attribute__((format(printf, 4, 5)))
static int fail_at(struct pd_msg *m, size_t li, int err, const char *fmt, ...)
{
	if (m->err)
		return m->err;
	va_list ap;
	va_start(ap, fmt);
	if (!unauthenticated(m, li)) {
		vfail(m, err, fmt, ap);
	} else if (m->container_done) {
		err = fail(m, PD_EINTEGRITY, INTEGRITY_SENTENCE);
	} else {
		if (!m->deferred) {
			m->deferred = err;
			vsnprintf(m->deferred_detail, sizeof(m->deferred_detail), fmt, ap);
		}
		err = PD_EDEFER;
	}
	va_end(ap);
	return err;
}

/* A parse error in layer li's packet stream, with where it happened. */
static int fail_inner(struct pd_msg *m, size_t li, int err, const char *what)
{
	return fail_at(m, li, err, "%s: %s (layer %zu, offset %llu)", pd_strerror(err), what, li,
	               (unsigned long long)m->layers[li].pkt_off);
}

/* ------------------------------------------------------------------ */
/* memory budget */

/* Take n octets of the shared budget for what the message is about to
 * allocate: 0, or -ENOMEM when it does not fit. */
static int mem_take(struct pd_msg *m, uint64_t n)
{
	if (!m->budget || !n)
		return 0;
	if (pd_budget_take(m->budget, n) < 0)
		return -ENOMEM;
	m->mem += n;
	return 0;
}

static void mem_give(struct pd_msg *m, uint64_t n)
{
	if (!m->budget || !n || m->draining)
		return;
	pd_budget_give(m->budget, n);
	m->mem -= n;
}

/* Free layer L's decompressor and give its memory back. */
static void zfree(struct pd_msg *m, struct layer *L)
{
	L->z = pd_inflate_free(L->z);
	mem_give(m, L->zmem);
	L->zmem = 0;
}

/* ------------------------------------------------------------------ */
/* packet headers (RFC 9580 §4.2) */

/* New-format length at p: 0 ok, PD_EAGAIN if more octets are needed. */
static int parse_newlen(const uint8_t *p, size_t av, uint64_t *len, bool *partial, size_t *hlen)
{
	if (av < 1)
		return PD_EAGAIN;
	uint8_t o = p[0];
	*partial = false;
	if (o < 192) {
		*len = o;
		*hlen = 1;
	} else if (o < 224) {
		if (av < 2)
			return PD_EAGAIN;
		*len = ((uint64_t)(o - 192) << 8) + p[1] + 192;
		*hlen = 2;
	} else if (o == 255) {
		if (av < 5)
			return PD_EAGAIN;
		*len = pd_be32(p + 1);
		*hlen = 5;
	} else {
		*len = 1ull << (o & 0x1F);
		*partial = true;
		*hlen = 1;
	}
	return 0;
}

static bool may_be_partial(uint8_t tag)
{
	return tag == 8 || tag == 9 || tag == 11 || tag == 18 || tag == 20;
}

/* Parse the next header of layer li: 0 ok, 1 clean end of the stream,
 * PD_EAGAIN, or an error. */
static int parse_header(struct pd_msg *m, size_t li)
{
	struct layer *L = &m->layers[li];
	size_t av = pd_buf_len(L->in);
	const uint8_t *p = pd_buf_data(L->in);
	uint64_t len = 0;
	size_t hlen;
	bool partial = false, indet = false;
	uint8_t tag;

	if (!av)
		return L->in_eof ? 1 : PD_EAGAIN;
	L->pkt_off = L->off;
	if (!(p[0] & 0x80))
		return fail_inner(m, li, PD_EMALFORMED, "invalid packet header octet");
	if (p[0] & 0x40) {
		tag = p[0] & 0x3F;
		int r = parse_newlen(p + 1, av - 1, &len, &partial, &hlen);
		if (r == PD_EAGAIN)
			return L->in_eof ? fail_inner(m, li, PD_ETRUNCATED, "truncated packet header") : r;
		hlen += 1;
	} else {
		tag = (p[0] >> 2) & 0x0F;
		size_t lt = p[0] & 3;
		static const size_t nlen[4] = { 1, 2, 4, 0 };
		hlen = 1 + nlen[lt];
		if (av < hlen)
			return L->in_eof ? fail_inner(m, li, PD_ETRUNCATED, "truncated packet header") : PD_EAGAIN;
		if (lt == 0)
			len = p[1];
		else if (lt == 1)
			len = pd_be16(p + 1);
		else if (lt == 2)
			len = pd_be32(p + 1);
		else
			indet = true;
	}
	if (tag == 0)
		return fail_inner(m, li, PD_EMALFORMED, "packet tag 0");
	if ((partial || indet) && !may_be_partial(tag))
		return fail_inner(m, li, PD_EMALFORMED, "partial or indeterminate length on a packet that must not have one");
	/* Session key packets before the container cost their octets and a
	 * parse (add_esk() keeps at most max_esk of them, and ours): they do
	 * not count against max_packets, which bounds the packets of the
	 * layers the message's own octets multiply (compression). */
	if (!(li == 0 && !m->container_seen && (tag == 1 || tag == 3)) && ++m->npackets > m->lim.max_packets)
		return fail_at(m, li, PD_ELIMIT, "limit exceeded: more than %u packets", m->lim.max_packets);
	pd_buf_consume(L->in, hlen);
	L->off += hlen;
	L->tag = tag;
	L->part_left = len;
	L->partial = partial;
	L->indet = indet;
	L->nparts = 1;
	return 0;
}

/* Contiguous octets of the current body: 1 with *n > 0, 0 when the body has
 * ended, PD_EAGAIN, or an error.  Reads continuation length headers. */
static int body_peek(struct pd_msg *m, size_t li, const uint8_t **p, size_t *n)
{
	struct layer *L = &m->layers[li];
	for (;;) {
		size_t av = pd_buf_len(L->in);
		if (L->indet) {
			if (av) {
				*p = pd_buf_data(L->in);
				*n = av;
				return 1;
			}
			return L->in_eof ? 0 : PD_EAGAIN;
		}
		if (L->part_left) {
			if (!av)
				return L->in_eof ? fail_inner(m, li, PD_ETRUNCATED, "packet body truncated") : PD_EAGAIN;
			*p = pd_buf_data(L->in);
			*n = (size_t)PD_MIN((uint64_t)av, L->part_left);
			return 1;
		}
		if (!L->partial)
			return 0;
		uint64_t len;
		bool partial;
		size_t hlen;
		int r = parse_newlen(pd_buf_data(L->in), av, &len, &partial, &hlen);
		if (r == PD_EAGAIN)
			return L->in_eof ? fail_inner(m, li, PD_ETRUNCATED, "truncated partial length") : r;
		if (++L->nparts > m->lim.max_partials)
			return fail_at(m, li, PD_ELIMIT, "limit exceeded: more than %u partial-length parts",
			               m->lim.max_partials);
		pd_buf_consume(L->in, hlen);
		L->off += hlen;
		L->part_left = len;
		L->partial = partial;
	}
}

static void body_consume(struct layer *L, size_t n)
{
	pd_buf_consume(L->in, n);
	L->off += n;
	if (!L->indet)
		L->part_left -= n;
}

/* ------------------------------------------------------------------ */
/* collected packets */

static void start_collect(struct layer *L, enum coll_kind k, size_t want, bool whole)
{
	L->st = L_COLLECT;
	L->ckind = k;
	L->cwant = want;
	L->chave = 0;
	L->cwhole = whole;
}

static int add_esk(struct pd_msg *m, size_t li)
{
	struct layer *L = &m->layers[li];
	struct pd_pkesk pk;
	int pr = 1; /* 0: pk parsed; < 0: a PKESK of a version we skip */

	if (m->container_seen)
		return fail(m, PD_EMALFORMED, "session key packet after the encrypted data (offset %llu)",
		            (unsigned long long)L->pkt_off);
	if (L->tag == 1) {
		pr = pd_pkesk_parse(m->coll, L->chave, &pk);
		if (pr == PD_EMALFORMED)
			return fail(m, pr, "malformed public-key encrypted session key packet at offset %llu",
			            (unsigned long long)L->pkt_off);
	}
	if (L->tag == 3) {
		m->info.n_skesk++;
	} else if (pr == 0) {
		m->info.n_recipients_total++;
		if (m->info.n_recipients < PD_MAX_RECIPIENTS) {
			struct pd_recipient *rc = &m->info.recipients[m->info.n_recipients++];
			rc->version = pk.version;
			rc->pk_algo = pk.pk_algo;
			rc->wildcard = pk.wildcard;
			memcpy(rc->keyid, pk.keyid, 8);
			rc->fpr_len = pk.fpr_len;
			memcpy(rc->fpr, pk.fpr, pk.fpr_len);
		}
	}
	/* Bound the work, not the count: past max_esk packets (a message to
	 * 10,000 recipients, 1,000 wildcards) the rest are counted and
	 * skipped, except a PKESK naming a key of the ring, so that ours is
	 * always found; of those no more are kept than trials may use.  What
	 * a packet names is public: skipping depends on nothing secret. */
	if (m->n_esk >= m->lim.max_esk) {
		uint32_t late_cap = m->lim.max_key_trials ? m->lim.max_key_trials : 1;
		if (pr != 0 || !m->ring || m->n_esk_late >= late_cap ||
		    !pd_trials_names_held_key(m->ring, &pk, m->bind, m->n_bind))
			return 0;
		m->n_esk_late++;
	}
	struct pd_esk *n = realloc(m->esks, (m->n_esk + 1) * sizeof(*n));
	if (!n)
		return fail(m, -ENOMEM, "out of memory");
	m->esks = n;
	uint8_t *body = malloc(L->chave ? L->chave : 1);
	if (!body)
		return fail(m, -ENOMEM, "out of memory");
	memcpy(body, m->coll, L->chave);
	m->esks[m->n_esk++] = (struct pd_esk){ L->tag, L->chave, body };
	return 0; /* unknown PKESK versions are kept and skipped by the trials (RFC 9580 §5.1) */
}

static void add_issuer(struct pd_msg *m, const uint8_t *kid)
{
	for (size_t i = 0; i < m->info.n_issuers; i++)
		if (!memcmp(m->info.issuers[i], kid, 8))
			return;
	if (m->info.n_issuers < PD_MAX_ISSUERS)
		memcpy(m->info.issuers[m->info.n_issuers++], kid, 8);
}

/* Issuer of a signature packet head (v3: fixed field; v4/v6: subpackets
 * 16 issuer key ID or 33 issuer fingerprint, hashed or unhashed area). */
static void sig_issuer(struct pd_msg *m, const uint8_t *p, size_t n)
{
	if (n >= 15 && p[0] == 3) {
		add_issuer(m, p + 7);
		return;
	}
	size_t pos, cntlen;
	if (n >= 4 && p[0] == 4) {
		pos = 4;
		cntlen = 2;
	} else if (n >= 4 && p[0] == 6) {
		pos = 4;
		cntlen = 4;
	} else {
		return;
	}
	for (int area = 0; area < 2; area++) {
		if (pos + cntlen > n)
			return;
		uint64_t alen = cntlen == 2 ? pd_be16(p + pos) : pd_be32(p + pos);
		pos += cntlen;
		if (alen > n - pos)
			return;
		size_t end = pos + (size_t)alen;
		while (pos < end) {
			uint64_t sl;
			size_t hl;
			uint8_t o = p[pos];
			if (o < 192) {
				sl = o;
				hl = 1;
			} else if (o < 255) {
				if (pos + 2 > end)
					return;
				sl = ((uint64_t)(o - 192) << 8) + p[pos + 1] + 192;
				hl = 2;
			} else {
				if (pos + 5 > end)
					return;
				sl = pd_be32(p + pos + 1);
				hl = 5;
			}
			if (sl < 1 || sl > end - pos - hl)
				return;
			const uint8_t *sp = p + pos + hl;
			uint8_t type = sp[0] & 0x7F;
			if (type == 16 && sl == 9)
				add_issuer(m, sp + 1);
			else if (type == 33 && sl == 22 && sp[1] == 4)
				add_issuer(m, sp + 2 + 12);
			else if (type == 33 && sl == 34 && sp[1] == 6)
				add_issuer(m, sp + 2);
			pos += hl + (size_t)sl;
		}
	}
}

/* A child layer for the transform of layer li. */
static int push_layer(struct pd_msg *m, size_t li)
{
	/* layers 0 and 1 are the outer packets and the decrypted data; every
	 * further layer is one level of compressed data */
	if (m->depth >= LAYERS_MAX || (m->depth >= 2 && m->depth - 1 > m->lim.max_depth))
		return fail_at(m, li, PD_ELIMIT, "limit exceeded: compressed data nested deeper than %u levels",
		               m->lim.max_depth);
	struct layer *c = &m->layers[m->depth];
	*c = (struct layer){ 0 };
	if (mem_take(m, BUF_SIZE) < 0)
		return fail_at(m, li, -ENOMEM, "memory budget exhausted");
	c->bufmem = BUF_SIZE;
	m->depth++; /* from here pop_layer() gives it back */
	int r = buf_init(&c->own);
	if (r < 0)
		return fail_at(m, li, r, "out of memory");
	c->in = &c->own;
	return 0;
}

static void pop_layer(struct pd_msg *m)
{
	struct layer *c = &m->layers[--m->depth];
	zfree(m, c);
	pd_buf_free(&c->own);
	mem_give(m, c->bufmem);
	*c = (struct layer){ 0 };
}

/* A collection finished: act on it.  Sets the layer's next state. */
static int collected(struct pd_msg *m, size_t li)
{
	struct layer *L = &m->layers[li];
	const uint8_t *c = m->coll;
	int r;

	switch (L->ckind) {
	case C_PKESK:
	case C_SKESK:
		r = add_esk(m, li);
		if (r < 0)
			return r;
		L->st = L_SKIP;
		return 0;
	case C_OPS:
		m->n_ops++;
		if (L->chave >= 12 && c[0] == 3)
			add_issuer(m, c + 4);
		else if (L->chave >= 38 && c[0] == 6 && c[4] <= 32 && L->chave >= (size_t)5 + c[4] + 32)
			add_issuer(m, c + 5 + c[4]);
		L->st = L_SKIP;
		return 0;
	case C_SIG:
		m->info.n_signatures++;
		sig_issuer(m, c, L->chave);
		L->st = L_SKIP;
		return 0;
	case C_LITHDR:
		if (L->chave < 2)
			return fail_inner(m, li, PD_EMALFORMED, "literal data packet too short");
		if (L->cwant == 2) { /* format and name length read: now name and date */
			start_collect(L, C_LITHDR, 2 + (size_t)c[1] + 4, false);
			L->chave = 2;
			return 0;
		}
		if (L->chave < L->cwant)
			return fail_inner(m, li, PD_EMALFORMED, "literal data packet too short");
		m->info.has_literal = true;
		m->info.literal_format = (char)c[0];
		m->info.literal_name_len = c[1];
		memcpy(m->info.literal_name, c + 2, c[1]);
		m->info.literal_name[c[1]] = 0;
		m->info.literal_date = pd_be32(c + 2 + c[1]);
		m->metadata_pending = true;
		L->st = L_LITERAL;
		return 0;
	case C_COMPRESSED:
		if (L->chave < 1)
			return fail_inner(m, li, PD_EMALFORMED, "empty compressed data packet");
		if (m->info.n_compression < PD_ARRAY_SIZE(m->info.compression))
			m->info.compression[m->info.n_compression++] = c[0];
		/* A layer may hold several compressed packets one after the
		 * other (not a valid message, but it must not leak either). */
		zfree(m, L);
		if (mem_take(m, pd_inflate_memory(c[0])) < 0)
			return fail_at(m, li, -ENOMEM, "memory budget exhausted");
		L->zmem = pd_inflate_memory(c[0]);
		r = pd_inflate_new(&L->z, c[0]);
		if (r < 0)
			return fail_at(m, li, r, "unsupported compression algorithm %u", c[0]);
		r = push_layer(m, li);
		if (r < 0)
			return r;
		L->xk = X_INFLATE;
		L->x_in = L->x_out = 0;
		L->x_ended = false;
		L->st = L_XFORM;
		return 0;
	case C_CONTAINER:
		memcpy(m->chdr + m->chdr_len, c, L->chave);
		m->chdr_len += L->chave;
		if (m->chdr_len < 1)
			return fail(m, PD_EMALFORMED, "empty encrypted data packet");
		if (L->tag == 18 && m->chdr[0] == 1) {
			m->info.container_version = 1;
		} else if (L->tag == 18 || L->tag == 20) {
			if (m->chdr_len < 4 && (L->tag == 20 || m->chdr[0] == 2)) {
				start_collect(L, C_CONTAINER, 4 - m->chdr_len, false);
				return 0;
			}
			size_t hl;
			r = pd_aead_header_len(L->tag, m->chdr, &hl);
			if (r < 0)
				return fail(m, r, "%s: encrypted data packet version %u, cipher %u, AEAD %u",
				            pd_strerror(r), m->chdr[0], m->chdr_len > 1 ? m->chdr[1] : 0,
				            m->chdr_len > 2 ? m->chdr[2] : 0);
			if (hl > CHDR_MAX)
				return fail(m, PD_EMALFORMED, "encrypted data header too long");
			if (m->chdr_len < hl) {
				start_collect(L, C_CONTAINER, hl - m->chdr_len, false);
				return 0;
			}
			m->info.container_version = m->chdr[0];
			m->info.sym_algo = m->chdr[1];
			m->info.aead_algo = m->chdr[2];
			m->info.aead_chunk_log = m->chdr[3];
		}
		L->st = L_NEED_KEY;
		return 0;
	}
	return fail(m, PD_EINTERNAL, "bad collection kind");
}

/* ------------------------------------------------------------------ */
/* the deepest layer: parse packets, stream the literal body */

static int on_header(struct pd_msg *m, size_t li)
{
	struct layer *L = &m->layers[li];
	uint8_t tag = L->tag;

	if (tag == 10 || tag == 21 || tag >= 40) { /* marker, padding, non-critical */
		L->st = L_SKIP;
		return 0;
	}
	if (li == 0) {
		if (m->container_seen)
			return fail(m, PD_EMALFORMED, "unexpected packet (tag %u) after the encrypted data at offset %llu",
			            tag, (unsigned long long)L->pkt_off);
		switch (tag) {
		case 1:
			start_collect(L, C_PKESK, COLL_MAX, true);
			return 0;
		case 3:
			start_collect(L, C_SKESK, COLL_MAX, true);
			return 0;
		case 9:
			if (!m->lim.allow_sed)
				return fail(m, PD_ESED, "symmetrically encrypted data packet (tag 9) has no integrity "
				            "protection; refused (allow_sed is off)");
			/* fall through */
		case 18:
		case 20:
			m->container_seen = true;
			m->info.container = tag;
			m->chdr_len = 0;
			if (tag == 9) {
				L->st = L_NEED_KEY;
				return 0;
			}
			start_collect(L, C_CONTAINER, 1, false);
			return 0;
		case 11:
		case 8:
		case 4:
		case 2:
			return fail(m, PD_EUNSUPPORTED, "message is not encrypted (packet tag %u at offset %llu)", tag,
			            (unsigned long long)L->pkt_off);
		case 5: case 6: case 7: case 14:
			return fail(m, PD_EUNSUPPORTED, "input is a key, not an encrypted message");
		default:
			return fail(m, PD_EMALFORMED, "unexpected packet tag %u at offset %llu", tag,
			            (unsigned long long)L->pkt_off);
		}
	}
	switch (tag) {
	case 11:
		if (m->info.has_literal)
			return fail_inner(m, li, PD_EMALFORMED, "more than one literal data packet");
		start_collect(L, C_LITHDR, 2, false);
		return 0;
	case 8:
		start_collect(L, C_COMPRESSED, 1, false);
		return 0;
	case 4:
		start_collect(L, C_OPS, 256, true);
		return 0;
	case 2:
		start_collect(L, C_SIG, COLL_MAX, true);
		return 0;
	case 1: case 3: case 9: case 18: case 20:
		return fail_inner(m, li, PD_EUNSUPPORTED, "nested encryption");
	default:
		return fail_inner(m, li, PD_EMALFORMED, "unexpected packet in the decrypted data");
	}
}

/* Run the deepest layer.  Returns 0 (no more progress), an event > 0, or
 * an error.  *progress is set when anything moved. */
static int run_deepest(struct pd_msg *m, uint8_t *out, size_t cap, size_t *ret_len, bool *progress)
{
	size_t li = m->depth - 1;
	struct layer *L = &m->layers[li];
	const uint8_t *p;
	size_t n;
	int r;

	for (;;) {
		if (m->err)
			return m->err;
		switch (L->st) {
		case L_HEADER:
			r = parse_header(m, li);
			if (r == PD_EAGAIN)
				return 0;
			if (r < 0)
				return r;
			*progress = true;
			if (r == 1) { /* end of this layer's stream */
				if (li == 0) {
					if (!m->container_seen)
						return fail(m, PD_EMALFORMED, "no encrypted data packet");
					m->done = true;
					return PD_STEP_DONE;
				}
				if (li == 1 && !m->info.has_literal)
					return fail_at(m, li, PD_EMALFORMED, "decrypted data holds no literal data packet");
				pop_layer(m);
				li--;
				L = &m->layers[li];
				/* A decompressor fed the layer just ended: done with.
				 * (Layer 0's decryption is not: its MDC or last tag
				 * is checked when its own input ends.) */
				if (L->xk == X_INFLATE) {
					zfree(m, L);
					L->xk = X_NONE;
				}
				L->st = L_HEADER;
				continue;
			}
			r = on_header(m, li);
			if (r < 0)
				return r;
			if (m->depth - 1 != li) /* a child layer appeared */
				return 0;
			continue;
		case L_COLLECT:
			r = body_peek(m, li, &p, &n);
			if (r == PD_EAGAIN)
				return 0;
			if (r < 0)
				return r;
			if (r == 1 && L->chave < L->cwant) {
				size_t k = PD_MIN(n, L->cwant - L->chave);
				memcpy(m->coll + L->chave, p, k);
				L->chave += k;
				m->coll_hw = PD_MAX(m->coll_hw, L->chave);
				body_consume(L, k);
				*progress = true;
				if (L->chave < L->cwant)
					continue;
			}
			if (L->cwhole && r == 1 && L->chave == L->cwant) {
				/* whole-packet collection that does not fit */
				if (L->ckind == C_SIG) { /* keep what we have: the issuer is near the start */
					r = collected(m, li);
					if (r < 0)
						return r;
					continue;
				}
				return fail_at(m, li, PD_ELIMIT, "limit exceeded: packet (tag %u) larger than %u octets "
				               "at offset %llu", L->tag, COLL_MAX, (unsigned long long)L->pkt_off);
			}
			if (r == 0 && !L->cwhole && L->chave < L->cwant)
				return fail_inner(m, li, PD_EMALFORMED, "packet shorter than its fields");
			r = collected(m, li);
			if (r < 0)
				return r;
			if (m->depth - 1 != li)
				return 0;
			if (m->metadata_pending) {
				m->metadata_pending = false;
				return PD_STEP_METADATA;
			}
			continue;
		case L_SKIP:
		case L_LITERAL:
			r = body_peek(m, li, &p, &n);
			if (r == PD_EAGAIN)
				return 0;
			if (r < 0)
				return r;
			if (r == 0) {
				L->st = L_HEADER;
				continue;
			}
			if (L->st == L_SKIP) {
				body_consume(L, n);
				*progress = true;
				continue;
			}
			n = PD_MIN(n, cap);
			if (m->lim.max_output && m->info.bytes_out + n > m->lim.max_output)
				return fail_at(m, li, PD_ELIMIT, "limit exceeded: plaintext larger than %llu octets",
				               (unsigned long long)m->lim.max_output);
			memcpy(out, p, n);
			body_consume(L, n);
			m->info.bytes_out += n;
			*ret_len = n;
			*progress = true;
			return PD_STEP_OUTPUT;
		case L_DRAIN:
			/* After a deferred error: the container runs on, its output
			 * goes nowhere; its end (MDC verified) reports the error. */
			n = pd_buf_len(L->in);
			if (n) {
				pd_buf_consume(L->in, n);
				L->off += n;
				*progress = true;
			}
			if (!L->in_eof)
				return 0;
			if (m->info.container == 9)
				return fail(m, PD_EINTEGRITY, INTEGRITY_SENTENCE);
			return fail(m, m->deferred, "%s", m->deferred_detail);
		case L_NEED_KEY:
			if (!m->have_key)
				return PD_STEP_NEED_KEY;
			/* A session key given before the container header arrived
			 * (pd_msg_set_session_key()): pd_msg_step() starts the
			 * container on its next round. */
			*progress = true;
			return 0;
		case L_XFORM:
		case L_XFORM_DONE:
			return fail(m, PD_EINTERNAL, "deepest layer is a transform");
		}
	}
}

/* ------------------------------------------------------------------ */
/* transforms: container decryption and decompression */

static int run_xform(struct pd_msg *m, size_t li, struct pd_worker *w, bool *progress)
{
	struct layer *L = &m->layers[li];
	struct layer *C = &m->layers[li + 1];

	while (L->st == L_XFORM) {
		const uint8_t *p = NULL;
		size_t n = 0, used = 0, produced = 0;
		int r = body_peek(m, li, &p, &n);
		if (r == PD_EAGAIN)
			return 0;
		if (r < 0)
			return r;
		bool eof = r == 0;
		if (L->x_ended) {
			/* Octets after the end of the compressed stream are ignored:
			 * Sequoia pads messages there (its default "pad" mode). */
			if (eof) {
				C->in_eof = true;
				L->st = L_XFORM_DONE;
			} else {
				body_consume(L, n);
			}
			*progress = true;
			continue;
		}
		size_t space = pd_buf_room(C->in);
		if (!space)
			return 0;
		uint8_t *dst = pd_buf_tail(C->in);
		switch (L->xk) {
		case X_CFB:
			r = pd_cfb_run(m->cfb, p, n, &used, dst, space, &produced, eof);
			break;
		case X_AEAD:
			r = pd_aead_run(m->aead, p, n, &used, dst, space, &produced, eof);
			break;
		case X_INFLATE:
			r = pd_inflate_run(L->z, p, n, &used, dst, space, &produced, eof);
			break;
		default:
			return fail(m, PD_EINTERNAL, "no transform");
		}
		if (r < 0) {
			if (L->xk == X_INFLATE)
				return fail_inner(m, li, r, "corrupt compressed data");
			if (r == PD_EINTEGRITY && L->xk == X_CFB)
				return fail(m, r, INTEGRITY_SENTENCE);
			if (r == PD_EINTEGRITY)
				return fail(m, r, "integrity check failed: AEAD authentication tag mismatch, or wrong session key");
			return fail(m, r, "decryption failed: %s", pd_strerror(r));
		}
		body_consume(L, used);
		pd_buf_commit(C->in, produced);
		/* Room was the limit (SEIPD v1 keeps its 22 MDC octets back, so
		 * "nearly all of it" counts): a bulk stream, let the buffer grow. */
		if (produced + 64 >= space)
			buf_filled(C->in);
		if (used || produced)
			*progress = true;
		if (L->xk == X_INFLATE) {
			L->x_in += used;
			L->x_out += produced;
			if (m->lim.max_output && L->x_out > m->lim.max_output)
				return fail_at(m, li, PD_EBOMB, "limit exceeded: decompressed data larger than %llu octets",
				               (unsigned long long)m->lim.max_output);
			if (m->lim.max_ratio && L->x_out > m->lim.ratio_grace &&
			    L->x_out / (L->x_in ? L->x_in : 1) > m->lim.max_ratio)
				return fail_at(m, li, PD_EBOMB, "limit exceeded: decompression ratio above %u:1 "
				               "(compression bomb)", m->lim.max_ratio);
		}
		if (r == 1) {
			if (L->xk == X_INFLATE) {
				L->x_ended = true;
				*progress = true;
				continue;
			} else {
				m->container_done = true;
				m->info.integrity = L->xk == X_AEAD ? PD_INTEGRITY_AEAD :
				                    m->info.container == 9 ? PD_INTEGRITY_UNPROTECTED : PD_INTEGRITY_MDC;
			}
			C->in_eof = true;
			L->st = L_XFORM_DONE;
			*progress = true;
			return 0;
		}
		if (!used && !produced)
			return 0;
	}
	return 0;
}

/* An error in unauthenticated data was deferred: drop the layers below the
 * container's and let layer 1 discard what the container still yields.
 * Nothing else changes: the container decrypts and hashes to its end. */
static void drain_inner(struct pd_msg *m)
{
	m->draining = true; /* the budget gets it back with the message, not now */
	while (m->depth > 2)
		pop_layer(m);
	struct layer *L = &m->layers[1];
	zfree(m, L);
	L->xk = X_NONE;
	L->st = L_DRAIN;
	m->metadata_pending = false;
}

/* Start the container transform once the session key is known. */
static int start_container(struct pd_msg *m, struct pd_worker *w)
{
	struct layer *L = &m->layers[0];
	int r;

	if (m->info.container == 9 || (m->info.container == 18 && m->info.container_version == 1)) {
		r = pd_cfb_new(&m->cfb, w, m->sk, m->info.container == 9);
		L->xk = X_CFB;
	} else {
		/* The chunk buffer the header asks for (given back with the message) */
		if (m->chdr_len >= 4 && m->chdr[3] <= PD_MIN(m->lim.max_aead_chunk_log, 16u) &&
		    mem_take(m, pd_aead_memory(m->chdr[3])) < 0)
			return fail(m, -ENOMEM, "memory budget exhausted");
		r = pd_aead_new(&m->aead, w, m->info.container, m->chdr, m->chdr_len, m->sk, &m->lim);
		L->xk = X_AEAD;
	}
	/* A CFB container's cipher comes from the (unauthenticated) session key:
	 * whatever stops its start (a cipher this libgcrypt lacks, a key of the
	 * wrong size) must look like any wrong key.  So decrypt under a random
	 * AES-256 key instead: the MDC fails at the end, in the same way and
	 * about the same time. */
	if (L->xk == X_CFB && r < 0 && r != -ENOMEM) {
		m->sk->algo = 9;
		m->sk->len = 32;
		gcry_randomize(m->sk->key, 32, GCRY_STRONG_RANDOM);
		r = pd_cfb_new(&m->cfb, w, m->sk, m->info.container == 9);
	}
	if (r == PD_EINTEGRITY)
		return fail(m, r, "integrity check failed: wrong session key");
	if (r < 0)
		return fail(m, r, "%s: cannot start decryption (cipher %s)", pd_strerror(r), pd_sym_name(m->sk->algo));
	if (L->xk == X_CFB) /* AEAD containers name their cipher in the header */
		m->info.sym_algo = m->sk->algo;
	r = push_layer(m, 0);
	if (r < 0)
		return r;
	L->st = L_XFORM;
	return 0;
}

/* ------------------------------------------------------------------ */
/* API */

int pd_msg_new(struct pd_msg **ret, const struct pd_limits *lim)
{
	struct pd_msg *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	if (lim)
		m->lim = *lim;
	else
		pd_limits_default(&m->lim);
	if (m->lim.max_aead_chunk_log > 16)
		m->lim.max_aead_chunk_log = 16;
	m->mode = -1;
	m->coll = malloc(COLL_MAX);
	m->sk = gcry_malloc_secure(sizeof(*m->sk));
	if (!m->coll || !m->sk || buf_init(&m->raw) < 0) {
		pd_msg_free(m, NULL);
		return -ENOMEM;
	}
	memset(m->sk, 0, sizeof(*m->sk));
	m->depth = 1;
	*ret = m;
	return 0;
}

struct pd_msg *pd_msg_free(struct pd_msg *m, struct pd_worker *w)
{
	if (!m)
		return NULL;
	while (m->depth > 1)
		pop_layer(m);
	zfree(m, &m->layers[0]);
	pd_buf_free(&m->layers[0].own);
	pd_buf_free(&m->raw);
	pd_cfb_free(m->cfb, w);
	pd_aead_free(m->aead, w);
	for (size_t i = 0; i < m->n_esk; i++) {
		pd_wipe(m->esks[i].body, m->esks[i].len);
		free(m->esks[i].body);
	}
	free(m->esks);
	if (m->coll) {
		pd_wipe(m->coll, m->coll_hw);
		free(m->coll);
	}
	if (m->sk) {
		pd_wipe(m->sk, sizeof(*m->sk));
		gcry_free(m->sk);
	}
	if (m->password) {
		pd_wipe(m->password, m->password_len);
		gcry_free(m->password);
	}
	free(m->bind);
	m->draining = false;
	mem_give(m, m->mem); /* the base buffers, the chunk buffer, what a drain kept */
	free(m);
	return NULL;
}

size_t pd_msg_input_space(const struct pd_msg *m)
{
	if (m->armor_end)
		return SIZE_MAX; /* everything after the armor is ignored */
	return BUF_SIZE - pd_buf_len(&m->raw); /* pd_msg_write() grows the buffer to that */
}

int pd_msg_write(struct pd_msg *m, const uint8_t *in, size_t len, size_t *ret_consumed)
{
	*ret_consumed = 0;
	if (m->input_closed)
		return PD_EUSAGE;
	if (m->err)
		return m->err;
	if (m->armor_end) { /* text after the END line: ignored */
		*ret_consumed = len;
		return 0;
	}
	if (m->lim.max_input && m->info.bytes_in + len > m->lim.max_input)
		return fail(m, PD_ELIMIT, "limit exceeded: message larger than %llu octets",
		            (unsigned long long)m->lim.max_input);
	size_t n = PD_MIN(len, pd_buf_room(&m->raw));
	if (n < len && m->raw.cap < BUF_SIZE) {
		pd_buf_grow(&m->raw, pd_buf_len(&m->raw) + len, BUF_SIZE);
		n = PD_MIN(len, pd_buf_room(&m->raw));
	}
	pd_buf_put(&m->raw, in, n);
	m->info.bytes_in += n;
	*ret_consumed = n;
	return 0;
}

int pd_msg_close_input(struct pd_msg *m)
{
	m->input_closed = true;
	if (m->mode == 0)
		m->layers[0].in_eof = true;
	return 0;
}

void pd_msg_set_keyring(struct pd_msg *m, const struct pd_keyring *kr) { m->ring = kr; }

int pd_msg_set_password(struct pd_msg *m, const char *pw, size_t len)
{
	if (m->password) {
		pd_wipe(m->password, m->password_len);
		gcry_free(m->password);
	}
	m->password = gcry_malloc_secure(len + 1);
	if (!m->password)
		return -ENOMEM;
	memcpy(m->password, pw, len);
	m->password[len] = 0;
	m->password_len = len;
	return 0;
}

int pd_bind_check(const char *val, size_t len)
{
	char a[PD_ADDRESS_MAX + 1];
	return val && pd_address_norm(val, len, true, a) ? 0 : -EINVAL;
}

int pd_msg_bind(struct pd_msg *m, const char *val, size_t len)
{
	char a[PD_ADDRESS_MAX + 1];
	size_t n = val ? pd_address_norm(val, len, true, a) : 0;
	if (!n)
		return -EINVAL;
	if (m->err || m->have_key || m->info.bytes_in) /* before input: it decides which PKESKs are kept */
		return PD_EUSAGE;
	if (m->n_bind == PD_MAX_BIND)
		return -E2BIG;
	if (!m->bind && !(m->bind = malloc(PD_MAX_BIND * (PD_ADDRESS_MAX + 1))))
		return -ENOMEM;
	memcpy(m->bind + m->bind_len, a, n + 1);
	m->bind_len += n + 1;
	m->n_bind++;
	return 0;
}

int pd_session_key_check(uint8_t algo, size_t len)
{
	size_t want = pd_sym_keylen(algo);
	if (!want)
		return PD_EUNSUPPORTED;
	if (len != want || len > PD_SESSION_KEY_MAX)
		return -EINVAL;
	return 0;
}

/* The caller's own key, not the message's octets: what is wrong with it
 * may be said at once.  Once set, the message never asks for a key. */
int pd_msg_set_session_key(struct pd_msg *m, uint8_t algo, const uint8_t *key, size_t len)
{
	if (m->err)
		return m->err;
	if (m->have_key)
		return PD_EUSAGE;
	int r = pd_session_key_check(algo, len);
	if (r < 0)
		return r;
	m->sk->algo = algo;
	m->sk->len = (uint8_t)len;
	memcpy(m->sk->key, key, len);
	m->have_key = true;
	return 0;
}

/* Only a message that authenticated gives its key out: a failed one (its
 * key a trial's pseudo-random one, or the random key a CFB container that
 * could not start got) must not show what the trials decided. */
int pd_msg_session_key(const struct pd_msg *m, uint8_t *ret_algo, uint8_t *key, size_t cap, size_t *ret_len)
{
	enum pd_integrity in = m->info.integrity;
	if (m->err || !m->done || !m->have_key || (in != PD_INTEGRITY_MDC && in != PD_INTEGRITY_AEAD))
		return PD_EUSAGE;
	if (cap < m->sk->len)
		return -ENOSPC;
	/* An AEAD container's cipher is its header's (a v6 PKESK or v5/v6
	 * SKESK key carries none); the header is authenticated with the data. */
	*ret_algo = in == PD_INTEGRITY_AEAD ? m->info.sym_algo : m->sk->algo;
	memcpy(key, m->sk->key, m->sk->len);
	*ret_len = m->sk->len;
	return 0;
}

void pd_msg_set_cancel(struct pd_msg *m, const int *flag) { m->cancel = flag; }

int pd_msg_set_budget(struct pd_msg *m, struct pd_budget *b)
{
	if (m->budget)
		return PD_EUSAGE;
	m->budget = b;
	if (mem_take(m, PD_MSG_BASE_MEMORY) < 0) {
		m->budget = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* Has the caller given up on this message?  Then the costly step about to
 * start (a round of pd_msg_step, a key derivation, a private-key trial)
 * does not: the message fails with -ECANCELED. */
static bool cancelled(struct pd_msg *m)
{
	if (!m->cancel || !__atomic_load_n(m->cancel, __ATOMIC_RELAXED))
		return false;
	fail(m, -ECANCELED, "cancelled by the caller");
	return true;
}

const struct pd_msginfo *pd_msg_info(const struct pd_msg *m) { return &m->info; }
const char *pd_msg_detail(const struct pd_msg *m) { return m->detail; }

/* Decide armored or binary, then move input into layer 0. */
static int run_input(struct pd_msg *m, bool *progress)
{
	struct layer *L0 = &m->layers[0];

	if (m->mode < 0) {
		int r = pd_armor_detect(pd_buf_data(&m->raw), pd_buf_len(&m->raw), m->input_closed);
		/* Undecided with the input closed, or with a full input buffer (a
		 * text preamble longer than the buffer, no BEGIN line in it): not
		 * OpenPGP.  Waiting would never end: no room for more input. */
		if (r == PD_EAGAIN && (m->input_closed || pd_buf_len(&m->raw) >= BUF_SIZE))
			r = PD_ENOTPGP;
		if (r == PD_EAGAIN)
			return 0;
		if (r < 0)
			return fail(m, r, pd_buf_len(&m->raw) ? "input is neither armored nor binary OpenPGP data" :
			            "empty input");
		m->mode = r;
		m->info.armored = r == 1;
		if (r == 0) {
			L0->in = &m->raw;
			L0->in_eof = m->input_closed;
		} else {
			pd_armor_init(&m->armor);
			r = buf_init(&L0->own);
			if (r < 0)
				return fail(m, r, "out of memory");
			L0->in = &L0->own;
		}
		*progress = true;
	}
	if (m->mode == 0) {
		L0->in_eof = m->input_closed;
		return 0;
	}
	while (!m->armor_end) {
		size_t used = 0, produced = 0, space = pd_buf_room(L0->in);
		int r = pd_armor_decode(&m->armor, pd_buf_data(&m->raw), pd_buf_len(&m->raw), &used,
		                        pd_buf_tail(L0->in), space, &produced, m->input_closed);
		pd_buf_consume(&m->raw, used);
		pd_buf_commit(L0->in, produced);
		if (produced && produced == space)
			buf_filled(L0->in);
		if (r < 0)
			return fail(m, r, "bad ASCII armor: %s", pd_strerror(r));
		if (used || produced)
			*progress = true;
		if (r == 1) {
			m->armor_end = true;
			L0->in_eof = true;
			m->raw.start = m->raw.end = 0;
			*progress = true;
			break;
		}
		if (!used && !produced)
			break;
	}
	return 0;
}

int pd_msg_step(struct pd_msg *m, struct pd_worker *w, uint8_t *out, size_t cap, size_t *ret_len)
{
	*ret_len = 0;
	if (m->err)
		return m->err;
	if (m->done)
		return PD_STEP_DONE;
	if (!cap)
		return PD_EUSAGE;
	for (;;) {
		bool progress = false;
		if (cancelled(m))
			return m->err;
		int r = run_input(m, &progress);
		if (r < 0)
			return r;
		if (m->mode < 0) {
			if (!progress)
				return PD_STEP_NEED_INPUT;
			continue;
		}
		if (m->layers[0].st == L_NEED_KEY && m->have_key) {
			r = start_container(m, w);
			if (r < 0)
				return r;
			progress = true;
		}
		for (size_t i = 0; i + 1 < m->depth; i++) {
			if (m->layers[i].st == L_XFORM) {
				r = run_xform(m, i, w, &progress);
				if (r == PD_EDEFER) {
					drain_inner(m);
					progress = true;
					break;
				}
				if (r < 0)
					return r;
			}
		}
		r = run_deepest(m, out, cap, ret_len, &progress);
		if (r == PD_EDEFER) {
			drain_inner(m);
			continue;
		}
		if (r != 0)
			return r;
		if (!progress) {
			if (!m->input_closed)
				return PD_STEP_NEED_INPUT;
			return fail(m, PD_ETRUNCATED, "message is truncated (input ended at offset %llu)",
			            (unsigned long long)m->layers[0].off);
		}
	}
}

/* ------------------------------------------------------------------ */
/* session key recovery: the trials themselves are pgp/trials.c's */

int pd_msg_recover_key(struct pd_msg *m, const struct pd_keyring *kr, struct pd_worker *w)
{
	if (m->err)
		return m->err;
	if (m->layers[0].st != L_NEED_KEY || m->have_key)
		return PD_EUSAGE;

	const struct pd_trials t = {
		.esks = m->esks, .n_esk = m->n_esk,
		.container = m->info.container, .container_version = m->info.container_version,
		.hdr_sym_algo = m->info.sym_algo, .lim = &m->lim, .cancel = m->cancel, .budget = m->budget,
		.bind = m->bind, .n_bind = m->n_bind,
	};
	struct pd_trial_result res = { 0 };
	int r = pd_trials_pkesk(&t, kr, w, m->sk, &res);
	if (r == 1 && m->info.n_skesk && m->password) {
		r = pd_trials_skesk(&t, m->password, m->password_len, w, m->sk, &res);
	} else if (r == 1 && m->info.n_skesk && !res.n_fit) {
		return fail(m, PD_ENOPASSWORD, "message is encrypted with a password and none was given");
	} else if (r == 1) {
		char ids[PD_MAX_RECIPIENTS * 17 + 64] = "";
		size_t o = 0;
		for (size_t i = 0; i < m->info.n_recipients && o + 20 < sizeof(ids); i++) {
			char hex[17];
			pd_hex(hex, m->info.recipients[i].keyid, 8);
			o += (size_t)snprintf(ids + o, sizeof(ids) - o, "%s%s", o ? ", " : "",
			                      m->info.recipients[i].wildcard ? "anonymous" : hex);
		}
		return fail(m, PD_ENOKEY, "no secret key for any recipient (%s%s)",
		            o ? "key IDs " : "no public-key recipients", ids);
	}
	if (r < 0)
		return fail(m, r, "%s", res.detail);
	/* the key that opened it: public once the message verifies (a failure scrubs it) */
	memcpy(m->info.key_fpr, res.key_fpr, sizeof(m->info.key_fpr));
	m->info.key_fpr_len = res.key_fpr_len;
	m->info.pk_algo = res.pk_algo;
	m->have_key = true;
	if (m->password) { /* derived from: no longer needed */
		pd_wipe(m->password, m->password_len);
		gcry_free(m->password);
		m->password = NULL;
		m->password_len = 0;
	}
	return 0;
}
