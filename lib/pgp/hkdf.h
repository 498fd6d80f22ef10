/* SPDX-License-Identifier: MIT */
/* HKDF (RFC 5869) over HMAC: libgcrypt 1.10.1 has no GCRY_KDF_HKDF. */
#pragma once
#include "internal.h"

/** HKDF-Extract+Expand with hash md (GCRY_MD_SHA256/SHA512); salt may be NULL. */
PD_HIDDEN int pd_hkdf(int md, const uint8_t *salt, size_t saltlen, const uint8_t *ikm, size_t ikmlen,
                      const uint8_t *info, size_t infolen, uint8_t *out, size_t outlen);
