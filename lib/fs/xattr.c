/* SPDX-License-Identifier: MIT */
/*
 * xattr.c - extended attributes: XATTR_ITEM (inode, XATTR_ITEM,
 * hash(name)) holding one struct arb_dir_entry per attribute (d_ino 0,
 * name then value), several on hash collisions.
 *
 * Namespaces: user., trusted., security. and the two POSIX ACL names;
 * anything else is -EOPNOTSUPP.  The kernel (default_permissions) checks
 * who may touch which namespace.  Setting an ACL name goes through acl.c,
 * which validates the value and keeps the mode consistent with it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

#include "fs_int.h"

static int xattr_check_name(const char *name, size_t *len)
{
	static const char *const prefixes[] = { "user.", "trusted.",
						"security." };
	size_t n = strnlen(name, ARB_XATTR_NAME_MAX + 1);

	if (n == 0)
		return -EINVAL;
	if (n > ARB_XATTR_NAME_MAX)
		return -ERANGE;
	*len = n;
	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
		size_t pl = strlen(prefixes[i]);
		if (n > pl && strncmp(name, prefixes[i], pl) == 0)
			return 0;
	}
	if (strcmp(name, "system.posix_acl_access") == 0 ||
	    strcmp(name, "system.posix_acl_default") == 0)
		return 0;
	return -EOPNOTSUPP;
}

/* ---- one attribute's item --------------------------------------------- */

int fs_xslot_load(struct arb_fs *fs, uint64_t ino, const char *name,
		  size_t len, struct fs_xslot *s)
{
	int ret;

	memset(s, 0, sizeof(*s));
	s->name = name;
	s->len = len;
	s->max = arb_max_item_size(fs->vol);
	s->buf = malloc(s->max);
	if (!s->buf)
		return -ENOMEM;
	s->k.objectid = ino;
	s->k.type = ARB_XATTR_ITEM;
	s->k.offset = arb_name_hash(name, len);
	ret = arb_lookup_item(fs->root, &s->k, s->buf, s->max);
	if (ret == -ENOENT)
		return 0;
	if (ret < 0)
		goto fail;
	s->item = true;
	s->isize = (size_t)ret;
	ret = fs_dent_find(s->buf, s->isize, name, len, &s->off, &s->elen);
	if (ret == -ENOENT)
		return 0;
	if (ret)
		goto fail;
	s->exists = true;
	return 0;
fail:
	fs_xslot_release(s);
	return ret;
}

int fs_xslot_fits(const struct fs_xslot *s, size_t size)
{
	size_t rest = s->isize - (s->exists ? s->elen : 0);

	/* as btrfs: an attribute must fit a leaf */
	return rest + fs_dent_size(s->len, size) > s->max ? -ENOSPC : 0;
}

int fs_xslot_store(struct arb_fs *fs, struct arb_txn *t, struct fs_xslot *s,
		   const void *value, size_t size)
{
	size_t nsize;
	int ret;

	if (s->exists) {
		memmove(s->buf + s->off, s->buf + s->off + s->elen,
			s->isize - s->off - s->elen);
		s->isize -= s->elen;
		s->exists = false;
	} else if (!value) {
		return 0;
	}
	if (!value) {
		if (s->isize == 0) {
			s->item = false;
			return arb_del_item(t, fs->root, &s->k);
		}
		return arb_update_item(t, fs->root, &s->k, s->buf,
				       (uint32_t)s->isize);
	}
	nsize = s->isize + fs_dent_size(s->len, size);
	if (nsize > s->max)
		return -ENOSPC;
	fs_dent_fill(s->buf + s->isize, 0, t->transid, 0, s->name, s->len,
		     value, size);
	if (s->item)
		ret = arb_update_item(t, fs->root, &s->k, s->buf,
				      (uint32_t)nsize);
	else
		ret = arb_insert_item(t, fs->root, &s->k, s->buf,
				      (uint32_t)nsize);
	if (!ret) {
		s->off = s->isize;
		s->elen = nsize - s->isize;
		s->isize = nsize;
		s->item = s->exists = true;
	}
	return ret;
}

void fs_xslot_release(struct fs_xslot *s)
{
	free(s->buf);
	s->buf = NULL;
}

int fs_xattr_get(struct arb_fs *fs, uint64_t ino, const char *name,
		 void **value, size_t *size)
{
	struct fs_xslot s;
	const struct arb_dir_entry *e;
	size_t dl;
	int ret;

	ret = fs_xslot_load(fs, ino, name, strlen(name), &s);
	if (ret)
		return ret;
	if (!s.exists) {
		ret = -ENODATA;
		goto out;
	}
	e = (const struct arb_dir_entry *)(s.buf + s.off);
	dl = arb_dir_entry_d_data_len(e);
	*value = malloc(dl ? dl : 1);
	if (!*value) {
		ret = -ENOMEM;
		goto out;
	}
	memcpy(*value, s.buf + s.off + sizeof(*e) + s.len, dl);
	*size = dl;
out:
	fs_xslot_release(&s);
	return ret;
}

int fs_xattr_put(struct arb_fs *fs, struct arb_txn *t, uint64_t ino,
		 const char *name, const void *value, size_t size)
{
	struct fs_xslot s;
	int ret;

	ret = fs_xslot_load(fs, ino, name, strlen(name), &s);
	if (ret)
		return ret;
	ret = fs_xslot_store(fs, t, &s, value, size);
	fs_xslot_release(&s);
	return ret;
}

/* ---- the operations ----------------------------------------------------- */

int arb_fs_setxattr(struct arb_fs *fs, uint64_t ino, const char *name,
		    const void *value, size_t size, int flags)
{
	struct fs_xslot s;
	struct arb_inode in;
	struct arb_txn *t;
	size_t len;
	int ret, acl;

	ret = xattr_check_name(name, &len);
	if (ret)
		return ret;
	if (flags & ~(XATTR_CREATE | XATTR_REPLACE))
		return -EINVAL;
	if (size > ARB_XATTR_SIZE_MAX)
		return -E2BIG;
	if (size && !value)
		return -EINVAL;
	/* ACLs: as the kernel's set_posix_acl(), which ignores the flags */
	acl = fs_acl_type(name);
	if (acl)
		return fs_acl_setxattr(fs, ino, acl, value, size);
	fs_lock(fs);
	ret = fs_inode_read(fs, ino, &in);
	if (!ret)
		ret = fs_iflags_may_setxattr(&in);
	if (ret)
		goto out;
	if (fs->readonly) {
		ret = -EROFS;
		goto out;
	}
	ret = fs_xslot_load(fs, ino, name, len, &s);
	if (ret)
		goto out;
	if (s.exists && (flags & XATTR_CREATE))
		ret = -EEXIST;
	else if (!s.exists && (flags & XATTR_REPLACE))
		ret = -ENODATA;
	else
		ret = fs_xslot_fits(&s, size);
	if (!ret)
		ret = fs_op_begin(fs, &t, size, 0);
	if (ret)
		goto out_release;
	/* an empty value is stored as one (value may be NULL then) */
	ret = fs_xslot_store(fs, t, &s, value ? value : "", size);
	if (!ret) {
		fs_now(&in.ctime);
		ret = fs_inode_write(fs, t, &in);
	}
	ret = fs_op_end(fs, t, ret);
out_release:
	fs_xslot_release(&s);
out:
	fs_unlock(fs);
	return ret;
}

ssize_t arb_fs_getxattr(struct arb_fs *fs, uint64_t ino, const char *name,
			void *value, size_t size)
{
	struct fs_xslot s;
	struct arb_inode in;
	const struct arb_dir_entry *e;
	size_t len, dl;
	ssize_t ret;
	int r;

	r = xattr_check_name(name, &len);
	if (r)
		return r;
	fs_lock(fs);
	r = fs_inode_read(fs, ino, &in);
	if (!r)
		r = fs_xslot_load(fs, ino, name, len, &s);
	if (r) {
		ret = r;
		goto out;
	}
	if (!s.exists) {
		ret = -ENODATA;
		goto out_release;
	}
	e = (const struct arb_dir_entry *)(s.buf + s.off);
	dl = arb_dir_entry_d_data_len(e);
	if (size == 0) {
		ret = (ssize_t)dl;
	} else if (size < dl) {
		ret = -ERANGE;
	} else {
		memcpy(value, s.buf + s.off + sizeof(*e) + len, dl);
		ret = (ssize_t)dl;
	}
out_release:
	fs_xslot_release(&s);
out:
	fs_unlock(fs);
	return ret;
}

ssize_t arb_fs_listxattr(struct arb_fs *fs, uint64_t ino, char *list,
			 size_t size)
{
	struct arb_key k = { ino, ARB_XATTR_ITEM, 0 };
	struct arb_inode in;
	struct arb_iter it;
	size_t total = 0;
	ssize_t ret;
	int r;

	fs_lock(fs);
	r = fs_inode_read(fs, ino, &in);
	if (r) {
		ret = r;
		goto out;
	}
	arb_iter_init(&it, fs->root);
	r = arb_iter_seek(&it, &k);
	while (r == 0) {
		const uint8_t *d = arb_iter_data(&it);
		uint32_t isize = arb_iter_size(&it);
		size_t pos = 0;

		arb_iter_key(&it, &k);
		if (k.objectid != ino || k.type != ARB_XATTR_ITEM)
			break;
		while (pos < isize) {
			const struct arb_dir_entry *e;
			size_t nl, el;

			if (isize - pos < sizeof(*e)) {
				r = -EUCLEAN;
				break;
			}
			e = (const struct arb_dir_entry *)(d + pos);
			nl = arb_dir_entry_d_name_len(e);
			el = fs_dent_size(nl, arb_dir_entry_d_data_len(e));
			if (el > isize - pos) {
				r = -EUCLEAN;
				break;
			}
			if (size && total + nl + 1 <= size) {
				memcpy(list + total, d + pos + sizeof(*e), nl);
				list[total + nl] = 0;
			}
			total += nl + 1;
			pos += el;
		}
		if (r)
			break;
		r = arb_iter_next(&it);
	}
	arb_iter_release(&it);
	if (r < 0) {
		if (r == -EUCLEAN)
			arb_log(ARB_LOG_ERR, "inode %llu: malformed xattr item",
				(unsigned long long)ino);
		ret = r;
		goto out;
	}
	if (size && total > size)
		ret = -ERANGE;
	else
		ret = (ssize_t)total;
out:
	fs_unlock(fs);
	return ret;
}

int arb_fs_removexattr(struct arb_fs *fs, uint64_t ino, const char *name)
{
	struct fs_xslot s;
	struct arb_inode in;
	struct arb_txn *t;
	size_t len;
	int ret;

	ret = xattr_check_name(name, &len);
	if (ret)
		return ret;
	fs_lock(fs);
	ret = fs_inode_read(fs, ino, &in);
	if (!ret)
		ret = fs_iflags_may_setxattr(&in);
	if (ret)
		goto out;
	ret = fs_xslot_load(fs, ino, name, len, &s);
	if (ret)
		goto out;
	if (!s.exists)
		ret = -ENODATA;
	else if (fs->readonly)
		ret = -EROFS;
	else
		ret = fs_op_begin(fs, &t, 0, ARB_OP_RESERVE);
	if (ret)
		goto out_release;
	/* removing an access ACL leaves the mode as it is (as the kernel's
	 * set_posix_acl(NULL) does) */
	ret = fs_xslot_store(fs, t, &s, NULL, 0);
	if (!ret) {
		fs_now(&in.ctime);
		ret = fs_inode_write(fs, t, &in);
	}
	ret = fs_op_end(fs, t, ret);
out_release:
	fs_xslot_release(&s);
out:
	fs_unlock(fs);
	return ret;
}
