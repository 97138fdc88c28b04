/* SPDX-License-Identifier: MIT */
/*
 * test_reflink.c - arb_fs_copy_range (lib/fs/clone.c) against a byte
 * model.  Files in the filesystem tree, in a subvolume and in snapshots
 * of it are written, cloned into each other and into themselves (aligned,
 * congruent-unaligned and incongruent ranges, past the end, over holes,
 * preallocated space and inline files), truncated and punched; after
 * every operation the files equal the model and the checker (data
 * reference counts per leaf, back-references, nbytes) is clean, and
 * every few operations the filesystem is closed and opened again.
 * Then the space: a clone uses no data space, an overwrite of part of a
 * clone uses about that part, and the shared extent is freed only with
 * its last user.  ARBOR_TEST_SEED=<seed> repeats a run.
 */
#include <errno.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arbor/arbor.h"
#include "arbor/subvol.h"
#include "core.h"
#include "testutil.h"

#define MiB (1024ULL * 1024)
#define BS 4096ULL
#define MAX_FILE (768 * 1024ULL)
#define NF_MAX 16

struct mfile {
	uint64_t ino;
	uint8_t *data;
	uint64_t size;
	bool ro;
};

static struct mfile files[NF_MAX];
static int nf;
static struct arb_dev *mem;
static struct arb_fs *fs;
static uint64_t rs;
static const struct arb_cred cred = { 0, 0 };

static void fs_open_now(void)
{
	struct arb_fs_opts o;
	const char *why = NULL;
	int ret;

	arb_fs_opts_default(&o);
	o.commit_interval = 0;
	ret = arb_fs_open(tu_dev_borrow(mem), &o, &fs, &why);
	ck_assert_msg(ret == 0, "open: %d %s", ret, why ? why : "");
}

static void new_fs(uint64_t size, uint32_t nodesize)
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
	fs_open_now();
}

static void check_fs(void)
{
	int ret = arb_fs_check(fs, stderr);
	ck_assert_msg(ret == 0, "arb_fs_check: %d", ret);
}

static void fill_rand(uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)tu_rand(&rs);
}

static void model_resize(struct mfile *f, uint64_t size)
{
	if (size > f->size) {
		f->data = realloc(f->data, size);
		memset(f->data + f->size, 0, size - f->size);
	}
	f->size = size;
}

static uint64_t create_in(uint64_t dir, const char *name)
{
	struct arb_stat st;

	ck_assert_int_eq(arb_fs_mknod(fs, dir, name, 0100644, 0, &cred, &st),
			 0);
	return st.ino;
}

static void add_file(uint64_t dir, const char *name)
{
	ck_assert_int_lt(nf, NF_MAX);
	memset(&files[nf], 0, sizeof(files[nf]));
	files[nf].ino = create_in(dir, name);
	nf++;
}

static void compare(const struct mfile *f)
{
	uint8_t *b = malloc(f->size + BS);
	struct arb_stat st;

	ck_assert_int_eq(arb_fs_getattr(fs, f->ino, &st), 0);
	ck_assert_uint_eq(st.size, f->size);
	ck_assert_int_eq(arb_fs_read(fs, f->ino, b, f->size + BS, 0),
			 (ssize_t)f->size);
	ck_assert_msg(!f->size || memcmp(b, f->data, f->size) == 0,
		      "inode %llu differs from the model",
		      (unsigned long long)f->ino);
	free(b);
}

static void compare_all(void)
{
	for (int i = 0; i < nf; i++)
		compare(&files[i]);
}

static void reopen(void)
{
	check_fs();
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs_open_now();
	check_fs();
	compare_all();
}

/* ---- operations ---------------------------------------------------------- */

static struct mfile *pick_file(bool writable)
{
	struct mfile *f;

	do
		f = &files[tu_rand_range(&rs, nf)];
	while (writable && f->ro);
	return f;
}

static uint64_t rand_off(uint64_t limit, bool aligned)
{
	uint64_t v = tu_rand_range(&rs, limit + 1);

	return aligned ? v / BS * BS : v;
}

static void op_write(void)
{
	struct mfile *f = pick_file(true);
	bool aligned = tu_rand_range(&rs, 2);
	uint64_t off = rand_off(f->size + 3 * BS, aligned), len;
	uint8_t *b;

	len = aligned ? BS * (1 + tu_rand_range(&rs, 24))
		      : 1 + tu_rand_range(&rs, 3 * BS);
	if (tu_rand_range(&rs, 8) == 0)
		len = 1 + tu_rand_range(&rs, 1500); /* may stay inline */
	if (off + len > MAX_FILE)
		return;
	b = malloc(len);
	fill_rand(b, len);
	ck_assert_int_eq(arb_fs_write(fs, f->ino, b, len, off), (ssize_t)len);
	if (off + len > f->size)
		model_resize(f, off + len);
	memcpy(f->data + off, b, len);
	free(b);
}

static void op_truncate(void)
{
	struct mfile *f = pick_file(true);
	struct arb_setattr sa;
	struct arb_stat st;

	memset(&sa, 0, sizeof(sa));
	sa.size = tu_rand_range(&rs, 3) ? tu_rand_range(&rs, f->size + 1)
					: tu_rand_range(&rs, MAX_FILE);
	ck_assert_int_eq(arb_fs_setattr(fs, f->ino, &sa, ARB_SET_SIZE, &cred,
					&st),
			 0);
	model_resize(f, sa.size);
}

static void op_falloc(void)
{
	struct mfile *f = pick_file(true);
	uint64_t off = rand_off(f->size + BS, false);
	uint64_t len = 1 + tu_rand_range(&rs, 12 * BS), end;
	int mode;

	if (off + len > MAX_FILE)
		return;
	mode = tu_rand_range(&rs, 2) ? FALLOC_FL_KEEP_SIZE
				     : FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
	ck_assert_int_eq(arb_fs_fallocate(fs, f->ino, mode, off, len), 0);
	if (mode & FALLOC_FL_PUNCH_HOLE) {
		end = off + len < f->size ? off + len : f->size;
		if (off < end)
			memset(f->data + off, 0, end - off);
	}
}

static void op_copy(void)
{
	struct mfile *s = pick_file(false), *d = pick_file(true);
	unsigned kind = (unsigned)tu_rand_range(&rs, 10);
	uint64_t soff, doff, len, n;
	ssize_t r;

	/* mostly whole blocks, then congruent unaligned, then anything */
	soff = rand_off(s->size + BS, kind < 7);
	if (tu_rand_range(&rs, 4) == 0)
		soff = 0;
	doff = rand_off(d->size + 2 * BS, kind < 7);
	if (kind >= 7 && kind < 9)
		doff = doff / BS * BS + soff % BS;
	switch (tu_rand_range(&rs, 3)) {
	case 0:
		len = s->size + BS; /* to the end: cp */
		doff = soff;
		break;
	case 1:
		len = BS * (1 + tu_rand_range(&rs, 40));
		break;
	default:
		len = 1 + tu_rand_range(&rs, 40 * BS);
	}
	n = soff >= s->size ? 0 : s->size - soff;
	if (len < n)
		n = len;
	if (doff + n > MAX_FILE)
		return;
	r = arb_fs_copy_range(fs, s->ino, soff, d->ino, doff, len, 0);
	if (s == d && n && soff < doff + n && doff < soff + n) {
		ck_assert_int_eq(r, -EINVAL);
		return;
	}
	ck_assert_msg(r == (ssize_t)n, "copy_range %llu+%llu -> %llu: %zd, not %llu",
		      (unsigned long long)soff, (unsigned long long)len,
		      (unsigned long long)doff, r, (unsigned long long)n);
	if (!n)
		return;
	if (doff + n > d->size)
		model_resize(d, doff + n);
	memmove(d->data + doff, s->data + soff, n);
}

/* deduplication: sometimes of ranges made equal by a write first */
static void op_dedupe(void)
{
	struct mfile *s = pick_file(false), *d = pick_file(true);
	uint64_t soff = rand_off(s->size, true), doff = rand_off(d->size, true);
	uint64_t len = BS * (1 + tu_rand_range(&rs, 24)), n, got = 7;
	bool tail, same;
	int r;

	if (tu_rand_range(&rs, 4) == 0)
		len = s->size + 1;
	n = soff >= s->size ? 0 : s->size - soff;
	if (len < n)
		n = len;
	if (tu_rand_range(&rs, 2) && n && doff + n <= d->size &&
	    !(s == d && soff < doff + n && doff < soff + n)) {
		ck_assert_int_eq(arb_fs_write(fs, d->ino, s->data + soff, n, doff),
				 (ssize_t)n);
		memcpy(d->data + doff, s->data + soff, n);
	}
	r = arb_fs_dedupe_range(fs, s->ino, soff, d->ino, doff, len, &got);
	if (!n) {
		ck_assert_int_eq(r, 0);
		ck_assert_uint_eq(got, 0);
		return;
	}
	if (doff + n > d->size || (s == d && soff < doff + n && doff < soff + n)) {
		ck_assert_int_eq(r, -EINVAL);
		return;
	}
	tail = soff + n == s->size && doff + n == d->size;
	if (!tail)
		n = n / BS * BS;
	if (!n) {
		ck_assert_int_eq(r, 0);
		return;
	}
	same = memcmp(s->data + soff, d->data + doff, n) == 0;
	if (!same) {
		ck_assert_int_eq(r, ARB_DEDUPE_DIFFERS);
		return;
	}
	ck_assert_int_eq(r, 0);
	/* small files are left alone (0 bytes) */
	ck_assert(got == n || got == 0);
}

static void op_snapshot(uint64_t sv, int *snaps)
{
	char name[32];
	struct arb_stat st, fst;
	int first = nf;
	bool ro = tu_rand_range(&rs, 2);

	if (nf + 2 > NF_MAX)
		return;
	snprintf(name, sizeof(name), "snap%d", (*snaps)++);
	ck_assert_int_eq(arb_subvol_snapshot(fs, sv, ARB_ROOT_INO, name,
					     ro ? ARB_SUBVOL_RDONLY : 0, &cred,
					     &st),
			 0);
	/* files 4 and 5 live in sv */
	for (int i = 4; i < 6; i++) {
		char fname[8];
		struct mfile *f = &files[nf];

		snprintf(fname, sizeof(fname), "f%d", i);
		ck_assert_int_eq(arb_fs_lookup(fs, st.ino, fname, &fst), 0);
		memset(f, 0, sizeof(*f));
		f->ino = fst.ino;
		f->ro = ro;
		model_resize(f, files[i].size);
		if (f->size)
			memcpy(f->data, files[i].data, f->size);
		nf++;
	}
	(void)first;
}

START_TEST(test_model)
{
	int steps = TU_SCALE(600, 6000), snaps = 0;
	struct arb_stat st;
	uint64_t sv;

	rs = tu_seed("reflink_model");
	nf = 0;
	new_fs(256 * MiB, 4096);
	for (int i = 0; i < 4; i++) {
		char name[8];
		snprintf(name, sizeof(name), "f%d", i);
		add_file(ARB_ROOT_INO, name);
	}
	ck_assert_int_eq(arb_subvol_create(fs, ARB_ROOT_INO, "sv", 0755, &cred,
					   &st),
			 0);
	sv = st.ino;
	add_file(sv, "f4");
	add_file(sv, "f5");

	for (int i = 0; i < steps; i++) {
		unsigned r = (unsigned)tu_rand_range(&rs, 100);

		if (r < 30)
			op_write();
		else if (r < 62)
			op_copy();
		else if (r < 70)
			op_dedupe();
		else if (r < 78)
			op_truncate();
		else if (r < 88)
			op_falloc();
		else if (r < 93)
			ck_assert_int_eq(arb_fs_sync(fs), 0);
		else if (r < 96)
			reopen();
		else if (r < 97)
			op_snapshot(sv, &snaps);
		compare_all();
		check_fs();
	}
	reopen();
	ck_assert_int_eq(arb_fs_close(fs), 0);
	for (int i = 0; i < nf; i++)
		free(files[i].data);
	arb_dev_destroy(mem);
}
END_TEST

/* ---- edge cases ---------------------------------------------------------- */

static void write_pattern(uint64_t ino, uint64_t off, uint64_t len,
			  uint8_t seed)
{
	uint8_t *b = malloc(MiB);
	uint64_t done = 0;

	while (done < len) {
		uint64_t n = len - done < MiB ? len - done : MiB;
		for (uint64_t i = 0; i < n; i++)
			b[i] = (uint8_t)((off + done + i) * 131 + seed);
		ck_assert_int_eq(arb_fs_write(fs, ino, b, n, off + done),
				 (ssize_t)n);
		done += n;
	}
	free(b);
}

static uint64_t round_up_test(uint64_t v)
{
	return (v + BS - 1) / BS * BS;
}

static uint64_t free_after_sync(void)
{
	struct arb_fs_stats s;

	ck_assert_int_eq(arb_fs_sync(fs), 0);
	/* a second commit releases what the first one freed */
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_fs_get_stats(fs, &s), 0);
	return s.free_bytes;
}

START_TEST(test_space)
{
	uint64_t a, b, f0, f1, f2, f3, f4, size = 16 * MiB + 1000;
	struct arb_fs_stats s;
	uint8_t *x, *y;

	nf = 0;
	new_fs(256 * MiB, 0);
	a = create_in(ARB_ROOT_INO, "a");
	b = create_in(ARB_ROOT_INO, "b");
	write_pattern(a, 0, size, 7);
	f0 = free_after_sync();
	ck_assert_int_eq(arb_fs_copy_range(fs, a, 0, b, 0, size + 5, 0),
			 (ssize_t)size);
	ck_assert_int_eq(arb_fs_get_stats(fs, &s), 0);
	ck_assert_uint_eq(s.cloned_bytes, round_up_test(size));
	f1 = free_after_sync();
	/* metadata only: well under 1% of the data */
	ck_assert_msg(f0 - f1 < 256 * 1024, "clone used %llu bytes",
		      (unsigned long long)(f0 - f1));
	x = malloc(size);
	y = malloc(size);
	ck_assert_int_eq(arb_fs_read(fs, a, x, size, 0), (ssize_t)size);
	ck_assert_int_eq(arb_fs_read(fs, b, y, size, 0), (ssize_t)size);
	ck_assert(memcmp(x, y, size) == 0);
	/* overwrite 1 MiB of the copy: about 1 MiB more in use */
	write_pattern(b, 4 * MiB, MiB, 99);
	f2 = free_after_sync();
	ck_assert_msg(f1 - f2 >= MiB && f1 - f2 < MiB + 256 * 1024,
		      "overwrite used %llu bytes",
		      (unsigned long long)(f1 - f2));
	ck_assert_int_eq(arb_fs_read(fs, a, y, size, 0), (ssize_t)size);
	ck_assert(memcmp(x, y, size) == 0);
	/* the original goes: its extents stay for the copy */
	ck_assert_int_eq(arb_fs_unlink(fs, ARB_ROOT_INO, "a"), 0);
	f3 = free_after_sync();
	ck_assert_msg(f3 - f2 < 2 * MiB, "unlink freed %llu bytes",
		      (unsigned long long)(f3 - f2));
	reopen();
	ck_assert_int_eq(arb_fs_read(fs, b, y, size, 0), (ssize_t)size);
	memcpy(x + 4 * MiB, y + 4 * MiB, MiB); /* checked by pattern below */
	for (uint64_t i = 4 * MiB; i < 5 * MiB; i++)
		if (y[i] != (uint8_t)(i * 131 + 99))
			ck_abort_msg("overwrite differs at %llu",
				     (unsigned long long)i);
	ck_assert(memcmp(x, y, size) == 0);
	ck_assert_int_eq(arb_fs_unlink(fs, ARB_ROOT_INO, "b"), 0);
	f4 = free_after_sync();
	ck_assert_msg(f4 - f3 >= size, "last unlink freed %llu bytes",
		      (unsigned long long)(f4 - f3));
	ck_assert_msg(f4 + 256 * 1024 >= f0 + size, "space lost");
	check_fs();
	free(x);
	free(y);
	ck_assert_int_eq(arb_fs_close(fs), 0);
	arb_dev_destroy(mem);
}
END_TEST

START_TEST(test_edges)
{
	uint64_t a, b, c, sv, snap;
	struct arb_stat st;
	uint8_t buf[3 * 4096], out[3 * 4096];

	nf = 0;
	new_fs(64 * MiB, 0);
	a = create_in(ARB_ROOT_INO, "a");
	b = create_in(ARB_ROOT_INO, "b");
	write_pattern(a, 0, 10 * BS + 100, 1);
	/* share-only refuses what it cannot share, changing nothing */
	ck_assert_int_eq(arb_fs_copy_range(fs, a, 1, b, 1, BS, ARB_COPY_SHARE_ONLY),
			 -EINVAL);
	ck_assert_int_eq(arb_fs_copy_range(fs, a, 0, b, 0, 100, ARB_COPY_SHARE_ONLY),
			 -EINVAL);
	ck_assert_int_eq(arb_fs_copy_range(fs, a, BS, b, 0, BS, 1u << 7), -EINVAL);
	ck_assert_int_eq(arb_fs_getattr(fs, b, &st), 0);
	ck_assert_uint_eq(st.size, 0);
	/* the tail at the source's end is shared whole */
	ck_assert_int_eq(arb_fs_copy_range(fs, a, 8 * BS, b, 0, 1 << 20,
					   ARB_COPY_SHARE_ONLY),
			 (ssize_t)(2 * BS + 100));
	ck_assert_int_eq(arb_fs_getattr(fs, b, &st), 0);
	ck_assert_uint_eq(st.size, 2 * BS + 100);
	ck_assert_int_eq(arb_fs_read(fs, a, buf, sizeof(buf), 8 * BS),
			 (ssize_t)(2 * BS + 100));
	ck_assert_int_eq(arb_fs_read(fs, b, out, sizeof(out), 0),
			 (ssize_t)(2 * BS + 100));
	ck_assert(memcmp(buf, out, 2 * BS + 100) == 0);
	/* growing the copy shows zeros past its old end */
	{
		struct arb_setattr sa = { .size = 3 * BS };
		ck_assert_int_eq(arb_fs_setattr(fs, b, &sa, ARB_SET_SIZE,
						&cred, &st), 0);
		ck_assert_int_eq(arb_fs_read(fs, b, out, sizeof(out), 0),
				 (ssize_t)(3 * BS));
		for (uint64_t i = 2 * BS + 100; i < 3 * BS; i++)
			ck_assert_uint_eq(out[i], 0);
	}
	/* the same file: overlap refused, elsewhere fine */
	ck_assert_int_eq(arb_fs_copy_range(fs, a, 0, a, BS, 2 * BS, 0), -EINVAL);
	ck_assert_int_eq(arb_fs_copy_range(fs, a, 0, a, 12 * BS, 2 * BS, 0),
			 (ssize_t)(2 * BS));
	/* an inline source is copied, also when sharing is demanded */
	c = create_in(ARB_ROOT_INO, "c");
	write_pattern(c, 0, 300, 5);
	/* not at the destination's end: no tail to share */
	ck_assert_int_eq(arb_fs_copy_range(fs, c, 0, b, 0, 300,
					   ARB_COPY_SHARE_ONLY), -EINVAL);
	ck_assert_int_eq(arb_fs_unlink(fs, ARB_ROOT_INO, "b"), 0);
	b = create_in(ARB_ROOT_INO, "b");
	ck_assert_int_eq(arb_fs_copy_range(fs, c, 0, b, 0, 300,
					   ARB_COPY_SHARE_ONLY), 300);
	ck_assert_int_eq(arb_fs_read(fs, b, out, 300, 0), 300);
	ck_assert_int_eq(arb_fs_read(fs, c, buf, 300, 0), 300);
	ck_assert(memcmp(buf, out, 300) == 0);
	/* into an inline destination, after its block 0 */
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_fs_copy_range(fs, a, BS, c, BS, 2 * BS, 0),
			 (ssize_t)(2 * BS));
	ck_assert_int_eq(arb_fs_read(fs, c, out, 300, 0), 300);
	ck_assert(memcmp(buf, out, 300) == 0);
	/* into a read-only snapshot: EROFS; from it: fine */
	ck_assert_int_eq(arb_subvol_create(fs, ARB_ROOT_INO, "sv", 0755, &cred,
					   &st), 0);
	sv = st.ino;
	ck_assert_int_eq(arb_fs_mknod(fs, sv, "x", 0100644, 0, &cred, &st), 0);
	ck_assert_int_eq(arb_fs_copy_range(fs, a, 0, st.ino, 0, 1 << 20, 0),
			 (ssize_t)(14 * BS));
	ck_assert_int_eq(arb_subvol_snapshot(fs, sv, ARB_ROOT_INO, "snap",
					     ARB_SUBVOL_RDONLY, &cred, &st), 0);
	snap = st.ino;
	ck_assert_int_eq(arb_fs_lookup(fs, snap, "x", &st), 0);
	ck_assert_int_eq(arb_fs_copy_range(fs, a, 0, st.ino, 0, BS, 0), -EROFS);
	ck_assert_int_eq(arb_fs_copy_range(fs, st.ino, 0, b, 0, 1 << 20, 0),
			 (ssize_t)(14 * BS));
	/* not regular files */
	ck_assert_int_eq(arb_fs_copy_range(fs, a, 0, sv, 0, BS, 0), -EISDIR);
	/* an immutable or append-only destination takes no copy or dedupe;
	 * an immutable source may be copied */
	{
		uint64_t got;

		ck_assert_int_eq(arb_fs_set_flags(fs, b, ARB_FL_IMMUTABLE), 0);
		ck_assert_int_eq(arb_fs_copy_range(fs, a, 0, b, 0, BS, 0), -EPERM);
		ck_assert_int_eq(arb_fs_dedupe_range(fs, a, 0, b, 0, BS, &got),
				 -EPERM);
		ck_assert_int_eq(arb_fs_copy_range(fs, b, 0, c, 0, 1 << 20, 0),
				 (ssize_t)(14 * BS));
		ck_assert_int_eq(arb_fs_set_flags(fs, b, ARB_FL_APPEND), 0);
		ck_assert_int_eq(arb_fs_copy_range(fs, a, 0, b, 14 * BS, BS, 0),
				 -EPERM);
		ck_assert_int_eq(arb_fs_set_flags(fs, b, 0), 0);
	}
	reopen();
	ck_assert_int_eq(arb_fs_close(fs), 0);
	arb_dev_destroy(mem);
}
END_TEST

/* Clones of a fragmented file until the metadata runs out: ENOSPC at the
 * start of a step, the filesystem stays writable and consistent. */
START_TEST(test_enospc)
{
	uint64_t a, ino, i;
	struct arb_fs_stats s;
	char name[16];
	ssize_t r = 0;

	nf = 0;
	new_fs(32 * MiB, 0);
	a = create_in(ARB_ROOT_INO, "a");
	for (i = 0; i < 1024; i++)
		write_pattern(a, 2 * i * BS, BS, 3);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	for (i = 0; i < 10000; i++) {
		snprintf(name, sizeof(name), "c%llu", (unsigned long long)i);
		{
			struct arb_stat st;
			int ret = arb_fs_mknod(fs, ARB_ROOT_INO, name, 0100644,
					       0, &cred, &st);
			if (ret == -ENOSPC) {
				r = ret;
				break;
			}
			ck_assert_int_eq(ret, 0);
			ino = st.ino;
		}
		r = arb_fs_copy_range(fs, a, 0, ino, 0, 1 << 30, 0);
		if (r < 0)
			break;
	}
	fprintf(stderr, "enospc: %zd after %llu clones\n", r, (unsigned long long)i);
	ck_assert_msg(r == -ENOSPC, "copy_range: %zd after %llu", r,
		      (unsigned long long)i);
	ck_assert_int_eq(arb_fs_get_stats(fs, &s), 0);
	ck_assert_uint_eq(s.state & ARB_FS_STATE_FAILED, 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	reopen();
	ck_assert_int_eq(arb_fs_close(fs), 0);
	arb_dev_destroy(mem);
}
END_TEST

START_TEST(test_dedupe)
{
	uint64_t a, b, c, f0, f1, f2, got, size = 8 * MiB + 300;
	uint8_t *x;
	struct arb_fs_stats s;

	nf = 0;
	new_fs(128 * MiB, 0);
	a = create_in(ARB_ROOT_INO, "a");
	b = create_in(ARB_ROOT_INO, "b");
	c = create_in(ARB_ROOT_INO, "c");
	write_pattern(a, 0, size, 4);
	write_pattern(b, 0, size, 4);
	write_pattern(c, 0, size, 4);
	/* c differs from a in one byte */
	ck_assert_int_eq(arb_fs_write(fs, c, "x", 1, 5 * MiB + 17), 1);
	f0 = free_after_sync();
	ck_assert_int_eq(arb_fs_dedupe_range(fs, a, 0, c, 0, size, &got),
			 ARB_DEDUPE_DIFFERS);
	ck_assert_uint_eq(got, 0);
	/* misaligned, outside the destination */
	ck_assert_int_eq(arb_fs_dedupe_range(fs, a, 1, b, 1, BS, &got), -EINVAL);
	ck_assert_int_eq(arb_fs_dedupe_range(fs, a, 0, b, BS, size, &got),
			 -EINVAL);
	ck_assert_uint_eq(free_after_sync(), f0);
	ck_assert_int_eq(arb_fs_dedupe_range(fs, a, 0, b, 0, size, &got), 0);
	ck_assert_uint_eq(got, size);
	ck_assert_int_eq(arb_fs_get_stats(fs, &s), 0);
	ck_assert_uint_eq(s.deduped_bytes, round_up_test(size));
	f1 = free_after_sync();
	ck_assert_msg(f1 - f0 >= 8 * MiB, "dedupe reclaimed %llu bytes",
		      (unsigned long long)(f1 - f0));
	/* the part of c before the differing byte */
	ck_assert_int_eq(arb_fs_dedupe_range(fs, a, 0, c, 0, 5 * MiB, &got), 0);
	ck_assert_uint_eq(got, 5 * MiB);
	f2 = free_after_sync();
	ck_assert_msg(f2 >= f1, "dedupe took space");
	reopen();
	x = malloc(size);
	ck_assert_int_eq(arb_fs_read(fs, b, x, size, 0), (ssize_t)size);
	for (uint64_t i = 0; i < size; i++)
		if (x[i] != (uint8_t)(i * 131 + 4))
			ck_abort_msg("b differs at %llu", (unsigned long long)i);
	ck_assert_int_eq(arb_fs_read(fs, c, x, size, 0), (ssize_t)size);
	ck_assert_uint_eq(x[5 * MiB + 17], 'x');
	free(x);
	ck_assert_int_eq(arb_fs_close(fs), 0);
	arb_dev_destroy(mem);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("reflink");
	TCase *tc = tcase_create("model");
	TCase *te = tcase_create("space");

	tcase_set_timeout(tc, 1200);
	tcase_add_test(tc, test_model);
	tcase_set_timeout(te, 600);
	tcase_add_test(te, test_space);
	tcase_add_test(te, test_edges);
	tcase_add_test(te, test_enospc);
	tcase_add_test(te, test_dedupe);
	suite_add_tcase(s, tc);
	suite_add_tcase(s, te);
	return tu_run_suite(s);
}
