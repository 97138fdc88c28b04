/* SPDX-License-Identifier: MIT */
/*
 * fs_int.h - private header of the POSIX layer (lib/fs/): struct arb_fs and
 * the helpers its files share.
 *
 * Files (one job each):
 *   fs.c       open/close, mkfs, the commit thread, statfs and stats, the
 *              op_begin/op_end transaction wrappers
 *   inum.c     the fs trees of a mount, inode numbers <-> (tree, objectid)
 *   imem.c     the table of open inodes (pins' delayed data)
 *   orphan.c   pins (arb_fs_open_inode) and orphans
 *   fsync.c    sync, fsync and the group commit
 *   inode.c    INODE_ITEM pack/unpack, getattr/setattr, freeing an inode
 *   iflags.c   file attributes (chattr): get/set, what they forbid
 *   dir.c      DIR_ITEM/DIR_INDEX/INODE_REF, lookup, readdir, create,
 *              link/unlink/rmdir/rename, symlink
 *   file data (file_int.h): dmap.c dirty blocks, extent.c EXTENT_DATA
 *              items, csum.c data checksums, read.c read and lseek,
 *              write.c write and truncate, delalloc.c delayed allocation,
 *              falloc.c fallocate
 *   xattr.c    extended attributes
 *   acl.c      POSIX ACLs: parsing, mode <-> ACL consistency, inheritance
 *   fsresize.c growing and shrinking; trim.c discard; info.c label, info
 * The checker's passes over fs trees are in lib/check/ (its interface:
 * check_int.h); this layer never
 * calls them (fs->space_yield is the one hook).
 *
 * Locking: every public entry point takes vol->lock for its whole duration;
 * everything below (struct arb_fs fields included) is protected by it.
 *
 * Transactions: an operation validates everything (existence, names, space)
 * before its first tree modification, then joins the running transaction.
 * A failure after that point is fatal for the transaction: it is aborted
 * (every operation since the last commit is lost, as after a crash), the
 * delayed data is dropped and the filesystem turns read-only (btrfs does
 * the same on a transaction abort).
 *
 * Delayed allocation: writes land in per-inode maps of dirty sector-sized
 * blocks (struct arb_imem).  The pre-commit hook (and fsync, and the dirty
 * limit) turns each run of consecutive dirty blocks into as few contiguous
 * extents as the allocator gives.  The INODE_ITEM (size, times) is updated
 * at write time; only the EXTENT_DATA items wait.  Invariant: bytes past
 * i_size in the block that holds i_size are zero, on disk and in memory.
 */
#ifndef ARB_FS_INT_H
#define ARB_FS_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "arbor/arbor.h"
#include "core.h"
#include "idcount.h"

/* largest nlink we allow (EMLINK past it) */
#define ARB_LINK_MAX 65000
/* largest symlink target */
#define ARB_SYMLINK_MAX 4095
/* most dirty tree nodes past which an operation commits (less with a
 * small cache or filesystem: fs_dirty_nodes_limit): a commit writes all
 * of them (twice with dup) holding the volume lock; 64 MiB took about
 * 200 ms here */
#define ARB_DIRTY_NODES_MAX (64ULL << 20)
/* dirty data of all inodes together past which it is written out */
#define ARB_DIRTY_LIMIT (64ULL << 20)
/* delayed data past this is written out (into the running transaction,
 * without a commit) by the writes that add more: the writer pays for its
 * data as it goes, so that neither an fsync of another file nor the next
 * commit has to write a large backlog while holding the lock */
#define ARB_FLUSH_BATCH (16ULL << 20)
/* the least a writer over ARB_FLUSH_BATCH writes out per write(2) */
#define ARB_FLUSH_STEP (4ULL << 20)
/* a write flushes the image when more bulk data than this was written
 * since the last flush (arb_dev_flush_behind); measured against 64 MiB
 * and none in docs/design/fs.md, "Flush-behind" */
#define ARB_FLUSH_BEHIND (32ULL << 20)
/* largest extent delayed allocation asks for */
#define ARB_MAX_EXTENT (128ULL << 20)
/* metadata bytes an ordinary operation must find free (in nodes) */
#define ARB_OP_META_NODES 16
/* pending reference changes (extents) past which an operation commits */
#define ARB_DREF_COMMIT 2048

/*
 * An fs tree of this mount: the filesystem tree, or (with subvolumes) one
 * of theirs.  Inode numbers name (tree, objectid) as arbor.h says
 * (arb_inum); fs_tree_of() finds the tree of one, fs_obj() its objectid,
 * the key objectid of its items.
 */
struct fs_tree {
	uint64_t id;          /* ROOT_ITEM objectid */
	uint64_t slot;        /* arb_inum_slot(id) */
	struct arb_root *root;
	/* next objectid to hand out (fs_ino_new): above every inode present
	 * and above the tree's r_highest_objectid */
	uint64_t next_ino;
	/* a read-only subvolume (SUBVOL_ITEM): fs_op_begin refuses changes */
	bool rdonly;
	/* deleted: its link is gone, the cleaner drops it once none of its
	 * inodes is pinned */
	bool deleted;
	/* how many of its inodes are pinned (arb_fs_open_inode) */
	uint64_t pinned;
	/* being built by a receive (lib/send/receive.c): unlinked, with an
	 * ORPHAN_ITEM as if deleted, but the cleaner leaves it alone until
	 * it is published or abandoned */
	bool receiving;
	/* opened during the mount: its orphans (unlinked while open before
	 * a crash) are still to free (fs_free_tree_orphans) */
	bool orphans_pending;
};

/* In-memory twin of struct arb_inode_item (format.h). */
struct arb_inode {
	uint64_t ino;
	uint64_t generation, transid;
	uint64_t size, nbytes, seq, rdev, flags;
	uint32_t nlink, uid, gid, mode;
	struct timespec atime, mtime, ctime, btime;
	/*
	 * Set by fs_inode_read: nbytes as read and the commit count then.  A
	 * commit can run between reading an inode and writing it back (an
	 * operation short of space commits in fs_op_begin), and the commit's
	 * delayed-allocation flush changes nbytes on disk; fs_inode_write then
	 * applies this copy's change of nbytes to the value on disk instead
	 * of overwriting it.
	 */
	bool nbytes_merge;
	uint64_t nbytes_read, read_seq;
};

/* one dirty block of delayed data: the whole sector as it should be */
struct arb_dblock {
	uint64_t idx; /* file offset / sectorsize */
	uint8_t *buf; /* sectorsize bytes */
	/* a regular or preallocated extent held the block when it became
	 * dirty: its flush replaces bytes that i_nbytes counts already */
	bool covered;
	/* csum is the data checksum of buf, computed by its writer before
	 * the lock (arb_fs_write); cleared by every change (fs_dmap_find_w) */
	bool csum_ok;
	uint32_t csum;
};

/* a chunk of delayed data compressed by its writer (compress.c) */
struct fs_zchunk {
	uint64_t idx;   /* first block */
	uint32_t nblk;  /* blocks */
	size_t stored;  /* bytes of z, a multiple of the sector size */
	uint8_t *z;     /* NULL: the blocks do not compress */
};

/* Per-inode in-memory state: open count and delayed data. */
struct arb_imem {
	uint64_t ino;
	/* dirty blocks sorted by idx */
	struct arb_dblock *blocks;
	size_t nr, cap;
	/* how many of them are covered (st_blocks counts the others) */
	size_t nr_covered;
	struct arb_imem *hash_next;
	/* on fs->dirty_list while it may hold dirty blocks (nr > 0 at some
	 * point since the last flush), or holds a young gap (fs_gap_young) */
	struct arb_imem *dirty_next, *dirty_prev;
	bool on_dirty;
	/* i_size when the first of the current dirty blocks was made, and
	 * whether something other than a write within that size dirtied it
	 * (truncate, fallocate): see fsync_keep_size in delalloc.c */
	uint64_t disk_size;
	bool force_flush;
	/* the file's real size while an fsync's commit writes a smaller one
	 * to the tree (its appended blocks stay in memory); 0 otherwise */
	uint64_t held_size;
	/* a write that began past the end of the file left [gap_start,
	 * gap_end) unwritten, at gap_ns; 0 when none or filled since
	 * (fs_gap_note, write.c).  With the kernel's writeback cache that is
	 * mostly writeback sent out of order: a snapshot waits a moment for
	 * it (make_subvol, subvol.c) */
	uint64_t gap_start, gap_end, gap_ns;
	/* an fsync that joined a group commit wants this file written */
	bool fsync_want;
	/* chunks of the dirty blocks compressed by their writers or the
	 * compressor thread */
	struct fs_zchunk *zc;
	size_t zc_nr, zc_cap;
	/* on the compressor thread's queue (fs->zw_q) */
	bool zw_queued;
};

/* first size of the open inode table; it doubles as entries are added, as
 * the kernel may pin every inode it has seen */
#define ARB_IMEM_MIN_BUCKETS 1024

/* the digest of a read-only subvolume at a generation (lib/send/digest.c):
 * it cannot change, so a second send of it (another destination, the
 * rest of a cut transfer) does not read it all again */
#define FS_DIGEST_CACHE 4
struct fs_digest_cache {
	uint64_t id, gen;
	uint8_t d[32];
};

struct arb_fs {
	struct fs_digest_cache dcache[FS_DIGEST_CACHE]; /* lock */
	unsigned dcache_next;
	struct arb_vol *vol;
	struct arb_dev *dev;
	/* the fs trees this mount has opened (inum.c), trees[0] the
	 * filesystem tree, and the checksum tree (all reloaded after an
	 * abort) */
	struct fs_tree **trees;
	size_t nr_trees, trees_cap;
	struct arb_root *csum;
	struct arb_fs_opts opts;
	uint32_t max_inline; /* effective, capped to a sector */
	uint32_t bs;         /* sector size */
	bool readonly;       /* opened read-only or forced after an abort */
	bool failed;         /* forced read-only after a transaction abort */
	int error;           /* the error that failed it (negative errno) */
	/* arb_fs_shutdown ran: readonly and failed are set too (error
	 * -EIO), and the volume writes nothing more; shutdown_clean: no
	 * other failure came first, so close reports success */
	bool shutdown, shutdown_clean;

	/* where the last extent written (made or extended) ends, in its
	 * file and on disk: only a write that continues it in both is
	 * worth looking up for extend_prev (delalloc.c); a hint, never
	 * trusted */
	uint64_t ext_hint_ino, ext_hint_foff, ext_hint_disk;
	/* set by a writer around its share of the flush (arb_fs_write):
	 * the data writes of that flush are deferred (struct fs_wb,
	 * delalloc.c) and listed in wb_list, which the writer takes and
	 * issues once it let go of the lock */
	bool wb_defer;
	struct fs_wb *wb_list;
	/* bytes only unlink/rmdir/truncate/rename may use */
	uint64_t reserve;
	/* something changed since the last commit */
	bool txn_dirty;
	/* arb_mono_ns() of the last change, for the idle commit, and the
	 * commit thread waits past it (fs_note_change wakes it) */
	uint64_t last_change_ns;
	bool commit_sleeping;
	/* discard (trim.c): bytes given back, and a failure was logged */
	uint64_t trimmed_bytes;
	bool told_discard;
	/* successful commits since open (see struct arb_inode) */
	uint64_t commit_seq;
	/* metadata bytes the operations of the running transaction may
	 * still need (ARB_OP_META_NODES each): a commit must find them,
	 * since copy-on-write of a tree node keeps the old one until the
	 * commit is durable.  Reset by every commit; what counts is capped
	 * (txn_meta_bytes in fs.c). */
	uint64_t txn_meta;

	/* arb_fs_open_inode references per inode number: the daemon pins
	 * every inode the kernel knows (a million and more), so a pin is a
	 * 16-byte slot here, not an arb_imem; an arb_imem exists only while
	 * an inode has delayed data */
	struct arb_idcount pins;
	struct arb_imem **imem;     /* hash table of imem_buckets chains */
	size_t imem_buckets;        /* a power of two */
	size_t imem_count;
	/* inode an fsync commits for (0: a full commit, every inode's
	 * delayed data is written) */
	uint64_t fsync_ino;
	/* group commit (arb_fs_fsync): threads in arb_fs_fsync, counted
	 * before they take the lock (atomic); whether one of them is
	 * gathering the others before its commit; signalled when that
	 * commit is done; how long the last commit took */
	unsigned fsync_callers;
	bool fsync_gathering;
	pthread_cond_t fsync_cond;
	uint64_t last_commit_ns;
	/* statistics (struct arb_fs_stats) */
	uint64_t nr_fsyncs, nr_fsync_commits, nr_fsync_joined,
		nr_fsync_durable;
	struct arb_imem *dirty_list; /* entries with dirty blocks: the flush
				      * walks these, not every pinned inode */
	uint64_t dirty_bytes; /* sum of dirty blocks * bs */
	uint64_t data_hint;   /* allocation hint: end of the last extent */

	uint64_t user_bytes_written;
	/* file bytes shared by arb_fs_copy_range (clone.c) */
	uint64_t cloned_bytes;
	/* file bytes shared by arb_fs_dedupe_range */
	uint64_t deduped_bytes;
	/* time spent in commits that wrote a superblock (ns) */
	uint64_t commit_ns;

	/* the online check running on a view of this filesystem
	 * (fs_online.c), or NULL */
	struct fs_check_view *check_view;
	/* while an online check holds freed blocks: have it let go when
	 * space runs short (set and cleared by lib/check/fs_online.c, so
	 * that the POSIX layer never calls into the checker) */
	bool (*space_yield)(struct arb_fs *fs);

	/* a deleted subvolume may be ready for the cleaner (fs_clean_kick) */
	bool clean_pending;
	/* broadcast (with the lock) when a deleted subvolume is gone */
	pthread_cond_t clean_cond;
	/* the cleaner thread (fs.c), and what wakes it */
	pthread_t cleaner;
	bool cleaner_running;
	pthread_cond_t clean_wake;
	/* the compressor thread (compress.c, fs_zw_*): files with a chunk
	 * of dirty blocks ready to compress, in the order they got one */
	pthread_t zworker;
	bool zworker_running;
	pthread_cond_t zw_wake;
	uint64_t *zw_q;        /* a ring of zw_cap, zw_nr from zw_head */
	size_t zw_head, zw_nr, zw_cap;
	bool zw_busy;          /* compressing what it took off the queue */
	/* the cleaner asks the commit thread for a commit */
	bool commit_asked;
	/* threads waiting in fs_lock: a batch of the cleaner ends early
	 * when one is (atomic) */
	unsigned lock_waiters;
	/* times fs_lock was taken (atomic; fs_unlock_handoff) */
	unsigned lock_seq;
	/* the nodes the cleaner's last batch stopped for, to be read into
	 * the host's cache without the lock (arb_drop_budget.fetch) */
	struct arb_drop_fetch clean_fetch;
	/* when the cleaner last took the lock, and lock_seq then: whether
	 * others had it since (fs_clean_pause) */
	uint64_t clean_lock_ns;
	unsigned clean_seq;

	/* commit thread */
	pthread_t thread;
	bool thread_running;
	bool stop;
	pthread_cond_t cond;

	/* compress.c: per inode-number slot, whether its last write was to
	 * be compressed (read without the lock) */
	uint64_t zhint[256];
	/* compressed extents written, their file bytes and stored bytes */
	uint64_t nr_zextents, z_ram_bytes, z_stored_bytes;
	/* of z_ram_bytes, those their writer compressed (before the lock) */
	uint64_t z_early_bytes;
	/* writers compressing before the lock: at most zslots at once (one
	 * CPU is left to the other requests), zbusy now (zlock) */
	pthread_mutex_t zlock;
	pthread_cond_t zcond;
	unsigned zslots, zbusy;

	/* taken before the volume lock by large writes, so that they queue
	 * here one at a time instead of crowding the volume lock: a small
	 * write or an fsync then waits behind at most one of them */
	pthread_mutex_t bulk_lock;
};
/* write.c: a write of [off, end) to a file of size bytes (im's gap) */
void fs_gap_note(struct arb_imem *im, uint64_t size, uint64_t off,
		 uint64_t end);
/* a gap this young may be writeback sent out of order, still to come (a
 * snapshot waits for it, make_subvol); older, a sparse write */
#define ARB_GAP_YOUNG_NS (50ULL * 1000 * 1000)
static inline bool fs_gap_young(const struct arb_imem *im, uint64_t now)
{
	return im->gap_end && now - im->gap_ns < ARB_GAP_YOUNG_NS;
}
/* writes of at least this many bytes take fs->bulk_lock */
#define ARB_BULK_WRITE (128u << 10)

static inline void fs_lock(struct arb_fs *fs)
{
	if (pthread_mutex_trylock(&fs->vol->lock) != 0) {
		__atomic_add_fetch(&fs->lock_waiters, 1, __ATOMIC_RELAXED);
		pthread_mutex_lock(&fs->vol->lock);
		__atomic_sub_fetch(&fs->lock_waiters, 1, __ATOMIC_RELAXED);
	}
	__atomic_add_fetch(&fs->lock_seq, 1, __ATOMIC_RELAXED);
}
static inline void fs_unlock(struct arb_fs *fs)
{
	pthread_mutex_unlock(&fs->vol->lock);
}
/*
 * fs_unlock between two batches of long work (the cleaner), which takes
 * the lock again next: when a thread waits for the lock, return once one
 * has had it (or after ARB_HANDOFF_NS).  A mutex is not fair: the thread
 * that unlocks can take it again before a woken waiter runs, batch after
 * batch.
 */
#define ARB_HANDOFF_NS (2 * 1000 * 1000)
void fs_unlock_handoff(struct arb_fs *fs);

/* ---- fs.c ---- */
enum arb_op_flags {
	/* the operation frees space: it may dip into the reserve, down to
	 * its last half */
	ARB_OP_RESERVE = 1 << 0,
	/* deleting a subvolume: it may use all of the reserve */
	ARB_OP_LAST = 1 << 1,
};
/* Check space (need data bytes + metadata) and join the transaction.
 * ino: an inode of the tree the operation changes (-EROFS when that tree
 * is a read-only subvolume), 0 for none. */
int fs_op_begin(struct arb_fs *fs, struct arb_txn **t, uint64_t ino,
		uint64_t need, unsigned flags);
/* Leave the transaction; err != 0 aborts it (see the header comment).
 * Returns err. */
int fs_op_end(struct arb_fs *fs, struct arb_txn *t, int err);
/* Commit everything (lock held). */
int fs_commit(struct arb_fs *fs);
/* abort t after a failure inside it: the filesystem turns read-only */
void fs_abort(struct arb_fs *fs, struct arb_txn *t, int err);
/* lock held: a change was made (the idle commit counts from it) */
void fs_note_change(struct arb_fs *fs);
/* lock held: with opts.discard, punch what commits freed (trim.c) */
void fs_trim_freed(struct arb_fs *fs);
/* space left for ordinary operations (free - reserve - dirty) */
uint64_t fs_avail_bytes(struct arb_fs *fs);
uint64_t fs_free_bytes(struct arb_fs *fs);
/* ---- inum.c: trees and inode numbers ---- */
/* open the filesystem tree as trees[0] (at open) */
int fs_trees_init(struct arb_fs *fs);
/* after an abort: every tree's root as last committed */
void fs_trees_reload(struct arb_fs *fs);
void fs_trees_free(struct arb_fs *fs);
/* open the fs tree id (a subvolume's) if it is not open yet (lock held):
 * its inodes can be named from then on; -EINVAL for an id with no slot,
 * -ENOENT when the root tree has no such tree */
int fs_tree_open(struct arb_fs *fs, uint64_t id, struct fs_tree **out);
/* the tree of ino, opened if it exists and is not deleted: 0 or -ENOENT
 * (lock held) */
int fs_tree_open_ino(struct arb_fs *fs, uint64_t ino);
/* take a dropped tree out of the table (lock held) */
void fs_tree_forget(struct arb_fs *fs, struct fs_tree *tr);
/* Is directory dir empty?  Stale subvolume links do not count (dir.c). */
int fs_dir_is_empty(struct arb_fs *fs, uint64_t dir, bool *empty);
/* lib/subvol: unlink the subvolume linked at dir/name (lock held) and
 * leave it to the cleaner; empty: only if its root directory is empty
 * (ENOTEMPTY otherwise), as an rmdir */
int fs_subvol_unlink(struct arb_fs *fs, uint64_t dir, const char *name,
		     size_t len, bool empty);
/*
 * lib/subvol: one batch of the cleaning of a deleted subvolume none of
 * whose inodes is pinned (lock held): 1 a subvolume is gone (committed),
 * 2 a batch was dropped and more remains (not committed), 0 none, <0
 * error.  The batch: opts.clean_batch_nodes (0: ARB_CLEAN_BATCH_NODES)
 * tree nodes or ARB_CLEAN_BATCH_NS, whichever comes first.  fs_subvol_clean_batch: of
 * want only (0: any), with budget b (NULL: all of it).
 */
#define ARB_CLEAN_BATCH_NODES 1024
#define ARB_CLEAN_BATCH_NS (2 * 1000 * 1000)
int fs_subvol_clean(struct arb_fs *fs);
/* fs.c: between two batches of the cleaner (lock held: let go of, then
 * taken again): waiters have the lock first (fs_unlock_handoff), the
 * nodes the batch stopped for (clean_fetch) are read meanwhile, and while
 * other threads use the filesystem the cleaner rests (ARB_CLEAN_REST_NS) */
void fs_clean_pause(struct arb_fs *fs);
/* fs.c: the cleaner took the lock (fs_clean_pause's measure starts) */
void fs_clean_locked(struct arb_fs *fs);
/* fs.c: a deleted subvolume may be ready for cleaning: wake the cleaner
 * (lock held) */
void fs_clean_kick(struct arb_fs *fs);
int fs_subvol_clean_batch(struct arb_fs *fs, uint64_t want,
			  const struct arb_drop_budget *b);
/*
 * lib/subvol, for receive (lock not held): a new subvolume tree, empty
 * (parent 0) or a clone of tree parent, committed unlinked with an
 * ORPHAN_ITEM and marked receiving; published as a read-only received
 * snapshot named name in dir (the orphan goes, the received UUID,
 * stransid and rtransid are recorded; committed); or abandoned to the
 * cleaner.
 */
int fs_subvol_recv_begin(struct arb_fs *fs, uint64_t parent,
			 struct fs_tree **out);
int fs_subvol_recv_publish(struct arb_fs *fs, struct fs_tree *tr,
			   uint64_t dir, const char *name,
			   const uint8_t uuid[16], uint64_t stransid);
void fs_subvol_recv_abandon(struct arb_fs *fs, struct fs_tree *tr);
/*
 * A receive cut short keeps what it built as a partial receive
 * (ARB_SUBVOL_F_PARTIAL: the stream's source uuid and generation, and
 * the objectid to resume at), committed (going_on: a checkpoint of a
 * receive that goes on, so that a crash leaves it resumable); fs_subvol_recv_resume opens
 * partial id again for the rest of the stream after checking it is one
 * (-ENOENT: no such partial receive).  A resumed receive ends as any:
 * published (the flag goes), kept again, or abandoned (given to the
 * cleaner).  fs_subvol_recv_discard gives up partial id.
 */
int fs_subvol_recv_park(struct arb_fs *fs, struct fs_tree *tr,
			const uint8_t uuid[16], uint64_t stransid,
			uint64_t resume_obj, uint64_t resume_off, bool going_on);
int fs_subvol_recv_resume(struct arb_fs *fs, uint64_t id,
			  struct fs_tree **out, struct arb_subvol_item *si);
int fs_subvol_recv_discard(struct arb_fs *fs, uint64_t id);
/* highest inode objectid present in tr (fs.c) */
int fs_tree_max_ino(struct fs_tree *tr, uint64_t *max);
/*
 * A directory entry of objectid dirobj in tree parent links subvolume id
 * (ARB_DENT_SUBVOL) under name: 0 with *ino its root directory (its tree
 * opened) and *seq the link's DIR_INDEX offset (seq may be NULL), or
 * -ENOENT when the subvolume is linked elsewhere or gone (the entry is a
 * copy a snapshot of the parent took along: a stale link).
 */
int fs_subvol_resolve(struct arb_fs *fs, const struct fs_tree *parent,
		      uint64_t dirobj, uint64_t id, const char *name,
		      size_t len, uint64_t *ino, uint64_t *seq);
/* subvolume id's link as its ROOT_BACKREF records it: the parent tree's
 * id, the directory's objectid there, the DIR_INDEX offset, the name
 * (ARB_NAME_MAX + 1 bytes); any but parent may be NULL.  -ENOENT when it
 * has none (tree 5, deleted) */
int fs_subvol_backref(struct arb_fs *fs, uint64_t id, uint64_t *parent,
		      uint64_t *dirobj, uint64_t *seq, char *name);
/* the directory a subvolume's root is linked in (opening its tree) and
 * the link's name (ARB_NAME_MAX + 1 bytes, may be NULL) */
int fs_subvol_link(struct arb_fs *fs, const struct fs_tree *tr,
		   uint64_t *parent, char *name);
/* the directory a subvolume's root is linked in (opening its tree);
 * -ENOENT when it is not linked (deleted) */
int fs_subvol_parent(struct arb_fs *fs, const struct fs_tree *tr,
		     uint64_t *parent);
/* the open tree of an inode number's slot, NULL when there is none */
struct fs_tree *fs_tree_find(const struct arb_fs *fs, uint64_t ino);
/* the filesystem tree (ARB_FS_TREE_ID) */
static inline struct fs_tree *fs_tree0(const struct arb_fs *fs)
{
	return fs->trees[0];
}
/* An inode number names a tree this mount has open and an objectid that
 * can be an inode's: what every entry point checks first
 * (fs_inode_read does). */
bool fs_ino_valid(const struct arb_fs *fs, uint64_t ino);
/* the tree of an inode number that fs_ino_valid accepted */
static inline struct fs_tree *fs_tree_of(const struct arb_fs *fs,
					 uint64_t ino)
{
	struct fs_tree *tr = (ino >> ARB_INUM_SHIFT) == 0
				     ? fs->trees[0]
				     : fs_tree_find(fs, ino);

	ARB_ASSERT(tr != NULL);
	return tr;
}
static inline struct arb_root *fs_root_of(const struct arb_fs *fs,
					  uint64_t ino)
{
	return fs_tree_of(fs, ino)->root;
}
/* the key objectid of an inode's items */
static inline uint64_t fs_obj(uint64_t ino)
{
	return arb_inum_obj(ino);
}
/* the inode number of objectid obj in tree tr */
static inline uint64_t fs_ino(const struct fs_tree *tr, uint64_t obj)
{
	return tr->slot << ARB_INUM_SHIFT | obj;
}
/* is ino the root directory of a subvolume (not of tree 5)? */
static inline bool fs_is_subvol_root(const struct arb_fs *fs, uint64_t ino)
{
	return fs_obj(ino) == ARB_FIRST_INO && fs_tree_of(fs, ino)->slot != 0;
}

/* ---- imem.c ---- */
int fs_imem_table_init(struct arb_fs *fs);
void fs_imem_destroy_all(struct arb_fs *fs);
struct arb_imem *fs_imem_get(struct arb_fs *fs, uint64_t ino, bool create);
void fs_imem_put_if_idle(struct arb_fs *fs, struct arb_imem *im);
/* someone holds an arb_fs_open_inode reference on ino */
bool fs_inode_pinned(const struct arb_fs *fs, uint64_t ino);
/* put im on the dirty list (called when it gets its first dirty block) */
void fs_imem_mark_dirty(struct arb_fs *fs, struct arb_imem *im);
/* visit every entry; fn may free the entry it is given */
void fs_imem_for_each(struct arb_fs *fs,
		      void (*fn)(struct arb_fs *, struct arb_imem *, void *),
		      void *arg);
void fs_now(struct timespec *ts);

/* ---- orphan.c ---- */
/* Free the inodes left by unlinks of open files before a crash. */
int fs_free_orphans(struct arb_fs *fs);
/* The same for the subvolume trees opened since (orphans_pending): the
 * commit thread runs it, outside any operation. */
int fs_free_tree_orphans(struct arb_fs *fs);
/* At close: drop every pin; free the pinned inodes with no link left. */
int fs_free_unlinked_pinned(struct arb_fs *fs);

/* ---- inode.c ---- */
void fs_inode_unpack(struct arb_inode *in, uint64_t ino,
		     const struct arb_inode_item *d);
void fs_inode_pack(struct arb_inode_item *d, const struct arb_inode *in);
/* 0, -ENOENT, -EUCLEAN, <0 */
int fs_inode_read(struct arb_fs *fs, uint64_t ino, struct arb_inode *in);
/* Hint the leaf of ino's inode item to the device (arb_prefetch_leaf). */
void fs_inode_prefetch(struct arb_fs *fs, uint64_t ino);
/* write back (transid = t's) */
int fs_inode_write(struct arb_fs *fs, struct arb_txn *t, struct arb_inode *in);
int fs_inode_insert(struct arb_fs *fs, struct arb_txn *t, struct arb_inode *in);
/*
 * A new inode number for an inode t is about to create: never one handed
 * out before in this tree, across remounts too (the tree's ROOT_ITEM
 * keeps the highest, committed with t).  -ENOSPC when the numbers below
 * the reserved objectids are used up: test fs_ino_exhausted before
 * beginning the operation, since a failure inside it aborts the
 * transaction.
 */
int fs_ino_new(struct arb_fs *fs, struct arb_txn *t, struct fs_tree *tr,
	       uint64_t *ino);
static inline bool fs_ino_exhausted(const struct fs_tree *tr)
{
	return tr->next_ino > ARB_INUM_OBJ_MAX;
}
void fs_inode_to_stat(struct arb_fs *fs, const struct arb_inode *in,
		      struct arb_stat *st);
/* Delete every item of an inode (nlink 0) and its orphan item if any. */
int fs_inode_free(struct arb_fs *fs, struct arb_txn *t, uint64_t ino);
/* nlink reached 0: free now or leave as an orphan while open */
int fs_inode_unlinked(struct arb_fs *fs, struct arb_txn *t,
		      struct arb_inode *in);
bool fs_item_exists(struct arb_root *root, const struct arb_key *key);

/* ---- iflags.c: what the inode flags (ARB_INODE_*) forbid ---- */
#define ARB_INODE_PROTECTED (ARB_INODE_IMMUTABLE | ARB_INODE_APPEND)
/* each: 0 or -EPERM, as the kernel's checks of S_IMMUTABLE/S_APPEND */
int fs_iflags_may_create(const struct arb_inode *dir);
int fs_iflags_may_delete(const struct arb_inode *dir,
			 const struct arb_inode *victim);
int fs_iflags_may_link(const struct arb_inode *in, const struct arb_inode *dir);
/* dst NULL: no inode at the new name */
int fs_iflags_may_rename(const struct arb_inode *odir,
			 const struct arb_inode *src,
			 const struct arb_inode *ndir,
			 const struct arb_inode *dst);
/* valid: enum arb_setattr_valid */
int fs_iflags_may_setattr(const struct arb_inode *in, unsigned valid);
/* xattrs and ACLs */
int fs_iflags_may_setxattr(const struct arb_inode *in);
/* mode as fallocate(2)'s */
int fs_iflags_may_fallocate(const struct arb_inode *in, int mode);
uint32_t fs_iflags_to_fl(uint64_t iflags);

/* ---- dir.c ---- */
/* Entries of DIR_ITEM / XATTR_ITEM items (struct arb_dir_entry + name +
 * data).  dent_find: 0 and the entry's offset/length in buf, -ENOENT, or
 * -EUCLEAN for a malformed item. */
size_t fs_dent_size(size_t name_len, size_t data_len);
void fs_dent_fill(uint8_t *p, uint64_t ino, uint64_t transid, uint8_t type,
		  const char *name, size_t name_len, const void *data,
		  size_t data_len);
int fs_dent_find(const uint8_t *buf, size_t size, const char *name,
		 size_t name_len, size_t *off, size_t *len);
/* append an entry to a multi-entry item (inserting it if absent) */
int fs_item_append(struct arb_txn *t, struct arb_root *root,
		   const struct arb_key *key, const void *entry, size_t elen);
/* cut [off, off+len) out of a multi-entry item (deleting it if empty) */
int fs_item_cut(struct arb_txn *t, struct arb_root *root,
		const struct arb_key *key, size_t off, size_t len);
int fs_check_name(const char *name, size_t *len);
/* find name in dir: 0 (with ino, index, type), or -ENOENT */
int fs_dir_find(struct arb_fs *fs, uint64_t dir, const char *name, size_t len,
		uint64_t *ino, uint64_t *index, uint8_t *type);
/* Add the three items of a link (DIR_ITEM, DIR_INDEX at din->seq,
 * INODE_REF); updates din (size, seq, times), which the caller writes. */
int fs_link_add(struct arb_fs *fs, struct arb_txn *t, struct arb_inode *din,
		const char *name, size_t len, uint64_t ino, uint8_t type,
		const struct timespec *now);
/* would one more name of name_len of ino in directory parent fit its
 * INODE_REF item (EMLINK otherwise)? */
bool fs_iref_has_room(struct arb_fs *fs, uint64_t ino, uint64_t parent,
		      size_t name_len);
/* Remove the three items of the link name -> ino in din (updates din's
 * size and times, which the caller writes; nlink is the caller's). */
int fs_link_del(struct arb_fs *fs, struct arb_txn *t, struct arb_inode *din,
		const char *name, size_t len, uint64_t ino,
		const struct timespec *now);
/* Add a DIR_ITEM and a DIR_INDEX entry (raw_ino as stored: an objectid of
 * din's tree, or a subvolume id with type ARB_DENT_SUBVOL); *index is the
 * DIR_INDEX offset.  Updates din (size, seq, times); the caller writes it. */
int fs_dent_add(struct arb_fs *fs, struct arb_txn *t, struct arb_inode *din,
		const char *name, size_t len, uint64_t raw_ino, uint8_t type,
		const struct timespec *now, uint64_t *index);
/* Remove them (din updated as by fs_dent_add). */
int fs_dent_del(struct arb_fs *fs, struct arb_txn *t, struct arb_inode *din,
		const char *name, size_t len, uint64_t index,
		const struct timespec *now);
/* dir (read into din) is a live directory without an entry name:
 * 0, -ENOTDIR, -ENOENT, -EEXIST or an error */
int fs_new_name_ok(struct arb_fs *fs, uint64_t dir, const char *name,
		   size_t len, struct arb_inode *din);
/* parent of a directory (itself for the root) */
int fs_dir_parent(struct arb_fs *fs, uint64_t dir, uint64_t *parent);

/* ---- file data (delalloc.c, csum.c, write.c, extent.c) ---- */
int fs_flush_all(struct arb_fs *fs, struct arb_txn *t);
int fs_flush_inode(struct arb_fs *fs, struct arb_txn *t, struct arb_imem *im);
/* write at least want bytes (at least ARB_FLUSH_STEP) of delayed data,
 * oldest dirty files first */
int fs_flush_some(struct arb_fs *fs, struct arb_txn *t, uint64_t want);
/* The same, with the data writes deferred (delalloc.c, struct fs_wb):
 * listed in fs->wb_list and given to the device before it returns; the
 * caller takes the list before letting go of the lock and issues them
 * with fs_wb_run after. */
int fs_flush_some_deferred(struct arb_fs *fs, struct arb_txn *t,
			   uint64_t want);
/* Issue the deferred data writes of list (fs->wb_list as a writer took
 * it, under the lock) and free them; no lock needed.  0 or the first
 * error (which also fails the next commit: arb_dev_drain). */
int fs_wb_run(struct arb_fs *fs, struct fs_wb *list);
/* after an fsync's commit: give files whose size it held back their real
 * size in the tree (see fsync_keep_size in delalloc.c) */
int fs_fsync_restore_sizes(struct arb_fs *fs);
/* arb_fs_read; atime false: the inode's atime stays as it is (the
 * digests, which read a received tree before it is published) */
ssize_t fs_read(struct arb_fs *fs, uint64_t ino, void *buf, size_t size,
		uint64_t off, bool atime);
/* crc32c of a data sector, as stored in EXTENT_CSUM items */
static inline uint32_t fs_data_csum(const void *buf, size_t len)
{
	return ~arb_crc32c(~0u, buf, len);
}
/* fsresize.c */
void fs_set_reserve(struct arb_fs *fs);
int fs_resize_locked(struct arb_fs *fs, uint64_t size, bool allocate,
		     const char **why);
int fs_autogrow(struct arb_fs *fs, uint64_t need);
/* scrub.c: path of ino from the root directory (first link at each level);
 * on failure buf says what is known */
int fs_ino_path(struct arb_fs *fs, uint64_t ino, char *buf, size_t size);
/* checksums of nsec sectors from bytenr: sums[i] valid where have[i] */
int fs_csum_lookup(struct arb_fs *fs, uint64_t bytenr, size_t nsec,
		   uint32_t *sums, uint8_t *have);
/* compress.c: the writers' compression slots (struct arb_fs) */
void fs_zslots_init(struct arb_fs *fs);
void fs_zslots_destroy(struct arb_fs *fs);
/* compress.c: the compressor thread.  fs_zw_start at open (daemon
 * mode), fs_zw_stop at close (lock not held); fs_zw_note under the lock
 * after a write to im ([first, last] its blocks): queues the file when a
 * chunk of it is ready to compress.  fs_zw_wait_idle (tests): until the
 * queue is empty and nothing is being compressed. */
void fs_zw_start(struct arb_fs *fs);
void fs_zw_stop(struct arb_fs *fs);
void fs_zw_note(struct arb_fs *fs, struct arb_imem *im,
		const struct arb_inode *in, uint64_t first, uint64_t last);
void fs_zw_wait_idle(struct arb_fs *fs);
void fs_zslot_get(struct arb_fs *fs);
void fs_zslot_put(struct arb_fs *fs);
/* compress.c: deflate len bytes (0: *out holds *stored bytes, rounded up
 * to bs with zeros, at most len - bs; 1: no sector saved), inflate to
 * exactly ram bytes (-EIO otherwise) */
int fs_z_compress(const void *src, size_t len, uint32_t bs, int level,
		  uint8_t **out, size_t *stored);
int fs_z_decompress(const void *src, size_t len, void *dst, size_t ram);
/* the same, and *used: the bytes the stream takes (NULL: not wanted) */
int fs_z_decompress_len(const void *src, size_t len, void *dst, size_t ram,
			size_t *used);
/* deflate len bytes into at most cap bytes: 0 and *zlen, 1 no room */
int fs_z_compress_to(const void *src, size_t len, int level, uint8_t *dst,
		     size_t cap, size_t *zlen);
/* forget the compressed chunks (compress.c) that hold a block of
 * [from_idx, to_idx): their blocks are about to change or go */
void fs_zc_forget(struct arb_imem *im, uint64_t from_idx, uint64_t to_idx);
void fs_imem_drop_blocks(struct arb_fs *fs, struct arb_imem *im,
			 uint64_t from_idx);
void fs_imem_drop_all_data(struct arb_fs *fs);
/* truncate to size (lock held, inside t); in is updated, not written */
int fs_truncate(struct arb_fs *fs, struct arb_txn *t, struct arb_inode *in,
		uint64_t size);
/* reads that a truncate to size needs done before the transaction */
int fs_truncate_prepare(struct arb_fs *fs, struct arb_inode *in,
			uint64_t size);
/* Remove every EXTENT_DATA of ino (for freeing an inode). */
int fs_drop_extents(struct arb_fs *fs, struct arb_txn *t, struct arb_inode *in,
		    uint64_t start, uint64_t end);
int fs_pre_commit(struct arb_txn *t, void *arg);
/* arb_fs_open, or with sb != NULL a read-only view of the committed
 * generation that superblock describes (fs_online.c) */
int fs_open_at(struct arb_dev *dev, const struct arb_fs_opts *o,
	       const struct arb_super *sb, struct arb_fs **out,
	       const char **why);
/* Short of space (lock held): cancel a running online check and free the
 * blocks it holds.  true if it did. */
bool fs_check_yield(struct arb_fs *fs);

/* ---- xattr.c ---- */
/*
 * One attribute's place: the XATTR_ITEM its name hashes to, loaded (lock
 * held) so that a change can be checked before the transaction and made
 * inside it.
 */
struct fs_xslot {
	struct arb_root *root; /* the inode's tree */
	struct arb_key k;
	const char *name;
	size_t len;
	uint8_t *buf;  /* the item (max bytes) */
	uint32_t max;
	size_t isize;  /* bytes of the item in buf */
	size_t off, elen; /* the entry, when exists */
	bool item;     /* the item exists */
	bool exists;   /* the entry exists */
};
int fs_xslot_load(struct arb_fs *fs, uint64_t ino, const char *name,
		  size_t len, struct fs_xslot *s);
/* 0 if a value of size bytes fits the item, -ENOSPC if not */
int fs_xslot_fits(const struct fs_xslot *s, size_t size);
/* set the value (value NULL: remove the entry, absent is fine) */
int fs_xslot_store(struct arb_fs *fs, struct arb_txn *t, struct fs_xslot *s,
		   const void *value, size_t size);
void fs_xslot_release(struct fs_xslot *s);
/* value of name (malloc'd) or -ENODATA */
int fs_xattr_get(struct arb_fs *fs, uint64_t ino, const char *name,
		 void **value, size_t *size);
/* load + store inside t (the caller made sure it fits) */
int fs_xattr_put(struct arb_fs *fs, struct arb_txn *t, uint64_t ino,
		 const char *name, const void *value, size_t size);

/* ---- acl.c ---- */
#define FS_ACL_ACCESS "system.posix_acl_access"
#define FS_ACL_DEFAULT "system.posix_acl_default"
enum { FS_ACL_TYPE_ACCESS = 1, FS_ACL_TYPE_DEFAULT = 2 };
enum {
	FS_ACL_USER_OBJ = 0x01,
	FS_ACL_USER = 0x02,
	FS_ACL_GROUP_OBJ = 0x04,
	FS_ACL_GROUP = 0x08,
	FS_ACL_MASK = 0x10,
	FS_ACL_OTHER = 0x20,
};
struct fs_acl_entry {
	uint16_t tag, perm;
	uint32_t id;
};
struct fs_acl {
	size_t count;
	struct fs_acl_entry e[];
};
/* FS_ACL_TYPE_* of an xattr name, 0 for other names */
int fs_acl_type(const char *name);
/* Parse and validate (posix_acl_valid) an ACL xattr: 0 with *out malloc'd,
 * or NULL for an empty ACL (header only); -EINVAL if malformed. */
int fs_acl_from_xattr(const void *value, size_t size, struct fs_acl **out);
size_t fs_acl_xattr_size(const struct fs_acl *acl);
void fs_acl_to_xattr(const struct fs_acl *acl, void *buf);
/* posix_acl_equiv_mode: sets *mode's permission bits from acl (group from
 * the mask if any); 0 if acl says no more than them, 1 if it does */
int fs_acl_equiv_mode(const struct fs_acl *acl, uint32_t *mode);
/* posix_acl_chmod: USER_OBJ, MASK (or GROUP_OBJ), OTHER from mode */
void fs_acl_chmod(struct fs_acl *acl, uint32_t mode);
/* posix_acl_create_masq: mask acl and *mode by each other; 0 if the
 * result is equivalent to the mode, 1 if not */
int fs_acl_create_masq(struct fs_acl *acl, uint32_t *mode);
/* setxattr of an ACL name (takes the lock) */
int fs_acl_setxattr(struct arb_fs *fs, uint64_t ino, int type,
		    const void *value, size_t size);
/* chmod of in to mode: the new access ACL value (malloc'd) to store, or
 * NULL when in has none (lock held, before the transaction) */
int fs_acl_chmod_prepare(struct arb_fs *fs, const struct arb_inode *in,
			 uint32_t mode, void **val, size_t *size);
/* ACLs of a new inode, from its parent's default ACL */
struct fs_acl_new {
	void *acc, *def; /* values to store, NULL for none */
	size_t acc_size, def_size;
};
/* posix_acl_create: (lock held, before the transaction) *mode (type and
 * permission bits) is masked by the parent's default ACL if it has one
 * (the umask is the caller's business); out gets the ACLs to store */
int fs_acl_inherit_prepare(struct arb_fs *fs, const struct arb_inode *dir,
			   uint32_t *mode, struct fs_acl_new *out);
int fs_acl_inherit_apply(struct arb_fs *fs, struct arb_txn *t, uint64_t ino,
			 const struct fs_acl_new *n);
void fs_acl_new_free(struct fs_acl_new *n);

#endif
