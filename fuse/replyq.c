// SPDX-License-Identifier: MIT
/*
 * replyq.c - requests answered by a thread of their own.
 *
 * Some answers need the kernel to do something first that it does only
 * with the help of other requests: write dirty pages back (WRITEs), or
 * drop pages that readers hold locked while their READs are under way.
 * A serving thread must never wait for that: with one thread (-s), or a
 * pool or a ring queue whose threads all wait, nobody would serve the
 * requests waited for.  So such a request is queued here; the handler
 * returns, and the queue's thread (started on first use) does the work
 * and answers.  Each user has a queue of its own, so that a long
 * writeback for one does not hold up the other.
 *
 * FUSE over io_uring (uring.c) cannot free the serving thread: a ring
 * entry is answered through that entry, so its thread waits for the
 * answer made here, and the kernel queues each request to the ring of
 * the CPU it was made on, two threads per CPU.  Were both threads of a
 * CPU waiting here, a READ or WRITE queued to that CPU that the work
 * waits for would never be served.  So at most one thread of a ring
 * queue waits here at a time; the caller of a request refused with
 * -EBUSY answers it another way (lseek.c, dio.c).
 */
#include <errno.h>
#include <string.h>

#include "arborfs_fuse.h"

/* per ring queue (hashed: a collision only refuses more), requests
 * queued or in work whose ring thread waits: at most one */
#define RING_SLOTS 256
static _Atomic unsigned ring_waiting[RING_SLOTS];

void afs_replyq_answered(struct afs_replyq_ent *e)
{
	if (e->ring >= 0)
		atomic_fetch_sub(&ring_waiting[e->ring % RING_SLOTS], 1);
	e->ring = -1;
}

static void *replyq_thread(void *arg)
{
	struct afs_replyq *q = arg;
	struct afs_replyq_ent *e;

	pthread_mutex_lock(&q->lock);
	for (;;) {
		while (!q->head && !q->stop)
			pthread_cond_wait(&q->cond, &q->lock);
		e = q->head;
		if (!e)
			break;
		q->head = e->next;
		if (!q->head)
			q->tail = NULL;
		pthread_mutex_unlock(&q->lock);
		/* answers (then afs_replyq_answered), frees e */
		q->serve(q->afs, e);
		pthread_mutex_lock(&q->lock);
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

int afs_replyq_add(struct afs_replyq *q, struct afs *afs,
		   struct afs_replyq_ent *e, bool answers)
{
	int ret = 0;

	e->next = NULL;
	e->ring = answers ? afs_uring_queue() : -1;
	if (e->ring >= 0 &&
	    atomic_fetch_add(&ring_waiting[e->ring % RING_SLOTS], 1) >= 1) {
		atomic_fetch_sub(&ring_waiting[e->ring % RING_SLOTS], 1);
		e->ring = -1;
		return -EBUSY;
	}
	pthread_mutex_lock(&q->lock);
	if (q->stop) {
		ret = -ESHUTDOWN;
	} else if (!q->started) {
		q->afs = afs;
		ret = -pthread_create(&q->thread, NULL, replyq_thread, q);
		q->started = ret == 0;
	}
	if (!ret) {
		if (q->tail)
			q->tail->next = e;
		else
			q->head = e;
		q->tail = e;
		pthread_cond_signal(&q->cond);
	}
	pthread_mutex_unlock(&q->lock);
	if (ret)
		afs_replyq_answered(e);
	return ret;
}

void afs_replyq_stop(struct afs_replyq *q)
{
	pthread_mutex_lock(&q->lock);
	q->stop = true;
	pthread_cond_signal(&q->cond);
	pthread_mutex_unlock(&q->lock);
	if (q->started)
		pthread_join(q->thread, NULL); /* answers what is queued */
	q->started = false;
}
