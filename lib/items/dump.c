/* SPDX-License-Identifier: MIT */
/*
 * dump.c - arb_dump_tree (arbor/dump.h): the items of a tree, each
 * through the item table (arb_item_print).
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "arbor/arbor.h"
#include "arbor/dump.h"
#include "core.h"
#include "items.h"

static int dump_one(struct arb_vol *vol, uint64_t id, FILE *out)
{
	struct arb_key k = { 0, 0, 0 };
	struct arb_drop_progress dp;
	struct arb_root *root;
	struct arb_iter it;
	uint64_t n = 0;
	int ret;

	ret = arb_root_get(vol, id, &root);
	if (ret) {
		arb_log(ARB_LOG_ERR, "tree %" PRIu64 ": %s", id,
			ret == -ENOENT ? "no such tree" : strerror(-ret));
		return ret;
	}
	fprintf(out,
		"tree %" PRIu64 ": root node %" PRIu64 " level %d gen %" PRIu64
		"\n",
		id, root->node->bytenr, arb_level(root->node),
		arb_node_gen(root->node));
	/* a tree dropped in batches: what is released may be reused, and
	 * what is left starts at the progress key */
	ret = arb_root_drop_progress(vol, id, &dp);
	if (ret < 0)
		return ret;
	if (ret == 0) {
		arb_key_from_disk(&k, &dp.d_key);
		fprintf(out,
			"tree %" PRIu64 ": being dropped, from key (%" PRIu64
			" %u %" PRIu64 ") level %u on\n",
			id, k.objectid, k.type, k.offset,
			arb_drop_progress_d_level(&dp));
	}
	arb_iter_init(&it, root);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		arb_iter_key(&it, &k);
		arb_item_print(out, &k, arb_iter_data(&it), arb_iter_size(&it));
		n++;
	}
	arb_iter_release(&it);
	fprintf(out, "tree %" PRIu64 ": %" PRIu64 " items\n", id, n);
	if (ret < 0) {
		arb_log(ARB_LOG_ERR, "tree %" PRIu64 ": %s", id,
			strerror(-ret));
		return ret;
	}
	return 0;
}

int arb_dump_tree(struct arb_dev *dev, uint64_t tree, FILE *out,
		  const char **why)
{
	static const uint64_t all[] = { ARB_ROOT_TREE_ID, ARB_EXTENT_TREE_ID,
					ARB_CSUM_TREE_ID, ARB_FS_TREE_ID };
	struct arb_vol_opts o = { 0 };
	struct arb_vol *vol;
	const char *held;
	int ret, first = 0;

	if (why)
		*why = NULL;
	o.readonly = true;
	arb_log_hold(true);
	ret = arb_vol_open(dev, &o, &vol);
	if (ret) {
		/* the library's reason, said once by the caller */
		held = arb_log_take_error();
		if (why)
			*why = held;
	}
	arb_log_hold(false);
	if (ret)
		return ret;
	if (tree != ARB_DUMP_ALL) {
		first = dump_one(vol, tree, out);
	} else {
		for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
			ret = dump_one(vol, all[i], out);
			if (ret && !first)
				first = ret;
		}
		/* then every subvolume tree, by id */
		for (uint64_t id = ARB_FIRST_SUBVOL_ID;;) {
			struct arb_key k = { id, ARB_ROOT_ITEM, 0 };
			struct arb_iter it;

			arb_iter_init(&it, vol->tree_root);
			ret = arb_iter_seek(&it, &k);
			while (ret == 0) {
				arb_iter_key(&it, &k);
				if (k.type == ARB_ROOT_ITEM)
					break;
				ret = arb_iter_next(&it);
			}
			arb_iter_release(&it);
			if (ret || k.objectid >= ARB_ORPHAN_OBJECTID - 16)
				break;
			ret = dump_one(vol, k.objectid, out);
			if (ret && !first)
				first = ret;
			id = k.objectid + 1;
		}
		if (ret < 0 && !first)
			first = ret;
	}
	arb_vol_close(vol);
	return first;
}
