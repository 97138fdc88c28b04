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
 * An open-addressing table of (node id, count) under one mutex
 * (lib/core/idcount.c): the kernel may know a million inodes and more, and a
 * malloc'd entry per inode cost about 40 bytes each.
 */
#include <errno.h>
#include <string.h>
#include <syslog.h>

#include "arborfs_fuse.h"

int afs_lookup_init(struct afs_lookup_table *t)
{
	memset(t, 0, sizeof(*t));
	arb_idcount_init(&t->counts);
	pthread_mutex_init(&t->lock, NULL);
	return 0;
}

void afs_lookup_destroy(struct afs_lookup_table *t)
{
	arb_idcount_destroy(&t->counts);
	pthread_mutex_destroy(&t->lock);
}

int afs_lookup_get(struct afs_lookup_table *t, uint64_t nodeid, uint64_t n)
{
	int ret;

	pthread_mutex_lock(&t->lock);
	ret = arb_idcount_add(&t->counts, nodeid, n);
	pthread_mutex_unlock(&t->lock);
	/* -EINVAL: node id 0 or n 0, which no reply hands out */
	AFS_ASSERT(ret != -EINVAL);
	return ret == -EINVAL ? -EIO : ret;
}

int afs_lookup_put(struct afs_lookup_table *t, uint64_t nodeid, uint64_t n)
{
	static bool warned;
	uint64_t have;
	int ret = 0;

	pthread_mutex_lock(&t->lock);
	have = arb_idcount_get(&t->counts, nodeid);
	if (have < n) {
		if (!warned)
			afs_log(LOG_ERR,
				"forget of node %llu x%llu but nlookup is %llu",
				(unsigned long long)nodeid,
				(unsigned long long)n,
				(unsigned long long)have);
		warned = true;
		AFS_ASSERT(!"nlookup underflow");
		if (!have)
			goto out_unlock;
		n = have;
	}
	if (arb_idcount_sub(&t->counts, nodeid, n) == 0)
		ret = 1;
out_unlock:
	pthread_mutex_unlock(&t->lock);
	return ret;
}

size_t afs_lookup_drain(struct afs_lookup_table *t, uint64_t **ids)
{
	uint64_t id, count;
	size_t n = 0, pos = 0;

	pthread_mutex_lock(&t->lock);
	*ids = malloc((t->counts.n + 1) * sizeof(**ids));
	while (*ids && arb_idcount_next(&t->counts, &pos, &id, &count))
		(*ids)[n++] = id;
	arb_idcount_clear(&t->counts);
	pthread_mutex_unlock(&t->lock);
	return n;
}

uint64_t afs_lookup_count(struct afs_lookup_table *t, uint64_t nodeid)
{
	uint64_t c;

	pthread_mutex_lock(&t->lock);
	c = arb_idcount_get(&t->counts, nodeid);
	pthread_mutex_unlock(&t->lock);
	return c;
}

size_t afs_lookup_size(struct afs_lookup_table *t)
{
	size_t n;

	pthread_mutex_lock(&t->lock);
	n = t->counts.n;
	pthread_mutex_unlock(&t->lock);
	return n;
}
