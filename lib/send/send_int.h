/* SPDX-License-Identifier: MIT */
/*
 * send_int.h - private interface of lib/send/: the tree-comparison engine
 * that find-new, diff (arbor/diff.h) and send build on.
 *
 *   compare.c  the item-level walks (one tree since a generation, two
 *              trees together), per-inode change records, path lookup
 *
 * Both walks read nodes through the cache (arb_node_read validates each
 * one) and hand items to a callback in key order; every payload the
 * callers interpret goes through arb_item_validate first.  Lock held.
 */
#ifndef ARB_SEND_INT_H
#define ARB_SEND_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "core.h"
#include "arbor/diff.h"

/* which side an item of a two-tree walk comes from */
enum arb_cmp_kind {
	ARB_CMP_DELETED = 1, /* only in A (a is set) */
	ARB_CMP_ADDED = 2,   /* only in B (b is set) */
	ARB_CMP_CHANGED = 3, /* in both, with other bytes (a and b set) */
};

/* one item as the walks hand it over (data points into a pinned node) */
struct arb_cmp_item {
	struct arb_key key;
	const uint8_t *data;
	uint32_t size;
};

/* returns non-zero to stop the walk (returned by the walk) */
typedef int (*arb_cmp_fn)(void *ctx, enum arb_cmp_kind kind,
			  const struct arb_cmp_item *a,
			  const struct arb_cmp_item *b);
/* find-new: an item of a leaf written after the generation */
typedef int (*arb_newer_fn)(void *ctx, const struct arb_cmp_item *it);

/*
 * Every item of a and b that differs, in key order from key start on:
 * subtrees at the same place of both trees with the same address are
 * skipped unread (btrfs's btrfs_compare_trees).  st counts nodes visited
 * and subtrees skipped.
 */
int arb_cmp_trees(struct arb_root *a, struct arb_root *b,
		  const struct arb_key *start, arb_cmp_fn fn, void *ctx,
		  struct arb_diff_stats *st);
/*
 * Every item, from key start on, of the leaves of r reached through
 * pointers whose generation is above gen (the others hold nothing
 * written after gen).
 */
int arb_walk_newer(struct arb_root *r, uint64_t gen, const struct arb_key *start,
		   arb_newer_fn fn, void *ctx, struct arb_diff_stats *st);

#endif
