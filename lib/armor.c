/* PLACEHOLDER: replaced by the armor work. */
#include "armor.h"
int pd_armor_detect(const uint8_t *in, size_t len, bool eof) { (void)eof; if (!len) return PD_EAGAIN; return (in[0] & 0x80) ? 0 : PD_ENOTPGP; }
void pd_armor_init(struct pd_armor *a) { memset(a, 0, sizeof(*a)); }
int pd_armor_decode(struct pd_armor *a, const uint8_t *in, size_t inlen, size_t *ret_used, uint8_t *out, size_t outcap, size_t *ret_out, bool eof) { return PD_EUNSUPPORTED; }
int pd_armor_decode_all(const uint8_t *in, size_t len, uint8_t **ret, size_t *ret_len) { return PD_EUNSUPPORTED; }
