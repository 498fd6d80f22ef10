/* PLACEHOLDER: replaced by the unwrap work. */
#include "pgp/unwrap.h"
int pd_pkesk_parse(const uint8_t *body, size_t len, struct pd_pkesk *ret) { return PD_EUNSUPPORTED; }
int pd_unwrap(struct pd_worker *w, const struct pd_key *k, const struct pd_pkesk *p, uint8_t sym_algo, struct pd_sesskey *out, uint32_t *ok_mask) { return PD_EUNSUPPORTED; }
uint32_t pd_pkcs1_decode_sesskey(const uint8_t *em, size_t k, uint8_t sym_algo, const struct pd_sesskey *fallback, struct pd_sesskey *out) { return 0; }
