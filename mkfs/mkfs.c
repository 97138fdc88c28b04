// SPDX-License-Identifier: MIT
/*
 * mkfs.c - mkfs.arborfs: format an image file or a block device.
 *
 *   mkfs.arborfs [-s SIZE] [-L LABEL] [-U UUID] [-n NODESIZE] [-m single|dup]
 *                [-r DIR] [-f] [-q] IMAGE
 *
 * Everything written to the disk is written by the library: arb_mkfs()
 * formats, and -r DIR fills the new filesystem with a copy of DIR through
 * the same arb_fs_*() calls the FUSE daemon makes.  This file parses
 * arguments, refuses to overwrite a filesystem it recognises unless forced,
 * and reports what it made.
 *
 * Exit status (as mke2fs and mkfs.btrfs): 0 success, 1 usage or
 * operational error.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <uuid/uuid.h>

#include <arbor/arbor.h>
#include <arbor/dev.h>

#include "mkfs_help.h"

#define PROG "mkfs.arborfs"

/* a new image file gets this size when -s is not given */
#define DEFAULT_NEW_SIZE (1ULL << 30)
/* the label is stored NUL padded in 256 bytes */
#define LABEL_MAX 255
#define NODESIZE_MIN 4096
#define NODESIZE_MAX 65536

struct mkfs_args {
	const char *image;
	uint64_t size; /* 0 = not given */
	uint32_t nodesize; /* 0 = library default */
	unsigned meta_copies; /* -m: 1 single, 2 dup; 0 = default (dup) */
	const char *label;
	const char *rootdir; /* -r: populate from this directory */
	uuid_t uuid;
	bool uuid_set;
	bool force;
	bool quiet;
};

/* the text of docs/man/mkfs.arborfs.help, which makes the man page too */
static void usage(FILE *f)
{
	fputs(MKFS_ARBORFS_HELP, f);
}

static void die_usage(const char *fmt, const char *arg)
{
	fprintf(stderr, PROG ": ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry '" PROG " -h' for more information.\n");
	exit(1);
}

/* "4096", "16K", "1.5G" is not accepted; binary units K M G T [iB|B] */
/* the library's parser, as a predicate */
static bool parse_size(const char *s, uint64_t *out)
{
	return arb_parse_size(s, out) == 0;
}

static void parse_args(int argc, char **argv, struct mkfs_args *a)
{
	static const struct option lo[] = { { "help", 0, 0, 'h' },
					    { "version", 0, 0, 'V' },
					    { "no-wait", 0, 0, 'W' },
					    { 0, 0, 0, 0 } };
	uint64_t v;
	int c;

	memset(a, 0, sizeof(*a));
	/* right after an unmount the daemon may still be finishing */
	arb_dev_set_lock_wait(10000);
	while ((c = getopt_long(argc, argv, "s:L:U:n:m:r:fqhV", lo, NULL)) !=
	       -1) {
		switch (c) {
		case 's':
			if (!parse_size(optarg, &v) || v == 0)
				die_usage("invalid size '%s': want a positive number of bytes with an optional K, M, G or T suffix",
					  optarg);
			a->size = v;
			break;
		case 'L':
			if (strlen(optarg) > LABEL_MAX)
				die_usage("label '%s' is too long (at most 255 bytes)",
					  optarg);
			a->label = optarg;
			break;
		case 'U':
			if (strcmp(optarg, "random") == 0) {
				uuid_generate(a->uuid);
			} else if (uuid_parse(optarg, a->uuid) != 0) {
				die_usage("invalid UUID '%s': want the form 01234567-89ab-cdef-0123-456789abcdef",
					  optarg);
			} else if (uuid_is_null(a->uuid)) {
				die_usage("the nil UUID '%s' cannot identify a filesystem",
					  optarg);
			}
			a->uuid_set = true;
			break;
		case 'n':
			if (!parse_size(optarg, &v) || v < NODESIZE_MIN ||
			    v > NODESIZE_MAX || (v & (v - 1)))
				die_usage("invalid node size '%s': want a power of two from 4K to 64K",
					  optarg);
			a->nodesize = (uint32_t)v;
			break;
		case 'm':
			if (!strcmp(optarg, "single"))
				a->meta_copies = 1;
			else if (!strcmp(optarg, "dup"))
				a->meta_copies = 2;
			else
				die_usage("invalid metadata profile '%s': want single or dup",
					  optarg);
			break;
		case 'r': {
			struct stat rst;

			if (stat(optarg, &rst) != 0)
				die_usage("cannot use -r '%s': no such directory",
					  optarg);
			if (!S_ISDIR(rst.st_mode))
				die_usage("cannot use -r '%s': not a directory",
					  optarg);
			a->rootdir = optarg;
			break;
		}
		case 'f':
			a->force = true;
			break;
		case 'q':
			a->quiet = true;
			break;
		case 'W':
			arb_dev_set_lock_wait(0);
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case 'V':
			printf(PROG " (arborfs) %s\n", ARBORFS_VERSION);
			exit(0);
		default:
			fprintf(stderr, "Try '" PROG " -h' for more information.\n");
			exit(1);
		}
	}
	if (optind >= argc)
		die_usage("%s", "no IMAGE given");
	if (optind + 1 < argc)
		die_usage("unexpected argument '%s'", argv[optind + 1]);
	a->image = argv[optind];
	if (!*a->image)
		die_usage("%s", "empty IMAGE name");
	if (!a->uuid_set)
		uuid_generate(a->uuid);
}

static bool read_at(int fd, void *buf, size_t len, off_t off)
{
	ssize_t n = pread(fd, buf, len, off);

	return n == (ssize_t)len;
}

/*
 * Which filesystem the target already holds, by its magic, or NULL.
 * An arborfs whose mkfs never finished ("ARBORFS?") is not a filesystem.
 */
static const char *detect_fs(int fd)
{
	unsigned char b[8];
	uint16_t m16;

	if (read_at(fd, b, 8, 64 * 1024 + 32) && memcmp(b, "ARBORFS!", 8) == 0)
		return "arborfs";
	if (read_at(fd, b, 8, 128 * 1024 + 32) && memcmp(b, "ARBORFS!", 8) == 0)
		return "arborfs";
	if (read_at(fd, b, 8, 65536 + 64) && memcmp(b, "_BHRfS_M", 8) == 0)
		return "btrfs";
	if (read_at(fd, b, 2, 1024 + 56)) {
		m16 = (uint16_t)(b[0] | b[1] << 8);
		if (m16 == 0xEF53)
			return "ext2/ext3/ext4";
	}
	if (read_at(fd, b, 4, 0) && memcmp(b, "XFSB", 4) == 0)
		return "xfs";
	return NULL;
}

static void human_size(uint64_t v, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB",
					     "PiB", "EiB" };
	double d = (double)v;
	unsigned u = 0;

	while (d >= 1024 && u < 6) {
		d /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 " B", v);
	else
		snprintf(buf, len, "%.2f %s", d, units[u]);
}

/*
 * The smallest size arb_mkfs() accepts with the options of mo, found by
 * formatting in memory (a few sparse megabytes, a dozen times), so that
 * the number stated cannot drift from the library's rule.  0 if none up
 * to 64 MiB works (or memory is short).
 */
static uint64_t min_size(const struct arb_mkfs_opts *mo)
{
	uint64_t lo = 1, hi = (64ULL << 20) / 4096; /* in 4 KiB units */
	struct arb_mkfs_opts o = *mo;
	struct arb_dev *dev;
	bool any = false;

	o.size = 0;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		bool ok;

		if (arb_dev_open_mem(mid * 4096, &dev))
			return 0;
		ok = arb_mkfs(dev, &o) == 0;
		arb_dev_destroy(dev);
		if (ok) {
			hi = mid;
			any = true;
		} else {
			lo = mid + 1;
		}
	}
	return any ? lo * 4096 : 0;
}

/* "SIZE is too small" with the minimum, for -s or the existing file */
static void too_small(const char *image, uint64_t size,
		      const struct arb_mkfs_opts *mo)
{
	uint64_t min = min_size(mo);
	char sbuf[32], mbuf[32];

	human_size(size, sbuf, sizeof(sbuf));
	if (!min) {
		fprintf(stderr, PROG ": %s: %" PRIu64 " bytes (%s) is too "
				"small for a filesystem\n",
			image, size, sbuf);
		return;
	}
	if (min % (1 << 20) == 0)
		snprintf(mbuf, sizeof(mbuf), "%" PRIu64 "M", min >> 20);
	else
		snprintf(mbuf, sizeof(mbuf), "%" PRIu64 "K", min >> 10);
	fprintf(stderr,
		PROG ": %s: %" PRIu64 " bytes (%s) is too small: the minimum "
		     "with %uK nodes is %" PRIu64 " bytes (-s %s)\n",
		image, size, sbuf, (mo->nodesize ? mo->nodesize : 16384u) >> 10,
		min, mbuf);
}

/* ---- -r DIR: copy a directory tree into the new filesystem ---------- */

/* hard links: host (dev, ino) -> arborfs inode */
struct link_map {
	struct link_ent {
		dev_t dev;
		ino_t ino;
		uint64_t arb;
	} *v;
	size_t n, cap;
};

/* directories whose times are set after their contents */
struct dir_time {
	uint64_t ino;
	struct timespec atime, mtime;
};

static struct {
	struct arb_fs *fs;
	const char *root;
	/* inode of the directory at each nftw level */
	uint64_t *dir_ino;
	size_t dir_cap;
	struct link_map links;
	struct dir_time *dirs;
	size_t ndirs, dirs_cap;
	char *buf;
	uint64_t files, bytes;
	int err;
} pop;

#define COPY_CHUNK (1024 * 1024)

static int pop_fail(const char *path, const char *what, int err)
{
	fprintf(stderr, PROG ": -r: %s: %s: %s\n", path, what, strerror(-err));
	pop.err = err;
	return FTW_STOP;
}

static uint64_t *link_find(dev_t dev, ino_t ino)
{
	for (size_t i = 0; i < pop.links.n; i++)
		if (pop.links.v[i].dev == dev && pop.links.v[i].ino == ino)
			return &pop.links.v[i].arb;
	return NULL;
}

static int link_add(dev_t dev, ino_t ino, uint64_t arb)
{
	if (pop.links.n == pop.links.cap) {
		size_t cap = pop.links.cap ? 2 * pop.links.cap : 64;
		void *v = realloc(pop.links.v, cap * sizeof(*pop.links.v));

		if (!v)
			return -ENOMEM;
		pop.links.v = v;
		pop.links.cap = cap;
	}
	pop.links.v[pop.links.n++] = (struct link_ent){ dev, ino, arb };
	return 0;
}

/* Copy the data of the regular file path into ino, keeping holes. */
static int copy_data(const char *path, uint64_t ino, off_t size)
{
	struct arb_setattr sa = { .size = (uint64_t)size };
	struct arb_cred cr = { 0, 0 };
	struct arb_stat ast;
	off_t data = 0, hole;
	int fd, ret;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	/* the size first: a hole at the end has no data to write */
	ret = arb_fs_setattr(pop.fs, ino, &sa, ARB_SET_SIZE, &cr, &ast);
	if (ret)
		goto out_close;
	while (data < size) {
		data = lseek(fd, data, SEEK_DATA);
		if (data < 0) {
			if (errno == ENXIO) /* only a hole up to the end */
				break;
			/* no SEEK_DATA here: copy everything */
			data = 0;
			hole = size;
		} else {
			hole = lseek(fd, data, SEEK_HOLE);
			if (hole < 0)
				hole = size;
		}
		while (data < hole) {
			size_t want = (size_t)(hole - data) < COPY_CHUNK
					      ? (size_t)(hole - data)
					      : COPY_CHUNK;
			ssize_t n = pread(fd, pop.buf, want, data);
			ssize_t w;

			if (n < 0) {
				ret = -errno;
				goto out_close;
			}
			if (n == 0)
				goto out_close; /* the file shrank meanwhile */
			w = arb_fs_write(pop.fs, ino, pop.buf, (size_t)n,
					 (uint64_t)data);
			if (w < 0) {
				ret = (int)w;
				goto out_close;
			}
			pop.bytes += (uint64_t)n;
			data += n;
		}
	}
out_close:
	close(fd);
	return ret;
}

static int copy_xattrs(const char *path, uint64_t ino)
{
	char *names = NULL, *val = NULL;
	ssize_t len, vlen;
	int ret = 0;

	len = llistxattr(path, NULL, 0);
	if (len <= 0)
		return 0; /* none, or not supported on the source */
	names = malloc((size_t)len);
	val = malloc(ARB_XATTR_SIZE_MAX);
	if (!names || !val) {
		ret = -ENOMEM;
		goto out;
	}
	len = llistxattr(path, names, (size_t)len);
	for (ssize_t i = 0; i < len; i += (ssize_t)strlen(names + i) + 1) {
		const char *name = names + i;

		vlen = lgetxattr(path, name, val, ARB_XATTR_SIZE_MAX);
		if (vlen < 0) {
			fprintf(stderr, PROG ": -r: %s: xattr %s not copied: %s\n",
				path, name, strerror(errno));
			continue;
		}
		ret = arb_fs_setxattr(pop.fs, ino, name, val, (size_t)vlen, 0);
		if (ret == -EOPNOTSUPP) {
			fprintf(stderr, PROG ": -r: %s: xattr %s not copied: %s\n",
				path, name, strerror(-ret));
			ret = 0;
			continue;
		}
		if (ret)
			goto out;
	}
out:
	free(names);
	free(val);
	return ret;
}

/*
 * Owner, then mode (with the bits creation may have masked, and set-id
 * bits a change of owner clears) and times.
 */
static int copy_attrs(const struct stat *st, uint64_t ino, bool times)
{
	struct arb_setattr sa = { 0 };
	struct arb_cred cr = { 0, 0 };
	struct arb_stat ast;
	unsigned valid = 0;
	int ret;

	sa.uid = st->st_uid;
	sa.gid = st->st_gid;
	ret = arb_fs_setattr(pop.fs, ino, &sa, ARB_SET_UID | ARB_SET_GID, &cr,
			     &ast);
	if (ret)
		return ret;
	if (!S_ISLNK(st->st_mode)) {
		valid |= ARB_SET_MODE;
		sa.mode = st->st_mode & 07777;
	}
	if (times) {
		valid |= ARB_SET_ATIME | ARB_SET_MTIME;
		sa.atime = st->st_atim;
		sa.mtime = st->st_mtim;
	}
	if (!valid)
		return 0;
	return arb_fs_setattr(pop.fs, ino, &sa, valid, &cr, &ast);
}

static int pop_entry(const char *path, const struct stat *st, int flag,
		     struct FTW *ftw)
{
	struct arb_cred cr = { st->st_uid, st->st_gid };
	const char *name = path + ftw->base;
	size_t level = (size_t)ftw->level;
	uint64_t parent, *linked;
	struct arb_stat ast;
	int ret;

	if (flag == FTW_DNR || flag == FTW_NS)
		return pop_fail(path, "cannot read", -EACCES);
	if (level + 1 > pop.dir_cap) {
		size_t cap = pop.dir_cap ? 2 * pop.dir_cap : 32;
		uint64_t *v = realloc(pop.dir_ino, cap * sizeof(*v));

		if (!v)
			return pop_fail(path, "out of memory", -ENOMEM);
		pop.dir_ino = v;
		pop.dir_cap = cap;
	}
	if (level == 0) {
		/* DIR itself is the root directory */
		ast.ino = ARB_ROOT_INO;
		goto dir_done;
	}
	parent = pop.dir_ino[level - 1];

	if (!S_ISDIR(st->st_mode) && st->st_nlink > 1) {
		linked = link_find(st->st_dev, st->st_ino);
		if (linked) {
			ret = arb_fs_link(pop.fs, *linked, parent, name, &ast);
			if (ret)
				return pop_fail(path, "link", ret);
			return FTW_CONTINUE;
		}
	}
	if (strlen(name) > ARB_NAME_MAX)
		return pop_fail(path, "name", -ENAMETOOLONG);

	switch (st->st_mode & S_IFMT) {
	case S_IFDIR:
		ret = arb_fs_mkdir(pop.fs, parent, name, st->st_mode & 07777,
				   &cr, &ast);
		break;
	case S_IFLNK: {
		char target[PATH_MAX + 1];
		ssize_t n = readlink(path, target, PATH_MAX);

		if (n < 0)
			return pop_fail(path, "readlink", -errno);
		target[n] = '\0';
		ret = arb_fs_symlink(pop.fs, parent, name, target, &cr, &ast);
		break;
	}
	case S_IFREG:
	case S_IFCHR:
	case S_IFBLK:
	case S_IFIFO:
	case S_IFSOCK:
		ret = arb_fs_mknod(pop.fs, parent, name, st->st_mode,
				   S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode)
					   ? (uint64_t)st->st_rdev
					   : 0,
				   &cr, &ast);
		break;
	default:
		return pop_fail(path, "unknown file type", -EINVAL);
	}
	if (ret)
		return pop_fail(path, "create", ret);
	pop.files++;
	if (S_ISREG(st->st_mode) && st->st_size > 0) {
		ret = copy_data(path, ast.ino, st->st_size);
		if (ret)
			return pop_fail(path, "copy", ret);
	}
	if (!S_ISDIR(st->st_mode) && st->st_nlink > 1 &&
	    link_add(st->st_dev, st->st_ino, ast.ino))
		return pop_fail(path, "out of memory", -ENOMEM);
	if (!S_ISDIR(st->st_mode)) {
		ret = copy_xattrs(path, ast.ino);
		if (ret)
			return pop_fail(path, "xattrs", ret);
		ret = copy_attrs(st, ast.ino, true);
		if (ret)
			return pop_fail(path, "attributes", ret);
		return FTW_CONTINUE;
	}
dir_done:
	pop.dir_ino[level] = ast.ino;
	ret = copy_xattrs(path, ast.ino);
	if (ret)
		return pop_fail(path, "xattrs", ret);
	ret = copy_attrs(st, ast.ino, false);
	if (ret)
		return pop_fail(path, "attributes", ret);
	/* times once the contents are in (they change the mtime) */
	if (pop.ndirs == pop.dirs_cap) {
		size_t cap = pop.dirs_cap ? 2 * pop.dirs_cap : 64;
		void *v = realloc(pop.dirs, cap * sizeof(*pop.dirs));

		if (!v)
			return pop_fail(path, "out of memory", -ENOMEM);
		pop.dirs = v;
		pop.dirs_cap = cap;
	}
	pop.dirs[pop.ndirs++] = (struct dir_time){ ast.ino, st->st_atim,
						   st->st_mtim };
	return FTW_CONTINUE;
}

/* Open the new filesystem on dev (consumed) and copy rootdir into it. */
static int populate(struct arb_dev *dev, const char *rootdir, bool quiet)
{
	struct arb_fs_opts fo;
	const char *why = NULL;
	int ret, cret;

	arb_fs_opts_default(&fo);
	fo.commit_interval = 0; /* one commit at the end */
	ret = arb_fs_open(dev, &fo, &pop.fs, &why);
	if (ret) {
		fprintf(stderr, PROG ": cannot open the new filesystem: %s (%s)\n",
			arb_reason(ret, why), strerror(-ret));
		/* a failed arb_fs_open() leaves dev with the caller */
		arb_dev_destroy(dev);
		return ret;
	}
	pop.root = rootdir;
	pop.buf = malloc(COPY_CHUNK);
	if (!pop.buf) {
		ret = -ENOMEM;
		goto out_close;
	}
	if (nftw(rootdir, pop_entry, 64, FTW_PHYS | FTW_ACTIONRETVAL) != 0 &&
	    !pop.err) {
		fprintf(stderr, PROG ": -r: walking %s: %s\n", rootdir,
			strerror(errno));
		pop.err = -errno;
	}
	ret = pop.err;
	/* directory times, deepest (last created) first */
	for (size_t i = pop.ndirs; !ret && i-- > 0;) {
		struct arb_setattr sa = { .atime = pop.dirs[i].atime,
					  .mtime = pop.dirs[i].mtime };
		struct arb_cred cr = { 0, 0 };
		struct arb_stat ast;

		ret = arb_fs_setattr(pop.fs, pop.dirs[i].ino, &sa,
				     ARB_SET_ATIME | ARB_SET_MTIME, &cr, &ast);
		if (ret)
			fprintf(stderr, PROG ": -r: directory times: %s\n",
				strerror(-ret));
	}
	if (!ret && !quiet)
		printf("Copied %" PRIu64 " files and directories, %" PRIu64
		       " bytes of data, from %s\n",
		       pop.files, pop.bytes, rootdir);
out_close:
	cret = arb_fs_close(pop.fs);
	if (cret && !ret) {
		fprintf(stderr, PROG ": final commit failed: %s\n",
			strerror(-cret));
		ret = cret;
	}
	free(pop.buf);
	free(pop.dir_ino);
	free(pop.links.v);
	free(pop.dirs);
	return ret;
}

int main(int argc, char **argv)
{
	struct arb_mkfs_opts mo;
	struct mkfs_args a;
	struct arb_dev *dev;
	struct stat st;
	bool exists, created = false;
	uint64_t create_size = 0;
	char ubuf[37], sbuf[32];
	const char *found;
	int ret, fd;

	/* the library's messages under our name, each once */
	arb_log_tool(PROG);

	parse_args(argc, argv, &a);

	exists = stat(a.image, &st) == 0;
	if (!exists && errno != ENOENT) {
		fprintf(stderr, PROG ": cannot access %s: %s\n", a.image,
			strerror(errno));
		return 1;
	}
	if (exists && !S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
		fprintf(stderr, PROG ": %s is neither a regular file nor a block device\n",
			a.image);
		return 1;
	}

	if (exists) {
		fd = open(a.image, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			fprintf(stderr, PROG ": cannot open %s: %s\n", a.image,
				strerror(errno));
			return 1;
		}
		found = detect_fs(fd);
		close(fd);
		if (found && !a.force) {
			fprintf(stderr,
				PROG ": %s already contains a filesystem of type %s; use -f to overwrite it\n",
				a.image, found);
			return 1;
		}
	}

	/* Size: -s, else the existing file or device, else 1 GiB. */
	if (!exists || (S_ISREG(st.st_mode) && st.st_size == 0)) {
		create_size = a.size ? a.size : DEFAULT_NEW_SIZE;
		created = !exists;
	} else if (S_ISREG(st.st_mode) && a.size > (uint64_t)st.st_size) {
		/* grow the file (sparse) to the size asked for */
		create_size = a.size;
	}

	arb_log_hold(true);
	ret = arb_dev_open_file(a.image, false, create_size, &dev);
	if (ret) {
		fprintf(stderr, PROG ": cannot open %s: %s\n", a.image,
			ret == -EBUSY ? ARB_BUSY_HINT
				      : arb_reason(ret, NULL));
		arb_log_hold(false);
		goto out_remove;
	}
	arb_log_hold(false);
	if (a.size > dev->size) {
		char dbuf[32];

		human_size(dev->size, dbuf, sizeof(dbuf));
		fprintf(stderr, PROG ": %s holds only %s (%" PRIu64
				" bytes), less than the size asked for\n",
			a.image, dbuf, dev->size);
		arb_dev_destroy(dev);
		ret = -ENOSPC;
		goto out_remove;
	}

	arb_mkfs_opts_default(&mo);
	mo.size = a.size; /* 0: the whole file or device */
	if (a.nodesize)
		mo.nodesize = a.nodesize;
	mo.meta_copies = a.meta_copies;
	if (a.label)
		mo.label = a.label;
	memcpy(mo.uuid, a.uuid, sizeof(mo.uuid));
	if (a.rootdir) {
		struct stat rst;

		if (stat(a.rootdir, &rst) == 0) {
			mo.root_uid = rst.st_uid;
			mo.root_gid = rst.st_gid;
			mo.root_mode = rst.st_mode & 07777;
		}
	}

	ret = arb_mkfs(dev, &mo);
	if (ret) {
		if (ret == -ENOSPC)
			too_small(a.image, a.size ? a.size : dev->size, &mo);
		else
			fprintf(stderr, PROG ": formatting %s failed: %s\n",
				a.image, strerror(-ret));
		arb_dev_destroy(dev);
		goto out_remove;
	}
	/* arb_mkfs wrote the real magic last; make it all durable */
	ret = arb_dev_flush(dev);
	if (ret) {
		fprintf(stderr, PROG ": flushing %s failed: %s\n", a.image,
			strerror(-ret));
		arb_dev_destroy(dev);
		goto out_remove;
	}
	if (!a.quiet) {
		uint64_t size = a.size ? a.size : dev->size;

		uuid_unparse_lower(a.uuid, ubuf);
		human_size(size, sbuf, sizeof(sbuf));
		printf("Created arborfs on %s\n", a.image);
		printf("  Label:      %s\n", a.label ? a.label : "(none)");
		printf("  UUID:       %s\n", ubuf);
		printf("  Size:       %s (%" PRIu64 " bytes)\n", sbuf, size);
		printf("  Node size:  %u\n",
		       mo.nodesize ? mo.nodesize : 16384u);
		printf("  Metadata:   %s\n",
		       a.meta_copies == 1 ? "single" : "dup");
	}
	if (a.rootdir) {
		/* populate() owns dev from here on */
		ret = populate(dev, a.rootdir, a.quiet);
		if (ret) {
			fprintf(stderr,
				PROG ": %s is formatted but incomplete; run mkfs again\n",
				a.image);
			return 1;
		}
		return 0;
	}
	arb_dev_destroy(dev);
	return 0;

out_remove:
	/* do not leave a half-made file that was not there before */
	if (created)
		unlink(a.image);
	return 1;
}
