/* SPDX-License-Identifier: MIT */
/*
 * test_clone.c - O(1) clones (Rodeh 2008) against a model per tree.
 *
 * A tree several levels deep (4 KiB nodes) is filled with test items and
 * file extent items (with data reference counts, see tu_model.h), then
 * cloned K times -- some clones of a freshly committed tree, some of a tree
 * modified in the same transaction (uncommitted nodes shared), some of a
 * clone made in the same transaction.  Every tree is then changed
 * independently; after every commit each tree equals its model and the
 * checker (node reference counts = pointers, back-references, data extent
 * counts, free space) is clean.  One tree is dropped mid-workload, and at
 * the end all but one: the survivor still equals its model and the space
 * in use is exactly its nodes, the root/extent/csum trees' nodes and the
 * data extents it references.
 */
#include "tu_model.h"

#define BASE_ID 300ULL

struct cfg {
	const char *name;
	uint64_t nitems;   /* items in the first tree */
	unsigned clones;
	uint64_t nops;
	uint64_t commit_every;
	uint32_t max_size;
	int min_level;     /* level the first tree must reach */
};

static void verify_all(struct arb_vol *vol, struct tmodel *m, bool *live,
		       unsigned nt)
{
	for (unsigned i = 0; i < nt; i++) {
		struct arb_root *r;
		if (!live[i]) {
			ck_assert_int_eq(arb_root_get(vol, m[i].id, &r), -ENOENT);
			continue;
		}
		ck_assert_int_eq(arb_root_get(vol, m[i].id, &r), 0);
		tm_verify(r, &m[i]);
	}
	tu_vol_check(vol);
}

static void commit_verify(struct arb_vol *vol, struct arb_txn **t,
			  struct tmodel *m, bool *live, unsigned nt)
{
	ck_assert_int_eq(arb_txn_commit(*t), 0);
	verify_all(vol, m, live, nt);
	ck_assert_int_eq(arb_txn_begin(vol, t), 0);
}

static unsigned pick_live(uint64_t *rng, bool *live, unsigned nt)
{
	unsigned i;

	do
		i = (unsigned)tu_rand_range(rng, nt);
	while (!live[i]);
	return i;
}

static struct arb_root *get_root(struct arb_vol *vol, uint64_t id)
{
	struct arb_root *r;

	ck_assert_int_eq(arb_root_get(vol, id, &r), 0);
	return r;
}

static void do_clones(const struct cfg *c)
{
	struct arb_dev *dev;
	struct arb_vol *vol;
	struct arb_txn *t;
	struct arb_root *r;
	unsigned nt = c->clones + 1, made = 1, dropped_mid = 0;
	struct tmodel *m = calloc(nt, sizeof(*m));
	bool *live = calloc(nt, sizeof(*live));
	struct tm_opts o = { c->max_size, 35 };
	uint64_t rng = tu_seed(c->name), commits = 0;
	size_t slots = (size_t)c->nitems * 2;
	struct tm_set nodes = { 0 }, data = { 0 };
	uint64_t expect;

	ck_assert_ptr_nonnull(m);
	ck_assert_ptr_nonnull(live);
	/* data extents are allocated, never written: a big memory device
	 * costs only the pages the nodes touch */
	tu_vol_new((256ULL << 20) + (c->nitems + c->nops) * 8192, 4096, &dev,
		   &vol);
	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	ck_assert_int_eq(arb_root_create(t, BASE_ID, &r), 0);
	tm_init(&m[0], BASE_ID, slots);
	live[0] = true;
	for (size_t i = 0; i < slots; i++)
		if (tu_rand_range(&rng, 2))
			ck_assert_int_eq(tm_op(t, r, &m[0], &rng, &o, i), 0);
	commit_verify(vol, &t, m, live, made);
	ck_assert_int_ge(arb_level(get_root(vol, BASE_ID)->node), c->min_level);

	for (uint64_t op = 0; op < c->nops; op++) {
		/* the clones happen in the first half of the workload */
		if (made < nt && op == made * c->nops / (2 * nt)) {
			unsigned src = pick_live(&rng, live, made);
			struct arb_root *sr, *nr;
			if (made % 3 == 1) {
				/* clone of a committed, unmodified tree */
				commit_verify(vol, &t, m, live, made);
				commits++;
			} else if (made % 3 == 2) {
				/* the source has uncommitted changes */
				for (int j = 0; j < 20; j++)
					ck_assert_int_eq(
						tm_op(t, get_root(vol, m[src].id),
						      &m[src], &rng, &o, SIZE_MAX),
						0);
			} /* else: whatever this transaction did so far */
			sr = get_root(vol, m[src].id);
			ck_assert_int_eq(arb_root_clone(t, sr, BASE_ID + made, &nr),
					 0);
			tm_copy(&m[made], &m[src], BASE_ID + made);
			live[made] = true;
			made++;
			if (made % 3 == 0 && made < nt) {
				/* a clone of the clone, same transaction */
				ck_assert_int_eq(arb_root_clone(t, nr,
								BASE_ID + made,
								&sr),
						 0);
				tm_copy(&m[made], &m[made - 1], BASE_ID + made);
				live[made] = true;
				made++;
			}
		}
		/* one tree goes in the middle of a transaction, at 3/4 */
		if (!dropped_mid && made == nt && op >= c->nops * 3 / 4 &&
		    nt > 2) {
			unsigned d = pick_live(&rng, live, made);
			ck_assert_int_eq(arb_root_drop(t, get_root(vol, m[d].id)),
					 0);
			live[d] = false;
			dropped_mid = 1;
		}
		{
			unsigned w = pick_live(&rng, live, made);
			int ret = tm_op(t, get_root(vol, m[w].id), &m[w], &rng,
					&o, SIZE_MAX);
			ck_assert_msg(ret == 0, "op %llu on tree %llu: %d",
				      (unsigned long long)op,
				      (unsigned long long)m[w].id, ret);
		}
		if (tu_rand_range(&rng, c->commit_every) == 0) {
			commit_verify(vol, &t, m, live, made);
			commits++;
		}
	}
	commit_verify(vol, &t, m, live, made);
	/* and once more after a reopen */
	arb_txn_end(t);
	tu_vol_reopen(dev, &vol);
	verify_all(vol, m, live, made);

	/* drop all but one */
	{
		unsigned keep = pick_live(&rng, live, made);
		ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
		for (unsigned i = 0; i < made; i++) {
			if (!live[i] || i == keep)
				continue;
			ck_assert_int_eq(arb_root_drop(t, get_root(vol, m[i].id)),
					 0);
			live[i] = false;
		}
		ck_assert_int_eq(arb_txn_commit(t), 0);
		/* a second commit: nothing to do, blocks already released */
		ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
		ck_assert_int_eq(arb_txn_commit(t), 0);
		verify_all(vol, m, live, made);
		fprintf(stderr, "%s: kept tree %llu (%zu items), %llu commits\n",
			c->name, (unsigned long long)m[keep].id, m[keep].count,
			(unsigned long long)commits);
	}
	tm_walk_all(vol, &nodes, &data);
	tm_set_unique(&nodes);
	tm_set_unique(&data);
	expect = nodes.n * arb_node_alloc_bytes(vol); /* both copies */
	for (size_t i = 0; i < data.n; i++)
		expect += (data.v[i] & (ARB_SECTORSIZE - 1)) * ARB_SECTORSIZE;
	ck_assert_msg(arb_used_bytes(vol) == expect,
		      "used bytes %llu, the remaining trees need %llu "
		      "(%zu nodes, %zu data extents)",
		      (unsigned long long)arb_used_bytes(vol),
		      (unsigned long long)expect, nodes.n, data.n);
	tu_vol_reopen(dev, &vol);
	verify_all(vol, m, live, made);
	ck_assert_uint_eq(arb_used_bytes(vol), expect);

	ck_assert_int_eq(arb_vol_close(vol), 0);
	arb_dev_destroy(dev);
	for (unsigned i = 0; i < made; i++)
		tm_free(&m[i]);
	free(m);
	free(live);
	free(nodes.v);
	free(data.v);
}

START_TEST(test_clone_deep)
{
	struct cfg c = { "clone deep", TU_SCALE(6000, 60000), TU_SCALE(8, 16),
			 TU_SCALE(40000, 400000), TU_SCALE(1500, 5000), 150,
			 2 };
	do_clones(&c);
}
END_TEST

/* The source root is a leaf: the clone copies it and refs its data. */
START_TEST(test_clone_leaf_root)
{
	struct cfg c = { "clone leaf root", 12, 5, TU_SCALE(3000, 50000), 60,
			 60, 0 };
	do_clones(&c);
}
END_TEST

/* Big items, few per leaf: many shadowings per operation. */
START_TEST(test_clone_big_items)
{
	struct cfg c = { "clone big items", TU_SCALE(1500, 10000),
			 TU_SCALE(6, 12), TU_SCALE(6000, 100000),
			 TU_SCALE(400, 3000), 1200, 2 };
	do_clones(&c);
}
END_TEST

/*
 * A clone and its source dropped in the same transaction they were made in,
 * and a tree dropped right after its clone: nothing leaks.
 */
START_TEST(test_clone_drop_same_txn)
{
	struct arb_dev *dev;
	struct arb_vol *vol;
	struct arb_txn *t;
	struct arb_root *a, *b, *c;
	struct tmodel m = { 0 };
	struct tm_opts o = { 100, 40 };
	uint64_t rng = tu_seed("clone drop same txn"), used0;

	tu_vol_new(128ULL << 20, 4096, &dev, &vol);
	used0 = arb_used_bytes(vol);
	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	ck_assert_int_eq(arb_root_create(t, BASE_ID, &a), 0);
	tm_init(&m, BASE_ID, 4000);
	for (size_t i = 0; i < m.n; i++)
		if (tu_rand_range(&rng, 3))
			ck_assert_int_eq(tm_op(t, a, &m, &rng, &o, i), 0);
	ck_assert_int_eq(arb_txn_commit(t), 0);
	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	ck_assert_int_eq(arb_root_clone(t, a, BASE_ID + 1, &b), 0);
	ck_assert_int_eq(arb_root_clone(t, b, BASE_ID + 2, &c), 0);
	ck_assert_int_eq(arb_root_drop(t, a), 0);
	ck_assert_int_eq(arb_root_drop(t, b), 0);
	m.id = BASE_ID + 2;
	for (int i = 0; i < 300; i++)
		ck_assert_int_eq(tm_op(t, c, &m, &rng, &o, SIZE_MAX), 0);
	ck_assert_int_eq(arb_txn_commit(t), 0);
	tm_verify(c, &m);
	tu_vol_check(vol);
	/* now drop the last one and everything is back to the start */
	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	ck_assert_int_eq(arb_root_drop(t, c), 0);
	ck_assert_int_eq(arb_txn_commit(t), 0);
	tu_vol_check(vol);
	tu_vol_reopen(dev, &vol);
	tu_vol_check(vol);
	ck_assert_uint_eq(arb_used_bytes(vol), used0);
	ck_assert_int_eq(arb_vol_close(vol), 0);
	arb_dev_destroy(dev);
	tm_free(&m);
}
END_TEST


/*
 * Abort throws away clones, drops and changes of the transaction: the
 * trees, reference counts and free space are those of the last commit.
 */
START_TEST(test_clone_abort)
{
	struct arb_dev *dev;
	struct arb_vol *vol;
	struct arb_txn *t;
	struct arb_root *a, *b;
	struct tmodel ma = { 0 }, mb = { 0 }, wa, wb;
	struct tm_opts o = { 100, 40 };
	uint64_t rng = tu_seed("clone abort"), used;

	tu_vol_new(128ULL << 20, 4096, &dev, &vol);
	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	ck_assert_int_eq(arb_root_create(t, BASE_ID, &a), 0);
	tm_init(&ma, BASE_ID, 5000);
	for (size_t i = 0; i < ma.n; i++)
		if (tu_rand_range(&rng, 2))
			ck_assert_int_eq(tm_op(t, a, &ma, &rng, &o, i), 0);
	ck_assert_int_eq(arb_txn_commit(t), 0);
	used = arb_used_bytes(vol);

	/* changes, a clone, changes to both, a drop: all aborted */
	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	tm_copy(&wa, &ma, BASE_ID);
	for (int i = 0; i < 200; i++)
		ck_assert_int_eq(tm_op(t, a, &wa, &rng, &o, SIZE_MAX), 0);
	ck_assert_int_eq(arb_root_clone(t, a, BASE_ID + 1, &b), 0);
	tm_copy(&wb, &wa, BASE_ID + 1);
	for (int i = 0; i < 200; i++) {
		ck_assert_int_eq(tm_op(t, a, &wa, &rng, &o, SIZE_MAX), 0);
		ck_assert_int_eq(tm_op(t, b, &wb, &rng, &o, SIZE_MAX), 0);
	}
	ck_assert_int_eq(arb_root_drop(t, a), 0);
	arb_txn_abort(t);
	tm_free(&wa);
	tm_free(&wb);
	ck_assert_int_eq(arb_root_get(vol, BASE_ID + 1, &b), -ENOENT);
	ck_assert_int_eq(arb_root_get(vol, BASE_ID, &a), 0);
	tm_verify(a, &ma);
	tu_vol_check(vol);
	ck_assert_uint_eq(arb_used_bytes(vol), used);

	/* the same again, committed this time */
	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	ck_assert_int_eq(arb_root_clone(t, a, BASE_ID + 1, &b), 0);
	tm_copy(&mb, &ma, BASE_ID + 1);
	for (int i = 0; i < 300; i++) {
		ck_assert_int_eq(tm_op(t, a, &ma, &rng, &o, SIZE_MAX), 0);
		ck_assert_int_eq(tm_op(t, b, &mb, &rng, &o, SIZE_MAX), 0);
	}
	ck_assert_int_eq(arb_txn_commit(t), 0);
	tm_verify(a, &ma);
	tm_verify(b, &mb);
	tu_vol_check(vol);
	used = arb_used_bytes(vol);

	/* shadowing shared leaves (data refs pushed down) and dropping the
	 * source, aborted */
	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	tm_copy(&wb, &mb, BASE_ID + 1);
	for (int i = 0; i < 300; i++)
		ck_assert_int_eq(tm_op(t, b, &wb, &rng, &o, SIZE_MAX), 0);
	ck_assert_int_eq(arb_root_drop(t, a), 0);
	arb_txn_abort(t);
	tm_free(&wb);
	ck_assert_int_eq(arb_root_get(vol, BASE_ID, &a), 0);
	ck_assert_int_eq(arb_root_get(vol, BASE_ID + 1, &b), 0);
	tm_verify(a, &ma);
	tm_verify(b, &mb);
	tu_vol_check(vol);
	ck_assert_uint_eq(arb_used_bytes(vol), used);

	/* and the volume goes on */
	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	for (int i = 0; i < 300; i++)
		ck_assert_int_eq(tm_op(t, b, &mb, &rng, &o, SIZE_MAX), 0);
	ck_assert_int_eq(arb_txn_commit(t), 0);
	tu_vol_reopen(dev, &vol);
	ck_assert_int_eq(arb_root_get(vol, BASE_ID, &a), 0);
	ck_assert_int_eq(arb_root_get(vol, BASE_ID + 1, &b), 0);
	tm_verify(a, &ma);
	tm_verify(b, &mb);
	tu_vol_check(vol);
	ck_assert_int_eq(arb_vol_close(vol), 0);
	arb_dev_destroy(dev);
	tm_free(&ma);
	tm_free(&mb);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("clone");
	TCase *tc;

	tc = tcase_create("model");
	tcase_set_timeout(tc, 1200);
	tcase_add_test(tc, test_clone_deep);
	tcase_add_test(tc, test_clone_leaf_root);
	tcase_add_test(tc, test_clone_big_items);
	suite_add_tcase(s, tc);

	tc = tcase_create("drop");
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_clone_drop_same_txn);
	tcase_add_test(tc, test_clone_abort);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
