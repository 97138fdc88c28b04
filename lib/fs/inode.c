/* SPDX-License-Identifier: MIT */
/*
 * inode.c - INODE_ITEM (format.h) packed <-> struct arb_inode, getattr,
 * setattr and freeing an inode with everything it owns.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fs_int.h"

void fs_inode_unpack(struct arb_inode *in, uint64_t ino,
		     const struct arb_inode_item *d)
{
	memset(in, 0, sizeof(*in));
	in->ino = ino;
	in->generation = arb_inode_item_i_generation(d);
	in->transid = arb_inode_item_i_transid(d);
	in->size = arb_inode_item_i_size(d);
	in->nbytes = arb_inode_item_i_nbytes(d);
	in->seq = arb_inode_item_i_seq(d);
	in->rdev = arb_inode_item_i_rdev(d);
	in->flags = arb_inode_item_i_flags(d);
	in->nlink = arb_inode_item_i_nlink(d);
	in->uid = arb_inode_item_i_uid(d);
	in->gid = arb_inode_item_i_gid(d);
	in->mode = arb_inode_item_i_mode(d);
	in->atime.tv_sec = (int64_t)arb_inode_item_i_atime(d);
	in->atime.tv_nsec = arb_inode_item_i_atime_ns(d);
	in->mtime.tv_sec = (int64_t)arb_inode_item_i_mtime(d);
	in->mtime.tv_nsec = arb_inode_item_i_mtime_ns(d);
	in->ctime.tv_sec = (int64_t)arb_inode_item_i_ctime(d);
	in->ctime.tv_nsec = arb_inode_item_i_ctime_ns(d);
	in->btime.tv_sec = (int64_t)arb_inode_item_i_btime(d);
	in->btime.tv_nsec = arb_inode_item_i_btime_ns(d);
}

void fs_inode_pack(struct arb_inode_item *d, const struct arb_inode *in)
{
	memset(d, 0, sizeof(*d));
	arb_set_inode_item_i_generation(d, in->generation);
	arb_set_inode_item_i_transid(d, in->transid);
	arb_set_inode_item_i_size(d, in->size);
	arb_set_inode_item_i_nbytes(d, in->nbytes);
	arb_set_inode_item_i_seq(d, in->seq);
	arb_set_inode_item_i_rdev(d, in->rdev);
	arb_set_inode_item_i_flags(d, in->flags);
	arb_set_inode_item_i_nlink(d, in->nlink);
	arb_set_inode_item_i_uid(d, in->uid);
	arb_set_inode_item_i_gid(d, in->gid);
	arb_set_inode_item_i_mode(d, in->mode);
	arb_set_inode_item_i_atime(d, (uint64_t)in->atime.tv_sec);
	arb_set_inode_item_i_atime_ns(d, (uint32_t)in->atime.tv_nsec);
	arb_set_inode_item_i_mtime(d, (uint64_t)in->mtime.tv_sec);
	arb_set_inode_item_i_mtime_ns(d, (uint32_t)in->mtime.tv_nsec);
	arb_set_inode_item_i_ctime(d, (uint64_t)in->ctime.tv_sec);
	arb_set_inode_item_i_ctime_ns(d, (uint32_t)in->ctime.tv_nsec);
	arb_set_inode_item_i_btime(d, (uint64_t)in->btime.tv_sec);
	arb_set_inode_item_i_btime_ns(d, (uint32_t)in->btime.tv_nsec);
}

static void inode_key(struct arb_key *k, uint64_t ino)
{
	k->objectid = fs_obj(ino);
	k->type = ARB_INODE_ITEM;
	k->offset = 0;
}

int fs_inode_read(struct arb_fs *fs, uint64_t ino, struct arb_inode *in)
{
	struct arb_inode_item d;
	struct arb_key k;
	int ret;

	if (!fs_ino_valid(fs, ino))
		return -ENOENT;
	inode_key(&k, ino);
	ret = arb_lookup_item(fs_root_of(fs, ino), &k, &d, sizeof(d));
	/* after an aborted transaction, its new inodes are gone while the
	 * kernel may still hold them open: an I/O error for those, not "no
	 * such file" for a file the caller has open */
	if (ret == -ENOENT && fs->failed)
		return -EIO;
	if (ret < 0)
		return ret;
	if ((size_t)ret < sizeof(d)) {
		arb_log(ARB_LOG_ERR, "inode %llu: inode item of %d bytes",
			(unsigned long long)ino, ret);
		return -EUCLEAN;
	}
	fs_inode_unpack(in, ino, &d);
	in->nbytes_merge = true;
	in->nbytes_read = in->nbytes;
	in->read_seq = fs->commit_seq;
	return 0;
}

void fs_inode_prefetch(struct arb_fs *fs, uint64_t ino)
{
	struct arb_key k;

	if (!fs_ino_valid(fs, ino))
		return;
	inode_key(&k, ino);
	arb_prefetch_leaf(fs_root_of(fs, ino), &k);
}

int fs_inode_write(struct arb_fs *fs, struct arb_txn *t, struct arb_inode *in)
{
	struct arb_inode_item d;
	struct arb_key k;
	int ret;

	inode_key(&k, in->ino);
	if (in->nbytes_merge && in->read_seq != fs->commit_seq) {
		/* a commit ran since this copy was read: keep its nbytes */
		ret = arb_lookup_item(fs_root_of(fs, in->ino), &k, &d,
				      sizeof(d));
		if (ret < 0)
			return ret;
		if ((size_t)ret < sizeof(d))
			return -EUCLEAN;
		in->nbytes = arb_inode_item_i_nbytes(&d) +
			     (in->nbytes - in->nbytes_read);
	}
	in->transid = t->transid;
	fs_inode_pack(&d, in);
	ret = arb_update_item(t, fs_root_of(fs, in->ino), &k, &d, sizeof(d));
	if (!ret) {
		in->nbytes_read = in->nbytes;
		in->read_seq = fs->commit_seq;
	}
	return ret;
}

int fs_inode_insert(struct arb_fs *fs, struct arb_txn *t, struct arb_inode *in)
{
	struct arb_inode_item d;
	struct arb_key k;

	in->transid = t->transid;
	fs_inode_pack(&d, in);
	inode_key(&k, in->ino);
	return arb_insert_item(t, fs_root_of(fs, in->ino), &k, &d, sizeof(d));
}

int fs_ino_new(struct arb_fs *fs, struct arb_txn *t, struct fs_tree *tr,
	       uint64_t *ino)
{
	/* a number handed out again would make a new file look like the
	 * old one to whatever kept its st_ino (an NFS file handle, a backup
	 * tool); past ARB_INUM_OBJ_MAX an objectid has no inode number */
	(void)fs;
	if (fs_ino_exhausted(tr))
		return -ENOSPC;
	arb_root_note_objectid(t, tr->root, tr->next_ino);
	*ino = fs_ino(tr, tr->next_ino++);
	return 0;
}

bool fs_item_exists(struct arb_root *root, const struct arb_key *key)
{
	uint8_t dummy;
	return arb_lookup_item(root, key, &dummy, 0) >= 0;
}

/* delayed blocks that will take space of their own when written */
static uint64_t imem_dirty_bytes(struct arb_fs *fs, uint64_t ino)
{
	struct arb_imem *im = fs_imem_get(fs, ino, false);
	return im ? (im->nr - im->nr_covered) * (uint64_t)fs->bs : 0;
}

void fs_inode_to_stat(struct arb_fs *fs, const struct arb_inode *in,
		      struct arb_stat *st)
{
	memset(st, 0, sizeof(*st));
	st->ino = in->ino;
	st->generation = in->generation;
	st->mode = in->mode;
	st->nlink = in->nlink;
	st->uid = in->uid;
	st->gid = in->gid;
	st->rdev = in->rdev;
	st->size = in->size;
	/* delayed blocks count as allocated, once: those over an extent
	 * (an overwrite, a write into preallocated space) are in nbytes
	 * already, and their flush swaps that extent's bytes for new ones */
	st->blocks = (in->nbytes + imem_dirty_bytes(fs, in->ino) + 511) / 512;
	st->blksize = fs->bs;
	st->atime = in->atime;
	st->mtime = in->mtime;
	st->ctime = in->ctime;
	st->btime = in->btime;
	st->flags = fs_iflags_to_fl(in->flags);
}

int arb_fs_getattr(struct arb_fs *fs, uint64_t ino, struct arb_stat *st)
{
	struct arb_inode in;
	int ret;

	fs_lock(fs);
	ret = fs_inode_read(fs, ino, &in);
	if (!ret)
		fs_inode_to_stat(fs, &in, st);
	fs_unlock(fs);
	return ret;
}

/* the set-id bits that ARB_SET_KILL_SUIDGID clears from mode */
static uint32_t kill_suidgid_bits(uint32_t mode)
{
	uint32_t bits = 0;

	if (S_ISDIR(mode))
		return 0;
	if (mode & S_ISUID)
		bits |= S_ISUID;
	if ((mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP))
		bits |= S_ISGID;
	return bits;
}

/* the set-id bits that the kill flags of valid clear from mode */
static uint32_t kill_bits(uint32_t mode, unsigned valid)
{
	uint32_t bits = 0;

	if (valid & ARB_SET_KILL_SUIDGID)
		bits |= kill_suidgid_bits(mode);
	if ((valid & ARB_SET_KILL_SGID) && !S_ISDIR(mode))
		bits |= mode & S_ISGID;
	return bits;
}

int arb_fs_setattr(struct arb_fs *fs, uint64_t ino, const struct arb_setattr *sa,
		   unsigned valid, const struct arb_cred *cr,
		   struct arb_stat *st)
{
	struct arb_inode in;
	struct arb_txn *t;
	struct timespec now;
	bool shrink = false;
	void *acl = NULL;
	size_t acl_size = 0;
	int ret;

	fs_lock(fs);
	ret = fs_inode_read(fs, ino, &in);
	if (ret)
		goto out_unlock;
	/* the common case of a kill request: nothing to kill */
	if (valid &&
	    !(valid & ~(unsigned)(ARB_SET_KILL_SUIDGID | ARB_SET_KILL_SGID)) &&
	    !kill_bits(in.mode, valid)) {
		if (st)
			fs_inode_to_stat(fs, &in, st);
		goto out_unlock;
	}
	ret = fs_iflags_may_setattr(&in, valid);
	if (ret)
		goto out_unlock;
	if (valid & ARB_SET_SIZE) {
		if (S_ISDIR(in.mode)) {
			ret = -EISDIR;
			goto out_unlock;
		}
		if (!S_ISREG(in.mode)) {
			ret = -EINVAL;
			goto out_unlock;
		}
		if (sa->size > ARB_MAX_FILE_SIZE) {
			ret = -EFBIG;
			goto out_unlock;
		}
		shrink = sa->size < in.size;
	}
	if (fs->readonly) {
		ret = -EROFS;
		goto out_unlock;
	}
	/* chmod rewrites the access ACL (same size: it fits where it is) */
	if (valid & ARB_SET_MODE) {
		ret = fs_acl_chmod_prepare(fs, &in, sa->mode, &acl, &acl_size);
		if (ret)
			goto out_unlock;
	}
	/* only growing a file takes space for good: chmod, chown, times and
	 * shrinking may use the reserve, so they work on a full filesystem */
	ret = fs_op_begin(fs, &t, ino, 0,
			  (valid & ARB_SET_SIZE) && !shrink && sa->size != in.size
				  ? 0
				  : ARB_OP_RESERVE);
	if (ret)
		goto out_unlock;
	if (valid & ARB_SET_SIZE) {
		/* memory only (delayed blocks): a failure leaves the tree
		 * untouched, so the transaction is just left */
		ret = fs_truncate_prepare(fs, &in, sa->size);
		if (ret) {
			arb_txn_end(t);
			goto out_unlock;
		}
	}
	fs_now(&now);
	if (valid & ARB_SET_SIZE) {
		ret = fs_truncate(fs, t, &in, sa->size);
		if (ret)
			goto out_end;
		in.mtime = now;
	}
	if (valid & ARB_SET_MODE) {
		in.mode = (in.mode & S_IFMT) | (sa->mode & 07777);
		if (acl) {
			ret = fs_xattr_put(fs, t, ino, FS_ACL_ACCESS, acl,
					   acl_size);
			if (ret)
				goto out_end;
		}
	}
	if (valid & (ARB_SET_UID | ARB_SET_GID)) {
		bool changes = ((valid & ARB_SET_UID) && sa->uid != in.uid) ||
			       ((valid & ARB_SET_GID) && sa->gid != in.gid);
		if (valid & ARB_SET_UID)
			in.uid = sa->uid;
		if (valid & ARB_SET_GID)
			in.gid = sa->gid;
		/* as the kernel does: a chown of a non-directory by an
		 * unprivileged caller drops setuid, and setgid if group
		 * execute is set (otherwise it marks mandatory locking) */
		if (changes && cr && cr->uid != 0 && !(valid & ARB_SET_MODE))
			in.mode &= ~kill_suidgid_bits(in.mode);
	}
	in.mode &= ~kill_bits(in.mode, valid);
	if (valid & ARB_SET_ATIME_NOW)
		in.atime = now;
	else if (valid & ARB_SET_ATIME)
		in.atime = sa->atime;
	if (valid & ARB_SET_MTIME_NOW)
		in.mtime = now;
	else if (valid & ARB_SET_MTIME)
		in.mtime = sa->mtime;
	if (valid & ARB_SET_CTIME)
		in.ctime = sa->ctime;
	else
		in.ctime = now;
	ret = fs_inode_write(fs, t, &in);
out_end:
	ret = fs_op_end(fs, t, ret);
	if (!ret && st)
		fs_inode_to_stat(fs, &in, st);
out_unlock:
	fs_unlock(fs);
	free(acl);
	return ret;
}

/*
 * Delete every item of ino, leaf by leaf: find the first remaining item
 * with a read-only iterator, then delete the run of ino's items in that
 * leaf through a cow path.  Data extents lose their reference.
 */
static int inode_delete_items(struct arb_fs *fs, struct arb_txn *t,
			      uint64_t ino)
{
	struct arb_key key, k;
	struct arb_iter it;
	struct arb_path path;
	int ret, slot, nr, n;
	struct arb_node *leaf;
	struct arb_root *root = fs_root_of(fs, ino);
	uint64_t obj = fs_obj(ino);

	for (;;) {
		key.objectid = obj;
		key.type = 0;
		key.offset = 0;
		arb_iter_init(&it, root);
		ret = arb_iter_seek(&it, &key);
		if (ret == 0)
			arb_iter_key(&it, &k);
		arb_iter_release(&it);
		if (ret < 0)
			return ret;
		if (ret == 1 || k.objectid != obj)
			return 0;

		arb_path_init(&path);
		ret = arb_search_slot(t, root, &k, &path, -1, 1);
		if (ret) {
			arb_path_release(fs->vol, &path);
			return ret < 0 ? ret : -EUCLEAN;
		}
		leaf = path.nodes[0];
		slot = path.slots[0];
		n = (int)arb_nritems(leaf);
		for (nr = 0; slot + nr < n; nr++) {
			struct arb_key ik;
			arb_node_key(leaf, slot + nr, &ik);
			if (ik.objectid != obj)
				break;
			if (ik.type == ARB_EXTENT_DATA &&
			    arb_item_size(leaf, slot + nr) >=
				    sizeof(struct arb_file_extent)) {
				const struct arb_file_extent *fe =
					arb_item_ptr(leaf, slot + nr);
				uint8_t type = arb_file_extent_f_type(fe);
				if (type == ARB_FILE_EXTENT_REG ||
				    type == ARB_FILE_EXTENT_PREALLOC) {
					ret = arb_ref_data(
						t, arb_file_extent_f_disk_bytenr(fe),
						arb_file_extent_f_disk_num_bytes(fe),
						root->id, obj,
						ik.offset -
							arb_file_extent_f_offset(fe),
						-1);
					if (ret) {
						arb_path_release(fs->vol, &path);
						return ret;
					}
				}
			}
		}
		ret = arb_del_items(t, root, &path, slot, nr);
		arb_path_release(fs->vol, &path);
		if (ret)
			return ret;
	}
}

int fs_inode_free(struct arb_fs *fs, struct arb_txn *t, uint64_t ino)
{
	struct arb_imem *im;
	struct arb_key k;
	int ret;

	im = fs_imem_get(fs, ino, false);
	if (im) {
		fs_imem_drop_blocks(fs, im, 0);
		fs_imem_put_if_idle(fs, im);
	}
	ret = inode_delete_items(fs, t, ino);
	if (ret)
		return ret;
	k.objectid = ARB_ORPHAN_OBJECTID;
	k.type = ARB_ORPHAN_ITEM;
	k.offset = fs_obj(ino);
	if (fs_item_exists(fs_root_of(fs, ino), &k))
		ret = arb_del_item(t, fs_root_of(fs, ino), &k);
	return ret;
}

int fs_inode_unlinked(struct arb_fs *fs, struct arb_txn *t,
		      struct arb_inode *in)
{
	struct arb_key k;

	if (fs_inode_pinned(fs, in->ino)) {
		/* keep it until the last release; the orphan item makes the
		 * next mount free it after a crash */
		struct arb_root *root = fs_root_of(fs, in->ino);

		k.objectid = ARB_ORPHAN_OBJECTID;
		k.type = ARB_ORPHAN_ITEM;
		k.offset = fs_obj(in->ino);
		if (fs_item_exists(root, &k))
			return fs_inode_write(fs, t, in);
		uint8_t dummy = 0;
		int ret = arb_insert_item(t, root, &k, &dummy, 0);
		if (ret)
			return ret;
		return fs_inode_write(fs, t, in);
	}
	return fs_inode_free(fs, t, in->ino);
}
