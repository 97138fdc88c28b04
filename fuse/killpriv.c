// SPDX-License-Identifier: MIT
/*
 * killpriv.c - FUSE_HANDLE_KILLPRIV_V2 with libfuse 3.14, and the session's
 * read and writev hooks that FUSE over io_uring (uring.c) needs too.
 *
 * Without that flag the kernel asks the daemon for "security.capability"
 * (GETXATTR) before every write(2) to a file, because it must drop a file
 * capability that a write invalidates and cannot cache the answer.  That
 * is a whole round trip per write: 16,384 GETXATTRs for 16,384 random
 * 4 KiB writes (docs/design/fuse.md, "Set-id bits and file capabilities").
 * With the flag the superblock gets
 * SB_NOSEC: the kernel looks once per cached inode, remembers "no
 * capability" (S_NOSEC) until a security xattr is set, and leaves the
 * set-user-ID and set-group-ID bits to the filesystem, telling it when to
 * clear them: FUSE_WRITE_KILL_SUIDGID on a write and FATTR_KILL_SUIDGID on
 * a setattr (truncate by a caller without CAP_FSETID, any chown; the
 * truncate of an open with O_TRUNC is one, as the daemon does not take
 * atomic O_TRUNC, see afs_init).  (FUSE_OPEN_KILL_SUIDGID, the third bit,
 * comes only with atomic O_TRUNC.)  File capabilities stay the kernel's
 * job (it removes the xattr through REMOVEXATTR).
 *
 * libfuse 3.14 (Debian 12) can neither ask for the flag nor pass those
 * bits to the operations.  It does let a daemon supply its own read
 * and writev for the session (fuse_session_custom_io), and that is all
 * this file uses:
 *
 *  - read: after each request is read, note whether it asks for the
 *    set-id bits to be cleared, in a thread-local variable.  libfuse
 *    serves a request on the thread that read it, before that thread
 *    reads again, so the operation sees the note of its own request
 *    (afs_kill_suidgid_asked).  Remember the kernel's INIT offer.
 *  - writev: add FUSE_HANDLE_KILLPRIV_V2 to the flags of the INIT reply,
 *    if the kernel offered it, and FUSE_OVER_IO_URING (flags2) if the
 *    kernel offered that and uring.c takes it; hand replies to requests
 *    that came through an io_uring to uring.c instead of /dev/fuse.
 *
 * Splice is not used for requests (no write_buf operation), so every
 * request passes through the read hook.  A newer libfuse can ask for the
 * flag itself; setting it here as well changes nothing there.
 */
#include <errno.h>
#include <linux/fuse.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <unistd.h>

#include "arborfs_fuse.h"

/* the request this thread is serving asked for the set-id bits to go */
static __thread bool kill_asked;

/* the unique id of the kernel's INIT (0 until it came, and after the
 * reply), and what it offered: KILLPRIV_V2, FUSE over io_uring */
static _Atomic uint64_t init_unique;
static _Atomic bool killpriv_offered;
static _Atomic uint64_t init_flags;

bool afs_kill_suidgid_asked(void)
{
	return kill_asked;
}

void afs_killpriv_note(const void *buf, size_t n)
{
	const struct fuse_in_header *h = buf;
	const void *arg = h + 1;
	size_t len;

	kill_asked = false;
	if (n < sizeof(*h))
		return;
	len = n - sizeof(*h);
	switch (h->opcode) {
	case FUSE_WRITE:
		if (len >= sizeof(struct fuse_write_in))
			kill_asked = ((const struct fuse_write_in *)arg)->write_flags &
				     FUSE_WRITE_KILL_SUIDGID;
		break;
	case FUSE_SETATTR:
		if (len >= sizeof(struct fuse_setattr_in))
			kill_asked = ((const struct fuse_setattr_in *)arg)->valid &
				     FATTR_KILL_SUIDGID;
		break;
	case FUSE_INIT: {
		const struct fuse_init_in *in = arg;
		uint64_t flags = 0;

		/* the flags word is the same in every 7.x INIT request;
		 * flags2 comes with FUSE_INIT_EXT, in the 7.36 layout */
		if (len >= offsetof(struct fuse_init_in, flags) + sizeof(uint32_t))
			flags = in->flags;
		if ((flags & FUSE_INIT_EXT) && len >= sizeof(*in))
			flags |= (uint64_t)in->flags2 << 32;
		atomic_store(&init_flags, flags);
		atomic_store(&killpriv_offered,
			     (flags & FUSE_HANDLE_KILLPRIV_V2) != 0);
		atomic_store(&init_unique, h->unique);
		break;
	}
	default:
		break;
	}
}

static ssize_t kp_read(int fd, void *buf, size_t len, void *userdata)
{
	ssize_t n;

	(void)userdata;
	n = read(fd, buf, len);
	if (n > 0) {
		int e = errno;

		afs_killpriv_note(buf, (size_t)n);
		errno = e;
	}
	return n;
}

/* Change the INIT reply: flags the kernel offered that libfuse 3.14
 * cannot ask for.  Returns whether FUSE over io_uring was accepted. */
static bool edit_init_reply(struct iovec *iov, int count)
{
	uint64_t offered = atomic_load(&init_flags);
	struct fuse_init_out *out;
	bool uring;

	if (count < 2 || iov[1].iov_len < offsetof(struct fuse_init_out, flags) +
						  sizeof(uint32_t))
		return false;
	out = iov[1].iov_base;
	if (atomic_load(&killpriv_offered))
		out->flags |= FUSE_HANDLE_KILLPRIV_V2;
	/* flags2 exists in replies of 7.36 and later (64 bytes) */
	if (iov[1].iov_len < sizeof(*out) || !(offered & FUSE_INIT_EXT))
		return false;
	uring = afs_uring_accept(offered);
	if (uring) {
		out->flags |= FUSE_INIT_EXT;
		out->flags2 |= (uint32_t)(afs_uring_flag() >> 32);
	}
	return uring;
}

static ssize_t kp_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	const struct fuse_out_header *oh;
	uint64_t unique;
	bool uring = false;
	ssize_t n;

	(void)userdata;
	if (count < 1 || iov[0].iov_len < sizeof(*oh))
		return writev(fd, iov, count);
	oh = iov[0].iov_base;
	unique = atomic_load_explicit(&init_unique, memory_order_relaxed);
	if (unique && oh->unique == unique) {
		atomic_store(&init_unique, 0);
		if (oh->error == 0)
			uring = edit_init_reply(iov, count);
	} else if (afs_uring_reply(iov, count)) {
		/* the reply of a request that came through a ring */
		size_t len = 0;

		for (int i = 0; i < count; i++)
			len += iov[i].iov_len;
		return (ssize_t)len;
	}
	n = writev(fd, iov, count);
	/* the kernel takes ring entries once it has the INIT reply */
	if (uring && n >= 0)
		afs_uring_init_done();
	return n;
}

int afs_killpriv_attach(struct fuse_session *se)
{
	static const struct fuse_custom_io io = {
		.read = kp_read,
		.writev = kp_writev,
	};

	return fuse_session_custom_io(se, &io, fuse_session_fd(se));
}
