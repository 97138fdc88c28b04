/* SPDX-License-Identifier: MIT */
/*
 * dev_log.c - the write-logging device and the tracing device (arbor/dev.h).
 *
 * The log device keeps a copy of lower's contents taken at wrap time and
 * every successful write (offset and bytes) and flush after it, in order.
 * Entry i of the log is the i-th recorded write or flush.  A replay up to
 * entry n rebuilds what a disk obeying the usual contract may hold after
 * a crash just before entry n:
 *
 *   - every write before the last flush before n is on the disk, applied in
 *     order (they completed and a flush followed them);
 *   - of the writes after that flush, any subset may have reached the disk,
 *     in any order, and one may have been torn at a sector (512 bytes)
 *     boundary.
 *
 * Failed writes and flushes are not recorded.  The log device cannot be
 * resized: its entries all refer to the image size seen at wrap time.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.h"

#define LOG_SECTOR 512

struct log_entry {
	uint64_t off;
	/* the bytes written; NULL for a flush */
	uint8_t *data;
	size_t len;
};

struct log_dev {
	struct arb_dev dev;
	struct arb_dev *lower;
	/* deferred data writes (arb_dev_pend_add) may run beside the
	 * writes of the thread holding the volume lock */
	pthread_mutex_t lock;
	/* lower's contents at wrap time, dev.size bytes */
	uint8_t *base;
	struct log_entry *ents;
	size_t nr_ents, max_ents;
};

static const struct arb_dev_ops log_ops;

static struct log_dev *to_log(struct arb_dev *dev)
{
	return dev && dev->ops == &log_ops ? dev->priv : NULL;
}

/* Make room for one more entry, so that recording cannot fail after the
 * operation went through to lower. */
static int log_reserve(struct log_dev *l)
{
	struct log_entry *ents;
	size_t max;

	if (l->nr_ents < l->max_ents)
		return 0;
	max = l->max_ents ? 2 * l->max_ents : 64;
	if (max > SIZE_MAX / sizeof(*ents))
		return -ENOMEM;
	ents = realloc(l->ents, max * sizeof(*ents));
	if (!ents)
		return -ENOMEM;
	l->ents = ents;
	l->max_ents = max;
	return 0;
}

static int log_pread(struct arb_dev *dev, void *buf, size_t len, uint64_t off,
		     enum arb_io_kind kind)
{
	struct log_dev *l = dev->priv;

	return arb_dev_read_op(l->lower, buf, len, off, kind);
}

static int log_pwrite(struct arb_dev *dev, const void *buf, size_t len,
		      uint64_t off, enum arb_io_kind kind)
{
	struct log_dev *l = dev->priv;
	uint8_t *copy;
	int ret;

	copy = malloc(len);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, buf, len);
	pthread_mutex_lock(&l->lock);
	ret = log_reserve(l);
	if (!ret)
		ret = arb_dev_write(l->lower, buf, len, off, kind);
	if (!ret)
		l->ents[l->nr_ents++] = (struct log_entry){ off, copy, len };
	pthread_mutex_unlock(&l->lock);
	if (ret)
		free(copy);
	return ret;
}

static int log_flush(struct arb_dev *dev)
{
	struct log_dev *l = dev->priv;
	int ret;

	pthread_mutex_lock(&l->lock);
	ret = log_reserve(l);
	if (!ret)
		ret = arb_dev_flush(l->lower);
	if (!ret)
		l->ents[l->nr_ents++] = (struct log_entry){ 0, NULL, 0 };
	pthread_mutex_unlock(&l->lock);
	return ret;
}

static void log_destroy(struct arb_dev *dev)
{
	struct log_dev *l = dev->priv;
	size_t i;

	arb_dev_destroy(l->lower);
	pthread_mutex_destroy(&l->lock);
	for (i = 0; i < l->nr_ents; i++)
		free(l->ents[i].data);
	free(l->ents);
	free(l->base);
	free(l);
}

static const struct arb_dev_ops log_ops = {
	.pread = log_pread,
	.pwrite = log_pwrite,
	.flush = log_flush,
	.resize = NULL,
	.destroy = log_destroy,
};

/* On failure lower still belongs to the caller. */
int arb_dev_log_wrap(struct arb_dev *lower, struct arb_dev **out)
{
	struct log_dev *l;
	int ret;

	if (!lower)
		return -EINVAL;
	if (lower->size > SIZE_MAX)
		return -ENOMEM;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->base = malloc(lower->size ? (size_t)lower->size : 1);
	if (!l->base) {
		ret = -ENOMEM;
		goto out_free;
	}
	ret = arb_dev_read(lower, l->base, (size_t)lower->size, 0,
			   ARB_IO_OTHER);
	if (ret)
		goto out_free_base;
	l->lower = lower;
	pthread_mutex_init(&l->lock, NULL);
	l->dev.ops = &log_ops;
	l->dev.size = lower->size;
	l->dev.priv = l;
	*out = &l->dev;
	return 0;

out_free_base:
	free(l->base);
out_free:
	free(l);
	return ret;
}

size_t arb_dev_log_len(struct arb_dev *log)
{
	struct log_dev *l = to_log(log);

	return l ? l->nr_ents : 0;
}

/*
 * Stores at most max indices.  Returns how many were stored, or, when idx is
 * NULL, how many flushes there are in all (to size the array).
 */
size_t arb_dev_log_flushes(struct arb_dev *log, size_t *idx, size_t max)
{
	struct log_dev *l = to_log(log);
	size_t i, nr = 0;

	if (!l)
		return 0;
	for (i = 0; i < l->nr_ents; i++) {
		if (l->ents[i].data)
			continue;
		if (idx) {
			if (nr == max)
				break;
			idx[nr] = i;
		}
		nr++;
	}
	return nr;
}

/* splitmix64: tiny, and any seed (0 too) gives a good sequence */
static uint64_t replay_rand(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Bytes of write e to apply when it is torn: up to a random sector
 * boundary strictly inside it, or all of it when there is none. */
static size_t replay_tear(const struct log_entry *e, uint64_t *rng)
{
	uint64_t first = e->off / LOG_SECTOR;
	uint64_t nb = (e->off + e->len - 1) / LOG_SECTOR - first;

	if (!nb)
		return e->len;
	return (size_t)((first + 1 + replay_rand(rng) % nb) * LOG_SECTOR -
			e->off);
}

int arb_dev_log_replay(struct arb_dev *log, size_t n, enum arb_replay_mode mode,
		       uint64_t seed, struct arb_dev **out)
{
	struct log_dev *l = to_log(log);
	const struct log_entry *e;
	struct arb_dev *mem;
	uint8_t *img;
	size_t *live, nr_live = 0, durable = 0, torn = SIZE_MAX, i, j, t;
	uint64_t rng = seed;
	int ret;

	if (!l || n > l->nr_ents || (unsigned)mode > ARB_REPLAY_REORDER_TEAR)
		return -EINVAL;
	/* entries [0, durable) end with the last flush before n */
	if (mode == ARB_REPLAY_PREFIX)
		durable = n;
	else
		for (i = n; i > 0 && !durable; i--)
			if (!l->ents[i - 1].data)
				durable = i;
	/* the unflushed writes that survive, by entry index */
	live = malloc((n - durable + 1) * sizeof(*live));
	if (!live)
		return -ENOMEM;
	for (i = durable; i < n; i++)
		if (l->ents[i].data && (replay_rand(&rng) & 1))
			live[nr_live++] = i;
	if (mode == ARB_REPLAY_REORDER_TEAR) {
		/* Fisher-Yates */
		for (i = nr_live; i > 1; i--) {
			j = (size_t)(replay_rand(&rng) % i);
			t = live[i - 1];
			live[i - 1] = live[j];
			live[j] = t;
		}
		if (nr_live && (replay_rand(&rng) & 1))
			torn = (size_t)(replay_rand(&rng) % nr_live);
	}

	ret = arb_dev_open_mem(l->dev.size, &mem);
	if (ret)
		goto out_free;
	img = arb_dev_mem_data(mem);
	memcpy(img, l->base, (size_t)l->dev.size);
	for (i = 0; i < durable; i++) {
		e = &l->ents[i];
		if (e->data)
			memcpy(img + e->off, e->data, e->len);
	}
	for (i = 0; i < nr_live; i++) {
		e = &l->ents[live[i]];
		memcpy(img + e->off, e->data,
		       i == torn ? replay_tear(e, &rng) : e->len);
	}
	*out = mem;
out_free:
	free(live);
	return ret;
}

/* ---- tracing ----------------------------------------------------------- */

struct trace_dev {
	struct arb_dev dev;
	struct arb_dev *lower;
	FILE *f;
	/* CLOCK_MONOTONIC at wrap time */
	struct timespec t0;
};

/* One line per operation, written before it is issued so that a hang or a
 * crash still shows it. */
static void trace_op(struct trace_dev *t, char op, uint64_t off, size_t len,
		     enum arb_io_kind kind)
{
	static const char *const names[] = { "super", "node", "data", "other" };
	struct timespec now;
	double secs;

	clock_gettime(CLOCK_MONOTONIC, &now);
	secs = (double)(now.tv_sec - t->t0.tv_sec) +
	       (double)(now.tv_nsec - t->t0.tv_nsec) / 1e9;
	fprintf(t->f, "%.6f %c %" PRIu64 " %zu %s\n", secs, op, off, len,
		names[(unsigned)kind <= ARB_IO_OTHER ? kind : ARB_IO_OTHER]);
	fflush(t->f);
}

static int trace_pread(struct arb_dev *dev, void *buf, size_t len,
		       uint64_t off, enum arb_io_kind kind)
{
	struct trace_dev *t = dev->priv;

	trace_op(t, 'R', off, len, kind);
	return arb_dev_read_op(t->lower, buf, len, off, kind);
}

static int trace_pwrite(struct arb_dev *dev, const void *buf, size_t len,
			uint64_t off, enum arb_io_kind kind)
{
	struct trace_dev *t = dev->priv;

	trace_op(t, 'W', off, len, kind);
	return arb_dev_write(t->lower, buf, len, off, kind);
}

static int trace_flush(struct arb_dev *dev)
{
	struct trace_dev *t = dev->priv;

	trace_op(t, 'F', 0, 0, ARB_IO_OTHER);
	return arb_dev_flush(t->lower);
}

static int trace_resize(struct arb_dev *dev, uint64_t size)
{
	struct trace_dev *t = dev->priv;
	int ret;

	if (!t->lower->ops->resize)
		return -EOPNOTSUPP;
	ret = t->lower->ops->resize(t->lower, size);
	if (!ret)
		dev->size = t->lower->size;
	return ret;
}

/* a hint, not an I/O: passed on, not traced */
static void trace_readahead(struct arb_dev *dev, uint64_t off, size_t len)
{
	struct trace_dev *t = dev->priv;

	arb_dev_readahead(t->lower, off, len);
}

/* a fetch into the host's cache, not a read of the caller's: not traced */
static int trace_prefetch(struct arb_dev *dev, uint64_t off, size_t len)
{
	struct trace_dev *t = dev->priv;

	arb_dev_prefetch(t->lower, off, len);
	return 0;
}

/* traced when it read (a read that would have waited did nothing) */
static int trace_read_cached(struct arb_dev *dev, void *buf, size_t len,
			     uint64_t off, enum arb_io_kind kind)
{
	struct trace_dev *t = dev->priv;
	int ret = arb_dev_read_cached(t->lower, buf, len, off, kind);

	if (ret == 1)
		trace_op(t, 'R', off, len, kind);
	return ret;
}

/* traced when it ends, and only when it flushed or tried to (the
 * caller cannot know beforehand whether it will) */
static int trace_flush_behind(struct arb_dev *dev, uint64_t limit)
{
	struct trace_dev *t = dev->priv;
	int ret = arb_dev_flush_behind(t->lower, limit);

	if (ret)
		trace_op(t, 'F', 0, 0, ARB_IO_DATA);
	return ret;
}

static void trace_destroy(struct arb_dev *dev)
{
	struct trace_dev *t = dev->priv;

	arb_dev_destroy(t->lower);
	free(t);
}

static const struct arb_dev_ops trace_ops = {
	.pread = trace_pread,
	.pwrite = trace_pwrite,
	.flush = trace_flush,
	.resize = trace_resize,
	.destroy = trace_destroy,
	.readahead = trace_readahead,
	.flush_behind = trace_flush_behind,
	.read_cached = trace_read_cached,
	.prefetch = trace_prefetch,
};

/* f stays the caller's; on failure lower does too. */
int arb_dev_trace_wrap(struct arb_dev *lower, FILE *f, struct arb_dev **out)
{
	struct trace_dev *t;

	if (!lower || !f)
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->lower = lower;
	t->f = f;
	clock_gettime(CLOCK_MONOTONIC, &t->t0);
	t->dev.ops = &trace_ops;
	t->dev.size = lower->size;
	t->dev.priv = t;
	*out = &t->dev;
	return 0;
}
