/* SPDX-License-Identifier: MIT */
/*
 * test_resize.c - growing and shrinking a filesystem in an image file
 * (arb_fs_resize), and -o autogrow (arb_fs_opts.autogrow_max): sizes as
 * statfs shows them, the image file's size, data surviving reopen, a
 * clean check after every step, and the refusals (shrinking over data,
 * below the minimum).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arbor/arbor.h"
#include "testutil.h"

#define ROOT ARB_ROOT_INO
#define MiB (1024ULL * 1024)

static char path[64];
static struct arb_fs *fs;
static struct arb_fs_opts fopts;
static const struct arb_cred cred = { 0, 0 };

static void fs_open_now(void)
{
	struct arb_dev *dev;
	const char *why = NULL;
	int ret;

	ck_assert_int_eq(arb_dev_open_file(path, false, 0, &dev), 0);
	ret = arb_fs_open(dev, &fopts, &fs, &why);
	ck_assert_msg(ret == 0, "open: %d %s", ret, why ? why : "");
}

static void reopen(void)
{
	ck_assert_int_eq(arb_fs_check(fs, stderr), 0);
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs_open_now();
	ck_assert_int_eq(arb_fs_check(fs, stderr), 0);
}

static void setup(uint64_t size)
{
	struct arb_mkfs_opts mo;
	struct arb_dev *dev;
	int fd;

	snprintf(path, sizeof(path), "/tmp/arbor-test-resize.XXXXXX");
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	close(fd);
	ck_assert_int_eq(arb_dev_open_file(path, false, size, &dev), 0);
	arb_mkfs_opts_default(&mo);
	ck_assert_int_eq(arb_mkfs(dev, &mo), 0);
	arb_dev_destroy(dev);
	arb_fs_opts_default(&fopts);
	fopts.commit_interval = 0;
	fs_open_now();
}

static void teardown(void)
{
	if (fs) {
		ck_assert_int_eq(arb_fs_check(fs, stderr), 0);
		ck_assert_int_eq(arb_fs_close(fs), 0);
		fs = NULL;
	}
	unlink(path);
}

static uint64_t file_size(void)
{
	struct stat st;
	ck_assert_int_eq(stat(path, &st), 0);
	return (uint64_t)st.st_size;
}

static uint64_t fs_blocks_bytes(void)
{
	struct statvfs sv;
	ck_assert_int_eq(arb_fs_statfs(fs, &sv), 0);
	return (uint64_t)sv.f_blocks * sv.f_frsize;
}

static uint64_t mkfile(const char *name)
{
	struct arb_stat st;
	ck_assert_int_eq(arb_fs_mknod(fs, ROOT, name, S_IFREG | 0644, 0, &cred,
				      &st),
			 0);
	return st.ino;
}

/* write n bytes of a pattern seeded by tag; returns -errno of the first
 * failing write or 0 */
static int write_file(uint64_t ino, uint64_t n, unsigned tag)
{
	static uint8_t buf[1 << 20];
	for (uint64_t off = 0; off < n; off += sizeof(buf)) {
		size_t len = n - off < sizeof(buf) ? n - off : sizeof(buf);
		for (size_t i = 0; i < len; i++)
			buf[i] = (uint8_t)((off + i) * 31 + tag);
		ssize_t r = arb_fs_write(fs, ino, buf, len, off);
		if (r < 0)
			return (int)r;
		if (r != (ssize_t)len)
			return -EIO;
	}
	return 0;
}

static void expect_file(uint64_t ino, uint64_t n, unsigned tag)
{
	static uint8_t buf[1 << 20], want[1 << 20];
	for (uint64_t off = 0; off < n; off += sizeof(buf)) {
		size_t len = n - off < sizeof(buf) ? n - off : sizeof(buf);
		ck_assert_int_eq(arb_fs_read(fs, ino, buf, len, off),
				 (ssize_t)len);
		for (size_t i = 0; i < len; i++)
			want[i] = (uint8_t)((off + i) * 31 + tag);
		/* one assertion per MiB: Check sends each one to its parent */
		ck_assert_msg(memcmp(buf, want, len) == 0,
			      "inode %llu differs in the MiB at %llu",
			      (unsigned long long)ino, (unsigned long long)off);
	}
}

START_TEST(test_grow_shrink)
{
	const char *why = NULL;
	uint64_t a, b;

	setup(64 * MiB);
	ck_assert_uint_eq(fs_blocks_bytes(), 64 * MiB);
	a = mkfile("a");
	ck_assert_int_eq(write_file(a, 20 * MiB, 1), 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);

	/* grow: the file and the filesystem, durable across reopen */
	ck_assert_int_eq(arb_fs_resize(fs, 256 * MiB + 123, &why), 0);
	ck_assert_uint_eq(file_size(), 256 * MiB);
	ck_assert_uint_eq(fs_blocks_bytes(), 256 * MiB);
	reopen();
	ck_assert_uint_eq(fs_blocks_bytes(), 256 * MiB);
	b = mkfile("b");
	/* more than the old size could ever hold */
	ck_assert_int_eq(write_file(b, 100 * MiB, 2), 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	reopen();
	expect_file(a, 20 * MiB, 1);
	expect_file(b, 100 * MiB, 2);

	/* shrink over data: refused, nothing changes */
	ck_assert_int_eq(arb_fs_resize(fs, 64 * MiB, &why), -EBUSY);
	ck_assert_ptr_nonnull(why);
	ck_assert_uint_eq(file_size(), 256 * MiB);
	ck_assert_uint_eq(fs_blocks_bytes(), 256 * MiB);
	/* too small */
	ck_assert_int_eq(arb_fs_resize(fs, 1 * MiB, &why), -EINVAL);

	/* free the space and shrink; the image file follows */
	ck_assert_int_eq(arb_fs_unlink(fs, ROOT, "b"), 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_fs_resize(fs, 200 * MiB, &why), 0);
	ck_assert_uint_eq(file_size(), 200 * MiB);
	ck_assert_uint_eq(fs_blocks_bytes(), 200 * MiB);
	reopen();
	ck_assert_uint_eq(fs_blocks_bytes(), 200 * MiB);
	expect_file(a, 20 * MiB, 1);
	teardown();
}
END_TEST

START_TEST(test_autogrow)
{
	uint64_t a;
	int ret;

	setup(48 * MiB);
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fopts.autogrow_max = 200 * MiB;
	fs_open_now();
	a = mkfile("a");
	/* far more than 48 MiB: the image grows in steps */
	ck_assert_int_eq(write_file(a, 120 * MiB, 3), 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_uint_gt(file_size(), 120 * MiB);
	ck_assert_uint_le(file_size(), 200 * MiB);
	ck_assert_uint_eq(fs_blocks_bytes(), file_size());
	reopen();
	expect_file(a, 120 * MiB, 3);
	/* past the limit: ENOSPC as usual, earlier data intact */
	ret = 0;
	for (int i = 0; i < 20 && !ret; i++) {
		char name[16];
		snprintf(name, sizeof(name), "f%d", i);
		ret = write_file(mkfile(name), 20 * MiB, 4);
	}
	ck_assert_int_eq(ret, -ENOSPC);
	ck_assert_uint_eq(file_size(), 200 * MiB);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	reopen();
	expect_file(a, 120 * MiB, 3);
	teardown();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("resize");
	TCase *tc = tcase_create("resize");

	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_grow_shrink);
	tcase_add_test(tc, test_autogrow);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
