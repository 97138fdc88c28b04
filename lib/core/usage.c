/* SPDX-License-Identifier: MIT */
/*
 * usage.c - space by kind: data, metadata, uncommitted, free (usage.h).
 *
 * The free-space bitmap (alloc.c) knows only used or free; the kind of an
 * allocated range is in its EXTENT_ITEM (ARB_EXTENT_FLAG_TREE_BLOCK or
 * ARB_EXTENT_FLAG_DATA), so data and metadata come from a walk of the extent
 * tree.  What the bitmap counts as used beyond those items was allocated
 * by the running transaction.
 *
 * Logical bytes: an EXTENT_ITEM does not say whether its extent is
 * compressed; its file extent items do (f_compression, f_ram_bytes, equal
 * in every item of one extent).  So once the volume has had a compressed
 * extent, each data extent that could be one (shorter than
 * ARB_COMPRESS_MAX_RAM: a compressed extent is at least a sector shorter
 * than the at most ARB_COMPRESS_MAX_RAM bytes it inflates to) is looked up
 * through its back-references: the file extent items in the tree each one
 * names.  The trees are read as of the last commit, as the extent tree is
 * (it changes only at commit), from the committed superblock's root tree.
 * A back-reference names the tree that owned the leaf; when that tree is
 * gone (a snapshot deleted while another still shares the leaf) or the
 * item moved, every file tree is searched.
 */
#include <errno.h>
#include <string.h>

#include "core.h"
#include "usage.h"

/* the committed trees the lookups read (loaded on first use) */
struct zlook {
	struct arb_vol *vol;
	struct arb_root *root_tree; /* as of the last commit */
	struct arb_root *tree;      /* the last file tree looked in */
};

static void zlook_release(struct zlook *z)
{
	arb_root_free(z->vol, z->tree);
	arb_root_free(z->vol, z->root_tree);
	z->tree = z->root_tree = NULL;
}

/* tree id as of the last commit in z->tree: 0, 1 when it had none, <0 */
static int zlook_tree(struct zlook *z, uint64_t id)
{
	struct arb_key k = { id, ARB_ROOT_ITEM, 0 };
	struct arb_root_item item;
	struct arb_iter it;
	int ret;

	if (z->tree && z->tree->id == id)
		return 0;
	arb_root_free(z->vol, z->tree);
	z->tree = NULL;
	if (!z->root_tree) {
		const struct arb_super *sb = &z->vol->super;

		memset(&item, 0, sizeof(item));
		arb_set_root_item_r_bytenr(&item, arb_super_s_root(sb));
		arb_set_root_item_r_generation(&item,
					       arb_super_s_root_generation(sb));
		arb_set_root_item_r_level(&item, arb_super_s_root_level(sb));
		arb_set_root_item_r_mirror(&item, arb_super_s_root_mirror(sb));
		ret = arb_root_load(z->vol, ARB_ROOT_TREE_ID, &item,
				    &z->root_tree);
		if (ret)
			return ret;
	}
	arb_iter_init(&it, z->root_tree);
	ret = arb_iter_seek(&it, &k);
	if (ret == 0) {
		struct arb_key f;

		arb_iter_key(&it, &f);
		if (f.objectid != id || f.type != ARB_ROOT_ITEM ||
		    arb_iter_size(&it) < sizeof(item))
			ret = 1;
		else
			memcpy(&item, arb_iter_data(&it), sizeof(item));
	}
	arb_iter_release(&it);
	if (ret)
		return ret;
	return arb_root_load(z->vol, id, &item, &z->tree);
}

/*
 * Find in tree id (committed) a file extent item of the data extent at
 * bytenr whose back-reference is (obj, off): 0 and its compression and
 * ram bytes, 1 when the tree has none, <0 error.
 */
static int zlook_in(struct zlook *z, uint64_t id, uint64_t bytenr,
		    uint64_t obj, uint64_t off, uint8_t *compression,
		    uint64_t *ram)
{
	struct arb_key k = { obj, ARB_EXTENT_DATA, off };
	struct arb_iter it;
	int ret;

	ret = zlook_tree(z, id);
	if (ret)
		return ret;
	arb_iter_init(&it, z->tree);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		const struct arb_file_extent *fe = arb_iter_data(&it);

		arb_iter_key(&it, &k);
		/* the item's offset into the extent is below its length,
		 * and a candidate is shorter than ARB_COMPRESS_MAX_RAM */
		if (k.objectid != obj || k.type != ARB_EXTENT_DATA ||
		    k.offset >= off + ARB_COMPRESS_MAX_RAM) {
			ret = 1;
			break;
		}
		if (arb_iter_size(&it) < sizeof(*fe) ||
		    arb_file_extent_f_type(fe) == ARB_FILE_EXTENT_INLINE ||
		    arb_file_extent_f_disk_bytenr(fe) != bytenr ||
		    k.offset - arb_file_extent_f_offset(fe) != off)
			continue;
		*compression = arb_file_extent_f_compression(fe);
		*ram = arb_file_extent_f_ram_bytes(fe);
		break;
	}
	arb_iter_release(&it);
	return ret;
}

/* the next file tree id after id (committed): 0, 1 none, <0 */
static int zlook_next_tree(struct zlook *z, uint64_t id, uint64_t *next)
{
	struct arb_key k = { id, ARB_ROOT_ITEM, 0 };
	struct arb_iter it;
	int ret;

	if (!z->root_tree) {
		/* loads the root tree */
		ret = zlook_tree(z, ARB_FS_TREE_ID);
		if (ret < 0)
			return ret;
	}
	arb_iter_init(&it, z->root_tree);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		arb_iter_key(&it, &k);
		if (k.type == ARB_ROOT_ITEM &&
		    (k.objectid == ARB_FS_TREE_ID ||
		     (k.objectid >= ARB_FIRST_SUBVOL_ID &&
		      k.objectid < ARB_ORPHAN_OBJECTID - 16))) {
			*next = k.objectid;
			break;
		}
	}
	arb_iter_release(&it);
	return ret;
}

/* a data extent that may be compressed, and its back-references */
struct zcand {
	uint64_t bytenr, len;
	unsigned nr;
	struct {
		uint64_t root, obj, off;
	} ref[4];
};

/* add c's extent to u's logical bytes; 0 or <0 */
static int zcand_account(struct zlook *z, const struct zcand *c,
			 struct arb_space_usage *u)
{
	uint8_t compression = ARB_COMPRESS_NONE;
	uint64_t ram = 0, id, next;
	int ret = 1;

	for (unsigned i = 0; i < c->nr && ret == 1; i++)
		ret = zlook_in(z, c->ref[i].root, c->bytenr, c->ref[i].obj,
			       c->ref[i].off, &compression, &ram);
	/* every file tree, with the first back-reference's (obj, off) */
	for (id = ARB_FS_TREE_ID; ret == 1 && c->nr; id = next + 1) {
		ret = zlook_next_tree(z, id, &next);
		if (ret)
			break;
		ret = zlook_in(z, next, c->bytenr, c->ref[0].obj,
			       c->ref[0].off, &compression, &ram);
	}
	if (ret < 0)
		return ret;
	/* (no item found: counted as stored, which it is in the image) */
	if (ret == 0 && compression != ARB_COMPRESS_NONE) {
		u->data_logical += ram;
		u->compressed += c->len;
		u->compressed_logical += ram;
		u->compressed_extents++;
	} else {
		u->data_logical += c->len;
	}
	return 0;
}

int arb_space_usage(struct arb_vol *vol, struct arb_space_usage *u)
{
	struct zlook z = { vol, NULL, NULL };
	struct zcand cand = { 0 };
	bool zused = arb_super_s_incompat(&vol->super) & ARB_INCOMPAT_COMPRESS;
	struct arb_key k = { 0, 0, 0 };
	struct arb_iter it;
	uint64_t used, space;
	int ret;

	memset(u, 0, sizeof(*u));
	space = vol->total_bytes / vol->sectorsize * vol->sectorsize;
	u->total = vol->total_bytes;
	u->system = ARB_DATA_START;
	u->free = arb_free_bytes(vol);
	u->history = arb_free_space_history_bytes(vol);
	used = arb_used_bytes(vol);
	/* the bitmap's used sectors = system + used + pinned */
	if (space > u->free + used + u->system)
		u->pinned = space - u->free - used - u->system;

	arb_iter_init(&it, vol->extent_root);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		const struct arb_extent_item *e;

		arb_iter_key(&it, &k);
		if (cand.len && k.objectid != cand.bytenr) {
			ret = zcand_account(&z, &cand, u);
			cand.len = 0;
			if (ret)
				break;
		}
		if (cand.len && k.type == ARB_EXTENT_DATA_REF) {
			const struct arb_extent_data_ref *r =
				arb_iter_data(&it);

			if (cand.nr < 4 && arb_iter_size(&it) >= sizeof(*r)) {
				cand.ref[cand.nr].root =
					arb_extent_data_ref_d_root(r);
				cand.ref[cand.nr].obj =
					arb_extent_data_ref_d_objectid(r);
				cand.ref[cand.nr++].off =
					arb_extent_data_ref_d_offset(r);
			}
			continue;
		}
		if (k.type != ARB_EXTENT_ITEM)
			continue;
		if (arb_iter_size(&it) < sizeof(*e)) {
			ret = -EUCLEAN;
			break;
		}
		e = arb_iter_data(&it);
		if (arb_extent_item_e_flags(e) & ARB_EXTENT_FLAG_TREE_BLOCK) {
			const struct arb_tree_block_ref *tr =
				(const void *)(e + 1);
			u->metadata += k.offset;
			/* the second copy (duplicated metadata) */
			if (arb_iter_size(&it) >= sizeof(*e) + sizeof(*tr) &&
			    arb_tree_block_ref_t_mirror(tr))
				u->metadata += k.offset;
		} else {
			u->data += k.offset;
			if (zused && k.offset < ARB_COMPRESS_MAX_RAM) {
				cand.bytenr = k.objectid;
				cand.len = k.offset;
				cand.nr = 0;
			} else {
				u->data_logical += k.offset;
			}
		}
	}
	arb_iter_release(&it);
	if (ret == 1 && cand.len)
		ret = zcand_account(&z, &cand, u);
	zlook_release(&z);
	if (ret < 0)
		return ret;
	if (used > u->data + u->metadata)
		u->uncommitted = used - u->data - u->metadata;
	return 0;
}
