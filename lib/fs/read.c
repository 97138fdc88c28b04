/* SPDX-License-Identifier: MIT */
/*
 * read.c - reading file data (planned under the lock, read after it)
 * and lseek SEEK_DATA/SEEK_HOLE.
 * File data as a whole: see file_int.h.
 */
#include <errno.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <unistd.h>

#include "file_int.h"

/* ---- reading ----------------------------------------------------------- */

/*
 * Reading data.  Under the lock, a read finds where its bytes are: delayed
 * blocks and inline extents are copied at once, and for each piece of a
 * REG extent the sector range and its checksums are looked up (struct
 * rd_piece).  The disk reads and checksum checks of those pieces happen
 * after the lock is dropped (arb_fs_read, between arb_data_read_begin and
 * _end, which keep the sectors from being reused meanwhile), so a cold
 * read neither waits for nor holds up other operations.  A caller that
 * needs the bytes under the lock (dirty_block) passes no plan and reads at
 * once.
 */
struct rd_piece {
	uint64_t ino, foff;     /* for messages */
	uint64_t sec;           /* disk address of the first sector */
	size_t nsec;
	size_t skip, len;       /* the wanted bytes within the sectors */
	/* a compressed extent (the sectors are all of it): skip counts in
	 * the ram bytes it inflates to */
	size_t ram;
	uint8_t *dst;
	uint32_t *sums;
	uint8_t *have;
};

struct rd_plan {
	struct rd_piece *p;
	size_t nr, cap;
};

static void rd_piece_free(struct rd_piece *p)
{
	free(p->sums);
	free(p->have);
}

static void rd_plan_free(struct rd_plan *pl)
{
	for (size_t i = 0; i < pl->nr; i++)
		rd_piece_free(&pl->p[i]);
	free(pl->p);
	pl->p = NULL;
	pl->nr = pl->cap = 0;
}

/*
 * Under the lock: the sectors of len bytes of a REG extent at disk address
 * disk (file offset foff) and their checksums; of a compressed extent
 * (e->compression), all its sectors, and disk counts in the bytes they
 * inflate to from the start of the extent.
 */
static int rd_piece_prepare(struct arb_fs *fs, uint64_t ino, uint64_t foff,
			    const struct fs_ext *e, uint64_t disk, size_t len,
			    uint8_t *dst, struct rd_piece *p)
{
	uint32_t bs = fs->bs;
	uint64_t a = disk / bs * bs, b = round_up_bs(disk + len, bs);
	int ret;

	memset(p, 0, sizeof(*p));
	p->ino = ino;
	p->foff = foff;
	p->sec = a;
	p->nsec = (b - a) / bs;
	p->skip = disk - a;
	if (e->compression) {
		p->sec = e->disk_bytenr;
		p->nsec = e->disk_num_bytes / bs;
		p->skip = disk;
		p->ram = e->ram_bytes;
	}
	p->len = len;
	p->dst = dst;
	p->sums = malloc(p->nsec * sizeof(*p->sums));
	p->have = malloc(p->nsec);
	if (!p->sums || !p->have) {
		rd_piece_free(p);
		return -ENOMEM;
	}
	ret = fs_csum_lookup(fs, p->sec, p->nsec, p->sums, p->have);
	if (ret)
		rd_piece_free(p);
	return ret;
}

/*
 * The stored sectors of a compressed extent, their checksums good:
 * inflate them and copy the wanted bytes.  A stream that does not
 * inflate to its ram bytes was written wrong or crafted: -EIO, named.
 */
static int rd_inflate(struct arb_fs *fs, const struct rd_piece *p,
		      const uint8_t *stored)
{
	bool whole = p->skip == 0 && p->len == p->ram;
	uint8_t *ram = whole ? p->dst : malloc(p->ram);
	int ret;

	if (!ram)
		return -ENOMEM;
	ret = fs_z_decompress(stored, p->nsec * (size_t)fs->bs, ram, p->ram);
	if (ret == -EIO)
		arb_log(ARB_LOG_ERR,
			"inode %llu offset %llu: compressed data at disk %llu "
			"does not inflate to its %zu bytes",
			(unsigned long long)p->ino,
			(unsigned long long)(p->foff - p->skip),
			(unsigned long long)p->sec, p->ram);
	else if (!ret && !whole)
		memcpy(p->dst, ram + p->skip, p->len);
	if (!whole)
		free(ram);
	return ret;
}

/* With or without the lock: read the sectors, check them, copy the bytes. */
static int rd_piece_read(struct arb_fs *fs, const struct rd_piece *p)
{
	uint32_t bs = fs->bs;
	/* whole sectors (every piece of a sector-aligned read) go straight
	 * into the caller's buffer: a bad one fails the whole read anyway */
	bool direct = !p->ram && p->skip == 0 && p->len == p->nsec * bs;
	uint8_t *tmp;
	int ret;

	tmp = direct ? p->dst : malloc(p->nsec * bs);
	if (!tmp)
		return -ENOMEM;
	ret = arb_dev_read(fs->dev, tmp, p->nsec * bs, p->sec, ARB_IO_DATA);
	if (ret) {
		arb_log(ARB_LOG_ERR,
			"inode %llu offset %llu: read error %d at disk %llu",
			(unsigned long long)p->ino, (unsigned long long)p->foff,
			ret, (unsigned long long)p->sec);
		goto out;
	}
	for (size_t i = 0; i < p->nsec; i++) {
		uint32_t c = data_csum(tmp + i * bs, bs);
		if (!p->have[i] || c != p->sums[i]) {
			arb_log(ARB_LOG_ERR,
				"inode %llu offset %llu: %s at disk %llu",
				(unsigned long long)p->ino,
				(unsigned long long)(p->foff - p->skip +
						     (p->ram ? 0 : i * bs)),
				p->have[i] ? "data checksum mismatch"
					   : "data checksum missing",
				(unsigned long long)(p->sec + i * bs));
			ret = -EIO;
			goto out;
		}
	}
	if (p->ram) {
		ret = rd_inflate(fs, p, tmp);
		goto out;
	}
	if (!direct)
		memcpy(p->dst, tmp + p->skip, p->len);
out:
	if (!direct)
		free(tmp);
	return ret;
}

/* len bytes of a REG extent: read now (plan NULL) or add to the plan */
static int read_disk(struct arb_fs *fs, uint64_t ino, uint64_t foff,
		     const struct fs_ext *e, uint64_t disk, size_t len,
		     uint8_t *dst, struct rd_plan *plan)
{
	struct rd_piece p;
	int ret;

	ret = rd_piece_prepare(fs, ino, foff, e, disk, len, dst, &p);
	if (ret)
		return ret;
	if (!plan) {
		ret = rd_piece_read(fs, &p);
		rd_piece_free(&p);
		return ret;
	}
	if (plan->nr == plan->cap) {
		size_t ncap = plan->cap ? plan->cap * 2 : 8;
		struct rd_piece *np = realloc(plan->p, ncap * sizeof(*np));
		if (!np) {
			rd_piece_free(&p);
			return -ENOMEM;
		}
		plan->p = np;
		plan->cap = ncap;
	}
	plan->p[plan->nr++] = p;
	return 0;
}

/* Read [off, off+len) from the tree only (no delayed data). */
static int read_tree(struct arb_fs *fs, uint64_t ino, uint64_t off,
		     size_t len, uint8_t *buf, struct rd_plan *plan)
{
	uint64_t end = off + len, pos = off;
	uint8_t *inl = NULL;
	struct fs_ext e;
	int ret = 0;

	/* every byte is written once: holes and preallocated ranges zeroed,
	 * extents copied or read (by the plan, later, without the lock) */
	while (pos < end) {
		uint64_t a, b;

		if (!inl) {
			inl = malloc(fs->bs);
			if (!inl)
				return -ENOMEM;
		}
		ret = fs_ext_next(fs, ino, pos, &e, inl);
		if (ret < 0)
			break;
		if (ret == 1 || e.start >= end) {
			ret = 0;
			break;
		}
		a = e.start > pos ? e.start : pos;
		b = e.end < end ? e.end : end;
		memset(buf + (pos - off), 0, a - pos);
		if (e.type == ARB_FILE_EXTENT_INLINE) {
			uint64_t lim = e.end < fs->bs ? e.end : fs->bs;
			/* [a, c) from the item, [c, b) past its bytes */
			uint64_t c = b < lim ? b : lim;
			if (c < a)
				c = a;
			memcpy(buf + (a - off), inl + a, c - a);
			memset(buf + (c - off), 0, b - c);
		} else if (e.type == ARB_FILE_EXTENT_REG) {
			ret = read_disk(fs, ino, a, &e,
					(e.compression ? 0 : e.disk_bytenr) +
						e.offset + (a - e.start),
					b - a, buf + (a - off), plan);
			if (ret)
				break;
		} else {
			memset(buf + (a - off), 0, b - a);
		}
		pos = b;
	}
	if (!ret && pos < end)
		memset(buf + (pos - off), 0, end - pos);
	free(inl);
	return ret;
}

/* Read through delayed data: runs of clean blocks come from the tree. */
static int read_range(struct arb_fs *fs, struct arb_imem *im, uint64_t ino,
		      uint64_t off, size_t len, uint8_t *buf,
		      struct rd_plan *plan)
{
	uint64_t pos = off, end = off + len;
	uint32_t bs = fs->bs;
	int ret;

	while (pos < end) {
		uint64_t idx = pos / bs, next;
		size_t i = im ? fs_dmap_lower(im, idx) : 0;

		if (im && i < im->nr && im->blocks[i].idx == idx) {
			next = (idx + 1) * bs;
			if (next > end)
				next = end;
			memcpy(buf + (pos - off),
			       im->blocks[i].buf + (pos - idx * bs),
			       next - pos);
		} else {
			next = (im && i < im->nr) ? im->blocks[i].idx * bs
						  : end;
			if (next > end)
				next = end;
			ret = read_tree(fs, ino, pos, next - pos,
					buf + (pos - off), plan);
			if (ret)
				return ret;
		}
		pos = next;
	}
	return 0;
}

/*
 * Does a regular or preallocated extent hold block idx?  *e and *e_ret
 * carry the extent found last (*e_ret < 0: none looked up yet), so that a
 * write of many blocks looks one up per extent it crosses, not per block.
 * An inline extent does not count: its bytes are fewer than a block's.
 * Returns 0 or a negative errno.
 */
static int block_covered(struct arb_fs *fs, const struct arb_inode *in,
			 uint64_t idx, struct fs_ext *e, int *e_ret,
			 bool *covered)
{
	uint64_t pos = idx * (uint64_t)fs->bs;

	*covered = false;
	/* nothing allocated (a new file): nothing to look up */
	if (in->nbytes == 0)
		return 0;
	if (*e_ret < 0 || (*e_ret == 0 && e->end <= pos)) {
		*e_ret = fs_ext_next(fs, in->ino, pos, e, NULL);
		if (*e_ret < 0)
			return *e_ret;
	}
	*covered = *e_ret == 0 && e->start <= pos &&
		   e->type != ARB_FILE_EXTENT_INLINE;
	return 0;
}

/*
 * Make block idx dirty, loading its current contents; returns its buffer.
 * e, e_ret: the block_covered() cache of the caller, or NULL.
 */
int fs_dirty_block_cov(struct arb_fs *fs, struct arb_imem *im,
		       const struct arb_inode *in, uint64_t idx, bool load,
		       struct fs_ext *e, int *e_ret, uint8_t **out)
{
	return fs_dirty_block_give(fs, im, in, idx, load, e, e_ret, NULL,
				   NULL, out);
}

int fs_dirty_block_give(struct arb_fs *fs, struct arb_imem *im,
			const struct arb_inode *in, uint64_t idx, bool load,
			struct fs_ext *e, int *e_ret, uint8_t **give,
			const uint32_t *csum, uint8_t **out)
{
	uint8_t *buf = fs_dmap_find_w(im, idx);
	struct fs_ext e1;
	int e1_ret = -1;
	bool covered;
	int ret;

	if (buf) {
		if (give)
			memcpy(buf, *give, fs->bs);
		goto done;
	}
	if (!e) {
		e = &e1;
		e_ret = &e1_ret;
	}
	ret = block_covered(fs, in, idx, e, e_ret, &covered);
	if (ret)
		return ret;
	buf = give ? *give : malloc(fs->bs);
	if (!buf)
		return -ENOMEM;
	if (!im->nr) {
		/* the first dirty block since the last flush */
		im->disk_size = in->size;
		im->force_flush = false;
	}
	if (give) {
		/* the writer's bytes, whole */
	} else if (load && idx * (uint64_t)fs->bs < in->size) {
		ret = read_tree(fs, in->ino, idx * (uint64_t)fs->bs, fs->bs,
				buf, NULL);
		if (ret) {
			free(buf);
			return ret;
		}
	} else if (load) {
		memset(buf, 0, fs->bs);
	} /* else the caller writes the whole block */
	ret = fs_dmap_insert(fs, im, idx, buf, covered);
	if (ret) {
		if (!give)
			free(buf);
		return ret;
	}
	if (give)
		*give = NULL;
done:
	if (csum) {
		size_t i = fs_dmap_lower(im, idx);

		im->blocks[i].csum = *csum;
		im->blocks[i].csum_ok = true;
	}
	*out = buf;
	return 0;
}

int fs_dirty_block(struct arb_fs *fs, struct arb_imem *im,
		   const struct arb_inode *in, uint64_t idx, bool load,
		   uint8_t **out)
{
	return fs_dirty_block_cov(fs, im, in, idx, load, NULL, NULL, out);
}

/* Read ino, which must be a regular file: -EISDIR for a directory,
 * not_reg for anything else (read/write: -EINVAL, fallocate: -ENODEV). */
int fs_reg_inode_read(struct arb_fs *fs, uint64_t ino, struct arb_inode *in,
		      int not_reg)
{
	int ret = fs_inode_read(fs, ino, in);

	if (ret)
		return ret;
	if (S_ISDIR(in->mode))
		return -EISDIR;
	return S_ISREG(in->mode) ? 0 : not_reg;
}

bool fs_has_inline(struct arb_fs *fs, uint64_t ino)
{
	struct fs_ext e;

	return fs_ext_next(fs, ino, 0, &e, NULL) == 0 &&
	       e.type == ARB_FILE_EXTENT_INLINE;
}

static bool relatime_due(const struct arb_inode *in,
			 const struct timespec *now)
{
	const struct timespec *a = &in->atime;

	if (a->tv_sec < in->mtime.tv_sec ||
	    (a->tv_sec == in->mtime.tv_sec && a->tv_nsec <= in->mtime.tv_nsec))
		return true;
	if (a->tv_sec < in->ctime.tv_sec ||
	    (a->tv_sec == in->ctime.tv_sec && a->tv_nsec <= in->ctime.tv_nsec))
		return true;
	return now->tv_sec - a->tv_sec >= 24 * 3600;
}

ssize_t arb_fs_read(struct arb_fs *fs, uint64_t ino, void *buf, size_t size,
		    uint64_t off)
{
	return fs_read(fs, ino, buf, size, off, true);
}

ssize_t fs_read(struct arb_fs *fs, uint64_t ino, void *buf, size_t size,
		uint64_t off, bool atime)
{
	struct rd_plan plan = { 0 };
	struct arb_inode in;
	struct arb_txn *t;
	struct timespec now;
	ssize_t ret;
	int r;

	if (size > SSIZE_MAX)
		size = SSIZE_MAX;
	fs_lock(fs);
	r = fs_reg_inode_read(fs, ino, &in, -EINVAL);
	if (r) {
		ret = r;
		goto out;
	}
	if (off >= in.size || size == 0) {
		ret = 0;
		goto out;
	}
	if (size > in.size - off)
		size = in.size - off;
	r = read_range(fs, fs_imem_get(fs, ino, false), ino, off, size, buf,
		       &plan);
	if (r) {
		ret = r;
		goto out;
	}
	ret = (ssize_t)size;
	fs_now(&now);
	if (atime && !fs->opts.noatime && !(in.flags & ARB_INODE_NOATIME) &&
	    !fs->readonly && relatime_due(&in, &now) &&
	    fs_op_begin(fs, &t, ino, 0, 0) == 0) {
		in.atime = now;
		r = fs_op_end(fs, t, fs_inode_write(fs, t, &in));
		if (r)
			ret = r;
	}
	if (ret >= 0 && plan.nr) {
		/* the disk reads, without the lock */
		unsigned epoch = arb_data_read_begin(fs->vol);

		fs_unlock(fs);
		for (size_t i = 0; i < plan.nr && ret >= 0; i++) {
			r = rd_piece_read(fs, &plan.p[i]);
			if (r)
				ret = r;
		}
		arb_data_read_end(fs->vol, epoch);
		rd_plan_free(&plan);
		return ret;
	}
out:
	fs_unlock(fs);
	rd_plan_free(&plan);
	return ret;
}

/* [off, off + len) of ino, inside its size, read with the lock held
 * (delayed blocks included), checksums checked */
int fs_read_locked(struct arb_fs *fs, uint64_t ino, uint64_t off, size_t len,
		   void *buf)
{
	return read_range(fs, fs_imem_get(fs, ino, false), ino, off, len, buf,
			  NULL);
}

/* ---- lseek ------------------------------------------------------------- */

/* first data byte at or after pos (PREALLOC reads as a hole) */
static int next_data(struct arb_fs *fs, struct arb_imem *im, uint64_t ino,
		     uint64_t pos, uint64_t *out)
{
	uint64_t best = UINT64_MAX, p = pos;
	struct fs_ext e;
	int ret;

	for (;;) {
		ret = fs_ext_next(fs, ino, p, &e, NULL);
		if (ret < 0)
			return ret;
		if (ret == 1)
			break;
		if (e.type != ARB_FILE_EXTENT_PREALLOC) {
			best = e.start > pos ? e.start : pos;
			break;
		}
		p = e.end;
	}
	if (im) {
		size_t i = fs_dmap_lower(im, pos / fs->bs);
		if (i < im->nr) {
			uint64_t d = im->blocks[i].idx * fs->bs;
			if (d < pos)
				d = pos;
			if (d < best)
				best = d;
		}
	}
	*out = best;
	return 0;
}

/* end of the data that covers pos, or pos if pos is in a hole */
static int data_end(struct arb_fs *fs, struct arb_imem *im, uint64_t ino,
		    uint64_t pos, uint64_t *out)
{
	struct fs_ext e;
	int ret;

	for (;;) {
		bool moved = false;

		ret = fs_ext_next(fs, ino, pos, &e, NULL);
		if (ret < 0)
			return ret;
		if (ret == 0 && e.start <= pos &&
		    e.type != ARB_FILE_EXTENT_PREALLOC) {
			pos = e.end;
			moved = true;
		}
		if (fs_dmap_find(im, pos / fs->bs)) {
			pos = (pos / fs->bs + 1) * fs->bs;
			moved = true;
		}
		if (!moved)
			break;
	}
	*out = pos;
	return 0;
}

int64_t arb_fs_lseek(struct arb_fs *fs, uint64_t ino, uint64_t off,
		     int whence)
{
	struct arb_inode in;
	struct arb_imem *im;
	uint64_t pos;
	int64_t ret;
	int r;

	if (whence != SEEK_DATA && whence != SEEK_HOLE)
		return -EINVAL;
	fs_lock(fs);
	r = fs_inode_read(fs, ino, &in);
	if (r) {
		ret = r;
		goto out;
	}
	if (off >= in.size) {
		ret = -ENXIO;
		goto out;
	}
	im = fs_imem_get(fs, ino, false);
	if (whence == SEEK_DATA) {
		r = next_data(fs, im, ino, off, &pos);
		if (r)
			ret = r;
		else
			ret = pos >= in.size ? -ENXIO : (int64_t)pos;
	} else {
		r = data_end(fs, im, ino, off, &pos);
		if (r)
			ret = r;
		else
			ret = (int64_t)(pos < in.size ? pos : in.size);
	}
out:
	fs_unlock(fs);
	return ret;
}
