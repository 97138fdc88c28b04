/* SPDX-License-Identifier: MIT */
/*
 * test_encoded.c - arb_fs_read_encoded / arb_fs_write_encoded
 * (lib/fs/encoded.c): compressed extents read in their stored form from
 * one file and stored into another without compressing again, whole,
 * in part (items that start inside their extent) and at the end of a
 * file; what is not a compressed extent (-ENODATA); hostile input
 * refused with nothing changed; a damaged stored sector (-EIO); and
 * random encoded and plain writes against a byte model.  After each the
 * checker is clean.  ARBOR_TEST_SEED=<seed> repeats a run.
 */
#include <errno.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arbor/arbor.h"
#include "core.h"
#include "fs/file_int.h"
#include "testutil.h"

#define BS 4096ULL
#define KiB 1024ULL
#define MiB (1024ULL * 1024)

static struct arb_dev *mem;
static struct arb_fs *fs;
static uint64_t rs;
static const struct arb_cred cred = { 0, 0 };

static void fs_open_now(bool compress)
{
	struct arb_fs_opts o;
	const char *why = NULL;
	int ret;

	arb_fs_opts_default(&o);
	o.commit_interval = 0;
	if (compress)
		o.compress = ARB_COMPRESS_ZLIB;
	ret = arb_fs_open(tu_dev_borrow(mem), &o, &fs, &why);
	ck_assert_msg(ret == 0, "open: %d %s", ret, why ? why : "");
}

static void new_fs(bool compress)
{
	struct arb_mkfs_opts mo;
	struct arb_dev *d;

	arb_log_level = ARB_LOG_WARN;
	rs = tu_seed("encoded");
	ck_assert_int_eq(arb_dev_open_mem(64 * MiB, &mem), 0);
	arb_mkfs_opts_default(&mo);
	d = tu_dev_borrow(mem);
	ck_assert_int_eq(arb_mkfs(d, &mo), 0);
	arb_dev_destroy(d);
	fs_open_now(compress);
}

static void reopen(bool compress)
{
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs_open_now(compress);
}

static void done_fs(void)
{
	ck_assert_int_eq(arb_fs_close(fs), 0);
	arb_dev_destroy(mem);
}

static void check_fs(void)
{
	int ret = arb_fs_check(fs, stderr);

	ck_assert_msg(ret == 0, "arb_fs_check: %d", ret);
}

/* scrub: every data sector read and checked; the damaged ones */
static uint64_t scrub_errors(void)
{
	struct arb_scrub_stats st;

	memset(&st, 0, sizeof(st));
	ck_assert_int_eq(arb_fs_scrub(fs, &st, NULL, NULL, NULL), 0);
	ck_assert(st.done);
	ck_assert_uint_gt(st.data_sectors_checked, 0);
	return st.csum_errors + st.read_errors + st.data_uncorrectable;
}

static uint64_t mkfile(const char *name)
{
	struct arb_stat st;

	ck_assert_int_eq(arb_fs_mknod(fs, ARB_ROOT_INO, name, 0100644, 0,
				      &cred, &st), 0);
	return st.ino;
}

/* words of a small alphabet: deflates to about a third */
static void fill_text(uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t r = tu_rand(&rs);
		b[i] = r % 7 == 0 ? ' ' : (uint8_t)('a' + r % 5);
	}
}

static void fill_rand(uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)tu_rand(&rs);
}

static void write_all(uint64_t ino, const void *b, size_t n, uint64_t off)
{
	ck_assert_int_eq(arb_fs_write(fs, ino, b, n, off), (ssize_t)n);
}

static uint64_t fsize(uint64_t ino)
{
	struct arb_stat st;

	ck_assert_int_eq(arb_fs_getattr(fs, ino, &st), 0);
	return st.size;
}

/* ino holds exactly want (size and bytes) */
static void expect(uint64_t ino, const uint8_t *want, uint64_t size)
{
	uint8_t *b = malloc(size + BS);

	ck_assert_uint_eq(fsize(ino), size);
	ck_assert_int_eq(arb_fs_read(fs, ino, b, size + BS, 0),
			 (ssize_t)size);
	if (memcmp(b, want, size) == 0) {
		free(b);
		return;
	}
	for (uint64_t i = 0; i < size; i++)
		ck_assert_msg(b[i] == want[i],
			      "inode %llu byte %llu: %02x, want %02x",
			      (unsigned long long)ino, (unsigned long long)i,
			      b[i], want[i]);
	free(b);
}

static uint8_t *read_file(uint64_t ino, uint64_t *size)
{
	uint8_t *b;

	*size = fsize(ino);
	b = malloc(*size + 1);
	ck_assert_int_eq(arb_fs_read(fs, ino, b, *size, 0), (ssize_t)*size);
	return b;
}

/* one item as read */
struct piece {
	struct arb_encoded e;
	uint8_t *data;
};

/* every compressed item of ino, in file order; *n of them */
static struct piece *read_pieces(uint64_t ino, size_t *n)
{
	uint64_t size = fsize(ino), off = 0;
	struct piece *p = NULL;
	uint8_t *buf = malloc(ARB_ENCODED_MAX);

	*n = 0;
	while (off < size) {
		struct arb_encoded e;
		int ret = arb_fs_read_encoded(fs, ino, off, &e, buf,
					      ARB_ENCODED_MAX);

		if (ret == -ENODATA) {
			off = (off / BS + 1) * BS;
			continue;
		}
		ck_assert_int_eq(ret, 0);
		ck_assert_uint_le(e.file_off, off);
		ck_assert_uint_gt(e.file_off + e.num_bytes, off);
		ck_assert_uint_eq(e.compression, ARB_COMPRESS_ZLIB);
		ck_assert_uint_gt(e.len, 0);
		ck_assert_uint_lt(e.len, e.ram_bytes);
		ck_assert_uint_le(e.ext_off + e.num_bytes, e.ram_bytes);
		p = realloc(p, (*n + 1) * sizeof(*p));
		p[*n].e = e;
		p[*n].data = malloc(e.len);
		memcpy(p[*n].data, buf, e.len);
		(*n)++;
		off = e.file_off + e.num_bytes;
	}
	free(buf);
	return p;
}

static void free_pieces(struct piece *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(p[i].data);
	free(p);
}

static void space(uint64_t ino, struct arb_file_space *sp)
{
	ck_assert_int_eq(arb_fs_file_space(fs, ino, sp), 0);
}

/* the file's extent that covers off, looked up as the library does */
static struct fs_ext ext_at(uint64_t ino, uint64_t off)
{
	struct fs_ext x;

	fs_lock(fs);
	ck_assert_int_eq(fs_ext_next(fs, ino, off, &x, NULL), 0);
	fs_unlock(fs);
	ck_assert_uint_le(x.start, off);
	return x;
}

/*
 * Compressed file A read piece by piece and stored into B on a handle
 * without compression: the same bytes, the same stored size, compressed
 * items; again after a reopen.  A ends inside a sector, in a piece of
 * three sectors: that tail round-trips and B gets A's size.
 */
START_TEST(test_roundtrip)
{
	uint64_t size = 1 * MiB + 9000, a, b, bsize;
	uint8_t *data = malloc(size), *got;
	struct arb_file_space sa, sb;
	struct piece *p, *q;
	size_t n, m;

	new_fs(true);
	fill_text(data, size);
	a = mkfile("a");
	write_all(a, data, size, 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	p = read_pieces(a, &n);
	ck_assert_uint_eq(n, 9); /* 8 x 128 KiB and the tail */
	ck_assert_uint_eq(p[n - 1].e.file_off, 1 * MiB);
	ck_assert_uint_eq(p[n - 1].e.num_bytes, 9000);
	ck_assert_uint_eq(p[n - 1].e.ram_bytes, 3 * BS);

	reopen(false);
	b = mkfile("b");
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(arb_fs_write_encoded(fs, b, &p[i].e,
						      p[i].data),
				 (ssize_t)p[i].e.num_bytes);
	expect(b, data, size);
	space(a, &sa);
	space(b, &sb);
	ck_assert_uint_eq(sb.bytes, sa.bytes);
	ck_assert_uint_eq(sb.stored, sa.stored);
	ck_assert_uint_eq(sb.compressed_extents, n);
	ck_assert_uint_eq(sb.compressed_stored, sa.compressed_stored);
	ck_assert_uint_lt(sb.stored, size / 2);
	/* and B's pieces read back as they went in */
	q = read_pieces(b, &m);
	ck_assert_uint_eq(m, n);
	for (size_t i = 0; i < n; i++) {
		ck_assert(memcmp(&p[i].e, &q[i].e, sizeof(p[i].e)) == 0);
		ck_assert(memcmp(p[i].data, q[i].data, p[i].e.len) == 0);
	}
	free_pieces(q, m);
	check_fs();

	/* the tail alone into an empty file: a hole, then the piece */
	uint64_t c = mkfile("c");
	ck_assert_int_eq(arb_fs_write_encoded(fs, c, &p[n - 1].e,
					      p[n - 1].data), 9000);
	got = read_file(c, &bsize);
	ck_assert_uint_eq(bsize, size);
	for (uint64_t i = 0; i < 1 * MiB; i++)
		if (got[i])
			ck_abort_msg("byte %llu of the hole: %02x",
				     (unsigned long long)i, got[i]);
	ck_assert(memcmp(got + MiB, data + MiB, 9000) == 0);
	free(got);

	reopen(false);
	expect(a, data, size);
	expect(b, data, size);
	check_fs();
	ck_assert_uint_eq(scrub_errors(), 0);
	free_pieces(p, n);
	free(data);
	done_fs();
}
END_TEST

/*
 * Items that start inside their extent: an overwrite in the middle of a
 * compressed 128 KiB piece and a punched hole leave parts of it; each
 * part reads with its ext_off and num_bytes and is stored as that part.
 */
START_TEST(test_partial)
{
	uint64_t size = 256 * KiB, a, b;
	uint8_t *data = malloc(size), *want = calloc(1, size);
	struct arb_encoded e;
	uint8_t *buf = malloc(ARB_ENCODED_MAX);
	struct fs_ext x;

	new_fs(true);
	fill_text(data, size);
	a = mkfile("a");
	write_all(a, data, size, 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	fill_rand(data + 32 * KiB, 16 * KiB);
	write_all(a, data + 32 * KiB, 16 * KiB, 32 * KiB);
	ck_assert_int_eq(arb_fs_fallocate(fs, a, FALLOC_FL_PUNCH_HOLE |
					  FALLOC_FL_KEEP_SIZE,
					  160 * KiB, 8 * KiB), 0);
	memset(data + 160 * KiB, 0, 8 * KiB);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	expect(a, data, size);

	b = mkfile("b");
	/* [48K, 128K) of the first piece */
	ck_assert_int_eq(arb_fs_read_encoded(fs, a, 100 * KiB, &e, buf,
					     ARB_ENCODED_MAX), 0);
	ck_assert_uint_eq(e.file_off, 48 * KiB);
	ck_assert_uint_eq(e.ext_off, 48 * KiB);
	ck_assert_uint_eq(e.num_bytes, 80 * KiB);
	ck_assert_uint_eq(e.ram_bytes, 128 * KiB);
	ck_assert_int_eq(arb_fs_write_encoded(fs, b, &e, buf), 80 * KiB);
	memcpy(want + 48 * KiB, data + 48 * KiB, 80 * KiB);
	/* [0, 32K): offset 0, part of the extent */
	ck_assert_int_eq(arb_fs_read_encoded(fs, a, 0, &e, buf,
					     ARB_ENCODED_MAX), 0);
	ck_assert_uint_eq(e.ext_off, 0);
	ck_assert_uint_eq(e.num_bytes, 32 * KiB);
	ck_assert_int_eq(arb_fs_write_encoded(fs, b, &e, buf), 32 * KiB);
	memcpy(want, data, 32 * KiB);
	/* the overwritten random bytes: plain */
	ck_assert_int_eq(arb_fs_read_encoded(fs, a, 40 * KiB, &e, buf,
					     ARB_ENCODED_MAX), -ENODATA);
	/* after the punched hole, [168K, 256K) of the second piece */
	ck_assert_int_eq(arb_fs_read_encoded(fs, a, 164 * KiB, &e, buf,
					     ARB_ENCODED_MAX), -ENODATA);
	ck_assert_int_eq(arb_fs_read_encoded(fs, a, 200 * KiB, &e, buf,
					     ARB_ENCODED_MAX), 0);
	ck_assert_uint_eq(e.file_off, 168 * KiB);
	ck_assert_uint_eq(e.ext_off, 40 * KiB);
	ck_assert_uint_eq(e.num_bytes, 88 * KiB);
	/* stored elsewhere in b: the item's file offset is the caller's */
	e.file_off = 128 * KiB;
	ck_assert_int_eq(arb_fs_write_encoded(fs, b, &e, buf), 88 * KiB);
	memcpy(want + 128 * KiB, data + 168 * KiB, 88 * KiB);
	expect(b, want, 216 * KiB);
	x = ext_at(b, 130 * KiB);
	ck_assert_uint_eq(x.compression, ARB_COMPRESS_ZLIB);
	ck_assert_uint_eq(x.offset, 40 * KiB);
	ck_assert_uint_eq(x.end - x.start, 88 * KiB);
	check_fs();
	reopen(false);
	expect(b, want, 216 * KiB);
	check_fs();
	free(buf);
	free(data);
	free(want);
	done_fs();
}
END_TEST

/* What is not a compressed extent; a file whose data is still delayed. */
START_TEST(test_nodata)
{
	uint8_t *buf = malloc(ARB_ENCODED_MAX), *data = malloc(512 * KiB);
	struct arb_encoded e;
	uint64_t p, h, s, f, d;

	new_fs(true);
	fill_text(data, 512 * KiB);
	/* plain: incompressible, marked NOCOMPRESS by the flush */
	p = mkfile("plain");
	fill_rand(buf, ARB_ENCODED_MAX);
	write_all(p, buf, ARB_ENCODED_MAX, 0);
	/* a hole before compressed data */
	h = mkfile("hole");
	write_all(h, data, 128 * KiB, 256 * KiB);
	/* small: inline, compressed */
	s = mkfile("small");
	write_all(s, data, 1000, 0);
	/* preallocated inside the size */
	f = mkfile("prealloc");
	ck_assert_int_eq(arb_fs_fallocate(fs, f, 0, 0, 64 * KiB), 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_fs_read_encoded(fs, p, 0, &e, buf,
					     ARB_ENCODED_MAX), -ENODATA);
	ck_assert_int_eq(arb_fs_read_encoded(fs, h, 4096, &e, buf,
					     ARB_ENCODED_MAX), -ENODATA);
	ck_assert_int_eq(arb_fs_read_encoded(fs, h, 256 * KiB, &e, buf,
					     ARB_ENCODED_MAX), 0);
	ck_assert_int_eq(arb_fs_read_encoded(fs, h, 384 * KiB, &e, buf,
					     ARB_ENCODED_MAX), -ENODATA);
	ck_assert_int_eq(arb_fs_read_encoded(fs, s, 0, &e, buf,
					     ARB_ENCODED_MAX), -ENODATA);
	ck_assert_int_eq(arb_fs_read_encoded(fs, f, 8192, &e, buf,
					     ARB_ENCODED_MAX), -ENODATA);
	ck_assert_int_eq(arb_fs_read_encoded(fs, ARB_ROOT_INO, 0, &e, buf,
					     ARB_ENCODED_MAX), -EISDIR);
	/* a buffer too small: -EOVERFLOW, e->len says what it takes */
	ck_assert_int_eq(arb_fs_read_encoded(fs, h, 256 * KiB, &e, buf, 10),
			 -EOVERFLOW);
	ck_assert_uint_gt(e.len, 10);
	ck_assert_int_eq(arb_fs_read_encoded(fs, h, 256 * KiB, &e, buf,
					     e.len), 0);

	/* written, not committed: the read writes it first */
	d = mkfile("delayed");
	write_all(d, data, 300 * KiB, 0);
	ck_assert_int_eq(arb_fs_read_encoded(fs, d, 200 * KiB, &e, buf,
					     ARB_ENCODED_MAX), 0);
	ck_assert_uint_eq(e.file_off, 128 * KiB);
	ck_assert_uint_eq(e.num_bytes, 128 * KiB);
	ck_assert_int_eq(arb_fs_read_encoded(fs, d, 290 * KiB, &e, buf,
					     ARB_ENCODED_MAX), 0);
	ck_assert_uint_eq(e.file_off, 256 * KiB);
	ck_assert_uint_eq(e.num_bytes, 44 * KiB);
	/* delayed again, over part of a piece: the new bytes count */
	write_all(d, data + 400 * KiB, 8 * KiB, 4 * KiB);
	ck_assert_int_eq(arb_fs_read_encoded(fs, d, 0, &e, buf,
					     ARB_ENCODED_MAX), 0);
	ck_assert_uint_eq(e.file_off, 0);
	ck_assert_uint_eq(e.num_bytes, 4 * KiB);
	ck_assert_uint_eq(e.ram_bytes, 128 * KiB);
	ck_assert_int_eq(arb_fs_read_encoded(fs, d, 4 * KiB, &e, buf,
					     ARB_ENCODED_MAX), 0);
	ck_assert_uint_eq(e.file_off, 4 * KiB);
	ck_assert_uint_eq(e.num_bytes, 8 * KiB);
	ck_assert_uint_eq(e.ram_bytes, 8 * KiB);
	ck_assert_int_eq(arb_fs_read_encoded(fs, d, 12 * KiB, &e, buf,
					     ARB_ENCODED_MAX), 0);
	ck_assert_uint_eq(e.ext_off, 12 * KiB);
	ck_assert_int_eq(arb_fs_read(fs, d, buf, 8 * KiB, 4 * KiB),
			 8 * KiB);
	ck_assert(memcmp(buf, data + 400 * KiB, 8 * KiB) == 0);
	check_fs();

	/* stored into the inline file after its block 0, and into a file
	 * whose data is never compressed (written plainly) */
	{
		struct arb_file_space sp;
		uint8_t *want = calloc(1, 256 * KiB);
		uint64_t nc = mkfile("nocomp");

		ck_assert_int_eq(arb_fs_read_encoded(fs, h, 256 * KiB, &e,
						     buf, ARB_ENCODED_MAX), 0);
		e.file_off = 128 * KiB;
		ck_assert_int_eq(arb_fs_write_encoded(fs, s, &e, buf),
				 128 * KiB);
		memcpy(want, data, 1000);
		memcpy(want + 128 * KiB, data, 128 * KiB);
		expect(s, want, 256 * KiB);
		ck_assert_int_eq(arb_fs_set_flags(fs, nc, ARB_FL_NOCOMP), 0);
		ck_assert_int_eq(arb_fs_write_encoded(fs, nc, &e, buf),
				 128 * KiB);
		ck_assert_int_eq(arb_fs_sync(fs), 0);
		memset(want, 0, 1000);
		expect(nc, want, 256 * KiB);
		space(nc, &sp);
		ck_assert_uint_eq(sp.compressed_extents, 0);
		ck_assert_uint_eq(sp.bytes, 128 * KiB);
		space(s, &sp);
		ck_assert_uint_eq(sp.compressed_extents, 1);
		check_fs();
		free(want);
	}
	free(buf);
	free(data);
	done_fs();
}
END_TEST

/* Hostile input: refused, and the file as it was. */
START_TEST(test_hostile)
{
	uint64_t size = 256 * KiB, a, h, c;
	uint8_t *data = malloc(size), *old = malloc(size);
	uint8_t *buf = malloc(2 * ARB_ENCODED_MAX);
	uint8_t *junk = malloc(2 * ARB_ENCODED_MAX);
	struct arb_encoded e, g;

	new_fs(true);
	fill_text(data, size);
	a = mkfile("a");
	write_all(a, data, size, 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_fs_read_encoded(fs, a, 0, &e, buf,
					     ARB_ENCODED_MAX), 0);
	ck_assert_uint_eq(e.num_bytes, 128 * KiB);
	reopen(false);
	h = mkfile("h");
	fill_rand(old, size);
	write_all(h, old, size, 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);

#define REFUSED(field_change, err)                                         \
	do {                                                               \
		g = e;                                                     \
		field_change;                                              \
		ck_assert_int_eq(arb_fs_write_encoded(fs, h, &g, buf),     \
				 (err));                                   \
		expect(h, old, size);                                      \
	} while (0)
	REFUSED(g.compression = 0, -EINVAL);
	REFUSED(g.compression = 2, -EINVAL);
	REFUSED(g.len = 0, -EINVAL);
	REFUSED(g.len = ARB_ENCODED_MAX + 1, -EINVAL);
	REFUSED(g.ram_bytes = ARB_ENCODED_MAX + BS, -EINVAL);
	REFUSED(g.ram_bytes = 0, -EINVAL);
	REFUSED(g.num_bytes = 0, -EINVAL);
	REFUSED(g.ext_off = BS, -EINVAL);
	REFUSED((g.ext_off = UINT64_MAX - BS, g.num_bytes = 2 * BS), -EINVAL);
	REFUSED(g.file_off = 100, -EINVAL);
	/* a partial sector inside the file */
	REFUSED(g.num_bytes = 128 * KiB - 100, -EINVAL);
	REFUSED(g.file_off = ARB_MAX_FILE_SIZE - BS, -EFBIG);
	/* inflates to another length: shorter, longer */
	REFUSED((g.ram_bytes -= BS, g.num_bytes -= BS), -EBADMSG);
	REFUSED((g.ram_bytes = ARB_ENCODED_MAX - BS / 2, g.num_bytes = BS),
		-EBADMSG);
	REFUSED(g.len = e.len / 2, -EBADMSG);
	/* damaged: one byte, then garbage */
	memcpy(junk, buf, e.len);
	junk[e.len / 2] ^= 0x55;
	g = e;
	ck_assert_int_eq(arb_fs_write_encoded(fs, h, &g, junk), -EBADMSG);
	expect(h, old, size);
	for (int i = 0; i < 20; i++) {
		fill_rand(junk, ARB_ENCODED_MAX);
		g = e;
		g.len = 1 + (uint32_t)tu_rand_range(&rs, ARB_ENCODED_MAX);
		ck_assert_int_eq(arb_fs_write_encoded(fs, h, &g, junk),
				 -EBADMSG);
	}
	expect(h, old, size);
	/* trailing bytes after a good stream are not stored */
	memcpy(junk, buf, e.len);
	fill_rand(junk + e.len, 3000);
	g = e;
	g.len = e.len + 3000 > ARB_ENCODED_MAX ? ARB_ENCODED_MAX
					       : e.len + 3000;
	ck_assert_int_eq(arb_fs_write_encoded(fs, h, &g, junk), 128 * KiB);
	memcpy(old, data, 128 * KiB);
	expect(h, old, size);
	check_fs();

	/* over a shared range: the other owner keeps its bytes */
	c = mkfile("c");
	ck_assert_int_eq(arb_fs_copy_range(fs, h, 0, c, 0, size, 0),
			 (ssize_t)size);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_fs_read_encoded(fs, a, 128 * KiB, &e, buf,
					     ARB_ENCODED_MAX), 0);
	e.file_off = 64 * KiB;
	ck_assert_int_eq(arb_fs_write_encoded(fs, c, &e, buf), 128 * KiB);
	expect(h, old, size);
	memcpy(old + 64 * KiB, data + 128 * KiB, 128 * KiB);
	expect(c, old, size);
	check_fs();
	/* a read-only handle */
	ck_assert_int_eq(arb_fs_close(fs), 0);
	{
		struct arb_fs_opts o;
		const char *why = NULL;

		arb_fs_opts_default(&o);
		o.readonly = true;
		ck_assert_int_eq(arb_fs_open(tu_dev_borrow(mem), &o, &fs,
					     &why), 0);
	}
	ck_assert_int_eq(arb_fs_write_encoded(fs, c, &e, buf), -EROFS);
	ck_assert_int_eq(arb_fs_read_encoded(fs, c, 64 * KiB, &g, junk,
					     ARB_ENCODED_MAX), 0);
	ck_assert(memcmp(junk, buf, e.len) == 0);
	free(buf);
	free(junk);
	free(data);
	free(old);
	done_fs();
}
END_TEST

/* A damaged stored sector: -EIO, for the stored form as for a read. */
START_TEST(test_corrupt)
{
	uint8_t *data = malloc(128 * KiB), *buf = malloc(ARB_ENCODED_MAX);
	struct arb_encoded e;
	struct fs_ext x;
	uint64_t a;

	new_fs(true);
	fill_text(data, 128 * KiB);
	a = mkfile("a");
	write_all(a, data, 128 * KiB, 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	ck_assert_int_eq(arb_fs_read_encoded(fs, a, 0, &e, buf,
					     ARB_ENCODED_MAX), 0);
	x = ext_at(a, 0);
	ck_assert_uint_eq(x.compression, ARB_COMPRESS_ZLIB);
	arb_dev_mem_data(mem)[x.disk_bytenr + x.disk_num_bytes - 1] ^= 1;
	ck_assert_int_eq(arb_fs_read_encoded(fs, a, 0, &e, buf,
					     ARB_ENCODED_MAX), -EIO);
	ck_assert_int_eq(arb_fs_read(fs, a, buf, 4096, 0), -EIO);
	ck_assert_uint_gt(scrub_errors(), 0);
	free(data);
	free(buf);
	done_fs();
}
END_TEST

/*
 * Random encoded pieces (of real compressed data, whole or in part, at
 * random sector offsets, some ending the file inside a sector) and plain
 * writes into one file, against a byte model.
 */
START_TEST(test_fuzz)
{
	const uint64_t src_size = 1 * MiB, max = 2 * MiB;
	uint8_t *src = malloc(src_size), *model = calloc(1, max + BS);
	uint8_t *wbuf = malloc(256 * KiB);
	uint64_t s, f, size = 0, nenc = 0;
	struct piece *p;
	size_t n;
	int ops = TU_SCALE(200, 2000);

	new_fs(true);
	/* pieces of varied ratio: text, runs of one byte */
	fill_text(src, src_size);
	for (uint64_t o = 0; o < src_size; o += 64 * KiB)
		if (tu_rand_range(&rs, 3) == 0)
			memset(src + o, (int)tu_rand(&rs), 64 * KiB);
	s = mkfile("src");
	write_all(s, src, src_size, 0);
	ck_assert_int_eq(arb_fs_sync(fs), 0);
	p = read_pieces(s, &n);
	ck_assert_uint_eq(n, 8);
	reopen(tu_rand_range(&rs, 2));
	f = mkfile("f");
	for (int op = 0; op < ops; op++) {
		uint64_t r = tu_rand_range(&rs, 10);

		if (r < 6) {
			struct piece *pc = &p[tu_rand_range(&rs, n)];
			struct arb_encoded e = pc->e;
			uint64_t nsec = e.num_bytes / BS;
			uint64_t skip = tu_rand_range(&rs, nsec);

			/* a part of it: whole sectors */
			e.ext_off += skip * BS;
			e.num_bytes = (1 + tu_rand_range(&rs, nsec - skip)) * BS;
			if (r == 0 && size < max - 256 * KiB) {
				/* at or past the end, ending inside a sector */
				e.file_off = (size + BS - 1) / BS * BS +
					     tu_rand_range(&rs, 4) * BS;
				e.num_bytes -= 1 + tu_rand_range(&rs, BS - 1);
			} else {
				e.file_off = tu_rand_range(
					&rs, (max - e.num_bytes) / BS + 1) * BS;
			}
			ck_assert_int_eq(arb_fs_write_encoded(fs, f, &e,
							      pc->data),
					 (ssize_t)e.num_bytes);
			memcpy(model + e.file_off,
			       src + pc->e.file_off - pc->e.ext_off + e.ext_off,
			       e.num_bytes);
			if (e.file_off + e.num_bytes > size)
				size = e.file_off + e.num_bytes;
			nenc++;
		} else {
			uint64_t off = tu_rand_range(&rs, max - 1);
			uint64_t len = 1 + tu_rand_range(&rs, 256 * KiB);

			if (len > max - off)
				len = max - off;
			if (r < 8)
				fill_rand(wbuf, len);
			else
				fill_text(wbuf, len);
			write_all(f, wbuf, len, off);
			memcpy(model + off, wbuf, len);
			if (off + len > size)
				size = off + len;
		}
		if (tu_rand_range(&rs, 20) == 0)
			ck_assert_int_eq(arb_fs_sync(fs), 0);
		if (op % 50 == 49)
			expect(f, model, size);
	}
	expect(f, model, size);
	check_fs();
	reopen(false);
	expect(f, model, size);
	check_fs();
	fprintf(stderr, "fuzz: %d ops, %llu encoded\n", ops,
		(unsigned long long)nenc);
	free_pieces(p, n);
	free(src);
	free(model);
	free(wbuf);
	done_fs();
}
END_TEST

static void add_case(Suite *s, const char *name, const TTest *fn)
{
	TCase *tc = tcase_create(name);

	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, fn);
	suite_add_tcase(s, tc);
}

int main(void)
{
	Suite *s = suite_create("encoded");

	add_case(s, "roundtrip", test_roundtrip);
	add_case(s, "partial", test_partial);
	add_case(s, "nodata", test_nodata);
	add_case(s, "hostile", test_hostile);
	add_case(s, "corrupt", test_corrupt);
	add_case(s, "fuzz", test_fuzz);
	return tu_run_suite(s);
}
