/* SPDX-License-Identifier: MIT */
/*
 * test_history.c - back in time: the history of recent generations in the
 * superblock (lib/core/history.c), the grace that keeps their freed blocks
 * (lib/core/alloc.c), opening an older generation read-only
 * (arb_fs_opts.generation), and what happens under space pressure and
 * after a writer that did not keep the blocks.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arbor/arbor.h"
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

static void check_clean(struct arb_fs *f)
{
	int ret = arb_fs_check(f, stderr);

	ck_assert_msg(ret == 0, "arb_fs_check: %d", ret);
}

static void new_image(uint64_t size)
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

static void teardown(void)
{
	if (fs) {
		check_clean(fs);
		ck_assert_int_eq(arb_fs_close(fs), 0);
		fs = NULL;
	}
	arb_dev_destroy(mem);
	mem = NULL;
}

static void close_fs(void)
{
	check_clean(fs);
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs = NULL;
}

/* open generation gen read-only; returns the error, *out on success */
static int open_gen(uint64_t gen, struct arb_fs **out, const char **why)
{
	struct arb_fs_opts o = fopts;
	struct arb_dev *d = tu_dev_borrow(mem);
	int ret;

	o.readonly = true;
	o.generation = gen;
	*why = NULL;
	ret = arb_fs_open(d, &o, out, why);
	if (ret)
		arb_dev_destroy(d);
	return ret;
}

static uint64_t commit(struct arb_fs *f)
{
	uint64_t g;

	ck_assert_int_eq(arb_fs_commit(f, &g), 0);
	return g;
}

static uint64_t mkfile(struct arb_fs *f, uint64_t dir, const char *name,
		       size_t len, unsigned seed)
{
	struct arb_stat st;
	char *buf = malloc(len ? len : 1);
	int ret = arb_fs_mknod(f, dir, name, S_IFREG | 0644, 0, &cred, &st);

	ck_assert_msg(ret == 0, "mknod %s: %d", name, ret);
	for (size_t i = 0; i < len; i++)
		buf[i] = (char)(seed * 31 + i * 7 + i / 4096);
	if (len)
		ck_assert_int_eq(arb_fs_write(f, st.ino, buf, len, 0),
				 (ssize_t)len);
	free(buf);
	return st.ino;
}

static void expect_file(struct arb_fs *f, uint64_t dir, const char *name,
			size_t len, unsigned seed)
{
	struct arb_stat st;
	char *buf = malloc(len + 1);
	ssize_t n;

	ck_assert_msg(arb_fs_lookup(f, dir, name, &st) == 0, "lookup %s",
		      name);
	ck_assert_uint_eq(st.size, len);
	n = arb_fs_read(f, st.ino, buf, len + 1, 0);
	ck_assert_int_eq(n, (ssize_t)len);
	/* one assertion, not one per byte (each costs Check a write) */
	for (size_t i = 0; i < len; i++) {
		if (buf[i] != (char)(seed * 31 + i * 7 + i / 4096)) {
			free(buf);
			ck_abort_msg("%s: byte %zu differs", name, i);
		}
	}
	free(buf);
}

static bool listed(struct arb_fs *f, uint64_t gen)
{
	struct arb_history_info h[ARB_FS_HISTORY_MAX];
	int n = arb_fs_history(f, h, ARB_FS_HISTORY_MAX);

	ck_assert_int_gt(n, 0);
	for (int i = 0; i < n && i < ARB_FS_HISTORY_MAX; i++)
		if (h[i].generation == gen)
			return true;
	return false;
}

/* a directory of files, committed; returns that generation */
static uint64_t make_tree(uint64_t *dir, int files, size_t len)
{
	struct arb_stat st;
	char name[32];

	ck_assert_int_eq(arb_fs_mkdir(fs, ROOT, "precious", 0755, &cred, &st),
			 0);
	*dir = st.ino;
	for (int i = 0; i < files; i++) {
		snprintf(name, sizeof(name), "f%03d", i);
		mkfile(fs, st.ino, name, len + (size_t)i * 1000, (unsigned)i);
	}
	return commit(fs);
}

static void remove_tree(uint64_t dir, int files)
{
	char name[32];

	for (int i = 0; i < files; i++) {
		snprintf(name, sizeof(name), "f%03d", i);
		ck_assert_int_eq(arb_fs_unlink(fs, dir, name), 0);
	}
	ck_assert_int_eq(arb_fs_rmdir(fs, ROOT, "precious"), 0);
}

static void expect_tree(struct arb_fs *f, int files, size_t len)
{
	struct arb_stat st;
	char name[32];

	ck_assert_int_eq(arb_fs_lookup(f, ROOT, "precious", &st), 0);
	for (int i = 0; i < files; i++) {
		snprintf(name, sizeof(name), "f%03d", i);
		expect_file(f, st.ino, name, len + (size_t)i * 1000,
			    (unsigned)i);
	}
}

/* Deleted and committed over: the generation before opens as it was. */
START_TEST(test_back_in_time)
{
	struct arb_fs *old;
	struct arb_fs_usage u;
	const char *why;
	uint64_t dir, g, g2;
	int files = 40;

	new_image(256 * MiB);
	g = make_tree(&dir, files, 20000);
	remove_tree(dir, files);
	g2 = commit(fs);
	/* more commits, each freeing what the one before wrote */
	for (int i = 0; i < 4; i++) {
		mkfile(fs, ROOT, i % 2 ? "b" : "a", 100000, 99);
		ck_assert_int_eq(arb_fs_unlink(fs, ROOT, i % 2 ? "a" : "b"),
				 i ? 0 : -ENOENT);
		commit(fs);
	}
	ck_assert(listed(fs, g));
	ck_assert(listed(fs, g2));
	ck_assert_int_eq(arb_fs_usage(fs, &u), 0);
	/* the files' data at least (40 x 20-59 kB) */
	ck_assert_uint_ge(u.history, 40 * 20000);
	close_fs();

	ck_assert_int_eq(open_gen(g, &old, &why), 0);
	expect_tree(old, files, 20000);
	check_clean(old);
	/* read-only, and only that generation */
	ck_assert_int_eq(arb_fs_mkdir(old, ROOT, "x", 0755, &cred, NULL),
			 -EROFS);
	{
		struct arb_history_info h[4];

		ck_assert_int_eq(arb_fs_history(old, h, 4), 1);
		ck_assert_uint_eq(h[0].generation, g);
		ck_assert_int_gt(h[0].time.tv_sec, 0);
	}
	ck_assert_int_eq(arb_fs_close(old), 0);

	/* the newest is there too, without the directory */
	fs_open_now();
	{
		struct arb_stat st;

		ck_assert_int_eq(arb_fs_lookup(fs, ROOT, "precious", &st),
				 -ENOENT);
	}
}
END_TEST

/*
 * The grace survives unmount: a writable open finds again what the listed
 * generations need (arb_history_regrace), so new writes after a remount
 * go elsewhere.  Without it the data cursor, which starts at the same
 * place at every open, would write over the deleted files first.
 */
START_TEST(test_survives_remount)
{
	struct arb_fs *old;
	struct arb_fs_usage u;
	const char *why;
	uint64_t dir, g;
	int files = 16;

	new_image(128 * MiB);
	g = make_tree(&dir, files, 1000 * 1000);
	remove_tree(dir, files);
	commit(fs);
	close_fs();

	fs_open_now();
	ck_assert(listed(fs, g));
	ck_assert_int_eq(arb_fs_usage(fs, &u), 0);
	ck_assert_uint_ge(u.history, (uint64_t)files * 1000 * 1000);
	/* new data, as much as the deleted files took and more */
	for (int i = 0; i < 40; i++) {
		char name[32];

		snprintf(name, sizeof(name), "new%02d", i);
		mkfile(fs, ROOT, name, 1000 * 1000, 1000 + (unsigned)i);
		if (i % 8 == 7)
			commit(fs);
	}
	commit(fs);
	ck_assert(listed(fs, g));
	close_fs();

	ck_assert_int_eq(open_gen(g, &old, &why), 0);
	expect_tree(old, files, 1000 * 1000);
	check_clean(old);
	ck_assert_int_eq(arb_fs_close(old), 0);
	fs_open_now();
	expect_file(fs, ROOT, "new39", 1000 * 1000, 1039);
}
END_TEST

/* Clear refusals: not listed, never committed, writable. */
START_TEST(test_refusals)
{
	struct arb_fs *old;
	struct arb_fs_opts o;
	struct arb_dev *d;
	const char *why;
	uint64_t dir, g;
	int ret;

	new_image(64 * MiB);
	g = make_tree(&dir, 2, 1000);
	close_fs();
	ret = open_gen(g + 5, &old, &why);
	ck_assert_int_eq(ret, -ENOENT);
	ck_assert_ptr_nonnull(why);
	ck_assert_ptr_nonnull(strstr(why, "never committed"));
	/* generation 1 (mkfs) was never listed */
	ret = open_gen(1, &old, &why);
	ck_assert_int_eq(ret, -ENOENT);
	ck_assert_ptr_nonnull(strstr(why, "not in the history"));
	o = fopts;
	o.generation = g;
	d = tu_dev_borrow(mem);
	ret = arb_fs_open(d, &o, &old, &why);
	arb_dev_destroy(d);
	ck_assert_int_eq(ret, -EROFS);
	/* the newest by its number: an ordinary read-only open */
	ck_assert_int_eq(open_gen(g, &old, &why), 0);
	expect_tree(old, 2, 1000);
	ck_assert_int_eq(arb_fs_close(old), 0);
	fs_open_now();
}
END_TEST

/* Expiry: past both the commits and the seconds, a generation goes, and
 * the blocks it kept come back. */
START_TEST(test_expiry)
{
	struct arb_fs_usage u;
	uint64_t dir, g;

	new_image(64 * MiB);
	close_fs();
	fopts.history_secs = 0;
	fopts.history_commits = 3;
	fs_open_now();
	g = make_tree(&dir, 10, 30000);
	remove_tree(dir, 10);
	commit(fs);
	ck_assert(listed(fs, g));
	ck_assert_int_eq(arb_fs_usage(fs, &u), 0);
	ck_assert_uint_ge(u.history, 10 * 30000);
	for (int i = 0; i < 3; i++) {
		char name[8];

		snprintf(name, sizeof(name), "e%d", i);
		mkfile(fs, ROOT, name, 10, 1);
		commit(fs);
	}
	ck_assert(!listed(fs, g));
	ck_assert_int_eq(arb_fs_usage(fs, &u), 0);
	ck_assert_uint_lt(u.history, 10 * 30000);

	/* no history at all: nothing kept, only the newest listed */
	close_fs();
	fopts.history_commits = 0;
	fs_open_now();
	mkfile(fs, ROOT, "c", 100000, 1);
	commit(fs);
	ck_assert_int_eq(arb_fs_unlink(fs, ROOT, "c"), 0);
	commit(fs);
	ck_assert_int_eq(arb_fs_usage(fs, &u), 0);
	ck_assert_uint_eq(u.history, 0);
	{
		struct arb_history_info h[4];

		ck_assert_int_eq(arb_fs_history(fs, h, 4), 1);
	}
}
END_TEST

/*
 * A full image: the grace never causes ENOSPC.  Fill half, delete it
 * (the history keeps it), then write until ENOSPC: nearly the whole image
 * is written, the generation before the delete leaves the history, and
 * opening it is refused.
 */
START_TEST(test_space_pressure)
{
	struct arb_fs *old;
	struct arb_fs_usage u;
	const char *why;
	uint64_t dir, g, written = 0, avail0;
	char name[32];
	char *buf;
	size_t chunk = 256 * 1024;
	int ret = 0;

	new_image(64 * MiB);
	ck_assert_int_eq(arb_fs_usage(fs, &u), 0);
	avail0 = u.available;
	g = make_tree(&dir, 24, 1000 * 1000);
	remove_tree(dir, 24);
	commit(fs);
	ck_assert(listed(fs, g));
	ck_assert_int_eq(arb_fs_usage(fs, &u), 0);
	ck_assert_uint_ge(u.history, 24 * 1000 * 1000);
	/* df does not count it as used */
	ck_assert_uint_ge(u.available + 4 * MiB, avail0);

	buf = malloc(chunk);
	memset(buf, 0x5a, chunk);
	for (int i = 0; ret == 0 && i < 1000; i++) {
		struct arb_stat st;
		uint64_t off = 0;

		snprintf(name, sizeof(name), "fill%03d", i);
		ret = arb_fs_mknod(fs, ROOT, name, S_IFREG | 0644, 0, &cred,
				   &st);
		while (ret == 0 && off < 4 * MiB) {
			ssize_t n = arb_fs_write(fs, st.ino, buf, chunk, off);

			if (n < 0) {
				ret = (int)n;
				break;
			}
			off += (uint64_t)n;
			written += (uint64_t)n;
		}
		if (ret == 0)
			ret = arb_fs_commit(fs, NULL);
	}
	free(buf);
	ck_assert_int_eq(ret, -ENOSPC);
	/* at least 85% of what df said was available at the start */
	ck_assert_msg(written >= avail0 / 100 * 85,
		      "wrote %llu of %llu available",
		      (unsigned long long)written, (unsigned long long)avail0);
	ck_assert(!listed(fs, g));
	commit(fs);
	close_fs();
	ret = open_gen(g, &old, &why);
	ck_assert_int_eq(ret, -ENOENT);
	fs_open_now();
}
END_TEST

/*
 * A writer that did not keep the blocks (an arborfs from before the
 * history, or the history turned off) reuses them; the superblock that
 * still lists the old generation is then put back: opening that
 * generation is refused because its nodes do not verify, never served.
 */
START_TEST(test_reused_blocks_refused)
{
	struct arb_super saved[2];
	struct arb_fs *old;
	const char *why;
	uint64_t dir, g;
	int ret;

	new_image(32 * MiB);
	g = make_tree(&dir, 30, 3000);
	remove_tree(dir, 30);
	commit(fs);
	close_fs();
	ck_assert_int_eq(arb_dev_read(mem, &saved[0], sizeof(saved[0]),
				      ARB_SUPER_OFFSET0, ARB_IO_SUPER), 0);
	ck_assert_int_eq(arb_dev_read(mem, &saved[1], sizeof(saved[1]),
				      ARB_SUPER_OFFSET1, ARB_IO_SUPER), 0);

	/* no grace: the freed nodes are rewritten */
	fopts.history_secs = 0;
	fopts.history_commits = 0;
	fs_open_now();
	for (int i = 0; i < 60; i++) {
		char name[32];

		snprintf(name, sizeof(name), "n%03d", i);
		mkfile(fs, ROOT, name, 3000, 7);
		commit(fs);
	}
	close_fs();
	fopts.history_secs = 30;
	fopts.history_commits = 8;

	/* what an old writer's superblock would list */
	ck_assert_int_eq(arb_dev_write(mem, &saved[0], sizeof(saved[0]),
				       ARB_SUPER_OFFSET0, ARB_IO_SUPER), 0);
	ck_assert_int_eq(arb_dev_write(mem, &saved[1], sizeof(saved[1]),
				       ARB_SUPER_OFFSET1, ARB_IO_SUPER), 0);
	ret = open_gen(g, &old, &why);
	ck_assert_msg(ret == -ESTALE, "open: %d %s", ret, why ? why : "");
	ck_assert_ptr_nonnull(strstr(why, "no longer intact"));
	/* the image is a mess now (the newest generation's blocks were
	 * reused too): do not check it at teardown */
	fs = NULL;
}
END_TEST

/* A history written by someone else than this superblock's writer is
 * ignored (format.h, ARB_COMPAT_HISTORY). */
START_TEST(test_stale_history_ignored)
{
	struct arb_super sb;
	uint64_t dir, g;

	new_image(32 * MiB);
	g = make_tree(&dir, 2, 100);
	commit(fs);
	close_fs();
	ck_assert_int_eq(arb_dev_read(mem, &sb, sizeof(sb), ARB_SUPER_OFFSET0,
				      ARB_IO_SUPER), 0);
	ck_assert_uint_ge(arb_history_valid(&sb), 1);
	/* an older writer bumps the generation, copying the history */
	arb_set_super_s_generation(&sb, arb_super_s_generation(&sb) + 2);
	ck_assert_uint_eq(arb_history_valid(&sb), 0);
	arb_set_super_s_generation(&sb, arb_super_s_generation(&sb) - 2);
	/* generations out of order */
	if (arb_super_s_hist_nr(&sb) >= 2) {
		arb_set_history_entry_he_generation(&sb.s_hist[1], g + 100);
		ck_assert_uint_eq(arb_history_valid(&sb), 0);
	}
	fs_open_now();
}
END_TEST

static Suite *history_suite(void)
{
	Suite *s = suite_create("history");
	TCase *tc = tcase_create("history");

	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_back_in_time);
	tcase_add_test(tc, test_survives_remount);
	tcase_add_test(tc, test_refusals);
	tcase_add_test(tc, test_expiry);
	tcase_add_test(tc, test_space_pressure);
	tcase_add_test(tc, test_reused_blocks_refused);
	tcase_add_test(tc, test_stale_history_ignored);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(history_suite());
}
