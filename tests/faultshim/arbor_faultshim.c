// SPDX-License-Identifier: MIT
/*
 * arbor_faultshim.c - an LD_PRELOAD library that makes I/O on one image
 * file fail, for the integration tests (tests/integration/ioerr.sh).  We
 * have no device-mapper (dm-error, dm-flakey) here; this does the same at
 * the level of the system calls lib/core/dev.c makes: pread/pwrite (and their
 * 64 and vector forms), fsync and fdatasync.  Built for tests only, never
 * installed.
 *
 * Environment (read once, at the first intercepted call):
 *   ARBOR_FAULT_IMAGE  the image; only I/O on a file descriptor of that
 *                      file (same device and inode, checked with fstat) is
 *                      touched, everything else passes through
 *   ARBOR_FAULT_CTL    a control file, read again whenever it changes
 *                      (size, mtime or inode), so a test can arm and
 *                      disarm faults while the daemon runs; a missing or
 *                      empty file means no faults
 *
 * Control file: one directive per line, '#' starts a comment.
 *   read_eio START LEN      reads overlapping [START, START+LEN) of the
 *                           image fail with EIO (any number of lines)
 *   write_eio_after N       after N more writes succeed, every write fails
 *                           with EIO (0: from now on)
 *   flush_eio_after N       the same for fsync/fdatasync
 * Counting starts when the file is (re)loaded.  Every injected failure is
 * logged to stderr ("arbor-faultshim: ..."), the first 20 of each kind.
 *
 * Under AddressSanitizer the daemon needs libasan first in LD_PRELOAD; its
 * interceptors then call ours (they look the real functions up with
 * dlsym(RTLD_NEXT)), and ours call libc's.
 */
/* our pread/pwrite are the 32-bit-offset names; the 64 ones separately */
#undef _FILE_OFFSET_BITS
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_RANGES 64
#define LOG_MAX 20

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static const char *ctl_path;
static bool have_image;
static dev_t image_dev;
static ino_t image_ino;

/* the control file as last loaded */
static struct stat ctl_st;
static bool ctl_loaded;
static struct range {
	uint64_t start, len;
} ranges[MAX_RANGES];
static int nr_ranges;
/* writes/flushes still allowed before failing; -1 = never fail */
static int64_t writes_left = -1, flushes_left = -1;
static unsigned logged_reads, logged_writes, logged_flushes;

static ssize_t (*real_pread)(int, void *, size_t, off_t);
static ssize_t (*real_pread64)(int, void *, size_t, off64_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off64_t);
static ssize_t (*real_preadv)(int, const struct iovec *, int, off_t);
static ssize_t (*real_preadv64)(int, const struct iovec *, int, off64_t);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev64)(int, const struct iovec *, int, off64_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);

static void *next_sym(const char *name)
{
	void *p = dlsym(RTLD_NEXT, name);

	if (!p) {
		fprintf(stderr, "arbor-faultshim: no %s in libc\n", name);
		abort();
	}
	return p;
}

static void init(void)
{
	const char *img = getenv("ARBOR_FAULT_IMAGE");
	struct stat st;

	*(void **)&real_pread = next_sym("pread");
	*(void **)&real_pread64 = next_sym("pread64");
	*(void **)&real_pwrite = next_sym("pwrite");
	*(void **)&real_pwrite64 = next_sym("pwrite64");
	*(void **)&real_preadv = next_sym("preadv");
	*(void **)&real_preadv64 = next_sym("preadv64");
	*(void **)&real_pwritev = next_sym("pwritev");
	*(void **)&real_pwritev64 = next_sym("pwritev64");
	*(void **)&real_fsync = next_sym("fsync");
	*(void **)&real_fdatasync = next_sym("fdatasync");
	ctl_path = getenv("ARBOR_FAULT_CTL");
	if (img && stat(img, &st) == 0) {
		have_image = true;
		image_dev = st.st_dev;
		image_ino = st.st_ino;
	} else if (img) {
		fprintf(stderr, "arbor-faultshim: %s: %s; no faults\n", img,
			strerror(errno));
	}
}

/* Load the control file if it changed (lock held). */
static void reload(void)
{
	unsigned long long a, b;
	long long n;
	struct stat st;
	char line[256];
	FILE *f;

	if (!ctl_path || stat(ctl_path, &st) != 0) {
		memset(&st, 0, sizeof(st));
	} else if (ctl_loaded && st.st_ino == ctl_st.st_ino &&
		   st.st_size == ctl_st.st_size &&
		   st.st_mtim.tv_sec == ctl_st.st_mtim.tv_sec &&
		   st.st_mtim.tv_nsec == ctl_st.st_mtim.tv_nsec) {
		return;
	}
	if (ctl_loaded && st.st_ino == ctl_st.st_ino && st.st_ino == 0)
		return; /* still missing */
	ctl_st = st;
	ctl_loaded = true;
	nr_ranges = 0;
	writes_left = flushes_left = -1;
	logged_reads = logged_writes = logged_flushes = 0;
	f = st.st_ino ? fopen(ctl_path, "re") : NULL;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *hash = strchr(line, '#');

		if (hash)
			*hash = '\0';
		if (sscanf(line, " read_eio %lli %lli", (long long *)&a,
			   (long long *)&b) == 2) {
			if (nr_ranges < MAX_RANGES) {
				ranges[nr_ranges].start = a;
				ranges[nr_ranges].len = b;
				nr_ranges++;
			}
		} else if (sscanf(line, " write_eio_after %lli", &n) == 1) {
			writes_left = n < 0 ? -1 : n;
		} else if (sscanf(line, " flush_eio_after %lli", &n) == 1) {
			flushes_left = n < 0 ? -1 : n;
		}
	}
	fclose(f);
	fprintf(stderr,
		"arbor-faultshim: loaded %s: %d read range(s), writes %s, "
		"flushes %s\n",
		ctl_path, nr_ranges, writes_left < 0 ? "pass" : "counted",
		flushes_left < 0 ? "pass" : "counted");
}

static bool is_image(int fd)
{
	struct stat st;

	pthread_once(&once, init);
	if (!have_image || fstat(fd, &st) != 0)
		return false;
	return st.st_dev == image_dev && st.st_ino == image_ino;
}

static bool fail_read(int fd, size_t len, uint64_t off)
{
	bool fail = false;

	if (!is_image(fd))
		return false;
	pthread_mutex_lock(&lock);
	reload();
	for (int i = 0; i < nr_ranges && !fail; i++)
		fail = off < ranges[i].start + ranges[i].len &&
		       ranges[i].start < off + len;
	if (fail && logged_reads++ < LOG_MAX)
		fprintf(stderr, "arbor-faultshim: read %zu bytes at %llu: EIO\n",
			len, (unsigned long long)off);
	pthread_mutex_unlock(&lock);
	return fail;
}

/* counter: writes_left or flushes_left */
static bool fail_counted(int fd, int64_t *left, unsigned *logged,
			 const char *what, size_t len, uint64_t off)
{
	bool fail = false;

	if (!is_image(fd))
		return false;
	pthread_mutex_lock(&lock);
	reload();
	if (*left == 0)
		fail = true;
	else if (*left > 0)
		(*left)--;
	if (fail && (*logged)++ < LOG_MAX)
		fprintf(stderr, "arbor-faultshim: %s %zu bytes at %llu: EIO\n",
			what, len, (unsigned long long)off);
	pthread_mutex_unlock(&lock);
	return fail;
}

static size_t iov_len(const struct iovec *iov, int n)
{
	size_t len = 0;

	for (int i = 0; i < n; i++)
		len += iov[i].iov_len;
	return len;
}

#define FAIL_EIO()                                                             \
	do {                                                                   \
		errno = EIO;                                                   \
		return -1;                                                     \
	} while (0)

ssize_t pread(int fd, void *buf, size_t len, off_t off)
{
	if (fail_read(fd, len, (uint64_t)off))
		FAIL_EIO();
	return real_pread(fd, buf, len, off);
}

ssize_t pread64(int fd, void *buf, size_t len, off64_t off)
{
	if (fail_read(fd, len, (uint64_t)off))
		FAIL_EIO();
	return real_pread64(fd, buf, len, off);
}

ssize_t preadv(int fd, const struct iovec *iov, int n, off_t off)
{
	if (fail_read(fd, iov_len(iov, n), (uint64_t)off))
		FAIL_EIO();
	return real_preadv(fd, iov, n, off);
}

ssize_t preadv64(int fd, const struct iovec *iov, int n, off64_t off)
{
	if (fail_read(fd, iov_len(iov, n), (uint64_t)off))
		FAIL_EIO();
	return real_preadv64(fd, iov, n, off);
}

ssize_t pwrite(int fd, const void *buf, size_t len, off_t off)
{
	if (fail_counted(fd, &writes_left, &logged_writes, "write", len,
			 (uint64_t)off))
		FAIL_EIO();
	return real_pwrite(fd, buf, len, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t len, off64_t off)
{
	if (fail_counted(fd, &writes_left, &logged_writes, "write", len,
			 (uint64_t)off))
		FAIL_EIO();
	return real_pwrite64(fd, buf, len, off);
}

ssize_t pwritev(int fd, const struct iovec *iov, int n, off_t off)
{
	if (fail_counted(fd, &writes_left, &logged_writes, "write",
			 iov_len(iov, n), (uint64_t)off))
		FAIL_EIO();
	return real_pwritev(fd, iov, n, off);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int n, off64_t off)
{
	if (fail_counted(fd, &writes_left, &logged_writes, "write",
			 iov_len(iov, n), (uint64_t)off))
		FAIL_EIO();
	return real_pwritev64(fd, iov, n, off);
}

int fsync(int fd)
{
	if (fail_counted(fd, &flushes_left, &logged_flushes, "fsync", 0, 0))
		FAIL_EIO();
	return real_fsync(fd);
}

int fdatasync(int fd)
{
	if (fail_counted(fd, &flushes_left, &logged_flushes, "fdatasync", 0,
			 0))
		FAIL_EIO();
	return real_fdatasync(fd);
}
