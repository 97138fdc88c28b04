/* SPDX-License-Identifier: MIT */
/*
 * usage.c - space by kind: data, metadata, uncommitted, free (usage.h).
 *
 * The free-space bitmap (alloc.c) knows only used or free; the kind of an
 * allocated range is in its EXTENT_ITEM (ARB_EXTENT_FLAG_TREE_BLOCK or
 * ARB_EXTENT_FLAG_DATA), so data and metadata come from a walk of the extent
 * tree.  What the bitmap counts as used beyond those items was allocated
 * by the running transaction.
 */
#include <errno.h>
#include <string.h>

#include "core.h"
#include "usage.h"

int arb_space_usage(struct arb_vol *vol, struct arb_space_usage *u)
{
	struct arb_key k = { 0, 0, 0 };
	struct arb_iter it;
	uint64_t used, space;
	int ret;

	memset(u, 0, sizeof(*u));
	space = vol->total_bytes / vol->sectorsize * vol->sectorsize;
	u->total = vol->total_bytes;
	u->system = ARB_DATA_START;
	u->free = arb_free_bytes(vol);
	u->history = arb_free_space_history_bytes(vol);
	used = arb_used_bytes(vol);
	/* the bitmap's used sectors = system + used + pinned */
	if (space > u->free + used + u->system)
		u->pinned = space - u->free - used - u->system;

	arb_iter_init(&it, vol->extent_root);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		const struct arb_extent_item *e;

		arb_iter_key(&it, &k);
		if (k.type != ARB_EXTENT_ITEM)
			continue;
		if (arb_iter_size(&it) < sizeof(*e)) {
			ret = -EUCLEAN;
			break;
		}
		e = arb_iter_data(&it);
		if (arb_extent_item_e_flags(e) & ARB_EXTENT_FLAG_TREE_BLOCK) {
			const struct arb_tree_block_ref *tr =
				(const void *)(e + 1);
			u->metadata += k.offset;
			/* the second copy (duplicated metadata) */
			if (arb_iter_size(&it) >= sizeof(*e) + sizeof(*tr) &&
			    arb_tree_block_ref_t_mirror(tr))
				u->metadata += k.offset;
		} else
			u->data += k.offset;
	}
	arb_iter_release(&it);
	if (ret < 0)
		return ret;
	if (used > u->data + u->metadata)
		u->uncommitted = used - u->data - u->metadata;
	return 0;
}
