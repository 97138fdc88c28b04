// SPDX-License-Identifier: MIT
/*
 * atime.c - access times of files the kernel reads from its page cache.
 *
 * The kernel marks every FUSE inode S_NOATIME: it never updates an access
 * time itself, and leaves it to the daemon, which does so (relatime) when
 * a READ reaches it.  But a file's pages stay in the page cache (the
 * daemon is the only writer, so they are kept across opens), and reads
 * served from there reach nobody: `echo x >> f; cat f` left f's atime
 * older than its mtime, where ext4 updates it at the first read after a
 * change, as relatime promises (mutt's "new mail", tmpwatch and backup
 * tools rely on it).
 *
 * So once a file has been changed (a writeback WRITE, or the kernel
 * sending its mtime), the daemon drops the file's cached pages a short
 * while later (ATIME_DELAY_NS after the last change, so that a writer in
 * the middle of its work is not disturbed), from a thread of its own
 * (fuse_lowlevel_notify_inval_inode writes dirty pages back first, and
 * must not run inside a request).  The next read then reaches the daemon,
 * which updates the atime if relatime says so.  Only the first page goes:
 * reads start there, and the rest stays cached.  What it costs: a READ of
 * that page and the atime's transaction per file read again after a
 * change, about 50 us: tar of 8,025 files just written took 776 ms, 371 ms
 * with -o noatime; a second tar 464 and 430 ms.  Not with -o noatime.
 *
 * Bounded: at most ATIME_MAX files wait; past that the oldest is dropped
 * at once (an early invalidation, never a missed one).
 */
#include <errno.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

#include "arborfs_fuse.h"

#define ATIME_DELAY_NS (200ULL * 1000000ULL)

static void abs_time(struct timespec *ts, uint64_t mono_due)
{
	uint64_t now = arb_mono_ns();
	uint64_t wait = mono_due > now ? mono_due - now : 0;

	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += (time_t)(wait / 1000000000ULL);
	ts->tv_nsec += (long)(wait % 1000000000ULL);
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/* under the lock: index of ino, or n */
static size_t find(struct afs_atime *a, uint64_t ino)
{
	for (size_t i = 0; i < a->n; i++)
		if (a->v[i].ino == ino)
			return i;
	return a->n;
}

static void *atime_thread(void *arg)
{
	struct afs *afs = arg;
	struct afs_atime *a = &afs->atime;

	pthread_mutex_lock(&a->lock);
	while (!a->stop) {
		uint64_t now = arb_mono_ns(), next = UINT64_MAX;
		struct timespec ts;

		for (size_t i = 0; i < a->n;) {
			uint64_t ino = a->v[i].ino;

			if (a->v[i].due_ns > now) {
				if (a->v[i].due_ns < next)
					next = a->v[i].due_ns;
				i++;
				continue;
			}
			a->v[i] = a->v[--a->n];
			pthread_mutex_unlock(&a->lock);
			/* the first page only: reads start there (cat, tar,
			 * cc), and the rest stays cached; -ENOENT: the
			 * kernel forgot the inode meanwhile */
			(void)fuse_lowlevel_notify_inval_inode(afs->se, ino, 0,
								4096);
			pthread_mutex_lock(&a->lock);
			a->dropped++;
			i = 0;
			now = arb_mono_ns();
			next = UINT64_MAX;
		}
		if (a->stop)
			break;
		if (next == UINT64_MAX) {
			pthread_cond_wait(&a->cond, &a->lock);
		} else {
			abs_time(&ts, next);
			pthread_cond_timedwait(&a->cond, &a->lock, &ts);
		}
	}
	pthread_mutex_unlock(&a->lock);
	return NULL;
}

void afs_atime_init(struct afs *afs)
{
	struct afs_atime *a = &afs->atime;

	memset(a, 0, sizeof(*a));
	pthread_mutex_init(&a->lock, NULL);
	pthread_cond_init(&a->cond, NULL);
}

void afs_atime_start(struct afs *afs)
{
	struct afs_atime *a = &afs->atime;

	if (a->running || !afs->se)
		return;
	if (pthread_create(&a->thread, NULL, atime_thread, afs) == 0)
		a->running = true;
	else
		afs_log(LOG_WARNING, "no access-time thread: files read from "
				     "the page cache keep their atime");
}

void afs_atime_stop(struct afs *afs)
{
	struct afs_atime *a = &afs->atime;

	if (a->running) {
		pthread_mutex_lock(&a->lock);
		a->stop = true;
		pthread_cond_signal(&a->cond);
		pthread_mutex_unlock(&a->lock);
		pthread_join(a->thread, NULL);
		a->running = false;
	}
}

void afs_atime_destroy(struct afs *afs)
{
	afs_atime_stop(afs);
	pthread_cond_destroy(&afs->atime.cond);
	pthread_mutex_destroy(&afs->atime.lock);
}

void afs_atime_changed(struct afs *afs, uint64_t nodeid)
{
	struct afs_atime *a = &afs->atime;
	uint64_t due = arb_mono_ns() + ATIME_DELAY_NS;
	size_t i;

	if (!a->running)
		return;
	pthread_mutex_lock(&a->lock);
	i = find(a, nodeid);
	if (i == a->n) {
		if (a->n == AFS_ATIME_MAX) {
			/* the oldest goes now */
			size_t old = 0;

			for (size_t j = 1; j < a->n; j++)
				if (a->v[j].due_ns < a->v[old].due_ns)
					old = j;
			a->v[old].due_ns = 0;
			pthread_cond_signal(&a->cond);
			/* this one takes the next free slot once the thread
			 * ran; until then it is simply not tracked */
			pthread_mutex_unlock(&a->lock);
			return;
		}
		a->v[a->n++].ino = nodeid;
		if (a->n == 1)
			pthread_cond_signal(&a->cond);
	}
	a->v[i].due_ns = due;
	pthread_mutex_unlock(&a->lock);
}
