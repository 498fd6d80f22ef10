/* PLACEHOLDER: replaced by the inflate work. */
#include "pgp/inflate.h"
int pd_inflate_new(struct pd_inflate **ret, uint8_t algo) { return PD_EUNSUPPORTED; }
int pd_inflate_run(struct pd_inflate *z, const uint8_t *in, size_t inlen, size_t *ret_used, uint8_t *out, size_t outcap, size_t *ret_out, bool eof) { return PD_EUNSUPPORTED; }
struct pd_inflate *pd_inflate_free(struct pd_inflate *z) { return NULL; }
