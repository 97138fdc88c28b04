// SPDX-License-Identifier: MIT
/*
 * fsyncq.c - group commit for the one-thread daemon.
 *
 * With one thread serving requests (main.c), an FSYNC that committed in
 * place would keep every other process's requests waiting for its commit,
 * and no two fsyncs could ever share one.  So the request thread only asks
 * the library whether the inode has anything uncommitted
 * (arb_fs_fsync_begin, which marks it to be written) and queues the
 * request; this thread commits once for everything queued
 * (arb_fs_fsync_end) and answers them all.  While it commits, the request
 * thread goes on, and the fsyncs that arrive meanwhile form the next group.
 *
 * When fsyncs come from more than one process, the thread first waits
 * about one commit's time (at most 2 ms) so that their writes and fsyncs
 * join the group; a lone process fsyncing in a loop never waits.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "arborfs_fuse.h"

/* longest wait for more fsyncs to join a group */
#define FSYNCQ_GATHER_MAX_NS 2000000ull

/* Under q->lock: take every queued request. */
static size_t take_all(struct afs_fsyncq *q, struct afs_fsyncq_ent **out)
{
	size_t n = q->nr;

	*out = q->ents;
	q->ents = NULL;
	q->nr = q->cap = 0;
	return n;
}

static void *fsyncq_thread(void *arg)
{
	struct afs *afs = arg;
	struct afs_fsyncq *q = &afs->fsyncq;
	struct afs_fsyncq_ent *ents;
	size_t n;
	int ret;

	pthread_mutex_lock(&q->lock);
	for (;;) {
		while (!q->nr && !q->stop)
			pthread_cond_wait(&q->cond, &q->lock);
		if (!q->nr && q->stop)
			break;
		if (q->concurrent) {
			/* without the queue lock: requests go on */
			struct timespec ts = { 0, (long)q->last_commit_ns };

			if (q->last_commit_ns > FSYNCQ_GATHER_MAX_NS)
				ts.tv_nsec = (long)FSYNCQ_GATHER_MAX_NS;
			pthread_mutex_unlock(&q->lock);
			nanosleep(&ts, NULL);
			pthread_mutex_lock(&q->lock);
		}
		n = take_all(q, &ents);
		pthread_mutex_unlock(&q->lock);

		uint64_t t0 = arb_mono_ns();
		ret = arb_fs_fsync_end(afs->fs, (unsigned)n);
		uint64_t t1 = arb_mono_ns();
		for (size_t i = 0; i < n; i++) {
			fuse_reply_err(ents[i].req, ret < 0 ? -ret : 0);
			afs_op_add_time(afs, ARB_IOC_OP_FSYNC,
					t1 - ents[i].since, ret < 0);
		}
		free(ents);

		pthread_mutex_lock(&q->lock);
		q->last_commit_ns = t1 - t0;
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

int afs_fsyncq_start(struct afs *afs)
{
	struct afs_fsyncq *q = &afs->fsyncq;
	int ret;

	memset(q, 0, sizeof(*q));
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->cond, NULL);
	ret = pthread_create(&q->thread, NULL, fsyncq_thread, afs);
	if (ret) {
		pthread_cond_destroy(&q->cond);
		pthread_mutex_destroy(&q->lock);
		return -ret;
	}
	q->running = true;
	return 0;
}

void afs_fsyncq_stop(struct afs *afs)
{
	struct afs_fsyncq *q = &afs->fsyncq;

	if (!q->running)
		return;
	pthread_mutex_lock(&q->lock);
	q->stop = true;
	pthread_cond_signal(&q->cond);
	pthread_mutex_unlock(&q->lock);
	pthread_join(q->thread, NULL); /* answers what is queued first */
	pthread_cond_destroy(&q->cond);
	pthread_mutex_destroy(&q->lock);
	q->running = false;
}

/*
 * Queue req (an FSYNC whose begin returned 1).  pid tells whether fsyncs
 * come from more than one process: another process's fsync within the
 * last few commit times makes the next group wait for others to join.
 * Returns 0, or a negative errno when req could not be queued (the caller
 * then commits in place).
 */
int afs_fsyncq_add(struct afs *afs, fuse_req_t req, pid_t pid)
{
	struct afs_fsyncq *q = &afs->fsyncq;
	uint64_t now = arb_mono_ns(), window;

	pthread_mutex_lock(&q->lock);
	if (q->nr == q->cap) {
		size_t cap = q->cap ? q->cap * 2 : 16;
		struct afs_fsyncq_ent *e = realloc(q->ents, cap * sizeof(*e));

		if (!e) {
			pthread_mutex_unlock(&q->lock);
			return -ENOMEM;
		}
		q->ents = e;
		q->cap = cap;
	}
	window = 4 * (q->last_commit_ns ? q->last_commit_ns : 1000000);
	q->concurrent = pid != q->last_pid && now - q->last_add_ns < window;
	q->last_pid = pid;
	q->last_add_ns = now;
	q->ents[q->nr].req = req;
	q->ents[q->nr++].since = now;
	pthread_cond_signal(&q->cond);
	pthread_mutex_unlock(&q->lock);
	return 0;
}
