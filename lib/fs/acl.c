/* SPDX-License-Identifier: MIT */
/*
 * acl.c - POSIX ACLs: the xattrs system.posix_acl_access and
 * system.posix_acl_default, kept consistent with the mode as a kernel
 * filesystem with posix_acl support does (fs/posix_acl.c).
 *
 * The kernel (FUSE_CAP_POSIX_ACL + default_permissions) enforces the ACLs
 * it reads from the xattrs; what it leaves to the filesystem is done here:
 *   - setting an access ACL sets the mode's permission bits from it, and an
 *     ACL that says no more than a mode (only USER_OBJ, GROUP_OBJ, OTHER) is
 *     not stored at all (posix_acl_update_mode / posix_acl_equiv_mode);
 *   - chmod rewrites the stored access ACL (posix_acl_chmod);
 *   - a new inode in a directory with a default ACL gets an access ACL
 *     masked by the requested mode, a new directory the default ACL too
 *     (posix_acl_create).  The umask, which applies only without a
 *     default ACL, is the caller's (struct arb_cred has no room for it:
 *     the FUSE daemon looks for the default ACL first, fuse/ops.c).
 * Not done here: clearing setgid when the caller setting an access ACL is
 * neither in the file's group nor privileged (the library has no
 * credentials on setxattr; the FUSE daemon does it, fuse/ops.c).
 *
 * Xattr format (little endian): u32 version (2), then entries
 * { u16 tag, u16 perm, u32 id }.  Stored ACLs are the normalized form of
 * what was given: id ACL_UNDEFINED_ID (-1) for the entries without one.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fs_int.h"

#define ACL_XATTR_VERSION 2
#define ACL_UNDEFINED_ID ((uint32_t)-1)
#define ACL_PERM_MASK 7u

static uint16_t get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}
static uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
	       ((uint32_t)p[3] << 24);
}
static void put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}
static void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

int fs_acl_type(const char *name)
{
	if (strcmp(name, FS_ACL_ACCESS) == 0)
		return FS_ACL_TYPE_ACCESS;
	if (strcmp(name, FS_ACL_DEFAULT) == 0)
		return FS_ACL_TYPE_DEFAULT;
	return 0;
}

/* posix_acl_valid: entries in canonical order, the required ones once */
static int acl_valid(const struct fs_acl *acl)
{
	enum { S_UOBJ, S_USER, S_GROUP, S_OTHER, S_DONE } state = S_UOBJ;
	bool needs_mask = false;

	for (size_t i = 0; i < acl->count; i++) {
		const struct fs_acl_entry *e = &acl->e[i];

		if (e->perm & ~ACL_PERM_MASK)
			return -EINVAL;
		switch (e->tag) {
		case FS_ACL_USER_OBJ:
			if (state != S_UOBJ)
				return -EINVAL;
			state = S_USER;
			break;
		case FS_ACL_USER:
			if (state != S_USER)
				return -EINVAL;
			needs_mask = true;
			break;
		case FS_ACL_GROUP_OBJ:
			if (state != S_USER)
				return -EINVAL;
			state = S_GROUP;
			break;
		case FS_ACL_GROUP:
			if (state != S_GROUP)
				return -EINVAL;
			needs_mask = true;
			break;
		case FS_ACL_MASK:
			if (state != S_GROUP)
				return -EINVAL;
			state = S_OTHER;
			break;
		case FS_ACL_OTHER:
			if (state != S_OTHER && (state != S_GROUP || needs_mask))
				return -EINVAL;
			state = S_DONE;
			break;
		default:
			return -EINVAL;
		}
	}
	return state == S_DONE ? 0 : -EINVAL;
}

int fs_acl_from_xattr(const void *value, size_t size, struct fs_acl **out)
{
	const uint8_t *p = value;
	struct fs_acl *acl;
	size_t count;
	int ret;

	*out = NULL;
	if (!value || size < 4 || (size - 4) % 8)
		return -EINVAL;
	if (get_le32(p) != ACL_XATTR_VERSION)
		return -EINVAL;
	count = (size - 4) / 8;
	if (count == 0)
		return 0; /* an empty ACL: none */
	acl = malloc(sizeof(*acl) + count * sizeof(acl->e[0]));
	if (!acl)
		return -ENOMEM;
	acl->count = count;
	for (size_t i = 0; i < count; i++) {
		const uint8_t *q = p + 4 + i * 8;
		struct fs_acl_entry *e = &acl->e[i];

		e->tag = get_le16(q);
		e->perm = get_le16(q + 2);
		e->id = get_le32(q + 4);
		if (e->tag != FS_ACL_USER && e->tag != FS_ACL_GROUP)
			e->id = ACL_UNDEFINED_ID;
	}
	ret = acl_valid(acl);
	if (ret) {
		free(acl);
		return ret;
	}
	*out = acl;
	return 0;
}

size_t fs_acl_xattr_size(const struct fs_acl *acl)
{
	return 4 + acl->count * 8;
}

void fs_acl_to_xattr(const struct fs_acl *acl, void *buf)
{
	uint8_t *p = buf;

	put_le32(p, ACL_XATTR_VERSION);
	for (size_t i = 0; i < acl->count; i++) {
		uint8_t *q = p + 4 + i * 8;

		put_le16(q, acl->e[i].tag);
		put_le16(q + 2, acl->e[i].perm);
		put_le32(q + 4, acl->e[i].id);
	}
}

/* serialized copy of acl (malloc'd) */
static int acl_to_value(const struct fs_acl *acl, void **val, size_t *size)
{
	*size = fs_acl_xattr_size(acl);
	*val = malloc(*size);
	if (!*val)
		return -ENOMEM;
	fs_acl_to_xattr(acl, *val);
	return 0;
}

int fs_acl_equiv_mode(const struct fs_acl *acl, uint32_t *mode)
{
	uint32_t m = 0;
	int not_equiv = 0;

	for (size_t i = 0; i < acl->count; i++) {
		const struct fs_acl_entry *e = &acl->e[i];

		switch (e->tag) {
		case FS_ACL_USER_OBJ:
			m |= (e->perm & ACL_PERM_MASK) << 6;
			break;
		case FS_ACL_GROUP_OBJ:
			m |= (e->perm & ACL_PERM_MASK) << 3;
			break;
		case FS_ACL_OTHER:
			m |= e->perm & ACL_PERM_MASK;
			break;
		case FS_ACL_MASK:
			/* the mask is what the group bits show */
			m = (m & ~(uint32_t)S_IRWXG) |
			    ((e->perm & ACL_PERM_MASK) << 3);
			not_equiv = 1;
			break;
		case FS_ACL_USER:
		case FS_ACL_GROUP:
			not_equiv = 1;
			break;
		default:
			return -EINVAL;
		}
	}
	*mode = (*mode & ~(uint32_t)0777) | m;
	return not_equiv;
}

void fs_acl_chmod(struct fs_acl *acl, uint32_t mode)
{
	struct fs_acl_entry *group_obj = NULL, *mask = NULL;

	for (size_t i = 0; i < acl->count; i++) {
		struct fs_acl_entry *e = &acl->e[i];

		switch (e->tag) {
		case FS_ACL_USER_OBJ:
			e->perm = (uint16_t)((mode & S_IRWXU) >> 6);
			break;
		case FS_ACL_GROUP_OBJ:
			group_obj = e;
			break;
		case FS_ACL_MASK:
			mask = e;
			break;
		case FS_ACL_OTHER:
			e->perm = (uint16_t)(mode & S_IRWXO);
			break;
		default:
			break;
		}
	}
	if (mask)
		mask->perm = (uint16_t)((mode & S_IRWXG) >> 3);
	else if (group_obj)
		group_obj->perm = (uint16_t)((mode & S_IRWXG) >> 3);
}

int fs_acl_create_masq(struct fs_acl *acl, uint32_t *mode_p)
{
	struct fs_acl_entry *group_obj = NULL, *mask = NULL;
	uint32_t mode = *mode_p;
	int not_equiv = 0;

	for (size_t i = 0; i < acl->count; i++) {
		struct fs_acl_entry *e = &acl->e[i];

		switch (e->tag) {
		case FS_ACL_USER_OBJ:
			e->perm &= (uint16_t)((mode >> 6) | ~S_IRWXO);
			mode &= ((uint32_t)e->perm << 6) | ~(uint32_t)S_IRWXU;
			break;
		case FS_ACL_USER:
		case FS_ACL_GROUP:
			not_equiv = 1;
			break;
		case FS_ACL_GROUP_OBJ:
			group_obj = e;
			break;
		case FS_ACL_OTHER:
			e->perm &= (uint16_t)(mode | ~S_IRWXO);
			mode &= (uint32_t)e->perm | ~(uint32_t)S_IRWXO;
			break;
		case FS_ACL_MASK:
			mask = e;
			not_equiv = 1;
			break;
		default:
			return -EINVAL;
		}
	}
	if (!mask)
		mask = group_obj;
	if (!mask)
		return -EINVAL;
	mask->perm &= (uint16_t)((mode >> 3) | ~S_IRWXO);
	mode &= ((uint32_t)mask->perm << 3) | ~(uint32_t)S_IRWXG;
	*mode_p = mode;
	return not_equiv;
}

/* ---- the operations ----------------------------------------------------- */

/* The stored ACL of type (NULL if none).  A stored value that does not
 * parse is reported as -EUCLEAN. */
static int acl_load(struct arb_fs *fs, uint64_t ino, const char *name,
		    struct fs_acl **out)
{
	void *val = NULL;
	size_t size = 0;
	int ret;

	*out = NULL;
	ret = fs_xattr_get(fs, ino, name, &val, &size);
	if (ret == -ENODATA)
		return 0;
	if (ret)
		return ret;
	ret = fs_acl_from_xattr(val, size, out);
	free(val);
	if (ret == -EINVAL) {
		arb_log(ARB_LOG_WARN, "inode %llu: malformed %s ignored",
			(unsigned long long)ino, name);
		return -EUCLEAN;
	}
	return ret;
}

int fs_acl_chmod_prepare(struct arb_fs *fs, const struct arb_inode *in,
			 uint32_t mode, void **val, size_t *size)
{
	struct fs_acl *acl;
	int ret;

	*val = NULL;
	*size = 0;
	if (S_ISLNK(in->mode))
		return 0;
	ret = acl_load(fs, in->ino, FS_ACL_ACCESS, &acl);
	if (ret == -EUCLEAN)
		return 0; /* leave a damaged ACL alone: chmod still works */
	if (ret || !acl)
		return ret;
	fs_acl_chmod(acl, mode);
	ret = acl_to_value(acl, val, size);
	free(acl);
	return ret;
}

int fs_acl_inherit_prepare(struct arb_fs *fs, const struct arb_inode *dir,
			   uint32_t *mode, struct fs_acl_new *out)
{
	struct fs_acl *def, *acc = NULL;
	size_t need;
	int ret;

	memset(out, 0, sizeof(*out));
	if (S_ISLNK(*mode))
		return 0;
	ret = acl_load(fs, dir->ino, FS_ACL_DEFAULT, &def);
	if (ret == -EUCLEAN)
		ret = 0, def = NULL; /* as if there were none */
	if (ret)
		return ret;
	if (!def)
		return 0; /* the caller applied the umask */
	if (S_ISDIR(*mode)) {
		ret = acl_to_value(def, &out->def, &out->def_size);
		if (ret)
			goto out;
	}
	need = sizeof(*acc) + def->count * sizeof(def->e[0]);
	acc = malloc(need);
	if (!acc) {
		ret = -ENOMEM;
		goto out;
	}
	memcpy(acc, def, need);
	ret = fs_acl_create_masq(acc, mode);
	if (ret < 0)
		goto out;
	if (ret == 1) {
		ret = acl_to_value(acc, &out->acc, &out->acc_size);
		if (ret)
			goto out;
	}
	ret = 0;
	/* both go into a new inode: they fit, unless their names share an
	 * item (a hash collision) that would not */
	if (out->acc && out->def &&
	    arb_name_hash(FS_ACL_ACCESS, strlen(FS_ACL_ACCESS)) ==
		    arb_name_hash(FS_ACL_DEFAULT, strlen(FS_ACL_DEFAULT)) &&
	    fs_dent_size(strlen(FS_ACL_ACCESS), out->acc_size) +
			    fs_dent_size(strlen(FS_ACL_DEFAULT),
					 out->def_size) >
		    arb_max_item_size(fs->vol))
		ret = -ENOSPC;
out:
	free(def);
	free(acc);
	if (ret)
		fs_acl_new_free(out);
	return ret;
}

int fs_acl_inherit_apply(struct arb_fs *fs, struct arb_txn *t, uint64_t ino,
			 const struct fs_acl_new *n)
{
	int ret = 0;

	if (n->acc)
		ret = fs_xattr_put(fs, t, ino, FS_ACL_ACCESS, n->acc,
				   n->acc_size);
	if (!ret && n->def)
		ret = fs_xattr_put(fs, t, ino, FS_ACL_DEFAULT, n->def,
				   n->def_size);
	return ret;
}

void fs_acl_new_free(struct fs_acl_new *n)
{
	free(n->acc);
	free(n->def);
	memset(n, 0, sizeof(*n));
}

int fs_acl_setxattr(struct arb_fs *fs, uint64_t ino, int type,
		    const void *value, size_t size)
{
	const char *name = type == FS_ACL_TYPE_ACCESS ? FS_ACL_ACCESS
						      : FS_ACL_DEFAULT;
	struct fs_xslot slot;
	struct fs_acl *acl = NULL;
	struct arb_inode in;
	struct arb_txn *t;
	void *val = NULL;
	size_t vsize = 0;
	uint32_t mode;
	int ret;

	ret = fs_acl_from_xattr(value, size, &acl);
	if (ret)
		return ret;
	fs_lock(fs);
	ret = fs_inode_read(fs, ino, &in);
	if (!ret)
		ret = fs_iflags_may_setxattr(&in);
	if (ret)
		goto out;
	if (S_ISLNK(in.mode)) {
		ret = -EOPNOTSUPP;
		goto out;
	}
	mode = in.mode;
	if (type == FS_ACL_TYPE_DEFAULT) {
		if (!S_ISDIR(in.mode)) {
			/* as set_posix_acl(): removing one is a no-op */
			ret = acl ? -EACCES : 0;
			goto out;
		}
	} else if (acl) {
		ret = fs_acl_equiv_mode(acl, &mode);
		if (ret < 0)
			goto out;
		if (ret == 0) {
			/* the mode says it all */
			free(acl);
			acl = NULL;
		}
	}
	if (acl) {
		ret = acl_to_value(acl, &val, &vsize);
		if (ret)
			goto out;
	}
	if (fs->readonly) {
		ret = -EROFS;
		goto out;
	}
	ret = fs_xslot_load(fs, ino, name, strlen(name), &slot);
	if (ret)
		goto out;
	if (val)
		ret = fs_xslot_fits(&slot, vsize);
	if (!ret)
		ret = fs_op_begin(fs, &t, ino, vsize, val ? 0 : ARB_OP_RESERVE);
	if (ret) {
		fs_xslot_release(&slot);
		goto out;
	}
	ret = fs_xslot_store(fs, t, &slot, val, vsize);
	fs_xslot_release(&slot);
	if (!ret) {
		in.mode = mode;
		fs_now(&in.ctime);
		ret = fs_inode_write(fs, t, &in);
	}
	ret = fs_op_end(fs, t, ret);
out:
	fs_unlock(fs);
	free(val);
	free(acl);
	return ret;
}
