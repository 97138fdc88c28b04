// SPDX-License-Identifier: MIT
/*
 * lookup.c - the kernel's lookup count per FUSE node id.
 *
 * Every reply that hands the kernel a node id (lookup, mknod, mkdir,
 * symlink, link, create, and each non-dot entry of readdirplus) adds one;
 * forget and forget_multi subtract what the kernel says it dropped.  An
 * underflow means a reply was counted wrongly.
 *
 * The callers (ops.c) pin an inode in the library (arb_fs_open_inode)
 * while its count is positive: the kernel may still send requests for an
 * inode whose last link is gone (the writeback cache flushes its times and
 * pages late), and those must not meet a freed inode.  get and put report
 * the transitions from and to zero for that, and never call the library
 * themselves, so that no library lock is ever taken under the table's.
 *
 * A chained hash table under one mutex; it doubles when the load passes 2.
 */
#include <errno.h>
#include <string.h>
#include <syslog.h>

#include "arborfs_fuse.h"

#define AFS_LOOKUP_MIN_BUCKETS 1024

static size_t hash_nodeid(uint64_t id, size_t nbuckets)
{
	/* Fibonacci hashing: inode numbers are mostly sequential */
	return (size_t)((id * 0x9e3779b97f4a7c15ULL) >> 20) & (nbuckets - 1);
}

int afs_lookup_init(struct afs_lookup_table *t)
{
	memset(t, 0, sizeof(*t));
	t->buckets = calloc(AFS_LOOKUP_MIN_BUCKETS, sizeof(*t->buckets));
	if (!t->buckets)
		return -ENOMEM;
	t->nbuckets = AFS_LOOKUP_MIN_BUCKETS;
	pthread_mutex_init(&t->lock, NULL);
	return 0;
}

void afs_lookup_destroy(struct afs_lookup_table *t)
{
	for (size_t i = 0; i < t->nbuckets; i++) {
		struct afs_lookup_entry *e = t->buckets[i];

		while (e) {
			struct afs_lookup_entry *next = e->next;

			free(e);
			e = next;
		}
	}
	free(t->buckets);
	t->buckets = NULL;
	t->nbuckets = t->nentries = 0;
	pthread_mutex_destroy(&t->lock);
}

/* Called with t->lock held; failure to grow only costs speed. */
static void lookup_grow(struct afs_lookup_table *t)
{
	size_t n = t->nbuckets * 2;
	struct afs_lookup_entry **b = calloc(n, sizeof(*b));

	if (!b)
		return;
	for (size_t i = 0; i < t->nbuckets; i++) {
		struct afs_lookup_entry *e = t->buckets[i];

		while (e) {
			struct afs_lookup_entry *next = e->next;
			size_t h = hash_nodeid(e->nodeid, n);

			e->next = b[h];
			b[h] = e;
			e = next;
		}
	}
	free(t->buckets);
	t->buckets = b;
	t->nbuckets = n;
}

static struct afs_lookup_entry **lookup_slot(struct afs_lookup_table *t,
					     uint64_t nodeid)
{
	struct afs_lookup_entry **pp = &t->buckets[hash_nodeid(nodeid,
							     t->nbuckets)];

	while (*pp && (*pp)->nodeid != nodeid)
		pp = &(*pp)->next;
	return pp;
}

int afs_lookup_get(struct afs_lookup_table *t, uint64_t nodeid, uint64_t n)
{
	struct afs_lookup_entry **pp, *e;
	int ret = 1;

	pthread_mutex_lock(&t->lock);
	pp = lookup_slot(t, nodeid);
	if (*pp) {
		ret = 0;
		(*pp)->count += n;
		goto out_unlock;
	}
	e = malloc(sizeof(*e));
	if (!e) {
		ret = -ENOMEM;
		goto out_unlock;
	}
	e->nodeid = nodeid;
	e->count = n;
	e->next = NULL;
	*pp = e;
	if (++t->nentries > 2 * t->nbuckets)
		lookup_grow(t);
out_unlock:
	pthread_mutex_unlock(&t->lock);
	return ret;
}

int afs_lookup_put(struct afs_lookup_table *t, uint64_t nodeid, uint64_t n)
{
	static bool warned;
	struct afs_lookup_entry **pp, *e;
	int ret = 0;

	pthread_mutex_lock(&t->lock);
	pp = lookup_slot(t, nodeid);
	e = *pp;
	if (!e || e->count < n) {
		if (!warned)
			afs_log(LOG_ERR,
				"forget of node %llu x%llu but nlookup is %llu",
				(unsigned long long)nodeid,
				(unsigned long long)n,
				(unsigned long long)(e ? e->count : 0));
		warned = true;
		AFS_ASSERT(!"nlookup underflow");
		if (!e)
			goto out_unlock;
		n = e->count;
	}
	e->count -= n;
	if (e->count == 0) {
		*pp = e->next;
		free(e);
		t->nentries--;
		ret = 1;
	}
out_unlock:
	pthread_mutex_unlock(&t->lock);
	return ret;
}

size_t afs_lookup_drain(struct afs_lookup_table *t, uint64_t **ids)
{
	size_t n = 0;

	pthread_mutex_lock(&t->lock);
	*ids = malloc((t->nentries + 1) * sizeof(**ids));
	for (size_t i = 0; i < t->nbuckets; i++) {
		struct afs_lookup_entry *e = t->buckets[i];

		while (e) {
			struct afs_lookup_entry *next = e->next;

			if (*ids)
				(*ids)[n++] = e->nodeid;
			free(e);
			e = next;
		}
		t->buckets[i] = NULL;
	}
	t->nentries = 0;
	pthread_mutex_unlock(&t->lock);
	return n;
}

uint64_t afs_lookup_count(struct afs_lookup_table *t, uint64_t nodeid)
{
	uint64_t c;

	pthread_mutex_lock(&t->lock);
	c = *lookup_slot(t, nodeid) ? (*lookup_slot(t, nodeid))->count : 0;
	pthread_mutex_unlock(&t->lock);
	return c;
}

size_t afs_lookup_size(struct afs_lookup_table *t)
{
	size_t n;

	pthread_mutex_lock(&t->lock);
	n = t->nentries;
	pthread_mutex_unlock(&t->lock);
	return n;
}
