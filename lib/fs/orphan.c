/* SPDX-License-Identifier: MIT */
/*
 * orphan.c - pins and orphans: the references the kernel holds on
 * inodes (arb_fs_open_inode), inodes unlinked while open (freed at their
 * last release, or at the next mount from their ORPHAN_ITEM after a crash).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fs_int.h"

/* ---- orphans ----------------------------------------------------------- */

/* Free the orphans of one tree; *n counts them.  Inodes pinned in this
 * mount are orphans of this mount (unlinked while open): they stay. */
static int free_tree_orphans(struct arb_fs *fs, struct fs_tree *tr,
			     uint64_t *n)
{
	struct arb_key key, k;
	struct arb_txn *t;
	bool bad;
	int ret;

	key.offset = 0;
	for (;; key.offset = k.offset + 1) {
		key.objectid = ARB_ORPHAN_OBJECTID;
		key.type = ARB_ORPHAN_ITEM;
		k = key;
		ret = arb_next_key_of(tr->root, &k);
		if (ret)
			return ret < 0 ? ret : 0;
		bad = k.offset < ARB_FIRST_INO || k.offset > ARB_INUM_OBJ_MAX;
		if (bad)
			arb_log(ARB_LOG_WARN,
				"tree %llu: dropping an orphan item for "
				"objectid %llu, which no inode can have",
				(unsigned long long)tr->id,
				(unsigned long long)k.offset);
		if (!bad && fs_inode_pinned(fs, fs_ino(tr, k.offset)))
			continue;
		ret = arb_txn_begin(fs->vol, &t);
		if (ret)
			return ret;
		ret = bad ? 0 : fs_inode_free(fs, t, fs_ino(tr, k.offset));
		if (!ret && fs_item_exists(tr->root, &k))
			ret = arb_del_item(t, tr->root, &k);
		if (ret) {
			fs_abort(fs, t, ret);
			return ret;
		}
		arb_txn_end(t);
		(*n)++;
	}
}

int fs_free_tree_orphans(struct arb_fs *fs)
{
	uint64_t n = 0;
	size_t i;
	int ret = 0;

	for (i = 0; i < fs->nr_trees && !ret; i++) {
		struct fs_tree *tr = fs->trees[i];

		if (!tr->orphans_pending)
			continue;
		tr->orphans_pending = false;
		if (!tr->rdonly && !tr->deleted)
			ret = free_tree_orphans(fs, tr, &n);
	}
	if (!ret && n) {
		arb_log(ARB_LOG_INFO, "freed %llu orphan inode(s) of subvolumes",
			(unsigned long long)n);
		ret = fs_commit(fs);
	}
	return ret;
}

/* Free the inodes left by unlinks of open files before a crash. */
int fs_free_orphans(struct arb_fs *fs)
{
	uint64_t n = 0;
	size_t i;
	int ret;

	for (i = 0; i < fs->nr_trees; i++) {
		ret = free_tree_orphans(fs, fs->trees[i], &n);
		if (ret)
			return ret;
	}
	if (n) {
		arb_log(ARB_LOG_INFO, "freed %llu orphan inode(s)",
			(unsigned long long)n);
		return fs_commit(fs);
	}
	return 0;
}


/*
 * At close: drop every pin, and free the inodes that were pinned with no
 * link left (unlinked while the kernel still knew them).  The pins go
 * first, so that fs_inode_free also frees their arb_imem.
 */
int fs_free_unlinked_pinned(struct arb_fs *fs)
{
	uint64_t *ids, id, count;
	size_t n = 0, pos = 0;
	int ret = 0;

	if (!fs->pins.n)
		return 0;
	ids = malloc(fs->pins.n * sizeof(*ids));
	if (!ids)
		return -ENOMEM; /* the orphan items free them at next mount */
	while (arb_idcount_next(&fs->pins, &pos, &id, &count))
		ids[n++] = id;
	arb_idcount_clear(&fs->pins);
	for (size_t i = 0; i < n && !ret; i++) {
		struct arb_inode in;
		struct arb_txn *t;

		if (fs_inode_read(fs, ids[i], &in) || in.nlink)
			continue;
		ret = arb_txn_begin(fs->vol, &t);
		if (ret)
			break;
		ret = fs_inode_free(fs, t, in.ino);
		if (ret) {
			fs_abort(fs, t, ret);
			break;
		}
		arb_txn_end(t);
		fs->txn_dirty = true;
	}
	free(ids);
	return ret;
}


/* ---- open references, sync -------------------------------------------- */

int arb_fs_open_inode(struct arb_fs *fs, uint64_t ino)
{
	struct arb_inode in;
	int ret;

	fs_lock(fs);
	ret = fs_inode_read(fs, ino, &in);
	if (ret)
		goto out;
	ret = arb_idcount_add(&fs->pins, ino, 1);
	if (ret > 0) {
		fs_tree_of(fs, ino)->pinned++; /* a new pinned inode */
		ret = 0;
	}
out:
	fs_unlock(fs);
	return ret;
}

int arb_fs_release_inode(struct arb_fs *fs, uint64_t ino)
{
	struct fs_tree *tr;
	struct arb_imem *im;
	struct arb_inode in;
	struct arb_txn *t;
	int ret = 0;

	fs_lock(fs);
	if (!fs_inode_pinned(fs, ino)) {
		ret = -EINVAL;
		goto out;
	}
	if (arb_idcount_sub(&fs->pins, ino, 1))
		goto out;
	tr = fs_tree_of(fs, ino);
	if (--tr->pinned == 0 && tr->deleted) {
		/* the last inode of a deleted subvolume: clean it now */
		fs_clean_kick(fs);
	}
	if (!fs->readonly && fs_inode_read(fs, ino, &in) == 0 &&
	    in.nlink == 0) {
		ret = fs_op_begin(fs, &t, 0, 0, ARB_OP_RESERVE);
		if (ret)
			goto out;
		ret = fs_op_end(fs, t, fs_inode_free(fs, t, ino));
		goto out;
	}
	im = fs_imem_get(fs, ino, false);
	if (im)
		fs_imem_put_if_idle(fs, im);
out:
	fs_unlock(fs);
	return ret;
}
