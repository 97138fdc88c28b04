// SPDX-License-Identifier: MIT
/*
 * dio.c - no stale cached pages after a direct write.
 *
 * Before a direct write the kernel writes back and drops its cached pages
 * of the range (kiocb_invalidate_pages); after it, it drops them again
 * (kiocb_invalidate_post_direct_write), for pages that buffered readers
 * brought in meanwhile, with the data from before the write.  Linux 6.18
 * skips that second step for an asynchronous write (AIO, io_uring): FUSE
 * answers such a write with -EIOCBQUEUED and completes it when our reply
 * comes.  Pages read during the write then stay, kept by FOPEN_KEEP_CACHE,
 * and a buffered read after the write completed returned the old data
 * (two readers of a 640 KiB file beside an AIO O_DIRECT writer: stale
 * pages within 30 cycles).
 *
 * So a direct WRITE is answered only after the kernel has dropped the
 * range (fuse_lowlevel_notify_inval_inode).  The WRITE carries no sign of
 * being asynchronous, so every direct write of an inode is treated so.
 * Not from the serving thread: the kernel waits for each cached page's
 * lock, and a reader's page stays locked until its READ is answered,
 * which with one serving thread (-s), or a pool or a ring queue whose
 * threads all wait, nobody would do.  A thread of its own does it
 * (replyq.c) and then answers.
 *
 * Only pages that a READ brought in can be stale (dirty pages were
 * written back and dropped before the write was sent, and a buffered
 * write racing with a direct one has no order to keep), so a direct
 * write of an inode the daemon never answered a READ for is answered at
 * once: a file used only with O_DIRECT, as databases do, pays nothing.
 * Which inodes were read is a bitmap of hashed node ids, set before each
 * READ reads the image (so a READ that saw the old data is always seen
 * here, the library's lock ordering the two), never cleared: a false
 * hit costs only time.  Direct READs mark it too (the kernel does not
 * say which READs are direct).
 *
 * Measured (ASan debug build, two busy cores, 4 KiB O_DIRECT pwrite):
 * 55-96 us per write of a file never read, as before; 290-530 us instead
 * of 82-85 us once the file was read, the hand-off to the thread and a
 * GETATTR (the invalidation drops the attributes too, and the next
 * direct write asks for them) being most of it.  Declining
 * FUSE_CAP_ASYNC_DIO instead (the kernel then completes AIO direct
 * writes before io_submit returns, and drops the pages itself) cost
 * AIO writers their queue depth: 4 KiB random writes at depth 16 fell
 * from about 7,000 to 300-600 IOPS.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "arborfs_fuse.h"

#define DIO_READ_BITS 14

static _Atomic uint64_t read_map[(1u << DIO_READ_BITS) / 64];

struct dio_ent {
	struct afs_replyq_ent q; /* first */
	fuse_req_t req;
	fuse_ino_t nodeid;
	off_t off;
	size_t n;
	uint64_t since;
};

static void dio_serve(struct afs *afs, struct afs_replyq_ent *qe);
static struct afs_replyq dioq = AFS_REPLYQ_INIT(dio_serve);

static inline uint32_t read_slot(fuse_ino_t nodeid)
{
	return (uint32_t)(((uint64_t)nodeid * 0x9e3779b97f4a7c15ull) >>
			  (64 - DIO_READ_BITS));
}

void afs_dio_note_read(fuse_ino_t nodeid)
{
	uint32_t s = read_slot(nodeid);
	_Atomic uint64_t *w = &read_map[s / 64];
	uint64_t bit = 1ull << (s % 64);

	/* read first: once set, a READ writes no shared cache line */
	if (!(atomic_load(w) & bit))
		atomic_fetch_or(w, bit);
}

static bool was_read(fuse_ino_t nodeid)
{
	uint32_t s = read_slot(nodeid);

	return atomic_load(&read_map[s / 64]) & (1ull << (s % 64));
}

static void dio_serve(struct afs *afs, struct afs_replyq_ent *qe)
{
	struct dio_ent *e = (struct dio_ent *)qe;

	/* -ENOENT: the kernel has no inode, hence no page, of it */
	fuse_lowlevel_notify_inval_inode(afs->se, e->nodeid, e->off,
					 (off_t)e->n);
	if (e->req) {
		/* first: the next request may come before the reply returns */
		afs_replyq_answered(&e->q);
		fuse_reply_write(e->req, e->n);
		afs_op_add_time(afs, ARB_IOC_OP_WRITE,
				arb_mono_ns() - e->since, false);
	}
	free(e);
}

bool afs_dio_defer(fuse_req_t req, fuse_ino_t nodeid, off_t off, size_t n)
{
	struct afs *afs = fuse_req_userdata(req);
	struct dio_ent *e;
	int ret;

	if (!n || !afs->se || !was_read(nodeid))
		return false;
	e = malloc(sizeof(*e));
	if (!e)
		return false;
	*e = (struct dio_ent){ .req = req, .nodeid = nodeid, .off = off,
			       .n = n, .since = arb_mono_ns() };
	ret = afs_replyq_add(&dioq, afs, &e->q, true);
	if (!ret)
		return true;
	/*
	 * A ring thread already waits (replyq.c): answered now, and the
	 * range dropped right after.  A buffered read in between may still
	 * see the old data: only with FUSE over io_uring, and only while
	 * another deferred request is under way.
	 */
	if (ret == -EBUSY) {
		e->req = NULL;
		fuse_reply_write(req, n);
		if (afs_replyq_add(&dioq, afs, &e->q, false))
			free(e);
		return true;
	}
	free(e);
	return false;
}

void afs_dio_stop(void)
{
	afs_replyq_stop(&dioq);
}
