/* SPDX-License-Identifier: MIT */
/*
 * inum.c - the fs trees of a mount and the inode numbers that name their
 * inodes.
 *
 * An inode number (st_ino, the FUSE node id, the ino of every arb_fs_*
 * call) is arb_inum(tree, objectid): the slot of its tree in the high 24
 * bits, the objectid of its items in the low 40 (arbor.h).  The library
 * keeps one struct fs_tree per tree it has opened; trees[0] is the
 * filesystem tree (slot 0), so an inode of it needs no lookup.  Every
 * entry point hands its inode numbers to fs_inode_read (or fs_ino_valid)
 * before anything else, which refuses a number whose tree is not open or
 * whose objectid cannot be an inode's with -ENOENT, as for an inode that
 * does not exist; past that point fs_tree_of() cannot fail.
 */
#include <errno.h>
#include <stdlib.h>

#include "fs_int.h"

static int tree_open(struct arb_fs *fs, uint64_t id, struct fs_tree **out)
{
	struct fs_tree *tr;
	bool ok;
	int ret;

	tr = calloc(1, sizeof(*tr));
	if (!tr)
		return -ENOMEM;
	tr->id = id;
	tr->slot = arb_inum_slot(id, &ok);
	ARB_ASSERT(ok);
	ret = arb_root_get(fs->vol, id, &tr->root);
	if (ret) {
		free(tr);
		return ret;
	}
	*out = tr;
	return 0;
}

int fs_trees_init(struct arb_fs *fs)
{
	struct fs_tree *tr;
	int ret;

	fs->trees = calloc(4, sizeof(*fs->trees));
	if (!fs->trees)
		return -ENOMEM;
	fs->trees_cap = 4;
	ret = tree_open(fs, ARB_FS_TREE_ID, &tr);
	if (ret)
		return ret;
	fs->trees[0] = tr;
	fs->nr_trees = 1;
	return 0;
}

void fs_trees_reload(struct arb_fs *fs)
{
	size_t i;

	for (i = 0; i < fs->nr_trees; i++)
		(void)arb_root_get(fs->vol, fs->trees[i]->id,
				   &fs->trees[i]->root);
}

void fs_trees_free(struct arb_fs *fs)
{
	size_t i;

	for (i = 0; i < fs->nr_trees; i++)
		free(fs->trees[i]);
	free(fs->trees);
	fs->trees = NULL;
	fs->nr_trees = fs->trees_cap = 0;
}

/* a handful of trees are open at a time: a linear scan */
static struct fs_tree *find_slot(const struct arb_fs *fs, uint64_t slot)
{
	size_t i;

	for (i = 0; i < fs->nr_trees; i++)
		if (fs->trees[i]->slot == slot)
			return fs->trees[i];
	return NULL;
}

int fs_tree_open(struct arb_fs *fs, uint64_t id, struct fs_tree **out)
{
	struct fs_tree *tr, **n;
	uint64_t max_obj = 0, slot;
	bool ok;
	int ret;

	slot = arb_inum_slot(id, &ok);
	if (!ok)
		return -EINVAL;
	tr = find_slot(fs, slot);
	if (tr) {
		*out = tr;
		return 0;
	}
	if (fs->nr_trees == fs->trees_cap) {
		n = realloc(fs->trees, 2 * fs->trees_cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		fs->trees = n;
		fs->trees_cap *= 2;
	}
	ret = tree_open(fs, id, &tr);
	if (ret)
		return ret;
	/* as at open for the filesystem tree (fs.c): above every inode
	 * present and every number the tree ever handed out */
	ret = fs_tree_max_ino(tr, &max_obj);
	if (ret) {
		free(tr);
		return ret;
	}
	if (arb_root_highest_objectid(tr->root) > max_obj)
		max_obj = arb_root_highest_objectid(tr->root);
	tr->next_ino = max_obj + 1;
	fs->trees[fs->nr_trees++] = tr;
	*out = tr;
	return 0;
}

struct fs_tree *fs_tree_find(const struct arb_fs *fs, uint64_t ino)
{
	return find_slot(fs, ino >> ARB_INUM_SHIFT);
}

bool fs_ino_valid(const struct arb_fs *fs, uint64_t ino)
{
	uint64_t obj = fs_obj(ino);

	return obj >= ARB_FIRST_INO && obj <= ARB_INUM_OBJ_MAX &&
	       fs_tree_find(fs, ino) != NULL;
}
