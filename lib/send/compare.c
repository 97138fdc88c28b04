/* SPDX-License-Identifier: MIT */
/*
 * compare.c - what changed in an fs tree: since a generation (find-new)
 * or between two trees (diff), at the cost of what changed.
 *
 * Two item-level walks (send_int.h):
 *   arb_walk_newer  one tree; a child whose pointer generation is at or
 *                   below gen is skipped unread: shadowing rewrites the
 *                   whole path of every change, so nothing under it was
 *                   written after gen (docs/design/send.md, "Finding
 *                   changes").
 *   arb_cmp_trees   two trees in key order together, as btrfs's
 *                   btrfs_compare_trees: two cursors, each a path with a
 *                   current level; the one higher up descends; at equal
 *                   levels the smaller key moves (leaves: the item is
 *                   only on its side), equal keys of internal nodes with
 *                   the same child address are skipped both (shared, so
 *                   identical), equal keys of leaves compare their bytes.
 * Over them, per-inode records (arbor/diff.h): items arrive in key order,
 * so an inode's items are adjacent and its record is complete when the
 * walk passes to the next objectid; its paths come from its INODE_REF
 * items (and those of its directories, up to the root directory).
 *
 * Images are hostile: every node is validated by arb_node_read against
 * the level and generation its parent expects (so a walk only goes down,
 * and ends), every payload used here by arb_item_validate; a path walk
 * up the directories is bounded (a cycle of INODE_REFs is -EUCLEAN).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fs_int.h"
#include "items/items.h"
#include "send/send_int.h"

/* ---- the walk since a generation ------------------------------------------ */

struct newer {
	struct arb_vol *vol;
	uint64_t gen;
	struct arb_key start;
	arb_newer_fn fn;
	void *ctx;
	struct arb_diff_stats *st;
};

static int newer_node(struct newer *w, struct arb_node *n)
{
	uint32_t nr = arb_nritems(n);
	struct arb_key k;
	uint32_t i;
	int ret = 0;

	if (arb_level(n) == 0) {
		for (i = 0; i < nr && !ret; i++) {
			struct arb_cmp_item it;

			arb_node_key(n, (int)i, &it.key);
			if (arb_key_cmp(&it.key, &w->start) < 0)
				continue;
			it.data = arb_item_ptr(n, (int)i);
			it.size = arb_item_size(n, (int)i);
			w->st->items++;
			ret = w->fn(w->ctx, &it);
		}
		return ret;
	}
	for (i = 0; i < nr && !ret; i++) {
		struct arb_node *c;

		/* child i holds keys below key i + 1 */
		if (i + 1 < nr) {
			arb_node_key(n, (int)i + 1, &k);
			if (arb_key_cmp(&k, &w->start) <= 0)
				continue;
		}
		if (arb_child_gen(n, (int)i) <= w->gen) {
			w->st->subtrees_skipped++;
			continue;
		}
		ret = arb_node_read(w->vol, arb_child_bytenr(n, (int)i),
				    arb_child_mirror(n, (int)i),
				    arb_child_gen(n, (int)i), arb_level(n) - 1,
				    &c);
		if (ret)
			return ret;
		w->st->nodes_visited++;
		ret = newer_node(w, c);
		arb_node_put(w->vol, c);
	}
	return ret;
}

int arb_walk_newer(struct arb_root *r, uint64_t gen, const struct arb_key *start,
		   arb_newer_fn fn, void *ctx, struct arb_diff_stats *st)
{
	struct newer w = { r->vol, gen, *start, fn, ctx, st };

	if (arb_node_gen(r->node) <= gen) {
		st->subtrees_skipped++;
		return 0;
	}
	st->nodes_visited++;
	return newer_node(&w, r->node);
}

/* ---- the walk of two trees together ---------------------------------------- */

struct cursor {
	struct arb_vol *vol;
	struct arb_node *nodes[ARB_MAX_LEVEL];
	int slots[ARB_MAX_LEVEL];
	int level, top;
	bool done;
};

static void cur_release(struct cursor *c)
{
	int l;

	for (l = 0; l < ARB_MAX_LEVEL; l++) {
		if (c->nodes[l])
			arb_node_put(c->vol, c->nodes[l]);
		c->nodes[l] = NULL;
	}
}

/* read the child under the current slot and stand at its first slot */
static int cur_down(struct cursor *c, struct arb_diff_stats *st)
{
	struct arb_node *n = c->nodes[c->level], *child;
	int s = c->slots[c->level], ret;

	ret = arb_node_read(c->vol, arb_child_bytenr(n, s),
			    arb_child_mirror(n, s), arb_child_gen(n, s),
			    c->level - 1, &child);
	if (ret)
		return ret;
	st->nodes_visited++;
	c->level--;
	c->nodes[c->level] = child;
	c->slots[c->level] = 0;
	return 0;
}

/* the next slot at the current level, going up past the ends of nodes */
static void cur_next(struct cursor *c)
{
	for (;;) {
		c->slots[c->level]++;
		if (c->slots[c->level] < (int)arb_nritems(c->nodes[c->level]))
			return;
		if (c->level == c->top) {
			c->done = true;
			return;
		}
		arb_node_put(c->vol, c->nodes[c->level]);
		c->nodes[c->level] = NULL;
		c->level++;
	}
}

/*
 * Stand at the root's first slot, or with start past the first key, at
 * the first item >= start (down the path to it).
 */
static int cur_init(struct cursor *c, struct arb_root *r,
		    const struct arb_key *start, struct arb_diff_stats *st)
{
	struct arb_key k;
	int ret;

	memset(c, 0, sizeof(*c));
	c->vol = r->vol;
	c->top = c->level = arb_level(r->node);
	arb_node_pin(r->node);
	c->nodes[c->level] = r->node;
	st->nodes_visited++;
	if (arb_nritems(r->node) == 0) {
		c->done = true;
		return 0;
	}
	arb_node_key(r->node, 0, &k);
	if (arb_key_cmp(start, &k) <= 0)
		return 0;
	while (c->level > 0) {
		struct arb_node *n = c->nodes[c->level];
		int s = 0, nr = (int)arb_nritems(n);

		while (s + 1 < nr) {
			arb_node_key(n, s + 1, &k);
			if (arb_key_cmp(&k, start) > 0)
				break;
			s++;
		}
		c->slots[c->level] = s;
		ret = cur_down(c, st);
		if (ret)
			return ret;
	}
	for (;;) {
		struct arb_node *n = c->nodes[0];

		if (c->slots[0] >= (int)arb_nritems(n)) {
			c->slots[0] = (int)arb_nritems(n) - 1;
			cur_next(c);
			break;
		}
		arb_node_key(n, c->slots[0], &k);
		if (arb_key_cmp(&k, start) >= 0)
			break;
		c->slots[0]++;
	}
	return 0;
}

static void cur_key(const struct cursor *c, struct arb_key *k)
{
	arb_node_key(c->nodes[c->level], c->slots[c->level], k);
}

static void cur_item(const struct cursor *c, struct arb_cmp_item *it)
{
	const struct arb_node *n = c->nodes[0];

	arb_node_key(n, c->slots[0], &it->key);
	it->data = arb_item_ptr(n, c->slots[0]);
	it->size = arb_item_size(n, c->slots[0]);
}

/* a cursor at a leaf item only its side has: report it, move on */
static int cur_only(struct cursor *c, enum arb_cmp_kind kind, arb_cmp_fn fn,
		    void *ctx, struct arb_diff_stats *st)
{
	struct arb_cmp_item it;
	int ret;

	if (c->level > 0)
		return cur_down(c, st);
	cur_item(c, &it);
	st->items++;
	ret = kind == ARB_CMP_DELETED ? fn(ctx, kind, &it, NULL)
				      : fn(ctx, kind, NULL, &it);
	cur_next(c);
	return ret;
}

int arb_cmp_trees(struct arb_root *a, struct arb_root *b,
		  const struct arb_key *start, arb_cmp_fn fn, void *ctx,
		  struct arb_diff_stats *st)
{
	struct cursor l, r;
	int ret;

	if (a->node->bytenr == b->node->bytenr) {
		st->subtrees_skipped++;
		return 0;
	}
	ret = cur_init(&l, a, start, st);
	if (!ret)
		ret = cur_init(&r, b, start, st);
	else
		memset(&r, 0, sizeof(r));
	while (!ret && !(l.done && r.done)) {
		struct arb_key kl, kr;
		int cmp;

		if (l.done) {
			ret = cur_only(&r, ARB_CMP_ADDED, fn, ctx, st);
			continue;
		}
		if (r.done) {
			ret = cur_only(&l, ARB_CMP_DELETED, fn, ctx, st);
			continue;
		}
		if (l.level != r.level) {
			/* the one higher up goes down to meet the other */
			ret = l.level > r.level ? cur_down(&l, st)
						: cur_down(&r, st);
			continue;
		}
		cur_key(&l, &kl);
		cur_key(&r, &kr);
		cmp = arb_key_cmp(&kl, &kr);
		if (cmp < 0) {
			ret = l.level ? cur_down(&l, st)
				      : cur_only(&l, ARB_CMP_DELETED, fn, ctx,
						 st);
			continue;
		}
		if (cmp > 0) {
			ret = r.level ? cur_down(&r, st)
				      : cur_only(&r, ARB_CMP_ADDED, fn, ctx,
						 st);
			continue;
		}
		if (l.level > 0) {
			struct arb_node *nl = l.nodes[l.level],
					*nr = r.nodes[r.level];

			if (arb_child_bytenr(nl, l.slots[l.level]) ==
				    arb_child_bytenr(nr, r.slots[r.level]) &&
			    arb_child_gen(nl, l.slots[l.level]) ==
				    arb_child_gen(nr, r.slots[r.level])) {
				/* one node in both trees: identical below */
				st->subtrees_skipped++;
				cur_next(&l);
				cur_next(&r);
			} else {
				ret = cur_down(&l, st);
				if (!ret)
					ret = cur_down(&r, st);
			}
			continue;
		}
		{
			struct arb_cmp_item il, ir;

			cur_item(&l, &il);
			cur_item(&r, &ir);
			st->items++;
			if (il.size != ir.size ||
			    memcmp(il.data, ir.data, il.size))
				ret = fn(ctx, ARB_CMP_CHANGED, &il, &ir);
			cur_next(&l);
			cur_next(&r);
		}
	}
	cur_release(&l);
	cur_release(&r);
	return ret;
}

/* ---- paths ------------------------------------------------------------------- */

/* directory paths already resolved in this walk: direct-mapped by objectid */
#define DIRCACHE_SLOTS 1024
struct dircache {
	uint64_t obj[DIRCACHE_SLOTS];
	char *path[DIRCACHE_SLOTS];
};

static void dircache_free(struct dircache *dc)
{
	size_t i;

	for (i = 0; i < DIRCACHE_SLOTS; i++)
		free(dc->path[i]);
	memset(dc, 0, sizeof(*dc));
}

/* the deepest a path may go: each level takes at least 2 bytes of
 * ARB_DIFF_PATH_MAX */
#define PATH_DEPTH_MAX (ARB_DIFF_PATH_MAX / 2)

/*
 * The first name of obj (directories have one) and its parent: 0, or
 * -ENOENT when obj has no INODE_REF (a subvolume's root), <0 error.
 */
static int first_ref(struct arb_root *r, uint64_t obj, uint64_t *parent,
		     char *name, size_t *len)
{
	struct arb_iter it;
	struct arb_key k = { obj, ARB_INODE_REF, 0 };
	struct arb_iref ref;
	const char *why = NULL;
	size_t pos = 0;
	int ret;

	arb_iter_init(&it, r);
	ret = arb_iter_seek(&it, &k);
	if (ret)
		goto out;
	arb_iter_key(&it, &k);
	if (k.objectid != obj || k.type != ARB_INODE_REF) {
		ret = -ENOENT;
		goto out;
	}
	if (arb_item_validate(&k, arb_iter_data(&it), arb_iter_size(&it),
			      &why) ||
	    arb_iref_next(arb_iter_data(&it), arb_iter_size(&it), &pos, &ref,
			  &why) != 0) {
		arb_log(ARB_LOG_ERR, "tree %llu: inode %llu: INODE_REF: %s",
			(unsigned long long)r->id, (unsigned long long)obj,
			why ? why : "empty");
		ret = -EUCLEAN;
		goto out;
	}
	*parent = k.offset;
	memcpy(name, ref.name, ref.name_len);
	*len = ref.name_len;
out:
	arb_iter_release(&it);
	return ret == 1 ? -ENOENT : ret;
}

/*
 * Path of directory dir from the root directory ("" for it) into a new
 * string *out.
 */
static int dir_path(struct arb_root *r, struct dircache *dc, uint64_t dir,
		    char **out)
{
	/* the chain from dir up, names stored back to front in buf */
	char *buf, name[ARB_NAME_MAX + 1];
	size_t pos = ARB_DIFF_PATH_MAX - 1, len;
	uint64_t cur = dir, parent;
	unsigned depth = 0, slot, i;
	uint64_t *chain;
	int ret;

	buf = malloc(ARB_DIFF_PATH_MAX);
	chain = malloc(PATH_DEPTH_MAX * sizeof(*chain));
	if (!buf || !chain) {
		free(buf);
		free(chain);
		return -ENOMEM;
	}
	buf[pos] = '\0';
	while (cur != ARB_FIRST_INO) {
		slot = (unsigned)(cur % DIRCACHE_SLOTS);
		if (dc->obj[slot] == cur && dc->path[slot]) {
			/* cur's whole path is known: put it in front */
			size_t n = strlen(dc->path[slot]);

			if (n + 2 > pos) {
				ret = -ENAMETOOLONG;
				goto out_free;
			}
			if (pos != ARB_DIFF_PATH_MAX - 1)
				buf[--pos] = '/';
			pos -= n;
			memcpy(buf + pos, dc->path[slot], n);
			goto done;
		}
		/* a directory met twice on the way up: a cycle */
		for (i = 0; i < depth; i++)
			if (chain[i] == cur)
				break;
		if (i < depth || depth == PATH_DEPTH_MAX) {
			arb_log(ARB_LOG_ERR,
				"tree %llu: directory %llu: its parents loop",
				(unsigned long long)r->id,
				(unsigned long long)dir);
			ret = -EUCLEAN;
			goto out_free;
		}
		chain[depth++] = cur;
		ret = first_ref(r, cur, &parent, name, &len);
		if (ret == -ENOENT) {
			/* not linked in this tree: an orphan's directory */
			ret = -ENOENT;
			goto out_free;
		}
		if (ret)
			goto out_free;
		if (len + 2 > pos) {
			ret = -ENAMETOOLONG;
			goto out_free;
		}
		if (pos != ARB_DIFF_PATH_MAX - 1)
			buf[--pos] = '/';
		pos -= len;
		memcpy(buf + pos, name, len);
		cur = parent;
	}
done:
	*out = strdup(buf + pos);
	ret = *out ? 0 : -ENOMEM;
	if (!ret && dir != ARB_FIRST_INO) {
		slot = (unsigned)(dir % DIRCACHE_SLOTS);
		free(dc->path[slot]);
		dc->obj[slot] = dir;
		dc->path[slot] = strdup(*out);
	}
out_free:
	free(chain);
	free(buf);
	return ret;
}

struct pathlist {
	char **v;
	size_t nr, cap;
};

static void pathlist_free(struct pathlist *pl)
{
	size_t i;

	for (i = 0; i < pl->nr; i++)
		free(pl->v[i]);
	free(pl->v);
	memset(pl, 0, sizeof(*pl));
}

static int pathlist_add(struct pathlist *pl, char *p)
{
	if (pl->nr == pl->cap) {
		size_t cap = pl->cap ? 2 * pl->cap : 4;
		char **v = realloc(pl->v, cap * sizeof(*v));

		if (!v) {
			free(p);
			return -ENOMEM;
		}
		pl->v = v;
		pl->cap = cap;
	}
	pl->v[pl->nr++] = p;
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* every path of inode obj in r, sorted ("." for the root directory) */
static int paths_of(struct arb_root *r, struct dircache *dc, uint64_t obj,
		    struct pathlist *pl)
{
	struct arb_iter it;
	struct arb_key k = { obj, ARB_INODE_REF, 0 };
	int ret;

	if (obj == ARB_FIRST_INO) {
		char *p = strdup(".");

		return p ? pathlist_add(pl, p) : -ENOMEM;
	}
	arb_iter_init(&it, r);
	for (ret = arb_iter_seek(&it, &k); !ret; ret = arb_iter_next(&it)) {
		const uint8_t *d;
		uint32_t size;
		const char *why = NULL;
		size_t pos = 0;
		struct arb_iref ref;
		char *dp = NULL;

		arb_iter_key(&it, &k);
		if (k.objectid != obj || k.type != ARB_INODE_REF)
			break;
		d = arb_iter_data(&it);
		size = arb_iter_size(&it);
		if (arb_item_validate(&k, d, size, &why)) {
			arb_log(ARB_LOG_ERR,
				"tree %llu: inode %llu: INODE_REF: %s",
				(unsigned long long)r->id,
				(unsigned long long)obj, why);
			ret = -EUCLEAN;
			break;
		}
		ret = dir_path(r, dc, k.offset, &dp);
		if (ret == -ENOENT) {
			ret = 0; /* its directory is not linked: skip */
			continue;
		}
		if (ret)
			break;
		while ((ret = arb_iref_next(d, size, &pos, &ref, &why)) == 0) {
			size_t dl = strlen(dp), n = dl + !!dl + ref.name_len;
			char *p;

			if (n + 1 > ARB_DIFF_PATH_MAX) {
				ret = -ENAMETOOLONG;
				break;
			}
			p = malloc(n + 1);
			if (!p) {
				ret = -ENOMEM;
				break;
			}
			memcpy(p, dp, dl);
			if (dl)
				p[dl] = '/';
			memcpy(p + dl + !!dl, ref.name, ref.name_len);
			p[n] = '\0';
			ret = pathlist_add(pl, p);
			if (ret)
				break;
		}
		free(dp);
		if (ret == -EUCLEAN)
			arb_log(ARB_LOG_ERR,
				"tree %llu: inode %llu: INODE_REF: %s",
				(unsigned long long)r->id,
				(unsigned long long)obj, why ? why : "damaged");
		if (ret < 0)
			break;
		ret = 0;
	}
	arb_iter_release(&it);
	if (ret < 0)
		return ret;
	qsort(pl->v, pl->nr, sizeof(*pl->v), cmp_str);
	return 0;
}

/* ---- per-inode records ---------------------------------------------------------- */

struct rangelist {
	struct arb_change_range *v;
	size_t nr, cap;
};

static int range_add(struct rangelist *rl, uint64_t off, uint64_t len)
{
	if (!len)
		return 0;
	if (rl->nr == rl->cap) {
		size_t cap = rl->cap ? 2 * rl->cap : 8;
		struct arb_change_range *v = realloc(rl->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		rl->v = v;
		rl->cap = cap;
	}
	rl->v[rl->nr].off = off;
	rl->v[rl->nr].len = off + len < off ? UINT64_MAX - off : len;
	rl->nr++;
	return 0;
}

static int cmp_range(const void *a, const void *b)
{
	const struct arb_change_range *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

/* sort and merge touching or overlapping ranges */
static void range_merge(struct rangelist *rl)
{
	size_t i, o = 0;

	if (!rl->nr)
		return;
	qsort(rl->v, rl->nr, sizeof(*rl->v), cmp_range);
	for (i = 1; i < rl->nr; i++) {
		struct arb_change_range *p = &rl->v[o];
		uint64_t end = p->off + p->len;

		if (rl->v[i].off <= end) {
			uint64_t e2 = rl->v[i].off + rl->v[i].len;

			if (e2 > end)
				p->len = e2 - p->off;
		} else {
			rl->v[++o] = rl->v[i];
		}
	}
	rl->nr = o + 1;
}

/* the file range an EXTENT_DATA item covers (validated) */
static void extent_range(const struct arb_cmp_item *it, uint64_t *off,
			 uint64_t *len)
{
	const struct arb_file_extent *fe = (const void *)it->data;

	*off = it->key.offset;
	if (arb_file_extent_f_type(fe) == ARB_FILE_EXTENT_INLINE)
		*len = arb_file_extent_inline_len(fe, it->size);
	else
		*len = arb_file_extent_f_num_bytes(fe);
}

/* one inode's changes while the walk is in its items */
struct acc {
	uint64_t obj; /* 0: none */
	uint32_t flags;
	/* its inode item as the walk saw it, per side (0 A, 1 B) */
	bool have[2];
	struct arb_inode_item in[2];
	struct rangelist ranges;
};

struct diff_ctx {
	struct arb_fs *fs;
	bool find_new;
	uint64_t gen;
	/* find-new: the tree (as b); diff: a and b */
	struct arb_root *root[2];
	uint64_t id[2];
	struct dircache dc[2];
	struct acc acc;
	arb_change_fn fn;
	void *ctx;
	struct arb_diff_stats *st;
};

static int bad_item(struct diff_ctx *d, int side, const struct arb_key *k,
		    const char *why)
{
	arb_log(ARB_LOG_ERR, "tree %llu: item (%llu %u %llu): %s",
		(unsigned long long)d->id[side],
		(unsigned long long)k->objectid, k->type,
		(unsigned long long)k->offset, why);
	return -EUCLEAN;
}

/* the inode item of obj in side's tree: 0, -ENOENT, <0 */
static int inode_lookup(struct diff_ctx *d, int side, uint64_t obj,
			struct arb_inode_item *out)
{
	struct arb_key k = { obj, ARB_INODE_ITEM, 0 };
	const char *why;
	int ret;

	ret = arb_lookup_item(d->root[side], &k, out, sizeof(*out));
	if (ret < 0)
		return ret;
	if (arb_item_validate(&k, out, (uint32_t)ret, &why))
		return bad_item(d, side, &k, why ? why : "bad inode item");
	return 0;
}

/* what differs between two inode items, in ARB_CHANGE_* bits */
static uint32_t inode_diff(const struct arb_inode_item *a,
			   const struct arb_inode_item *b)
{
	uint32_t f = 0;

	if (arb_inode_item_i_size(a) != arb_inode_item_i_size(b))
		f |= ARB_CHANGE_SIZE;
	if (arb_inode_item_i_mode(a) != arb_inode_item_i_mode(b) ||
	    arb_inode_item_i_uid(a) != arb_inode_item_i_uid(b) ||
	    arb_inode_item_i_gid(a) != arb_inode_item_i_gid(b) ||
	    arb_inode_item_i_nlink(a) != arb_inode_item_i_nlink(b) ||
	    arb_inode_item_i_rdev(a) != arb_inode_item_i_rdev(b) ||
	    arb_inode_item_i_flags(a) != arb_inode_item_i_flags(b) ||
	    arb_inode_item_i_mtime(a) != arb_inode_item_i_mtime(b) ||
	    arb_inode_item_i_mtime_ns(a) != arb_inode_item_i_mtime_ns(b) ||
	    arb_inode_item_i_ctime(a) != arb_inode_item_i_ctime(b) ||
	    arb_inode_item_i_ctime_ns(a) != arb_inode_item_i_ctime_ns(b) ||
	    arb_inode_item_i_btime(a) != arb_inode_item_i_btime(b) ||
	    arb_inode_item_i_btime_ns(a) != arb_inode_item_i_btime_ns(b))
		f |= ARB_CHANGE_META;
	return f;
}

static int report(struct diff_ctx *d, uint32_t flags, int side,
		  const struct arb_inode_item *in, const struct arb_inode_item *old,
		  bool old_paths)
{
	struct acc *a = &d->acc;
	struct pathlist pl = { 0 }, opl = { 0 };
	struct arb_change c = { 0 };
	int ret;

	ret = paths_of(d->root[side], &d->dc[side], a->obj, &pl);
	if (!ret && old_paths)
		ret = paths_of(d->root[0], &d->dc[0], a->obj, &opl);
	if (ret)
		goto out;
	range_merge(&a->ranges);
	c.ino = arb_inum(d->id[side], a->obj);
	c.obj = a->obj;
	c.flags = flags;
	c.mode = arb_inode_item_i_mode(in);
	c.size = arb_inode_item_i_size(in);
	c.old_size = old ? arb_inode_item_i_size(old) : 0;
	c.transid = arb_inode_item_i_transid(in);
	if (flags & ARB_CHANGE_DATA) {
		c.nr_ranges = a->ranges.nr;
		c.ranges = a->ranges.v;
	}
	c.nr_paths = pl.nr;
	c.paths = pl.v;
	c.nr_old_paths = opl.nr;
	c.old_paths = opl.v;
	d->st->inodes++;
	ret = d->fn(d->ctx, &c);
out:
	pathlist_free(&pl);
	pathlist_free(&opl);
	return ret;
}

/* the walk left inode a->obj: report it if something visible changed */
static int acc_flush(struct diff_ctx *d)
{
	struct acc *a = &d->acc;
	uint32_t f = a->flags;
	int ret = 0, side;

	if (!a->obj)
		return 0;
	/* items with nothing to report (find-new: rewritten with their
	 * leaf; diff: of a kind not reported) */
	if (!f && !a->have[0] && !a->have[1])
		goto out;
	/* the inode items the walk did not meet are the same on both sides
	 * (diff) or older than gen (find-new): look them up */
	for (side = d->find_new ? 1 : 0; side < 2 && !ret; side++) {
		if (a->have[side])
			continue;
		ret = inode_lookup(d, side, a->obj, &a->in[side]);
		if (ret == -ENOENT)
			ret = 0;
		else if (!ret)
			a->have[side] = true;
	}
	if (ret)
		goto out;
	/* an inode with no name left (unlinked while open, freed at its
	 * release) is gone for whoever reads the tree */
	for (side = 0; side < 2; side++)
		if (a->have[side] && !arb_inode_item_i_nlink(&a->in[side]))
			a->have[side] = false;
	if (d->find_new) {
		const struct arb_inode_item *in = &a->in[1];

		/* items of an unlinked inode being freed: not reported */
		if (!a->have[1])
			goto out;
		if (arb_inode_item_i_transid(in) > d->gen)
			f |= ARB_CHANGE_META;
		if (arb_inode_item_i_generation(in) > d->gen)
			f |= ARB_CHANGE_NEW;
		if (f)
			ret = report(d, f, 1, in, NULL, false);
		goto out;
	}
	if (a->have[0] && a->have[1] &&
	    arb_inode_item_i_generation(&a->in[0]) !=
		    arb_inode_item_i_generation(&a->in[1])) {
		/* another inode under the same number (not made by this
		 * code, which never hands a number out twice) */
		ret = report(d, ARB_CHANGE_DELETED, 0, &a->in[0], NULL, false);
		if (!ret)
			ret = report(d, ARB_CHANGE_NEW, 1, &a->in[1], NULL,
				     false);
		goto out;
	}
	if (a->have[1] && !a->have[0]) {
		ret = report(d, ARB_CHANGE_NEW | (f & ARB_CHANGE_DATA), 1,
			     &a->in[1], NULL, false);
	} else if (a->have[0] && !a->have[1]) {
		ret = report(d, ARB_CHANGE_DELETED, 0, &a->in[0], NULL, false);
	} else if (a->have[0] && a->have[1]) {
		f |= inode_diff(&a->in[0], &a->in[1]);
		if (f)
			ret = report(d, f, 1, &a->in[1], &a->in[0],
				     f & ARB_CHANGE_NAME);
	}
out:
	a->obj = 0;
	a->flags = 0;
	a->have[0] = a->have[1] = false;
	a->ranges.nr = 0;
	return ret;
}

/* the inode number range this code reports (other objectids: orphans) */
static bool inode_obj(uint64_t obj)
{
	return obj >= ARB_FIRST_INO && obj <= ARB_INUM_OBJ_MAX;
}

/* item it (side 0 A, 1 B) of inode it->key.objectid differs */
static int acc_item(struct diff_ctx *d, int side, const struct arb_cmp_item *it)
{
	struct acc *a = &d->acc;
	const struct arb_key *k = &it->key;
	const char *why = NULL;
	uint64_t off, len;
	int ret;

	if (k->objectid != a->obj) {
		ret = acc_flush(d);
		if (ret)
			return ret;
		a->obj = k->objectid;
	}
	switch (k->type) {
	case ARB_INODE_ITEM:
	case ARB_INODE_REF:
	case ARB_XATTR_ITEM:
	case ARB_DIR_ITEM:
	case ARB_DIR_INDEX:
	case ARB_EXTENT_DATA:
		ret = arb_item_validate(k, it->data, it->size, &why);
		if (ret < 0)
			return bad_item(d, side, k, why);
		if (ret)
			return 0; /* a newer format's: nothing to say */
		break;
	default:
		break;
	}
	switch (k->type) {
	case ARB_INODE_ITEM:
		memcpy(&a->in[side], it->data, sizeof(a->in[side]));
		a->have[side] = true;
		break;
	case ARB_INODE_REF:
		a->flags |= ARB_CHANGE_NAME;
		break;
	case ARB_XATTR_ITEM:
	case ARB_XATTR_DATA:
		a->flags |= ARB_CHANGE_XATTR;
		break;
	case ARB_DIR_ITEM:
	case ARB_DIR_INDEX:
		a->flags |= ARB_CHANGE_ENTRIES;
		break;
	case ARB_EXTENT_DATA:
		extent_range(it, &off, &len);
		a->flags |= ARB_CHANGE_DATA;
		return range_add(&a->ranges, off, len);
	default:
		break;
	}
	return 0;
}

static int diff_cb(void *ctx, enum arb_cmp_kind kind,
		   const struct arb_cmp_item *a, const struct arb_cmp_item *b)
{
	struct diff_ctx *d = ctx;
	const struct arb_cmp_item *any = a ? a : b;
	int ret = 0;

	if (!inode_obj(any->key.objectid))
		return 0;
	if (a)
		ret = acc_item(d, 0, a);
	if (!ret && b)
		ret = acc_item(d, 1, b);
	(void)kind;
	return ret;
}

/* find-new: is an item of a leaf newer than gen itself newer? */
static int newer_cb(void *ctx, const struct arb_cmp_item *it)
{
	struct diff_ctx *d = ctx;
	struct acc *a = &d->acc;
	const struct arb_key *k = &it->key;
	const char *why = NULL;
	int ret;

	if (!inode_obj(k->objectid))
		return 0;
	if (k->objectid != a->obj) {
		ret = acc_flush(d);
		if (ret)
			return ret;
		a->obj = k->objectid;
	}
	switch (k->type) {
	case ARB_INODE_ITEM:
	case ARB_XATTR_ITEM:
	case ARB_DIR_INDEX:
	case ARB_EXTENT_DATA:
		ret = arb_item_validate(k, it->data, it->size, &why);
		if (ret < 0)
			return bad_item(d, 1, k, why);
		if (ret)
			return 0;
		break;
	default:
		return 0;
	}
	if (k->type == ARB_INODE_ITEM) {
		memcpy(&a->in[1], it->data, sizeof(a->in[1]));
		a->have[1] = true;
	} else if (k->type == ARB_EXTENT_DATA) {
		const struct arb_file_extent *fe = (const void *)it->data;
		uint64_t off, len;

		if (arb_file_extent_f_generation(fe) <= d->gen)
			return 0;
		extent_range(it, &off, &len);
		a->flags |= ARB_CHANGE_DATA;
		return range_add(&a->ranges, off, len);
	} else {
		/* XATTR_ITEM or DIR_INDEX: an entry made after gen */
		struct arb_dent e;
		size_t pos = 0;

		while ((ret = arb_dent_next(it->data, it->size, &pos, &e,
					    &why)) == 0) {
			if (e.transid > d->gen)
				a->flags |= k->type == ARB_XATTR_ITEM
						    ? ARB_CHANGE_XATTR
						    : ARB_CHANGE_ENTRIES;
		}
		if (ret < 0)
			return bad_item(d, 1, k, why);
	}
	return 0;
}

/* ---- the API ------------------------------------------------------------------ */

/* open subvolume id's tree for a walk (lock held) */
static int diff_tree(struct arb_fs *fs, uint64_t id, struct arb_root **out)
{
	struct fs_tree *tr;
	bool ok;
	int ret;

	(void)arb_inum_slot(id, &ok);
	if (!ok)
		return -ENOENT;
	ret = fs_tree_open(fs, id, &tr);
	if (ret)
		return ret == -EINVAL ? -ENOENT : ret;
	if (tr->deleted)
		return -ENOENT;
	*out = tr->root;
	return 0;
}

/* a walk from objectid start: the first one (start 0) commits first */
static int diff_begin(struct arb_fs *fs, struct arb_diff_stats *st,
		      uint64_t *misses, uint64_t start)
{
	int ret = 0;

	memset(st, 0, sizeof(*st));
	if (fs->failed)
		return fs->error ? fs->error : -EIO;
	if (!start && !fs->readonly && (fs->txn_dirty || fs->dirty_bytes))
		ret = fs_commit(fs);
	st->generation = fs->vol->generation;
	*misses = fs->vol->cache.misses;
	return ret;
}

static void diff_end(struct diff_ctx *d, uint64_t misses)
{
	d->st->nodes_read = d->fs->vol->cache.misses - misses;
	dircache_free(&d->dc[0]);
	dircache_free(&d->dc[1]);
	free(d->acc.ranges.v);
}

int arb_find_new(struct arb_fs *fs, uint64_t id, uint64_t gen, uint64_t start,
		 arb_change_fn fn, void *ctx, struct arb_diff_stats *st)
{
	struct diff_ctx *d;
	struct arb_key k = { start, 0, 0 };
	uint64_t misses = 0;
	int ret;

	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->fs = fs;
	d->find_new = true;
	d->gen = gen;
	d->fn = fn;
	d->ctx = ctx;
	d->st = st;
	d->id[0] = d->id[1] = id;
	fs_lock(fs);
	ret = diff_begin(fs, st, &misses, start);
	if (!ret)
		ret = diff_tree(fs, id, &d->root[1]);
	if (!ret) {
		d->root[0] = d->root[1];
		ret = arb_walk_newer(d->root[1], gen, &k, newer_cb, d, st);
		if (!ret)
			ret = acc_flush(d);
	}
	diff_end(d, misses);
	fs_unlock(fs);
	free(d);
	return ret;
}

int arb_tree_diff(struct arb_fs *fs, uint64_t id_a, uint64_t id_b,
		  uint64_t start, arb_change_fn fn, void *ctx,
		  struct arb_diff_stats *st)
{
	struct diff_ctx *d;
	struct arb_key k = { start, 0, 0 };
	uint64_t misses = 0;
	int ret;

	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->fs = fs;
	d->fn = fn;
	d->ctx = ctx;
	d->st = st;
	d->id[0] = id_a;
	d->id[1] = id_b;
	fs_lock(fs);
	ret = diff_begin(fs, st, &misses, start);
	if (!ret)
		ret = diff_tree(fs, id_a, &d->root[0]);
	if (!ret)
		ret = diff_tree(fs, id_b, &d->root[1]);
	if (!ret) {
		ret = arb_cmp_trees(d->root[0], d->root[1], &k, diff_cb, d,
				    st);
		if (!ret)
			ret = acc_flush(d);
	}
	diff_end(d, misses);
	fs_unlock(fs);
	free(d);
	return ret;
}
