/* SPDX-License-Identifier: MIT */
/*
 * root.c - the root tree's items: ROOT_ITEM, key (tree id, ROOT_ITEM, 0):
 * struct arb_root_item; ROOT_REF and ROOT_BACKREF (subvolume links);
 * SUBVOL_ITEM (docs/FORMAT.md, "Subvolumes"); DIGEST_ITEM; DROP_PROGRESS.
 *
 * ROOT_ITEM: exactly sizeof(struct arb_root_item) bytes.  Any other size
 * is ARB_ITEM_NEWER, not corruption: a newer arborfs that grew the struct
 * most likely wrote it, so its tree is neither read nor "repaired" (an
 * older fsck that skipped the tree would free every extent it holds).
 * SUBVOL_ITEM of another size, or with unknown flags: ARB_ITEM_NEWER too.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

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

/* ROOT_REF and ROOT_BACKREF: struct arb_root_ref and the name */
ARB_ITEM_FN(arb_root_ref)
{
	const struct arb_root_ref *rr = (const struct arb_root_ref *)d;
	size_t nl;

	(void)k;
	if (size < sizeof(*rr))
		return arb_item_why(why, -EUCLEAN, "%u bytes, at least %zu",
				    size, sizeof(*rr));
	nl = arb_root_ref_rr_name_len(rr);
	if (nl == 0 || nl > 255)
		return arb_item_why(why, -EUCLEAN, "name length %zu", nl);
	if (sizeof(*rr) + nl != size)
		return arb_item_why(why, -EUCLEAN,
				    "%u bytes for a name of %zu", size, nl);
	if (memchr(d + sizeof(*rr), '/', nl) || memchr(d + sizeof(*rr), 0, nl))
		return arb_item_why(why, -EUCLEAN, "name holds '/' or NUL");
	return 0;
}

ARB_ITEM_PRINT_FN(arb_root_ref)
{
	const struct arb_root_ref *rr = (const struct arb_root_ref *)d;

	(void)k;
	(void)size;
	fprintf(out, " dir %" PRIu64 " index %" PRIu64 " '%.*s'\n",
		arb_root_ref_rr_dirid(rr), arb_root_ref_rr_sequence(rr),
		(int)arb_root_ref_rr_name_len(rr),
		(const char *)d + sizeof(*rr));
}

/* SUBVOL_ITEM: exactly 96 bytes (another size: a newer format) */
ARB_ITEM_FN(arb_subvol_item)
{
	const struct arb_subvol_item *si = (const struct arb_subvol_item *)d;
	uint64_t def;

	if (size != sizeof(*si))
		return arb_item_why(why, ARB_ITEM_NEWER,
				    "SUBVOL_ITEM of %" PRIu64
				    " has %u bytes, this arborfs knows %zu",
				    k->objectid, size, sizeof(*si));
	if (arb_subvol_item_s_flags(si) & ~ARB_SUBVOL_F_KNOWN)
		return arb_item_why(why, ARB_ITEM_NEWER,
				    "SUBVOL_ITEM flags 0x%" PRIx64,
				    arb_subvol_item_s_flags(si));
	if (arb_subvol_item_s_otime_ns(si) >= 1000000000u ||
	    arb_subvol_item_s_ctime_ns(si) >= 1000000000u)
		return arb_item_why(why, -EUCLEAN, "nanoseconds past 10^9");
	/* the default subvolume: tree 5's item only, an id handed out */
	def = arb_subvol_item_s_default_id(si);
	if (def && (k->objectid != ARB_FS_TREE_ID ||
		    (def != ARB_FS_TREE_ID &&
		     (def < ARB_FIRST_SUBVOL_ID ||
		      def > arb_subvol_item_s_last_id(si)))))
		return arb_item_why(why, -EUCLEAN,
				    "SUBVOL_ITEM of %" PRIu64
				    ": default subvolume %" PRIu64,
				    k->objectid, def);
	return 0;
}

ARB_ITEM_PRINT_FN(arb_subvol_item)
{
	const struct arb_subvol_item *si = (const struct arb_subvol_item *)d;

	(void)k;
	(void)size;
	fprintf(out, " flags 0x%" PRIx64 "%s otime %" PRIu64 ".%09u",
		arb_subvol_item_s_flags(si),
		(arb_subvol_item_s_flags(si) & ARB_SUBVOL_F_RDONLY) ? " (ro)"
								   : "",
		arb_subvol_item_s_otime(si), arb_subvol_item_s_otime_ns(si));
	if (arb_subvol_item_s_source(si))
		fprintf(out, " source %" PRIu64, arb_subvol_item_s_source(si));
	if (arb_subvol_item_s_last_id(si))
		fprintf(out, " last_id %" PRIu64,
			arb_subvol_item_s_last_id(si));
	if (arb_subvol_item_s_default_id(si))
		fprintf(out, " default %" PRIu64,
			arb_subvol_item_s_default_id(si));
	if (arb_subvol_item_s_rtransid(si))
		fprintf(out, " stransid %" PRIu64 " rtransid %" PRIu64,
			arb_subvol_item_s_stransid(si),
			arb_subvol_item_s_rtransid(si));
	print_uuid(out, "received", si->s_received_uuid);
	fputc('\n', out);
}

/* DIGEST_ITEM: exactly 48 bytes, of a subvolume, offset 0 */
ARB_ITEM_FN(arb_digest_item)
{
	const struct arb_digest_item *di = (const struct arb_digest_item *)d;

	if (size != sizeof(*di) || arb_digest_item_d_reserved(di))
		return arb_item_why(why, ARB_ITEM_NEWER,
				    "DIGEST_ITEM of %" PRIu64
				    " has %u bytes (this arborfs knows %zu) or reserved bits set",
				    k->objectid, size, sizeof(*di));
	if ((k->objectid != ARB_FS_TREE_ID &&
	     k->objectid < ARB_FIRST_SUBVOL_ID) ||
	    k->offset != 0)
		return arb_item_why(why, -EUCLEAN,
				    "DIGEST_ITEM of tree %" PRIu64
				    " offset %" PRIu64,
				    k->objectid, k->offset);
	return 0;
}

ARB_ITEM_PRINT_FN(arb_digest_item)
{
	const struct arb_digest_item *di = (const struct arb_digest_item *)d;

	(void)k;
	(void)size;
	fprintf(out, " version %u generation %" PRIu64 " sum ",
		arb_digest_item_d_version(di),
		arb_digest_item_d_generation(di));
	for (int i = 31; i >= 0; i--)
		fprintf(out, "%02x", di->d_sum[i]);
	fputc('\n', out);
}

/* DROP_PROGRESS: exactly 40 bytes, of a subvolume tree, a level a root can
 * have above the leaves */
ARB_ITEM_FN(arb_drop_progress)
{
	const struct arb_drop_progress *dp =
		(const struct arb_drop_progress *)d;

	if (size != sizeof(*dp))
		return arb_item_why(why, ARB_ITEM_NEWER,
				    "DROP_PROGRESS of %" PRIu64
				    " has %u bytes, this arborfs knows %zu",
				    k->objectid, size, sizeof(*dp));
	for (size_t i = 0; i < sizeof(dp->d_reserved); i++)
		if (dp->d_reserved[i])
			return arb_item_why(why, ARB_ITEM_NEWER,
					    "DROP_PROGRESS of %" PRIu64
					    ": reserved bytes set",
					    k->objectid);
	if (k->objectid < ARB_FIRST_SUBVOL_ID || k->offset != 0)
		return arb_item_why(why, -EUCLEAN,
				    "DROP_PROGRESS of tree %" PRIu64
				    " offset %" PRIu64,
				    k->objectid, k->offset);
	if (arb_drop_progress_d_level(dp) < 1 ||
	    arb_drop_progress_d_level(dp) >= ARB_MAX_LEVEL)
		return arb_item_why(why, -EUCLEAN,
				    "DROP_PROGRESS of %" PRIu64 ": level %u",
				    k->objectid, arb_drop_progress_d_level(dp));
	if (arb_drop_progress_d_freed(dp) > arb_drop_progress_d_nodes(dp))
		return arb_item_why(why, -EUCLEAN,
				    "DROP_PROGRESS of %" PRIu64
				    ": more nodes freed than visited",
				    k->objectid);
	return 0;
}

ARB_ITEM_PRINT_FN(arb_drop_progress)
{
	const struct arb_drop_progress *dp =
		(const struct arb_drop_progress *)d;
	struct arb_key dk;

	(void)k;
	(void)size;
	arb_key_from_disk(&dk, &dp->d_key);
	fprintf(out,
		" key (%" PRIu64 " %u %" PRIu64 ") level %u nodes %" PRIu64
		" freed %" PRIu64 "\n",
		dk.objectid, dk.type, dk.offset, arb_drop_progress_d_level(dp),
		arb_drop_progress_d_nodes(dp), arb_drop_progress_d_freed(dp));
}
