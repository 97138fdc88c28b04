/* SPDX-License-Identifier: MIT */
/*
 * encoded.c - a compressed extent in its stored form, out and in
 * (arb_fs_read_encoded, arb_fs_write_encoded): send carries the stored
 * zlib stream of a compressed extent, and receive stores it as the same
 * kind of item without inflating and deflating it again.  The item is
 * written by delalloc.c's fs_write_zextent, as the flush writes its own;
 * docs/design/compress.md, "Stored form out and in".
 * File data as a whole: see file_int.h.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "file_int.h"

_Static_assert(ARB_ENCODED_MAX == ARB_COMPRESS_MAX_RAM,
	       "arbor.h's ARB_ENCODED_MAX is format.h's bound");

/* ---- out --------------------------------------------------------------- */

/*
 * Write ino's delayed data, so that what covers an offset is an extent
 * (or nothing).  A file with no delayed data changes nothing, and then
 * neither a read-only mount nor a read-only subvolume is in the way.
 */
static int flush_delayed(struct arb_fs *fs, uint64_t ino)
{
	struct arb_imem *im = fs_imem_get(fs, ino, false);
	struct arb_txn *t;
	int ret;

	if (!im || !im->nr)
		return 0;
	ret = fs_op_begin(fs, &t, ino, im->nr * (uint64_t)fs->bs, 0);
	if (ret)
		return ret;
	return fs_op_end(fs, t, fs_flush_one(fs, t, ino));
}

int arb_fs_read_encoded(struct arb_fs *fs, uint64_t ino, uint64_t off,
			struct arb_encoded *e, void *data, size_t cap)
{
	uint32_t *sums = NULL, bs = fs->bs;
	uint8_t *have = NULL, *stored = NULL, *ram = NULL;
	struct arb_inode in;
	struct fs_ext x;
	size_t nsec, used = 0;
	unsigned epoch;
	int ret;

	memset(e, 0, sizeof(*e));
	fs_lock(fs);
	ret = fs_reg_inode_read(fs, ino, &in, -EINVAL);
	if (!ret)
		ret = flush_delayed(fs, ino);
	/* the flush may have committed: the inode as it is now */
	if (!ret)
		ret = fs_reg_inode_read(fs, ino, &in, -EINVAL);
	if (ret)
		goto out_unlock;
	if (off >= in.size) {
		ret = -ENODATA;
		goto out_unlock;
	}
	ret = fs_ext_next(fs, ino, off, &x, NULL);
	if (ret < 0)
		goto out_unlock;
	if (ret == 1 || x.start > off || x.type != ARB_FILE_EXTENT_REG ||
	    x.compression != ARB_COMPRESS_ZLIB) {
		ret = -ENODATA;
		goto out_unlock;
	}
	/* what fs_ext_parse let through is not what the checker would:
	 * a crafted item must not make us read or copy past our buffers */
	if (!x.disk_num_bytes || x.disk_num_bytes % bs ||
	    x.disk_num_bytes >= x.ram_bytes ||
	    x.ram_bytes > ARB_COMPRESS_MAX_RAM) {
		arb_log(ARB_LOG_ERR,
			"inode %llu offset %llu: compressed extent of %llu "
			"bytes stored in %llu",
			(unsigned long long)ino, (unsigned long long)x.start,
			(unsigned long long)x.ram_bytes,
			(unsigned long long)x.disk_num_bytes);
		ret = -EIO;
		goto out_unlock;
	}
	e->file_off = x.start;
	e->num_bytes = (x.end < in.size ? x.end : in.size) - x.start;
	e->ram_bytes = x.ram_bytes;
	e->ext_off = x.offset;
	e->compression = ARB_COMPRESS_ZLIB;
	nsec = x.disk_num_bytes / bs;
	sums = malloc(nsec * sizeof(*sums));
	have = malloc(nsec);
	stored = malloc(x.disk_num_bytes);
	ram = malloc(x.ram_bytes);
	if (!sums || !have || !stored || !ram) {
		ret = -ENOMEM;
		goto out_unlock;
	}
	ret = fs_csum_lookup(fs, x.disk_bytenr, nsec, sums, have);
	if (ret)
		goto out_unlock;
	/* the disk read without the lock, as arb_fs_read's: the epoch keeps
	 * the sectors from being reused until we are done */
	epoch = arb_data_read_begin(fs->vol);
	fs_unlock(fs);
	ret = arb_dev_read(fs->dev, stored, x.disk_num_bytes, x.disk_bytenr,
			   ARB_IO_DATA);
	if (ret)
		arb_log(ARB_LOG_ERR,
			"inode %llu offset %llu: read error %d at disk %llu",
			(unsigned long long)ino, (unsigned long long)x.start,
			ret, (unsigned long long)x.disk_bytenr);
	for (size_t i = 0; !ret && i < nsec; i++) {
		if (have[i] && data_csum(stored + i * bs, bs) == sums[i])
			continue;
		arb_log(ARB_LOG_ERR, "inode %llu offset %llu: %s at disk %llu",
			(unsigned long long)ino, (unsigned long long)x.start,
			have[i] ? "data checksum mismatch"
				: "data checksum missing",
			(unsigned long long)(x.disk_bytenr + i * bs));
		ret = -EIO;
	}
	/* inflated to check the stream and to find where it ends: the
	 * receiver must not store what does not read */
	if (!ret) {
		ret = fs_z_decompress_len(stored, x.disk_num_bytes, ram,
					  x.ram_bytes, &used);
		if (ret == -EIO)
			arb_log(ARB_LOG_ERR,
				"inode %llu offset %llu: compressed data at "
				"disk %llu does not inflate to its %llu bytes",
				(unsigned long long)ino,
				(unsigned long long)x.start,
				(unsigned long long)x.disk_bytenr,
				(unsigned long long)x.ram_bytes);
	}
	arb_data_read_end(fs->vol, epoch);
	if (!ret) {
		e->len = (uint32_t)used;
		if (cap < used)
			ret = -EOVERFLOW;
		else
			memcpy(data, stored, used);
	}
	goto out;
out_unlock:
	fs_unlock(fs);
out:
	free(sums);
	free(have);
	free(stored);
	free(ram);
	return ret;
}

/* ---- in ---------------------------------------------------------------- */

/* What the caller may hand us, checked before anything else. */
static int encoded_valid(const struct arb_encoded *e)
{
	if (e->compression != ARB_COMPRESS_ZLIB || !e->len ||
	    e->len > ARB_ENCODED_MAX || !e->ram_bytes ||
	    e->ram_bytes > ARB_ENCODED_MAX || !e->num_bytes ||
	    e->ext_off > e->ram_bytes ||
	    e->num_bytes > e->ram_bytes - e->ext_off)
		return -EINVAL;
	if (e->file_off >= ARB_MAX_FILE_SIZE ||
	    e->num_bytes > ARB_MAX_FILE_SIZE - e->file_off)
		return -EFBIG;
	return 0;
}

/*
 * May the stream (used bytes of it, inflated to ram) be the item the
 * flush would have written?  Not when it does not save a sector, or the
 * format has no such item (a sector-aligned f_ram_bytes and f_offset, an
 * item of whole sectors inside f_ram_bytes, zeros past the end of the
 * file in its last sector: file_int.h).
 */
static bool encoded_fits(const struct arb_fs *fs,
			 const struct arb_encoded *e, const uint8_t *ram,
			 size_t used)
{
	uint32_t bs = fs->bs;
	uint64_t item = round_up_bs(e->num_bytes, bs);

	if (e->ram_bytes % bs || e->ext_off % bs ||
	    round_up_bs(used, bs) + bs > e->ram_bytes ||
	    item > e->ram_bytes - e->ext_off)
		return false;
	for (uint64_t i = e->ext_off + e->num_bytes; i < e->ext_off + item;
	     i++)
		if (ram[i])
			return false;
	return true;
}

/*
 * Store the stream as one compressed item (lock held, input checked and
 * fitting): 0, 1 when it cannot be (the file is NOCOMPRESS, or no room
 * for its sectors: nothing changed, the caller writes the bytes plainly),
 * or <0.
 */
static int store_encoded(struct arb_fs *fs, uint64_t ino,
			 const struct arb_encoded *e, const uint8_t *z,
			 size_t stored)
{
	uint64_t end = e->file_off + e->num_bytes;
	uint64_t item = round_up_bs(e->num_bytes, fs->bs);
	struct arb_inode in;
	struct arb_imem *im;
	struct arb_txn *t;
	struct timespec now;
	int ret;

	ret = fs_reg_inode_read(fs, ino, &in, -EINVAL);
	if (ret)
		return ret;
	if (in.flags & ARB_INODE_NOCOMPRESS)
		return 1;
	/* as a clone: nothing delayed lands later on the range */
	ret = flush_delayed(fs, ino);
	if (ret)
		return ret;
	ret = fs_op_begin(fs, &t, ino, stored, 0);
	if (ret)
		return ret;
	/* read after fs_op_begin: it may commit */
	ret = fs_reg_inode_read(fs, ino, &in, -EINVAL);
	if (ret)
		goto out_cancel;
	/* an inline extent before the range becomes a delayed block 0,
	 * written as a regular extent by the next flush (clone_step) */
	if (e->file_off > 0 && in.size <= fs->bs && fs_has_inline(fs, ino)) {
		uint8_t *b0;

		im = fs_imem_get(fs, ino, true);
		if (!im) {
			ret = -ENOMEM;
			goto out_cancel;
		}
		ret = fs_dirty_block(fs, im, &in, 0, true, &b0);
		im->force_flush = true;
		if (ret) {
			fs_imem_put_if_idle(fs, im);
			goto out_cancel;
		}
	}
	im = fs_imem_get(fs, ino, false);
	if (im) {
		fs_dmap_drop_range(fs, im, e->file_off / fs->bs,
				   (e->file_off + item) / fs->bs);
		fs_imem_put_if_idle(fs, im);
	}
	/* allocates first: 2 (no room) before any change */
	ret = fs_write_zextent(fs, t, &in, e->file_off, e->ram_bytes,
			       e->ext_off, item, z, stored, NULL);
	if (ret == 2) {
		ret = 1;
		goto out_cancel;
	}
	if (ret)
		goto out_end;
	if (end > in.size)
		in.size = end;
	if (!fs->opts.write_keeps_times) {
		fs_now(&now);
		in.mtime = in.ctime = now;
	}
	fs->user_bytes_written += e->num_bytes;
	ret = fs_inode_write(fs, t, &in);
out_end:
	return fs_op_end(fs, t, ret);
out_cancel:
	arb_txn_end(t);
	return ret;
}

ssize_t arb_fs_write_encoded(struct arb_fs *fs, uint64_t ino,
			     const struct arb_encoded *e, const void *data)
{
	struct arb_inode in;
	uint8_t *ram, *z = NULL;
	size_t used, stored;
	ssize_t w;
	int ret;

	ret = encoded_valid(e);
	if (ret)
		return ret;
	if (e->file_off % fs->bs || e->num_bytes > SSIZE_MAX)
		return -EINVAL;
	/* hostile input: inflated in full before the lock, so that a
	 * stream that lies about its length changes nothing */
	ram = malloc(e->ram_bytes);
	if (!ram)
		return -ENOMEM;
	ret = fs_z_decompress_len(data, e->len, ram, e->ram_bytes, &used);
	if (ret) {
		free(ram);
		return ret == -EIO ? -EBADMSG : ret;
	}
	fs_lock(fs);
	ret = fs_reg_inode_read(fs, ino, &in, -EINVAL);
	if (!ret && e->num_bytes % fs->bs &&
	    e->file_off + e->num_bytes < in.size)
		ret = -EINVAL; /* a partial sector inside the file */
	if (ret)
		goto out_unlock;
	ret = 1;
	if (encoded_fits(fs, e, ram, used)) {
		/* the stream alone, zeros to the end of its last sector */
		stored = round_up_bs(used, fs->bs);
		z = calloc(1, stored);
		if (!z) {
			ret = -ENOMEM;
			goto out_unlock;
		}
		memcpy(z, data, used);
		ret = store_encoded(fs, ino, e, z, stored);
	}
out_unlock:
	fs_unlock(fs);
	free(z);
	if (ret == 1) {
		/* the same bytes for readers, stored as any write stores them
		 * (compressed again only if the file's writes are) */
		w = arb_fs_write(fs, ino, ram + e->ext_off,
				 (size_t)e->num_bytes, e->file_off);
		if (w >= 0 && (uint64_t)w != e->num_bytes)
			w = -EIO; /* arb_fs_write is never short */
		free(ram);
		return w;
	}
	free(ram);
	return ret ? ret : (ssize_t)e->num_bytes;
}
