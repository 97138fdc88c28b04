/* SPDX-License-Identifier: MIT */
/*
 * setdigest.c - digest version 2: a sum over a subvolume's content that
 * can be brought up to date from another subvolume's sum at the cost of
 * what differs between the two trees, not of their size.
 *
 * The content is a set of elements, each a few fields of one inode
 * (docs/SEND-STREAM.md, "Digest version 2", is the exact list):
 *   I  its type and mode, owner, group, mtime, rdev, size
 *   N  one name: the parent directory's objectid and the name
 *   X  all its xattrs, sorted by name (not for symlinks)
 *   B  one 4 KiB block of data: its offset and the crc32c of its bytes
 *      (zeros past the end of the file), as the data checksums store it
 *   P  one preallocated block: its offset
 * every element carrying the inode's objectid, of the inodes with at
 * least one link.  The sum is the sum of the SHA-256 of every element,
 * as 256-bit little-endian numbers, modulo 2^256; the digest is the
 * SHA-256 of "arbor-digest-2" and the sum.  Adding and subtracting
 * elements in any order gives the same sum, so the sum of tree B is the
 * sum of tree A, minus the elements of the items only A has, plus those
 * of the items only B has: a walk of both trees together that skips the
 * nodes they share (arb_cmp_trees) finds those items.  A block of data
 * enters through its stored checksum, without a read, except in
 * compressed extents (inflated) and inline ones (the item's bytes).
 * Where a changed file extent maps a range the same way in both trees
 * (same disk bytes) the blocks cancel out and are not looked at.
 *
 * Objectids are part of the elements: receive gives every inode the
 * objectid the stream names, so a received subvolume and its source
 * agree.  (arb_subvol_digest_portable in digest.c is independent of
 * objectids and reads every byte.)  What this digest proves is what the
 * checksums prove: any accidental difference shows, with the odds of a
 * 32-bit checksum for each block that differs; it is no defense against
 * a crafted collision.
 *
 * The sum of a read-only subvolume is kept in its DIGEST_ITEM (format.h)
 * with the generation of its root node, so the next incremental send or
 * receive starts from it.
 */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "arbor/send.h"
#include "arbor/subvol.h"
#include "fs_int.h"
#include "items/items.h"
#include "send_int.h"
#include "stream_int.h"

#define DBLK 4096u /* the digest's block: ARB_SECTORSIZE, whatever bs */

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return le64toh(v);
}
static void put64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}

/* ---- the sum ------------------------------------------------------------- */

static void sum_add(uint8_t sum[32], const uint8_t h[32], int sign)
{
	uint64_t a[4], b[4];

	for (int i = 0; i < 4; i++) {
		a[i] = get64(sum + 8 * i);
		b[i] = get64(h + 8 * i);
	}
	if (sign > 0) {
		unsigned carry = 0;

		for (int i = 0; i < 4; i++) {
			uint64_t s = a[i] + b[i];
			unsigned c1 = s < a[i];

			a[i] = s + carry;
			carry = c1 | (a[i] < s);
		}
	} else {
		unsigned borrow = 0;

		for (int i = 0; i < 4; i++) {
			uint64_t d = a[i] - b[i];
			unsigned b1 = a[i] < b[i];

			a[i] = d - borrow;
			borrow = b1 | (d < (uint64_t)borrow);
		}
	}
	for (int i = 0; i < 4; i++)
		put64(sum + 8 * i, a[i]);
}

void fs_digest_final(const uint8_t sum[32], uint8_t digest[ARB_DIGEST_SIZE])
{
	struct arb_sha256 s;

	arb_sha256_init(&s);
	arb_sha256_update(&s, "arbor-digest-2", 14);
	arb_sha256_update(&s, sum, 32);
	arb_sha256_final(&s, digest);
}

/* an element being serialized: tag, objectid, then its fields */
struct elem {
	struct arb_sha256 s;
};

static void el_begin(struct elem *e, char tag, uint64_t obj)
{
	uint8_t b[8];

	arb_sha256_init(&e->s);
	arb_sha256_update(&e->s, &tag, 1);
	put64(b, obj);
	arb_sha256_update(&e->s, b, 8);
}
static void el_u64(struct elem *e, uint64_t v)
{
	uint8_t b[8];

	put64(b, v);
	arb_sha256_update(&e->s, b, 8);
}
static void el_u32(struct elem *e, uint32_t v)
{
	uint8_t b[4];

	v = htole32(v);
	memcpy(b, &v, 4);
	arb_sha256_update(&e->s, b, 4);
}
static void el_bytes(struct elem *e, const void *p, size_t n)
{
	arb_sha256_update(&e->s, p, n);
}
static void el_end(struct elem *e, uint8_t sum[32], int sign)
{
	uint8_t h[32];

	arb_sha256_final(&e->s, h);
	sum_add(sum, h, sign);
}

static void el_block(uint8_t sum[32], int sign, uint64_t obj, uint64_t off,
		     uint32_t crc)
{
	struct elem e;

	el_begin(&e, 'B', obj);
	el_u64(&e, off);
	el_u32(&e, crc);
	el_end(&e, sum, sign);
}

/* ---- the walk ------------------------------------------------------------ */

/* a file extent item's mapping (REG or PREALLOC), for the cancelling */
struct emap {
	uint64_t off, len;     /* file range */
	uint64_t disk, dlen;   /* disk extent */
	uint64_t eoff;         /* where in its (inflated) bytes off is */
	uint64_t ram;
	uint8_t type, comp;
};

/* blocks to read after the walk (compressed, or without checksums) */
struct rdrange {
	uint64_t obj, off, len;
	int side;
};
/* inodes whose xattrs changed: their X elements after the walk */
struct xobj {
	uint64_t obj;
	bool live[2];
};

struct dctx {
	struct arb_fs *fs;
	struct fs_tree *tr[2]; /* [0]: the base (NULL: none), [1]: the tree */
	uint8_t sum[32];
	int err;
	/* the inode being walked */
	uint64_t obj;
	bool started, whole, xattr;
	bool live[2], lnk[2];
	struct emap *m[2];
	size_t nm[2], cm[2];
	/* after the walk */
	struct rdrange *rd;
	size_t nrd, crd;
	struct xobj *xo;
	size_t nxo, cxo;
	uint32_t *sums;   /* checksum lookups */
	uint8_t *have;
	uint64_t elements;
};

static const int sign_of[2] = { -1, 1 };

static int push(void **v, size_t *n, size_t *cap, size_t sz, const void *x)
{
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 16;
		void *p = realloc(*v, c * sz);

		if (!p)
			return -ENOMEM;
		*v = p;
		*cap = c;
	}
	memcpy((uint8_t *)*v + *n * sz, x, sz);
	(*n)++;
	return 0;
}

static int read_later(struct dctx *c, int side, uint64_t off, uint64_t len)
{
	struct rdrange r = { c->obj, off, len, side };

	return push((void **)&c->rd, &c->nrd, &c->crd, sizeof(r), &r);
}

/* the B elements of [off, off+len) of a REG uncompressed extent whose
 * block at off is at disk byte d */
static int blocks_csum(struct dctx *c, int side, uint64_t off, uint64_t len,
		       uint64_t d)
{
	struct arb_fs *fs = c->fs;

	if (fs->bs != DBLK || off % DBLK || len % DBLK || d % DBLK)
		return read_later(c, side, off, len);
	while (len) {
		size_t n = len / DBLK > ARB_CSUMS_PER_ITEM ? ARB_CSUMS_PER_ITEM
							    : (size_t)(len / DBLK);
		int ret = fs_csum_lookup(fs, d, n, c->sums, c->have);

		if (ret)
			return ret;
		for (size_t i = 0; i < n; i++) {
			if (!c->have[i]) {
				ret = read_later(c, side, off + i * DBLK, DBLK);
				if (ret)
					return ret;
				continue;
			}
			el_block(c->sum, sign_of[side], c->obj, off + i * DBLK,
				 c->sums[i]);
			c->elements++;
		}
		off += n * DBLK;
		d += n * DBLK;
		len -= n * DBLK;
	}
	return 0;
}

/* the elements of [off, off+len) of mapping m */
static int emit_range(struct dctx *c, int side, const struct emap *m,
		      uint64_t off, uint64_t len)
{
	uint64_t a = off / DBLK * DBLK, b = (off + len + DBLK - 1) / DBLK * DBLK;

	if (m->type == ARB_FILE_EXTENT_PREALLOC) {
		for (uint64_t x = a; x < b; x += DBLK) {
			struct elem e;

			el_begin(&e, 'P', c->obj);
			el_u64(&e, x);
			el_end(&e, c->sum, sign_of[side]);
			c->elements++;
		}
		return 0;
	}
	if (m->comp)
		return read_later(c, side, a, b - a);
	return blocks_csum(c, side, a, b - a, m->disk + m->eoff + (a - m->off));
}

/* do a and b map x to the same bytes? */
static bool same_map(const struct emap *a, const struct emap *b)
{
	return a->type == b->type && a->disk == b->disk && a->dlen == b->dlen &&
	       a->comp == b->comp && a->ram == b->ram &&
	       a->off - a->eoff == b->off - b->eoff;
}

/*
 * The file extents of the inode that differ: a range both sides map the
 * same way cancels; the rest of each side goes in with its sign.  Both
 * lists are in file order and do not overlap within a side.
 */
static int finish_extents(struct dctx *c)
{
	size_t i = 0, j = 0;
	uint64_t x = 0;
	int ret = 0;

	while (!ret && (i < c->nm[0] || j < c->nm[1])) {
		const struct emap *a = i < c->nm[0] ? &c->m[0][i] : NULL;
		const struct emap *b = j < c->nm[1] ? &c->m[1][j] : NULL;
		uint64_t ae = a ? a->off + a->len : 0, be = b ? b->off + b->len : 0;
		uint64_t as, bs, y;

		if (a && ae <= x) {
			i++;
			continue;
		}
		if (b && be <= x) {
			j++;
			continue;
		}
		as = a ? (a->off > x ? a->off : x) : UINT64_MAX;
		bs = b ? (b->off > x ? b->off : x) : UINT64_MAX;
		if (as < bs) {
			/* only a, up to where b starts or a ends */
			y = ae < bs ? ae : bs;
			ret = emit_range(c, 0, a, as, y - as);
			x = y;
		} else if (bs < as) {
			y = be < as ? be : as;
			ret = emit_range(c, 1, b, bs, y - bs);
			x = y;
		} else {
			y = ae < be ? ae : be;
			if (!same_map(a, b)) {
				ret = emit_range(c, 0, a, as, y - as);
				if (!ret)
					ret = emit_range(c, 1, b, bs, y - bs);
			}
			x = y;
		}
	}
	c->nm[0] = c->nm[1] = 0;
	return ret;
}

/* the inline bytes of an item, inflated: B elements now */
static int inline_blocks(struct dctx *c, int side, const struct arb_key *k,
			 const uint8_t *d, uint32_t size)
{
	const struct arb_file_extent *fe = (const struct arb_file_extent *)d;
	uint64_t len = arb_file_extent_inline_len(fe, size);
	const uint8_t *p = d + ARB_FILE_EXTENT_INLINE_HDR;
	uint8_t *tmp = NULL, blk[DBLK];
	int ret = 0;

	if (arb_file_extent_f_compression(fe)) {
		tmp = malloc(len ? len : 1);
		if (!tmp)
			return -ENOMEM;
		ret = fs_z_decompress(p, size - ARB_FILE_EXTENT_INLINE_HDR, tmp,
				      len);
		if (ret) {
			free(tmp);
			return ret;
		}
		p = tmp;
	}
	for (uint64_t o = 0; o < len; o += DBLK) {
		size_t n = len - o < DBLK ? (size_t)(len - o) : DBLK;

		memset(blk, 0, sizeof(blk));
		memcpy(blk, p + o, n);
		el_block(c->sum, sign_of[side], c->obj, k->offset + o,
			 fs_data_csum(blk, DBLK));
		c->elements++;
	}
	free(tmp);
	return 0;
}

static int item_add(struct dctx *c, int side, const struct arb_key *k,
		    const uint8_t *d, uint32_t size)
{
	const char *why;
	struct elem e;

	if (!c->live[side])
		return 0;
	if (arb_item_validate(k, d, size, &why)) {
		arb_log(ARB_LOG_ERR, "digest: tree %llu item (%llu %u %llu): %s",
			(unsigned long long)c->tr[side]->id,
			(unsigned long long)k->objectid, k->type,
			(unsigned long long)k->offset, why);
		return -EUCLEAN;
	}
	switch (k->type) {
	case ARB_INODE_ITEM: {
		const struct arb_inode_item *ii = (const void *)d;
		uint32_t mode = arb_inode_item_i_mode(ii);

		el_begin(&e, 'I', k->objectid);
		el_u32(&e, mode);
		el_u32(&e, arb_inode_item_i_uid(ii));
		el_u32(&e, arb_inode_item_i_gid(ii));
		el_u64(&e, arb_inode_item_i_mtime(ii));
		el_u32(&e, arb_inode_item_i_mtime_ns(ii));
		el_u64(&e, S_ISCHR(mode) || S_ISBLK(mode)
				   ? arb_inode_item_i_rdev(ii)
				   : 0);
		el_u64(&e, S_ISDIR(mode) ? 0 : arb_inode_item_i_size(ii));
		el_end(&e, c->sum, sign_of[side]);
		c->elements++;
		return 0;
	}
	case ARB_INODE_REF:
		for (uint32_t o = 0; o + sizeof(struct arb_inode_ref) <= size;) {
			const struct arb_inode_ref *r = (const void *)(d + o);
			uint16_t n = arb_inode_ref_r_name_len(r);

			el_begin(&e, 'N', k->objectid);
			el_u64(&e, k->offset);
			el_u64(&e, n);
			el_bytes(&e, d + o + sizeof(*r), n);
			el_end(&e, c->sum, sign_of[side]);
			c->elements++;
			o += (uint32_t)sizeof(*r) + n;
		}
		return 0;
	case ARB_XATTR_ITEM:
	case ARB_XATTR_DATA:
		c->xattr = true;
		return 0;
	case ARB_EXTENT_DATA: {
		const struct arb_file_extent *fe = (const void *)d;
		struct emap m;

		if (arb_file_extent_f_type(fe) == ARB_FILE_EXTENT_INLINE)
			return inline_blocks(c, side, k, d, size);
		m.off = k->offset;
		m.len = arb_file_extent_f_num_bytes(fe);
		m.disk = arb_file_extent_f_disk_bytenr(fe);
		m.dlen = arb_file_extent_f_disk_num_bytes(fe);
		m.eoff = arb_file_extent_f_offset(fe);
		m.ram = arb_file_extent_f_ram_bytes(fe);
		m.type = arb_file_extent_f_type(fe);
		m.comp = arb_file_extent_f_compression(fe);
		return push((void **)&c->m[side], &c->nm[side], &c->cm[side],
			    sizeof(m), &m);
	}
	default:
		return 0; /* names are counted from the inode's side */
	}
}

/* the inode's liveness on each side (lock held) */
static int inode_state(struct dctx *c, int side, const struct arb_key *k,
		       const uint8_t *d, uint32_t size)
{
	struct arb_inode_item ii;
	struct arb_key ik = { c->obj, ARB_INODE_ITEM, 0 };
	int ret;

	c->live[side] = c->lnk[side] = false;
	if (!c->tr[side])
		return 0;
	if (k && k->type == ARB_INODE_ITEM && size >= sizeof(ii)) {
		memcpy(&ii, d, sizeof(ii));
	} else {
		ret = arb_lookup_item(c->tr[side]->root, &ik, &ii, sizeof(ii));
		if (ret == -ENOENT)
			return 0;
		if (ret < 0)
			return ret;
		if (ret < (int)sizeof(ii))
			return -EUCLEAN;
	}
	c->live[side] = arb_inode_item_i_nlink(&ii) > 0;
	c->lnk[side] = S_ISLNK(arb_inode_item_i_mode(&ii));
	return 0;
}

static int finish_inode(struct dctx *c)
{
	int ret;

	if (!c->started)
		return 0;
	c->started = false;
	ret = finish_extents(c);
	if (!ret && c->xattr) {
		struct xobj x = { c->obj,
				  { c->live[0] && !c->lnk[0],
				    c->live[1] && !c->lnk[1] } };

		ret = push((void **)&c->xo, &c->nxo, &c->cxo, sizeof(x), &x);
	}
	c->xattr = false;
	return ret;
}

/* every item of the current inode on side (its liveness changed) */
static int whole_inode(struct dctx *c, int side)
{
	struct arb_key k = { c->obj, 0, 0 };
	struct arb_iter it;
	int ret;

	arb_iter_init(&it, c->tr[side]->root);
	ret = arb_iter_seek(&it, &k);
	while (ret == 0) {
		arb_iter_key(&it, &k);
		if (k.objectid != c->obj)
			break;
		ret = item_add(c, side, &k, arb_iter_data(&it),
			       arb_iter_size(&it));
		if (!ret)
			ret = arb_iter_next(&it);
	}
	arb_iter_release(&it);
	return ret < 0 ? ret : 0;
}

static bool inode_obj(uint64_t obj)
{
	return obj >= ARB_FIRST_INO && obj <= ARB_INUM_OBJ_MAX;
}

/* a new inode starts: k/d/size its first item on side (or none) */
static int start_inode(struct dctx *c, uint64_t obj, int side,
		       const struct arb_key *k, const uint8_t *d,
		       uint32_t size)
{
	int ret = finish_inode(c);

	c->obj = obj;
	c->started = true;
	c->whole = false;
	for (int s = 0; !ret && s < 2; s++)
		ret = inode_state(c, s, s == side ? k : NULL, d, size);
	if (ret)
		return ret;
	if (c->tr[0] && c->live[0] != c->live[1]) {
		/* linked on one side only: all of that side's items */
		c->whole = true;
		ret = whole_inode(c, c->live[0] ? 0 : 1);
	}
	return ret;
}

static int diff_item(void *ctx, enum arb_cmp_kind kind,
		     const struct arb_cmp_item *a, const struct arb_cmp_item *b)
{
	struct dctx *c = ctx;
	const struct arb_cmp_item *it = a ? a : b;
	uint64_t obj = it->key.objectid;
	int ret = 0;

	(void)kind;
	if (!inode_obj(obj))
		return 0;
	if (!c->started || obj != c->obj) {
		ret = b ? start_inode(c, obj, 1, &b->key, b->data, b->size)
			: start_inode(c, obj, 0, &a->key, a->data, a->size);
		if (ret)
			goto out;
	}
	if (c->whole)
		return 0;
	if (a)
		ret = item_add(c, 0, &a->key, a->data, a->size);
	if (!ret && b)
		ret = item_add(c, 1, &b->key, b->data, b->size);
out:
	c->err = ret;
	return ret;
}

/* every item of the tree (no base), from key *from; stops after a batch
 * so that the lock can be let go: 1 done, 0 more from *from, <0 error */
static int full_batch(struct dctx *c, struct arb_key *from)
{
	struct arb_iter it;
	struct arb_key k;
	int ret, n = 0;

	arb_iter_init(&it, c->tr[1]->root);
	ret = arb_iter_seek(&it, from);
	while (ret == 0) {
		const uint8_t *d = arb_iter_data(&it);
		uint32_t size = arb_iter_size(&it);

		arb_iter_key(&it, &k);
		if (n++ >= 4096 && k.objectid != c->obj) {
			*from = k;
			arb_iter_release(&it);
			return 0;
		}
		if (inode_obj(k.objectid)) {
			if (!c->started || k.objectid != c->obj)
				ret = start_inode(c, k.objectid, 1, &k, d, size);
			if (!ret)
				ret = item_add(c, 1, &k, d, size);
		}
		if (!ret)
			ret = arb_iter_next(&it);
	}
	arb_iter_release(&it);
	if (ret < 0)
		return ret;
	ret = finish_inode(c);
	return ret ? ret : 1;
}

/* the X element of one inode on one side (lock not held) */
static int xattr_elem(struct dctx *c, uint64_t ino, uint64_t obj, int side,
		      char *list, uint8_t *val)
{
	char **names;
	size_t nr, i;
	struct elem e;
	int ret = arb_xattr_names_sorted(c->fs, ino, list, &names, &nr);

	if (ret || !nr) {
		free(names);
		return ret;
	}
	el_begin(&e, 'X', obj);
	el_u32(&e, (uint32_t)nr);
	for (i = 0; i < nr; i++) {
		ssize_t v = arb_fs_getxattr(c->fs, ino, names[i], val,
					    ARB_XATTR_SIZE_MAX);

		if (v < 0) {
			ret = (int)v;
			break;
		}
		el_u64(&e, strlen(names[i]));
		el_bytes(&e, names[i], strlen(names[i]));
		el_u64(&e, (uint64_t)v);
		el_bytes(&e, val, (size_t)v);
	}
	free(names);
	if (!ret) {
		el_end(&e, c->sum, sign_of[side]);
		c->elements++;
	}
	return ret;
}

/* what the walk left for later: reads and xattrs (lock not held) */
static int after_walk(struct dctx *c)
{
	uint8_t *buf = malloc(ARB_XATTR_SIZE_MAX > 65536 ? ARB_XATTR_SIZE_MAX
							  : 65536);
	char *list = malloc(65536);
	int ret = 0;

	if (!buf || !list) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; !ret && i < c->nxo; i++)
		for (int s = 0; !ret && s < 2; s++)
			if (c->xo[i].live[s])
				ret = xattr_elem(c, fs_ino(c->tr[s], c->xo[i].obj),
						 c->xo[i].obj, s, list, buf);
	for (size_t i = 0; !ret && i < c->nrd; i++) {
		const struct rdrange *r = &c->rd[i];
		uint64_t ino = fs_ino(c->tr[r->side], r->obj);

		for (uint64_t o = r->off; !ret && o < r->off + r->len;) {
			size_t want = r->off + r->len - o > 65536
					      ? 65536
					      : (size_t)(r->off + r->len - o);
			ssize_t got = fs_read(c->fs, ino, buf, want, o, false);

			if (got < 0) {
				ret = (int)got;
				break;
			}
			/* past the end of the file: zeros */
			memset(buf + got, 0, want - (size_t)got);
			for (size_t b = 0; b < want; b += DBLK) {
				el_block(c->sum, sign_of[r->side], r->obj, o + b,
					 fs_data_csum(buf + b, DBLK));
				c->elements++;
			}
			o += want;
		}
	}
out:
	free(buf);
	free(list);
	return ret;
}

/* ---- the DIGEST_ITEM ------------------------------------------------------ */

/* the generation of tr's root node, 0 when it is not committed yet: a
 * root written in the running transaction does not change generation
 * with further changes in that transaction, so no sum is kept for it
 * (lock held) */
static uint64_t tree_gen(const struct fs_tree *tr)
{
	uint64_t g = arb_node_gen(tr->root->node);

	return g > tr->root->vol->generation ? 0 : g;
}

/* the kept sum of tree tr, if it is of its present state (lock held) */
static bool kept_sum(struct arb_fs *fs, struct fs_tree *tr, uint8_t sum[32])
{
	struct arb_key k = { tr->id, ARB_DIGEST_ITEM, 0 };
	struct arb_digest_item di;
	const char *why;
	int ret;

	ret = arb_lookup_item(fs->vol->tree_root, &k, &di, sizeof(di));
	if (ret != (int)sizeof(di) ||
	    arb_item_validate(&k, &di, sizeof(di), &why))
		return false;
	if (arb_digest_item_d_version(&di) != 2 ||
	    arb_digest_item_d_generation(&di) != tree_gen(tr))
		return false;
	memcpy(sum, di.d_sum, 32);
	return true;
}

int fs_digest_keep(struct arb_fs *fs, uint64_t id, uint64_t gen,
		   const uint8_t sum[32])
{
	struct arb_key k = { id, ARB_DIGEST_ITEM, 0 };
	struct arb_digest_item di;
	struct arb_txn *t;
	int ret;

	if (fs->readonly || fs->failed || !gen)
		return 0;
	memset(&di, 0, sizeof(di));
	arb_set_digest_item_d_version(&di, 2);
	arb_set_digest_item_d_generation(&di, gen);
	memcpy(di.d_sum, sum, 32);
	fs_lock(fs);
	ret = fs_op_begin(fs, &t, 0, 0, ARB_OP_RESERVE);
	if (ret)
		goto out;
	if (fs_item_exists(fs->vol->tree_root, &k))
		ret = arb_update_item(t, fs->vol->tree_root, &k, &di,
				      sizeof(di));
	else
		ret = arb_insert_item(t, fs->vol->tree_root, &k, &di,
				      sizeof(di));
	if (!ret)
		arb_vol_set_features(fs->vol, 0, ARB_INCOMPAT_DIGEST);
	ret = fs_op_end(fs, t, ret);
out:
	fs_unlock(fs);
	return ret;
}

/* ---- the API ---------------------------------------------------------------- */

/* open id's tree for the digest (lock held) */
static int open_tree(struct arb_fs *fs, uint64_t id, struct fs_tree **tr)
{
	bool ok;
	int ret;

	(void)arb_inum_slot(id, &ok);
	if (!ok)
		return -EINVAL;
	ret = fs_tree_open(fs, id, tr);
	if (ret)
		return ret == -EINVAL ? -ENOENT : ret;
	return (*tr)->deleted ? -ENOENT : 0;
}

static void dctx_free(struct dctx *c)
{
	free(c->m[0]);
	free(c->m[1]);
	free(c->rd);
	free(c->xo);
	free(c->sums);
	free(c->have);
}

/* the sum of the whole of tree id (lock not held) */
static int full_sum(struct arb_fs *fs, uint64_t id, uint8_t sum[32],
		    uint64_t *gen, struct arb_digest_stats *st)
{
	struct dctx c = { .fs = fs };
	struct arb_key from = { 0, 0, 0 };
	int ret;

	c.sums = malloc(ARB_CSUMS_PER_ITEM * sizeof(*c.sums));
	c.have = malloc(ARB_CSUMS_PER_ITEM);
	if (!c.sums || !c.have) {
		dctx_free(&c);
		return -ENOMEM;
	}
	do {
		fs_lock(fs);
		ret = open_tree(fs, id, &c.tr[1]);
		/* a tree that changed under the walk (a writable one): its
		 * sum is not kept (generation 0) */
		if (!ret && !from.objectid && !from.type)
			*gen = tree_gen(c.tr[1]);
		else if (!ret && tree_gen(c.tr[1]) != *gen)
			*gen = 0;
		if (!ret)
			ret = full_batch(&c, &from);
		fs_unlock(fs);
	} while (ret == 0);
	if (ret == 1)
		ret = after_walk(&c);
	if (!ret) {
		memcpy(sum, c.sum, 32);
		if (st) {
			st->elements += c.elements;
			st->full = true;
		}
	}
	dctx_free(&c);
	return ret;
}

/* the sum of id from base's: sum += what differs (lock not held) */
static int diff_sum(struct arb_fs *fs, uint64_t base, uint64_t id,
		    uint8_t sum[32], uint64_t *gen, struct arb_digest_stats *st)
{
	struct dctx c = { .fs = fs };
	struct arb_key start = { 0, 0, 0 };
	struct arb_diff_stats ds = { 0 };
	int ret;

	memcpy(c.sum, sum, 32);
	c.sums = malloc(ARB_CSUMS_PER_ITEM * sizeof(*c.sums));
	c.have = malloc(ARB_CSUMS_PER_ITEM);
	if (!c.sums || !c.have) {
		dctx_free(&c);
		return -ENOMEM;
	}
	fs_lock(fs);
	ret = open_tree(fs, base, &c.tr[0]);
	if (!ret)
		ret = open_tree(fs, id, &c.tr[1]);
	if (!ret) {
		*gen = tree_gen(c.tr[1]);
		ret = arb_cmp_trees(c.tr[0]->root, c.tr[1]->root, &start,
				    diff_item, &c, &ds);
		if (ret && c.err)
			ret = c.err;
		if (!ret)
			ret = finish_inode(&c);
	}
	fs_unlock(fs);
	if (!ret)
		ret = after_walk(&c);
	if (!ret) {
		memcpy(sum, c.sum, 32);
		if (st) {
			st->elements += c.elements;
			st->nodes += ds.nodes_visited;
		}
	}
	dctx_free(&c);
	return ret;
}

static bool is_rdonly(struct arb_fs *fs, uint64_t id)
{
	struct arb_subvol_info si;

	return !arb_subvol_info_id(fs, id, &si) &&
	       (si.flags & ARB_SUBVOL_RDONLY) &&
	       !(si.flags & (ARB_SUBVOL_DELETED | ARB_SUBVOL_PARTIAL));
}

/* the kept sum of id, if any */
static bool kept(struct arb_fs *fs, uint64_t id, uint8_t sum[32],
		 uint64_t *gen)
{
	struct fs_tree *tr;
	bool ok = false;

	fs_lock(fs);
	if (!open_tree(fs, id, &tr)) {
		ok = kept_sum(fs, tr, sum);
		*gen = tree_gen(tr);
	}
	fs_unlock(fs);
	return ok;
}

/* keeping a sum is an optimization: a full disk does not fail the
 * digest (the next one computes it again) */
static void keep(struct arb_fs *fs, uint64_t id, uint64_t gen,
		 const uint8_t sum[32])
{
	int ret = fs_digest_keep(fs, id, gen, sum);

	if (ret)
		arb_log(ARB_LOG_INFO,
			"subvolume %llu: its digest is not kept: %s",
			(unsigned long long)id, strerror(-ret));
}

int fs_digest_sum(struct arb_fs *fs, uint64_t id, uint64_t base,
		  unsigned flags, uint8_t sum[32], uint64_t *gen,
		  struct arb_digest_stats *st)
{
	uint8_t bsum[32];
	uint64_t bgen;
	int ret;

	if (st)
		memset(st, 0, sizeof(*st));
	/* what is pending goes into the trees first (every extent) */
	ret = arb_fs_commit(fs, NULL);
	if (ret)
		return ret;
	if (!(flags & FS_DIGEST_FRESH) && kept(fs, id, sum, gen)) {
		if (st)
			st->kept = true;
		return 0;
	}
	if (base && base != id && !(flags & FS_DIGEST_FRESH)) {
		if (!kept(fs, base, bsum, &bgen)) {
			ret = full_sum(fs, base, bsum, &bgen, st);
			if (ret)
				return ret;
			if (is_rdonly(fs, base))
				keep(fs, base, bgen, bsum);
		}
		memcpy(sum, bsum, 32);
		ret = diff_sum(fs, base, id, sum, gen, st);
	} else {
		memset(sum, 0, 32);
		ret = full_sum(fs, id, sum, gen, st);
	}
	if (!ret && (flags & FS_DIGEST_KEEP) && is_rdonly(fs, id))
		keep(fs, id, *gen, sum);
	return ret;
}

int arb_subvol_digest(struct arb_fs *fs, uint64_t id,
		      uint8_t digest[ARB_DIGEST_SIZE])
{
	uint8_t sum[32], old[32];
	uint64_t gen, old_gen = 0;
	bool had;
	int ret;

	/* computed anew from the tree: the proof a user asks for does not
	 * take the kept sum's word; it is kept for the sends to come, and a
	 * kept one that disagrees is reported (a bug, or a damaged item) */
	had = kept(fs, id, old, &old_gen);
	ret = fs_digest_sum(fs, id, 0, FS_DIGEST_FRESH | FS_DIGEST_KEEP, sum,
			    &gen, NULL);
	if (!ret && had && gen == old_gen && memcmp(old, sum, 32))
		arb_log(ARB_LOG_ERR,
			"subvolume %llu: its kept digest did not match its content; replaced",
			(unsigned long long)id);
	if (!ret)
		fs_digest_final(sum, digest);
	return ret;
}
