/* SPDX-License-Identifier: MIT */
/*
 * check.c - whole-volume consistency check of the storage core.
 *
 * Checks, for the committed state (call it with no uncommitted changes):
 *   - every node of every tree reachable from the superblock reads and
 *     validates (checksum, uuid, address, level, key order, item bounds)
 *   - levels decrease by one from parent to child; a child's first key
 *     equals its parent's key for it and its keys stay below the parent's
 *     next key; no node but a root is empty
 *   - each tree node has exactly as many references in the extent tree as
 *     there are pointers to it (parent pointers, root items, superblock),
 *     and its back-reference (owner, level) matches the node's header
 *   - each data extent's count equals the file extent items pointing at
 *     it, and its EXTENT_DATA_REF items equal, one for one, the
 *     (leaf owner, inode, offset) of those items; each sits where a
 *     lookup from its hash finds it (format.h, EXTENT_DATA_REF)
 *   - both copies of every node (duplicated metadata) read, validate and
 *     are identical; every pointer to a node names the same second copy,
 *     and so does the node's extent item
 *   - extents (and the second copies of tree nodes) do not overlap; the
 *     free-space map marks exactly what the extent tree covers
 * Collects: a table of referenced nodes, a table of data references and
 * the list of allocated ranges.
 *
 * In parts (rep->budget, see arb_check_plan_make): the walk and the
 * extent tree scan run once per part of the disk address space; the
 * tables and the range list hold only what lies in the part, every other
 * check is made in the part that holds the node or extent it is about,
 * and a bitmap of seen nodes keeps each node read and descended once per
 * walk.  The problems found are the same whatever the number of parts
 * (their order is not).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

struct ck_ent {
	uint64_t k[4]; /* k[0] == 0: empty slot */
	uint64_t count;
	uint64_t owner;
	int level;
	bool visited, matched;
	uint64_t num_bytes;
	uint64_t mirror; /* second copy named by the first pointer */
};

struct ck_range {
	uint64_t start, len;
};

struct ck_table {
	struct ck_ent *e;
	size_t size, used;
};

struct ck {
	struct arb_vol *vol;
	struct arb_check_report *rep;
	struct ck_table nodes; /* key: bytenr */
	struct ck_table data;  /* key: bytenr (count of file extent items) */
	struct ck_table drefs; /* key: bytenr, root, ino, offset */
	struct ck_range *ranges; /* every extent and second copy */
	size_t nr_ranges, cap_ranges;
	uint8_t *buf[2]; /* raw copies of a node */
	int io_error;
	/* the part being checked: addresses in [lo, hi) */
	uint64_t lo, hi;
	struct arb_check_seen seen;
	/* across parts: end of the allocated ranges so far, sectors the
	 * extent tree covers, extent tree read error reported */
	uint64_t prev_end, used_sectors;
	bool extent_err;
	/* progress: nodes walked in every part, and the expected total */
	char phase[64];
	uint64_t done, total;
};

static bool mine(const struct ck *c, uint64_t addr)
{
	return addr >= c->lo && addr < c->hi;
}

static void ck_progress(struct ck *c, bool force)
{
	if (c->rep->progress && (force || (c->done & 255) == 0))
		c->rep->progress(c->rep->progress_arg, c->phase, c->done,
				 c->total, c->rep->nodes + c->rep->items);
}

static size_t ck_hash(const uint64_t k[4])
{
	uint64_t h = k[0] * 0x9E3779B97F4A7C15ULL;
	h ^= k[1] * 0xC2B2AE3D27D4EB4FULL;
	h ^= k[2] * 0x165667B19E3779F9ULL;
	h ^= k[3] * 0x27D4EB2F165667C5ULL;
	return (size_t)(h ^ (h >> 29));
}

static struct ck_ent *ck_get(struct ck_table *t, const uint64_t k[4],
			     bool create)
{
	if (t->used * 2 >= t->size) {
		struct ck_table n = { 0 };
		if (!create && t->size)
			goto lookup;
		n.size = t->size ? t->size * 2 : 4096;
		n.e = calloc(n.size, sizeof(*n.e));
		if (!n.e)
			return NULL;
		for (size_t i = 0; i < t->size; i++) {
			if (!t->e[i].k[0])
				continue;
			size_t s = ck_hash(t->e[i].k) & (n.size - 1);
			while (n.e[s].k[0])
				s = (s + 1) & (n.size - 1);
			n.e[s] = t->e[i];
		}
		n.used = t->used;
		free(t->e);
		*t = n;
	}
lookup:
	if (!t->size)
		return NULL;
	for (size_t s = ck_hash(k) & (t->size - 1);; s = (s + 1) & (t->size - 1)) {
		struct ck_ent *e = &t->e[s];
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

static void problem(struct ck *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void problem(struct ck *c, const char *fmt, ...)
{
	va_list ap;

	c->rep->errors++;
	if (!c->rep->out)
		return;
	va_start(ap, fmt);
	fputs("check: ", c->rep->out);
	vfprintf(c->rep->out, fmt, ap);
	fputc('\n', c->rep->out);
	va_end(ap);
}

static int walk(struct ck *c, uint64_t bytenr, uint64_t mirror, uint64_t gen,
		int level, const struct arb_key *lo, const struct arb_key *hi,
		bool is_root, uint64_t tree);

static void collect_leaf(struct ck *c, struct arb_node *n, bool own)
{
	struct arb_key k;

	for (uint32_t i = 0; i < arb_nritems(n); i++) {
		const struct arb_file_extent *fe;
		struct ck_ent *e;
		uint64_t key[4];

		arb_node_key(n, (int)i, &k);
		if (k.type != ARB_EXTENT_DATA)
			continue;
		if (arb_item_size(n, (int)i) < sizeof(*fe)) {
			fe = arb_item_ptr(n, (int)i);
			if (own &&
			    (arb_item_size(n, (int)i) < ARB_FILE_EXTENT_INLINE_HDR ||
			     arb_file_extent_f_type(fe) != ARB_FILE_EXTENT_INLINE))
				problem(c, "leaf %llu: short file extent item "
					   "(%llu,%llu)",
					(unsigned long long)n->bytenr,
					(unsigned long long)k.objectid,
					(unsigned long long)k.offset);
			continue;
		}
		fe = arb_item_ptr(n, (int)i);
		if (arb_file_extent_f_type(fe) == ARB_FILE_EXTENT_INLINE ||
		    arb_file_extent_f_disk_bytenr(fe) == 0)
			continue;
		key[0] = arb_file_extent_f_disk_bytenr(fe);
		key[1] = key[2] = key[3] = 0;
		if (!mine(c, key[0]))
			continue;
		e = ck_get(&c->data, key, true);
		if (!e)
			continue;
		e->count++;
		e->num_bytes = arb_file_extent_f_disk_num_bytes(fe);
		key[1] = arb_node_owner(n);
		key[2] = k.objectid;
		key[3] = k.offset - arb_file_extent_f_offset(fe);
		e = ck_get(&c->drefs, key, true);
		if (e)
			e->count++;
	}
}

static void collect_roots(struct ck *c, struct arb_node *n, bool own)
{
	struct arb_key k;

	for (uint32_t i = 0; i < arb_nritems(n); i++) {
		const struct arb_root_item *ri;
		arb_node_key(n, (int)i, &k);
		if (k.type != ARB_ROOT_ITEM)
			continue;
		if (arb_item_size(n, (int)i) != sizeof(*ri)) {
			/* a newer format, most likely: its tree is not
			 * walked, so its nodes are reported as leaks too */
			if (own)
				problem(c, "ROOT_ITEM of tree %llu has size %u, "
					   "this version knows %zu: its tree is "
					   "not checked",
					(unsigned long long)k.objectid,
					arb_item_size(n, (int)i), sizeof(*ri));
			continue;
		}
		ri = arb_item_ptr(n, (int)i);
		walk(c, arb_root_item_r_bytenr(ri), arb_root_item_r_mirror(ri),
		     arb_root_item_r_generation(ri), arb_root_item_r_level(ri),
		     NULL, NULL, true, k.objectid);
	}
}

/*
 * Read both copies of a committed node straight from the device: each must
 * validate (against the pointer's generation and level) and they must be
 * identical.  A first copy that arb_node_read healed reads good by now.
 */
static void check_copies(struct ck *c, struct arb_node *n, uint64_t mirror,
			 uint64_t gen, int level, uint64_t tree)
{
	struct arb_vol *vol = c->vol;
	const char *why = NULL;
	int ret[2];

	if (n->flags & ARB_NODE_DIRTY)
		return; /* not written yet */
	if (!c->buf[0]) {
		c->buf[0] = malloc(vol->nodesize);
		c->buf[1] = malloc(vol->nodesize);
		if (!c->buf[0] || !c->buf[1])
			return;
	}
	ret[0] = arb_node_read_copy(vol, c->buf[0], n->bytenr, n->bytenr, gen,
				    level, &why);
	if (ret[0])
		problem(c, "tree %llu: node %llu: first copy bad: %s",
			(unsigned long long)tree, (unsigned long long)n->bytenr,
			why);
	if (!mirror)
		return;
	ret[1] = arb_node_read_copy(vol, c->buf[1], mirror, n->bytenr, gen,
				    level, &why);
	if (ret[1])
		problem(c, "tree %llu: node %llu: second copy at %llu bad: %s",
			(unsigned long long)tree, (unsigned long long)n->bytenr,
			(unsigned long long)mirror, why);
	else if (!ret[0] && memcmp(c->buf[0], c->buf[1], vol->nodesize))
		problem(c, "tree %llu: node %llu: second copy at %llu differs "
			   "from the first",
			(unsigned long long)tree, (unsigned long long)n->bytenr,
			(unsigned long long)mirror);
}

static int walk(struct ck *c, uint64_t bytenr, uint64_t mirror, uint64_t gen,
		int level, const struct arb_key *lo, const struct arb_key *hi,
		bool is_root, uint64_t tree)
{
	struct arb_vol *vol = c->vol;
	uint64_t key[4] = { bytenr, 0, 0, 0 };
	bool own = mine(c, bytenr);
	struct ck_ent *e = NULL;
	struct arb_node *n;
	struct arb_key k, first, last;
	int ret;

	if (own) {
		e = ck_get(&c->nodes, key, true);
		if (!e)
			return -ENOMEM;
		e->count++;
		if (e->visited) {
			if (e->mirror != mirror)
				problem(c, "node %llu: pointers name different "
					   "second copies (%llu, %llu)",
					(unsigned long long)bytenr,
					(unsigned long long)e->mirror,
					(unsigned long long)mirror);
			return 0;
		}
		e->visited = true;
		e->mirror = mirror;
		arb_check_seen_test_set(&c->seen, bytenr);
	} else if (arb_check_seen_test_set(&c->seen, bytenr)) {
		return 0;
	}
	c->done++;
	ck_progress(c, false);
	if (!own)
		goto read;
	if ((vol->meta_copies > 1) != (mirror != 0))
		problem(c, "tree %llu: node %llu: %s second copy on a volume "
			   "with %u cop%s of metadata",
			(unsigned long long)tree, (unsigned long long)bytenr,
			mirror ? "a" : "no", vol->meta_copies,
			vol->meta_copies > 1 ? "ies" : "y");
read:
	ret = arb_node_read(vol, bytenr, mirror, gen, level, &n);
	if (ret) {
		if (own)
			problem(c, "tree %llu: node %llu unreadable (%s)",
				(unsigned long long)tree,
				(unsigned long long)bytenr, strerror(-ret));
		return 0;
	}
	if (!own)
		goto descend;
	c->rep->nodes++;
	check_copies(c, n, mirror, gen, level, tree);
	e->owner = arb_node_owner(n);
	e->level = arb_level(n);
	if (arb_nritems(n) == 0 && !is_root)
		problem(c, "node %llu: empty non-root node",
			(unsigned long long)bytenr);
	if (arb_nritems(n)) {
		arb_node_key(n, 0, &first);
		arb_node_key(n, (int)arb_nritems(n) - 1, &last);
		if (lo && arb_key_cmp(&first, lo) != 0)
			problem(c, "node %llu: first key (%llu,%u,%llu) differs "
				   "from its parent's key",
				(unsigned long long)bytenr,
				(unsigned long long)first.objectid, first.type,
				(unsigned long long)first.offset);
		if (hi && arb_key_cmp(&last, hi) >= 0)
			problem(c, "node %llu: last key not below the parent's "
				   "next key",
				(unsigned long long)bytenr);
	}
descend:
	if (level == 0) {
		if (own)
			c->rep->items += arb_nritems(n);
		collect_leaf(c, n, own);
		if (tree == ARB_ROOT_TREE_ID)
			collect_roots(c, n, own);
	} else {
		for (uint32_t i = 0; i < arb_nritems(n); i++) {
			struct arb_key nk;
			arb_node_key(n, (int)i, &k);
			if (i + 1 < arb_nritems(n))
				arb_node_key(n, (int)i + 1, &nk);
			walk(c, arb_child_bytenr(n, (int)i),
			     arb_child_mirror(n, (int)i),
			     arb_child_gen(n, (int)i), level - 1, &k,
			     i + 1 < arb_nritems(n) ? &nk : hi, false, tree);
		}
	}
	arb_node_put(vol, n);
	return 0;
}

static void add_range(struct ck *c, uint64_t start, uint64_t len)
{
	if (c->nr_ranges == c->cap_ranges) {
		size_t cap = c->cap_ranges ? c->cap_ranges * 2 : 1024;
		void *p = realloc(c->ranges, cap * sizeof(*c->ranges));
		if (!p) {
			c->io_error = -ENOMEM;
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
		if (r->start < prev_end)
			problem(c, "allocated range %llu+%llu overlaps the "
				   "previous one",
				(unsigned long long)r->start,
				(unsigned long long)r->len);
		if (r->start + r->len > prev_end)
			prev_end = r->start + r->len;
	}
	c->prev_end = prev_end;
	c->nr_ranges = 0;
}

/*
 * The extent items of the part [lo, hi) against the tables of the walk.
 * The scan covers the whole tree: the second copy of a tree block lies
 * anywhere, and its range belongs to the part that holds its address.
 */
static void check_extents(struct ck *c)
{
	struct arb_vol *vol = c->vol;
	struct arb_iter it;
	struct arb_key k = { 0, 0, 0 };
	/* the run of consecutive back-reference keys being walked */
	struct arb_key run = { 0, 0, 0 };
	uint64_t run_start = 0;
	int ret;

	arb_iter_init(&it, vol->extent_root);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		uint64_t key[4] = { 0, 0, 0, 0 };
		struct ck_ent *e;
		bool own;

		arb_iter_key(&it, &k);
		own = mine(c, k.objectid);
		if (own)
			c->rep->items++;
		if (k.type == ARB_EXTENT_DATA_REF) {
			const struct arb_extent_data_ref *r = arb_iter_data(&it);
			uint64_t home;
			if (arb_key_cmp(&k, &run) != 0)
				run_start = k.offset;
			run = k;
			run.offset++;
			if (!own)
				continue;
			if (arb_iter_size(&it) != sizeof(*r)) {
				problem(c, "extent %llu: bad data ref size",
					(unsigned long long)k.objectid);
				continue;
			}
			key[0] = k.objectid;
			key[1] = arb_extent_data_ref_d_root(r);
			key[2] = arb_extent_data_ref_d_objectid(r);
			key[3] = arb_extent_data_ref_d_offset(r);
			home = arb_data_ref_hash(key[1], key[2], key[3]);
			if (!arb_data_ref_reachable(home, k.offset, run_start))
				problem(c,
					"extent %llu: back-reference (root %llu, "
					"inode %llu, offset %llu) at key offset "
					"%llu, where a lookup from its hash %llu "
					"does not reach",
					(unsigned long long)k.objectid,
					(unsigned long long)key[1],
					(unsigned long long)key[2],
					(unsigned long long)key[3],
					(unsigned long long)k.offset,
					(unsigned long long)home);
			e = ck_get(&c->drefs, key, false);
			if (!e || e->count != arb_extent_data_ref_d_count(r))
				problem(c,
					"extent %llu: back-reference (root %llu, "
					"inode %llu, offset %llu) count %u, "
					"expected %llu",
					(unsigned long long)k.objectid,
					(unsigned long long)key[1],
					(unsigned long long)key[2],
					(unsigned long long)key[3],
					arb_extent_data_ref_d_count(r),
					(unsigned long long)(e ? e->count : 0));
			if (e)
				e->matched = true;
			continue;
		}
		if (k.type != ARB_EXTENT_ITEM) {
			if (own)
				problem(c, "extent tree: unexpected item type %u",
					k.type);
			continue;
		}
		const struct arb_extent_item *ei = arb_iter_data(&it);
		uint64_t refs, flags;
		if (arb_iter_size(&it) < sizeof(*ei)) {
			if (own)
				problem(c, "extent %llu: item too small",
					(unsigned long long)k.objectid);
			continue;
		}
		refs = arb_extent_item_e_refs(ei);
		flags = arb_extent_item_e_flags(ei);
		if (!own) {
			/* only the second copy of a reached tree block, if it
			 * lies in this part (the walk marked what it reached) */
			const struct arb_tree_block_ref *tr =
				(const void *)(ei + 1);
			uint64_t m;
			if (!(flags & ARB_EXTENT_FLAG_TREE_BLOCK) ||
			    arb_iter_size(&it) < sizeof(*ei) + sizeof(*tr) ||
			    k.offset != vol->nodesize)
				continue;
			m = arb_tree_block_ref_t_mirror(tr);
			if (m && mine(c, m) &&
			    arb_check_seen_test(&c->seen, k.objectid))
				add_range(c, m, vol->nodesize);
			continue;
		}
		add_range(c, k.objectid, k.offset);
		if (!arb_free_space_test(vol, k.objectid, k.offset, false))
			problem(c, "extent %llu+%llu is free in the space map",
				(unsigned long long)k.objectid,
				(unsigned long long)k.offset);
		c->used_sectors += k.offset / vol->sectorsize;
		key[0] = k.objectid;
		if (flags & ARB_EXTENT_FLAG_TREE_BLOCK) {
			const struct arb_tree_block_ref *tr = (const void *)(ei + 1);
			e = ck_get(&c->nodes, key, false);
			if (arb_iter_size(&it) < sizeof(*ei) + sizeof(*tr) ||
			    k.offset != vol->nodesize) {
				problem(c, "tree block extent %llu malformed",
					(unsigned long long)k.objectid);
				continue;
			}
			if (!e) {
				problem(c, "tree block %llu has %llu references "
					   "but no pointer reaches it (leak)",
					(unsigned long long)k.objectid,
					(unsigned long long)refs);
				continue;
			}
			e->matched = true;
			if (arb_tree_block_ref_t_mirror(tr)) {
				uint64_t m = arb_tree_block_ref_t_mirror(tr);
				if (mine(c, m))
					add_range(c, m, vol->nodesize);
				c->used_sectors +=
					vol->nodesize / vol->sectorsize;
				if (!arb_free_space_test(vol, m, vol->nodesize,
							 false))
					problem(c, "tree block %llu: second "
						   "copy %llu is free in the "
						   "space map",
						(unsigned long long)k.objectid,
						(unsigned long long)m);
			}
			if (e->visited &&
			    arb_tree_block_ref_t_mirror(tr) != e->mirror)
				problem(c, "tree block %llu: extent item names "
					   "second copy %llu, pointers %llu",
					(unsigned long long)k.objectid,
					(unsigned long long)
						arb_tree_block_ref_t_mirror(tr),
					(unsigned long long)e->mirror);
			if (e->count != refs)
				problem(c, "tree block %llu: %llu references "
					   "recorded, %llu exist",
					(unsigned long long)k.objectid,
					(unsigned long long)refs,
					(unsigned long long)e->count);
			if (e->visited && e->owner &&
			    (arb_tree_block_ref_t_owner(tr) != e->owner ||
			     arb_tree_block_ref_t_level(tr) != e->level))
				problem(c, "tree block %llu: back-reference "
					   "owner %llu level %u, node says "
					   "%llu/%d",
					(unsigned long long)k.objectid,
					(unsigned long long)
						arb_tree_block_ref_t_owner(tr),
					arb_tree_block_ref_t_level(tr),
					(unsigned long long)e->owner, e->level);
		} else if (flags & ARB_EXTENT_FLAG_DATA) {
			e = ck_get(&c->data, key, false);
			if (!e) {
				problem(c, "data extent %llu has %llu references "
					   "but no file points at it (leak)",
					(unsigned long long)k.objectid,
					(unsigned long long)refs);
				continue;
			}
			e->matched = true;
			if (e->count != refs)
				problem(c, "data extent %llu: %llu references "
					   "recorded, %llu exist",
					(unsigned long long)k.objectid,
					(unsigned long long)refs,
					(unsigned long long)e->count);
			if (e->num_bytes != k.offset)
				problem(c, "data extent %llu: length %llu, file "
					   "extents say %llu",
					(unsigned long long)k.objectid,
					(unsigned long long)k.offset,
					(unsigned long long)e->num_bytes);
		} else {
			problem(c, "extent %llu: unknown flags %llx",
				(unsigned long long)k.objectid,
				(unsigned long long)flags);
		}
	}
	arb_iter_release(&it);
	if (ret < 0 && !c->extent_err) {
		problem(c, "extent tree unreadable (%s)", strerror(-ret));
		c->extent_err = true;
	}
	check_overlaps(c);

	for (size_t i = 0; i < c->nodes.size; i++) {
		struct ck_ent *e = &c->nodes.e[i];
		if (e->k[0] && !e->matched)
			problem(c, "tree block %llu is referenced but has no "
				   "extent item",
				(unsigned long long)e->k[0]);
	}
	for (size_t i = 0; i < c->data.size; i++) {
		struct ck_ent *e = &c->data.e[i];
		if (e->k[0] && !e->matched)
			problem(c, "data extent %llu is referenced but has no "
				   "extent item",
				(unsigned long long)e->k[0]);
	}
	for (size_t i = 0; i < c->drefs.size; i++) {
		struct ck_ent *e = &c->drefs.e[i];
		if (e->k[0] && !e->matched)
			problem(c, "data extent %llu: missing back-reference "
				   "(root %llu, inode %llu, offset %llu)",
				(unsigned long long)e->k[0],
				(unsigned long long)e->k[1],
				(unsigned long long)e->k[2],
				(unsigned long long)e->k[3]);
	}
}

/* the map marks exactly the extents (and the reserved head) */
static void check_space_map(struct ck *c)
{
	struct arb_vol *vol = c->vol;
	/* freed blocks that data reads outside the lock may still read
	 * stay used a little longer (alloc.c, grace lists) */
	uint64_t map_used = vol->total_bytes / vol->sectorsize -
			    arb_free_bytes(vol) / vol->sectorsize -
			    ARB_DATA_START / vol->sectorsize -
			    arb_free_space_grace_bytes(vol) / vol->sectorsize;

	if (!vol->running && map_used != c->used_sectors)
		problem(c, "free space map: %llu sectors used, extent tree "
			   "covers %llu",
			(unsigned long long)map_used,
			(unsigned long long)c->used_sectors);
}

static void ck_table_clear(struct ck_table *t)
{
	if (t->e)
		memset(t->e, 0, t->size * sizeof(*t->e));
	t->used = 0;
}

/* ---- parts ---------------------------------------------------------------- */

int arb_check_plan_make(struct arb_vol *vol, uint64_t budget,
			struct arb_check_plan *p)
{
	uint64_t per_part = budget / ARB_CHECK_ENTRY_BYTES, in_part = 0;
	uint64_t last = 0;
	size_t cap = 8;
	struct arb_iter it;
	struct arb_key k = { 0, 0, 0 };
	int ret;

	memset(p, 0, sizeof(*p));
	p->bound = malloc(cap * sizeof(*p->bound));
	if (!p->bound)
		return -ENOMEM;
	p->bound[0] = 0;
	if (!per_part)
		per_part = 1;
	arb_iter_init(&it, vol->extent_root);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		arb_iter_key(&it, &k);
		if (k.type == ARB_EXTENT_DATA_REF) {
			p->refs++;
		} else if (k.type == ARB_EXTENT_ITEM &&
			   arb_iter_size(&it) >= sizeof(struct arb_extent_item)) {
			const struct arb_extent_item *ei = arb_iter_data(&it);
			if (arb_extent_item_e_flags(ei) &
			    ARB_EXTENT_FLAG_TREE_BLOCK) {
				p->nodes++;
			} else {
				p->data++;
				p->data_bytes += k.offset;
			}
		}
		/* cut only between extents: an extent and its references
		 * (same objectid) stay in one part */
		if (budget && in_part >= per_part && k.objectid != last &&
		    p->nparts + 1 < ARB_CHECK_MAX_PARTS) {
			if (p->nparts + 2 > cap) {
				uint64_t *n;
				cap *= 2;
				n = realloc(p->bound, cap * sizeof(*n));
				if (!n) {
					arb_iter_release(&it);
					arb_check_plan_free(p);
					return -ENOMEM;
				}
				p->bound = n;
			}
			p->bound[++p->nparts] = k.objectid;
			in_part = 0;
		}
		in_part++;
		last = k.objectid;
	}
	arb_iter_release(&it);
	if (ret < 0)
		p->nparts = 0; /* unreadable: one part, the checkers say why */
	p->bound[++p->nparts] = UINT64_MAX;
	return 0;
}

void arb_check_plan_free(struct arb_check_plan *p)
{
	free(p->bound);
	memset(p, 0, sizeof(*p));
}

int arb_check_seen_init(struct arb_vol *vol, struct arb_check_seen *s)
{
	s->sectorsize = vol->sectorsize;
	s->nbits = vol->total_bytes / vol->sectorsize;
	s->bits = calloc((s->nbits + 63) / 64, sizeof(uint64_t));
	return s->bits ? 0 : -ENOMEM;
}

bool arb_check_seen_test(const struct arb_check_seen *s, uint64_t addr)
{
	uint64_t b = addr / s->sectorsize;

	if (addr % s->sectorsize || b >= s->nbits)
		return false;
	return s->bits[b / 64] >> (b % 64) & 1;
}

bool arb_check_seen_test_set(struct arb_check_seen *s, uint64_t addr)
{
	uint64_t b = addr / s->sectorsize;

	if (addr % s->sectorsize || b >= s->nbits)
		return false;
	if (s->bits[b / 64] >> (b % 64) & 1)
		return true;
	s->bits[b / 64] |= 1ULL << (b % 64);
	return false;
}

void arb_check_seen_clear(struct arb_check_seen *s)
{
	memset(s->bits, 0, (s->nbits + 63) / 64 * sizeof(uint64_t));
}

void arb_check_seen_free(struct arb_check_seen *s)
{
	free(s->bits);
	s->bits = NULL;
}

int arb_check_vol(struct arb_vol *vol, struct arb_check_report *rep)
{
	struct arb_check_report dummy = { 0 };
	struct arb_check_plan plan;
	struct ck c = { 0 };
	int ret;

	if (!rep)
		rep = &dummy;
	c.vol = vol;
	c.rep = rep;
	c.prev_end = ARB_DATA_START;
	ret = arb_check_plan_make(vol, rep->budget, &plan);
	if (ret)
		return ret;
	ret = arb_check_seen_init(vol, &c.seen);
	if (ret) {
		arb_check_plan_free(&plan);
		return ret;
	}
	rep->parts = plan.nparts;
	c.total = plan.nodes * plan.nparts;
	for (unsigned part = 0; part < plan.nparts; part++) {
		c.lo = plan.bound[part];
		c.hi = plan.bound[part + 1];
		snprintf(c.phase, sizeof(c.phase), "structure, part %u/%u",
			 part + 1, plan.nparts);
		ck_progress(&c, true);
		arb_check_seen_clear(&c.seen);
		ck_table_clear(&c.nodes);
		ck_table_clear(&c.data);
		ck_table_clear(&c.drefs);
		/* the superblock's pointer to the root tree */
		walk(&c, vol->tree_root->node->bytenr,
		     vol->tree_root->node->mirror,
		     arb_node_gen(vol->tree_root->node),
		     arb_level(vol->tree_root->node), NULL, NULL, true,
		     ARB_ROOT_TREE_ID);
		check_extents(&c);
	}
	check_space_map(&c);
	if (c.io_error)
		problem(&c, "checker: out of memory");
	arb_check_plan_free(&plan);
	arb_check_seen_free(&c.seen);
	free(c.buf[0]);
	free(c.buf[1]);
	free(c.ranges);
	free(c.nodes.e);
	free(c.data.e);
	free(c.drefs.e);
	return rep->errors ? -EUCLEAN : 0;
}
