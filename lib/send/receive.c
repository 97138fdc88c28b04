/* SPDX-License-Identifier: MIT */
/*
 * receive.c - arb_receive: apply a send stream, building a new subvolume.
 *
 * The subvolume is built where no one can see it: a tree of its own
 * (empty, or for an incremental stream a clone of the local copy of the
 * parent, which holds the same objectids as the sender's parent),
 * committed with an ORPHAN_ITEM as if it were deleted, so that a crash
 * or an error leaves it to the cleaner.  Every inode gets the objectid
 * the stream names; names are added and removed as (directory, name) ->
 * objectid.  Only after the end command arrived, every inode touched
 * has a name (or was deleted) and the digest of the result matches the
 * stream's is the tree linked, read-only, under its name (lib/subvol,
 * fs_subvol_recv_publish).
 *
 * Each command is checked against the tree before it changes anything
 * (the inode exists and has the right type, the name is free or names
 * that inode, a directory gets no second name and no cycle), so that no
 * input can fail an operation halfway (which would abort the
 * transaction): a bad stream gets an error naming the command and its
 * offset, and the filesystem stays as it was.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arbor/send.h"
#include "arbor/subvol.h"
#include "fs_int.h"
#include "stream_int.h"

struct rctx {
	struct arb_fs *fs;
	uint64_t dest;
	struct fs_tree *tr;
	struct arb_sreader r;
	struct arb_send_hdr h;
	uint64_t parent_id;
	char name[ARB_NAME_MAX + 1];
	uint64_t *touched;
	size_t nr_touched, cap_touched;
	char xname[ARB_XATTR_NAME_MAX + 1];
	/* where a cut stream resumes: the inode of the last inode-phase
	 * command (whole again: its commands may have stopped halfway;
	 * all before it are complete), or ARB_RESUME_ALL_INODES once
	 * names arrive */
	uint64_t resume_obj;
	/* and in it, the offset of the last data command applied: the
	 * rest of its data comes from there (data commands go in offset
	 * order) */
	uint64_t resume_off;
	/* the rest of a partial receive: its first part may have applied
	 * some names, deletions and xattr removals already */
	bool resuming;
	/* version 3: the times of the last INODE of a non-directory, set
	 * once its data commands are done (the next inode's command, the
	 * names or the end) */
	bool pend;
	uint64_t pend_obj;
	struct timespec pend_atime, pend_mtime;
};

static uint64_t rino(const struct rctx *c, uint64_t obj)
{
	return fs_ino(c->tr, obj);
}

#define bad(c, ...) sr_fail(&(c)->r, -EBADMSG, __VA_ARGS__)

static int touch(struct rctx *c, uint64_t obj)
{
	if (c->nr_touched && c->touched[c->nr_touched - 1] == obj)
		return 0;
	if (c->nr_touched == c->cap_touched) {
		size_t cap = c->cap_touched ? 2 * c->cap_touched : 256;
		uint64_t *n = realloc(c->touched, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		c->touched = n;
		c->cap_touched = cap;
	}
	c->touched[c->nr_touched++] = obj;
	return 0;
}

/* an inode of the tree being built, with its type checked (0: any) */
static int need(struct rctx *c, uint64_t obj, uint32_t type,
		struct arb_stat *st)
{
	int ret = arb_fs_getattr(c->fs, rino(c, obj), st);

	if (ret == -ENOENT)
		return bad(c, "inode %llu does not exist",
			   (unsigned long long)obj);
	if (ret)
		return sr_fail(&c->r, ret, "inode %llu: %s",
			       (unsigned long long)obj, strerror(-ret));
	if (type && (st->mode & S_IFMT) != type)
		return bad(c, "inode %llu has the wrong type (mode 0%o)",
			   (unsigned long long)obj, st->mode);
	return 0;
}

/* a call's failure, as the command's error */
static int op_err(struct rctx *c, int ret, const char *what)
{
	if (!ret)
		return 0;
	if (ret == -EINVAL || ret == -ENOENT || ret == -EEXIST ||
	    ret == -ENOTDIR || ret == -EISDIR || ret == -EOPNOTSUPP ||
	    ret == -ENODATA || ret == -ERANGE || ret == -EMLINK ||
	    ret == -ENAMETOOLONG || ret == -EFBIG)
		return bad(c, "%s: %s", what, strerror(-ret));
	return sr_fail(&c->r, ret, "%s: %s", what, strerror(-ret));
}

static int cmd_inode(struct rctx *c, const struct arb_scmd_dec *d)
{
	uint64_t ino = rino(c, d->obj);
	struct arb_inode in;
	struct arb_txn *t;
	struct timespec now;
	int ret;

	ret = touch(c, d->obj);
	if (ret)
		return ret;
	fs_lock(c->fs);
	ret = fs_inode_read(c->fs, ino, &in);
	if (ret == 0) {
		struct arb_setattr sa = { 0 };
		unsigned valid = ARB_SET_MODE | ARB_SET_UID | ARB_SET_GID |
				 ARB_SET_ATIME | ARB_SET_MTIME;

		fs_unlock(c->fs);
		if ((in.mode & S_IFMT) != (d->mode & S_IFMT))
			return bad(c, "inode %llu exists with another type",
				   (unsigned long long)d->obj);
		if (S_ISLNK(in.mode)) {
			/* a target never changes: only its owner and times */
			char t[ARB_SYMLINK_MAX + 1];
			int n = arb_fs_readlink(c->fs, ino, t, sizeof(t));

			if (n < 0)
				return op_err(c, n, "reading the symlink");
			if ((size_t)n != d->data_len ||
			    memcmp(t, d->data, d->data_len))
				return bad(c, "symlink %llu exists with another target",
					   (unsigned long long)d->obj);
			valid &= ~(unsigned)ARB_SET_MODE;
		}
		sa.mode = d->mode & 07777;
		sa.uid = d->uid;
		sa.gid = d->gid;
		sa.atime = d->atime;
		sa.mtime = d->mtime;
		if (S_ISREG(in.mode) && in.size != d->size) {
			sa.size = d->size;
			valid |= ARB_SET_SIZE;
		}
		return op_err(c, arb_fs_setattr(c->fs, ino, &sa, valid, NULL,
						NULL),
			      "setting attributes");
	}
	if (ret != -ENOENT)
		goto out;
	if (d->obj == ARB_FIRST_INO) {
		ret = bad(c, "the root directory cannot be created");
		goto out;
	}
	ret = fs_op_begin(c->fs, &t, rino(c, ARB_FIRST_INO), d->data_len, 0);
	if (ret)
		goto out;
	fs_now(&now);
	memset(&in, 0, sizeof(in));
	in.ino = ino;
	in.generation = t->transid;
	in.mode = d->mode;
	in.uid = d->uid;
	in.gid = d->gid;
	in.nlink = S_ISDIR(d->mode) ? 2 : 0;
	in.seq = 2;
	in.rdev = S_ISCHR(d->mode) || S_ISBLK(d->mode) ? d->rdev : 0;
	in.size = S_ISDIR(d->mode) ? 0 : d->size;
	in.nbytes = S_ISLNK(d->mode) ? d->data_len : 0;
	in.atime = d->atime;
	in.mtime = d->mtime;
	in.ctime = in.btime = now;
	if (S_ISFIFO(d->mode) || S_ISSOCK(d->mode) || S_ISCHR(d->mode) ||
	    S_ISBLK(d->mode))
		in.size = 0;
	arb_root_note_objectid(t, c->tr->root, d->obj);
	if (d->obj >= c->tr->next_ino)
		c->tr->next_ino = d->obj + 1;
	ret = fs_inode_insert(c->fs, t, &in);
	if (!ret && S_ISLNK(d->mode)) {
		size_t isz = ARB_FILE_EXTENT_INLINE_HDR + d->data_len;
		uint8_t *buf = calloc(1, isz);
		struct arb_file_extent *fe = (struct arb_file_extent *)buf;
		struct arb_key k = { d->obj, ARB_EXTENT_DATA, 0 };

		if (!buf) {
			ret = -ENOMEM;
		} else {
			arb_set_file_extent_f_generation(fe, t->transid);
			arb_set_file_extent_f_ram_bytes(fe, d->data_len);
			arb_set_file_extent_f_type(fe, ARB_FILE_EXTENT_INLINE);
			memcpy(buf + ARB_FILE_EXTENT_INLINE_HDR, d->data,
			       d->data_len);
			ret = arb_insert_item(t, c->tr->root, &k, buf,
					      (uint32_t)isz);
			free(buf);
		}
	}
	ret = fs_op_end(c->fs, t, ret);
out:
	fs_unlock(c->fs);
	return op_err(c, ret, "creating the inode");
}

static int cmd_xattr(struct rctx *c, const struct arb_scmd_dec *d)
{
	struct arb_stat st;
	int ret = need(c, d->obj, 0, &st);

	if (ret)
		return ret;
	memcpy(c->xname, d->name, d->name_len);
	c->xname[d->name_len] = 0;
	if (d->type == ARB_SCMD_RMXATTR) {
		ret = arb_fs_removexattr(c->fs, rino(c, d->obj), c->xname);
		if (ret == -ENODATA && c->resuming)
			ret = 0; /* removed by the first part */
	} else
		ret = arb_fs_setxattr(c->fs, rino(c, d->obj), c->xname, d->data,
				      d->data_len, 0);
	return op_err(c, ret, c->xname);
}

static int cmd_data(struct rctx *c, const struct arb_scmd_dec *d)
{
	struct arb_stat st;
	ssize_t w;
	int ret = need(c, d->obj, S_IFREG, &st);

	if (ret)
		return ret;
	switch (d->type) {
	case ARB_SCMD_WRITE:
		w = arb_fs_write(c->fs, rino(c, d->obj), d->data, d->data_len,
				 d->off);
		if (w >= 0 && (size_t)w != d->data_len)
			w = -EIO;
		return op_err(c, w < 0 ? (int)w : 0, "writing");
	case ARB_SCMD_PREALLOC:
		return op_err(c, arb_fs_fallocate(c->fs, rino(c, d->obj),
						  FALLOC_FL_KEEP_SIZE, d->off,
						  d->len),
			      "preallocating");
	case ARB_SCMD_PUNCH:
		return op_err(c, arb_fs_fallocate(c->fs, rino(c, d->obj),
						  FALLOC_FL_PUNCH_HOLE |
							  FALLOC_FL_KEEP_SIZE,
						  d->off, d->len),
			      "punching a hole");
	case ARB_SCMD_ENCODED_WRITE: {
		struct arb_encoded e = {
			.file_off = d->off,
			.num_bytes = d->len,
			.ram_bytes = d->ram_bytes,
			.ext_off = d->ext_off,
			/* the stream's 1 (validated) is zlib */
			.compression = ARB_COMPRESS_ZLIB,
			.len = (uint32_t)d->data_len,
		};

		w = arb_fs_write_encoded(c->fs, rino(c, d->obj), &e, d->data);
		if (w >= 0 && (uint64_t)w != d->len)
			w = -EIO;
		if (w == -EBADMSG)
			return bad(c, "the compressed data does not inflate to %llu bytes",
				   (unsigned long long)d->ram_bytes);
		return op_err(c, w < 0 ? (int)w : 0, "writing compressed data");
	}
	default: {
		struct arb_setattr sa = { .size = d->size };

		return op_err(c, arb_fs_setattr(c->fs, rino(c, d->obj), &sa,
						ARB_SET_SIZE, NULL, NULL),
			      "truncating");
	}
	}
}

/* CLONE: the source's bytes are on this side already (sent earlier, or
 * the parent's): shared where they line up, copied otherwise */
static int cmd_clone(struct rctx *c, const struct arb_scmd_dec *d)
{
	struct arb_stat st, ss;
	ssize_t n;
	int ret = need(c, d->obj, S_IFREG, &st);

	if (!ret)
		ret = need(c, d->src_obj, S_IFREG, &ss);
	if (ret)
		return ret;
	if (d->src_off + d->len > ss.size)
		return bad(c, "clone source inode %llu holds %llu bytes, the clone reads up to %llu",
			   (unsigned long long)d->src_obj,
			   (unsigned long long)ss.size,
			   (unsigned long long)(d->src_off + d->len));
	if (d->src_obj == d->obj && d->src_off < d->off + d->len &&
	    d->off < d->src_off + d->len)
		return bad(c, "clone of inode %llu onto an overlapping range of itself",
			   (unsigned long long)d->obj);
	n = arb_fs_copy_range(c->fs, rino(c, d->src_obj), d->src_off,
			      rino(c, d->obj), d->off, d->len,
			      ARB_COPY_KEEP_ATIME);
	if (n >= 0 && (uint64_t)n != d->len)
		n = -EIO;
	return op_err(c, n < 0 ? (int)n : 0, "cloning");
}

static int set_times(struct rctx *c, uint64_t obj, struct timespec atime,
		     struct timespec mtime)
{
	struct arb_setattr sa = { .atime = atime, .mtime = mtime };

	return op_err(c, arb_fs_setattr(c->fs, rino(c, obj), &sa,
					ARB_SET_ATIME | ARB_SET_MTIME, NULL,
					NULL),
		      "setting times");
}

/* version 3: the times a non-directory's INODE gave, once its data is in */
static int flush_times(struct rctx *c)
{
	if (!c->pend)
		return 0;
	c->pend = false;
	return set_times(c, c->pend_obj, c->pend_atime, c->pend_mtime);
}

static int cmd_times(struct rctx *c, const struct arb_scmd_dec *d)
{
	struct arb_stat st;
	int ret = need(c, d->obj, 0, &st);

	return ret ? ret : set_times(c, d->obj, d->atime, d->mtime);
}

/* does objectid obj have a name (an INODE_REF)? lock held */
static int has_name(struct rctx *c, uint64_t obj, bool *yes)
{
	struct arb_key k = { obj, ARB_INODE_REF, 0 };
	int ret = arb_next_key_of(c->tr->root, &k);

	if (ret < 0)
		return ret;
	*yes = ret == 0 && k.objectid == obj && k.type == ARB_INODE_REF;
	return 0;
}

/* would linking directory obj into dir make a cycle? lock held */
static int would_cycle(struct rctx *c, uint64_t dir, uint64_t obj, bool *yes)
{
	uint64_t cur = rino(c, dir), parent;
	uint64_t steps = 0;
	int ret;

	*yes = false;
	for (;;) {
		if (cur == rino(c, obj)) {
			*yes = true;
			return 0;
		}
		if (fs_obj(cur) == ARB_FIRST_INO)
			return 0;
		ret = fs_dir_parent(c->fs, cur, &parent);
		if (ret == -ENOENT)
			return 0; /* an unlinked directory: the chain ends */
		if (ret)
			return ret;
		if (++steps > (1ULL << 32))
			return -ELOOP;
		cur = parent;
	}
}

static int cmd_link(struct rctx *c, const struct arb_scmd_dec *d)
{
	uint64_t dir = rino(c, d->dir), ino = rino(c, d->obj), found;
	char name[ARB_NAME_MAX + 1];
	struct arb_inode din, in;
	struct arb_txn *t;
	struct timespec now;
	bool yes;
	int ret;

	memcpy(name, d->name, d->name_len);
	name[d->name_len] = 0;
	ret = touch(c, d->obj);
	if (ret)
		return ret;
	fs_lock(c->fs);
	ret = fs_inode_read(c->fs, dir, &din);
	if (ret == -ENOENT) {
		ret = bad(c, "directory %llu does not exist",
			  (unsigned long long)d->dir);
		goto out;
	}
	if (!ret && !S_ISDIR(din.mode)) {
		ret = bad(c, "inode %llu is not a directory",
			  (unsigned long long)d->dir);
		goto out;
	}
	if (!ret)
		ret = fs_inode_read(c->fs, ino, &in);
	if (ret == -ENOENT) {
		ret = bad(c, "inode %llu does not exist",
			  (unsigned long long)d->obj);
		goto out;
	}
	if (ret)
		goto out;
	if (d->obj == ARB_FIRST_INO) {
		ret = bad(c, "the root directory cannot get a name");
		goto out;
	}
	if (d->type == ARB_SCMD_UNLINK) {
		ret = fs_dir_find(c->fs, dir, name, d->name_len, &found, NULL,
				  NULL);
		/* resumed: the first part may have removed it (and linked
		 * the name to another inode since); the digest at the end
		 * checks the result */
		if (c->resuming && (ret == -ENOENT || ret == -ESTALE ||
				    (!ret && found != ino))) {
			ret = 0;
			goto out;
		}
		if (ret == -ENOENT || ret == -ESTALE ||
		    (!ret && found != ino)) {
			ret = bad(c, "directory %llu has no name '%s' for inode %llu",
				  (unsigned long long)d->dir, name,
				  (unsigned long long)d->obj);
			goto out;
		}
		if (ret)
			goto out;
		ret = fs_op_begin(c->fs, &t, dir, 0, ARB_OP_RESERVE);
		if (ret)
			goto out;
		fs_now(&now);
		ret = fs_link_del(c->fs, t, &din, name, d->name_len, ino, &now);
		if (S_ISDIR(in.mode)) {
			if (din.nlink > 2)
				din.nlink--;
		} else if (in.nlink) {
			in.nlink--;
		}
		goto write_both;
	}
	ret = fs_new_name_ok(c->fs, dir, name, d->name_len, &din);
	if (ret == -EEXIST && c->resuming &&
	    fs_dir_find(c->fs, dir, name, d->name_len, &found, NULL, NULL) ==
		    0 &&
	    found == ino) {
		ret = 0; /* linked by the first part */
		goto out;
	}
	if (ret == -EEXIST) {
		ret = bad(c, "directory %llu holds '%s' already",
			  (unsigned long long)d->dir, name);
		goto out;
	}
	if (ret)
		goto out;
	if (S_ISDIR(in.mode)) {
		ret = has_name(c, d->obj, &yes);
		if (!ret && yes) {
			ret = bad(c, "directory %llu would get a second name",
				  (unsigned long long)d->obj);
			goto out;
		}
		if (!ret)
			ret = would_cycle(c, d->dir, d->obj, &yes);
		if (!ret && yes) {
			ret = bad(c, "linking directory %llu into %llu makes a cycle",
				  (unsigned long long)d->obj,
				  (unsigned long long)d->dir);
			goto out;
		}
		if (ret)
			goto out;
	}
	if ((S_ISDIR(in.mode) ? din.nlink : in.nlink) >= ARB_LINK_MAX ||
	    !fs_iref_has_room(c->fs, ino, dir, d->name_len)) {
		ret = bad(c, "too many links");
		goto out;
	}
	ret = fs_op_begin(c->fs, &t, dir, 0, 0);
	if (ret)
		goto out;
	fs_now(&now);
	ret = fs_link_add(c->fs, t, &din, name, d->name_len, ino,
			  (uint8_t)((in.mode & S_IFMT) >> 12), &now);
	if (S_ISDIR(in.mode))
		din.nlink++;
	else
		in.nlink++;
write_both:
	if (!ret)
		ret = fs_inode_write(c->fs, t, &din);
	if (!ret && !S_ISDIR(in.mode))
		ret = fs_inode_write(c->fs, t, &in);
	ret = fs_op_end(c->fs, t, ret);
out:
	fs_unlock(c->fs);
	return op_err(c, ret, d->type == ARB_SCMD_LINK ? "link" : "unlink");
}

static int cmd_delete(struct rctx *c, const struct arb_scmd_dec *d)
{
	uint64_t ino = rino(c, d->obj);
	struct arb_key k = { d->obj, ARB_DIR_INDEX, 0 };
	struct arb_inode in;
	struct arb_txn *t;
	bool named;
	int ret;

	fs_lock(c->fs);
	ret = fs_inode_read(c->fs, ino, &in);
	if (ret == -ENOENT && c->resuming) {
		ret = 0; /* deleted by the first part */
		goto out;
	}
	if (ret == -ENOENT) {
		ret = bad(c, "inode %llu does not exist",
			  (unsigned long long)d->obj);
		goto out;
	}
	if (ret)
		goto out;
	if (d->obj == ARB_FIRST_INO) {
		ret = bad(c, "the root directory cannot be deleted");
		goto out;
	}
	ret = has_name(c, d->obj, &named);
	if (!ret && named) {
		ret = bad(c, "inode %llu still has a name",
			  (unsigned long long)d->obj);
		goto out;
	}
	if (!ret && S_ISDIR(in.mode)) {
		ret = arb_next_key_of(c->tr->root, &k);
		if (ret == 0 && k.objectid == d->obj &&
		    k.type == ARB_DIR_INDEX) {
			ret = bad(c, "directory %llu is not empty",
				  (unsigned long long)d->obj);
			goto out;
		}
		ret = ret < 0 ? ret : 0;
	}
	if (ret)
		goto out;
	ret = fs_op_begin(c->fs, &t, ino, 0, ARB_OP_RESERVE);
	if (ret)
		goto out;
	ret = fs_inode_free(c->fs, t, ino);
	ret = fs_op_end(c->fs, t, ret);
out:
	fs_unlock(c->fs);
	return op_err(c, ret, "delete");
}

/* the end: every inode the stream touched has a name or is gone */
static int check_end(struct rctx *c)
{
	struct arb_inode in;
	bool named;
	int ret = 0;

	fs_lock(c->fs);
	for (size_t i = 0; i < c->nr_touched && !ret; i++) {
		uint64_t obj = c->touched[i];

		if (obj == ARB_FIRST_INO)
			continue;
		ret = fs_inode_read(c->fs, rino(c, obj), &in);
		if (ret == -ENOENT) {
			ret = 0;
			continue;
		}
		if (!ret)
			ret = has_name(c, obj, &named);
		if (!ret && !named)
			ret = bad(c, "inode %llu was left without a name",
				  (unsigned long long)obj);
	}
	fs_unlock(c->fs);
	return ret;
}

struct pfind {
	const struct arb_send_hdr *h;
	struct arb_subvol_info match, near;
	bool found, found_near;
};

static int pfind_fn(void *ctx, const struct arb_subvol_info *si)
{
	static const uint8_t zero[16];
	struct pfind *p = ctx;
	bool by_recv = memcmp(si->received_uuid, zero, 16) &&
		       !memcmp(si->received_uuid, p->h->parent_uuid, 16);
	bool by_own = !memcmp(si->uuid, p->h->parent_uuid, 16);

	if (si->flags & ARB_SUBVOL_DELETED || (!by_recv && !by_own))
		return 0;
	if ((si->flags & ARB_SUBVOL_RDONLY) &&
	    ((by_recv && si->stransid == p->h->parent_gen) ||
	     (by_own && si->gen == p->h->parent_gen))) {
		p->match = *si;
		p->found = true;
		return 1;
	}
	p->near = *si;
	p->found_near = true;
	return 0;
}

static void uuid_str(const uint8_t *u, char *out)
{
	for (int i = 0, n = 0; i < 16; i++)
		n += sprintf(out + n, "%02x%s", u[i],
			     i == 3 || i == 5 || i == 7 || i == 9 ? "-" : "");
}

static int find_parent(struct rctx *c, struct arb_recv_result *res)
{
	struct pfind p = { .h = &c->h };
	char u[40];
	int ret;

	ret = arb_subvol_list(c->fs, pfind_fn, &p);
	if (ret < 0)
		return ret;
	if (p.found) {
		c->parent_id = p.match.id;
		return 0;
	}
	uuid_str(c->h.parent_uuid, u);
	if (p.found_near)
		snprintf(res->error, sizeof(res->error),
			 "the stream's parent is %s at generation %llu; here subvolume '%s' (id %llu) has that UUID but %s generation %llu (received: %llu)%s",
			 u, (unsigned long long)c->h.parent_gen, p.near.name,
			 (unsigned long long)p.near.id,
			 "is at", (unsigned long long)p.near.gen,
			 (unsigned long long)p.near.stransid,
			 p.near.flags & ARB_SUBVOL_RDONLY
				 ? ""
				 : " and is writable (changed since it was received?)");
	else
		snprintf(res->error, sizeof(res->error),
			 "the stream's parent subvolume %s (generation %llu) is not here: receive its full stream (or the chain up to it) first",
			 u, (unsigned long long)c->h.parent_gen);
	return -ENOENT;
}

/* RESUME: the rest of partial receive d->dir, from inode d->obj on */
static int resume_partial(struct rctx *c, const struct arb_scmd_dec *d)
{
	struct arb_subvol_item si;
	uint64_t stored, stored_off;
	int ret;

	ret = fs_subvol_recv_resume(c->fs, d->dir, &c->tr, &si);
	if (ret == -ENOENT)
		return sr_fail(&c->r, -ENOENT,
			       "no partial receive %llu here (resumed already, given up, or another image)",
			       (unsigned long long)d->dir);
	if (ret == -EBUSY)
		return sr_fail(&c->r, -EBUSY,
			       "partial receive %llu is being resumed by another receive",
			       (unsigned long long)d->dir);
	if (ret)
		return sr_fail(&c->r, ret, "opening partial receive %llu: %s",
			       (unsigned long long)d->dir, strerror(-ret));
	stored = arb_subvol_item_s_rtransid(&si);
	stored_off = arb_subvol_item_s_last_id(&si);
	if (memcmp(si.s_received_uuid, c->h.uuid, 16) ||
	    arb_subvol_item_s_stransid(&si) != c->h.gen)
		ret = bad(c, "partial receive %llu is of another snapshot (or generation) than this stream",
			  (unsigned long long)d->dir);
	else if (arb_subvol_item_s_source(&si) != c->parent_id)
		ret = bad(c, "partial receive %llu was built on another parent than this stream's",
			  (unsigned long long)d->dir);
	else if (d->obj > stored || (d->obj == stored && d->off > stored_off))
		ret = bad(c, "partial receive %llu stopped at inode %llu offset %llu, this stream resumes at inode %llu offset %llu: what lies between would be missing",
			  (unsigned long long)d->dir,
			  (unsigned long long)stored,
			  (unsigned long long)stored_off,
			  (unsigned long long)d->obj,
			  (unsigned long long)d->off);
	if (ret) {
		/* the partial stays for the right stream */
		fs_lock(c->fs);
		c->tr->receiving = false;
		fs_unlock(c->fs);
		c->tr = NULL;
		return ret;
	}
	c->resuming = true;
	c->resume_obj = d->obj;
	c->resume_off = d->off;
	return 0;
}

/* a receive commits what arrived, with where to resume, every 64 MiB
 * of stream or 30 s (ARBOR_RECV_CHECKPOINT_BYTES overrides the size, for
 * tests) */
#define RECV_CHECKPOINT_BYTES (64ULL << 20)
#define RECV_CHECKPOINT_NS (30ULL * 1000000000ULL)

static uint64_t checkpoint_bytes(void)
{
	const char *e = getenv("ARBOR_RECV_CHECKPOINT_BYTES");
	unsigned long long v;

	if (e && sscanf(e, "%llu", &v) == 1 && v > 0)
		return v;
	return RECV_CHECKPOINT_BYTES;
}

/* commit what was applied, and the resume point: the start of the last
 * command applied (applied again on a resume, which is harmless) */
static int checkpoint(struct rctx *c)
{
	int ret = fs_subvol_recv_park(c->fs, c->tr, c->h.uuid, c->h.gen,
				      c->resume_obj ? c->resume_obj
						    : ARB_FIRST_INO,
				      c->resume_off, true);

	return ret ? sr_fail(&c->r, ret, "committing a checkpoint: %s",
			     strerror(-ret))
		   : 0;
}

int arb_receive(struct arb_fs *fs, uint64_t dir, int fd, unsigned flags,
		struct arb_recv_result *res)
{
	uint64_t ckpt_off = 0, ckpt_ns = arb_mono_ns();
	uint64_t ckpt_bytes = checkpoint_bytes();
	struct rctx c = { .fs = fs, .dest = dir };
	struct arb_scmd_dec d;
	struct arb_stat st;
	uint8_t digest[ARB_DIGEST_SIZE], sum[32];
	uint64_t sum_gen = 0;
	char a[65], b[65];
	bool ended = false;
	int ret;

	memset(res, 0, sizeof(*res));
	if (flags & ~ARB_RECEIVE_RESUMED)
		return -EINVAL;
	ret = arb_fs_getattr(fs, dir, &st);
	if (!ret && !S_ISDIR(st.mode))
		ret = -ENOTDIR;
	if (!ret && st.rdonly)
		ret = -EROFS;
	if (ret) {
		snprintf(res->error, sizeof(res->error),
			 "the target directory: %s", strerror(-ret));
		return ret;
	}
	ret = sr_init(&c.r, fd, res->error, sizeof(res->error));
	if (ret)
		return ret;
	ret = sr_header(&c.r, &c.h);
	if (ret)
		goto out;
	if ((flags & ARB_RECEIVE_RESUMED) && !(c.h.flags & ARB_SEND_F_RESUME)) {
		ret = sr_fail(&c.r, -EINVAL,
			      "not a resumed stream (arbor send --resume TOKEN writes one)");
		goto out;
	}
	if (c.h.flags & ARB_SEND_F_INCREMENTAL) {
		ret = find_parent(&c, res);
		if (ret)
			goto out;
	}
	while (!ended) {
		ret = sr_next(&c.r, &d);
		if (ret)
			break;
		if (c.r.index == 1) {
			if (d.type != ARB_SCMD_BEGIN) {
				ret = bad(&c, "the first command is not begin");
				break;
			}
			memcpy(c.name, d.name, d.name_len);
			c.name[d.name_len] = 0;
			ret = arb_fs_lookup(fs, dir, c.name, &st);
			if (ret == 0) {
				ret = sr_fail(&c.r, -EEXIST,
					      "the target directory holds '%s' already",
					      c.name);
				break;
			}
			if (c.h.flags & ARB_SEND_F_RESUME) {
				ret = 0; /* the tree comes with RESUME */
				continue;
			}
			ret = fs_subvol_recv_begin(fs, c.parent_id, &c.tr);
			if (ret) {
				ret = sr_fail(&c.r, ret,
					      "making the new subvolume: %s",
					      strerror(-ret));
				break;
			}
			continue;
		}
		if (c.r.index == 2 && (c.h.flags & ARB_SEND_F_RESUME)) {
			ret = d.type == ARB_SCMD_RESUME
				      ? resume_partial(&c, &d)
				      : bad(&c, "a resumed stream without its resume command");
			if (ret)
				break;
			continue;
		}
		/* a non-directory's data is done when another inode's
		 * command, the names or the end come */
		if (c.pend && (d.obj != c.pend_obj || d.type == ARB_SCMD_END ||
			       d.type == ARB_SCMD_UNLINK ||
			       d.type == ARB_SCMD_LINK ||
			       d.type == ARB_SCMD_DELETE ||
			       d.type == ARB_SCMD_TIMES)) {
			ret = flush_times(&c);
			if (ret)
				break;
		}
		switch (d.type) {
		case ARB_SCMD_BEGIN:
			ret = bad(&c, "a second begin command");
			break;
		case ARB_SCMD_RESUME:
			ret = bad(&c, "a resume command out of place");
			break;
		case ARB_SCMD_INODE:
			ret = cmd_inode(&c, &d);
			if (!ret && c.h.version >= 3 && !S_ISDIR(d.mode)) {
				c.pend = true;
				c.pend_obj = d.obj;
				c.pend_atime = d.atime;
				c.pend_mtime = d.mtime;
			}
			break;
		case ARB_SCMD_XATTR:
		case ARB_SCMD_RMXATTR:
			ret = cmd_xattr(&c, &d);
			break;
		case ARB_SCMD_WRITE:
		case ARB_SCMD_PREALLOC:
		case ARB_SCMD_TRUNCATE:
		case ARB_SCMD_PUNCH:
		case ARB_SCMD_ENCODED_WRITE:
			ret = cmd_data(&c, &d);
			break;
		case ARB_SCMD_CLONE:
			ret = cmd_clone(&c, &d);
			break;
		case ARB_SCMD_LINK:
		case ARB_SCMD_UNLINK:
			ret = cmd_link(&c, &d);
			break;
		case ARB_SCMD_DELETE:
			ret = cmd_delete(&c, &d);
			break;
		case ARB_SCMD_TIMES:
			ret = cmd_times(&c, &d);
			break;
		case ARB_SCMD_END:
			ret = check_end(&c);
			if (!ret && c.h.version < 3) {
				ret = arb_subvol_digest_portable(fs, c.tr->id,
								 digest);
			} else if (!ret) {
				/* from the parent's sum: what differs */
				ret = fs_digest_sum(fs, c.tr->id, c.parent_id, 0,
						    sum, &sum_gen, NULL);
				if (!ret)
					fs_digest_final(sum, digest);
			}
			if (!ret && memcmp(digest, d.digest, sizeof(digest))) {
				arb_digest_hex(d.digest, a);
				arb_digest_hex(digest, b);
				ret = bad(&c,
					  "digest mismatch: the stream says %s, the received tree has %s",
					  a, b);
			}
			ended = true;
			break;
		}
		if (ret)
			break;
		/* the resume point moves once a command went through */
		if (d.type == ARB_SCMD_UNLINK || d.type == ARB_SCMD_LINK ||
		    d.type == ARB_SCMD_DELETE || d.type == ARB_SCMD_TIMES) {
			c.resume_obj = ARB_RESUME_ALL_INODES;
			c.resume_off = 0;
		} else if (d.type != ARB_SCMD_END &&
			   c.resume_obj != ARB_RESUME_ALL_INODES) {
			if (d.obj != c.resume_obj)
				c.resume_off = 0;
			c.resume_obj = d.obj;
			/* from the start of the last one: applying it again
			 * is harmless, and a PREALLOC that follows a PUNCH
			 * at the same offset comes again too */
			if (d.type == ARB_SCMD_WRITE || d.type == ARB_SCMD_CLONE ||
			    d.type == ARB_SCMD_ENCODED_WRITE ||
			    d.type == ARB_SCMD_PUNCH ||
			    d.type == ARB_SCMD_PREALLOC)
				c.resume_off = d.off;
		}
		/* a checkpoint now and then: what arrived is committed
		 * with where to resume, so that a crash of this daemon
		 * leaves a partial receive instead of an orphan */
		if (!ended && c.h.version >= 2 && c.tr &&
		    (c.r.off - ckpt_off >= ckpt_bytes ||
		     arb_mono_ns() - ckpt_ns >= RECV_CHECKPOINT_NS)) {
			ret = checkpoint(&c);
			ckpt_off = c.r.off;
			ckpt_ns = arb_mono_ns();
			if (ret)
				break;
		}
	}
	if (!ret) {
		uint8_t x;
		ssize_t k;

		do
			k = read(fd, &x, 1);
		while (k < 0 && errno == EINTR);
		if (k > 0)
			ret = bad(&c, "bytes after the end command");
	}
	if (!ret) {
		ret = fs_subvol_recv_publish(fs, c.tr, dir, c.name, c.h.uuid,
					     c.h.gen);
		if (ret)
			snprintf(res->error, sizeof(res->error),
				 "linking the received subvolume as '%s': %s",
				 c.name, strerror(-ret));
	}
	if (!ret) {
		/* read-only now: its sum is kept for the next incremental
		 * (an optimization: not having it costs a walk later) */
		if (c.h.version >= 3 && fs_digest_keep(fs, c.tr->id, sum_gen, sum))
			arb_log(ARB_LOG_INFO, "the received subvolume's digest is not kept");
		res->id = c.tr->id;
		memcpy(res->digest, digest, sizeof(digest));
		snprintf(res->name, sizeof(res->name), "%s", c.name);
	}
out:
	/* cut short (not refused): keep what arrived for a resume */
	if (ret && c.tr && !ended && (c.r.cut || ret == -ENOSPC) &&
	    c.h.version >= 2) {
		struct arb_resume_token tok = {
			.id = c.tr->id,
			.gen = c.h.gen,
			.obj = c.resume_obj ? c.resume_obj : ARB_FIRST_INO,
			.off = c.resume_off,
		};
		int pret;

		memcpy(tok.uuid, c.h.uuid, 16);
		pret = fs_subvol_recv_park(fs, c.tr, c.h.uuid, c.h.gen,
					   tok.obj, tok.off, false);
		if (!pret) {
			arb_resume_token_format(&tok, res->resume_token);
			c.tr = NULL;
		} else {
			arb_log(ARB_LOG_WARN,
				"keeping the partial receive for a resume: %s",
				strerror(-pret));
		}
	}
	if (ret && c.tr) {
		uint64_t id = c.tr->id;

		/* give its space back now (a tool exits right after; a
		 * mount's next receive may need it) */
		fs_subvol_recv_abandon(fs, c.tr);
		(void)arb_subvol_wait(fs, id);
	}
	res->commands = c.r.index;
	res->bytes = c.r.off;
	sr_free(&c.r);
	free(c.touched);
	return ret;
}

int arb_receive_discard(struct arb_fs *fs, const char *token)
{
	struct arb_resume_token tok;
	struct arb_subvol_info si;
	int ret;

	if (arb_resume_token_parse(token, &tok))
		return -EINVAL;
	ret = arb_subvol_info_id(fs, tok.id, &si);
	if (ret)
		return ret == -ENOENT ? -ENOENT : ret;
	if (!(si.flags & ARB_SUBVOL_PARTIAL) ||
	    memcmp(si.received_uuid, tok.uuid, 16) || si.stransid != tok.gen)
		return -ENOENT;
	ret = fs_subvol_recv_discard(fs, tok.id);
	if (!ret)
		ret = arb_subvol_wait(fs, tok.id);
	return ret;
}
