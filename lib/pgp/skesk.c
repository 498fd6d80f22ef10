/* PLACEHOLDER: replaced by the AEAD work. */
#include "pgp/skesk.h"
int pd_skesk_decrypt(struct pd_worker *w, const uint8_t *body, size_t len, const char *pw, size_t pwlen, const struct pd_limits *lim, struct pd_sesskey *out) { return PD_EUNSUPPORTED; }
