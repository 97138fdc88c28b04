/* SPDX-License-Identifier: MIT */
/*
 * test_fault.c - I/O errors, with the fault-injection device.
 *
 * A committed image holds a tree several levels deep (model M0).  The
 * victim workload opens it with a node cache of a few nodes (so nodes are
 * evicted and read again), changes the tree, commits (model M1), then reads
 * everything back with iterators and lookups.  A dry run counts the
 * victim's writes, flushes and reads; then, for N = 1.. that count, a fresh
 * copy of the image runs the victim with the N-th operation of that kind
 * failing (once, or for good).  Every time:
 *   - the error reaches the caller as a negative errno (an assert or a
 *     sanitizer report fails the test by itself);
 *   - a failed write or flush of a commit leaves the volume refusing new
 *     transactions; a read error inside a transaction is undone by abort,
 *     after which the volume is back at M0 in memory;
 *   - a read error while looking up leaves the committed state readable;
 *   - after disarming, closing and opening the image again, it holds M0 (or
 *     M1 when the commit went through -- or, for a failed final flush, may
 *     have) and the checker is clean.
 * Read errors while opening a volume are tried the same way.
 *
 * Metadata is duplicated (the default): a read error on a node's first copy
 * that does not persist is answered by the second copy, so such a trial
 * may see no error -- but only when the volume counted the heal, and the
 * durable state is then checked like any other (the checker reads both
 * copies).  A sticky error fails both copies and must reach the caller.
 */
#include <stdarg.h>

#include "tu_model.h"

#define TREE 300ULL
#define DEV_SIZE (24ULL << 20)

struct fixture {
	uint8_t *image; /* committed image with M0 */
	struct tmodel m0;
	uint64_t gen0;
	size_t slots;
};

enum phase { PH_OPS = 0, PH_COMMIT = 1, PH_LOOKUP = 2, PH_DONE = 3 };

static struct arb_vol_opts small_cache = { .cache_bytes = 16 * 4096 };

static void fixture_make(struct fixture *f, size_t slots, uint64_t seed)
{
	struct arb_dev *dev;
	struct arb_vol *vol;
	struct arb_txn *t;
	struct arb_root *r;
	struct tm_opts o = { 100, 20 };
	uint64_t rng = seed;

	f->slots = slots;
	tu_vol_new(DEV_SIZE, 4096, &dev, &vol);
	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	ck_assert_int_eq(arb_root_create(t, TREE, &r), 0);
	tm_init(&f->m0, TREE, slots);
	for (size_t i = 0; i < slots; i++) {
		/* few file extents: their data would fill the device */
		if (tm_is_extent(i) && tu_rand_range(&rng, 8))
			continue;
		if (tu_rand_range(&rng, 3))
			ck_assert_int_eq(tm_op(t, r, &f->m0, &rng, &o, i), 0);
	}
	ck_assert_int_eq(arb_txn_commit(t), 0);
	ck_assert_int_ge(arb_level(r->node), slots >= 16000 ? 2 : 1);
	f->gen0 = vol->generation;
	ck_assert_int_eq(arb_vol_close(vol), 0);
	f->image = malloc(DEV_SIZE);
	ck_assert_ptr_nonnull(f->image);
	memcpy(f->image, arb_dev_mem_data(dev), DEV_SIZE);
	arb_dev_destroy(dev);
}

/* A fault device over a fresh copy of the fixture's image. */
static struct arb_dev *fixture_dev(const struct fixture *f)
{
	struct arb_dev *mem, *fd;

	ck_assert_int_eq(arb_dev_open_mem(DEV_SIZE, &mem), 0);
	memcpy(arb_dev_mem_data(mem), f->image, DEV_SIZE);
	ck_assert_int_eq(arb_dev_fault_wrap(mem, &fd), 0);
	return fd;
}

/*
 * The victim: ROUNDS rounds of changes, each committed, then a read of
 * everything.  m[0] is M0; m[k] is filled with what round k committed.
 * Returns the first error (<0), and the phase and round it happened in.
 */
#define ROUNDS 3

static int victim(struct arb_vol *vol, struct tmodel *m, uint64_t seed,
		  unsigned nops, enum phase *ph, int *round)
{
	struct tm_opts o = { 100, 20 };
	struct arb_txn *t;
	struct arb_root *r;
	struct arb_iter it;
	struct arb_key k = { 0, 0, 0 };
	uint8_t buf[256];
	uint64_t rng = seed;
	int ret;

	for (*round = 1; *round <= ROUNDS; ++*round) {
		struct tmodel *mk = &m[*round];
		tm_copy(mk, &m[*round - 1], TREE);
		*ph = PH_OPS;
		ret = arb_txn_begin(vol, &t);
		if (ret)
			return ret;
		ret = arb_root_get(vol, TREE, &r);
		for (unsigned i = 0; i < nops && !ret; i++)
			ret = tm_op(t, r, mk, &rng, &o, SIZE_MAX);
		if (ret) {
			arb_txn_abort(t);
			return ret;
		}
		*ph = PH_COMMIT;
		ret = arb_txn_commit(t);
		if (ret)
			return ret;
	}
	*round = ROUNDS;
	*ph = PH_LOOKUP;
	ret = arb_root_get(vol, TREE, &r);
	if (ret)
		return ret;
	arb_iter_init(&it, r);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it))
		;
	arb_iter_release(&it);
	if (ret < 0)
		return ret;
	for (unsigned i = 0; i < nops; i++) {
		size_t s = (size_t)tu_rand_range(&rng, m[ROUNDS].n);
		tm_key(s, &k);
		ret = arb_lookup_item(r, &k, buf, sizeof(buf));
		if (ret < 0 && ret != -ENOENT)
			return ret;
	}
	*ph = PH_DONE;
	return 0;
}

static void models_free(struct tmodel *m)
{
	for (int k = 1; k <= ROUNDS; k++)
		tm_free(&m[k]);
}

static const char *kind_name(unsigned kind)
{
	return kind == ARB_FAULT_READ ? "read" :
	       kind == ARB_FAULT_WRITE ? "write" : "flush";
}

struct stats {
	uint64_t trials, errors_seen, by_phase[4], new_gen, healed;
	uint64_t failures;
	char first[400];
};

static void trial_fail(struct stats *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void trial_fail(struct stats *s, const char *fmt, ...)
{
	va_list ap;
	char msg[400];

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "fault: %s\n", msg);
	if (!s->failures++)
		snprintf(s->first, sizeof(s->first), "%s", msg);
}

/* the image behind fd, opened again, holds m (and the checker agrees) */
static void expect_state(struct stats *s, struct arb_dev *fd,
			 const struct tmodel *m, const char *what)
{
	struct arb_vol *vol;
	struct arb_root *r;
	struct arb_check_report rep = { 0 };
	char why[256] = "";
	int ret;

	ret = arb_vol_open(fd, &small_cache, &vol);
	if (ret) {
		trial_fail(s, "%s: reopen failed: %d", what, ret);
		return;
	}
	ret = arb_root_get(vol, TREE, &r);
	if (!ret)
		ret = tm_compare(r, m, why, sizeof(why));
	if (ret)
		trial_fail(s, "%s: tree differs after reopen: %d %s", what, ret,
			   why);
	ret = arb_check_vol(vol, &rep);
	if (ret)
		trial_fail(s, "%s: checker after reopen: %d (%llu problems)",
			   what, ret, (unsigned long long)rep.errors);
	ret = arb_vol_close(vol);
	if (ret)
		trial_fail(s, "%s: close after reopen: %d", what, ret);
}

static void do_faults(unsigned kind, size_t slots, unsigned nops,
		      uint64_t max_trials)
{
	struct fixture f;
	struct stats s = { 0 };
	uint64_t seed = tu_seed(kind_name(kind)), total, step;
	struct arb_dev *fd;
	struct arb_vol *vol;
	struct tmodel m[ROUNDS + 1];
	enum phase ph;
	int round;
	uint64_t c0;

	fixture_make(&f, slots, seed);
	memset(m, 0, sizeof(m));
	m[0] = f.m0;

	/* dry run: how many operations of this kind does the victim do */
	fd = fixture_dev(&f);
	ck_assert_int_eq(arb_vol_open(fd, &small_cache, &vol), 0);
	c0 = arb_dev_fault_count(fd, kind);
	ck_assert_int_eq(victim(vol, m, seed + 1, nops, &ph, &round), 0);
	total = arb_dev_fault_count(fd, kind) - c0;
	ck_assert_int_eq(arb_vol_close(vol), 0);
	arb_dev_destroy(fd);
	models_free(m);
	ck_assert_uint_gt(total, 0);
	step = total > max_trials ? (total + max_trials - 1) / max_trials : 1;
	fprintf(stderr, "%s faults: the victim does %llu, trying every %llu\n",
		kind_name(kind), (unsigned long long)total,
		(unsigned long long)step);

	for (uint64_t n = 1; n <= total; n += step) {
		bool sticky = (n / step) % 2;
		char what[96];
		int ret, ret2;
		struct arb_txn *t;

		snprintf(what, sizeof(what), "%s fault at %llu%s",
			 kind_name(kind), (unsigned long long)n,
			 sticky ? " (sticky)" : "");
		s.trials++;
		fd = fixture_dev(&f);
		ck_assert_int_eq(arb_vol_open(fd, &small_cache, &vol), 0);
		arb_dev_fault_arm(fd, kind, n, -EIO, sticky);
		ret = victim(vol, m, seed + 1, nops, &ph, &round);
		s.by_phase[ph]++;
		if (ret == 0 && kind == ARB_FAULT_READ && !sticky &&
		    vol->nr_healed > 0 && vol->nr_unrecoverable == 0) {
			/* the second copy answered the failed read */
			s.healed++;
		} else if (ret == 0) {
			/* the victim is deterministic: the n-th operation
			 * happened and failed, and nobody said so */
			trial_fail(&s, "%s: the victim saw no error", what);
		} else if (ret != -EIO) {
			trial_fail(&s, "%s: error %d in phase %d, not -EIO", what,
				   ret, ph);
		} else {
			s.errors_seen++;
		}
		if (ret && ph == PH_COMMIT && kind != ARB_FAULT_READ) {
			/* a failed write of a commit: nothing more is taken */
			ret2 = arb_txn_begin(vol, &t);
			if (ret2 == 0) {
				trial_fail(&s, "%s: transaction begins after a "
					       "failed commit", what);
				arb_txn_end(t);
			}
		}
		arb_dev_fault_disarm(fd);
		if (ret && !sticky && kind == ARB_FAULT_READ &&
		    ph != PH_LOOKUP && !vol->fatal_error) {
			/* the abort brought the volume back to the last
			 * commit */
			struct arb_root *r;
			char why[256] = "";
			ret2 = arb_root_get(vol, TREE, &r);
			if (!ret2)
				ret2 = tm_compare(r, &m[round - 1], why,
						  sizeof(why));
			if (ret2)
				trial_fail(&s, "%s: after abort the tree is not "
					       "M0: %d %s",
					   what, ret2, why);
		}
		if (ret && ph == PH_LOOKUP && !sticky) {
			/* a failed read poisons nothing: read it all again */
			struct arb_root *r;
			char why[256] = "";
			ret2 = arb_root_get(vol, TREE, &r);
			if (!ret2)
				ret2 = tm_compare(r, &m[ROUNDS], why,
						  sizeof(why));
			if (ret2)
				trial_fail(&s, "%s: after a failed lookup the "
					       "tree reads %d %s",
					   what, ret2, why);
		}
		arb_vol_close(vol); /* may report the error again: fine */
		/* the durable state: the last commit that returned 0, or,
		 * when only its final flush failed, maybe the failed one */
		{
			struct arb_super sb;
			int slot;
			int done = ph >= PH_LOOKUP ? ROUNDS : round - 1;
			ret2 = arb_read_super(fd, &sb, &slot, NULL);
			if (ret2) {
				trial_fail(&s, "%s: no superblock: %d", what,
					   ret2);
			} else {
				uint64_t g = arb_super_s_generation(&sb);
				if (g == f.gen0 + done + 1 && ph == PH_COMMIT &&
				    kind == ARB_FAULT_FLUSH) {
					done++;
					s.new_gen++;
				} else if (g != f.gen0 + done) {
					trial_fail(&s, "%s: generation %llu, "
						       "expected %llu",
						   what, (unsigned long long)g,
						   (unsigned long long)(f.gen0 +
									done));
				}
				expect_state(&s, fd, &m[done], what);
			}
		}
		arb_dev_destroy(fd);
		models_free(m);
	}
	fprintf(stderr,
		"%s faults: %llu trials, %llu errors returned (ops %llu, commit "
		"%llu, lookup %llu, none %llu), %llu new generations after a "
		"failed final flush, %llu healed from the second copy, %llu "
		"failures\n",
		kind_name(kind), (unsigned long long)s.trials,
		(unsigned long long)s.errors_seen,
		(unsigned long long)s.by_phase[PH_OPS],
		(unsigned long long)s.by_phase[PH_COMMIT],
		(unsigned long long)s.by_phase[PH_LOOKUP],
		(unsigned long long)s.by_phase[PH_DONE],
		(unsigned long long)s.new_gen, (unsigned long long)s.healed,
		(unsigned long long)s.failures);
	ck_assert_msg(s.failures == 0, "%llu failures; first: %s",
		      (unsigned long long)s.failures, s.first);
	free(f.image);
	tm_free(&f.m0);
}

START_TEST(test_fault_write)
{
	do_faults(ARB_FAULT_WRITE, TU_SCALE(20000, 60000), TU_SCALE(150, 3000),
		  TU_SCALE(200, 100000));
}
END_TEST

START_TEST(test_fault_flush)
{
	do_faults(ARB_FAULT_FLUSH, TU_SCALE(20000, 60000), TU_SCALE(150, 3000),
		  TU_SCALE(200, 100000));
}
END_TEST

START_TEST(test_fault_read)
{
	do_faults(ARB_FAULT_READ, TU_SCALE(20000, 60000), TU_SCALE(150, 3000),
		  TU_SCALE(250, 100000));
}
END_TEST

/* Read errors while opening: a clean failure, or a volume that works. */
START_TEST(test_fault_open)
{
	struct fixture f;
	uint64_t seed = tu_seed("open faults"), total, c0, bad = 0, healed = 0;
	struct arb_dev *fd;
	struct arb_vol *vol;
	struct stats s = { 0 };

	fixture_make(&f, TU_SCALE(3000, 20000), seed);
	fd = fixture_dev(&f);
	c0 = arb_dev_fault_count(fd, ARB_FAULT_READ);
	ck_assert_int_eq(arb_vol_open(fd, &small_cache, &vol), 0);
	total = arb_dev_fault_count(fd, ARB_FAULT_READ) - c0;
	ck_assert_int_eq(arb_vol_close(vol), 0);
	arb_dev_destroy(fd);
	for (uint64_t n = 1; n <= total + 1; n++) {
		int ret;
		fd = fixture_dev(&f);
		arb_dev_fault_arm(fd, ARB_FAULT_READ, n, -EIO, n % 2);
		ret = arb_vol_open(fd, &small_cache, &vol);
		if (ret == 0) {
			/* the n-th read happened in open: only a node read
			 * that the second copy answered may go unnoticed */
			if (n <= total && n % 2 == 0 && vol->nr_healed > 0)
				healed++;
			else if (n <= total)
				bad++;
			arb_vol_close(vol);
		} else if (ret != -EIO) {
			bad++;
		}
		arb_dev_fault_disarm(fd);
		expect_state(&s, fd, &f.m0, "open fault");
		arb_dev_destroy(fd);
	}
	fprintf(stderr, "open faults: %llu reads in open, %llu healed, %llu "
		"wrong results\n", (unsigned long long)total,
		(unsigned long long)healed, (unsigned long long)bad);
	ck_assert_uint_eq(bad, 0);
	ck_assert_msg(s.failures == 0, "%s", s.first);
	free(f.image);
	tm_free(&f.m0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("fault");
	TCase *tc;

	tc = tcase_create("commit");
	tcase_set_timeout(tc, 1200);
	tcase_add_test(tc, test_fault_write);
	tcase_add_test(tc, test_fault_flush);
	tcase_add_test(tc, test_fault_read);
	suite_add_tcase(s, tc);

	tc = tcase_create("open");
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_fault_open);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
