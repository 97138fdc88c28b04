/* SPDX-License-Identifier: MIT */
/*
 * delalloc.c - delayed allocation: turning dirty blocks into extents
 * (at commit, fsync, and past the dirty limit), growing an appended
 * extent in place, and what an fsync may leave in memory.
 * File data as a whole: see file_int.h.
 */
#include <errno.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <stddef.h>
#include <unistd.h>

#include "file_int.h"

/* ---- delayed allocation ------------------------------------------------ */

#define WRITE_CHUNK_BLOCKS 256

/*
 * The got bytes at bytenr, just written for file offset foff, extend the
 * file's extent before them when that one ends at foff in the file and at
 * bytenr on disk, is REG and used whole (offset 0, every byte), held by
 * this file alone, was committed already (arb_grow_data_extent), and the
 * two fit ARB_APPEND_EXTENT_MAX.  So a file that grows by small appends,
 * each made durable by its own commit (a log fsynced after every record),
 * gets one extent per MiB instead of one per commit, and its file, extent
 * and checksum trees grow that much slower (ext4 merges appended extents
 * too).  The bound: an extent is freed only whole, so a truncate into it
 * keeps all of it allocated, as for an extent one 1 MiB write made.
 * "Alone" takes two proofs: one reference on the extent (one leaf points
 * at it), and that leaf reachable from this tree only (e.leaf_private);
 * after a clone the one leaf may be the clone's too, whose copy of the
 * file must not grow.  So the first append after a clone starts a new
 * extent, and the appends after it grow that one.
 * 1 extended, 0 not, <0 error.
 */
#define ARB_APPEND_EXTENT_MAX (1u << 20)
static int extend_prev(struct arb_fs *fs, struct arb_txn *t,
		       struct arb_inode *in, uint64_t foff, uint64_t bytenr,
		       uint64_t got)
{
	struct arb_root *root = fs_root_of(fs, in->ino);
	uint64_t obj = fs_obj(in->ino);
	struct arb_file_extent fe;
	struct arb_key k;
	struct fs_ext e;
	int ret;

	if (foff == 0 || in->ino != fs->ext_hint_ino ||
	    foff != fs->ext_hint_foff || bytenr != fs->ext_hint_disk)
		return 0;
	ret = fs_ext_next(fs, in->ino, foff - 1, &e, NULL);
	if (ret)
		return ret < 0 ? ret : 0;
	if (!e.leaf_private || e.type != ARB_FILE_EXTENT_REG || e.compression ||
	    e.end != foff || e.offset || e.end - e.start != e.disk_num_bytes ||
	    e.ram_bytes != e.disk_num_bytes ||
	    e.disk_bytenr + e.disk_num_bytes != bytenr ||
	    e.disk_num_bytes + got > ARB_APPEND_EXTENT_MAX)
		return 0;
	ret = arb_grow_data_extent(t, e.disk_bytenr, e.disk_num_bytes, got);
	if (ret <= 0)
		return ret;
	e.disk_num_bytes += got;
	e.ram_bytes += got;
	e.end += got;
	e.gen = t->transid;
	fs_ext_to_item(&e, &fe);
	k = (struct arb_key){ obj, ARB_EXTENT_DATA, e.start };
	ret = arb_update_item(t, root, &k, &fe, FE_SIZE);
	return ret ? arb_txn_fail(t, ret) : 1;
}

/* ---- deferred data writes ---------------------------------------------- */

/*
 * A writer's share of the flush (fs_flush_some) used to write its data
 * into the image holding the volume lock: 4 MiB copied, then pwrite into
 * the host's cache (page allocation, a second copy, at times the host's
 * dirty throttling), 2-7 ms per step while a 512 MiB `dd` ran, and every
 * other request waited behind it (stat p99 4.4 ms against btrfs's 0.09).
 * Now the flush decides under the lock what it always did (extents
 * allocated, items, checksums) and hands the dirty blocks themselves to a
 * deferred write of the device (arb_dev_pend_add), which the writer
 * issues once it let go of the lock.  Until it is done a read of those
 * bytes waits for it (or issues it itself), and a commit or an abort
 * issues or waits for all of them first, so no tree that points at the
 * bytes is ever durable before them.
 */
struct fs_wb {
	struct arb_dev_pend p;
	struct arb_dev *dev;
	struct fs_wb *next;    /* the writer's list (fs->wb_list) */
	bool added;            /* given to the device (fs_wb_register) */
	bool written;          /* the device would not take it: written */
	uint8_t *buf;          /* the bytes in one piece, or NULL and */
	uint32_t bs;
	size_t nblk, cap;
	uint8_t **blk;         /* nblk dirty blocks of bs bytes, in order */
};

static int wb_write(struct arb_dev_pend *p)
{
	struct fs_wb *w = (struct fs_wb *)((char *)p - offsetof(struct fs_wb, p));
	size_t chunk = w->nblk < WRITE_CHUNK_BLOCKS ? w->nblk : WRITE_CHUNK_BLOCKS;
	uint8_t *tmp;
	int ret = 0;

	if (w->buf) {
		ret = arb_dev_write(w->dev, w->buf, (size_t)p->len, p->off,
				    ARB_IO_DATA);
		free(w->buf);
		w->buf = NULL;
		return ret;
	}
	/* gathered, so that the device sees large writes (bulk data) */
	tmp = chunk > 1 ? malloc(chunk * w->bs) : NULL;
	if (!tmp)
		chunk = 1;
	for (size_t i = 0; i < w->nblk && !ret; i += chunk) {
		size_t n = w->nblk - i < chunk ? w->nblk - i : chunk;
		const uint8_t *src = w->blk[i];

		if (tmp) {
			for (size_t j = 0; j < n; j++)
				memcpy(tmp + j * w->bs, w->blk[i + j], w->bs);
			src = tmp;
		}
		ret = arb_dev_write(w->dev, src, n * w->bs,
				    p->off + i * (uint64_t)w->bs, ARB_IO_DATA);
	}
	free(tmp);
	for (size_t i = 0; i < w->nblk; i++) {
		free(w->blk[i]);
		w->blk[i] = NULL;
	}
	return ret;
}

static void wb_free(struct fs_wb *w)
{
	if (w->buf)
		free(w->buf);
	for (size_t i = 0; i < w->nblk; i++)
		free(w->blk[i]);
	free(w->blk);
	free(w);
}

/*
 * Defer the write of nblk dirty blocks (taken from their map: the caller
 * drops their entries) or of buf (taken), at bytenr.  Blocks that go on
 * where the last deferred blocks end on disk join that write: a step of
 * random 4 KiB rewrites makes as many one-block extents, mostly next to
 * each other, and the device gets them as one write.  The writes are
 * given to the device at the end of the step (fs_wb_register, before
 * the lock is let go): nothing reads them before.  0, or -ENOMEM with
 * nothing taken.
 */
static int wb_add(struct arb_fs *fs, uint64_t bytenr, struct arb_dblock *b,
		  size_t nblk, uint8_t **buf, size_t len)
{
	struct fs_wb *w = fs->wb_list;

	if (buf || !w || w->added || w->buf ||
	    w->p.off + w->p.len != bytenr) {
		w = calloc(1, sizeof(*w));
		if (!w)
			return -ENOMEM;
		w->p.off = bytenr;
		w->p.run = wb_write;
		w->dev = fs->dev;
		w->bs = fs->bs;
		w->next = fs->wb_list;
		fs->wb_list = w;
	}
	if (buf) {
		w->buf = *buf;
		*buf = NULL;
		w->p.len = len;
		return 0;
	}
	if (w->nblk + nblk > w->cap) {
		size_t cap = w->cap ? w->cap : 64;
		uint8_t **nb;

		while (cap < w->nblk + nblk)
			cap *= 2;
		nb = realloc(w->blk, cap * sizeof(*nb));
		if (!nb) {
			if (!w->nblk) { /* the new one: nothing in it */
				fs->wb_list = w->next;
				free(w);
			}
			return -ENOMEM;
		}
		w->blk = nb;
		w->cap = cap;
	}
	for (size_t i = 0; i < nblk; i++) {
		w->blk[w->nblk++] = b[i].buf;
		b[i].buf = NULL;
	}
	w->p.len += nblk * (uint64_t)fs->bs;
	return 0;
}

/* Give the writes of this step to the device; 0 or the error of one the
 * device would not take, written at once */
static int wb_register(struct arb_fs *fs)
{
	int ret = 0;

	for (struct fs_wb *w = fs->wb_list; w && !w->added; w = w->next) {
		w->added = true;
		if (arb_dev_pend_add(fs->dev, &w->p)) {
			/* no memory for the device's list: now, locked */
			w->written = true;
			w->p.result = wb_write(&w->p);
			if (w->p.result && !ret)
				ret = w->p.result;
		}
	}
	return ret;
}

int fs_wb_run(struct arb_fs *fs, struct fs_wb *list)
{
	struct fs_wb *w, *rev = NULL;
	int ret = 0, r;

	/* in the order they were added: ascending on disk, mostly */
	while (list) {
		w = list;
		list = w->next;
		w->next = rev;
		rev = w;
	}
	while (rev) {
		w = rev;
		rev = w->next;
		r = w->written ? w->p.result : arb_dev_pend_run(fs->dev, &w->p);
		if (r && !ret)
			ret = r;
		wb_free(w);
	}
	return ret;
}

/* Write blocks [first, first+count) (consecutive indexes) as plain
 * extents. */
static int flush_raw(struct arb_fs *fs, struct arb_txn *t, struct arb_inode *in,
		     struct arb_imem *im, size_t first, size_t count)
{
	struct arb_root *root = fs_root_of(fs, in->ino);
	uint64_t obj = fs_obj(in->ino);
	uint32_t bs = fs->bs;
	uint32_t *sums = NULL;
	uint8_t *tmp = NULL;
	size_t pos = 0;
	int ret = 0;

	while (pos < count) {
		uint64_t want = (uint64_t)(count - pos) * bs, bytenr, got;
		uint64_t foff = im->blocks[first + pos].idx * bs;
		struct arb_file_extent fe;
		struct arb_key k = { obj, ARB_EXTENT_DATA, foff };
		size_t nsec, i, j;
		int extended;

		if (want > ARB_MAX_EXTENT)
			want = ARB_MAX_EXTENT;
		ret = arb_alloc_data(t, want, bs, fs->data_hint, &bytenr, &got);
		if (ret)
			break;
		nsec = got / bs;
		if (!nsec || nsec > count - pos) {
			ret = -EUCLEAN;
			break;
		}
		free(sums);
		sums = malloc(nsec * sizeof(*sums));
		if (!sums) {
			ret = -ENOMEM;
			break;
		}
		for (i = 0; i < nsec; i++) {
			const struct arb_dblock *b = &im->blocks[first + pos + i];

			sums[i] = b->csum_ok ? b->csum : data_csum(b->buf, bs);
		}
		if (!fs->wb_defer ||
		    wb_add(fs, bytenr, &im->blocks[first + pos], nsec, NULL,
			   0)) {
			/* written now, with the lock held */
			if (!tmp)
				tmp = malloc((size_t)WRITE_CHUNK_BLOCKS * bs);
			if (!tmp) {
				ret = -ENOMEM;
				break;
			}
			for (i = 0; i < nsec; i += j) {
				size_t n = nsec - i;
				if (n > WRITE_CHUNK_BLOCKS)
					n = WRITE_CHUNK_BLOCKS;
				for (j = 0; j < n; j++)
					memcpy(tmp + j * bs,
					       im->blocks[first + pos + i + j].buf,
					       bs);
				ret = arb_dev_write(fs->dev, tmp, n * bs,
						    bytenr + i * (uint64_t)bs,
						    ARB_IO_DATA);
				if (ret)
					goto out;
			}
		}
		ret = fs_drop_extents(fs, t, in, foff, foff + got);
		if (ret)
			break;
		extended = extend_prev(fs, t, in, foff, bytenr, got);
		if (extended < 0) {
			ret = extended;
			break;
		}
		ret = fs_csum_insert(fs, t, bytenr, sums, nsec, extended);
		if (ret)
			break;
		if (extended)
			goto next;
		memset(&fe, 0, sizeof(fe));
		arb_set_file_extent_f_generation(&fe, t->transid);
		arb_set_file_extent_f_ram_bytes(&fe, got);
		arb_set_file_extent_f_type(&fe, ARB_FILE_EXTENT_REG);
		arb_set_file_extent_f_disk_bytenr(&fe, bytenr);
		arb_set_file_extent_f_disk_num_bytes(&fe, got);
		arb_set_file_extent_f_offset(&fe, 0);
		arb_set_file_extent_f_num_bytes(&fe, got);
		ret = arb_insert_item(t, root, &k, &fe, FE_SIZE);
		if (ret)
			break;
		ret = arb_ref_data(t, bytenr, got, root->id, obj, foff,
				   1);
		if (ret)
			break;
next:
		fs->ext_hint_ino = in->ino;
		fs->ext_hint_foff = foff + got;
		fs->ext_hint_disk = bytenr + got;
		in->nbytes += got;
		fs->data_hint = bytenr + got;
		pos += nsec;
	}
out:
	free(sums);
	free(tmp);
	return ret;
}

/*
 * The n blocks from im->blocks[i] (consecutive), compressed: 0 and *z
 * (stored bytes), 1 they do not shrink by a sector, <0 error.  Their
 * writer may have compressed them already (compress.c).
 */
static int piece_compress(struct arb_fs *fs, struct arb_imem *im, size_t i,
			  size_t n, int level, uint8_t **z, size_t *stored)
{
	uint32_t bs = fs->bs;
	uint8_t *tmp;
	int ret;

	if (fs_zc_take(im, im->blocks[i].idx, (uint32_t)n, z, stored)) {
		if (*z)
			fs->z_early_bytes += n * bs;
		return *z ? 0 : 1;
	}
	if (n < 2)
		return 1;
	tmp = malloc(n * bs);
	if (!tmp)
		return -ENOMEM;
	for (size_t j = 0; j < n; j++)
		memcpy(tmp + j * bs, im->blocks[i + j].buf, bs);
	ret = fs_z_compress(tmp, n * bs, bs, level, z, stored);
	free(tmp);
	return ret;
}

/*
 * The stored bytes of consecutive compressed extents, gathered into one
 * image write: a chunk stores in tens of KiB, and the device counts only
 * large data writes as bulk, whose writeback it starts at once and which
 * it flushes behind a streaming writer (arb_dev_flush_behind); written
 * one by one, a compressed stream would all be flushed by the commit,
 * under the lock.  Written before flush_run returns.
 */
#define ZBATCH_MAX (1u << 20)
struct zbatch {
	uint64_t start;
	size_t len;
	uint8_t *buf; /* ZBATCH_MAX bytes, allocated by the first add */
};

static int zbatch_write(struct arb_fs *fs, struct zbatch *zb)
{
	int ret = 0;

	/* deferred: the batch's buffer goes with it, the next add makes a
	 * new one */
	if (zb->len && (!fs->wb_defer ||
			wb_add(fs, zb->start, NULL, 0, &zb->buf, zb->len)))
		ret = arb_dev_write(fs->dev, zb->buf, zb->len, zb->start,
				    ARB_IO_DATA);
	zb->len = 0;
	return ret;
}

static int zbatch_add(struct arb_fs *fs, struct zbatch *zb, uint64_t bytenr,
		      const uint8_t *z, size_t stored)
{
	int ret;

	if (zb->len && (zb->start + zb->len != bytenr ||
			zb->len + stored > ZBATCH_MAX)) {
		ret = zbatch_write(fs, zb);
		if (ret)
			return ret;
	}
	if (!zb->buf && stored <= ZBATCH_MAX)
		zb->buf = malloc(ZBATCH_MAX);
	if (stored > ZBATCH_MAX || !zb->buf) {
		ret = zbatch_write(fs, zb);
		return ret ? ret : arb_dev_write(fs->dev, z, stored, bytenr,
						 ARB_IO_DATA);
	}
	if (!zb->len)
		zb->start = bytenr;
	memcpy(zb->buf + zb->len, z, stored);
	zb->len += stored;
	return 0;
}

/*
 * Store one compressed extent: the stored bytes z (format.h,
 * ARB_COMPRESS_ZLIB) inflate to ram bytes, of which the item at foff
 * covers [off, off + num) (the flush: 0 and ram; arb_fs_write_encoded a
 * part of an extent as its sender had it); their write gathered in zb,
 * or written at once when zb is NULL.  Replaces what the file range held.
 * 2: no contiguous room for it, nothing changed (the caller writes the
 * bytes plain, which may be cut in smaller extents).
 */
int fs_write_zextent(struct arb_fs *fs, struct arb_txn *t,
		     struct arb_inode *in, uint64_t foff, uint64_t ram,
		     uint64_t off, uint64_t num, const uint8_t *z,
		     size_t stored, struct zbatch *zb)
{
	struct arb_root *root = fs_root_of(fs, in->ino);
	uint64_t obj = fs_obj(in->ino), bytenr, got;
	struct arb_key k = { obj, ARB_EXTENT_DATA, foff };
	struct arb_file_extent fe;
	uint32_t bs = fs->bs;
	size_t nsec = stored / bs;
	uint32_t *sums;
	int ret;

	ret = arb_alloc_data(t, stored, stored, fs->data_hint, &bytenr, &got);
	if (ret == -ENOSPC)
		return 2;
	if (ret)
		return ret;
	if (got != stored)
		return -EUCLEAN;
	sums = malloc(nsec * sizeof(*sums));
	if (!sums)
		return -ENOMEM;
	for (size_t i = 0; i < nsec; i++)
		sums[i] = data_csum(z + i * bs, bs);
	ret = zb ? zbatch_add(fs, zb, bytenr, z, stored)
		 : arb_dev_write(fs->dev, z, stored, bytenr, ARB_IO_DATA);
	if (!ret)
		ret = fs_drop_extents(fs, t, in, foff, foff + num);
	if (!ret)
		ret = fs_csum_insert(fs, t, bytenr, sums, nsec, false);
	free(sums);
	if (ret)
		return ret;
	memset(&fe, 0, sizeof(fe));
	arb_set_file_extent_f_generation(&fe, t->transid);
	arb_set_file_extent_f_ram_bytes(&fe, ram);
	arb_set_file_extent_f_compression(&fe, ARB_COMPRESS_ZLIB);
	arb_set_file_extent_f_type(&fe, ARB_FILE_EXTENT_REG);
	arb_set_file_extent_f_disk_bytenr(&fe, bytenr);
	arb_set_file_extent_f_disk_num_bytes(&fe, stored);
	arb_set_file_extent_f_offset(&fe, off);
	arb_set_file_extent_f_num_bytes(&fe, num);
	ret = arb_insert_item(t, root, &k, &fe, FE_SIZE);
	if (!ret)
		ret = arb_ref_data(t, bytenr, stored, root->id, obj, foff - off,
				   1);
	if (ret)
		return ret;
	/* in this transaction: no commit has a compressed extent without
	 * the bit that keeps older readers out */
	arb_vol_set_features(fs->vol, 0, ARB_INCOMPAT_COMPRESS);
	fs->ext_hint_ino = 0; /* nothing grows a compressed extent */
	fs->data_hint = bytenr + stored;
	in->nbytes += num;
	fs->nr_zextents++;
	fs->z_ram_bytes += ram;
	fs->z_stored_bytes += stored;
	return 0;
}

/*
 * Write blocks [first, first+count) (consecutive indexes), compressed if
 * the file's data is: cut where the file offset is a multiple of
 * ARB_COMPRESS_MAX_RAM, each piece that shrinks by a sector stored
 * compressed, the others together as plain extents.  A file whose first
 * whole piece does not shrink is marked NOCOMPRESS (the caller writes the
 * inode), unless compression was asked for it (chattr +c) or forced.
 */
static int flush_run(struct arb_fs *fs, struct arb_txn *t, struct arb_inode *in,
		     struct arb_imem *im, size_t first, size_t count)
{
	uint32_t bs = fs->bs, cblk = ARB_COMPRESS_MAX_RAM / bs;
	int level = fs_compress_level(fs, in);
	size_t pos = 0, raw = 0, raw_n = 0; /* plain ones waiting */
	struct zbatch zbs = { 0 }, *zb = &zbs;
	int ret = 0, wret;

	if (!level)
		return flush_raw(fs, t, in, im, first, count);
	while (pos < count && !ret) {
		uint64_t idx = im->blocks[first + pos].idx;
		size_t n = cblk - idx % cblk;
		uint8_t *z = NULL;
		size_t stored = 0;

		if (n > count - pos)
			n = count - pos;
		ret = piece_compress(fs, im, first + pos, n, level, &z,
				     &stored);
		if (ret == 0) {
			if (raw_n)
				ret = flush_raw(fs, t, in, im, first + raw,
						raw_n);
			raw_n = 0;
			if (!ret)
				ret = fs_write_zextent(fs, t, in, idx * bs,
						       n * (uint64_t)bs, 0,
						       n * (uint64_t)bs, z,
						       stored, zb);
			free(z);
		}
		if (ret == 1 || ret == 2) {
			/* 1: does not shrink; 2: shrinks, but no room */
			bool shrinks = ret == 2;

			if (!raw_n)
				raw = pos;
			raw_n += n;
			ret = 0;
			if (!shrinks && idx == 0 && n == cblk &&
			    !fs->opts.compress_force &&
			    !(in->flags & ARB_INODE_COMPRESS)) {
				/* and the rest of this run stays plain */
				in->flags |= ARB_INODE_NOCOMPRESS;
				fs_zhint_set(fs, in->ino, false);
				raw_n += count - pos - n;
				pos = count;
				break;
			}
		}
		pos += n;
	}
	if (!ret && raw_n)
		ret = flush_raw(fs, t, in, im, first + raw, raw_n);
	/* the data of the items inserted: written before anything reads
	 * them (readers wait for the lock) and before the commit */
	wret = zbatch_write(fs, zb);
	free(zb->buf);
	return ret ? ret : wret;
}

/* Write the first n dirty blocks of im, a run of consecutive ones at a
 * time. */
static int flush_runs(struct arb_fs *fs, struct arb_txn *t,
		      struct arb_inode *in, struct arb_imem *im, size_t n)
{
	size_t i, j;
	int ret;

	for (i = 0; i < n; i = j) {
		for (j = i + 1; j < n &&
				im->blocks[j].idx == im->blocks[j - 1].idx + 1;
		     j++)
			;
		ret = flush_run(fs, t, in, im, i, j - i);
		if (ret)
			return ret;
	}
	return 0;
}

/* does ino have any extent at or after pos */
static int has_extent_from(struct arb_fs *fs, uint64_t ino, uint64_t pos,
			   bool *yes)
{
	struct fs_ext e;
	int ret = fs_ext_next(fs, ino, pos, &e, NULL);

	if (ret < 0)
		return ret;
	*yes = ret == 0;
	return 0;
}

/*
 * Is the file (its dirty block 0 alone, nothing after it) stored inline?
 * 1 yes: plain when *z is NULL, else *z holds the *zlen bytes of its
 * compressed form (files of at most a sector that compress to at most
 * max_inline bytes, or by an eighth when they fit plain); 0 no; <0 error.
 */
static int inline_plan(struct arb_fs *fs, const struct arb_inode *in,
		       const struct arb_imem *im, bool later, uint8_t **z,
		       size_t *zlen)
{
	int level = fs_compress_level(fs, in);
	size_t cap;
	int ret;

	*z = NULL;
	if (im->nr != 1 || im->blocks[0].idx != 0 || later ||
	    in->size > fs->bs)
		return 0;
	if (level && in->size >= 64) {
		cap = in->size <= fs->max_inline ? in->size - in->size / 8
						 : fs->max_inline;
		*z = malloc(cap);
		if (!*z)
			return -ENOMEM;
		ret = fs_z_compress_to(im->blocks[0].buf, in->size, level, *z,
				       cap, zlen);
		if (ret == 0)
			return 1;
		free(*z);
		*z = NULL;
		if (ret < 0)
			return ret;
	}
	return in->size <= fs->max_inline;
}

int fs_flush_inode(struct arb_fs *fs, struct arb_txn *t, struct arb_imem *im)
{
	struct arb_inode in;
	uint32_t bs = fs->bs;
	uint8_t *z;
	size_t zlen;
	bool later;
	int ret;

	if (!im->nr)
		return 0;
	ret = fs_inode_read(fs, im->ino, &in);
	if (ret == -ENOENT) {
		fs_imem_drop_blocks(fs, im, 0);
		return 0;
	}
	if (ret)
		return ret;
	/* nothing past the block holding i_size may be dirty */
	fs_imem_drop_blocks(fs, im, (in.size + bs - 1) / bs);
	if (!im->nr)
		return 0;

	ret = has_extent_from(fs, in.ino, bs, &later);
	if (ret)
		return ret;
	ret = inline_plan(fs, &in, im, later, &z, &zlen);
	if (ret < 0)
		return ret;
	if (ret) {
		struct arb_key k = { fs_obj(in.ino), ARB_EXTENT_DATA, 0 };
		uint32_t n = z ? (uint32_t)zlen : (uint32_t)in.size;
		uint32_t isz = ARB_FILE_EXTENT_INLINE_HDR + n;
		uint8_t *item;

		ret = fs_drop_extents(fs, t, &in, 0, bs);
		if (ret) {
			free(z);
			return ret;
		}
		if (in.size) {
			struct arb_file_extent *fe;

			item = calloc(1, isz);
			if (!item) {
				free(z);
				return -ENOMEM;
			}
			fe = (struct arb_file_extent *)item;
			arb_set_file_extent_f_generation(fe, t->transid);
			arb_set_file_extent_f_ram_bytes(fe, in.size);
			arb_set_file_extent_f_type(fe, ARB_FILE_EXTENT_INLINE);
			if (z) {
				arb_set_file_extent_f_compression(
					fe, ARB_COMPRESS_ZLIB);
				arb_vol_set_features(fs->vol, 0,
						     ARB_INCOMPAT_COMPRESS);
				fs->nr_zextents++;
				fs->z_ram_bytes += in.size;
				fs->z_stored_bytes += zlen;
			}
			memcpy(item + ARB_FILE_EXTENT_INLINE_HDR,
			       z ? z : im->blocks[0].buf, n);
			ret = arb_insert_item(t, fs_root_of(fs, in.ino), &k, item, isz);
			free(item);
			if (ret) {
				free(z);
				return ret;
			}
			in.nbytes += in.size;
		}
		free(z);
	} else {
		ret = flush_runs(fs, t, &in, im, im->nr);
		if (ret)
			return ret;
	}
	ret = fs_inode_write(fs, t, &in);
	if (ret)
		return ret;
	fs_imem_drop_blocks(fs, im, 0);
	im->force_flush = false;
	im->fsync_want = false;
	return 0;
}

/*
 * May an fsync's commit leave im's delayed data in memory, and with what
 * size in the tree?  Returns that size, or 0 when the data must be written.
 *
 * Blocks wholly inside the size the file had when its first dirty block
 * was made (disk_size) are overwrites: the tree keeps the old data, which
 * an unsynced overwrite may show after a crash, as ext4 and btrfs do.
 * Past the first block that is not, none of the file's new bytes are on
 * disk, so the committed size stops there (btrfs's disk_i_size): a crash
 * shows the file as it was before those appends, never a tail of zeros.
 * Files small enough to end up inline are written (and fsync_leave writes
 * the fsynced ones and those truncate or fallocate dirtied).
 */
static uint64_t fsync_keep_size(struct arb_fs *fs, const struct arb_imem *im,
				uint64_t size)
{
	size_t k;
	uint64_t keep;

	if (im->disk_size <= fs->bs) /* may be inline: compressed */
		return 0;
	k = fs_dmap_lower(im, im->disk_size / fs->bs);
	if (k == im->nr)
		return size;
	keep = im->blocks[k].idx * (uint64_t)fs->bs;
	if (keep < im->disk_size)
		keep = im->disk_size;
	return keep < size ? keep : size;
}

/*
 * An fsync's commit leaves im's data in memory if it may; when the file
 * grew, the tree gets the size its on-disk data covers, and the real size
 * goes to im->held_size until fs_fsync_restore_sizes.  1: left, 0: write it.
 */
static int fsync_leave(struct arb_fs *fs, struct arb_txn *t,
		       struct arb_imem *im)
{
	struct arb_inode in;
	uint64_t keep;
	int ret;

	if (im->ino == fs->fsync_ino || im->fsync_want || im->force_flush ||
	    !im->nr)
		return 0;
	ret = fs_inode_read(fs, im->ino, &in);
	if (ret)
		return ret == -ENOENT ? 0 : ret;
	keep = fsync_keep_size(fs, im, in.size);
	if (!keep)
		return 0;
	if (keep < in.size) {
		bool beyond;
		/* an extent written earlier past keep (writes out of order)
		 * would sit past the committed size: write the file */
		ret = has_extent_from(fs, in.ino, round_up_bs(keep, fs->bs),
				      &beyond);
		if (ret || beyond)
			return ret;
		im->held_size = in.size;
		in.size = keep;
		ret = fs_inode_write(fs, t, &in);
		if (ret)
			return ret;
	}
	return 1;
}

int fs_fsync_restore_sizes(struct arb_fs *fs)
{
	struct arb_imem *im;
	struct arb_inode in;
	struct arb_txn *t = NULL;
	int ret = 0;

	for (im = fs->dirty_list; im; im = im->dirty_next) {
		if (!im->held_size)
			continue;
		/* a plain transaction, not fs_op_begin: that may commit,
		 * and a commit now would write the file with the held size
		 * and drop its appended blocks */
		if (!t) {
			ret = arb_txn_begin(fs->vol, &t);
			if (ret)
				break;
		}
		ret = fs_inode_read(fs, im->ino, &in);
		if (!ret) {
			in.size = im->held_size;
			ret = fs_inode_write(fs, t, &in);
		}
		if (ret) {
			arb_txn_fail(t, ret);
			break;
		}
		im->held_size = 0;
	}
	if (!t)
		return ret;
	return fs_op_end(fs, t, ret);
}

/*
 * Write the first max dirty blocks of im as extents and forget them; the
 * rest stay delayed.  A file that may still end up inline is written whole
 * (fs_flush_inode decides inline against the whole file).
 */
static int flush_inode_head(struct arb_fs *fs, struct arb_txn *t,
			    struct arb_imem *im, size_t max)
{
	struct arb_inode in;
	uint64_t first_idx, last_idx;
	int ret;

	if (im->nr <= max)
		return fs_flush_inode(fs, t, im);
	ret = fs_inode_read(fs, im->ino, &in);
	if (ret)
		return ret == -ENOENT ? fs_flush_inode(fs, t, im) : ret;
	fs_imem_drop_blocks(fs, im, (in.size + fs->bs - 1) / fs->bs);
	if (im->nr <= max || in.size <= fs->bs)
		return fs_flush_inode(fs, t, im);
	ret = flush_runs(fs, t, &in, im, max);
	if (ret)
		return ret;
	ret = fs_inode_write(fs, t, &in);
	if (ret)
		return ret;
	first_idx = im->blocks[0].idx;
	last_idx = im->blocks[max - 1].idx;
	fs_dmap_drop_range(fs, im, first_idx, last_idx + 1);
	return 0;
}

/*
 * A writer's share of the backlog: at least want bytes (rounded up to
 * ARB_FLUSH_STEP), oldest dirty files first.  Bounded so that one write
 * holds the volume lock for one step of I/O, not for a whole batch:
 * an fsync of another file waits for the lock behind it.
 */
int fs_flush_some(struct arb_fs *fs, struct arb_txn *t, uint64_t want)
{
	struct arb_imem *im, *next;
	uint64_t budget, before;
	int ret;

	if (want < ARB_FLUSH_STEP)
		want = ARB_FLUSH_STEP;
	budget = (want + fs->bs - 1) / fs->bs;
	for (im = fs->dirty_list; im && budget && fs->dirty_bytes;
	     im = next) {
		next = im->dirty_next;
		before = im->nr;
		ret = flush_inode_head(fs, t, im, (size_t)budget);
		if (ret) {
			arb_log(ARB_LOG_ERR,
				"writing delayed data of inode %llu failed (%d)",
				(unsigned long long)im->ino, ret);
			return ret;
		}
		budget -= before > budget ? budget : before;
		/* not put_if_idle: the caller may hold this entry */
	}
	return 0;
}

int fs_flush_some_deferred(struct arb_fs *fs, struct arb_txn *t,
			   uint64_t want)
{
	int ret, rret;

	fs->wb_defer = true;
	ret = fs_flush_some(fs, t, want);
	fs->wb_defer = false;
	/* even after an error: the abort that follows waits for them */
	rret = wb_register(fs);
	return ret ? ret : rret;
}

int fs_flush_all(struct arb_fs *fs, struct arb_txn *t)
{
	int ret;

	struct arb_imem *im, *next;

	/* only entries that got dirty blocks since their last flush; each
	 * leaves the list when put_if_idle finds it clean.  For an fsync,
	 * other files' pure overwrites stay in memory for a later commit. */
	for (im = fs->dirty_list; im; im = next) {
		next = im->dirty_next;
		if (fs->fsync_ino) {
			ret = fsync_leave(fs, t, im);
			if (ret < 0)
				return ret;
			if (ret)
				continue;
		}
		ret = fs_flush_inode(fs, t, im);
		if (ret) {
			arb_log(ARB_LOG_ERR,
				"writing delayed data of inode %llu "
				"failed (%d)",
				(unsigned long long)im->ino, ret);
			return ret;
		}
		fs_imem_put_if_idle(fs, im);
	}
	return 0;
}
