/* SPDX-License-Identifier: MIT */
/*
 * subvol.c - subvolumes and snapshots (arbor/subvol.h): create, snapshot,
 * delete and the cleaner, list, info, path, the read-only flag, the
 * default subvolume (tree 5's SUBVOL_ITEM s_default_id).
 *
 * The shape on disk is in format.h ("Subvolumes"): a link in a directory
 * of the parent tree (ARB_DENT_SUBVOL), ROOT_REF and ROOT_BACKREF in the
 * root tree, a SUBVOL_ITEM.  The POSIX layer crosses links itself
 * (fs_subvol_resolve in lib/fs/inum.c); this file makes and removes them.
 *
 * Each call that changes something does it in one operation of the POSIX
 * layer (fs_op_begin/fs_op_end: validated first, so a failure inside is
 * a transaction abort) and commits before it returns: a snapshot or a
 * deletion that a caller saw succeed survives a crash.
 *
 * Deleting is two steps.  The call removes the link and records an
 * ORPHAN_ITEM (ARB_ORPHAN_OBJECTID, ORPHAN_ITEM, id) in the root tree;
 * the cleaner (fs_subvol_clean, run by the commit thread and by
 * arb_subvol_wait) drops the tree once none of its inodes is pinned, in
 * batches of a bounded size (arb_root_drop_batch) with the lock released
 * between them, then deletes the orphan and SUBVOL_ITEM, and commits.
 * Each batch records its progress in the transaction that frees what it
 * freed; a crash anywhere leaves the orphan and the last committed
 * progress, and the next mount's cleaner goes on from there.
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "arbor/subvol.h"
#include "fs_int.h"

#define RR_MAX (sizeof(struct arb_root_ref) + ARB_NAME_MAX)

/* ---- items of the root tree -------------------------------------------- */

static int sv_item_read(struct arb_fs *fs, uint64_t id,
			struct arb_subvol_item *si)
{
	struct arb_key k = { id, ARB_SUBVOL_ITEM, 0 };
	int ret;

	memset(si, 0, sizeof(*si));
	ret = arb_lookup_item(fs->vol->tree_root, &k, si, sizeof(*si));
	if (ret < 0)
		return ret;
	if (ret != (int)sizeof(*si)) {
		arb_log(ARB_LOG_ERR, "subvolume %llu: SUBVOL_ITEM of %d bytes",
			(unsigned long long)id, ret);
		return -EUCLEAN;
	}
	return 0;
}

static int sv_item_write(struct arb_txn *t, struct arb_fs *fs, uint64_t id,
			 const struct arb_subvol_item *si)
{
	struct arb_key k = { id, ARB_SUBVOL_ITEM, 0 };

	if (fs_item_exists(fs->vol->tree_root, &k))
		return arb_update_item(t, fs->vol->tree_root, &k, si,
				       sizeof(*si));
	return arb_insert_item(t, fs->vol->tree_root, &k, si, sizeof(*si));
}

static bool orphan_exists(struct arb_fs *fs, uint64_t id)
{
	struct arb_key k = { ARB_ORPHAN_OBJECTID, ARB_ORPHAN_ITEM, id };

	return fs_item_exists(fs->vol->tree_root, &k);
}

/* ROOT_REF and ROOT_BACKREF of a new link */
static int refs_insert(struct arb_txn *t, struct arb_fs *fs, uint64_t parent,
		       uint64_t id, uint64_t dirobj, uint64_t seq,
		       const char *name, size_t len)
{
	uint8_t buf[RR_MAX];
	struct arb_root_ref *rr = (struct arb_root_ref *)buf;
	struct arb_key k = { parent, ARB_ROOT_REF, id };
	int ret;

	arb_set_root_ref_rr_dirid(rr, dirobj);
	arb_set_root_ref_rr_sequence(rr, seq);
	arb_set_root_ref_rr_name_len(rr, (uint16_t)len);
	memcpy(buf + sizeof(*rr), name, len);
	ret = arb_insert_item(t, fs->vol->tree_root, &k, buf,
			      (uint32_t)(sizeof(*rr) + len));
	if (ret)
		return ret;
	k = (struct arb_key){ id, ARB_ROOT_BACKREF, parent };
	return arb_insert_item(t, fs->vol->tree_root, &k, buf,
			       (uint32_t)(sizeof(*rr) + len));
}

/* does tree id link a subvolume (a ROOT_REF from it)? */
static int has_children(struct arb_fs *fs, uint64_t id, bool *yes)
{
	struct arb_key k = { id, ARB_ROOT_REF, 0 };
	int ret = arb_next_key_of(fs->vol->tree_root, &k);

	if (ret < 0)
		return ret;
	*yes = ret == 0;
	return 0;
}

/*
 * The id the next subvolume gets: above every tree present and every id
 * ever handed out (tree 5's SUBVOL_ITEM s_last_id), so that no inode
 * number of a deleted subvolume comes back.
 */
static int next_id(struct arb_fs *fs, uint64_t *id)
{
	struct arb_key key = { ARB_ORPHAN_OBJECTID - 1, ARB_ROOT_ITEM, 0 }, k;
	struct arb_subvol_item si;
	uint64_t max = ARB_FIRST_SUBVOL_ID - 1;
	struct arb_iter it;
	bool ok;
	int ret;

	/* the last tree id below the reserved objectids */
	arb_iter_init(&it, fs->vol->tree_root);
	ret = arb_iter_seek_le(&it, &key);
	while (ret == 0) {
		arb_iter_key(&it, &k);
		if (k.type == ARB_ROOT_ITEM) {
			if (k.objectid > max)
				max = k.objectid;
			break;
		}
		ret = arb_iter_prev(&it);
	}
	arb_iter_release(&it);
	if (ret < 0)
		return ret;
	ret = sv_item_read(fs, ARB_FS_TREE_ID, &si);
	if (ret && ret != -ENOENT)
		return ret;
	if (!ret && arb_subvol_item_s_last_id(&si) > max)
		max = arb_subvol_item_s_last_id(&si);
	*id = max + 1;
	(void)arb_inum_slot(*id, &ok);
	return ok ? 0 : -ENOSPC;
}

static int note_id(struct arb_txn *t, struct arb_fs *fs, uint64_t id)
{
	struct arb_subvol_item si;
	int ret = sv_item_read(fs, ARB_FS_TREE_ID, &si);

	if (ret && ret != -ENOENT)
		return ret;
	arb_set_subvol_item_s_last_id(&si, id);
	return sv_item_write(t, fs, ARB_FS_TREE_ID, &si);
}

/* the default subvolume's id (tree 5's s_default_id; 0 there is 5) */
static int default_read(struct arb_fs *fs, uint64_t *id)
{
	struct arb_subvol_item si;
	int ret = sv_item_read(fs, ARB_FS_TREE_ID, &si);

	if (ret && ret != -ENOENT)
		return ret;
	*id = ret ? 0 : arb_subvol_item_s_default_id(&si);
	if (!*id)
		*id = ARB_FS_TREE_ID;
	return 0;
}

static void sv_item_new(struct arb_subvol_item *si, unsigned flags,
			uint64_t source)
{
	struct timespec now;

	fs_now(&now);
	memset(si, 0, sizeof(*si));
	arb_set_subvol_item_s_flags(si, (flags & ARB_SUBVOL_RDONLY)
						? ARB_SUBVOL_F_RDONLY
						: 0);
	arb_set_subvol_item_s_otime(si, (uint64_t)now.tv_sec);
	arb_set_subvol_item_s_otime_ns(si, (uint32_t)now.tv_nsec);
	arb_set_subvol_item_s_ctime(si, (uint64_t)now.tv_sec);
	arb_set_subvol_item_s_ctime_ns(si, (uint32_t)now.tv_nsec);
	arb_set_subvol_item_s_source(si, source);
}

/* ---- create and snapshot ---------------------------------------------- */

/* the root directory of a new empty subvolume */
static int root_dir_insert(struct arb_txn *t, struct arb_root *r,
			   const struct arb_inode *din, uint32_t mode,
			   const struct arb_cred *cr)
{
	struct arb_key k = { ARB_FIRST_INO, ARB_INODE_ITEM, 0 };
	struct arb_inode_item d;
	struct arb_inode in;

	memset(&in, 0, sizeof(in));
	in.ino = ARB_FIRST_INO;
	in.generation = t->transid;
	in.transid = t->transid;
	in.seq = 2;
	in.nlink = 2;
	in.uid = cr ? cr->uid : 0;
	in.gid = cr ? cr->gid : 0;
	in.mode = S_IFDIR | (mode & 07777);
	if (din->mode & S_ISGID) {
		in.gid = din->gid;
		in.mode |= S_ISGID;
	}
	in.flags = din->flags & ARB_INODE_INHERITED;
	fs_now(&in.atime);
	in.mtime = in.ctime = in.btime = in.atime;
	fs_inode_pack(&d, &in);
	arb_root_note_objectid(t, r, ARB_FIRST_INO);
	return arb_insert_item(t, r, &k, &d, sizeof(d));
}

/*
 * How long a snapshot waits for the gaps in its source's files to fill
 * (fs_gap_note, write.c; ARB_GAP_YOUNG_NS): writeback the kernel sent out
 * of order arrives within milliseconds; a gap older than that is taken
 * for a sparse write and not waited for.  The wait lets go of the lock.
 */
#define ARB_SNAP_GAP_NAP_NS (250 * 1000)

/* a file of the tree of inode number src (the same slot) has a young gap:
 * its entry is on the dirty list, flushed or not (fs_imem_put_if_idle) */
static bool src_gap_young(struct arb_fs *fs, uint64_t src, uint64_t now)
{
	for (struct arb_imem *im = fs->dirty_list; im; im = im->dirty_next)
		if (fs_gap_young(im, now) &&
		    im->ino >> ARB_INUM_SHIFT == src >> ARB_INUM_SHIFT)
			return true;
	return false;
}

/* lock held: wait (without it) while a file of src's tree has a young
 * gap */
static void wait_src_gaps(struct arb_fs *fs, uint64_t src)
{
	const struct timespec nap = { 0, ARB_SNAP_GAP_NAP_NS };
	uint64_t t0 = arb_mono_ns(), now = t0;

	while (now - t0 < ARB_GAP_YOUNG_NS &&
	       src_gap_young(fs, src, now)) {
		fs_unlock(fs);
		nanosleep(&nap, NULL);
		fs_lock(fs);
		now = arb_mono_ns();
	}
}

/* create (src 0) or snapshot (src: the source's root directory) */
static int make_subvol(struct arb_fs *fs, uint64_t src, uint64_t dir,
		       const char *name, uint32_t mode, unsigned flags,
		       const struct arb_cred *cr, struct arb_stat *st)
{
	struct arb_inode din, sin, rin;
	struct arb_subvol_item si;
	struct fs_tree *stree = NULL, *ntree;
	struct arb_root *r;
	struct arb_txn *t;
	struct timespec now;
	uint64_t id, index;
	size_t len;
	int ret;

	if (flags & ~ARB_SUBVOL_RDONLY)
		return -EINVAL;
	ret = fs_check_name(name, &len);
	if (ret)
		return ret;
	if ((len == 1 && name[0] == '.') ||
	    (len == 2 && name[0] == '.' && name[1] == '.'))
		return -EEXIST;
	fs_lock(fs);
	if (src)
		wait_src_gaps(fs, src);
	if (src) {
		ret = fs_inode_read(fs, src, &sin);
		if (ret)
			goto out;
		/* only a whole subvolume: its root directory */
		if (fs_obj(src) != ARB_FIRST_INO) {
			ret = -EINVAL;
			goto out;
		}
		stree = fs_tree_of(fs, src);
		if (stree->deleted) {
			ret = -ENOENT;
			goto out;
		}
	}
	ret = fs_new_name_ok(fs, dir, name, len, &din);
	if (!ret)
		ret = fs_iflags_may_create(&din);
	if (!ret && din.nlink >= ARB_LINK_MAX)
		ret = -EMLINK;
	if (!ret)
		ret = next_id(fs, &id);
	if (ret)
		goto out;
	ret = fs_op_begin(fs, &t, dir, 0, 0);
	if (ret)
		goto out;
	fs_now(&now);
	if (src) {
		/* everything written so far goes into the source first */
		ret = fs_flush_all(fs, t);
		if (!ret)
			ret = arb_root_clone(t, stree->root, id, &r);
	} else {
		ret = arb_root_create(t, id, &r);
		if (!ret)
			ret = root_dir_insert(t, r, &din, mode, cr);
	}
	if (ret)
		goto out_end;
	ret = fs_dent_add(fs, t, &din, name, len, id,
			  DT_DIR | ARB_DENT_SUBVOL, &now, &index);
	if (ret)
		goto out_end;
	din.nlink++; /* the subvolume root's ".." */
	ret = refs_insert(t, fs, fs_tree_of(fs, dir)->id, id, fs_obj(dir),
			  index, name, len);
	if (ret)
		goto out_end;
	sv_item_new(&si, flags, src ? stree->id : 0);
	ret = sv_item_write(t, fs, id, &si);
	if (!ret)
		ret = note_id(t, fs, id);
	if (!ret)
		ret = fs_inode_write(fs, t, &din);
	if (ret)
		goto out_end;
	arb_vol_set_features(fs->vol, 0, ARB_INCOMPAT_SUBVOL);
out_end:
	ret = fs_op_end(fs, t, ret);
	if (!ret)
		ret = fs_commit(fs);
	if (ret)
		goto out;
	ret = fs_tree_open(fs, id, &ntree);
	if (!ret)
		ret = fs_inode_read(fs, fs_ino(ntree, ARB_FIRST_INO), &rin);
	if (!ret && st)
		fs_inode_to_stat(fs, &rin, st);
out:
	fs_unlock(fs);
	return ret;
}

int arb_subvol_create(struct arb_fs *fs, uint64_t dir, const char *name,
		      uint32_t mode, const struct arb_cred *cr,
		      struct arb_stat *st)
{
	return make_subvol(fs, 0, dir, name, mode, 0, cr, st);
}

int arb_subvol_snapshot(struct arb_fs *fs, uint64_t src, uint64_t dir,
			const char *name, unsigned flags,
			const struct arb_cred *cr, struct arb_stat *st)
{
	if (!src)
		return -EINVAL;
	return make_subvol(fs, src, dir, name, 0, flags, cr, st);
}

/* ---- delete and the cleaner -------------------------------------------- */

/*
 * Unlink the subvolume linked at dir/name and record it for the cleaner
 * (lock held).  empty: refuse with ENOTEMPTY unless its root directory
 * is empty (an rmdir).
 */
int fs_subvol_unlink(struct arb_fs *fs, uint64_t dir, const char *name,
		     size_t len, bool empty)
{
	struct arb_key k = { ARB_ORPHAN_OBJECTID, ARB_ORPHAN_ITEM, 0 };
	struct arb_inode din, in;
	struct fs_tree *tr;
	struct arb_txn *t;
	struct timespec now;
	uint64_t ino, seq, parent, def;
	uint8_t dummy = 0;
	bool children, is_empty;
	int ret;

	ret = fs_inode_read(fs, dir, &din);
	if (!ret && !S_ISDIR(din.mode))
		ret = -ENOTDIR;
	if (!ret)
		ret = fs_dir_find(fs, dir, name, len, &ino, &seq, NULL);
	if (ret == -ESTALE)
		ret = -ENOENT;
	if (!ret)
		ret = fs_inode_read(fs, ino, &in);
	if (ret)
		return ret;
	tr = fs_tree_of(fs, ino);
	parent = fs_tree_of(fs, dir)->id;
	if (tr == fs_tree_of(fs, dir) || fs_obj(ino) != ARB_FIRST_INO)
		return -EINVAL; /* not a subvolume */
	ret = has_children(fs, tr->id, &children);
	if (!ret && children)
		ret = -ENOTEMPTY;
	if (!ret && empty) {
		ret = fs_dir_is_empty(fs, ino, &is_empty);
		if (!ret && !is_empty)
			ret = -ENOTEMPTY;
	}
	if (!ret)
		ret = default_read(fs, &def);
	if (!ret && def == tr->id)
		ret = -EBUSY; /* the default: set another one first */
	if (!ret)
		ret = fs_iflags_may_delete(&din, &in);
	if (ret)
		return ret;
	ret = fs_op_begin(fs, &t, dir, 0, ARB_OP_LAST);
	if (ret)
		return ret;
	fs_now(&now);
	ret = fs_dent_del(fs, t, &din, name, len, seq, &now);
	if (ret)
		goto out_end;
	if (din.nlink > 2)
		din.nlink--;
	k = (struct arb_key){ parent, ARB_ROOT_REF, tr->id };
	ret = arb_del_item(t, fs->vol->tree_root, &k);
	if (!ret) {
		k = (struct arb_key){ tr->id, ARB_ROOT_BACKREF, parent };
		ret = arb_del_item(t, fs->vol->tree_root, &k);
	}
	if (!ret) {
		k = (struct arb_key){ ARB_ORPHAN_OBJECTID, ARB_ORPHAN_ITEM,
				      tr->id };
		ret = arb_insert_item(t, fs->vol->tree_root, &k, &dummy, 0);
	}
	if (!ret)
		ret = fs_inode_write(fs, t, &din);
out_end:
	ret = fs_op_end(fs, t, ret);
	if (!ret)
		ret = fs_commit(fs);
	if (!ret) {
		tr->deleted = true;
		fs_clean_kick(fs);
	}
	return ret;
}

int arb_subvol_delete(struct arb_fs *fs, uint64_t dir, const char *name)
{
	size_t len;
	int ret;

	ret = fs_check_name(name, &len);
	if (ret)
		return ret;
	fs_lock(fs);
	ret = fs_subvol_unlink(fs, dir, name, len, false);
	fs_unlock(fs);
	return ret;
}

/* is subvolume id a partial receive (kept for a resume)? */
static bool is_partial(struct arb_fs *fs, uint64_t id)
{
	struct arb_subvol_item si;

	return sv_item_read(fs, id, &si) == 0 &&
	       (arb_subvol_item_s_flags(&si) & ARB_SUBVOL_F_PARTIAL);
}

/* the first deleted subvolume at or after id still to clean, or 0 (a
 * partial receive is not to clean: it waits for its resume) */
static int next_orphan(struct arb_fs *fs, uint64_t from, uint64_t *id)
{
	struct arb_key k = { ARB_ORPHAN_OBJECTID, ARB_ORPHAN_ITEM, from };
	int ret;

	for (;;) {
		ret = arb_next_key_of(fs->vol->tree_root, &k);
		if (ret < 0)
			return ret;
		if (ret || !is_partial(fs, k.offset))
			break;
		k.offset++;
	}
	*id = ret == 0 ? k.offset : 0;
	return 0;
}

/* the partial-receive feature bit follows whether one is left (in the
 * running transaction: its commit writes the superblock) */
static int partial_feature(struct arb_fs *fs)
{
	struct arb_key k = { ARB_ORPHAN_OBJECTID, ARB_ORPHAN_ITEM, 0 };
	int ret;

	for (;;) {
		ret = arb_next_key_of(fs->vol->tree_root, &k);
		if (ret < 0)
			return ret;
		if (ret)
			break;
		if (is_partial(fs, k.offset))
			return 0;
		k.offset++;
	}
	arb_vol_clear_features(fs->vol, 0, ARB_INCOMPAT_PARTIAL_RECEIVE);
	return 0;
}

/* the tree table entry of id, if open */
static struct fs_tree *open_tree(struct arb_fs *fs, uint64_t id)
{
	bool ok;
	uint64_t slot = arb_inum_slot(id, &ok);

	return ok ? fs_tree_find(fs, slot << ARB_INUM_SHIFT) : NULL;
}

/* delayed data of a dropped tree's inodes goes with it */
static void drop_tree_data(struct arb_fs *fs, struct arb_imem *im, void *arg)
{
	const uint64_t *slot = arg;

	if ((im->ino >> ARB_INUM_SHIFT) == *slot) {
		fs_imem_drop_blocks(fs, im, 0);
		fs_imem_put_if_idle(fs, im);
	}
}

/*
 * One batch of the cleaning of a deleted subvolume (only want when want
 * != 0) whose inodes are not pinned, at most b's budget (NULL: all of
 * it): 1 it is gone (committed, or with ask: the commit thread asked for
 * the commit), 2 a batch was dropped and more remains (in the running
 * transaction: the commit that writes it writes the progress with it), 0
 * nothing to do now, <0 error.  Lock held.
 */
static int clean_batch(struct arb_fs *fs, uint64_t want,
		       const struct arb_drop_budget *b, bool ask)
{
	struct arb_key k;
	struct arb_root *r;
	struct fs_tree *tr;
	struct arb_txn *t;
	uint64_t id = want ? want : ARB_FIRST_SUBVOL_ID;
	int ret;

	if (fs->readonly)
		return 0;
	for (;;) {
		ret = next_orphan(fs, id, &id);
		if (ret || !id || (want && id != want))
			return ret;
		tr = open_tree(fs, id);
		if (tr && tr->receiving) {
			/* being built by a receive (lib/send/receive.c) */
			if (want)
				return 0;
			id++;
			continue;
		}
		if (!tr || !tr->pinned)
			break;
		tr->deleted = true;
		if (want)
			return 0; /* still in use */
		id++;
	}
	/* nothing of the tree is read through the table from now on */
	if (tr)
		fs_imem_for_each(fs, drop_tree_data, &tr->slot);
	ret = arb_txn_begin(fs->vol, &t);
	if (ret)
		return ret;
	ret = arb_root_get(fs->vol, id, &r);
	if (!ret)
		ret = arb_root_drop_batch(t, r, b);
	else if (ret == -ENOENT)
		ret = 1; /* dropped already: only the items were left */
	if (ret == 0) {
		arb_txn_end(t);
		if (tr)
			fs_tree_forget(fs, tr);
		fs->txn_dirty = true;
		return 2;
	}
	k = (struct arb_key){ id, ARB_SUBVOL_ITEM, 0 };
	if (ret == 1)
		ret = fs_item_exists(fs->vol->tree_root, &k)
			      ? arb_del_item(t, fs->vol->tree_root, &k)
			      : 0;
	k = (struct arb_key){ id, ARB_DIGEST_ITEM, 0 };
	if (!ret && fs_item_exists(fs->vol->tree_root, &k))
		ret = arb_del_item(t, fs->vol->tree_root, &k);
	k = (struct arb_key){ ARB_ORPHAN_OBJECTID, ARB_ORPHAN_ITEM, id };
	if (!ret)
		ret = arb_del_item(t, fs->vol->tree_root, &k);
	if (ret) {
		fs_abort(fs, t, ret);
		return ret;
	}
	arb_txn_end(t);
	if (tr)
		fs_tree_forget(fs, tr);
	fs->txn_dirty = true;
	arb_log(ARB_LOG_INFO, "subvolume %llu cleaned", (unsigned long long)id);
	if (ask) {
		/* the commit thread broadcasts clean_cond after it */
		fs->commit_asked = true;
		pthread_cond_signal(&fs->cond);
		return 1;
	}
	ret = fs_commit(fs);
	if (ret)
		return ret;
	pthread_cond_broadcast(&fs->clean_cond);
	return 1;
}

int fs_subvol_clean_batch(struct arb_fs *fs, uint64_t want,
			  const struct arb_drop_budget *b)
{
	return clean_batch(fs, want, b, false);
}

/* the budget of a batch of the cleaner */
static struct arb_drop_budget clean_budget(struct arb_fs *fs)
{
	return (struct arb_drop_budget){
		fs->opts.clean_batch_nodes ? fs->opts.clean_batch_nodes
					   : ARB_CLEAN_BATCH_NODES,
		ARB_CLEAN_BATCH_NS, &fs->lock_waiters, &fs->clean_fetch
	};
}

int fs_subvol_clean(struct arb_fs *fs)
{
	const struct arb_drop_budget b = clean_budget(fs);

	/* the cleaner thread's commits are the commit thread's (fs.c) */
	return clean_batch(fs, 0, &b, fs->thread_running);
}

#define WAIT_POLL_NS (20 * 1000 * 1000)

/*
 * With a cleaner thread (fs.c), it does the cleaning (one cleaner: two
 * would take turns at the lock with every other thread waiting behind
 * both) and this waits; without one (an image opened by a tool), this
 * cleans.
 */
int arb_subvol_wait(struct arb_fs *fs, uint64_t id)
{
	const struct arb_drop_budget b = clean_budget(fs);
	const struct timespec nap = { 0, WAIT_POLL_NS };
	uint64_t next, last = arb_mono_ns();
	bool asked = false;
	struct timespec ts;
	int ret;

	fs_lock(fs);
	fs_clean_locked(fs);
	for (;;) {
		ret = next_orphan(fs, id ? id : ARB_FIRST_SUBVOL_ID, &next);
		if (!ret && fs->failed)
			ret = -EIO;
		if (ret)
			break;
		if (!next || (id && next != id)) {
			/* nothing left once the cleaner's last commit is
			 * made (the commit thread's: it broadcasts) */
			if (!fs->commit_asked || !fs->thread_running)
				break;
		} else if (fs->readonly) {
			ret = -EROFS;
			break;
		}
		if (fs->cleaner_running) {
			/* woken when a subvolume is gone; asks again now and
			 * then (the tree may have been pinned) */
			if (!asked) {
				fs_clean_kick(fs);
				asked = true;
			}
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += WAIT_POLL_NS;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			if (pthread_cond_timedwait(&fs->clean_cond,
						   &fs->vol->lock, &ts))
				asked = false;
			continue;
		}
		ret = fs_subvol_clean_batch(fs, next, &b);
		if (ret < 0)
			break;
		/* a long cleaning commits now and then, as the commit
		 * thread's does */
		if (ret == 2 && arb_mono_ns() - last >= 1000000000ULL) {
			ret = fs_commit(fs);
			last = arb_mono_ns();
			if (ret)
				break;
			ret = 2;
		}
		if (ret == 2) {
			fs_clean_pause(fs);
		} else if (ret == 0 && !fs->thread_running) {
			/* pinned, and no thread of the library's: the caller
			 * holds its files, waiting would be for itself */
			ret = -EBUSY;
			break;
		} else if (ret == 0) {
			/* pinned: wait for its inodes to be let go */
			fs_unlock(fs);
			nanosleep(&nap, NULL);
			fs_lock(fs);
		}
	}
	fs_unlock(fs);
	return ret < 0 ? ret : 0;
}

/* ---- receive: a subvolume built unlinked, linked at its end ----------- */

int fs_subvol_recv_begin(struct arb_fs *fs, uint64_t parent,
			 struct fs_tree **out)
{
	struct arb_key k = { ARB_ORPHAN_OBJECTID, ARB_ORPHAN_ITEM, 0 };
	struct arb_subvol_item si;
	struct fs_tree *ptree = NULL, *tr;
	struct arb_inode din;
	struct arb_root *r;
	struct arb_txn *t;
	uint8_t dummy = 0;
	uint64_t id;
	int ret;

	fs_lock(fs);
	if (parent) {
		ret = fs_tree_open(fs, parent, &ptree);
		if (ret)
			goto out;
	}
	ret = next_id(fs, &id);
	if (ret)
		goto out;
	ret = fs_op_begin(fs, &t, 0, 0, 0);
	if (ret)
		goto out;
	if (ptree) {
		ret = fs_flush_all(fs, t);
		if (!ret)
			ret = arb_root_clone(t, ptree->root, id, &r);
	} else {
		memset(&din, 0, sizeof(din));
		ret = arb_root_create(t, id, &r);
		if (!ret)
			ret = root_dir_insert(t, r, &din, 0755, NULL);
	}
	if (ret)
		goto out_end;
	sv_item_new(&si, 0, parent);
	ret = sv_item_write(t, fs, id, &si);
	if (!ret)
		ret = note_id(t, fs, id);
	/* unlinked and orphaned, as a deleted subvolume: a crash leaves it
	 * to the cleaner */
	k.offset = id;
	if (!ret)
		ret = arb_insert_item(t, fs->vol->tree_root, &k, &dummy, 0);
	if (!ret)
		arb_vol_set_features(fs->vol, 0, ARB_INCOMPAT_SUBVOL);
out_end:
	ret = fs_op_end(fs, t, ret);
	if (!ret)
		ret = fs_commit(fs);
	if (!ret)
		ret = fs_tree_open(fs, id, &tr);
	if (!ret) {
		tr->deleted = false;
		tr->receiving = true;
		*out = tr;
	}
out:
	fs_unlock(fs);
	return ret;
}

int fs_subvol_recv_publish(struct arb_fs *fs, struct fs_tree *tr,
			   uint64_t dir, const char *name,
			   const uint8_t uuid[16], uint64_t stransid)
{
	struct arb_key k = { ARB_ORPHAN_OBJECTID, ARB_ORPHAN_ITEM, tr->id };
	struct arb_subvol_item si;
	struct arb_inode din;
	struct arb_txn *t;
	struct timespec now;
	uint64_t index;
	size_t len;
	int ret;

	ret = fs_check_name(name, &len);
	if (ret)
		return ret;
	fs_lock(fs);
	ret = fs_new_name_ok(fs, dir, name, len, &din);
	if (!ret)
		ret = fs_iflags_may_create(&din);
	if (!ret && din.nlink >= ARB_LINK_MAX)
		ret = -EMLINK;
	if (!ret)
		ret = sv_item_read(fs, tr->id, &si);
	if (ret)
		goto out;
	ret = fs_op_begin(fs, &t, dir, 0, 0);
	if (ret)
		goto out;
	fs_now(&now);
	ret = fs_dent_add(fs, t, &din, name, len, tr->id,
			  DT_DIR | ARB_DENT_SUBVOL, &now, &index);
	if (ret)
		goto out_end;
	din.nlink++;
	ret = refs_insert(t, fs, fs_tree_of(fs, dir)->id, tr->id, fs_obj(dir),
			  index, name, len);
	if (ret)
		goto out_end;
	arb_set_subvol_item_s_flags(&si, ARB_SUBVOL_F_RDONLY);
	arb_set_subvol_item_s_last_id(&si, 0); /* a partial's resume offset */
	memcpy(si.s_received_uuid, uuid, ARB_UUID_SIZE);
	arb_set_subvol_item_s_stransid(&si, stransid);
	arb_set_subvol_item_s_rtransid(&si, t->transid);
	ret = sv_item_write(t, fs, tr->id, &si);
	if (!ret)
		ret = arb_del_item(t, fs->vol->tree_root, &k);
	if (!ret)
		ret = fs_inode_write(fs, t, &din);
	/* a resumed receive was a partial one: the last may be gone */
	if (!ret)
		ret = partial_feature(fs);
out_end:
	ret = fs_op_end(fs, t, ret);
	if (!ret)
		ret = fs_commit(fs);
	if (!ret) {
		tr->receiving = false;
		tr->rdonly = true;
	}
out:
	fs_unlock(fs);
	return ret;
}

/* clear ARB_SUBVOL_F_PARTIAL of id (committed); lock held */
static int unpartial(struct arb_fs *fs, uint64_t id)
{
	struct arb_subvol_item si;
	struct arb_txn *t;
	int ret;

	ret = sv_item_read(fs, id, &si);
	if (ret || !(arb_subvol_item_s_flags(&si) & ARB_SUBVOL_F_PARTIAL))
		return ret;
	ret = fs_op_begin(fs, &t, 0, 0, ARB_OP_RESERVE);
	if (ret)
		return ret;
	arb_set_subvol_item_s_flags(&si, arb_subvol_item_s_flags(&si) &
						 ~ARB_SUBVOL_F_PARTIAL);
	arb_set_subvol_item_s_rtransid(&si, 0);
	arb_set_subvol_item_s_last_id(&si, 0);
	ret = sv_item_write(t, fs, id, &si);
	if (!ret)
		ret = partial_feature(fs);
	ret = fs_op_end(fs, t, ret);
	return ret ? ret : fs_commit(fs);
}

void fs_subvol_recv_abandon(struct arb_fs *fs, struct fs_tree *tr)
{
	int ret;

	fs_lock(fs);
	/* a resumed partial receive given up: the cleaner may take it */
	ret = unpartial(fs, tr->id);
	if (ret)
		arb_log(ARB_LOG_WARN,
			"subvolume %llu: clearing its partial-receive flag: %s",
			(unsigned long long)tr->id, strerror(-ret));
	tr->receiving = false;
	tr->deleted = true;
	fs_clean_kick(fs);
	fs_unlock(fs);
}

int fs_subvol_recv_park(struct arb_fs *fs, struct fs_tree *tr,
			const uint8_t uuid[16], uint64_t stransid,
			uint64_t resume_obj, uint64_t resume_off, bool going_on)
{
	struct arb_subvol_item si;
	struct arb_txn *t;
	int ret;

	fs_lock(fs);
	ret = sv_item_read(fs, tr->id, &si);
	if (ret)
		goto out;
	/* what was applied goes into a commit first (delayed data), then
	 * the record that says where to resume: a crash between the two
	 * leaves an ordinary orphan for the cleaner */
	ret = fs_commit(fs);
	if (ret)
		goto out;
	ret = fs_op_begin(fs, &t, 0, 0, ARB_OP_RESERVE);
	if (ret)
		goto out;
	arb_set_subvol_item_s_flags(&si, arb_subvol_item_s_flags(&si) |
						 ARB_SUBVOL_F_PARTIAL);
	memcpy(si.s_received_uuid, uuid, ARB_UUID_SIZE);
	arb_set_subvol_item_s_stransid(&si, stransid);
	arb_set_subvol_item_s_rtransid(&si, resume_obj);
	arb_set_subvol_item_s_last_id(&si, resume_off);
	ret = sv_item_write(t, fs, tr->id, &si);
	if (!ret)
		arb_vol_set_features(fs->vol, 0, ARB_INCOMPAT_PARTIAL_RECEIVE);
	ret = fs_op_end(fs, t, ret);
	if (!ret)
		ret = fs_commit(fs);
	if (!ret && !going_on)
		tr->receiving = false;
out:
	fs_unlock(fs);
	return ret;
}

int fs_subvol_recv_resume(struct arb_fs *fs, uint64_t id,
			  struct fs_tree **out, struct arb_subvol_item *si)
{
	struct fs_tree *tr;
	int ret;

	if (id < ARB_FIRST_SUBVOL_ID)
		return -ENOENT;
	fs_lock(fs);
	ret = sv_item_read(fs, id, si);
	if (!ret && (!(arb_subvol_item_s_flags(si) & ARB_SUBVOL_F_PARTIAL) ||
		     !orphan_exists(fs, id)))
		ret = -ENOENT;
	if (!ret) {
		tr = open_tree(fs, id);
		if (tr && tr->receiving)
			ret = -EBUSY; /* another receive resumes it now */
	}
	if (!ret)
		ret = fs_tree_open(fs, id, &tr);
	if (!ret) {
		tr->deleted = false;
		tr->receiving = true;
		*out = tr;
	}
	fs_unlock(fs);
	return ret == -ENOENT || ret == -ENODATA ? -ENOENT : ret;
}

int fs_subvol_recv_discard(struct arb_fs *fs, uint64_t id)
{
	struct arb_subvol_item si;
	struct fs_tree *tr;
	int ret = fs_subvol_recv_resume(fs, id, &tr, &si);

	if (ret)
		return ret;
	fs_subvol_recv_abandon(fs, tr);
	return 0;
}

/* ---- information ------------------------------------------------------- */

static int info_fill(struct arb_fs *fs, uint64_t id,
		     struct arb_subvol_info *info)
{
	struct arb_key k = { id, ARB_ROOT_ITEM, 0 };
	struct arb_root_item ri;
	struct arb_subvol_item si;
	struct fs_tree *ptr;
	uint64_t parent, dirobj, seq;
	int ret;

	memset(info, 0, sizeof(*info));
	ret = arb_lookup_item(fs->vol->tree_root, &k, &ri, sizeof(ri));
	if (ret < 0)
		return ret;
	if (ret != (int)sizeof(ri))
		return -EUCLEAN;
	info->id = id;
	info->ino = arb_inum(id, ARB_FIRST_INO);
	memcpy(info->uuid, ri.r_uuid, 16);
	memcpy(info->parent_uuid, ri.r_parent_uuid, 16);
	info->otransid = arb_root_item_r_otransid(&ri);
	info->gen = arb_root_item_r_generation(&ri);
	ret = sv_item_read(fs, id, &si);
	if (ret && ret != -ENOENT)
		return ret;
	if (!ret) {
		if (arb_subvol_item_s_flags(&si) & ARB_SUBVOL_F_RDONLY)
			info->flags |= ARB_SUBVOL_RDONLY;
		if (arb_subvol_item_s_flags(&si) & ARB_SUBVOL_F_PARTIAL) {
			info->flags |= ARB_SUBVOL_PARTIAL;
			info->resume_off = arb_subvol_item_s_last_id(&si);
		}
		memcpy(info->received_uuid, si.s_received_uuid, 16);
		info->stransid = arb_subvol_item_s_stransid(&si);
		info->rtransid = arb_subvol_item_s_rtransid(&si);
		info->source_id = arb_subvol_item_s_source(&si);
		info->otime.tv_sec = (time_t)arb_subvol_item_s_otime(&si);
		info->otime.tv_nsec = arb_subvol_item_s_otime_ns(&si);
		info->ctime.tv_sec = (time_t)arb_subvol_item_s_ctime(&si);
		info->ctime.tv_nsec = arb_subvol_item_s_ctime_ns(&si);
	}
	if (id != ARB_FS_TREE_ID && orphan_exists(fs, id)) {
		struct arb_drop_state st;

		info->flags |= ARB_SUBVOL_DELETED;
		ret = arb_root_drop_state(fs->vol, id, &st);
		if (ret)
			return ret;
		info->clean_nodes = st.nodes;
		info->clean_freed = st.freed;
		info->clean_permille = st.permille;
	}
	ret = fs_subvol_backref(fs, id, &parent, &dirobj, &seq, info->name);
	if (ret == -ENOENT)
		return 0;
	if (ret)
		return ret;
	info->parent_id = parent;
	ret = fs_tree_open(fs, parent, &ptr);
	if (ret)
		return ret == -ENOENT ? -EUCLEAN : ret;
	info->dir_ino = fs_ino(ptr, dirobj);
	return 0;
}

int arb_subvol_info_id(struct arb_fs *fs, uint64_t id,
		       struct arb_subvol_info *info)
{
	bool ok;
	int ret;

	(void)arb_inum_slot(id, &ok);
	if (!ok)
		return -ENOENT;
	fs_lock(fs);
	ret = info_fill(fs, id, info);
	fs_unlock(fs);
	return ret;
}

int arb_subvol_info(struct arb_fs *fs, uint64_t ino,
		    struct arb_subvol_info *info)
{
	int ret;

	fs_lock(fs);
	ret = fs_ino_valid(fs, ino) ? 0 : fs_tree_open_ino(fs, ino);
	if (!ret)
		ret = info_fill(fs, fs_tree_of(fs, ino)->id, info);
	fs_unlock(fs);
	return ret;
}

int arb_subvol_list(struct arb_fs *fs, arb_subvol_fn fn, void *ctx)
{
	struct arb_subvol_info info;
	struct arb_key k;
	struct arb_iter it;
	uint64_t id = ARB_FS_TREE_ID, next;
	int ret;

	for (;;) {
		fs_lock(fs);
		/* the next ROOT_ITEM of an fs tree at or after id */
		k = (struct arb_key){ id, ARB_ROOT_ITEM, 0 };
		arb_iter_init(&it, fs->vol->tree_root);
		ret = arb_iter_seek(&it, &k);
		next = 0;
		while (ret == 0) {
			arb_iter_key(&it, &k);
			if (k.objectid >= ARB_ORPHAN_OBJECTID - 16) {
				ret = 1;
				break;
			}
			if (k.type == ARB_ROOT_ITEM &&
			    (k.objectid == ARB_FS_TREE_ID ||
			     k.objectid >= ARB_FIRST_SUBVOL_ID)) {
				next = k.objectid;
				break;
			}
			ret = arb_iter_next(&it);
		}
		arb_iter_release(&it);
		if (ret == 0 && next)
			ret = info_fill(fs, next, &info);
		fs_unlock(fs);
		if (ret < 0)
			return ret;
		if (ret == 1 || !next)
			return 0;
		ret = fn(ctx, &info);
		if (ret)
			return ret;
		id = next + 1;
		if (id < ARB_FIRST_SUBVOL_ID)
			id = ARB_FIRST_SUBVOL_ID;
	}
}

/* name of directory objectid obj of tree tr in its parent; *up the
 * parent's objectid.  -ENOENT for an unlinked one. */
static int dir_name(struct arb_fs *fs, struct fs_tree *tr, uint64_t obj,
		    char *name, uint64_t *up)
{
	struct arb_key key = { obj, ARB_INODE_REF, 0 }, k;
	const struct arb_inode_ref *r;
	struct arb_iter it;
	size_t nl = 0;
	int ret;

	(void)fs;
	arb_iter_init(&it, tr->root);
	ret = arb_iter_seek(&it, &key);
	if (ret == 0) {
		arb_iter_key(&it, &k);
		if (k.objectid != obj || k.type != ARB_INODE_REF) {
			ret = 1;
		} else if (arb_iter_size(&it) < sizeof(*r)) {
			ret = -EUCLEAN;
		} else {
			r = arb_iter_data(&it);
			nl = arb_inode_ref_r_name_len(r);
			if (nl == 0 || nl > ARB_NAME_MAX ||
			    sizeof(*r) + nl > arb_iter_size(&it))
				ret = -EUCLEAN;
			else
				memcpy(name, r + 1, nl);
		}
	}
	arb_iter_release(&it);
	if (ret < 0)
		return ret;
	if (ret == 1)
		return -ENOENT;
	name[nl] = 0;
	*up = k.offset;
	return 0;
}

/* prepend "/name" (or "name" at the start) to the path built backwards
 * from buf + *pos */
static int prepend(char *buf, size_t *pos, const char *name)
{
	size_t nl = strlen(name), need = nl + (buf[*pos] ? 1 : 0);

	if (need > *pos)
		return -ERANGE;
	if (buf[*pos])
		buf[--*pos] = '/';
	*pos -= nl;
	memcpy(buf + *pos, name, nl);
	return 0;
}

static int path_locked(struct arb_fs *fs, uint64_t id, char *buf, size_t size)
{
	char name[ARB_NAME_MAX + 1];
	uint64_t parent, dirobj, seq, up;
	struct fs_tree *tr;
	size_t pos = size - 1;
	unsigned depth = 0;
	int ret;

	if (size == 0)
		return -ERANGE;
	buf[pos] = 0;
	while (id != ARB_FS_TREE_ID) {
		ret = fs_subvol_backref(fs, id, &parent, &dirobj, &seq, name);
		if (ret)
			return ret;
		ret = prepend(buf, &pos, name);
		if (ret)
			return ret;
		ret = fs_tree_open(fs, parent, &tr);
		if (ret)
			return ret == -ENOENT ? -EUCLEAN : ret;
		while (dirobj != ARB_FIRST_INO) {
			ret = dir_name(fs, tr, dirobj, name, &up);
			if (ret)
				return ret;
			ret = prepend(buf, &pos, name);
			if (ret)
				return ret;
			dirobj = up;
			if (++depth > 100000)
				return -EUCLEAN;
		}
		id = parent;
		if (++depth > 100000)
			return -EUCLEAN;
	}
	memmove(buf, buf + pos, size - pos);
	return 0;
}

int arb_subvol_path(struct arb_fs *fs, uint64_t id, char *buf, size_t size)
{
	int ret;

	fs_lock(fs);
	ret = path_locked(fs, id, buf, size);
	fs_unlock(fs);
	return ret;
}

int arb_subvol_get_default(struct arb_fs *fs, uint64_t *id)
{
	int ret;

	fs_lock(fs);
	ret = default_read(fs, id);
	fs_unlock(fs);
	return ret;
}

int arb_subvol_set_default(struct arb_fs *fs, uint64_t id)
{
	struct arb_key k = { id, ARB_ROOT_ITEM, 0 };
	struct arb_subvol_item si;
	struct arb_txn *t;
	uint64_t cur;
	bool ok;
	int ret;

	if (!id)
		id = ARB_FS_TREE_ID;
	if (id != ARB_FS_TREE_ID) {
		if (id < ARB_FIRST_SUBVOL_ID)
			return -ENOENT;
		(void)arb_inum_slot(id, &ok);
		if (!ok)
			return -ENOENT;
	}
	fs_lock(fs);
	if (fs->readonly) {
		ret = fs->shutdown ? -EIO : -EROFS;
		goto out;
	}
	ret = default_read(fs, &cur);
	if (ret || cur == id)
		goto out;
	/* a live subvolume: its tree, and no deletion under way */
	k.objectid = id;
	if (id != ARB_FS_TREE_ID &&
	    (!fs_item_exists(fs->vol->tree_root, &k) || orphan_exists(fs, id))) {
		ret = -ENOENT;
		goto out;
	}
	ret = sv_item_read(fs, ARB_FS_TREE_ID, &si);
	if (ret && ret != -ENOENT)
		goto out;
	/* 5 is stored as 0: what images from before the field hold */
	arb_set_subvol_item_s_default_id(&si,
					 id == ARB_FS_TREE_ID ? 0 : id);
	/* the flag itself, not a change inside tree 5: no ino given */
	ret = fs_op_begin(fs, &t, 0, 0, 0);
	if (ret)
		goto out;
	ret = sv_item_write(t, fs, ARB_FS_TREE_ID, &si);
	if (!ret)
		arb_vol_set_features(fs->vol, 0, ARB_INCOMPAT_SUBVOL);
	ret = fs_op_end(fs, t, ret);
	if (!ret)
		ret = fs_commit(fs);
out:
	fs_unlock(fs);
	return ret;
}

int arb_subvol_set_rdonly(struct arb_fs *fs, uint64_t ino, bool rdonly,
			  bool *cleared_received)
{
	static const uint8_t zero[ARB_UUID_SIZE];
	struct arb_subvol_item si;
	struct fs_tree *tr;
	struct arb_txn *t;
	struct timespec now;
	bool cleared = false;
	int ret;

	if (cleared_received)
		*cleared_received = false;
	fs_lock(fs);
	ret = fs_ino_valid(fs, ino) ? 0 : fs_tree_open_ino(fs, ino);
	if (ret)
		goto out;
	tr = fs_tree_of(fs, ino);
	if (tr->id == ARB_FS_TREE_ID) {
		ret = rdonly ? -EINVAL : 0;
		goto out;
	}
	if (tr->rdonly == rdonly)
		goto out;
	ret = sv_item_read(fs, tr->id, &si);
	if (ret == -ENOENT)
		sv_item_new(&si, 0, 0);
	else if (ret)
		goto out;
	/* the flag itself may change on a read-only tree: no ino given */
	ret = fs_op_begin(fs, &t, 0, 0, 0);
	if (ret)
		goto out;
	fs_now(&now);
	arb_set_subvol_item_s_flags(
		&si, (arb_subvol_item_s_flags(&si) & ~ARB_SUBVOL_F_RDONLY) |
			     (rdonly ? ARB_SUBVOL_F_RDONLY : 0));
	arb_set_subvol_item_s_ctime(&si, (uint64_t)now.tv_sec);
	arb_set_subvol_item_s_ctime_ns(&si, (uint32_t)now.tv_nsec);
	if (!rdonly && memcmp(si.s_received_uuid, zero, ARB_UUID_SIZE)) {
		/* changed from now on: no longer what was received */
		memset(si.s_received_uuid, 0, ARB_UUID_SIZE);
		arb_set_subvol_item_s_stransid(&si, 0);
		arb_set_subvol_item_s_rtransid(&si, 0);
		cleared = true;
	}
	ret = sv_item_write(t, fs, tr->id, &si);
	if (!ret)
		arb_vol_set_features(fs->vol, 0, ARB_INCOMPAT_SUBVOL);
	ret = fs_op_end(fs, t, ret);
	if (!ret)
		ret = fs_commit(fs);
	if (!ret) {
		tr->rdonly = rdonly;
		if (cleared_received)
			*cleared_received = cleared;
	}
out:
	fs_unlock(fs);
	return ret;
}

/* ---- exclusive and shared bytes ---------------------------------------- */

/*
 * Which bytes only this subvolume holds, from the reference counts: a
 * node is the subvolume's own when it and every node above it have one
 * reference (a clone shares a node by giving it a second parent); a data
 * extent is its own when every reference the extent tree counts comes
 * from the subvolume's own leaves (references are counted per leaf, so a
 * leaf shared with a snapshot counts once for both).  Everything else the
 * walk meets is shared.  Costs one walk of the tree, reading every node
 * the subvolume holds, and a table entry per data extent it uses.
 */
struct use_ext {
	uint64_t bytenr, len;
	uint64_t own; /* file extent items in own leaves */
	bool shared;  /* met in a shared leaf */
};

struct use {
	struct arb_fs *fs;
	struct use_ext *tab;
	size_t cap, nr;
	struct arb_subvol_usage *u;
};

static struct use_ext *use_get(struct use *w, uint64_t bytenr)
{
	size_t i;

	if (2 * (w->nr + 1) > w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 1024;
		struct use_ext *t = calloc(cap, sizeof(*t));

		if (!t)
			return NULL;
		for (size_t j = 0; j < w->cap; j++) {
			if (!w->tab[j].bytenr)
				continue;
			i = (size_t)((w->tab[j].bytenr * 0x9E3779B97F4A7C15ULL) >>
				     32) & (cap - 1);
			while (t[i].bytenr)
				i = (i + 1) & (cap - 1);
			t[i] = w->tab[j];
		}
		free(w->tab);
		w->tab = t;
		w->cap = cap;
	}
	i = (size_t)((bytenr * 0x9E3779B97F4A7C15ULL) >> 32) & (w->cap - 1);
	while (w->tab[i].bytenr && w->tab[i].bytenr != bytenr)
		i = (i + 1) & (w->cap - 1);
	if (!w->tab[i].bytenr) {
		w->tab[i].bytenr = bytenr;
		w->nr++;
	}
	return &w->tab[i];
}

/* the reference count of an extent item (bytenr, len), 0 if none */
static int extent_refs(struct arb_fs *fs, uint64_t bytenr, uint64_t len,
		       uint64_t *refs)
{
	struct arb_key k = { bytenr, ARB_EXTENT_ITEM, len };
	struct arb_extent_item ei;
	int ret = arb_lookup_item(fs->vol->extent_root, &k, &ei, sizeof(ei));

	if (ret == -ENOENT) {
		*refs = 0;
		return 0;
	}
	if (ret < 0)
		return ret;
	if (ret < (int)sizeof(ei))
		return -EUCLEAN;
	*refs = arb_extent_item_e_refs(&ei);
	return 0;
}

static int use_leaf(struct use *w, struct arb_node *n, bool own)
{
	int nr = (int)arb_nritems(n);

	for (int i = 0; i < nr; i++) {
		const struct arb_file_extent *fe;
		struct use_ext *e;
		struct arb_key k;

		arb_node_key(n, i, &k);
		if (k.type != ARB_EXTENT_DATA ||
		    arb_item_size(n, i) < sizeof(*fe))
			continue;
		fe = arb_item_ptr(n, i);
		if (arb_file_extent_f_type(fe) == ARB_FILE_EXTENT_INLINE ||
		    !arb_file_extent_f_disk_bytenr(fe))
			continue;
		e = use_get(w, arb_file_extent_f_disk_bytenr(fe));
		if (!e)
			return -ENOMEM;
		e->len = arb_file_extent_f_disk_num_bytes(fe);
		if (own)
			e->own++;
		else
			e->shared = true;
	}
	return 0;
}

static int use_node(struct use *w, struct arb_node *n, bool own)
{
	uint64_t bytes = arb_node_alloc_bytes(w->fs->vol);
	int ret = 0;

	if (own)
		w->u->meta_exclusive += bytes;
	else
		w->u->meta_shared += bytes;
	if (arb_level(n) == 0)
		return use_leaf(w, n, own);
	for (int i = 0; i < (int)arb_nritems(n) && !ret; i++) {
		struct arb_node *c;
		uint64_t refs = 1;

		if (own)
			ret = extent_refs(w->fs, arb_child_bytenr(n, i),
					  w->fs->vol->nodesize, &refs);
		if (!ret)
			ret = arb_node_read(w->fs->vol, arb_child_bytenr(n, i),
					    arb_child_mirror(n, i),
					    arb_child_gen(n, i),
					    arb_level(n) - 1, &c);
		if (ret)
			break;
		ret = use_node(w, c, own && refs == 1);
		arb_node_put(w->fs->vol, c);
	}
	return ret;
}

int arb_subvol_usage(struct arb_fs *fs, uint64_t ino,
		     struct arb_subvol_usage *u)
{
	struct use w = { .fs = fs, .u = u };
	struct fs_tree *tr;
	uint64_t refs;
	int ret;

	memset(u, 0, sizeof(*u));
	fs_lock(fs);
	ret = fs_ino_valid(fs, ino) ? 0 : fs_tree_open_ino(fs, ino);
	if (ret)
		goto out;
	tr = fs_tree_of(fs, ino);
	/* counts as committed: pending reference changes applied */
	if (!fs->readonly && (fs->txn_dirty || fs->dirty_bytes)) {
		ret = fs_commit(fs);
		if (ret)
			goto out;
	}
	ret = use_node(&w, tr->root->node, true);
	for (size_t i = 0; i < w.cap && !ret; i++) {
		struct use_ext *e = &w.tab[i];

		if (!e->bytenr)
			continue;
		ret = extent_refs(fs, e->bytenr, e->len, &refs);
		if (ret)
			break;
		if (!e->shared && e->own >= refs)
			u->exclusive += e->len;
		else
			u->shared += e->len;
	}
out:
	fs_unlock(fs);
	free(w.tab);
	return ret;
}
