/* SPDX-License-Identifier: MIT */
/*
 * fsresize.c - arb_fs_resize and the automatic growth of a full image.
 *
 * Growing extends the image file, then commits a superblock with the new
 * size (lib/core/resize.c).  Shrinking gives back only free space at the end of
 * the image: nothing is relocated, so it fails with -EBUSY (and *why names
 * the first address in use) when an extent lies past the new end.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "fs_int.h"

/* the reserve for unlink/rmdir/rename/truncate on a full filesystem */
void fs_set_reserve(struct arb_fs *fs)
{
	/* 1/32 of the image, at least 1 MiB + 32 nodes, at most 256 MiB,
	 * times the copies of every node */
	fs->reserve = fs->vol->total_bytes / 32;
	if (fs->reserve < (1ULL << 20) + 32ULL * fs->vol->nodesize)
		fs->reserve = (1ULL << 20) + 32ULL * fs->vol->nodesize;
	if (fs->reserve > (256ULL << 20))
		fs->reserve = 256ULL << 20;
	/* times the copies of each node (duplicated metadata) */
	fs->reserve *= fs->vol->meta_copies;
	/* data allocations leave half of it to tree nodes */
	if (!fs->readonly)
		arb_set_meta_reserve(fs->vol, fs->reserve / 2);
}

/* Lock held.  allocate: reserve the new bytes on the host now. */
int fs_resize_locked(struct arb_fs *fs, uint64_t size, bool allocate,
		     const char **why)
{
	struct arb_vol *vol = fs->vol;
	uint64_t old = vol->total_bytes;
	int ret;

	*why = NULL;
	size -= size % fs->bs;
	if (fs->readonly) {
		*why = "the filesystem is read-only";
		return -EROFS;
	}
	if (size == old)
		return 0;
	if (size < ARB_DATA_START + 64ULL * vol->nodesize) {
		*why = "size too small";
		return -EINVAL;
	}
	/* freed space is usable (and free in the map) once committed */
	ret = fs_commit(fs);
	if (ret) {
		*why = "commit before resizing failed";
		return ret;
	}
	if (size > old) {
		if (vol->dev->size < size) {
			/* no unlocked data read may see the device change */
			arb_data_readers_wait(vol);
			ret = arb_dev_resize(vol->dev, size, allocate);
			if (ret) {
				*why = ret == -ENOSPC ? "no space on the host "
							"filesystem for the image"
						      : "cannot extend the image";
				return ret;
			}
		}
		ret = arb_vol_set_size(vol, size);
		if (ret) {
			*why = "cannot grow the free-space map";
			return ret;
		}
		fs_set_reserve(fs);
		fs->txn_dirty = true;
		ret = fs_commit(fs);
		if (ret)
			*why = "commit of the new size failed";
		return ret;
	}
	/* blocks freed while data reads were in flight are free once they
	 * are done (grace lists): not "in use" past the new end */
	arb_free_space_grace_drain(vol);
	ret = arb_vol_set_size(vol, size);
	if (ret == -EBUSY && arb_free_space_history_bytes(vol)) {
		/* blocks kept for the history count as free: shrinking gives
		 * them up, and the older generations with them */
		arb_free_space_history_drop(vol);
		ret = arb_vol_set_size(vol, size);
	}
	if (ret == -EBUSY) {
		*why = "space past the new end is in use (shrinking does not "
		       "move data)";
		return ret;
	}
	if (ret) {
		*why = "cannot shrink the free-space map";
		return ret;
	}
	fs_set_reserve(fs);
	fs->txn_dirty = true;
	ret = fs_commit(fs);
	if (!ret) {
		/* the other superblock slot gets the new size too */
		vol->super_dirty = true;
		fs->txn_dirty = true;
		ret = fs_commit(fs);
	}
	if (ret) {
		*why = "commit of the new size failed";
		return ret;
	}
	arb_data_readers_wait(vol);
	ret = arb_dev_resize(vol->dev, size, false);
	if (ret == -EOPNOTSUPP)
		ret = 0; /* a block device keeps its size; the fs is smaller */
	if (ret)
		*why = "the filesystem shrank but the image file could not "
		       "be truncated";
	return ret;
}

int arb_fs_resize(struct arb_fs *fs, uint64_t size, const char **why)
{
	const char *w = NULL;
	int ret;

	fs_lock(fs);
	ret = fs_resize_locked(fs, size, false, &w);
	fs_unlock(fs);
	if (ret)
		arb_log(ARB_LOG_WARN, "resize to %" PRIu64 " bytes failed: %s",
			size, w ? w : "error");
	else
		arb_log(ARB_LOG_INFO, "resized to %" PRIu64 " bytes", size);
	if (why)
		*why = w;
	return ret;
}

/*
 * Out of space with autogrow set: grow the image by an eighth (at least
 * 64 MiB and what the operation needs twice over), up to the limit.
 * Returns 0 when it grew.
 */
int fs_autogrow(struct arb_fs *fs, uint64_t need)
{
	uint64_t max = fs->opts.autogrow_max, total = fs->vol->total_bytes;
	uint64_t step = total / 8, size;
	const char *why;
	int ret;

	if (!max || total >= max)
		return -ENOSPC;
	if (step < (64ULL << 20))
		step = 64ULL << 20;
	if (step < 2 * need + fs->reserve)
		step = 2 * need + fs->reserve;
	size = total + step > max ? max : total + step;
	size -= size % (1ULL << 20);
	if (size <= total)
		return -ENOSPC;
	ret = fs_resize_locked(fs, size, true, &why);
	if (ret) {
		arb_log(ARB_LOG_WARN,
			"autogrow to %" PRIu64 " bytes failed: %s (%d)%s", size,
			why ? why : "error", ret,
			ret == -ENOSPC ? "" : "; autogrow is off from now on");
		/* a device that cannot grow (a block device, a read-only
		 * file) will not start to: do not retry at every ENOSPC */
		if (ret != -ENOSPC)
			fs->opts.autogrow_max = 0;
		return -ENOSPC;
	}
	/* a warning: the filesystem was full, the image takes host space */
	arb_log(ARB_LOG_WARN, "image grown to %" PRIu64 " bytes (autogrow, "
			      "limit %" PRIu64 ")",
		size, max);
	return 0;
}
