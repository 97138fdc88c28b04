/* SPDX-License-Identifier: MIT */
/*
 * file_int.h - what the files of file data share: dmap.c (dirty blocks),
 * extent.c (EXTENT_DATA items), csum.c (data checksums), read.c (read,
 * lseek), write.c (write, truncate), delalloc.c (delayed allocation),
 * falloc.c (fallocate), encoded.c (compressed extents in their stored
 * form).
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
#ifndef ARB_FILE_INT_H
#define ARB_FILE_INT_H

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


struct fs_ext {
	uint64_t start, end; /* file range */
	uint8_t type;
	uint8_t compression; /* ARB_COMPRESS_* */
	uint32_t inline_stored; /* INLINE: the bytes of the item's data */
	uint64_t disk_bytenr, disk_num_bytes, offset, ram_bytes, gen;
	/* set by ext_next only: the item's leaf is this tree's alone
	 * (arb_iter_leaf_private) */
	bool leaf_private;
};

/* ---- dmap.c ---- */
uint8_t *fs_dmap_find(const struct arb_imem *im, uint64_t idx);
/* the same, for a caller that changes the block's bytes */
uint8_t *fs_dmap_find_w(struct arb_imem *im, uint64_t idx);
int fs_dmap_insert(struct arb_fs *fs, struct arb_imem *im, uint64_t idx,
		   uint8_t *buf, bool covered);
/* index of the first block with idx >= idx */
size_t fs_dmap_lower(const struct arb_imem *im, uint64_t idx);
/* drop blocks with from_idx <= idx < to_idx */
void fs_dmap_drop_range(struct arb_fs *fs, struct arb_imem *im,
			uint64_t from_idx, uint64_t to_idx);
/* ---- extent.c ---- */
/*
 * The first extent of ino that ends after pos.  0 found, 1 none, <0.
 * If inl is not NULL and the extent is inline, its bytes are copied there
 * (up to sectorsize).
 */
int fs_ext_next(struct arb_fs *fs, uint64_t ino, uint64_t pos, struct fs_ext *e,
		uint8_t *inl);
void fs_ext_to_item(const struct fs_ext *e, struct arb_file_extent *fe);
/* the inline extent's bytes edited: [from, to) zeroed, or cut at from */
int fs_inline_edit(struct arb_fs *fs, struct arb_txn *t, struct arb_inode *in,
		   uint64_t from, uint64_t to, uint64_t len);
/* parse an EXTENT_DATA item; -EUCLEAN if malformed */
int fs_ext_parse(uint64_t ino, const struct arb_key *k, const void *data,
		 uint32_t size, struct fs_ext *e);
/* ---- compress.c ---- */
/* the zlib level for the next writes of in, 0 = not compressed */
int fs_compress_level(const struct arb_fs *fs, const struct arb_inode *in);
bool fs_zhint_get(struct arb_fs *fs, uint64_t ino);
void fs_zhint_set(struct arb_fs *fs, uint64_t ino, bool yes);
void fs_zc_add(struct arb_imem *im, uint64_t idx, uint32_t nblk, uint8_t *z,
	       size_t stored);
int fs_zc_take(struct arb_imem *im, uint64_t idx, uint32_t nblk, uint8_t **z,
	       size_t *stored);
/* ---- delalloc.c ---- */
struct zbatch;
int fs_write_zextent(struct arb_fs *fs, struct arb_txn *t,
		     struct arb_inode *in, uint64_t foff, uint64_t ram,
		     uint64_t off, uint64_t num, const uint8_t *z,
		     size_t stored, struct zbatch *zb);
/* ---- clone.c ---- */
/* write the delayed data of ino (if any) into the running transaction */
int fs_flush_one(struct arb_fs *fs, struct arb_txn *t, uint64_t ino);
/* ---- csum.c ---- */
int fs_csum_insert(struct arb_fs *fs, struct arb_txn *t, uint64_t bytenr,
		   const uint32_t *sums, size_t nsec, bool extend);
/* ---- read.c ---- */
int fs_dirty_block(struct arb_fs *fs, struct arb_imem *im,
		   const struct arb_inode *in, uint64_t idx, bool load,
		   uint8_t **out);
/*
 * Make block idx dirty, loading its current contents; returns its buffer.
 * e, e_ret: the block_covered() cache of the caller, or NULL.
 */
int fs_dirty_block_cov(struct arb_fs *fs, struct arb_imem *im,
		       const struct arb_inode *in, uint64_t idx, bool load,
		       struct fs_ext *e, int *e_ret, uint8_t **out);
/*
 * The same for a block its writer filled before the lock: *give holds the
 * block's new bytes (bs of them) and *csum (if not NULL) their data
 * checksum.  A block not dirty yet takes *give as its buffer (*give
 * becomes NULL), a dirty one gets a copy (the caller frees *give).
 */
int fs_dirty_block_give(struct arb_fs *fs, struct arb_imem *im,
			const struct arb_inode *in, uint64_t idx, bool load,
			struct fs_ext *e, int *e_ret, uint8_t **give,
			const uint32_t *csum, uint8_t **out);
bool fs_has_inline(struct arb_fs *fs, uint64_t ino);
/* [off, off + len) of ino, inside its size, read with the lock held
 * (delayed blocks included), checksums checked */
int fs_read_locked(struct arb_fs *fs, uint64_t ino, uint64_t off, size_t len,
		   void *buf);
/* Read ino, which must be a regular file: -EISDIR for a directory,
 * not_reg for anything else (read/write: -EINVAL, fallocate: -ENODEV). */
int fs_reg_inode_read(struct arb_fs *fs, uint64_t ino, struct arb_inode *in,
		      int not_reg);

#endif
