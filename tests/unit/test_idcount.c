/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of lib/core/idcount.c: random adds and subs checked against a plain
 * array of counts, with every invariant (size, load, iteration) checked
 * as the table grows, shrinks and wraps around.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "idcount.h"
#include "testutil.h"

/* Ids a table meets: sequential inode numbers, random 64-bit values, and
 * values that differ only in high bits (same low bits), so that homes
 * collide and runs wrap past the end of the slot array. */
static uint64_t *make_ids(size_t u, uint64_t *rng)
{
	uint64_t *ids = calloc(u, sizeof(*ids));

	ck_assert_ptr_nonnull(ids);
	for (size_t i = 0; i < u; i++) {
		switch (i % 3) {
		case 0: ids[i] = 257 + i; break;
		case 1: ids[i] = tu_rand(rng) | 1; break;
		default: ids[i] = ((uint64_t)i << 40) | 7; break;
		}
	}
	return ids;
}

/*
 * The table holds exactly the model's nonzero counts.  Returns the first
 * mismatch as a string for one ck_assert (each ck_assert is a write to
 * Check's pipe: not one per entry).
 */
static const char *model_diff(const struct arb_idcount *t,
			      const uint64_t *ids, const uint64_t *model,
			      size_t u)
{
	size_t live = 0, seen = 0, pos = 0;
	uint64_t id, count;

	for (size_t i = 0; i < u; i++) {
		if (arb_idcount_get(t, ids[i]) != model[i])
			return "get differs from the model";
		live += model[i] != 0;
	}
	if (t->n != live)
		return "n differs from the model";
	if (t->narrow.n + t->wide.n != t->n)
		return "tables disagree with n";
	if (t->narrow.n * 4 > t->narrow.cap * 3 ||
	    t->wide.n * 4 > t->wide.cap * 3)
		return "load above 3/4";
	/* the walk yields live entries only (each model id was found
	 * above, and the slots are distinct), as many as the model has */
	while (arb_idcount_next(t, &pos, &id, &count)) {
		if (!count || arb_idcount_get(t, id) != count)
			return "walk yields an entry get does not";
		seen++;
	}
	if (seen != live)
		return "walk misses entries";
	return NULL;
}

static void check_model(const struct arb_idcount *t, const uint64_t *ids,
			const uint64_t *model, size_t u)
{
	const char *why = model_diff(t, ids, model, u);

	ck_assert_msg(!why, "%s", why);
}

/* _i picks the size of the id universe: small ones keep the table at its
 * smallest size, where wrap-around and back-shifts happen all the time */
START_TEST(test_random_model)
{
	static const size_t sizes[] = {5, 40, 500, 5000};
	size_t u = sizes[_i];
	uint64_t rng = 0x1dc0 + _i, *ids = make_ids(u, &rng);
	uint64_t *model = calloc(u, sizeof(*model));
	struct arb_idcount t;
	long steps = TU_SCALE(20000, 200000);

	ck_assert_ptr_nonnull(model);
	arb_idcount_init(&t);
	for (long s = 0; s < steps; s++) {
		size_t i = tu_rand_range(&rng, u);
		/* now and then a count near 2^32: entries move between the
		 * narrow and the wide table */
		uint64_t n = tu_rand_range(&rng, 50) ? 1 + tu_rand_range(&rng, 3)
						     : UINT32_MAX - 2;
		/* phases of mostly adds then mostly subs: grow and shrink */
		bool adding = (s / (long)(4 * u + 8)) % 2 == 0;

		if (tu_rand_range(&rng, 4) < (adding ? 3u : 1u)) {
			int r = arb_idcount_add(&t, ids[i], n);

			if (r != (model[i] == 0 ? 1 : 0))
				ck_abort_msg("add returned %d", r);
			model[i] += n;
		} else {
			uint64_t left = arb_idcount_sub(&t, ids[i], n);

			model[i] = model[i] > n ? model[i] - n : 0;
			if (left != model[i])
				ck_abort_msg("sub left %llu, model %llu",
					     (unsigned long long)left,
					     (unsigned long long)model[i]);
		}
		if (s % 97 == 0 || u <= 40 || (u <= 500 && s % 7 == 0))
			check_model(&t, ids, model, u);
	}
	check_model(&t, ids, model, u);
	arb_idcount_destroy(&t);
	free(model);
	free(ids);
}
END_TEST

/* A million sequential ids in, all but a few out: the table gives its
 * memory back, and what is left is still found. */
START_TEST(test_grow_shrink)
{
	struct arb_idcount t;
	size_t n = TU_SCALE(200000, 1000000), big;

	arb_idcount_init(&t);
	for (uint64_t id = 1; id <= n; id++)
		if (arb_idcount_add(&t, id, 1) != 1)
			ck_abort_msg("add of %llu", (unsigned long long)id);
	ck_assert_uint_eq(t.n, n);
	big = arb_idcount_bytes(&t);
	/* 32-bit ids: 8-byte slots, the table between 3/8 and 3/4 full */
	ck_assert_uint_ge(big, n * 8);
	ck_assert_uint_le(big, 3 * n * 8);
	ck_assert_uint_eq(t.wide.n, 0);
	for (uint64_t id = 1; id <= n; id++)
		if (id % 1000 && arb_idcount_sub(&t, id, 1) != 0)
			ck_abort_msg("sub of %llu", (unsigned long long)id);
	ck_assert_uint_eq(t.n, n / 1000);
	ck_assert_uint_lt(arb_idcount_bytes(&t), big / 64);
	for (uint64_t id = 1; id <= n; id++)
		if (arb_idcount_get(&t, id) != (id % 1000 == 0))
			ck_abort_msg("get of %llu", (unsigned long long)id);
	arb_idcount_destroy(&t);
}
END_TEST

START_TEST(test_edges)
{
	struct arb_idcount t;
	size_t pos = 0;
	uint64_t id, count;

	arb_idcount_init(&t);
	/* empty: nothing to find, remove or walk */
	ck_assert_uint_eq(arb_idcount_get(&t, 5), 0);
	ck_assert_uint_eq(arb_idcount_sub(&t, 5, 1), 0);
	ck_assert(!arb_idcount_next(&t, &pos, &id, &count));
	/* id 0 is the empty marker, and a count of 0 is no entry */
	ck_assert_int_eq(arb_idcount_add(&t, 0, 1), -EINVAL);
	ck_assert_int_eq(arb_idcount_add(&t, 5, 0), -EINVAL);
	ck_assert_uint_eq(t.n, 0);
	/* a count outgrowing 32 bits moves its entry to the wide table */
	ck_assert_int_eq(arb_idcount_add(&t, 7, UINT32_MAX), 1);
	ck_assert_uint_eq(t.narrow.n, 1);
	ck_assert_int_eq(arb_idcount_add(&t, 7, 1), 0);
	ck_assert_uint_eq(t.narrow.n, 0);
	ck_assert_uint_eq(t.wide.n, 1);
	ck_assert_uint_eq(t.n, 1);
	ck_assert_uint_eq(arb_idcount_get(&t, 7), 1ULL << 32);
	ck_assert_int_eq(arb_idcount_add(&t, 7, UINT64_MAX), -EOVERFLOW);
	ck_assert_uint_eq(arb_idcount_sub(&t, 7, 1ULL << 31), 1ULL << 31);
	/* still found, and counted once, after further adds */
	ck_assert_int_eq(arb_idcount_add(&t, 7, 2), 0);
	ck_assert_uint_eq(arb_idcount_get(&t, 7), (1ULL << 31) + 2);
	ck_assert_uint_eq(t.n, 1);
	ck_assert_uint_eq(arb_idcount_sub(&t, 7, UINT64_MAX), 0);
	ck_assert_uint_eq(t.n, 0);
	/* a large id goes wide at once */
	ck_assert_int_eq(arb_idcount_add(&t, 1ULL << 40, 1), 1);
	ck_assert_uint_eq(t.wide.n, 1);
	ck_assert_uint_eq(arb_idcount_sub(&t, 1ULL << 40, 1), 0);
	/* counts beyond 32 bits; a sub larger than the count clamps */
	ck_assert_int_eq(arb_idcount_add(&t, 5, 1ULL << 40), 1);
	ck_assert_int_eq(arb_idcount_add(&t, 5, 1), 0);
	ck_assert_uint_eq(arb_idcount_get(&t, 5), (1ULL << 40) + 1);
	ck_assert_uint_eq(arb_idcount_sub(&t, 5, 1ULL << 40), 1);
	ck_assert_uint_eq(arb_idcount_sub(&t, 5, 9), 0);
	ck_assert_uint_eq(t.n, 0);
	ck_assert_uint_eq(arb_idcount_get(&t, 5), 0);
	/* clear empties a used table, which stays usable */
	ck_assert_int_eq(arb_idcount_add(&t, UINT64_MAX, 2), 1);
	arb_idcount_clear(&t);
	ck_assert_uint_eq(arb_idcount_get(&t, UINT64_MAX), 0);
	ck_assert_int_eq(arb_idcount_add(&t, UINT64_MAX, 2), 1);
	ck_assert_uint_eq(arb_idcount_get(&t, UINT64_MAX), 2);
	arb_idcount_destroy(&t);
}
END_TEST

static Suite *idcount_suite(void)
{
	Suite *s = suite_create("idcount");
	TCase *tc;

	tc = tcase_create("model");
	tcase_set_timeout(tc, 600);
	tcase_add_loop_test(tc, test_random_model, 0, 4);
	tcase_add_test(tc, test_grow_shrink);
	tcase_add_test(tc, test_edges);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(idcount_suite());
}
