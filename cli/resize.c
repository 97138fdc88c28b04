/* SPDX-License-Identifier: MIT */
/*
 * arbor filesystem resize [+|-]SIZE|max PATH|--image IMG
 *
 * Grows or shrinks a filesystem and its image file: on a mount through the
 * daemon (ARB_IOC_RESIZE), or on an unmounted image through the library.
 * SIZE takes K/M/G/T suffixes; +SIZE and -SIZE are relative to the
 * current size; max is the size of the image file or device as it is
 * (after growing the file by hand, say with truncate -s).  Shrinking
 * gives back only free space at the end of the image (nothing is moved).
 * btrfs's order (size first); the older PATH SIZE order still works, with
 * a note that it is deprecated.  Exit 0 done, 1 failed, 2 usage.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <arbor/ioctl.h>

#include "arbor_cli.h"
#include "arbor_help.h"

/* the filesystem part of docs/man/arbor.help */
static void resize_usage(FILE *f)
{
	fputs(ARBOR_HELP_FILESYSTEM, f);
}

/* SIZE, +SIZE, -SIZE or max? */
static bool is_size(const char *arg)
{
	uint64_t v;

	if (!strcmp(arg, "max"))
		return true;
	if (*arg == '+' || *arg == '-')
		arg++;
	return arb_parse_size(arg, &v) == 0;
}

/* the new size from SIZE/+SIZE/-SIZE/max, the current one and the size
 * of the image file or device (max); -1 on error */
static int target(const char *arg, uint64_t cur, uint64_t max, uint64_t *out)
{
	uint64_t v;
	int sign = 0;

	if (!strcmp(arg, "max")) {
		if (!max) {
			fprintf(stderr, "arbor filesystem resize: the size of "
					"the image is unknown\n");
			return -1;
		}
		*out = max;
		return 0;
	}

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

	arb_log_hold(true);
	ret = arb_dev_open_file(image, false, 0, &dev);
	if (ret) {
		fprintf(stderr, "arbor: %s: %s\n", image,
			ret == -EBUSY ? ARB_BUSY_HINT
				      : arb_reason(ret, NULL));
		arb_log_hold(false);
		return 1;
	}
	arb_fs_opts_default(&o);
	ret = arb_fs_open(dev, &o, &fs, &why);
	if (ret) {
		fprintf(stderr, "arbor: %s: cannot open: %s\n", image,
			arb_reason(ret, why));
		arb_dev_destroy(dev);
		arb_log_hold(false);
		return 1;
	}
	arb_log_hold(false);
	ret = arb_fs_get_stats(fs, &st);
	if (!ret && target(arg, st.total_bytes, dev->size, &size)) {
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

/*
 * The size of the image file or device of the arborfs mount that path is
 * on: its source in /proc/self/mountinfo (the daemon names it with
 * fsname=), found by the device number of path; 0 if unknown.
 */
static uint64_t mount_image_size(int fd)
{
	char *line = NULL, want[32];
	uint64_t size = 0;
	size_t cap = 0;
	struct stat st;
	FILE *f;

	if (fstat(fd, &st))
		return 0;
	snprintf(want, sizeof(want), "%u:%u", major(st.st_dev),
		 minor(st.st_dev));
	f = fopen("/proc/self/mountinfo", "r");
	if (!f)
		return 0;
	while (getline(&line, &cap, f) > 0) {
		/* id parent maj:min root mountpoint ... - type source ... */
		char *sep = strstr(line, " - "), *p, *src, *d;
		struct stat ist;
		int fields = 0;

		for (p = line; sep && p < sep && fields < 2; p++)
			if (*p == ' ')
				fields++;
		if (!sep || fields < 2 || strncmp(p, want, strlen(want)) ||
		    p[strlen(want)] != ' ')
			continue;
		if (strncmp(sep + 3, "fuse.arborfs ", 13))
			continue;
		src = sep + 3 + 13;
		src[strcspn(src, " \n")] = '\0';
		/* mountinfo's octal escapes: \040 for a space, ... */
		for (p = d = src; *p; p++, d++) {
			if (p[0] == '\\' && p[1] && p[2] && p[3]) {
				*d = (char)(((p[1] - '0') << 6) |
					    ((p[2] - '0') << 3) | (p[3] - '0'));
				p += 3;
			} else {
				*d = *p;
			}
		}
		*d = '\0';
		if (stat(src, &ist) == 0 && S_ISREG(ist.st_mode))
			size = (uint64_t)ist.st_size;
	}
	free(line);
	fclose(f);
	return size;
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
	if (target(arg, u.total, strcmp(arg, "max") ? 0 : mount_image_size(fd),
		   &size)) {
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

static void deprecated(void)
{
	fprintf(stderr, "arbor filesystem resize: note: PATH before SIZE is "
			"deprecated; the order is SIZE PATH (as btrfs)\n");
}

int cli_resize(int argc, char **argv)
{
	if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		resize_usage(stdout);
		return 0;
	}
	/* resize SIZE --image IMG, resize --image IMG SIZE */
	if (argc == 4 && !strcmp(argv[2], "--image") && is_size(argv[1]))
		return resize_image(argv[3], argv[1]);
	if (argc == 4 && !strcmp(argv[1], "--image") && is_size(argv[3]))
		return resize_image(argv[2], argv[3]);
	/* resize SIZE PATH; the older resize PATH SIZE */
	if (argc == 3 && is_size(argv[1]) &&
	    (!is_size(argv[2]) || access(argv[1], F_OK)))
		return resize_mount(argv[2], argv[1]);
	if (argc == 3 && is_size(argv[2])) {
		deprecated();
		return resize_mount(argv[1], argv[2]);
	}
	if (argc == 3 || argc == 4)
		fprintf(stderr, "arbor filesystem resize: want a size "
				"(SIZE, +SIZE, -SIZE or max) and a PATH or "
				"--image IMG\n");
	resize_usage(stderr);
	return 2;
}
