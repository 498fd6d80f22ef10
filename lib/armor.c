/* SPDX-License-Identifier: MIT */
/*
 * ASCII armor decoder: one octet at a time through a small state machine,
 * so every slicing of the input gives the same output and the same errors.
 * Memory use is the fixed struct pd_armor; lines are never buffered beyond
 * the 128-octet prefix needed to recognise BEGIN/END/CRC lines.
 */
#include <gcrypt.h>

#include "armor.h"

enum {
	ST_PRE = 1,   /* before the BEGIN line (preamble text) */
	ST_HDR_LS,    /* start of an armor-header line */
	ST_HDR_KEY,   /* in a header line, no ':' yet (may turn out to be body) */
	ST_HDR_VAL,   /* after the ':' of a header line */
	ST_HDR_MARK,  /* a '-' line where a header was expected (END of an empty body) */
	ST_B_LS,      /* start of a body line */
	ST_B_DATA,    /* in a base64 line */
	ST_B_MARK,    /* in a '-' line: must be the END line */
	ST_B_CRC,     /* in the "=XXXX" CRC24 line */
	ST_B_POSTCRC, /* after the CRC24 line: only blank lines and END */
	ST_DONE,
};

/* step() results besides 0 (consumed), 1 (consumed, END read) and errors */
#define R_NEEDROOM 2 /* octet not consumed: it would emit and the output is full */
#define R_RETRY 3    /* octet not consumed: state changed, feed it again */

static const char begin_prefix[] = "-----BEGIN PGP ";
#define BEGIN_LEN (sizeof(begin_prefix) - 1)

static const char *const kind_names[] = {
	[1] = "MESSAGE", [2] = "PRIVATE KEY BLOCK", [3] = "PUBLIC KEY BLOCK", [4] = "SIGNATURE",
};

/* CRC24 (RFC 9580 §6.1.1), table for generator 0x864CFB */
static const uint32_t crc24_table[256] = {
	0x000000, 0x864cfb, 0x8ad50d, 0x0c99f6, 0x93e6e1, 0x15aa1a, 0x1933ec, 0x9f7f17,
	0xa18139, 0x27cdc2, 0x2b5434, 0xad18cf, 0x3267d8, 0xb42b23, 0xb8b2d5, 0x3efe2e,
	0xc54e89, 0x430272, 0x4f9b84, 0xc9d77f, 0x56a868, 0xd0e493, 0xdc7d65, 0x5a319e,
	0x64cfb0, 0xe2834b, 0xee1abd, 0x685646, 0xf72951, 0x7165aa, 0x7dfc5c, 0xfbb0a7,
	0x0cd1e9, 0x8a9d12, 0x8604e4, 0x00481f, 0x9f3708, 0x197bf3, 0x15e205, 0x93aefe,
	0xad50d0, 0x2b1c2b, 0x2785dd, 0xa1c926, 0x3eb631, 0xb8faca, 0xb4633c, 0x322fc7,
	0xc99f60, 0x4fd39b, 0x434a6d, 0xc50696, 0x5a7981, 0xdc357a, 0xd0ac8c, 0x56e077,
	0x681e59, 0xee52a2, 0xe2cb54, 0x6487af, 0xfbf8b8, 0x7db443, 0x712db5, 0xf7614e,
	0x19a3d2, 0x9fef29, 0x9376df, 0x153a24, 0x8a4533, 0x0c09c8, 0x00903e, 0x86dcc5,
	0xb822eb, 0x3e6e10, 0x32f7e6, 0xb4bb1d, 0x2bc40a, 0xad88f1, 0xa11107, 0x275dfc,
	0xdced5b, 0x5aa1a0, 0x563856, 0xd074ad, 0x4f0bba, 0xc94741, 0xc5deb7, 0x43924c,
	0x7d6c62, 0xfb2099, 0xf7b96f, 0x71f594, 0xee8a83, 0x68c678, 0x645f8e, 0xe21375,
	0x15723b, 0x933ec0, 0x9fa736, 0x19ebcd, 0x8694da, 0x00d821, 0x0c41d7, 0x8a0d2c,
	0xb4f302, 0x32bff9, 0x3e260f, 0xb86af4, 0x2715e3, 0xa15918, 0xadc0ee, 0x2b8c15,
	0xd03cb2, 0x567049, 0x5ae9bf, 0xdca544, 0x43da53, 0xc596a8, 0xc90f5e, 0x4f43a5,
	0x71bd8b, 0xf7f170, 0xfb6886, 0x7d247d, 0xe25b6a, 0x641791, 0x688e67, 0xeec29c,
	0x3347a4, 0xb50b5f, 0xb992a9, 0x3fde52, 0xa0a145, 0x26edbe, 0x2a7448, 0xac38b3,
	0x92c69d, 0x148a66, 0x181390, 0x9e5f6b, 0x01207c, 0x876c87, 0x8bf571, 0x0db98a,
	0xf6092d, 0x7045d6, 0x7cdc20, 0xfa90db, 0x65efcc, 0xe3a337, 0xef3ac1, 0x69763a,
	0x578814, 0xd1c4ef, 0xdd5d19, 0x5b11e2, 0xc46ef5, 0x42220e, 0x4ebbf8, 0xc8f703,
	0x3f964d, 0xb9dab6, 0xb54340, 0x330fbb, 0xac70ac, 0x2a3c57, 0x26a5a1, 0xa0e95a,
	0x9e1774, 0x185b8f, 0x14c279, 0x928e82, 0x0df195, 0x8bbd6e, 0x872498, 0x016863,
	0xfad8c4, 0x7c943f, 0x700dc9, 0xf64132, 0x693e25, 0xef72de, 0xe3eb28, 0x65a7d3,
	0x5b59fd, 0xdd1506, 0xd18cf0, 0x57c00b, 0xc8bf1c, 0x4ef3e7, 0x426a11, 0xc426ea,
	0x2ae476, 0xaca88d, 0xa0317b, 0x267d80, 0xb90297, 0x3f4e6c, 0x33d79a, 0xb59b61,
	0x8b654f, 0x0d29b4, 0x01b042, 0x87fcb9, 0x1883ae, 0x9ecf55, 0x9256a3, 0x141a58,
	0xefaaff, 0x69e604, 0x657ff2, 0xe33309, 0x7c4c1e, 0xfa00e5, 0xf69913, 0x70d5e8,
	0x4e2bc6, 0xc8673d, 0xc4fecb, 0x42b230, 0xddcd27, 0x5b81dc, 0x57182a, 0xd154d1,
	0x26359f, 0xa07964, 0xace092, 0x2aac69, 0xb5d37e, 0x339f85, 0x3f0673, 0xb94a88,
	0x87b4a6, 0x01f85d, 0x0d61ab, 0x8b2d50, 0x145247, 0x921ebc, 0x9e874a, 0x18cbb1,
	0xe37b16, 0x6537ed, 0x69ae1b, 0xefe2e0, 0x709df7, 0xf6d10c, 0xfa48fa, 0x7c0401,
	0x42fa2f, 0xc4b6d4, 0xc82f22, 0x4e63d9, 0xd11cce, 0x575035, 0x5bc9c3, 0xdd8538,
};

static inline uint32_t crc24_update(uint32_t crc, uint8_t b)
{
	return ((crc << 8) ^ crc24_table[((crc >> 16) ^ b) & 0xff]) & 0xffffff;
}

/* Three octets at once (one base64 quad).  The register is 24 bits, so
 * after three octets all of v = crc ^ b0b1b2 has been shifted out and the
 * result is linear in v: crc24_t2[x] is the register after three zero
 * octets starting from x << 16, crc24_t1 from x << 8, and crc24_table from
 * x (the one-octet table is that last one).  Three independent lookups
 * instead of a chain of three: the armor's bulk path is no longer bound by
 * the CRC.  Tables generated from crc24_table and checked against it. */
static const uint32_t crc24_t2[256] = {
	0x000000, 0x8309d7, 0x805f55, 0x035682, 0x86f251, 0x05fb86, 0x06ad04, 0x85a4d3,
	0x8ba859, 0x08a18e, 0x0bf70c, 0x88fedb, 0x0d5a08, 0x8e53df, 0x8d055d, 0x0e0c8a,
	0x911c49, 0x12159e, 0x11431c, 0x924acb, 0x17ee18, 0x94e7cf, 0x97b14d, 0x14b89a,
	0x1ab410, 0x99bdc7, 0x9aeb45, 0x19e292, 0x9c4641, 0x1f4f96, 0x1c1914, 0x9f10c3,
	0xa47469, 0x277dbe, 0x242b3c, 0xa722eb, 0x228638, 0xa18fef, 0xa2d96d, 0x21d0ba,
	0x2fdc30, 0xacd5e7, 0xaf8365, 0x2c8ab2, 0xa92e61, 0x2a27b6, 0x297134, 0xaa78e3,
	0x356820, 0xb661f7, 0xb53775, 0x363ea2, 0xb39a71, 0x3093a6, 0x33c524, 0xb0ccf3,
	0xbec079, 0x3dc9ae, 0x3e9f2c, 0xbd96fb, 0x383228, 0xbb3bff, 0xb86d7d, 0x3b64aa,
	0xcea429, 0x4dadfe, 0x4efb7c, 0xcdf2ab, 0x485678, 0xcb5faf, 0xc8092d, 0x4b00fa,
	0x450c70, 0xc605a7, 0xc55325, 0x465af2, 0xc3fe21, 0x40f7f6, 0x43a174, 0xc0a8a3,
	0x5fb860, 0xdcb1b7, 0xdfe735, 0x5ceee2, 0xd94a31, 0x5a43e6, 0x591564, 0xda1cb3,
	0xd41039, 0x5719ee, 0x544f6c, 0xd746bb, 0x52e268, 0xd1ebbf, 0xd2bd3d, 0x51b4ea,
	0x6ad040, 0xe9d997, 0xea8f15, 0x6986c2, 0xec2211, 0x6f2bc6, 0x6c7d44, 0xef7493,
	0xe17819, 0x6271ce, 0x61274c, 0xe22e9b, 0x678a48, 0xe4839f, 0xe7d51d, 0x64dcca,
	0xfbcc09, 0x78c5de, 0x7b935c, 0xf89a8b, 0x7d3e58, 0xfe378f, 0xfd610d, 0x7e68da,
	0x706450, 0xf36d87, 0xf03b05, 0x7332d2, 0xf69601, 0x759fd6, 0x76c954, 0xf5c083,
	0x1b04a9, 0x980d7e, 0x9b5bfc, 0x18522b, 0x9df6f8, 0x1eff2f, 0x1da9ad, 0x9ea07a,
	0x90acf0, 0x13a527, 0x10f3a5, 0x93fa72, 0x165ea1, 0x955776, 0x9601f4, 0x150823,
	0x8a18e0, 0x091137, 0x0a47b5, 0x894e62, 0x0ceab1, 0x8fe366, 0x8cb5e4, 0x0fbc33,
	0x01b0b9, 0x82b96e, 0x81efec, 0x02e63b, 0x8742e8, 0x044b3f, 0x071dbd, 0x84146a,
	0xbf70c0, 0x3c7917, 0x3f2f95, 0xbc2642, 0x398291, 0xba8b46, 0xb9ddc4, 0x3ad413,
	0x34d899, 0xb7d14e, 0xb487cc, 0x378e1b, 0xb22ac8, 0x31231f, 0x32759d, 0xb17c4a,
	0x2e6c89, 0xad655e, 0xae33dc, 0x2d3a0b, 0xa89ed8, 0x2b970f, 0x28c18d, 0xabc85a,
	0xa5c4d0, 0x26cd07, 0x259b85, 0xa69252, 0x233681, 0xa03f56, 0xa369d4, 0x206003,
	0xd5a080, 0x56a957, 0x55ffd5, 0xd6f602, 0x5352d1, 0xd05b06, 0xd30d84, 0x500453,
	0x5e08d9, 0xdd010e, 0xde578c, 0x5d5e5b, 0xd8fa88, 0x5bf35f, 0x58a5dd, 0xdbac0a,
	0x44bcc9, 0xc7b51e, 0xc4e39c, 0x47ea4b, 0xc24e98, 0x41474f, 0x4211cd, 0xc1181a,
	0xcf1490, 0x4c1d47, 0x4f4bc5, 0xcc4212, 0x49e6c1, 0xcaef16, 0xc9b994, 0x4ab043,
	0x71d4e9, 0xf2dd3e, 0xf18bbc, 0x72826b, 0xf726b8, 0x742f6f, 0x7779ed, 0xf4703a,
	0xfa7cb0, 0x797567, 0x7a23e5, 0xf92a32, 0x7c8ee1, 0xff8736, 0xfcd1b4, 0x7fd863,
	0xe0c8a0, 0x63c177, 0x6097f5, 0xe39e22, 0x663af1, 0xe53326, 0xe665a4, 0x656c73,
	0x6b60f9, 0xe8692e, 0xeb3fac, 0x68367b, 0xed92a8, 0x6e9b7f, 0x6dcdfd, 0xeec42a,
};
static const uint32_t crc24_t1[256] = {
	0x000000, 0x668f48, 0xcd1e90, 0xab91d8, 0x1c71db, 0x7afe93, 0xd16f4b, 0xb7e003,
	0x38e3b6, 0x5e6cfe, 0xf5fd26, 0x93726e, 0x24926d, 0x421d25, 0xe98cfd, 0x8f03b5,
	0x71c76c, 0x174824, 0xbcd9fc, 0xda56b4, 0x6db6b7, 0x0b39ff, 0xa0a827, 0xc6276f,
	0x4924da, 0x2fab92, 0x843a4a, 0xe2b502, 0x555501, 0x33da49, 0x984b91, 0xfec4d9,
	0xe38ed8, 0x850190, 0x2e9048, 0x481f00, 0xffff03, 0x99704b, 0x32e193, 0x546edb,
	0xdb6d6e, 0xbde226, 0x1673fe, 0x70fcb6, 0xc71cb5, 0xa193fd, 0x0a0225, 0x6c8d6d,
	0x9249b4, 0xf4c6fc, 0x5f5724, 0x39d86c, 0x8e386f, 0xe8b727, 0x4326ff, 0x25a9b7,
	0xaaaa02, 0xcc254a, 0x67b492, 0x013bda, 0xb6dbd9, 0xd05491, 0x7bc549, 0x1d4a01,
	0x41514b, 0x27de03, 0x8c4fdb, 0xeac093, 0x5d2090, 0x3bafd8, 0x903e00, 0xf6b148,
	0x79b2fd, 0x1f3db5, 0xb4ac6d, 0xd22325, 0x65c326, 0x034c6e, 0xa8ddb6, 0xce52fe,
	0x309627, 0x56196f, 0xfd88b7, 0x9b07ff, 0x2ce7fc, 0x4a68b4, 0xe1f96c, 0x877624,
	0x087591, 0x6efad9, 0xc56b01, 0xa3e449, 0x14044a, 0x728b02, 0xd91ada, 0xbf9592,
	0xa2df93, 0xc450db, 0x6fc103, 0x094e4b, 0xbeae48, 0xd82100, 0x73b0d8, 0x153f90,
	0x9a3c25, 0xfcb36d, 0x5722b5, 0x31adfd, 0x864dfe, 0xe0c2b6, 0x4b536e, 0x2ddc26,
	0xd318ff, 0xb597b7, 0x1e066f, 0x788927, 0xcf6924, 0xa9e66c, 0x0277b4, 0x64f8fc,
	0xebfb49, 0x8d7401, 0x26e5d9, 0x406a91, 0xf78a92, 0x9105da, 0x3a9402, 0x5c1b4a,
	0x82a296, 0xe42dde, 0x4fbc06, 0x29334e, 0x9ed34d, 0xf85c05, 0x53cddd, 0x354295,
	0xba4120, 0xdcce68, 0x775fb0, 0x11d0f8, 0xa630fb, 0xc0bfb3, 0x6b2e6b, 0x0da123,
	0xf365fa, 0x95eab2, 0x3e7b6a, 0x58f422, 0xef1421, 0x899b69, 0x220ab1, 0x4485f9,
	0xcb864c, 0xad0904, 0x0698dc, 0x601794, 0xd7f797, 0xb178df, 0x1ae907, 0x7c664f,
	0x612c4e, 0x07a306, 0xac32de, 0xcabd96, 0x7d5d95, 0x1bd2dd, 0xb04305, 0xd6cc4d,
	0x59cff8, 0x3f40b0, 0x94d168, 0xf25e20, 0x45be23, 0x23316b, 0x88a0b3, 0xee2ffb,
	0x10eb22, 0x76646a, 0xddf5b2, 0xbb7afa, 0x0c9af9, 0x6a15b1, 0xc18469, 0xa70b21,
	0x280894, 0x4e87dc, 0xe51604, 0x83994c, 0x34794f, 0x52f607, 0xf967df, 0x9fe897,
	0xc3f3dd, 0xa57c95, 0x0eed4d, 0x686205, 0xdf8206, 0xb90d4e, 0x129c96, 0x7413de,
	0xfb106b, 0x9d9f23, 0x360efb, 0x5081b3, 0xe761b0, 0x81eef8, 0x2a7f20, 0x4cf068,
	0xb234b1, 0xd4bbf9, 0x7f2a21, 0x19a569, 0xae456a, 0xc8ca22, 0x635bfa, 0x05d4b2,
	0x8ad707, 0xec584f, 0x47c997, 0x2146df, 0x96a6dc, 0xf02994, 0x5bb84c, 0x3d3704,
	0x207d05, 0x46f24d, 0xed6395, 0x8becdd, 0x3c0cde, 0x5a8396, 0xf1124e, 0x979d06,
	0x189eb3, 0x7e11fb, 0xd58023, 0xb30f6b, 0x04ef68, 0x626020, 0xc9f1f8, 0xaf7eb0,
	0x51ba69, 0x373521, 0x9ca4f9, 0xfa2bb1, 0x4dcbb2, 0x2b44fa, 0x80d522, 0xe65a6a,
	0x6959df, 0x0fd697, 0xa4474f, 0xc2c807, 0x752804, 0x13a74c, 0xb83694, 0xdeb9dc,
};

static inline uint32_t crc24_update3(uint32_t crc, uint32_t b012)
{
	uint32_t v = crc ^ b012;
	return crc24_t2[v >> 16] ^ crc24_t1[(v >> 8) & 0xff] ^ crc24_table[v & 0xff];
}

/* base64 value of each octet; B64_WS for whitespace other than '\n', B64_BAD otherwise */
#define B64_BAD (-1)
#define B64_WS (-2)
static const int8_t b64tab[256] = {
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -2, -1, -2, -2, -2, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-2, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 62, -1, -1, -1, 63,
	52, 53, 54, 55, 56, 57, 58, 59, 60, 61, -1, -1, -1, -1, -1, -1,
	-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
	15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, -1, -1, -1, -1, -1,
	-1, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40,
	41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
};

static inline int b64val(uint8_t c)
{
	return b64tab[c] >= 0 ? b64tab[c] : -1;
}

/* Whitespace other than the line feed, which ends lines. */
static inline bool is_ws(uint8_t c)
{
	return b64tab[c] == B64_WS;
}

static void line_reset(struct pd_armor *a)
{
	a->line_len = 0;
	a->line_skip = false;
}

/* Keep the line prefix; past the buffer only whitespace (trailing, trimmed
 * later) is harmless, anything else marks the line as too long. */
static void line_push(struct pd_armor *a, uint8_t c)
{
	if (a->line_len < sizeof(a->line))
		a->line[a->line_len++] = (char)c;
	else if (!is_ws(c))
		a->line_skip = true;
}

static size_t line_trimmed(const struct pd_armor *a)
{
	size_t n = a->line_len;
	while (n && is_ws((uint8_t)a->line[n - 1]))
		n--;
	return n;
}

/* "-----BEGIN PGP <kind>-----" → kind 1..4; cleartext-signed, multi-part
 * and unknown kinds are refused as unsupported. */
static int parse_begin(const struct pd_armor *a)
{
	size_t n = line_trimmed(a);
	if (a->line_skip || n < BEGIN_LEN + 5 || memcmp(a->line + n - 5, "-----", 5) != 0)
		return PD_EMALFORMED;
	const char *t = a->line + BEGIN_LEN;
	size_t tn = n - BEGIN_LEN - 5;
	for (size_t k = 1; k < PD_ARRAY_SIZE(kind_names); k++)
		if (strlen(kind_names[k]) == tn && memcmp(t, kind_names[k], tn) == 0)
			return (int)k;
	return PD_EUNSUPPORTED;
}

/* The END line must name the kind BEGIN named.  Its tail is five dashes or
 * more: "-----END PGP MESSAGE--------" is written by some peers, and gpg,
 * sq, rnp and gosop accept it. */
static int parse_end(struct pd_armor *a)
{
	static const char end_prefix[] = "-----END PGP ";
	const size_t plen = sizeof(end_prefix) - 1;
	size_t n = line_trimmed(a);
	const char *name = kind_names[a->kind];
	size_t nlen = strlen(name);
	if (a->line_skip || n < plen + nlen + 5 || memcmp(a->line, end_prefix, plen) != 0 ||
	    memcmp(a->line + plen, name, nlen) != 0)
		return PD_EMALFORMED;
	for (size_t k = plen + nlen; k < n; k++)
		if (a->line[k] != '-')
			return PD_EMALFORMED;
	if (a->nquad == 1) /* six dangling bits: not base64 */
		return PD_EMALFORMED;
	a->state = ST_DONE;
	return 1;
}

/* "=XXXX": never fatal (RFC 9580 §6.1), only recorded. */
static void parse_crc(struct pd_armor *a)
{
	size_t n = line_trimmed(a);
	uint32_t v = 0;
	a->crc_state = -1;
	if (a->line_skip || n != 5)
		return;
	for (size_t k = 1; k < 5; k++) {
		int s = b64val((uint8_t)a->line[k]);
		if (s < 0)
			return;
		v = (v << 6) | (uint32_t)s;
	}
	a->crc_given = v;
	a->crc_state = v == a->crc ? 1 : -1;
}

/* One base64 character or '=': each data sextet after the first of a quad
 * completes exactly one octet, so one input octet emits at most one. */
static int data_char(struct pd_armor *a, uint8_t c, uint8_t *out, size_t outcap, size_t *o)
{
	if (c == '=') {
		if (a->nquad < 2)
			return PD_EMALFORMED;
		a->npad++;
		if (++a->nquad == 4) {
			a->nquad = a->npad = 0;
			a->quad = 0;
			a->data_done = true;
		}
		return 0;
	}
	int v = b64val(c);
	if (v < 0 || a->data_done || a->npad)
		return PD_EMALFORMED;
	if (a->nquad > 0 && *o == outcap)
		return R_NEEDROOM;
	a->quad = (a->quad << 6) | (uint32_t)v;
	a->nquad++;
	if (a->nquad >= 2) {
		uint8_t b = (uint8_t)(a->quad >> (8 - 2 * a->nquad));
		out[(*o)++] = b;
		a->crc = crc24_update(a->crc, b);
	}
	if (a->nquad == 4) {
		a->nquad = 0;
		a->quad = 0;
	}
	return 0;
}

/* The bulk of a body: whole quads and whitespace inside a base64 line.
 * Stops before anything else (line end, '=', bad octets, full output),
 * which step() then handles; returns the new input offset. */
static size_t fast_data(struct pd_armor *a, const uint8_t *in, size_t inlen, size_t i,
                        uint8_t *out, size_t outcap, size_t *o)
{
	if (a->data_done || a->npad)
		return i;
	size_t k = *o;
	uint32_t crc = a->crc;
	while (i < inlen) {
		if (a->nquad == 0 && inlen - i >= 4 && outcap - k >= 3) {
			int v0 = b64tab[in[i]], v1 = b64tab[in[i + 1]], v2 = b64tab[in[i + 2]], v3 = b64tab[in[i + 3]];
			if ((v0 | v1 | v2 | v3) >= 0) {
				uint32_t q = (uint32_t)v0 << 18 | (uint32_t)v1 << 12 | (uint32_t)v2 << 6 | (uint32_t)v3;
				out[k] = (uint8_t)(q >> 16);
				out[k + 1] = (uint8_t)(q >> 8);
				out[k + 2] = (uint8_t)q;
				crc = crc24_update3(crc, q);
				k += 3;
				i += 4;
				continue;
			}
		}
		int v = b64tab[in[i]];
		if (v == B64_WS) {
			i++;
			continue;
		}
		/* A line end followed by a data octet: step() would go to the
		 * line-start state and straight back to data for that octet
		 * ('-' and '=' are not data), so stay here. */
		if (in[i] == '\n' && i + 1 < inlen && b64tab[in[i + 1]] >= 0) {
			i++;
			continue;
		}
		if (v < 0 || (a->nquad > 0 && k == outcap))
			break;
		a->quad = (a->quad << 6) | (uint32_t)v;
		if (++a->nquad >= 2) {
			out[k] = (uint8_t)(a->quad >> (8 - 2 * a->nquad));
			crc = crc24_update(crc, out[k++]);
		}
		if (a->nquad == 4) {
			a->nquad = 0;
			a->quad = 0;
		}
		i++;
	}
	a->crc = crc;
	*o = k;
	return i;
}

static int step_pre(struct pd_armor *a, uint8_t c)
{
	a->skipped++;
	if (c == '\n') {
		/* A misshapen BEGIN line is text (mail may quote one); a
		 * well-formed one of a kind we can't decode is refused. */
		int r = !a->line_skip && a->line_len >= BEGIN_LEN ? parse_begin(a) : PD_EMALFORMED;
		if (r > 0) {
			a->kind = (uint8_t)r;
			a->state = ST_HDR_LS;
			a->skipped = 0;
		} else if (r != PD_EMALFORMED) {
			return r;
		} else if (a->skipped > PD_ARMOR_PREAMBLE_MAX) {
			return PD_ENOTPGP;
		}
		line_reset(a);
		return 0;
	}
	if (!a->line_skip && a->line_len < BEGIN_LEN && c != (uint8_t)begin_prefix[a->line_len])
		a->line_skip = true; /* not a BEGIN line: skip it without keeping it */
	if (!a->line_skip)
		line_push(a, c); /* sets line_skip when too long to be a BEGIN line */
	return a->line_skip && a->skipped > PD_ARMOR_PREAMBLE_MAX ? PD_ENOTPGP : 0;
}

static int step_hdr(struct pd_armor *a, uint8_t c)
{
	if (++a->skipped > PD_ARMOR_HEADERS_MAX)
		return PD_ELIMIT;
	switch (a->state) {
	case ST_HDR_LS:
		if (c == '\n') { /* blank (or whitespace-only) line: the body follows */
			a->state = ST_B_LS;
			return 0;
		}
		if (is_ws(c))
			return 0;
		line_reset(a);
		if (c == '-') {
			a->state = ST_HDR_MARK;
			line_push(a, c);
			return 0;
		}
		if (c == '=') { /* a CRC line can't be a header; empty body */
			a->state = ST_B_LS;
			return R_RETRY;
		}
		a->state = ST_HDR_KEY;
		a->maybe_body = b64val(c) >= 0;
		line_push(a, c);
		return 0;
	case ST_HDR_KEY:
		if (c == ':') {
			a->state = ST_HDR_VAL;
			return 0;
		}
		if (c == '\n' || a->line_len == sizeof(a->line)) {
			/* No ':' in the line: the blank line is missing and this is
			 * already base64.  Replay what was kept, then this octet. */
			if (!a->maybe_body)
				return PD_EMALFORMED;
			a->skipped--;
			a->state = ST_B_LS;
			a->replay = true;
			a->rp_pos = 0;
			return R_RETRY;
		}
		if (b64val(c) < 0 && !is_ws(c) && c != '=')
			a->maybe_body = false;
		line_push(a, c);
		return 0;
	case ST_HDR_VAL:
		if (c == '\n')
			a->state = ST_HDR_LS;
		return 0;
	case ST_HDR_MARK:
		if (c == '\n')
			return parse_end(a);
		line_push(a, c);
		return a->line_skip ? PD_EMALFORMED : 0;
	}
	return PD_EINTERNAL;
}

static int step(struct pd_armor *a, uint8_t c, uint8_t *out, size_t outcap, size_t *o)
{
	switch (a->state) {
	case ST_PRE:
		return step_pre(a, c);
	case ST_HDR_LS:
	case ST_HDR_KEY:
	case ST_HDR_VAL:
	case ST_HDR_MARK:
		return step_hdr(a, c);
	case ST_B_LS:
		if (c == '\n' || is_ws(c))
			return 0;
		if (c == '-' || (c == '=' && a->nquad == 0)) {
			/* '=' at a quad boundary can't be padding: the CRC line */
			line_reset(a);
			a->state = c == '-' ? ST_B_MARK : ST_B_CRC;
			line_push(a, c);
			return 0;
		}
		a->state = ST_B_DATA;
		/* fall through */
	case ST_B_DATA:
		if (c == '\n') {
			a->state = ST_B_LS;
			return 0;
		}
		if (is_ws(c))
			return 0;
		return data_char(a, c, out, outcap, o);
	case ST_B_MARK:
		if (c == '\n')
			return parse_end(a);
		line_push(a, c);
		return a->line_skip ? PD_EMALFORMED : 0;
	case ST_B_CRC:
		if (c == '\n') {
			parse_crc(a);
			a->state = ST_B_POSTCRC;
		} else {
			line_push(a, c);
		}
		return 0;
	case ST_B_POSTCRC:
		if (c == '\n' || is_ws(c))
			return 0;
		if (c == '-') {
			line_reset(a);
			a->state = ST_B_MARK;
			line_push(a, c);
			return 0;
		}
		return PD_EMALFORMED; /* data after the CRC line */
	}
	return PD_EINTERNAL;
}

/* All input seen: an END line without its final newline still counts. */
static int at_eof(struct pd_armor *a)
{
	switch (a->state) {
	case ST_PRE:
		return !a->line_skip && a->line_len >= BEGIN_LEN ? PD_ETRUNCATED : PD_ENOTPGP;
	case ST_HDR_MARK:
	case ST_B_MARK:
		return parse_end(a) == 1 ? 1 : PD_ETRUNCATED;
	default:
		return PD_ETRUNCATED;
	}
}

int pd_armor_detect(const uint8_t *in, size_t len, bool eof)
{
	if (!len)
		return eof ? PD_ENOTPGP : PD_EAGAIN;
	if (in[0] & 0x80) /* every packet header has bit 7 set; no text starts so */
		return 0;
	size_t pos = 0;
	for (;;) {
		if (pos > PD_ARMOR_PREAMBLE_MAX)
			return PD_ENOTPGP;
		size_t n = PD_MIN(len - pos, BEGIN_LEN);
		if (memcmp(in + pos, begin_prefix, n) == 0) {
			if (n == BEGIN_LEN)
				return 1;
			return eof ? PD_ENOTPGP : PD_EAGAIN;
		}
		const uint8_t *nl = memchr(in + pos, '\n', len - pos);
		if (!nl)
			return eof || len - pos > PD_ARMOR_PREAMBLE_MAX ? PD_ENOTPGP : PD_EAGAIN;
		pos = (size_t)(nl - in) + 1;
	}
}

void pd_armor_init(struct pd_armor *a)
{
	memset(a, 0, sizeof(*a));
	a->state = ST_PRE;
	a->crc = 0xB704CE;
}

int pd_armor_decode(struct pd_armor *a, const uint8_t *in, size_t inlen, size_t *ret_used,
                    uint8_t *out, size_t outcap, size_t *ret_out, bool eof)
{
	size_t i = 0, o = 0;
	int r = 0;

	if (a->state < 0)
		return a->state;
	if (a->state == ST_DONE) {
		*ret_used = *ret_out = 0;
		return 1;
	}
	for (;;) {
		bool from_replay = a->replay;
		uint8_t c;
		if (from_replay) {
			if (a->rp_pos == a->line_len) {
				a->replay = false;
				line_reset(a);
				continue;
			}
			c = (uint8_t)a->line[a->rp_pos];
		} else {
			if (a->state == ST_B_DATA)
				i = fast_data(a, in, inlen, i, out, outcap, &o);
			if (i == inlen)
				break;
			c = in[i];
		}
		r = step(a, c, out, outcap, &o);
		if (r == R_NEEDROOM) {
			r = 0;
			break;
		}
		if (r == R_RETRY)
			continue;
		if (r < 0) {
			a->state = r;
			return r;
		}
		if (from_replay)
			a->rp_pos++;
		else
			i++;
		if (r == 1)
			break;
	}
	if (r == 0 && eof && i == inlen && !a->replay) {
		r = at_eof(a);
		if (r < 0) {
			a->state = r;
			return r;
		}
	}
	*ret_used = i;
	*ret_out = o;
	return r;
}

static int decode_all(const uint8_t *in, size_t len, uint8_t **ret, size_t *ret_len, bool secure)
{
	int r = pd_armor_detect(in, len, true);
	if (r < 0)
		return r;
	/* Base64 yields at most 3 octets per 4 characters; binary is copied. */
	size_t cap = r == 0 ? len : len / 4 * 3 + 3;
	uint8_t *buf = secure ? gcry_malloc_secure(cap ? cap : 1) : malloc(cap ? cap : 1);
	if (!buf)
		return -ENOMEM;
	if (r == 0) {
		memcpy(buf, in, len);
		*ret = buf;
		*ret_len = len;
		return 0;
	}
	size_t pos = 0, o = 0;
	for (unsigned blocks = 0; pos < len; blocks++) {
		if (blocks) {
			r = pd_armor_detect(in + pos, len - pos, true);
			if (r == PD_ENOTPGP) /* trailing text after the last block */
				break;
			if (r == 0) /* binary after armor: not something we produce or expect */
				r = PD_EMALFORMED;
			if (r < 0)
				goto fail;
		}
		struct pd_armor a;
		size_t used, n;
		pd_armor_init(&a);
		r = pd_armor_decode(&a, in + pos, len - pos, &used, buf + o, cap - o, &n, true);
		pd_wipe(&a, sizeof(a)); /* its quantum and line hold key material */
		if (r != 1) {
			if (r >= 0) /* eof and room for everything: it must have finished */
				r = PD_EINTERNAL;
			goto fail;
		}
		pos += used;
		o += n;
	}
	*ret = buf;
	*ret_len = o;
	return 0;
fail:
	pd_wipe(buf, cap); /* may hold (part of) a secret key block */
	if (secure)
		gcry_free(buf);
	else
		free(buf);
	return r;
}

int pd_armor_decode_all(const uint8_t *in, size_t len, uint8_t **ret, size_t *ret_len)
{
	return decode_all(in, len, ret, ret_len, false);
}

int pd_armor_decode_all_secure(const uint8_t *in, size_t len, uint8_t **ret, size_t *ret_len)
{
	return decode_all(in, len, ret, ret_len, true);
}
