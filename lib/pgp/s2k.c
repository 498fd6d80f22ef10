/* PLACEHOLDER: replaced by the key ring work. */
#include "pgp/s2k.h"
int pd_s2k_parse(const uint8_t *p, size_t len, struct pd_s2k *ret, size_t *ret_used) { return PD_EUNSUPPORTED; }
int pd_s2k_derive(const struct pd_s2k *s, const char *pass, size_t passlen, uint8_t *out, size_t outlen, const struct pd_limits *lim) { return PD_EUNSUPPORTED; }
