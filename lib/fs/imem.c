/* SPDX-License-Identifier: MIT */
/*
 * imem.c - the table of open inodes (struct arb_imem): the in-memory
 * state of inodes that are pinned or hold delayed data.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fs_int.h"

/* ---- open inode table -------------------------------------------------- */

static size_t imem_bucket(const struct arb_fs *fs, uint64_t ino)
{
	return (size_t)((ino * 0x9E3779B97F4A7C15ULL) >> 32) &
	       (fs->imem_buckets - 1);
}

int fs_imem_table_init(struct arb_fs *fs)
{
	fs->imem = calloc(ARB_IMEM_MIN_BUCKETS, sizeof(*fs->imem));
	if (!fs->imem)
		return -ENOMEM;
	fs->imem_buckets = ARB_IMEM_MIN_BUCKETS;
	arb_idcount_init(&fs->pins);
	return 0;
}

/* double the table; on allocation failure keep the old one (longer chains) */
static void imem_grow(struct arb_fs *fs)
{
	size_t old = fs->imem_buckets;
	struct arb_imem **t = calloc(old * 2, sizeof(*t)), **ot = fs->imem;

	if (!t)
		return;
	fs->imem = t;
	fs->imem_buckets = old * 2;
	for (size_t b = 0; b < old; b++) {
		struct arb_imem *im = ot[b], *next;
		for (; im; im = next) {
			size_t nb = imem_bucket(fs, im->ino);
			next = im->hash_next;
			im->hash_next = t[nb];
			t[nb] = im;
		}
	}
	free(ot);
}

struct arb_imem *fs_imem_get(struct arb_fs *fs, uint64_t ino, bool create)
{
	size_t b = imem_bucket(fs, ino);
	struct arb_imem *im;

	for (im = fs->imem[b]; im; im = im->hash_next)
		if (im->ino == ino)
			return im;
	if (!create)
		return NULL;
	im = calloc(1, sizeof(*im));
	if (!im)
		return NULL;
	if (fs->imem_count >= fs->imem_buckets) {
		imem_grow(fs);
		b = imem_bucket(fs, ino);
	}
	im->ino = ino;
	im->hash_next = fs->imem[b];
	fs->imem[b] = im;
	fs->imem_count++;
	return im;
}

void fs_imem_mark_dirty(struct arb_fs *fs, struct arb_imem *im)
{
	if (im->on_dirty)
		return;
	im->on_dirty = true;
	im->dirty_prev = NULL;
	im->dirty_next = fs->dirty_list;
	if (fs->dirty_list)
		fs->dirty_list->dirty_prev = im;
	fs->dirty_list = im;
}

static void imem_unmark_dirty(struct arb_fs *fs, struct arb_imem *im)
{
	if (!im->on_dirty)
		return;
	if (im->dirty_prev)
		im->dirty_prev->dirty_next = im->dirty_next;
	else
		fs->dirty_list = im->dirty_next;
	if (im->dirty_next)
		im->dirty_next->dirty_prev = im->dirty_prev;
	im->on_dirty = false;
	im->dirty_next = im->dirty_prev = NULL;
}

bool fs_inode_pinned(const struct arb_fs *fs, uint64_t ino)
{
	return arb_idcount_get(&fs->pins, ino) != 0;
}

/* free the entry when it holds no dirty block (a pin does not need it) */
void fs_imem_put_if_idle(struct arb_fs *fs, struct arb_imem *im)
{
	struct arb_imem **pp;

	/* flushed, but with a young gap: kept on the dirty list, where a
	 * snapshot looks for gaps, until a later put finds it old (each
	 * commit puts every entry on the list) */
	if (im->nr || fs_gap_young(im, arb_mono_ns()))
		return;
	imem_unmark_dirty(fs, im);
	for (pp = &fs->imem[imem_bucket(fs, im->ino)]; *pp;
	     pp = &(*pp)->hash_next) {
		if (*pp == im) {
			*pp = im->hash_next;
			fs->imem_count--;
			fs_zc_forget(im, 0, UINT64_MAX);
			free(im->blocks);
			free(im);
			return;
		}
	}
}

void fs_imem_for_each(struct arb_fs *fs,
		      void (*fn)(struct arb_fs *, struct arb_imem *, void *),
		      void *arg)
{
	for (size_t b = 0; b < fs->imem_buckets; b++) {
		struct arb_imem *im = fs->imem[b], *next;
		for (; im; im = next) {
			next = im->hash_next;
			fn(fs, im, arg);
		}
	}
}

void fs_imem_destroy_all(struct arb_fs *fs)
{
	arb_idcount_destroy(&fs->pins);
	if (!fs->imem)
		return;
	for (size_t b = 0; b < fs->imem_buckets; b++) {
		struct arb_imem *im = fs->imem[b], *next;
		for (; im; im = next) {
			next = im->hash_next;
			fs_imem_drop_blocks(fs, im, 0);
			fs_zc_forget(im, 0, UINT64_MAX);
			free(im->blocks);
			free(im);
		}
		fs->imem[b] = NULL;
	}
	free(fs->imem);
	fs->imem = NULL;
	fs->imem_count = 0;
	fs->dirty_list = NULL;
}
