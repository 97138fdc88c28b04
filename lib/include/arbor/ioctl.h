/* SPDX-License-Identifier: MIT */
/*
 * arbor/ioctl.h - the control channel of a mounted arborfs: ioctls on any
 * file or directory of the mount, answered by the FUSE daemon.
 *
 * Every ioctl is "restricted" in FUSE's sense: direction and size are
 * encoded in the number (_IOR/_IOWR), so the kernel copies the argument in
 * and out by itself.  A struct's size is therefore part of its ioctl
 * number and never changes; each one carries reserved space to grow into,
 * and starts with the same two fields:
 *
 *   OFFSET SIZE DESCRIPTION
 *   0      4    size: out, bytes of the struct the daemon filled in (the
 *                 fields past it are zero: an older daemon knew fewer)
 *   4      4    version: out, ARB_IOC_VERSION of the daemon
 *
 * A new field takes the place of reserved bytes, raises ARB_IOC_VERSION
 * and is meaningful when size covers it.  Input fields and reserved bytes
 * are zero when not used: a daemon refuses (EINVAL) flags it does not know.
 * All fields are fixed-size, naturally aligned and host-endian; the same
 * layout serves 32- and 64-bit callers.
 *
 * Errors come back as errno of ioctl(2): ENOTTY not arborfs (or an
 * unknown number), EPERM for a privileged ioctl (marked below) without
 * uid 0 or CAP_SYS_ADMIN, EINVAL bad input, EIO/EROFS the filesystem
 * failed, and the errno of the operation itself.
 */
#ifndef ARBOR_IOCTL_H
#define ARBOR_IOCTL_H

#include <linux/ioctl.h>
#include <linux/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ARB_IOC_MAGIC 'A'
/* version of the structs below; 1: the first; 2: arb_ioc_stats gained
 * meta_copies, nodes_healed, nodes_unrecoverable; 3: commit phases and
 * fsync counts; 4: uring_requests, uring_threads, uring_starved; 5:
 * commits_two_flush; 6: flushes_behind; 7: image_bytes_read_direct; 8:
 * fsync_dirty_limit, fsync_dirty_lowered; 9: ARB_IOC_STATE_SHUTDOWN; 10:
 * the subvolume ioctls (ARB_IOC_SUBVOL_*); 11: ARB_IOC_SUBVOL_GET_DEFAULT,
 * ARB_IOC_SUBVOL_SET_DEFAULT; 12: ARB_IOC_SUBVOL_USAGE; 13: sharing
 * copy_file_range (op COPY_FILE_RANGE), ARB_IOC_DEDUPE_RANGE, and
 * arb_ioc_stats gained cloned_bytes, deduped_bytes; 14: ARB_IOC_FIND_NEW,
 * ARB_IOC_DIFF; 15: ARB_IOC_SEND, ARB_IOC_RECEIVE, ARB_IOC_DIGEST; 16:
 * arb_ioc_usage.history, ARB_IOC_GET_HISTORY; 17: arb_ioc_stats
 * compressed_*, ARB_IOC_FILE_SPACE; 18: arb_ioc_usage.data_logical,
 * compressed, compressed_logical, compressed_extents */
#define ARB_IOC_VERSION 18

/* state flags (arb_ioc_generation.state, arb_ioc_stats.state) */
/* no change is accepted: mounted read-only, or after a failure */
#define ARB_IOC_STATE_READONLY (1ULL << 0)
/* a commit or an operation failed; the filesystem turned read-only and
 * the changes since the last commit are lost (that commit is intact) */
#define ARB_IOC_STATE_FAILED (1ULL << 1)
/* FS_IOC_SHUTDOWN (XFS_IOC_GOINGDOWN, privileged) stopped it: every
 * request but these reports fails with EIO until the next mount; FAILED
 * and READONLY are set too (error EIO).  Its __u32 argument: 0 commit
 * everything first, the kernel's dirty pages included; 1 commit what the
 * daemon received; 2 commit nothing (the next mount shows the last
 * commit).  See fuse/shutdown.c. */
#define ARB_IOC_STATE_SHUTDOWN (1ULL << 2)

/*
 * ARB_IOC_GET_HISTORY: the generations that can be mounted with -o
 * ro,generation=N (arb_fs_history), newest first, the last commit
 * included; what the history grace keeps for them.  Anyone may ask.
 * 1024 bytes.
 */
#define ARB_IOC_HISTORY_MAX 32
struct arb_ioc_history_entry {
	__u64 generation;
	/* when it was committed (0: not known) */
	__u64 time_sec;
	__u32 time_nsec;
	__u32 pad;
};
struct arb_ioc_history {
	__u32 size;
	__u32 version;
	/* out: entries filled in */
	__u32 nr;
	__u32 pad;
	/* out: bytes the grace keeps from reuse for them */
	__u64 kept_bytes;
	__u64 reserved[1];
	struct arb_ioc_history_entry e[ARB_IOC_HISTORY_MAX];
	__u64 reserved2[28];
};

/*
 * ARB_IOC_GET_GENERATION: the generation of the last durable commit.
 * Anyone may ask.  128 bytes.
 */
struct arb_ioc_generation {
	__u32 size;
	__u32 version;
	/* out: generation of the last durable commit */
	__u64 generation;
	/* out: ARB_IOC_STATE_* */
	__u64 state;
	/* out: errno (positive) that failed the filesystem, 0 if none */
	__u32 error;
	__u32 pad;
	__u64 reserved[12];
};

/*
 * ARB_IOC_SYNC: commit now (privileged).  Every change the daemon has
 * received is durable on return; the caller first flushes the kernel's
 * dirty pages (syncfs), as `arbor filesystem sync` does.  128 bytes.
 */
struct arb_ioc_sync {
	__u32 size;
	__u32 version;
	/* in: flags, none defined yet: 0 */
	__u64 flags;
	/* out: generation of the last durable commit after the call */
	__u64 generation;
	/* out: 1 if this call wrote a commit, 0 if nothing had changed */
	__u64 committed;
	__u64 reserved[12];
};

/*
 * ARB_IOC_GET_USAGE: where the space of the image goes, in bytes (the
 * online counterpart of `arbor usage --image`).  Anyone may ask; the
 * daemon walks the extent tree to answer.  256 bytes.
 */
struct arb_ioc_usage {
	__u32 size;
	__u32 version;
	/* out: generation of the last durable commit */
	__u64 generation;
	/* out: size of the image */
	__u64 total;
	/* out: the fixed start of the image (superblocks), never allocated */
	__u64 system;
	/* out: file data extents, as of the last commit */
	__u64 data;
	/* out: tree nodes, as of the last commit */
	__u64 metadata;
	/* out: allocated since the last commit */
	__u64 uncommitted;
	/* out: freed, waiting for its commit to be durable (usually 0) */
	__u64 pinned;
	/* out: not allocated */
	__u64 free;
	/* out: part of free that only operations freeing space may use */
	__u64 reserve;
	/* out: file data written but not yet allocated (delayed allocation) */
	__u64 delayed;
	/* out: available to ordinary writes (statfs f_bavail in bytes) */
	__u64 available;
	/* out: bytes the image takes on its host (0: not known) */
	__u64 host_bytes;
	/* out: bytes given back to the host by discard=async since mount */
	__u64 trimmed;
	/* out: part of free kept for recovering recent generations (the
	 * history grace; writes take it when nothing else is free) */
	__u64 history;
	/* out (version 18): data inflated: each data extent once, a
	 * compressed one as the bytes it decompresses to (arb_fs_usage), so
	 * data_logical / data is the compression ratio, never sharing */
	__u64 data_logical;
	/* out (version 18): the part of data and data_logical in compressed
	 * extents, and how many those are */
	__u64 compressed;
	__u64 compressed_logical;
	__u64 compressed_extents;
	__u64 reserved[13];
};

/*
 * FUSE request kinds counted by ARB_IOC_GET_STATS, numbers fixed forever
 * (they index arb_ioc_stats.ops).  x(NAME, number, "name").
 */
#define ARB_IOC_OPS(x)                                                         \
	x(LOOKUP, 0, "lookup")                                                 \
	x(FORGET, 1, "forget")                                                 \
	x(FORGET_MULTI, 2, "forget_multi")                                     \
	x(GETATTR, 3, "getattr")                                               \
	x(SETATTR, 4, "setattr")                                               \
	x(READLINK, 5, "readlink")                                             \
	x(MKNOD, 6, "mknod")                                                   \
	x(MKDIR, 7, "mkdir")                                                   \
	x(UNLINK, 8, "unlink")                                                 \
	x(RMDIR, 9, "rmdir")                                                   \
	x(SYMLINK, 10, "symlink")                                              \
	x(RENAME, 11, "rename")                                                \
	x(LINK, 12, "link")                                                    \
	x(OPEN, 13, "open")                                                    \
	x(READ, 14, "read")                                                    \
	x(WRITE, 15, "write")                                                  \
	x(FLUSH, 16, "flush")                                                  \
	x(RELEASE, 17, "release")                                              \
	x(FSYNC, 18, "fsync")                                                  \
	x(OPENDIR, 19, "opendir")                                              \
	x(READDIR, 20, "readdir")                                              \
	x(READDIRPLUS, 21, "readdirplus")                                      \
	x(RELEASEDIR, 22, "releasedir")                                        \
	x(FSYNCDIR, 23, "fsyncdir")                                            \
	x(STATFS, 24, "statfs")                                                \
	x(SETXATTR, 25, "setxattr")                                            \
	x(GETXATTR, 26, "getxattr")                                            \
	x(LISTXATTR, 27, "listxattr")                                          \
	x(REMOVEXATTR, 28, "removexattr")                                      \
	x(CREATE, 29, "create")                                                \
	x(FALLOCATE, 30, "fallocate")                                          \
	x(LSEEK, 31, "lseek")                                                  \
	x(IOCTL, 32, "ioctl")                                                  \
	x(COPY_FILE_RANGE, 33, "copy_file_range")

enum arb_ioc_op {
#define ARB_IOC_OP_ENUM(n, v, s) ARB_IOC_OP_##n = v,
	ARB_IOC_OPS(ARB_IOC_OP_ENUM)
#undef ARB_IOC_OP_ENUM
	/* how many the header knows (a daemon may know more) */
	ARB_IOC_OP_NR
};
/* room in arb_ioc_stats.ops */
#define ARB_IOC_OPS_MAX 64

/* The name of an operation, or NULL if this header does not know it. */
static inline const char *arb_ioc_op_name(unsigned op)
{
	switch (op) {
#define ARB_IOC_OP_CASE(n, v, s) case v: return s;
	ARB_IOC_OPS(ARB_IOC_OP_CASE)
#undef ARB_IOC_OP_CASE
	}
	return (const char *)0;
}

/* Requests of one kind, measured in the daemon around its handler. */
struct arb_ioc_op_stat {
	/* requests handled */
	__u64 count;
	/* of them, answered with an error */
	__u64 errors;
	/* wall time in the handler, summed, and the longest one (ns) */
	__u64 total_ns;
	__u64 max_ns;
};

/*
 * ARB_IOC_GET_STATS: what the mount did since it was mounted (or since
 * ARB_IOC_RESET_STATS).  Anyone may ask.  2560 bytes.
 */
struct arb_ioc_stats {
	__u32 size;
	__u32 version;
	/* out: ARB_IOC_STATE_* */
	__u64 state;
	/* out: time the counters cover (ns since mount or reset) */
	__u64 elapsed_ns;
	/* out: generation of the last durable commit */
	__u64 generation;
	/* out: commits that wrote a superblock, and their summed duration */
	__u64 commits;
	__u64 commit_ns;
	/* out: node cache lookups found in memory / read from the image */
	__u64 cache_hits;
	__u64 cache_misses;
	/* out: bytes of tree nodes in the cache now */
	__u64 cache_bytes;
	/* out: bytes written to / read from the image, by kind:
	 * [0] superblocks, [1] tree nodes, [2] file data, [3] other */
	__u64 image_bytes_written[4];
	__u64 image_bytes_read[4];
	/* out: file bytes received in WRITE requests / sent in READ replies */
	__u64 user_bytes_written;
	__u64 user_bytes_read;
	/* out: entries of ops the daemon fills (its ARB_IOC_OP_NR) */
	__u32 nr_ops;
	/* out: errno (positive) that failed the filesystem, 0 if none */
	__u32 error;
	/* out (version 2): copies of every tree node (1 or 2), node reads a
	 * second copy answered (the first rewritten) and node reads no copy
	 * could answer, since mount (not reset by ARB_IOC_RESET_STATS) */
	__u64 meta_copies;
	__u64 nodes_healed;
	__u64 nodes_unrecoverable;
	/* out (version 3): of commit_ns, the time in each phase: delayed
	 * file data, root items and reference counts, node writes, flushes
	 * and superblock */
	__u64 commit_phase_ns[4];
	/* out (version 3): fsync requests; those that committed; those that
	 * joined another fsync's commit (group commit); those that found
	 * nothing uncommitted */
	__u64 fsyncs;
	__u64 fsync_commits;
	__u64 fsync_joined;
	__u64 fsync_durable;
	/* out (version 4): requests served through FUSE over io_uring,
	 * since mount (not reset); ring threads serving now (0: every
	 * request comes through /dev/fuse); times a ring thread at
	 * SCHED_IDLE was found waiting for its CPU and moved to normal
	 * priority for a while, since mount */
	__u64 uring_requests;
	__u64 uring_threads;
	__u64 uring_starved;
	/* out (version 5): of commits, those that flushed before writing
	 * the superblock too (more written than a commit record holds) */
	__u64 commits_two_flush;
	/* out (version 6): flushes a streaming writer made between commits
	 * (flush-behind: more bulk data than a limit unflushed) */
	__u64 flushes_behind;
	/* out (version 7): of image_bytes_read, those read past the host's
	 * page cache (large data reads, O_DIRECT) */
	__u64 image_bytes_read_direct;
	/* out (version 8): the dirty limit the daemon sets while fsyncs
	 * come (bytes, 0: it does not), and how often it set it since
	 * mount (fuse/syncmode.c) */
	__u64 fsync_dirty_limit;
	__u64 fsync_dirty_lowered;
	/* out (version 13): file bytes copy_file_range shared instead of
	 * copying, and bytes ARB_IOC_DEDUPE_RANGE shared */
	__u64 cloned_bytes;
	__u64 deduped_bytes;
	/* out (version 17): compressed extents written, the file bytes
	 * they hold and the bytes they take in the image */
	__u64 compressed_extents;
	__u64 compressed_ram_bytes;
	__u64 compressed_stored_bytes;
	/* out (version 17): of compressed_ram_bytes, those compressed by
	 * their writer before it took the lock (the rest: by the flush) */
	__u64 compressed_early_bytes;
	__u64 reserved[19];
	/* out: per kind of FUSE request, indexed by enum arb_ioc_op */
	struct arb_ioc_op_stat ops[ARB_IOC_OPS_MAX];
};

/*
 * ARB_IOC_RESIZE: grow or shrink the filesystem and its image file to
 * size bytes (privileged).  Shrinking only gives back free space at the
 * end (error EBUSY when something lives there).  128 bytes.
 */
struct arb_ioc_resize {
	__u32 size;
	__u32 version;
	/* in: flags, none defined yet: 0 */
	__u64 flags;
	/* in: the new size in bytes (rounded down to the sector size) */
	__u64 new_size;
	/* out: the size after the call */
	__u64 total;
	/* out: 0, or the errno (positive) of a resize that failed: the
	 * ioctl itself then succeeds, so that why reaches the caller */
	__u32 error;
	__u32 pad;
	/* out: on failure, why (NUL-terminated) */
	char why[88];
};

/*
 * ARB_IOC_SCRUB_START (privileged) starts a scrub in the background of the
 * daemon (EBUSY if one runs); ARB_IOC_SCRUB_STATUS (anyone) reports the
 * running or last scrub; ARB_IOC_SCRUB_CANCEL (privileged) stops it.
 * A scrub reads every tree node (every copy) and data block in use,
 * verifies its checksum and rewrites a bad copy of a node from a good one.
 * 2048 bytes.
 */
#define ARB_IOC_SCRUB_IDLE 0     /* none since mount */
#define ARB_IOC_SCRUB_RUNNING 1
#define ARB_IOC_SCRUB_FINISHED 2
#define ARB_IOC_SCRUB_CANCELLED 3
#define ARB_IOC_SCRUB_FAILED 4   /* the walk itself failed: error */
#define ARB_IOC_SCRUB_LINES 12   /* problem lines kept (the first ones) */
#define ARB_IOC_SCRUB_LINE_LEN 128
struct arb_ioc_scrub {
	__u32 size;
	__u32 version;
	/* in (start): flags, none defined yet: 0 */
	__u64 flags;
	/* out: ARB_IOC_SCRUB_* */
	__u32 state;
	/* out: errno (positive) when FAILED */
	__u32 error;
	/* out: ns since it started, and its duration once over */
	__u64 elapsed_ns;
	/* out: bytes in use at the start, bytes read so far, address reached */
	__u64 total_bytes;
	__u64 bytes_checked;
	__u64 position;
	/* out: counters (struct arb_scrub_stats of arbor.h) */
	__u64 nodes_checked;
	__u64 nodes_corrected;
	__u64 nodes_uncorrectable;
	__u64 data_sectors_checked;
	__u64 data_uncorrectable;
	__u64 data_no_csum;
	__u64 csum_errors;
	__u64 read_errors;
	__u64 files_affected;
	/* out: problem lines reported, and how many are below */
	__u64 nr_problems;
	__u32 nr_lines;
	__u32 pad;
	__u64 reserved[46];
	char lines[ARB_IOC_SCRUB_LINES][ARB_IOC_SCRUB_LINE_LEN];
};

/*
 * ARB_IOC_CHECK_START (privileged) runs the checker of fsck.arborfs in the
 * background of the daemon on the generation it commits first, while the
 * filesystem stays in use (EBUSY if a check runs); ARB_IOC_CHECK_STATUS
 * (anyone) reports the running or last check; ARB_IOC_CHECK_CANCEL
 * (privileged) stops it.  Blocks that generation uses and later commits
 * free are not reused until the check ends; if the filesystem runs short
 * of space meanwhile the check is cancelled (state CANCELLED, error
 * ENOSPC) rather than a write failing.  4096 bytes.
 */
#define ARB_IOC_CHECK_IDLE 0      /* none since mount */
#define ARB_IOC_CHECK_RUNNING 1
#define ARB_IOC_CHECK_FINISHED 2  /* nr_problems says what it found */
#define ARB_IOC_CHECK_CANCELLED 3 /* error: ECANCELED asked, ENOSPC space */
#define ARB_IOC_CHECK_FAILED 4    /* the check itself failed: error */
#define ARB_IOC_CHECK_LINES 24    /* problem lines kept (the first ones) */
#define ARB_IOC_CHECK_LINE_LEN 160
struct arb_ioc_check {
	__u32 size;
	__u32 version;
	/* in (start): flags, none defined yet: 0 */
	__u64 flags;
	/* out: ARB_IOC_CHECK_* */
	__u32 state;
	/* out: errno (positive) when CANCELLED or FAILED */
	__u32 error;
	/* out: ns since it started, and its duration once over */
	__u64 elapsed_ns;
	/* out: the generation checked, and its bytes in use */
	__u64 generation;
	__u64 bytes_used;
	/* out: image bytes read so far (progress; tree nodes are read
	 * twice, so this ends above bytes_used) */
	__u64 bytes_read;
	/* out (FINISHED): tree nodes, items and data sectors checked */
	__u64 nodes;
	__u64 items;
	__u64 sectors;
	/* out (FINISHED): problems found, and how many lines are below */
	__u64 nr_problems;
	__u32 nr_lines;
	__u32 pad;
	__u64 reserved[20];
	/* out: "name: detail" of the first problems (fsck.arborfs's lines) */
	char lines[ARB_IOC_CHECK_LINES][ARB_IOC_CHECK_LINE_LEN];
};

/*
 * ARB_IOC_GET_INFO: what `arbor filesystem show` prints.
 * ARB_IOC_SET_LABEL (privileged): a new label (label[], NUL-terminated,
 * at most 255 bytes), committed before the reply.
 */
struct arb_ioc_info {
	__u32 size;
	__u32 version;
	/* out: UUID of the filesystem, and of the default subvolume's tree */
	__u8 uuid[16];
	__u8 fs_tree_uuid[16];
	/* out: size, generation of the last durable commit */
	__u64 total_bytes;
	__u64 generation;
	/* out: node and sector size, format version, metadata copies */
	__u32 nodesize;
	__u32 sectorsize;
	__u32 format_version;
	__u32 meta_copies;
	/* out: feature bits */
	__u64 incompat;
	__u64 compat;
	__u64 ro_compat;
	/* out: 1 if mounted read-only */
	__u32 readonly;
	__u32 pad;
	__u64 reserved[8];
	/* in (SET_LABEL) / out (GET_INFO): the label, NUL-terminated */
	char label[256];
};

/*
 * Subvolumes and snapshots (arbor/subvol.h), on a directory (or any
 * inode) of the mount.  FUSE passes no file descriptor: a name is taken
 * in the directory the ioctl's descriptor names, and the source of a
 * snapshot is named by the st_ino of its root directory (the caller
 * fstat(2)s it; st_ino is the library's inode number, arb_inum).
 *
 * Permissions (checked by the daemon against the caller's uid, gid and
 * groups: control requests bypass default_permissions), as btrfs with
 * its defaults:
 *   CREATE, SNAPSHOT  write and search permission on the directory, as
 *                     mkdir(2) needs; SNAPSHOT also read and search
 *                     permission on the source's root and, as btrfs,
 *                     owning it (or uid 0, CAP_FOWNER)
 *   DELETE            uid 0 or CAP_SYS_ADMIN; with the mount option
 *                     user_subvol_rm_allowed also the owner of the
 *                     subvolume's root who may remove entries of the
 *                     directory (write and search, sticky bit)
 *   SET_FLAGS         the owner of the subvolume's root, uid 0 or
 *                     CAP_FOWNER
 *   SET_DEFAULT       uid 0 or CAP_SYS_ADMIN
 *   INFO, LIST, PATH, WAIT, GET_DEFAULT   anyone
 * Errors besides the usual: EEXIST the name exists, ENOTDIR the
 * descriptor is not a directory (CREATE/SNAPSHOT/DELETE), EINVAL the
 * source (SNAPSHOT) or the name (DELETE) is not a subvolume, EBUSY
 * deleting the filesystem tree, the subvolume the mount shows as its
 * root or the default subvolume, ENOTEMPTY deleting a subvolume that holds another, EROFS the
 * directory is in a read-only subvolume, ENOENT no such id (INFO, PATH,
 * WAIT).  CREATE, SNAPSHOT and DELETE answer once the kernel has dropped
 * its cached entry of the name: every process sees the change at once.
 */
/* flags: arb_ioc_subvol_create.flags (SNAPSHOT), arb_ioc_subvol_flags,
 * arb_ioc_subvol_entry.flags */
#define ARB_IOC_SUBVOL_RDONLY (1u << 0)
/* entry only: deleted, its space still being given back */
#define ARB_IOC_SUBVOL_DELETED (1u << 1)
/* arb_ioc_subvol_entry.flags: the mount shows this subvolume as its root */
#define ARB_IOC_SUBVOL_MOUNT_ROOT (1u << 2)
/* entry only: a receive cut short, kept for a resume (with DELETED; its
 * rtransid is the objectid to resume at: arb_resume_token_format) */
#define ARB_IOC_SUBVOL_PARTIAL (1u << 3)

/* One subvolume (struct arb_subvol_info).  512 bytes, no header. */
struct arb_ioc_subvol_entry {
	/* tree id (5 for the filesystem tree, or from 256) */
	__u64 id;
	/* st_ino of its root directory */
	__u64 ino;
	/* where it is linked: the parent subvolume's id and the st_ino of
	 * the directory there (0 for tree 5 and for deleted ones) */
	__u64 parent_id;
	__u64 dir_ino;
	/* a snapshot: the tree it was taken of (0: none) */
	__u64 source_id;
	/* generation that created it, and of its last change */
	__u64 otransid;
	__u64 gen;
	/* receive: sent and received generations (0: not received) */
	__u64 stransid;
	__u64 rtransid;
	/* creation time, and last change of its flags */
	__s64 otime_sec;
	__s64 ctime_sec;
	__u32 otime_nsec;
	__u32 ctime_nsec;
	/* ARB_IOC_SUBVOL_* */
	__u32 flags;
	__u32 pad;
	__u8 uuid[16];
	/* a snapshot: its source's uuid; else zero */
	__u8 parent_uuid[16];
	/* made by a receive: the sender's uuid; else zero */
	__u8 received_uuid[16];
	/* deleted: how far its cleaning has come (struct arb_subvol_info
	 * clean_*): tree nodes visited, freed, thousandths of the tree */
	__u64 clean_nodes;
	__u64 clean_freed;
	__u32 clean_permille;
	__u32 pad2;
	/* a partial receive (ARB_IOC_SUBVOL_PARTIAL): the offset in the
	 * resume inode (rtransid) its data resumes at */
	__u64 resume_off;
	__u64 reserved[9];
	/* its name in the directory dir_ino, NUL-terminated */
	char name[256];
};

/*
 * ARB_IOC_SUBVOL_CREATE: a new empty subvolume name in the directory
 * (flags 0, src_ino 0).  ARB_IOC_SUBVOL_SNAPSHOT: a snapshot of the
 * subvolume whose root directory has st_ino src_ino, linked as name in
 * the directory; flags ARB_IOC_SUBVOL_RDONLY makes it read-only.  The
 * caller flushes the kernel's dirty pages first (syncfs(2) on the
 * source): the daemon's delayed data is flushed into the source by the
 * snapshot itself, which is committed when the ioctl returns.  512 bytes.
 */
struct arb_ioc_subvol_create {
	__u32 size;
	__u32 version;
	/* in: ARB_IOC_SUBVOL_RDONLY (snapshot) */
	__u64 flags;
	/* in (snapshot): st_ino of the source subvolume's root */
	__u64 src_ino;
	/* out: the new subvolume's id and the st_ino of its root */
	__u64 id;
	__u64 ino;
	__u64 reserved[27];
	/* in: the name, NUL-terminated (no '/', not "." or "..") */
	char name[256];
};

/*
 * ARB_IOC_SUBVOL_DELETE: delete the subvolume linked as name in the
 * directory.  The name goes at once (committed on return); its space
 * comes back in the background (ARB_IOC_SUBVOL_WAIT).  Open files of it
 * keep working until closed.  512 bytes (struct arb_ioc_subvol_create:
 * flags 0, src_ino 0; out: id of the deleted subvolume, ino its root).
 */

/*
 * ARB_IOC_SUBVOL_INFO: the subvolume with id, or (id 0) the one holding
 * the inode the descriptor names.  Anyone may ask.  576 bytes.
 */
struct arb_ioc_subvol_info {
	__u32 size;
	__u32 version;
	/* in: the id, or 0 */
	__u64 id;
	/* out: the id of the subvolume the mount shows as its root */
	__u64 mount_root_id;
	__u64 reserved[5];
	/* out */
	struct arb_ioc_subvol_entry e;
};

/*
 * ARB_IOC_SUBVOL_LIST: the subvolumes with id >= start (tree 5 first,
 * then by id; deleted ones still being cleaned too), at most
 * ARB_IOC_SUBVOL_LIST_MAX per call; call again with start = next until
 * next is 0.  Anyone may ask.  8256 bytes.
 */
#define ARB_IOC_SUBVOL_LIST_MAX 16
struct arb_ioc_subvol_list {
	__u32 size;
	__u32 version;
	/* in: the first id wanted (0: from the start) */
	__u64 start;
	/* out: entries filled */
	__u32 nr;
	__u32 pad;
	/* out: the start of the next call, 0 when this was the last */
	__u64 next;
	/* out: the id of the subvolume the mount shows as its root */
	__u64 mount_root_id;
	__u64 reserved[3];
	struct arb_ioc_subvol_entry e[ARB_IOC_SUBVOL_LIST_MAX];
};

/*
 * ARB_IOC_SUBVOL_PATH: the path of subvolume id's root from the
 * filesystem tree's root directory, without a leading slash ("" for tree
 * 5).  ENOENT for a deleted one, ENAMETOOLONG if it does not fit.
 * Anyone may ask.  4096 bytes.
 */
struct arb_ioc_subvol_path {
	__u32 size;
	__u32 version;
	/* in */
	__u64 id;
	__u64 reserved[2];
	/* out, NUL-terminated */
	char path[4064];
};

/*
 * ARB_IOC_SUBVOL_SET_FLAGS: make the subvolume holding the inode the
 * descriptor names read-only (flags ARB_IOC_SUBVOL_RDONLY) or writable
 * (0).  Making a received snapshot writable clears its received UUID
 * (cleared_received 1).  The caller flushes the kernel's dirty pages
 * first (syncfs(2)): a page written back after the change would fail.
 * EINVAL for tree 5 made read-only.  128 bytes.
 */
struct arb_ioc_subvol_flags {
	__u32 size;
	__u32 version;
	/* in */
	__u64 flags;
	/* out: the subvolume's id */
	__u64 id;
	/* out: 1 if its received UUID was cleared */
	__u32 cleared_received;
	__u32 pad;
	__u64 reserved[12];
};

/*
 * ARB_IOC_SUBVOL_WAIT: wait until the deleted subvolume id (0: every one
 * deleted) has been cleaned and its space is free.  0 also when it was
 * cleaned already; ENOENT for an id that was never deleted.  Anyone may
 * ask; answered by a thread of the daemon's own.  128 bytes.
 */
struct arb_ioc_subvol_wait {
	__u32 size;
	__u32 version;
	/* in */
	__u64 id;
	__u64 reserved[14];
};

/*
 * ARB_IOC_SUBVOL_GET_DEFAULT: the default subvolume, the one a mount
 * without -o subvol= or subvolid= shows as its root (5: the filesystem
 * tree).  Anyone may ask.  ARB_IOC_SUBVOL_SET_DEFAULT (uid 0 or
 * CAP_SYS_ADMIN): make id the default, or (id 0) the subvolume holding
 * the inode the descriptor names; committed when the ioctl returns, seen
 * by the next mount.  ENOENT: no such subvolume, or one being deleted.
 * The default cannot be deleted (EBUSY).  128 bytes.
 */
struct arb_ioc_subvol_default {
	__u32 size;
	__u32 version;
	/* in (SET): the id, or 0; out: the default subvolume's id */
	__u64 id;
	__u64 reserved[14];
};

/*
 * ARB_IOC_SUBVOL_USAGE: the bytes of subvolume id (0: the one holding the
 * inode the descriptor names) that no other subvolume shares, and those
 * it shares (arb_subvol_usage: exact, from the reference counts; walks
 * the subvolume's tree, so it takes time on a large one).  Anyone may
 * ask.  128 bytes.
 */
struct arb_ioc_subvol_usage {
	__u32 size;
	__u32 version;
	/* in: the id, or 0; out: the id */
	__u64 id;
	/* out: data extents, whole */
	__u64 exclusive;
	__u64 shared;
	/* out: tree nodes, every copy */
	__u64 meta_exclusive;
	__u64 meta_shared;
	__u64 reserved[10];
};

/*
 * ARB_IOC_DEDUPE_RANGE, on the destination: FIDEDUPERANGE for one
 * destination (the kernel does not pass that ioctl to FUSE).  If
 * [src_off, src_off + len) of the source and [dst_off, dst_off + len) of
 * the destination hold the same bytes (compared byte for byte by the
 * daemon), the destination's range comes to share the source's data
 * (arb_fs_dedupe_range); otherwise status is ARB_IOC_DEDUPE_DIFFERS and
 * nothing changes.  Offsets block aligned (EINVAL); the range is cut at
 * the source's end and must lie inside the destination; whole blocks
 * unless it ends both files.  The source is src_fd, a descriptor of the
 * calling process open for reading on the same mount; the destination
 * descriptor must be open for writing, or its file owned by the caller,
 * or the caller privileged (the kernel's rule for dedupe); EPERM
 * otherwise, and when the caller's descriptors cannot be seen (another
 * pid namespace).  The range is compared holding the filesystem's lock:
 * ask for a few MiB at a time.  128 bytes.
 */
#define ARB_IOC_DEDUPE_SAME 0
#define ARB_IOC_DEDUPE_DIFFERS 1
struct arb_ioc_dedupe_range {
	__u32 size;
	__u32 version;
	/* in: the source, a descriptor of the caller */
	__s32 src_fd;
	/* in: none defined yet: 0 */
	__u32 flags;
	/* in: the ranges (bytes) */
	__u64 src_off;
	__u64 len;
	__u64 dst_off;
	/* out: bytes now shared */
	__u64 bytes;
	/* out: ARB_IOC_DEDUPE_SAME or ARB_IOC_DEDUPE_DIFFERS */
	__u32 status;
	__u32 pad;
	__u64 reserved[9];
};

/*
 * ARB_IOC_FILE_SPACE, on any file the caller could open: what its data
 * takes (arb_fs_file_space, arbor.h), for `arbor filesystem du`.
 * 128 bytes.
 */
struct arb_ioc_file_space {
	__u32 size;
	__u32 version;
	/* out: file bytes with data, and the bytes they take in the image */
	__u64 bytes;
	__u64 stored;
	/* out: the part of both in compressed extents */
	__u64 compressed_bytes;
	__u64 compressed_stored;
	/* out: preallocated bytes (not in bytes or stored) */
	__u64 prealloc_bytes;
	/* out: extents, and compressed ones */
	__u64 extents;
	__u64 compressed_extents;
	__u64 reserved[8];
};

/*
 * ARB_IOC_FIND_NEW: the inodes of subvolume id_a (0: the one holding the
 * inode the descriptor names) changed after generation gen
 * (arbor/diff.h, arb_find_new).  ARB_IOC_DIFF: what changed from
 * subvolume id_a to id_b (arb_tree_diff).  Privileged (uid 0 or
 * CAP_SYS_ADMIN, as btrfs's find-new): the answer names files in
 * directories the caller may not be able to read.
 *
 * The answer may be larger than one ioctl carries, so it comes in pages:
 * the first call has cursor 0 and cursor_sub 0 (it commits pending
 * changes first, so that generation holds everything written before it);
 * each answer fills data[] with used bytes of records and sets cursor and
 * cursor_sub to pass to the next call, until done is 1.  The statistics
 * are those of the page.  Later pages see later commits of a live
 * subvolume: an inode changed meanwhile may show up in this answer and
 * again in the next find-new from generation, never in neither.
 *
 * data[] holds records back to back, each at a multiple of 8 bytes:
 *
 *   OFFSET SIZE DESCRIPTION
 *   0      2    type: ARB_IOC_DIFF_REC_*
 *   2      2    reserved, 0
 *   4      4    len: bytes of payload after this 8-byte header
 *   8      len  payload; the next record starts at 8 + len rounded up to 8
 *
 * An inode is an INODE record (struct arb_ioc_diff_inode) followed by its
 * PATH, OLD_PATH (NUL-terminated, relative to the subvolume's root, "."
 * for the root) and RANGE (struct arb_ioc_diff_range) records; a page may
 * end inside an inode's records, and the next page goes on with the
 * rest.  Unknown record types are skipped by their length.
 */
#define ARB_IOC_DIFF_REC_INODE 1
#define ARB_IOC_DIFF_REC_PATH 2
#define ARB_IOC_DIFF_REC_OLD_PATH 3
#define ARB_IOC_DIFF_REC_RANGE 4
#define ARB_IOC_DIFF_DATA 16000

struct arb_ioc_diff_rec {
	__u16 type;
	__u16 pad;
	__u32 len;
};

/* struct arb_change (arbor/diff.h), flags ARB_CHANGE_* */
struct arb_ioc_diff_inode {
	__u64 ino;
	__u64 obj;
	__u32 flags;
	__u32 mode;
	__u64 size;
	__u64 old_size;
	__u64 transid;
	__u32 nr_paths;
	__u32 nr_old_paths;
	__u32 nr_ranges;
	__u32 pad;
};

struct arb_ioc_diff_range {
	__u64 off;
	__u64 len;
};

struct arb_ioc_diff {
	__u32 size;
	__u32 version;
	/* in: the subvolume (FIND_NEW), A (DIFF); 0: the descriptor's */
	__u64 id_a;
	/* in (DIFF): B */
	__u64 id_b;
	/* in (FIND_NEW): report changes after this generation */
	__u64 gen;
	/* in: where to go on (0, 0 first); out: what to pass next */
	__u64 cursor;
	__u32 cursor_sub;
	/* out: 1 when this page is the last */
	__u32 done;
	/* out: the generation the answer holds (the first page's is the
	 * one to pass as gen next time) */
	__u64 generation;
	/* out: arb_diff_stats of this page */
	__u64 nodes_visited;
	__u64 subtrees_skipped;
	__u64 nodes_read;
	__u64 items;
	__u64 inodes;
	/* out: bytes of data[] used */
	__u32 used;
	__u32 pad;
	__u64 reserved[8];
	__u8 data[ARB_IOC_DIFF_DATA];
};

/*
 * ARB_IOC_SEND, ARB_IOC_RECEIVE, ARB_IOC_DIGEST (arbor/send.h): uid 0 or
 * CAP_SYS_ADMIN.  FUSE ioctls carry no descriptors and no stream, so the
 * caller names one of its own descriptors (fd) and the daemon opens it
 * through /proc/PID/fd/FD of the calling thread's process (blocked in
 * ioctl(2) meanwhile), for writing (send) or reading (receive), and
 * streams through it until the end: a pipe carries a stream of any size.
 * SEND: the subvolume holding the inode the descriptor names (or id),
 * full or incremental against parent (an id; 0: full).  RECEIVE: into
 * the directory the descriptor names.  DIGEST: of the subvolume holding
 * the inode (or id).  The ioctl itself succeeds when the request was
 * carried out or refused with a reason: result is 0 or a negative errno
 * and error the sentence that says why.  1024 bytes.
 */
struct arb_ioc_send {
	__u32 size;
	__u32 version;
	/* in: the caller's descriptor of the stream (SEND, RECEIVE) */
	__s32 fd;
	/* in: ARB_IOC_SEND_ESTIMATE (SEND) */
	__u32 flags;
	/* in: subvolume id (0: the one holding the inode); out: the id sent
	 * or digested, or the new subvolume's (RECEIVE) */
	__u64 id;
	/* in: the parent's id (SEND; 0: a full stream) */
	__u64 parent;
	/* out: stream bytes, commands, inodes sent, data bytes sent */
	__u64 bytes;
	__u64 commands;
	__u64 inodes;
	__u64 data;
	/* out: 0 or a negative errno */
	__s32 result;
	__u32 pad;
	/* out: the digest (DIGEST, RECEIVE) */
	__u8 digest[32];
	/* out (SEND): file bytes sent as clones; compressed extents sent
	 * as stored: their file bytes and their stored bytes */
	__u64 cloned;
	__u64 encoded;
	__u64 encoded_stored;
	/* out (RECEIVE, on failure): "" or the token to resume it with
	 * (SEND with ARB_IOC_SEND_RESUME takes the token in name) */
	char resume_token[96];
	__u64 reserved[4];
	/* out (RECEIVE): the name of the new subvolume in the directory */
	char name[256];
	/* out: on failure, what went wrong and where */
	char error[512];
};
#define ARB_IOC_SEND_ESTIMATE (1u << 0)
/* SEND: stream format version 1, for an older receiver (ARB_SEND_PROTO1) */
#define ARB_IOC_SEND_PROTO1 (1u << 1)
/* SEND: the rest of the stream of a receive cut short; name holds the
 * resume token (arb_send_resume).  RECEIVE: refuse a stream that is not
 * such a rest (ARB_RECEIVE_RESUMED) */
#define ARB_IOC_SEND_RESUME (1u << 2)
/* RECEIVE: no stream; give up the partial receive whose resume token is
 * in name (arb_receive_discard) */
#define ARB_IOC_RECV_DISCARD (1u << 3)
/* SEND: stream format version 2 (ARB_SEND_PROTO2) */
#define ARB_IOC_SEND_PROTO2 (1u << 4)
/* DIGEST: digest version 1 (arb_subvol_digest_portable) */
#define ARB_IOC_DIGEST_PORTABLE (1u << 5)

#define ARB_IOC_GET_GENERATION _IOR(ARB_IOC_MAGIC, 1, struct arb_ioc_generation)
#define ARB_IOC_SYNC _IOWR(ARB_IOC_MAGIC, 2, struct arb_ioc_sync)
#define ARB_IOC_GET_USAGE _IOR(ARB_IOC_MAGIC, 3, struct arb_ioc_usage)
#define ARB_IOC_GET_STATS _IOR(ARB_IOC_MAGIC, 4, struct arb_ioc_stats)
/* privileged: start the counters of ARB_IOC_GET_STATS from zero */
#define ARB_IOC_RESET_STATS _IO(ARB_IOC_MAGIC, 5)
#define ARB_IOC_RESIZE _IOWR(ARB_IOC_MAGIC, 6, struct arb_ioc_resize)
#define ARB_IOC_SCRUB_START _IOWR(ARB_IOC_MAGIC, 7, struct arb_ioc_scrub)
#define ARB_IOC_SCRUB_STATUS _IOR(ARB_IOC_MAGIC, 8, struct arb_ioc_scrub)
#define ARB_IOC_SCRUB_CANCEL _IO(ARB_IOC_MAGIC, 9)
#define ARB_IOC_CHECK_START _IOWR(ARB_IOC_MAGIC, 10, struct arb_ioc_check)
#define ARB_IOC_CHECK_STATUS _IOR(ARB_IOC_MAGIC, 11, struct arb_ioc_check)
#define ARB_IOC_CHECK_CANCEL _IO(ARB_IOC_MAGIC, 12)
#define ARB_IOC_GET_INFO _IOR(ARB_IOC_MAGIC, 13, struct arb_ioc_info)
#define ARB_IOC_SET_LABEL _IOW(ARB_IOC_MAGIC, 14, struct arb_ioc_info)
#define ARB_IOC_SUBVOL_CREATE                                                  \
	_IOWR(ARB_IOC_MAGIC, 15, struct arb_ioc_subvol_create)
#define ARB_IOC_SUBVOL_SNAPSHOT                                                \
	_IOWR(ARB_IOC_MAGIC, 16, struct arb_ioc_subvol_create)
#define ARB_IOC_SUBVOL_DELETE                                                  \
	_IOWR(ARB_IOC_MAGIC, 17, struct arb_ioc_subvol_create)
#define ARB_IOC_SUBVOL_INFO _IOWR(ARB_IOC_MAGIC, 18, struct arb_ioc_subvol_info)
#define ARB_IOC_SUBVOL_LIST _IOWR(ARB_IOC_MAGIC, 19, struct arb_ioc_subvol_list)
#define ARB_IOC_SUBVOL_PATH _IOWR(ARB_IOC_MAGIC, 20, struct arb_ioc_subvol_path)
#define ARB_IOC_SUBVOL_SET_FLAGS                                               \
	_IOWR(ARB_IOC_MAGIC, 21, struct arb_ioc_subvol_flags)
#define ARB_IOC_SUBVOL_WAIT _IOWR(ARB_IOC_MAGIC, 22, struct arb_ioc_subvol_wait)
#define ARB_IOC_SUBVOL_GET_DEFAULT                                             \
	_IOWR(ARB_IOC_MAGIC, 23, struct arb_ioc_subvol_default)
#define ARB_IOC_SUBVOL_SET_DEFAULT                                             \
	_IOWR(ARB_IOC_MAGIC, 24, struct arb_ioc_subvol_default)
#define ARB_IOC_SUBVOL_USAGE                                                   \
	_IOWR(ARB_IOC_MAGIC, 25, struct arb_ioc_subvol_usage)
#define ARB_IOC_FIND_NEW _IOWR(ARB_IOC_MAGIC, 30, struct arb_ioc_diff)
#define ARB_IOC_DIFF _IOWR(ARB_IOC_MAGIC, 31, struct arb_ioc_diff)

/* 40 and up: reflink and deduplication */
#define ARB_IOC_DEDUPE_RANGE                                                   \
	_IOWR(ARB_IOC_MAGIC, 40, struct arb_ioc_dedupe_range)
#define ARB_IOC_FILE_SPACE _IOWR(ARB_IOC_MAGIC, 41, struct arb_ioc_file_space)
/* send streams: numbers 50..59 */
#define ARB_IOC_SEND _IOWR(ARB_IOC_MAGIC, 50, struct arb_ioc_send)
#define ARB_IOC_RECEIVE _IOWR(ARB_IOC_MAGIC, 51, struct arb_ioc_send)
#define ARB_IOC_DIGEST _IOWR(ARB_IOC_MAGIC, 52, struct arb_ioc_send)
#define ARB_IOC_GET_HISTORY _IOR(ARB_IOC_MAGIC, 32, struct arb_ioc_history)

#ifndef __cplusplus
_Static_assert(sizeof(struct arb_ioc_dedupe_range) == 128, "ioctl ABI");
_Static_assert(sizeof(struct arb_ioc_generation) == 128, "ioctl ABI");
_Static_assert(sizeof(struct arb_ioc_sync) == 128, "ioctl ABI");
_Static_assert(sizeof(struct arb_ioc_usage) == 256, "ioctl ABI");
_Static_assert(sizeof(struct arb_ioc_op_stat) == 32, "ioctl ABI");
_Static_assert(sizeof(struct arb_ioc_stats) == 2560, "ioctl ABI");
_Static_assert(ARB_IOC_OP_NR <= ARB_IOC_OPS_MAX, "ioctl ABI");
_Static_assert(sizeof(struct arb_ioc_resize) == 128, "ioctl ABI");
_Static_assert(sizeof(struct arb_ioc_scrub) == 2048, "ioctl ABI");
_Static_assert(sizeof(struct arb_ioc_check) == 4096, "ioctl ABI");
_Static_assert(sizeof(struct arb_ioc_info) == 424, "ioctl ABI");
_Static_assert(sizeof(struct arb_ioc_subvol_entry) == 512, "ioctl ABI");
_Static_assert(sizeof(struct arb_ioc_subvol_create) == 512, "ioctl ABI");
_Static_assert(sizeof(struct arb_ioc_subvol_info) == 576, "ioctl ABI");
_Static_assert(sizeof(struct arb_ioc_subvol_list) == 8256, "ioctl ABI");
_Static_assert(sizeof(struct arb_ioc_subvol_path) == 4096, "ioctl ABI");
_Static_assert(sizeof(struct arb_ioc_subvol_flags) == 128, "ioctl ABI");
_Static_assert(sizeof(struct arb_ioc_subvol_usage) == 128, "ioctl ABI");
_Static_assert(sizeof(struct arb_ioc_subvol_wait) == 128, "ioctl ABI");
_Static_assert(sizeof(struct arb_ioc_subvol_default) == 128, "ioctl ABI");
_Static_assert(sizeof(struct arb_ioc_diff_rec) == 8, "ioctl ABI");
_Static_assert(sizeof(struct arb_ioc_diff_inode) == 64, "ioctl ABI");
_Static_assert(sizeof(struct arb_ioc_diff_range) == 16, "ioctl ABI");
_Static_assert(sizeof(struct arb_ioc_diff) == 16168, "ioctl ABI");
_Static_assert(sizeof(struct arb_ioc_send) == 1024, "ioctl ABI");
_Static_assert(sizeof(struct arb_ioc_history) == 1024, "ioctl ABI");
#endif

#ifdef __cplusplus
}
#endif
#endif
