/* SPDX-License-Identifier: MIT */
/*
 * test_fs_model.c - random operations on the POSIX layer against an
 * in-memory model (file bytes, directories, hard links).  Every result is
 * compared with the model's prediction; the whole tree is compared every
 * few dozen steps, after syncs and after close/reopen, and the checker
 * must stay clean.  ARBOR_TEST_SEED=<seed> repeats a run.
 */
#include <errno.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arbor/arbor.h"
#include "core.h"
#include "testutil.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

#define MiB (1024ULL * 1024)
#define MAX_NODES 2048
#define MAX_FILE (2 * MiB)
#define NNAMES 12


/* ---- the model ----------------------------------------------------------- */

enum { M_FREE = 0, M_FILE, M_DIR };

struct ment {
	char name[24];
	int node;
};

struct mnode {
	int type;
	uint64_t ino;
	uint32_t nlink;
	/* files */
	uint8_t *data;
	size_t size, cap;
	/* directories */
	int parent;
	struct ment *ents;
	int nents, capents;
};

static struct mnode nodes[MAX_NODES];
/* runs 2 and 3: -o compress, and data that compresses (fill_rand) */
static bool zmode;
static struct arb_dev *mem;
static struct arb_fs *fs;
static uint64_t rs;
static const struct arb_cred cred = { 0, 0 };

static void fs_open_now(void)
{
	struct arb_fs_opts o;
	const char *why = NULL;
	int ret;

	arb_fs_opts_default(&o);
	o.commit_interval = 0;
	if (zmode) {
		o.compress = ARB_COMPRESS_ZLIB;
		/* every level stores the same format; force keeps trying
		 * files whose start did not shrink */
		o.compress_level = (uint8_t)(1 + tu_rand_range(&rs, 9));
		o.compress_force = tu_rand_range(&rs, 2);
	}
	ret = arb_fs_open(tu_dev_borrow(mem), &o, &fs, &why);
	ck_assert_msg(ret == 0, "open: %d %s", ret, why ? why : "");
}

static int node_alloc(int type, uint64_t ino)
{
	for (int i = 1; i < MAX_NODES; i++) {
		if (nodes[i].type == M_FREE) {
			memset(&nodes[i], 0, sizeof(nodes[i]));
			nodes[i].type = type;
			nodes[i].ino = ino;
			return i;
		}
	}
	return -1;
}

static void node_free(int n)
{
	free(nodes[n].data);
	free(nodes[n].ents);
	memset(&nodes[n], 0, sizeof(nodes[n]));
}

static int dir_find(int d, const char *name)
{
	for (int i = 0; i < nodes[d].nents; i++)
		if (strcmp(nodes[d].ents[i].name, name) == 0)
			return i;
	return -1;
}

static void dir_add(int d, const char *name, int n)
{
	struct mnode *m = &nodes[d];
	if (m->nents == m->capents) {
		m->capents = m->capents ? m->capents * 2 : 8;
		m->ents = realloc(m->ents, m->capents * sizeof(*m->ents));
	}
	snprintf(m->ents[m->nents].name, sizeof(m->ents[0].name), "%s", name);
	m->ents[m->nents++].node = n;
}

static void dir_del(int d, int idx)
{
	struct mnode *m = &nodes[d];
	m->ents[idx] = m->ents[--m->nents];
}

static void file_resize(int n, size_t size)
{
	struct mnode *m = &nodes[n];
	if (size > m->cap) {
		size_t cap = m->cap ? m->cap : 4096;
		while (cap < size)
			cap *= 2;
		m->data = realloc(m->data, cap);
		m->cap = cap;
	}
	if (size > m->size)
		memset(m->data + m->size, 0, size - m->size);
	m->size = size;
}

static int pick(int type)
{
	int c[MAX_NODES], n = 0;
	for (int i = 1; i < MAX_NODES; i++)
		if (nodes[i].type == type)
			c[n++] = i;
	return n ? c[tu_rand_range(&rs, n)] : -1;
}

/* bytes the model's files hold: growth stops well before the image fills */
#define MAX_TOTAL (96 * MiB)
static uint64_t total_bytes(void)
{
	uint64_t t = 0;
	for (int i = 1; i < MAX_NODES; i++)
		if (nodes[i].type == M_FILE)
			t += nodes[i].size;
	return t;
}

static void rand_name(char *buf)
{
	snprintf(buf, 24, "n%u", (unsigned)tu_rand_range(&rs, NNAMES));
}

/* is a equal to d or an ancestor of d */
static bool is_ancestor(int a, int d)
{
	for (;;) {
		if (d == a)
			return true;
		if (d == 1)
			return false;
		d = nodes[d].parent;
	}
}

static void fill_rand(uint8_t *b, size_t len)
{
	uint64_t x = tu_rand(&rs);

	if (zmode && tu_rand_range(&rs, 3)) {
		/* compressible: words of a small alphabet, or one byte */
		int one = tu_rand_range(&rs, 4) == 0;
		for (size_t i = 0; i < len; i++)
			b[i] = one ? (uint8_t)x
				   : (uint8_t)"arbor fs\n"[tu_rand(&rs) % 9];
		return;
	}
	for (size_t i = 0; i < len; i++) {
		if (i % 8 == 0)
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		b[i] = (uint8_t)(x >> (i % 8 * 8));
	}
	/* runs of zeros too */
	if (len > 100 && tu_rand_range(&rs, 4) == 0)
		memset(b + len / 3, 0, len / 3);
}

/* ---- comparison ---------------------------------------------------------- */

struct seen {
	char names[512][24];
	uint64_t inos[512];
	int n;
};

static int collect(void *ctx, const char *name, const struct arb_stat *st,
		   uint64_t next_off)
{
	struct seen *s = ctx;
	(void)next_off;
	if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return 0;
	ck_assert_int_lt(s->n, 512);
	snprintf(s->names[s->n], 24, "%s", name);
	s->inos[s->n++] = st->ino;
	return 0;
}

static void compare_file(int n)
{
	struct mnode *m = &nodes[n];
	struct arb_stat st;
	uint8_t *buf;
	ssize_t r;

	ck_assert_int_eq(arb_fs_getattr(fs, m->ino, &st), 0);
	ck_assert_msg(st.size == m->size, "ino %llu size %llu, model %zu",
		      (unsigned long long)m->ino, (unsigned long long)st.size,
		      m->size);
	ck_assert_uint_eq(st.nlink, m->nlink);
	buf = malloc(m->size + 1);
	r = arb_fs_read(fs, m->ino, buf, m->size + 1, 0);
	ck_assert_int_eq(r, (ssize_t)m->size);
	if (m->size && memcmp(buf, m->data, m->size)) {
		size_t i = 0;
		while (buf[i] == m->data[i])
			i++;
		ck_abort_msg("ino %llu byte %zu: %u, model %u",
			     (unsigned long long)m->ino, i, buf[i], m->data[i]);
	}
	free(buf);
}

static void compare_all(void)
{
	for (int d = 1; d < MAX_NODES; d++) {
		struct seen s;
		struct arb_stat st;

		if (nodes[d].type == M_FILE) {
			compare_file(d);
			continue;
		}
		if (nodes[d].type != M_DIR)
			continue;
		s.n = 0;
		ck_assert_int_eq(arb_fs_readdir(fs, nodes[d].ino, 0, true,
						collect, &s),
				 0);
		ck_assert_int_eq(s.n, nodes[d].nents);
		for (int i = 0; i < s.n; i++) {
			int e = dir_find(d, s.names[i]);
			ck_assert_msg(e >= 0, "dir %llu: unexpected '%s'",
				      (unsigned long long)nodes[d].ino,
				      s.names[i]);
			ck_assert_uint_eq(s.inos[i],
					  nodes[nodes[d].ents[e].node].ino);
		}
		ck_assert_int_eq(arb_fs_getattr(fs, nodes[d].ino, &st), 0);
		ck_assert_uint_eq(st.nlink, nodes[d].nlink);
	}
}

static void check_fs(void)
{
	int ret = arb_fs_check(fs, stderr);
	ck_assert_msg(ret == 0, "arb_fs_check: %d", ret);
}

/* ---- operations ---------------------------------------------------------- */

static void op_create(bool dir)
{
	int d = pick(M_DIR), n;
	char name[24];
	struct arb_stat st;
	int ret, expect;

	if (pick(M_FREE) < 0)
		return; /* the model is full */
	rand_name(name);
	expect = dir_find(d, name) >= 0 ? -EEXIST : 0;
	if (dir)
		ret = arb_fs_mkdir(fs, nodes[d].ino, name, 0755, &cred, &st);
	else
		ret = arb_fs_mknod(fs, nodes[d].ino, name, S_IFREG | 0644, 0,
				   &cred, &st);
	ck_assert_int_eq(ret, expect);
	if (ret)
		return;
	n = node_alloc(dir ? M_DIR : M_FILE, st.ino);
	ck_assert_int_ge(n, 0);
	nodes[n].nlink = dir ? 2 : 1;
	nodes[n].parent = d;
	if (dir)
		nodes[d].nlink++;
	dir_add(d, name, n);
}

static void op_write(void)
{
	int n = pick(M_FILE);
	uint64_t off;
	size_t len;
	uint8_t *b;
	ssize_t r;

	if (n < 0)
		return;
	off = tu_rand_range(&rs, nodes[n].size + 20000);
	switch (tu_rand_range(&rs, 4)) {
	case 0:
		len = 1 + tu_rand_range(&rs, 100);
		break;
	case 1:
		len = 1 + tu_rand_range(&rs, 3000);
		break;
	case 2:
		len = 4096 * (1 + tu_rand_range(&rs, 32));
		off &= ~4095ULL;
		break;
	default:
		len = 1 + tu_rand_range(&rs, 300000);
	}
	if (off + len > MAX_FILE || total_bytes() + off + len > MAX_TOTAL)
		return;
	b = malloc(len);
	fill_rand(b, len);
	r = arb_fs_write(fs, nodes[n].ino, b, len, off);
	ck_assert_int_eq(r, (ssize_t)len);
	if (off + len > nodes[n].size)
		file_resize(n, off + len);
	memcpy(nodes[n].data + off, b, len);
	free(b);
}

static void op_read(void)
{
	int n = pick(M_FILE);
	uint64_t off;
	size_t len, exp;
	uint8_t *b;

	if (n < 0)
		return;
	off = tu_rand_range(&rs, nodes[n].size + 100);
	len = 1 + tu_rand_range(&rs, 200000);
	b = malloc(len);
	exp = off >= nodes[n].size ? 0
		: (len < nodes[n].size - off ? len : nodes[n].size - off);
	ck_assert_int_eq(arb_fs_read(fs, nodes[n].ino, b, len, off),
			 (ssize_t)exp);
	ck_assert(exp == 0 || memcmp(b, nodes[n].data + off, exp) == 0);
	free(b);
}

static void op_truncate(void)
{
	int n = pick(M_FILE);
	struct arb_setattr sa;
	struct arb_stat st;

	if (n < 0)
		return;
	memset(&sa, 0, sizeof(sa));
	switch (tu_rand_range(&rs, 3)) {
	case 0:
		sa.size = tu_rand_range(&rs, 3000);
		break;
	case 1:
		sa.size = tu_rand_range(&rs, nodes[n].size + 1);
		break;
	default:
		sa.size = tu_rand_range(&rs, MAX_FILE);
	}
	if (sa.size > nodes[n].size && total_bytes() + sa.size > MAX_TOTAL)
		return;
	ck_assert_int_eq(arb_fs_setattr(fs, nodes[n].ino, &sa, ARB_SET_SIZE,
					&cred, &st),
			 0);
	file_resize(n, sa.size);
}

static void op_falloc(void)
{
	int n = pick(M_FILE), mode;
	uint64_t off, len;

	if (n < 0)
		return;
	off = tu_rand_range(&rs, nodes[n].size + 10000);
	len = 1 + tu_rand_range(&rs, 200000);
	if (off + len > MAX_FILE || total_bytes() + off + len > MAX_TOTAL)
		return;
	switch (tu_rand_range(&rs, 4)) {
	case 0:
		mode = 0;
		break;
	case 1:
		mode = FALLOC_FL_KEEP_SIZE;
		break;
	case 2:
		mode = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
		break;
	default:
		mode = FALLOC_FL_ZERO_RANGE;
	}
	ck_assert_int_eq(arb_fs_fallocate(fs, nodes[n].ino, mode, off, len), 0);
	if (!(mode & FALLOC_FL_KEEP_SIZE) && off + len > nodes[n].size)
		file_resize(n, off + len);
	if (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) {
		uint64_t end = off + len < nodes[n].size ? off + len
							 : nodes[n].size;
		if (off < end)
			memset(nodes[n].data + off, 0, end - off);
	}
}

/* copy_file_range: shared where the offsets are congruent (clone.c) */
static void op_copy(void)
{
	int sn = pick(M_FILE), dn = pick(M_FILE);
	uint64_t soff, doff, len, n;
	ssize_t r;

	if (sn < 0 || dn < 0)
		return;
	soff = tu_rand_range(&rs, nodes[sn].size + 5000);
	doff = tu_rand_range(&rs, nodes[dn].size + 5000);
	switch (tu_rand_range(&rs, 3)) {
	case 0:
		soff &= ~4095ULL;
		doff &= ~4095ULL;
		break;
	case 1:
		doff = (doff & ~4095ULL) + soff % 4096;
		break;
	}
	len = tu_rand_range(&rs, 2) ? nodes[sn].size + 1
				    : 1 + tu_rand_range(&rs, 300000);
	n = soff >= nodes[sn].size ? 0 : nodes[sn].size - soff;
	if (len < n)
		n = len;
	if (doff + n > MAX_FILE || total_bytes() + doff + n > MAX_TOTAL)
		return;
	r = arb_fs_copy_range(fs, nodes[sn].ino, soff, nodes[dn].ino, doff,
			      len, 0);
	if (nodes[sn].ino == nodes[dn].ino && n && soff < doff + n &&
	    doff < soff + n) {
		ck_assert_int_eq(r, -EINVAL);
		return;
	}
	ck_assert_int_eq(r, (ssize_t)n);
	if (!n)
		return;
	if (doff + n > nodes[dn].size)
		file_resize(dn, doff + n);
	memmove(nodes[dn].data + doff, nodes[sn].data + soff, n);
}

static void remove_entry(int d, int e)
{
	int n = nodes[d].ents[e].node;

	dir_del(d, e);
	if (nodes[n].type == M_DIR) {
		nodes[d].nlink--;
		node_free(n);
		return;
	}
	if (--nodes[n].nlink == 0)
		node_free(n);
}

static void op_unlink(void)
{
	int d = pick(M_DIR), e, n, ret, expect;
	char name[24];

	rand_name(name);
	e = dir_find(d, name);
	if (e < 0) {
		expect = -ENOENT;
	} else {
		n = nodes[d].ents[e].node;
		if (nodes[n].type == M_DIR)
			expect = nodes[n].nents ? -ENOTEMPTY : 0;
		else
			expect = 0;
	}
	if (e >= 0 && nodes[nodes[d].ents[e].node].type == M_DIR) {
		ret = arb_fs_unlink(fs, nodes[d].ino, name);
		ck_assert_int_eq(ret, -EISDIR);
		ret = arb_fs_rmdir(fs, nodes[d].ino, name);
	} else {
		ret = arb_fs_unlink(fs, nodes[d].ino, name);
	}
	ck_assert_int_eq(ret, expect);
	if (!ret)
		remove_entry(d, e);
}

static void op_link(void)
{
	int n = pick(M_FILE), d = pick(M_DIR), ret, expect;
	char name[24];
	struct arb_stat st;

	if (n < 0)
		return;
	rand_name(name);
	expect = dir_find(d, name) >= 0 ? -EEXIST : 0;
	ret = arb_fs_link(fs, nodes[n].ino, nodes[d].ino, name, &st);
	ck_assert_int_eq(ret, expect);
	if (!ret) {
		nodes[n].nlink++;
		dir_add(d, name, n);
	}
}

static void op_rename(void)
{
	int sd = pick(M_DIR), dd = pick(M_DIR), se, de, s, t = -1;
	unsigned flags = 0;
	char sname[24], dname[24];
	int ret, expect = 0;

	rand_name(sname);
	rand_name(dname);
	se = dir_find(sd, sname);
	de = dir_find(dd, dname);
	switch (tu_rand_range(&rs, 6)) {
	case 0:
		flags = RENAME_NOREPLACE;
		break;
	case 1:
		flags = RENAME_EXCHANGE;
		break;
	}
	ret = arb_fs_rename(fs, nodes[sd].ino, sname, nodes[dd].ino, dname,
			    flags);
	if (se < 0) {
		ck_assert_int_eq(ret, -ENOENT);
		return;
	}
	s = nodes[sd].ents[se].node;
	if (de >= 0)
		t = nodes[dd].ents[de].node;
	/* predict in the order the implementation checks */
	if (t >= 0 && (flags & RENAME_NOREPLACE))
		expect = -EEXIST;
	else if (t < 0 && (flags & RENAME_EXCHANGE))
		expect = -ENOENT;
	else if (t == s)
		expect = 1; /* no-op */
	else if (flags & RENAME_EXCHANGE) {
		if (nodes[s].type == M_DIR && sd != dd && is_ancestor(s, dd))
			expect = -EINVAL;
		else if (nodes[t].type == M_DIR && sd != dd &&
			 is_ancestor(t, sd))
			expect = -EINVAL;
	} else {
		if (t >= 0 && nodes[s].type == M_DIR && nodes[t].type != M_DIR)
			expect = -ENOTDIR;
		else if (t >= 0 && nodes[s].type != M_DIR &&
			 nodes[t].type == M_DIR)
			expect = -EISDIR;
		else if (t >= 0 && nodes[t].type == M_DIR && nodes[t].nents)
			expect = -ENOTEMPTY;
		else if (nodes[s].type == M_DIR && sd != dd &&
			 is_ancestor(s, dd))
			expect = -EINVAL;
	}
	ck_assert_msg(ret == (expect == 1 ? 0 : expect),
		      "rename %s -> %s flags %u: %d, expected %d", sname, dname,
		      flags, ret, expect);
	if (expect)
		return;
	if (flags & RENAME_EXCHANGE) {
		nodes[sd].ents[se].node = t;
		nodes[dd].ents[de].node = s;
		if (nodes[s].type == M_DIR) {
			nodes[s].parent = dd;
			nodes[sd].nlink--;
			nodes[dd].nlink++;
		}
		if (nodes[t].type == M_DIR) {
			nodes[t].parent = sd;
			nodes[dd].nlink--;
			nodes[sd].nlink++;
		}
		return;
	}
	if (t >= 0) {
		remove_entry(dd, de);
		se = dir_find(sd, sname);
	}
	dir_del(sd, se);
	dir_add(dd, dname, s);
	if (nodes[s].type == M_DIR) {
		nodes[s].parent = dd;
		nodes[sd].nlink--;
		nodes[dd].nlink++;
	}
}

/* compressed extents written since the last open, added up */
static uint64_t zextents;

static void count_z(void)
{
	struct arb_fs_stats st;

	ck_assert_int_eq(arb_fs_get_stats(fs, &st), 0);
	ck_assert_uint_lt(st.compressed_stored_bytes,
			  st.compressed_ram_bytes + !st.compressed_extents);
	zextents += st.compressed_extents;
}

static void reopen(void)
{
	check_fs();
	count_z();
	ck_assert_int_eq(arb_fs_close(fs), 0);
	fs_open_now();
	check_fs();
	compare_all();
}

START_TEST(test_model)
{
	struct arb_mkfs_opts mo;
	struct arb_dev *d;
	int steps = TU_SCALE(3000, 30000);
	int compare_every = TU_SCALE(50, 500);
	uint32_t nodesize = _i % 2 == 0 ? 16384 : 4096;

	zmode = _i >= 2;
	zextents = 0;
	/* the compressed runs share the POSIX layer with the first two:
	 * at ci scale they take half the steps (CI time) */
	if (zmode)
		steps = TU_SCALE(1500, 30000);
	/* and only with 16 KiB nodes */
	if (zmode && nodesize == 4096 && !TU_SCALE(0, 1))
		return;
	rs = tu_seed("fs_model");
	arb_log_level = ARB_LOG_WARN;
	memset(nodes, 0, sizeof(nodes));
	ck_assert_int_eq(arb_dev_open_mem(256 * MiB, &mem), 0);
	arb_mkfs_opts_default(&mo);
	mo.nodesize = nodesize;
	d = tu_dev_borrow(mem);
	ck_assert_int_eq(arb_mkfs(d, &mo), 0);
	arb_dev_destroy(d);
	fs_open_now();
	nodes[1].type = M_DIR;
	nodes[1].ino = ARB_ROOT_INO;
	nodes[1].nlink = 2;
	nodes[1].parent = 1;

	for (int i = 0; i < steps; i++) {
		unsigned r = (unsigned)tu_rand_range(&rs, 100);
		if (r < 12)
			op_create(false);
		else if (r < 17)
			op_create(true);
		else if (r < 40)
			op_write();
		else if (r < 50)
			op_read();
		else if (r < 56)
			op_truncate();
		else if (r < 63)
			op_falloc();
		else if (r < 73)
			op_unlink();
		else if (r < 78)
			op_link();
		else if (r < 88)
			op_rename();
		else if (r < 92)
			op_copy();
		else if (r < 96)
			ck_assert_int_eq(arb_fs_sync(fs), 0);
		else if (r < 97)
			reopen();
		/* else idle */
		if (i % compare_every == compare_every - 1)
			compare_all();
		if (i % (10 * compare_every) == 10 * compare_every - 1)
			check_fs();
	}
	reopen();
	check_fs();
	count_z();
	/* the model's data is two thirds compressible */
	ck_assert(!zmode || zextents > 0);
	ck_assert_int_eq(arb_fs_close(fs), 0);
	for (int i = 1; i < MAX_NODES; i++)
		if (nodes[i].type != M_FREE)
			node_free(i);
	arb_dev_destroy(mem);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("fs_model");
	TCase *tc = tcase_create("model");

	tcase_set_timeout(tc, 1200);
	/* 0: 16 KiB nodes, 1: 4 KiB nodes (deeper trees, more splits);
	 * 2, 3: the same with compression */
	tcase_add_loop_test(tc, test_model, 0, 4);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
