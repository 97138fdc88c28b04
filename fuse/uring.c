// SPDX-License-Identifier: MIT
/*
 * uring.c - FUSE over io_uring: each request served on its caller's CPU.
 *
 * Why: a FUSE request read from /dev/fuse wakes a daemon thread on
 * whichever CPU the scheduler picks, and the reply wakes the caller on
 * another; on a 2-vCPU VM those two cross-CPU wake-ups, not the daemon's
 * work, are most of a metadata operation's time (untar: 1,505-1,603 files/s
 * as is, 4,670-4,939 with tar and daemon pinned to one CPU,
 * docs/design/fuse.md, "The CPU a request is served on").  Since Linux
 * 6.14 the kernel can instead hand a
 * request to an io_uring command that a daemon thread left waiting in the
 * queue of the caller's CPU (Documentation/filesystems/fuse-io-uring.rst).
 * With threads pinned to each CPU (and at SCHED_IDLE, see "The CPU a
 * request is served on" below), the request and its reply stay on the
 * CPU they were made on.
 *
 * libfuse 3.14 (Debian 12) knows nothing of it, so this file is the
 * transport, on raw io_uring system calls (no liburing: two syscalls and
 * three mmaps, less than a dependency):
 *
 *  - INIT: the kernel offers FUSE_OVER_IO_URING only when the fuse module's
 *    parameter enable_uring is on; killpriv.c's writev hook accepts it in
 *    the INIT reply (afs_uring_accept) and, once the reply is written,
 *    lets the threads here register (afs_uring_init_done): the kernel
 *    refuses registrations (EAGAIN) before it has the reply.
 *  - For every possible CPU, AFS_URING_PER_CPU threads pinned to it, each
 *    with a ring of its own and one entry in the kernel's queue of that
 *    CPU: a header buffer (the request's fuse_in_header, its per-opcode
 *    header, and the payload's size) and a payload buffer (names, written
 *    data, ...).  More than one per CPU so that a request that waits
 *    (an fsync's commit, a read from the image) does not hold up the
 *    next request made on that CPU.  The kernel uses the rings once every
 *    queue has an entry; until then, and always for FORGET, INTERRUPT and
 *    the daemon's notifications, /dev/fuse and libfuse's loop serve.
 *  - A request arrives as a completion.  It is laid out as /dev/fuse would
 *    have delivered it (the headers are copied in front of the payload,
 *    which the payload buffer leaves room for, so written data is not
 *    copied) and given to fuse_session_process_buf(): the operations do
 *    not know how the request came.
 *  - The reply leaves libfuse through the session's writev hook
 *    (killpriv.c), which hands it here (afs_uring_reply): the out header
 *    goes into the header buffer, the rest into the payload buffer, and
 *    the thread sends COMMIT_AND_FETCH, which delivers the reply and waits
 *    for the next request in one system call.  A reply made by another
 *    thread (none of today's operations do that with a pool of threads)
 *    is found by its unique id and the serving thread waits for it.
 *
 * If the kernel or the module parameter does not allow it, registration
 * fails and /dev/fuse serves everything, as without this file.
 * -o no_uring keeps the daemon from asking.
 *
 * The CPU a request is served on: pinning is not enough.  When the ring
 * thread on CPU 0 commits a reply, it is running, CPU 1 is idle, and the
 * scheduler wakes the caller on CPU 1; its next request then goes to
 * queue 1, and every request still crosses CPUs once (untar 1,152-1,557
 * files/s, no better than /dev/fuse).  A CPU that runs only SCHED_IDLE
 * tasks counts as idle when a task is woken, so with the ring threads at
 * SCHED_IDLE the caller is woken where it was, preempts the thread that
 * just answered it, and the two share the CPU (4,069-4,278 files/s).
 * The price: a ring thread yields to every normal task of its scheduling
 * group on its CPU.  With two busy loops pinned to each CPU, two
 * concurrent untars of 600 files took 0.40-0.53 s against 0.26-0.37 s
 * with normal threads (and 0.60-0.68 s through /dev/fuse); where the busy
 * loop shares the daemon's group, a thread would starve outright, which
 * the guard below prevents.  -o uring_sched=normal chooses the other
 * trade.
 */
#include <errno.h>
#include <linux/fuse.h>
#include <linux/io_uring.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/uio.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "arborfs_fuse.h"

/*
 * The kernel's interface (include/uapi/linux/fuse.h, protocol 7.42); not
 * in Debian 12's headers.
 */
#define AFS_FUSE_OVER_IO_URING (1ull << 41)
#define AFS_URING_CMD_REGISTER 1
#define AFS_URING_CMD_COMMIT_AND_FETCH 2
#define AFS_URING_HDR_SZ 128 /* fuse_in_header / fuse_out_header */
#define AFS_URING_OP_SZ 128  /* the opcode's own header */

struct afs_uring_ent_in_out {
	uint64_t flags;
	uint64_t commit_id; /* to be sent back with the reply */
	uint32_t payload_sz; /* bytes in the payload buffer */
	uint32_t padding;
	uint64_t reserved;
};

struct afs_uring_req_header {
	char in_out[AFS_URING_HDR_SZ];
	char op_in[AFS_URING_OP_SZ];
	struct afs_uring_ent_in_out ent;
};

struct afs_uring_cmd_req {
	uint64_t flags;
	uint64_t commit_id;
	uint16_t qid;
	uint8_t padding[6];
};

_Static_assert(sizeof(struct afs_uring_req_header) == 288,
	       "fuse_uring_req_header is 288 bytes");
_Static_assert(sizeof(struct afs_uring_cmd_req) == 24,
	       "fuse_uring_cmd_req is 24 bytes");
_Static_assert(sizeof(struct fuse_in_header) <= AFS_URING_HDR_SZ, "in_out");

/* threads (and entries) per CPU queue */
#define AFS_URING_PER_CPU 2
/* room in front of the payload for the two headers of a request */
#define AFS_URING_HEADROOM 4096
/* user_data of the poll on the stop eventfd; entries use their address */
#define AFS_URING_STOP_TAG 1ull

/* one io_uring of one thread, mapped by hand */
struct afs_ring {
	int fd;
	unsigned sq_entries;
	_Atomic unsigned *sq_head, *sq_tail;
	unsigned sq_mask, *sq_array;
	_Atomic unsigned *cq_head, *cq_tail;
	unsigned cq_mask;
	struct io_uring_cqe *cqes;
	char *sqes; /* 128-byte entries (IORING_SETUP_SQE128) */
	void *sq_map, *cq_map;
	size_t sq_map_len, cq_map_len, sqes_len;
	unsigned to_submit;
};

/* one thread, its ring and its single entry in the kernel's queue */
struct afs_uring_ent {
	struct afs_uring *u;
	pthread_t thread;
	bool started;
	unsigned qid;
	struct afs_ring ring;
	struct afs_uring_req_header *hdr;
	char *area;   /* headroom + payload, mmap'd */
	char *payload; /* area + AFS_URING_HEADROOM */
	size_t payload_len;
	struct iovec iov[2];

	/* the request being served: its unique id (0: none) and whether its
	 * reply is in the buffers; under lock, which another thread that
	 * replies takes (the entry's own, so that the threads of different
	 * CPUs share no lock) */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	_Atomic uint64_t unique;
	bool replied;
	/* the command in flight: REGISTER, or COMMIT_AND_FETCH of this id */
	uint32_t last_cmd;
	uint64_t last_commit_id;

	/* the thread's id while it runs (0 otherwise), and what the guard
	 * (below) knows of it; g_* only the guard touches */
	_Atomic pid_t tid;
	uint64_t g_exec_ns;     /* CPU time at the last look */
	unsigned g_stuck;       /* looks in a row: runnable, no progress */
	bool g_normal;          /* moved to SCHED_OTHER for now */
	uint64_t g_until;       /* ... until then */
	uint64_t g_period;      /* how long a move lasts (grows on relapse) */
	uint64_t g_idle_since;  /* back at SCHED_IDLE since */
};

struct afs_uring {
	struct fuse_session *se;
	int fuse_fd;
	int stop_fd; /* eventfd: readable = stop */
	size_t payload_len;
	unsigned nr_ents;
	struct afs_uring_ent *ents;

	bool sched_idle; /* ring threads at SCHED_IDLE */

	/* starting, stopping, the first failure */
	pthread_mutex_t lock;
	bool init_done; /* under lock: the INIT reply is written, threads run */
	_Atomic bool stop;
	int first_error; /* under lock: of a ring thread (-errno) */

	/* the starvation guard of SCHED_IDLE ring threads */
	pthread_t guard;
	bool guard_started;
	pthread_cond_t guard_cond; /* with lock: stop */
};

/* the entry this thread serves, if it is a ring thread */
static __thread struct afs_uring_ent *cur_ent;
/* the one instance (a daemon serves one session) */
static struct afs_uring *the_uring;
static _Atomic bool accepted;
static _Atomic uint64_t served;
static _Atomic unsigned live_threads;
static _Atomic uint64_t starved;

/* ---- raw io_uring ---- */

static int ring_setup(struct afs_ring *r, unsigned entries)
{
	struct io_uring_params p;
	size_t sq_len, cq_len;

	memset(&p, 0, sizeof(p));
	memset(r, 0, sizeof(*r));
	r->fd = -1;
	p.flags = IORING_SETUP_SQE128;
	r->fd = (int)syscall(SYS_io_uring_setup, entries, &p);
	if (r->fd < 0)
		return -errno;
	sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
	cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
	if (p.features & IORING_FEAT_SINGLE_MMAP) {
		if (cq_len > sq_len)
			sq_len = cq_len;
		cq_len = sq_len;
	}
	r->sq_map = mmap(NULL, sq_len, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQ_RING);
	if (r->sq_map == MAP_FAILED)
		goto fail;
	r->sq_map_len = sq_len;
	if (p.features & IORING_FEAT_SINGLE_MMAP) {
		r->cq_map = r->sq_map;
	} else {
		r->cq_map = mmap(NULL, cq_len, PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_POPULATE, r->fd,
				 IORING_OFF_CQ_RING);
		if (r->cq_map == MAP_FAILED) {
			r->cq_map = NULL;
			goto fail;
		}
		r->cq_map_len = cq_len;
	}
	r->sqes_len = p.sq_entries * 128;
	r->sqes = mmap(NULL, r->sqes_len, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQES);
	if (r->sqes == MAP_FAILED) {
		r->sqes = NULL;
		goto fail;
	}
	r->sq_entries = p.sq_entries;
	r->sq_head = (void *)((char *)r->sq_map + p.sq_off.head);
	r->sq_tail = (void *)((char *)r->sq_map + p.sq_off.tail);
	r->sq_mask = *(unsigned *)((char *)r->sq_map + p.sq_off.ring_mask);
	r->sq_array = (void *)((char *)r->sq_map + p.sq_off.array);
	r->cq_head = (void *)((char *)r->cq_map + p.cq_off.head);
	r->cq_tail = (void *)((char *)r->cq_map + p.cq_off.tail);
	r->cq_mask = *(unsigned *)((char *)r->cq_map + p.cq_off.ring_mask);
	r->cqes = (void *)((char *)r->cq_map + p.cq_off.cqes);
	return 0;
fail: {
	int e = -errno;

	/* the rings mapped so far (sqes failing is the last step) */
	if (r->cq_map && r->cq_map != r->sq_map)
		munmap(r->cq_map, r->cq_map_len);
	if (r->sq_map && r->sq_map != MAP_FAILED)
		munmap(r->sq_map, r->sq_map_len);
	close(r->fd);
	r->fd = -1;
	return e;
}
}

static void ring_close(struct afs_ring *r)
{
	if (r->fd < 0)
		return;
	if (r->sqes)
		munmap(r->sqes, r->sqes_len);
	if (r->cq_map && r->cq_map != r->sq_map)
		munmap(r->cq_map, r->cq_map_len);
	munmap(r->sq_map, r->sq_map_len);
	close(r->fd);
	r->fd = -1;
}

/* the next free submission entry, zeroed; NULL when the ring is full */
static struct io_uring_sqe *ring_get_sqe(struct afs_ring *r)
{
	unsigned head = atomic_load_explicit(r->sq_head, memory_order_acquire);
	unsigned tail = atomic_load_explicit(r->sq_tail, memory_order_relaxed);
	struct io_uring_sqe *sqe;

	if (tail - head >= r->sq_entries)
		return NULL;
	sqe = (void *)(r->sqes + (size_t)(tail & r->sq_mask) * 128);
	memset(sqe, 0, 128);
	r->sq_array[tail & r->sq_mask] = tail & r->sq_mask;
	atomic_store_explicit(r->sq_tail, tail + 1, memory_order_release);
	r->to_submit++;
	return sqe;
}

/* submit what is queued and wait for at least one completion */
static int ring_submit_and_wait(struct afs_ring *r)
{
	for (;;) {
		long n = syscall(SYS_io_uring_enter, r->fd, r->to_submit, 1,
				 IORING_ENTER_GETEVENTS, NULL, 0);

		if (n >= 0) {
			r->to_submit -= (unsigned)n < r->to_submit
						? (unsigned)n : r->to_submit;
			return 0;
		}
		if (errno != EINTR)
			return -errno;
	}
}

/* ---- entries ---- */

static void ent_prep_cmd(struct afs_uring_ent *e, struct io_uring_sqe *sqe,
			 uint32_t cmd_op, uint64_t commit_id)
{
	struct afs_uring_cmd_req *cr = (void *)sqe->cmd;

	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = e->u->fuse_fd;
	sqe->cmd_op = cmd_op;
	sqe->user_data = (uint64_t)(uintptr_t)e;
	cr->qid = (uint16_t)e->qid;
	cr->commit_id = commit_id;
	if (cmd_op == AFS_URING_CMD_REGISTER) {
		sqe->addr = (uint64_t)(uintptr_t)e->iov;
		sqe->len = 2;
	}
}

static int ent_queue_cmd(struct afs_uring_ent *e, uint32_t cmd_op,
			 uint64_t commit_id)
{
	struct io_uring_sqe *sqe = ring_get_sqe(&e->ring);

	if (!sqe)
		return -EBUSY; /* one entry, two slots: cannot happen */
	ent_prep_cmd(e, sqe, cmd_op, commit_id);
	/* to send again as it was if the kernel says EAGAIN or EINTR */
	e->last_cmd = cmd_op;
	e->last_commit_id = commit_id;
	return 0;
}

static int ent_queue_stop_poll(struct afs_uring_ent *e)
{
	struct io_uring_sqe *sqe = ring_get_sqe(&e->ring);

	if (!sqe)
		return -EBUSY;
	sqe->opcode = IORING_OP_POLL_ADD;
	sqe->fd = e->u->stop_fd;
	sqe->poll32_events = POLLIN;
	sqe->user_data = AFS_URING_STOP_TAG;
	return 0;
}

/* An error reply in the entry's buffers (a request we cannot parse). */
static void ent_reply_error(struct afs_uring_ent *e, uint64_t unique, int err)
{
	struct fuse_out_header *oh = (void *)e->hdr->in_out;

	memset(oh, 0, sizeof(*oh));
	oh->len = sizeof(*oh);
	oh->error = -err;
	oh->unique = unique;
	e->hdr->ent.payload_sz = 0;
}

/*
 * Serve the request the kernel put in e's buffers; on return the reply is
 * in them.  Returns the commit id to send back.
 */
static uint64_t ent_serve(struct afs_uring_ent *e)
{
	struct afs_uring *u = e->u;
	const struct fuse_in_header *ih = (const void *)e->hdr->in_out;
	uint64_t commit_id = e->hdr->ent.commit_id;
	uint32_t payload_sz = e->hdr->ent.payload_sz;
	uint32_t op_sz;
	char *start;
	struct fuse_buf fbuf;

	/* the kernel is trusted, but a mistake here would corrupt memory */
	if (payload_sz > e->payload_len || ih->len < sizeof(*ih) + payload_sz ||
	    ih->len - sizeof(*ih) - payload_sz > AFS_URING_OP_SZ) {
		afs_log(LOG_ERR, "io_uring: request %llu of %u bytes with a "
			"payload of %u: not understood",
			(unsigned long long)ih->unique, ih->len, payload_sz);
		ent_reply_error(e, ih->unique, EIO);
		return commit_id;
	}
	op_sz = ih->len - (uint32_t)sizeof(*ih) - payload_sz;
	/* as /dev/fuse delivers it: in header, op header, payload */
	start = e->payload - op_sz - sizeof(*ih);
	memcpy(start, ih, sizeof(*ih));
	memcpy(start + sizeof(*ih), e->hdr->op_in, op_sz);

	memset(&fbuf, 0, sizeof(fbuf));
	fbuf.mem = start;
	fbuf.size = ih->len;

	pthread_mutex_lock(&e->lock);
	e->replied = false;
	atomic_store(&e->unique, ih->unique);
	pthread_mutex_unlock(&e->lock);

	atomic_fetch_add_explicit(&served, 1, memory_order_relaxed);
	afs_killpriv_note(start, ih->len);
	cur_ent = e;
	fuse_session_process_buf(u->se, &fbuf);
	cur_ent = NULL;

	pthread_mutex_lock(&e->lock);
	/* replied elsewhere, later (or never, if the session ends) */
	while (!e->replied && !atomic_load(&u->stop))
		pthread_cond_wait(&e->cond, &e->lock);
	if (!e->replied)
		ent_reply_error(e, atomic_load(&e->unique), EIO);
	atomic_store(&e->unique, 0);
	pthread_mutex_unlock(&e->lock);
	return commit_id;
}

/* copy a reply into e's buffers (an error reply if it cannot be) */
static void ent_fill_reply(struct afs_uring_ent *e, const struct iovec *iov,
			   int count)
{
	const struct fuse_out_header *oh = iov[0].iov_base;
	size_t len = 0, off = 0;
	bool overlap = false;
	char *tmp = NULL;

	for (int i = 1; i < count; i++) {
		const char *b = iov[i].iov_base;

		len += iov[i].iov_len;
		if (iov[i].iov_len && b < e->area + AFS_URING_HEADROOM +
						   e->payload_len &&
		    b + iov[i].iov_len > e->area)
			overlap = true;
	}
	memcpy(e->hdr->in_out, oh, sizeof(*oh));
	if (len > e->payload_len) {
		afs_log(LOG_ERR, "io_uring: reply of %zu bytes to request "
			"%llu does not fit the %zu-byte buffer", len,
			(unsigned long long)oh->unique, e->payload_len);
		ent_reply_error(e, oh->unique, EIO);
		return;
	}
	if (overlap) {
		/* a reply made of the request's own bytes: gather first */
		tmp = malloc(len ? len : 1);
		if (!tmp) {
			ent_reply_error(e, oh->unique, ENOMEM);
			return;
		}
	}
	for (int i = 1; i < count; i++) {
		memcpy((tmp ? tmp : e->payload) + off, iov[i].iov_base,
		       iov[i].iov_len);
		off += iov[i].iov_len;
	}
	if (tmp) {
		memcpy(e->payload, tmp, len);
		free(tmp);
	}
	e->hdr->ent.payload_sz = (uint32_t)len;
}

int afs_uring_reply(const struct iovec *iov, int count)
{
	struct afs_uring *u = the_uring;
	const struct fuse_out_header *oh;
	struct afs_uring_ent *e = cur_ent;

	/* without rings (not offered by the kernel, or -o no_uring) every
	 * reply is /dev/fuse's: no lock, no search */
	if (!u || !atomic_load_explicit(&accepted, memory_order_acquire) ||
	    count < 1 || iov[0].iov_len < sizeof(*oh))
		return 0;
	oh = iov[0].iov_base;
	if (!oh->unique)
		return 0; /* a notification: /dev/fuse */
	if (e && atomic_load_explicit(&e->unique, memory_order_relaxed) ==
			 oh->unique) {
		/* the serving thread itself, which alone sets replied
		 * between its two locked sections in ent_serve */
		ent_fill_reply(e, iov, count);
		e->replied = true;
		return 1;
	}
	/* another thread's request? */
	for (unsigned i = 0; i < u->nr_ents; i++) {
		e = &u->ents[i];
		if (atomic_load(&e->unique) != oh->unique)
			continue;
		pthread_mutex_lock(&e->lock);
		if (atomic_load(&e->unique) == oh->unique && !e->replied) {
			ent_fill_reply(e, iov, count);
			e->replied = true;
			pthread_cond_signal(&e->cond);
			pthread_mutex_unlock(&e->lock);
			return 1;
		}
		pthread_mutex_unlock(&e->lock);
	}
	return 0;
}

/* ---- threads ---- */

/* A ring thread gives up; the first one says why, at once. */
static void ent_fail(struct afs_uring_ent *e, int err)
{
	struct afs_uring *u = e->u;
	bool first;

	pthread_mutex_lock(&u->lock);
	first = !u->first_error;
	if (first)
		u->first_error = err;
	pthread_mutex_unlock(&u->lock);
	if (first)
		afs_log(LOG_WARNING, "io_uring: a thread of queue %u stopped: "
			"%s (before the rings are complete, requests come "
			"through /dev/fuse)", e->qid, strerror(-err));
}

/* the thread's ring and buffers, made by the thread on its own CPU */
static int ent_setup(struct afs_uring_ent *e)
{
	int ret = ring_setup(&e->ring, 2);

	if (ret)
		return ret;
	e->hdr = calloc(1, sizeof(*e->hdr));
	if (!e->hdr)
		return -ENOMEM;
	/* untouched payload pages cost no memory */
	e->area = mmap(NULL, AFS_URING_HEADROOM + e->payload_len,
		       PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		       0);
	if (e->area == MAP_FAILED) {
		e->area = NULL;
		return -ENOMEM;
	}
	e->payload = e->area + AFS_URING_HEADROOM;
	e->iov[0].iov_base = e->hdr;
	e->iov[0].iov_len = sizeof(*e->hdr);
	e->iov[1].iov_base = e->payload;
	e->iov[1].iov_len = e->payload_len;
	return 0;
}

static void *ent_thread(void *arg)
{
	struct afs_uring_ent *e = arg;
	cpu_set_t set;
	int ret;

	/* a CPU that is possible but not online takes no pin: the queue
	 * must still have an entry for the kernel to use the rings */
	CPU_ZERO(&set);
	CPU_SET(e->qid, &set);
	(void)sched_setaffinity(0, sizeof(set), &set);
	if (e->u->sched_idle) {
		struct sched_param sp = { .sched_priority = 0 };

		/* "The CPU a request is served on", at the top */
		(void)sched_setscheduler(0, SCHED_IDLE, &sp);
	}
	atomic_store(&e->tid, (pid_t)syscall(SYS_gettid));

	ret = ent_setup(e);
	if (ret) {
		ent_fail(e, ret);
		goto out;
	}
	if (ent_queue_stop_poll(e) || ent_queue_cmd(e, AFS_URING_CMD_REGISTER, 0))
		goto out;
	atomic_fetch_add(&live_threads, 1);
	for (;;) {
		unsigned head, tail;
		bool stop = false;

		ret = ring_submit_and_wait(&e->ring);
		if (ret) {
			ent_fail(e, ret);
			break;
		}
		head = atomic_load_explicit(e->ring.cq_head, memory_order_relaxed);
		tail = atomic_load_explicit(e->ring.cq_tail, memory_order_acquire);
		for (; head != tail; head++) {
			struct io_uring_cqe *cqe =
				&e->ring.cqes[head & e->ring.cq_mask];
			uint64_t data = cqe->user_data;
			int res = cqe->res;

			atomic_store_explicit(e->ring.cq_head, head + 1,
					      memory_order_release);
			if (data == AFS_URING_STOP_TAG) {
				stop = true;
				continue;
			}
			if (res == -EAGAIN || res == -EINTR) {
				/* not taken (a registration before the kernel
				 * has the INIT reply): again, a moment later */
				usleep(1000);
				ent_queue_cmd(e, e->last_cmd, e->last_commit_id);
				continue;
			}
			if (res < 0) {
				/* ENOTCONN/ECANCELED: the mount is gone;
				 * anything else: not allowed here */
				if (res != -ENOTCONN && res != -ECANCELED)
					ent_fail(e, res);
				stop = true;
				continue;
			}
			ent_queue_cmd(e, AFS_URING_CMD_COMMIT_AND_FETCH,
				      ent_serve(e));
		}
		if (stop)
			break;
	}
	atomic_fetch_sub(&live_threads, 1);
out:
	atomic_store(&e->tid, 0);
	return NULL;
}

bool afs_uring_accept(uint64_t offered_flags)
{
	if (!the_uring || !(offered_flags & AFS_FUSE_OVER_IO_URING))
		return false;
	atomic_store(&accepted, true);
	return true;
}

uint64_t afs_uring_flag(void)
{
	return AFS_FUSE_OVER_IO_URING;
}

/*
 * The starvation guard.  A SCHED_IDLE thread runs only when no normal task
 * of its scheduling group wants its CPU.  When the daemon has a group of
 * its own (it detached with setsid, so it got an autogroup, or a cgroup of
 * its own) that costs little (docs/design/fuse.md, "The starvation
 * guard"); but a daemon in the
 * foreground shares its group with the shell's other programs, and one
 * busy loop on CPU 0 then left a request of that CPU waiting 166 ms on
 * average (bench/cpushare.sh: 17 creates in 3 s).  So a thread of normal
 * priority looks at the ring threads every 10 ms while requests come
 * (every 100 ms otherwise): one found runnable twice in a row without
 * having run 1 ms in between is moved to SCHED_OTHER for a second, twice
 * as long each time it starves again soon after (at most 30 s).
 */
#define GUARD_ACTIVE_NS 10000000ull
#define GUARD_QUIET_NS 100000000ull
#define GUARD_PROGRESS_NS 1000000ull
#define GUARD_PERIOD_NS 1000000000ull
#define GUARD_PERIOD_MAX_NS 30000000000ull

/* state letter and CPU time (ns) of one of our threads; 0 or -1 */
static int thread_sample(pid_t tid, char *state, uint64_t *exec_ns)
{
	char path[64], buf[512], *p;
	unsigned long long ns;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')');
	if (!p || p[1] != ' ' || !p[2])
		return -1;
	*state = p[2];
	snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", (int)tid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	if (fscanf(f, "%llu", &ns) != 1) {
		fclose(f);
		return -1;
	}
	fclose(f);
	*exec_ns = ns;
	return 0;
}

static void guard_look(struct afs_uring *u, uint64_t now)
{
	for (unsigned i = 0; i < u->nr_ents; i++) {
		struct afs_uring_ent *e = &u->ents[i];
		pid_t tid = atomic_load(&e->tid);
		struct sched_param sp = { .sched_priority = 0 };
		uint64_t exec;
		char state;

		if (!tid || thread_sample(tid, &state, &exec))
			continue;
		if (!e->g_normal) {
			if (state == 'R' && exec - e->g_exec_ns < GUARD_PROGRESS_NS)
				e->g_stuck++;
			else
				e->g_stuck = 0;
			if (e->g_stuck >= 2 &&
			    sched_setscheduler(tid, SCHED_OTHER, &sp) == 0) {
				/* starving again soon after: stay longer */
				if (e->g_period &&
				    now - e->g_idle_since < 2 * e->g_period)
					e->g_period *= 2;
				else
					e->g_period = GUARD_PERIOD_NS;
				if (e->g_period > GUARD_PERIOD_MAX_NS)
					e->g_period = GUARD_PERIOD_MAX_NS;
				e->g_normal = true;
				e->g_until = now + e->g_period;
				atomic_fetch_add(&starved, 1);
			}
		} else if (now >= e->g_until &&
			   sched_setscheduler(tid, SCHED_IDLE, &sp) == 0) {
			e->g_normal = false;
			e->g_stuck = 0;
			e->g_idle_since = now;
		}
		e->g_exec_ns = exec;
	}
}

static void *guard_thread(void *arg)
{
	struct afs_uring *u = arg;
	uint64_t last_served = 0, busy_until = 0;

	pthread_mutex_lock(&u->lock);
	while (!atomic_load(&u->stop)) {
		uint64_t now = arb_mono_ns(), s = atomic_load(&served);
		uint64_t wait = GUARD_QUIET_NS;
		struct timespec ts;

		if (s != last_served) {
			last_served = s;
			busy_until = now + GUARD_PERIOD_NS;
		}
		if (now < busy_until)
			wait = GUARD_ACTIVE_NS;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += (long)wait;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&u->guard_cond, &u->lock, &ts);
		if (atomic_load(&u->stop))
			break;
		pthread_mutex_unlock(&u->lock);
		guard_look(u, arb_mono_ns());
		pthread_mutex_lock(&u->lock);
	}
	pthread_mutex_unlock(&u->lock);
	return NULL;
}

static int start_threads(struct afs_uring *u)

{
	sigset_t all, old;
	int ret = 0;

	/* signals belong to main.c's signal thread */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	for (unsigned i = 0; i < u->nr_ents && !ret; i++) {
		struct afs_uring_ent *e = &u->ents[i];

		ret = pthread_create(&e->thread, NULL, ent_thread, e);
		e->started = ret == 0;
	}
	if (!ret && u->sched_idle) {
		ret = pthread_create(&u->guard, NULL, guard_thread, u);
		u->guard_started = ret == 0;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return -ret;
}

void afs_uring_init_done(void)
{
	struct afs_uring *u = the_uring;
	int ret;

	if (!u || !atomic_load(&accepted))
		return;
	pthread_mutex_lock(&u->lock);
	if (atomic_load(&u->stop) || u->init_done) {
		pthread_mutex_unlock(&u->lock);
		return;
	}
	u->init_done = true;
	ret = start_threads(u);
	pthread_mutex_unlock(&u->lock);
	if (ret)
		afs_log(LOG_WARNING, "io_uring: cannot start the ring threads: "
			"%s", strerror(-ret));
}

static void uring_free(struct afs_uring *u)
{
	for (unsigned i = 0; i < u->nr_ents; i++) {
		struct afs_uring_ent *e = &u->ents[i];

		ring_close(&e->ring);
		if (e->area)
			munmap(e->area, AFS_URING_HEADROOM + e->payload_len);
		free(e->hdr);
		pthread_mutex_destroy(&e->lock);
		pthread_cond_destroy(&e->cond);
	}
	free(u->ents);
	if (u->stop_fd >= 0)
		close(u->stop_fd);
	pthread_mutex_destroy(&u->lock);
	pthread_cond_destroy(&u->guard_cond);
	free(u);
}

/*
 * The kernel makes a queue for every possible CPU (num_possible_cpus(),
 * which may count CPUs that are not present), and uses the rings only
 * when each has an entry.  /sys/devices/system/cpu/possible lists them
 * ("0-3", "0,2-5").
 */
static unsigned possible_cpus(void)
{
	char buf[256];
	unsigned n = 0;
	FILE *f = fopen("/sys/devices/system/cpu/possible", "re");
	char *p, *save = NULL;

	if (!f)
		return (unsigned)get_nprocs_conf();
	if (!fgets(buf, sizeof(buf), f)) {
		fclose(f);
		return (unsigned)get_nprocs_conf();
	}
	fclose(f);
	for (p = strtok_r(buf, ",\n", &save); p; p = strtok_r(NULL, ",\n", &save)) {
		unsigned a, b;

		if (sscanf(p, "%u-%u", &a, &b) == 2 && b >= a)
			n += b - a + 1;
		else if (sscanf(p, "%u", &a) == 1)
			n++;
	}
	return n ? n : (unsigned)get_nprocs_conf();
}

/*
 * Whether the guard can move a SCHED_IDLE thread back to SCHED_OTHER:
 * without CAP_SYS_NICE, only where RLIMIT_NICE allows nice 0 (20).  Where
 * it cannot, a starving thread would stay starved, so the threads keep
 * normal priority.
 */
static bool idle_reversible(void)
{
	struct rlimit rl;

	if (geteuid() == 0)
		return true;
	return getrlimit(RLIMIT_NICE, &rl) == 0 &&
	       (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= 20);
}

int afs_uring_prepare(struct fuse_session *se, size_t max_write,
		      bool sched_idle)
{
	struct afs_uring *u;
	unsigned ncpu = possible_cpus();
	int ret = 0;

	if (ncpu == 0 || ncpu > 4096)
		return -EINVAL;
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->se = se;
	u->fuse_fd = fuse_session_fd(se);
	u->sched_idle = sched_idle && idle_reversible();
	u->stop_fd = eventfd(0, EFD_CLOEXEC);
	pthread_mutex_init(&u->lock, NULL);
	pthread_cond_init(&u->guard_cond, NULL);
	/* the kernel wants room for max_write and for max_pages pages,
	 * which libfuse 3.14 makes max_write / page size + 1 */
	u->payload_len = max_write + 65536;
	u->ents = calloc(ncpu * AFS_URING_PER_CPU, sizeof(*u->ents));
	if (!u->ents) {
		ret = -ENOMEM;
		goto fail;
	}
	u->nr_ents = ncpu * AFS_URING_PER_CPU;
	for (unsigned i = 0; i < u->nr_ents; i++) {
		struct afs_uring_ent *e = &u->ents[i];

		e->u = u;
		e->qid = i / AFS_URING_PER_CPU;
		e->payload_len = u->payload_len;
		e->ring.fd = -1;
		pthread_mutex_init(&e->lock, NULL);
		pthread_cond_init(&e->cond, NULL);
	}
	if (u->stop_fd < 0) {
		ret = -errno;
		goto fail;
	}
	the_uring = u;
	return 0;
fail:
	uring_free(u);
	return ret;
}

void afs_uring_stop(void)
{
	struct afs_uring *u = the_uring;
	uint64_t one = 1;

	if (!u)
		return;
	/* under u->lock: no thread starts after this */
	pthread_mutex_lock(&u->lock);
	atomic_store(&u->stop, true);
	pthread_cond_signal(&u->guard_cond);
	pthread_mutex_unlock(&u->lock);
	if (u->guard_started)
		pthread_join(u->guard, NULL);
	for (unsigned i = 0; i < u->nr_ents; i++) {
		struct afs_uring_ent *e = &u->ents[i];

		pthread_mutex_lock(&e->lock);
		pthread_cond_signal(&e->cond);
		pthread_mutex_unlock(&e->lock);
	}
	if (write(u->stop_fd, &one, sizeof(one)) != sizeof(one))
		afs_log(LOG_WARNING, "io_uring: cannot wake the ring threads: %s",
			strerror(errno));
	for (unsigned i = 0; i < u->nr_ents; i++)
		if (u->ents[i].started)
			pthread_join(u->ents[i].thread, NULL);
	the_uring = NULL;
	uring_free(u);
}

uint64_t afs_uring_starved(void)
{
	return atomic_load_explicit(&starved, memory_order_relaxed);
}

unsigned afs_uring_threads(void)
{
	return atomic_load_explicit(&live_threads, memory_order_relaxed);
}

uint64_t afs_uring_requests(void)
{
	return atomic_load_explicit(&served, memory_order_relaxed);
}

int afs_uring_queue(void)
{
	return cur_ent ? (int)cur_ent->qid : -1;
}
