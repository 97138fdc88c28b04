/* SPDX-License-Identifier: MIT */
/*
 * scrub.c - read every tree node and every data block of the image and
 * verify it against its checksum.
 *
 * The walk follows the extent tree in address order, so it covers exactly
 * what is allocated, once, whichever trees share it.  For a tree node it
 * reads the block from the device (not from the node cache: the point is
 * what the disk holds) and validates it as a read would, plus the
 * generation its extent item recorded.  For a data extent it reads the
 * sectors in chunks and compares each with its EXTENT_CSUM entry; a
 * mismatch or a read error is resolved through the extent's back-references
 * (EXTENT_DATA_REF: tree, inode, file offset) and the inode's INODE_REF
 * chain into the paths of the affected files.
 *
 * Concurrency: the volume lock is taken for one step (one node, or one
 * chunk of at most ARB_SCRUB_CHUNK bytes of one data extent) and released
 * in between, so the filesystem stays usable while a scrub runs.  Each step
 * starts from the extent tree as it is then: an extent freed meanwhile is
 * skipped, one allocated by the running transaction (not on disk yet) is
 * left for the next scrub.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs_int.h"

#define ARB_SCRUB_CHUNK (1024 * 1024)
/* how many affected files one bad extent reports at most */
#define SCRUB_MAX_OWNERS 16
/* deepest directory chain a path walk follows (hostile images loop) */
#define SCRUB_MAX_DEPTH 512

struct scrub {
	struct arb_fs *fs;
	struct arb_scrub_stats *st;
	arb_scrub_report_fn report;
	void *arg;
	uint8_t *buf;
	/* inodes reported so far: files_affected counts each once (it
	 * counted every bad sector of every file: 22,432 for 4,707 files) */
	struct arb_idcount files;
};

static void say(struct scrub *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void say(struct scrub *s, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	if (!s->report)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	s->report(s->arg, line);
}

/* prepend "/name" (n bytes) to the len bytes at tmp */
static int prepend(char *tmp, size_t *len, size_t size, const char *name,
		   size_t n)
{
	if (*len + n + 1 >= size)
		return -ENAMETOOLONG;
	memmove(tmp + n + 1, tmp, *len);
	tmp[0] = '/';
	memcpy(tmp + 1, name, n);
	*len += n + 1;
	return 0;
}

/*
 * The path of ino from the filesystem's root directory (tree 5's),
 * through its first INODE_REF at each level and, at the root of a
 * subvolume, the subvolume's link, into buf.  Returns 0, or a negative
 * errno (the inode is gone or its chain is broken: buf then names what
 * was found).  Lock held.
 */
int fs_ino_path(struct arb_fs *fs, uint64_t ino, char *buf, size_t size)
{
	char *tmp, name[ARB_NAME_MAX + 1];
	size_t len = 0;
	int depth, ret = 0;

	if (size < 2)
		return -ERANGE;
	tmp = malloc(size);
	if (!tmp)
		return -ENOMEM;
	for (depth = 0; ino != ARB_ROOT_INO && depth < SCRUB_MAX_DEPTH;
	     depth++) {
		struct arb_key k = { fs_obj(ino), ARB_INODE_REF, 0 }, fk;
		const struct arb_inode_ref *r;
		struct fs_tree *tr;
		struct arb_iter it;
		uint16_t n;

		if (!fs_ino_valid(fs, ino)) {
			ret = fs_tree_open_ino(fs, ino);
			if (ret)
				break;
		}
		tr = fs_tree_of(fs, ino);
		if (fs_obj(ino) == ARB_FIRST_INO) {
			/* a subvolume's root: its link in the parent */
			ret = fs_subvol_link(fs, tr, &ino, name);
			if (!ret)
				ret = prepend(tmp, &len, size, name,
					      strlen(name));
			if (ret)
				break;
			continue;
		}
		arb_iter_init(&it, tr->root);
		ret = arb_iter_seek(&it, &k);
		if (ret == 0) {
			arb_iter_key(&it, &fk);
			if (fk.objectid != fs_obj(ino) ||
			    fk.type != ARB_INODE_REF)
				ret = -ENOENT;
		} else if (ret == 1) {
			ret = -ENOENT;
		}
		if (ret) {
			arb_iter_release(&it);
			break;
		}
		r = arb_iter_data(&it);
		n = arb_iter_size(&it) >= sizeof(*r) ? arb_inode_ref_r_name_len(r)
						     : 0;
		if (n == 0 || n > arb_iter_size(&it) - sizeof(*r)) {
			arb_iter_release(&it);
			ret = -EUCLEAN;
			break;
		}
		ret = prepend(tmp, &len, size, (const char *)(r + 1), n);
		arb_iter_release(&it);
		if (ret)
			break;
		ino = fs_ino(tr, fk.offset);
	}
	if (!ret && ino != ARB_ROOT_INO)
		ret = -ELOOP;
	if (ret) {
		snprintf(buf, size, "<inode %" PRIu64 ", path unknown: %s>", ino,
			 strerror(-ret));
	} else if (len == 0) {
		snprintf(buf, size, "/");
	} else {
		memcpy(buf, tmp, len);
		buf[len] = 0;
	}
	free(tmp);
	return ret;
}

/*
 * Does fs tree tr hold a file extent item of objectid obj at file
 * offset off that points into data extent bytenr?  (A snapshot shares
 * the leaves of its source, so a data back-reference names only the tree
 * that first wrote it: the others are found this way.)
 */
static bool tree_uses(struct fs_tree *tr, uint64_t obj, uint64_t off,
		      uint64_t bytenr)
{
	struct arb_key k = { obj, ARB_EXTENT_DATA, off };
	struct arb_iter it;
	bool yes = false;
	int ret;

	arb_iter_init(&it, tr->root);
	ret = arb_iter_seek_le(&it, &k);
	if (ret == 0) {
		const struct arb_file_extent *fe = arb_iter_data(&it);

		arb_iter_key(&it, &k);
		yes = k.objectid == obj && k.type == ARB_EXTENT_DATA &&
		      arb_iter_size(&it) >= sizeof(*fe) &&
		      arb_file_extent_f_type(fe) != ARB_FILE_EXTENT_INLINE &&
		      arb_file_extent_f_disk_bytenr(fe) == bytenr;
	}
	arb_iter_release(&it);
	return yes;
}

/* the first fs tree (5, or a subvolume's not being deleted) at or after
 * id: 0, or 1 when there is none */
static int next_fs_tree(struct arb_fs *fs, uint64_t id, uint64_t *out)
{
	struct arb_key k = { id, ARB_ROOT_ITEM, 0 };
	struct arb_iter it;
	int ret;

	for (;;) {
		arb_iter_init(&it, fs->vol->tree_root);
		ret = arb_iter_seek(&it, &k);
		while (ret == 0) {
			arb_iter_key(&it, &k);
			if (k.type == ARB_ROOT_ITEM &&
			    (k.objectid == ARB_FS_TREE_ID ||
			     k.objectid >= ARB_FIRST_SUBVOL_ID))
				break;
			ret = arb_iter_next(&it);
		}
		arb_iter_release(&it);
		if (ret || k.objectid >= ARB_ORPHAN_OBJECTID - 16)
			return 1;
		struct arb_key ok = { ARB_ORPHAN_OBJECTID, ARB_ORPHAN_ITEM,
				      k.objectid };
		if (k.objectid == ARB_FS_TREE_ID ||
		    !fs_item_exists(fs->vol->tree_root, &ok)) {
			*out = k.objectid;
			return 0;
		}
		k = (struct arb_key){ k.objectid + 1, ARB_ROOT_ITEM, 0 };
	}
}

/* report the files that use data extent bytenr around disk address bad */
static void report_owners(struct scrub *s, uint64_t bytenr, uint64_t bad,
			  const char *what)
{
	struct arb_key k = { bytenr, ARB_EXTENT_DATA_REF, 0 }, fk;
	struct {
		uint64_t root, obj, off;
	} refs[SCRUB_MAX_OWNERS];
	uint64_t id, next, seen[SCRUB_MAX_OWNERS];
	struct arb_iter it;
	char path[1024];
	int ret, n = 0, nrefs = 0, nseen = 0, i, j;

	arb_iter_init(&it, s->fs->vol->extent_root);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		const struct arb_extent_data_ref *r = arb_iter_data(&it);

		arb_iter_key(&it, &fk);
		if (fk.objectid != bytenr || fk.type != ARB_EXTENT_DATA_REF)
			break;
		if (arb_iter_size(&it) < sizeof(*r))
			continue;
		if (nrefs == SCRUB_MAX_OWNERS)
			break;
		refs[nrefs].root = arb_extent_data_ref_d_root(r);
		refs[nrefs].obj = arb_extent_data_ref_d_objectid(r);
		refs[nrefs++].off = arb_extent_data_ref_d_offset(r) +
				    (bad - bytenr);
	}
	arb_iter_release(&it);
	/* every tree that uses the block: the owner each back-reference
	 * names, and the subvolumes that share its leaves */
	for (i = 0; i < nrefs; i++) {
		for (id = ARB_FS_TREE_ID;; id = next + 1) {
			struct fs_tree *tr;
			uint64_t ino;

			if (next_fs_tree(s->fs, id, &next))
				break;
			if (fs_tree_open(s->fs, next, &tr) ||
			    (next != refs[i].root &&
			     !tree_uses(tr, refs[i].obj, refs[i].off, bytenr)))
				continue;
			ino = fs_ino(tr, refs[i].obj);
			/* once per file: back-references of several trees
			 * name the same one (pushed down from a shared leaf) */
			for (j = 0; j < nseen && seen[j] != ino; j++)
				;
			if (j < nseen)
				continue;
			if (nseen < SCRUB_MAX_OWNERS)
				seen[nseen++] = ino;
			if (++n > SCRUB_MAX_OWNERS) {
				say(s, "  ... more files use extent %" PRIu64,
				    bytenr);
				return;
			}
			fs_ino_path(s->fs, ino, path, sizeof(path));
			say(s, "%s: %s (inode %" PRIu64 ", file offset %" PRIu64
			       ", disk address %" PRIu64 ")",
			    what, path, ino, refs[i].off, bad);
			/* -ENOMEM: counted again later, never lost */
			if (arb_idcount_add(&s->files, ino, 1) != 0)
				s->st->files_affected++;
		}
	}
	if (n == 0)
		say(s, "%s: disk address %" PRIu64 " (extent %" PRIu64
		       ", no file references it)",
		    what, bad, bytenr);
}

/* read and validate one copy of node bytenr at addr into buf */
static int node_copy_ok(struct scrub *s, uint8_t *buf, uint64_t addr,
			uint64_t bytenr, uint64_t gen, int level,
			const char **why)
{
	int ret = arb_node_read_copy(s->fs->vol, buf, addr, bytenr, gen, level,
				     why);
	if (ret == -EIO || (ret && ret != -EUCLEAN)) {
		s->st->read_errors++;
		*why = "read error";
	} else if (ret) {
		s->st->csum_errors++;
	}
	return ret;
}

/*
 * One tree node: every copy read from the device and validated as a read
 * would (checksum, address, generation and level its extent item records).
 * A bad copy is rewritten from a good one (not on a read-only filesystem).
 */
static void scrub_node(struct scrub *s, uint64_t bytenr, uint64_t mirror,
		       uint64_t gen, int level)
{
	struct arb_vol *vol = s->fs->vol;
	uint32_t ns = vol->nodesize;
	const char *why1 = NULL, *why2 = NULL;
	uint8_t *b1 = s->buf, *b2 = s->buf + ns;
	int r1, r2 = -ENOENT;

	s->st->nodes_checked++;
	s->st->bytes_checked += ns;
	r1 = node_copy_ok(s, b1, bytenr, bytenr, gen, level, &why1);
	if (mirror) {
		s->st->bytes_checked += ns;
		r2 = node_copy_ok(s, b2, mirror, bytenr, gen, level, &why2);
	}
	if (!r1 && (!mirror || !r2))
		return;
	if (r1 && r2) {
		s->st->nodes_uncorrectable++;
		if (mirror)
			say(s, "tree node %" PRIu64 ": %s; second copy at %" PRIu64
			       ": %s: uncorrectable",
			    bytenr, why1 ? why1 : "invalid", mirror,
			    why2 ? why2 : "invalid");
		else
			say(s, "tree node %" PRIu64 ": %s", bytenr,
			    why1 ? why1 : "invalid");
		return;
	}
	/* one copy is good: rewrite the other from it */
	{
		uint64_t bad = r1 ? bytenr : mirror;
		const uint8_t *good = r1 ? b2 : b1;
		const char *why = r1 ? why1 : why2;
		int ret = s->fs->readonly
				  ? -EROFS
				  : arb_dev_write(vol->dev, good, ns, bad,
						  ARB_IO_NODE);

		if (!ret)
			ret = arb_dev_flush(vol->dev);
		if (ret) {
			s->st->nodes_uncorrectable++;
			say(s, "tree node %" PRIu64 ": copy at %" PRIu64
			       ": %s; not rewritten: %s",
			    bytenr, bad, why ? why : "invalid",
			    ret == -EROFS ? "read-only" : strerror(-ret));
			return;
		}
		/* a cached copy read before is still right: same bytes */
		s->st->nodes_corrected++;
		say(s, "tree node %" PRIu64 ": copy at %" PRIu64 ": %s; "
		       "rewritten from the good copy",
		    bytenr, bad, why ? why : "invalid");
	}
}

/* sectors [from, to) of data extent bytenr */
static void scrub_data(struct scrub *s, uint64_t bytenr, uint64_t from,
		       uint64_t to)
{
	struct arb_fs *fs = s->fs;
	uint32_t bs = fs->bs;
	size_t nsec = (to - from) / bs, i;
	uint32_t sums[ARB_SCRUB_CHUNK / ARB_SECTORSIZE];
	uint8_t have[ARB_SCRUB_CHUNK / ARB_SECTORSIZE];
	int ret;

	if (nsec > sizeof(have))
		nsec = sizeof(have);
	ret = fs_csum_lookup(fs, from, nsec, sums, have);
	if (ret) {
		s->st->read_errors++;
		say(s, "checksums of %" PRIu64 "+%zu: cannot read the "
		       "checksum tree: %s",
		    from, nsec * bs, strerror(-ret));
		return;
	}
	ret = arb_dev_read(fs->vol->dev, s->buf, nsec * bs, from, ARB_IO_DATA);
	for (i = 0; i < nsec; i++) {
		uint64_t a = from + i * (uint64_t)bs;

		s->st->bytes_checked += bs;
		if (!have[i]) {
			s->st->data_no_csum += bs;
			continue;
		}
		s->st->data_sectors_checked++;
		if (ret) {
			s->st->read_errors++;
			s->st->data_uncorrectable++;
			report_owners(s, bytenr, a, "data read error");
		} else if (fs_data_csum(s->buf + i * (size_t)bs, bs) !=
			   sums[i]) {
			s->st->csum_errors++;
			s->st->data_uncorrectable++;
			report_owners(s, bytenr, a, "data checksum mismatch");
		}
	}
}

/* The first extent item at or after address from: 0, 1 when there is
 * none, or a negative errno. */
static int next_extent(struct scrub *s, uint64_t from, uint64_t *bytenr,
		       uint64_t *len, uint64_t *gen, bool *tree,
		       uint64_t *mirror, int *level)
{
	struct arb_key k = { from, ARB_EXTENT_ITEM, 0 }, fk;
	struct arb_iter it;
	int ret;

	arb_iter_init(&it, s->fs->vol->extent_root);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		const struct arb_extent_item *e = arb_iter_data(&it);

		arb_iter_key(&it, &fk);
		if (fk.type != ARB_EXTENT_ITEM || arb_iter_size(&it) < sizeof(*e))
			continue;
		*bytenr = fk.objectid;
		*len = fk.offset;
		*gen = arb_extent_item_e_generation(e);
		*tree = arb_extent_item_e_flags(e) & ARB_EXTENT_FLAG_TREE_BLOCK;
		*mirror = 0;
		*level = -1;
		if (*tree && arb_iter_size(&it) >=
				     sizeof(*e) + sizeof(struct arb_tree_block_ref)) {
			const struct arb_tree_block_ref *tr =
				(const void *)(e + 1);
			*mirror = arb_tree_block_ref_t_mirror(tr);
			*level = arb_tree_block_ref_t_level(tr);
		}
		break;
	}
	arb_iter_release(&it);
	return ret;
}

static bool extent_still_there(struct scrub *s, uint64_t bytenr,
			       uint64_t len, uint64_t gen)
{
	struct arb_key k = { bytenr, ARB_EXTENT_ITEM, len };
	struct arb_extent_item e;

	if (arb_lookup_item(s->fs->vol->extent_root, &k, &e, sizeof(e)) <
	    (int)sizeof(e))
		return false;
	return arb_extent_item_e_generation(&e) == gen;
}

int arb_fs_scrub(struct arb_fs *fs, struct arb_scrub_stats *st,
		 arb_scrub_report_fn report, void *arg,
		 volatile const bool *cancel)
{
	struct scrub s = { .fs = fs, .st = st, .report = report, .arg = arg };
	uint64_t cur = 0, ext = 0, ext_len = 0, ext_gen = 0;
	bool in_data = false;
	int ret = 0;

	fs_lock(fs);
	memset(st, 0, sizeof(*st));
	fs_unlock(fs);
	s.buf = malloc(ARB_SCRUB_CHUNK > 2 * fs->vol->nodesize
			       ? ARB_SCRUB_CHUNK
			       : 2 * fs->vol->nodesize);
	if (!s.buf)
		return -ENOMEM;
	arb_idcount_init(&s.files);
	fs_lock(fs);
	st->total_bytes = arb_used_bytes(fs->vol);
	fs_unlock(fs);
	for (;;) {
		uint64_t b, len, gen, committed, mirror;
		bool tree;
		int level;

		if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED)) {
			ret = -ECANCELED;
			break;
		}
		fs_lock(fs);
		committed = fs->vol->generation;
		if (in_data && !extent_still_there(&s, ext, ext_len, ext_gen)) {
			/* freed (and maybe reused) while unlocked */
			in_data = false;
			cur = ext + ext_len;
		}
		if (in_data) {
			uint64_t end = ext + ext_len;
			if (end - cur > ARB_SCRUB_CHUNK)
				end = cur + ARB_SCRUB_CHUNK;
			scrub_data(&s, ext, cur, end);
			cur = end;
			if (cur >= ext + ext_len)
				in_data = false;
			fs_unlock(fs);
			continue;
		}
		ret = next_extent(&s, cur, &b, &len, &gen, &tree, &mirror,
				  &level);
		if (ret) {
			fs_unlock(fs);
			if (ret == 1)
				ret = 0;
			break;
		}
		st->position = b;
		if (gen > committed) {
			/* written by the running transaction: not on disk */
			st->skipped_uncommitted += len;
			cur = b + len;
		} else if (tree) {
			scrub_node(&s, b, mirror, gen, level);
			cur = b + len;
		} else {
			ext = b;
			ext_len = len;
			ext_gen = gen;
			cur = b;
			in_data = true;
		}
		fs_unlock(fs);
	}
	free(s.buf);
	arb_idcount_destroy(&s.files);
	fs_lock(fs);
	st->done = true;
	fs_unlock(fs);
	return ret;
}

void arb_fs_scrub_snapshot(struct arb_fs *fs, const struct arb_scrub_stats *st,
			   struct arb_scrub_stats *out)
{
	fs_lock(fs);
	*out = *st;
	fs_unlock(fs);
}
