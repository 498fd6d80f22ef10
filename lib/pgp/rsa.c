/* PLACEHOLDER: replaced by the unwrap work. */
#include "pgp/rsa.h"
enum pd_rsa_backend pd_rsa_default_backend(void) { return PD_RSA_OPENSSL; }
int pd_rsa_setup(struct pd_key *k, enum pd_rsa_backend backend) { return PD_EUNSUPPORTED; }
void pd_rsa_cleanup(struct pd_key *k) { }
int pd_rsa_decrypt_raw(const struct pd_key *k, unsigned worker, const uint8_t *c, size_t clen, uint8_t *out, size_t klen) { return PD_EUNSUPPORTED; }
