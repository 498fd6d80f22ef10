/* SPDX-License-Identifier: MIT */
/*
 * The pgpdecd wire codec: frames in, frames out, no I/O.
 *
 * Place in the data path: the daemon's session (after TLS) and the client
 * library push received bytes, sliced any way, into a pd_frame_decoder and
 * get whole frames back; they build frames to send with the pd_frame_encode_*
 * helpers.  proto/PROTOCOL.md is the normative description of every frame;
 * this codec checks everything that can be checked without connection state
 * (frame size, type, request id zero or not, fixed payload sizes, TLV
 * syntax).  Ordering rules (handshake first, one request at a time, replies
 * in order) belong to the session that owns the decoder.
 *
 * Errors: -EMSGSIZE for a frame larger than the limit, -EPROTO for any other
 * protocol violation, -ENOBUFS when an encoder's output buffer is too small,
 * -ENOMEM.  A decoder that returned an error stays failed.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pgpdec.h"

#define PD_PROTO_MAGIC "PGPD"
#define PD_PROTO_VERSION 1          /* the only version this codec speaks */
#define PD_FRAME_HDR_LEN 9          /* length(4) type(1) request id(4) */
#define PD_FRAME_MAX_CEILING (16u << 20) /* no peer may announce more */
#define PD_FRAME_MAX_FLOOR (16u << 10)   /* nor less: structured frames must fit */
#define PD_FRAME_MAX_DEFAULT (64u << 10)
#define PD_FRAME_HELLO_MAX 2048     /* HELLO and ERROR payloads, before limits are known */
#define PD_FRAME_STRUCT_MAX 8192    /* any HELLO/ERROR/DECRYPT/METADATA/RESULT/KEY frame fits */
#define PD_PING_MAX 64              /* PING/PONG payload */
#define PD_PASSWORD_MAX 1024
#define PD_SENTENCE_MAX 1024
#define PD_SOFTWARE_MAX 64

enum pd_frame_type {
	PD_FT_HELLO = 0x01,    /* both directions, id 0 */
	PD_FT_ERROR = 0x02,    /* both directions, id 0; the connection ends */
	PD_FT_DECRYPT = 0x10,  /* client: begin a decryption request */
	PD_FT_DATA = 0x11,     /* both: ciphertext (client) or plaintext (server) */
	PD_FT_END = 0x12,      /* client: end of the ciphertext */
	PD_FT_PING = 0x13,     /* client */
	PD_FT_STATS = 0x14,    /* client */
	PD_FT_KEYS = 0x15,     /* client */
	PD_FT_METADATA = 0x20, /* server */
	PD_FT_RESULT = 0x21,   /* server: terminal frame of a DECRYPT/STATS/KEYS reply */
	PD_FT_PONG = 0x22,     /* server: terminal frame of a PING reply */
	PD_FT_KEY = 0x23,      /* server: one key in a KEYS reply */
};

/** Which side a decoder reads from: frames valid only in the other direction are violations. */
enum pd_frame_role {
	PD_FROM_CLIENT = 1, /* the daemon's decoder */
	PD_FROM_SERVER = 2, /* the client's decoder */
};

/* DECRYPT flags (u32) */
#define PD_DF_VERIFIED_ONLY 0x1u  /* hold all plaintext until the message is verified */
#define PD_DF_WANT_METADATA 0x2u  /* send a METADATA frame before the plaintext */
#define PD_DF_WANT_SESSION_KEY 0x4u /* RESULT OK carries the session key, if the server allows it */
#define PD_DF_KNOWN 0x7u          /* flags this version defines; others are a bad request */

/* TLV tags.  Tags with bit 0x80 set are critical: a receiver that does not
 * know one must reject the frame (BAD_REQUEST in a request). */
enum pd_tlv_tag {
	PD_T_SOFTWARE = 0x01,      /* HELLO: implementation name and version, UTF-8 */
	PD_T_PASSWORD = 0x02,      /* DECRYPT: password for SKESK packets */
	PD_T_SIZE_HINT = 0x03,     /* DECRYPT: u64 ciphertext size the client will send */
	PD_T_SESSION_KEY_IN = 0x04,/* DECRYPT: u8 symmetric algo, key octets: decrypt with it */
	PD_T_BIND = 0x85,          /* DECRYPT (critical): only keys bound to this address or @domain */
	PD_T_LITERAL_NAME = 0x10,  /* raw octets, 0..255 */
	PD_T_LITERAL_DATE = 0x11,  /* u32 */
	PD_T_LITERAL_FORMAT = 0x12,/* u8 */
	PD_T_ARMORED = 0x13,       /* u8 0/1 */
	PD_T_CONTAINER = 0x14,     /* u8 packet tag, u8 version */
	PD_T_SYM_ALGO = 0x15,      /* u8 */
	PD_T_AEAD = 0x16,          /* u8 algo, u8 chunk size octet */
	PD_T_PK_ALGO = 0x17,       /* u8 (0 = opened with a password) */
	PD_T_KEY_FPR = 0x18,       /* 20 or 32 octets: the (sub)key that opened it */
	PD_T_COMPRESSION = 0x19,   /* 1..8 octets, outermost first */
	PD_T_RECIPIENT = 0x1a,     /* u8 version, u8 pk algo, u8 flags, keyid 8, fpr 0/20/32 */
	PD_T_N_RECIPIENTS = 0x1b,  /* u32 total PKESKs, including those not listed */
	PD_T_N_SKESK = 0x1c,       /* u32 */
	PD_T_ISSUER = 0x1d,        /* 8 octets key id of a signature / one-pass signature */
	PD_T_N_SIGNATURES = 0x1e,  /* u32 */
	PD_T_PRIMARY_FPR = 0x20,   /* KEY: fingerprint of the primary key, 20 or 32 octets */
	PD_T_KEYID = 0x21,         /* KEY: 8 octets */
	PD_T_CURVE = 0x22,         /* KEY: curve name, ASCII, ECC keys only */
	PD_T_ADDRESS = 0x23,       /* KEY: an address its User IDs bind it to (BIND), repeated */
	PD_T_ERRNAME = 0x30,       /* RESULT/ERROR: stable short name, e.g. "EINTEGRITY" */
	PD_T_SENTENCE = 0x31,      /* RESULT/ERROR: human sentence, UTF-8 */
	PD_T_SESSION_KEY = 0x32,   /* RESULT OK: u8 symmetric algo, key octets (WANT_SESSION_KEY) */
	PD_T_SESSION_KEY_REFUSED = 0x33, /* RESULT OK: u8 why no SESSION_KEY (PD_SKR_*) */
};

#define PD_RECIPIENT_WILDCARD 0x1u

/* SESSION_KEY_REFUSED reasons */
#define PD_SKR_POLICY 1     /* not allowed for this peer (allow-session-key-export) */
#define PD_SKR_UNPROTECTED 2 /* the message has no integrity protection (SED): no key is given out */

struct pd_frame_hdr { /* public, by value */
	uint32_t len;  /* payload octets, header excluded */
	uint8_t type;  /* enum pd_frame_type */
	uint32_t id;   /* request id; 0 for HELLO and ERROR */
};

/* ------------------------------------------------------------------ */
/* Decoder */

struct pd_frame_decoder;

/** Create a decoder for frames coming from role, refusing payloads over max_payload
 * (clamped to PD_FRAME_MAX_CEILING). */
int pd_frame_decoder_new(struct pd_frame_decoder **ret, enum pd_frame_role role, uint32_t max_payload);
/** Free it; accepts NULL, returns NULL. */
struct pd_frame_decoder *pd_frame_decoder_free(struct pd_frame_decoder *d);
/** Change the payload limit (after the handshake); takes effect at the next frame header. */
void pd_frame_decoder_set_max(struct pd_frame_decoder *d, uint32_t max_payload);
/** Feed bytes.  Returns 1 when a frame is complete: *ret_hdr and *ret_payload (valid
 * until the next call, pointing into in or into the decoder, which wipes its copy at
 * the next call and on a violation) describe it; 0 when all
 * of in was consumed without completing a frame; negative on a violation.
 * *ret_consumed always says how much of in was used: call again with the rest. */
int pd_frame_decode(struct pd_frame_decoder *d, const uint8_t *in, size_t len, size_t *ret_consumed,
                    struct pd_frame_hdr *ret_hdr, const uint8_t **ret_payload);
/** As pd_frame_decode, but the payload of a DATA frame comes out in slices as
 * it arrives, each pointing into in (never copied), at most data_room octets
 * long (0: the payload waits; an empty DATA frame is one empty slice):
 * *ret_hdr is the frame's with len the slice's.  Where one DATA frame ends
 * and the next of the same request begins does not show: DATA is a byte
 * stream.  Other frames come whole, as from pd_frame_decode.  A decoder is
 * driven by one of the two functions only. */
int pd_frame_decode_stream(struct pd_frame_decoder *d, const uint8_t *in, size_t len, size_t data_room,
                           size_t *ret_consumed, struct pd_frame_hdr *ret_hdr, const uint8_t **ret_payload);
/** Octets of an incomplete frame held (or, for a DATA frame streamed, seen):
 * nonzero at EOF means a truncated frame. */
size_t pd_frame_decoder_pending(const struct pd_frame_decoder *d);
/** Sentence describing the violation after an error ("" otherwise). */
const char *pd_frame_decoder_detail(const struct pd_frame_decoder *d);
/** Printable name of a frame type ("DATA"), "?" if unknown. */
const char *pd_frame_type_name(uint8_t type);

/* ------------------------------------------------------------------ */
/* Encoders.  Each writes one whole frame (header included) into out and
 * returns its length, or -ENOBUFS if cap is too small (out is then garbage).
 * PD_FRAME_STRUCT_MAX is always enough for the structured ones. */

/** Write a 9-octet header (for DATA payloads the caller places behind it). */
void pd_frame_put_hdr(uint8_t *out, uint8_t type, uint32_t id, uint32_t len);
/** Any frame with an opaque payload (DATA, END, PING, PONG, STATS, KEYS). */
int pd_frame_encode(uint8_t *out, size_t cap, uint8_t type, uint32_t id, const void *payload, size_t len);

struct pd_hello { /* public, by value */
	uint16_t version_min;   /* client: lowest version spoken; server: the version chosen */
	uint16_t version_max;   /* client: highest version spoken; server: same as version_min */
	uint32_t max_frame;     /* server: largest payload either side may send */
	uint64_t max_message;   /* server: largest ciphertext per request, 0 = unlimited */
	uint32_t max_inflight;  /* server: requests begun and not yet answered, per connection */
	char software[PD_SOFTWARE_MAX + 1];
};

/** Client HELLO: versions and software name (may be NULL). */
int pd_frame_encode_client_hello(uint8_t *out, size_t cap, const struct pd_hello *h);
/** Server HELLO: chosen version and limits. */
int pd_frame_encode_server_hello(uint8_t *out, size_t cap, const struct pd_hello *h);
/** ERROR: status (enum pd_status), stable name and sentence (either may be NULL). */
int pd_frame_encode_error(uint8_t *out, size_t cap, uint16_t status, const char *errname, const char *sentence);

struct pd_decrypt_req { /* public, by value */
	uint32_t flags;               /* PD_DF_* */
	const uint8_t *password;      /* NULL or password octets (points into the payload when parsed) */
	size_t password_len;
	uint64_t size_hint;           /* valid when has_size_hint */
	bool has_size_hint;
	const uint8_t *session_key;   /* NULL or key octets (into the payload when parsed) */
	size_t session_key_len;       /* 1..PD_SESSION_KEY_MAX */
	uint8_t session_key_algo;     /* OpenPGP symmetric algorithm id */
	/* BIND values (into the payload when parsed), 1..PD_ADDRESS_MAX octets
	 * each; whether each is an address is the server's to check
	 * (pd_bind_check). */
	const uint8_t *bind[PD_MAX_BIND];
	uint8_t bind_len[PD_MAX_BIND];
	uint8_t n_bind;
};
/** Whether v (n octets) is a BIND value: local@domain or @domain, exactly
 * one '@', a non-empty domain, no space, control octet, '<' or '>', at
 * most PD_ADDRESS_MAX octets (the rule of libpgpdec's pd_bind_check, for
 * those that do not link the engine: the client library, the mail filter). */
bool pd_bind_value_ok(const char *v, size_t n);
/** DECRYPT request. */
int pd_frame_encode_decrypt(uint8_t *out, size_t cap, uint32_t id, const struct pd_decrypt_req *r);

/** METADATA from the engine's message info (the fields known so far). */
int pd_frame_encode_metadata(uint8_t *out, size_t cap, uint32_t id, const struct pd_msginfo *info);

struct pd_result { /* public, by value */
	uint16_t status;              /* enum pd_status */
	uint8_t integrity;            /* enum pd_integrity */
	uint64_t bytes_in, bytes_out;
	char errname[24];
	char sentence[PD_SENTENCE_MAX + 1];
	/* WANT_SESSION_KEY: the key (sk_len > 0) or why none (sk_refused, PD_SKR_*).
	 * Whoever fills sk wipes it. */
	uint8_t sk_algo, sk_len, sk_refused;
	uint8_t sk[PD_SESSION_KEY_MAX];
};
/** RESULT: status fields, plus the algorithms and key of info (may be NULL). */
int pd_frame_encode_result(uint8_t *out, size_t cap, uint32_t id, const struct pd_result *r,
                           const struct pd_msginfo *info);
#define PD_KEY_ADDRS_MAX 16 /* ADDRESS TLVs of one KEY frame */
/** KEY: one loaded decryption key, and the addresses it is bound to
 * (addrs_len octets, a NUL after each, as pd_keyring_addresses gives
 * them; the first PD_KEY_ADDRS_MAX). */
int pd_frame_encode_key(uint8_t *out, size_t cap, uint32_t id, const struct pd_keyinfo *k, const char *addrs,
                        size_t addrs_len);

struct pd_key_addrs { /* a KEY frame's ADDRESS values, into its payload */
	const uint8_t *v[PD_KEY_ADDRS_MAX];
	uint8_t len[PD_KEY_ADDRS_MAX];
	uint8_t n;
};

/* ------------------------------------------------------------------ */
/* Payload parsers: 0 or -EPROTO (with unknown non-critical TLVs skipped). */

/** HELLO payload from role's side into *ret. */
int pd_parse_hello(const uint8_t *p, size_t len, enum pd_frame_role role, struct pd_hello *ret);
/** ERROR payload: status, name and sentence into *ret (other fields zero). */
int pd_parse_error(const uint8_t *p, size_t len, struct pd_result *ret);
/** DECRYPT payload; password points into p.  Unknown flags or critical TLVs: -EPROTO. */
int pd_parse_decrypt(const uint8_t *p, size_t len, struct pd_decrypt_req *ret);
/** METADATA payload into *ret (zeroed first). */
int pd_parse_metadata(const uint8_t *p, size_t len, struct pd_msginfo *ret);
/** RESULT payload into *ret and, if info is not NULL, the metadata fields it carries. */
int pd_parse_result(const uint8_t *p, size_t len, struct pd_result *ret, struct pd_msginfo *info);
/** KEY payload into *ret. */
int pd_parse_key(const uint8_t *p, size_t len, struct pd_keyinfo *ret, struct pd_key_addrs *addrs);
/** a's values into out (room for PD_KEY_ADDRS_MAX * (PD_ADDRESS_MAX + 1)),
 * a NUL after each, as pd_frame_encode_key takes them; their length. */
size_t pd_key_addrs_join(const struct pd_key_addrs *a, char *out);

/* ------------------------------------------------------------------ */
/* TLV reader, for anyone parsing extensions. */

struct pd_tlv_reader { /* public, by value */
	const uint8_t *p;
	size_t len, off;
};
/** Next TLV: 1 and the tag/value, 0 at the end, -EPROTO if the rest is not whole TLVs. */
int pd_tlv_next(struct pd_tlv_reader *r, uint8_t *ret_tag, const uint8_t **ret_val, uint16_t *ret_len);
