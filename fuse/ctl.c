// SPDX-License-Identifier: MIT
/*
 * ctl.c - the control channel of the daemon: the ioctls of
 * <arbor/ioctl.h> on any file or directory of the mount, and the
 * per-request counters that ARB_IOC_GET_STATS reports.
 *
 * Counting: every handler of the operation table runs between
 * afs_op_start() and afs_op_done() (ops.c wraps them), which add one
 * request, its wall time and the longest time to the counters of its
 * kind, with relaxed atomics: no lock on the request path.  An answer
 * with an error (ops.c's reply_err) counts one error for the kind the
 * thread is handling, kept in a thread-local variable.  Negative lookups
 * are answered as entries (cached by the kernel), not as errors.
 *
 * Privilege: the ioctls that change something (ARB_IOC_SYNC,
 * ARB_IOC_RESET_STATS, FS_IOC_SHUTDOWN) need uid 0 or CAP_SYS_ADMIN.  The capability is
 * read from /proc/PID/status of the requesting thread, which is blocked
 * in ioctl(2) while we look, so its pid cannot be reused meanwhile; it
 * counts only when the caller is in the daemon's user namespace (a
 * capability inside a user namespace of its own gives nothing here) and
 * its pid is visible (FUSE sends pid 0 for a caller in a pid namespace
 * the daemon cannot see).
 */
#include <errno.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "arborfs_fuse.h"

#define CAP_SYS_ADMIN_BIT 21

static _Thread_local int cur_op = -1;

void afs_stats_init(struct afs *afs)
{
	pthread_mutex_init(&afs->stats_lock, NULL);
	memset(&afs->stats_base, 0, sizeof(afs->stats_base));
	afs->stats_start_ns = arb_mono_ns();
}

uint64_t afs_op_start(enum arb_ioc_op op)
{
	cur_op = (int)op;
	return arb_mono_ns();
}

void afs_op_done(struct afs *afs, enum arb_ioc_op op, uint64_t start_ns)
{
	struct afs_op_counter *c = &afs->ops[op];
	uint64_t d = arb_mono_ns() - start_ns;
	uint64_t max = atomic_load_explicit(&c->max_ns, memory_order_relaxed);

	atomic_fetch_add_explicit(&c->count, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&c->total_ns, d, memory_order_relaxed);
	while (d > max && !atomic_compare_exchange_weak_explicit(
				  &c->max_ns, &max, d, memory_order_relaxed,
				  memory_order_relaxed))
		;
	cur_op = -1;
}

void afs_op_add_time(struct afs *afs, enum arb_ioc_op op, uint64_t ns,
		     bool error)
{
	struct afs_op_counter *c = &afs->ops[op];
	uint64_t max = atomic_load_explicit(&c->max_ns, memory_order_relaxed);

	atomic_fetch_add_explicit(&c->total_ns, ns, memory_order_relaxed);
	if (error)
		atomic_fetch_add_explicit(&c->errors, 1, memory_order_relaxed);
	while (ns > max && !atomic_compare_exchange_weak_explicit(
				   &c->max_ns, &max, ns, memory_order_relaxed,
				   memory_order_relaxed))
		;
}

void afs_op_error(struct afs *afs)
{
	if (cur_op >= 0 && cur_op < ARB_IOC_OP_NR)
		atomic_fetch_add_explicit(&afs->ops[cur_op].errors, 1,
					  memory_order_relaxed);
}

/* ---- privilege --------------------------------------------------------- */

bool afs_pid_has_cap(pid_t pid, int cap)
{
	char path[64], line[256], ns[64], my_ns[64];
	unsigned long long caps = 0;
	bool found = false;
	ssize_t n;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
	n = readlink(path, ns, sizeof(ns) - 1);
	if (n <= 0)
		return false;
	ns[n] = '\0';
	n = readlink("/proc/self/ns/user", my_ns, sizeof(my_ns) - 1);
	if (n <= 0)
		return false;
	my_ns[n] = '\0';
	if (strcmp(ns, my_ns) != 0)
		return false;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "CapEff: %llx", &caps) == 1) {
			found = true;
			break;
		}
	}
	fclose(f);
	return found && (caps >> cap & 1);
}

static bool req_privileged(fuse_req_t req)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	if (ctx->uid == 0)
		return true;
	return ctx->pid > 0 && afs_pid_has_cap(ctx->pid, CAP_SYS_ADMIN_BIT);
}

/* ---- the ioctls -------------------------------------------------------- */

static uint64_t state_flags(const struct arb_fs_stats *s)
{
	uint64_t st = 0;

	if (s->state & ARB_FS_STATE_READONLY)
		st |= ARB_IOC_STATE_READONLY;
	if (s->state & ARB_FS_STATE_FAILED)
		st |= ARB_IOC_STATE_FAILED;
	if (s->state & ARB_FS_STATE_SHUTDOWN)
		st |= ARB_IOC_STATE_SHUTDOWN;
	return st;
}

static int ioc_generation(struct afs *afs, struct arb_ioc_generation *g)
{
	struct arb_fs_stats s;
	int ret;

	ret = arb_fs_get_stats(afs->fs, &s);
	if (ret)
		return ret;
	g->generation = s.generation;
	g->state = state_flags(&s);
	g->error = (uint32_t)-s.error;
	return 0;
}

static int ioc_history(struct afs *afs, struct arb_ioc_history *h)
{
	struct arb_history_info hi[ARB_IOC_HISTORY_MAX];
	struct arb_fs_usage u;
	int n, ret;

	n = arb_fs_history(afs->fs, hi, ARB_IOC_HISTORY_MAX);
	if (n < 0)
		return n;
	if (n > ARB_IOC_HISTORY_MAX)
		n = ARB_IOC_HISTORY_MAX;
	h->nr = (uint32_t)n;
	for (int i = 0; i < n; i++) {
		h->e[i].generation = hi[i].generation;
		h->e[i].time_sec = (uint64_t)hi[i].time.tv_sec;
		h->e[i].time_nsec = (uint32_t)hi[i].time.tv_nsec;
	}
	ret = arb_fs_usage(afs->fs, &u);
	if (!ret)
		h->kept_bytes = u.history;
	return ret;
}

static int ioc_sync(struct afs *afs, const struct arb_ioc_sync *in,
		    struct arb_ioc_sync *out)
{
	struct arb_fs_stats s;
	uint64_t gen;
	int ret;

	if (in->flags)
		return -EINVAL;
	ret = arb_fs_get_stats(afs->fs, &s);
	if (ret)
		return ret;
	ret = arb_fs_commit(afs->fs, &gen);
	out->generation = gen;
	if (ret) {
		afs_log(LOG_ERR, "sync requested by ioctl: %s", strerror(-ret));
		return ret;
	}
	out->committed = out->generation != s.generation;
	return 0;
}

static int ioc_usage(struct afs *afs, struct arb_ioc_usage *u)
{
	struct arb_fs_usage fu;
	int ret;

	ret = arb_fs_usage(afs->fs, &fu);
	if (ret)
		return ret;
	u->generation = fu.generation;
	u->total = fu.total;
	u->system = fu.system;
	u->data = fu.data;
	u->metadata = fu.metadata;
	u->uncommitted = fu.uncommitted;
	u->pinned = fu.pinned;
	u->free = fu.free;
	u->reserve = fu.reserve;
	u->delayed = fu.delayed;
	u->available = fu.available;
	u->host_bytes = fu.host_bytes;
	u->trimmed = fu.trimmed;
	u->history = fu.history;
	u->data_logical = fu.data_logical;
	u->compressed = fu.compressed;
	u->compressed_logical = fu.compressed_logical;
	u->compressed_extents = fu.compressed_extents;
	return 0;
}

static int ioc_info(struct afs *afs, struct arb_ioc_info *o)
{
	struct arb_fs_info fi;
	int ret = arb_fs_info(afs->fs, &fi);

	if (ret)
		return ret;
	memcpy(o->uuid, fi.uuid, sizeof(o->uuid));
	memcpy(o->fs_tree_uuid, fi.fs_tree_uuid, sizeof(o->fs_tree_uuid));
	o->total_bytes = fi.total_bytes;
	o->generation = fi.generation;
	o->nodesize = fi.nodesize;
	o->sectorsize = fi.sectorsize;
	o->format_version = fi.version;
	o->meta_copies = fi.meta_copies;
	o->incompat = fi.incompat;
	o->compat = fi.compat;
	o->ro_compat = fi.ro_compat;
	o->readonly = fi.readonly;
	memcpy(o->label, fi.label, sizeof(o->label));
	o->label[sizeof(o->label) - 1] = '\0';
	return 0;
}

static int ioc_set_label(struct afs *afs, const void *in_buf)
{
	struct arb_ioc_info in;

	memcpy(&in, in_buf, sizeof(in));
	if (!memchr(in.label, '\0', sizeof(in.label)))
		return -EINVAL;
	return arb_fs_set_label(afs->fs, in.label);
}

/* FITRIM: replies itself on success (0) */
static int ioc_trim(struct afs *afs, fuse_req_t req, const void *in_buf)
{
	struct fstrim_range r;
	uint64_t trimmed = 0;
	int ret;

	memcpy(&r, in_buf, sizeof(r));
	ret = arb_fs_trim(afs->fs, r.start, r.len, r.minlen, &trimmed);
	if (ret)
		return ret;
	r.len = trimmed;
	fuse_reply_ioctl(req, 0, &r, sizeof(r));
	return 0;
}

static uint64_t minus(uint64_t a, uint64_t b)
{
	return a > b ? a - b : 0;
}

static int ioc_stats(struct afs *afs, struct arb_ioc_stats *st)
{
	struct arb_fs_stats s, b;
	uint64_t start;
	int ret;

	ret = arb_fs_get_stats(afs->fs, &s);
	if (ret)
		return ret;
	pthread_mutex_lock(&afs->stats_lock);
	b = afs->stats_base;
	start = afs->stats_start_ns;
	pthread_mutex_unlock(&afs->stats_lock);

	st->state = state_flags(&s);
	st->error = (uint32_t)-s.error;
	st->elapsed_ns = arb_mono_ns() - start;
	st->generation = s.generation;
	st->commits = minus(s.commits, b.commits);
	st->commit_ns = minus(s.commit_ns, b.commit_ns);
	st->cache_hits = minus(s.cache_hits, b.cache_hits);
	st->cache_misses = minus(s.cache_misses, b.cache_misses);
	st->cache_bytes = s.cache_bytes;
	st->meta_copies = s.meta_copies;
	st->nodes_healed = s.nodes_healed;
	st->nodes_unrecoverable = s.nodes_unrecoverable;
	for (int i = 0; i < 4; i++)
		st->commit_phase_ns[i] =
			minus(s.commit_phase_ns[i], b.commit_phase_ns[i]);
	st->fsyncs = minus(s.fsyncs, b.fsyncs);
	st->fsync_commits = minus(s.fsync_commits, b.fsync_commits);
	st->fsync_joined = minus(s.fsync_joined, b.fsync_joined);
	st->fsync_durable = minus(s.fsync_durable, b.fsync_durable);
	st->uring_requests = afs_uring_requests();
	st->uring_threads = afs_uring_threads();
	st->uring_starved = afs_uring_starved();
	st->commits_two_flush = minus(s.commits_two_flush, b.commits_two_flush);
	st->flushes_behind = minus(s.flushes_behind, b.flushes_behind);
	st->image_bytes_read_direct =
		minus(s.bytes_read_direct, b.bytes_read_direct);
	st->fsync_dirty_limit = afs->syncmode.max_bytes_fd >= 0 ?
		strtoull(afs->syncmode.low, NULL, 10) : 0;
	st->fsync_dirty_lowered = atomic_load(&afs->syncmode.nr_lowered);
	st->cloned_bytes = minus(s.cloned_bytes, b.cloned_bytes);
	st->deduped_bytes = minus(s.deduped_bytes, b.deduped_bytes);
	st->compressed_extents =
		minus(s.compressed_extents, b.compressed_extents);
	st->compressed_ram_bytes =
		minus(s.compressed_ram_bytes, b.compressed_ram_bytes);
	st->compressed_stored_bytes =
		minus(s.compressed_stored_bytes, b.compressed_stored_bytes);
	st->compressed_early_bytes =
		minus(s.compressed_early_bytes, b.compressed_early_bytes);
	for (int i = 0; i < 4; i++) {
		st->image_bytes_written[i] =
			minus(s.bytes_written[i], b.bytes_written[i]);
		st->image_bytes_read[i] = minus(s.bytes_read[i], b.bytes_read[i]);
	}
	st->user_bytes_written =
		minus(s.user_bytes_written, b.user_bytes_written);
	st->user_bytes_read = atomic_load_explicit(&afs->user_bytes_read,
						   memory_order_relaxed);
	st->nr_ops = ARB_IOC_OP_NR;
	for (int i = 0; i < ARB_IOC_OP_NR; i++) {
		struct afs_op_counter *c = &afs->ops[i];

		st->ops[i].count =
			atomic_load_explicit(&c->count, memory_order_relaxed);
		st->ops[i].errors =
			atomic_load_explicit(&c->errors, memory_order_relaxed);
		st->ops[i].total_ns =
			atomic_load_explicit(&c->total_ns, memory_order_relaxed);
		st->ops[i].max_ns =
			atomic_load_explicit(&c->max_ns, memory_order_relaxed);
	}
	return 0;
}

/* Requests running meanwhile land before or after the reset, some of
 * their counters on either side: good enough for a profile. */
static int ioc_reset_stats(struct afs *afs)
{
	struct arb_fs_stats s;
	int ret;

	ret = arb_fs_get_stats(afs->fs, &s);
	if (ret)
		return ret;
	pthread_mutex_lock(&afs->stats_lock);
	afs->stats_base = s;
	afs->stats_start_ns = arb_mono_ns();
	for (int i = 0; i < ARB_IOC_OP_NR; i++) {
		struct afs_op_counter *c = &afs->ops[i];

		atomic_store_explicit(&c->count, 0, memory_order_relaxed);
		atomic_store_explicit(&c->errors, 0, memory_order_relaxed);
		atomic_store_explicit(&c->total_ns, 0, memory_order_relaxed);
		atomic_store_explicit(&c->max_ns, 0, memory_order_relaxed);
	}
	atomic_store_explicit(&afs->user_bytes_read, 0, memory_order_relaxed);
	pthread_mutex_unlock(&afs->stats_lock);
	return 0;
}

/* Reply with the struct in buf (size bytes), its header filled in. */
/* ---- resize ------------------------------------------------------------ */

static int ioc_resize(struct afs *afs, const struct arb_ioc_resize *in,
		      struct arb_ioc_resize *out)
{
	struct arb_fs_stats st;
	const char *why = NULL;
	int ret;

	if (in->flags)
		return -EINVAL;
	ret = arb_fs_resize(afs->fs, in->new_size, &why);
	if (arb_fs_get_stats(afs->fs, &st) == 0)
		out->total = st.total_bytes;
	if (ret && why)
		snprintf(out->why, sizeof(out->why), "%s", why);
	/* a failed resize still answers with the struct (why, total) */
	return ret;
}

/* ---- scrub ------------------------------------------------------------- */

/* each problem the scrub reports: logged, and the first ones kept */
static void scrub_line(void *arg, const char *line)
{
	struct afs *afs = arg;

	afs_log(LOG_WARNING, "scrub: %s", line);
	pthread_mutex_lock(&afs->scrub_lock);
	if (afs->scrub_problems < ARB_IOC_SCRUB_LINES)
		snprintf(afs->scrub_lines[afs->scrub_problems],
			 ARB_IOC_SCRUB_LINE_LEN, "%s", line);
	afs->scrub_problems++;
	pthread_mutex_unlock(&afs->scrub_lock);
}

static void *scrub_thread(void *arg)
{
	struct afs *afs = arg;
	int ret;

	ret = arb_fs_scrub(afs->fs, &afs->scrub_stats, scrub_line, afs,
			   &afs->scrub_cancel);
	pthread_mutex_lock(&afs->scrub_lock);
	afs->scrub_end_ns = arb_mono_ns();
	afs->scrub_error = -ret;
	afs->scrub_state = ret == -ECANCELED ? ARB_IOC_SCRUB_CANCELLED
			   : ret		? ARB_IOC_SCRUB_FAILED
						: ARB_IOC_SCRUB_FINISHED;
	pthread_mutex_unlock(&afs->scrub_lock);
	afs_log(LOG_INFO, "scrub %s: %llu tree nodes, %llu data sectors, "
			  "%llu corrected, %llu uncorrectable",
		ret == -ECANCELED ? "cancelled" : ret ? "failed" : "finished",
		(unsigned long long)afs->scrub_stats.nodes_checked,
		(unsigned long long)afs->scrub_stats.data_sectors_checked,
		(unsigned long long)afs->scrub_stats.nodes_corrected,
		(unsigned long long)(afs->scrub_stats.nodes_uncorrectable +
				     afs->scrub_stats.data_uncorrectable));
	return NULL;
}

static int ioc_scrub_start(struct afs *afs, const struct arb_ioc_scrub *in)
{
	int ret = 0;

	if (in->flags)
		return -EINVAL;
	if (afs->readonly)
		return -EROFS;
	pthread_mutex_lock(&afs->scrub_lock);
	if (afs->scrub_state == ARB_IOC_SCRUB_RUNNING) {
		ret = -EBUSY;
		goto out;
	}
	if (afs->scrub_joinable) {
		pthread_join(afs->scrub_thread, NULL);
		afs->scrub_joinable = false;
	}
	memset(afs->scrub_lines, 0, sizeof(afs->scrub_lines));
	afs->scrub_problems = 0;
	afs->scrub_error = 0;
	__atomic_store_n(&afs->scrub_cancel, false, __ATOMIC_RELAXED);
	afs->scrub_start_ns = arb_mono_ns();
	afs->scrub_end_ns = 0;
	afs->scrub_state = ARB_IOC_SCRUB_RUNNING;
	ret = -pthread_create(&afs->scrub_thread, NULL, scrub_thread, afs);
	if (ret)
		afs->scrub_state = ARB_IOC_SCRUB_IDLE;
	else
		afs->scrub_joinable = true;
out:
	pthread_mutex_unlock(&afs->scrub_lock);
	return ret;
}

static int ioc_scrub_status(struct afs *afs, struct arb_ioc_scrub *o)
{
	struct arb_scrub_stats st;
	uint32_t state;

	pthread_mutex_lock(&afs->scrub_lock);
	state = afs->scrub_state;
	o->state = state;
	o->error = (uint32_t)afs->scrub_error;
	o->elapsed_ns = state == ARB_IOC_SCRUB_IDLE ? 0
			: afs->scrub_end_ns ? afs->scrub_end_ns - afs->scrub_start_ns
					    : arb_mono_ns() - afs->scrub_start_ns;
	o->nr_problems = afs->scrub_problems;
	o->nr_lines = afs->scrub_problems < ARB_IOC_SCRUB_LINES
			      ? (uint32_t)afs->scrub_problems
			      : ARB_IOC_SCRUB_LINES;
	memcpy(o->lines, afs->scrub_lines, sizeof(o->lines));
	pthread_mutex_unlock(&afs->scrub_lock);
	if (state == ARB_IOC_SCRUB_IDLE)
		return 0;
	arb_fs_scrub_snapshot(afs->fs, &afs->scrub_stats, &st);
	o->total_bytes = st.total_bytes;
	o->bytes_checked = st.bytes_checked;
	o->position = st.position;
	o->nodes_checked = st.nodes_checked;
	o->nodes_corrected = st.nodes_corrected;
	o->nodes_uncorrectable = st.nodes_uncorrectable;
	o->data_sectors_checked = st.data_sectors_checked;
	o->data_uncorrectable = st.data_uncorrectable;
	o->data_no_csum = st.data_no_csum;
	o->csum_errors = st.csum_errors;
	o->read_errors = st.read_errors;
	o->files_affected = st.files_affected;
	return 0;
}

static int ioc_scrub_cancel(struct afs *afs)
{
	int ret = 0;

	pthread_mutex_lock(&afs->scrub_lock);
	if (afs->scrub_state != ARB_IOC_SCRUB_RUNNING)
		ret = -ENOENT;
	else
		__atomic_store_n(&afs->scrub_cancel, true, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&afs->scrub_lock);
	return ret;
}

void afs_scrub_stop(struct afs *afs)
{
	bool join;

	pthread_mutex_lock(&afs->scrub_lock);
	__atomic_store_n(&afs->scrub_cancel, true, __ATOMIC_RELAXED);
	join = afs->scrub_joinable;
	afs->scrub_joinable = false;
	pthread_mutex_unlock(&afs->scrub_lock);
	if (join)
		pthread_join(afs->scrub_thread, NULL);
}

/* ---- online check -------------------------------------------------------- */

/* most problem lines one check writes to the log */
#define CHECK_LOG_MAX 1000

static void *check_thread(void *arg)
{
	struct afs *afs = arg;
	struct arb_check_result r = { 0 };
	char *text = NULL;
	size_t len = 0, n = 0;
	FILE *mem;
	int ret;

	mem = open_memstream(&text, &len);
	ret = mem ? arb_fs_check_online(afs->fs, &r, mem, &afs->check_oc,
					&afs->check_cancel)
		  : -ENOMEM;
	if (mem)
		fclose(mem);
	pthread_mutex_lock(&afs->check_lock);
	for (char *p = text, *nl; ret != -ECANCELED && p && *p; p = nl + 1) {
		nl = strchr(p, '\n');
		if (!nl)
			nl = p + strlen(p);
		if (n < ARB_IOC_CHECK_LINES)
			snprintf(afs->check_lines[n], ARB_IOC_CHECK_LINE_LEN,
				 "%.*s", (int)(nl - p), p);
		if (n < CHECK_LOG_MAX)
			afs_log(LOG_WARNING, "check: %.*s", (int)(nl - p), p);
		n++;
		if (!*nl)
			break;
	}
	afs->check_end_ns = arb_mono_ns();
	afs->check_nodes = r.nodes;
	afs->check_items = r.items;
	afs->check_sectors = r.sectors;
	afs->check_problems = r.nr;
	if (ret == -ECANCELED) {
		afs->check_state = ARB_IOC_CHECK_CANCELLED;
		afs->check_error = __atomic_load_n(&afs->check_oc.out_of_space,
						   __ATOMIC_RELAXED)
					   ? ENOSPC
					   : ECANCELED;
	} else if (ret && ret != -EUCLEAN) {
		afs->check_state = ARB_IOC_CHECK_FAILED;
		afs->check_error = -ret;
	} else {
		afs->check_state = ARB_IOC_CHECK_FINISHED;
		afs->check_error = 0;
	}
	pthread_mutex_unlock(&afs->check_lock);
	if (ret == -ECANCELED || (ret && ret != -EUCLEAN))
		afs_log(ret == -ECANCELED ? LOG_INFO : LOG_ERR,
			"check of generation %llu %s: %s",
			(unsigned long long)afs->check_oc.generation,
			ret == -ECANCELED ? "cancelled" : "failed",
			strerror(afs->check_error));
	else
		afs_log(r.nr ? LOG_WARNING : LOG_INFO,
			"check of generation %llu: %s, %llu nodes, %llu items, "
			"%llu data sectors, %zu problem%s",
			(unsigned long long)afs->check_oc.generation,
			r.nr ? "ERRORS" : "clean", (unsigned long long)r.nodes,
			(unsigned long long)r.items,
			(unsigned long long)r.sectors, r.nr,
			r.nr == 1 ? "" : "s");
	arb_check_result_free(&r);
	free(text);
	return NULL;
}

static int ioc_check_start(struct afs *afs, const struct arb_ioc_check *in)
{
	int ret = 0;

	if (in->flags)
		return -EINVAL;
	pthread_mutex_lock(&afs->check_lock);
	if (afs->check_state == ARB_IOC_CHECK_RUNNING) {
		ret = -EBUSY;
		goto out;
	}
	if (afs->check_joinable) {
		pthread_join(afs->check_thread, NULL);
		afs->check_joinable = false;
	}
	memset(afs->check_lines, 0, sizeof(afs->check_lines));
	afs->check_nodes = afs->check_items = afs->check_sectors = 0;
	afs->check_problems = 0;
	afs->check_error = 0;
	__atomic_store_n(&afs->check_oc.generation, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&afs->check_oc.bytes_used, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&afs->check_oc.bytes_read, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&afs->check_cancel, false, __ATOMIC_RELAXED);
	afs->check_start_ns = arb_mono_ns();
	afs->check_end_ns = 0;
	afs->check_state = ARB_IOC_CHECK_RUNNING;
	ret = -pthread_create(&afs->check_thread, NULL, check_thread, afs);
	if (ret)
		afs->check_state = ARB_IOC_CHECK_IDLE;
	else
		afs->check_joinable = true;
out:
	pthread_mutex_unlock(&afs->check_lock);
	return ret;
}

static int ioc_check_status(struct afs *afs, struct arb_ioc_check *o)
{
	pthread_mutex_lock(&afs->check_lock);
	o->state = afs->check_state;
	o->error = (uint32_t)afs->check_error;
	o->elapsed_ns = o->state == ARB_IOC_CHECK_IDLE ? 0
			: afs->check_end_ns
				? afs->check_end_ns - afs->check_start_ns
				: arb_mono_ns() - afs->check_start_ns;
	o->generation = __atomic_load_n(&afs->check_oc.generation,
					__ATOMIC_RELAXED);
	o->bytes_used = __atomic_load_n(&afs->check_oc.bytes_used,
					__ATOMIC_RELAXED);
	o->bytes_read = __atomic_load_n(&afs->check_oc.bytes_read,
					__ATOMIC_RELAXED);
	o->nodes = afs->check_nodes;
	o->items = afs->check_items;
	o->sectors = afs->check_sectors;
	o->nr_problems = afs->check_problems;
	o->nr_lines = afs->check_problems < ARB_IOC_CHECK_LINES
			      ? (uint32_t)afs->check_problems
			      : ARB_IOC_CHECK_LINES;
	memcpy(o->lines, afs->check_lines, sizeof(o->lines));
	pthread_mutex_unlock(&afs->check_lock);
	return 0;
}

static int ioc_check_cancel(struct afs *afs)
{
	int ret = 0;

	pthread_mutex_lock(&afs->check_lock);
	if (afs->check_state != ARB_IOC_CHECK_RUNNING)
		ret = -ENOENT;
	else
		__atomic_store_n(&afs->check_cancel, true, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&afs->check_lock);
	return ret;
}

void afs_check_stop(struct afs *afs)
{
	bool join;

	pthread_mutex_lock(&afs->check_lock);
	__atomic_store_n(&afs->check_cancel, true, __ATOMIC_RELAXED);
	join = afs->check_joinable;
	afs->check_joinable = false;
	pthread_mutex_unlock(&afs->check_lock);
	if (join)
		pthread_join(afs->check_thread, NULL);
}

static void reply_struct(fuse_req_t req, void *buf, size_t size)
{
	uint32_t hdr[2] = { (uint32_t)size, ARB_IOC_VERSION };

	memcpy(buf, hdr, sizeof(hdr));
	fuse_reply_ioctl(req, 0, buf, size);
}

/* Bytes an ioctl sends back, or -ENOTTY for a number we do not know. */
static ssize_t ioc_out_size(unsigned int cmd)
{
	switch (cmd) {
	case ARB_IOC_GET_GENERATION:
		return sizeof(struct arb_ioc_generation);
	case ARB_IOC_SYNC:
		return sizeof(struct arb_ioc_sync);
	case ARB_IOC_GET_USAGE:
		return sizeof(struct arb_ioc_usage);
	case ARB_IOC_GET_STATS:
		return sizeof(struct arb_ioc_stats);
	case ARB_IOC_RESET_STATS:
	case ARB_IOC_SCRUB_CANCEL:
	case ARB_IOC_CHECK_CANCEL:
		return 0;
	case ARB_IOC_CHECK_START:
	case ARB_IOC_CHECK_STATUS:
		return sizeof(struct arb_ioc_check);
	case ARB_IOC_RESIZE:
		return sizeof(struct arb_ioc_resize);
	case ARB_IOC_SCRUB_START:
	case ARB_IOC_SCRUB_STATUS:
		return sizeof(struct arb_ioc_scrub);
	case FITRIM:
		return sizeof(struct fstrim_range);
	case ARB_IOC_GET_INFO:
		return sizeof(struct arb_ioc_info);
	case ARB_IOC_SET_LABEL:
		return 0;
	case ARB_IOC_GET_HISTORY:
		return sizeof(struct arb_ioc_history);
	}
	return -ENOTTY;
}

void afs_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
	       struct fuse_file_info *fi, unsigned flags, const void *in_buf,
	       size_t in_bufsz, size_t out_bufsz)
{
	struct afs *afs = fuse_req_userdata(req);
	union {
		struct arb_ioc_generation g;
		struct arb_ioc_sync s;
		struct arb_ioc_usage u;
		struct arb_ioc_stats st;
		struct arb_ioc_resize r;
		struct arb_ioc_scrub sc;
		struct arb_ioc_check ck;
		struct arb_ioc_info in;
		struct arb_ioc_history h;
	} out;
	union {
		struct arb_ioc_sync s;
		struct arb_ioc_resize r;
		struct arb_ioc_scrub sc;
		struct arb_ioc_check ck;
	} in;
	ssize_t size = ioc_out_size(cmd);
	int ret;

	(void)fi;
	if (cmd == ARB_IOC_SET_LABEL) {
		/* the struct comes in, nothing goes out */
		ret = !req_privileged(req) ? -EPERM
		      : in_bufsz < sizeof(struct arb_ioc_info)
			      ? -EINVAL
			      : ioc_set_label(afs, in_buf);
		if (ret)
			goto out_err;
		fuse_reply_ioctl(req, 0, NULL, 0);
		return;
	}
	if (cmd == FS_IOC_SHUTDOWN) {
		if (!req_privileged(req)) {
			ret = -EPERM;
			goto out_err;
		}
		afs_shutdown_ioctl(req, arg, in_buf, in_bufsz);
		return;
	}
	/* shut down: only the reports of the state answer (shutdown.c) */
	if (atomic_load(&afs->shutdown) && cmd != ARB_IOC_GET_GENERATION &&
	    cmd != ARB_IOC_GET_STATS && cmd != ARB_IOC_GET_USAGE &&
	    cmd != ARB_IOC_GET_HISTORY &&
	    cmd != ARB_IOC_SCRUB_STATUS && cmd != ARB_IOC_CHECK_STATUS) {
		ret = -EIO;
		goto out_err;
	}
	/* chattr/lsattr (iflags.c) */
	if (afs_iflags_ioctl(req, ino, cmd, in_buf, in_bufsz, out_bufsz))
		return;
	/* subvolumes and snapshots (subvol.c) */
	if (afs_subvol_ioctl(req, ino, cmd, in_buf, in_bufsz, out_bufsz))
		return;
	/* deduplication (reflink.c) */
	if (afs_reflink_ioctl(req, ino, cmd, in_buf, in_bufsz, out_bufsz))
		return;
	/* find-new and diff (diff.c) */
	if (afs_diff_ioctl(req, ino, cmd, in_buf, in_bufsz, out_bufsz))
		return;
	/* send streams (sendrecv.c) */
	if (afs_send_ioctl(req, ino, cmd, in_buf, in_bufsz, out_bufsz))
		return;
	/* the structs have the same layout for 32-bit callers (every __u64
	 * at a multiple of 8): FUSE_IOCTL_COMPAT needs nothing of its own */
	(void)flags;
	if (size < 0) {
		ret = (int)size;
		goto out_err;
	}
	/* the kernel sizes the buffers from the number: this is a check */
	if (out_bufsz < (size_t)size) {
		ret = -EINVAL;
		goto out_err;
	}
	memset(&out, 0, sizeof(out));
	switch (cmd) {
	case FITRIM:
		/* fstrim(8) on the mount point: the reply is the struct itself,
		 * len = bytes given back */
		if (in_bufsz < sizeof(struct fstrim_range)) {
			ret = -EINVAL;
			break;
		}
		if (!req_privileged(req)) {
			ret = -EPERM;
			break;
		}
		ret = ioc_trim(afs, req, in_buf);
		if (!ret)
			return;
		break;
	case ARB_IOC_GET_GENERATION:
		ret = ioc_generation(afs, &out.g);
		break;
	case ARB_IOC_GET_INFO:
		ret = ioc_info(afs, &out.in);
		break;
	case ARB_IOC_SYNC:
		if (in_bufsz < sizeof(in.s)) {
			ret = -EINVAL;
			break;
		}
		if (!req_privileged(req)) {
			ret = -EPERM;
			break;
		}
		/* in_buf has no alignment promise */
		memcpy(&in.s, in_buf, sizeof(in.s));
		ret = ioc_sync(afs, &in.s, &out.s);
		break;
	case ARB_IOC_RESIZE:
		if (in_bufsz < sizeof(in.r)) {
			ret = -EINVAL;
			break;
		}
		if (!req_privileged(req)) {
			ret = -EPERM;
			break;
		}
		memcpy(&in.r, in_buf, sizeof(in.r));
		ret = ioc_resize(afs, &in.r, &out.r);
		if (ret && ret != -EINVAL) {
			/* the reason travels in the struct */
			out.r.error = (uint32_t)-ret;
			ret = 0;
		}
		break;
	case ARB_IOC_SCRUB_START:
		if (in_bufsz < sizeof(in.sc)) {
			ret = -EINVAL;
			break;
		}
		if (!req_privileged(req)) {
			ret = -EPERM;
			break;
		}
		memcpy(&in.sc, in_buf, sizeof(in.sc));
		ret = ioc_scrub_start(afs, &in.sc);
		if (!ret)
			ret = ioc_scrub_status(afs, &out.sc);
		break;
	case ARB_IOC_SCRUB_STATUS:
		ret = ioc_scrub_status(afs, &out.sc);
		break;
	case ARB_IOC_SCRUB_CANCEL:
		ret = req_privileged(req) ? ioc_scrub_cancel(afs) : -EPERM;
		if (!ret) {
			fuse_reply_ioctl(req, 0, NULL, 0);
			return;
		}
		break;
	case ARB_IOC_CHECK_START:
		if (in_bufsz < sizeof(in.ck)) {
			ret = -EINVAL;
			break;
		}
		if (!req_privileged(req)) {
			ret = -EPERM;
			break;
		}
		memcpy(&in.ck, in_buf, sizeof(in.ck));
		ret = ioc_check_start(afs, &in.ck);
		if (!ret)
			ret = ioc_check_status(afs, &out.ck);
		break;
	case ARB_IOC_CHECK_STATUS:
		ret = ioc_check_status(afs, &out.ck);
		break;
	case ARB_IOC_CHECK_CANCEL:
		ret = req_privileged(req) ? ioc_check_cancel(afs) : -EPERM;
		if (!ret) {
			fuse_reply_ioctl(req, 0, NULL, 0);
			return;
		}
		break;
	case ARB_IOC_GET_USAGE:
		ret = ioc_usage(afs, &out.u);
		break;
	case ARB_IOC_GET_HISTORY:
		ret = ioc_history(afs, &out.h);
		break;
	case ARB_IOC_GET_STATS:
		ret = ioc_stats(afs, &out.st);
		break;
	case ARB_IOC_RESET_STATS:
		ret = req_privileged(req) ? ioc_reset_stats(afs) : -EPERM;
		if (!ret) {
			fuse_reply_ioctl(req, 0, NULL, 0);
			return;
		}
		break;
	default:
		ret = -ENOTTY;
		break;
	}
	if (ret)
		goto out_err;
	reply_struct(req, &out, (size_t)size);
	return;
out_err:
	afs_op_error(afs);
	fuse_reply_err(req, -ret);
}
