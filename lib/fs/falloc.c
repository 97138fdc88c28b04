/* SPDX-License-Identifier: MIT */
/*
 * falloc.c - fallocate(2): preallocation, punching holes, zeroing.
 * File data as a whole: see file_int.h.
 */
#include <errno.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <unistd.h>

#include "file_int.h"

/* ---- fallocate --------------------------------------------------------- */

/* zero [a, b) inside one block (a < b, same block) */
static int zero_partial(struct arb_fs *fs, struct arb_imem *im,
			struct arb_inode *in, uint64_t a, uint64_t b)
{
	uint32_t bs = fs->bs;
	uint64_t idx = a / bs;
	uint8_t *buf = fs_dmap_find_w(im, idx);
	struct fs_ext e;
	int ret;

	if (!buf) {
		if (idx * bs >= in->size)
			return 0; /* past EOF everything reads as zero */
		ret = fs_ext_next(fs, in->ino, a, &e, NULL);
		if (ret < 0)
			return ret;
		if (ret == 1 || e.start >= b || e.type == ARB_FILE_EXTENT_PREALLOC)
			return 0;
		ret = fs_dirty_block(fs, im, in, idx, true, &buf);
		im->force_flush = true;
		if (ret)
			return ret;
	}
	memset(buf + (a - idx * bs), 0, b - a);
	return 0;
}

/* preallocate the holes of [a, b) (sector aligned) */
static int prealloc_range(struct arb_fs *fs, struct arb_txn *t,
			  struct arb_inode *in, struct arb_imem *im, uint64_t a,
			  uint64_t b)
{
	struct arb_root *root = fs_root_of(fs, in->ino);
	uint64_t obj = fs_obj(in->ino);
	uint32_t bs = fs->bs;
	uint64_t pos = a;
	struct fs_ext e;
	int ret;

	while (pos < b) {
		uint64_t hole_end = b, bytenr, got;
		size_t i;
		struct arb_file_extent fe;
		struct arb_key k;

		ret = fs_ext_next(fs, in->ino, pos, &e, NULL);
		if (ret < 0)
			return ret;
		if (ret == 0) {
			if (e.start <= pos) {
				/* an inline extent ends mid-block */
				pos = round_up_bs(e.end, bs);
				continue;
			}
			if (e.start < hole_end)
				hole_end = e.start;
		}
		if (im) {
			i = fs_dmap_lower(im, pos / bs);
			if (i < im->nr) {
				if (im->blocks[i].idx == pos / bs) {
					pos = (pos / bs + 1) * bs;
					continue;
				}
				if (im->blocks[i].idx * bs < hole_end)
					hole_end = im->blocks[i].idx * bs;
			}
		}
		ret = arb_alloc_data(t, hole_end - pos, bs, fs->data_hint,
				     &bytenr, &got);
		if (ret)
			return ret;
		memset(&fe, 0, sizeof(fe));
		arb_set_file_extent_f_generation(&fe, t->transid);
		arb_set_file_extent_f_ram_bytes(&fe, got);
		arb_set_file_extent_f_type(&fe, ARB_FILE_EXTENT_PREALLOC);
		arb_set_file_extent_f_disk_bytenr(&fe, bytenr);
		arb_set_file_extent_f_disk_num_bytes(&fe, got);
		arb_set_file_extent_f_num_bytes(&fe, got);
		k.objectid = obj;
		k.type = ARB_EXTENT_DATA;
		k.offset = pos;
		ret = arb_insert_item(t, root, &k, &fe, FE_SIZE);
		if (!ret)
			ret = arb_ref_data(t, bytenr, got, root->id,
					   obj, pos, 1);
		if (ret)
			return ret;
		in->nbytes += got;
		fs->data_hint = bytenr + got;
		pos += got;
	}
	return 0;
}

int arb_fs_fallocate(struct arb_fs *fs, uint64_t ino, int mode, uint64_t off,
		     uint64_t len)
{
	struct arb_inode in;
	struct arb_imem *im = NULL;
	struct arb_txn *t;
	struct timespec now;
	uint32_t bs;
	uint64_t end, a, b;
	bool punch = false, zero = false, keep;
	int ret;

	keep = mode & FALLOC_FL_KEEP_SIZE;
	switch (mode & ~FALLOC_FL_KEEP_SIZE) {
	case 0:
		break;
	case FALLOC_FL_PUNCH_HOLE:
		if (!keep)
			return -EOPNOTSUPP;
		punch = true;
		break;
	case FALLOC_FL_ZERO_RANGE:
		zero = true;
		break;
	default:
		return -EOPNOTSUPP;
	}
	if (len == 0)
		return -EINVAL;
	if (off >= ARB_MAX_FILE_SIZE || len > ARB_MAX_FILE_SIZE - off)
		return -EFBIG;
	end = off + len;

	fs_lock(fs);
	bs = fs->bs;
	ret = fs_reg_inode_read(fs, ino, &in, -ENODEV);
	if (!ret)
		ret = fs_iflags_may_fallocate(&in, mode);
	if (ret)
		goto out;
	if (fs->readonly) {
		ret = -EROFS;
		goto out;
	}
	ret = fs_op_begin(fs, &t, ino, punch ? 0 : round_up_bs(len, bs) + bs,
			  punch ? ARB_OP_RESERVE : 0);
	if (ret)
		goto out;
	im = fs_imem_get(fs, ino, true);
	if (!im) {
		arb_txn_end(t);
		ret = -ENOMEM;
		goto out;
	}
	/* memory-only preparation first: inline data becomes block 0, and
	 * partial blocks at the edges of a punched/zeroed range are zeroed */
	if (!fs_dmap_find(im, 0) && fs_has_inline(fs, ino)) {
		uint8_t *b0;
		ret = fs_dirty_block(fs, im, &in, 0, true, &b0);
		im->force_flush = true;
		if (ret)
			goto out_cancel;
	}
	a = round_up_bs(off, bs);
	b = end / bs * bs;
	if (punch || zero) {
		if (off / bs == (end - 1) / bs && (off % bs || end % bs)) {
			/* inside one block */
			ret = zero_partial(fs, im, &in, off, end);
			a = b = 0;
		} else {
			if (off % bs)
				ret = zero_partial(fs, im, &in, off, a);
			if (!ret && end % bs)
				ret = zero_partial(fs, im, &in, b, end);
		}
		if (ret)
			goto out_cancel;
		if (a < b) {
			fs_dmap_drop_range(fs, im, a / bs, b / bs);
			ret = fs_drop_extents(fs, t, &in, a, b);
			if (ret)
				goto out_end;
		}
		if (zero && a < b)
			ret = prealloc_range(fs, t, &in, im, a, b);
	} else {
		ret = prealloc_range(fs, t, &in, im, off / bs * bs,
				     round_up_bs(end, bs));
	}
	if (ret)
		goto out_end;
	fs_now(&now);
	in.ctime = now;
	if ((punch || zero))
		in.mtime = now;
	if (!keep && end > in.size) {
		in.size = end;
		in.mtime = now;
	}
	ret = fs_inode_write(fs, t, &in);
out_end:
	fs_imem_put_if_idle(fs, im);
	ret = fs_op_end(fs, t, ret); /* may commit and free im */
	goto out;
out_cancel:
	arb_txn_end(t);
	fs_imem_put_if_idle(fs, im);
out:
	fs_unlock(fs);
	return ret;
}
