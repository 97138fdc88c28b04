/* SPDX-License-Identifier: MIT */
/*
 * test_dup.c - duplicated metadata and self-heal.
 *
 * An image with two copies of every node holds a tree several levels deep,
 * a clone of it that was then changed (shared and unshared nodes), file
 * extents (so the extent tree has data back-references), and the root,
 * extent and checksum trees.  A walk lists every node with the address of
 * its second copy.  Then, for every node, one trial at a time on that image:
 *   - first copy damaged (a bit flip; every level, every tree): opening and
 *     reading every item of every tree gives exactly the models' contents,
 *     the volume counts a heal and no unrecoverable read, the first copy on
 *     disk is again byte-identical to the second, and the checker is clean;
 *   - second copy damaged: every read still gives the models' contents,
 *     nothing is healed, and the checker reports the bad second copy;
 *   - both copies damaged: opening or some read fails with -EUCLEAN (never
 *     a crash, never wrong data silently), and the failure is counted.
 *   - an I/O error (the fault device) on each read of opening and reading
 *     everything in turn: a node read falls back to its second copy (heal
 *     counted, contents right); only a superblock read may fail the open.
 * And with one copy (mkfs -m single) a flipped node is an error, as before.
 */
#include <stdarg.h>

#include "tu_model.h"

#define TREE 300ULL
#define CLONE 301ULL

struct copy {
	uint64_t bytenr, mirror;
	int level;
	uint64_t owner;
};

struct img {
	struct arb_dev *dev;
	uint8_t *data;
	uint64_t dev_size;
	uint32_t nodesize;
	struct copy *nodes;
	size_t nr_nodes, cap_nodes;
	struct tmodel tree, clone;
	unsigned levels_seen; /* bit per level */
};

static void add_node(struct img *im, struct arb_node *n)
{
	for (size_t i = 0; i < im->nr_nodes; i++)
		if (im->nodes[i].bytenr == n->bytenr)
			return; /* shared by the clone */
	if (im->nr_nodes == im->cap_nodes) {
		im->cap_nodes = im->cap_nodes ? im->cap_nodes * 2 : 64;
		im->nodes = realloc(im->nodes,
				    im->cap_nodes * sizeof(*im->nodes));
		ck_assert_ptr_nonnull(im->nodes);
	}
	im->nodes[im->nr_nodes++] = (struct copy){ n->bytenr, n->mirror,
						   arb_level(n),
						   arb_node_owner(n) };
	im->levels_seen |= 1u << arb_level(n);
}

static void walk(struct img *im, struct arb_vol *vol, uint64_t bytenr,
		 uint64_t mirror, uint64_t gen, int level)
{
	struct arb_node *n;

	ck_assert_int_eq(arb_node_read(vol, bytenr, mirror, gen, level, &n), 0);
	ck_assert_uint_eq(n->mirror, mirror);
	add_node(im, n);
	for (uint32_t s = 0; level > 0 && s < arb_nritems(n); s++)
		walk(im, vol, arb_child_bytenr(n, (int)s),
		     arb_child_mirror(n, (int)s), arb_child_gen(n, (int)s),
		     level - 1);
	arb_node_put(vol, n);
}

static void walk_all(struct img *im, struct arb_vol *vol)
{
	struct arb_node *r = vol->tree_root->node;
	struct arb_iter it;
	struct arb_key k = { 0, 0, 0 };
	int ret;

	walk(im, vol, r->bytenr, r->mirror, arb_node_gen(r), arb_level(r));
	arb_iter_init(&it, vol->tree_root);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		const struct arb_root_item *ri = arb_iter_data(&it);
		arb_iter_key(&it, &k);
		if (k.type != ARB_ROOT_ITEM)
			continue;
		walk(im, vol, arb_root_item_r_bytenr(ri),
		     arb_root_item_r_mirror(ri), arb_root_item_r_generation(ri),
		     arb_root_item_r_level(ri));
	}
	ck_assert_int_eq(ret, 1);
	arb_iter_release(&it);
}

static void img_make(struct img *im, uint64_t dev_size, size_t slots,
		     uint64_t seed, unsigned copies, int min_level)
{
	struct arb_vol *vol;
	struct arb_txn *t;
	struct arb_root *r, *c;
	struct tm_opts o = { 120, 30 };
	uint64_t rng = seed;

	memset(im, 0, sizeof(*im));
	tu_vol_new_copies(dev_size, 4096, copies, &im->dev, &vol);
	im->dev_size = dev_size;
	ck_assert_uint_eq(vol->meta_copies, copies);
	im->nodesize = vol->nodesize;
	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	ck_assert_int_eq(arb_root_create(t, TREE, &r), 0);
	tm_init(&im->tree, TREE, slots);
	for (size_t i = 0; i < slots; i++) {
		if (tm_is_extent(i) && tu_rand_range(&rng, 4))
			continue;
		if (tu_rand_range(&rng, 3))
			ck_assert_int_eq(tm_op(t, r, &im->tree, &rng, &o, i), 0);
	}
	ck_assert_int_eq(arb_txn_commit(t), 0);
	ck_assert_int_ge(arb_level(r->node), min_level);
	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	ck_assert_int_eq(arb_root_clone(t, r, CLONE, &c), 0);
	tm_copy(&im->clone, &im->tree, CLONE);
	for (size_t i = 0; i < slots / 10; i++) {
		ck_assert_int_eq(tm_op(t, c, &im->clone, &rng, &o, SIZE_MAX), 0);
		if (i % 3 == 0)
			ck_assert_int_eq(tm_op(t, r, &im->tree, &rng, &o,
					       SIZE_MAX),
					 0);
	}
	ck_assert_int_eq(arb_txn_commit(t), 0);
	tu_vol_check(vol);
	walk_all(im, vol);
	ck_assert_int_eq(arb_vol_close(vol), 0);
	im->data = arb_dev_mem_data(im->dev);
}

static void img_free(struct img *im)
{
	arb_dev_destroy(im->dev);
	free(im->nodes);
	tm_free(&im->tree);
	tm_free(&im->clone);
}

/* Read every item of a tree; first error or 0. */
static int read_tree(struct arb_root *r)
{
	struct arb_iter it;
	struct arb_key k = { 0, 0, 0 };
	uint64_t sum = 0;
	int ret;

	arb_iter_init(&it, r);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		const uint8_t *d = arb_iter_data(&it);
		for (uint32_t i = 0; i < arb_iter_size(&it); i++)
			sum = sum * 31 + d[i];
	}
	arb_iter_release(&it);
	(void)sum;
	return ret < 0 ? ret : 0;
}

struct outcome {
	int err;          /* first error of open/reads, 0 if none */
	bool opened;
	bool contents_ok; /* the two test trees equal their models */
	uint64_t healed, failed, problems;
	char why[256];
};

/*
 * Open dev (read-write: heals are written), read every item of every
 * tree, compare the test trees with the models, run the checker.
 */
static void read_everything(struct img *im, struct arb_dev *dev,
			    struct outcome *o)
{
	struct arb_vol *vol;
	struct arb_iter it;
	struct arb_key k = { 0, 0, 0 };
	struct arb_check_report rep = { 0 };
	struct arb_root *root;
	int ret;

	memset(o, 0, sizeof(*o));
	ret = arb_vol_open(dev, NULL, &vol);
	if (ret) {
		o->err = ret;
		return;
	}
	o->opened = true;
	ret = read_tree(vol->tree_root);
	if (ret && !o->err)
		o->err = ret;
	arb_iter_init(&it, vol->tree_root);
	for (int r = arb_iter_seek(&it, &k); r == 0; r = arb_iter_next(&it)) {
		arb_iter_key(&it, &k);
		if (k.type != ARB_ROOT_ITEM)
			continue;
		ret = arb_root_get(vol, k.objectid, &root);
		if (!ret)
			ret = read_tree(root);
		if (ret && !o->err)
			o->err = ret;
	}
	arb_iter_release(&it);
	o->contents_ok = true;
	ret = arb_root_get(vol, TREE, &root);
	if (!ret)
		ret = tm_compare(root, &im->tree, o->why, sizeof(o->why));
	if (ret)
		o->contents_ok = false;
	ret = arb_root_get(vol, CLONE, &root);
	if (!ret)
		ret = tm_compare(root, &im->clone, o->why, sizeof(o->why));
	if (ret)
		o->contents_ok = false;
	ret = arb_check_vol(vol, &rep);
	o->problems = rep.errors;
	if (ret && ret != -EUCLEAN && !o->err)
		o->err = ret;
	arb_vol_heal_stats(vol, &o->healed, &o->failed);
	ck_assert_int_eq(arb_vol_close(vol), 0);
}

struct tally {
	uint64_t trials, bad;
	char first[300];
};

static void bad(struct tally *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void bad(struct tally *t, const char *fmt, ...)
{
	va_list ap;

	if (t->bad++)
		return;
	va_start(ap, fmt);
	vsnprintf(t->first, sizeof(t->first), fmt, ap);
	va_end(ap);
}

/*
 * Which nodes get a trial of their own: all of them at full scale; in CI
 * every internal node and a random sample of leaves (each trial reads the
 * whole image, so all of them would cost minutes; the all-at-once trials
 * of test_dup_one_copy cover every node).
 */
static bool selected(const struct copy *c, uint64_t *rng)
{
	return tu_full_scale() || c->level > 0 || tu_rand_range(rng, 32) == 0;
}

static uint32_t pick_pos(struct img *im, uint64_t *rng, uint64_t i)
{
	/* header bytes for some nodes, anywhere for the others */
	if (i % 3 == 0)
		return (uint32_t)tu_rand_range(rng,
					       sizeof(struct arb_node_header));
	return (uint32_t)tu_rand_range(rng, im->nodesize);
}

START_TEST(test_dup_one_copy)
{
	struct img im;
	struct tally t = { 0 };
	uint64_t rng = tu_seed("dup one copy");
	uint8_t *save = malloc(ARB_MAX_NODESIZE);
	int level = arb_log_level;
	struct outcome o;

	img_make(&im, 32ULL << 20, TU_SCALE(20000, 40000), rng, 2, 2);
	fprintf(stderr, "dup: %zu nodes, levels mask 0x%x\n", im.nr_nodes,
		im.levels_seen);
	ck_assert_uint_ge(im.nr_nodes, 12);
	ck_assert_uint_ge(im.levels_seen, 0x7); /* leaves and two levels up */
	read_everything(&im, im.dev, &o);
	ck_assert_int_eq(o.err, 0);
	ck_assert(o.contents_ok);
	ck_assert_uint_eq(o.problems, 0);
	ck_assert_uint_eq(o.healed, 0);

	arb_log_level = -1; /* hundreds of expected complaints */

	/* every node at once, first copies: every node read heals one */
	for (size_t i = 0; i < im.nr_nodes; i++) {
		struct copy *c = &im.nodes[i];
		ck_assert_uint_ne(c->mirror, 0);
		ck_assert_int_eq(memcmp(im.data + c->bytenr,
					im.data + c->mirror, im.nodesize), 0);
		im.data[c->bytenr + pick_pos(&im, &rng, i)] ^=
			(uint8_t)(1u << tu_rand_range(&rng, 8));
	}
	read_everything(&im, im.dev, &o);
	ck_assert_msg(o.err == 0 && o.contents_ok, "all first copies bad: %d %s",
		      o.err, o.why);
	ck_assert_uint_eq(o.healed, im.nr_nodes);
	ck_assert_uint_eq(o.failed, 0);
	ck_assert_uint_eq(o.problems, 0);
	for (size_t i = 0; i < im.nr_nodes; i++) {
		struct copy *c = &im.nodes[i];
		ck_assert_msg(memcmp(im.data + c->bytenr, im.data + c->mirror,
				     im.nodesize) == 0,
			      "node %llu not healed",
			      (unsigned long long)c->bytenr);
	}
	/* every node at once, second copies: reads fine, the checker
	 * reports each of them */
	for (size_t i = 0; i < im.nr_nodes; i++) {
		struct copy *c = &im.nodes[i];
		im.data[c->mirror + pick_pos(&im, &rng, i)] ^=
			(uint8_t)(1u << tu_rand_range(&rng, 8));
	}
	read_everything(&im, im.dev, &o);
	ck_assert_msg(o.err == 0 && o.contents_ok, "all second copies bad: %d %s",
		      o.err, o.why);
	ck_assert_uint_eq(o.healed, 0);
	ck_assert_uint_eq(o.failed, 0);
	ck_assert_uint_eq(o.problems, im.nr_nodes);
	for (size_t i = 0; i < im.nr_nodes; i++) {
		struct copy *c = &im.nodes[i];
		memcpy(im.data + c->mirror, im.data + c->bytenr, im.nodesize);
	}

	/* one node at a time */
	for (size_t i = 0; i < im.nr_nodes; i++) {
		struct copy *c = &im.nodes[i];
		uint8_t *first = im.data + c->bytenr, *second;
		uint32_t pos = pick_pos(&im, &rng, i);
		uint8_t mask = (uint8_t)(1u << tu_rand_range(&rng, 8));

		if (!selected(c, &rng))
			continue;
		second = im.data + c->mirror;
		ck_assert_int_eq(memcmp(first, second, im.nodesize), 0);
		memcpy(save, first, im.nodesize);

		/* the first copy: read from the second, healed */
		t.trials++;
		first[pos] ^= mask;
		read_everything(&im, im.dev, &o);
		if (o.err || !o.contents_ok)
			bad(&t, "node %llu (tree %llu level %d) first copy byte "
				"%u: error %d, contents %s %s",
			    (unsigned long long)c->bytenr,
			    (unsigned long long)c->owner, c->level, pos, o.err,
			    o.contents_ok ? "ok" : "wrong", o.why);
		else if (o.healed < 1 || o.failed)
			bad(&t, "node %llu first copy: %llu heals, %llu failed",
			    (unsigned long long)c->bytenr,
			    (unsigned long long)o.healed,
			    (unsigned long long)o.failed);
		else if (memcmp(first, second, im.nodesize) ||
			 memcmp(first, save, im.nodesize))
			bad(&t, "node %llu: first copy not rewritten",
			    (unsigned long long)c->bytenr);
		else if (o.problems)
			bad(&t, "node %llu: checker found %llu problems after "
				"the heal", (unsigned long long)c->bytenr,
			    (unsigned long long)o.problems);
		memcpy(first, save, im.nodesize);

		/* the second copy: reads fine, the checker complains */
		t.trials++;
		second[pos] ^= mask;
		read_everything(&im, im.dev, &o);
		if (o.err || !o.contents_ok)
			bad(&t, "node %llu second copy byte %u: error %d, "
				"contents %s %s",
			    (unsigned long long)c->bytenr, pos, o.err,
			    o.contents_ok ? "ok" : "wrong", o.why);
		else if (o.healed || o.failed)
			bad(&t, "node %llu second copy: %llu heals, %llu failed",
			    (unsigned long long)c->bytenr,
			    (unsigned long long)o.healed,
			    (unsigned long long)o.failed);
		else if (o.problems == 0)
			bad(&t, "node %llu: checker missed a bad second copy",
			    (unsigned long long)c->bytenr);
		second[pos] ^= mask;
		ck_assert_int_eq(memcmp(first, second, im.nodesize), 0);
	}
	arb_log_level = level;
	read_everything(&im, im.dev, &o);
	ck_assert_int_eq(o.err, 0);
	ck_assert_uint_eq(o.problems, 0);
	fprintf(stderr, "dup one copy: %llu trials over %zu nodes, %llu bad\n",
		(unsigned long long)t.trials, im.nr_nodes,
		(unsigned long long)t.bad);
	ck_assert_msg(t.bad == 0, "%llu bad trials; first: %s",
		      (unsigned long long)t.bad, t.first);
	free(save);
	img_free(&im);
}
END_TEST

START_TEST(test_dup_both_copies)
{
	struct img im;
	struct tally t = { 0 };
	uint64_t rng = tu_seed("dup both copies");
	int level = arb_log_level;
	struct outcome o;

	img_make(&im, 32ULL << 20, TU_SCALE(20000, 40000), rng, 2, 2);
	arb_log_level = -1;
	for (size_t i = 0; i < im.nr_nodes; i++) {
		struct copy *c = &im.nodes[i];
		uint8_t *first = im.data + c->bytenr;
		uint8_t *second = im.data + c->mirror;
		uint32_t p0 = pick_pos(&im, &rng, i);
		uint32_t p1 = pick_pos(&im, &rng, i + 1);
		uint8_t m0 = (uint8_t)(1 + tu_rand_range(&rng, 255));
		uint8_t m1 = (uint8_t)(1 + tu_rand_range(&rng, 255));

		if (!selected(c, &rng))
			continue;
		t.trials++;
		first[p0] ^= m0;
		second[p1] ^= m1;
		read_everything(&im, im.dev, &o);
		if (o.err == 0)
			bad(&t, "node %llu (tree %llu level %d): both copies "
				"bad and nothing failed (contents %s)",
			    (unsigned long long)c->bytenr,
			    (unsigned long long)c->owner, c->level,
			    o.contents_ok ? "ok" : "wrong");
		else if (o.err != -EUCLEAN)
			bad(&t, "node %llu: both copies bad: error %d",
			    (unsigned long long)c->bytenr, o.err);
		else if (o.opened && o.failed == 0)
			bad(&t, "node %llu: failure not counted",
			    (unsigned long long)c->bytenr);
		first[p0] ^= m0;
		second[p1] ^= m1;
	}
	arb_log_level = level;
	read_everything(&im, im.dev, &o);
	ck_assert_int_eq(o.err, 0);
	ck_assert_uint_eq(o.problems, 0);
	fprintf(stderr, "dup both copies: %llu trials, %llu bad\n",
		(unsigned long long)t.trials, (unsigned long long)t.bad);
	ck_assert_msg(t.bad == 0, "%llu bad trials; first: %s",
		      (unsigned long long)t.bad, t.first);
	img_free(&im);
}
END_TEST

/* -EIO on the n-th read, once: a node read falls back to the second copy. */
START_TEST(test_dup_read_error)
{
	struct img im;
	struct tally t = { 0 };
	uint64_t rng = tu_seed("dup read error"), total, healed = 0, by_ck = 0;
	uint8_t *pristine;
	struct arb_dev *mem, *fd;
	int level = arb_log_level;
	struct outcome o;

	img_make(&im, 8ULL << 20, TU_SCALE(600, 6000), rng, 2, 1);
	pristine = malloc(im.dev_size);
	ck_assert_ptr_nonnull(pristine);
	memcpy(pristine, im.data, im.dev_size);
	ck_assert_int_eq(arb_dev_open_mem(im.dev_size, &mem), 0);
	memcpy(arb_dev_mem_data(mem), pristine, im.dev_size);
	ck_assert_int_eq(arb_dev_fault_wrap(mem, &fd), 0);
	read_everything(&im, fd, &o);
	ck_assert_int_eq(o.err, 0);
	total = arb_dev_fault_count(fd, ARB_FAULT_READ);
	arb_dev_destroy(fd);
	arb_log_level = -1;
	for (uint64_t n = 1; n <= total; n++) {
		ck_assert_int_eq(arb_dev_open_mem(im.dev_size, &mem), 0);
		memcpy(arb_dev_mem_data(mem), pristine, im.dev_size);
		ck_assert_int_eq(arb_dev_fault_wrap(mem, &fd), 0);
		arb_dev_fault_arm(fd, ARB_FAULT_READ, n, -EIO, false);
		read_everything(&im, fd, &o);
		t.trials++;
		if (o.err) {
			/* only the two superblock reads may fail the open */
			if (!(o.err == -EIO && n <= 2))
				bad(&t, "read error at %llu: error %d",
				    (unsigned long long)n, o.err);
		} else if (o.contents_ok && !o.failed && !o.healed &&
			   o.problems == 1) {
			/* the checker's own raw read of a copy failed: it
			 * says so */
			by_ck++;
		} else if (!o.contents_ok || o.problems || o.failed ||
			   o.healed != 1) {
			bad(&t, "read error at %llu: contents %s, %llu problems, "
				"%llu healed, %llu failed",
			    (unsigned long long)n,
			    o.contents_ok ? "ok" : "wrong",
			    (unsigned long long)o.problems,
			    (unsigned long long)o.healed,
			    (unsigned long long)o.failed);
		} else {
			healed++;
		}
		arb_dev_destroy(fd);
	}
	arb_log_level = level;
	fprintf(stderr, "dup read errors: %llu reads, %llu answered by the "
		"second copy, %llu in the checker's raw reads, %llu bad\n",
		(unsigned long long)total, (unsigned long long)healed,
		(unsigned long long)by_ck, (unsigned long long)t.bad);
	ck_assert_msg(t.bad == 0, "%llu bad trials; first: %s",
		      (unsigned long long)t.bad, t.first);
	ck_assert_uint_gt(healed, total / 4);
	free(pristine);
	img_free(&im);
}
END_TEST

/* One copy: a bad node is an error, no heal, no second copies anywhere. */
START_TEST(test_dup_single)
{
	struct img im;
	uint64_t rng = tu_seed("dup single");
	int level = arb_log_level;
	uint64_t errors = 0;
	struct outcome o;

	img_make(&im, 8ULL << 20, TU_SCALE(600, 6000), rng, 1, 1);
	read_everything(&im, im.dev, &o);
	ck_assert_int_eq(o.err, 0);
	ck_assert_uint_eq(o.problems, 0);
	arb_log_level = -1;
	for (size_t i = 0; i < im.nr_nodes; i++) {
		struct copy *c = &im.nodes[i];
		uint32_t pos = pick_pos(&im, &rng, i);

		ck_assert_uint_eq(c->mirror, 0);
		im.data[c->bytenr + pos] ^= 0x10;
		read_everything(&im, im.dev, &o);
		ck_assert_msg(o.err == -EUCLEAN,
			      "node %llu: error %d", (unsigned long long)c->bytenr,
			      o.err);
		ck_assert_uint_eq(o.healed, 0);
		errors += o.err != 0;
		im.data[c->bytenr + pos] ^= 0x10;
	}
	arb_log_level = level;
	ck_assert_uint_gt(errors, 0);
	img_free(&im);
}
END_TEST

/* Read-only: the second copy answers, nothing is written. */
START_TEST(test_dup_readonly)
{
	struct img im;
	uint64_t rng = tu_seed("dup readonly");
	struct arb_vol_opts ro = { .readonly = true };
	struct arb_check_report rep = { 0 };
	struct arb_vol *vol;
	struct arb_root *r;
	uint8_t *copy;
	char why[256] = "";
	int level = arb_log_level;

	img_make(&im, 8ULL << 20, TU_SCALE(600, 6000), rng, 2, 1);
	for (size_t i = 0; i < im.nr_nodes; i++)
		im.data[im.nodes[i].bytenr + 100] ^= 1;
	copy = malloc(im.dev_size);
	ck_assert_ptr_nonnull(copy);
	memcpy(copy, im.data, im.dev_size);
	arb_log_level = -1;
	ck_assert_int_eq(arb_vol_open(im.dev, &ro, &vol), 0);
	ck_assert_int_eq(arb_root_get(vol, TREE, &r), 0);
	ck_assert_int_eq(tm_compare(r, &im.tree, why, sizeof(why)), 0);
	ck_assert_int_eq(arb_root_get(vol, CLONE, &r), 0);
	ck_assert_int_eq(tm_compare(r, &im.clone, why, sizeof(why)), 0);
	/* the checker names every first copy, still bad on disk */
	ck_assert_int_eq(arb_check_vol(vol, &rep), -EUCLEAN);
	ck_assert_uint_eq(rep.errors, im.nr_nodes);
	ck_assert_uint_eq(vol->nr_healed, im.nr_nodes);
	ck_assert_uint_eq(vol->nr_unrecoverable, 0);
	ck_assert_int_eq(arb_vol_close(vol), 0);
	arb_log_level = level;
	ck_assert_int_eq(memcmp(copy, im.data, im.dev_size), 0);
	free(copy);
	img_free(&im);
}
END_TEST

/* A version 1 image (before duplicated metadata) is refused. */
START_TEST(test_dup_v1_refused)
{
	struct arb_dev *dev;
	struct arb_vol *vol;
	struct arb_super sb;
	const char *why = NULL;
	int slot, level = arb_log_level;

	tu_vol_new(8ULL << 20, 4096, &dev, &vol);
	ck_assert_int_eq(arb_vol_close(vol), 0);
	for (int i = 0; i < 2; i++) {
		uint64_t off = i ? ARB_SUPER_OFFSET1 : ARB_SUPER_OFFSET0;
		memcpy(&sb, arb_dev_mem_data(dev) + off, sizeof(sb));
		arb_set_super_s_version(&sb, 1);
		arb_csum_block(ARB_CSUM_CRC32C, &sb, sizeof(sb), sb.s_csum);
		memcpy(arb_dev_mem_data(dev) + off, &sb, sizeof(sb));
	}
	arb_log_level = -1;
	ck_assert_int_eq(arb_vol_open(dev, NULL, &vol), -EPROTONOSUPPORT);
	arb_log_level = level;
	ck_assert_int_eq(arb_read_super(dev, &sb, &slot, &why),
			 -EPROTONOSUPPORT);
	ck_assert_ptr_nonnull(strstr(why, "version 1"));
	arb_dev_destroy(dev);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("dup");
	TCase *tc;

	tc = tcase_create("heal");
	tcase_set_timeout(tc, 1200);
	tcase_add_test(tc, test_dup_one_copy);
	tcase_add_test(tc, test_dup_both_copies);
	tcase_add_test(tc, test_dup_read_error);
	tcase_add_test(tc, test_dup_single);
	tcase_add_test(tc, test_dup_v1_refused);
	tcase_add_test(tc, test_dup_readonly);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
