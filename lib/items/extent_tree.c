/* SPDX-License-Identifier: MIT */
/*
 * extent_tree.c - the extent tree's items: EXTENT_ITEM, key (address,
 * EXTENT_ITEM, length): struct arb_extent_item, followed for a tree node
 * by struct arb_tree_block_ref; EXTENT_DATA_REF, key (address,
 * EXTENT_DATA_REF, hash slot): struct arb_extent_data_ref.
 *
 * Valid: an EXTENT_ITEM holds the extent item, and the tree block
 * reference too when ARB_EXTENT_FLAG_TREE_BLOCK is set; an
 * EXTENT_DATA_REF is exactly 28 bytes.  Counts, lengths (a tree block is
 * one node long) and whether a back-reference is reachable from its hash
 * need the rest of the image: the checker's.
 */
#include <errno.h>
#include <inttypes.h>

#include "items.h"

ARB_ITEM_FN(arb_extent_item)
{
	const struct arb_extent_item *ei = (const struct arb_extent_item *)d;

	(void)k;
	if (size < sizeof(*ei))
		return arb_item_why(why, -EUCLEAN,
				    "extent item of %u bytes, expected at "
				    "least %zu",
				    size, sizeof(*ei));
	if ((arb_extent_item_e_flags(ei) & ARB_EXTENT_FLAG_TREE_BLOCK) &&
	    size < sizeof(*ei) + sizeof(struct arb_tree_block_ref))
		return arb_item_why(why, -EUCLEAN,
				    "tree block extent item of %u bytes, "
				    "expected %zu",
				    size,
				    sizeof(*ei) +
					    sizeof(struct arb_tree_block_ref));
	return 0;
}

ARB_ITEM_PRINT_FN(arb_extent_item)
{
	const struct arb_extent_item *ei = (const struct arb_extent_item *)d;
	uint64_t flags = arb_extent_item_e_flags(ei);

	(void)k;
	(void)size;
	fprintf(out, " refs %" PRIu64 " gen %" PRIu64 " %s",
		arb_extent_item_e_refs(ei), arb_extent_item_e_generation(ei),
		flags & ARB_EXTENT_FLAG_TREE_BLOCK ? "tree"
		: flags & ARB_EXTENT_FLAG_DATA     ? "data"
						   : "flags");
	if (flags & ~(ARB_EXTENT_FLAG_TREE_BLOCK | ARB_EXTENT_FLAG_DATA) ||
	    !flags)
		fprintf(out, " 0x%" PRIx64, flags);
	if (flags & ARB_EXTENT_FLAG_TREE_BLOCK) {
		const struct arb_tree_block_ref *tr =
			(const struct arb_tree_block_ref *)(ei + 1);
		fprintf(out, " owner %" PRIu64 " level %u",
			arb_tree_block_ref_t_owner(tr),
			arb_tree_block_ref_t_level(tr));
		if (arb_tree_block_ref_t_mirror(tr))
			fprintf(out, " copy %" PRIu64,
				arb_tree_block_ref_t_mirror(tr));
	}
	fputc('\n', out);
}

ARB_ITEM_FN(arb_data_ref)
{
	(void)k;
	(void)d;
	if (size != sizeof(struct arb_extent_data_ref))
		return arb_item_why(why, -EUCLEAN,
				    "data back-reference of %u bytes, "
				    "expected %zu",
				    size, sizeof(struct arb_extent_data_ref));
	return 0;
}

ARB_ITEM_PRINT_FN(arb_data_ref)
{
	const struct arb_extent_data_ref *r =
		(const struct arb_extent_data_ref *)d;

	(void)k;
	(void)size;
	fprintf(out,
		" root %" PRIu64 " inode %" PRIu64 " offset %" PRIu64
		" count %u\n",
		arb_extent_data_ref_d_root(r), arb_extent_data_ref_d_objectid(r),
		arb_extent_data_ref_d_offset(r), arb_extent_data_ref_d_count(r));
}
