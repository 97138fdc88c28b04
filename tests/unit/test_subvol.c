/* SPDX-License-Identifier: MIT */
/*
 * test_subvol.c - lib/subvol: subvolumes and snapshots through the public
 * API (arbor/subvol.h), each phase checked (arb_fs_check) and reopened.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arbor/arbor.h"
#include "arbor/subvol.h"
#include "core.h"
#include "fs/fs_int.h"
#include "testutil.h"

#define ROOT ARB_ROOT_INO
#define MiB (1024ULL * 1024)
#define USED(u) ((u).data + (u).metadata)

static struct arb_dev *mem;
static struct arb_fs *fs;
static struct arb_fs_opts fopts;
static const struct arb_cred cred = { 1000, 1000 };

static void fs_open_now(void)
{
	const char *why = NULL;
	int ret = arb_fs_open(tu_dev_borrow(mem), &fopts, &fs, &why);
	ck_assert_msg(ret == 0, "open: %d %s", ret, why ? why : "");
}

static void check_clean(void)
{
	int ret = arb_fs_check(fs, stderr);
	ck_assert_msg(ret == 0, "arb_fs_check: %d", ret);
}

static void setup(void)
{
	struct arb_mkfs_opts mo;
	struct arb_dev *d;

	arb_log_level = ARB_LOG_WARN;
	ck_assert_int_eq(arb_dev_open_mem(256 * MiB, &mem), 0);
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
		check_clean();
		ck_assert_int_eq(arb_fs_close(fs), 0);
		fs = NULL;
	}
	arb_dev_destroy(mem);
	mem = NULL;
}

static void reopen(void)
{
	check_clean();
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs = NULL;
	fs_open_now();
	check_clean();
}

static uint64_t lookup(uint64_t dir, const char *name)
{
	struct arb_stat st;
	int ret = arb_fs_lookup(fs, dir, name, &st);

	if (ret == -ENOENT)
		return 0;
	ck_assert_msg(ret == 0, "lookup %s: %d", name, ret);
	return st.ino;
}

static uint64_t mkfile(uint64_t dir, const char *name, const char *data)
{
	struct arb_stat st;
	int ret = arb_fs_mknod(fs, dir, name, S_IFREG | 0644, 0, &cred, &st);

	ck_assert_msg(ret == 0, "mknod %s: %d", name, ret);
	if (data)
		ck_assert_int_eq(arb_fs_write(fs, st.ino, data, strlen(data),
					      0),
				 (ssize_t)strlen(data));
	return st.ino;
}

static void expect(uint64_t ino, const char *data)
{
	char buf[256];
	ssize_t n = arb_fs_read(fs, ino, buf, sizeof(buf) - 1, 0);

	ck_assert_int_ge(n, 0);
	buf[n] = 0;
	ck_assert_str_eq(buf, data);
}

static uint64_t subvol(uint64_t dir, const char *name)
{
	struct arb_stat st;
	int ret = arb_subvol_create(fs, dir, name, 0755, &cred, &st);

	ck_assert_msg(ret == 0, "subvol create %s: %d", name, ret);
	return st.ino;
}

static uint64_t snap(uint64_t src, uint64_t dir, const char *name,
		     unsigned flags)
{
	struct arb_stat st;
	int ret = arb_subvol_snapshot(fs, src, dir, name, flags, &cred, &st);

	ck_assert_msg(ret == 0, "snapshot %s: %d", name, ret);
	return st.ino;
}

struct names {
	char name[16][64];
	uint64_t ino[16];
	int n;
};

static int collect(void *ctx, const char *name, const struct arb_stat *st,
		   uint64_t next)
{
	struct names *r = ctx;

	(void)next;
	if (r->n < 16) {
		snprintf(r->name[r->n], sizeof(r->name[0]), "%s", name);
		r->ino[r->n++] = st->ino;
	}
	return 0;
}

static bool listed(uint64_t dir, const char *name, uint64_t *ino)
{
	struct names r = { .n = 0 };
	int i;

	ck_assert_int_eq(arb_fs_readdir(fs, dir, 0, true, collect, &r), 0);
	for (i = 0; i < r.n; i++)
		if (!strcmp(r.name[i], name)) {
			if (ino)
				*ino = r.ino[i];
			return true;
		}
	return false;
}

START_TEST(test_create)
{
	struct arb_subvol_info info;
	struct arb_stat st;
	uint64_t sv, f, ino, dotdot;
	char path[256];

	sv = subvol(ROOT, "sv");
	ck_assert_uint_eq(arb_inum_tree(sv), 256);
	ck_assert_uint_eq(arb_inum_obj(sv), ROOT);
	ck_assert_uint_eq(lookup(ROOT, "sv"), sv);
	ck_assert(listed(ROOT, "sv", &ino));
	ck_assert_uint_eq(ino, sv);
	ck_assert_int_eq(arb_fs_getattr(fs, sv, &st), 0);
	ck_assert(S_ISDIR(st.mode));
	ck_assert_uint_eq(st.uid, 1000);
	ck_assert_int_eq(arb_fs_lookup(fs, sv, "..", &st), 0);
	dotdot = st.ino;
	ck_assert_uint_eq(dotdot, ROOT);

	f = mkfile(sv, "f", "in sv");
	ck_assert_uint_eq(arb_inum_tree(f), 256);
	ck_assert_uint_eq(lookup(ROOT, "f"), 0);
	ck_assert_int_eq(arb_subvol_create(fs, ROOT, "sv", 0755, &cred, &st),
			 -EEXIST);
	ck_assert_int_eq(arb_fs_mkdir(fs, ROOT, "sv", 0755, &cred, &st),
			 -EEXIST);
	ck_assert_int_eq(arb_fs_rmdir(fs, ROOT, "sv"), -EPERM);
	ck_assert_int_eq(arb_fs_rename(fs, ROOT, "sv", ROOT, "sv2", 0),
			 -EPERM);

	ck_assert_int_eq(arb_subvol_info(fs, f, &info), 0);
	ck_assert_uint_eq(info.id, 256);
	ck_assert_uint_eq(info.parent_id, 5);
	ck_assert_uint_eq(info.dir_ino, ROOT);
	ck_assert_str_eq(info.name, "sv");
	ck_assert_uint_eq(info.flags, 0);
	ck_assert_uint_eq(info.source_id, 0);
	ck_assert_int_eq(arb_subvol_path(fs, 256, path, sizeof(path)), 0);
	ck_assert_str_eq(path, "sv");
	ck_assert_int_eq(arb_subvol_path(fs, 5, path, sizeof(path)), 0);
	ck_assert_str_eq(path, "");

	/* nested, in a subdirectory */
	ck_assert_int_eq(arb_fs_mkdir(fs, sv, "d", 0755, &cred, &st), 0);
	ino = subvol(st.ino, "inner");
	ck_assert_uint_eq(arb_inum_tree(ino), 257);
	ck_assert_int_eq(arb_subvol_path(fs, 257, path, sizeof(path)), 0);
	ck_assert_str_eq(path, "sv/d/inner");
	ck_assert_int_eq(arb_subvol_path(fs, 257, path, 5), -ERANGE);
	mkfile(ino, "g", "in inner");

	reopen();
	sv = lookup(ROOT, "sv");
	ck_assert_uint_eq(sv, arb_inum(256, ROOT));
	expect(lookup(sv, "f"), "in sv");
	ino = lookup(lookup(lookup(sv, "d"), "inner"), "g");
	ck_assert_uint_eq(arb_inum_tree(ino), 257);
	expect(ino, "in inner");
}
END_TEST

START_TEST(test_snapshot_independent)
{
	uint64_t a, s1, s2, sa, d;
	struct arb_stat st;
	char buf[16];

	a = mkfile(ROOT, "a", "version 1");
	ck_assert_int_eq(arb_fs_mkdir(fs, ROOT, "dir", 0755, &cred, &st), 0);
	d = st.ino;
	mkfile(d, "x", "x1");
	ck_assert_int_eq(arb_fs_setxattr(fs, a, "user.k", "v1", 2, 0), 0);
	/* delayed data not yet committed goes into the snapshot */
	s1 = snap(ROOT, ROOT, "s1", 0);
	ck_assert_uint_eq(arb_inum_tree(s1), 256);
	sa = lookup(s1, "a");
	ck_assert_uint_eq(sa, arb_inum(256, a));
	expect(sa, "version 1");
	/* the snapshot does not hold itself */
	ck_assert_uint_eq(lookup(s1, "s1"), 0);

	ck_assert_int_eq(arb_fs_write(fs, a, "VERSION 2", 9, 0), 9);
	ck_assert_int_eq(arb_fs_write(fs, sa, "snap", 4, 0), 4);
	ck_assert_int_eq(arb_fs_setxattr(fs, sa, "user.k", "v2", 2, 0), 0);
	ck_assert_int_eq(arb_fs_unlink(fs, lookup(s1, "dir"), "x"), 0);
	expect(a, "VERSION 2");
	expect(sa, "snapion 1");
	ck_assert_int_eq(arb_fs_getxattr(fs, a, "user.k", buf, sizeof(buf)),
			 2);
	ck_assert_int_eq(memcmp(buf, "v1", 2), 0);
	expect(lookup(d, "x"), "x1");

	/* a snapshot of a snapshot, read-only */
	s2 = snap(s1, ROOT, "s2", ARB_SUBVOL_RDONLY);
	ck_assert_uint_eq(arb_inum_tree(s2), 257);
	expect(lookup(s2, "a"), "snapion 1");
	ck_assert_int_eq(arb_fs_write(fs, lookup(s2, "a"), "z", 1, 0),
			 -EROFS);
	ck_assert_int_eq(arb_fs_mknod(fs, s2, "n", S_IFREG | 0644, 0, &cred,
				      &st),
			 -EROFS);
	ck_assert_int_eq(arb_fs_unlink(fs, s2, "a"), -EROFS);
	ck_assert_int_eq(arb_fs_setxattr(fs, lookup(s2, "a"), "user.k", "x",
					 1, 0),
			 -EROFS);
	/* renames and links between subvolumes */
	ck_assert_int_eq(arb_fs_rename(fs, ROOT, "a", s1, "a2", 0), -EXDEV);
	ck_assert_int_eq(arb_fs_link(fs, a, s1, "a2", &st), -EXDEV);
	/* not a subvolume root */
	ck_assert_int_eq(arb_subvol_snapshot(fs, a, ROOT, "bad", 0, &cred,
					     &st),
			 -EINVAL);
	ck_assert_int_eq(arb_subvol_snapshot(fs, d, ROOT, "bad", 0, &cred,
					     &st),
			 -EINVAL);
	reopen();
	s2 = lookup(ROOT, "s2");
	ck_assert_int_eq(arb_fs_unlink(fs, s2, "a"), -EROFS);
	expect(lookup(lookup(ROOT, "s1"), "a"), "snapion 1");
	expect(lookup(ROOT, "a"), "VERSION 2");
	/* writable again */
	ck_assert_int_eq(arb_subvol_set_rdonly(fs, s2, false, NULL), 0);
	ck_assert_int_eq(arb_fs_unlink(fs, s2, "a"), 0);
	ck_assert_int_eq(arb_subvol_set_rdonly(fs, ROOT, true, NULL),
			 -EINVAL);
}
END_TEST

/* a snapshot of a tree holding a subvolume link: the copy of the link is
 * stale (the nested subvolume belongs to the source) and hidden */
START_TEST(test_nested_link_in_snapshot)
{
	uint64_t s;
	struct arb_stat st;

	subvol(ROOT, "inner");
	s = snap(ROOT, ROOT, "s", 0);
	ck_assert(listed(ROOT, "inner", NULL));
	ck_assert(!listed(s, "inner", NULL));
	ck_assert_uint_eq(lookup(s, "inner"), 0);
	/* the name stays taken in the copy */
	ck_assert_int_eq(arb_fs_mkdir(fs, s, "inner", 0755, &cred, &st),
			 -EEXIST);
	/* deleting the source tree's link needs no child check there */
	ck_assert_int_eq(arb_subvol_delete(fs, ROOT, "s"), 0);
	ck_assert_int_eq(arb_subvol_wait(fs, 0), 0);
	/* a subvolume holding another cannot go first */
	subvol(lookup(ROOT, "inner"), "deeper");
	ck_assert_int_eq(arb_subvol_delete(fs, ROOT, "inner"), -ENOTEMPTY);
	ck_assert_int_eq(arb_subvol_delete(fs, lookup(ROOT, "inner"),
					   "deeper"),
			 0);
	ck_assert_int_eq(arb_subvol_delete(fs, ROOT, "inner"), 0);
	ck_assert_int_eq(arb_subvol_wait(fs, 0), 0);
}
END_TEST

struct counts {
	int n, deleted;
	uint64_t ids[16];
};

static int count_fn(void *ctx, const struct arb_subvol_info *info)
{
	struct counts *c = ctx;

	if (c->n < 16)
		c->ids[c->n] = info->id;
	c->n++;
	if (info->flags & ARB_SUBVOL_DELETED)
		c->deleted++;
	return 0;
}

START_TEST(test_delete_and_clean)
{
	struct arb_fs_usage u0, u1, u2;
	struct counts c = { 0 };
	uint64_t s, f, id;
	struct arb_stat st;
	char big[4096];
	int i;

	memset(big, 'q', sizeof(big));
	f = mkfile(ROOT, "big", NULL);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_fs_usage(fs, &u0), 0);
	s = snap(ROOT, ROOT, "s", 0);
	id = arb_inum_tree(s);
	/* data only the snapshot holds */
	for (i = 0; i < 256; i++)
		ck_assert_int_eq(arb_fs_write(fs, lookup(s, "big"), big,
					      sizeof(big), (uint64_t)i * 4096),
				 4096);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_fs_usage(fs, &u1), 0);
	ck_assert_uint_gt(USED(u1), USED(u0) + 1 * MiB);

	ck_assert_int_eq(arb_subvol_list(fs, count_fn, &c), 0);
	ck_assert_int_eq(c.n, 2);
	ck_assert_uint_eq(c.ids[0], 5);
	ck_assert_uint_eq(c.ids[1], id);

	/* an open file of it keeps working until released */
	f = lookup(s, "big");
	ck_assert_int_eq(arb_fs_open_inode(fs, f), 0);
	ck_assert_int_eq(arb_subvol_delete(fs, ROOT, "s"), 0);
	ck_assert_uint_eq(lookup(ROOT, "s"), 0);
	ck_assert_int_eq(arb_subvol_delete(fs, ROOT, "s"), -ENOENT);
	c = (struct counts){ 0 };
	ck_assert_int_eq(arb_subvol_list(fs, count_fn, &c), 0);
	ck_assert_int_eq(c.deleted, 1);
	ck_assert_int_eq(arb_fs_getattr(fs, f, &st), 0);
	ck_assert_uint_eq(st.size, 256 * 4096);
	check_clean();
	ck_assert_int_eq(arb_fs_release_inode(fs, f), 0);
	ck_assert_int_eq(arb_subvol_wait(fs, id), 0);
	ck_assert_int_eq(arb_fs_getattr(fs, f, &st), -ENOENT);
	ck_assert_int_eq(arb_fs_usage(fs, &u2), 0);
	ck_assert_uint_le(USED(u2), USED(u0) + 64 * 1024);
	c = (struct counts){ 0 };
	ck_assert_int_eq(arb_subvol_list(fs, count_fn, &c), 0);
	ck_assert_int_eq(c.n, 1);

	/* ids are never handed out again */
	s = subvol(ROOT, "next");
	ck_assert_uint_gt(arb_inum_tree(s), id);
	ck_assert_int_eq(arb_subvol_delete(fs, ROOT, "nothere"), -ENOENT);
	ck_assert_int_eq(arb_fs_mkdir(fs, ROOT, "plain", 0755, &cred, &st),
			 0);
	ck_assert_int_eq(arb_subvol_delete(fs, ROOT, "plain"), -EINVAL);
}
END_TEST

/* a deletion interrupted before the cleaner: the next mount finishes it */
START_TEST(test_clean_after_remount)
{
	struct arb_fs_usage u0, u1;
	struct counts c = { 0 };
	uint64_t s;
	char big[4096];
	int i;

	memset(big, 'w', sizeof(big));
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_fs_usage(fs, &u0), 0);
	s = subvol(ROOT, "sv");
	for (i = 0; i < 128; i++) {
		char name[16];
		snprintf(name, sizeof(name), "f%d", i);
		ck_assert_int_eq(arb_fs_write(fs, mkfile(s, name, NULL), big,
					      sizeof(big), 0),
				 4096);
	}
	ck_assert_int_eq(arb_subvol_delete(fs, ROOT, "sv"), 0);
	reopen(); /* no commit thread here: nothing cleaned yet */
	ck_assert_int_eq(arb_subvol_list(fs, count_fn, &c), 0);
	ck_assert_int_eq(c.deleted, 1);
	ck_assert_int_eq(arb_subvol_wait(fs, 0), 0);
	ck_assert_int_eq(arb_fs_usage(fs, &u1), 0);
	ck_assert_uint_le(USED(u1), USED(u0) + 64 * 1024);
	reopen();
}
END_TEST

static Suite *subvol_suite(void)
{
	Suite *s = suite_create("subvol");
	TCase *tc = tcase_create("subvol");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_create);
	tcase_add_test(tc, test_snapshot_independent);
	tcase_add_test(tc, test_nested_link_in_snapshot);
	tcase_add_test(tc, test_delete_and_clean);
	tcase_add_test(tc, test_clean_after_remount);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(subvol_suite());
}
