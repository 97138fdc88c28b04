/* SPDX-License-Identifier: MIT */
/*
 * arbor/dump.h - the items of an unmounted image as text, one line each,
 * for debugging (`arbor dump`).  The text is for people: its fields may
 * change between versions.
 */
#ifndef ARBOR_DUMP_H
#define ARBOR_DUMP_H

#include <stdint.h>
#include <stdio.h>

#include "arbor/dev.h"

#ifdef __cplusplus
extern "C" {
#endif

/* every tree a version 2 image has: root, extent, checksum, fs tree 5 */
#define ARB_DUMP_ALL 0

/*
 * Print every item of tree `tree` of the image on dev (ARB_DUMP_ALL: the
 * root tree, the extent tree, the checksum tree and the default fs tree,
 * in that order) to out: a line "tree ID: root node ADDR level L gen G",
 * a line per item with its key, size and payload's fields (entries of
 * multi-entry items on lines of their own), then "tree ID: N items".  An
 * item whose payload does not validate is printed with the reason
 * ("invalid: ..."), one of a newer format with "newer format: ..." and
 * its first bytes; the dump goes on.
 *
 * The image is opened read-only and nothing is written.  Returns 0, or a
 * negative errno: the image does not open (*why: the library's reason,
 * in static storage, or NULL: see arb_reason), a tree does not exist or a
 * node of it does not read (logged as "tree ID: ..."; with ARB_DUMP_ALL
 * the other trees are still printed and the first error is returned).
 * why may be NULL.
 */
int arb_dump_tree(struct arb_dev *dev, uint64_t tree, FILE *out,
		  const char **why);

#ifdef __cplusplus
}
#endif
#endif
