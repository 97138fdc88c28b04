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
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <time.h>

#include "arbor/dev.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ARB_ROOT_INO 256ULL

/*
 * Inode numbers across trees.  A mount has one st_dev, so st_ino alone
 * must tell apart the inodes of its trees (the filesystem tree and, with
 * subvolumes, theirs): st_ino = slot << ARB_INUM_SHIFT | objectid, where
 * objectid is the inode's number inside its tree (the key objectid of its
 * items, at most ARB_INUM_OBJ_MAX) and the slot names the tree: 0 for
 * the filesystem tree (id 5, so that its inodes keep the numbers they
 * had before subvolumes existed), id - 255 for a subvolume tree (ids from
 * ARB_INUM_FIRST_SUBVOL).  A pure function of (tree, objectid): the same
 * inode has the same number across remounts and daemon restarts, which
 * NFS export handles depend on.  Up to 2^24 - 1 subvolume trees and 2^40
 * inode numbers per tree.  Inode numbers passed to and returned by this
 * API are these; ARB_ROOT_INO is the filesystem tree's root directory.
 */
#define ARB_INUM_SHIFT 40
#define ARB_INUM_OBJ_MAX ((1ULL << ARB_INUM_SHIFT) - 1)
#define ARB_INUM_FS_TREE 5ULL
#define ARB_INUM_FIRST_SUBVOL 256ULL
#define ARB_INUM_SLOT_MAX ((1ULL << (64 - ARB_INUM_SHIFT)) - 1)
/* slot of tree id, or 0 with *ok false for an id that has none */
static inline uint64_t arb_inum_slot(uint64_t tree, bool *ok)
{
	*ok = tree == ARB_INUM_FS_TREE ||
	      (tree >= ARB_INUM_FIRST_SUBVOL &&
	       tree - (ARB_INUM_FIRST_SUBVOL - 1) <= ARB_INUM_SLOT_MAX);
	if (!*ok || tree == ARB_INUM_FS_TREE)
		return 0;
	return tree - (ARB_INUM_FIRST_SUBVOL - 1);
}
/* st_ino of objectid obj in tree (a tree with a slot, obj in range) */
static inline uint64_t arb_inum(uint64_t tree, uint64_t obj)
{
	bool ok;
	uint64_t slot = arb_inum_slot(tree, &ok);

	return slot << ARB_INUM_SHIFT | (obj & ARB_INUM_OBJ_MAX);
}
/* the tree id and the objectid an st_ino names */
static inline uint64_t arb_inum_tree(uint64_t ino)
{
	uint64_t slot = ino >> ARB_INUM_SHIFT;

	return slot ? slot + (ARB_INUM_FIRST_SUBVOL - 1) : ARB_INUM_FS_TREE;
}
static inline uint64_t arb_inum_obj(uint64_t ino)
{
	return ino & ARB_INUM_OBJ_MAX;
}
#define ARB_NAME_MAX 255
#define ARB_XATTR_NAME_MAX 255
/* as Linux's XATTR_SIZE_MAX; values past 16,000 bytes (or past what fits
 * a tree node) are stored out of line, in pieces (format.h) */
#define ARB_XATTR_SIZE_MAX 65536
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
	/*
	 * With commit_interval: also commit once nothing has changed for
	 * this many milliseconds (0 = only on the interval).  A FUSE mount
	 * gets no request for sync(1) or syncfs(2): the kernel writes the
	 * dirty pages back and returns, so this bounds how long after a
	 * sync (or any burst of changes) they stay uncommitted.
	 */
	unsigned idle_commit_ms;
	/* after each commit of the commit thread, give the space commits
	 * freed back to the host (punch holes in the image: -o
	 * discard=async) */
	bool discard;
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
	/*
	 * When an operation would fail with ENOSPC and the image is smaller
	 * than this many bytes, grow the image file (by an eighth, at least
	 * 64 MiB, space reserved on the host with fallocate) instead.
	 * 0 = never grow.
	 */
	uint64_t autogrow_max;
	/* do not free orphan inodes at a read-write open (fsck repair: its
	 * changes must all go into one transaction) */
	bool keep_orphans;
	/*
	 * Checks (arb_fs_check_records, arb_fs_repair): bytes the reference
	 * tables may take; when the image needs more, the disk address
	 * space is checked in parts, each re-walking the trees (see
	 * docs/design/check.md, "fsck in bounded memory").  0 = no bound.
	 */
	uint64_t check_memory;
	/*
	 * Checks: called now and then with the phase ("extents, part 1/3"),
	 * how far it is (done of total, in the phase's own units; done can
	 * pass total on a damaged image) and the nodes, items and sectors
	 * the phase has checked.  NULL = none.
	 */
	void (*check_progress)(void *arg, const char *phase, uint64_t done,
			       uint64_t total, uint64_t checked);
	void *check_progress_arg;
	/*
	 * Back in time (docs/design/space.md, "History and grace"): every
	 * commit lists the recent generations in the superblock, and the
	 * blocks later commits free are kept from reuse while a listed
	 * generation needs them, unless an allocation needs them first.
	 * Listed: the last history_commits commits and those younger than
	 * history_secs seconds (at most ARB_HISTORY_MAX, spread over that
	 * window).  Both 0: no history.  Default 8 commits, 0 seconds
	 * (docs/design/space.md says what seconds cost under fsyncs).
	 */
	unsigned history_secs, history_commits;
	/*
	 * Open generation `generation` as it was committed, read-only (needs
	 * readonly): it must be listed in the history, and every tree node it
	 * references is read and verified at open (-ESTALE when one is not
	 * intact: its block was reused; -ENOENT when it is not listed).
	 * 0: the newest.
	 */
	uint64_t generation;
	/*
	 * The cleaner of deleted subvolumes drops at most this many tree
	 * nodes (and at most 2 ms) at a time under the lock, then lets the
	 * operations waiting for it run.  0 = 1024.
	 */
	uint32_t clean_batch_nodes;
	/*
	 * Transparent compression (docs/design/compress.md): data written
	 * to files is compressed with compress (ARB_COMPRESS_ZLIB, below)
	 * at compress_level (1-9, 0 = 3) unless the file says NOCOMPRESS,
	 * which the writer sets when the start of a file does not compress,
	 * except with compress_force.  ARB_COMPRESS_NONE (0): only files
	 * with the COMPRESS attribute (chattr +c) are compressed, at
	 * compress_level.
	 */
	uint8_t compress;
	uint8_t compress_level;
	bool compress_force;
};
/* values of arb_fs_opts.compress: those of an extent's f_compression
 * (format.h defines them too, identically) */
#define ARB_COMPRESS_NONE 0
#define ARB_COMPRESS_ZLIB 1
void arb_fs_opts_default(struct arb_fs_opts *o);

/* "123", "64K", "64M", "1G", "2T" (binary units; "KiB"/"KB" too): 0, or
 * -EINVAL (not a size) / -ERANGE (too large). */
int arb_parse_size(const char *s, uint64_t *out);
/* CLOCK_MONOTONIC in nanoseconds, for durations */
uint64_t arb_mono_ns(void);

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
/*
 * For tools: open the image file at path (read-only with o->readonly) and
 * the filesystem in it, which then owns the device.  On failure -errno,
 * and *why a sentence when there is more to say than strerror (an image in
 * use, a damaged superblock): print arb_reason(ret, why).
 */
int arb_fs_open_image(const char *path, const struct arb_fs_opts *o,
		      struct arb_fs **out, const char **why);

/* One generation listed in the history (arb_fs_history). */
struct arb_history_info {
	uint64_t generation;
	struct timespec time; /* when it was committed */
};
/*
 * The generations that can be opened (arb_fs_opts.generation), newest
 * first, the last commit included: at most max into out; returns how many
 * there are (may be more than max), or -errno.  For a filesystem opened
 * at an older generation: that generation only.
 */
int arb_fs_history(struct arb_fs *fs, struct arb_history_info *out,
		   unsigned max);
#define ARB_FS_HISTORY_MAX 32
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
	/* file attributes, ARB_FL_* (arb_fs_set_flags) */
	uint32_t flags;
	/* in a read-only subvolume (arbor/subvol.h): every change fails
	 * with EROFS, write-opens too (arb_fs_may_open) */
	bool rdonly;
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
	/*
	 * After the changes above, clear set-user-ID, and set-group-ID if
	 * group execute is set (without it the bit marks mandatory locking,
	 * not privilege), as Linux does when an unprivileged caller writes or
	 * truncates and on every chown.  Ignored for directories.  Alone and
	 * with nothing to clear, it changes nothing (no ctime update).
	 */
	ARB_SET_KILL_SUIDGID = 1 << 9,
	/*
	 * After the changes above, clear set-group-ID whether or not group
	 * execute is set: Linux (since 6.2, setattr_should_drop_sgid) does so
	 * when the caller of a write, truncate or fallocate is neither in the
	 * file's group nor privileged, which only the caller can tell (struct
	 * arb_cred has no supplementary groups).  Ignored for directories;
	 * alone and with nothing to clear, it changes nothing.
	 */
	ARB_SET_KILL_SGID = 1 << 10,
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
/*
 * The inode at path below directory dir: components separated by '/',
 * empty ones and "." skipped, ".." refused (EINVAL: no parent is
 * followed), every component but the last a directory (ENOTDIR).  For
 * tools that name files of an unmounted image.
 */
int arb_fs_lookup_path(struct arb_fs *fs, uint64_t dir, const char *path,
		       uint64_t *ino);
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
/*
 * flags: 0, RENAME_NOREPLACE or RENAME_EXCHANGE (from <linux/fs.h>), and
 * RENAME_WHITEOUT (alone or with NOREPLACE): a whiteout (character device
 * 0:0, mode 0, owned by cr, or root when cr is NULL) takes the old name in
 * the same transaction.  The caller checks CAP_MKNOD for it, as the
 * kernel does before it sends the request.
 */
int arb_fs_rename(struct arb_fs *fs, uint64_t dir, const char *name,
		  uint64_t newdir, const char *newname, unsigned flags);
int arb_fs_rename_cred(struct arb_fs *fs, uint64_t dir, const char *name,
		       uint64_t newdir, const char *newname, unsigned flags,
		       const struct arb_cred *cr);

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

/*
 * A compressed extent in its stored form, for send and receive
 * (docs/design/compress.md, "Stored form out and in"): one compressed
 * extent item of a regular file, as arb_fs_read_encoded reads it and
 * arb_fs_write_encoded stores it, without inflating and deflating again.
 */
struct arb_encoded {
	uint64_t file_off;    /* file offset where the item starts */
	uint64_t num_bytes;   /* file bytes the item covers */
	uint64_t ram_bytes;   /* inflated size of the whole extent */
	uint64_t ext_off;     /* where in the inflated data the item starts */
	uint32_t compression; /* ARB_COMPRESS_ZLIB (the only one) */
	uint32_t len;         /* bytes of stored data */
};
/* the largest len and ram_bytes (format.h's ARB_COMPRESS_MAX_RAM) */
#define ARB_ENCODED_MAX (128u << 10)
/*
 * The compressed extent item of regular file ino that covers file offset
 * off: 0 with *e filled and its stored bytes in data: the zlib stream
 * (RFC 1950) as stored, without the zeros that pad it to a sector
 * (e->len bytes, at most ARB_ENCODED_MAX).  num_bytes stops at the end of
 * the file (the item's last sector may reach past it).  The stored
 * sectors' checksums are verified and the stream inflated to check it:
 * -EIO (logged with the inode and offset) when either fails.
 * -EOVERFLOW when cap < e->len (*e filled: e->len says what is needed;
 * a buffer of ARB_ENCODED_MAX always fits).  -ENODATA when what covers
 * off is not a compressed regular extent: plain data, an inline extent,
 * a hole, preallocated space, or nothing inside the file's size.  The
 * file's delayed data (written, not committed) is written first, as a
 * clone does, so it answers for what was written.  Does not update
 * atime.  -EINVAL for a non-regular file, -EISDIR for a directory.
 *
 * arb_fs_write_encoded stores data (e->len bytes) as one compressed
 * extent item of ino at e->file_off, as the flush would have written it
 * (lib/fs/delalloc.c): it replaces what [file_off, file_off + num_bytes)
 * held (plain data, holes, shared extents: like a write; the other owners
 * of a shared extent keep theirs), the size grows to file_off + num_bytes
 * if smaller, mtime and ctime change as for arb_fs_write.  The input is
 * checked before anything changes, as coming from a send stream: -EINVAL
 * unless compression is ARB_COMPRESS_ZLIB, 0 < len <= ARB_ENCODED_MAX,
 * 0 < ram_bytes <= ARB_ENCODED_MAX, num_bytes > 0, ext_off + num_bytes <=
 * ram_bytes, file_off is a multiple of the sector size, and num_bytes is
 * too unless file_off + num_bytes is the new end of the file (at or past
 * its size); -EFBIG past ARB_MAX_FILE_SIZE; -EBADMSG when data does not
 * inflate to exactly ram_bytes (bytes after the end of the stream are
 * not stored).  The item covers num_bytes rounded up to the sector size.
 * The inflated bytes [ext_off, ext_off + num_bytes) are written plainly
 * instead, through arb_fs_write (the same bytes for readers), when the
 * stored form would not save a sector (its length rounded up to the
 * sector size must be at most ram_bytes minus a sector), when the
 * format cannot hold it (ram_bytes or ext_off not a multiple of the
 * sector size, the rounded-up item past ram_bytes, or bytes past the
 * file's new end in its last sector that are not zeros), when the file
 * has the NOCOMPRESS attribute (ARB_FL_NOCOMP: its data is never
 * compressed), or when the image has no contiguous room for the stored
 * sectors.  Space is checked before anything changes (-ENOSPC), for the
 * stored sectors.  Returns num_bytes, or a negative errno; -EROFS on a
 * read-only mount or subvolume, as arb_fs_write.
 */
int arb_fs_read_encoded(struct arb_fs *fs, uint64_t ino, uint64_t off,
			struct arb_encoded *e, void *data, size_t cap);
ssize_t arb_fs_write_encoded(struct arb_fs *fs, uint64_t ino,
			     const struct arb_encoded *e, const void *data);
/* mode: 0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE|KEEP_SIZE,
 * FALLOC_FL_ZERO_RANGE (from <linux/falloc.h>) */
int arb_fs_fallocate(struct arb_fs *fs, uint64_t ino, int mode, uint64_t off,
		     uint64_t len);
/*
 * copy_file_range(2) between two regular files of the filesystem (any of
 * its trees): [soff, soff + len) of src (cut at its end) to doff of dst.
 * The block-aligned part is shared (dst's extent items point at src's
 * data: no data is written, and the space is used once until either file
 * is written there) when soff and doff are congruent modulo the block
 * size; the unaligned head and tail are copied as bytes, and so is all
 * of it otherwise.  The range may end in src's last partial block when
 * it ends at src's end and reaches dst's.  Not atomic: the bytes copied
 * come back (a prefix of the range, short on an error after some were
 * copied), or a negative errno: -EINVAL for overlapping ranges of one
 * file, a non-regular file or unknown flags, -EPERM for an immutable or
 * append-only dst, -EROFS, -EFBIG, -ENOSPC before anything changed.
 */
enum arb_copy_flags {
	/* share or fail: -EINVAL unless soff and doff are block aligned and
	 * len is, or the range ends at src's end and reaches dst's (a
	 * small inline src is still copied: it has no blocks to share) */
	ARB_COPY_SHARE_ONLY = 1 << 0,
	/* src's atime stays: the bytes copied (not shared) are read as
	 * copy_file_range's fallback reads them, which moves a relatime
	 * atime; a receive must not (the stream gave the times) */
	ARB_COPY_KEEP_ATIME = 1 << 1,
};
ssize_t arb_fs_copy_range(struct arb_fs *fs, uint64_t src, uint64_t soff,
			  uint64_t dst, uint64_t doff, uint64_t len,
			  unsigned flags);
/*
 * FIDEDUPERANGE's semantics: if [soff, soff + len) of src and
 * [doff, doff + len) of dst hold the same bytes (compared byte for byte,
 * holding the lock), dst's range is made to share src's extents and
 * *deduped says how many bytes; if not, nothing changes and
 * ARB_DEDUPE_DIFFERS (1) comes back.  The offsets must be block aligned
 * (-EINVAL); the range is cut at src's end, must lie inside dst (-EINVAL),
 * and is cut to whole blocks unless it ends both files.  Small (inline)
 * files have nothing to share: 0 and *deduped = 0.  dst's times stay.
 * Not for an immutable or append-only dst (-EPERM), -EROFS.  The whole
 * range is compared with the lock held: callers go in steps of a few MiB.
 */
#define ARB_DEDUPE_DIFFERS 1
int arb_fs_dedupe_range(struct arb_fs *fs, uint64_t src, uint64_t soff,
			uint64_t dst, uint64_t doff, uint64_t len,
			uint64_t *deduped);
/* SEEK_DATA / SEEK_HOLE; -ENXIO past the end */
int64_t arb_fs_lseek(struct arb_fs *fs, uint64_t ino, uint64_t off,
		     int whence);
/* data (and metadata unless datasync) of ino durable on return */
int arb_fs_fsync(struct arb_fs *fs, uint64_t ino, bool datasync);
/*
 * The same in two halves, for a caller that serves many fsyncs from one
 * thread and wants them to share commits: arb_fs_fsync_begin returns 0
 * when everything of ino is durable already, 1 when ino is marked to be
 * written by the next arb_fs_fsync_end, or a negative errno;
 * arb_fs_fsync_end commits once for the n begins that returned 1 since
 * the last end (its result is theirs).
 */
int arb_fs_fsync_begin(struct arb_fs *fs, uint64_t ino);
int arb_fs_fsync_end(struct arb_fs *fs, unsigned n);
/* everything durable on return (commit) */
int arb_fs_sync(struct arb_fs *fs);

/*
 * Directory reading in DIR_INDEX order.  off 0 starts at the beginning
 * (".", ".." first); each entry passes the offset of the entry after it.
 * A listing ends with the entries that existed when its first call (off
 * 0) was made: names linked later, renamed ones too, are left out, so
 * that it ends whatever happens meanwhile; offsets carry that bound (see
 * rd_cookie in dir.c) and stay valid across changes (telldir/seekdir).
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

/*
 * File attributes (chattr/lsattr), as FS_IOC_GETFLAGS/SETFLAGS carry them:
 * the values are those of FS_*_FL in <linux/fs.h>.  Stored in the inode
 * (format.h, ARB_INODE_*), with ext4's meaning:
 *   IMMUTABLE  the library refuses (-EPERM) every change of the inode:
 *              setattr, xattrs, fallocate, unlink, rename, link, and new
 *              or removed entries of a directory
 *   APPEND     the library refuses truncation, chmod, chown, explicit
 *              atime, xattrs, punching holes, unlink, rename, link and
 *              removed entries of a directory
 *   NODUMP     stored only
 *   NOATIME    reads do not update atime
 * arb_fs_write does not look at IMMUTABLE or APPEND: which writes they
 * allow depends on how the file was opened, so the caller asks
 * arb_fs_may_open at open (the kernel would, for a local filesystem),
 * and data accepted before the flag was set still reaches the image.
 *   COMPR      later writes are compressed (-o compress not needed)
 *   NOCOMP     later writes are not compressed (-o compress ignored);
 *              COMPR and NOCOMP together are refused (-EINVAL)
 * New inodes inherit NODUMP, NOATIME, COMPR and NOCOMP from their
 * directory.
 */
#define ARB_FL_IMMUTABLE 0x00000010u
#define ARB_FL_APPEND 0x00000020u
#define ARB_FL_NODUMP 0x00000040u
#define ARB_FL_NOATIME 0x00000080u
#define ARB_FL_COMPR 0x00000004u
#define ARB_FL_NOCOMP 0x00000400u
#define ARB_FL_SUPPORTED                                                       \
	(ARB_FL_IMMUTABLE | ARB_FL_APPEND | ARB_FL_NODUMP | ARB_FL_NOATIME |   \
	 ARB_FL_COMPR | ARB_FL_NOCOMP)
int arb_fs_get_flags(struct arb_fs *fs, uint64_t ino, uint32_t *flags);

/*
 * What a file's data takes (arbor filesystem du): bytes, the file bytes
 * that hold data (extents, inline and delayed; not holes or preallocated
 * space); stored, the bytes they take in the image (a compressed extent's
 * stored size counted in proportion to the part of it the file uses;
 * shared extents counted whole for every user); the part of both in
 * compressed extents; preallocated bytes; and the counts of extents.
 */
struct arb_file_space {
	uint64_t bytes, stored;
	uint64_t compressed_bytes, compressed_stored;
	uint64_t prealloc_bytes;
	uint64_t extents, compressed_extents;
};
int arb_fs_file_space(struct arb_fs *fs, uint64_t ino,
		      struct arb_file_space *out);
/*
 * Replace the attributes by flags: -EOPNOTSUPP for a bit outside
 * ARB_FL_SUPPORTED.  Who may change what (the owner, CAP_LINUX_IMMUTABLE
 * for IMMUTABLE and APPEND) is the caller's to check.
 */
int arb_fs_set_flags(struct arb_fs *fs, uint64_t ino, uint32_t flags);
/*
 * May ino be opened with open(2) flags oflags?  -EPERM for a write-open
 * (or O_TRUNC) of an IMMUTABLE inode, and for a write-open without
 * O_APPEND (or with O_TRUNC) of an APPEND inode; otherwise 0.
 */
int arb_fs_may_open(struct arb_fs *fs, uint64_t ino, int oflags);
/* Some inode has (or had) IMMUTABLE or APPEND: the superblock's
 * ARB_COMPAT_PROTECTED_INODES. */
bool arb_fs_has_protected_inodes(struct arb_fs *fs);

/* What `arbor filesystem show` prints (from the superblock in memory). */
struct arb_fs_info {
	uint8_t uuid[16];         /* of the filesystem */
	char label[256];          /* NUL-terminated, "" = none */
	uint64_t total_bytes;
	uint64_t generation;      /* of the last durable commit */
	uint32_t nodesize, sectorsize;
	uint32_t version;         /* format version */
	uint64_t incompat, compat, ro_compat; /* feature bits */
	unsigned meta_copies;     /* 1 single, 2 dup */
	uint8_t fs_tree_uuid[16]; /* of the default subvolume's tree */
	bool readonly;
};
int arb_fs_info(struct arb_fs *fs, struct arb_fs_info *info);
/* Set the label (at most 255 bytes) and commit.  -EINVAL if longer. */
int arb_fs_set_label(struct arb_fs *fs, const char *label);
int arb_fs_statfs(struct arb_fs *fs, struct statvfs *sv);
/*
 * fstrim: commit, then give every free run of at least minlen bytes within
 * [start, start+len) back to the host (punch holes in the image file;
 * discard on a block device).  *trimmed: bytes given back.  Never touches
 * what the last durable commit or a reader needs (lib/fs/trim.c).
 */
int arb_fs_trim(struct arb_fs *fs, uint64_t start, uint64_t len,
		uint64_t minlen, uint64_t *trimmed);

/* arb_fs_stats.state */
enum arb_fs_state {
	/* no change is accepted (mounted read-only, or after a failure) */
	ARB_FS_STATE_READONLY = 1 << 0,
	/* a commit or an operation failed: forced read-only, the changes
	 * since the last commit are lost (the last commit is intact) */
	ARB_FS_STATE_FAILED = 1 << 1,
	/* arb_fs_shutdown: READONLY and FAILED (error -EIO) are set too */
	ARB_FS_STATE_SHUTDOWN = 1 << 2,
};

/* Statistics since open.  Counters only grow. */
struct arb_fs_stats {
	/* generation of the last durable commit; commits that wrote a
	 * superblock since open */
	uint64_t generation, commits;
	uint64_t cache_hits, cache_misses, cache_bytes;
	uint64_t bytes_written[4]; /* by enum arb_io_kind */
	uint64_t bytes_read[4];
	/* bytes accepted by arb_fs_write */
	uint64_t user_bytes_written;
	uint64_t total_bytes, free_bytes;
	/* wall time spent in the commits counted by commits, in ns */
	uint64_t commit_ns;
	/* enum arb_fs_state */
	uint32_t state;
	/* the error (negative errno) that failed the filesystem, 0 if none */
	int32_t error;
	/* copies of every tree node (1 single, 2 dup) */
	unsigned meta_copies;
	/* node reads whose first copy was bad and the second answered (the
	 * first copy rewritten unless read-only); node reads no copy could
	 * answer */
	uint64_t nodes_healed, nodes_unrecoverable;
	/* of commit_ns: delayed file data, root items and reference counts,
	 * node writes, flushes and superblock */
	uint64_t commit_phase_ns[4];
	/* arb_fs_fsync calls; those that committed; those that joined
	 * another's commit (group commit); those with nothing to commit */
	uint64_t fsyncs, fsync_commits, fsync_joined, fsync_durable;
	/* of commits, those that flushed twice (too much written for a
	 * commit record) */
	uint64_t commits_two_flush;
	/* flushes of bulk data between commits (arb_dev_flush_behind) */
	uint64_t flushes_behind;
	/* of bytes read from the image, those read past the host's page
	 * cache (large data reads of an image file, O_DIRECT) */
	uint64_t bytes_read_direct;
	/* file bytes arb_fs_copy_range shared instead of copying */
	uint64_t cloned_bytes;
	/* file bytes arb_fs_dedupe_range shared */
	uint64_t deduped_bytes;
	/* compressed extents written, the file bytes they hold and the
	 * bytes they take on disk */
	uint64_t compressed_extents, compressed_ram_bytes,
		compressed_stored_bytes;
	/* of compressed_ram_bytes, those compressed by their writer before
	 * it took the lock (the others: by the flush, under it) */
	uint64_t compressed_early_bytes;
};
int arb_fs_get_stats(struct arb_fs *fs, struct arb_fs_stats *s);

/*
 * Commit now if anything changed (delayed data included); *generation (if
 * not NULL) receives the generation of the last durable commit, which
 * holds every change made before the call (also on error).  A read-only
 * filesystem has nothing to commit: 0.  After a failure (ARB_FS_STATE_FAILED)
 * the error that failed it, else the commit's error.
 */
int arb_fs_commit(struct arb_fs *fs, uint64_t *generation);

/*
 * Shut the filesystem down (FS_IOC_SHUTDOWN of xfs, ext4, btrfs): from now
 * on nothing is written to the image, arb_fs_close included, and every
 * change fails with -EIO (ARB_FS_STATE_SHUTDOWN).  The modes are the
 * values of XFS_FSOP_GOING_FLAGS_*.  DEFAULT and LOGFLUSH first commit
 * what the filesystem holds (there is no log: the two are the same here);
 * NOLOGFLUSH drops it, so the image keeps the last commit (every fsync
 * that returned is in it).  Returns 0, -EINVAL for an unknown mode, or the
 * error of that commit (the filesystem is shut down anyway).  A second
 * call does nothing.  arb_fs_close then returns 0 unless something failed
 * before.
 */
enum arb_shutdown_mode {
	ARB_SHUTDOWN_DEFAULT = 0,
	ARB_SHUTDOWN_LOGFLUSH = 1,
	ARB_SHUTDOWN_NOLOGFLUSH = 2,
};
int arb_fs_shutdown(struct arb_fs *fs, unsigned mode);

/* Where the space of the image goes (arb_fs_usage), in bytes. */
struct arb_fs_usage {
	uint64_t generation;
	/* size of the image */
	uint64_t total;
	/* the fixed start of the image (superblocks), never allocated */
	uint64_t system;
	/* file data extents and tree nodes, as of the last commit */
	uint64_t data, metadata;
	/* allocated since the last commit (data and nodes not yet in the
	 * extent tree) */
	uint64_t uncommitted;
	/* freed, waiting for its commit to be durable (usually 0) */
	uint64_t pinned;
	/* not allocated */
	uint64_t free;
	/* part of free that only operations freeing space may use */
	uint64_t reserve;
	/* file data written but not yet allocated (delayed allocation) */
	uint64_t delayed;
	/* what statfs reports as available: free - reserve - delayed */
	uint64_t available;
	/* bytes the image takes on its host (allocated blocks of the image
	 * file), 0 if not known (a block device) */
	uint64_t host_bytes;
	/* bytes given back to the host by discard=async since mount */
	uint64_t trimmed;
	/* part of free kept from reuse so that the generations the history
	 * lists stay intact; writes take it when nothing else is free */
	uint64_t history;
	/*
	 * File data as of the last commit, logical against stored: data
	 * (above) is what the data extents take in the image; data_logical
	 * is the same extents inflated (a compressed extent counts the
	 * bytes it decompresses to, any other its length).  Each disk
	 * extent counts once, however many files, clones and snapshots
	 * share it, so data_logical / data is the compression ratio, not a
	 * sharing ratio; equal without compression.  Data inline in tree
	 * nodes (small files) is metadata, in neither.  compressed and
	 * compressed_logical are the part of data and data_logical in
	 * compressed extents, compressed_extents how many.
	 */
	uint64_t data_logical;
	uint64_t compressed, compressed_logical, compressed_extents;
};
/* Walks the extent tree (reads every leaf of it); once the image has had
 * a compressed extent, also looks up each data extent shorter than 128 KiB
 * in a file tree, to learn what it inflates to. */
int arb_fs_usage(struct arb_fs *fs, struct arb_fs_usage *u);

/*
 * Messages of the library (errors, warnings) go to stderr as "arborfs:
 * MESSAGE" lines, or, once a sink is set, to sink(level, MESSAGE) with
 * level a syslog(3) priority (LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG).
 * NULL restores stderr.  Set it before the filesystem is used.
 */
void arb_log_set_sink(void (*sink)(int level, const char *msg));
/*
 * For a command-line tool: the library's messages are printed as "PROG:
 * MESSAGE".  Between arb_log_hold(true) and arb_log_hold(false) (around
 * opening an image: arb_fs_open_image does it), an error is held back
 * until the tool takes it (arb_log_take_error, arb_reason: printed once,
 * with the tool's own context) or the hold ends, so that each problem is
 * printed once, under the tool's name, and messages keep their order.
 */
void arb_log_tool(const char *prog);
void arb_log_hold(bool on);
/* the error held since the last call (static storage), or NULL */
const char *arb_log_take_error(void);
/* A tool's reason for a failed library call (err < 0): why if the call
 * gave one, else the error the library logged, else strerror; the held
 * error is taken either way, so it is not printed again at exit. */
static inline const char *arb_reason(int err, const char *why)
{
	const char *held = arb_log_take_error();

	return why ? why : held ? held : strerror(-err);
}

/*
 * Scrub: read every tree node and data block in use and verify it against
 * its checksum; the filesystem stays usable meanwhile (the lock is taken
 * one node or one 1 MiB chunk at a time).  Each problem is passed to
 * report (may be NULL) as one line naming the node, or the files (paths
 * through the back-references) whose data is damaged.  Setting *cancel
 * stops it (-ECANCELED).  Returns 0 when the walk finished (problems are
 * in the counters), or a negative errno.
 */
struct arb_scrub_stats {
	uint64_t total_bytes;         /* bytes in use when it started */
	uint64_t bytes_checked;       /* tree nodes + data read so far */
	uint64_t position;            /* disk address reached */
	uint64_t nodes_checked;
	uint64_t nodes_corrected;     /* repaired from a good copy */
	uint64_t nodes_uncorrectable;
	uint64_t data_sectors_checked;
	uint64_t data_uncorrectable;
	uint64_t data_no_csum;        /* bytes without a checksum (prealloc) */
	uint64_t csum_errors, read_errors;
	uint64_t files_affected;      /* files (inodes) with damaged data */
	uint64_t skipped_uncommitted; /* bytes written after the scrub began */
	bool done;
};
typedef void (*arb_scrub_report_fn)(void *arg, const char *line);
int arb_fs_scrub(struct arb_fs *fs, struct arb_scrub_stats *st,
		 arb_scrub_report_fn report, void *arg,
		 volatile const bool *cancel);
/* A consistent copy of the counters of a scrub running in another thread
 * (arb_fs_scrub updates them, and calls report, with the volume locked). */
void arb_fs_scrub_snapshot(struct arb_fs *fs, const struct arb_scrub_stats *st,
			   struct arb_scrub_stats *out);

/*
 * Grow or shrink the filesystem (and its image file) to size bytes,
 * rounded down to the sector size.  Shrinking only gives back free space
 * at the end (-EBUSY when something lives there: data is not moved).
 * *why (may be NULL) receives a static message on failure.
 */
int arb_fs_resize(struct arb_fs *fs, uint64_t size, const char **why);

/* Consistency check of the whole image (fsck's engine). 0 clean,
 * -EUCLEAN problems (printed to out when not NULL). */
int arb_fs_check(struct arb_fs *fs, FILE *out);

/* ---- fsck: named problems, repair, undo (lib/check/fs_problem.c,
 * walk.c, fs_repair.c) ---------------------------------------------
 *
 * Every problem the checker can raise has a stable id, a stable short name
 * (what fsck prints and scripts grep for), whether repair fixes it, and a
 * message.  The numbers and names never change; new problems go at the end.
 */
#define ARB_PROBLEMS(x)                                                        \
	x(TREE, 1, "tree-structure", 0,                                        \
	  "the check could not run to its end (out of memory); before ids 32-37, any finding of the core's structural check") \
	x(NODE_BAD, 2, "node-unreadable", 0,                                   \
	  "a tree node does not read or validate (checksum, header)")          \
	x(TREE_REFS, 3, "tree-block-refcount", 1,                              \
	  "tree node reference count or back-reference is wrong")              \
	x(EXTENT_REFS, 4, "extent-refcount", 1,                                \
	  "data extent reference count differs from the file extents using it")\
	x(EXTENT_BACKREF, 5, "extent-backref", 1,                              \
	  "data extent back-reference missing, extra or miscounted")           \
	x(EXTENT_LEAK, 6, "extent-leak", 1,                                    \
	  "data extent allocated but used by no file")                         \
	x(EXTENT_NOITEM, 7, "extent-missing", 0,                               \
	  "a data extent or tree node in use has no extent item")              \
	x(EXTENT_OVERLAP, 8, "extent-overlap", 0,                              \
	  "extents overlap in the extent tree")                                \
	x(DATA_CSUM, 9, "data-csum", 0,                                        \
	  "data sector does not match its checksum (its data is lost)")        \
	x(NO_INODE, 10, "item-without-inode", 0,                               \
	  "items of an inode that has no inode item")                          \
	x(NLINK, 11, "nlink-mismatch", 1,                                      \
	  "link count differs from the names of the inode")                    \
	x(DIR_INDEX_MISSING, 12, "dir-index-missing", 1,                       \
	  "a name has no DIR_INDEX (rebuilt from INODE_REF)")                  \
	x(DIR_ITEM_MISSING, 13, "dir-item-missing", 1,                         \
	  "a name has no DIR_ITEM (rebuilt from INODE_REF)")                   \
	x(INODE_REF_MISSING, 14, "inode-ref-missing", 1,                       \
	  "a name has no INODE_REF (rebuilt from DIR_INDEX)")                  \
	x(DANGLING, 15, "dangling-dir-entry", 1,                               \
	  "directory entry names an inode that does not exist")                \
	x(ORPHAN, 16, "orphan-item", 1,                                        \
	  "orphan item of a linked or missing inode")                          \
	x(UNLINKED, 17, "unlinked-inode", 1,                                   \
	  "inode with no name and no orphan item (moved to /lost+found)")      \
	x(DIR_NAMES, 18, "dir-names", 0,                                       \
	  "directory with more than one name")                                 \
	x(DIR_SIZE, 19, "dir-size", 1,                                         \
	  "directory size differs from its names")                             \
	x(DIR_SEQ, 20, "dir-next-index", 1,                                    \
	  "directory's next index is not above the indexes in use")            \
	x(NBYTES, 21, "nbytes-mismatch", 1,                                    \
	  "inode's allocated bytes differ from its extents")                   \
	x(BAD_ENTRY, 22, "bad-entry", 0,                                       \
	  "malformed or inconsistent directory entry or inode ref")            \
	x(FILE_EXTENT, 23, "bad-file-extent", 0,                               \
	  "malformed file extent item")                                        \
	x(FILE_OVERLAP, 24, "file-extent-overlap", 0,                          \
	  "file extent items of one file overlap")                             \
	x(UNEXPECTED, 25, "unexpected-item", 0,                                \
	  "item of an unexpected type")                                        \
	x(NODE_COPY, 26, "node-copy-bad", 1,                                   \
	  "one copy of a tree node is bad or differs (rewritten from the good copy)") \
	x(SUPER_COPY, 27, "super-copy-bad", 1,                                 \
	  "the other superblock slot is unreadable or foreign (rewritten from the current one)") \
	x(CSUM_ORPHAN, 28, "csum-orphan", 1,                                   \
	  "checksum item covers sectors outside any data extent, or sectors another item covers (trimmed)") \
	x(CSUM_MISSING, 29, "csum-missing", 0,                                 \
	  "a sector of a written data extent has no checksum (reads of it fail)") \
	x(NEWER_FORMAT, 30, "newer-format", 0,                                 \
	  "an item of a format this version does not know (a newer arborfs wrote it): no repair, use a newer fsck.arborfs") \
	x(HIGHEST_INO, 31, "highest-objectid", 1,                              \
	  "an inode number is above the highest the tree records as handed out (it could be handed out again)") \
	x(NODE_MIRROR, 32, "node-second-copy", 0,                              \
	  "a node's second copy is missing or unexpected for the volume, or its pointers and its extent item name different ones") \
	x(NODE_EMPTY, 33, "node-empty", 0,                                     \
	  "a tree node other than a root holds no item")                       \
	x(NODE_KEYS, 34, "node-key-bounds", 0,                                 \
	  "a node's first key differs from its parent's key for it, or its last key is not below the parent's next key") \
	x(SPACE_MAP, 35, "space-map", 0,                                       \
	  "the free space map disagrees with the extent tree (an extent or second copy marked free, or the used counts differ)") \
	x(EXTENT_ITEM_BAD, 36, "extent-item-bad", 0,                           \
	  "a malformed or unknown item in the extent tree")                    \
	x(EXTENT_LENGTH, 37, "extent-length", 0,                               \
	  "a data extent's length differs from the one its file extent items give") \
	x(SUBVOL_LINK, 38, "subvolume-link", 0,                                \
	  "a subvolume's ROOT_REF, ROOT_BACKREF, directory entry or SUBVOL_ITEM disagree, or a subvolume tree is neither linked nor being deleted")

enum arb_problem_id {
#define ARB_PB_ENUM(id, nr, name, fix, msg) ARB_PB_##id = nr,
	ARB_PROBLEMS(ARB_PB_ENUM)
#undef ARB_PB_ENUM
	ARB_PB_MAX
};

/* One finding: what, where, and what repair needs to act on it. */
struct arb_problem {
	enum arb_problem_id id;
	/* inode concerned (0: none) */
	uint64_t ino;
	/* directory of a name, or a disk address (extents, nodes) */
	uint64_t dir, addr;
	/* DIR_INDEX sequence of a name; item type of a dangling entry */
	uint64_t index, type;
	/* expected value (nlink, size, next index, nbytes, refs) */
	uint64_t expect;
	/* the name of a link problem (NUL terminated) */
	char name[ARB_NAME_MAX + 1];
	/* human readable details */
	char detail[200];
	/* the subvolume tree of an fs-tree problem (0: the filesystem tree,
	 * or not about one tree); repair acts on the filesystem tree only */
	uint64_t tree;
};

struct arb_check_result {
	struct arb_problem *pb;
	size_t nr, cap;
	/* items checked: tree nodes, items, data sectors */
	uint64_t nodes, items, sectors;
	/* the walk could not see every tree (unreadable node or subtree):
	 * repair refuses to act on a partial picture */
	bool incomplete;
	/* an extent in use has no extent item, so the allocator would hand
	 * it out: repair (which allocates) refuses */
	bool space_unsafe;
	/* an item of a newer format (a newer-format record says which):
	 * the check could not see what it holds, and incomplete is set */
	bool newer_format;
};

const char *arb_problem_name(enum arb_problem_id id);
const char *arb_problem_message(enum arb_problem_id id);
bool arb_problem_fixable(enum arb_problem_id id);
void arb_check_result_free(struct arb_check_result *r);

/*
 * The whole check as records: one walk of every tree (node structure,
 * both copies, node and data extent counts and back-references, the space
 * map), data checksums, and the filesystem tree.  Problems are
 * also printed to out (may be NULL), one per line, "name: detail".
 * 0 clean, -EUCLEAN problems, other <0 on failure.
 */
int arb_fs_check_records(struct arb_fs *fs, struct arb_check_result *r,
			 FILE *out);
/*
 * The same check online, on a filesystem in use: commit, then check the
 * generation G just committed through a second, read-only view of the
 * image (its own node cache) while the filesystem keeps serving every
 * call.  Until the check ends, no block G references is reused (blocks
 * that later commits free stay held: in memory only, so a crash loses
 * nothing, the next open finds them free).  If the filesystem runs short
 * of space meanwhile, the check is cancelled and the blocks given back
 * rather than a write failing.  One check at a time (-EBUSY).
 * Results, printing and return values as arb_fs_check_records; also
 * -ECANCELED when *cancel (may be NULL) was set or space ran short
 * (oc->out_of_space), with nothing in r.  oc (may be NULL) shows the
 * generation and the progress to another thread while it runs.
 */
struct arb_online_check {
	/* out: the generation checked, and its bytes in use */
	uint64_t generation, bytes_used;
	/* out: image bytes the check has read so far (atomic updates) */
	uint64_t bytes_read;
	/* out: cancelled because the filesystem ran short of space */
	bool out_of_space;
};
int arb_fs_check_online(struct arb_fs *fs, struct arb_check_result *r,
			FILE *out, struct arb_online_check *oc,
			volatile const bool *cancel);
/*
 * Repair what the records of a check of this (read-write, keep_orphans)
 * open say, in one transaction, committed with an undo record in the
 * superblock (see arb_undo_repair).  Refuses (-EUCLEAN) when the check was
 * incomplete.  *fixed counts the records acted on.  Actions are printed to
 * out.  0 committed (or nothing to do), <0 error (nothing committed).
 */
int arb_fs_repair(struct arb_fs *fs, const struct arb_check_result *r,
		  FILE *out, uint64_t *fixed);
/*
 * Go back to the generation before the last repair: only when the newest
 * superblock is the one the repair wrote (generation G) and the other slot
 * still holds generation G-1 whose trees open.  dev is opened read-write
 * by the caller and stays the caller's.  0 done, -EALREADY nothing to undo
 * (*why says why), other <0 errors.
 */
int arb_undo_repair(struct arb_dev *dev, FILE *out, const char **why);

#ifdef __cplusplus
}
#endif
#endif
