/* SPDX-License-Identifier: MIT */
/*
 * test_fs.c - the POSIX layer (lib/fs/) through its public API.
 *
 * Every test formats an in-memory image, works on it, closes and reopens
 * it (the memory device is borrowed through a thin wrapper so that closing
 * the filesystem keeps the bytes), checks that everything is still there,
 * and ends with a clean arb_fs_check.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <linux/falloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "arbor/arbor.h"
#include "arbor/subvol.h"
#include "core.h"
#include "fs/fs_int.h"
#include "testutil.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif
#ifndef RENAME_WHITEOUT
#define RENAME_WHITEOUT (1 << 2)
#endif

#define ROOT ARB_ROOT_INO
#define MiB (1024ULL * 1024)


/* ---- fixture ------------------------------------------------------------ */

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

static void setup_size(uint64_t size, uint32_t nodesize)
{
	struct arb_mkfs_opts mo;
	struct arb_dev *d;

	arb_log_level = ARB_LOG_WARN;
	ck_assert_int_eq(arb_dev_open_mem(size, &mem), 0);
	arb_mkfs_opts_default(&mo);
	mo.nodesize = nodesize;
	d = tu_dev_borrow(mem);
	ck_assert_int_eq(arb_mkfs(d, &mo), 0);
	arb_dev_destroy(d);
	arb_fs_opts_default(&fopts);
	fopts.commit_interval = 0;
	fs_open_now();
}

static void setup(void)
{
	setup_size(256 * MiB, 0);
}

/* 4 KiB nodes: an xattr item holds less than 4 KiB */
static void setup_4k(void)
{
	setup_size(256 * MiB, 4096);
}

static void check_clean(void)
{
	int ret = arb_fs_check(fs, stderr);
	ck_assert_msg(ret == 0, "arb_fs_check: %d", ret);
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

/* ---- helpers ------------------------------------------------------------ */

static uint64_t mkfile(uint64_t dir, const char *name)
{
	struct arb_stat st;
	int ret = arb_fs_mknod(fs, dir, name, S_IFREG | 0644, 0, &cred, &st);
	ck_assert_msg(ret == 0, "mknod %s: %d", name, ret);
	return st.ino;
}

static uint64_t mkdir_(uint64_t dir, const char *name)
{
	struct arb_stat st;
	int ret = arb_fs_mkdir(fs, dir, name, 0755, &cred, &st);
	ck_assert_msg(ret == 0, "mkdir %s: %d", name, ret);
	return st.ino;
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

static struct arb_stat getattr(uint64_t ino)
{
	struct arb_stat st;
	ck_assert_int_eq(arb_fs_getattr(fs, ino, &st), 0);
	return st;
}

/*
 * ACL xattr value from a short text form: comma-separated "u::rwx",
 * "u:ID:rwx", "g::rwx", "g:ID:rwx", "m::rwx", "o::rwx".  Returns its size.
 */
static size_t acl_build(uint8_t *buf, const char *text)
{
	size_t n = 4;
	const char *p = text;

	buf[0] = 2;
	buf[1] = buf[2] = buf[3] = 0;
	while (*p) {
		char kind = *p;
		uint32_t id = 0xffffffffu;
		uint16_t tag = 0, perm = 0;
		char *q;

		ck_assert(p[1] == ':');
		p += 2;
		if (*p != ':') {
			id = (uint32_t)strtoul(p, &q, 10);
			p = q;
		}
		ck_assert(*p == ':');
		p++;
		switch (kind) {
		case 'u': tag = id == 0xffffffffu ? 0x01 : 0x02; break;
		case 'g': tag = id == 0xffffffffu ? 0x04 : 0x08; break;
		case 'm': tag = 0x10; break;
		case 'o': tag = 0x20; break;
		default: ck_abort_msg("acl_build: %s", text);
		}
		for (int i = 0; i < 3; i++, p++)
			if (*p != '-')
				perm |= (uint16_t)(4 >> i);
		if (*p == ',')
			p++;
		buf[n] = (uint8_t)tag;
		buf[n + 1] = (uint8_t)(tag >> 8);
		buf[n + 2] = (uint8_t)perm;
		buf[n + 3] = 0;
		for (int i = 0; i < 4; i++)
			buf[n + 4 + i] = (uint8_t)(id >> (8 * i));
		n += 8;
	}
	return n;
}

/* the stored ACL as text (acl_build's form, ids of *_OBJ left out), or ""
 * when none is stored */
static void acl_text(uint64_t ino, const char *name, char *out, size_t size)
{
	uint8_t v[512];
	ssize_t n = arb_fs_getxattr(fs, ino, name, v, sizeof(v));
	size_t o = 0;

	out[0] = 0;
	if (n == -ENODATA)
		return;
	ck_assert_int_ge(n, 4);
	ck_assert_int_eq((n - 4) % 8, 0);
	for (ssize_t i = 4; i < n; i += 8) {
		uint16_t tag = (uint16_t)(v[i] | (v[i + 1] << 8));
		uint16_t perm = (uint16_t)(v[i + 2] | (v[i + 3] << 8));
		uint32_t id = (uint32_t)v[i + 4] | ((uint32_t)v[i + 5] << 8) |
			      ((uint32_t)v[i + 6] << 16) |
			      ((uint32_t)v[i + 7] << 24);
		char ids[16] = "";
		const char *k = tag == 0x01 || tag == 0x02 ? "u"
				: tag == 0x04 || tag == 0x08 ? "g"
				: tag == 0x10		      ? "m"
							      : "o";
		if (tag == 0x02 || tag == 0x08)
			snprintf(ids, sizeof(ids), "%u", id);
		o += (size_t)snprintf(out + o, size - o, "%s%s:%s:%c%c%c",
				      o ? "," : "", k, ids,
				      perm & 4 ? 'r' : '-',
				      perm & 2 ? 'w' : '-',
				      perm & 1 ? 'x' : '-');
		ck_assert_uint_lt(o, size);
	}
}

static void pattern(uint8_t *buf, size_t len, uint64_t off, uint32_t seed)
{
	for (size_t i = 0; i < len; i++) {
		uint64_t x = (off + i) / 8 * 0x9E3779B97F4A7C15ULL + seed;
		buf[i] = (uint8_t)(x >> ((off + i) % 8 * 8));
	}
}

static void write_all(uint64_t ino, const void *buf, size_t len, uint64_t off)
{
	ssize_t n = arb_fs_write(fs, ino, buf, len, off);
	ck_assert_msg(n == (ssize_t)len, "write %zu at %llu: %zd", len,
		      (unsigned long long)off, n);
}

static void write_pattern(uint64_t ino, uint64_t off, size_t len, uint32_t seed)
{
	uint8_t *b = malloc(len);
	pattern(b, len, off, seed);
	write_all(ino, b, len, off);
	free(b);
}

static void expect_pattern(uint64_t ino, uint64_t off, size_t len,
			   uint32_t seed)
{
	uint8_t *b = malloc(len), *e = malloc(len);
	ssize_t n = arb_fs_read(fs, ino, b, len, off);
	ck_assert_msg(n == (ssize_t)len, "read %zu at %llu: %zd", len,
		      (unsigned long long)off, n);
	pattern(e, len, off, seed);
	if (memcmp(b, e, len)) {
		size_t i = 0;
		while (b[i] == e[i])
			i++;
		ck_abort_msg("byte %llu: %u != %u",
			     (unsigned long long)(off + i), b[i], e[i]);
	}
	free(b);
	free(e);
}

static void expect_zero(uint64_t ino, uint64_t off, size_t len)
{
	uint8_t *b = malloc(len);
	ssize_t n = arb_fs_read(fs, ino, b, len, off);
	ck_assert_int_eq(n, (ssize_t)len);
	for (size_t i = 0; i < len; i++)
		if (b[i])
			ck_abort_msg("byte %llu not zero",
				     (unsigned long long)(off + i));
	free(b);
}

struct names {
	char **v;
	uint64_t *off;
	size_t n, cap;
};

static int collect(void *ctx, const char *name, const struct arb_stat *st,
		   uint64_t next_off)
{
	struct names *ns = ctx;
	(void)st;
	if (ns->n == ns->cap) {
		ns->cap = ns->cap ? ns->cap * 2 : 64;
		ns->v = realloc(ns->v, ns->cap * sizeof(char *));
		ns->off = realloc(ns->off, ns->cap * sizeof(uint64_t));
	}
	ns->off[ns->n] = next_off;
	ns->v[ns->n++] = strdup(name);
	return 0;
}

/* one entry per call */
static int collect_one(void *ctx, const char *name, const struct arb_stat *st,
		       uint64_t next_off)
{
	struct names *ns = ctx;

	return ns->n ? 1 : collect(ctx, name, st, next_off);
}

static void names_free(struct names *ns)
{
	for (size_t i = 0; i < ns->n; i++)
		free(ns->v[i]);
	free(ns->v);
	free(ns->off);
	memset(ns, 0, sizeof(*ns));
}

static size_t count_entries(uint64_t dir)
{
	struct names ns = { 0 };
	size_t n;
	ck_assert_int_eq(arb_fs_readdir(fs, dir, 0, false, collect, &ns), 0);
	n = ns.n;
	names_free(&ns);
	return n;
}

/* items (objectid, type, any offset) in root */
static int count_items(struct arb_root *root, uint64_t objectid, uint8_t type)
{
	struct arb_key k = { objectid, type, 0 };
	struct arb_iter it;
	int n = 0, ret;

	arb_iter_init(&it, root);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		arb_iter_key(&it, &k);
		if (k.objectid != objectid || k.type != type)
			break;
		n++;
	}
	arb_iter_release(&it);
	ck_assert_int_ge(ret, 0);
	return n;
}

/* number of EXTENT_DATA items of ino (internal look) */
static int count_extents(uint64_t ino)
{
	return count_items(fs_tree0(fs)->root, ino, ARB_EXTENT_DATA);
}

/* ---- tests -------------------------------------------------------------- */

START_TEST(test_root_and_create)
{
	struct arb_stat st = getattr(ROOT);
	uint64_t f;

	ck_assert(S_ISDIR(st.mode));
	ck_assert_uint_eq(st.nlink, 2);
	ck_assert_int_eq(arb_fs_lookup(fs, ROOT, "nope", &st), -ENOENT);
	f = mkfile(ROOT, "a");
	ck_assert_uint_eq(lookup(ROOT, "a"), f);
	ck_assert_int_eq(arb_fs_mknod(fs, ROOT, "a", S_IFREG | 0644, 0, &cred,
				      &st),
			 -EEXIST);
	st = getattr(f);
	ck_assert(S_ISREG(st.mode));
	ck_assert_uint_eq(st.uid, 1000);
	ck_assert_uint_eq(st.nlink, 1);
	ck_assert_uint_eq(st.size, 0);
	/* names */
	char longname[300];
	memset(longname, 'x', 256);
	longname[256] = 0;
	ck_assert_int_eq(arb_fs_mknod(fs, ROOT, longname, S_IFREG | 0644, 0,
				      &cred, &st),
			 -ENAMETOOLONG);
	longname[255] = 0;
	mkfile(ROOT, longname);
	ck_assert_int_eq(arb_fs_mknod(fs, f, "x", S_IFREG, 0, &cred, &st),
			 -ENOTDIR);
	ck_assert_int_eq(arb_fs_getattr(fs, 99999, &st), -ENOENT);
	reopen();
	ck_assert_uint_eq(lookup(ROOT, "a"), f);
	ck_assert_uint_ne(lookup(ROOT, longname), 0);
	st = getattr(ROOT);
	ck_assert_uint_eq(st.size, 2 * (1 + 255));
	/* new inode numbers are not reused after reopen */
	ck_assert_uint_gt(mkfile(ROOT, "b"), f);
}
END_TEST

START_TEST(test_mkdir_rmdir_unlink)
{
	struct arb_stat st;
	uint64_t d, e, f;

	d = mkdir_(ROOT, "d");
	ck_assert_uint_eq(getattr(ROOT).nlink, 3);
	e = mkdir_(d, "e");
	f = mkfile(e, "f");
	ck_assert_uint_eq(getattr(d).nlink, 3);
	ck_assert_uint_eq(lookup(e, ".."), d);
	ck_assert_uint_eq(lookup(e, "."), e);
	ck_assert_int_eq(arb_fs_rmdir(fs, ROOT, "d"), -ENOTEMPTY);
	ck_assert_int_eq(arb_fs_rmdir(fs, e, "f"), -ENOTDIR);
	ck_assert_int_eq(arb_fs_unlink(fs, d, "e"), -EISDIR);
	ck_assert_int_eq(arb_fs_unlink(fs, d, "zz"), -ENOENT);
	reopen();
	ck_assert_int_eq(arb_fs_unlink(fs, e, "f"), 0);
	ck_assert_int_eq(arb_fs_getattr(fs, f, &st), -ENOENT);
	ck_assert_int_eq(arb_fs_rmdir(fs, d, "e"), 0);
	ck_assert_uint_eq(getattr(d).nlink, 2);
	ck_assert_uint_eq(getattr(d).size, 0);
	ck_assert_int_eq(arb_fs_rmdir(fs, ROOT, "d"), 0);
	ck_assert_uint_eq(getattr(ROOT).nlink, 2);
	ck_assert_uint_eq(count_entries(ROOT), 2);
	/* creating in a removed directory */
	d = mkdir_(ROOT, "d2");
	ck_assert_int_eq(arb_fs_open_inode(fs, d), 0);
	ck_assert_int_eq(arb_fs_rmdir(fs, ROOT, "d2"), 0);
	ck_assert_int_eq(arb_fs_mknod(fs, d, "x", S_IFREG, 0, &cred, &st),
			 -ENOENT);
	ck_assert_int_eq(arb_fs_release_inode(fs, d), 0);
	ck_assert_int_eq(arb_fs_getattr(fs, d, &st), -ENOENT);
	reopen();
	ck_assert_uint_eq(count_entries(ROOT), 2);
}
END_TEST

START_TEST(test_hardlinks)
{
	struct arb_stat st;
	uint64_t d, f;

	d = mkdir_(ROOT, "d");
	f = mkfile(ROOT, "f");
	write_pattern(f, 0, 10000, 1);
	ck_assert_int_eq(arb_fs_link(fs, f, d, "g", &st), 0);
	ck_assert_uint_eq(st.nlink, 2);
	ck_assert_int_eq(arb_fs_link(fs, f, ROOT, "f2", &st), 0);
	ck_assert_int_eq(arb_fs_link(fs, f, ROOT, "f2", &st), -EEXIST);
	ck_assert_int_eq(arb_fs_link(fs, d, ROOT, "dl", &st), -EPERM);
	ck_assert_uint_eq(getattr(f).nlink, 3);
	reopen();
	ck_assert_uint_eq(getattr(f).nlink, 3);
	ck_assert_uint_eq(lookup(d, "g"), f);
	ck_assert_int_eq(arb_fs_unlink(fs, ROOT, "f"), 0);
	ck_assert_int_eq(arb_fs_unlink(fs, d, "g"), 0);
	ck_assert_uint_eq(getattr(f).nlink, 1);
	expect_pattern(f, 0, 10000, 1);
	reopen();
	expect_pattern(f, 0, 10000, 1);
	ck_assert_int_eq(arb_fs_unlink(fs, ROOT, "f2"), 0);
	ck_assert_int_eq(arb_fs_getattr(fs, f, &st), -ENOENT);
}
END_TEST

START_TEST(test_rename)
{
	uint64_t a, b, d1, d2, sub, f, g, h;
	struct arb_stat st;

	d1 = mkdir_(ROOT, "d1");
	d2 = mkdir_(ROOT, "d2");
	f = mkfile(d1, "f");
	g = mkfile(d2, "g");
	write_pattern(g, 0, 5000, 7);
	/* simple, same dir */
	ck_assert_int_eq(arb_fs_rename(fs, d1, "f", d1, "f1", 0), 0);
	ck_assert_uint_eq(lookup(d1, "f1"), f);
	ck_assert_uint_eq(lookup(d1, "f"), 0);
	ck_assert_int_eq(arb_fs_rename(fs, d1, "nope", d1, "x", 0), -ENOENT);
	/* across dirs */
	ck_assert_int_eq(arb_fs_rename(fs, d1, "f1", d2, "f", 0), 0);
	ck_assert_uint_eq(lookup(d2, "f"), f);
	/* file over file frees the target */
	ck_assert_int_eq(arb_fs_rename(fs, d2, "f", d2, "g", 0), 0);
	ck_assert_uint_eq(lookup(d2, "g"), f);
	ck_assert_int_eq(arb_fs_getattr(fs, g, &st), -ENOENT);
	ck_assert_uint_eq(count_entries(d2), 3);
	/* directories */
	sub = mkdir_(d1, "sub");
	ck_assert_uint_eq(getattr(d1).nlink, 3);
	ck_assert_int_eq(arb_fs_rename(fs, d1, "sub", d2, "sub", 0), 0);
	ck_assert_uint_eq(getattr(d1).nlink, 2);
	ck_assert_uint_eq(getattr(d2).nlink, 3);
	ck_assert_uint_eq(lookup(sub, ".."), d2);
	/* into its own subtree */
	ck_assert_int_eq(arb_fs_rename(fs, ROOT, "d2", sub, "x", 0), -EINVAL);
	ck_assert_int_eq(arb_fs_rename(fs, ROOT, "d2", d2, "x", 0), -EINVAL);
	/* dir over file / file over dir */
	h = mkfile(ROOT, "h");
	ck_assert_int_eq(arb_fs_rename(fs, d2, "sub", ROOT, "h", 0), -ENOTDIR);
	ck_assert_int_eq(arb_fs_rename(fs, ROOT, "h", d2, "sub", 0), -EISDIR);
	/* dir over non-empty dir, then over empty dir */
	a = mkdir_(ROOT, "a");
	b = mkdir_(ROOT, "b");
	mkfile(b, "inside");
	ck_assert_int_eq(arb_fs_rename(fs, ROOT, "a", ROOT, "b", 0), -ENOTEMPTY);
	ck_assert_int_eq(arb_fs_rename(fs, ROOT, "b", d2, "sub", 0), 0);
	ck_assert_int_eq(arb_fs_getattr(fs, sub, &st), -ENOENT);
	ck_assert_uint_eq(lookup(d2, "sub"), b);
	ck_assert_uint_eq(getattr(d2).nlink, 3);
	ck_assert_uint_eq(getattr(ROOT).nlink, 2 + 3); /* d1 d2 a */
	/* NOREPLACE */
	ck_assert_int_eq(arb_fs_rename(fs, ROOT, "h", ROOT, "a",
				       RENAME_NOREPLACE),
			 -EEXIST);
	ck_assert_int_eq(arb_fs_rename(fs, ROOT, "h", ROOT, "h2",
				       RENAME_NOREPLACE),
			 0);
	/* EXCHANGE file <-> dir across parents */
	ck_assert_int_eq(arb_fs_rename(fs, ROOT, "h2", d2, "sub",
				       RENAME_EXCHANGE),
			 0);
	ck_assert_uint_eq(lookup(ROOT, "h2"), b);
	ck_assert_uint_eq(lookup(d2, "sub"), h);
	ck_assert_uint_eq(lookup(b, ".."), ROOT);
	ck_assert_uint_eq(getattr(d2).nlink, 2);
	ck_assert_uint_eq(getattr(ROOT).nlink, 2 + 4);
	ck_assert_int_eq(arb_fs_rename(fs, ROOT, "h2", d2, "nope",
				       RENAME_EXCHANGE),
			 -ENOENT);
	ck_assert_int_eq(arb_fs_rename(fs, ROOT, "a", ROOT, "b",
				       RENAME_EXCHANGE | RENAME_NOREPLACE),
			 -EINVAL);
	/* exchanging a dir with something inside it */
	mkdir_(a, "in");
	ck_assert_int_eq(arb_fs_rename(fs, ROOT, "a", a, "in", RENAME_EXCHANGE),
			 -EINVAL);
	/* same inode: no-op */
	ck_assert_int_eq(arb_fs_link(fs, h, d2, "hl", &st), 0);
	ck_assert_int_eq(arb_fs_rename(fs, d2, "sub", d2, "hl", 0), 0);
	ck_assert_uint_eq(lookup(d2, "sub"), h);
	ck_assert_uint_eq(lookup(d2, "hl"), h);
	reopen();
	ck_assert_uint_eq(lookup(d2, "g"), f);
	expect_zero(f, 0, 0);
	ck_assert_uint_eq(lookup(ROOT, "h2"), b);
	ck_assert_uint_eq(lookup(b, "inside") != 0, 1);
	ck_assert_uint_eq(getattr(h).nlink, 2);
}
END_TEST

START_TEST(test_readdir_offsets)
{
	struct names ns = { 0 }, rest = { 0 };
	char name[32];
	int i;

	for (i = 0; i < 100; i++) {
		snprintf(name, sizeof(name), "n%03d", i);
		mkfile(ROOT, name);
	}
	ck_assert_int_eq(arb_fs_readdir(fs, ROOT, 0, false, collect, &ns), 0);
	ck_assert_uint_eq(ns.n, 102);
	ck_assert_str_eq(ns.v[0], ".");
	ck_assert_str_eq(ns.v[1], "..");
	for (i = 0; i < 100; i++) {
		snprintf(name, sizeof(name), "n%03d", i);
		ck_assert_str_eq(ns.v[i + 2], name); /* creation order */
	}
	/* continue from the offset after n049 while n050..n059 and n020 go */
	uint64_t off = ns.off[2 + 49];
	for (i = 50; i < 60; i++) {
		snprintf(name, sizeof(name), "n%03d", i);
		ck_assert_int_eq(arb_fs_unlink(fs, ROOT, name), 0);
	}
	ck_assert_int_eq(arb_fs_unlink(fs, ROOT, "n020"), 0);
	mkfile(ROOT, "late");
	reopen();
	ck_assert_int_eq(arb_fs_readdir(fs, ROOT, off, true, collect, &rest), 0);
	/* "late" came after the listing began: not in it */
	ck_assert_uint_eq(rest.n, 40);
	ck_assert_str_eq(rest.v[0], "n060");
	ck_assert_str_eq(rest.v[39], "n099");
	names_free(&rest);
	/* rename each entry away and back as it is listed: the new names
	 * are not met again, and the listing ends */
	memset(&rest, 0, sizeof(rest));
	off = 0;
	for (;;) {
		struct names one = { 0 };

		ck_assert_int_eq(arb_fs_readdir(fs, ROOT, off, false,
						collect_one, &one),
				 0);
		if (one.n == 0)
			break;
		ck_assert_uint_lt(rest.n, 200);
		off = one.off[0];
		if (strcmp(one.v[0], ".") && strcmp(one.v[0], "..")) {
			ck_assert_int_eq(arb_fs_rename(fs, ROOT, one.v[0], ROOT,
						       "T", 0),
					 0);
			ck_assert_int_eq(arb_fs_rename(fs, ROOT, "T", ROOT,
						       one.v[0], 0),
					 0);
		}
		collect(&rest, one.v[0], NULL, off);
		names_free(&one);
	}
	ck_assert_uint_eq(rest.n, 2 + 89 + 1);
	names_free(&rest);
	/* a new listing has them all, "late" too */
	memset(&rest, 0, sizeof(rest));
	ck_assert_int_eq(arb_fs_readdir(fs, ROOT, 0, false, collect, &rest), 0);
	ck_assert_uint_eq(rest.n, 2 + 89 + 1);
	names_free(&ns);
	names_free(&rest);
	/* offsets past the end */
	ck_assert_int_eq(arb_fs_readdir(fs, ROOT, 1ULL << 40, false, collect,
					&rest),
			 0);
	ck_assert_uint_eq(rest.n, 0);
}
END_TEST

START_TEST(test_large_dir)
{
	int n = TU_SCALE(20000, 100000), i;
	char name[64];
	uint64_t d = mkdir_(ROOT, "big");
	uint64_t *inos = malloc(sizeof(uint64_t) * n);

	for (i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "file-with-a-longer-name-%07d", i);
		inos[i] = mkfile(d, name);
	}
	ck_assert_uint_eq(count_entries(d), (size_t)n + 2);
	reopen();
	for (i = 0; i < n; i += 7) {
		snprintf(name, sizeof(name), "file-with-a-longer-name-%07d", i);
		ck_assert_uint_eq(lookup(d, name), inos[i]);
	}
	for (i = 0; i < n; i += 2) {
		snprintf(name, sizeof(name), "file-with-a-longer-name-%07d", i);
		ck_assert_int_eq(arb_fs_unlink(fs, d, name), 0);
	}
	ck_assert_uint_eq(count_entries(d), (size_t)(n / 2) + 2);
	reopen();
	ck_assert_uint_eq(count_entries(d), (size_t)(n / 2) + 2);
	for (i = 1; i < n; i += 2) {
		snprintf(name, sizeof(name), "file-with-a-longer-name-%07d", i);
		ck_assert_int_eq(arb_fs_unlink(fs, d, name), 0);
	}
	ck_assert_int_eq(arb_fs_rmdir(fs, ROOT, "big"), 0);
	free(inos);
}
END_TEST

START_TEST(test_inline_to_extent)
{
	uint64_t f = mkfile(ROOT, "f");
	struct arb_stat st;

	write_pattern(f, 0, 100, 3);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(count_extents(f), 1);
	expect_pattern(f, 0, 100, 3);
	write_pattern(f, 100, 1900, 3);
	reopen();
	expect_pattern(f, 0, 2000, 3);
	st = getattr(f);
	ck_assert_uint_eq(st.size, 2000);
	/* grow past max_inline: becomes a regular extent */
	write_pattern(f, 2000, 8000, 3);
	expect_pattern(f, 0, 10000, 3);
	reopen();
	expect_pattern(f, 0, 10000, 3);
	ck_assert_int_eq(count_extents(f), 1);
	/* a sparse write far from an inline file */
	uint64_t g = mkfile(ROOT, "g");
	write_pattern(g, 0, 50, 4);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	write_pattern(g, 1 * MiB, 10, 4);
	reopen();
	expect_pattern(g, 0, 50, 4);
	expect_zero(g, 50, 1 * MiB - 50);
	expect_pattern(g, 1 * MiB, 10, 4);
	ck_assert_uint_eq(getattr(g).size, 1 * MiB + 10);
	/* truncate an inline file up past max_inline, then down */
	uint64_t h = mkfile(ROOT, "h");
	write_pattern(h, 0, 300, 5);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	struct arb_setattr sa = { .size = 5000 };
	ck_assert_int_eq(arb_fs_setattr(fs, h, &sa, ARB_SET_SIZE, &cred, &st),
			 0);
	reopen();
	expect_pattern(h, 0, 300, 5);
	expect_zero(h, 300, 4700);
	sa.size = 100;
	ck_assert_int_eq(arb_fs_setattr(fs, h, &sa, ARB_SET_SIZE, &cred, &st),
			 0);
	reopen();
	expect_pattern(h, 0, 100, 5);
	ck_assert_uint_eq(getattr(h).size, 100);
	/* symlinks */
	ck_assert_int_eq(arb_fs_symlink(fs, ROOT, "ln", "some/where/else",
					&cred, &st),
			 0);
	char buf[64];
	ck_assert_int_eq(arb_fs_readlink(fs, st.ino, buf, sizeof(buf)), 15);
	ck_assert_str_eq(buf, "some/where/else");
	ck_assert_int_eq(arb_fs_readlink(fs, st.ino, buf, 10), -ERANGE);
	ck_assert_int_eq(arb_fs_readlink(fs, f, buf, sizeof(buf)), -EINVAL);
	ck_assert(S_ISLNK(getattr(st.ino).mode));
	ck_assert_uint_eq(getattr(st.ino).size, 15);
}
END_TEST

/* 1 MiB writes of random-looking data into one extent of 32 MiB: its
 * 8,192 checksums go into items small enough for a 4 KiB node (an item of
 * 1,024 sums is not: the write failed its transaction with EOVERFLOW) */
START_TEST(test_big_extent_csums)
{
	uint64_t f = mkfile(ROOT, "big");
	size_t chunk = 1 * MiB, total = 32 * MiB;

	for (size_t off = 0; off < total; off += chunk)
		write_pattern(f, off, chunk, 12);
	ck_assert_int_eq(arb_fs_fsync(fs, f, false), 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	reopen();
	expect_pattern(f, 0, total, 12);
	/* a rewrite of part of it, and an append that extends the extent */
	write_pattern(f, 5 * MiB + 4096, 3 * MiB, 13);
	write_pattern(f, total, 6 * MiB, 14);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	reopen();
	expect_pattern(f, 0, 5 * MiB + 4096, 12);
	expect_pattern(f, 5 * MiB + 4096, 3 * MiB, 13);
	expect_pattern(f, 8 * MiB + 4096, total - 8 * MiB - 4096, 12);
	expect_pattern(f, total, 6 * MiB, 14);
}
END_TEST

START_TEST(test_big_sequential)
{
	/* 128 KiB writes as the kernel's writeback cache sends them end up
	 * as a few large extents */
	uint64_t f = mkfile(ROOT, "big");
	size_t chunk = 128 * 1024, total = 24 * MiB;

	for (size_t off = 0; off < total; off += chunk)
		write_pattern(f, off, chunk, 9);
	expect_pattern(f, 0, 3 * MiB, 9);
	ck_assert_int_eq(arb_fs_fsync(fs, f, false), 0);
	ck_assert_int_le(count_extents(f), 4);
	expect_pattern(f, 5 * MiB, 2 * MiB, 9);
	/* rewrite a middle part: splits the extent, old blocks freed */
	write_pattern(f, 1 * MiB + 4096, 8192, 10);
	reopen();
	expect_pattern(f, 0, 1 * MiB + 4096, 9);
	expect_pattern(f, 1 * MiB + 4096, 8192, 10);
	expect_pattern(f, 1 * MiB + 12288, 1 * MiB, 9);
	ck_assert_uint_eq(getattr(f).blocks, total / 512);
	/* unaligned small writes */
	write_pattern(f, 12345, 777, 11);
	expect_pattern(f, 12345, 777, 11);
	reopen();
	expect_pattern(f, 12345, 777, 11);
	expect_pattern(f, 12345 + 777, 1000, 9);
	ck_assert_int_eq(arb_fs_unlink(fs, ROOT, "big"), 0);
}
END_TEST

START_TEST(test_sparse_seek)
{
	uint64_t f = mkfile(ROOT, "s");
	struct arb_stat st;

	write_pattern(f, 1 * MiB, 8192, 1);
	write_pattern(f, 3 * MiB, 100, 1);
	/* before and after writing out the delayed data */
	for (int round = 0; round < 2; round++) {
		ck_assert_int_eq(arb_fs_lseek(fs, f, 0, SEEK_DATA), 1 * MiB);
		ck_assert_int_eq(arb_fs_lseek(fs, f, 0, SEEK_HOLE), 0);
		ck_assert_int_eq(arb_fs_lseek(fs, f, 1 * MiB + 10, SEEK_HOLE),
				 1 * MiB + 8192);
		ck_assert_int_eq(arb_fs_lseek(fs, f, 1 * MiB + 8192, SEEK_DATA),
				 3 * MiB);
		ck_assert_int_eq(arb_fs_lseek(fs, f, 3 * MiB, SEEK_HOLE),
				 3 * MiB + 100);
		ck_assert_int_eq(arb_fs_lseek(fs, f, 3 * MiB + 100, SEEK_DATA),
				 -ENXIO);
		ck_assert_int_eq(arb_fs_lseek(fs, f, 3 * MiB + 99, SEEK_DATA),
				 3 * MiB + 99);
		expect_zero(f, 0, 1 * MiB);
		expect_pattern(f, 1 * MiB, 8192, 1);
		expect_zero(f, 1 * MiB + 8192, 2 * MiB - 8192);
		reopen();
	}
	st = getattr(f);
	ck_assert_uint_eq(st.size, 3 * MiB + 100);
	ck_assert_uint_eq(st.blocks, (8192 + 4096) / 512);
	/* read past EOF */
	uint8_t b[16];
	ck_assert_int_eq(arb_fs_read(fs, f, b, 16, 3 * MiB + 100), 0);
	ck_assert_int_eq(arb_fs_read(fs, f, b, 16, 3 * MiB + 90), 10);
	/* EFBIG */
	ck_assert_int_eq(arb_fs_write(fs, f, b, 1, ARB_MAX_FILE_SIZE), -EFBIG);
	struct arb_setattr sa = { .size = ARB_MAX_FILE_SIZE + 1 };
	ck_assert_int_eq(arb_fs_setattr(fs, f, &sa, ARB_SET_SIZE, &cred, &st),
			 -EFBIG);
}
END_TEST

START_TEST(test_truncate)
{
	uint64_t f = mkfile(ROOT, "t");
	struct arb_setattr sa;
	struct arb_stat st;

	write_pattern(f, 0, 100000, 2);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	memset(&sa, 0, sizeof(sa));
	sa.size = 50000; /* not block aligned */
	ck_assert_int_eq(arb_fs_setattr(fs, f, &sa, ARB_SET_SIZE, &cred, &st),
			 0);
	ck_assert_uint_eq(st.size, 50000);
	sa.size = 200000;
	ck_assert_int_eq(arb_fs_setattr(fs, f, &sa, ARB_SET_SIZE, &cred, &st),
			 0);
	expect_pattern(f, 0, 50000, 2);
	expect_zero(f, 50000, 150000);
	reopen();
	expect_pattern(f, 0, 50000, 2);
	expect_zero(f, 50000, 150000);
	ck_assert_uint_eq(getattr(f).blocks, 53248 / 512);
	/* truncate of delayed data */
	write_pattern(f, 0, 30000, 4);
	sa.size = 10000;
	ck_assert_int_eq(arb_fs_setattr(fs, f, &sa, ARB_SET_SIZE, &cred, &st),
			 0);
	sa.size = 40000;
	ck_assert_int_eq(arb_fs_setattr(fs, f, &sa, ARB_SET_SIZE, &cred, &st),
			 0);
	expect_pattern(f, 0, 10000, 4);
	expect_zero(f, 10000, 30000);
	reopen();
	expect_pattern(f, 0, 10000, 4);
	expect_zero(f, 10000, 30000);
	sa.size = 0;
	ck_assert_int_eq(arb_fs_setattr(fs, f, &sa, ARB_SET_SIZE, &cred, &st),
			 0);
	ck_assert_int_eq(count_extents(f), 0);
	ck_assert_uint_eq(getattr(f).blocks, 0);
	/* directories cannot be truncated */
	ck_assert_int_eq(arb_fs_setattr(fs, ROOT, &sa, ARB_SET_SIZE, &cred, &st),
			 -EISDIR);
}
END_TEST

START_TEST(test_fallocate)
{
	uint64_t f = mkfile(ROOT, "fa");
	struct arb_stat st;

	/* mode 0 grows the file; preallocated space reads as zeros */
	ck_assert_int_eq(arb_fs_fallocate(fs, f, 0, 0, 1 * MiB), 0);
	st = getattr(f);
	ck_assert_uint_eq(st.size, 1 * MiB);
	ck_assert_uint_eq(st.blocks, 1 * MiB / 512);
	expect_zero(f, 0, 1 * MiB);
	ck_assert_int_eq(arb_fs_lseek(fs, f, 0, SEEK_DATA), -ENXIO);
	/* write into it: delayed blocks over preallocated space are counted
	 * once, before the commit as after it */
	write_pattern(f, 4096, 8192, 5);
	ck_assert_uint_eq(getattr(f).blocks, 1 * MiB / 512);
	reopen();
	ck_assert_uint_eq(getattr(f).blocks, 1 * MiB / 512);
	expect_zero(f, 0, 4096);
	expect_pattern(f, 4096, 8192, 5);
	expect_zero(f, 12288, 1 * MiB - 12288);
	/* KEEP_SIZE past EOF */
	ck_assert_int_eq(arb_fs_fallocate(fs, f, FALLOC_FL_KEEP_SIZE, 1 * MiB,
					  1 * MiB),
			 0);
	ck_assert_uint_eq(getattr(f).size, 1 * MiB);
	/* punch: partial blocks zeroed, whole blocks freed */
	write_pattern(f, 0, 1 * MiB, 6);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_fs_fallocate(fs, f,
					  FALLOC_FL_PUNCH_HOLE |
						  FALLOC_FL_KEEP_SIZE,
					  1000, 100000),
			 0);
	expect_pattern(f, 0, 1000, 6);
	expect_zero(f, 1000, 100000);
	expect_pattern(f, 101000, 1 * MiB - 101000, 6);
	ck_assert_int_eq(arb_fs_lseek(fs, f, 1000, SEEK_HOLE), 4096);
	ck_assert_int_eq(arb_fs_lseek(fs, f, 4096, SEEK_DATA), 98304);
	reopen();
	expect_pattern(f, 0, 1000, 6);
	expect_zero(f, 1000, 100000);
	expect_pattern(f, 101000, 1 * MiB - 101000, 6);
	/* punch inside one block */
	ck_assert_int_eq(arb_fs_fallocate(fs, f,
					  FALLOC_FL_PUNCH_HOLE |
						  FALLOC_FL_KEEP_SIZE,
					  200000, 10),
			 0);
	expect_pattern(f, 199990, 10, 6);
	expect_zero(f, 200000, 10);
	expect_pattern(f, 200010, 10, 6);
	/* zero range, growing */
	ck_assert_int_eq(arb_fs_fallocate(fs, f, FALLOC_FL_ZERO_RANGE,
					  1 * MiB - 5000, 20000),
			 0);
	ck_assert_uint_eq(getattr(f).size, 1 * MiB + 15000);
	expect_pattern(f, 1 * MiB - 6000, 1000, 6);
	expect_zero(f, 1 * MiB - 5000, 20000);
	reopen();
	expect_pattern(f, 1 * MiB - 6000, 1000, 6);
	expect_zero(f, 1 * MiB - 5000, 20000);
	/* unsupported modes */
	ck_assert_int_eq(arb_fs_fallocate(fs, f, FALLOC_FL_PUNCH_HOLE, 0, 10),
			 -EOPNOTSUPP);
	ck_assert_int_eq(arb_fs_fallocate(fs, f, FALLOC_FL_COLLAPSE_RANGE, 0,
					  4096),
			 -EOPNOTSUPP);
	ck_assert_int_eq(arb_fs_fallocate(fs, ROOT, 0, 0, 10), -EISDIR);
	/* inline file */
	uint64_t g = mkfile(ROOT, "small");
	write_pattern(g, 0, 500, 8);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_fs_fallocate(fs, g,
					  FALLOC_FL_PUNCH_HOLE |
						  FALLOC_FL_KEEP_SIZE,
					  100, 50),
			 0);
	reopen();
	expect_pattern(g, 0, 100, 8);
	expect_zero(g, 100, 50);
	expect_pattern(g, 150, 350, 8);
}
END_TEST

/* a value of n bytes that tells its size and position apart */
static uint8_t *xval(size_t n, unsigned seed)
{
	uint8_t *v = malloc(n ? n : 1);

	for (size_t i = 0; i < n; i++)
		v[i] = (uint8_t)(i * 7 + seed + i / 251);
	return v;
}

static void xattr_expect(uint64_t ino, const char *name, size_t n,
			 unsigned seed)
{
	uint8_t *want = xval(n, seed), *got = malloc(n + 1);

	ck_assert_int_eq(arb_fs_getxattr(fs, ino, name, NULL, 0), (ssize_t)n);
	if (n)
		ck_assert_int_eq(arb_fs_getxattr(fs, ino, name, got, n - 1),
				 -ERANGE);
	ck_assert_int_eq(arb_fs_getxattr(fs, ino, name, got, n + 1),
			 (ssize_t)n);
	ck_assert_msg(memcmp(got, want, n) == 0, "%s: %zu bytes differ", name,
		      n);
	free(want);
	free(got);
}

static void xattr_set(uint64_t ino, const char *name, size_t n, unsigned seed,
		      int flags)
{
	uint8_t *v = xval(n, seed);

	ck_assert_int_eq(arb_fs_setxattr(fs, ino, name, v, n, flags), 0);
	free(v);
}

/* out-of-line values (past 16,000 bytes or what fits the item) */
static void xattr_large_values(uint64_t f)
{
	static const size_t sizes[] = { 16001, 32768, 65536 };
	uint64_t g = mkfile(ROOT, "xl");
	uint8_t *v = xval(ARB_XATTR_SIZE_MAX + 1, 0);

	ck_assert_int_eq(arb_fs_setxattr(fs, g, "user.toobig", v,
					 ARB_XATTR_SIZE_MAX + 1, 0),
			 -E2BIG);
	free(v);
	for (unsigned i = 0; i < 3; i++) {
		char name[32];
		snprintf(name, sizeof(name), "user.l%u", i);
		xattr_set(g, name, sizes[i], i, XATTR_CREATE);
		xattr_expect(g, name, sizes[i], i);
	}
	ck_assert_int_eq(arb_fs_listxattr(fs, g, NULL, 0), 3 * 8);
	reopen();
	for (unsigned i = 0; i < 3; i++) {
		char name[32];
		snprintf(name, sizeof(name), "user.l%u", i);
		xattr_expect(g, name, sizes[i], i);
	}
	/* replace: larger, smaller (back inline), larger again */
	xattr_set(g, "user.l0", 65536, 9, XATTR_REPLACE);
	xattr_expect(g, "user.l0", 65536, 9);
	xattr_set(g, "user.l2", 100, 5, XATTR_REPLACE);
	xattr_expect(g, "user.l2", 100, 5);
	xattr_set(g, "user.l1", 40000, 3, 0);
	xattr_expect(g, "user.l1", 40000, 3);
	reopen();
	xattr_expect(g, "user.l0", 65536, 9);
	xattr_expect(g, "user.l1", 40000, 3);
	xattr_expect(g, "user.l2", 100, 5);
	/* remove: the pieces go (teardown's check finds any left over) */
	ck_assert_int_eq(arb_fs_removexattr(fs, g, "user.l0"), 0);
	ck_assert_int_eq(arb_fs_getxattr(fs, g, "user.l0", NULL, 0), -ENODATA);
	check_clean();
	/* the other file's attributes were not touched */
	ck_assert_int_eq(arb_fs_getxattr(fs, f, "user.big", NULL, 0), 8000);
	/* freeing the inode deletes its pieces (the check would find
	 * pieces without an inode) */
	xattr_set(g, "user.l3", 65536, 4, 0);
	ck_assert_int_eq(arb_fs_unlink(fs, ROOT, "xl"), 0);
	check_clean();
}

START_TEST(test_xattr)
{
	uint64_t f = mkfile(ROOT, "x");
	char buf[256], list[256];
	uint8_t *big;

	ck_assert_int_eq(arb_fs_setxattr(fs, f, "user.a", "1234", 4, 0), 0);
	ck_assert_int_eq(arb_fs_setxattr(fs, f, "user.b", "", 0, 0), 0);
	ck_assert_int_eq(arb_fs_setxattr(fs, f, "security.selinux", "ctx", 3,
					 0),
			 0);
	ck_assert_int_eq(arb_fs_setxattr(fs, f, "system.posix_acl_access",
					 "acl", 3, 0),
			 -EINVAL);
	{
		/* a non-minimal one is stored */
		uint8_t v[4 + 5 * 8];
		size_t vn = acl_build(v, "u::rw-,u:42:r--,g::r--,m::r--,o::---");
		ck_assert_int_eq(arb_fs_setxattr(fs, f,
						 "system.posix_acl_access", v,
						 vn, 0),
				 0);
	}
	ck_assert_int_eq(arb_fs_setxattr(fs, f, "bogus.a", "1", 1, 0),
			 -EOPNOTSUPP);
	ck_assert_int_eq(arb_fs_setxattr(fs, f, "user.a", "1", 1, XATTR_CREATE),
			 -EEXIST);
	ck_assert_int_eq(arb_fs_setxattr(fs, f, "user.c", "1", 1,
					 XATTR_REPLACE),
			 -ENODATA);
	ck_assert_int_eq(arb_fs_getxattr(fs, f, "user.a", NULL, 0), 4);
	ck_assert_int_eq(arb_fs_getxattr(fs, f, "user.a", buf, 2), -ERANGE);
	ck_assert_int_eq(arb_fs_getxattr(fs, f, "user.a", buf, sizeof(buf)), 4);
	ck_assert(memcmp(buf, "1234", 4) == 0);
	ck_assert_int_eq(arb_fs_getxattr(fs, f, "user.none", buf, sizeof(buf)),
			 -ENODATA);
	ssize_t n = arb_fs_listxattr(fs, f, NULL, 0);
	ck_assert_int_eq(n, 7 + 7 + 17 + 24);
	ck_assert_int_eq(arb_fs_listxattr(fs, f, list, 5), -ERANGE);
	ck_assert_int_eq(arb_fs_listxattr(fs, f, list, sizeof(list)), n);
	reopen();
	ck_assert_int_eq(arb_fs_setxattr(fs, f, "user.a", "xy", 2,
					 XATTR_REPLACE),
			 0);
	ck_assert_int_eq(arb_fs_getxattr(fs, f, "user.a", buf, sizeof(buf)), 2);
	ck_assert(memcmp(buf, "xy", 2) == 0);
	ck_assert_int_eq(arb_fs_removexattr(fs, f, "user.b"), 0);
	ck_assert_int_eq(arb_fs_removexattr(fs, f, "user.b"), -ENODATA);
	ck_assert_int_eq(arb_fs_listxattr(fs, f, NULL, 0), n - 7);
	/* big values */
	big = malloc(ARB_XATTR_SIZE_MAX + 1);
	memset(big, 'v', ARB_XATTR_SIZE_MAX + 1);
	ck_assert_int_eq(arb_fs_setxattr(fs, f, "user.big", big,
					 ARB_XATTR_SIZE_MAX + 1, 0),
			 -E2BIG);
	ck_assert_int_eq(arb_fs_setxattr(fs, f, "user.big", big, 8000, 0), 0);
	reopen();
	ck_assert_int_eq(arb_fs_getxattr(fs, f, "user.big", NULL, 0), 8000);
	ck_assert_int_eq(arb_fs_getxattr(fs, ROOT, "user.big", NULL, 0),
			 -ENODATA);
	free(big);
	xattr_large_values(f);
	/* xattrs go with the inode */
	ck_assert_int_eq(arb_fs_unlink(fs, ROOT, "x"), 0);
}
END_TEST

START_TEST(test_inode_flags)
{
	uint64_t d = mkdir_(ROOT, "d"), fi, fa, fn, sub, n;
	struct arb_setattr sa = { 0 };
	struct arb_stat st;
	uint32_t fl;

	fi = mkfile(d, "i");
	fa = mkfile(d, "a");
	fn = mkfile(d, "n");
	ck_assert(!arb_fs_has_protected_inodes(fs));
	ck_assert_int_eq(arb_fs_get_flags(fs, fi, &fl), 0);
	ck_assert_uint_eq(fl, 0);
	ck_assert_int_eq(arb_fs_set_flags(fs, fi, 0x1), -EOPNOTSUPP);
	ck_assert_int_eq(arb_fs_set_flags(fs, fi, ARB_FL_IMMUTABLE), 0);
	ck_assert_int_eq(arb_fs_set_flags(fs, fa, ARB_FL_APPEND), 0);
	ck_assert_int_eq(arb_fs_set_flags(fs, d, ARB_FL_NODUMP | ARB_FL_NOATIME),
			 0);
	ck_assert(arb_fs_has_protected_inodes(fs));
	reopen();
	/* kept, and the superblock bit with them */
	ck_assert(arb_fs_has_protected_inodes(fs));
	ck_assert_int_eq(arb_fs_getattr(fs, fi, &st), 0);
	ck_assert_uint_eq(st.flags, ARB_FL_IMMUTABLE);
	ck_assert_int_eq(arb_fs_get_flags(fs, fa, &fl), 0);
	ck_assert_uint_eq(fl, ARB_FL_APPEND);

	/* opens */
	ck_assert_int_eq(arb_fs_may_open(fs, fi, O_RDONLY), 0);
	ck_assert_int_eq(arb_fs_may_open(fs, fi, O_WRONLY | O_APPEND), -EPERM);
	ck_assert_int_eq(arb_fs_may_open(fs, fi, O_RDONLY | O_TRUNC), -EPERM);
	ck_assert_int_eq(arb_fs_may_open(fs, fa, O_RDWR | O_APPEND), 0);
	ck_assert_int_eq(arb_fs_may_open(fs, fa, O_WRONLY), -EPERM);
	ck_assert_int_eq(arb_fs_may_open(fs, fa, O_WRONLY | O_APPEND | O_TRUNC),
			 -EPERM);
	ck_assert_int_eq(arb_fs_may_open(fs, fn, O_WRONLY), 0);

	/* immutable: nothing changes */
	sa.mode = 0600;
	ck_assert_int_eq(arb_fs_setattr(fs, fi, &sa, ARB_SET_MODE, NULL, NULL),
			 -EPERM);
	ck_assert_int_eq(arb_fs_setattr(fs, fi, &sa, ARB_SET_MTIME_NOW, NULL,
					NULL),
			 -EPERM);
	ck_assert_int_eq(arb_fs_setxattr(fs, fi, "user.x", "1", 1, 0), -EPERM);
	ck_assert_int_eq(arb_fs_removexattr(fs, fi, "user.x"), -EPERM);
	ck_assert_int_eq(arb_fs_fallocate(fs, fi, 0, 0, 4096), -EPERM);
	ck_assert_int_eq(arb_fs_unlink(fs, d, "i"), -EPERM);
	ck_assert_int_eq(arb_fs_rename(fs, d, "i", d, "i2", 0), -EPERM);
	ck_assert_int_eq(arb_fs_rename(fs, d, "n", d, "i", 0), -EPERM);
	ck_assert_int_eq(arb_fs_rename(fs, d, "n", d, "i", RENAME_EXCHANGE),
			 -EPERM);
	ck_assert_int_eq(arb_fs_link(fs, fi, d, "i-link", NULL), -EPERM);

	/* append-only: times through the writeback cache, nothing else */
	sa.size = 0;
	ck_assert_int_eq(arb_fs_setattr(fs, fa, &sa, ARB_SET_SIZE, NULL, NULL),
			 -EPERM);
	ck_assert_int_eq(arb_fs_setattr(fs, fa, &sa, ARB_SET_MODE, NULL, NULL),
			 -EPERM);
	ck_assert_int_eq(arb_fs_setattr(fs, fa, &sa,
					ARB_SET_MTIME | ARB_SET_CTIME, NULL, NULL),
			 0);
	ck_assert_int_eq(arb_fs_write(fs, fa, "more", 4, 0), 4);
	ck_assert_int_eq(arb_fs_fallocate(fs, fa, FALLOC_FL_KEEP_SIZE, 0, 8192),
			 0);
	ck_assert_int_eq(arb_fs_fallocate(fs, fa,
					  FALLOC_FL_PUNCH_HOLE |
						  FALLOC_FL_KEEP_SIZE,
					  0, 4096),
			 -EPERM);
	ck_assert_int_eq(arb_fs_unlink(fs, d, "a"), -EPERM);
	ck_assert_int_eq(arb_fs_link(fs, fa, d, "a-link", NULL), -EPERM);

	/* directories: immutable takes no new name, append-only loses none */
	ck_assert_int_eq(arb_fs_set_flags(fs, d, ARB_FL_APPEND | ARB_FL_NOATIME |
							 ARB_FL_NODUMP),
			 0);
	n = mkfile(d, "new");
	ck_assert_int_eq(arb_fs_unlink(fs, d, "new"), -EPERM);
	ck_assert_int_eq(arb_fs_rename(fs, d, "new", ROOT, "new", 0), -EPERM);
	/* inherited: NODUMP and NOATIME, never APPEND */
	ck_assert_int_eq(arb_fs_get_flags(fs, n, &fl), 0);
	ck_assert_uint_eq(fl, ARB_FL_NODUMP | ARB_FL_NOATIME);
	sub = mkdir_(d, "sub");
	ck_assert_int_eq(arb_fs_get_flags(fs, sub, &fl), 0);
	ck_assert_uint_eq(fl, ARB_FL_NODUMP | ARB_FL_NOATIME);
	ck_assert_int_eq(arb_fs_set_flags(fs, sub, ARB_FL_IMMUTABLE), 0);
	ck_assert_int_eq(arb_fs_mknod(fs, sub, "x", S_IFREG | 0644, 0, &cred,
				      NULL),
			 -EPERM);
	ck_assert_int_eq(arb_fs_rename(fs, d, "n", sub, "n", 0), -EPERM);

	/* noatime: a read leaves atime alone */
	ck_assert_int_eq(arb_fs_write(fs, n, "data", 4, 0), 4);
	sa.atime.tv_sec = 1;
	ck_assert_int_eq(arb_fs_setattr(fs, n, &sa, ARB_SET_ATIME, NULL, NULL),
			 0);
	/* (atime before mtime: without the flag, relatime would update it) */
	{
		char b[4];
		ck_assert_int_eq(arb_fs_read(fs, n, b, 4, 0), 4);
	}
	ck_assert_int_eq(arb_fs_getattr(fs, n, &st), 0);
	ck_assert_int_eq(st.atime.tv_sec, 1);

	/* cleared: everything goes */
	ck_assert_int_eq(arb_fs_set_flags(fs, sub, 0), 0);
	ck_assert_int_eq(arb_fs_set_flags(fs, d, 0), 0);
	ck_assert_int_eq(arb_fs_set_flags(fs, fi, 0), 0);
	ck_assert_int_eq(arb_fs_set_flags(fs, fa, 0), 0);
	ck_assert_int_eq(arb_fs_unlink(fs, d, "i"), 0);
	ck_assert_int_eq(arb_fs_unlink(fs, d, "a"), 0);
	ck_assert_int_eq(arb_fs_unlink(fs, d, "new"), 0);
	/* the bit stays: the daemon keeps watching opens */
	ck_assert(arb_fs_has_protected_inodes(fs));
}
END_TEST

START_TEST(test_setattr)
{
	uint64_t f = mkfile(ROOT, "f");
	struct arb_setattr sa;
	struct arb_stat st, st0 = getattr(f);

	memset(&sa, 0, sizeof(sa));
	sa.mode = 06755;
	ck_assert_int_eq(arb_fs_setattr(fs, f, &sa, ARB_SET_MODE, &cred, &st),
			 0);
	ck_assert_uint_eq(st.mode, S_IFREG | 06755);
	/* chown by a non-root caller drops setuid/setgid */
	sa.uid = 1000;
	sa.gid = 2000;
	ck_assert_int_eq(arb_fs_setattr(fs, f, &sa, ARB_SET_GID, &cred, &st), 0);
	ck_assert_uint_eq(st.gid, 2000);
	ck_assert_uint_eq(st.mode, S_IFREG | 0755);
	sa.atime.tv_sec = 1000;
	sa.atime.tv_nsec = 5;
	sa.mtime.tv_sec = 2000;
	sa.mtime.tv_nsec = 7;
	ck_assert_int_eq(arb_fs_setattr(fs, f, &sa, ARB_SET_ATIME | ARB_SET_MTIME,
					&cred, &st),
			 0);
	ck_assert_int_eq(st.atime.tv_sec, 1000);
	ck_assert_int_eq(st.mtime.tv_nsec, 7);
	ck_assert(st.ctime.tv_sec >= st0.ctime.tv_sec);
	reopen();
	st = getattr(f);
	ck_assert_int_eq(st.atime.tv_sec, 1000);
	ck_assert_int_eq(st.atime.tv_nsec, 5);
	ck_assert_int_eq(st.mtime.tv_sec, 2000);
	ck_assert_uint_eq(st.gid, 2000);
	/* relatime: a read updates an atime older than mtime */
	write_pattern(f, 0, 10, 1);
	uint8_t b[10];
	ck_assert_int_eq(arb_fs_read(fs, f, b, 10, 0), 10);
	st = getattr(f);
	ck_assert(st.atime.tv_sec >= st.mtime.tv_sec);
	/* setgid directories */
	sa.mode = 02775;
	ck_assert_int_eq(arb_fs_setattr(fs, ROOT, &sa, ARB_SET_MODE | ARB_SET_GID,
					&cred, &st),
			 0);
	uint64_t d = mkdir_(ROOT, "sg");
	st = getattr(d);
	ck_assert_uint_eq(st.gid, 2000);
	ck_assert(st.mode & S_ISGID);
	/* device nodes, fifos */
	ck_assert_int_eq(arb_fs_mknod(fs, ROOT, "chr", S_IFCHR | 0600, 0x0103,
				      &cred, &st),
			 0);
	ck_assert_uint_eq(st.rdev, 0x0103);
	ck_assert_int_eq(arb_fs_mknod(fs, ROOT, "fifo", S_IFIFO | 0600, 0, &cred,
				      &st),
			 0);
	reopen();
	ck_assert_uint_eq(getattr(lookup(ROOT, "chr")).rdev, 0x0103);
	ck_assert(S_ISFIFO(getattr(lookup(ROOT, "fifo")).mode));
}
END_TEST

/* ARB_SET_KILL_SUIDGID: what Linux clears on an unprivileged write */
START_TEST(test_setattr_kill_suidgid)
{
	static const struct {
		uint32_t before, after;
	} cases[] = {
		{ 06777, 0777 },  /* both go: group execute is set */
		{ 04755, 0755 },
		{ 02767, 02767 }, /* no group execute: mandatory locking mark */
		{ 02777, 0777 },
		{ 0644, 0644 },
	};
	uint64_t f = mkfile(ROOT, "f"), d = mkdir_(ROOT, "d");
	struct arb_setattr sa;
	struct arb_stat st, st0;

	memset(&sa, 0, sizeof(sa));
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		sa.mode = cases[i].before;
		ck_assert_int_eq(arb_fs_setattr(fs, f, &sa, ARB_SET_MODE, &cred,
						&st0),
				 0);
		ck_assert_int_eq(arb_fs_setattr(fs, f, &sa, ARB_SET_KILL_SUIDGID,
						NULL, &st),
				 0);
		ck_assert_uint_eq(st.mode, S_IFREG | cases[i].after);
		/* nothing to clear: nothing changes, not even ctime */
		if (cases[i].after == cases[i].before)
			ck_assert(memcmp(&st.ctime, &st0.ctime,
					 sizeof(st.ctime)) == 0);
		reopen();
		ck_assert_uint_eq(getattr(f).mode, S_IFREG | cases[i].after);
	}
	/* with a chown by root in the same call (the kernel's FATTR_KILL_SUIDGID) */
	sa.mode = 06755;
	ck_assert_int_eq(arb_fs_setattr(fs, f, &sa, ARB_SET_MODE, &cred, &st), 0);
	sa.uid = 77;
	ck_assert_int_eq(arb_fs_setattr(fs, f, &sa,
					ARB_SET_UID | ARB_SET_KILL_SUIDGID, NULL,
					&st),
			 0);
	ck_assert_uint_eq(st.uid, 77);
	ck_assert_uint_eq(st.mode, S_IFREG | 0755);
	/* directories keep theirs */
	sa.mode = 06755;
	ck_assert_int_eq(arb_fs_setattr(fs, d, &sa, ARB_SET_MODE, &cred, &st), 0);
	ck_assert_int_eq(arb_fs_setattr(fs, d, &sa, ARB_SET_KILL_SUIDGID, NULL,
					&st),
			 0);
	ck_assert_uint_eq(st.mode, S_IFDIR | 06755);
	ck_assert_int_eq(arb_fs_setattr(fs, d, &sa,
					ARB_SET_KILL_SUIDGID | ARB_SET_KILL_SGID,
					NULL, &st),
			 0);
	ck_assert_uint_eq(st.mode, S_IFDIR | 06755);
	/* a caller outside the group: set-group-ID goes without group
	 * execute too */
	sa.mode = 06766;
	ck_assert_int_eq(arb_fs_setattr(fs, f, &sa, ARB_SET_MODE, &cred, &st), 0);
	ck_assert_int_eq(arb_fs_setattr(fs, f, &sa,
					ARB_SET_KILL_SUIDGID | ARB_SET_KILL_SGID,
					NULL, &st),
			 0);
	ck_assert_uint_eq(st.mode, S_IFREG | 0766);
	sa.mode = 02666;
	ck_assert_int_eq(arb_fs_setattr(fs, f, &sa, ARB_SET_MODE, &cred, &st0), 0);
	ck_assert_int_eq(arb_fs_setattr(fs, f, &sa, ARB_SET_KILL_SGID, NULL,
					&st),
			 0);
	ck_assert_uint_eq(st.mode, S_IFREG | 0666);
	reopen();
	ck_assert_uint_eq(getattr(f).mode, S_IFREG | 0666);
	/* nothing to clear: no change, not even ctime */
	st0 = getattr(f);
	ck_assert_int_eq(arb_fs_setattr(fs, f, &sa, ARB_SET_KILL_SGID, NULL,
					&st),
			 0);
	ck_assert_uint_eq(st.mode, S_IFREG | 0666);
	ck_assert(memcmp(&st.ctime, &st0.ctime, sizeof(st.ctime)) == 0);
}
END_TEST

START_TEST(test_acl_access)
{
	uint64_t f = mkfile(ROOT, "f");
	uint64_t d = mkdir_(ROOT, "d");
	struct arb_setattr sa;
	struct arb_stat st, st0;
	uint8_t v[256];
	char txt[256];
	size_t n;

	/* malformed values */
	static const char *const bad[] = {
		"g::r--,u::rw-,o::---",          /* order */
		"u::rw-,g::r--",                 /* no other */
		"u::rw-,u:5:r--,g::r--,o::---",  /* named entry, no mask */
		"u::rw-,u::r--,g::r--,o::---",   /* two USER_OBJ */
		"u::rw-,g::r--,o::---,o::---",   /* two OTHER */
		"u::rw-,g::r--,m::r--,m::r--,o::---",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		n = acl_build(v, bad[i]);
		ck_assert_msg(arb_fs_setxattr(fs, f, "system.posix_acl_access",
					      v, n, 0) == -EINVAL,
			      "accepted %s", bad[i]);
	}
	n = acl_build(v, "u::rw-,g::r--,o::---");
	v[0] = 1; /* version */
	ck_assert_int_eq(arb_fs_setxattr(fs, f, "system.posix_acl_access", v,
					 n, 0),
			 -EINVAL);
	v[0] = 2;
	ck_assert_int_eq(arb_fs_setxattr(fs, f, "system.posix_acl_access", v,
					 n - 3, 0),
			 -EINVAL);
	v[6] = 8; /* perm beyond rwx */
	ck_assert_int_eq(arb_fs_setxattr(fs, f, "system.posix_acl_access", v,
					 n, 0),
			 -EINVAL);
	n = acl_build(v, "u::rw-,g::r--,o::---");
	v[n - 8] = 0x40; /* unknown tag */
	ck_assert_int_eq(arb_fs_setxattr(fs, f, "system.posix_acl_access", v,
					 n, 0),
			 -EINVAL);
	ck_assert_uint_eq(getattr(f).mode, S_IFREG | 0644);

	/* a minimal ACL is only a mode (what cp -a sets) */
	st0 = getattr(f);
	n = acl_build(v, "u::rwx,g::r-x,o::--x");
	ck_assert_int_eq(arb_fs_setxattr(fs, f, "system.posix_acl_access", v,
					 n, 0),
			 0);
	st = getattr(f);
	ck_assert_uint_eq(st.mode, S_IFREG | 0751);
	ck_assert(st.ctime.tv_sec > st0.ctime.tv_sec ||
		  (st.ctime.tv_sec == st0.ctime.tv_sec &&
		   st.ctime.tv_nsec >= st0.ctime.tv_nsec));
	ck_assert_int_eq(arb_fs_getxattr(fs, f, "system.posix_acl_access",
					 NULL, 0),
			 -ENODATA);
	ck_assert_int_eq(arb_fs_listxattr(fs, f, NULL, 0), 0);

	/* an extended one is stored; the group bits show the mask */
	n = acl_build(v, "u::rw-,u:65534:r--,g::rwx,m::r--,o::---");
	ck_assert_int_eq(arb_fs_setxattr(fs, f, "system.posix_acl_access", v,
					 n, 0),
			 0);
	ck_assert_uint_eq(getattr(f).mode, S_IFREG | 0640);
	acl_text(f, "system.posix_acl_access", txt, sizeof(txt));
	ck_assert_str_eq(txt, "u::rw-,u:65534:r--,g::rwx,m::r--,o::---");
	/* the ids of the *_OBJ entries are normalized */
	ck_assert_int_eq(arb_fs_getxattr(fs, f, "system.posix_acl_access", v,
					 sizeof(v)),
			 (ssize_t)n);
	ck_assert(v[4 + 4] == 0xff && v[4 + 7] == 0xff);

	/* chmod rewrites owner, mask and other; the named entries and
	 * GROUP_OBJ stay */
	memset(&sa, 0, sizeof(sa));
	sa.mode = 0600;
	ck_assert_int_eq(arb_fs_setattr(fs, f, &sa, ARB_SET_MODE, &cred, &st),
			 0);
	ck_assert_uint_eq(st.mode, S_IFREG | 0600);
	acl_text(f, "system.posix_acl_access", txt, sizeof(txt));
	ck_assert_str_eq(txt, "u::rw-,u:65534:r--,g::rwx,m::---,o::---");
	sa.mode = 02754;
	ck_assert_int_eq(arb_fs_setattr(fs, f, &sa, ARB_SET_MODE, &cred, &st),
			 0);
	acl_text(f, "system.posix_acl_access", txt, sizeof(txt));
	ck_assert_str_eq(txt, "u::rwx,u:65534:r--,g::rwx,m::r-x,o::r--");
	reopen();
	ck_assert_uint_eq(getattr(f).mode, S_IFREG | 02754);
	acl_text(f, "system.posix_acl_access", txt, sizeof(txt));
	ck_assert_str_eq(txt, "u::rwx,u:65534:r--,g::rwx,m::r-x,o::r--");

	/* a minimal one replaces it: the stored ACL goes */
	n = acl_build(v, "u::rw-,g::r--,o::r--");
	ck_assert_int_eq(arb_fs_setxattr(fs, f, "system.posix_acl_access", v,
					 n, 0),
			 0);
	ck_assert_uint_eq(getattr(f).mode, S_IFREG | 02644);
	ck_assert_int_eq(arb_fs_getxattr(fs, f, "system.posix_acl_access",
					 NULL, 0),
			 -ENODATA);
	/* chmod without an ACL is a plain chmod */
	sa.mode = 0640;
	ck_assert_int_eq(arb_fs_setattr(fs, f, &sa, ARB_SET_MODE, &cred, &st),
			 0);
	ck_assert_int_eq(arb_fs_listxattr(fs, f, NULL, 0), 0);

	/* no mask: chmod sets GROUP_OBJ (a USER/GROUP entry needs a mask,
	 * so an ACL without one is minimal: use removal then) */
	n = acl_build(v, "u::rw-,g::r--,g:7:rw-,m::rw-,o::---");
	ck_assert_int_eq(arb_fs_setxattr(fs, f, "system.posix_acl_access", v,
					 n, 0),
			 0);
	ck_assert_uint_eq(getattr(f).mode, S_IFREG | 0660);
	/* an empty ACL (header only) removes it, the mode stays */
	ck_assert_int_eq(arb_fs_setxattr(fs, f, "system.posix_acl_access", v,
					 4, 0),
			 0);
	ck_assert_int_eq(arb_fs_getxattr(fs, f, "system.posix_acl_access",
					 NULL, 0),
			 -ENODATA);
	ck_assert_uint_eq(getattr(f).mode, S_IFREG | 0660);
	/* removexattr works and keeps the mode */
	n = acl_build(v, "u::rw-,u:3:rwx,g::r--,m::rwx,o::---");
	ck_assert_int_eq(arb_fs_setxattr(fs, f, "system.posix_acl_access", v,
					 n, 0),
			 0);
	ck_assert_uint_eq(getattr(f).mode, S_IFREG | 0670);
	ck_assert_int_eq(arb_fs_removexattr(fs, f, "system.posix_acl_access"),
			 0);
	ck_assert_uint_eq(getattr(f).mode, S_IFREG | 0670);
	ck_assert_int_eq(arb_fs_removexattr(fs, f, "system.posix_acl_access"),
			 -ENODATA);

	/* default ACLs: directories only; stored as given, even minimal */
	n = acl_build(v, "u::rwx,g::r-x,o::---");
	ck_assert_int_eq(arb_fs_setxattr(fs, f, "system.posix_acl_default", v,
					 n, 0),
			 -EACCES);
	ck_assert_int_eq(arb_fs_setxattr(fs, f, "system.posix_acl_default", v,
					 4, 0),
			 0);
	ck_assert_int_eq(arb_fs_setxattr(fs, d, "system.posix_acl_default", v,
					 n, 0),
			 0);
	ck_assert_uint_eq(getattr(d).mode, S_IFDIR | 0755);
	acl_text(d, "system.posix_acl_default", txt, sizeof(txt));
	ck_assert_str_eq(txt, "u::rwx,g::r-x,o::---");
	ck_assert_int_eq(arb_fs_removexattr(fs, d, "system.posix_acl_default"),
			 0);
	ck_assert_int_eq(arb_fs_getxattr(fs, d, "system.posix_acl_default",
					 NULL, 0),
			 -ENODATA);

	/* symlinks take none */
	ck_assert_int_eq(arb_fs_symlink(fs, ROOT, "l", "f", &cred, &st), 0);
	n = acl_build(v, "u::rw-,u:3:rwx,g::r--,m::rwx,o::---");
	ck_assert_int_eq(arb_fs_setxattr(fs, st.ino, "system.posix_acl_access",
					 v, n, 0),
			 -EOPNOTSUPP);
	ck_assert_int_eq(arb_fs_setxattr(fs, st.ino,
					 "system.posix_acl_default", v, n, 0),
			 -EOPNOTSUPP);
	reopen();
}
END_TEST

START_TEST(test_acl_inherit)
{
	uint64_t d = mkdir_(ROOT, "d"), f, sub, sub2;
	struct arb_stat st;
	uint8_t v[256];
	char txt[256];
	size_t n;

	/* no default ACL: the mode as given (the umask is the caller's) */
	ck_assert_int_eq(arb_fs_mknod(fs, d, "plain", S_IFREG | 0666, 0, &cred,
				      &st),
			 0);
	ck_assert_uint_eq(st.mode, S_IFREG | 0666);
	ck_assert_int_eq(arb_fs_listxattr(fs, st.ino, NULL, 0), 0);

	n = acl_build(v, "u::rwx,u:65534:rwx,g::r-x,m::rwx,o::r-x");
	ck_assert_int_eq(arb_fs_setxattr(fs, d, "system.posix_acl_default", v,
					 n, 0),
			 0);
	/* a file: the ACL masked by the requested mode */
	ck_assert_int_eq(arb_fs_mknod(fs, d, "f", S_IFREG | 0640, 0, &cred,
				      &st),
			 0);
	f = st.ino;
	ck_assert_uint_eq(st.mode, S_IFREG | 0640);
	acl_text(f, "system.posix_acl_access", txt, sizeof(txt));
	ck_assert_str_eq(txt, "u::rw-,u:65534:rwx,g::r-x,m::r--,o::---");
	ck_assert_int_eq(arb_fs_getxattr(fs, f, "system.posix_acl_default",
					 NULL, 0),
			 -ENODATA);
	/* a directory: also the default ACL, as it is */
	ck_assert_int_eq(arb_fs_mkdir(fs, d, "sub", 0777, &cred, &st), 0);
	sub = st.ino;
	ck_assert_uint_eq(st.mode, S_IFDIR | 0775);
	acl_text(sub, "system.posix_acl_access", txt, sizeof(txt));
	ck_assert_str_eq(txt, "u::rwx,u:65534:rwx,g::r-x,m::rwx,o::r-x");
	acl_text(sub, "system.posix_acl_default", txt, sizeof(txt));
	ck_assert_str_eq(txt, "u::rwx,u:65534:rwx,g::r-x,m::rwx,o::r-x");
	/* and on down */
	ck_assert_int_eq(arb_fs_mkdir(fs, sub, "sub2", 0700, &cred, &st), 0);
	sub2 = st.ino;
	ck_assert_uint_eq(st.mode, S_IFDIR | 0700);
	acl_text(sub2, "system.posix_acl_access", txt, sizeof(txt));
	ck_assert_str_eq(txt, "u::rwx,u:65534:rwx,g::r-x,m::---,o::---");
	/* symlinks get nothing */
	ck_assert_int_eq(arb_fs_symlink(fs, d, "l", "f", &cred, &st), 0);
	ck_assert_uint_eq(st.mode, S_IFLNK | 0777);
	ck_assert_int_eq(arb_fs_listxattr(fs, st.ino, NULL, 0), 0);
	/* devices, fifos: like files */
	ck_assert_int_eq(arb_fs_mknod(fs, d, "fifo", S_IFIFO | 0666, 0, &cred,
				      &st),
			 0);
	ck_assert_uint_eq(st.mode, S_IFIFO | 0664);

	/* a minimal default ACL: masks the mode, stores no access ACL */
	n = acl_build(v, "u::rwx,g::r-x,o::---");
	ck_assert_int_eq(arb_fs_setxattr(fs, sub, "system.posix_acl_default",
					 v, n, 0),
			 0);
	ck_assert_int_eq(arb_fs_mknod(fs, sub, "m", S_IFREG | 0666, 0, &cred,
				      &st),
			 0);
	ck_assert_uint_eq(st.mode, S_IFREG | 0640);
	ck_assert_int_eq(arb_fs_listxattr(fs, st.ino, NULL, 0), 0);
	ck_assert_int_eq(arb_fs_mkdir(fs, sub, "md", 0777, &cred, &st), 0);
	ck_assert_uint_eq(st.mode, S_IFDIR | 0750);
	ck_assert_int_eq(arb_fs_getxattr(fs, st.ino, "system.posix_acl_access",
					 NULL, 0),
			 -ENODATA);
	acl_text(st.ino, "system.posix_acl_default", txt, sizeof(txt));
	ck_assert_str_eq(txt, "u::rwx,g::r-x,o::---");
	reopen();
	acl_text(f, "system.posix_acl_access", txt, sizeof(txt));
	ck_assert_str_eq(txt, "u::rw-,u:65534:rwx,g::r-x,m::r--,o::---");
	acl_text(sub2, "system.posix_acl_default", txt, sizeof(txt));
	ck_assert_str_eq(txt, "u::rwx,u:65534:rwx,g::r-x,m::rwx,o::r-x");
	/* ACLs go with their inode */
	ck_assert_int_eq(arb_fs_unlink(fs, d, "f"), 0);
	ck_assert_int_eq(arb_fs_rmdir(fs, sub, "sub2"), 0);
}
END_TEST

START_TEST(test_write_keeps_times)
{
	uint64_t f = mkfile(ROOT, "f");
	struct arb_setattr sa;
	struct arb_stat st;

	/* default: a write sets mtime and ctime */
	memset(&sa, 0, sizeof(sa));
	sa.mtime.tv_sec = 1000;
	sa.ctime.tv_sec = 1000;
	ck_assert_int_eq(arb_fs_setattr(fs, f, &sa,
					ARB_SET_MTIME | ARB_SET_CTIME, &cred,
					&st),
			 0);
	ck_assert_int_eq(st.mtime.tv_sec, 1000);
	write_pattern(f, 0, 100, 1);
	st = getattr(f);
	ck_assert_int_gt(st.mtime.tv_sec, 1000);
	ck_assert_int_gt(st.ctime.tv_sec, 1000);

	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs = NULL;
	fopts.write_keeps_times = true;
	fs_open_now();
	/* the kernel's order: setattr(times), then the delayed writes */
	sa.mtime.tv_sec = 2000;
	sa.mtime.tv_nsec = 5;
	sa.ctime.tv_sec = 2001;
	ck_assert_int_eq(arb_fs_setattr(fs, f, &sa,
					ARB_SET_MTIME | ARB_SET_CTIME, &cred,
					&st),
			 0);
	write_pattern(f, 50, 10000, 2);
	write_pattern(f, 0, 10, 3);
	st = getattr(f);
	ck_assert_int_eq(st.mtime.tv_sec, 2000);
	ck_assert_int_eq(st.mtime.tv_nsec, 5);
	ck_assert_int_eq(st.ctime.tv_sec, 2001);
	/* the size still follows the writes */
	ck_assert_uint_eq(st.size, 10050);
	reopen();
	st = getattr(f);
	ck_assert_int_eq(st.mtime.tv_sec, 2000);
	ck_assert_uint_eq(st.size, 10050);
	expect_pattern(f, 0, 10, 3);
	expect_pattern(f, 50, 10000, 2);
}
END_TEST

/* copy of the image as a crash right now would leave it (last commit) */
static struct arb_dev *crash_copy(void)
{
	struct arb_dev *c;
	ck_assert_int_eq(arb_dev_open_mem(mem->size, &c), 0);
	memcpy(arb_dev_mem_data(c), arb_dev_mem_data(mem), mem->size);
	return c;
}

START_TEST(test_orphans)
{
	uint64_t f = mkfile(ROOT, "o"), g;
	struct arb_stat st;

	write_pattern(f, 0, 1 * MiB, 3);
	ck_assert_int_eq(arb_fs_open_inode(fs, f), 0);
	ck_assert_int_eq(arb_fs_unlink(fs, ROOT, "o"), 0);
	/* still readable and writable through the open reference */
	expect_pattern(f, 0, 1 * MiB, 3);
	write_pattern(f, 1 * MiB, 4096, 3);
	st = getattr(f);
	ck_assert_uint_eq(st.nlink, 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	check_clean();
	/* a crash now leaves an orphan that the next open frees */
	struct arb_dev *c = crash_copy(), *savemem = mem;
	struct arb_fs *savefs = fs;
	mem = c;
	fs_open_now();
	ck_assert_int_eq(arb_fs_getattr(fs, f, &st), -ENOENT);
	check_clean();
	ck_assert_int_eq(arb_fs_close(fs), 0);
	arb_dev_destroy(c);
	mem = savemem;
	fs = savefs;
	/* release frees it */
	ck_assert_int_eq(arb_fs_release_inode(fs, f), 0);
	ck_assert_int_eq(arb_fs_getattr(fs, f, &st), -ENOENT);
	/* close with an open unlinked inode frees it too */
	g = mkfile(ROOT, "p");
	ck_assert_int_eq(arb_fs_open_inode(fs, g), 0);
	ck_assert_int_eq(arb_fs_unlink(fs, ROOT, "p"), 0);
	reopen();
	ck_assert_int_eq(arb_fs_getattr(fs, g, &st), -ENOENT);
	/* rename over an open file */
	f = mkfile(ROOT, "a");
	g = mkfile(ROOT, "b");
	write_pattern(g, 0, 5000, 1);
	ck_assert_int_eq(arb_fs_open_inode(fs, g), 0);
	ck_assert_int_eq(arb_fs_rename(fs, ROOT, "a", ROOT, "b", 0), 0);
	expect_pattern(g, 0, 5000, 1);
	ck_assert_int_eq(arb_fs_release_inode(fs, g), 0);
	ck_assert_int_eq(arb_fs_getattr(fs, g, &st), -ENOENT);
}
END_TEST

/*
 * Pins (arb_fs_open_inode) are counted in a table of their own: a pinned
 * inode without delayed data has no arb_imem, and one that loses its last
 * name survives commits, a late setattr and late writes (what the kernel's
 * writeback cache sends after the last close) until the last release.
 */
START_TEST(test_pin_counts)
{
	uint64_t f = mkfile(ROOT, "pinned"), many[200];
	struct arb_setattr sa = { 0 };
	struct arb_stat st;

	write_pattern(f, 0, 3 * 4096, 5);
	ck_assert_int_eq(arb_fs_open_inode(fs, f), 0);
	ck_assert_int_eq(arb_fs_open_inode(fs, f), 0);
	ck_assert_int_eq(arb_fs_unlink(fs, ROOT, "pinned"), 0);
	/* the commit writes the delayed data: the arb_imem goes, the pin
	 * stays */
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_ptr_null(fs_imem_get(fs, f, false));
	ck_assert(fs_inode_pinned(fs, f));
	sa.mtime.tv_sec = 1234;
	ck_assert_int_eq(arb_fs_setattr(fs, f, &sa, ARB_SET_MTIME, &cred, &st),
			 0);
	ck_assert_int_eq(st.mtime.tv_sec, 1234);
	write_pattern(f, 3 * 4096, 4096, 5);
	ck_assert_int_eq(arb_fs_release_inode(fs, f), 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	/* one pin left: still there, data intact */
	ck_assert_int_eq(arb_fs_getattr(fs, f, &st), 0);
	ck_assert_uint_eq(st.nlink, 0);
	expect_pattern(f, 0, 4 * 4096, 5);
	ck_assert_int_eq(arb_fs_release_inode(fs, f), 0);
	ck_assert_int_eq(arb_fs_getattr(fs, f, &st), -ENOENT);
	ck_assert_int_eq(arb_fs_release_inode(fs, f), -EINVAL);
	check_clean();

	/* many pinned inodes, no delayed data: no arb_imem for any */
	for (size_t i = 0; i < 200; i++) {
		char name[16];

		snprintf(name, sizeof(name), "m%zu", i);
		many[i] = mkfile(ROOT, name);
		ck_assert_int_eq(arb_fs_open_inode(fs, many[i]), 0);
	}
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_uint_eq(fs->imem_count, 0);
	ck_assert_uint_eq(fs->pins.n, 200);
	/* half unlinked while pinned: freed by close, the rest kept */
	for (size_t i = 0; i < 200; i += 2) {
		char name[16];

		snprintf(name, sizeof(name), "m%zu", i);
		ck_assert_int_eq(arb_fs_unlink(fs, ROOT, name), 0);
	}
	reopen();
	for (size_t i = 0; i < 200; i++)
		ck_assert_int_eq(arb_fs_getattr(fs, many[i], &st),
				 i % 2 ? 0 : -ENOENT);
	check_clean();
}
END_TEST

START_TEST(test_enospc)
{
	/* small image: fill it, get ENOSPC, delete, and write again */
	uint64_t f, g;
	size_t chunk = 256 * 1024, written = 0;
	ssize_t n;
	uint8_t *buf = malloc(chunk);
	struct arb_stat st;
	struct statvfs sv;

	teardown();
	setup_size(32 * MiB, 0);
	ck_assert_int_eq(arb_fs_statfs(fs, &sv), 0);
	ck_assert_uint_eq(sv.f_bsize, 4096);
	ck_assert_uint_eq(sv.f_blocks, 32 * MiB / 4096);
	ck_assert_uint_eq(sv.f_namemax, 255);
	ck_assert_uint_gt(sv.f_bavail, 0);
	f = mkfile(ROOT, "fill");
	pattern(buf, chunk, 0, 1);
	for (;;) {
		n = arb_fs_write(fs, f, buf, chunk, written);
		if (n < 0)
			break;
		ck_assert_int_eq(n, (ssize_t)chunk);
		written += chunk;
		ck_assert_uint_lt(written, 32 * MiB);
	}
	ck_assert_int_eq(n, -ENOSPC);
	ck_assert_uint_gt(written, 16 * MiB);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_fs_statfs(fs, &sv), 0);
	ck_assert_uint_lt(sv.f_bavail, 1 * MiB / 4096);
	/* small creates fail cleanly too, or succeed: never corrupt */
	n = arb_fs_mknod(fs, ROOT, "x", S_IFREG | 0644, 0, &cred, &st);
	ck_assert(n == 0 || n == -ENOSPC);
	check_clean();
	reopen();
	expect_pattern(f, 0, chunk, 1);
	ck_assert_int_eq(arb_fs_unlink(fs, ROOT, "fill"), 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	g = mkfile(ROOT, "again");
	for (size_t off = 0; off < written / 2; off += chunk)
		write_all(g, buf, chunk, off);
	reopen();
	expect_pattern(g, 0, chunk, 1);
	free(buf);
}
END_TEST

START_TEST(test_csum_error)
{
	uint64_t f = mkfile(ROOT, "c");
	struct arb_key k = { f, ARB_EXTENT_DATA, 0 };
	struct arb_file_extent fe;
	uint8_t b[100];

	write_pattern(f, 0, 64 * 1024, 1);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_lookup_item(fs_tree0(fs)->root, &k, &fe, sizeof(fe)),
			 (int)sizeof(fe));
	uint64_t disk = arb_file_extent_f_disk_bytenr(&fe);
	reopen(); /* drop cached state */
	arb_dev_mem_data(mem)[disk + 5 * 4096 + 17] ^= 0x40;
	ck_assert_int_eq(arb_fs_read(fs, f, b, 100, 4096), 100);
	ck_assert_int_eq(arb_fs_read(fs, f, b, 100, 5 * 4096), -EIO);
	/* rewriting the block heals the file */
	write_pattern(f, 5 * 4096, 4096, 1);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	expect_pattern(f, 0, 64 * 1024, 1);
}
END_TEST

/*
 * Trim zeroes every free run of the memory device (as a hole reads): a
 * punched block that anything still used would fail its checksum, or
 * read as zeros, or fail the check.  Files of several sizes, half of them
 * deleted between trims, with and without discard after commits.
 */
START_TEST(test_trim)
{
	enum { N = 60 };
	uint64_t ino[N] = { 0 }, trimmed, total = 0, seed = 7;
	size_t size[N];
	char name[32];

	for (int round = 0; round < 4; round++) {
		if (round == 2) {
			/* discard after commits (at close here: no thread) */
			ck_assert_int_eq(arb_fs_close(fs), 0);
			fs = NULL;
			fopts.discard = true;
			fs_open_now();
		}
		for (int i = 0; i < N; i++) {
			if (ino[i])
				continue;
			snprintf(name, sizeof(name), "t%d-%d", round, i);
			ino[i] = mkfile(ROOT, name);
			size[i] = (size_t)(tu_rand(&seed) % 4 == 0
						   ? 1000
						   : 4096 * (1 + tu_rand(&seed) % 64));
			write_pattern(ino[i], 0, size[i], (uint32_t)ino[i]);
		}
		ck_assert_int_eq(arb_fs_sync(fs), 0);
		for (int i = 0; i < N; i++) {
			struct arb_stat st;

			if (tu_rand(&seed) % 2)
				continue;
			ck_assert_int_eq(arb_fs_getattr(fs, ino[i], &st), 0);
			snprintf(name, sizeof(name), "t%d-%d", round, i);
			/* the name may come from an earlier round */
			for (int r = round; r >= 0; r--) {
				snprintf(name, sizeof(name), "t%d-%d", r, i);
				if (arb_fs_unlink(fs, ROOT, name) == 0)
					break;
			}
			ino[i] = 0;
		}
		trimmed = 0;
		ck_assert_int_eq(arb_fs_trim(fs, 0, UINT64_MAX, 0, &trimmed), 0);
		ck_assert_uint_gt(trimmed, 0);
		total += trimmed;
		for (int i = 0; i < N; i++)
			if (ino[i])
				expect_pattern(ino[i], 0, size[i],
					       (uint32_t)ino[i]);
		reopen();
		for (int i = 0; i < N; i++)
			if (ino[i])
				expect_pattern(ino[i], 0, size[i],
					       (uint32_t)ino[i]);
	}
	/* minlen larger than every free run but the big tail: less */
	ck_assert_int_eq(arb_fs_trim(fs, 0, UINT64_MAX, 1ULL << 40, &trimmed),
			 0);
	ck_assert_uint_eq(trimmed, 0);
	ck_assert_uint_gt(total, 0);
}
END_TEST

START_TEST(test_enospc_meta)
{
	/* metadata only: create files with xattrs until ENOSPC, then remove
	 * them all; the filesystem must stay writable and clean */
	char name[64], val[2000];
	struct arb_stat st;
	int n = 0, ret;

	teardown();
	setup_size(8 * MiB, 4096);
	memset(val, 'v', sizeof(val));
	for (;;) {
		snprintf(name, sizeof(name), "some-file-name-%06d", n);
		ret = arb_fs_mknod(fs, ROOT, name, S_IFREG | 0644, 0, &cred,
				   &st);
		if (ret == 0)
			ret = arb_fs_setxattr(fs, st.ino, "user.v", val,
					      sizeof(val), 0);
		if (ret)
			break;
		n++;
		ck_assert_int_lt(n, 100000);
	}
	ck_assert_int_eq(ret, -ENOSPC);
	ck_assert_int_gt(n, 100);
	check_clean();
	reopen();
	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "some-file-name-%06d", i);
		ck_assert_int_eq(arb_fs_unlink(fs, ROOT, name), 0);
	}
	/* an inode may exist without its xattr: remove that one too */
	snprintf(name, sizeof(name), "some-file-name-%06d", n);
	ret = arb_fs_unlink(fs, ROOT, name);
	ck_assert(ret == 0 || ret == -ENOENT);
	ck_assert_uint_eq(count_entries(ROOT), 2);
	reopen();
	mkfile(ROOT, "after");
}
END_TEST

START_TEST(test_space_reuse)
{
	/* data space freed by deletes is reused: checksums of the old
	 * extents must be gone (large extents have checksum items in several
	 * leaves) */
	uint64_t f;
	char name[16];

	teardown();
	setup_size(48 * MiB, 0);
	for (int round = 0; round < 6; round++) {
		snprintf(name, sizeof(name), "r%d", round);
		f = mkfile(ROOT, name);
		for (size_t off = 0; off < 12 * MiB; off += 128 * 1024)
			write_pattern(f, off, 128 * 1024, 100 + round);
		ck_assert_int_eq(arb_fs_sync(fs), 0);
		/* a second, small file in between shifts the next extents */
		uint64_t g = mkfile(ROOT, "small");
		write_pattern(g, 0, 4096 * (round + 1), 1);
		ck_assert_int_eq(arb_fs_sync(fs), 0);
		reopen();
		expect_pattern(f, 0, 12 * MiB, 100 + round);
		ck_assert_int_eq(arb_fs_unlink(fs, ROOT, name), 0);
		ck_assert_int_eq(arb_fs_unlink(fs, ROOT, "small"), 0);
		ck_assert_int_eq(arb_fs_sync(fs), 0);
	}
}
END_TEST

START_TEST(test_open_errors)
{
	struct arb_dev *d;
	struct arb_fs *x;
	const char *why = NULL;

	ck_assert_int_eq(arb_dev_open_mem(8 * MiB, &d), 0);
	ck_assert_int_ne(arb_fs_open(d, NULL, &x, &why), 0);
	ck_assert_ptr_nonnull(why);
	ck_assert_str_eq(why, "not an arborfs image (no superblock magic)");
	arb_dev_destroy(d);
	/* an image whose mkfs never finished */
	ck_assert_int_eq(arb_dev_open_mem(8 * MiB, &d), 0);
	ck_assert_int_eq(arb_mkfs(d, NULL), 0);
	for (int i = 0; i < 2; i++) {
		struct arb_super *sb = (struct arb_super *)(arb_dev_mem_data(d) +
			(i ? ARB_SUPER_OFFSET1 : ARB_SUPER_OFFSET0));
		arb_set_super_s_magic(sb, ARB_MAGIC_TEMPORARY);
	}
	why = NULL;
	ck_assert_int_eq(arb_fs_open(d, NULL, &x, &why), -EINVAL);
	ck_assert_str_eq(why, "mkfs did not finish on this image");
	arb_dev_destroy(d);
	/* the superblock reader's reasons: a newer version, a bad checksum,
	 * a truncated image; dev stays the caller's after each failure */
	for (int kind = 0; kind < 3; kind++) {
		ck_assert_int_eq(arb_dev_open_mem(8 * MiB, &d), 0);
		ck_assert_int_eq(arb_mkfs(d, NULL), 0);
		for (int i = 0; i < 2; i++) {
			struct arb_super *sb = (struct arb_super *)(
				arb_dev_mem_data(d) +
				(i ? ARB_SUPER_OFFSET1 : ARB_SUPER_OFFSET0));
			if (kind == 0)
				arb_set_super_s_version(sb,
							ARB_FORMAT_VERSION + 1);
			else if (kind == 1)
				arb_set_super_s_generation(sb, 12345);
			else
				arb_set_super_s_total_bytes(sb, 64 * MiB);
			if (kind != 1)
				arb_csum_block(ARB_CSUM_CRC32C, sb,
					       sizeof(*sb), (uint8_t *)sb);
		}
		why = NULL;
		int r = arb_fs_open(d, NULL, &x, &why);
		ck_assert_ptr_nonnull(why);
		if (kind == 0) {
			ck_assert_int_eq(r, -EPROTONOSUPPORT);
			ck_assert_str_eq(why, "format version newer than this "
					      "arborfs supports");
		} else if (kind == 1) {
			ck_assert_int_eq(r, -EUCLEAN);
			ck_assert_str_eq(why, "bad superblock checksum");
		} else {
			ck_assert_int_eq(r, -EUCLEAN);
			ck_assert(strstr(why, "truncated") != NULL);
		}
		arb_dev_destroy(d);
	}
	/* read-only open */
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fopts.readonly = true;
	fs_open_now();
	struct arb_stat st;
	ck_assert_int_eq(arb_fs_mknod(fs, ROOT, "x", S_IFREG, 0, &cred, &st),
			 -EROFS);
	ck_assert_int_eq(arb_fs_getattr(fs, ROOT, &st), 0);
	struct arb_fs_stats s;
	ck_assert_int_eq(arb_fs_get_stats(fs, &s), 0);
	ck_assert_uint_eq(s.total_bytes, 256 * MiB);
}
END_TEST

START_TEST(test_commit_thread)
{
	struct arb_fs_stats s0, s1;
	uint64_t f;

	ck_assert_int_eq(arb_fs_close(fs), 0);
	fopts.commit_interval = 1;
	fs_open_now();
	ck_assert_int_eq(arb_fs_get_stats(fs, &s0), 0);
	f = mkfile(ROOT, "t");
	write_pattern(f, 0, 100000, 1);
	for (int i = 0; i < 40; i++) {
		usleep(100 * 1000);
		ck_assert_int_eq(arb_fs_get_stats(fs, &s1), 0);
		if (s1.generation > s0.generation)
			break;
	}
	ck_assert_uint_gt(s1.generation, s0.generation);
	ck_assert_uint_eq(s1.user_bytes_written, 100000);
	ck_assert_uint_gt(s1.bytes_written[ARB_IO_DATA], 0);
	/* what the thread committed is what a crash would leave */
	struct arb_dev *c;
	ck_assert_int_eq(arb_dev_open_mem(mem->size, &c), 0);
	fs_lock(fs); /* not in the middle of a commit */
	memcpy(arb_dev_mem_data(c), arb_dev_mem_data(mem), mem->size);
	fs_unlock(fs);
	struct arb_fs *save = fs, *x;
	const char *why;
	ck_assert_int_eq(arb_fs_open(c, NULL, &x, &why), 0);
	fs = x;
	expect_pattern(f, 0, 100000, 1);
	check_clean();
	ck_assert_int_eq(arb_fs_close(x), 0);
	fs = save;
}
END_TEST

/*
 * Crash consistency through the fs layer: record every write and flush of
 * a workload with syncs, rebuild the image as a crash at each point could
 * leave it (dropped, reordered and torn unflushed writes), and require a
 * clean image holding exactly the state of one sync point, not older than
 * the last sync that returned before the crash point.
 */
#define CRASH_SYNCS 8
START_TEST(test_crash_points)
{
	struct arb_dev *base, *log, *img;
	size_t flushes[4096], nf, sync_at[CRASH_SYNCS + 1];
	uint64_t f;
	char name[16];
	uint64_t seed = tu_seed("fs crash");

	teardown();
	ck_assert_int_eq(arb_dev_open_mem(32 * MiB, &base), 0);
	{
		struct arb_dev *d = tu_dev_borrow(base);
		ck_assert_int_eq(arb_mkfs(d, NULL), 0);
		arb_dev_destroy(d);
	}
	ck_assert_int_eq(arb_dev_log_wrap(base, &log), 0);
	mem = log;
	fs_open_now();
	f = mkfile(ROOT, "f");
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	sync_at[0] = arb_dev_log_len(log);
	for (int k = 1; k <= CRASH_SYNCS; k++) {
		/* version k: rewrite part of f, grow it, one more file */
		write_pattern(f, 0, 40000 + 30000 * k, 1000 + k);
		snprintf(name, sizeof(name), "g%d", k);
		mkfile(ROOT, name);
		if (k % 3 == 0) {
			snprintf(name, sizeof(name), "g%d", k - 1);
			ck_assert_int_eq(arb_fs_unlink(fs, ROOT, name), 0);
		}
		ck_assert_int_eq(arb_fs_sync(fs), 0);
		sync_at[k] = arb_dev_log_len(log);
	}
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs = NULL;

	nf = arb_dev_log_flushes(log, flushes, 4096);
	ck_assert_uint_gt(nf, CRASH_SYNCS);
	for (size_t i = 0; i <= nf; i++) {
		size_t n = i < nf ? flushes[i] : arb_dev_log_len(log);
		for (int mode = 0; mode < 3; mode++) {
			int done = 0, k;
			struct arb_stat st;

			ck_assert_int_eq(arb_dev_log_replay(log, n, mode,
							    seed + i * 3 + mode,
							    &img),
					 0);
			mem = img;
			fs_open_now();
			check_clean();
			for (k = 0; k <= CRASH_SYNCS; k++)
				if (sync_at[k] <= n)
					done = k;
			if (!lookup(ROOT, "f")) {
				/* before the first sync returned */
				ck_assert_uint_gt(sync_at[0], n);
				ck_assert_uint_eq(count_entries(ROOT), 2);
				goto next;
			}
			/* which version is it */
			st = getattr(f);
			k = st.size ? (int)((st.size - 40000) / 30000) : 0;
			ck_assert_int_ge(k, done);
			ck_assert_int_le(k, done + 1);
			if (k)
				expect_pattern(f, 0, st.size, 1000 + k);
			for (int j = 1; j <= CRASH_SYNCS; j++) {
				bool want = j <= k && !(j + 1 <= k && (j + 1) % 3 == 0);
				snprintf(name, sizeof(name), "g%d", j);
				ck_assert_msg((lookup(ROOT, name) != 0) == want,
					      "crash at %zu: %s %s", n, name,
					      want ? "missing" : "present");
			}
next:
			ck_assert_int_eq(arb_fs_close(fs), 0);
			fs = NULL;
			arb_dev_destroy(img);
		}
	}
	mem = log; /* teardown destroys it (and base with it) */
}
END_TEST

/* threads working in parallel (the FUSE daemon is multi-threaded) */
/* each worker's model of its directory: the fill byte of w<id>-<n>,
 * and of ROOT/r<id> where renames put files; -1 = absent */
struct worker {
	int id;
	uint64_t dir;
	int errors;
	int model[17];
	int renamed;
};

static void *worker_fn(void *arg)
{
	struct worker *w = arg;
	char name[32];
	uint8_t buf[20000], back[20000];
	struct arb_stat st;

	for (int i = 0; i < 200; i++) {
		snprintf(name, sizeof(name), "w%d-%d", w->id, i % 17);
		if (arb_fs_mknod(fs, w->dir, name, S_IFREG | 0644, 0, &cred,
				 &st) &&
		    arb_fs_lookup(fs, w->dir, name, &st)) {
			w->errors++;
			continue;
		}
		memset(buf, w->id * 31 + i, sizeof(buf));
		if (arb_fs_write(fs, st.ino, buf, sizeof(buf), 0) !=
			    (ssize_t)sizeof(buf) ||
		    arb_fs_read(fs, st.ino, back, sizeof(back), 0) !=
			    (ssize_t)sizeof(back) ||
		    memcmp(buf, back, sizeof(buf)))
			w->errors++;
		w->model[i % 17] = (uint8_t)(w->id * 31 + i);
		if (i % 5 == 0) {
			if (arb_fs_unlink(fs, w->dir, name))
				w->errors++;
			w->model[i % 17] = -1;
		}
		if (i % 50 == 0 && arb_fs_fsync(fs, st.ino, false))
			w->errors++;
		if (i % 7 == 0) {
			char other[32];
			int ret;

			snprintf(other, sizeof(other), "r%d", w->id);
			ret = arb_fs_rename(fs, w->dir, name, ROOT, other, 0);
			if (ret != (w->model[i % 17] < 0 ? -ENOENT : 0))
				w->errors++;
			if (!ret) {
				w->renamed = w->model[i % 17];
				w->model[i % 17] = -1;
			}
		}
	}
	return NULL;
}

START_TEST(test_threads)
{
	pthread_t th[4];
	struct worker w[4];
	char name[16];

	ck_assert_int_eq(arb_fs_close(fs), 0);
	fopts.commit_interval = 1;
	fs_open_now();
	for (int i = 0; i < 4; i++) {
		snprintf(name, sizeof(name), "t%d", i);
		w[i].id = i;
		w[i].dir = mkdir_(ROOT, name);
		w[i].errors = 0;
		w[i].renamed = -1;
		for (int n = 0; n < 17; n++)
			w[i].model[n] = -1;
		ck_assert_int_eq(pthread_create(&th[i], NULL, worker_fn, &w[i]),
				 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		ck_assert_int_eq(w[i].errors, 0);
	}
	reopen();
	/* what survives the remount is what each worker's model says */
	for (int i = 0; i < 4; i++) {
		for (int n = 0; n <= 17; n++) {
			uint8_t back[20000];
			struct arb_stat st;
			uint64_t dir = n < 17 ? w[i].dir : ROOT;
			int want = n < 17 ? w[i].model[n] : w[i].renamed;
			int ret;

			if (n < 17)
				snprintf(name, sizeof(name), "w%d-%d", i, n);
			else
				snprintf(name, sizeof(name), "r%d", i);
			ret = arb_fs_lookup(fs, dir, name, &st);
			ck_assert_msg(ret == (want < 0 ? -ENOENT : 0),
				      "%s: lookup %d, model %d", name, ret, want);
			if (want < 0)
				continue;
			ck_assert_uint_eq(st.size, sizeof(back));
			ck_assert_int_eq(arb_fs_read(fs, st.ino, back,
						     sizeof(back), 0),
					 (ssize_t)sizeof(back));
			for (size_t k = 0; k < sizeof(back); k++)
				ck_assert_msg(back[k] == want,
					      "%s: byte %zu is %u, want %d", name,
					      k, back[k], want);
		}
	}
}
END_TEST

/*
 * Data reads run outside the lock (file.c, rd_plan): while one is in
 * flight, the blocks it found mapped must not be reused, even when a
 * commit frees them and an allocation on a nearly full image wants them at
 * once.  A device whose data reads wait first makes every read overlap the
 * writer's overwrite + commit; each read must still return one whole
 * version of the file and never a checksum error.
 */
static _Atomic bool reuse_done;
static _Atomic int reuse_iter; /* overwrites + commits done */

/*
 * A data read waits until the writer has gone round the free space
 * (about 16 overwrites of the file here), so the blocks the read found
 * are freed and reused under it unless something holds them.  At most
 * 200 ms: with the grace lists the writer may be the one waiting, for
 * this read to end.
 */
static void slow_data_read(enum arb_io_kind kind)
{
	int start = atomic_load(&reuse_iter);

	if (kind != ARB_IO_DATA)
		return;
	for (int i = 0; i < 200 && !atomic_load(&reuse_done) &&
			atomic_load(&reuse_iter) < start + 24;
	     i++)
		usleep(1000);
}

#define REUSE_FILE (256 * 1024)
#define REUSE_ROUNDS 150

struct reuse_reader {
	uint64_t ino;
	_Atomic int reads;
	int errors;
};

static void *reuse_reader_fn(void *arg)
{
	struct reuse_reader *r = arg;
	uint8_t *buf = malloc(REUSE_FILE);

	while (!atomic_load(&reuse_done)) {
		ssize_t n = arb_fs_read(fs, r->ino, buf, REUSE_FILE, 0);
		r->reads++;
		if (n != REUSE_FILE) {
			r->errors++;
			continue;
		}
		for (size_t i = 1; i < REUSE_FILE; i++)
			if (buf[i] != buf[0]) {
				r->errors++;
				break;
			}
	}
	free(buf);
	return NULL;
}

START_TEST(test_read_during_reuse)
{
	size_t chunk = 1024 * 1024, written = 0;
	struct reuse_reader rd[2] = { { 0 } };
	uint8_t *buf = malloc(chunk);
	struct arb_setattr sa = { 0 };
	const char *why;
	pthread_t th[2];
	uint64_t fill, f;
	int v;
	ssize_t n;

	teardown();
	setup_size(32 * MiB, 0);
	ck_assert_int_eq(arb_fs_close(fs), 0);
	ck_assert_int_eq(arb_fs_open(tu_dev_borrow_hooked(mem, slow_data_read),
				     &fopts, &fs, &why),
			 0);
	/* nearly full: what an overwrite frees is what the next one gets */
	fill = mkfile(ROOT, "fill");
	memset(buf, 0xee, chunk);
	while ((n = arb_fs_write(fs, fill, buf, chunk, written)) > 0)
		written += (size_t)n;
	ck_assert_int_eq(n, -ENOSPC);
	/* room for the file's live version, the one its commit frees, and
	 * a little: every overwrite takes what the one before freed */
	sa.size = written - chunk;
	ck_assert_int_eq(arb_fs_setattr(fs, fill, &sa, ARB_SET_SIZE, NULL,
					NULL),
			 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	f = mkfile(ROOT, "f");
	memset(buf, 0, REUSE_FILE);
	write_all(f, buf, REUSE_FILE, 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);

	atomic_store(&reuse_done, false);
	atomic_store(&reuse_iter, 0);
	for (int i = 0; i < 2; i++) {
		rd[i].ino = f;
		ck_assert_int_eq(pthread_create(&th[i], NULL, reuse_reader_fn,
						&rd[i]),
				 0);
	}
	/* at least REUSE_ROUNDS, and on until each reader has read 3 times
	 * (a reader slow to start saw too few rounds): bounded all the same */
	for (v = 1; v <= REUSE_ROUNDS ||
			(v <= 20 * REUSE_ROUNDS &&
			 (atomic_load(&rd[0].reads) < 3 ||
			  atomic_load(&rd[1].reads) < 3));
	     v++) {
		memset(buf, v, REUSE_FILE);
		write_all(f, buf, REUSE_FILE, 0);
		/* allocates, writes and commits: frees the last version */
		ck_assert_int_eq(arb_fs_fsync(fs, f, false), 0);
		atomic_fetch_add(&reuse_iter, 1);
	}
	atomic_store(&reuse_done, true);
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		ck_assert_int_gt(atomic_load(&rd[i].reads), 2);
		ck_assert_msg(rd[i].errors == 0, "reader %d: %d of %d reads bad",
			      i, rd[i].errors, atomic_load(&rd[i].reads));
	}
	free(buf);
	reopen();
	{
		uint8_t back[64];
		ck_assert_int_eq(arb_fs_read(fs, f, back, sizeof(back), 0),
				 (ssize_t)sizeof(back));
		ck_assert_uint_eq(back[0], (uint8_t)(v - 1));
	}
}
END_TEST

/*
 * A writer's share of the flush (past 16 MiB of delayed data) writes its
 * data into the image after letting go of the volume lock (struct fs_wb,
 * delalloc.c).  A device that holds up the first large data write shows
 * both halves: meanwhile another thread gets the lock (a getattr
 * completes), and a read of the bytes being written waits for them
 * instead of reading what the image held before.
 */
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
/* 0 off, 1 armed: the next data write of 64 KiB or more waits, 2 one
 * waits, 3 open */
static int gate_state;

static void gate_write(enum arb_io_kind kind, size_t len)
{
	if (kind != ARB_IO_DATA || len < 64 * 1024)
		return;
	pthread_mutex_lock(&gate_mu);
	if (gate_state == 1) {
		gate_state = 2;
		pthread_cond_broadcast(&gate_cv);
		while (gate_state == 2)
			pthread_cond_wait(&gate_cv, &gate_mu);
	}
	pthread_mutex_unlock(&gate_mu);
}

static void gate_set(int v)
{
	pthread_mutex_lock(&gate_mu);
	gate_state = v;
	pthread_cond_broadcast(&gate_cv);
	pthread_mutex_unlock(&gate_mu);
}

/* wait until *flag (under gate_mu) is set, at most secs: whether it was */
static bool gate_wait_for(const int *flag, int want, int secs)
{
	struct timespec ts;
	bool ok;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += secs;
	pthread_mutex_lock(&gate_mu);
	while (*flag != want &&
	       pthread_cond_timedwait(&gate_cv, &gate_mu, &ts) == 0)
		;
	ok = *flag == want;
	pthread_mutex_unlock(&gate_mu);
	return ok;
}

#define GATE_TOTAL (24 * MiB)
struct gate_job {
	uint64_t ino;
	int done; /* under gate_mu */
	ssize_t ret;
	uint8_t *buf;
};

/* j finished: tell the test */
static void *gate_done(struct gate_job *j)
{
	pthread_mutex_lock(&gate_mu);
	j->done = 1;
	pthread_cond_broadcast(&gate_cv);
	pthread_mutex_unlock(&gate_mu);
	return NULL;
}

static void *gate_writer(void *arg)
{
	struct gate_job *j = arg;
	uint8_t *b = malloc(MiB);

	for (uint64_t off = 0; off < GATE_TOTAL && j->ret >= 0; off += MiB) {
		pattern(b, MiB, off, 21);
		j->ret = arb_fs_write(fs, j->ino, b, MiB, off);
	}
	free(b);
	return gate_done(j);
}

static void *gate_getattr(void *arg)
{
	struct gate_job *j = arg;
	struct arb_stat st;

	j->ret = arb_fs_getattr(fs, j->ino, &st);
	return gate_done(j);
}

static void *gate_reader(void *arg)
{
	struct gate_job *j = arg;

	j->buf = malloc(MiB);
	j->ret = arb_fs_read(fs, j->ino, j->buf, MiB, 0);
	return gate_done(j);
}

START_TEST(test_flush_outside_lock)
{
	struct gate_job w = { 0 }, g = { 0 }, r = { 0 };
	pthread_t tw, tg, tr;
	bool got_lock, waited;
	const char *why;
	uint8_t *e;

	ck_assert_int_eq(arb_fs_close(fs), 0);
	ck_assert_int_eq(arb_fs_open(tu_dev_borrow_hooks(mem, NULL,
							  gate_write),
				     &fopts, &fs, &why),
			 0);
	w.ino = g.ino = r.ino = mkfile(ROOT, "big");
	gate_set(1);
	ck_assert_int_eq(pthread_create(&tw, NULL, gate_writer, &w), 0);
	ck_assert_msg(gate_wait_for(&gate_state, 2, 60),
		      "no large data write came");
	/* the writer waits inside its deferred write */
	ck_assert_int_eq(pthread_create(&tg, NULL, gate_getattr, &g), 0);
	got_lock = gate_wait_for(&g.done, 1, 20);
	/* the first MiB went out in the first step of the flush */
	ck_assert_int_eq(pthread_create(&tr, NULL, gate_reader, &r), 0);
	usleep(200 * 1000);
	pthread_mutex_lock(&gate_mu);
	waited = !r.done;
	pthread_mutex_unlock(&gate_mu);
	gate_set(3);
	pthread_join(tg, NULL);
	pthread_join(tr, NULL);
	pthread_join(tw, NULL);
	gate_set(0);
	ck_assert_msg(got_lock, "the volume lock was held during the "
				"flush's data write");
	ck_assert_int_eq(g.ret, 0);
	ck_assert_msg(waited, "a read of the bytes in flight did not wait");
	ck_assert_int_eq(w.ret, (ssize_t)MiB);
	ck_assert_int_eq(r.ret, (ssize_t)MiB);
	e = malloc(MiB);
	pattern(e, MiB, 0, 21);
	ck_assert_msg(memcmp(r.buf, e, MiB) == 0,
		      "the read returned other bytes than those written");
	free(e);
	free(r.buf);
	expect_pattern(w.ino, 0, GATE_TOTAL, 21);
	reopen();
	expect_pattern(w.ino, 0, GATE_TOTAL, 21);
}
END_TEST

/*
 * Random 4 KiB rewrites past the flush threshold: each step of the flush
 * makes many one-block extents, next to each other on disk, whose writes
 * are deferred as one (wb_add).  The file must read as a model of it
 * says, before and after a reopen.
 */
START_TEST(test_deferred_random_rewrites)
{
	size_t fsize = 24 * MiB, nblk = fsize / 4096;
	uint8_t *model = malloc(fsize), blk[4096];
	uint64_t f = mkfile(ROOT, "r"), seed = 12345;

	pattern(model, fsize, 0, 5);
	write_all(f, model, fsize, 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	for (size_t i = 0; i < 3 * nblk; i++) {
		size_t b;

		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		b = (size_t)(seed >> 33) % nblk;
		memset(blk, (int)(i & 0xff), sizeof(blk));
		blk[0] = (uint8_t)(b & 0xff);
		write_all(f, blk, sizeof(blk), b * 4096);
		memcpy(model + b * 4096, blk, sizeof(blk));
		if (i % 4096 == 0) {
			uint8_t back[4096];
			size_t c = (size_t)(seed >> 20) % nblk;

			ck_assert_int_eq(arb_fs_read(fs, f, back, 4096,
						     c * 4096),
					 4096);
			ck_assert(memcmp(back, model + c * 4096, 4096) == 0);
		}
	}
	for (int round = 0; round < 2; round++) {
		uint8_t *back = malloc(fsize);

		ck_assert_int_eq(arb_fs_read(fs, f, back, fsize, 0),
				 (ssize_t)fsize);
		for (size_t b = 0; b < nblk; b++)
			ck_assert_msg(memcmp(back + b * 4096,
					     model + b * 4096, 4096) == 0,
				      "block %zu differs (round %d)", b,
				      round);
		free(back);
		if (!round)
			reopen();
	}
	free(model);
}
END_TEST

/*
 * The compressor thread (compress.c): with the daemon's threads and
 * compress=zlib, a log appended in small writes and small files written
 * whole are compressed ahead of the flush (compressed_early_bytes counts
 * what the flush found compressed), a chunk rewritten while it was being
 * compressed is not given the old result, and everything reads back.
 */
static void text_fill(uint8_t *b, size_t len, uint64_t off)
{
	static const char words[] = "struct arb_fs *fs, uint64_t ino, "
				     "const void *buf, size_t size; ";
	for (size_t i = 0; i < len; i++)
		b[i] = (uint8_t)words[(off + i) % (sizeof(words) - 1)];
}

struct zw_rewriter {
	uint64_t ino;
	_Atomic bool stop;
	int rounds;
};

static void *zw_rewrite_fn(void *arg)
{
	struct zw_rewriter *r = arg;
	uint8_t *b = malloc(128 * 1024);

	while (!atomic_load(&r->stop)) {
		text_fill(b, 128 * 1024, (uint64_t)r->rounds);
		ck_assert_int_eq(arb_fs_write(fs, r->ino, b, 128 * 1024, 0),
				 128 * 1024);
		r->rounds++;
	}
	free(b);
	return NULL;
}

/* more files than the queue's first room (64) */
#define ZW_FILES 120
#define ZW_LEN(i) (10000 + 800 * (size_t)((i) % 100))

START_TEST(test_compressor_thread)
{
	struct arb_fs_opts o = fopts;
	struct arb_fs_stats st;
	struct zw_rewriter rw = { 0 };
	const char *why;
	uint8_t line[100], *b = malloc(MiB), *e = malloc(MiB);
	uint64_t log, f[ZW_FILES], off;
	pthread_t th;

	ck_assert_int_eq(arb_fs_close(fs), 0);
	o.commit_interval = 30;
	o.compress = ARB_COMPRESS_ZLIB;
	ck_assert_int_eq(arb_fs_open(tu_dev_borrow(mem), &o, &fs, &why), 0);
	ck_assert(fs->zworker_running);
	log = mkfile(ROOT, "log");
	for (off = 0; off < MiB; off += sizeof(line)) {
		text_fill(line, sizeof(line), off);
		write_all(log, line, sizeof(line), off);
	}
	for (int i = 0; i < ZW_FILES; i++) {
		char name[16];

		snprintf(name, sizeof(name), "s%d", i);
		f[i] = mkfile(ROOT, name);
		text_fill(b, ZW_LEN(i), (uint64_t)i);
		write_all(f[i], b, ZW_LEN(i), 0);
	}
	fs_zw_wait_idle(fs);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_fs_get_stats(fs, &st), 0);
	/* 7 whole chunks of the log and every small file, at least */
	ck_assert_msg(st.compressed_early_bytes >=
			      7 * 128 * 1024 + ZW_FILES * 8192,
		      "compressed ahead of the flush: %llu bytes",
		      (unsigned long long)st.compressed_early_bytes);

	/* rewrites racing the thread: the file ends as last written */
	rw.ino = mkfile(ROOT, "rw");
	ck_assert_int_eq(pthread_create(&th, NULL, zw_rewrite_fn, &rw), 0);
	usleep(300 * 1000);
	atomic_store(&rw.stop, true);
	pthread_join(th, NULL);
	ck_assert_int_gt(rw.rounds, 1);

	for (int round = 0; round < 2; round++) {
		ck_assert_int_eq(arb_fs_read(fs, log, b, MiB, 0), (ssize_t)MiB);
		text_fill(e, MiB, 0);
		ck_assert(memcmp(b, e, MiB) == 0);
		for (int i = 0; i < ZW_FILES; i++) {
			size_t len = ZW_LEN(i);

			ck_assert_int_eq(arb_fs_read(fs, f[i], b, len, 0),
					 (ssize_t)len);
			text_fill(e, len, (uint64_t)i);
			ck_assert_msg(memcmp(b, e, len) == 0, "file s%d", i);
		}
		ck_assert_int_eq(arb_fs_read(fs, rw.ino, b, 128 * 1024, 0),
				 128 * 1024);
		text_fill(e, 128 * 1024, (uint64_t)rw.rounds - 1);
		ck_assert_msg(memcmp(b, e, 128 * 1024) == 0,
			      "rw is not its last version (round %d)", round);
		if (!round) {
			ck_assert_int_eq(arb_fs_close(fs), 0);
			fs = NULL;
			fs_open_now();
		}
	}
	free(b);
	free(e);
}
END_TEST

/*
 * A deferred data write that fails: the write(2) that had it deferred
 * returned long ago, so the failure must fail the next commit (no tree
 * pointing at bytes that are not there becomes durable), and the image
 * keeps the commit before.
 */
START_TEST(test_deferred_write_error)
{
	struct arb_dev *fault;
	struct arb_fs_stats s;
	const char *why;
	uint64_t f, good, off;
	int ret;

	ck_assert_int_eq(arb_fs_close(fs), 0);
	ck_assert_int_eq(arb_dev_fault_wrap(tu_dev_borrow(mem), &fault), 0);
	ck_assert_int_eq(arb_fs_open(fault, &fopts, &fs, &why), 0);
	f = mkfile(ROOT, "f");
	write_pattern(f, 0, 2 * MiB, 1);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_fs_get_stats(fs, &s), 0);
	good = s.generation;
	/* 16 MiB of delayed data, no write to the image yet */
	for (off = 0; off < 16 * MiB; off += MiB)
		write_pattern(f, off, MiB, 2);
	ck_assert_uint_eq(arb_dev_fault_count(fault, ARB_FAULT_WRITE) > 0, 1);
	/* the next write defers a step of the flush, which fails */
	arb_dev_fault_arm(fault, ARB_FAULT_WRITE, 1, -EIO, false);
	write_pattern(f, off, MiB, 2);
	arb_dev_fault_disarm(fault);
	ret = arb_fs_sync(fs);
	ck_assert_int_ne(ret, 0);
	ck_assert_int_eq(arb_fs_get_stats(fs, &s), 0);
	ck_assert(s.state & ARB_FS_STATE_FAILED);
	ck_assert_uint_eq(s.generation, good);
	ck_assert_int_ne(arb_fs_close(fs), 0);
	fs = NULL;
	fs_open_now();
	expect_pattern(f, 0, 2 * MiB, 1);
	ck_assert_uint_eq(getattr(f).size, 2 * MiB);
}
END_TEST

/* a write error during a commit: the filesystem turns read-only and the
 * image keeps the previous commit */
START_TEST(test_io_error)
{
	struct arb_dev *fault;
	struct arb_fs_stats s;
	const char *why;
	struct arb_stat st;
	uint64_t f, good, gen;
	int ret;

	ck_assert_int_eq(arb_fs_close(fs), 0);
	ck_assert_int_eq(arb_dev_fault_wrap(tu_dev_borrow(mem), &fault), 0);
	ck_assert_int_eq(arb_fs_open(fault, &fopts, &fs, &why), 0);
	f = mkfile(ROOT, "kept");
	write_pattern(f, 0, 50000, 1);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	write_pattern(f, 0, 50000, 2);
	mkfile(ROOT, "lost");
	ck_assert_int_eq(arb_fs_get_stats(fs, &s), 0);
	good = s.generation;
	arb_dev_fault_arm(fault, ARB_FAULT_WRITE, 1, -EIO, true);
	ret = arb_fs_sync(fs);
	ck_assert_int_ne(ret, 0);
	ck_assert_int_eq(arb_fs_mknod(fs, ROOT, "x", S_IFREG, 0, &cred, &st),
			 -EROFS);
	/* failed and read-only, and serving the last good generation */
	ck_assert_int_eq(arb_fs_get_stats(fs, &s), 0);
	ck_assert(s.state & ARB_FS_STATE_FAILED);
	ck_assert(s.state & ARB_FS_STATE_READONLY);
	ck_assert_int_eq(s.error, -EIO);
	ck_assert_uint_eq(s.generation, good);
	ck_assert_int_eq(arb_fs_commit(fs, &gen), -EIO);
	ck_assert_uint_eq(gen, good);
	expect_pattern(f, 0, 50000, 1);
	ck_assert_uint_eq(lookup(ROOT, "lost"), 0);
	ck_assert_int_ne(arb_fs_close(fs), 0);
	fs = NULL;
	fs_open_now();
	expect_pattern(f, 0, 50000, 1);
	ck_assert_uint_eq(lookup(ROOT, "lost"), 0);
}
END_TEST

/* RENAME_WHITEOUT: the file moves, a whiteout (char 0:0, mode 0, the
 * caller's) takes the old name, in one transaction */
START_TEST(test_rename_whiteout)
{
	struct arb_cred c = { 1000, 1001 };
	struct arb_stat st;
	uint64_t a, d, w;

	a = mkfile(ROOT, "a");
	d = mkdir_(ROOT, "d");
	ck_assert_int_eq(arb_fs_rename_cred(fs, ROOT, "a", d, "a2",
					    RENAME_WHITEOUT, &c),
			 0);
	ck_assert_uint_eq(lookup(d, "a2"), a);
	w = lookup(ROOT, "a");
	ck_assert_uint_ne(w, 0);
	ck_assert_uint_ne(w, a);
	st = getattr(w);
	ck_assert_uint_eq(st.mode, S_IFCHR);
	ck_assert_uint_eq(st.rdev, 0);
	ck_assert_uint_eq(st.uid, 1000);
	ck_assert_uint_eq(st.gid, 1001);
	ck_assert_uint_eq(st.nlink, 1);
	ck_assert_int_eq(arb_fs_rename(fs, d, "a2", ROOT, "a",
				       RENAME_WHITEOUT | RENAME_EXCHANGE),
			 -EINVAL);
	ck_assert_int_eq(arb_fs_rename(fs, d, "a2", ROOT, "a",
				       RENAME_WHITEOUT | RENAME_NOREPLACE),
			 -EEXIST);
	/* a directory moving out drops its old parent's link count */
	mkdir_(d, "sub");
	ck_assert_uint_eq(getattr(d).nlink, 3);
	ck_assert_int_eq(arb_fs_rename(fs, d, "sub", ROOT, "sub",
				       RENAME_WHITEOUT),
			 0);
	ck_assert_uint_eq(getattr(d).nlink, 2);
	ck_assert(S_ISCHR(getattr(lookup(d, "sub")).mode));
	reopen();
	ck_assert(S_ISCHR(getattr(lookup(ROOT, "a")).mode));
	ck_assert_uint_eq(lookup(d, "a2"), a);
}
END_TEST

/* arb_fs_shutdown: NOLOGFLUSH keeps the last commit, DEFAULT commits
 * first; changes fail with EIO after it, and close succeeds */
START_TEST(test_shutdown)
{
	struct arb_fs_stats s;
	struct arb_stat st;
	uint64_t f;

	f = mkfile(ROOT, "kept");
	write_pattern(f, 0, 50000, 1);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	write_pattern(f, 0, 50000, 2);
	mkfile(ROOT, "lost");
	ck_assert_int_eq(arb_fs_shutdown(fs, 3), -EINVAL);
	ck_assert_int_eq(arb_fs_shutdown(fs, ARB_SHUTDOWN_NOLOGFLUSH), 0);
	/* a second one changes nothing */
	ck_assert_int_eq(arb_fs_shutdown(fs, ARB_SHUTDOWN_DEFAULT), 0);
	ck_assert_int_eq(arb_fs_mknod(fs, ROOT, "x", S_IFREG, 0, &cred, &st),
			 -EIO);
	ck_assert_int_eq(arb_fs_write(fs, f, "x", 1, 0), -EIO);
	ck_assert_int_eq(arb_fs_get_stats(fs, &s), 0);
	ck_assert(s.state & ARB_FS_STATE_SHUTDOWN);
	ck_assert(s.state & ARB_FS_STATE_FAILED);
	ck_assert(s.state & ARB_FS_STATE_READONLY);
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs = NULL;
	fs_open_now();
	expect_pattern(f, 0, 50000, 1);
	ck_assert_uint_eq(lookup(ROOT, "lost"), 0);

	write_pattern(f, 0, 50000, 3);
	mkfile(ROOT, "made");
	ck_assert_int_eq(arb_fs_shutdown(fs, ARB_SHUTDOWN_DEFAULT), 0);
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs = NULL;
	fs_open_now();
	expect_pattern(f, 0, 50000, 3);
	ck_assert_uint_ne(lookup(ROOT, "made"), 0);
}
END_TEST

/* arb_fs_commit, arb_fs_usage and arb_fs_get_stats (arbor filesystem ...) */
START_TEST(test_commit_usage_stats)
{
	struct arb_fs_stats s0, s1;
	struct arb_fs_usage u;
	uint64_t f, gen0, gen1, gen2;

	ck_assert_int_eq(arb_fs_get_stats(fs, &s0), 0);
	ck_assert_uint_eq(s0.state, 0);
	ck_assert_int_eq(arb_fs_commit(fs, &gen0), 0);
	ck_assert_uint_eq(gen0, s0.generation); /* nothing changed */

	f = mkfile(ROOT, "data");
	write_pattern(f, 0, 3 * MiB, 7);
	/* delayed: written, not yet allocated */
	ck_assert_int_eq(arb_fs_usage(fs, &u), 0);
	ck_assert_uint_ge(u.delayed, 3 * MiB);
	ck_assert_int_eq(arb_fs_commit(fs, &gen1), 0);
	ck_assert_uint_eq(gen1, gen0 + 1);
	ck_assert_int_eq(arb_fs_commit(fs, &gen2), 0);
	ck_assert_uint_eq(gen2, gen1);

	ck_assert_int_eq(arb_fs_usage(fs, &u), 0);
	ck_assert_uint_eq(u.generation, gen1);
	ck_assert_uint_eq(u.total, 256 * MiB);
	ck_assert_uint_ge(u.data, 3 * MiB);
	ck_assert_uint_lt(u.data, 3 * MiB + 64 * 1024);
	ck_assert_uint_gt(u.metadata, 0);
	ck_assert_uint_eq(u.uncommitted, 0);
	ck_assert_uint_eq(u.delayed, 0);
	ck_assert_uint_eq(u.data + u.metadata + u.system + u.uncommitted +
				  u.pinned + u.free,
			  u.total);
	ck_assert_uint_gt(u.reserve, 0);
	ck_assert_uint_lt(u.available, u.free);

	/* allocated since the last commit shows as uncommitted */
	mkfile(ROOT, "more");
	ck_assert_int_eq(arb_fs_usage(fs, &u), 0);
	ck_assert_uint_gt(u.uncommitted, 0);
	ck_assert_uint_eq(u.data + u.metadata + u.system + u.uncommitted +
				  u.pinned + u.free,
			  u.total);

	ck_assert_int_eq(arb_fs_get_stats(fs, &s1), 0);
	ck_assert_uint_eq(s1.generation, gen1);
	ck_assert_uint_eq(s1.commits, s0.commits + 1);
	ck_assert_uint_gt(s1.commit_ns, s0.commit_ns);
	ck_assert_uint_eq(s1.user_bytes_written - s0.user_bytes_written,
			  3 * MiB);
	ck_assert_uint_ge(s1.bytes_written[ARB_IO_DATA], 3 * MiB);
	ck_assert_uint_gt(s1.bytes_written[ARB_IO_NODE], 0);
	ck_assert_uint_gt(s1.bytes_written[ARB_IO_SUPER], 0);
	ck_assert_uint_eq(s1.state, 0);
	ck_assert_int_eq(s1.error, 0);
}
END_TEST

/*
 * crash_enter: the global fs becomes a filesystem on crash_copy(), what a
 * crash at this instant would leave; crash_leave closes it and returns to
 * the live one.
 */
struct crash_view {
	struct arb_dev *copy;
	struct arb_fs *live;
};

static void crash_enter(struct crash_view *cv)
{
	const char *why = NULL;

	cv->copy = crash_copy();
	cv->live = fs;
	ck_assert_int_eq(arb_fs_open(tu_dev_borrow(cv->copy), &fopts, &fs, &why), 0);
}

static void crash_leave(struct crash_view *cv)
{
	ck_assert_int_eq(arb_fs_close(fs), 0);
	arb_dev_destroy(cv->copy);
	fs = cv->live;
}

/*
 * fsync of one file (b, grown) commits it; the other files' delayed data
 * stays in memory: a's overwrite (the tree keeps the old bytes) and c's
 * appends (the committed size stays at c's size before them, so a crash
 * shows c as it was, not with a tail of zeros).  A crash copy taken after
 * the fsync shows b whole and new, a whole and old, c at its old size;
 * check clean.  The live filesystem shows every write, and the next commit
 * writes them all.
 */
START_TEST(test_fsync_selective)
{
	struct crash_view cv;
	uint64_t a, b, c;

	a = mkfile(ROOT, "a");
	b = mkfile(ROOT, "b");
	c = mkfile(ROOT, "c");
	write_pattern(a, 0, 1 << 20, 1);
	write_pattern(b, 0, 100000, 2);
	write_pattern(c, 0, 300000, 3);
	ck_assert_int_eq(arb_fs_sync(fs), 0);

	write_pattern(a, 65536, 65536, 4);     /* overwrite inside a */
	write_pattern(c, 300000, 50000, 5);    /* c grows */
	write_pattern(b, 100000, 8192, 6);     /* b grows, fsynced */
	ck_assert_int_eq(arb_fs_fsync(fs, b, false), 0);
	/* a's overwrite and c's appends are still delayed data in memory */
	ck_assert_uint_ge(fs->dirty_bytes, 65536 + 49152);
	ck_assert_uint_eq(getattr(c).size, 350000);
	expect_pattern(c, 300000, 50000, 5);

	crash_enter(&cv);
	expect_pattern(b, 0, 100000, 2);
	expect_pattern(b, 100000, 8192, 6);
	ck_assert_uint_eq(getattr(b).size, 108192);
	expect_pattern(c, 0, 300000, 3);
	ck_assert_uint_eq(getattr(c).size, 300000); /* appends not synced */
	expect_pattern(a, 0, 1 << 20, 1); /* the overwrite was not synced */
	check_clean();
	crash_leave(&cv);

	/* the delayed data reaches the image with the next commit */
	expect_pattern(a, 65536, 65536, 4);
	ck_assert_uint_eq(getattr(c).size, 350000);
	reopen();
	expect_pattern(a, 0, 65536, 1);
	expect_pattern(a, 65536, 65536, 4);
	expect_pattern(a, 131072, (1 << 20) - 131072, 1);
	ck_assert_uint_eq(getattr(c).size, 350000);
	expect_pattern(c, 0, 300000, 3);
	expect_pattern(c, 300000, 50000, 5);
	check_clean();
}
END_TEST


/* every checksum item lies inside one data extent of the extent tree */
static void check_csums_in_extents(void)
{
	struct arb_key k = { ARB_EXTENT_CSUM_OBJECTID, ARB_EXTENT_CSUM, 0 };
	struct arb_iter it;
	int ret, n = 0;

	arb_iter_init(&it, fs->csum);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		struct arb_key ek, fk;
		struct arb_iter e;
		uint64_t end;

		arb_iter_key(&it, &k);
		if (k.objectid != ARB_EXTENT_CSUM_OBJECTID ||
		    k.type != ARB_EXTENT_CSUM)
			break;
		end = k.offset + arb_iter_size(&it) / 4 * (uint64_t)fs->bs;
		ek = (struct arb_key){ k.offset, ARB_EXTENT_ITEM, UINT64_MAX };
		arb_iter_init(&e, fs->vol->extent_root);
		ck_assert_int_eq(arb_iter_seek_le(&e, &ek), 0);
		arb_iter_key(&e, &fk);
		while (fk.type != ARB_EXTENT_ITEM) {
			ck_assert_int_eq(arb_iter_prev(&e), 0);
			arb_iter_key(&e, &fk);
		}
		ck_assert_msg(fk.objectid <= k.offset &&
				      fk.objectid + fk.offset >= end,
			      "checksums %llu..%llu outside every extent "
			      "(nearest %llu+%llu)",
			      (unsigned long long)k.offset,
			      (unsigned long long)end,
			      (unsigned long long)fk.objectid,
			      (unsigned long long)fk.offset);
		arb_iter_release(&e);
		n++;
	}
	arb_iter_release(&it);
	ck_assert_int_ge(ret, 0);
	ck_assert_int_gt(n, 0);
}

/*
 * Data flushed and rewritten within one transaction: the first extents
 * are made and dropped before the commit, and their checksums must go
 * with them (they used to stay over free space, where they would
 * override the sums of a later extent covering that space).
 */
START_TEST(test_rewrite_drops_csums)
{
	uint64_t f = mkfile(ROOT, "f");
	int i;

	/* 24 MiB: past 16 MiB each write writes out the lowest blocks */
	for (i = 0; i < 24; i++)
		write_pattern(f, (uint64_t)i * MiB, MiB, 1);
	ck_assert_uint_lt(fs->dirty_bytes, 24 * MiB);
	/* the lowest 8 MiB again, then enough to flush them again */
	for (i = 0; i < 8; i++)
		write_pattern(f, (uint64_t)i * MiB, MiB, 2);
	for (i = 24; i < 48; i++)
		write_pattern(f, (uint64_t)i * MiB, MiB, 1);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	check_csums_in_extents();
	expect_pattern(f, 0, 8 * MiB, 2);
	expect_pattern(f, 8 * MiB, 40 * MiB, 1);
	check_clean();
}
END_TEST

/*
 * Appends each made durable by an fsync (a log) extend the file's last
 * extent, its checksum item with it, up to 1 MiB (ARB_APPEND_EXTENT_MAX):
 * 300 x 4 KiB leave two file extents and two checksum items, and a crash
 * copy with every block.  An overwrite in the middle splits the grown
 * extent as any other; appends that alternate between two files are not
 * next to each other on disk and stay extents of their own.  Truncating,
 * reopening and unlinking keep the check clean.
 */
START_TEST(test_append_extends_extent)
{
	struct crash_view cv;
	uint64_t f, a, b;
	int i;

	f = mkfile(ROOT, "log");
	for (i = 0; i < 300; i++) {
		write_pattern(f, (uint64_t)i * 4096, 4096, 7);
		ck_assert_int_eq(arb_fs_fsync(fs, f, false), 0);
	}
	ck_assert_int_eq(count_items(fs_tree0(fs)->root, f, ARB_EXTENT_DATA),
			 2);
	ck_assert_int_eq(count_items(fs->csum, ARB_EXTENT_CSUM_OBJECTID,
				     ARB_EXTENT_CSUM), 2);
	crash_enter(&cv);
	ck_assert_uint_eq(getattr(f).size, 300 * 4096);
	expect_pattern(f, 0, 300 * 4096, 7);
	check_clean();
	crash_leave(&cv);

	/* a piece in the middle of the first extent: three of it */
	write_pattern(f, 100 * 4096, 8192, 8);
	ck_assert_int_eq(arb_fs_fsync(fs, f, false), 0);
	ck_assert_int_eq(count_items(fs_tree0(fs)->root, f, ARB_EXTENT_DATA),
			 4);
	for (i = 300; i < 310; i++) {
		write_pattern(f, (uint64_t)i * 4096, 4096, 7);
		ck_assert_int_eq(arb_fs_fsync(fs, f, false), 0);
	}
	/* the 8 KiB lie between: one more extent for the ten appends */
	ck_assert_int_eq(count_items(fs_tree0(fs)->root, f, ARB_EXTENT_DATA),
			 5);

	/* two files appended in turn: nothing to extend */
	a = mkfile(ROOT, "a");
	b = mkfile(ROOT, "b");
	for (i = 0; i < 20; i++) {
		write_pattern(a, (uint64_t)i * 4096, 4096, 9);
		ck_assert_int_eq(arb_fs_fsync(fs, a, false), 0);
		write_pattern(b, (uint64_t)i * 4096, 4096, 10);
		ck_assert_int_eq(arb_fs_fsync(fs, b, false), 0);
	}
	ck_assert_int_eq(count_items(fs_tree0(fs)->root, a, ARB_EXTENT_DATA),
			 20);
	ck_assert_int_eq(count_items(fs_tree0(fs)->root, b, ARB_EXTENT_DATA),
			 20);
	check_clean();

	crash_enter(&cv);
	expect_pattern(f, 0, 100 * 4096, 7);
	expect_pattern(f, 100 * 4096, 8192, 8);
	expect_pattern(f, 102 * 4096, 208 * 4096, 7);
	expect_pattern(a, 0, 20 * 4096, 9);
	expect_pattern(b, 0, 20 * 4096, 10);
	check_clean();
	crash_leave(&cv);

	{
		struct arb_setattr sa = { .size = 150 * 4096 + 100 };
		struct arb_stat st;

		ck_assert_int_eq(arb_fs_setattr(fs, f, &sa, ARB_SET_SIZE,
						&cred, &st), 0);
	}
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	reopen();
	ck_assert_uint_eq(getattr(f).size, 150 * 4096 + 100);
	expect_pattern(f, 0, 100 * 4096, 7);
	expect_pattern(f, 100 * 4096, 8192, 8);
	expect_pattern(f, 102 * 4096, 48 * 4096 + 100, 7);
	check_clean();
	ck_assert_int_eq(arb_fs_unlink(fs, ROOT, "log"), 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	check_clean();
}
END_TEST

/*
 * Crashes while appends grow their extent: 40 x (append 4 KiB, fsync) on a
 * device that logs every write and flush (one fsynced file, so each fsync
 * is one commit, and nearly every one grows the same extent).  The disk
 * is rebuilt as a crash could leave it at every flush and just after it,
 * and at random points with the unflushed writes dropped, or reordered
 * and torn; each image must open, check clean, and hold the file at the
 * size of a committed fsync (no older than the last one that returned
 * before the point, no newer than the last one that started), with the
 * bytes of every block.
 */
#define GROW_N 40

static void grow_crash_point(struct arb_dev *log, size_t n,
			     enum arb_replay_mode mode, uint64_t seed,
			     const size_t *start, const size_t *end,
			     uint64_t ino)
{
	struct arb_dev *img = NULL;
	struct arb_fs *live = fs;
	const char *why = NULL;
	uint64_t lo = 0, hi = 0, size;
	int ret;

	for (int i = 0; i < GROW_N; i++) {
		if (end[i] <= n)
			lo = (uint64_t)(i + 1) * 4096;
		if (start[i] < n)
			hi = (uint64_t)(i + 1) * 4096;
	}
	ck_assert_int_eq(arb_dev_log_replay(log, n, mode, seed, &img), 0);
	ret = arb_fs_open(img, &fopts, &fs, &why);
	ck_assert_msg(ret == 0, "point %zu mode %d: open %d %s", n, mode, ret,
		      why ? why : "");
	ret = arb_fs_check(fs, stderr);
	ck_assert_msg(ret == 0, "point %zu mode %d seed %llu: check %d", n,
		      mode, (unsigned long long)seed, ret);
	size = getattr(ino).size;
	ck_assert_msg(size % 4096 == 0 && size >= lo && size <= hi,
		      "point %zu mode %d: size %llu, want a committed one in "
		      "[%llu, %llu]",
		      n, mode, (unsigned long long)size,
		      (unsigned long long)lo, (unsigned long long)hi);
	if (size)
		expect_pattern(ino, 0, size, 11);
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs = live;
}

START_TEST(test_append_grow_crash)
{
	struct arb_dev *log = NULL, *d;
	struct arb_mkfs_opts mo;
	size_t start[GROW_N], end[GROW_N], flushes[4 * GROW_N + 64], nf, len;
	uint64_t f, rng = 0x5eed, points = 0;
	const char *why = NULL;

	/* a fresh, smaller volume under a log device */
	ck_assert_int_eq(arb_fs_close(fs), 0);
	arb_dev_destroy(mem);
	ck_assert_int_eq(arb_dev_open_mem(32 * MiB, &mem), 0);
	arb_mkfs_opts_default(&mo);
	d = tu_dev_borrow(mem);
	ck_assert_int_eq(arb_mkfs(d, &mo), 0);
	arb_dev_destroy(d);
	ck_assert_int_eq(arb_dev_log_wrap(tu_dev_borrow(mem), &log), 0);
	ck_assert_int_eq(arb_fs_open(tu_dev_borrow(log), &fopts, &fs, &why), 0);

	f = mkfile(ROOT, "log");
	write_pattern(f, 0, 4096, 11);
	ck_assert_int_eq(arb_fs_fsync(fs, f, false), 0);
	/* block 0 committed before the log's points start counting */
	start[0] = end[0] = 0;
	for (int i = 1; i < GROW_N; i++) {
		write_pattern(f, (uint64_t)i * 4096, 4096, 11);
		start[i] = arb_dev_log_len(log);
		ck_assert_int_eq(arb_fs_fsync(fs, f, false), 0);
		end[i] = arb_dev_log_len(log);
	}
	/* the appends grew the extent: not one extent per block */
	ck_assert_int_le(count_items(fs_tree0(fs)->root, f, ARB_EXTENT_DATA),
			 2);
	len = arb_dev_log_len(log);
	nf = arb_dev_log_flushes(log, flushes,
				 sizeof(flushes) / sizeof(flushes[0]));
	ck_assert_uint_ge(nf, GROW_N - 1);
	ck_assert_uint_le(nf, sizeof(flushes) / sizeof(flushes[0]));
	for (size_t i = 0; i < nf; i++) {
		if (flushes[i] < start[1])
			continue;
		grow_crash_point(log, flushes[i], ARB_REPLAY_PREFIX, 0, start,
				 end, f);
		grow_crash_point(log, flushes[i] + 1, ARB_REPLAY_PREFIX, 0,
				 start, end, f);
		points += 2;
	}
	for (int i = 0; i < 120; i++) {
		size_t n;

		rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
		n = start[1] + (size_t)((rng >> 33) % (len - start[1] + 1));
		grow_crash_point(log, n,
				 i % 2 ? ARB_REPLAY_REORDER_TEAR
				       : ARB_REPLAY_DROP,
				 rng, start, end, f);
		points++;
	}
	ck_assert_uint_ge(points, 2 * (GROW_N - 1) + 120);
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs = NULL;
	arb_dev_destroy(log);
	/* teardown's device: a fresh empty volume is not needed, only mem */
}
END_TEST

/*
 * A big writer pays for its data in steps as it goes (ARB_FLUSH_STEP per
 * write past ARB_FLUSH_BATCH), lowest blocks first.  Then it writes a
 * block below the extents written so far: an fsync of another file must
 * not hold its size back there (the extents past it would sit beyond the
 * committed size), so it writes the file whole.  Crash copy: all of it.
 */
START_TEST(test_fsync_out_of_order)
{
	struct crash_view cv;
	uint64_t d, e;
	int i;

	d = mkfile(ROOT, "d");
	e = mkfile(ROOT, "e");
	write_pattern(d, 0, MiB, 1);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	/* 23 MiB: the last write leaves 15 MiB delayed (each write past
	 * 16 MiB wrote out the lowest 4 MiB) */
	for (i = 0; i < 23; i++)
		write_pattern(d, (8 + i) * MiB, MiB, 2);
	ck_assert_uint_eq(fs->dirty_bytes, 15 * MiB);
	/* below the extents written so far; stays delayed (under 16 MiB) */
	write_pattern(d, 2 * MiB, 4096, 3);
	write_pattern(e, 0, 8192, 4);
	ck_assert_int_eq(arb_fs_fsync(fs, e, false), 0);

	crash_enter(&cv);
	expect_pattern(e, 0, 8192, 4);
	ck_assert_uint_eq(getattr(d).size, 31 * MiB);
	expect_pattern(d, 0, MiB, 1);
	expect_pattern(d, 2 * MiB, 4096, 3);
	for (i = 0; i < 23; i++)
		expect_pattern(d, (8 + i) * MiB, MiB, 2);
	check_clean();
	crash_leave(&cv);
	check_clean();
}
END_TEST

/*
 * Concurrent fsyncs share one commit: the first commits the other file's
 * write too, so the second fsync finds that file durable and does not
 * commit again (nor does an fsync of an unchanged file); a crash copy has
 * both.  A new write needs a commit again.
 */
START_TEST(test_fsync_shared)
{
	struct arb_fs_stats s0, s1;
	struct crash_view cv;
	uint64_t a, b;

	a = mkfile(ROOT, "a");
	b = mkfile(ROOT, "b");
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	write_pattern(a, 0, 10000, 1);
	write_pattern(b, 0, 20000, 2);
	ck_assert_int_eq(arb_fs_get_stats(fs, &s0), 0);
	ck_assert_int_eq(arb_fs_fsync(fs, a, false), 0);
	ck_assert_int_eq(arb_fs_fsync(fs, b, false), 0);
	ck_assert_int_eq(arb_fs_fsync(fs, ROOT, false), 0);
	ck_assert_int_eq(arb_fs_get_stats(fs, &s1), 0);
	ck_assert_uint_eq(s1.commits, s0.commits + 1);

	/* another change pending (a third file) does not make b's fsync
	 * commit: b has nothing uncommitted */
	write_pattern(mkfile(ROOT, "c"), 0, 100, 3);
	ck_assert_int_eq(arb_fs_fsync(fs, b, false), 0);
	ck_assert_int_eq(arb_fs_get_stats(fs, &s0), 0);
	ck_assert_uint_eq(s0.commits, s1.commits);

	crash_enter(&cv);
	expect_pattern(a, 0, 10000, 1);
	expect_pattern(b, 0, 20000, 2);
	ck_assert_uint_eq(getattr(b).size, 20000);
	crash_leave(&cv);

	write_pattern(b, 20000, 100, 4);
	ck_assert_int_eq(arb_fs_fsync(fs, b, false), 0);
	ck_assert_int_eq(arb_fs_get_stats(fs, &s1), 0);
	ck_assert_uint_eq(s1.commits, s0.commits + 1);
}
END_TEST

/*
 * The two-half fsync of a one-thread server: begins mark, one end commits
 * for all; an overwrite inside an existing file (which an fsync of another
 * file leaves in memory) is written because its begin marked it.
 */
START_TEST(test_fsync_begin_end)
{
	struct arb_fs_stats s0, s1;
	struct crash_view cv;
	uint64_t a, b;

	a = mkfile(ROOT, "a");
	b = mkfile(ROOT, "b");
	write_pattern(a, 0, 1 << 20, 1);
	write_pattern(b, 0, 1 << 20, 2);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	write_pattern(a, 4096, 8192, 3); /* overwrites */
	write_pattern(b, 65536, 4096, 4);
	ck_assert_int_eq(arb_fs_get_stats(fs, &s0), 0);
	ck_assert_int_eq(arb_fs_fsync_begin(fs, a), 1);
	ck_assert_int_eq(arb_fs_fsync_begin(fs, b), 1);
	ck_assert_int_eq(arb_fs_fsync_begin(fs, ROOT), 0); /* unchanged */
	ck_assert_int_eq(arb_fs_fsync_end(fs, 2), 0);
	ck_assert_int_eq(arb_fs_get_stats(fs, &s1), 0);
	ck_assert_uint_eq(s1.commits, s0.commits + 1);
	ck_assert_uint_eq(s1.fsyncs - s0.fsyncs, 3);
	ck_assert_uint_eq(s1.fsync_joined - s0.fsync_joined, 1);
	ck_assert_uint_eq(s1.fsync_durable - s0.fsync_durable, 1);
	ck_assert_uint_eq(fs->dirty_bytes, 0);

	crash_enter(&cv);
	expect_pattern(a, 0, 4096, 1);
	expect_pattern(a, 4096, 8192, 3);
	expect_pattern(b, 65536, 4096, 4);
	check_clean();
	crash_leave(&cv);
}
END_TEST


/* ---- trees: clones of the fs tree, inode numbers, UUIDs -------------- */

#define CLONE_ID ARB_FIRST_SUBVOL_ID

/* An O(1) clone of the fs tree, committed: tree id, shares every node. */
/* a snapshot of the filesystem tree, linked as "clone" in the root
 * directory (a clone no link reaches is damage to fsck), committed */
static struct arb_root *clone_fs_tree(uint64_t id)
{
	struct arb_root *c;
	struct arb_stat st;

	ck_assert_int_eq(arb_subvol_snapshot(fs, ROOT, ROOT, "clone", 0,
					     &cred, &st),
			 0);
	ck_assert_uint_eq(arb_inum_tree(st.ino), id);
	ck_assert_int_eq(arb_root_get(fs->vol, id, &c), 0);
	return c;
}

/* delete it and wait for the cleaner */
static void drop_tree(uint64_t id)
{
	ck_assert_int_eq(arb_subvol_delete(fs, ROOT, "clone"), 0);
	ck_assert_int_eq(arb_subvol_wait(fs, id), 0);
}

/* the file extent item of ino at file offset off in tree r */
static void file_extent_at(struct arb_root *r, uint64_t ino, uint64_t off,
			   struct arb_file_extent *fe)
{
	struct arb_key k = { ino, ARB_EXTENT_DATA, off };

	memset(fe, 0, sizeof(*fe));
	ck_assert_int_eq(arb_lookup_item(r, &k, fe, sizeof(*fe)),
			 (int)sizeof(*fe));
}

/*
 * An append after a clone of the fs tree must not grow the file's last
 * extent in place: its extent item counts one reference (one leaf), but
 * that leaf is shared with the clone (lazy reference counts), so the
 * count says nothing about the trees that see the extent.  Two files
 * written in turn, 4 KiB and an fsync at a time, give extents that
 * interleave on disk and a tree of several levels (shared leaves under a
 * copied root); a's last extent is the last on disk, so the append
 * after the clone lands right behind it.  The grow used to rekey the
 * extent item, and the shadowing of the shared leaf then added a
 * reference under the old key: the commit failed with EUCLEAN
 * ("reference change 1 on a missing extent item") and the filesystem
 * went read-only.
 */
START_TEST(test_append_after_clone)
{
	const int n = TU_SCALE(500, 1500);
	struct arb_file_extent fe;
	struct arb_root *c;
	uint64_t a, b;
	int i;

	a = mkfile(ROOT, "a");
	b = mkfile(ROOT, "b");
	for (i = 0; i < n; i++) {
		write_pattern(a, (uint64_t)i * 4096, 4096, 1);
		ck_assert_int_eq(arb_fs_fsync(fs, a, false), 0);
		write_pattern(b, (uint64_t)i * 4096, 4096, 2);
		ck_assert_int_eq(arb_fs_fsync(fs, b, false), 0);
	}
	write_pattern(a, (uint64_t)n * 4096, 4096, 1);
	ck_assert_int_eq(arb_fs_fsync(fs, a, false), 0);
	ck_assert_int_eq(count_items(fs_tree0(fs)->root, a, ARB_EXTENT_DATA),
			 n + 1);
	ck_assert_int_ge(arb_level(fs_tree0(fs)->root->node), 1);

	c = clone_fs_tree(CLONE_ID);
	write_pattern(a, (uint64_t)(n + 1) * 4096, 4096, 1);
	ck_assert_int_eq(arb_fs_fsync(fs, a, false), 0);
	ck_assert(!fs->readonly);
	expect_pattern(a, 0, (size_t)(n + 2) * 4096, 1);
	/* the clone still sees the file as it was, its last extent whole */
	file_extent_at(c, a, (uint64_t)n * 4096, &fe);
	ck_assert_uint_eq(arb_file_extent_f_num_bytes(&fe), 4096);
	ck_assert_uint_eq(arb_file_extent_f_disk_num_bytes(&fe), 4096);
	ck_assert_int_eq(count_items(c, a, ARB_EXTENT_DATA), n + 1);
	check_clean();

	/* later appends grow the extent made after the clone */
	for (i = n + 2; i < n + 12; i++) {
		write_pattern(a, (uint64_t)i * 4096, 4096, 1);
		ck_assert_int_eq(arb_fs_fsync(fs, a, false), 0);
	}
	ck_assert_int_eq(count_items(fs_tree0(fs)->root, a, ARB_EXTENT_DATA),
			 n + 2);
	check_clean();

	drop_tree(CLONE_ID);
	reopen();
	expect_pattern(a, 0, (size_t)(n + 12) * 4096, 1);
	expect_pattern(b, 0, (size_t)n * 4096, 2);
}
END_TEST

/*
 * After a clone, the first change under each shared node pushes a
 * reference down to every child: a chmod pass over a tree of files with
 * data queues reference changes the dirty-node limit never sees (5,322
 * heads and a 194 ms commit for 100,000 files in the issue).  Operations
 * now commit past ARB_DREF_COMMIT pending heads: at no point are many
 * more pending than that plus one operation's push-down.
 */
START_TEST(test_pushdown_commits)
{
	const int n = TU_SCALE(5000, 20000);
	struct arb_setattr sa = { .mode = 0600 };
	size_t most = 0;
	uint64_t *ino = malloc((size_t)n * sizeof(*ino));
	char name[32];

	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "f%05d", i);
		ino[i] = mkfile(ROOT, name);
		write_pattern(ino[i], 0, 4096, (uint32_t)i);
	}
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	clone_fs_tree(CLONE_ID);
	for (int i = 0; i < n; i++) {
		size_t heads;

		ck_assert_int_eq(arb_fs_setattr(fs, ino[i], &sa, ARB_SET_MODE,
						NULL, NULL),
				 0);
		heads = arb_delayed_refs_count(fs->vol);
		if (heads > most)
			most = heads;
	}
	/* one chmod pushes down at most a leaf's and a path's references */
	/* (without the commit on pending heads: 5,280 here) */
	ck_assert_msg(most <= 2048 + 1024,
		      "%zu reference heads pending at once", most);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	check_clean();
	drop_tree(CLONE_ID);
	reopen();
	for (int i = 0; i < n; i += 97)
		expect_pattern(ino[i], 0, 4096, (uint32_t)i);
	free(ino);
}
END_TEST

/* the fs tree's ROOT_ITEM as the last commit wrote it */
static void fs_root_item_on_disk(struct arb_root_item *ri)
{
	struct arb_key k = { ARB_FS_TREE_ID, ARB_ROOT_ITEM, 0 };

	ck_assert_int_eq(arb_lookup_item(fs->vol->tree_root, &k, ri,
					 sizeof(*ri)),
			 (int)sizeof(*ri));
}

/* make the fs tree's root item look like one of an older image */
static void fs_root_item_age(bool highest, bool uuid)
{
	struct arb_txn *t;

	ck_assert_int_eq(arb_txn_begin(fs->vol, &t), 0);
	if (highest)
		arb_set_root_item_r_highest_objectid(&fs_tree0(fs)->root->item,
						     0);
	if (uuid)
		memset(fs_tree0(fs)->root->item.r_uuid, 0, ARB_UUID_SIZE);
	fs_tree0(fs)->root->dirty = true;
	arb_txn_end(t);
	fs->txn_dirty = true;
	ck_assert_int_eq(arb_fs_sync(fs), 0);
}

/*
 * Inode numbers are never handed out twice in a tree, across remounts
 * too.  The number used to come from the highest inode present at
 * mount, so deleting the newest file and remounting gave its number to
 * the next file.  The highest number handed out is now committed in the
 * fs tree's root item with the inode that got it.
 */
/* inode numbers name (tree, objectid): the packing of arbor.h */
START_TEST(test_inum_packing)
{
	bool ok;

	ck_assert_uint_eq(arb_inum(5, ARB_ROOT_INO), ARB_ROOT_INO);
	ck_assert_uint_eq(arb_inum(256, 256), (1ULL << 40) | 256);
	ck_assert_uint_eq(arb_inum_tree((1ULL << 40) | 300), 256);
	ck_assert_uint_eq(arb_inum_tree(300), 5);
	ck_assert_uint_eq(arb_inum_obj((7ULL << 40) | 300), 300);
	ck_assert_uint_eq(arb_inum_tree(arb_inum(1000, 77)), 1000);
	ck_assert_uint_eq(arb_inum_slot(5, &ok), 0);
	ck_assert(ok);
	arb_inum_slot(7, &ok); /* the checksum tree: no inodes */
	ck_assert(!ok);
	arb_inum_slot(255, &ok);
	ck_assert(!ok);
	ck_assert_uint_eq(arb_inum_slot(ARB_INUM_FIRST_SUBVOL - 1 +
					ARB_INUM_SLOT_MAX, &ok),
			  ARB_INUM_SLOT_MAX);
	ck_assert(ok);
	arb_inum_slot(ARB_INUM_FIRST_SUBVOL + ARB_INUM_SLOT_MAX, &ok);
	ck_assert(!ok);
	/* a tree this mount has not opened: no such inode */
	struct arb_stat st;
	ck_assert_int_eq(arb_fs_getattr(fs, arb_inum(300, ARB_ROOT_INO), &st),
			 -ENOENT);
	ck_assert_int_eq(arb_fs_lookup(fs, arb_inum(300, ARB_ROOT_INO), "a",
				       &st),
			 -ENOENT);
}
END_TEST

struct rd_inos {
	uint64_t ino[8];
	int n;
};

static int rd_collect(void *ctx, const char *name, const struct arb_stat *st,
		      uint64_t next)
{
	struct rd_inos *r = ctx;

	(void)name;
	(void)next;
	if (r->n < 8)
		r->ino[r->n++] = st->ino;
	return 0;
}

/*
 * Every path of the POSIX layer through a second tree: a clone of the
 * filesystem tree opened as tree 256 (what a snapshot will be), its
 * inodes named by arb_inum(256, objectid).  Reads see the clone's data,
 * writes, appends, truncates, xattrs, creates and unlinks in either tree
 * stay there, links and renames across get EXDEV, and the check is clean.
 */
START_TEST(test_second_tree)
{
	uint64_t a, d, x, croot, ca, cd, cx, n;
	struct fs_tree *tr;
	struct arb_stat st;
	struct rd_inos rd = { .n = 0 };
	char v[16];
	int i;

	a = mkfile(ROOT, "a");
	write_pattern(a, 0, 256 * 1024, 1);
	ck_assert_int_eq(arb_fs_setxattr(fs, a, "user.k", "v1", 2, 0), 0);
	d = mkdir_(ROOT, "d");
	x = mkfile(d, "x");
	write_pattern(x, 0, 100, 2);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	clone_fs_tree(CLONE_ID);
	fs_lock(fs);
	ck_assert_int_eq(fs_tree_open(fs, CLONE_ID, &tr), 0);
	fs_unlock(fs);
	ck_assert_uint_eq(tr->slot, 1);

	croot = arb_inum(CLONE_ID, ARB_ROOT_INO);
	ck_assert_int_eq(arb_fs_getattr(fs, croot, &st), 0);
	ck_assert_uint_eq(st.ino, croot);
	ca = lookup(croot, "a");
	cd = lookup(croot, "d");
	ck_assert_uint_eq(ca, arb_inum(CLONE_ID, a));
	ck_assert_uint_eq(cd, arb_inum(CLONE_ID, d));
	cx = lookup(cd, "x");
	ck_assert_uint_eq(cx, arb_inum(CLONE_ID, x));
	expect_pattern(ca, 0, 256 * 1024, 1);
	expect_pattern(cx, 0, 100, 2);
	ck_assert_int_eq(arb_fs_getxattr(fs, ca, "user.k", v, sizeof(v)), 2);
	ck_assert_int_eq(memcmp(v, "v1", 2), 0);

	/* changes to either side stay there, through commits */
	write_pattern(ca, 4096, 8192, 3);
	write_pattern(a, 256 * 1024, 4096, 1); /* append to the source */
	ck_assert_int_eq(arb_fs_fallocate(fs, cx, 0, 0, 1 << 20), 0);
	ck_assert_int_eq(arb_fs_setxattr(fs, ca, "user.k", "v2", 2, 0), 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	expect_pattern(a, 0, 256 * 1024 + 4096, 1);
	expect_pattern(ca, 0, 4096, 1);
	expect_pattern(ca, 4096, 8192, 3);
	expect_pattern(ca, 12288, 256 * 1024 - 12288, 1);
	ck_assert_int_eq(arb_fs_getattr(fs, ca, &st), 0);
	ck_assert_uint_eq(st.size, 256 * 1024);
	ck_assert_int_eq(arb_fs_getattr(fs, x, &st), 0);
	ck_assert_uint_eq(st.size, 100);
	ck_assert_int_eq(arb_fs_getxattr(fs, a, "user.k", v, sizeof(v)), 2);
	ck_assert_int_eq(memcmp(v, "v1", 2), 0);

	/* new inodes take numbers of their tree */
	n = mkfile(croot, "new");
	ck_assert_uint_eq(arb_inum_tree(n), CLONE_ID);
	ck_assert_uint_gt(arb_inum_obj(n), x);
	ck_assert_uint_eq(lookup(ROOT, "new"), 0);
	ck_assert_int_eq(arb_fs_readdir(fs, croot, 0, true, rd_collect, &rd),
			 0);
	ck_assert_int_ge(rd.n, 5);
	/* "." and the entries are the clone's; ".." is the root directory
	 * it is linked in */
	ck_assert_uint_eq(rd.ino[1], ROOT);
	for (i = 0; i < rd.n; i++)
		if (i != 1)
			ck_assert_uint_eq(arb_inum_tree(rd.ino[i]), CLONE_ID);

	/* nothing crosses: links and renames between trees */
	ck_assert_int_eq(arb_fs_link(fs, n, ROOT, "l", &st), -EXDEV);
	ck_assert_int_eq(arb_fs_rename(fs, croot, "new", ROOT, "new", 0),
			 -EXDEV);
	ck_assert_int_eq(arb_fs_rename(fs, ROOT, "a", cd, "a", 0), -EXDEV);
	ck_assert_int_eq(arb_fs_rename(fs, croot, "new", cd, "new2", 0), 0);
	ck_assert_int_eq(arb_fs_link(fs, n, croot, "l", &st), 0);

	/* an unlink in the clone leaves the source's file */
	ck_assert_int_eq(arb_fs_unlink(fs, croot, "a"), 0);
	ck_assert_int_eq(arb_fs_unlink(fs, cd, "x"), 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	expect_pattern(a, 0, 256 * 1024 + 4096, 1);
	expect_pattern(x, 0, 100, 2);
	ck_assert_uint_eq(lookup(croot, "a"), 0);
	check_clean();
	reopen();
	expect_pattern(a, 0, 256 * 1024 + 4096, 1);
	/* the reopened mount opens tree 256 when one of its inodes is named
	 * (no lookup needed: inode numbers are stable across remounts) */
	ck_assert_int_eq(arb_fs_getattr(fs, croot, &st), 0);
	ck_assert_uint_eq(st.ino, croot);
	fs_lock(fs);
	ck_assert_int_eq(fs_tree_open(fs, CLONE_ID, &tr), 0);
	ck_assert_uint_eq(tr->next_ino, arb_inum_obj(n) + 1);
	fs_unlock(fs);
	ck_assert_uint_eq(lookup(cd, "new2"), n);
	drop_tree(CLONE_ID);
}
END_TEST

START_TEST(test_ino_not_reused)
{
	struct arb_root_item ri;
	uint64_t a, b, c, d, e, f;

	a = mkfile(ROOT, "a");
	b = mkfile(ROOT, "b");
	c = mkdir_(ROOT, "c");
	ck_assert_uint_lt(a, b);
	ck_assert_uint_lt(b, c);
	ck_assert_int_eq(arb_fs_sync(fs), 0);

	/* the newest goes, then the filesystem is mounted again */
	ck_assert_int_eq(arb_fs_rmdir(fs, ROOT, "c"), 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	reopen();
	d = mkfile(ROOT, "d");
	ck_assert_msg(d > c, "inode %llu handed out again",
		      (unsigned long long)d);

	/* committed by the commit that creates the inode, nothing else */
	ck_assert_int_eq(arb_fs_unlink(fs, ROOT, "d"), 0);
	ck_assert_int_eq(arb_fs_unlink(fs, ROOT, "b"), 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	fs_root_item_on_disk(&ri);
	ck_assert_uint_eq(arb_root_item_r_highest_objectid(&ri), d);
	reopen();
	e = mkfile(ROOT, "e");
	ck_assert_uint_gt(e, d);
	ck_assert_uint_gt(e, a);

	/* an image from before the field was kept (0 there) opens, checks
	 * clean and goes on above its highest inode */
	fs_root_item_age(true, false);
	reopen();
	f = mkfile(ROOT, "f");
	ck_assert_uint_eq(f, e + 1);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	fs_root_item_on_disk(&ri);
	ck_assert_uint_eq(arb_root_item_r_highest_objectid(&ri), f);

	/* a clone holds the same numbers, and knows the highest */
	ck_assert_int_eq(arb_fs_unlink(fs, ROOT, "f"), 0);
	ck_assert_uint_eq(arb_root_highest_objectid(clone_fs_tree(CLONE_ID)),
			  f);
	drop_tree(CLONE_ID);
}
END_TEST

static bool uuid_zero(const uint8_t *u)
{
	static const uint8_t zero[ARB_UUID_SIZE];

	return !memcmp(u, zero, ARB_UUID_SIZE);
}

static struct arb_root_item root_item_on_disk(uint64_t id)
{
	struct arb_key k = { id, ARB_ROOT_ITEM, 0 };
	struct arb_root_item ri;

	ck_assert_int_eq(arb_lookup_item(fs->vol->tree_root, &k, &ri,
					 sizeof(ri)),
			 (int)sizeof(ri));
	return ri;
}

/*
 * Every fs tree has a UUID: mkfs gives the default one a random UUID, a
 * clone gets a fresh one and records its source's as its parent, and the
 * generation it was made in.  An image whose fs tree has none (made
 * before) opens read-only as it is and gets one at its first writable
 * mount.
 */
START_TEST(test_tree_uuids)
{
	struct arb_root_item src, cl, again;
	uint64_t gen;

	src = root_item_on_disk(ARB_FS_TREE_ID);
	ck_assert(!uuid_zero(src.r_uuid));
	ck_assert(uuid_zero(src.r_parent_uuid));
	ck_assert_uint_eq(arb_root_item_r_otransid(&src), 1);
	/* the checksum tree is no subvolume */
	cl = root_item_on_disk(ARB_CSUM_TREE_ID);
	ck_assert(uuid_zero(cl.r_uuid));

	mkfile(ROOT, "a");
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	clone_fs_tree(CLONE_ID);
	gen = fs->vol->generation;
	reopen();
	cl = root_item_on_disk(CLONE_ID);
	ck_assert(!uuid_zero(cl.r_uuid));
	ck_assert(memcmp(cl.r_uuid, src.r_uuid, ARB_UUID_SIZE));
	ck_assert(!memcmp(cl.r_parent_uuid, src.r_uuid, ARB_UUID_SIZE));
	ck_assert_uint_eq(arb_root_item_r_otransid(&cl), gen);
	/* the source keeps its own */
	again = root_item_on_disk(ARB_FS_TREE_ID);
	ck_assert(!memcmp(again.r_uuid, src.r_uuid, ARB_UUID_SIZE));
	ck_assert_uint_eq(arb_root_item_r_otransid(&again), 1);
	drop_tree(CLONE_ID);

	/* an image from before: no UUID, no highest objectid */
	fs_root_item_age(true, true);
	gen = fs->vol->generation;
	check_clean();
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs = NULL;
	fopts.readonly = true;
	fs_open_now();
	check_clean();
	again = root_item_on_disk(ARB_FS_TREE_ID);
	ck_assert(uuid_zero(again.r_uuid));
	ck_assert_uint_eq(fs->vol->generation, gen);
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs = NULL;
	fopts.readonly = false;
	fs_open_now();
	again = root_item_on_disk(ARB_FS_TREE_ID);
	ck_assert(!uuid_zero(again.r_uuid));
	ck_assert(memcmp(again.r_uuid, src.r_uuid, ARB_UUID_SIZE));
	ck_assert_uint_eq(arb_root_item_r_highest_objectid(&again),
			  lookup(ROOT, "a"));
	ck_assert_uint_eq(fs->vol->generation, gen + 1);
	reopen();
	ck_assert_uint_eq(fs->vol->generation, gen + 1);
}
END_TEST

Suite *fs_suite(void)
{
	Suite *s = suite_create("fs");
	TCase *tc;

	tc = tcase_create("names");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_root_and_create);
	tcase_add_test(tc, test_mkdir_rmdir_unlink);
	tcase_add_test(tc, test_hardlinks);
	tcase_add_test(tc, test_rename);
	tcase_add_test(tc, test_rename_whiteout);
	tcase_add_test(tc, test_readdir_offsets);
	tcase_add_test(tc, test_large_dir);
	suite_add_tcase(s, tc);

	tc = tcase_create("data");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_inline_to_extent);
	tcase_add_test(tc, test_big_sequential);
	tcase_add_test(tc, test_sparse_seek);
	tcase_add_test(tc, test_truncate);
	tcase_add_test(tc, test_fallocate);
	tcase_add_test(tc, test_csum_error);
	suite_add_tcase(s, tc);

	tc = tcase_create("attrs");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_xattr);
	tcase_add_test(tc, test_inode_flags);
	tcase_add_test(tc, test_setattr);
	tcase_add_test(tc, test_setattr_kill_suidgid);
	tcase_add_test(tc, test_acl_access);
	tcase_add_test(tc, test_acl_inherit);
	tcase_add_test(tc, test_write_keeps_times);
	suite_add_tcase(s, tc);

	tc = tcase_create("data_4k");
	tcase_add_checked_fixture(tc, setup_4k, teardown);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_big_extent_csums);
	suite_add_tcase(s, tc);

	tc = tcase_create("attrs_4k");
	tcase_add_checked_fixture(tc, setup_4k, teardown);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_xattr);
	suite_add_tcase(s, tc);

	tc = tcase_create("lifecycle");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_orphans);
	tcase_add_test(tc, test_pin_counts);
	tcase_add_test(tc, test_enospc);
	tcase_add_test(tc, test_space_reuse);
	tcase_add_test(tc, test_enospc_meta);
	tcase_add_test(tc, test_trim);
	tcase_add_test(tc, test_open_errors);
	tcase_add_test(tc, test_commit_thread);
	tcase_add_test(tc, test_crash_points);
	tcase_add_test(tc, test_threads);
	tcase_add_test(tc, test_read_during_reuse);
	tcase_add_test(tc, test_io_error);
	tcase_add_test(tc, test_flush_outside_lock);
	tcase_add_test(tc, test_deferred_write_error);
	tcase_add_test(tc, test_deferred_random_rewrites);
	tcase_add_test(tc, test_compressor_thread);
	tcase_add_test(tc, test_fsync_selective);
	tcase_add_test(tc, test_fsync_out_of_order);
	tcase_add_test(tc, test_append_extends_extent);
	tcase_add_test(tc, test_append_grow_crash);
	tcase_add_test(tc, test_rewrite_drops_csums);
	tcase_add_test(tc, test_fsync_shared);
	tcase_add_test(tc, test_fsync_begin_end);
	tcase_add_test(tc, test_commit_usage_stats);
	tcase_add_test(tc, test_shutdown);
	suite_add_tcase(s, tc);

	tc = tcase_create("trees");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_append_after_clone);
	tcase_add_test(tc, test_pushdown_commits);
	tcase_add_test(tc, test_ino_not_reused);
	tcase_add_test(tc, test_inum_packing);
	tcase_add_test(tc, test_second_tree);
	tcase_add_test(tc, test_tree_uuids);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(fs_suite());
}
