/* SPDX-License-Identifier: MIT */
/*
 * resize.c - change the size of a volume.
 *
 * Growing: the caller extends the device first, then the free-space map
 * covers the new sectors and the next commit writes a superblock with the
 * new s_total_bytes; a crash before that commit leaves the old size on a
 * larger file, which is harmless.  Shrinking: only over sectors that are
 * free (nothing is relocated), so the caller commits first (freed space is
 * pinned until then), shrinks, commits twice (both superblock slots then
 * carry the new size, so falling back to the older slot cannot find a
 * superblock larger than the file) and only then truncates the device.
 */
#include <errno.h>

#include "core.h"

int arb_vol_set_size(struct arb_vol *vol, uint64_t new_total)
{
	int ret;

	if (vol->readonly)
		return -EROFS;
	if (vol->running)
		return -EBUSY;
	if (new_total % vol->sectorsize ||
	    new_total < ARB_DATA_START + 16ULL * vol->nodesize)
		return -EINVAL;
	if (new_total > vol->dev->size)
		return -ENOSPC;
	if (new_total == vol->total_bytes)
		return 0;
	ret = arb_free_space_resize(vol, new_total);
	if (ret)
		return ret;
	vol->total_bytes = new_total;
	vol->super_dirty = true;
	return 0;
}
