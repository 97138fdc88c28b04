/* SPDX-License-Identifier: MIT */
/*
 * test_online.c - lib/check/fs_online.c and the allocator's hold (alloc.c):
 * the checker on a committed generation while the same filesystem is
 * modified and committed.
 *
 * The interleaving is made deterministic by the device: the check's reads
 * reach the memory device through a hook that, every few reads, changes
 * the filesystem through the public API (unlink, overwrite, create) and
 * commits.  The check holds no lock of the filesystem while it reads, so
 * this is exactly what a concurrent writer can do, at the worst moments.
 */
#include <stdlib.h>
#include <string.h>

#include "arbor/arbor.h"
#include "core.h"
#include "fs/fs_int.h"
#include "testutil.h"

#define MiB (1024ULL * 1024)

static struct arb_dev *mem;
/* the filesystem the hook modifies, and what the hook does */
static struct arb_fs *live;
static _Thread_local bool in_hook;
static unsigned hook_every, hook_reads, hook_rounds;
static uint64_t held_seen;
static bool hook_yield, hook_second;
static int second_ret;
static const struct arb_cred cr = { 0, 0 };

static void mutate(void);
static void mutate_round(void);

static int b_pread(struct arb_dev *d, void *buf, size_t len, uint64_t off,
		   enum arb_io_kind kind)
{
	struct arb_dev *l = d->priv;
	int ret = l->ops->pread(l, buf, len, off, kind);

	/* the view's reads come through here with the mount unlocked; the
	 * mount's own reads (in the hook) must not recurse */
	if (live && hook_every && !in_hook && ++hook_reads % hook_every == 0) {
		in_hook = true;
		mutate();
		in_hook = false;
	}
	return ret;
}
static int b_pwrite(struct arb_dev *d, const void *buf, size_t len,
		    uint64_t off, enum arb_io_kind kind)
{
	struct arb_dev *l = d->priv;
	return l->ops->pwrite(l, buf, len, off, kind);
}
static int b_flush(struct arb_dev *d)
{
	struct arb_dev *l = d->priv;
	return l->ops->flush(l);
}
static void b_destroy(struct arb_dev *d)
{
	free(d);
}
static const struct arb_dev_ops borrow_ops = {
	.pread = b_pread,
	.pwrite = b_pwrite,
	.flush = b_flush,
	.destroy = b_destroy,
};
static struct arb_dev *borrow(void)
{
	struct arb_dev *d = calloc(1, sizeof(*d));
	ck_assert_ptr_nonnull(d);
	d->ops = &borrow_ops;
	d->size = mem->size;
	d->priv = mem;
	return d;
}

static struct arb_fs *open_fs(bool rw)
{
	struct arb_fs_opts o;
	struct arb_fs *fs;

	arb_fs_opts_default(&o);
	o.commit_interval = 0;
	o.readonly = !rw;
	ck_assert_int_eq(arb_fs_open(borrow(), &o, &fs, NULL), 0);
	return fs;
}

static void put_file(struct arb_fs *fs, const char *name, size_t size,
		     int fill)
{
	struct arb_stat st;
	char *buf = malloc(size);
	int ret;

	ck_assert_ptr_nonnull(buf);
	memset(buf, fill, size);
	ret = arb_fs_lookup(fs, ARB_ROOT_INO, name, &st);
	if (ret == -ENOENT)
		ret = arb_fs_mknod(fs, ARB_ROOT_INO, name, S_IFREG | 0644, 0,
				   &cr, &st);
	ck_assert_int_eq(ret, 0);
	ck_assert_int_eq(arb_fs_write(fs, st.ino, buf, size, 0),
			 (ssize_t)size);
	free(buf);
}

#define FAT_FILES 4
#define FAT_SIZE (2 * MiB)
static bool hook_fill;

/* replace every fat file by a new one: needs the space the old ones used */
static void refill(void)
{
	char name[32];

	for (int i = 0; i < FAT_FILES; i++) {
		snprintf(name, sizeof(name), "fat%d", i);
		ck_assert_int_eq(arb_fs_unlink(live, ARB_ROOT_INO, name), 0);
	}
	ck_assert_int_eq(arb_fs_sync(live), 0);
	for (int i = 0; i < FAT_FILES; i++) {
		snprintf(name, sizeof(name), "fat%d", i);
		put_file(live, name, FAT_SIZE, 'A' + i);
		ck_assert_int_eq(arb_fs_sync(live), 0);
	}
}

/* one round of changes by "another thread", committed */
static void mutate(void)
{
	if (hook_fill) {
		if (hook_rounds++ == 0)
			refill();
		return;
	}
	mutate_round();
}

static void mutate_round(void)
{
	char name[32];
	unsigned r = hook_rounds++;
	bool holding;

	snprintf(name, sizeof(name), "f%u", r % 40);
	(void)arb_fs_unlink(live, ARB_ROOT_INO, name);
	snprintf(name, sizeof(name), "f%u", (r + 7) % 40);
	put_file(live, name, 4096 * (1 + r % 9), 'a' + (int)(r % 26));
	snprintf(name, sizeof(name), "n%u", r);
	put_file(live, name, 100 + r, 'n');
	ck_assert_int_eq(arb_fs_sync(live), 0);
	fs_lock(live);
	if (arb_free_space_held(live->vol, &holding) > held_seen)
		held_seen = arb_free_space_held(live->vol, NULL);
	if (hook_yield && r == 3)
		ck_assert(fs_check_yield(live));
	fs_unlock(live);
	if (hook_second && r == 1) {
		struct arb_check_result r2 = { 0 };
		second_ret = arb_fs_check_online(live, &r2, NULL, NULL, NULL);
		arb_check_result_free(&r2);
	}
}

static void setup(void)
{
	struct arb_mkfs_opts mo;
	struct arb_dev *d;
	struct arb_fs *fs;

	arb_log_level = ARB_LOG_ERR;
	ck_assert_int_eq(arb_dev_open_mem(16 * MiB, &mem), 0);
	arb_mkfs_opts_default(&mo);
	d = borrow();
	ck_assert_int_eq(arb_mkfs(d, &mo), 0);
	arb_dev_destroy(d);
	fs = open_fs(true);
	for (int i = 0; i < 40; i++) {
		char name[32];
		snprintf(name, sizeof(name), "f%d", i);
		put_file(fs, name, 4096 * (1 + (size_t)i % 5) + (size_t)i, 'x');
	}
	ck_assert_int_eq(arb_fs_close(fs), 0);
	live = NULL;
	hook_every = hook_reads = hook_rounds = 0;
	held_seen = 0;
	hook_yield = hook_second = hook_fill = false;
	second_ret = 0;
}

static void teardown(void)
{
	arb_dev_destroy(mem);
	mem = NULL;
}

static void offline_clean(void)
{
	struct arb_check_result r = { 0 };
	struct arb_fs *fs = open_fs(false);

	ck_assert_int_eq(arb_fs_check_records(fs, &r, stderr), 0);
	ck_assert_uint_eq(r.nr, 0);
	arb_check_result_free(&r);
	ck_assert_int_eq(arb_fs_close(fs), 0);
}

/* the view of G stays consistent and clean while the fs changes under it */
START_TEST(test_check_while_writing)
{
	struct arb_check_result r = { 0 };
	struct arb_online_check oc;
	uint64_t gen_before;
	bool holding = true;
	int ret;

	struct arb_fs_stats fst;

	live = open_fs(true);
	put_file(live, "pending", 5000, 'p'); /* committed by the check */
	ck_assert_int_eq(arb_fs_get_stats(live, &fst), 0);
	gen_before = fst.generation;
	hook_every = 3;
	ret = arb_fs_check_online(live, &r, stderr, &oc, NULL);
	hook_every = 0;
	ck_assert_int_eq(ret, 0);
	ck_assert_uint_eq(r.nr, 0);
	ck_assert_uint_gt(r.nodes, 0);
	ck_assert_uint_gt(r.items, 0);
	ck_assert_uint_gt(oc.generation, gen_before);
	ck_assert_uint_gt(oc.bytes_read, 0);
	ck_assert(!oc.out_of_space);
	/* the writer really committed meanwhile, freeing blocks of G */
	ck_assert_uint_gt(hook_rounds, 5);
	ck_assert_uint_gt(held_seen, 0);
	fs_lock(live);
	ck_assert_uint_eq(arb_free_space_held(live->vol, &holding), 0);
	ck_assert(!holding);
	fs_unlock(live);
	arb_check_result_free(&r);
	/* a second run, on a later generation */
	hook_every = 5;
	ck_assert_int_eq(arb_fs_check_online(live, &r, NULL, &oc, NULL), 0);
	hook_every = 0;
	ck_assert_uint_eq(r.nr, 0);
	arb_check_result_free(&r);
	ck_assert_int_eq(arb_fs_close(live), 0);
	live = NULL;
	offline_clean();
}
END_TEST

/* short of space: the check gives way (cancelled, blocks released) */
START_TEST(test_check_yields)
{
	struct arb_check_result r = { 0 };
	struct arb_online_check oc;
	bool holding = true;
	int ret;

	live = open_fs(true);
	hook_every = 3;
	hook_yield = true;
	ret = arb_fs_check_online(live, &r, NULL, &oc, NULL);
	hook_every = 0;
	ck_assert_int_eq(ret, -ECANCELED);
	ck_assert(oc.out_of_space);
	ck_assert_uint_eq(r.nr, 0);
	fs_lock(live);
	ck_assert_uint_eq(arb_free_space_held(live->vol, &holding), 0);
	ck_assert(!holding);
	fs_unlock(live);
	/* and the next one runs */
	ck_assert_int_eq(arb_fs_check_online(live, &r, NULL, NULL, NULL), 0);
	arb_check_result_free(&r);
	ck_assert_int_eq(arb_fs_close(live), 0);
	live = NULL;
	offline_clean();
}
END_TEST

/*
 * A filesystem that needs the space of the blocks the check holds: the
 * writes succeed, the check is cancelled (out of space).
 */
START_TEST(test_check_gives_space)
{
	struct arb_check_result r = { 0 };
	struct arb_online_check oc;
	struct arb_fs_usage u;
	char name[32];
	int ret;

	live = open_fs(true);
	for (int i = 0; i < FAT_FILES; i++) {
		snprintf(name, sizeof(name), "fat%d", i);
		put_file(live, name, FAT_SIZE, 'a' + i);
	}
	ck_assert_int_eq(arb_fs_sync(live), 0);
	ck_assert_int_eq(arb_fs_usage(live, &u), 0);
	/* the replacement does not fit next to the held old files */
	ck_assert_uint_lt(u.available, (uint64_t)FAT_FILES * FAT_SIZE);
	hook_every = 2;
	hook_fill = true;
	ret = arb_fs_check_online(live, &r, NULL, &oc, NULL);
	hook_every = 0;
	ck_assert_uint_ge(hook_rounds, 1);
	ck_assert_int_eq(ret, -ECANCELED);
	ck_assert(oc.out_of_space);
	ck_assert_int_eq(arb_fs_close(live), 0);
	live = NULL;
	offline_clean();
}
END_TEST

/* one at a time; a caller's cancel */
START_TEST(test_check_busy_cancel)
{
	struct arb_check_result r = { 0 };
	static bool cancel = true;

	live = open_fs(true);
	hook_every = 3;
	hook_second = true;
	ck_assert_int_eq(arb_fs_check_online(live, &r, NULL, NULL, NULL), 0);
	hook_every = 0;
	ck_assert_int_eq(second_ret, -EBUSY);
	arb_check_result_free(&r);
	ck_assert_int_eq(arb_fs_check_online(live, &r, NULL, NULL, &cancel),
			 -ECANCELED);
	ck_assert_uint_eq(r.nr, 0);
	ck_assert_int_eq(arb_fs_close(live), 0);
	live = NULL;
	offline_clean();
}
END_TEST

/* a read-only filesystem holds nothing and is checked as it is */
START_TEST(test_check_readonly)
{
	struct arb_check_result r = { 0 };
	struct arb_fs *fs = open_fs(false);

	ck_assert_int_eq(arb_fs_check_online(fs, &r, NULL, NULL, NULL), 0);
	ck_assert_uint_eq(r.nr, 0);
	arb_check_result_free(&r);
	ck_assert_int_eq(arb_fs_close(fs), 0);
}
END_TEST

static Suite *online_suite(void)
{
	Suite *s = suite_create("online");
	TCase *tc = tcase_create("check_online");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_check_while_writing);
	tcase_add_test(tc, test_check_yields);
	tcase_add_test(tc, test_check_gives_space);
	tcase_add_test(tc, test_check_busy_cancel);
	tcase_add_test(tc, test_check_readonly);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(online_suite());
}
