/* SPDX-License-Identifier: MIT */
/*
 * arbor/dev.h - the block device under libarbor: a small function table so
 * that tests can plug in devices that record, drop, reorder or fail I/O.
 *
 * Every op returns 0 when the whole request was done, or a negative errno.
 * Short transfers are retried inside the op; a device never reports partial
 * success.
 */
#ifndef ARBOR_DEV_H
#define ARBOR_DEV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What an I/O is for; used by tracing and statistics only. */
enum arb_io_kind {
	ARB_IO_SUPER = 0,
	ARB_IO_NODE = 1,
	ARB_IO_DATA = 2,
	ARB_IO_OTHER = 3,
};

struct arb_dev;

struct arb_dev_ops {
	/* 0, or 1 when the bytes came past the host's page cache (counted
	 * in bytes_read_direct), or -errno */
	int (*pread)(struct arb_dev *dev, void *buf, size_t len, uint64_t off,
		     enum arb_io_kind kind);
	int (*pwrite)(struct arb_dev *dev, const void *buf, size_t len,
		      uint64_t off, enum arb_io_kind kind);
	/* make every completed write durable */
	int (*flush)(struct arb_dev *dev);
	/* grow or shrink the device (files only); may be NULL */
	int (*resize)(struct arb_dev *dev, uint64_t size);
	void (*destroy)(struct arb_dev *dev);
	/* a hint: [off, off+len) will be read soon, start fetching it in
	 * the background; may be NULL.  Changes nothing a read returns */
	void (*readahead)(struct arb_dev *dev, uint64_t off, size_t len);
	/* flush now if more than limit bytes of bulk data were written since
	 * the last flush: 1 flushed, 0 not needed, < 0 the flush failed
	 * (then every later flush fails too); may be NULL */
	int (*flush_behind)(struct arb_dev *dev, uint64_t limit);
	/* [off, off+len) holds nothing anyone will read: give its space
	 * back (an image file: punch a hole; reads then return zeros); may
	 * be NULL (-EOPNOTSUPP) */
	int (*discard)(struct arb_dev *dev, uint64_t off, uint64_t len);
	/* read [off, off+len) into buf only if the host's cache holds all
	 * of it, without waiting for a disk: 1 read, 0 not all there (buf's
	 * content undefined), <0 cannot tell; may be NULL (a device without
	 * such a cache, or one that cannot say) */
	int (*read_cached)(struct arb_dev *dev, void *buf, size_t len,
			   uint64_t off, enum arb_io_kind kind);
	/* read [off, off+len) into the host's cache and wait for it, and
	 * no more than that (none of the host's own read-ahead beyond it):
	 * 0 or -errno; may be NULL (arb_dev_prefetch then reads with
	 * pread) */
	int (*prefetch)(struct arb_dev *dev, uint64_t off, size_t len);
};

struct arb_dev {
	const struct arb_dev_ops *ops;
	/* size in bytes */
	uint64_t size;
	void *priv;
	/* counters, maintained by arb_dev_read/write/flush; reads may run
	 * concurrently with everything else and count with atomic adds */
	uint64_t bytes_read[4], bytes_written[4];
	uint64_t nr_reads, nr_writes, nr_flushes;
	/* flushes arb_dev_flush_behind made (atomic adds: outside any lock) */
	uint64_t nr_flushes_behind;
	/* of bytes_read, those an image file read past the host's page cache
	 * (O_DIRECT; atomic adds) */
	uint64_t bytes_read_direct;
	/* writes since the last flush, when tracked (arb_dev_track) */
	struct arb_dev_track *track;
	/* deferred writes (arb_dev_pend_add), made by the first add */
	struct arb_dev_pendq *pendq;
};

/* Wrappers that also count. */
int arb_dev_read(struct arb_dev *dev, void *buf, size_t len, uint64_t off,
		 enum arb_io_kind kind);
/* arb_dev_read for a wrapper's pread: returns what the device's pread
 * did (1: past the host's cache), so the wrapper can pass it up */
int arb_dev_read_op(struct arb_dev *dev, void *buf, size_t len, uint64_t off,
		    enum arb_io_kind kind);
int arb_dev_write(struct arb_dev *dev, const void *buf, size_t len,
		  uint64_t off, enum arb_io_kind kind);
int arb_dev_flush(struct arb_dev *dev);

/*
 * Deferred writes.  A caller that decided under its own lock what a range
 * of the device will hold (allocated it, pointed the tree at it) adds a
 * pending write for it, lets go of the lock, and then issues it with
 * arb_dev_pend_run; run writes the bytes (arb_dev_write) and returns 0 or
 * -errno.  Until the write is done, every read overlapping the range
 * waits for it (arb_dev_read; arb_dev_read_cached answers 0), and
 * arb_dev_drain, which a commit and an abort call first, waits for every
 * pending write.  A thread that needs a write nobody started yet runs it
 * itself, so nothing waits on the adding thread being scheduled: the
 * write may run in any thread, at most once.
 *
 * arb_dev_pend_add needs exclusion against other adds and drains (the
 * caller's lock, which the volume lock is); reads, runs and drains are
 * safe in any thread.  arb_dev_pend_run returns run's result once the
 * write is done, by whichever thread; after it returns the device no
 * longer refers to p, and the caller frees it.  A failed deferred write
 * is logged and sticks: every later arb_dev_drain returns it, so no
 * commit can make a tree that points at the bytes durable.
 */
struct arb_dev_pend {
	uint64_t off, len;
	int (*run)(struct arb_dev_pend *p);
	/* the device's: */
	int state, result;
	struct arb_dev_pend *next;
};
int arb_dev_pend_add(struct arb_dev *dev, struct arb_dev_pend *p);
int arb_dev_pend_run(struct arb_dev *dev, struct arb_dev_pend *p);
int arb_dev_drain(struct arb_dev *dev);

/*
 * Tracking the writes since the last successful flush, for commits that
 * flush once (lib/core/txn.c): each range written and the crc32c of its bytes,
 * up to max_nr ranges and max_bytes in all, none overlapping another.
 * arb_dev_unflushed gives them, or -1 once a write went beyond that.
 * arb_dev_track(dev, 0, 0) stops tracking.
 */
struct arb_dev_wrec {
	uint64_t off;
	uint32_t len;
	uint32_t csum;          /* ~arb_crc32c(~0, bytes, len) */
};
int arb_dev_track(struct arb_dev *dev, size_t max_nr, uint64_t max_bytes);
int arb_dev_unflushed(struct arb_dev *dev, const struct arb_dev_wrec **recs);
/* Hint that [off, off+len) will be read soon (ops->readahead); ignored by
 * devices without the op and for requests out of bounds.  Not counted. */
void arb_dev_readahead(struct arb_dev *dev, uint64_t off, size_t len);
/*
 * For a thread about to read [off, off+len) while holding a lock others
 * wait for: arb_dev_read_cached reads it only if that waits for no disk
 * (1: read, counted as kind; 0: it would wait, nothing counted, buf's
 * content undefined; <0: cannot tell: no such op, out of bounds, an
 * error the plain read will report); arb_dev_prefetch reads the range
 * into the host's cache and waits for it, so that the read made later
 * under the lock does not wait; it reads that range only (a range past
 * the device's end is cut short), so the caller decides how far ahead
 * to read.  Neither changes anything a read returns; prefetched bytes
 * count as ARB_IO_OTHER.  Both are safe
 * without any lock of the caller (reads run concurrently with
 * everything else).
 */
int arb_dev_read_cached(struct arb_dev *dev, void *buf, size_t len,
			uint64_t off, enum arb_io_kind kind);
void arb_dev_prefetch(struct arb_dev *dev, uint64_t off, size_t len);
/*
 * Flush-behind: when more than limit bytes of bulk file data (writes of
 * 256 KiB or more) were written since the last flush, flush the device
 * now, in the caller's thread and without any lock of the caller held.
 * A streaming writer then pays for making its own data durable as it
 * goes, and an fsync of another file finds at most about limit bytes left
 * to flush instead of everything written since the last commit (one image
 * file: its flush covers everybody's data).  Changes nothing stored, and
 * leaves the tracked writes (arb_dev_track) as they are: a commit's record
 * still lists them.  1: flushed, 0: nothing to do (or no such op), < 0:
 * the flush failed, and every later arb_dev_flush fails with that error,
 * since the host reports a lost write to one flush only.
 */
int arb_dev_flush_behind(struct arb_dev *dev, uint64_t limit);
/* Grow or shrink the device (an image file; a block device refuses with
 * -EOPNOTSUPP).  allocate: reserve the added bytes on the host filesystem
 * now (fallocate) rather than leaving a sparse hole. */
int arb_dev_resize(struct arb_dev *dev, uint64_t size, bool allocate);
void arb_dev_destroy(struct arb_dev *dev);
/* ops->discard, or -EOPNOTSUPP */
int arb_dev_discard(struct arb_dev *dev, uint64_t off, uint64_t len);
/* bytes the device takes on its host (an image file's allocated blocks),
 * or -errno (-EOPNOTSUPP: not known) */
int64_t arb_dev_host_bytes(struct arb_dev *dev);

/*
 * An image file or block device.  Opening read-write takes an exclusive
 * flock() so two writers cannot open one image (-EBUSY); read-only takes a
 * shared one.  create_size > 0 creates or extends the file (sparse) to that
 * size.
 */
int arb_dev_open_file(const char *path, bool readonly, uint64_t create_size,
		      struct arb_dev **out);
/*
 * How long arb_dev_open_file waits for an image that is in use before it
 * gives up with -EBUSY, for the whole process (default 0: not at all).
 * After an unmount the daemon still writes its last commit for a moment
 * after the kernel let go: fsck, mkfs and the daemon wait for it (saying
 * so on stderr), unless told --no-wait.
 */
void arb_dev_set_lock_wait(unsigned ms);
/* what the tools say of -EBUSY from arb_dev_open_file */
#define ARB_BUSY_HINT                                                          \
	"image is in use (mounted? after an unmount, its daemon may still be " \
	"finishing: `arbor unmount MNT` waits for it)"
/* An in-memory device of size bytes, zero filled. */
int arb_dev_open_mem(uint64_t size, struct arb_dev **out);
/* The bytes of a memory device (valid until it is destroyed). */
uint8_t *arb_dev_mem_data(struct arb_dev *dev);

/*
 * Fault injection: a device that passes everything to lower (owned: destroyed
 * with it) until the n-th (1-based) operation of the kinds in mask, which
 * fails with err, as do all later ones of those kinds when sticky.
 */
enum arb_fault_op {
	ARB_FAULT_READ = 1,
	ARB_FAULT_WRITE = 2,
	ARB_FAULT_FLUSH = 4,
};
int arb_dev_fault_wrap(struct arb_dev *lower, struct arb_dev **out);
void arb_dev_fault_arm(struct arb_dev *fault, unsigned mask, uint64_t n,
		       int err, bool sticky);
void arb_dev_fault_disarm(struct arb_dev *fault);
/* number of operations of the kinds in mask seen so far */
uint64_t arb_dev_fault_count(struct arb_dev *fault, unsigned mask);

/*
 * Write logging (the idea of dm-log-writes): a device that passes everything
 * to lower (owned) and records every write (offset, bytes) and flush in
 * order, starting from a snapshot of lower's contents taken when wrapping.
 * Used to rebuild what the disk may hold after a crash at any point.
 */
int arb_dev_log_wrap(struct arb_dev *lower, struct arb_dev **out);
/* number of recorded entries (writes and flushes) */
size_t arb_dev_log_len(struct arb_dev *log);
/* index of every flush entry, in order; returns how many */
size_t arb_dev_log_flushes(struct arb_dev *log, size_t *idx, size_t max);

enum arb_replay_mode {
	/* every write before entry n, in order */
	ARB_REPLAY_PREFIX = 0,
	/* writes before the last flush before n, then a random subset of the
	 * writes after it (unflushed writes dropped) */
	ARB_REPLAY_DROP = 1,
	/* like DROP but the surviving unflushed writes land in random order
	 * and one of them may be torn at a random 512-byte boundary */
	ARB_REPLAY_REORDER_TEAR = 2,
};
/*
 * Build, as a new memory device, what the disk could hold after a crash just
 * before log entry n.  seed drives the random choices.
 */
int arb_dev_log_replay(struct arb_dev *log, size_t n, enum arb_replay_mode mode,
		       uint64_t seed, struct arb_dev **out);

/*
 * Tracing: one line per operation to f:
 *   <seconds since wrap> <R|W|F> <offset> <length> <super|node|data|other>
 */
int arb_dev_trace_wrap(struct arb_dev *lower, FILE *f, struct arb_dev **out);

#ifdef __cplusplus
}
#endif
#endif
