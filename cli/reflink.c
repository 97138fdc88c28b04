/* SPDX-License-Identifier: MIT */
/*
 * reflink.c - "arbor reflink" and "arbor dedupe": sharing data on a
 * mounted arborfs, or with --image IMG in an unmounted image through the
 * library (arb_fs_copy_range with ARB_COPY_SHARE_ONLY,
 * arb_fs_dedupe_range; paths start at the top-level subvolume).
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

#include "arbor/arbor.h"
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

/*
 * Take "--image IMG" (or "--image=IMG") out of argv wherever it is, so
 * that the positional forms stay as they are: 0 (*image NULL when
 * absent), or 2 after a message.
 */
static int take_image(const char *cmd, int *argc, char **argv,
		      const char **image)
{
	int i, j;

	*image = NULL;
	for (i = j = 1; i < *argc; i++) {
		if (!strcmp(argv[i], "--image")) {
			if (i + 1 >= *argc || *image) {
				fprintf(stderr, "arbor %s: --image takes one "
						"IMG\n", cmd);
				return 2;
			}
			*image = argv[++i];
		} else if (!strncmp(argv[i], "--image=", 8)) {
			if (*image || !argv[i][8]) {
				fprintf(stderr, "arbor %s: --image takes one "
						"IMG\n", cmd);
				return 2;
			}
			*image = argv[i] + 8;
		} else {
			argv[j++] = argv[i];
		}
	}
	*argc = j;
	argv[j] = NULL;
	return 0;
}

/*
 * What reflink refuses rather than copy, on a mount and in an image: the
 * range [soff, soff + len) (len 0 or past the end: to SRC's end) cut at
 * SRC's end; 0, or 2 after a message.
 */
static int check_range(uint64_t bs, uint64_t ssize, uint64_t dsize,
		       bool same, uint64_t *soff, uint64_t *len, uint64_t doff)
{
	uint64_t end;

	if (*soff > ssize)
		*soff = ssize;
	if (!*len || *len > ssize - *soff)
		*len = ssize - *soff;
	end = *soff + *len;
	if (*soff % bs || doff % bs) {
		fprintf(stderr, "arbor reflink: SRC_OFF and DST_OFF must be "
				"multiples of the block size (%" PRIu64 ")\n", bs);
		return 2;
	}
	if (*len % bs && (end != ssize || doff + *len < dsize)) {
		fprintf(stderr, "arbor reflink: LEN must be a multiple of the "
				"block size (%" PRIu64 ") unless the range ends "
				"at the end of SRC and reaches the end of DST\n",
			bs);
		return 2;
	}
	if (same && *soff < doff + *len && doff < end) {
		fprintf(stderr, "arbor reflink: the ranges overlap\n");
		return 2;
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
	fprintf(f, "usage: arbor reflink [--image IMG] SRC DST [--range SRC_OFF "
		   "LEN DST_OFF]\n"
		   "  DST (created or emptied) shares SRC's data, or DST's LEN "
		   "bytes at\n"
		   "  DST_OFF share SRC's at SRC_OFF; --image: in an unmounted "
		   "image,\n"
		   "  paths from its top-level subvolume\n");
}

/* the file at path in the image: its inode and attributes; 1 after a
 * message naming path */
static int image_file(struct arb_fs *fs, const char *image, const char *path,
		      uint64_t *ino, struct arb_stat *st)
{
	int ret = cli_image_resolve(fs, path, ino);

	if (!ret)
		ret = arb_fs_getattr(fs, *ino, st);
	if (ret) {
		fprintf(stderr, "arbor: %s: %s: %s\n", image, path,
			ret == -ENOENT ? "no such file or directory in the "
					 "image"
				       : arb_reason(ret, NULL));
		return 1;
	}
	if (!S_ISREG(st->mode)) {
		fprintf(stderr, "arbor: %s: %s: not a regular file\n", image,
			path);
		return 1;
	}
	return 0;
}

/* reflink in an unmounted image */
static int image_reflink(const char *image, const char *src, const char *dst,
			 bool range, uint64_t soff, uint64_t len, uint64_t doff)
{
	static const struct arb_cred root = { 0, 0 };
	struct arb_fs_info fi;
	struct arb_stat ss, ds;
	struct arb_fs *fs;
	uint64_t sino, dino, end;
	int rc = 1, ret;

	if (cli_image_open(image, true, &fs))
		return 1;
	if (image_file(fs, image, src, &sino, &ss))
		goto out;
	ret = cli_image_resolve(fs, dst, &dino);
	if (ret == -ENOENT) {
		/* create it, as open(O_CREAT) would: 0644, root's */
		char *d = strdup(dst), *slash;
		const char *dir = "/", *name = d;
		uint64_t dirino;

		if (!d) {
			perror("arbor");
			goto out;
		}
		while (strlen(d) > 1 && d[strlen(d) - 1] == '/')
			d[strlen(d) - 1] = '\0';
		slash = strrchr(d, '/');
		if (slash) {
			*slash = '\0';
			dir = slash == d ? "/" : d;
			name = slash + 1;
		}
		ret = cli_image_resolve(fs, dir, &dirino);
		if (!ret)
			ret = arb_fs_mknod(fs, dirino, name, S_IFREG | 0644, 0,
					   &root, &ds);
		free(d);
		if (ret) {
			fprintf(stderr, "arbor: %s: %s: %s\n", image, dst,
				ret == -ENOENT ? "no such directory in the image"
					       : arb_reason(ret, NULL));
			goto out;
		}
		dino = ds.ino;
	} else if (ret) {
		fprintf(stderr, "arbor: %s: %s: %s\n", image, dst,
			ret == -ENOENT ? "no such file or directory in the image"
				       : arb_reason(ret, NULL));
		goto out;
	}
	if (image_file(fs, image, dst, &dino, &ds))
		goto out;
	if (arb_fs_info(fs, &fi))
		goto out;
	if (!range && ds.size) {
		struct arb_setattr sa = { .size = 0 };

		ret = arb_fs_setattr(fs, dino, &sa, ARB_SET_SIZE, &root, &ds);
		if (ret) {
			fprintf(stderr, "arbor: %s: %s: emptying it: %s\n",
				image, dst, arb_reason(ret, NULL));
			goto out;
		}
	}
	if (!range)
		len = ss.size;
	rc = check_range(fi.sectorsize, ss.size, ds.size, sino == dino, &soff,
			 &len, doff);
	if (rc)
		goto out;
	rc = 1;
	end = soff + len;
	while (soff < end) {
		ssize_t n = arb_fs_copy_range(fs, sino, soff, dino, doff,
					      end - soff, ARB_COPY_SHARE_ONLY);

		if (n < 0) {
			fprintf(stderr, "arbor: %s: reflink %s to %s: %s\n",
				image, src, dst, arb_reason((int)n, NULL));
			goto out;
		}
		if (n == 0)
			break;
		soff += (uint64_t)n;
		doff += (uint64_t)n;
	}
	rc = 0;
out:
	return cli_image_close(image, fs, rc);
}

int cli_reflink(int argc, char **argv)
{
	uint64_t soff = 0, doff = 0, len = 0, bs, end;
	bool range = false;
	const char *image;
	struct stat ss, ds;
	struct statvfs sv;
	int sfd = -1, dfd = -1, rc = 1;
	loff_t si, di;

	if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		reflink_usage(stdout);
		return 0;
	}
	if (take_image("reflink", &argc, argv, &image))
		return 2;
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
	if (image)
		return image_reflink(image, argv[1], argv[2], range, soff, len,
				     doff);
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
	rc = check_range(bs, (uint64_t)ss.st_size, (uint64_t)ds.st_size,
			 ss.st_ino == ds.st_ino, &soff, &len, doff);
	if (rc)
		goto out;
	rc = 1;
	end = soff + len;
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
	uint64_t ino; /* in the image */
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
/* --image: the image and the filesystem in it (NULL: on a mount) */
static const char *dd_image;
static struct arb_fs *dd_fs;

static int add_file(const char *path, const struct stat *st)
{
	if (!S_ISREG(st->st_mode))
		return 0;
	if (dd_fs) {
		/* (st_ino is the image's inode number) */
	} else if (!dd_have_dev) {
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
	files[nfiles].ino = (uint64_t)st->st_ino;
	files[nfiles++].size = (uint64_t)st->st_size;
	return 0;
}

/* ---- the same in an image ---- */

struct dd_dent {
	char **names;
	size_t nr, cap;
	int err;
};

static int dd_collect(void *ctx, const char *name, const struct arb_stat *st,
		      uint64_t next_off)
{
	struct dd_dent *l = ctx;

	(void)st;
	(void)next_off;
	if (!strcmp(name, ".") || !strcmp(name, ".."))
		return 0;
	if (l->nr == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 32;
		char **n = realloc(l->names, cap * sizeof(*n));

		if (!n) {
			l->err = -ENOMEM;
			return 1;
		}
		l->names = n;
		l->cap = cap;
	}
	l->names[l->nr] = strdup(name);
	if (!l->names[l->nr]) {
		l->err = -ENOMEM;
		return 1;
	}
	l->nr++;
	return 0;
}

/* path (inode ino, attributes a) of the image and, for a directory with
 * recursive, everything under it; 0 or -1 after a message */
static int image_add(const char *path, uint64_t ino, const struct arb_stat *a,
		     bool recursive)
{
	struct dd_dent l = { 0 };
	int ret, rc = 0;

	if (!S_ISDIR(a->mode)) {
		struct stat st;

		memset(&st, 0, sizeof(st));
		st.st_mode = a->mode;
		st.st_ino = (ino_t)ino;
		st.st_size = (off_t)a->size;
		return add_file(path, &st);
	}
	if (!recursive) {
		fprintf(stderr, "arbor dedupe: %s: a directory (-r to go into "
				"it)\n", path);
		return -1;
	}
	ret = arb_fs_readdir(dd_fs, ino, 0, false, dd_collect, &l);
	if (!ret)
		ret = l.err;
	if (ret) {
		fprintf(stderr, "arbor: %s: %s: %s\n", dd_image, path,
			arb_reason(ret, NULL));
		rc = -1;
	}
	for (size_t i = 0; i < l.nr; i++) {
		struct arb_stat cs;
		char *cp;

		if (!rc) {
			ret = arb_fs_lookup(dd_fs, ino, l.names[i], &cs);
			if (asprintf(&cp, "%s%s%s", path,
				     path[strlen(path) - 1] == '/' ? "" : "/",
				     l.names[i]) < 0) {
				rc = -1;
			} else {
				if (ret) {
					fprintf(stderr, "arbor: %s: %s: %s\n",
						dd_image, cp,
						arb_reason(ret, NULL));
					rc = -1;
				} else if (!S_ISLNK(cs.mode)) {
					rc = image_add(cp, cs.ino, &cs, true);
				}
				free(cp);
			}
		}
		free(l.names[i]);
	}
	free(l.names);
	return rc;
}

/* one argument of dedupe --image: 0 or -1 after a message naming it */
static int image_arg(const char *path, bool recursive)
{
	struct arb_stat a;
	uint64_t ino;
	int ret = cli_image_resolve(dd_fs, path, &ino);

	if (!ret)
		ret = arb_fs_getattr(dd_fs, ino, &a);
	if (ret) {
		fprintf(stderr, "arbor: %s: %s: %s\n", dd_image, path,
			ret == -ENOENT ? "no such file or directory in the image"
				       : arb_reason(ret, NULL));
		return -1;
	}
	return image_add(path, ino, &a, recursive);
}

/* the chunk at off of file i into buf; 0 or -1 */
static int image_read(size_t i, uint64_t off, uint8_t *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = arb_fs_read(dd_fs, files[i].ino, buf + got,
					len - got, off + got);
		if (n <= 0)
			return -1;
		got += (size_t)n;
	}
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

/* one arb_fs_dedupe_range in the image; 0 shared, 1 differs, -1 failed
 * (said) */
static int image_dedupe_one(uint64_t sino, uint64_t soff, uint64_t dino,
			    const char *dpath, uint64_t doff, uint64_t len,
			    uint64_t *bytes)
{
	int ret = arb_fs_dedupe_range(dd_fs, sino, soff, dino, doff, len,
				      bytes);

	if (ret < 0) {
		fprintf(stderr, "arbor: %s: %s: dedupe: %s\n", dd_image, dpath,
			arb_reason(ret, NULL));
		return -1;
	}
	return ret == ARB_DEDUPE_DIFFERS ? 1 : 0;
}

/* free bytes of the image after two commits (the second releases what
 * the first freed) */
static bool image_free_after_commit(uint64_t *bytes)
{
	struct statvfs sv;

	for (int i = 0; i < 2; i++)
		if (arb_fs_commit(dd_fs, NULL))
			return false;
	if (arb_fs_statfs(dd_fs, &sv))
		return false;
	*bytes = (uint64_t)sv.f_bfree * sv.f_frsize;
	return true;
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

/* a regular file of the image for dedupe --range; -1 after a message */
static int image_arg_file(const char *path, uint64_t *ino, struct arb_stat *a)
{
	int ret = cli_image_resolve(dd_fs, path, ino);

	if (!ret)
		ret = arb_fs_getattr(dd_fs, *ino, a);
	if (ret) {
		fprintf(stderr, "arbor: %s: %s: %s\n", dd_image, path,
			ret == -ENOENT ? "no such file or directory in the image"
				       : arb_reason(ret, NULL));
		return -1;
	}
	if (!S_ISREG(a->mode)) {
		fprintf(stderr, "arbor: %s: %s: not a regular file\n",
			dd_image, path);
		return -1;
	}
	return 0;
}

static int dedupe_range(int argc, char **argv)
{
	uint64_t soff, len, doff, bytes = 0;
	int sfd = -1, dfd = -1, rc = 1, r;

	/* --range SRC SRC_OFF LEN DST DST_OFF */
	if (argc != 7) {
		fprintf(stderr, "usage: arbor dedupe [--image IMG] --range SRC "
				"SRC_OFF LEN DST DST_OFF\n");
		return 2;
	}
	if (parse_u64(argv[3], "SRC_OFF", &soff) ||
	    parse_u64(argv[4], "LEN", &len) ||
	    parse_u64(argv[6], "DST_OFF", &doff))
		return 2;
	if (dd_image) {
		struct arb_stat a;
		uint64_t sino, dino;

		if (cli_image_open(dd_image, true, &dd_fs))
			return 1;
		if (image_arg_file(argv[2], &sino, &a) ||
		    image_arg_file(argv[5], &dino, &a)) {
			rc = 1;
		} else {
			r = image_dedupe_one(sino, soff, dino, argv[5], doff,
					     len, &bytes);
			rc = r < 0 ? 1 : r == 1 ? 3 : 0;
			if (r == 1)
				printf("differs: nothing changed\n");
			else if (r == 0)
				printf("deduplicated %" PRIu64 " bytes\n",
				       bytes);
		}
		rc = cli_image_close(dd_image, dd_fs, rc);
		dd_fs = NULL;
		return rc;
	}
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

	if (take_image("dedupe", &argc, argv, &dd_image))
		return 2;
	if (argc > 1 && !strcmp(argv[1], "--range"))
		return dedupe_range(argc, argv);
	optind = 1;
	while ((c = getopt_long(argc, argv, "rnh", lo, NULL)) != -1) {
		switch (c) {
		case 'r': recursive = true; break;
		case 'n': dry = true; break;
		case 'h':
			printf("usage: arbor dedupe [--image IMG] [-r] "
			       "[--dry-run] PATH...\n"
			       "       arbor dedupe [--image IMG] --range SRC "
			       "SRC_OFF LEN DST DST_OFF\n"
			       "  share identical 128 KiB chunks (compared "
			       "byte for byte); --image: in an\n"
			       "  unmounted image, paths from its top-level "
			       "subvolume\n");
			return 0;
		default: return 2;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "usage: arbor dedupe [--image IMG] [-r] "
				"[--dry-run] PATH...\n");
		return 2;
	}
	nfiles = 0;
	if (dd_image && cli_image_open(dd_image, !dry, &dd_fs))
		return 1;
	for (int a = optind; dd_fs && a < argc; a++)
		if (image_arg(argv[a], recursive))
			goto out;
	for (int a = optind; !dd_fs && a < argc; a++) {
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
	if (!dd_fs) {
		probe = cli_open_mount(files[0].path);
		if (probe < 0)
			goto out;
	}
	buf = malloc(DEDUPE_CHUNK);
	if (!buf)
		goto out;
	/* hash the whole chunks */
	for (i = 0; i < nfiles; i++) {
		int fd = dd_fs ? -2 : open(files[i].path, O_RDONLY | O_CLOEXEC);
		uint64_t off;

		if (fd == -1) {
			fprintf(stderr, "arbor: %s: %s (left out)\n",
				files[i].path, strerror(errno));
			continue;
		}
		for (off = 0; off + DEDUPE_CHUNK <= files[i].size;
		     off += DEDUPE_CHUNK) {
			if (dd_fs ? image_read(i, off, buf, DEDUPE_CHUNK) != 0
				  : pread(fd, buf, DEDUPE_CHUNK, (off_t)off) !=
					    (ssize_t)DEDUPE_CHUNK)
				break;
			if (nch == capch) {
				size_t cap = capch ? 2 * capch : 1024;
				void *p = realloc(ch, cap * sizeof(*ch));
				if (!p) {
					if (fd >= 0)
						close(fd);
					goto out;
				}
				ch = p;
				capch = cap;
			}
			ch[nch++] = (struct dd_chunk){ fnv(buf, DEDUPE_CHUNK),
						       (uint32_t)i, off };
		}
		if (fd >= 0)
			close(fd);
	}
	qsort(ch, nch, sizeof(*ch), cmp_chunk);
	if (!dry)
		measured = dd_fs ? image_free_after_commit(&before)
				 : free_after_commit(probe, &before);
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
		sfd = dd_fs ? -2 : open(files[ch[i].file].path,
					O_RDONLY | O_CLOEXEC);
		if (sfd == -1)
			continue;
		for (size_t k = i + 1; k < j; k++) {
			const char *dp = files[ch[k].file].path;
			uint64_t got = 0;
			int dfd, r;

			if (dd_fs) {
				r = image_dedupe_one(files[ch[i].file].ino,
						     ch[i].off,
						     files[ch[k].file].ino, dp,
						     ch[k].off, DEDUPE_CHUNK,
						     &got);
			} else {
				dfd = open_dst(dp);
				if (dfd < 0)
					continue;
				r = dedupe_one(sfd, ch[i].off, dfd, dp,
					       ch[k].off, DEDUPE_CHUNK, &got);
				close(dfd);
			}
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
		if (sfd >= 0)
			close(sfd);
	}
	if (dry) {
		printf("%zu files, %zu chunks of %u KiB: %" PRIu64
		       " bytes could be shared (dry run: nothing changed)\n",
		       nfiles, nch, DEDUPE_CHUNK >> 10, candidates);
	} else {
		if (measured)
			measured = dd_fs ? image_free_after_commit(&after)
					 : free_after_commit(probe, &after);
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
	if (dd_fs) {
		rc = cli_image_close(dd_image, dd_fs, rc);
		dd_fs = NULL;
	}
	for (i = 0; i < nfiles; i++)
		free(files[i].path);
	free(files);
	files = NULL;
	free(ch);
	free(buf);
	return rc;
}
