/* SPDX-License-Identifier: MIT */
/*
 * extent.c - EXTENT_DATA items: parsing, walking a file's extents,
 * inline edits, dropping a range of extents.
 * File data as a whole: see file_int.h.
 */
#include <errno.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <unistd.h>

#include "file_int.h"
#include "items/items.h"

/* ---- extents ----------------------------------------------------------- */

/* parse an EXTENT_DATA item; -EUCLEAN if malformed (lib/items says how) */
int fs_ext_parse(uint64_t ino, const struct arb_key *k, const void *data,
		 uint32_t size, struct fs_ext *e)
{
	const struct arb_file_extent *fe = data;
	const char *why;

	if (arb_item_validate(k, data, size, &why)) {
		arb_log(ARB_LOG_ERR,
			"inode %llu: bad file extent item at %llu: %s",
			(unsigned long long)ino, (unsigned long long)k->offset,
			why);
		return -EUCLEAN;
	}
	memset(e, 0, sizeof(*e));
	e->start = k->offset;
	e->type = arb_file_extent_f_type(fe);
	e->gen = arb_file_extent_f_generation(fe);
	e->ram_bytes = arb_file_extent_f_ram_bytes(fe);
	e->compression = arb_file_extent_f_compression(fe);
	if (e->type == ARB_FILE_EXTENT_INLINE) {
		e->end = arb_file_extent_inline_len(fe, size);
		e->inline_stored = size - ARB_FILE_EXTENT_INLINE_HDR;
		return 0;
	}
	e->disk_bytenr = arb_file_extent_f_disk_bytenr(fe);
	e->disk_num_bytes = arb_file_extent_f_disk_num_bytes(fe);
	e->offset = arb_file_extent_f_offset(fe);
	e->end = e->start + arb_file_extent_f_num_bytes(fe);
	return 0;
}

/* the bytes of an inline extent into inl (a sector), inflated if need be */
static int inline_bytes(struct arb_fs *fs, uint64_t ino, const struct fs_ext *e,
			const uint8_t *item, uint8_t *inl)
{
	const uint8_t *d = item + ARB_FILE_EXTENT_INLINE_HDR;
	size_t n = e->end;

	if (!e->compression) {
		memcpy(inl, d, n > fs->bs ? fs->bs : n);
		return 0;
	}
	if (n > fs->bs || fs_z_decompress(d, e->inline_stored, inl, n)) {
		arb_log(ARB_LOG_ERR,
			"inode %llu: compressed inline extent of %zu bytes "
			"does not inflate to them",
			(unsigned long long)ino, n);
		return -EIO;
	}
	return 0;
}

/*
 * The first extent of ino that ends after pos.  0 found, 1 none, <0.
 * If inl is not NULL and the extent is inline, its bytes are copied there
 * (up to sectorsize).
 */
int fs_ext_next(struct arb_fs *fs, uint64_t ino, uint64_t pos, struct fs_ext *e,
		uint8_t *inl)
{
	struct arb_root *root = fs_root_of(fs, ino);
	uint64_t obj = fs_obj(ino);
	struct arb_key key = { obj, ARB_EXTENT_DATA, pos }, k;
	struct arb_iter it;
	int ret;

	arb_iter_init(&it, root);
	ret = arb_iter_seek_le(&it, &key);
	if (ret == 1)
		ret = arb_iter_seek(&it, &key);
	while (ret == 0) {
		arb_iter_key(&it, &k);
		if (k.objectid > obj ||
		    (k.objectid == obj && k.type > ARB_EXTENT_DATA)) {
			ret = 1;
			break;
		}
		if (k.objectid == obj && k.type == ARB_EXTENT_DATA) {
			ret = fs_ext_parse(ino, &k, arb_iter_data(&it),
					   arb_iter_size(&it), e);
			if (ret)
				break;
			e->leaf_private = arb_iter_leaf_private(&it);
			if (e->end > pos) {
				if (inl && e->type == ARB_FILE_EXTENT_INLINE)
					ret = inline_bytes(fs, ino, e,
							   arb_iter_data(&it),
							   inl);
				break;
			}
		}
		ret = arb_iter_next(&it);
	}
	arb_iter_release(&it);
	return ret;
}

void fs_ext_to_item(const struct fs_ext *e, struct arb_file_extent *fe)
{
	memset(fe, 0, sizeof(*fe));
	arb_set_file_extent_f_generation(fe, e->gen);
	arb_set_file_extent_f_ram_bytes(fe, e->ram_bytes);
	arb_set_file_extent_f_type(fe, e->type);
	arb_set_file_extent_f_compression(fe, e->compression);
	arb_set_file_extent_f_disk_bytenr(fe, e->disk_bytenr);
	arb_set_file_extent_f_disk_num_bytes(fe, e->disk_num_bytes);
	arb_set_file_extent_f_offset(fe, e->offset);
	arb_set_file_extent_f_num_bytes(fe, e->end - e->start);
}

/*
 * A compressed inline extent edited: its bytes become block 0 of the
 * delayed data (inflated by the load), the item goes, and the edit is made
 * in the block; the flush stores the file anew (inline again if it fits).
 */
static int inline_spill(struct arb_fs *fs, struct arb_txn *t,
			struct arb_inode *in, uint64_t from, uint64_t to,
			uint64_t len)
{
	struct arb_key k = { fs_obj(in->ino), ARB_EXTENT_DATA, 0 };
	struct arb_imem *im = fs_imem_get(fs, in->ino, true);
	uint8_t *b;
	int ret;

	if (!im)
		return -ENOMEM;
	ret = fs_dirty_block(fs, im, in, 0, true, &b);
	if (ret) {
		fs_imem_put_if_idle(fs, im);
		return ret;
	}
	im->force_flush = true;
	ret = arb_del_item(t, fs_root_of(fs, in->ino), &k);
	if (ret)
		return ret;
	in->nbytes -= len;
	if (from < len)
		memset(b + from, 0, (to < len ? to : len) - from);
	return 0;
}

/* the inline extent's bytes edited: [from, to) zeroed, or cut at from */
int fs_inline_edit(struct arb_fs *fs, struct arb_txn *t, struct arb_inode *in,
		   uint64_t from, uint64_t to, uint64_t len)
{
	struct arb_root *root = fs_root_of(fs, in->ino);
	uint64_t obj = fs_obj(in->ino);
	struct arb_key k = { obj, ARB_EXTENT_DATA, 0 };
	uint32_t size = ARB_FILE_EXTENT_INLINE_HDR + (uint32_t)len;
	struct fs_ext e;
	uint8_t *buf;
	int ret;

	ret = fs_ext_next(fs, in->ino, 0, &e, NULL);
	if (ret)
		return ret < 0 ? ret : -EUCLEAN;
	if (e.type == ARB_FILE_EXTENT_INLINE && e.compression)
		return inline_spill(fs, t, in, from, to, len);
	buf = malloc(size);
	if (!buf)
		return -ENOMEM;
	ret = arb_lookup_item(root, &k, buf, size);
	if (ret >= 0 && (uint32_t)ret != size)
		ret = -EUCLEAN;
	if (ret >= 0) {
		if (to >= len) {
			/* cut the tail */
			size = ARB_FILE_EXTENT_INLINE_HDR + (uint32_t)from;
			arb_set_file_extent_f_ram_bytes(
				(struct arb_file_extent *)buf, from);
			in->nbytes -= len - from;
		} else {
			memset(buf + ARB_FILE_EXTENT_INLINE_HDR + from, 0,
			       to - from);
		}
		ret = arb_update_item(t, root, &k, buf, size);
	}
	free(buf);
	return ret;
}

/*
 * Remove the mapping of [start, end) of a file, splitting the extents that
 * straddle its ends.  Updates in->nbytes (the caller writes the inode).
 */
int fs_drop_extents(struct arb_fs *fs, struct arb_txn *t, struct arb_inode *in,
		    uint64_t start, uint64_t end)
{
	struct arb_root *root = fs_root_of(fs, in->ino);
	uint64_t obj = fs_obj(in->ino);
	struct arb_file_extent fe;
	struct arb_key k;
	struct fs_ext e, ne;
	uint64_t pos = start;
	int ret;

	k.objectid = obj;
	k.type = ARB_EXTENT_DATA;
	while (pos < end) {
		ret = fs_ext_next(fs, in->ino, pos, &e, NULL);
		if (ret < 0)
			return ret;
		if (ret == 1 || e.start >= end)
			return 0;
		pos = e.end;
		k.offset = e.start;
		if (e.type == ARB_FILE_EXTENT_INLINE) {
			uint64_t from = start > e.start ? start : e.start;
			uint64_t to = end < e.end ? end : e.end;
			if (from == 0 && to >= e.end) {
				ret = arb_del_item(t, root, &k);
				in->nbytes -= e.end;
			} else {
				ret = fs_inline_edit(fs, t, in, from, to, e.end);
			}
			if (ret)
				return ret;
			continue;
		}
		if (e.start < start) {
			uint64_t old_end = e.end;
			/* keep the head [e.start, start) */
			e.end = start;
			fs_ext_to_item(&e, &fe);
			ret = arb_update_item(t, root, &k, &fe, FE_SIZE);
			if (ret)
				return ret;
			if (old_end > end) {
				/* and a tail [end, old_end) */
				ne = e;
				ne.offset += end - e.start;
				ne.start = end;
				ne.end = old_end;
				fs_ext_to_item(&ne, &fe);
				k.offset = end;
				ret = arb_insert_item(t, root, &k, &fe,
						      FE_SIZE);
				if (!ret)
					ret = arb_ref_data(
						t, ne.disk_bytenr,
						ne.disk_num_bytes, root->id,
						obj, ne.start - ne.offset,
						1);
				in->nbytes -= end - start;
			} else {
				in->nbytes -= old_end - start;
			}
			if (ret)
				return ret;
			continue;
		}
		ret = arb_del_item(t, root, &k);
		if (ret)
			return ret;
		if (e.end <= end) {
			ret = arb_ref_data(t, e.disk_bytenr, e.disk_num_bytes,
					   root->id, obj,
					   e.start - e.offset, -1);
			in->nbytes -= e.end - e.start;
		} else {
			/* keep the tail [end, e.end); same back-reference */
			ne = e;
			ne.offset += end - e.start;
			ne.start = end;
			fs_ext_to_item(&ne, &fe);
			k.offset = end;
			ret = arb_insert_item(t, root, &k, &fe, FE_SIZE);
			in->nbytes -= end - e.start;
		}
		if (ret)
			return ret;
	}
	return 0;
}
