/* SPDX-License-Identifier: MIT */
/*
 * dev.c - the counting wrappers around struct arb_dev_ops, and the two real
 * devices: an image file (or block device) and a memory buffer.
 *
 * The wrappers check every request against dev->size, so a device's ops only
 * ever see in-bounds, non-empty requests with a valid kind.  Counters count
 * completed operations only.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core.h"

static bool dev_in_bounds(const struct arb_dev *dev, size_t len, uint64_t off)
{
	return off <= dev->size && len <= dev->size - off;
}

/* ---- deferred writes (dev.h) ------------------------------------------ */

enum { PEND_WAITING, PEND_RUNNING, PEND_DONE };

struct arb_dev_pendq {
	pthread_mutex_t lock;
	pthread_cond_t done; /* a write finished */
	struct arb_dev_pend *head;
	unsigned nr;         /* on the list; read without the lock */
	int err;             /* the first failed write's, sticky */
};

int arb_dev_pend_add(struct arb_dev *dev, struct arb_dev_pend *p)
{
	struct arb_dev_pendq *q = dev->pendq;

	if (!q) {
		q = calloc(1, sizeof(*q));
		if (!q)
			return -ENOMEM;
		pthread_mutex_init(&q->lock, NULL);
		pthread_cond_init(&q->done, NULL);
		__atomic_store_n(&dev->pendq, q, __ATOMIC_RELEASE);
	}
	p->state = PEND_WAITING;
	p->result = 0;
	pthread_mutex_lock(&q->lock);
	p->next = q->head;
	q->head = p;
	__atomic_add_fetch(&q->nr, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&q->lock);
	return 0;
}

/*
 * With q->lock held (held again on return): run p if it waits, or wait
 * for the thread running it.  Only p's owner (arb_dev_pend_run) may look
 * at p after waiting: once done, the owner frees it.  Anyone else waits
 * for one write to finish and looks for what is pending again.
 */
static void pend_finish(struct arb_dev_pendq *q, struct arb_dev_pend *p,
			bool owner)
{
	struct arb_dev_pend **pp;
	int ret;

	if (p->state == PEND_RUNNING) {
		if (!owner) {
			pthread_cond_wait(&q->done, &q->lock);
			return;
		}
		while (p->state != PEND_DONE)
			pthread_cond_wait(&q->done, &q->lock);
		return;
	}
	if (p->state == PEND_DONE)
		return;
	p->state = PEND_RUNNING;
	pthread_mutex_unlock(&q->lock);
	ret = p->run(p);
	pthread_mutex_lock(&q->lock);
	if (ret && !q->err) {
		q->err = ret;
		arb_log(ARB_LOG_ERR, "a deferred data write of %llu bytes at "
			"%llu failed: %s; no later commit can succeed",
			(unsigned long long)p->len,
			(unsigned long long)p->off, strerror(-ret));
	}
	for (pp = &q->head; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	__atomic_sub_fetch(&q->nr, 1, __ATOMIC_RELAXED);
	p->result = ret;
	p->state = PEND_DONE;
	pthread_cond_broadcast(&q->done);
}

int arb_dev_pend_run(struct arb_dev *dev, struct arb_dev_pend *p)
{
	struct arb_dev_pendq *q = dev->pendq;
	int ret;

	pthread_mutex_lock(&q->lock);
	pend_finish(q, p, true);
	ret = p->result;
	pthread_mutex_unlock(&q->lock);
	return ret;
}

/* Finish every pending write overlapping [off, off+len), or all. */
static int pend_settle(struct arb_dev *dev, uint64_t off, uint64_t len,
		       bool all)
{
	struct arb_dev_pendq *q =
		__atomic_load_n(&dev->pendq, __ATOMIC_ACQUIRE);
	struct arb_dev_pend *p;
	int ret;

	if (!q || (!__atomic_load_n(&q->nr, __ATOMIC_RELAXED) && !all))
		return 0;
	pthread_mutex_lock(&q->lock);
	for (;;) {
		for (p = q->head; p; p = p->next)
			if (all || (p->off < off + len && off < p->off + p->len))
				break;
		if (!p)
			break;
		pend_finish(q, p, false); /* drops the lock: look again */
	}
	ret = q->err;
	pthread_mutex_unlock(&q->lock);
	return ret;
}

int arb_dev_drain(struct arb_dev *dev)
{
	return pend_settle(dev, 0, 0, true);
}

/* a read of [off, off+len) overlaps a write not done yet */
static bool pend_overlaps(struct arb_dev *dev, uint64_t off, uint64_t len)
{
	struct arb_dev_pendq *q =
		__atomic_load_n(&dev->pendq, __ATOMIC_ACQUIRE);
	struct arb_dev_pend *p;
	bool yes = false;

	if (!q || !__atomic_load_n(&q->nr, __ATOMIC_RELAXED))
		return false;
	pthread_mutex_lock(&q->lock);
	for (p = q->head; p && !yes; p = p->next)
		yes = p->off < off + len && off < p->off + p->len;
	pthread_mutex_unlock(&q->lock);
	return yes;
}

static void pend_free(struct arb_dev *dev)
{
	struct arb_dev_pendq *q = dev->pendq;

	if (!q)
		return;
	(void)arb_dev_drain(dev);
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->done);
	free(q);
	dev->pendq = NULL;
}

/* ---- wrappers ---------------------------------------------------------- */

int arb_dev_read(struct arb_dev *dev, void *buf, size_t len, uint64_t off,
		 enum arb_io_kind kind)
{
	int ret = arb_dev_read_op(dev, buf, len, off, kind);

	return ret < 0 ? ret : 0;
}

int arb_dev_read_op(struct arb_dev *dev, void *buf, size_t len, uint64_t off,
		    enum arb_io_kind kind)
{
	int ret;

	if ((unsigned)kind > ARB_IO_OTHER || (!buf && len))
		return -EINVAL;
	if (!dev_in_bounds(dev, len, off))
		return -EINVAL;
	if (!len)
		return 0;
	/* a deferred write's range: its bytes, not what was there before
	 * (its error, if it fails, goes to the commit) */
	(void)pend_settle(dev, off, len, false);
	ret = dev->ops->pread(dev, buf, len, off, kind);
	if (ret < 0)
		return ret;
	/* data reads run outside the filesystem's lock, several at once */
	__atomic_fetch_add(&dev->nr_reads, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&dev->bytes_read[kind], len, __ATOMIC_RELAXED);
	if (ret > 0)
		__atomic_fetch_add(&dev->bytes_read_direct, len,
				   __ATOMIC_RELAXED);
	return ret > 0;
}

struct arb_dev_track {
	pthread_mutex_t lock;
	size_t max_nr, nr;
	uint64_t max_bytes, bytes;
	bool over;              /* a write went beyond the limits */
	struct arb_dev_wrec r[];
};

int arb_dev_track(struct arb_dev *dev, size_t max_nr, uint64_t max_bytes)
{
	struct arb_dev_track *t = dev->track;

	if (t) {
		pthread_mutex_destroy(&t->lock);
		free(t);
		dev->track = NULL;
	}
	if (!max_nr)
		return 0;
	t = calloc(1, sizeof(*t) + max_nr * sizeof(t->r[0]));
	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->lock, NULL);
	t->max_nr = max_nr;
	t->max_bytes = max_bytes;
	/* what was written before tracking began is not known */
	t->over = true;
	dev->track = t;
	return 0;
}

int arb_dev_unflushed(struct arb_dev *dev, const struct arb_dev_wrec **recs)
{
	struct arb_dev_track *t = dev->track;
	int n;

	if (!t)
		return -1;
	pthread_mutex_lock(&t->lock);
	n = t->over ? -1 : (int)t->nr;
	*recs = t->r;
	pthread_mutex_unlock(&t->lock);
	return n;
}

static void track_write(struct arb_dev_track *t, const void *buf, size_t len,
			uint64_t off)
{
	pthread_mutex_lock(&t->lock);
	if (!t->over && (t->nr == t->max_nr || len > t->max_bytes - t->bytes))
		t->over = true;
	/* a range written twice (a block freed and reused between two
	 * flushes): the record could not say which bytes are the last, so
	 * the commit flushes twice */
	for (size_t i = 0; i < t->nr && !t->over; i++)
		if (off < t->r[i].off + t->r[i].len && t->r[i].off < off + len)
			t->over = true;
	if (!t->over) {
		t->r[t->nr].off = off;
		t->r[t->nr].len = (uint32_t)len;
		t->r[t->nr].csum = ~arb_crc32c(~0u, buf, len);
		t->nr++;
		t->bytes += len;
	}
	pthread_mutex_unlock(&t->lock);
}

int arb_dev_write(struct arb_dev *dev, const void *buf, size_t len,
		  uint64_t off, enum arb_io_kind kind)
{
	int ret;

	if ((unsigned)kind > ARB_IO_OTHER || (!buf && len))
		return -EINVAL;
	if (!dev_in_bounds(dev, len, off))
		return -ENOSPC;
	if (!len)
		return 0;
	ret = dev->ops->pwrite(dev, buf, len, off, kind);
	if (dev->track)
		/* a failed write may have written part: over the limits */
		track_write(dev->track, buf, ret ? SIZE_MAX : len, off);
	if (ret)
		return ret;
	/* deferred writes run outside the caller's lock */
	__atomic_fetch_add(&dev->nr_writes, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&dev->bytes_written[kind], len, __ATOMIC_RELAXED);
	return 0;
}

void arb_dev_readahead(struct arb_dev *dev, uint64_t off, size_t len)
{
	if (dev->ops->readahead && len && dev_in_bounds(dev, len, off))
		dev->ops->readahead(dev, off, len);
}

int arb_dev_read_cached(struct arb_dev *dev, void *buf, size_t len,
			uint64_t off, enum arb_io_kind kind)
{
	int ret;

	if (!dev->ops->read_cached || !len || !buf ||
	    (unsigned)kind > ARB_IO_OTHER || !dev_in_bounds(dev, len, off))
		return -EOPNOTSUPP;
	if (pend_overlaps(dev, off, len))
		return 0;
	ret = dev->ops->read_cached(dev, buf, len, off, kind);
	if (ret == 1) {
		__atomic_fetch_add(&dev->nr_reads, 1, __ATOMIC_RELAXED);
		__atomic_fetch_add(&dev->bytes_read[kind], len,
				   __ATOMIC_RELAXED);
	}
	return ret;
}

void arb_dev_prefetch(struct arb_dev *dev, uint64_t off, size_t len)
{
	void *buf;

	/* only a device with a host cache to fill says what is resident */
	if (!dev->ops->read_cached || !len || off >= dev->size)
		return;
	if (len > dev->size - off)
		len = (size_t)(dev->size - off);
	if (dev->ops->prefetch) {
		if (dev->ops->prefetch(dev, off, len) == 0) {
			__atomic_fetch_add(&dev->nr_reads, 1,
					   __ATOMIC_RELAXED);
			__atomic_fetch_add(&dev->bytes_read[ARB_IO_OTHER],
					   len, __ATOMIC_RELAXED);
		}
		return;
	}
	buf = malloc(len);
	if (!buf)
		return;
	(void)arb_dev_read(dev, buf, len, off, ARB_IO_OTHER);
	free(buf);
}

int arb_dev_flush_behind(struct arb_dev *dev, uint64_t limit)
{
	int ret;

	if (!dev->ops->flush_behind)
		return 0;
	ret = dev->ops->flush_behind(dev, limit);
	if (ret > 0)
		__atomic_add_fetch(&dev->nr_flushes_behind, 1,
				   __ATOMIC_RELAXED);
	return ret;
}

int arb_dev_flush(struct arb_dev *dev)
{
	struct arb_dev_track *t = dev->track;
	int ret;

	/* reset before: a write racing the flush is then tracked (and not
	 * known flushed), never lost from the list */
	if (t) {
		pthread_mutex_lock(&t->lock);
		t->nr = 0;
		t->bytes = 0;
		t->over = false;
		pthread_mutex_unlock(&t->lock);
	}
	ret = dev->ops->flush(dev);
	if (ret && t) {
		pthread_mutex_lock(&t->lock);
		t->over = true;
		pthread_mutex_unlock(&t->lock);
	}
	if (!ret)
		dev->nr_flushes++;
	return ret;
}

void arb_dev_destroy(struct arb_dev *dev)
{
	if (dev) {
		pend_free(dev);
		arb_dev_track(dev, 0, 0);
		dev->ops->destroy(dev);
	}
}

/* ---- image file or block device ---------------------------------------- */

/* a data write this large is bulk: its writeback starts at once, and
 * flush-behind counts it */
#define BULK_DATA (256u << 10)

struct file_dev {
	struct arb_dev dev;
	int fd;
	bool readonly;
	/* a block device: its size is fixed, resize is refused */
	bool blockdev;
	/* host allocation of a sparse image (see host_alloc) */
	pthread_mutex_t alloc_lock;
	uint64_t *allocated;     /* a bit per HOST_CHUNK known allocated */
	size_t alloc_words;
	bool no_alloc;           /* no holes to fill, or no way to find them */
	bool told_full;          /* the host's ENOSPC was logged */
	/* flush-behind: bulk data bytes written since the last flush
	 * (atomic), the lock one flush-behind at a time holds, and the
	 * error of a failed one (atomic; kept: see file_flush) */
	uint64_t unflushed_bulk;
	pthread_mutex_t behind_lock;
	int behind_err;
	/* the span of bulk data written since the last flush-behind, whose
	 * pages that flush drops from the host's cache (bulk_lock) */
	pthread_mutex_t bulk_lock;
	uint64_t bulk_lo, bulk_hi;
	/* large data reads bypass the host's page cache (see file_pread):
	 * a descriptor of the same file opened O_DIRECT, or -1, and the
	 * alignment its reads need of memory and of offset and length */
	int dfd;
	uint32_t dio_mem_align, dio_off_align;
	/* ARBOR_HOST_CACHE=1: neither of the above (for measuring) */
	bool keep_cache;
	/* the host refused RWF_NOWAIT (file_read_cached; atomic) */
	bool no_nowait;
	/* a descriptor of the same file without the host's read-ahead
	 * (POSIX_FADV_RANDOM), for tree nodes (see file_prefetch), or -1 */
	int rfd;
};

/*
 * Host allocation of a sparse image file.
 *
 * A commit writes its nodes, and an fsync its few data blocks, to places
 * the image has never had written: a forward-moving allocator on a sparse
 * file finds holes.  Filling a hole makes the host filesystem allocate,
 * and the fdatasync that follows must then commit the host's journal as
 * well as flush the disk: measured on ext4 here, a 4 KiB write + fdatasync
 * cost 290-300 us into written blocks, 490-710 us into holes and 660-900
 * us into fallocated (unwritten) blocks.  fallocate cannot help (unwritten
 * extents need the same journal commit when first written), so a write
 * smaller than a HOST_CHUNK to a chunk not yet written since the image
 * was opened first writes zeros into the chunk's holes (SEEK_HOLE,
 * SEEK_DATA): the host allocates the whole chunk in one journal commit,
 * and the next writes there (the next commits, the next appends) find
 * their blocks allocated.  Bigger writes fill nothing (their one
 * allocation per chunk is paid once anyway).  Every write marks the
 * chunks it touches; a marked chunk is never filled.
 *
 * Writing zeros where the host has a hole changes nothing any reader
 * sees.  Only chunks this process has not written are filled, so the
 * holes SEEK_HOLE reports there come from the host's on-disk extents, not
 * from its handling of dirty cached pages.  No write can race the
 * filling: a write touching an unmarked chunk holds alloc_lock from the
 * check through its own pwrite.  Any failure only ends the filling.
 * (Reading each hole back to check for zeros first was measured: it cost
 * more than the filling saves.)
 */
#define HOST_CHUNK_SHIFT 20
#define HOST_CHUNK (1ull << HOST_CHUNK_SHIFT)
#define HOST_PIECE (64u << 10)
#define HOST_RESERVE (256ull << 20)

static bool chunk_marked(const struct file_dev *f, uint64_t c)
{
	return c / 64 < f->alloc_words && (f->allocated[c / 64] >> (c % 64) & 1);
}

static void chunk_mark(struct file_dev *f, uint64_t c)
{
	if (c / 64 >= f->alloc_words) {
		size_t n = (size_t)(c / 64 + 1) * 2;
		uint64_t *p = realloc(f->allocated, n * sizeof(*p));

		if (!p)
			return; /* unmarked: filled again later, no harm */
		memset(p + f->alloc_words, 0,
		       (n - f->alloc_words) * sizeof(*p));
		f->allocated = p;
		f->alloc_words = n;
	}
	f->allocated[c / 64] |= 1ull << (c % 64);
}

/* Write zeros into [a, b), a hole of the image.  On an error (a full host
 * filesystem, a quota) the hole is punched again, so the filling never
 * takes space a real write needs, and filling stops for good. */
static bool fill_zeros(struct file_dev *f, uint64_t a, uint64_t b)
{
	static const uint8_t zero[HOST_PIECE];
	uint64_t pos = a;

	while (pos < b) {
		size_t n = b - pos < HOST_PIECE ? (size_t)(b - pos) : HOST_PIECE;

		if (pwrite(f->fd, zero, n, (off_t)pos) != (ssize_t)n) {
			(void)fallocate(f->fd, FALLOC_FL_PUNCH_HOLE |
					FALLOC_FL_KEEP_SIZE, (off_t)a,
					(off_t)(b - a));
			__atomic_store_n(&f->no_alloc, true, __ATOMIC_RELAXED);
			return false;
		}
		/* counted as "other": no other write is */
		__atomic_fetch_add(&f->dev.bytes_written[ARB_IO_OTHER], n,
				   __ATOMIC_RELAXED);
		pos += n;
	}
	return true;
}

/* Fill the holes of chunk c, except [off, off+len) that the caller writes. */
static void fill_chunk(struct file_dev *f, uint64_t c, uint64_t off,
		       uint64_t len)
{
	uint64_t cs = c << HOST_CHUNK_SHIFT, ce = cs + HOST_CHUNK, pos = cs;
	struct statvfs sv;

	if (ce > f->dev.size)
		ce = f->dev.size;
	/* a nearly full host: keep what is left for real writes */
	if (fstatvfs(f->fd, &sv) < 0 ||
	    (uint64_t)sv.f_bavail * sv.f_frsize < HOST_RESERVE)
		return;
	while (pos < ce) {
		off_t h = lseek(f->fd, (off_t)pos, SEEK_HOLE), d;
		uint64_t a, b;

		if (h < 0) {
			/* no SEEK_HOLE here: never try again */
			if (errno == EINVAL || errno == ENOTSUP)
				__atomic_store_n(&f->no_alloc, true,
						 __ATOMIC_RELAXED);
			return;
		}
		if ((uint64_t)h >= ce)
			return;
		d = lseek(f->fd, h, SEEK_DATA);
		if (d < 0 && errno != ENXIO)
			return;
		a = (uint64_t)h;
		b = d < 0 || (uint64_t)d > ce ? ce : (uint64_t)d;
		/* the caller's own range is written by the caller */
		if (a < off && !fill_zeros(f, a, b < off ? b : off))
			return;
		if (b > off + len &&
		    !fill_zeros(f, a > off + len ? a : off + len, b))
			return;
		pos = b;
	}
}

/* Before a write of [off, off+len): returns true with alloc_lock held
 * when a chunk it touches was not yet known allocated. */
static bool host_alloc(struct file_dev *f, uint64_t off, uint64_t len)
{
	uint64_t c0 = off >> HOST_CHUNK_SHIFT;
	uint64_t c1 = (off + len - 1) >> HOST_CHUNK_SHIFT;
	bool held = false;

	if (__atomic_load_n(&f->no_alloc, __ATOMIC_RELAXED))
		return false;
	pthread_mutex_lock(&f->alloc_lock);
	for (uint64_t c = c0; c <= c1 && !f->no_alloc; c++) {
		if (chunk_marked(f, c))
			continue;
		held = true;
		/* a big write allocates what it covers: one allocation per
		 * chunk is paid once anyway */
		if (len < HOST_CHUNK)
			fill_chunk(f, c, off, len);
		chunk_mark(f, c);
	}
	if (!held)
		pthread_mutex_unlock(&f->alloc_lock);
	return held;
}

/*
 * Large data reads past the host's page cache.
 *
 * A file read through the mount lands in the kernel's page cache for the
 * FUSE file; reading the image through the host's page cache as well
 * keeps a second copy of every byte (the guest's memory, twice) and costs
 * the daemon the host cache's page allocation and copying.  So a data read
 * of DIRECT_READ_MIN or more, whose buffer, offset and length suit the
 * host's O_DIRECT alignment (statx STATX_DIOALIGN), goes through a second
 * descriptor of the image opened O_DIRECT, like a loop device with
 * direct-io=on.  Measured (docs/design/cache.md, "Direct reads"), a cold
 * sequential read of 1 GiB: the guest's page cache grew by 1,085 MiB
 * instead of 2,117, the daemon's CPU 0.34-0.40 s instead of 0.45-0.94 s,
 * throughput within the noise of before.  Small data reads keep the
 * host's cache and its read-ahead; tree nodes keep the cache, not the
 * read-ahead (file_prefetch).
 *
 * Coherent with the buffered writes on the other descriptor: the kernel
 * writes back dirty cached pages of the range before a direct read.  Hosts
 * that report no STATX_DIOALIGN (tmpfs here; kernels before 6.1) read
 * buffered, and a direct read the host refuses (EINVAL) is retried
 * buffered.  A block device image reads direct too (a loop device here).
 *
 * Drop-behind: for the same reason, a flush-behind (file_flush_behind)
 * drops the span of bulk data it made durable from the host's cache
 * (POSIX_FADV_DONTNEED; pages dirtied since are only written back early).
 * Writing 1 GiB grew the guest's page cache by 2,061-2,064 MiB before,
 * 1,057-1,069 MiB after, and ran at 567-608 MB/s before, 758-793 after:
 * the host reuses the pages it dropped instead of reclaiming others.
 *
 * ARBOR_HOST_CACHE=1 in the environment turns both off (for measuring).
 */
#define DIRECT_READ_MIN (128u << 10)

static void direct_open(struct file_dev *f)
{
	const char *env = getenv("ARBOR_HOST_CACHE");
	struct statx stx;
	char p[64];

	f->dfd = -1;
	f->keep_cache = env && strcmp(env, "1") == 0;
	if (f->keep_cache)
		return;
	if (statx(f->fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) < 0 ||
	    !(stx.stx_mask & STATX_DIOALIGN) || !stx.stx_dio_mem_align ||
	    !stx.stx_dio_offset_align || stx.stx_dio_offset_align > 4096 ||
	    stx.stx_dio_mem_align > 4096)
		return;
	/* the same open file, not whatever the path names now */
	snprintf(p, sizeof(p), "/proc/self/fd/%d", f->fd);
	f->dfd = open(p, O_RDONLY | O_DIRECT | O_CLOEXEC);
	f->dio_mem_align = stx.stx_dio_mem_align;
	f->dio_off_align = stx.stx_dio_offset_align;
}

static int file_pread(struct arb_dev *dev, void *buf, size_t len, uint64_t off,
		      enum arb_io_kind kind)
{
	struct file_dev *f = dev->priv;
	uint8_t *p = buf;
	ssize_t n;
	int fd = f->fd;

	if (kind == ARB_IO_DATA && f->dfd >= 0 && len >= DIRECT_READ_MIN &&
	    (uintptr_t)buf % f->dio_mem_align == 0 &&
	    off % f->dio_off_align == 0 && len % f->dio_off_align == 0)
		fd = f->dfd;
	else if (kind == ARB_IO_NODE && f->rfd >= 0)
		fd = f->rfd;
	while (len) {
		n = pread(fd, p, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EINVAL && fd == f->dfd) {
			/* the host refused this direct read after all */
			fd = f->fd;
			continue;
		}
		if (n < 0)
			return -errno;
		/* EOF inside dev->size: the file was truncated behind us */
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return fd == f->dfd;
}

static int file_pwrite(struct arb_dev *dev, const void *buf, size_t len,
		       uint64_t off, enum arb_io_kind kind)
{
	struct file_dev *f = dev->priv;
	const uint8_t *p = buf;
	uint64_t start = off;
	size_t total = len;
	ssize_t n;

	bool held;
	int ret = 0;

	if (f->readonly)
		return -EROFS;
	held = host_alloc(f, off, len);
	while (len) {
		n = pwrite(f->fd, p, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			ret = n < 0 ? -errno : -EIO;
			break;
		}
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	if (held)
		pthread_mutex_unlock(&f->alloc_lock);
	if ((ret == -ENOSPC || ret == -EDQUOT) &&
	    !__atomic_exchange_n(&f->told_full, true, __ATOMIC_RELAXED))
		/* not this filesystem's ENOSPC (that never reaches the
		 * device): the host's, under a sparse image */
		arb_log(ARB_LOG_ERR, "writing the image failed: %s: the "
			"filesystem that holds the image file is full",
			ret == -ENOSPC ? "no space left on device"
				       : "disk quota exceeded");
	if (ret)
		return ret;
	/* start writing file data back now (asynchronously): the flush of
	 * the next commit or fsync then finds little left to write, whose
	 * ever data it was (one image file: the host's fdatasync covers all) */
	if (kind == ARB_IO_DATA && total >= BULK_DATA) {
		(void)sync_file_range(f->fd, (off_t)start, (off_t)total,
				      SYNC_FILE_RANGE_WRITE);
		pthread_mutex_lock(&f->bulk_lock);
		if (f->bulk_lo == f->bulk_hi || start < f->bulk_lo)
			f->bulk_lo = start;
		if (start + total > f->bulk_hi)
			f->bulk_hi = start + total;
		pthread_mutex_unlock(&f->bulk_lock);
		__atomic_add_fetch(&f->unflushed_bulk, total,
				   __ATOMIC_RELAXED);
	}
	return 0;
}

static int host_flush(struct file_dev *f)
{
	/* the size of a block device never changes, so data is all there is */
	int ret = f->blockdev ? fsync(f->fd) : fdatasync(f->fd);

	return ret < 0 ? -errno : 0;
}

static int file_flush_behind(struct arb_dev *dev, uint64_t limit)
{
	struct file_dev *f = dev->priv;
	int ret = 0;

	if (f->readonly ||
	    __atomic_load_n(&f->unflushed_bulk, __ATOMIC_RELAXED) <= limit)
		return 0;
	/* one at a time: a writer that gets a second limit ahead of the
	 * flush in progress waits for it here */
	pthread_mutex_lock(&f->behind_lock);
	if (__atomic_load_n(&f->unflushed_bulk, __ATOMIC_RELAXED) > limit) {
		uint64_t lo, hi;

		__atomic_store_n(&f->unflushed_bulk, 0, __ATOMIC_RELAXED);
		pthread_mutex_lock(&f->bulk_lock);
		lo = f->bulk_lo;
		hi = f->bulk_hi;
		f->bulk_lo = f->bulk_hi = 0;
		pthread_mutex_unlock(&f->bulk_lock);
		ret = host_flush(f);
		/* drop-behind: what it wrote is clean now, and the
		 * kernel's cache of the mounted file holds it already */
		if (!ret && hi > lo && !f->keep_cache)
			(void)posix_fadvise(f->fd, (off_t)lo, (off_t)(hi - lo),
					    POSIX_FADV_DONTNEED);
		if (ret && !__atomic_load_n(&f->behind_err, __ATOMIC_RELAXED)) {
			__atomic_store_n(&f->behind_err, ret,
					 __ATOMIC_RELAXED);
			arb_log(ARB_LOG_ERR, "flushing the image failed: %s; "
				"no later commit can succeed",
				strerror(-ret));
		}
		ret = ret ? ret : 1;
	}
	pthread_mutex_unlock(&f->behind_lock);
	return ret;
}

static int file_flush(struct arb_dev *dev)
{
	struct file_dev *f = dev->priv;
	int ret;

	if (f->readonly)
		return 0;
	__atomic_store_n(&f->unflushed_bulk, 0, __ATOMIC_RELAXED);
	ret = host_flush(f);
	/* a failed flush-behind consumed the host's report of a lost write
	 * (the host tells it to one flush of the file only): this flush may
	 * well succeed, but what was lost stays lost */
	return ret ? ret : __atomic_load_n(&f->behind_err, __ATOMIC_RELAXED);
}

static int file_resize(struct arb_dev *dev, uint64_t size)
{
	struct file_dev *f = dev->priv;

	if (f->readonly)
		return -EROFS;
	if (f->blockdev)
		return -EOPNOTSUPP;
	if (size > INT64_MAX)
		return -EFBIG;
	if (ftruncate(f->fd, (off_t)size) < 0)
		return -errno;
	dev->size = size;
	return 0;
}

static int file_discard(struct arb_dev *dev, uint64_t off, uint64_t len)
{
	struct file_dev *f = dev->priv;

	if (f->readonly)
		return -EROFS;
	if (off > INT64_MAX || len > INT64_MAX - off)
		return -EINVAL;
	if (f->blockdev) {
		uint64_t r[2] = { off, len };

		return ioctl(f->fd, BLKDISCARD, r) < 0 ? -errno : 0;
	}
	/* the chunk stays marked allocated (host_alloc): refilling it with
	 * zeros at the next small write would take the space back */
	if (fallocate(f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      (off_t)off, (off_t)len) < 0)
		return -errno;
	return 0;
}

static void file_destroy(struct arb_dev *dev)
{
	struct file_dev *f = dev->priv;

	if (f->dfd >= 0)
		close(f->dfd);
	if (f->rfd >= 0)
		close(f->rfd);
	close(f->fd); /* drops the flock too */
	pthread_mutex_destroy(&f->alloc_lock);
	pthread_mutex_destroy(&f->behind_lock);
	pthread_mutex_destroy(&f->bulk_lock);
	free(f->allocated);
	free(f);
}

/*
 * The host's page cache fetches the range asynchronously; the later pread
 * then finds it there (or waits for the read in flight) instead of paying
 * one synchronous disk round trip per node.
 */
static void file_readahead(struct arb_dev *dev, uint64_t off, size_t len)
{
	struct file_dev *f = dev->priv;

	(void)posix_fadvise(f->fd, (off_t)off, (off_t)len,
			    POSIX_FADV_WILLNEED);
}

/*
 * A read with RWF_NOWAIT fails with EAGAIN instead of waiting for a page
 * that is not in the host's page cache.  Hosts (or host filesystems) that
 * refuse the flag cannot tell, from then on.
 */
static int file_read_cached(struct arb_dev *dev, void *buf, size_t len,
			    uint64_t off, enum arb_io_kind kind)
{
	struct file_dev *f = dev->priv;
	struct iovec iov = { buf, len };
	ssize_t n;
	int ret;

	(void)kind;
	if (__atomic_load_n(&f->no_nowait, __ATOMIC_RELAXED))
		return -EOPNOTSUPP;
	/* without read-ahead (file_prefetch): through the main descriptor,
	 * a read of a page the host's read-ahead had marked started the
	 * next read-ahead, megabytes, for a read that waits for nothing */
	do
		n = preadv2(f->rfd >= 0 ? f->rfd : f->fd, &iov, 1, (off_t)off,
			    RWF_NOWAIT);
	while (n < 0 && errno == EINTR);
	if (n == (ssize_t)len)
		ret = 1;
	else if (n >= 0 || errno == EAGAIN)
		ret = 0; /* a part is not there yet */
	else if (errno == EOPNOTSUPP || errno == EINVAL || errno == ENOSYS) {
		__atomic_store_n(&f->no_nowait, true, __ATOMIC_RELAXED);
		ret = -EOPNOTSUPP;
	} else {
		ret = -errno; /* the read itself will say what is wrong */
	}
	return ret;
}

/*
 * Tree nodes without the host's read-ahead.  Tree nodes (ARB_IO_NODE
 * reads), the cleaner's fetches (arb_dev_prefetch) and its reads that may
 * not wait (file_read_cached) go through a descriptor of their own marked
 * POSIX_FADV_RANDOM; the pages land in the file's one page cache, where
 * every descriptor finds them.  The library reads ahead in tree order
 * itself (cache.c, arb_node_readahead; the cleaner's arb_drop_fetch); the
 * host's read-ahead guesses from addresses and on the virtual disks here
 * grows to read_ahead_kb, 8 MiB: a cleaner walking the nodes of a
 * snapshot in address order, or a read that would not wait on a page the
 * read-ahead had marked, started megabytes of reads that every other
 * request's read then queued behind.
 *
 * Measured by hand (release build, the probe of bench/snapshot.sh beside
 * the cleaning of a 10^6-file snapshot, p99 cleaning over idle, idle runs
 * as long as the cleaning, 2-3 runs each): all through the main
 * descriptor, stat x2.6-3.3, 4 KiB read x4.0-5.2, cleaning 2.6-2.9 s;
 * this, with the cleaner's fetches of 256 KiB (arb_drop_fetch),
 * x1.4-1.7 and x1.7-2.0, cleaning 4.6-5.3 s; with no read-ahead of the
 * cleaner's at all, 13-16 s.  Cold scans without the host's read-ahead of
 * nodes, same image: `find -printf %s` of 10^5 files 3.1-3.8 s (3.2-3.3
 * with it), `du -s` of all 10^6 38-41 s (39-47).
 */
static int file_prefetch(struct arb_dev *dev, uint64_t off, size_t len)
{
	void *buf = malloc(len);
	int ret;

	if (!buf)
		return -ENOMEM;
	/* a node read: on the descriptor without read-ahead */
	ret = file_pread(dev, buf, len, off, ARB_IO_NODE);
	free(buf);
	return ret < 0 ? ret : 0;
}

static void prefetch_open(struct file_dev *f)
{
	char p[64];

	snprintf(p, sizeof(p), "/proc/self/fd/%d", f->fd);
	f->rfd = open(p, O_RDONLY | O_CLOEXEC);
	if (f->rfd >= 0)
		(void)posix_fadvise(f->rfd, 0, 0, POSIX_FADV_RANDOM);
}

static const struct arb_dev_ops file_ops = {
	.pread = file_pread,
	.pwrite = file_pwrite,
	.flush = file_flush,
	.resize = file_resize,
	.destroy = file_destroy,
	.readahead = file_readahead,
	.flush_behind = file_flush_behind,
	.discard = file_discard,
	.read_cached = file_read_cached,
	.prefetch = file_prefetch,
};

int arb_dev_discard(struct arb_dev *dev, uint64_t off, uint64_t len)
{
	if (!dev->ops->discard)
		return -EOPNOTSUPP;
	return dev->ops->discard(dev, off, len);
}

int64_t arb_dev_host_bytes(struct arb_dev *dev)
{
	struct file_dev *f = dev->priv;
	struct stat st;

	if (dev->ops != &file_ops || f->blockdev)
		return -EOPNOTSUPP;
	if (fstat(f->fd, &st) < 0)
		return -errno;
	return (int64_t)st.st_blocks * 512;
}

int arb_dev_resize(struct arb_dev *dev, uint64_t size, bool allocate)
{
	if (!dev->ops->resize)
		return -EOPNOTSUPP;
	if (allocate && size > dev->size && dev->ops == &file_ops) {
		struct file_dev *f = dev->priv;

		if (f->readonly)
			return -EROFS;
		if (f->blockdev)
			return -EOPNOTSUPP;
		if (size > INT64_MAX)
			return -EFBIG;
		/* allocate now, so a full host filesystem fails this call
		 * instead of a later write of a commit */
		if (fallocate(f->fd, 0, (off_t)dev->size,
			      (off_t)(size - dev->size)) == 0) {
			dev->size = size;
			return 0;
		}
		if (errno != EOPNOTSUPP)
			return -errno;
	}
	return dev->ops->resize(dev, size);
}

/* Size of the open image; extends a regular file to create_size. */
static int file_size(struct file_dev *f, const char *path, uint64_t create_size,
		     uint64_t *size)
{
	struct stat st;

	if (fstat(f->fd, &st) < 0)
		return -errno;
	if (S_ISREG(st.st_mode)) {
		*size = (uint64_t)st.st_size;
		if (create_size > *size) {
			/* sparse: only blocks written later get allocated */
			if (ftruncate(f->fd, (off_t)create_size) < 0)
				return -errno;
			*size = create_size;
		}
		return 0;
	}
	if (S_ISBLK(st.st_mode)) {
		f->blockdev = true;
		if (ioctl(f->fd, BLKGETSIZE64, size) < 0)
			return -errno;
		if (create_size > *size) {
			arb_log(ARB_LOG_ERR, "%s: device smaller than %llu bytes",
				path, (unsigned long long)create_size);
			return -ENOSPC;
		}
		return 0;
	}
	arb_log(ARB_LOG_ERR, "%s: not a regular file or block device", path);
	return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
}

static _Atomic unsigned lock_wait_ms;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void arb_dev_set_lock_wait(unsigned ms)
{
	atomic_store(&lock_wait_ms, ms);
}

/*
 * flock the image; while another process holds it, retry every 50 ms for
 * lock_wait_ms, saying once why we wait.
 */
static int lock_image(int fd, const char *path, bool readonly)
{
	unsigned wait_ms = atomic_load(&lock_wait_ms);
	uint64_t deadline = now_ns() + (uint64_t)wait_ms * 1000000ULL;
	bool told = false;

	for (;;) {
		if (flock(fd, (readonly ? LOCK_SH : LOCK_EX) | LOCK_NB) == 0)
			return 0;
		if (errno != EWOULDBLOCK)
			return -errno;
		if (now_ns() >= deadline)
			break;
		if (!told) {
			arb_log(ARB_LOG_WARN,
				"%s: image in use; waiting up to %u s for it "
				"(a daemon may still be finishing its last "
				"commit after an unmount)",
				path, (wait_ms + 999) / 1000);
			told = true;
		}
		usleep(50000);
	}
	/* the caller says it, once (ARB_BUSY_HINT) */
	return -EBUSY;
}

int arb_dev_open_file(const char *path, bool readonly, uint64_t create_size,
		      struct arb_dev **out)
{
	struct file_dev *f;
	uint64_t size;
	int flags, ret;

	if (!path || create_size > INT64_MAX || (readonly && create_size))
		return -EINVAL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	flags = (readonly ? O_RDONLY : O_RDWR) | O_CLOEXEC;
	if (create_size)
		flags |= O_CREAT;
	f->fd = open(path, flags, 0644);
	if (f->fd < 0) {
		ret = -errno;
		goto out_free;
	}
	/* lock before anything else, so a busy image is never extended */
	ret = lock_image(f->fd, path, readonly);
	if (ret)
		goto out_close;
	ret = file_size(f, path, create_size, &size);
	if (ret)
		goto out_close;

	f->readonly = readonly;
	f->no_alloc = readonly || f->blockdev;
	direct_open(f);
	prefetch_open(f);
	pthread_mutex_init(&f->alloc_lock, NULL);
	pthread_mutex_init(&f->behind_lock, NULL);
	pthread_mutex_init(&f->bulk_lock, NULL);
	f->dev.ops = &file_ops;
	f->dev.size = size;
	f->dev.priv = f;
	*out = &f->dev;
	return 0;

out_close:
	close(f->fd);
out_free:
	free(f);
	return ret;
}

/* ---- memory ------------------------------------------------------------ */

struct mem_dev {
	struct arb_dev dev;
	/* dev.size bytes (at least one allocated, so size 0 is not special) */
	uint8_t *data;
};

static int mem_pread(struct arb_dev *dev, void *buf, size_t len, uint64_t off,
		     enum arb_io_kind kind)
{
	struct mem_dev *m = dev->priv;

	(void)kind;
	memcpy(buf, m->data + off, len);
	return 0;
}

static int mem_pwrite(struct arb_dev *dev, const void *buf, size_t len,
		      uint64_t off, enum arb_io_kind kind)
{
	struct mem_dev *m = dev->priv;

	(void)kind;
	memcpy(m->data + off, buf, len);
	return 0;
}

static int mem_flush(struct arb_dev *dev)
{
	(void)dev;
	return 0;
}

/* as a hole reads: zeros (so that tests see what a trim would lose) */
static int mem_discard(struct arb_dev *dev, uint64_t off, uint64_t len)
{
	struct mem_dev *m = dev->priv;

	if (off > dev->size || len > dev->size - off)
		return -EINVAL;
	memset(m->data + off, 0, (size_t)len);
	return 0;
}

static int mem_resize(struct arb_dev *dev, uint64_t size)
{
	struct mem_dev *m = dev->priv;
	uint8_t *data;

	if (size > SIZE_MAX)
		return -ENOMEM;
	data = realloc(m->data, size ? (size_t)size : 1);
	if (!data)
		return -ENOMEM;
	if (size > dev->size)
		memset(data + dev->size, 0, (size_t)(size - dev->size));
	m->data = data;
	dev->size = size;
	return 0;
}

static void mem_destroy(struct arb_dev *dev)
{
	struct mem_dev *m = dev->priv;

	free(m->data);
	free(m);
}

static const struct arb_dev_ops mem_ops = {
	.pread = mem_pread,
	.pwrite = mem_pwrite,
	.flush = mem_flush,
	.resize = mem_resize,
	.destroy = mem_destroy,
	.discard = mem_discard,
};

int arb_dev_open_mem(uint64_t size, struct arb_dev **out)
{
	struct mem_dev *m;

	if (size > SIZE_MAX)
		return -ENOMEM;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->data = calloc(1, size ? (size_t)size : 1);
	if (!m->data) {
		free(m);
		return -ENOMEM;
	}
	m->dev.ops = &mem_ops;
	m->dev.size = size;
	m->dev.priv = m;
	*out = &m->dev;
	return 0;
}

uint8_t *arb_dev_mem_data(struct arb_dev *dev)
{
	if (!dev || dev->ops != &mem_ops)
		return NULL;
	return ((struct mem_dev *)dev->priv)->data;
}
