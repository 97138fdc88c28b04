/* SPDX-License-Identifier: MIT */
/*
 * inode.c - INODE_ITEM, key (inode, INODE_ITEM, 0): struct arb_inode_item.
 *
 * Valid: at least sizeof(struct arb_inode_item) bytes (a longer item is
 * read as its first 160 bytes, as the filesystem layer always has).
 */
#include <errno.h>
#include <inttypes.h>

#include "items.h"

ARB_ITEM_FN(arb_inode_item)
{
	(void)d;
	(void)k;
	if (size < sizeof(struct arb_inode_item))
		return arb_item_why(why, -EUCLEAN,
				    "inode item of %u bytes, expected %zu", size,
				    sizeof(struct arb_inode_item));
	return 0;
}

ARB_ITEM_PRINT_FN(arb_inode_item)
{
	const struct arb_inode_item *in = (const struct arb_inode_item *)d;

	(void)k;
	(void)size;
	fprintf(out,
		" mode 0%o nlink %u uid %u gid %u size %" PRIu64
		" nbytes %" PRIu64 " gen %" PRIu64 " transid %" PRIu64,
		arb_inode_item_i_mode(in), arb_inode_item_i_nlink(in),
		arb_inode_item_i_uid(in), arb_inode_item_i_gid(in),
		arb_inode_item_i_size(in), arb_inode_item_i_nbytes(in),
		arb_inode_item_i_generation(in), arb_inode_item_i_transid(in));
	if (arb_inode_item_i_seq(in))
		fprintf(out, " seq %" PRIu64, arb_inode_item_i_seq(in));
	if (arb_inode_item_i_rdev(in))
		fprintf(out, " rdev %" PRIu64, arb_inode_item_i_rdev(in));
	if (arb_inode_item_i_flags(in))
		fprintf(out, " flags 0x%" PRIx64, arb_inode_item_i_flags(in));
	fprintf(out, " mtime %" PRId64 ".%09u\n",
		(int64_t)arb_inode_item_i_mtime(in),
		arb_inode_item_i_mtime_ns(in));
}
