/* SPDX-License-Identifier: MIT */
/*
 * usage.h - where the space of a volume goes, by kind (usage.c).
 *
 * Shared by the filesystem layer (the online `arbor filesystem usage`,
 * through arb_fs_usage) and the offline `arbor usage --image`.
 */
#ifndef ARB_USAGE_H
#define ARB_USAGE_H

#include <stdint.h>

struct arb_vol;

struct arb_space_usage {
	/* size of the volume */
	uint64_t total;
	/* the reserved start (ARB_DATA_START: superblocks), never allocated */
	uint64_t system;
	/* EXTENT_ITEMs of file data, as of the last commit (the extent tree
	 * changes only at commit, when the delayed references are applied) */
	uint64_t data;
	/* EXTENT_ITEMs of tree nodes, as of the last commit */
	uint64_t metadata;
	/* allocated since the last commit (not yet in the extent tree) */
	uint64_t uncommitted;
	/* freed by a commit whose durability is still pending (0 between
	 * commits); neither used nor allocatable */
	uint64_t pinned;
	/* allocatable now */
	uint64_t free;
	/* part of free the history grace keeps for recovering recent
	 * generations; the allocator takes it when nothing else is free */
	uint64_t history;
};

/*
 * Walk the extent tree and fill u.  Costs a read of every extent-tree
 * leaf; the caller holds vol->lock.  0 or a negative errno (a read error
 * or a damaged leaf).
 */
int arb_space_usage(struct arb_vol *vol, struct arb_space_usage *u);

#endif
