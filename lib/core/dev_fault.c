/* SPDX-License-Identifier: MIT */
/*
 * dev_fault.c - a device that fails the n-th I/O (arbor/dev.h).
 *
 * Every operation is counted by kind (read, write, flush) from the moment of
 * wrapping; arb_dev_fault_count() reports those totals.  Arming sets a trap:
 * the operations of the kinds in its mask are counted again from 1, together,
 * and the n-th fails with err without reaching lower (a failed write changes
 * nothing).  A sticky trap also fails every later operation of those kinds,
 * which is what a dead disk looks like.
 */
#include <errno.h>
#include <stdlib.h>

#include "core.h"

struct fault_dev {
	struct arb_dev dev;
	struct arb_dev *lower;
	/* operations seen since wrapping, indexed by log2(ARB_FAULT_*) */
	uint64_t seen[3];
	/* the trap; 0 when disarmed */
	unsigned mask;
	/* operations of the kinds in mask since arming */
	uint64_t hits;
	/* the 1-based operation that fails */
	uint64_t n;
	/* negative errno */
	int err;
	bool sticky;
};

static const struct arb_dev_ops fault_ops;

static struct fault_dev *to_fault(struct arb_dev *dev)
{
	return dev && dev->ops == &fault_ops ? dev->priv : NULL;
}

/* Count one operation of kind op; returns the error to fail it with, or 0. */
static int fault_hit(struct fault_dev *f, unsigned op)
{
	uint64_t hits;

	/* atomic: reads and deferred writes run outside the volume lock */
	__atomic_add_fetch(&f->seen[__builtin_ctz(op)], 1, __ATOMIC_RELAXED);
	if (!(f->mask & op))
		return 0;
	hits = __atomic_add_fetch(&f->hits, 1, __ATOMIC_RELAXED);
	if (hits == f->n || (f->sticky && hits > f->n))
		return f->err;
	return 0;
}

static int fault_pread(struct arb_dev *dev, void *buf, size_t len,
		       uint64_t off, enum arb_io_kind kind)
{
	struct fault_dev *f = dev->priv;
	int ret = fault_hit(f, ARB_FAULT_READ);

	return ret ? ret : arb_dev_read_op(f->lower, buf, len, off, kind);
}

static int fault_pwrite(struct arb_dev *dev, const void *buf, size_t len,
			uint64_t off, enum arb_io_kind kind)
{
	struct fault_dev *f = dev->priv;
	int ret = fault_hit(f, ARB_FAULT_WRITE);

	return ret ? ret : arb_dev_write(f->lower, buf, len, off, kind);
}

static int fault_flush(struct arb_dev *dev)
{
	struct fault_dev *f = dev->priv;
	int ret = fault_hit(f, ARB_FAULT_FLUSH);

	return ret ? ret : arb_dev_flush(f->lower);
}

static int fault_resize(struct arb_dev *dev, uint64_t size)
{
	struct fault_dev *f = dev->priv;
	int ret;

	if (!f->lower->ops->resize)
		return -EOPNOTSUPP;
	ret = f->lower->ops->resize(f->lower, size);
	if (!ret)
		dev->size = f->lower->size;
	return ret;
}

static void fault_destroy(struct arb_dev *dev)
{
	struct fault_dev *f = dev->priv;

	arb_dev_destroy(f->lower);
	free(f);
}

static const struct arb_dev_ops fault_ops = {
	.pread = fault_pread,
	.pwrite = fault_pwrite,
	.flush = fault_flush,
	.resize = fault_resize,
	.destroy = fault_destroy,
};

/* On failure lower still belongs to the caller. */
int arb_dev_fault_wrap(struct arb_dev *lower, struct arb_dev **out)
{
	struct fault_dev *f;

	if (!lower)
		return -EINVAL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->lower = lower;
	f->dev.ops = &fault_ops;
	f->dev.size = lower->size;
	f->dev.priv = f;
	*out = &f->dev;
	return 0;
}

/*
 * n = 0 is taken as 1; err may be given as a positive errno and 0 means
 * -EIO.  Arming again replaces the trap and restarts its count.
 */
void arb_dev_fault_arm(struct arb_dev *fault, unsigned mask, uint64_t n,
		       int err, bool sticky)
{
	struct fault_dev *f = to_fault(fault);

	if (!f)
		return;
	f->mask = mask & (ARB_FAULT_READ | ARB_FAULT_WRITE | ARB_FAULT_FLUSH);
	f->hits = 0;
	f->n = n ? n : 1;
	f->err = err > 0 ? -err : err ? err : -EIO;
	f->sticky = sticky;
}

void arb_dev_fault_disarm(struct arb_dev *fault)
{
	struct fault_dev *f = to_fault(fault);

	if (f)
		f->mask = 0;
}

uint64_t arb_dev_fault_count(struct arb_dev *fault, unsigned mask)
{
	struct fault_dev *f = to_fault(fault);
	uint64_t sum = 0;
	unsigned i;

	if (!f)
		return 0;
	for (i = 0; i < 3; i++)
		if (mask & (1u << i))
			sum += f->seen[i];
	return sum;
}
