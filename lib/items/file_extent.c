/* SPDX-License-Identifier: MIT */
/*
 * file_extent.c - EXTENT_DATA, key (inode, EXTENT_DATA, file offset):
 * struct arb_file_extent, a 21-byte header and inline bytes, or 53 bytes
 * pointing into a disk extent.
 *
 * Valid:
 *   - at least the header; f_compression ARB_COMPRESS_NONE, or
 *     ARB_COMPRESS_ZLIB on a REG or INLINE extent
 *   - INLINE: at file offset 0 only, f_ram_bytes = the inline bytes, or
 *     for a compressed one more than them and at most
 *     ARB_COMPRESS_INLINE_MAX
 *   - REG, PREALLOC: 53 bytes or more; f_disk_bytenr not 0 (holes are
 *     absent, not zero pointers); f_num_bytes not 0 and the file range
 *     [offset, offset + f_num_bytes) below 2^64; [f_offset, f_offset +
 *     f_num_bytes) inside the disk extent's f_disk_num_bytes, or for a
 *     compressed one inside its f_ram_bytes, which is at most
 *     ARB_COMPRESS_MAX_RAM and more than f_disk_num_bytes
 *   - no other type
 * Alignment to the sector size and overlaps between items are the
 * checker's (they need the superblock and the neighbours).
 */
#include <errno.h>
#include <inttypes.h>

#include "items.h"

ARB_ITEM_FN(arb_file_extent)
{
	const struct arb_file_extent *fe = (const struct arb_file_extent *)d;
	uint64_t off, num, disk_num, ram;
	uint8_t type, comp;

	if (size < ARB_FILE_EXTENT_INLINE_HDR)
		return arb_item_why(why, -EUCLEAN,
				    "file extent item of %u bytes, shorter "
				    "than its %d-byte header",
				    size, ARB_FILE_EXTENT_INLINE_HDR);
	comp = arb_file_extent_f_compression(fe);
	type = arb_file_extent_f_type(fe);
	if (comp != ARB_COMPRESS_NONE &&
	    (comp != ARB_COMPRESS_ZLIB || type == ARB_FILE_EXTENT_PREALLOC))
		return arb_item_why(why, -EUCLEAN,
				    "compressed (method %u, type %u), which "
				    "this arborfs cannot read",
				    comp, type);
	if (type == ARB_FILE_EXTENT_INLINE) {
		if (k->offset != 0)
			return arb_item_why(why, -EUCLEAN,
					    "inline extent at file offset "
					    "%" PRIu64 ", not 0",
					    k->offset);
		if (comp) {
			ram = arb_file_extent_f_ram_bytes(fe);
			if (ram > ARB_COMPRESS_INLINE_MAX ||
			    ram <= size - ARB_FILE_EXTENT_INLINE_HDR)
				return arb_item_why(
					why, -EUCLEAN,
					"compressed inline extent of %" PRIu64
					" bytes stored in %u",
					ram, size - ARB_FILE_EXTENT_INLINE_HDR);
			return 0;
		}
		if (arb_file_extent_f_ram_bytes(fe) !=
		    size - ARB_FILE_EXTENT_INLINE_HDR)
			return arb_item_why(
				why, -EUCLEAN,
				"inline extent of %u bytes says %" PRIu64,
				size - ARB_FILE_EXTENT_INLINE_HDR,
				arb_file_extent_f_ram_bytes(fe));
		return 0;
	}
	if (type != ARB_FILE_EXTENT_REG && type != ARB_FILE_EXTENT_PREALLOC)
		return arb_item_why(why, -EUCLEAN, "unknown extent type %u",
				    type);
	if (size < sizeof(*fe))
		return arb_item_why(why, -EUCLEAN,
				    "%s extent item of %u bytes, expected %zu",
				    type == ARB_FILE_EXTENT_REG ? "regular"
								: "prealloc",
				    size, sizeof(*fe));
	off = arb_file_extent_f_offset(fe);
	num = arb_file_extent_f_num_bytes(fe);
	disk_num = arb_file_extent_f_disk_num_bytes(fe);
	if (arb_file_extent_f_disk_bytenr(fe) == 0)
		return arb_item_why(why, -EUCLEAN, "disk address 0");
	if (num == 0)
		return arb_item_why(why, -EUCLEAN, "covers no bytes");
	if (k->offset + num < k->offset)
		return arb_item_why(why, -EUCLEAN,
				    "%" PRIu64 " bytes from file offset "
				    "%" PRIu64 " run past 2^64",
				    num, k->offset);
	if (comp) {
		ram = arb_file_extent_f_ram_bytes(fe);
		if (ram > ARB_COMPRESS_MAX_RAM || disk_num >= ram)
			return arb_item_why(why, -EUCLEAN,
					    "compressed extent of %" PRIu64
					    " bytes stored in %" PRIu64,
					    ram, disk_num);
		if (off > ram || num > ram - off)
			return arb_item_why(why, -EUCLEAN,
					    "bytes %" PRIu64 "+%" PRIu64
					    " of a compressed extent of "
					    "%" PRIu64,
					    off, num, ram);
		return 0;
	}
	if (off > disk_num || num > disk_num - off)
		return arb_item_why(why, -EUCLEAN,
				    "bytes %" PRIu64 "+%" PRIu64
				    " of a disk extent of %" PRIu64,
				    off, num, disk_num);
	return 0;
}

ARB_ITEM_PRINT_FN(arb_file_extent)
{
	const struct arb_file_extent *fe = (const struct arb_file_extent *)d;
	uint8_t type = arb_file_extent_f_type(fe);

	(void)k;
	fprintf(out, " gen %" PRIu64, arb_file_extent_f_generation(fe));
	if (type == ARB_FILE_EXTENT_INLINE) {
		if (arb_file_extent_f_compression(fe))
			fprintf(out, " inline %u bytes ram %" PRIu64 " zlib\n",
				size - ARB_FILE_EXTENT_INLINE_HDR,
				arb_file_extent_f_ram_bytes(fe));
		else
			fprintf(out, " inline %u bytes\n",
				size - ARB_FILE_EXTENT_INLINE_HDR);
		return;
	}
	fprintf(out,
		" %s disk %" PRIu64 "+%" PRIu64 " off %" PRIu64
		" len %" PRIu64 " ram %" PRIu64 "%s\n",
		type == ARB_FILE_EXTENT_PREALLOC ? "prealloc" : "reg",
		arb_file_extent_f_disk_bytenr(fe),
		arb_file_extent_f_disk_num_bytes(fe),
		arb_file_extent_f_offset(fe), arb_file_extent_f_num_bytes(fe),
		arb_file_extent_f_ram_bytes(fe),
		arb_file_extent_f_compression(fe) ? " zlib" : "");
}
