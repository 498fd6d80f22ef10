/* PLACEHOLDER: replaced by the key ring work. */
#include "pgp/key.h"
struct pd_keyring { size_t n; };
int pd_keyring_new(struct pd_keyring **ret, enum pd_rsa_backend b) { *ret = calloc(1, sizeof(**ret)); return *ret ? 0 : -ENOMEM; }
struct pd_keyring *pd_keyring_free(struct pd_keyring *kr) { free(kr); return NULL; }
int pd_keyring_add(struct pd_keyring *kr, const uint8_t *data, size_t len, const char *pass, size_t passlen, char *detail, size_t dl) { return PD_EUNSUPPORTED; }
size_t pd_keyring_count(const struct pd_keyring *kr) { return 0; }
int pd_keyring_info(const struct pd_keyring *kr, size_t i, struct pd_keyinfo *ret) { return -EINVAL; }
size_t pd__keyring_n(const struct pd_keyring *kr) { return 0; }
const struct pd_key *pd__keyring_get(const struct pd_keyring *kr, size_t i) { return NULL; }
struct pd_key *pd_key_free(struct pd_key *k) { return NULL; }
