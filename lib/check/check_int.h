/* SPDX-License-Identifier: MIT */
/*
 * check_int.h - the checker's one walker and its reference tables, shared
 * by its passes (lib/check/): walk.c walks every tree once per part and
 * checks each node, extents.c compares the extent tree with what the walk
 * counted (and rewrites it on repair), csums.c reads the data against its
 * checksums and checks the checksum items.  Entry points: arb_check_vol
 * (core.h, text), fs_check_extents (fs_int.h, repair) and
 * check_walk_records (below, fsck's records).
 */
#ifndef ARB_CHECK_INT_H
#define ARB_CHECK_INT_H

#include <stdio.h>

#include "fs_int.h"

/* ---- reference tables (reftab.c) ---- */

/*
 * One entry per tree node (key: bytenr), per data extent (key: bytenr)
 * and per data back-reference (key: bytenr, root, inode, offset); 72
 * bytes, see ARB_CHECK_ENTRY_BYTES.
 */
struct ck_ent {
	uint64_t k[4]; /* k[0] == 0: empty slot */
	/* pointers to the node / file extent items using the extent */
	uint64_t count;
	/* nodes: header owner; data: the first inode using it */
	uint64_t owner;
	/* data: length the file extent items say */
	uint64_t num_bytes;
	/* nodes: second copy named by the first pointer */
	uint64_t mirror;
	int level;
	bool visited, matched;
	bool reg; /* data: a REG file extent uses it (has checksums) */
};

/* open addressing, at most half full */
struct ck_tab {
	struct ck_ent *e;
	size_t size, used;
};

/* the entry of k; created when create (NULL when out of memory), else
 * NULL when absent */
struct ck_ent *ck_tab_get(struct ck_tab *t, const uint64_t k[4], bool create);
void ck_tab_clear(struct ck_tab *t);
void ck_tab_free(struct ck_tab *t);

/* ---- the walk and its passes ---- */

/* a data extent whose items repair rewrites; a back-reference it wants */
struct ck_rref {
	uint64_t root, ino, off;
	uint32_t count;
};

struct ck_fix {
	uint64_t addr, len, refs;
	/* data: the back-references the trees expect */
	struct ck_rref *want;
	size_t nwant;
	bool leak;
	/* a tree node: owner and level of its header */
	bool tree;
	uint64_t owner;
	int level;
};

/* a checksum item that repair cuts to its first nkeep sums (0: deletes) */
struct ck_cfix {
	uint64_t start;
	uint32_t nkeep;
};

/* an allocated range (extent, or second copy of a node: CK_RANGE_COPY) */
struct ck_range {
	uint64_t start, len;
};
#define CK_RANGE_COPY (1ULL << 63)

struct ck {
	struct arb_vol *vol;
	/* the filesystem (NULL: the core's check only, no checksums) */
	struct arb_fs *fs;
	/* records (fs only; NULL: text lines, counted in rep) */
	struct arb_check_result *r;
	struct arb_check_report *rep;
	FILE *out;
	struct arb_problem dummy;
	/* what to do beyond the trees and the extent tree */
	bool csums;
	struct arb_txn *fix;
	/* the tables of the part */
	struct ck_tab nodes, data, drefs;
	/* expected back-references sorted by (bytenr, root, ino, offset) */
	struct ck_ent **exp;
	size_t nexp;
	/* every extent and second copy in the part, for the overlap check */
	struct ck_range *ranges;
	size_t nr_ranges, cap_ranges;
	/* data extents (addr, len) of the part for the checksum pass */
	uint64_t (*dext)[2];
	size_t ndext, capdext;
	/* repair: extent items and checksum items to rewrite */
	struct ck_fix *fixes;
	size_t nfix, capfix;
	struct ck_cfix *cfix;
	size_t ncfix, capcfix;
	/* raw copies of a node */
	uint8_t *buf[2];
	bool oom;
	/* the part being checked: addresses in [lo, hi) */
	uint64_t lo, hi;
	struct arb_check_seen seen;
	/* across parts: end of the allocated ranges so far, sectors the
	 * extent tree covers, extent tree read error said; problems */
	uint64_t prev_end, used_sectors;
	bool extent_err;
	bool incomplete;
	uint64_t errors;
	/* progress */
	arb_check_progress_fn progress;
	void *progress_arg;
	char phase[64];
	uint64_t done, total;
};

static inline bool ck_mine(const struct ck *c, uint64_t addr)
{
	return addr >= c->lo && addr < c->hi;
}

/*
 * Raise problem id (about inode ino, disk address addr): a record with
 * fsck, a "check: " line on rep->out for the core's check.  Returns the
 * record for the caller to add what repair needs (a scratch one without
 * records).
 */
__attribute__((format(printf, 5, 6))) struct arb_problem *
ck_problem(struct ck *c, enum arb_problem_id id, uint64_t ino, uint64_t addr,
	   const char *fmt, ...);
void ck_progress(struct ck *c, bool force);
/* the picture is incomplete: repair must not act on it */
void ck_incomplete(struct ck *c);

/* walk.c: every tree from the superblock, each node once, in the part */
void ck_walk_trees(struct ck *c);
/* extents.c: the part's extent items against the tables; after the
 * parts, the space map; repair applies what they collected */
int ck_scan_extents(struct ck *c);
void ck_check_space_map(struct ck *c);
int ck_apply_fixes(struct ck *c, FILE *fix_out, uint64_t *fixed);
void ck_extents_free(struct ck *c);
/* csums.c: data sectors of the part against their checksums; after the
 * parts, the checksum items against the data extents */
void ck_check_data_csums(struct ck *c);
int ck_check_csum_items(struct ck *c);
int ck_apply_cfix(struct ck *c, struct arb_txn *t, const struct ck_cfix *f);

/*
 * The trees, the extent tree and (csums) the data of fs as records in r,
 * printed to out: what arb_fs_check_records adds to the fs tree pass.
 * 0, or <0 on failure (out of memory).
 */
int check_walk_records(struct arb_fs *fs, struct arb_check_result *r,
		       FILE *out);

/* ---- fs_check.c ---- */
/* res (may be NULL) receives a record per problem */
int fs_check_tree(struct arb_fs *fs, FILE *out, uint64_t *errors,
		  struct arb_check_result *res);

/* ---- fs_problem.c ---- */
/* Append a zeroed record of id for ino (NULL when out of memory). */
struct arb_problem *fs_problem_add(struct arb_check_result *r,
				   enum arb_problem_id id, uint64_t ino);
/* "name: detail" line */
void fs_problem_print(FILE *out, const struct arb_problem *p);

/* ---- walk.c (the extent check of fsck and repair) ---- */
/*
 * Data extents against the trees: counts, back-references, leaks, overlaps,
 * tree node counts, unreadable nodes, and (with csums) every data sector
 * against its checksum.  With fix (a transaction of a fresh open, nothing
 * else changed yet) wrong data extent items are rewritten on the way (each
 * said on fix_out) and *fixed counts them.  0 or <0 on failure.
 */
int fs_check_extents(struct arb_fs *fs, struct arb_check_result *r, FILE *out,
		     bool csums, struct arb_txn *fix, FILE *fix_out,
		     uint64_t *fixed);

#endif
