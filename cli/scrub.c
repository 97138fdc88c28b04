/* SPDX-License-Identifier: MIT */
/*
 * arbor scrub --image IMG [-r]: verify every tree node and data block of
 * an unmounted image against its checksum (lib/fs/scrub.c), rewrite a bad
 * copy of a tree node from its good copy (duplicated metadata; not with
 * -r, which opens the image read-only), print each problem with the paths
 * of the affected files and a summary.
 *
 * Exit status: 0 no errors, 1 operational error (cannot open, I/O error
 * of the walk itself), 2 usage, 3 uncorrectable errors found.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "arbor/arbor.h"
#include "arbor_cli.h"

static void print_line(void *arg, const char *line)
{
	(void)arg;
	printf("%s\n", line);
	fflush(stdout);
}

static void scrub_usage(FILE *f)
{
	fprintf(f, "usage: arbor scrub --image IMG [-r] [-q]\n"
		   "  read every tree node and data block and verify its "
		   "checksum;\n"
		   "  a bad copy of a tree node is rewritten from the good "
		   "one\n"
		   "  -r  read-only: report, repair nothing\n"
		   "  -q  summary only\n"
		   "  exit 0 clean (or all corrected), 3 uncorrectable errors, "
		   "1 failure\n");
}

void cli_scrub_summary(const struct arb_scrub_stats *st, double secs)
{
	uint64_t bad = st->nodes_uncorrectable + st->data_uncorrectable;

	printf("scrub %s: %" PRIu64 " tree nodes, %" PRIu64
	       " data sectors checked (%.1f MiB in %.2fs)\n",
	       st->done ? "done" : "stopped", st->nodes_checked,
	       st->data_sectors_checked,
	       (double)st->bytes_checked / (1024.0 * 1024.0), secs);
	printf("  corrected %" PRIu64 ", uncorrectable %" PRIu64
	       " (checksum %" PRIu64 ", read %" PRIu64 "), files affected %"
	       PRIu64 "\n",
	       st->nodes_corrected, bad, st->csum_errors, st->read_errors,
	       st->files_affected);
	if (st->data_no_csum)
		printf("  %" PRIu64 " bytes without checksums (preallocated)\n",
		       st->data_no_csum);
}

int cli_scrub(int argc, char **argv)
{
	static const struct option lo[] = { { "image", 1, 0, 'i' },
					    { "help", 0, 0, 'h' },
					    { 0, 0, 0, 0 } };
	struct arb_scrub_stats st;
	struct arb_fs_opts o;
	struct arb_dev *dev;
	struct arb_fs *fs;
	struct timespec t0, t1;
	const char *image = NULL, *why = NULL;
	bool quiet = false, readonly = false;
	int c, ret;

	optind = 2;
	while ((c = getopt_long(argc, argv, "i:qrh", lo, NULL)) != -1) {
		switch (c) {
		case 'i': image = optarg; break;
		case 'r': readonly = true; break;
		case 'q': quiet = true; break;
		case 'h': scrub_usage(stdout); return 0;
		default: scrub_usage(stderr); return 2;
		}
	}
	if (!image || optind != argc) {
		scrub_usage(stderr);
		return 2;
	}
	ret = arb_dev_open_file(image, readonly, 0, &dev);
	if (ret) {
		fprintf(stderr, "arbor scrub: %s: %s\n", image,
			ret == -EBUSY ? "image is in use (mounted?)"
				      : strerror(-ret));
		return 1;
	}
	arb_fs_opts_default(&o);
	o.readonly = readonly;
	ret = arb_fs_open(dev, &o, &fs, &why);
	if (ret) {
		fprintf(stderr, "arbor scrub: %s: cannot open: %s\n", image,
			why ? why : strerror(-ret));
		arb_dev_destroy(dev);
		return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ret = arb_fs_scrub(fs, &st, quiet ? NULL : print_line, NULL, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	arb_fs_close(fs);
	cli_scrub_summary(&st, (double)(t1.tv_sec - t0.tv_sec) +
				       (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	if (ret) {
		fprintf(stderr, "arbor scrub: %s: %s\n", image, strerror(-ret));
		return 1;
	}
	return st.nodes_uncorrectable + st.data_uncorrectable ? 3 : 0;
}
