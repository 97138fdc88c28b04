/* SPDX-License-Identifier: MIT */
/*
 * arbor - the admin tool.
 *
 * On an unmounted image (through the library directly):
 *
 *   arbor usage --image IMG          sizes, generation, space used and free
 *   arbor dump  --image IMG [TREE]   every item of a tree (default: all
 *                                    trees), one line each, for debugging
 *
 * On a mounted filesystem (through the ioctls of <arbor/ioctl.h> on any
 * file or directory PATH of the mount: filesystem.c):
 *
 *   arbor filesystem stats [--json] [--reset] PATH
 *   arbor filesystem usage [--json] PATH
 *   arbor filesystem sync [--json] PATH
 *   arbor filesystem generation [--json] PATH
 *   arbor filesystem history [--json] PATH|--image IMG
 *   arbor check [-q] PATH | --status PATH   (check.c)
 *
 * On both (a mount through the ioctls, an image with --image):
 *
 *   arbor subvolume|sub create|snapshot|delete|list|show|sync ...
 *   arbor property get|set PATH ro [true|false]        (subvol.c)
 *   arbor send [-p PARENT] [-f FILE] [--estimate] SNAPSHOT  (send.c)
 *   arbor receive [-f FILE] DIR | --dump                    (send.c)
 *   arbor subvolume digest PATH                             (send.c)
 *   arbor reflink|dedupe ...                                (reflink.c)
 *   arbor backup [--keep N] [--dest-image IMG] SUBVOL DEST  (backup.c;
 *                the source always a mount)
 *
 * Usage: docs/man/arbor.help (also --help and arbor(8)).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arbor_cli.h"
#include "arbor_help.h"
#include "arbor/dump.h"
#include "core.h"
#include "usage.h"

/* the text of docs/man/arbor.help, which makes the man page too */
static void usage(FILE *f)
{
	fputs(ARBOR_HELP, f);
}

static int open_image(const char *path, struct arb_dev **dev,
		      struct arb_vol **vol)
{
	struct arb_vol_opts o = { 0 };
	int ret;

	o.readonly = true;
	arb_log_hold(true);
	ret = arb_dev_open_file(path, true, 0, dev);
	if (ret) {
		fprintf(stderr, "arbor: %s: %s\n", path,
			ret == -EBUSY ? ARB_BUSY_HINT
				      : arb_reason(ret, NULL));
		arb_log_hold(false);
		return 1;
	}
	ret = arb_vol_open(*dev, &o, vol);
	if (ret) {
		fprintf(stderr, "arbor: %s: cannot open: %s\n", path,
			arb_reason(ret, NULL));
		arb_dev_destroy(*dev);
	}
	arb_log_hold(false);
	return ret ? 1 : 0;
}

/* arbor dump: through the public entry point (arbor/dump.h) */
static int dump_image(const char *path, uint64_t tree)
{
	struct arb_dev *dev;
	const char *why;
	int ret;

	arb_log_hold(true);
	ret = arb_dev_open_file(path, true, 0, &dev);
	if (ret) {
		fprintf(stderr, "arbor: %s: %s\n", path,
			ret == -EBUSY ? ARB_BUSY_HINT : arb_reason(ret, NULL));
		arb_log_hold(false);
		return 1;
	}
	arb_log_hold(false);
	ret = arb_dump_tree(dev, tree, stdout, &why);
	if (ret && why)
		fprintf(stderr, "arbor: %s: cannot open: %s\n", path, why);
	arb_dev_destroy(dev);
	return ret ? 1 : 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = { { "image", 1, 0, 'i' },
					    { "help", 0, 0, 'h' },
					    { 0, 0, 0, 0 } };
	const char *image = NULL, *cmd;
	struct arb_dev *dev;
	struct arb_vol *vol;
	int c, rc = 0;

	/* the library's messages under our name, each once */
	arb_log_tool("arbor");
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	cmd = argv[1];
	if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") ||
	    !strcmp(cmd, "help")) {
		static const struct {
			const char *cmd, *text;
		} topics[] = {
			{ "filesystem", ARBOR_HELP_FILESYSTEM },
			{ "fs", ARBOR_HELP_FILESYSTEM },
			{ "scrub", ARBOR_HELP_SCRUB },
			{ "check", ARBOR_HELP_CHECK },
			{ "unmount", ARBOR_HELP_UNMOUNT },
			{ "usage", ARBOR_HELP_IMAGE },
			{ "dump", ARBOR_HELP_IMAGE },
			{ "subvolume", ARBOR_HELP_SUBVOLUME },
			{ "sub", ARBOR_HELP_SUBVOLUME },
			{ "subvol", ARBOR_HELP_SUBVOLUME },
			{ "property", ARBOR_HELP_PROPERTY },
			{ "reflink", ARBOR_HELP_REFLINK },
			{ "dedupe", ARBOR_HELP_REFLINK },
			{ "send", ARBOR_HELP_SEND },
			{ "receive", ARBOR_HELP_RECEIVE },
			{ "backup", ARBOR_HELP_BACKUP },
		};

		/* "arbor help scrub": that command's part */
		for (size_t i = 0; argc > 2 &&
				   i < sizeof(topics) / sizeof(topics[0]); i++)
			if (!strcmp(argv[2], topics[i].cmd)) {
				fputs(topics[i].text, stdout);
				return 0;
			}
		usage(stdout);
		return 0;
	}
	if (!strcmp(cmd, "-V") || !strcmp(cmd, "--version") ||
	    !strcmp(cmd, "version")) {
		printf("arbor (arborfs) %s\n", ARBORFS_VERSION);
		return 0;
	}
	if ((!strcmp(cmd, "subvolume") || !strcmp(cmd, "subvol") ||
	     !strcmp(cmd, "sub")) && argc > 2 && !strcmp(argv[2], "digest"))
		return cli_digest(argc - 2, argv + 2);
	if (!strcmp(cmd, "subvolume") || !strcmp(cmd, "subvol") ||
	    !strcmp(cmd, "sub"))
		return cli_subvolume(argc - 1, argv + 1);
	if (!strcmp(cmd, "property") || !strcmp(cmd, "prop"))
		return cli_property(argc - 1, argv + 1);
	if (!strcmp(cmd, "reflink"))
		return cli_reflink(argc - 1, argv + 1);
	if (!strcmp(cmd, "dedupe"))
		return cli_dedupe(argc - 1, argv + 1);
	/* as btrfs: "find-new" is a subvolume command; argv[1] names it */
	if (!strcmp(cmd, "find-new"))
		return cli_subvolume(argc, argv);
	if (!strcmp(cmd, "send"))
		return cli_send(argc - 1, argv + 1);
	if (!strcmp(cmd, "receive"))
		return cli_receive(argc - 1, argv + 1);
	if (!strcmp(cmd, "backup"))
		return cli_backup(argc - 1, argv + 1);
	if (strcmp(cmd, "scrub") && strcmp(cmd, "check") &&
	    strcmp(cmd, "filesystem") && strcmp(cmd, "fs") &&
	    strcmp(cmd, "unmount") && strcmp(cmd, "umount") &&
	    strcmp(cmd, "usage") && strcmp(cmd, "dump")) {
		fprintf(stderr, "arbor: unknown command '%s'\n"
				"Try 'arbor --help' for the commands.\n",
			cmd);
		return 2;
	}
	if (!strcmp(cmd, "scrub"))
		return cli_scrub(argc, argv);
	if (!strcmp(cmd, "check"))
		return cli_check(argc, argv);
	if (!strcmp(cmd, "unmount") || !strcmp(cmd, "umount"))
		return cli_unmount(argc, argv);
	if (!strcmp(cmd, "filesystem") || !strcmp(cmd, "fs"))
		return arbor_filesystem(argc - 1, argv + 1);
	optind = 2;
	while ((c = getopt_long(argc, argv, "i:h", lo, NULL)) != -1) {
		switch (c) {
		case 'i': image = optarg; break;
		case 'h': fputs(ARBOR_HELP_IMAGE, stdout); return 0;
		default: fputs(ARBOR_HELP_IMAGE, stderr); return 2;
		}
	}
	if (!image) {
		if (!strcmp(cmd, "usage"))
			fprintf(stderr, "arbor usage: takes --image IMG, an "
					"unmounted image; on a mount: arbor "
					"filesystem usage PATH\n");
		else
			fprintf(stderr, "arbor dump: takes --image IMG, an "
					"unmounted image\n");
		return 2;
	}
	if (!strcmp(cmd, "usage") && optind < argc) {
		fprintf(stderr, "arbor usage: unexpected argument '%s'\n",
			argv[optind]);
		return 2;
	}
	if (!strcmp(cmd, "dump")) {
		uint64_t id = ARB_DUMP_ALL;
		char *end;

		if (optind < argc) {
			id = strtoull(argv[optind], &end, 0);
			if (*end || id == ARB_DUMP_ALL) {
				fprintf(stderr, "arbor: bad tree id '%s'\n",
					argv[optind]);
				return 2;
			}
		}
		return dump_image(image, id);
	}
	if (open_image(image, &dev, &vol))
		return 1;
	{
		struct arb_space_usage u;

		printf("generation   %" PRIu64 "\n", vol->generation);
		printf("node size    %u\n", vol->nodesize);
		printf("total        %" PRIu64 " bytes\n", vol->total_bytes);
		printf("used         %" PRIu64 " bytes (tree nodes and data)\n",
		       arb_used_bytes(vol));
		rc = arb_space_usage(vol, &u);
		if (rc) {
			fprintf(stderr, "arbor: reading the extent tree: %s\n",
				strerror(-rc));
			rc = 1;
		} else {
			printf("data         %" PRIu64 " bytes\n", u.data);
			printf("metadata     %" PRIu64 " bytes\n", u.metadata);
			printf("system       %" PRIu64 " bytes\n", u.system);
			printf("logical      %" PRIu64 " bytes (data inflated: "
			       "each data extent once)\n", u.data_logical);
			printf("ratio        %.3f (data / logical: compression, "
			       "not sharing)\n",
			       u.data_logical ? (double)u.data /
						       (double)u.data_logical
					      : 1.0);
			if (u.compressed_extents)
				printf("compressed   %" PRIu64 " bytes in %"
				       PRIu64 " extents, stored in %" PRIu64
				       " bytes\n", u.compressed_logical,
				       u.compressed_extents, u.compressed);
		}
		printf("free         %" PRIu64 " bytes\n", arb_free_bytes(vol));
	}
	arb_vol_close(vol);
	arb_dev_destroy(dev);
	return rc;
}
