/* SPDX-License-Identifier: MIT */
/*
 * arbor/arbor.h - the public API of libarbor: a POSIX filesystem in an image.
 *
 * Conventions: functions return 0 (or a byte count) on success and a
 * negative errno on failure.  Inode numbers are the ones st_ino shows; the
 * root directory of the filesystem is ARB_ROOT_INO.  Every call is
 * thread-safe.
 */
#ifndef ARBOR_ARBOR_H
#define ARBOR_ARBOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <time.h>

#include "arbor/dev.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ARB_ROOT_INO 256ULL
#define ARB_NAME_MAX 255
#define ARB_XATTR_NAME_MAX 255
#define ARB_XATTR_SIZE_MAX 16000 /* must also fit one tree node */
/* largest file size (EFBIG past it) */
#define ARB_MAX_FILE_SIZE (1ULL << 50)

struct arb_fs;

struct arb_fs_opts {
	bool readonly;
	/* node cache bound in bytes, 0 = 64 MiB */
	size_t cache_bytes;
	/* files up to this size are stored inline in the tree; default 2048,
	 * at most about nodesize/2 */
	uint32_t max_inline;
	/* seconds between automatic commits, 0 = only on sync/fsync/close */
	unsigned commit_interval;
	/* do not update atime at all (default: relatime) */
	bool noatime;
	/*
	 * arb_fs_write does not touch mtime and ctime (it still updates the
	 * size); the caller sets them through arb_fs_setattr.  For a FUSE
	 * daemon with the writeback cache, where the kernel owns the times
	 * of written files and WRITE requests may arrive after the SETATTR
	 * that carries them.  Default false: a write sets both to now.
	 */
	bool write_keeps_times;
};
void arb_fs_opts_default(struct arb_fs_opts *o);

struct arb_mkfs_opts {
	uint64_t size;        /* bytes; 0 = size of the existing file/device */
	uint32_t nodesize;    /* 0 = 16 KiB */
	/* copies of every tree node: 1 single, 2 dup; 0 = default (dup) */
	unsigned meta_copies;
	const char *label;    /* NULL = none */
	uint8_t uuid[16];     /* all zero = random */
	/* owner and mode of the root directory */
	uint32_t root_uid, root_gid, root_mode;
};
void arb_mkfs_opts_default(struct arb_mkfs_opts *o);
/* Format dev as an empty arborfs (temporary magic first, real magic last). */
int arb_mkfs(struct arb_dev *dev, const struct arb_mkfs_opts *o);

/*
 * Open the filesystem on dev.  On success the fs takes ownership of dev and
 * destroys it in arb_fs_close; on failure dev is still the caller's (to
 * destroy or to retry with).  Errors: -EINVAL not an arborfs image (or an
 * mkfs that never finished, or an image too small), -EUCLEAN bad superblock
 * (checksum, fields, truncated image) or root, -EPROTONOSUPPORT newer
 * format version or unknown incompatible feature, -EBUSY image in use.
 * *why (if not NULL) receives a static message naming the problem.
 */
int arb_fs_open(struct arb_dev *dev, const struct arb_fs_opts *o,
		struct arb_fs **out, const char **why);
/* Commit everything and close. */
int arb_fs_close(struct arb_fs *fs);

/* Attributes, as stat(2) shows them. */
struct arb_stat {
	uint64_t ino;
	uint64_t generation; /* inode generation (for FUSE/NFS handles) */
	uint32_t mode, nlink, uid, gid;
	uint64_t rdev;
	uint64_t size;
	uint64_t blocks; /* 512-byte units */
	uint32_t blksize;
	struct timespec atime, mtime, ctime, btime;
};

/* setattr: which fields of struct arb_setattr to apply */
enum arb_setattr_valid {
	ARB_SET_MODE = 1 << 0,
	ARB_SET_UID = 1 << 1,
	ARB_SET_GID = 1 << 2,
	ARB_SET_SIZE = 1 << 3,
	ARB_SET_ATIME = 1 << 4,
	ARB_SET_MTIME = 1 << 5,
	ARB_SET_ATIME_NOW = 1 << 6,
	ARB_SET_MTIME_NOW = 1 << 7,
	ARB_SET_CTIME = 1 << 8,
};
struct arb_setattr {
	uint32_t mode, uid, gid;
	uint64_t size;
	struct timespec atime, mtime, ctime;
};

/* Credentials of the caller, for ownership of new inodes and setgid rules. */
struct arb_cred {
	uint32_t uid, gid;
};

int arb_fs_lookup(struct arb_fs *fs, uint64_t dir, const char *name,
		  struct arb_stat *st);
int arb_fs_getattr(struct arb_fs *fs, uint64_t ino, struct arb_stat *st);
int arb_fs_setattr(struct arb_fs *fs, uint64_t ino, const struct arb_setattr *sa,
		   unsigned valid, const struct arb_cred *cr,
		   struct arb_stat *st);
/*
 * Creation.  A new inode (not a symlink) in a directory with a default
 * POSIX ACL inherits it as posix_acl_create() does: the mode is masked by
 * the ACL, the access ACL stored unless equivalent to the mode, and a new
 * directory also gets it as its default ACL.  The umask is the caller's to
 * apply, and only when the directory has no default ACL (a FUSE daemon
 * with FUSE_CAP_POSIX_ACL + FUSE_CAP_DONT_MASK gets the mode unmasked).
 */
/* Regular files, FIFOs, sockets, devices (mode carries the type). */
int arb_fs_mknod(struct arb_fs *fs, uint64_t dir, const char *name,
		 uint32_t mode, uint64_t rdev, const struct arb_cred *cr,
		 struct arb_stat *st);
int arb_fs_mkdir(struct arb_fs *fs, uint64_t dir, const char *name,
		 uint32_t mode, const struct arb_cred *cr, struct arb_stat *st);
int arb_fs_symlink(struct arb_fs *fs, uint64_t dir, const char *name,
		   const char *target, const struct arb_cred *cr,
		   struct arb_stat *st);
/* Copies the target NUL-terminated; returns its length or -ERANGE. */
int arb_fs_readlink(struct arb_fs *fs, uint64_t ino, char *buf, size_t size);
int arb_fs_link(struct arb_fs *fs, uint64_t ino, uint64_t newdir,
		const char *newname, struct arb_stat *st);
int arb_fs_unlink(struct arb_fs *fs, uint64_t dir, const char *name);
int arb_fs_rmdir(struct arb_fs *fs, uint64_t dir, const char *name);
/* flags: 0, RENAME_NOREPLACE or RENAME_EXCHANGE (from <linux/fs.h>) */
int arb_fs_rename(struct arb_fs *fs, uint64_t dir, const char *name,
		  uint64_t newdir, const char *newname, unsigned flags);

/*
 * Open files: an unlinked inode lives until its last open reference is
 * released (an ORPHAN_ITEM makes sure a crash frees it at the next mount).
 */
int arb_fs_open_inode(struct arb_fs *fs, uint64_t ino);
int arb_fs_release_inode(struct arb_fs *fs, uint64_t ino);

ssize_t arb_fs_read(struct arb_fs *fs, uint64_t ino, void *buf, size_t size,
		    uint64_t off);
ssize_t arb_fs_write(struct arb_fs *fs, uint64_t ino, const void *buf,
		     size_t size, uint64_t off);
/* mode: 0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE|KEEP_SIZE,
 * FALLOC_FL_ZERO_RANGE (from <linux/falloc.h>) */
int arb_fs_fallocate(struct arb_fs *fs, uint64_t ino, int mode, uint64_t off,
		     uint64_t len);
/* SEEK_DATA / SEEK_HOLE; -ENXIO past the end */
int64_t arb_fs_lseek(struct arb_fs *fs, uint64_t ino, uint64_t off,
		     int whence);
/* data (and metadata unless datasync) of ino durable on return */
int arb_fs_fsync(struct arb_fs *fs, uint64_t ino, bool datasync);
/* everything durable on return (commit) */
int arb_fs_sync(struct arb_fs *fs);

/*
 * Directory reading in DIR_INDEX order.  off 0 starts at the beginning
 * (".", ".." first); each entry passes the offset of the entry after it.
 * fill returns nonzero to stop (buffer full); with plus, st is filled
 * (a lookup reference is then taken by the caller's protocol).
 */
typedef int (*arb_filldir_t)(void *ctx, const char *name,
			     const struct arb_stat *st, uint64_t next_off);
int arb_fs_readdir(struct arb_fs *fs, uint64_t dir, uint64_t off, bool plus,
		   arb_filldir_t fill, void *ctx);

/*
 * flags: 0, XATTR_CREATE, XATTR_REPLACE.
 * POSIX ACLs (system.posix_acl_access / _default, ignoring flags, as the
 * kernel does): the value is validated (-EINVAL if malformed; -EOPNOTSUPP
 * on a symlink; a default ACL on a non-directory is -EACCES).  An access
 * ACL sets the mode's permission bits (group bits from its mask) and is
 * not stored when the mode says it all (only owner, group, other entries);
 * an empty ACL (header only) removes the stored one.  chmod rewrites a
 * stored access ACL; new inodes inherit their directory's default ACL (see
 * arb_fs_mknod).  Clearing setgid for an unprivileged caller outside the
 * file's group is the caller's business (no credentials here).
 */
int arb_fs_setxattr(struct arb_fs *fs, uint64_t ino, const char *name,
		    const void *value, size_t size, int flags);
/* size 0 asks for the length; -ERANGE if too small; -ENODATA if absent */
ssize_t arb_fs_getxattr(struct arb_fs *fs, uint64_t ino, const char *name,
			void *value, size_t size);
ssize_t arb_fs_listxattr(struct arb_fs *fs, uint64_t ino, char *list,
			 size_t size);
int arb_fs_removexattr(struct arb_fs *fs, uint64_t ino, const char *name);

int arb_fs_statfs(struct arb_fs *fs, struct statvfs *sv);

/* Statistics since open. */
struct arb_fs_stats {
	uint64_t generation, commits;
	uint64_t cache_hits, cache_misses, cache_bytes;
	uint64_t bytes_written[4]; /* by enum arb_io_kind */
	uint64_t bytes_read[4];
	uint64_t user_bytes_written;
	uint64_t total_bytes, free_bytes;
	/* copies of every tree node (1 single, 2 dup) */
	unsigned meta_copies;
	/* node reads whose first copy was bad and the second answered (the
	 * first copy rewritten unless read-only); node reads no copy could
	 * answer */
	uint64_t nodes_healed, nodes_unrecoverable;
};
int arb_fs_get_stats(struct arb_fs *fs, struct arb_fs_stats *s);

/* Consistency check of the whole image (fsck's engine). 0 clean,
 * -EUCLEAN problems (printed to out when not NULL). */
int arb_fs_check(struct arb_fs *fs, FILE *out);

#ifdef __cplusplus
}
#endif
#endif
