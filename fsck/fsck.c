/* SPDX-License-Identifier: MIT */
/*
 * fsck.arborfs - check and repair an arborfs image, following fsck(8).
 *
 *   fsck.arborfs [-n|-y|-p] [-f] [-v] [--progress] [--memory SIZE] IMAGE
 *   fsck.arborfs --undo-repair IMAGE
 *   fsck.arborfs --list-problems
 *
 * Exit status (fsck(8)): 0 no errors, 1 errors corrected, 4 errors left
 * uncorrected, 8 operational error, 16 usage error.  An image of a newer
 * format (unknown incompatible feature flags, an item of a size this
 * version does not know) is an operational error, with -n as with -y: this
 * fsck cannot judge it, and repairing what it cannot read would destroy
 * it (a tree it cannot walk looks leaked), so nothing is written.
 *
 * Read-only by default; the library takes a shared lock on the image, so
 * an image mounted read-write (the daemon holds an exclusive lock) is
 * refused.  With -y/-p: check read-only; if something is wrong, reopen
 * read-write (exclusive lock, orphans kept), check again, repair in one
 * transaction (lib/check/fs_repair.c), then check the result read-only: the
 * exit status says what that final check found.  The engine and the table
 * of problems are in the library; this file parses arguments and prints.
 *
 * Memory: --memory SIZE (default 128 MiB) bounds the node cache (an
 * eighth of it, 4 to 64 MiB) and the checker's reference tables (the
 * rest): an image that needs more is checked in parts of its address
 * space, each re-walking the trees (docs/design/check.md, "fsck in bounded
 * memory").  On a terminal (or
 * with --progress) a progress line on stderr is updated a few times a
 * second.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "arbor/arbor.h"
#include "fsck_help.h"

#define FSCK_OK 0
#define FSCK_CORRECTED 1
#define FSCK_UNCORRECTED 4
#define FSCK_OPERROR 8
#define FSCK_USAGE 16

/* the text of docs/man/fsck.arborfs.help, which makes the man page too */
static void usage(FILE *f)
{
	fputs(FSCK_ARBORFS_HELP, f);
}

/* 0 none, 1 a line rewritten in place (terminal), 2 a line a second */
static int progress;
static const char *step = "checking";
static struct timespec last_shown;
static bool line_shown;
static uint64_t memory = 128ull << 20;

static void phase(const char *what)
{
	step = what;
	if (progress == 2)
		fprintf(stderr, "fsck.arborfs: %s\n", what);
}

static void on_progress(void *arg, const char *ph, uint64_t done,
			uint64_t total, uint64_t checked)
{
	struct timespec now;
	double dt, pct;

	(void)arg;
	clock_gettime(CLOCK_MONOTONIC, &now);
	dt = (double)(now.tv_sec - last_shown.tv_sec) +
	     (double)(now.tv_nsec - last_shown.tv_nsec) / 1e9;
	if (dt < (progress == 1 ? 0.2 : 1.0))
		return;
	last_shown = now;
	pct = total ? 100.0 * (double)done / (double)total : 0;
	if (pct > 100)
		pct = 100;
	if (progress == 1) {
		fprintf(stderr, "\r\033[K%s: %s: %5.1f%%, %llu checked", step,
			ph, pct, (unsigned long long)checked);
		line_shown = true;
	} else {
		fprintf(stderr, "fsck.arborfs: %s: %s: %.1f%%, %llu checked\n",
			step, ph, pct, (unsigned long long)checked);
	}
}

/* take the progress line off the terminal before printing */
static void progress_clear(void)
{
	if (line_shown)
		fputs("\r\033[K", stderr);
	line_shown = false;
}

static double since(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) +
	       (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

/* open the image; 0 or an fsck exit status */
static int open_image(const char *image, bool rw, struct arb_fs **fs)
{
	struct arb_fs_opts o;
	const char *why = NULL;
	int ret;

	arb_fs_opts_default(&o);
	o.readonly = !rw;
	o.commit_interval = 0;
	o.keep_orphans = true;
	/* an eighth for the node cache, the rest for the tables */
	o.cache_bytes = memory / 8;
	if (o.cache_bytes < (4u << 20))
		o.cache_bytes = 4u << 20;
	if (o.cache_bytes > (64u << 20))
		o.cache_bytes = 64u << 20;
	/* at least 1 MiB (4096 entries a part): a smaller budget would only
	 * multiply the walks */
	o.check_memory = memory > o.cache_bytes + (1u << 20)
				 ? memory - o.cache_bytes
				 : 1u << 20;
	if (progress)
		o.check_progress = on_progress;
	ret = arb_fs_open_image(image, &o, fs, &why);
	if (ret) {
		fprintf(stderr, "fsck.arborfs: %s: cannot open: %s%s\n", image,
			arb_reason(ret, why),
			ret == -EPROTONOSUPPORT
				? ": refusing to check or repair, use a newer "
				  "fsck.arborfs"
				: "");
		/* a damaged superblock or root is a filesystem error */
		return ret == -EUCLEAN || ret == -EIO ? FSCK_UNCORRECTED
						       : FSCK_OPERROR;
	}
	return 0;
}

/* check; prints the problems; 0 or an fsck exit status */
static int check(const char *image, bool rw, bool verbose, struct arb_fs **fsp,
		 struct arb_check_result *r)
{
	struct arb_fs *fs;
	char *text = NULL;
	size_t len = 0, n = 0;
	FILE *mem;
	int ret;

	ret = open_image(image, rw, &fs);
	if (ret)
		return ret;
	mem = open_memstream(&text, &len);
	if (!mem) {
		arb_fs_close(fs);
		return FSCK_OPERROR;
	}
	ret = arb_fs_check_records(fs, r, mem);
	progress_clear();
	fclose(mem);
	for (char *p = text, *nl; p && *p; p = nl + 1, n++) {
		nl = strchr(p, '\n');
		if (!nl)
			nl = p + strlen(p) - 1;
		if (verbose || n < 50)
			printf("%.*s\n", (int)(nl - p), p);
		else if (n == 50)
			printf("... (-v lists them all)\n");
	}
	free(text);
	if (ret && ret != -EUCLEAN) {
		fprintf(stderr, "fsck.arborfs: %s: check failed: %s\n", image,
			arb_reason(ret, NULL));
		arb_fs_close(fs);
		return FSCK_OPERROR;
	}
	if (fsp)
		*fsp = fs;
	else
		arb_fs_close(fs);
	return 0;
}

static size_t nfixable(const struct arb_check_result *r)
{
	size_t n = 0;

	for (size_t i = 0; i < r->nr; i++)
		n += arb_problem_fixable(r->pb[i].id);
	return n;
}

static int undo(const char *image)
{
	struct arb_dev *dev;
	const char *why = NULL;
	int ret;

	ret = arb_dev_open_file(image, false, 0, &dev);
	if (ret) {
		fprintf(stderr, "fsck.arborfs: %s: %s\n", image,
			ret == -EBUSY ? ARB_BUSY_HINT
				      : arb_reason(ret, NULL));
		return FSCK_OPERROR;
	}
	ret = arb_undo_repair(dev, stdout, &why);
	arb_dev_destroy(dev);
	if (ret) {
		fprintf(stderr, "fsck.arborfs: %s: cannot undo: %s\n", image,
			arb_reason(ret, why));
		return FSCK_OPERROR;
	}
	return FSCK_OK;
}

static void list_problems(void)
{
	for (int id = 1; id < ARB_PB_MAX; id++)
		printf("%2d %-22s %-6s %s\n", id, arb_problem_name(id),
		       arb_problem_fixable(id) ? "fix" : "report",
		       arb_problem_message(id));
}

int main(int argc, char **argv)
{
	static const struct option lo[] = { { "progress", 0, 0, 'P' },
					    { "no-progress", 0, 0, 'Q' },
					    { "memory", 1, 0, 'M' },
					    { "undo-repair", 0, 0, 'U' },
					    { "list-problems", 0, 0, 'L' },
					    { "help", 0, 0, 'h' },
					    { "version", 0, 0, 'V' },
					    { "no-wait", 0, 0, 'W' },
					    { 0, 0, 0, 0 } };
	struct arb_check_result r1 = { 0 }, r2 = { 0 }, r3 = { 0 };
	struct arb_fs *fs;
	const char *image;
	bool repair = false, verbose = false, do_undo = false;
	uint64_t fixed = 0;
	struct timespec t0;
	int c, ret, status;

	progress = isatty(STDERR_FILENO) ? 1 : 0;
	/* the library's messages under our name, each once */
	arb_log_tool("fsck.arborfs");
	/* right after an unmount the daemon may still be finishing */
	arb_dev_set_lock_wait(10000);
	while ((c = getopt_long(argc, argv, "nypfvahV", lo, NULL)) != -1) {
		switch (c) {
		case 'n': repair = false; break;
		case 'y': case 'p': case 'a': repair = true; break;
		case 'f': break;
		case 'P': progress = isatty(STDERR_FILENO) ? 1 : 2; break;
		case 'Q': progress = 0; break;
		case 'M':
			if (arb_parse_size(optarg, &memory) || !memory) {
				fprintf(stderr, "fsck.arborfs: bad --memory "
						"'%s'\n", optarg);
				return FSCK_USAGE;
			}
			break;
		case 'U': do_undo = true; break;
		case 'W': arb_dev_set_lock_wait(0); break;
		case 'L': list_problems(); return FSCK_OK;
		case 'v': verbose = true; break;
		case 'h': usage(stdout); return FSCK_OK;
		case 'V':
			printf("fsck.arborfs (arborfs) %s\n", ARBORFS_VERSION);
			return FSCK_OK;
		default:
			fprintf(stderr, "Try 'fsck.arborfs --help' for more "
					"information.\n");
			return FSCK_USAGE;
		}
	}
	if (optind + 1 != argc || (do_undo && repair)) {
		fprintf(stderr, "fsck.arborfs: %s\nTry 'fsck.arborfs --help' "
				"for more information.\n",
			optind >= argc ? "no IMAGE given"
			: optind + 1 < argc ? "more than one IMAGE given"
					    : "--undo-repair repairs nothing else");
		return FSCK_USAGE;
	}
	image = argv[optind];
	if (do_undo)
		return undo(image);
	clock_gettime(CLOCK_MONOTONIC, &t0);

	phase("checking");
	status = check(image, false, verbose, NULL, &r1);
	if (status)
		return status;
	if (r1.newer_format) {
		printf("%s: NEWER FORMAT, %llu nodes, %llu items checked, %zu "
		       "problem%s found, 0 fixed, %.2fs: parts of the image are "
		       "of a format this fsck.arborfs does not know; nothing "
		       "written, use a newer fsck.arborfs\n",
		       image, (unsigned long long)r1.nodes,
		       (unsigned long long)r1.items, r1.nr,
		       r1.nr == 1 ? "" : "s", since(&t0));
		arb_check_result_free(&r1);
		return FSCK_OPERROR;
	}
	if (!r1.nr || !repair) {
		printf("%s: %s, %llu nodes, %llu items, %llu data sectors "
		       "checked, %zu problem%s found, 0 fixed, %.2fs\n",
		       image, r1.nr ? "ERRORS" : "clean",
		       (unsigned long long)r1.nodes,
		       (unsigned long long)r1.items,
		       (unsigned long long)r1.sectors, r1.nr,
		       r1.nr == 1 ? "" : "s", since(&t0));
		status = r1.nr ? FSCK_UNCORRECTED : FSCK_OK;
		arb_check_result_free(&r1);
		return status;
	}

	/* repair: the same check on a read-write open, then the fixes */
	if (r1.incomplete || r1.space_unsafe || !nfixable(&r1)) {
		printf("%s: ERRORS LEFT, %llu nodes, %llu items, %llu data "
		       "sectors checked, %zu problem%s found, 0 fixed, %.2fs: "
		       "%s\n",
		       image, (unsigned long long)r1.nodes,
		       (unsigned long long)r1.items,
		       (unsigned long long)r1.sectors, r1.nr,
		       r1.nr == 1 ? "" : "s", since(&t0),
		       r1.incomplete ? "part of the trees is unreadable, no "
				       "repair attempted"
		       : r1.space_unsafe
			       ? "an extent in use is missing from the extent "
				 "tree, no repair attempted (it would allocate "
				 "over it)"
			       : "none of these is repaired automatically");
		status = FSCK_UNCORRECTED;
		goto out;
	}
	{
		phase("repairing");
		status = open_image(image, true, &fs);
		if (status)
			goto out;
		ret = arb_fs_check_records(fs, &r2, NULL);
		progress_clear();
		if (ret == 0 || ret == -EUCLEAN)
			ret = arb_fs_repair(fs, &r2, stdout, &fixed);
		progress_clear();
		if (ret)
			fprintf(stderr, "fsck.arborfs: %s: repair failed: %s\n",
				image, arb_reason(ret, NULL));
		ret = arb_fs_close(fs) ? -EIO : ret;
		if (ret) {
			status = FSCK_OPERROR;
			goto out;
		}
	}
	phase("checking the result");
	printf("fsck.arborfs: checking the result\n");
	status = check(image, false, verbose, NULL, &r3);
	if (status)
		goto out;
	printf("%s: %s, %llu nodes, %llu items, %llu data sectors checked, "
	       "%zu problem%s found, %zu fixed, %zu left, %.2fs\n",
	       image, r3.nr ? "ERRORS LEFT" : "repaired",
	       (unsigned long long)r1.nodes, (unsigned long long)r1.items,
	       (unsigned long long)r1.sectors, r1.nr, r1.nr == 1 ? "" : "s",
	       r1.nr > r3.nr ? r1.nr - r3.nr : 0, r3.nr, since(&t0));
	status = r3.nr ? FSCK_UNCORRECTED : FSCK_CORRECTED;
out:
	arb_check_result_free(&r1);
	arb_check_result_free(&r2);
	arb_check_result_free(&r3);
	return status;
}
