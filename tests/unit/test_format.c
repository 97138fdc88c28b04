// SPDX-License-Identifier: MIT
/*
 * test_format.c - the on-disk structs of lib/format.h.
 *
 * Offsets and sizes are checked at compile time next to the structs
 * (ARB_CHECK_SIZE, ARB_CHECK_OFF); this checks what the compiler cannot:
 * every accessor arb_set_<struct>_<field>() writes its value little-endian
 * at the field's own offset and nowhere else, and arb_<struct>_<field>()
 * reads it back.  FIELDS lists every ARB_LE() of format.h (the last
 * case checks that the list is complete).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format.h"
#include "testutil.h"

#define FIELDS \
	FIELD(commit_rec, bytenr, 64) \
	FIELD(commit_rec, len, 32) \
	FIELD(commit_rec, csum, 32) \
	FIELD(super, s_magic, 64) \
	FIELD(super, s_bytenr, 64) \
	FIELD(super, s_generation, 64) \
	FIELD(super, s_root, 64) \
	FIELD(super, s_total_bytes, 64) \
	FIELD(super, s_bytes_used, 64) \
	FIELD(super, s_nodesize, 32) \
	FIELD(super, s_sectorsize, 32) \
	FIELD(super, s_version, 32) \
	FIELD(super, s_csum_type, 16) \
	FIELD(super, s_root_level, 8) \
	FIELD(super, s_meta_copies, 8) \
	FIELD(super, s_incompat, 64) \
	FIELD(super, s_ro_compat, 64) \
	FIELD(super, s_compat, 64) \
	FIELD(super, s_flags, 64) \
	FIELD(super, s_repair_gen, 64) \
	FIELD(super, s_repair_prev, 64) \
	FIELD(super, s_root_generation, 64) \
	FIELD(super, s_root_mirror, 64) \
	FIELD(super, s_commit_nr, 32) \
	FIELD(super, s_hist_nr, 32) \
	FIELD(history_entry, he_generation, 64) \
	FIELD(history_entry, he_root, 64) \
	FIELD(history_entry, he_root_mirror, 64) \
	FIELD(history_entry, he_root_generation, 64) \
	FIELD(history_entry, he_time, 64) \
	FIELD(history_entry, he_root_level, 8) \
	FIELD(history_entry, he_time_ns, 32) \
	FIELD(disk_key, objectid, 64) \
	FIELD(disk_key, type, 8) \
	FIELD(disk_key, offset, 64) \
	FIELD(node_header, h_bytenr, 64) \
	FIELD(node_header, h_flags, 64) \
	FIELD(node_header, h_generation, 64) \
	FIELD(node_header, h_owner, 64) \
	FIELD(node_header, h_nritems, 32) \
	FIELD(node_header, h_level, 8) \
	FIELD(item, i_offset, 32) \
	FIELD(item, i_size, 32) \
	FIELD(key_ptr, p_blockptr, 64) \
	FIELD(key_ptr, p_generation, 64) \
	FIELD(root_ref, rr_dirid, 64) \
	FIELD(root_ref, rr_sequence, 64) \
	FIELD(root_ref, rr_name_len, 16) \
	FIELD(subvol_item, s_flags, 64) \
	FIELD(subvol_item, s_otime, 64) \
	FIELD(subvol_item, s_otime_ns, 32) \
	FIELD(subvol_item, s_ctime, 64) \
	FIELD(subvol_item, s_ctime_ns, 32) \
	FIELD(subvol_item, s_stransid, 64) \
	FIELD(subvol_item, s_rtransid, 64) \
	FIELD(subvol_item, s_source, 64) \
	FIELD(subvol_item, s_last_id, 64) \
	FIELD(subvol_item, s_default_id, 64) \
	FIELD(digest_item, d_version, 32) \
	FIELD(digest_item, d_reserved, 32) \
	FIELD(digest_item, d_generation, 64) \
	FIELD(drop_progress, d_level, 8) \
	FIELD(drop_progress, d_nodes, 64) \
	FIELD(drop_progress, d_freed, 64) \
	FIELD(key_ptr, p_mirror, 64) \
	FIELD(root_item, r_bytenr, 64) \
	FIELD(root_item, r_generation, 64) \
	FIELD(root_item, r_last_snapshot, 64) \
	FIELD(root_item, r_flags, 64) \
	FIELD(root_item, r_refs, 32) \
	FIELD(root_item, r_level, 8) \
	FIELD(root_item, r_root_dirid, 64) \
	FIELD(root_item, r_highest_objectid, 64) \
	FIELD(root_item, r_otransid, 64) \
	FIELD(root_item, r_mirror, 64) \
	FIELD(extent_item, e_refs, 64) \
	FIELD(extent_item, e_generation, 64) \
	FIELD(extent_item, e_flags, 64) \
	FIELD(tree_block_ref, t_owner, 64) \
	FIELD(tree_block_ref, t_level, 8) \
	FIELD(tree_block_ref, t_mirror, 64) \
	FIELD(extent_data_ref, d_root, 64) \
	FIELD(extent_data_ref, d_objectid, 64) \
	FIELD(extent_data_ref, d_offset, 64) \
	FIELD(extent_data_ref, d_count, 32) \
	FIELD(file_extent, f_generation, 64) \
	FIELD(file_extent, f_ram_bytes, 64) \
	FIELD(file_extent, f_compression, 8) \
	FIELD(file_extent, f_type, 8) \
	FIELD(file_extent, f_disk_bytenr, 64) \
	FIELD(file_extent, f_disk_num_bytes, 64) \
	FIELD(file_extent, f_offset, 64) \
	FIELD(file_extent, f_num_bytes, 64) \
	FIELD(inode_item, i_generation, 64) \
	FIELD(inode_item, i_transid, 64) \
	FIELD(inode_item, i_size, 64) \
	FIELD(inode_item, i_nbytes, 64) \
	FIELD(inode_item, i_seq, 64) \
	FIELD(inode_item, i_rdev, 64) \
	FIELD(inode_item, i_flags, 64) \
	FIELD(inode_item, i_nlink, 32) \
	FIELD(inode_item, i_uid, 32) \
	FIELD(inode_item, i_gid, 32) \
	FIELD(inode_item, i_mode, 32) \
	FIELD(inode_item, i_atime, 64) \
	FIELD(inode_item, i_atime_ns, 32) \
	FIELD(inode_item, i_mtime, 64) \
	FIELD(inode_item, i_mtime_ns, 32) \
	FIELD(inode_item, i_ctime, 64) \
	FIELD(inode_item, i_ctime_ns, 32) \
	FIELD(inode_item, i_btime, 64) \
	FIELD(inode_item, i_btime_ns, 32) \
	FIELD(inode_ref, r_index, 64) \
	FIELD(inode_ref, r_name_len, 16) \
	FIELD(dir_entry, d_ino, 64) \
	FIELD(dir_entry, d_transid, 64) \
	FIELD(dir_entry, d_data_len, 16) \
	FIELD(dir_entry, d_name_len, 16) \
	FIELD(dir_entry, d_type, 8) \
	FIELD(xattr_ref, x_id, 64) \
	FIELD(xattr_ref, x_len, 32) \
	FIELD(xattr_ref, x_pieces, 32)

/* one field: a pattern value set through the accessor */
#define FIELD(st, f, bits)                                                     \
	do {                                                                   \
		struct arb_##st obj;                                           \
		unsigned char *raw = (unsigned char *)&obj;                    \
		size_t off = offsetof(struct arb_##st, f);                     \
		uint64_t v = 0x8877665544332211ULL &                           \
			     (bits == 64 ? ~0ULL : (1ULL << bits) - 1);         \
		memset(&obj, 0xa5, sizeof(obj));                               \
		arb_set_##st##_##f(&obj, (uint##bits##_t)v);                   \
		for (size_t i = 0; i < sizeof(obj); i++) {                     \
			unsigned want = i >= off && i < off + bits / 8          \
						? (unsigned)(v >> (8 * (i - off)) & \
							     0xff)             \
						: 0xa5;                        \
			ck_assert_msg(raw[i] == want,                          \
				      #st "." #f ": byte %zu is %02x, want "   \
				      "%02x",                                   \
				      i, raw[i], want);                        \
		}                                                              \
		ck_assert_msg(arb_##st##_##f(&obj) == (uint##bits##_t)v,       \
			      #st "." #f ": read back");                      \
		n++;                                                           \
	} while (0);

START_TEST(test_accessors)
{
	int n = 0;

	FIELDS
	ck_assert_int_eq(n, 122);
}
END_TEST

/* every ARB_LE() of format.h is in FIELDS */
START_TEST(test_fields_complete)
{
	char path[4096], line[512];
	FILE *f;
	int n = 0;

	snprintf(path, sizeof(path), "%s/lib/format.h", TU_SRCDIR);
	f = fopen(path, "r");
	ck_assert_msg(f != NULL, "%s", path);
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "ARB_LE(", 7))
			n++;
	fclose(f);
	ck_assert_msg(n == 122,
		      "format.h has %d ARB_LE() fields, this test knows 122: "
		      "add the new ones to FIELDS",
		      n);
}
END_TEST

static Suite *format_suite(void)
{
	Suite *s = suite_create("format");
	TCase *tc = tcase_create("accessors");

	tcase_add_test(tc, test_accessors);
	tcase_add_test(tc, test_fields_complete);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(format_suite());
}
