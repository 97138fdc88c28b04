// SPDX-License-Identifier: MIT
/*
 * lseek.c - SEEK_DATA and SEEK_HOLE that see the kernel's dirty pages.
 *
 * Under the writeback cache, data written with write(2) lives in the
 * kernel's page cache until writeback sends it to us; the library knows
 * only what was written back.  Answered from the library alone, a
 * SEEK_DATA right after `pwrite 0 64k` said ENXIO (the daemon's size was
 * still 0) and a copy tool walking SEEK_DATA skipped the data.
 *
 * The kernel (6.18, fuse_file_llseek) sends LSEEK with the inode lock
 * held and writes nothing back first.  The lock keeps write(2) out, so
 * the only dirty pages are those already there: once they are written
 * back, the library's answer is exact.  The daemon makes the kernel write
 * them back as any process would: it opens the inode by file handle
 * (open_by_handle_at on the mount, FUSE_CAP_EXPORT_SUPPORT) and calls
 * sync_file_range(2) from the offset to the end of the file.  That takes
 * no inode lock and keeps the page cache, and writeback goes out in the
 * usual large WRITEs.
 *
 * Never from the handler's thread: the WRITEs must be served while we
 * wait, and with one serving thread (-s) or a busy pool nobody would
 * serve them.  So the handler queues the request, returns, and this
 * file's thread writes back, answers, and only then closes its
 * descriptor (close(2) of a FUSE file takes the inode lock in
 * fuse_flush, which the kernel holds until we answer).
 *
 * Where that cannot be done (no mount descriptor, no CAP_DAC_READ_SEARCH,
 * a stale handle), the thread asks the kernel to invalidate the range
 * instead (fuse_lowlevel_notify_inval_inode): that also writes dirty
 * pages back first (launder_folio), one folio per WRITE, and drops the
 * clean ones; slower, and equally exact.
 *
 * Without the writeback cache (read-only mounts, or refused by the
 * kernel) there are no dirty pages and the handler answers in place.
 *
 * Measured (ASan debug build, two busy cores): 45 us per seek answered
 * in place, 190-240 us this way, most of it the hand-off to the thread.
 * Replying ENOSYS to every LSEEK (the kernel then seeks by itself: all
 * of the file is data, the hole at its size) would be cheaper and never
 * wrong, but blind to every hole; it is only the fallback.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <syslog.h>
#include <unistd.h>

#include "arborfs_fuse.h"

#ifndef FUSE_SUPER_MAGIC
#define FUSE_SUPER_MAGIC 0x65735546
#endif
/* the kernel's FUSE file handles: node id (high, low) and generation */
#define AFS_FH_TYPE 0x81

struct lseek_ent {
	struct afs_replyq_ent q; /* first */
	fuse_req_t req;
	uint64_t nodeid, off;
	int whence;
	uint64_t since;
};

static void serve(struct afs *afs, struct afs_replyq_ent *qe);
static struct afs_replyq lseekq = AFS_REPLYQ_INIT(serve);

/* the queue's thread only: the fallback was logged once; the device
 * of the mount's root, once seen to be a FUSE mount */
static bool warned, mount_dev_ok;
static dev_t mount_dev;

static inline uint64_t to_ino(uint64_t nodeid)
{
	return afs_node_ino(nodeid);
}

static int64_t lseek_lib(struct afs *afs, uint64_t nodeid, uint64_t off,
			 int whence)
{
	return arb_fs_lseek(afs->fs, to_ino(nodeid), off, whence);
}

/*
 * A descriptor of nodeid through the mount, or -1.  The mount's root is
 * opened for the call only: a descriptor kept open would make the
 * unmount fail with EBUSY.
 */
static int open_node(struct afs *afs, uint64_t nodeid)
{
	struct {
		struct file_handle fh;
		uint32_t raw[3];
	} h;
	struct arb_stat st;
	struct statfs sfs;
	struct stat rst;
	int mfd, fd = -1;

	if (!afs->mountpoint ||
	    arb_fs_getattr(afs->fs, to_ino(nodeid), &st))
		return -1;
	mfd = open(afs->mountpoint, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (mfd < 0)
		goto out_warn;
	/*
	 * Is it our root, not something mounted over it since?  statfs(2)
	 * costs a STATFS request, so it is asked once, and the device of
	 * the root it approved is compared after that.
	 */
	if (fstat(mfd, &rst) || rst.st_ino != afs_root_ino ||
	    (mount_dev != rst.st_dev &&
	     (mount_dev_ok || fstatfs(mfd, &sfs) ||
	      sfs.f_type != FUSE_SUPER_MAGIC))) {
		errno = EXDEV;
		goto out_close;
	}
	mount_dev = rst.st_dev;
	mount_dev_ok = true;
	memset(&h, 0, sizeof(h));
	h.fh.handle_bytes = sizeof(h.raw);
	h.fh.handle_type = AFS_FH_TYPE;
	h.raw[0] = (uint32_t)(nodeid >> 32);
	h.raw[1] = (uint32_t)nodeid;
	h.raw[2] = (uint32_t)st.generation;
	fd = open_by_handle_at(mfd, &h.fh, O_RDONLY | O_CLOEXEC);
out_close:
	close(mfd);
	if (fd >= 0)
		return fd;
out_warn:
	if (!warned) {
		warned = true;
		afs_log(LOG_WARNING, "SEEK_DATA/SEEK_HOLE: no descriptor "
			"through %s (%s); dirty pages are written back by "
			"invalidation", afs->mountpoint, strerror(errno));
	}
	return -1;
}

static void serve(struct afs *afs, struct afs_replyq_ent *qe)
{
	struct lseek_ent *e = (struct lseek_ent *)qe;
	int64_t ret;
	int fd;

	fd = open_node(afs, e->nodeid);
	if (fd < 0 ||
	    sync_file_range(fd, (off_t)e->off, 0,
			    SYNC_FILE_RANGE_WAIT_BEFORE |
				    SYNC_FILE_RANGE_WRITE |
				    SYNC_FILE_RANGE_WAIT_AFTER)) {
		/* launders dirty folios from off on, then drops them */
		fuse_lowlevel_notify_inval_inode(afs->se, e->nodeid,
						 (off_t)e->off, 0);
	}
	ret = lseek_lib(afs, e->nodeid, e->off, e->whence);
	/* before the reply: the next request may come before it returns */
	afs_replyq_answered(&e->q);
	if (ret < 0)
		fuse_reply_err(e->req, (int)-ret);
	else
		fuse_reply_lseek(e->req, (off_t)ret);
	afs_op_add_time(afs, ARB_IOC_OP_LSEEK, arb_mono_ns() - e->since,
			ret < 0);
	/* after the reply: fuse_flush takes the inode lock LSEEK holds */
	if (fd >= 0)
		close(fd);
	free(e);
}

/* Queue an LSEEK for the thread; 0 or -errno. */
static int lseek_queue(struct afs *afs, fuse_req_t req, uint64_t nodeid,
		       uint64_t off, int whence)
{
	struct lseek_ent *e = malloc(sizeof(*e));
	int ret;

	if (!e)
		return -ENOMEM;
	*e = (struct lseek_ent){ .req = req, .nodeid = nodeid, .off = off,
				 .whence = whence, .since = arb_mono_ns() };
	ret = afs_replyq_add(&lseekq, afs, &e->q, true);
	if (ret)
		free(e);
	return ret;
}

void afs_lseek_req(fuse_req_t req, fuse_ino_t nodeid, off_t off, int whence)
{
	struct afs *afs = fuse_req_userdata(req);
	int64_t ret;

	if (off < 0) {
		afs_op_error(afs);
		fuse_reply_err(req, ENXIO);
		return;
	}
	if (whence != SEEK_DATA && whence != SEEK_HOLE) {
		afs_op_error(afs);
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (!afs->writeback || afs->readonly) {
		/* no dirty pages: the library knows everything */
		ret = lseek_lib(afs, nodeid, (uint64_t)off, whence);
		if (ret < 0) {
			afs_op_error(afs);
			fuse_reply_err(req, (int)-ret);
		} else {
			fuse_reply_lseek(req, (off_t)ret);
		}
		return;
	}
	ret = lseek_queue(afs, req, nodeid, (uint64_t)off, whence);
	if (!ret)
		return;
	/*
	 * Not queued (out of memory, or a ring thread already waits for
	 * replyq.c): answered here, the library's answer could miss dirty
	 * pages, and waiting for them here could deadlock.  ENOSYS makes
	 * the kernel seek by itself from now on (generic_file_llseek: all
	 * of the file is data, the hole at its size), never wrong, but
	 * blind to holes for the rest of the mount.
	 */
	afs_log(LOG_WARNING, "SEEK_DATA/SEEK_HOLE: cannot wait for the "
		"kernel's writeback (%s); the kernel seeks by itself from now "
		"on", strerror((int)-ret));
	fuse_reply_err(req, ENOSYS);
}

void afs_lseek_stop(void)
{
	afs_replyq_stop(&lseekq);
}
