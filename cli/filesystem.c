/* SPDX-License-Identifier: MIT */
/*
 * filesystem.c - "arbor filesystem CMD [--json] PATH": the online commands,
 * answered by the daemon of the mount PATH is on through the ioctls of
 * <arbor/ioctl.h>.  Only the public header: no library call.
 *
 *   stats       FUSE requests by kind (count, errors, mean and longest
 *               time in the daemon), node cache, commits, bytes written to
 *               and read from the image by kind, write amplification;
 *               --reset (root) starts the counters from zero afterwards
 *   usage       total, data, metadata, free, reserve, ...
 *   sync        commit now (root); prints the committed generation
 *   generation  the generation of the last commit
 *
 * Human-readable by default; --json prints one JSON object for scripts.
 * Exit status: 0 ok, 1 failed, 2 bad usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <arbor/ioctl.h>

#include "arbor_cli.h"
#include "arbor_help.h"

/* f_type of every FUSE mount */
#define FUSE_SUPER_MAGIC 0x65735546

/* the filesystem part of docs/man/arbor.help */
static void fs_usage(FILE *f)
{
	fputs(ARBOR_HELP_FILESYSTEM, f);
}

/* Open PATH and make sure it is on a FUSE mount; -1 with a message. */
int cli_open_mount(const char *path)
{
	struct statfs sf;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		fprintf(stderr, "arbor: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (fstatfs(fd, &sf) == 0 && sf.f_type != FUSE_SUPER_MAGIC) {
		fprintf(stderr, "arbor: %s: not on a mounted arborfs\n", path);
		close(fd);
		return -1;
	}
	return fd;
}

/* ioctl with the messages every command shares; 0 or -1 */
int cli_ioctl(int fd, const char *path, unsigned long cmd, void *arg,
		    const char *what)
{
	if (ioctl(fd, cmd, arg) == 0)
		return 0;
	switch (errno) {
	case ENOTTY:
	case ENOSYS:
		fprintf(stderr,
			"arbor: %s: not on a mounted arborfs (or its daemon "
			"does not know %s)\n",
			path, what);
		break;
	case EPERM:
	case EACCES:
		fprintf(stderr, "arbor: %s: %s: %s (needs root or "
				"CAP_SYS_ADMIN)\n",
			path, what, strerror(errno));
		break;
	default:
		fprintf(stderr, "arbor: %s: %s: %s\n", path, what,
			strerror(errno));
	}
	return -1;
}

/* The daemon filled at least the bytes up to the end of field f of *p? */
#define HAS_FIELD(p, f)                                                        \
	((p)->size >= offsetof(__typeof__(*(p)), f) + sizeof((p)->f))

static const char *state_name(uint64_t state)
{
	if (state & ARB_IOC_STATE_SHUTDOWN)
		return "shutdown";
	if (state & ARB_IOC_STATE_FAILED)
		return "failed";
	if (state & ARB_IOC_STATE_READONLY)
		return "ro";
	return "rw";
}

/* "12.3 MiB" */
static const char *human(uint64_t v, char *buf, size_t size)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB",
					    "PiB", "EiB" };
	double d = (double)v;
	int i = 0;

	while (d >= 1024 && i < 6) {
		d /= 1024;
		i++;
	}
	if (i == 0)
		snprintf(buf, size, "%" PRIu64 " B", v);
	else
		snprintf(buf, size, "%.2f %s", d, unit[i]);
	return buf;
}

/* ---- generation -------------------------------------------------------- */

static int cmd_generation(int fd, const char *path, bool json)
{
	struct arb_ioc_generation g;

	memset(&g, 0, sizeof(g));
	if (cli_ioctl(fd, path, ARB_IOC_GET_GENERATION, &g, "generation"))
		return 1;
	if (json) {
		printf("{\"generation\": %llu, \"state\": \"%s\", "
		       "\"error\": %u}\n",
		       (unsigned long long)g.generation, state_name(g.state),
		       g.error);
		return 0;
	}
	printf("generation %llu\n", (unsigned long long)g.generation);
	if (g.state & ARB_IOC_STATE_SHUTDOWN)
		printf("state      shut down: every request fails with EIO "
		       "until the next mount\n");
	else if (g.state & ARB_IOC_STATE_FAILED)
		printf("state      failed (%s): read-only\n", strerror((int)g.error));
	else if (g.state & ARB_IOC_STATE_READONLY)
		printf("state      read-only\n");
	return 0;
}

/* ---- sync -------------------------------------------------------------- */

static int cmd_sync(int fd, const char *path, bool json)
{
	struct arb_ioc_sync s;

	/*
	 * The kernel's dirty pages first (writeback cache), then the
	 * daemon's commit.  syncfs also reports, once, a writeback that
	 * failed before (the filesystem was full) and that no one has seen
	 * yet, however much space is free now: that is news of an earlier
	 * write, not a failure of this sync, which the commit below decides.
	 */
	if (syncfs(fd) < 0)
		fprintf(stderr,
			"arbor: %s: warning: an earlier writeback failed "
			"(%s), which the kernel reports once; committing "
			"what is stored now\n",
			path, strerror(errno));
	memset(&s, 0, sizeof(s));
	if (cli_ioctl(fd, path, ARB_IOC_SYNC, &s, "sync"))
		return 1;
	if (json)
		printf("{\"generation\": %llu, \"committed\": %s}\n",
		       (unsigned long long)s.generation,
		       s.committed ? "true" : "false");
	else
		printf("generation %llu%s\n", (unsigned long long)s.generation,
		       s.committed ? "" : " (nothing to commit)");
	return 0;
}

/* ---- usage ------------------------------------------------------------- */

static int cmd_usage(int fd, const char *path, bool json)
{
	static const struct {
		const char *name, *what;
	} rows[] = {
		{ "total", "size of the image" },
		{ "data", "file data, as of the last commit" },
		{ "metadata", "tree nodes, as of the last commit" },
		{ "system", "superblocks, fixed" },
		{ "uncommitted", "allocated since the last commit" },
		{ "pinned", "freed, waiting for a commit" },
		{ "free", "not allocated" },
		{ "reserve", "part of free kept for deletes" },
		{ "delayed", "written, not yet allocated" },
		{ "available", "for ordinary writes (df)" },
		{ "host", "taken on the host by the image file" },
		{ "trimmed", "given back to the host since mount (discard)" },
		{ "history", "part of free kept to recover recent generations" },
	};
	struct arb_ioc_usage u;
	char b[32], b2[32];

	memset(&u, 0, sizeof(u));
	if (cli_ioctl(fd, path, ARB_IOC_GET_USAGE, &u, "usage"))
		return 1;

	const uint64_t v[] = { u.total, u.data, u.metadata, u.system,
			       u.uncommitted, u.pinned, u.free,
			       u.reserve, u.delayed, u.available,
			       u.host_bytes, u.trimmed, u.history };
	_Static_assert(sizeof(v) / sizeof(v[0]) == sizeof(rows) / sizeof(rows[0]),
		       "one value per row");
	/* version 18: file data logical against stored (compression) */
	bool logical = u.version >= 18 && HAS_FIELD(&u, compressed_extents);
	double zratio = u.data_logical ? (double)u.data / (double)u.data_logical
				       : 1.0;

	if (json) {
		printf("{\"generation\": %llu",
		       (unsigned long long)u.generation);
		for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
			printf(", \"%s\": %llu", rows[i].name,
			       (unsigned long long)v[i]);
		if (logical)
			printf(", \"data_logical\": %llu, \"data_stored\": "
			       "%llu, \"ratio\": %.6f, \"compressed\": "
			       "{\"extents\": %llu, \"logical\": %llu, "
			       "\"stored\": %llu}",
			       (unsigned long long)u.data_logical,
			       (unsigned long long)u.data, zratio,
			       (unsigned long long)u.compressed_extents,
			       (unsigned long long)u.compressed_logical,
			       (unsigned long long)u.compressed);
		printf("}\n");
		return 0;
	}
	printf("%-12s %llu\n", "generation", (unsigned long long)u.generation);
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		printf("%-12s %16llu  %12s  %s\n", rows[i].name,
		       (unsigned long long)v[i], human(v[i], b, sizeof(b)),
		       rows[i].what);
	if (logical) {
		printf("\nfile data    %16llu  %12s  logical (each data extent "
		       "once, inflated)\n",
		       (unsigned long long)u.data_logical,
		       human(u.data_logical, b, sizeof(b)));
		printf("%-12s %16llu  %12s  stored (= data)\n", "",
		       (unsigned long long)u.data, human(u.data, b, sizeof(b)));
		printf("%-12s %16.3f  %12s  stored / logical: compression, "
		       "not sharing\n", "ratio", zratio, "");
		if (u.compressed_extents)
			printf("%-12s %16llu  %12s  in %llu compressed "
			       "extents, stored in %s\n",
			       "compressed",
			       (unsigned long long)u.compressed_logical,
			       human(u.compressed_logical, b, sizeof(b)),
			       (unsigned long long)u.compressed_extents,
			       human(u.compressed, b2, sizeof(b2)));
	}
	return 0;
}

/* ---- stats ------------------------------------------------------------- */

static double ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0.0;
}

static const char *const io_kind[4] = { "superblock", "metadata", "data",
					"other" };

/* one line of stats_json: "NAME": {"K0": V0, "K1": V1, "K2": V2}, */
static void json_obj3(const char *name, const char *k0, uint64_t v0,
		      const char *k1, uint64_t v1, const char *k2, uint64_t v2)
{
	printf(" \"%s\": {\"%s\": %llu, \"%s\": %llu, \"%s\": %llu},\n",
	       name, k0, (unsigned long long)v0, k1, (unsigned long long)v1,
	       k2, (unsigned long long)v2);
}

static void stats_json(const struct arb_ioc_stats *st)
{
	uint64_t wsum = 0, rsum = 0;
	bool first = true;

	printf("{\"generation\": %llu, \"state\": \"%s\", \"error\": %u, "
	       "\"elapsed_s\": %.3f,\n",
	       (unsigned long long)st->generation, state_name(st->state),
	       st->error, (double)st->elapsed_ns / 1e9);
	printf(" \"ops\": {");
	for (unsigned i = 0; i < st->nr_ops && i < ARB_IOC_OPS_MAX; i++) {
		const struct arb_ioc_op_stat *o = &st->ops[i];
		const char *name = arb_ioc_op_name(i);
		char unknown[32];

		if (!o->count)
			continue;
		if (!name) {
			snprintf(unknown, sizeof(unknown), "op%u", i);
			name = unknown;
		}
		printf("%s\n  \"%s\": {\"count\": %llu, \"errors\": %llu, "
		       "\"total_ns\": %llu, \"mean_us\": %.3f, "
		       "\"max_us\": %.3f}",
		       first ? "" : ",", name, (unsigned long long)o->count,
		       (unsigned long long)o->errors,
		       (unsigned long long)o->total_ns,
		       ratio(o->total_ns, o->count) / 1e3,
		       (double)o->max_ns / 1e3);
		first = false;
	}
	printf("},\n");
	json_obj3("cache", "hits", st->cache_hits, "misses", st->cache_misses,
		  "bytes", st->cache_bytes);
	if (st->version >= 2)
		json_obj3("metadata", "copies", st->meta_copies, "healed",
			  st->nodes_healed, "unrecoverable",
			  st->nodes_unrecoverable);
	printf(" \"commits\": {\"count\": %llu, \"total_ns\": %llu, "
	       "\"mean_ms\": %.3f",
	       (unsigned long long)st->commits,
	       (unsigned long long)st->commit_ns,
	       ratio(st->commit_ns, st->commits) / 1e6);
	if (st->version >= 5)
		printf(", \"two_flush\": %llu",
		       (unsigned long long)st->commits_two_flush);
	if (st->version >= 6)
		printf(", \"flushes_behind\": %llu",
		       (unsigned long long)st->flushes_behind);
	printf("},\n");
	if (st->version >= 3) {
		printf(" \"commit_phases_ns\": {\"data\": %llu, \"tree\": %llu, "
		       "\"node_writes\": %llu, \"flushes\": %llu},\n",
		       (unsigned long long)st->commit_phase_ns[0],
		       (unsigned long long)st->commit_phase_ns[1],
		       (unsigned long long)st->commit_phase_ns[2],
		       (unsigned long long)st->commit_phase_ns[3]);
		printf(" \"fsyncs\": {\"count\": %llu, \"committed\": %llu, "
		       "\"joined\": %llu, \"nothing_to_commit\": %llu},\n",
		       (unsigned long long)st->fsyncs,
		       (unsigned long long)st->fsync_commits,
		       (unsigned long long)st->fsync_joined,
		       (unsigned long long)st->fsync_durable);
	}
	if (st->version >= 4)
		json_obj3("io_uring", "threads", st->uring_threads, "requests",
			  st->uring_requests, "starved", st->uring_starved);
	if (st->version >= 8)
		printf(" \"fsync_dirty_limit\": {\"bytes\": %llu, "
		       "\"lowered\": %llu},\n",
		       (unsigned long long)st->fsync_dirty_limit,
		       (unsigned long long)st->fsync_dirty_lowered);
	printf(" \"image_bytes_written\": {");
	for (int i = 0; i < 4; i++) {
		printf("\"%s\": %llu, ", io_kind[i],
		       (unsigned long long)st->image_bytes_written[i]);
		wsum += st->image_bytes_written[i];
	}
	printf("\"total\": %llu},\n", (unsigned long long)wsum);
	printf(" \"image_bytes_read\": {");
	for (int i = 0; i < 4; i++) {
		printf("\"%s\": %llu, ", io_kind[i],
		       (unsigned long long)st->image_bytes_read[i]);
		rsum += st->image_bytes_read[i];
	}
	printf("\"total\": %llu", (unsigned long long)rsum);
	if (st->version >= 7)
		printf(", \"direct\": %llu",
		       (unsigned long long)st->image_bytes_read_direct);
	printf("},\n");
	printf(" \"user_bytes_written\": %llu, \"user_bytes_read\": %llu,\n",
	       (unsigned long long)st->user_bytes_written,
	       (unsigned long long)st->user_bytes_read);
	if (st->version >= 13)
		printf(" \"cloned_bytes\": %llu, \"deduped_bytes\": %llu,\n",
		       (unsigned long long)st->cloned_bytes,
		       (unsigned long long)st->deduped_bytes);
	if (st->version >= 17)
		printf(" \"compressed\": {\"extents\": %llu, \"ram_bytes\": "
		       "%llu, \"stored_bytes\": %llu, \"early_bytes\": "
		       "%llu},\n",
		       (unsigned long long)st->compressed_extents,
		       (unsigned long long)st->compressed_ram_bytes,
		       (unsigned long long)st->compressed_stored_bytes,
		       (unsigned long long)st->compressed_early_bytes);
	if (st->user_bytes_written)
		printf(" \"write_amplification\": %.3f}\n",
		       ratio(wsum, st->user_bytes_written));
	else
		printf(" \"write_amplification\": null}\n");
}

static void stats_human(const char *path, const struct arb_ioc_stats *st)
{
	uint64_t wsum = 0, rsum = 0;
	char b[32];

	printf("%s: generation %llu, %s", path,
	       (unsigned long long)st->generation, state_name(st->state));
	if (st->state & ARB_IOC_STATE_FAILED)
		printf(" (%s)", strerror((int)st->error));
	printf(", counters cover %.1f s\n\n", (double)st->elapsed_ns / 1e9);

	printf("%-14s %12s %8s %12s %12s\n", "request", "count", "errors",
	       "mean (us)", "max (us)");
	for (unsigned i = 0; i < st->nr_ops && i < ARB_IOC_OPS_MAX; i++) {
		const struct arb_ioc_op_stat *o = &st->ops[i];
		const char *name = arb_ioc_op_name(i);
		char unknown[32];

		if (!o->count)
			continue;
		if (!name) {
			snprintf(unknown, sizeof(unknown), "op%u", i);
			name = unknown;
		}
		printf("%-14s %12llu %8llu %12.1f %12.1f\n", name,
		       (unsigned long long)o->count,
		       (unsigned long long)o->errors,
		       ratio(o->total_ns, o->count) / 1e3,
		       (double)o->max_ns / 1e3);
	}

	printf("\nnode cache     %llu hits, %llu misses (%.1f%% hits), %s cached\n",
	       (unsigned long long)st->cache_hits,
	       (unsigned long long)st->cache_misses,
	       100.0 * ratio(st->cache_hits,
			     st->cache_hits + st->cache_misses),
	       human(st->cache_bytes, b, sizeof(b)));
	if (st->version >= 2)
		printf("tree nodes     %llu cop%s each; %llu healed from the "
		       "other copy, %llu unrecoverable (since mount)\n",
		       (unsigned long long)st->meta_copies,
		       st->meta_copies == 1 ? "y" : "ies",
		       (unsigned long long)st->nodes_healed,
		       (unsigned long long)st->nodes_unrecoverable);
	printf("commits        %llu, mean %.2f ms",
	       (unsigned long long)st->commits,
	       ratio(st->commit_ns, st->commits) / 1e6);
	if (st->version >= 5)
		printf("; %llu with one flush, %llu with two",
		       (unsigned long long)(st->commits - st->commits_two_flush),
		       (unsigned long long)st->commits_two_flush);
	if (st->version >= 6)
		printf("; %llu flushes behind writers",
		       (unsigned long long)st->flushes_behind);
	printf("\n");
	if (st->version >= 3) {
		printf("commit phases  mean ms: data %.2f, tree %.2f, node "
		       "writes %.2f, flushes+super %.2f\n",
		       ratio(st->commit_phase_ns[0], st->commits) / 1e6,
		       ratio(st->commit_phase_ns[1], st->commits) / 1e6,
		       ratio(st->commit_phase_ns[2], st->commits) / 1e6,
		       ratio(st->commit_phase_ns[3], st->commits) / 1e6);
		printf("fsyncs         %llu: %llu committed, %llu joined a "
		       "group commit, %llu had nothing to commit\n",
		       (unsigned long long)st->fsyncs,
		       (unsigned long long)st->fsync_commits,
		       (unsigned long long)st->fsync_joined,
		       (unsigned long long)st->fsync_durable);
	}
	if (st->version >= 4) {
		if (st->uring_threads)
			printf("io_uring       %llu ring threads, %llu requests "
			       "served; %llu times a thread starved (since "
			       "mount)\n",
			       (unsigned long long)st->uring_threads,
			       (unsigned long long)st->uring_requests,
			       (unsigned long long)st->uring_starved);
		else
			printf("io_uring       off: requests come through "
			       "/dev/fuse\n");
	}
	if (st->version >= 8) {
		if (st->fsync_dirty_limit)
			printf("dirty limit    %s while fsyncs come; set %llu "
			       "times (since mount)\n",
			       human(st->fsync_dirty_limit, b, sizeof(b)),
			       (unsigned long long)st->fsync_dirty_lowered);
		else
			printf("dirty limit    the same with and without "
			       "fsyncs\n");
	}

	printf("\n%-14s %16s %16s\n", "image bytes", "written", "read");
	for (int i = 0; i < 4; i++) {
		printf("%-14s %16llu %16llu\n", io_kind[i],
		       (unsigned long long)st->image_bytes_written[i],
		       (unsigned long long)st->image_bytes_read[i]);
		wsum += st->image_bytes_written[i];
		rsum += st->image_bytes_read[i];
	}
	printf("%-14s %16llu %16llu\n", "total", (unsigned long long)wsum,
	       (unsigned long long)rsum);
	if (st->version >= 7)
		printf("%-14s %16s %16llu\n", "  past cache", "",
		       (unsigned long long)st->image_bytes_read_direct);
	printf("%-14s %16llu %16llu\n", "by users",
	       (unsigned long long)st->user_bytes_written,
	       (unsigned long long)st->user_bytes_read);
	if (st->version >= 13)
		printf("%-14s %16llu %16s\n%-14s %16llu %16s\n", "shared by cp",
		       (unsigned long long)st->cloned_bytes, "",
		       "deduplicated", (unsigned long long)st->deduped_bytes,
		       "");
	if (st->version >= 17 && st->compressed_extents)
		printf("%-14s %16llu %16s\n%-14s %16llu %16s  (%llu "
		       "extents, ratio %.2f)\n",
		       "compressed", (unsigned long long)st->compressed_ram_bytes,
		       "", "  stored as",
		       (unsigned long long)st->compressed_stored_bytes, "",
		       (unsigned long long)st->compressed_extents,
		       ratio(st->compressed_stored_bytes,
			     st->compressed_ram_bytes));
	if (st->user_bytes_written)
		printf("\nwrite amplification %.2f (image bytes written / "
		       "bytes written by users)\n",
		       ratio(wsum, st->user_bytes_written));
	else
		printf("\nwrite amplification -    (nothing written by users)\n");
}

static int cmd_stats(int fd, const char *path, bool json, bool reset)
{
	static struct arb_ioc_stats st;

	memset(&st, 0, sizeof(st));
	if (cli_ioctl(fd, path, ARB_IOC_GET_STATS, &st, "stats"))
		return 1;
	if (!HAS_FIELD(&st, ops)) {
		fprintf(stderr, "arbor: %s: short answer from the daemon\n",
			path);
		return 1;
	}
	if (json)
		stats_json(&st);
	else
		stats_human(path, &st);
	if (reset && cli_ioctl(fd, path, ARB_IOC_RESET_STATS, NULL,
			      "reset the statistics"))
		return 1;
	return 0;
}

int arbor_filesystem(int argc, char **argv)
{
	static const struct option lo[] = { { "json", 0, 0, 'j' },
					    { "reset", 0, 0, 'r' },
					    { "help", 0, 0, 'h' },
					    { 0, 0, 0, 0 } };
	bool json = false, reset = false;
	const char *cmd, *path;
	int c, fd, rc;

	if (argc < 2) {
		fs_usage(stderr);
		return 2;
	}
	cmd = argv[1];
	if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") ||
	    !strcmp(cmd, "-h")) {
		fs_usage(stdout);
		return 0;
	}
	if (!strcmp(cmd, "resize"))
		return cli_resize(argc - 1, argv + 1);
	if (!strcmp(cmd, "show") || !strcmp(cmd, "label"))
		return cli_show(argc - 1, argv + 1);
	if (!strcmp(cmd, "history"))
		return cli_history(argc - 1, argv + 1);
	if (!strcmp(cmd, "du"))
		return cli_du(argc - 1, argv + 1);
	optind = 2;
	while ((c = getopt_long(argc, argv, "jh", lo, NULL)) != -1) {
		switch (c) {
		case 'j': json = true; break;
		case 'r': reset = true; break;
		case 'h': fs_usage(stdout); return 0;
		default: fs_usage(stderr); return 2;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "arbor filesystem %s: want one PATH\n", cmd);
		fs_usage(stderr);
		return 2;
	}
	path = argv[optind];
	if (reset && strcmp(cmd, "stats")) {
		fprintf(stderr, "arbor filesystem %s: --reset is for stats\n",
			cmd);
		return 2;
	}
	if (strcmp(cmd, "stats") && strcmp(cmd, "usage") &&
	    strcmp(cmd, "sync") && strcmp(cmd, "generation")) {
		fprintf(stderr, "arbor filesystem: unknown command '%s'\n", cmd);
		fs_usage(stderr);
		return 2;
	}
	fd = cli_open_mount(path);
	if (fd < 0)
		return 1;
	if (!strcmp(cmd, "stats"))
		rc = cmd_stats(fd, path, json, reset);
	else if (!strcmp(cmd, "usage"))
		rc = cmd_usage(fd, path, json);
	else if (!strcmp(cmd, "sync"))
		rc = cmd_sync(fd, path, json);
	else
		rc = cmd_generation(fd, path, json);
	close(fd);
	return rc;
}
