/* SPDX-License-Identifier: MIT */
/*
 * test_corrupt.c - corrupted images.
 *
 * An image with a multi-level tree, a clone of it that was then changed
 * (shared and unshared nodes), file extents, and the root, extent and
 * checksum trees is committed; a walk lists every node.  Then, one trial at
 * a time on that image:
 *   - flip bits of a byte of a node (every byte of the header, random ones
 *     of the body), open the volume, read every item of every tree and run
 *     the checker: opening fails cleanly, or a read or the checker reports
 *     -EUCLEAN/-EIO.  The node checksum covers everything but itself, so
 *     every flip must be DETECTED, and nothing may crash (ASan/UBSan watch).
 *   - the same with the checksum recomputed after the flip ("forged"
 *     nodes): the validator and the checker face structurally bad nodes;
 *     detection is not always possible (a changed item byte is just other
 *     data), but any error must be a clean negative errno, never a crash.
 *   - flip a byte of one superblock slot: the other slot is used and holds
 *     its generation's trees; both slots bad: opening fails with -EUCLEAN
 *     or -EINVAL.
 * The byte is restored after each trial.
 *
 * The node trials use a volume with one copy of metadata (mkfs -m single):
 * with two copies a flipped first copy is repaired from the second, which
 * test_dup.c checks, together with flips of both copies.
 */
#include "tu_model.h"

#define TREE 300ULL
#define CLONE 301ULL
#define DEV_SIZE (16ULL << 20)

struct img {
	struct arb_dev *dev;
	uint8_t *data;
	uint32_t nodesize;
	struct tm_set nodes;
	/* models: after the first commit (gen_a: TREE only) and the last
	 * (gen_b: TREE and CLONE) */
	struct tmodel a, b_tree, b_clone;
	uint64_t gen_a, gen_b;
};

static void img_make(struct img *im, size_t slots, uint64_t seed,
		     unsigned meta_copies)
{
	struct arb_vol *vol;
	struct arb_txn *t;
	struct arb_root *r, *c;
	struct tm_opts o = { 120, 30 };
	uint64_t rng = seed;

	memset(im, 0, sizeof(*im));
	tu_vol_new_copies(DEV_SIZE, 4096, meta_copies, &im->dev, &vol);
	im->nodesize = vol->nodesize;
	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	ck_assert_int_eq(arb_root_create(t, TREE, &r), 0);
	tm_init(&im->b_tree, TREE, slots);
	for (size_t i = 0; i < slots; i++) {
		if (tm_is_extent(i) && tu_rand_range(&rng, 4))
			continue;
		if (tu_rand_range(&rng, 3))
			ck_assert_int_eq(tm_op(t, r, &im->b_tree, &rng, &o, i), 0);
	}
	ck_assert_int_eq(arb_txn_commit(t), 0);
	ck_assert_int_ge(arb_level(r->node), 1);
	im->gen_a = vol->generation;
	tm_copy(&im->a, &im->b_tree, TREE);

	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	ck_assert_int_eq(arb_root_clone(t, r, CLONE, &c), 0);
	tm_copy(&im->b_clone, &im->b_tree, CLONE);
	for (size_t i = 0; i < slots / 10; i++) {
		ck_assert_int_eq(tm_op(t, c, &im->b_clone, &rng, &o, SIZE_MAX), 0);
		if (i % 3 == 0)
			ck_assert_int_eq(tm_op(t, r, &im->b_tree, &rng, &o,
					       SIZE_MAX),
					 0);
	}
	ck_assert_int_eq(arb_txn_commit(t), 0);
	im->gen_b = vol->generation;
	tu_vol_check(vol);
	tm_walk_all(vol, &im->nodes, NULL);
	tm_set_unique(&im->nodes);
	ck_assert_int_eq(arb_vol_close(vol), 0);
	im->data = arb_dev_mem_data(im->dev);
}

static void img_free(struct img *im)
{
	arb_dev_destroy(im->dev);
	free(im->nodes.v);
	tm_free(&im->a);
	tm_free(&im->b_tree);
	tm_free(&im->b_clone);
}

static bool clean_err(int ret)
{
	return ret == -EUCLEAN || ret == -EIO;
}

/* Read every item of a tree, touching every byte; first error or 0. */
static int read_tree(struct arb_root *r, uint64_t *sum)
{
	struct arb_iter it;
	struct arb_key k = { 0, 0, 0 };
	int ret;

	arb_iter_init(&it, r);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		const uint8_t *d = arb_iter_data(&it);
		uint32_t n = arb_iter_size(&it);
		arb_iter_key(&it, &k);
		*sum += k.objectid + k.type + k.offset;
		for (uint32_t i = 0; i < n; i++)
			*sum = *sum * 31 + d[i];
	}
	arb_iter_release(&it);
	return ret < 0 ? ret : 0;
}

/*
 * Open the image and read everything.  Returns 0 if nothing noticed a
 * problem, else the first error; *odd is set when an error was not a clean
 * -EUCLEAN/-EIO (or -EINVAL/-ENOENT for open and missing roots).
 */
static int read_everything(struct arb_dev *dev, bool *odd)
{
	struct arb_vol *vol;
	struct arb_iter it;
	struct arb_key k = { 0, 0, 0 };
	struct arb_check_report rep = { 0 };
	uint64_t sum = 0;
	int ret, first = 0;

	*odd = false;
	ret = arb_vol_open(dev, NULL, &vol);
	if (ret) {
		*odd = !(clean_err(ret) || ret == -EINVAL);
		return ret;
	}
	ret = read_tree(vol->tree_root, &sum);
	if (ret && !first)
		first = ret;
	/* every tree named by a root item */
	arb_iter_init(&it, vol->tree_root);
	for (int r = arb_iter_seek(&it, &k); r == 0; r = arb_iter_next(&it)) {
		struct arb_root *root;
		arb_iter_key(&it, &k);
		if (k.type != ARB_ROOT_ITEM)
			continue;
		ret = arb_root_get(vol, k.objectid, &root);
		if (!ret)
			ret = read_tree(root, &sum);
		if (ret && !first)
			first = ret;
	}
	arb_iter_release(&it);
	/* and the ones the test made, in case their root items are gone */
	for (uint64_t id = TREE; id <= CLONE; id++) {
		struct arb_root *root;
		ret = arb_root_get(vol, id, &root);
		if (!ret)
			ret = read_tree(root, &sum);
		if (ret && !first)
			first = ret;
	}
	ret = arb_check_vol(vol, &rep);
	if (ret && !first)
		first = ret;
	if (first && !(clean_err(first) || first == -ENOENT))
		*odd = true;
	/* nothing is running: close writes nothing */
	ret = arb_vol_close(vol);
	if (ret && !first)
		first = ret;
	(void)sum;
	return first;
}

struct tally {
	uint64_t trials, detected, undetected, odd;
	char first_undetected[160], first_odd[160];
};

static void one_trial(struct img *im, uint64_t node, uint32_t pos,
		      uint8_t mask, bool forge, struct tally *t)
{
	uint8_t *b = im->data + node, save = b[pos];
	uint8_t csum_save[ARB_CSUM_SIZE];
	bool odd;
	int ret;

	memcpy(csum_save, b, ARB_CSUM_SIZE);
	b[pos] ^= mask;
	if (forge) {
		uint8_t c[ARB_CSUM_SIZE];
		arb_csum_block(ARB_CSUM_CRC32C, b, im->nodesize, c);
		memcpy(b, c, ARB_CSUM_SIZE);
	}
	ret = read_everything(im->dev, &odd);
	t->trials++;
	if (ret) {
		t->detected++;
	} else {
		if (!t->undetected++)
			snprintf(t->first_undetected, sizeof(t->first_undetected),
				 "node %llu byte %u ^ 0x%02x",
				 (unsigned long long)node, pos, mask);
	}
	if (odd && !t->odd++)
		snprintf(t->first_odd, sizeof(t->first_odd),
			 "node %llu byte %u ^ 0x%02x: error %d",
			 (unsigned long long)node, pos, mask, ret);
	b[pos] = save;
	memcpy(b, csum_save, ARB_CSUM_SIZE);
}

static void do_nodes(bool forge, uint32_t body_per_node)
{
	struct img im;
	struct tally t = { 0 };
	uint64_t rng = tu_seed(forge ? "corrupt forged" : "corrupt");
	int level = arb_log_level;
	bool odd;

	img_make(&im, TU_SCALE(1000, 12000), rng, 1);
	fprintf(stderr, "%s: %zu nodes\n", forge ? "forged" : "flips",
		im.nodes.n);
	ck_assert_int_ge(im.nodes.n, 12);
	/* the pristine image reads cleanly */
	ck_assert_int_eq(read_everything(im.dev, &odd), 0);
	arb_log_level = -1; /* thousands of expected complaints */
	for (size_t i = 0; i < im.nodes.n; i++) {
		uint64_t node = im.nodes.v[i];
		const struct arb_node_header *h = (const void *)(im.data + node);
		uint32_t nr = arb_node_header_h_nritems(h);
		uint32_t hdr_end = forge ? sizeof(*h) +
						   nr * (h->h_level ?
							 sizeof(struct arb_key_ptr) :
							 sizeof(struct arb_item))
					 : sizeof(*h);
		uint32_t first = forge ? ARB_CSUM_SIZE : 0;

		if (hdr_end > im.nodesize)
			hdr_end = im.nodesize;
		/* every header byte (forged: every item header byte too,
		 * 0..31 are the checksum, recomputed anyway) */
		for (uint32_t pos = first; pos < hdr_end; pos++) {
			if (forge && pos >= sizeof(*h) &&
			    tu_rand_range(&rng, TU_SCALE(16, 2)))
				continue; /* some of the item headers */
			one_trial(&im, node, pos,
				  (uint8_t)(1 + tu_rand_range(&rng, 255)), forge,
				  &t);
		}
		for (uint32_t j = 0; j < body_per_node; j++) {
			uint32_t pos = (uint32_t)(sizeof(*h) +
						  tu_rand_range(&rng, im.nodesize -
									      sizeof(*h)));
			/* single bits too: the weakest corruption */
			uint8_t mask = j % 2 ? (uint8_t)(1u << (j / 2 % 8))
					     : (uint8_t)(1 + tu_rand_range(&rng, 255));
			one_trial(&im, node, pos, mask, forge, &t);
		}
	}
	arb_log_level = level;
	/* and the image is intact again */
	ck_assert_int_eq(read_everything(im.dev, &odd), 0);
	fprintf(stderr,
		"%s: %llu trials over %zu nodes: %llu detected, %llu not, %llu "
		"unclean errors\n",
		forge ? "forged" : "flips", (unsigned long long)t.trials,
		im.nodes.n, (unsigned long long)t.detected,
		(unsigned long long)t.undetected, (unsigned long long)t.odd);
	ck_assert_msg(t.odd == 0, "an error was not -EUCLEAN/-EIO: %s",
		      t.first_odd);
	if (!forge)
		ck_assert_msg(t.undetected == 0,
			      "%llu corruptions not detected, first: %s",
			      (unsigned long long)t.undetected,
			      t.first_undetected);
	img_free(&im);
}

START_TEST(test_corrupt_nodes)
{
	do_nodes(false, TU_SCALE(12, 400));
}
END_TEST

START_TEST(test_corrupt_forged)
{
	do_nodes(true, TU_SCALE(12, 400));
}
END_TEST

/* One superblock slot bad: the other is used.  Both bad: no open. */
START_TEST(test_corrupt_super)
{
	struct img im;
	uint64_t rng = tu_seed("corrupt super"), trials = 0, bad = 0;
	const uint64_t off[2] = { ARB_SUPER_OFFSET0, ARB_SUPER_OFFSET1 };
	int level = arb_log_level;
	char msg[400] = "";

	img_make(&im, 1200, rng, 2);
	arb_log_level = -1;
	for (int s = 0; s < 2; s++) {
		uint8_t *sb = im.data + off[s];
		/* the slot not corrupted decides what opens */
		uint64_t other_gen = arb_super_s_generation(
			(const struct arb_super *)(im.data + off[!s]));
		ck_assert(other_gen == im.gen_a || other_gen == im.gen_b);
		for (uint32_t j = 0; j < TU_SCALE(600, 4096); j++) {
			uint32_t pos = j < 512 ? j
					       : (uint32_t)tu_rand_range(
							 &rng, ARB_SUPER_SIZE);
			uint8_t mask = (uint8_t)(1 + tu_rand_range(&rng, 255));
			struct arb_vol *vol;
			struct arb_root *r;
			char why[256] = "";
			int ret;

			trials++;
			sb[pos] ^= mask;
			ret = arb_vol_open(im.dev, NULL, &vol);
			if (ret) {
				if (!bad++)
					snprintf(msg, sizeof(msg),
						 "slot %d byte %u: open: %d", s,
						 pos, ret);
				sb[pos] ^= mask;
				continue;
			}
			if (vol->generation != other_gen) {
				if (!bad++)
					snprintf(msg, sizeof(msg),
						 "slot %d byte %u: generation "
						 "%llu, not %llu",
						 s, pos,
						 (unsigned long long)vol->generation,
						 (unsigned long long)other_gen);
			} else {
				bool at_b = other_gen == im.gen_b;
				ret = arb_root_get(vol, TREE, &r);
				if (!ret)
					ret = tm_compare(r, at_b ? &im.b_tree
								 : &im.a,
							 why, sizeof(why));
				if (!ret) {
					ret = arb_root_get(vol, CLONE, &r);
					if (at_b && !ret)
						ret = tm_compare(r, &im.b_clone,
								 why,
								 sizeof(why));
					else if (!at_b)
						ret = ret == -ENOENT ? 0 : -EEXIST;
				}
				if (!ret)
					ret = arb_check_vol(vol, NULL);
				if (ret && !bad++)
					snprintf(msg, sizeof(msg),
						 "slot %d byte %u: gen %llu: %d "
						 "%s",
						 s, pos,
						 (unsigned long long)other_gen,
						 ret, why);
			}
			ret = arb_vol_close(vol);
			if (ret && !bad++)
				snprintf(msg, sizeof(msg), "close: %d", ret);
			sb[pos] ^= mask;
		}
	}
	/* both slots bad */
	for (uint32_t j = 0; j < TU_SCALE(200, 2000); j++) {
		uint32_t p0 = (uint32_t)tu_rand_range(&rng, ARB_SUPER_SIZE);
		uint32_t p1 = (uint32_t)tu_rand_range(&rng, ARB_SUPER_SIZE);
		uint8_t m0 = (uint8_t)(1 + tu_rand_range(&rng, 255));
		uint8_t m1 = (uint8_t)(1 + tu_rand_range(&rng, 255));
		struct arb_vol *vol;
		int ret;

		trials++;
		im.data[off[0] + p0] ^= m0;
		im.data[off[1] + p1] ^= m1;
		ret = arb_vol_open(im.dev, NULL, &vol);
		if (ret == 0) {
			arb_vol_close(vol);
			if (!bad++)
				snprintf(msg, sizeof(msg),
					 "both slots bad (%u, %u): opened", p0,
					 p1);
		} else if (ret != -EUCLEAN && ret != -EINVAL) {
			if (!bad++)
				snprintf(msg, sizeof(msg),
					 "both slots bad (%u, %u): %d", p0, p1,
					 ret);
		}
		im.data[off[0] + p0] ^= m0;
		im.data[off[1] + p1] ^= m1;
	}
	arb_log_level = level;
	fprintf(stderr, "super: %llu trials, %llu wrong\n",
		(unsigned long long)trials, (unsigned long long)bad);
	ck_assert_msg(bad == 0, "%llu wrong results; first: %s",
		      (unsigned long long)bad, msg);
	img_free(&im);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("corrupt");
	TCase *tc;

	tc = tcase_create("nodes");
	tcase_set_timeout(tc, 1200);
	tcase_add_test(tc, test_corrupt_nodes);
	tcase_add_test(tc, test_corrupt_forged);
	suite_add_tcase(s, tc);

	tc = tcase_create("super");
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_corrupt_super);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
