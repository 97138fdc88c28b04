/* SPDX-License-Identifier: MIT */
/*
 * write.c - write(2) into delayed data, and truncate.
 * File data as a whole: see file_int.h.
 */
#include <errno.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <unistd.h>

#include "file_int.h"

/* ---- writing ----------------------------------------------------------- */

/*
 * Compression before the lock (docs/design/compress.md): a write that
 * holds whole pieces the flush will compress (ARB_COMPRESS_MAX_RAM
 * bytes at a multiple of it in the file, or such a piece's start up to
 * the end of the file) compresses them from the caller's buffer before
 * it takes any lock, and leaves the result with the dirty blocks
 * (fs_zc_add), so that the flush, under the lock, only stores it.
 */
struct zpre {
	uint64_t idx;
	uint32_t nblk;
	bool tail;     /* ends at the write's end, inside a block */
	int ret;       /* of fs_z_compress: 0 z, 1 does not shrink */
	uint8_t *z;
	size_t stored;
};

static size_t zpre_make(struct arb_fs *fs, uint64_t ino, const uint8_t *src,
			uint64_t off, uint64_t end, struct zpre **out)
{
	const uint64_t C = ARB_COMPRESS_MAX_RAM;
	uint32_t bs = fs->bs;
	uint64_t c = (off + C - 1) / C * C;
	int level = fs->opts.compress_level ? fs->opts.compress_level : 3;
	struct zpre *v;
	size_t n = 0;

	*out = NULL;
	if (c >= end)
		return 0;
	v = calloc((end - c) / C + 1, sizeof(*v));
	if (!v)
		return 0;
	for (; c < end; c += C) {
		uint64_t ce = c + C < end ? c + C : end;

		/* another write found the file's start incompressible */
		if (n && !fs_zhint_get(fs, ino))
			break;
		uint64_t len = round_up_bs(ce, bs) - c;
		const uint8_t *p = src + (c - off);
		uint8_t *tmp = NULL;

		if (ce < c + C && len < 2 * (uint64_t)bs)
			break;
		if (len != ce - c) {
			/* the end of the file, inside a block: zeros after */
			tmp = calloc(1, len);
			if (!tmp)
				break;
			memcpy(tmp, p, ce - c);
			p = tmp;
		}
		v[n].idx = c / bs;
		v[n].nblk = (uint32_t)(len / bs);
		v[n].tail = ce < c + C;
		v[n].ret = fs_z_compress(p, len, bs, level, &v[n].z,
					 &v[n].stored);
		free(tmp);
		if (v[n].ret < 0)
			break;
		n++;
		/* the file's start does not shrink: it will be marked
		 * NOCOMPRESS (arb_fs_write), and its concurrent writes
		 * (the kernel writes back in parallel) stop compressing */
		if (c == 0 && v[n - 1].ret == 1 && ce == C &&
		    !fs->opts.compress_force) {
			fs_zhint_set(fs, ino, false);
			break;
		}
	}
	*out = v;
	return n;
}

/* under the lock, the write's bytes in the blocks: hand the pieces to im
 * (a tail only when what follows it in its block is zeros, as past the
 * end of the file) */
static void zpre_attach(struct arb_fs *fs, struct arb_imem *im,
			struct zpre *v, size_t n, uint64_t end,
			uint64_t old_size)
{
	uint32_t bs = fs->bs;

	for (size_t i = 0; i < n; i++) {
		if (v[i].tail) {
			uint8_t *b = fs_dmap_find(im, (end - 1) / bs);
			size_t from = end % bs;
			bool zero = end >= old_size && b;

			for (size_t j = from; zero && from && j < bs; j++)
				zero = !b[j];
			if (!zero)
				continue;
		}
		fs_zc_add(im, v[i].idx, v[i].nblk, v[i].z, v[i].stored);
		v[i].z = NULL;
	}
}

static void zpre_free(struct zpre *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i].z);
	free(v);
}

/*
 * Writes that leave a gap.  A write that begins past the end of the file
 * leaves [size, off) unwritten; one that begins at or before the start of
 * the gap and goes past it fills it from there.  With the kernel's
 * writeback cache the daemon sees writeback, not write(2): the pages of
 * one file go out in several WRITE requests that daemon threads may run
 * in any order, and a snapshot taken between them held a file whose size
 * covered a range not yet written (zeros where the application never
 * wrote any: snapstress.sh, "NUL byte at 0 of 16749").  One interval per
 * file: the union of the gaps, filled from its start.
 */
void fs_gap_note(struct arb_imem *im, uint64_t size, uint64_t off,
		 uint64_t end)
{
	if (off > size) {
		if (!im->gap_end || size < im->gap_start)
			im->gap_start = size;
		if (off > im->gap_end)
			im->gap_end = off;
		im->gap_ns = arb_mono_ns();
	} else if (im->gap_end && off <= im->gap_start &&
		   end > im->gap_start) {
		im->gap_start = end;
	}
	if (im->gap_end && im->gap_start >= im->gap_end)
		im->gap_start = im->gap_end = 0;
}

/*
 * The blocks a write covers whole, copied into buffers of their own and
 * (sum: unless the file compresses) checksummed before the lock: under it, a block not dirty yet just takes
 * its buffer (fs_dirty_block_give), and the flush uses the checksum.  The
 * copy, the allocation (page faults: 2-4 ms per MiB at times under a
 * streaming write) and the checksum were the lock's.  Returns how many
 * blocks from *wfirst (0: none, or no memory: the write copies them under
 * the lock as before); (*bufs)[i] NULL once taken.
 */
static size_t wpre_make(struct arb_fs *fs, const uint8_t *src, uint64_t off,
			uint64_t end, bool sum, uint64_t *wfirst,
			uint8_t ***bufs, uint32_t **sums)
{
	uint32_t bs = fs->bs;
	uint64_t a = (off + bs - 1) / bs, z = end / bs;
	size_t n, i;

	*bufs = NULL;
	*sums = NULL;
	if (z <= a)
		return 0;
	n = (size_t)(z - a);
	*wfirst = a;
	*bufs = calloc(n, sizeof(**bufs));
	*sums = sum ? malloc(n * sizeof(**sums)) : NULL;
	if (!*bufs || (sum && !*sums))
		goto fail;
	for (i = 0; i < n; i++) {
		const uint8_t *p = src + ((a + i) * bs - off);

		(*bufs)[i] = malloc(bs);
		if (!(*bufs)[i])
			goto fail;
		memcpy((*bufs)[i], p, bs);
		if (sum)
			(*sums)[i] = data_csum((*bufs)[i], bs);
	}
	return n;
fail:
	for (i = 0; *bufs && i < n; i++)
		free((*bufs)[i]);
	free(*bufs);
	free(*sums);
	*bufs = NULL;
	*sums = NULL;
	return 0;
}

static void wpre_free(uint8_t **bufs, uint32_t *sums, size_t n)
{
	for (size_t i = 0; bufs && i < n; i++)
		free(bufs[i]);
	free(bufs);
	free(sums);
}

ssize_t arb_fs_write(struct arb_fs *fs, uint64_t ino, const void *buf,
		     size_t size, uint64_t off)
{
	const uint8_t *src = buf;
	struct arb_inode in;
	struct arb_imem *im;
	struct arb_txn *t;
	struct timespec now;
	struct fs_ext cov_ext;
	int cov_ret = -1;
	uint64_t first, last, idx, end, pos, old_size;
	uint32_t bs = fs->bs;
	struct zpre *zpre = NULL;
	struct fs_wb *wb;
	size_t nzpre = 0, nw;
	uint8_t **wbufs;
	uint32_t *wsums;
	uint64_t wfirst = 0;
	ssize_t ret;
	int r;

	if (size == 0)
		return 0;
	if (off >= ARB_MAX_FILE_SIZE)
		return -EFBIG;
	if (size > ARB_MAX_FILE_SIZE - off)
		size = ARB_MAX_FILE_SIZE - off;
	if (size > SSIZE_MAX)
		size = SSIZE_MAX;
	end = off + size;
	/* a small file written whole (cp, untar) is the compressor
	 * thread's, so that its writer does not wait for zlib (compress.c) */
	if (end - off >= 2 * (uint64_t)bs && fs_zhint_get(fs, ino) &&
	    !(fs->zworker_running && off == 0 &&
	      end <= ARB_COMPRESS_MAX_RAM)) {
		fs_zslot_get(fs);
		if (fs_zhint_get(fs, ino)) /* may have changed meanwhile */
			nzpre = zpre_make(fs, ino, src, off, end, &zpre);
		fs_zslot_put(fs);
	}
	/* no checksums for data that will be stored compressed (they
	 * cover the stored bytes): the flush sums what it stores plain */
	nw = wpre_make(fs, src, off, end, !fs_zhint_get(fs, ino), &wfirst,
		       &wbufs, &wsums);
	if (size >= ARB_BULK_WRITE)
		pthread_mutex_lock(&fs->bulk_lock);
	fs_lock(fs);
	r = fs_reg_inode_read(fs, ino, &in, -EINVAL);
	if (r) {
		ret = r;
		goto out;
	}
	first = off / bs;
	last = (end - 1) / bs;
	/* may commit, which frees idle imem entries: look im up after it */
	r = fs_op_begin(fs, &t, ino, (last - first + 2) * bs, 0);
	if (r) {
		ret = r;
		goto out;
	}
	im = fs_imem_get(fs, ino, true);
	if (!im) {
		ret = -ENOMEM;
		arb_txn_end(t);
		goto out;
	}
	/* Until the inode item is written nothing in the tree changed, so
	 * errors here just leave the transaction (memory-only changes are
	 * whole blocks holding the file's current bytes). */
	if (end > fs->max_inline && in.size <= fs->bs &&
	    !fs_dmap_find(im, 0) && fs_has_inline(fs, ino)) {
		uint8_t *b0;
		r = fs_dirty_block(fs, im, &in, 0, true, &b0);
		if (r)
			goto out_cancel;
	}
	old_size = in.size;
	fs_gap_note(im, old_size, off, end);
	for (idx = first, pos = off; idx <= last; idx++) {
		uint64_t bstart = idx * bs, n;
		bool whole = pos == bstart && end >= bstart + bs;
		uint8_t *b;

		if (whole && idx - wfirst < nw) {
			r = fs_dirty_block_give(fs, im, &in, idx, false,
						&cov_ext, &cov_ret,
						&wbufs[idx - wfirst],
						wsums ? &wsums[idx - wfirst]
						      : NULL,
						&b);
			if (r)
				goto out_cancel;
			pos += bs;
			continue;
		}
		r = fs_dirty_block_cov(fs, im, &in, idx, !whole, &cov_ext,
				       &cov_ret, &b);
		if (r)
			goto out_cancel;
		n = bstart + bs - pos;
		if (n > end - pos)
			n = end - pos;
		memcpy(b + (pos - bstart), src + (pos - off), n);
		pos += n;
	}
	if (end > in.size)
		in.size = end;
	if (fs_compress_level(fs, &in)) {
		fs_zhint_set(fs, ino, true);
		zpre_attach(fs, im, zpre, nzpre, end, old_size);
		fs_zw_note(fs, im, &in, first, last);
		/* the file's first 128 KiB do not shrink: as the flush would
		 * (flush_run), but now, so that the next writes of the file
		 * do not compress in vain until then */
		if (nzpre && zpre[0].idx == 0 && zpre[0].ret == 1 &&
		    zpre[0].nblk == ARB_COMPRESS_MAX_RAM / bs &&
		    !fs->opts.compress_force &&
		    !(in.flags & ARB_INODE_COMPRESS)) {
			in.flags |= ARB_INODE_NOCOMPRESS;
			fs_zhint_set(fs, ino, false);
		}
	} else {
		fs_zhint_set(fs, ino, false);
	}
	/* with write_keeps_times the caller (the kernel's writeback cache)
	 * sends the times through setattr, possibly before this write */
	if (!fs->opts.write_keeps_times) {
		fs_now(&now);
		in.mtime = in.ctime = now;
	}
	fs->user_bytes_written += size;
	r = fs_inode_write(fs, t, &in);
	/* after the inode item: a flush of this inode reads its size.
	 * Its data writes are deferred: issued below, without the lock */
	if (!r && fs->dirty_bytes > ARB_FLUSH_BATCH)
		r = fs_flush_some_deferred(fs, t, 2 * (uint64_t)size);
	r = fs_op_end(fs, t, r);
	ret = r ? r : (ssize_t)size;
	goto out;
out_cancel:
	arb_txn_end(t);
	ret = r;
	fs_imem_put_if_idle(fs, im);
out:
	wb = fs->wb_list;
	fs->wb_list = NULL;
	fs_unlock(fs);
	/* before the bulk lock: the next large write waits for these, so
	 * that deferred data never piles up beyond one step per writer.  An
	 * error here fails the next commit; this write's bytes are in */
	(void)fs_wb_run(fs, wb);
	if (size >= ARB_BULK_WRITE)
		pthread_mutex_unlock(&fs->bulk_lock);
	/* after both locks: other writes and fsyncs go on meanwhile.  A
	 * failure is kept by the device and fails the next commit */
	(void)arb_dev_flush_behind(fs->dev, ARB_FLUSH_BEHIND);
	zpre_free(zpre, nzpre);
	wpre_free(wbufs, wsums, nw);
	return ret;
}

/* ---- truncate ---------------------------------------------------------- */

int fs_truncate_prepare(struct arb_fs *fs, struct arb_inode *in, uint64_t size)
{
	struct arb_imem *im;
	uint32_t bs = fs->bs;
	uint8_t *b;
	struct fs_ext e;
	int ret;

	if (size > in->size) {
		/* growing an inline file past max_inline makes it regular */
		if (size > fs->max_inline && in->size <= fs->bs &&
		    fs_has_inline(fs, in->ino)) {
			im = fs_imem_get(fs, in->ino, true);
			if (!im)
				return -ENOMEM;
			im->force_flush = true;
			return fs_dirty_block(fs, im, in, 0, true, &b);
		}
		return 0;
	}
	if (size == in->size || size % bs == 0)
		return 0;
	/* the block that will hold the new end gets its tail zeroed: load it
	 * if a regular extent backs it */
	im = fs_imem_get(fs, in->ino, true);
	if (!im)
		return -ENOMEM;
	if (fs_dmap_find(im, size / bs))
		return 0;
	ret = fs_ext_next(fs, in->ino, size, &e, NULL);
	if (ret < 0)
		goto out;
	if (ret == 0 && e.type == ARB_FILE_EXTENT_REG && e.start <= size) {
		ret = fs_dirty_block(fs, im, in, size / bs, true, &b);
		im->force_flush = true;
	} else {
		ret = 0;
	}
out:
	fs_imem_put_if_idle(fs, im);
	return ret;
}

int fs_truncate(struct arb_fs *fs, struct arb_txn *t, struct arb_inode *in,
		uint64_t size)
{
	struct arb_imem *im = fs_imem_get(fs, in->ino, false);
	uint32_t bs = fs->bs;
	uint8_t *b;
	int ret;

	if (size < in->size) {
		if (im) {
			fs_imem_drop_blocks(fs, im, (size + bs - 1) / bs);
			b = fs_dmap_find_w(im, size / bs);
			if (b && size % bs)
				memset(b + size % bs, 0, bs - size % bs);
		}
		/* an inline extent is cut at size, other extents at the
		 * block boundary after it */
		if (size > 0) {
			struct fs_ext e;
			ret = fs_ext_next(fs, in->ino, 0, &e, NULL);
			if (ret < 0)
				return ret;
			if (ret == 0 && e.type == ARB_FILE_EXTENT_INLINE &&
			    e.end > size) {
				ret = fs_inline_edit(fs, t, in, size, e.end, e.end);
				if (ret)
					return ret;
			}
		}
		ret = fs_drop_extents(fs, t, in, round_up_bs(size, bs),
				      UINT64_MAX);
		if (ret)
			return ret;
	}
	in->size = size;
	if (im)
		fs_imem_put_if_idle(fs, im);
	return 0;
}
