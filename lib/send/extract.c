/* SPDX-License-Identifier: MIT */
/*
 * extract.c - arb_receive_extract: a full stream written as plain files
 * into a directory of any filesystem (arbor receive --extract), so that a
 * backup can be restored where no arborfs exists.
 *
 * The tree is built under DIR/.arbor-extract-NAME: the subvolume's root
 * as "root" there, every inode first as a file named by its objectid,
 * moved to its first name by LINK (further names of a non-directory are
 * hard links to the first).  Owners, modes and times are set at the end
 * (directories deepest first, so that a read-only directory does not
 * stop the rest), then "root" becomes DIR/NAME and the staging directory
 * goes.  A stream that fails leaves only the staging directory, named so.
 * Names come from the validated reader (no '/', no "..", no NUL), and
 * every path is built from directory objects this code created.
 */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <unistd.h>

#include "arbor/send.h"
#include "fs_int.h"
#include "stream_int.h"

struct xobj {
	uint64_t obj;
	uint32_t mode, uid, gid;
	struct timespec atime, mtime;
	/* first name: parent objectid (0: none yet) and name */
	uint64_t parent;
	char *name;
	bool skipped; /* could not be made here (a device, not root) */
};

struct xctx {
	int dirfd;
	struct arb_sreader r;
	char stage[ARB_NAME_MAX + 32];
	struct xobj **tab;
	size_t cap, nr;
	FILE *warn;
	unsigned warned;
};

static struct xobj *xget(struct xctx *x, uint64_t obj, bool add)
{
	size_t i;

	if (add && (x->nr + 1) * 2 > x->cap) {
		size_t ncap = x->cap ? x->cap * 2 : 1024;
		struct xobj **n = calloc(ncap, sizeof(*n));

		if (!n)
			return NULL;
		for (i = 0; i < x->cap; i++) {
			if (!x->tab[i])
				continue;
			size_t j = (size_t)(x->tab[i]->obj * 0x9e3779b97f4a7c15ULL >> 17) & (ncap - 1);
			while (n[j])
				j = (j + 1) & (ncap - 1);
			n[j] = x->tab[i];
		}
		free(x->tab);
		x->tab = n;
		x->cap = ncap;
	}
	if (!x->cap)
		return NULL;
	i = (size_t)(obj * 0x9e3779b97f4a7c15ULL >> 17) & (x->cap - 1);
	while (x->tab[i]) {
		if (x->tab[i]->obj == obj)
			return x->tab[i];
		i = (i + 1) & (x->cap - 1);
	}
	if (!add)
		return NULL;
	x->tab[i] = calloc(1, sizeof(struct xobj));
	if (!x->tab[i])
		return NULL;
	x->tab[i]->obj = obj;
	x->nr++;
	return x->tab[i];
}

#define bad(x, ...) sr_fail(&(x)->r, -EBADMSG, __VA_ARGS__)

/* the path of o relative to dirfd: up its names to the root or to a
 * directory without a name yet (in the staging directory), then down */
static int xpath(struct xctx *x, const struct xobj *o, char *buf, size_t size)
{
	const struct xobj *chain[512];
	size_t n = 0, len;
	int k;

	while (o->obj != ARB_ROOT_INO && o->parent) {
		if (n == 512)
			return -ENAMETOOLONG;
		chain[n++] = o;
		o = xget(x, o->parent, false);
		if (!o)
			return -EUCLEAN;
	}
	if (o->obj == ARB_ROOT_INO)
		k = snprintf(buf, size, "%s/root", x->stage);
	else
		k = snprintf(buf, size, "%s/%llu", x->stage,
			     (unsigned long long)o->obj);
	len = (size_t)k;
	if (len >= size)
		return -ENAMETOOLONG;
	while (n--) {
		k = snprintf(buf + len, size - len, "/%s", chain[n]->name);
		len += (size_t)k;
		if (len >= size)
			return -ENAMETOOLONG;
	}
	return 0;
}

static int sys_fail(struct xctx *x, const char *what, int e)
{
	return sr_fail(&x->r, -e, "%s: %s", what, strerror(e));
}

static void warn(struct xctx *x, const char *fmt, const char *arg, int e)
{
	if (x->warn && x->warned++ < 20) {
		fprintf(x->warn, fmt, arg);
		fprintf(x->warn, ": %s\n", strerror(e));
	}
}

static int x_inode(struct xctx *x, const struct arb_scmd_dec *d)
{
	char p[PATH_MAX], t[4097];
	struct xobj *o = xget(x, d->obj, false);
	int fd, ret = 0;

	if (o && d->obj != ARB_ROOT_INO)
		return bad(x, "inode %llu sent twice (--extract takes a full stream)",
			   (unsigned long long)d->obj);
	if (!o)
		o = xget(x, d->obj, true);
	if (!o)
		return -ENOMEM;
	if (d->obj == ARB_ROOT_INO && !S_ISDIR(d->mode))
		return bad(x, "the root is not a directory");
	o->mode = d->mode;
	o->uid = d->uid;
	o->gid = d->gid;
	o->atime = d->atime;
	o->mtime = d->mtime;
	if (d->obj == ARB_ROOT_INO)
		return 0;
	ret = xpath(x, o, p, sizeof(p));
	if (ret)
		return sys_fail(x, "path", -ret);
	switch (d->mode & S_IFMT) {
	case S_IFREG:
		fd = openat(x->dirfd, p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
			    0600);
		if (fd < 0)
			return sys_fail(x, p, errno);
		if (ftruncate(fd, (off_t)d->size))
			ret = sys_fail(x, p, errno);
		close(fd);
		return ret;
	case S_IFDIR:
		return mkdirat(x->dirfd, p, 0700) ? sys_fail(x, p, errno) : 0;
	case S_IFLNK:
		memcpy(t, d->data, d->data_len);
		t[d->data_len] = 0;
		return symlinkat(t, x->dirfd, p) ? sys_fail(x, p, errno) : 0;
	case S_IFIFO:
		return mkfifoat(x->dirfd, p, 0600) ? sys_fail(x, p, errno) : 0;
	default:
		if (mknodat(x->dirfd, p, (d->mode & S_IFMT) | 0600,
			    (dev_t)d->rdev)) {
			if (errno != EPERM)
				return sys_fail(x, p, errno);
			warn(x, "arbor: %s: device or socket left out", p, errno);
			o->skipped = true;
		}
		return 0;
	}
}

/* the extracted regular file obj, opened with flags (its path in p,
 * PATH_MAX bytes): a descriptor, or a negative error already reported */
static int open_file(struct xctx *x, uint64_t obj, int flags, char *p)
{
	struct xobj *o = xget(x, obj, false);
	int fd, ret;

	if (!o || !S_ISREG(o->mode))
		return bad(x, "inode %llu is not a regular file sent before",
			   (unsigned long long)obj);
	ret = xpath(x, o, p, PATH_MAX);
	if (ret)
		return sys_fail(x, "path", -ret);
	fd = openat(x->dirfd, p, flags | O_CLOEXEC | O_NOFOLLOW);
	return fd < 0 ? sys_fail(x, p, errno) : fd;
}

/* PUNCH where the host cannot punch: zeros */
static int zero_range(struct xctx *x, int fd, const char *p, uint64_t off,
		      uint64_t len)
{
	static const uint8_t zero[4096];
	struct stat st;

	if (fstat(fd, &st))
		return sys_fail(x, p, errno);
	/* past the end there is nothing to zero (KEEP_SIZE) */
	if (off >= (uint64_t)st.st_size)
		return 0;
	if (len > (uint64_t)st.st_size - off)
		len = (uint64_t)st.st_size - off;
	while (len) {
		size_t n = len < sizeof(zero) ? (size_t)len : sizeof(zero);

		if (pwrite(fd, zero, n, (off_t)off) != (ssize_t)n)
			return sys_fail(x, p, errno ? errno : EIO);
		off += n;
		len -= n;
	}
	return 0;
}

/* CLONE: the bytes of a file extracted before (copy_file_range: the
 * host shares them if it can) */
static int x_clone(struct xctx *x, int fd, const char *p,
		   const struct arb_scmd_dec *d)
{
	char sp[PATH_MAX];
	loff_t soff = (loff_t)d->src_off, doff = (loff_t)d->off;
	uint64_t left = d->len;
	int sfd, ret = 0;

	sfd = open_file(x, d->src_obj, O_RDONLY, sp);
	if (sfd < 0)
		return sfd;
	while (left && !ret) {
		ssize_t n = copy_file_range(sfd, &soff, fd, &doff, left, 0);

		if (n < 0 && (errno == EXDEV || errno == EOPNOTSUPP ||
			      errno == ENOSYS || errno == EINVAL)) {
			/* by hand */
			uint8_t buf[65536];
			size_t want = left < sizeof(buf) ? (size_t)left
							 : sizeof(buf);

			n = pread(sfd, buf, want, soff);
			if (n > 0 && pwrite(fd, buf, (size_t)n, doff) != n)
				n = -1;
			if (n > 0) {
				soff += n;
				doff += n;
			}
		}
		if (n < 0)
			ret = sys_fail(x, p, errno);
		else if (n == 0)
			ret = bad(x, "clone source inode %llu ends before %llu",
				  (unsigned long long)d->src_obj,
				  (unsigned long long)(d->src_off + d->len));
		else
			left -= (uint64_t)n;
	}
	close(sfd);
	return ret;
}

static int x_data(struct xctx *x, const struct arb_scmd_dec *d)
{
	char p[PATH_MAX];
	int fd, ret = 0;

	fd = open_file(x, d->obj, O_WRONLY, p);
	if (fd < 0)
		return fd;
	if (d->type == ARB_SCMD_WRITE) {
		if (pwrite(fd, d->data, d->data_len, (off_t)d->off) !=
		    (ssize_t)d->data_len)
			ret = sys_fail(x, p, errno ? errno : EIO);
	} else if (d->type == ARB_SCMD_ENCODED_WRITE) {
		uint8_t *ram = malloc(d->ram_bytes);

		if (!ram)
			ret = -ENOMEM;
		else if (fs_z_decompress(d->data, d->data_len, ram,
					 d->ram_bytes))
			ret = bad(x, "the compressed data does not inflate to %llu bytes",
				  (unsigned long long)d->ram_bytes);
		else if (pwrite(fd, ram + d->ext_off, d->len, (off_t)d->off) !=
			 (ssize_t)d->len)
			ret = sys_fail(x, p, errno ? errno : EIO);
		free(ram);
	} else if (d->type == ARB_SCMD_PUNCH) {
		if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			      (off_t)d->off, (off_t)d->len))
			ret = zero_range(x, fd, p, d->off, d->len);
	} else if (d->type == ARB_SCMD_CLONE) {
		ret = x_clone(x, fd, p, d);
	} else if (fallocate(fd, FALLOC_FL_KEEP_SIZE, (off_t)d->off,
			     (off_t)d->len) && errno != EOPNOTSUPP) {
		ret = sys_fail(x, p, errno);
	}
	close(fd);
	return ret;
}

static int x_xattr(struct xctx *x, const struct arb_scmd_dec *d)
{
	struct xobj *o = xget(x, d->obj, false);
	char p[PATH_MAX], name[ARB_XATTR_NAME_MAX + 1];
	int ret;

	if (!o)
		return bad(x, "inode %llu was not sent", (unsigned long long)d->obj);
	if (o->skipped)
		return 0;
	ret = xpath(x, o, p, sizeof(p));
	if (ret)
		return sys_fail(x, "path", -ret);
	memcpy(name, d->name, d->name_len);
	name[d->name_len] = 0;
	/* the path is relative to dirfd: through /proc/self/fd */
	{
		char full[PATH_MAX + 32];

		snprintf(full, sizeof(full), "/proc/self/fd/%d/%s", x->dirfd, p);
		if (lsetxattr(full, name, d->data, d->data_len, 0))
			warn(x, "arbor: %s: an xattr is left out", p, errno);
	}
	return 0;
}

static int x_link(struct xctx *x, const struct arb_scmd_dec *d)
{
	struct xobj *dir = xget(x, d->dir, false), *o = xget(x, d->obj, false);
	char from[PATH_MAX], to[PATH_MAX], name[ARB_NAME_MAX + 1];
	const struct xobj *up;
	size_t len;
	int ret;

	if (!dir || !S_ISDIR(dir->mode) || !o)
		return bad(x, "link of inode %llu into %llu: not sent before",
			   (unsigned long long)d->obj,
			   (unsigned long long)d->dir);
	if (o->obj == ARB_ROOT_INO)
		return bad(x, "the root directory cannot get a name");
	if (S_ISDIR(o->mode) && o->parent)
		return bad(x, "directory %llu would get a second name",
			   (unsigned long long)d->obj);
	for (up = dir; up && up->obj != ARB_ROOT_INO;
	     up = up->parent ? xget(x, up->parent, false) : NULL)
		if (up == o)
			return bad(x, "linking directory %llu makes a cycle",
				   (unsigned long long)d->obj);
	memcpy(name, d->name, d->name_len);
	name[d->name_len] = 0;
	ret = xpath(x, dir, to, sizeof(to));
	len = strlen(to);
	if (!ret && len + 2 + d->name_len > sizeof(to))
		ret = -ENAMETOOLONG;
	if (ret)
		return sys_fail(x, "path", -ret);
	snprintf(to + len, sizeof(to) - len, "/%s", name);
	if (o->skipped)
		return 0;
	ret = xpath(x, o, from, sizeof(from));
	if (ret)
		return sys_fail(x, "path", -ret);
	if (!o->parent) {
		if (renameat2(x->dirfd, from, x->dirfd, to, RENAME_NOREPLACE))
			return sys_fail(x, to, errno);
		o->parent = d->dir;
		o->name = strdup(name);
		return o->name ? 0 : -ENOMEM;
	}
	if (linkat(x->dirfd, from, x->dirfd, to, 0))
		return sys_fail(x, to, errno);
	return 0;
}

static int depth(struct xctx *x, const struct xobj *o)
{
	int n = 0;

	while (o && o->parent && n < 1000) {
		o = xget(x, o->parent, false);
		n++;
	}
	return n;
}

static int cmp_depth(const void *a, const void *b)
{
	const int *x = a, *y = b;

	return y[0] - x[0];
}

/* owners, modes, times: files first, then directories deepest first */
static int x_finish(struct xctx *x)
{
	int (*order)[2] = calloc(x->nr ? x->nr : 1, sizeof(*order));
	size_t n = 0, i;
	char p[PATH_MAX];
	bool root = geteuid() == 0;
	int ret = 0;

	if (!order)
		return -ENOMEM;
	for (i = 0; i < x->cap; i++) {
		struct xobj *o = x->tab[i];

		if (!o || o->skipped)
			continue;
		if (o->obj != ARB_ROOT_INO && !o->parent) {
			ret = bad(x, "inode %llu was left without a name",
				  (unsigned long long)o->obj);
			goto out;
		}
		order[n][0] = S_ISDIR(o->mode) ? 1 + depth(x, o) : 0;
		order[n++][1] = (int)i;
	}
	/* directories deepest first; non-directories (0) in pass 0 */
	if (n)
		qsort(order, n, sizeof(*order), cmp_depth);
	for (int pass = 0; pass < 2 && !ret; pass++) {
		for (i = 0; i < n && !ret; i++) {
			struct xobj *o = x->tab[order[i][1]];
			struct timespec ts[2] = { o->atime, o->mtime };

			if ((pass == 0) != (order[i][0] == 0))
				continue;
			ret = xpath(x, o, p, sizeof(p));
			if (ret) {
				ret = sys_fail(x, "path", -ret);
				break;
			}
			if (fchownat(x->dirfd, p, o->uid, o->gid,
				     AT_SYMLINK_NOFOLLOW) && root) {
				ret = sys_fail(x, p, errno);
				break;
			}
			if (!S_ISLNK(o->mode) &&
			    fchmodat(x->dirfd, p, o->mode & 07777, 0)) {
				ret = sys_fail(x, p, errno);
				break;
			}
			if (utimensat(x->dirfd, p, ts, AT_SYMLINK_NOFOLLOW)) {
				ret = sys_fail(x, p, errno);
				break;
			}
		}
	}
out:
	free(order);
	return ret;
}

int arb_receive_extract(int fd, int dirfd, FILE *warnings, char *name_out,
			char *why, size_t why_len)
{
	struct xctx x = { .dirfd = dirfd, .warn = warnings };
	struct arb_send_hdr h;
	struct arb_scmd_dec d;
	char name[ARB_NAME_MAX + 1] = "";
	char p[PATH_MAX];
	bool ended = false;
	int ret;

	ret = sr_init(&x.r, fd, why, why_len);
	if (ret)
		return ret;
	ret = sr_header(&x.r, &h);
	if (!ret && (h.flags & ARB_SEND_F_INCREMENTAL))
		ret = sr_fail(&x.r, -EINVAL,
			      "an incremental stream cannot be extracted (it needs its parent): extract a full one");
	while (!ret && !ended) {
		ret = sr_next(&x.r, &d);
		if (ret)
			break;
		if (x.r.index == 1) {
			if (d.type != ARB_SCMD_BEGIN) {
				ret = bad(&x, "the first command is not begin");
				break;
			}
			memcpy(name, d.name, d.name_len);
			name[d.name_len] = 0;
			if (!faccessat(dirfd, name, F_OK, AT_SYMLINK_NOFOLLOW)) {
				ret = sr_fail(&x.r, -EEXIST, "%s exists already",
					      name);
				break;
			}
			snprintf(x.stage, sizeof(x.stage), ".arbor-extract-%s",
				 name);
			if (mkdirat(dirfd, x.stage, 0700) ||
			    (snprintf(p, sizeof(p), "%s/root", x.stage),
			     mkdirat(dirfd, p, 0700))) {
				ret = sys_fail(&x, x.stage, errno);
				x.stage[0] = 0;
				break;
			}
			if (!xget(&x, ARB_ROOT_INO, true)) {
				ret = -ENOMEM;
				break;
			}
			xget(&x, ARB_ROOT_INO, false)->mode = S_IFDIR | 0755;
			continue;
		}
		switch (d.type) {
		case ARB_SCMD_INODE:
			ret = x_inode(&x, &d);
			break;
		case ARB_SCMD_XATTR:
			ret = x_xattr(&x, &d);
			break;
		case ARB_SCMD_WRITE:
		case ARB_SCMD_PREALLOC:
		case ARB_SCMD_ENCODED_WRITE:
		case ARB_SCMD_PUNCH:
		case ARB_SCMD_CLONE:
			ret = x_data(&x, &d);
			break;
		case ARB_SCMD_LINK:
			ret = x_link(&x, &d);
			break;
		case ARB_SCMD_TIMES: {
			struct xobj *o = xget(&x, d.obj, false);

			if (!o)
				ret = bad(&x, "inode %llu was not sent",
					  (unsigned long long)d.obj);
			else {
				o->atime = d.atime;
				o->mtime = d.mtime;
			}
			break;
		}
		case ARB_SCMD_END:
			ret = x_finish(&x);
			ended = true;
			break;
		default:
			ret = bad(&x, "%s in a full stream", arb_scmd_name(d.type));
		}
	}
	if (!ret) {
		snprintf(p, sizeof(p), "%s/root", x.stage);
		if (renameat2(dirfd, p, dirfd, name, RENAME_NOREPLACE) ||
		    unlinkat(dirfd, x.stage, AT_REMOVEDIR))
			ret = sys_fail(&x, name, errno);
		else if (name_out)
			snprintf(name_out, ARB_NAME_MAX + 1, "%s", name);
	}
	if (ret && x.stage[0] && why && why_len) {
		size_t n = strlen(why);

		snprintf(why + n, why_len - n, " (the partial tree is in %s)",
			 x.stage);
	}
	for (size_t i = 0; i < x.cap; i++) {
		if (x.tab && x.tab[i]) {
			free(x.tab[i]->name);
			free(x.tab[i]);
		}
	}
	free(x.tab);
	sr_free(&x.r);
	return ret;
}
