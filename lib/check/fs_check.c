/* SPDX-License-Identifier: MIT */
/*
 * fs_check.c - checks of the fs tree, on top of the core's structural
 * check (arb_check_vol).  One pass in key order, inode by inode:
 *
 *   - every item belongs to an inode that has an INODE_ITEM
 *   - every INODE_REF entry has its DIR_INDEX (same index, name, inode) and
 *     a DIR_ITEM entry in the parent; every DIR_INDEX entry has its
 *     INODE_REF entry; every DIR_ITEM entry's key is the hash of its name
 *     and the child names the directory back
 *   - nlink: number of INODE_REF entries (files), 2 + subdirectories and
 *     exactly one parent (directories, the root has none); nlink 0 only
 *     with an ORPHAN_ITEM, and every ORPHAN_ITEM names such an inode
 *   - directory i_size = 2 * sum of name lengths; i_seq above every index
 *   - EXTENT_DATA items parse, do not overlap, inline only at offset 0,
 *     are not compressed (no version reads compressed data yet);
 *     i_nbytes = bytes they map
 *   - an out-of-line xattr value's pieces (XATTR_DATA) all exist and add
 *     up to its length; every piece belongs to an attribute of its inode
 *   - no inode number above the tree's r_highest_objectid (the highest
 *     ever handed out), unless that is 0: not recorded, as in images made
 *     before it was kept
 * Collected per inode while its items go by; cross references are checked
 * with lookups, so the memory used does not grow with the tree (beyond
 * the records of the problems found).  Delayed data (not yet in the
 * tree) is not seen.
 *
 * Two passes, the second only when needed.  The first makes no lookup
 * for names: it adds every INODE_REF entry (inode, dir, index, name) and
 * subtracts every DIR_INDEX entry (child, dir, index, name) in a sum of
 * 64-bit hashes keyed by a seed drawn per run, and likewise INODE_REF
 * (dir, inode, name) against DIR_ITEM (dir, child, name).  When both sums
 * are 0 the two sides hold the same entries (unless the hashes of what
 * differs add up to 0: a chance of 2^-64), and with the
 * local checks (one entry per DIR_INDEX, names hashed where they belong,
 * no name twice in one INODE_REF or DIR_ITEM) that is exactly what the
 * lookups would find: every name has its DIR_INDEX and DIR_ITEM, and
 * every entry its INODE_REF.  A first pass that meets any problem at all,
 * or sums that differ, is thrown away and the second pass, with the
 * lookups, raises the records: on a damaged tree the records are those of
 * the lookups, on a clean one the lookups are not made.
 *
 * Each problem is raised once, as a named record (ARB_PB_*, arbor.h) that
 * carries what repair needs: the directory, index and name of a link, the
 * expected count or size (fs_repair.c acts on them).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "check_int.h"
#include "items/items.h"

struct chk {
	struct arb_fs *fs;
	/* the fs tree being checked */
	struct fs_tree *tr;
	FILE *out;
	/* records, or NULL (then dummy takes them) */
	struct arb_check_result *res;
	struct arb_problem dummy;
	uint64_t errors;
	uint8_t *buf; /* max item size */
	/* the inode being collected */
	uint64_t ino;
	bool have_inode;
	struct arb_inode in;
	uint64_t refs, parents, subdirs, name_bytes, max_index;
	uint64_t ext_end, ext_bytes;
	bool inline_seen;
	/* the out-of-line xattr values of the inode (XATTR_ITEMs sort
	 * before their XATTR_DATA pieces): first piece and count */
	struct chk_xref {
		uint64_t id;
		uint32_t pieces;
	} *xrefs;
	size_t nxrefs, xrefs_cap;
	/* the highest inode number seen */
	uint64_t max_ino;
	/* the first pass (no lookups): it failed (a problem, or a name
	 * twice in one item); the sums of INODE_REF minus DIR_INDEX and
	 * INODE_REF minus DIR_ITEM entries, and their seeds */
	bool fast, fast_failed;
	uint64_t sum_index, sum_item, seed[2];
	/* items looked at */
	uint64_t items;
};

/* the first pass must not say clean when it is not (see the head) */
static uint64_t mix64(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

static uint64_t name_digest(uint64_t seed, uint64_t a, uint64_t b, uint64_t c,
			    const char *name, size_t nl)
{
	uint64_t h = seed ^ nl;

	h = (h ^ a) * 0x9E3779B97F4A7C15ULL;
	h = (h ^ (h >> 29) ^ b) * 0xC2B2AE3D27D4EB4FULL;
	h = (h ^ (h >> 29) ^ c) * 0x165667B19E3779F9ULL;
	while (nl) {
		uint64_t v = 0;
		size_t n = nl < 8 ? nl : 8;
		memcpy(&v, name, n);
		h = (h ^ (h >> 29) ^ v) * 0x27D4EB2F165667C5ULL;
		name += n;
		nl -= n;
	}
	return mix64(h);
}

/* add (sign 1) or subtract (sign -1) a name in the first pass's sums */
static void digest_index(struct chk *c, int sign, uint64_t ino, uint64_t dir,
			 uint64_t index, const char *name, size_t nl)
{
	c->sum_index += (uint64_t)sign *
			name_digest(c->seed[0], ino, dir, index, name, nl);
}

static void digest_item(struct chk *c, int sign, uint64_t ino, uint64_t dir,
			const char *name, size_t nl)
{
	c->sum_item += (uint64_t)sign *
		       name_digest(c->seed[1], ino, dir, 0, name, nl);
}

/*
 * A name twice in one INODE_REF or DIR_ITEM: the lookups find only the
 * first, which the sums cannot tell; the first pass gives up.  Does an
 * entry before end (all of them parsed already) hold name?
 */
static bool iref_name_before(const uint8_t *d, size_t end, const char *name,
			     size_t nl)
{
	for (size_t pos = 0; pos < end;) {
		const struct arb_inode_ref *r =
			(const struct arb_inode_ref *)(d + pos);
		size_t l = arb_inode_ref_r_name_len(r);
		if (l == nl && !memcmp(d + pos + sizeof(*r), name, nl))
			return true;
		pos += sizeof(*r) + l;
	}
	return false;
}

static bool dent_name_before(const uint8_t *d, size_t end, const char *name,
			     size_t nl)
{
	for (size_t pos = 0; pos < end;) {
		const struct arb_dir_entry *e =
			(const struct arb_dir_entry *)(d + pos);
		size_t l = arb_dir_entry_d_name_len(e);
		if (l == nl && !memcmp(d + pos + sizeof(*e), name, nl))
			return true;
		pos += fs_dent_size(l, arb_dir_entry_d_data_len(e));
	}
	return false;
}

/*
 * Raise problem id about ino.  Returns its record (a scratch one without a
 * result list, or out of memory) for the caller to fill in what repair
 * needs (dir, index, name, expected value).
 */
__attribute__((format(printf, 4, 5))) static struct arb_problem *
problem(struct chk *c, enum arb_problem_id id, uint64_t ino, const char *fmt,
	...)
{
	struct arb_problem *p;
	int n;
	va_list ap;

	if (c->fast) {
		/* the second pass says what and where */
		c->fast_failed = true;
		p = &c->dummy;
		memset(p, 0, sizeof(*p));
		return p;
	}
	p = fs_problem_add(c->res, id, ino);
	c->errors++;
	if (!p) {
		p = &c->dummy;
		memset(p, 0, sizeof(*p));
		p->id = id;
		p->ino = ino;
	}
	if (c->tr->slot)
		p->tree = c->tr->id;
	if (c->tr->slot)
		n = snprintf(p->detail, sizeof(p->detail),
			     "subvolume %llu: inode %llu: ",
			     (unsigned long long)c->tr->id,
			     (unsigned long long)ino);
	else
		n = snprintf(p->detail, sizeof(p->detail), "inode %llu: ",
			     (unsigned long long)ino);
	va_start(ap, fmt);
	vsnprintf(p->detail + n, sizeof(p->detail) - (size_t)n, fmt, ap);
	va_end(ap);
	if (c->out && c->res)
		fs_problem_print(c->out, p);
	else if (c->out)
		fprintf(c->out, "fs tree: %s\n", p->detail);
	return p;
}

static void set_name(struct arb_problem *p, uint64_t dir, uint64_t index,
		     const char *name)
{
	p->dir = dir;
	p->index = index;
	snprintf(p->name, sizeof(p->name), "%s", name);
}

static bool orphan_exists(struct chk *c, uint64_t ino)
{
	struct arb_key k = { ARB_ORPHAN_OBJECTID, ARB_ORPHAN_ITEM, ino };
	return fs_item_exists(c->tr->root, &k);
}

static void finish_inode(struct chk *c)
{
	struct arb_inode *in = &c->in;
	uint64_t ino = c->ino;
	struct arb_problem *p;

	if (!c->have_inode)
		return;
	c->have_inode = false;
	if (in->nlink == 0) {
		if (orphan_exists(c, ino))
			return;
		if (c->refs == 0) {
			problem(c, ARB_PB_UNLINKED, ino,
				"nlink 0, no name and no orphan item");
			return;
		}
	}
	if (S_ISDIR(in->mode)) {
		if (ino != ARB_ROOT_INO && c->refs == 0) {
			problem(c, ARB_PB_UNLINKED, ino,
				"directory has no name");
		} else if (ino == ARB_ROOT_INO ? c->refs != 0 : c->refs != 1) {
			problem(c, ARB_PB_DIR_NAMES, ino,
				"directory has %llu names",
				(unsigned long long)c->refs);
		}
		if (in->nlink != 2 + c->subdirs) {
			p = problem(c, ARB_PB_NLINK, ino,
				    "directory nlink %u, expected %llu",
				    in->nlink,
				    (unsigned long long)(2 + c->subdirs));
			p->expect = 2 + c->subdirs;
		}
		if (in->size != 2 * c->name_bytes) {
			p = problem(c, ARB_PB_DIR_SIZE, ino,
				    "directory size %llu, expected %llu",
				    (unsigned long long)in->size,
				    (unsigned long long)(2 * c->name_bytes));
			p->expect = 2 * c->name_bytes;
		}
		if (c->max_index && in->seq <= c->max_index) {
			p = problem(c, ARB_PB_DIR_SEQ, ino,
				    "next index %llu <= used index %llu",
				    (unsigned long long)in->seq,
				    (unsigned long long)c->max_index);
			p->expect = c->max_index + 1;
		}
	} else if (c->refs == 0) {
		problem(c, ARB_PB_UNLINKED, ino,
			"nlink %u, but no name and no orphan item", in->nlink);
	} else if (in->nlink != c->refs) {
		p = problem(c, ARB_PB_NLINK, ino, "nlink %u, but %llu names",
			    in->nlink, (unsigned long long)c->refs);
		p->expect = c->refs;
	}
	if (c->ext_bytes != in->nbytes) {
		p = problem(c, ARB_PB_NBYTES, ino,
			    "nbytes %llu, extents map %llu",
			    (unsigned long long)in->nbytes,
			    (unsigned long long)c->ext_bytes);
		p->expect = c->ext_bytes;
	}
}

static bool inode_exists(struct chk *c, uint64_t ino)
{
	struct arb_key k = { ino, ARB_INODE_ITEM, 0 };
	return fs_item_exists(c->tr->root, &k);
}

/* is there a DIR_INDEX item (dir, index) at all */
static bool dir_index_exists(struct chk *c, uint64_t dir, uint64_t index)
{
	struct arb_key k = { dir, ARB_DIR_INDEX, index };
	return fs_item_exists(c->tr->root, &k);
}

/* does the DIR_INDEX (dir, index) hold {ino, name}? */
static bool dir_index_matches(struct chk *c, uint64_t dir, uint64_t index,
			      uint64_t ino, const char *name, size_t nl)
{
	struct arb_key k = { dir, ARB_DIR_INDEX, index };
	uint32_t max = arb_max_item_size(c->fs->vol);
	const struct arb_dir_entry *e = (const struct arb_dir_entry *)c->buf;
	int ret = arb_lookup_item(c->tr->root, &k, c->buf, max);

	return ret >= (int)sizeof(*e) && arb_dir_entry_d_ino(e) == ino &&
	       arb_dir_entry_d_name_len(e) == nl &&
	       (size_t)ret >= sizeof(*e) + nl &&
	       memcmp(c->buf + sizeof(*e), name, nl) == 0;
}

static bool dir_item_has(struct chk *c, uint64_t dir, uint64_t ino,
			 const char *name, size_t nl)
{
	struct arb_key k = { dir, ARB_DIR_ITEM, arb_name_hash(name, nl) };
	uint32_t max = arb_max_item_size(c->fs->vol);
	size_t off, elen;
	int ret = arb_lookup_item(c->tr->root, &k, c->buf, max);

	if (ret < 0 || fs_dent_find(c->buf, (size_t)ret, name, nl, &off,
				    &elen))
		return false;
	return arb_dir_entry_d_ino((struct arb_dir_entry *)(c->buf + off)) ==
	       ino;
}

/* does ino's INODE_REF for dir name it (with index, unless index is 0)? */
static bool iref_has(struct chk *c, uint64_t ino, uint64_t dir,
		     uint64_t index, const char *name, size_t nl)
{
	struct arb_key k = { ino, ARB_INODE_REF, dir };
	uint32_t max = arb_max_item_size(c->fs->vol);
	int ret = arb_lookup_item(c->tr->root, &k, c->buf, max);
	size_t pos = 0, size;

	if (ret < 0)
		return false;
	size = (size_t)ret;
	while (pos + sizeof(struct arb_inode_ref) <= size) {
		const struct arb_inode_ref *r =
			(const struct arb_inode_ref *)(c->buf + pos);
		size_t l = arb_inode_ref_r_name_len(r);
		if (pos + sizeof(*r) + l > size)
			return false;
		if (l == nl && memcmp(c->buf + pos + sizeof(*r), name, nl) == 0)
			return !index || arb_inode_ref_r_index(r) == index;
		pos += sizeof(*r) + l;
	}
	return false;
}

static void check_inode_ref(struct chk *c, const struct arb_key *k,
			    const uint8_t *d, uint32_t size)
{
	char name[ARB_NAME_MAX + 1];
	size_t pos = 0;

	c->parents++;
	while (pos < size) {
		const struct arb_inode_ref *r;
		size_t nl;
		uint64_t index;

		if (size - pos < sizeof(*r)) {
			problem(c, ARB_PB_BAD_ENTRY, k->objectid,
				"truncated inode ref");
			return;
		}
		r = (const struct arb_inode_ref *)(d + pos);
		nl = arb_inode_ref_r_name_len(r);
		index = arb_inode_ref_r_index(r);
		if (nl == 0 || nl > ARB_NAME_MAX || pos + sizeof(*r) + nl > size) {
			problem(c, ARB_PB_BAD_ENTRY, k->objectid,
				"bad inode ref name length");
			return;
		}
		memcpy(name, d + pos + sizeof(*r), nl);
		name[nl] = 0;
		c->refs++;
		if (c->fast) {
			if (pos && iref_name_before(d, pos, name, nl))
				c->fast_failed = true;
			digest_index(c, 1, k->objectid, k->offset, index, name,
				     nl);
			digest_item(c, 1, k->objectid, k->offset, name, nl);
			pos += sizeof(*r) + nl;
			continue;
		}
		if (!dir_index_matches(c, k->offset, index, k->objectid, name,
				       nl)) {
			bool absent = !dir_index_exists(c, k->offset, index);
			struct arb_problem *p = problem(
				c, absent ? ARB_PB_DIR_INDEX_MISSING
					  : ARB_PB_BAD_ENTRY,
				k->objectid,
				"name '%s' in dir %llu: %s dir index %llu",
				name, (unsigned long long)k->offset,
				absent ? "no" : "another name in", 
				(unsigned long long)index);
			set_name(p, k->offset, index, name);
		}
		if (!dir_item_has(c, k->offset, k->objectid, name, nl)) {
			struct arb_problem *p = problem(
				c, ARB_PB_DIR_ITEM_MISSING, k->objectid,
				"name '%s' in dir %llu: no dir item", name,
				(unsigned long long)k->offset);
			set_name(p, k->offset, index, name);
		}
		pos += sizeof(*r) + nl;
	}
}

/*
 * An out-of-line xattr value: a reference of the right size whose pieces
 * all exist, none empty, adding up to its length.  Remembered for
 * check_xattr_piece.
 */
static void check_xattr_ref(struct chk *c, const struct arb_key *k,
			    const uint8_t *data, size_t dlen, const char *name)
{
	struct arb_xattr_ref r;
	struct arb_key pk;
	uint64_t total = 0;
	uint32_t pieces;
	uint8_t dummy;
	int ret;

	if (dlen != sizeof(r)) {
		problem(c, ARB_PB_BAD_ENTRY, k->objectid,
			"xattr '%s': out-of-line reference of %zu bytes", name,
			dlen);
		return;
	}
	memcpy(&r, data, sizeof(r));
	pieces = arb_xattr_ref_x_pieces(&r);
	if (pieces == 0 || pieces > ARB_XATTR_PIECES_MAX ||
	    arb_xattr_ref_x_len(&r) > ARB_XATTR_SIZE_MAX) {
		problem(c, ARB_PB_BAD_ENTRY, k->objectid,
			"xattr '%s': bad out-of-line reference", name);
		return;
	}
	for (uint32_t i = 0; i < pieces; i++) {
		pk.objectid = k->objectid;
		pk.type = ARB_XATTR_DATA;
		pk.offset = arb_xattr_ref_x_id(&r) + i;
		ret = arb_lookup_item(c->tr->root, &pk, &dummy, 0);
		if (ret <= 0) {
			problem(c, ARB_PB_BAD_ENTRY, k->objectid,
				"xattr '%s': piece %u of %u %s", name, i,
				pieces, ret == 0 ? "empty" : "missing");
			return;
		}
		total += (uint64_t)ret;
	}
	if (total != arb_xattr_ref_x_len(&r))
		problem(c, ARB_PB_BAD_ENTRY, k->objectid,
			"xattr '%s': pieces of %llu bytes for a value of %u",
			name, (unsigned long long)total,
			arb_xattr_ref_x_len(&r));
	if (c->nxrefs == c->xrefs_cap) {
		size_t cap = c->xrefs_cap ? 2 * c->xrefs_cap : 8;
		struct chk_xref *v = realloc(c->xrefs, cap * sizeof(*v));
		if (!v)
			return; /* its pieces will look orphaned */
		c->xrefs = v;
		c->xrefs_cap = cap;
	}
	c->xrefs[c->nxrefs].id = arb_xattr_ref_x_id(&r);
	c->xrefs[c->nxrefs++].pieces = pieces;
}

/* an XATTR_DATA item must be a piece of an attribute of its inode */
static void check_xattr_piece(struct chk *c, const struct arb_key *k)
{
	for (size_t i = 0; i < c->nxrefs; i++)
		if (k->offset >= c->xrefs[i].id &&
		    k->offset - c->xrefs[i].id < c->xrefs[i].pieces)
			return;
	problem(c, ARB_PB_UNEXPECTED, k->objectid,
		"xattr piece %llu of no attribute",
		(unsigned long long)k->offset);
}

/*
 * A subvolume link in this tree.  Live when the subvolume's ROOT_BACKREF
 * from this tree names this directory and name; otherwise a stale copy a
 * snapshot took along (legal: format.h, "Subvolumes").  The root tree's
 * side (every ROOT_REF has its link) is check_subvols.
 */
static void check_subvol_link(struct chk *c, const struct arb_key *k,
			      uint64_t id, const char *name, size_t nl)
{
	uint8_t buf[sizeof(struct arb_root_ref) + ARB_NAME_MAX];
	struct arb_key bk = { id, ARB_ROOT_BACKREF, c->tr->id };
	bool ok;
	int ret;

	(void)name;
	(void)nl;
	(void)arb_inum_slot(id, &ok);
	if (!ok || id == ARB_FS_TREE_ID) {
		problem(c, ARB_PB_SUBVOL_LINK, k->objectid,
			"subvolume link to tree %llu, which no subvolume "
			"can have",
			(unsigned long long)id);
		return;
	}
	ret = arb_lookup_item(c->fs->vol->tree_root, &bk, buf, sizeof(buf));
	if (ret >= 0 && ret < (int)sizeof(struct arb_root_ref))
		problem(c, ARB_PB_SUBVOL_LINK, k->objectid,
			"subvolume link -> %llu: bad ROOT_BACKREF",
			(unsigned long long)id);
}

static void check_dir_entries(struct chk *c, const struct arb_key *k,
			      const uint8_t *d, uint32_t size)
{
	char name[ARB_NAME_MAX + 1];
	size_t pos = 0;
	unsigned n = 0;

	while (pos < size) {
		const struct arb_dir_entry *e;
		size_t nl, el;
		uint64_t child;

		if (size - pos < sizeof(*e)) {
			problem(c, ARB_PB_BAD_ENTRY, k->objectid,
				"truncated entry");
			return;
		}
		e = (const struct arb_dir_entry *)(d + pos);
		nl = arb_dir_entry_d_name_len(e);
		el = fs_dent_size(nl, arb_dir_entry_d_data_len(e));
		if (nl == 0 || nl > ARB_NAME_MAX || el > size - pos) {
			problem(c, ARB_PB_BAD_ENTRY, k->objectid,
				"bad entry length");
			return;
		}
		memcpy(name, d + pos + sizeof(*e), nl);
		name[nl] = 0;
		child = arb_dir_entry_d_ino(e);
		n++;
		if (k->type != ARB_DIR_INDEX &&
		    arb_name_hash(name, nl) != k->offset)
			problem(c, ARB_PB_BAD_ENTRY, k->objectid,
				"entry '%s' under wrong hash",
				name);
		if (k->type == ARB_XATTR_ITEM &&
		    arb_dir_entry_d_type(e) == ARB_XATTR_OUT_OF_LINE)
			check_xattr_ref(c, k, d + pos + sizeof(*e) + nl,
					arb_dir_entry_d_data_len(e), name);
		if (k->type != ARB_XATTR_ITEM &&
		    (arb_dir_entry_d_type(e) & ARB_DENT_SUBVOL)) {
			/* a subvolume link: no inode of this tree; its root's
			 * ".." counts as a subdirectory (fs_dent_add) */
			if (k->type == ARB_DIR_INDEX) {
				c->name_bytes += nl;
				if (k->offset > c->max_index)
					c->max_index = k->offset;
				c->subdirs++;
			}
			check_subvol_link(c, k, child, name, nl);
			pos += el;
			continue;
		}
		if (c->fast && k->type == ARB_DIR_INDEX)
			digest_index(c, -1, child, k->objectid, k->offset,
				     name, nl);
		if (c->fast && k->type == ARB_DIR_ITEM) {
			if (pos && dent_name_before(d, pos, name, nl))
				c->fast_failed = true;
			digest_item(c, -1, child, k->objectid, name, nl);
		}
		if (k->type == ARB_DIR_INDEX) {
			c->name_bytes += nl;
			if (k->offset > c->max_index)
				c->max_index = k->offset;
			if (arb_dir_entry_d_type(e) == (S_IFDIR >> 12))
				c->subdirs++;
			if (!c->fast &&
			    !iref_has(c, child, k->objectid, k->offset, name,
				      nl)) {
				bool gone = !inode_exists(c, child);
				struct arb_problem *p = problem(
					c,
					gone ? ARB_PB_DANGLING
					     : ARB_PB_INODE_REF_MISSING,
					k->objectid,
					"dir index %llu '%s' -> %llu: %s",
					(unsigned long long)k->offset, name,
					(unsigned long long)child,
					gone ? "no such inode"
					     : "child does not name it");
				set_name(p, k->objectid, k->offset, name);
				p->ino = child;
				p->type = ARB_DIR_INDEX;
			}
		} else if (k->type == ARB_DIR_ITEM && !c->fast) {
			/* a missing INODE_REF is raised (with its index) by
			 * the DIR_INDEX; here only what that cannot see */
			if (!iref_has(c, child, k->objectid, 0, name, nl) &&
			    !inode_exists(c, child)) {
				struct arb_problem *p = problem(
					c, ARB_PB_DANGLING, k->objectid,
					"dir item '%s' -> %llu: no such inode",
					name, (unsigned long long)child);
				set_name(p, k->objectid, 0, name);
				p->ino = child;
				p->type = ARB_DIR_ITEM;
			} else if (!iref_has(c, child, k->objectid, 0, name,
					     nl)) {
				/* index 0: rebuilt from the DIR_INDEX, which
				 * raises its own record with the index */
				struct arb_problem *p = problem(
					c, ARB_PB_INODE_REF_MISSING,
					k->objectid,
					"dir item '%s' -> %llu: child does not "
					"name it",
					name, (unsigned long long)child);
				set_name(p, k->objectid, 0, name);
				p->ino = child;
			}
		}
		pos += el;
	}
	if (k->type == ARB_DIR_INDEX && n != 1)
		problem(c, ARB_PB_BAD_ENTRY, k->objectid,
			"dir index %llu holds %u entries",
			(unsigned long long)k->offset, n);
	if (k->type != ARB_XATTR_ITEM && !S_ISDIR(c->in.mode))
		problem(c, ARB_PB_BAD_ENTRY, k->objectid,
			"directory entries in a non-directory");
}

/* what format.h says of a compressed extent that one item can show */
static void check_zextent(struct chk *c, const struct arb_key *k,
			  const struct arb_file_extent *fe)
{
	uint64_t ram = arb_file_extent_f_ram_bytes(fe);
	uint64_t disk = arb_file_extent_f_disk_num_bytes(fe);

	if (!(arb_super_s_incompat(&c->fs->vol->super) & ARB_INCOMPAT_COMPRESS))
		problem(c, ARB_PB_FILE_EXTENT, k->objectid,
			"extent at %llu is compressed, but the superblock "
			"does not say compression is used",
			(unsigned long long)k->offset);
	if (!ram || ram > ARB_COMPRESS_MAX_RAM || ram % c->fs->bs ||
	    !disk || disk >= ram || disk % c->fs->bs)
		problem(c, ARB_PB_FILE_EXTENT, k->objectid,
			"compressed extent at %llu: %llu bytes stored in "
			"%llu",
			(unsigned long long)k->offset,
			(unsigned long long)ram, (unsigned long long)disk);
}

/* a compressed inline extent: a regular file's, of at most a sector,
 * whose stream inflates to its length */
static void check_zinline(struct chk *c, const struct arb_key *k,
			  const uint8_t *d, uint32_t size)
{
	const struct arb_file_extent *fe = (const struct arb_file_extent *)d;
	uint64_t ram = arb_file_extent_f_ram_bytes(fe);
	uint8_t *buf;

	if (!(arb_super_s_incompat(&c->fs->vol->super) & ARB_INCOMPAT_COMPRESS))
		problem(c, ARB_PB_FILE_EXTENT, k->objectid,
			"inline extent is compressed, but the superblock "
			"does not say compression is used");
	if (!S_ISREG(c->in.mode) || ram > c->fs->bs || ram == 0) {
		problem(c, ARB_PB_FILE_EXTENT, k->objectid,
			"compressed inline extent of %llu bytes in a %s",
			(unsigned long long)ram,
			S_ISREG(c->in.mode) ? "file" : "non-file");
		return;
	}
	buf = malloc(ram);
	if (!buf)
		return; /* a sector: not checked rather than a false report */
	if (fs_z_decompress(d + ARB_FILE_EXTENT_INLINE_HDR,
			    size - ARB_FILE_EXTENT_INLINE_HDR, buf, ram))
		problem(c, ARB_PB_FILE_EXTENT, k->objectid,
			"compressed inline extent does not inflate to its "
			"%llu bytes", (unsigned long long)ram);
	free(buf);
}

static void check_extent(struct chk *c, const struct arb_key *k,
			 const uint8_t *d, uint32_t size)
{
	const struct arb_file_extent *fe = (const struct arb_file_extent *)d;
	uint64_t len;
	uint8_t type, comp;

	if (size < ARB_FILE_EXTENT_INLINE_HDR) {
		problem(c, ARB_PB_FILE_EXTENT, k->objectid, "short extent item at %llu",
			(unsigned long long)k->offset);
		return;
	}
	type = arb_file_extent_f_type(fe);
	comp = arb_file_extent_f_compression(fe);
	if (comp && (comp != ARB_COMPRESS_ZLIB ||
		     type == ARB_FILE_EXTENT_PREALLOC))
		problem(c, ARB_PB_FILE_EXTENT, k->objectid,
			"extent at %llu is compressed (method %u, type %u), "
			"which this version cannot read (reads of it fail)",
			(unsigned long long)k->offset, comp, type);
	if (k->offset < c->ext_end)
		problem(c, ARB_PB_FILE_OVERLAP, k->objectid,
			"extent at %llu overlaps the previous",
			(unsigned long long)k->offset);
	if (type == ARB_FILE_EXTENT_INLINE) {
		len = arb_file_extent_inline_len(fe, size);
		if (k->offset != 0)
			problem(c, ARB_PB_FILE_EXTENT, k->objectid, "inline extent at %llu",
				(unsigned long long)k->offset);
		if (comp == ARB_COMPRESS_ZLIB)
			check_zinline(c, k, d, size);
		else if (arb_file_extent_f_ram_bytes(fe) != len)
			problem(c, ARB_PB_FILE_EXTENT, k->objectid, "inline extent length mismatch");
		c->inline_seen = true;
	} else if (type == ARB_FILE_EXTENT_REG ||
		   type == ARB_FILE_EXTENT_PREALLOC) {
		if (size < sizeof(*fe)) {
			problem(c, ARB_PB_FILE_EXTENT, k->objectid, "short extent item at %llu",
				(unsigned long long)k->offset);
			return;
		}
		len = arb_file_extent_f_num_bytes(fe);
		if (!len || !arb_file_extent_f_disk_bytenr(fe) ||
		    arb_file_extent_f_offset(fe) + len >
			    (comp ? arb_file_extent_f_ram_bytes(fe)
				  : arb_file_extent_f_disk_num_bytes(fe)))
			problem(c, ARB_PB_FILE_EXTENT, k->objectid, "bad extent at %llu",
				(unsigned long long)k->offset);
		if (comp == ARB_COMPRESS_ZLIB)
			check_zextent(c, k, fe);
		if (k->offset % c->fs->bs || len % c->fs->bs)
			problem(c, ARB_PB_FILE_EXTENT, k->objectid, "unaligned extent at %llu",
				(unsigned long long)k->offset);
	} else {
		problem(c, ARB_PB_FILE_EXTENT, k->objectid, "unknown extent type %u at %llu", type,
			(unsigned long long)k->offset);
		return;
	}
	if (S_ISLNK(c->in.mode) && type != ARB_FILE_EXTENT_INLINE)
		problem(c, ARB_PB_FILE_EXTENT, k->objectid, "symlink with a regular extent");
	else if (!S_ISREG(c->in.mode) && !S_ISLNK(c->in.mode))
		problem(c, ARB_PB_FILE_EXTENT, k->objectid, "file extent in a non-file");
	c->ext_end = k->offset + len;
	c->ext_bytes += len;
}

/*
 * New inode numbers start above the root item's r_highest_objectid, and
 * above the highest inode present only when that is higher: an inode
 * above the recorded value means the value is stale, and a number freed
 * since could come back.  Raised once, for the highest inode.
 */
static void check_highest(struct chk *c)
{
	uint64_t highest = arb_root_highest_objectid(c->tr->root);
	struct arb_problem *p;

	if (!highest || c->max_ino <= highest)
		return;
	p = problem(c, ARB_PB_HIGHEST_INO, c->max_ino,
		    "above the tree's highest objectid %llu",
		    (unsigned long long)highest);
	p->expect = c->max_ino;
}

/* progress by inode number, now and then (every 256 inodes) */
static void progress(struct chk *c, uint64_t ino)
{
	uint64_t total = c->tr->next_ino;

	if (!c->fs->opts.check_progress || (ino & 255))
		return;
	c->fs->opts.check_progress(c->fs->opts.check_progress_arg,
				   c->fast ? "fs tree" : "fs tree, names",
				   ino < total ? ino : total, total,
				   (c->res ? c->res->items : 0) + c->items);
}

/* one pass over the fs tree in key order; the first stops at a problem */
static int tree_pass(struct chk *c)
{
	struct arb_fs *fs = c->fs;
	struct arb_key key = { 0, 0, 0 }, k;
	struct arb_iter it;
	int ret;

	(void)fs;
	arb_iter_init(&it, c->tr->root);
	ret = arb_iter_seek(&it, &key);
	while (ret == 0 && !c->fast_failed) {
		const uint8_t *d = arb_iter_data(&it);
		uint32_t size = arb_iter_size(&it);

		arb_iter_key(&it, &k);
		c->items++;
		if (k.objectid != c->ino) {
			progress(c, k.objectid);
			finish_inode(c);
			c->ino = k.objectid;
			c->refs = c->parents = c->subdirs = c->name_bytes = 0;
			c->max_index = c->ext_end = c->ext_bytes = 0;
			c->inline_seen = false;
			c->nxrefs = 0;
		}
		if (k.objectid == ARB_ORPHAN_OBJECTID) {
			struct arb_inode oin;
			int oret;
			if (k.type != ARB_ORPHAN_ITEM)
				problem(c, ARB_PB_UNEXPECTED, k.objectid,
					"unknown item type %u",
					k.type);
			else if ((oret = fs_inode_read(fs,
							 fs_ino(c->tr, k.offset),
							 &oin)) == 0 &&
				 oin.nlink != 0)
				problem(c, ARB_PB_ORPHAN, k.offset,
					"orphan item for a linked inode");
			else if (oret == -ENOENT)
				problem(c, ARB_PB_ORPHAN, k.offset,
					"orphan item for a missing inode");
		} else if (k.type == ARB_INODE_ITEM) {
			if (size < sizeof(struct arb_inode_item)) {
				problem(c, ARB_PB_BAD_ENTRY, k.objectid,
					"short inode item");
			} else {
				fs_inode_unpack(&c->in, k.objectid,
						(const struct arb_inode_item *)d);
				c->have_inode = true;
				if (k.objectid > c->max_ino)
					c->max_ino = k.objectid;
			}
		} else if (!c->have_inode) {
			problem(c, ARB_PB_NO_INODE, k.objectid,
				"%s item without an inode",
				arb_item_type_name(k.type));
		} else {
			switch (k.type) {
			case ARB_INODE_REF:
				check_inode_ref(c, &k, d, size);
				break;
			case ARB_DIR_ITEM:
			case ARB_DIR_INDEX:
			case ARB_XATTR_ITEM:
				check_dir_entries(c, &k, d, size);
				break;
			case ARB_EXTENT_DATA:
				check_extent(c, &k, d, size);
				break;
			case ARB_XATTR_DATA:
				check_xattr_piece(c, &k);
				break;
			default:
				problem(c, ARB_PB_UNEXPECTED, k.objectid,
					"unexpected item type %u",
					k.type);
			}
		}
		ret = arb_iter_next(&it);
	}
	arb_iter_release(&it);
	if (ret >= 0 && !c->fast_failed) {
		finish_inode(c);
		check_highest(c);
		ret = 0;
	}
	return ret < 0 ? ret : 0;
}

static void draw_seeds(uint64_t seed[2])
{
	if (getrandom(seed, 2 * sizeof(*seed), GRND_NONBLOCK) !=
	    (ssize_t)(2 * sizeof(*seed))) {
		seed[0] = (uint64_t)time(NULL) ^ (uint64_t)getpid() << 32;
		seed[1] = mix64(seed[0] ^ (uintptr_t)seed);
	}
}

static int check_one_tree(struct arb_fs *fs, struct fs_tree *tr, FILE *out,
			  uint64_t *errors, struct arb_check_result *res)
{
	struct chk c;
	int ret;

	memset(&c, 0, sizeof(c));
	c.fs = fs;
	c.tr = tr;
	c.out = out;
	c.res = res;
	c.buf = malloc(arb_max_item_size(fs->vol));
	if (!c.buf)
		return -ENOMEM;
	/* the first pass: names against their entries by sums */
	draw_seeds(c.seed);
	c.fast = true;
	ret = tree_pass(&c);
	if (!ret && !c.fast_failed && !c.sum_index && !c.sum_item)
		goto out;
	/* something is off: again, with the lookups, for the records */
	{
		uint8_t *buf = c.buf;
		struct chk_xref *xrefs = c.xrefs;
		size_t cap = c.xrefs_cap;

		memset(&c, 0, sizeof(c));
		c.fs = fs;
		c.tr = tr;
		c.out = out;
		c.res = res;
		c.buf = buf;
		c.xrefs = xrefs;
		c.xrefs_cap = cap;
	}
	ret = tree_pass(&c);
out:
	if (res)
		res->items += c.items;
	free(c.buf);
	free(c.xrefs);
	*errors += c.errors;
	return ret < 0 ? ret : (c.errors ? -EUCLEAN : 0);
}

/* ---- subvolumes: the root tree's side ---------------------------------- */

__attribute__((format(printf, 5, 6))) static void
sv_problem(FILE *out, uint64_t *errors, struct arb_check_result *res,
	   uint64_t id, const char *fmt, ...)
{
	struct arb_problem *p = fs_problem_add(res, ARB_PB_SUBVOL_LINK, 0);
	char detail[sizeof(p->detail)];
	int n;
	va_list ap;

	n = snprintf(detail, sizeof(detail), "subvolume %llu: ",
		     (unsigned long long)id);
	va_start(ap, fmt);
	vsnprintf(detail + n, sizeof(detail) - (size_t)n, fmt, ap);
	va_end(ap);
	(*errors)++;
	if (p) {
		memcpy(p->detail, detail, sizeof(detail));
		if (out)
			fs_problem_print(out, p);
	} else if (out) {
		fprintf(out, "subvolume-link: %s\n", detail);
	}
}

/*
 * Subvolume id (a ROOT_ITEM from 256): linked (its ROOT_BACKREF has the
 * twin ROOT_REF and a live entry in the parent's directory) or being
 * deleted (an orphan item), and its SUBVOL_ITEM valid.  *linked: check
 * its tree's namespace.
 */
static int check_subvol(struct arb_fs *fs, uint64_t id, FILE *out,
			uint64_t *errors, struct arb_check_result *res,
			bool *live)
{
	uint8_t buf[sizeof(struct arb_root_ref) + ARB_NAME_MAX];
	uint8_t twin[sizeof(struct arb_root_ref) + ARB_NAME_MAX];
	const struct arb_root_ref *rr = (const void *)buf;
	struct arb_key k = { ARB_ORPHAN_OBJECTID, ARB_ORPHAN_ITEM, id };
	struct arb_root *troot = fs->vol->tree_root;
	struct arb_subvol_item si;
	struct fs_tree *ptr;
	struct arb_iter it;
	uint64_t parent, ino, seq;
	const char *why;
	int ret, n, m;

	*live = false;
	{
		/* a kept digest: well formed, announced by its feature bit */
		struct arb_digest_item di;

		k = (struct arb_key){ id, ARB_DIGEST_ITEM, 0 };
		ret = arb_lookup_item(troot, &k, &di, sizeof(di));
		if (ret >= 0 && arb_item_validate(&k, (const uint8_t *)&di,
						  (uint32_t)ret, &why) < 0)
			sv_problem(out, errors, res, id, "DIGEST_ITEM: %s", why);
		else if (ret >= 0 && !(arb_super_s_incompat(&fs->vol->super) &
				       ARB_INCOMPAT_DIGEST))
			sv_problem(out, errors, res, id,
				   "a kept digest, but the image does not say it holds one (incompat bit 6)");
		else if (ret < 0 && ret != -ENOENT)
			return ret;
	}
	k = (struct arb_key){ id, ARB_SUBVOL_ITEM, 0 };
	ret = arb_lookup_item(troot, &k, &si, sizeof(si));
	if (ret >= 0 && arb_item_validate(&k, (const uint8_t *)&si,
					  (uint32_t)ret, &why) < 0)
		sv_problem(out, errors, res, id, "SUBVOL_ITEM: %s", why);
	else if (ret < 0 && ret != -ENOENT)
		return ret;
	k = (struct arb_key){ ARB_ORPHAN_OBJECTID, ARB_ORPHAN_ITEM, id };
	if (ret == (int)sizeof(si) &&
	    (arb_subvol_item_s_flags(&si) & ARB_SUBVOL_F_PARTIAL)) {
		/* a partial receive: unlinked (orphaned) until resumed, and
		 * announced by its feature bit */
		if (!fs_item_exists(troot, &k))
			sv_problem(out, errors, res, id,
				   "a partial receive without its orphan item");
		if (!(arb_super_s_incompat(&fs->vol->super) &
		      ARB_INCOMPAT_PARTIAL_RECEIVE))
			sv_problem(out, errors, res, id,
				   "a partial receive, but the image does not say it holds one (incompat bit 5)");
		return 0;
	}
	if (fs_item_exists(troot, &k))
		return 0; /* deleted: the cleaner drops it */
	/* its link: the first ROOT_BACKREF (a subvolume has one) */
	k = (struct arb_key){ id, ARB_ROOT_BACKREF, 0 };
	arb_iter_init(&it, troot);
	ret = arb_iter_seek(&it, &k);
	n = 0;
	if (ret == 0) {
		arb_iter_key(&it, &k);
		if (k.objectid != id || k.type != ARB_ROOT_BACKREF) {
			ret = 1;
		} else if (arb_iter_size(&it) > sizeof(buf)) {
			ret = 2;
		} else {
			n = (int)arb_iter_size(&it);
			memcpy(buf, arb_iter_data(&it), (size_t)n);
		}
	}
	arb_iter_release(&it);
	if (ret < 0)
		return ret;
	if (ret == 1) {
		sv_problem(out, errors, res, id,
			   "not linked anywhere and not being deleted (its "
			   "space is lost)");
		return 0;
	}
	if (ret == 2 || arb_item_validate(&k, buf, (uint32_t)n, &why) < 0) {
		sv_problem(out, errors, res, id, "bad ROOT_BACKREF");
		return 0;
	}
	parent = k.offset;
	k = (struct arb_key){ parent, ARB_ROOT_REF, id };
	m = arb_lookup_item(troot, &k, twin, sizeof(twin));
	if (m != n || memcmp(twin, buf, (size_t)n)) {
		sv_problem(out, errors, res, id,
			   "ROOT_REF from tree %llu %s its ROOT_BACKREF",
			   (unsigned long long)parent,
			   m < 0 ? "missing for" : "differs from");
		return m < 0 && m != -ENOENT ? m : 0;
	}
	/* the parent's directory holds the link at that name and index */
	ret = fs_tree_open(fs, parent, &ptr);
	if (ret == 0) {
		ret = fs_dir_find(fs, fs_ino(ptr, arb_root_ref_rr_dirid(rr)),
				  (const char *)buf + sizeof(*rr),
				  arb_root_ref_rr_name_len(rr), &ino, &seq,
				  NULL);
		if (ret == 0 && (arb_inum_tree(ino) != id ||
				 arb_inum_obj(ino) != ARB_FIRST_INO ||
				 seq != arb_root_ref_rr_sequence(rr)))
			ret = -ESTALE;
	}
	if (ret == -ENOMEM || ret == -EIO)
		return ret;
	if (ret) {
		sv_problem(out, errors, res, id,
			   "its link '%.*s' in directory %llu of tree %llu "
			   "is missing or differs",
			   (int)arb_root_ref_rr_name_len(rr),
			   (const char *)buf + sizeof(*rr),
			   (unsigned long long)arb_root_ref_rr_dirid(rr),
			   (unsigned long long)parent);
		return 0;
	}
	*live = true;
	return 0;
}

/* tree 5's SUBVOL_ITEM names as the default subvolume 5 or a live one */
static int check_default(struct arb_fs *fs, FILE *out, uint64_t *errors,
			 struct arb_check_result *res)
{
	struct arb_key k = { ARB_FS_TREE_ID, ARB_SUBVOL_ITEM, 0 };
	struct arb_root *troot = fs->vol->tree_root;
	struct arb_subvol_item si;
	uint64_t def;
	int ret;

	ret = arb_lookup_item(troot, &k, &si, sizeof(si));
	if (ret == -ENOENT)
		return 0;
	if (ret < 0)
		return ret;
	if (ret != (int)sizeof(si))
		return 0; /* a newer format: the item's check says so */
	def = arb_subvol_item_s_default_id(&si);
	if (!def || def == ARB_FS_TREE_ID)
		return 0;
	k = (struct arb_key){ def, ARB_ROOT_ITEM, 0 };
	if (!fs_item_exists(troot, &k))
		sv_problem(out, errors, res, ARB_FS_TREE_ID,
			   "the default subvolume %llu does not exist",
			   (unsigned long long)def);
	k = (struct arb_key){ ARB_ORPHAN_OBJECTID, ARB_ORPHAN_ITEM, def };
	if (fs_item_exists(troot, &k))
		sv_problem(out, errors, res, ARB_FS_TREE_ID,
			   "the default subvolume %llu is being deleted",
			   (unsigned long long)def);
	return 0;
}

int fs_check_tree(struct arb_fs *fs, FILE *out, uint64_t *errors,
		  struct arb_check_result *res)
{
	struct arb_key k;
	struct arb_iter it;
	struct fs_tree *tr;
	uint64_t id = ARB_FIRST_SUBVOL_ID;
	bool live;
	int ret, ret2;

	ret = check_one_tree(fs, fs_tree0(fs), out, errors, res);
	if (ret && ret != -EUCLEAN)
		return ret;
	/* every subvolume tree: its link, then its namespace */
	for (;;) {
		k = (struct arb_key){ id, ARB_ROOT_ITEM, 0 };
		arb_iter_init(&it, fs->vol->tree_root);
		ret2 = arb_iter_seek(&it, &k);
		while (ret2 == 0) {
			arb_iter_key(&it, &k);
			if (k.type == ARB_ROOT_ITEM)
				break;
			ret2 = arb_iter_next(&it);
		}
		arb_iter_release(&it);
		if (ret2 < 0)
			return ret2;
		if (ret2 == 1 || k.objectid >= ARB_ORPHAN_OBJECTID - 16)
			break;
		id = k.objectid;
		ret2 = check_subvol(fs, id, out, errors, res, &live);
		if (ret2)
			return ret2;
		if (live) {
			ret2 = fs_tree_open(fs, id, &tr);
			if (!ret2)
				ret2 = check_one_tree(fs, tr, out, errors,
						      res);
			if (ret2 == -EUCLEAN)
				ret = ret2;
			else if (ret2)
				return ret2;
		}
		id++;
	}
	ret2 = check_default(fs, out, errors, res);
	if (ret2)
		return ret2;
	return ret ? ret : (*errors ? -EUCLEAN : 0);
}

/* the whole check: the core's structure, then the fs trees */
int arb_fs_check(struct arb_fs *fs, FILE *out)
{
	struct arb_check_report rep;
	uint64_t errors = 0;
	int ret, ret2;

	memset(&rep, 0, sizeof(rep));
	rep.out = out;
	fs_lock(fs);
	ret = arb_check_vol(fs->vol, &rep);
	ret2 = fs_check_tree(fs, out, &errors, NULL);
	fs_unlock(fs);
	if (ret && ret != -EUCLEAN)
		return ret;
	if (ret2 && ret2 != -EUCLEAN)
		return ret2;
	return (ret || ret2 || errors) ? -EUCLEAN : 0;
}
