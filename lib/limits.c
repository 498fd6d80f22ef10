/* SPDX-License-Identifier: MIT */
/* The engine's default limits (see struct pd_limits in pgpdec.h): one
 * place, read by the message pipeline and the key ring alike. */
#include "internal.h"

void pd_limits_default(struct pd_limits *lim)
{
	*lim = (struct pd_limits){
		.max_output = 4ull << 30,
		.max_input = 0,
		.max_ratio = 250,
		.ratio_grace = 8u << 20,
		.max_depth = 8,
		.max_packets = 4096,
		.max_partials = 1u << 22,
		.max_esk = 1000,
		.max_key_trials = 64,
		.max_aead_chunk_log = 16,
		.max_argon2_kib = 256u * 1024,
		.max_s2k_count = 65011712,
		.allow_sed = false,
		.max_skesk_trials = 4,
		.max_kdf_mib = 256,
		.max_argon2_passes = 8,
		.max_argon2_lanes = 16,
	};
}
