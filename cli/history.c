// SPDX-License-Identifier: MIT
/*
 * history.c - "arbor filesystem history [--json] PATH|--image IMG": the
 * generations that can be mounted with `arborfs -o ro,generation=N`,
 * newest first, with the time each was committed, and the space the
 * grace keeps for them (docs/design/space.md, "History and grace").
 *
 * On a mount through ARB_IOC_GET_HISTORY; on an unmounted image through
 * the library (read-only: listing changes nothing).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arbor/arbor.h>
#include <arbor/ioctl.h>

#include "arbor_cli.h"

#define USAGE "usage: arbor filesystem history [--json] PATH|--image IMG\n"

static void print_history(const struct arb_ioc_history *h, bool json)
{
	char when[64];

	if (json) {
		printf("{\"kept_bytes\": %llu, \"generations\": [",
		       (unsigned long long)h->kept_bytes);
		for (uint32_t i = 0; i < h->nr; i++)
			printf("%s{\"generation\": %llu, \"time\": %llu.%09u}",
			       i ? ", " : "",
			       (unsigned long long)h->e[i].generation,
			       (unsigned long long)h->e[i].time_sec,
			       h->e[i].time_nsec);
		printf("]}\n");
		return;
	}
	printf("%-12s %s\n", "generation", "committed");
	for (uint32_t i = 0; i < h->nr; i++) {
		time_t t = (time_t)h->e[i].time_sec;
		struct tm tm;

		if (!t || !localtime_r(&t, &tm) ||
		    !strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm))
			snprintf(when, sizeof(when), "(time not recorded)");
		printf("%-12llu %s%s\n",
		       (unsigned long long)h->e[i].generation, when,
		       i ? "" : "  (newest)");
	}
	printf("kept from reuse for them: %llu bytes\n",
	       (unsigned long long)h->kept_bytes);
}

static int history_image(const char *image, struct arb_ioc_history *h)
{
	struct arb_history_info hi[ARB_IOC_HISTORY_MAX];
	struct arb_fs_opts o;
	struct arb_fs_usage u;
	struct arb_fs *fs;
	const char *why;
	int n, ret;

	arb_fs_opts_default(&o);
	o.readonly = true;
	o.commit_interval = 0;
	ret = arb_fs_open_image(image, &o, &fs, &why);
	if (ret) {
		fprintf(stderr, "arbor: %s: cannot open: %s\n", image,
			arb_reason(ret, why));
		return 1;
	}
	n = arb_fs_history(fs, hi, ARB_IOC_HISTORY_MAX);
	ret = n < 0 ? n : arb_fs_usage(fs, &u);
	arb_fs_close(fs);
	if (ret) {
		fprintf(stderr, "arbor: %s: %s\n", image, strerror(-ret));
		return 1;
	}
	memset(h, 0, sizeof(*h));
	h->nr = (uint32_t)(n < ARB_IOC_HISTORY_MAX ? n : ARB_IOC_HISTORY_MAX);
	for (uint32_t i = 0; i < h->nr; i++) {
		h->e[i].generation = hi[i].generation;
		h->e[i].time_sec = (uint64_t)hi[i].time.tv_sec;
		h->e[i].time_nsec = (uint32_t)hi[i].time.tv_nsec;
	}
	/* what a writable mount would keep, if the grace were still on:
	 * nothing is kept between mounts (it is rebuilt at open) */
	h->kept_bytes = u.history;
	return 0;
}

/* argv[0] is "history" */
int cli_history(int argc, char **argv)
{
	static const struct option lo[] = { { "json", 0, 0, 'j' },
					    { "image", 1, 0, 'i' },
					    { "help", 0, 0, 'h' },
					    { 0, 0, 0, 0 } };
	const char *image = NULL, *path = NULL;
	struct arb_ioc_history h;
	bool json = false;
	int c, fd, rc;

	optind = 1;
	while ((c = getopt_long(argc, argv, "ji:h", lo, NULL)) != -1) {
		switch (c) {
		case 'j': json = true; break;
		case 'i': image = optarg; break;
		case 'h': fputs(USAGE, stdout); return 0;
		default: fputs(USAGE, stderr); return 2;
		}
	}
	if (!image && optind < argc)
		path = argv[optind++];
	if (!image == !path || optind != argc) {
		fputs(USAGE, stderr);
		return 2;
	}
	if (image) {
		rc = history_image(image, &h);
		if (!rc)
			print_history(&h, json);
		return rc;
	}
	fd = cli_open_mount(path);
	if (fd < 0)
		return 1;
	memset(&h, 0, sizeof(h));
	rc = cli_ioctl(fd, path, ARB_IOC_GET_HISTORY, &h, "history") ? 1 : 0;
	close(fd);
	if (!rc)
		print_history(&h, json);
	return rc;
}
