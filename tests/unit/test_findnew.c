/* SPDX-License-Identifier: MIT */
/*
 * test_findnew.c - lib/send/compare.c: find-new and diff (arbor/diff.h)
 * against a model of the namespace.
 *
 * A random tree is built in a subvolume, its generation recorded and a
 * read-only snapshot A taken; random operations follow (create, write
 * ranges, truncate, chmod, xattr, rename, link, unlink, mkdir, rmdir),
 * each marking in the model the inodes it changes; then snapshot B.
 * find-new must name exactly the live inodes the model marked (every
 * operation above rewrites the inode items it touches: no false positive
 * is expected here; atime updates, which the test does not cause, would
 * be one), with their paths, NEW for those created, and data ranges
 * covering what was written and still exists; diff(A, B) must name
 * exactly the created, deleted and marked inodes, NAME where the set of
 * links changed, with old and new paths.  A last case counts the nodes
 * read, cold, for 10 changed files in a tree of 10^5.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arbor/arbor.h"
#include "arbor/diff.h"
#include "arbor/subvol.h"
#include "core.h"
#include "fs/fs_int.h"
#include "testutil.h"

#define ROOT ARB_ROOT_INO
#define MiB (1024ULL * 1024)

static struct arb_dev *mem;
static struct arb_fs *fs;
static struct arb_fs_opts fopts;
static const struct arb_cred cred = { 0, 0 };

static void fs_open_now(void)
{
	const char *why = NULL;
	int ret = arb_fs_open(tu_dev_borrow(mem), &fopts, &fs, &why);

	ck_assert_msg(ret == 0, "open: %d %s", ret, why ? why : "");
}

static void setup_size(uint64_t size)
{
	struct arb_mkfs_opts mo;
	struct arb_dev *d;

	arb_log_level = ARB_LOG_WARN;
	ck_assert_int_eq(arb_dev_open_mem(size, &mem), 0);
	arb_mkfs_opts_default(&mo);
	d = tu_dev_borrow(mem);
	ck_assert_int_eq(arb_mkfs(d, &mo), 0);
	arb_dev_destroy(d);
	arb_fs_opts_default(&fopts);
	fopts.commit_interval = 0;
	fs_open_now();
}

static void setup(void)
{
	setup_size(512 * MiB);
}

static void teardown(void)
{
	if (fs) {
		ck_assert_int_eq(arb_fs_check(fs, stderr), 0);
		ck_assert_int_eq(arb_fs_close(fs), 0);
		fs = NULL;
	}
	arb_dev_destroy(mem);
	mem = NULL;
}

static void reopen(void)
{
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs = NULL;
	fs_open_now();
}

static uint64_t commit(void)
{
	uint64_t gen;

	ck_assert_int_eq(arb_fs_commit(fs, &gen), 0);
	return gen;
}

/* ---- the model ------------------------------------------------------------- */

#define MAXOBJ 8192
#define MAXLINKS 6
#define MAXRANGES 64

struct mlink {
	uint64_t parent;
	char name[24];
};

struct mino {
	bool alive, dir;
	uint64_t size;
	int nlinks;
	struct mlink links[MAXLINKS];
	int nchildren; /* directories: entries */
	/* since the mark */
	bool touched, created;
	int nranges;
	struct arb_change_range ranges[MAXRANGES];
	bool ranges_overflow;
	/* at snapshot A */
	bool a_alive;
	int a_nlinks;
	struct mlink a_links[MAXLINKS];
};

static struct mino *m; /* by objectid */
static uint64_t tree_id, tree_root;
static uint64_t seq_name;
static uint64_t rs;

static uint64_t ino_of(uint64_t obj)
{
	return arb_inum(tree_id, obj);
}

static void touch(uint64_t obj)
{
	m[obj].touched = true;
}

/* path of obj in the model (links[0] for directories) */
static bool mpath_old; /* paths at snapshot A */
static void mpath(uint64_t obj, const struct mlink *l, char *out, size_t size)
{
	char up[ARB_DIFF_PATH_MAX];

	if (l->parent == ARB_FIRST_INO) {
		snprintf(out, size, "%s", l->name);
		return;
	}
	mpath(l->parent,
	      mpath_old ? &m[l->parent].a_links[0] : &m[l->parent].links[0],
	      up, sizeof(up));
	ck_assert_uint_lt(strlen(up) + strlen(l->name) + 2, size);
	strcpy(out, up);
	strcat(out, "/");
	strcat(out, l->name);
	(void)obj;
}

/* a random live inode (dir: directories only, file: files only) */
static uint64_t pick(int kind)
{
	uint64_t tries, obj;

	for (tries = 0; tries < 10000; tries++) {
		obj = ARB_FIRST_INO + tu_rand_range(&rs, MAXOBJ - ARB_FIRST_INO);
		if (!m[obj].alive)
			continue;
		if (kind == 1 && !m[obj].dir)
			continue;
		if (kind == 2 && m[obj].dir)
			continue;
		return obj;
	}
	return kind == 1 ? ARB_FIRST_INO : 0;
}

static void new_name(char *buf)
{
	snprintf(buf, 24, "n%llu", (unsigned long long)++seq_name);
}

static void add_range(struct mino *mi, uint64_t off, uint64_t len)
{
	if (mi->nranges == MAXRANGES) {
		mi->ranges_overflow = true;
		return;
	}
	mi->ranges[mi->nranges].off = off;
	mi->ranges[mi->nranges].len = len;
	mi->nranges++;
}

static void clip_ranges(struct mino *mi, uint64_t size)
{
	int i;

	for (i = 0; i < mi->nranges; i++) {
		struct arb_change_range *r = &mi->ranges[i];

		if (r->off >= size)
			r->len = 0;
		else if (r->off + r->len > size)
			r->len = size - r->off;
	}
}

static uint64_t op_create(bool dir)
{
	uint64_t parent = pick(1), obj;
	struct arb_stat st;
	char name[24];
	int ret;

	new_name(name);
	if (dir)
		ret = arb_fs_mkdir(fs, ino_of(parent), name, 0755, &cred, &st);
	else
		ret = arb_fs_mknod(fs, ino_of(parent), name, S_IFREG | 0644, 0,
				   &cred, &st);
	ck_assert_msg(ret == 0, "create %s: %d", name, ret);
	obj = arb_inum_obj(st.ino);
	ck_assert_uint_lt(obj, MAXOBJ);
	memset(&m[obj], 0, sizeof(m[obj]));
	m[obj].alive = true;
	m[obj].dir = dir;
	m[obj].nlinks = 1;
	m[obj].links[0].parent = parent;
	strcpy(m[obj].links[0].name, name);
	m[obj].touched = m[obj].created = true;
	m[parent].nchildren++;
	touch(parent);
	return obj;
}

static void op_write(void)
{
	uint64_t obj = pick(2), off, len;
	static uint8_t buf[65536];
	size_t i;

	if (!obj)
		return;
	off = tu_rand_range(&rs, 4) ? tu_rand_range(&rs, 200000)
				    : tu_rand_range(&rs, 3000);
	len = 1 + tu_rand_range(&rs, tu_rand_range(&rs, 3) ? 3000 : 65536);
	for (i = 0; i < len; i++)
		buf[i] = (uint8_t)tu_rand(&rs);
	ck_assert_int_eq(arb_fs_write(fs, ino_of(obj), buf, len, off),
			 (ssize_t)len);
	if (off + len > m[obj].size)
		m[obj].size = off + len;
	add_range(&m[obj], off, len);
	touch(obj);
}

static void op_truncate(void)
{
	uint64_t obj = pick(2);
	struct arb_setattr sa = { 0 };

	if (!obj)
		return;
	sa.size = tu_rand_range(&rs, 3) ? tu_rand_range(&rs, m[obj].size + 1)
					: tu_rand_range(&rs, 300000);
	ck_assert_int_eq(arb_fs_setattr(fs, ino_of(obj), &sa, ARB_SET_SIZE,
					&cred, NULL),
			 0);
	m[obj].size = sa.size;
	clip_ranges(&m[obj], sa.size);
	touch(obj);
}

static void op_chmod(void)
{
	uint64_t obj = pick(0);
	struct arb_setattr sa = { 0 };

	sa.mode = (m[obj].dir ? S_IFDIR : S_IFREG) |
		  (uint32_t)(0600 | tu_rand_range(&rs, 0100));
	ck_assert_int_eq(arb_fs_setattr(fs, ino_of(obj), &sa, ARB_SET_MODE,
					&cred, NULL),
			 0);
	touch(obj);
}

static void op_xattr(void)
{
	uint64_t obj = pick(0);
	char name[32], val[64];

	snprintf(name, sizeof(name), "user.x%u", (unsigned)tu_rand_range(&rs, 4));
	snprintf(val, sizeof(val), "v%llu", (unsigned long long)tu_rand(&rs));
	ck_assert_int_eq(arb_fs_setxattr(fs, ino_of(obj), name, val,
					 strlen(val), 0),
			 0);
	touch(obj);
}

/* is anc an ancestor of (or) obj */
static bool is_under(uint64_t obj, uint64_t anc)
{
	while (obj != ARB_FIRST_INO) {
		if (obj == anc)
			return true;
		obj = m[obj].links[0].parent;
	}
	return anc == ARB_FIRST_INO;
}

static void op_rename(void)
{
	uint64_t obj = pick(0), to = pick(1);
	int li;
	struct mlink *l;
	char name[24];

	if (obj == ARB_FIRST_INO || (m[obj].dir && is_under(to, obj)))
		return;
	li = (int)tu_rand_range(&rs, (uint64_t)m[obj].nlinks);
	l = &m[obj].links[li];
	new_name(name);
	ck_assert_int_eq(arb_fs_rename(fs, ino_of(l->parent), l->name,
				       ino_of(to), name, 0),
			 0);
	touch(l->parent);
	touch(to);
	touch(obj);
	m[l->parent].nchildren--;
	m[to].nchildren++;
	l->parent = to;
	strcpy(l->name, name);
}

static void op_link(void)
{
	uint64_t obj = pick(2), to = pick(1);
	char name[24];

	if (!obj || m[obj].nlinks == MAXLINKS)
		return;
	new_name(name);
	ck_assert_int_eq(arb_fs_link(fs, ino_of(obj), ino_of(to), name, NULL),
			 0);
	m[obj].links[m[obj].nlinks].parent = to;
	strcpy(m[obj].links[m[obj].nlinks].name, name);
	m[obj].nlinks++;
	m[to].nchildren++;
	touch(obj);
	touch(to);
}

/* files unlinked while open (released before the remount) */
#define MAXOPEN 64
static uint64_t open_inos[MAXOPEN];
static int nr_open;

static void release_all(void)
{
	while (nr_open)
		ck_assert_int_eq(arb_fs_release_inode(fs, open_inos[--nr_open]),
				 0);
}

static void op_unlink(void)
{
	uint64_t obj = pick(2);
	int li;
	struct mlink l;

	if (!obj)
		return;
	li = (int)tu_rand_range(&rs, (uint64_t)m[obj].nlinks);
	l = m[obj].links[li];
	/* now and then the last name of a file still open: an orphan, in
	 * the tree with no name until its release */
	if (m[obj].nlinks == 1 && nr_open < MAXOPEN &&
	    tu_rand_range(&rs, 3) == 0) {
		ck_assert_int_eq(arb_fs_open_inode(fs, ino_of(obj)), 0);
		open_inos[nr_open++] = ino_of(obj);
	}
	ck_assert_int_eq(arb_fs_unlink(fs, ino_of(l.parent), l.name), 0);
	m[obj].links[li] = m[obj].links[--m[obj].nlinks];
	m[l.parent].nchildren--;
	touch(l.parent);
	if (!m[obj].nlinks)
		m[obj].alive = false;
	else
		touch(obj);
}

static void op_rmdir(void)
{
	uint64_t obj = pick(1);
	struct mlink l;

	if (obj == ARB_FIRST_INO || m[obj].nchildren)
		return;
	l = m[obj].links[0];
	ck_assert_int_eq(arb_fs_rmdir(fs, ino_of(l.parent), l.name), 0);
	m[l.parent].nchildren--;
	touch(l.parent);
	m[obj].alive = false;
}

static void random_op(void)
{
	switch (tu_rand_range(&rs, 12)) {
	case 0: case 1: op_create(false); break;
	case 2: op_create(true); break;
	case 3: case 4: op_write(); break;
	case 5: op_truncate(); break;
	case 6: op_chmod(); break;
	case 7: op_xattr(); break;
	case 8: op_rename(); break;
	case 9: op_link(); break;
	case 10: op_unlink(); break;
	case 11: op_rmdir(); break;
	}
}

/* forget the marks: from now on count changes again */
static void mark(void)
{
	uint64_t i;

	for (i = 0; i < MAXOBJ; i++) {
		m[i].touched = m[i].created = false;
		m[i].nranges = 0;
		m[i].ranges_overflow = false;
		m[i].a_alive = m[i].alive;
		m[i].a_nlinks = m[i].nlinks;
		memcpy(m[i].a_links, m[i].links, sizeof(m[i].links));
	}
}

/* ---- what the engine answered ----------------------------------------------- */

struct got {
	uint32_t flags;
	bool seen;
	int npaths, nold;
	char **paths, **old;
	int nranges;
	struct arb_change_range *ranges;
	uint64_t size, old_size;
};
static struct got *g;

static char **copy_paths(size_t n, char *const *v)
{
	char **c = calloc(n + 1, sizeof(*c));
	size_t i;

	for (i = 0; i < n; i++)
		c[i] = strdup(v[i]);
	return c;
}

static uint64_t last_obj;

static int collect(void *ctx, const struct arb_change *c)
{
	struct got *x;

	(void)ctx;
	ck_assert_uint_lt(c->obj, MAXOBJ);
	/* in objectid order, each once (DELETED then NEW may share one) */
	ck_assert_uint_ge(c->obj, last_obj);
	last_obj = c->obj;
	x = &g[c->obj];
	ck_assert_msg(!x->seen, "inode %llu reported twice",
		      (unsigned long long)c->obj);
	x->seen = true;
	x->flags = c->flags;
	x->size = c->size;
	x->old_size = c->old_size;
	x->npaths = (int)c->nr_paths;
	x->paths = copy_paths(c->nr_paths, c->paths);
	x->nold = (int)c->nr_old_paths;
	x->old = copy_paths(c->nr_old_paths, c->old_paths);
	x->nranges = (int)c->nr_ranges;
	x->ranges = malloc((c->nr_ranges + 1) * sizeof(*c->ranges));
	if (c->nr_ranges) /* ranges is NULL without data changes */
		memcpy(x->ranges, c->ranges,
		       c->nr_ranges * sizeof(*c->ranges));
	return 0;
}

static void got_reset(void)
{
	uint64_t i;
	int j;

	for (i = 0; i < MAXOBJ; i++) {
		for (j = 0; j < g[i].npaths; j++)
			free(g[i].paths[j]);
		for (j = 0; j < g[i].nold; j++)
			free(g[i].old[j]);
		free(g[i].paths);
		free(g[i].old);
		free(g[i].ranges);
	}
	memset(g, 0, MAXOBJ * sizeof(*g));
	last_obj = 0;
}

static void debug_path(const char *p)
{
	char buf[ARB_DIFF_PATH_MAX], *save, *t;
	uint64_t cur = tree_root;
	struct arb_stat st;

	strcpy(buf, p);
	for (t = strtok_r(buf, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
		int ret = arb_fs_lookup(fs, cur, t, &st);

		fprintf(stderr, "  %s -> %d %llu\n", t, ret,
			(unsigned long long)arb_inum_obj(st.ino));
		if (ret)
			return;
		cur = st.ino;
	}
}

/* the model's paths of obj (from links, or a_links) equal the answer's */
static void check_paths(uint64_t obj, int n, const struct mlink *links,
			int gn, char **gp)
{
	char p[ARB_DIFF_PATH_MAX];
	int i, j;

	if (obj == ARB_FIRST_INO) {
		ck_assert_int_eq(gn, 1);
		ck_assert_str_eq(gp[0], ".");
		return;
	}
	ck_assert_msg(gn == n, "inode %llu: %d paths, model %d",
		      (unsigned long long)obj, gn, n);
	for (i = 0; i < n; i++) {
		mpath(obj, &links[i], p, sizeof(p));
		for (j = 0; j < gn; j++)
			if (!strcmp(gp[j], p))
				break;
		if (j == gn) {
			for (j = 0; j < gn; j++)
				fprintf(stderr, "reported: %s\n", gp[j]);
			debug_path(p);
			debug_path(gp[0]);
			j = gn;
		}
		ck_assert_msg(j < gn, "inode %llu: path %s not reported",
			      (unsigned long long)obj, p);
	}
}

/* every written range (clipped) lies inside the reported ones */
static void check_ranges(uint64_t obj)
{
	struct mino *mi = &m[obj];
	int i, j;

	if (mi->ranges_overflow)
		return;
	for (i = 0; i < mi->nranges; i++) {
		const struct arb_change_range *r = &mi->ranges[i];
		bool in = false;

		if (!r->len)
			continue;
		ck_assert_msg(g[obj].flags & ARB_CHANGE_DATA,
			      "inode %llu: written, no DATA",
			      (unsigned long long)obj);
		for (j = 0; j < g[obj].nranges && !in; j++)
			in = g[obj].ranges[j].off <= r->off &&
			     g[obj].ranges[j].off + g[obj].ranges[j].len >=
				     r->off + r->len;
		ck_assert_msg(in, "inode %llu: written [%llu, +%llu) not in "
			      "the ranges", (unsigned long long)obj,
			      (unsigned long long)r->off,
			      (unsigned long long)r->len);
	}
}

static bool same_links(const struct mino *mi)
{
	int i, j;

	if (mi->nlinks != mi->a_nlinks)
		return false;
	for (i = 0; i < mi->nlinks; i++) {
		for (j = 0; j < mi->a_nlinks; j++)
			if (mi->links[i].parent == mi->a_links[j].parent &&
			    !strcmp(mi->links[i].name, mi->a_links[j].name))
				break;
		if (j == mi->a_nlinks)
			return false;
	}
	return true;
}

static void check_find_new(uint64_t gen)
{
	struct arb_diff_stats st;
	uint64_t obj, next;
	int ret;

	got_reset();
	ret = arb_find_new(fs, tree_id, gen, 0, collect, NULL, &st);
	ck_assert_int_eq(ret, 0);
	next = st.generation;
	for (obj = ARB_FIRST_INO; obj < MAXOBJ; obj++) {
		struct mino *mi = &m[obj];
		bool want = mi->alive && mi->touched;

		ck_assert_msg(g[obj].seen == want,
			      "find-new: inode %llu reported %d, model %d",
			      (unsigned long long)obj, g[obj].seen, want);
		if (!want)
			continue;
		ck_assert(g[obj].flags & ARB_CHANGE_META);
		ck_assert_int_eq(!!(g[obj].flags & ARB_CHANGE_NEW),
				 mi->created);
		if (!mi->dir)
			ck_assert_uint_eq(g[obj].size, mi->size);
		check_paths(obj, mi->nlinks, mi->links, g[obj].npaths,
			    g[obj].paths);
		check_ranges(obj);
	}
	/* the marker round-trips: nothing changed since */
	got_reset();
	ck_assert_int_eq(arb_find_new(fs, tree_id, next, 0, collect, NULL, &st),
			 0);
	ck_assert_uint_eq(st.inodes, 0);
	ck_assert_uint_eq(st.generation, next);
}

static void check_diff(uint64_t a, uint64_t b)
{
	struct arb_diff_stats st;
	uint64_t obj;

	got_reset();
	ck_assert_int_eq(arb_tree_diff(fs, a, b, 0, collect, NULL, &st), 0);
	for (obj = ARB_FIRST_INO; obj < MAXOBJ; obj++) {
		struct mino *mi = &m[obj];
		bool created = mi->alive && !mi->a_alive;
		bool deleted = !mi->alive && mi->a_alive;
		bool mod = mi->alive && mi->a_alive && mi->touched;

		ck_assert_msg(g[obj].seen == (created || deleted || mod),
			      "diff: inode %llu reported %d, model c%d d%d m%d",
			      (unsigned long long)obj, g[obj].seen, created,
			      deleted, mod);
		if (!g[obj].seen)
			continue;
		if (created) {
			ck_assert_uint_eq(g[obj].flags & (ARB_CHANGE_NEW |
							  ARB_CHANGE_DELETED),
					  ARB_CHANGE_NEW);
			check_paths(obj, mi->nlinks, mi->links, g[obj].npaths,
				    g[obj].paths);
			check_ranges(obj);
		} else if (deleted) {
			ck_assert_uint_eq(g[obj].flags, ARB_CHANGE_DELETED);
			mpath_old = true;
			check_paths(obj, mi->a_nlinks, mi->a_links,
				    g[obj].npaths, g[obj].paths);
			mpath_old = false;
		} else {
			bool renamed = !same_links(mi);

			ck_assert(!(g[obj].flags & (ARB_CHANGE_NEW |
						    ARB_CHANGE_DELETED)));
			ck_assert_msg(!!(g[obj].flags & ARB_CHANGE_NAME) ==
					      renamed,
				      "diff: inode %llu NAME %d, model %d",
				      (unsigned long long)obj,
				      !!(g[obj].flags & ARB_CHANGE_NAME),
				      renamed);
			check_paths(obj, mi->nlinks, mi->links, g[obj].npaths,
				    g[obj].paths);
			if (renamed) {
				mpath_old = true;
				check_paths(obj, mi->a_nlinks, mi->a_links,
					    g[obj].nold, g[obj].old);
				mpath_old = false;
			}
			if (!mi->dir) {
				ck_assert_uint_eq(g[obj].size, mi->size);
				ck_assert_int_eq(
					!!(g[obj].flags & ARB_CHANGE_SIZE),
					g[obj].size != g[obj].old_size);
			}
			check_ranges(obj);
		}
	}
	/* a tree against itself: nothing, nothing read below the root */
	got_reset();
	ck_assert_int_eq(arb_tree_diff(fs, b, b, 0, collect, NULL, &st), 0);
	ck_assert_uint_eq(st.inodes, 0);
	ck_assert_uint_eq(st.nodes_visited, 0);
}

static uint64_t snap(const char *name)
{
	struct arb_stat st;

	ck_assert_int_eq(arb_subvol_snapshot(fs, tree_root, ROOT, name,
					     ARB_SUBVOL_RDONLY, &cred, &st),
			 0);
	return arb_inum_tree(st.ino);
}

START_TEST(test_model)
{
	uint64_t gen, a, b, i, n0, n1;
	struct arb_stat st;

	rs = tu_seed("findnew model") + (uint64_t)_i;
	m = calloc(MAXOBJ, sizeof(*m));
	g = calloc(MAXOBJ, sizeof(*g));
	seq_name = 0;
	nr_open = 0;
	ck_assert_int_eq(arb_subvol_create(fs, ROOT, "src", 0755, &cred, &st),
			 0);
	tree_id = arb_inum_tree(st.ino);
	tree_root = st.ino;
	m[ARB_FIRST_INO].alive = m[ARB_FIRST_INO].dir = true;
	n0 = TU_SCALE(400, 2500);
	n1 = TU_SCALE(150, 1200);
	for (i = 0; i < n0; i++) {
		if (i < 20 || tu_rand_range(&rs, 3) == 0)
			op_create(tu_rand_range(&rs, 4) == 0);
		else
			random_op();
	}
	gen = commit();
	a = snap("A");
	gen = commit();
	ck_assert_uint_ge(gen, 2);
	mark();
	for (i = 0; i < n1; i++)
		random_op();
	/* a part before a commit, a part after: both count */
	if (_i & 1)
		commit();
	check_find_new(gen);
	b = snap("B");
	check_diff(a, b);
	/* and after a remount, cold (the orphans are freed) */
	release_all();
	reopen();
	check_find_new(gen);
	check_diff(a, b);
	got_reset();
	free(g);
	free(m);
}
END_TEST

/* ---- cost ---------------------------------------------------------------------- */

static uint64_t counted[64];
static size_t nr_counted;

static int count_cb(void *ctx, const struct arb_change *c)
{
	(void)ctx;
	if (nr_counted < 64)
		counted[nr_counted] = c->ino;
	nr_counted++;
	return 0;
}

/* exactly the changed files were reported (one may be picked twice) */
static void check_counted(const uint64_t *changed)
{
	size_t i, j, distinct = 0;

	for (i = 0; i < 10; i++) {
		for (j = 0; j < i; j++)
			if (changed[j] == changed[i])
				break;
		distinct += j == i;
	}
	ck_assert_uint_eq(nr_counted, distinct);
	for (i = 0; i < 10; i++) {
		for (j = 0; j < nr_counted; j++)
			if (arb_inum_obj(counted[j]) == arb_inum_obj(changed[i]))
				break;
		ck_assert_msg(j < nr_counted, "changed inode not reported");
	}
	nr_counted = 0;
}

START_TEST(test_cost)
{
	uint64_t nfiles = 100000, ndirs = 100, i, gen, a, b;
	uint64_t *files, changed[10];
	struct arb_diff_stats st;
	struct arb_stat s;
	uint64_t dirs[100];
	char name[32];
	static char data[4096];

	rs = tu_seed("findnew cost");
	files = malloc(nfiles * sizeof(*files));
	ck_assert_int_eq(arb_subvol_create(fs, ROOT, "src", 0755, &cred, &s), 0);
	tree_id = arb_inum_tree(s.ino);
	tree_root = s.ino;
	for (i = 0; i < ndirs; i++) {
		snprintf(name, sizeof(name), "d%llu", (unsigned long long)i);
		ck_assert_int_eq(arb_fs_mkdir(fs, tree_root, name, 0755, &cred,
					      &s),
				 0);
		dirs[i] = s.ino;
	}
	for (i = 0; i < nfiles; i++) {
		snprintf(name, sizeof(name), "f%llu", (unsigned long long)i);
		ck_assert_int_eq(arb_fs_mknod(fs, dirs[i % ndirs], name,
					      S_IFREG | 0644, 0, &cred, &s),
				 0);
		files[i] = s.ino;
	}
	gen = commit();
	a = snap("A");
	gen = commit();
	memset(data, 'x', sizeof(data));
	for (i = 0; i < 10; i++) {
		changed[i] = files[tu_rand_range(&rs, nfiles)];
		ck_assert_int_eq(arb_fs_write(fs, changed[i], data,
					      sizeof(data), 0),
				 (ssize_t)sizeof(data));
	}
	commit();
	b = snap("B");
	/* cold: a fresh open reads nothing of the subvolumes yet */
	reopen();
	ck_assert_int_eq(arb_find_new(fs, tree_id, gen, 0, count_cb, NULL,
				      &st),
			 0);
	printf("find-new, 10 of %llu files changed, cold: %llu nodes read, "
	       "%llu visited, %llu subtrees skipped, %llu inodes\n",
	       (unsigned long long)nfiles, (unsigned long long)st.nodes_read,
	       (unsigned long long)st.nodes_visited,
	       (unsigned long long)st.subtrees_skipped,
	       (unsigned long long)st.inodes);
	check_counted(changed);
	ck_assert_uint_le(st.nodes_read, 300);
	reopen();
	ck_assert_int_eq(arb_tree_diff(fs, a, b, 0, count_cb, NULL, &st), 0);
	printf("diff, 10 of %llu files changed, cold: %llu nodes read, "
	       "%llu visited, %llu subtrees skipped, %llu inodes\n",
	       (unsigned long long)nfiles, (unsigned long long)st.nodes_read,
	       (unsigned long long)st.nodes_visited,
	       (unsigned long long)st.subtrees_skipped,
	       (unsigned long long)st.inodes);
	check_counted(changed);
	ck_assert_uint_le(st.nodes_read, 300);
	free(files);
}
END_TEST

/* ---- hostile trees --------------------------------------------------------------- */

/*
 * Directories whose INODE_REFs name each other (a cycle no operation
 * makes): resolving a path under them ends with -EUCLEAN, not a hang.
 */
START_TEST(test_ref_cycle)
{
	uint8_t buf[sizeof(struct arb_inode_ref) + 1];
	struct arb_inode_ref *r = (struct arb_inode_ref *)buf;
	uint64_t gen, a, b, f;
	struct arb_setattr sa = { 0 };
	struct arb_diff_stats st;
	struct arb_root *root;
	struct arb_stat s;
	struct arb_txn *t;
	struct arb_key k;

	ck_assert_int_eq(arb_subvol_create(fs, ROOT, "src", 0755, &cred, &s), 0);
	tree_id = arb_inum_tree(s.ino);
	ck_assert_int_eq(arb_fs_mkdir(fs, s.ino, "a", 0755, &cred, &s), 0);
	a = s.ino;
	ck_assert_int_eq(arb_fs_mkdir(fs, a, "b", 0755, &cred, &s), 0);
	b = s.ino;
	ck_assert_int_eq(arb_fs_mknod(fs, b, "f", S_IFREG | 0644, 0, &cred,
				      &s),
			 0);
	f = s.ino;
	gen = commit();
	sa.mode = S_IFREG | 0600;
	ck_assert_int_eq(arb_fs_setattr(fs, f, &sa, ARB_SET_MODE, &cred, NULL),
			 0);
	/* a's name moves from the subvolume's root into b */
	fs_lock(fs);
	ck_assert_int_eq(arb_root_get(fs->vol, tree_id, &root), 0);
	ck_assert_int_eq(arb_txn_begin(fs->vol, &t), 0);
	k = (struct arb_key){ arb_inum_obj(a), ARB_INODE_REF, ARB_FIRST_INO };
	ck_assert_int_eq(arb_del_item(t, root, &k), 0);
	k.offset = arb_inum_obj(b);
	arb_set_inode_ref_r_index(r, 2);
	arb_set_inode_ref_r_name_len(r, 1);
	buf[sizeof(*r)] = 'a';
	ck_assert_int_eq(arb_insert_item(t, root, &k, buf, sizeof(buf)), 0);
	arb_txn_end(t);
	fs_unlock(fs);
	commit();
	ck_assert_int_eq(arb_find_new(fs, tree_id, gen, 0, count_cb, NULL, &st),
			 -EUCLEAN);
	/* the image is damaged on purpose: no check at the end */
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs = NULL;
	nr_counted = 0;
}
END_TEST

static Suite *findnew_suite(void)
{
	Suite *s = suite_create("findnew");
	TCase *tc = tcase_create("model");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 600);
	tcase_add_loop_test(tc, test_model, 0, 4);
	suite_add_tcase(s, tc);
	tc = tcase_create("cost");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 900);
	tcase_add_test(tc, test_cost);
	suite_add_tcase(s, tc);
	tc = tcase_create("hostile");
	tcase_add_checked_fixture(tc, setup, teardown);
	/* the fixture's 512 MiB image alone takes seconds where the memory
	 * is filled (MALLOC_PERTURB_, which meson sets) on a busy machine */
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_ref_cycle);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(findnew_suite());
}
