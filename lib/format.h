/* SPDX-License-Identifier: MIT */
/*
 * format.h - every on-disk structure of arborfs, byte by byte.
 *
 * All multi-byte fields are little-endian and every struct is packed.
 * Upper layers never read a raw field: they use the arb_<struct>_<field>()
 * accessors generated below, or the unpacked in-memory twins
 * (struct arb_key for struct arb_disk_key, ...).  docs/FORMAT.md mirrors
 * this file; change both together and bump ARB_FORMAT_VERSION when an
 * existing image would be read differently.
 *
 * Image layout
 *   OFFSET          SIZE        DESCRIPTION
 *   0               64 KiB      unused (room for a boot sector / other magic)
 *   64 KiB          4 KiB       superblock slot 0
 *   128 KiB         4 KiB       superblock slot 1
 *   1 MiB           ...         allocatable space: tree nodes and file data
 *
 * Commit N writes its superblock to slot N % 2, so the superblock of the
 * previous generation is never overwritten by the commit that replaces it.
 * An image is opened from the valid slot with the highest generation.
 *
 * Global invariant: every byte in [1 MiB, total_bytes) is either covered by
 * exactly one EXTENT_ITEM of the extent tree or by the second copy recorded
 * in exactly one tree block's EXTENT_ITEM (t_mirror), or free.  Nothing reachable from
 * the superblock of the last durable commit is ever written.
 */
#ifndef ARB_FORMAT_H
#define ARB_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <endian.h>

#define ARB_PACKED __attribute__((packed))

/* "ARBORFS!" read as a little-endian u64 */
#define ARB_MAGIC 0x215346524f425241ULL
/* written by mkfs first, replaced by ARB_MAGIC as mkfs's very last write */
#define ARB_MAGIC_TEMPORARY 0x3f5346524f425241ULL /* "ARBORFS?" */
/*
 * Format versions:
 *   1  first format (never released)
 *   2  duplicated metadata: every pointer to a tree node (internal node
 *      pointer, ROOT_ITEM, superblock) also carries the address of the
 *      node's second copy; tree block extent items record it; the
 *      superblock records the metadata profile (s_meta_copies)
 */
#define ARB_FORMAT_VERSION 2
/* the oldest version this code opens */
#define ARB_FORMAT_VERSION_MIN 2

#define ARB_SUPER_OFFSET0 (64ULL * 1024)
#define ARB_SUPER_OFFSET1 (128ULL * 1024)
#define ARB_SUPER_SIZE 4096
#define ARB_DATA_START (1024ULL * 1024)
#define ARB_SECTORSIZE 4096
#define ARB_MIN_NODESIZE 4096
#define ARB_MAX_NODESIZE 65536
#define ARB_DEFAULT_NODESIZE 16384
#define ARB_MAX_LEVEL 8
#define ARB_CSUM_SIZE 32
#define ARB_UUID_SIZE 16
#define ARB_LABEL_SIZE 256

enum arb_csum_type {
	ARB_CSUM_CRC32C = 0,
};

/* Well-known tree ids (objectid of a ROOT_ITEM in the root tree). */
#define ARB_ROOT_TREE_ID 1ULL
#define ARB_EXTENT_TREE_ID 2ULL
#define ARB_FS_TREE_ID 5ULL
#define ARB_CSUM_TREE_ID 7ULL
#define ARB_FIRST_SUBVOL_ID 256ULL
/* first inode objectid in a fs tree; it is the subvolume's root directory */
#define ARB_FIRST_INO 256ULL
/* key objectid of ORPHAN_ITEMs (offset = the orphan inode) in an fs tree:
 * above every inode number */
#define ARB_ORPHAN_OBJECTID ((uint64_t)-5)

/*
 * Item types.  The numbers are part of the format and fixed forever.
 * x(name, number, description)
 */
#define ARB_ITEM_TYPES(x)                                                      \
	x(INODE_ITEM, 1, "inode")                                              \
	x(INODE_REF, 12, "link of an inode: parent dir -> index, name")        \
	x(XATTR_ITEM, 24, "extended attribute, keyed by name hash")            \
	x(XATTR_DATA, 26, "piece of an xattr value stored out of line")       \
	x(ORPHAN_ITEM, 48, "unlinked inode still to be freed")                 \
	x(DIR_ITEM, 84, "directory entry, keyed by name hash")                 \
	x(DIR_INDEX, 96, "directory entry, keyed by sequence")                 \
	x(EXTENT_DATA, 108, "file extent: inline bytes or disk extent")        \
	x(EXTENT_CSUM, 128, "data checksums, keyed by disk address")           \
	x(ROOT_ITEM, 132, "root of a tree")                                    \
	x(SUBVOL_ITEM, 136, "subvolume: flags, times, receive record")         \
	x(DIGEST_ITEM, 138, "subvolume: its content digest, kept")             \
	x(DROP_PROGRESS, 140, "how far a deleted tree has been dropped")        \
	x(ROOT_BACKREF, 144, "subvolume -> parent directory")                  \
	x(ROOT_REF, 156, "parent subvolume -> child subvolume")                \
	x(EXTENT_ITEM, 168, "allocated extent with refcount")                  \
	x(EXTENT_DATA_REF, 178, "back-reference of a data extent")             \
	x(DEV_STATS, 249, "counters")                                          \
	x(TEST_ITEM, 250, "used only by unit tests")

enum arb_item_type {
#define x(n, v, d) ARB_##n = v,
	ARB_ITEM_TYPES(x)
#undef x
};

const char *arb_item_type_name(unsigned type);

/*
 * Generated little-endian accessors.  ARB_LE(struct, field, bits) gives
 * arb_<struct>_<field>(const struct arb_<struct> *) and
 * arb_set_<struct>_<field>(struct arb_<struct> *, uint<bits>_t).
 */
#define ARB_LE(st, f, bits)                                                    \
	static inline uint##bits##_t arb_##st##_##f(const struct arb_##st *p)  \
	{                                                                      \
		uint##bits##_t v;                                              \
		memcpy(&v, (const char *)p + offsetof(struct arb_##st, f),     \
		       sizeof(v));                                             \
		return le##bits##toh(v);                                       \
	}                                                                      \
	static inline void arb_set_##st##_##f(struct arb_##st *p,              \
					      uint##bits##_t v)                \
	{                                                                      \
		v = htole##bits(v);                                            \
		memcpy((char *)p + offsetof(struct arb_##st, f), &v,           \
		       sizeof(v));                                             \
	}
#define le8toh(x) (x)
#define htole8(x) (x)

#define ARB_CHECK_SIZE(st, n)                                                  \
	_Static_assert(sizeof(struct arb_##st) == (n), "size of arb_" #st)
#define ARB_CHECK_OFF(st, f, n)                                                \
	_Static_assert(offsetof(struct arb_##st, f) == (n),                    \
		       "offset of arb_" #st "." #f)

/* ------------------------------------------------------------------------ */
/*
 * Superblock, 4096 bytes.
 *   OFFSET SIZE DESCRIPTION
 *   0      32   checksum of bytes [32, 4096), algorithm s_csum_type
 *   32     8    magic ARB_MAGIC (ARB_MAGIC_TEMPORARY while mkfs runs)
 *   40     8    byte offset of this copy (detects a misplaced write)
 *   48     16   filesystem UUID, also stamped in every node header
 *   64     8    generation of the commit that wrote this superblock
 *   72     8    byte address of the root tree's root node
 *   80     8    total size of the filesystem in bytes
 *   88     8    bytes allocated (tree nodes + data extents)
 *   96     4    node size in bytes (power of two, 4 KiB..64 KiB)
 *   100    4    sector size: unit of data allocation and checksums
 *   104    4    format version (ARB_FORMAT_VERSION)
 *   108    2    checksum algorithm (enum arb_csum_type)
 *   110    1    level of the root tree's root node
 *   111    1    copies of every tree node: 1 (mkfs -m single) or 2 (dup)
 *   112    8    incompatible feature flags: an unknown bit refuses to open
 *   120    8    read-only compatible feature flags: unknown bit => ro only
 *   128    8    compatible feature flags
 *   136    8    flags (ARB_SUPER_*)
 *   144    256  label, NUL padded
 *   400    8    generation of the root tree's root node
 *   408    8    byte address of the second copy of the root tree's root
 *                node; 0 with one copy
 *   416    4    entries in the commit record (0: none; see below)
 *   420    4    reserved, 0
 *   424    2048 commit record: ARB_COMMIT_REC_MAX x struct arb_commit_rec
 *   2472   4    entries in the history (ARB_COMPAT_HISTORY, below)
 *   2476   4    reserved, 0
 *   2480   1536 history: ARB_HISTORY_MAX x struct arb_history_entry
 *   4016   80   reserved, 0 (its last 16 bytes: fsck's undo record)
 *
 * Commit record (ARB_INCOMPAT_COMMIT_RECORD, set exactly when the entry
 * count is non-zero): a commit that wrote little (at most
 * ARB_COMMIT_REC_MAX ranges, ARB_COMMIT_REC_BYTES in all) writes its
 * superblock without the flush between its other writes and the
 * superblock, and lists here every range written since the previous
 * commit's flush with the crc32c of its bytes.  Opening trusts such a
 * superblock only when every listed range reads back with its checksum;
 * otherwise the commit was cut short by a crash before its one flush, and
 * the other slot (the previous generation, complete since its own flush)
 * is used.  The in-memory copy of the superblock never carries a record:
 * every other superblock write (mkfs, fsck, resize, the two-flush commit)
 * writes none.
 */
#define ARB_INCOMPAT_COMMIT_RECORD (1ULL << 0)
/* some xattr value is stored out of line (XATTR_DATA items, below): an
 * older reader would return the reference as the value */
#define ARB_INCOMPAT_XATTR_DATA (1ULL << 1)
/* some subvolume exists or existed (SUBVOL_ITEM, ROOT_REF, directory
 * entries with ARB_DENT_SUBVOL, below): an older reader would take a
 * subvolume's directory entry for an inode of the tree holding it */
#define ARB_INCOMPAT_SUBVOL (1ULL << 2)
/* some tree is partly dropped (DROP_PROGRESS, below): an older reader
 * would drop it again from its root, releasing twice what the batches
 * before released.  Set by the commit that writes the first progress,
 * cleared by the one that removes the last. */
#define ARB_INCOMPAT_DROP_PROGRESS (1ULL << 3)
/* some file extent is compressed (f_compression ARB_COMPRESS_ZLIB, below):
 * an older reader would return the compressed bytes as file data.  Set by
 * the transaction that writes the first compressed extent, never cleared */
#define ARB_INCOMPAT_COMPRESS (1ULL << 4)
/* some subvolume is a partial receive (ARB_SUBVOL_F_PARTIAL, below): an
 * older reader would refuse the flag as a newer item, or clean the tree
 * as a deleted subvolume.  Set by the transaction that keeps the first
 * one, cleared by the one that publishes or gives up the last. */
#define ARB_INCOMPAT_PARTIAL_RECEIVE (1ULL << 5)
/* some subvolume's digest is kept (DIGEST_ITEM, below): an older reader
 * refuses the root tree's leaf that holds one (an unknown item type).
 * Set by the transaction that writes the first one, never cleared. */
#define ARB_INCOMPAT_DIGEST (1ULL << 6)
#define ARB_INCOMPAT_KNOWN                                                     \
	(ARB_INCOMPAT_COMMIT_RECORD | ARB_INCOMPAT_XATTR_DATA |                \
	 ARB_INCOMPAT_SUBVOL | ARB_INCOMPAT_DROP_PROGRESS |                    \
	 ARB_INCOMPAT_COMPRESS | ARB_INCOMPAT_PARTIAL_RECEIVE |                \
	 ARB_INCOMPAT_DIGEST)
/*
 * Compatible feature bit 0: some inode carries (or once carried)
 * ARB_INODE_IMMUTABLE or ARB_INODE_APPEND.  Set by the commit that first
 * sets one of them, never cleared.  It changes nothing in how the image is
 * read; it tells a FUSE daemon at mount that it must see every open to
 * refuse write-opens of such files (fuse/iflags.c), without scanning the
 * inodes.  An arborfs that predates the flags ignores it (and the flags).
 */
#define ARB_COMPAT_PROTECTED_INODES (1ULL << 0)
/*
 * Compatible feature bit 1: the superblock carries a history of recent
 * commits (s_hist, struct arb_history_entry): where the root tree of each
 * was, so that a generation whose blocks are still intact can be opened
 * read-only ("back in time", docs/design/space.md, "History and grace").
 * The history is valid only when its first entry names this superblock's
 * own generation and root: an arborfs that predates it copies the bytes
 * into its next commit unchanged, and that commit's superblock then names
 * a newer generation, so the stale history is ignored (that writer did
 * not keep the freed blocks of the generations it lists).
 */
#define ARB_COMPAT_HISTORY (1ULL << 1)
#define ARB_COMPAT_KNOWN (ARB_COMPAT_PROTECTED_INODES | ARB_COMPAT_HISTORY)
#define ARB_HISTORY_MAX 32

struct arb_history_entry {
	uint64_t he_generation;      /* of the commit */
	uint64_t he_root;            /* its root tree's root node */
	uint64_t he_root_mirror;     /* that node's second copy, or 0 */
	uint64_t he_root_generation; /* that node's h_generation */
	uint64_t he_time;            /* commit time, seconds since 1970 */
	uint8_t he_root_level;       /* that node's level */
	uint8_t he_reserved[3];      /* 0 */
	uint32_t he_time_ns;         /* nanoseconds of he_time */
} ARB_PACKED;
ARB_CHECK_SIZE(history_entry, 48);
ARB_LE(history_entry, he_generation, 64)
ARB_LE(history_entry, he_root, 64)
ARB_LE(history_entry, he_root_mirror, 64)
ARB_LE(history_entry, he_root_generation, 64)
ARB_LE(history_entry, he_time, 64)
ARB_LE(history_entry, he_root_level, 8)
ARB_LE(history_entry, he_time_ns, 32)
#define ARB_COMMIT_REC_MAX 128
#define ARB_COMMIT_REC_BYTES (4ULL << 20)

struct arb_commit_rec {
	uint64_t bytenr;        /* image offset of the range */
	uint32_t len;           /* its length, 1..ARB_COMMIT_REC_BYTES */
	uint32_t csum;          /* crc32c of its bytes (stored like s_csum) */
} ARB_PACKED;
ARB_CHECK_SIZE(commit_rec, 16);
ARB_LE(commit_rec, bytenr, 64)
ARB_LE(commit_rec, len, 32)
ARB_LE(commit_rec, csum, 32)

struct arb_super {
	uint8_t s_csum[ARB_CSUM_SIZE];
	uint64_t s_magic;
	uint64_t s_bytenr;
	uint8_t s_uuid[ARB_UUID_SIZE];
	uint64_t s_generation;
	uint64_t s_root;
	uint64_t s_total_bytes;
	uint64_t s_bytes_used;
	uint32_t s_nodesize;
	uint32_t s_sectorsize;
	uint32_t s_version;
	uint16_t s_csum_type;
	uint8_t s_root_level;
	uint8_t s_meta_copies;
	uint64_t s_incompat;
	uint64_t s_ro_compat;
	uint64_t s_compat;
	uint64_t s_flags;
	char s_label[ARB_LABEL_SIZE];
	uint64_t s_root_generation;
	uint64_t s_root_mirror;
	uint32_t s_commit_nr;
	uint32_t s_commit_pad;
	struct arb_commit_rec s_commit[ARB_COMMIT_REC_MAX];
	uint32_t s_hist_nr;
	uint32_t s_hist_pad;
	struct arb_history_entry s_hist[ARB_HISTORY_MAX];
	uint8_t s_reserved[64];
	/* the undo record of fsck's repair (lib/check/fs_repair.c): the
	 * generation a repair wrote, and the one it was made on; 0 when the
	 * superblock is not a repair's */
	uint64_t s_repair_gen;
	uint64_t s_repair_prev;
} ARB_PACKED;
ARB_CHECK_SIZE(super, 4096);
ARB_CHECK_OFF(super, s_magic, 32);
ARB_CHECK_OFF(super, s_bytenr, 40);
ARB_CHECK_OFF(super, s_uuid, 48);
ARB_CHECK_OFF(super, s_generation, 64);
ARB_CHECK_OFF(super, s_root, 72);
ARB_CHECK_OFF(super, s_total_bytes, 80);
ARB_CHECK_OFF(super, s_bytes_used, 88);
ARB_CHECK_OFF(super, s_nodesize, 96);
ARB_CHECK_OFF(super, s_sectorsize, 100);
ARB_CHECK_OFF(super, s_version, 104);
ARB_CHECK_OFF(super, s_csum_type, 108);
ARB_CHECK_OFF(super, s_root_level, 110);
ARB_CHECK_OFF(super, s_meta_copies, 111);
ARB_CHECK_OFF(super, s_incompat, 112);
ARB_CHECK_OFF(super, s_ro_compat, 120);
ARB_CHECK_OFF(super, s_compat, 128);
ARB_CHECK_OFF(super, s_flags, 136);
ARB_CHECK_OFF(super, s_label, 144);
ARB_CHECK_OFF(super, s_root_generation, 400);
ARB_CHECK_OFF(super, s_root_mirror, 408);
ARB_CHECK_OFF(super, s_commit_nr, 416);
ARB_CHECK_OFF(super, s_commit, 424);
ARB_CHECK_OFF(super, s_hist_nr, 2472);
ARB_CHECK_OFF(super, s_hist, 2480);
ARB_CHECK_OFF(super, s_reserved, 4016);
ARB_CHECK_OFF(super, s_repair_gen, 4080);
ARB_CHECK_OFF(super, s_repair_prev, 4088);
ARB_LE(super, s_magic, 64)
ARB_LE(super, s_bytenr, 64)
ARB_LE(super, s_generation, 64)
ARB_LE(super, s_root, 64)
ARB_LE(super, s_total_bytes, 64)
ARB_LE(super, s_bytes_used, 64)
ARB_LE(super, s_nodesize, 32)
ARB_LE(super, s_sectorsize, 32)
ARB_LE(super, s_version, 32)
ARB_LE(super, s_csum_type, 16)
ARB_LE(super, s_root_level, 8)
ARB_LE(super, s_meta_copies, 8)
ARB_LE(super, s_incompat, 64)
ARB_LE(super, s_ro_compat, 64)
ARB_LE(super, s_compat, 64)
ARB_LE(super, s_flags, 64)
ARB_LE(super, s_repair_gen, 64)
ARB_LE(super, s_repair_prev, 64)
ARB_LE(super, s_root_generation, 64)
ARB_LE(super, s_root_mirror, 64)
ARB_LE(super, s_commit_nr, 32)
ARB_LE(super, s_hist_nr, 32)

/* ------------------------------------------------------------------------ */
/*
 * Key, 17 bytes on disk.  Items sort by (objectid, type, offset), each as an
 * unsigned integer.
 *   0  8  objectid: inode number, tree id or disk address, by item type
 *   8  1  item type (enum arb_item_type)
 *   9  8  offset: meaning depends on the type (hash, sequence, file offset)
 */
struct arb_disk_key {
	uint64_t objectid;
	uint8_t type;
	uint64_t offset;
} ARB_PACKED;
ARB_CHECK_SIZE(disk_key, 17);
ARB_LE(disk_key, objectid, 64)
ARB_LE(disk_key, type, 8)
ARB_LE(disk_key, offset, 64)

/* ------------------------------------------------------------------------ */
/*
 * Node header, 96 bytes, at the start of every tree node (leaf or internal).
 *   0   32  checksum of bytes [32, nodesize)
 *   32  16  filesystem UUID (a node of another filesystem is rejected)
 *   48  8   byte address of this node (detects misplaced writes); both
 *           copies of a duplicated node carry the first copy's address
 *           and are byte-identical
 *   56  8   flags (ARB_NODE_*), 0 today
 *   64  8   generation of the transaction that wrote this node
 *   72  8   id of the tree that created this node (its owner)
 *   80  4   number of items (leaf) or key pointers (internal node)
 *   84  1   level: 0 for a leaf
 *   85  11  reserved, 0
 * A leaf continues with nritems struct arb_item from offset 96 upwards; item
 * data is packed at the end of the node, item 0's data last.  An internal
 * node continues with nritems struct arb_key_ptr from offset 96.
 */
struct arb_node_header {
	uint8_t h_csum[ARB_CSUM_SIZE];
	uint8_t h_uuid[ARB_UUID_SIZE];
	uint64_t h_bytenr;
	uint64_t h_flags;
	uint64_t h_generation;
	uint64_t h_owner;
	uint32_t h_nritems;
	uint8_t h_level;
	uint8_t h_reserved[11];
} ARB_PACKED;
ARB_CHECK_SIZE(node_header, 96);
ARB_CHECK_OFF(node_header, h_uuid, 32);
ARB_CHECK_OFF(node_header, h_bytenr, 48);
ARB_CHECK_OFF(node_header, h_flags, 56);
ARB_CHECK_OFF(node_header, h_generation, 64);
ARB_CHECK_OFF(node_header, h_owner, 72);
ARB_CHECK_OFF(node_header, h_nritems, 80);
ARB_CHECK_OFF(node_header, h_level, 84);
ARB_LE(node_header, h_bytenr, 64)
ARB_LE(node_header, h_flags, 64)
ARB_LE(node_header, h_generation, 64)
ARB_LE(node_header, h_owner, 64)
ARB_LE(node_header, h_nritems, 32)
ARB_LE(node_header, h_level, 8)

/*
 * Leaf item descriptor, 25 bytes.
 *   0   17  key
 *   17  4   offset of the item's data from the start of the node
 *   21  4   size of the item's data in bytes (0 allowed)
 */
struct arb_item {
	struct arb_disk_key i_key;
	uint32_t i_offset;
	uint32_t i_size;
} ARB_PACKED;
ARB_CHECK_SIZE(item, 25);
ARB_CHECK_OFF(item, i_offset, 17);
ARB_CHECK_OFF(item, i_size, 21);
ARB_LE(item, i_offset, 32)
ARB_LE(item, i_size, 32)

/*
 * Internal node pointer, 41 bytes.
 *   0   17  lowest key of the child subtree
 *   17  8   byte address of the child node (its first copy)
 *   25  8   generation the child must carry (detects lost writes)
 *   33  8   byte address of the child's second copy; 0 with one copy
 */
struct arb_key_ptr {
	struct arb_disk_key p_key;
	uint64_t p_blockptr;
	uint64_t p_generation;
	uint64_t p_mirror;
} ARB_PACKED;
ARB_CHECK_SIZE(key_ptr, 41);
ARB_CHECK_OFF(key_ptr, p_blockptr, 17);
ARB_CHECK_OFF(key_ptr, p_generation, 25);
ARB_CHECK_OFF(key_ptr, p_mirror, 33);
ARB_LE(key_ptr, p_blockptr, 64)
ARB_LE(key_ptr, p_generation, 64)
ARB_LE(key_ptr, p_mirror, 64)

/* ------------------------------------------------------------------------ */
/*
 * ROOT_ITEM, key (tree id, ROOT_ITEM, 0) in the root tree.  104 bytes.
 *   0   8   byte address of the tree's root node
 *   8   8   generation of that root node
 *   16  8   generation of the last clone (snapshot) of this tree; nodes
 *           with a generation <= this may be shared with another tree
 *   24  8   flags (ARB_ROOT_*)
 *   32  4   number of references to this root (subvolume links)
 *   36  1   level of the root node
 *   37  3   reserved, 0
 *   40  8   objectid of the root directory (fs trees); not written yet (0):
 *           the root directory is ARB_FIRST_INO
 *   48  8   highest inode number ever handed out in this tree (fs trees),
 *           never lowered; 0: not recorded (older images)
 *   56  8   generation in which this tree was created; for a clone, the
 *           transaction that cloned it (the clone holds its source as
 *           it was then)
 *   64  16  UUID of this tree: random for subvolume trees (fs tree 5,
 *           ids >= 256) at creation (mkfs) and for every clone (a new
 *           one); 0 for the other trees, and for an fs tree of an image
 *           made before UUIDs until its first writable mount gives it one
 *   80  16  a clone: r_uuid of the tree it was cloned from; 0 otherwise
 *           (or when that tree had none)
 *   96  8   byte address of the second copy of the root node; 0 with one
 *           copy
 */
struct arb_root_item {
	uint64_t r_bytenr;
	uint64_t r_generation;
	uint64_t r_last_snapshot;
	uint64_t r_flags;
	uint32_t r_refs;
	uint8_t r_level;
	uint8_t r_reserved[3];
	uint64_t r_root_dirid;
	uint64_t r_highest_objectid;
	uint64_t r_otransid;
	uint8_t r_uuid[ARB_UUID_SIZE];
	uint8_t r_parent_uuid[ARB_UUID_SIZE];
	uint64_t r_mirror;
} ARB_PACKED;
ARB_CHECK_SIZE(root_item, 104);
ARB_CHECK_OFF(root_item, r_mirror, 96);
ARB_CHECK_OFF(root_item, r_refs, 32);
ARB_CHECK_OFF(root_item, r_level, 36);
ARB_CHECK_OFF(root_item, r_root_dirid, 40);
ARB_CHECK_OFF(root_item, r_uuid, 64);
ARB_LE(root_item, r_bytenr, 64)
ARB_LE(root_item, r_generation, 64)
ARB_LE(root_item, r_last_snapshot, 64)
ARB_LE(root_item, r_flags, 64)
ARB_LE(root_item, r_refs, 32)
ARB_LE(root_item, r_level, 8)
ARB_LE(root_item, r_root_dirid, 64)
ARB_LE(root_item, r_highest_objectid, 64)
ARB_LE(root_item, r_otransid, 64)
ARB_LE(root_item, r_mirror, 64)

/* ------------------------------------------------------------------------ */
/*
 * Subvolumes (ARB_INCOMPAT_SUBVOL).  A subvolume is an fs tree with an id
 * from ARB_FIRST_SUBVOL_ID whose root directory (objectid ARB_FIRST_INO,
 * no INODE_REF) is linked under one name in a directory of another fs
 * tree, its parent:
 *   - a DIR_ITEM and a DIR_INDEX entry in that directory with d_type
 *     DT_DIR | ARB_DENT_SUBVOL and d_ino the subvolume's tree id (not an
 *     inode of the parent tree);
 *   - ROOT_REF, key (parent tree id, ROOT_REF, subvolume id), and
 *     ROOT_BACKREF, key (subvolume id, ROOT_BACKREF, parent tree id), in
 *     the root tree, each a struct arb_root_ref followed by the name;
 *   - SUBVOL_ITEM, key (subvolume id, SUBVOL_ITEM, 0), in the root tree.
 * A snapshot is a subvolume whose tree was cloned from another fs tree
 * (ROOT_ITEM r_parent_uuid, SUBVOL_ITEM s_source).  A deleted subvolume
 * loses its entry, ROOT_REF and ROOT_BACKREF at once; an ORPHAN_ITEM,
 * key (ARB_ORPHAN_OBJECTID, ORPHAN_ITEM, subvolume id), in the root tree
 * keeps its ROOT_ITEM and SUBVOL_ITEM until the cleaner has dropped the
 * tree, across crashes.
 */
#define ARB_DENT_SUBVOL 0x80

/*
 * ROOT_REF / ROOT_BACKREF: 18 bytes, then the name.
 *   0   8   objectid of the directory in the parent tree
 *   8   8   the entry's DIR_INDEX key offset in that directory
 *   16  2   name length (1..255)
 */
struct arb_root_ref {
	uint64_t rr_dirid;
	uint64_t rr_sequence;
	uint16_t rr_name_len;
} ARB_PACKED;
ARB_CHECK_SIZE(root_ref, 18);
ARB_LE(root_ref, rr_dirid, 64)
ARB_LE(root_ref, rr_sequence, 64)
ARB_LE(root_ref, rr_name_len, 16)

/*
 * DROP_PROGRESS, key (tree id, DROP_PROGRESS, 0) in the root tree
 * (ARB_INCOMPAT_DROP_PROGRESS): a deleted tree dropped in batches, each
 * committed with the frees it made.  40 bytes.
 *   0   17  d_key: at level d_level, the key of the first pointer not
 *           released yet.  Every pointer before it in its node, and every
 *           pointer before the one leading to it in the nodes above, has
 *           been released (the subtree's count decremented, or the subtree
 *           freed); the nodes holding d_key, from the root down to level
 *           d_level, are the tree's alone (count 1) and still allocated.
 *           d_key is never the first key of its node (a node nothing of
 *           which is released yet is recorded one level up).
 *   17  1   d_level: level of the node holding d_key, 1..the root's level
 *   18  6   reserved, 0
 *   24  8   tree nodes this drop has visited so far (released or freed),
 *           for progress reports
 *   32  8   of those, nodes freed (the rest were shared: only released)
 * Without the item, nothing of the tree has been released.  The tree's
 * ROOT_ITEM still names its root node until the last batch deletes both.
 * Walkers of the tree (the checker, the dump) skip what is released.
 */
struct arb_drop_progress {
	struct arb_disk_key d_key;
	uint8_t d_level;
	uint8_t d_reserved[6];
	uint64_t d_nodes;
	uint64_t d_freed;
} ARB_PACKED;
ARB_CHECK_SIZE(drop_progress, 40);
ARB_CHECK_OFF(drop_progress, d_level, 17);
ARB_CHECK_OFF(drop_progress, d_nodes, 24);
ARB_LE(drop_progress, d_level, 8)
ARB_LE(drop_progress, d_nodes, 64)
ARB_LE(drop_progress, d_freed, 64)

/*
 * SUBVOL_ITEM: 96 bytes.
 *   0   8   flags: ARB_SUBVOL_F_RDONLY
 *   8   8   creation time, seconds since the epoch
 *   16  4   nanoseconds of it
 *   20  4   reserved, 0
 *   24  8   time of the last change of flags, seconds
 *   32  4   nanoseconds of it
 *   36  4   reserved, 0
 *   40  16  received UUID: the source's r_uuid when this subvolume was
 *           made by a receive; 0 otherwise (and cleared when a received
 *           snapshot is made writable)
 *   56  8   generation of the source when it was sent (receive), else 0
 *   64  8   generation here when the receive finished, else 0; while
 *           ARB_SUBVOL_F_PARTIAL: the objectid the rest of the stream
 *           resumes at (2^40, past every objectid: every inode arrived,
 *           ARB_RESUME_ALL_INODES in arbor/subvol.h)
 *   72  8   for a snapshot, the id of the tree it was taken of (a hint:
 *           that tree may be gone); 0 for an empty subvolume
 *   80  8   in tree 5's item only: the highest subvolume id ever handed
 *           out (ids are never reused: they are part of inode numbers);
 *           in a partial receive's: the offset in the resume inode from
 *           which its data is missing; 0 in every other item
 *   88  8   in tree 5's item only: the default subvolume, the one a mount
 *           without subvol=/subvolid= shows as its root (`arbor subvolume
 *           set-default`); 0 (and 5) for tree 5 itself.  Otherwise the id
 *           of a live subvolume: one being deleted cannot be the default.
 *           0 in every other item.  Written by images from the build that
 *           gave it this meaning on; older ones wrote 0 (reserved).
 * Tree 5 gets a SUBVOL_ITEM with the first subvolume.  Other sizes: a
 * newer format (refused by fsck repair, as ROOT_ITEM).
 */
#define ARB_SUBVOL_F_RDONLY (1ULL << 0)
/*
 * A receive that stopped before its stream's end (the stream was cut, or
 * the image filled) and may be resumed (`arbor send --resume`): the tree
 * keeps its ORPHAN_ITEM (unlinked, as while it was built), received UUID
 * and s_stransid name the stream's source, s_rtransid the resume point;
 * the cleaner leaves it alone until the flag is cleared (the resumed
 * receive published it, or it was given up).  Needs
 * ARB_INCOMPAT_PARTIAL_RECEIVE.
 */
#define ARB_SUBVOL_F_PARTIAL (1ULL << 1)
#define ARB_SUBVOL_F_KNOWN (ARB_SUBVOL_F_RDONLY | ARB_SUBVOL_F_PARTIAL)
struct arb_subvol_item {
	uint64_t s_flags;
	uint64_t s_otime;
	uint32_t s_otime_ns;
	uint32_t s_reserved1;
	uint64_t s_ctime;
	uint32_t s_ctime_ns;
	uint32_t s_reserved2;
	uint8_t s_received_uuid[ARB_UUID_SIZE];
	uint64_t s_stransid;
	uint64_t s_rtransid;
	uint64_t s_source;
	uint64_t s_last_id;
	/* tree 5's item: the default subvolume's id; 0 = tree 5 */
	uint64_t s_default_id;
} ARB_PACKED;
ARB_CHECK_SIZE(subvol_item, 96);
ARB_CHECK_OFF(subvol_item, s_received_uuid, 40);
ARB_CHECK_OFF(subvol_item, s_source, 72);
ARB_CHECK_OFF(subvol_item, s_default_id, 88);
ARB_LE(subvol_item, s_flags, 64)
ARB_LE(subvol_item, s_otime, 64)
ARB_LE(subvol_item, s_otime_ns, 32)
ARB_LE(subvol_item, s_ctime, 64)
ARB_LE(subvol_item, s_ctime_ns, 32)
ARB_LE(subvol_item, s_stransid, 64)
ARB_LE(subvol_item, s_rtransid, 64)
ARB_LE(subvol_item, s_source, 64)
ARB_LE(subvol_item, s_last_id, 64)
ARB_LE(subvol_item, s_default_id, 64)

/* ------------------------------------------------------------------------ */
/*
 * DIGEST_ITEM, key (subvolume id, DIGEST_ITEM, 0) in the root tree
 * (ARB_INCOMPAT_DIGEST).  48 bytes.  The sum of digest version 2
 * (docs/SEND-STREAM.md, "Digest version 2"; lib/send/setdigest.c) of the
 * subvolume's tree as it was when its root node had generation
 * d_generation: with any other root generation the tree changed since,
 * and the item is stale (ignored, replaced when computed again).  Written
 * for read-only subvolumes, by send and receive and `arbor subvolume
 * digest`; deleted with the subvolume.
 *   0   4   digest version: 2 (another: a newer format, ignored)
 *   4   4   reserved, 0
 *   8   8   generation of the tree's root node the sum is of
 *   16  32  the sum: a 256-bit little-endian number
 */
struct arb_digest_item {
	uint32_t d_version;
	uint32_t d_reserved;
	uint64_t d_generation;
	uint8_t d_sum[32];
} ARB_PACKED;
ARB_CHECK_SIZE(digest_item, 48);
ARB_CHECK_OFF(digest_item, d_sum, 16);
ARB_LE(digest_item, d_version, 32)
ARB_LE(digest_item, d_reserved, 32)
ARB_LE(digest_item, d_generation, 64)

/* ------------------------------------------------------------------------ */
/*
 * EXTENT_ITEM, key (disk address, EXTENT_ITEM, length in bytes) in the
 * extent tree.  24 bytes, followed for a tree node by struct
 * arb_tree_block_ref (41 bytes in all).
 *   0   8   reference count: parent pointers (tree nodes) or file extent
 *           items (data) that point at this extent
 *   8   8   generation in which the extent was allocated (its first
 *           bytes: an extent grown by appends keeps it)
 *   16  8   flags: ARB_EXTENT_FLAG_TREE_BLOCK or ARB_EXTENT_FLAG_DATA
 * A data extent's back-references are EXTENT_DATA_REF items with the same
 * objectid.
 */
/* (named _FLAG_: format version 1 called the data flag ARB_EXTENT_DATA,
 * which as a macro shadowed the EXTENT_DATA item type, so version 1 wrote
 * file extent items with type 2 instead of 108) */
#define ARB_EXTENT_FLAG_TREE_BLOCK 1ULL
#define ARB_EXTENT_FLAG_DATA 2ULL
struct arb_extent_item {
	uint64_t e_refs;
	uint64_t e_generation;
	uint64_t e_flags;
} ARB_PACKED;
ARB_CHECK_SIZE(extent_item, 24);
ARB_LE(extent_item, e_refs, 64)
ARB_LE(extent_item, e_generation, 64)
ARB_LE(extent_item, e_flags, 64)

/*
 * Back-reference of a tree node, 17 bytes, right after its arb_extent_item.
 *   0   8   owner: id of the tree that created the node (= node h_owner)
 *   8   1   level of the node (= node h_level)
 *   9   8   byte address of the node's second copy, nodesize bytes that
 *           this item also covers (allocated and freed with the first);
 *           0 with one copy
 */
struct arb_tree_block_ref {
	uint64_t t_owner;
	uint8_t t_level;
	uint64_t t_mirror;
} ARB_PACKED;
ARB_CHECK_SIZE(tree_block_ref, 17);
ARB_CHECK_OFF(tree_block_ref, t_mirror, 9);
ARB_LE(tree_block_ref, t_owner, 64)
ARB_LE(tree_block_ref, t_level, 8)
ARB_LE(tree_block_ref, t_mirror, 64)

/*
 * EXTENT_DATA_REF, key (disk address, EXTENT_DATA_REF, key offset) in the
 * extent tree.  28 bytes.  The key offset is found by linear probing from
 * the item's home, arb_data_ref_hash(root, inode, offset): an item goes to
 * the first free key offset at or after its home, however far (reflinks
 * let users choose inode and offset, and the hash is easy to collide on
 * purpose).  Invariant: for an item at key offset p with home h, every key
 * offset in [h + ARB_DATA_REF_WINDOW, p) holds an item of the same extent.
 * So a lookup walks from h and may stop at the first free key offset at or
 * past h + ARB_DATA_REF_WINDOW; a delete moves later items of the run back
 * into the hole to keep the invariant (lib/core/alloc.c).  The free key offsets
 * below h + ARB_DATA_REF_WINDOW do not stop a lookup: images written before
 * probing was unbounded left holes there (they probed at most that many
 * key offsets and never moved items), and they stay valid as they are.
 *   0   8   id of the tree (leaf owner) holding the file extent items
 *   8   8   inode number
 *   16  8   file offset minus the extent item's offset into the extent
 *   24  4   number of file extent items with this (root, inode, offset)
 */
struct arb_extent_data_ref {
	uint64_t d_root;
	uint64_t d_objectid;
	uint64_t d_offset;
	uint32_t d_count;
} ARB_PACKED;
ARB_CHECK_SIZE(extent_data_ref, 28);
ARB_LE(extent_data_ref, d_root, 64)
ARB_LE(extent_data_ref, d_objectid, 64)
ARB_LE(extent_data_ref, d_offset, 64)
ARB_LE(extent_data_ref, d_count, 32)
/* see EXTENT_DATA_REF above: free key offsets a lookup passes over */
#define ARB_DATA_REF_WINDOW 16
/*
 * Does a lookup from home (the item's hash) reach a back-reference item at
 * key offset pos, when the run of consecutive occupied key offsets of its
 * extent that holds pos starts at run_start?  Only free key offsets at or
 * past home + ARB_DATA_REF_WINDOW stop a lookup (checkers).
 */
static inline bool arb_data_ref_reachable(uint64_t home, uint64_t pos,
					  uint64_t run_start)
{
	return pos >= home && (pos <= home + ARB_DATA_REF_WINDOW ||
			       run_start <= home + ARB_DATA_REF_WINDOW);
}

/* ------------------------------------------------------------------------ */
/*
 * EXTENT_DATA, key (inode, EXTENT_DATA, file offset) in an fs tree.
 * Header of 21 bytes:
 *   0   8   generation that wrote this extent item
 *   8   8   ram bytes: inline, the bytes that follow; REG/PREALLOC, the
 *           length of the whole disk extent's data as written (inflated,
 *           for a compressed one), kept when an item is split
 *   16  1   compression: ARB_COMPRESS_NONE, or ARB_COMPRESS_ZLIB (REG
 *           only, below); any other value is refused with -EUCLEAN
 *   17  1   type: ARB_FILE_EXTENT_INLINE, _REG or _PREALLOC
 *   18  3   reserved, 0
 * INLINE: the file bytes follow the header (item size - 21 bytes).
 * REG/PREALLOC: followed by 32 bytes
 *   21  8   disk address of the extent (0 never appears: holes are absent)
 *   29  8   length of the disk extent in bytes
 *   37  8   offset into the disk extent where this item's bytes start
 *   45  8   number of file bytes this item covers
 */
#define ARB_FILE_EXTENT_INLINE 0
#define ARB_FILE_EXTENT_REG 1
#define ARB_FILE_EXTENT_PREALLOC 2
/*
 * A compressed INLINE extent (ARB_COMPRESS_ZLIB): the item's bytes after
 * the header are one zlib stream, shorter than the f_ram_bytes file bytes
 * it inflates to, which are at most one sector (the file's size).
 * A compressed REG extent (ARB_COMPRESS_ZLIB): the disk extent
 * [disk_bytenr, disk_bytenr + disk_num_bytes) holds one zlib stream
 * (RFC 1950, header and Adler-32 included) that inflates to exactly
 * ram_bytes bytes, followed by zeros to the end of its last sector; the
 * stream is as short as the data allows, and disk_num_bytes is at least
 * one sector smaller than ram_bytes (data that does not shrink by a
 * sector is stored as is).  ram_bytes is a multiple of the sector size
 * and at most ARB_COMPRESS_MAX_RAM, so a read inflates at most that much
 * to return any byte.  f_offset and f_num_bytes count bytes of the
 * inflated data ([f_offset, f_offset + f_num_bytes) inside ram_bytes),
 * so an overwrite or a clone splits a compressed extent's items as it
 * splits any other's.  Data checksums cover the stored sectors, as for
 * every extent: scrub and fsck check them without inflating.
 */
/* (arbor.h defines the first two too, identically, for arb_fs_opts) */
#define ARB_COMPRESS_NONE 0
#define ARB_COMPRESS_ZLIB 1
#define ARB_COMPRESS_MAX_RAM (128u << 10)
/* the most file bytes a compressed INLINE item may hold (writers: one
 * sector) */
#define ARB_COMPRESS_INLINE_MAX (64u << 10)
struct arb_file_extent {
	uint64_t f_generation;
	uint64_t f_ram_bytes;
	uint8_t f_compression;
	uint8_t f_type;
	uint8_t f_reserved[3];
	/* the rest is absent for inline extents */
	uint64_t f_disk_bytenr;
	uint64_t f_disk_num_bytes;
	uint64_t f_offset;
	uint64_t f_num_bytes;
} ARB_PACKED;
#define ARB_FILE_EXTENT_INLINE_HDR 21
ARB_CHECK_SIZE(file_extent, 53);
ARB_CHECK_OFF(file_extent, f_type, 17);
ARB_CHECK_OFF(file_extent, f_disk_bytenr, 21);
ARB_CHECK_OFF(file_extent, f_num_bytes, 45);
ARB_LE(file_extent, f_generation, 64)
ARB_LE(file_extent, f_ram_bytes, 64)
ARB_LE(file_extent, f_compression, 8)
ARB_LE(file_extent, f_type, 8)
ARB_LE(file_extent, f_disk_bytenr, 64)
ARB_LE(file_extent, f_disk_num_bytes, 64)
ARB_LE(file_extent, f_offset, 64)
ARB_LE(file_extent, f_num_bytes, 64)
/* the file bytes an INLINE item of size bytes holds */
static inline uint64_t arb_file_extent_inline_len(const struct arb_file_extent *fe,
						  uint32_t size)
{
	return arb_file_extent_f_compression(fe)
		       ? arb_file_extent_f_ram_bytes(fe)
		       : size - ARB_FILE_EXTENT_INLINE_HDR;
}

/* ------------------------------------------------------------------------ */
/*
 * INODE_ITEM, key (inode, INODE_ITEM, 0) in an fs tree.  160 bytes.
 *   0    8   generation in which the inode was created
 *   8    8   generation of the last change (transid)
 *   16   8   size in bytes
 *   24   8   bytes allocated on disk for data
 *   32   8   sequence counter for DIR_INDEX (directories): next index
 *   40   8   rdev (device nodes)
 *   48   8   flags (ARB_INODE_*, below)
 *   56   4   nlink
 *   60   4   uid
 *   64   4   gid
 *   68   4   mode (type and permission bits as in st_mode)
 *   72   8   atime seconds   80 4 atime nanoseconds
 *   84   8   mtime seconds   92 4 mtime nanoseconds
 *   96   8   ctime seconds   104 4 ctime nanoseconds
 *   108  8   btime seconds   116 4 btime nanoseconds
 *   120  40  reserved, 0
 */
struct arb_inode_item {
	uint64_t i_generation;
	uint64_t i_transid;
	uint64_t i_size;
	uint64_t i_nbytes;
	uint64_t i_seq;
	uint64_t i_rdev;
	uint64_t i_flags;
	uint32_t i_nlink;
	uint32_t i_uid;
	uint32_t i_gid;
	uint32_t i_mode;
	uint64_t i_atime;
	uint32_t i_atime_ns;
	uint64_t i_mtime;
	uint32_t i_mtime_ns;
	uint64_t i_ctime;
	uint32_t i_ctime_ns;
	uint64_t i_btime;
	uint32_t i_btime_ns;
	uint8_t i_reserved[40];
} ARB_PACKED;
ARB_CHECK_SIZE(inode_item, 160);
ARB_CHECK_OFF(inode_item, i_nlink, 56);
ARB_CHECK_OFF(inode_item, i_mode, 68);
ARB_CHECK_OFF(inode_item, i_atime, 72);
ARB_CHECK_OFF(inode_item, i_btime_ns, 116);
/*
 * i_flags.  Bits 0-5 are the file attributes of chattr(1), with the
 * meaning ext4 (0-3) and btrfs (4-5) give them; the numbers are ours (the
 * library converts to and from FS_*_FL).  Unknown bits are kept as they
 * are by every writer.
 *   IMMUTABLE  no change at all: data, size, names, mode, owner, times,
 *              xattrs; no new links; a directory takes no new entries
 *              and loses none
 *   APPEND     data only appended (writes through O_APPEND opens), no
 *              truncation, no unlink or rename, no new links, no change
 *              of mode, owner or xattrs; a directory loses no entries
 *   NODUMP     dump(8) skips the file; no effect on the filesystem
 *   NOATIME    reads do not update atime
 *   COMPRESS   data written from now on is compressed (chattr +c), even
 *              without -o compress
 *   NOCOMPRESS data is never compressed, even with -o compress; set by
 *              the writer when the start of a file does not compress
 *              (unless -o compress-force), or by chattr -c / a property
 * New inodes inherit NODUMP, NOATIME, COMPRESS and NOCOMPRESS from their
 * directory (as ext4's EXT4_FL_INHERITED, btrfs for the last two);
 * IMMUTABLE and APPEND are never inherited.  Data already written keeps
 * how it is stored: the flags decide what the next writes do.
 */
#define ARB_INODE_IMMUTABLE (1ULL << 0)
#define ARB_INODE_APPEND (1ULL << 1)
#define ARB_INODE_NODUMP (1ULL << 2)
#define ARB_INODE_NOATIME (1ULL << 3)
#define ARB_INODE_COMPRESS (1ULL << 4)
#define ARB_INODE_NOCOMPRESS (1ULL << 5)
#define ARB_INODE_INHERITED                                                    \
	(ARB_INODE_NODUMP | ARB_INODE_NOATIME | ARB_INODE_COMPRESS |           \
	 ARB_INODE_NOCOMPRESS)
ARB_LE(inode_item, i_generation, 64)
ARB_LE(inode_item, i_transid, 64)
ARB_LE(inode_item, i_size, 64)
ARB_LE(inode_item, i_nbytes, 64)
ARB_LE(inode_item, i_seq, 64)
ARB_LE(inode_item, i_rdev, 64)
ARB_LE(inode_item, i_flags, 64)
ARB_LE(inode_item, i_nlink, 32)
ARB_LE(inode_item, i_uid, 32)
ARB_LE(inode_item, i_gid, 32)
ARB_LE(inode_item, i_mode, 32)
ARB_LE(inode_item, i_atime, 64)
ARB_LE(inode_item, i_atime_ns, 32)
ARB_LE(inode_item, i_mtime, 64)
ARB_LE(inode_item, i_mtime_ns, 32)
ARB_LE(inode_item, i_ctime, 64)
ARB_LE(inode_item, i_ctime_ns, 32)
ARB_LE(inode_item, i_btime, 64)
ARB_LE(inode_item, i_btime_ns, 32)

/*
 * INODE_REF, key (inode, INODE_REF, parent directory inode).  One item per
 * parent; it holds one or more entries (hard links with different names in
 * the same directory), each:
 *   0   8   DIR_INDEX sequence of this link in the parent
 *   8   2   name length (1..255)
 *   10  n   name, not NUL terminated
 */
struct arb_inode_ref {
	uint64_t r_index;
	uint16_t r_name_len;
} ARB_PACKED;
ARB_CHECK_SIZE(inode_ref, 10);
ARB_LE(inode_ref, r_index, 64)
ARB_LE(inode_ref, r_name_len, 16)

/*
 * DIR_ITEM, key (dir, DIR_ITEM, name hash), DIR_INDEX, key (dir, DIR_INDEX,
 * sequence) and XATTR_ITEM, key (inode, XATTR_ITEM, name hash).  A DIR_ITEM
 * or XATTR_ITEM holds one or more entries (hash collisions); a DIR_INDEX
 * exactly one.  Each entry:
 *   0   8   child inode number (0 for xattrs)
 *   8   8   generation of the transaction that created the entry
 *   16  2   length of the data (xattr value), 0 for directory entries
 *   18  2   name length (1..255)
 *   20  1   file type (DT_* value) for directory entries; for xattrs 0
 *           (the data is the value) or ARB_XATTR_OUT_OF_LINE (the data is
 *           a struct arb_xattr_ref)
 *   21  n   name, then data
 */
#define ARB_XATTR_OUT_OF_LINE 1
struct arb_dir_entry {
	uint64_t d_ino;
	uint64_t d_transid;
	uint16_t d_data_len;
	uint16_t d_name_len;
	uint8_t d_type;
} ARB_PACKED;
ARB_CHECK_SIZE(dir_entry, 21);
ARB_LE(dir_entry, d_ino, 64)
ARB_LE(dir_entry, d_transid, 64)
ARB_LE(dir_entry, d_data_len, 16)
ARB_LE(dir_entry, d_name_len, 16)
ARB_LE(dir_entry, d_type, 8)

/*
 * Out-of-line xattr value (ARB_INCOMPAT_XATTR_DATA), the 16 bytes of data
 * of an XATTR_ITEM entry with d_type ARB_XATTR_OUT_OF_LINE:
 *   0   8   key offset of the first XATTR_DATA piece
 *   8   4   length of the value in bytes
 *   12  4   number of pieces (1..65536)
 * The pieces are XATTR_DATA items (inode, XATTR_DATA, x_id + i) for i in
 * [0, x_pieces), each holding the next non-empty run of the value's bytes;
 * their sizes add up to x_len.  x_id is the name hash with its low 16 bits
 * cleared, plus a multiple of 65536 when that is taken (another
 * attribute's pieces).  Values of up to 16,000 bytes (the limit before out
 * of line values) that fit their XATTR_ITEM are stored inline.
 */
struct arb_xattr_ref {
	uint64_t x_id;
	uint32_t x_len;
	uint32_t x_pieces;
} ARB_PACKED;
ARB_CHECK_SIZE(xattr_ref, 16);
ARB_LE(xattr_ref, x_id, 64)
ARB_LE(xattr_ref, x_len, 32)
ARB_LE(xattr_ref, x_pieces, 32)
#define ARB_XATTR_INLINE_MAX 16000
#define ARB_XATTR_PIECES_MAX 65536

/* ------------------------------------------------------------------------ */
/*
 * EXTENT_CSUM, key (ARB_EXTENT_CSUM_OBJECTID, EXTENT_CSUM, disk address of
 * the first sector covered) in the checksum tree.  The data is an array of
 * little-endian u32 crc32c values, one per sector (s_sectorsize bytes) of
 * data starting at that address; item size / 4 sectors are covered, at most
 * ARB_CSUMS_PER_ITEM.  Items never straddle two data extents.
 */
#define ARB_EXTENT_CSUM_OBJECTID 0xfffffffffffffff6ULL
#define ARB_CSUMS_PER_ITEM 1024

/* ------------------------------------------------------------------------ */
/* In-memory twins */

struct arb_key {
	uint64_t objectid;
	uint8_t type;
	uint64_t offset;
};

static inline void arb_key_from_disk(struct arb_key *k,
				     const struct arb_disk_key *d)
{
	k->objectid = arb_disk_key_objectid(d);
	k->type = arb_disk_key_type(d);
	k->offset = arb_disk_key_offset(d);
}

static inline void arb_key_to_disk(struct arb_disk_key *d,
				   const struct arb_key *k)
{
	arb_set_disk_key_objectid(d, k->objectid);
	arb_set_disk_key_type(d, k->type);
	arb_set_disk_key_offset(d, k->offset);
}

static inline int arb_key_cmp(const struct arb_key *a, const struct arb_key *b)
{
	if (a->objectid != b->objectid)
		return a->objectid < b->objectid ? -1 : 1;
	if (a->type != b->type)
		return a->type < b->type ? -1 : 1;
	if (a->offset != b->offset)
		return a->offset < b->offset ? -1 : 1;
	return 0;
}

/* checksums (format.c) */
uint32_t arb_crc32c(uint32_t crc, const void *buf, size_t len);
/* fill csum[32] for the bytes of buf after the csum field */
void arb_csum_block(unsigned type, const void *buf, size_t len,
		    uint8_t out[ARB_CSUM_SIZE]);
/* 0 when the checksum stored in the first 32 bytes of buf matches */
int arb_csum_verify(unsigned type, const void *buf, size_t len);
/* name hash for DIR_ITEM and XATTR_ITEM keys */
uint64_t arb_name_hash(const char *name, size_t len);
uint64_t arb_data_ref_hash(uint64_t root, uint64_t ino, uint64_t offset);

#endif
