/* SPDX-License-Identifier: MIT */
/*
 * csum.c - data checksums: lookup and insert of EXTENT_CSUM items.
 * File data as a whole: see file_int.h.
 */
#include <errno.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <unistd.h>

#include "file_int.h"
#include "items/items.h"

/* ---- checksums --------------------------------------------------------- */

int fs_csum_lookup(struct arb_fs *fs, uint64_t bytenr, size_t nsec,
		   uint32_t *sums, uint8_t *have)
{
	struct arb_key key = { ARB_EXTENT_CSUM_OBJECTID, ARB_EXTENT_CSUM,
			       bytenr },
		       k;
	uint64_t end = bytenr + nsec * (uint64_t)fs->bs;
	struct arb_iter it;
	int ret;

	memset(have, 0, nsec);
	arb_iter_init(&it, fs->csum);
	ret = arb_iter_seek_le(&it, &key);
	if (ret == 1)
		ret = arb_iter_seek(&it, &key);
	while (ret == 0) {
		uint32_t size = arb_iter_size(&it);
		const uint8_t *d = arb_iter_data(&it);
		const char *why;
		uint64_t iend, s;

		arb_iter_key(&it, &k);
		if (k.objectid != ARB_EXTENT_CSUM_OBJECTID ||
		    k.type != ARB_EXTENT_CSUM || k.offset >= end)
			break;
		if (arb_item_validate(&k, d, size, &why)) {
			arb_log(ARB_LOG_ERR, "checksum item at %llu: %s",
				(unsigned long long)k.offset, why);
			ret = -EUCLEAN;
			break;
		}
		iend = k.offset + (size / 4) * (uint64_t)fs->bs;
		for (s = k.offset > bytenr ? k.offset : bytenr; s < iend && s < end;
		     s += fs->bs) {
			uint32_t v;
			size_t i = (s - bytenr) / fs->bs;
			memcpy(&v, d + (s - k.offset) / fs->bs * 4, 4);
			sums[i] = le32toh(v);
			have[i] = 1;
		}
		ret = arb_iter_next(&it);
	}
	arb_iter_release(&it);
	return ret < 0 ? ret : 0;
}

/*
 * Sums per item: ARB_CSUMS_PER_ITEM (4 KiB of sums), or fewer when a node
 * cannot hold an item that big (4 KiB nodes: an item of 1,024 sums would
 * not fit, and writing an extent of 4 MiB or more failed its transaction
 * with EOVERFLOW).
 */
static size_t csums_per_item(const struct arb_fs *fs)
{
	size_t max = arb_max_item_size(fs->vol) / 4;

	return max < ARB_CSUMS_PER_ITEM ? max : ARB_CSUMS_PER_ITEM;
}

/* an item starting at bytenr: a stale one over free space (images
 * written before run_one dropped the checksums of extents made and freed
 * in one transaction), which csum_insert replaces */
static bool csum_item_at(struct arb_fs *fs, uint64_t bytenr)
{
	struct arb_key k = { ARB_EXTENT_CSUM_OBJECTID, ARB_EXTENT_CSUM,
			     bytenr };

	return fs_item_exists(fs->csum, &k);
}

/*
 * The checksum item that ends at bytenr takes up to n of the sums le (on
 * disk order) when it has room; *took says how many.  Only for sectors
 * that extend the same extent (extend_prev): an item never spans two
 * extents, since freeing one deletes the items that start in it.
 */
static int csum_extend(struct arb_fs *fs, struct arb_txn *t, uint64_t bytenr,
		       const uint32_t *le, size_t n, size_t *took)
{
	struct arb_key key = { ARB_EXTENT_CSUM_OBJECTID, ARB_EXTENT_CSUM,
			       bytenr - 1 },
		       k;
	struct arb_iter it;
	uint8_t *buf = NULL;
	uint32_t size = 0;
	size_t have, take = 0;
	int ret;

	*took = 0;
	arb_iter_init(&it, fs->csum);
	ret = arb_iter_seek_le(&it, &key);
	if (ret == 0) {
		arb_iter_key(&it, &k);
		size = arb_iter_size(&it);
		have = size / 4;
		if (k.objectid == ARB_EXTENT_CSUM_OBJECTID &&
		    k.type == ARB_EXTENT_CSUM &&
		    arb_item_validate(&k, arb_iter_data(&it), size, NULL) == 0 &&
		    have < csums_per_item(fs) &&
		    k.offset + have * (uint64_t)fs->bs == bytenr) {
			take = csums_per_item(fs) - have;
			if (take > n)
				take = n;
			buf = malloc(size + take * 4);
			if (buf)
				memcpy(buf, arb_iter_data(&it), size);
			else
				ret = -ENOMEM;
		}
	}
	arb_iter_release(&it);
	if (ret)
		return ret < 0 ? ret : 0;
	if (!buf)
		return 0;
	if (csum_item_at(fs, bytenr)) {
		free(buf);
		return 0;
	}
	memcpy(buf + size, le, take * 4);
	ret = arb_update_item(t, fs->csum, &k, buf, (uint32_t)(size + take * 4));
	free(buf);
	if (!ret)
		*took = take;
	return ret;
}

int fs_csum_insert(struct arb_fs *fs, struct arb_txn *t, uint64_t bytenr,
		   const uint32_t *sums, size_t nsec, bool extend)
{
	size_t per = csums_per_item(fs), i, n, j;
	uint32_t *le = malloc(per * 4);
	int ret = 0;

	if (!le)
		return -ENOMEM;
	if (extend) {
		n = nsec < per ? nsec : per;
		for (j = 0; j < n; j++)
			le[j] = htole32(sums[j]);
		ret = csum_extend(fs, t, bytenr, le, n, &i);
		if (ret) {
			free(le);
			return ret;
		}
	} else {
		i = 0;
	}
	for (; i < nsec && !ret; i += n) {
		struct arb_key k = { ARB_EXTENT_CSUM_OBJECTID, ARB_EXTENT_CSUM,
				     bytenr + i * (uint64_t)fs->bs };
		n = nsec - i;
		if (n > per)
			n = per;
		for (j = 0; j < n; j++)
			le[j] = htole32(sums[i + j]);
		/* a stale item of a freed extent would be replaced */
		if (fs_item_exists(fs->csum, &k))
			ret = arb_update_item(t, fs->csum, &k, le,
					      (uint32_t)(n * 4));
		else
			ret = arb_insert_item(t, fs->csum, &k, le,
					      (uint32_t)(n * 4));
	}
	free(le);
	return ret;
}
