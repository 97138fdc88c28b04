// SPDX-License-Identifier: MIT
/*
 * reflink.c - ARB_IOC_FILE_SPACE (what a file's data takes: shared,
 * compressed) and ARB_IOC_DEDUPE_RANGE: FIDEDUPERANGE through the control
 * channel (the kernel keeps FICLONE, FICLONERANGE and FIDEDUPERANGE from
 * FUSE daemons; sharing copies come as copy_file_range, ops.c).
 *
 * A FUSE ioctl carries no file descriptor, and the daemon declines OPEN
 * requests, so it knows neither how the destination was opened nor
 * which file the caller means by its source.  Both come from the
 * caller's descriptor table, as the kernel would have them: the
 * requesting thread is blocked in ioctl(2) while we answer, so
 * /proc/TID/syscall names the destination descriptor, and
 * /proc/TID/fdinfo/FD gives each descriptor's open flags, mount id and
 * inode number.  The source must be open for reading on the same mount
 * (its inode number is the library's); the destination open for
 * writing, or owned by the caller, or the caller privileged, which is
 * the kernel's rule for dedupe (allow_file_dedupe).  A caller whose
 * descriptors cannot be seen (pid 0: another pid namespace) is refused.
 *
 * Only identical bytes are shared, so the kernel's cached pages of the
 * destination stay right, and its dirty pages, when written back later,
 * land on the shared range as on any other (copy on write).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>

#include "arborfs_fuse.h"

/* capability(7) number, without libcap */
#define CAP_SYS_ADMIN_BIT 21

struct fd_info {
	unsigned flags;
	long long mnt_id;
	unsigned long long ino;
};

/* flags, mnt_id and ino of descriptor fd of thread tid; 0 or -1 */
static int fd_info(pid_t tid, long fd, struct fd_info *fi)
{
	char path[80], line[160];
	int have = 0;
	FILE *f;

	if (fd < 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/%d/fdinfo/%ld", (int)tid, fd);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "flags: %o", &fi->flags) == 1)
			have |= 1;
		else if (sscanf(line, "mnt_id: %lld", &fi->mnt_id) == 1)
			have |= 2;
		else if (sscanf(line, "ino: %llu", &fi->ino) == 1)
			have |= 4;
	}
	fclose(f);
	return have == 7 ? 0 : -1;
}

/* the descriptor the thread's ioctl(2) is on; 0 or -1 */
static int ioctl_fd(pid_t tid, long *fd)
{
	char path[64], line[256];
	long nr;
	FILE *f;
	int ret = -1;

	snprintf(path, sizeof(path), "/proc/%d/syscall", (int)tid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	if (fgets(line, sizeof(line), f) &&
	    sscanf(line, "%ld %lx", &nr, fd) == 2 && nr == SYS_ioctl)
		ret = 0;
	fclose(f);
	return ret;
}

static bool readable(unsigned flags)
{
	return (flags & O_ACCMODE) != O_WRONLY && !(flags & O_PATH);
}

static bool writable(unsigned flags)
{
	return (flags & O_ACCMODE) == O_WRONLY || (flags & O_ACCMODE) == O_RDWR;
}

/* the library's inode number of the source; 0 or -errno */
static int dedupe_files(fuse_req_t req, fuse_ino_t nodeid, int src_fd,
			uint64_t *src)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct afs *afs = fuse_req_userdata(req);
	uint64_t dst = afs_node_ino(nodeid);
	struct fd_info s, d;
	struct arb_stat st;
	long fd;
	int ret;

	if (ctx->pid <= 0 || ioctl_fd(ctx->pid, &fd) ||
	    fd_info(ctx->pid, fd, &d) || d.ino != dst)
		return -EPERM;
	if (fd_info(ctx->pid, src_fd, &s))
		return -EBADF;
	if (s.mnt_id != d.mnt_id)
		return -EXDEV;
	if (!readable(s.flags))
		return -EBADF;
	if (!writable(d.flags)) {
		ret = arb_fs_getattr(afs->fs, dst, &st);
		if (ret)
			return ret;
		if (ctx->uid != 0 && ctx->uid != st.uid &&
		    !afs_pid_has_cap(ctx->pid, CAP_SYS_ADMIN_BIT))
			return -EPERM;
	}
	*src = s.ino;
	return 0;
}

/* ARB_IOC_FILE_SPACE: anyone who could open the file (the kernel opened
 * it for the ioctl) */
static void file_space(fuse_req_t req, fuse_ino_t nodeid)
{
	struct afs *afs = fuse_req_userdata(req);
	struct arb_ioc_file_space a;
	uint32_t hdr[2] = { sizeof(a), ARB_IOC_VERSION };
	struct arb_file_space s;
	int ret = arb_fs_file_space(afs->fs, afs_node_ino(nodeid), &s);

	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	memset(&a, 0, sizeof(a));
	memcpy(&a, hdr, sizeof(hdr));
	a.bytes = s.bytes;
	a.stored = s.stored;
	a.compressed_bytes = s.compressed_bytes;
	a.compressed_stored = s.compressed_stored;
	a.prealloc_bytes = s.prealloc_bytes;
	a.extents = s.extents;
	a.compressed_extents = s.compressed_extents;
	fuse_reply_ioctl(req, 0, &a, sizeof(a));
}

bool afs_reflink_ioctl(fuse_req_t req, fuse_ino_t nodeid, unsigned int cmd,
		       const void *in_buf, size_t in_bufsz, size_t out_bufsz)
{
	struct afs *afs = fuse_req_userdata(req);
	struct arb_ioc_dedupe_range a;
	uint32_t hdr[2] = { sizeof(a), ARB_IOC_VERSION };
	uint64_t src, got = 0;
	int ret;

	if (cmd == ARB_IOC_FILE_SPACE) {
		if (out_bufsz < sizeof(struct arb_ioc_file_space))
			fuse_reply_err(req, EINVAL);
		else
			file_space(req, nodeid);
		return true;
	}
	if (cmd != ARB_IOC_DEDUPE_RANGE)
		return false;
	/* the kernel sizes the buffers from the number: this is a check */
	if (in_bufsz < sizeof(a) || out_bufsz < sizeof(a)) {
		fuse_reply_err(req, EINVAL);
		return true;
	}
	/* in_buf has no alignment promise */
	memcpy(&a, in_buf, sizeof(a));
	if (a.flags) {
		fuse_reply_err(req, EINVAL);
		return true;
	}
	ret = dedupe_files(req, nodeid, a.src_fd, &src);
	if (!ret)
		ret = arb_fs_dedupe_range(afs->fs, src, a.src_off,
					  afs_node_ino(nodeid), a.dst_off,
					  a.len, &got);
	if (ret < 0) {
		fuse_reply_err(req, -ret);
		return true;
	}
	memset(&a, 0, sizeof(a));
	memcpy(&a, hdr, sizeof(hdr));
	a.bytes = got;
	a.status = ret == ARB_DEDUPE_DIFFERS ? ARB_IOC_DEDUPE_DIFFERS
					     : ARB_IOC_DEDUPE_SAME;
	fuse_reply_ioctl(req, 0, &a, sizeof(a));
	return true;
}
