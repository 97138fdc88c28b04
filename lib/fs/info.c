// SPDX-License-Identifier: MIT
/*
 * info.c - what `arbor filesystem show` prints, and the label.
 */
#include <errno.h>
#include <string.h>

#include "fs_int.h"

int arb_fs_info(struct arb_fs *fs, struct arb_fs_info *info)
{
	const struct arb_super *sb;

	memset(info, 0, sizeof(*info));
	fs_lock(fs);
	sb = &fs->vol->super;
	memcpy(info->uuid, fs->vol->uuid, sizeof(info->uuid));
	memcpy(info->label, sb->s_label, ARB_LABEL_SIZE - 1);
	info->total_bytes = fs->vol->total_bytes;
	info->generation = fs->vol->generation;
	info->nodesize = fs->vol->nodesize;
	info->sectorsize = fs->vol->sectorsize;
	info->version = arb_super_s_version(sb);
	info->incompat = arb_super_s_incompat(sb);
	info->compat = arb_super_s_compat(sb);
	info->ro_compat = arb_super_s_ro_compat(sb);
	info->meta_copies = fs->vol->meta_copies;
	memcpy(info->fs_tree_uuid, fs_tree0(fs)->root->item.r_uuid,
	       sizeof(info->fs_tree_uuid));
	info->readonly = fs->readonly;
	fs_unlock(fs);
	return 0;
}

int arb_fs_set_label(struct arb_fs *fs, const char *label)
{
	struct arb_super *sb;
	size_t n = strlen(label);
	int ret;

	if (n >= ARB_LABEL_SIZE)
		return -EINVAL;
	fs_lock(fs);
	if (fs->readonly) {
		fs_unlock(fs);
		return fs->failed ? -EIO : -EROFS;
	}
	sb = &fs->vol->super;
	memset(sb->s_label, 0, sizeof(sb->s_label));
	memcpy(sb->s_label, label, n);
	/* the superblock goes out with the next commit: now */
	fs->vol->super_dirty = true;
	ret = fs_commit(fs);
	fs_unlock(fs);
	return ret;
}
