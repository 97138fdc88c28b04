/* SPDX-License-Identifier: MIT */
/*
 * clone.c - copy_file_range(2) by sharing: the block-aligned part of a
 * range becomes file extent items of the destination pointing into the
 * source's disk extents (one more data back-reference each); the rest is
 * copied as bytes.  Design: docs/design/reflink.md.
 * File data as a whole: see file_int.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>

#include "file_int.h"

/* extent items shared per transaction step: each step reserves metadata
 * for that many items as an ordinary operation does (fs_op_begin), so a
 * clone short of space fails with ENOSPC between steps, never inside one */
#define CLONE_BATCH 64
/* bytes copied per read/write of the unshared parts */
#define COPY_CHUNK (1u << 20)

/* one sharing: source [sa, end) (block aligned) to da of the destination,
 * whose size becomes at least dst_end */
struct clone_job {
	uint64_t src, sa, end;
	uint64_t dst, da, dst_end;
	/* deduplication: the destination's times stay, and the bytes count
	 * as deduplicated, not cloned */
	bool dedupe;
};

struct clone_piece {
	uint64_t start, end; /* source file range, block aligned */
	struct fs_ext e;
};

/* Write the delayed data of ino (if any) into the running transaction.
 * Also arb_fs_read_encoded's and arb_fs_write_encoded's (encoded.c). */
int fs_flush_one(struct arb_fs *fs, struct arb_txn *t, uint64_t ino)
{
	struct arb_imem *im = fs_imem_get(fs, ino, false);
	int ret;

	if (!im || !im->nr)
		return 0;
	ret = fs_flush_inode(fs, t, im);
	if (!ret)
		fs_imem_put_if_idle(fs, im);
	return ret;
}

/* The source's and the destination's delayed data become extents, so
 * that the source's extents are what is shared, and nothing delayed of
 * the destination lands later on the shared range. */
static int flush_both(struct arb_fs *fs, uint64_t src, uint64_t dst)
{
	struct arb_imem *a = fs_imem_get(fs, src, false);
	struct arb_imem *b = src == dst ? NULL : fs_imem_get(fs, dst, false);
	uint64_t need = 0;
	struct arb_txn *t;
	int ret;

	if (a)
		need += a->nr * (uint64_t)fs->bs;
	if (b)
		need += b->nr * (uint64_t)fs->bs;
	if (!need)
		return 0;
	ret = fs_op_begin(fs, &t, dst, need, 0);
	if (ret)
		return ret;
	ret = fs_flush_one(fs, t, src);
	if (!ret && src != dst)
		ret = fs_flush_one(fs, t, dst);
	return fs_op_end(fs, t, ret);
}

/*
 * One step: share the source's extents from *pos (at most CLONE_BATCH of
 * them) into the destination at the same distance from da, and advance
 * *pos.  The destination's size becomes at least dst_end where the step
 * reaches it.
 */
static int clone_step(struct arb_fs *fs, const struct clone_job *j,
		      uint64_t *pos)
{
	uint64_t src = j->src, sa = j->sa, end = j->end, dst = j->dst;
	uint64_t da = j->da, dst_end = j->dst_end;
	struct arb_root *root;
	uint64_t obj = fs_obj(dst), q = *pos, from, to, shared = 0, meta;
	struct clone_piece *pc;
	struct arb_inode din;
	struct arb_imem *im;
	struct arb_txn *t;
	struct timespec now;
	size_t n = 0, i;
	int ret;

	pc = calloc(CLONE_BATCH, sizeof(*pc));
	if (!pc)
		return -ENOMEM;
	/* the pieces first (a commit in fs_op_begin leaves the source's
	 * extents as they are: its delayed data was written already) */
	while (n < CLONE_BATCH && q < end) {
		struct fs_ext e;

		ret = fs_ext_next(fs, src, q, &e, NULL);
		if (ret < 0)
			goto out_free;
		if (ret == 1 || e.start >= end) {
			q = end;
			break;
		}
		if (e.type == ARB_FILE_EXTENT_INLINE) {
			/* checked by the caller after the flush */
			arb_log(ARB_LOG_ERR,
				"inode %llu: inline extent beside others",
				(unsigned long long)src);
			ret = -EUCLEAN;
			goto out_free;
		}
		pc[n].start = e.start > q ? e.start : q;
		pc[n].end = e.end < end ? e.end : end;
		pc[n].e = e;
		q = pc[n].end;
		n++;
	}
	/*
	 * Each piece adds a reference to an extent the commit rewrites in
	 * the extent tree: its extent item's leaf and the leaf its new
	 * back-reference goes to, wherever they are (the pieces of a
	 * fragmented file are spread over the extent tree, unlike the
	 * changes of an ordinary operation that dref_meta_bytes prices).
	 * Reserved until the commit (txn_meta), so that the commit finds it.
	 */
	meta = (uint64_t)n * 2 * arb_node_alloc_bytes(fs->vol);
	ret = fs_op_begin(fs, &t, dst, meta, 0);
	if (ret)
		goto out_free;
	fs->txn_meta += meta;
	root = fs_root_of(fs, dst);
	/* read after fs_op_begin: it may commit */
	ret = fs_reg_inode_read(fs, dst, &din, -EINVAL);
	if (ret)
		goto out_cancel;
	ret = 0;
	from = da + (*pos - sa);
	to = da + (q - sa);
	/* an inline extent of the destination (a small file) before the
	 * range turns into a delayed block 0, written as a regular extent
	 * at the next flush (the file is no longer small then); one the
	 * range covers is dropped with the rest */
	if (from > 0 && din.size <= fs->bs && fs_has_inline(fs, dst)) {
		uint8_t *b0;

		im = fs_imem_get(fs, dst, true);
		if (!im) {
			ret = -ENOMEM;
			goto out_cancel;
		}
		ret = fs_dirty_block(fs, im, &din, 0, true, &b0);
		im->force_flush = true;
		if (ret) {
			fs_imem_put_if_idle(fs, im);
			goto out_cancel;
		}
	}
	/* tree changes from here on: an error aborts (fs_op_end) */
	im = fs_imem_get(fs, dst, false);
	if (im) {
		fs_dmap_drop_range(fs, im, from / fs->bs,
				   (to + fs->bs - 1) / fs->bs);
		fs_imem_put_if_idle(fs, im);
	}
	ret = fs_drop_extents(fs, t, &din, from, to);
	for (i = 0; !ret && i < n; i++) {
		struct fs_ext ne = pc[i].e;
		struct arb_file_extent fe;
		struct arb_key k;

		ne.offset += pc[i].start - ne.start;
		ne.start = da + (pc[i].start - sa);
		ne.end = ne.start + (pc[i].end - pc[i].start);
		ne.gen = t->transid;
		fs_ext_to_item(&ne, &fe);
		k = (struct arb_key){ obj, ARB_EXTENT_DATA, ne.start };
		ret = arb_insert_item(t, root, &k, &fe, FE_SIZE);
		if (!ret)
			ret = arb_ref_data(t, ne.disk_bytenr, ne.disk_num_bytes,
					   root->id, obj, ne.start - ne.offset,
					   1);
		din.nbytes += ne.end - ne.start;
		shared += ne.end - ne.start;
	}
	if (ret)
		goto out_end;
	if (to > dst_end)
		to = dst_end;
	if (to > din.size)
		din.size = to;
	if (!j->dedupe) {
		fs_now(&now);
		din.mtime = din.ctime = now;
	}
	ret = fs_inode_write(fs, t, &din);
	if (!ret) {
		if (j->dedupe)
			fs->deduped_bytes += shared;
		else
			fs->cloned_bytes += shared;
		*pos = q;
	}
out_end:
	ret = fs_op_end(fs, t, ret);
	goto out_free;
out_cancel:
	arb_txn_end(t);
out_free:
	free(pc);
	return ret;
}

/* Share as job says, in steps.  Lock held, delayed data written
 * (flush_both).  *done: source bytes shared, also on an error. */
static int clone_run(struct arb_fs *fs, const struct clone_job *j,
		     uint64_t *done)
{
	uint64_t pos = j->sa;
	int ret = 0;

	*done = 0;
	while (pos < j->end) {
		ret = clone_step(fs, j, &pos);
		*done = pos - j->sa;
		if (ret)
			break;
	}
	return ret;
}

/*
 * Share source [sa, sa + n) (n a multiple of the block size) at da of
 * the destination, whose size becomes at least dst_end.  Lock held.
 * Returns 0 done, 1 when the source is inline (nothing to share: the
 * caller copies bytes), <0 error (*done: source bytes shared before it).
 */
static int clone_locked(struct arb_fs *fs, uint64_t src, uint64_t sa,
			uint64_t dst, uint64_t da, uint64_t n,
			uint64_t dst_end, uint64_t *done)
{
	struct clone_job j = { src, sa, sa + n, dst, da, dst_end, false };
	int ret;

	*done = 0;
	ret = flush_both(fs, src, dst);
	if (ret)
		return ret;
	if (fs_has_inline(fs, src))
		return 1;
	return clone_run(fs, &j, done);
}

/* copy [soff, soff + len) of src to doff of dst as bytes; the bytes
 * copied, or <0 if none */
static ssize_t copy_bytes(struct arb_fs *fs, uint64_t src, uint64_t soff,
			  uint64_t dst, uint64_t doff, uint64_t len, bool atime)
{
	uint64_t done = 0;
	uint8_t *buf;
	ssize_t r = 0;

	if (!len)
		return 0;
	buf = malloc(len < COPY_CHUNK ? len : COPY_CHUNK);
	if (!buf)
		return -ENOMEM;
	while (done < len) {
		size_t want = len - done < COPY_CHUNK ? len - done : COPY_CHUNK;
		ssize_t w;

		r = fs_read(fs, src, buf, want, soff + done, atime);
		if (r <= 0)
			break;
		w = arb_fs_write(fs, dst, buf, (size_t)r, doff + done);
		if (w < 0) {
			r = w;
			break;
		}
		done += (uint64_t)w;
		if ((size_t)r < want)
			break; /* the source shrank meanwhile */
	}
	free(buf);
	if (done)
		return (ssize_t)done;
	return r < 0 ? r : 0;
}

/*
 * Both inodes of a copy or dedupe (lock held): regular files, and a
 * destination that may change.  As vfs_copy_file_range and the dedupe
 * ioctl: an immutable or append-only destination takes neither (an
 * append-only one takes writes at its end only, and a copy is not one).
 */
static int clone_inodes(struct arb_fs *fs, uint64_t src, uint64_t dst,
			struct arb_inode *sin, struct arb_inode *din)
{
	int ret = fs_reg_inode_read(fs, src, sin, -EINVAL);

	if (!ret)
		ret = fs_reg_inode_read(fs, dst, din, -EINVAL);
	if (ret)
		return ret;
	if (din->flags & (ARB_INODE_IMMUTABLE | ARB_INODE_APPEND))
		return -EPERM;
	if (fs->readonly || fs_tree_of(fs, dst)->rdonly)
		return fs->shutdown ? -EIO : -EROFS;
	return 0;
}

ssize_t arb_fs_copy_range(struct arb_fs *fs, uint64_t src, uint64_t soff,
			  uint64_t dst, uint64_t doff, uint64_t len,
			  unsigned flags)
{
	struct arb_inode sin, din;
	uint64_t a, b, shared = 0, bs, head;
	bool eof, share_only = flags & ARB_COPY_SHARE_ONLY;
	bool atime = !(flags & ARB_COPY_KEEP_ATIME);
	ssize_t r;
	int ret;

	if (flags & ~(ARB_COPY_SHARE_ONLY | ARB_COPY_KEEP_ATIME))
		return -EINVAL;
	if (soff >= ARB_MAX_FILE_SIZE || doff >= ARB_MAX_FILE_SIZE)
		return -EFBIG;
	fs_lock(fs);
	bs = fs->bs;
	ret = clone_inodes(fs, src, dst, &sin, &din);
	if (ret)
		goto out_unlock;
	if (soff >= sin.size || !len) {
		ret = 0;
		goto out_unlock;
	}
	if (len > sin.size - soff)
		len = sin.size - soff;
	if (len > ARB_MAX_FILE_SIZE - doff) {
		ret = -EFBIG;
		goto out_unlock;
	}
	if (len > SSIZE_MAX)
		len = SSIZE_MAX / bs * bs;
	if (src == dst && soff < doff + len && doff < soff + len) {
		ret = -EINVAL;
		goto out_unlock;
	}
	/*
	 * The shared part: whole blocks of both files (the offsets must be
	 * congruent modulo the block size), and the source's last partial
	 * block when the range ends at the source's end and reaches or
	 * passes the destination's (the bytes past a file's end in its
	 * last block are zeros, so the destination gets nothing else).
	 */
	eof = soff + len == sin.size && doff + len >= din.size;
	a = round_up_bs(soff, bs);
	b = eof ? round_up_bs(soff + len, bs) : (soff + len) / bs * bs;
	if (soff % bs != doff % bs || a >= b)
		a = b = soff + len;
	if (share_only && (soff % bs || doff % bs || (len % bs && !eof))) {
		ret = -EINVAL;
		goto out_unlock;
	}
	head = a - soff;
	if (a < b) {
		ret = clone_locked(fs, src, a, dst, doff + head, b - a,
				   doff + len, &shared);
		if (ret == 1) {
			/* an inline source: a small file, copied */
			a = b = soff + len;
			head = len;
			ret = 0;
		} else if (ret) {
			/* what was shared is the caller's, if anything */
			fs_unlock(fs);
			return shared && !head ? (ssize_t)shared : ret;
		}
	}
	fs_unlock(fs);
	/* the unaligned head and tail as bytes (the whole range when the
	 * offsets are not congruent) */
	r = copy_bytes(fs, src, soff, dst, doff, head, atime);
	if (r < 0 || (uint64_t)r < head)
		return r;
	if (b >= soff + len)
		return (ssize_t)len;
	r = copy_bytes(fs, src, b, dst, doff + (b - soff), soff + len - b,
		       atime);
	if (r < 0)
		return (ssize_t)(b - soff);
	return (ssize_t)(b - soff + (uint64_t)r);
out_unlock:
	fs_unlock(fs);
	return ret;
}

/* bytes compared at a time by a deduplication */
#define DEDUPE_CHUNK (1u << 20)

int arb_fs_dedupe_range(struct arb_fs *fs, uint64_t src, uint64_t soff,
			uint64_t dst, uint64_t doff, uint64_t len,
			uint64_t *deduped)
{
	struct arb_inode sin, din;
	struct clone_job j;
	uint8_t *a = NULL, *b = NULL;
	uint64_t bs, n, pos, done;
	bool tail;
	int ret;

	*deduped = 0;
	if (soff >= ARB_MAX_FILE_SIZE || doff >= ARB_MAX_FILE_SIZE)
		return -EINVAL;
	fs_lock(fs);
	bs = fs->bs;
	ret = clone_inodes(fs, src, dst, &sin, &din);
	if (ret)
		goto out_unlock;
	if (soff % bs || doff % bs) {
		ret = -EINVAL;
		goto out_unlock;
	}
	/* as the kernel's remap checks for FIDEDUPERANGE: the range is cut
	 * at the source's end, must lie inside the destination, and ends on
	 * a block unless it ends both files */
	if (soff >= sin.size || !len) {
		ret = 0;
		goto out_unlock;
	}
	if (len > sin.size - soff)
		len = sin.size - soff;
	if (doff > din.size || len > din.size - doff) {
		ret = -EINVAL;
		goto out_unlock;
	}
	if (src == dst && soff < doff + len && doff < soff + len) {
		ret = -EINVAL;
		goto out_unlock;
	}
	tail = soff + len == sin.size && doff + len == din.size;
	if (!tail)
		len = len / bs * bs;
	n = round_up_bs(len, bs);
	if (!n) {
		ret = 0;
		goto out_unlock;
	}
	ret = flush_both(fs, src, dst);
	if (ret)
		goto out_unlock;
	a = malloc(DEDUPE_CHUNK);
	b = malloc(DEDUPE_CHUNK);
	if (!a || !b) {
		ret = -ENOMEM;
		goto out_unlock;
	}
	/* byte for byte, under the lock: nothing changes them meanwhile */
	for (pos = 0; pos < len; pos += DEDUPE_CHUNK) {
		size_t c = len - pos < DEDUPE_CHUNK ? len - pos : DEDUPE_CHUNK;

		ret = fs_read_locked(fs, src, soff + pos, c, a);
		if (!ret)
			ret = fs_read_locked(fs, dst, doff + pos, c, b);
		if (ret)
			goto out_unlock;
		if (memcmp(a, b, c)) {
			ret = ARB_DEDUPE_DIFFERS;
			goto out_unlock;
		}
	}
	if (fs_has_inline(fs, src) || fs_has_inline(fs, dst)) {
		/* small files, the same bytes: nothing to share */
		ret = 0;
		goto out_unlock;
	}
	j = (struct clone_job){ src, soff, soff + n, dst, doff, doff + len,
				true };
	ret = clone_run(fs, &j, &done);
	*deduped = done < len ? done : len;
out_unlock:
	fs_unlock(fs);
	free(a);
	free(b);
	return ret;
}
