/* SPDX-License-Identifier: MIT */
/*
 * fsync.c - sync and fsync: what an fsync must commit, and the group
 * commit that lets concurrent fsyncs share one.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fs_int.h"

int arb_fs_sync(struct arb_fs *fs)
{
	int ret = 0;

	fs_lock(fs);
	if (fs->failed)
		ret = -EIO;
	else if (!fs->readonly && (fs->txn_dirty || fs->dirty_bytes))
		ret = fs_commit(fs);
	fs_unlock(fs);
	return ret;
}

/*
 * Is everything of ino durable already?  Every change to an inode writes
 * its item with the running transaction's id (fs_inode_write), and its
 * delayed data sits in its imem; so an inode with no delayed data whose
 * item is from a committed generation has nothing to commit.  This is what
 * lets concurrent fsyncs share one commit: the first commits the others'
 * writes too, and they return without a commit of their own (btrfs checks
 * last_trans against the last committed transaction the same way).
 */
static bool fsync_durable(struct arb_fs *fs, uint64_t ino)
{
	struct arb_imem *im;
	struct arb_inode in;

	if (!ino)
		return false;
	im = fs_imem_get(fs, ino, false);
	if (im && (im->nr || im->held_size))
		return false;
	if (fs_inode_read(fs, ino, &in))
		return false;
	return in.transid <= fs->vol->generation;
}

static bool fsync_needed(struct arb_fs *fs, uint64_t ino)
{
	return !fs->readonly && (fs->txn_dirty || fs->dirty_bytes) &&
	       !fsync_durable(fs, ino);
}

/*
 * The commit of an fsync: writes the delayed data of ino (UINT64_MAX: of
 * no one inode) and of the files marked fsync_want, leaves other files'
 * overwrites and appends in memory (fsync_leave in delalloc.c), then gives
 * back the sizes it held.
 */
static int fsync_commit(struct arb_fs *fs, uint64_t ino)
{
	int ret;

	fs->nr_fsync_commits++;
	fs->fsync_ino = ino;
	ret = fs_commit(fs);
	fs->fsync_ino = 0;
	if (!ret)
		ret = fs_fsync_restore_sizes(fs);
	return ret;
}

/* longest a gathering fsync waits for others to join its commit */
#define ARB_FSYNC_GATHER_MAX_NS 2000000ull

/*
 * Group commit.  When other threads are in fsync too, the first one
 * gathers: it lets go of the lock for about one commit's time (at most
 * 2 ms), so that their writes land and they join (marking their files to
 * be written), then commits for all and wakes them; they find their files
 * durable and return.  A lone fsync commits at once.  (The kernel sends an
 * fsync's page writes just before the FSYNC request, so without this each
 * fsync met a transaction holding only its own write.)
 */
static void fsync_gather(struct arb_fs *fs)
{
	uint64_t wait = fs->last_commit_ns;
	struct timespec ts;

	if (wait > ARB_FSYNC_GATHER_MAX_NS)
		wait = ARB_FSYNC_GATHER_MAX_NS;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += (long)wait;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	fs->fsync_gathering = true;
	pthread_cond_timedwait(&fs->fsync_cond, &fs->vol->lock, &ts);
	fs->fsync_gathering = false;
}

/* join the gathering fsync's commit; false if this one must commit */
static bool fsync_join(struct arb_fs *fs, uint64_t ino)
{
	struct arb_imem *im = ino ? fs_imem_get(fs, ino, false) : NULL;

	if (!ino)
		return false; /* a full commit: not the gatherer's kind */
	if (im)
		im->fsync_want = true;
	while (fs->fsync_gathering)
		pthread_cond_wait(&fs->fsync_cond, &fs->vol->lock);
	return !fs->failed && !fsync_needed(fs, ino);
}

static int fsync_locked(struct arb_fs *fs, uint64_t ino)
{
	int ret;

	fs->nr_fsyncs++;
	if (fs->failed)
		return -EIO;
	if (!fsync_needed(fs, ino)) {
		fs->nr_fsync_durable++;
		return 0;
	}
	if (fs->fsync_gathering && fsync_join(fs, ino)) {
		fs->nr_fsync_joined++;
		return 0;
	}
	if (fs->failed)
		return -EIO;
	if (!fs->fsync_gathering &&
	    __atomic_load_n(&fs->fsync_callers, __ATOMIC_RELAXED) > 1) {
		fsync_gather(fs);
		if (fs->failed || !fsync_needed(fs, ino)) {
			pthread_cond_broadcast(&fs->fsync_cond);
			if (fs->failed)
				return -EIO;
			fs->nr_fsync_durable++;
			return 0;
		}
	}
	/* A commit is the only durability point.  It writes this file's
	 * (and joined fsyncs' files') delayed data and the tree changes of
	 * everything, but leaves other files' overwrites and appends in
	 * memory (fs_flush_all), so that fsync does not pay for a
	 * background writer's data. */
	ret = fsync_commit(fs, ino ? ino : UINT64_MAX);
	pthread_cond_broadcast(&fs->fsync_cond);
	return ret;
}

int arb_fs_fsync_begin(struct arb_fs *fs, uint64_t ino)
{
	struct arb_imem *im;
	int ret = 1;

	fs_lock(fs);
	fs->nr_fsyncs++;
	if (fs->failed) {
		ret = -EIO;
	} else if (!fsync_needed(fs, ino)) {
		fs->nr_fsync_durable++;
		ret = 0;
	} else {
		/* an inode without an entry has no delayed data: its tree
		 * changes go with any commit */
		im = ino ? fs_imem_get(fs, ino, false) : NULL;
		if (im)
			im->fsync_want = true;
	}
	fs_unlock(fs);
	return ret;
}

int arb_fs_fsync_end(struct arb_fs *fs, unsigned n)
{
	int ret = 0;

	fs_lock(fs);
	if (fs->failed) {
		ret = -EIO;
	} else if (!fs->readonly && (fs->txn_dirty || fs->dirty_bytes)) {
		fs->nr_fsync_joined += n > 1 ? n - 1 : 0;
		/* no one inode: the marked ones are written, other files'
		 * overwrites and appends stay in memory */
		ret = fsync_commit(fs, UINT64_MAX);
	} else {
		/* committed since the begins (by the commit thread, say) */
		fs->nr_fsync_durable += n;
	}
	fs_unlock(fs);
	return ret;
}

int arb_fs_fsync(struct arb_fs *fs, uint64_t ino, bool datasync)
{
	int ret;

	(void)datasync;
	__atomic_fetch_add(&fs->fsync_callers, 1, __ATOMIC_RELAXED);
	fs_lock(fs);
	ret = fsync_locked(fs, ino);
	fs_unlock(fs);
	__atomic_fetch_sub(&fs->fsync_callers, 1, __ATOMIC_RELAXED);
	return ret;
}
