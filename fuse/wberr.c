// SPDX-License-Identifier: MIT
/*
 * wberr.c - failed writeback reaches the writer.
 *
 * With the writeback cache, write(2) only fills the kernel's page cache;
 * the kernel writes the pages back later as WRITE requests (FUSE_WRITE_CACHE,
 * fi->writepage), and when one fails (the filesystem is full) it only
 * remembers the error for the next fsync(2) or close(2).  A writer that
 * never fsyncs (dd, cat, cp until close) went on filling the page cache
 * forever: `dd if=/dev/zero of=m/f bs=1M` on a 64 MiB image wrote 804 GB
 * (apparent size) in ten minutes.
 *
 * The way back to the writer: every write(2) under the writeback cache
 * first makes the kernel refresh the inode's attributes if they are not
 * valid (fuse_cache_write_iter -> fuse_update_attributes), with a GETATTR
 * that carries the file (FUSE_GETATTR_FH), and an error of that GETATTR is
 * what write(2) returns.  So when a writeback WRITE of inode I fails, the
 * daemon records the error for I and tells the kernel to forget I's
 * attributes (attributes only: no page or inode lock is taken, so this
 * cannot wait on the WRITE being served); the writer's next write(2) asks
 * for them and gets ENOSPC.  As NFS does: at the latest at the next
 * write(2) after a failed writeback.  The error is reported once; the
 * kernel still reports it at fsync and close as before.  stat(2) and
 * fstat(2) ask without the file, and never see it; a read at the end of
 * the file or an lseek(SEEK_END) asks with it, and gets the error if it
 * comes before the writer's next write(2).
 *
 * What is stored stays a prefix.  The kernel has many WRITEs in flight
 * and several threads serve them, so later pages are often stored before
 * an earlier one fails: a 64 MiB `cp` to a nearly full filesystem left a
 * 64 MiB file reading zeros after 54 MiB, and a `dd` until full left
 * five holes.  Two rules keep the stored data a prefix:
 *  - the burst: for each inode that writeback is extending, the size it
 *    had when the burst began (the first extending WRITE after more than
 *    BURST_GAP_NS without one).  A failed WRITE at F with F at or past
 *    that size cuts the file to F: everything past F was written back in
 *    this burst, and its writer is told of the failure.  Never older data:
 *    a file filled in out of order within its size keeps its other
 *    pieces (and its hole), and an fsync ends the burst, since what it
 *    made durable must stay.  A small direct-mapped table: an inode
 *    pushed out of it is simply not cut.
 *  - the mark: while I is marked, a writeback WRITE that would extend
 *    I's stored data fails as well, as long as the burst lasts (the cut
 *    frees space, and the next page would fit, past a hole).  Once the
 *    burst is over, the writer goes on past a range it was told was
 *    lost, as a sparse write would, and the mark goes.  Writes inside the
 *    stored size go through: they overwrite, and leave no hole.  A
 *    WRITE that was already past this check when another failed (several
 *    threads) looks again once stored, and cuts and fails too.
 * A truncate of I (SETATTR of the size, as open(O_TRUNC) and ftruncate
 * send) or the kernel's forgetting I ends the mark.
 *
 * The table holds only inodes with a failed writeback, a handful at most,
 * so it is a small array under a mutex; an atomic count keeps the cost of
 * every other WRITE and GETATTR to one load.
 */
#include <errno.h>
#include <string.h>
#include <syslog.h>

#include "arborfs_fuse.h"

struct afs_wberr_ent {
	uint64_t ino;
	/* positive errno not yet reported to a writer, 0 once reported */
	int pending;
	/* the first error, for the writes refused while marked */
	int err;
	/* the lowest offset that failed */
	uint64_t off;
};

void afs_wberr_init(struct afs_wberr *w)
{
	memset(w, 0, sizeof(*w));
	pthread_mutex_init(&w->lock, NULL);
}

void afs_wberr_destroy(struct afs_wberr *w)
{
	free(w->v);
	pthread_mutex_destroy(&w->lock);
}

/* under w->lock */
static struct afs_wberr_ent *find(struct afs_wberr *w, uint64_t ino)
{
	for (size_t i = 0; i < w->n; i++)
		if (w->v[i].ino == ino)
			return &w->v[i];
	return NULL;
}

void afs_wberr_failed(struct afs_wberr *w, uint64_t ino, int err,
		      uint64_t off)
{
	struct afs_wberr_ent *e;

	pthread_mutex_lock(&w->lock);
	e = find(w, ino);
	if (!e) {
		if (w->n == w->cap) {
			size_t cap = w->cap ? 2 * w->cap : 8;
			void *v = realloc(w->v, cap * sizeof(*w->v));

			if (!v)
				goto out_unlock; /* unreported, as before */
			w->v = v;
			w->cap = cap;
		}
		e = &w->v[w->n];
		e->ino = ino;
		e->err = err;
		e->off = off;
		atomic_store(&w->count, ++w->n);
	}
	e->pending = err;
	if (off < e->off)
		e->off = off;
out_unlock:
	pthread_mutex_unlock(&w->lock);
}

int afs_wberr_take(struct afs_wberr *w, uint64_t ino)
{
	struct afs_wberr_ent *e;
	int err = 0;

	if (!atomic_load_explicit(&w->count, memory_order_relaxed))
		return 0;
	pthread_mutex_lock(&w->lock);
	e = find(w, ino);
	if (e) {
		err = e->pending;
		e->pending = 0;
	}
	pthread_mutex_unlock(&w->lock);
	return err;
}

int afs_wberr_marked(struct afs_wberr *w, uint64_t ino, uint64_t *off)
{
	struct afs_wberr_ent *e;
	int err = 0;

	if (!atomic_load_explicit(&w->count, memory_order_relaxed))
		return 0;
	pthread_mutex_lock(&w->lock);
	e = find(w, ino);
	if (e) {
		err = e->err;
		*off = e->off;
	}
	pthread_mutex_unlock(&w->lock);
	return err;
}

void afs_wberr_clear(struct afs_wberr *w, uint64_t ino)
{
	struct afs_wberr_ent *e;

	if (!atomic_load_explicit(&w->count, memory_order_relaxed))
		return;
	pthread_mutex_lock(&w->lock);
	e = find(w, ino);
	if (e) {
		*e = w->v[--w->n];
		atomic_store(&w->count, w->n);
	}
	pthread_mutex_unlock(&w->lock);
}

/* ---- extension bursts ---------------------------------------------------- */

/* extending WRITEs further apart than this start a new burst */
#define BURST_GAP_NS (5ULL * 1000000000ULL)

static struct afs_wbext_ent *slot(struct afs_wbext *x, uint64_t ino)
{
	return &x->v[(ino * 0x9E3779B97F4A7C15ULL) >> (64 - AFS_WBEXT_BITS)];
}

void afs_wbext_init(struct afs_wbext *x)
{
	memset(x, 0, sizeof(*x));
	pthread_mutex_init(&x->lock, NULL);
}

void afs_wbext_destroy(struct afs_wbext *x)
{
	pthread_mutex_destroy(&x->lock);
}

bool afs_wbext_fresh(struct afs_wbext *x, uint64_t ino, uint64_t now)
{
	struct afs_wbext_ent *e;
	bool fresh;

	pthread_mutex_lock(&x->lock);
	e = slot(x, ino);
	fresh = e->ino == ino && now - e->last_ns < BURST_GAP_NS;
	if (fresh)
		e->last_ns = now;
	pthread_mutex_unlock(&x->lock);
	return fresh;
}

void afs_wbext_begin(struct afs_wbext *x, uint64_t ino, uint64_t base,
		     uint64_t now)
{
	struct afs_wbext_ent *e;

	pthread_mutex_lock(&x->lock);
	e = slot(x, ino);
	if (e->ino != ino || now - e->last_ns >= BURST_GAP_NS) {
		e->ino = ino;
		e->base = base;
	}
	e->last_ns = now;
	pthread_mutex_unlock(&x->lock);
}

bool afs_wbext_base(struct afs_wbext *x, uint64_t ino, uint64_t now,
		    uint64_t *base)
{
	struct afs_wbext_ent *e;
	bool ok;

	pthread_mutex_lock(&x->lock);
	e = slot(x, ino);
	ok = e->ino == ino && now - e->last_ns < BURST_GAP_NS;
	if (ok)
		*base = e->base;
	pthread_mutex_unlock(&x->lock);
	return ok;
}

void afs_wbext_end(struct afs_wbext *x, uint64_t ino)
{
	struct afs_wbext_ent *e;

	pthread_mutex_lock(&x->lock);
	e = slot(x, ino);
	if (e->ino == ino)
		e->ino = 0;
	pthread_mutex_unlock(&x->lock);
}
