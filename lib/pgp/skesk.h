/* PLACEHOLDER: replaced by the AEAD work. */
#pragma once
#include "pgp/unwrap.h"
PD_HIDDEN int pd_skesk_decrypt(struct pd_worker *w, const uint8_t *body, size_t len, const char *pw, size_t pwlen,
                               const struct pd_limits *lim, struct pd_sesskey *out);
