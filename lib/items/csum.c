/* SPDX-License-Identifier: MIT */
/*
 * csum.c - EXTENT_CSUM, key (ARB_EXTENT_CSUM_OBJECTID, EXTENT_CSUM, disk
 * address of the first sector covered): little-endian u32 crc32c, one per
 * sector.
 *
 * Valid: not empty, a whole number of checksums (size a multiple of 4).
 * Alignment of the address and what the item covers are the checker's.
 */
#include <endian.h>
#include <errno.h>
#include <string.h>

#include "items.h"

ARB_ITEM_FN(arb_csum_item)
{
	(void)k;
	(void)d;
	if (size == 0 || size % 4)
		return arb_item_why(why, -EUCLEAN,
				    "checksum item of %u bytes, not a "
				    "non-zero multiple of 4",
				    size);
	return 0;
}

ARB_ITEM_PRINT_FN(arb_csum_item)
{
	uint32_t v;

	(void)k;
	fprintf(out, " %u sectors:", size / 4);
	for (uint32_t i = 0; i < size / 4 && i < 4; i++) {
		memcpy(&v, d + 4 * i, 4);
		fprintf(out, " %08x", le32toh(v));
	}
	fputs(size / 4 > 4 ? " ...\n" : "\n", out);
}
