/* SPDX-License-Identifier: MIT */
/*
 * syncmode.c - a small dirty limit while someone is calling fsync.
 *
 * Under the writeback cache the kernel holds a streaming writer's dirty
 * pages for this mount (up to its backing device's limit, about 47 MiB on
 * a 24 GiB machine: 1 % of the global dirty limit, strict) and writes them
 * back as background WRITE requests.  An fsync's own page write joins the
 * end of that queue, so beside a streaming writer each fsync first waits
 * for tens of megabytes of somebody else's writeback to reach the daemon,
 * and then its commit flushes them to the image.  A kernel filesystem does
 * not have that problem: its block layer serves synchronous I/O first.
 *
 * A small limit always (-o dirty_limit) shortens the queue and slows
 * streaming writes by a third or more (docs/design/fuse.md, "A small dirty
 * limit while fsyncs come").  So the daemon lowers the limit only while
 * fsyncs come: an FSYNC
 * less than SYNC_REPEAT_NS after the previous one sets max_bytes to
 * fsync_dirty_limit (default 2 MiB), and the
 * first WRITE after SYNC_WINDOW_NS without an fsync puts back the limit
 * the mount had (max_ratio_fine as read at mount: the kernel's share, or
 * the one -o dirty_limit set).  The kernel keeps the limit as a ratio of
 * its global dirty limit and applies a change at the writer's next
 * throttle check; pages dirty already stay queued, so the fsync that
 * switches still waits for them, the next ones do not.
 *
 * The limit is only a hint: without the sysfs files (not root, a kernel
 * before 6.2) nothing changes, and a lost race between an fsync and the
 * WRITE that switches back costs one fsync its short queue, nothing else.
 * Both attributes' files stay open, so a switch is one pwrite.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "arborfs_fuse.h"

/* how long after the last fsync the small limit stays */
#define SYNC_WINDOW_NS (2ULL * 1000000000ULL)
/* fsyncs closer than this keep coming: the second one lowers the limit */
#define SYNC_REPEAT_NS (1ULL * 1000000000ULL)

static int open_attr(const char *dev, const char *attr)
{
	char path[128];

	snprintf(path, sizeof(path), "/sys/class/bdi/%s/%s", dev, attr);
	return open(path, O_RDWR | O_CLOEXEC);
}

static bool put_attr(int fd, const char *val)
{
	size_t n = strlen(val);

	return pwrite(fd, val, n, 0) == (ssize_t)n;
}

void afs_syncmode_init(struct afs *afs)
{
	struct afs_syncmode *sm = &afs->syncmode;

	sm->max_bytes_fd = sm->ratio_fd = -1;
	pthread_mutex_init(&sm->lock, NULL);
}

void afs_syncmode_start(struct afs *afs, const char *dev, uint64_t low)
{
	struct afs_syncmode *sm = &afs->syncmode;
	char cur[32];
	ssize_t n;

	if (!low || afs->readonly)
		return;
	sm->max_bytes_fd = open_attr(dev, "max_bytes");
	sm->ratio_fd = open_attr(dev, "max_ratio_fine");
	if (sm->max_bytes_fd < 0 || sm->ratio_fd < 0)
		goto off;
	n = pread(sm->ratio_fd, sm->high, sizeof(sm->high) - 1, 0);
	if (n <= 0)
		goto off;
	sm->high[n] = 0;
	n = pread(sm->max_bytes_fd, cur, sizeof(cur) - 1, 0);
	if (n <= 0)
		goto off;
	cur[n] = 0;
	/* a limit at or below the small one already (-o dirty_limit) */
	if (strtoull(cur, NULL, 10) <= low)
		goto off;
	snprintf(sm->low, sizeof(sm->low), "%llu\n", (unsigned long long)low);
	return;
off:
	if (sm->max_bytes_fd >= 0)
		close(sm->max_bytes_fd);
	if (sm->ratio_fd >= 0)
		close(sm->ratio_fd);
	sm->max_bytes_fd = sm->ratio_fd = -1;
}

void afs_syncmode_fsync(struct afs *afs)
{
	struct afs_syncmode *sm = &afs->syncmode;
	uint64_t now, prev;

	if (sm->max_bytes_fd < 0)
		return;
	now = arb_mono_ns();
	prev = atomic_exchange(&sm->last_fsync_ns, now);
	/* a lone fsync (the end of a copy, an editor's save) leaves the
	 * limit alone: the writes after it would pay for nothing */
	if (atomic_load(&sm->low_on) || !prev ||
	    (now > prev && now - prev >= SYNC_REPEAT_NS))
		return;
	pthread_mutex_lock(&sm->lock);
	if (!atomic_load(&sm->low_on)) {
		if (put_attr(sm->max_bytes_fd, sm->low)) {
			atomic_store(&sm->low_on, true);
			atomic_fetch_add(&sm->nr_lowered, 1);
		}
	}
	pthread_mutex_unlock(&sm->lock);
}

/* the window since the last fsync is over; an fsync stamped after our
 * clock read (another thread) is no wrap-around but a fresh one */
static bool window_over(struct afs_syncmode *sm)
{
	uint64_t now = arb_mono_ns(), last = atomic_load(&sm->last_fsync_ns);

	return now > last && now - last >= SYNC_WINDOW_NS;
}

void afs_syncmode_write(struct afs *afs)
{
	struct afs_syncmode *sm = &afs->syncmode;

	/* the common case: one relaxed load */
	if (!atomic_load_explicit(&sm->low_on, memory_order_relaxed))
		return;
	if (!window_over(sm))
		return;
	pthread_mutex_lock(&sm->lock);
	if (atomic_load(&sm->low_on) && window_over(sm)) {
		/* on failure the small limit stays; retried next write */
		if (put_attr(sm->ratio_fd, sm->high))
			atomic_store(&sm->low_on, false);
	}
	pthread_mutex_unlock(&sm->lock);
}

void afs_syncmode_destroy(struct afs *afs)
{
	struct afs_syncmode *sm = &afs->syncmode;

	if (sm->max_bytes_fd >= 0)
		close(sm->max_bytes_fd);
	if (sm->ratio_fd >= 0)
		close(sm->ratio_fd);
	sm->max_bytes_fd = sm->ratio_fd = -1;
	pthread_mutex_destroy(&sm->lock);
}
