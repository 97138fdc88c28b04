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
#include <string.h>

#include "fs_int.h"
#include "items/items.h"

/* a subvolume's read-only flag (SUBVOL_ITEM) and whether it is deleted
 * (an ORPHAN_ITEM of the root tree names it) */
static int tree_load_flags(struct arb_fs *fs, struct fs_tree *tr)
{
	struct arb_key k = { tr->id, ARB_SUBVOL_ITEM, 0 };
	struct arb_subvol_item si;
	int ret;

	ret = arb_lookup_item(fs->vol->tree_root, &k, &si, sizeof(si));
	if (ret >= 0 && ret != (int)sizeof(si))
		return -EUCLEAN;
	if (ret >= 0)
		tr->rdonly = arb_subvol_item_s_flags(&si) & ARB_SUBVOL_F_RDONLY;
	else if (ret != -ENOENT)
		return ret;
	k = (struct arb_key){ ARB_ORPHAN_OBJECTID, ARB_ORPHAN_ITEM, tr->id };
	ret = arb_lookup_item(fs->vol->tree_root, &k, &si, 0);
	if (ret >= 0)
		tr->deleted = true;
	return ret == -ENOENT || ret >= 0 ? 0 : ret;
}

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
	if (!ret && id != ARB_FS_TREE_ID)
		ret = tree_load_flags(fs, tr);
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
/*
 * The table is sorted by slot (trees[0], slot 0, is the filesystem tree),
 * so finding the tree of an inode number costs log2 of the trees open:
 * every operation names one, and a mount may hold thousands of snapshots.
 * *pos: where slot is or would go.
 */
static struct fs_tree *find_slot_pos(const struct arb_fs *fs, uint64_t slot,
				     size_t *pos)
{
	size_t lo = 0, hi = fs->nr_trees;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (fs->trees[mid]->slot < slot)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (pos)
		*pos = lo;
	return lo < fs->nr_trees && fs->trees[lo]->slot == slot
		       ? fs->trees[lo]
		       : NULL;
}

static struct fs_tree *find_slot(const struct arb_fs *fs, uint64_t slot)
{
	return find_slot_pos(fs, slot, NULL);
}

int fs_tree_open(struct arb_fs *fs, uint64_t id, struct fs_tree **out)
{
	struct fs_tree *tr, **n;
	uint64_t max_obj = 0, slot;
	size_t pos;
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
	tr->orphans_pending = !fs->readonly;
	find_slot_pos(fs, slot, &pos);
	memmove(&fs->trees[pos + 1], &fs->trees[pos],
		(fs->nr_trees - pos) * sizeof(*fs->trees));
	fs->trees[pos] = tr;
	fs->nr_trees++;
	*out = tr;
	return 0;
}

void fs_tree_forget(struct arb_fs *fs, struct fs_tree *tr)
{
	size_t pos;

	ARB_ASSERT(tr != fs->trees[0]);
	if (find_slot_pos(fs, tr->slot, &pos) != tr)
		return;
	memmove(&fs->trees[pos], &fs->trees[pos + 1],
		(fs->nr_trees - pos - 1) * sizeof(*fs->trees));
	fs->nr_trees--;
	free(tr);
}

struct fs_tree *fs_tree_find(const struct arb_fs *fs, uint64_t ino)
{
	return find_slot(fs, ino >> ARB_INUM_SHIFT);
}

int fs_tree_open_ino(struct arb_fs *fs, uint64_t ino)
{
	uint64_t obj = fs_obj(ino), id = arb_inum_tree(ino);
	struct fs_tree *tr;
	int ret;

	if (obj < ARB_FIRST_INO || fs_tree_find(fs, ino))
		return obj < ARB_FIRST_INO ? -ENOENT : 0;
	ret = fs_tree_open(fs, id, &tr);
	if (ret)
		return ret == -EINVAL || ret == -ENOENT ? -ENOENT : ret;
	if (tr->deleted && !tr->pinned) {
		/* deleted: nothing of it can be named any more */
		fs_tree_forget(fs, tr);
		return -ENOENT;
	}
	return 0;
}

bool fs_ino_valid(const struct arb_fs *fs, uint64_t ino)
{
	uint64_t obj = fs_obj(ino);

	return obj >= ARB_FIRST_INO && obj <= ARB_INUM_OBJ_MAX &&
	       fs_tree_find(fs, ino) != NULL;
}

int fs_subvol_resolve(struct arb_fs *fs, const struct fs_tree *parent,
		      uint64_t dirobj, uint64_t id, const char *name,
		      size_t len, uint64_t *ino, uint64_t *seq)
{
	struct arb_key k = { id, ARB_ROOT_BACKREF, parent->id };
	uint8_t buf[sizeof(struct arb_root_ref) + ARB_NAME_MAX];
	const struct arb_root_ref *rr = (const struct arb_root_ref *)buf;
	struct fs_tree *tr;
	bool ok;
	int ret;

	(void)arb_inum_slot(id, &ok);
	if (!ok || id == ARB_FS_TREE_ID)
		return -ENOENT;
	ret = arb_lookup_item(fs->vol->tree_root, &k, buf, sizeof(buf));
	if (ret == -ENOENT)
		return -ENOENT; /* a snapshot's copy of a nested link */
	if (ret < 0)
		return ret;
	if ((size_t)ret < sizeof(*rr) ||
	    arb_root_ref_rr_name_len(rr) != (size_t)ret - sizeof(*rr)) {
		arb_log(ARB_LOG_ERR, "subvolume %llu: bad ROOT_BACKREF",
			(unsigned long long)id);
		return -EUCLEAN;
	}
	/* the link of record is another one: this entry is a copy that a
	 * snapshot of the parent took along */
	if (arb_root_ref_rr_dirid(rr) != dirobj ||
	    arb_root_ref_rr_name_len(rr) != len ||
	    memcmp(buf + sizeof(*rr), name, len))
		return -ENOENT;
	ret = fs_tree_open(fs, id, &tr);
	if (ret)
		return ret == -ENOENT ? -EUCLEAN : ret;
	*ino = fs_ino(tr, ARB_FIRST_INO);
	if (seq)
		*seq = arb_root_ref_rr_sequence(rr);
	return 0;
}

int fs_subvol_backref(struct arb_fs *fs, uint64_t id, uint64_t *parent,
		      uint64_t *dirobj, uint64_t *seq, char *name)
{
	struct arb_key k = { id, ARB_ROOT_BACKREF, 0 };
	uint8_t buf[sizeof(struct arb_root_ref) + ARB_NAME_MAX];
	const struct arb_root_ref *rr = (const struct arb_root_ref *)buf;
	const char *why;
	int ret;

	ret = arb_next_key_of(fs->vol->tree_root, &k);
	if (ret)
		return ret < 0 ? ret : -ENOENT; /* none: deleted, or tree 5 */
	ret = arb_lookup_item(fs->vol->tree_root, &k, buf, sizeof(buf));
	if (ret < 0)
		return ret;
	if (arb_item_validate(&k, buf, (uint32_t)ret, &why)) {
		arb_log(ARB_LOG_ERR, "subvolume %llu: ROOT_BACKREF: %s",
			(unsigned long long)id, why);
		return -EUCLEAN;
	}
	*parent = k.offset;
	if (dirobj)
		*dirobj = arb_root_ref_rr_dirid(rr);
	if (seq)
		*seq = arb_root_ref_rr_sequence(rr);
	if (name) {
		memcpy(name, buf + sizeof(*rr), arb_root_ref_rr_name_len(rr));
		name[arb_root_ref_rr_name_len(rr)] = 0;
	}
	return 0;
}

int fs_subvol_link(struct arb_fs *fs, const struct fs_tree *tr,
		   uint64_t *parent, char *name)
{
	struct fs_tree *ptr;
	uint64_t pid, dirobj;
	int ret;

	ret = fs_subvol_backref(fs, tr->id, &pid, &dirobj, NULL, name);
	if (ret)
		return ret;
	ret = fs_tree_open(fs, pid, &ptr);
	if (ret)
		return ret == -ENOENT || ret == -EINVAL ? -EUCLEAN : ret;
	*parent = fs_ino(ptr, dirobj);
	return 0;
}

int fs_subvol_parent(struct arb_fs *fs, const struct fs_tree *tr,
		     uint64_t *parent)
{
	return fs_subvol_link(fs, tr, parent, NULL);
}
