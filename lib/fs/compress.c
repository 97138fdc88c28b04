/* SPDX-License-Identifier: MIT */
/*
 * compress.c - transparent zlib compression of file data: which files
 * are compressed, deflating and inflating one chunk, and the chunks a
 * writer compressed before it took the lock (struct fs_zchunk).
 * The stored form is format.h's (ARB_COMPRESS_ZLIB); how data reaches it
 * is docs/design/compress.md.  File data as a whole: see file_int.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include "file_int.h"

/* ---- which files ------------------------------------------------------- */

int fs_compress_level(const struct arb_fs *fs, const struct arb_inode *in)
{
	int level = fs->opts.compress_level ? fs->opts.compress_level : 3;

	if (in->flags & ARB_INODE_NOCOMPRESS)
		return 0;
	if ((in->flags & ARB_INODE_COMPRESS) || fs->opts.compress)
		return level;
	return 0;
}

/*
 * A hint, read without the lock by a writer that must decide whether to
 * compress before it takes it: the decision made for ino under the lock
 * by its last write, in a small table indexed by the inode number.  A
 * wrong guess costs the writer its compression work (thrown away) or
 * moves that work under the lock (the flush compresses), never data.
 */
#define ZHINT_SLOTS 256

static size_t zhint_slot(uint64_t ino)
{
	return (size_t)((ino * 0x9E3779B97F4A7C15ull) >> 56) % ZHINT_SLOTS;
}

bool fs_zhint_get(struct arb_fs *fs, uint64_t ino)
{
	uint64_t v = __atomic_load_n(&fs->zhint[zhint_slot(ino)],
				     __ATOMIC_RELAXED);

	if (v >> 1 == ino && v)
		return v & 1;
	return fs->opts.compress != ARB_COMPRESS_NONE;
}

void fs_zhint_set(struct arb_fs *fs, uint64_t ino, bool yes)
{
	__atomic_store_n(&fs->zhint[zhint_slot(ino)], ino << 1 | yes,
			 __ATOMIC_RELAXED);
}

/*
 * Writers compress before they take the lock, each in its own FUSE
 * request thread; at most zslots of them at once, one less than the
 * CPUs (at least one): with every CPU deflating, a stat or a small read
 * waits for a CPU as long as it would have waited for the lock.
 */
void fs_zslots_init(struct arb_fs *fs)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	pthread_mutex_init(&fs->zlock, NULL);
	pthread_cond_init(&fs->zcond, NULL);
	fs->zslots = n > 2 ? (unsigned)n - 1 : 1;
	fs->zbusy = 0;
}

void fs_zslots_destroy(struct arb_fs *fs)
{
	pthread_mutex_destroy(&fs->zlock);
	pthread_cond_destroy(&fs->zcond);
}

void fs_zslot_get(struct arb_fs *fs)
{
	pthread_mutex_lock(&fs->zlock);
	while (fs->zbusy >= fs->zslots)
		pthread_cond_wait(&fs->zcond, &fs->zlock);
	fs->zbusy++;
	pthread_mutex_unlock(&fs->zlock);
}

void fs_zslot_put(struct arb_fs *fs)
{
	pthread_mutex_lock(&fs->zlock);
	fs->zbusy--;
	pthread_cond_signal(&fs->zcond);
	pthread_mutex_unlock(&fs->zlock);
}

/* ---- one chunk ---------------------------------------------------------- */

/*
 * Deflate len bytes (a multiple of bs, at most ARB_COMPRESS_MAX_RAM).
 * 0: *out (malloc'd) holds the stream followed by zeros, *stored bytes in
 * all, a multiple of bs and at most len - bs; 1: the data does not shrink
 * by a sector (nothing allocated); <0 error.
 */
int fs_z_compress(const void *src, size_t len, uint32_t bs, int level,
		  uint8_t **out, size_t *stored)
{
	size_t cap, zlen;
	uint8_t *dst;
	int ret;

	*out = NULL;
	if (len < 2 * (size_t)bs)
		return 1;
	cap = len - bs;
	dst = malloc(cap);
	if (!dst)
		return -ENOMEM;
	ret = fs_z_compress_to(src, len, level, dst, cap, &zlen);
	if (ret) {
		free(dst);
		return ret;
	}
	*stored = round_up_bs(zlen, bs);
	memset(dst + zlen, 0, *stored - zlen);
	*out = dst;
	return 0;
}

int fs_z_compress_to(const void *src, size_t len, int level, uint8_t *dst,
		     size_t cap, size_t *zlen)
{
	z_stream z;
	int zr;

	memset(&z, 0, sizeof(z));
	if (deflateInit2(&z, level, Z_DEFLATED, 15, 8, Z_DEFAULT_STRATEGY) !=
	    Z_OK)
		return -ENOMEM;
	z.next_in = (Bytef *)src;
	z.avail_in = (uInt)len;
	z.next_out = dst;
	z.avail_out = (uInt)cap;
	zr = deflate(&z, Z_FINISH);
	deflateEnd(&z);
	if (zr != Z_STREAM_END)
		return zr == Z_OK || zr == Z_BUF_ERROR ? 1 : -EIO;
	*zlen = z.total_out;
	return 0;
}

/*
 * Inflate a stored chunk of len bytes into exactly ram bytes at dst.
 * -EIO when the stream is damaged or inflates to another length: the
 * checksums matched, so the extent was written wrong or crafted.
 */
int fs_z_decompress(const void *src, size_t len, void *dst, size_t ram)
{
	return fs_z_decompress_len(src, len, dst, ram, NULL);
}

/* the same, and *used (if not NULL): the bytes of src the stream takes,
 * without what follows its end (a stored extent's zeros) */
int fs_z_decompress_len(const void *src, size_t len, void *dst, size_t ram,
			size_t *used)
{
	z_stream z;
	int zr;

	memset(&z, 0, sizeof(z));
	if (inflateInit2(&z, 15) != Z_OK)
		return -ENOMEM;
	z.next_in = (Bytef *)src;
	z.avail_in = (uInt)len;
	z.next_out = dst;
	z.avail_out = (uInt)ram;
	zr = inflate(&z, Z_FINISH);
	inflateEnd(&z);
	if (zr != Z_STREAM_END || z.total_out != ram)
		return -EIO;
	if (used)
		*used = z.total_in;
	return 0;
}

/* ---- chunks compressed before the lock ---------------------------------- */

/*
 * An entry says: blocks [idx, idx + nblk) of the file, as they are in the
 * dirty block map now, compress to z (stored bytes), or (z NULL) do not
 * shrink by a sector.  Whatever changes or drops one of those blocks
 * forgets the entry first (fs_zc_forget: fs_dirty_block_cov, the dmap's
 * drops, and the writers that edit a dirty block in place), so an entry
 * that is present is true, and the flush may store z without looking at
 * the blocks again.
 */
void fs_zc_forget(struct arb_imem *im, uint64_t from_idx, uint64_t to_idx)
{
	size_t i, j;

	for (i = j = 0; i < im->zc_nr; i++) {
		struct fs_zchunk *c = &im->zc[i];
		if (c->idx < to_idx && c->idx + c->nblk > from_idx) {
			free(c->z);
			continue;
		}
		im->zc[j++] = *c;
	}
	im->zc_nr = j;
	if (!j) {
		free(im->zc);
		im->zc = NULL;
		im->zc_cap = 0;
	}
}

/* takes z; on failure frees it (the flush compresses again) */
void fs_zc_add(struct arb_imem *im, uint64_t idx, uint32_t nblk, uint8_t *z,
	       size_t stored)
{
	fs_zc_forget(im, idx, idx + nblk);
	if (im->zc_nr == im->zc_cap) {
		size_t cap = im->zc_cap ? im->zc_cap * 2 : 8;
		struct fs_zchunk *n = realloc(im->zc, cap * sizeof(*n));
		if (!n) {
			free(z);
			return;
		}
		im->zc = n;
		im->zc_cap = cap;
	}
	im->zc[im->zc_nr++] = (struct fs_zchunk){ idx, nblk, stored, z };
}

/* the entry for exactly blocks [idx, idx + nblk), removed from im: 1 and
 * *z (NULL: it does not compress), *stored; 0 none */
int fs_zc_take(struct arb_imem *im, uint64_t idx, uint32_t nblk, uint8_t **z,
	       size_t *stored)
{
	for (size_t i = 0; i < im->zc_nr; i++) {
		struct fs_zchunk *c = &im->zc[i];
		if (c->idx != idx || c->nblk != nblk)
			continue;
		*z = c->z;
		*stored = c->stored;
		im->zc[i] = im->zc[--im->zc_nr];
		return 1;
	}
	return 0;
}

/* ---- the compressor thread ------------------------------------------------ */

/*
 * Data a writer did not compress before the lock was compressed by the
 * flush, under it: the appends of a log (each write less than two
 * blocks) at every commit, and every small file written whole, in its
 * WRITE, which its writer waits for (cp -a of /usr/include: 4.7-5.0 s
 * compressed against 3.3-3.5 s plain, the difference zlib's time).
 * Instead, a write that makes a chunk ready (its blocks dirty from the
 * chunk's start to its end or to the end of the file) queues the file
 * (fs_zw_note), and this thread, at nice ARB_ZW_NICE (it only works
 * ahead of the flush: other requests come first), copies such chunks
 * under the lock, compresses them without it, and leaves the result to
 * the flush (fs_zc_add) if the blocks still hold what it compressed.
 * A chunk it did not get to is compressed by the flush, as before.
 */
#define ARB_ZW_NICE 19
/* chunks taken per turn (copied under the lock, compared again) */
#define ZW_CHUNKS 4
/* files queued at most (8 bytes each) */
#define ZW_QUEUE_MAX 65536

/*
 * [c, c + *n): blocks of im's chunk c (its first block), dirty from c to
 * the chunk's end, or (short_ok) to the file's end (size) inside it,
 * without a result for exactly them yet: *n >= 2.  A chunk the file ends
 * in is ready only for a write that began at its start (a small file
 * written whole) or for the thread: one a log grows by appends would be
 * compressed again at every append.
 */
static bool chunk_ready(const struct arb_fs *fs, const struct arb_imem *im,
			uint64_t c, uint64_t size, bool short_ok, uint32_t *n)
{
	uint32_t bs = fs->bs, cblk = ARB_COMPRESS_MAX_RAM / bs;
	uint64_t e = c + cblk, fe = (size + bs - 1) / bs;
	size_t a;

	if (fe < e) {
		if (!short_ok)
			return false;
		e = fe;
	}
	if (e < c + 2)
		return false;
	a = fs_dmap_lower(im, c);
	if (fs_dmap_lower(im, e) - a != e - c)
		return false;
	for (size_t i = 0; i < im->zc_nr; i++)
		if (im->zc[i].idx == c && im->zc[i].nblk == e - c)
			return false;
	*n = (uint32_t)(e - c);
	return true;
}

void fs_zw_note(struct arb_fs *fs, struct arb_imem *im,
		const struct arb_inode *in, uint64_t first, uint64_t last)
{
	uint32_t cblk = ARB_COMPRESS_MAX_RAM / fs->bs, n;
	bool ready = false;

	if (!fs->zworker_running || im->zw_queued ||
	    !fs_compress_level(fs, in))
		return;
	for (uint64_t c = first / cblk * cblk; c <= last && !ready; c += cblk)
		ready = chunk_ready(fs, im, c, in->size, c == first, &n);
	/* a thread far behind (a busy machine): the flush compresses it */
	if (!ready || fs->zw_nr >= ZW_QUEUE_MAX)
		return;
	if (fs->zw_nr == fs->zw_cap) {
		/* a ring: grown, and unwrapped into the new room */
		size_t cap = fs->zw_cap ? 2 * fs->zw_cap : 64;
		uint64_t *q = malloc(cap * sizeof(*q));

		if (!q)
			return;
		for (size_t i = 0; i < fs->zw_nr; i++)
			q[i] = fs->zw_q[(fs->zw_head + i) % fs->zw_cap];
		free(fs->zw_q);
		fs->zw_q = q;
		fs->zw_cap = cap;
		fs->zw_head = 0;
	}
	fs->zw_q[(fs->zw_head + fs->zw_nr++) % fs->zw_cap] = im->ino;
	im->zw_queued = true;
	/* broadcast: fs_zw_wait_idle waits on it too */
	pthread_cond_broadcast(&fs->zw_wake);
}

struct zw_job {
	uint64_t idx;
	uint32_t nblk;
	uint8_t *raw, *z;
	size_t stored;
	int ret;
};

/* the next file of the queue: copy its ready chunks (lock held) */
static size_t zw_take(struct arb_fs *fs, struct zw_job *jobs, uint64_t *ino,
		      int *level)
{
	uint32_t bs = fs->bs, cblk = ARB_COMPRESS_MAX_RAM / bs, n;
	struct arb_imem *im;
	struct arb_inode in;
	size_t nj = 0;

	*ino = fs->zw_q[fs->zw_head];
	fs->zw_head = (fs->zw_head + 1) % fs->zw_cap;
	fs->zw_nr--;
	im = fs_imem_get(fs, *ino, false);
	if (!im)
		return 0;
	im->zw_queued = false;
	if (!im->nr || fs_inode_read(fs, *ino, &in))
		return 0;
	*level = fs_compress_level(fs, &in);
	if (!*level)
		return 0;
	for (size_t i = 0; i < im->nr && nj < ZW_CHUNKS;) {
		uint64_t c = im->blocks[i].idx / cblk * cblk;

		if (c == im->blocks[i].idx &&
		    chunk_ready(fs, im, c, in.size, true, &n)) {
			struct zw_job *j = &jobs[nj];

			j->raw = malloc((size_t)n * bs);
			if (!j->raw)
				break;
			for (uint32_t k = 0; k < n; k++)
				memcpy(j->raw + (size_t)k * bs,
				       im->blocks[i + k].buf, bs);
			j->idx = c;
			j->nblk = n;
			nj++;
		}
		/* on to the next chunk */
		i = fs_dmap_lower(im, c + cblk);
	}
	/* more than one turn's worth: after the others' files */
	if (nj == ZW_CHUNKS)
		fs_zw_note(fs, im, &in, im->blocks[0].idx,
			   im->blocks[im->nr - 1].idx);
	return nj;
}

/* lock held: keep the results whose blocks still hold what was
 * compressed */
static void zw_give(struct arb_fs *fs, uint64_t ino, struct zw_job *jobs,
		    size_t nj)
{
	struct arb_imem *im = fs_imem_get(fs, ino, false);
	uint32_t bs = fs->bs;

	for (size_t j = 0; j < nj; j++) {
		struct zw_job *jb = &jobs[j];
		size_t a;
		bool same;

		if (!im || jb->ret < 0)
			continue;
		a = fs_dmap_lower(im, jb->idx);
		same = a + jb->nblk <= im->nr &&
		       im->blocks[a + jb->nblk - 1].idx ==
			       jb->idx + jb->nblk - 1;
		for (uint32_t k = 0; same && k < jb->nblk; k++)
			same = im->blocks[a + k].idx == jb->idx + k &&
			       !memcmp(im->blocks[a + k].buf,
				       jb->raw + (size_t)k * bs, bs);
		/* the same bytes: as true as any writer's result since */
		if (!same)
			continue;
		fs_zc_add(im, jb->idx, jb->nblk, jb->ret == 0 ? jb->z : NULL,
			  jb->stored);
		jb->z = NULL;
	}
}

static void *zw_thread(void *arg)
{
	struct arb_fs *fs = arg;
	struct zw_job jobs[ZW_CHUNKS];

	(void)setpriority(PRIO_PROCESS, (id_t)gettid(), ARB_ZW_NICE);
	fs_lock(fs);
	while (!fs->stop) {
		uint64_t ino;
		int level = 0;
		size_t nj;

		if (!fs->zw_nr) {
			pthread_cond_broadcast(&fs->zw_wake); /* idle */
			pthread_cond_wait(&fs->zw_wake, &fs->vol->lock);
			continue;
		}
		memset(jobs, 0, sizeof(jobs));
		nj = zw_take(fs, jobs, &ino, &level);
		if (!nj)
			continue;
		fs->zw_busy = true;
		fs_unlock(fs);
		for (size_t j = 0; j < nj; j++)
			jobs[j].ret = fs_z_compress(jobs[j].raw,
						    (size_t)jobs[j].nblk * fs->bs,
						    fs->bs, level, &jobs[j].z,
						    &jobs[j].stored);
		fs_lock(fs);
		zw_give(fs, ino, jobs, nj);
		fs->zw_busy = false;
		for (size_t j = 0; j < nj; j++) {
			free(jobs[j].raw);
			free(jobs[j].z);
		}
	}
	fs_unlock(fs);
	return NULL;
}

void fs_zw_start(struct arb_fs *fs)
{
	if (pthread_create(&fs->zworker, NULL, zw_thread, fs) == 0)
		fs->zworker_running = true;
}

void fs_zw_stop(struct arb_fs *fs)
{
	if (!fs->zworker_running)
		return;
	fs_lock(fs);
	fs->stop = true;
	pthread_cond_broadcast(&fs->zw_wake);
	fs_unlock(fs);
	pthread_join(fs->zworker, NULL);
	fs->zworker_running = false;
	free(fs->zw_q);
	fs->zw_q = NULL;
	fs->zw_nr = fs->zw_cap = fs->zw_head = 0;
}

void fs_zw_wait_idle(struct arb_fs *fs)
{
	fs_lock(fs);
	while (fs->zworker_running && (fs->zw_nr || fs->zw_busy))
		pthread_cond_wait(&fs->zw_wake, &fs->vol->lock);
	fs_unlock(fs);
}

/* ---- what a file takes --------------------------------------------------- */

int arb_fs_file_space(struct arb_fs *fs, uint64_t ino,
		      struct arb_file_space *out)
{
	struct arb_inode in;
	struct arb_imem *im;
	struct fs_ext e;
	uint64_t pos = 0, delayed = 0;
	int ret;

	memset(out, 0, sizeof(*out));
	fs_lock(fs);
	ret = fs_inode_read(fs, ino, &in);
	if (ret)
		goto out;
	im = fs_imem_get(fs, ino, false);
	while ((ret = fs_ext_next(fs, ino, pos, &e, NULL)) == 0) {
		uint64_t len = e.end - e.start;

		pos = e.end;
		/* delayed blocks replace what the tree has under them */
		for (uint64_t b = e.start / fs->bs; im && b * fs->bs < e.end;
		     b++)
			if (fs_dmap_find(im, b) && len >= fs->bs)
				len -= fs->bs;
		out->extents++;
		if (e.type == ARB_FILE_EXTENT_PREALLOC) {
			out->prealloc_bytes += len;
			continue;
		}
		out->bytes += len;
		if (e.type == ARB_FILE_EXTENT_INLINE && e.compression) {
			out->stored += e.inline_stored;
			out->compressed_bytes += len;
			out->compressed_stored += e.inline_stored;
			out->compressed_extents++;
			continue;
		}
		if (!e.compression) {
			out->stored += len;
			continue;
		}
		/* the share of the stored bytes this item's bytes take */
		uint64_t st = e.ram_bytes ? e.disk_num_bytes * len / e.ram_bytes
					  : 0;
		out->stored += st;
		out->compressed_bytes += len;
		out->compressed_stored += st;
		out->compressed_extents++;
	}
	if (ret == 1)
		ret = 0;
	if (im)
		delayed = (uint64_t)im->nr * fs->bs;
	if (delayed > in.size)
		delayed = in.size;
	out->bytes += delayed;
	out->stored += delayed;
out:
	fs_unlock(fs);
	return ret;
}
