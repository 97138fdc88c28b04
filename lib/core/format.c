/* SPDX-License-Identifier: MIT */
/*
 * format.c - checksums and hashes of the on-disk format.
 *
 * crc32c (Castagnoli, reflected polynomial 0x82f63b78).  Stored checksums
 * are crc32c(~0, bytes) ^ ~0 as a little-endian u32 in the first 4 bytes of
 * the 32-byte checksum field; the other 28 bytes are zero.  The SSE4.2
 * instruction is used when the CPU has it.
 */
#include <stdbool.h>

#include "format.h"

static uint32_t crc_table[8][256];
static bool crc_hw;

__attribute__((constructor)) static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
		crc_table[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^
					  crc_table[0][crc_table[t - 1][i] & 0xff];
#if defined(__x86_64__)
	__builtin_cpu_init();
	crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc_sw(uint32_t crc, const uint8_t *p, size_t len)
{
	while (len >= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		v = le64toh(v) ^ crc;
		crc = crc_table[7][v & 0xff] ^ crc_table[6][(v >> 8) & 0xff] ^
		      crc_table[5][(v >> 16) & 0xff] ^
		      crc_table[4][(v >> 24) & 0xff] ^
		      crc_table[3][(v >> 32) & 0xff] ^
		      crc_table[2][(v >> 40) & 0xff] ^
		      crc_table[1][(v >> 48) & 0xff] ^ crc_table[0][v >> 56];
		p += 8;
		len -= 8;
	}
	while (len--)
		crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw_run(uint32_t crc,
							     const uint8_t *p,
							     size_t len)
{
	uint64_t c = crc;
	while (len >= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		c = __builtin_ia32_crc32di(c, v);
		p += 8;
		len -= 8;
	}
	crc = (uint32_t)c;
	while (len--)
		crc = __builtin_ia32_crc32qi(crc, *p++);
	return crc;
}
#endif

/* Raw crc32c update: no pre/post inversion. */
uint32_t arb_crc32c(uint32_t crc, const void *buf, size_t len)
{
#if defined(__x86_64__)
	if (crc_hw)
		return crc_hw_run(crc, buf, len);
#endif
	return crc_sw(crc, buf, len);
}

void arb_csum_block(unsigned type, const void *buf, size_t len,
		    uint8_t out[ARB_CSUM_SIZE])
{
	uint32_t c;

	(void)type; /* only crc32c exists; the opener rejects other types */
	c = ~arb_crc32c(~0u, (const uint8_t *)buf + ARB_CSUM_SIZE,
			len - ARB_CSUM_SIZE);
	memset(out, 0, ARB_CSUM_SIZE);
	c = htole32(c);
	memcpy(out, &c, 4);
}

int arb_csum_verify(unsigned type, const void *buf, size_t len)
{
	uint8_t c[ARB_CSUM_SIZE];

	if (len <= ARB_CSUM_SIZE)
		return -1;
	arb_csum_block(type, buf, len, c);
	return memcmp(c, buf, ARB_CSUM_SIZE) ? -1 : 0;
}

/* 64-bit name hash: two crc32c with different seeds. */
uint64_t arb_name_hash(const char *name, size_t len)
{
	uint64_t hi = ~arb_crc32c(~0u, name, len);
	uint64_t lo = ~arb_crc32c(0x5bd1e995u, name, len);
	return hi << 32 | lo;
}

uint64_t arb_data_ref_hash(uint64_t root, uint64_t ino, uint64_t offset)
{
	uint64_t v[3] = { htole64(root), htole64(ino), htole64(offset) };
	uint64_t hi = ~arb_crc32c(~0u, v, sizeof(v));
	uint64_t lo = ~arb_crc32c(0x5bd1e995u, v, sizeof(v));
	/* top bit clear so probing past a collision cannot wrap */
	return (hi << 32 | lo) >> 1;
}

const char *arb_item_type_name(unsigned type)
{
	switch (type) {
#define x(n, v, d)                                                             \
	case v:                                                                \
		return #n;
		ARB_ITEM_TYPES(x)
#undef x
	}
	return "UNKNOWN";
}
