/* SPDX-License-Identifier: MIT */
/*
 * idcount.h - a compact map from a nonzero 64-bit id to a nonzero count.
 *
 * Both the daemon (the kernel's lookup count per node id, fuse/lookup.c)
 * and the library (the pin count per inode, lib/fs/fs.c) keep one entry
 * for every inode the kernel has seen: a million and more after a large
 * tree is created or walked.  A chained hash table costs a malloc'd node
 * per entry (32 to 112 bytes with the allocator's overhead) plus a bucket
 * pointer; this one is open addressing with linear probing, kept between
 * 3/8 and 3/4 full, with no allocation per entry and one cache line per
 * lookup.  Ids and counts that fit in 32 bits (all of them, in practice:
 * inode numbers are handed out from 257 up) take 8-byte slots, 11 to 21
 * bytes per entry; others 16-byte ones in a second table.
 *
 * Id 0 marks an empty slot: FUSE never uses node id 0 and the library no
 * inode number 0.  Deletion shifts the following run back (no tombstones),
 * so lookups never degrade however many entries come and go.  No locking:
 * the caller's lock covers the table.
 *
 * The daemon compiles idcount.c into itself (it uses no other library
 * internals), so this header must stay self-contained.
 */
#ifndef ARB_IDCOUNT_H
#define ARB_IDCOUNT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* one of the two tables: slots of (u32 id, u32 count) or (u64, u64) */
struct arb_idcount_tab {
	void *slots;
	/* a power of two, or 0 while empty */
	size_t cap;
	/* used slots */
	size_t n;
	bool wide;
};

struct arb_idcount {
	/* ids and counts below 2^32 */
	struct arb_idcount_tab narrow;
	/* the rest; an entry whose count outgrows 32 bits moves here */
	struct arb_idcount_tab wide;
	/* entries in both */
	size_t n;
};

void arb_idcount_init(struct arb_idcount *t);
void arb_idcount_destroy(struct arb_idcount *t);
/* the count of id, 0 when absent */
uint64_t arb_idcount_get(const struct arb_idcount *t, uint64_t id);
/*
 * count(id) += n (n > 0, id != 0).  Returns 1 if id was absent, 0 if it
 * was present, -ENOMEM (table unchanged) if the table had to grow and
 * could not, -EINVAL for id 0 or n 0.
 */
int arb_idcount_add(struct arb_idcount *t, uint64_t id, uint64_t n);
/*
 * count(id) -= n, clamped at 0; the entry goes at 0.  Returns the count
 * left.  The caller checks for an underflow first (arb_idcount_get) if it
 * cares.
 */
uint64_t arb_idcount_sub(struct arb_idcount *t, uint64_t id, uint64_t n);
/* Drop every entry and free the slots. */
void arb_idcount_clear(struct arb_idcount *t);
/*
 * Iterate: start with *pos = 0; returns false at the end.  The table must
 * not change during the walk.
 */
bool arb_idcount_next(const struct arb_idcount *t, size_t *pos,
		      uint64_t *id, uint64_t *count);
/* bytes the tables hold, for statistics and tests */
size_t arb_idcount_bytes(const struct arb_idcount *t);

#endif
