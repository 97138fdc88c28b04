/* SPDX-License-Identifier: MIT */
/*
 * dmap.c - the dirty block map of delayed data (struct arb_imem):
 * lookup, insert, drop.
 * File data as a whole: see file_int.h.
 */
#include <errno.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <unistd.h>

#include "file_int.h"

/* ---- the dirty block map ----------------------------------------------- */

/* index of the first block with idx >= idx */
size_t fs_dmap_lower(const struct arb_imem *im, uint64_t idx)
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

uint8_t *fs_dmap_find(const struct arb_imem *im, uint64_t idx)
{
	size_t i;

	if (!im)
		return NULL;
	i = fs_dmap_lower(im, idx);
	return (i < im->nr && im->blocks[i].idx == idx) ? im->blocks[i].buf
							 : NULL;
}

uint8_t *fs_dmap_find_w(struct arb_imem *im, uint64_t idx)
{
	size_t i = fs_dmap_lower(im, idx);

	if (i == im->nr || im->blocks[i].idx != idx)
		return NULL;
	fs_zc_forget(im, idx, idx + 1);
	im->blocks[i].csum_ok = false;
	return im->blocks[i].buf;
}

int fs_dmap_insert(struct arb_fs *fs, struct arb_imem *im, uint64_t idx,
		   uint8_t *buf, bool covered)
{
	size_t i = fs_dmap_lower(im, idx);

	fs_zc_forget(im, idx, idx + 1);
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
	im->blocks[i].csum_ok = false;
	im->nr++;
	im->nr_covered += covered;
	fs->dirty_bytes += fs->bs;
	fs_imem_mark_dirty(fs, im);
	fs_note_change(fs);
	return 0;
}

/* drop blocks with from_idx <= idx < to_idx */
void fs_dmap_drop_range(struct arb_fs *fs, struct arb_imem *im,
			uint64_t from_idx, uint64_t to_idx)
{
	size_t a = fs_dmap_lower(im, from_idx), b = fs_dmap_lower(im, to_idx), i;

	fs_zc_forget(im, from_idx, to_idx);
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
	fs_dmap_drop_range(fs, im, from_idx, UINT64_MAX);
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
