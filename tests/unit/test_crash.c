/* SPDX-License-Identifier: MIT */
/*
 * test_crash.c - crash safety, with the write-logging device.
 *
 * A random workload (inserts, deletes, updates of test items and file
 * extents over a few trees, a tree dropped and cloned again now and then)
 * runs on a volume whose device records every write and flush.  After each
 * commit returns, the models of every tree are saved under the new
 * generation, with the log position at which the commit started and
 * returned.  Then the disk is rebuilt as a crash could leave it at many
 * points of the log -- every flush (and just after it) as a clean prefix,
 * and random points where the unflushed writes are dropped, reordered or
 * torn -- and each image must:
 *   - open, and pass the checker;
 *   - be at a committed generation G, no older than the last commit that
 *     had returned before the crash point and no newer than the last that
 *     had started;
 *   - hold exactly the trees of G's saved models;
 *   - and (every few points) take a new commit cleanly: the free space it
 *     rebuilt does not hand out blocks the recovered trees use.
 */
#include <stdarg.h>

#include "arbor/arbor.h"
#include "tu_model.h"

#define NTREES 3
#define BASE_ID 300ULL

struct state {
	uint64_t gen;
	/* log length when the commit started / when it returned */
	size_t start, end;
	bool exists[NTREES];
	struct tmodel m[NTREES];
};

struct run {
	struct state *st;
	size_t nr_st, cap_st;
	struct arb_dev *log;
	uint64_t points, failures, writes_after;
	char first_failure[512];
};

static void save_state(struct run *r, uint64_t gen, size_t start, size_t end,
		       const bool *exists, const struct tmodel *m)
{
	struct state *s;

	if (r->nr_st == r->cap_st) {
		r->cap_st = r->cap_st ? r->cap_st * 2 : 64;
		r->st = realloc(r->st, r->cap_st * sizeof(*r->st));
		ck_assert_ptr_nonnull(r->st);
	}
	s = &r->st[r->nr_st++];
	memset(s, 0, sizeof(*s));
	s->gen = gen;
	s->start = start;
	s->end = end;
	for (int j = 0; j < NTREES; j++) {
		s->exists[j] = exists[j];
		if (exists[j])
			tm_copy(&s->m[j], &m[j], m[j].id);
	}
}

static void workload(struct run *r, uint64_t *rng, uint64_t nops,
		     uint64_t commit_every, size_t slots)
{
	struct arb_dev *mem;
	struct arb_vol *vol;
	struct arb_txn *t;
	struct arb_format_opts fo = { 0 };
	struct tmodel m[NTREES] = { 0 };
	bool exists[NTREES] = { false };
	struct tm_opts o = { 120, 12 };
	size_t start;

	fo.nodesize = 4096;
	ck_assert_int_eq(arb_dev_open_mem((uint64_t)TU_SCALE(16, 64) << 20, &mem), 0);
	ck_assert_int_eq(arb_vol_format(mem, &fo), 0);
	ck_assert_int_eq(arb_dev_log_wrap(mem, &r->log), 0);
	ck_assert_int_eq(arb_vol_open(r->log, NULL, &vol), 0);
	/* the formatted image: generation 1, no test trees */
	save_state(r, vol->generation, 0, 0, exists, m);

	ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
	for (int j = 0; j < NTREES; j++) {
		struct arb_root *root;
		ck_assert_int_eq(arb_root_create(t, BASE_ID + j, &root), 0);
		tm_init(&m[j], BASE_ID + j, slots);
		exists[j] = true;
	}
	for (uint64_t op = 0; op < nops; op++) {
		struct arb_root *root;
		int j;

		if (tu_rand_range(rng, 400) == 0) {
			/* the last tree goes, or comes back as a clone */
			if (exists[NTREES - 1]) {
				ck_assert_int_eq(arb_root_get(vol, m[NTREES - 1].id,
							      &root), 0);
				ck_assert_int_eq(arb_root_drop(t, root), 0);
				tm_free(&m[NTREES - 1]);
				exists[NTREES - 1] = false;
			} else {
				struct arb_root *src, *nr;
				ck_assert_int_eq(arb_root_get(vol, BASE_ID, &src),
						 0);
				ck_assert_int_eq(arb_root_clone(t, src,
								m[0].id + NTREES - 1,
								&nr),
						 0);
				tm_copy(&m[NTREES - 1], &m[0],
					m[0].id + NTREES - 1);
				exists[NTREES - 1] = true;
			}
		}
		do
			j = (int)tu_rand_range(rng, NTREES);
		while (!exists[j]);
		ck_assert_int_eq(arb_root_get(vol, m[j].id, &root), 0);
		ck_assert_int_eq(tm_op(t, root, &m[j], rng, &o, SIZE_MAX), 0);
		if (tu_rand_range(rng, commit_every) == 0 || op + 1 == nops) {
			start = arb_dev_log_len(r->log);
			ck_assert_int_eq(arb_txn_commit(t), 0);
			save_state(r, vol->generation, start,
				   arb_dev_log_len(r->log), exists, m);
			if (op + 1 < nops)
				ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
		}
	}
	tu_vol_check(vol);
	ck_assert_int_eq(arb_vol_close(vol), 0);
	for (int j = 0; j < NTREES; j++)
		if (exists[j])
			tm_free(&m[j]);
}

static void point_fail(struct run *r, size_t n, int mode, uint64_t seed,
		 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void point_fail(struct run *r, size_t n, int mode, uint64_t seed,
		 const char *fmt, ...)
{
	char msg[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "crash point %zu mode %d seed %llu: %s\n", n, mode,
		(unsigned long long)seed, msg);
	if (!r->failures++)
		snprintf(r->first_failure, sizeof(r->first_failure),
			 "crash point %zu mode %d seed %llu: %s", n, mode,
			 (unsigned long long)seed, msg);
}

/* Rebuild the disk at log entry n and hold it against the saved states. */
static void check_point(struct run *r, size_t n, enum arb_replay_mode mode,
			uint64_t seed, bool write_after)
{
	struct arb_dev *dev;
	struct arb_vol *vol;
	struct arb_check_report rep = { 0 };
	const struct state *s = NULL;
	uint64_t lo = r->st[0].gen, hi = r->st[0].gen;
	char why[256];
	int ret;

	r->points++;
	for (size_t i = 0; i < r->nr_st; i++) {
		if (r->st[i].end && r->st[i].end <= n)
			lo = r->st[i].gen;
		if (r->st[i].end && r->st[i].start < n)
			hi = r->st[i].gen;
	}
	ret = arb_dev_log_replay(r->log, n, mode, seed, &dev);
	ck_assert_int_eq(ret, 0);
	ret = arb_vol_open(dev, NULL, &vol);
	if (ret) {
		point_fail(r, n, mode, seed, "open failed: %d", ret);
		arb_dev_destroy(dev);
		return;
	}
	ret = arb_check_vol(vol, &rep);
	if (ret)
		point_fail(r, n, mode, seed, "checker: %d, %llu problems", ret,
		     (unsigned long long)rep.errors);
	for (size_t i = 0; i < r->nr_st; i++)
		if (r->st[i].gen == vol->generation)
			s = &r->st[i];
	if (!s || vol->generation < lo || vol->generation > hi) {
		point_fail(r, n, mode, seed,
		     "generation %llu, expected a committed one in [%llu, %llu]",
		     (unsigned long long)vol->generation,
		     (unsigned long long)lo, (unsigned long long)hi);
		goto out;
	}
	for (int j = 0; j < NTREES; j++) {
		struct arb_root *root;
		ret = arb_root_get(vol, BASE_ID + j, &root);
		if (!s->exists[j]) {
			if (ret != -ENOENT)
				point_fail(r, n, mode, seed,
				     "gen %llu: tree %llu should not exist (%d)",
				     (unsigned long long)s->gen,
				     (unsigned long long)BASE_ID + j, ret);
			continue;
		}
		if (ret) {
			point_fail(r, n, mode, seed, "gen %llu: tree %llu: %d",
			     (unsigned long long)s->gen,
			     (unsigned long long)BASE_ID + j, ret);
			continue;
		}
		ret = tm_compare(root, &s->m[j], why, sizeof(why));
		if (ret)
			point_fail(r, n, mode, seed, "gen %llu: %d %s",
			     (unsigned long long)s->gen, ret, why);
	}
	if (write_after && s->exists[0]) {
		/* the recovered volume takes new commits */
		struct tmodel m;
		struct tm_opts o = { 120, 30 };
		struct arb_txn *t;
		struct arb_root *root;
		uint64_t rng = seed | 1;

		r->writes_after++;
		tm_copy(&m, &s->m[0], s->m[0].id);
		ret = arb_txn_begin(vol, &t);
		if (!ret)
			ret = arb_root_get(vol, m.id, &root);
		for (int i = 0; i < 40 && !ret; i++)
			ret = tm_op(t, root, &m, &rng, &o, SIZE_MAX);
		if (!ret)
			ret = arb_txn_commit(t);
		if (!ret)
			ret = tm_compare(root, &m, why, sizeof(why));
		rep.errors = 0;
		if (!ret)
			ret = arb_check_vol(vol, &rep);
		if (ret)
			point_fail(r, n, mode, seed,
			     "gen %llu: writing after recovery: %d (%s)",
			     (unsigned long long)s->gen, ret, why);
		tm_free(&m);
	}
out:
	ret = arb_vol_close(vol);
	if (ret)
		point_fail(r, n, mode, seed, "close: %d", ret);
	arb_dev_destroy(dev);
}

/* Openings that passed over a one-flush commit cut short (lib/core/txn.c). */
static uint64_t nr_cut_short;

static void count_sink(int level, const char *msg)
{
	if (strstr(msg, "did not reach the disk whole"))
		nr_cut_short++;
	else if (level <= ARB_LOG_WARN)
		fprintf(stderr, "arborfs: %s\n", msg);
}

static void do_crash(uint64_t nops, uint64_t commit_every, size_t slots,
		     uint64_t nrandom)
{
	struct run r = { 0 };
	uint64_t rng = tu_seed("crash"), nflush;
	size_t len, *fl;

	arb_log_level = ARB_LOG_INFO;
	arb_log_set_sink(count_sink);
	workload(&r, &rng, nops, commit_every, slots);
	len = arb_dev_log_len(r.log);
	nflush = arb_dev_log_flushes(r.log, NULL, 0);
	fl = calloc(nflush + 1, sizeof(*fl));
	ck_assert_ptr_nonnull(fl);
	ck_assert_uint_eq(arb_dev_log_flushes(r.log, fl, nflush), nflush);
	fprintf(stderr, "crash: %zu commits, %zu log entries, %llu flushes\n",
		r.nr_st - 1, len, (unsigned long long)nflush);

	/* every flush point, clean prefix: at it, and one past it */
	for (size_t i = 0; i < nflush; i++)
		for (size_t d = 0; d < 2; d++)
			if (fl[i] + d <= len)
				check_point(&r, fl[i] + d, ARB_REPLAY_PREFIX, 0,
					    i % 4 == 0 && d == 1);
	check_point(&r, 0, ARB_REPLAY_PREFIX, 0, true);
	check_point(&r, len, ARB_REPLAY_PREFIX, 0, true);
	/* random points, unflushed writes dropped / reordered and torn */
	for (uint64_t i = 0; i < nrandom; i++) {
		size_t n = (size_t)tu_rand_range(&rng, len + 1);
		uint64_t seed = tu_rand(&rng);
		check_point(&r, n, i % 2 ? ARB_REPLAY_REORDER_TEAR
					 : ARB_REPLAY_DROP,
			    seed, i % 8 == 0);
	}
	/* and the points right before each commit's last flush, where the
	 * new superblock may or may not be there, torn */
	for (size_t i = 1; i < r.nr_st; i++) {
		size_t e = r.st[i].end;
		if (e >= 1)
			check_point(&r, e - 1, ARB_REPLAY_REORDER_TEAR,
				    tu_rand(&rng), false);
	}
	fprintf(stderr,
		"crash: checked %llu replay points (%llu with a commit after "
		"recovery, %llu past a one-flush commit cut short), %llu "
		"failures\n",
		(unsigned long long)r.points,
		(unsigned long long)r.writes_after,
		(unsigned long long)nr_cut_short,
		(unsigned long long)r.failures);
	/* the points before each last flush do cut one-flush commits short */
	ck_assert_uint_gt(nr_cut_short, 0);
	arb_log_set_sink(NULL);
	ck_assert_msg(r.failures == 0, "%llu of %llu crash points failed; first: %s",
		      (unsigned long long)r.failures,
		      (unsigned long long)r.points, r.first_failure);
	arb_dev_destroy(r.log);
	for (size_t i = 0; i < r.nr_st; i++)
		for (int j = 0; j < NTREES; j++)
			if (r.st[i].exists[j])
				tm_free(&r.st[i].m[j]);
	free(r.st);
	free(fl);
}

START_TEST(test_crash_random)
{
	do_crash(TU_SCALE(5000, 60000), TU_SCALE(120, 400), 2000,
		 TU_SCALE(300, 10000));
}
END_TEST

/* Many small commits: every flush point is close to the next commit. */
START_TEST(test_crash_small_commits)
{
	do_crash(TU_SCALE(600, 6000), 8, 400, TU_SCALE(150, 3000));
}
END_TEST

/* A copy of mem's bytes as a new memory device, with one byte flipped at
 * flip (UINT64_MAX: none); returns the newest generation it opens at and
 * whether that superblock carries a commit record. */
static uint64_t newest_gen(struct arb_dev *mem, uint64_t flip, bool *record)
{
	struct arb_dev *d;
	struct arb_super sb;
	const char *why = NULL;
	int slot;

	ck_assert_int_eq(arb_dev_open_mem(mem->size, &d), 0);
	memcpy(arb_dev_mem_data(d), arb_dev_mem_data(mem), mem->size);
	if (flip != UINT64_MAX)
		arb_dev_mem_data(d)[flip] ^= 0x40;
	ck_assert_int_eq(arb_read_super(d, &sb, &slot, &why), 0);
	*record = arb_super_s_commit_nr(&sb) != 0;
	arb_dev_destroy(d);
	return arb_super_s_generation(&sb);
}

/*
 * The commit record of a one-flush commit, directly: a commit that wrote
 * little lists its ranges in the superblock instead of flushing before it;
 * a listed range that does not read back makes opening take the previous
 * generation; closing writes the same generation without a record, after
 * which a bad range is no reason to go back.
 */
START_TEST(test_commit_record)
{
	struct arb_format_opts fo = { 0 };
	struct tm_opts o = { 120, 12 };
	struct tmodel m = { 0 };
	uint64_t rng = tu_seed("commit record"), g, off;
	struct arb_dev *mem;
	struct arb_vol *vol;
	struct arb_root *root;
	struct arb_txn *t;
	struct arb_super sb;
	bool rec;

	fo.nodesize = 4096;
	ck_assert_int_eq(arb_dev_open_mem(16ULL << 20, &mem), 0);
	ck_assert_int_eq(arb_vol_format(mem, &fo), 0);
	ck_assert_int_eq(arb_vol_open(mem, NULL, &vol), 0);
	tm_init(&m, BASE_ID, 64);
	for (int c = 0; c < 3; c++) {
		ck_assert_int_eq(arb_txn_begin(vol, &t), 0);
		if (c == 0)
			ck_assert_int_eq(arb_root_create(t, BASE_ID, &root), 0);
		ck_assert_int_eq(arb_root_get(vol, BASE_ID, &root), 0);
		for (int i = 0; i < 30; i++)
			ck_assert_int_eq(tm_op(t, root, &m, &rng, &o, SIZE_MAX), 0);
		ck_assert_int_eq(arb_txn_commit(t), 0);
	}
	/* the first commit after opening flushed twice (what was written
	 * before tracking began is unknown); the later two once */
	ck_assert_uint_eq(vol->nr_commits, 3);
	ck_assert_uint_eq(vol->nr_two_flush, 1);
	g = vol->generation;
	memcpy(&sb, arb_dev_mem_data(mem) + (g % 2 ? ARB_SUPER_OFFSET1
						  : ARB_SUPER_OFFSET0),
	       sizeof(sb));
	ck_assert_uint_eq(arb_super_s_generation(&sb), g);
	ck_assert_uint_gt(arb_super_s_commit_nr(&sb), 0);
	ck_assert(arb_super_s_incompat(&sb) & ARB_INCOMPAT_COMMIT_RECORD);
	off = arb_commit_rec_bytenr(&sb.s_commit[0]) +
	      arb_commit_rec_len(&sb.s_commit[0]) / 2;

	/* as the disk is: generation g; a listed range not as written
	 * (the commit cut short by a crash): generation g - 1 */
	ck_assert_uint_eq(newest_gen(mem, UINT64_MAX, &rec), g);
	ck_assert(rec);
	ck_assert_uint_eq(newest_gen(mem, off, &rec), g - 1);
	/* the checksum of the superblock itself still guards the record */
	ck_assert_uint_eq(newest_gen(mem, (g % 2 ? ARB_SUPER_OFFSET1
						 : ARB_SUPER_OFFSET0) + 430,
				     &rec), g - 1);

	/* a record that breaks its limits makes its superblock invalid
	 * (checked before any range is read): too many entries, a range
	 * past the end, two ranges overlapping */
	for (int bad = 0; bad < 3; bad++) {
		uint64_t soff = g % 2 ? ARB_SUPER_OFFSET1 : ARB_SUPER_OFFSET0;
		struct arb_super b = sb;
		struct arb_dev *d;
		const char *why = NULL;
		struct arb_super out;
		int slot;

		if (bad == 0)
			arb_set_super_s_commit_nr(&b, ARB_COMMIT_REC_MAX + 1);
		else if (bad == 1)
			arb_set_commit_rec_bytenr(&b.s_commit[0], 16ULL << 20);
		else {
			arb_set_super_s_commit_nr(&b, 2);
			b.s_commit[1] = b.s_commit[0];
		}
		arb_csum_block(ARB_CSUM_CRC32C, &b, sizeof(b), b.s_csum);
		ck_assert_int_eq(arb_dev_open_mem(mem->size, &d), 0);
		memcpy(arb_dev_mem_data(d), arb_dev_mem_data(mem), mem->size);
		memcpy(arb_dev_mem_data(d) + soff, &b, sizeof(b));
		ck_assert_int_eq(arb_read_super(d, &out, &slot, &why), 0);
		ck_assert_uint_eq(arb_super_s_generation(&out), g - 1);
		arb_dev_destroy(d);
	}

	/* closed: both slots hold g, the one without a record is used, and
	 * the same bad range no longer sends opening back */
	tu_vol_check(vol);
	ck_assert_int_eq(arb_vol_close(vol), 0);
	ck_assert_uint_eq(newest_gen(mem, UINT64_MAX, &rec), g);
	ck_assert(!rec);
	ck_assert_uint_eq(newest_gen(mem, off, &rec), g);
	ck_assert(!rec);
	ck_assert_int_eq(arb_vol_open(mem, NULL, &vol), 0);
	ck_assert_int_eq(arb_root_get(vol, BASE_ID, &root), 0);
	{
		char why[256] = "";
		ck_assert_msg(tm_compare(root, &m, why, sizeof(why)) == 0, "%s",
			      why);
	}
	ck_assert_int_eq(arb_vol_close(vol), 0);
	tm_free(&m);
	arb_dev_destroy(mem);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("crash");
	TCase *tc;

	tc = tcase_create("replay");
	tcase_set_timeout(tc, 1200);
	tcase_add_test(tc, test_crash_random);
	tcase_add_test(tc, test_crash_small_commits);
	tcase_add_test(tc, test_commit_record);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
