/* SPDX-License-Identifier: MIT */
/*
 * dev_stats.c - DEV_STATS: a number with no key layout or payload yet
 * (docs/FORMAT.md, "Open questions"); no version 2 image has one, so one
 * found is ARB_ITEM_NEWER and printed as raw bytes.
 */
#include <errno.h>

#include "items.h"

ARB_ITEM_FN(arb_dev_stats)
{
	(void)k;
	(void)d;
	(void)size;
	return arb_item_why(why, ARB_ITEM_NEWER,
			    "DEV_STATS has no layout in format version %d",
			    ARB_FORMAT_VERSION);
}
