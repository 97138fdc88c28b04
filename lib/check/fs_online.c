/* SPDX-License-Identifier: MIT */
/*
 * fs_online.c - the checker online: arb_fs_check_online checks the last
 * committed generation of a filesystem in use.
 *
 * Under the filesystem's lock, for as long as a commit takes: commit what
 * is pending, remember generation G and its superblock, and ask the
 * allocator to hold G (arb_free_space_hold): a block G references that a
 * later commit frees stays used until the check ends.  Copy-on-write does
 * the rest: nothing reachable from G is written again (the only writes to
 * G's blocks, self-heal and scrub, write the bytes they already hold), so
 * G stays intact on disk while the filesystem goes on.
 *
 * Then, without the lock: a second, read-only arb_fs opened on a view of
 * the same device (struct fs_check_view: reads go to the device, writes
 * are refused) at G's superblock, with its own node cache and lock, and
 * the ordinary checker (arb_fs_check_records) on it.  At the end the hold
 * is released.  The hold lives in memory only: after a crash the held
 * blocks are free space that the next open rebuilds from the extent tree.
 *
 * Space: held blocks are not free, so a long check under heavy rewriting
 * shrinks the free space.  When an operation would fail for lack of space
 * (fs_op_begin after its commit) or free space falls under the reserve,
 * fs_check_yield cancels the check and releases the hold first: writes
 * win over the check.  The view then refuses every further read
 * (-ECANCELED), and what it found is thrown away (it may have read blocks
 * being reused).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fs_int.h"

/* A read-only view of the filesystem's device for the checker. */
struct fs_check_view {
	struct arb_dev dev;
	struct arb_dev *lower;
	/* the caller's cancel flag (may be NULL) */
	volatile const bool *cancel;
	/* set by fs_check_yield (atomic accesses) */
	bool space_cancel;
	/* progress counter (atomic updates) */
	uint64_t *bytes_read;
	uint64_t generation;
};

static bool view_cancelled(struct fs_check_view *v)
{
	return (v->cancel && __atomic_load_n(v->cancel, __ATOMIC_RELAXED)) ||
	       __atomic_load_n(&v->space_cancel, __ATOMIC_RELAXED);
}

static int view_pread(struct arb_dev *d, void *buf, size_t len, uint64_t off,
		      enum arb_io_kind kind)
{
	struct fs_check_view *v = d->priv;
	int ret;

	if (view_cancelled(v))
		return -ECANCELED;
	/* straight to the device's op: its counters belong to the mount
	 * (and are not atomic); pread(2) itself is thread-safe */
	ret = v->lower->ops->pread(v->lower, buf, len, off, kind);
	if (ret >= 0)
		__atomic_fetch_add(v->bytes_read, (uint64_t)len,
				   __ATOMIC_RELAXED);
	return ret;
}

static int view_pwrite(struct arb_dev *d, const void *buf, size_t len,
		       uint64_t off, enum arb_io_kind kind)
{
	(void)d;
	(void)buf;
	(void)len;
	(void)off;
	(void)kind;
	return -EROFS;
}

static int view_flush(struct arb_dev *d)
{
	(void)d;
	return 0;
}

static void view_destroy(struct arb_dev *d)
{
	(void)d; /* owned by arb_fs_check_online */
}

static const struct arb_dev_ops view_ops = {
	.pread = view_pread,
	.pwrite = view_pwrite,
	.flush = view_flush,
	.destroy = view_destroy,
};

bool fs_check_yield(struct arb_fs *fs)
{
	struct fs_check_view *v = fs->check_view;
	bool holding;
	uint64_t held;

	if (!v)
		return false;
	held = arb_free_space_held(fs->vol, &holding);
	if (!holding)
		return false;
	__atomic_store_n(&v->space_cancel, true, __ATOMIC_RELAXED);
	arb_free_space_release(fs->vol);
	arb_log(ARB_LOG_WARN,
		"online check of generation %llu cancelled: the filesystem "
		"is short of space (%llu bytes freed since were held for it)",
		(unsigned long long)v->generation, (unsigned long long)held);
	return true;
}

/* copy the text of a check to out, or nothing */
static void print_text(FILE *out, const char *text, size_t len)
{
	if (out && text && len)
		fwrite(text, 1, len, out);
}

int arb_fs_check_online(struct arb_fs *fs, struct arb_check_result *r,
			FILE *out, struct arb_online_check *oc,
			volatile const bool *cancel)
{
	struct arb_online_check dummy;
	struct fs_check_view *v;
	struct arb_fs_opts o;
	struct arb_super sb;
	struct arb_fs *view;
	const char *why = NULL;
	char *text = NULL;
	size_t text_len = 0;
	bool holding = false, space;
	FILE *mem;
	int ret;

	if (!oc)
		oc = &dummy;
	/* another thread may be reading oc (progress): atomic stores */
	__atomic_store_n(&oc->generation, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&oc->bytes_used, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&oc->bytes_read, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&oc->out_of_space, false, __ATOMIC_RELAXED);
	v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	v->dev.ops = &view_ops;
	v->dev.priv = v;
	v->lower = fs->dev;
	v->cancel = cancel;
	v->bytes_read = &oc->bytes_read;

	fs_lock(fs);
	if (fs->failed) {
		ret = fs->error ? fs->error : -EIO;
		goto out_unlock;
	}
	if (fs->check_view) {
		ret = -EBUSY;
		goto out_unlock;
	}
	if (!fs->readonly && (fs->txn_dirty || fs->dirty_bytes)) {
		ret = fs_commit(fs);
		if (ret)
			goto out_unlock;
	}
	if (!fs->readonly) {
		ret = arb_free_space_hold(fs->vol, fs->vol->generation);
		if (ret)
			goto out_unlock;
	}
	sb = fs->vol->super;
	v->generation = fs->vol->generation;
	v->dev.size = fs->dev->size;
	__atomic_store_n(&oc->generation, v->generation, __ATOMIC_RELAXED);
	__atomic_store_n(&oc->bytes_used, arb_super_s_bytes_used(&sb),
			 __ATOMIC_RELAXED);
	fs->check_view = v;
	fs->space_yield = fs_check_yield;
	fs_unlock(fs);

	arb_fs_opts_default(&o);
	o.readonly = true;
	o.commit_interval = 0;
	/* a quarter of the mount's cache, at least 16 MiB */
	o.cache_bytes = fs->opts.cache_bytes ? fs->opts.cache_bytes / 4
					     : (16u << 20);
	if (o.cache_bytes < (16u << 20))
		o.cache_bytes = 16u << 20;
	ret = view_cancelled(v) ? -ECANCELED
				: fs_open_at(&v->dev, &o, &sb, &view, &why);
	if (ret && view_cancelled(v)) {
		/* cancelled before it could open: said by the caller */
	} else if (ret) {
		arb_log(ARB_LOG_ERR,
			"online check: cannot open generation %llu: %s",
			(unsigned long long)v->generation,
			why ? why : strerror(-ret));
	} else {
		mem = open_memstream(&text, &text_len);
		ret = mem ? arb_fs_check_records(view, r, mem) : -ENOMEM;
		if (mem)
			fclose(mem);
		arb_fs_close(view);
	}

	fs_lock(fs);
	space = __atomic_load_n(&v->space_cancel, __ATOMIC_RELAXED);
	fs->check_view = NULL;
	fs->space_yield = NULL;
	arb_free_space_held(fs->vol, &holding);
	if (holding)
		arb_free_space_release(fs->vol);
	fs_unlock(fs);
	if (space || (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED))) {
		/* what it read after the cancel may be anything: no result */
		__atomic_store_n(&oc->out_of_space, space, __ATOMIC_RELAXED);
		arb_check_result_free(r);
		ret = -ECANCELED;
	} else {
		print_text(out, text, text_len);
	}
	free(text);
	free(v);
	return ret;

out_unlock:
	fs_unlock(fs);
	free(v);
	return ret;
}
