/* SPDX-License-Identifier: MIT */
/*
 * entries.c - items made of entries with names:
 *
 *   DIR_ITEM (dir, DIR_ITEM, name hash), XATTR_ITEM (inode, XATTR_ITEM,
 *   name hash): one or more struct arb_dir_entry + name + data (hash
 *   collisions share an item); DIR_INDEX (dir, DIR_INDEX, sequence):
 *   exactly one.  INODE_REF (inode, INODE_REF, parent): one or more
 *   struct arb_inode_ref + name.  XATTR_DATA (inode, XATTR_DATA, piece):
 *   bytes of an out-of-line xattr value.
 *
 * Valid:
 *   - every entry lies inside the item, header, name and data, and the
 *     entries fill it exactly; names are 1..ARB_NAME_MAX bytes
 *   - DIR_ITEM, XATTR_ITEM: every name hashes (arb_name_hash) to the key
 *     offset
 *   - DIR_INDEX: exactly one entry
 *   - an XATTR_ITEM entry stored out of line (d_type
 *     ARB_XATTR_OUT_OF_LINE): its data is a struct arb_xattr_ref of
 *     1..ARB_XATTR_PIECES_MAX pieces and a length of at most
 *     ARB_XATTR_SIZE_MAX
 *   - XATTR_DATA: not empty
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "arbor/arbor.h"
#include "items.h"

/* ---- walking ----------------------------------------------------------- */

/*
 * The bounds of an entry at pos with left bytes from there to the item's
 * end: first its header of hdr bytes (name_len not read yet: pass 0),
 * then its name length and its whole length len.
 */
static int entry_bounds(const char *what, size_t pos, size_t left, size_t hdr,
			size_t name_len, size_t len, const char **why)
{
	if (left < hdr)
		return arb_item_why(why, -EUCLEAN,
				    "%s at byte %zu: %zu bytes left, its "
				    "header takes %zu",
				    what, pos, left, hdr);
	if (!len)
		return 0;
	if (name_len == 0 || name_len > ARB_NAME_MAX)
		return arb_item_why(why, -EUCLEAN,
				    "%s at byte %zu: name length %zu, not "
				    "1..%d",
				    what, pos, name_len, ARB_NAME_MAX);
	if (len > left)
		return arb_item_why(why, -EUCLEAN,
				    "%s at byte %zu: %zu bytes in all, past "
				    "the item's end (%zu bytes left)",
				    what, pos, len, left);
	return 0;
}

int arb_dent_next(const void *item, size_t size, size_t *pos,
		  struct arb_dent *e, const char **why)
{
	const uint8_t *p = (const uint8_t *)item + *pos;
	const struct arb_dir_entry *de = (const struct arb_dir_entry *)p;
	int ret;

	if (*pos >= size)
		return 1;
	ret = entry_bounds("entry", *pos, size - *pos, sizeof(*de), 0, 0, why);
	if (ret)
		return ret;
	e->off = *pos;
	e->name_len = arb_dir_entry_d_name_len(de);
	e->data_len = arb_dir_entry_d_data_len(de);
	e->len = sizeof(*de) + e->name_len + e->data_len;
	ret = entry_bounds("entry", *pos, size - *pos, sizeof(*de),
			   e->name_len, e->len, why);
	if (ret)
		return ret;
	e->ino = arb_dir_entry_d_ino(de);
	e->transid = arb_dir_entry_d_transid(de);
	e->type = arb_dir_entry_d_type(de);
	e->name = (const char *)(p + sizeof(*de));
	e->data = p + sizeof(*de) + e->name_len;
	*pos += e->len;
	return 0;
}

int arb_iref_next(const void *item, size_t size, size_t *pos,
		  struct arb_iref *r, const char **why)
{
	const uint8_t *p = (const uint8_t *)item + *pos;
	const struct arb_inode_ref *ir = (const struct arb_inode_ref *)p;
	int ret;

	if (*pos >= size)
		return 1;
	ret = entry_bounds("inode ref entry", *pos, size - *pos, sizeof(*ir),
			   0, 0, why);
	if (ret)
		return ret;
	r->off = *pos;
	r->name_len = arb_inode_ref_r_name_len(ir);
	r->len = sizeof(*ir) + r->name_len;
	ret = entry_bounds("inode ref entry", *pos, size - *pos, sizeof(*ir),
			   r->name_len, r->len, why);
	if (ret)
		return ret;
	r->index = arb_inode_ref_r_index(ir);
	r->name = (const char *)(p + sizeof(*ir));
	*pos += r->len;
	return 0;
}

/* the entry called name of a directory/xattr item (dent) or an INODE_REF
 * (ir), checking the whole chain */
static int find_entry(const void *item, size_t size, const char *name,
		      size_t name_len, struct arb_dent *dent,
		      struct arb_iref *ir)
{
	size_t pos = 0;
	bool found = false;
	int ret;

	for (;;) {
		struct arb_dent e;
		struct arb_iref r;
		const char *n;
		size_t nl;

		ret = ir ? arb_iref_next(item, size, &pos, &r, NULL)
			 : arb_dent_next(item, size, &pos, &e, NULL);
		if (ret)
			break;
		n = ir ? r.name : e.name;
		nl = ir ? r.name_len : e.name_len;
		if (found || nl != name_len || memcmp(n, name, nl))
			continue;
		found = true;
		if (ir)
			*ir = r;
		else
			*dent = e;
	}
	if (ret < 0)
		return ret;
	return found ? 0 : -ENOENT;
}

int arb_dent_find(const void *item, size_t size, const char *name,
		  size_t name_len, size_t *off, size_t *len)
{
	struct arb_dent e;
	int ret = find_entry(item, size, name, name_len, &e, NULL);

	if (!ret) {
		*off = e.off;
		*len = e.len;
	}
	return ret;
}

int arb_iref_find(const void *item, size_t size, const char *name,
		  size_t name_len, struct arb_iref *r)
{
	return find_entry(item, size, name, name_len, NULL, r);
}

/* ---- DIR_ITEM, DIR_INDEX, XATTR_ITEM ----------------------------------- */

static int xattr_ref_validate(const struct arb_dent *e, const char **why)
{
	struct arb_xattr_ref r;
	uint32_t pieces;

	if (e->data_len != sizeof(r))
		return arb_item_why(why, -EUCLEAN,
				    "xattr entry at byte %zu: out-of-line "
				    "reference of %zu bytes, expected %zu",
				    e->off, e->data_len, sizeof(r));
	memcpy(&r, e->data, sizeof(r));
	pieces = arb_xattr_ref_x_pieces(&r);
	if (pieces == 0 || pieces > ARB_XATTR_PIECES_MAX)
		return arb_item_why(why, -EUCLEAN,
				    "xattr entry at byte %zu: %u pieces, not "
				    "1..%d",
				    e->off, pieces, ARB_XATTR_PIECES_MAX);
	if (arb_xattr_ref_x_len(&r) > ARB_XATTR_SIZE_MAX)
		return arb_item_why(why, -EUCLEAN,
				    "xattr entry at byte %zu: value of %u "
				    "bytes, more than %d",
				    e->off, arb_xattr_ref_x_len(&r),
				    ARB_XATTR_SIZE_MAX);
	return 0;
}

ARB_ITEM_FN(arb_dent_item)
{
	struct arb_dent e;
	size_t pos = 0;
	unsigned n = 0;
	int ret;

	while ((ret = arb_dent_next(d, size, &pos, &e, why)) == 0) {
		n++;
		if (k->type != ARB_DIR_INDEX &&
		    arb_name_hash(e.name, e.name_len) != k->offset)
			return arb_item_why(why, -EUCLEAN,
					    "entry at byte %zu: its name "
					    "hashes to %#" PRIx64
					    ", not to the key offset",
					    e.off,
					    arb_name_hash(e.name, e.name_len));
		if (k->type == ARB_XATTR_ITEM &&
		    e.type == ARB_XATTR_OUT_OF_LINE) {
			ret = xattr_ref_validate(&e, why);
			if (ret)
				return ret;
		}
	}
	if (ret < 0)
		return ret;
	if (k->type == ARB_DIR_INDEX && n != 1)
		return arb_item_why(why, -EUCLEAN,
				    "dir index holds %u entries, not one", n);
	return 0;
}

ARB_ITEM_PRINT_FN(arb_dent_item)
{
	struct arb_dent e;
	size_t pos = 0;
	unsigned n = 0;

	while (arb_dent_next(d, size, &pos, &e, NULL) == 0) {
		fputs(n++ ? "\n      " : " ", out);
		if (k->type != ARB_XATTR_ITEM) {
			fprintf(out, "type %u -> %" PRIu64 " '", e.type, e.ino);
			arb_item_print_bytes(out, e.name, e.name_len);
			fputc('\'', out);
			continue;
		}
		fputc('\'', out);
		arb_item_print_bytes(out, e.name, e.name_len);
		fputc('\'', out);
		if (e.type == ARB_XATTR_OUT_OF_LINE) {
			struct arb_xattr_ref r;
			memcpy(&r, e.data, sizeof(r));
			fprintf(out,
				" out of line: %u bytes in %u pieces from "
				"%" PRIu64,
				arb_xattr_ref_x_len(&r),
				arb_xattr_ref_x_pieces(&r),
				arb_xattr_ref_x_id(&r));
		} else {
			fprintf(out, " %zu bytes '", e.data_len);
			arb_item_print_bytes(out, e.data,
					     e.data_len > 48 ? 48 : e.data_len);
			fputs(e.data_len > 48 ? "'..." : "'", out);
		}
	}
	fputc('\n', out);
}

/* ---- INODE_REF --------------------------------------------------------- */

ARB_ITEM_FN(arb_inode_ref)
{
	struct arb_iref r;
	size_t pos = 0;
	int ret;

	(void)k;
	while ((ret = arb_iref_next(d, size, &pos, &r, why)) == 0)
		;
	return ret < 0 ? ret : 0;
}

ARB_ITEM_PRINT_FN(arb_inode_ref)
{
	struct arb_iref r;
	size_t pos = 0;
	unsigned n = 0;

	(void)k;
	while (arb_iref_next(d, size, &pos, &r, NULL) == 0) {
		fprintf(out, "%sindex %" PRIu64 " '", n++ ? "\n      " : " ",
			r.index);
		arb_item_print_bytes(out, r.name, r.name_len);
		fputc('\'', out);
	}
	fputc('\n', out);
}

/* ---- XATTR_DATA -------------------------------------------------------- */

ARB_ITEM_FN(arb_xattr_data)
{
	(void)k;
	(void)d;
	if (size == 0)
		return arb_item_why(why, -EUCLEAN, "empty xattr value piece");
	return 0;
}

ARB_ITEM_PRINT_FN(arb_xattr_data)
{
	(void)k;
	fputs(" piece '", out);
	arb_item_print_bytes(out, d, size > 32 ? 32 : size);
	fputs(size > 32 ? "'...\n" : "'\n", out);
}
