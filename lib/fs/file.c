/* SPDX-License-Identifier: MIT */
/*
 * file.c - file data: read, write, truncate, fallocate, lseek, delayed
 * allocation and data checksums.
 *
 * EXTENT_DATA items (format.h) map file ranges; everything not covered is
 * a hole.  Every REG/PREALLOC item boundary is a multiple of the sector
 * size (partial sectors are handled by rewriting the whole sector), and an
 * INLINE item only ever sits at offset 0 of a file of at most max_inline
 * bytes (it may coexist with later extents only transiently).
 *
 * Data checksums: one u32 per sector, the standard crc32c of the sector
 * (~arb_crc32c(~0u, sector, sectorsize), the same convention as tree node
 * checksums and btrfs, so a zeroed sector does not checksum to 0), stored little-endian in EXTENT_CSUM items of the checksum tree keyed by
 * the disk address of their first sector; at most ARB_CSUMS_PER_ITEM per
 * item, one set of items per written extent.  PREALLOC extents have none.
 * The core deletes them when the extent's last reference goes.
 */
#include <errno.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <unistd.h>

#include "fs_int.h"

#ifndef SEEK_DATA
#define SEEK_DATA 3
#define SEEK_HOLE 4
#endif

#define FE_SIZE ((uint32_t)sizeof(struct arb_file_extent))

#define data_csum fs_data_csum

static inline uint64_t round_up_bs(uint64_t v, uint32_t bs)
{
	return (v + bs - 1) / bs * bs;
}

/* ---- the dirty block map ----------------------------------------------- */

/* index of the first block with idx >= idx */
static size_t dmap_lower(const struct arb_imem *im, uint64_t idx)
{
	size_t lo = 0, hi = im->nr;

	/* appends are the common case */
	if (hi && im->blocks[hi - 1].idx < idx)
		return hi;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (im->blocks[mid].idx < idx)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static uint8_t *dmap_find(const struct arb_imem *im, uint64_t idx)
{
	size_t i;

	if (!im)
		return NULL;
	i = dmap_lower(im, idx);
	return (i < im->nr && im->blocks[i].idx == idx) ? im->blocks[i].buf
							 : NULL;
}

static int dmap_insert(struct arb_fs *fs, struct arb_imem *im, uint64_t idx,
		       uint8_t *buf, bool covered)
{
	size_t i = dmap_lower(im, idx);

	if (im->nr == im->cap) {
		size_t cap = im->cap ? im->cap * 2 : 16;
		struct arb_dblock *nb = realloc(im->blocks, cap * sizeof(*nb));
		if (!nb)
			return -ENOMEM;
		im->blocks = nb;
		im->cap = cap;
	}
	memmove(&im->blocks[i + 1], &im->blocks[i],
		(im->nr - i) * sizeof(im->blocks[0]));
	im->blocks[i].idx = idx;
	im->blocks[i].buf = buf;
	im->blocks[i].covered = covered;
	im->nr++;
	im->nr_covered += covered;
	fs->dirty_bytes += fs->bs;
	fs_imem_mark_dirty(fs, im);
	fs_note_change(fs);
	return 0;
}

/* drop blocks with from_idx <= idx < to_idx */
static void dmap_drop_range(struct arb_fs *fs, struct arb_imem *im,
			    uint64_t from_idx, uint64_t to_idx)
{
	size_t a = dmap_lower(im, from_idx), b = dmap_lower(im, to_idx), i;

	if (b <= a)
		return;
	for (i = a; i < b; i++) {
		im->nr_covered -= im->blocks[i].covered;
		free(im->blocks[i].buf);
	}
	memmove(&im->blocks[a], &im->blocks[b],
		(im->nr - b) * sizeof(im->blocks[0]));
	im->nr -= b - a;
	fs->dirty_bytes -= (b - a) * (uint64_t)fs->bs;
}

void fs_imem_drop_blocks(struct arb_fs *fs, struct arb_imem *im,
			 uint64_t from_idx)
{
	dmap_drop_range(fs, im, from_idx, UINT64_MAX);
}

static void drop_data_fn(struct arb_fs *fs, struct arb_imem *im, void *arg)
{
	(void)arg;
	fs_imem_drop_blocks(fs, im, 0);
	im->held_size = 0;
	im->fsync_want = false;
	fs_imem_put_if_idle(fs, im);
}

void fs_imem_drop_all_data(struct arb_fs *fs)
{
	fs_imem_for_each(fs, drop_data_fn, NULL);
}

/* ---- extents ----------------------------------------------------------- */

struct ext {
	uint64_t start, end; /* file range */
	uint8_t type;
	uint64_t disk_bytenr, disk_num_bytes, offset, ram_bytes, gen;
	/* set by ext_next only: the item's leaf is this tree's alone
	 * (arb_iter_leaf_private) */
	bool leaf_private;
};

/* parse an EXTENT_DATA item; -EUCLEAN if malformed */
static int ext_parse(uint64_t ino, const struct arb_key *k, const void *data,
		     uint32_t size, struct ext *e)
{
	const struct arb_file_extent *fe = data;

	if (size < ARB_FILE_EXTENT_INLINE_HDR)
		goto bad;
	memset(e, 0, sizeof(*e));
	e->start = k->offset;
	e->type = arb_file_extent_f_type(fe);
	if (arb_file_extent_f_compression(fe)) {
		/* no compression exists yet: its bytes read raw would be
		 * garbage returned as data, and an overwrite that splits the
		 * item (ext_to_item) would drop the field */
		arb_log(ARB_LOG_ERR,
			"inode %llu: file extent item at %llu is compressed "
			"(method %u), which this arborfs cannot read",
			(unsigned long long)ino, (unsigned long long)k->offset,
			arb_file_extent_f_compression(fe));
		return -EUCLEAN;
	}
	e->gen = arb_file_extent_f_generation(fe);
	e->ram_bytes = arb_file_extent_f_ram_bytes(fe);
	if (e->type == ARB_FILE_EXTENT_INLINE) {
		if (k->offset != 0)
			goto bad;
		e->end = size - ARB_FILE_EXTENT_INLINE_HDR;
		return 0;
	}
	if ((e->type != ARB_FILE_EXTENT_REG &&
	     e->type != ARB_FILE_EXTENT_PREALLOC) ||
	    size < FE_SIZE)
		goto bad;
	e->disk_bytenr = arb_file_extent_f_disk_bytenr(fe);
	e->disk_num_bytes = arb_file_extent_f_disk_num_bytes(fe);
	e->offset = arb_file_extent_f_offset(fe);
	e->end = e->start + arb_file_extent_f_num_bytes(fe);
	if (e->end <= e->start || e->offset > e->disk_num_bytes ||
	    e->end - e->start > e->disk_num_bytes - e->offset)
		goto bad;
	return 0;
bad:
	arb_log(ARB_LOG_ERR, "inode %llu: bad file extent item at %llu",
		(unsigned long long)ino, (unsigned long long)k->offset);
	return -EUCLEAN;
}

/*
 * The first extent of ino that ends after pos.  0 found, 1 none, <0.
 * If inl is not NULL and the extent is inline, its bytes are copied there
 * (up to sectorsize).
 */
static int ext_next(struct arb_fs *fs, uint64_t ino, uint64_t pos,
		    struct ext *e, uint8_t *inl)
{
	struct arb_key key = { ino, ARB_EXTENT_DATA, pos }, k;
	struct arb_iter it;
	int ret;

	arb_iter_init(&it, fs->root);
	ret = arb_iter_seek_le(&it, &key);
	if (ret == 1)
		ret = arb_iter_seek(&it, &key);
	while (ret == 0) {
		arb_iter_key(&it, &k);
		if (k.objectid > ino ||
		    (k.objectid == ino && k.type > ARB_EXTENT_DATA)) {
			ret = 1;
			break;
		}
		if (k.objectid == ino && k.type == ARB_EXTENT_DATA) {
			ret = ext_parse(ino, &k, arb_iter_data(&it),
					arb_iter_size(&it), e);
			if (ret)
				break;
			e->leaf_private = arb_iter_leaf_private(&it);
			if (e->end > pos) {
				if (inl && e->type == ARB_FILE_EXTENT_INLINE) {
					size_t n = e->end;
					if (n > fs->bs)
						n = fs->bs;
					memcpy(inl,
					       (uint8_t *)arb_iter_data(&it) +
						       ARB_FILE_EXTENT_INLINE_HDR,
					       n);
				}
				break;
			}
		}
		ret = arb_iter_next(&it);
	}
	arb_iter_release(&it);
	return ret;
}

static void ext_to_item(const struct ext *e, struct arb_file_extent *fe)
{
	memset(fe, 0, sizeof(*fe));
	arb_set_file_extent_f_generation(fe, e->gen);
	arb_set_file_extent_f_ram_bytes(fe, e->ram_bytes);
	arb_set_file_extent_f_type(fe, e->type);
	arb_set_file_extent_f_disk_bytenr(fe, e->disk_bytenr);
	arb_set_file_extent_f_disk_num_bytes(fe, e->disk_num_bytes);
	arb_set_file_extent_f_offset(fe, e->offset);
	arb_set_file_extent_f_num_bytes(fe, e->end - e->start);
}

/* the inline extent's bytes edited: [from, to) zeroed, or cut at from */
static int inline_edit(struct arb_fs *fs, struct arb_txn *t,
		       struct arb_inode *in, uint64_t from, uint64_t to,
		       uint64_t len)
{
	struct arb_key k = { in->ino, ARB_EXTENT_DATA, 0 };
	uint32_t size = ARB_FILE_EXTENT_INLINE_HDR + (uint32_t)len;
	uint8_t *buf = malloc(size);
	int ret;

	if (!buf)
		return -ENOMEM;
	ret = arb_lookup_item(fs->root, &k, buf, size);
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
		ret = arb_update_item(t, fs->root, &k, buf, size);
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
	struct arb_file_extent fe;
	struct arb_key k;
	struct ext e, ne;
	uint64_t pos = start;
	int ret;

	k.objectid = in->ino;
	k.type = ARB_EXTENT_DATA;
	while (pos < end) {
		ret = ext_next(fs, in->ino, pos, &e, NULL);
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
				ret = arb_del_item(t, fs->root, &k);
				in->nbytes -= e.end;
			} else {
				ret = inline_edit(fs, t, in, from, to, e.end);
			}
			if (ret)
				return ret;
			continue;
		}
		if (e.start < start) {
			uint64_t old_end = e.end;
			/* keep the head [e.start, start) */
			e.end = start;
			ext_to_item(&e, &fe);
			ret = arb_update_item(t, fs->root, &k, &fe, FE_SIZE);
			if (ret)
				return ret;
			if (old_end > end) {
				/* and a tail [end, old_end) */
				ne = e;
				ne.offset += end - e.start;
				ne.start = end;
				ne.end = old_end;
				ext_to_item(&ne, &fe);
				k.offset = end;
				ret = arb_insert_item(t, fs->root, &k, &fe,
						      FE_SIZE);
				if (!ret)
					ret = arb_ref_data(
						t, ne.disk_bytenr,
						ne.disk_num_bytes, fs->root->id,
						in->ino, ne.start - ne.offset,
						1);
				in->nbytes -= end - start;
			} else {
				in->nbytes -= old_end - start;
			}
			if (ret)
				return ret;
			continue;
		}
		ret = arb_del_item(t, fs->root, &k);
		if (ret)
			return ret;
		if (e.end <= end) {
			ret = arb_ref_data(t, e.disk_bytenr, e.disk_num_bytes,
					   fs->root->id, in->ino,
					   e.start - e.offset, -1);
			in->nbytes -= e.end - e.start;
		} else {
			/* keep the tail [end, e.end); same back-reference */
			ne = e;
			ne.offset += end - e.start;
			ne.start = end;
			ext_to_item(&ne, &fe);
			k.offset = end;
			ret = arb_insert_item(t, fs->root, &k, &fe, FE_SIZE);
			in->nbytes -= end - e.start;
		}
		if (ret)
			return ret;
	}
	return 0;
}

/* ---- checksums --------------------------------------------------------- */

int fs_csum_lookup(struct arb_fs *fs, uint64_t bytenr, size_t nsec,
		   uint32_t *sums, uint8_t *have)
{
	struct arb_key key = { ARB_EXTENT_CSUM_OBJECTID, ARB_EXTENT_CSUM,
			       bytenr },
		       k;
	uint64_t end = bytenr + nsec * (uint64_t)fs->bs;
	struct arb_iter it;
	int ret;

	memset(have, 0, nsec);
	arb_iter_init(&it, fs->csum);
	ret = arb_iter_seek_le(&it, &key);
	if (ret == 1)
		ret = arb_iter_seek(&it, &key);
	while (ret == 0) {
		uint32_t size = arb_iter_size(&it);
		const uint8_t *d = arb_iter_data(&it);
		uint64_t iend, s;

		arb_iter_key(&it, &k);
		if (k.objectid != ARB_EXTENT_CSUM_OBJECTID ||
		    k.type != ARB_EXTENT_CSUM || k.offset >= end)
			break;
		iend = k.offset + (size / 4) * (uint64_t)fs->bs;
		for (s = k.offset > bytenr ? k.offset : bytenr; s < iend && s < end;
		     s += fs->bs) {
			uint32_t v;
			size_t i = (s - bytenr) / fs->bs;
			memcpy(&v, d + (s - k.offset) / fs->bs * 4, 4);
			sums[i] = le32toh(v);
			have[i] = 1;
		}
		ret = arb_iter_next(&it);
	}
	arb_iter_release(&it);
	return ret < 0 ? ret : 0;
}

/* an item starting at bytenr: a stale one over free space (images
 * written before run_one dropped the checksums of extents made and freed
 * in one transaction), which csum_insert replaces */
static bool csum_item_at(struct arb_fs *fs, uint64_t bytenr)
{
	struct arb_key k = { ARB_EXTENT_CSUM_OBJECTID, ARB_EXTENT_CSUM,
			     bytenr };

	return fs_item_exists(fs->csum, &k);
}

/*
 * The checksum item that ends at bytenr takes up to n of the sums le (on
 * disk order) when it has room; *took says how many.  Only for sectors
 * that extend the same extent (extend_prev): an item never spans two
 * extents, since freeing one deletes the items that start in it.
 */
static int csum_extend(struct arb_fs *fs, struct arb_txn *t, uint64_t bytenr,
		       const uint32_t *le, size_t n, size_t *took)
{
	struct arb_key key = { ARB_EXTENT_CSUM_OBJECTID, ARB_EXTENT_CSUM,
			       bytenr - 1 },
		       k;
	struct arb_iter it;
	uint8_t *buf = NULL;
	uint32_t size = 0;
	size_t have, take = 0;
	int ret;

	*took = 0;
	arb_iter_init(&it, fs->csum);
	ret = arb_iter_seek_le(&it, &key);
	if (ret == 0) {
		arb_iter_key(&it, &k);
		size = arb_iter_size(&it);
		have = size / 4;
		if (k.objectid == ARB_EXTENT_CSUM_OBJECTID &&
		    k.type == ARB_EXTENT_CSUM && size % 4 == 0 &&
		    have < ARB_CSUMS_PER_ITEM &&
		    k.offset + have * (uint64_t)fs->bs == bytenr) {
			take = ARB_CSUMS_PER_ITEM - have;
			if (take > n)
				take = n;
			buf = malloc(size + take * 4);
			if (buf)
				memcpy(buf, arb_iter_data(&it), size);
			else
				ret = -ENOMEM;
		}
	}
	arb_iter_release(&it);
	if (ret)
		return ret < 0 ? ret : 0;
	if (!buf)
		return 0;
	if (csum_item_at(fs, bytenr)) {
		free(buf);
		return 0;
	}
	memcpy(buf + size, le, take * 4);
	ret = arb_update_item(t, fs->csum, &k, buf, (uint32_t)(size + take * 4));
	free(buf);
	if (!ret)
		*took = take;
	return ret;
}

static int csum_insert(struct arb_fs *fs, struct arb_txn *t, uint64_t bytenr,
		       const uint32_t *sums, size_t nsec, bool extend)
{
	uint32_t *le = malloc(ARB_CSUMS_PER_ITEM * 4);
	size_t i, n, j;
	int ret = 0;

	if (!le)
		return -ENOMEM;
	if (extend) {
		n = nsec < ARB_CSUMS_PER_ITEM ? nsec : ARB_CSUMS_PER_ITEM;
		for (j = 0; j < n; j++)
			le[j] = htole32(sums[j]);
		ret = csum_extend(fs, t, bytenr, le, n, &i);
		if (ret) {
			free(le);
			return ret;
		}
	} else {
		i = 0;
	}
	for (; i < nsec && !ret; i += n) {
		struct arb_key k = { ARB_EXTENT_CSUM_OBJECTID, ARB_EXTENT_CSUM,
				     bytenr + i * (uint64_t)fs->bs };
		n = nsec - i;
		if (n > ARB_CSUMS_PER_ITEM)
			n = ARB_CSUMS_PER_ITEM;
		for (j = 0; j < n; j++)
			le[j] = htole32(sums[i + j]);
		/* a stale item of a freed extent would be replaced */
		if (fs_item_exists(fs->csum, &k))
			ret = arb_update_item(t, fs->csum, &k, le,
					      (uint32_t)(n * 4));
		else
			ret = arb_insert_item(t, fs->csum, &k, le,
					      (uint32_t)(n * 4));
	}
	free(le);
	return ret;
}

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

/* Under the lock: the sectors of len bytes of a REG extent at disk address
 * disk (file offset foff) and their checksums. */
static int rd_piece_prepare(struct arb_fs *fs, uint64_t ino, uint64_t foff,
			    uint64_t disk, size_t len, uint8_t *dst,
			    struct rd_piece *p)
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
	p->len = len;
	p->dst = dst;
	p->sums = malloc(p->nsec * sizeof(*p->sums));
	p->have = malloc(p->nsec);
	if (!p->sums || !p->have) {
		rd_piece_free(p);
		return -ENOMEM;
	}
	ret = fs_csum_lookup(fs, a, p->nsec, p->sums, p->have);
	if (ret)
		rd_piece_free(p);
	return ret;
}

/* With or without the lock: read the sectors, check them, copy the bytes. */
static int rd_piece_read(struct arb_fs *fs, const struct rd_piece *p)
{
	uint32_t bs = fs->bs;
	/* whole sectors (every piece of a sector-aligned read) go straight
	 * into the caller's buffer: a bad one fails the whole read anyway */
	bool direct = p->skip == 0 && p->len == p->nsec * bs;
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
				(unsigned long long)(p->foff - p->skip + i * bs),
				p->have[i] ? "data checksum mismatch"
					   : "data checksum missing",
				(unsigned long long)(p->sec + i * bs));
			ret = -EIO;
			goto out;
		}
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
		     uint64_t disk, size_t len, uint8_t *dst,
		     struct rd_plan *plan)
{
	struct rd_piece p;
	int ret;

	ret = rd_piece_prepare(fs, ino, foff, disk, len, dst, &p);
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
	struct ext e;
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
		ret = ext_next(fs, ino, pos, &e, inl);
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
			ret = read_disk(fs, ino, a,
					e.disk_bytenr + e.offset + (a - e.start),
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
		size_t i = im ? dmap_lower(im, idx) : 0;

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
			 uint64_t idx, struct ext *e, int *e_ret,
			 bool *covered)
{
	uint64_t pos = idx * (uint64_t)fs->bs;

	*covered = false;
	/* nothing allocated (a new file): nothing to look up */
	if (in->nbytes == 0)
		return 0;
	if (*e_ret < 0 || (*e_ret == 0 && e->end <= pos)) {
		*e_ret = ext_next(fs, in->ino, pos, e, NULL);
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
static int dirty_block_cov(struct arb_fs *fs, struct arb_imem *im,
			   const struct arb_inode *in, uint64_t idx, bool load,
			   struct ext *e, int *e_ret, uint8_t **out)
{
	uint8_t *buf = dmap_find(im, idx);
	struct ext e1;
	int e1_ret = -1;
	bool covered;
	int ret;

	if (buf) {
		*out = buf;
		return 0;
	}
	if (!e) {
		e = &e1;
		e_ret = &e1_ret;
	}
	ret = block_covered(fs, in, idx, e, e_ret, &covered);
	if (ret)
		return ret;
	buf = malloc(fs->bs);
	if (!buf)
		return -ENOMEM;
	if (!im->nr) {
		/* the first dirty block since the last flush */
		im->disk_size = in->size;
		im->force_flush = false;
	}
	if (load && idx * (uint64_t)fs->bs < in->size) {
		ret = read_tree(fs, in->ino, idx * (uint64_t)fs->bs, fs->bs,
				buf, NULL);
		if (ret) {
			free(buf);
			return ret;
		}
	} else if (load) {
		memset(buf, 0, fs->bs);
	} /* else the caller writes the whole block */
	ret = dmap_insert(fs, im, idx, buf, covered);
	if (ret) {
		free(buf);
		return ret;
	}
	*out = buf;
	return 0;
}

static int dirty_block(struct arb_fs *fs, struct arb_imem *im,
		       const struct arb_inode *in, uint64_t idx, bool load,
		       uint8_t **out)
{
	return dirty_block_cov(fs, im, in, idx, load, NULL, NULL, out);
}

/* Read ino, which must be a regular file: -EISDIR for a directory,
 * not_reg for anything else (read/write: -EINVAL, fallocate: -ENODEV). */
static int reg_inode_read(struct arb_fs *fs, uint64_t ino,
			  struct arb_inode *in, int not_reg)
{
	int ret = fs_inode_read(fs, ino, in);

	if (ret)
		return ret;
	if (S_ISDIR(in->mode))
		return -EISDIR;
	return S_ISREG(in->mode) ? 0 : not_reg;
}

static bool has_inline(struct arb_fs *fs, uint64_t ino)
{
	struct ext e;

	return ext_next(fs, ino, 0, &e, NULL) == 0 &&
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
	struct rd_plan plan = { 0 };
	struct arb_inode in;
	struct arb_txn *t;
	struct timespec now;
	ssize_t ret;
	int r;

	if (size > SSIZE_MAX)
		size = SSIZE_MAX;
	fs_lock(fs);
	r = reg_inode_read(fs, ino, &in, -EINVAL);
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
	if (!fs->opts.noatime && !(in.flags & ARB_INODE_NOATIME) &&
	    !fs->readonly && relatime_due(&in, &now) &&
	    fs_op_begin(fs, &t, 0, 0) == 0) {
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

/* ---- writing ----------------------------------------------------------- */

ssize_t arb_fs_write(struct arb_fs *fs, uint64_t ino, const void *buf,
		     size_t size, uint64_t off)
{
	const uint8_t *src = buf;
	struct arb_inode in;
	struct arb_imem *im;
	struct arb_txn *t;
	struct timespec now;
	struct ext cov_ext;
	int cov_ret = -1;
	uint64_t first, last, idx, end, pos;
	uint32_t bs = fs->bs;
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
	if (size >= ARB_BULK_WRITE)
		pthread_mutex_lock(&fs->bulk_lock);
	fs_lock(fs);
	r = reg_inode_read(fs, ino, &in, -EINVAL);
	if (r) {
		ret = r;
		goto out;
	}
	first = off / bs;
	last = (end - 1) / bs;
	/* may commit, which frees idle imem entries: look im up after it */
	r = fs_op_begin(fs, &t, (last - first + 2) * bs, 0);
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
	if (end > fs->max_inline && in.size <= fs->max_inline &&
	    !dmap_find(im, 0) && has_inline(fs, ino)) {
		uint8_t *b0;
		r = dirty_block(fs, im, &in, 0, true, &b0);
		if (r)
			goto out_cancel;
	}
	for (idx = first, pos = off; idx <= last; idx++) {
		uint64_t bstart = idx * bs, n;
		bool whole = pos == bstart && end >= bstart + bs;
		uint8_t *b;

		r = dirty_block_cov(fs, im, &in, idx, !whole, &cov_ext,
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
	/* with write_keeps_times the caller (the kernel's writeback cache)
	 * sends the times through setattr, possibly before this write */
	if (!fs->opts.write_keeps_times) {
		fs_now(&now);
		in.mtime = in.ctime = now;
	}
	fs->user_bytes_written += size;
	r = fs_inode_write(fs, t, &in);
	/* after the inode item: a flush of this inode reads its size */
	if (!r && fs->dirty_bytes > ARB_FLUSH_BATCH)
		r = fs_flush_some(fs, t, 2 * (uint64_t)size);
	r = fs_op_end(fs, t, r);
	ret = r ? r : (ssize_t)size;
	goto out;
out_cancel:
	arb_txn_end(t);
	ret = r;
	fs_imem_put_if_idle(fs, im);
out:
	fs_unlock(fs);
	if (size >= ARB_BULK_WRITE)
		pthread_mutex_unlock(&fs->bulk_lock);
	/* after both locks: other writes and fsyncs go on meanwhile.  A
	 * failure is kept by the device and fails the next commit */
	(void)arb_dev_flush_behind(fs->dev, ARB_FLUSH_BEHIND);
	return ret;
}

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
	struct arb_file_extent fe;
	struct arb_key k;
	struct ext e;
	int ret;

	if (foff == 0 || in->ino != fs->ext_hint_ino ||
	    foff != fs->ext_hint_foff || bytenr != fs->ext_hint_disk)
		return 0;
	ret = ext_next(fs, in->ino, foff - 1, &e, NULL);
	if (ret)
		return ret < 0 ? ret : 0;
	if (!e.leaf_private || e.type != ARB_FILE_EXTENT_REG ||
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
	ext_to_item(&e, &fe);
	k = (struct arb_key){ in->ino, ARB_EXTENT_DATA, e.start };
	ret = arb_update_item(t, fs->root, &k, &fe, FE_SIZE);
	return ret ? arb_txn_fail(t, ret) : 1;
}

/* Write blocks [first, first+count) (consecutive indexes) as extents. */
static int flush_run(struct arb_fs *fs, struct arb_txn *t, struct arb_inode *in,
		     struct arb_imem *im, size_t first, size_t count)
{
	uint32_t bs = fs->bs;
	uint32_t *sums = NULL;
	uint8_t *tmp;
	size_t pos = 0;
	int ret = 0;

	tmp = malloc((size_t)WRITE_CHUNK_BLOCKS * bs);
	if (!tmp)
		return -ENOMEM;
	while (pos < count) {
		uint64_t want = (uint64_t)(count - pos) * bs, bytenr, got;
		uint64_t foff = im->blocks[first + pos].idx * bs;
		struct arb_file_extent fe;
		struct arb_key k = { in->ino, ARB_EXTENT_DATA, foff };
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
		for (i = 0; i < nsec; i += j) {
			size_t n = nsec - i;
			if (n > WRITE_CHUNK_BLOCKS)
				n = WRITE_CHUNK_BLOCKS;
			for (j = 0; j < n; j++) {
				const uint8_t *b = im->blocks[first + pos + i + j].buf;
				memcpy(tmp + j * bs, b, bs);
				sums[i + j] = data_csum(b, bs);
			}
			ret = arb_dev_write(fs->dev, tmp, n * bs,
					    bytenr + i * (uint64_t)bs,
					    ARB_IO_DATA);
			if (ret)
				goto out;
		}
		ret = fs_drop_extents(fs, t, in, foff, foff + got);
		if (ret)
			break;
		extended = extend_prev(fs, t, in, foff, bytenr, got);
		if (extended < 0) {
			ret = extended;
			break;
		}
		ret = csum_insert(fs, t, bytenr, sums, nsec, extended);
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
		ret = arb_insert_item(t, fs->root, &k, &fe, FE_SIZE);
		if (ret)
			break;
		ret = arb_ref_data(t, bytenr, got, fs->root->id, in->ino, foff,
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
	struct ext e;
	int ret = ext_next(fs, ino, pos, &e, NULL);

	if (ret < 0)
		return ret;
	*yes = ret == 0;
	return 0;
}

int fs_flush_inode(struct arb_fs *fs, struct arb_txn *t, struct arb_imem *im)
{
	struct arb_inode in;
	uint32_t bs = fs->bs;
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
	if (in.size <= fs->max_inline && im->nr == 1 &&
	    im->blocks[0].idx == 0 && !later) {
		struct arb_key k = { in.ino, ARB_EXTENT_DATA, 0 };
		uint32_t isz = ARB_FILE_EXTENT_INLINE_HDR + (uint32_t)in.size;
		uint8_t *item;

		ret = fs_drop_extents(fs, t, &in, 0, bs);
		if (ret)
			return ret;
		if (in.size) {
			item = calloc(1, isz);
			if (!item)
				return -ENOMEM;
			arb_set_file_extent_f_generation(
				(struct arb_file_extent *)item, t->transid);
			arb_set_file_extent_f_ram_bytes(
				(struct arb_file_extent *)item, in.size);
			arb_set_file_extent_f_type(
				(struct arb_file_extent *)item,
				ARB_FILE_EXTENT_INLINE);
			memcpy(item + ARB_FILE_EXTENT_INLINE_HDR,
			       im->blocks[0].buf, in.size);
			ret = arb_insert_item(t, fs->root, &k, item, isz);
			free(item);
			if (ret)
				return ret;
			in.nbytes += in.size;
		}
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

	if (im->disk_size <= fs->max_inline)
		return 0;
	k = dmap_lower(im, im->disk_size / fs->bs);
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
	if (im->nr <= max || in.size <= fs->max_inline)
		return fs_flush_inode(fs, t, im);
	ret = flush_runs(fs, t, &in, im, max);
	if (ret)
		return ret;
	ret = fs_inode_write(fs, t, &in);
	if (ret)
		return ret;
	first_idx = im->blocks[0].idx;
	last_idx = im->blocks[max - 1].idx;
	dmap_drop_range(fs, im, first_idx, last_idx + 1);
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

/* ---- truncate ---------------------------------------------------------- */

int fs_truncate_prepare(struct arb_fs *fs, struct arb_inode *in, uint64_t size)
{
	struct arb_imem *im;
	uint32_t bs = fs->bs;
	uint8_t *b;
	struct ext e;
	int ret;

	if (size > in->size) {
		/* growing an inline file past max_inline makes it regular */
		if (size > fs->max_inline && in->size <= fs->max_inline &&
		    has_inline(fs, in->ino)) {
			im = fs_imem_get(fs, in->ino, true);
			if (!im)
				return -ENOMEM;
			im->force_flush = true;
			return dirty_block(fs, im, in, 0, true, &b);
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
	if (dmap_find(im, size / bs))
		return 0;
	ret = ext_next(fs, in->ino, size, &e, NULL);
	if (ret < 0)
		goto out;
	if (ret == 0 && e.type == ARB_FILE_EXTENT_REG && e.start <= size) {
		ret = dirty_block(fs, im, in, size / bs, true, &b);
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
			b = dmap_find(im, size / bs);
			if (b && size % bs)
				memset(b + size % bs, 0, bs - size % bs);
		}
		/* an inline extent is cut at size, other extents at the
		 * block boundary after it */
		if (size > 0) {
			struct ext e;
			ret = ext_next(fs, in->ino, 0, &e, NULL);
			if (ret < 0)
				return ret;
			if (ret == 0 && e.type == ARB_FILE_EXTENT_INLINE &&
			    e.end > size) {
				ret = inline_edit(fs, t, in, size, e.end, e.end);
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

/* ---- fallocate --------------------------------------------------------- */

/* zero [a, b) inside one block (a < b, same block) */
static int zero_partial(struct arb_fs *fs, struct arb_imem *im,
			struct arb_inode *in, uint64_t a, uint64_t b)
{
	uint32_t bs = fs->bs;
	uint64_t idx = a / bs;
	uint8_t *buf = dmap_find(im, idx);
	struct ext e;
	int ret;

	if (!buf) {
		if (idx * bs >= in->size)
			return 0; /* past EOF everything reads as zero */
		ret = ext_next(fs, in->ino, a, &e, NULL);
		if (ret < 0)
			return ret;
		if (ret == 1 || e.start >= b || e.type == ARB_FILE_EXTENT_PREALLOC)
			return 0;
		ret = dirty_block(fs, im, in, idx, true, &buf);
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
	uint32_t bs = fs->bs;
	uint64_t pos = a;
	struct ext e;
	int ret;

	while (pos < b) {
		uint64_t hole_end = b, bytenr, got;
		size_t i;
		struct arb_file_extent fe;
		struct arb_key k;

		ret = ext_next(fs, in->ino, pos, &e, NULL);
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
			i = dmap_lower(im, pos / bs);
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
		k.objectid = in->ino;
		k.type = ARB_EXTENT_DATA;
		k.offset = pos;
		ret = arb_insert_item(t, fs->root, &k, &fe, FE_SIZE);
		if (!ret)
			ret = arb_ref_data(t, bytenr, got, fs->root->id,
					   in->ino, pos, 1);
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
	ret = reg_inode_read(fs, ino, &in, -ENODEV);
	if (!ret)
		ret = fs_iflags_may_fallocate(&in, mode);
	if (ret)
		goto out;
	if (fs->readonly) {
		ret = -EROFS;
		goto out;
	}
	ret = fs_op_begin(fs, &t, punch ? 0 : round_up_bs(len, bs) + bs,
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
	if (!dmap_find(im, 0) && has_inline(fs, ino)) {
		uint8_t *b0;
		ret = dirty_block(fs, im, &in, 0, true, &b0);
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
			dmap_drop_range(fs, im, a / bs, b / bs);
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

/* ---- lseek ------------------------------------------------------------- */

/* first data byte at or after pos (PREALLOC reads as a hole) */
static int next_data(struct arb_fs *fs, struct arb_imem *im, uint64_t ino,
		     uint64_t pos, uint64_t *out)
{
	uint64_t best = UINT64_MAX, p = pos;
	struct ext e;
	int ret;

	for (;;) {
		ret = ext_next(fs, ino, p, &e, NULL);
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
		size_t i = dmap_lower(im, pos / fs->bs);
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
	struct ext e;
	int ret;

	for (;;) {
		bool moved = false;

		ret = ext_next(fs, ino, pos, &e, NULL);
		if (ret < 0)
			return ret;
		if (ret == 0 && e.start <= pos &&
		    e.type != ARB_FILE_EXTENT_PREALLOC) {
			pos = e.end;
			moved = true;
		}
		if (dmap_find(im, pos / fs->bs)) {
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
