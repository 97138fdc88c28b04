/* SPDX-License-Identifier: MIT */
/*
 * root.c - the root tree's items: ROOT_ITEM, key (tree id, ROOT_ITEM, 0):
 * struct arb_root_item; ROOT_REF and ROOT_BACKREF, which have numbers but
 * no layout yet (docs/FORMAT.md, "Open questions").
 *
 * ROOT_ITEM: exactly sizeof(struct arb_root_item) bytes.  Any other size
 * is ARB_ITEM_NEWER, not corruption: a newer arborfs that grew the struct
 * most likely wrote it, so its tree is neither read nor "repaired" (an
 * older fsck that skipped the tree would free every extent it holds).
 * ROOT_REF, ROOT_BACKREF: ARB_ITEM_NEWER (no version 2 image has them).
 */
#include <errno.h>
#include <inttypes.h>

#include "items.h"

ARB_ITEM_FN(arb_root_item)
{
	(void)d;
	if (size != sizeof(struct arb_root_item))
		return arb_item_why(why, ARB_ITEM_NEWER,
				    "ROOT_ITEM of tree %" PRIu64
				    " has %u bytes, this arborfs knows %zu",
				    k->objectid, size,
				    sizeof(struct arb_root_item));
	return 0;
}

static void print_uuid(FILE *out, const char *what, const uint8_t *u)
{
	bool zero = true;

	for (int i = 0; i < ARB_UUID_SIZE; i++)
		zero &= u[i] == 0;
	if (zero)
		return;
	fprintf(out, " %s ", what);
	for (int i = 0; i < ARB_UUID_SIZE; i++)
		fprintf(out, "%s%02x", i == 4 || i == 6 || i == 8 || i == 10
					       ? "-" : "", u[i]);
}

ARB_ITEM_PRINT_FN(arb_root_item)
{
	const struct arb_root_item *ri = (const struct arb_root_item *)d;

	(void)k;
	(void)size;
	fprintf(out,
		" node %" PRIu64 " level %u gen %" PRIu64 " refs %u"
		" last_snapshot %" PRIu64 " otransid %" PRIu64,
		arb_root_item_r_bytenr(ri), arb_root_item_r_level(ri),
		arb_root_item_r_generation(ri), arb_root_item_r_refs(ri),
		arb_root_item_r_last_snapshot(ri), arb_root_item_r_otransid(ri));
	if (arb_root_item_r_highest_objectid(ri))
		fprintf(out, " highest %" PRIu64,
			arb_root_item_r_highest_objectid(ri));
	if (arb_root_item_r_mirror(ri))
		fprintf(out, " copy %" PRIu64, arb_root_item_r_mirror(ri));
	if (arb_root_item_r_flags(ri))
		fprintf(out, " flags 0x%" PRIx64, arb_root_item_r_flags(ri));
	print_uuid(out, "uuid", ri->r_uuid);
	print_uuid(out, "parent", ri->r_parent_uuid);
	fputc('\n', out);
}

/* ROOT_REF and ROOT_BACKREF */
ARB_ITEM_FN(arb_root_ref)
{
	(void)d;
	(void)size;
	return arb_item_why(why, ARB_ITEM_NEWER,
			    "%s has no layout in format version %d",
			    arb_item_type_name(k->type), ARB_FORMAT_VERSION);
}
