/* SPDX-License-Identifier: MIT */
/*
 * csums.c - data against its checksums, for the checker (walk.c):
 *   - data-csum: every sector of every data extent of the part that has a
 *     checksum is read and compared; csum-missing: a sector of an extent
 *     that a REG file extent uses has no checksum (reads of it fail;
 *     PREALLOC extents have none)
 *   - csum-orphan: after the parts, one merged walk of the checksum tree
 *     and the extent tree: every checksum item lies inside one data extent
 *     and covers no sector an earlier item covers (repair trims or
 *     deletes it)
 */
#include <endian.h>
#include <stdlib.h>
#include <string.h>

#include "check_int.h"

static int csum_range(struct ck *c, uint64_t addr, size_t nsec,
		      uint32_t *sums, uint8_t *have)
{
	uint32_t bs = c->vol->sectorsize;
	struct arb_key key = { ARB_EXTENT_CSUM_OBJECTID, ARB_EXTENT_CSUM, addr },
		       k;
	uint64_t end = addr + nsec * (uint64_t)bs;
	struct arb_iter it;
	int ret;

	memset(have, 0, nsec);
	arb_iter_init(&it, c->fs->csum);
	ret = arb_iter_seek_le(&it, &key);
	if (ret == 1)
		ret = arb_iter_seek(&it, &key);
	while (ret == 0) {
		uint32_t size = arb_iter_size(&it);
		const uint8_t *d = arb_iter_data(&it);
		uint64_t iend;

		arb_iter_key(&it, &k);
		if (k.objectid != ARB_EXTENT_CSUM_OBJECTID ||
		    k.type != ARB_EXTENT_CSUM || k.offset >= end)
			break;
		iend = k.offset + (size / 4) * (uint64_t)bs;
		for (uint64_t s = k.offset > addr ? k.offset : addr;
		     s < iend && s < end; s += bs) {
			uint32_t v;
			size_t i = (s - addr) / bs;
			memcpy(&v, d + (s - k.offset) / bs * 4, 4);
			sums[i] = le32toh(v);
			have[i] = 1;
		}
		ret = arb_iter_next(&it);
	}
	arb_iter_release(&it);
	return ret < 0 ? ret : 0;
}

#define CK_CHUNK_SECTORS 256

void ck_check_data_csums(struct ck *c)
{
	uint32_t bs = c->vol->sectorsize;
	uint8_t *buf = malloc((size_t)CK_CHUNK_SECTORS * bs);
	uint32_t sums[CK_CHUNK_SECTORS];
	uint8_t have[CK_CHUNK_SECTORS];
	char path[512];

	if (!buf)
		return;
	for (size_t x = 0; x < c->ndext; x++) {
		uint64_t addr = c->dext[x][0], len = c->dext[x][1];
		uint64_t bad = 0, first = 0, key[4] = { addr, 0, 0, 0 };
		uint64_t missing = 0, first_missing = 0;
		struct ck_ent *e = ck_tab_get(&c->data, key, false);

		for (uint64_t off = 0; off < len;) {
			size_t nsec = (len - off) / bs;
			int ret;
			if (nsec > CK_CHUNK_SECTORS)
				nsec = CK_CHUNK_SECTORS;
			if (!nsec)
				break;
			ret = csum_range(c, addr + off, nsec, sums, have);
			if (!ret)
				ret = arb_dev_read(c->vol->dev, buf, nsec * bs,
						   addr + off, ARB_IO_DATA);
			if (ret) {
				c->done += nsec;
				bad += nsec;
				if (!first)
					first = addr + off;
				off += nsec * bs;
				continue;
			}
			for (size_t i = 0; i < nsec; i++) {
				if (c->r)
					c->r->sectors++;
				c->done++;
				if (!have[i]) {
					if (e && e->reg && !missing++)
						first_missing =
							addr + off + i * bs;
					continue;
				}
				if (~arb_crc32c(~0u, buf + i * bs, bs) !=
				    sums[i]) {
					if (!bad)
						first = addr + off + i * bs;
					bad++;
				}
			}
			off += nsec * bs;
			ck_progress(c, true);
		}
		/* the file by its path, as scrub names it */
		if ((bad || missing) && e && e->owner && c->fs)
			fs_ino_path(c->fs, e->owner, path, sizeof(path));
		else
			snprintf(path, sizeof(path), "?");
		if (bad)
			ck_problem(c, ARB_PB_DATA_CSUM, e ? e->owner : 0, addr,
				   "data extent %llu+%llu (inode %llu, %s): %llu "
				   "sector(s) do not match their checksum, first "
				   "at %llu",
				   (unsigned long long)addr,
				   (unsigned long long)len,
				   (unsigned long long)(e ? e->owner : 0), path,
				   (unsigned long long)bad,
				   (unsigned long long)first);
		if (missing)
			ck_problem(c, ARB_PB_CSUM_MISSING, e->owner, addr,
				   "data extent %llu+%llu (inode %llu, %s): %llu "
				   "sector(s) have no checksum, first at %llu",
				   (unsigned long long)addr,
				   (unsigned long long)len,
				   (unsigned long long)e->owner, path,
				   (unsigned long long)missing,
				   (unsigned long long)first_missing);
	}
	free(buf);
}

/*
 * Every checksum item inside one data extent, no sector covered twice.
 * One forward walk of each tree (both are in address order): for each
 * checksum item [s, e), the candidate extent is the last data extent that
 * starts at or below s.  An item that does not fit is a problem.  Repair
 * keeps the part from s to the end of that extent when s is inside it and
 * no earlier item covers s; otherwise the item goes whole: an item that
 * starts inside another's sectors is the stale one, and keeping its tail
 * could take sectors, and the key, of the next extent's own item.
 */
static void add_cfix(struct ck *c, uint64_t start, uint32_t nkeep)
{
	if (c->ncfix == c->capcfix) {
		size_t cap = c->capcfix ? c->capcfix * 2 : 16;
		struct ck_cfix *n = realloc(c->cfix, cap * sizeof(*n));
		if (!n)
			return;
		c->cfix = n;
		c->capcfix = cap;
	}
	c->cfix[c->ncfix].start = start;
	c->cfix[c->ncfix].nkeep = nkeep;
	c->ncfix++;
}

int ck_check_csum_items(struct ck *c)
{
	uint32_t bs = c->vol->sectorsize;
	struct arb_key ck = { ARB_EXTENT_CSUM_OBJECTID, ARB_EXTENT_CSUM, 0 },
		       ek = { 0, 0, 0 }, k;
	struct arb_iter ci, ei;
	/* the current candidate extent; ext_ret: the extent iterator's state
	 * (0: at an item not yet looked at, 1: at the end, <0: error) */
	uint64_t x_addr = 0, x_len = 0, covered = 0;
	bool have_x = false;
	int ret, ext_ret;

	arb_iter_init(&ci, c->fs->csum);
	arb_iter_init(&ei, c->vol->extent_root);
	ext_ret = arb_iter_seek(&ei, &ek);
	for (ret = arb_iter_seek(&ci, &ck); ret == 0;
	     ret = arb_iter_next(&ci)) {
		uint32_t size = arb_iter_size(&ci);
		uint64_t s, e, b;

		arb_iter_key(&ci, &k);
		if (k.objectid != ARB_EXTENT_CSUM_OBJECTID ||
		    k.type != ARB_EXTENT_CSUM)
			break;
		s = k.offset;
		e = s + (uint64_t)(size / 4) * bs;
		if (size == 0 || size % 4 || s % bs || e <= s) {
			ck_problem(c, ARB_PB_CSUM_ORPHAN, 0, s,
				   "checksum item at %llu: malformed (%u bytes)",
				   (unsigned long long)s, size);
			if (c->fix)
				add_cfix(c, s, 0);
			continue;
		}
		/* the last data extent starting at or below s */
		while (ext_ret == 0) {
			const void *d = arb_iter_data(&ei);

			arb_iter_key(&ei, &ek);
			if (ek.objectid > s)
				break;
			if (ek.type == ARB_EXTENT_ITEM &&
			    arb_iter_size(&ei) >=
				    sizeof(struct arb_extent_item) &&
			    (arb_extent_item_e_flags(d) &
			     ARB_EXTENT_FLAG_DATA)) {
				x_addr = ek.objectid;
				x_len = ek.offset;
				have_x = true;
			}
			ext_ret = arb_iter_next(&ei);
		}
		if (ext_ret < 0) {
			ret = ext_ret;
			break;
		}
		b = e;
		if (s < covered || !have_x || s >= x_addr + x_len)
			b = s; /* overlaps an earlier item, or in no extent */
		else if (b > x_addr + x_len)
			b = x_addr + x_len;
		if (b == e) {
			covered = e;
			continue;
		}
		ck_problem(c, ARB_PB_CSUM_ORPHAN, 0, s,
			   "checksum item %llu+%llu: %llu of its %llu sector(s) "
			   "lie outside any data extent or are covered by an "
			   "earlier item",
			   (unsigned long long)s, (unsigned long long)(e - s),
			   (unsigned long long)(e - b) / bs,
			   (unsigned long long)(e - s) / bs);
		if (c->fix)
			add_cfix(c, s, (uint32_t)((b - s) / bs));
		/* what an overlapping item covers is the earlier item's */
		if (b > covered)
			covered = b;
	}
	arb_iter_release(&ci);
	arb_iter_release(&ei);
	return ret < 0 ? ret : 0;
}

/* cut one checksum item to what check_csum_items kept */
int ck_apply_cfix(struct ck *c, struct arb_txn *t, const struct ck_cfix *f)
{
	struct arb_key k = { ARB_EXTENT_CSUM_OBJECTID, ARB_EXTENT_CSUM,
			     f->start };
	uint8_t *buf;
	int ret;

	if (!f->nkeep) {
		ret = arb_del_item(t, c->fs->csum, &k);
		/* -ENOENT: gone with a leaked extent's checksums */
		return ret == -ENOENT ? 0 : ret;
	}
	buf = malloc((size_t)f->nkeep * 4);
	if (!buf)
		return -ENOMEM;
	ret = arb_lookup_item(c->fs->csum, &k, buf, f->nkeep * 4);
	if (ret >= 0 && ret < (int)(f->nkeep * 4))
		ret = -EUCLEAN;
	if (ret >= 0)
		ret = arb_update_item(t, c->fs->csum, &k, buf, f->nkeep * 4);
	else if (ret == -ENOENT)
		ret = 0;
	free(buf);
	return ret;
}

