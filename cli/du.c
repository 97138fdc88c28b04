// SPDX-License-Identifier: MIT
/*
 * du.c - "arbor filesystem du [--json] PATH...": what the data of files
 * and trees takes, file bytes against stored bytes, for compression
 * (ARB_IOC_FILE_SPACE on each regular file; docs/design/compress.md).
 * A tree is walked without following symlinks or leaving its mount;
 * a file with several links counts once.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <search.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arbor/ioctl.h>

#include "arbor_cli.h"

struct du_sum {
	uint64_t files, bytes, stored, zbytes, zstored, prealloc, extents,
		zextents;
	unsigned errors;
};

/* the walk's state: nftw takes no argument */
static struct du_sum *cur;
static void *seen; /* tsearch tree of (dev, ino) of multi-link files */

struct dev_ino {
	dev_t dev;
	ino_t ino;
};

static int di_cmp(const void *a, const void *b)
{
	const struct dev_ino *x = a, *y = b;

	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

static int one_file(const char *path, const struct stat *st)
{
	struct arb_ioc_file_space a;
	int fd;

	if (st->st_nlink > 1) {
		struct dev_ino *k = malloc(sizeof(*k)), **f;
		if (!k)
			return -1;
		k->dev = st->st_dev;
		k->ino = st->st_ino;
		f = tsearch(k, &seen, di_cmp);
		if (!f) {
			free(k);
			return -1;
		}
		if (*f != k) {
			free(k);
			return 0; /* counted under another name */
		}
	}
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "arbor filesystem du: %s: %s\n", path,
			strerror(errno));
		cur->errors++;
		return 0;
	}
	memset(&a, 0, sizeof(a));
	a.size = sizeof(a);
	if (ioctl(fd, ARB_IOC_FILE_SPACE, &a) < 0) {
		fprintf(stderr, "arbor filesystem du: %s: %s%s\n", path,
			strerror(errno),
			errno == ENOTTY ? " (not on arborfs, or an older daemon)"
					: "");
		cur->errors++;
		close(fd);
		return 0;
	}
	close(fd);
	cur->files++;
	cur->bytes += a.bytes;
	cur->stored += a.stored;
	cur->zbytes += a.compressed_bytes;
	cur->zstored += a.compressed_stored;
	cur->prealloc += a.prealloc_bytes;
	cur->extents += a.extents;
	cur->zextents += a.compressed_extents;
	return 0;
}

static int walk_fn(const char *path, const struct stat *st, int type,
		   struct FTW *ftw)
{
	(void)ftw;
	if (type == FTW_F && S_ISREG(st->st_mode))
		return one_file(path, st);
	if (type == FTW_DNR || type == FTW_NS) {
		fprintf(stderr, "arbor filesystem du: %s: cannot read\n", path);
		cur->errors++;
	}
	return 0;
}

static void human(char *b, size_t n, uint64_t v)
{
	static const char *u[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double d = (double)v;
	int i = 0;

	while (d >= 1024 && i < 5) {
		d /= 1024;
		i++;
	}
	if (i == 0)
		snprintf(b, n, "%llu B", (unsigned long long)v);
	else
		snprintf(b, n, "%.2f %s", d, u[i]);
}

static void du_usage(FILE *f)
{
	fputs("usage: arbor filesystem du [--json] [--bytes] PATH...\n"
	      "  file bytes with data, the bytes they take in the image, the\n"
	      "  ratio, and the part in compressed extents, of each file or\n"
	      "  tree (links counted once, symlinks not followed)\n",
	      f);
}

/* "arbor filesystem du ..." (argv[0] is "du") */
int cli_du(int argc, char **argv)
{
	static const struct option lo[] = { { "json", 0, 0, 'j' },
					    { "bytes", 0, 0, 'b' },
					    { "help", 0, 0, 'h' },
					    { 0, 0, 0, 0 } };
	bool json = false, raw = false;
	int c, rc = 0;

	optind = 1;
	while ((c = getopt_long(argc, argv, "jbh", lo, NULL)) != -1) {
		switch (c) {
		case 'j': json = true; break;
		case 'b': raw = true; break;
		case 'h': du_usage(stdout); return 0;
		default: du_usage(stderr); return 2;
		}
	}
	if (optind >= argc) {
		du_usage(stderr);
		return 2;
	}
	if (json)
		printf("{\"paths\": [");
	else
		printf("%14s %14s %6s %14s %9s  %s\n", "bytes", "stored",
		       "ratio", "compressed", "files", "path");
	for (int i = optind; i < argc; i++) {
		struct du_sum s = { 0 };
		struct stat st;
		char b1[32], b2[32], b3[32];

		cur = &s;
		if (lstat(argv[i], &st) < 0) {
			fprintf(stderr, "arbor filesystem du: %s: %s\n",
				argv[i], strerror(errno));
			rc = 1;
			continue;
		}
		if (S_ISDIR(st.st_mode)) {
			if (nftw(argv[i], walk_fn, 64, FTW_PHYS | FTW_MOUNT) <
			    0) {
				fprintf(stderr,
					"arbor filesystem du: %s: %s\n",
					argv[i], strerror(errno));
				s.errors++;
			}
		} else if (S_ISREG(st.st_mode) && one_file(argv[i], &st) < 0) {
			s.errors++;
		}
		if (s.errors)
			rc = 1;
		if (json) {
			printf("%s\n {\"path\": \"", i > optind ? "," : "");
			for (const char *p = argv[i]; *p; p++)
				printf(*p == '"' || *p == '\\' ? "\\%c"
				       : (unsigned char)*p < 0x20 ? "?"
								  : "%c",
				       *p);
			printf("\", \"files\": %llu, \"bytes\": %llu, "
			       "\"stored\": %llu, \"compressed_bytes\": %llu, "
			       "\"compressed_stored\": %llu, "
			       "\"prealloc_bytes\": %llu, \"extents\": %llu, "
			       "\"compressed_extents\": %llu, \"errors\": %u}",
			       (unsigned long long)s.files,
			       (unsigned long long)s.bytes,
			       (unsigned long long)s.stored,
			       (unsigned long long)s.zbytes,
			       (unsigned long long)s.zstored,
			       (unsigned long long)s.prealloc,
			       (unsigned long long)s.extents,
			       (unsigned long long)s.zextents, s.errors);
			continue;
		}
		if (raw) {
			snprintf(b1, sizeof(b1), "%llu", (unsigned long long)s.bytes);
			snprintf(b2, sizeof(b2), "%llu", (unsigned long long)s.stored);
			snprintf(b3, sizeof(b3), "%llu", (unsigned long long)s.zbytes);
		} else {
			human(b1, sizeof(b1), s.bytes);
			human(b2, sizeof(b2), s.stored);
			human(b3, sizeof(b3), s.zbytes);
		}
		printf("%14s %14s %6.3f %14s %9llu  %s\n", b1, b2,
		       s.bytes ? (double)s.stored / (double)s.bytes : 1.0, b3,
		       (unsigned long long)s.files, argv[i]);
	}
	if (json)
		printf("\n]}\n");
	tdestroy(seen, free);
	seen = NULL;
	return rc;
}
