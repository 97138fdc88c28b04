// SPDX-License-Identifier: MIT
/*
 * show.c - "arbor filesystem show" and "arbor filesystem label".
 *
 * On a mount through the daemon's ioctls (ARB_IOC_GET_INFO, _SET_LABEL);
 * on an unmounted image (--image) through the library, as e2label and
 * btrfs filesystem label do.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <uuid/uuid.h>

#include <arbor/arbor.h>
#include <arbor/ioctl.h>

#include "arbor_cli.h"

/* the feature bits by name (lib/format.h) */
static const struct {
	int set; /* 0 incompat, 1 compat */
	uint64_t bit;
	const char *name;
} features[] = {
	{ 0, 1ULL << 0, "commit-record" },
	{ 0, 1ULL << 1, "xattr-data" },
	{ 1, 1ULL << 0, "protected-inodes" },
};

static void print_features(uint64_t incompat, uint64_t compat, bool json)
{
	bool first = true;
	uint64_t known[2] = { 0, 0 };

	for (size_t i = 0; i < sizeof(features) / sizeof(features[0]); i++) {
		uint64_t v = features[i].set ? compat : incompat;

		known[features[i].set] |= features[i].bit;
		if (!(v & features[i].bit))
			continue;
		printf(json ? "%s\"%s\"" : "%s%s", first ? "" : json ? ", " : " ",
		       features[i].name);
		first = false;
	}
	if ((incompat & ~known[0]) || (compat & ~known[1])) {
		printf(json ? "%s\"unknown\"" : "%sunknown", first ? "" : json ? ", " : " ");
		first = false;
	}
	if (first && !json)
		printf("none");
}

static void print_info(const struct arb_ioc_info *in, const char *where,
		       bool json)
{
	char u[37], tu[37];

	uuid_unparse_lower(in->uuid, u);
	uuid_unparse_lower(in->fs_tree_uuid, tu);
	if (json) {
		printf("{\"label\": \"");
		for (const char *p = in->label; *p; p++) {
			if (*p == '"' || *p == '\\')
				printf("\\%c", *p);
			else if ((unsigned char)*p < 0x20)
				printf("\\u%04x", (unsigned char)*p);
			else
				putchar(*p);
		}
		printf("\", \"uuid\": \"%s\", \"subvolume_uuid\": \"%s\", "
		       "\"size\": %llu, \"node_size\": %u, "
		       "\"sector_size\": %u, \"generation\": %llu, "
		       "\"format_version\": %u, \"metadata\": \"%s\", "
		       "\"readonly\": %s, \"features\": [",
		       u, tu, (unsigned long long)in->total_bytes, in->nodesize,
		       in->sectorsize, (unsigned long long)in->generation,
		       in->format_version, in->meta_copies > 1 ? "dup" : "single",
		       in->readonly ? "true" : "false");
		print_features(in->incompat, in->compat, true);
		printf("]}\n");
		return;
	}
	printf("%-14s %s\n", "label", in->label[0] ? in->label : "(none)");
	printf("%-14s %s\n", "uuid", u);
	printf("%-14s %s\n", "source", where);
	printf("%-14s %llu bytes\n", "size", (unsigned long long)in->total_bytes);
	printf("%-14s %u\n", "node size", in->nodesize);
	printf("%-14s %u\n", "sector size", in->sectorsize);
	printf("%-14s %s\n", "metadata", in->meta_copies > 1 ? "dup" : "single");
	printf("%-14s %llu\n", "generation", (unsigned long long)in->generation);
	printf("%-14s %u\n", "format", in->format_version);
	printf("%-14s ", "features");
	print_features(in->incompat, in->compat, false);
	printf("\n%-14s %s\n", "subvol uuid", tu);
	if (in->readonly)
		printf("%-14s read-only\n", "mounted");
}

/* open IMG through the library; 0 or an exit status */
static int open_image(const char *image, bool rw, struct arb_fs **fs)
{
	struct arb_fs_opts o;
	const char *why;
	int ret;

	arb_fs_opts_default(&o);
	o.readonly = !rw;
	o.commit_interval = 0;
	ret = arb_fs_open_image(image, &o, fs, &why);
	if (ret) {
		fprintf(stderr, "arbor: %s: cannot open: %s\n", image,
			arb_reason(ret, why));
		return 1;
	}
	return 0;
}

static void info_from_lib(const struct arb_fs_info *fi, struct arb_ioc_info *in)
{
	memset(in, 0, sizeof(*in));
	memcpy(in->uuid, fi->uuid, 16);
	memcpy(in->fs_tree_uuid, fi->fs_tree_uuid, 16);
	in->total_bytes = fi->total_bytes;
	in->generation = fi->generation;
	in->nodesize = fi->nodesize;
	in->sectorsize = fi->sectorsize;
	in->format_version = fi->version;
	in->meta_copies = fi->meta_copies;
	in->incompat = fi->incompat;
	in->compat = fi->compat;
	in->ro_compat = fi->ro_compat;
	memcpy(in->label, fi->label, sizeof(in->label));
}

/* argv[0] is "show" or "label" */
int cli_show(int argc, char **argv)
{
	static const struct option lo[] = { { "json", 0, 0, 'j' },
					    { "image", 1, 0, 'i' },
					    { "help", 0, 0, 'h' },
					    { 0, 0, 0, 0 } };
	bool label = !strcmp(argv[0], "label"), json = false;
	const char *image = NULL, *path = NULL, *newlabel = NULL;
	struct arb_ioc_info in;
	int c, fd, rc = 0;

	optind = 1;
	while ((c = getopt_long(argc, argv, "ji:h", lo, NULL)) != -1) {
		switch (c) {
		case 'j': json = true; break;
		case 'i': image = optarg; break;
		case 'h':
			printf("usage: arbor filesystem show [--json] PATH|--image IMG\n"
			       "       arbor filesystem label PATH|--image IMG [NEWLABEL]\n");
			return 0;
		default:
			return 2;
		}
	}
	if (!image && optind < argc)
		path = argv[optind++];
	if (label && optind < argc)
		newlabel = argv[optind++];
	if ((!image == !path) || optind != argc || (json && label)) {
		fprintf(stderr, "usage: arbor filesystem show [--json] PATH|--image IMG\n"
				"       arbor filesystem label PATH|--image IMG [NEWLABEL]\n");
		return 2;
	}
	if (newlabel && strlen(newlabel) >= sizeof(in.label)) {
		fprintf(stderr, "arbor filesystem label: at most %zu bytes\n",
			sizeof(in.label) - 1);
		return 2;
	}
	if (image) {
		struct arb_fs_info fi;
		struct arb_fs *fs;
		int ret;

		rc = open_image(image, newlabel != NULL, &fs);
		if (rc)
			return rc;
		if (newlabel) {
			ret = arb_fs_set_label(fs, newlabel);
			if (ret) {
				fprintf(stderr, "arbor: %s: setting the label: %s\n",
					image, arb_reason(ret, NULL));
				rc = 1;
			}
		} else {
			arb_fs_info(fs, &fi);
			info_from_lib(&fi, &in);
			if (label)
				printf("%s\n", in.label);
			else
				print_info(&in, image, json);
		}
		ret = arb_fs_close(fs);
		if (ret && !rc) {
			fprintf(stderr, "arbor: %s: %s\n", image,
				arb_reason(ret, NULL));
			rc = 1;
		}
		return rc;
	}
	fd = cli_open_mount(path);
	if (fd < 0)
		return 1;
	memset(&in, 0, sizeof(in));
	if (newlabel) {
		in.size = sizeof(in);
		strcpy(in.label, newlabel);
		if (cli_ioctl(fd, path, ARB_IOC_SET_LABEL, &in, "label"))
			rc = 1;
	} else if (cli_ioctl(fd, path, ARB_IOC_GET_INFO, &in, "show")) {
		rc = 1;
	} else if (label) {
		printf("%s\n", in.label);
	} else {
		print_info(&in, path, json);
	}
	close(fd);
	return rc;
}
