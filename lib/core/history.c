/* SPDX-License-Identifier: MIT */
/*
 * history.c - the history of recent commits in the superblock, and which
 * of them stay recoverable ("back in time").
 *
 * Every commit writes into its superblock a list of recent generations,
 * newest first, its own included: where the root tree of each was
 * (struct arb_history_entry, format.h, ARB_COMPAT_HISTORY).  A generation
 * stays listed while it is one of the last hist_commits commits or younger
 * than hist_secs seconds; the list holds ARB_HISTORY_MAX entries, and when
 * more qualify, the entry whose neighbours are closest in time goes, so
 * that the kept ones spread over the window (the newest and the oldest
 * always stay).
 *
 * The allocator keeps every block freed by a commit newer than the oldest
 * listed generation from reuse (alloc.c, "history grace"), so every listed
 * generation stays intact on disk: its root tree, every tree it names and
 * their data.  When an allocation cannot be served otherwise, the
 * allocator gives back the blocks freed by the oldest commit first and
 * drops the generations before that commit from the list
 * (arb_history_prune_below): space always wins.
 *
 * The list lives in the superblock, so it survives unmount; the grace
 * (which blocks are kept) is rebuilt at open by arb_history_regrace.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.h"

static uint64_t he_ns(const struct arb_history_entry *e)
{
	return arb_history_entry_he_time(e) * 1000000000ULL +
	       arb_history_entry_he_time_ns(e);
}

/*
 * The history of sb, if it can be trusted: its first entry names sb's own
 * generation and root (else an arborfs that does not know the history
 * committed since, copying it unchanged, and did not keep the blocks), the
 * generations decrease, and every root lies in the image.  Returns the
 * number of entries, 0 for none or a history to ignore.
 */
uint32_t arb_history_valid(const struct arb_super *sb)
{
	uint32_t n = arb_super_s_hist_nr(sb);
	uint64_t total = arb_super_s_total_bytes(sb);

	if (!(arb_super_s_compat(sb) & ARB_COMPAT_HISTORY) || n == 0 ||
	    n > ARB_HISTORY_MAX)
		return 0;
	if (arb_history_entry_he_generation(&sb->s_hist[0]) !=
		    arb_super_s_generation(sb) ||
	    arb_history_entry_he_root(&sb->s_hist[0]) != arb_super_s_root(sb))
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct arb_history_entry *e = &sb->s_hist[i];
		uint64_t root = arb_history_entry_he_root(e);
		uint64_t mirror = arb_history_entry_he_root_mirror(e);

		if (root < ARB_DATA_START || root % ARB_SECTORSIZE ||
		    root >= total || mirror % ARB_SECTORSIZE ||
		    mirror >= total ||
		    (arb_super_s_meta_copies(sb) == 1) != !mirror ||
		    arb_history_entry_he_root_level(e) >= ARB_MAX_LEVEL ||
		    arb_history_entry_he_root_generation(e) == 0 ||
		    arb_history_entry_he_root_generation(e) >
			    arb_history_entry_he_generation(e) ||
		    arb_history_entry_he_time_ns(e) >= 1000000000u)
			return 0;
		if (i && arb_history_entry_he_generation(e) >=
				 arb_history_entry_he_generation(e - 1))
			return 0;
	}
	return n;
}

void arb_history_load(struct arb_vol *vol)
{
	struct arb_history *h = &vol->hist;
	uint32_t n = arb_history_valid(&vol->super);

	if (!n && (arb_super_s_compat(&vol->super) & ARB_COMPAT_HISTORY) &&
	    arb_super_s_hist_nr(&vol->super))
		arb_log(ARB_LOG_INFO,
			"the history in the superblock is not this "
			"generation's (written by an older arborfs?): ignored");
	h->nr = n;
	memcpy(h->e, vol->super.s_hist, n * sizeof(h->e[0]));
}

uint64_t arb_history_oldest(const struct arb_vol *vol)
{
	const struct arb_history *h = &vol->hist;

	if (h->nr < 2)
		return 0;
	return arb_history_entry_he_generation(&h->e[h->nr - 1]);
}

void arb_history_prune_below(struct arb_vol *vol, uint64_t gen)
{
	struct arb_history *h = &vol->hist;
	uint32_t n = h->nr;

	while (n > 1 && arb_history_entry_he_generation(&h->e[n - 1]) < gen)
		n--;
	if (n != h->nr) {
		arb_log(ARB_LOG_INFO,
			"short of space: generations before %llu are no longer "
			"recoverable", (unsigned long long)gen);
		h->nr = n;
		h->pruned = true;
	}
}

/* drop entry i (0 < i < nr - 1) of the fewest seconds between neighbours */
static void thin_one(struct arb_history_entry *e, uint32_t *nr)
{
	uint32_t best = 1;
	uint64_t best_gap = UINT64_MAX;

	for (uint32_t i = 1; i + 1 < *nr; i++) {
		uint64_t a = he_ns(&e[i - 1]), b = he_ns(&e[i + 1]);
		uint64_t gap = a > b ? a - b : 0;

		if (gap < best_gap) {
			best_gap = gap;
			best = i;
		}
	}
	memmove(&e[best], &e[best + 1], (*nr - best - 1) * sizeof(*e));
	(*nr)--;
}

void arb_history_fill(struct arb_vol *vol, struct arb_super *sb)
{
	const struct arb_history *h = &vol->hist;
	struct arb_history_entry e[ARB_HISTORY_MAX + 1];
	uint64_t gen = arb_super_s_generation(sb), now;
	uint32_t n = 0;
	struct timespec ts;

	memset(sb->s_hist, 0, sizeof(sb->s_hist));
	arb_set_super_s_hist_nr(sb, 0);
	sb->s_hist_pad = 0;
	if (!vol->hist_secs && !vol->hist_commits)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	now = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
	memset(&e[0], 0, sizeof(e[0]));
	arb_set_history_entry_he_generation(&e[0], gen);
	arb_set_history_entry_he_root(&e[0], arb_super_s_root(sb));
	arb_set_history_entry_he_root_mirror(&e[0], arb_super_s_root_mirror(sb));
	arb_set_history_entry_he_root_generation(&e[0],
						 arb_super_s_root_generation(sb));
	arb_set_history_entry_he_root_level(&e[0], arb_super_s_root_level(sb));
	arb_set_history_entry_he_time(&e[0], (uint64_t)ts.tv_sec);
	arb_set_history_entry_he_time_ns(&e[0], (uint32_t)ts.tv_nsec);
	n = 1;
	for (uint32_t i = 0; i < h->nr; i++) {
		uint64_t g = arb_history_entry_he_generation(&h->e[i]);
		uint64_t t = he_ns(&h->e[i]);

		if (g >= gen)
			continue; /* cannot be: a history from the future */
		if (gen - g >= vol->hist_commits &&
		    (now < t ||
		     now - t >= (uint64_t)vol->hist_secs * 1000000000ULL))
			break; /* this one and every older one expired */
		e[n++] = h->e[i];
		if (n > ARB_HISTORY_MAX)
			thin_one(e, &n);
	}
	memcpy(sb->s_hist, e, n * sizeof(e[0]));
	arb_set_super_s_hist_nr(sb, n);
	arb_set_super_s_compat(sb, arb_super_s_compat(sb) | ARB_COMPAT_HISTORY);
}

int arb_history_find(const struct arb_super *sb, uint64_t gen,
		     struct arb_super *view)
{
	uint32_t n = arb_history_valid(sb);

	for (uint32_t i = 0; i < n; i++) {
		const struct arb_history_entry *e = &sb->s_hist[i];

		if (arb_history_entry_he_generation(e) != gen)
			continue;
		*view = *sb;
		arb_super_strip_record(view);
		arb_set_super_s_generation(view, gen);
		arb_set_super_s_root(view, arb_history_entry_he_root(e));
		arb_set_super_s_root_mirror(view,
					    arb_history_entry_he_root_mirror(e));
		arb_set_super_s_root_generation(
			view, arb_history_entry_he_root_generation(e));
		arb_set_super_s_root_level(view,
					   arb_history_entry_he_root_level(e));
		/* the view lists only itself */
		memset(view->s_hist, 0, sizeof(view->s_hist));
		view->s_hist[0] = *e;
		arb_set_super_s_hist_nr(view, 1);
		return 0;
	}
	return -ENOENT;
}

/* read every node under (bytenr, gen, level) */
static int verify_node(struct arb_vol *vol, uint64_t tree, uint64_t bytenr,
		       uint64_t mirror, uint64_t gen, int level,
		       uint64_t *nodes)
{
	struct arb_node *n;
	int ret;

	ret = arb_node_read(vol, bytenr, mirror, gen, level, &n);
	if (ret) {
		arb_log(ARB_LOG_ERR,
			"generation %llu: tree %llu: node %llu (generation "
			"%llu, level %d) is not intact: %s",
			(unsigned long long)vol->generation,
			(unsigned long long)tree, (unsigned long long)bytenr,
			(unsigned long long)gen, level, strerror(-ret));
		return ret;
	}
	(*nodes)++;
	if (level == 0 && tree == ARB_ROOT_TREE_ID) {
		for (uint32_t i = 0; i < arb_nritems(n) && !ret; i++) {
			const struct arb_root_item *ri;
			struct arb_key k;

			arb_node_key(n, (int)i, &k);
			if (k.type != ARB_ROOT_ITEM)
				continue;
			if (arb_item_size(n, (int)i) != sizeof(*ri)) {
				ret = -EUCLEAN;
				break;
			}
			ri = arb_item_ptr(n, (int)i);
			if (arb_root_item_r_level(ri) >= ARB_MAX_LEVEL) {
				ret = -EUCLEAN;
				break;
			}
			ret = verify_node(vol, k.objectid,
					  arb_root_item_r_bytenr(ri),
					  arb_root_item_r_mirror(ri),
					  arb_root_item_r_generation(ri),
					  arb_root_item_r_level(ri), nodes);
		}
		if (ret == -EUCLEAN)
			arb_log(ARB_LOG_ERR,
				"generation %llu: a root item is damaged",
				(unsigned long long)vol->generation);
	}
	for (uint32_t i = 0; level > 0 && i < arb_nritems(n) && !ret; i++) {
		arb_node_readahead(vol, n, (int)i, true);
		ret = verify_node(vol, tree, arb_child_bytenr(n, (int)i),
				  arb_child_mirror(n, (int)i),
				  arb_child_gen(n, (int)i), level - 1, nodes);
	}
	arb_node_put(vol, n);
	return ret;
}

int arb_vol_verify_trees(struct arb_vol *vol)
{
	uint64_t nodes = 0;
	int ret;

	ret = verify_node(vol, ARB_ROOT_TREE_ID,
			  arb_super_s_root(&vol->super),
			  arb_super_s_root_mirror(&vol->super),
			  arb_super_s_root_generation(&vol->super),
			  arb_super_s_root_level(&vol->super), &nodes);
	if (!ret)
		arb_log(ARB_LOG_INFO, "generation %llu: %llu nodes intact",
			(unsigned long long)vol->generation,
			(unsigned long long)nodes);
	return ret;
}

/* ---- the grace after an open ------------------------------------------- */

/*
 * The grace lives in memory (alloc.c): after an unmount or a crash the
 * next open finds the blocks the listed generations need free in the
 * extent tree.  A writable open finds them again: it walks the trees of
 * every listed generation, skipping each subtree whose root node is still
 * allocated (the extent tree has its EXTENT_ITEM with the node's
 * generation: then everything below it is allocated too), so the walk
 * costs what changed since the oldest listed generation, not the size of
 * the filesystem.  Every node it does read is verified (checksum, address,
 * generation); a node whose place was reused, or that does not verify,
 * makes that generation and the older ones unrecoverable.  The free
 * sectors of the nodes read (both copies) and of the data extents their
 * leaves point to that are no longer allocated are kept again, tagged as
 * freed right after the newest listed generation that references them.
 */
struct regrace {
	struct arb_vol *vol;
	uint64_t tag;    /* the ranges found are kept as freed by this commit */
	uint64_t nodes;  /* read so far */
	const char *why;
	/* nodes read (open addressing, 0 = empty): a subtree that several
	 * listed generations share is walked once */
	struct seen { uint64_t bytenr, gen; } *seen;
	size_t seen_size, seen_nr;
};

static size_t seen_slot(size_t size, uint64_t bytenr)
{
	return (size_t)((bytenr * 0x9E3779B97F4A7C15ULL) >> 17) & (size - 1);
}

/* 1 if the node (bytenr, gen) was seen before, 0 if now noted; -ESTALE
 * when another node was seen there (one of the two places was reused) */
static int seen_add(struct regrace *rg, uint64_t bytenr, uint64_t gen)
{
	size_t i;

	if (2 * (rg->seen_nr + 1) > rg->seen_size) {
		size_t ns = rg->seen_size ? rg->seen_size * 2 : 1024;
		struct seen *t = calloc(ns, sizeof(*t));

		if (!t)
			return -ENOMEM;
		for (size_t j = 0; j < rg->seen_size; j++) {
			if (!rg->seen[j].bytenr)
				continue;
			i = seen_slot(ns, rg->seen[j].bytenr);
			while (t[i].bytenr)
				i = (i + 1) & (ns - 1);
			t[i] = rg->seen[j];
		}
		free(rg->seen);
		rg->seen = t;
		rg->seen_size = ns;
	}
	for (i = seen_slot(rg->seen_size, bytenr); rg->seen[i].bytenr;
	     i = (i + 1) & (rg->seen_size - 1)) {
		if (rg->seen[i].bytenr != bytenr)
			continue;
		if (rg->seen[i].gen == gen)
			return 1;
		rg->why = "a node's place held another node later";
		return -ESTALE;
	}
	rg->seen[i] = (struct seen){ bytenr, gen };
	rg->seen_nr++;
	return 0;
}

/* the extent item at bytenr (len): 1 with *gen when present, 0 absent */
static int extent_gen(struct arb_vol *vol, uint64_t bytenr, uint64_t len,
		      uint64_t *gen)
{
	struct arb_key k = { bytenr, ARB_EXTENT_ITEM, len };
	uint8_t b[sizeof(struct arb_extent_item) +
		  sizeof(struct arb_tree_block_ref)];
	int ret;

	ret = arb_lookup_item(vol->extent_root, &k, b, sizeof(b));
	if (ret == -ENOENT)
		return 0;
	if (ret < 0)
		return ret;
	if (ret < (int)sizeof(struct arb_extent_item))
		return -EUCLEAN;
	*gen = arb_extent_item_e_generation((const void *)b);
	return 1;
}

static int regrace_data(struct regrace *rg, const uint8_t *leaf)
{
	const struct arb_node_header *h = (const void *)leaf;
	struct arb_vol *vol = rg->vol;
	uint32_t nr = arb_node_header_h_nritems(h);

	for (uint32_t i = 0; i < nr; i++) {
		const struct arb_item *it =
			(const void *)(leaf + sizeof(*h) + i * sizeof(*it));
		const struct arb_file_extent *fe;
		uint64_t a, len, g;
		struct arb_key k;
		int ret;

		arb_key_from_disk(&k, &it->i_key);
		if (k.type != ARB_EXTENT_DATA ||
		    arb_item_i_size(it) < sizeof(*fe))
			continue;
		fe = (const void *)(leaf + arb_item_i_offset(it));
		if (arb_file_extent_f_type(fe) == ARB_FILE_EXTENT_INLINE)
			continue;
		a = arb_file_extent_f_disk_bytenr(fe);
		len = arb_file_extent_f_disk_num_bytes(fe);
		if (!a || !len || a % vol->sectorsize || len % vol->sectorsize ||
		    a < ARB_DATA_START || a + len > vol->total_bytes ||
		    a + len < a) {
			rg->why = "a file extent points outside the image";
			return -ESTALE;
		}
		ret = extent_gen(vol, a, len, &g);
		if (ret < 0)
			return ret;
		if (ret)
			continue; /* still allocated */
		ret = arb_free_space_history_keep(vol, a, len, rg->tag);
		if (ret)
			return ret;
	}
	return 0;
}

static int regrace_node(struct regrace *rg, uint64_t tree, uint64_t bytenr,
			uint64_t mirror, uint64_t gen, int level)
{
	struct arb_vol *vol = rg->vol;
	const struct arb_node_header *h;
	uint8_t *buf;
	uint64_t g;
	uint32_t nr;
	int ret;

	if (level < 0 || level >= ARB_MAX_LEVEL || bytenr < ARB_DATA_START ||
	    bytenr % vol->sectorsize ||
	    bytenr + vol->nodesize > vol->total_bytes ||
	    (mirror && (mirror % vol->sectorsize ||
			mirror + vol->nodesize > vol->total_bytes))) {
		rg->why = "a node pointer is out of range";
		return -ESTALE;
	}
	ret = extent_gen(vol, bytenr, vol->nodesize, &g);
	if (ret < 0)
		return ret;
	if (ret == 1) {
		if (g == gen)
			return 0; /* allocated: so is everything below it */
		rg->why = "a node's place holds a newer node";
		return -ESTALE;
	}
	/* walked already for a newer generation, which references it too
	 * (the read verified it then) */
	ret = seen_add(rg, bytenr, gen);
	if (ret)
		return ret < 0 ? ret : 0;
	if (!arb_free_space_test(vol, bytenr, vol->nodesize, true) ||
	    (mirror && !arb_free_space_test(vol, mirror, vol->nodesize, true))) {
		rg->why = "a node's place was reused";
		return -ESTALE;
	}
	buf = malloc(vol->nodesize);
	if (!buf)
		return -ENOMEM;
	ret = arb_node_read_copy(vol, buf, bytenr, bytenr, gen, level, &rg->why);
	if (ret && mirror)
		ret = arb_node_read_copy(vol, buf, mirror, bytenr, gen, level,
					 &rg->why);
	if (ret) {
		free(buf);
		return ret == -EUCLEAN ? -ESTALE : ret;
	}
	rg->nodes++;
	ret = arb_free_space_history_keep(vol, bytenr, vol->nodesize, rg->tag);
	if (!ret && mirror)
		ret = arb_free_space_history_keep(vol, mirror, vol->nodesize,
						  rg->tag);
	h = (const void *)buf;
	nr = arb_node_header_h_nritems(h);
	for (uint32_t i = 0; i < nr && !ret; i++) {
		if (level > 0) {
			const struct arb_key_ptr *p = (const void *)(
				buf + sizeof(*h) + i * sizeof(*p));

			ret = regrace_node(rg, tree, arb_key_ptr_p_blockptr(p),
					   arb_key_ptr_p_mirror(p),
					   arb_key_ptr_p_generation(p),
					   level - 1);
		} else if (tree == ARB_ROOT_TREE_ID) {
			const struct arb_item *it = (const void *)(
				buf + sizeof(*h) + i * sizeof(*it));
			const struct arb_root_item *ri;
			struct arb_key k;

			arb_key_from_disk(&k, &it->i_key);
			if (k.type != ARB_ROOT_ITEM)
				continue;
			if (arb_item_i_size(it) != sizeof(*ri)) {
				rg->why = "a root item has the wrong size";
				ret = -ESTALE;
				break;
			}
			ri = (const void *)(buf + arb_item_i_offset(it));
			ret = regrace_node(rg, k.objectid,
					   arb_root_item_r_bytenr(ri),
					   arb_root_item_r_mirror(ri),
					   arb_root_item_r_generation(ri),
					   arb_root_item_r_level(ri));
		}
	}
	if (!ret && level == 0 &&
	    (tree == ARB_FS_TREE_ID || tree >= ARB_FIRST_SUBVOL_ID))
		ret = regrace_data(rg, buf);
	free(buf);
	return ret;
}

int arb_history_regrace(struct arb_vol *vol)
{
	struct arb_history *h = &vol->hist;
	struct regrace rg = { .vol = vol };
	uint32_t i;
	int ret = 0;

	if (!vol->hist_secs && !vol->hist_commits) {
		/* nothing will keep their blocks: list none of them */
		h->nr = h->nr ? 1 : 0;
		return 0;
	}
	/* newest first: a block is tagged after the newest listed
	 * generation that references it (alloc.c sorts the tags after) */
	for (i = 1; i < h->nr; i++) {
		const struct arb_history_entry *e = &h->e[i];
		uint64_t g = arb_history_entry_he_generation(e);

		rg.tag = g + 1;
		rg.why = NULL;
		ret = regrace_node(&rg, ARB_ROOT_TREE_ID,
				   arb_history_entry_he_root(e),
				   arb_history_entry_he_root_mirror(e),
				   arb_history_entry_he_root_generation(e),
				   arb_history_entry_he_root_level(e));
		if (ret) {
			arb_log(ARB_LOG_WARN,
				"generation %llu and older are not recoverable: "
				"%s", (unsigned long long)g,
				ret == -ESTALE && rg.why ? rg.why
							 : strerror(-ret));
			break;
		}
	}
	if (i < h->nr) {
		/* what the older ones alone kept goes at the next commit */
		h->nr = i;
		h->pruned = true;
	}
	free(rg.seen);
	arb_free_space_history_sort(vol);
	arb_log(ARB_LOG_INFO,
		"history: %u generations recoverable, %llu nodes read, %llu "
		"bytes kept", h->nr, (unsigned long long)rg.nodes,
		(unsigned long long)arb_free_space_history_bytes(vol));
	return ret == -ENOMEM || ret == -EIO ? ret : 0;
}
