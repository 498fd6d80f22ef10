/* SPDX-License-Identifier: MIT */
/* Frame codec: incremental decoder, encoders and payload parsers (PROTOCOL.md). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

struct pd_frame_decoder {
	enum pd_frame_role role;
	uint32_t max;
	uint8_t hdr[PD_FRAME_HDR_LEN];
	size_t hdr_have;         /* header octets gathered */
	bool have_hdr;           /* cur is valid, payload being gathered */
	struct pd_frame_hdr cur;
	uint8_t *buf;            /* payload of a frame split across calls */
	size_t buf_cap, have;
	size_t stale;            /* octets of buf handed out last call: wiped at the next */
	int err;                 /* sticky */
	char detail[128];
};

static inline uint16_t be16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static inline uint32_t be32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint64_t be64(const uint8_t *p) { return ((uint64_t)be32(p) << 32) | be32(p + 4); }

const char *pd_frame_type_name(uint8_t type)
{
	switch (type) {
	case PD_FT_HELLO: return "HELLO";
	case PD_FT_ERROR: return "ERROR";
	case PD_FT_DECRYPT: return "DECRYPT";
	case PD_FT_DATA: return "DATA";
	case PD_FT_END: return "END";
	case PD_FT_PING: return "PING";
	case PD_FT_STATS: return "STATS";
	case PD_FT_KEYS: return "KEYS";
	case PD_FT_METADATA: return "METADATA";
	case PD_FT_RESULT: return "RESULT";
	case PD_FT_PONG: return "PONG";
	case PD_FT_KEY: return "KEY";
	default: return "?";
	}
}

int pd_frame_decoder_new(struct pd_frame_decoder **ret, enum pd_frame_role role, uint32_t max_payload)
{
	if (role != PD_FROM_CLIENT && role != PD_FROM_SERVER)
		return -EINVAL;
	struct pd_frame_decoder *d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->role = role;
	pd_frame_decoder_set_max(d, max_payload);
	*ret = d;
	return 0;
}

struct pd_frame_decoder *pd_frame_decoder_free(struct pd_frame_decoder *d)
{
	if (d) {
		/* Frames carry plaintext and passwords: leave nothing behind. */
		if (d->buf)
			explicit_bzero(d->buf, d->buf_cap);
		free(d->buf);
		free(d);
	}
	return NULL;
}

void pd_frame_decoder_set_max(struct pd_frame_decoder *d, uint32_t max_payload)
{
	d->max = max_payload > PD_FRAME_MAX_CEILING ? PD_FRAME_MAX_CEILING : max_payload;
}

size_t pd_frame_decoder_pending(const struct pd_frame_decoder *d)
{
	return d->have_hdr ? PD_FRAME_HDR_LEN + d->have : d->hdr_have;
}

const char *pd_frame_decoder_detail(const struct pd_frame_decoder *d)
{
	return d->detail;
}

/* Frames carry plaintext and passwords: a payload the caller has had does
 * not stay in buf. */
static void wipe_stale(struct pd_frame_decoder *d)
{
	if (d->stale) {
		explicit_bzero(d->buf, d->stale);
		d->stale = 0;
	}
}

__attribute__((format(printf, 3, 4)))
static int fail(struct pd_frame_decoder *d, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(d->detail, sizeof(d->detail), fmt, ap);
	va_end(ap);
	return d->err = err;
}

/* Everything the header alone can tell: type known and allowed in this
 * direction, id zero exactly for connection frames, payload size. */
static int check_hdr(struct pd_frame_decoder *d, const struct pd_frame_hdr *h)
{
	bool from_client = d->role == PD_FROM_CLIENT;
	uint32_t cap;
	switch (h->type) {
	case PD_FT_HELLO: case PD_FT_ERROR:
		cap = PD_FRAME_HELLO_MAX; break;
	case PD_FT_DATA:
		cap = d->max; break;
	case PD_FT_DECRYPT:
		if (!from_client) goto wrong_dir;
		cap = PD_FRAME_STRUCT_MAX; break;
	case PD_FT_END: case PD_FT_STATS: case PD_FT_KEYS:
		if (!from_client) goto wrong_dir;
		cap = 0; break;
	case PD_FT_PING:
		if (!from_client) goto wrong_dir;
		cap = PD_PING_MAX; break;
	case PD_FT_PONG:
		if (from_client) goto wrong_dir;
		cap = PD_PING_MAX; break;
	case PD_FT_METADATA: case PD_FT_RESULT: case PD_FT_KEY:
		if (from_client) goto wrong_dir;
		cap = PD_FRAME_STRUCT_MAX; break;
	default:
		return fail(d, -EPROTO, "unknown frame type 0x%02x", h->type);
	}
	if (cap > d->max && h->type != PD_FT_HELLO && h->type != PD_FT_ERROR)
		cap = d->max;
	if (h->len > cap)
		return fail(d, -EMSGSIZE, "%s frame of %u octets exceeds the limit of %u", pd_frame_type_name(h->type), h->len, cap);
	bool conn = h->type == PD_FT_HELLO || h->type == PD_FT_ERROR;
	if (conn && h->id != 0)
		return fail(d, -EPROTO, "%s frame with request id %u (must be 0)", pd_frame_type_name(h->type), h->id);
	if (!conn && h->id == 0)
		return fail(d, -EPROTO, "%s frame with request id 0", pd_frame_type_name(h->type));
	return 0;
wrong_dir:
	return fail(d, -EPROTO, "%s frame sent by the %s", pd_frame_type_name(h->type),
	            from_client ? "client" : "server");
}

static int decode(struct pd_frame_decoder *d, bool stream, size_t data_room, const uint8_t *in, size_t len,
                  size_t *ret_consumed, struct pd_frame_hdr *ret_hdr, const uint8_t **ret_payload)
{
	size_t off = 0;
	*ret_consumed = 0;
	wipe_stale(d);
	if (d->err)
		return d->err;
	if (!d->have_hdr) {
		const uint8_t *h;
		if (d->hdr_have == 0 && len >= PD_FRAME_HDR_LEN) {
			h = in; /* common case: parse in place */
			off = PD_FRAME_HDR_LEN;
		} else {
			size_t n = PD_FRAME_HDR_LEN - d->hdr_have;
			if (n > len)
				n = len;
			memcpy(d->hdr + d->hdr_have, in, n);
			d->hdr_have += n;
			off = n;
			if (d->hdr_have < PD_FRAME_HDR_LEN) {
				*ret_consumed = off;
				return 0;
			}
			h = d->hdr;
		}
		d->cur.len = be32(h);
		d->cur.type = h[4];
		d->cur.id = be32(h + 5);
		int r = check_hdr(d, &d->cur);
		if (r < 0) {
			*ret_consumed = off;
			return r;
		}
		d->have_hdr = true;
		d->have = 0;
	}
	size_t rest = len - off;
	const uint8_t *payload;
	if (stream && d->cur.type == PD_FT_DATA) {
		/* A slice of the payload, straight from in; have counts what was
		 * handed out.  An empty frame is one empty slice. */
		size_t left = d->cur.len - d->have, n = rest < left ? rest : left;
		if (n > data_room)
			n = data_room;
		if (left && !n) {
			*ret_consumed = off;
			return 0;
		}
		*ret_hdr = d->cur;
		ret_hdr->len = (uint32_t)n;
		*ret_payload = in + off;
		*ret_consumed = off + n;
		d->have += n;
		if (d->have == d->cur.len) {
			d->have_hdr = false;
			d->hdr_have = 0;
			d->have = 0;
		}
		return 1;
	}
	if (d->have == 0 && rest >= d->cur.len) {
		payload = in + off; /* whole payload in this slice: no copy */
		off += d->cur.len;
	} else {
		if (d->buf_cap < d->cur.len) {
			/* cur.len was checked against the limit, so this is bounded. */
			uint8_t *nb = malloc(d->cur.len);
			if (!nb) {
				*ret_consumed = off;
				return fail(d, -ENOMEM, "out of memory for a frame of %u octets", d->cur.len);
			}
			if (d->buf) {
				memcpy(nb, d->buf, d->have);
				explicit_bzero(d->buf, d->buf_cap);
				free(d->buf);
			}
			d->buf = nb;
			d->buf_cap = d->cur.len;
		}
		size_t n = d->cur.len - d->have;
		if (n > rest)
			n = rest;
		memcpy(d->buf + d->have, in + off, n);
		d->have += n;
		off += n;
		if (d->have < d->cur.len) {
			*ret_consumed = off;
			return 0;
		}
		payload = d->buf;
		d->stale = d->cur.len;
	}
	*ret_hdr = d->cur;
	*ret_payload = payload;
	*ret_consumed = off;
	d->have_hdr = false;
	d->hdr_have = 0;
	d->have = 0;
	return 1;
}

int pd_frame_decode(struct pd_frame_decoder *d, const uint8_t *in, size_t len, size_t *ret_consumed,
                    struct pd_frame_hdr *ret_hdr, const uint8_t **ret_payload)
{
	return decode(d, false, 0, in, len, ret_consumed, ret_hdr, ret_payload);
}

int pd_frame_decode_stream(struct pd_frame_decoder *d, const uint8_t *in, size_t len, size_t data_room,
                           size_t *ret_consumed, struct pd_frame_hdr *ret_hdr, const uint8_t **ret_payload)
{
	return decode(d, true, data_room, in, len, ret_consumed, ret_hdr, ret_payload);
}

/* ------------------------------------------------------------------ */
/* Encoding */

struct w {
	uint8_t *p;
	size_t cap, len;
	bool bad;
};

static void put(struct w *w, const void *v, size_t n)
{
	if (w->bad || n > w->cap - w->len) {
		w->bad = true;
		return;
	}
	if (n)
		memcpy(w->p + w->len, v, n);
	w->len += n;
}
static void put8(struct w *w, uint8_t v) { put(w, &v, 1); }
static void put16(struct w *w, uint16_t v) { uint8_t b[2] = { (uint8_t)(v >> 8), (uint8_t)v }; put(w, b, 2); }
static void put32(struct w *w, uint32_t v)
{
	uint8_t b[4] = { (uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v };
	put(w, b, 4);
}
static void put64(struct w *w, uint64_t v) { put32(w, (uint32_t)(v >> 32)); put32(w, (uint32_t)v); }

static void tlv(struct w *w, uint8_t tag, const void *v, size_t n)
{
	if (n > UINT16_MAX) {
		w->bad = true;
		return;
	}
	put8(w, tag);
	put16(w, (uint16_t)n);
	put(w, v, n);
}
static void tlv8(struct w *w, uint8_t tag, uint8_t v) { tlv(w, tag, &v, 1); }
static void tlv32(struct w *w, uint8_t tag, uint32_t v)
{
	uint8_t b[4] = { (uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v };
	tlv(w, tag, b, 4);
}
/* A control octet in a line of text (the sentence of a result, a name). */
static bool is_ctl(uint8_t c) { return c < 0x20 || c == 0x7f; }

/* A text TLV is one line: control octets go out as '?' (the reader refuses
 * them, so that nothing a peer sends can break a log line). */
static void tlvstr(struct w *w, uint8_t tag, const char *s, size_t max)
{
	if (!s || !*s)
		return;
	size_t n = strnlen(s, max);
	if (w->bad || n > UINT16_MAX || w->cap - w->len < 3 + n) {
		tlv(w, tag, s, n); /* marks the writer bad */
		return;
	}
	put8(w, tag);
	put16(w, (uint16_t)n);
	for (size_t i = 0; i < n; i++)
		w->p[w->len + i] = is_ctl((uint8_t)s[i]) ? '?' : (uint8_t)s[i];
	w->len += n;
}

static struct w begin(uint8_t *out, size_t cap)
{
	struct w w = { .p = out, .cap = cap };
	if (cap < PD_FRAME_HDR_LEN)
		w.bad = true;
	else
		w.len = PD_FRAME_HDR_LEN;
	return w;
}

static int finish(struct w *w, uint8_t type, uint32_t id)
{
	if (w->bad || w->len - PD_FRAME_HDR_LEN > UINT32_MAX)
		return -ENOBUFS;
	pd_frame_put_hdr(w->p, type, id, (uint32_t)(w->len - PD_FRAME_HDR_LEN));
	return (int)w->len;
}

void pd_frame_put_hdr(uint8_t *out, uint8_t type, uint32_t id, uint32_t len)
{
	out[0] = (uint8_t)(len >> 24); out[1] = (uint8_t)(len >> 16); out[2] = (uint8_t)(len >> 8); out[3] = (uint8_t)len;
	out[4] = type;
	out[5] = (uint8_t)(id >> 24); out[6] = (uint8_t)(id >> 16); out[7] = (uint8_t)(id >> 8); out[8] = (uint8_t)id;
}

int pd_frame_encode(uint8_t *out, size_t cap, uint8_t type, uint32_t id, const void *payload, size_t len)
{
	if (len > INT32_MAX - PD_FRAME_HDR_LEN)
		return -ENOBUFS;
	struct w w = begin(out, cap);
	put(&w, payload, len);
	return finish(&w, type, id);
}

int pd_frame_encode_client_hello(uint8_t *out, size_t cap, const struct pd_hello *h)
{
	struct w w = begin(out, cap);
	put(&w, PD_PROTO_MAGIC, 4);
	put16(&w, h->version_min);
	put16(&w, h->version_max);
	tlvstr(&w, PD_T_SOFTWARE, h->software, PD_SOFTWARE_MAX);
	return finish(&w, PD_FT_HELLO, 0);
}

int pd_frame_encode_server_hello(uint8_t *out, size_t cap, const struct pd_hello *h)
{
	struct w w = begin(out, cap);
	put(&w, PD_PROTO_MAGIC, 4);
	put16(&w, h->version_min);
	put16(&w, 0);
	put32(&w, h->max_frame);
	put64(&w, h->max_message);
	put32(&w, h->max_inflight);
	tlvstr(&w, PD_T_SOFTWARE, h->software, PD_SOFTWARE_MAX);
	return finish(&w, PD_FT_HELLO, 0);
}

int pd_frame_encode_error(uint8_t *out, size_t cap, uint16_t status, const char *errname, const char *sentence)
{
	struct w w = begin(out, cap);
	put16(&w, status);
	tlvstr(&w, PD_T_ERRNAME, errname, 23);
	tlvstr(&w, PD_T_SENTENCE, sentence, PD_SENTENCE_MAX);
	return finish(&w, PD_FT_ERROR, 0);
}

bool pd_bind_value_ok(const char *v, size_t n)
{
	const char *at = n >= 2 && n <= PD_ADDRESS_MAX ? memchr(v, '@', n) : NULL;
	if (!at || at == v + n - 1 || memchr(at + 1, '@', n - (size_t)(at - v) - 1))
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)v[i] <= 0x20 || v[i] == 0x7f || v[i] == '<' || v[i] == '>')
			return false;
	return true;
}

int pd_frame_encode_decrypt(uint8_t *out, size_t cap, uint32_t id, const struct pd_decrypt_req *r)
{
	if (r->password_len > PD_PASSWORD_MAX)
		return -EINVAL;
	if (r->session_key && (!r->session_key_len || r->session_key_len > PD_SESSION_KEY_MAX))
		return -EINVAL;
	if (r->n_bind > PD_MAX_BIND)
		return -EINVAL;
	for (size_t i = 0; i < r->n_bind; i++)
		if (!r->bind_len[i] || r->bind_len[i] > PD_ADDRESS_MAX)
			return -EINVAL;
	struct w w = begin(out, cap);
	put32(&w, r->flags);
	if (r->password)
		tlv(&w, PD_T_PASSWORD, r->password, r->password_len);
	if (r->session_key) {
		uint8_t b[1 + PD_SESSION_KEY_MAX];
		b[0] = r->session_key_algo;
		memcpy(b + 1, r->session_key, r->session_key_len);
		tlv(&w, PD_T_SESSION_KEY_IN, b, 1 + r->session_key_len);
		explicit_bzero(b, sizeof(b));
	}
	if (r->has_size_hint) {
		uint8_t b[8];
		for (int i = 0; i < 8; i++)
			b[i] = (uint8_t)(r->size_hint >> (56 - 8 * i));
		tlv(&w, PD_T_SIZE_HINT, b, 8);
	}
	for (size_t i = 0; i < r->n_bind; i++)
		tlv(&w, PD_T_BIND, r->bind[i], r->bind_len[i]);
	return finish(&w, PD_FT_DECRYPT, id);
}

static void put_info(struct w *w, const struct pd_msginfo *m)
{
	tlv8(w, PD_T_ARMORED, m->armored ? 1 : 0);
	if (m->container) {
		uint8_t c[2] = { m->container, m->container_version };
		tlv(w, PD_T_CONTAINER, c, 2);
	}
	if (m->sym_algo)
		tlv8(w, PD_T_SYM_ALGO, m->sym_algo);
	if (m->aead_algo) {
		uint8_t a[2] = { m->aead_algo, m->aead_chunk_log };
		tlv(w, PD_T_AEAD, a, 2);
	}
	if (m->key_fpr_len == 20 || m->key_fpr_len == 32) {
		tlv8(w, PD_T_PK_ALGO, m->pk_algo);
		tlv(w, PD_T_KEY_FPR, m->key_fpr, m->key_fpr_len);
	}
	if (m->n_compression)
		tlv(w, PD_T_COMPRESSION, m->compression, m->n_compression > 8 ? 8 : m->n_compression);
	if (m->has_literal) {
		tlv(w, PD_T_LITERAL_NAME, m->literal_name, m->literal_name_len);
		tlv32(w, PD_T_LITERAL_DATE, m->literal_date);
		tlv8(w, PD_T_LITERAL_FORMAT, (uint8_t)m->literal_format);
	}
	size_t nr = m->n_recipients > PD_MAX_RECIPIENTS ? PD_MAX_RECIPIENTS : m->n_recipients;
	for (size_t i = 0; i < nr; i++) {
		const struct pd_recipient *r = &m->recipients[i];
		uint8_t b[11 + 32];
		size_t fl = (r->fpr_len == 20 || r->fpr_len == 32) ? r->fpr_len : 0;
		b[0] = r->version;
		b[1] = r->pk_algo;
		b[2] = r->wildcard ? PD_RECIPIENT_WILDCARD : 0;
		memcpy(b + 3, r->keyid, 8);
		memcpy(b + 11, r->fpr, fl);
		tlv(w, PD_T_RECIPIENT, b, 11 + fl);
	}
	size_t total = m->n_recipients_total > nr ? m->n_recipients_total : nr;
	tlv32(w, PD_T_N_RECIPIENTS, total > UINT32_MAX ? UINT32_MAX : (uint32_t)total);
	tlv32(w, PD_T_N_SKESK, m->n_skesk > UINT32_MAX ? UINT32_MAX : (uint32_t)m->n_skesk);
	size_t ni = m->n_issuers > PD_MAX_ISSUERS ? PD_MAX_ISSUERS : m->n_issuers;
	for (size_t i = 0; i < ni; i++)
		tlv(w, PD_T_ISSUER, m->issuers[i], 8);
	tlv32(w, PD_T_N_SIGNATURES, m->n_signatures > UINT32_MAX ? UINT32_MAX : (uint32_t)m->n_signatures);
}

int pd_frame_encode_metadata(uint8_t *out, size_t cap, uint32_t id, const struct pd_msginfo *info)
{
	struct w w = begin(out, cap);
	put_info(&w, info);
	return finish(&w, PD_FT_METADATA, id);
}

int pd_frame_encode_result(uint8_t *out, size_t cap, uint32_t id, const struct pd_result *r,
                           const struct pd_msginfo *info)
{
	struct w w = begin(out, cap);
	put16(&w, r->status);
	put8(&w, r->integrity);
	put8(&w, 0);
	put64(&w, r->bytes_in);
	put64(&w, r->bytes_out);
	tlvstr(&w, PD_T_ERRNAME, r->errname, sizeof(r->errname) - 1);
	tlvstr(&w, PD_T_SENTENCE, r->sentence, PD_SENTENCE_MAX);
	if (r->sk_len && r->sk_len <= PD_SESSION_KEY_MAX) {
		uint8_t b[1 + PD_SESSION_KEY_MAX];
		b[0] = r->sk_algo;
		memcpy(b + 1, r->sk, r->sk_len);
		tlv(&w, PD_T_SESSION_KEY, b, 1 + (size_t)r->sk_len);
		explicit_bzero(b, sizeof(b));
	} else if (r->sk_refused) {
		tlv8(&w, PD_T_SESSION_KEY_REFUSED, r->sk_refused);
	}
	if (info)
		put_info(&w, info);
	return finish(&w, PD_FT_RESULT, id);
}

int pd_frame_encode_key(uint8_t *out, size_t cap, uint32_t id, const struct pd_keyinfo *k, const char *addrs,
                        size_t addrs_len)
{
	struct w w = begin(out, cap);
	put8(&w, k->version);
	put8(&w, k->pk_algo);
	put16(&w, k->bits);
	put32(&w, k->created);
	if (k->fpr_len == 20 || k->fpr_len == 32)
		tlv(&w, PD_T_KEY_FPR, k->fpr, k->fpr_len);
	if (k->primary_fpr_len == 20 || k->primary_fpr_len == 32)
		tlv(&w, PD_T_PRIMARY_FPR, k->primary_fpr, k->primary_fpr_len);
	tlv(&w, PD_T_KEYID, k->keyid, 8);
	tlvstr(&w, PD_T_CURVE, k->curve, sizeof(k->curve) - 1);
	size_t n = 0;
	for (size_t o = 0; addrs && o < addrs_len && n < PD_KEY_ADDRS_MAX; n++) {
		size_t l = strnlen(addrs + o, addrs_len - o);
		if (l && l <= PD_ADDRESS_MAX)
			tlvstr(&w, PD_T_ADDRESS, addrs + o, PD_ADDRESS_MAX);
		o += l + 1;
	}
	return finish(&w, PD_FT_KEY, id);
}

/* ------------------------------------------------------------------ */
/* Parsing */

int pd_tlv_next(struct pd_tlv_reader *r, uint8_t *ret_tag, const uint8_t **ret_val, uint16_t *ret_len)
{
	if (r->off >= r->len)
		return 0;
	if (r->len - r->off < 3)
		return -EPROTO;
	const uint8_t *p = r->p + r->off;
	uint16_t n = be16(p + 1);
	if ((size_t)n > r->len - r->off - 3)
		return -EPROTO;
	*ret_tag = p[0];
	*ret_val = p + 3;
	*ret_len = n;
	r->off += 3 + (size_t)n;
	return 1;
}

/* Copy a text TLV into a NUL-terminated field, refusing embedded NULs. */
static int text(char *dst, size_t cap, const uint8_t *v, uint16_t n)
{
	if (n >= cap)
		return -EPROTO;
	for (uint16_t i = 0; i < n; i++)
		if (is_ctl(v[i])) /* NUL, CR, LF, ...: one line of text, never more */
			return -EPROTO;
	memcpy(dst, v, n);
	dst[n] = 0;
	return 0;
}

/* Tags a frame kind does not define are skipped unless critical (0x80). */
static int unknown(uint8_t tag)
{
	return (tag & 0x80) ? -EPROTO : 0;
}

int pd_parse_hello(const uint8_t *p, size_t len, enum pd_frame_role role, struct pd_hello *ret)
{
	struct pd_hello h = { 0 };
	size_t fixed = role == PD_FROM_CLIENT ? 8 : 24;
	if (len < fixed || memcmp(p, PD_PROTO_MAGIC, 4) != 0)
		return -EPROTO;
	if (role == PD_FROM_CLIENT) {
		h.version_min = be16(p + 4);
		h.version_max = be16(p + 6);
		if (h.version_min == 0 || h.version_min > h.version_max)
			return -EPROTO;
	} else {
		h.version_min = h.version_max = be16(p + 4);
		h.max_frame = be32(p + 8);
		h.max_message = be64(p + 12);
		h.max_inflight = be32(p + 20);
		if (h.version_min == 0 || h.max_frame < PD_FRAME_MAX_FLOOR || h.max_frame > PD_FRAME_MAX_CEILING ||
		    h.max_inflight == 0)
			return -EPROTO;
	}
	struct pd_tlv_reader r = { .p = p + fixed, .len = len - fixed };
	uint8_t tag;
	const uint8_t *v;
	uint16_t n;
	int k;
	while ((k = pd_tlv_next(&r, &tag, &v, &n)) > 0) {
		if (tag == PD_T_SOFTWARE) {
			if (text(h.software, sizeof(h.software), v, n) < 0)
				return -EPROTO;
		} else if (unknown(tag) < 0) {
			return -EPROTO;
		}
	}
	if (k < 0)
		return k;
	*ret = h;
	return 0;
}

static int parse_status_tlvs(struct pd_tlv_reader *r, struct pd_result *res, struct pd_msginfo *info, bool result);

int pd_parse_error(const uint8_t *p, size_t len, struct pd_result *ret)
{
	struct pd_result res = { 0 };
	if (len < 2)
		return -EPROTO;
	res.status = be16(p);
	struct pd_tlv_reader r = { .p = p + 2, .len = len - 2 };
	int k = parse_status_tlvs(&r, &res, NULL, false);
	if (k < 0)
		return k;
	*ret = res;
	return 0;
}

int pd_parse_decrypt(const uint8_t *p, size_t len, struct pd_decrypt_req *ret)
{
	struct pd_decrypt_req d = { 0 };
	if (len < 4)
		return -EPROTO;
	d.flags = be32(p);
	if (d.flags & ~PD_DF_KNOWN)
		return -EPROTO;
	struct pd_tlv_reader r = { .p = p + 4, .len = len - 4 };
	uint8_t tag;
	const uint8_t *v;
	uint16_t n;
	int k;
	while ((k = pd_tlv_next(&r, &tag, &v, &n)) > 0) {
		switch (tag) {
		case PD_T_PASSWORD:
			if (n > PD_PASSWORD_MAX || d.password)
				return -EPROTO;
			d.password = v;
			d.password_len = n;
			break;
		case PD_T_SIZE_HINT:
			if (n != 8)
				return -EPROTO;
			d.size_hint = be64(v);
			d.has_size_hint = true;
			break;
		case PD_T_SESSION_KEY_IN:
			if (n < 2 || n > 1 + PD_SESSION_KEY_MAX || d.session_key)
				return -EPROTO;
			d.session_key_algo = v[0];
			d.session_key = v + 1;
			d.session_key_len = n - 1u;
			break;
		case PD_T_BIND:
			if (!n || n > PD_ADDRESS_MAX || d.n_bind == PD_MAX_BIND)
				return -EPROTO;
			d.bind[d.n_bind] = v;
			d.bind_len[d.n_bind++] = (uint8_t)n;
			break;
		default:
			if (unknown(tag) < 0)
				return -EPROTO;
		}
	}
	if (k < 0)
		return k;
	*ret = d;
	return 0;
}

/* One metadata TLV into info; 1 if it was one, 0 if not a metadata tag. */
static int info_tlv(struct pd_msginfo *m, uint8_t tag, const uint8_t *v, uint16_t n)
{
	switch (tag) {
	case PD_T_ARMORED:
		if (n != 1) return -EPROTO;
		m->armored = v[0] != 0;
		return 1;
	case PD_T_CONTAINER:
		if (n != 2) return -EPROTO;
		m->container = v[0];
		m->container_version = v[1];
		return 1;
	case PD_T_SYM_ALGO:
		if (n != 1) return -EPROTO;
		m->sym_algo = v[0];
		return 1;
	case PD_T_AEAD:
		if (n != 2) return -EPROTO;
		m->aead_algo = v[0];
		m->aead_chunk_log = v[1];
		return 1;
	case PD_T_PK_ALGO:
		if (n != 1) return -EPROTO;
		m->pk_algo = v[0];
		return 1;
	case PD_T_KEY_FPR:
		if (n != 20 && n != 32) return -EPROTO;
		m->key_fpr_len = (uint8_t)n;
		memcpy(m->key_fpr, v, n);
		return 1;
	case PD_T_COMPRESSION:
		if (n < 1 || n > sizeof(m->compression)) return -EPROTO;
		memcpy(m->compression, v, n);
		m->n_compression = (uint8_t)n;
		return 1;
	case PD_T_LITERAL_NAME:
		if (n > 255) return -EPROTO;
		/* Raw octets: may hold a NUL; literal_name_len is the truth. */
		memcpy(m->literal_name, v, n);
		m->literal_name[n] = 0;
		m->literal_name_len = (uint8_t)n;
		m->has_literal = true;
		return 1;
	case PD_T_LITERAL_DATE:
		if (n != 4) return -EPROTO;
		m->literal_date = be32(v);
		m->has_literal = true;
		return 1;
	case PD_T_LITERAL_FORMAT:
		if (n != 1) return -EPROTO;
		m->literal_format = (char)v[0];
		m->has_literal = true;
		return 1;
	case PD_T_RECIPIENT: {
		if (n != 11 && n != 31 && n != 43) return -EPROTO;
		if (m->n_recipients < PD_MAX_RECIPIENTS) {
			struct pd_recipient *r = &m->recipients[m->n_recipients++];
			r->version = v[0];
			r->pk_algo = v[1];
			r->wildcard = (v[2] & PD_RECIPIENT_WILDCARD) != 0;
			memcpy(r->keyid, v + 3, 8);
			r->fpr_len = (uint8_t)(n - 11);
			memcpy(r->fpr, v + 11, n - 11);
		}
		return 1;
	}
	case PD_T_N_RECIPIENTS:
		if (n != 4) return -EPROTO;
		m->n_recipients_total = be32(v);
		return 1;
	case PD_T_N_SKESK:
		if (n != 4) return -EPROTO;
		m->n_skesk = be32(v);
		return 1;
	case PD_T_ISSUER:
		if (n != 8) return -EPROTO;
		if (m->n_issuers < PD_MAX_ISSUERS)
			memcpy(m->issuers[m->n_issuers++], v, 8);
		return 1;
	case PD_T_N_SIGNATURES:
		if (n != 4) return -EPROTO;
		m->n_signatures = be32(v);
		return 1;
	default:
		return 0;
	}
}

int pd_parse_metadata(const uint8_t *p, size_t len, struct pd_msginfo *ret)
{
	memset(ret, 0, sizeof(*ret));
	struct pd_tlv_reader r = { .p = p, .len = len };
	uint8_t tag;
	const uint8_t *v;
	uint16_t n;
	int k;
	while ((k = pd_tlv_next(&r, &tag, &v, &n)) > 0) {
		int s = info_tlv(ret, tag, v, n);
		if (s < 0 || (s == 0 && unknown(tag) < 0))
			return -EPROTO;
	}
	if (ret->n_recipients_total < ret->n_recipients)
		ret->n_recipients_total = ret->n_recipients;
	return k;
}

static int parse_status_tlvs(struct pd_tlv_reader *r, struct pd_result *res, struct pd_msginfo *info, bool result)
{
	uint8_t tag;
	const uint8_t *v;
	uint16_t n;
	int k;
	while ((k = pd_tlv_next(r, &tag, &v, &n)) > 0) {
		if (tag == PD_T_ERRNAME) {
			if (text(res->errname, sizeof(res->errname), v, n) < 0)
				return -EPROTO;
		} else if (tag == PD_T_SENTENCE) {
			if (text(res->sentence, sizeof(res->sentence), v, n) < 0)
				return -EPROTO;
		} else if (tag == PD_T_SESSION_KEY && result) {
			if (n < 2 || n > 1 + PD_SESSION_KEY_MAX || res->sk_len)
				return -EPROTO;
			res->sk_algo = v[0];
			res->sk_len = (uint8_t)(n - 1);
			memcpy(res->sk, v + 1, n - 1u);
		} else if (tag == PD_T_SESSION_KEY_REFUSED && result) {
			if (n != 1 || !v[0])
				return -EPROTO;
			res->sk_refused = v[0];
		} else {
			int s = info ? info_tlv(info, tag, v, n) : 0;
			if (s < 0 || (s == 0 && unknown(tag) < 0))
				return -EPROTO;
		}
	}
	return k;
}

int pd_parse_result(const uint8_t *p, size_t len, struct pd_result *ret, struct pd_msginfo *info)
{
	struct pd_result res = { 0 };
	if (len < 20)
		return -EPROTO;
	res.status = be16(p);
	res.integrity = p[2];
	if (res.integrity > PD_INTEGRITY_UNPROTECTED) /* 0..3 only (PROTOCOL.md section 7) */
		return -EPROTO;
	res.bytes_in = be64(p + 4);
	res.bytes_out = be64(p + 12);
	if (info)
		memset(info, 0, sizeof(*info));
	struct pd_tlv_reader r = { .p = p + 20, .len = len - 20 };
	int k = parse_status_tlvs(&r, &res, info, true);
	if (k < 0)
		return k;
	if (info) {
		if (info->n_recipients_total < info->n_recipients)
			info->n_recipients_total = info->n_recipients;
		info->integrity = (enum pd_integrity)res.integrity;
		info->bytes_in = res.bytes_in;
		info->bytes_out = res.bytes_out;
	}
	*ret = res;
	return 0;
}

size_t pd_key_addrs_join(const struct pd_key_addrs *a, char *out)
{
	size_t len = 0;
	for (size_t i = 0; i < a->n; i++) {
		memcpy(out + len, a->v[i], a->len[i]);
		len += a->len[i];
		out[len++] = 0;
	}
	return len;
}

int pd_parse_key(const uint8_t *p, size_t len, struct pd_keyinfo *ret, struct pd_key_addrs *addrs)
{
	struct pd_keyinfo k = { 0 };
	struct pd_key_addrs a = { .n = 0 };
	if (len < 8)
		return -EPROTO;
	k.version = p[0];
	k.pk_algo = p[1];
	k.bits = be16(p + 2);
	k.created = be32(p + 4);
	struct pd_tlv_reader r = { .p = p + 8, .len = len - 8 };
	uint8_t tag;
	const uint8_t *v;
	uint16_t n;
	int s;
	while ((s = pd_tlv_next(&r, &tag, &v, &n)) > 0) {
		switch (tag) {
		case PD_T_KEY_FPR:
			if (n != 20 && n != 32) return -EPROTO;
			k.fpr_len = (uint8_t)n;
			memcpy(k.fpr, v, n);
			break;
		case PD_T_PRIMARY_FPR:
			if (n != 20 && n != 32) return -EPROTO;
			k.primary_fpr_len = (uint8_t)n;
			memcpy(k.primary_fpr, v, n);
			break;
		case PD_T_KEYID:
			if (n != 8) return -EPROTO;
			memcpy(k.keyid, v, 8);
			break;
		case PD_T_CURVE:
			if (text(k.curve, sizeof(k.curve), v, n) < 0) return -EPROTO;
			break;
		case PD_T_ADDRESS: {
			char t[PD_ADDRESS_MAX + 1];
			if (!n || a.n == PD_KEY_ADDRS_MAX || text(t, sizeof(t), v, n) < 0) return -EPROTO;
			a.v[a.n] = v;
			a.len[a.n++] = (uint8_t)n;
			break;
		}
		default:
			if (unknown(tag) < 0) return -EPROTO;
		}
	}
	if (s < 0)
		return s;
	if (k.fpr_len == 0)
		return -EPROTO;
	*ret = k;
	if (addrs)
		*addrs = a;
	return 0;
}
