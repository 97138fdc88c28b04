/* SPDX-License-Identifier: MIT */
/*
 * sendtree.c - arb_send: the stream of a read-only subvolume, full or
 * incremental against a read-only parent.
 *
 * The walk goes by objectid through the subvolume's tree (and the
 * parent's, side by side, for an incremental stream), reading each
 * inode's INODE_ITEM, INODE_REFs and EXTENT_DATA items under the
 * library's lock, then sending it through the public calls (xattrs,
 * data, symlink targets) with the lock released.  Order of the stream:
 *   begin; for each new or changed inode: inode (attributes, and a
 *   truncate first when its data changed), xattrs, data; then every
 *   name that went away (unlink), every new name (link), the inodes that
 *   went away (delete), the final times of every inode sent, end.
 * Removing names before adding them means no name is ever taken when a
 * link arrives, whatever renames, swaps and cycles happened between the
 * two snapshots: the receiver needs no temporary names.
 *
 * Changed inodes: an inode is unchanged when the parent has an
 * INODE_ITEM of the same objectid with the same bytes (every change of
 * an inode's data, names, xattrs or attributes writes its item with a
 * new transid and ctime).  This compares every inode of both trees: the
 * cost follows the number of inodes, not the change (what the
 * generation-skipping walk of the tree-comparison engine will replace).
 * A regular file whose extent items changed is sent whole (truncate to
 * 0, then its data).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "arbor/send.h"
#include "arbor/subvol.h"
#include "fs_int.h"
#include "items/items.h"
#include "stream_int.h"

struct sref {
	uint64_t dir;
	uint16_t len;
	char name[ARB_NAME_MAX + 1];
};

struct sext {
	uint64_t off, len;
	uint8_t type;
	bool hole;
	/* REG and PREALLOC: the disk extent and where in it (inflated
	 * bytes) the item starts; file offset x holds byte x - base of it,
	 * base = off - ext_off */
	uint8_t compression;
	uint64_t bytenr, disk_len, ext_off, ram;
	uint8_t raw[sizeof(struct arb_file_extent)];
	uint32_t raw_len;
};

/* what one tree holds of one objectid */
struct sinode {
	uint64_t obj;
	bool present;
	struct arb_inode_item item;
	struct arb_inode in;
	struct sref *refs;
	size_t nr_refs, cap_refs;
	struct sext *ext;
	size_t nr_ext, cap_ext;
};

struct slink {
	uint64_t dir, obj;
	uint16_t len;
	char name[ARB_NAME_MAX + 1];
};

struct stime {
	uint64_t obj;
	struct timespec atime, mtime;
};

struct srec;
struct siv;

struct sctx {
	struct arb_fs *fs;
	struct fs_tree *tr, *ptr; /* the subvolume, the parent (or NULL) */
	struct arb_swriter w;
	struct arb_send_stats st;
	struct slink *unlinks, *links;
	size_t nr_unlinks, cap_unlinks, nr_links, cap_links;
	uint64_t *deletes;
	size_t nr_deletes, cap_deletes;
	struct stime *times;
	size_t nr_times, cap_times;
	uint8_t *buf;   /* data, xattr values */
	char *list;     /* xattr names */
	char *plist;
	uint8_t *pbuf;
	char *why;
	size_t why_len;
	/* incremental: tree nodes read to find what changed */
	uint64_t nodes_read;
	/* the stream version written: 1 sends changed files whole */
	unsigned version;
	/* version 2: data ranges sent (srec_add), hash heads (index + 1) */
	struct srec *recs;
	size_t nr_recs, cap_recs;
	uint32_t *rhash;
	size_t rhash_size;
	/* clone sources of the extent being sent */
	struct siv *ivs;
	size_t nr_ivs, cap_ivs;
	/* resume: inodes before resume_obj went in the first part (their
	 * commands are built, to find names and clone sources, but not
	 * written: skip) */
	uint64_t resume_obj, resume_off, resume_id;
	bool skip;
	/* the compressed extent item last read in its stored form */
	struct arb_encoded enc;
	uint64_t enc_obj, enc_off, enc_bytenr;
	uint8_t *ebuf; /* ARB_ENCODED_MAX */
};

static int grow(void **p, size_t *cap, size_t nr, size_t size)
{
	void *n;
	size_t c;

	if (nr < *cap)
		return 0;
	c = *cap ? *cap * 2 : 64;
	n = realloc(*p, c * size);
	if (!n)
		return -ENOMEM;
	*p = n;
	*cap = c;
	return 0;
}

static void sinode_reset(struct sinode *si)
{
	si->present = false;
	si->nr_refs = 0;
	si->nr_ext = 0;
}

static void sinode_free(struct sinode *si)
{
	free(si->refs);
	free(si->ext);
}

/*
 * The first inode with objectid >= from in tr: 0 (si filled), 1 none.
 * Lock held.
 */
static int scan_inode(struct fs_tree *tr, uint64_t from,
		      struct sinode *si)
{
	struct arb_key k = { from, ARB_INODE_ITEM, 0 };
	struct arb_iter it;
	int ret;

	sinode_reset(si);
	arb_iter_init(&it, tr->root);
	ret = arb_iter_seek(&it, &k);
	/* to the first INODE_ITEM at or after from */
	while (ret == 0) {
		arb_iter_key(&it, &k);
		if (k.objectid > ARB_INUM_OBJ_MAX) {
			ret = 1;
			break;
		}
		if (k.type == ARB_INODE_ITEM && k.objectid >= from)
			break;
		ret = arb_iter_next(&it);
	}
	if (ret)
		goto out;
	si->obj = k.objectid;
	si->present = true;
	for (; ret == 0; ret = arb_iter_next(&it)) {
		const uint8_t *d;
		uint32_t sz;

		arb_iter_key(&it, &k);
		if (k.objectid != si->obj)
			break;
		d = arb_iter_data(&it);
		sz = arb_iter_size(&it);
		if (k.type == ARB_INODE_ITEM) {
			if (sz < sizeof(si->item)) {
				ret = -EUCLEAN;
				goto out;
			}
			memcpy(&si->item, d, sizeof(si->item));
			fs_inode_unpack(&si->in, fs_ino(tr, si->obj), &si->item);
		} else if (k.type == ARB_INODE_REF) {
			uint32_t off = 0;

			while (off + sizeof(struct arb_inode_ref) <= sz) {
				const struct arb_inode_ref *r =
					(const void *)(d + off);
				uint16_t nl = arb_inode_ref_r_name_len(r);
				struct sref *sr;

				if (off + sizeof(*r) + nl > sz || nl == 0 ||
				    nl > ARB_NAME_MAX) {
					ret = -EUCLEAN;
					goto out;
				}
				ret = grow((void **)&si->refs, &si->cap_refs,
					   si->nr_refs, sizeof(*si->refs));
				if (ret)
					goto out;
				sr = &si->refs[si->nr_refs++];
				sr->dir = k.offset;
				sr->len = nl;
				memcpy(sr->name, d + off + sizeof(*r), nl);
				sr->name[nl] = 0;
				off += (uint32_t)sizeof(*r) + nl;
			}
		} else if (k.type == ARB_EXTENT_DATA) {
			const struct arb_file_extent *fe = (const void *)d;
			struct sext *e;

			if (sz < ARB_FILE_EXTENT_INLINE_HDR) {
				ret = -EUCLEAN;
				goto out;
			}
			ret = grow((void **)&si->ext, &si->cap_ext, si->nr_ext,
				   sizeof(*si->ext));
			if (ret)
				goto out;
			e = &si->ext[si->nr_ext++];
			memset(e, 0, sizeof(*e));
			e->off = k.offset;
			e->type = arb_file_extent_f_type(fe);
			if (e->type == ARB_FILE_EXTENT_INLINE) {
				e->len = arb_file_extent_inline_len(fe, sz);
			} else {
				if (sz < sizeof(*fe)) {
					ret = -EUCLEAN;
					goto out;
				}
				e->len = arb_file_extent_f_num_bytes(fe);
				e->bytenr = arb_file_extent_f_disk_bytenr(fe);
				e->hole = e->bytenr == 0;
				e->disk_len = arb_file_extent_f_disk_num_bytes(fe);
				e->ext_off = arb_file_extent_f_offset(fe);
				e->ram = arb_file_extent_f_ram_bytes(fe);
				e->compression = arb_file_extent_f_compression(fe);
			}
			/* the bytes that say where the data is: compared
			 * with the parent's (generation left out) */
			e->raw_len = sz < sizeof(e->raw) ? sz : sizeof(e->raw);
			memcpy(e->raw, d, e->raw_len);
			memset(e->raw, 0, 8);
		}
	}
	ret = ret == 1 ? 0 : ret;
out:
	arb_iter_release(&it);
	return ret;
}

static int scan(struct sctx *c, struct fs_tree *tr, uint64_t from,
		struct sinode *si)
{
	int ret;

	fs_lock(c->fs);
	ret = scan_inode(tr, from, si);
	fs_unlock(c->fs);
	return ret;
}

static int fail(struct sctx *c, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int fail(struct sctx *c, int err, const char *fmt, ...)
{
	va_list ap;

	if (c->why && c->why_len && !c->why[0]) {
		va_start(ap, fmt);
		vsnprintf(c->why, c->why_len, fmt, ap);
		va_end(ap);
	}
	return err;
}

static int send_inode_cmd(struct sctx *c, const struct sinode *si)
{
	const struct arb_inode *in = &si->in;
	char target[ARB_SYMLINK_MAX + 1];
	int tlen = 0;

	if (S_ISLNK(in->mode)) {
		tlen = arb_fs_readlink(c->fs, in->ino, target, sizeof(target));
		if (tlen < 0)
			return fail(c, tlen, "inode %llu: reading its target",
				    (unsigned long long)si->obj);
	}
	sw_begin(&c->w, ARB_SCMD_INODE);
	sw_u64(&c->w, si->obj);
	sw_u64(&c->w, S_ISLNK(in->mode) ? (uint64_t)tlen
		       : S_ISDIR(in->mode) ? 0 : in->size);
	sw_u64(&c->w, S_ISCHR(in->mode) || S_ISBLK(in->mode) ? in->rdev : 0);
	sw_u64(&c->w, (uint64_t)in->atime.tv_sec);
	sw_u64(&c->w, (uint64_t)in->mtime.tv_sec);
	sw_u32(&c->w, in->mode);
	sw_u32(&c->w, in->uid);
	sw_u32(&c->w, in->gid);
	sw_u32(&c->w, (uint32_t)in->atime.tv_nsec);
	sw_u32(&c->w, (uint32_t)in->mtime.tv_nsec);
	if (tlen)
		sw_bytes(&c->w, target, (size_t)tlen);
	return sw_end(&c->w);
}

/* xattrs of si; pold: the parent's inode (same objectid) or 0 */
static int send_xattrs(struct sctx *c, uint64_t ino, uint64_t pino)
{
	ssize_t n, pn = 0;
	int ret = 0;

	n = arb_fs_listxattr(c->fs, ino, c->list, 65536);
	if (n < 0)
		return fail(c, (int)n, "inode %llu: listing xattrs",
			    (unsigned long long)arb_inum_obj(ino));
	if (pino) {
		pn = arb_fs_listxattr(c->fs, pino, c->plist, 65536);
		if (pn < 0)
			return (int)pn;
		/* names only the parent has */
		for (char *p = c->plist; p < c->plist + pn; p += strlen(p) + 1) {
			ssize_t v = arb_fs_getxattr(c->fs, ino, p, NULL, 0);

			if (v >= 0)
				continue;
			if (v != -ENODATA)
				return (int)v;
			sw_begin(&c->w, ARB_SCMD_RMXATTR);
			sw_u64(&c->w, arb_inum_obj(ino));
			sw_bytes(&c->w, p, strlen(p));
			ret = sw_end(&c->w);
			if (ret)
				return ret;
		}
	}
	for (char *p = c->list; p < c->list + n; p += strlen(p) + 1) {
		ssize_t v = arb_fs_getxattr(c->fs, ino, p, c->buf,
					    ARB_XATTR_SIZE_MAX);

		if (v < 0)
			return fail(c, (int)v, "inode %llu: reading xattr %s",
				    (unsigned long long)arb_inum_obj(ino), p);
		if (pino) {
			ssize_t pv = arb_fs_getxattr(c->fs, pino, p, c->pbuf,
						     ARB_XATTR_SIZE_MAX);

			if (pv == v && !memcmp(c->buf, c->pbuf, (size_t)v))
				continue;
		}
		sw_begin(&c->w, ARB_SCMD_XATTR);
		sw_u64(&c->w, arb_inum_obj(ino));
		sw_u16(&c->w, (uint16_t)strlen(p));
		sw_bytes(&c->w, p, strlen(p));
		sw_bytes(&c->w, c->buf, (size_t)v);
		ret = sw_end(&c->w);
		if (ret)
			return ret;
	}
	return 0;
}

static int send_write(struct sctx *c, const struct sinode *si, uint64_t off,
		      uint64_t end);
static int send_range_cmd(struct sctx *c, unsigned type, uint64_t obj,
			  uint64_t off, uint64_t len);

/* version 1: all of a file's data, as bytes */
static int send_data(struct sctx *c, const struct sinode *si)
{
	uint64_t size = si->in.size;
	int ret;

	for (size_t i = 0; i < si->nr_ext; i++) {
		const struct sext *e = &si->ext[i];
		uint64_t off = e->off;

		if (e->hole)
			continue;
		/* preallocated space past the size stays (KEEP_SIZE) */
		if (e->type == ARB_FILE_EXTENT_PREALLOC) {
			ret = send_range_cmd(c, ARB_SCMD_PREALLOC, si->obj, off,
					     e->len);
			if (ret)
				return ret;
			continue;
		}
		if (off >= size)
			continue;
		ret = send_write(c, si, off,
				 e->len > size - off ? size : off + e->len);
		if (ret)
			return ret;
	}
	return 0;
}

/* ---- version 2: only what changed, shared data as clones ----------------
 *
 * A file's data goes as the file ranges whose extent mapping differs
 * between the parent and the snapshot (all of them for a new file or a
 * full stream): byte x of a file is unchanged when both trees map it to
 * the same byte of the same disk extent (or both to a hole).  Within a
 * changed range, the snapshot's data goes as, in order of preference:
 *   CLONE          when the same bytes of the same disk extent are
 *                  already on the receiving side: sent earlier in this
 *                  stream, or (incremental) held by a file of the parent
 *                  whose mapping the snapshot keeps too, found through
 *                  the extent's back-references;
 *   ENCODED_WRITE  a compressed extent as it is stored, when that is
 *                  smaller than its bytes;
 *   WRITE          the bytes;
 * and holes the snapshot has where the parent had data as PUNCH.
 * Why a parent file is a safe clone source only where the snapshot maps
 * it the same: the receiver applies inodes in objectid order, so a file
 * of the parent may already have been rewritten when the clone comes,
 * unless that range is one this stream never touches.
 */

/* a data range sent in this stream: obj's [fstart, fend) holds bytes
 * [eo, eo + fend - fstart) of disk extent bytenr */
struct srec {
	uint64_t bytenr, obj, fstart, fend, eo;
	uint32_t next; /* index + 1 of the next record of the same hash */
};
/* records kept at most (48 bytes each): past it, later shares of data
 * sent earlier go as data */
#define SREC_MAX (1u << 20)
/* back-references of one extent looked at for parent sources */
#define SREF_MAX 64
/* extent items of one file looked at per back-reference */
#define SITEM_MAX 256

/* a clone source: bytes [eo, eo_end) of the extent at obj's fstart */
struct siv {
	uint64_t eo, eo_end, obj, fstart;
};

static uint32_t srec_slot(uint64_t bytenr, size_t size)
{
	uint64_t h = bytenr * 0x9e3779b97f4a7c15ULL;

	return (uint32_t)((h >> 32) & (size - 1));
}

static int srec_add(struct sctx *c, uint64_t bytenr, uint64_t obj,
		    uint64_t fstart, uint64_t fend, uint64_t eo)
{
	struct srec *r;

	if (c->nr_recs >= SREC_MAX)
		return 0;
	if (c->nr_recs + 1 > c->rhash_size / 2) {
		size_t ns = c->rhash_size ? c->rhash_size * 2 : 1024;
		uint32_t *nh = calloc(ns, sizeof(*nh));

		if (!nh)
			return -ENOMEM;
		free(c->rhash);
		c->rhash = nh;
		c->rhash_size = ns;
		for (size_t i = 0; i < c->nr_recs; i++) {
			uint32_t sl = srec_slot(c->recs[i].bytenr, ns);

			c->recs[i].next = nh[sl];
			nh[sl] = (uint32_t)i + 1;
		}
	}
	if (grow((void **)&c->recs, &c->cap_recs, c->nr_recs, sizeof(*c->recs)))
		return -ENOMEM;
	r = &c->recs[c->nr_recs];
	r->bytenr = bytenr;
	r->obj = obj;
	r->fstart = fstart;
	r->fend = fend;
	r->eo = eo;
	r->next = c->rhash[srec_slot(bytenr, c->rhash_size)];
	c->rhash[srec_slot(bytenr, c->rhash_size)] = (uint32_t)++c->nr_recs;
	return 0;
}

static int siv_add(struct sctx *c, uint64_t eo, uint64_t eo_end, uint64_t obj,
		   uint64_t fstart)
{
	if (eo >= eo_end)
		return 0;
	if (grow((void **)&c->ivs, &c->cap_ivs, c->nr_ivs, sizeof(*c->ivs)))
		return -ENOMEM;
	c->ivs[c->nr_ivs++] = (struct siv){ eo, eo_end, obj, fstart };
	return 0;
}

/* one tree's items of obj that map bytes of e's disk extent with base
 * (file offset - extent offset): the extent-offset ranges, cut at size */
struct sran {
	uint64_t eo, eo_end;
};

static int tree_ranges(struct fs_tree *tr, uint64_t obj, uint64_t base,
		       const struct sext *e, uint64_t size, struct sran *out,
		       size_t *nr)
{
	uint64_t span = e->compression ? e->ram : e->disk_len;
	/* the items of this back-reference sit at key offsets base + [0,
	 * span): base may be "negative" (a late part of an extent cloned
	 * to an early offset), so start at 0 then */
	uint64_t from = base > ARB_MAX_FILE_SIZE ? 0 : base;
	struct arb_key k = { obj, ARB_EXTENT_DATA, from };
	struct arb_iter it;
	size_t seen = 0;
	int ret;

	*nr = 0;
	arb_iter_init(&it, tr->root);
	for (ret = arb_iter_seek(&it, &k); ret == 0 && seen < SITEM_MAX;
	     ret = arb_iter_next(&it), seen++) {
		const struct arb_file_extent *fe;
		uint64_t eo, n;

		arb_iter_key(&it, &k);
		if (k.objectid != obj || k.type != ARB_EXTENT_DATA ||
		    k.offset - base >= span)
			break;
		if (arb_iter_size(&it) < sizeof(*fe))
			continue;
		fe = arb_iter_data(&it);
		if (arb_file_extent_f_type(fe) != ARB_FILE_EXTENT_REG ||
		    arb_file_extent_f_disk_bytenr(fe) != e->bytenr ||
		    arb_file_extent_f_disk_num_bytes(fe) != e->disk_len ||
		    arb_file_extent_f_compression(fe) != e->compression)
			continue;
		eo = arb_file_extent_f_offset(fe);
		n = arb_file_extent_f_num_bytes(fe);
		if (k.offset - eo != base || k.offset >= size)
			continue;
		if (n > size - k.offset)
			n = size - k.offset;
		if (*nr < SITEM_MAX)
			out[(*nr)++] = (struct sran){ eo, eo + n };
	}
	arb_iter_release(&it);
	return ret < 0 ? ret : 0;
}

/*
 * Incremental: files of the parent holding bytes of e's disk extent that
 * the snapshot maps the same way (so the receiver has them, untouched by
 * this stream, at any point of it): appended to c->ivs.  Lock held.
 */
static int parent_sources(struct sctx *c, const struct sext *e,
			  struct sran *rs, struct sran *rp)
{
	struct arb_key k = { e->bytenr, ARB_EXTENT_DATA_REF, 0 };
	struct { uint64_t obj, base; } refs[SREF_MAX];
	size_t nr_refs = 0;
	struct arb_iter it;
	int ret;

	arb_iter_init(&it, c->fs->vol->extent_root);
	for (ret = arb_iter_seek(&it, &k); ret == 0 && nr_refs < SREF_MAX;
	     ret = arb_iter_next(&it)) {
		const struct arb_extent_data_ref *r;
		uint64_t obj, base;
		size_t i;

		arb_iter_key(&it, &k);
		if (k.objectid != e->bytenr || k.type != ARB_EXTENT_DATA_REF)
			break;
		if (arb_iter_size(&it) != sizeof(*r))
			continue;
		r = arb_iter_data(&it);
		obj = arb_extent_data_ref_d_objectid(r);
		base = arb_extent_data_ref_d_offset(r);
		if (obj < ARB_FIRST_INO || obj > ARB_INUM_OBJ_MAX)
			continue;
		/* the same (inode, base) from several trees: once */
		for (i = 0; i < nr_refs; i++)
			if (refs[i].obj == obj && refs[i].base == base)
				break;
		if (i == nr_refs)
			refs[nr_refs++] = (typeof(refs[0])){ obj, base };
	}
	arb_iter_release(&it);
	if (ret < 0)
		return ret;
	for (size_t i = 0; i < nr_refs; i++) {
		struct arb_inode si, pi;
		size_t ns, np, a = 0, b = 0;

		if (fs_inode_read(c->fs, fs_ino(c->tr, refs[i].obj), &si) ||
		    fs_inode_read(c->fs, fs_ino(c->ptr, refs[i].obj), &pi) ||
		    !S_ISREG(si.mode) || !S_ISREG(pi.mode))
			continue;
		ret = tree_ranges(c->tr, refs[i].obj, refs[i].base, e,
				  si.size < pi.size ? si.size : pi.size, rs, &ns);
		if (!ret)
			ret = tree_ranges(c->ptr, refs[i].obj, refs[i].base, e,
					  si.size < pi.size ? si.size : pi.size,
					  rp, &np);
		if (ret)
			return ret;
		/* both lists ascend (items in key order): intersect */
		while (a < ns && b < np) {
			uint64_t lo = rs[a].eo > rp[b].eo ? rs[a].eo : rp[b].eo;
			uint64_t hi = rs[a].eo_end < rp[b].eo_end ? rs[a].eo_end
								  : rp[b].eo_end;

			if (lo < hi) {
				ret = siv_add(c, lo, hi, refs[i].obj,
					      refs[i].base + lo);
				if (ret)
					return ret;
			}
			if (rs[a].eo_end < rp[b].eo_end)
				a++;
			else
				b++;
		}
	}
	return 0;
}

/* c->ivs := where the bytes of e's disk extent are on the receiving side */
static int gather_sources(struct sctx *c, const struct sext *e)
{
	int ret = 0;

	c->nr_ivs = 0;
	if (c->rhash_size) {
		for (uint32_t i = c->rhash[srec_slot(e->bytenr, c->rhash_size)];
		     i && !ret; i = c->recs[i - 1].next) {
			const struct srec *r = &c->recs[i - 1];

			if (r->bytenr == e->bytenr)
				ret = siv_add(c, r->eo, r->eo + (r->fend - r->fstart),
					      r->obj, r->fstart);
		}
	}
	if (!ret && c->ptr) {
		struct sran *rs = malloc(2 * SITEM_MAX * sizeof(*rs));

		if (!rs)
			return -ENOMEM;
		fs_lock(c->fs);
		ret = parent_sources(c, e, rs, rs + SITEM_MAX);
		fs_unlock(c->fs);
		free(rs);
	}
	return ret;
}

/* a data command of obj at off that the first part of a resumed stream
 * applied: not written (the same walk makes the same commands, so the
 * receiver's resume offset is the start of one) */
static bool sent_before(const struct sctx *c, uint64_t obj, uint64_t off)
{
	return c->skip || (obj == c->resume_obj && off < c->resume_off);
}

static int send_write(struct sctx *c, const struct sinode *si, uint64_t off,
		      uint64_t end)
{
	int ret;

	if (c->skip)
		return 0;

	while (off < end) {
		size_t want = end - off > ARB_SEND_DATA_MAX
				      ? ARB_SEND_DATA_MAX
				      : (size_t)(end - off);
		ssize_t r;

		if (sent_before(c, si->obj, off)) {
			off += want;
			continue;
		}
		r = arb_fs_read(c->fs, si->in.ino, c->buf, want, off);
		if (r < 0)
			return fail(c, (int)r, "inode %llu: reading data at %llu",
				    (unsigned long long)si->obj,
				    (unsigned long long)off);
		if (r == 0)
			return fail(c, -EIO,
				    "inode %llu: no data at %llu below its size",
				    (unsigned long long)si->obj,
				    (unsigned long long)off);
		sw_begin(&c->w, ARB_SCMD_WRITE);
		sw_u64(&c->w, si->obj);
		sw_u64(&c->w, off);
		sw_bytes(&c->w, c->buf, (size_t)r);
		ret = sw_end(&c->w);
		if (ret)
			return ret;
		c->st.data += (uint64_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

static int send_range_cmd(struct sctx *c, unsigned type, uint64_t obj,
			  uint64_t off, uint64_t len)
{
	if (sent_before(c, obj, off))
		return 0;
	sw_begin(&c->w, type);
	sw_u64(&c->w, obj);
	sw_u64(&c->w, off);
	sw_u64(&c->w, len);
	return sw_end(&c->w);
}

/* stored form of a compressed extent's part [x, y): 0 sent, 1 not
 * (not compressed, or the stored form is not smaller) */
static int send_encoded(struct sctx *c, const struct sinode *si,
			const struct sext *e, uint64_t x, uint64_t y)
{
	const struct arb_encoded *en = &c->enc;
	int ret;

	if (c->version < 2 || !e->compression)
		return 1;
	if (sent_before(c, si->obj, x))
		return 0;
	/* one read per extent item, however many pieces it is sent in */
	if (c->enc_obj != si->obj || c->enc_off != e->off ||
	    c->enc_bytenr != e->bytenr) {
		c->enc_obj = 0;
		ret = arb_fs_read_encoded(c->fs, si->in.ino, e->off, &c->enc,
					  c->ebuf, ARB_ENCODED_MAX);
		if (ret == -ENODATA)
			return 1;
		if (ret)
			return fail(c, ret,
				    "inode %llu: reading the compressed extent at %llu",
				    (unsigned long long)si->obj,
				    (unsigned long long)e->off);
		c->enc_obj = si->obj;
		c->enc_off = e->off;
		c->enc_bytenr = e->bytenr;
	}
	if (en->file_off != e->off || x < en->file_off ||
	    en->compression != ARB_COMPRESS_ZLIB || en->len >= y - x ||
	    en->len > ARB_SEND_ENC_MAX)
		return 1; /* the bytes are smaller (or not what we expect) */
	sw_begin(&c->w, ARB_SCMD_ENCODED_WRITE);
	sw_u64(&c->w, si->obj);
	sw_u64(&c->w, x);
	sw_u64(&c->w, y - x);
	sw_u64(&c->w, en->ram_bytes);
	sw_u64(&c->w, en->ext_off + (x - en->file_off));
	sw_u32(&c->w, ARB_SEND_ENC_ZLIB);
	sw_bytes(&c->w, c->ebuf, en->len);
	ret = sw_end(&c->w);
	c->st.encoded += y - x;
	c->st.encoded_stored += en->len;
	return ret;
}

/* [x, y) of si, inside REG extent e, not shareable: the bytes, or the
 * stored form of a compressed extent when it is smaller */
static int send_plain(struct sctx *c, const struct sinode *si,
		      const struct sext *e, uint64_t x, uint64_t y)
{
	int ret = send_encoded(c, si, e, x, y);

	if (ret != 1)
		return ret;
	return send_write(c, si, x, y);
}

/* [x, y) of si (y <= its size), inside REG extent e */
static int send_reg(struct sctx *c, const struct sinode *si,
		    const struct sext *e, uint64_t x, uint64_t y)
{
	uint64_t cur = x;
	int ret;

	ret = gather_sources(c, e);
	while (!ret && cur < y) {
		uint64_t eo = e->ext_off + (cur - e->off);
		const struct siv *best = NULL;
		uint64_t next = y, len;

		for (size_t i = 0; i < c->nr_ivs; i++) {
			const struct siv *v = &c->ivs[i];
			uint64_t soff, n;

			if (v->eo > eo) {
				/* where the next source starts */
				if (e->off + (v->eo - e->ext_off) < next)
					next = e->off + (v->eo - e->ext_off);
				continue;
			}
			if (v->eo_end <= eo)
				continue;
			n = v->eo_end - eo < y - cur ? v->eo_end - eo : y - cur;
			soff = v->fstart + (eo - v->eo);
			/* a file's own range may not overlap the clone */
			if (v->obj == si->obj && soff < cur + n && cur < soff + n)
				continue;
			if (!best || v->eo_end > best->eo_end)
				best = v;
		}
		if (best) {
			len = best->eo_end - eo < y - cur ? best->eo_end - eo
							  : y - cur;
			if (sent_before(c, si->obj, cur)) {
				cur += len;
				continue;
			}
			sw_begin(&c->w, ARB_SCMD_CLONE);
			sw_u64(&c->w, si->obj);
			sw_u64(&c->w, cur);
			sw_u64(&c->w, len);
			sw_u64(&c->w, best->obj);
			sw_u64(&c->w, best->fstart + (eo - best->eo));
			ret = sw_end(&c->w);
			c->st.cloned += len;
		} else {
			len = next - cur;
			ret = send_plain(c, si, e, cur, next);
		}
		cur += len;
	}
	if (!ret)
		ret = srec_add(c, e->bytenr, si->obj, x, y,
			       e->ext_off + (x - e->off));
	return ret;
}

/* does a map x the way b does (both holes, or the same disk bytes)? */
static bool same_map(const struct sext *a, const struct sext *b)
{
	if (a && a->hole)
		a = NULL;
	if (b && b->hole)
		b = NULL;
	if (!a || !b)
		return !a && !b;
	if (a->type != b->type || a->type == ARB_FILE_EXTENT_INLINE)
		return false;
	return a->bytenr == b->bytenr && a->disk_len == b->disk_len &&
	       a->compression == b->compression && a->ram == b->ram &&
	       a->off - a->ext_off == b->off - b->ext_off;
}

/*
 * Where extent e's range ends, for comparing two files' maps: an inline
 * extent holds its block whole (the bytes past its data are zeros on
 * both sides), so a hole that replaces it is punched to the block's end.
 * Its own length would punch part of a block on the receiving side,
 * which zeroes bytes and leaves data where the snapshot has a hole.
 */
static uint64_t sext_end(const struct sctx *c, const struct sext *e)
{
	uint64_t end = e->off + e->len, bs = c->fs->bs;

	if (e->type == ARB_FILE_EXTENT_INLINE && end % bs)
		end += bs - end % bs;
	return end;
}

static uint64_t ext_end(const struct sctx *c, const struct sinode *si)
{
	return si->nr_ext ? sext_end(c, &si->ext[si->nr_ext - 1]) : 0;
}

/* the snapshot's content of [x, y), a range whose mapping changed */
static int send_segment(struct sctx *c, const struct sinode *s,
			const struct sext *a, bool parent_had, uint64_t x,
			uint64_t y)
{
	uint64_t size = s->in.size;
	int ret = 0;

	if (a && a->type == ARB_FILE_EXTENT_PREALLOC) {
		/* preallocated space may lie past the size (KEEP_SIZE);
		 * fallocate keeps what a range holds, so empty it first */
		if (parent_had)
			ret = send_range_cmd(c, ARB_SCMD_PUNCH, s->obj, x, y - x);
		return ret ? ret
			   : send_range_cmd(c, ARB_SCMD_PREALLOC, s->obj, x,
					    y - x);
	}
	/* a hole: past the size too (preallocated space the parent had
	 * there stays through a truncate to the same size) */
	if (!a || a->hole)
		return parent_had ? send_range_cmd(c, ARB_SCMD_PUNCH, s->obj, x,
						   y - x)
				  : 0;
	if (x >= size)
		return 0; /* the size the inode command set cut it */
	if (y > size)
		y = size;
	if (a->type == ARB_FILE_EXTENT_INLINE)
		return send_write(c, s, x, y);
	return send_reg(c, s, a, x, y);
}

/*
 * A regular file's data, version 2: the ranges where s maps its bytes
 * otherwise than p (p empty for a new file), after the inode command set
 * the size.
 */
static int send_changed(struct sctx *c, const struct sinode *s,
			const struct sinode *p)
{
	uint64_t end = ext_end(c, s) > ext_end(c, p) ? ext_end(c, s)
						    : ext_end(c, p);
	uint64_t pos = 0;
	size_t i = 0, j = 0;
	int ret = 0;

	while (!ret && pos < end) {
		const struct sext *a = NULL, *b = NULL;
		uint64_t next = end;

		while (i < s->nr_ext && sext_end(c, &s->ext[i]) <= pos)
			i++;
		while (j < p->nr_ext && sext_end(c, &p->ext[j]) <= pos)
			j++;
		if (i < s->nr_ext) {
			if (s->ext[i].off <= pos) {
				a = &s->ext[i];
				next = sext_end(c, a);
			} else {
				next = s->ext[i].off;
			}
		}
		if (j < p->nr_ext) {
			if (p->ext[j].off <= pos) {
				b = &p->ext[j];
				if (sext_end(c, b) < next)
					next = sext_end(c, b);
			} else if (p->ext[j].off < next) {
				next = p->ext[j].off;
			}
		}
		if (!same_map(a, b))
			ret = send_segment(c, s, a, b && !b->hole, pos, next);
		pos = next;
	}
	return ret;
}

static bool same_extents(const struct sinode *a, const struct sinode *b)
{
	if (a->nr_ext != b->nr_ext)
		return false;
	for (size_t i = 0; i < a->nr_ext; i++)
		if (a->ext[i].off != b->ext[i].off ||
		    a->ext[i].raw_len != b->ext[i].raw_len ||
		    memcmp(a->ext[i].raw, b->ext[i].raw, a->ext[i].raw_len))
			return false;
	/* inline data is in raw only up to sizeof(raw): compare lengths
	 * too; a changed inline file has a new item generation anyway,
	 * but the generation is masked, so be safe */
	for (size_t i = 0; i < a->nr_ext; i++)
		if (a->ext[i].type == ARB_FILE_EXTENT_INLINE)
			return false;
	return true;
}

static bool has_ref(const struct sinode *si, const struct sref *r)
{
	for (size_t i = 0; i < si->nr_refs; i++)
		if (si->refs[i].dir == r->dir && si->refs[i].len == r->len &&
		    !memcmp(si->refs[i].name, r->name, r->len))
			return true;
	return false;
}

static int add_link(struct slink **arr, size_t *nr, size_t *cap, uint64_t obj,
		    const struct sref *r)
{
	int ret = grow((void **)arr, cap, *nr, sizeof(**arr));

	if (ret)
		return ret;
	(*arr)[*nr].dir = r->dir;
	(*arr)[*nr].obj = obj;
	(*arr)[*nr].len = r->len;
	memcpy((*arr)[*nr].name, r->name, r->len);
	(*nr)++;
	return 0;
}

/* one objectid: s the snapshot's view, p the parent's (present or not) */
static int send_one_cmds(struct sctx *c, struct sinode *s, struct sinode *p)
{
	int ret;

	if (!s->present) {
		/* gone: its names go, then it */
		for (size_t i = 0; i < p->nr_refs; i++) {
			ret = add_link(&c->unlinks, &c->nr_unlinks,
				       &c->cap_unlinks, p->obj, &p->refs[i]);
			if (ret)
				return ret;
		}
		ret = grow((void **)&c->deletes, &c->cap_deletes,
			   c->nr_deletes, sizeof(*c->deletes));
		if (ret)
			return ret;
		c->deletes[c->nr_deletes++] = p->obj;
		return 0;
	}
	if (p->present && !memcmp(&s->item, &p->item, sizeof(s->item)))
		return 0; /* unchanged */
	if (p->present && (p->in.mode & S_IFMT) != (s->in.mode & S_IFMT))
		return fail(c, -EINVAL,
			    "inode %llu changed type between parent and snapshot (not the same lineage?)",
			    (unsigned long long)s->obj);
	c->st.inodes++;
	if (c->version < 2 && p->present && S_ISREG(s->in.mode) &&
	    !same_extents(s, p)) {
		sw_begin(&c->w, ARB_SCMD_TRUNCATE);
		sw_u64(&c->w, s->obj);
		sw_u64(&c->w, 0);
		ret = sw_end(&c->w);
		if (ret)
			return ret;
	}
	ret = send_inode_cmd(c, s);
	if (!ret && !S_ISLNK(s->in.mode))
		ret = send_xattrs(c, s->in.ino, p->present ? p->in.ino : 0);
	if (!ret && S_ISREG(s->in.mode) &&
	    (!p->present || !same_extents(s, p)))
		ret = c->version < 2 ? send_data(c, s) : send_changed(c, s, p);
	if (ret)
		return ret;
	for (size_t i = 0; i < s->nr_refs; i++) {
		if (p->present && has_ref(p, &s->refs[i]))
			continue;
		ret = add_link(&c->links, &c->nr_links, &c->cap_links, s->obj,
			       &s->refs[i]);
		if (ret)
			return ret;
	}
	for (size_t i = 0; p->present && i < p->nr_refs; i++) {
		if (has_ref(s, &p->refs[i]))
			continue;
		ret = add_link(&c->unlinks, &c->nr_unlinks, &c->cap_unlinks,
			       p->obj, &p->refs[i]);
		if (ret)
			return ret;
	}
	/* version 3: a receiver sets a non-directory's times from its
	 * INODE once its data is in; a directory's names come later */
	if (c->version >= 3 && !S_ISDIR(s->in.mode))
		return 0;
	ret = grow((void **)&c->times, &c->cap_times, c->nr_times,
		   sizeof(*c->times));
	if (ret)
		return ret;
	c->times[c->nr_times].obj = s->obj;
	c->times[c->nr_times].atime = s->in.atime;
	c->times[c->nr_times].mtime = s->in.mtime;
	c->nr_times++;
	return 0;
}

static int send_one(struct sctx *c, struct sinode *s, struct sinode *p)
{
	uint64_t obj, bytes, commands, inodes;
	struct arb_send_stats st;
	bool est = c->w.estimate;
	int ret;

	/* an inode unlinked but still open when the snapshot was taken
	 * (its orphan item came along) is not part of it */
	if (s->present && s->in.nlink == 0)
		s->present = false;
	if (p->present && p->in.nlink == 0)
		p->present = false;
	if (!s->present && !p->present)
		return 0;
	obj = s->present ? s->obj : p->obj;

	if (!c->resume_obj || obj >= c->resume_obj)
		return send_one_cmds(c, s, p);
	/* sent in the first part: only what the rest needs of it */
	bytes = c->w.bytes;
	commands = c->w.commands;
	st = c->st;
	c->skip = true;
	c->w.estimate = true;
	ret = send_one_cmds(c, s, p);
	c->skip = false;
	c->w.estimate = est;
	c->w.bytes = bytes;
	c->w.commands = commands;
	inodes = c->st.inodes;
	c->st = st;
	c->st.inodes = inodes; /* the end command counts all of them */
	return ret;
}

static int send_links(struct sctx *c, struct slink *l, size_t nr,
		      unsigned type)
{
	int ret;

	for (size_t i = 0; i < nr; i++) {
		sw_begin(&c->w, type);
		sw_u64(&c->w, l[i].dir);
		sw_u64(&c->w, l[i].obj);
		sw_bytes(&c->w, l[i].name, l[i].len);
		ret = sw_end(&c->w);
		if (ret)
			return ret;
	}
	return 0;
}

/* ---- which inodes changed ----------------------------------------------
 *
 * An inode differs between the snapshot S and the parent P only if one
 * of its items sits in a leaf of S or of P that the other tree does not
 * share.  A node of one tree is shared when the other tree, followed
 * from its root along the node's first key, has a node of the same
 * level at the same address: the same block, so the same content, and
 * everything below it too, which the walk then skips.  Walking both
 * trees this way visits the nodes on the paths that changed (and looks
 * up one path of the other tree per child it passes), so the cost
 * follows the size of the change, not of the trees.  The result is the
 * sorted list of objectids to compare item by item (send_one).  This is
 * the small stand-in for the shared tree-comparison engine
 * (lib/send/compare.c) that find-new and diff use.
 */
struct objset {
	uint64_t *v;
	size_t nr, cap;
	uint64_t nodes_read;
};

static int objset_add(struct objset *o, uint64_t obj)
{
	if (obj < ARB_FIRST_INO || obj > ARB_INUM_OBJ_MAX)
		return 0;
	if (o->nr && o->v[o->nr - 1] == obj)
		return 0;
	if (grow((void **)&o->v, &o->cap, o->nr, sizeof(*o->v)))
		return -ENOMEM;
	o->v[o->nr++] = obj;
	return 0;
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * The other tree's nodes on the last path looked up, with the key range
 * each covers, so that lookups in key order (children of one node) start
 * from the deepest cached node that covers their key instead of the root.
 */
struct pcache {
	struct arb_node *node[ARB_MAX_LEVEL];
	struct arb_key lo[ARB_MAX_LEVEL], hi[ARB_MAX_LEVEL];
	bool hi_inf[ARB_MAX_LEVEL];
};

static void pcache_drop(struct arb_vol *vol, struct pcache *pc, int from)
{
	for (int l = from; l >= 0; l--) {
		if (pc->node[l])
			arb_node_put(vol, pc->node[l]);
		pc->node[l] = NULL;
	}
}

static bool pcache_covers(const struct pcache *pc, int l,
			  const struct arb_key *k)
{
	return pc->node[l] && arb_key_cmp(&pc->lo[l], k) <= 0 &&
	       (pc->hi_inf[l] || arb_key_cmp(k, &pc->hi[l]) < 0);
}

/* does tree other hold the node (bytenr, level, first key k)? lock held */
static int shared_in(struct arb_vol *vol, struct arb_root *other,
		     struct pcache *pc, uint64_t bytenr, int level,
		     const struct arb_key *k, struct objset *o, bool *yes)
{
	struct arb_node *n, *ch;
	struct arb_key nk, lo, hi;
	bool hi_inf;
	int ret = 0, i, nr, l, top = arb_level(other->node);

	*yes = false;
	if (level > top)
		return 0;
	if (level == top) {
		*yes = other->node->bytenr == bytenr;
		return 0;
	}
	/* the deepest cached node above level that covers k */
	for (l = level + 1; l < top; l++)
		if (pcache_covers(pc, l, k))
			break;
	if (l == top) {
		pcache_drop(vol, pc, top - 1);
		n = other->node;
		memset(&lo, 0, sizeof(lo));
		memset(&hi, 0, sizeof(hi));
		hi_inf = true;
	} else {
		pcache_drop(vol, pc, l - 1);
		n = pc->node[l];
		lo = pc->lo[l];
		hi = pc->hi[l];
		hi_inf = pc->hi_inf[l];
	}
	for (;;) {
		nr = (int)arb_nritems(n);
		if (nr == 0)
			break;
		/* the last child whose first key is <= k */
		for (i = nr - 1; i > 0; i--) {
			arb_node_key(n, i, &nk);
			if (arb_key_cmp(&nk, k) <= 0)
				break;
		}
		if (arb_level(n) - 1 == level) {
			arb_node_key(n, i, &nk);
			*yes = arb_child_bytenr(n, i) == bytenr &&
			       !arb_key_cmp(&nk, k);
			break;
		}
		/* the child's range */
		if (i > 0)
			arb_node_key(n, i, &lo);
		if (i + 1 < nr) {
			arb_node_key(n, i + 1, &hi);
			hi_inf = false;
		}
		ret = arb_node_read(vol, arb_child_bytenr(n, i),
				    arb_child_mirror(n, i), arb_child_gen(n, i),
				    arb_level(n) - 1, &ch);
		if (ret)
			break;
		o->nodes_read++;
		l = arb_level(ch);
		pc->node[l] = ch; /* the cache holds the read's pin */
		pc->lo[l] = lo;
		pc->hi[l] = hi;
		pc->hi_inf[l] = hi_inf;
		n = ch;
	}
	return ret;
}

/* the objectids of items in nodes under n (of tree t) not shared with
 * tree other; lock held */
static int unshared_objs(struct arb_vol *vol, struct arb_node *n,
			 struct arb_root *other, struct pcache *pc,
			 struct objset *o)
{
	struct arb_key k;
	struct arb_node *ch;
	bool yes;
	int ret = 0;

	if (arb_level(n) == 0) {
		for (int i = 0; i < (int)arb_nritems(n) && !ret; i++) {
			arb_node_key(n, i, &k);
			ret = objset_add(o, k.objectid);
		}
		return ret;
	}
	for (int i = 0; i < (int)arb_nritems(n) && !ret; i++) {
		arb_node_key(n, i, &k);
		ret = shared_in(vol, other, pc, arb_child_bytenr(n, i),
				arb_level(n) - 1, &k, o, &yes);
		if (ret || yes)
			continue;
		ret = arb_node_read(vol, arb_child_bytenr(n, i),
				    arb_child_mirror(n, i), arb_child_gen(n, i),
				    arb_level(n) - 1, &ch);
		if (ret)
			break;
		o->nodes_read++;
		ret = unshared_objs(vol, ch, other, pc, o);
		arb_node_put(vol, ch);
	}
	return ret;
}

/* the sorted, distinct objectids that may differ between the trees */
static int changed_objs(struct sctx *c, struct objset *o)
{
	struct arb_vol *vol = c->fs->vol;
	struct arb_root *s = c->tr->root, *p = c->ptr->root;
	struct arb_key k = { 0, 0, 0 };
	size_t i, j;
	bool yes = false;
	int ret;

	struct pcache pc;

	memset(&pc, 0, sizeof(pc));
	fs_lock(c->fs);
	if (arb_nritems(s->node))
		arb_node_key(s->node, 0, &k);
	ret = shared_in(vol, p, &pc, s->node->bytenr, arb_level(s->node), &k,
			o, &yes);
	if (!ret && !yes)
		ret = unshared_objs(vol, s->node, p, &pc, o);
	pcache_drop(vol, &pc, ARB_MAX_LEVEL - 1);
	if (!ret && !yes)
		ret = unshared_objs(vol, p->node, s, &pc, o);
	pcache_drop(vol, &pc, ARB_MAX_LEVEL - 1);
	fs_unlock(c->fs);
	if (ret || !o->nr)
		return ret;
	qsort(o->v, o->nr, sizeof(*o->v), u64_cmp);
	for (i = 1, j = 1; i < o->nr; i++)
		if (o->v[i] != o->v[j - 1])
			o->v[j++] = o->v[i];
	o->nr = j;
	return 0;
}

/* incremental: only the objectids changed_objs names */
static int walk_changed(struct sctx *c)
{
	struct sinode s = { 0 }, p = { 0 };
	struct objset o = { 0 };
	int ret;

	ret = changed_objs(c, &o);
	c->nodes_read = o.nodes_read;
	for (size_t i = 0; !ret && i < o.nr; i++) {
		ret = scan(c, c->tr, o.v[i], &s);
		if (ret < 0)
			break;
		if (ret == 1 || s.obj != o.v[i])
			s.present = false;
		ret = scan(c, c->ptr, o.v[i], &p);
		if (ret < 0)
			break;
		if (ret == 1 || p.obj != o.v[i])
			p.present = false;
		s.obj = p.obj = o.v[i];
		ret = 0;
		if (s.present || p.present)
			ret = send_one(c, &s, &p);
	}
	free(o.v);
	sinode_free(&s);
	sinode_free(&p);
	return ret;
}

static int walk(struct sctx *c)
{
	struct sinode s = { 0 }, p = { 0 }, none = { 0 };
	bool s_valid = false, p_valid = false;
	bool s_end = false, p_end = c->ptr == NULL;
	uint64_t next_s = ARB_FIRST_INO, next_p = ARB_FIRST_INO;
	int ret = 0;

	for (;;) {
		if (!s_valid && !s_end) {
			ret = scan(c, c->tr, next_s, &s);
			if (ret < 0)
				break;
			s_end = ret == 1;
			s_valid = ret == 0;
		}
		if (!p_valid && !p_end) {
			ret = scan(c, c->ptr, next_p, &p);
			if (ret < 0)
				break;
			p_end = ret == 1;
			p_valid = ret == 0;
		}
		ret = 0;
		if (!s_valid && !p_valid)
			break;
		if (s_valid && (!p_valid || s.obj < p.obj)) {
			ret = send_one(c, &s, &none);
			next_s = s.obj + 1;
			s_valid = false;
		} else if (!s_valid || p.obj < s.obj) {
			ret = send_one(c, &none, &p);
			next_p = p.obj + 1;
			p_valid = false;
		} else {
			ret = send_one(c, &s, &p);
			next_s = s.obj + 1;
			next_p = p.obj + 1;
			s_valid = p_valid = false;
		}
		if (ret)
			break;
	}
	sinode_free(&s);
	sinode_free(&p);
	return ret;
}

static int check_rdonly(struct sctx *c, uint64_t id,
			struct arb_subvol_info *info, const char *what)
{
	int ret = arb_subvol_info_id(c->fs, id, info);

	if (ret)
		return fail(c, ret, "%s subvolume %llu: %s", what,
			    (unsigned long long)id, strerror(-ret));
	if (id == ARB_INUM_FS_TREE || !(info->flags & ARB_SUBVOL_RDONLY) ||
	    (info->flags & ARB_SUBVOL_DELETED))
		return fail(c, -EINVAL,
			    "%s subvolume %llu is not a read-only snapshot (take one with 'arbor subvolume snapshot -r')",
			    what, (unsigned long long)id);
	return 0;
}

int arb_resume_token_parse(const char *s, struct arb_resume_token *t)
{
	char hex[33];
	unsigned long long id, gen, obj, off;
	int n = 0;

	memset(t, 0, sizeof(*t));
	if (sscanf(s, "r1.%llu.%32[0-9a-f].%llu.%llu.%llu%n", &id, hex, &gen,
		   &obj, &off, &n) != 5 ||
	    s[n] || strlen(hex) != 32 || off > ARB_MAX_FILE_SIZE)
		return -EINVAL;
	for (int i = 0; i < 16; i++) {
		unsigned v;

		if (sscanf(hex + 2 * i, "%2x", &v) != 1)
			return -EINVAL;
		t->uuid[i] = (uint8_t)v;
	}
	if (obj < ARB_FIRST_INO || obj > ARB_RESUME_ALL_INODES || !gen ||
	    id < ARB_FIRST_SUBVOL_ID)
		return -EINVAL;
	t->id = id;
	t->gen = gen;
	t->obj = obj;
	t->off = off;
	return 0;
}

void arb_resume_token_format(const struct arb_resume_token *t,
			     char out[ARB_RESUME_TOKEN_MAX])
{
	int n = snprintf(out, ARB_RESUME_TOKEN_MAX, "r1.%llu.",
			 (unsigned long long)t->id);

	for (int i = 0; i < 16; i++)
		n += snprintf(out + n, (size_t)(ARB_RESUME_TOKEN_MAX - n), "%02x",
			      t->uuid[i]);
	snprintf(out + n, (size_t)(ARB_RESUME_TOKEN_MAX - n), ".%llu.%llu.%llu",
		 (unsigned long long)t->gen, (unsigned long long)t->obj,
		 (unsigned long long)t->off);
}

int arb_send(struct arb_fs *fs, uint64_t id, uint64_t parent, int fd,
	     unsigned flags, struct arb_send_stats *stp, char *why,
	     size_t why_len)
{
	return arb_send_resume(fs, id, parent, fd, flags, NULL, stp, why,
			       why_len);
}

int arb_send_resume(struct arb_fs *fs, uint64_t id, uint64_t parent, int fd,
		    unsigned flags, const char *token,
		    struct arb_send_stats *stp, char *why, size_t why_len)
{
	struct arb_resume_token tok;
	struct sctx c = { .fs = fs, .why = why, .why_len = why_len };
	struct arb_subvol_info si, pi;
	struct arb_send_hdr h = { 0 };
	uint8_t digest[ARB_DIGEST_SIZE];
	uint64_t root = arb_inum(id, ARB_FIRST_INO);
	bool pinned = false;
	int ret;

	if (why && why_len)
		why[0] = 0;
	if (flags & ~(ARB_SEND_ESTIMATE | ARB_SEND_FULL_COMPARE |
		      ARB_SEND_PROTO1 | ARB_SEND_PROTO2))
		return -EINVAL;
	c.version = flags & ARB_SEND_PROTO1   ? 1
		    : flags & ARB_SEND_PROTO2 ? 2
					      : ARB_SEND_VERSION;
	ret = check_rdonly(&c, id, &si, "source");
	if (!ret && parent)
		ret = check_rdonly(&c, parent, &pi, "parent");
	if (!ret && parent == id)
		ret = fail(&c, -EINVAL, "the parent is the snapshot itself");
	if (!ret && token) {
		if (arb_resume_token_parse(token, &tok))
			ret = fail(&c, -EINVAL,
				   "'%s' is not a resume token (r1.ID.UUID.GEN.OBJ, as receive printed it)",
				   token);
		else if (memcmp(tok.uuid, si.uuid, 16) || tok.gen != si.gen)
			ret = fail(&c, -EINVAL,
				   "the resume token is for another snapshot (or generation) than %s",
				   si.name);
		else if (flags & ARB_SEND_PROTO1)
			ret = fail(&c, -EINVAL,
				   "a resumed stream needs stream version 2 or later");
		c.resume_obj = tok.obj;
		c.resume_off = tok.off;
		c.resume_id = tok.id;
	}
	if (ret)
		return ret;
	ret = arb_fs_open_inode(fs, root);
	if (ret)
		return ret;
	pinned = true;
	fs_lock(fs);
	ret = fs_tree_open(fs, id, &c.tr);
	if (!ret && parent)
		ret = fs_tree_open(fs, parent, &c.ptr);
	fs_unlock(fs);
	if (ret)
		goto out;
	c.buf = malloc(ARB_XATTR_SIZE_MAX);
	c.pbuf = malloc(ARB_XATTR_SIZE_MAX);
	c.list = malloc(65536);
	c.plist = malloc(65536);
	c.ebuf = malloc(ARB_ENCODED_MAX);
	ret = -ENOMEM;
	if (!c.buf || !c.pbuf || !c.list || !c.plist || !c.ebuf)
		goto out;
	ret = sw_init(&c.w, fd, flags & ARB_SEND_ESTIMATE);
	if (ret)
		goto out;
	h.version = c.version;
	memcpy(h.uuid, si.uuid, 16);
	h.gen = si.gen;
	if (parent) {
		h.flags = ARB_SEND_F_INCREMENTAL;
		memcpy(h.parent_uuid, pi.uuid, 16);
		h.parent_gen = pi.gen;
	}
	if (c.resume_obj)
		h.flags |= ARB_SEND_F_RESUME;
	ret = sw_header(&c.w, &h);
	if (ret)
		goto out_w;
	sw_begin(&c.w, ARB_SCMD_BEGIN);
	sw_bytes(&c.w, si.name, strlen(si.name));
	ret = sw_end(&c.w);
	if (!ret && c.resume_obj) {
		sw_begin(&c.w, ARB_SCMD_RESUME);
		sw_u64(&c.w, c.resume_id);
		sw_u64(&c.w, c.resume_obj);
		sw_u64(&c.w, c.resume_off);
		ret = sw_end(&c.w);
	}
	if (!ret)
		ret = parent && !(flags & ARB_SEND_FULL_COMPARE)
			      ? walk_changed(&c)
			      : walk(&c);
	if (!ret)
		ret = send_links(&c, c.unlinks, c.nr_unlinks, ARB_SCMD_UNLINK);
	if (!ret)
		ret = send_links(&c, c.links, c.nr_links, ARB_SCMD_LINK);
	for (size_t i = 0; !ret && i < c.nr_deletes; i++) {
		sw_begin(&c.w, ARB_SCMD_DELETE);
		sw_u64(&c.w, c.deletes[i]);
		ret = sw_end(&c.w);
	}
	for (size_t i = 0; !ret && i < c.nr_times; i++) {
		sw_begin(&c.w, ARB_SCMD_TIMES);
		sw_u64(&c.w, c.times[i].obj);
		sw_u64(&c.w, (uint64_t)c.times[i].atime.tv_sec);
		sw_u64(&c.w, (uint64_t)c.times[i].mtime.tv_sec);
		sw_u32(&c.w, (uint32_t)c.times[i].atime.tv_nsec);
		sw_u32(&c.w, (uint32_t)c.times[i].mtime.tv_nsec);
		ret = sw_end(&c.w);
	}
	if (!ret) {
		uint8_t sum[32];
		uint64_t gen;

		if (flags & ARB_SEND_ESTIMATE) {
			memset(digest, 0, sizeof(digest));
		} else if (c.version < 3) {
			ret = arb_subvol_digest_portable(fs, id, digest);
		} else {
			/* from the parent's sum: what differs is walked */
			ret = fs_digest_sum(fs, id, parent, FS_DIGEST_KEEP, sum,
					    &gen, NULL);
			if (!ret)
				fs_digest_final(sum, digest);
		}
	}
	if (!ret) {
		sw_begin(&c.w, ARB_SCMD_END);
		sw_bytes(&c.w, digest, sizeof(digest));
		sw_u64(&c.w, c.st.inodes);
		ret = sw_end(&c.w);
	}
	if (ret == -EPIPE)
		fail(&c, ret, "the receiving side closed the stream");
	else if (ret)
		fail(&c, ret, "%s", strerror(-ret));
	c.st.bytes = c.w.bytes;
	c.st.nodes_read = c.nodes_read;
	c.st.commands = c.w.commands;
	if (stp)
		*stp = c.st;
out_w:
	sw_free(&c.w);
out:
	free(c.buf);
	free(c.pbuf);
	free(c.list);
	free(c.plist);
	free(c.unlinks);
	free(c.links);
	free(c.deletes);
	free(c.times);
	free(c.ebuf);
	free(c.recs);
	free(c.rhash);
	free(c.ivs);
	if (pinned)
		arb_fs_release_inode(fs, root);
	return ret;
}
