/* SPDX-License-Identifier: MIT */
/*
 * extents.c - the extent tree against what the walk counted (walk.c),
 * part by part, in key order, extent by extent:
 *   - tree-block-refcount: a node's count or (owner, level) is wrong, or a
 *     tree block extent no pointer reaches
 *   - node-second-copy: a node's extent item names another second copy
 *     than its pointers
 *   - extent-refcount / extent-backref / extent-leak / extent-length for
 *     data extents; extent-backref also for a back-reference a lookup from
 *     its hash does not reach (format.h, EXTENT_DATA_REF), or one without
 *     its extent item
 *   - extent-missing: a node or data extent in use without an extent item
 *     (the allocator sees it as free: repair refuses to run)
 *   - extent-overlap: extents (and second copies of nodes) overlap
 *   - extent-item-bad: an item of the extent tree that does not parse
 *   - space-map: the free-space map marks every extent and second copy
 *     used, and (after the parts) exactly what the extent tree covers
 * With a fix transaction (repair), extent items are rewritten to what the
 * committed trees say (tree nodes: count, owner, level; data: count and
 * back-references), and leaks deleted (data: with their checksums); this
 * must run on a fresh open, before any other change of the transaction,
 * so that the trees and the extent tree describe the same state and no
 * reference change is pending.  The fixes carry their own copy of the
 * expected back-references, so they are applied after the last part.
 */
#include <stdlib.h>
#include <string.h>

#include "check_int.h"

static void add_range(struct ck *c, uint64_t start, uint64_t len)
{
	if (c->nr_ranges == c->cap_ranges) {
		size_t cap = c->cap_ranges ? c->cap_ranges * 2 : 1024;
		void *p = realloc(c->ranges, cap * sizeof(*c->ranges));
		if (!p) {
			c->oom = true;
			return;
		}
		c->ranges = p;
		c->cap_ranges = cap;
	}
	c->ranges[c->nr_ranges++] = (struct ck_range){ start, len };
}

static int cmp_range(const void *a, const void *b)
{
	const struct ck_range *x = a, *y = b;
	return x->start < y->start ? -1 : x->start > y->start;
}

/* extents and second copies must not overlap one another */
static void check_overlaps(struct ck *c)
{
	uint64_t prev_end = c->prev_end;

	qsort(c->ranges, c->nr_ranges, sizeof(*c->ranges), cmp_range);
	for (size_t i = 0; i < c->nr_ranges; i++) {
		struct ck_range *r = &c->ranges[i];
		uint64_t len = r->len & ~CK_RANGE_COPY;

		if (r->start < prev_end)
			ck_problem(c, ARB_PB_EXTENT_OVERLAP, 0, r->start,
				   "%s %llu+%llu overlaps the previous one",
				   r->len & CK_RANGE_COPY ? "second copy of a "
							    "node"
							  : "extent",
				   (unsigned long long)r->start,
				   (unsigned long long)len);
		if (r->start + len > prev_end)
			prev_end = r->start + len;
	}
	c->prev_end = prev_end;
	c->nr_ranges = 0;
}

/* expected back-references of bytenr: [*lo, *hi) in c->exp */
static void exp_range(struct ck *c, uint64_t bytenr, size_t *lo, size_t *hi)
{
	size_t a = 0, b = c->nexp;

	while (a < b) {
		size_t m = (a + b) / 2;
		if (c->exp[m]->k[0] < bytenr)
			a = m + 1;
		else
			b = m;
	}
	*lo = a;
	while (a < c->nexp && c->exp[a]->k[0] == bytenr)
		a++;
	*hi = a;
}

/* remember a fix; a data extent's carries its expected back-references */
static void add_fix(struct ck *c, const struct ck_fix *f)
{
	struct ck_fix *x;
	size_t lo, hi;

	if (c->nfix == c->capfix) {
		size_t cap = c->capfix ? c->capfix * 2 : 16;
		struct ck_fix *n = realloc(c->fixes, cap * sizeof(*n));
		if (!n) {
			c->oom = true;
			return;
		}
		c->fixes = n;
		c->capfix = cap;
	}
	x = &c->fixes[c->nfix];
	*x = *f;
	x->want = NULL;
	x->nwant = 0;
	if (!f->tree && !f->leak) {
		exp_range(c, f->addr, &lo, &hi);
		if (hi > lo) {
			x->want = malloc((hi - lo) * sizeof(*x->want));
			if (!x->want) {
				c->oom = true;
				return;
			}
			for (size_t i = lo; i < hi; i++) {
				x->want[i - lo].root = c->exp[i]->k[1];
				x->want[i - lo].ino = c->exp[i]->k[2];
				x->want[i - lo].off = c->exp[i]->k[3];
				x->want[i - lo].count =
					(uint32_t)c->exp[i]->count;
			}
			x->nwant = hi - lo;
		}
	}
	c->nfix++;
}

/* compare one data extent's recorded state with the trees */
static void check_data_extent(struct ck *c, uint64_t addr, uint64_t len,
			      uint64_t refs, const struct ck_rref *rr,
			      size_t nr, bool misplaced)
{
	uint64_t key[4] = { addr, 0, 0, 0 };
	struct ck_ent *e = ck_tab_get(&c->data, key, false);
	bool bad_refs = false, bad_back = misplaced;
	size_t lo, hi;

	if (!e || !e->count) {
		ck_problem(c, ARB_PB_EXTENT_LEAK, 0, addr,
			   "data extent %llu+%llu: %llu references recorded, "
			   "no file uses it",
			   (unsigned long long)addr, (unsigned long long)len,
			   (unsigned long long)refs);
		goto want_fix;
	}
	e->matched = true;
	if (e->num_bytes != len)
		ck_problem(c, ARB_PB_EXTENT_LENGTH, e->owner, addr,
			   "data extent %llu: length %llu, file extents say "
			   "%llu",
			   (unsigned long long)addr, (unsigned long long)len,
			   (unsigned long long)e->num_bytes);
	if (e->count != refs) {
		struct arb_problem *p = ck_problem(
			c, ARB_PB_EXTENT_REFS, e->owner, addr,
			"data extent %llu: %llu references recorded, %llu "
			"file extents use it",
			(unsigned long long)addr, (unsigned long long)refs,
			(unsigned long long)e->count);
		p->expect = e->count;
		bad_refs = true;
	}
	exp_range(c, addr, &lo, &hi);
	for (size_t i = lo; i < hi; i++) {
		const struct ck_ent *x = c->exp[i];
		size_t j;
		for (j = 0; j < nr; j++)
			if (rr[j].root == x->k[1] && rr[j].ino == x->k[2] &&
			    rr[j].off == x->k[3])
				break;
		if (j == nr || rr[j].count != x->count) {
			struct arb_problem *p = ck_problem(
				c, ARB_PB_EXTENT_BACKREF, x->k[2], addr,
				"data extent %llu: back-reference (root %llu, "
				"inode %llu, offset %llu) %s %u, expected %llu",
				(unsigned long long)addr,
				(unsigned long long)x->k[1],
				(unsigned long long)x->k[2],
				(unsigned long long)x->k[3],
				j == nr ? "missing, count" : "count",
				j == nr ? 0 : rr[j].count,
				(unsigned long long)x->count);
			p->expect = x->count;
			bad_back = true;
		}
	}
	for (size_t j = 0; j < nr; j++) {
		size_t i;
		for (i = lo; i < hi; i++)
			if (rr[j].root == c->exp[i]->k[1] &&
			    rr[j].ino == c->exp[i]->k[2] &&
			    rr[j].off == c->exp[i]->k[3])
				break;
		if (i == hi) {
			ck_problem(c, ARB_PB_EXTENT_BACKREF, rr[j].ino, addr,
				   "data extent %llu: back-reference (root "
				   "%llu, inode %llu, offset %llu) count %u, "
				   "but no such file extent",
				   (unsigned long long)addr,
				   (unsigned long long)rr[j].root,
				   (unsigned long long)rr[j].ino,
				   (unsigned long long)rr[j].off, rr[j].count);
			bad_back = true;
		}
	}
	if (!bad_refs && !bad_back)
		return;
want_fix:
	if (c->fix) {
		struct ck_fix f = { .addr = addr, .len = len,
				    .refs = e ? e->count : 0,
				    .leak = !e || !e->count };
		add_fix(c, &f);
	}
}

/* a tree block's extent item (own: its address is in the part) */
static void check_tree_block(struct ck *c, uint64_t addr, uint64_t len,
			     uint64_t refs, const void *data, uint32_t size)
{
	struct arb_vol *vol = c->vol;
	const struct arb_tree_block_ref *tr =
		(const void *)((const uint8_t *)data +
			       sizeof(struct arb_extent_item));
	uint64_t key[4] = { addr, 0, 0, 0 };
	struct ck_ent *e = ck_tab_get(&c->nodes, key, false);
	struct ck_fix f = { .addr = addr, .len = len, .tree = true };
	uint64_t m;

	if (size < sizeof(struct arb_extent_item) + sizeof(*tr) ||
	    len != vol->nodesize) {
		ck_problem(c, ARB_PB_EXTENT_ITEM_BAD, 0, addr,
			   "tree block extent %llu malformed",
			   (unsigned long long)addr);
		return;
	}
	if (!e) {
		ck_problem(c, ARB_PB_TREE_REFS, 0, addr,
			   "tree block %llu: %llu references, no pointer "
			   "reaches it",
			   (unsigned long long)addr, (unsigned long long)refs);
		f.leak = true;
		goto want_fix;
	}
	e->matched = true;
	m = arb_tree_block_ref_t_mirror(tr);
	if (m) {
		if (ck_mine(c, m))
			add_range(c, m, vol->nodesize | CK_RANGE_COPY);
		c->used_sectors += vol->nodesize / vol->sectorsize;
		if (!arb_free_space_test(vol, m, vol->nodesize, false))
			ck_problem(c, ARB_PB_SPACE_MAP, 0, addr,
				   "tree block %llu: second copy %llu is free "
				   "in the space map",
				   (unsigned long long)addr,
				   (unsigned long long)m);
	}
	if (e->visited && m != e->mirror)
		ck_problem(c, ARB_PB_NODE_MIRROR, 0, addr,
			   "tree block %llu: extent item names second copy "
			   "%llu, pointers %llu",
			   (unsigned long long)addr, (unsigned long long)m,
			   (unsigned long long)e->mirror);
	f.refs = e->count;
	f.owner = e->owner;
	f.level = e->level;
	if (e->count != refs) {
		struct arb_problem *p = ck_problem(
			c, ARB_PB_TREE_REFS, 0, addr,
			"tree block %llu: %llu references recorded, %llu exist",
			(unsigned long long)addr, (unsigned long long)refs,
			(unsigned long long)e->count);
		p->expect = e->count;
		goto want_fix;
	}
	if (e->visited && e->owner &&
	    (arb_tree_block_ref_t_owner(tr) != e->owner ||
	     arb_tree_block_ref_t_level(tr) != e->level)) {
		ck_problem(c, ARB_PB_TREE_REFS, 0, addr,
			   "tree block %llu: back-reference owner %llu level "
			   "%u, node says %llu/%d",
			   (unsigned long long)addr,
			   (unsigned long long)arb_tree_block_ref_t_owner(tr),
			   arb_tree_block_ref_t_level(tr),
			   (unsigned long long)e->owner, e->level);
		goto want_fix;
	}
	return;
want_fix:
	/* a node that did not read has no trustworthy owner/level */
	if (c->fix && (f.leak || (e->visited && e->owner)))
		add_fix(c, &f);
}

/*
 * The extent item of a tree block outside the part: only its second
 * copy, if that lies in the part and the walk reached the block.
 */
static void foreign_tree_block(struct ck *c, const struct arb_key *k,
			       const void *d, uint32_t size)
{
	const struct arb_tree_block_ref *tr =
		(const void *)((const uint8_t *)d +
			       sizeof(struct arb_extent_item));
	uint64_t m;

	if (k->type != ARB_EXTENT_ITEM ||
	    size < sizeof(struct arb_extent_item) + sizeof(*tr) ||
	    !(arb_extent_item_e_flags(d) & ARB_EXTENT_FLAG_TREE_BLOCK) ||
	    k->offset != c->vol->nodesize)
		return;
	m = arb_tree_block_ref_t_mirror(tr);
	if (m && ck_mine(c, m) && arb_check_seen_test(&c->seen, k->objectid))
		add_range(c, m, c->vol->nodesize | CK_RANGE_COPY);
}

/* the part's data extents, for the checksum pass */
static void add_dext(struct ck *c, uint64_t addr, uint64_t len)
{
	if (!c->csums)
		return;
	if (c->ndext == c->capdext) {
		size_t cap = c->capdext ? c->capdext * 2 : 64;
		void *n = realloc(c->dext, cap * sizeof(*c->dext));
		if (!n) {
			c->oom = true;
			return;
		}
		c->dext = n;
		c->capdext = cap;
	}
	c->dext[c->ndext][0] = addr;
	c->dext[c->ndext][1] = len;
	c->ndext++;
}

/* in use, but no extent item: the allocator would hand it out */
static void check_unmatched(struct ck *c)
{
	for (size_t i = 0; i < c->nodes.size; i++) {
		struct ck_ent *e = &c->nodes.e[i];
		if (e->k[0] && !e->matched) {
			ck_problem(c, ARB_PB_EXTENT_NOITEM, 0, e->k[0],
				   "tree block %llu is referenced but has no "
				   "extent item",
				   (unsigned long long)e->k[0]);
			if (c->r)
				c->r->space_unsafe = true;
		}
	}
	for (size_t i = 0; i < c->data.size; i++) {
		struct ck_ent *e = &c->data.e[i];
		if (e->k[0] && !e->matched) {
			ck_problem(c, ARB_PB_EXTENT_NOITEM, e->owner, e->k[0],
				   "data extent %llu (inode %llu) is used but "
				   "has no extent item",
				   (unsigned long long)e->k[0],
				   (unsigned long long)e->owner);
			if (c->r)
				c->r->space_unsafe = true;
		}
	}
}

int ck_scan_extents(struct ck *c)
{
	struct arb_vol *vol = c->vol;
	struct arb_iter it;
	struct arb_key k = { 0, 0, 0 };
	/* the data extent being collected */
	uint64_t cur = 0, cur_len = 0, cur_refs = 0;
	bool in_data = false;
	/* its back-references: a lookup misses one; the run of consecutive
	 * keys being walked (see format.h, EXTENT_DATA_REF) */
	bool misplaced = false;
	uint64_t run_start = 0, run_next = 0;
	struct ck_rref *rr = NULL;
	size_t nr = 0, caprr = 0;
	int ret;

	/* the whole tree in every part (from the start, so that a read
	 * error stops every part where it stops one): the second copy of
	 * a tree block lies anywhere, and its range belongs to the part
	 * that holds its address */
	arb_iter_init(&it, vol->extent_root);
	for (ret = arb_iter_seek(&it, &k);; ret = arb_iter_next(&it)) {
		const struct arb_extent_item *ei;
		const void *d;
		uint32_t size;
		uint64_t flags;

		if (ret == 0)
			arb_iter_key(&it, &k);
		if (in_data && (ret != 0 || k.objectid != cur)) {
			check_data_extent(c, cur, cur_len, cur_refs, rr, nr,
					  misplaced);
			in_data = false;
		}
		if (ret != 0)
			break;
		d = arb_iter_data(&it);
		size = arb_iter_size(&it);
		if (!ck_mine(c, k.objectid)) {
			foreign_tree_block(c, &k, d, size);
			continue;
		}
		if (c->r)
			c->r->items++;
		if (c->rep)
			c->rep->items++;
		if (k.type == ARB_EXTENT_DATA_REF) {
			const struct arb_extent_data_ref *r = d;
			uint64_t home;
			if (!in_data || k.objectid != cur ||
			    size != sizeof(*r)) {
				ck_problem(c, ARB_PB_EXTENT_BACKREF, 0,
					   k.objectid,
					   "extent %llu: stray or malformed "
					   "back-reference item",
					   (unsigned long long)k.objectid);
				continue;
			}
			if (nr == caprr) {
				size_t cap = caprr ? caprr * 2 : 16;
				struct ck_rref *n =
					realloc(rr, cap * sizeof(*n));
				if (!n) {
					ret = -ENOMEM;
					break;
				}
				rr = n;
				caprr = cap;
			}
			rr[nr].root = arb_extent_data_ref_d_root(r);
			rr[nr].ino = arb_extent_data_ref_d_objectid(r);
			rr[nr].off = arb_extent_data_ref_d_offset(r);
			rr[nr].count = arb_extent_data_ref_d_count(r);
			if (!nr || k.offset != run_next)
				run_start = k.offset;
			run_next = k.offset + 1;
			home = arb_data_ref_hash(rr[nr].root, rr[nr].ino,
						 rr[nr].off);
			if (!arb_data_ref_reachable(home, k.offset,
						    run_start)) {
				ck_problem(c, ARB_PB_EXTENT_BACKREF,
					   rr[nr].ino, k.objectid,
					   "data extent %llu: back-reference "
					   "(root %llu, inode %llu, offset "
					   "%llu) at key offset %llu, where a "
					   "lookup from its hash %llu does not "
					   "reach",
					   (unsigned long long)k.objectid,
					   (unsigned long long)rr[nr].root,
					   (unsigned long long)rr[nr].ino,
					   (unsigned long long)rr[nr].off,
					   (unsigned long long)k.offset,
					   (unsigned long long)home);
				misplaced = true;
			}
			nr++;
			continue;
		}
		if (k.type != ARB_EXTENT_ITEM ||
		    size < sizeof(struct arb_extent_item)) {
			ck_problem(c, ARB_PB_EXTENT_ITEM_BAD, 0, k.objectid,
				   "extent tree: unexpected item (%llu, %u, "
				   "%llu)",
				   (unsigned long long)k.objectid, k.type,
				   (unsigned long long)k.offset);
			continue;
		}
		add_range(c, k.objectid, k.offset);
		if (!arb_free_space_test(vol, k.objectid, k.offset, false))
			ck_problem(c, ARB_PB_SPACE_MAP, 0, k.objectid,
				   "extent %llu+%llu is free in the space map",
				   (unsigned long long)k.objectid,
				   (unsigned long long)k.offset);
		c->used_sectors += k.offset / vol->sectorsize;
		ei = d;
		flags = arb_extent_item_e_flags(ei);
		if (flags & ARB_EXTENT_FLAG_TREE_BLOCK) {
			check_tree_block(c, k.objectid, k.offset,
					 arb_extent_item_e_refs(ei), d, size);
		} else if (flags & ARB_EXTENT_FLAG_DATA) {
			in_data = true;
			cur = k.objectid;
			cur_len = k.offset;
			cur_refs = arb_extent_item_e_refs(ei);
			nr = 0;
			misplaced = false;
			add_dext(c, cur, cur_len);
		} else {
			ck_problem(c, ARB_PB_EXTENT_ITEM_BAD, 0, k.objectid,
				   "extent %llu: unknown flags %llx",
				   (unsigned long long)k.objectid,
				   (unsigned long long)flags);
		}
	}
	arb_iter_release(&it);
	free(rr);
	if (ret == -ENOMEM)
		return ret;
	check_overlaps(c);
	if (ret < 0) {
		/* what the tables hold unmatched would only echo this */
		if (!c->extent_err)
			ck_problem(c, ARB_PB_NODE_BAD, 0, 0,
				   "extent tree unreadable: %s",
				   strerror(-ret));
		c->extent_err = true;
		ck_incomplete(c);
		return 0;
	}
	check_unmatched(c);
	return 0;
}

/* the map marks exactly the extents (and the reserved head) */
void ck_check_space_map(struct ck *c)
{
	struct arb_vol *vol = c->vol;
	/* freed blocks that data reads outside the lock may still read
	 * stay used a little longer (alloc.c, grace lists) */
	uint64_t map_used = vol->total_bytes / vol->sectorsize -
			    arb_free_bytes(vol) / vol->sectorsize -
			    ARB_DATA_START / vol->sectorsize -
			    arb_free_space_grace_bytes(vol) / vol->sectorsize;

	if (!vol->running && map_used != c->used_sectors)
		ck_problem(c, ARB_PB_SPACE_MAP, 0, 0,
			   "free space map: %llu sectors used, extent tree "
			   "covers %llu",
			   (unsigned long long)map_used,
			   (unsigned long long)c->used_sectors);
}

/* ---- repair of extent items ---- */

static int del_key_range(struct arb_txn *t, struct arb_root *root,
			 uint64_t objectid, uint8_t type, uint64_t from,
			 uint64_t to)
{
	for (;;) {
		struct arb_key k = { objectid, type, from };
		int ret;

		ret = arb_next_key_of(root, &k);
		if (ret < 0)
			return ret;
		if (ret == 1 || k.offset >= to)
			return 0;
		ret = arb_del_item(t, root, &k);
		if (ret)
			return ret;
	}
}

static int apply_fix(struct ck *c, struct arb_txn *t, const struct ck_fix *f)
{
	struct arb_root *er = c->vol->extent_root;
	struct arb_key k = { f->addr, ARB_EXTENT_ITEM, f->len };
	struct arb_extent_item ei;
	int ret;

	if (f->tree) {
		uint8_t buf[sizeof(ei) + sizeof(struct arb_tree_block_ref)];
		struct arb_tree_block_ref *tr = (void *)(buf + sizeof(ei));

		/* the count of the committed trees: changes this transaction
		 * queues (shadowing) are applied on top of it at commit */
		if (f->leak)
			return arb_del_item(t, er, &k);
		ret = arb_lookup_item(er, &k, buf, sizeof(buf));
		if (ret < 0)
			return ret;
		if (ret < (int)sizeof(buf))
			return -EUCLEAN;
		arb_set_extent_item_e_refs((struct arb_extent_item *)buf,
					   f->refs);
		arb_set_tree_block_ref_t_owner(tr, f->owner);
		arb_set_tree_block_ref_t_level(tr, (uint8_t)f->level);
		return arb_update_item(t, er, &k, buf, sizeof(buf));
	}
	/* back-references: all go, the expected ones come back */
	ret = del_key_range(t, er, f->addr, ARB_EXTENT_DATA_REF, 0, UINT64_MAX);
	if (ret)
		return ret;
	if (f->leak) {
		ret = arb_del_item(t, er, &k);
		if (ret)
			return ret;
		/* its checksums (items never straddle two extents) */
		return del_key_range(t, c->fs->csum, ARB_EXTENT_CSUM_OBJECTID,
				     ARB_EXTENT_CSUM, f->addr,
				     f->addr + f->len);
	}
	ret = arb_lookup_item(er, &k, &ei, sizeof(ei));
	if (ret < 0)
		return ret;
	if (ret < (int)sizeof(ei))
		return -EUCLEAN;
	arb_set_extent_item_e_refs(&ei, f->refs);
	ret = arb_update_item(t, er, &k, &ei, sizeof(ei));
	if (ret)
		return ret;
	/* where the allocator's lookups find them, however many collide */
	for (size_t i = 0; i < f->nwant; i++) {
		const struct ck_rref *x = &f->want[i];
		struct arb_extent_data_ref r;

		arb_set_extent_data_ref_d_root(&r, x->root);
		arb_set_extent_data_ref_d_objectid(&r, x->ino);
		arb_set_extent_data_ref_d_offset(&r, x->off);
		arb_set_extent_data_ref_d_count(&r, x->count);
		ret = arb_data_ref_insert(t, f->addr, &r);
		if (ret)
			return ret;
	}
	return 0;
}

int ck_apply_fixes(struct ck *c, FILE *fix_out, uint64_t *fixed)
{
	int ret;

	for (size_t i = 0; i < c->nfix; i++) {
		const struct ck_fix *f = &c->fixes[i];

		ret = apply_fix(c, c->fix, f);
		if (ret)
			return ret;
		if (fix_out)
			fprintf(fix_out, "repair: %s %llu: %s\n",
				f->tree ? "tree block" : "data extent",
				(unsigned long long)f->addr,
				f->leak ? "deleted (nothing uses it)"
					: "count and back-references rebuilt "
					  "from the trees");
		(*fixed)++;
	}
	for (size_t i = 0; i < c->ncfix; i++) {
		const struct ck_cfix *f = &c->cfix[i];

		ret = ck_apply_cfix(c, c->fix, f);
		if (ret)
			return ret;
		if (fix_out)
			fprintf(fix_out, "repair: checksum item %llu: %s\n",
				(unsigned long long)f->start,
				f->nkeep ? "trimmed to the sectors of its data "
					   "extent"
					 : "deleted (outside any data extent, "
					   "or over another item's sectors)");
		(*fixed)++;
	}
	return 0;
}

void ck_extents_free(struct ck *c)
{
	for (size_t i = 0; i < c->nfix; i++)
		free(c->fixes[i].want);
	free(c->fixes);
	free(c->cfix);
}
