/* SPDX-License-Identifier: MIT */
/*
 * test_btree.c - the COW B+tree against a model.
 *
 * The model is a hash table of key -> (size, version); item bytes are a
 * function of (key, version, size), so the model stays small.  After every
 * commit the whole tree is compared with the sorted model, forwards and
 * backwards, and the checker runs (structure, fill, key bounds, reference
 * counts, back-references, free space).
 */
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "testutil.h"

#define TEST_TREE 300ULL
/*
 * Average leaf fill (percent) that test_fill_* expect; see do_fill.  With
 * splits only it was 66-67% (random order) and 53-57% (sequences); with
 * pushes to siblings 83-86% and 79-94% (4 KiB and 16 KiB nodes).
 */
#define FILL_RANDOM_MIN 80.0
#define FILL_SEQUENCES_MIN 75.0

struct mkey {
	uint64_t objectid, offset;
	uint32_t size, version;
	bool present, used;
};

struct model {
	struct mkey *e;
	size_t size, count;
};

static size_t mhash(uint64_t o, uint64_t off, size_t size)
{
	uint64_t h = o * 0x9E3779B97F4A7C15ULL ^ off * 0xC2B2AE3D27D4EB4FULL;
	return (size_t)(h ^ h >> 31) & (size - 1);
}

static struct mkey *model_get(struct model *m, uint64_t o, uint64_t off,
			      bool create)
{
	if (create && (m->count + 1) * 2 > m->size) {
		struct model n = { 0 };
		n.size = m->size ? m->size * 2 : 1024;
		n.e = calloc(n.size, sizeof(*n.e));
		ck_assert_ptr_nonnull(n.e);
		for (size_t i = 0; i < m->size; i++) {
			if (!m->e[i].used)
				continue;
			size_t s = mhash(m->e[i].objectid, m->e[i].offset, n.size);
			while (n.e[s].used)
				s = (s + 1) & (n.size - 1);
			n.e[s] = m->e[i];
			n.count++;
		}
		free(m->e);
		*m = n;
	}
	if (!m->size)
		return NULL;
	for (size_t s = mhash(o, off, m->size);; s = (s + 1) & (m->size - 1)) {
		struct mkey *e = &m->e[s];
		if (!e->used) {
			if (!create)
				return NULL;
			e->used = true;
			e->objectid = o;
			e->offset = off;
			m->count++;
			return e;
		}
		if (e->objectid == o && e->offset == off)
			return e;
	}
}

static void fill(uint8_t *buf, uint64_t o, uint64_t off, uint32_t ver,
		 uint32_t size)
{
	uint64_t s = o * 31 + off * 17 + ver * 7 + size + 1;
	for (uint32_t i = 0; i < size; i++)
		buf[i] = (uint8_t)(tu_rand(&s) >> 56);
}

static int cmp_mkey(const void *a, const void *b)
{
	const struct mkey *x = *(struct mkey *const *)a;
	const struct mkey *y = *(struct mkey *const *)b;
	if (x->objectid != y->objectid)
		return x->objectid < y->objectid ? -1 : 1;
	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	return 0;
}

/* Compare the whole tree with the model, forwards and backwards. */
static void verify(struct arb_vol *vol, struct arb_root *root, struct model *m)
{
	struct mkey **v = malloc((m->count + 1) * sizeof(*v));
	size_t n = 0, i;
	struct arb_iter it;
	struct arb_key k = { 0, 0, 0 };
	uint8_t buf[65536];
	int ret;

	ck_assert_ptr_nonnull(v);
	for (i = 0; i < m->size; i++)
		if (m->e[i].used && m->e[i].present)
			v[n++] = &m->e[i];
	qsort(v, n, sizeof(*v), cmp_mkey);

	arb_iter_init(&it, root);
	i = 0;
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		struct arb_key got;
		arb_iter_key(&it, &got);
		ck_assert_msg(i < n, "tree has more items than the model");
		ck_assert_uint_eq(got.objectid, v[i]->objectid);
		ck_assert_uint_eq(got.type, ARB_TEST_ITEM);
		ck_assert_uint_eq(got.offset, v[i]->offset);
		ck_assert_uint_eq(arb_iter_size(&it), v[i]->size);
		fill(buf, v[i]->objectid, v[i]->offset, v[i]->version,
		     v[i]->size);
		ck_assert_msg(!memcmp(arb_iter_data(&it), buf, v[i]->size),
			      "item data differs");
		i++;
	}
	ck_assert_int_eq(ret, 1);
	ck_assert_uint_eq(i, n);
	arb_iter_release(&it);

	/* backwards from the end */
	k.objectid = UINT64_MAX;
	k.type = 255;
	k.offset = UINT64_MAX;
	i = n;
	for (ret = arb_iter_seek_le(&it, &k); ret == 0; ret = arb_iter_prev(&it)) {
		struct arb_key got;
		arb_iter_key(&it, &got);
		ck_assert(i > 0);
		i--;
		ck_assert_uint_eq(got.objectid, v[i]->objectid);
		ck_assert_uint_eq(got.offset, v[i]->offset);
	}
	ck_assert_int_eq(ret, 1);
	ck_assert_uint_eq(i, 0);
	arb_iter_release(&it);
	(void)vol;
	free(v);
}

static void do_random(uint32_t nodesize, uint64_t nops, uint64_t key_space,
		      uint32_t max_size, uint64_t commit_every)
{
	struct arb_dev *dev;
	struct arb_vol *vol;
	struct arb_root *root;
	struct arb_txn *t;
	struct model m = { 0 };
	uint64_t seed = tu_seed("btree random");
	uint8_t buf[65536];

	tu_vol_new(512ULL << 20, nodesize, &dev, &vol);
	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	ck_assert_int_eq(arb_root_create(t, TEST_TREE, &root), 0);

	for (uint64_t op = 0; op < nops; op++) {
		uint64_t o = tu_rand_range(&seed, key_space);
		uint64_t off = tu_rand_range(&seed, 4);
		uint32_t size = (uint32_t)tu_rand_range(&seed, max_size + 1);
		unsigned what = (unsigned)tu_rand_range(&seed, 10);
		struct arb_key k = { o, ARB_TEST_ITEM, off };
		struct mkey *e = model_get(&m, o, off, true);
		int ret;

		if (what < 6) { /* insert */
			fill(buf, o, off, e->version + 1, size);
			ret = arb_insert_item(t, root, &k, buf, size);
			if (e->present) {
				ck_assert_msg(ret == -EEXIST,
					      "op %llu: insert of present key "
					      "%llu/%llu gave %d",
					      (unsigned long long)op,
					      (unsigned long long)o,
					      (unsigned long long)off, ret);
			} else {
				ck_assert_int_eq(ret, 0);
				e->present = true;
				e->version++;
				e->size = size;
			}
		} else if (what < 8) { /* delete */
			ret = arb_del_item(t, root, &k);
			ck_assert_int_eq(ret, e->present ? 0 : -ENOENT);
			e->present = false;
		} else { /* update with a new size */
			fill(buf, o, off, e->version + 1, size);
			ret = arb_update_item(t, root, &k, buf, size);
			if (e->present) {
				ck_assert_int_eq(ret, 0);
				e->version++;
				e->size = size;
			} else {
				ck_assert_int_eq(ret, -ENOENT);
			}
		}
		if (getenv("TU_VERIFY_EACH")) {
			struct arb_path p;
			arb_path_init(&p);
			ret = arb_search_slot(NULL, root, &k, &p, 0, 0);
			arb_path_release(vol, &p);
			ck_assert_msg(ret == (e->present ? 0 : 1),
				      "op %llu (kind %u, size %u): lookup says %d",
				      (unsigned long long)op, what, size, ret);
			if (atoi(getenv("TU_VERIFY_EACH")) > 1)
				verify(vol, root, &m);
		}
		if ((op + 1) % commit_every == 0) {
			ck_assert_int_eq(arb_txn_commit(t), 0);
			verify(vol, root, &m);
			tu_vol_check(vol);
			ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
		}
	}
	ck_assert_int_eq(arb_txn_commit(t), 0);
	verify(vol, root, &m);
	tu_vol_check(vol);
	tu_vol_reopen(dev, &vol);
	ck_assert_int_eq(arb_root_get(vol, TEST_TREE, &root), 0);
	verify(vol, root, &m);
	tu_vol_check(vol);
	ck_assert_int_eq(arb_vol_close(vol), 0);
	arb_dev_destroy(dev);
	free(m.e);
}

START_TEST(test_random_small_nodes)
{
	/* 4 KiB nodes force deep trees */
	do_random(4096, TU_SCALE(60000, 1500000), TU_SCALE(20000, 400000), 300,
		  TU_SCALE(5000, 50000));
}
END_TEST

START_TEST(test_random_big_items)
{
	/* items up to a third of a node: splits must find room */
	do_random(4096, TU_SCALE(20000, 200000), 3000, 1300, 2500);
}
END_TEST

START_TEST(test_random_default_nodes)
{
	do_random(16384, TU_SCALE(40000, 1000000), TU_SCALE(30000, 1000000), 200,
		  TU_SCALE(10000, 100000));
}
END_TEST

/* Sequential inserts then deleting everything shrinks back to one leaf. */
START_TEST(test_fill_and_empty)
{
	struct arb_dev *dev;
	struct arb_vol *vol;
	struct arb_root *root;
	struct arb_txn *t;
	uint64_t n = TU_SCALE(50000, 1000000), used0;
	uint8_t v[40] = { 0 };

	tu_vol_new(256ULL << 20, 4096, &dev, &vol);
	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	ck_assert_int_eq(arb_root_create(t, TEST_TREE, &root), 0);
	ck_assert_int_eq(arb_txn_commit(t), 0);
	used0 = arb_used_bytes(vol);
	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	for (uint64_t i = 0; i < n; i++) {
		struct arb_key k = { i, ARB_TEST_ITEM, 0 };
		memcpy(v, &i, sizeof(i));
		ck_assert_int_eq(arb_insert_item(t, root, &k, v, sizeof(v)), 0);
	}
	ck_assert_int_eq(arb_txn_commit(t), 0);
	tu_vol_check(vol);
	ck_assert_int_gt(arb_level(root->node), 1);
	/* leaves of an ascending fill are nearly full (each node has
	 * meta_copies copies) */
	ck_assert_uint_lt(arb_used_bytes(vol),
			  n * (sizeof(v) + 25) * 13 / 10 * vol->meta_copies +
				  used0);
	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	for (uint64_t i = 0; i < n; i++) {
		struct arb_key k = { (i * 7919) % n, ARB_TEST_ITEM, 0 };
		ck_assert_int_eq(arb_del_item(t, root, &k), 0);
	}
	ck_assert_int_eq(arb_txn_commit(t), 0);
	tu_vol_check(vol);
	ck_assert_int_eq(arb_level(root->node), 0);
	ck_assert_uint_eq(arb_nritems(root->node), 0);
	/* commit twice so that everything pinned is released */
	ck_assert_int_eq(arb_vol_close(vol), 0);
	ck_assert_int_eq(arb_vol_open(dev, NULL, &vol), 0);
	ck_assert_uint_eq(arb_used_bytes(vol), used0);
	ck_assert_int_eq(arb_vol_close(vol), 0);
	arb_dev_destroy(dev);
}
END_TEST

/*
 * Small commits put their nodes back where earlier commits freed them
 * (arb_free_space_unpin, and node_cluster's first fit): 300 commits of
 * one changed item each keep the tree's root, first and second copy, in a
 * window about as wide as the tree (50 leaves here), instead of moving
 * forward through the image: the second 150 commits go no higher than the
 * first.
 */
START_TEST(test_small_commits_reuse_places)
{
	struct arb_dev *dev;
	struct arb_vol *vol;
	struct arb_root *root;
	struct arb_txn *t;
	uint64_t lo = UINT64_MAX, hi = 0, mlo = UINT64_MAX, mhi = 0;
	uint64_t hi1 = 0, mhi1 = 0;
	uint8_t v[40] = { 0 };

	tu_vol_new(64ULL << 20, 4096, &dev, &vol);
	ck_assert_uint_eq(vol->meta_copies, 2);
	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	ck_assert_int_eq(arb_root_create(t, TEST_TREE, &root), 0);
	for (uint64_t i = 0; i < 2000; i++) {
		struct arb_key k = { i, ARB_TEST_ITEM, 0 };
		memcpy(v, &i, sizeof(i));
		ck_assert_int_eq(arb_insert_item(t, root, &k, v, sizeof(v)), 0);
	}
	ck_assert_int_eq(arb_txn_commit(t), 0);
	ck_assert_int_gt(arb_level(root->node), 0);
	for (uint64_t r = 0; r < 300; r++) {
		struct arb_key k = { (r * 7919) % 2000, ARB_TEST_ITEM, 0 };

		ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
		ck_assert_int_eq(arb_del_item(t, root, &k), 0);
		memcpy(v, &r, sizeof(r));
		ck_assert_int_eq(arb_insert_item(t, root, &k, v, sizeof(v)), 0);
		ck_assert_int_eq(arb_txn_commit(t), 0);
		if (r < 10)
			continue;
		if (r == 150) {
			hi1 = hi;
			mhi1 = mhi;
		}
		if (root->node->bytenr < lo)
			lo = root->node->bytenr;
		if (root->node->bytenr > hi)
			hi = root->node->bytenr;
		if (root->node->mirror < mlo)
			mlo = root->node->mirror;
		if (root->node->mirror > mhi)
			mhi = root->node->mirror;
	}
	/* moving forward, 290 commits of several nodes each would span
	 * megabytes; reusing, about the tree's own size */
	ck_assert_msg(hi - lo <= 160 * 4096, "root moved over %llu bytes",
		      (unsigned long long)(hi - lo));
	ck_assert_msg(mhi - mlo <= 160 * 4096,
		      "second copy moved over %llu bytes",
		      (unsigned long long)(mhi - mlo));
	ck_assert_msg(hi <= hi1 + 16 * 4096 && mhi <= mhi1 + 16 * 4096,
		      "drifting: highest root %llu after 150 commits, %llu "
		      "after 300 (second copy %llu, %llu)",
		      (unsigned long long)hi1, (unsigned long long)hi,
		      (unsigned long long)mhi1, (unsigned long long)mhi);
	tu_vol_check(vol);
	tu_vol_reopen(dev, &vol);
	tu_vol_check(vol);
	ck_assert_int_eq(arb_vol_close(vol), 0);
	arb_dev_destroy(dev);
}
END_TEST

START_TEST(test_iter_seek)
{
	struct arb_dev *dev;
	struct arb_vol *vol;
	struct arb_root *root;
	struct arb_txn *t;
	struct arb_iter it;
	struct arb_key k;

	tu_vol_new(64ULL << 20, 4096, &dev, &vol);
	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	ck_assert_int_eq(arb_root_create(t, TEST_TREE, &root), 0);
	for (uint64_t i = 0; i < 5000; i++) {
		struct arb_key ik = { i * 10, ARB_TEST_ITEM, 0 };
		ck_assert_int_eq(arb_insert_item(t, root, &ik, &i, sizeof(i)), 0);
	}
	ck_assert_int_eq(arb_txn_commit(t), 0);
	arb_iter_init(&it, root);
	for (uint64_t q = 0; q < 50000; q += 7) {
		k = (struct arb_key){ q, ARB_TEST_ITEM, 0 };
		if (q > 49990) {
			ck_assert_int_eq(arb_iter_seek(&it, &k), 1);
		} else {
			ck_assert_int_eq(arb_iter_seek(&it, &k), 0);
			arb_iter_key(&it, &k);
			ck_assert_uint_eq(k.objectid, (q + 9) / 10 * 10);
		}
		k = (struct arb_key){ q, ARB_TEST_ITEM, 0 };
		ck_assert_int_eq(arb_iter_seek_le(&it, &k), 0);
		arb_iter_key(&it, &k);
		ck_assert_uint_eq(k.objectid, q / 10 * 10);
	}
	arb_iter_release(&it);
	/* a key in the middle of a leaf, search results */
	{
		struct arb_path p;
		arb_path_init(&p);
		k = (struct arb_key){ 15, ARB_TEST_ITEM, 0 };
		ck_assert_int_eq(arb_search_slot(NULL, root, &k, &p, 0, 0), 1);
		arb_path_release(vol, &p);
		k.objectid = 20;
		ck_assert_int_eq(arb_search_slot(NULL, root, &k, &p, 0, 0), 0);
		arb_path_release(vol, &p);
	}
	ck_assert_int_eq(arb_vol_close(vol), 0);
	arb_dev_destroy(dev);
}
END_TEST

START_TEST(test_too_big_item)
{
	struct arb_dev *dev;
	struct arb_vol *vol;
	struct arb_root *root;
	struct arb_txn *t;
	static uint8_t big[8192];
	struct arb_key k = { 1, ARB_TEST_ITEM, 0 };

	tu_vol_new(64ULL << 20, 4096, &dev, &vol);
	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	ck_assert_int_eq(arb_root_create(t, TEST_TREE, &root), 0);
	ck_assert_int_eq(arb_insert_item(t, root, &k, big, 4096), -EOVERFLOW);
	ck_assert_int_eq(arb_insert_item(t, root, &k, big,
					 arb_max_item_size(vol)), 0);
	ck_assert_int_eq(arb_txn_commit(t), 0);
	tu_vol_check(vol);
	ck_assert_int_eq(arb_vol_close(vol), 0);
	arb_dev_destroy(dev);
}
END_TEST

/* ---- leaf fill ----------------------------------------------------------- */

struct fill_stats {
	uint64_t leaves, used;
	int err;
};

/* Count the leaves under n and the bytes they use (items and their data). */
static void walk_fill(struct arb_vol *vol, struct arb_node *n,
		      struct fill_stats *fs)
{
	uint32_t room = vol->nodesize - (uint32_t)sizeof(struct arb_node_header);

	if (arb_level(n) == 0) {
		fs->leaves++;
		fs->used += room - arb_leaf_free_space(vol, n);
		return;
	}
	for (uint32_t i = 0; i < arb_nritems(n) && !fs->err; i++) {
		struct arb_node *c;
		fs->err = arb_node_read(vol, arb_child_bytenr(n, (int)i),
					arb_child_mirror(n, (int)i),
					arb_child_gen(n, (int)i), arb_level(n) - 1,
					&c);
		if (fs->err)
			break;
		walk_fill(vol, c, fs);
		arb_node_put(vol, c);
	}
}

/* Average leaf fill of root in percent. */
static double leaf_fill_pct(struct arb_vol *vol, struct arb_root *root)
{
	struct fill_stats fs = { 0 };
	uint32_t room = vol->nodesize - (uint32_t)sizeof(struct arb_node_header);

	walk_fill(vol, root->node, &fs);
	ck_assert_int_eq(fs.err, 0);
	ck_assert_uint_gt(fs.leaves, 0);
	return 100.0 * (double)fs.used / ((double)fs.leaves * room);
}

enum fill_order {
	/* distinct keys in random order */
	FILL_RANDOM,
	/* 100 sequences (like the entries of 100 directories), each appended
	 * to in turn at random: every insertion lands in the middle of the
	 * tree, at the end of its sequence */
	FILL_SEQUENCES,
};

/*
 * Insert n distinct keys in the given order, committing now and then (so
 * that siblings are not always writable already), then compare with the
 * model and return the average leaf fill.
 */
static double do_fill(uint32_t nodesize, enum fill_order order, uint64_t n)
{
	const uint64_t nseq = 100;
	struct arb_dev *dev;
	struct arb_vol *vol;
	struct arb_root *root;
	struct arb_txn *t;
	struct model m = { 0 };
	uint64_t seed = tu_seed("btree fill"), *next, bad_op = 0;
	uint8_t buf[512];
	int bad_ret = 0;
	double pct;

	next = calloc(nseq, sizeof(*next));
	ck_assert_ptr_nonnull(next);
	tu_vol_new(256ULL << 20, nodesize, &dev, &vol);
	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	ck_assert_int_eq(arb_root_create(t, TEST_TREE, &root), 0);
	for (uint64_t op = 0; op < n && !bad_ret; op++) {
		uint64_t o, off;
		uint32_t size;
		struct mkey *e;

		if (order == FILL_RANDOM) {
			/* a random 64-bit objectid: collisions are negligible,
			 * and a collision is simply skipped */
			o = tu_rand(&seed);
			off = 0;
			size = (uint32_t)tu_rand_range(&seed, 201);
		} else {
			o = 1000 + tu_rand_range(&seed, nseq);
			off = next[o - 1000]++;
			size = 40 + (uint32_t)tu_rand_range(&seed, 41);
		}
		e = model_get(&m, o, off, true);
		if (e->present)
			continue;
		fill(buf, o, off, e->version + 1, size);
		bad_ret = arb_insert_item(t, root,
					  &(struct arb_key){ o, ARB_TEST_ITEM, off },
					  buf, size);
		bad_op = op;
		e->present = true;
		e->version++;
		e->size = size;
		if ((op + 1) % 2000 == 0 && !bad_ret) {
			bad_ret = arb_txn_commit(t);
			if (!bad_ret)
				bad_ret = arb_txn_begin(vol, &t);
		}
	}
	ck_assert_msg(bad_ret == 0, "op %llu failed: %d",
		      (unsigned long long)bad_op, bad_ret);
	ck_assert_int_eq(arb_txn_commit(t), 0);
	verify(vol, root, &m);
	tu_vol_check(vol);
	pct = leaf_fill_pct(vol, root);
	fprintf(stderr, "fill: nodesize %u, %s order, %llu keys: %.1f%% in "
		"levels 0..%d\n", nodesize,
		order == FILL_RANDOM ? "random" : "sequences",
		(unsigned long long)n, pct, arb_level(root->node));
	ck_assert_int_eq(arb_vol_close(vol), 0);
	arb_dev_destroy(dev);
	free(m.e);
	free(next);
	return pct;
}

static const uint32_t fill_nodesizes[] = { 4096, 16384 };

START_TEST(test_fill_random)
{
	double pct = do_fill(fill_nodesizes[_i], FILL_RANDOM,
			     TU_SCALE(40000, 400000));
	ck_assert_msg(pct >= FILL_RANDOM_MIN, "random fill %.1f%%", pct);
}
END_TEST

START_TEST(test_fill_sequences)
{
	double pct = do_fill(fill_nodesizes[_i], FILL_SEQUENCES,
			     TU_SCALE(40000, 400000));
	ck_assert_msg(pct >= FILL_SEQUENCES_MIN, "sequences fill %.1f%%", pct);
}
END_TEST

/* ---- readahead of leaves ------------------------------------------------ */

/*
 * A device over a memory device (not owned) that records every readahead
 * hint and every node read, so a test can tell where hints went and that
 * they were followed by real reads.
 */
#define RA_MAX 4096
struct ra_dev {
	struct arb_dev dev;
	struct arb_dev *lower;
	uint64_t hint_off[RA_MAX], hint_len[RA_MAX];
	size_t nr_hints;
	uint64_t read_off[RA_MAX];
	size_t nr_reads;
};

static int ra_pread(struct arb_dev *dev, void *buf, size_t len, uint64_t off,
		    enum arb_io_kind kind)
{
	struct ra_dev *r = dev->priv;

	if (kind == ARB_IO_NODE && r->nr_reads < RA_MAX)
		r->read_off[r->nr_reads++] = off;
	return arb_dev_read(r->lower, buf, len, off, kind);
}

static int ra_pwrite(struct arb_dev *dev, const void *buf, size_t len,
		     uint64_t off, enum arb_io_kind kind)
{
	struct ra_dev *r = dev->priv;

	return arb_dev_write(r->lower, buf, len, off, kind);
}

static int ra_flush(struct arb_dev *dev)
{
	struct ra_dev *r = dev->priv;

	return arb_dev_flush(r->lower);
}

static void ra_hint(struct arb_dev *dev, uint64_t off, size_t len)
{
	struct ra_dev *r = dev->priv;

	ck_assert_uint_lt(r->nr_hints, RA_MAX);
	r->hint_off[r->nr_hints] = off;
	r->hint_len[r->nr_hints++] = len;
}

static void ra_destroy(struct arb_dev *dev)
{
	(void)dev;
}

static const struct arb_dev_ops ra_ops = {
	.pread = ra_pread,
	.pwrite = ra_pwrite,
	.flush = ra_flush,
	.destroy = ra_destroy,
	.readahead = ra_hint,
};

static void ra_wrap(struct ra_dev *r, struct arb_dev *lower)
{
	memset(r, 0, sizeof(*r));
	r->lower = lower;
	r->dev.ops = &ra_ops;
	r->dev.size = lower->size;
	r->dev.priv = r;
}

static bool ra_was_read(const struct ra_dev *r, uint64_t off)
{
	for (size_t i = 0; i < r->nr_reads; i++)
		if (r->read_off[i] == off)
			return true;
	return false;
}

static bool ra_was_hinted(const struct ra_dev *r, uint64_t off)
{
	for (size_t i = 0; i < r->nr_hints; i++)
		if (off >= r->hint_off[i] && off < r->hint_off[i] + r->hint_len[i])
			return true;
	return false;
}

/* Hints from the first on: node-aligned, inside the device, and every
 * hinted node was then really read. */
static void ra_check_hints(const struct ra_dev *r, size_t first,
			   uint32_t nodesize, uint64_t dev_size)
{
	for (size_t i = first; i < r->nr_hints; i++) {
		ck_assert_uint_eq(r->hint_off[i] % nodesize, 0);
		ck_assert_uint_eq(r->hint_len[i] % nodesize, 0);
		ck_assert_uint_le(r->hint_off[i] + r->hint_len[i], dev_size);
		for (uint64_t o = r->hint_off[i];
		     o < r->hint_off[i] + r->hint_len[i]; o += nodesize)
			ck_assert_msg(ra_was_read(r, o),
				      "node %llu hinted, never read",
				      (unsigned long long)o);
	}
}

#define RA_ITEMS 20000ULL

/* The key of item i in a readahead test tree of some kind. */
enum ra_kind { RA_TEST, RA_FILE_EXTENTS, RA_INODES };

static void ra_key(enum ra_kind kind, uint64_t i, struct arb_key *k)
{
	switch (kind) {
	case RA_TEST: /* key i*2 */
		*k = (struct arb_key){ i * 2, ARB_TEST_ITEM, 0 };
		break;
	case RA_FILE_EXTENTS: /* one large file's extent items */
		*k = (struct arb_key){ 300, ARB_EXTENT_DATA, i * 4096 };
		break;
	case RA_INODES: /* an inode item each */
		*k = (struct arb_key){ 256 + i, ARB_INODE_ITEM, 0 };
		break;
	}
}

/* a one-copy tree of RA_ITEMS items (ra_key, value i) over 4 KiB nodes */
static void ra_make_kind(struct arb_dev **mem, enum ra_kind kind)
{
	struct arb_vol *vol;
	struct arb_root *root;
	struct arb_txn *t;

	tu_vol_new_copies(64ULL << 20, 4096, 1, mem, &vol);
	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	ck_assert_int_eq(arb_root_create(t, TEST_TREE, &root), 0);
	for (uint64_t i = 0; i < RA_ITEMS; i++) {
		struct arb_key k;

		ra_key(kind, i, &k);
		ck_assert_int_eq(arb_insert_item(t, root, &k, &i, sizeof(i)), 0);
	}
	ck_assert_int_eq(arb_txn_commit(t), 0);
	ck_assert_int_ge(arb_level(root->node), 2);
	ck_assert_int_eq(arb_vol_close(vol), 0);
}

static void ra_make(struct arb_dev **mem)
{
	ra_make_kind(mem, RA_TEST);
}

/* Walk the whole tree in order; returns the walk's end (1 or <0) and the
 * number of items seen, each checked against its key. */
static int ra_scan(struct arb_root *root, uint64_t *seen)
{
	struct arb_key k = { 0, 0, 0 };
	struct arb_iter it;
	int ret;

	*seen = 0;
	arb_iter_init(&it, root);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		uint64_t v;

		arb_iter_key(&it, &k);
		ck_assert_uint_eq(arb_iter_size(&it), sizeof(v));
		memcpy(&v, arb_iter_data(&it), sizeof(v));
		ck_assert_uint_eq(k.objectid, *seen * 2);
		ck_assert_uint_eq(v, *seen);
		(*seen)++;
	}
	arb_iter_release(&it);
	return ret;
}

/*
 * A cold scan hints the leaves ahead (node-aligned, in bounds) and then
 * reads every hinted node; point lookups in descending order hint nothing.
 */
START_TEST(test_readahead_scan)
{
	struct arb_dev *mem;
	struct arb_vol *vol;
	struct arb_root *root;
	static struct ra_dev r;
	uint64_t seen;
	size_t hints;

	ra_make(&mem);
	ra_wrap(&r, mem);
	ck_assert_int_eq(arb_vol_open(&r.dev, NULL, &vol), 0);
	ck_assert_int_eq(arb_root_get(vol, TEST_TREE, &root), 0);
	ck_assert_int_eq(ra_scan(root, &seen), 1);
	ck_assert_uint_eq(seen, RA_ITEMS);
	ck_assert_uint_gt(r.nr_hints, 0);
	ra_check_hints(&r, 0, vol->nodesize, mem->size);
	/* most leaf reads were announced: a scan, not a lookup per leaf */
	ck_assert_uint_gt(vol->cache.readahead, r.nr_reads / 2);
	ck_assert_int_eq(arb_vol_close(vol), 0);

	ra_wrap(&r, mem);
	ck_assert_int_eq(arb_vol_open(&r.dev, NULL, &vol), 0);
	ck_assert_int_eq(arb_root_get(vol, TEST_TREE, &root), 0);
	/* opening walks the extent tree: hints of its own */
	hints = r.nr_hints;
	for (uint64_t i = RA_ITEMS; i-- > 0;) {
		struct arb_key k = { i * 2, ARB_TEST_ITEM, 0 };
		uint64_t v;

		ck_assert_int_eq(arb_lookup_item(root, &k, &v, sizeof(v)),
				 sizeof(v));
		ck_assert_uint_eq(v, i);
	}
	ck_assert_uint_eq(r.nr_hints, hints);
	ck_assert_int_eq(arb_vol_close(vol), 0);
	arb_dev_destroy(mem);
}
END_TEST

/*
 * Point lookups in random order: in a tree of one file's extent items
 * (what a cold random reader of a fragmented file misses) the fourth
 * scattered miss under a parent hints that parent's children, so most
 * leaves come from hints and every hinted node is read; in a tree of
 * inode items (what a cold `find` misses) nothing is hinted.
 */
START_TEST(test_readahead_scattered)
{
	static const enum ra_kind kinds[] = { RA_FILE_EXTENTS, RA_INODES };

	for (size_t ki = 0; ki < 2; ki++) {
		struct arb_dev *mem;
		struct arb_vol *vol;
		struct arb_root *root;
		static struct ra_dev r;
		size_t hints, reads, unhinted = 0;

		ra_make_kind(&mem, kinds[ki]);
		ra_wrap(&r, mem);
		ck_assert_int_eq(arb_vol_open(&r.dev, NULL, &vol), 0);
		ck_assert_int_eq(arb_root_get(vol, TEST_TREE, &root), 0);
		/* opening walks the extent tree: hints of its own */
		hints = r.nr_hints;
		reads = r.nr_reads;
		/* 7919 is prime, so i * 7919 % RA_ITEMS visits every item */
		for (uint64_t j = 0; j < RA_ITEMS; j++) {
			uint64_t i = j * 7919 % RA_ITEMS, v;
			struct arb_key k;

			ra_key(kinds[ki], i, &k);
			ck_assert_int_eq(arb_lookup_item(root, &k, &v, sizeof(v)),
					 sizeof(v));
			ck_assert_uint_eq(v, i);
		}
		for (size_t i = reads; i < r.nr_reads; i++)
			if (!ra_was_hinted(&r, r.read_off[i]))
				unhinted++;
		if (kinds[ki] == RA_FILE_EXTENTS) {
			ck_assert_uint_gt(r.nr_hints, hints);
			ra_check_hints(&r, hints, vol->nodesize, mem->size);
			/* a few misses per parent before its hint */
			ck_assert_msg(unhinted * 4 < r.nr_reads - reads,
				      "%zu of %zu node reads not hinted",
				      unhinted, r.nr_reads - reads);
		} else {
			ck_assert_uint_eq(r.nr_hints, hints);
		}
		ck_assert_int_eq(arb_vol_close(vol), 0);
		arb_dev_destroy(mem);
	}
}
END_TEST

/*
 * A leaf damaged on disk that the scan read ahead is still caught when it
 * is read: the scan returns every item before it, intact, then -EUCLEAN.
 */
START_TEST(test_readahead_corrupt)
{
	struct arb_dev *mem;
	struct arb_vol *vol;
	struct arb_root *root;
	struct arb_path p;
	static struct ra_dev r;
	uint64_t seen, bad, first;
	struct arb_key k = { RA_ITEMS, ARB_TEST_ITEM, 0 }; /* the middle */

	ra_make(&mem);
	ck_assert_int_eq(arb_vol_open(mem, NULL, &vol), 0);
	ck_assert_int_eq(arb_root_get(vol, TEST_TREE, &root), 0);
	arb_path_init(&p);
	ck_assert_int_eq(arb_search_slot(NULL, root, &k, &p, 0, 0), 0);
	bad = p.nodes[0]->bytenr;
	/* the first item of the damaged leaf */
	arb_node_key(p.nodes[0], 0, &k);
	first = k.objectid / 2;
	arb_path_release(vol, &p);
	ck_assert_int_eq(arb_vol_close(vol), 0);
	/* the last byte of item data: covered by the checksum only */
	arb_dev_mem_data(mem)[bad + 4096 - 1] ^= 0x5a;

	ra_wrap(&r, mem);
	ck_assert_int_eq(arb_vol_open(&r.dev, NULL, &vol), 0);
	ck_assert_int_eq(arb_root_get(vol, TEST_TREE, &root), 0);
	ck_assert_int_eq(ra_scan(root, &seen), -EUCLEAN);
	ck_assert_uint_eq(seen, first);
	ck_assert_msg(ra_was_hinted(&r, bad), "the damaged leaf was not read ahead");
	ck_assert_int_eq(arb_vol_close(vol), 0);
	arb_dev_destroy(mem);
}
END_TEST

/*
 * Node buffers come from the cache's region and evicted ones are reused:
 * after a cold scan of ~170 leaves through a 16-node cache (a region of
 * 16 buffers) every cached node's buffer lies in the region, and a
 * transaction that dirties more nodes than the region holds (dirty
 * nodes are not evicted) still commits and reads back, the extra
 * buffers from malloc.
 */
START_TEST(test_node_buffers)
{
	struct arb_vol_opts small = { .cache_bytes = 16 * 4096 };
	struct arb_dev *mem;
	struct arb_vol *vol;
	struct arb_root *root;
	struct arb_txn *t;
	struct arb_cache *c;
	uint64_t seen;
	size_t outside = 0;

	ra_make(&mem);
	ck_assert_int_eq(arb_vol_open(mem, &small, &vol), 0);
	c = &vol->cache;
	ck_assert_ptr_nonnull(c->buf_base);
	ck_assert_int_eq(arb_root_get(vol, TEST_TREE, &root), 0);
	ck_assert_int_eq(ra_scan(root, &seen), 1);
	ck_assert_uint_eq(seen, RA_ITEMS);
	ck_assert_uint_gt(c->evictions, 100);
	ck_assert_uint_eq(c->buf_size, c->max_bytes);
	for (size_t i = 0; i < c->table_size; i++)
		for (struct arb_node *n = c->table[i]; n; n = n->hash_next)
			outside += !(n->data >= c->buf_base &&
				     n->data < c->buf_base + c->buf_size);
	/* only what overflowed while a path pinned nodes beyond the bound */
	ck_assert_msg(outside <= 4, "%zu of %zu cached nodes outside the region",
		      outside, c->nr_nodes);

	/* every leaf dirty at once: more than the region's 16 buffers */
	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	for (uint64_t i = 0; i < RA_ITEMS; i++) {
		struct arb_key k = { i * 2, ARB_TEST_ITEM, 0 };
		uint64_t v = i;

		ck_assert_int_eq(arb_update_item(t, root, &k, &v, sizeof(v)),
				 0);
	}
	ck_assert_uint_gt(c->nr_dirty, c->buf_size / vol->nodesize);
	ck_assert_int_eq(arb_txn_commit(t), 0);
	ck_assert_int_eq(arb_vol_close(vol), 0);
	ck_assert_int_eq(arb_vol_open(mem, &small, &vol), 0);
	ck_assert_int_eq(arb_root_get(vol, TEST_TREE, &root), 0);
	ck_assert_int_eq(ra_scan(root, &seen), 1);
	ck_assert_uint_eq(seen, RA_ITEMS);
	ck_assert_int_eq(arb_vol_close(vol), 0);
	arb_dev_destroy(mem);
}
END_TEST

/*
 * arb_prefetch_leaf hints exactly the leaf that a search for the key then
 * reads, once per uncached leaf, and nothing for a cached one.
 */
START_TEST(test_prefetch_leaf)
{
	struct arb_dev *mem;
	struct arb_vol *vol;
	struct arb_root *root;
	struct arb_path p;
	static struct ra_dev r;
	uint64_t rng = 7;

	ra_make(&mem);
	ra_wrap(&r, mem);
	ck_assert_int_eq(arb_vol_open(&r.dev, NULL, &vol), 0);
	ck_assert_int_eq(arb_root_get(vol, TEST_TREE, &root), 0);
	for (int i = 0; i < 200; i++) {
		/* present keys and absent ones (odd) alike */
		struct arb_key k = { tu_rand_range(&rng, RA_ITEMS * 2),
				     ARB_TEST_ITEM, 0 };
		size_t h0;
		uint64_t leaf;
		bool cached;

		arb_path_init(&p);
		ck_assert_int_ge(arb_search_slot(NULL, root, &k, &p, 0, 0), 0);
		leaf = p.nodes[0]->bytenr;
		arb_path_release(vol, &p);
		/* the leaf is cached now: no hint (the search may have
		 * hinted siblings of its own) */
		h0 = r.nr_hints;
		arb_prefetch_leaf(root, &k);
		ck_assert_uint_eq(r.nr_hints, h0);
		/* evict it and ask again: one hint, the leaf's address */
		arb_node_forget(vol, leaf);
		arb_prefetch_leaf(root, &k);
		ck_assert_uint_eq(r.nr_hints, h0 + 1);
		ck_assert_uint_eq(r.hint_off[h0], leaf);
		ck_assert_uint_eq(r.hint_len[h0], vol->nodesize);
		arb_path_init(&p);
		ck_assert_int_ge(arb_search_slot(NULL, root, &k, &p, 0, 0), 0);
		cached = p.nodes[0]->bytenr == leaf;
		arb_path_release(vol, &p);
		ck_assert(cached);
		if (r.nr_hints + 2 >= RA_MAX)
			r.nr_hints = 0;
	}
	ck_assert_int_eq(arb_vol_close(vol), 0);
	arb_dev_destroy(mem);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("btree");
	TCase *tc;

	tc = tcase_create("model");
	tcase_set_timeout(tc, 1200);
	tcase_add_test(tc, test_random_small_nodes);
	tcase_add_test(tc, test_random_big_items);
	tcase_add_test(tc, test_random_default_nodes);
	suite_add_tcase(s, tc);

	tc = tcase_create("shape");
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_fill_and_empty);
	tcase_add_test(tc, test_small_commits_reuse_places);
	tcase_add_test(tc, test_iter_seek);
	tcase_add_test(tc, test_too_big_item);
	suite_add_tcase(s, tc);

	tc = tcase_create("fill");
	tcase_set_timeout(tc, 600);
	tcase_add_loop_test(tc, test_fill_random, 0, 2);
	tcase_add_loop_test(tc, test_fill_sequences, 0, 2);
	suite_add_tcase(s, tc);

	tc = tcase_create("readahead");
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_readahead_scan);
	tcase_add_test(tc, test_readahead_scattered);
	tcase_add_test(tc, test_readahead_corrupt);
	tcase_add_test(tc, test_prefetch_leaf);
	tcase_add_test(tc, test_node_buffers);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
