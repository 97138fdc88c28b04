/* SPDX-License-Identifier: MIT */
/*
 * xattr.c - extended attributes: XATTR_ITEM (inode, XATTR_ITEM,
 * hash(name)) holding one struct arb_dir_entry per attribute (d_ino 0,
 * name then value), several on hash collisions.
 *
 * Namespaces: user., trusted., security. and the two POSIX ACL names;
 * anything else is -EOPNOTSUPP.  The kernel (default_permissions) checks
 * who may touch which namespace.
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

int arb_fs_setxattr(struct arb_fs *fs, uint64_t ino, const char *name,
		    const void *value, size_t size, int flags)
{
	struct arb_key k;
	struct arb_inode in;
	struct arb_txn *t;
	uint32_t max;
	uint8_t *buf = NULL;
	size_t len, off = 0, elen = 0, isize = 0, nsize;
	bool exists = false, item = false;
	int ret;

	ret = xattr_check_name(name, &len);
	if (ret)
		return ret;
	if (flags & ~(XATTR_CREATE | XATTR_REPLACE))
		return -EINVAL;
	if (size > ARB_XATTR_SIZE_MAX)
		return -E2BIG;
	fs_lock(fs);
	ret = fs_inode_read(fs, ino, &in);
	if (ret)
		goto out;
	if (fs->readonly) {
		ret = -EROFS;
		goto out;
	}
	max = arb_max_item_size(fs->vol);
	buf = malloc(max);
	if (!buf) {
		ret = -ENOMEM;
		goto out;
	}
	k.objectid = ino;
	k.type = ARB_XATTR_ITEM;
	k.offset = arb_name_hash(name, len);
	ret = arb_lookup_item(fs->root, &k, buf, max);
	if (ret >= 0) {
		item = true;
		isize = (size_t)ret;
		ret = fs_dent_find(buf, isize, name, len, &off, &elen);
		if (ret == 0)
			exists = true;
		else if (ret != -ENOENT)
			goto out;
	} else if (ret != -ENOENT) {
		goto out;
	}
	if (exists && (flags & XATTR_CREATE)) {
		ret = -EEXIST;
		goto out;
	}
	if (!exists && (flags & XATTR_REPLACE)) {
		ret = -ENODATA;
		goto out;
	}
	/* the new item: the other entries, then this one */
	if (exists) {
		memmove(buf + off, buf + off + elen, isize - off - elen);
		isize -= elen;
	}
	nsize = isize + fs_dent_size(len, size);
	if (nsize > max) {
		ret = -ENOSPC; /* as btrfs: does not fit a leaf */
		goto out;
	}
	ret = fs_op_begin(fs, &t, size, 0);
	if (ret)
		goto out;
	fs_dent_fill(buf + isize, 0, t->transid, 0, name, len, value, size);
	if (item)
		ret = arb_update_item(t, fs->root, &k, buf, (uint32_t)nsize);
	else
		ret = arb_insert_item(t, fs->root, &k, buf, (uint32_t)nsize);
	if (!ret) {
		fs_now(&in.ctime);
		ret = fs_inode_write(fs, t, &in);
	}
	ret = fs_op_end(fs, t, ret);
out:
	free(buf);
	fs_unlock(fs);
	return ret;
}

ssize_t arb_fs_getxattr(struct arb_fs *fs, uint64_t ino, const char *name,
			void *value, size_t size)
{
	struct arb_key k;
	struct arb_inode in;
	const struct arb_dir_entry *e;
	uint32_t max;
	uint8_t *buf = NULL;
	size_t len, off, elen, dl;
	ssize_t ret;
	int r;

	r = xattr_check_name(name, &len);
	if (r)
		return r;
	fs_lock(fs);
	r = fs_inode_read(fs, ino, &in);
	if (r) {
		ret = r;
		goto out;
	}
	max = arb_max_item_size(fs->vol);
	buf = malloc(max);
	if (!buf) {
		ret = -ENOMEM;
		goto out;
	}
	k.objectid = ino;
	k.type = ARB_XATTR_ITEM;
	k.offset = arb_name_hash(name, len);
	r = arb_lookup_item(fs->root, &k, buf, max);
	if (r >= 0)
		r = fs_dent_find(buf, (size_t)r, name, len, &off, &elen);
	if (r) {
		ret = r == -ENOENT ? -ENODATA : r;
		goto out;
	}
	e = (const struct arb_dir_entry *)(buf + off);
	dl = arb_dir_entry_d_data_len(e);
	if (size == 0) {
		ret = (ssize_t)dl;
	} else if (size < dl) {
		ret = -ERANGE;
	} else {
		memcpy(value, buf + off + sizeof(*e) + len, dl);
		ret = (ssize_t)dl;
	}
out:
	free(buf);
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
	struct arb_key k;
	struct arb_inode in;
	struct arb_txn *t;
	uint32_t max;
	uint8_t *buf = NULL;
	size_t len, off, elen;
	int ret;

	ret = xattr_check_name(name, &len);
	if (ret)
		return ret;
	fs_lock(fs);
	ret = fs_inode_read(fs, ino, &in);
	if (ret)
		goto out;
	max = arb_max_item_size(fs->vol);
	buf = malloc(max);
	if (!buf) {
		ret = -ENOMEM;
		goto out;
	}
	k.objectid = ino;
	k.type = ARB_XATTR_ITEM;
	k.offset = arb_name_hash(name, len);
	ret = arb_lookup_item(fs->root, &k, buf, max);
	if (ret >= 0)
		ret = fs_dent_find(buf, (size_t)ret, name, len, &off, &elen);
	if (ret) {
		ret = ret == -ENOENT ? -ENODATA : ret;
		goto out;
	}
	if (fs->readonly) {
		ret = -EROFS;
		goto out;
	}
	ret = fs_op_begin(fs, &t, 0, ARB_OP_RESERVE);
	if (ret)
		goto out;
	ret = fs_item_cut(t, fs->root, &k, off, elen);
	if (!ret) {
		fs_now(&in.ctime);
		ret = fs_inode_write(fs, t, &in);
	}
	ret = fs_op_end(fs, t, ret);
out:
	free(buf);
	fs_unlock(fs);
	return ret;
}
