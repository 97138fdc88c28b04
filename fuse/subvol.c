// SPDX-License-Identifier: MIT
/*
 * subvol.c - subvolumes and snapshots in the daemon: the ARB_IOC_SUBVOL_*
 * ioctls of <arbor/ioctl.h>, the mount's root (-o subvol=, subvolid=, or
 * the default subvolume) and
 * what the kernel must be told so that read-only subvolumes refuse
 * writes at the call that asks.
 *
 * Permissions.  Control requests bypass default_permissions: the kernel
 * checks nothing before it sends an ioctl but that the descriptor is
 * open.  So the daemon checks the caller itself, with its uid, gid and
 * groups (fuse_req_getgroups: /proc/TID/status of the requesting thread,
 * blocked in ioctl(2) meanwhile) and the mode and access ACL of the
 * inodes involved, as the kernel's generic_permission would; capabilities
 * from /proc/PID/status as ctl.c reads them.  The rules are btrfs's with
 * its defaults (ioctl.h): create and snapshot where the caller could
 * mkdir, a snapshot of a subvolume it owns; delete with CAP_SYS_ADMIN, or
 * as the owner of the subvolume with -o user_subvol_rm_allowed; set the
 * default subvolume with CAP_SYS_ADMIN.
 *
 * The kernel's caches.  Entries (negative ones too) are cached for an
 * hour (ops.c), and a subvolume made or deleted here did not go through
 * the kernel: the entry of its name is dropped with
 * fuse_lowlevel_notify_inval_entry before the ioctl is answered, so that
 * every process sees the change once the caller does.  Not from the
 * serving thread: the kernel takes the directory's lock, which a lookup
 * waiting for a request of ours may hold (one serving thread, or all of
 * them busy); a thread of its own does it, then answers (replyq.c).
 *
 * Read-only subvolumes.  The library refuses every change inside one
 * with EROFS.  With the writeback cache a write(2) only fills the page
 * cache, and the WRITE refused at writeback would be data lost after
 * write(2) succeeded; so, as for immutable files (iflags.c): a write-open
 * is refused at open(2) when the daemon sees OPEN requests (kept when the
 * image had subvolumes at mount, ops.c afs_init), and inodes of
 * read-only subvolumes get attributes that are stale at once, so that
 * each write(2) sends a GETATTR that the daemon fails with EROFS
 * (afs_iflags_getattr_fh).  Which trees are read-only is kept here, in a
 * small sorted array: every change of the flag on a mounted filesystem
 * comes through these ioctls.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include <arbor/subvol.h>

#include "arborfs_fuse.h"

#define CAP_DAC_OVERRIDE_BIT 1
#define CAP_DAC_READ_SEARCH_BIT 2
#define CAP_FOWNER_BIT 3
#define CAP_SYS_ADMIN_BIT 21

uint64_t afs_root_ino = ARB_ROOT_INO;
static uint64_t root_id = ARB_INUM_FS_TREE;

/* ---- subvolumes present ------------------------------------------------- */

/* read-only subvolumes are the library's business (struct arb_stat
 * rdonly, arb_fs_may_open); the daemon only remembers whether any
 * subvolume exists */
static bool any_subvol;

bool afs_subvol_any(void)
{
	return any_subvol;
}

static int note_one(void *ctx, const struct arb_subvol_info *info)
{
	(void)ctx;
	if (info->id != ARB_INUM_FS_TREE)
		any_subvol = true;
	return 0;
}

/* ---- the mount's root ------------------------------------------------------ */

/* ino (library number) of path below the filesystem tree's root */
static int resolve_path(struct arb_fs *fs, const char *path, uint64_t *ino)
{
	return arb_fs_lookup_path(fs, ARB_ROOT_INO, path, ino);
}

/*
 * The mount's root: subvol=PATH, subvolid=ID, or else the default
 * subvolume (arb_subvol_get_default; tree 5 unless `arbor subvolume
 * set-default` said otherwise), as btrfs.  subvolid=5 is the way to the
 * top level when another one is the default.
 */
int afs_subvol_mount_root(struct afs *afs, const char *path, uint64_t id,
			  bool have_id)
{
	struct arb_subvol_info info;
	bool by_default = false;
	char what[64];
	uint64_t ino = 0;
	int ret;

	ret = arb_subvol_list(afs->fs, note_one, NULL);
	if (ret < 0)
		afs_log(LOG_WARNING, "listing the subvolumes: %s",
			strerror(-ret));
	if (!path && !have_id) {
		ret = arb_subvol_get_default(afs->fs, &id);
		if (ret) {
			fprintf(stderr, "arborfs: reading the default "
				"subvolume: %s (-o subvolid=5 mounts the top "
				"level)\n", strerror(-ret));
			return 1;
		}
		if (id == ARB_INUM_FS_TREE)
			return 0;
		have_id = by_default = true;
	}
	snprintf(what, sizeof(what),
		 by_default ? "the default subvolume %" PRIu64
			    : "subvolid=%" PRIu64,
		 id);
	if (path) {
		ret = resolve_path(afs->fs, path, &ino);
		if (ret) {
			fprintf(stderr, "arborfs: subvol=%s: %s\n", path,
				ret == -EINVAL ? "'..' is not allowed (the "
						 "path starts at the top-level "
						 "subvolume)"
					       : strerror(-ret));
			return 1;
		}
		ret = arb_subvol_info(afs->fs, ino, &info);
		if (ret) {
			fprintf(stderr, "arborfs: subvol=%s: %s\n", path,
				strerror(-ret));
			return 1;
		}
		if (info.ino != ino) {
			fprintf(stderr,
				"arborfs: subvol=%s: not a subvolume (a "
				"directory inside subvolume %" PRIu64 "; "
				"`arbor subvolume list` shows them)\n",
				path, info.id);
			return 1;
		}
		if (have_id && info.id != id) {
			fprintf(stderr,
				"arborfs: subvol=%s is subvolume %" PRIu64
				", not subvolid=%" PRIu64 "\n",
				path, info.id, id);
			return 1;
		}
	} else if (have_id) {
		ret = arb_subvol_info_id(afs->fs, id, &info);
		if (ret == -ENOENT || ret == -EINVAL ||
		    (!ret && (info.flags & ARB_SUBVOL_DELETED))) {
			fprintf(stderr,
				"arborfs: %s: no such subvolume%s (%s)\n",
				what, !ret ? " (deleted)" : "",
				by_default ? "-o subvolid=5 mounts the top "
					     "level; `arbor subvolume "
					     "set-default` another one"
					   : "`arbor subvolume list --image "
					     "IMG` shows them");
			return 1;
		}
		if (ret) {
			fprintf(stderr, "arborfs: %s: %s\n", what,
				strerror(-ret));
			return 1;
		}
		/*
		 * The library opens a subvolume's tree when a lookup crosses
		 * its link (lib/fs/inum.c): before that its inode numbers
		 * are refused (ENOENT).  So walk its path, as subvol= does.
		 */
		if (id != ARB_INUM_FS_TREE) {
			char p[PATH_MAX];

			ret = arb_subvol_path(afs->fs, id, p, sizeof(p));
			if (!ret)
				ret = resolve_path(afs->fs, p, &ino);
			if (!ret && ino != info.ino)
				ret = -EIO;
			if (ret) {
				fprintf(stderr, "arborfs: %s: cannot reach "
					"its root: %s%s\n", what,
					strerror(-ret),
					by_default ? " (-o subvolid=5 mounts "
						     "the top level)"
						   : "");
				return 1;
			}
		}
	} else {
		return 0;
	}
	afs_root_ino = info.ino;
	root_id = info.id;
	/* an id's root is inode 256 of its tree: never FUSE_ROOT_ID */
	AFS_ASSERT(afs_root_ino != FUSE_ROOT_ID);
	return 0;
}

/* ---- the caller ------------------------------------------------------------ */

struct caller {
	uid_t uid;
	gid_t gid;
	pid_t pid;
	int ngroups; /* -1: not known (pid 0, no /proc) */
	gid_t groups[NGROUPS_MAX > 256 ? 256 : NGROUPS_MAX];
};

static void caller_get(fuse_req_t req, struct caller *c)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	int n;

	c->uid = ctx->uid;
	c->gid = ctx->gid;
	c->pid = ctx->pid;
	n = fuse_req_getgroups(req, (int)(sizeof(c->groups) /
					  sizeof(c->groups[0])),
			       c->groups);
	/* more than we keep: the first ones only (still correct for
	 * grants, at worst refuses what a later group would allow) */
	if (n > (int)(sizeof(c->groups) / sizeof(c->groups[0])))
		n = (int)(sizeof(c->groups) / sizeof(c->groups[0]));
	c->ngroups = n < 0 ? -1 : n;
}

static bool caller_cap(const struct caller *c, int bit)
{
	return c->uid == 0 || (c->pid > 0 && afs_pid_has_cap(c->pid, bit));
}

static bool caller_in_group(const struct caller *c, gid_t gid)
{
	if (c->gid == gid)
		return true;
	for (int i = 0; i < c->ngroups; i++)
		if (c->groups[i] == gid)
			return true;
	return false;
}

/* POSIX ACL xattr (system.posix_acl_access): version 2, then entries of
 * tag (16), perm (16), id (32), little-endian */
#define ACL_USER_OBJ 0x01
#define ACL_USER 0x02
#define ACL_GROUP_OBJ 0x04
#define ACL_GROUP 0x08
#define ACL_MASK 0x10
#define ACL_OTHER 0x20

static uint32_t le(const unsigned char *p, int bytes)
{
	uint32_t v = 0;

	for (int i = bytes - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/*
 * As the kernel's posix_acl_permission: 0 granted, -EACCES refused, 1 no
 * usable ACL (the mode decides).
 */
static int acl_permission(struct afs *afs, const struct caller *c,
			  const struct arb_stat *st, unsigned want)
{
	unsigned char buf[4 + 8 * 64];
	unsigned mask = 7, found_perm = 0;
	bool found = false, have_mask = false;
	ssize_t n;

	n = arb_fs_getxattr(afs->fs, st->ino, "system.posix_acl_access", buf,
			    sizeof(buf));
	if (n < 4 || (n - 4) % 8 || le(buf, 4) != 2)
		return 1;
	for (ssize_t off = 4; off < n; off += 8)
		if (le(buf + off, 2) == ACL_MASK) {
			have_mask = true;
			mask = le(buf + off + 2, 2) & 7;
		}
	for (ssize_t off = 4; off < n; off += 8) {
		unsigned tag = le(buf + off, 2), perm = le(buf + off + 2, 2) & 7;
		uint32_t id = le(buf + off + 4, 4);

		switch (tag) {
		case ACL_USER_OBJ:
			if (c->uid == st->uid)
				return (perm & want) == want ? 0 : -EACCES;
			break;
		case ACL_USER:
			if (c->uid == id)
				return (perm & mask & want) == want ? 0 : -EACCES;
			break;
		case ACL_GROUP_OBJ:
		case ACL_GROUP:
			if (caller_in_group(c, tag == ACL_GROUP ? id : st->gid)) {
				found = true;
				found_perm |= (perm & (have_mask ? mask : 7));
			}
			break;
		case ACL_OTHER:
			if (found)
				return (found_perm & want) == want ? 0 : -EACCES;
			return (perm & want) == want ? 0 : -EACCES;
		}
	}
	return found && (found_perm & want) == want ? 0 : -EACCES;
}

/* may the caller access st (a directory) with want (4 read, 2 write,
 * 1 search)?  0 or -EACCES */
static int may_access(struct afs *afs, const struct caller *c,
		      const struct arb_stat *st, unsigned want)
{
	unsigned perm;
	int ret;

	if (caller_cap(c, CAP_DAC_OVERRIDE_BIT))
		return 0;
	if (!(want & 2) && caller_cap(c, CAP_DAC_READ_SEARCH_BIT))
		return 0;
	ret = acl_permission(afs, c, st, want);
	if (ret <= 0)
		return ret;
	if (c->uid == st->uid)
		perm = st->mode >> 6;
	else if (caller_in_group(c, st->gid))
		perm = st->mode >> 3;
	else
		perm = st->mode;
	return (perm & want) == want ? 0 : -EACCES;
}

/* ---- answers ----------------------------------------------------------------- */

static void reply_out(fuse_req_t req, void *buf, size_t size)
{
	uint32_t hdr[2] = { (uint32_t)size, ARB_IOC_VERSION };

	memcpy(buf, hdr, sizeof(hdr));
	fuse_reply_ioctl(req, 0, buf, size);
}

static void reply_fail(fuse_req_t req, int ret)
{
	afs_op_error(fuse_req_userdata(req));
	fuse_reply_err(req, -ret);
}

/*
 * A change of the namespace: the kernel drops the entry of name in
 * parent (node id), then the request is answered with out.
 */
struct inval_ent {
	struct afs_replyq_ent q; /* first */
	fuse_req_t req;          /* NULL: answered already */
	fuse_ino_t parent;
	char name[ARB_NAME_MAX + 1];
	struct arb_ioc_subvol_create out;
};

static void inval_serve(struct afs *afs, struct afs_replyq_ent *qe)
{
	struct inval_ent *e = (struct inval_ent *)qe;
	int ret;

	/* -ENOENT: the kernel has no entry (nor the directory) cached */
	ret = fuse_lowlevel_notify_inval_entry(afs->se, e->parent, e->name,
					       strlen(e->name));
	if (ret && ret != -ENOENT)
		afs_log(LOG_WARNING, "dropping the kernel's entry '%s' of "
			"directory %llu: %s", e->name,
			(unsigned long long)e->parent, strerror(-ret));
	if (e->req) {
		afs_replyq_answered(&e->q);
		reply_out(e->req, &e->out, sizeof(e->out));
	}
	free(e);
}

static struct afs_replyq invalq = AFS_REPLYQ_INIT(inval_serve);

/* answer req with out once the kernel has dropped name in parent */
static void reply_after_inval(fuse_req_t req, fuse_ino_t parent,
			      const char *name,
			      const struct arb_ioc_subvol_create *out)
{
	struct afs *afs = fuse_req_userdata(req);
	struct inval_ent *e = malloc(sizeof(*e));
	int ret;

	if (!e || !afs->se) {
		/* the change is made: answer it; the entry may stay stale
		 * until its timeout */
		struct arb_ioc_subvol_create o = *out;

		free(e);
		reply_out(req, &o, sizeof(o));
		return;
	}
	e->req = req;
	e->parent = parent;
	snprintf(e->name, sizeof(e->name), "%s", name);
	e->out = *out;
	ret = afs_replyq_add(&invalq, afs, &e->q, true);
	if (!ret)
		return;
	/* a ring thread already waits there (replyq.c): answer now, and
	 * drop the entry right after */
	reply_out(req, &e->out, sizeof(e->out));
	e->req = NULL;
	if (ret != -EBUSY || afs_replyq_add(&invalq, afs, &e->q, false))
		free(e);
}

/* ARB_IOC_SUBVOL_WAIT from a thread of its own */
struct wait_ent {
	struct afs_replyq_ent q; /* first */
	fuse_req_t req;
	uint64_t id;
};

static void wait_serve(struct afs *afs, struct afs_replyq_ent *qe)
{
	struct wait_ent *e = (struct wait_ent *)qe;
	struct arb_ioc_subvol_wait out;
	int ret;

	ret = arb_subvol_wait(afs->fs, e->id);
	afs_replyq_answered(&e->q);
	if (ret) {
		reply_fail(e->req, ret);
	} else {
		memset(&out, 0, sizeof(out));
		out.id = e->id;
		reply_out(e->req, &out, sizeof(out));
	}
	free(e);
}

static struct afs_replyq waitq = AFS_REPLYQ_INIT(wait_serve);

void afs_subvol_stop(void)
{
	afs_replyq_stop(&invalq);
	afs_replyq_stop(&waitq);
}

/* ---- the ioctls --------------------------------------------------------------- */

static void entry_from_info(struct arb_ioc_subvol_entry *e,
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
	if (i->id == root_id && !(i->flags & ARB_SUBVOL_DELETED))
		e->flags |= ARB_IOC_SUBVOL_MOUNT_ROOT;
	memcpy(e->uuid, i->uuid, 16);
	memcpy(e->parent_uuid, i->parent_uuid, 16);
	memcpy(e->received_uuid, i->received_uuid, 16);
	snprintf(e->name, sizeof(e->name), "%s", i->name);
}

/* a name for CREATE/SNAPSHOT/DELETE: NUL-terminated, one component */
static int check_name(const char *name, size_t size)
{
	size_t n = strnlen(name, size);

	if (n == size || n == 0)
		return -EINVAL;
	if (n > ARB_NAME_MAX)
		return -ENAMETOOLONG;
	if (strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
		return -EINVAL;
	return 0;
}

/* the directory the descriptor names: its attributes, or -ENOTDIR */
static int get_dir(struct afs *afs, uint64_t dir, struct arb_stat *st)
{
	int ret = arb_fs_getattr(afs->fs, dir, st);

	if (ret)
		return ret;
	return S_ISDIR(st->mode) ? 0 : -ENOTDIR;
}

static int ioc_create(fuse_req_t req, fuse_ino_t nodeid, bool snapshot,
		      struct arb_ioc_subvol_create *in)
{
	struct afs *afs = fuse_req_userdata(req);
	uint64_t dir = afs_node_ino(nodeid);
	struct arb_ioc_subvol_create out;
	struct arb_stat dst, sst, st;
	struct arb_cred cr;
	struct caller c;
	int ret;

	if (afs->readonly)
		return -EROFS;
	if (in->flags & ~(uint64_t)(snapshot ? ARB_IOC_SUBVOL_RDONLY : 0) ||
	    (!snapshot && in->src_ino))
		return -EINVAL;
	ret = check_name(in->name, sizeof(in->name));
	if (ret)
		return ret;
	ret = get_dir(afs, dir, &dst);
	if (ret)
		return ret;
	caller_get(req, &c);
	ret = may_access(afs, &c, &dst, 3);
	if (ret)
		return ret;
	cr.uid = c.uid;
	cr.gid = c.gid;
	if (snapshot) {
		struct arb_subvol_info si;

		ret = arb_fs_getattr(afs->fs, in->src_ino, &sst);
		if (ret == -ENOENT || ret == -EINVAL)
			return -EINVAL;
		if (ret)
			return ret;
		ret = arb_subvol_info(afs->fs, in->src_ino, &si);
		if (ret)
			return ret;
		if (si.ino != in->src_ino)
			return -EINVAL;
		/* reading it all takes read and search of its root; taking
		 * it whole (its set-id files, as they are now), owning it */
		ret = may_access(afs, &c, &sst, 5);
		if (ret)
			return ret;
		if (c.uid != sst.uid && !caller_cap(&c, CAP_FOWNER_BIT))
			return -EPERM;
		ret = arb_subvol_snapshot(afs->fs, in->src_ino, dir, in->name,
					  (in->flags & ARB_IOC_SUBVOL_RDONLY)
						  ? ARB_SUBVOL_RDONLY
						  : 0,
					  &cr, &st);
	} else {
		ret = arb_subvol_create(afs->fs, dir, in->name, 0755, &cr, &st);
	}
	if (ret)
		return ret;
	any_subvol = true;
	memset(&out, 0, sizeof(out));
	out.flags = in->flags;
	out.src_ino = in->src_ino;
	out.id = arb_inum_tree(st.ino);
	out.ino = st.ino;
	snprintf(out.name, sizeof(out.name), "%s", in->name);
	reply_after_inval(req, nodeid, in->name, &out);
	return 0;
}

static int ioc_delete(fuse_req_t req, fuse_ino_t nodeid,
		      struct arb_ioc_subvol_create *in)
{
	struct afs *afs = fuse_req_userdata(req);
	uint64_t dir = afs_node_ino(nodeid);
	struct arb_ioc_subvol_create out;
	struct arb_subvol_info si;
	struct arb_stat dst, st;
	struct caller c;
	int ret;

	if (afs->readonly)
		return -EROFS;
	if (in->flags || in->src_ino)
		return -EINVAL;
	ret = check_name(in->name, sizeof(in->name));
	if (ret)
		return ret;
	ret = get_dir(afs, dir, &dst);
	if (ret)
		return ret;
	ret = arb_fs_lookup(afs->fs, dir, in->name, &st);
	if (ret)
		return ret;
	ret = arb_subvol_info(afs->fs, st.ino, &si);
	if (ret)
		return ret;
	if (si.ino != st.ino)
		return -EINVAL;
	if (si.id == ARB_INUM_FS_TREE || si.id == root_id)
		return -EBUSY;
	caller_get(req, &c);
	if (!caller_cap(&c, CAP_SYS_ADMIN_BIT)) {
		if (!afs->user_subvol_rm_allowed || c.uid != st.uid)
			return -EPERM;
		/* as rmdir(2): write and search on the directory, and its
		 * sticky bit (the caller owns the victim: nothing more) */
		ret = may_access(afs, &c, &dst, 3);
		if (ret)
			return ret;
	}
	ret = arb_subvol_delete(afs->fs, dir, in->name);
	if (ret)
		return ret;
	memset(&out, 0, sizeof(out));
	out.id = si.id;
	out.ino = si.ino;
	snprintf(out.name, sizeof(out.name), "%s", in->name);
	reply_after_inval(req, nodeid, in->name, &out);
	return 0;
}

struct list_ctx {
	uint64_t start;
	struct arb_ioc_subvol_list *out;
};

static int list_one(void *arg, const struct arb_subvol_info *info)
{
	struct list_ctx *l = arg;

	if (info->id < l->start)
		return 0;
	if (l->out->nr == ARB_IOC_SUBVOL_LIST_MAX) {
		l->out->next = info->id;
		return 1;
	}
	entry_from_info(&l->out->e[l->out->nr++], info);
	return 0;
}

static int ioc_set_flags(fuse_req_t req, fuse_ino_t nodeid,
			 const struct arb_ioc_subvol_flags *in,
			 struct arb_ioc_subvol_flags *out)
{
	struct afs *afs = fuse_req_userdata(req);
	struct arb_subvol_info si;
	bool rdonly = in->flags & ARB_IOC_SUBVOL_RDONLY, cleared = false;
	struct arb_stat st;
	struct caller c;
	int ret;

	if (in->flags & ~(uint64_t)ARB_IOC_SUBVOL_RDONLY)
		return -EINVAL;
	if (afs->readonly)
		return -EROFS;
	ret = arb_subvol_info(afs->fs, afs_node_ino(nodeid), &si);
	if (ret)
		return ret;
	ret = arb_fs_getattr(afs->fs, si.ino, &st);
	if (ret)
		return ret;
	caller_get(req, &c);
	if (c.uid != st.uid && !caller_cap(&c, CAP_FOWNER_BIT))
		return -EPERM;
	ret = arb_subvol_set_rdonly(afs->fs, si.ino, rdonly, &cleared);
	if (ret)
		return ret;
	out->id = si.id;
	out->cleared_received = cleared;
	return 0;
}

static int ioc_set_default(fuse_req_t req, fuse_ino_t nodeid,
			   const struct arb_ioc_subvol_default *in,
			   struct arb_ioc_subvol_default *out)
{
	struct afs *afs = fuse_req_userdata(req);
	struct arb_subvol_info si;
	struct caller c;
	uint64_t id = in->id;
	int ret;

	if (afs->readonly)
		return -EROFS;
	caller_get(req, &c);
	if (!caller_cap(&c, CAP_SYS_ADMIN_BIT))
		return -EPERM;
	if (!id) {
		ret = arb_subvol_info(afs->fs, afs_node_ino(nodeid), &si);
		if (ret)
			return ret;
		id = si.id;
	}
	ret = arb_subvol_set_default(afs->fs, id);
	if (ret)
		return ret;
	out->id = id;
	return 0;
}

/* the size of each ioctl's struct, or 0 when cmd is not ours */
static size_t subvol_size(unsigned int cmd)
{
	switch (cmd) {
	case ARB_IOC_SUBVOL_CREATE:
	case ARB_IOC_SUBVOL_SNAPSHOT:
	case ARB_IOC_SUBVOL_DELETE:
		return sizeof(struct arb_ioc_subvol_create);
	case ARB_IOC_SUBVOL_INFO:
		return sizeof(struct arb_ioc_subvol_info);
	case ARB_IOC_SUBVOL_LIST:
		return sizeof(struct arb_ioc_subvol_list);
	case ARB_IOC_SUBVOL_PATH:
		return sizeof(struct arb_ioc_subvol_path);
	case ARB_IOC_SUBVOL_SET_FLAGS:
		return sizeof(struct arb_ioc_subvol_flags);
	case ARB_IOC_SUBVOL_WAIT:
		return sizeof(struct arb_ioc_subvol_wait);
	case ARB_IOC_SUBVOL_GET_DEFAULT:
	case ARB_IOC_SUBVOL_SET_DEFAULT:
		return sizeof(struct arb_ioc_subvol_default);
	case ARB_IOC_SUBVOL_USAGE:
		return sizeof(struct arb_ioc_subvol_usage);
	}
	return 0;
}

bool afs_subvol_ioctl(fuse_req_t req, fuse_ino_t nodeid, unsigned int cmd,
		      const void *in_buf, size_t in_bufsz, size_t out_bufsz)
{
	struct afs *afs = fuse_req_userdata(req);
	size_t size = subvol_size(cmd);
	union {
		struct arb_ioc_subvol_create c;
		struct arb_ioc_subvol_info i;
		struct arb_ioc_subvol_list l;
		struct arb_ioc_subvol_path p;
		struct arb_ioc_subvol_flags f;
		struct arb_ioc_subvol_wait w;
		struct arb_ioc_subvol_default d;
		struct arb_ioc_subvol_usage u;
	} *in = NULL, *out = NULL;
	struct arb_subvol_info si;
	int ret;

	if (!size)
		return false;
	/* the kernel sizes the buffers from the number: this is a check */
	if (in_bufsz < size || out_bufsz < size) {
		ret = -EINVAL;
		goto out_err;
	}
	/* 8 KiB for a list: not on the stack of a serving thread */
	in = malloc(sizeof(*in));
	out = calloc(1, sizeof(*out));
	if (!in || !out) {
		ret = -ENOMEM;
		goto out_err;
	}
	/* in_buf has no alignment promise */
	memcpy(in, in_buf, size);
	switch (cmd) {
	case ARB_IOC_SUBVOL_CREATE:
	case ARB_IOC_SUBVOL_SNAPSHOT:
		ret = ioc_create(req, nodeid, cmd == ARB_IOC_SUBVOL_SNAPSHOT,
				 &in->c);
		if (!ret)
			goto out_answered;
		break;
	case ARB_IOC_SUBVOL_DELETE:
		ret = ioc_delete(req, nodeid, &in->c);
		if (!ret)
			goto out_answered;
		break;
	case ARB_IOC_SUBVOL_INFO:
		ret = in->i.id ? arb_subvol_info_id(afs->fs, in->i.id, &si)
			       : arb_subvol_info(afs->fs, afs_node_ino(nodeid),
						 &si);
		if (!ret) {
			entry_from_info(&out->i.e, &si);
			out->i.id = in->i.id;
			out->i.mount_root_id = root_id;
		}
		break;
	case ARB_IOC_SUBVOL_LIST: {
		struct list_ctx l = { .start = in->l.start, .out = &out->l };

		ret = arb_subvol_list(afs->fs, list_one, &l);
		if (ret > 0)
			ret = 0;
		out->l.start = in->l.start;
		out->l.mount_root_id = root_id;
		break;
	}
	case ARB_IOC_SUBVOL_PATH:
		ret = arb_subvol_path(afs->fs, in->p.id, out->p.path,
				      sizeof(out->p.path));
		if (ret == -ERANGE)
			ret = -ENAMETOOLONG;
		out->p.id = in->p.id;
		break;
	case ARB_IOC_SUBVOL_SET_FLAGS:
		ret = ioc_set_flags(req, nodeid, &in->f, &out->f);
		break;
	case ARB_IOC_SUBVOL_WAIT: {
		struct wait_ent *e = malloc(sizeof(*e));

		if (!e) {
			ret = -ENOMEM;
			break;
		}
		e->req = req;
		e->id = in->w.id;
		ret = afs_replyq_add(&waitq, afs, &e->q, true);
		if (!ret)
			goto out_answered;
		/* a ring thread already waits there: wait here */
		free(e);
		ret = arb_subvol_wait(afs->fs, in->w.id);
		out->w.id = in->w.id;
		break;
	}
	case ARB_IOC_SUBVOL_GET_DEFAULT: {
		uint64_t id;

		ret = arb_subvol_get_default(afs->fs, &id);
		out->d.id = id;
		break;
	}
	case ARB_IOC_SUBVOL_SET_DEFAULT:
		ret = ioc_set_default(req, nodeid, &in->d, &out->d);
		break;
	case ARB_IOC_SUBVOL_USAGE: {
		struct arb_subvol_usage u = { 0 };
		uint64_t ino = in->u.id ? arb_inum(in->u.id, ARB_ROOT_INO)
					: afs_node_ino(nodeid);
		bool ok;

		(void)arb_inum_slot(in->u.id ? in->u.id : ARB_INUM_FS_TREE,
				    &ok);
		ret = ok ? arb_subvol_usage(afs->fs, ino, &u) : -ENOENT;
		out->u.id = arb_inum_tree(ino);
		out->u.exclusive = u.exclusive;
		out->u.shared = u.shared;
		out->u.meta_exclusive = u.meta_exclusive;
		out->u.meta_shared = u.meta_shared;
		break;
	}
	default:
		ret = -ENOTTY;
		break;
	}
	if (ret)
		goto out_err;
	reply_out(req, out, size);
	goto out_answered;
out_err:
	reply_fail(req, ret);
out_answered:
	free(in);
	free(out);
	return true;
}
