/* SPDX-License-Identifier: MIT */
/*
 * dir.c - directories and names.
 *
 * A link "name" of inode C in directory D is three items:
 *   (D, DIR_ITEM, hash(name))  entry {C, type, name}, shared on collisions
 *   (D, DIR_INDEX, seq)        entry {C, type, name}, seq from D's i_seq
 *   (C, INODE_REF, D)          entry {seq, name}, one per name of C in D
 * A directory's i_size is twice the sum of its entries' name lengths (as
 * btrfs: each name is stored twice); its nlink is 2 + its subdirectories.
 * readdir offsets: see rd_cookie() below.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs_int.h"
#include "items/items.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif
#ifndef RENAME_WHITEOUT
#define RENAME_WHITEOUT (1 << 2)
#endif

/* ---- entries ----------------------------------------------------------- */

size_t fs_dent_size(size_t name_len, size_t data_len)
{
	return sizeof(struct arb_dir_entry) + name_len + data_len;
}

void fs_dent_fill(uint8_t *p, uint64_t ino, uint64_t transid, uint8_t type,
		  const char *name, size_t name_len, const void *data,
		  size_t data_len)
{
	struct arb_dir_entry *e = (struct arb_dir_entry *)p;

	arb_set_dir_entry_d_ino(e, ino);
	arb_set_dir_entry_d_transid(e, transid);
	arb_set_dir_entry_d_data_len(e, (uint16_t)data_len);
	arb_set_dir_entry_d_name_len(e, (uint16_t)name_len);
	arb_set_dir_entry_d_type(e, type);
	memcpy(p + sizeof(*e), name, name_len);
	if (data_len)
		memcpy(p + sizeof(*e) + name_len, data, data_len);
}

int fs_dent_find(const uint8_t *buf, size_t size, const char *name,
		 size_t name_len, size_t *off, size_t *len)
{
	return arb_dent_find(buf, size, name, name_len, off, len);
}

int fs_item_append(struct arb_txn *t, struct arb_root *root,
		   const struct arb_key *key, const void *entry, size_t elen)
{
	uint32_t max = arb_max_item_size(t->vol);
	uint8_t *buf;
	int ret;

	buf = malloc(max);
	if (!buf)
		return -ENOMEM;
	ret = arb_lookup_item(root, key, buf, max);
	if (ret == -ENOENT) {
		ret = arb_insert_item(t, root, key, entry, (uint32_t)elen);
	} else if (ret >= 0) {
		size_t old = (size_t)ret;
		if (old + elen > max) {
			ret = -EMLINK;
		} else {
			memcpy(buf + old, entry, elen);
			ret = arb_update_item(t, root, key, buf,
					      (uint32_t)(old + elen));
		}
	}
	free(buf);
	return ret;
}

int fs_item_cut(struct arb_txn *t, struct arb_root *root,
		const struct arb_key *key, size_t off, size_t len)
{
	uint32_t max = arb_max_item_size(t->vol);
	uint8_t *buf;
	int ret;

	buf = malloc(max);
	if (!buf)
		return -ENOMEM;
	ret = arb_lookup_item(root, key, buf, max);
	if (ret >= 0) {
		size_t size = (size_t)ret;
		if (off + len > size) {
			ret = -EUCLEAN;
		} else if (len == size) {
			ret = arb_del_item(t, root, key);
		} else {
			memmove(buf + off, buf + off + len, size - off - len);
			ret = arb_update_item(t, root, key, buf,
					      (uint32_t)(size - len));
		}
	}
	free(buf);
	return ret;
}

/* ---- INODE_REF entries ------------------------------------------------- */

/* find name in the INODE_REF item buf: 0 (offset, length, index) */
static int iref_find(const uint8_t *buf, size_t size, const char *name,
		     size_t name_len, size_t *off, size_t *len, uint64_t *index)
{
	struct arb_iref r;
	int ret = arb_iref_find(buf, size, name, name_len, &r);

	if (ret)
		return ret;
	*off = r.off;
	*len = r.len;
	if (index)
		*index = r.index;
	return 0;
}

/* would one more entry of name_len fit C's INODE_REF item for parent D? */
static bool iref_has_room(struct arb_fs *fs, uint64_t ino, uint64_t parent,
			  size_t name_len)
{
	struct arb_key k = { fs_obj(ino), ARB_INODE_REF, fs_obj(parent) };
	uint32_t max = arb_max_item_size(fs->vol);
	uint8_t *buf = malloc(max);
	int ret;

	if (!buf)
		return false;
	ret = arb_lookup_item(fs_root_of(fs, ino), &k, buf, max);
	free(buf);
	if (ret < 0)
		return true;
	/* keep half a leaf for the rest of the leaf's life */
	return (size_t)ret + sizeof(struct arb_inode_ref) + name_len <= max / 2;
}

/* ---- names ------------------------------------------------------------- */

int fs_check_name(const char *name, size_t *len)
{
	size_t n = strnlen(name, ARB_NAME_MAX + 1);

	if (n == 0)
		return -ENOENT;
	if (n > ARB_NAME_MAX)
		return -ENAMETOOLONG;
	if (memchr(name, '/', n))
		return -EINVAL;
	*len = n;
	return 0;
}

static bool is_dot(const char *name, size_t len)
{
	return (len == 1 && name[0] == '.') ||
	       (len == 2 && name[0] == '.' && name[1] == '.');
}

static uint8_t mode_dt(uint32_t mode)
{
	return (uint8_t)((mode & S_IFMT) >> 12);
}

int fs_dir_find(struct arb_fs *fs, uint64_t dir, const char *name, size_t len,
		uint64_t *ino, uint64_t *index, uint8_t *type)
{
	struct arb_key k = { fs_obj(dir), ARB_DIR_ITEM,
			     arb_name_hash(name, len) };
	struct fs_tree *tr = fs_tree_of(fs, dir);
	uint32_t max = arb_max_item_size(fs->vol);
	const struct arb_dir_entry *e;
	size_t off, elen;
	const char *why;
	uint8_t *buf;
	int ret;

	buf = malloc(max);
	if (!buf)
		return -ENOMEM;
	ret = arb_lookup_item(tr->root, &k, buf, max);
	if (ret < 0)
		goto out;
	if (arb_item_validate(&k, buf, (uint32_t)ret, &why)) {
		arb_log(ARB_LOG_ERR, "dir %llu: bad dir item %llu: %s",
			(unsigned long long)dir, (unsigned long long)k.offset,
			why);
		ret = -EUCLEAN;
		goto out;
	}
	ret = fs_dent_find(buf, (size_t)ret, name, len, &off, &elen);
	if (ret)
		goto out;
	e = (const struct arb_dir_entry *)(buf + off);
	if (arb_dir_entry_d_type(e) & ARB_DENT_SUBVOL) {
		/* a subvolume: its root directory, in its own tree */
		uint64_t id = arb_dir_entry_d_ino(e), seq;

		if (type)
			*type = arb_dir_entry_d_type(e) & ~ARB_DENT_SUBVOL;
		ret = fs_subvol_resolve(fs, tr, fs_obj(dir), id, name, len,
					ino, &seq);
		if (ret == -ENOENT)
			ret = -ESTALE;
		if (!ret && index)
			*index = seq;
		goto out;
	}
	*ino = fs_ino(tr, arb_dir_entry_d_ino(e));
	if (type)
		*type = arb_dir_entry_d_type(e);
	if (index) {
		struct arb_key rk = { fs_obj(*ino), ARB_INODE_REF,
				      fs_obj(dir) };
		ret = arb_lookup_item(tr->root, &rk, buf, max);
		if (ret < 0) {
			arb_log(ARB_LOG_ERR,
				"dir %llu entry '%.*s' -> %llu has no inode ref",
				(unsigned long long)dir, (int)len, name,
				(unsigned long long)*ino);
			ret = ret == -ENOENT ? -EUCLEAN : ret;
			goto out;
		}
		ret = iref_find(buf, (size_t)ret, name, len, &off, &elen,
				index);
		if (ret == -ENOENT)
			ret = -EUCLEAN;
	}
out:
	free(buf);
	return ret;
}

int fs_dir_parent(struct arb_fs *fs, uint64_t dir, uint64_t *parent)
{
	struct arb_key k = { fs_obj(dir), ARB_INODE_REF, 0 };
	struct fs_tree *tr = fs_tree_of(fs, dir);
	int ret;

	if (dir == ARB_ROOT_INO) {
		*parent = dir;
		return 0;
	}
	if (fs_obj(dir) == ARB_FIRST_INO && tr->slot != 0)
		return fs_subvol_parent(fs, tr, parent);
	ret = arb_next_key_of(tr->root, &k);
	if (ret < 0)
		return ret;
	if (ret == 1)
		return -ENOENT; /* an unlinked directory */
	*parent = fs_ino(tr, k.offset);
	return 0;
}

/* is anc equal to dir or one of its ancestors? */
static int dir_is_under(struct arb_fs *fs, uint64_t dir, uint64_t anc,
			bool *under)
{
	unsigned depth = 0;
	int ret;

	*under = false;
	for (;;) {
		uint64_t parent;
		if (dir == anc) {
			*under = true;
			return 0;
		}
		if (dir == ARB_ROOT_INO)
			return 0;
		ret = fs_dir_parent(fs, dir, &parent);
		if (ret)
			return ret == -ENOENT ? 0 : ret;
		dir = parent;
		if (++depth > 1000000)
			return -EUCLEAN;
	}
}

/*
 * Empty: no entry but stale subvolume links (copies of nested links a
 * snapshot took along, fs_subvol_resolve): those do not count, and go
 * with the directory's items.
 */
int fs_dir_is_empty(struct arb_fs *fs, uint64_t dir, bool *empty)
{
	struct fs_tree *tr = fs_tree_of(fs, dir);
	struct arb_key k = { fs_obj(dir), ARB_DIR_INDEX, 0 };
	char name[ARB_NAME_MAX];
	struct arb_iter it;
	uint64_t id = 0, ino;
	size_t nl = 0;
	int ret;

	*empty = true;
	for (;;) {
		const struct arb_dir_entry *e;

		arb_iter_init(&it, tr->root);
		ret = arb_iter_seek(&it, &k);
		if (ret == 0)
			arb_iter_key(&it, &k);
		if (ret == 0 && k.objectid == fs_obj(dir) &&
		    k.type == ARB_DIR_INDEX) {
			e = arb_iter_data(&it);
			if (arb_iter_size(&it) < sizeof(*e) ||
			    (nl = arb_dir_entry_d_name_len(e)) >
				    ARB_NAME_MAX ||
			    sizeof(*e) + nl > arb_iter_size(&it)) {
				ret = -EUCLEAN;
			} else if (!(arb_dir_entry_d_type(e) &
				     ARB_DENT_SUBVOL)) {
				*empty = false;
			} else {
				id = arb_dir_entry_d_ino(e);
				memcpy(name, e + 1, nl);
				ret = 2; /* look the link up unlocked */
			}
		} else if (ret == 0) {
			ret = 1;
		}
		arb_iter_release(&it);
		if (ret < 0 || ret == 1 || !*empty)
			return ret < 0 ? ret : 0;
		ret = fs_subvol_resolve(fs, tr, fs_obj(dir), id, name, nl,
					&ino, NULL);
		if (ret == 0) {
			*empty = false;
			return 0;
		}
		if (ret != -ENOENT)
			return ret;
		k.offset++;
	}
}

int fs_dent_add(struct arb_fs *fs, struct arb_txn *t, struct arb_inode *din,
		const char *name, size_t len, uint64_t raw_ino, uint8_t type,
		const struct timespec *now, uint64_t *index)
{
	size_t elen = fs_dent_size(len, 0);
	uint8_t ent[sizeof(struct arb_dir_entry) + ARB_NAME_MAX];
	struct arb_root *root = fs_root_of(fs, din->ino);
	struct arb_key k;
	int ret;

	*index = din->seq < 2 ? 2 : din->seq;
	din->seq = *index + 1;
	fs_dent_fill(ent, raw_ino, t->transid, type, name, len, NULL, 0);
	k.objectid = fs_obj(din->ino);
	k.type = ARB_DIR_ITEM;
	k.offset = arb_name_hash(name, len);
	ret = fs_item_append(t, root, &k, ent, elen);
	if (ret)
		return ret;
	k.type = ARB_DIR_INDEX;
	k.offset = *index;
	ret = arb_insert_item(t, root, &k, ent, (uint32_t)elen);
	if (ret)
		return ret;
	din->size += 2 * len;
	din->mtime = din->ctime = *now;
	return 0;
}

/* Add the three items of a link; updates din (size, seq, times), which
 * the caller writes. */
int fs_link_add(struct arb_fs *fs, struct arb_txn *t, struct arb_inode *din,
		const char *name, size_t len, uint64_t ino, uint8_t type,
		const struct timespec *now)
{
	uint8_t ref[sizeof(struct arb_inode_ref) + ARB_NAME_MAX];
	struct arb_key k;
	uint64_t index;
	int ret;

	/* one tree: links across trees are refused before (EXDEV) */
	ARB_ASSERT(fs_tree_of(fs, ino) == fs_tree_of(fs, din->ino));
	ret = fs_dent_add(fs, t, din, name, len, fs_obj(ino), type, now,
			  &index);
	if (ret)
		return ret;
	arb_set_inode_ref_r_index((struct arb_inode_ref *)ref, index);
	arb_set_inode_ref_r_name_len((struct arb_inode_ref *)ref,
				     (uint16_t)len);
	memcpy(ref + sizeof(struct arb_inode_ref), name, len);
	k.objectid = fs_obj(ino);
	k.type = ARB_INODE_REF;
	k.offset = fs_obj(din->ino);
	return fs_item_append(t, fs_root_of(fs, din->ino), &k, ref,
			      sizeof(struct arb_inode_ref) + len);
}

int fs_dent_del(struct arb_fs *fs, struct arb_txn *t, struct arb_inode *din,
		const char *name, size_t len, uint64_t index,
		const struct timespec *now)
{
	uint32_t max = arb_max_item_size(fs->vol);
	struct arb_root *root = fs_root_of(fs, din->ino);
	struct arb_key k;
	size_t off, elen;
	uint8_t *buf;
	int ret;

	k.objectid = fs_obj(din->ino);
	k.type = ARB_DIR_INDEX;
	k.offset = index;
	ret = arb_del_item(t, root, &k);
	if (ret)
		return ret;
	buf = malloc(max);
	if (!buf)
		return -ENOMEM;
	k.type = ARB_DIR_ITEM;
	k.offset = arb_name_hash(name, len);
	ret = arb_lookup_item(root, &k, buf, max);
	if (ret >= 0) {
		ret = fs_dent_find(buf, (size_t)ret, name, len, &off, &elen);
		if (ret == -ENOENT)
			ret = -EUCLEAN;
	}
	if (!ret)
		ret = fs_item_cut(t, root, &k, off, elen);
	free(buf);
	if (ret)
		return ret;
	din->size = din->size >= 2 * len ? din->size - 2 * len : 0;
	din->mtime = din->ctime = *now;
	return 0;
}

/* Remove the three items of a link. */
static int link_del(struct arb_fs *fs, struct arb_txn *t, struct arb_inode *din,
		    const char *name, size_t len, uint64_t ino,
		    const struct timespec *now)
{
	uint32_t max = arb_max_item_size(fs->vol);
	struct arb_key k;
	size_t off, elen;
	uint64_t index;
	uint8_t *buf;
	struct arb_root *root = fs_root_of(fs, din->ino);
	int ret;

	buf = malloc(max);
	if (!buf)
		return -ENOMEM;
	/* INODE_REF first: it gives the index */
	k.objectid = fs_obj(ino);
	k.type = ARB_INODE_REF;
	k.offset = fs_obj(din->ino);
	ret = arb_lookup_item(root, &k, buf, max);
	if (ret < 0)
		goto out;
	ret = iref_find(buf, (size_t)ret, name, len, &off, &elen, &index);
	if (ret)
		goto out_corrupt;
	ret = fs_item_cut(t, root, &k, off, elen);
	if (ret)
		goto out;
	ret = fs_dent_del(fs, t, din, name, len, index, now);
	if (ret == -EUCLEAN || ret == -ENOENT)
		goto out_corrupt;
	goto out;
out_corrupt:
	arb_log(ARB_LOG_ERR, "dir %llu: link '%.*s' -> %llu is incomplete",
		(unsigned long long)din->ino, (int)len, name,
		(unsigned long long)ino);
	ret = -EUCLEAN;
out:
	free(buf);
	return ret;
}

/* ---- lookup, readdir --------------------------------------------------- */

int arb_fs_lookup(struct arb_fs *fs, uint64_t dir, const char *name,
		  struct arb_stat *st)
{
	struct arb_inode din, in;
	uint64_t ino;
	size_t len;
	int ret;

	ret = fs_check_name(name, &len);
	if (ret)
		return ret;
	fs_lock(fs);
	ret = fs_inode_read(fs, dir, &din);
	if (ret)
		goto out;
	if (!S_ISDIR(din.mode)) {
		ret = -ENOTDIR;
		goto out;
	}
	if (len == 1 && name[0] == '.')
		ino = dir;
	else if (len == 2 && name[0] == '.' && name[1] == '.')
		ret = fs_dir_parent(fs, dir, &ino);
	else
		ret = fs_dir_find(fs, dir, name, len, &ino, NULL, NULL);
	if (ret == -ESTALE)
		ret = -ENOENT; /* a stale subvolume link is no entry */
	if (ret)
		goto out;
	ret = fs_inode_read(fs, ino, &in);
	if (ret == -ENOENT) {
		arb_log(ARB_LOG_ERR, "dir %llu entry '%s' -> missing inode %llu",
			(unsigned long long)dir, name,
			(unsigned long long)ino);
		ret = -EUCLEAN;
	}
	if (!ret && st)
		fs_inode_to_stat(fs, &in, st);
out:
	fs_unlock(fs);
	return ret;
}

/*
 * readdir offsets ("cookies"), which the caller hands back to go on:
 *
 *   0                   the start of a listing;
 *   bound << 31 | pos   pos: what comes next (0 ".", 1 "..", then the
 *                       first entry whose DIR_INDEX is >= pos), and bound:
 *                       the directory's i_seq when the listing started
 *                       (every DIR_INDEX then was below it; 2 <= bound <
 *                       2^31, 1 <= pos <= bound);
 *   1 << 62 | pos       the same without a bound, for a directory whose
 *                       i_seq passed 2^31 links.
 *
 * A rename gives the new name a new DIR_INDEX, at the top; a listing
 * whose reader renames entries away and back would meet them again and
 * never end.  So a listing stops at the bound fixed by its first call,
 * and names linked after it started are not listed (POSIX leaves them
 * unspecified), as btrfs ends each open directory at the index that was
 * last when it was opened.  The bound lives in the cookie because the
 * daemon keeps no state per open directory (no OPENDIR requests): each
 * call decodes it from the offset it was given.  Offsets stay valid
 * whatever is created or removed meanwhile (telldir/seekdir), and an
 * entry that exists throughout a listing is listed exactly once.  An
 * offset that no listing can have handed out ends the listing.
 */
#define RD_POS_BITS 31
#define RD_POS_MASK ((1ULL << RD_POS_BITS) - 1)
#define RD_UNBOUNDED (1ULL << 62)

static uint64_t rd_cookie(uint64_t bound, uint64_t pos)
{
	return bound == UINT64_MAX ? RD_UNBOUNDED | pos
				   : bound << RD_POS_BITS | pos;
}

/* false for an offset no listing hands out */
static bool rd_cookie_decode(uint64_t off, uint64_t *bound, uint64_t *pos)
{
	if (off & RD_UNBOUNDED) {
		*bound = UINT64_MAX;
		*pos = off & ~RD_UNBOUNDED;
		return *pos >= 1 && *pos < RD_UNBOUNDED;
	}
	*bound = off >> RD_POS_BITS;
	*pos = off & RD_POS_MASK;
	return *bound >= 2 && *pos >= 1 && *pos <= *bound;
}

struct rd_ent {
	uint64_t ino, next_pos;
	uint8_t type;
	bool subvol; /* ino is the tree id of a subvolume link */
	char name[ARB_NAME_MAX + 1];
};

#define RD_BATCH 64
/* leaves hinted when a listing starts (1 MiB with 16 KiB nodes) */
#define RD_PREFETCH_LEAVES 64

int arb_fs_readdir(struct arb_fs *fs, uint64_t dir, uint64_t off, bool plus,
		   arb_filldir_t fill, void *ctx)
{
	struct arb_inode din, in;
	struct arb_stat st;
	struct rd_ent *ents;
	struct arb_iter it;
	struct fs_tree *tr;
	uint64_t bound, pos;
	int ret, n, i;

	ents = malloc(sizeof(*ents) * RD_BATCH);
	if (!ents)
		return -ENOMEM;
	fs_lock(fs);
	ret = fs_inode_read(fs, dir, &din);
	if (ret)
		goto out;
	tr = fs_tree_of(fs, dir);
	if (!S_ISDIR(din.mode)) {
		ret = -ENOTDIR;
		goto out;
	}
	if (off == 0) {
		/* what exists now is below i_seq (fs_link_add) */
		bound = din.seq < 2 ? 2 : din.seq;
		if (bound > RD_POS_MASK)
			bound = UINT64_MAX;
		pos = 0;
	} else if (!rd_cookie_decode(off, &bound, &pos)) {
		ret = 0;
		goto out;
	}
	/* a listing from its start: its first leaves are read together (the
	 * scan's own readahead takes over after them) */
	if (off == 0) {
		struct arb_key lo = { fs_obj(dir), ARB_DIR_INDEX, 0 };
		struct arb_key hi = { fs_obj(dir), ARB_DIR_INDEX, UINT64_MAX };

		arb_prefetch_range(tr->root, &lo, &hi, RD_PREFETCH_LEAVES);
	}
	/* "." and ".." */
	while (pos < 2) {
		uint64_t ino = dir;
		if (pos == 1) {
			ret = fs_dir_parent(fs, dir, &ino);
			if (ret == -ENOENT)
				ino = dir; /* removed directory */
			else if (ret)
				goto out;
		}
		ret = fs_inode_read(fs, ino, &in);
		if (ret)
			goto out;
		fs_inode_to_stat(fs, &in, &st);
		if (!plus) {
			uint32_t mode = st.mode;
			memset(&st, 0, sizeof(st));
			st.ino = ino;
			st.mode = mode & S_IFMT;
		}
		if (fill(ctx, pos ? ".." : ".", &st, rd_cookie(bound, pos + 1))) {
			ret = 0;
			goto out;
		}
		pos++;
	}
	for (;;) {
		struct arb_key k = { fs_obj(dir), ARB_DIR_INDEX, pos };

		/* collect a batch, then call fill without holding a path */
		n = 0;
		arb_iter_init(&it, tr->root);
		ret = arb_iter_seek(&it, &k);
		while (ret == 0 && n < RD_BATCH) {
			const struct arb_dir_entry *e;
			uint32_t size = arb_iter_size(&it);
			const char *why;
			size_t nl;

			arb_iter_key(&it, &k);
			/* past the end, or linked after the listing began */
			if (k.objectid != fs_obj(dir) || k.type != ARB_DIR_INDEX ||
			    k.offset >= bound) {
				ret = 1;
				break;
			}
			e = arb_iter_data(&it);
			if (arb_item_validate(&k, e, size, &why)) {
				arb_log(ARB_LOG_ERR,
					"dir %llu: bad DIR_INDEX %llu: %s",
					(unsigned long long)dir,
					(unsigned long long)k.offset, why);
				ret = -EUCLEAN;
				break;
			}
			nl = arb_dir_entry_d_name_len(e);
			ents[n].ino = fs_ino(tr, arb_dir_entry_d_ino(e));
			ents[n].type = arb_dir_entry_d_type(e);
			/* a subvolume link: resolved below, unlocked */
			ents[n].subvol = ents[n].type & ARB_DENT_SUBVOL;
			if (ents[n].subvol) {
				ents[n].ino = arb_dir_entry_d_ino(e);
				ents[n].type &= ~ARB_DENT_SUBVOL;
			}
			memcpy(ents[n].name, (const char *)(e + 1), nl);
			ents[n].name[nl] = 0;
			ents[n].next_pos = k.offset + 1;
			n++;
			ret = arb_iter_next(&it);
		}
		arb_iter_release(&it);
		if (ret < 0)
			goto out;
		/* the inodes of a directory are scattered when it grew with
		 * others (untar): ask for all their leaves at once, then
		 * read them one by one */
		for (i = 0; plus && i < n; i++)
			if (!ents[i].subvol)
				fs_inode_prefetch(fs, ents[i].ino);
		for (i = 0; i < n; i++) {
			if (ents[i].subvol) {
				ret = fs_subvol_resolve(
					fs, tr, fs_obj(dir), ents[i].ino,
					ents[i].name, strlen(ents[i].name),
					&ents[i].ino, NULL);
				if (ret == -ENOENT)
					continue; /* a stale link: not shown */
				if (ret)
					goto out;
			}
			if (plus) {
				ret = fs_inode_read(fs, ents[i].ino, &in);
				if (ret)
					goto out;
				fs_inode_to_stat(fs, &in, &st);
			} else {
				memset(&st, 0, sizeof(st));
				st.ino = ents[i].ino;
				st.mode = (uint32_t)ents[i].type << 12;
			}
			if (fill(ctx, ents[i].name, &st,
				 rd_cookie(bound, ents[i].next_pos))) {
				ret = 0;
				goto out;
			}
			pos = ents[i].next_pos;
		}
		if (n < RD_BATCH) {
			ret = 0;
			break;
		}
	}
out:
	fs_unlock(fs);
	free(ents);
	return ret;
}

/* ---- create ------------------------------------------------------------ */

/*
 * A new name may go into dir: dir is a live directory (read into *din)
 * and has no entry name.  0, -ENOTDIR, -ENOENT, -EEXIST or an error.
 */
int fs_new_name_ok(struct arb_fs *fs, uint64_t dir, const char *name,
		       size_t len, struct arb_inode *din)
{
	uint64_t ino;
	int ret = fs_inode_read(fs, dir, din);

	if (ret)
		return ret;
	if (!S_ISDIR(din->mode))
		return -ENOTDIR;
	if (din->nlink == 0)
		return -ENOENT;
	ret = fs_dir_find(fs, dir, name, len, &ino, NULL, NULL);
	/* a stale subvolume link holds its name too */
	if (ret != -ENOENT)
		return ret && ret != -ESTALE ? ret : -EEXIST;
	return 0;
}

static int create_common(struct arb_fs *fs, uint64_t dir, const char *name,
			 uint32_t mode, uint64_t rdev, const char *target,
			 const struct arb_cred *cr, struct arb_stat *st)
{
	struct arb_inode din, in;
	struct arb_txn *t;
	struct timespec now;
	struct fs_acl_new acl = { 0 };
	size_t len, tlen = 0;
	int ret;

	ret = fs_check_name(name, &len);
	if (ret)
		return ret;
	if (is_dot(name, len))
		return -EEXIST;
	if (target) {
		tlen = strlen(target);
		if (tlen == 0)
			return -ENOENT;
		if (tlen > ARB_SYMLINK_MAX)
			return -ENAMETOOLONG;
	}
	fs_lock(fs);
	ret = fs_new_name_ok(fs, dir, name, len, &din);
	if (!ret)
		ret = fs_iflags_may_create(&din);
	if (ret)
		goto out;
	if (S_ISDIR(mode) && din.nlink >= ARB_LINK_MAX) {
		ret = -EMLINK;
		goto out;
	}
	if (target && tlen + ARB_FILE_EXTENT_INLINE_HDR >
			      arb_max_item_size(fs->vol) / 2) {
		ret = -ENAMETOOLONG;
		goto out;
	}
	/* the parent's default ACL */
	ret = fs_acl_inherit_prepare(fs, &din, &mode, &acl);
	if (ret)
		goto out;
	if (fs_ino_exhausted(fs_tree_of(fs, dir))) {
		ret = -ENOSPC;
		goto out;
	}
	ret = fs_op_begin(fs, &t, dir, tlen + acl.acc_size + acl.def_size, 0);
	if (ret)
		goto out;
	fs_now(&now);
	memset(&in, 0, sizeof(in));
	ret = fs_ino_new(fs, t, fs_tree_of(fs, dir), &in.ino);
	if (ret)
		goto out_end;
	in.generation = t->transid;
	in.mode = mode;
	in.uid = cr ? cr->uid : 0;
	in.gid = cr ? cr->gid : 0;
	if (din.mode & S_ISGID) {
		in.gid = din.gid;
		if (S_ISDIR(mode))
			in.mode |= S_ISGID;
	}
	in.nlink = S_ISDIR(mode) ? 2 : 1;
	in.seq = 2;
	in.rdev = (S_ISCHR(mode) || S_ISBLK(mode)) ? rdev : 0;
	in.flags = din.flags & ARB_INODE_INHERITED;
	in.atime = in.mtime = in.ctime = in.btime = now;
	if (target) {
		in.size = tlen;
		in.nbytes = tlen;
	}
	ret = fs_inode_insert(fs, t, &in);
	if (ret)
		goto out_end;
	ret = fs_acl_inherit_apply(fs, t, in.ino, &acl);
	if (ret)
		goto out_end;
	if (target) {
		size_t isz = ARB_FILE_EXTENT_INLINE_HDR + tlen;
		uint8_t *buf = calloc(1, isz);
		struct arb_file_extent *fe = (struct arb_file_extent *)buf;
		struct arb_key k = { fs_obj(in.ino), ARB_EXTENT_DATA, 0 };

		if (!buf) {
			ret = -ENOMEM;
			goto out_end;
		}
		arb_set_file_extent_f_generation(fe, t->transid);
		arb_set_file_extent_f_ram_bytes(fe, tlen);
		arb_set_file_extent_f_type(fe, ARB_FILE_EXTENT_INLINE);
		memcpy(buf + ARB_FILE_EXTENT_INLINE_HDR, target, tlen);
		ret = arb_insert_item(t, fs_root_of(fs, in.ino), &k, buf,
				      (uint32_t)isz);
		free(buf);
		if (ret)
			goto out_end;
	}
	ret = fs_link_add(fs, t, &din, name, len, in.ino, mode_dt(mode), &now);
	if (ret)
		goto out_end;
	if (S_ISDIR(mode))
		din.nlink++;
	ret = fs_inode_write(fs, t, &din);
out_end:
	ret = fs_op_end(fs, t, ret);
	if (!ret && st)
		fs_inode_to_stat(fs, &in, st);
out:
	fs_unlock(fs);
	fs_acl_new_free(&acl);
	return ret;
}

int arb_fs_mknod(struct arb_fs *fs, uint64_t dir, const char *name,
		 uint32_t mode, uint64_t rdev, const struct arb_cred *cr,
		 struct arb_stat *st)
{
	uint32_t type = mode & S_IFMT;

	if (type == 0)
		mode |= S_IFREG;
	else if (type != S_IFREG && type != S_IFIFO && type != S_IFSOCK &&
		 type != S_IFCHR && type != S_IFBLK)
		return -EINVAL;
	return create_common(fs, dir, name, mode & (S_IFMT | 07777), rdev,
			     NULL, cr, st);
}

int arb_fs_mkdir(struct arb_fs *fs, uint64_t dir, const char *name,
		 uint32_t mode, const struct arb_cred *cr, struct arb_stat *st)
{
	return create_common(fs, dir, name, S_IFDIR | (mode & 07777), 0, NULL,
			     cr, st);
}

int arb_fs_symlink(struct arb_fs *fs, uint64_t dir, const char *name,
		   const char *target, const struct arb_cred *cr,
		   struct arb_stat *st)
{
	return create_common(fs, dir, name, S_IFLNK | 0777, 0, target, cr, st);
}

int arb_fs_readlink(struct arb_fs *fs, uint64_t ino, char *buf, size_t size)
{
	struct arb_key k = { fs_obj(ino), ARB_EXTENT_DATA, 0 };
	struct arb_inode in;
	uint8_t *item;
	size_t tlen;
	int ret;

	item = malloc(ARB_FILE_EXTENT_INLINE_HDR + ARB_SYMLINK_MAX + 1);
	if (!item)
		return -ENOMEM;
	fs_lock(fs);
	ret = fs_inode_read(fs, ino, &in);
	if (ret)
		goto out;
	if (!S_ISLNK(in.mode)) {
		ret = -EINVAL;
		goto out;
	}
	ret = arb_lookup_item(fs_root_of(fs, ino), &k, item,
			      ARB_FILE_EXTENT_INLINE_HDR + ARB_SYMLINK_MAX + 1);
	if (ret < 0 || ret <= ARB_FILE_EXTENT_INLINE_HDR ||
	    ret > ARB_FILE_EXTENT_INLINE_HDR + ARB_SYMLINK_MAX ||
	    arb_item_validate(&k, item, (uint32_t)ret, NULL) ||
	    arb_file_extent_f_type((struct arb_file_extent *)item) !=
		    ARB_FILE_EXTENT_INLINE) {
		arb_log(ARB_LOG_ERR, "symlink %llu: bad target item (%d)",
			(unsigned long long)ino, ret);
		ret = ret < 0 && ret != -ENOENT ? ret : -EUCLEAN;
		goto out;
	}
	tlen = (size_t)ret - ARB_FILE_EXTENT_INLINE_HDR;
	if (size < tlen + 1) {
		ret = -ERANGE;
		goto out;
	}
	memcpy(buf, item + ARB_FILE_EXTENT_INLINE_HDR, tlen);
	buf[tlen] = 0;
	ret = (int)tlen;
out:
	fs_unlock(fs);
	free(item);
	return ret;
}

/* ---- link, unlink, rmdir ---------------------------------------------- */

int arb_fs_link(struct arb_fs *fs, uint64_t ino, uint64_t newdir,
		const char *newname, struct arb_stat *st)
{
	struct arb_inode din, in;
	struct arb_txn *t;
	struct timespec now;
	size_t len;
	int ret;

	ret = fs_check_name(newname, &len);
	if (ret)
		return ret;
	if (is_dot(newname, len))
		return -EEXIST;
	fs_lock(fs);
	ret = fs_inode_read(fs, ino, &in);
	if (ret)
		goto out;
	if (S_ISDIR(in.mode)) {
		ret = -EPERM;
		goto out;
	}
	if (in.nlink == 0) {
		ret = -ENOENT;
		goto out;
	}
	if (in.nlink >= ARB_LINK_MAX ||
	    !iref_has_room(fs, ino, newdir, len)) {
		ret = -EMLINK;
		goto out;
	}
	ret = fs_new_name_ok(fs, newdir, newname, len, &din);
	/* a hard link stays in its tree (ln, then cp, as btrfs) */
	if (!ret && fs_tree_of(fs, newdir) != fs_tree_of(fs, ino))
		ret = -EXDEV;
	if (!ret)
		ret = fs_iflags_may_link(&in, &din);
	if (ret)
		goto out;
	ret = fs_op_begin(fs, &t, newdir, 0, 0);
	if (ret)
		goto out;
	fs_now(&now);
	ret = fs_link_add(fs, t, &din, newname, len, ino, mode_dt(in.mode), &now);
	if (ret)
		goto out_end;
	in.nlink++;
	in.ctime = now;
	ret = fs_inode_write(fs, t, &in);
	if (!ret)
		ret = fs_inode_write(fs, t, &din);
out_end:
	ret = fs_op_end(fs, t, ret);
	if (!ret && st)
		fs_inode_to_stat(fs, &in, st);
out:
	fs_unlock(fs);
	return ret;
}

static int remove_common(struct arb_fs *fs, uint64_t dir, const char *name,
			 bool rmdir)
{
	struct arb_inode din, in;
	struct arb_txn *t;
	struct timespec now;
	uint64_t ino;
	size_t len;
	bool empty;
	int ret;

	ret = fs_check_name(name, &len);
	if (ret)
		return ret;
	if (is_dot(name, len))
		return rmdir ? (len == 1 ? -EINVAL : -ENOTEMPTY) : -EISDIR;
	fs_lock(fs);
	ret = fs_inode_read(fs, dir, &din);
	if (ret)
		goto out;
	if (!S_ISDIR(din.mode)) {
		ret = -ENOTDIR;
		goto out;
	}
	ret = fs_dir_find(fs, dir, name, len, &ino, NULL, NULL);
	if (ret == -ESTALE)
		ret = -ENOENT;
	if (ret)
		goto out;
	ret = fs_inode_read(fs, ino, &in);
	if (!ret)
		ret = fs_iflags_may_delete(&din, &in);
	/* an empty subvolume goes with rmdir, as on btrfs since 4.18 (with
	 * the permissions of an rmdir; `arbor subvolume delete` takes a full
	 * one and needs privilege) */
	if (!ret && rmdir && fs_tree_of(fs, ino) != fs_tree_of(fs, dir)) {
		ret = fs_subvol_unlink(fs, dir, name, len, true);
		goto out;
	}
	if (ret)
		goto out;
	if (rmdir) {
		if (!S_ISDIR(in.mode)) {
			ret = -ENOTDIR;
			goto out;
		}
		ret = fs_dir_is_empty(fs, ino, &empty);
		if (ret)
			goto out;
		if (!empty) {
			ret = -ENOTEMPTY;
			goto out;
		}
	} else if (S_ISDIR(in.mode)) {
		ret = -EISDIR;
		goto out;
	}
	ret = fs_op_begin(fs, &t, dir, 0, ARB_OP_RESERVE);
	if (ret)
		goto out;
	fs_now(&now);
	ret = link_del(fs, t, &din, name, len, ino, &now);
	if (ret)
		goto out_end;
	in.ctime = now;
	if (rmdir) {
		in.nlink = 0;
		if (din.nlink > 2)
			din.nlink--;
	} else if (in.nlink) {
		in.nlink--;
	}
	if (in.nlink == 0)
		ret = fs_inode_unlinked(fs, t, &in);
	else
		ret = fs_inode_write(fs, t, &in);
	if (!ret)
		ret = fs_inode_write(fs, t, &din);
out_end:
	ret = fs_op_end(fs, t, ret);
out:
	fs_unlock(fs);
	return ret;
}

int arb_fs_unlink(struct arb_fs *fs, uint64_t dir, const char *name)
{
	return remove_common(fs, dir, name, false);
}

int arb_fs_rmdir(struct arb_fs *fs, uint64_t dir, const char *name)
{
	return remove_common(fs, dir, name, true);
}

/* ---- rename ------------------------------------------------------------ */

/*
 * RENAME_WHITEOUT: a whiteout takes the old name, in the rename's
 * transaction, so that both or neither are seen.  It is what ext4 and
 * btrfs make (overlayfs reads it as "deleted here"): a character device
 * 0:0 with no permission bits, owned by the caller (the group of a
 * set-group-ID directory), flags inherited as by a create.  No ACL: the
 * mode says nothing anyway.
 */
static int add_whiteout(struct arb_fs *fs, struct arb_txn *t,
			struct arb_inode *din, const char *name, size_t len,
			const struct arb_cred *cr, const struct timespec *now)
{
	struct arb_inode in;
	int ret;

	memset(&in, 0, sizeof(in));
	/* through fs_ino_new: the tree's high-water mark moves with it */
	ret = fs_ino_new(fs, t, fs_tree_of(fs, din->ino), &in.ino);
	if (ret)
		return ret;
	in.generation = t->transid;
	in.mode = S_IFCHR;
	in.uid = cr ? cr->uid : 0;
	in.gid = din->mode & S_ISGID ? din->gid : cr ? cr->gid : 0;
	in.nlink = 1;
	in.seq = 2;
	in.rdev = 0;
	in.flags = din->flags & ARB_INODE_INHERITED;
	in.atime = in.mtime = in.ctime = in.btime = *now;
	ret = fs_inode_insert(fs, t, &in);
	if (ret)
		return ret;
	return fs_link_add(fs, t, din, name, len, in.ino, mode_dt(in.mode),
			   now);
}

int arb_fs_rename(struct arb_fs *fs, uint64_t dir, const char *name,
		  uint64_t newdir, const char *newname, unsigned flags)
{
	return arb_fs_rename_cred(fs, dir, name, newdir, newname, flags, NULL);
}

/*
 * Move the link of the subvolume whose root is sub from od/name to
 * nd/newname (same tree): the two entries, and the ROOT_REF and
 * ROOT_BACKREF that record where it is linked.  dst: the empty directory
 * at nd/newname that the link replaces, or NULL for a free name.
 */
static int rename_subvol_link(struct arb_fs *fs, struct arb_inode *od,
			      const char *name, size_t len,
			      struct arb_inode *nd, const char *newname,
			      size_t nlen, uint64_t sub, struct arb_inode *dst)
{
	uint8_t buf[sizeof(struct arb_root_ref) + ARB_NAME_MAX];
	struct arb_root_ref *rr = (struct arb_root_ref *)buf;
	uint64_t id = fs_tree_of(fs, sub)->id, parent, seq, index, ino;
	struct arb_key k;
	struct arb_txn *t;
	struct timespec now;
	int ret;

	parent = fs_tree_of(fs, od->ino)->id;
	ret = fs_dir_find(fs, od->ino, name, len, &ino, &seq, NULL);
	if (ret)
		return ret;
	ret = fs_op_begin(fs, &t, od->ino, 0, 0);
	if (ret)
		return ret;
	fs_now(&now);
	ret = fs_dent_del(fs, t, od, name, len, seq, &now);
	if (!ret && dst) {
		/* as an rmdir of it, in this transaction */
		ret = link_del(fs, t, nd, newname, nlen, dst->ino, &now);
		if (!ret) {
			dst->nlink = 0;
			dst->ctime = now;
			if (nd->nlink > 2)
				nd->nlink--;
			ret = fs_inode_unlinked(fs, t, dst);
		}
	}
	if (!ret)
		ret = fs_dent_add(fs, t, nd, newname, nlen, id,
				  DT_DIR | ARB_DENT_SUBVOL, &now, &index);
	if (ret)
		goto out;
	if (od != nd) {
		if (od->nlink > 2)
			od->nlink--;
		nd->nlink++;
	}
	arb_set_root_ref_rr_dirid(rr, fs_obj(nd->ino));
	arb_set_root_ref_rr_sequence(rr, index);
	arb_set_root_ref_rr_name_len(rr, (uint16_t)nlen);
	memcpy(buf + sizeof(*rr), newname, nlen);
	k = (struct arb_key){ parent, ARB_ROOT_REF, id };
	ret = arb_update_item(t, fs->vol->tree_root, &k, buf,
			      (uint32_t)(sizeof(*rr) + nlen));
	k = (struct arb_key){ id, ARB_ROOT_BACKREF, parent };
	if (!ret)
		ret = arb_update_item(t, fs->vol->tree_root, &k, buf,
				      (uint32_t)(sizeof(*rr) + nlen));
	if (!ret)
		ret = fs_inode_write(fs, t, od);
	if (!ret && od != nd)
		ret = fs_inode_write(fs, t, nd);
out:
	return fs_op_end(fs, t, ret);
}

/*
 * A rename of the subvolume link od/name (root sub): to a free name, or
 * over an empty directory (dst_ino), which goes as by an rmdir; never an
 * exchange or a whiteout, never over a file, a full directory or another
 * subvolume link (checked before: EPERM).  Lock held.
 */
static int rename_subvol_common(struct arb_fs *fs, struct arb_inode *od,
				const char *name, size_t len,
				struct arb_inode *nd, const char *newname,
				size_t nlen, uint64_t sub, uint64_t dst_ino,
				unsigned flags)
{
	struct arb_inode src, dst;
	bool empty;
	int ret;

	if (flags & (RENAME_EXCHANGE | RENAME_WHITEOUT))
		return -EPERM;
	if (dst_ino && (flags & RENAME_NOREPLACE))
		return -EEXIST;
	ret = fs_inode_read(fs, sub, &src);
	if (ret)
		return ret;
	if (dst_ino) {
		ret = fs_inode_read(fs, dst_ino, &dst);
		if (ret)
			return ret;
		if (!S_ISDIR(dst.mode))
			return -ENOTDIR;
		ret = fs_dir_is_empty(fs, dst_ino, &empty);
		if (!ret && !empty)
			ret = -ENOTEMPTY;
		if (ret)
			return ret;
	}
	ret = fs_iflags_may_rename(od, &src, nd, dst_ino ? &dst : NULL);
	if (ret)
		return ret;
	return rename_subvol_link(fs, od, name, len, nd, newname, nlen, sub,
				  dst_ino ? &dst : NULL);
}

int arb_fs_rename_cred(struct arb_fs *fs, uint64_t dir, const char *name,
		       uint64_t newdir, const char *newname, unsigned flags,
		       const struct arb_cred *cr)
{
	struct arb_inode odin, ndin, src, dst;
	struct arb_inode *od = &odin, *nd;
	struct arb_txn *t;
	struct timespec now;
	uint64_t src_ino, dst_ino = 0;
	size_t len, nlen;
	bool have_dst, src_dir, dst_dir = false, under, empty;
	int ret;

	if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE |
				RENAME_WHITEOUT))
		return -EINVAL;
	/* renameat2(2): an exchange leaves no name free for a whiteout */
	if ((flags & RENAME_EXCHANGE) &&
	    (flags & (RENAME_NOREPLACE | RENAME_WHITEOUT)))
		return -EINVAL;
	ret = fs_check_name(name, &len);
	if (ret)
		return ret;
	ret = fs_check_name(newname, &nlen);
	if (ret)
		return ret;
	if (is_dot(name, len) || is_dot(newname, nlen))
		return -EBUSY;

	fs_lock(fs);
	ret = fs_inode_read(fs, dir, &odin);
	if (ret)
		goto out;
	if (newdir == dir) {
		nd = od;
	} else {
		nd = &ndin;
		ret = fs_inode_read(fs, newdir, &ndin);
		if (ret)
			goto out;
	}
	if (!S_ISDIR(od->mode) || !S_ISDIR(nd->mode)) {
		ret = -ENOTDIR;
		goto out;
	}
	/* a rename stays in its tree (mv then copies, as on btrfs) */
	if (fs_tree_of(fs, dir) != fs_tree_of(fs, newdir)) {
		ret = -EXDEV;
		goto out;
	}
	if (nd->nlink == 0) {
		ret = -ENOENT;
		goto out;
	}
	ret = fs_dir_find(fs, dir, name, len, &src_ino, NULL, NULL);
	if (ret == -ESTALE)
		ret = -ENOENT;
	if (ret)
		goto out;
	ret = fs_inode_read(fs, src_ino, &src);
	if (ret)
		goto out;
	src_dir = S_ISDIR(src.mode);
	ret = fs_dir_find(fs, newdir, newname, nlen, &dst_ino, NULL, NULL);
	if (ret == -ESTALE)
		ret = -EBUSY; /* a stale subvolume link holds the name */
	if (ret && ret != -ENOENT)
		goto out;
	/* a subvolume link moves to a free name of its tree (no exchange,
	 * no whiteout, never over another name, never onto a link) */
	if (ret == 0 && fs_tree_of(fs, dst_ino) != fs_tree_of(fs, newdir)) {
		ret = -EPERM;
		goto out;
	}
	if (fs_tree_of(fs, src_ino) != fs_tree_of(fs, dir)) {
		ret = rename_subvol_common(fs, od, name, len, nd, newname,
					   nlen, src_ino, ret == 0 ? dst_ino : 0,
					   flags);
		goto out;
	}
	have_dst = ret == 0;
	ret = 0;
	if (have_dst && (flags & RENAME_NOREPLACE)) {
		ret = -EEXIST;
		goto out;
	}
	if (!have_dst && (flags & RENAME_EXCHANGE)) {
		ret = -ENOENT;
		goto out;
	}
	if (have_dst && dst_ino == src_ino)
		goto out; /* two names of one inode: nothing to do */
	if (have_dst) {
		ret = fs_inode_read(fs, dst_ino, &dst);
		if (ret)
			goto out;
		dst_dir = S_ISDIR(dst.mode);
	}
	ret = fs_iflags_may_rename(od, &src, nd, have_dst ? &dst : NULL);
	if (ret)
		goto out;

	if (flags & RENAME_EXCHANGE) {
		if (src_dir && dir != newdir) {
			ret = dir_is_under(fs, newdir, src_ino, &under);
			if (!ret && under)
				ret = -EINVAL;
			if (ret)
				goto out;
		}
		if (dst_dir && dir != newdir) {
			ret = dir_is_under(fs, dir, dst_ino, &under);
			if (!ret && under)
				ret = -EINVAL;
			if (ret)
				goto out;
		}
		if (!iref_has_room(fs, src_ino, newdir, nlen) ||
		    !iref_has_room(fs, dst_ino, dir, len)) {
			ret = -EMLINK;
			goto out;
		}
	} else {
		if (have_dst) {
			if (src_dir && !dst_dir) {
				ret = -ENOTDIR;
				goto out;
			}
			if (!src_dir && dst_dir) {
				ret = -EISDIR;
				goto out;
			}
			if (dst_dir) {
				ret = fs_dir_is_empty(fs, dst_ino, &empty);
				if (ret)
					goto out;
				if (!empty) {
					ret = -ENOTEMPTY;
					goto out;
				}
			}
		}
		if (src_dir && dir != newdir) {
			ret = dir_is_under(fs, newdir, src_ino, &under);
			if (!ret && under)
				ret = -EINVAL;
			if (ret)
				goto out;
			if (!have_dst && nd->nlink >= ARB_LINK_MAX) {
				ret = -EMLINK;
				goto out;
			}
		}
		if (dir != newdir && !iref_has_room(fs, src_ino, newdir, nlen)) {
			ret = -EMLINK;
			goto out;
		}
	}

	/* a whiteout is a new inode: not from the reserve for deletes */
	ret = fs_op_begin(fs, &t, dir, 0,
			  flags & RENAME_WHITEOUT ? 0 : ARB_OP_RESERVE);
	if (ret)
		goto out;
	fs_now(&now);
	if (flags & RENAME_EXCHANGE) {
		ret = link_del(fs, t, od, name, len, src_ino, &now);
		if (!ret)
			ret = link_del(fs, t, nd, newname, nlen, dst_ino, &now);
		if (!ret)
			ret = fs_link_add(fs, t, nd, newname, nlen, src_ino,
				       mode_dt(src.mode), &now);
		if (!ret)
			ret = fs_link_add(fs, t, od, name, len, dst_ino,
				       mode_dt(dst.mode), &now);
		if (ret)
			goto out_end;
		if (dir != newdir && src_dir != dst_dir) {
			if (src_dir) {
				od->nlink--;
				nd->nlink++;
			} else {
				nd->nlink--;
				od->nlink++;
			}
		}
		src.ctime = dst.ctime = now;
		ret = fs_inode_write(fs, t, &src);
		if (!ret)
			ret = fs_inode_write(fs, t, &dst);
	} else {
		if (have_dst) {
			ret = link_del(fs, t, nd, newname, nlen, dst_ino, &now);
			if (ret)
				goto out_end;
			dst.ctime = now;
			if (dst_dir) {
				dst.nlink = 0;
				if (nd->nlink > 2)
					nd->nlink--;
			} else if (dst.nlink) {
				dst.nlink--;
			}
			if (dst.nlink == 0)
				ret = fs_inode_unlinked(fs, t, &dst);
			else
				ret = fs_inode_write(fs, t, &dst);
			if (ret)
				goto out_end;
		}
		ret = link_del(fs, t, od, name, len, src_ino, &now);
		if (!ret)
			ret = fs_link_add(fs, t, nd, newname, nlen, src_ino,
				       mode_dt(src.mode), &now);
		if (!ret && (flags & RENAME_WHITEOUT))
			ret = add_whiteout(fs, t, od, name, len, cr, &now);
		if (ret)
			goto out_end;
		if (src_dir && dir != newdir) {
			od->nlink--;
			nd->nlink++;
		}
		src.ctime = now;
		ret = fs_inode_write(fs, t, &src);
	}
	if (!ret)
		ret = fs_inode_write(fs, t, od);
	if (!ret && nd != od)
		ret = fs_inode_write(fs, t, nd);
out_end:
	ret = fs_op_end(fs, t, ret);
out:
	fs_unlock(fs);
	return ret;
}
