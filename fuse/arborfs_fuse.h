/* SPDX-License-Identifier: MIT */
/*
 * arborfs_fuse.h - private header of the FUSE daemon (fuse/).
 *
 * The daemon is a thin adapter: each low-level FUSE operation decodes its
 * arguments, calls the library through <arbor/arbor.h> and replies exactly
 * once.  Its own state is what the FUSE protocol and the kernel's caches
 * need: the per-inode lookup count (lookup.c), failed writebacks to
 * report (wberr.c), files whose cached pages must go (atime.c, dio.c),
 * requests answered from threads of their own (replyq.c, fsyncq.c).
 */
#ifndef ARBORFS_FUSE_H
#define ARBORFS_FUSE_H

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 312
#endif

#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/uio.h>

#include <arbor/arbor.h>
#include <arbor/ioctl.h>

#include "idcount.h" /* lib/core/idcount.c, compiled into the daemon */

#ifdef ARB_DEBUG
#define AFS_ASSERT(c)                                                          \
	do {                                                                   \
		if (!(c)) {                                                    \
			fprintf(stderr, "arborfs: %s:%d: assertion failed: %s\n", \
				__FILE__, __LINE__, #c);                       \
			abort();                                               \
		}                                                              \
	} while (0)
#else
#define AFS_ASSERT(c) ((void)0)
#endif

/*
 * Failed writeback, reported to the writer (wberr.c).  Its own lock,
 * never held across a library call or a reply.
 */
struct afs_wberr_ent;
struct afs_wberr {
	pthread_mutex_t lock;
	/* entries, read without the lock for the fast path */
	_Atomic size_t count;
	struct afs_wberr_ent *v;
	size_t n, cap;
};

void afs_wberr_init(struct afs_wberr *w);
void afs_wberr_destroy(struct afs_wberr *w);
/* a writeback WRITE of ino at off failed with err (positive errno) */
void afs_wberr_failed(struct afs_wberr *w, uint64_t ino, int err,
		      uint64_t off);
/* the error not yet reported for ino (positive), now reported; or 0 */
int afs_wberr_take(struct afs_wberr *w, uint64_t ino);
/* ino is marked: the first error (positive) and the lowest failed offset
 * (*off), or 0 */
int afs_wberr_marked(struct afs_wberr *w, uint64_t ino, uint64_t *off);
/* truncated or forgotten: unmark */
void afs_wberr_clear(struct afs_wberr *w, uint64_t ino);

/*
 * Extension bursts of writeback (wberr.c): per inode, the size it had when
 * writeback began extending it.  Direct-mapped; a lost entry means only
 * that a failure does not cut the file.
 */
#define AFS_WBEXT_BITS 6
struct afs_wbext_ent {
	uint64_t ino; /* 0: empty */
	uint64_t base;
	uint64_t last_ns;
};
struct afs_wbext {
	pthread_mutex_t lock;
	struct afs_wbext_ent v[1u << AFS_WBEXT_BITS];
};

void afs_wbext_init(struct afs_wbext *x);
void afs_wbext_destroy(struct afs_wbext *x);
/* ino is in a burst (now is refreshed): no need to look at its size */
bool afs_wbext_fresh(struct afs_wbext *x, uint64_t ino, uint64_t now);
/* an extending WRITE of ino, whose size was base before it */
void afs_wbext_begin(struct afs_wbext *x, uint64_t ino, uint64_t base,
		     uint64_t now);
/* the size at the start of ino's burst, if it is in one */
bool afs_wbext_base(struct afs_wbext *x, uint64_t ino, uint64_t now,
		    uint64_t *base);
/* fsynced or truncated: the burst is over */
void afs_wbext_end(struct afs_wbext *x, uint64_t ino);

/*
 * Access times of files read from the page cache (atime.c): a changed
 * file's cached pages are dropped a moment later, so that the next read
 * reaches the daemon.
 */
#define AFS_ATIME_MAX 1024
struct afs_atime {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t thread;
	bool running, stop;
	struct {
		uint64_t ino; /* node id */
		uint64_t due_ns;
	} v[AFS_ATIME_MAX];
	size_t n;
	uint64_t dropped; /* invalidations sent */
};

/*
 * Lookup counts (the kernel's nlookup) per FUSE node id.  An entry exists
 * while the count is positive.  The table has its own lock, never held
 * across a fuse_reply_*() call.
 */
struct afs_lookup_table {
	pthread_mutex_t lock;
	/* node id -> nlookup, no allocation per entry */
	struct arb_idcount counts;
};

int afs_lookup_init(struct afs_lookup_table *t);
void afs_lookup_destroy(struct afs_lookup_table *t);
/* nlookup += n; returns 1 if it was 0 before, 0 if not, or -ENOMEM */
int afs_lookup_get(struct afs_lookup_table *t, uint64_t nodeid, uint64_t n);
/* nlookup -= n; returns 1 if it dropped to 0.  An underflow is a protocol
 * bug: abort in debug builds, clamp to zero (and say so once) otherwise */
int afs_lookup_put(struct afs_lookup_table *t, uint64_t nodeid, uint64_t n);
/* Empty the table (at unmount); *ids (malloc'd, may be NULL on ENOMEM)
 * receives the node ids that still had a count; returns how many. */
size_t afs_lookup_drain(struct afs_lookup_table *t, uint64_t **ids);
/* current count (0 when absent), for tests and debugging */
uint64_t afs_lookup_count(struct afs_lookup_table *t, uint64_t nodeid);
size_t afs_lookup_size(struct afs_lookup_table *t);

/*
 * Counters of one kind of FUSE request (ctl.c), updated by every worker
 * thread with relaxed atomics: a request costs two clock reads and three
 * or four atomic adds.
 */
struct afs_op_counter {
	_Atomic uint64_t count, errors, total_ns, max_ns;
};

/* Everything the operations need: the userdata of the FUSE session. */
/* group commit of the one-thread daemon (fsyncq.c) */
struct afs_fsyncq_ent {
	fuse_req_t req;
	uint64_t since; /* when it was queued (CLOCK_MONOTONIC ns) */
};

struct afs_fsyncq {
	pthread_t thread;
	bool running;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;
	/* FSYNC requests waiting for the next commit */
	struct afs_fsyncq_ent *ents;
	size_t nr, cap;
	/* fsyncs of more than one process lately: gather before committing */
	bool concurrent;
	pid_t last_pid;
	uint64_t last_add_ns, last_commit_ns;
};

/* a small dirty limit while fsyncs come (syncmode.c) */
struct afs_syncmode {
	int max_bytes_fd;     /* the backing device's files; -1: off */
	int ratio_fd;
	char high[32];        /* max_ratio_fine as found at mount */
	char low[32];         /* fsync_dirty_limit, bytes */
	pthread_mutex_t lock; /* one switch at a time */
	atomic_bool low_on;
	_Atomic uint64_t last_fsync_ns;
	_Atomic uint64_t nr_lowered;
};

struct afs {
	struct arb_fs *fs;
	/* for notifications to the kernel (set before the session loop) */
	struct fuse_session *se;
	struct afs_lookup_table lookups;
	double entry_timeout;
	double attr_timeout;
	bool readonly;
	bool debug;
	/* ask the kernel to enforce POSIX ACLs (FUSE_CAP_POSIX_ACL) */
	bool posix_acl;
	/* the kernel granted the writeback cache (set in init); the library
	 * was opened with write_keeps_times when the mount is writable */
	bool writeback;
	/* the kernel opens files / directories without asking us (an ENOSYS
	 * from the first OPEN / OPENDIR tells it to; set in init) */
	bool no_open;
	bool no_opendir;
	/* -o open_requests: keep them anyway */
	bool open_requests;
	/* -o readahead (bytes, 0: the kernel's): offered as max_readahead,
	 * since the kernel keeps the smaller of that and read_ahead_kb */
	uint64_t readahead;

	/* ---- statistics for ARB_IOC_GET_STATS (ctl.c) ---- */
	struct afs_op_counter ops[ARB_IOC_OP_NR];
	_Atomic uint64_t user_bytes_read;
	/* the library's counters at mount or at the last reset, subtracted
	 * from what it reports; under stats_lock */
	pthread_mutex_t stats_lock;
	struct arb_fs_stats stats_base;
	uint64_t stats_start_ns;

	/* ---- the background scrub (ctl.c), under scrub_lock ---- */
	pthread_mutex_t scrub_lock;
	pthread_t scrub_thread;
	bool scrub_joinable;  /* a thread was started and not joined */
	uint32_t scrub_state; /* ARB_IOC_SCRUB_* */
	int scrub_error;
	bool scrub_cancel;    /* atomic accesses */
	uint64_t scrub_start_ns, scrub_end_ns;
	struct arb_scrub_stats scrub_stats; /* written by the library */
	uint64_t scrub_problems;
	char scrub_lines[ARB_IOC_SCRUB_LINES][ARB_IOC_SCRUB_LINE_LEN];

	/* ---- the background online check (ctl.c), under check_lock ---- */
	pthread_mutex_t check_lock;
	pthread_t check_thread;
	bool check_joinable;  /* a thread was started and not joined */
	uint32_t check_state; /* ARB_IOC_CHECK_* */
	int check_error;      /* positive errno */
	bool check_cancel;    /* atomic accesses */
	uint64_t check_start_ns, check_end_ns;
	/* progress, written by the library (atomic accesses) */
	struct arb_online_check check_oc;
	uint64_t check_nodes, check_items, check_sectors, check_problems;
	char check_lines[ARB_IOC_CHECK_LINES][ARB_IOC_CHECK_LINE_LEN];

	/* group commit; running only when one thread serves requests */
	struct afs_fsyncq fsyncq;

	struct afs_syncmode syncmode;

	/* inodes whose writeback failed (wberr.c) */
	struct afs_wberr wberr;
	struct afs_wbext wbext;

	/* where the session is mounted (absolute; lseek.c opens inodes
	 * through it), set once mounted */
	const char *mountpoint;

	struct afs_atime atime;

	/* FS_IOC_SHUTDOWN was served: requests fail with EIO (shutdown.c) */
	_Atomic bool shutdown;

	/* -o user_subvol_rm_allowed: the owner of a subvolume's root may
	 * delete it (subvol.c) */
	bool user_subvol_rm_allowed;
};

/*
 * ---- the mount's root ----
 * FUSE_ROOT_ID (1) is the root directory of the subvolume the mount
 * shows: the filesystem tree's (ARB_ROOT_INO) by default, the one -o
 * subvol= or subvolid= names otherwise.  Every other node id is the
 * library's inode number (never 1: arb_inum).  Set once, before the
 * session starts (afs_subvol_mount_root), read-only afterwards.
 */
extern uint64_t afs_root_ino;
/* the library's inode number of a FUSE node id */
static inline uint64_t afs_node_ino(uint64_t nodeid)
{
	return nodeid == FUSE_ROOT_ID ? afs_root_ino : nodeid;
}
/* the FUSE node id of a library inode number */
static inline uint64_t afs_ino_node(uint64_t ino)
{
	AFS_ASSERT(ino != FUSE_ROOT_ID);
	return ino == afs_root_ino ? FUSE_ROOT_ID : ino;
}

/* ---- reflink.c: ARB_IOC_DEDUPE_RANGE: answered (true) or not one ---- */
bool afs_reflink_ioctl(fuse_req_t req, fuse_ino_t nodeid, unsigned int cmd,
		       const void *in_buf, size_t in_bufsz, size_t out_bufsz);

/*
 * ---- subvol.c: subvolumes and snapshots ----
 * afs_subvol_mount_root: before the session, with the filesystem open:
 * make the subvolume path (relative to the filesystem tree's root) or id
 * the mount's root (NULL / 0: the filesystem tree) and learn which
 * subvolumes are read-only; 0, or an exit status after a message on
 * stderr.
 */
int afs_subvol_mount_root(struct afs *afs, const char *path, uint64_t id,
			  bool have_id);
/* the ARB_IOC_SUBVOL_* ioctls: answered (true) or not one (false) */
/* sendrecv.c: ARB_IOC_SEND, _RECEIVE, _DIGEST (answered: true) */
bool afs_send_ioctl(fuse_req_t req, fuse_ino_t nodeid, unsigned int cmd,
		    const void *in_buf, size_t in_bufsz, size_t out_bufsz);
bool afs_subvol_ioctl(fuse_req_t req, fuse_ino_t nodeid, unsigned int cmd,
		      const void *in_buf, size_t in_bufsz, size_t out_bufsz);
/* diff.c: ARB_IOC_FIND_NEW and ARB_IOC_DIFF, answered (true) or not one
 * (false) */
bool afs_diff_ioctl(fuse_req_t req, fuse_ino_t nodeid, unsigned int cmd,
		    const void *in_buf, size_t in_bufsz, size_t out_bufsz);
/* did the image have subvolumes besides the filesystem tree at mount? */
bool afs_subvol_any(void);
/* after the session loop: answers what is queued, stops the threads */
void afs_subvol_stop(void);

/* ---- atime.c: init before the session, start once mounted (not with
 * -o noatime or ro), stop before the session is unmounted ---- */
void afs_atime_init(struct afs *afs);
void afs_atime_start(struct afs *afs);
void afs_atime_stop(struct afs *afs);
void afs_atime_destroy(struct afs *afs);
/* nodeid's data or mtime changed */
void afs_atime_changed(struct afs *afs, uint64_t nodeid);

/* ---- fsyncq.c: group commit for the one-thread daemon ---- */
int afs_fsyncq_start(struct afs *afs);
/* answers what is queued, then stops the thread */
void afs_fsyncq_stop(struct afs *afs);
int afs_fsyncq_add(struct afs *afs, fuse_req_t req, pid_t pid);

/* ---- syncmode.c: a small dirty limit while fsyncs come ---- */
/* init before anything, start once mounted (dev: the mount's
 * MAJ:MIN, low: the limit in bytes, 0: off); the hooks run at each FSYNC
 * and each WRITE */
void afs_syncmode_init(struct afs *afs);
void afs_syncmode_start(struct afs *afs, const char *dev, uint64_t low);
void afs_syncmode_fsync(struct afs *afs);
void afs_syncmode_write(struct afs *afs);
void afs_syncmode_destroy(struct afs *afs);

/* ---- ctl.c: the control ioctls (arbor/ioctl.h) and request counters ---- */
/* Start counting from now (at mount). */
void afs_stats_init(struct afs *afs);
/* Around each handler: afs_op_start() returns the start time and makes op
 * the current request kind of this thread (for afs_op_error()). */
uint64_t afs_op_start(enum arb_ioc_op op);
void afs_op_done(struct afs *afs, enum arb_ioc_op op, uint64_t start_ns);
/* The current request of this thread is answered with an error. */
void afs_op_error(struct afs *afs);
/* A request of kind op answered later, elsewhere (FSYNC, fsyncq.c): its
 * time from the handler to the reply, and whether that was an error. */
void afs_op_add_time(struct afs *afs, enum arb_ioc_op op, uint64_t ns,
		     bool error);
/* Cancel and wait for a running scrub (at unmount). */
void afs_scrub_stop(struct afs *afs);
/* Cancel and wait for a running online check (at unmount). */
void afs_check_stop(struct afs *afs);
void afs_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
	       struct fuse_file_info *fi, unsigned flags, const void *in_buf,
	       size_t in_bufsz, size_t out_bufsz);

/* Does the caller's thread pid, in our user namespace, have capability
 * cap (a CAP_* number) in its effective set?  (ctl.c) */
bool afs_pid_has_cap(pid_t pid, int cap);

/*
 * ---- iflags.c: file attributes (chattr/lsattr) ----
 * The kernel does not know them (FUSE cannot set S_IMMUTABLE/S_APPEND), so
 * the daemon refuses what they forbid: write-opens when it sees OPEN
 * requests, and write(2) itself through the GETATTR the writeback cache
 * sends with each write of a file whose attributes are stale.
 */
/* FS_IOC_GETFLAGS/SETFLAGS/FSGETXATTR/FSSETXATTR: answered (true) or not
 * one of them (false) */
bool afs_iflags_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd,
		      const void *in_buf, size_t in_bufsz, size_t out_bufsz);
/* a GETATTR with the file (FUSE_GETATTR_FH): 0 or -EPERM for the write(2)
 * it serves */
int afs_iflags_getattr_fh(struct afs *afs, fuse_req_t req, uint64_t nodeid);
/* the attribute timeout to give with st */
double afs_iflags_attr_timeout(const struct afs *afs, const struct arb_stat *st);

/*
 * A message of the daemon (main.c): "arborfs: MESSAGE" on stderr in the
 * foreground, syslog(3) (facility daemon) once detached, where the
 * library's messages go too.  prio: LOG_ERR, LOG_WARNING, ...
 */
void afs_log(int prio, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* ---- replyq.c: requests answered by a thread of their own ---- */
struct afs_replyq_ent {
	struct afs_replyq_ent *next;
	/* the ring queue whose thread waits for the answer, or -1 */
	int ring;
};
struct afs_replyq {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t thread;
	bool started, stop;
	struct afs_replyq_ent *head, *tail;
	struct afs *afs;
	/* does the work, answers, frees e (embedded in the user's entry) */
	void (*serve)(struct afs *afs, struct afs_replyq_ent *e);
};
#define AFS_REPLYQ_INIT(fn)                                                    \
	{ .lock = PTHREAD_MUTEX_INITIALIZER,                                   \
	  .cond = PTHREAD_COND_INITIALIZER,                                    \
	  .serve = (fn) }
/* queue e (the thread starts on first use), which answers the request
 * being served or not; 0, or -errno and e is the caller's again: -EBUSY
 * when it answers a ring thread's request and another ring thread
 * already waits here (replyq.c) */
int afs_replyq_add(struct afs_replyq *q, struct afs *afs,
		   struct afs_replyq_ent *e, bool answers);
/* serve() is about to answer e's request (called just before the reply,
 * after which the ring thread may at once bring the next request) */
void afs_replyq_answered(struct afs_replyq_ent *e);
/* after the session loop: answers what is queued, stops the thread */
void afs_replyq_stop(struct afs_replyq *q);

/* ---- shutdown.c: FS_IOC_SHUTDOWN ---- */
#ifndef FS_IOC_SHUTDOWN
/* XFS_IOC_GOINGDOWN, EXT4_IOC_SHUTDOWN: the same number */
#define FS_IOC_SHUTDOWN _IOR('X', 125, __u32)
#endif
/* answer FS_IOC_SHUTDOWN (the caller is privileged; arg as received) */
void afs_shutdown_ioctl(fuse_req_t req, void *arg, const void *in_buf,
			size_t in_bufsz);
/* after a shutdown: answer req with EIO (true) unless op goes on */
bool afs_shutdown_refuses(struct afs *afs, fuse_req_t req, enum arb_ioc_op op);
/* the same for a GETATTR of ino (the root still answers) */
bool afs_shutdown_getattr_refuses(struct afs *afs, fuse_req_t req,
				  fuse_ino_t ino);
/* after the session loop: answers what is queued, stops the thread */
void afs_shutdown_stop(void);

/* ---- lseek.c: SEEK_DATA / SEEK_HOLE after the kernel's writeback ---- */
/* answer the LSEEK req (now, or from lseek.c's thread) */
void afs_lseek_req(fuse_req_t req, fuse_ino_t nodeid, off_t off, int whence);
/* after the session loop: answers what is queued, stops the thread */
void afs_lseek_stop(void);

/* ---- dio.c: no stale cached pages after a direct write ---- */
/* a READ of nodeid was answered (its pages may now be cached) */
void afs_dio_note_read(fuse_ino_t nodeid);
/* a direct (not writeback) WRITE of [off, off + n) of nodeid was done:
 * true if req is answered later, by dio.c, after the kernel dropped its
 * cached pages of the range; false to answer now */
bool afs_dio_defer(fuse_req_t req, fuse_ino_t nodeid, off_t off, size_t n);
/* after the session loop: answers what is queued, stops the thread */
void afs_dio_stop(void);

/* The operation table (ops.c). */
extern const struct fuse_lowlevel_ops afs_ops;

/*
 * FUSE_HANDLE_KILLPRIV_V2 through the session's own read and writev
 * (killpriv.c): afs_killpriv_attach after fuse_session_mount; an operation
 * calls afs_kill_suidgid_asked to learn whether the kernel asked, with the
 * request it is serving, for the set-id bits to be cleared.
 */
int afs_killpriv_attach(struct fuse_session *se);
bool afs_kill_suidgid_asked(void);
/* note what the request in buf[0, n) asks for, as the read hook does: for
 * requests that did not come through /dev/fuse (uring.c) */
void afs_killpriv_note(const void *buf, size_t n);

/* the largest WRITE the daemon takes (afs_init), and so the largest
 * payload of a request */
#define AFS_MAX_WRITE (1024 * 1024)

/*
 * Request threads of the pool unless -o max_threads=N says otherwise
 * (libfuse's default is 10).  The kernel keeps up to max_background (12)
 * background requests in flight: the writeback cache's WRITEs, read-ahead
 * READs.  Behind a streaming writer they all wait (for the bulk lock, one
 * large write at a time), and with 10 threads every thread was such a
 * WRITE: a lookup of another process waited for one to end (stat p99 4.0
 * ms while a 512 MiB file was written; 0.8 ms with 32 threads).  More
 * threads than background requests leave some for foreground requests;
 * libfuse starts them only when none is idle.
 */
#define AFS_MAX_THREADS 24

/*
 * FUSE over io_uring (uring.c).  afs_uring_prepare before the session
 * loop (nothing runs yet); the INIT reply accepts the kernel's offer
 * (afs_uring_accept, with the flags2 bit to set from afs_uring_flag) and,
 * once written, starts the ring threads (afs_uring_init_done);
 * afs_uring_reply takes a reply that belongs to a request that came
 * through a ring (1) or leaves it to /dev/fuse (0); afs_uring_stop after
 * the loop.
 */
int afs_uring_prepare(struct fuse_session *se, size_t max_write,
		      bool sched_idle);
bool afs_uring_accept(uint64_t offered_flags);
uint64_t afs_uring_flag(void);
void afs_uring_init_done(void);
int afs_uring_reply(const struct iovec *iov, int count);
void afs_uring_stop(void);
/* requests served through the rings since mount, and ring threads
 * serving now (statistics) */
uint64_t afs_uring_requests(void);
unsigned afs_uring_threads(void);
/* times a SCHED_IDLE ring thread was found starving and moved to normal
 * priority for a while */
uint64_t afs_uring_starved(void);
/* the ring queue (CPU) of the request this thread serves, or -1 if it
 * did not come through a ring; a ring thread waits for its request's
 * reply, even one made by another thread */
int afs_uring_queue(void);
/* Drop the library pins of every inode the kernel still knows (unmount). */
void afs_release_all(struct afs *afs);

#endif
