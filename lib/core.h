/* SPDX-License-Identifier: MIT */
/*
 * core.h - private interface of the storage core: cache, btree, alloc, txn.
 *
 * Layering (each calls only downward):
 *   txn.c    transactions, commit, open/close of a volume
 *   alloc.c  free-space map, extent tree, delayed reference counts
 *   btree.c  COW B+tree: search, insert, delete, split/merge, clone, drop
 *   cache.c  node cache: bounded memory, dirty list, validation on read
 *   dev.c    the image (arbor/dev.h)
 *   format.c checksums, hashes; format.h the on-disk structs
 *
 * Locking: one mutex per volume (vol->lock) serialises every operation on
 * the trees today.  Every function below expects it held unless it says
 * otherwise.
 */
#ifndef ARB_CORE_H
#define ARB_CORE_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "arbor/dev.h"
#include "format.h"

#ifndef EUCLEAN
#define EUCLEAN 117
#endif

/* ---- diagnostics ------------------------------------------------------- */

void arb_log(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
#define ARB_LOG_ERR 3
#define ARB_LOG_WARN 4
#define ARB_LOG_INFO 6
#define ARB_LOG_DEBUG 7
extern int arb_log_level;

#ifdef ARB_DEBUG
#define ARB_ASSERT(c)                                                          \
	do {                                                                   \
		if (!(c))                                                      \
			arb_assert_fail(__FILE__, __LINE__, #c);               \
	} while (0)
#else
#define ARB_ASSERT(c)                                                          \
	do {                                                                   \
		(void)sizeof(c);                                               \
	} while (0)
#endif
__attribute__((noreturn)) void arb_assert_fail(const char *file, int line,
					       const char *expr);

/* ---- volume ------------------------------------------------------------ */

struct arb_node;
struct arb_root;
struct arb_txn;
struct arb_free_space;
struct arb_delayed_refs;

/*
 * Readahead of sibling nodes: a stream is a parent node whose children are
 * being read in slot order (a leaf scan).  Children up to slot end were
 * hinted to the device already; last is the slot of the latest miss; win
 * is the next window, which starts small (a short scan wastes little) and
 * doubles with each refill up to ARB_RA_NODES.
 */
#define ARB_RA_STREAMS 4
#define ARB_RA_FIRST 4
#define ARB_RA_NODES 32
/*
 * Random misses under one parent whose children map data (a checksum-tree
 * parent, or one holding a single file's extent items): at the
 * ARB_RA_SCATTER_MISSES-th, that parent's data-map children (at most
 * ARB_RA_SCATTER_NODES around the miss) are hinted at once.
 */
#define ARB_RA_SCATTER_MISSES 4
#define ARB_RA_SCATTER_NODES 256
struct arb_ra_stream {
	uint64_t parent; /* 0: unused */
	int last, end, win;
	int scattered;  /* out-of-order misses; -1 once hinted */
	unsigned used; /* ra_clock at the latest miss, for replacement */
};

struct arb_cache {
	/* hash table of every cached node, by bytenr */
	struct arb_node **table;
	size_t table_size;
	size_t nr_nodes;
	/* clean, unpinned nodes, least recently used first */
	struct arb_node *lru_head, *lru_tail;
	/* dirty nodes of the running transaction */
	struct arb_node *dirty_head;
	size_t nr_dirty;
	/* memory bound in bytes; clean nodes are evicted above it */
	size_t max_bytes;
	uint64_t hits, misses, evictions;
	/* sequential walks being read ahead (arb_node_readahead) */
	struct arb_ra_stream ra[ARB_RA_STREAMS];
	unsigned ra_clock;
	/* nodes hinted to the device */
	uint64_t readahead;
	/* node buffers (arb_cache_init): a region of address space for
	 * max_bytes of them, handed out from buf_next on, freed ones kept on
	 * the stack buf_free; buffers past the region come from malloc */
	uint8_t *buf_base;
	size_t buf_size, buf_next;
	void **buf_free;
	size_t buf_nr_free;
};

struct arb_vol_opts {
	/* node cache bound in bytes; 0 = default (64 MiB) */
	size_t cache_bytes;
	bool readonly;
	/* open this committed superblock instead of the newest valid slot:
	 * a read-only view of that generation (implies readonly); the
	 * caller guarantees its blocks stay intact meanwhile (a hold) */
	const struct arb_super *super;
	/* always flush before writing the superblock (no commit records) */
	bool two_flush;
	/* keep generations recoverable (history.c): the last hist_commits
	 * commits and those younger than hist_secs seconds; both 0: none */
	unsigned hist_secs, hist_commits;
};

/* The recent generations a commit lists in its superblock (history.c). */
struct arb_history {
	uint32_t nr;
	/* newest first, in the on-disk layout */
	struct arb_history_entry e[ARB_HISTORY_MAX];
	/* entries dropped for space since the last commit */
	bool pruned;
};

/* phases of a commit (txn.c), for statistics */
enum arb_commit_phase {
	ARB_COMMIT_DATA,  /* pre_commit: delayed file data, its tree items */
	ARB_COMMIT_TREE,  /* root items and delayed reference counts */
	ARB_COMMIT_WRITE, /* writing the dirty nodes */
	ARB_COMMIT_FLUSH, /* the flush(es) and the superblock */
};

struct arb_vol {
	struct arb_dev *dev;
	pthread_mutex_t lock;
	bool readonly;
	/* the superblock as last committed (on-disk layout) */
	struct arb_super super;
	/* slot (0/1) the last committed superblock lives in */
	int super_slot;
	/* opened at a given superblock (arb_vol_opts.super): a view of a
	 * generation of a live volume, whose superblock slots move on */
	bool view;
	uint8_t uuid[ARB_UUID_SIZE];
	uint32_t nodesize;
	uint32_t sectorsize;
	unsigned csum_type;
	uint64_t total_bytes;
	/* generation of the last durable commit */
	uint64_t generation;
	/* copies of every tree node: 1 (single) or 2 (dup), s_meta_copies */
	unsigned meta_copies;

	struct arb_cache cache;
	struct arb_root *tree_root;
	struct arb_root *extent_root;
	/* every other loaded root (fs trees, csum tree, test trees) */
	struct arb_root *roots;

	struct arb_free_space *fsp;
	struct arb_delayed_refs *drefs;
	struct arb_txn *running;
	/* a write or flush of a commit failed: nothing more may be written */
	int fatal_error;

	/*
	 * Called first thing in every commit, with the lock held, so an upper
	 * layer can turn delayed (in-memory) state into tree items and data
	 * writes: e.g. the fs layer's delayed allocation.  May be NULL.
	 */
	int (*pre_commit)(struct arb_txn *t, void *arg);
	void *pre_commit_arg;

	/* the superblock changed outside a tree (size): commit writes it */
	bool super_dirty;
	/* commits may skip the flush before the superblock (txn.c): the
	 * device tracks the writes since its last flush */
	bool one_flush;
	/* the newest superblock on disk carries a commit record */
	bool record_on_disk;
	/* the bytes of each superblock slot, as read at open or last
	 * written (to put a slot back when a commit's flush fails) */
	struct arb_super slot_sb[2];
	bool slot_known[2];

	/* data reads in flight outside the lock, per read epoch, and the
	 * epoch new readers join (alloc.c, arb_data_read_begin) */
	_Atomic uint32_t data_readers[2];
	unsigned read_epoch;

	/* recent generations kept recoverable (history.c) and for how long */
	struct arb_history hist;
	unsigned hist_secs, hist_commits;

	/* statistics */
	uint64_t nr_commits;
	/* of them, those that flushed twice (too much written for a commit
	 * record, or one_flush off) */
	uint64_t nr_two_flush;
	/* time the commits counted by nr_commits spent in each phase (ns):
	 * enum arb_commit_phase */
	uint64_t commit_phase_ns[4];
	/* node reads since open whose first copy failed (I/O error or
	 * validation) and that the second copy answered; and node reads
	 * that no copy could answer */
	uint64_t nr_healed, nr_unrecoverable;
};

/* Drop the commit record (format.h) from a superblock about to be written
 * by anything but a one-flush commit. */
void arb_super_strip_record(struct arb_super *sb);

/*
 * Set feature bits (format.h) in the in-memory superblock; the next
 * commit writes them.  Set them in the transaction that first writes what
 * needs them: a crash before that commit loses both together.  Lock held.
 */
void arb_vol_set_features(struct arb_vol *vol, uint64_t compat,
			  uint64_t incompat);
/* ... and clear them (a feature no longer in use: the DROP_PROGRESS one) */
void arb_vol_clear_features(struct arb_vol *vol, uint64_t compat,
			    uint64_t incompat);
/* Self-heal counters since open (see struct arb_vol); either may be NULL. */
void arb_vol_heal_stats(struct arb_vol *vol, uint64_t *healed,
			uint64_t *failed);
/* Bytes of space one tree node takes: nodesize times the copies. */
static inline uint64_t arb_node_alloc_bytes(const struct arb_vol *vol)
{
	return (uint64_t)vol->nodesize * vol->meta_copies;
}

int arb_vol_open(struct arb_dev *dev, const struct arb_vol_opts *o,
		 struct arb_vol **out);
/* commits the running transaction (if any and writable), frees everything;
 * the device stays with the caller */
int arb_vol_close(struct arb_vol *vol);
/* abort the running transaction and refuse every write from now on
 * (arb_fs_shutdown); settle: end as a clean close would */
void arb_vol_shutdown(struct arb_vol *vol, bool settle);

struct arb_format_opts {
	uint32_t nodesize;        /* 0 = ARB_DEFAULT_NODESIZE */
	uint8_t uuid[ARB_UUID_SIZE]; /* all zero = generate */
	const char *label;        /* may be NULL */
	/* copies of every tree node: 1 single, 2 dup; 0 = default (2) */
	unsigned meta_copies;
	/* create an empty fs tree (ARB_FS_TREE_ID) with this callback filling
	 * it; NULL = no fs tree (unit tests of the core) */
	int (*init_fs_tree)(struct arb_txn *t, struct arb_root *fs_root,
			    void *arg);
	void *init_arg;
};
/* Write a new empty filesystem on dev (dev->size bytes). */
int arb_vol_format(struct arb_dev *dev, const struct arb_format_opts *o);

/* ---- history (history.c) ---------------------------------------------- */

/* Entries of sb's history that can be trusted (0: none, or a stale one). */
uint32_t arb_history_valid(const struct arb_super *sb);
/* vol->hist from vol->super (open, and after each commit). */
void arb_history_load(struct arb_vol *vol);
/* Generation of the oldest listed generation before the newest, 0 when
 * none: blocks freed by commits after it are kept from reuse. */
uint64_t arb_history_oldest(const struct arb_vol *vol);
/* Space needed the blocks freed by commit gen: generations before gen are
 * no longer listed (from the next commit on). */
void arb_history_prune_below(struct arb_vol *vol, uint64_t gen);
/* Write the history of the commit sb is about to record into sb. */
void arb_history_fill(struct arb_vol *vol, struct arb_super *sb);
/* A superblock for a read-only view of generation gen listed in sb's
 * history (arb_vol_opts.super); -ENOENT if it is not listed. */
int arb_history_find(const struct arb_super *sb, uint64_t gen,
		     struct arb_super *view);
/* A writable open: keep again what the listed generations need and the
 * extent tree no longer covers (the grace is in memory only); drop those
 * whose blocks were reused.  0, or -ENOMEM/-EIO. */
int arb_history_regrace(struct arb_vol *vol);
/* Walk every tree of the (view) volume and read each node: 0 when every
 * node validates (checksum, address, generation), else its error, with a
 * log line naming the tree and the node. */
int arb_vol_verify_trees(struct arb_vol *vol);

/* ---- cache ------------------------------------------------------------- */

enum arb_node_flags {
	ARB_NODE_DIRTY = 1 << 0,
	/* freed in this transaction: never written, dropped at commit */
	ARB_NODE_STALE = 1 << 1,
	/* written by the running transaction before a clone of its tree in
	 * that same transaction: now shared, so it must be shadowed (see
	 * arb_root_clone); meaningless once the transaction has committed */
	ARB_NODE_SHARED = 1 << 2,
};

struct arb_node {
	uint64_t bytenr;
	/* address of the second copy, written with the first; 0: none */
	uint64_t mirror;
	/* pins held by paths and roots; evictable when 0 and clean */
	int pins;
	unsigned flags;
	struct arb_node *hash_next;
	struct arb_node *lru_prev, *lru_next;
	struct arb_node *dirty_prev, *dirty_next;
	uint8_t *data; /* vol->nodesize bytes */
};

int arb_cache_init(struct arb_vol *vol, size_t max_bytes);
void arb_cache_destroy(struct arb_vol *vol);
/*
 * Read (or find cached) the node at bytenr and validate it.  expect_gen and
 * expect_level are checked when != (uint64_t)-1 / -1.  mirror is the
 * address of the node's second copy (0: none): when the first copy cannot
 * be read or fails validation, the second is read and, if it validates,
 * rewritten over the first (self-heal, logged and counted; not on a
 * read-only volume).  Returns 0 and a pinned node, or -EUCLEAN (no copy
 * validates; logged with the address) / -EIO.
 */
int arb_node_read(struct arb_vol *vol, uint64_t bytenr, uint64_t mirror,
		  uint64_t expect_gen, int expect_level, struct arb_node **out);
/*
 * Read one copy of a node (at addr; bytenr is the node's address, the
 * first copy's) straight from the device, bypassing the cache, and
 * validate it like arb_node_read.  0, -EUCLEAN (*why says why) or an I/O
 * error.  The checker uses it to verify both copies.
 */
int arb_node_read_copy(struct arb_vol *vol, uint8_t *buf, uint64_t addr,
		       uint64_t bytenr, uint64_t expect_gen, int expect_level,
		       const char **why);
/*
 * About to read child slot of parent (level >= 1).  When that child is not
 * cached and the misses under parent come in slot order (or seq says the
 * caller walks leaves in order), the next children that are not cached
 * (a window of ARB_RA_FIRST growing to ARB_RA_NODES) are hinted to the
 * device (first copies only).  Misses out of order under a parent whose
 * children map file data (checksum items, one file's extent items) are
 * counted, and the ARB_RA_SCATTER_MISSES-th hints those children at
 * once.  A hint changes
 * nothing that a read returns: every node is still validated when read.
 */
void arb_node_readahead(struct arb_vol *vol, const struct arb_node *parent,
			int slot, bool seq);
/* Hint the node at bytenr to the device unless it is cached. */
void arb_node_hint(struct arb_vol *vol, uint64_t bytenr);
/* whether the node at bytenr is in the node cache (vol's lock held) */
bool arb_node_is_cached(struct arb_vol *vol, uint64_t bytenr);
/*
 * Reads that must not wait for a disk, in this thread until
 * arb_node_nowait(false): arb_node_read of a node that is not cached here
 * and that the device says is not in the host's cache either fails with
 * -EWOULDBLOCK (nothing logged or counted) and keeps its address for
 * arb_node_nowait_miss.  For read-only lookups of work that can stop and
 * fetch (arb_dev_prefetch) what it missed without its lock, then go on:
 * the cleaner's.  Returns the previous setting.
 */
bool arb_node_nowait(bool on);
uint64_t arb_node_nowait_miss(void);
/* Hint children from..to of parent (clamped) that are not cached, one
 * request per run of adjacent addresses. */
void arb_node_hint_children(struct arb_vol *vol, const struct arb_node *parent,
			    int from, int to);
/* A new zeroed, pinned, dirty node for a freshly allocated bytenr. */
int arb_node_create(struct arb_vol *vol, uint64_t bytenr,
		    struct arb_node **out);
void arb_node_pin(struct arb_node *n);
void arb_node_put(struct arb_vol *vol, struct arb_node *n);
/*
 * arb_node_put of a node no one will read again (one the snapshot cleaner
 * freed): when clean and unpinned it goes first in line for eviction, not
 * last, so that a cleaning does not push everyone else's nodes out of the
 * cache.  (Freed nodes leave the cache when their delayed reference is
 * applied; until then they would have stood in front of every other.)
 */
void arb_node_put_cold(struct arb_vol *vol, struct arb_node *n);
void arb_node_mark_dirty(struct arb_vol *vol, struct arb_node *n);
/* The block was freed: drop a cached copy (it must not be written). */
void arb_node_forget(struct arb_vol *vol, uint64_t bytenr);
/* Validate a node buffer as read from bytenr (no I/O). 0 or -EUCLEAN,
 * with a reason in why (may be NULL). */
int arb_node_validate(struct arb_vol *vol, const uint8_t *buf, uint64_t bytenr,
		      const char **why);
/* Write every dirty node (checksummed). */
int arb_cache_write_dirty(struct arb_vol *vol);
/* Evict clean unpinned nodes until under the bound. */
void arb_cache_shrink(struct arb_vol *vol);
/* Forget every dirty node (transaction abort). */
void arb_cache_drop_dirty(struct arb_vol *vol);

/* node field helpers (native values) */
static inline struct arb_node_header *arb_hdr(const struct arb_node *n)
{
	return (struct arb_node_header *)n->data;
}
static inline uint32_t arb_nritems(const struct arb_node *n)
{
	return arb_node_header_h_nritems(arb_hdr(n));
}
static inline int arb_level(const struct arb_node *n)
{
	return arb_node_header_h_level(arb_hdr(n));
}
static inline uint64_t arb_node_gen(const struct arb_node *n)
{
	return arb_node_header_h_generation(arb_hdr(n));
}
static inline uint64_t arb_node_owner(const struct arb_node *n)
{
	return arb_node_header_h_owner(arb_hdr(n));
}
static inline struct arb_item *arb_item_nr(const struct arb_node *n, int slot)
{
	return (struct arb_item *)(n->data + sizeof(struct arb_node_header)) +
	       slot;
}
static inline struct arb_key_ptr *arb_ptr_nr(const struct arb_node *n,
					     int slot)
{
	return (struct arb_key_ptr *)(n->data +
				      sizeof(struct arb_node_header)) +
	       slot;
}
static inline void arb_node_key(const struct arb_node *n, int slot,
				struct arb_key *k)
{
	if (arb_level(n) == 0)
		arb_key_from_disk(k, &arb_item_nr(n, slot)->i_key);
	else
		arb_key_from_disk(k, &arb_ptr_nr(n, slot)->p_key);
}
static inline uint32_t arb_item_size(const struct arb_node *n, int slot)
{
	return arb_item_i_size(arb_item_nr(n, slot));
}
static inline void *arb_item_ptr(const struct arb_node *n, int slot)
{
	return n->data + arb_item_i_offset(arb_item_nr(n, slot));
}
static inline uint64_t arb_child_bytenr(const struct arb_node *n, int slot)
{
	return arb_key_ptr_p_blockptr(arb_ptr_nr(n, slot));
}
static inline uint64_t arb_child_gen(const struct arb_node *n, int slot)
{
	return arb_key_ptr_p_generation(arb_ptr_nr(n, slot));
}
static inline uint64_t arb_child_mirror(const struct arb_node *n, int slot)
{
	return arb_key_ptr_p_mirror(arb_ptr_nr(n, slot));
}
/* free bytes in a leaf */
uint32_t arb_leaf_free_space(const struct arb_vol *vol,
			     const struct arb_node *leaf);
static inline uint32_t arb_node_max_ptrs(const struct arb_vol *vol)
{
	return (vol->nodesize - sizeof(struct arb_node_header)) /
	       sizeof(struct arb_key_ptr);
}
/* largest item data a leaf can hold */
static inline uint32_t arb_max_item_size(const struct arb_vol *vol)
{
	return vol->nodesize - sizeof(struct arb_node_header) -
	       sizeof(struct arb_item);
}

/* ---- btree ------------------------------------------------------------- */

struct arb_root {
	struct arb_vol *vol;
	uint64_t id;
	/* root node, pinned */
	struct arb_node *node;
	/* nodes with generation <= last_snapshot may be shared */
	uint64_t last_snapshot;
	/* the ROOT_ITEM as last written (not for the root/extent tree roots,
	 * which live in the superblock / root tree too) */
	struct arb_root_item item;
	/* root node or root item changed since the root item was written */
	bool dirty;
	struct arb_root *next; /* vol->roots list */
	pthread_mutex_t lock; /* for upper layers */
};

struct arb_path {
	struct arb_node *nodes[ARB_MAX_LEVEL];
	int slots[ARB_MAX_LEVEL];
	/* key of an insertion search (internal) */
	struct arb_key ins_key;
};

void arb_path_init(struct arb_path *p);
void arb_path_release(struct arb_vol *vol, struct arb_path *p);

/*
 * Invariant checker (debug builds assert it after every search): p is a
 * path from root's root node down to a leaf, each node the child its
 * parent's slot points to, the leaf slot where key is (found == 0) or
 * would go (found == 1), and with cow_transid != 0 every node written by
 * that transaction.
 */
bool arb_path_ok(const struct arb_root *root, const struct arb_path *p,
		 const struct arb_key *key, int found, uint64_t cow_transid);
/*
 * Find key in root.  Returns 0 when found (path at the item), 1 when not
 * found (path at the slot where it would be inserted, which may be
 * nritems), <0 on error.  With t != NULL and cow != 0 every node on the path
 * is made writable in t (shadowed when needed).  ins_len > 0 makes sure the
 * leaf has room for an item of ins_len data bytes (on the way down a full
 * node moves entries into a sibling, or else splits; siblings may be
 * shadowed too).  ins_len < 0 does nothing more than 0: nodes are merged
 * bottom-up after a deletion (arb_del_item, arb_del_items), not on the way
 * down.
 */
int arb_search_slot(struct arb_txn *t, struct arb_root *root,
		    const struct arb_key *key, struct arb_path *p, int ins_len,
		    int cow);
/* Insert an item of size bytes (uninitialised data); 0 or -EEXIST/... .
 * On success the path points at the new item, writable. */
int arb_insert_empty_item(struct arb_txn *t, struct arb_root *root,
			  struct arb_path *p, const struct arb_key *key,
			  uint32_t size);
int arb_insert_item(struct arb_txn *t, struct arb_root *root,
		    const struct arb_key *key, const void *data, uint32_t size);
/* Delete nr items starting at path slot in the leaf of path (from a cow
 * search).  Merges underfull nodes; the path is released on return. */
int arb_del_items(struct arb_txn *t, struct arb_root *root, struct arb_path *p,
		  int slot, int nr);
int arb_del_item(struct arb_txn *t, struct arb_root *root,
		 const struct arb_key *key);
/* Change the size of the item at the path (from a cow search); growing
 * keeps the data, new bytes are at the end and uninitialised; shrinking cuts
 * the end.  The path points at the item afterwards (maybe in another leaf). */
int arb_resize_item(struct arb_txn *t, struct arb_root *root,
		    struct arb_path *p, uint32_t new_size);
/* Replace the data of an existing item (any size). */
int arb_update_item(struct arb_txn *t, struct arb_root *root,
		    const struct arb_key *key, const void *data, uint32_t size);
/* Look up one item and copy up to max bytes of it; returns the item size
 * (>=0), -ENOENT, or another error. */
int arb_lookup_item(struct arb_root *root, const struct arb_key *key,
		    void *buf, uint32_t max);
/* After a successful search, move to the next/previous leaf.  0 ok, 1 no
 * more leaves, <0 error.  Read-only paths only. */
int arb_next_leaf(struct arb_root *root, struct arb_path *p);
int arb_prev_leaf(struct arb_root *root, struct arb_path *p);
/*
 * Hint the leaf where key lives (or would live) to the device unless it is
 * cached; internal nodes on the way are read (and stay cached).  For a
 * caller about to look up a batch of scattered keys one by one: their
 * leaves then arrive in parallel.  Errors are left to the real lookups.
 */
void arb_prefetch_leaf(struct arb_root *root, const struct arb_key *key);
/*
 * The same for the leaves holding keys lo..hi, at most max of them and
 * only those under the parent of lo's leaf: for a caller about to scan the
 * range (a readdir from its start), whose leaves then arrive together
 * instead of one by one.
 */
void arb_prefetch_range(struct arb_root *root, const struct arb_key *lo,
			const struct arb_key *hi, int max);
/* Mark the leaf of a cow path dirty after changing item bytes in place. */
void arb_path_mark_dirty(struct arb_vol *vol, struct arb_path *p);

/*
 * Cursor for range iteration (read-only; re-seek after modifying the tree).
 */
struct arb_iter {
	struct arb_root *root;
	struct arb_path path;
	bool valid;
};
void arb_iter_init(struct arb_iter *it, struct arb_root *root);
/* position at the first item >= key (seek) or the last item <= key
 * (seek_le): 0 positioned, 1 no such item, <0 error */
int arb_iter_seek(struct arb_iter *it, const struct arb_key *key);
int arb_iter_seek_le(struct arb_iter *it, const struct arb_key *key);
/*
 * The first item at or after *k in root that has k's objectid and type:
 * 0 with *k set to its key, 1 when there is none, <0 error.  (An
 * iterator's seek, key and release, for the many "the next item of this
 * kind" lookups.)
 */
int arb_next_key_of(struct arb_root *root, struct arb_key *k);
int arb_iter_next(struct arb_iter *it);
int arb_iter_prev(struct arb_iter *it);
void arb_iter_key(const struct arb_iter *it, struct arb_key *key);
void *arb_iter_data(const struct arb_iter *it);
uint32_t arb_iter_size(const struct arb_iter *it);
/*
 * True when the leaf under the iterator can be reached from this tree
 * alone: it was written after the tree's last clone, by this tree.  Its
 * whole path was shadowed when it was written, and only a clone shares
 * nodes, so no other tree points at it or at any node above it.  False
 * means "may be shared", not "shared".  A data extent's reference count
 * cannot tell: counts are pushed down lazily (Rodeh), so an extent
 * pointed at from a shared leaf counts one reference for all the trees
 * that share the leaf.
 */
bool arb_iter_leaf_private(const struct arb_iter *it);
void arb_iter_release(struct arb_iter *it);

/* Create an empty tree with id (ROOT_ITEM inserted in the root tree); a
 * subvolume tree (ARB_FS_TREE_ID, ids from ARB_FIRST_SUBVOL_ID) gets a
 * random r_uuid. */
int arb_root_create(struct arb_txn *t, uint64_t id, struct arb_root **out);
/* Find a loaded root or load it from its ROOT_ITEM; -ENOENT if none. */
int arb_root_get(struct arb_vol *vol, uint64_t id, struct arb_root **out);
/*
 * The highest objectid ever handed out in tree r (ROOT_ITEM
 * r_highest_objectid; 0: not recorded, as in images made before it was
 * kept).  arb_root_note_objectid raises it to id (never lowers it); the
 * root item is written by the commit of t, so with whatever t made with
 * that objectid.
 */
uint64_t arb_root_highest_objectid(const struct arb_root *r);
void arb_root_note_objectid(struct arb_txn *t, struct arb_root *r,
			    uint64_t id);
/* Give tree r a random r_uuid if it has none (written by t's commit);
 * true when it had none. */
bool arb_root_ensure_uuid(struct arb_txn *t, struct arb_root *r);
/*
 * O(1) clone (Rodeh 2008): new tree new_id shares every node of src; the
 * children of src's root get one more reference.  Counts are pushed down
 * lazily when shared nodes are shadowed.  The clone's root item: a new
 * random r_uuid, r_parent_uuid = src's r_uuid, r_otransid = t's
 * transaction id, r_highest_objectid = src's.
 */
int arb_root_clone(struct arb_txn *t, struct arb_root *src, uint64_t new_id,
		   struct arb_root **out);
/* Drop a tree: free every node (and data extent reference) no other tree
 * shares, delete its ROOT_ITEM and unload it. */
int arb_root_drop(struct arb_txn *t, struct arb_root *root);
/*
 * The same in batches, each in a transaction of its own (btree.c,
 * "Dropping a tree"): release about b->nodes pointers (0: no limit), or
 * stop after b->ns nanoseconds (0: no limit), or when b->yield says
 * another thread waits, whichever comes first, and
 * record how far it got in the tree's DROP_PROGRESS item (format.h),
 * written by t's commit with the frees.  b NULL: the whole tree.  1 when
 * the tree is gone (ROOT_ITEM and DROP_PROGRESS deleted, root unloaded:
 * root is freed), 0 when more remains, <0 error (t failed).  Nothing but
 * dropping may change the tree between batches.
 */
struct arb_drop_budget {
	uint64_t nodes;
	uint64_t ns;
	/* when not NULL: also stop once *yield is non-zero (someone waits
	 * for the lock), after ARB_DROP_MIN_NODES at least */
	const unsigned *yield;
	/* when not NULL: a batch that has released something stops before
	 * it reads a node (of the tree or of the extent tree) that would
	 * wait for a disk (arb_node_nowait), and names it here, for the
	 * caller to fetch (arb_dev_prefetch) once it has let go of its
	 * lock; nr 0: the batch did not stop for that */
	struct arb_drop_fetch *fetch;
};
/*
 * What a batch stopped for: the node it missed, then, when that was a
 * node of the dropped tree, the next of its siblings the walk will visit
 * that are not in the node cache, in walk order, ARB_DROP_FETCH in all
 * (256 KiB of 16 KiB nodes).  The walk knows which nodes come next where
 * the host's read-ahead can only guess from addresses: the nodes of a
 * tree are seldom in address order, and read-ahead that guessed grew to
 * megabytes that everyone else's reads queued behind (lib/core/dev.c,
 * file_prefetch).
 */
#define ARB_DROP_FETCH 16
struct arb_drop_fetch {
	uint64_t addr[ARB_DROP_FETCH];
	unsigned nr;
};
#define ARB_DROP_MIN_NODES 1
int arb_root_drop_batch(struct arb_txn *t, struct arb_root *root,
			const struct arb_drop_budget *b);
/* the DROP_PROGRESS item of tree id: 0 and *dp, 1 none (not started),
 * -EUCLEAN malformed, <0 */
int arb_root_drop_progress(struct arb_vol *vol, uint64_t id,
			   struct arb_drop_progress *dp);
/* how far the drop of tree id has come: started, nodes visited and
 * freed, and an estimate of the part of the tree done (its key space
 * weighted by the fanout above, in thousandths: 0..999) */
struct arb_drop_state {
	bool started;
	uint64_t nodes, freed;
	unsigned permille;
};
int arb_root_drop_state(struct arb_vol *vol, uint64_t id,
			struct arb_drop_state *st);

/* internal to the core and the checker (txn.c, lib/check/walk.c) */
void arb_root_free(struct arb_vol *vol, struct arb_root *r);
int arb_root_load(struct arb_vol *vol, uint64_t id,
		  const struct arb_root_item *item, struct arb_root **out);
int arb_update_root_items(struct arb_txn *t);
int arb_bootstrap_roots(struct arb_txn *t);
/* read both superblock slots, pick the newest valid one */
int arb_read_super(struct arb_dev *dev, struct arb_super *out, int *slot,
		   const char **why);
bool arb_roots_dirty(struct arb_vol *vol);

/* ---- alloc ------------------------------------------------------------- */

/*
 * Allocate a tree node for tree owner at level; returns its bytenr and, on
 * a volume with two copies of metadata, the address of its second copy
 * (away from the first: searched from the other half of the space), else 0.
 */
int arb_alloc_tree_block(struct arb_txn *t, uint64_t owner, int level,
			 uint64_t *bytenr, uint64_t *mirror);
/*
 * Allocate a data extent of between min_bytes and num_bytes (multiples of
 * the sector size), contiguous, near hint; *got is the length obtained.
 * The caller adds its back-reference with arb_ref_data(+1) when it inserts
 * the file extent item.
 */
int arb_alloc_data(struct arb_txn *t, uint64_t num_bytes, uint64_t min_bytes,
		   uint64_t hint, uint64_t *bytenr, uint64_t *got);
/*
 * Grow the data extent [bytenr, bytenr + len) by the got bytes right after
 * it, which arb_alloc_data has just handed out and nothing references yet:
 * they become part of that extent instead of one of their own.  Only for
 * an extent held by exactly one reference, which the caller's file extent
 * is and covers whole; the caller then grows that file extent item.  The
 * count (checked here) only says that one leaf points at the extent: the
 * caller must also know that this leaf is not shared by a clone
 * (arb_iter_leaf_private), or the other trees would see the extent grow
 * and the shadowing of the shared leaf would reference it under its old
 * length.
 * 1 grown, 0 not possible (shared, or changes pending on it), <0 error.
 */
int arb_grow_data_extent(struct arb_txn *t, uint64_t bytenr, uint64_t len,
			 uint64_t got);
/* Change the reference count of a tree node (owner/level are its header's). */
int arb_ref_tree_block(struct arb_txn *t, uint64_t bytenr, uint64_t owner,
		       int level, int delta);
/* Change a data extent's count with back-reference (root, ino, offset). */
int arb_ref_data(struct arb_txn *t, uint64_t bytenr, uint64_t num_bytes,
		 uint64_t root, uint64_t ino, uint64_t offset, int delta);
/*
 * Insert back-reference item r of data extent bytenr where a lookup finds
 * it (the first free key offset from its hash on, format.h): for a repair
 * that rebuilds an extent's back-references.  -EEXIST if one with the same
 * (root, inode, offset) is there.
 */
int arb_data_ref_insert(struct arb_txn *t, uint64_t bytenr,
			const struct arb_extent_data_ref *r);
/* Current reference count of an extent, including pending changes. */
int arb_extent_refs(struct arb_txn *t, uint64_t bytenr, uint64_t *refs);
/* Apply pending reference changes to the extent tree (called by commit). */
int arb_run_delayed_refs(struct arb_txn *t);
/* Build the free space map from the extent tree (open). */
int arb_free_space_load(struct arb_vol *vol);
void arb_free_space_destroy(struct arb_vol *vol);
/* Release blocks pinned by the commit that just became durable (those of
 * a held generation go to the held list instead). */
void arb_free_space_unpin(struct arb_vol *vol);
/*
 * Data reads outside the lock.  Under the lock, a reader looks up where
 * its data lies, calls arb_data_read_begin, drops the lock, reads, and
 * calls arb_data_read_end (no lock needed).  Until then no sector freed
 * meanwhile is reused: it waits on a grace list, released by
 * arb_free_space_grace (called under the lock at every begin and commit)
 * once the readers that may have seen it mapped are done, or at once by an
 * allocation that would otherwise fail.
 */
unsigned arb_data_read_begin(struct arb_vol *vol);
void arb_data_read_end(struct arb_vol *vol, unsigned epoch);
/* Under the lock: wait until no data read runs outside it (before the
 * device itself changes, e.g. its size). */
void arb_data_readers_wait(struct arb_vol *vol);
void arb_free_space_grace(struct arb_vol *vol);
/* Short of space: wait until no unlocked read is in flight (they never
 * need the lock to finish), then release the grace lists; true if they
 * held anything. */
bool arb_free_space_grace_drain(struct arb_vol *vol);
/* bytes on the grace lists now (used in the map, covered by no extent) */
uint64_t arb_free_space_grace_bytes(struct arb_vol *vol);
/*
 * Hold generation gen (the last committed one): from now on a block that
 * gen references and a commit frees is not reused (it stays used in the
 * map, on a held list) until arb_free_space_release, so gen stays intact
 * on disk for a reader of it (the online check).  In memory only: a crash
 * forgets it, and the next open finds those blocks free.  -EBUSY if a hold
 * exists already.
 */
int arb_free_space_hold(struct arb_vol *vol, uint64_t gen);
/* End the hold: the held blocks become free. */
void arb_free_space_release(struct arb_vol *vol);
/* Bytes held now; *holding (may be NULL): is a hold active. */
uint64_t arb_free_space_held(struct arb_vol *vol, bool *holding);
/* Rebuild the map from the extent tree (abort), keeping a hold and the
 * blocks it holds. */
int arb_free_space_reload(struct arb_vol *vol);
/* the free-space map covers new_total bytes (-EBUSY: shrinking over used
 * or pinned sectors); see arb_vol_set_size */
int arb_free_space_resize(struct arb_vol *vol, uint64_t new_total);
/* Change the volume's size to new_total (a multiple of the sector size):
 * free-space map, vol->total_bytes and the superblock the next commit
 * writes (which it then writes even if nothing else changed).  The device
 * must already be at least that large.  Lock held, no transaction open. */
int arb_vol_set_size(struct arb_vol *vol, uint64_t new_total);
/* Free bytes, those the history grace keeps included (an allocation takes
 * them when nothing else is free). */
uint64_t arb_free_bytes(struct arb_vol *vol);
/*
 * History grace (alloc.c; history.c says what it is for): bytes kept now;
 * give back the blocks freed by the oldest commit that has any (the
 * generations before it leave the history), false when none; give back
 * all; keep the free sectors of [start, start+len) as freed by commit gen
 * (open: arb_history_regrace; the ranges must come in commit order).
 */
uint64_t arb_free_space_history_bytes(struct arb_vol *vol);
bool arb_free_space_history_reclaim(struct arb_vol *vol);
void arb_free_space_history_drop(struct arb_vol *vol);
int arb_free_space_history_keep(struct arb_vol *vol, uint64_t start,
				uint64_t len, uint64_t gen);
/* put the kept ranges in commit order (after keeping them out of order) */
void arb_free_space_history_sort(struct arb_vol *vol);
/*
 * Invariant checker of the free-space map (debug builds assert it after
 * every commit): the free count is the number of free sectors, the fixed
 * start is used, and every pinned, held and grace range is marked used,
 * held and grace adding up to their counters.  O(sectors / 64).
 */
bool arb_free_space_ok(struct arb_vol *vol);
/*
 * The first free run of sectors in [pos, end) (sector numbers; nothing
 * below the data area): true with *start, *len, false if none.  Free in
 * the map means free in the last durable commit and in the running
 * transaction alike (pinned and grace ranges count as used), so the run
 * may be discarded while the lock is held.
 */
bool arb_free_space_next(struct arb_vol *vol, uint64_t pos, uint64_t end,
			 uint64_t *start, uint64_t *len);
/* note (on) every run that becomes free from now on, for discard */
void arb_free_space_track_freed(struct arb_vol *vol, bool on);
/* the runs noted since the last call as (start, len) sector pairs in
 * *runs (malloc'd) and their number; *all: too many were noted, scan the
 * whole map instead */
size_t arb_free_space_take_freed(struct arb_vol *vol, uint64_t **runs,
				 bool *all);
/* bytes in extents (tree nodes and data) */
uint64_t arb_used_bytes(struct arb_vol *vol);
/* data allocations keep this many bytes free for tree nodes */
void arb_set_meta_reserve(struct arb_vol *vol, uint64_t bytes);
/* are reference changes waiting to be applied */
bool arb_delayed_refs_pending(struct arb_vol *vol);
/* extents with reference changes waiting for the commit (heads) */
size_t arb_delayed_refs_count(struct arb_vol *vol);
/* drop pending reference changes and this transaction's allocations
 * (abort); the free-space map is rebuilt by the caller */
void arb_delayed_refs_drop(struct arb_vol *vol);
/* is [bytenr, +len) free in the map (checker) */
bool arb_free_space_test(struct arb_vol *vol, uint64_t bytenr, uint64_t len,
			 bool want_free);
/*
 * The tree layer tells alloc which data extents a leaf references, so that
 * cloning/dropping shared leaves keeps data reference counts right.
 * Calls fn for every REG/PREALLOC EXTENT_DATA item in leaf.
 */
int arb_leaf_data_refs(struct arb_txn *t, struct arb_node *leaf, uint64_t root,
		       int delta);

/* ---- txn --------------------------------------------------------------- */

enum arb_txn_state {
	ARB_TXN_RUNNING = 0,
	ARB_TXN_COMMITTING = 1,
	ARB_TXN_FAILED = 2,
};

struct arb_txn {
	struct arb_vol *vol;
	uint64_t transid;
	int state;
	/* first error; only abort is allowed after it */
	int error;
	int users;
};

/* Join the running transaction or start one.  -EROFS on a read-only or
 * failed volume. */
int arb_txn_begin(struct arb_vol *vol, struct arb_txn **out);
/* Leave the transaction without committing it. */
void arb_txn_end(struct arb_txn *t);
/*
 * Commit.  Order (see txn.c): delayed refs and root items settle; all dirty
 * nodes written; flush; superblock (generation+1) written to the other
 * slot; flush.  Returns 0 when the new generation is durable.
 */
int arb_txn_commit(struct arb_txn *t);
/* Throw the running transaction away: the volume goes back to the last
 * committed state (dirty nodes dropped, roots reloaded). */
void arb_txn_abort(struct arb_txn *t);
/* The same without the warning: for a transaction that turned out to have
 * nothing to commit, which is no failure (fsck -y that only rewrote node
 * copies, outside any transaction). */
void arb_txn_discard(struct arb_txn *t);
/* record err as the transaction's first error; returns err */
int arb_txn_fail(struct arb_txn *t, int err);
static inline int arb_txn_check(struct arb_txn *t)
{
	return t->error ? t->error : 0;
}

/* ---- check (lib/check/walk.c) -------------------------------------------- */

/* now and then: the phase ("structure, part 2/5"), how far it is in units
 * of that phase (done may pass total on a damaged volume) and the nodes,
 * items and data sectors it has checked so far */
typedef void (*arb_check_progress_fn)(void *arg, const char *phase,
				      uint64_t done, uint64_t total,
				      uint64_t checked);

struct arb_check_report {
	uint64_t nodes, items, errors;
	FILE *out; /* problems are printed here when not NULL */
	/* in: bytes the reference tables may take; 0 = no bound (one part) */
	uint64_t budget;
	/* in: progress callback (may be NULL) and its argument */
	arb_check_progress_fn progress;
	void *progress_arg;
	/* out: parts the address space was checked in */
	unsigned parts;
};

/*
 * Checking in parts.  The reference-counting passes (here and in the fs
 * layer's extent check) keep one table entry per tree node, data extent
 * and data back-reference.  To bound that memory they split the disk
 * address space into parts and run once per part, re-walking every tree
 * each time but keeping only the entries whose address falls in the part.
 * arb_check_plan_make cuts the parts from one scan of the extent tree so
 * that each holds about budget / ARB_CHECK_ENTRY_BYTES entries: what an
 * entry (72 bytes) costs at the tables' worst, just after they double
 * (fill 1/4, 4x) while the old table is still there (2x more), plus the
 * lists beside them (allocated ranges, sorted back-references).
 */
#define ARB_CHECK_ENTRY_BYTES 512
#define ARB_CHECK_MAX_PARTS 4096
struct arb_check_plan {
	/* part i is [bound[i], bound[i + 1]); bound[0] = 0 and
	 * bound[nparts] = UINT64_MAX */
	uint64_t *bound;
	unsigned nparts;
	/* what the extent tree holds: tree block items, data extent items,
	 * back-reference items and the bytes of the data extents */
	uint64_t nodes, data, refs, data_bytes;
};
/* budget 0: one part.  An extent tree that does not read gives one part
 * (the checkers report it).  0 or -ENOMEM. */
int arb_check_plan_make(struct arb_vol *vol, uint64_t budget,
			struct arb_check_plan *p);
void arb_check_plan_free(struct arb_check_plan *p);

/* The nodes a walk has seen: one bit per sector of the volume (as the
 * free-space map), so a node reached by several pointers is read and
 * descended once per walk whatever part is being counted. */
struct arb_check_seen {
	uint64_t *bits;
	uint64_t nbits;
	uint32_t sectorsize;
};
int arb_check_seen_init(struct arb_vol *vol, struct arb_check_seen *s);
/* Was addr seen before (then true); marks it.  An address off the sector
 * grid or beyond the volume is never marked (no node can be read there). */
bool arb_check_seen_test_set(struct arb_check_seen *s, uint64_t addr);
bool arb_check_seen_test(const struct arb_check_seen *s, uint64_t addr);
void arb_check_seen_clear(struct arb_check_seen *s);
void arb_check_seen_free(struct arb_check_seen *s);
/*
 * Check the committed (or, if a transaction is running, the in-memory) state:
 * every tree's structure, key order, parent/child key bounds, fill,
 * checksums, reference counts equal to the references that exist,
 * back-references equal to forward references, free space map consistent.
 * Returns 0 if clean, -EUCLEAN if problems were found, other <0 on I/O error.
 */
int arb_check_vol(struct arb_vol *vol, struct arb_check_report *rep);

#endif
