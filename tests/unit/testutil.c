/* SPDX-License-Identifier: MIT */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int tu_full_scale(void)
{
	const char *s = getenv("ARBOR_TEST_SCALE");
	return s && strcmp(s, "full") == 0;
}

uint64_t tu_seed(const char *what)
{
	const char *s = getenv("ARBOR_TEST_SEED");
	uint64_t seed;
	struct timespec ts;

	if (s) {
		seed = strtoull(s, NULL, 0);
	} else {
		clock_gettime(CLOCK_REALTIME, &ts);
		seed = (uint64_t)ts.tv_sec * 1000000007ULL ^ (uint64_t)ts.tv_nsec;
	}
	if (!seed)
		seed = 1;
	fprintf(stderr, "%s: seed %llu (ARBOR_TEST_SEED=%llu to repeat)\n",
		what, (unsigned long long)seed, (unsigned long long)seed);
	return seed;
}

uint64_t tu_rand(uint64_t *state)
{
	uint64_t x = *state;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return x * 0x2545F4914F6CDD1DULL;
}

int tu_run_suite(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}

#include "core.h"

void tu_vol_new(uint64_t size, uint32_t nodesize, struct arb_dev **dev,
		struct arb_vol **vol)
{
	tu_vol_new_copies(size, nodesize, 0, dev, vol);
}

void tu_vol_new_copies(uint64_t size, uint32_t nodesize, unsigned meta_copies,
		       struct arb_dev **dev, struct arb_vol **vol)
{
	struct arb_format_opts fo = { 0 };
	int ret;

	fo.nodesize = nodesize;
	fo.meta_copies = meta_copies;
	ck_assert_int_eq(arb_dev_open_mem(size, dev), 0);
	ret = arb_vol_format(*dev, &fo);
	ck_assert_int_eq(ret, 0);
	ret = arb_vol_open(*dev, NULL, vol);
	ck_assert_int_eq(ret, 0);
}

void tu_vol_reopen(struct arb_dev *dev, struct arb_vol **vol)
{
	ck_assert_int_eq(arb_vol_close(*vol), 0);
	ck_assert_int_eq(arb_vol_open(dev, NULL, vol), 0);
}

void tu_vol_check(struct arb_vol *vol)
{
	struct arb_check_report rep = { 0 };

	rep.out = stderr;
	ck_assert_msg(arb_check_vol(vol, &rep) == 0,
		      "checker found %llu problems",
		      (unsigned long long)rep.errors);
}

/* ---- a borrowed device -------------------------------------------------- */

struct borrow {
	struct arb_dev dev;
	struct arb_dev *lower;
	void (*before_read)(enum arb_io_kind kind);
	void (*before_write)(enum arb_io_kind kind, size_t len);
};

static int borrow_pread(struct arb_dev *d, void *buf, size_t len,
			uint64_t off, enum arb_io_kind kind)
{
	struct borrow *b = d->priv;
	struct arb_dev *l = b->lower;

	if (b->before_read)
		b->before_read(kind);
	return l->ops->pread(l, buf, len, off, kind);
}

static int borrow_pwrite(struct arb_dev *d, const void *buf, size_t len,
			 uint64_t off, enum arb_io_kind kind)
{
	struct borrow *b = d->priv;
	struct arb_dev *l = b->lower;

	if (b->before_write)
		b->before_write(kind, len);
	return l->ops->pwrite(l, buf, len, off, kind);
}

static int borrow_flush(struct arb_dev *d)
{
	struct arb_dev *l = ((struct borrow *)d->priv)->lower;
	return l->ops->flush(l);
}

static int borrow_discard(struct arb_dev *d, uint64_t off, uint64_t len)
{
	struct arb_dev *l = ((struct borrow *)d->priv)->lower;
	return arb_dev_discard(l, off, len);
}

static void borrow_destroy(struct arb_dev *d)
{
	free(d->priv);
}

static const struct arb_dev_ops borrow_ops = {
	.pread = borrow_pread,
	.pwrite = borrow_pwrite,
	.flush = borrow_flush,
	.destroy = borrow_destroy,
	.discard = borrow_discard,
};

struct arb_dev *tu_dev_borrow_hooked(struct arb_dev *lower,
				     void (*before_read)(enum arb_io_kind kind))
{
	return tu_dev_borrow_hooks(lower, before_read, NULL);
}

struct arb_dev *tu_dev_borrow_hooks(struct arb_dev *lower,
				    void (*before_read)(enum arb_io_kind kind),
				    void (*before_write)(enum arb_io_kind kind,
							 size_t len))
{
	struct borrow *b = calloc(1, sizeof(*b));

	ck_assert_ptr_nonnull(b);
	b->dev.ops = &borrow_ops;
	b->dev.size = lower->size;
	b->dev.priv = b;
	b->lower = lower;
	b->before_read = before_read;
	b->before_write = before_write;
	return &b->dev;
}

struct arb_dev *tu_dev_borrow(struct arb_dev *lower)
{
	return tu_dev_borrow_hooked(lower, NULL);
}
