/* SPDX-License-Identifier: MIT */
/*
 * orphan.c - ORPHAN_ITEM, key (ARB_ORPHAN_OBJECTID, ORPHAN_ITEM, inode):
 * an unlinked inode still to be freed.  No payload is read.
 *
 * Valid: under ARB_ORPHAN_OBJECTID (above every inode number).  Whether
 * the inode exists with nlink 0 is the checker's.
 */
#include <errno.h>
#include <inttypes.h>

#include "items.h"

ARB_ITEM_FN(arb_orphan)
{
	(void)d;
	(void)size;
	if (k->objectid != ARB_ORPHAN_OBJECTID)
		return arb_item_why(why, -EUCLEAN,
				    "orphan item under objectid %" PRIu64
				    ", not the orphan objectid",
				    k->objectid);
	return 0;
}

ARB_ITEM_PRINT_FN(arb_orphan)
{
	(void)d;
	(void)size;
	fprintf(out, " inode %" PRIu64 "\n", k->offset);
}
