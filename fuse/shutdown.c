// SPDX-License-Identifier: MIT
/*
 * shutdown.c - FS_IOC_SHUTDOWN (XFS_IOC_GOINGDOWN): stop the filesystem as
 * a crash would, and stay mounted, as xfs, ext4 and btrfs do; what
 * `xfs_io -x -c 'shutdown [-f]'` and the crash tests of xfstests
 * (generic/042-051 and others) use.
 *
 * The flag says what happens to what is not durable yet:
 *   0 DEFAULT     the kernel's dirty pages are written back (syncfs of the
 *                 mount and an invalidation of every inode, as xfs freezes
 *                 the device first), then everything the daemon holds is
 *                 committed;
 *   1 LOGFLUSH    what the daemon holds is committed (xfs forces its log),
 *                 the kernel's dirty pages are not written back: data
 *                 that only reached the page cache is lost;
 *   2 NOLOGFLUSH  nothing more is written: the next mount shows the last
 *                 commit (every fsync that returned is in it).
 * xfs_io's `shutdown` sends NOLOGFLUSH, `shutdown -f` LOGFLUSH.
 *
 * After it, as on xfs, every request fails with EIO, reads included (the
 * tree behind the kernel's cache is the last commit's: after NOLOGFLUSH
 * it would not match what the kernel shows), except what the kernel
 * needs to let go (FORGET, RELEASE, RELEASEDIR), statfs, opening a
 * directory and the attributes of the root (so that the mount can be
 * opened, and unmounted), and the ioctls that report the state
 * (ARB_IOC_GET_GENERATION, GET_STATS, GET_USAGE, the scrub and check
 * status: `arbor filesystem stats` shows "shutdown").
 * The writes the kernel sends later (writeback, unmount) fail, so they
 * reach nothing; write(2) itself fails, through the attributes (see
 * inval_attrs).  Unmounting works as usual and the daemon exits 0.
 *
 * The number is _IOR('X', 125, __u32), but the flag goes from the caller
 * to the filesystem: a FUSE ioctl is "restricted" (the kernel copies by
 * the number's direction), so the daemon receives no input and reads the
 * flag from the caller's memory (process_vm_readv: the caller is blocked
 * in ioctl(2) meanwhile, and privileged, see ctl.c) and answers with no
 * output, which leaves the caller's variable as it was.
 *
 * DEFAULT's writeback needs WRITE requests served while it waits, so it
 * is done on a thread of its own (replyq.c), as lseek.c does.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/uio.h>
#include <syslog.h>
#include <unistd.h>

#include "arborfs_fuse.h"

static const char *const mode_name[] = { "default", "logflush",
					 "nologflush" };

struct shut_ent {
	struct afs_replyq_ent q; /* first */
	fuse_req_t req;
	pid_t pid;
};

static void serve(struct afs *afs, struct afs_replyq_ent *qe);
static struct afs_replyq shutq = AFS_REPLYQ_INIT(serve);

/*
 * Make the kernel ask for the attributes of every inode it knows, so that
 * the next write(2) fails: with the writeback cache, write(2) sends
 * nothing but the GETATTR of stale attributes (fuse_cache_write_iter),
 * and would otherwise fill the page cache for as long as they stay valid;
 * the error would only come at fsync or close.  pages: also write back
 * and drop every cached page, waiting for the writeback (DEFAULT, from
 * its thread: see writeback()); else offset -1, no page is touched.
 */
static void inval_all(struct afs *afs, bool pages)
{
	struct afs_lookup_table *t = &afs->lookups;
	uint64_t *ids, id, count;
	size_t n = 0, pos = 0;

	pthread_mutex_lock(&t->lock);
	ids = malloc((t->counts.n + 1) * sizeof(*ids));
	if (ids) {
		ids[n++] = FUSE_ROOT_ID;
		while (arb_idcount_next(&t->counts, &pos, &id, &count))
			ids[n++] = id;
	}
	pthread_mutex_unlock(&t->lock);
	/* outside the table's lock: a FORGET may come meanwhile, and an
	 * inode the kernel no longer has is skipped by it (-ENOENT) */
	for (size_t i = 0; i < n; i++)
		(void)fuse_lowlevel_notify_inval_inode(afs->se, ids[i],
						       pages ? 0 : -1, 0);
	free(ids);
}

/* the shutdown itself, once the kernel's pages are written back (or not) */
static int shut(struct afs *afs, unsigned mode, pid_t pid)
{
	int ret;

	/* before the library: a request finding it shut down answers EIO
	 * here rather than EROFS from some corner of the library */
	atomic_store(&afs->shutdown, true);
	ret = arb_fs_shutdown(afs->fs, mode);
	if (afs->writeback)
		inval_all(afs, false);
	afs_log(LOG_WARNING, "shut down (%s) by pid %d%s%s", mode_name[mode],
		(int)pid, ret ? ": its commit failed: " : "",
		ret ? strerror(-ret) : "");
	return ret;
}

/*
 * Write the kernel's dirty pages of the mount back (they come as WRITEs,
 * which other threads serve).  syncfs(2) starts the writeback in large
 * WRITEs but, on 6.18, does not wait for FUSE's (wait_sb_inodes skips
 * mappings whose writeback a FUSE server could hold up forever): after
 * it, DEFAULT lost a file's data now and then.  So every inode is then
 * invalidated, which waits for the WRITEs under way and writes what is
 * still dirty (launder_folio); the pages would not be read again anyway.
 */
static void writeback(struct afs *afs)
{
	int fd = afs->mountpoint ? open(afs->mountpoint,
					O_RDONLY | O_DIRECTORY | O_CLOEXEC)
				 : -1;

	if (fd < 0 || syncfs(fd))
		afs_log(LOG_WARNING, "shutdown: cannot write the kernel's "
			"dirty pages back (%s): they are lost",
			strerror(errno));
	if (fd >= 0)
		close(fd);
	inval_all(afs, true);
}

static void serve(struct afs *afs, struct afs_replyq_ent *qe)
{
	struct shut_ent *e = (struct shut_ent *)qe;
	int ret;

	writeback(afs);
	ret = shut(afs, ARB_SHUTDOWN_DEFAULT, e->pid);
	afs_replyq_answered(&e->q);
	if (ret)
		fuse_reply_err(e->req, -ret);
	else
		fuse_reply_ioctl(e->req, 0, NULL, 0);
	free(e);
}

/* The caller's __u32 at arg (see the head of the file). */
static int read_flag(fuse_req_t req, void *arg, const void *in_buf,
		     size_t in_bufsz, uint32_t *flag)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct iovec local = { flag, sizeof(*flag) };
	struct iovec remote = { arg, sizeof(*flag) };

	if (in_bufsz >= sizeof(*flag)) {
		/* a kernel that copies it in after all */
		memcpy(flag, in_buf, sizeof(*flag));
		return 0;
	}
	/* pid 0: a caller in a pid namespace we cannot see */
	if (ctx->pid <= 0)
		return -ESRCH;
	if (process_vm_readv(ctx->pid, &local, 1, &remote, 1, 0) !=
	    (ssize_t)sizeof(*flag))
		return errno == EFAULT ? -EFAULT : -EPERM;
	return 0;
}

void afs_shutdown_ioctl(fuse_req_t req, void *arg, const void *in_buf,
			size_t in_bufsz)
{
	struct afs *afs = fuse_req_userdata(req);
	struct shut_ent *e;
	uint32_t flag;
	int ret;

	ret = read_flag(req, arg, in_buf, in_bufsz, &flag);
	if (ret)
		goto out_err;
	if (flag > ARB_SHUTDOWN_NOLOGFLUSH) {
		ret = -EINVAL;
		goto out_err;
	}
	/* once is enough; a second one changes nothing, as on xfs */
	if (atomic_load(&afs->shutdown)) {
		fuse_reply_ioctl(req, 0, NULL, 0);
		return;
	}
	if (flag != ARB_SHUTDOWN_DEFAULT || !afs->writeback || afs->readonly)
		goto now;
	e = malloc(sizeof(*e));
	if (!e) {
		ret = -ENOMEM;
		goto out_err;
	}
	*e = (struct shut_ent){ .req = req, .pid = fuse_req_ctx(req)->pid };
	ret = afs_replyq_add(&shutq, afs, &e->q, true);
	if (!ret)
		return;
	free(e);
	/* a ring thread already waits for a queue: no writeback without
	 * risking a deadlock; what the daemon holds is still committed */
	afs_log(LOG_WARNING, "shutdown: cannot wait for the kernel's "
		"writeback (%s): its dirty pages are lost", strerror(-ret));
now:
	ret = shut(afs, flag, fuse_req_ctx(req)->pid);
	if (ret)
		goto out_err;
	fuse_reply_ioctl(req, 0, NULL, 0);
	return;
out_err:
	afs_op_error(afs);
	fuse_reply_err(req, -ret);
}

bool afs_shutdown_refuses(struct afs *afs, fuse_req_t req, enum arb_ioc_op op)
{
	if (!atomic_load_explicit(&afs->shutdown, memory_order_relaxed))
		return false;
	switch (op) {
	case ARB_IOC_OP_FORGET:
	case ARB_IOC_OP_FORGET_MULTI:
	case ARB_IOC_OP_RELEASE:
	case ARB_IOC_OP_RELEASEDIR:
	case ARB_IOC_OP_STATFS:
	/* the mount's root can be opened and asked for the state */
	case ARB_IOC_OP_OPENDIR:
	case ARB_IOC_OP_GETATTR: /* afs_getattr picks */
	case ARB_IOC_OP_IOCTL: /* afs_ioctl picks */
		return false;
	default:
		break;
	}
	afs_op_error(afs);
	fuse_reply_err(req, EIO);
	return true;
}

bool afs_shutdown_getattr_refuses(struct afs *afs, fuse_req_t req,
				  fuse_ino_t ino)
{
	if (ino == FUSE_ROOT_ID ||
	    !atomic_load_explicit(&afs->shutdown, memory_order_relaxed))
		return false;
	afs_op_error(afs);
	fuse_reply_err(req, EIO);
	return true;
}

void afs_shutdown_stop(void)
{
	afs_replyq_stop(&shutq);
}
