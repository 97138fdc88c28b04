/* SPDX-License-Identifier: MIT */
/*
 * arbor/diff.h - what changed in a subvolume: since a generation
 * (find-new), or between two subvolumes of one lineage (diff).
 *
 * Both cost what changed, not what exists (docs/design/send.md, "Finding
 * changes"): every node records the generation that wrote it and shadowing
 * rewrites whole paths, so find-new descends only into children written
 * after the generation asked for; diff walks both trees in key order
 * together and skips every subtree the two share (the same node).
 *
 * Results come one inode at a time, in objectid order, to a callback
 * called with the library's lock held: it must not call into the library.
 * Its non-zero return stops the walk and is returned.  Paths are relative
 * to the subvolume's root directory ("." for the root itself), one per
 * name the inode has (hard links), resolved through its INODE_REF items.
 *
 * Conventions as arbor.h: 0 or a negative errno.  Besides the usual:
 *   -ENOENT        no such subvolume (or one being deleted)
 *   -EUCLEAN       a damaged tree (logged with the node or key)
 *   -ENAMETOOLONG  a path longer than ARB_DIFF_PATH_MAX
 */
#ifndef ARBOR_DIFF_H
#define ARBOR_DIFF_H

#include "arbor/arbor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* struct arb_change.flags */
/* created: after the generation (find-new), only in B (diff) */
#define ARB_CHANGE_NEW (1u << 0)
/* diff: only in A */
#define ARB_CHANGE_DELETED (1u << 1)
/* file data (or a symlink's target): ranges says where */
#define ARB_CHANGE_DATA (1u << 2)
/* diff: the size differs (old_size, size) */
#define ARB_CHANGE_SIZE (1u << 3)
/* the inode item: find-new, any change of it (size, mode, owner, times,
 * link count, flags: it cannot tell which); diff, one of mode, owner,
 * link count, device, flags, mtime, ctime or birth time (not atime) */
#define ARB_CHANGE_META (1u << 4)
/* extended attributes: find-new, one set since the generation; diff, any
 * added, changed or removed */
#define ARB_CHANGE_XATTR (1u << 5)
/* diff: its names (renamed, a hard link added or removed): old_paths and
 * paths say from what to what */
#define ARB_CHANGE_NAME (1u << 6)
/* a directory's entries: find-new, an entry made since the generation;
 * diff, any added or removed */
#define ARB_CHANGE_ENTRIES (1u << 7)

/* longest path reported (bytes, NUL included) */
#define ARB_DIFF_PATH_MAX 4096

struct arb_change_range {
	uint64_t off, len; /* file bytes [off, off + len) */
};

struct arb_change {
	/* st_ino: in the subvolume (find-new), in B (diff; in A when
	 * DELETED), and the objectid in its tree (the same in A and B) */
	uint64_t ino, obj;
	uint32_t flags; /* ARB_CHANGE_* */
	uint32_t mode;  /* st_mode (B's, A's when DELETED) */
	uint64_t size;  /* i_size (B's, A's when DELETED) */
	uint64_t old_size; /* diff: A's i_size (0 when NEW); find-new: 0 */
	uint64_t transid;  /* i_transid: generation of its last change */
	/* DATA: where extent items were added, changed or removed (sorted,
	 * merged; a superset of the bytes that differ: an extent item split
	 * without a change of its bytes counts) */
	size_t nr_ranges;
	const struct arb_change_range *ranges;
	/* its paths: in the subvolume (find-new), in B (diff; A when DELETED) */
	size_t nr_paths;
	char *const *paths;
	/* diff with NAME: its paths in A */
	size_t nr_old_paths;
	char *const *old_paths;
};

typedef int (*arb_change_fn)(void *ctx, const struct arb_change *c);

/* What a walk cost (filled in also when it fails or is stopped). */
struct arb_diff_stats {
	/* the generation the answer holds: pass it as gen next time */
	uint64_t generation;
	/* tree nodes the walk descended into, and subtrees it skipped
	 * (older than gen, or shared by both trees) */
	uint64_t nodes_visited, subtrees_skipped;
	/* node reads that missed the cache (path lookups included): what
	 * the walk read from the image */
	uint64_t nodes_read;
	/* items compared or examined, inodes reported */
	uint64_t items, inodes;
};

/*
 * Every inode of subvolume id (ARB_INUM_FS_TREE or a subvolume's id)
 * changed after generation gen, from objectid start on (0: all; a cursor
 * for a caller taking the answer in parts).  With start 0 it commits
 * pending changes first (not on a read-only filesystem), so that the
 * answer holds everything written before the call and st->generation is
 * the one to ask from next time (later parts do not commit).  Deleted inodes leave nothing to find: their
 * directories show as changed (use arb_tree_diff between snapshots to
 * name them).
 */
int arb_find_new(struct arb_fs *fs, uint64_t id, uint64_t gen, uint64_t start,
		 arb_change_fn fn, void *ctx, struct arb_diff_stats *st);

/*
 * What changed from subvolume id_a to subvolume id_b (typically two
 * read-only snapshots, A the older), from objectid start on: created,
 * deleted, renamed (NAME) and modified inodes.  With start 0 it commits
 * pending changes first, as arb_find_new.  Trees of one lineage (snapshots of one
 * another) share most nodes and cost what differs; unrelated trees cost a
 * walk of both.
 */
int arb_tree_diff(struct arb_fs *fs, uint64_t id_a, uint64_t id_b,
		  uint64_t start, arb_change_fn fn, void *ctx,
		  struct arb_diff_stats *st);

#ifdef __cplusplus
}
#endif

#endif
