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
	/*
	 * The data extents of `data` inflated: a compressed extent counts
	 * the bytes its zlib stream inflates to (the ram bytes of its file
	 * extent items), any other its length.  Each disk extent counts
	 * once however many files, clones or snapshots share it, so
	 * data_logical / data is about compression, never about sharing.
	 * Without compressed extents data_logical == data.  compressed and
	 * compressed_logical: the part of data and data_logical in
	 * compressed extents (compressed_extents of them).
	 */
	uint64_t data_logical;
	uint64_t compressed, compressed_logical, compressed_extents;
};

/*
 * Walk the extent tree and fill u.  Costs a read of every extent-tree
 * leaf and, once the volume has had a compressed extent
 * (ARB_INCOMPAT_COMPRESS), a lookup in a file tree (as of the last commit)
 * per data extent shorter than ARB_COMPRESS_MAX_RAM, to learn whether it
 * is compressed and what it inflates to; the caller holds vol->lock.  0 or a negative errno (a read error
 * or a damaged leaf).
 */
int arb_space_usage(struct arb_vol *vol, struct arb_space_usage *u);

#endif
