// SPDX-License-Identifier: MIT
/*
 * trim.c - free space goes back to the host.
 *
 * An image file is sparse and takes host space as it fills, but never gave
 * it back: after a test suite's hour and a half of work, an image holding
 * a few MiB of live data took 3.6 GB on the host.  arb_fs_trim (fstrim,
 * FITRIM) punches a hole into every free run of the image; with the
 * discard option (-o discard=async), the runs that commits free are
 * punched by the commit thread after each commit.
 *
 * What may be punched: a run that is free in the free-space map while the
 * lock is held.  Free there means free in the last durable commit and in
 * the running transaction alike: blocks a transaction frees stay pinned
 * (used in the map) until its commit is durable, blocks unlocked data
 * reads may still read stay on grace lists, blocks of a generation an
 * online check holds stay held.  So nothing a committed generation or a
 * reader needs is ever punched, and a crash at any instant leaves the last
 * commit intact: its blocks were never free in the map.
 *
 * The lock is held for one window of the address space at a time
 * (TRIM_WINDOW), so other operations wait at most for the holes punched
 * in one window.
 */
#include <errno.h>
#include <stdlib.h>

#include "arbor/dev.h"
#include "fs_int.h"

/* address space trimmed per hold of the lock */
#define TRIM_WINDOW (256ULL << 20)

/* Lock held: punch the free runs of at least minsec sectors in [s0, s1). */
static int trim_sectors(struct arb_fs *fs, uint64_t s0, uint64_t s1,
			uint64_t minsec, uint64_t *trimmed)
{
	struct arb_vol *vol = fs->vol;
	uint64_t pos = s0, start, n;
	int ret;

	while (arb_free_space_next(vol, pos, s1, &start, &n)) {
		if (n >= minsec) {
			ret = arb_dev_discard(vol->dev, start * vol->sectorsize,
					      n * vol->sectorsize);
			if (ret)
				return ret;
			*trimmed += n * vol->sectorsize;
		}
		pos = start + n;
	}
	return 0;
}

int arb_fs_trim(struct arb_fs *fs, uint64_t start, uint64_t len,
		uint64_t minlen, uint64_t *trimmed)
{
	uint64_t ss, s0, s1, minsec, total = 0;
	int ret;

	fs_lock(fs);
	if (fs->readonly) {
		fs_unlock(fs);
		return -EROFS;
	}
	/* what the last transaction freed becomes free with its commit */
	ret = fs->txn_dirty || fs->dirty_bytes ? fs_commit(fs) : 0;
	ss = fs->vol->sectorsize;
	s1 = fs->vol->total_bytes / ss;
	fs_unlock(fs);
	if (ret)
		return ret;
	s0 = start / ss + (start % ss != 0);
	if (len < UINT64_MAX - start && (start + len) / ss < s1)
		s1 = (start + len) / ss;
	minsec = minlen / ss + (minlen % ss != 0);
	if (!minsec)
		minsec = 1;
	for (uint64_t w = s0; w < s1 && !ret;) {
		uint64_t e = w + TRIM_WINDOW / ss;

		if (e > s1)
			e = s1;
		fs_lock(fs);
		/* a resize may have shrunk the volume meanwhile */
		if (e > fs->vol->total_bytes / ss)
			e = fs->vol->total_bytes / ss;
		ret = w < e ? trim_sectors(fs, w, e, minsec, &total) : 0;
		fs_unlock(fs);
		w = e > w ? e : s1;
	}
	if (trimmed)
		*trimmed = total;
	return ret;
}

/* Lock held: punch the runs freed since the last call (discard=async). */
void fs_trim_freed(struct arb_fs *fs)
{
	struct arb_vol *vol = fs->vol;
	uint64_t *runs, total = 0;
	bool all;
	size_t n;
	int ret = 0;

	if (!fs->opts.discard || fs->readonly)
		return;
	n = arb_free_space_take_freed(vol, &runs, &all);
	if (all)
		ret = trim_sectors(fs, 0, vol->total_bytes / vol->sectorsize, 1,
				   &total);
	for (size_t i = 0; i < n && !ret; i++)
		ret = trim_sectors(fs, runs[2 * i], runs[2 * i] + runs[2 * i + 1],
				   1, &total);
	free(runs);
	fs->trimmed_bytes += total;
	if (ret && !fs->told_discard) {
		arb_log(ARB_LOG_WARN,
			"discard: cannot give free space back to the host "
			"(%d); discarding stops",
			ret);
		fs->told_discard = true;
		fs->opts.discard = false;
		arb_free_space_track_freed(vol, false);
	}
}
