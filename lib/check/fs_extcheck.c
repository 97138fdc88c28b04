/* SPDX-License-Identifier: MIT */
/*
 * fs_extcheck.c - data extents against the trees that use them, as named
 * problem records that repair can act on (the core's arb_check_vol checks
 * the same invariants but only as text).
 *
 * Walks every tree from the superblock (every node once) and collects:
 *   - per tree node: pointers to it (parents, root items, superblock)
 *   - per data extent: the REG/PREALLOC file extent items pointing into it,
 *     and per (leaf owner, inode, file offset - extent offset) how many
 * then walks the extent tree in key order and compares, extent by extent:
 *   - node-unreadable: a node that does not read or validate (the picture
 *     is then incomplete and no count is compared)
 *   - newer-format: a ROOT_ITEM of a size this code does not know (the
 *     same: its tree cannot be walked, so nothing is compared or repaired)
 *   - tree-block-refcount: a node's count or (owner, level) is wrong, or a
 *     tree block extent no pointer reaches
 *   - extent-missing: a node or data extent in use without an extent item
 *     (the allocator sees it as free: repair refuses to run)
 *   - extent-refcount / extent-backref / extent-leak / extent-missing /
 *     extent-overlap for data extents; extent-backref also for a
 *     back-reference a lookup from its hash does not reach (format.h)
 *   - data-csum (optional): every sector of every data extent that has a
 *     checksum is read and compared; csum-missing: a sector of an extent
 *     that a REG file extent uses has no checksum (reads of it fail;
 *     PREALLOC extents have none)
 *   - csum-orphan: after the parts, one merged walk of the checksum tree
 *     and the extent tree: every checksum item lies inside one data extent
 *     and covers no sector an earlier item covers
 * With a fix transaction, extent items (tree nodes: count, owner, level;
 * data: count and back-references) are rewritten to what the committed
 * trees say, and leaks deleted (data: with their checksums);
 * this must run on a fresh open, before any other change of the
 * transaction, so the trees and the extent tree describe the same state
 * and no reference change is pending.
 *
 * In parts (fs->opts.check_memory, arb_check_plan_make): all of the above
 * runs once per part of the disk address space, the tables holding only
 * the nodes, data extents and back-references whose address lies in the
 * part; each problem is raised in the part of the address it is about; a
 * bitmap of seen nodes keeps each node read once per walk.  The fixes
 * carry their own copy of the expected back-references, so they are all
 * applied after the last part, as with one part.
 */
#include <endian.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "fs_int.h"

struct xe {
	uint64_t k[4]; /* k[0] == 0: empty slot */
	uint64_t count;
	uint64_t owner; /* nodes: header owner; data: an inode using it */
	uint64_t num_bytes;
	int level;
	bool visited, matched;
	bool reg; /* data: a REG file extent uses it (has checksums) */
};

struct xtab {
	struct xe *e;
	size_t size, used;
};

struct rref {
	uint64_t root, ino, off;
	uint32_t count;
};

/* a checksum item that repair cuts to its first nkeep sums (0: deletes) */
struct cfix {
	uint64_t start;
	uint32_t nkeep;
};

/* a data extent whose items repair rewrites */
struct xfix {
	uint64_t addr, len, refs;
	/* data: the back-references the trees expect */
	struct rref *want;
	size_t nwant;
	bool leak;
	/* a tree node: owner and level of its header */
	bool tree;
	uint64_t owner;
	int level;
};

struct xc {
	struct arb_fs *fs;
	struct arb_vol *vol;
	struct arb_check_result *r;
	FILE *out;
	struct xtab nodes, data, drefs;
	struct arb_problem dummy;
	struct xfix *fix;
	size_t nfix, capfix;
	struct cfix *cfix;
	size_t ncfix, capcfix;
	/* expected back-references sorted by (bytenr, root, ino, offset) */
	struct xe **exp;
	size_t nexp;
	/* data extents (addr, len) for the checksum pass */
	uint64_t (*dext)[2];
	size_t ndext, capdext;
	/* the part being checked: addresses in [lo, hi) */
	uint64_t lo, hi;
	struct arb_check_seen seen;
	/* across parts: end of the extents so far; extent tree error said */
	uint64_t prev_end;
	bool extent_err;
	/* progress */
	char phase[64];
	uint64_t done, total;
};

static bool mine(const struct xc *c, uint64_t addr)
{
	return addr >= c->lo && addr < c->hi;
}

static void xprogress(struct xc *c, bool force)
{
	if (c->fs->opts.check_progress && (force || (c->done & 255) == 0))
		c->fs->opts.check_progress(c->fs->opts.check_progress_arg,
					   c->phase, c->done, c->total,
					   c->r->nodes + c->r->sectors);
}

static size_t xhash(const uint64_t k[4])
{
	uint64_t h = k[0] * 0x9E3779B97F4A7C15ULL;
	h ^= k[1] * 0xC2B2AE3D27D4EB4FULL;
	h ^= k[2] * 0x165667B19E3779F9ULL;
	h ^= k[3] * 0x27D4EB2F165667C5ULL;
	return (size_t)(h ^ (h >> 29));
}

static struct xe *xget(struct xtab *t, const uint64_t k[4], bool create)
{
	if (create && t->used * 2 >= t->size) {
		struct xtab n = { 0 };
		n.size = t->size ? t->size * 2 : 4096;
		n.e = calloc(n.size, sizeof(*n.e));
		if (!n.e)
			return NULL;
		for (size_t i = 0; i < t->size; i++) {
			if (!t->e[i].k[0])
				continue;
			size_t s = xhash(t->e[i].k) & (n.size - 1);
			while (n.e[s].k[0])
				s = (s + 1) & (n.size - 1);
			n.e[s] = t->e[i];
		}
		n.used = t->used;
		free(t->e);
		*t = n;
	}
	if (!t->size)
		return NULL;
	for (size_t s = xhash(k) & (t->size - 1);; s = (s + 1) & (t->size - 1)) {
		struct xe *e = &t->e[s];
		if (!e->k[0]) {
			if (!create)
				return NULL;
			memcpy(e->k, k, sizeof(e->k));
			t->used++;
			return e;
		}
		if (!memcmp(e->k, k, sizeof(e->k)))
			return e;
	}
}

__attribute__((format(printf, 5, 6))) static struct arb_problem *
xproblem(struct xc *c, enum arb_problem_id id, uint64_t ino, uint64_t addr,
	 const char *fmt, ...)
{
	struct arb_problem *p = fs_problem_add(c->r, id, ino);
	va_list ap;

	if (!p) {
		p = &c->dummy;
		memset(p, 0, sizeof(*p));
		p->id = id;
	}
	p->addr = addr;
	va_start(ap, fmt);
	vsnprintf(p->detail, sizeof(p->detail), fmt, ap);
	va_end(ap);
	fs_problem_print(c->out, p);
	return p;
}

static void walk(struct xc *c, uint64_t bytenr, uint64_t mirror,
		 uint64_t gen, int level, uint64_t tree);

/*
 * A ROOT_ITEM of a size this code does not know: most likely a newer
 * arborfs grew the struct.  Skipping the tree would make every node and
 * data extent it holds look leaked, and repair would free them; so the
 * picture is incomplete, and repair refuses.
 */
static void root_item_unknown(struct xc *c, struct arb_node *n, bool own,
			      uint64_t tree, uint32_t size)
{
	c->r->incomplete = true;
	c->r->newer_format = true;
	if (own)
		xproblem(c, ARB_PB_NEWER_FORMAT, 0, n->bytenr,
			 "ROOT_ITEM of tree %llu has size %u, this fsck knows "
			 "%zu: refusing to repair, use a newer fsck.arborfs",
			 (unsigned long long)tree, size,
			 sizeof(struct arb_root_item));
}

static void collect_leaf(struct xc *c, struct arb_node *n, bool own,
			 uint64_t tree)
{
	for (uint32_t i = 0; i < arb_nritems(n); i++) {
		const struct arb_file_extent *fe;
		struct arb_key k;
		struct xe *e;
		uint64_t key[4];

		arb_node_key(n, (int)i, &k);
		if (tree == ARB_ROOT_TREE_ID && k.type == ARB_ROOT_ITEM &&
		    arb_item_size(n, (int)i) != sizeof(struct arb_root_item)) {
			root_item_unknown(c, n, own, k.objectid,
					  arb_item_size(n, (int)i));
			continue;
		}
		if (tree == ARB_ROOT_TREE_ID && k.type == ARB_ROOT_ITEM) {
			const struct arb_root_item *ri = arb_item_ptr(n, (int)i);
			walk(c, arb_root_item_r_bytenr(ri),
			     arb_root_item_r_mirror(ri),
			     arb_root_item_r_generation(ri),
			     arb_root_item_r_level(ri), k.objectid);
			continue;
		}
		if (k.type != ARB_EXTENT_DATA ||
		    arb_item_size(n, (int)i) < sizeof(*fe))
			continue;
		fe = arb_item_ptr(n, (int)i);
		if (arb_file_extent_f_type(fe) == ARB_FILE_EXTENT_INLINE ||
		    arb_file_extent_f_disk_bytenr(fe) == 0)
			continue;
		key[0] = arb_file_extent_f_disk_bytenr(fe);
		key[1] = key[2] = key[3] = 0;
		if (!mine(c, key[0]))
			continue;
		e = xget(&c->data, key, true);
		if (!e)
			continue;
		e->count++;
		e->num_bytes = arb_file_extent_f_disk_num_bytes(fe);
		if (arb_file_extent_f_type(fe) == ARB_FILE_EXTENT_REG)
			e->reg = true;
		if (!e->owner)
			e->owner = k.objectid;
		key[1] = arb_node_owner(n);
		key[2] = k.objectid;
		key[3] = k.offset - arb_file_extent_f_offset(fe);
		e = xget(&c->drefs, key, true);
		if (e)
			e->count++;
	}
}

static void walk(struct xc *c, uint64_t bytenr, uint64_t mirror,
		 uint64_t gen, int level, uint64_t tree)
{
	uint64_t key[4] = { bytenr, 0, 0, 0 };
	bool own = mine(c, bytenr);
	struct xe *e = NULL;
	struct arb_node *n;
	int ret;

	if (own) {
		e = xget(&c->nodes, key, true);
		if (!e)
			return;
		e->count++;
		if (e->visited)
			return;
		e->visited = true;
		arb_check_seen_test_set(&c->seen, bytenr);
	} else if (arb_check_seen_test_set(&c->seen, bytenr)) {
		return;
	}
	c->done++;
	xprogress(c, false);
	ret = arb_node_read(c->vol, bytenr, mirror, gen, level, &n);
	if (ret) {
		if (own)
			xproblem(c, ARB_PB_NODE_BAD, 0, bytenr,
				 "tree %llu: node %llu (level %d) unreadable: "
				 "%s",
				 (unsigned long long)tree,
				 (unsigned long long)bytenr, level,
				 strerror(-ret));
		c->r->incomplete = true;
		return;
	}
	if (own) {
		c->r->nodes++;
		e->owner = arb_node_owner(n);
		e->level = arb_level(n);
	}
	if (level == 0) {
		collect_leaf(c, n, own, tree);
	} else {
		for (uint32_t i = 0; i < arb_nritems(n); i++)
			walk(c, arb_child_bytenr(n, (int)i),
			     arb_child_mirror(n, (int)i),
			     arb_child_gen(n, (int)i), level - 1, tree);
	}
	arb_node_put(c->vol, n);
}

static int cmp_exp(const void *a, const void *b)
{
	const struct xe *x = *(const struct xe *const *)a;
	const struct xe *y = *(const struct xe *const *)b;

	for (int i = 0; i < 4; i++)
		if (x->k[i] != y->k[i])
			return x->k[i] < y->k[i] ? -1 : 1;
	return 0;
}

/* expected back-references of bytenr: [*lo, *hi) in c->exp */
static void exp_range(struct xc *c, uint64_t bytenr, size_t *lo, size_t *hi)
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
static void add_fix(struct xc *c, const struct xfix *f)
{
	struct xfix *x;
	size_t lo, hi;

	if (c->nfix == c->capfix) {
		size_t cap = c->capfix ? c->capfix * 2 : 16;
		struct xfix *n = realloc(c->fix, cap * sizeof(*n));
		if (!n)
			return;
		c->fix = n;
		c->capfix = cap;
	}
	x = &c->fix[c->nfix];
	*x = *f;
	x->want = NULL;
	x->nwant = 0;
	if (!f->tree && !f->leak) {
		exp_range(c, f->addr, &lo, &hi);
		if (hi > lo) {
			x->want = malloc((hi - lo) * sizeof(*x->want));
			if (!x->want)
				return;
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
static void check_data_extent(struct xc *c, uint64_t addr, uint64_t len,
			      uint64_t refs, const struct rref *rr, size_t nr,
			      bool misplaced, bool fix)
{
	uint64_t key[4] = { addr, 0, 0, 0 };
	struct xe *e = xget(&c->data, key, false);
	bool bad_refs = false, bad_back = misplaced;
	size_t lo, hi;

	if (!e || !e->count) {
		xproblem(c, ARB_PB_EXTENT_LEAK, 0, addr,
			 "data extent %llu+%llu: %llu references recorded, no "
			 "file uses it",
			 (unsigned long long)addr, (unsigned long long)len,
			 (unsigned long long)refs);
		goto want_fix;
	}
	e->matched = true;
	if (e->num_bytes != len)
		xproblem(c, ARB_PB_TREE, e->owner, addr,
			 "data extent %llu: length %llu, file extents say %llu",
			 (unsigned long long)addr, (unsigned long long)len,
			 (unsigned long long)e->num_bytes);
	if (e->count != refs) {
		struct arb_problem *p = xproblem(
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
		const struct xe *x = c->exp[i];
		size_t j;
		for (j = 0; j < nr; j++)
			if (rr[j].root == x->k[1] && rr[j].ino == x->k[2] &&
			    rr[j].off == x->k[3])
				break;
		if (j == nr || rr[j].count != x->count) {
			struct arb_problem *p = xproblem(
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
			xproblem(c, ARB_PB_EXTENT_BACKREF, rr[j].ino, addr,
				 "data extent %llu: back-reference (root %llu, "
				 "inode %llu, offset %llu) count %u, but no "
				 "such file extent",
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
	if (fix) {
		struct xfix f = { .addr = addr, .len = len,
				  .refs = e ? e->count : 0,
				  .leak = !e || !e->count };
		add_fix(c, &f);
	}
}

static void check_tree_block(struct xc *c, uint64_t addr, uint64_t len,
			     uint64_t refs, const void *data, uint32_t size,
			     bool fix)
{
	const struct arb_tree_block_ref *tr =
		(const void *)((const uint8_t *)data +
			       sizeof(struct arb_extent_item));
	uint64_t key[4] = { addr, 0, 0, 0 };
	struct xe *e = xget(&c->nodes, key, false);
	struct xfix f = { .addr = addr, .len = len, .tree = true };

	if (size < sizeof(struct arb_extent_item) + sizeof(*tr) ||
	    len != c->vol->nodesize) {
		xproblem(c, ARB_PB_TREE, 0, addr,
			 "tree block extent %llu malformed",
			 (unsigned long long)addr);
		return;
	}
	if (!e) {
		xproblem(c, ARB_PB_TREE_REFS, 0, addr,
			 "tree block %llu: %llu references, no pointer "
			 "reaches it",
			 (unsigned long long)addr, (unsigned long long)refs);
		f.leak = true;
		goto want_fix;
	}
	e->matched = true;
	f.refs = e->count;
	f.owner = e->owner;
	f.level = e->level;
	if (e->count != refs) {
		struct arb_problem *p = xproblem(
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
		xproblem(c, ARB_PB_TREE_REFS, 0, addr,
			 "tree block %llu: back-reference owner %llu level %u, "
			 "node says %llu/%d",
			 (unsigned long long)addr,
			 (unsigned long long)arb_tree_block_ref_t_owner(tr),
			 arb_tree_block_ref_t_level(tr),
			 (unsigned long long)e->owner, e->level);
		goto want_fix;
	}
	return;
want_fix:
	/* a node that did not read has no trustworthy owner/level */
	if (fix && (f.leak || (e->visited && e->owner)))
		add_fix(c, &f);
}

static int scan_extent_tree(struct xc *c, bool fix)
{
	struct arb_iter it;
	struct arb_key k = { 0, 0, 0 };
	uint64_t prev_end = c->prev_end;
	/* the data extent being collected */
	uint64_t cur = 0, cur_len = 0, cur_refs = 0;
	bool in_data = false;
	/* its back-references: a lookup misses one; the run of consecutive
	 * keys being walked (see format.h, EXTENT_DATA_REF) */
	bool misplaced = false;
	uint64_t run_start = 0, run_next = 0;
	struct rref *rr = NULL;
	size_t nr = 0, caprr = 0;
	int ret;

	arb_iter_init(&it, c->vol->extent_root);
	for (ret = arb_iter_seek(&it, &k);; ret = arb_iter_next(&it)) {
		const void *d;
		uint32_t size;

		bool past;

		if (ret == 0)
			arb_iter_key(&it, &k);
		/* the part's items only (from the start, so that a read
		 * error stops every part where it stops one) */
		if (ret == 0 && k.objectid < c->lo)
			continue;
		past = ret != 0 || k.objectid >= c->hi;
		if (in_data && (past || k.objectid != cur)) {
			check_data_extent(c, cur, cur_len, cur_refs, rr, nr,
					  misplaced, fix);
			in_data = false;
		}
		if (past)
			break;
		d = arb_iter_data(&it);
		size = arb_iter_size(&it);
		if (k.type == ARB_EXTENT_DATA_REF) {
			const struct arb_extent_data_ref *r = d;
			uint64_t home;
			if (!in_data || k.objectid != cur ||
			    size != sizeof(*r)) {
				xproblem(c, ARB_PB_EXTENT_BACKREF, 0,
					 k.objectid,
					 "extent %llu: stray or malformed "
					 "back-reference item",
					 (unsigned long long)k.objectid);
				continue;
			}
			if (nr == caprr) {
				size_t cap = caprr ? caprr * 2 : 16;
				struct rref *n = realloc(rr, cap * sizeof(*n));
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
				xproblem(c, ARB_PB_EXTENT_BACKREF, rr[nr].ino,
					 k.objectid,
					 "data extent %llu: back-reference "
					 "(root %llu, inode %llu, offset %llu) "
					 "at key offset %llu, where a lookup "
					 "from its hash %llu does not reach",
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
			xproblem(c, ARB_PB_TREE, 0, k.objectid,
				 "extent tree: unexpected item (%llu, %u, %llu)",
				 (unsigned long long)k.objectid, k.type,
				 (unsigned long long)k.offset);
			continue;
		}
		if (k.objectid < prev_end)
			xproblem(c, ARB_PB_EXTENT_OVERLAP, 0, k.objectid,
				 "extent %llu+%llu overlaps the previous one",
				 (unsigned long long)k.objectid,
				 (unsigned long long)k.offset);
		if (k.objectid + k.offset > prev_end)
			prev_end = k.objectid + k.offset;
		const struct arb_extent_item *ei = d;
		uint64_t flags = arb_extent_item_e_flags(ei);
		if (flags & ARB_EXTENT_FLAG_TREE_BLOCK) {
			check_tree_block(c, k.objectid, k.offset,
					 arb_extent_item_e_refs(ei), d, size, fix);
		} else if (flags & ARB_EXTENT_FLAG_DATA) {
			in_data = true;
			cur = k.objectid;
			cur_len = k.offset;
			cur_refs = arb_extent_item_e_refs(ei);
			nr = 0;
			misplaced = false;
			if (c->ndext == c->capdext) {
				size_t cap = c->capdext ? c->capdext * 2 : 64;
				void *n = realloc(c->dext,
						  cap * sizeof(*c->dext));
				if (n) {
					c->dext = n;
					c->capdext = cap;
				}
			}
			if (c->ndext < c->capdext) {
				c->dext[c->ndext][0] = cur;
				c->dext[c->ndext][1] = cur_len;
				c->ndext++;
			}
		} else {
			xproblem(c, ARB_PB_TREE, 0, k.objectid,
				 "extent %llu: unknown flags %llx",
				 (unsigned long long)k.objectid,
				 (unsigned long long)flags);
		}
	}
	arb_iter_release(&it);
	free(rr);
	c->prev_end = prev_end;
	if (ret < 0) {
		if (!c->extent_err)
			xproblem(c, ARB_PB_NODE_BAD, 0, 0,
				 "extent tree unreadable: %s", strerror(-ret));
		c->extent_err = true;
		c->r->incomplete = true;
		return 0;
	}
	for (size_t i = 0; i < c->nodes.size; i++) {
		struct xe *e = &c->nodes.e[i];
		if (e->k[0] && !e->matched) {
			xproblem(c, ARB_PB_EXTENT_NOITEM, 0, e->k[0],
				 "tree block %llu is referenced but has no "
				 "extent item",
				 (unsigned long long)e->k[0]);
			c->r->space_unsafe = true;
		}
	}
	for (size_t i = 0; i < c->data.size; i++) {
		struct xe *e = &c->data.e[i];
		if (e->k[0] && !e->matched) {
			xproblem(c, ARB_PB_EXTENT_NOITEM, e->owner, e->k[0],
				 "data extent %llu (inode %llu) is used but has "
				 "no extent item",
				 (unsigned long long)e->k[0],
				 (unsigned long long)e->owner);
			c->r->space_unsafe = true;
		}
	}
	return 0;
}

/* ---- checksums of the data ---- */

static int csum_range(struct xc *c, uint64_t addr, size_t nsec,
		      uint32_t *sums, uint8_t *have)
{
	uint32_t bs = c->vol->sectorsize;
	struct arb_key key = { ARB_EXTENT_CSUM_OBJECTID, ARB_EXTENT_CSUM, addr },
		       k;
	uint64_t end = addr + nsec * (uint64_t)bs;
	struct arb_iter it;
	int ret;

	memset(have, 0, nsec);
	arb_iter_init(&it, c->fs->csum);
	ret = arb_iter_seek_le(&it, &key);
	if (ret == 1)
		ret = arb_iter_seek(&it, &key);
	while (ret == 0) {
		uint32_t size = arb_iter_size(&it);
		const uint8_t *d = arb_iter_data(&it);
		uint64_t iend;

		arb_iter_key(&it, &k);
		if (k.objectid != ARB_EXTENT_CSUM_OBJECTID ||
		    k.type != ARB_EXTENT_CSUM || k.offset >= end)
			break;
		iend = k.offset + (size / 4) * (uint64_t)bs;
		for (uint64_t s = k.offset > addr ? k.offset : addr;
		     s < iend && s < end; s += bs) {
			uint32_t v;
			size_t i = (s - addr) / bs;
			memcpy(&v, d + (s - k.offset) / bs * 4, 4);
			sums[i] = le32toh(v);
			have[i] = 1;
		}
		ret = arb_iter_next(&it);
	}
	arb_iter_release(&it);
	return ret < 0 ? ret : 0;
}

#define XC_CHUNK_SECTORS 256

static void check_data_csums(struct xc *c)
{
	uint32_t bs = c->vol->sectorsize;
	uint8_t *buf = malloc((size_t)XC_CHUNK_SECTORS * bs);
	uint32_t sums[XC_CHUNK_SECTORS];
	uint8_t have[XC_CHUNK_SECTORS];
	char path[512];

	if (!buf)
		return;
	for (size_t x = 0; x < c->ndext; x++) {
		uint64_t addr = c->dext[x][0], len = c->dext[x][1];
		uint64_t bad = 0, first = 0, key[4] = { addr, 0, 0, 0 };
		uint64_t missing = 0, first_missing = 0;
		struct xe *e = xget(&c->data, key, false);

		for (uint64_t off = 0; off < len;) {
			size_t nsec = (len - off) / bs;
			int ret;
			if (nsec > XC_CHUNK_SECTORS)
				nsec = XC_CHUNK_SECTORS;
			if (!nsec)
				break;
			ret = csum_range(c, addr + off, nsec, sums, have);
			if (!ret)
				ret = arb_dev_read(c->vol->dev, buf, nsec * bs,
						   addr + off, ARB_IO_DATA);
			if (ret) {
				c->done += nsec;
				bad += nsec;
				if (!first)
					first = addr + off;
				off += nsec * bs;
				continue;
			}
			for (size_t i = 0; i < nsec; i++) {
				c->r->sectors++;
				c->done++;
				if (!have[i]) {
					if (e && e->reg && !missing++)
						first_missing =
							addr + off + i * bs;
					continue;
				}
				if (~arb_crc32c(~0u, buf + i * bs, bs) !=
				    sums[i]) {
					if (!bad)
						first = addr + off + i * bs;
					bad++;
				}
			}
			off += nsec * bs;
			xprogress(c, true);
		}
		/* the file by its path, as scrub names it */
		if ((bad || missing) && e && e->owner && c->fs)
			fs_ino_path(c->fs, e->owner, path, sizeof(path));
		else
			snprintf(path, sizeof(path), "?");
		if (bad)
			xproblem(c, ARB_PB_DATA_CSUM, e ? e->owner : 0, addr,
				 "data extent %llu+%llu (inode %llu, %s): %llu "
				 "sector(s) do not match their checksum, first "
				 "at %llu",
				 (unsigned long long)addr,
				 (unsigned long long)len,
				 (unsigned long long)(e ? e->owner : 0), path,
				 (unsigned long long)bad,
				 (unsigned long long)first);
		if (missing)
			xproblem(c, ARB_PB_CSUM_MISSING, e->owner, addr,
				 "data extent %llu+%llu (inode %llu, %s): %llu "
				 "sector(s) have no checksum, first at %llu",
				 (unsigned long long)addr,
				 (unsigned long long)len,
				 (unsigned long long)e->owner, path,
				 (unsigned long long)missing,
				 (unsigned long long)first_missing);
	}
	free(buf);
}

/*
 * Every checksum item inside one data extent, no sector covered twice.
 * One forward walk of each tree (both are in address order): for each
 * checksum item [s, e), the candidate extent is the last data extent that
 * starts at or below s.  An item that does not fit is a problem.  Repair
 * keeps the part from s to the end of that extent when s is inside it and
 * no earlier item covers s; otherwise the item goes whole: an item that
 * starts inside another's sectors is the stale one, and keeping its tail
 * could take sectors, and the key, of the next extent's own item.
 */
static void add_cfix(struct xc *c, uint64_t start, uint32_t nkeep)
{
	if (c->ncfix == c->capcfix) {
		size_t cap = c->capcfix ? c->capcfix * 2 : 16;
		struct cfix *n = realloc(c->cfix, cap * sizeof(*n));
		if (!n)
			return;
		c->cfix = n;
		c->capcfix = cap;
	}
	c->cfix[c->ncfix].start = start;
	c->cfix[c->ncfix].nkeep = nkeep;
	c->ncfix++;
}

static int check_csum_items(struct xc *c, bool fix)
{
	uint32_t bs = c->vol->sectorsize;
	struct arb_key ck = { ARB_EXTENT_CSUM_OBJECTID, ARB_EXTENT_CSUM, 0 },
		       ek = { 0, 0, 0 }, k;
	struct arb_iter ci, ei;
	/* the current candidate extent; ext_ret: the extent iterator's state
	 * (0: at an item not yet looked at, 1: at the end, <0: error) */
	uint64_t x_addr = 0, x_len = 0, covered = 0;
	bool have_x = false;
	int ret, ext_ret;

	arb_iter_init(&ci, c->fs->csum);
	arb_iter_init(&ei, c->vol->extent_root);
	ext_ret = arb_iter_seek(&ei, &ek);
	for (ret = arb_iter_seek(&ci, &ck); ret == 0;
	     ret = arb_iter_next(&ci)) {
		uint32_t size = arb_iter_size(&ci);
		uint64_t s, e, b;

		arb_iter_key(&ci, &k);
		if (k.objectid != ARB_EXTENT_CSUM_OBJECTID ||
		    k.type != ARB_EXTENT_CSUM)
			break;
		s = k.offset;
		e = s + (uint64_t)(size / 4) * bs;
		if (size == 0 || size % 4 || s % bs || e <= s) {
			xproblem(c, ARB_PB_CSUM_ORPHAN, 0, s,
				 "checksum item at %llu: malformed (%u bytes)",
				 (unsigned long long)s, size);
			if (fix)
				add_cfix(c, s, 0);
			continue;
		}
		/* the last data extent starting at or below s */
		while (ext_ret == 0) {
			const void *d = arb_iter_data(&ei);

			arb_iter_key(&ei, &ek);
			if (ek.objectid > s)
				break;
			if (ek.type == ARB_EXTENT_ITEM &&
			    arb_iter_size(&ei) >=
				    sizeof(struct arb_extent_item) &&
			    (arb_extent_item_e_flags(d) &
			     ARB_EXTENT_FLAG_DATA)) {
				x_addr = ek.objectid;
				x_len = ek.offset;
				have_x = true;
			}
			ext_ret = arb_iter_next(&ei);
		}
		if (ext_ret < 0) {
			ret = ext_ret;
			break;
		}
		b = e;
		if (s < covered || !have_x || s >= x_addr + x_len)
			b = s; /* overlaps an earlier item, or in no extent */
		else if (b > x_addr + x_len)
			b = x_addr + x_len;
		if (b == e) {
			covered = e;
			continue;
		}
		xproblem(c, ARB_PB_CSUM_ORPHAN, 0, s,
			 "checksum item %llu+%llu: %llu of its %llu sector(s) "
			 "lie outside any data extent or are covered by an "
			 "earlier item",
			 (unsigned long long)s, (unsigned long long)(e - s),
			 (unsigned long long)(e - b) / bs,
			 (unsigned long long)(e - s) / bs);
		if (fix)
			add_cfix(c, s, (uint32_t)((b - s) / bs));
		/* what an overlapping item covers is the earlier item's */
		if (b > covered)
			covered = b;
	}
	arb_iter_release(&ci);
	arb_iter_release(&ei);
	return ret < 0 ? ret : 0;
}

/* cut one checksum item to what check_csum_items kept */
static int apply_cfix(struct xc *c, struct arb_txn *t, const struct cfix *f)
{
	struct arb_key k = { ARB_EXTENT_CSUM_OBJECTID, ARB_EXTENT_CSUM,
			     f->start };
	uint8_t *buf;
	int ret;

	if (!f->nkeep) {
		ret = arb_del_item(t, c->fs->csum, &k);
		/* -ENOENT: gone with a leaked extent's checksums */
		return ret == -ENOENT ? 0 : ret;
	}
	buf = malloc((size_t)f->nkeep * 4);
	if (!buf)
		return -ENOMEM;
	ret = arb_lookup_item(c->fs->csum, &k, buf, f->nkeep * 4);
	if (ret >= 0 && ret < (int)(f->nkeep * 4))
		ret = -EUCLEAN;
	if (ret >= 0)
		ret = arb_update_item(t, c->fs->csum, &k, buf, f->nkeep * 4);
	else if (ret == -ENOENT)
		ret = 0;
	free(buf);
	return ret;
}

/* ---- repair of data extent items ---- */

static int del_key_range(struct arb_txn *t, struct arb_root *root,
			 uint64_t objectid, uint8_t type, uint64_t from,
			 uint64_t to)
{
	for (;;) {
		struct arb_key k = { objectid, type, from };
		struct arb_iter it;
		int ret;

		arb_iter_init(&it, root);
		ret = arb_iter_seek(&it, &k);
		if (ret == 0)
			arb_iter_key(&it, &k);
		arb_iter_release(&it);
		if (ret < 0)
			return ret;
		if (ret == 1 || k.objectid != objectid || k.type != type ||
		    k.offset >= to)
			return 0;
		ret = arb_del_item(t, root, &k);
		if (ret)
			return ret;
	}
}

static int apply_fix(struct xc *c, struct arb_txn *t, const struct xfix *f)
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
		const struct rref *x = &f->want[i];
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

static void xtab_clear(struct xtab *t)
{
	if (t->e)
		memset(t->e, 0, t->size * sizeof(*t->e));
	t->used = 0;
}

int fs_check_extents(struct arb_fs *fs, struct arb_check_result *r, FILE *out,
		     bool csums, struct arb_txn *fix, FILE *fix_out,
		     uint64_t *fixed)
{
	struct arb_vol *vol = fs->vol;
	struct arb_check_plan plan;
	struct xc c;
	int ret = 0;

	memset(&c, 0, sizeof(c));
	c.fs = fs;
	c.vol = vol;
	c.r = r;
	c.out = out;
	ret = arb_check_plan_make(vol, fs->opts.check_memory, &plan);
	if (ret)
		return ret;
	ret = arb_check_seen_init(vol, &c.seen);
	if (ret) {
		arb_check_plan_free(&plan);
		return ret;
	}
	c.total = plan.nodes * plan.nparts;
	if (csums)
		c.total += plan.data_bytes / vol->sectorsize;
	for (unsigned part = 0; part < plan.nparts; part++) {
		c.lo = plan.bound[part];
		c.hi = plan.bound[part + 1];
		snprintf(c.phase, sizeof(c.phase), "extents, part %u/%u",
			 part + 1, plan.nparts);
		xprogress(&c, true);
		arb_check_seen_clear(&c.seen);
		xtab_clear(&c.nodes);
		xtab_clear(&c.data);
		xtab_clear(&c.drefs);
		c.nexp = 0;
		c.ndext = 0;
		/* the superblock's pointer to the root tree */
		walk(&c, vol->tree_root->node->bytenr,
		     vol->tree_root->node->mirror,
		     arb_node_gen(vol->tree_root->node),
		     arb_level(vol->tree_root->node), ARB_ROOT_TREE_ID);
		if (!r->incomplete) {
			void *n = realloc(c.exp, (c.drefs.used + 1) *
							 sizeof(*c.exp));
			if (!n) {
				ret = -ENOMEM;
				goto out;
			}
			c.exp = n;
			for (size_t i = 0; i < c.drefs.size; i++)
				if (c.drefs.e[i].k[0])
					c.exp[c.nexp++] = &c.drefs.e[i];
			qsort(c.exp, c.nexp, sizeof(*c.exp), cmp_exp);
			ret = scan_extent_tree(&c, fix != NULL);
			if (ret)
				goto out;
		}
		if (csums)
			check_data_csums(&c);
	}
	if (!r->incomplete && !c.extent_err) {
		snprintf(c.phase, sizeof(c.phase), "checksum items");
		xprogress(&c, true);
		ret = check_csum_items(&c, fix != NULL);
		if (ret) {
			xproblem(&c, ARB_PB_NODE_BAD, 0, 0,
				 "checksum or extent tree unreadable: %s",
				 strerror(-ret));
			r->incomplete = true;
			ret = 0;
		}
	}
	if (fix && !r->incomplete) {
		for (size_t i = 0; i < c.nfix; i++) {
			ret = apply_fix(&c, fix, &c.fix[i]);
			if (ret)
				goto out;
			if (fix_out)
				fprintf(fix_out, "repair: %s %llu: %s\n",
					c.fix[i].tree ? "tree block"
						      : "data extent",
					(unsigned long long)c.fix[i].addr,
					c.fix[i].leak
						? "deleted (nothing uses it)"
						: "count and back-references "
						  "rebuilt from the trees");
			(*fixed)++;
		}
		for (size_t i = 0; i < c.ncfix; i++) {
			const struct cfix *f = &c.cfix[i];

			ret = apply_cfix(&c, fix, f);
			if (ret)
				goto out;
			if (fix_out)
				fprintf(fix_out,
					"repair: checksum item %llu: %s\n",
					(unsigned long long)f->start,
					f->nkeep ? "trimmed to the sectors of "
						   "its data extent"
						 : "deleted (outside any data "
						   "extent, or over another "
						   "item's sectors)");
			(*fixed)++;
		}
	}
out:
	arb_check_plan_free(&plan);
	arb_check_seen_free(&c.seen);
	free(c.nodes.e);
	free(c.data.e);
	free(c.drefs.e);
	free(c.exp);
	for (size_t i = 0; i < c.nfix; i++)
		free(c.fix[i].want);
	free(c.fix);
	free(c.cfix);
	free(c.dext);
	return ret;
}
