/* SPDX-License-Identifier: MIT */
/*
 * fsck.arborfs - check an arborfs image, following fsck(8) conventions.
 *
 *   fsck.arborfs [-n|-y|-p] [-f] [-v] [--progress] IMAGE
 *
 * Exit status (fsck(8)): 0 no errors, 1 errors corrected, 4 errors left
 * uncorrected, 8 operational error, 16 usage error.
 *
 * The image is opened read-only unless a repair was asked for (-y/-p); the
 * library takes a shared lock on it, so an image mounted read-write (the
 * daemon holds an exclusive lock) is refused instead of being read while it
 * changes.  Repairs are not implemented yet: with -y/-p the problems found
 * are reported and the exit status is 4, never a silent "fixed".
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "arbor/arbor.h"

#define FSCK_OK 0
#define FSCK_CORRECTED 1
#define FSCK_UNCORRECTED 4
#define FSCK_OPERROR 8
#define FSCK_USAGE 16

static void usage(FILE *f)
{
	fprintf(f,
		"usage: fsck.arborfs [-n|-y|-p] [-f] [-v] [--progress] IMAGE\n"
		"  -n          check only, never write (default)\n"
		"  -y, -p      repair what can be repaired (not implemented yet:\n"
		"              problems are reported, exit status 4)\n"
		"  -f          check even if the image looks clean (always done)\n"
		"  -v          list every problem (default: the first 50)\n"
		"  --progress  accepted for compatibility\n"
		"exit status: 0 clean, 1 corrected, 4 uncorrected, 8 operational"
		" error, 16 usage error\n");
}

int main(int argc, char **argv)
{
	static const struct option lo[] = { { "progress", 0, 0, 'P' },
					    { "help", 0, 0, 'h' },
					    { 0, 0, 0, 0 } };
	struct arb_fs_opts o;
	struct arb_dev *dev;
	struct arb_fs *fs;
	const char *why = NULL, *image;
	bool repair = false, verbose = false;
	char *report = NULL;
	size_t report_len = 0;
	struct timespec t0, t1;
	FILE *mem;
	int c, ret, nproblems = 0;

	while ((c = getopt_long(argc, argv, "nypfvah", lo, NULL)) != -1) {
		switch (c) {
		case 'n': repair = false; break;
		case 'y': case 'p': case 'a': repair = true; break;
		case 'f': case 'P': break;
		case 'v': verbose = true; break;
		case 'h': usage(stdout); return FSCK_OK;
		default: usage(stderr); return FSCK_USAGE;
		}
	}
	if (optind + 1 != argc) {
		usage(stderr);
		return FSCK_USAGE;
	}
	image = argv[optind];
	clock_gettime(CLOCK_MONOTONIC, &t0);

	ret = arb_dev_open_file(image, true, 0, &dev);
	if (ret) {
		fprintf(stderr, "fsck.arborfs: %s: %s\n", image,
			ret == -EBUSY ? "image is in use (mounted read-write?)"
				      : strerror(-ret));
		return FSCK_OPERROR;
	}
	arb_fs_opts_default(&o);
	o.readonly = true;
	ret = arb_fs_open(dev, &o, &fs, &why);
	if (ret) {
		fprintf(stderr, "fsck.arborfs: %s: cannot open: %s\n", image,
			why ? why : strerror(-ret));
		/* a damaged superblock or root is a filesystem error */
		return ret == -EUCLEAN || ret == -EIO ? FSCK_UNCORRECTED
						       : FSCK_OPERROR;
	}
	mem = open_memstream(&report, &report_len);
	if (!mem) {
		arb_fs_close(fs);
		return FSCK_OPERROR;
	}
	ret = arb_fs_check(fs, mem);
	fclose(mem);
	arb_fs_close(fs);
	clock_gettime(CLOCK_MONOTONIC, &t1);

	for (char *p = report, *nl; p && *p; p = nl + 1) {
		nl = strchr(p, '\n');
		if (!nl)
			nl = p + strlen(p) - 1;
		if (verbose || nproblems < 50)
			fprintf(stdout, "%.*s\n", (int)(nl - p), p);
		nproblems++;
	}
	free(report);
	if (ret && ret != -EUCLEAN) {
		fprintf(stderr, "fsck.arborfs: %s: check failed: %s\n", image,
			strerror(-ret));
		return FSCK_OPERROR;
	}
	if (ret == -EUCLEAN && nproblems == 0)
		nproblems = 1;
	printf("%s: %s, %d problem%s found, 0 fixed, %.2fs\n", image,
	       nproblems ? "ERRORS" : "clean", nproblems,
	       nproblems == 1 ? "" : "s",
	       (double)(t1.tv_sec - t0.tv_sec) +
		       (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	if (nproblems && repair)
		fprintf(stderr, "fsck.arborfs: repair is not implemented yet; "
				"nothing was changed\n");
	return nproblems ? FSCK_UNCORRECTED : FSCK_OK;
}
