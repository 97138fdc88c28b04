/* SPDX-License-Identifier: MIT */
/*
 * digest.c - arb_subvol_digest_portable (digest version 1): a SHA-256
 * over the logical content of a
 * subvolume, independent of objectids and of how the tree was made, so a
 * received subvolume, its source, or a tree copied another way can be
 * compared (arbor/send.h says what is in it, docs/SEND-STREAM.md the
 * exact serialization).
 *
 * The walk goes through the public POSIX calls only, depth first from
 * the root, each directory's names sorted by their bytes.  An inode met
 * again under another name is written as a reference to the ordinal of
 * its first name, so the hard-link structure is part of the digest but
 * the numbers are not.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arbor/send.h"
#include "arbor/subvol.h"
#include "fs_int.h"
#include "stream_int.h"

/* ---- SHA-256 (FIPS 180-4) ---------------------------------------------- */

static const uint32_t K256[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
	0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
	0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
	0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
	0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
	0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
	0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
	0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror(uint32_t x, unsigned n)
{
	return x >> n | x << (32 - n);
}

static void sha_block(struct arb_sha256 *s, const uint8_t *p)
{
	uint32_t w[64], a, b, c, d, e, f, g, h, t1, t2;
	int i;

	for (i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (i = 16; i < 64; i++) {
		uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^
			      (w[i - 15] >> 3);
		uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^
			      (w[i - 2] >> 10);
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	a = s->h[0]; b = s->h[1]; c = s->h[2]; d = s->h[3];
	e = s->h[4]; f = s->h[5]; g = s->h[6]; h = s->h[7];
	for (i = 0; i < 64; i++) {
		t1 = h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) +
		     ((e & f) ^ (~e & g)) + K256[i] + w[i];
		t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) +
		     ((a & b) ^ (a & c) ^ (b & c));
		h = g; g = f; f = e; e = d + t1;
		d = c; c = b; b = a; a = t1 + t2;
	}
	s->h[0] += a; s->h[1] += b; s->h[2] += c; s->h[3] += d;
	s->h[4] += e; s->h[5] += f; s->h[6] += g; s->h[7] += h;
}

/*
 * The same compression with the x86 SHA extensions (SHA-NI), when the
 * CPU has them: about five times the portable code's speed, which the
 * digests feel (one compression per 4 KiB block of digest version 2).
 * The sequence is Intel's (the SHA extensions white paper): the state as
 * ABEF/CDGH, two rounds per sha256rnds2, the schedule by sha256msg1/2.
 */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define SHA_NI 1
__attribute__((target("sha,sse4.1"))) static void
sha_blocks_ni(uint32_t h[8], const uint8_t *p, size_t n)
{
	const __m128i mask = _mm_set_epi64x(0x0c0d0e0f08090a0bULL,
					    0x0405060700010203ULL);
	__m128i st0, st1, tmp, msg, m[4], abef, cdgh;

	tmp = _mm_loadu_si128((const __m128i *)&h[0]);
	st1 = _mm_loadu_si128((const __m128i *)&h[4]);
	tmp = _mm_shuffle_epi32(tmp, 0xB1);          /* CDAB */
	st1 = _mm_shuffle_epi32(st1, 0x1B);          /* EFGH */
	st0 = _mm_alignr_epi8(tmp, st1, 8);          /* ABEF */
	st1 = _mm_blend_epi16(st1, tmp, 0xF0);       /* CDGH */
	for (; n; n--, p += 64) {
		abef = st0;
		cdgh = st1;
		for (int i = 0; i < 16; i++) {
			__m128i *cur = &m[i % 4];

			if (i < 4)
				*cur = _mm_shuffle_epi8(
					_mm_loadu_si128((const __m128i *)(p + 16 * i)),
					mask);
			msg = _mm_add_epi32(*cur,
					    _mm_loadu_si128((const __m128i *)&K256[4 * i]));
			st1 = _mm_sha256rnds2_epu32(st1, st0, msg);
			if (i >= 3 && i <= 14) {
				__m128i *next = &m[(i + 1) % 4];

				tmp = _mm_alignr_epi8(*cur, m[(i + 3) % 4], 4);
				*next = _mm_add_epi32(*next, tmp);
				*next = _mm_sha256msg2_epu32(*next, *cur);
			}
			msg = _mm_shuffle_epi32(msg, 0x0E);
			st0 = _mm_sha256rnds2_epu32(st0, st1, msg);
			if (i >= 1 && i <= 12)
				m[(i + 3) % 4] =
					_mm_sha256msg1_epu32(m[(i + 3) % 4], *cur);
		}
		st0 = _mm_add_epi32(st0, abef);
		st1 = _mm_add_epi32(st1, cdgh);
	}
	tmp = _mm_shuffle_epi32(st0, 0x1B);          /* FEBA */
	st1 = _mm_shuffle_epi32(st1, 0xB1);          /* DCHG */
	st0 = _mm_blend_epi16(tmp, st1, 0xF0);       /* DCBA */
	st1 = _mm_alignr_epi8(st1, tmp, 8);          /* ABEF */
	_mm_storeu_si128((__m128i *)&h[0], st0);
	_mm_storeu_si128((__m128i *)&h[4], st1);
}
#endif

/* 1: SHA-NI, 0: portable, -1: not decided yet (tests set it) */
static int use_ni = -1;

void arb_sha256_portable(bool portable)
{
	__atomic_store_n(&use_ni, portable ? 0 : -1, __ATOMIC_RELAXED);
}

static void sha_blocks(struct arb_sha256 *s, const uint8_t *p, size_t n)
{
#ifdef SHA_NI
	int ni = __atomic_load_n(&use_ni, __ATOMIC_RELAXED);

	if (ni < 0) {
		__builtin_cpu_init();
		ni = __builtin_cpu_supports("sha") &&
		     __builtin_cpu_supports("sse4.1");
		__atomic_store_n(&use_ni, ni, __ATOMIC_RELAXED);
	}
	if (ni) {
		sha_blocks_ni(s->h, p, n);
		return;
	}
#endif
	for (; n; n--, p += 64)
		sha_block(s, p);
}

void arb_sha256_init(struct arb_sha256 *s)
{
	static const uint32_t iv[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372,
					0xa54ff53a, 0x510e527f, 0x9b05688c,
					0x1f83d9ab, 0x5be0cd19 };

	memcpy(s->h, iv, sizeof(iv));
	s->len = 0;
	s->n = 0;
}

void arb_sha256_update(struct arb_sha256 *s, const void *data, size_t n)
{
	const uint8_t *p = data;

	s->len += n;
	if (s->n) {
		size_t k = 64 - s->n < n ? 64 - s->n : n;

		memcpy(s->buf + s->n, p, k);
		s->n += k;
		p += k;
		n -= k;
		if (s->n < 64)
			return;
		sha_blocks(s, s->buf, 1);
		s->n = 0;
	}
	if (n >= 64) {
		sha_blocks(s, p, n / 64);
		p += n / 64 * 64;
		n %= 64;
	}
	memcpy(s->buf, p, n);
	s->n = n;
}

void arb_sha256_final(struct arb_sha256 *s, uint8_t out[32])
{
	uint64_t bits = s->len * 8;
	int i;

	/* 0x80, zeros to 56 bytes of a block, the length in bits */
	s->buf[s->n++] = 0x80;
	if (s->n > 56) {
		memset(s->buf + s->n, 0, 64 - s->n);
		sha_blocks(s, s->buf, 1);
		s->n = 0;
	}
	memset(s->buf + s->n, 0, 56 - s->n);
	for (i = 0; i < 8; i++)
		s->buf[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
	sha_blocks(s, s->buf, 1);
	for (i = 0; i < 8; i++) {
		out[4 * i] = (uint8_t)(s->h[i] >> 24);
		out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
		out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
		out[4 * i + 3] = (uint8_t)s->h[i];
	}
}

void arb_digest_hex(const uint8_t d[ARB_DIGEST_SIZE], char out[65])
{
	static const char hx[] = "0123456789abcdef";

	for (int i = 0; i < ARB_DIGEST_SIZE; i++) {
		out[2 * i] = hx[d[i] >> 4];
		out[2 * i + 1] = hx[d[i] & 15];
	}
	out[64] = 0;
}

/* ---- the walk ----------------------------------------------------------- */

/* inode number -> ordinal of its first name (open addressing) */
struct seen {
	uint64_t *ino, *ord;
	size_t cap, nr;
};

static int seen_find(struct seen *s, uint64_t ino, uint64_t *ord, bool add,
		     uint64_t new_ord)
{
	size_t i;

	if (add && (s->nr + 1) * 2 > s->cap) {
		struct seen n = { 0 };

		n.cap = s->cap ? s->cap * 2 : 1024;
		n.ino = calloc(n.cap, sizeof(uint64_t));
		n.ord = calloc(n.cap, sizeof(uint64_t));
		if (!n.ino || !n.ord) {
			free(n.ino);
			free(n.ord);
			return -ENOMEM;
		}
		for (i = 0; i < s->cap; i++)
			if (s->ino[i])
				seen_find(&n, s->ino[i], NULL, true, s->ord[i]);
		free(s->ino);
		free(s->ord);
		*s = n;
	}
	if (!s->cap)
		return 1;
	i = (size_t)((ino * 0x9e3779b97f4a7c15ULL) >> 20) & (s->cap - 1);
	while (s->ino[i]) {
		if (s->ino[i] == ino) {
			if (ord)
				*ord = s->ord[i];
			return 0;
		}
		i = (i + 1) & (s->cap - 1);
	}
	if (!add)
		return 1;
	s->ino[i] = ino;
	s->ord[i] = new_ord;
	s->nr++;
	return 1;
}

struct dwalk {
	struct arb_fs *fs;
	uint64_t tree;
	struct arb_sha256 sha;
	struct seen seen;
	uint64_t next_ord;
	uint8_t *buf;    /* ARB_XATTR_SIZE_MAX, data */
	char *list;      /* xattr names */
};

struct dent {
	char *name;
	uint64_t ino;
};

struct dlist {
	struct dent *e;
	size_t nr, cap;
	uint64_t tree;
	int err;
};

static int collect(void *ctx, const char *name, const struct arb_stat *st,
		   uint64_t next_off)
{
	struct dlist *l = ctx;

	(void)next_off;
	if (!strcmp(name, ".") || !strcmp(name, ".."))
		return 0;
	/* nested subvolume links are not part of this subvolume */
	if (arb_inum_tree(st->ino) != l->tree)
		return 0;
	if (l->nr == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct dent *e = realloc(l->e, cap * sizeof(*e));

		if (!e) {
			l->err = -ENOMEM;
			return 1;
		}
		l->e = e;
		l->cap = cap;
	}
	l->e[l->nr].name = strdup(name);
	if (!l->e[l->nr].name) {
		l->err = -ENOMEM;
		return 1;
	}
	l->e[l->nr++].ino = st->ino;
	return 0;
}

static int dent_cmp(const void *a, const void *b)
{
	return strcmp(((const struct dent *)a)->name,
		      ((const struct dent *)b)->name);
}

static void put(struct dwalk *w, const void *p, size_t n)
{
	arb_sha256_update(&w->sha, p, n);
}
static void put64(struct dwalk *w, uint64_t v)
{
	uint8_t b[8];

	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	put(w, b, 8);
}
static void put_str(struct dwalk *w, const char *s, size_t n)
{
	put64(w, n);
	put(w, s, n);
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int arb_xattr_names_sorted(struct arb_fs *fs, uint64_t ino, char *list,
			   char ***names, size_t *nr)
{
	ssize_t n = arb_fs_listxattr(fs, ino, list, 65536);
	size_t i = 0;

	*names = NULL;
	*nr = 0;
	if (n < 0)
		return (int)n;
	for (char *p = list; p < list + n; p += strlen(p) + 1)
		(*nr)++;
	*names = calloc(*nr ? *nr : 1, sizeof(**names));
	if (!*names)
		return -ENOMEM;
	for (char *p = list; p < list + n; p += strlen(p) + 1)
		(*names)[i++] = p;
	if (*nr)
		qsort(*names, *nr, sizeof(**names), str_cmp);
	return 0;
}

static int digest_xattrs(struct dwalk *w, uint64_t ino)
{
	char **names;
	size_t nr, i;
	int ret = arb_xattr_names_sorted(w->fs, ino, w->list, &names, &nr);

	if (ret)
		return ret;
	put64(w, nr);
	for (i = 0; i < nr; i++) {
		ssize_t v = arb_fs_getxattr(w->fs, ino, names[i], w->buf,
					    ARB_XATTR_SIZE_MAX);

		if (v < 0) {
			ret = (int)v;
			break;
		}
		put_str(w, names[i], strlen(names[i]));
		put_str(w, (const char *)w->buf, (size_t)v);
	}
	free(names);
	return ret;
}

/* data ranges (SEEK_DATA/SEEK_HOLE) and their bytes */
static int digest_data(struct dwalk *w, uint64_t ino, uint64_t size)
{
	uint64_t off = 0;

	while (off < size) {
		int64_t d = arb_fs_lseek(w->fs, ino, off, SEEK_DATA), h;

		if (d == -ENXIO)
			break;
		if (d < 0)
			return (int)d;
		h = arb_fs_lseek(w->fs, ino, (uint64_t)d, SEEK_HOLE);
		if (h < 0)
			return (int)h;
		if ((uint64_t)h > size)
			h = (int64_t)size;
		if (h <= d)
			break;
		put64(w, (uint64_t)d);
		put64(w, (uint64_t)(h - d));
		for (off = (uint64_t)d; off < (uint64_t)h;) {
			size_t want = (uint64_t)h - off > ARB_XATTR_SIZE_MAX
					      ? ARB_XATTR_SIZE_MAX
					      : (size_t)((uint64_t)h - off);
			ssize_t r = fs_read(w->fs, ino, w->buf, want, off, false);

			if (r < 0)
				return (int)r;
			if (r == 0)
				return -EIO;
			put(w, w->buf, (size_t)r);
			off += (uint64_t)r;
		}
	}
	put64(w, UINT64_MAX); /* end of the data list */
	return 0;
}

static int digest_inode(struct dwalk *w, uint64_t ino);

static int digest_dir(struct dwalk *w, uint64_t dir)
{
	struct dlist l = { .tree = w->tree };
	int ret;
	size_t i;

	ret = arb_fs_readdir(w->fs, dir, 0, false, collect, &l);
	if (!ret)
		ret = l.err;
	if (!ret && l.nr)
		qsort(l.e, l.nr, sizeof(*l.e), dent_cmp);
	if (!ret)
		put64(w, l.nr);
	for (i = 0; !ret && i < l.nr; i++) {
		uint64_t ord;

		put_str(w, l.e[i].name, strlen(l.e[i].name));
		ret = seen_find(&w->seen, l.e[i].ino, &ord, false, 0);
		if (ret == 0) {
			put(w, "L", 1);
			put64(w, ord);
			continue;
		}
		ret = digest_inode(w, l.e[i].ino);
	}
	for (i = 0; i < l.nr; i++)
		free(l.e[i].name);
	free(l.e);
	return ret;
}

static int digest_inode(struct dwalk *w, uint64_t ino)
{
	struct arb_stat st;
	char target[4097];
	int ret;

	ret = arb_fs_getattr(w->fs, ino, &st);
	if (ret)
		return ret;
	if (!S_ISDIR(st.mode)) {
		ret = seen_find(&w->seen, ino, NULL, true, w->next_ord);
		if (ret < 0)
			return ret;
	}
	w->next_ord++;
	put(w, "I", 1);
	put64(w, st.mode);
	put64(w, st.uid);
	put64(w, st.gid);
	put64(w, (uint64_t)st.mtime.tv_sec);
	put64(w, (uint64_t)st.mtime.tv_nsec);
	put64(w, S_ISCHR(st.mode) || S_ISBLK(st.mode) ? st.rdev : 0);
	put64(w, S_ISDIR(st.mode) ? 0 : st.size);
	ret = S_ISLNK(st.mode) ? 0 : digest_xattrs(w, ino);
	if (ret)
		return ret;
	if (S_ISLNK(st.mode)) {
		ret = arb_fs_readlink(w->fs, ino, target, sizeof(target));
		if (ret < 0)
			return ret;
		put_str(w, target, (size_t)ret);
		return 0;
	}
	if (S_ISREG(st.mode))
		return digest_data(w, ino, st.size);
	if (S_ISDIR(st.mode))
		return digest_dir(w, ino);
	return 0;
}

/* a read-only subvolume's digest at its generation, if computed before:
 * 0 (*gen: 0 when it is not read-only, so not to be kept) */
static bool dcache_get(struct arb_fs *fs, uint64_t id, uint64_t *gen,
		       uint8_t digest[ARB_DIGEST_SIZE])
{
	struct arb_subvol_info si;
	bool hit = false;

	*gen = 0;
	if (arb_subvol_info_id(fs, id, &si) || !(si.flags & ARB_SUBVOL_RDONLY) ||
	    (si.flags & ARB_SUBVOL_DELETED) || !si.gen)
		return false;
	*gen = si.gen;
	fs_lock(fs);
	for (unsigned i = 0; i < FS_DIGEST_CACHE && !hit; i++)
		if (fs->dcache[i].id == id && fs->dcache[i].gen == si.gen) {
			memcpy(digest, fs->dcache[i].d, ARB_DIGEST_SIZE);
			hit = true;
		}
	fs_unlock(fs);
	return hit;
}

static void dcache_put(struct arb_fs *fs, uint64_t id, uint64_t gen,
		       const uint8_t digest[ARB_DIGEST_SIZE])
{
	struct fs_digest_cache *e;

	fs_lock(fs);
	e = &fs->dcache[fs->dcache_next++ % FS_DIGEST_CACHE];
	e->id = id;
	e->gen = gen;
	memcpy(e->d, digest, ARB_DIGEST_SIZE);
	fs_unlock(fs);
}

int arb_subvol_digest_portable(struct arb_fs *fs, uint64_t id,
			       uint8_t digest[ARB_DIGEST_SIZE])
{
	struct dwalk w = { .fs = fs, .tree = id };
	uint64_t gen;
	bool ok;
	int ret;

	(void)arb_inum_slot(id, &ok);
	if (!ok)
		return -EINVAL;
	if (dcache_get(fs, id, &gen, digest))
		return 0;
	w.buf = malloc(ARB_XATTR_SIZE_MAX);
	w.list = malloc(65536);
	if (!w.buf || !w.list) {
		ret = -ENOMEM;
		goto out;
	}
	arb_sha256_init(&w.sha);
	put(&w, "arbor-digest-1", 14);
	ret = digest_inode(&w, arb_inum(id, ARB_ROOT_INO));
	if (!ret)
		arb_sha256_final(&w.sha, digest);
	if (!ret && gen)
		dcache_put(fs, id, gen, digest);
out:
	free(w.buf);
	free(w.list);
	free(w.seen.ino);
	free(w.seen.ord);
	return ret;
}
