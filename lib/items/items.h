/* SPDX-License-Identifier: MIT */
/*
 * items.h - the items layer: what the payload of each item type
 * (ARB_ITEM_TYPES, format.h) may hold, and how it reads as text.
 *
 * Every payload read from disk is validated here once, by
 * arb_item_validate(), before the upper layers (lib/fs, lib/check, the
 * dump) use its fields; they then trust what it accepted.  Validation
 * looks at one item only (its key and its bytes): what needs the rest of
 * the image (the sector size, other items, the extent tree) is the
 * checker's.  It checks disk data, so it never asserts.
 *
 * Files (one per item family, each with its validate and print functions):
 *   inode.c        INODE_ITEM
 *   entries.c      DIR_ITEM, DIR_INDEX, XATTR_ITEM (struct arb_dir_entry
 *                  chains), INODE_REF, XATTR_DATA; entry walkers
 *   file_extent.c  EXTENT_DATA
 *   csum.c         EXTENT_CSUM
 *   root.c         ROOT_ITEM, ROOT_REF, ROOT_BACKREF, SUBVOL_ITEM,
 *                  DROP_PROGRESS
 *   extent_tree.c  EXTENT_ITEM, EXTENT_DATA_REF
 *   orphan.c       ORPHAN_ITEM
 *   dev_stats.c    DEV_STATS
 *   items.c        the table (one row per ARB_ITEM_TYPES entry), TEST_ITEM
 *   dump.c         arb_dump_tree (arbor/dump.h): a tree, item by item
 * Layering: format <- core <- items <- {fs, check, dump}.
 */
#ifndef ARB_ITEMS_H
#define ARB_ITEMS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "format.h"

/*
 * arb_item_validate: is the payload of the item with key k (size bytes at
 * data) one this code can read?
 *   0                 yes
 *   ARB_ITEM_NEWER    it is not corrupt as far as this code can tell, but
 *                     laid out by a newer format (a ROOT_ITEM of a size
 *                     this code does not know, an item type reserved for
 *                     later): do not read it, and do not "repair" it
 *   -EUCLEAN          malformed
 * *why (may be NULL) is set for the last two: a precise reason, in
 * storage of the calling thread that the next call replaces.
 */
#define ARB_ITEM_NEWER 1
int arb_item_validate(const struct arb_key *k, const void *data, uint32_t size,
		      const char **why);
/*
 * One line (entries of multi-entry items on lines of their own) for the
 * item: "  (objectid TYPE offset) size N" and the payload's fields, or
 * the reason arb_item_validate gives when it does not validate.  Never
 * reads past size.
 */
void arb_item_print(FILE *out, const struct arb_key *k, const void *data,
		    uint32_t size);

/* ---- entries.c: walking multi-entry items ------------------------------ */

/* One entry of a DIR_ITEM, DIR_INDEX or XATTR_ITEM (struct arb_dir_entry). */
struct arb_dent {
	size_t off, len;   /* the entry's place in the item */
	uint64_t ino;      /* d_ino: child inode (0 for xattrs) */
	uint64_t transid;
	uint8_t type;      /* d_type */
	const char *name;  /* not NUL terminated */
	size_t name_len;   /* 1..ARB_NAME_MAX */
	const uint8_t *data; /* the xattr value (or its arb_xattr_ref) */
	size_t data_len;
};
/*
 * The entry at *pos of an item of size bytes: 0 (and *pos moves past it),
 * 1 when *pos is at the end, -EUCLEAN (with *why, may be NULL) when the
 * entry is cut short or its name length is out of 1..ARB_NAME_MAX.
 */
int arb_dent_next(const void *item, size_t size, size_t *pos,
		  struct arb_dent *e, const char **why);
/*
 * Find the entry called name in the item: 0 (its offset and length),
 * -ENOENT, or -EUCLEAN when any entry of the item is malformed (the whole
 * chain is checked, found or not).
 */
int arb_dent_find(const void *item, size_t size, const char *name,
		  size_t name_len, size_t *off, size_t *len);

/* One entry of an INODE_REF (struct arb_inode_ref). */
struct arb_iref {
	size_t off, len;  /* the entry's place in the item */
	uint64_t index;   /* the link's DIR_INDEX sequence */
	const char *name; /* not NUL terminated */
	size_t name_len;  /* 1..ARB_NAME_MAX */
};
/* as arb_dent_next, for INODE_REF entries */
int arb_iref_next(const void *item, size_t size, size_t *pos,
		  struct arb_iref *r, const char **why);
/* as arb_dent_find, for INODE_REF entries (r gets the entry) */
int arb_iref_find(const void *item, size_t size, const char *name,
		  size_t name_len, struct arb_iref *r);

/* ---- the table --------------------------------------------------------- */

typedef int (*arb_item_validate_fn)(const struct arb_key *k,
				    const uint8_t *d, uint32_t size,
				    const char **why);
/* prints the fields after the key, only called on a valid payload */
typedef void (*arb_item_print_fn)(FILE *out, const struct arb_key *k,
				  const uint8_t *d, uint32_t size);

/*
 * One row per ARB_ITEM_TYPES entry: ARB_ITEM_OPS_<name> names its validate
 * and print functions.  items.c builds its table from ARB_ITEM_TYPES with
 * these, so a type added to format.h without a row here does not compile.
 */
#define ARB_ITEM_OPS_INODE_ITEM arb_inode_item_validate, arb_inode_item_print
#define ARB_ITEM_OPS_INODE_REF arb_inode_ref_validate, arb_inode_ref_print
#define ARB_ITEM_OPS_XATTR_ITEM arb_dent_item_validate, arb_dent_item_print
#define ARB_ITEM_OPS_XATTR_DATA arb_xattr_data_validate, arb_xattr_data_print
#define ARB_ITEM_OPS_ORPHAN_ITEM arb_orphan_validate, arb_orphan_print
#define ARB_ITEM_OPS_DIR_ITEM arb_dent_item_validate, arb_dent_item_print
#define ARB_ITEM_OPS_DIR_INDEX arb_dent_item_validate, arb_dent_item_print
#define ARB_ITEM_OPS_EXTENT_DATA arb_file_extent_validate, arb_file_extent_print
#define ARB_ITEM_OPS_EXTENT_CSUM arb_csum_item_validate, arb_csum_item_print
#define ARB_ITEM_OPS_ROOT_ITEM arb_root_item_validate, arb_root_item_print
#define ARB_ITEM_OPS_SUBVOL_ITEM arb_subvol_item_validate, arb_subvol_item_print
#define ARB_ITEM_OPS_DIGEST_ITEM arb_digest_item_validate, arb_digest_item_print
#define ARB_ITEM_OPS_DROP_PROGRESS arb_drop_progress_validate, arb_drop_progress_print
#define ARB_ITEM_OPS_ROOT_BACKREF arb_root_ref_validate, arb_root_ref_print
#define ARB_ITEM_OPS_ROOT_REF arb_root_ref_validate, arb_root_ref_print
#define ARB_ITEM_OPS_EXTENT_ITEM arb_extent_item_validate, arb_extent_item_print
#define ARB_ITEM_OPS_EXTENT_DATA_REF arb_data_ref_validate, arb_data_ref_print
#define ARB_ITEM_OPS_DEV_STATS arb_dev_stats_validate, arb_raw_item_print
#define ARB_ITEM_OPS_TEST_ITEM arb_any_item_validate, arb_raw_item_print

#define ARB_ITEM_FN(name)                                                      \
	int name##_validate(const struct arb_key *k, const uint8_t *d,         \
			    uint32_t size, const char **why)
#define ARB_ITEM_PRINT_FN(name)                                                \
	void name##_print(FILE *out, const struct arb_key *k,                  \
			  const uint8_t *d, uint32_t size)
ARB_ITEM_FN(arb_inode_item);
ARB_ITEM_PRINT_FN(arb_inode_item);
ARB_ITEM_FN(arb_inode_ref);
ARB_ITEM_PRINT_FN(arb_inode_ref);
ARB_ITEM_FN(arb_dent_item);
ARB_ITEM_PRINT_FN(arb_dent_item);
ARB_ITEM_FN(arb_xattr_data);
ARB_ITEM_PRINT_FN(arb_xattr_data);
ARB_ITEM_FN(arb_orphan);
ARB_ITEM_PRINT_FN(arb_orphan);
ARB_ITEM_FN(arb_file_extent);
ARB_ITEM_PRINT_FN(arb_file_extent);
ARB_ITEM_FN(arb_csum_item);
ARB_ITEM_PRINT_FN(arb_csum_item);
ARB_ITEM_FN(arb_root_item);
ARB_ITEM_PRINT_FN(arb_root_item);
ARB_ITEM_FN(arb_root_ref);
ARB_ITEM_PRINT_FN(arb_root_ref);
ARB_ITEM_FN(arb_subvol_item);
ARB_ITEM_PRINT_FN(arb_subvol_item);
ARB_ITEM_FN(arb_digest_item);
ARB_ITEM_PRINT_FN(arb_digest_item);
ARB_ITEM_FN(arb_drop_progress);
ARB_ITEM_PRINT_FN(arb_drop_progress);
ARB_ITEM_FN(arb_extent_item);
ARB_ITEM_PRINT_FN(arb_extent_item);
ARB_ITEM_FN(arb_data_ref);
ARB_ITEM_PRINT_FN(arb_data_ref);
ARB_ITEM_FN(arb_dev_stats);
ARB_ITEM_FN(arb_any_item);
ARB_ITEM_PRINT_FN(arb_raw_item);

/* ---- for the family files (items.c) ------------------------------------ */

/* set *why (if why) to a formatted reason in thread-local storage;
 * returns err */
__attribute__((format(printf, 3, 4))) int arb_item_why(const char **why,
							 int err,
							 const char *fmt, ...);
/* a name or value as text: printable ASCII as is, other bytes \xNN */
void arb_item_print_bytes(FILE *out, const void *p, size_t len);

#endif
