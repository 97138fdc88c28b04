// SPDX-License-Identifier: MIT
/*
 * test_items.c - lib/items: the validate/print table of every item type.
 *
 * For each type, well-formed payloads validate and crafted malformed ones
 * (short, names of 0 or 256 bytes, entry chains running past the end, bad
 * extent types, ranges past the disk extent, ...) give -EUCLEAN with a
 * reason; sizes a newer format may use give ARB_ITEM_NEWER.  Payloads are
 * copied into buffers of exactly their size, so that under ASan (the test
 * build, scripts/test.sh) a validator or printer reading past the end
 * fails the test; the random case feeds random and mutated bytes to every
 * row of the table.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arbor/arbor.h"
#include "format.h"
#include "items/items.h"
#include "testutil.h"

/* ---- helpers ----------------------------------------------------------- */

/* validate a copy of exactly size bytes; print it too (must not crash) */
static int validate(const struct arb_key *k, const void *data, uint32_t size,
		    const char **why)
{
	void *copy = malloc(size ? size : 1);
	char *text = NULL;
	size_t tlen = 0;
	FILE *out;
	int ret;

	ck_assert_ptr_nonnull(copy);
	if (size)
		memcpy(copy, data, size);
	*why = NULL;
	ret = arb_item_validate(k, copy, size, why);
	if (ret)
		ck_assert_msg(*why && **why, "no reason for %d", ret);
	out = open_memstream(&text, &tlen);
	ck_assert_ptr_nonnull(out);
	arb_item_print(out, k, copy, size);
	fclose(out);
	ck_assert_msg(tlen > 0 && text[tlen - 1] == '\n', "print: '%s'", text);
	free(text);
	free(copy);
	return ret;
}

static void expect_ok(const struct arb_key *k, const void *d, uint32_t size)
{
	const char *why;
	int ret = validate(k, d, size, &why);

	ck_assert_msg(ret == 0, "type %u size %u: %d (%s)", k->type, size, ret,
		      why ? why : "");
}

static void expect_bad(const struct arb_key *k, const void *d, uint32_t size,
		       const char *part)
{
	const char *why;
	int ret = validate(k, d, size, &why);

	ck_assert_msg(ret == -EUCLEAN, "type %u size %u: %d, not -EUCLEAN",
		      k->type, size, ret);
	ck_assert_msg(strstr(why, part), "reason '%s' lacks '%s'", why, part);
}

static void expect_newer(const struct arb_key *k, const void *d, uint32_t size)
{
	const char *why;
	int ret = validate(k, d, size, &why);

	ck_assert_msg(ret == ARB_ITEM_NEWER, "type %u size %u: %d", k->type,
		      size, ret);
}

/* the printed text of an item */
static char *print(const struct arb_key *k, const void *d, uint32_t size)
{
	char *text = NULL;
	size_t tlen = 0;
	FILE *out = open_memstream(&text, &tlen);

	ck_assert_ptr_nonnull(out);
	arb_item_print(out, k, d, size);
	fclose(out);
	return text;
}

/* append a directory entry at buf + *len */
static void dent(uint8_t *buf, size_t *len, uint64_t ino, uint8_t type,
		 const char *name, const void *data, uint16_t dlen)
{
	struct arb_dir_entry *e = (struct arb_dir_entry *)(buf + *len);
	size_t nl = strlen(name);

	memset(e, 0, sizeof(*e));
	arb_set_dir_entry_d_ino(e, ino);
	arb_set_dir_entry_d_transid(e, 7);
	arb_set_dir_entry_d_name_len(e, (uint16_t)nl);
	arb_set_dir_entry_d_data_len(e, dlen);
	arb_set_dir_entry_d_type(e, type);
	memcpy(buf + *len + sizeof(*e), name, nl);
	if (dlen)
		memcpy(buf + *len + sizeof(*e) + nl, data, dlen);
	*len += sizeof(*e) + nl + dlen;
}

static void iref(uint8_t *buf, size_t *len, uint64_t index, const char *name)
{
	struct arb_inode_ref *r = (struct arb_inode_ref *)(buf + *len);
	size_t nl = strlen(name);

	arb_set_inode_ref_r_index(r, index);
	arb_set_inode_ref_r_name_len(r, (uint16_t)nl);
	memcpy(buf + *len + sizeof(*r), name, nl);
	*len += sizeof(*r) + nl;
}

static uint64_t hash(const char *name)
{
	return arb_name_hash(name, strlen(name));
}

/* ---- INODE_ITEM -------------------------------------------------------- */

START_TEST(test_inode)
{
	struct arb_key k = { 256, ARB_INODE_ITEM, 0 };
	uint8_t buf[200];
	char *text;

	memset(buf, 0, sizeof(buf));
	arb_set_inode_item_i_mode((struct arb_inode_item *)buf, 040755);
	arb_set_inode_item_i_nlink((struct arb_inode_item *)buf, 2);
	expect_ok(&k, buf, 160);
	/* longer: read as its first 160 bytes, as lib/fs always has */
	expect_ok(&k, buf, 200);
	expect_bad(&k, buf, 159, "159 bytes");
	expect_bad(&k, buf, 0, "inode item");
	text = print(&k, buf, 160);
	ck_assert_msg(strstr(text, "(256 INODE_ITEM 0) size 160 mode 040755 "
				   "nlink 2"), "%s", text);
	free(text);
	text = print(&k, buf, 100);
	ck_assert_msg(strstr(text, "invalid: inode item of 100 bytes"), "%s",
		      text);
	free(text);
}
END_TEST

/* ---- DIR_ITEM, DIR_INDEX, XATTR_ITEM ----------------------------------- */

START_TEST(test_dir_item)
{
	struct arb_key k = { 256, ARB_DIR_ITEM, hash("a") };
	uint8_t buf[1024];
	char name[300];
	size_t len = 0, off, elen;
	char *text;

	dent(buf, &len, 257, 8, "a", NULL, 0);
	expect_ok(&k, buf, (uint32_t)len);
	text = print(&k, buf, (uint32_t)len);
	ck_assert_msg(strstr(text, "type 8 -> 257 'a'\n"), "%s", text);
	free(text);
	/* two entries (a collision: both must hash to the key; forge it) */
	dent(buf, &len, 258, 4, "a", NULL, 0);
	expect_ok(&k, buf, (uint32_t)len);
	ck_assert_int_eq(arb_dent_find(buf, len, "a", 1, &off, &elen), 0);
	ck_assert_uint_eq(off, 0);
	ck_assert_uint_eq(elen, sizeof(struct arb_dir_entry) + 1);
	ck_assert_int_eq(arb_dent_find(buf, len, "b", 1, &off, &elen), -ENOENT);
	/* cut short: inside the second header, inside the second name */
	expect_bad(&k, buf, (uint32_t)len - 3, "entry at byte 22");
	expect_bad(&k, buf, (uint32_t)len - 1, "past the item's end");
	ck_assert_int_eq(arb_dent_find(buf, len - 1, "a", 1, &off, &elen),
			 -EUCLEAN);
	/* name under another hash */
	len = 0;
	dent(buf, &len, 257, 8, "b", NULL, 0);
	expect_bad(&k, buf, (uint32_t)len, "hashes to");
	/* name length 0, and 256 */
	arb_set_dir_entry_d_name_len((struct arb_dir_entry *)buf, 0);
	expect_bad(&k, buf, (uint32_t)len, "name length 0");
	memset(name, 'x', 256);
	name[256] = 0;
	len = 0;
	k.offset = hash(name);
	dent(buf, &len, 257, 8, name, NULL, 0);
	expect_bad(&k, buf, (uint32_t)len, "name length 256");
	name[255] = 0;
	len = 0;
	k.offset = hash(name);
	dent(buf, &len, 257, 8, name, NULL, 0);
	expect_ok(&k, buf, (uint32_t)len);
	/* a name length that runs past the end */
	arb_set_dir_entry_d_name_len((struct arb_dir_entry *)buf, 200);
	expect_bad(&k, buf, sizeof(struct arb_dir_entry) + 100,
		   "past the item's end");
	/* data length past the end */
	len = 0;
	k.offset = hash("a");
	dent(buf, &len, 257, 8, "a", NULL, 0);
	arb_set_dir_entry_d_data_len((struct arb_dir_entry *)buf, 1);
	expect_bad(&k, buf, (uint32_t)len, "past the item's end");
	/* empty item: no entries, as the checker has it */
	expect_ok(&k, buf, 0);
}
END_TEST

START_TEST(test_dir_index)
{
	struct arb_key k = { 256, ARB_DIR_INDEX, 2 };
	uint8_t buf[256];
	size_t len = 0;

	dent(buf, &len, 257, 8, "name-not-hashed", NULL, 0);
	expect_ok(&k, buf, (uint32_t)len);
	dent(buf, &len, 258, 8, "second", NULL, 0);
	expect_bad(&k, buf, (uint32_t)len, "holds 2 entries");
	expect_bad(&k, buf, 0, "holds 0 entries");
	expect_bad(&k, buf, 10, "10 bytes left");
}
END_TEST

START_TEST(test_xattr_item)
{
	struct arb_key k = { 256, ARB_XATTR_ITEM, hash("user.a") };
	struct arb_xattr_ref r;
	uint8_t buf[256];
	size_t len = 0;
	char *text;

	dent(buf, &len, 0, 0, "user.a", "value", 5);
	expect_ok(&k, buf, (uint32_t)len);
	text = print(&k, buf, (uint32_t)len);
	ck_assert_msg(strstr(text, "'user.a' 5 bytes 'value'"), "%s", text);
	free(text);
	/* out of line */
	memset(&r, 0, sizeof(r));
	arb_set_xattr_ref_x_id(&r, 0x10000);
	arb_set_xattr_ref_x_len(&r, 40000);
	arb_set_xattr_ref_x_pieces(&r, 3);
	len = 0;
	dent(buf, &len, 0, ARB_XATTR_OUT_OF_LINE, "user.a", &r, sizeof(r));
	expect_ok(&k, buf, (uint32_t)len);
	text = print(&k, buf, (uint32_t)len);
	ck_assert_msg(strstr(text, "out of line: 40000 bytes in 3 pieces"),
		      "%s", text);
	free(text);
	arb_set_xattr_ref_x_pieces(&r, 0);
	len = 0;
	dent(buf, &len, 0, ARB_XATTR_OUT_OF_LINE, "user.a", &r, sizeof(r));
	expect_bad(&k, buf, (uint32_t)len, "0 pieces");
	arb_set_xattr_ref_x_pieces(&r, ARB_XATTR_PIECES_MAX + 1);
	len = 0;
	dent(buf, &len, 0, ARB_XATTR_OUT_OF_LINE, "user.a", &r, sizeof(r));
	expect_bad(&k, buf, (uint32_t)len, "pieces");
	arb_set_xattr_ref_x_pieces(&r, 1);
	arb_set_xattr_ref_x_len(&r, ARB_XATTR_SIZE_MAX + 1);
	len = 0;
	dent(buf, &len, 0, ARB_XATTR_OUT_OF_LINE, "user.a", &r, sizeof(r));
	expect_bad(&k, buf, (uint32_t)len, "more than");
	/* a reference of the wrong size */
	len = 0;
	dent(buf, &len, 0, ARB_XATTR_OUT_OF_LINE, "user.a", &r, 15);
	expect_bad(&k, buf, (uint32_t)len, "reference of 15 bytes");
}
END_TEST

/* ---- INODE_REF, XATTR_DATA, ORPHAN_ITEM -------------------------------- */

START_TEST(test_inode_ref)
{
	struct arb_key k = { 257, ARB_INODE_REF, 256 };
	struct arb_iref r;
	uint8_t buf[256];
	size_t len = 0;
	char *text;

	iref(buf, &len, 2, "one");
	iref(buf, &len, 3, "two");
	expect_ok(&k, buf, (uint32_t)len);
	text = print(&k, buf, (uint32_t)len);
	ck_assert_msg(strstr(text, "index 2 'one'\n      index 3 'two'\n"),
		      "%s", text);
	free(text);
	ck_assert_int_eq(arb_iref_find(buf, len, "two", 3, &r), 0);
	ck_assert_uint_eq(r.index, 3);
	ck_assert_uint_eq(r.off, sizeof(struct arb_inode_ref) + 3);
	ck_assert_int_eq(arb_iref_find(buf, len, "tw", 2, &r), -ENOENT);
	expect_bad(&k, buf, (uint32_t)len - 1, "past the item's end");
	expect_bad(&k, buf, (uint32_t)len - 4, "bytes left");
	ck_assert_int_eq(arb_iref_find(buf, len - 1, "one", 3, &r), -EUCLEAN);
	arb_set_inode_ref_r_name_len((struct arb_inode_ref *)buf, 0);
	expect_bad(&k, buf, (uint32_t)len, "name length 0");
	arb_set_inode_ref_r_name_len((struct arb_inode_ref *)buf, 256);
	expect_bad(&k, buf, (uint32_t)len, "name length 256");
	arb_set_inode_ref_r_name_len((struct arb_inode_ref *)buf, 0xffff);
	expect_bad(&k, buf, (uint32_t)len, "name length 65535");
}
END_TEST

START_TEST(test_xattr_data_orphan)
{
	struct arb_key k = { 257, ARB_XATTR_DATA, 0x10000 };
	struct arb_key o = { ARB_ORPHAN_OBJECTID, ARB_ORPHAN_ITEM, 300 };
	uint8_t buf[64];

	memset(buf, 'v', sizeof(buf));
	expect_ok(&k, buf, sizeof(buf));
	expect_bad(&k, buf, 0, "empty");
	expect_ok(&o, buf, 0);
	o.objectid = 300;
	expect_bad(&o, buf, 0, "orphan objectid");
}
END_TEST

/* ---- EXTENT_DATA ------------------------------------------------------- */

static void fe_reg(struct arb_file_extent *fe, uint8_t type, uint64_t disk,
		   uint64_t disk_len, uint64_t off, uint64_t num)
{
	memset(fe, 0, sizeof(*fe));
	arb_set_file_extent_f_generation(fe, 5);
	arb_set_file_extent_f_ram_bytes(fe, disk_len);
	arb_set_file_extent_f_type(fe, type);
	arb_set_file_extent_f_disk_bytenr(fe, disk);
	arb_set_file_extent_f_disk_num_bytes(fe, disk_len);
	arb_set_file_extent_f_offset(fe, off);
	arb_set_file_extent_f_num_bytes(fe, num);
}

START_TEST(test_file_extent)
{
	struct arb_key k = { 257, ARB_EXTENT_DATA, 0 };
	struct arb_file_extent fe;
	uint8_t buf[64];
	char *text;

	/* inline */
	memset(buf, 0, sizeof(buf));
	arb_set_file_extent_f_ram_bytes((struct arb_file_extent *)buf, 6);
	memcpy(buf + ARB_FILE_EXTENT_INLINE_HDR, "hello\n", 6);
	expect_ok(&k, buf, ARB_FILE_EXTENT_INLINE_HDR + 6);
	text = print(&k, buf, ARB_FILE_EXTENT_INLINE_HDR + 6);
	ck_assert_msg(strstr(text, "inline 6 bytes"), "%s", text);
	free(text);
	expect_bad(&k, buf, ARB_FILE_EXTENT_INLINE_HDR + 5, "says 6");
	expect_bad(&k, buf, ARB_FILE_EXTENT_INLINE_HDR - 1, "header");
	k.offset = 4096;
	expect_bad(&k, buf, ARB_FILE_EXTENT_INLINE_HDR + 6, "file offset 4096");
	k.offset = 0;
	arb_set_file_extent_f_compression((struct arb_file_extent *)buf, 1);
	expect_bad(&k, buf, ARB_FILE_EXTENT_INLINE_HDR + 6, "compressed");

	/* regular and preallocated */
	k.offset = 8192;
	fe_reg(&fe, ARB_FILE_EXTENT_REG, 1 << 20, 16384, 4096, 8192);
	expect_ok(&k, &fe, sizeof(fe));
	text = print(&k, &fe, sizeof(fe));
	ck_assert_msg(strstr(text, " reg disk 1048576+16384 off 4096 len 8192"),
		      "%s", text);
	free(text);
	expect_bad(&k, &fe, sizeof(fe) - 1, "regular extent item of 52");
	fe_reg(&fe, ARB_FILE_EXTENT_PREALLOC, 1 << 20, 16384, 0, 16384);
	expect_ok(&k, &fe, sizeof(fe));
	expect_bad(&k, &fe, 30, "prealloc extent item of 30");
	/* the whole disk extent, and one byte past it */
	fe_reg(&fe, ARB_FILE_EXTENT_REG, 1 << 20, 16384, 4096, 12289);
	expect_bad(&k, &fe, sizeof(fe), "of a disk extent of 16384");
	fe_reg(&fe, ARB_FILE_EXTENT_REG, 1 << 20, 16384, 16385, 1);
	expect_bad(&k, &fe, sizeof(fe), "of a disk extent of 16384");
	fe_reg(&fe, ARB_FILE_EXTENT_REG, 1 << 20, 16384, UINT64_MAX, 2);
	expect_bad(&k, &fe, sizeof(fe), "of a disk extent");
	fe_reg(&fe, ARB_FILE_EXTENT_REG, 1 << 20, 16384, 0, 0);
	expect_bad(&k, &fe, sizeof(fe), "covers no bytes");
	fe_reg(&fe, ARB_FILE_EXTENT_REG, 0, 16384, 0, 4096);
	expect_bad(&k, &fe, sizeof(fe), "disk address 0");
	k.offset = UINT64_MAX - 4095;
	fe_reg(&fe, ARB_FILE_EXTENT_REG, 1 << 20, 16384, 0, 8192);
	expect_bad(&k, &fe, sizeof(fe), "past 2^64");
	k.offset = 0;
	for (unsigned t = 3; t < 256; t += 50) {
		fe_reg(&fe, (uint8_t)t, 1 << 20, 16384, 0, 4096);
		expect_bad(&k, &fe, sizeof(fe), "unknown extent type");
	}
	fe_reg(&fe, ARB_FILE_EXTENT_REG, 1 << 20, 16384, 0, 4096);
	arb_set_file_extent_f_compression(&fe, 2);
	expect_bad(&k, &fe, sizeof(fe), "compressed (method 2, type 1)");

	/* compressed (zlib): offsets count in the ram bytes */
	fe_reg(&fe, ARB_FILE_EXTENT_REG, 1 << 20, 8192, 4096, 65536);
	arb_set_file_extent_f_compression(&fe, ARB_COMPRESS_ZLIB);
	arb_set_file_extent_f_ram_bytes(&fe, 128 * 1024);
	expect_ok(&k, &fe, sizeof(fe));
	text = print(&k, &fe, sizeof(fe));
	ck_assert_msg(strstr(text, " ram 131072 zlib"), "%s", text);
	free(text);
	arb_set_file_extent_f_num_bytes(&fe, 128 * 1024 - 4096 + 1);
	expect_bad(&k, &fe, sizeof(fe), "of a compressed extent of 131072");
	arb_set_file_extent_f_num_bytes(&fe, 4096);
	arb_set_file_extent_f_ram_bytes(&fe, 128 * 1024 + 4096);
	expect_bad(&k, &fe, sizeof(fe), "stored in 8192");
	arb_set_file_extent_f_ram_bytes(&fe, 8192);
	expect_bad(&k, &fe, sizeof(fe), "8192 bytes stored in 8192");
	fe_reg(&fe, ARB_FILE_EXTENT_PREALLOC, 1 << 20, 16384, 0, 16384);
	arb_set_file_extent_f_compression(&fe, ARB_COMPRESS_ZLIB);
	expect_bad(&k, &fe, sizeof(fe), "compressed (method 1, type 2)");
	/* compressed inline: the stream shorter than the bytes it holds */
	k.offset = 0;
	memset(buf, 0, ARB_FILE_EXTENT_INLINE_HDR + 6);
	arb_set_file_extent_f_type((struct arb_file_extent *)buf,
				   ARB_FILE_EXTENT_INLINE);
	arb_set_file_extent_f_compression((struct arb_file_extent *)buf,
					  ARB_COMPRESS_ZLIB);
	arb_set_file_extent_f_ram_bytes((struct arb_file_extent *)buf, 3000);
	expect_ok(&k, buf, ARB_FILE_EXTENT_INLINE_HDR + 6);
	arb_set_file_extent_f_ram_bytes((struct arb_file_extent *)buf, 6);
	expect_bad(&k, buf, ARB_FILE_EXTENT_INLINE_HDR + 6,
		   "compressed inline extent of 6 bytes stored in 6");
	arb_set_file_extent_f_ram_bytes((struct arb_file_extent *)buf,
					ARB_COMPRESS_INLINE_MAX + 1);
	expect_bad(&k, buf, ARB_FILE_EXTENT_INLINE_HDR + 6,
		   "compressed inline extent of");
}
END_TEST

/* ---- the other trees' items -------------------------------------------- */

START_TEST(test_csum_root_extent_tree)
{
	struct arb_key c = { ARB_EXTENT_CSUM_OBJECTID, ARB_EXTENT_CSUM,
			     1 << 20 };
	struct arb_key r = { ARB_FS_TREE_ID, ARB_ROOT_ITEM, 0 };
	struct arb_key e = { 1 << 20, ARB_EXTENT_ITEM, 16384 };
	struct arb_key d = { 1 << 20, ARB_EXTENT_DATA_REF, 99 };
	uint8_t buf[256];
	const char *why;
	char *text;

	memset(buf, 0xab, sizeof(buf));
	expect_ok(&c, buf, 8);
	expect_ok(&c, buf, sizeof(buf));
	expect_bad(&c, buf, 0, "multiple of 4");
	expect_bad(&c, buf, 7, "7 bytes");
	text = print(&c, buf, 8);
	ck_assert_msg(strstr(text, " 2 sectors: abababab abababab"), "%s",
		      text);
	free(text);

	/* an unknown ROOT_ITEM size is a newer format, not corruption */
	memset(buf, 0, sizeof(buf));
	expect_ok(&r, buf, sizeof(struct arb_root_item));
	expect_newer(&r, buf, sizeof(struct arb_root_item) + 16);
	expect_newer(&r, buf, 0);
	ck_assert_int_eq(arb_item_validate(&r, buf, 120, &why), ARB_ITEM_NEWER);
	ck_assert_msg(strstr(why, "has 120 bytes, this arborfs knows 104"),
		      "%s", why);
	text = print(&r, buf, 120);
	ck_assert_msg(strstr(text, "newer format:"), "%s", text);
	free(text);
	/* ROOT_REF / ROOT_BACKREF: struct arb_root_ref and the name */
	memset(buf, 0, sizeof(buf));
	arb_set_root_ref_rr_dirid((struct arb_root_ref *)buf, 256);
	arb_set_root_ref_rr_sequence((struct arb_root_ref *)buf, 3);
	arb_set_root_ref_rr_name_len((struct arb_root_ref *)buf, 4);
	memcpy(buf + sizeof(struct arb_root_ref), "snap", 4);
	for (int t = 0; t < 2; t++) {
		r.type = t ? ARB_ROOT_BACKREF : ARB_ROOT_REF;
		expect_ok(&r, buf, sizeof(struct arb_root_ref) + 4);
		expect_bad(&r, buf, sizeof(struct arb_root_ref) + 3, "bytes");
		expect_bad(&r, buf, sizeof(struct arb_root_ref) + 5, "bytes");
		expect_bad(&r, buf, 10, "at least");
		text = print(&r, buf, sizeof(struct arb_root_ref) + 4);
		ck_assert_msg(strstr(text, "dir 256 index 3 'snap'"), "%s",
			      text);
		free(text);
	}
	buf[sizeof(struct arb_root_ref) + 1] = '/';
	expect_bad(&r, buf, sizeof(struct arb_root_ref) + 4, "'/'");
	arb_set_root_ref_rr_name_len((struct arb_root_ref *)buf, 0);
	expect_bad(&r, buf, sizeof(struct arb_root_ref), "name length");
	/* SUBVOL_ITEM: 96 bytes, known flags */
	memset(buf, 0, sizeof(buf));
	r.type = ARB_SUBVOL_ITEM;
	expect_ok(&r, buf, sizeof(struct arb_subvol_item));
	expect_newer(&r, buf, sizeof(struct arb_subvol_item) + 8);
	/* read-only, partial receive (format note 2.8) */
	arb_set_subvol_item_s_flags((struct arb_subvol_item *)buf, 3);
	expect_ok(&r, buf, sizeof(struct arb_subvol_item));
	arb_set_subvol_item_s_flags((struct arb_subvol_item *)buf, 4);
	expect_newer(&r, buf, sizeof(struct arb_subvol_item));
	arb_set_subvol_item_s_flags((struct arb_subvol_item *)buf, 1);
	arb_set_subvol_item_s_otime_ns((struct arb_subvol_item *)buf,
				       1000000000u);
	expect_bad(&r, buf, sizeof(struct arb_subvol_item), "nanoseconds");
	/* DIGEST_ITEM: 48 bytes, offset 0, no reserved bits */
	r.offset = 0;
	memset(buf, 0, sizeof(buf));
	r.type = ARB_DIGEST_ITEM;
	arb_set_digest_item_d_version((struct arb_digest_item *)buf, 2);
	expect_ok(&r, buf, sizeof(struct arb_digest_item));
	expect_newer(&r, buf, sizeof(struct arb_digest_item) + 8);
	arb_set_digest_item_d_reserved((struct arb_digest_item *)buf, 1);
	expect_newer(&r, buf, sizeof(struct arb_digest_item));
	arb_set_digest_item_d_reserved((struct arb_digest_item *)buf, 0);
	r.offset = 1;
	expect_bad(&r, buf, sizeof(struct arb_digest_item), "offset");
	r.offset = 0;
	memset(buf, 0, sizeof(buf));
	r.type = ARB_DEV_STATS;
	expect_newer(&r, buf, 20);

	/* EXTENT_ITEM: data, tree block */
	arb_set_extent_item_e_refs((struct arb_extent_item *)buf, 1);
	arb_set_extent_item_e_flags((struct arb_extent_item *)buf,
				    ARB_EXTENT_FLAG_DATA);
	expect_ok(&e, buf, sizeof(struct arb_extent_item));
	expect_bad(&e, buf, sizeof(struct arb_extent_item) - 1, "at least 24");
	arb_set_extent_item_e_flags((struct arb_extent_item *)buf,
				    ARB_EXTENT_FLAG_TREE_BLOCK);
	expect_ok(&e, buf, 41);
	expect_bad(&e, buf, sizeof(struct arb_extent_item), "tree block");
	expect_bad(&e, buf, 40, "tree block extent item of 40");
	text = print(&e, buf, 41);
	ck_assert_msg(strstr(text, "refs 1 gen 0 tree owner 0 level 0\n"),
		      "%s", text);
	free(text);

	/* EXTENT_DATA_REF */
	expect_ok(&d, buf, sizeof(struct arb_extent_data_ref));
	expect_bad(&d, buf, 27, "27 bytes");
	expect_bad(&d, buf, 29, "29 bytes");
}
END_TEST

START_TEST(test_table)
{
	static const unsigned types[] = {
#define x(n, v, d) v,
		ARB_ITEM_TYPES(x)
#undef x
	};
	struct arb_key k = { 256, 0, 0 };
	uint8_t buf[8] = { 0 };
	const char *why;

	/* every type has a row: none is "unknown" */
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		k.type = (uint8_t)types[i];
		why = NULL;
		arb_item_validate(&k, buf, sizeof(buf), &why);
		ck_assert_msg(!why || !strstr(why, "unknown item type"),
			      "type %u has no row", types[i]);
	}
	k.type = 77;
	expect_bad(&k, buf, sizeof(buf), "unknown item type 77");
	k.type = ARB_TEST_ITEM;
	expect_ok(&k, buf, 0);
	expect_ok(&k, buf, sizeof(buf));
}
END_TEST

/*
 * Random bytes, and valid payloads with random bytes changed, cut or
 * grown, to every row: validate and print must not crash or read past the
 * buffer (ASan), and whatever validates must print its fields.
 */
START_TEST(test_random)
{
	static const unsigned types[] = {
#define x(n, v, d) v,
		ARB_ITEM_TYPES(x)
#undef x
		77, 0, 255,
	};
	uint64_t seed = tu_seed("items"), s = seed;
	unsigned rounds = TU_SCALE(20000, 400000);
	uint8_t valid[128];
	size_t vlen = 0;

	dent(valid, &vlen, 257, 1, "x", "yz", 2);
	for (unsigned i = 0; i < rounds; i++) {
		struct arb_key k;
		uint32_t size = (uint32_t)tu_rand_range(&s, 300);
		uint8_t *buf = malloc(size ? size : 1);
		const char *why = NULL;
		char *text;
		int ret;

		ck_assert_ptr_nonnull(buf);
		k.type = (uint8_t)types[tu_rand_range(
			&s, sizeof(types) / sizeof(types[0]))];
		k.objectid = tu_rand_range(&s, 4) ? 256 + tu_rand_range(&s, 9)
						  : tu_rand(&s);
		k.offset = tu_rand_range(&s, 4) ? tu_rand_range(&s, 3) * 4096
						: tu_rand(&s);
		for (uint32_t j = 0; j < size; j++)
			buf[j] = (uint8_t)tu_rand(&s);
		if (size && tu_rand_range(&s, 2)) {
			/* a near-valid start: an entry, a small header */
			memcpy(buf, valid, size < vlen ? size : vlen);
			if (tu_rand_range(&s, 2) && size >= 21)
				buf[tu_rand_range(&s, 21)] =
					(uint8_t)tu_rand_range(&s, 4);
		}
		ret = arb_item_validate(&k, buf, size, &why);
		ck_assert_msg(ret == 0 || ret == ARB_ITEM_NEWER ||
				      ret == -EUCLEAN,
			      "seed %llu: %d", (unsigned long long)seed, ret);
		ck_assert(ret == 0 || (why && *why));
		text = print(&k, buf, size);
		ck_assert(text && strchr(text, '\n'));
		free(text);
		free(buf);
	}
}
END_TEST

static Suite *items_suite(void)
{
	Suite *s = suite_create("items");
	TCase *tc = tcase_create("validate");

	tcase_add_test(tc, test_inode);
	tcase_add_test(tc, test_dir_item);
	tcase_add_test(tc, test_dir_index);
	tcase_add_test(tc, test_xattr_item);
	tcase_add_test(tc, test_inode_ref);
	tcase_add_test(tc, test_xattr_data_orphan);
	tcase_add_test(tc, test_file_extent);
	tcase_add_test(tc, test_csum_root_extent_tree);
	tcase_add_test(tc, test_table);
	suite_add_tcase(s, tc);
	tc = tcase_create("random");
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_random);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(items_suite());
}
