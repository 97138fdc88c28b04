// SPDX-License-Identifier: MIT
/*
 * iflags.c - file attributes (chattr/lsattr) in the daemon.
 *
 * FS_IOC_GETFLAGS/SETFLAGS and FS_IOC_FSGETXATTR/FSSETXATTR reach us from
 * the kernel's fileattr code (fuse_fileattr_get/set), which has already
 * checked that the caller owns the file or has CAP_FOWNER, and that it has
 * CAP_LINUX_IMMUTABLE to change IMMUTABLE or APPEND; we check again, as
 * the library leaves privilege to its caller.  The kernel passes the flags
 * as an int whatever the ioctl number says (long), so 4-byte buffers are
 * what we read and answer, as ext4 does.
 *
 * Enforcement.  The library refuses every change IMMUTABLE or APPEND
 * forbids (setattr, namespace, xattrs), but not writes: whether a write
 * is allowed depends on how the file was opened.  The kernel, which
 * checks that for a local filesystem (may_open), does not know our flags,
 * and with the writeback cache a write(2) only fills the page cache: a
 * WRITE refused at writeback would be data lost after write(2) returned
 * success.  So:
 *
 *  - Opens.  When the daemon sees OPEN requests, it refuses write-opens
 *    of IMMUTABLE files, and write-opens without O_APPEND of APPEND files
 *    (afs_open, arb_fs_may_open), with EPERM at open(2) as ext4.  OPEN
 *    requests are declined by default (ops.c, afs_init), and once
 *    declined the kernel never sends one again on this connection; so
 *    they are kept when the image has ARB_COMPAT_PROTECTED_INODES at
 *    mount (or with -o open_requests).  On the mount where the first
 *    flag is set, opens may already be declined: the next point covers
 *    that.
 *
 *  - write(2).  Under the writeback cache, write(2) first refreshes the
 *    size and mode through GETATTR with the file (FUSE_GETATTR_FH) when
 *    the attributes are stale, and fails with that GETATTR's error.
 *    Inodes with IMMUTABLE or APPEND get attributes that are stale at
 *    once (timeout 0), so each write(2) asks.  But the same GETATTR is
 *    sent by a read past EOF and by lseek(SEEK_END), which must work:
 *    the requesting thread is blocked in its system call while we look,
 *    so /proc/TID/syscall names it, and only write(2), pwrite(2),
 *    writev(2), pwritev(2) and pwritev2(2) are refused: always for
 *    IMMUTABLE, and for APPEND when the descriptor (the call's first
 *    argument, /proc/TID/fdinfo/FD) lacks O_APPEND.  This is what ext4's
 *    write path checks for a file flagged after it was opened, so it
 *    applies with OPEN requests too.  A caller we cannot look at (pid 0:
 *    another pid namespace) is let through; so are writes by io_uring,
 *    splice(2) and copy_file_range(2).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <syslog.h>
#include <unistd.h>

#include "arborfs_fuse.h"

#define CAP_FOWNER_BIT 3
#define CAP_LINUX_IMMUTABLE_BIT 9

/* FS_XFLAG_* <-> ARB_FL_* */
static const struct {
	uint32_t xflag, fl;
} xflag_map[] = {
	{ FS_XFLAG_IMMUTABLE, ARB_FL_IMMUTABLE },
	{ FS_XFLAG_APPEND, ARB_FL_APPEND },
	{ FS_XFLAG_NODUMP, ARB_FL_NODUMP },
	{ FS_XFLAG_NOATIME, ARB_FL_NOATIME },
};
#define XFLAG_MAP_NR (sizeof(xflag_map) / sizeof(xflag_map[0]))

static uint32_t fl_to_xflags(uint32_t fl)
{
	uint32_t x = 0;

	for (size_t i = 0; i < XFLAG_MAP_NR; i++)
		if (fl & xflag_map[i].fl)
			x |= xflag_map[i].xflag;
	return x;
}

/* -EOPNOTSUPP for an xflag we do not have */
static int xflags_to_fl(uint32_t x, uint32_t *fl)
{
	*fl = 0;
	for (size_t i = 0; i < XFLAG_MAP_NR; i++) {
		if (x & xflag_map[i].xflag) {
			*fl |= xflag_map[i].fl;
			x &= ~xflag_map[i].xflag;
		}
	}
	return x ? -EOPNOTSUPP : 0;
}

static inline uint64_t node_to_ino(fuse_ino_t nodeid)
{
	return afs_node_ino(nodeid);
}

/* as vfs_fileattr_set(): the owner or CAP_FOWNER; CAP_LINUX_IMMUTABLE to
 * change IMMUTABLE or APPEND */
static int may_set(fuse_req_t req, const struct arb_stat *st, uint32_t fl)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	bool root = ctx->uid == 0;

	if (!root && ctx->uid != st->uid &&
	    !(ctx->pid > 0 && afs_pid_has_cap(ctx->pid, CAP_FOWNER_BIT)))
		return -EPERM;
	if (((fl ^ st->flags) & (ARB_FL_IMMUTABLE | ARB_FL_APPEND)) && !root &&
	    !(ctx->pid > 0 && afs_pid_has_cap(ctx->pid, CAP_LINUX_IMMUTABLE_BIT)))
		return -EPERM;
	return 0;
}

static int set_flags(struct afs *afs, fuse_req_t req, fuse_ino_t nodeid,
		     uint32_t fl)
{
	struct arb_stat st;
	int ret;

	ret = arb_fs_getattr(afs->fs, node_to_ino(nodeid), &st);
	if (ret)
		return ret;
	if (fl & ~ARB_FL_SUPPORTED)
		return -EOPNOTSUPP;
	ret = may_set(req, &st, fl);
	if (ret)
		return ret;
	ret = arb_fs_set_flags(afs->fs, node_to_ino(nodeid), fl);
	if (ret)
		return ret;
	if ((fl & (ARB_FL_IMMUTABLE | ARB_FL_APPEND)) && afs->no_open)
		afs_log(LOG_NOTICE,
			"inode %llu is immutable or append-only while OPEN "
			"requests are declined: writes are refused at write(2) "
			"until a remount refuses them at open(2)",
			(unsigned long long)node_to_ino(nodeid));
	/* the kernel caches attributes for an hour: a flagged inode needs
	 * them stale (afs_iflags_attr_timeout), an unflagged one not */
	if (afs->se)
		fuse_lowlevel_notify_inval_inode(afs->se, nodeid, -1, 0);
	return 0;
}

bool afs_iflags_ioctl(fuse_req_t req, fuse_ino_t nodeid, unsigned int cmd,
		      const void *in_buf, size_t in_bufsz, size_t out_bufsz)
{
	struct afs *afs = fuse_req_userdata(req);
	struct arb_stat st;
	struct fsxattr fsx;
	uint32_t fl;
	int ret, v;

	switch (cmd) {
	case FS_IOC_GETFLAGS:
	case FS_IOC32_GETFLAGS:
		if (out_bufsz < sizeof(int)) {
			ret = -EINVAL;
			break;
		}
		ret = arb_fs_getattr(afs->fs, node_to_ino(nodeid), &st);
		if (ret)
			break;
		v = (int)st.flags;
		fuse_reply_ioctl(req, 0, &v, sizeof(v));
		return true;
	case FS_IOC_SETFLAGS:
	case FS_IOC32_SETFLAGS:
		if (in_bufsz < sizeof(int)) {
			ret = -EINVAL;
			break;
		}
		/* in_buf has no alignment promise */
		memcpy(&v, in_buf, sizeof(v));
		ret = set_flags(afs, req, nodeid, (uint32_t)v);
		if (ret)
			break;
		fuse_reply_ioctl(req, 0, NULL, 0);
		return true;
	case FS_IOC_FSGETXATTR:
		if (out_bufsz < sizeof(fsx)) {
			ret = -EINVAL;
			break;
		}
		ret = arb_fs_getattr(afs->fs, node_to_ino(nodeid), &st);
		if (ret)
			break;
		memset(&fsx, 0, sizeof(fsx));
		fsx.fsx_xflags = fl_to_xflags(st.flags);
		fuse_reply_ioctl(req, 0, &fsx, sizeof(fsx));
		return true;
	case FS_IOC_FSSETXATTR:
		if (in_bufsz < sizeof(fsx)) {
			ret = -EINVAL;
			break;
		}
		memcpy(&fsx, in_buf, sizeof(fsx));
		/* no extent size hints, no projects */
		ret = xflags_to_fl(fsx.fsx_xflags, &fl);
		if (!ret && (fsx.fsx_extsize || fsx.fsx_projid ||
			     fsx.fsx_cowextsize))
			ret = -EOPNOTSUPP;
		if (!ret)
			ret = set_flags(afs, req, nodeid, fl);
		if (ret)
			break;
		fuse_reply_ioctl(req, 0, NULL, 0);
		return true;
	default:
		return false;
	}
	afs_op_error(afs);
	fuse_reply_err(req, -ret);
	return true;
}

/* ---- write(2) ----------------------------------------------------------- */

static bool is_write_syscall(long nr)
{
	return nr == SYS_write || nr == SYS_pwrite64 || nr == SYS_writev ||
	       nr == SYS_pwritev || nr == SYS_pwritev2;
}

/*
 * The system call thread tid is blocked in: 0 and its number and first
 * argument, or -1 (not visible, not in a system call).
 */
static int caller_syscall(pid_t tid, long *nr, unsigned long *arg0)
{
	char path[64], line[256];
	FILE *f;
	int ret = -1;

	if (tid <= 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/%d/syscall", (int)tid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	/* "NR ARG0 ARG1 ...", or "running" / "-1 ..." */
	if (fgets(line, sizeof(line), f) &&
	    sscanf(line, "%ld %lx", nr, arg0) == 2 && *nr >= 0)
		ret = 0;
	fclose(f);
	return ret;
}

/* the open flags of descriptor fd of tid: 0, or -1 */
static int caller_fd_flags(pid_t tid, unsigned long fd, unsigned *flags)
{
	char path[80], line[128];
	FILE *f;
	int ret = -1;

	snprintf(path, sizeof(path), "/proc/%d/fdinfo/%lu", (int)tid, fd);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		/* octal, as the kernel prints it */
		if (sscanf(line, "flags: %o", flags) == 1) {
			ret = 0;
			break;
		}
	}
	fclose(f);
	return ret;
}

int afs_iflags_getattr_fh(struct afs *afs, fuse_req_t req, uint64_t nodeid)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct arb_stat st;
	unsigned long fd;
	unsigned flags;
	long nr;

	if (arb_fs_getattr(afs->fs, node_to_ino(nodeid), &st) ||
	    (!(st.flags & (ARB_FL_IMMUTABLE | ARB_FL_APPEND)) && !st.rdonly))
		return 0;
	if (caller_syscall(ctx->pid, &nr, &fd) || !is_write_syscall(nr))
		return 0;
	if (st.rdonly)
		return -EROFS; /* a read-only subvolume, opens declined */
	if (st.flags & ARB_FL_IMMUTABLE)
		return -EPERM;
	/* append-only: only through an O_APPEND descriptor */
	if (caller_fd_flags(ctx->pid, fd, &flags) == 0 && !(flags & O_APPEND))
		return -EPERM;
	return 0;
}

double afs_iflags_attr_timeout(const struct afs *afs, const struct arb_stat *st)
{
	/* each write(2) asks: see afs_iflags_getattr_fh */
	if (st->flags & (ARB_FL_IMMUTABLE | ARB_FL_APPEND))
		return 0;
	/* a read-only subvolume's write-opens are refused at OPEN; when
	 * opens are declined, only write(2)'s GETATTR can refuse them */
	if (st->rdonly && afs->no_open)
		return 0;
	return afs->attr_timeout;
}
