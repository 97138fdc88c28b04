/* SPDX-License-Identifier: MIT */
/*
 * txn.c - transactions, commit, and opening/formatting a volume.
 *
 * One transaction runs at a time per volume; every change joins it.  A
 * commit makes it durable in this order, and nothing else writes to the
 * image:
 *
 *   1. vol->pre_commit (the fs layer writes delayed file data and turns it
 *      into tree items), then every deferred data write (arb_dev_drain:
 *      data the fs layer pointed the tree at earlier and wrote after
 *      letting go of the lock) is waited for
 *   2. repeat until nothing changes: write the ROOT_ITEM of every tree whose
 *      root moved; apply the delayed reference counts to the extent tree
 *   3. write every dirty node, both copies when metadata is duplicated (new
 *      blocks only: a block reachable from the last committed superblock
 *      is never written, see alloc.c; the one exception is the self-heal
 *      of cache.c, which rewrites a bad first copy with identical bytes)
 *   4. flush -- skipped when everything written since the last commit's
 *      flush fits a commit record (see below)
 *   5. write the superblock, generation + 1, into slot (generation + 1) % 2;
 *      the other slot keeps the previous generation intact
 *   6. flush
 *   7. release the blocks freed by this transaction (pinned until now)
 *
 * A crash before 6 completes leaves the previous superblock the newest valid
 * one, and everything it references untouched.  A write or flush error in
 * 3-6 makes the volume refuse further transactions (it is as good as
 * read-only); the previous generation is still on disk.
 *
 * One flush instead of two.  Each flush costs a disk cache flush (and on a
 * host filesystem an fdatasync); an fsync of a small append is a commit of a
 * few nodes, so the first flush was half its cost.  When the device tracked
 * every write since the last flush (arb_dev_track) and they are few
 * (ARB_COMMIT_REC_MAX ranges, ARB_COMMIT_REC_BYTES), step 4 is skipped and
 * the superblock lists those ranges with their checksums (the commit
 * record, format.h).  The superblock may then reach the disk before the
 * nodes it references; arb_read_super notices (a listed range that does
 * not read back with its checksum) and takes the other slot, which is the
 * previous generation, complete since its own step 6.  That slot is not
 * checked again: the blocks its commit record lists may since have been
 * freed and reused, and it is known complete anyway.  (ext4's
 * journal_async_commit makes the same trade: a checksummed commit block
 * instead of a flush before it.)
 *
 * The first error inside a transaction poisons it (arb_txn_fail): after
 * that only arb_txn_abort is possible, which throws away every change since
 * the last commit.
 */
#include <stdlib.h>
#include <string.h>
#include <uuid/uuid.h>

#include "arbor/arbor.h"
#include "core.h"

static const uint64_t super_off[2] = { ARB_SUPER_OFFSET0, ARB_SUPER_OFFSET1 };

int arb_txn_fail(struct arb_txn *t, int err)
{
	if (err && !t->error) {
		t->error = err;
		t->state = ARB_TXN_FAILED;
		if (err != -ENOSPC)
			arb_log(ARB_LOG_ERR, "transaction %llu failed: %s",
				(unsigned long long)t->transid, strerror(-err));
	}
	return err;
}

int arb_txn_begin(struct arb_vol *vol, struct arb_txn **out)
{
	struct arb_txn *t = vol->running;

	if (vol->readonly)
		return -EROFS;
	if (vol->fatal_error)
		return -EROFS;
	if (!t) {
		t = calloc(1, sizeof(*t));
		if (!t)
			return -ENOMEM;
		t->vol = vol;
		t->transid = vol->generation + 1;
		vol->running = t;
	}
	t->users++;
	*out = t;
	return 0;
}

void arb_txn_end(struct arb_txn *t)
{
	if (t->users > 0)
		t->users--;
}

static bool txn_has_changes(struct arb_vol *vol)
{
	return vol->cache.nr_dirty || arb_delayed_refs_pending(vol) ||
	       arb_roots_dirty(vol) || vol->super_dirty;
}

static int write_super(struct arb_vol *vol, struct arb_super *sb, int slot)
{
	int ret;

	arb_set_super_s_bytenr(sb, super_off[slot]);
	arb_csum_block(vol->csum_type, sb, sizeof(*sb), sb->s_csum);
	ret = arb_dev_write(vol->dev, sb, sizeof(*sb), super_off[slot],
			    ARB_IO_SUPER);
	/* a failed write may have written part: unknown now */
	vol->slot_known[slot] = !ret;
	if (!ret)
		vol->slot_sb[slot] = *sb;
	return ret;
}

static int do_commit(struct arb_txn *t, uint64_t magic)
{
	struct arb_vol *vol = t->vol;
	const struct arb_dev_wrec *recs = NULL;
	struct arb_super sb, wsb, prev;
	int slot = (int)(t->transid % 2), ret, rounds = 0, nrec;
	bool have_prev;
	uint64_t mark[5];

	t->state = ARB_TXN_COMMITTING;
	mark[0] = arb_mono_ns();
	if (vol->pre_commit) {
		ret = vol->pre_commit(t, vol->pre_commit_arg);
		if (ret)
			return arb_txn_fail(t, ret);
	}
	/* the data that the tree points at, written outside the lock
	 * (arb_dev_pend_add), lands before any node that points at it */
	ret = arb_dev_drain(vol->dev);
	if (ret)
		return arb_txn_fail(t, ret);
	if (t->error)
		return t->error;
	if (!txn_has_changes(vol))
		return 0;
	mark[1] = arb_mono_ns();
	do {
		ret = arb_update_root_items(t);
		if (!ret)
			ret = arb_run_delayed_refs(t);
		if (ret)
			return arb_txn_fail(t, ret);
		if (++rounds > 1000) {
			arb_log(ARB_LOG_ERR, "commit does not converge");
			return arb_txn_fail(t, -ELOOP);
		}
	} while (arb_roots_dirty(vol) || arb_delayed_refs_pending(vol));

	mark[2] = arb_mono_ns();
	ret = arb_cache_write_dirty(vol);
	mark[3] = arb_mono_ns();
	if (ret)
		goto fatal;
	nrec = vol->one_flush ? arb_dev_unflushed(vol->dev, &recs) : -1;
	if (nrec <= 0 || nrec > ARB_COMMIT_REC_MAX) {
		nrec = 0;
		ret = arb_dev_flush(vol->dev);
		if (ret)
			goto fatal;
	}
	sb = vol->super;
	arb_set_super_s_magic(&sb, magic);
	arb_set_super_s_generation(&sb, t->transid);
	arb_set_super_s_root(&sb, vol->tree_root->node->bytenr);
	arb_set_super_s_root_mirror(&sb, vol->tree_root->node->mirror);
	arb_set_super_s_root_level(&sb, (uint8_t)arb_level(vol->tree_root->node));
	arb_set_super_s_root_generation(&sb, arb_node_gen(vol->tree_root->node));
	arb_set_super_s_bytes_used(&sb, arb_used_bytes(vol));
	arb_set_super_s_total_bytes(&sb, vol->total_bytes);
	arb_history_fill(vol, &sb);
	wsb = sb;
	if (nrec) {
		arb_set_super_s_incompat(&wsb, arb_super_s_incompat(&wsb) |
					 ARB_INCOMPAT_COMMIT_RECORD);
		arb_set_super_s_commit_nr(&wsb, (uint32_t)nrec);
		for (int i = 0; i < nrec; i++) {
			arb_set_commit_rec_bytenr(&wsb.s_commit[i], recs[i].off);
			arb_set_commit_rec_len(&wsb.s_commit[i], recs[i].len);
			arb_set_commit_rec_csum(&wsb.s_commit[i], recs[i].csum);
		}
	}
	/* what the slot holds (generation - 1), to put back if this fails */
	have_prev = vol->slot_known[slot];
	prev = vol->slot_sb[slot];
	ret = write_super(vol, &wsb, slot);
	if (!ret)
		ret = arb_dev_flush(vol->dev);
	if (ret) {
		/* the flush failed, not necessarily the writes: the new
		 * superblock may sit in a cache that still reaches the disk
		 * (and a one-flush commit's ranges with it).  Put the slot
		 * back, so that the generation the log names as the last on
		 * disk is the one an open finds. */
		if (have_prev &&
		    arb_dev_write(vol->dev, &prev, sizeof(prev),
				  super_off[slot], ARB_IO_SUPER) == 0) {
			vol->slot_sb[slot] = prev;
			vol->slot_known[slot] = true;
		}
		goto fatal;
	}
	vol->super = sb;
	arb_history_load(vol);
	vol->record_on_disk = nrec != 0;
	vol->super_slot = slot;
	vol->super_dirty = false;
	vol->generation = t->transid;
	vol->nr_commits++;
	vol->nr_two_flush += !nrec;
	arb_free_space_unpin(vol);
	mark[4] = arb_mono_ns();
	for (int i = 0; i < 4; i++)
		vol->commit_phase_ns[i] += mark[i + 1] - mark[i];
	return 0;
fatal:
	arb_log(ARB_LOG_ERR,
		"I/O error %d while committing generation %llu: no further "
		"changes are accepted; generation %llu is intact on disk",
		ret, (unsigned long long)t->transid,
		(unsigned long long)vol->generation);
	vol->fatal_error = ret;
	return arb_txn_fail(t, ret);
}

int arb_txn_commit(struct arb_txn *t)
{
	struct arb_vol *vol = t->vol;
	int ret;

	if (t->error) {
		ret = t->error;
		arb_txn_abort(t);
		return ret;
	}
	ret = do_commit(t, ARB_MAGIC);
	if (ret) {
		if (!vol->fatal_error)
			arb_txn_abort(t);
		return ret;
	}
	vol->running = NULL;
	free(t);
	arb_cache_shrink(vol);
	/* the commit-time audit of debug and test builds */
	ARB_ASSERT(arb_free_space_ok(vol));
	return 0;
}

/* Reload every root from the last committed state. */
static int reload_committed(struct arb_vol *vol)
{
	struct arb_root *r, **pp;
	struct arb_key k = { 0, ARB_ROOT_ITEM, 0 };
	struct arb_root_item item;
	struct arb_node *n;
	int ret;

	ret = arb_node_read(vol, arb_super_s_root(&vol->super),
			    arb_super_s_root_mirror(&vol->super),
			    arb_super_s_root_generation(&vol->super),
			    arb_super_s_root_level(&vol->super), &n);
	if (ret)
		return ret;
	arb_node_put(vol, vol->tree_root->node);
	vol->tree_root->node = n;
	vol->tree_root->dirty = false;

	for (pp = &vol->roots, r = *pp; r; r = *pp) {
		k.objectid = r->id;
		ret = arb_lookup_item(vol->tree_root, &k, &item, sizeof(item));
		if (ret == (int)sizeof(item))
			ret = arb_node_read(vol, arb_root_item_r_bytenr(&item),
					    arb_root_item_r_mirror(&item),
					    arb_root_item_r_generation(&item),
					    arb_root_item_r_level(&item), &n);
		else if (ret >= 0)
			ret = -EUCLEAN;
		if (ret == -ENOENT) {
			/* created by the aborted transaction */
			*pp = r->next;
			arb_root_free(vol, r);
			continue;
		}
		if (ret)
			return ret;
		arb_node_put(vol, r->node);
		r->node = n;
		r->item = item;
		r->last_snapshot = arb_root_item_r_last_snapshot(&item);
		r->dirty = false;
		pp = &r->next;
	}
	k.objectid = ARB_EXTENT_TREE_ID;
	ret = arb_lookup_item(vol->tree_root, &k, &item, sizeof(item));
	if (ret != (int)sizeof(item))
		return ret < 0 ? ret : -EUCLEAN;
	ret = arb_node_read(vol, arb_root_item_r_bytenr(&item),
			    arb_root_item_r_mirror(&item),
			    arb_root_item_r_generation(&item),
			    arb_root_item_r_level(&item), &n);
	if (ret)
		return ret;
	arb_node_put(vol, vol->extent_root->node);
	vol->extent_root->node = n;
	vol->extent_root->item = item;
	vol->extent_root->dirty = false;
	return 0;
}

static void txn_drop(struct arb_txn *t, bool warn)
{
	struct arb_vol *vol = t->vol;
	int ret;

	if (warn)
		arb_log(ARB_LOG_WARN, "aborting transaction %llu",
			(unsigned long long)t->transid);
	/* deferred writes land before their space can be handed out again */
	(void)arb_dev_drain(vol->dev);
	arb_delayed_refs_drop(vol);
	arb_cache_drop_dirty(vol);
	vol->running = NULL;
	free(t);
	/* a resize not yet committed is undone with the rest */
	vol->super_dirty = false;
	vol->total_bytes = arb_super_s_total_bytes(&vol->super);
	ret = reload_committed(vol);
	if (!ret)
		ret = arb_free_space_reload(vol);
	if (ret) {
		arb_log(ARB_LOG_ERR, "cannot reload the committed state (%d)",
			ret);
		vol->fatal_error = ret;
	}
}

void arb_txn_abort(struct arb_txn *t)
{
	txn_drop(t, true);
}

void arb_txn_discard(struct arb_txn *t)
{
	txn_drop(t, false);
}

/* ---- superblock and open ------------------------------------------------ */

/* The flag is set exactly with a non-empty record of sane entries. */
static bool commit_record_sane(const struct arb_super *sb)
{
	uint32_t n = arb_super_s_commit_nr(sb);
	bool flag = arb_super_s_incompat(sb) & ARB_INCOMPAT_COMMIT_RECORD;
	uint64_t total = 0, total_bytes = arb_super_s_total_bytes(sb);

	if (flag != (n != 0) || n > ARB_COMMIT_REC_MAX)
		return false;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t a = arb_commit_rec_bytenr(&sb->s_commit[i]);
		uint32_t len = arb_commit_rec_len(&sb->s_commit[i]);

		total += len;
		if (!len || total > ARB_COMMIT_REC_BYTES || a > total_bytes ||
		    len > total_bytes - a)
			return false;
		for (uint32_t j = 0; j < i; j++) {
			uint64_t b = arb_commit_rec_bytenr(&sb->s_commit[j]);

			if (a < b + arb_commit_rec_len(&sb->s_commit[j]) &&
			    b < a + len)
				return false; /* overlapping ranges */
		}
	}
	return true;
}

/* Does every range of sb's commit record read back with its checksum? */
static bool commit_record_whole(struct arb_dev *dev,
				const struct arb_super *sb)
{
	uint32_t n = arb_super_s_commit_nr(sb);
	uint8_t *buf = NULL;
	bool ok = true;

	for (uint32_t i = 0; i < n && ok; i++) {
		uint64_t a = arb_commit_rec_bytenr(&sb->s_commit[i]);
		uint32_t len = arb_commit_rec_len(&sb->s_commit[i]);
		uint8_t *nb = realloc(buf, len);

		if (!nb) {
			ok = false;
			break;
		}
		buf = nb;
		ok = arb_dev_read(dev, buf, len, a, ARB_IO_OTHER) == 0 &&
		     ~arb_crc32c(~0u, buf, len) ==
			     arb_commit_rec_csum(&sb->s_commit[i]);
	}
	free(buf);
	return ok;
}

static int check_super(const struct arb_super *sb, uint64_t off,
		       uint64_t dev_size, const char **why)
{
	uint32_t ns = arb_super_s_nodesize(sb);

	if (arb_super_s_magic(sb) == ARB_MAGIC_TEMPORARY) {
		*why = "mkfs did not finish on this image";
		return -EINVAL;
	}
	if (arb_super_s_magic(sb) != ARB_MAGIC) {
		*why = "not an arborfs image (no superblock magic)";
		return -EINVAL;
	}
	/* crc32c is the only algorithm: verify before trusting any field */
	if (arb_csum_verify(ARB_CSUM_CRC32C, sb, sizeof(*sb))) {
		*why = "bad superblock checksum";
		return -EUCLEAN;
	}
	if (arb_super_s_csum_type(sb) != ARB_CSUM_CRC32C) {
		*why = "unknown checksum type";
		return -EPROTONOSUPPORT;
	}
	if (arb_super_s_version(sb) > ARB_FORMAT_VERSION) {
		*why = "format version newer than this arborfs supports";
		return -EPROTONOSUPPORT;
	}
	if (arb_super_s_version(sb) < ARB_FORMAT_VERSION_MIN) {
		*why = "format version 1 (from before duplicated metadata) is "
		       "no longer supported: re-create the image with "
		       "mkfs.arborfs";
		return -EPROTONOSUPPORT;
	}
	if (arb_super_s_incompat(sb) & ~ARB_INCOMPAT_KNOWN) {
		*why = "unknown incompatible feature flags";
		return -EPROTONOSUPPORT;
	}
	if (!commit_record_sane(sb)) {
		*why = "bad commit record";
		return -EUCLEAN;
	}
	if (arb_super_s_bytenr(sb) != off || ns < ARB_MIN_NODESIZE ||
	    ns > ARB_MAX_NODESIZE || (ns & (ns - 1)) ||
	    arb_super_s_sectorsize(sb) != ARB_SECTORSIZE ||
	    arb_super_s_generation(sb) == 0 ||
	    arb_super_s_root_level(sb) >= ARB_MAX_LEVEL ||
	    arb_super_s_meta_copies(sb) < 1 || arb_super_s_meta_copies(sb) > 2 ||
	    (arb_super_s_meta_copies(sb) == 1) != !arb_super_s_root_mirror(sb) ||
	    arb_super_s_total_bytes(sb) < ARB_DATA_START + 4 * ns) {
		*why = "superblock fields out of range";
		return -EUCLEAN;
	}
	if (arb_super_s_total_bytes(sb) > dev_size) {
		*why = "image is smaller than the filesystem (truncated?)";
		return -EUCLEAN;
	}
	return 0;
}

/*
 * Read both superblock slots and pick the valid one with the highest
 * generation.  *why names the problem of the best invalid one otherwise.
 */
static int read_super(struct arb_dev *dev, struct arb_super *out, int *slot,
		      const char **why, struct arb_super *raw, bool *raw_ok)
{
	struct arb_super sb[2];
	bool valid[2] = { false, false };
	int best = -1, err = -EINVAL, ret;
	const char *w = "image too small to hold an arborfs superblock";

	for (int i = 0; i < 2; i++) {
		const char *wi = NULL;
		if (dev->size < super_off[i] + ARB_SUPER_SIZE)
			continue;
		ret = arb_dev_read(dev, &sb[i], sizeof(sb[i]), super_off[i],
				   ARB_IO_SUPER);
		if (ret)
			return ret;
		if (raw) {
			raw[i] = sb[i];
			raw_ok[i] = true;
		}
		ret = check_super(&sb[i], super_off[i], dev->size, &wi);
		if (ret == -EPROTONOSUPPORT) {
			/* a valid superblock we cannot handle: never fall back
			 * to the older copy (its next commit would overwrite
			 * the newer one) */
			if (why)
				*why = wi;
			return ret;
		}
		if (ret) {
			/* report the most specific problem */
			if (err == -EINVAL || i == 0) {
				err = ret;
				w = wi;
			}
			continue;
		}
		valid[i] = true;
		/* of two copies of one generation, the one without a commit
		 * record (settle_record wrote it after the commit's flush) */
		if (best < 0 || arb_super_s_generation(&sb[i]) >
					arb_super_s_generation(&sb[best]) ||
		    (arb_super_s_generation(&sb[i]) ==
			     arb_super_s_generation(&sb[best]) &&
		     arb_super_s_commit_nr(&sb[best]) &&
		     !arb_super_s_commit_nr(&sb[i])))
			best = i;
	}
	if (best < 0) {
		if (why)
			*why = w;
		return err;
	}
	if (arb_super_s_commit_nr(&sb[best]) &&
	    !commit_record_whole(dev, &sb[best])) {
		/* a one-flush commit a crash cut short: the other slot holds
		 * the generation before it, complete since its last flush */
		int other = 1 - best;
		uint64_t g = arb_super_s_generation(&sb[best]);

		if (!valid[other] || arb_super_s_generation(&sb[other]) + 1 != g) {
			if (why)
				*why = "the newest commit did not reach the disk "
				       "whole and the other superblock slot "
				       "does not hold the generation before it";
			return -EUCLEAN;
		}
		arb_log(ARB_LOG_INFO,
			"generation %llu did not reach the disk whole (a crash "
			"during its commit): using generation %llu",
			(unsigned long long)g, (unsigned long long)(g - 1));
		best = other;
	}
	*out = sb[best];
	*slot = best;
	return 0;
}

int arb_read_super(struct arb_dev *dev, struct arb_super *out, int *slot,
		   const char **why)
{
	return read_super(dev, out, slot, why, NULL, NULL);
}

static void vol_free(struct arb_vol *vol)
{
	struct arb_root *r, *next;

	for (r = vol->roots; r; r = next) {
		next = r->next;
		arb_root_free(vol, r);
	}
	arb_root_free(vol, vol->tree_root);
	arb_root_free(vol, vol->extent_root);
	arb_delayed_refs_drop(vol);
	arb_free_space_destroy(vol);
	if (vol->cache.table)
		arb_cache_destroy(vol);
	free(vol->running);
	if (vol->one_flush)
		arb_dev_track(vol->dev, 0, 0);
	pthread_mutex_destroy(&vol->lock);
	free(vol);
}

static struct arb_vol *vol_alloc(struct arb_dev *dev, size_t cache_bytes)
{
	struct arb_vol *vol = calloc(1, sizeof(*vol));
	pthread_mutexattr_t a;

	if (!vol)
		return NULL;
	vol->dev = dev;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
	pthread_mutex_init(&vol->lock, &a);
	pthread_mutexattr_destroy(&a);
	vol->cache.max_bytes = cache_bytes ? cache_bytes : 64u << 20;
	return vol;
}

/* The in-memory superblock never carries a commit record: every write of
 * it but a one-flush commit's must write none. */
void arb_super_strip_record(struct arb_super *sb)
{
	arb_set_super_s_incompat(sb, arb_super_s_incompat(sb) &
				 ~ARB_INCOMPAT_COMMIT_RECORD);
	arb_set_super_s_commit_nr(sb, 0);
	memset(sb->s_commit, 0, sizeof(sb->s_commit));
}

static void vol_from_super(struct arb_vol *vol, const struct arb_super *sb)
{
	vol->super = *sb;
	arb_super_strip_record(&vol->super);
	memcpy(vol->uuid, sb->s_uuid, ARB_UUID_SIZE);
	vol->nodesize = arb_super_s_nodesize(sb);
	vol->sectorsize = arb_super_s_sectorsize(sb);
	vol->csum_type = arb_super_s_csum_type(sb);
	vol->total_bytes = arb_super_s_total_bytes(sb);
	vol->generation = arb_super_s_generation(sb);
	vol->meta_copies = arb_super_s_meta_copies(sb);
}

int arb_vol_open(struct arb_dev *dev, const struct arb_vol_opts *o,
		 struct arb_vol **out)
{
	struct arb_vol *vol;
	struct arb_super sb;
	struct arb_root_item item;
	struct arb_key k = { ARB_EXTENT_TREE_ID, ARB_ROOT_ITEM, 0 };
	const char *why = NULL;
	struct arb_super raw[2] = { 0 };
	bool raw_ok[2] = { false, false };
	int slot, ret;

	if (o && o->super) {
		/* a view of a generation the caller read from a live volume */
		sb = *o->super;
		slot = (int)(arb_super_s_generation(&sb) % 2);
	} else {
		ret = read_super(dev, &sb, &slot, &why, raw, raw_ok);
		if (ret) {
			arb_log(ARB_LOG_ERR, "%s",
				why ? why : strerror(-ret));
			return ret;
		}
	}
	vol = vol_alloc(dev, o ? o->cache_bytes : 0);
	if (!vol)
		return -ENOMEM;
	vol_from_super(vol, &sb);
	arb_history_load(vol);
	if (o) {
		vol->hist_secs = o->hist_secs;
		vol->hist_commits = o->hist_commits;
	}
	vol->super_slot = slot;
	for (int i = 0; i < 2; i++) {
		/* as read: what a failed commit puts back into the slot */
		vol->slot_sb[i] = raw[i];
		vol->slot_known[i] = raw_ok[i];
	}
	vol->view = o && o->super;
	vol->readonly = o && (o->readonly || o->super);
	if (arb_super_s_ro_compat(&sb) && !vol->readonly) {
		arb_log(ARB_LOG_WARN,
			"unknown read-only compatible features: read-only");
		vol->readonly = true;
	}
	ret = arb_cache_init(vol, vol->cache.max_bytes);
	if (ret)
		goto fail;
	vol->tree_root = calloc(1, sizeof(*vol->tree_root));
	if (!vol->tree_root) {
		ret = -ENOMEM;
		goto fail;
	}
	vol->tree_root->vol = vol;
	vol->tree_root->id = ARB_ROOT_TREE_ID;
	pthread_mutex_init(&vol->tree_root->lock, NULL);
	ret = arb_node_read(vol, arb_super_s_root(&sb),
			    arb_super_s_root_mirror(&sb),
			    arb_super_s_root_generation(&sb),
			    arb_super_s_root_level(&sb), &vol->tree_root->node);
	if (ret) {
		arb_log(ARB_LOG_ERR, "cannot read the root tree");
		goto fail;
	}
	memset(&item, 0, sizeof(item));
	ret = arb_lookup_item(vol->tree_root, &k, &item, sizeof(item));
	if (ret != (int)sizeof(item)) {
		arb_log(ARB_LOG_ERR, "extent tree root item missing or bad");
		ret = ret < 0 && ret != -ENOENT ? ret : -EUCLEAN;
		goto fail;
	}
	ret = arb_root_load(vol, ARB_EXTENT_TREE_ID, &item, &vol->extent_root);
	if (ret)
		goto fail;
	ret = arb_free_space_load(vol);
	if (ret)
		goto fail;
	if (!vol->readonly) {
		ret = arb_history_regrace(vol);
		if (ret)
			goto fail;
	}
	if (!vol->readonly && !(o && o->two_flush) &&
	    arb_dev_track(dev, ARB_COMMIT_REC_MAX, ARB_COMMIT_REC_BYTES) == 0)
		vol->one_flush = true;
	*out = vol;
	return 0;
fail:
	vol_free(vol);
	return ret;
}

/*
 * The newest superblock on disk carries a commit record: put the same
 * generation without one into the other slot, which opening then prefers
 * (lib/core/txn.c, arb_read_super).  Left alone, the record would keep saying
 * "this commit may be incomplete" for as long as the image rests, and a
 * range of it that later rots would read as a commit cut short, opening
 * the generation before it.  The other slot holds the previous generation,
 * no longer needed: the newest is complete since its flush.
 */
static int settle_record(struct arb_vol *vol)
{
	struct arb_super copy = vol->super;
	int ret;

	ret = write_super(vol, &copy, 1 - vol->super_slot);
	if (!ret)
		ret = arb_dev_flush(vol->dev);
	if (!ret)
		vol->record_on_disk = false;
	return ret;
}

/*
 * Shut down (arb_fs_shutdown): throw the running transaction away and write
 * nothing from now on, arb_vol_close included, so that the image stays at
 * the last durable commit.  settle: put that commit's record to rest first,
 * as a clean close does (the caller committed everything it wanted to).
 * Lock held.
 */
void arb_vol_shutdown(struct arb_vol *vol, bool settle)
{
	if (vol->running)
		arb_txn_abort(vol->running);
	if (settle && !vol->readonly && !vol->fatal_error &&
	    vol->record_on_disk)
		(void)settle_record(vol);
	vol->readonly = true;
}

int arb_vol_close(struct arb_vol *vol)
{
	int ret = 0;

	if (vol->running) {
		if (!vol->readonly && !vol->fatal_error)
			ret = arb_txn_commit(vol->running);
		else
			arb_txn_abort(vol->running);
	}
	if (!ret && !vol->readonly && !vol->fatal_error && vol->record_on_disk)
		ret = settle_record(vol);
	if (!ret && vol->fatal_error)
		ret = vol->fatal_error;
	vol_free(vol);
	return ret;
}

int arb_vol_format(struct arb_dev *dev, const struct arb_format_opts *o)
{
	struct arb_vol *vol;
	struct arb_super *sb;
	struct arb_txn *t = NULL;
	struct arb_root *r;
	uint32_t ns = o && o->nodesize ? o->nodesize : ARB_DEFAULT_NODESIZE;
	uint64_t total = dev->size / ARB_SECTORSIZE * ARB_SECTORSIZE;
	static const uint8_t zero[ARB_UUID_SIZE];
	int ret = 0;

	unsigned copies = o && o->meta_copies ? o->meta_copies : 2;

	if (ns < ARB_MIN_NODESIZE || ns > ARB_MAX_NODESIZE || (ns & (ns - 1)))
		return -EINVAL;
	if (copies > 2)
		return -EINVAL;
	if (total < ARB_DATA_START + 64 * (uint64_t)ns ||
	    total < 4 * 1024 * 1024)
		return -ENOSPC;
	vol = vol_alloc(dev, 0);
	if (!vol)
		return -ENOMEM;
	sb = &vol->super;
	memset(sb, 0, sizeof(*sb));
	if (o && memcmp(o->uuid, zero, ARB_UUID_SIZE))
		memcpy(sb->s_uuid, o->uuid, ARB_UUID_SIZE);
	else
		uuid_generate(sb->s_uuid);
	arb_set_super_s_total_bytes(sb, total);
	arb_set_super_s_nodesize(sb, ns);
	arb_set_super_s_sectorsize(sb, ARB_SECTORSIZE);
	arb_set_super_s_version(sb, ARB_FORMAT_VERSION);
	arb_set_super_s_csum_type(sb, ARB_CSUM_CRC32C);
	arb_set_super_s_meta_copies(sb, (uint8_t)copies);
	if (o && o->label)
		strncpy(sb->s_label, o->label, ARB_LABEL_SIZE - 1);
	vol_from_super(vol, sb);
	vol->generation = 0;

	/* temporary magic in both slots first: a half-made image never opens */
	{
		struct arb_super tmp = *sb;
		arb_set_super_s_magic(&tmp, ARB_MAGIC_TEMPORARY);
		arb_set_super_s_generation(&tmp, 0);
		for (int i = 0; i < 2 && !ret; i++)
			ret = write_super(vol, &tmp, i);
		if (!ret)
			ret = arb_dev_flush(dev);
		if (ret)
			goto out;
	}
	ret = arb_cache_init(vol, vol->cache.max_bytes);
	if (!ret)
		ret = arb_free_space_load(vol);
	if (!ret)
		ret = arb_txn_begin(vol, &t);
	if (ret)
		goto out;
	ret = arb_bootstrap_roots(t);
	if (!ret)
		ret = arb_root_create(t, ARB_CSUM_TREE_ID, &r);
	if (!ret && o && o->init_fs_tree) {
		ret = arb_root_create(t, ARB_FS_TREE_ID, &r);
		if (!ret)
			ret = o->init_fs_tree(t, r, o->init_arg);
	}
	if (!ret)
		ret = do_commit(t, ARB_MAGIC);
	if (!ret) {
		/* generation 1 went to slot 1; put the same superblock in slot
		 * 0 too, so that no slot keeps the temporary magic.  This is
		 * mkfs's last write. */
		struct arb_super copy = vol->super;
		ret = write_super(vol, &copy, 0);
		if (!ret)
			ret = arb_dev_flush(dev);
		vol->running = NULL;
		free(t);
	}
out:
	vol_free(vol);
	return ret;
}

void arb_vol_set_features(struct arb_vol *vol, uint64_t compat,
			  uint64_t incompat)
{
	uint64_t c = arb_super_s_compat(&vol->super);
	uint64_t i = arb_super_s_incompat(&vol->super);

	if ((c | compat) == c && (i | incompat) == i)
		return;
	arb_set_super_s_compat(&vol->super, c | compat);
	arb_set_super_s_incompat(&vol->super, i | incompat);
	vol->super_dirty = true;
}

void arb_vol_clear_features(struct arb_vol *vol, uint64_t compat,
			    uint64_t incompat)
{
	uint64_t c = arb_super_s_compat(&vol->super);
	uint64_t i = arb_super_s_incompat(&vol->super);

	if (!(c & compat) && !(i & incompat))
		return;
	arb_set_super_s_compat(&vol->super, c & ~compat);
	arb_set_super_s_incompat(&vol->super, i & ~incompat);
	vol->super_dirty = true;
}
