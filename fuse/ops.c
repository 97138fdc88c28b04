// SPDX-License-Identifier: MIT
/*
 * ops.c - the low-level FUSE operations of arborfs.
 *
 * Each operation decodes its arguments, calls the library (arb_fs_*(),
 * usually once; a write or setattr may also clear set-id bits, a create
 * looks the name up after losing a race) and replies exactly once;
 * errors go back as reply_err(req, -ret).  No lock is held across a
 * reply.  Work that must not run inside a request (invalidating the
 * kernel's cache) goes to threads of its own: lseek.c, dio.c, atime.c.
 *
 * Node ids: FUSE_ROOT_ID (1) is the root directory of the subvolume the
 * mount shows (afs_root_ino: the library's ARB_ROOT_INO, 256, unless -o
 * subvol= or subvolid= names another); every other inode number passes
 * through unchanged (the library's numbers are
 * unique across the mount and never 1: arb_inum packs the tree's slot
 * above the objectid, docs/design/fs.md "Inode numbers and trees").
 * st_ino keeps the library's number, so stat(2) of the root shows 256
 * (or the subvolume root's number) whatever its node id, and a node id is as stable as st_ino across
 * daemon restarts.
 *
 * The kernel is the only client and the daemon the only writer of the
 * image, so entries, negative entries and attributes are cached for an
 * hour; every change goes through the kernel, which invalidates what it
 * changes.  With the writeback cache the kernel owns size and mtime of
 * open files and sends them back through setattr.
 *
 * Lifetime: while the kernel holds a lookup count on an inode, the daemon
 * holds an open reference in the library (arb_fs_open_inode), as
 * passthrough_ll holds an fd.  The kernel may flush times or pages of an
 * inode after its last name is gone (writeback cache), and an unlinked
 * inode must therefore live until the kernel forgets it, not only until
 * the last close.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <syslog.h>
#include <unistd.h>

#include "arborfs_fuse.h"

static inline struct afs *req_afs(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* fuse_reply_err(), counting an error (err != 0) for the statistics */
static void reply_err(fuse_req_t req, int err)
{
	if (err)
		afs_op_error(req_afs(req));
	fuse_reply_err(req, err);
}

/* node ids <-> inode numbers: arborfs_fuse.h (afs_root_ino) */
static inline uint64_t to_ino(fuse_ino_t nodeid)
{
	return afs_node_ino(nodeid);
}

static inline fuse_ino_t to_nodeid(uint64_t ino)
{
	return (fuse_ino_t)afs_ino_node(ino);
}

static void req_cred(fuse_req_t req, struct arb_cred *cr)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	cr->uid = ctx->uid;
	cr->gid = ctx->gid;
}

/*
 * The mode of a new inode in parent: with POSIX ACLs the kernel leaves the
 * umask to us (FUSE_CAP_DONT_MASK), to be applied only when the parent has
 * no default ACL (which then masks the mode, in the library).  The kernel
 * holds the parent's lock across a create and across a change of its ACL,
 * so the answer holds until the library creates.  Without ACLs the kernel
 * masked the mode already and masking it again changes nothing.
 */
static mode_t create_mode(fuse_req_t req, fuse_ino_t parent, mode_t mode)
{
	struct afs *afs = req_afs(req);

	if (afs->posix_acl &&
	    arb_fs_getxattr(afs->fs, to_ino(parent), "system.posix_acl_default",
			    NULL, 0) > 0)
		return mode;
	return mode & ~(fuse_req_ctx(req)->umask & 0777);
}

static void stat_from_arb(struct stat *s, const struct arb_stat *a)
{
	memset(s, 0, sizeof(*s));
	s->st_ino = a->ino;
	s->st_mode = a->mode;
	s->st_nlink = a->nlink;
	s->st_uid = a->uid;
	s->st_gid = a->gid;
	s->st_rdev = a->rdev;
	s->st_size = (off_t)a->size;
	s->st_blocks = (blkcnt_t)a->blocks;
	s->st_blksize = a->blksize;
	s->st_atim = a->atime;
	s->st_mtim = a->mtime;
	s->st_ctim = a->ctime;
}

static void entry_from_arb(struct afs *afs, struct fuse_entry_param *e,
			   const struct arb_stat *st)
{
	memset(e, 0, sizeof(*e));
	e->ino = to_nodeid(st->ino);
	/*
	 * The kernel gives the root inode generation 0 at mount and expects
	 * it in every later reply naming FUSE_ROOT_ID (a lookup of ".."
	 * while open_by_handle_at reconnects a directory, or of "." on the
	 * root): it warns "root generation should be zero" otherwise.  The
	 * root is never reused, so 0 loses nothing.
	 */
	e->generation = e->ino == FUSE_ROOT_ID ? 0 : st->generation;
	stat_from_arb(&e->attr, st);
	e->attr_timeout = afs_iflags_attr_timeout(afs, st);
	e->entry_timeout = afs->entry_timeout;
}

/* The library pin that goes with a first lookup reference. */
static int pin_inode(struct afs *afs, fuse_ino_t nodeid)
{
	return arb_fs_open_inode(afs->fs, to_ino(nodeid));
}

static void unpin_inode(struct afs *afs, fuse_ino_t nodeid)
{
	int ret = arb_fs_release_inode(afs->fs, to_ino(nodeid));

	/* -ENOENT/-EINVAL: the pin failed earlier (inode gone meanwhile) */
	if (ret && ret != -ENOENT && ret != -EINVAL)
		afs_log(LOG_ERR, "releasing inode %llu: %s",
			(unsigned long long)to_ino(nodeid), strerror(-ret));
}

/* One more kernel reference to nodeid; pins the inode on the first. */
static int ref_get(struct afs *afs, fuse_ino_t nodeid)
{
	int ret = afs_lookup_get(&afs->lookups, nodeid, 1);

	if (ret == 1) {
		ret = pin_inode(afs, nodeid);
		if (ret && afs_lookup_put(&afs->lookups, nodeid, 1) == 0)
			ret = 0; /* someone else got a reference meanwhile */
	}
	return ret;
}

/* n kernel references fewer; unpins the inode after the last. */
static void ref_put(struct afs *afs, fuse_ino_t nodeid, uint64_t n)
{
	if (afs_lookup_put(&afs->lookups, nodeid, n) == 1) {
		afs_wberr_clear(&afs->wberr, nodeid);
		afs_wbext_end(&afs->wbext, nodeid);
		unpin_inode(afs, nodeid);
	}
}

void afs_release_all(struct afs *afs)
{
	uint64_t *ids = NULL;
	size_t n = afs_lookup_drain(&afs->lookups, &ids);

	for (size_t i = 0; ids && i < n; i++)
		unpin_inode(afs, ids[i]);
	free(ids);
}

/*
 * Reply with a new reference to st's inode: the kernel's lookup count goes
 * up by one, and back down if the reply could not be delivered (the request
 * was interrupted), since the kernel then never saw the node id.
 */
static void reply_entry(fuse_req_t req, const struct arb_stat *st)
{
	struct afs *afs = req_afs(req);
	struct fuse_entry_param e;
	int ret;

	entry_from_arb(afs, &e, st);
	ret = ref_get(afs, e.ino);
	if (ret) {
		reply_err(req, -ret);
		return;
	}
	if (fuse_reply_entry(req, &e))
		ref_put(afs, e.ino, 1);
}

static void afs_init(void *userdata, struct fuse_conn_info *conn)
{
	struct afs *afs = userdata;
	unsigned want = FUSE_CAP_ASYNC_READ | FUSE_CAP_READDIRPLUS |
			FUSE_CAP_READDIRPLUS_AUTO | FUSE_CAP_EXPORT_SUPPORT |
			FUSE_CAP_PARALLEL_DIROPS | FUSE_CAP_CACHE_SYMLINKS;

	/*
	 * Without it, system.posix_acl_* fail with EOPNOTSUPP in the kernel.
	 * With it, the umask is ours to apply (only where no default ACL
	 * applies, see create_mode): DONT_MASK keeps the kernel from masking
	 * the mode of a new inode before the default ACL is seen.
	 */
	if (afs->posix_acl)
		want |= FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK;

	/* a read-only mount has nothing to write back */
	if (!afs->readonly)
		want |= FUSE_CAP_WRITEBACK_CACHE;
	/*
	 * FUSE_HANDLE_KILLPRIV_V2, which spares the kernel's
	 * getxattr("security.capability") before each write, is added to the
	 * INIT reply by killpriv.c: libfuse 3.14 has no capability bit for it.
	 */
	conn->want |= want & conn->capable;
	/* the library keeps the times on write (write_keeps_times) when the
	 * writeback cache was asked for; without it, afs_write sets them */
	afs->writeback = (conn->want & FUSE_CAP_WRITEBACK_CACHE) != 0;
	/*
	 * Locks stay in the kernel: with neither capability and no
	 * getlk/setlk/flock operation, fcntl and flock locks work as local
	 * locks of this host, which is all a single-host image needs.
	 */
	conn->want &= ~(FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS);
	/* the daemon is the only writer: cached pages never go stale */
	conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
	/*
	 * Zero-message opens.  An open holds nothing here the kernel's
	 * lookup reference does not already hold (the inode stays pinned
	 * until FORGET, which comes after the last close), and the flags a
	 * reply would carry are the kernel's defaults without one:
	 * FOPEN_KEEP_CACHE, and FOPEN_CACHE_DIR for directories.  So the
	 * first OPEN and OPENDIR answer ENOSYS, and the kernel sends no
	 * OPEN, OPENDIR, RELEASE or RELEASEDIR after them: two requests
	 * fewer per file read (tar c) and per directory listed (find).
	 * CREATE is declined as well (afs_create), so no RELEASE comes
	 * for created files either.
	 *
	 * No atomic O_TRUNC: an open with O_TRUNC reaches us as a SETATTR
	 * of the size (carrying FATTR_KILL_SUIDGID where set-id bits must
	 * go), with or without OPEN requests.  libfuse 3.14 asks for atomic
	 * O_TRUNC by default, and before 2026-12-03 the daemon took it but
	 * its OPEN never truncated: the kernel cut only its page cache, and
	 * the image kept the old bytes past what was written after the
	 * open (opens.sh checks this after a remount).
	 */
	conn->want &= ~FUSE_CAP_ATOMIC_O_TRUNC;
	/*
	 * Kept while the image has immutable or append-only inodes, or
	 * subvolumes (which may be or become read-only): only an OPEN can
	 * refuse their write-opens (iflags.c, subvol.c).
	 */
	afs->no_open = !afs->open_requests &&
		       !arb_fs_has_protected_inodes(afs->fs) &&
		       !afs_subvol_any() &&
		       (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) != 0;
	afs->no_opendir = !afs->open_requests &&
			  (conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT) != 0;
	/* libfuse lowers this to what its buffers and the kernel allow */
	conn->max_write = AFS_MAX_WRITE;
	/* the kernel proposed its own maximum (its 128 KiB window); it
	 * keeps the smaller of our answer and its window, which main.c
	 * widens to -o readahead (default 1 MiB; 0: as the kernel has it) */
	if (conn->capable && afs->readahead > conn->max_readahead)
		conn->max_readahead = afs->readahead > UINT32_MAX
					      ? UINT32_MAX
					      : (unsigned)afs->readahead;
	/* timestamps carry nanoseconds */
	conn->time_gran = 1;
}

static void afs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct afs *afs = req_afs(req);
	struct arb_stat st;
	int ret;

	/* "." is how the kernel finds an inode from an NFS file handle */
	if (strcmp(name, ".") == 0)
		ret = arb_fs_getattr(afs->fs, to_ino(parent), &st);
	else
		ret = arb_fs_lookup(afs->fs, to_ino(parent), name, &st);
	if (ret == -ENOENT) {
		/* a negative entry, cached as long as a positive one */
		struct fuse_entry_param e = {
			.ino = 0,
			.entry_timeout = afs->entry_timeout,
		};

		fuse_reply_entry(req, &e);
		return;
	}
	if (ret) {
		reply_err(req, -ret);
		return;
	}
	reply_entry(req, &st);
}

static void afs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	ref_put(req_afs(req), ino, nlookup);
	fuse_reply_none(req);
}

static void afs_forget_multi(fuse_req_t req, size_t count,
			     struct fuse_forget_data *forgets)
{
	struct afs *afs = req_afs(req);

	for (size_t i = 0; i < count; i++)
		ref_put(afs, forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

static void reply_attr(fuse_req_t req, const struct arb_stat *st)
{
	struct stat s;

	stat_from_arb(&s, st);
	fuse_reply_attr(req, &s, afs_iflags_attr_timeout(req_afs(req), st));
}

/* Is the caller in group gid (primary or supplementary)? */
static bool req_in_group(fuse_req_t req, uint32_t gid)
{
	gid_t groups[64];
	int n;

	if (fuse_req_ctx(req)->gid == gid)
		return true;
	n = fuse_req_getgroups(req, 64, groups);
	if (n > 64) {
		gid_t *big = malloc((size_t)n * sizeof(*big));
		bool in = false;
		int m;

		if (!big)
			return false;
		m = fuse_req_getgroups(req, n, big);
		for (int i = 0; i < m && i < n; i++)
			in = in || big[i] == gid;
		free(big);
		return in;
	}
	for (int i = 0; i < n; i++)
		if (groups[i] == gid)
			return true;
	return false;
}

/*
 * Set-id bits under FUSE_HANDLE_KILLPRIV_V2 (killpriv.c).  The kernel asks
 * the daemon to clear them and keeps the mode it has cached: with the
 * writeback cache it does not ask for attributes after a write, and after
 * a truncate from open(O_TRUNC) it kept the old mode in spite of the
 * reply.  So whenever bits are about to go, the kernel is told to forget
 * the inode's attributes, before the reply (attributes only: no lock of
 * the inode is taken, so this cannot wait on the request being served).
 */
static bool has_setid(struct afs *afs, uint64_t ino)
{
	struct arb_stat st;

	return arb_fs_getattr(afs->fs, ino, &st) == 0 &&
	       (st.mode & (S_ISUID | S_ISGID));
}

static void forget_attrs(struct afs *afs, fuse_ino_t nodeid)
{
	if (afs->se)
		fuse_lowlevel_notify_inval_inode(afs->se, nodeid, -1, 0);
}

/*
 * What goes when the kernel asks for the set-id bits of ino to go:
 * set-user-ID, and set-group-ID with group execute (ARB_SET_KILL_SUIDGID);
 * without group execute too when the caller is neither in the file's group
 * nor privileged (ARB_SET_KILL_SGID), as Linux does since 6.2
 * (setattr_should_drop_sgid; ext4 and tmpfs follow it).  Only the daemon
 * knows the caller's groups.  CAP_FSETID, which it cannot see, is
 * approximated by uid 0.
 */
static unsigned kill_flags(fuse_req_t req, uint64_t ino)
{
	struct arb_stat st;

	if (arb_fs_getattr(req_afs(req)->fs, ino, &st) ||
	    (st.mode & (S_ISGID | S_IXGRP)) != S_ISGID ||
	    fuse_req_ctx(req)->uid == 0 || req_in_group(req, st.gid))
		return ARB_SET_KILL_SUIDGID;
	return ARB_SET_KILL_SUIDGID | ARB_SET_KILL_SGID;
}

/* the kernel asked for the set-id bits of nodeid to go */
static int kill_suidgid(fuse_req_t req, fuse_ino_t nodeid)
{
	struct afs *afs = req_afs(req);
	struct arb_setattr sa = { 0 };
	int ret;

	if (!has_setid(afs, to_ino(nodeid)))
		return 0;
	ret = arb_fs_setattr(afs->fs, to_ino(nodeid), &sa,
			     kill_flags(req, to_ino(nodeid)), NULL, NULL);
	forget_attrs(afs, nodeid);
	return ret;
}

static void afs_getattr(fuse_req_t req, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	struct arb_stat st;
	int ret;

	if (afs_shutdown_getattr_refuses(req_afs(req), req, ino))
		return;
	/*
	 * Asked with the file (FUSE_GETATTR_FH): a write(2) under the
	 * writeback cache, after a failed writeback of this inode made the
	 * kernel forget its attributes (wberr.c).  The error is what
	 * write(2) returns.
	 */
	if (fi) {
		ret = afs_wberr_take(&req_afs(req)->wberr, ino);
		if (ret) {
			reply_err(req, ret);
			return;
		}
		/* a write(2) to an immutable or append-only file (iflags.c) */
		ret = afs_iflags_getattr_fh(req_afs(req), req, ino);
		if (ret) {
			reply_err(req, -ret);
			return;
		}
	}
	ret = arb_fs_getattr(req_afs(req)->fs, to_ino(ino), &st);
	if (ret)
		reply_err(req, -ret);
	else
		reply_attr(req, &st);
}

static void afs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
			int to_set, struct fuse_file_info *fi)
{
	struct arb_setattr sa = { 0 };
	struct arb_stat st;
	struct arb_cred cr;
	unsigned valid = 0;
	bool forget = false;
	int ret;

	(void)fi;
	if (to_set & FUSE_SET_ATTR_MODE) {
		valid |= ARB_SET_MODE;
		sa.mode = attr->st_mode;
	}
	if (to_set & FUSE_SET_ATTR_UID) {
		valid |= ARB_SET_UID;
		sa.uid = attr->st_uid;
	}
	if (to_set & FUSE_SET_ATTR_GID) {
		valid |= ARB_SET_GID;
		sa.gid = attr->st_gid;
	}
	if (to_set & FUSE_SET_ATTR_SIZE) {
		valid |= ARB_SET_SIZE;
		sa.size = (uint64_t)attr->st_size;
	}
	/* the kernel sets ATIME together with ATIME_NOW; NOW wins */
	if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
		valid |= ARB_SET_ATIME_NOW;
	} else if (to_set & FUSE_SET_ATTR_ATIME) {
		valid |= ARB_SET_ATIME;
		sa.atime = attr->st_atim;
	}
	if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
		valid |= ARB_SET_MTIME_NOW;
	} else if (to_set & FUSE_SET_ATTR_MTIME) {
		valid |= ARB_SET_MTIME;
		sa.mtime = attr->st_mtim;
	}
	if (to_set & FUSE_SET_ATTR_CTIME) {
		valid |= ARB_SET_CTIME;
		sa.ctime = attr->st_ctim;
	}
	/* truncate without CAP_FSETID, or a chown (killpriv.c) */
	if (afs_kill_suidgid_asked() && has_setid(req_afs(req), to_ino(ino))) {
		valid |= kill_flags(req, to_ino(ino));
		forget = true;
	}
	req_cred(req, &cr);
	ret = arb_fs_setattr(req_afs(req)->fs, to_ino(ino), &sa, valid, &cr,
			     &st);
	/* a changed file: its next read must reach us for its atime */
	if (!ret && (valid & (ARB_SET_MTIME | ARB_SET_MTIME_NOW)) &&
	    S_ISREG(st.mode))
		afs_atime_changed(req_afs(req), ino);
	/* truncated: what is stored is a prefix again (wberr.c) */
	if (!ret && (valid & ARB_SET_SIZE)) {
		afs_wberr_clear(&req_afs(req)->wberr, ino);
		afs_wbext_end(&req_afs(req)->wbext, ino);
	}
	if (forget)
		forget_attrs(req_afs(req), ino);
	if (ret)
		reply_err(req, -ret);
	else
		reply_attr(req, &st);
}

static void afs_readlink(fuse_req_t req, fuse_ino_t ino)
{
	char buf[PATH_MAX + 1];
	int ret;

	ret = arb_fs_readlink(req_afs(req)->fs, to_ino(ino), buf, sizeof(buf));
	if (ret < 0)
		reply_err(req, -ret);
	else
		fuse_reply_readlink(req, buf);
}

static void afs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode, dev_t rdev)
{
	struct arb_stat st;
	struct arb_cred cr;
	int ret;

	req_cred(req, &cr);
	ret = arb_fs_mknod(req_afs(req)->fs, to_ino(parent), name,
			   create_mode(req, parent, mode), rdev, &cr, &st);
	if (ret)
		reply_err(req, -ret);
	else
		reply_entry(req, &st);
}

static void afs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode)
{
	struct arb_stat st;
	struct arb_cred cr;
	int ret;

	req_cred(req, &cr);
	ret = arb_fs_mkdir(req_afs(req)->fs, to_ino(parent), name,
			   create_mode(req, parent, mode), &cr, &st);
	if (ret)
		reply_err(req, -ret);
	else
		reply_entry(req, &st);
}

static void afs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	reply_err(req, -arb_fs_unlink(req_afs(req)->fs, to_ino(parent),
					   name));
}

static void afs_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	reply_err(req, -arb_fs_rmdir(req_afs(req)->fs, to_ino(parent),
					  name));
}

static void afs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
			const char *name)
{
	struct arb_stat st;
	struct arb_cred cr;
	int ret;

	req_cred(req, &cr);
	ret = arb_fs_symlink(req_afs(req)->fs, to_ino(parent), name, link, &cr,
			     &st);
	if (ret)
		reply_err(req, -ret);
	else
		reply_entry(req, &st);
}

static void afs_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		       fuse_ino_t newparent, const char *newname,
		       unsigned int flags)
{
	struct arb_cred cr;

	/* the owner of a RENAME_WHITEOUT's whiteout (the kernel checked
	 * CAP_MKNOD) */
	req_cred(req, &cr);
	reply_err(req, -arb_fs_rename_cred(req_afs(req)->fs, to_ino(parent),
					   name, to_ino(newparent), newname,
					   flags, &cr));
}

static void afs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		     const char *newname)
{
	struct arb_stat st;
	int ret;

	ret = arb_fs_link(req_afs(req)->fs, to_ino(ino), to_ino(newparent),
			  newname, &st);
	if (ret)
		reply_err(req, -ret);
	else
		reply_entry(req, &st);
}

static void afs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	int ret;

	if (req_afs(req)->no_open) {
		/* "opened": the kernel sends no more OPEN or RELEASE (init) */
		reply_err(req, ENOSYS);
		return;
	}
	/* immutable and append-only files (iflags.c), files of read-only
	 * subvolumes (EROFS) */
	ret = arb_fs_may_open(req_afs(req)->fs, to_ino(ino), fi->flags);
	if (ret) {
		reply_err(req, -ret);
		return;
	}
	ret = arb_fs_open_inode(req_afs(req)->fs, to_ino(ino));
	if (ret) {
		reply_err(req, -ret);
		return;
	}
	/* no one else writes the image: cached pages stay valid */
	fi->keep_cache = 1;
	fi->fh = to_ino(ino);
	if (fuse_reply_open(req, fi))
		arb_fs_release_inode(req_afs(req)->fs, to_ino(ino));
}

static void afs_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		       mode_t mode, struct fuse_file_info *fi)
{
	struct afs *afs = req_afs(req);
	struct fuse_entry_param e;
	struct arb_stat st;
	struct arb_cred cr;
	int ret;

	/*
	 * Creates without a RELEASE.  A file the kernel makes by CREATE is
	 * open with the reply's handle, and its close costs a RELEASE even
	 * once opens cost nothing (afs_init).  Declined with ENOSYS, CREATE
	 * is never sent again: an open with O_CREAT of a new name becomes a
	 * MKNOD and a request-free open (the kernel still opens it for
	 * writing whatever its mode, and O_EXCL still fails on a name that
	 * exists).  One request fewer per created file: 20,000 empty files
	 * in one directory took 1.11-1.13 s instead of 1.23-1.29 s
	 * (docs/design/fuse.md, "Opens cost no request").
	 */
	if (afs->no_open) {
		reply_err(req, ENOSYS);
		return;
	}
	req_cred(req, &cr);
	ret = arb_fs_mknod(afs->fs, to_ino(parent), name,
			   (create_mode(req, parent, mode) & ~S_IFMT) | S_IFREG,
			   0, &cr, &st);
	/*
	 * The kernel only creates after a negative lookup, so EEXIST means
	 * another creator won a race; without O_EXCL open its file.
	 */
	if (ret == -EEXIST && !(fi->flags & O_EXCL)) {
		ret = arb_fs_lookup(afs->fs, to_ino(parent), name, &st);
		if (!ret && S_ISDIR(st.mode))
			ret = -EISDIR;
	}
	if (ret)
		goto out_err;
	/* with -o open_requests: an open pin, which the RELEASE drops */
	ret = arb_fs_open_inode(afs->fs, st.ino);
	if (ret)
		goto out_err;
	entry_from_arb(afs, &e, &st);
	ret = ref_get(afs, e.ino);
	if (ret) {
		arb_fs_release_inode(afs->fs, st.ino);
		goto out_err;
	}
	fi->keep_cache = 1;
	fi->fh = st.ino;
	if (fuse_reply_create(req, &e, fi)) {
		arb_fs_release_inode(afs->fs, st.ino);
		ref_put(afs, e.ino, 1);
	}
	return;
out_err:
	reply_err(req, -ret);
}

/*
 * Each serving thread keeps one read buffer.  A fresh malloc of a 1 MiB
 * READ's buffer is, as often as not, fresh pages from the kernel (glibc
 * maps or trims such sizes), and faulting them in cost the daemon more
 * than the read.  Per GiB read with the image in the page cache: 61,000-
 * 170,000 minor faults and 1.0-3.6 s of daemon CPU before; 10,000-42,000
 * faults with only the sector copy gone (lib/fs/read.c, rd_piece_read); about
 * 2,000 faults and 0.34-0.39 s with this buffer too (docs/design/cache.md,
 * "Read buffers").
 */
#define READ_BUF_KEEP (2u << 20)

static pthread_key_t read_buf_key;
static pthread_once_t read_buf_once = PTHREAD_ONCE_INIT;
static bool read_buf_ok;

struct read_buf {
	size_t cap;
	char pad[4096 - sizeof(size_t)];
	char data[];
};

static void read_buf_init(void)
{
	read_buf_ok = pthread_key_create(&read_buf_key, free) == 0;
}

/* a buffer of size bytes: the thread's own (NULL *tofree), or malloc'd */
static char *read_buf_get(size_t size, char **tofree)
{
	struct read_buf *rb;
	/* 128 KiB or the largest READ: few sizes, no regrowth in steps */
	size_t cap = size <= (128u << 10) ? (128u << 10) : READ_BUF_KEEP;

	*tofree = NULL;
	pthread_once(&read_buf_once, read_buf_init);
	if (!read_buf_ok || size > READ_BUF_KEEP)
		return *tofree = malloc(size ? size : 1);
	rb = pthread_getspecific(read_buf_key);
	if (rb && rb->cap >= size)
		return rb->data;
	free(rb);
	(void)pthread_setspecific(read_buf_key, NULL);
	/* page-aligned, so the image can be read with O_DIRECT into it */
	if (posix_memalign((void **)&rb, 4096, 4096 + cap))
		return NULL;
	rb->cap = cap;
	if (pthread_setspecific(read_buf_key, rb))
		*tofree = (char *)rb; /* not kept: freed after this READ */
	return rb->data;
}

static void afs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	ssize_t n;
	char *buf, *tofree;

	(void)fi;
	buf = read_buf_get(size, &tofree);
	if (!buf) {
		reply_err(req, ENOMEM);
		return;
	}
	/* before the read: a later direct write must see it (dio.c) */
	afs_dio_note_read(ino);
	n = arb_fs_read(req_afs(req)->fs, to_ino(ino), buf, size,
			(uint64_t)off);
	if (n < 0) {
		reply_err(req, (int)-n);
	} else {
		atomic_fetch_add_explicit(&req_afs(req)->user_bytes_read,
					  (uint64_t)n, memory_order_relaxed);
		fuse_reply_buf(req, buf, (size_t)n);
	}
	free(tofree);
}

/*
 * A writeback WRITE of [off, off + size) of an inode whose writeback failed
 * before: refused (the first error, negative) when it would extend the
 * stored data during the burst that failed, so that what is stored stays
 * a prefix of what was written (wberr.c); 0 to go ahead.
 */
static ssize_t wb_extend_refused(struct afs *afs, fuse_ino_t ino, uint64_t off,
				 size_t size)
{
	struct arb_stat st;
	uint64_t base, failed;
	int err = afs_wberr_marked(&afs->wberr, ino, &failed);

	if (!err || arb_fs_getattr(afs->fs, to_ino(ino), &st) ||
	    off + size <= st.size)
		return 0;
	if (!afs_wbext_base(&afs->wbext, ino, arb_mono_ns(), &base)) {
		/* the burst is over: the writer went on past what it was
		 * told was lost, as a sparse write would */
		afs_wberr_clear(&afs->wberr, ino);
		return 0;
	}
	return -err;
}

/* a writeback WRITE of [off, off + size): is it extending the file? */
static void wb_note_extend(struct afs *afs, fuse_ino_t ino, uint64_t off,
			   size_t size)
{
	uint64_t now = arb_mono_ns();
	struct arb_stat st;

	if (afs_wbext_fresh(&afs->wbext, ino, now))
		return;
	if (arb_fs_getattr(afs->fs, to_ino(ino), &st) == 0 &&
	    off + size > st.size)
		afs_wbext_begin(&afs->wbext, ino, st.size, now);
}

/*
 * A writeback WRITE at off failed: pages past it that this burst stored
 * go too, never data older than the burst (wberr.c).
 */
static void wb_cut_burst(struct afs *afs, fuse_ino_t ino, uint64_t off)
{
	struct arb_setattr sa = { .size = off };
	struct arb_stat st;
	uint64_t base;

	if (!afs_wbext_base(&afs->wbext, ino, arb_mono_ns(), &base) ||
	    off < base || arb_fs_getattr(afs->fs, to_ino(ino), &st) ||
	    st.size <= off)
		return;
	(void)arb_fs_setattr(afs->fs, to_ino(ino), &sa, ARB_SET_SIZE, NULL,
			     NULL);
}

static void afs_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
		      size_t size, off_t off, struct fuse_file_info *fi)
{
	struct afs *afs = req_afs(req);
	ssize_t n;

	afs_syncmode_write(afs);
	n = 0;
	if (fi->writepage) {
		n = wb_extend_refused(afs, ino, (uint64_t)off, size);
		if (!n)
			wb_note_extend(afs, ino, (uint64_t)off, size);
	}
	if (!n)
		n = arb_fs_write(afs->fs, to_ino(ino), buf, size,
				 (uint64_t)off);
	/*
	 * Writeback that failed: the writer learns it at its next write(2),
	 * and what is stored stays a prefix of what was written (wberr.c).
	 */
	if (n < 0 && fi->writepage) {
		afs_wberr_failed(&afs->wberr, ino, (int)-n, (uint64_t)off);
		wb_cut_burst(afs, ino, (uint64_t)off);
		forget_attrs(afs, ino);
	} else if (n > 0 && fi->writepage) {
		uint64_t failed;
		int err = afs_wberr_marked(&afs->wberr, ino, &failed);

		afs_atime_changed(afs, ino);
		/* an earlier page failed while this one was under way */
		if (err && failed < (uint64_t)off) {
			wb_cut_burst(afs, ino, failed);
			n = -err;
		}
	}
	/*
	 * The library was opened with write_keeps_times for the writeback
	 * cache, in which the kernel sends mtime/ctime with setattr.  If the
	 * kernel refused the cache, a write sets them to now, here.
	 */
	if (n > 0 && !afs->writeback && !afs->readonly) {
		struct arb_setattr sa = { 0 };
		int ret = arb_fs_setattr(afs->fs, to_ino(ino), &sa,
					 ARB_SET_MTIME_NOW, NULL, NULL);
		if (ret)
			n = ret;
	}
	/* a write by a caller without CAP_FSETID (killpriv.c) */
	if (n > 0 && afs_kill_suidgid_asked()) {
		int ret = kill_suidgid(req, ino);
		if (ret)
			n = ret;
	}
	/* a direct write: answered once no stale page is cached (dio.c) */
	if (n > 0 && !fi->writepage && afs_dio_defer(req, ino, off, (size_t)n))
		return;
	if (n < 0)
		reply_err(req, (int)-n);
	else
		fuse_reply_write(req, (size_t)n);
}

static void afs_release(fuse_req_t req, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	(void)fi;
	/* no open pins then: neither OPEN nor CREATE succeeds */
	if (req_afs(req)->no_open) {
		reply_err(req, 0);
		return;
	}
	reply_err(req, -arb_fs_release_inode(req_afs(req)->fs,
						  to_ino(ino)));
}

/*
 * With a pool of threads the library gathers concurrent fsyncs itself
 * (arb_fs_fsync).  With one thread, the commit happens in fsyncq.c's
 * thread, so that this one goes on serving requests and the fsyncs that
 * arrive meanwhile share the next commit.
 */
static void afs_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
		      struct fuse_file_info *fi)
{
	struct afs *afs = req_afs(req);
	int ret;

	(void)fi;
	afs_syncmode_fsync(afs);
	/* what this fsync makes durable is never cut (wberr.c) */
	afs_wbext_end(&afs->wbext, ino);
	if (!afs->fsyncq.running) {
		reply_err(req, -arb_fs_fsync(afs->fs, to_ino(ino),
					     datasync != 0));
		return;
	}
	ret = arb_fs_fsync_begin(afs->fs, to_ino(ino));
	if (ret <= 0) {
		reply_err(req, -ret);
		return;
	}
	if (afs_fsyncq_add(afs, req, fuse_req_ctx(req)->pid) == 0)
		return;
	reply_err(req, -arb_fs_fsync_end(afs->fs, 1));
}

static void afs_opendir(fuse_req_t req, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	struct arb_stat st;
	int ret;

	if (req_afs(req)->no_opendir) {
		/* no more OPENDIR or RELEASEDIR, listings cached (init) */
		reply_err(req, ENOSYS);
		return;
	}
	ret = arb_fs_getattr(req_afs(req)->fs, to_ino(ino), &st);
	if (ret) {
		reply_err(req, -ret);
		return;
	}
	if (!S_ISDIR(st.mode)) {
		reply_err(req, ENOTDIR);
		return;
	}
	/* every change of the directory goes through the kernel, which
	 * drops its cached listing then */
	fi->cache_readdir = 1;
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

static bool is_dot_or_dotdot(const char *name)
{
	return name[0] == '.' &&
	       (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

/* One readdir reply being filled. */
struct afs_dirbuf {
	fuse_req_t req;
	struct afs *afs;
	char *buf;
	size_t size, used;
	bool plus;
	/* node ids whose lookup count the reply raises (readdirplus), and
	 * whether that count was zero before (to pin once the library's
	 * readdir, which may hold its lock while calling us, returned) */
	fuse_ino_t *counted;
	bool *first;
	size_t ncounted;
	int err;
};

static int afs_filldir(void *ctx, const char *name, const struct arb_stat *st,
		       uint64_t next_off)
{
	struct afs_dirbuf *d = ctx;
	size_t rem = d->size - d->used;
	size_t len;

	if (!d->plus) {
		struct stat s = { 0 };

		if (st) {
			s.st_ino = st->ino;
			s.st_mode = st->mode & S_IFMT;
		}
		len = fuse_add_direntry(d->req, d->buf + d->used, rem, name,
					&s, (off_t)next_off);
		if (len > rem)
			return 1;
		d->used += len;
		return 0;
	}

	struct fuse_entry_param e;

	if (!st) {
		d->err = -EIO;
		return 1;
	}
	if (is_dot_or_dotdot(name)) {
		/* node id 0: the kernel takes no reference for these */
		memset(&e, 0, sizeof(e));
		e.attr.st_ino = st->ino;
		e.attr.st_mode = st->mode & S_IFMT;
	} else {
		entry_from_arb(d->afs, &e, st);
	}
	len = fuse_add_direntry_plus(d->req, d->buf + d->used, rem, name, &e,
				     (off_t)next_off);
	if (len > rem)
		return 1;
	if (e.ino) {
		int ret = afs_lookup_get(&d->afs->lookups, e.ino, 1);

		if (ret < 0) {
			/* leave the entry out of this reply */
			d->err = ret;
			return 1;
		}
		d->first[d->ncounted] = ret == 1;
		d->counted[d->ncounted++] = e.ino;
	}
	d->used += len;
	return 0;
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       bool plus)
{
	struct afs_dirbuf d = {
		.req = req,
		.afs = req_afs(req),
		.size = size,
		.plus = plus,
	};
	int ret;

	d.buf = malloc(size ? size : 1);
	/* an entry takes at least 24 bytes (plus: about 150) */
	if (plus) {
		d.counted = malloc((size / 24 + 1) * sizeof(*d.counted));
		d.first = malloc((size / 24 + 1) * sizeof(*d.first));
	}
	if (!d.buf || (plus && (!d.counted || !d.first))) {
		ret = -ENOMEM;
		goto out_err;
	}
	ret = arb_fs_readdir(d.afs->fs, to_ino(ino), (uint64_t)off, plus,
			     afs_filldir, &d);
	for (size_t i = 0; i < d.ncounted; i++) {
		/* a failed pin (inode removed meanwhile) is not fatal: the
		 * kernel then meets ENOENT, as with any removed inode */
		if (d.first[i])
			pin_inode(d.afs, d.counted[i]);
	}
	/* entries already packed are delivered; an error after them is
	 * reported by the next call, which starts after them */
	if (ret >= 0 && d.err && d.used == 0)
		ret = d.err;
	if (ret < 0 && d.used == 0)
		goto out_err;
	if (fuse_reply_buf(req, d.buf, d.used)) {
		for (size_t i = 0; i < d.ncounted; i++)
			ref_put(d.afs, d.counted[i], 1);
	}
	goto out_free;
out_err:
	for (size_t i = 0; i < d.ncounted; i++)
		ref_put(d.afs, d.counted[i], 1);
	reply_err(req, -ret);
out_free:
	free(d.first);
	free(d.counted);
	free(d.buf);
}

static void afs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
			off_t off, struct fuse_file_info *fi)
{
	(void)fi;
	do_readdir(req, ino, size, off, false);
}

static void afs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
			    off_t off, struct fuse_file_info *fi)
{
	(void)fi;
	do_readdir(req, ino, size, off, true);
}

static void afs_releasedir(fuse_req_t req, fuse_ino_t ino,
			   struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	reply_err(req, 0);
}

static void afs_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
			 struct fuse_file_info *fi)
{
	(void)ino;
	(void)datasync;
	(void)fi;
	/* a directory's entries live in shared trees: commit them */
	reply_err(req, -arb_fs_sync(req_afs(req)->fs));
}

static void afs_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv;
	int ret;

	(void)ino;
	memset(&sv, 0, sizeof(sv));
	ret = arb_fs_statfs(req_afs(req)->fs, &sv);
	if (ret)
		reply_err(req, -ret);
	else
		fuse_reply_statfs(req, &sv);
}

/*
 * With -o noacl the kernel still passes system.posix_acl_* through as
 * plain xattrs; refusing them makes tools (cp -a, tar --acls) fall back to
 * chmod, as on any filesystem without ACLs.
 */
static bool acl_refused(struct afs *afs, const char *name)
{
	return !afs->posix_acl && strncmp(name, "system.posix_acl_", 17) == 0;
}

/*
 * After an access ACL was set: clear setgid when the caller is neither in
 * the file's group nor privileged, as the kernel's posix_acl_update_mode()
 * does (the library has no credentials on setxattr).  "Privileged" is
 * approximated by uid 0 (CAP_FSETID cannot be seen from here).  Not
 * atomic with the setxattr; a failure is only logged.
 */
static void acl_kill_sgid(fuse_req_t req, uint64_t ino)
{
	struct afs *afs = req_afs(req);
	struct arb_setattr sa = { 0 };
	struct arb_stat st;
	struct arb_cred cr;
	int ret;

	req_cred(req, &cr);
	if (cr.uid == 0 || arb_fs_getattr(afs->fs, ino, &st) ||
	    !(st.mode & S_ISGID) || req_in_group(req, st.gid))
		return;
	sa.mode = st.mode & ~(uint32_t)S_ISGID & 07777;
	ret = arb_fs_setattr(afs->fs, ino, &sa, ARB_SET_MODE, &cr, NULL);
	if (ret)
		afs_log(LOG_ERR, "clearing setgid of inode %llu: %s",
			(unsigned long long)ino, strerror(-ret));
}

static void afs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			 const char *value, size_t size, int flags)
{
	int ret;

	if (acl_refused(req_afs(req), name)) {
		reply_err(req, EOPNOTSUPP);
		return;
	}
	ret = arb_fs_setxattr(req_afs(req)->fs, to_ino(ino), name, value, size,
			      flags);
	if (!ret && strcmp(name, "system.posix_acl_access") == 0)
		acl_kill_sgid(req, to_ino(ino));
	reply_err(req, -ret);
}

static void afs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			 size_t size)
{
	ssize_t n;
	char *buf = NULL;

	if (acl_refused(req_afs(req), name)) {
		reply_err(req, EOPNOTSUPP);
		return;
	}
	if (size) {
		buf = malloc(size);
		if (!buf) {
			reply_err(req, ENOMEM);
			return;
		}
	}
	n = arb_fs_getxattr(req_afs(req)->fs, to_ino(ino), name, buf, size);
	if (n < 0)
		reply_err(req, (int)-n);
	else if (size)
		fuse_reply_buf(req, buf, (size_t)n);
	else
		fuse_reply_xattr(req, (size_t)n);
	free(buf);
}

/*
 * The names of a list without the trusted.* ones, in place; the new
 * length.  Kernel filesystems list trusted.* only to CAP_SYS_ADMIN (its
 * values are refused to others by the VFS itself, but a FUSE listing is
 * the daemon's to filter).
 */
static size_t drop_trusted(char *list, size_t n)
{
	size_t in = 0, out = 0;

	while (in < n) {
		size_t len = strnlen(list + in, n - in);

		if (in + len < n)
			len++; /* with its NUL */
		if (len < 8 || memcmp(list + in, "trusted.", 8) != 0) {
			memmove(list + out, list + in, len);
			out += len;
		}
		in += len;
	}
	return out;
}

static void afs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct arb_fs *fs = req_afs(req)->fs;
	ssize_t n;
	char *buf = NULL;

	/* CAP_SYS_ADMIN, which the daemon cannot see, approximated by uid 0 */
	if (fuse_req_ctx(req)->uid != 0) {
		/* the whole list, to know the size of what is left of it */
		for (int tries = 0;; tries++) {
			n = arb_fs_listxattr(fs, to_ino(ino), NULL, 0);
			if (n < 0)
				break;
			free(buf);
			buf = malloc(n ? (size_t)n : 1);
			if (!buf) {
				n = -ENOMEM;
				break;
			}
			n = arb_fs_listxattr(fs, to_ino(ino), buf, (size_t)n);
			/* ERANGE: it grew meanwhile */
			if (n != -ERANGE || tries == 4)
				break;
		}
		if (n >= 0)
			n = (ssize_t)drop_trusted(buf, (size_t)n);
		if (n < 0)
			reply_err(req, (int)-n);
		else if (size == 0)
			fuse_reply_xattr(req, (size_t)n);
		else if (size < (size_t)n)
			reply_err(req, ERANGE);
		else
			fuse_reply_buf(req, buf, (size_t)n);
		free(buf);
		return;
	}
	if (size) {
		buf = malloc(size);
		if (!buf) {
			reply_err(req, ENOMEM);
			return;
		}
	}
	n = arb_fs_listxattr(fs, to_ino(ino), buf, size);
	if (n < 0)
		reply_err(req, (int)-n);
	else if (size)
		fuse_reply_buf(req, buf, (size_t)n);
	else
		fuse_reply_xattr(req, (size_t)n);
	free(buf);
}

static void afs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	if (acl_refused(req_afs(req), name)) {
		reply_err(req, EOPNOTSUPP);
		return;
	}
	reply_err(req, -arb_fs_removexattr(req_afs(req)->fs, to_ino(ino),
						name));
}

static void afs_fallocate(fuse_req_t req, fuse_ino_t ino, int mode,
			  off_t offset, off_t length,
			  struct fuse_file_info *fi)
{
	int ret;

	(void)fi;
	if (offset < 0 || length <= 0) {
		reply_err(req, EINVAL);
		return;
	}
	ret = arb_fs_fallocate(req_afs(req)->fs, to_ino(ino), mode,
			       (uint64_t)offset, (uint64_t)length);
	/*
	 * The kernel clears set-id bits before a fallocate as before a write
	 * (file_modified), but with KILLPRIV_V2 that request never reaches
	 * us and FALLOCATE carries no kill flag: clear them here for a
	 * caller other than root (CAP_FSETID, which the daemon cannot see,
	 * approximated by uid 0).
	 */
	if (!ret && fuse_req_ctx(req)->uid != 0)
		ret = kill_suidgid(req, ino);
	reply_err(req, -ret);
}

/* the most one COPY_FILE_RANGE request copies: its reply carries a
 * 32-bit count (fuse_write_out.size); callers such as cp loop for the
 * rest.  A multiple of every block size, so a later request's offsets
 * stay as congruent as this one's */
#define AFS_COPY_MAX (1ULL << 30)

/*
 * copy_file_range(2) within the mount: the library shares the aligned
 * blocks (lib/fs/clone.c).  The kernel has written back its dirty pages
 * of both ranges before the request and drops the destination's cached
 * pages of the range after our reply (fuse_copy_file_range), and it
 * refused a copy between two mounts (EXDEV) itself.
 */
static void afs_copy_file_range(fuse_req_t req, fuse_ino_t ino_in,
				off_t off_in, struct fuse_file_info *fi_in,
				fuse_ino_t ino_out, off_t off_out,
				struct fuse_file_info *fi_out, size_t len,
				int flags)
{
	struct afs *afs = req_afs(req);
	ssize_t n;

	(void)fi_in;
	(void)fi_out;
	if (off_in < 0 || off_out < 0 || flags) {
		reply_err(req, EINVAL);
		return;
	}
	if (len > AFS_COPY_MAX)
		len = AFS_COPY_MAX;
	n = arb_fs_copy_range(afs->fs, to_ino(ino_in), (uint64_t)off_in,
			      to_ino(ino_out), (uint64_t)off_out, len, 0);
	/* as afs_write: the times without the writeback cache */
	if (n > 0 && !afs->writeback && !afs->readonly) {
		struct arb_setattr sa = { 0 };
		int ret = arb_fs_setattr(afs->fs, to_ino(ino_out), &sa,
					 ARB_SET_MTIME_NOW, NULL, NULL);
		if (ret)
			n = ret;
	}
	/* the kernel's file_modified() leaves set-id bits to us under
	 * KILLPRIV_V2, and the request carries no kill flag: as for
	 * fallocate, a caller other than root clears them */
	if (n > 0 && fuse_req_ctx(req)->uid != 0) {
		int ret = kill_suidgid(req, ino_out);
		if (ret)
			n = ret;
	}
	if (n < 0)
		reply_err(req, (int)-n);
	else
		fuse_reply_write(req, (size_t)n);
}

static void afs_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
		      struct fuse_file_info *fi)
{
	(void)fi;
	/* the kernel's dirty pages are written back first (lseek.c) */
	afs_lseek_req(req, ino, off, whence);
}

/*
 * Every handler runs inside a timed_<op> wrapper that counts it for
 * ARB_IOC_GET_STATS (ctl.c).  The session's userdata is taken before the
 * handler: after its reply the request is gone.  After FS_IOC_SHUTDOWN
 * most requests are answered EIO before their handler (shutdown.c).
 */
#define AFS_TIMED(op, OP, params, args)                                        \
	static void timed_##op params                                          \
	{                                                                      \
		struct afs *afs_ = fuse_req_userdata(req);                     \
		uint64_t t0_ = afs_op_start(ARB_IOC_OP_##OP);                  \
		if (!afs_shutdown_refuses(afs_, req, ARB_IOC_OP_##OP))         \
			afs_##op args;                                         \
		afs_op_done(afs_, ARB_IOC_OP_##OP, t0_);                       \
	}

AFS_TIMED(lookup, LOOKUP,
	  (fuse_req_t req, fuse_ino_t parent, const char *name),
	  (req, parent, name))
AFS_TIMED(forget, FORGET,
	  (fuse_req_t req, fuse_ino_t ino, uint64_t nlookup),
	  (req, ino, nlookup))
AFS_TIMED(forget_multi, FORGET_MULTI,
	  (fuse_req_t req, size_t count, struct fuse_forget_data *forgets),
	  (req, count, forgets))
AFS_TIMED(getattr, GETATTR,
	  (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi),
	  (req, ino, fi))
AFS_TIMED(setattr, SETATTR,
	  (fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
	   struct fuse_file_info *fi),
	  (req, ino, attr, to_set, fi))
AFS_TIMED(readlink, READLINK,
	  (fuse_req_t req, fuse_ino_t ino),
	  (req, ino))
AFS_TIMED(mknod, MKNOD,
	  (fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
	   dev_t rdev),
	  (req, parent, name, mode, rdev))
AFS_TIMED(mkdir, MKDIR,
	  (fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode),
	  (req, parent, name, mode))
AFS_TIMED(unlink, UNLINK,
	  (fuse_req_t req, fuse_ino_t parent, const char *name),
	  (req, parent, name))
AFS_TIMED(rmdir, RMDIR,
	  (fuse_req_t req, fuse_ino_t parent, const char *name),
	  (req, parent, name))
AFS_TIMED(symlink, SYMLINK,
	  (fuse_req_t req, const char *link, fuse_ino_t parent,
	   const char *name),
	  (req, link, parent, name))
AFS_TIMED(rename, RENAME,
	  (fuse_req_t req, fuse_ino_t parent, const char *name,
	   fuse_ino_t newparent, const char *newname, unsigned int flags),
	  (req, parent, name, newparent, newname, flags))
AFS_TIMED(link, LINK,
	  (fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
	   const char *newname),
	  (req, ino, newparent, newname))
AFS_TIMED(open, OPEN,
	  (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi),
	  (req, ino, fi))
AFS_TIMED(read, READ,
	  (fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
	   struct fuse_file_info *fi),
	  (req, ino, size, off, fi))
AFS_TIMED(write, WRITE,
	  (fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
	   off_t off, struct fuse_file_info *fi),
	  (req, ino, buf, size, off, fi))
AFS_TIMED(release, RELEASE,
	  (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi),
	  (req, ino, fi))
AFS_TIMED(fsync, FSYNC,
	  (fuse_req_t req, fuse_ino_t ino, int datasync,
	   struct fuse_file_info *fi),
	  (req, ino, datasync, fi))
AFS_TIMED(opendir, OPENDIR,
	  (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi),
	  (req, ino, fi))
AFS_TIMED(readdir, READDIR,
	  (fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
	   struct fuse_file_info *fi),
	  (req, ino, size, off, fi))
AFS_TIMED(readdirplus, READDIRPLUS,
	  (fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
	   struct fuse_file_info *fi),
	  (req, ino, size, off, fi))
AFS_TIMED(releasedir, RELEASEDIR,
	  (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi),
	  (req, ino, fi))
AFS_TIMED(fsyncdir, FSYNCDIR,
	  (fuse_req_t req, fuse_ino_t ino, int datasync,
	   struct fuse_file_info *fi),
	  (req, ino, datasync, fi))
AFS_TIMED(statfs, STATFS,
	  (fuse_req_t req, fuse_ino_t ino),
	  (req, ino))
AFS_TIMED(setxattr, SETXATTR,
	  (fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
	   size_t size, int flags),
	  (req, ino, name, value, size, flags))
AFS_TIMED(getxattr, GETXATTR,
	  (fuse_req_t req, fuse_ino_t ino, const char *name, size_t size),
	  (req, ino, name, size))
AFS_TIMED(listxattr, LISTXATTR,
	  (fuse_req_t req, fuse_ino_t ino, size_t size),
	  (req, ino, size))
AFS_TIMED(removexattr, REMOVEXATTR,
	  (fuse_req_t req, fuse_ino_t ino, const char *name),
	  (req, ino, name))
AFS_TIMED(create, CREATE,
	  (fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
	   struct fuse_file_info *fi),
	  (req, parent, name, mode, fi))
AFS_TIMED(fallocate, FALLOCATE,
	  (fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
	   struct fuse_file_info *fi),
	  (req, ino, mode, offset, length, fi))
AFS_TIMED(copy_file_range, COPY_FILE_RANGE,
	  (fuse_req_t req, fuse_ino_t ino_in, off_t off_in,
	   struct fuse_file_info *fi_in, fuse_ino_t ino_out, off_t off_out,
	   struct fuse_file_info *fi_out, size_t len, int flags),
	  (req, ino_in, off_in, fi_in, ino_out, off_out, fi_out, len, flags))
AFS_TIMED(lseek, LSEEK,
	  (fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
	   struct fuse_file_info *fi),
	  (req, ino, off, whence, fi))
AFS_TIMED(ioctl, IOCTL,
	  (fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
	   struct fuse_file_info *fi, unsigned flags, const void *in_buf,
	   size_t in_bufsz, size_t out_bufsz),
	  (req, ino, cmd, arg, fi, flags, in_buf, in_bufsz, out_bufsz))

const struct fuse_lowlevel_ops afs_ops = {
	.init = afs_init,
	/* the others are counted (AFS_TIMED) */
	.lookup = timed_lookup,
	.forget = timed_forget,
	.forget_multi = timed_forget_multi,
	.getattr = timed_getattr,
	.setattr = timed_setattr,
	.readlink = timed_readlink,
	.mknod = timed_mknod,
	.mkdir = timed_mkdir,
	.unlink = timed_unlink,
	.rmdir = timed_rmdir,
	.symlink = timed_symlink,
	.rename = timed_rename,
	.link = timed_link,
	.open = timed_open,
	.read = timed_read,
	.write = timed_write,
	/* no .flush: close(2) has nothing to do here (the kernel writes its
	 * dirty pages back before FLUSH and reports their errors itself;
	 * durability is fsync's business), and the ENOSYS libfuse answers
	 * makes the kernel stop sending FLUSH: one round trip less per
	 * close */
	.release = timed_release,
	.fsync = timed_fsync,
	.opendir = timed_opendir,
	.readdir = timed_readdir,
	.readdirplus = timed_readdirplus,
	.releasedir = timed_releasedir,
	.fsyncdir = timed_fsyncdir,
	.statfs = timed_statfs,
	.setxattr = timed_setxattr,
	.getxattr = timed_getxattr,
	.listxattr = timed_listxattr,
	.removexattr = timed_removexattr,
	.create = timed_create,
	.fallocate = timed_fallocate,
	.lseek = timed_lseek,
	/* reflink copies (lib/fs/clone.c) */
	.copy_file_range = timed_copy_file_range,
	/* the control channel (arbor/ioctl.h) */
	.ioctl = timed_ioctl,
	/* no getlk/setlk/flock: the kernel keeps locks locally */
};
