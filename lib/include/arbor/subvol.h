/* SPDX-License-Identifier: MIT */
/*
 * arbor/subvol.h - subvolumes and snapshots of an open filesystem.
 *
 * A subvolume is a tree of its own that appears as a directory; a
 * snapshot is a subvolume that starts as an O(1) copy of another one
 * (copy-on-write: the two share every block until one of them changes
 * it).  The filesystem tree (id ARB_INUM_FS_TREE, 5) is a subvolume too:
 * the one the filesystem starts with.  Inode numbers of a subvolume's
 * files carry its tree's slot (arbor.h, arb_inum), so they are unique
 * across the mount; its root directory is arb_inum(id, ARB_ROOT_INO).
 *
 * Conventions as arbor.h: 0 or a negative errno.  Besides the usual:
 *   -EXDEV   link or rename between subvolumes
 *   -EROFS   a change inside a read-only subvolume
 *   -ENOTEMPTY / -EPERM  see each call
 * Permission checks of the caller (who may create or delete where) are
 * the caller's business, as for every other call of this library.
 */
#ifndef ARBOR_SUBVOL_H
#define ARBOR_SUBVOL_H

#include "arbor/arbor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* arb_subvol_snapshot flags, arb_subvol_info.flags */
#define ARB_SUBVOL_RDONLY (1u << 0)
/* info only: deleted, its space still being given back by the cleaner */
#define ARB_SUBVOL_DELETED (1u << 1)
/* a receive cut short, kept for `arbor send --resume` (with DELETED: it
 * is unlinked; the cleaner leaves it alone); rtransid: the objectid the
 * rest of the stream starts at, ARB_RESUME_ALL_INODES when only names,
 * deletions and times remain */
#define ARB_SUBVOL_PARTIAL (1u << 2)
#define ARB_RESUME_ALL_INODES (1ULL << 40)

struct arb_subvol_info {
	uint64_t id;          /* tree id: 5, or from 256 */
	uint64_t ino;         /* its root directory: arb_inum(id, 256) */
	/* where it is linked: the parent subvolume's id and the inode number
	 * of the directory there (0 for tree 5 and for deleted ones) */
	uint64_t parent_id, dir_ino;
	char name[ARB_NAME_MAX + 1];
	uint8_t uuid[16];
	uint8_t parent_uuid[16];   /* a snapshot: its source's uuid; else 0 */
	uint8_t received_uuid[16]; /* made by a receive: the sender's; else 0 */
	uint64_t source_id;        /* a snapshot: the tree it was taken of */
	uint64_t otransid;         /* generation that created it */
	uint64_t gen;              /* generation of its last change */
	uint64_t stransid, rtransid; /* receive: sent and received generations */
	struct timespec otime;     /* creation time */
	struct timespec ctime;     /* last change of its flags */
	uint32_t flags;            /* ARB_SUBVOL_RDONLY | ARB_SUBVOL_DELETED */
	/* deleted, being cleaned: tree nodes visited so far (freed, or
	 * shared and released) and of those freed, and an estimate of the
	 * part of the tree done, in thousandths (all 0 before the first
	 * committed batch) */
	uint64_t clean_nodes, clean_freed;
	uint32_t clean_permille;
	/* ARB_SUBVOL_PARTIAL: the offset in inode rtransid where its data
	 * resumes */
	uint64_t resume_off;
};

/*
 * A new empty subvolume name in directory dir (owned by cr, mode 0755
 * masked as a mkdir's would be by dir's default ACL; set-gid inherited).
 * st: its root directory.  -EEXIST, -ENOSPC, -EROFS (dir's subvolume is
 * read-only), -EMLINK as mkdir.
 */
int arb_subvol_create(struct arb_fs *fs, uint64_t dir, const char *name,
		      uint32_t mode, const struct arb_cred *cr,
		      struct arb_stat *st);

/*
 * A snapshot of the subvolume whose root directory is src, linked as name
 * in dir; flags ARB_SUBVOL_RDONLY makes it read-only.  Everything written
 * to the library before the call is in the snapshot (delayed data is
 * flushed into the source first); the snapshot is committed when the call
 * returns.  -EINVAL: src is not the root directory of a subvolume.
 */
int arb_subvol_snapshot(struct arb_fs *fs, uint64_t src, uint64_t dir,
			const char *name, unsigned flags,
			const struct arb_cred *cr, struct arb_stat *st);

/*
 * Delete the subvolume linked as name in dir: the link goes at once
 * (committed on return), the tree's space comes back in the background
 * (arb_subvol_wait waits for it).  Files of it still open keep working
 * until released.  -EINVAL: name is not a subvolume; -EBUSY: it is the
 * filesystem tree, the subvolume this mount shows as its root, or the
 * default subvolume (arb_subvol_set_default another one first);
 * -ENOTEMPTY: it holds a subvolume link.
 */
int arb_subvol_delete(struct arb_fs *fs, uint64_t dir, const char *name);

/* The subvolume holding inode ino (any of its inodes). */
int arb_subvol_info(struct arb_fs *fs, uint64_t ino,
		    struct arb_subvol_info *info);
/* The subvolume with tree id (deleted ones too, while being cleaned). */
int arb_subvol_info_id(struct arb_fs *fs, uint64_t id,
		       struct arb_subvol_info *info);

/*
 * Every subvolume, tree 5 first then by id, the deleted ones being
 * cleaned too (flags ARB_SUBVOL_DELETED).  fn returns non-zero to stop
 * (returned).  Called without the library's lock held.
 */
typedef int (*arb_subvol_fn)(void *ctx, const struct arb_subvol_info *info);
int arb_subvol_list(struct arb_fs *fs, arb_subvol_fn fn, void *ctx);

/* Path of subvolume id's root from the filesystem's root directory (tree
 * 5's), without a leading slash ("" for tree 5).  -ERANGE if it does not
 * fit size bytes; -ENOENT for a deleted one. */
int arb_subvol_path(struct arb_fs *fs, uint64_t id, char *buf, size_t size);

/*
 * Make the subvolume holding ino read-only or writable.  Making a received
 * snapshot writable clears its received UUID (*cleared_received says so):
 * an incremental receive must not trust it any more.  -EINVAL for tree 5
 * made read-only.
 */
int arb_subvol_set_rdonly(struct arb_fs *fs, uint64_t ino, bool rdonly,
			  bool *cleared_received);

/*
 * The default subvolume: the one a mount shows as its root when it is
 * not told which (arborfs without -o subvol= or subvolid=).  Tree 5
 * unless set.  set_default: id is ARB_INUM_FS_TREE (5) or a subvolume
 * that exists and is not being deleted (-ENOENT otherwise); committed
 * when the call returns.  -EROFS on a read-only filesystem.  Setting
 * tree 5 on an image that never had a subvolume changes nothing.
 */
int arb_subvol_set_default(struct arb_fs *fs, uint64_t id);
int arb_subvol_get_default(struct arb_fs *fs, uint64_t *id);

/*
 * Bytes of the subvolume holding ino that no other subvolume shares
 * (what deleting it would give back) and bytes it shares with others
 * (snapshots, their sources), data and tree nodes apart, counted from the
 * extent reference counts: exact, no quota to enable.  Commits pending
 * changes first; costs a walk of the subvolume's tree.
 */
struct arb_subvol_usage {
	uint64_t exclusive, shared;           /* data extents, whole */
	uint64_t meta_exclusive, meta_shared; /* tree nodes, all copies */
};
int arb_subvol_usage(struct arb_fs *fs, uint64_t ino,
		     struct arb_subvol_usage *u);

/*
 * Wait until the deleted subvolume id (0: every deleted one) has been
 * cleaned and that is committed; its space is free then (already cleaned
 * counts as done: 0).  With the library's threads (commit_interval > 0)
 * the cleaner thread cleans and this waits, also for files of it still
 * open to be released.  Without them this cleans, and a subvolume whose
 * files are still open gives -EBUSY (the caller holds them; a later call
 * cleans it once they are released).  -EROFS: a read-only filesystem
 * cannot clean; -EIO after a failed commit.
 */
int arb_subvol_wait(struct arb_fs *fs, uint64_t id);

#ifdef __cplusplus
}
#endif

#endif
