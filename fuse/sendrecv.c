// SPDX-License-Identifier: MIT
/*
 * sendrecv.c - send streams on a mount: ARB_IOC_SEND, ARB_IOC_RECEIVE and
 * ARB_IOC_DIGEST (<arbor/ioctl.h>) run arb_send, arb_receive and
 * arb_subvol_digest and arb_subvol_digest_portable (<arbor/send.h>) in the
 * daemon.
 *
 * Transport: a FUSE ioctl carries a small fixed buffer and no
 * descriptor, so the caller names a descriptor of its own and the daemon
 * opens /proc/PID/fd/N of the calling process, which is blocked in
 * ioctl(2) for the whole stream (its pid cannot be reused meanwhile).
 * The daemon then reads or writes that pipe or file directly: a stream
 * of any size, no copy through the kernel's ioctl buffers.  Only uid 0
 * or CAP_SYS_ADMIN (in the daemon's user namespace) may: the stream
 * holds every file of a subvolume whatever its permissions, and a
 * receive creates files with any owner and mode.  A caller in a pid
 * namespace the daemon cannot see (FUSE pid 0) is refused.
 *
 * The request's thread is busy until the stream ends; the library takes
 * its lock per step, so the mount keeps serving other requests.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include <arbor/send.h>
#include <arbor/subvol.h>

#include "arborfs_fuse.h"

#define CAP_SYS_ADMIN_BIT 21

static bool privileged(fuse_req_t req)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	return ctx->uid == 0 ||
	       (ctx->pid > 0 && afs_pid_has_cap(ctx->pid, CAP_SYS_ADMIN_BIT));
}

/* the caller's descriptor n, opened anew for reading or writing */
static int caller_fd(fuse_req_t req, int n, bool write, char *err,
		     size_t len)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	char path[64];
	int fd;

	if (ctx->pid <= 0) {
		snprintf(err, len, "the caller's process is not visible to the daemon (another pid namespace)");
		return -EPERM;
	}
	if (n < 0) {
		snprintf(err, len, "no stream descriptor");
		return -EBADF;
	}
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)ctx->pid, n);
	fd = open(path, (write ? O_WRONLY : O_RDONLY) | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		int e = errno;

		snprintf(err, len, "opening the caller's descriptor %d: %s", n,
			 strerror(e));
		return -e;
	}
	return fd;
}

static int do_send(fuse_req_t req, uint64_t ino, struct arb_ioc_send *io)
{
	struct afs *afs = fuse_req_userdata(req);
	struct arb_subvol_info si;
	struct arb_send_stats st = { 0 };
	int fd = -1, ret;

	if (!io->id) {
		ret = arb_subvol_info(afs->fs, ino, &si);
		if (ret)
			return ret;
		io->id = si.id;
	}
	if (io->flags & ~(ARB_IOC_SEND_ESTIMATE | ARB_IOC_SEND_PROTO1 |
			  ARB_IOC_SEND_PROTO2 | ARB_IOC_SEND_RESUME))
		return -EINVAL;
	io->name[sizeof(io->name) - 1] = 0;
	if (!(io->flags & ARB_IOC_SEND_ESTIMATE)) {
		fd = caller_fd(req, io->fd, true, io->error, sizeof(io->error));
		if (fd < 0)
			return fd;
	}
	ret = arb_send_resume(afs->fs, io->id, io->parent, fd,
		       (io->flags & ARB_IOC_SEND_ESTIMATE ? ARB_SEND_ESTIMATE
							   : 0) |
			       (io->flags & ARB_IOC_SEND_PROTO1 ? ARB_SEND_PROTO1
								 : 0) |
			       (io->flags & ARB_IOC_SEND_PROTO2 ? ARB_SEND_PROTO2
								 : 0),
		       io->flags & ARB_IOC_SEND_RESUME ? io->name : NULL,
		       &st, io->error, sizeof(io->error));
	if (fd >= 0)
		close(fd);
	io->bytes = st.bytes;
	io->commands = st.commands;
	io->inodes = st.inodes;
	io->data = st.data;
	io->cloned = st.cloned;
	io->encoded = st.encoded;
	io->encoded_stored = st.encoded_stored;
	return ret;
}

static int do_receive(fuse_req_t req, uint64_t ino, struct arb_ioc_send *io)
{
	struct afs *afs = fuse_req_userdata(req);
	struct arb_recv_result *res;
	int fd, ret;

	if (io->flags == ARB_IOC_RECV_DISCARD) {
		io->name[sizeof(io->name) - 1] = 0;
		ret = arb_receive_discard(afs->fs, io->name);
		if (ret == -ENOENT)
			snprintf(io->error, sizeof(io->error),
				 "no partial receive for that token here");
		else if (ret == -EINVAL)
			snprintf(io->error, sizeof(io->error),
				 "not a resume token");
		return ret;
	}
	fd = caller_fd(req, io->fd, false, io->error, sizeof(io->error));
	if (fd < 0)
		return fd;
	res = calloc(1, sizeof(*res));
	if (!res) {
		close(fd);
		return -ENOMEM;
	}
	if (io->flags & ~ARB_IOC_SEND_RESUME) {
		close(fd);
		free(res);
		return -EINVAL;
	}
	ret = arb_receive(afs->fs, ino, fd,
			  io->flags & ARB_IOC_SEND_RESUME ? ARB_RECEIVE_RESUMED
							  : 0,
			  res);
	close(fd);
	snprintf(io->resume_token, sizeof(io->resume_token), "%s",
		 res->resume_token);
	io->bytes = res->bytes;
	io->commands = res->commands;
	io->id = res->id;
	memcpy(io->digest, res->digest, sizeof(io->digest));
	snprintf(io->name, sizeof(io->name), "%s", res->name);
	if (ret)
		snprintf(io->error, sizeof(io->error), "%s", res->error);
	free(res);
	return ret;
}

bool afs_send_ioctl(fuse_req_t req, fuse_ino_t nodeid, unsigned int cmd,
		    const void *in_buf, size_t in_bufsz, size_t out_bufsz)
{
	struct afs *afs = fuse_req_userdata(req);
	struct arb_ioc_send *io;
	struct arb_subvol_info si;
	uint64_t ino = afs_node_ino(nodeid);
	int ret;

	if (cmd != ARB_IOC_SEND && cmd != ARB_IOC_RECEIVE &&
	    cmd != ARB_IOC_DIGEST)
		return false;
	if (in_bufsz < sizeof(*io) || out_bufsz < sizeof(*io)) {
		fuse_reply_err(req, EINVAL);
		return true;
	}
	if (!privileged(req)) {
		fuse_reply_err(req, EPERM);
		return true;
	}
	io = malloc(sizeof(*io));
	if (!io) {
		fuse_reply_err(req, ENOMEM);
		return true;
	}
	memcpy(io, in_buf, sizeof(*io));
	io->error[0] = 0;
	io->resume_token[0] = 0;
	/* name is an output, except for a token handed in */
	if (!(cmd == ARB_IOC_SEND && (io->flags & ARB_IOC_SEND_RESUME)) &&
	    !(cmd == ARB_IOC_RECEIVE && (io->flags & ARB_IOC_RECV_DISCARD)))
		io->name[0] = 0;
	io->version = ARB_IOC_VERSION;
	io->size = sizeof(*io);
	switch (cmd) {
	case ARB_IOC_SEND:
		ret = do_send(req, ino, io);
		break;
	case ARB_IOC_RECEIVE:
		ret = do_receive(req, ino, io);
		break;
	default:
		ret = 0;
		if (!io->id) {
			ret = arb_subvol_info(afs->fs, ino, &si);
			io->id = si.id;
		}
		if (!ret && (io->flags & ~ARB_IOC_DIGEST_PORTABLE))
			ret = -EINVAL;
		if (!ret)
			ret = io->flags & ARB_IOC_DIGEST_PORTABLE
				      ? arb_subvol_digest_portable(afs->fs, io->id,
								   io->digest)
				      : arb_subvol_digest(afs->fs, io->id,
							  io->digest);
	}
	io->result = ret;
	if (ret && !io->error[0])
		snprintf(io->error, sizeof(io->error), "%s", strerror(-ret));
	if (ret)
		syslog(LOG_INFO, "%s: %s",
		       cmd == ARB_IOC_SEND ? "send" : cmd == ARB_IOC_RECEIVE
						       ? "receive" : "digest",
		       io->error);
	fuse_reply_ioctl(req, 0, io, sizeof(*io));
	/* the new name may be cached as absent: forget it (after the
	 * answer: the request holds nothing the kernel would wait for) */
	if (cmd == ARB_IOC_RECEIVE && !ret && afs->se)
		fuse_lowlevel_notify_inval_entry(afs->se, nodeid, io->name,
						 strlen(io->name));
	free(io);
	return true;
}
