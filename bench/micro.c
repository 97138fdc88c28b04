/* SPDX-License-Identifier: MIT */
/*
 * micro.c - storage-core benchmark: in-process B-tree rates.
 *
 *   bench/micro [-n N[,N...]] [-s NODESIZE] [-c COMMIT_EVERY] [-f IMAGE]
 *               [-m single|dup] [--json FILE]
 *
 * For each N: insert N random keys (24-byte items) committing every
 * COMMIT_EVERY inserts, look all of them up in random order, scan them in
 * order with a cursor, then delete them all.  Prints operations per second
 * for each phase and the bytes written to the image per committed insert
 * (write amplification of the tree: nodes, superblocks, flushes).  The
 * image is a sparse file (default /tmp/arbor-micro.img) so real pwrite and
 * fdatasync costs are included; -f /dev/shm/x.img measures CPU cost only.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core.h"

#define TREE 300ULL

/* -m: copies of every tree node (0 = the library default, dup) */
static unsigned meta_copies;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

static void die(const char *what, int err)
{
	fprintf(stderr, "micro: %s: %s\n", what, strerror(-err));
	exit(1);
}

static uint64_t dev_written(struct arb_dev *d)
{
	uint64_t s = 0;
	for (int i = 0; i < 4; i++)
		s += d->bytes_written[i];
	return s;
}

static void run(uint64_t n, uint32_t nodesize, uint64_t commit_every,
		const char *path, FILE *json, bool first)
{
	struct arb_format_opts fo = { 0 };
	struct arb_dev *dev;
	struct arb_vol *vol;
	struct arb_root *root;
	struct arb_txn *t;
	uint64_t *keys, seed = 42, size, w0, w1;
	uint8_t val[24] = { 0 };
	double t0, ins, look, scan, del;
	int ret, levels;

	/* room for the tree several times over (COW, pinned blocks) */
	size = n * 200 + (256ULL << 20);
	unlink(path);
	ret = arb_dev_open_file(path, false, size, &dev);
	if (ret)
		die(path, ret);
	fo.nodesize = nodesize;
	fo.meta_copies = meta_copies;
	ret = arb_vol_format(dev, &fo);
	if (!ret)
		ret = arb_vol_open(dev, NULL, &vol);
	if (ret)
		die("format/open", ret);
	keys = malloc(n * sizeof(*keys));
	if (!keys)
		die("malloc", -ENOMEM);
	for (uint64_t i = 0; i < n; i++)
		keys[i] = rnd(&seed);

	ret = arb_txn_begin(vol, &t);
	if (!ret)
		ret = arb_root_create(t, TREE, &root);
	if (!ret)
		ret = arb_txn_commit(t);
	if (ret)
		die("create tree", ret);

	w0 = dev_written(dev);
	t0 = now();
	ret = arb_txn_begin(vol, &t);
	for (uint64_t i = 0; i < n && !ret; i++) {
		struct arb_key k = { keys[i], ARB_TEST_ITEM, 0 };
		memcpy(val, &keys[i], 8);
		ret = arb_insert_item(t, root, &k, val, sizeof(val));
		if (ret == -EEXIST)
			ret = 0; /* a 64-bit collision: harmless */
		if (!ret && (i + 1) % commit_every == 0) {
			ret = arb_txn_commit(t);
			if (!ret)
				ret = arb_txn_begin(vol, &t);
		}
	}
	if (!ret)
		ret = arb_txn_commit(t);
	if (ret)
		die("insert", ret);
	ins = now() - t0;
	w1 = dev_written(dev);

	/* lookups in a different random order */
	for (uint64_t i = n - 1; i > 0; i--) {
		uint64_t j = rnd(&seed) % (i + 1), x = keys[i];
		keys[i] = keys[j];
		keys[j] = x;
	}
	t0 = now();
	for (uint64_t i = 0; i < n; i++) {
		struct arb_key k = { keys[i], ARB_TEST_ITEM, 0 };
		ret = arb_lookup_item(root, &k, val, sizeof(val));
		if (ret != sizeof(val))
			die("lookup", ret < 0 ? ret : -EIO);
	}
	look = now() - t0;

	t0 = now();
	{
		struct arb_iter it;
		struct arb_key k = { 0, 0, 0 };
		uint64_t cnt = 0;
		arb_iter_init(&it, root);
		for (ret = arb_iter_seek(&it, &k); ret == 0;
		     ret = arb_iter_next(&it))
			cnt++;
		arb_iter_release(&it);
		if (ret < 0 || cnt < n * 99 / 100)
			die("scan", ret < 0 ? ret : -EIO);
	}
	scan = now() - t0;
	levels = arb_level(root->node) + 1;

	t0 = now();
	ret = arb_txn_begin(vol, &t);
	for (uint64_t i = 0; i < n && !ret; i++) {
		struct arb_key k = { keys[i], ARB_TEST_ITEM, 0 };
		ret = arb_del_item(t, root, &k);
		if (ret == -ENOENT)
			ret = 0;
		if (!ret && (i + 1) % commit_every == 0) {
			ret = arb_txn_commit(t);
			if (!ret)
				ret = arb_txn_begin(vol, &t);
		}
	}
	if (!ret)
		ret = arb_txn_commit(t);
	if (ret)
		die("delete", ret);
	del = now() - t0;

	printf("%10llu %12.0f %12.0f %12.0f %12.0f %10.1f %6d\n",
	       (unsigned long long)n, n / ins, n / look, n / scan, n / del,
	       (double)(w1 - w0) / n, levels);
	if (json)
		fprintf(json,
			"%s{\"n\":%llu,\"nodesize\":%u,\"commit_every\":%llu,"
			"\"insert_per_s\":%.0f,\"lookup_per_s\":%.0f,"
			"\"scan_per_s\":%.0f,\"delete_per_s\":%.0f,"
			"\"bytes_written_per_insert\":%.1f}\n",
			first ? "" : ",", (unsigned long long)n, nodesize,
			(unsigned long long)commit_every, n / ins, n / look,
			n / scan, n / del, (double)(w1 - w0) / n);
	free(keys);
	arb_vol_close(vol);
	arb_dev_destroy(dev);
	unlink(path);
}

int main(int argc, char **argv)
{
	const char *list = "10000,100000,1000000", *path = "/tmp/arbor-micro.img";
	const char *json_path = NULL;
	uint32_t nodesize = 16384;
	uint64_t commit_every = 10000;
	FILE *json = NULL;
	static const struct option lo[] = { { "json", 1, 0, 'j' }, { 0, 0, 0, 0 } };
	int c;
	bool first = true;

	while ((c = getopt_long(argc, argv, "n:s:c:f:m:h", lo, NULL)) != -1) {
		switch (c) {
		case 'n': list = optarg; break;
		case 's': nodesize = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'c': commit_every = strtoull(optarg, NULL, 0); break;
		case 'f': path = optarg; break;
		case 'm': meta_copies = strcmp(optarg, "single") ? 2 : 1; break;
		case 'j': json_path = optarg; break;
		default:
			fprintf(stderr, "usage: micro [-n N[,N...]] [-s NODESIZE] "
					"[-c COMMIT_EVERY] [-f IMAGE] [-m single|dup] "
					"[--json FILE]\n");
			return c == 'h' ? 0 : 2;
		}
	}
	if (!commit_every)
		commit_every = 1;
	if (json_path) {
		json = fopen(json_path, "w");
		if (!json) {
			perror(json_path);
			return 1;
		}
		fprintf(json, "[\n");
	}
	printf("nodesize %u, commit every %llu inserts, image %s\n", nodesize,
	       (unsigned long long)commit_every, path);
	printf("%10s %12s %12s %12s %12s %10s %6s\n", "N", "insert/s",
	       "lookup/s", "scan/s", "delete/s", "B/insert", "levels");
	for (char *s = strdup(list), *p = s, *tok; (tok = strsep(&p, ","));) {
		uint64_t n = strtoull(tok, NULL, 0);
		if (n)
			run(n, nodesize, commit_every, path, json, first);
		first = false;
		if (!p)
			free(s);
	}
	if (json) {
		fprintf(json, "]\n");
		fclose(json);
	}
	return 0;
}
