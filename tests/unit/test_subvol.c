/* SPDX-License-Identifier: MIT */
/*
 * test_subvol.c - lib/subvol: subvolumes and snapshots through the public
 * API (arbor/subvol.h), each phase checked (arb_fs_check) and reopened.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arbor/arbor.h"
#include "arbor/subvol.h"
#include "core.h"
#include "fs/fs_int.h"
#include "testutil.h"

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

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
	/* at full scale test_many_snapshots keeps 3,000 snapshots, each
	 * with nodes and a block of its own */
	ck_assert_int_eq(arb_dev_open_mem(TU_SCALE(256, 1024) * MiB, &mem), 0);
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
	check_clean();
	ck_assert_int_eq(arb_subvol_create(fs, ROOT, "sv", 0755, &cred, &st),
			 -EEXIST);
	ck_assert_int_eq(arb_fs_mkdir(fs, ROOT, "sv", 0755, &cred, &st),
			 -EEXIST);
	/* rmdir takes only an empty subvolume */
	ck_assert_int_eq(arb_fs_rmdir(fs, ROOT, "sv"), -ENOTEMPTY);
	ck_assert_int_eq(arb_fs_unlink(fs, ROOT, "sv"), -EISDIR);
	/* a link moves within its tree, to a free name or over an empty
	 * directory */
	ck_assert_int_eq(arb_fs_mkdir(fs, ROOT, "here", 0755, &cred, &st), 0);
	ck_assert_int_eq(arb_fs_mkdir(fs, ROOT, "full", 0755, &cred, &st), 0);
	mkfile(st.ino, "x", "x");
	mkfile(ROOT, "afile", "a");
	ck_assert_int_eq(arb_fs_rename(fs, ROOT, "sv", ROOT, "here",
				       RENAME_NOREPLACE),
			 -EEXIST);
	ck_assert_int_eq(arb_fs_rename(fs, ROOT, "sv", ROOT, "full", 0),
			 -ENOTEMPTY);
	ck_assert_int_eq(arb_fs_rename(fs, ROOT, "sv", ROOT, "afile", 0),
			 -ENOTDIR);
	ck_assert_int_eq(arb_fs_rename(fs, ROOT, "sv", ROOT, "here", 0), 0);
	ck_assert_uint_eq(lookup(ROOT, "here"), sv);
	ck_assert_uint_eq(lookup(ROOT, "sv"), 0);
	ck_assert_int_eq(arb_fs_getattr(fs, ROOT, &st), 0);
	ck_assert_uint_eq(st.nlink, 4); /* ., .., full, here */
	check_clean();
	ck_assert_int_eq(arb_fs_rename(fs, ROOT, "here", ROOT, "sv", 0), 0);
	ck_assert_int_eq(arb_fs_mkdir(fs, ROOT, "here", 0755, &cred, &st), 0);
	ck_assert_int_eq(arb_fs_rename(fs, ROOT, "sv", lookup(ROOT, "here"),
				       "sv2", 0),
			 0);
	ck_assert_uint_eq(lookup(ROOT, "sv"), 0);
	ck_assert_uint_eq(lookup(lookup(ROOT, "here"), "sv2"), sv);
	ck_assert_int_eq(arb_fs_lookup(fs, sv, "..", &st), 0);
	ck_assert_uint_eq(st.ino, lookup(ROOT, "here"));
	ck_assert_int_eq(arb_fs_rename(fs, lookup(ROOT, "here"), "sv2", ROOT,
				       "sv", RENAME_EXCHANGE),
			 -EPERM);
	ck_assert_int_eq(arb_fs_rename(fs, lookup(ROOT, "here"), "sv2", ROOT,
				       "sv", 0),
			 0);
	ck_assert_int_eq(arb_fs_rmdir(fs, ROOT, "here"), 0);

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
	/* a subvolume's inode is found by its number alone after a
	 * remount (NFS handles, a restarted daemon) */
	ck_assert_int_eq(arb_fs_getattr(fs, f, &st), 0);
	ck_assert_uint_eq(st.ino, f);
	ck_assert_int_eq(arb_fs_getattr(fs, arb_inum(900, ROOT), &st),
			 -ENOENT);
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
	/* write-opens are refused at open (the daemon asks before it opens) */
	ck_assert_int_eq(arb_fs_may_open(fs, lookup(s2, "a"), O_RDWR), -EROFS);
	ck_assert_int_eq(arb_fs_may_open(fs, lookup(s2, "a"), O_RDONLY |
					 O_TRUNC),
			 -EROFS);
	ck_assert_int_eq(arb_fs_may_open(fs, lookup(s2, "a"), O_RDONLY), 0);
	ck_assert_int_eq(arb_fs_getattr(fs, lookup(s2, "a"), &st), 0);
	ck_assert(st.rdonly);
	ck_assert_int_eq(arb_fs_getattr(fs, sa, &st), 0);
	ck_assert(!st.rdonly);
	ck_assert(arb_fs_has_protected_inodes(fs));
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
	/* no thread of the library's: waiting would be for ourselves */
	ck_assert_int_eq(arb_subvol_wait(fs, id), -EBUSY);
	ck_assert_int_eq(arb_subvol_wait(fs, 0), -EBUSY);
	{
		/* read-only, a deleted subvolume cannot be cleaned: said so,
		 * not waited for */
		struct arb_fs_opts ro = fopts;
		struct arb_dev *copy;
		struct arb_fs *f2;
		const char *why = NULL;

		ck_assert_int_eq(arb_fs_sync(fs), 0);
		ck_assert_int_eq(arb_dev_open_mem(mem->size, &copy), 0);
		memcpy(arb_dev_mem_data(copy), arb_dev_mem_data(mem),
		       mem->size);
		ro.readonly = true;
		ck_assert_int_eq(arb_fs_open(copy, &ro, &f2, &why), 0);
		ck_assert_int_eq(arb_subvol_wait(f2, id), -EROFS);
		ck_assert_int_eq(arb_fs_close(f2), 0);
	}
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

/* rmdir of an empty subvolume deletes it, as on btrfs since 4.18 */
START_TEST(test_rmdir_empty)
{
	struct counts c = { 0 };
	struct arb_stat st;
	uint64_t sv, ro, inner, id, d;

	sv = subvol(ROOT, "sv");
	id = arb_inum_tree(sv);
	/* a directory in it: not empty */
	ck_assert_int_eq(arb_fs_mkdir(fs, sv, "d", 0755, &cred, &st), 0);
	ck_assert_int_eq(arb_fs_rmdir(fs, ROOT, "sv"), -ENOTEMPTY);
	ck_assert_int_eq(arb_fs_rmdir(fs, sv, "d"), 0);
	/* a nested subvolume: not empty either */
	inner = subvol(sv, "inner");
	ck_assert_int_eq(arb_fs_rmdir(fs, ROOT, "sv"), -ENOTEMPTY);
	ck_assert_int_eq(arb_fs_rmdir(fs, sv, "inner"), 0);
	ck_assert_uint_eq(lookup(sv, "inner"), 0);
	ck_assert_int_eq(arb_subvol_wait(fs, 0), 0);
	ck_assert_int_eq(arb_fs_getattr(fs, inner, &st), -ENOENT);

	/* an empty read-only snapshot of it goes too */
	ro = snap(sv, ROOT, "ro", ARB_SUBVOL_RDONLY);
	ck_assert_int_eq(arb_fs_rmdir(fs, ro, "x"), -ENOENT);
	ck_assert_int_eq(arb_fs_rmdir(fs, ROOT, "ro"), 0);
	ck_assert_uint_eq(lookup(ROOT, "ro"), 0);

	/* the default one is refused, as by subvolume delete */
	ck_assert_int_eq(arb_subvol_set_default(fs, id), 0);
	ck_assert_int_eq(arb_fs_rmdir(fs, ROOT, "sv"), -EBUSY);
	ck_assert_int_eq(arb_subvol_set_default(fs, 5), 0);

	/* in a subdirectory; committed on return: gone after a reopen */
	ck_assert_int_eq(arb_fs_mkdir(fs, ROOT, "dir", 0755, &cred, &st), 0);
	d = st.ino;
	ck_assert_int_eq(arb_fs_rename(fs, ROOT, "sv", d, "sv", 0), 0);
	ck_assert_int_eq(arb_fs_rmdir(fs, d, "sv"), 0);
	ck_assert_int_eq(arb_fs_getattr(fs, d, &st), 0);
	ck_assert_uint_eq(st.nlink, 2);
	reopen();
	ck_assert_uint_eq(lookup(lookup(ROOT, "dir"), "sv"), 0);
	ck_assert_int_eq(arb_subvol_wait(fs, 0), 0);
	ck_assert_int_eq(arb_subvol_list(fs, count_fn, &c), 0);
	ck_assert_int_eq(c.n, 1);
	ck_assert_int_eq(c.deleted, 0);
	ck_assert_int_eq(arb_fs_rmdir(fs, ROOT, "dir"), 0);
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

/* an orphan of a subvolume (unlinked while open, then a crash) is freed
 * once the tree is opened again; one of the running mount is kept */
START_TEST(test_subvol_orphans)
{
	struct arb_fs_usage u0, u1;
	struct arb_dev *c, *savemem;
	struct arb_fs *savefs;
	uint64_t sv, f, g;
	struct arb_stat st;
	char big[4096];
	int i;

	memset(big, 'o', sizeof(big));
	sv = subvol(ROOT, "sv");
	f = mkfile(sv, "f", NULL);
	for (i = 0; i < 64; i++)
		ck_assert_int_eq(arb_fs_write(fs, f, big, sizeof(big),
					      (uint64_t)i * 4096),
				 4096);
	ck_assert_int_eq(arb_fs_open_inode(fs, f), 0);
	ck_assert_int_eq(arb_fs_unlink(fs, sv, "f"), 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	/* this mount's own orphan stays while pinned */
	fs->trees[1]->orphans_pending = true;
	ck_assert_int_eq(fs_free_tree_orphans(fs), 0);
	ck_assert_int_eq(arb_fs_getattr(fs, f, &st), 0);
	ck_assert_uint_eq(st.size, 64 * 4096);

	/* crash: a copy of the image as it is now */
	ck_assert_int_eq(arb_dev_open_mem(mem->size, &c), 0);
	memcpy(arb_dev_mem_data(c), arb_dev_mem_data(mem), mem->size);
	savemem = mem;
	savefs = fs;
	mem = c;
	fs_open_now();
	ck_assert_int_eq(arb_fs_usage(fs, &u0), 0);
	sv = lookup(ROOT, "sv");
	g = mkfile(sv, "g", "after");
	ck_assert_uint_gt(arb_inum_obj(g), arb_inum_obj(f));
	ck_assert_int_eq(fs_free_tree_orphans(fs), 0);
	ck_assert_int_eq(arb_fs_getattr(fs, f, &st), -ENOENT);
	ck_assert_int_eq(arb_fs_usage(fs, &u1), 0);
	ck_assert_uint_lt(USED(u1) + 200 * 1024, USED(u0) + 64 * 1024);
	check_clean();
	ck_assert_int_eq(arb_fs_close(fs), 0);
	arb_dev_destroy(mem);
	mem = savemem;
	fs = savefs;
	ck_assert_int_eq(arb_fs_release_inode(fs, f), 0);
}
END_TEST

/* a snapshot of a tree with a file unlinked while open holds that orphan
 * (inode with no link, ORPHAN_ITEM): the check reads the orphan's inode
 * in the snapshot's own tree, not in the top-level one */
START_TEST(test_snapshot_of_orphan)
{
	uint64_t sv, f;

	sv = subvol(ROOT, "sv");
	mkfile(sv, "a", "a");
	mkfile(sv, "b", "b");
	f = mkfile(sv, "f", "unlinked while open");
	ck_assert_int_eq(arb_fs_open_inode(fs, f), 0);
	ck_assert_int_eq(arb_fs_unlink(fs, sv, "f"), 0);
	snap(sv, ROOT, "ro", ARB_SUBVOL_RDONLY);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	check_clean();
	ck_assert_int_eq(arb_fs_release_inode(fs, f), 0);
	reopen();
}
END_TEST

/* ---- crash safety of snapshot, delete and clean commits -------------- */

#define CR_NAMES 4
static const char *cr_names[CR_NAMES] = { "s1", "s2", "s3", "s4" };

/* what ROOT shows: for each name, the content of its "a" ("" if absent) */
struct cr_state {
	uint64_t gen;
	size_t start, end; /* log positions around the step */
	char a[CR_NAMES + 1][32]; /* [CR_NAMES]: ROOT/a itself */
};

static void cr_read(struct arb_fs *f, char out[CR_NAMES + 1][32])
{
	struct arb_stat st, sa;
	ssize_t n;

	for (int i = 0; i <= CR_NAMES; i++) {
		uint64_t dir = ROOT;
		out[i][0] = 0;
		if (i < CR_NAMES) {
			if (arb_fs_lookup(f, ROOT, cr_names[i], &st))
				continue;
			dir = st.ino;
		}
		if (arb_fs_lookup(f, dir, "a", &sa)) {
			strcpy(out[i], "-");
			continue;
		}
		n = arb_fs_read(f, sa.ino, out[i], 31, 0);
		out[i][n > 0 ? n : 0] = 0;
	}
}

START_TEST(test_crash_points)
{
	struct cr_state st[32];
	size_t nst = 0, nflush, *fl, len;
	struct arb_dev *log;
	uint64_t a, seed = tu_seed("subvol crash");
	unsigned points = 0;
	int step;

	/* the fixture's filesystem is closed; a small one that logs every
	 * write takes its place (each crash point copies the image) */
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs = NULL;
	arb_dev_destroy(mem);
	{
		struct arb_mkfs_opts mo;
		struct arb_dev *d;

		ck_assert_int_eq(arb_dev_open_mem(32 * MiB, &mem), 0);
		arb_mkfs_opts_default(&mo);
		d = tu_dev_borrow(mem);
		ck_assert_int_eq(arb_mkfs(d, &mo), 0);
		arb_dev_destroy(d);
	}
	ck_assert_int_eq(arb_dev_log_wrap(mem, &log), 0);
	mem = log;
	fs_open_now();
	a = mkfile(ROOT, "a", "v0");
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	for (step = 0; step < 9; step++) {
		struct arb_fs_usage u;
		struct cr_state *c = &st[nst++];
		char v[8];

		c->start = arb_dev_log_len(log);
		snprintf(v, sizeof(v), "v%d", step + 1);
		ck_assert_int_eq(arb_fs_write(fs, a, v, 2, 0), 2);
		switch (step) {
		case 0: snap(ROOT, ROOT, "s1", 0); break;
		case 1: snap(ROOT, ROOT, "s2", ARB_SUBVOL_RDONLY); break;
		case 2:
			ck_assert_int_eq(arb_fs_write(fs,
				lookup(lookup(ROOT, "s1"), "a"), "w1", 2, 0), 2);
			snap(lookup(ROOT, "s1"), ROOT, "s3", 0);
			break;
		case 3:
			ck_assert_int_eq(arb_subvol_delete(fs, ROOT, "s2"), 0);
			break;
		case 4: ck_assert_int_eq(arb_subvol_wait(fs, 0), 0); break;
		case 5: subvol(ROOT, "s4"); break;
		case 6:
			mkfile(lookup(ROOT, "s4"), "a", "in4");
			ck_assert_int_eq(arb_fs_sync(fs), 0);
			break;
		case 7:
			ck_assert_int_eq(arb_subvol_delete(fs, ROOT, "s1"), 0);
			ck_assert_int_eq(arb_subvol_wait(fs, 0), 0);
			break;
		default: ck_assert_int_eq(arb_fs_sync(fs), 0); break;
		}
		ck_assert_int_eq(arb_fs_usage(fs, &u), 0);
		c->gen = u.generation;
		c->end = arb_dev_log_len(log);
		cr_read(fs, c->a);
	}
	len = arb_dev_log_len(log);
	nflush = arb_dev_log_flushes(log, NULL, 0);
	fl = calloc(nflush, sizeof(*fl));
	ck_assert_uint_eq(arb_dev_log_flushes(log, fl, nflush), nflush);
	/* every flush point as a clean prefix; dropped and torn writes
	 * after every few of them (each, at full scale) */
	for (size_t i = 0; i < nflush; i++) {
		for (int mode = 0; mode < 3; mode++) {
			size_t n = mode == 0 ? fl[i] + 1 : fl[i];
			struct arb_dev *dev;
			struct arb_fs *f = NULL;
			const char *why = NULL;
			char got[CR_NAMES + 1][32];
			struct arb_fs_usage u;
			uint64_t lo = 0;
			const struct cr_state *want = NULL;

			if (n < st[0].start || n > len ||
			    (mode && i % TU_SCALE(4, 1)))
				continue;
			if (mode && i + 1 < nflush)
				n = fl[i] + 1 + tu_rand_range(&seed,
						fl[i + 1] - fl[i]);
			ck_assert_int_eq(arb_dev_log_replay(log, n, mode, seed,
							    &dev),
					 0);
			ck_assert_msg(arb_fs_open(dev, &fopts, &f, &why) == 0,
				      "point %zu mode %d: open: %s", n, mode,
				      why ? why : "");
			ck_assert_msg(arb_fs_check(f, stderr) == 0,
				      "point %zu mode %d: check", n, mode);
			ck_assert_int_eq(arb_fs_usage(f, &u), 0);
			for (size_t k = 0; k < nst; k++) {
				if (st[k].end <= n)
					lo = st[k].gen;
				if (st[k].gen == u.generation)
					want = &st[k];
			}
			ck_assert_msg(u.generation >= lo,
				      "point %zu: generation %llu < %llu", n,
				      (unsigned long long)u.generation,
				      (unsigned long long)lo);
			if (want) {
				cr_read(f, got);
				for (int j = 0; j <= CR_NAMES; j++)
					ck_assert_msg(!strcmp(got[j],
							      want->a[j]),
						      "point %zu gen %llu: %s "
						      "holds '%s', not '%s'",
						      n,
						      (unsigned long long)
							      u.generation,
						      j < CR_NAMES
							      ? cr_names[j]
							      : "root",
						      got[j], want->a[j]);
			}
			/* the cleaner finishes what was left */
			if (points % TU_SCALE(3, 1) == 0) {
				ck_assert_int_eq(arb_subvol_wait(f, 0), 0);
				ck_assert_int_eq(arb_fs_check(f, stderr), 0);
			}
			ck_assert_int_eq(arb_fs_close(f), 0);
			points++;
		}
	}
	free(fl);
	fprintf(stderr, "subvol crash: %u points, %zu flushes\n", points,
		nflush);
	ck_assert_uint_ge(points, nflush);
}
END_TEST

/* ---- cleaning in batches ----------------------------------------------- */

/* the fixture's filesystem replaced by one of 4 KiB nodes (deep trees,
 * many batches) on size bytes, on a write log when log is not NULL */
static void small_nodes_fs(uint64_t size, struct arb_dev **log)
{
	struct arb_mkfs_opts mo;
	struct arb_dev *d;

	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs = NULL;
	arb_dev_destroy(mem);
	ck_assert_int_eq(arb_dev_open_mem(size, &mem), 0);
	arb_mkfs_opts_default(&mo);
	mo.nodesize = 4096;
	d = tu_dev_borrow(mem);
	ck_assert_int_eq(arb_mkfs(d, &mo), 0);
	arb_dev_destroy(d);
	if (log) {
		ck_assert_int_eq(arb_dev_log_wrap(mem, log), 0);
		mem = *log;
	}
	fs_open_now();
}

/* nfiles files in 8 directories d0..d7 of dir: small ones inline, every
 * seventh with an 8 KiB extent of its own */
static void fill_tree(uint64_t dir, int nfiles)
{
	char name[32], data[8192];

	memset(data, 'x', sizeof(data));
	for (int d = 0; d < 8; d++) {
		struct arb_stat st;

		snprintf(name, sizeof(name), "d%d", d);
		ck_assert_int_eq(arb_fs_mkdir(fs, dir, name, 0755, &cred, &st),
				 0);
		for (int i = d; i < nfiles; i += 8) {
			uint64_t f;

			snprintf(name, sizeof(name), "file-%06d", i);
			f = mkfile(st.ino, name, i % 7 ? name : NULL);
			if (i % 7 == 0)
				ck_assert_int_eq(arb_fs_write(fs, f, data,
							      sizeof(data), 0),
						 (ssize_t)sizeof(data));
		}
	}
}

/* a write of data to every file of directories d<from>..d<to - 1> of dir
 * (as fill_tree made them) */
static void touch_files(uint64_t dir, int from, int to, int nfiles,
			const char *data)
{
	char name[32];

	for (int d = from; d < to; d++) {
		uint64_t dd;

		snprintf(name, sizeof(name), "d%d", d);
		dd = lookup(dir, name);
		for (int i = d; i < nfiles; i += 8) {
			snprintf(name, sizeof(name), "file-%06d", i);
			ck_assert_int_eq(arb_fs_write(fs, lookup(dd, name),
						      data, strlen(data), 0),
					 (ssize_t)strlen(data));
		}
	}
}

/* one batch of at most nodes tree nodes of the cleaning of tree id:
 * 1 done, 2 more to do */
static int clean_batch(uint64_t id, uint64_t nodes)
{
	const struct arb_drop_budget b = { nodes, 0, NULL, NULL };
	int ret;

	fs_lock(fs);
	ret = fs_subvol_clean_batch(fs, id, &b);
	fs_unlock(fs);
	ck_assert_msg(ret == 1 || ret == 2, "clean batch of %llu: %d",
		      (unsigned long long)id, ret);
	return ret;
}

static int clean_fn(void *ctx, const struct arb_subvol_info *info)
{
	struct arb_subvol_info *want = ctx;

	if (info->id == want->id)
		*want = *info;
	return 0;
}

/*
 * A big snapshot deleted and cleaned in many small batches, each
 * committed and checked, with writes to its source and to a snapshot
 * sharing its nodes (their counts change between batches), snapshots
 * made and deleted, and that second snapshot deleted and cleaned in turns
 * with the first, and a remount now and then: fsck is clean at every
 * commit, the progress only grows, and the usage comes back to where it
 * was before the snapshots.
 */
START_TEST(test_clean_batches)
{
	int nfiles = TU_SCALE(3000, 20000), batches = 0, b2 = 0;
	struct arb_fs_usage u0, u1, u2;
	struct arb_subvol_info info;
	uint64_t s1, s2, id1, id2, src, seed = tu_seed("clean batches");
	uint64_t last_nodes = 0;
	unsigned last_pm = 0;
	int r1 = 2, r2 = 2;
	char name[32];

	small_nodes_fs(256 * MiB, NULL);
	src = subvol(ROOT, "src");
	fill_tree(src, nfiles);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_fs_usage(fs, &u0), 0);

	/* s1: a snapshot of src, each file of it rewritten (its nodes its
	 * own), half of them before s2 was taken of it: s1 shares those
	 * with s2, which changes while s1 is cleaned */
	s1 = snap(src, ROOT, "s1", 0);
	id1 = arb_inum_tree(s1);
	touch_files(s1, 0, 4, nfiles, "s1");
	s2 = snap(s1, ROOT, "s2", 0);
	id2 = arb_inum_tree(s2);
	touch_files(s1, 4, 8, nfiles, "s1");
	ck_assert_int_eq(arb_subvol_delete(fs, ROOT, "s1"), 0);
	ck_assert_int_eq(arb_fs_usage(fs, &u1), 0);
	ck_assert_uint_gt(USED(u1), USED(u0));
	check_clean();

	while (r1 == 2 || r2 == 2) {
		/* s1 in batches; s2 deleted after 20, then the two in
		 * turns */
		if (r1 == 2)
			r1 = clean_batch(id1, 2 + tu_rand_range(&seed, 6));
		batches++;
		ck_assert_msg(batches > 20 || r1 == 2,
			      "s1 cleaned in %d batches", batches);
		/* the check of a mounted filesystem: the committed trees,
		 * whatever the running transaction dropped since */
		if (batches % 7 == 3)
			check_clean();
		if (batches == 20)
			ck_assert_int_eq(arb_subvol_delete(fs, ROOT, "s2"), 0);
		if (batches > 20 && r2 == 2) {
			r2 = clean_batch(id2, 2 + tu_rand_range(&seed, 6));
			b2++;
		}
		/* the source and s2 change meanwhile: nodes s2 shares
		 * with s1 shadowed, their counts changed */
		snprintf(name, sizeof(name), "file-%06d",
			 (int)tu_rand_range(&seed, (uint64_t)nfiles / 8) * 8);
		ck_assert_int_eq(arb_fs_write(fs, lookup(lookup(src, "d0"),
							  name),
					      "chg", 3, 0),
				 3);
		if (batches < 20) {
			snprintf(name, sizeof(name), "file-%06d",
				 (int)tu_rand_range(&seed,
						    (uint64_t)nfiles / 8) * 8 +
					 1);
			ck_assert_int_eq(arb_fs_write(fs,
						      lookup(lookup(s2, "d1"),
							     name),
						      "chg2", 4, 0),
					 4);
		}
		if (batches % 10 == 5) {
			/* a snapshot made and deleted meanwhile */
			snprintf(name, sizeof(name), "t%d", batches);
			snap(src, ROOT, name, 0);
			ck_assert_int_eq(arb_subvol_delete(fs, ROOT, name), 0);
		}
		ck_assert_int_eq(arb_fs_sync(fs), 0);
		check_clean();
		if (r1 == 2) {
			info = (struct arb_subvol_info){ .id = id1 };
			ck_assert_int_eq(arb_subvol_list(fs, clean_fn, &info),
					 0);
			ck_assert(info.flags & ARB_SUBVOL_DELETED);
			ck_assert_uint_gt(info.clean_nodes, last_nodes);
			ck_assert_uint_ge(info.clean_permille, last_pm);
			ck_assert_uint_le(info.clean_freed, info.clean_nodes);
			last_nodes = info.clean_nodes;
			last_pm = info.clean_permille;
		}
		if (batches % 16 == 0)
			reopen();
	}
	ck_assert_int_ge(batches, 40);
	ck_assert_int_ge(b2, 5);
	ck_assert_uint_gt(last_pm, 500);
	/* the snapshots made meanwhile */
	ck_assert_int_eq(arb_subvol_wait(fs, 0), 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_fs_usage(fs, &u2), 0);
	/* src holds what it held (a few leaves rewritten, the extents of
	 * the files written to: a block per batch at most) */
	ck_assert_msg(USED(u2) <= USED(u0) + 512 * 1024 +
					  (uint64_t)batches * 4096,
		      "used %llu after, %llu before the snapshots",
		      (unsigned long long)USED(u2),
		      (unsigned long long)USED(u0));
	ck_assert_uint_eq(arb_super_s_incompat(&fs->vol->super) &
				  ARB_INCOMPAT_DROP_PROGRESS,
			  0);
	fprintf(stderr, "clean batches: %d of s1, %d of s2, %llu nodes\n",
		batches, b2, (unsigned long long)last_nodes);
	reopen();
}
END_TEST

/*
 * kill -9 between (and inside) the batches: every flush point of a
 * cleaning in small committed batches opens, checks clean (the tree
 * partly dropped), and the cleaner then finishes with the usage it would
 * have had.
 */
START_TEST(test_clean_crash_points)
{
	int nfiles = TU_SCALE(1200, 4000);
	struct arb_fs_usage end, u;
	struct arb_dev *log;
	size_t nflush, *fl, start;
	uint64_t id, seed = tu_seed("clean crash");
	unsigned points = 0, mid = 0;

	small_nodes_fs(64 * MiB, &log);
	fill_tree(ROOT, nfiles);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	id = arb_inum_tree(snap(ROOT, ROOT, "s", 0));
	/* half of it its own */
	touch_files(lookup(ROOT, "s"), 0, 4, nfiles, "own");
	ck_assert_int_eq(arb_subvol_delete(fs, ROOT, "s"), 0);
	start = arb_dev_log_len(log);
	while (clean_batch(id, 8) == 2)
		ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_fs_usage(fs, &end), 0);
	nflush = arb_dev_log_flushes(log, NULL, 0);
	fl = calloc(nflush, sizeof(*fl));
	ck_assert_uint_eq(arb_dev_log_flushes(log, fl, nflush), nflush);
	for (size_t i = 0; i < nflush; i++) {
		for (int mode = 0; mode < 3; mode++) {
			size_t n = mode == 0 ? fl[i] + 1 : fl[i];
			struct arb_dev *dev;
			struct arb_fs *f = NULL;
			const char *why = NULL;
			struct arb_drop_state ds;

			if (fl[i] < start || (mode && i % TU_SCALE(3, 1)))
				continue;
			if (mode && i + 1 < nflush)
				n = fl[i] + 1 + tu_rand_range(&seed,
						fl[i + 1] - fl[i]);
			ck_assert_int_eq(arb_dev_log_replay(log, n, mode, seed,
							    &dev),
					 0);
			ck_assert_msg(arb_fs_open(dev, &fopts, &f, &why) == 0,
				      "point %zu mode %d: open: %s", n, mode,
				      why ? why : "");
			ck_assert_msg(arb_fs_check(f, stderr) == 0,
				      "point %zu mode %d: check", n, mode);
			fs_lock(f);
			ck_assert_int_eq(arb_root_drop_state(f->vol, id, &ds),
					 0);
			fs_unlock(f);
			if (ds.started)
				mid++;
			/* the cleaner goes on from there */
			ck_assert_int_eq(arb_subvol_wait(f, 0), 0);
			ck_assert_msg(arb_fs_check(f, stderr) == 0,
				      "point %zu mode %d: check after", n,
				      mode);
			ck_assert_int_eq(arb_fs_usage(f, &u), 0);
			ck_assert_msg(USED(u) <= USED(end) + 64 * 1024 &&
					      USED(u) + 64 * 1024 >= USED(end),
				      "point %zu: used %llu, %llu without the "
				      "crash",
				      n, (unsigned long long)USED(u),
				      (unsigned long long)USED(end));
			ck_assert_int_eq(arb_fs_close(f), 0);
			points++;
		}
	}
	free(fl);
	fprintf(stderr, "clean crash: %u points, %u mid-cleaning\n", points,
		mid);
	ck_assert_uint_ge(mid, 10);
}
END_TEST

/*
 * A device whose host cache starts cold: cached only what was written or
 * fetched (arb_dev_prefetch: reads of kind ARB_IO_OTHER) since it was
 * opened.  Node reads of anything else count as reads that waited; reads
 * served by arb_dev_read_cached as cached.
 */
static struct cold_dev {
	struct arb_dev dev;
	struct arb_dev *lower;
	uint64_t *warm;          /* a bit per 4 KiB sector */
	uint64_t fetches, waited, cached;
} cold;

static bool cold_is_warm(uint64_t off, size_t len)
{
	for (uint64_t o = off; o < off + len; o += 4096)
		if (!(cold.warm[o / 4096 / 64] & (1ULL << (o / 4096 % 64))))
			return false;
	return true;
}

static void cold_warm(uint64_t off, size_t len)
{
	for (uint64_t o = off; o < off + len; o += 4096)
		cold.warm[o / 4096 / 64] |= 1ULL << (o / 4096 % 64);
}

static int cold_pread(struct arb_dev *d, void *buf, size_t len, uint64_t off,
		      enum arb_io_kind kind)
{
	(void)d;
	if (kind == ARB_IO_OTHER) {
		cold.fetches++;
		cold_warm(off, len);
	} else if (kind == ARB_IO_NODE && !cold_is_warm(off, len)) {
		cold.waited++;
		cold_warm(off, len);
	}
	return arb_dev_read(cold.lower, buf, len, off, kind);
}

static int cold_pwrite(struct arb_dev *d, const void *buf, size_t len,
		       uint64_t off, enum arb_io_kind kind)
{
	(void)d;
	cold_warm(off, len);
	return arb_dev_write(cold.lower, buf, len, off, kind);
}

static int cold_flush(struct arb_dev *d)
{
	(void)d;
	return arb_dev_flush(cold.lower);
}

/* counts the reads it serves, as the pread of a warm node would */
static int cold_read_cached(struct arb_dev *d, void *buf, size_t len,
			    uint64_t off, enum arb_io_kind kind)
{
	(void)d;
	if (!cold_is_warm(off, len))
		return 0;
	cold.cached++;
	return arb_dev_read(cold.lower, buf, len, off, kind) ? -EIO : 1;
}

static void cold_destroy(struct arb_dev *d)
{
	(void)d;
	free(cold.warm);
	cold.warm = NULL;
}

static const struct arb_dev_ops cold_ops = {
	.pread = cold_pread,
	.pwrite = cold_pwrite,
	.flush = cold_flush,
	.destroy = cold_destroy,
	.read_cached = cold_read_cached,
};

/* a snapshot of nfiles files, each with a block of its own; *u0: the
 * usage before it (what cleaning it gives back to) */
static uint64_t own_snapshot(int nfiles, struct arb_fs_usage *u0)
{
	uint64_t id;

	small_nodes_fs(64 * MiB, NULL);
	fill_tree(ROOT, nfiles);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_fs_usage(fs, u0), 0);
	id = arb_inum_tree(snap(ROOT, ROOT, "s", 0));
	touch_files(lookup(ROOT, "s"), 0, 8, nfiles, "own");
	return id;
}

static void space_back(struct arb_fs *f, const struct arb_fs_usage *u0)
{
	struct arb_fs_usage u1;

	ck_assert_int_eq(arb_fs_usage(f, &u1), 0);
	ck_assert_msg(USED(u1) <= USED(*u0) + 256 * 1024,
		      "used %llu after, %llu before the snapshot",
		      (unsigned long long)USED(u1),
		      (unsigned long long)USED(*u0));
}

/*
 * The cleaner's batches do not wait for a disk: with a host cache that
 * holds half of the image, a batch reads what it holds (one read each)
 * and stops before any other node (of the dropped tree or of the extent
 * tree), names it (arb_drop_budget.fetch) with the siblings the walk
 * visits next that the node cache lacks, and the next one goes on once
 * they were fetched; a batch never stops for a node the host holds,
 * almost no read under the lock waits (only where the walk cannot stop: the first node
 * of a batch, the first child of a node), and the result is the same:
 * the check is clean, the space comes back.
 */
START_TEST(test_clean_nowait)
{
	struct arb_drop_fetch fetch = { { 0 }, 0 };
	const struct arb_drop_budget b = { 0, 0, NULL, &fetch };
	uint64_t id, siblings = 0;
	struct arb_fs_usage u0;
	int batches = 0, ret = 2;
	const char *why = NULL;

	id = own_snapshot(TU_SCALE(1500, 6000), &u0);
	ck_assert_int_eq(arb_subvol_delete(fs, ROOT, "s"), 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_fs_close(fs), 0);

	/* nothing cached: the node cache empty, the host's cold */
	memset(&cold, 0, sizeof(cold));
	cold.lower = mem;
	cold.dev.ops = &cold_ops;
	cold.dev.size = mem->size;
	cold.warm = calloc(mem->size / 4096 / 64 + 1, sizeof(uint64_t));
	ck_assert_ptr_nonnull(cold.warm);
	/* a host that keeps part of the image: every other 1 MiB */
	for (size_t i = 0; i < mem->size / 4096 / 64; i += 8)
		for (size_t j = i; j < i + 4; j++)
			cold.warm[j] = ~0ULL;
	ck_assert_int_eq(arb_fs_open(&cold.dev, &fopts, &fs, &why), 0);
	cold.waited = 0; /* the open's own reads */

	while (ret == 2) {
		fs_lock(fs);
		ret = fs_subvol_clean_batch(fs, id, &b);
		fs_unlock(fs);
		ck_assert_msg(ret == 1 || ret == 2, "batch %d: %d", batches,
			      ret);
		batches++;
		if (ret == 2) {
			/* no other limit: only a node to fetch ends it, one
			 * the host's cache does not hold; then its siblings
			 * the node cache does not hold */
			ck_assert_uint_ne(fetch.nr, 0);
			ck_assert_uint_le(fetch.nr, ARB_DROP_FETCH);
			ck_assert(!cold_is_warm(fetch.addr[0],
						fs->vol->nodesize));
			for (unsigned i = 0; i < fetch.nr; i++) {
				ck_assert_uint_ne(fetch.addr[i], 0);
				ck_assert(!arb_node_is_cached(fs->vol,
							      fetch.addr[i]));
				arb_dev_prefetch(fs->vol->dev, fetch.addr[i],
						 fs->vol->nodesize);
			}
			siblings += fetch.nr - 1;
		}
		if (batches % 50 == 0)
			ck_assert_int_eq(arb_fs_sync(fs), 0);
	}
	fprintf(stderr, "clean nowait: %d batches, %llu fetched (%llu as "
			"siblings), %llu waited, %llu read from the cache in "
			"one read\n",
		batches, (unsigned long long)cold.fetches,
		(unsigned long long)siblings,
		(unsigned long long)cold.waited,
		(unsigned long long)cold.cached);
	/* nodes found in the host's cache were read from it at once (one
	 * read: the batch went on) */
	ck_assert_uint_gt(cold.cached, 0);
	ck_assert_uint_ge(cold.fetches, 10);
	ck_assert_msg(cold.waited * 4 < cold.fetches,
		      "%llu reads waited, %llu fetched",
		      (unsigned long long)cold.waited,
		      (unsigned long long)cold.fetches);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	check_clean();
	space_back(fs, &u0);
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs = NULL;
	fs_open_now();
	check_clean();
}
END_TEST

/* the first 16 KiB of file g, written 5 ms after it starts */
static void *late_head(void *arg)
{
	static uint8_t head[16384];
	const struct timespec ms5 = { 0, 5 * 1000 * 1000 };

	memset(head, 'a', sizeof(head));
	nanosleep(&ms5, NULL);
	ck_assert_int_eq(arb_fs_write(fs, *(uint64_t *)arg, head, sizeof(head),
				      0),
			 (ssize_t)sizeof(head));
	return NULL;
}

/*
 * Writeback out of order: the kernel sends a file's pages in several
 * WRITE requests that daemon threads may run in any order.  A snapshot
 * taken after the tail of a new file arrived and before its head held
 * a size covering 16 KiB never written (zeros: snapstress.sh).  The
 * snapshot waits (its lock let go) while a file of its source has a gap
 * younger than ARB_SNAP_GAP_WAIT_NS, so it sees the head too; a gap that
 * stays (a sparse write) delays it by that much at most.
 */
/* file f (name) has its tail: snapshot ROOT as sname while its head
 * comes 5 ms later; the snapshot's copy must have both */
static void snap_late_head(uint64_t f, const char *sname, const char *name)
{
	static uint8_t buf[16749];
	pthread_t th;
	uint64_t s;

	ck_assert_int_eq(pthread_create(&th, NULL, late_head, &f), 0);
	s = snap(ROOT, ROOT, sname, 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_int_eq(arb_fs_read(fs, lookup(s, name), buf, sizeof(buf), 0),
			 (ssize_t)sizeof(buf));
	for (size_t i = 0; i < sizeof(buf); i++)
		ck_assert_msg(buf[i] == (i < 16384 ? 'a' : 'b'),
			      "snapshot's %s: byte %zu is %d", name, i,
			      buf[i]);
}

START_TEST(test_snapshot_waits_for_gap)
{
	uint8_t tail[365], buf[4096];
	uint64_t f, sp, s;

	memset(tail, 'b', sizeof(tail));
	f = mkfile(ROOT, "g", NULL);
	ck_assert_int_eq(arb_fs_write(fs, f, tail, sizeof(tail), 16384),
			 (ssize_t)sizeof(tail));
	snap_late_head(f, "s", "g");

	/* the same with a commit between the tail and the snapshot: the
	 * commit wrote the tail out, the gap is still young and waited for */
	f = mkfile(ROOT, "g2", NULL);
	ck_assert_int_eq(arb_fs_write(fs, f, tail, sizeof(tail), 16384),
			 (ssize_t)sizeof(tail));
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	snap_late_head(f, "s1", "g2");

	/* a sparse file: its hole stays, the snapshot is taken anyway */
	sp = mkfile(ROOT, "sparse", NULL);
	ck_assert_int_eq(arb_fs_write(fs, sp, tail, sizeof(tail), 1 << 20),
			 (ssize_t)sizeof(tail));
	s = snap(ROOT, ROOT, "s2", 0);
	ck_assert_int_eq(arb_fs_read(fs, lookup(s, "sparse"), buf, 4096,
				     (1 << 20) - 2048),
			 2048 + 365);
	for (size_t i = 0; i < 2048; i++)
		ck_assert_uint_eq(buf[i], 0);
	ck_assert_uint_eq(buf[2048], 'b');
}
END_TEST

/* look up every file fill_tree made under dir */
static void lookup_files(uint64_t dir, int nfiles)
{
	char name[32];

	for (int d = 0; d < 8; d++) {
		uint64_t dd;

		snprintf(name, sizeof(name), "d%d", d);
		dd = lookup(dir, name);
		ck_assert_uint_ne(dd, 0);
		for (int i = d; i < nfiles; i += 8) {
			snprintf(name, sizeof(name), "file-%06d", i);
			ck_assert_uint_ne(lookup(dd, name), 0);
		}
	}
}

/*
 * Cleaning does not push everyone else's nodes out of the node cache:
 * the nodes it frees go first in line for eviction (arb_node_put_cold).
 * A cache twice the size of what the lookups of the source's files read
 * holds them through the cleaning of a snapshot as large as the source;
 * without that, the cleaner's nodes, each read once, evicted them all.
 */
START_TEST(test_clean_keeps_cache)
{
	int n = TU_SCALE(1500, 6000);
	uint64_t id, m0, cold, after;
	struct arb_fs_usage u0;

	id = own_snapshot(n, &u0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs_open_now();
	m0 = fs->vol->cache.misses;
	lookup_files(ROOT, n);
	cold = fs->vol->cache.misses - m0;
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fopts.cache_bytes = 2 * cold * 4096;
	fs_open_now();
	lookup_files(ROOT, n);
	ck_assert_int_eq(arb_subvol_delete(fs, ROOT, "s"), 0);
	ck_assert_int_eq(arb_subvol_wait(fs, id), 0);
	m0 = fs->vol->cache.misses;
	lookup_files(ROOT, n);
	after = fs->vol->cache.misses - m0;
	fprintf(stderr, "clean keeps cache: %llu nodes read cold, %llu after "
			"the cleaning\n",
		(unsigned long long)cold, (unsigned long long)after);
	ck_assert_msg(after * 10 <= cold,
		      "%llu of the source's %llu nodes evicted by the cleaning",
		      (unsigned long long)after, (unsigned long long)cold);
	space_back(fs, &u0);
}
END_TEST

/*
 * With the daemon's threads (a commit thread and a cleaner thread): the
 * cleaner cleans, arb_subvol_wait only waits, and returns once the
 * commit that ends the cleaning is on the device: an image copied at
 * that instant (a crash then) has neither the subvolume nor its orphan,
 * and its space is back.
 */
START_TEST(test_cleaner_thread)
{
	struct arb_fs_opts o = fopts;
	struct arb_fs_usage u0;
	struct arb_dev *copy;
	struct arb_fs *f2;
	struct counts c = { 0 };
	const char *why = NULL;
	uint64_t id;

	id = own_snapshot(TU_SCALE(800, 4000), &u0);
	ck_assert_int_eq(arb_fs_close(fs), 0);
	o.commit_interval = 30;
	ck_assert_int_eq(arb_fs_open(tu_dev_borrow(mem), &o, &fs, &why), 0);
	ck_assert(fs->thread_running && fs->cleaner_running);
	ck_assert_int_eq(arb_subvol_delete(fs, ROOT, "s"), 0);
	ck_assert_int_eq(arb_subvol_wait(fs, id), 0);
	ck_assert_int_eq(arb_subvol_wait(fs, 0), 0);

	ck_assert_int_eq(arb_dev_open_mem(mem->size, &copy), 0);
	memcpy(arb_dev_mem_data(copy), arb_dev_mem_data(mem), mem->size);
	ck_assert_int_eq(arb_fs_open(copy, &fopts, &f2, &why), 0);
	ck_assert_int_eq(arb_subvol_list(f2, count_fn, &c), 0);
	ck_assert_int_eq(c.n, 1);
	ck_assert_int_eq(c.deleted, 0);
	ck_assert_int_eq(arb_fs_check(f2, stderr), 0);
	space_back(f2, &u0);
	ck_assert_int_eq(arb_fs_close(f2), 0);
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs = NULL;
	fs_open_now();
	check_clean();
}
END_TEST

/* a DROP_PROGRESS naming a key that is not in the tree (a hostile
 * image): the check says so, the cleaner refuses (-EUCLEAN), no crash */
START_TEST(test_clean_bad_progress)
{
	struct arb_key k;
	struct arb_drop_progress dp;
	const struct arb_drop_budget b = { 4, 0, NULL, NULL };
	struct arb_txn *t;
	uint64_t id;
	int ret;

	small_nodes_fs(64 * MiB, NULL);
	fill_tree(ROOT, 1200);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	id = arb_inum_tree(snap(ROOT, ROOT, "s", 0));
	touch_files(lookup(ROOT, "s"), 0, 8, 1200, "own");
	ck_assert_int_eq(arb_subvol_delete(fs, ROOT, "s"), 0);
	ck_assert_int_eq(clean_batch(id, 8), 2);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	check_clean();
	fs_lock(fs);
	ck_assert_int_eq(arb_root_drop_progress(fs->vol, id, &dp), 0);
	k = (struct arb_key){ (uint64_t)1 << 39, ARB_INODE_ITEM, 7 };
	arb_key_to_disk(&dp.d_key, &k);
	ck_assert_int_eq(arb_txn_begin(fs->vol, &t), 0);
	k = (struct arb_key){ id, ARB_DROP_PROGRESS, 0 };
	ck_assert_int_eq(arb_update_item(t, fs->vol->tree_root, &k, &dp,
					 sizeof(dp)),
			 0);
	arb_txn_end(t);
	fs->txn_dirty = true;
	fs_unlock(fs);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_ne(arb_fs_check(fs, NULL), 0);
	fs_lock(fs);
	ret = fs_subvol_clean_batch(fs, id, &b);
	fs_unlock(fs);
	ck_assert_int_eq(ret, -EUCLEAN);
	(void)arb_fs_close(fs);
	fs = NULL;
}
END_TEST

/*
 * A full filesystem with a snapshot: unlinking every file needs space
 * (the snapshot keeps the old leaves, the source's are copied).  Those
 * that cannot be served fail with ENOSPC, the filesystem never turns
 * read-only, and deleting the snapshot lets the rest succeed.
 */
START_TEST(test_full_with_snapshot)
{
	struct arb_mkfs_opts mo;
	struct arb_dev *d;
	struct arb_stat st;
	char name[32];
	int n, i, ok = 0, nospc = 0, ret;

	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs = NULL;
	arb_dev_destroy(mem);
	ck_assert_int_eq(arb_dev_open_mem(64 * MiB, &mem), 0);
	arb_mkfs_opts_default(&mo);
	d = tu_dev_borrow(mem);
	ck_assert_int_eq(arb_mkfs(d, &mo), 0);
	arb_dev_destroy(d);
	fs_open_now();

	for (n = 0;; n++) {
		snprintf(name, sizeof(name), "f%06d", n);
		ret = arb_fs_mknod(fs, ROOT, name, S_IFREG | 0644, 0, &cred,
				   &st);
		if (ret == -ENOSPC)
			break;
		ck_assert_int_eq(ret, 0);
		ret = arb_fs_write(fs, st.ino, name, 7, 0);
		if (ret == -ENOSPC)
			break;
		ck_assert_int_eq(ret, 7);
	}
	ck_assert_int_gt(n, 1000);
	ret = arb_fs_sync(fs);
	ck_assert(ret == 0 || ret == -ENOSPC);
	ret = arb_subvol_snapshot(fs, ROOT, ROOT, "snap", 0, &cred, &st);
	if (ret == -ENOSPC) {
		/* full to the last node: make room for the snapshot */
		for (i = 0; i < 200; i++) {
			snprintf(name, sizeof(name), "f%06d", i);
			ck_assert_int_eq(arb_fs_unlink(fs, ROOT, name), 0);
		}
		ck_assert_int_eq(arb_subvol_snapshot(fs, ROOT, ROOT, "snap",
						     0, &cred, &st),
				 0);
	} else {
		ck_assert_int_eq(ret, 0);
		i = 0;
	}
	for (; i < n; i++) {
		snprintf(name, sizeof(name), "f%06d", i);
		ret = arb_fs_unlink(fs, ROOT, name);
		if (ret == 0)
			ok++;
		else {
			ck_assert_int_eq(ret, -ENOSPC);
			nospc++;
		}
	}
	fprintf(stderr, "full with snapshot: %d files, %d unlinked, %d "
		"ENOSPC\n", n, ok, nospc);
	ck_assert(!fs->readonly);
	check_clean();
	ck_assert_int_eq(arb_subvol_delete(fs, ROOT, "snap"), 0);
	ck_assert_int_eq(arb_subvol_wait(fs, 0), 0);
	for (i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "f%06d", i);
		ret = arb_fs_unlink(fs, ROOT, name);
		ck_assert(ret == 0 || ret == -ENOENT);
	}
	ck_assert(!fs->readonly);
}
END_TEST

/* the check looks into every subvolume and at every link */
START_TEST(test_check_subvols)
{
	struct arb_check_result r;
	struct arb_inode in;
	struct arb_txn *t;
	struct arb_key k;
	uint64_t sv, f;
	bool nlink = false, link = false;

	sv = subvol(ROOT, "sv");
	f = mkfile(sv, "f", "data");
	snap(sv, ROOT, "snap", ARB_SUBVOL_RDONLY);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	check_clean();

	/* damage inside subvolume 256, and to the link of 257 */
	fs_lock(fs);
	ck_assert_int_eq(fs_inode_read(fs, f, &in), 0);
	ck_assert_int_eq(arb_txn_begin(fs->vol, &t), 0);
	in.nlink = 5;
	ck_assert_int_eq(fs_inode_write(fs, t, &in), 0);
	k = (struct arb_key){ ARB_FS_TREE_ID, ARB_ROOT_REF, 257 };
	ck_assert_int_eq(arb_del_item(t, fs->vol->tree_root, &k), 0);
	arb_txn_end(t);
	fs->txn_dirty = true;
	fs_unlock(fs);
	ck_assert_int_eq(arb_fs_sync(fs), 0);

	memset(&r, 0, sizeof(r));
	ck_assert_int_eq(arb_fs_check_records(fs, &r, NULL), -EUCLEAN);
	for (size_t i = 0; i < r.nr; i++) {
		if (r.pb[i].id == ARB_PB_NLINK) {
			ck_assert_uint_eq(r.pb[i].tree, 256);
			ck_assert_uint_eq(r.pb[i].ino, arb_inum_obj(f));
			nlink = true;
		}
		if (r.pb[i].id == ARB_PB_SUBVOL_LINK) {
			ck_assert_msg(strstr(r.pb[i].detail, "subvolume 257"),
				      "%s", r.pb[i].detail);
			link = true;
		}
	}
	ck_assert(nlink && link);
	arb_check_result_free(&r);
	/* not for the teardown's check */
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs = NULL;
}
END_TEST

/* exclusive and shared bytes, exactly, from the reference counts */
START_TEST(test_usage)
{
	struct arb_subvol_usage u, us;
	char big[4096];
	uint64_t sv, f, s;
	int i;

	memset(big, 'u', sizeof(big));
	sv = subvol(ROOT, "sv");
	f = mkfile(sv, "f", NULL);
	for (i = 0; i < 256; i++)
		ck_assert_int_eq(arb_fs_write(fs, f, big, sizeof(big),
					      (uint64_t)i * 4096),
				 4096);
	ck_assert_int_eq(arb_subvol_usage(fs, sv, &u), 0);
	ck_assert_uint_eq(u.exclusive, 1 * MiB);
	ck_assert_uint_eq(u.shared, 0);
	ck_assert_uint_gt(u.meta_exclusive, 0);
	ck_assert_uint_eq(u.meta_shared, 0);

	/* a snapshot shares all of it */
	s = snap(sv, ROOT, "s", ARB_SUBVOL_RDONLY);
	ck_assert_int_eq(arb_subvol_usage(fs, sv, &u), 0);
	ck_assert_int_eq(arb_subvol_usage(fs, s, &us), 0);
	ck_assert_uint_eq(u.exclusive, 0);
	ck_assert_uint_eq(u.shared, 1 * MiB);
	ck_assert_uint_eq(us.exclusive, 0);
	ck_assert_uint_eq(us.shared, 1 * MiB);

	/* new data in the source is its own; what it replaced is the
	 * snapshot's own now */
	for (i = 0; i < 64; i++)
		ck_assert_int_eq(arb_fs_write(fs, f, big, sizeof(big),
					      (uint64_t)i * 4096),
				 4096);
	ck_assert_int_eq(arb_fs_write(fs, mkfile(sv, "g", NULL), big,
				      sizeof(big), 0),
			 4096);
	ck_assert_int_eq(arb_subvol_usage(fs, sv, &u), 0);
	ck_assert_int_eq(arb_subvol_usage(fs, s, &us), 0);
	ck_assert_uint_eq(u.exclusive, 256 * 1024 + 4096);
	/* the old extent is whole (1 MiB): still used by both */
	ck_assert_uint_eq(u.shared, 1 * MiB);
	ck_assert_uint_eq(us.shared, 1 * MiB);
	ck_assert_uint_eq(us.exclusive, 0);
	ck_assert_uint_gt(u.meta_exclusive, 0);

	/* deleting the source leaves the snapshot all of it */
	ck_assert_int_eq(arb_subvol_delete(fs, ROOT, "sv"), 0);
	ck_assert_int_eq(arb_subvol_wait(fs, 0), 0);
	ck_assert_int_eq(arb_subvol_usage(fs, s, &us), 0);
	ck_assert_uint_eq(us.exclusive, 1 * MiB);
	ck_assert_uint_eq(us.shared, 0);
	ck_assert_uint_eq(us.meta_shared, 0);
}
END_TEST

/*
 * Hundreds of snapshots (3,000 at full scale; bench/fsck-snapshots.sh
 * checks an image with 1,000) of a changing tree, some written to, then
 * deleted in random order: fsck clean with all of them, usage back at
 * the end.
 */
START_TEST(test_many_snapshots)
{
	const int nsnap = TU_SCALE(400, 3000), nfiles = 40;
	uint64_t seed = tu_seed("many_snapshots"), *ids, d, f;
	struct arb_fs_usage u0, u1;
	struct arb_stat st;
	char name[32], data[8192];
	int i, j, *order;

	ids = calloc((size_t)nsnap, sizeof(*ids));
	order = calloc((size_t)nsnap, sizeof(*order));
	ck_assert(ids && order);
	memset(data, 'a', sizeof(data));
	for (i = 0; i < nfiles; i++) {
		snprintf(name, sizeof(name), "f%d", i);
		f = mkfile(ROOT, name, NULL);
		ck_assert_int_eq(arb_fs_write(fs, f, data, sizeof(data), 0),
				 (ssize_t)sizeof(data));
	}
	ck_assert_int_eq(arb_fs_mkdir(fs, ROOT, "snaps", 0755, &cred, &st),
			 0);
	d = st.ino;
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_fs_usage(fs, &u0), 0);

	for (i = 0; i < nsnap; i++) {
		/* the source changes between snapshots */
		snprintf(name, sizeof(name), "f%d",
			 (int)tu_rand_range(&seed, (uint64_t)nfiles));
		data[0] = (char)('a' + i % 26);
		ck_assert_int_eq(arb_fs_write(fs, lookup(ROOT, name), data,
					      sizeof(data), 0),
				 (ssize_t)sizeof(data));
		snprintf(name, sizeof(name), "s%d", i);
		ids[i] = arb_inum_tree(snap(ROOT, d, name,
					    i % 2 ? ARB_SUBVOL_RDONLY : 0));
		order[i] = i;
		/* and some snapshots too: nodes of their own */
		if (i % 14 == 0) { /* even: writable */
			f = lookup(lookup(d, name), "f0");
			ck_assert_int_eq(arb_fs_write(fs, f, "own", 3, 100), 3);
		}
	}
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_fs_usage(fs, &u1), 0);
	ck_assert_uint_gt(USED(u1), USED(u0));
	reopen(); /* fsck with every snapshot, before and after a reopen */

	/* the contents of one snapshot in the middle */
	snprintf(name, sizeof(name), "s%d", nsnap / 2);
	f = lookup(lookup(lookup(ROOT, "snaps"), name), "f0");
	ck_assert_int_eq(arb_fs_getattr(fs, f, &st), 0);
	ck_assert_uint_eq(st.size, sizeof(data));

	for (i = nsnap - 1; i > 0; i--) {
		j = (int)tu_rand_range(&seed, (uint64_t)i + 1);
		int tmp = order[i];
		order[i] = order[j];
		order[j] = tmp;
	}
	d = lookup(ROOT, "snaps");
	for (i = 0; i < nsnap; i++) {
		snprintf(name, sizeof(name), "s%d", order[i]);
		ck_assert_int_eq(arb_subvol_delete(fs, d, name), 0);
		if (i == nsnap / 2) {
			ck_assert_int_eq(arb_subvol_wait(fs, 0), 0);
			check_clean();
		}
	}
	ck_assert_int_eq(arb_subvol_wait(fs, 0), 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_fs_usage(fs, &u1), 0);
	/* what the snapshots held is free again; the source is as big */
	ck_assert_uint_le(USED(u1), USED(u0) + 256 * 1024);
	ck_assert_int_eq(arb_fs_getattr(fs, arb_inum(ids[0], ROOT), &st),
			 -ENOENT);
	free(ids);
	free(order);
}
END_TEST

/* ---- the default subvolume ---------------------------------------------- */

static uint64_t get_default(void)
{
	uint64_t id = 0;

	ck_assert_int_eq(arb_subvol_get_default(fs, &id), 0);
	return id;
}

START_TEST(test_default)
{
	struct arb_key k = { ARB_FS_TREE_ID, ARB_SUBVOL_ITEM, 0 };
	uint64_t sv, ro, sv_id, ro_id;

	/* a new filesystem: tree 5, and setting it writes nothing */
	ck_assert_uint_eq(get_default(), 5);
	ck_assert_int_eq(arb_subvol_set_default(fs, 5), 0);
	ck_assert_int_eq(arb_subvol_set_default(fs, 0), 0);
	fs_lock(fs);
	ck_assert(!fs_item_exists(fs->vol->tree_root, &k));
	fs_unlock(fs);
	/* only 5 or a subvolume that exists */
	ck_assert_int_eq(arb_subvol_set_default(fs, 256), -ENOENT);
	ck_assert_int_eq(arb_subvol_set_default(fs, 1), -ENOENT);
	ck_assert_int_eq(arb_subvol_set_default(fs, 6), -ENOENT);
	ck_assert_int_eq(arb_subvol_set_default(fs, UINT64_MAX), -ENOENT);

	sv = subvol(ROOT, "sv");
	sv_id = arb_inum_tree(sv);
	mkfile(sv, "f", "in sv");
	ck_assert_int_eq(arb_subvol_set_default(fs, sv_id), 0);
	ck_assert_uint_eq(get_default(), sv_id);
	/* committed on return: a reopen (no sync) still has it */
	reopen();
	ck_assert_uint_eq(get_default(), sv_id);
	sv = lookup(ROOT, "sv");
	ck_assert_uint_eq(arb_inum_tree(sv), sv_id);

	/* the default cannot be deleted */
	ck_assert_int_eq(arb_subvol_delete(fs, ROOT, "sv"), -EBUSY);
	ck_assert_uint_eq(lookup(ROOT, "sv"), sv);

	/* a read-only snapshot may be the default; then sv may go */
	ro = snap(sv, ROOT, "ro", ARB_SUBVOL_RDONLY);
	ro_id = arb_inum_tree(ro);
	ck_assert_int_eq(arb_subvol_set_default(fs, ro_id), 0);
	ck_assert_uint_eq(get_default(), ro_id);
	ck_assert_int_eq(arb_subvol_delete(fs, ROOT, "sv"), 0);
	/* deleted (being cleaned, then gone): not a default any more */
	ck_assert_int_eq(arb_subvol_set_default(fs, sv_id), -ENOENT);
	ck_assert_int_eq(arb_subvol_wait(fs, 0), 0);
	ck_assert_int_eq(arb_subvol_set_default(fs, sv_id), -ENOENT);
	ck_assert_uint_eq(get_default(), ro_id);
	check_clean();

	/* back to tree 5 (stored as 0, as in images from before) */
	ck_assert_int_eq(arb_subvol_set_default(fs, 5), 0);
	ck_assert_uint_eq(get_default(), 5);
	ck_assert_int_eq(arb_subvol_delete(fs, ROOT, "ro"), 0);
	ck_assert_int_eq(arb_subvol_set_default(fs, ro_id), -ENOENT);
	reopen();
	ck_assert_uint_eq(get_default(), 5);

	/* a read-only filesystem refuses the change, answers the question */
	sv = subvol(ROOT, "sv2");
	ck_assert_int_eq(arb_subvol_set_default(fs, arb_inum_tree(sv)), 0);
	check_clean();
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs = NULL;
	fopts.readonly = true;
	fs_open_now();
	ck_assert_uint_eq(get_default(), arb_inum_tree(sv));
	ck_assert_int_eq(arb_subvol_set_default(fs, 5), -EROFS);
}
END_TEST

/* fsck: a default that names a subvolume being deleted */
START_TEST(test_default_check)
{
	struct arb_key k = { ARB_FS_TREE_ID, ARB_SUBVOL_ITEM, 0 };
	struct arb_check_result r;
	struct arb_subvol_item si;
	struct arb_txn *t;
	uint64_t sv, f, id;
	bool found = false;

	sv = subvol(ROOT, "sv");
	id = arb_inum_tree(sv);
	f = mkfile(sv, "f", "data");
	/* pinned: the cleaner leaves it */
	ck_assert_int_eq(arb_fs_open_inode(fs, f), 0);
	ck_assert_int_eq(arb_subvol_delete(fs, ROOT, "sv"), 0);
	check_clean();

	fs_lock(fs);
	ck_assert_int_eq(arb_lookup_item(fs->vol->tree_root, &k, &si,
					 sizeof(si)),
			 (int)sizeof(si));
	arb_set_subvol_item_s_default_id(&si, id);
	ck_assert_int_eq(arb_txn_begin(fs->vol, &t), 0);
	ck_assert_int_eq(arb_update_item(t, fs->vol->tree_root, &k, &si,
					 sizeof(si)),
			 0);
	arb_txn_end(t);
	fs->txn_dirty = true;
	fs_unlock(fs);
	ck_assert_int_eq(arb_fs_sync(fs), 0);

	memset(&r, 0, sizeof(r));
	ck_assert_int_eq(arb_fs_check_records(fs, &r, NULL), -EUCLEAN);
	for (size_t i = 0; i < r.nr; i++)
		if (r.pb[i].id == ARB_PB_SUBVOL_LINK &&
		    strstr(r.pb[i].detail, "default subvolume"))
			found = true;
	ck_assert(found);
	arb_check_result_free(&r);
	ck_assert_int_eq(arb_fs_release_inode(fs, f), 0);
	/* not for the teardown's check */
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs = NULL;
}
END_TEST

static Suite *subvol_suite(void)
{
	Suite *s = suite_create("subvol");
	TCase *tc = tcase_create("subvol");
	TCase *tc_def = tcase_create("default");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 600); /* a hang guard: ASan on a loaded machine is slow */
	tcase_add_test(tc, test_create);
	tcase_add_test(tc, test_snapshot_independent);
	tcase_add_test(tc, test_nested_link_in_snapshot);
	tcase_add_test(tc, test_delete_and_clean);
	tcase_add_test(tc, test_rmdir_empty);
	tcase_add_test(tc, test_clean_after_remount);
	tcase_add_test(tc, test_subvol_orphans);
	tcase_add_test(tc, test_snapshot_of_orphan);
	tcase_add_test(tc, test_crash_points);
	tcase_add_test(tc, test_clean_batches);
	tcase_add_test(tc, test_clean_crash_points);
	tcase_add_test(tc, test_clean_bad_progress);
	tcase_add_test(tc, test_clean_nowait);
	tcase_add_test(tc, test_clean_keeps_cache);
	tcase_add_test(tc, test_snapshot_waits_for_gap);
	tcase_add_test(tc, test_cleaner_thread);
	tcase_add_test(tc, test_full_with_snapshot);
	tcase_add_test(tc, test_check_subvols);
	tcase_add_test(tc, test_usage);
	tcase_add_test(tc, test_many_snapshots);
	suite_add_tcase(s, tc);

	tcase_add_checked_fixture(tc_def, setup, teardown);
	tcase_set_timeout(tc_def, 600);
	tcase_add_test(tc_def, test_default);
	tcase_add_test(tc_def, test_default_check);
	suite_add_tcase(s, tc_def);
	return s;
}

int main(void)
{
	return tu_run_suite(subvol_suite());
}
