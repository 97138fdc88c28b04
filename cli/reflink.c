/* SPDX-License-Identifier: MIT */
/*
 * reflink.c - "arbor reflink" and "arbor dedupe": sharing data on a
 * mounted arborfs.
 *
 *   reflink SRC DST [--range SRC_OFF LEN DST_OFF]
 *       clone through copy_file_range(2), which the daemon answers by
 *       sharing whole blocks (lib/fs/clone.c); what could only be copied
 *       (offsets or a length off the block size) is refused here, so a
 *       script never gets a silent byte copy.  The kernel writes back
 *       both files' dirty pages first and drops the destination's cached
 *       pages after, which an ioctl would not do.
 *   dedupe [-r] [--dry-run] PATH...
 *       hash every whole chunk (128 KiB, at multiples of it) of the
 *       files, and have the daemon share each chunk that hashes like an
 *       earlier one (ARB_IOC_DEDUPE_RANGE: compared byte for byte there,
 *       so a hash collision shares nothing)
 *   dedupe --range SRC SRC_OFF LEN DST DST_OFF
 *       one ARB_IOC_DEDUPE_RANGE: shared if equal, "differs" otherwise
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "arbor/ioctl.h"
#include "arbor_cli.h"

#define DEDUPE_CHUNK (128u << 10)

static int parse_u64(const char *s, const char *what, uint64_t *v)
{
	char *end;

	errno = 0;
	*v = strtoull(s, &end, 0);
	if (errno || end == s || *end || *s == '-') {
		fprintf(stderr, "arbor: bad %s '%s'\n", what, s);
		return -1;
	}
	return 0;
}

/* the daemon behind fd shares in copy_file_range (ARB_IOC_VERSION 13) */
static int daemon_shares(int fd, const char *path)
{
	struct arb_ioc_generation g;

	memset(&g, 0, sizeof(g));
	if (cli_ioctl(fd, path, ARB_IOC_GET_GENERATION, &g, "generation"))
		return -1;
	if (g.version < 13) {
		fprintf(stderr, "arbor: %s: the daemon (control version %u) "
				"copies instead of sharing; remount with a newer "
				"arborfs\n", path, g.version);
		return -1;
	}
	return 0;
}

static void reflink_usage(FILE *f)
{
	fprintf(f, "usage: arbor reflink SRC DST [--range SRC_OFF LEN DST_OFF]\n");
}

int cli_reflink(int argc, char **argv)
{
	uint64_t soff = 0, doff = 0, len = 0, bs, end;
	bool range = false;
	struct stat ss, ds;
	struct statvfs sv;
	int sfd = -1, dfd = -1, rc = 1;
	loff_t si, di;

	if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		reflink_usage(stdout);
		return 0;
	}
	if (argc == 7 && !strcmp(argv[3], "--range")) {
		if (parse_u64(argv[4], "SRC_OFF", &soff) ||
		    parse_u64(argv[5], "LEN", &len) ||
		    parse_u64(argv[6], "DST_OFF", &doff))
			return 2;
		range = true;
	} else if (argc != 3) {
		reflink_usage(stderr);
		return 2;
	}
	sfd = open(argv[1], O_RDONLY | O_CLOEXEC);
	if (sfd < 0 || fstat(sfd, &ss)) {
		fprintf(stderr, "arbor: %s: %s\n", argv[1], strerror(errno));
		goto out;
	}
	if (!S_ISREG(ss.st_mode)) {
		fprintf(stderr, "arbor: %s: not a regular file\n", argv[1]);
		goto out;
	}
	if (daemon_shares(sfd, argv[1]) || fstatvfs(sfd, &sv))
		goto out;
	bs = sv.f_frsize;
	dfd = open(argv[2], O_WRONLY | O_CREAT | O_CLOEXEC | (range ? 0 : O_TRUNC),
		   0666);
	if (dfd < 0 || fstat(dfd, &ds)) {
		fprintf(stderr, "arbor: %s: %s\n", argv[2], strerror(errno));
		goto out;
	}
	if (ds.st_dev != ss.st_dev) {
		fprintf(stderr, "arbor: %s and %s: not on the same arborfs "
				"mount\n", argv[1], argv[2]);
		goto out;
	}
	if (!range)
		len = (uint64_t)ss.st_size;
	if (soff > (uint64_t)ss.st_size)
		soff = (uint64_t)ss.st_size;
	if (!len || len > (uint64_t)ss.st_size - soff)
		len = (uint64_t)ss.st_size - soff;
	end = soff + len;
	if (soff % bs || doff % bs) {
		fprintf(stderr, "arbor reflink: SRC_OFF and DST_OFF must be "
				"multiples of the block size (%" PRIu64 ")\n", bs);
		rc = 2;
		goto out;
	}
	if (len % bs && (end != (uint64_t)ss.st_size ||
			 doff + len < (uint64_t)ds.st_size)) {
		fprintf(stderr, "arbor reflink: LEN must be a multiple of the "
				"block size (%" PRIu64 ") unless the range ends "
				"at the end of SRC and reaches the end of DST\n",
			bs);
		rc = 2;
		goto out;
	}
	if (ss.st_ino == ds.st_ino && soff < doff + len && doff < end) {
		fprintf(stderr, "arbor reflink: the ranges overlap\n");
		rc = 2;
		goto out;
	}
	si = (loff_t)soff;
	di = (loff_t)doff;
	while ((uint64_t)si < end) {
		ssize_t n = copy_file_range(sfd, &si, dfd, &di,
					    (size_t)(end - (uint64_t)si), 0);
		if (n < 0) {
			fprintf(stderr, "arbor: reflink %s to %s: %s\n",
				argv[1], argv[2], strerror(errno));
			goto out;
		}
		if (n == 0)
			break; /* the source shrank meanwhile */
	}
	rc = 0;
out:
	if (sfd >= 0)
		close(sfd);
	if (dfd >= 0)
		close(dfd);
	return rc;
}

/* ---- dedupe ---------------------------------------------------------------- */

struct dd_file {
	char *path;
	uint64_t size;
};

struct dd_chunk {
	uint64_t hash;
	uint32_t file;
	uint64_t off;
};

static struct dd_file *files;
static size_t nfiles, capfiles;
static dev_t dd_dev;
static bool dd_have_dev;

static int add_file(const char *path, const struct stat *st)
{
	if (!S_ISREG(st->st_mode))
		return 0;
	if (!dd_have_dev) {
		dd_dev = st->st_dev;
		dd_have_dev = true;
	} else if (st->st_dev != dd_dev) {
		fprintf(stderr, "arbor dedupe: %s: not on the same mount as "
				"the others, left out\n", path);
		return 0;
	}
	if (nfiles == capfiles) {
		size_t cap = capfiles ? 2 * capfiles : 64;
		void *p = realloc(files, cap * sizeof(*files));
		if (!p)
			return -1;
		files = p;
		capfiles = cap;
	}
	files[nfiles].path = strdup(path);
	if (!files[nfiles].path)
		return -1;
	files[nfiles++].size = (uint64_t)st->st_size;
	return 0;
}

static int walk_one(const char *path, const struct stat *st, int type,
		    struct FTW *ftw)
{
	(void)ftw;
	if (type == FTW_F)
		return add_file(path, st) ? -1 : 0;
	return 0;
}

/* 64-bit FNV-1a: a hash to find candidates; the daemon compares bytes */
static uint64_t fnv(const uint8_t *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ULL;
	return h;
}

static int cmp_chunk(const void *a, const void *b)
{
	const struct dd_chunk *x = a, *y = b;

	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	if (x->file != y->file)
		return x->file < y->file ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* one ARB_IOC_DEDUPE_RANGE; 0 shared, 1 differs, -1 failed (said) */
static int dedupe_one(int sfd, uint64_t soff, int dfd, const char *dpath,
		      uint64_t doff, uint64_t len, uint64_t *bytes)
{
	struct arb_ioc_dedupe_range a;

	memset(&a, 0, sizeof(a));
	a.src_fd = sfd;
	a.src_off = soff;
	a.len = len;
	a.dst_off = doff;
	if (cli_ioctl(dfd, dpath, ARB_IOC_DEDUPE_RANGE, &a, "dedupe"))
		return -1;
	*bytes = a.bytes;
	return a.status == ARB_IOC_DEDUPE_DIFFERS ? 1 : 0;
}

static int open_dst(const char *path)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);

	/* the kernel's rule: or owned by the caller (the daemon checks) */
	if (fd < 0 && (errno == EACCES || errno == EPERM || errno == EROFS ||
		       errno == ETXTBSY))
		fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		fprintf(stderr, "arbor: %s: %s\n", path, strerror(errno));
	return fd;
}

/* free bytes after two commits (the second releases what the first
 * freed); false when the caller may not commit (ARB_IOC_SYNC is root's) */
static bool free_after_commit(int fd, uint64_t *bytes)
{
	struct arb_ioc_sync s;
	struct statvfs sv;

	for (int i = 0; i < 2; i++) {
		memset(&s, 0, sizeof(s));
		if (ioctl(fd, ARB_IOC_SYNC, &s))
			return false;
	}
	if (fstatvfs(fd, &sv))
		return false;
	*bytes = (uint64_t)sv.f_bfree * sv.f_frsize;
	return true;
}

static int dedupe_range(int argc, char **argv)
{
	uint64_t soff, len, doff, bytes = 0;
	int sfd = -1, dfd = -1, rc = 1, r;

	/* --range SRC SRC_OFF LEN DST DST_OFF */
	if (argc != 7) {
		fprintf(stderr, "usage: arbor dedupe --range SRC SRC_OFF LEN DST "
				"DST_OFF\n");
		return 2;
	}
	if (parse_u64(argv[3], "SRC_OFF", &soff) ||
	    parse_u64(argv[4], "LEN", &len) ||
	    parse_u64(argv[6], "DST_OFF", &doff))
		return 2;
	sfd = open(argv[2], O_RDONLY | O_CLOEXEC);
	if (sfd < 0) {
		fprintf(stderr, "arbor: %s: %s\n", argv[2], strerror(errno));
		goto out;
	}
	dfd = open_dst(argv[5]);
	if (dfd < 0)
		goto out;
	r = dedupe_one(sfd, soff, dfd, argv[5], doff, len, &bytes);
	if (r < 0)
		goto out;
	if (r == 1) {
		printf("differs: nothing changed\n");
		rc = 3;
	} else {
		printf("deduplicated %" PRIu64 " bytes\n", bytes);
		rc = 0;
	}
out:
	if (sfd >= 0)
		close(sfd);
	if (dfd >= 0)
		close(dfd);
	return rc;
}

int cli_dedupe(int argc, char **argv)
{
	static const struct option lo[] = { { "recursive", 0, 0, 'r' },
					    { "dry-run", 0, 0, 'n' },
					    { "help", 0, 0, 'h' },
					    { 0, 0, 0, 0 } };
	bool recursive = false, dry = false;
	struct dd_chunk *ch = NULL;
	size_t nch = 0, capch = 0, i, j;
	uint64_t shared = 0, candidates = 0, differ = 0, before = 0, after = 0;
	bool measured = false;
	uint8_t *buf = NULL;
	int c, rc = 1, probe = -1;

	if (argc > 1 && !strcmp(argv[1], "--range"))
		return dedupe_range(argc, argv);
	optind = 1;
	while ((c = getopt_long(argc, argv, "rnh", lo, NULL)) != -1) {
		switch (c) {
		case 'r': recursive = true; break;
		case 'n': dry = true; break;
		case 'h':
			printf("usage: arbor dedupe [-r] [--dry-run] PATH...\n"
			       "       arbor dedupe --range SRC SRC_OFF LEN DST "
			       "DST_OFF\n");
			return 0;
		default: return 2;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "usage: arbor dedupe [-r] [--dry-run] PATH...\n");
		return 2;
	}
	nfiles = 0;
	for (int a = optind; a < argc; a++) {
		struct stat st;

		if (stat(argv[a], &st)) {
			fprintf(stderr, "arbor: %s: %s\n", argv[a],
				strerror(errno));
			goto out;
		}
		if (S_ISDIR(st.st_mode)) {
			if (!recursive) {
				fprintf(stderr, "arbor dedupe: %s: a directory "
						"(-r to go into it)\n", argv[a]);
				goto out;
			}
			if (nftw(argv[a], walk_one, 64, FTW_PHYS | FTW_MOUNT)) {
				fprintf(stderr, "arbor: %s: %s\n", argv[a],
					strerror(errno));
				goto out;
			}
		} else if (add_file(argv[a], &st)) {
			goto out;
		}
	}
	if (!nfiles) {
		printf("no regular files\n");
		rc = 0;
		goto out;
	}
	probe = cli_open_mount(files[0].path);
	if (probe < 0)
		goto out;
	buf = malloc(DEDUPE_CHUNK);
	if (!buf)
		goto out;
	/* hash the whole chunks */
	for (i = 0; i < nfiles; i++) {
		int fd = open(files[i].path, O_RDONLY | O_CLOEXEC);
		uint64_t off;

		if (fd < 0) {
			fprintf(stderr, "arbor: %s: %s (left out)\n",
				files[i].path, strerror(errno));
			continue;
		}
		for (off = 0; off + DEDUPE_CHUNK <= files[i].size;
		     off += DEDUPE_CHUNK) {
			if (pread(fd, buf, DEDUPE_CHUNK, (off_t)off) !=
			    (ssize_t)DEDUPE_CHUNK)
				break;
			if (nch == capch) {
				size_t cap = capch ? 2 * capch : 1024;
				void *p = realloc(ch, cap * sizeof(*ch));
				if (!p) {
					close(fd);
					goto out;
				}
				ch = p;
				capch = cap;
			}
			ch[nch++] = (struct dd_chunk){ fnv(buf, DEDUPE_CHUNK),
						       (uint32_t)i, off };
		}
		close(fd);
	}
	qsort(ch, nch, sizeof(*ch), cmp_chunk);
	if (!dry)
		measured = free_after_commit(probe, &before);
	/* each run of equal hashes: its first chunk is the source */
	for (i = 0; i < nch; i = j) {
		int sfd = -1;

		for (j = i + 1; j < nch && ch[j].hash == ch[i].hash; j++)
			;
		if (j - i < 2)
			continue;
		candidates += (j - i - 1) * (uint64_t)DEDUPE_CHUNK;
		if (dry)
			continue;
		sfd = open(files[ch[i].file].path, O_RDONLY | O_CLOEXEC);
		if (sfd < 0)
			continue;
		for (size_t k = i + 1; k < j; k++) {
			const char *dp = files[ch[k].file].path;
			uint64_t got = 0;
			int dfd = open_dst(dp), r;

			if (dfd < 0)
				continue;
			r = dedupe_one(sfd, ch[i].off, dfd, dp, ch[k].off,
				       DEDUPE_CHUNK, &got);
			close(dfd);
			if (r == 1) {
				differ += DEDUPE_CHUNK;
				printf("%s at %" PRIu64 ": differs from %s at "
				       "%" PRIu64 " (same hash), left alone\n",
				       dp, ch[k].off, files[ch[i].file].path,
				       ch[i].off);
			} else if (r == 0) {
				shared += got;
			}
		}
		close(sfd);
	}
	if (dry) {
		printf("%zu files, %zu chunks of %u KiB: %" PRIu64
		       " bytes could be shared (dry run: nothing changed)\n",
		       nfiles, nch, DEDUPE_CHUNK >> 10, candidates);
	} else {
		if (measured)
			measured = free_after_commit(probe, &after);
		printf("%zu files, %zu chunks of %u KiB: %" PRIu64
		       " bytes deduplicated", nfiles, nch, DEDUPE_CHUNK >> 10,
		       shared);
		if (measured)
			printf(", %" PRIu64 " bytes reclaimed",
			       after > before ? after - before : 0);
		else
			printf(" (reclaimed at the next commit)");
		if (differ)
			printf(", %" PRIu64 " bytes differed", differ);
		printf("\n");
	}
	rc = 0;
out:
	if (probe >= 0)
		close(probe);
	for (i = 0; i < nfiles; i++)
		free(files[i].path);
	free(files);
	files = NULL;
	free(ch);
	free(buf);
	return rc;
}
