/* SPDX-License-Identifier: MIT */
/*
 * test_alloc.c - lib/core/alloc.c: back-references of data extents
 * (EXTENT_DATA_REF) whose keys collide.
 *
 * The key offset of a back-reference is a hash of (tree, inode, offset)
 * built from CRC-32C, which is affine over GF(2): for a fixed tree, the map
 * from the bits of (inode, offset) to the 63 bits of the hash is a linear
 * map plus a constant.  Its two halves are CRCs of the same bytes that
 * differ only in the seed, so the map has rank 32: Gaussian elimination on
 * the 80 input bits we let vary leaves a kernel of dimension 48, pairs
 * whose hashes are exactly equal.  (For the same reason two different
 * hashes are never closer than 2^31, so the probe chains of different
 * homes do not meet in practice.)  With them the tests put more
 * back-references on one home key offset than the old bounded probe
 * window held, remove them in a random order, and check the whole volume
 * (both checkers) after every commit.  The file extent items live in a
 * tree of their own (PREALLOC: no data written, so no checksums expected).
 */
#include <stdlib.h>
#include <string.h>

#include "arbor/arbor.h"
#include "core.h"
#include "fs/fs_int.h"
#include "testutil.h"

#define MiB (1024ULL * 1024)
/* not a subvolume id: a bare tree of extent items, which the subvolume
 * checks would call unlinked */
#define TREE 100ULL
/* free input bits: inode bits 0..39, file offset bits 12..51 */
#define IN_BITS 80

static struct arb_dev *mem;

/* ---- colliding (inode, offset) pairs ---- */

struct gf_row {
	uint64_t img;   /* hash difference */
	uint64_t in[2]; /* (inode, offset) difference */
};

struct coll {
	uint64_t ino0, off0, home;
	struct gf_row rows[IN_BITS];
	int rank; /* rows[0..rank) pivots, rows[rank..) kernel */
};

static uint64_t href(uint64_t ino, uint64_t off)
{
	return arb_data_ref_hash(TREE, ino, off);
}

static void coll_init(struct coll *c, uint64_t ino0, uint64_t off0)
{
	int r = 0;

	c->ino0 = ino0;
	c->off0 = off0;
	c->home = href(ino0, off0);
	for (int b = 0; b < IN_BITS; b++) {
		struct gf_row *x = &c->rows[b];
		x->in[0] = b < 40 ? 1ULL << b : 0;
		x->in[1] = b < 40 ? 0 : 1ULL << (b - 40 + 12);
		x->img = href(ino0 ^ x->in[0], off0 ^ x->in[1]) ^ c->home;
	}
	/* row echelon form; the rows left without a pivot map to 0 */
	for (int bit = 62; bit >= 0; bit--) {
		int p = -1;
		for (int i = r; i < IN_BITS && p < 0; i++)
			if (c->rows[i].img >> bit & 1)
				p = i;
		if (p < 0)
			continue;
		struct gf_row t = c->rows[r];
		c->rows[r] = c->rows[p];
		c->rows[p] = t;
		for (int i = r + 1; i < IN_BITS; i++) {
			if (!(c->rows[i].img >> bit & 1))
				continue;
			c->rows[i].img ^= c->rows[r].img;
			c->rows[i].in[0] ^= c->rows[r].in[0];
			c->rows[i].in[1] ^= c->rows[r].in[1];
		}
		r++;
	}
	c->rank = r;
	ck_assert_int_eq(r, 32);
}

/* the m-th pair (m < 2^48) whose hash equals home: kernel combination m */
static void coll_pair(const struct coll *c, uint64_t m, uint64_t *ino,
		      uint64_t *off)
{
	uint64_t d[2] = { 0, 0 };

	for (int i = c->rank; i < IN_BITS; i++, m >>= 1) {
		ck_assert_uint_eq(c->rows[i].img, 0);
		if (m & 1) {
			d[0] ^= c->rows[i].in[0];
			d[1] ^= c->rows[i].in[1];
		}
	}
	ck_assert_uint_eq(m, 0);
	*ino = c->ino0 ^ d[0];
	*off = c->off0 ^ d[1];
	ck_assert_uint_eq(href(*ino, *off), c->home);
}

/* ---- the filesystem ---- */

static struct arb_fs *open_fs(bool rw)
{
	struct arb_fs_opts o;
	struct arb_fs *fs;

	arb_fs_opts_default(&o);
	o.commit_interval = 0;
	o.readonly = !rw;
	o.keep_orphans = true;
	ck_assert_int_eq(arb_fs_open(tu_dev_borrow(mem), &o, &fs, NULL), 0);
	return fs;
}

static void setup(void)
{
	struct arb_mkfs_opts mo;
	struct arb_dev *d;

	arb_log_level = ARB_LOG_ERR;
	ck_assert_int_eq(arb_dev_open_mem(64 * MiB, &mem), 0);
	arb_mkfs_opts_default(&mo);
	/* small nodes: the back-references of one extent span leaves */
	mo.nodesize = 4096;
	d = tu_dev_borrow(mem);
	ck_assert_int_eq(arb_mkfs(d, &mo), 0);
	arb_dev_destroy(d);
}

static void teardown(void)
{
	arb_dev_destroy(mem);
	mem = NULL;
}

/* problems of id (0: any) in a check of the committed state */
static size_t problems(struct arb_fs *fs, enum arb_problem_id id)
{
	struct arb_check_result r = { 0 };
	size_t n = 0;
	int ret = arb_fs_check_records(fs, &r, id ? NULL : stderr);

	ck_assert(ret == 0 || ret == -EUCLEAN);
	for (size_t i = 0; i < r.nr; i++)
		n += !id || r.pb[i].id == id;
	arb_check_result_free(&r);
	return n;
}

static void check_clean(struct arb_fs *fs)
{
	ck_assert_uint_eq(problems(fs, 0), 0);
}

struct ext {
	uint64_t bytenr, len;
};

static struct arb_txn *begin(struct arb_fs *fs)
{
	struct arb_txn *t;

	fs_lock(fs);
	ck_assert_int_eq(arb_txn_begin(fs->vol, &t), 0);
	return t;
}

static int commit(struct arb_fs *fs, struct arb_txn *t)
{
	int ret;

	arb_txn_end(t);
	fs->txn_dirty = true;
	ret = fs_commit(fs);
	fs_unlock(fs);
	return ret;
}

/* tree TREE and one data extent, in a transaction left open for the
 * first reference (an extent nothing references is gone at commit) */
static struct ext make_tree(struct arb_fs *fs, struct arb_txn **t)
{
	struct arb_root *r;
	struct ext x;

	*t = begin(fs);
	ck_assert_int_eq(arb_root_create(*t, TREE, &r), 0);
	ck_assert_int_eq(arb_alloc_data(*t, 4096, 4096, 0, &x.bytenr, &x.len),
			 0);
	return x;
}

/* a PREALLOC file extent item (ino, off) of the whole extent, and its
 * back-reference, as the file layer would add or drop them */
static int ref_pair(struct arb_txn *t, struct arb_fs *fs, const struct ext *x,
		    uint64_t ino, uint64_t off, int delta)
{
	struct arb_key k = { ino, ARB_EXTENT_DATA, off };
	struct arb_file_extent fe;
	struct arb_root *r;
	int ret;

	ck_assert_int_eq(arb_root_get(fs->vol, TREE, &r), 0);
	if (delta > 0) {
		memset(&fe, 0, sizeof(fe));
		arb_set_file_extent_f_generation(&fe, t->transid);
		arb_set_file_extent_f_ram_bytes(&fe, x->len);
		arb_set_file_extent_f_type(&fe, ARB_FILE_EXTENT_PREALLOC);
		arb_set_file_extent_f_disk_bytenr(&fe, x->bytenr);
		arb_set_file_extent_f_disk_num_bytes(&fe, x->len);
		arb_set_file_extent_f_num_bytes(&fe, x->len);
		ret = arb_insert_item(t, r, &k, &fe, sizeof(fe));
	} else {
		ret = arb_del_item(t, r, &k);
	}
	if (ret)
		return ret;
	return arb_ref_data(t, x->bytenr, x->len, TREE, ino, off, delta);
}

/* key offsets of the extent's back-reference items: lowest, highest */
static size_t ref_keys(struct arb_fs *fs, uint64_t bytenr, uint64_t *lo,
		       uint64_t *hi)
{
	struct arb_key k = { bytenr, ARB_EXTENT_DATA_REF, 0 };
	struct arb_iter it;
	size_t n = 0;
	int ret;

	*lo = UINT64_MAX;
	*hi = 0;
	arb_iter_init(&it, fs->vol->extent_root);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		arb_iter_key(&it, &k);
		if (k.objectid != bytenr || k.type != ARB_EXTENT_DATA_REF)
			break;
		if (k.offset < *lo)
			*lo = k.offset;
		*hi = k.offset;
		n++;
	}
	ck_assert_int_ge(ret, 0);
	arb_iter_release(&it);
	return n;
}

/* how many of the extent's back-reference items have key offsets in
 * [from, to) */
static size_t ref_keys_in(struct arb_fs *fs, uint64_t bytenr, uint64_t from,
			  uint64_t to)
{
	struct arb_key k = { bytenr, ARB_EXTENT_DATA_REF, from };
	struct arb_iter it;
	size_t n = 0;
	int ret;

	arb_iter_init(&it, fs->vol->extent_root);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		arb_iter_key(&it, &k);
		if (k.objectid != bytenr || k.type != ARB_EXTENT_DATA_REF ||
		    k.offset >= to)
			break;
		n++;
	}
	ck_assert_int_ge(ret, 0);
	arb_iter_release(&it);
	return n;
}

struct pair {
	uint64_t ino, off;
};

/*
 * The pairs: 48 on one home, three times the 16 key offsets the old probe
 * window had, and 12 on the home of another base pair.
 */
#define NPAIRS 60
static size_t make_pairs(struct coll *c, struct pair *p)
{
	struct coll other;
	size_t n = 0;

	coll_init(c, 0x1234567ULL, 0x89abc000ULL);
	coll_init(&other, 0x7654321ULL, 0x12345000ULL);
	for (uint64_t m = 0; m < 48; m++, n++)
		coll_pair(c, m * 0x9e3779b9ULL % (1ULL << 48), &p[n].ino,
			  &p[n].off);
	for (uint64_t m = 0; m < 12; m++, n++)
		coll_pair(&other, m, &p[n].ino, &p[n].off);
	return n;
}

START_TEST(test_pairs_collide)
{
	struct coll c;
	struct pair p[NPAIRS];
	size_t n = make_pairs(&c, p);

	ck_assert_uint_eq(n, NPAIRS);
	for (size_t i = 0; i < 48; i++)
		ck_assert_uint_eq(href(p[i].ino, p[i].off), c.home);
	for (size_t i = 0; i < n; i++) {
		ck_assert_uint_eq(p[i].off % 4096, 0);
		for (size_t j = 0; j < i; j++)
			ck_assert(p[i].ino != p[j].ino || p[i].off != p[j].off);
	}
}
END_TEST

/*
 * Add the colliding references one commit at a time, then drop them in a
 * random order; the volume checks clean after every commit.
 */
START_TEST(test_collisions_add_remove)
{
	struct arb_fs *fs = open_fs(true);
	uint64_t rng = tu_seed("data ref collisions"), lo, hi;
	struct coll c;
	struct pair p[NPAIRS];
	size_t n = make_pairs(&c, p);
	struct arb_txn *t;
	struct ext x = make_tree(fs, &t);

	for (size_t i = 0; i < n; i++) {
		if (i)
			t = begin(fs);
		ck_assert_int_eq(ref_pair(t, fs, &x, p[i].ino, p[i].off, 1), 0);
		ck_assert_msg(commit(fs, t) == 0, "adding reference %zu", i);
		check_clean(fs);
	}
	ck_assert_uint_eq(ref_keys(fs, x.bytenr, &lo, &hi), n);
	/* the long chain went well past the old window, without a hole */
	ck_assert_uint_eq(ref_keys_in(fs, x.bytenr, c.home, c.home + 48), 48);

	/* again from disk */
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs = open_fs(true);
	check_clean(fs);

	for (size_t left = n; left; left--) {
		size_t i = tu_rand_range(&rng, left);
		t = begin(fs);
		ck_assert_int_eq(ref_pair(t, fs, &x, p[i].ino, p[i].off, -1),
				 0);
		ck_assert_msg(commit(fs, t) == 0,
			      "dropping (%llu, %llu), %zu left",
			      (unsigned long long)p[i].ino,
			      (unsigned long long)p[i].off, left - 1);
		check_clean(fs);
		p[i] = p[left - 1];
	}
	ck_assert_uint_eq(ref_keys(fs, x.bytenr, &lo, &hi), 0);
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs = open_fs(false);
	check_clean(fs);
	ck_assert_int_eq(arb_fs_close(fs), 0);
}
END_TEST

/* the items of the extent's back-references go (damage) */
static void drop_ref_items(struct arb_fs *fs, uint64_t bytenr)
{
	struct arb_txn *t = begin(fs);

	for (;;) {
		struct arb_key k = { bytenr, ARB_EXTENT_DATA_REF, 0 };
		struct arb_iter it;
		int ret;

		arb_iter_init(&it, fs->vol->extent_root);
		ret = arb_iter_seek(&it, &k);
		if (ret == 0)
			arb_iter_key(&it, &k);
		arb_iter_release(&it);
		if (ret || k.objectid != bytenr ||
		    k.type != ARB_EXTENT_DATA_REF)
			break;
		ck_assert_int_eq(arb_del_item(t, fs->vol->extent_root, &k), 0);
	}
	ck_assert_int_eq(commit(fs, t), 0);
}

static void repair(void)
{
	struct arb_check_result r = { 0 };
	struct arb_fs *fs = open_fs(true);
	uint64_t fixed = 0;

	ck_assert_int_eq(arb_fs_check_records(fs, &r, NULL), -EUCLEAN);
	ck_assert_int_eq(arb_fs_repair(fs, &r, NULL, &fixed), 0);
	ck_assert_uint_gt(fixed, 0);
	arb_check_result_free(&r);
	ck_assert_int_eq(arb_fs_close(fs), 0);
}

/* fsck rebuilds the back-references of an extent: all of them, however
 * many share a home */
START_TEST(test_collisions_repair)
{
	struct arb_fs *fs = open_fs(true);
	struct coll c;
	struct pair p[NPAIRS];
	size_t n = make_pairs(&c, p);
	struct arb_txn *t;
	struct ext x = make_tree(fs, &t);
	uint64_t lo, hi;

	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(ref_pair(t, fs, &x, p[i].ino, p[i].off, 1), 0);
	ck_assert_int_eq(commit(fs, t), 0);
	check_clean(fs);
	drop_ref_items(fs, x.bytenr);
	ck_assert_uint_eq(problems(fs, ARB_PB_EXTENT_BACKREF), n);
	ck_assert_int_eq(arb_fs_close(fs), 0);

	repair();
	fs = open_fs(true);
	check_clean(fs);
	ck_assert_uint_eq(ref_keys(fs, x.bytenr, &lo, &hi), n);
	/* and the allocator finds every one of them again */
	t = begin(fs);
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(ref_pair(t, fs, &x, p[i].ino, p[i].off, -1),
				 0);
	ck_assert_int_eq(commit(fs, t), 0);
	check_clean(fs);
	ck_assert_int_eq(arb_fs_close(fs), 0);
}
END_TEST

/* move the back-reference item at key offset from to key offset to */
static void move_ref_item(struct arb_fs *fs, uint64_t bytenr, uint64_t from,
			  uint64_t to)
{
	struct arb_key k = { bytenr, ARB_EXTENT_DATA_REF, from };
	struct arb_extent_data_ref r;
	struct arb_txn *t = begin(fs);

	ck_assert_int_eq(arb_lookup_item(fs->vol->extent_root, &k, &r,
					 sizeof(r)),
			 (int)sizeof(r));
	ck_assert_int_eq(arb_del_item(t, fs->vol->extent_root, &k), 0);
	k.offset = to;
	ck_assert_int_eq(arb_insert_item(t, fs->vol->extent_root, &k, &r,
					 sizeof(r)),
			 0);
	ck_assert_int_eq(commit(fs, t), 0);
}

/*
 * Images of the bounded probing: items were inserted at the first free key
 * offset of the 16 from the home and deleted without moving the others,
 * so an item may sit after a hole.  Such a layout is valid and its items
 * are found; an item past a hole beyond the window is not, and both
 * checkers say so (repair puts it back where lookups go).
 */
START_TEST(test_old_layout)
{
	struct arb_fs *fs = open_fs(true);
	struct coll c;
	struct pair p[NPAIRS];
	struct ext x;
	struct arb_txn *t;
	uint64_t lo, hi;

	make_pairs(&c, p);
	/* A, B, C on one home: key offsets home, +1, +2 */
	x = make_tree(fs, &t);
	for (size_t i = 0; i < 3; i++)
		ck_assert_int_eq(ref_pair(t, fs, &x, p[i].ino, p[i].off, 1), 0);
	ck_assert_int_eq(commit(fs, t), 0);
	ck_assert_uint_eq(ref_keys(fs, x.bytenr, &lo, &hi), 3);
	ck_assert_uint_eq(hi, c.home + 2);
	/* B goes (C moves back to +1), then C put where the old code left
	 * it: after a hole at +1 */
	t = begin(fs);
	ck_assert_int_eq(ref_pair(t, fs, &x, p[1].ino, p[1].off, -1), 0);
	ck_assert_int_eq(commit(fs, t), 0);
	ck_assert_uint_eq(ref_keys(fs, x.bytenr, &lo, &hi), 2);
	ck_assert_uint_eq(hi, c.home + 1);
	move_ref_item(fs, x.bytenr, c.home + 1, c.home + 2);
	check_clean(fs);

	/* C is found past the hole and dropped */
	t = begin(fs);
	ck_assert_int_eq(ref_pair(t, fs, &x, p[2].ino, p[2].off, -1), 0);
	ck_assert_int_eq(commit(fs, t), 0);
	check_clean(fs);
	/* D takes the first free key offset, A's removal moves it home */
	t = begin(fs);
	ck_assert_int_eq(ref_pair(t, fs, &x, p[3].ino, p[3].off, 1), 0);
	ck_assert_int_eq(commit(fs, t), 0);
	ck_assert_uint_eq(ref_keys(fs, x.bytenr, &lo, &hi), 2);
	ck_assert_uint_eq(hi, c.home + 1);
	t = begin(fs);
	ck_assert_int_eq(ref_pair(t, fs, &x, p[0].ino, p[0].off, -1), 0);
	ck_assert_int_eq(commit(fs, t), 0);
	ck_assert_uint_eq(ref_keys(fs, x.bytenr, &lo, &hi), 1);
	ck_assert_uint_eq(lo, c.home);
	check_clean(fs);

	/* the last key offset of the window still reaches it */
	move_ref_item(fs, x.bytenr, c.home, c.home + ARB_DATA_REF_WINDOW);
	check_clean(fs);
	/* past it, after free key offsets, nothing does */
	move_ref_item(fs, x.bytenr, c.home + ARB_DATA_REF_WINDOW,
		      c.home + ARB_DATA_REF_WINDOW + 5);
	ck_assert_uint_eq(problems(fs, ARB_PB_EXTENT_BACKREF), 1);
	ck_assert_int_eq(arb_fs_close(fs), 0);
	repair();
	fs = open_fs(true);
	check_clean(fs);
	ck_assert_uint_eq(ref_keys(fs, x.bytenr, &lo, &hi), 1);
	ck_assert_uint_eq(lo, c.home);
	t = begin(fs);
	ck_assert_int_eq(ref_pair(t, fs, &x, p[3].ino, p[3].off, -1), 0);
	ck_assert_int_eq(commit(fs, t), 0);
	check_clean(fs);
	ck_assert_int_eq(arb_fs_close(fs), 0);
}
END_TEST

static Suite *alloc_suite(void)
{
	Suite *s = suite_create("alloc");
	TCase *tc = tcase_create("data_ref_collisions");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_pairs_collide);
	tcase_add_test(tc, test_collisions_add_remove);
	tcase_add_test(tc, test_collisions_repair);
	tcase_add_test(tc, test_old_layout);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(alloc_suite());
}
