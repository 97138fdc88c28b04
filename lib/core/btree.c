/* SPDX-License-Identifier: MIT */
/*
 * btree.c - the copy-on-write B+tree.
 *
 * Keys are (objectid, type, offset); leaves hold variable-size items, internal
 * nodes hold (key, child address, child generation).  Every internal key
 * equals the first key of its child subtree.
 *
 * Shadowing.  A node may be changed in place only when the running
 * transaction wrote it, its owner is the tree being changed and it is newer
 * than the tree's last clone (so it cannot be shared; for a clone made in
 * the running transaction itself, the nodes written before it carry
 * ARB_NODE_SHARED).  Anything else is
 * copied first (cow_node), and the copy replaces the original in the parent.
 * Reference counts follow Rodeh, "B-trees, Shadowing, and Clones" (2008):
 * a node's count is the number of parent pointers (or root items) that
 * reference it.  When a shared node (count > 1) is shadowed, the copy adds
 * one reference to each of its children (for a leaf: to each data extent its
 * file extent items point at) and the original loses one; when an unshared
 * node is shadowed its children simply change parent.  So a clone costs
 * O(1) and counts are pushed down lazily, one level per shadowing.
 *
 * Splits happen top-down during an insertion search (a full internal node
 * is split before descending into it; a leaf without room is split, then the
 * search restarts).  Before splitting a node that has a sibling under the
 * same parent, the search first tries to move entries into that sibling
 * (btrfs push_leaf_right/left, push_nodes_for_insert), then restarts: see
 * "pushes" below.  Merges happen bottom-up after a deletion: an empty node
 * is removed, a node under a quarter full is merged into a sibling when both
 * fit in one, and a root with a single child is replaced by that child.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uuid/uuid.h>

#include "core.h"

#define HDR ((uint32_t)sizeof(struct arb_node_header))
#define ITEM ((uint32_t)sizeof(struct arb_item))
#define PTR ((uint32_t)sizeof(struct arb_key_ptr))

void arb_path_init(struct arb_path *p)
{
	memset(p, 0, sizeof(*p));
}

void arb_path_release(struct arb_vol *vol, struct arb_path *p)
{
	for (int i = 0; i < ARB_MAX_LEVEL; i++) {
		if (p->nodes[i])
			arb_node_put(vol, p->nodes[i]);
		p->nodes[i] = NULL;
		p->slots[i] = 0;
	}
}

void arb_path_mark_dirty(struct arb_vol *vol, struct arb_path *p)
{
	arb_node_mark_dirty(vol, p->nodes[0]);
}

static void set_nritems(struct arb_node *n, uint32_t nr)
{
	arb_set_node_header_h_nritems(arb_hdr(n), nr);
}

/* 0 found (slot = the item), 1 not found (slot = first item > key) */
static int bin_search(const struct arb_node *n, const struct arb_key *key,
		      int *slot)
{
	int lo = 0, hi = (int)arb_nritems(n);
	struct arb_key k;

	while (lo < hi) {
		int mid = lo + (hi - lo) / 2, c;
		arb_node_key(n, mid, &k);
		c = arb_key_cmp(&k, key);
		if (c < 0) {
			lo = mid + 1;
		} else if (c > 0) {
			hi = mid;
		} else {
			*slot = mid;
			return 0;
		}
	}
	*slot = lo;
	return 1;
}

static uint32_t leaf_data_end(const struct arb_vol *vol,
			      const struct arb_node *leaf)
{
	uint32_t nr = arb_nritems(leaf);
	return nr ? arb_item_i_offset(arb_item_nr(leaf, nr - 1)) : vol->nodesize;
}

static uint32_t leaf_used(const struct arb_vol *vol, const struct arb_node *leaf)
{
	return arb_nritems(leaf) * ITEM + vol->nodesize - leaf_data_end(vol, leaf);
}

/* ---- node allocation and shadowing ------------------------------------- */

static int new_node(struct arb_txn *t, struct arb_root *root, int level,
		    struct arb_node **out)
{
	struct arb_vol *vol = t->vol;
	struct arb_node *n;
	uint64_t bytenr, mirror;
	int ret;

	ret = arb_alloc_tree_block(t, root->id, level, &bytenr, &mirror);
	if (ret)
		return ret;
	ret = arb_node_create(vol, bytenr, &n);
	if (ret)
		return arb_txn_fail(t, ret);
	n->mirror = mirror;
	memcpy(arb_hdr(n)->h_uuid, vol->uuid, ARB_UUID_SIZE);
	arb_set_node_header_h_bytenr(arb_hdr(n), bytenr);
	arb_set_node_header_h_generation(arb_hdr(n), t->transid);
	arb_set_node_header_h_owner(arb_hdr(n), root->id);
	arb_set_node_header_h_level(arb_hdr(n), (uint8_t)level);
	*out = n;
	return 0;
}

/*
 * A node of the running transaction is shared only if a clone of its tree
 * happened after it was written, in this same transaction: the clone marks
 * such nodes ARB_NODE_SHARED.  (Testing gen > last_snapshot instead, as for
 * older nodes, made every node of a tree cloned in this transaction
 * unwritable, even the copies made after the clone: cow_node then tripped
 * over its own fresh copy as a parent.)
 */
static bool node_writable(struct arb_txn *t, struct arb_root *root,
			  struct arb_node *n)
{
	return arb_node_gen(n) == t->transid &&
	       arb_node_owner(n) == root->id &&
	       !(n->flags & (ARB_NODE_STALE | ARB_NODE_SHARED));
}

/*
 * Make n (child of parent at pslot, or the root when parent is NULL)
 * writable.  *out receives the writable node with a pin of its own; n keeps
 * the caller's pin.
 */
static int cow_node(struct arb_txn *t, struct arb_root *root,
		    struct arb_node *n, struct arb_node *parent, int pslot,
		    struct arb_node **out)
{
	struct arb_vol *vol = t->vol;
	struct arb_node *c;
	uint64_t refs = 1, owner = arb_node_owner(n);
	int level = arb_level(n), ret;

	if (t->error)
		return t->error;
	if (node_writable(t, root, n)) {
		arb_node_mark_dirty(vol, n);
		arb_node_pin(n);
		*out = n;
		return 0;
	}
	if (arb_node_gen(n) <= root->last_snapshot || owner != root->id) {
		ret = arb_extent_refs(t, n->bytenr, &refs);
		if (ret)
			return arb_txn_fail(t, ret);
		if (refs == 0) {
			arb_log(ARB_LOG_ERR, "node %llu has no references",
				(unsigned long long)n->bytenr);
			return arb_txn_fail(t, -EUCLEAN);
		}
	}
	ret = new_node(t, root, level, &c);
	if (ret)
		return ret;
	memcpy(c->data + HDR, n->data + HDR, vol->nodesize - HDR);
	set_nritems(c, arb_nritems(n));

	if (refs > 1) {
		/* n stays for its other owners: c references n's children */
		if (level > 0) {
			for (uint32_t i = 0; i < arb_nritems(c); i++) {
				ret = arb_ref_tree_block(t, arb_child_bytenr(c, i),
							 0, level - 1, 1);
				if (ret)
					goto fail;
			}
		} else {
			ret = arb_leaf_data_refs(t, c, root->id, 1);
			if (ret)
				goto fail;
		}
	} else if (level == 0 && owner != root->id) {
		/* data back-references name the leaf's owner: move them */
		ret = arb_leaf_data_refs(t, n, owner, -1);
		if (!ret)
			ret = arb_leaf_data_refs(t, c, root->id, 1);
		if (ret)
			goto fail;
	}
	ret = arb_ref_tree_block(t, n->bytenr, owner, level, -1);
	if (ret)
		goto fail;

	if (parent) {
		struct arb_key_ptr *p = arb_ptr_nr(parent, pslot);
		ARB_ASSERT(node_writable(t, root, parent));
		arb_set_key_ptr_p_blockptr(p, c->bytenr);
		arb_set_key_ptr_p_generation(p, t->transid);
		arb_set_key_ptr_p_mirror(p, c->mirror);
		arb_node_mark_dirty(vol, parent);
	} else {
		arb_node_pin(c);
		arb_node_put(vol, root->node);
		root->node = c;
		root->dirty = true;
	}
	*out = c;
	return 0;
fail:
	arb_node_put(vol, c);
	return arb_txn_fail(t, ret);
}

/* Replace path->nodes[level] by a writable version (parent already is). */
static int cow_path_level(struct arb_txn *t, struct arb_root *root,
			  struct arb_path *p, int level)
{
	struct arb_node *n = p->nodes[level], *c;
	struct arb_node *parent = level + 1 < ARB_MAX_LEVEL ? p->nodes[level + 1]
							    : NULL;
	int ret;

	ret = cow_node(t, root, n, parent, parent ? p->slots[level + 1] : 0, &c);
	if (ret)
		return ret;
	arb_node_put(t->vol, n);
	p->nodes[level] = c;
	return 0;
}

/* After the first key of path->nodes[level] changed, fix ancestors' keys. */
static void fixup_low_keys(struct arb_vol *vol, struct arb_path *p, int level,
			   const struct arb_key *key)
{
	for (int i = level + 1; i < ARB_MAX_LEVEL && p->nodes[i]; i++) {
		int slot = p->slots[i];
		arb_key_to_disk(&arb_ptr_nr(p->nodes[i], slot)->p_key, key);
		arb_node_mark_dirty(vol, p->nodes[i]);
		if (slot != 0)
			break;
	}
}

/* Set the key of parent's pointer at slot (parent writable). */
static void set_ptr_key(struct arb_vol *vol, struct arb_node *parent, int slot,
			const struct arb_key *key)
{
	arb_key_to_disk(&arb_ptr_nr(parent, slot)->p_key, key);
	arb_node_mark_dirty(vol, parent);
}

/* Read the child at slot of parent (a sibling of a path node), pinned. */
static int read_child(struct arb_txn *t, struct arb_node *parent, int slot,
		      struct arb_node **out)
{
	int ret = arb_node_read(t->vol, arb_child_bytenr(parent, slot),
				arb_child_mirror(parent, slot),
				arb_child_gen(parent, slot), arb_level(parent) - 1,
				out);
	return ret ? arb_txn_fail(t, ret) : 0;
}

/* ---- raw node edits (node already writable) ----------------------------- */

static void ptr_insert(struct arb_vol *vol, struct arb_node *n, int slot,
		       const struct arb_key *key, const struct arb_node *child)
{
	uint32_t nr = arb_nritems(n);
	struct arb_key_ptr *p = arb_ptr_nr(n, slot);

	memmove(p + 1, p, (nr - slot) * PTR);
	arb_key_to_disk(&p->p_key, key);
	arb_set_key_ptr_p_blockptr(p, child->bytenr);
	arb_set_key_ptr_p_generation(p, arb_node_gen(child));
	arb_set_key_ptr_p_mirror(p, child->mirror);
	set_nritems(n, nr + 1);
	arb_node_mark_dirty(vol, n);
}

static void ptr_delete(struct arb_vol *vol, struct arb_node *n, int slot)
{
	uint32_t nr = arb_nritems(n);
	struct arb_key_ptr *p = arb_ptr_nr(n, slot);

	memmove(p, p + 1, (nr - slot - 1) * PTR);
	set_nritems(n, nr - 1);
	arb_node_mark_dirty(vol, n);
}

/* Make room for an item of size bytes at slot (the leaf has the room). */
static void leaf_insert(struct arb_vol *vol, struct arb_node *leaf, int slot,
			const struct arb_key *key, uint32_t size)
{
	uint32_t nr = arb_nritems(leaf);
	uint32_t data_end = leaf_data_end(vol, leaf);
	uint32_t old_end = slot == 0 ? vol->nodesize
				     : arb_item_i_offset(arb_item_nr(leaf, slot - 1));
	struct arb_item *it;

	if ((uint32_t)slot < nr) {
		/* the data of items slot.. moves down by size */
		memmove(leaf->data + data_end - size, leaf->data + data_end,
			old_end - data_end);
		for (uint32_t i = slot; i < nr; i++) {
			it = arb_item_nr(leaf, i);
			arb_set_item_i_offset(it, arb_item_i_offset(it) - size);
		}
		it = arb_item_nr(leaf, slot);
		memmove(it + 1, it, (nr - slot) * ITEM);
	}
	it = arb_item_nr(leaf, slot);
	arb_key_to_disk(&it->i_key, key);
	arb_set_item_i_offset(it, old_end - size);
	arb_set_item_i_size(it, size);
	set_nritems(leaf, nr + 1);
	arb_node_mark_dirty(vol, leaf);
}

static void leaf_delete(struct arb_vol *vol, struct arb_node *leaf, int slot,
			int count)
{
	uint32_t nr = arb_nritems(leaf);
	uint32_t data_end = leaf_data_end(vol, leaf);
	uint32_t last_off = arb_item_i_offset(arb_item_nr(leaf, slot + count - 1));
	uint32_t first_end = slot == 0 ? vol->nodesize
				       : arb_item_i_offset(arb_item_nr(leaf, slot - 1));
	uint32_t gap = first_end - last_off;

	if ((uint32_t)(slot + count) < nr) {
		memmove(leaf->data + data_end + gap, leaf->data + data_end,
			last_off - data_end);
		for (uint32_t i = slot + count; i < nr; i++) {
			struct arb_item *it = arb_item_nr(leaf, i);
			arb_set_item_i_offset(it, arb_item_i_offset(it) + gap);
		}
		memmove(arb_item_nr(leaf, slot), arb_item_nr(leaf, slot + count),
			(nr - slot - count) * ITEM);
	}
	set_nritems(leaf, nr - count);
	arb_node_mark_dirty(vol, leaf);
}

/*
 * Move items [first, first + count) of src to the front of dst (dst's items
 * shift right) or, with append, to its end; dst has the room.  The data
 * and the descriptors move as blocks: a push may move many small items.
 */
static void leaf_move(struct arb_vol *vol, struct arb_node *dst,
		      struct arb_node *src, int first, int count, bool append)
{
	uint32_t dnr = arb_nritems(dst), dend = leaf_data_end(vol, dst);
	uint32_t hi, lo, d, base, at = append ? dnr : 0;

	if (count <= 0)
		return;
	/* the moved items' data is [lo, hi) of src */
	hi = first == 0 ? vol->nodesize
			: arb_item_i_offset(arb_item_nr(src, first - 1));
	lo = arb_item_i_offset(arb_item_nr(src, first + count - 1));
	d = hi - lo;
	if (append) {
		base = dend;
	} else {
		base = vol->nodesize;
		memmove(dst->data + dend - d, dst->data + dend,
			vol->nodesize - dend);
		for (uint32_t i = 0; i < dnr; i++) {
			struct arb_item *it = arb_item_nr(dst, (int)i);
			arb_set_item_i_offset(it, arb_item_i_offset(it) - d);
		}
		memmove(arb_item_nr(dst, count), arb_item_nr(dst, 0), dnr * ITEM);
	}
	memcpy(dst->data + base - d, src->data + lo, d);
	memcpy(arb_item_nr(dst, (int)at), arb_item_nr(src, first),
	       (uint32_t)count * ITEM);
	for (int i = 0; i < count; i++) {
		struct arb_item *it = arb_item_nr(dst, (int)at + i);
		arb_set_item_i_offset(it, base - (hi - arb_item_i_offset(it)));
	}
	set_nritems(dst, dnr + (uint32_t)count);
	arb_node_mark_dirty(vol, dst);
	leaf_delete(vol, src, first, count);
}

/* ---- splits ------------------------------------------------------------ */

/* Put a new root above the current one. */
static int grow_root(struct arb_txn *t, struct arb_root *root,
		     struct arb_path *p)
{
	struct arb_node *old = root->node, *n;
	int level = arb_level(old);
	struct arb_key k;
	int ret;

	if (level + 1 >= ARB_MAX_LEVEL)
		return arb_txn_fail(t, -EOVERFLOW);
	ret = new_node(t, root, level + 1, &n);
	if (ret)
		return ret;
	arb_node_key(old, 0, &k);
	ptr_insert(t->vol, n, 0, &k, old);
	/* the root's reference moves from the root item to the new root: no
	 * count change for old */
	root->node = n; /* takes new_node's pin; old's pin goes to the path */
	root->dirty = true;
	arb_node_pin(n);
	p->nodes[level + 1] = n;
	p->slots[level + 1] = 0;
	arb_node_put(t->vol, old); /* the root's pin */
	return 0;
}

/* Split internal node p->nodes[level] in two; its parent has room. */
static int split_node(struct arb_txn *t, struct arb_root *root,
		      struct arb_path *p, int level)
{
	struct arb_vol *vol = t->vol;
	struct arb_node *n = p->nodes[level], *r;
	uint32_t nr, mid;
	struct arb_key k;
	int ret;

	if (n == root->node) {
		ret = grow_root(t, root, p);
		if (ret)
			return ret;
	}
	nr = arb_nritems(n);
	mid = nr / 2;
	ret = new_node(t, root, level, &r);
	if (ret)
		return ret;
	memcpy(arb_ptr_nr(r, 0), arb_ptr_nr(n, mid), (nr - mid) * PTR);
	set_nritems(r, nr - mid);
	set_nritems(n, mid);
	arb_node_mark_dirty(vol, n);
	arb_node_key(r, 0, &k);
	ptr_insert(vol, p->nodes[level + 1], p->slots[level + 1] + 1, &k, r);
	arb_node_put(vol, r);
	return 0;
}

/*
 * Split the leaf of the path so that an item of need bytes (data + header)
 * fits at p->slots[0].  May leave an empty leaf that the insertion then
 * fills.  The caller restarts its search afterwards.
 */
static int split_leaf(struct arb_txn *t, struct arb_root *root,
		      struct arb_path *p, uint32_t need)
{
	struct arb_vol *vol = t->vol;
	struct arb_node *l = p->nodes[0], *r;
	int nr = (int)arb_nritems(l), slot = p->slots[0], mid;
	uint32_t room = vol->nodesize - HDR, acc = 0, total = leaf_used(vol, l);
	struct arb_key k;
	int ret;

	if (l == root->node) {
		ret = grow_root(t, root, p);
		if (ret)
			return ret;
	}
	if (slot == nr) {
		mid = nr;
	} else if (slot == 0) {
		mid = 0;
	} else {
		/* balance bytes */
		for (mid = 0; mid < nr; mid++) {
			uint32_t sz = arb_item_size(l, mid) + ITEM;
			if (acc + sz > total / 2)
				break;
			acc += sz;
		}
		if (mid == 0)
			mid = 1;
		{
			uint32_t left = 0;
			for (int i = 0; i < mid; i++)
				left += arb_item_size(l, i) + ITEM;
			bool fits = slot <= mid ? left + need <= room
						: total - left + need <= room;
			if (!fits)
				mid = slot;
		}
	}
	ret = new_node(t, root, 0, &r);
	if (ret)
		return ret;
	if (mid < nr)
		leaf_move(vol, r, l, mid, nr - mid, true);
	if (mid == nr) {
		/* empty right leaf for an append: its key is the new item's,
		 * filled in by the caller's insertion (see insert_empty_item) */
		k = p->ins_key;
	} else {
		arb_node_key(r, 0, &k);
	}
	ptr_insert(vol, p->nodes[1], p->slots[1] + 1, &k, r);
	arb_node_put(vol, r);
	return 0;
}

/* ---- pushes ------------------------------------------------------------ */

/*
 * A split leaves two half-full nodes, and a node that gets no more
 * insertions stays half full.  Most insertions land in the middle of an fs
 * tree (the entries of each directory, inline extents written at commit
 * under older inodes), so before this most leaves stayed near half full.
 * So before splitting a node, the search moves entries into a sibling under
 * the same parent that has room, and splits only when neither sibling can
 * take enough.  It moves just enough, then more while that evens the two
 * nodes out, so that the next insertions there need no push.  A push never
 * empties a node, and moves only a leaf's items on the far side of the
 * insertion slot, so the new key stays in the leaf of the path; the search
 * then restarts (slots changed).  Moving entries between nodes of one tree
 * changes no reference count and no back-reference: tree blocks are counted
 * per parent pointer and their back-references name the tree; data
 * back-references name the tree, inode and offset.  Only shadowing the
 * sibling does, through cow_node as for any node the path changes.
 */

/*
 * How many items of l to move to sib so that need bytes fit in l: items
 * first, first + step, ... (at most max of them).  0 when sib cannot take
 * enough.
 */
static int push_count(struct arb_vol *vol, struct arb_node *l,
		      struct arb_node *sib, int first, int step, int max,
		      uint32_t need)
{
	uint32_t l_free = arb_leaf_free_space(vol, l);
	uint32_t sib_free = arb_leaf_free_space(vol, sib);
	uint32_t sib_used = leaf_used(vol, sib);
	uint32_t half = (leaf_used(vol, l) + need + sib_used) / 2;
	uint32_t moved = 0;
	int c;

	for (c = 0; c < max; c++) {
		uint32_t sz = arb_item_size(l, first + c * step) + ITEM;
		if (moved + sz > sib_free)
			break;
		if (l_free + moved >= need && sib_used + moved + sz > half)
			break;
		moved += sz;
	}
	return l_free + moved >= need ? c : 0;
}

/*
 * Move items of the path's leaf into its right (dir 1) or left (dir -1)
 * sibling so that need bytes fit at p->slots[0].  0 done, 1 no room there
 * (nothing changed), <0 error.
 */
static int push_leaf_dir(struct arb_txn *t, struct arb_root *root,
			 struct arb_path *p, int dir, uint32_t need)
{
	struct arb_vol *vol = t->vol;
	struct arb_node *l = p->nodes[0], *parent = p->nodes[1], *sib, *c;
	int nr = (int)arb_nritems(l), slot = p->slots[0];
	int sslot = p->slots[1] + dir, count, ret;
	struct arb_key k;

	if (sslot < 0 || (uint32_t)sslot >= arb_nritems(parent))
		return 1;
	ret = read_child(t, parent, sslot, &sib);
	if (ret)
		return ret;
	/* keep item 0 (right) or nr - 1 (left): a push never empties l */
	if (dir > 0)
		count = push_count(vol, l, sib, nr - 1, -1,
				   nr - (slot > 1 ? slot : 1), need);
	else
		count = push_count(vol, l, sib, 0, 1,
				   slot < nr - 1 ? slot : nr - 1, need);
	if (count == 0) {
		/* checked before shadowing: a useless push costs no block */
		arb_node_put(vol, sib);
		return 1;
	}
	ret = cow_node(t, root, sib, parent, sslot, &c);
	arb_node_put(vol, sib);
	if (ret)
		return ret;
	if (dir > 0) {
		leaf_move(vol, c, l, nr - count, count, false);
		arb_node_key(c, 0, &k);
	} else {
		leaf_move(vol, c, l, 0, count, true);
		arb_node_key(l, 0, &k);
	}
	/* the changed first key is never at parent slot 0 (a left sibling
	 * exists, or it is the right sibling's): ancestors keep theirs */
	set_ptr_key(vol, parent, dir > 0 ? sslot : p->slots[1], &k);
	arb_node_put(vol, c);
	return 0;
}

/* Make room for need bytes in the path's leaf from a sibling; as above. */
static int push_leaf(struct arb_txn *t, struct arb_root *root,
		     struct arb_path *p, uint32_t need)
{
	int ret = push_leaf_dir(t, root, p, 1, need);

	return ret == 1 ? push_leaf_dir(t, root, p, -1, need) : ret;
}

/* Move count pointers of n to the front (dir 1) or end (dir -1) of sib. */
static void ptr_move(struct arb_vol *vol, struct arb_node *sib,
		     struct arb_node *n, uint32_t count, int dir)
{
	uint32_t nr = arb_nritems(n), snr = arb_nritems(sib);

	if (dir > 0) {
		memmove(arb_ptr_nr(sib, (int)count), arb_ptr_nr(sib, 0),
			snr * PTR);
		memcpy(arb_ptr_nr(sib, 0), arb_ptr_nr(n, (int)(nr - count)),
		       count * PTR);
	} else {
		memcpy(arb_ptr_nr(sib, (int)snr), arb_ptr_nr(n, 0), count * PTR);
		memmove(arb_ptr_nr(n, 0), arb_ptr_nr(n, (int)count),
			(nr - count) * PTR);
	}
	set_nritems(sib, snr + count);
	set_nritems(n, nr - count);
	arb_node_mark_dirty(vol, sib);
	arb_node_mark_dirty(vol, n);
}

/*
 * Internal node p->nodes[level] is full: even it out with its right (dir 1)
 * or left (dir -1) sibling when both then stay below the split threshold.
 * 0 done, 1 no room there, <0 error.
 */
static int push_node_dir(struct arb_txn *t, struct arb_root *root,
			 struct arb_path *p, int level, int dir)
{
	struct arb_vol *vol = t->vol;
	struct arb_node *n = p->nodes[level], *parent = p->nodes[level + 1];
	struct arb_node *sib, *c;
	uint32_t nr = arb_nritems(n), full = arb_node_max_ptrs(vol) - 2, count;
	int pslot = p->slots[level + 1], sslot = pslot + dir, ret;
	struct arb_key k;

	if (sslot < 0 || (uint32_t)sslot >= arb_nritems(parent))
		return 1;
	ret = read_child(t, parent, sslot, &sib);
	if (ret)
		return ret;
	count = nr > arb_nritems(sib) ? (nr - arb_nritems(sib)) / 2 : 0;
	if (count == 0 || nr - count >= full ||
	    arb_nritems(sib) + count >= full) {
		arb_node_put(vol, sib);
		return 1;
	}
	ret = cow_node(t, root, sib, parent, sslot, &c);
	arb_node_put(vol, sib);
	if (ret)
		return ret;
	ptr_move(vol, c, n, count, dir);
	arb_node_key(dir > 0 ? c : n, 0, &k);
	set_ptr_key(vol, parent, dir > 0 ? sslot : pslot, &k);
	arb_node_put(vol, c);
	return 0;
}

static int push_node(struct arb_txn *t, struct arb_root *root,
		     struct arb_path *p, int level)
{
	int ret = push_node_dir(t, root, p, level, 1);

	return ret == 1 ? push_node_dir(t, root, p, level, -1) : ret;
}

/*
 * p->nodes[level] is full for the insertion (need bytes, for a leaf): push
 * to a sibling if that is the first try at this level in this search, else
 * (or when no sibling has room) split.  The caller restarts its search.
 */
static int make_room(struct arb_txn *t, struct arb_root *root,
		     struct arb_path *p, int level, unsigned *pushed,
		     uint32_t need)
{
	int ret = 1;

	if (p->nodes[level] != root->node && !(*pushed & 1u << level)) {
		*pushed |= 1u << level;
		ret = level ? push_node(t, root, p, level)
			    : push_leaf(t, root, p, need);
	}
	if (ret <= 0)
		return ret;
	return level ? split_node(t, root, p, level)
		     : split_leaf(t, root, p, need);
}

/* ---- search ------------------------------------------------------------ */

bool arb_path_ok(const struct arb_root *root, const struct arb_path *p,
		 const struct arb_key *key, int found, uint64_t cow_transid)
{
	int top = arb_level(root->node);
	struct arb_key k;

	if (p->nodes[top] != root->node)
		return false;
	for (int l = top; l >= 0; l--) {
		const struct arb_node *n = p->nodes[l];
		uint32_t nr = arb_nritems(n);
		int slot = p->slots[l];

		if (!n || arb_level(n) != l || slot < 0)
			return false;
		/* a search that copied the path owns every node of it */
		if (cow_transid && arb_node_gen(n) != cow_transid)
			return false;
		if (l == 0) {
			if ((uint32_t)slot > nr)
				return false;
			if (found == 0) {
				arb_node_key(n, slot, &k);
				return (uint32_t)slot < nr &&
				       arb_key_cmp(&k, key) == 0;
			}
			if ((uint32_t)slot < nr) {
				arb_node_key(n, slot, &k);
				if (arb_key_cmp(&k, key) <= 0)
					return false;
			}
			if (slot > 0) {
				arb_node_key(n, slot - 1, &k);
				if (arb_key_cmp(&k, key) >= 0)
					return false;
			}
			return true;
		}
		if ((uint32_t)slot >= nr ||
		    arb_child_bytenr(n, slot) != p->nodes[l - 1]->bytenr)
			return false;
		/* the child's range starts at or before the key, unless the
		 * key is before everything (slot 0) */
		arb_node_key(n, slot, &k);
		if (slot > 0 && arb_key_cmp(&k, key) > 0)
			return false;
	}
	return false;
}

int arb_search_slot(struct arb_txn *t, struct arb_root *root,
		    const struct arb_key *key, struct arb_path *p, int ins_len,
		    int cow)
{
	struct arb_vol *vol = root->vol;
	struct arb_node *n;
	/* levels that pushed to a sibling in this search: once each, so
	 * that the restarts end (a second time there, split) */
	unsigned pushed = 0;
	int level, slot, ret;

	if (cow && (!t || t->error))
		return t ? t->error : -EROFS;
	if (ins_len && !cow)
		return -EINVAL;
	if (ins_len > 0 && (uint32_t)ins_len > arb_max_item_size(vol))
		return -EOVERFLOW;
	if (ins_len > 0)
		p->ins_key = *key;
again:
	n = root->node;
	arb_node_pin(n);
	level = arb_level(n);
	p->nodes[level] = n;
	if (cow) {
		ret = cow_path_level(t, root, p, level);
		if (ret)
			goto err;
	}
	for (;;) {
		n = p->nodes[level];
		ret = bin_search(n, key, &slot);
		if (level == 0) {
			p->slots[0] = slot;
			/* split only for a real insertion: a split for a key
			 * that exists could leave an empty leaf behind */
			if (ins_len > 0 && ret == 1 &&
			    arb_leaf_free_space(vol, n) <
				    (uint32_t)ins_len + ITEM) {
				ret = make_room(t, root, p, 0, &pushed,
						(uint32_t)ins_len + ITEM);
				if (ret)
					goto err;
				arb_path_release(vol, p);
				goto again;
			}
			ARB_ASSERT(arb_path_ok(root, p, key, ret,
					       cow ? t->transid : 0));
			return ret;
		}
		if (ret != 0 && slot > 0)
			slot--;
		p->slots[level] = slot;
		if (ins_len > 0 &&
		    arb_nritems(n) >= arb_node_max_ptrs(vol) - 2) {
			ret = make_room(t, root, p, level, &pushed, 0);
			if (ret)
				goto err;
			arb_path_release(vol, p);
			goto again;
		}
		arb_node_readahead(vol, n, slot, false);
		ret = arb_node_read(vol, arb_child_bytenr(n, slot),
				    arb_child_mirror(n, slot),
				    arb_child_gen(n, slot), level - 1,
				    &p->nodes[level - 1]);
		if (ret)
			goto err;
		level--;
		if (cow) {
			ret = cow_path_level(t, root, p, level);
			if (ret)
				goto err;
		}
	}
err:
	arb_path_release(vol, p);
	return ret;
}

/* ---- insertion, deletion, resizing -------------------------------------- */

int arb_insert_empty_item(struct arb_txn *t, struct arb_root *root,
			  struct arb_path *p, const struct arb_key *key,
			  uint32_t size)
{
	struct arb_vol *vol = root->vol;
	int ret;

	ret = arb_search_slot(t, root, key, p, (int)(size ? size : 1), 1);
	if (ret <= 0) {
		if (ret == 0) {
			arb_path_release(vol, p);
			ret = -EEXIST;
		}
		return ret;
	}
	leaf_insert(vol, p->nodes[0], p->slots[0], key, size);
	if (p->slots[0] == 0)
		fixup_low_keys(vol, p, 0, key);
	return 0;
}

int arb_insert_item(struct arb_txn *t, struct arb_root *root,
		    const struct arb_key *key, const void *data, uint32_t size)
{
	struct arb_path p;
	int ret;

	arb_path_init(&p);
	ret = arb_insert_empty_item(t, root, &p, key, size);
	if (ret)
		return ret;
	if (size)
		memcpy(arb_item_ptr(p.nodes[0], p.slots[0]), data, size);
	arb_path_release(root->vol, &p);
	return 0;
}

static bool node_underfull(struct arb_vol *vol, struct arb_node *n)
{
	if (arb_level(n) == 0)
		return leaf_used(vol, n) < (vol->nodesize - HDR) / 4;
	return arb_nritems(n) < arb_node_max_ptrs(vol) / 4;
}

static uint32_t node_used(struct arb_vol *vol, struct arb_node *n)
{
	if (arb_level(n) == 0)
		return leaf_used(vol, n);
	return arb_nritems(n) * PTR;
}

/* Append every entry of src to dst (same level, dst writable). */
static void node_append(struct arb_vol *vol, struct arb_node *dst,
			struct arb_node *src)
{
	uint32_t nr = arb_nritems(src);

	if (arb_level(src) == 0) {
		leaf_move(vol, dst, src, 0, (int)nr, true);
		return;
	}
	memcpy(arb_ptr_nr(dst, arb_nritems(dst)), arb_ptr_nr(src, 0), nr * PTR);
	set_nritems(dst, arb_nritems(dst) + nr);
	set_nritems(src, 0);
	arb_node_mark_dirty(vol, dst);
	arb_node_mark_dirty(vol, src);
}

static int free_node(struct arb_txn *t, struct arb_node *n)
{
	return arb_ref_tree_block(t, n->bytenr, arb_node_owner(n), arb_level(n),
				  -1);
}

/* The root has one child: make the child the root, while that holds. */
static int collapse_root(struct arb_txn *t, struct arb_root *root)
{
	struct arb_vol *vol = root->vol;
	int ret;

	while (arb_level(root->node) > 0 && arb_nritems(root->node) == 1) {
		struct arb_node *old = root->node, *child, *c;
		ret = arb_node_read(vol, arb_child_bytenr(old, 0),
				    arb_child_mirror(old, 0),
				    arb_child_gen(old, 0), arb_level(old) - 1,
				    &child);
		if (ret)
			return arb_txn_fail(t, ret);
		/* a root node is never shared: shadow a shared child first */
		ret = cow_node(t, root, child, old, 0, &c);
		arb_node_put(vol, child);
		if (ret)
			return ret;
		root->node = c; /* takes c's pin */
		root->dirty = true;
		ret = free_node(t, old);
		arb_node_put(vol, old);
		if (ret)
			return arb_txn_fail(t, ret);
	}
	return 0;
}

/*
 * After a deletion in p->nodes[level]: remove it if empty, merge it with a
 * sibling if underfull, and go on with the parent.
 */
static int rebalance(struct arb_txn *t, struct arb_root *root,
		     struct arb_path *p, int level)
{
	struct arb_vol *vol = root->vol;
	struct arb_node *n = p->nodes[level], *parent, *sib, *c;
	struct arb_key k;
	int pslot, ret;

	if (n == root->node)
		return collapse_root(t, root);
	parent = p->nodes[level + 1];
	pslot = p->slots[level + 1];
	if (arb_nritems(n) == 0) {
		ptr_delete(vol, parent, pslot);
		ret = free_node(t, n);
		if (ret)
			return arb_txn_fail(t, ret);
		if (pslot == 0 && arb_nritems(parent)) {
			arb_node_key(parent, 0, &k);
			fixup_low_keys(vol, p, level + 1, &k);
		}
		return rebalance(t, root, p, level + 1);
	}
	if (!node_underfull(vol, n))
		return 0;
	if (pslot > 0) {
		ret = read_child(t, parent, pslot - 1, &sib);
		if (ret)
			return ret;
		ret = cow_node(t, root, sib, parent, pslot - 1, &c);
		arb_node_put(vol, sib);
		if (ret)
			return ret;
		if (node_used(vol, c) + node_used(vol, n) <= vol->nodesize - HDR) {
			node_append(vol, c, n);
			arb_node_put(vol, c);
			ptr_delete(vol, parent, pslot);
			ret = free_node(t, n);
			if (ret)
				return arb_txn_fail(t, ret);
			return rebalance(t, root, p, level + 1);
		}
		arb_node_put(vol, c);
	}
	if ((uint32_t)pslot + 1 < arb_nritems(parent)) {
		ret = read_child(t, parent, pslot + 1, &sib);
		if (ret)
			return ret;
		ret = cow_node(t, root, sib, parent, pslot + 1, &c);
		arb_node_put(vol, sib);
		if (ret)
			return ret;
		if (node_used(vol, c) + node_used(vol, n) <= vol->nodesize - HDR) {
			node_append(vol, n, c);
			ptr_delete(vol, parent, pslot + 1);
			ret = free_node(t, c);
			arb_node_put(vol, c);
			if (ret)
				return arb_txn_fail(t, ret);
			return rebalance(t, root, p, level + 1);
		}
		arb_node_put(vol, c);
	}
	return 0;
}

int arb_del_items(struct arb_txn *t, struct arb_root *root, struct arb_path *p,
		  int slot, int nr)
{
	struct arb_vol *vol = root->vol;
	struct arb_node *leaf = p->nodes[0];
	struct arb_key k;
	int ret;

	if (t->error) {
		ret = t->error;
		goto out;
	}
	if (nr <= 0 || slot < 0 || (uint32_t)(slot + nr) > arb_nritems(leaf)) {
		ret = -EINVAL;
		goto out;
	}
	ARB_ASSERT(node_writable(t, root, leaf));
	leaf_delete(vol, leaf, slot, nr);
	if (slot == 0 && arb_nritems(leaf)) {
		arb_node_key(leaf, 0, &k);
		fixup_low_keys(vol, p, 0, &k);
	}
	ret = rebalance(t, root, p, 0);
out:
	arb_path_release(vol, p);
	return ret;
}

int arb_del_item(struct arb_txn *t, struct arb_root *root,
		 const struct arb_key *key)
{
	struct arb_path p;
	int ret;

	arb_path_init(&p);
	ret = arb_search_slot(t, root, key, &p, -1, 1);
	if (ret) {
		arb_path_release(root->vol, &p);
		return ret > 0 ? -ENOENT : ret;
	}
	return arb_del_items(t, root, &p, p.slots[0], 1);
}

int arb_resize_item(struct arb_txn *t, struct arb_root *root,
		    struct arb_path *p, uint32_t new_size)
{
	struct arb_vol *vol = root->vol;
	struct arb_node *leaf = p->nodes[0];
	int slot = p->slots[0];
	uint32_t old = arb_item_size(leaf, slot);
	uint32_t data_end = leaf_data_end(vol, leaf), off;
	struct arb_key k;
	void *copy;
	int ret;

	if (t->error)
		return t->error;
	if (new_size > arb_max_item_size(vol))
		return -EOVERFLOW;
	if (new_size == old)
		return 0;
	off = arb_item_i_offset(arb_item_nr(leaf, slot));
	if (new_size < old) {
		uint32_t d = old - new_size;
		memmove(leaf->data + data_end + d, leaf->data + data_end,
			off + new_size - data_end);
		for (uint32_t i = slot; i < arb_nritems(leaf); i++) {
			struct arb_item *it = arb_item_nr(leaf, i);
			arb_set_item_i_offset(it, arb_item_i_offset(it) + d);
		}
		arb_set_item_i_size(arb_item_nr(leaf, slot), new_size);
		arb_node_mark_dirty(vol, leaf);
		return 0;
	}
	if (arb_leaf_free_space(vol, leaf) >= new_size - old) {
		uint32_t d = new_size - old;
		memmove(leaf->data + data_end - d, leaf->data + data_end,
			off + old - data_end);
		for (uint32_t i = slot; i < arb_nritems(leaf); i++) {
			struct arb_item *it = arb_item_nr(leaf, i);
			arb_set_item_i_offset(it, arb_item_i_offset(it) - d);
		}
		arb_set_item_i_size(arb_item_nr(leaf, slot), new_size);
		arb_node_mark_dirty(vol, leaf);
		return 0;
	}
	/* no room here: delete and insert again (the tree splits) */
	copy = malloc(old ? old : 1);
	if (!copy)
		return arb_txn_fail(t, -ENOMEM);
	memcpy(copy, arb_item_ptr(leaf, slot), old);
	arb_node_key(leaf, slot, &k);
	ret = arb_del_items(t, root, p, slot, 1);
	if (!ret)
		ret = arb_insert_empty_item(t, root, p, &k, new_size);
	if (!ret)
		memcpy(arb_item_ptr(p->nodes[0], p->slots[0]), copy, old);
	free(copy);
	return ret ? arb_txn_fail(t, ret) : 0;
}

int arb_update_item(struct arb_txn *t, struct arb_root *root,
		    const struct arb_key *key, const void *data, uint32_t size)
{
	struct arb_path p;
	int ret;

	arb_path_init(&p);
	ret = arb_search_slot(t, root, key, &p, 0, 1);
	if (ret) {
		arb_path_release(root->vol, &p);
		return ret > 0 ? -ENOENT : ret;
	}
	ret = arb_resize_item(t, root, &p, size);
	if (!ret) {
		memcpy(arb_item_ptr(p.nodes[0], p.slots[0]), data, size);
		arb_path_mark_dirty(root->vol, &p);
	}
	arb_path_release(root->vol, &p);
	return ret;
}

int arb_lookup_item(struct arb_root *root, const struct arb_key *key, void *buf,
		    uint32_t max)
{
	struct arb_path p;
	uint32_t size;
	int ret;

	arb_path_init(&p);
	ret = arb_search_slot(NULL, root, key, &p, 0, 0);
	if (ret == 0) {
		size = arb_item_size(p.nodes[0], p.slots[0]);
		memcpy(buf, arb_item_ptr(p.nodes[0], p.slots[0]),
		       size < max ? size : max);
		ret = (int)size;
	} else if (ret > 0) {
		ret = -ENOENT;
	}
	arb_path_release(root->vol, &p);
	return ret;
}

/* ---- walking leaves ----------------------------------------------------- */

/* the child slot of an internal node as arb_search_slot picks it */
static int child_slot(const struct arb_node *n, const struct arb_key *key)
{
	int slot;

	if (bin_search(n, key, &slot) != 0 && slot > 0)
		slot--;
	return slot;
}

void arb_prefetch_leaf(struct arb_root *root, const struct arb_key *key)
{
	arb_prefetch_range(root, key, key, 1);
}

void arb_prefetch_range(struct arb_root *root, const struct arb_key *lo,
			const struct arb_key *hi, int max)
{
	struct arb_vol *vol = root->vol;
	struct arb_node *n = root->node, *c;
	int level, slot;

	if (!vol->dev->ops->readahead || max < 1)
		return;
	arb_node_pin(n);
	for (level = arb_level(n); level > 0; level--) {
		slot = child_slot(n, lo);
		if (level == 1) {
			int last = child_slot(n, hi);

			if (last > slot + max - 1)
				last = slot + max - 1;
			arb_node_hint_children(vol, n, slot, last);
			break;
		}
		if (arb_node_read(vol, arb_child_bytenr(n, slot),
				  arb_child_mirror(n, slot),
				  arb_child_gen(n, slot), level - 1, &c))
			break;
		arb_node_put(vol, n);
		n = c;
	}
	arb_node_put(vol, n);
}

int arb_next_leaf(struct arb_root *root, struct arb_path *p)
{
	struct arb_vol *vol = root->vol;
	int level, slot, ret;

	for (level = 1; level < ARB_MAX_LEVEL; level++) {
		if (!p->nodes[level])
			return 1;
		slot = p->slots[level] + 1;
		if ((uint32_t)slot < arb_nritems(p->nodes[level]))
			break;
	}
	if (level == ARB_MAX_LEVEL)
		return 1;
	p->slots[level] = slot;
	for (; level > 0; level--) {
		struct arb_node *n = p->nodes[level], *c;
		slot = p->slots[level];
		/* a leaf walk: read the next leaves ahead (upper levels
		 * only when their misses come in order) */
		arb_node_readahead(vol, n, slot, level == 1);
		ret = arb_node_read(vol, arb_child_bytenr(n, slot),
				    arb_child_mirror(n, slot),
				    arb_child_gen(n, slot), level - 1, &c);
		if (ret)
			return ret;
		arb_node_put(vol, p->nodes[level - 1]);
		p->nodes[level - 1] = c;
		p->slots[level - 1] = 0;
	}
	return 0;
}

int arb_prev_leaf(struct arb_root *root, struct arb_path *p)
{
	struct arb_vol *vol = root->vol;
	int level, slot, ret;

	for (level = 1; level < ARB_MAX_LEVEL; level++) {
		if (!p->nodes[level])
			return 1;
		if (p->slots[level] > 0)
			break;
	}
	if (level == ARB_MAX_LEVEL)
		return 1;
	p->slots[level]--;
	for (; level > 0; level--) {
		struct arb_node *n = p->nodes[level], *c;
		slot = p->slots[level];
		ret = arb_node_read(vol, arb_child_bytenr(n, slot),
				    arb_child_mirror(n, slot),
				    arb_child_gen(n, slot), level - 1, &c);
		if (ret)
			return ret;
		arb_node_put(vol, p->nodes[level - 1]);
		p->nodes[level - 1] = c;
		p->slots[level - 1] = level - 1 > 0 ? (int)arb_nritems(c) - 1
						    : (int)arb_nritems(c) - 1;
	}
	return 0;
}

void arb_iter_init(struct arb_iter *it, struct arb_root *root)
{
	it->root = root;
	arb_path_init(&it->path);
	it->valid = false;
}

void arb_iter_release(struct arb_iter *it)
{
	arb_path_release(it->root->vol, &it->path);
	it->valid = false;
}

/* move forward while positioned past the end of a leaf */
static int iter_fix_forward(struct arb_iter *it)
{
	struct arb_path *p = &it->path;
	int ret;

	while ((uint32_t)p->slots[0] >= arb_nritems(p->nodes[0])) {
		ret = arb_next_leaf(it->root, p);
		if (ret)
			return ret;
	}
	return 0;
}

static int iter_fix_backward(struct arb_iter *it)
{
	struct arb_path *p = &it->path;
	int ret;

	while (p->slots[0] < 0) {
		ret = arb_prev_leaf(it->root, p);
		if (ret)
			return ret;
	}
	return 0;
}

static int iter_done(struct arb_iter *it, int ret)
{
	it->valid = ret == 0;
	if (ret)
		arb_path_release(it->root->vol, &it->path);
	return ret;
}

int arb_iter_seek(struct arb_iter *it, const struct arb_key *key)
{
	int ret;

	arb_path_release(it->root->vol, &it->path);
	ret = arb_search_slot(NULL, it->root, key, &it->path, 0, 0);
	if (ret < 0)
		return iter_done(it, ret);
	return iter_done(it, iter_fix_forward(it));
}

int arb_next_key_of(struct arb_root *root, struct arb_key *k)
{
	struct arb_key f;
	struct arb_iter it;
	int ret;

	arb_iter_init(&it, root);
	ret = arb_iter_seek(&it, k);
	if (ret == 0)
		arb_iter_key(&it, &f);
	arb_iter_release(&it);
	if (ret)
		return ret;
	if (f.objectid != k->objectid || f.type != k->type)
		return 1;
	*k = f;
	return 0;
}

int arb_iter_seek_le(struct arb_iter *it, const struct arb_key *key)
{
	int ret;

	arb_path_release(it->root->vol, &it->path);
	ret = arb_search_slot(NULL, it->root, key, &it->path, 0, 0);
	if (ret < 0)
		return iter_done(it, ret);
	if (ret == 1)
		it->path.slots[0]--;
	return iter_done(it, iter_fix_backward(it));
}

int arb_iter_next(struct arb_iter *it)
{
	if (!it->valid)
		return 1;
	it->path.slots[0]++;
	return iter_done(it, iter_fix_forward(it));
}

int arb_iter_prev(struct arb_iter *it)
{
	if (!it->valid)
		return 1;
	it->path.slots[0]--;
	return iter_done(it, iter_fix_backward(it));
}

void arb_iter_key(const struct arb_iter *it, struct arb_key *key)
{
	arb_node_key(it->path.nodes[0], it->path.slots[0], key);
}

void *arb_iter_data(const struct arb_iter *it)
{
	return arb_item_ptr(it->path.nodes[0], it->path.slots[0]);
}

uint32_t arb_iter_size(const struct arb_iter *it)
{
	return arb_item_size(it->path.nodes[0], it->path.slots[0]);
}

bool arb_iter_leaf_private(const struct arb_iter *it)
{
	const struct arb_node *n = it->path.nodes[0];

	/* (a node of the running transaction flagged ARB_NODE_SHARED has
	 * gen == last_snapshot: a clone in this transaction set it so) */
	return arb_node_gen(n) > it->root->last_snapshot &&
	       arb_node_owner(n) == it->root->id;
}

/* ---- roots -------------------------------------------------------------- */

static struct arb_root *root_alloc(struct arb_vol *vol, uint64_t id)
{
	struct arb_root *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->vol = vol;
	r->id = id;
	pthread_mutex_init(&r->lock, NULL);
	return r;
}

void arb_root_free(struct arb_vol *vol, struct arb_root *r)
{
	if (!r)
		return;
	if (r->node)
		arb_node_put(vol, r->node);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

static void root_fill_item(struct arb_root *r)
{
	arb_set_root_item_r_bytenr(&r->item, r->node->bytenr);
	arb_set_root_item_r_mirror(&r->item, r->node->mirror);
	arb_set_root_item_r_generation(&r->item, arb_node_gen(r->node));
	arb_set_root_item_r_level(&r->item, (uint8_t)arb_level(r->node));
	arb_set_root_item_r_last_snapshot(&r->item, r->last_snapshot);
}

/* Write the root item of every dirty root into the root tree. */
int arb_update_root_items(struct arb_txn *t)
{
	struct arb_vol *vol = t->vol;
	struct arb_key k = { 0, ARB_ROOT_ITEM, 0 };
	int ret;

	for (struct arb_root *r = vol->roots; r; r = r->next) {
		if (!r->dirty)
			continue;
		r->dirty = false;
		root_fill_item(r);
		k.objectid = r->id;
		ret = arb_update_item(t, vol->tree_root, &k, &r->item,
				      sizeof(r->item));
		if (ret)
			return arb_txn_fail(t, ret);
	}
	if (vol->extent_root->dirty) {
		vol->extent_root->dirty = false;
		root_fill_item(vol->extent_root);
		k.objectid = ARB_EXTENT_TREE_ID;
		ret = arb_update_item(t, vol->tree_root, &k,
				      &vol->extent_root->item,
				      sizeof(vol->extent_root->item));
		if (ret)
			return arb_txn_fail(t, ret);
	}
	return 0;
}

bool arb_roots_dirty(struct arb_vol *vol)
{
	if (vol->extent_root->dirty)
		return true;
	for (struct arb_root *r = vol->roots; r; r = r->next)
		if (r->dirty)
			return true;
	return false;
}

/* Load a root from its item (no list insertion). */
int arb_root_load(struct arb_vol *vol, uint64_t id,
		  const struct arb_root_item *item, struct arb_root **out)
{
	struct arb_root *r = root_alloc(vol, id);
	int ret;

	if (!r)
		return -ENOMEM;
	r->item = *item;
	r->last_snapshot = arb_root_item_r_last_snapshot(item);
	ret = arb_node_read(vol, arb_root_item_r_bytenr(item),
			    arb_root_item_r_mirror(item),
			    arb_root_item_r_generation(item),
			    arb_root_item_r_level(item), &r->node);
	if (ret) {
		arb_log(ARB_LOG_ERR, "cannot read the root of tree %llu",
			(unsigned long long)id);
		arb_root_free(vol, r);
		return ret;
	}
	if (arb_node_owner(r->node) != id) {
		arb_log(ARB_LOG_ERR, "root node of tree %llu has owner %llu",
			(unsigned long long)id,
			(unsigned long long)arb_node_owner(r->node));
		arb_root_free(vol, r);
		return -EUCLEAN;
	}
	*out = r;
	return 0;
}

int arb_root_get(struct arb_vol *vol, uint64_t id, struct arb_root **out)
{
	struct arb_key k = { id, ARB_ROOT_ITEM, 0 };
	struct arb_root_item item;
	struct arb_root *r;
	int ret;

	if (id == ARB_ROOT_TREE_ID) {
		*out = vol->tree_root;
		return 0;
	}
	if (id == ARB_EXTENT_TREE_ID) {
		*out = vol->extent_root;
		return 0;
	}
	for (r = vol->roots; r; r = r->next) {
		if (r->id == id) {
			*out = r;
			return 0;
		}
	}
	memset(&item, 0, sizeof(item));
	ret = arb_lookup_item(vol->tree_root, &k, &item, sizeof(item));
	if (ret < 0)
		return ret;
	if (ret != sizeof(item)) {
		arb_log(ARB_LOG_ERR, "root item of tree %llu has size %d",
			(unsigned long long)id, ret);
		return -EUCLEAN;
	}
	ret = arb_root_load(vol, id, &item, &r);
	if (ret)
		return ret;
	r->next = vol->roots;
	vol->roots = r;
	*out = r;
	return 0;
}

uint64_t arb_root_highest_objectid(const struct arb_root *r)
{
	return arb_root_item_r_highest_objectid(&r->item);
}

void arb_root_note_objectid(struct arb_txn *t, struct arb_root *r,
			    uint64_t id)
{
	/* the item is written by the commit of the running transaction */
	ARB_ASSERT(t->vol == r->vol && t->vol->running == t);
	if (id <= arb_root_item_r_highest_objectid(&r->item))
		return;
	arb_set_root_item_r_highest_objectid(&r->item, id);
	r->dirty = true;
}

bool arb_root_ensure_uuid(struct arb_txn *t, struct arb_root *r)
{
	static const uint8_t zero[ARB_UUID_SIZE];

	ARB_ASSERT(t->vol == r->vol && t->vol->running == t);
	if (memcmp(r->item.r_uuid, zero, ARB_UUID_SIZE))
		return false;
	uuid_generate(r->item.r_uuid);
	r->dirty = true;
	return true;
}

/*
 * Subvolume trees (the default fs tree, and ids from ARB_FIRST_SUBVOL_ID:
 * subvolumes and snapshots) carry a UUID of their own, so that a tree can
 * be named across filesystems (send/receive: "this stream applies to a
 * copy of tree U").  The core's own trees do not.
 */
static bool is_subvol_id(uint64_t id)
{
	return id == ARB_FS_TREE_ID || id >= ARB_FIRST_SUBVOL_ID;
}

/* r_otransid: the transaction that creates the tree (for a clone, the
 * one that clones it: the clone holds what its source held then) */
static int root_insert(struct arb_txn *t, struct arb_root *r)
{
	struct arb_vol *vol = t->vol;
	struct arb_key k = { r->id, ARB_ROOT_ITEM, 0 };
	int ret;

	arb_set_root_item_r_otransid(&r->item, t->transid);
	arb_set_root_item_r_refs(&r->item, 1);
	root_fill_item(r);
	ret = arb_insert_item(t, vol->tree_root, &k, &r->item, sizeof(r->item));
	if (ret)
		return ret == -EEXIST ? ret : arb_txn_fail(t, ret);
	r->next = vol->roots;
	vol->roots = r;
	return 0;
}

int arb_root_create(struct arb_txn *t, uint64_t id, struct arb_root **out)
{
	struct arb_vol *vol = t->vol;
	struct arb_root *r, *tmp;
	int ret;

	if (t->error)
		return t->error;
	if (id == ARB_ROOT_TREE_ID || id == ARB_EXTENT_TREE_ID ||
	    arb_root_get(vol, id, &tmp) == 0)
		return -EEXIST;
	r = root_alloc(vol, id);
	if (!r)
		return arb_txn_fail(t, -ENOMEM);
	ret = new_node(t, r, 0, &r->node);
	if (ret) {
		arb_root_free(vol, r);
		return ret;
	}
	if (is_subvol_id(id))
		uuid_generate(r->item.r_uuid);
	ret = root_insert(t, r);
	if (ret) {
		arb_root_free(vol, r);
		return arb_txn_fail(t, ret);
	}
	*out = r;
	return 0;
}

int arb_root_clone(struct arb_txn *t, struct arb_root *src, uint64_t new_id,
		   struct arb_root **out)
{
	struct arb_vol *vol = t->vol;
	struct arb_root *r, *tmp;
	struct arb_node *n = src->node;
	int level = arb_level(n), ret;

	if (t->error)
		return t->error;
	if (new_id == ARB_ROOT_TREE_ID || new_id == ARB_EXTENT_TREE_ID ||
	    arb_root_get(vol, new_id, &tmp) == 0)
		return -EEXIST;
	r = root_alloc(vol, new_id);
	if (!r)
		return arb_txn_fail(t, -ENOMEM);
	ret = new_node(t, r, level, &r->node);
	if (ret)
		goto fail;
	memcpy(r->node->data + HDR, n->data + HDR, vol->nodesize - HDR);
	set_nritems(r->node, arb_nritems(n));
	if (level > 0) {
		for (uint32_t i = 0; i < arb_nritems(n); i++) {
			ret = arb_ref_tree_block(t, arb_child_bytenr(n, i), 0,
						 level - 1, 1);
			if (ret)
				goto fail;
		}
	} else {
		ret = arb_leaf_data_refs(t, r->node, new_id, 1);
		if (ret)
			goto fail;
	}
	/* from now on every node of either tree may be shared: those of
	 * older transactions by last_snapshot, and the ones src got in this
	 * transaction by a flag (r->node, made above, is r's alone) */
	for (struct arb_node *d = vol->cache.dirty_head; d; d = d->dirty_next)
		if (arb_node_owner(d) == src->id && arb_node_gen(d) == t->transid)
			d->flags |= ARB_NODE_SHARED;
	src->last_snapshot = t->transid;
	src->dirty = true;
	r->last_snapshot = t->transid;
	/* a clone is a tree of its own: a new UUID, and the source's
	 * (0 when the source has none, as an old image's fs tree) */
	uuid_generate(r->item.r_uuid);
	memcpy(r->item.r_parent_uuid, src->item.r_uuid, ARB_UUID_SIZE);
	/* the clone holds src's objectids: new ones go above all of them */
	arb_set_root_item_r_highest_objectid(
		&r->item, arb_root_item_r_highest_objectid(&src->item));
	ret = root_insert(t, r);
	if (ret)
		goto fail;
	*out = r;
	return 0;
fail:
	arb_root_free(vol, r);
	return arb_txn_fail(t, ret);
}

/*
 * Dropping a tree, in batches (docs/design/subvol.md, "Deleting, and the
 * cleaner"; the progress item: format.h, DROP_PROGRESS).
 *
 * A depth-first walk releases the tree's pointers in key order.  A child
 * whose count is above 1 is shared with another tree: its count goes down
 * by one and the walk does not enter it.  A child counted once is the
 * dropped tree's alone: the walk enters it, releases its pointers (a
 * leaf's: its data references), then frees it.  Between batches the walk
 * stands in nodes it entered: counted once, reachable only from the
 * dropped tree, which nothing changes any more, so they and their keys
 * stay as they were, and the progress key finds them again.  Nodes not
 * entered yet may change counts meanwhile (another tree shadows a node
 * they share, or is dropped too): their count is read when the walk comes
 * to them, and either way each pointer is released exactly once.
 */
struct drop_walk {
	struct arb_node *nodes[ARB_MAX_LEVEL];
	int slots[ARB_MAX_LEVEL];
	int top, level;
	uint64_t seen, freed;
	/* arb_drop_budget.fetch */
	struct arb_drop_fetch *fetch;
};

/* last slot of internal node n with a key <= k; -1 when none */
static int slot_le(const struct arb_node *n, const struct arb_key *k)
{
	int lo = 0, hi = (int)arb_nritems(n) - 1, ret = -1;

	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2;
		struct arb_key mk;

		arb_node_key(n, mid, &mk);
		if (arb_key_cmp(&mk, k) <= 0) {
			ret = mid;
			lo = mid + 1;
		} else {
			hi = mid - 1;
		}
	}
	return ret;
}

int arb_root_drop_progress(struct arb_vol *vol, uint64_t id,
			   struct arb_drop_progress *dp)
{
	struct arb_key k = { id, ARB_DROP_PROGRESS, 0 };
	int ret;

	memset(dp, 0, sizeof(*dp));
	ret = arb_lookup_item(vol->tree_root, &k, dp, sizeof(*dp));
	if (ret == -ENOENT)
		return 1;
	if (ret < 0)
		return ret;
	if (ret != (int)sizeof(*dp) || arb_drop_progress_d_level(dp) < 1 ||
	    arb_drop_progress_d_level(dp) >= ARB_MAX_LEVEL) {
		arb_log(ARB_LOG_ERR,
			"tree %llu: drop progress of %d bytes, level %u",
			(unsigned long long)id, ret,
			arb_drop_progress_d_level(dp));
		return -EUCLEAN;
	}
	return 0;
}

static void drop_walk_release(struct arb_vol *vol, struct drop_walk *w)
{
	for (int l = w->level; l <= w->top; l++)
		if (w->nodes[l])
			arb_node_put(vol, w->nodes[l]);
	memset(w->nodes, 0, sizeof(w->nodes));
}

/* a node the walk stands in must be the dropped tree's alone */
static int drop_check_own(struct arb_txn *t, struct arb_root *root,
			  struct arb_node *n)
{
	uint64_t refs;
	int ret = arb_extent_refs(t, n->bytenr, &refs);

	if (ret)
		return ret;
	if (refs != 1) {
		arb_log(ARB_LOG_ERR,
			"tree %llu: drop progress passes node %llu counted %llu "
			"times, not once",
			(unsigned long long)root->id,
			(unsigned long long)n->bytenr, (unsigned long long)refs);
		return -EUCLEAN;
	}
	return 0;
}

/*
 * Stand the walk where the progress dp left it: from the root, the nodes
 * holding its key down to its level, the slot of that key in the lowest.
 */
static int drop_walk_resume(struct arb_txn *t, struct arb_root *root,
			    const struct arb_drop_progress *dp,
			    struct drop_walk *w)
{
	struct arb_vol *vol = t->vol;
	struct arb_node *n = root->node;
	int want = arb_drop_progress_d_level(dp), l = w->top, s, ret;
	struct arb_key k, sk;

	arb_key_from_disk(&k, &dp->d_key);
	if (want > w->top) {
		arb_log(ARB_LOG_ERR, "tree %llu: drop progress at level %d, "
			"the root's is %d", (unsigned long long)root->id, want,
			w->top);
		return -EUCLEAN;
	}
	arb_node_pin(n); /* the walk's own pin of the root */
	w->level = l;
	w->nodes[l] = n;
	for (;;) {
		ret = drop_check_own(t, root, n);
		if (ret)
			return ret;
		s = slot_le(n, &k);
		if (s < 0)
			goto bad;
		w->slots[l] = s;
		if (l == want)
			break;
		ret = arb_node_read(vol, arb_child_bytenr(n, s),
				    arb_child_mirror(n, s),
				    arb_child_gen(n, s), l - 1, &n);
		if (ret)
			return ret;
		w->level = --l;
		w->nodes[l] = n;
	}
	arb_node_key(n, s, &sk);
	/* the key itself, never the first of its node (format.h) */
	if (s == 0 || arb_key_cmp(&sk, &k) != 0)
		goto bad;
	return 0;
bad:
	arb_log(ARB_LOG_ERR, "tree %llu: drop progress key (%llu %u %llu) at "
		"level %d is not in the tree", (unsigned long long)root->id,
		(unsigned long long)k.objectid, k.type,
		(unsigned long long)k.offset, want);
	return -EUCLEAN;
}

/*
 * release the pointer of the walk's lowest node at its slot; enter the
 * child when it is the tree's alone and not a leaf.  1: nothing done, a
 * node it needs would wait for a disk (w->fetch).  Only where the walk
 * can stop, at slot > 0, and once it has done something.
 */
static int drop_walk_step(struct arb_txn *t, struct drop_walk *w)
{
	struct arb_vol *vol = t->vol;
	struct arb_node *n = w->nodes[w->level], *c;
	int s = w->slots[w->level], cl = w->level - 1, ret;
	uint64_t bytenr = arb_child_bytenr(n, s), refs;
	bool nowait = w->fetch && w->seen && s > 0;

	/* both reads below only read: stopping after either changes
	 * nothing */
	if (nowait)
		arb_node_nowait(true);
	ret = arb_extent_refs(t, bytenr, &refs);
	if (!ret && refs == 1)
		ret = arb_node_read(vol, bytenr, arb_child_mirror(n, s),
				    arb_child_gen(n, s), cl, &c);
	if (nowait)
		arb_node_nowait(false);
	if (ret == -EWOULDBLOCK && nowait) {
		struct arb_drop_fetch *f = w->fetch;
		uint64_t miss = arb_node_nowait_miss();

		f->addr[0] = miss;
		f->nr = 1;
		/* the child itself: its siblings are next */
		for (int i = s + 1; miss == bytenr && i < (int)arb_nritems(n) &&
				    f->nr < ARB_DROP_FETCH;
		     i++) {
			uint64_t b = arb_child_bytenr(n, i);

			if (!arb_node_is_cached(vol, b))
				f->addr[f->nr++] = b;
		}
		return 1;
	}
	if (ret)
		return ret;
	if (refs == 0) {
		arb_log(ARB_LOG_ERR, "node %llu: no count in the extent tree",
			(unsigned long long)bytenr);
		return -EUCLEAN;
	}
	w->seen++;
	if (refs > 1) {
		w->slots[w->level]++;
		return arb_ref_tree_block(t, bytenr, 0, cl, -1);
	}
	if (cl > 0) {
		w->level = cl;
		w->nodes[cl] = c;
		w->slots[cl] = 0;
		return 0;
	}
	ret = arb_leaf_data_refs(t, c, arb_node_owner(c), -1);
	if (!ret)
		ret = free_node(t, c);
	arb_node_put_cold(vol, c);
	w->freed++;
	w->slots[w->level]++;
	return ret;
}

/* free the nodes whose pointers are all released; true when the root was */
static int drop_walk_pop(struct arb_txn *t, struct drop_walk *w, bool *done)
{
	struct arb_vol *vol = t->vol;
	int ret;

	*done = false;
	while (w->slots[w->level] >= (int)arb_nritems(w->nodes[w->level])) {
		ret = free_node(t, w->nodes[w->level]);
		arb_node_put_cold(vol, w->nodes[w->level]);
		w->nodes[w->level] = NULL;
		w->freed++;
		if (ret)
			return ret;
		if (w->level == w->top) {
			*done = true;
			return 0;
		}
		w->slots[++w->level]++;
	}
	return 0;
}

/* is some tree still partly dropped (a DROP_PROGRESS item left)? */
static int drop_progress_any(struct arb_vol *vol, bool *any)
{
	struct arb_key k = { ARB_FIRST_SUBVOL_ID, 0, 0 };
	struct arb_iter it;
	int ret;

	*any = false;
	arb_iter_init(&it, vol->tree_root);
	ret = arb_iter_seek(&it, &k);
	while (ret == 0) {
		arb_iter_key(&it, &k);
		if (k.type == ARB_DROP_PROGRESS) {
			*any = true;
			break;
		}
		ret = arb_iter_next(&it);
	}
	arb_iter_release(&it);
	return ret < 0 ? ret : 0;
}

static int drop_finish(struct arb_txn *t, struct arb_root *root,
		       bool had_progress)
{
	struct arb_vol *vol = t->vol;
	struct arb_key k = { root->id, ARB_ROOT_ITEM, 0 };
	struct arb_root **pp;
	bool any;
	int ret;

	ret = arb_del_item(t, vol->tree_root, &k);
	if (!ret && had_progress) {
		k.type = ARB_DROP_PROGRESS;
		ret = arb_del_item(t, vol->tree_root, &k);
		if (!ret)
			ret = drop_progress_any(vol, &any);
		if (!ret && !any)
			arb_vol_clear_features(vol, 0,
					       ARB_INCOMPAT_DROP_PROGRESS);
	}
	if (ret)
		return ret;
	for (pp = &vol->roots; *pp; pp = &(*pp)->next) {
		if (*pp == root) {
			*pp = root->next;
			break;
		}
	}
	arb_root_free(vol, root);
	return 0;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int arb_root_drop_batch(struct arb_txn *t, struct arb_root *root,
			const struct arb_drop_budget *b)
{
	struct arb_vol *vol = t->vol;
	struct arb_key k = { root->id, ARB_DROP_PROGRESS, 0 };
	struct arb_drop_progress dp;
	struct drop_walk w;
	uint64_t refs, start = b && b->ns ? mono_ns() : 0;
	bool had, done = false;
	int ret;

	if (t->error)
		return t->error;
	if (root == vol->tree_root || root == vol->extent_root)
		return -EINVAL;
	memset(&w, 0, sizeof(w));
	w.top = arb_level(root->node);
	if (b && b->fetch) {
		w.fetch = b->fetch;
		b->fetch->nr = 0;
	}
	ret = arb_root_drop_progress(vol, root->id, &dp);
	if (ret < 0)
		return arb_txn_fail(t, ret);
	had = ret == 0;
	if (had) {
		ret = drop_walk_resume(t, root, &dp, &w);
		if (ret)
			goto out;
	} else {
		/* the root: as any child (counted once, unless something
		 * else points at it), entered unless a leaf */
		w.seen++;
		ret = arb_extent_refs(t, root->node->bytenr, &refs);
		if (ret)
			return arb_txn_fail(t, ret);
		if (refs > 1 || w.top == 0) {
			if (refs > 1)
				ret = arb_ref_tree_block(t, root->node->bytenr,
							 0, w.top, -1);
			else
				ret = arb_leaf_data_refs(t, root->node,
							 arb_node_owner(
								 root->node),
							 -1);
			if (!ret && refs == 1)
				ret = free_node(t, root->node);
			if (!ret)
				ret = drop_finish(t, root, false);
			return ret ? arb_txn_fail(t, ret) : 1;
		}
		arb_node_pin(root->node);
		w.level = w.top;
		w.nodes[w.top] = root->node;
		w.slots[w.top] = 0;
	}
	for (;;) {
		ret = drop_walk_step(t, &w);
		if (ret > 0) {
			ret = 0;
			break; /* to be read without the caller's lock */
		}
		if (ret)
			goto out;
		if (w.slots[w.level] == 0)
			continue; /* just entered: nothing to record yet */
		ret = drop_walk_pop(t, &w, &done);
		if (ret || done)
			goto out;
		if (b && b->nodes && w.seen >= b->nodes)
			break;
		if (b && b->yield && w.seen >= ARB_DROP_MIN_NODES &&
		    __atomic_load_n(b->yield, __ATOMIC_RELAXED))
			break;
		if (start && (w.seen & 15) == 0 && mono_ns() - start >= b->ns)
			break;
	}
	/* the walk stands at slot > 0 of its lowest node: record it */
	arb_node_key(w.nodes[w.level], w.slots[w.level], &k);
	arb_key_to_disk(&dp.d_key, &k);
	arb_set_drop_progress_d_level(&dp, (uint8_t)w.level);
	arb_set_drop_progress_d_nodes(&dp, arb_drop_progress_d_nodes(&dp) +
						   w.seen);
	arb_set_drop_progress_d_freed(&dp, arb_drop_progress_d_freed(&dp) +
						   w.freed);
	k = (struct arb_key){ root->id, ARB_DROP_PROGRESS, 0 };
	if (had) {
		ret = arb_update_item(t, vol->tree_root, &k, &dp, sizeof(dp));
	} else {
		ret = arb_insert_item(t, vol->tree_root, &k, &dp, sizeof(dp));
		arb_vol_set_features(vol, 0, ARB_INCOMPAT_DROP_PROGRESS);
	}
out:
	drop_walk_release(vol, &w);
	if (!ret && done)
		ret = drop_finish(t, root, had);
	if (ret)
		return arb_txn_fail(t, ret);
	return done ? 1 : 0;
}

int arb_root_drop(struct arb_txn *t, struct arb_root *root)
{
	int ret = arb_root_drop_batch(t, root, NULL);

	return ret < 0 ? ret : 0;
}

int arb_root_drop_state(struct arb_vol *vol, uint64_t id,
			struct arb_drop_state *st)
{
	struct arb_drop_progress dp;
	struct arb_node *n, *c;
	struct arb_root *root;
	struct arb_key k;
	double width = 1.0, done = 0.0;
	int ret, l, want;

	memset(st, 0, sizeof(*st));
	ret = arb_root_drop_progress(vol, id, &dp);
	if (ret)
		return ret < 0 ? ret : 0;
	ret = arb_root_get(vol, id, &root);
	if (ret)
		return ret;
	st->started = true;
	st->nodes = arb_drop_progress_d_nodes(&dp);
	st->freed = arb_drop_progress_d_freed(&dp);
	arb_key_from_disk(&k, &dp.d_key);
	want = arb_drop_progress_d_level(&dp);
	n = root->node;
	arb_node_pin(n);
	for (l = arb_level(n); l >= want && l > 0; l--) {
		int s = slot_le(n, &k), nr = (int)arb_nritems(n);

		if (s < 0 || !nr)
			break;
		done += width * s / nr;
		width /= nr;
		if (l == want)
			break;
		ret = arb_node_read(vol, arb_child_bytenr(n, s),
				    arb_child_mirror(n, s), arb_child_gen(n, s),
				    l - 1, &c);
		arb_node_put(vol, n);
		if (ret)
			return ret;
		n = c;
	}
	arb_node_put(vol, n);
	st->permille = (unsigned)(done * 1000.0);
	if (st->permille > 999)
		st->permille = 999;
	return 0;
}

/* Create the root tree and the extent tree of a volume being formatted. */
int arb_bootstrap_roots(struct arb_txn *t)
{
	struct arb_vol *vol = t->vol;
	struct arb_key k = { ARB_EXTENT_TREE_ID, ARB_ROOT_ITEM, 0 };
	int ret;

	vol->tree_root = root_alloc(vol, ARB_ROOT_TREE_ID);
	vol->extent_root = root_alloc(vol, ARB_EXTENT_TREE_ID);
	if (!vol->tree_root || !vol->extent_root)
		return -ENOMEM;
	ret = new_node(t, vol->tree_root, 0, &vol->tree_root->node);
	if (!ret)
		ret = new_node(t, vol->extent_root, 0, &vol->extent_root->node);
	if (ret)
		return ret;
	arb_set_root_item_r_otransid(&vol->extent_root->item, t->transid);
	arb_set_root_item_r_refs(&vol->extent_root->item, 1);
	root_fill_item(vol->extent_root);
	return arb_insert_item(t, vol->tree_root, &k, &vol->extent_root->item,
			       sizeof(vol->extent_root->item));
}
