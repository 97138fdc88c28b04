// SPDX-License-Identifier: MIT
/*
 * findnew.c - "arbor subvolume find-new" and "arbor subvolume diff": what
 * changed in a subvolume since a generation, or between two subvolumes
 * (arbor/diff.h; docs/design/send.md, "Finding changes").
 *
 *   find-new [--json] PATH GEN   the subvolume holding PATH
 *   diff [--json] SNAP_A SNAP_B  from A to B (two snapshots of one tree)
 *
 * On a mount through ARB_IOC_FIND_NEW / ARB_IOC_DIFF, page by page
 * (root or CAP_SYS_ADMIN, as btrfs's find-new); on an unmounted image
 * (--image IMG, paths from its top-level subvolume) through the library.
 * Both feed one printer, an inode at a time.
 *
 * Exit status: 0 ok, 1 failed, 2 bad usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arbor/arbor.h>
#include <arbor/diff.h>
#include <arbor/ioctl.h>
#include <arbor/subvol.h>

#include "arbor_cli.h"
#include "arbor_help.h"

static const char *cmd_name = "find-new";

#define err(...)                                                               \
	do {                                                                   \
		fprintf(stderr, "arbor subvolume %s: ", cmd_name);             \
		fprintf(stderr, __VA_ARGS__);                                  \
		fputc('\n', stderr);                                           \
	} while (0)

/* ---- the printer -------------------------------------------------------------- */

struct printer {
	bool json, diff;
	uint64_t count;
};

static const struct {
	uint32_t bit;
	const char *name;
} flag_names[] = {
	{ ARB_CHANGE_NEW, "new" },	   { ARB_CHANGE_DELETED, "deleted" },
	{ ARB_CHANGE_DATA, "data" },	   { ARB_CHANGE_SIZE, "size" },
	{ ARB_CHANGE_META, "meta" },	   { ARB_CHANGE_XATTR, "xattr" },
	{ ARB_CHANGE_NAME, "name" },	   { ARB_CHANGE_ENTRIES, "entries" },
};

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

/* a path for a terminal: control characters escaped */
static void text_str(const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c < 0x20 || c == 0x7f || c == '\\')
			printf("\\x%02x", c);
		else
			putchar(c);
	}
}

static void print_flags(uint32_t flags, bool json)
{
	bool first = true;
	size_t i;

	for (i = 0; i < sizeof(flag_names) / sizeof(flag_names[0]); i++) {
		if (!(flags & flag_names[i].bit))
			continue;
		if (json)
			printf("%s\"%s\"", first ? "" : ", ", flag_names[i].name);
		else
			printf("%s%s", first ? "" : ",", flag_names[i].name);
		first = false;
	}
}

static void print_paths(size_t n, char *const *v, bool json)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (json) {
			printf("%s", i ? ", " : "");
			json_str(v[i]);
		} else {
			printf("%s", i ? ", " : "");
			text_str(v[i]);
		}
	}
}

/* what diff calls the change */
static const char *diff_kind(uint32_t f)
{
	if (f & ARB_CHANGE_NEW)
		return "created";
	if (f & ARB_CHANGE_DELETED)
		return "deleted";
	if (f & ARB_CHANGE_NAME)
		return "renamed";
	return "modified";
}

static void print_change(struct printer *p, const struct arb_change *c)
{
	size_t i;

	if (p->json) {
		printf("%s\n    {\"ino\": %" PRIu64 ", \"objectid\": %" PRIu64,
		       p->count ? "," : "", c->ino, c->obj);
		if (p->diff)
			printf(", \"kind\": \"%s\"", diff_kind(c->flags));
		printf(", \"flags\": [");
		print_flags(c->flags, true);
		printf("], \"mode\": %u, \"size\": %" PRIu64, c->mode, c->size);
		if (p->diff)
			printf(", \"old_size\": %" PRIu64, c->old_size);
		printf(", \"transid\": %" PRIu64 ", \"paths\": [", c->transid);
		print_paths(c->nr_paths, c->paths, true);
		printf("]");
		if (p->diff) {
			printf(", \"old_paths\": [");
			print_paths(c->nr_old_paths, c->old_paths, true);
			printf("]");
		}
		printf(", \"ranges\": [");
		for (i = 0; i < c->nr_ranges; i++)
			printf("%s[%" PRIu64 ", %" PRIu64 "]", i ? ", " : "",
			       c->ranges[i].off, c->ranges[i].len);
		printf("]}");
		p->count++;
		return;
	}
	p->count++;
	if (p->diff) {
		const char *k = diff_kind(c->flags);

		printf("%-9s", k);
		if (c->flags & ARB_CHANGE_NAME &&
		    !(c->flags & (ARB_CHANGE_NEW | ARB_CHANGE_DELETED))) {
			print_paths(c->nr_old_paths, c->old_paths, false);
			printf(" -> ");
		}
		print_paths(c->nr_paths, c->paths, false);
		if (!strcmp(k, "modified") || !strcmp(k, "renamed")) {
			uint32_t rest = c->flags & ~ARB_CHANGE_NAME;

			if (rest) {
				printf(" (");
				print_flags(rest, false);
				printf(")");
			}
		}
		putchar('\n');
		return;
	}
	printf("inode %" PRIu64 " ", c->ino);
	print_flags(c->flags, false);
	printf(" size %" PRIu64 " transid %" PRIu64 " ", c->size, c->transid);
	print_paths(c->nr_paths ? 1 : 0, c->paths, false);
	if (!c->nr_paths)
		printf("(no path)");
	putchar('\n');
	for (i = 1; i < c->nr_paths; i++) {
		printf("\tlink ");
		text_str(c->paths[i]);
		putchar('\n');
	}
	for (i = 0; i < c->nr_ranges; i++)
		printf("\tdata %" PRIu64 "+%" PRIu64 "\n", c->ranges[i].off,
		       c->ranges[i].len);
}

static void print_begin(struct printer *p)
{
	if (p->json)
		printf("{\"changes\": [");
}

static void print_end(struct printer *p, uint64_t generation,
		      const struct arb_diff_stats *st)
{
	if (p->json) {
		printf("%s],\n  \"generation\": %" PRIu64
		       ",\n  \"inodes\": %" PRIu64 ",\n  \"nodes_read\": %" PRIu64
		       ",\n  \"nodes_visited\": %" PRIu64
		       ",\n  \"subtrees_skipped\": %" PRIu64 "}\n",
		       p->count ? "\n  " : "", generation, p->count,
		       st->nodes_read, st->nodes_visited, st->subtrees_skipped);
		return;
	}
	if (!p->diff)
		printf("transid marker was %" PRIu64 "\n", generation);
}

static int print_cb(void *ctx, const struct arb_change *c)
{
	print_change(ctx, c);
	return 0;
}

/* ---- on a mount ----------------------------------------------------------------- */

/* an inode put together from the records of the pages */
struct asm_rec {
	bool have;
	struct arb_change c;
	char **paths, **old;
	size_t npaths, nold, cap_p, cap_o;
	struct arb_change_range *ranges;
	size_t nranges, cap_r;
};

static void asm_reset(struct asm_rec *a)
{
	size_t i;

	for (i = 0; i < a->npaths; i++)
		free(a->paths[i]);
	for (i = 0; i < a->nold; i++)
		free(a->old[i]);
	a->npaths = a->nold = a->nranges = 0;
	a->have = false;
}

static void asm_free(struct asm_rec *a)
{
	asm_reset(a);
	free(a->paths);
	free(a->old);
	free(a->ranges);
}

static void *grow(void *v, size_t *cap, size_t n, size_t elem)
{
	void *nv;

	if (n < *cap)
		return v;
	*cap = *cap ? 2 * *cap : 8;
	nv = realloc(v, *cap * elem);
	if (!nv) {
		perror("arbor");
		exit(1);
	}
	return nv;
}

static void asm_flush(struct printer *p, struct asm_rec *a)
{
	if (!a->have)
		return;
	a->c.paths = a->paths;
	a->c.nr_paths = a->npaths;
	a->c.old_paths = a->old;
	a->c.nr_old_paths = a->nold;
	a->c.ranges = a->ranges;
	a->c.nr_ranges = a->nranges;
	print_change(p, &a->c);
	asm_reset(a);
}

/* the records of one page; -1 after a message if they do not parse */
static int asm_page(struct printer *p, struct asm_rec *a,
		    const struct arb_ioc_diff *d)
{
	size_t off = 0;

	if (d->used > sizeof(d->data)) {
		err("the daemon's answer is malformed (%u bytes of %zu)",
		    d->used, sizeof(d->data));
		return -1;
	}
	while (off < d->used) {
		struct arb_ioc_diff_rec h;
		const uint8_t *pl;

		if (d->used - off < sizeof(h))
			goto bad;
		memcpy(&h, d->data + off, sizeof(h));
		pl = d->data + off + sizeof(h);
		if (h.len > d->used - off - sizeof(h))
			goto bad;
		switch (h.type) {
		case ARB_IOC_DIFF_REC_INODE: {
			struct arb_ioc_diff_inode in;

			if (h.len < sizeof(in))
				goto bad;
			memcpy(&in, pl, sizeof(in));
			asm_flush(p, a);
			memset(&a->c, 0, sizeof(a->c));
			a->c.ino = in.ino;
			a->c.obj = in.obj;
			a->c.flags = in.flags;
			a->c.mode = in.mode;
			a->c.size = in.size;
			a->c.old_size = in.old_size;
			a->c.transid = in.transid;
			a->have = true;
			break;
		}
		case ARB_IOC_DIFF_REC_PATH:
		case ARB_IOC_DIFF_REC_OLD_PATH: {
			char *s;

			if (!a->have || !h.len || pl[h.len - 1] != '\0')
				goto bad;
			s = strdup((const char *)pl);
			if (!s) {
				perror("arbor");
				exit(1);
			}
			if (h.type == ARB_IOC_DIFF_REC_PATH) {
				a->paths = grow(a->paths, &a->cap_p, a->npaths,
						sizeof(char *));
				a->paths[a->npaths++] = s;
			} else {
				a->old = grow(a->old, &a->cap_o, a->nold,
					      sizeof(char *));
				a->old[a->nold++] = s;
			}
			break;
		}
		case ARB_IOC_DIFF_REC_RANGE: {
			struct arb_ioc_diff_range r;

			if (!a->have || h.len < sizeof(r))
				goto bad;
			memcpy(&r, pl, sizeof(r));
			a->ranges = grow(a->ranges, &a->cap_r, a->nranges,
					 sizeof(*a->ranges));
			a->ranges[a->nranges].off = r.off;
			a->ranges[a->nranges].len = r.len;
			a->nranges++;
			break;
		}
		default:
			break; /* a newer daemon's: skipped */
		}
		off += (sizeof(h) + h.len + 7) & ~(size_t)7;
	}
	return 0;
bad:
	err("the daemon's answer is malformed at byte %zu of a page", off);
	return -1;
}

static void ioc_error(const char *path, int e)
{
	switch (e) {
	case ENOTTY:
		err("%s: not on a mounted arborfs (or its daemon is too old for "
		    "%s)", path, cmd_name);
		break;
	case EPERM:
		err("%s: permission denied (needs root or CAP_SYS_ADMIN)",
		    path);
		break;
	case ENOENT:
		err("%s: no such subvolume (deleted?)", path);
		break;
	case EUCLEAN:
		err("%s: the subvolume's tree is damaged (the daemon's log says "
		    "where; run fsck.arborfs)", path);
		break;
	default:
		err("%s: %s", path, strerror(e));
	}
}

static int mount_walk(int fd, const char *path, unsigned long cmd,
		      struct arb_ioc_diff *d, struct printer *p)
{
	struct asm_rec a = { 0 };
	struct arb_diff_stats st = { 0 };
	uint64_t generation = 0;
	bool first = true;
	int rc = 0;

	print_begin(p);
	for (;;) {
		if (ioctl(fd, cmd, d)) {
			ioc_error(path, errno);
			rc = 1;
			break;
		}
		if (first)
			generation = d->generation;
		first = false;
		st.nodes_read += d->nodes_read;
		st.nodes_visited += d->nodes_visited;
		st.subtrees_skipped += d->subtrees_skipped;
		if (asm_page(p, &a, d)) {
			rc = 1;
			break;
		}
		if (d->done)
			break;
		d->used = 0;
	}
	asm_flush(p, &a);
	asm_free(&a);
	if (!rc)
		print_end(p, generation, &st);
	else if (p->json)
		printf("]}\n");
	return rc;
}

/* the subvolume id holding the inode fd names */
static int mount_subvol(int fd, const char *path, uint64_t *id)
{
	struct arb_ioc_subvol_info in;

	memset(&in, 0, sizeof(in));
	if (ioctl(fd, ARB_IOC_SUBVOL_INFO, &in)) {
		ioc_error(path, errno);
		return -1;
	}
	*id = in.e.id;
	return 0;
}

static int mount_find_new(const char *path, uint64_t gen, struct printer *p)
{
	struct arb_ioc_diff *d;
	int fd, rc;

	fd = cli_open_mount(path);
	if (fd < 0)
		return 1;
	/* the kernel's dirty pages reach the daemon first */
	(void)syncfs(fd);
	d = calloc(1, sizeof(*d));
	if (!d) {
		perror("arbor");
		exit(1);
	}
	d->gen = gen;
	rc = mount_walk(fd, path, ARB_IOC_FIND_NEW, d, p);
	free(d);
	close(fd);
	return rc;
}

static int mount_diff(const char *pa, const char *pb, struct printer *p)
{
	struct arb_ioc_diff *d;
	struct stat sa, sb;
	uint64_t ida, idb;
	int fa, fb, rc = 1;

	fa = cli_open_mount(pa);
	if (fa < 0)
		return 1;
	fb = cli_open_mount(pb);
	if (fb < 0) {
		close(fa);
		return 1;
	}
	if (fstat(fa, &sa) || fstat(fb, &sb)) {
		err("%s: %s", pa, strerror(errno));
		goto out;
	}
	if (sa.st_dev != sb.st_dev) {
		err("%s and %s are not on the same arborfs mount", pa, pb);
		goto out;
	}
	if (mount_subvol(fa, pa, &ida) || mount_subvol(fb, pb, &idb))
		goto out;
	(void)syncfs(fa);
	d = calloc(1, sizeof(*d));
	if (!d) {
		perror("arbor");
		exit(1);
	}
	d->id_a = ida;
	d->id_b = idb;
	rc = mount_walk(fa, pa, ARB_IOC_DIFF, d, p);
	free(d);
out:
	close(fa);
	close(fb);
	return rc;
}

/* ---- on an image ------------------------------------------------------------------ */

static int image_open(const char *image, struct arb_fs **fs)
{
	struct arb_fs_opts o;
	const char *why = NULL;
	int ret;

	arb_fs_opts_default(&o);
	o.readonly = true;
	o.commit_interval = 0;
	ret = arb_fs_open_image(image, &o, fs, &why);
	if (ret) {
		fprintf(stderr, "arbor: %s: cannot open: %s\n", image,
			arb_reason(ret, why));
		return 1;
	}
	return 0;
}

/* the subvolume holding path in the image; -1 after a message */
static int image_subvol(struct arb_fs *fs, const char *image, const char *path,
			uint64_t *id)
{
	struct arb_subvol_info si;
	uint64_t ino;
	int ret;

	ret = cli_image_resolve(fs, path, &ino);
	if (!ret)
		ret = arb_subvol_info(fs, ino, &si);
	if (ret) {
		err("%s: %s: %s", image, path, arb_reason(ret, NULL));
		return -1;
	}
	*id = si.id;
	return 0;
}

static int image_report(const char *image, int ret)
{
	if (ret == -EUCLEAN)
		err("%s: a damaged tree (see the message above; run "
		    "fsck.arborfs)", image);
	else
		err("%s: %s", image, arb_reason(ret, NULL));
	return 1;
}

static int image_find_new(const char *image, const char *path, uint64_t gen,
			  struct printer *p)
{
	struct arb_diff_stats st;
	struct arb_fs *fs;
	uint64_t id;
	int ret, rc = 0;

	if (image_open(image, &fs))
		return 1;
	if (image_subvol(fs, image, path, &id)) {
		arb_fs_close(fs);
		return 1;
	}
	print_begin(p);
	ret = arb_find_new(fs, id, gen, 0, print_cb, p, &st);
	if (ret) {
		if (p->json)
			printf("]}\n");
		rc = image_report(image, ret);
	} else {
		print_end(p, st.generation, &st);
	}
	arb_fs_close(fs);
	return rc;
}

static int image_diff(const char *image, const char *pa, const char *pb,
		      struct printer *p)
{
	struct arb_diff_stats st;
	struct arb_fs *fs;
	uint64_t ida, idb;
	int ret, rc = 0;

	if (image_open(image, &fs))
		return 1;
	if (image_subvol(fs, image, pa, &ida) ||
	    image_subvol(fs, image, pb, &idb)) {
		arb_fs_close(fs);
		return 1;
	}
	print_begin(p);
	ret = arb_tree_diff(fs, ida, idb, 0, print_cb, p, &st);
	if (ret) {
		if (p->json)
			printf("]}\n");
		rc = image_report(image, ret);
	} else {
		print_end(p, st.generation, &st);
	}
	arb_fs_close(fs);
	return rc;
}

/* ---- the commands ------------------------------------------------------------------- */

static bool parse_gen(const char *s, uint64_t *out)
{
	char *end;

	if (!*s || *s == '-' || *s == '+')
		return false;
	errno = 0;
	*out = strtoull(s, &end, 10);
	return !errno && !*end;
}

/* argv[1] is "find-new" or "diff" */
int cli_subvol_diff(int argc, char **argv)
{
	static const struct option lo[] = { { "image", 1, 0, 'i' },
					    { "json", 0, 0, 'j' },
					    { "help", 0, 0, 'h' },
					    { 0, 0, 0, 0 } };
	struct printer p = { 0 };
	const char *image = NULL;
	bool diff = !strcmp(argv[1], "diff");
	uint64_t gen;
	int c;

	cmd_name = diff ? "diff" : "find-new";
	optind = 2;
	while ((c = getopt_long(argc, argv, "i:jh", lo, NULL)) != -1) {
		switch (c) {
		case 'i': image = optarg; break;
		case 'j': p.json = true; break;
		case 'h': fputs(ARBOR_HELP_SUBVOLUME, stdout); return 0;
		default:
			fprintf(stderr, "Try 'arbor subvolume --help'.\n");
			return 2;
		}
	}
	p.diff = diff;
	argv += optind;
	argc -= optind;
	if (argc != 2) {
		err(diff ? "want SNAP_A and SNAP_B"
			 : "want PATH and GEN (a generation: arbor filesystem "
			   "generation, or the marker of the last find-new)");
		fprintf(stderr, "Try 'arbor subvolume --help'.\n");
		return 2;
	}
	if (diff)
		return image ? image_diff(image, argv[0], argv[1], &p)
			     : mount_diff(argv[0], argv[1], &p);
	if (!parse_gen(argv[1], &gen)) {
		err("'%s' is not a generation (a number from 0)", argv[1]);
		return 2;
	}
	return image ? image_find_new(image, argv[0], gen, &p)
		     : mount_find_new(argv[0], gen, &p);
}
