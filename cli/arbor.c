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
 *   arbor check [-q] PATH | --status PATH   (check.c)
 *
 * On both (a mount through the ioctls, an image with --image):
 *
 *   arbor subvolume|sub create|snapshot|delete|list|show|sync ...
 *   arbor property get|set PATH ro [true|false]        (subvol.c)
 *
 * find-new and send/receive come later: those commands say so.  Usage: docs/man/arbor.help (also --help and arbor(8)).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arbor_cli.h"
#include "arbor_help.h"
#include "core.h"
#include "usage.h"

/* the text of docs/man/arbor.help, which makes the man page too */
static void usage(FILE *f)
{
	fputs(ARBOR_HELP, f);
}

/* a command that is not there yet: say so (exit 1) */
static int not_yet(const char *cmd)
{
	fprintf(stderr,
		"arbor %s: send/receive and find-new are not implemented "
		"yet\n"
		"(snapshots are: arbor subvolume snapshot)\n",
		cmd);
	return 1;
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

static void print_item(const struct arb_key *k, const void *data,
		       uint32_t size)
{
	printf("  (%" PRIu64 " %s %" PRIu64 ") size %u", k->objectid,
	       arb_item_type_name(k->type), k->offset, size);
	if (k->type == ARB_INODE_ITEM && size >= sizeof(struct arb_inode_item)) {
		const struct arb_inode_item *in = data;
		printf(" mode %o nlink %u size %" PRIu64 " gen %" PRIu64,
		       arb_inode_item_i_mode(in), arb_inode_item_i_nlink(in),
		       arb_inode_item_i_size(in),
		       arb_inode_item_i_generation(in));
	} else if (k->type == ARB_EXTENT_ITEM &&
		   size >= sizeof(struct arb_extent_item)) {
		const struct arb_extent_item *e = data;
		printf(" refs %" PRIu64 " gen %" PRIu64 " %s",
		       arb_extent_item_e_refs(e), arb_extent_item_e_generation(e),
		       arb_extent_item_e_flags(e) & ARB_EXTENT_FLAG_TREE_BLOCK
			       ? "tree"
			       : "data");
		if ((arb_extent_item_e_flags(e) & ARB_EXTENT_FLAG_TREE_BLOCK) &&
		    size >= sizeof(*e) + sizeof(struct arb_tree_block_ref)) {
			const struct arb_tree_block_ref *tr =
				(const void *)(e + 1);
			printf(" owner %" PRIu64 " level %u",
			       arb_tree_block_ref_t_owner(tr),
			       arb_tree_block_ref_t_level(tr));
			if (arb_tree_block_ref_t_mirror(tr))
				printf(" copy %" PRIu64,
				       arb_tree_block_ref_t_mirror(tr));
		}
	} else if (k->type == ARB_EXTENT_DATA &&
		   size >= ARB_FILE_EXTENT_INLINE_HDR) {
		const struct arb_file_extent *f = data;
		if (arb_file_extent_f_type(f) == ARB_FILE_EXTENT_INLINE ||
		    size < sizeof(*f))
			printf(" inline %u bytes", size - ARB_FILE_EXTENT_INLINE_HDR);
		else
			printf(" %s disk %" PRIu64 "+%" PRIu64 " off %" PRIu64
			       " len %" PRIu64,
			       arb_file_extent_f_type(f) == ARB_FILE_EXTENT_PREALLOC
				       ? "prealloc"
				       : "reg",
			       arb_file_extent_f_disk_bytenr(f),
			       arb_file_extent_f_disk_num_bytes(f),
			       arb_file_extent_f_offset(f),
			       arb_file_extent_f_num_bytes(f));
	} else if ((k->type == ARB_DIR_ITEM || k->type == ARB_DIR_INDEX) &&
		   size >= sizeof(struct arb_dir_entry)) {
		const struct arb_dir_entry *d = data;
		uint32_t n = arb_dir_entry_d_name_len(d);
		if (n > size - sizeof(*d))
			n = size - sizeof(*d);
		printf(" -> %" PRIu64 " '%.*s'", arb_dir_entry_d_ino(d), (int)n,
		       (const char *)(d + 1));
	}
	putchar('\n');
}

static int dump_tree(struct arb_vol *vol, uint64_t id)
{
	struct arb_root *root;
	struct arb_iter it;
	struct arb_key k = { 0, 0, 0 };
	uint64_t n = 0;
	int ret;

	ret = arb_root_get(vol, id, &root);
	if (ret) {
		fprintf(stderr, "arbor: tree %" PRIu64 ": %s\n", id,
			arb_reason(ret, NULL));
		return 1;
	}
	printf("tree %" PRIu64 ": root node %" PRIu64 " level %d gen %" PRIu64
	       "\n",
	       id, root->node->bytenr, arb_level(root->node),
	       arb_node_gen(root->node));
	arb_iter_init(&it, root);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		arb_iter_key(&it, &k);
		print_item(&k, arb_iter_data(&it), arb_iter_size(&it));
		n++;
	}
	arb_iter_release(&it);
	printf("tree %" PRIu64 ": %" PRIu64 " items\n", id, n);
	if (ret < 0) {
		fprintf(stderr, "arbor: tree %" PRIu64 ": %s\n", id,
			arb_reason(ret, NULL));
		return 1;
	}
	return 0;
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
	if (!strcmp(cmd, "subvolume") || !strcmp(cmd, "subvol") ||
	    !strcmp(cmd, "sub"))
		return cli_subvolume(argc - 1, argv + 1);
	if (!strcmp(cmd, "property") || !strcmp(cmd, "prop"))
		return cli_property(argc - 1, argv + 1);
	if (!strcmp(cmd, "send") || !strcmp(cmd, "receive") ||
	    !strcmp(cmd, "find-new"))
		return not_yet(cmd);
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
	if (open_image(image, &dev, &vol))
		return 1;
	if (!strcmp(cmd, "usage")) {
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
		}
		printf("free         %" PRIu64 " bytes\n", arb_free_bytes(vol));
	} else if (optind < argc) {
		char *end;
		uint64_t id = strtoull(argv[optind], &end, 0);
		if (*end) {
			fprintf(stderr, "arbor: bad tree id '%s'\n", argv[optind]);
			rc = 2;
		} else {
			rc = dump_tree(vol, id);
		}
	} else {
		static const uint64_t ids[] = { ARB_ROOT_TREE_ID,
						ARB_EXTENT_TREE_ID,
						ARB_CSUM_TREE_ID, ARB_FS_TREE_ID };
		for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
			rc |= dump_tree(vol, ids[i]);
	}
	arb_vol_close(vol);
	arb_dev_destroy(dev);
	return rc;
}
