// SPDX-License-Identifier: MIT
/*
 * subvol.c - "arbor subvolume ..." (alias "arbor sub") and "arbor
 * property ...": subvolumes and snapshots.
 *
 * On a mount, through the ioctls of <arbor/ioctl.h> (ARB_IOC_SUBVOL_*),
 * answered by the daemon, which checks the caller's permissions; on an
 * unmounted image (--image IMG) through the library (arbor/subvol.h),
 * where paths start at the top-level subvolume (tree 5's root) and the
 * caller's own uid and gid own what it creates.
 *
 *   create PATH               a new empty subvolume
 *   snapshot [-r] SRC DEST    DEST a new name, or an existing directory
 *                             to create basename(SRC) in (as btrfs)
 *   delete [--wait] PATH...
 *   list [--json] [-s] [-r] PATH
 *   show [--json] PATH        the subvolume holding PATH
 *   sync PATH [ID...]         wait for the cleaning of deleted ones
 *   set-default [ID] PATH     the default subvolume: ID (5 or 0: the top
 *                             level), or the one holding PATH
 *   get-default PATH
 *   property get PATH [ro] / property set PATH ro true|false
 *   find-new, diff            findnew.c
 *
 * Exit status: 0 ok, 1 failed, 2 bad usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <linux/fs.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uuid/uuid.h>

#include <arbor/arbor.h>
#include <arbor/ioctl.h>
#include <arbor/send.h>
#include <arbor/subvol.h>

#include "arbor_cli.h"
#include "arbor_help.h"

/* where the commands act: a mount (fd of PATH) or an image (fs) */
struct target {
	const char *image; /* NULL: a mount */
	struct arb_fs *fs;
};

/* one subvolume with its path, for list and show */
struct sv {
	struct arb_ioc_subvol_entry e;
	char path[PATH_MAX];
};

static void sub_usage(FILE *f)
{
	fputs(ARBOR_HELP_SUBVOLUME, f);
}

static void prop_usage(FILE *f)
{
	fputs(ARBOR_HELP_PROPERTY, f);
}

/* "arbor subvolume CMD: " messages */
static const char *cmd_name = "subvolume";

#define err(...)                                                               \
	do {                                                                   \
		fprintf(stderr, "arbor %s: ", cmd_name);                       \
		fprintf(stderr, __VA_ARGS__);                                  \
		fputc('\n', stderr);                                           \
	} while (0)

/* ---- paths ---------------------------------------------------------------- */

/* PATH without trailing slashes (a copy; "/" stays) */
static char *trim(const char *path)
{
	char *p = strdup(path);
	size_t n;

	if (!p) {
		perror("arbor");
		exit(1);
	}
	n = strlen(p);
	while (n > 1 && p[n - 1] == '/')
		p[--n] = '\0';
	return p;
}

/* the directory and the last component of path (copies) */
static void split(const char *path, char **dir, char **name)
{
	char *a = trim(path), *b = trim(path);

	*dir = strdup(dirname(a));
	*name = strdup(basename(b));
	free(a);
	free(b);
	if (!*dir || !*name) {
		perror("arbor");
		exit(1);
	}
}

static bool bad_name(const char *name)
{
	return !*name || !strcmp(name, ".") || !strcmp(name, "..") ||
	       !strcmp(name, "/") || strlen(name) > ARB_NAME_MAX;
}

/* ---- images ------------------------------------------------------------- */

/* open an unmounted image through the library (read-write with rw); 0,
 * or 1 after a message (in use by a mount: the image's lock says so) */
int cli_image_open(const char *image, bool rw, struct arb_fs **fs)
{
	struct arb_fs_opts o;
	const char *why = NULL;
	int ret;

	arb_fs_opts_default(&o);
	o.readonly = !rw;
	o.commit_interval = 0;
	ret = arb_fs_open_image(image, &o, fs, &why);
	if (ret) {
		fprintf(stderr, "arbor: %s: cannot open: %s\n", image,
			arb_reason(ret, why));
		return 1;
	}
	return 0;
}

/* close, committing; rc stays or becomes 1 on a failure */
int cli_image_close(const char *image, struct arb_fs *fs, int rc)
{
	int ret = arb_fs_close(fs);

	if (ret) {
		fprintf(stderr, "arbor: %s: %s\n", image,
			arb_reason(ret, NULL));
		return 1;
	}
	return rc;
}

static int image_open(struct target *t, bool rw)
{
	return cli_image_open(t->image, rw, &t->fs);
}

static int image_close(struct target *t, int rc)
{
	struct arb_fs *fs = t->fs;

	t->fs = NULL;
	return cli_image_close(t->image, fs, rc);
}

/* the inode of path inside the image (from the top-level subvolume) */
int cli_image_resolve(struct arb_fs *fs, const char *path, uint64_t *ino)
{
	return arb_fs_lookup_path(fs, ARB_ROOT_INO, path, ino);
}

void cli_subvol_entry(struct arb_ioc_subvol_entry *e,
		      const struct arb_subvol_info *i)
{
	memset(e, 0, sizeof(*e));
	e->id = i->id;
	e->ino = i->ino;
	e->parent_id = i->parent_id;
	e->dir_ino = i->dir_ino;
	e->source_id = i->source_id;
	e->otransid = i->otransid;
	e->gen = i->gen;
	e->stransid = i->stransid;
	e->rtransid = i->rtransid;
	e->otime_sec = i->otime.tv_sec;
	e->otime_nsec = (__u32)i->otime.tv_nsec;
	e->ctime_sec = i->ctime.tv_sec;
	e->ctime_nsec = (__u32)i->ctime.tv_nsec;
	if (i->flags & ARB_SUBVOL_RDONLY)
		e->flags |= ARB_IOC_SUBVOL_RDONLY;
	if (i->flags & ARB_SUBVOL_DELETED)
		e->flags |= ARB_IOC_SUBVOL_DELETED;
	if (i->flags & ARB_SUBVOL_PARTIAL)
		e->flags |= ARB_IOC_SUBVOL_PARTIAL;
	e->resume_off = i->resume_off;
	e->clean_nodes = i->clean_nodes;
	e->clean_freed = i->clean_freed;
	e->clean_permille = i->clean_permille;
	memcpy(e->uuid, i->uuid, 16);
	memcpy(e->parent_uuid, i->parent_uuid, 16);
	memcpy(e->received_uuid, i->received_uuid, 16);
	snprintf(e->name, sizeof(e->name), "%s", i->name);
}

/* how a message names subvolume e */
static const char *sv_name(const struct arb_ioc_subvol_entry *e)
{
	return e->id == ARB_INUM_FS_TREE ? "the top-level subvolume" : e->name;
}

/* ---- mounts ------------------------------------------------------------- */

/* the subvolume holding the inode fd names */
static int mount_info(int fd, const char *path, struct arb_ioc_subvol_info *in)
{
	memset(in, 0, sizeof(*in));
	return cli_ioctl(fd, path, ARB_IOC_SUBVOL_INFO, in, "subvolume info");
}

/* errno of a subvolume ioctl, in words; what: the operation */
static void ioc_error(const char *path, const char *what, int e)
{
	switch (e) {
	case ENOTTY:
		err("%s: not on a mounted arborfs (or its daemon is too old "
		    "for subvolumes)", path);
		break;
	case EPERM:
		err("%s: %s: permission denied (%s)", path, what,
		    !strcmp(what, "delete")
			    ? "needs root or CAP_SYS_ADMIN, or the owner with "
			      "the mount option user_subvol_rm_allowed"
		    : !strcmp(what, "snapshot")
			    ? "a snapshot of a subvolume you do not own needs "
			      "root or CAP_FOWNER"
		    : !strcmp(what, "set-default")
			    ? "needs root or CAP_SYS_ADMIN"
			    : "needs the owner, root or CAP_FOWNER");
		break;
	case EACCES:
		err("%s: %s: permission denied (write and search permission "
		    "on the directory, and read on a snapshot's source)",
		    path, what);
		break;
	case EEXIST:
		err("%s: destination exists", path);
		break;
	case EROFS:
		err("%s: %s: read-only (a read-only subvolume or mount)", path,
		    what);
		break;
	case EBUSY:
		err("%s: %s: busy (the top-level subvolume, the one a mount "
		    "shows as its root, or the default subvolume)", path,
		    what);
		break;
	case ENOTEMPTY:
		err("%s: %s: it holds another subvolume: delete that first",
		    path, what);
		break;
	case EXDEV:
		err("%s: %s: not on the same arborfs mount", path, what);
		break;
	default:
		err("%s: %s: %s", path, what, strerror(e));
	}
}

/* subvolume ioctl: 0, or -1 after ioc_error */
static int sv_ioctl(int fd, const char *path, unsigned long cmd, void *arg,
		    const char *what)
{
	if (ioctl(fd, cmd, arg) == 0)
		return 0;
	ioc_error(path, what, errno);
	return -1;
}

/* open a directory of a mount; -1 after a message */
static int open_dir(const char *path)
{
	struct stat st;
	int fd = cli_open_mount(path);

	if (fd < 0)
		return -1;
	if (fstat(fd, &st) || !S_ISDIR(st.st_mode)) {
		err("%s: not a directory", path);
		close(fd);
		return -1;
	}
	return fd;
}

/* ---- create / snapshot ---------------------------------------------------- */

/*
 * Where DEST puts a new subvolume: DEST itself (a new name), or
 * basename(src) in DEST when DEST is a directory (src NULL: never).
 */
static int dest_of(const char *dest, const char *src, bool exists_dir,
		   char **dir, char **name)
{
	if (exists_dir && src) {
		char *sd;

		split(src, &sd, name);
		free(sd);
		*dir = trim(dest);
	} else {
		split(dest, dir, name);
	}
	if (bad_name(*name)) {
		err("%s: not a usable name for a subvolume", *name);
		return 2;
	}
	return 0;
}

static int mount_create(const char *src, const char *dest, bool snapshot,
			bool rdonly)
{
	struct arb_ioc_subvol_create c;
	struct arb_ioc_subvol_info si;
	struct stat sst, dst, st;
	char *dir = NULL, *name = NULL, shown[PATH_MAX * 2];
	int sfd = -1, dfd = -1, rc = 1;

	if (snapshot) {
		sfd = cli_open_mount(src);
		if (sfd < 0)
			return 1;
		if (fstat(sfd, &sst) || mount_info(sfd, src, &si))
			goto out;
		if (si.e.ino != sst.st_ino) {
			err("%s: source is not a subvolume (a directory of "
			    "subvolume %llu, %s)",
			    src, (unsigned long long)si.e.id, sv_name(&si.e));
			goto out;
		}
	}
	rc = dest_of(dest, src,
		     snapshot && stat(dest, &st) == 0 && S_ISDIR(st.st_mode),
		     &dir, &name);
	if (rc)
		goto out;
	rc = 1;
	snprintf(shown, sizeof(shown), "%s%s%s", dir,
		 dir[strlen(dir) - 1] == '/' ? "" : "/", name);
	if (fstatat(AT_FDCWD, shown, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		err("%s: destination exists", shown);
		goto out;
	}
	dfd = open_dir(dir);
	if (dfd < 0)
		goto out;
	if (snapshot && (fstat(dfd, &dst) || dst.st_dev != sst.st_dev)) {
		err("%s: not on the same arborfs mount as %s", dir, src);
		goto out;
	}
	memset(&c, 0, sizeof(c));
	snprintf(c.name, sizeof(c.name), "%s", name);
	if (snapshot) {
		c.src_ino = sst.st_ino;
		c.flags = rdonly ? ARB_IOC_SUBVOL_RDONLY : 0;
		/*
		 * The kernel's dirty pages of the source reach the daemon
		 * first (writeback cache); the snapshot flushes the daemon's
		 * delayed data itself.  A writeback that failed before is
		 * the kernel's news of an earlier write: said, not fatal.
		 */
		if (syncfs(sfd) < 0)
			fprintf(stderr, "arbor subvolume: %s: warning: an "
				"earlier writeback failed (%s)\n",
				src, strerror(errno));
	}
	if (sv_ioctl(dfd, shown,
		     snapshot ? ARB_IOC_SUBVOL_SNAPSHOT : ARB_IOC_SUBVOL_CREATE,
		     &c, snapshot ? "snapshot" : "create"))
		goto out;
	if (snapshot)
		printf("Created %ssnapshot '%s' of '%s' (id %llu)\n",
		       rdonly ? "read-only " : "", shown, src,
		       (unsigned long long)c.id);
	else
		printf("Created subvolume '%s' (id %llu)\n", shown,
		       (unsigned long long)c.id);
	rc = 0;
out:
	if (sfd >= 0)
		close(sfd);
	if (dfd >= 0)
		close(dfd);
	free(dir);
	free(name);
	return rc;
}

static int image_create(struct target *t, const char *src, const char *dest,
			bool snapshot, bool rdonly)
{
	struct arb_subvol_info si;
	struct arb_stat st;
	struct arb_cred cr = { .uid = (uint32_t)geteuid(),
			       .gid = (uint32_t)getegid() };
	uint64_t sino = 0, dino, dir_ino;
	char *dir = NULL, *name = NULL;
	bool dest_dir = false;
	int ret, rc;

	if (image_open(t, true))
		return 1;
	rc = 1;
	if (snapshot) {
		ret = cli_image_resolve(t->fs, src, &sino);
		if (!ret)
			ret = arb_subvol_info(t->fs, sino, &si);
		if (ret) {
			err("%s: %s: %s", t->image, src, arb_reason(ret, NULL));
			goto out;
		}
		if (si.ino != sino) {
			err("%s: %s: source is not a subvolume (a directory of "
			    "subvolume %llu, %s)",
			    t->image, src, (unsigned long long)si.id,
			    si.id == ARB_INUM_FS_TREE ? "the top-level subvolume"
						      : si.name);
			goto out;
		}
		dest_dir = cli_image_resolve(t->fs, dest, &dino) == 0 &&
			   arb_fs_getattr(t->fs, dino, &st) == 0 &&
			   S_ISDIR(st.mode);
	}
	rc = dest_of(dest, src, dest_dir, &dir, &name);
	if (rc)
		goto out;
	rc = 1;
	ret = cli_image_resolve(t->fs, dir, &dir_ino);
	if (ret) {
		err("%s: %s: %s", t->image, dir, arb_reason(ret, NULL));
		goto out;
	}
	if (arb_fs_lookup(t->fs, dir_ino, name, &st) == 0) {
		err("%s: %s/%s: destination exists", t->image, dir, name);
		goto out;
	}
	if (snapshot)
		ret = arb_subvol_snapshot(t->fs, sino, dir_ino, name,
					  rdonly ? ARB_SUBVOL_RDONLY : 0, &cr,
					  &st);
	else
		ret = arb_subvol_create(t->fs, dir_ino, name, 0755, &cr, &st);
	if (ret) {
		err("%s: %s/%s: %s", t->image, dir, name,
		    ret == -EEXIST ? "destination exists"
				   : arb_reason(ret, NULL));
		goto out;
	}
	printf("Created %s%s '%s/%s' in %s (id %llu)\n",
	       snapshot && rdonly ? "read-only " : "",
	       snapshot ? "snapshot" : "subvolume", dir, name, t->image,
	       (unsigned long long)arb_inum_tree(st.ino));
	rc = 0;
out:
	free(dir);
	free(name);
	return image_close(t, rc);
}

/* ---- delete / sync ---------------------------------------------------------- */

static int mount_wait(const char *path, uint64_t id)
{
	struct arb_ioc_subvol_wait w;
	int fd = cli_open_mount(path);
	int rc = 0;

	if (fd < 0)
		return 1;
	memset(&w, 0, sizeof(w));
	w.id = id;
	if (ioctl(fd, ARB_IOC_SUBVOL_WAIT, &w)) {
		if (errno == ENOENT)
			err("%s: no deleted subvolume %llu", path,
			    (unsigned long long)id);
		else
			ioc_error(path, "wait", errno);
		rc = 1;
	}
	close(fd);
	return rc;
}

static int mount_delete(const char *path, uint64_t *id)
{
	struct arb_ioc_subvol_create c;
	struct arb_ioc_subvol_default d;
	struct arb_ioc_subvol_info si;
	struct stat st, dst;
	char *dir = NULL, *name = NULL;
	int fd, dfd = -1, rc = 1;

	fd = cli_open_mount(path);
	if (fd < 0)
		return 1;
	if (fstat(fd, &st) || mount_info(fd, path, &si))
		goto out;
	if (si.e.ino != st.st_ino) {
		err("%s: not a subvolume (a directory of subvolume %llu, %s)",
		    path, (unsigned long long)si.e.id, sv_name(&si.e));
		goto out;
	}
	if (si.e.id == ARB_INUM_FS_TREE) {
		err("%s: the top-level subvolume cannot be deleted", path);
		goto out;
	}
	if (si.e.id == si.mount_root_id) {
		err("%s: the mounted root (subvolume %llu) cannot be deleted: "
		    "unmount it, or delete it through a mount of its parent",
		    path, (unsigned long long)si.e.id);
		goto out;
	}
	memset(&d, 0, sizeof(d));
	if (ioctl(fd, ARB_IOC_SUBVOL_GET_DEFAULT, &d) == 0 &&
	    d.id == si.e.id) {
		err("%s: the default subvolume (%llu) cannot be deleted: "
		    "`arbor subvolume set-default` another one first", path,
		    (unsigned long long)si.e.id);
		goto out;
	}
	split(path, &dir, &name);
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fstat(dfd, &dst) || dst.st_dev != st.st_dev) {
		err("%s: a mount point: unmount it, or delete it through a "
		    "mount of its parent", path);
		goto out;
	}
	memset(&c, 0, sizeof(c));
	snprintf(c.name, sizeof(c.name), "%s", name);
	if (sv_ioctl(dfd, path, ARB_IOC_SUBVOL_DELETE, &c, "delete"))
		goto out;
	printf("Deleted subvolume '%s' (id %llu)\n", path,
	       (unsigned long long)c.id);
	*id = c.id;
	rc = 0;
out:
	close(fd);
	if (dfd >= 0)
		close(dfd);
	free(dir);
	free(name);
	return rc;
}

static int image_delete(struct target *t, const char *path, uint64_t *id)
{
	struct arb_subvol_info si;
	char *dir = NULL, *name = NULL;
	uint64_t ino, dir_ino;
	int ret;

	ret = cli_image_resolve(t->fs, path, &ino);
	if (!ret)
		ret = arb_subvol_info(t->fs, ino, &si);
	if (ret) {
		err("%s: %s: %s", t->image, path, arb_reason(ret, NULL));
		return 1;
	}
	if (si.ino != ino) {
		err("%s: %s: not a subvolume (a directory of subvolume %llu, "
		    "%s)", t->image, path, (unsigned long long)si.id,
		    si.id == ARB_INUM_FS_TREE ? "the top-level subvolume"
					      : si.name);
		return 1;
	}
	if (si.id == ARB_INUM_FS_TREE) {
		err("%s: %s: the top-level subvolume cannot be deleted",
		    t->image, path);
		return 1;
	}
	split(path, &dir, &name);
	ret = cli_image_resolve(t->fs, dir, &dir_ino);
	if (!ret)
		ret = arb_subvol_delete(t->fs, dir_ino, name);
	free(dir);
	free(name);
	if (ret) {
		err("%s: %s: %s", t->image, path,
		    ret == -ENOTEMPTY ? "it holds another subvolume: delete "
					"that first"
		    : ret == -EBUSY   ? "the default subvolume cannot be "
					"deleted: `arbor subvolume "
					"set-default` another one first"
				      : arb_reason(ret, NULL));
		return 1;
	}
	printf("Deleted subvolume '%s' in %s (id %llu)\n", path, t->image,
	       (unsigned long long)si.id);
	*id = si.id;
	return 0;
}

static int do_delete(struct target *t, char **paths, int n, bool wait)
{
	uint64_t *ids = calloc((size_t)n, sizeof(*ids));
	int rc = 0, ret;

	if (!ids) {
		perror("arbor");
		return 1;
	}
	if (t->image && image_open(t, true)) {
		free(ids);
		return 1;
	}
	for (int i = 0; i < n; i++) {
		char *p = trim(paths[i]);

		if (t->image ? image_delete(t, p, &ids[i])
			     : mount_delete(p, &ids[i]))
			rc = 1;
		free(p);
	}
	for (int i = 0; wait && i < n; i++) {
		if (!ids[i])
			continue;
		if (t->image) {
			ret = arb_subvol_wait(t->fs, ids[i]);
			if (ret) {
				err("%s: waiting for subvolume %llu: %s",
				    t->image, (unsigned long long)ids[i],
				    arb_reason(ret, NULL));
				rc = 1;
			}
		} else {
			/* the directory it was in is still there */
			char *dir, *name;

			split(paths[i], &dir, &name);
			if (mount_wait(dir, ids[i]))
				rc = 1;
			free(dir);
			free(name);
		}
	}
	if (wait && !rc)
		printf("Space of the deleted subvolume%s given back\n",
		       n > 1 ? "s" : "");
	free(ids);
	return t->image ? image_close(t, rc) : rc;
}

static bool parse_id(const char *s, uint64_t *id)
{
	char *end;

	if (!*s || *s == '-')
		return false;
	errno = 0;
	*id = strtoull(s, &end, 10);
	return !errno && !*end;
}

static int do_sync(struct target *t, const char *path, char **ids, int n)
{
	uint64_t id;
	int rc = 0, ret;

	for (int i = 0; i < n; i++)
		if (!parse_id(ids[i], &id) || !id) {
			err("sync: bad subvolume id '%s'", ids[i]);
			return 2;
		}
	if (t->image && image_open(t, true))
		return 1;
	for (int i = 0; i < (n ? n : 1); i++) {
		id = 0;
		if (n)
			parse_id(ids[i], &id);
		if (!t->image) {
			rc |= mount_wait(path, id);
			continue;
		}
		ret = arb_subvol_wait(t->fs, id);
		if (ret) {
			err("%s: subvolume %llu: %s", t->image,
			    (unsigned long long)id,
			    ret == -ENOENT ? "no such deleted subvolume"
					   : arb_reason(ret, NULL));
			rc = 1;
		}
	}
	return t->image ? image_close(t, rc) : rc;
}

/* ---- list / show -------------------------------------------------------------- */

static void uuid_text(const __u8 u[16], char out[37])
{
	static const __u8 zero[16];

	if (!memcmp(u, zero, 16))
		strcpy(out, "-");
	else
		uuid_unparse_lower(u, out);
}

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", (unsigned char)*s);
		else
			putchar(*s);
	}
	putchar('"');
}

static void time_text(__s64 sec, char *buf, size_t size)
{
	time_t t = (time_t)sec;
	struct tm tm;

	if (!sec || !localtime_r(&t, &tm))
		snprintf(buf, size, "-");
	else
		strftime(buf, size, "%Y-%m-%d %H:%M:%S %z", &tm);
}

/* every subvolume with its path; *out malloc'd */
struct collect {
	struct sv *v;
	size_t n, cap;
	struct arb_fs *fs;
	int err;
};

static int collect_push(struct collect *c, const struct arb_ioc_subvol_entry *e)
{
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 64;
		struct sv *v = realloc(c->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		c->v = v;
		c->cap = cap;
	}
	c->v[c->n].e = *e;
	c->v[c->n].path[0] = '\0';
	c->n++;
	return 0;
}

static int collect_image(void *arg, const struct arb_subvol_info *info)
{
	struct collect *c = arg;
	struct arb_ioc_subvol_entry e;

	cli_subvol_entry(&e, info);
	c->err = collect_push(c, &e);
	return c->err ? 1 : 0;
}

static int list_all(struct target *t, const char *path, struct collect *c,
		    uint64_t *mount_root)
{
	int ret;

	memset(c, 0, sizeof(*c));
	*mount_root = ARB_INUM_FS_TREE;
	if (t->image) {
		ret = arb_subvol_list(t->fs, collect_image, c);
		if (ret < 0 || c->err) {
			err("%s: listing the subvolumes: %s", t->image,
			    arb_reason(ret < 0 ? ret : c->err, NULL));
			return 1;
		}
		for (size_t i = 0; i < c->n; i++)
			if (!(c->v[i].e.flags & ARB_IOC_SUBVOL_DELETED) &&
			    arb_subvol_path(t->fs, c->v[i].e.id, c->v[i].path,
					    sizeof(c->v[i].path)) < 0)
				snprintf(c->v[i].path, sizeof(c->v[i].path),
					 "?");
		return 0;
	}

	static struct arb_ioc_subvol_list l;
	struct arb_ioc_subvol_path p;
	uint64_t start = 0;
	int fd = cli_open_mount(path), rc = 1;

	if (fd < 0)
		return 1;
	do {
		memset(&l, 0, sizeof(l));
		l.start = start;
		if (sv_ioctl(fd, path, ARB_IOC_SUBVOL_LIST, &l, "list"))
			goto out;
		*mount_root = l.mount_root_id;
		for (__u32 i = 0; i < l.nr && i < ARB_IOC_SUBVOL_LIST_MAX; i++)
			if (collect_push(c, &l.e[i])) {
				perror("arbor");
				goto out;
			}
		start = l.next;
	} while (start);
	for (size_t i = 0; i < c->n; i++) {
		if (c->v[i].e.flags & ARB_IOC_SUBVOL_DELETED)
			continue;
		memset(&p, 0, sizeof(p));
		p.id = c->v[i].e.id;
		if (ioctl(fd, ARB_IOC_SUBVOL_PATH, &p))
			snprintf(c->v[i].path, sizeof(c->v[i].path), "?");
		else
			snprintf(c->v[i].path, sizeof(c->v[i].path), "%s",
				 p.path);
	}
	rc = 0;
out:
	close(fd);
	return rc;
}

/* the resume token of a kept partial receive */
static void partial_token(const struct arb_ioc_subvol_entry *e,
			  char tok[ARB_RESUME_TOKEN_MAX])
{
	struct arb_resume_token t = { .id = e->id, .gen = e->stransid,
				      .obj = e->rtransid,
				      .off = e->resume_off };

	memcpy(t.uuid, e->received_uuid, 16);
	arb_resume_token_format(&t, tok);
}

/* exclusive and shared bytes (show); NULL in a list */
static void print_json_entry(const struct sv *s,
			     const struct arb_ioc_subvol_usage *use)
{
	const struct arb_ioc_subvol_entry *e = &s->e;
	char u[37], pu[37], ru[37];

	uuid_text(e->uuid, u);
	uuid_text(e->parent_uuid, pu);
	uuid_text(e->received_uuid, ru);
	printf("{\"id\": %llu, \"name\": ", (unsigned long long)e->id);
	json_str(e->name);
	printf(", \"path\": ");
	if (e->flags & ARB_IOC_SUBVOL_DELETED)
		printf("null");
	else
		json_str(s->path);
	printf(", \"parent_id\": %llu, \"dir_ino\": %llu, "
	       "\"source_id\": %llu, \"ino\": %llu, "
	       "\"otransid\": %llu, \"gen\": %llu, "
	       "\"stransid\": %llu, \"rtransid\": %llu, "
	       "\"otime\": %lld.%09u, \"readonly\": %s, \"deleted\": %s, "
	       "\"mount_root\": %s, \"uuid\": \"%s\", \"parent_uuid\": %s%s%s, "
	       "\"received_uuid\": %s%s%s",
	       (unsigned long long)e->parent_id,
	       (unsigned long long)e->dir_ino,
	       (unsigned long long)e->source_id, (unsigned long long)e->ino,
	       (unsigned long long)e->otransid, (unsigned long long)e->gen,
	       (unsigned long long)e->stransid,
	       (unsigned long long)e->rtransid, (long long)e->otime_sec,
	       e->otime_nsec,
	       e->flags & ARB_IOC_SUBVOL_RDONLY ? "true" : "false",
	       e->flags & ARB_IOC_SUBVOL_DELETED ? "true" : "false",
	       e->flags & ARB_IOC_SUBVOL_MOUNT_ROOT ? "true" : "false", u,
	       *pu == '-' ? "" : "\"", *pu == '-' ? "null" : pu,
	       *pu == '-' ? "" : "\"", *ru == '-' ? "" : "\"",
	       *ru == '-' ? "null" : ru, *ru == '-' ? "" : "\"");
	if (e->flags & ARB_IOC_SUBVOL_PARTIAL) {
		char tok[ARB_RESUME_TOKEN_MAX];

		partial_token(e, tok);
		printf(", \"partial_receive\": true, \"resume_token\": \"%s\"",
		       tok);
	} else if (e->flags & ARB_IOC_SUBVOL_DELETED)
		printf(", \"cleaning\": {\"nodes\": %llu, \"freed\": %llu, "
		       "\"permille\": %u}",
		       (unsigned long long)e->clean_nodes,
		       (unsigned long long)e->clean_freed, e->clean_permille);
	if (use)
		printf(", \"exclusive\": %llu, \"shared\": %llu, "
		       "\"meta_exclusive\": %llu, \"meta_shared\": %llu",
		       (unsigned long long)use->exclusive,
		       (unsigned long long)use->shared,
		       (unsigned long long)use->meta_exclusive,
		       (unsigned long long)use->meta_shared);
	printf("}");
}

static int do_list(struct target *t, const char *path, bool json,
		   bool snaps_only, bool ro_only)
{
	struct collect c;
	uint64_t mroot;
	bool first = true;
	int rc;

	if (t->image && image_open(t, false))
		return 1;
	rc = list_all(t, path, &c, &mroot);
	if (rc)
		goto out;
	if (json)
		printf("{\"mount_root_id\": %llu, \"subvolumes\": [",
		       (unsigned long long)mroot);
	else
		printf("%-6s %-8s %-8s %-6s %-5s %-36s %s\n", "ID", "GEN",
		       "CGEN", "PARENT", "FLAGS", "PARENT UUID", "PATH");
	for (size_t i = 0; i < c.n; i++) {
		const struct arb_ioc_subvol_entry *e = &c.v[i].e;
		char pu[37], del[ARB_RESUME_TOKEN_MAX + 40];

		/* as btrfs: the top-level subvolume is not listed */
		if (e->id == ARB_INUM_FS_TREE)
			continue;
		if (snaps_only && !e->source_id)
			continue;
		if (ro_only && !(e->flags & ARB_IOC_SUBVOL_RDONLY))
			continue;
		if (json) {
			printf("%s\n ", first ? "" : ",");
			print_json_entry(&c.v[i], NULL);
			first = false;
			continue;
		}
		uuid_text(e->parent_uuid, pu);
		if (e->flags & ARB_IOC_SUBVOL_PARTIAL) {
			char tok[ARB_RESUME_TOKEN_MAX];

			partial_token(e, tok);
			snprintf(del, sizeof(del),
				 "(partial receive, resume token %s)", tok);
		} else if (e->flags & ARB_IOC_SUBVOL_DELETED)
			snprintf(del, sizeof(del),
				 "(deleted, being cleaned: %u.%u%%, %llu "
				 "nodes freed)",
				 e->clean_permille / 10, e->clean_permille % 10,
				 (unsigned long long)e->clean_freed);
		printf("%-6llu %-8llu %-8llu %-6llu %-5s %-36s %s\n",
		       (unsigned long long)e->id, (unsigned long long)e->gen,
		       (unsigned long long)e->otransid,
		       (unsigned long long)e->parent_id,
		       e->flags & ARB_IOC_SUBVOL_PARTIAL   ? "part"
		       : e->flags & ARB_IOC_SUBVOL_DELETED ? "del"
		       : e->flags & ARB_IOC_SUBVOL_RDONLY  ? "ro"
							   : "rw",
		       pu,
		       e->flags & ARB_IOC_SUBVOL_DELETED ? del : c.v[i].path);
	}
	if (json)
		printf("\n]}\n");
out:
	free(c.v);
	return t->image ? image_close(t, rc) : rc;
}

/* the subvolume holding path (mount or image) and its path */
static int info_of(struct target *t, const char *path, struct sv *s,
		   uint64_t *path_ino, uint64_t *mount_root)
{
	struct arb_subvol_info si;
	int ret;

	*mount_root = ARB_INUM_FS_TREE;
	if (t->image) {
		ret = cli_image_resolve(t->fs, path, path_ino);
		if (!ret)
			ret = arb_subvol_info(t->fs, *path_ino, &si);
		if (ret) {
			err("%s: %s: %s", t->image, path, arb_reason(ret, NULL));
			return 1;
		}
		cli_subvol_entry(&s->e, &si);
		if (arb_subvol_path(t->fs, si.id, s->path, sizeof(s->path)) < 0)
			snprintf(s->path, sizeof(s->path), "?");
		return 0;
	}

	struct arb_ioc_subvol_info in;
	struct arb_ioc_subvol_path p;
	struct stat st;
	int fd = cli_open_mount(path), rc = 1;

	if (fd < 0)
		return 1;
	if (fstat(fd, &st) || mount_info(fd, path, &in))
		goto out;
	*path_ino = st.st_ino;
	*mount_root = in.mount_root_id;
	s->e = in.e;
	memset(&p, 0, sizeof(p));
	p.id = in.e.id;
	if (ioctl(fd, ARB_IOC_SUBVOL_PATH, &p))
		snprintf(s->path, sizeof(s->path), "?");
	else
		snprintf(s->path, sizeof(s->path), "%s", p.path);
	rc = 0;
out:
	close(fd);
	return rc;
}

/* exclusive and shared bytes of subvolume id (arb_subvol_usage) */
static int usage_of(struct target *t, const char *path, uint64_t id,
		    struct arb_ioc_subvol_usage *u)
{
	memset(u, 0, sizeof(*u));
	if (t->image) {
		struct arb_subvol_usage su;
		int ret = arb_subvol_usage(t->fs, arb_inum(id, ARB_ROOT_INO),
					   &su);

		if (ret) {
			err("%s: subvolume %llu: usage: %s", t->image,
			    (unsigned long long)id, arb_reason(ret, NULL));
			return 1;
		}
		u->id = id;
		u->exclusive = su.exclusive;
		u->shared = su.shared;
		u->meta_exclusive = su.meta_exclusive;
		u->meta_shared = su.meta_shared;
		return 0;
	}

	int fd = cli_open_mount(path), rc;

	if (fd < 0)
		return 1;
	u->id = id;
	rc = sv_ioctl(fd, path, ARB_IOC_SUBVOL_USAGE, u, "subvolume usage")
		     ? 1
		     : 0;
	close(fd);
	return rc;
}

static int do_show(struct target *t, const char *path, bool json)
{
	struct arb_ioc_subvol_usage us;
	struct sv s;
	uint64_t ino, mroot;
	char u[37], pu[37], ru[37], ot[64], ct[64];
	int rc;

	if (t->image && image_open(t, false))
		return 1;
	rc = info_of(t, path, &s, &ino, &mroot);
	if (!rc && !(s.e.flags & ARB_IOC_SUBVOL_DELETED))
		rc = usage_of(t, path, s.e.id, &us);
	else
		memset(&us, 0, sizeof(us));
	if (rc)
		goto out;
	if (json) {
		print_json_entry(&s, &us);
		printf("\n");
		goto out;
	}
	uuid_text(s.e.uuid, u);
	uuid_text(s.e.parent_uuid, pu);
	uuid_text(s.e.received_uuid, ru);
	time_text(s.e.otime_sec, ot, sizeof(ot));
	time_text(s.e.ctime_sec, ct, sizeof(ct));
	printf("%s\n", s.e.id == ARB_INUM_FS_TREE ? "/" : s.path);
	if (ino != s.e.ino)
		printf("\t(%s is a directory inside this subvolume)\n", path);
	printf("\tName:\t\t\t%s\n", s.e.id == ARB_INUM_FS_TREE ? "<FS_TREE>"
								: s.e.name);
	printf("\tUUID:\t\t\t%s\n", u);
	printf("\tParent UUID:\t\t%s\n", pu);
	printf("\tReceived UUID:\t\t%s\n", ru);
	printf("\tCreation time:\t\t%s\n", ot);
	printf("\tSubvolume ID:\t\t%llu\n", (unsigned long long)s.e.id);
	printf("\tGeneration:\t\t%llu\n", (unsigned long long)s.e.gen);
	printf("\tGen at creation:\t%llu\n", (unsigned long long)s.e.otransid);
	printf("\tParent ID:\t\t%llu\n", (unsigned long long)s.e.parent_id);
	if (s.e.source_id)
		printf("\tSnapshot of ID:\t\t%llu\n",
		       (unsigned long long)s.e.source_id);
	printf("\tFlags:\t\t\t%s%s\n",
	       s.e.flags & ARB_IOC_SUBVOL_RDONLY ? "readonly" : "-",
	       s.e.flags & ARB_IOC_SUBVOL_DELETED ? " deleted" : "");
	if (s.e.ctime_sec)
		printf("\tFlags changed:\t\t%s\n", ct);
	if (s.e.rtransid)
		printf("\tSend/receive gen:\t%llu / %llu\n",
		       (unsigned long long)s.e.stransid,
		       (unsigned long long)s.e.rtransid);
	/* exact, from the reference counts (arb_subvol_usage) */
	printf("\tExclusive data:\t\t%llu bytes\n",
	       (unsigned long long)us.exclusive);
	printf("\tShared data:\t\t%llu bytes\n", (unsigned long long)us.shared);
	printf("\tExclusive metadata:\t%llu bytes\n",
	       (unsigned long long)us.meta_exclusive);
	printf("\tShared metadata:\t%llu bytes\n",
	       (unsigned long long)us.meta_shared);
	if (!t->image && s.e.id == mroot)
		printf("\tMounted as the root of this mount\n");
out:
	return t->image ? image_close(t, rc) : rc;
}

/* ---- set-default / get-default --------------------------------------------- */

/* as btrfs: "ID 5 (FS_TREE)", or "ID 256 gen 12 top level 5 path sv" */
static void print_default(const struct arb_ioc_subvol_entry *e,
			  const char *path)
{
	if (e->id == ARB_INUM_FS_TREE)
		printf("ID 5 (FS_TREE)\n");
	else
		printf("ID %llu gen %llu top level %llu path %s\n",
		       (unsigned long long)e->id, (unsigned long long)e->gen,
		       (unsigned long long)e->parent_id, path);
}

/* the entry and path of subvolume id on the mount fd */
static int mount_entry(int fd, const char *path, uint64_t id, struct sv *s)
{
	struct arb_ioc_subvol_info in;
	struct arb_ioc_subvol_path p;

	memset(&in, 0, sizeof(in));
	in.id = id;
	if (sv_ioctl(fd, path, ARB_IOC_SUBVOL_INFO, &in, "subvolume info"))
		return -1;
	s->e = in.e;
	memset(&p, 0, sizeof(p));
	p.id = id;
	if (ioctl(fd, ARB_IOC_SUBVOL_PATH, &p))
		snprintf(s->path, sizeof(s->path), "?");
	else
		snprintf(s->path, sizeof(s->path), "%s", p.path);
	return 0;
}

/* the same in an image */
static int image_entry(struct target *t, uint64_t id, struct sv *s)
{
	struct arb_subvol_info si;
	int ret = arb_subvol_info_id(t->fs, id, &si);

	if (ret) {
		err("%s: subvolume %llu: %s", t->image,
		    (unsigned long long)id, arb_reason(ret, NULL));
		return -1;
	}
	cli_subvol_entry(&s->e, &si);
	if (arb_subvol_path(t->fs, id, s->path, sizeof(s->path)) < 0)
		snprintf(s->path, sizeof(s->path), "?");
	return 0;
}

static int do_get_default(struct target *t, const char *path)
{
	struct sv s;
	uint64_t id;
	int ret, rc = 1;

	if (t->image) {
		if (image_open(t, false))
			return 1;
		ret = arb_subvol_get_default(t->fs, &id);
		if (ret)
			err("%s: %s", t->image, arb_reason(ret, NULL));
		else if (!image_entry(t, id, &s))
			rc = 0;
		if (!rc)
			print_default(&s.e, s.path);
		return image_close(t, rc);
	}

	struct arb_ioc_subvol_default d;
	int fd = cli_open_mount(path);

	if (fd < 0)
		return 1;
	memset(&d, 0, sizeof(d));
	if (!sv_ioctl(fd, path, ARB_IOC_SUBVOL_GET_DEFAULT, &d, "get-default") &&
	    !mount_entry(fd, path, d.id, &s)) {
		print_default(&s.e, s.path);
		rc = 0;
	}
	close(fd);
	return rc;
}

/* id: the subvolume to make the default, or 0 (NULL idstr): the one
 * holding path */
static int do_set_default(struct target *t, const char *idstr,
			  const char *path)
{
	struct arb_subvol_info si;
	struct sv s;
	uint64_t id = 0, ino;
	int ret, rc = 1;

	if (idstr && (!parse_id(idstr, &id))) {
		err("set-default: bad subvolume id '%s'", idstr);
		return 2;
	}
	/* as btrfs: 0 is the top level */
	if (idstr && !id)
		id = ARB_INUM_FS_TREE;
	if (t->image) {
		if (image_open(t, true))
			return 1;
		if (!idstr) {
			ret = cli_image_resolve(t->fs, path, &ino);
			if (!ret)
				ret = arb_subvol_info(t->fs, ino, &si);
			if (ret) {
				err("%s: %s: %s", t->image, path,
				    arb_reason(ret, NULL));
				return image_close(t, 1);
			}
			id = si.id;
		}
		ret = arb_subvol_set_default(t->fs, id);
		if (ret)
			err("%s: subvolume %llu: %s", t->image,
			    (unsigned long long)id,
			    ret == -ENOENT ? "no such subvolume (or it is "
					     "being deleted)"
					   : arb_reason(ret, NULL));
		else if (!image_entry(t, id, &s))
			rc = 0;
		if (!rc)
			printf("Set the default subvolume of %s to ID %llu "
			       "(%s)\n", t->image, (unsigned long long)id,
			       id == ARB_INUM_FS_TREE ? "the top level"
						      : s.path);
		return image_close(t, rc);
	}

	struct arb_ioc_subvol_default d;
	int fd = cli_open_mount(path);

	if (fd < 0)
		return 1;
	memset(&d, 0, sizeof(d));
	d.id = id;
	if (ioctl(fd, ARB_IOC_SUBVOL_SET_DEFAULT, &d)) {
		if (errno == ENOENT && id)
			err("%s: subvolume %llu: no such subvolume (or it is "
			    "being deleted)", path, (unsigned long long)id);
		else
			ioc_error(path, "set-default", errno);
		goto out;
	}
	if (mount_entry(fd, path, d.id, &s))
		goto out;
	printf("Set the default subvolume to ID %llu (%s)\n",
	       (unsigned long long)d.id,
	       d.id == ARB_INUM_FS_TREE ? "the top level" : s.path);
	rc = 0;
out:
	close(fd);
	return rc;
}

/* ---- property ------------------------------------------------------------------ */

static int do_prop_get(struct target *t, const char *path)
{
	struct sv s;
	uint64_t ino, mroot;
	int rc;

	if (t->image && image_open(t, false))
		return 1;
	rc = info_of(t, path, &s, &ino, &mroot);
	if (!rc && ino != s.e.ino) {
		err("%s: not a subvolume (a directory of subvolume %llu): "
		    "ro is a property of subvolumes", path,
		    (unsigned long long)s.e.id);
		rc = 1;
	}
	if (!rc)
		printf("ro=%s\n",
		       s.e.flags & ARB_IOC_SUBVOL_RDONLY ? "true" : "false");
	return t->image ? image_close(t, rc) : rc;
}

static int do_prop_set(struct target *t, const char *path, bool ro)
{
	struct sv s;
	uint64_t ino, mroot;
	bool cleared = false;
	int rc, ret;

	if (t->image && image_open(t, true))
		return 1;
	rc = info_of(t, path, &s, &ino, &mroot);
	if (rc)
		goto out;
	if (ino != s.e.ino) {
		err("%s: not a subvolume (a directory of subvolume %llu): "
		    "ro is a property of subvolumes", path,
		    (unsigned long long)s.e.id);
		rc = 1;
		goto out;
	}
	if (ro && s.e.id == ARB_INUM_FS_TREE) {
		err("%s: the top-level subvolume cannot be made read-only",
		    path);
		rc = 1;
		goto out;
	}
	if (t->image) {
		ret = arb_subvol_set_rdonly(t->fs, ino, ro, &cleared);
		if (ret) {
			err("%s: %s: %s", t->image, path, arb_reason(ret, NULL));
			rc = 1;
			goto out;
		}
	} else {
		struct arb_ioc_subvol_flags f;
		int fd = cli_open_mount(path);

		if (fd < 0) {
			rc = 1;
			goto out;
		}
		/* pages written before reach it while it is writable */
		if (ro && syncfs(fd) < 0)
			fprintf(stderr, "arbor property: %s: warning: an "
				"earlier writeback failed (%s)\n", path,
				strerror(errno));
		memset(&f, 0, sizeof(f));
		f.flags = ro ? ARB_IOC_SUBVOL_RDONLY : 0;
		if (sv_ioctl(fd, path, ARB_IOC_SUBVOL_SET_FLAGS, &f,
			     "set ro"))
			rc = 1;
		cleared = f.cleared_received;
		close(fd);
		if (rc)
			goto out;
	}
	if (cleared)
		fprintf(stderr,
			"arbor property: warning: %s was received; its "
			"received UUID is cleared, so later incremental "
			"receives will not use it as a base\n", path);
out:
	return t->image ? image_close(t, rc) : rc;
}

/*
 * The compression property of any file or directory: the COMPR and
 * NOCOMP attributes (chattr +c, +m), through FS_IOC_GETFLAGS and
 * FS_IOC_SETFLAGS on a mount, arb_fs_get_flags/set_flags on an image.
 */
static const char *compression_name(uint32_t fl)
{
	if (fl & ARB_FL_NOCOMP)
		return "none";
	return fl & ARB_FL_COMPR ? "zlib" : "";
}

/* value NULL: get */
static int do_prop_compression(struct target *t, const char *path,
			       const char *value)
{
	uint32_t fl = 0;
	uint64_t ino = 0;
	int rc = 0, ret, fd = -1, ifl = 0;

	if (t->image) {
		if (image_open(t, value != NULL))
			return 1;
		ret = arb_fs_lookup_path(t->fs, ARB_ROOT_INO, path, &ino);
		if (!ret)
			ret = arb_fs_get_flags(t->fs, ino, &fl);
	} else {
		fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW);
		ret = fd < 0 || ioctl(fd, FS_IOC_GETFLAGS, &ifl) < 0 ? -errno
								    : 0;
		fl = (uint32_t)ifl;
	}
	if (ret) {
		err("%s: %s", path, strerror(-ret));
		rc = 1;
		goto out;
	}
	if (!value) {
		printf("compression=%s\n", compression_name(fl));
		goto out;
	}
	fl &= ~(ARB_FL_COMPR | ARB_FL_NOCOMP);
	if (!strcmp(value, "zlib"))
		fl |= ARB_FL_COMPR;
	else if (!strcmp(value, "none") || !strcmp(value, "no"))
		fl |= ARB_FL_NOCOMP;
	if (t->image) {
		ret = arb_fs_set_flags(t->fs, ino, fl);
	} else {
		ifl = (int)fl;
		ret = ioctl(fd, FS_IOC_SETFLAGS, &ifl) < 0 ? -errno : 0;
	}
	if (ret) {
		err("%s: set compression %s: %s", path, value, strerror(-ret));
		rc = 1;
	}
out:
	if (fd >= 0)
		close(fd);
	return t->image ? image_close(t, rc) : rc;
}

/* "arbor property get|set PATH ro|compression [VALUE]" (argv[0]
 * "property") */
int cli_property(int argc, char **argv)
{
	static const struct option lo[] = { { "image", 1, 0, 'i' },
					    { "help", 0, 0, 'h' },
					    { 0, 0, 0, 0 } };
	struct target t = { 0 };
	const char *op;
	int c;

	cmd_name = "property";
	optind = 1;
	while ((c = getopt_long(argc, argv, "+i:h", lo, NULL)) != -1) {
		switch (c) {
		case 'i': t.image = optarg; break;
		case 'h': prop_usage(stdout); return 0;
		default: prop_usage(stderr); return 2;
		}
	}
	if (optind >= argc) {
		prop_usage(stderr);
		return 2;
	}
	op = argv[optind++];
	if (!strcmp(op, "help")) {
		prop_usage(stdout);
		return 0;
	}
	/* options after the operation too: "property get --image IMG /" */
	while ((c = getopt_long(argc, argv, "i:h", lo, NULL)) != -1) {
		switch (c) {
		case 'i': t.image = optarg; break;
		case 'h': prop_usage(stdout); return 0;
		default: prop_usage(stderr); return 2;
		}
	}
	if (strcmp(op, "get") && strcmp(op, "set")) {
		err("unknown operation '%s' (get or set)", op);
		return 2;
	}
	if (optind >= argc) {
		err("%s: want a PATH", op);
		return 2;
	}
	const char *path = argv[optind++];
	const char *name = optind < argc ? argv[optind++] : NULL;
	const char *value = optind < argc ? argv[optind++] : NULL;

	if (optind < argc) {
		err("unexpected argument '%s'", argv[optind]);
		return 2;
	}
	if (name && strcmp(name, "ro") && strcmp(name, "compression")) {
		err("unknown property '%s' (arborfs has ro and compression)",
		    name);
		return 2;
	}
	if (name && !strcmp(name, "compression")) {
		if (!strcmp(op, "get") && value) {
			err("get takes no value");
			return 2;
		}
		if (!strcmp(op, "set") &&
		    (!value || (strcmp(value, "zlib") && strcmp(value, "none") &&
				strcmp(value, "no") && *value))) {
			err("compression: want zlib, none or \"\"%s%s%s",
			    value ? ", not '" : "", value ? value : "",
			    value ? "'" : "");
			return 2;
		}
		return do_prop_compression(&t, path,
					   !strcmp(op, "set") ? value : NULL);
	}
	if (!strcmp(op, "get")) {
		if (value) {
			err("get takes no value");
			return 2;
		}
		return do_prop_get(&t, path);
	}
	if (!name || !value) {
		err("set: want PATH ro true|false");
		return 2;
	}
	if (strcmp(value, "true") && strcmp(value, "false")) {
		err("ro: want true or false, not '%s'", value);
		return 2;
	}
	return do_prop_set(&t, path, !strcmp(value, "true"));
}

/* "arbor subvolume CMD ..." (argv[0] "subvolume" or "sub") */
int cli_subvolume(int argc, char **argv)
{
	static const struct option lo[] = { { "image", 1, 0, 'i' },
					    { "json", 0, 0, 'j' },
					    { "wait", 0, 0, 'w' },
					    { "readonly", 0, 0, 'R' },
					    { "help", 0, 0, 'h' },
					    { 0, 0, 0, 0 } };
	bool json = false, wait = false, snaps = false, ro = false;
	struct target t = { 0 };
	const char *cmd;
	int c, nargs;
	char **args;

	if (argc < 2) {
		sub_usage(stderr);
		return 2;
	}
	cmd = argv[1];
	if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") ||
	    !strcmp(cmd, "-h")) {
		sub_usage(stdout);
		return 0;
	}
	/* find-new and diff: findnew.c */
	if (!strcmp(cmd, "find-new") || !strcmp(cmd, "diff"))
		return cli_subvol_diff(argc, argv);
	if (strcmp(cmd, "create") && strcmp(cmd, "snapshot") &&
	    strcmp(cmd, "delete") && strcmp(cmd, "list") &&
	    strcmp(cmd, "show") && strcmp(cmd, "sync") &&
	    strcmp(cmd, "set-default") && strcmp(cmd, "get-default")) {
		err("unknown command '%s'", cmd);
		fprintf(stderr, "Try 'arbor subvolume --help'.\n");
		return 2;
	}
	cmd_name = "subvolume";
	optind = 2;
	/* -r is read-only for snapshot, read-only ones for list; -s
	 * snapshots only (list) */
	while ((c = getopt_long(argc, argv, "i:jwrsh", lo, NULL)) != -1) {
		switch (c) {
		case 'i': t.image = optarg; break;
		case 'j': json = true; break;
		case 'w': wait = true; break;
		case 'r':
		case 'R': ro = true; break;
		case 's': snaps = true; break;
		case 'h': sub_usage(stdout); return 0;
		default: sub_usage(stderr); return 2;
		}
	}
	args = argv + optind;
	nargs = argc - optind;
#define ONLY(cond, what)                                                       \
	do {                                                                   \
		if (cond) {                                                    \
			err("%s: %s is not an option of %s", cmd, what, cmd);  \
			return 2;                                              \
		}                                                              \
	} while (0)
	ONLY(json && strcmp(cmd, "list") && strcmp(cmd, "show"), "--json");
	ONLY(wait && strcmp(cmd, "delete"), "--wait");
	ONLY(snaps && strcmp(cmd, "list"), "-s");
	ONLY(ro && strcmp(cmd, "list") && strcmp(cmd, "snapshot"), "-r");
#undef ONLY
	if (!strcmp(cmd, "create")) {
		if (nargs != 1) {
			err("create: want one PATH");
			return 2;
		}
		return t.image ? image_create(&t, NULL, args[0], false, false)
			       : mount_create(NULL, args[0], false, false);
	}
	if (!strcmp(cmd, "snapshot")) {
		if (nargs != 2) {
			err("snapshot: want SOURCE and DEST");
			return 2;
		}
		return t.image ? image_create(&t, args[0], args[1], true, ro)
			       : mount_create(args[0], args[1], true, ro);
	}
	if (!strcmp(cmd, "delete")) {
		if (nargs < 1) {
			err("delete: want a PATH");
			return 2;
		}
		return do_delete(&t, args, nargs, wait);
	}
	if (!strcmp(cmd, "sync")) {
		if (nargs < (t.image ? 0 : 1)) {
			err("sync: want a PATH");
			return 2;
		}
		/* with --image a PATH is optional: "sync --image IMG [ID...]" */
		if (t.image && nargs && !parse_id(args[0], &(uint64_t){ 0 }))
			return do_sync(&t, args[0], args + 1, nargs - 1);
		if (t.image)
			return do_sync(&t, NULL, args, nargs);
		return do_sync(&t, args[0], args + 1, nargs - 1);
	}
	if (!strcmp(cmd, "set-default")) {
		/* PATH, or ID PATH (as btrfs) */
		if (nargs != 1 && nargs != 2) {
			err("set-default: want PATH, or ID PATH");
			return 2;
		}
		return do_set_default(&t, nargs == 2 ? args[0] : NULL,
				      args[nargs - 1]);
	}
	if (nargs != (t.image && nargs == 0 ? 0 : 1)) {
		err("%s: want one PATH", cmd);
		return 2;
	}
	if (!strcmp(cmd, "get-default"))
		return do_get_default(&t, nargs ? args[0] : "/");
	if (!strcmp(cmd, "list"))
		return do_list(&t, nargs ? args[0] : "/", json, snaps, ro);
	return do_show(&t, nargs ? args[0] : "/", json);
}
