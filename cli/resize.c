/* SPDX-License-Identifier: MIT */
/*
 * arbor filesystem resize PATH|--image IMG SIZE|+SIZE|-SIZE
 *
 * Grows or shrinks a filesystem and its image file: on a mount through the
 * daemon (ARB_IOC_RESIZE), or on an unmounted image through the library.
 * SIZE takes K/M/G/T suffixes; +SIZE and -SIZE are relative to the
 * current size.  Shrinking gives back only free space at the end of the
 * image (nothing is moved).  Exit 0 done, 1 failed, 2 usage.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <arbor/ioctl.h>

#include "arbor_cli.h"
#include "arbor_help.h"

/* the filesystem part of docs/man/arbor.help */
static void resize_usage(FILE *f)
{
	fputs(ARBOR_HELP_FILESYSTEM, f);
}

/* the new size from SIZE/+SIZE/-SIZE and the current one; -1 on error */
static int target(const char *arg, uint64_t cur, uint64_t *out)
{
	uint64_t v;
	int sign = 0;

	if (*arg == '+' || *arg == '-')
		sign = *arg++ == '+' ? 1 : -1;
	if (arb_parse_size(arg, &v)) {
		fprintf(stderr, "arbor filesystem resize: bad size '%s'\n",
			arg);
		return -1;
	}
	if (sign > 0 && v > UINT64_MAX - cur) {
		fprintf(stderr, "arbor filesystem resize: size too large\n");
		return -1;
	}
	if (sign < 0 && v >= cur) {
		fprintf(stderr, "arbor filesystem resize: cannot shrink by %"
				PRIu64 " bytes: the filesystem has %" PRIu64 "\n",
			v, cur);
		return -1;
	}
	*out = sign > 0 ? cur + v : sign < 0 ? cur - v : v;
	return 0;
}

static int resize_image(const char *image, const char *arg)
{
	struct arb_fs_stats st;
	struct arb_fs_opts o;
	struct arb_dev *dev;
	struct arb_fs *fs;
	const char *why = NULL;
	uint64_t size;
	int ret, cret;

	ret = arb_dev_open_file(image, false, 0, &dev);
	if (ret) {
		fprintf(stderr, "arbor: %s: %s\n", image,
			ret == -EBUSY ? "image is in use (mounted?)"
				      : strerror(-ret));
		return 1;
	}
	arb_fs_opts_default(&o);
	ret = arb_fs_open(dev, &o, &fs, &why);
	if (ret) {
		fprintf(stderr, "arbor: %s: cannot open: %s\n", image,
			why ? why : strerror(-ret));
		arb_dev_destroy(dev);
		return 1;
	}
	ret = arb_fs_get_stats(fs, &st);
	if (!ret && target(arg, st.total_bytes, &size)) {
		arb_fs_close(fs);
		return 2;
	}
	if (!ret)
		ret = arb_fs_resize(fs, size, &why);
	if (!ret)
		ret = arb_fs_get_stats(fs, &st);
	cret = arb_fs_close(fs);
	if (ret || cret) {
		fprintf(stderr, "arbor: %s: resize failed: %s (%s)\n", image,
			why ? why : "error", strerror(-(ret ? ret : cret)));
		return 1;
	}
	printf("%s: %" PRIu64 " bytes\n", image, st.total_bytes);
	return 0;
}

static int resize_mount(const char *path, const char *arg)
{
	struct arb_ioc_usage u;
	struct arb_ioc_resize r;
	uint64_t size;
	int fd, rc = 1;

	fd = cli_open_mount(path);
	if (fd < 0)
		return 1;
	memset(&u, 0, sizeof(u));
	memset(&r, 0, sizeof(r));
	if (cli_ioctl(fd, path, ARB_IOC_GET_USAGE, &u, "usage"))
		goto out;
	if (target(arg, u.total, &size)) {
		rc = 2;
		goto out;
	}
	r.new_size = size;
	if (cli_ioctl(fd, path, ARB_IOC_RESIZE, &r, "resize"))
		goto out;
	if (r.error) {
		r.why[sizeof(r.why) - 1] = 0;
		fprintf(stderr, "arbor: %s: resize failed: %s (%s)\n", path,
			r.why[0] ? r.why : "error", strerror((int)r.error));
		goto out;
	}
	printf("%s: %" PRIu64 " bytes\n", path, (uint64_t)r.total);
	rc = 0;
out:
	close(fd);
	return rc;
}

int cli_resize(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "--image"))
		return resize_image(argv[2], argv[3]);
	if (argc == 3 && argv[1][0] != '-')
		return resize_mount(argv[1], argv[2]);
	if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		resize_usage(stdout);
		return 0;
	}
	resize_usage(stderr);
	return 2;
}
