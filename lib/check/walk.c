/* SPDX-License-Identifier: MIT */
/*
 * walk.c - the checker's one walk: every tree from the superblock, each
 * node read once per part, for the core's check (arb_check_vol, text
 * lines), fsck (check_walk_records, named records) and repair
 * (fs_check_extents).
 *
 * Checks, per node, for the committed state (or, with a transaction
 * running, the in-memory one):
 *   - node-unreadable: it reads and validates (checksum, uuid, address,
 *     level, generation, key order, item bounds); one that does not makes
 *     the picture incomplete: repair refuses
 *   - node-copy-bad: both copies (duplicated metadata) read, validate and
 *     are identical
 *   - node-second-copy: a second copy exactly when the volume keeps two,
 *     and every pointer to the node names the same one
 *   - node-empty, node-key-bounds: only a root may be empty; a child's
 *     first key equals its parent's key for it and its keys stay below
 *     the parent's next key
 *   - bad-file-extent: a file extent item too short for its type
 *   - newer-format: a ROOT_ITEM of a size this code does not know (its
 *     tree cannot be walked: incomplete, and repair refuses)
 *   - a tree being dropped in batches (DROP_PROGRESS): only what is not
 *     released yet is walked and counted; a progress that does not read
 *     or names a key not in the tree makes the picture incomplete
 * Collects, in one set of tables (reftab.c) for the passes after it:
 *   - per tree node: pointers to it (parents, root items, superblock),
 *     its header's owner and level, the second copy its pointers name
 *   - per data extent: the REG/PREALLOC file extent items pointing into
 *     it, its length, whether a REG one does, the first inode using it
 *   - per (data extent, leaf owner, inode, file offset - extent offset):
 *     how many file extent items
 * then, per part, extents.c compares the extent tree with the tables and
 * csums.c reads the data; after the parts, the space map and the
 * checksum items.
 *
 * In parts (a memory budget, arb_check_plan_make): the walk and the
 * passes run once per part of the disk address space; the tables hold
 * only the nodes, data extents and back-references whose address lies in
 * the part, every other check is made in the part that holds the node or
 * extent it is about, and a bitmap of seen nodes keeps each node read
 * and descended once per walk.  The problems found are the same whatever
 * the number of parts (their order is not).
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "check_int.h"
#include "items/items.h"

struct arb_problem *ck_problem(struct ck *c, enum arb_problem_id id,
			       uint64_t ino, uint64_t addr, const char *fmt,
			       ...)
{
	struct arb_problem *p = NULL;
	va_list ap;

	c->errors++;
	if (c->rep)
		c->rep->errors++;
	if (c->r)
		p = fs_problem_add(c->r, id, ino);
	if (!p) {
		p = &c->dummy;
		memset(p, 0, sizeof(*p));
		p->id = id;
		p->ino = ino;
	}
	p->addr = addr;
	va_start(ap, fmt);
	vsnprintf(p->detail, sizeof(p->detail), fmt, ap);
	va_end(ap);
	if (c->r)
		fs_problem_print(c->out, p);
	else if (c->out)
		fprintf(c->out, "check: %s\n", p->detail);
	return p;
}

void ck_progress(struct ck *c, bool force)
{
	uint64_t checked;

	if (!c->progress || (!force && (c->done & 255)))
		return;
	checked = c->r ? c->r->nodes + c->r->sectors
		       : c->rep->nodes + c->rep->items;
	c->progress(c->progress_arg, c->phase, c->done, c->total, checked);
}

void ck_incomplete(struct ck *c)
{
	c->incomplete = true;
	if (c->r)
		c->r->incomplete = true;
}

/* a partly dropped tree: the key and level its DROP_PROGRESS names */
struct ck_drop {
	struct arb_key key;
	int level;
};

static void walk(struct ck *c, uint64_t bytenr, uint64_t mirror, uint64_t gen,
		 int level, const struct arb_key *lo, const struct arb_key *hi,
		 bool is_root, uint64_t tree, const struct ck_drop *drop);

/*
 * A ROOT_ITEM of a size this code does not know: most likely a newer
 * arborfs grew the struct.  Skipping the tree would make every node and
 * data extent it holds look leaked, and repair would free them; so the
 * picture is incomplete, and repair refuses.
 */
static void root_item_unknown(struct ck *c, struct arb_node *n, bool own,
			      uint64_t tree, uint32_t size)
{
	ck_incomplete(c);
	if (c->r)
		c->r->newer_format = true;
	if (own)
		ck_problem(c, ARB_PB_NEWER_FORMAT, 0, n->bytenr,
			   "ROOT_ITEM of tree %llu has size %u, this fsck knows "
			   "%zu: refusing to repair, use a newer fsck.arborfs",
			   (unsigned long long)tree, size,
			   sizeof(struct arb_root_item));
}

/* a file extent item: count its data extent and back-reference */
static void collect_file_extent(struct ck *c, struct arb_node *n, int slot,
				const struct arb_key *k, bool own)
{
	const struct arb_file_extent *fe = arb_item_ptr(n, slot);
	uint32_t size = arb_item_size(n, slot);
	uint64_t key[4];
	struct ck_ent *e;

	if (size < sizeof(*fe)) {
		if (own && (size < ARB_FILE_EXTENT_INLINE_HDR ||
			    arb_file_extent_f_type(fe) != ARB_FILE_EXTENT_INLINE))
			ck_problem(c, ARB_PB_FILE_EXTENT, k->objectid, n->bytenr,
				   "leaf %llu: short file extent item "
				   "(%llu,%llu)",
				   (unsigned long long)n->bytenr,
				   (unsigned long long)k->objectid,
				   (unsigned long long)k->offset);
		return;
	}
	if (arb_file_extent_f_type(fe) == ARB_FILE_EXTENT_INLINE ||
	    arb_file_extent_f_disk_bytenr(fe) == 0)
		return;
	key[0] = arb_file_extent_f_disk_bytenr(fe);
	key[1] = key[2] = key[3] = 0;
	if (!ck_mine(c, key[0]))
		return;
	e = ck_tab_get(&c->data, key, true);
	if (!e) {
		c->oom = true;
		return;
	}
	e->count++;
	e->num_bytes = arb_file_extent_f_disk_num_bytes(fe);
	if (arb_file_extent_f_type(fe) == ARB_FILE_EXTENT_REG)
		e->reg = true;
	if (!e->owner)
		e->owner = k->objectid;
	key[1] = arb_node_owner(n);
	key[2] = k->objectid;
	key[3] = k->offset - arb_file_extent_f_offset(fe);
	e = ck_tab_get(&c->drefs, key, true);
	if (e)
		e->count++;
	else
		c->oom = true;
}

/*
 * Item k of the committed root tree, the one the walk follows (see
 * ck_walk_trees), copied into buf (at most max bytes): its size, -ENOENT,
 * or an error.
 */
static int committed_lookup(struct ck *c, const struct arb_key *k, void *buf,
			    uint32_t max)
{
	struct arb_vol *vol = c->vol;
	const struct arb_super *sb = &vol->super;
	uint64_t bytenr = arb_super_s_root(sb);
	uint64_t mirror = arb_super_s_root_mirror(sb);
	uint64_t gen = arb_super_s_root_generation(sb);
	int level = arb_super_s_root_level(sb), ret = -ENOENT, s;
	struct arb_node *n;
	struct arb_key nk = { 0, 0, 0 };

	for (;;) {
		ret = arb_node_read(vol, bytenr, mirror, gen, level, &n);
		if (ret)
			return ret;
		/* the last slot with a key <= k */
		for (s = (int)arb_nritems(n) - 1; s >= 0; s--) {
			arb_node_key(n, s, &nk);
			if (arb_key_cmp(&nk, k) <= 0)
				break;
		}
		if (level == 0 || s < 0)
			break;
		bytenr = arb_child_bytenr(n, s);
		mirror = arb_child_mirror(n, s);
		gen = arb_child_gen(n, s);
		level--;
		arb_node_put(vol, n);
	}
	ret = -ENOENT;
	if (level == 0 && s >= 0 && arb_key_cmp(&nk, k) == 0) {
		ret = (int)arb_item_size(n, s);
		memcpy(buf, arb_item_ptr(n, s),
		       (uint32_t)ret < max ? (uint32_t)ret : max);
	}
	arb_node_put(vol, n);
	return ret;
}

/*
 * The DROP_PROGRESS of tree id, if any, into *d (level 0: none).  False
 * when the tree cannot be walked: a progress this code cannot read (a
 * newer format, or malformed, or at a level above the root's: then the
 * picture is incomplete, and repair refuses).
 */
static bool root_drop(struct ck *c, struct arb_node *n, bool own,
		      uint64_t tree, const struct arb_root_item *ri,
		      struct ck_drop *d)
{
	struct arb_key k = { tree, ARB_DROP_PROGRESS, 0 };
	struct arb_drop_progress dp;
	const char *why = NULL;
	int ret, v = 0;

	memset(d, 0, sizeof(*d));
	ret = committed_lookup(c, &k, &dp, sizeof(dp));
	if (ret == -ENOENT)
		return true;
	if (ret >= 0)
		v = arb_item_validate(&k, &dp, (uint32_t)ret, &why);
	if (ret >= 0 && !v &&
	    arb_drop_progress_d_level(&dp) > arb_root_item_r_level(ri)) {
		v = -EUCLEAN;
		why = "level above the root's";
	}
	if (ret < 0 || v) {
		ck_incomplete(c);
		if (c->r && v == ARB_ITEM_NEWER)
			c->r->newer_format = true;
		if (own)
			ck_problem(c, v == ARB_ITEM_NEWER ? ARB_PB_NEWER_FORMAT
							  : ARB_PB_TREE,
				   0, n->bytenr,
				   "tree %llu: drop progress unreadable: %s",
				   (unsigned long long)tree,
				   ret < 0 ? strerror(-ret) : why);
		return false;
	}
	arb_key_from_disk(&d->key, &dp.d_key);
	d->level = arb_drop_progress_d_level(&dp);
	return true;
}

static void collect_leaf(struct ck *c, struct arb_node *n, bool own,
			 uint64_t tree)
{
	for (uint32_t i = 0; i < arb_nritems(n); i++) {
		struct ck_drop drop;
		struct arb_key k;

		arb_node_key(n, (int)i, &k);
		if (k.type == ARB_EXTENT_DATA) {
			collect_file_extent(c, n, (int)i, &k, own);
		} else if (tree == ARB_ROOT_TREE_ID && k.type == ARB_ROOT_ITEM) {
			const struct arb_root_item *ri = arb_item_ptr(n, (int)i);
			uint32_t size = arb_item_size(n, (int)i);

			if (size != sizeof(*ri)) {
				root_item_unknown(c, n, own, k.objectid, size);
				continue;
			}
			if (!root_drop(c, n, own, k.objectid, ri, &drop))
				continue;
			walk(c, arb_root_item_r_bytenr(ri),
			     arb_root_item_r_mirror(ri),
			     arb_root_item_r_generation(ri),
			     arb_root_item_r_level(ri), NULL, NULL, true,
			     k.objectid, drop.level ? &drop : NULL);
		}
	}
}

static void copy_bad(struct ck *c, struct arb_node *n, uint64_t tree,
		     const char *why)
{
	ck_problem(c, ARB_PB_NODE_COPY, 0, n->bytenr,
		   "tree %llu: node %llu: first copy bad: %s",
		   (unsigned long long)tree, (unsigned long long)n->bytenr,
		   why);
}

/*
 * Both copies of a committed node straight from the device: each must
 * validate (against the pointer's generation and level) and they must be
 * identical.  A copy whose bytes are those of the node as read (which
 * validated against the same address, generation and level) is good:
 * only one that differs is validated on its own, to say why.  The first
 * copy is not read again when the node was just read from it (a cache
 * miss that did not fall back on the second copy).  A first copy that
 * arb_node_read healed reads good by now.
 */
static void check_copies(struct ck *c, struct arb_node *n, uint64_t mirror,
			 uint64_t gen, int level, uint64_t tree, bool fresh)
{
	struct arb_vol *vol = c->vol;
	const char *why = NULL;
	bool same[2] = { fresh, false };
	int ret[2] = { 0, 0 };

	if (n->flags & ARB_NODE_DIRTY)
		return; /* not written yet */
	if (!c->buf[0]) {
		c->buf[0] = malloc(vol->nodesize);
		c->buf[1] = malloc(vol->nodesize);
		if (!c->buf[0] || !c->buf[1]) {
			c->oom = true;
			return;
		}
	}
	if (!fresh) {
		ret[0] = arb_dev_read(vol->dev, c->buf[0], vol->nodesize,
				      n->bytenr, ARB_IO_NODE);
		same[0] = !ret[0] &&
			  !memcmp(c->buf[0], n->data, vol->nodesize);
		if (!same[0]) {
			ret[0] = arb_node_read_copy(vol, c->buf[0], n->bytenr,
						    n->bytenr, gen, level,
						    &why);
			if (ret[0])
				copy_bad(c, n, tree, why);
		}
	}
	if (!mirror)
		return;
	ret[1] = arb_dev_read(vol->dev, c->buf[1], vol->nodesize, mirror,
			      ARB_IO_NODE);
	same[1] = !ret[1] && !memcmp(c->buf[1], n->data, vol->nodesize);
	if (same[1])
		ret[1] = 0;
	else
		ret[1] = arb_node_read_copy(vol, c->buf[1], mirror, n->bytenr,
					    gen, level, &why);
	if (ret[1])
		ck_problem(c, ARB_PB_NODE_COPY, 0, n->bytenr,
			   "tree %llu: node %llu: second copy at %llu bad: %s",
			   (unsigned long long)tree,
			   (unsigned long long)n->bytenr,
			   (unsigned long long)mirror, why);
	else if (!ret[0] && !(same[0] && same[1]) &&
		 (same[0] != same[1] ||
		  memcmp(c->buf[0], c->buf[1], vol->nodesize)))
		ck_problem(c, ARB_PB_NODE_COPY, 0, n->bytenr,
			   "tree %llu: node %llu: second copy at %llu differs "
			   "from the first",
			   (unsigned long long)tree,
			   (unsigned long long)n->bytenr,
			   (unsigned long long)mirror);
}

/* what the node says of itself against its pointer: copies, keys */
static void check_node(struct ck *c, struct arb_node *n, uint64_t mirror,
		       uint64_t gen, int level, const struct arb_key *lo,
		       const struct arb_key *hi, bool is_root, uint64_t tree,
		       bool fresh)
{
	struct arb_key first, last;
	uint64_t bytenr = n->bytenr;

	check_copies(c, n, mirror, gen, level, tree, fresh);
	if (arb_nritems(n) == 0 && !is_root)
		ck_problem(c, ARB_PB_NODE_EMPTY, 0, bytenr,
			   "node %llu: empty non-root node",
			   (unsigned long long)bytenr);
	if (!arb_nritems(n))
		return;
	arb_node_key(n, 0, &first);
	arb_node_key(n, (int)arb_nritems(n) - 1, &last);
	if (lo && arb_key_cmp(&first, lo) != 0)
		ck_problem(c, ARB_PB_NODE_KEYS, 0, bytenr,
			   "node %llu: first key (%llu,%u,%llu) differs from "
			   "its parent's key",
			   (unsigned long long)bytenr,
			   (unsigned long long)first.objectid, first.type,
			   (unsigned long long)first.offset);
	if (hi && arb_key_cmp(&last, hi) >= 0)
		ck_problem(c, ARB_PB_NODE_KEYS, 0, bytenr,
			   "node %llu: last key not below the parent's next "
			   "key",
			   (unsigned long long)bytenr);
}

/*
 * The second copies of the children of n that lie in the part, which the
 * copies check reads straight from the device, in runs of adjacent ones
 * (the first copies: arb_node_readahead, child by child).
 */
static void readahead_copies(struct ck *c, struct arb_node *n)
{
	uint32_t ns = c->vol->nodesize;
	uint64_t start = 0, len = 0;

	if (c->vol->meta_copies < 2 || !c->vol->dev->ops->readahead)
		return;
	for (uint32_t i = 0; i < arb_nritems(n); i++) {
		uint64_t m = arb_child_mirror(n, (int)i);

		if (!m || !ck_mine(c, arb_child_bytenr(n, (int)i)))
			continue;
		if (len && m == start + len && len < (1u << 20)) {
			len += ns;
			continue;
		}
		if (len)
			arb_dev_readahead(c->vol->dev, start, len);
		start = m;
		len = ns;
	}
	if (len)
		arb_dev_readahead(c->vol->dev, start, len);
}

/*
 * In a partly dropped tree (drop), the pointers already released: those
 * before the progress key in the node at its level, and in the nodes
 * above it those before the one leading to it.  They are neither counted
 * nor followed (what they pointed at may be freed and reused).  The slot
 * of n to start at, and *on the one on the progress key's path (-1 none).
 */
static uint32_t drop_first(struct ck *c, struct arb_node *n, int level,
			   const struct ck_drop *drop, uint64_t tree, int *on)
{
	uint32_t i, nr = arb_nritems(n);
	struct arb_key k;

	*on = -1;
	if (!drop)
		return 0;
	for (i = 0; i < nr; i++) {
		arb_node_key(n, (int)i, &k);
		if (arb_key_cmp(&k, &drop->key) > 0)
			break;
	}
	/* i: the first slot after the key */
	if (i == 0)
		goto bad;
	if (level == drop->level) {
		/* the key itself, never the first of its node */
		arb_node_key(n, (int)i - 1, &k);
		if (i == 1 || arb_key_cmp(&k, &drop->key) != 0)
			goto bad;
		return i - 1;
	}
	*on = (int)i - 1;
	return i - 1;
bad:
	ck_problem(c, ARB_PB_TREE, 0, n->bytenr,
		   "tree %llu: drop progress key (%llu,%u,%llu) at level %d "
		   "not found in node %llu",
		   (unsigned long long)tree,
		   (unsigned long long)drop->key.objectid, drop->key.type,
		   (unsigned long long)drop->key.offset, drop->level,
		   (unsigned long long)n->bytenr);
	ck_incomplete(c);
	return nr;
}

static void walk(struct ck *c, uint64_t bytenr, uint64_t mirror, uint64_t gen,
		 int level, const struct arb_key *lo, const struct arb_key *hi,
		 bool is_root, uint64_t tree, const struct ck_drop *drop)
{
	struct arb_vol *vol = c->vol;
	uint64_t key[4] = { bytenr, 0, 0, 0 };
	uint64_t misses, healed;
	bool own = ck_mine(c, bytenr);
	struct ck_ent *e = NULL;
	struct arb_node *n;
	int ret;

	if (own) {
		e = ck_tab_get(&c->nodes, key, true);
		if (!e) {
			c->oom = true;
			return;
		}
		e->count++;
		if (e->visited) {
			if (e->mirror != mirror)
				ck_problem(c, ARB_PB_NODE_MIRROR, 0, bytenr,
					   "node %llu: pointers name different "
					   "second copies (%llu, %llu)",
					   (unsigned long long)bytenr,
					   (unsigned long long)e->mirror,
					   (unsigned long long)mirror);
			return;
		}
		e->visited = true;
		e->mirror = mirror;
		arb_check_seen_test_set(&c->seen, bytenr);
	} else if (arb_check_seen_test_set(&c->seen, bytenr)) {
		return;
	}
	c->done++;
	ck_progress(c, false);
	if (own && (vol->meta_copies > 1) != (mirror != 0))
		ck_problem(c, ARB_PB_NODE_MIRROR, 0, bytenr,
			   "tree %llu: node %llu: %s second copy on a volume "
			   "with %u cop%s of metadata",
			   (unsigned long long)tree, (unsigned long long)bytenr,
			   mirror ? "a" : "no", vol->meta_copies,
			   vol->meta_copies > 1 ? "ies" : "y");
	misses = vol->cache.misses;
	healed = vol->nr_healed;
	ret = arb_node_read(vol, bytenr, mirror, gen, level, &n);
	if (ret) {
		if (own)
			ck_problem(c, ARB_PB_NODE_BAD, 0, bytenr,
				   "tree %llu: node %llu (level %d) "
				   "unreadable: %s",
				   (unsigned long long)tree,
				   (unsigned long long)bytenr, level,
				   strerror(-ret));
		ck_incomplete(c);
		return;
	}
	if (own) {
		if (c->r)
			c->r->nodes++;
		if (c->rep)
			c->rep->nodes++;
		/* just read from the first copy: it is what the node holds */
		check_node(c, n, mirror, gen, level, lo, hi, is_root, tree,
			   vol->cache.misses == misses + 1 &&
				   vol->nr_healed == healed);
		e->owner = arb_node_owner(n);
		e->level = arb_level(n);
	}
	if (level == 0) {
		if (own) {
			if (c->r)
				c->r->items += arb_nritems(n);
			if (c->rep)
				c->rep->items += arb_nritems(n);
		}
		collect_leaf(c, n, own, tree);
	} else {
		int on;
		uint32_t first = drop_first(c, n, level, drop, tree, &on);

		readahead_copies(c, n);
		for (uint32_t i = first; i < arb_nritems(n); i++) {
			struct arb_key k, nk;
			bool last = i + 1 == arb_nritems(n);

			arb_node_readahead(vol, n, (int)i, true);
			arb_node_key(n, (int)i, &k);
			if (!last)
				arb_node_key(n, (int)i + 1, &nk);
			walk(c, arb_child_bytenr(n, (int)i),
			     arb_child_mirror(n, (int)i),
			     arb_child_gen(n, (int)i), level - 1, &k,
			     last ? hi : &nk, false, tree,
			     (int)i == on ? drop : NULL);
		}
	}
	arb_node_put(vol, n);
}

/*
 * From the superblock's pointer to the root tree: the last committed
 * one.  The extent tree changes only at a commit (delayed references),
 * so on a mounted filesystem with a transaction running, the committed
 * trees are what it counts; the root tree's root in memory may already
 * be a copy whose reference is still delayed (a rename of a subvolume
 * link changes the root tree without committing).  ROOT_ITEMs of the
 * other trees are written at a commit too: below the committed root they
 * agree with it.
 */
void ck_walk_trees(struct ck *c)
{
	const struct arb_super *sb = &c->vol->super;

	walk(c, arb_super_s_root(sb), arb_super_s_root_mirror(sb),
	     arb_super_s_root_generation(sb), arb_super_s_root_level(sb),
	     NULL, NULL, true, ARB_ROOT_TREE_ID, NULL);
}

static int cmp_exp(const void *a, const void *b)
{
	const struct ck_ent *x = *(const struct ck_ent *const *)a;
	const struct ck_ent *y = *(const struct ck_ent *const *)b;

	for (int i = 0; i < 4; i++)
		if (x->k[i] != y->k[i])
			return x->k[i] < y->k[i] ? -1 : 1;
	return 0;
}

/* the expected back-references of the part, sorted for extents.c */
static int sort_expected(struct ck *c)
{
	void *n = realloc(c->exp, (c->drefs.used + 1) * sizeof(*c->exp));

	if (!n)
		return -ENOMEM;
	c->exp = n;
	c->nexp = 0;
	for (size_t i = 0; i < c->drefs.size; i++)
		if (c->drefs.e[i].k[0])
			c->exp[c->nexp++] = &c->drefs.e[i];
	qsort(c->exp, c->nexp, sizeof(*c->exp), cmp_exp);
	return 0;
}

/*
 * Every part: walk, extent tree, data; then what spans the parts.  With
 * c->fix, the fixes are applied (if the picture is complete).
 */
static int ck_run(struct ck *c, uint64_t budget, FILE *fix_out,
		  uint64_t *fixed)
{
	struct arb_vol *vol = c->vol;
	struct arb_check_plan plan;
	int ret;

	c->prev_end = ARB_DATA_START;
	ret = arb_check_plan_make(vol, budget, &plan);
	if (ret)
		return ret;
	ret = arb_check_seen_init(vol, &c->seen);
	if (ret) {
		arb_check_plan_free(&plan);
		return ret;
	}
	if (c->rep)
		c->rep->parts = plan.nparts;
	c->total = plan.nodes * plan.nparts;
	if (c->csums)
		c->total += plan.data_bytes / vol->sectorsize;
	for (unsigned part = 0; part < plan.nparts; part++) {
		c->lo = plan.bound[part];
		c->hi = plan.bound[part + 1];
		snprintf(c->phase, sizeof(c->phase), "trees, part %u/%u",
			 part + 1, plan.nparts);
		ck_progress(c, true);
		arb_check_seen_clear(&c->seen);
		ck_tab_clear(&c->nodes);
		ck_tab_clear(&c->data);
		ck_tab_clear(&c->drefs);
		c->ndext = 0;
		ck_walk_trees(c);
		ret = sort_expected(c);
		if (!ret)
			ret = ck_scan_extents(c);
		if (ret)
			goto out;
		if (c->csums)
			ck_check_data_csums(c);
	}
	ck_check_space_map(c);
	if (c->fs && !c->incomplete && !c->extent_err) {
		snprintf(c->phase, sizeof(c->phase), "checksum items");
		ck_progress(c, true);
		ret = ck_check_csum_items(c);
		if (ret) {
			ck_problem(c, ARB_PB_NODE_BAD, 0, 0,
				   "checksum or extent tree unreadable: %s",
				   strerror(-ret));
			ck_incomplete(c);
			ret = 0;
		}
	}
	if (c->oom)
		ck_problem(c, ARB_PB_TREE, 0, 0, "checker: out of memory");
	if (c->fix && !c->incomplete)
		ret = ck_apply_fixes(c, fix_out, fixed);
out:
	arb_check_plan_free(&plan);
	return ret;
}

static void ck_free(struct ck *c)
{
	arb_check_seen_free(&c->seen);
	ck_tab_free(&c->nodes);
	ck_tab_free(&c->data);
	ck_tab_free(&c->drefs);
	free(c->exp);
	free(c->ranges);
	free(c->dext);
	free(c->buf[0]);
	free(c->buf[1]);
	ck_extents_free(c);
}

int arb_check_vol(struct arb_vol *vol, struct arb_check_report *rep)
{
	struct arb_check_report dummy = { 0 };
	struct ck c;
	int ret;

	if (!rep)
		rep = &dummy;
	memset(&c, 0, sizeof(c));
	c.vol = vol;
	c.rep = rep;
	c.out = rep->out;
	c.progress = rep->progress;
	c.progress_arg = rep->progress_arg;
	ret = ck_run(&c, rep->budget, NULL, NULL);
	ck_free(&c);
	if (ret)
		return ret;
	return rep->errors ? -EUCLEAN : 0;
}

/* the check of fs as records in r (fix: repair's extent fixes) */
static int ck_run_fs(struct arb_fs *fs, struct arb_check_result *r, FILE *out,
		     bool csums, struct arb_txn *fix, FILE *fix_out,
		     uint64_t *fixed)
{
	struct ck c;
	int ret;

	memset(&c, 0, sizeof(c));
	c.vol = fs->vol;
	c.fs = fs;
	c.r = r;
	c.out = out;
	c.csums = csums;
	c.fix = fix;
	c.progress = fs->opts.check_progress;
	c.progress_arg = fs->opts.check_progress_arg;
	ret = ck_run(&c, fs->opts.check_memory, fix_out, fixed);
	ck_free(&c);
	return ret;
}

int check_walk_records(struct arb_fs *fs, struct arb_check_result *r,
		       FILE *out)
{
	return ck_run_fs(fs, r, out, true, NULL, NULL, NULL);
}

int fs_check_extents(struct arb_fs *fs, struct arb_check_result *r, FILE *out,
		     bool csums, struct arb_txn *fix, FILE *fix_out,
		     uint64_t *fixed)
{
	return ck_run_fs(fs, r, out, csums, fix, fix_out, fixed);
}
