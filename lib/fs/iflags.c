/* SPDX-License-Identifier: MIT */
/*
 * iflags.c - file attributes (chattr/lsattr): the IMMUTABLE, APPEND,
 * NODUMP, NOATIME, COMPRESS and NOCOMPRESS bits of i_flags (format.h), their conversion to the
 * FS_*_FL values of FS_IOC_GETFLAGS, and what they forbid.
 *
 * The checks mirror the kernel's for a local filesystem (may_delete,
 * may_create, vfs_link, notify_change, xattr_permission, vfs_fallocate,
 * may_open), which a FUSE mount never makes: the kernel does not know our
 * flags (FUSE has no way to set S_IMMUTABLE or S_APPEND on its inodes).
 * So they apply to every caller, root included.  Writes are the caller's
 * business (arb_fs_may_open; see arbor.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>

#include "fs_int.h"

static const struct {
	uint64_t iflag;
	uint32_t fl;
} iflag_map[] = {
	{ ARB_INODE_IMMUTABLE, ARB_FL_IMMUTABLE },
	{ ARB_INODE_APPEND, ARB_FL_APPEND },
	{ ARB_INODE_NODUMP, ARB_FL_NODUMP },
	{ ARB_INODE_NOATIME, ARB_FL_NOATIME },
	{ ARB_INODE_COMPRESS, ARB_FL_COMPR },
	{ ARB_INODE_NOCOMPRESS, ARB_FL_NOCOMP },
};
#define IFLAG_MAP_NR (sizeof(iflag_map) / sizeof(iflag_map[0]))
/* the i_flags bits that arb_fs_set_flags replaces; others are kept */
#define ARB_INODE_SETTABLE                                                     \
	(ARB_INODE_IMMUTABLE | ARB_INODE_APPEND | ARB_INODE_NODUMP |           \
	 ARB_INODE_NOATIME | ARB_INODE_COMPRESS | ARB_INODE_NOCOMPRESS)

uint32_t fs_iflags_to_fl(uint64_t iflags)
{
	uint32_t fl = 0;

	for (size_t i = 0; i < IFLAG_MAP_NR; i++)
		if (iflags & iflag_map[i].iflag)
			fl |= iflag_map[i].fl;
	return fl;
}

static uint64_t fl_to_iflags(uint32_t fl)
{
	uint64_t iflags = 0;

	for (size_t i = 0; i < IFLAG_MAP_NR; i++)
		if (fl & iflag_map[i].fl)
			iflags |= iflag_map[i].iflag;
	return iflags;
}

/* ---- what they forbid --------------------------------------------------- */

int fs_iflags_may_create(const struct arb_inode *dir)
{
	return dir->flags & ARB_INODE_IMMUTABLE ? -EPERM : 0;
}

/* as may_delete(): an append-only directory keeps its entries */
int fs_iflags_may_delete(const struct arb_inode *dir,
			 const struct arb_inode *victim)
{
	if ((dir->flags | victim->flags) & ARB_INODE_PROTECTED)
		return -EPERM;
	return 0;
}

int fs_iflags_may_link(const struct arb_inode *in, const struct arb_inode *dir)
{
	if (in->flags & ARB_INODE_PROTECTED)
		return -EPERM;
	return fs_iflags_may_create(dir);
}

/* as vfs_rename(): the source name is deleted, the new one is created
 * or (when it exists) deleted too; RENAME_EXCHANGE is covered as well */
int fs_iflags_may_rename(const struct arb_inode *odir,
			 const struct arb_inode *src,
			 const struct arb_inode *ndir,
			 const struct arb_inode *dst)
{
	int ret = fs_iflags_may_delete(odir, src);

	if (ret)
		return ret;
	return dst ? fs_iflags_may_delete(ndir, dst) : fs_iflags_may_create(ndir);
}

/*
 * As notify_change(): an immutable inode changes in nothing; an
 * append-only one keeps mode, owner and size.  Explicit times are refused
 * for append-only files only when they carry an atime: a FUSE kernel with
 * the writeback cache sends the mtime and ctime of appended data as
 * explicit times, which must not fail; utimes(2) with times sets both.
 */
int fs_iflags_may_setattr(const struct arb_inode *in, unsigned valid)
{
	if (in->flags & ARB_INODE_IMMUTABLE)
		return -EPERM;
	if ((in->flags & ARB_INODE_APPEND) &&
	    (valid & (ARB_SET_MODE | ARB_SET_UID | ARB_SET_GID | ARB_SET_SIZE |
		      ARB_SET_ATIME)))
		return -EPERM;
	return 0;
}

int fs_iflags_may_setxattr(const struct arb_inode *in)
{
	return in->flags & ARB_INODE_PROTECTED ? -EPERM : 0;
}

/* as vfs_fallocate(): an append-only file may only get space reserved */
int fs_iflags_may_fallocate(const struct arb_inode *in, int mode)
{
	if (in->flags & ARB_INODE_IMMUTABLE)
		return -EPERM;
	if ((in->flags & ARB_INODE_APPEND) && (mode & ~FALLOC_FL_KEEP_SIZE))
		return -EPERM;
	return 0;
}

/* ---- the operations ----------------------------------------------------- */

int arb_fs_get_flags(struct arb_fs *fs, uint64_t ino, uint32_t *flags)
{
	struct arb_inode in;
	int ret;

	fs_lock(fs);
	ret = fs_inode_read(fs, ino, &in);
	if (!ret)
		*flags = fs_iflags_to_fl(in.flags);
	fs_unlock(fs);
	return ret;
}

int arb_fs_set_flags(struct arb_fs *fs, uint64_t ino, uint32_t flags)
{
	struct arb_inode in;
	struct arb_txn *t;
	int ret;

	if (flags & ~ARB_FL_SUPPORTED)
		return -EOPNOTSUPP;
	if ((flags & ARB_FL_COMPR) && (flags & ARB_FL_NOCOMP))
		return -EINVAL;
	fs_lock(fs);
	ret = fs_inode_read(fs, ino, &in);
	if (ret)
		goto out;
	if (fs->readonly) {
		ret = -EROFS;
		goto out;
	}
	/* as chmod: the reserve, so that a full filesystem can still be
	 * cleaned up after chattr -i; taking IMMUTABLE or APPEND away may
	 * use all of it, as deleting a subvolume may (a file left
	 * protected on a full disk could not be deleted at all) */
	ret = fs_op_begin(fs, &t, ino, 0,
			  (in.flags & ARB_INODE_PROTECTED) &&
					  !(fl_to_iflags(flags) &
					    ARB_INODE_PROTECTED)
				  ? ARB_OP_LAST
				  : ARB_OP_RESERVE);
	if (ret)
		goto out;
	in.flags = (in.flags & ~ARB_INODE_SETTABLE) | fl_to_iflags(flags);
	/* in this transaction: the image never has a protected inode
	 * without the bit that makes the daemon watch opens */
	if (in.flags & ARB_INODE_PROTECTED)
		arb_vol_set_features(fs->vol, ARB_COMPAT_PROTECTED_INODES, 0);
	fs_now(&in.ctime);
	ret = fs_op_end(fs, t, fs_inode_write(fs, t, &in));
out:
	fs_unlock(fs);
	return ret;
}

int arb_fs_may_open(struct arb_fs *fs, uint64_t ino, int oflags)
{
	struct arb_inode in;
	bool write = (oflags & O_ACCMODE) != O_RDONLY;
	int ret;

	fs_lock(fs);
	ret = fs_inode_read(fs, ino, &in);
	fs_unlock(fs);
	if (ret)
		return ret;
	/* as may_open() (inode_permission(MAY_WRITE) for immutable) */
	if (fs_tree_of(fs, ino)->rdonly && (write || (oflags & O_TRUNC)))
		return -EROFS;
	if ((in.flags & ARB_INODE_IMMUTABLE) && (write || (oflags & O_TRUNC)))
		return -EPERM;
	if ((in.flags & ARB_INODE_APPEND) &&
	    ((write && !(oflags & O_APPEND)) || (oflags & O_TRUNC)))
		return -EPERM;
	return 0;
}

bool arb_fs_has_protected_inodes(struct arb_fs *fs)
{
	bool ret;

	fs_lock(fs);
	/* read-only subvolumes count: their write-opens fail too */
	ret = (arb_super_s_compat(&fs->vol->super) &
	       ARB_COMPAT_PROTECTED_INODES) ||
	      (arb_super_s_incompat(&fs->vol->super) & ARB_INCOMPAT_SUBVOL);
	fs_unlock(fs);
	return ret;
}
