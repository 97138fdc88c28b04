/* SPDX-License-Identifier: MIT */
/* Unit tests of lib/core/dev.c, lib/core/dev_fault.c and lib/core/dev_log.c. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "arbor/dev.h"
#include "testutil.h"

#define KiB 1024ULL
#define MiB (1024 * KiB)

static void fill_random(uint8_t *buf, size_t len, uint64_t *rng)
{
	size_t i;

	for (i = 0; i < len; i++)
		buf[i] = (uint8_t)tu_rand(rng);
}

/* (not ck_assert per byte: each check is a write to Check's pipe) */
static bool all_zero(const uint8_t *buf, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (buf[i])
			return false;
	return true;
}

static struct arb_dev *open_mem(uint64_t size)
{
	struct arb_dev *dev = NULL;

	ck_assert_int_eq(arb_dev_open_mem(size, &dev), 0);
	ck_assert_ptr_nonnull(dev);
	return dev;
}

/* ---- memory device ----------------------------------------------------- */

/* ---- deferred writes ---------------------------------------------------- */

struct tpend {
	struct arb_dev_pend p;
	struct arb_dev *dev;
	uint8_t fill;
	int ret;          /* what run returns (after writing, if 0) */
	int runs;         /* atomic */
	pthread_t by;     /* the thread that ran it */
	bool hold;        /* run waits until released (pend_mu) */
};
static pthread_mutex_t pend_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pend_cv = PTHREAD_COND_INITIALIZER;
static int pend_in_run, pend_release;

static int tpend_run(struct arb_dev_pend *p)
{
	struct tpend *t = (struct tpend *)p;
	uint8_t buf[4096];
	int ret;

	__atomic_add_fetch(&t->runs, 1, __ATOMIC_RELAXED);
	t->by = pthread_self();
	if (t->hold) {
		pthread_mutex_lock(&pend_mu);
		pend_in_run = 1;
		pthread_cond_broadcast(&pend_cv);
		while (!pend_release)
			pthread_cond_wait(&pend_cv, &pend_mu);
		pthread_mutex_unlock(&pend_mu);
	}
	if (t->ret)
		return t->ret;
	memset(buf, t->fill, sizeof(buf));
	for (uint64_t o = 0; o < p->len; o += sizeof(buf)) {
		ret = arb_dev_write(t->dev, buf, sizeof(buf), p->off + o,
				    ARB_IO_DATA);
		if (ret)
			return ret;
	}
	return 0;
}

static void tpend_init(struct tpend *t, struct arb_dev *dev, uint64_t off,
		       uint64_t len, uint8_t fill)
{
	memset(t, 0, sizeof(*t));
	t->p.off = off;
	t->p.len = len;
	t->p.run = tpend_run;
	t->dev = dev;
	t->fill = fill;
}

/* a read of a pending range runs the write first (in the reader's
 * thread, when nobody started it), once; other ranges are left alone */
START_TEST(test_pend_read_runs)
{
	struct arb_dev *dev = open_mem(1024 * 1024);
	struct tpend a, b;
	uint8_t buf[8192];

	tpend_init(&a, dev, 4096, 8192, 0xaa);
	tpend_init(&b, dev, 65536, 4096, 0xbb);
	ck_assert_int_eq(arb_dev_pend_add(dev, &a.p), 0);
	ck_assert_int_eq(arb_dev_pend_add(dev, &b.p), 0);
	ck_assert_int_eq(arb_dev_read(dev, buf, 4096, 0, ARB_IO_DATA), 0);
	ck_assert_int_eq(a.runs + b.runs, 0);
	ck_assert_int_eq(arb_dev_read(dev, buf, 8192, 8192, ARB_IO_DATA), 0);
	ck_assert_int_eq(a.runs, 1);
	ck_assert(pthread_equal(a.by, pthread_self()));
	ck_assert_uint_eq(buf[0], 0xaa);
	ck_assert_uint_eq(buf[4095], 0xaa);
	ck_assert_uint_eq(buf[4096], 0);
	ck_assert_int_eq(b.runs, 0);
	ck_assert_int_eq(arb_dev_drain(dev), 0);
	ck_assert_int_eq(b.runs, 1);
	ck_assert_int_eq(arb_dev_pend_run(dev, &a.p), 0);
	ck_assert_int_eq(arb_dev_pend_run(dev, &b.p), 0);
	ck_assert_int_eq(a.runs, 1);
	ck_assert_int_eq(b.runs, 1);
	ck_assert_int_eq(arb_dev_read(dev, buf, 4096, 65536, ARB_IO_DATA), 0);
	ck_assert_uint_eq(buf[0], 0xbb);
	arb_dev_destroy(dev);
}
END_TEST

/* a failed deferred write: its owner gets the error, and every drain
 * after it, so that no commit passes over it */
START_TEST(test_pend_error_sticky)
{
	struct arb_dev *dev = open_mem(1024 * 1024);
	struct tpend a, b;

	tpend_init(&a, dev, 0, 4096, 1);
	a.ret = -EIO;
	ck_assert_int_eq(arb_dev_pend_add(dev, &a.p), 0);
	ck_assert_int_eq(arb_dev_pend_run(dev, &a.p), -EIO);
	ck_assert_int_eq(arb_dev_drain(dev), -EIO);
	tpend_init(&b, dev, 8192, 4096, 2);
	ck_assert_int_eq(arb_dev_pend_add(dev, &b.p), 0);
	ck_assert_int_eq(arb_dev_pend_run(dev, &b.p), 0);
	ck_assert_int_eq(arb_dev_drain(dev), -EIO);
	arb_dev_destroy(dev);
}
END_TEST

struct pend_reader {
	struct arb_dev *dev;
	uint8_t buf[4096];
	int ret, done; /* done under pend_mu */
};

static void *pend_reader_fn(void *arg)
{
	struct pend_reader *r = arg;

	r->ret = arb_dev_read(r->dev, r->buf, sizeof(r->buf), 4096,
			      ARB_IO_DATA);
	pthread_mutex_lock(&pend_mu);
	r->done = 1;
	pthread_cond_broadcast(&pend_cv);
	pthread_mutex_unlock(&pend_mu);
	return NULL;
}

static void *pend_owner_fn(void *arg)
{
	struct tpend *t = arg;

	t->ret = arb_dev_pend_run(t->dev, &t->p);
	return NULL;
}

/* a read of a range whose write is running waits for it, and does not
 * run it a second time */
START_TEST(test_pend_read_waits)
{
	struct arb_dev *dev = open_mem(1024 * 1024);
	struct pend_reader r = { .dev = dev };
	pthread_t to, tr;
	struct tpend a;
	bool early;

	pend_in_run = pend_release = 0;
	tpend_init(&a, dev, 0, 16384, 0xcc);
	a.hold = true;
	ck_assert_int_eq(arb_dev_pend_add(dev, &a.p), 0);
	ck_assert_int_eq(pthread_create(&to, NULL, pend_owner_fn, &a), 0);
	pthread_mutex_lock(&pend_mu);
	while (!pend_in_run)
		pthread_cond_wait(&pend_cv, &pend_mu);
	pthread_mutex_unlock(&pend_mu);
	ck_assert_int_eq(pthread_create(&tr, NULL, pend_reader_fn, &r), 0);
	usleep(100 * 1000);
	pthread_mutex_lock(&pend_mu);
	early = r.done;
	pend_release = 1;
	pthread_cond_broadcast(&pend_cv);
	pthread_mutex_unlock(&pend_mu);
	pthread_join(tr, NULL);
	pthread_join(to, NULL);
	ck_assert_msg(!early, "the read did not wait for the write");
	ck_assert_int_eq(r.ret, 0);
	ck_assert_uint_eq(r.buf[0], 0xcc);
	ck_assert_uint_eq(r.buf[4095], 0xcc);
	ck_assert_int_eq(a.runs, 1);
	ck_assert_int_eq(a.ret, 0);
	ck_assert_int_eq(arb_dev_drain(dev), 0);
	arb_dev_destroy(dev);
}
END_TEST

START_TEST(test_mem_rw)
{
	struct arb_dev *dev = open_mem(1 * MiB);
	uint8_t *data = arb_dev_mem_data(dev);
	uint8_t buf[8192], out[8192];
	uint64_t rng = tu_seed("mem_rw");

	ck_assert_ptr_nonnull(data);
	ck_assert_uint_eq(dev->size, 1 * MiB);
	ck_assert(all_zero(data, 1 * MiB));

	fill_random(buf, sizeof(buf), &rng);
	ck_assert_int_eq(arb_dev_write(dev, buf, 4096, 0, ARB_IO_SUPER), 0);
	ck_assert_int_eq(arb_dev_write(dev, buf, 8192, 1 * MiB - 8192,
				       ARB_IO_NODE), 0);
	ck_assert_int_eq(arb_dev_write(dev, buf + 1, 777, 12345, ARB_IO_DATA),
			 0);
	ck_assert_int_eq(arb_dev_flush(dev), 0);
	ck_assert_mem_eq(data, buf, 4096);
	ck_assert_mem_eq(data + 12345, buf + 1, 777);

	ck_assert_int_eq(arb_dev_read(dev, out, 8192, 1 * MiB - 8192,
				      ARB_IO_NODE), 0);
	ck_assert_mem_eq(out, buf, 8192);
	ck_assert_int_eq(arb_dev_read(dev, out, 777, 12345, ARB_IO_OTHER), 0);
	ck_assert_mem_eq(out, buf + 1, 777);

	ck_assert_uint_eq(dev->nr_writes, 3);
	ck_assert_uint_eq(dev->nr_reads, 2);
	ck_assert_uint_eq(dev->nr_flushes, 1);
	ck_assert_uint_eq(dev->bytes_written[ARB_IO_SUPER], 4096);
	ck_assert_uint_eq(dev->bytes_written[ARB_IO_NODE], 8192);
	ck_assert_uint_eq(dev->bytes_written[ARB_IO_DATA], 777);
	ck_assert_uint_eq(dev->bytes_written[ARB_IO_OTHER], 0);
	ck_assert_uint_eq(dev->bytes_read[ARB_IO_NODE], 8192);
	ck_assert_uint_eq(dev->bytes_read[ARB_IO_OTHER], 777);
	ck_assert_uint_eq(dev->bytes_read[ARB_IO_SUPER], 0);
	arb_dev_destroy(dev);
}
END_TEST

START_TEST(test_mem_bounds)
{
	struct arb_dev *dev = open_mem(64 * KiB);
	uint8_t buf[4096] = { 0 };

	ck_assert_int_eq(arb_dev_read(dev, buf, 2, 64 * KiB - 1, ARB_IO_DATA),
			 -EINVAL);
	ck_assert_int_eq(arb_dev_read(dev, buf, 1, 64 * KiB, ARB_IO_DATA),
			 -EINVAL);
	ck_assert_int_eq(arb_dev_read(dev, buf, 4096, UINT64_MAX - 100,
				      ARB_IO_DATA), -EINVAL);
	ck_assert_int_eq(arb_dev_write(dev, buf, 2, 64 * KiB - 1, ARB_IO_DATA),
			 -ENOSPC);
	ck_assert_int_eq(arb_dev_write(dev, buf, 4096, UINT64_MAX - 100,
				       ARB_IO_DATA), -ENOSPC);
	ck_assert_int_eq(arb_dev_write(dev, buf, 16, 0, (enum arb_io_kind)4),
			 -EINVAL);
	ck_assert_int_eq(arb_dev_read(dev, NULL, 16, 0, ARB_IO_DATA), -EINVAL);
	/* empty requests at the end are fine and do nothing */
	ck_assert_int_eq(arb_dev_read(dev, buf, 0, 64 * KiB, ARB_IO_DATA), 0);
	ck_assert_int_eq(arb_dev_write(dev, buf, 0, 64 * KiB, ARB_IO_DATA), 0);
	/* the last byte is in bounds */
	ck_assert_int_eq(arb_dev_write(dev, buf, 1, 64 * KiB - 1, ARB_IO_DATA),
			 0);
	ck_assert_uint_eq(dev->nr_reads, 0);
	ck_assert_uint_eq(dev->nr_writes, 1);
	ck_assert_uint_eq(dev->bytes_written[ARB_IO_DATA], 1);
	arb_dev_destroy(dev);
}
END_TEST

START_TEST(test_mem_resize)
{
	struct arb_dev *dev = open_mem(8 * KiB);
	uint8_t buf[4096], out[4096];
	uint64_t rng = tu_seed("mem_resize");
	uint8_t *data;

	fill_random(buf, sizeof(buf), &rng);
	ck_assert_int_eq(arb_dev_write(dev, buf, 4096, 4096, ARB_IO_DATA), 0);
	ck_assert_ptr_nonnull(dev->ops->resize);
	ck_assert_int_eq(dev->ops->resize(dev, 1 * MiB), 0);
	ck_assert_uint_eq(dev->size, 1 * MiB);
	data = arb_dev_mem_data(dev);
	ck_assert_mem_eq(data + 4096, buf, 4096);
	ck_assert(all_zero(data + 8 * KiB, 1 * MiB - 8 * KiB));
	ck_assert_int_eq(arb_dev_write(dev, buf, 4096, 1 * MiB - 4096,
				       ARB_IO_DATA), 0);

	ck_assert_int_eq(dev->ops->resize(dev, 6 * KiB), 0);
	ck_assert_int_eq(arb_dev_read(dev, out, 2048, 4096, ARB_IO_DATA), 0);
	ck_assert_mem_eq(out, buf, 2048);
	ck_assert_int_eq(arb_dev_read(dev, out, 4096, 4096, ARB_IO_DATA),
			 -EINVAL);
	/* growing again zero-fills what shrinking cut off */
	ck_assert_int_eq(dev->ops->resize(dev, 8 * KiB), 0);
	data = arb_dev_mem_data(dev);
	ck_assert(all_zero(data + 6 * KiB, 2 * KiB));
	arb_dev_destroy(dev);
}
END_TEST

START_TEST(test_mem_data_other)
{
	struct arb_dev *dev = open_mem(4096), *f;

	ck_assert_int_eq(arb_dev_fault_wrap(dev, &f), 0);
	ck_assert_ptr_null(arb_dev_mem_data(f));
	ck_assert_ptr_null(arb_dev_mem_data(NULL));
	arb_dev_destroy(f);
	arb_dev_destroy(NULL);
}
END_TEST

/* ---- image file -------------------------------------------------------- */

/* one directory per TCase run, emptied and removed by the teardown */
static char tmpdir[256];

static void file_setup(void)
{
	const char *t = getenv("TMPDIR");

	snprintf(tmpdir, sizeof(tmpdir), "%s/arbor-test-dev-XXXXXX",
		 t && *t ? t : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void file_teardown(void)
{
	char path[512];
	struct dirent *de;
	DIR *d = opendir(tmpdir);

	if (!d)
		return;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", tmpdir, de->d_name);
		unlink(path);
	}
	closedir(d);
	rmdir(tmpdir);
}

static const char *tmpfile_path(const char *name)
{
	static char path[512];

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	return path;
}

/*
 * arb_dev_read_cached and arb_dev_prefetch (the cleaner reads what it
 * would wait for without its lock): bytes dropped from the host's cache
 * are not read, a prefetch brings them back (counted as ARB_IO_OTHER),
 * a cached read returns the bytes (counted as its kind), and a device
 * without a host cache (memory) cannot tell.
 */
START_TEST(test_file_resident)
{
	const char *path = tmpfile_path("resident.img");
	struct arb_dev *dev, *m;
	uint8_t buf[16384], got[16384];
	uint64_t off = 1 * MiB, other, node;
	int fd, r0, r1;

	memset(buf, 0x5a, sizeof(buf));
	ck_assert_int_eq(arb_dev_open_file(path, false, 8 * MiB, &dev), 0);
	ck_assert_int_eq(arb_dev_write(dev, buf, sizeof(buf), off,
				       ARB_IO_NODE),
			 0);
	ck_assert_int_eq(arb_dev_flush(dev), 0);
	memset(got, 0, sizeof(got));
	node = dev->bytes_read[ARB_IO_NODE];
	r0 = arb_dev_read_cached(dev, got, sizeof(got), off, ARB_IO_NODE);
	ck_assert(r0 == 1 || r0 == -EOPNOTSUPP);
	if (r0 == 1) {
		ck_assert(memcmp(got, buf, sizeof(buf)) == 0);
		ck_assert_uint_eq(dev->bytes_read[ARB_IO_NODE],
				  node + sizeof(buf));
	}
	/* out of bounds, or nothing: cannot tell */
	ck_assert_int_eq(arb_dev_read_cached(dev, got, 4096, 8 * MiB,
					     ARB_IO_NODE), -EOPNOTSUPP);
	ck_assert_int_eq(arb_dev_read_cached(dev, got, 0, off, ARB_IO_NODE),
			 -EOPNOTSUPP);
	fd = open(path, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	close(fd);
	node = dev->bytes_read[ARB_IO_NODE];
	r0 = arb_dev_read_cached(dev, got, sizeof(got), off, ARB_IO_NODE);
	if (r0 == 0) /* nothing read is nothing counted */
		ck_assert_uint_eq(dev->bytes_read[ARB_IO_NODE], node);
	other = dev->bytes_read[ARB_IO_OTHER];
	arb_dev_prefetch(dev, off, sizeof(buf));
	memset(got, 0, sizeof(got));
	r1 = arb_dev_read_cached(dev, got, sizeof(got), off, ARB_IO_NODE);
	if (r0 == -EOPNOTSUPP) {
		/* a host without RWF_NOWAIT: says so from then on */
		ck_assert_int_eq(r1, -EOPNOTSUPP);
	} else {
		/* 1 before only where the host keeps everything (tmpfs) */
		ck_assert(r0 == 0 || r0 == 1);
		ck_assert_int_eq(r1, 1);
		ck_assert(memcmp(got, buf, sizeof(buf)) == 0);
		ck_assert_uint_eq(dev->bytes_read[ARB_IO_OTHER],
				  other + sizeof(buf));
		fprintf(stderr, "resident: %d after dropping, %d after "
				"the prefetch\n", r0, r1);
	}
	/* the bytes themselves are untouched */
	memset(buf, 0, sizeof(buf));
	ck_assert_int_eq(arb_dev_read(dev, buf, sizeof(buf), off, ARB_IO_NODE),
			 0);
	for (size_t i = 0; i < sizeof(buf); i++)
		ck_assert_uint_eq(buf[i], 0x5a);
	arb_dev_destroy(dev);

	ck_assert_int_eq(arb_dev_open_mem(1 * MiB, &m), 0);
	ck_assert_int_eq(arb_dev_read_cached(m, got, 4096, 0, ARB_IO_NODE),
			 -EOPNOTSUPP);
	other = m->bytes_read[ARB_IO_OTHER];
	arb_dev_prefetch(m, 0, 4096); /* nothing to fill: nothing read */
	ck_assert_uint_eq(m->bytes_read[ARB_IO_OTHER], other);
	arb_dev_destroy(m);
}
END_TEST

START_TEST(test_file_create_sparse)
{
	const char *path = tmpfile_path("sparse.img");
	struct arb_dev *dev;
	uint8_t buf[4096], out[4096], zero[4096] = { 0 };
	uint64_t rng = tu_seed("file_create_sparse");
	struct stat st;

	fill_random(buf, sizeof(buf), &rng);
	ck_assert_int_eq(arb_dev_open_file(path, false, 64 * MiB, &dev), 0);
	ck_assert_uint_eq(dev->size, 64 * MiB);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_int_eq(st.st_size, 64 * MiB);
	/* sparse: (almost) nothing allocated */
	ck_assert_int_lt(st.st_blocks * 512, 1 * MiB);

	ck_assert_int_eq(arb_dev_write(dev, buf, 4096, 0, ARB_IO_SUPER), 0);
	ck_assert_int_eq(arb_dev_write(dev, buf, 4096, 64 * MiB - 4096,
				       ARB_IO_DATA), 0);
	ck_assert_int_eq(arb_dev_write(dev, buf, 1, 64 * MiB, ARB_IO_DATA),
			 -ENOSPC);
	ck_assert_int_eq(arb_dev_flush(dev), 0);
	ck_assert_uint_eq(dev->nr_flushes, 1);
	arb_dev_destroy(dev);

	ck_assert_int_eq(arb_dev_open_file(path, true, 0, &dev), 0);
	ck_assert_uint_eq(dev->size, 64 * MiB);
	ck_assert_int_eq(arb_dev_read(dev, out, 4096, 0, ARB_IO_SUPER), 0);
	ck_assert_mem_eq(out, buf, 4096);
	ck_assert_int_eq(arb_dev_read(dev, out, 4096, 64 * MiB - 4096,
				      ARB_IO_DATA), 0);
	ck_assert_mem_eq(out, buf, 4096);
	ck_assert_int_eq(arb_dev_read(dev, out, 4096, 32 * MiB, ARB_IO_DATA),
			 0);
	ck_assert_mem_eq(out, zero, 4096);
	ck_assert_int_eq(arb_dev_read(dev, out, 1, 64 * MiB, ARB_IO_DATA),
			 -EINVAL);
	arb_dev_destroy(dev);
}
END_TEST

/* Is [a, b) of the file at fd free of holes? */
static bool no_hole(int fd, uint64_t a, uint64_t b)
{
	off_t h = lseek(fd, (off_t)a, SEEK_HOLE);

	return h >= 0 && (uint64_t)h >= b;
}

/* Is [a, b) of the file at fd one hole? */
static bool all_hole(int fd, uint64_t a, uint64_t b)
{
	off_t d = lseek(fd, (off_t)a, SEEK_DATA);

	return lseek(fd, (off_t)a, SEEK_HOLE) == (off_t)a &&
	       (d < 0 || (uint64_t)d >= b);
}

/*
 * A small write to a part of a sparse image not yet written since it was
 * opened gets the rest of its 1 MiB chunk filled with zeros (so the host
 * allocates it in one go, see lib/core/dev.c); data already there is kept, big
 * writes fill nothing, a chunk is filled once, a read-only image never.
 */
START_TEST(test_file_host_alloc)
{
	const char *path = tmpfile_path("hostalloc.img");
	uint8_t *buf = malloc(2 * MiB), *out = malloc(2 * MiB), old[8192];
	uint64_t rng = tu_seed("file_host_alloc");
	struct arb_dev *dev;
	uint64_t other;
	int fd;

	ck_assert_ptr_nonnull(buf);
	ck_assert_ptr_nonnull(out);
	fill_random(buf, 2 * MiB, &rng);
	fill_random(old, sizeof(old), &rng);
	/* data written before the open, in chunk 3 */
	fd = open(path, O_RDWR | O_CREAT, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, 16 * MiB), 0);
	ck_assert_int_eq(pwrite(fd, old, sizeof(old), 3 * MiB + 512 * KiB),
			 (ssize_t)sizeof(old));
	ck_assert_int_eq(fsync(fd), 0);
	if (!all_hole(fd, 1 * MiB, 2 * MiB)) {
		close(fd);
		free(buf);
		free(out);
		return; /* no SEEK_HOLE on this filesystem: nothing to fill */
	}

	ck_assert_int_eq(arb_dev_open_file(path, false, 0, &dev), 0);
	/* a 4 KiB write into chunk 1: the whole chunk is allocated */
	ck_assert_int_eq(arb_dev_write(dev, buf, 4096, 1 * MiB + 8192,
				       ARB_IO_NODE), 0);
	ck_assert(no_hole(fd, 1 * MiB, 2 * MiB));
	ck_assert(all_hole(fd, 2 * MiB, 3 * MiB));
	other = dev->bytes_written[ARB_IO_OTHER];
	ck_assert_uint_eq(other, 1 * MiB - 4096);
	ck_assert_int_eq(arb_dev_read(dev, out, 1 * MiB, 1 * MiB, ARB_IO_DATA),
			 0);
	ck_assert(all_zero(out, 8192));
	ck_assert_mem_eq(out + 8192, buf, 4096);
	ck_assert(all_zero(out + 8192 + 4096, 1 * MiB - 8192 - 4096));
	/* again in the same chunk: marked, nothing more written */
	ck_assert_int_eq(arb_dev_write(dev, buf, 4096, 2 * MiB - 4096,
				       ARB_IO_NODE), 0);
	ck_assert_uint_eq(dev->bytes_written[ARB_IO_OTHER], other);

	/* chunk 3 keeps what was there before */
	ck_assert_int_eq(arb_dev_write(dev, buf, 4096, 3 * MiB, ARB_IO_DATA),
			 0);
	ck_assert(no_hole(fd, 3 * MiB, 4 * MiB));
	ck_assert_uint_eq(dev->bytes_written[ARB_IO_OTHER],
			  other + 1 * MiB - 4096 - sizeof(old));
	ck_assert_int_eq(arb_dev_read(dev, out, 1 * MiB, 3 * MiB, ARB_IO_DATA),
			 0);
	ck_assert_mem_eq(out, buf, 4096);
	ck_assert_mem_eq(out + 512 * KiB, old, sizeof(old));
	ck_assert(all_zero(out + 4096, 512 * KiB - 4096));
	ck_assert(all_zero(out + 512 * KiB + sizeof(old),
			   512 * KiB - sizeof(old)));
	other = dev->bytes_written[ARB_IO_OTHER];

	/* a 2 MiB write over [8.5, 10.5) MiB fills nothing, not even the
	 * edges of the chunks it covers in part, nor later small writes */
	ck_assert_int_eq(arb_dev_write(dev, buf, 2 * MiB, 8 * MiB + 512 * KiB,
				       ARB_IO_DATA), 0);
	ck_assert(all_hole(fd, 8 * MiB, 8 * MiB + 512 * KiB));
	ck_assert(all_hole(fd, 10 * MiB + 512 * KiB, 11 * MiB));
	ck_assert_int_eq(arb_dev_write(dev, buf, 4096, 8 * MiB, ARB_IO_DATA),
			 0);
	ck_assert_uint_eq(dev->bytes_written[ARB_IO_OTHER], other);
	ck_assert_int_eq(arb_dev_read(dev, out, 2 * MiB, 8 * MiB + 512 * KiB,
				      ARB_IO_DATA), 0);
	ck_assert_mem_eq(out, buf, 2 * MiB);
	arb_dev_destroy(dev);

	/* read-only: nothing is written at all */
	ck_assert_int_eq(arb_dev_open_file(path, true, 0, &dev), 0);
	ck_assert_int_eq(arb_dev_read(dev, out, 4096, 5 * MiB, ARB_IO_DATA), 0);
	ck_assert(all_zero(out, 4096));
	ck_assert_uint_eq(dev->bytes_written[ARB_IO_OTHER], 0);
	arb_dev_destroy(dev);
	ck_assert(all_hole(fd, 5 * MiB, 6 * MiB));
	close(fd);
	free(buf);
	free(out);
}
END_TEST

START_TEST(test_file_extend)
{
	const char *path = tmpfile_path("extend.img");
	struct arb_dev *dev;
	uint8_t buf[4096], out[4096];
	uint64_t rng = tu_seed("file_extend");

	fill_random(buf, sizeof(buf), &rng);
	ck_assert_int_eq(arb_dev_open_file(path, false, 1 * MiB, &dev), 0);
	ck_assert_int_eq(arb_dev_write(dev, buf, 4096, 1 * MiB - 4096,
				       ARB_IO_DATA), 0);
	arb_dev_destroy(dev);

	/* a bigger create_size extends, keeping the contents */
	ck_assert_int_eq(arb_dev_open_file(path, false, 2 * MiB, &dev), 0);
	ck_assert_uint_eq(dev->size, 2 * MiB);
	ck_assert_int_eq(arb_dev_read(dev, out, 4096, 1 * MiB - 4096,
				      ARB_IO_DATA), 0);
	ck_assert_mem_eq(out, buf, 4096);
	arb_dev_destroy(dev);

	/* a smaller one never shrinks, and 0 opens what is there */
	ck_assert_int_eq(arb_dev_open_file(path, false, 512 * KiB, &dev), 0);
	ck_assert_uint_eq(dev->size, 2 * MiB);
	arb_dev_destroy(dev);
	ck_assert_int_eq(arb_dev_open_file(path, false, 0, &dev), 0);
	ck_assert_uint_eq(dev->size, 2 * MiB);

	/* resize */
	ck_assert_ptr_nonnull(dev->ops->resize);
	ck_assert_int_eq(dev->ops->resize(dev, 3 * MiB), 0);
	ck_assert_uint_eq(dev->size, 3 * MiB);
	ck_assert_int_eq(arb_dev_write(dev, buf, 4096, 3 * MiB - 4096,
				       ARB_IO_DATA), 0);
	ck_assert_int_eq(dev->ops->resize(dev, 1 * MiB), 0);
	ck_assert_int_eq(arb_dev_read(dev, out, 4096, 1 * MiB - 4096,
				      ARB_IO_DATA), 0);
	ck_assert_mem_eq(out, buf, 4096);
	arb_dev_destroy(dev);
	ck_assert_int_eq(arb_dev_open_file(path, true, 0, &dev), 0);
	ck_assert_uint_eq(dev->size, 1 * MiB);
	arb_dev_destroy(dev);
}
END_TEST

START_TEST(test_file_lock)
{
	const char *path = tmpfile_path("lock.img");
	struct arb_dev *a, *b, *c;

	ck_assert_int_eq(arb_dev_open_file(path, false, 1 * MiB, &a), 0);
	/* one writer excludes everybody */
	ck_assert_int_eq(arb_dev_open_file(path, false, 0, &b), -EBUSY);
	ck_assert_int_eq(arb_dev_open_file(path, false, 1 * MiB, &b), -EBUSY);
	ck_assert_int_eq(arb_dev_open_file(path, true, 0, &b), -EBUSY);
	arb_dev_destroy(a);

	/* readers share, and exclude a writer */
	ck_assert_int_eq(arb_dev_open_file(path, true, 0, &b), 0);
	ck_assert_int_eq(arb_dev_open_file(path, true, 0, &c), 0);
	ck_assert_int_eq(arb_dev_open_file(path, false, 0, &a), -EBUSY);
	arb_dev_destroy(b);
	ck_assert_int_eq(arb_dev_open_file(path, false, 0, &a), -EBUSY);
	arb_dev_destroy(c);
	ck_assert_int_eq(arb_dev_open_file(path, false, 0, &a), 0);
	arb_dev_destroy(a);
}
END_TEST

START_TEST(test_file_readonly)
{
	const char *path = tmpfile_path("ro.img");
	struct arb_dev *dev;
	uint8_t buf[512] = { 1 };

	ck_assert_int_eq(arb_dev_open_file(path, true, 0, &dev), -ENOENT);
	ck_assert_int_eq(arb_dev_open_file(path, false, 0, &dev), -ENOENT);
	ck_assert_int_eq(arb_dev_open_file(path, true, 1 * MiB, &dev),
			 -EINVAL);
	ck_assert_int_eq(arb_dev_open_file(path, false, 1 * MiB, &dev), 0);
	arb_dev_destroy(dev);

	ck_assert_int_eq(arb_dev_open_file(path, true, 0, &dev), 0);
	ck_assert_int_eq(arb_dev_write(dev, buf, sizeof(buf), 0, ARB_IO_DATA),
			 -EROFS);
	ck_assert_uint_eq(dev->nr_writes, 0);
	ck_assert_int_eq(dev->ops->resize(dev, 2 * MiB), -EROFS);
	ck_assert_int_eq(arb_dev_read(dev, buf, sizeof(buf), 0, ARB_IO_DATA),
			 0);
	ck_assert_uint_eq(buf[0], 0);
	ck_assert_int_eq(arb_dev_flush(dev), 0);
	arb_dev_destroy(dev);

	ck_assert_int_eq(arb_dev_open_file(tmpdir, true, 0, &dev), -EISDIR);
}
END_TEST

/* flush-behind: only bulk data counts, past the limit one flush, the
 * count starts again at every flush; through a trace wrapper it is
 * passed on and traced when it flushed; devices without it do nothing */
START_TEST(test_file_flush_behind)
{
	const char *path = tmpfile_path("behind.img");
	uint8_t *buf = calloc(1, 1 * MiB);
	struct arb_dev *dev, *t, *mem;
	char *text = NULL;
	size_t tlen = 0;
	FILE *out;

	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(arb_dev_open_file(path, false, 16 * MiB, &dev), 0);
	/* small data writes and node writes do not count */
	for (int i = 0; i < 8; i++) {
		ck_assert_int_eq(arb_dev_write(dev, buf, 128 * KiB,
					       (uint64_t)i * 128 * KiB,
					       ARB_IO_DATA), 0);
		ck_assert_int_eq(arb_dev_write(dev, buf, 1 * MiB, 2 * MiB,
					       ARB_IO_NODE), 0);
	}
	ck_assert_int_eq(arb_dev_flush_behind(dev, 0), 0);
	/* 3 MiB of bulk data: over a 2 MiB limit, not over 3 MiB */
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(arb_dev_write(dev, buf, 1 * MiB,
					       (uint64_t)(4 + i) * MiB,
					       ARB_IO_DATA), 0);
	ck_assert_int_eq(arb_dev_flush_behind(dev, 3 * MiB), 0);
	ck_assert_int_eq(arb_dev_flush_behind(dev, 2 * MiB), 1);
	ck_assert_uint_eq(dev->nr_flushes_behind, 1);
	ck_assert_uint_eq(dev->nr_flushes, 0);
	/* counted from the flush on */
	ck_assert_int_eq(arb_dev_flush_behind(dev, 0), 0);
	ck_assert_int_eq(arb_dev_write(dev, buf, 1 * MiB, 8 * MiB,
				       ARB_IO_DATA), 0);
	ck_assert_int_eq(arb_dev_flush(dev), 0);
	ck_assert_int_eq(arb_dev_flush_behind(dev, 0), 0);

	/* through a trace: passed on, one 'F ... data' line when it flushed */
	out = open_memstream(&text, &tlen);
	ck_assert_ptr_nonnull(out);
	ck_assert_int_eq(arb_dev_trace_wrap(dev, out, &t), 0);
	ck_assert_int_eq(arb_dev_flush_behind(t, 0), 0);
	ck_assert_int_eq(arb_dev_write(t, buf, 1 * MiB, 9 * MiB, ARB_IO_DATA),
			 0);
	ck_assert_int_eq(arb_dev_flush_behind(t, 0), 1);
	ck_assert_uint_eq(t->nr_flushes_behind, 1);
	ck_assert_uint_eq(dev->nr_flushes_behind, 2);
	arb_dev_destroy(t);
	ck_assert_int_eq(fclose(out), 0);
	ck_assert_ptr_nonnull(strstr(text, " W 9437184 1048576 data\n"));
	ck_assert_ptr_nonnull(strstr(text, " F 0 0 data\n"));
	free(text);

	/* read-only: nothing; a memory device has no such op */
	ck_assert_int_eq(arb_dev_open_file(path, true, 0, &dev), 0);
	ck_assert_int_eq(arb_dev_flush_behind(dev, 0), 0);
	arb_dev_destroy(dev);
	mem = open_mem(4 * MiB);
	ck_assert_int_eq(arb_dev_write(mem, buf, 1 * MiB, 0, ARB_IO_DATA), 0);
	ck_assert_int_eq(arb_dev_flush_behind(mem, 0), 0);
	arb_dev_destroy(mem);
	free(buf);
}
END_TEST

/* does the host take O_DIRECT reads of files in dir (STATX_DIOALIGN)? */
static bool host_dio(const char *path)
{
	struct statx stx;

	return statx(AT_FDCWD, path, 0, STATX_DIOALIGN, &stx) == 0 &&
	       (stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_mem_align &&
	       stx.stx_dio_mem_align <= 4096 && stx.stx_dio_offset_align &&
	       stx.stx_dio_offset_align <= 4096;
}

/* read 2 MiB at 4 MiB back into r, compare with w; a direct read when
 * the host takes them (dio), counted in *direct */
static void read_back(struct arb_dev *dev, uint8_t *r, const uint8_t *w,
		      bool dio, uint64_t *direct)
{
	ck_assert_int_eq(arb_dev_read(dev, r, 2 * MiB, 4 * MiB, ARB_IO_DATA),
			 0);
	ck_assert_mem_eq(r, w, 2 * MiB);
	if (dio)
		*direct += 2 * MiB;
	ck_assert_uint_eq(dev->bytes_read_direct, *direct);
}

/* Large data reads go past the host's cache and still see every write
 * made through the buffered descriptor, flushed or not. */
START_TEST(test_file_direct_read)
{
	const char *path = tmpfile_path("direct.img");
	uint8_t *w = malloc(2 * MiB), *r;
	struct arb_dev *dev, *t;
	uint64_t direct = 0;
	bool dio;
	FILE *out;
	char *text = NULL;
	size_t tlen = 0;

	ck_assert_ptr_nonnull(w);
	ck_assert_int_eq(posix_memalign((void **)&r, 4096, 2 * MiB + 4096), 0);
	for (size_t i = 0; i < 2 * MiB; i++)
		w[i] = (uint8_t)(i * 7 + i / 4096);
	ck_assert_int_eq(arb_dev_open_file(path, false, 16 * MiB, &dev), 0);
	dio = host_dio(path);
	/* written, not flushed: the direct read must see the cached pages */
	ck_assert_int_eq(arb_dev_write(dev, w, 2 * MiB, 4 * MiB, ARB_IO_DATA),
			 0);
	read_back(dev, r, w, dio, &direct);
	/* overwritten in the middle through the cache, read again */
	memset(w + 1 * MiB, 0xa5, 64 * KiB);
	ck_assert_int_eq(arb_dev_write(dev, w + 1 * MiB, 64 * KiB, 5 * MiB,
				       ARB_IO_DATA), 0);
	read_back(dev, r, w, dio, &direct);
	/* through the cache: a small read, a node read, an unaligned buffer,
	 * an unaligned offset; the bytes are the same */
	ck_assert_int_eq(arb_dev_read(dev, r, 64 * KiB, 4 * MiB, ARB_IO_DATA),
			 0);
	ck_assert_mem_eq(r, w, 64 * KiB);
	ck_assert_int_eq(arb_dev_read(dev, r, 1 * MiB, 4 * MiB, ARB_IO_NODE),
			 0);
	ck_assert_mem_eq(r, w, 1 * MiB);
	ck_assert_int_eq(arb_dev_read(dev, r + 1, 1 * MiB, 4 * MiB,
				      ARB_IO_DATA), 0);
	ck_assert_mem_eq(r + 1, w, 1 * MiB);
	ck_assert_int_eq(arb_dev_read(dev, r, 1 * MiB, 4 * MiB + 1,
				      ARB_IO_DATA), 0);
	ck_assert_mem_eq(r, w + 1, 1 * MiB);
	ck_assert_uint_eq(dev->bytes_read_direct, direct);

	/* a wrapper passes it up: both count */
	out = open_memstream(&text, &tlen);
	ck_assert_ptr_nonnull(out);
	ck_assert_int_eq(arb_dev_trace_wrap(dev, out, &t), 0);
	ck_assert_int_eq(arb_dev_read(t, r, 1 * MiB, 4 * MiB, ARB_IO_DATA), 0);
	ck_assert_mem_eq(r, w, 1 * MiB);
	if (dio)
		direct += 1 * MiB;
	ck_assert_uint_eq(t->bytes_read_direct, dio ? 1 * MiB : 0);
	ck_assert_uint_eq(dev->bytes_read_direct, direct);
	ck_assert_uint_eq(t->bytes_read[ARB_IO_DATA], 1 * MiB);
	arb_dev_destroy(t);
	ck_assert_int_eq(fclose(out), 0);
	free(text);

	/* switched off from the environment */
	setenv("ARBOR_HOST_CACHE", "1", 1);
	ck_assert_int_eq(arb_dev_open_file(path, true, 0, &dev), 0);
	unsetenv("ARBOR_HOST_CACHE");
	ck_assert_int_eq(arb_dev_read(dev, r, 2 * MiB, 4 * MiB, ARB_IO_DATA),
			 0);
	ck_assert_mem_eq(r, w, 2 * MiB);
	ck_assert_uint_eq(dev->bytes_read_direct, 0);
	arb_dev_destroy(dev);
	free(w);
	free(r);
}
END_TEST

/* pages of path's [off, off+len) in the host's page cache (mincore) */
static size_t resident_pages(const char *path, uint64_t off, size_t len)
{
	long ps = sysconf(_SC_PAGESIZE);
	size_t n = 0, np = len / (size_t)ps;
	unsigned char *vec = malloc(np);
	int fd = open(path, O_RDONLY);
	void *p;

	ck_assert_ptr_nonnull(vec);
	ck_assert_int_ge(fd, 0);
	p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)off);
	ck_assert_ptr_ne(p, MAP_FAILED);
	ck_assert_int_eq(mincore(p, len, vec), 0);
	for (size_t i = 0; i < np; i++)
		n += vec[i] & 1;
	munmap(p, len);
	close(fd);
	free(vec);
	return n;
}

/*
 * Tree nodes and the cleaner's fetches without the host's read-ahead
 * (lib/core/dev.c, file_prefetch): a node read, a prefetch and a read
 * that may not wait bring into the host's cache what they read and
 * nothing after it (through a descriptor with the host's read-ahead, a
 * 16 KiB read of a cold file brought in 64 KiB or more); a prefetch past
 * the device's end is cut at the end.  Small data reads keep the
 * read-ahead (on a host without any, nothing to compare: skipped).
 */
START_TEST(test_node_no_readahead)
{
	const char *path = tmpfile_path("noreadahead.img");
	uint64_t size = 8 * MiB, other;
	static uint8_t buf[1 * MiB];
	struct arb_dev *dev;
	int fd;

	memset(buf, 0x3c, sizeof(buf));
	ck_assert_int_eq(arb_dev_open_file(path, false, size, &dev), 0);
	for (uint64_t o = 0; o < size; o += sizeof(buf))
		ck_assert_int_eq(arb_dev_write(dev, buf, sizeof(buf), o,
					       ARB_IO_DATA),
				 0);
	ck_assert_int_eq(arb_dev_flush(dev), 0);
	fd = open(path, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	if (resident_pages(path, 0, 4 * MiB) != 0) {
		/* a host that keeps everything (tmpfs): nothing to see */
		fprintf(stderr, "no_readahead: the host keeps the file cached, "
				"skipped\n");
		goto out;
	}
	/* small data reads in a row keep the host's read-ahead: where they
	 * bring in nothing after them, the host reads none ahead anyway */
	ck_assert_int_eq(arb_dev_read(dev, buf, 4096, 5 * MiB, ARB_IO_DATA),
			 0);
	ck_assert_int_eq(arb_dev_read(dev, buf, 4096, 5 * MiB + 4096,
				      ARB_IO_DATA),
			 0);
	if (resident_pages(path, 5 * MiB + 8192, 1 * MiB) == 0) {
		fprintf(stderr, "no_readahead: the host reads nothing ahead, "
				"skipped\n");
		goto out;
	}
	ck_assert_int_eq(arb_dev_read(dev, buf, 16384, 1 * MiB, ARB_IO_NODE),
			 0);
	ck_assert_uint_eq(resident_pages(path, 1 * MiB, 16384), 4);
	ck_assert_uint_eq(resident_pages(path, 1 * MiB + 16384, 1 * MiB), 0);
	/* the next node too: no sequential read-ahead either */
	ck_assert_int_eq(arb_dev_read(dev, buf, 16384, 1 * MiB + 16384,
				      ARB_IO_NODE),
			 0);
	ck_assert_uint_eq(resident_pages(path, 1 * MiB + 32768, 1 * MiB), 0);
	other = dev->bytes_read[ARB_IO_OTHER];
	arb_dev_prefetch(dev, 3 * MiB, 65536);
	ck_assert_uint_eq(dev->bytes_read[ARB_IO_OTHER], other + 65536);
	ck_assert_uint_eq(resident_pages(path, 3 * MiB, 65536), 16);
	ck_assert_uint_eq(resident_pages(path, 3 * MiB + 65536, 1 * MiB), 0);
	ck_assert_int_eq(arb_dev_read_cached(dev, buf, 16384, 3 * MiB + 49152,
					     ARB_IO_NODE) != 0, 1);
	ck_assert_uint_eq(resident_pages(path, 3 * MiB + 65536, 1 * MiB), 0);
	/* cut at the end of the device */
	other = dev->bytes_read[ARB_IO_OTHER];
	arb_dev_prefetch(dev, size - 4096, 65536);
	ck_assert_uint_eq(dev->bytes_read[ARB_IO_OTHER], other + 4096);
	arb_dev_prefetch(dev, size, 4096);
	ck_assert_uint_eq(dev->bytes_read[ARB_IO_OTHER], other + 4096);
out:
	close(fd);
	arb_dev_destroy(dev);
}
END_TEST

/* A flush-behind drops the bulk data it made durable from the host's
 * cache (drop-behind); other writes, and everything with
 * ARBOR_HOST_CACHE=1, stay cached. */
START_TEST(test_file_drop_behind)
{
	const char *path = tmpfile_path("drop.img");
	uint8_t *buf = malloc(1 * MiB);
	struct arb_dev *dev;
	struct statfs sfs;
	bool drops;

	ck_assert_ptr_nonnull(buf);
	memset(buf, 0x5a, 1 * MiB);
	ck_assert_int_eq(statfs(tmpdir, &sfs), 0);
	/* tmpfs: the cache is the file, nothing to drop */
	drops = sfs.f_type != TMPFS_MAGIC;
	for (int keep = 0; keep < 2; keep++) {
		if (keep)
			setenv("ARBOR_HOST_CACHE", "1", 1);
		unlink(path);
		ck_assert_int_eq(arb_dev_open_file(path, false, 32 * MiB, &dev),
				 0);
		unsetenv("ARBOR_HOST_CACHE");
		for (int i = 0; i < 4; i++)
			ck_assert_int_eq(arb_dev_write(dev, buf, 1 * MiB,
						       (uint64_t)(8 + i) * MiB,
						       ARB_IO_DATA), 0);
		/* a node write, outside the span of bulk data */
		ck_assert_int_eq(arb_dev_write(dev, buf, 64 * KiB, 20 * MiB,
					       ARB_IO_NODE), 0);
		ck_assert_int_eq(arb_dev_flush_behind(dev, 2 * MiB), 1);
		if (drops && !keep)
			ck_assert_uint_eq(resident_pages(path, 8 * MiB, 4 * MiB),
					  0);
		else
			ck_assert_uint_gt(resident_pages(path, 8 * MiB, 4 * MiB),
					  0);
		/* the node outside the bulk span stays cached */
		ck_assert_uint_gt(resident_pages(path, 20 * MiB, 64 * KiB), 0);
		/* and the bytes are what was written */
		memset(buf, 0, 1 * MiB);
		ck_assert_int_eq(arb_dev_read(dev, buf, 1 * MiB, 9 * MiB,
					      ARB_IO_DATA), 0);
		ck_assert_uint_eq(buf[0], 0x5a);
		ck_assert_int_eq(memcmp(buf, buf + 1, 1 * MiB - 1), 0);
		arb_dev_destroy(dev);
	}
	free(buf);
}
END_TEST

/* ---- fault injection --------------------------------------------------- */

static struct arb_dev *open_fault(struct arb_dev **lower)
{
	struct arb_dev *f = NULL;

	*lower = open_mem(64 * KiB);
	ck_assert_int_eq(arb_dev_fault_wrap(*lower, &f), 0);
	ck_assert_uint_eq(f->size, 64 * KiB);
	return f;
}

/* _i = n: only the n-th read fails */
START_TEST(test_fault_nth_read)
{
	struct arb_dev *lower, *f = open_fault(&lower);
	uint8_t buf[512];
	uint64_t n = (uint64_t)_i, i;
	int ret;

	ck_assert_int_eq(arb_dev_read(f, buf, 512, 0, ARB_IO_NODE), 0);
	arb_dev_fault_arm(f, ARB_FAULT_READ, n, -EIO, false);
	for (i = 1; i <= 8; i++) {
		/* other kinds pass and do not count */
		ck_assert_int_eq(arb_dev_write(f, buf, 512, 0, ARB_IO_NODE), 0);
		ck_assert_int_eq(arb_dev_flush(f), 0);
		ret = arb_dev_read(f, buf, 512, 512 * i, ARB_IO_NODE);
		ck_assert_int_eq(ret, i == n ? -EIO : 0);
	}
	ck_assert_uint_eq(arb_dev_fault_count(f, ARB_FAULT_READ), 9);
	ck_assert_uint_eq(arb_dev_fault_count(f, ARB_FAULT_WRITE), 8);
	ck_assert_uint_eq(arb_dev_fault_count(f, ARB_FAULT_FLUSH), 8);
	ck_assert_uint_eq(arb_dev_fault_count(f, ARB_FAULT_READ |
					      ARB_FAULT_WRITE |
					      ARB_FAULT_FLUSH), 25);
	/* the failed read never reached lower, and is not counted as done */
	ck_assert_uint_eq(lower->nr_reads, 8);
	ck_assert_uint_eq(f->nr_reads, 8);
	arb_dev_destroy(f);
}
END_TEST

/* _i = n: the n-th write and every later one fail */
START_TEST(test_fault_nth_write_sticky)
{
	struct arb_dev *lower, *f = open_fault(&lower);
	uint8_t *data = arb_dev_mem_data(lower);
	uint8_t buf[512];
	uint64_t n = (uint64_t)_i, i;
	int ret;

	arb_dev_fault_arm(f, ARB_FAULT_WRITE, n, EROFS, true);
	for (i = 1; i <= 8; i++) {
		memset(buf, (int)i, sizeof(buf));
		ck_assert_int_eq(arb_dev_read(f, buf + 1, 1, 0, ARB_IO_DATA),
				 0);
		ret = arb_dev_write(f, buf, 512, 512 * i, ARB_IO_DATA);
		/* positive err is taken as the negative errno */
		ck_assert_int_eq(ret, i >= n ? -EROFS : 0);
		/* a failed write changes nothing */
		ck_assert_uint_eq(data[512 * i], i >= n ? 0 : i);
	}
	ck_assert_uint_eq(arb_dev_fault_count(f, ARB_FAULT_WRITE), 8);
	ck_assert_uint_eq(lower->nr_writes, n - 1);

	arb_dev_fault_disarm(f);
	ck_assert_int_eq(arb_dev_write(f, buf, 512, 0, ARB_IO_DATA), 0);
	arb_dev_destroy(f);
}
END_TEST

/* _i = n: the n-th flush fails, later ones pass */
START_TEST(test_fault_nth_flush)
{
	struct arb_dev *lower, *f = open_fault(&lower);
	uint64_t n = (uint64_t)_i, i;

	arb_dev_fault_arm(f, ARB_FAULT_FLUSH, n, -ENOSPC, false);
	for (i = 1; i <= 8; i++)
		ck_assert_int_eq(arb_dev_flush(f), i == n ? -ENOSPC : 0);
	ck_assert_uint_eq(f->nr_flushes, 7);
	ck_assert_uint_eq(lower->nr_flushes, 7);
	ck_assert_uint_eq(arb_dev_fault_count(f, ARB_FAULT_FLUSH), 8);
	arb_dev_destroy(f);
}
END_TEST

START_TEST(test_fault_mask)
{
	struct arb_dev *lower, *f = open_fault(&lower);
	uint8_t buf[512] = { 0 };

	/* write and flush count together; reads do not count */
	arb_dev_fault_arm(f, ARB_FAULT_WRITE | ARB_FAULT_FLUSH, 3, -EIO, false);
	ck_assert_int_eq(arb_dev_write(f, buf, 512, 0, ARB_IO_DATA), 0);
	ck_assert_int_eq(arb_dev_read(f, buf, 512, 0, ARB_IO_DATA), 0);
	ck_assert_int_eq(arb_dev_flush(f), 0);
	ck_assert_int_eq(arb_dev_read(f, buf, 512, 0, ARB_IO_DATA), 0);
	ck_assert_int_eq(arb_dev_write(f, buf, 512, 0, ARB_IO_DATA), -EIO);
	ck_assert_int_eq(arb_dev_flush(f), 0);

	/* re-arming restarts the count; sticky across both kinds */
	arb_dev_fault_arm(f, ARB_FAULT_READ | ARB_FAULT_FLUSH, 2, -EIO, true);
	ck_assert_int_eq(arb_dev_flush(f), 0);
	ck_assert_int_eq(arb_dev_write(f, buf, 512, 0, ARB_IO_DATA), 0);
	ck_assert_int_eq(arb_dev_read(f, buf, 512, 0, ARB_IO_DATA), -EIO);
	ck_assert_int_eq(arb_dev_flush(f), -EIO);
	ck_assert_int_eq(arb_dev_write(f, buf, 512, 0, ARB_IO_DATA), 0);
	ck_assert_int_eq(arb_dev_read(f, buf, 512, 0, ARB_IO_DATA), -EIO);

	/* counts are totals since wrapping, failed operations included */
	ck_assert_uint_eq(arb_dev_fault_count(f, ARB_FAULT_READ), 4);
	ck_assert_uint_eq(arb_dev_fault_count(f, ARB_FAULT_WRITE), 4);
	ck_assert_uint_eq(arb_dev_fault_count(f, ARB_FAULT_FLUSH), 4);
	ck_assert_uint_eq(arb_dev_fault_count(f, 0), 0);
	ck_assert_uint_eq(f->nr_reads + f->nr_writes + f->nr_flushes, 8);

	arb_dev_fault_disarm(f);
	ck_assert_int_eq(arb_dev_read(f, buf, 512, 0, ARB_IO_DATA), 0);
	ck_assert_int_eq(arb_dev_flush(f), 0);
	/* out-of-bounds requests stop in the wrapper and are not counted */
	ck_assert_int_eq(arb_dev_read(f, buf, 512, 64 * KiB, ARB_IO_DATA),
			 -EINVAL);
	ck_assert_uint_eq(arb_dev_fault_count(f, ARB_FAULT_READ), 5);
	/* not a fault device: ignored */
	arb_dev_fault_arm(lower, ARB_FAULT_READ, 1, -EIO, true);
	ck_assert_uint_eq(arb_dev_fault_count(lower, ARB_FAULT_READ), 0);
	ck_assert_int_eq(arb_dev_read(lower, buf, 512, 0, ARB_IO_DATA), 0);
	arb_dev_destroy(f);
}
END_TEST

START_TEST(test_fault_resize)
{
	struct arb_dev *lower, *f = open_fault(&lower);

	ck_assert_int_eq(f->ops->resize(f, 128 * KiB), 0);
	ck_assert_uint_eq(f->size, 128 * KiB);
	ck_assert_uint_eq(lower->size, 128 * KiB);
	arb_dev_destroy(f);
}
END_TEST

/* ---- write log --------------------------------------------------------- */

#define LOG_SIZE (256 * KiB)

/* A random image in memory, wrapped by a log device. */
static struct arb_dev *open_log(uint64_t size, uint64_t *rng,
				struct arb_dev **lower)
{
	struct arb_dev *log = NULL;

	*lower = open_mem(size);
	fill_random(arb_dev_mem_data(*lower), (size_t)size, rng);
	ck_assert_int_eq(arb_dev_log_wrap(*lower, &log), 0);
	ck_assert_uint_eq(log->size, size);
	ck_assert_uint_eq(arb_dev_log_len(log), 0);
	return log;
}

static struct arb_dev *replay(struct arb_dev *log, size_t n,
			      enum arb_replay_mode mode, uint64_t seed)
{
	struct arb_dev *img = NULL;

	ck_assert_int_eq(arb_dev_log_replay(log, n, mode, seed, &img), 0);
	ck_assert_uint_eq(img->size, log->size);
	ck_assert_ptr_nonnull(arb_dev_mem_data(img));
	return img;
}

/* What the test remembers of every log entry. */
struct ent {
	uint64_t off;
	size_t len;
	/* NULL for a flush */
	uint8_t *data;
};

/* Random writes (any size and alignment, overlapping) and flushes. */
static size_t random_workload(struct arb_dev *log, struct ent *ents, size_t nr,
			      uint64_t *rng)
{
	size_t i;

	for (i = 0; i < nr; i++) {
		struct ent *e = &ents[i];

		if (tu_rand_range(rng, 100) < 15) {
			*e = (struct ent){ 0, 0, NULL };
			ck_assert_int_eq(arb_dev_flush(log), 0);
			continue;
		}
		e->len = 1 + tu_rand_range(rng, 16 * KiB);
		e->off = tu_rand_range(rng, LOG_SIZE - e->len + 1);
		e->data = malloc(e->len);
		ck_assert_ptr_nonnull(e->data);
		fill_random(e->data, e->len, rng);
		ck_assert_int_eq(arb_dev_write(log, e->data, e->len, e->off,
					       (enum arb_io_kind)(i % 4)), 0);
	}
	return nr;
}

static void free_ents(struct ent *ents, size_t nr)
{
	size_t i;

	for (i = 0; i < nr; i++)
		free(ents[i].data);
}

START_TEST(test_log_prefix)
{
	uint64_t rng = tu_seed("log_prefix");
	size_t nr = TU_SCALE(200, 1000), i, nr_flush = 0, k;
	struct ent *ents = calloc(nr, sizeof(*ents));
	struct arb_dev *lower, *log = open_log(LOG_SIZE, &rng, &lower);
	uint8_t *model = malloc(LOG_SIZE);
	size_t *flushes = calloc(nr, sizeof(*flushes));

	ck_assert_ptr_nonnull(ents);
	ck_assert_ptr_nonnull(model);
	ck_assert_ptr_nonnull(flushes);
	memcpy(model, arb_dev_mem_data(lower), LOG_SIZE);
	random_workload(log, ents, nr, &rng);
	ck_assert_uint_eq(arb_dev_log_len(log), nr);

	/* the flush index list */
	for (i = 0; i < nr; i++)
		nr_flush += !ents[i].data;
	ck_assert_uint_eq(arb_dev_log_flushes(log, NULL, 0), nr_flush);
	ck_assert_uint_eq(arb_dev_log_flushes(log, flushes, nr), nr_flush);
	for (i = 0, k = 0; i < nr; i++)
		if (!ents[i].data)
			ck_assert_uint_eq(flushes[k++], i);
	if (nr_flush > 1)
		ck_assert_uint_eq(arb_dev_log_flushes(log, flushes, 1), 1);

	/* PREFIX at every index is exactly the model after i entries */
	for (i = 0; i <= nr; i++) {
		struct arb_dev *img = replay(log, i, ARB_REPLAY_PREFIX, i);

		if (i > 0 && ents[i - 1].data)
			memcpy(model + ents[i - 1].off, ents[i - 1].data,
			       ents[i - 1].len);
		ck_assert_msg(!memcmp(arb_dev_mem_data(img), model, LOG_SIZE),
			      "PREFIX replay of %zu entries differs", i);
		arb_dev_destroy(img);
	}
	/* the writes went through */
	ck_assert(!memcmp(arb_dev_mem_data(lower), model, LOG_SIZE));
	ck_assert_uint_eq(lower->nr_writes, nr - nr_flush);
	ck_assert_uint_eq(lower->nr_flushes, nr_flush);

	free_ents(ents, nr);
	free(ents);
	free(flushes);
	free(model);
	arb_dev_destroy(log);
}
END_TEST

/*
 * DROP and REORDER_TEAR on a random workload, crashing before every entry:
 * each byte that no write after the last flush touches equals the image at
 * that flush, and each byte that one does touch holds either that value or
 * the value of one of those writes.  Returns the first byte that does not, or
 * SIZE_MAX.
 */
static size_t crash_bad_byte(const uint8_t *img, const uint8_t *durable,
			     const struct ent *ents, size_t last_flush,
			     size_t n)
{
	size_t b, w;
	bool ok;

	for (b = 0; b < LOG_SIZE; b++) {
		/* skip equal sectors quickly */
		if (b % 512 == 0 && !memcmp(img + b, durable + b, 512)) {
			b += 511;
			continue;
		}
		ok = img[b] == durable[b];
		for (w = last_flush; w < n && !ok; w++)
			ok = ents[w].data && b >= ents[w].off &&
			     b < ents[w].off + ents[w].len &&
			     img[b] == ents[w].data[b - ents[w].off];
		if (!ok)
			return b;
	}
	return SIZE_MAX;
}

static void check_crash_random(enum arb_replay_mode mode, const char *what)
{
	uint64_t rng = tu_seed(what);
	size_t nr = TU_SCALE(120, 500), seeds = TU_SCALE(4, 16), i, n, s, b;
	struct ent *ents = calloc(nr, sizeof(*ents));
	struct arb_dev *lower, *log = open_log(LOG_SIZE, &rng, &lower);
	uint8_t *durable = malloc(LOG_SIZE), *img;
	size_t last_flush = 0; /* entries up to and including the last flush */

	ck_assert_ptr_nonnull(ents);
	ck_assert_ptr_nonnull(durable);
	memcpy(durable, arb_dev_mem_data(lower), LOG_SIZE);
	random_workload(log, ents, nr, &rng);

	for (n = 0; n <= nr; n++) {
		if (n > 0 && !ents[n - 1].data) {
			for (i = last_flush; i < n; i++)
				if (ents[i].data)
					memcpy(durable + ents[i].off,
					       ents[i].data, ents[i].len);
			last_flush = n;
		}
		for (s = 0; s < seeds; s++) {
			struct arb_dev *dev = replay(log, n, mode, rng + s);

			img = arb_dev_mem_data(dev);
			b = crash_bad_byte(img, durable, ents, last_flush, n);
			ck_assert_msg(b == SIZE_MAX,
				      "%s n=%zu seed=%zu: byte %zu", what, n,
				      s, b);
			arb_dev_destroy(dev);
		}
	}
	free_ents(ents, nr);
	free(ents);
	free(durable);
	arb_dev_destroy(log);
}

START_TEST(test_log_drop_random)
{
	check_crash_random(ARB_REPLAY_DROP, "log_drop_random");
}
END_TEST

START_TEST(test_log_tear_random)
{
	check_crash_random(ARB_REPLAY_REORDER_TEAR, "log_tear_random");
}
END_TEST

/*
 * A workload whose unflushed writes are whole, distinct 4 KiB blocks whose
 * every byte differs from the old contents, so each block of a replay tells
 * exactly what happened to its write.
 */
#define BLK 4096
#define NR_PRE 40
#define NR_POST 8

struct blocks {
	struct arb_dev *lower, *log;
	/* image after the flush, and the new contents of the post writes */
	uint8_t *durable;
	uint8_t newb[NR_POST][BLK];
	uint64_t off[NR_POST];
	/* log index of the flush; post write i is entry flush + 1 + i */
	size_t flush;
};

static void blocks_setup(struct blocks *t, uint64_t *rng)
{
	uint8_t buf[BLK];
	size_t i, j;

	t->log = open_log(LOG_SIZE, rng, &t->lower);
	t->durable = malloc(LOG_SIZE);
	ck_assert_ptr_nonnull(t->durable);
	memcpy(t->durable, arb_dev_mem_data(t->lower), LOG_SIZE);
	/* overlapping pre-flush writes, a flush among them and one after */
	for (i = 0; i < NR_PRE; i++) {
		size_t len = 1 + tu_rand_range(rng, BLK);
		uint64_t off = tu_rand_range(rng, LOG_SIZE - len + 1);

		fill_random(buf, len, rng);
		ck_assert_int_eq(arb_dev_write(t->log, buf, len, off,
					       ARB_IO_NODE), 0);
		memcpy(t->durable + off, buf, len);
		if (i == NR_PRE / 2)
			ck_assert_int_eq(arb_dev_flush(t->log), 0);
	}
	ck_assert_int_eq(arb_dev_flush(t->log), 0);
	t->flush = NR_PRE + 1;
	/* post writes to blocks 2i or 2i+1 */
	for (i = 0; i < NR_POST; i++) {
		t->off[i] = (2 * i + tu_rand_range(rng, 2)) * BLK;
		for (j = 0; j < BLK; j++)
			t->newb[i][j] = t->durable[t->off[i] + j] ^
					(uint8_t)(1 + tu_rand_range(rng, 255));
		ck_assert_int_eq(arb_dev_write(t->log, t->newb[i], BLK,
					       t->off[i], ARB_IO_DATA), 0);
	}
	ck_assert_uint_eq(arb_dev_log_len(t->log), t->flush + 1 + NR_POST);
}

enum blk_state { BLK_OLD, BLK_NEW, BLK_TORN };

/* Classify post write i in a replay; fails the test if it is none of old,
 * new, or a 512-aligned prefix of new followed by old. */
static enum blk_state blocks_classify(struct blocks *t, const uint8_t *img,
				      size_t i)
{
	const uint8_t *old = t->durable + t->off[i];
	const uint8_t *p = img + t->off[i];
	size_t k = 0;

	while (k < BLK && p[k] == t->newb[i][k])
		k++;
	if (k == BLK)
		return BLK_NEW;
	ck_assert_msg(k % 512 == 0, "block %zu: %zu new bytes", i, k);
	ck_assert_msg(!memcmp(p + k, old + k, BLK - k),
		      "block %zu: neither old nor new after %zu bytes", i, k);
	return k ? BLK_TORN : BLK_OLD;
}

/* Everything outside the post blocks is the durable image. */
static void blocks_check_rest(struct blocks *t, const uint8_t *img)
{
	uint64_t off = 0;
	size_t i;

	for (i = 0; i < NR_POST; i++) {
		ck_assert(!memcmp(img + off, t->durable + off,
				  t->off[i] - off));
		off = t->off[i] + BLK;
	}
	ck_assert(!memcmp(img + off, t->durable + off, LOG_SIZE - off));
}

static void blocks_free(struct blocks *t)
{
	free(t->durable);
	arb_dev_destroy(t->log);
}

static void check_crash_blocks(enum arb_replay_mode mode, const char *what)
{
	uint64_t rng = tu_seed(what);
	struct blocks *t = calloc(1, sizeof(*t));
	size_t seeds = TU_SCALE(64, 512), n, s, i, torn, count[3] = { 0 };

	ck_assert_ptr_nonnull(t);
	blocks_setup(t, &rng);
	/* crash before each post write and at the end */
	for (n = t->flush + 1; n <= t->flush + 1 + NR_POST; n++) {
		for (s = 0; s < seeds; s++) {
			struct arb_dev *dev = replay(t->log, n, mode, rng + s);
			const uint8_t *img = arb_dev_mem_data(dev);

			blocks_check_rest(t, img);
			for (i = 0, torn = 0; i < NR_POST; i++) {
				enum blk_state st = blocks_classify(t, img, i);

				/* writes from entry n on never land */
				if (t->flush + 1 + i >= n) {
					ck_assert_int_eq(st, BLK_OLD);
					continue;
				}
				count[st]++;
				torn += st == BLK_TORN;
			}
			ck_assert_uint_le(torn, 1);
			arb_dev_destroy(dev);
		}
	}
	/* each outcome happens (the odds of missing one are negligible) */
	ck_assert_uint_gt(count[BLK_OLD], 0);
	ck_assert_uint_gt(count[BLK_NEW], 0);
	if (mode == ARB_REPLAY_DROP)
		ck_assert_uint_eq(count[BLK_TORN], 0);
	else
		ck_assert_uint_gt(count[BLK_TORN], 0);

	/* crashing before the flush: the writes before the middle flush are
	 * all there (checked through PREFIX, which is exact) */
	for (s = 0; s < seeds; s++) {
		struct arb_dev *dev = replay(t->log, t->flush, mode, rng + s);
		struct arb_dev *pre = replay(t->log, NR_PRE / 2 + 2,
					     ARB_REPLAY_PREFIX, 0);
		const uint8_t *img = arb_dev_mem_data(dev);
		const uint8_t *want = arb_dev_mem_data(pre);
		size_t b, w, diff = 0;

		/* bytes may differ only where the later pre writes went */
		for (b = 0; b < LOG_SIZE; b++)
			diff += img[b] != want[b];
		w = (NR_PRE - NR_PRE / 2 - 1) * BLK;
		ck_assert_uint_le(diff, w);
		arb_dev_destroy(pre);
		arb_dev_destroy(dev);
	}
	blocks_free(t);
	free(t);
}

START_TEST(test_log_drop_blocks)
{
	check_crash_blocks(ARB_REPLAY_DROP, "log_drop_blocks");
}
END_TEST

START_TEST(test_log_tear_blocks)
{
	check_crash_blocks(ARB_REPLAY_REORDER_TEAR, "log_tear_blocks");
}
END_TEST

/*
 * Two unflushed writes, W1 = 0x11 over [0, 4K) and W2 = 0x22 over [2K, 6K).
 * Byte 3000 == 0x11 with byte 5000 == 0x22 means W2 landed before W1 (a tear
 * cuts a suffix, which cannot produce it), so only REORDER_TEAR shows it.
 * The bytes start as zeros (a flushed write): the device's random contents
 * could hold 0x22 at byte 5000, and W1 alone would then look reversed
 * (ARBOR_TEST_SEED=1796405110435055946 did, 1 seed in about 256).
 */
START_TEST(test_log_reorder)
{
	uint64_t rng = tu_seed("log_reorder");
	struct arb_dev *lower, *log = open_log(64 * KiB, &rng, &lower);
	uint8_t w1[4096], w2[4096];
	size_t s, seeds = 256, reversed[3] = { 0 }, in_order[3] = { 0 };
	enum arb_replay_mode mode;

	memset(w1, 0, sizeof(w1));
	ck_assert_int_eq(arb_dev_write(log, w1, 4096, 0, ARB_IO_DATA), 0);
	ck_assert_int_eq(arb_dev_write(log, w1, 4096, 4096, ARB_IO_DATA), 0);
	memset(w1, 0x11, sizeof(w1));
	memset(w2, 0x22, sizeof(w2));
	ck_assert_int_eq(arb_dev_flush(log), 0);
	ck_assert_int_eq(arb_dev_write(log, w1, 4096, 0, ARB_IO_DATA), 0);
	ck_assert_int_eq(arb_dev_write(log, w2, 4096, 2048, ARB_IO_DATA), 0);
	for (mode = ARB_REPLAY_PREFIX; mode <= ARB_REPLAY_REORDER_TEAR;
	     mode++) {
		for (s = 0; s < seeds; s++) {
			struct arb_dev *dev = replay(log, 5, mode, rng + s);
			const uint8_t *img = arb_dev_mem_data(dev);

			reversed[mode] += img[3000] == 0x11 &&
					  img[5000] == 0x22;
			in_order[mode] += img[1000] == 0x11 &&
					  img[3000] == 0x22;
			arb_dev_destroy(dev);
		}
	}
	ck_assert_uint_eq(reversed[ARB_REPLAY_PREFIX], 0);
	ck_assert_uint_eq(in_order[ARB_REPLAY_PREFIX], seeds);
	ck_assert_uint_eq(reversed[ARB_REPLAY_DROP], 0);
	ck_assert_uint_gt(in_order[ARB_REPLAY_DROP], 0);
	ck_assert_uint_gt(reversed[ARB_REPLAY_REORDER_TEAR], 0);
	ck_assert_uint_gt(in_order[ARB_REPLAY_REORDER_TEAR], 0);
	arb_dev_destroy(log);
}
END_TEST

START_TEST(test_log_replay_misc)
{
	uint64_t rng = tu_seed("log_replay_misc");
	struct arb_dev *lower, *log = open_log(LOG_SIZE, &rng, &lower), *a, *b;
	struct ent ents[64];
	size_t nr = random_workload(log, ents, 64, &rng), s, differ = 0;

	/* the same seed gives the same image, different seeds vary */
	for (s = 0; s < 64; s++) {
		a = replay(log, nr, ARB_REPLAY_REORDER_TEAR, s);
		b = replay(log, nr, ARB_REPLAY_REORDER_TEAR, s);
		ck_assert(!memcmp(arb_dev_mem_data(a), arb_dev_mem_data(b),
				  LOG_SIZE));
		arb_dev_destroy(b);
		b = replay(log, nr, ARB_REPLAY_REORDER_TEAR, s + 1000);
		differ += !!memcmp(arb_dev_mem_data(a), arb_dev_mem_data(b),
				   LOG_SIZE);
		arb_dev_destroy(b);
		arb_dev_destroy(a);
	}
	/* unless no write follows the last flush */
	if (ents[nr - 1].data)
		ck_assert_uint_gt(differ, 0);

	ck_assert_int_eq(arb_dev_log_replay(log, nr + 1, ARB_REPLAY_PREFIX, 0,
					    &a), -EINVAL);
	ck_assert_int_eq(arb_dev_log_replay(log, nr, (enum arb_replay_mode)3,
					    0, &a), -EINVAL);
	ck_assert_int_eq(arb_dev_log_replay(lower, 0, ARB_REPLAY_PREFIX, 0,
					    &a), -EINVAL);
	ck_assert_uint_eq(arb_dev_log_len(lower), 0);
	ck_assert_uint_eq(arb_dev_log_flushes(lower, NULL, 0), 0);
	/* no resize: the log's entries refer to one size */
	ck_assert_ptr_null(log->ops->resize);
	free_ents(ents, nr);
	arb_dev_destroy(log);
}
END_TEST

/* Failed writes and flushes below the log are not recorded. */
START_TEST(test_log_over_fault)
{
	struct arb_dev *mem = open_mem(64 * KiB), *f, *log, *img;
	uint8_t buf[512];

	memset(buf, 0x5a, sizeof(buf));
	ck_assert_int_eq(arb_dev_fault_wrap(mem, &f), 0);
	ck_assert_int_eq(arb_dev_log_wrap(f, &log), 0);
	arb_dev_fault_arm(f, ARB_FAULT_WRITE | ARB_FAULT_FLUSH, 2, -EIO, false);
	ck_assert_int_eq(arb_dev_write(log, buf, 512, 0, ARB_IO_DATA), 0);
	ck_assert_int_eq(arb_dev_write(log, buf, 512, 512, ARB_IO_DATA), -EIO);
	ck_assert_int_eq(arb_dev_flush(log), 0);
	ck_assert_uint_eq(arb_dev_log_len(log), 2);
	img = replay(log, 2, ARB_REPLAY_PREFIX, 0);
	ck_assert_uint_eq(arb_dev_mem_data(img)[0], 0x5a);
	ck_assert_uint_eq(arb_dev_mem_data(img)[512], 0);
	arb_dev_destroy(img);
	arb_dev_destroy(log);
}
END_TEST

/* ---- trace ------------------------------------------------------------- */

START_TEST(test_trace_lines)
{
	static const char *const kinds[] = { "super", "node", "data", "other" };
	static const struct {
		char op;
		uint64_t off;
		size_t len;
		int kind;
	} want[] = {
		{ 'W', 65536, 4096, ARB_IO_SUPER },
		{ 'R', 8192, 16384, ARB_IO_NODE },
		{ 'F', 0, 0, ARB_IO_OTHER },
		{ 'W', 100, 7, ARB_IO_DATA },
		{ 'R', 0, 512, ARB_IO_OTHER },
	};
	struct arb_dev *mem = open_mem(1 * MiB), *f, *t;
	uint8_t buf[16384] = { 0 };
	char *text = NULL, *line, *save = NULL, op, kind[16];
	size_t size = 0, i, n = sizeof(want) / sizeof(want[0]);
	unsigned long long off;
	double secs, last = 0;
	size_t len;
	FILE *out = open_memstream(&text, &size);

	ck_assert_ptr_nonnull(out);
	/* trace on top of a fault device: the failed read is traced too */
	ck_assert_int_eq(arb_dev_fault_wrap(mem, &f), 0);
	ck_assert_int_eq(arb_dev_trace_wrap(f, out, &t), 0);
	for (i = 0; i < n; i++) {
		if (want[i].op == 'W')
			ck_assert_int_eq(arb_dev_write(t, buf, want[i].len,
						       want[i].off,
						       want[i].kind), 0);
		else if (want[i].op == 'R')
			ck_assert_int_eq(arb_dev_read(t, buf, want[i].len,
						      want[i].off,
						      want[i].kind),
					 i == n - 1 ? -EIO : 0);
		else
			ck_assert_int_eq(arb_dev_flush(t), 0);
		if (i == n - 2)
			arb_dev_fault_arm(f, ARB_FAULT_READ, 1, -EIO, false);
	}
	/* out of bounds: stopped before the device, not traced */
	ck_assert_int_eq(arb_dev_read(t, buf, 1, 1 * MiB, ARB_IO_DATA),
			 -EINVAL);
	ck_assert_ptr_nonnull(t->ops->resize);
	ck_assert_int_eq(t->ops->resize(t, 2 * MiB), 0);
	ck_assert_uint_eq(t->size, 2 * MiB);
	arb_dev_destroy(t);
	ck_assert_int_eq(fclose(out), 0);

	for (i = 0, line = strtok_r(text, "\n", &save); line;
	     i++, line = strtok_r(NULL, "\n", &save)) {
		ck_assert_uint_lt(i, n);
		ck_assert_int_eq(sscanf(line, "%lf %c %llu %zu %15s", &secs,
					&op, &off, &len, kind), 5);
		ck_assert(secs >= last);
		last = secs;
		ck_assert_int_eq(op, want[i].op);
		ck_assert_uint_eq(off, want[i].off);
		ck_assert_uint_eq(len, want[i].len);
		ck_assert_str_eq(kind, kinds[want[i].kind]);
	}
	ck_assert_uint_eq(i, n);
	ck_assert(last < 60);
	free(text);
}
END_TEST

/* ------------------------------------------------------------------------ */

static Suite *dev_suite(void)
{
	Suite *s = suite_create("dev");
	TCase *tc;

	tc = tcase_create("mem");
	tcase_add_test(tc, test_mem_rw);
	tcase_add_test(tc, test_pend_read_runs);
	tcase_add_test(tc, test_pend_error_sticky);
	tcase_add_test(tc, test_pend_read_waits);
	tcase_add_test(tc, test_mem_bounds);
	tcase_add_test(tc, test_mem_resize);
	tcase_add_test(tc, test_mem_data_other);
	suite_add_tcase(s, tc);

	tc = tcase_create("file");
	tcase_add_unchecked_fixture(tc, file_setup, file_teardown);
	tcase_add_test(tc, test_file_create_sparse);
	tcase_add_test(tc, test_file_resident);
	tcase_add_test(tc, test_node_no_readahead);
	tcase_add_test(tc, test_file_extend);
	tcase_add_test(tc, test_file_host_alloc);
	tcase_add_test(tc, test_file_lock);
	tcase_add_test(tc, test_file_readonly);
	tcase_add_test(tc, test_file_flush_behind);
	tcase_add_test(tc, test_file_direct_read);
	tcase_add_test(tc, test_file_drop_behind);
	suite_add_tcase(s, tc);

	tc = tcase_create("fault");
	tcase_add_loop_test(tc, test_fault_nth_read, 1, 9);
	tcase_add_loop_test(tc, test_fault_nth_write_sticky, 1, 9);
	tcase_add_loop_test(tc, test_fault_nth_flush, 1, 9);
	tcase_add_test(tc, test_fault_mask);
	tcase_add_test(tc, test_fault_resize);
	suite_add_tcase(s, tc);

	tc = tcase_create("log");
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_log_prefix);
	tcase_add_test(tc, test_log_drop_random);
	tcase_add_test(tc, test_log_tear_random);
	tcase_add_test(tc, test_log_drop_blocks);
	tcase_add_test(tc, test_log_tear_blocks);
	tcase_add_test(tc, test_log_reorder);
	tcase_add_test(tc, test_log_replay_misc);
	tcase_add_test(tc, test_log_over_fault);
	suite_add_tcase(s, tc);

	tc = tcase_create("trace");
	tcase_add_test(tc, test_trace_lines);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(dev_suite());
}
