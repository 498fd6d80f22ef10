/* PLACEHOLDER: replaced by the AEAD work. */
#include "pgp/seipd.h"
int pd_aead_header_len(uint8_t tag, const uint8_t *hdr4, size_t *ret_len) { return PD_EUNSUPPORTED; }
int pd_aead_new(struct pd_aead **ret, struct pd_worker *w, uint8_t tag, const uint8_t *hdr, size_t hdrlen, const struct pd_sesskey *sk, const struct pd_limits *lim) { return PD_EUNSUPPORTED; }
int pd_aead_run(struct pd_aead *a, const uint8_t *in, size_t inlen, size_t *ret_used, uint8_t *out, size_t outcap, size_t *ret_out, bool eof) { return PD_EUNSUPPORTED; }
struct pd_aead *pd_aead_free(struct pd_aead *a, struct pd_worker *w) { return NULL; }
