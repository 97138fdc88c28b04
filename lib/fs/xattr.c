/* SPDX-License-Identifier: MIT */
/*
 * xattr.c - extended attributes: XATTR_ITEM (inode, XATTR_ITEM,
 * hash(name)) holding one struct arb_dir_entry per attribute (d_ino 0,
 * name then value), several on hash collisions.
 *
 * Values of up to ARB_XATTR_INLINE_MAX bytes that fit the item are
 * stored in the entry; larger ones (up to 64 KiB, XATTR_SIZE_MAX) out of
 * line, in XATTR_DATA pieces of half a leaf at most, which the entry
 * names with a struct arb_xattr_ref (format.h).  Pieces are tree items:
 * node checksums, scrub and the copy-on-write of the tree cover them, and
 * freeing the inode deletes them with its other items.
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

/* ---- out-of-line values ------------------------------------------------ */

static void piece_key(struct arb_key *k, uint64_t ino, uint64_t id)
{
	k->objectid = ino;
	k->type = ARB_XATTR_DATA;
	k->offset = id;
}

/* the entry at s->off: its reference, when stored out of line */
static bool entry_ref(const struct fs_xslot *s, struct arb_xattr_ref *r)
{
	const struct arb_dir_entry *e =
		(const struct arb_dir_entry *)(s->buf + s->off);

	if (arb_dir_entry_d_type(e) != ARB_XATTR_OUT_OF_LINE)
		return false;
	memset(r, 0, sizeof(*r));
	memcpy(r, s->buf + s->off + sizeof(*e) + s->len,
	       arb_dir_entry_d_data_len(e) < sizeof(*r)
		       ? arb_dir_entry_d_data_len(e)
		       : sizeof(*r));
	return true;
}

/* the entry's value length, or -EUCLEAN for a bad reference */
static ssize_t entry_value_len(const struct fs_xslot *s)
{
	const struct arb_dir_entry *e =
		(const struct arb_dir_entry *)(s->buf + s->off);
	struct arb_xattr_ref r;

	if (!entry_ref(s, &r))
		return arb_dir_entry_d_data_len(e);
	if (arb_dir_entry_d_data_len(e) != sizeof(r) ||
	    arb_xattr_ref_x_len(&r) > ARB_XATTR_SIZE_MAX)
		return -EUCLEAN;
	return arb_xattr_ref_x_len(&r);
}

/* copy the entry's value (entry_value_len bytes) to out */
static int entry_value_read(struct arb_fs *fs, const struct fs_xslot *s,
			    uint8_t *out)
{
	const struct arb_dir_entry *e =
		(const struct arb_dir_entry *)(s->buf + s->off);
	struct arb_xattr_ref r;
	struct arb_key k;
	uint32_t len, pieces, max = arb_max_item_size(fs->vol);
	size_t done = 0;
	uint8_t *piece;
	int ret = 0;

	if (!entry_ref(s, &r)) {
		memcpy(out, s->buf + s->off + sizeof(*e) + s->len,
		       arb_dir_entry_d_data_len(e));
		return 0;
	}
	len = arb_xattr_ref_x_len(&r);
	pieces = arb_xattr_ref_x_pieces(&r);
	piece = malloc(max);
	if (!piece)
		return -ENOMEM;
	for (uint32_t i = 0; i < pieces && !ret; i++) {
		piece_key(&k, s->k.objectid, arb_xattr_ref_x_id(&r) + i);
		ret = arb_lookup_item(s->root, &k, piece, max);
		if (ret == -ENOENT || (ret >= 0 && (ret == 0 ||
						    (size_t)ret > len - done)))
			ret = -EUCLEAN;
		if (ret < 0)
			break;
		memcpy(out + done, piece, (size_t)ret);
		done += (size_t)ret;
		ret = 0;
	}
	if (!ret && done != len)
		ret = -EUCLEAN;
	if (ret == -EUCLEAN)
		arb_log(ARB_LOG_ERR, "inode %llu: xattr %.*s: bad value pieces",
			(unsigned long long)s->k.objectid, (int)s->len,
			s->name);
	free(piece);
	return ret;
}

/* delete the pieces of the entry at s->off, if it has any */
static int entry_pieces_del(struct arb_fs *fs, struct arb_txn *t,
			    const struct fs_xslot *s)
{
	struct arb_xattr_ref r;
	struct arb_key k;
	int ret;

	(void)fs;
	if (!entry_ref(s, &r))
		return 0;
	for (uint32_t i = 0; i < arb_xattr_ref_x_pieces(&r); i++) {
		piece_key(&k, s->k.objectid, arb_xattr_ref_x_id(&r) + i);
		ret = arb_del_item(t, s->root, &k);
		if (ret && ret != -ENOENT)
			return ret;
	}
	return 0;
}

/* inline: what arborfs stored before out-of-line values, when it fits */
static bool xslot_inline(const struct fs_xslot *s, size_t size)
{
	size_t rest = s->isize - (s->exists ? s->elen : 0);

	return size <= ARB_XATTR_INLINE_MAX &&
	       rest + fs_dent_size(s->len, size) <= s->max;
}

/* write value as pieces; fills r */
static int pieces_write(struct arb_fs *fs, struct arb_txn *t,
			const struct fs_xslot *s, const uint8_t *value,
			size_t size, struct arb_xattr_ref *r)
{
	/* half a leaf: two pieces share a leaf, and no piece needs a leaf
	 * of its own that a split could not make */
	size_t psize = arb_max_item_size(fs->vol) / 2, n;
	uint64_t id = s->k.offset & ~0xffffULL;
	struct arb_key k;
	int ret, tries;

	n = (size + psize - 1) / psize;
	if (n == 0 || n > ARB_XATTR_PIECES_MAX)
		return -E2BIG;
	/* another attribute's pieces (a name hash equal in its high 48
	 * bits) may hold the place: the next free multiple of 65536 */
	for (tries = 0; tries < 64; tries++, id += 0x10000) {
		piece_key(&k, s->k.objectid, id);
		if (!fs_item_exists(s->root, &k))
			break;
	}
	if (tries == 64)
		return -ENOSPC;
	for (size_t i = 0; i < n; i++) {
		size_t off = i * psize;
		size_t len = size - off < psize ? size - off : psize;

		piece_key(&k, s->k.objectid, id + i);
		ret = arb_insert_item(t, s->root, &k, value + off,
				      (uint32_t)len);
		if (ret)
			return ret;
	}
	arb_set_xattr_ref_x_id(r, id);
	arb_set_xattr_ref_x_len(r, (uint32_t)size);
	arb_set_xattr_ref_x_pieces(r, (uint32_t)n);
	/* in this transaction: no out-of-line value without the bit */
	arb_vol_set_features(fs->vol, 0, ARB_INCOMPAT_XATTR_DATA);
	return 0;
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
	s->root = fs_root_of(fs, ino);
	s->k.objectid = fs_obj(ino);
	s->k.type = ARB_XATTR_ITEM;
	s->k.offset = arb_name_hash(name, len);
	ret = arb_lookup_item(s->root, &s->k, s->buf, s->max);
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

	if (xslot_inline(s, size))
		return 0;
	/* out of line: the reference must fit */
	return rest + fs_dent_size(s->len, sizeof(struct arb_xattr_ref)) >
			       s->max
		       ? -ENOSPC
		       : 0;
}

int fs_xslot_store(struct arb_fs *fs, struct arb_txn *t, struct fs_xslot *s,
		   const void *value, size_t size)
{
	struct arb_xattr_ref r;
	const void *data = value;
	size_t nsize, dsize = size;
	uint8_t type = 0;
	int ret;

	if (s->exists) {
		ret = entry_pieces_del(fs, t, s);
		if (ret)
			return ret;
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
			return arb_del_item(t, s->root, &s->k);
		}
		return arb_update_item(t, s->root, &s->k, s->buf,
				       (uint32_t)s->isize);
	}
	if (!xslot_inline(s, size)) {
		if (s->isize + fs_dent_size(s->len, sizeof(r)) > s->max)
			return -ENOSPC;
		ret = pieces_write(fs, t, s, value, size, &r);
		if (ret)
			return ret;
		data = &r;
		dsize = sizeof(r);
		type = ARB_XATTR_OUT_OF_LINE;
	}
	nsize = s->isize + fs_dent_size(s->len, dsize);
	if (nsize > s->max)
		return -ENOSPC;
	fs_dent_fill(s->buf + s->isize, 0, t->transid, type, s->name, s->len,
		     data, dsize);
	if (s->item)
		ret = arb_update_item(t, s->root, &s->k, s->buf,
				      (uint32_t)nsize);
	else
		ret = arb_insert_item(t, s->root, &s->k, s->buf,
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
	ssize_t dl;
	int ret;

	ret = fs_xslot_load(fs, ino, name, strlen(name), &s);
	if (ret)
		return ret;
	if (!s.exists) {
		ret = -ENODATA;
		goto out;
	}
	dl = entry_value_len(&s);
	if (dl < 0) {
		ret = (int)dl;
		goto out;
	}
	*value = malloc(dl ? (size_t)dl : 1);
	if (!*value) {
		ret = -ENOMEM;
		goto out;
	}
	ret = entry_value_read(fs, &s, *value);
	if (ret) {
		free(*value);
		*value = NULL;
		goto out;
	}
	*size = (size_t)dl;
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
		ret = fs_op_begin(fs, &t, ino, size, 0);
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
	size_t len;
	ssize_t ret, dl;
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
	dl = entry_value_len(&s);
	if (dl < 0 || size == 0) {
		ret = dl;
	} else if (size < (size_t)dl) {
		ret = -ERANGE;
	} else {
		r = entry_value_read(fs, &s, value);
		ret = r ? r : dl;
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
	struct arb_key k = { fs_obj(ino), ARB_XATTR_ITEM, 0 };
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
	arb_iter_init(&it, fs_root_of(fs, ino));
	r = arb_iter_seek(&it, &k);
	while (r == 0) {
		const uint8_t *d = arb_iter_data(&it);
		uint32_t isize = arb_iter_size(&it);
		size_t pos = 0;

		arb_iter_key(&it, &k);
		if (k.objectid != fs_obj(ino) || k.type != ARB_XATTR_ITEM)
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
		ret = fs_op_begin(fs, &t, ino, 0, ARB_OP_RESERVE);
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
