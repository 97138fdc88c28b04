/* SPDX-License-Identifier: MIT */
/*
 * fs.c - a mounted filesystem: open/close, mkfs, the commit thread, the
 * transaction wrappers every operation uses, statfs/stats, the table of
 * open inodes and orphan handling.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "fs_int.h"
#include "usage.h"

/*
 * The kernel's clock for file times: with the writeback cache the kernel
 * stamps mtime and ctime of written files itself, with its coarse clock
 * (a tick, 1-4 ms, behind the precise one), as ext4 and tmpfs do here.
 * Stamping the other times with the precise clock gave a new file an
 * atime a few ms after its mtime, so relatime saw it as read after the
 * write and its first read left it alone.  One clock for all three times.
 */
void fs_now(struct timespec *ts)
{
	clock_gettime(CLOCK_REALTIME_COARSE, ts);
}

/* short of space: an online check holding freed blocks lets go */
static void fs_space_yield(struct arb_fs *fs)
{
	if (fs->space_yield)
		(void)fs->space_yield(fs);
}

void arb_fs_opts_default(struct arb_fs_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->max_inline = 2048;
	o->commit_interval = 5;
	o->history_secs = 0;
	o->history_commits = 8;
}

void arb_mkfs_opts_default(struct arb_mkfs_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->root_mode = 0755;
}

/* ---- transactions ------------------------------------------------------ */

static uint64_t op_meta_bytes(struct arb_fs *fs)
{
	/* every node costs its copies (duplicated metadata) */
	return (uint64_t)ARB_OP_META_NODES * arb_node_alloc_bytes(fs->vol);
}

/*
 * Dirty tree nodes past which an operation commits: a quarter of the node
 * cache, at most ARB_DIRTY_NODES_MAX and at most 1/64 of the filesystem
 * (but not below 16 MiB, the bound of the old 64 MiB cache).  The
 * reservations below scale with it (up to 6x it with dup): a small image
 * would lose its free space to them in a large transaction.
 */
static uint64_t fs_dirty_nodes_limit(const struct arb_vol *vol)
{
	uint64_t lim = vol->cache.max_bytes / 4;
	uint64_t by_size = vol->total_bytes / 64;

	if (by_size < (16ULL << 20))
		by_size = 16ULL << 20;
	if (lim > by_size)
		lim = by_size;
	return lim < ARB_DIRTY_NODES_MAX ? lim : ARB_DIRTY_NODES_MAX;
}

/*
 * Metadata space the running transaction may still need.  Each operation
 * reserves its worst case (op_meta_bytes), but a node dirtied once is not
 * paid for again, and a transaction never dirties more than the dirty-node
 * limit (fs_dirty_nodes_limit: fs_op_end commits past it) plus one
 * operation's nodes; the commit then writes extent-tree and root-tree
 * changes for those.  So the sum of the reservations is capped at three
 * times that bound: without the cap, df's "available" fell by 512 KiB per
 * operation until the next commit (to nothing on a busy 4 GiB image), and
 * a large image committed early just to reset the sum.
 */
static uint64_t txn_meta_bytes(struct arb_fs *fs)
{
	struct arb_vol *vol = fs->vol;
	uint64_t nodes = fs_dirty_nodes_limit(vol) / vol->nodesize +
			 ARB_OP_META_NODES;
	uint64_t cap = 3 * nodes * arb_node_alloc_bytes(vol);

	return fs->txn_meta < cap ? fs->txn_meta : cap;
}

/*
 * What df shows as available: free, less the data waiting for allocation
 * and the reserve for deletes.  Not the metadata operations reserve for
 * their worst case until the next commit: an estimate, thirty times what
 * 4,000 small files took, gone at the next commit (see arb_fs_statfs).
 */
uint64_t fs_avail_bytes(struct arb_fs *fs)
{
	uint64_t free_b = fs_free_bytes(fs);

	return free_b > fs->reserve ? free_b - fs->reserve : 0;
}

/* free, less the data waiting for allocation (df's free) */
uint64_t fs_free_bytes(struct arb_fs *fs)
{
	uint64_t free_b = arb_free_bytes(fs->vol);
	uint64_t delayed = fs->dirty_bytes + fs->dirty_bytes / 256;

	return free_b > delayed ? free_b - delayed : 0;
}

/*
 * Metadata the pending reference changes will take at commit.  Once a
 * tree shares nodes with a clone, the first change under a shared node
 * pushes a reference down to each of its children: one operation can
 * queue hundreds of changes, each rewriting an extent item and its
 * back-references in the extent tree at commit.  A chmod pass over
 * 100,000 files after a snapshot queued 5,322 (1,550 without it), which
 * the per-operation reservation did not see.  Worst case about 256 bytes
 * of extent-tree leaf per change (item, back-reference, leaf slack).
 */
static uint64_t dref_meta_bytes(struct arb_fs *fs)
{
	return (uint64_t)arb_delayed_refs_count(fs->vol) * 256 *
	       fs->vol->meta_copies;
}

static bool op_has_space(struct arb_fs *fs, uint64_t need, unsigned flags)
{
	uint64_t free_b = arb_free_bytes(fs->vol);
	uint64_t want = need + need / 256 + op_meta_bytes(fs) +
			txn_meta_bytes(fs) + dref_meta_bytes(fs) +
			fs->dirty_bytes + fs->dirty_bytes / 256;

	/* the last half of the reserve is kept for deleting a subvolume:
	 * with snapshots, unlinks copy shared leaves and can use up the
	 * rest, and only dropping a snapshot gives space back then */
	if (!(flags & (ARB_OP_RESERVE | ARB_OP_LAST)))
		want += fs->reserve;
	else if (!(flags & ARB_OP_LAST))
		want += fs->reserve / 2;
	return free_b >= want;
}

int fs_commit(struct arb_fs *fs)
{
	uint64_t start = arb_mono_ns(), commits = fs->vol->nr_commits;
	struct arb_txn *t;
	int ret;

	if (fs->readonly)
		return fs->failed ? -EIO : 0;
	ret = arb_txn_begin(fs->vol, &t);
	if (ret)
		return ret;
	ret = arb_txn_commit(t);
	if (fs->vol->nr_commits != commits) {
		fs->last_commit_ns = arb_mono_ns() - start;
		fs->commit_ns += fs->last_commit_ns;
	}
	if (ret) {
		arb_log(ARB_LOG_ERR,
			"commit of generation %llu failed: %s (%d); the "
			"filesystem is now read-only, generation %llu is the "
			"last one on disk",
			(unsigned long long)fs->vol->generation + 1,
			strerror(-ret), ret,
			(unsigned long long)fs->vol->generation);
		fs->readonly = true;
		fs->failed = true;
		fs->error = ret;
		fs_imem_drop_all_data(fs);
		/* a failed write or flush leaves the transaction running (the
		 * volume refuses new ones): drop it, so that what the mount
		 * shows from now on is the last commit, as on disk */
		if (fs->vol->running) {
			arb_txn_abort(fs->vol->running);
			fs_trees_reload(fs);
			(void)arb_root_get(fs->vol, ARB_CSUM_TREE_ID,
						   &fs->csum);
		}
		fs->txn_dirty = false;
		return ret;
	}
	fs->txn_dirty = false;
	fs->txn_meta = 0;
	fs->commit_seq++;
	return 0;
}

int fs_op_begin(struct arb_fs *fs, struct arb_txn **t, uint64_t ino,
		uint64_t need, unsigned flags)
{
	int ret;

	if (fs->readonly)
		return fs->shutdown ? -EIO : -EROFS;
	/* a read-only subvolume (its tree is open: ino was read) */
	if (ino && fs_tree_of(fs, ino)->rdonly)
		return -EROFS;
	if (!op_has_space(fs, need, flags)) {
		/* space freed since the last commit is usable only once that
		 * commit is durable; delayed data may also shrink when it is
		 * written (rewrites before a commit cost nothing) */
		ret = fs_commit(fs);
		if (ret)
			return ret;
		/* an online check holding freed blocks gives way to writes,
		 * and so do data reads in flight outside the lock */
		if (!op_has_space(fs, need, flags))
			fs_space_yield(fs);
		if (!op_has_space(fs, need, flags))
			arb_free_space_grace_drain(fs->vol);
		while (!op_has_space(fs, need, flags)) {
			/* -o autogrow: a bigger image instead of ENOSPC */
			if (fs_autogrow(fs, need))
				return -ENOSPC;
		}
	}
	ret = arb_txn_begin(fs->vol, t);
	if (ret)
		return ret;
	fs->txn_meta += op_meta_bytes(fs);
	return 0;
}

void fs_abort(struct arb_fs *fs, struct arb_txn *t, int err)
{
	arb_log(ARB_LOG_ERR,
		"operation failed in the middle of a transaction (%d): "
		"aborting the transaction, filesystem is now read-only",
		err);
	arb_txn_abort(t);
	fs_imem_drop_all_data(fs);
	fs->readonly = true;
	fs->failed = true;
	fs->error = err;
	fs->txn_dirty = false;
	fs_trees_reload(fs);
	(void)arb_root_get(fs->vol, ARB_CSUM_TREE_ID, &fs->csum);
}

int fs_op_end(struct arb_fs *fs, struct arb_txn *t, int err)
{
	struct arb_vol *vol = fs->vol;
	int ret;

	if (err) {
		fs_abort(fs, t, err);
		return err;
	}
	fs->txn_dirty = true;
	fs_note_change(fs);
	arb_txn_end(t);
	/* pending reference changes count too: the commit applies them
	 * all, holding the lock (5,322 took 194 ms) */
	if (fs->dirty_bytes > ARB_DIRTY_LIMIT ||
	    (uint64_t)vol->cache.nr_dirty * vol->nodesize >
		    fs_dirty_nodes_limit(vol) ||
	    arb_delayed_refs_count(vol) > ARB_DREF_COMMIT ||
	    arb_free_bytes(vol) < fs->reserve) {
		ret = fs_commit(fs);
		if (ret)
			return ret;
		if (arb_free_bytes(vol) < fs->reserve)
			fs_space_yield(fs);
	}
	return 0;
}

int fs_pre_commit(struct arb_txn *t, void *arg)
{
	struct arb_fs *fs = arg;

	return fs_flush_all(fs, t);
}

/* ---- commit thread ----------------------------------------------------- */

void fs_unlock_handoff(struct arb_fs *fs)
{
	const struct timespec nap = { 0, 20 * 1000 };
	unsigned seq = __atomic_load_n(&fs->lock_seq, __ATOMIC_RELAXED);
	bool waited = __atomic_load_n(&fs->lock_waiters, __ATOMIC_RELAXED);
	uint64_t end;

	fs_unlock(fs);
	if (!waited)
		return;
	end = arb_mono_ns() + ARB_HANDOFF_NS;
	while (__atomic_load_n(&fs->lock_seq, __ATOMIC_RELAXED) == seq &&
	       __atomic_load_n(&fs->lock_waiters, __ATOMIC_RELAXED) &&
	       arb_mono_ns() < end)
		nanosleep(&nap, NULL);
}

/*
 * While a deleted subvolume is cleaned, a commit comes at least this often
 * (what a crash loses of the cleaning).
 */
#define CLEAN_COMMIT_NS (1000ULL * 1000 * 1000)

/*
 * The cleaner's share while other threads use the filesystem.  Handing
 * the lock over (fs_unlock_handoff) lets a waiting request in, but a
 * request that comes a moment later still finds a batch running, and on
 * two CPUs the cleaner's own CPU time delays the FUSE threads' wake-ups.
 * So when another thread had the lock since the cleaner's last batch, or
 * waits for it, the cleaner rests after the batch: ARB_CLEAN_YIELD times
 * as long as the batch held the lock, at least ARB_CLEAN_REST_NS (most
 * batches hold it under 100 us: the rest is what sets the share), at most
 * ARB_CLEAN_REST_MAX_NS.  Alone, it does not rest (cleaning 10^6 files
 * took 2.4-3.0 s with and without this).  Measured with the probe of
 * bench/snapshot.sh at 10^6 files on 2 CPUs, run by hand (two runs
 * each; p99 while cleaning over idle; the probe as it was before its
 * idle and busy runs took different directories): no rest: stat
 * x3.1-3.7, 4 KiB read x5.2-5.7, cleaning 1.9-2.1 s; this (400 us):
 * x1.5, x2.5-2.7, 3.6-3.7 s; 1 ms after every batch: x0.8-1.0,
 * x1.8-2.0, 5.7-6.2 s.  The requests served meanwhile grow with it
 * (3,900 in 2 s without a rest, 14,000 in 3.7 s with it).  What was left
 * of the ratio was not the lock: timing each request in the daemon, of
 * those that took 0.5 ms or more while cleaning, 80 of 96 lookups and
 * 65 of 72 reads spent most of it in their disk read, queued behind the
 * host's read-ahead for the cleaner (lib/core/dev.c, file_prefetch).
 * The time a fetch takes counts as rest: others have the lock meanwhile
 * (cleaning 4.6-4.9 s instead of 5.1-5.3, the ratios within the noise).
 */
#define ARB_CLEAN_REST_NS (400 * 1000)
#define ARB_CLEAN_REST_MAX_NS (2 * 1000 * 1000)
#define ARB_CLEAN_YIELD 3

void fs_clean_locked(struct arb_fs *fs)
{
	fs->clean_lock_ns = arb_mono_ns();
	fs->clean_seq = __atomic_load_n(&fs->lock_seq, __ATOMIC_RELAXED);
}

static int addr_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* read what a batch stopped for into the host's cache: in address order,
 * one read per run of adjacent nodes */
static void clean_fetch(struct arb_dev *dev, struct arb_drop_fetch *f,
			size_t nodesize)
{
	unsigned i = 0;

	qsort(f->addr, f->nr, sizeof(f->addr[0]), addr_cmp);
	while (i < f->nr) {
		unsigned j = i + 1;

		while (j < f->nr && f->addr[j] == f->addr[j - 1] + nodesize)
			j++;
		arb_dev_prefetch(dev, f->addr[i], (j - i) * nodesize);
		i = j;
	}
}

/* between two batches of the cleaner (lock held, let go and taken again):
 * the threads waiting for the lock have it first, the nodes the batch
 * stopped for are read into the host's cache meanwhile, and the cleaner
 * rests while others use the filesystem, the time the fetch took
 * included (others had the lock meanwhile) */
void fs_clean_pause(struct arb_fs *fs)
{
	struct arb_drop_fetch fetch = fs->clean_fetch;
	uint64_t t0 = arb_mono_ns(), rest = 0;
	struct arb_dev *dev = fs->vol->dev;
	size_t len = fs->vol->nodesize;

	if (__atomic_load_n(&fs->lock_waiters, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&fs->lock_seq, __ATOMIC_RELAXED) != fs->clean_seq) {
		rest = fs->clean_lock_ns && t0 > fs->clean_lock_ns
			       ? (t0 - fs->clean_lock_ns) * ARB_CLEAN_YIELD
			       : 0;
		if (rest < ARB_CLEAN_REST_NS)
			rest = ARB_CLEAN_REST_NS;
		if (rest > ARB_CLEAN_REST_MAX_NS)
			rest = ARB_CLEAN_REST_MAX_NS;
	}
	fs->clean_fetch.nr = 0;
	fs_unlock_handoff(fs);
	if (fetch.nr) {
		uint64_t f0 = arb_mono_ns(), took;

		clean_fetch(dev, &fetch, len);
		took = arb_mono_ns() - f0;
		rest = rest > took ? rest - took : 0;
	}
	if (rest) {
		struct timespec ts = { (time_t)(rest / 1000000000ULL),
				       (long)(rest % 1000000000ULL) };

		nanosleep(&ts, NULL);
	}
	fs_lock(fs);
	fs_clean_locked(fs);
}

void fs_clean_kick(struct arb_fs *fs)
{
	fs->clean_pending = true;
	pthread_cond_signal(&fs->clean_wake);
}

/*
 * The cleaner: drops deleted subvolumes, one batch at a time, at a low CPU
 * priority.  Measured with 10^6 files cleaned on 2 CPUs (the probe of
 * bench/snapshot.sh's latency part, run by hand with and without the
 * nice value): as an equal of the FUSE threads, its CPU time delayed
 * their wake-ups by milliseconds (stat p99 1.7 ms, idle 0.25 ms); at
 * nice 19, 0.7-1.0 ms.  The cost is priority inversion: a batch
 * holds the lock at that priority, and on a machine whose CPUs other work
 * keeps busy it gets a small share of one, while the threads waiting for
 * the lock wait for it.  So its batches stop at the first waiter, it
 * hands the lock over between them (fs_unlock_handoff), and every commit
 * it needs (once a second, and the one that ends a cleaning, 30-50 ms of
 * CPU for 10^6 files) is the commit thread's (commit_asked).  The nice
 * value can only be raised without privileges: it stays.
 */
#define ARB_CLEAN_NICE 19

static void *clean_thread(void *arg)
{
	struct arb_fs *fs = arg;
	uint64_t last = arb_mono_ns();

	(void)setpriority(PRIO_PROCESS, (id_t)gettid(), ARB_CLEAN_NICE);
	fs_lock(fs);
	while (!fs->stop) {
		int r = 0;

		fs_clean_locked(fs);

		if (fs->clean_pending && !fs->readonly)
			r = fs_subvol_clean(fs);
		if (r == 1) {
			/* gone: its last batch asked for the commit */
			last = arb_mono_ns();
			continue;
		}
		if (r == 2) {
			/* a batch: a commit now and then */
			if (arb_mono_ns() - last >= CLEAN_COMMIT_NS) {
				fs->commit_asked = true;
				pthread_cond_signal(&fs->cond);
				last = arb_mono_ns();
			}
			fs_clean_pause(fs);
			continue;
		}
		/* nothing to do (or pinned, or an error): until kicked */
		fs->clean_pending = false;
		pthread_cond_wait(&fs->clean_wake, &fs->vol->lock);
	}
	fs_unlock(fs);
	return NULL;
}

/*
 * Commits every commit_interval seconds, and (idle_commit_ms) once the
 * filesystem has been still for that long after a change: sync(1) and
 * syncfs(2) send a FUSE daemon nothing but the written-back pages, so the
 * idle commit is what makes them durable soon after they return.  A
 * change wakes the thread (fs_note_change) when it sleeps for longer.
 */
static void *commit_thread(void *arg)
{
	struct arb_fs *fs = arg;
	uint64_t idle_ns = (uint64_t)fs->opts.idle_commit_ms * 1000000ULL;
	uint64_t period_ns = (uint64_t)fs->opts.commit_interval * 1000000000ULL;
	uint64_t last = arb_mono_ns();
	struct timespec ts;

	fs_lock(fs);
	while (!fs->stop) {
		uint64_t now, wait_ns, due;
		bool dirty;

		/* orphans of subvolumes opened since the last look */
		if (!fs->readonly)
			(void)fs_free_tree_orphans(fs);
		/* the cleaner's, made here at this thread's priority (and
		 * the end of a cleaning: arb_subvol_wait waits for it) */
		if (fs->commit_asked) {
			fs->commit_asked = false;
			(void)fs_commit(fs);
			pthread_cond_broadcast(&fs->clean_cond);
			last = arb_mono_ns();
			continue;
		}
		now = arb_mono_ns();
		due = last + period_ns;
		dirty = fs->txn_dirty || fs->dirty_bytes;

		if (dirty && idle_ns && fs->last_change_ns + idle_ns < due)
			due = fs->last_change_ns + idle_ns;
		if (dirty && now >= due) {
			(void)fs_commit(fs);
			fs_trim_freed(fs);
			last = arb_mono_ns();
			continue;
		}
		fs->commit_sleeping = !dirty || due > now + idle_ns;
		wait_ns = (dirty ? due : last + period_ns) - now;
		if (now >= last + period_ns)
			wait_ns = period_ns; /* clean: a full period */
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += (time_t)(wait_ns / 1000000000ULL);
		ts.tv_nsec += (long)(wait_ns % 1000000000ULL);
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&fs->cond, &fs->vol->lock, &ts);
		fs->commit_sleeping = false;
		/* what other commits (fsync, space) freed meanwhile */
		fs_trim_freed(fs);
		if (!fs->txn_dirty && !fs->dirty_bytes)
			last = arb_mono_ns(); /* someone else committed */
	}
	fs_unlock(fs);
	return NULL;
}

/* Lock held: something changed; wake the commit thread if it sleeps
 * past the idle commit. */
void fs_note_change(struct arb_fs *fs)
{
	fs->last_change_ns = arb_mono_ns();
	if (fs->commit_sleeping && fs->opts.idle_commit_ms) {
		fs->commit_sleeping = false;
		pthread_cond_signal(&fs->cond);
	}
}

/* ---- open / close ------------------------------------------------------ */

/*
 * Why arb_vol_open failed: the superblock reader's own reason when the
 * superblocks are the problem, else a message for the error code.
 */
static const char *open_why(struct arb_dev *dev, int err)
{
	struct arb_super sb;
	const char *why = NULL;
	int slot;

	if (err == -EBUSY)
		return "image is in use";
	if (arb_read_super(dev, &sb, &slot, &why) != 0 && why)
		return why;
	switch (err) {
	case -EINVAL:
		return "not an arborfs image";
	case -EUCLEAN:
		return "corrupt tree root or free space";
	case -EPROTONOSUPPORT:
		return "format version or feature newer than supported";
	case -EROFS:
		return "image needs a read-only open";
	case -ENOMEM:
		return "out of memory";
	case -EIO:
		return "I/O error reading the image";
	default:
		return "cannot open the volume";
	}
}

/*
 * An fs tree made before trees had UUIDs (and kept the highest inode
 * number handed out) gets both at its first writable mount, committed
 * right away: a UUID from then on names the tree for good, and the
 * highest inode present is the best value the image can still give.
 * Read-only mounts leave the image as it is.
 */
static int fs_upgrade_root_item(struct arb_fs *fs, uint64_t max_ino)
{
	static const uint8_t zero[ARB_UUID_SIZE];
	struct arb_txn *t;
	int ret;

	struct arb_root *root = fs_tree0(fs)->root;

	if (memcmp(root->item.r_uuid, zero, ARB_UUID_SIZE))
		return 0;
	ret = arb_txn_begin(fs->vol, &t);
	if (ret)
		return ret;
	arb_root_ensure_uuid(t, root);
	if (!arb_root_highest_objectid(root))
		arb_root_note_objectid(t, root, max_ino);
	arb_txn_end(t);
	fs->txn_dirty = true;
	arb_log(ARB_LOG_INFO, "filesystem tree had no UUID: gave it one");
	return fs_commit(fs);
}

/* highest inode objectid in use in tr (orphans excluded) */
int fs_tree_max_ino(struct fs_tree *tr, uint64_t *max)
{
	struct arb_iter it;
	struct arb_key key = { ARB_ORPHAN_OBJECTID - 1, 255, UINT64_MAX }, k;
	int ret;

	arb_iter_init(&it, tr->root);
	ret = arb_iter_seek_le(&it, &key);
	if (ret == 0)
		arb_iter_key(&it, &k);
	arb_iter_release(&it);
	if (ret < 0)
		return ret;
	*max = (ret == 0 && k.objectid >= ARB_FIRST_INO) ? k.objectid
							  : ARB_FIRST_INO;
	return 0;
}

/* arb_fs_opts.generation: a read-only view of a generation the history
 * lists, every node of it verified */
static int fs_open_generation(struct arb_dev *dev, const struct arb_fs_opts *o,
			      struct arb_fs **out, const char **why)
{
	struct arb_super sb, view;
	struct arb_vol_opts vo;
	struct arb_vol *vol;
	int slot, ret;

	if (!o->readonly) {
		*why = "an older generation opens read-only only";
		return -EROFS;
	}
	ret = arb_read_super(dev, &sb, &slot, why);
	if (ret)
		return ret;
	if (o->generation == arb_super_s_generation(&sb))
		return fs_open_at(dev, o, NULL, out, why);
	if (o->generation > arb_super_s_generation(&sb)) {
		*why = "that generation was never committed (the newest is "
		       "older)";
		return -ENOENT;
	}
	if (arb_history_find(&sb, o->generation, &view)) {
		*why = "that generation is not in the history (too old, or "
		       "its blocks were given to new data: `arbor filesystem "
		       "history` lists the ones that can be opened)";
		return -ENOENT;
	}
	/* every node first, on a volume of its own (the device stays the
	 * caller's on failure) */
	memset(&vo, 0, sizeof(vo));
	vo.readonly = true;
	vo.super = &view;
	vo.cache_bytes = o->cache_bytes;
	ret = arb_vol_open(dev, &vo, &vol);
	if (!ret) {
		pthread_mutex_lock(&vol->lock);
		ret = arb_vol_verify_trees(vol);
		pthread_mutex_unlock(&vol->lock);
		arb_vol_close(vol);
	}
	if (!ret)
		ret = fs_open_at(dev, o, &view, out, why);
	if (ret == -EUCLEAN || ret == -EIO) {
		*why = "that generation is no longer intact: some of its "
		       "blocks were reused (a tree node does not verify)";
		return -ESTALE;
	}
	return ret;
}

int arb_fs_open(struct arb_dev *dev, const struct arb_fs_opts *o,
		struct arb_fs **out, const char **why)
{
	if (o && o->generation) {
		const char *w = NULL;
		int ret = fs_open_generation(dev, o, out, &w);

		if (why)
			*why = w;
		return ret;
	}
	return fs_open_at(dev, o, NULL, out, why);
}

int arb_fs_history(struct arb_fs *fs, struct arb_history_info *out,
		   unsigned max)
{
	const struct arb_history *h;
	int n;

	fs_lock(fs);
	h = &fs->vol->hist;
	n = (int)h->nr;
	for (unsigned i = 0; i < h->nr && i < max; i++) {
		out[i].generation = arb_history_entry_he_generation(&h->e[i]);
		out[i].time.tv_sec =
			(time_t)arb_history_entry_he_time(&h->e[i]);
		out[i].time.tv_nsec =
			(long)arb_history_entry_he_time_ns(&h->e[i]);
	}
	if (!n && max) {
		/* no history: the last commit alone, time unknown */
		out[0].generation = fs->vol->generation;
		out[0].time.tv_sec = 0;
		out[0].time.tv_nsec = 0;
		n = 1;
	} else if (!n) {
		n = 1;
	}
	fs_unlock(fs);
	return n;
}

int arb_fs_open_image(const char *path, const struct arb_fs_opts *o,
		      struct arb_fs **out, const char **why)
{
	struct arb_dev *dev;
	int ret;

	*why = NULL;
	arb_log_hold(true);
	ret = arb_dev_open_file(path, o->readonly, 0, &dev);
	if (ret) {
		*why = ret == -EBUSY ? ARB_BUSY_HINT : arb_log_take_error();
		arb_log_hold(false);
		return ret;
	}
	ret = arb_fs_open(dev, o, out, why);
	if (ret) {
		arb_dev_destroy(dev);
		/* the library's reason, unless the call gave its own */
		if (!*why)
			*why = arb_log_take_error();
		else
			(void)arb_log_take_error();
	}
	arb_log_hold(false);
	return ret;
}

int fs_open_at(struct arb_dev *dev, const struct arb_fs_opts *o,
	       const struct arb_super *sb, struct arb_fs **out,
	       const char **why)
{
	struct arb_vol_opts vo;
	struct arb_fs_opts defo;
	struct arb_fs *fs;
	struct arb_inode root_in;
	uint64_t max_ino, cap;
	int ret;

	if (why)
		*why = NULL;
	if (!o) {
		arb_fs_opts_default(&defo);
		o = &defo;
	}
	fs = calloc(1, sizeof(*fs));
	if (!fs)
		return -ENOMEM;
	if (fs_imem_table_init(fs)) {
		free(fs);
		return -ENOMEM;
	}
	fs->opts = *o;
	fs->dev = dev;
	pthread_cond_init(&fs->cond, NULL);
	pthread_cond_init(&fs->clean_cond, NULL);
	pthread_cond_init(&fs->clean_wake, NULL);
	pthread_cond_init(&fs->zw_wake, NULL);
	pthread_mutex_init(&fs->bulk_lock, NULL);
	fs_zslots_init(fs);
	pthread_cond_init(&fs->fsync_cond, NULL);

	memset(&vo, 0, sizeof(vo));
	vo.cache_bytes = o->cache_bytes;
	vo.readonly = o->readonly;
	vo.super = sb;
	vo.hist_secs = o->history_secs;
	vo.hist_commits = o->history_commits;
	ret = arb_vol_open(dev, &vo, &fs->vol);
	if (ret) {
		if (why)
			*why = open_why(dev, ret);
		goto out_free;
	}
	fs->readonly = fs->vol->readonly || o->readonly;
	fs->bs = fs->vol->sectorsize;
	ret = fs_trees_init(fs);
	if (ret) {
		if (why)
			*why = ret == -ENOENT ? "image has no filesystem tree"
					      : "cannot read the filesystem tree";
		goto out_close;
	}
	ret = arb_root_get(fs->vol, ARB_CSUM_TREE_ID, &fs->csum);
	if (ret) {
		if (why)
			*why = "cannot read the checksum tree";
		goto out_close;
	}
	ret = fs_inode_read(fs, ARB_ROOT_INO, &root_in);
	if (ret || !S_ISDIR(root_in.mode)) {
		if (why)
			*why = "root directory missing or damaged";
		ret = ret ? ret : -EUCLEAN;
		goto out_close;
	}

	/* inline data lives in one sector and in half a leaf at most */
	cap = arb_max_item_size(fs->vol) / 2 - ARB_FILE_EXTENT_INLINE_HDR;
	if (cap > fs->bs)
		cap = fs->bs;
	fs->max_inline = o->max_inline < cap ? o->max_inline : (uint32_t)cap;

	fs_set_reserve(fs);

	ret = fs_tree_max_ino(fs_tree0(fs), &max_ino);
	if (ret) {
		if (why)
			*why = "cannot read the filesystem tree";
		goto out_close;
	}
	/* an inode number is never handed out twice in a tree: the highest
	 * one given is kept in the root item (0 in images from before it
	 * was; then the highest inode present is all there is to go by) */
	if (arb_root_highest_objectid(fs_tree0(fs)->root) > max_ino)
		max_ino = arb_root_highest_objectid(fs_tree0(fs)->root);
	fs_tree0(fs)->next_ino = max_ino + 1;

	fs->vol->pre_commit = fs_pre_commit;
	fs->vol->pre_commit_arg = fs;
	/* deleted subvolumes left by the last mount: the cleaner looks */
	fs->clean_pending = !fs->readonly;

	if (!fs->readonly) {
		fs_lock(fs);
		ret = o->keep_orphans ? 0 : fs_free_orphans(fs);
		if (ret) {
			fs_unlock(fs);
			if (why)
				*why = "cannot free orphan inodes";
			goto out_close;
		}
		ret = fs_upgrade_root_item(fs, max_ino);
		fs_unlock(fs);
		if (ret) {
			if (why)
				*why = "cannot give the filesystem tree a UUID";
			goto out_close;
		}
		if (o->discard) {
			fs_lock(fs);
			arb_free_space_track_freed(fs->vol, true);
			fs_unlock(fs);
		}
		if (o->commit_interval) {
			if (pthread_create(&fs->thread, NULL, commit_thread,
					   fs) == 0)
				fs->thread_running = true;
			if (pthread_create(&fs->cleaner, NULL, clean_thread,
					   fs) == 0)
				fs->cleaner_running = true;
			fs_zw_start(fs);
		}
	}
	*out = fs;
	return 0;

out_close:
	fs->vol->pre_commit = NULL;
	arb_vol_close(fs->vol);
out_free:
	fs_imem_destroy_all(fs);
	fs_trees_free(fs);
	pthread_cond_destroy(&fs->cond);
	pthread_cond_destroy(&fs->clean_cond);
	pthread_cond_destroy(&fs->clean_wake);
	pthread_cond_destroy(&fs->zw_wake);
	pthread_mutex_destroy(&fs->bulk_lock);
	fs_zslots_destroy(fs);
	pthread_cond_destroy(&fs->fsync_cond);
	free(fs);
	return ret;
}

int arb_fs_close(struct arb_fs *fs)
{
	int ret = 0, ret2;

	if (!fs)
		return 0;
	fs_zw_stop(fs);
	if (fs->thread_running || fs->cleaner_running) {
		fs_lock(fs);
		fs->stop = true;
		pthread_cond_signal(&fs->cond);
		pthread_cond_signal(&fs->clean_wake);
		fs_unlock(fs);
		if (fs->thread_running)
			pthread_join(fs->thread, NULL);
		if (fs->cleaner_running)
			pthread_join(fs->cleaner, NULL);
	}
	fs_lock(fs);
	if (!fs->readonly) {
		/* inodes still open and unlinked go now */
		ret = fs_free_unlinked_pinned(fs);
		if (fs->txn_dirty || fs->dirty_bytes) {
			ret2 = fs_commit(fs);
			if (!ret)
				ret = ret2;
		}
		if (!ret)
			fs_trim_freed(fs);
	}
	fs->vol->pre_commit = NULL;
	fs_imem_destroy_all(fs);
	fs_unlock(fs);
	ret2 = arb_vol_close(fs->vol);
	if (!ret && !fs->failed)
		ret = ret2;
	/* a shutdown was asked for: not a failure of the close */
	if (fs->failed && !fs->shutdown_clean && !ret)
		ret = -EIO;
	arb_dev_destroy(fs->dev);
	fs_trees_free(fs);
	pthread_cond_destroy(&fs->cond);
	pthread_cond_destroy(&fs->clean_cond);
	pthread_cond_destroy(&fs->clean_wake);
	pthread_cond_destroy(&fs->zw_wake);
	pthread_mutex_destroy(&fs->bulk_lock);
	fs_zslots_destroy(fs);
	pthread_cond_destroy(&fs->fsync_cond);
	free(fs);
	return ret;
}

/* ---- shutdown ---------------------------------------------------------- */

/*
 * What xfs, ext4 and btrfs do on FS_IOC_SHUTDOWN: the filesystem stops,
 * as if the machine had crashed at this point, but stays mounted.  There
 * is no log here: DEFAULT and LOGFLUSH both commit what the library holds
 * (the daemon writes the kernel's dirty pages back first for DEFAULT),
 * NOLOGFLUSH throws it away.  Either way the running transaction and the
 * delayed data are dropped afterwards and the volume refuses to write, so
 * nothing reaches the image after this: not the commit thread, not the
 * commit of arb_fs_close, not a write the kernel sends later (its
 * operation fails with -EIO, see fs_op_begin).  A commit that fails here
 * fails the filesystem as usual, and the shutdown still happens.
 */
int arb_fs_shutdown(struct arb_fs *fs, unsigned mode)
{
	bool keep = mode != ARB_SHUTDOWN_NOLOGFLUSH;
	int ret = 0;

	if (mode > ARB_SHUTDOWN_NOLOGFLUSH)
		return -EINVAL;
	fs_lock(fs);
	if (fs->shutdown)
		goto out;
	if (keep && !fs->readonly && (fs->txn_dirty || fs->dirty_bytes))
		ret = fs_commit(fs);
	if (!fs->failed) {
		fs->failed = true;
		fs->error = -EIO;
		fs->shutdown_clean = true;
	}
	fs->shutdown = true;
	fs->readonly = true;
	fs_imem_drop_all_data(fs);
	arb_vol_shutdown(fs->vol, keep && !ret);
	fs->txn_dirty = false;
	/* the aborted transaction's roots are gone: the committed ones */
	fs_trees_reload(fs);
	(void)arb_root_get(fs->vol, ARB_CSUM_TREE_ID, &fs->csum);
	arb_log(ARB_LOG_WARN,
		"shut down (%s): generation %llu is the last on disk; every "
		"request fails with EIO until the next mount",
		mode == ARB_SHUTDOWN_NOLOGFLUSH ? "uncommitted changes dropped"
						: "after a commit",
		(unsigned long long)fs->vol->generation);
out:
	fs_unlock(fs);
	return ret;
}

/* ---- mkfs -------------------------------------------------------------- */

static int mkfs_init_fs_tree(struct arb_txn *t, struct arb_root *root,
			     void *arg)
{
	const struct arb_mkfs_opts *o = arg;
	struct arb_inode in;
	struct arb_inode_item d;
	struct arb_key k = { ARB_FIRST_INO, ARB_INODE_ITEM, 0 };

	memset(&in, 0, sizeof(in));
	in.ino = ARB_FIRST_INO;
	in.generation = t->transid;
	in.transid = t->transid;
	in.seq = 2;
	in.nlink = 2;
	in.uid = o->root_uid;
	in.gid = o->root_gid;
	in.mode = S_IFDIR | (o->root_mode & 07777);
	fs_now(&in.atime);
	in.mtime = in.ctime = in.btime = in.atime;
	fs_inode_pack(&d, &in);
	return arb_insert_item(t, root, &k, &d, sizeof(d));
}

int arb_mkfs(struct arb_dev *dev, const struct arb_mkfs_opts *o)
{
	struct arb_mkfs_opts defo;
	struct arb_format_opts fo;
	int ret;

	if (!o) {
		arb_mkfs_opts_default(&defo);
		o = &defo;
	}
	if (o->size && o->size != dev->size) {
		if (dev->ops->resize) {
			ret = dev->ops->resize(dev, o->size);
			if (ret)
				return ret;
			dev->size = o->size;
		} else if (o->size < dev->size) {
			dev->size = o->size;
		} else {
			return -EINVAL;
		}
	}
	memset(&fo, 0, sizeof(fo));
	fo.nodesize = o->nodesize;
	fo.meta_copies = o->meta_copies;
	memcpy(fo.uuid, o->uuid, sizeof(fo.uuid));
	fo.label = o->label;
	fo.init_fs_tree = mkfs_init_fs_tree;
	fo.init_arg = (void *)o;
	return arb_vol_format(dev, &fo);
}

/* ---- statfs, stats, check --------------------------------------------- */

int arb_fs_statfs(struct arb_fs *fs, struct statvfs *sv)
{
	uint64_t free_b, avail;

	/*
	 * What is used is what is allocated and the data waiting for
	 * allocation; the metadata an operation reserves for its worst case
	 * is not (fs_avail_bytes).  The reserve for deletes is free but not
	 * available, as btrfs shows its global reserve: df's Used + Avail
	 * falls short of Size by it.
	 */
	fs_lock(fs);
	memset(sv, 0, sizeof(*sv));
	free_b = fs_free_bytes(fs);
	avail = fs_avail_bytes(fs);
	sv->f_bsize = fs->bs;
	sv->f_frsize = fs->bs;
	sv->f_blocks = fs->vol->total_bytes / fs->bs;
	sv->f_bfree = free_b / fs->bs;
	sv->f_bavail = avail / fs->bs;
	/* an inode costs about 256 bytes of metadata */
	sv->f_ffree = fs->readonly ? 0 : avail / 256;
	sv->f_favail = sv->f_ffree;
	sv->f_files = sv->f_ffree + (fs_tree0(fs)->next_ino - ARB_FIRST_INO);
	sv->f_namemax = ARB_NAME_MAX;
	sv->f_fsid = 0;
	memcpy(&sv->f_fsid, fs->vol->uuid,
	       sizeof(sv->f_fsid) < 8 ? sizeof(sv->f_fsid) : 8);
	if (fs->readonly)
		sv->f_flag |= ST_RDONLY;
	fs_unlock(fs);
	return 0;
}

int arb_fs_get_stats(struct arb_fs *fs, struct arb_fs_stats *s)
{
	fs_lock(fs);
	memset(s, 0, sizeof(*s));
	s->generation = fs->vol->generation;
	s->commits = fs->vol->nr_commits;
	s->commits_two_flush = fs->vol->nr_two_flush;
	s->flushes_behind = __atomic_load_n(&fs->dev->nr_flushes_behind,
					    __ATOMIC_RELAXED);
	s->bytes_read_direct = __atomic_load_n(&fs->dev->bytes_read_direct,
					       __ATOMIC_RELAXED);
	s->cache_hits = fs->vol->cache.hits;
	s->cache_misses = fs->vol->cache.misses;
	s->cache_bytes = fs->vol->cache.nr_nodes * (uint64_t)fs->vol->nodesize;
	for (int i = 0; i < 4; i++) {
		s->bytes_written[i] = fs->dev->bytes_written[i];
		s->bytes_read[i] = __atomic_load_n(&fs->dev->bytes_read[i],
						   __ATOMIC_RELAXED);
	}
	s->user_bytes_written = fs->user_bytes_written;
	s->cloned_bytes = fs->cloned_bytes;
	s->deduped_bytes = fs->deduped_bytes;
	s->compressed_extents = fs->nr_zextents;
	s->compressed_ram_bytes = fs->z_ram_bytes;
	s->compressed_stored_bytes = fs->z_stored_bytes;
	s->compressed_early_bytes = fs->z_early_bytes;
	s->total_bytes = fs->vol->total_bytes;
	s->free_bytes = arb_free_bytes(fs->vol);
	s->commit_ns = fs->commit_ns;
	if (fs->readonly)
		s->state |= ARB_FS_STATE_READONLY;
	if (fs->failed) {
		s->state |= ARB_FS_STATE_FAILED;
		s->error = fs->error ? fs->error : -EIO;
	}
	if (fs->shutdown)
		s->state |= ARB_FS_STATE_SHUTDOWN;
	s->meta_copies = fs->vol->meta_copies;
	arb_vol_heal_stats(fs->vol, &s->nodes_healed, &s->nodes_unrecoverable);
	for (int i = 0; i < 4; i++)
		s->commit_phase_ns[i] = fs->vol->commit_phase_ns[i];
	s->fsyncs = fs->nr_fsyncs;
	s->fsync_commits = fs->nr_fsync_commits;
	s->fsync_joined = fs->nr_fsync_joined;
	s->fsync_durable = fs->nr_fsync_durable;
	fs_unlock(fs);
	return 0;
}

int arb_fs_commit(struct arb_fs *fs, uint64_t *generation)
{
	int ret = 0;

	fs_lock(fs);
	if (fs->failed)
		ret = fs->error ? fs->error : -EIO;
	else if (!fs->readonly && (fs->txn_dirty || fs->dirty_bytes))
		ret = fs_commit(fs);
	if (generation)
		*generation = fs->vol->generation;
	fs_unlock(fs);
	return ret;
}

int arb_fs_usage(struct arb_fs *fs, struct arb_fs_usage *u)
{
	struct arb_space_usage su;
	int ret;

	memset(u, 0, sizeof(*u));
	fs_lock(fs);
	ret = arb_space_usage(fs->vol, &su);
	if (!ret) {
		u->generation = fs->vol->generation;
		u->total = su.total;
		u->system = su.system;
		u->data = su.data;
		u->metadata = su.metadata;
		u->uncommitted = su.uncommitted;
		u->pinned = su.pinned;
		u->free = su.free;
		u->reserve = fs->readonly ? 0 : fs->reserve;
		u->delayed = fs->dirty_bytes;
		u->available = fs->readonly ? 0 : fs_avail_bytes(fs);
		{
			int64_t hb = arb_dev_host_bytes(fs->dev);

			u->host_bytes = hb > 0 ? (uint64_t)hb : 0;
		}
		u->trimmed = fs->trimmed_bytes;
		u->history = su.history;
		u->data_logical = su.data_logical;
		u->compressed = su.compressed;
		u->compressed_logical = su.compressed_logical;
		u->compressed_extents = su.compressed_extents;
	}
	fs_unlock(fs);
	return ret;
}

