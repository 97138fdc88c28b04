/* SPDX-License-Identifier: MIT */
/*
 * fs_repair.c - fsck's engine: the check as named records, repair in one
 * transaction, and undo of the last repair.
 *
 * Repair policy (the table in docs/design/check.md, "Repair"):
 *   - tree-block-refcount, extent-refcount, extent-backref, extent-leak:
 *     the extent item (and a data extent's back-references) is rewritten
 *     from the committed trees (extents.c), first, before anything
 *     else changes; a leak is deleted
 *   - then rounds of "check the fs tree as it is now, fix":
 *     a round with link problems fixes only those (dangling-dir-entry
 *     removed; dir-index-missing / dir-item-missing rebuilt from the
 *     INODE_REF; inode-ref-missing rebuilt from the DIR_INDEX; orphan-item
 *     of a linked or missing inode deleted), so that the counts of the
 *     next round see the final names; a round without them fixes the
 *     counts (nlink, dir-size, dir-next-index, nbytes) and moves each
 *     unlinked-inode to /lost+found (created if needed) as "#INO"
 *   - orphan inodes (nlink 0 with an orphan item) are freed, as a
 *     read-write mount would
 *   - one commit; the superblock of that generation G records that it was
 *     written by a repair on top of G-1 (the undo record, see FORMAT.md)
 * Anything else is reported and left alone.  A check that could not see
 * every tree (an unreadable node) is not repaired at all: dangling and
 * leaked things would be guesses.  Nor is one that found an extent in use
 * without an extent item: the repair's own allocations could overwrite it.
 */
#include <endian.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "check_int.h"

/* The undo record: s_repair_gen and s_repair_prev of the superblock
 * (lib/format.h, FORMAT.md). */

/* ---- check as records -------------------------------------------------- */

static const uint64_t super_offs[2] = { ARB_SUPER_OFFSET0,
					ARB_SUPER_OFFSET1 };

/*
 * The slot the filesystem was not opened from must hold a valid superblock
 * of this filesystem (the previous generation, or the same one after mkfs
 * or a repair): it is the fallback if the current slot is ever lost.  NULL
 * when it does, else why not.
 */
static const char *other_super_bad(struct arb_vol *vol, struct arb_super *sb)
{
	int other = 1 - vol->super_slot;

	if (arb_dev_read(vol->dev, sb, sizeof(*sb), super_offs[other],
			 ARB_IO_SUPER))
		return "read error";
	if (arb_super_s_magic(sb) != ARB_MAGIC)
		return "no superblock magic";
	if (arb_csum_verify(ARB_CSUM_CRC32C, sb, sizeof(*sb)))
		return "bad checksum";
	if (arb_super_s_bytenr(sb) != super_offs[other])
		return "wrong address in the copy";
	if (memcmp(sb->s_uuid, vol->super.s_uuid, ARB_UUID_SIZE))
		return "another filesystem's superblock";
	/* a newer valid copy was passed over only for its commit record: a
	 * one-flush commit cut short by a crash, which the next commit
	 * overwrites (lib/core/txn.c); nothing to repair */
	if (arb_super_s_generation(sb) > vol->generation &&
	    !arb_super_s_commit_nr(sb))
		return "newer generation than the current one";
	if (arb_super_s_total_bytes(sb) > vol->dev->size)
		return "larger than the image";
	return NULL;
}

static void check_super_copy(struct arb_fs *fs, struct arb_check_result *r,
			     FILE *out)
{
	struct arb_vol *vol = fs->vol;
	struct arb_super sb;
	struct arb_problem *pb;
	const char *why;

	/* a view of a live volume: its slots hold later generations */
	if (vol->view)
		return;
	why = other_super_bad(vol, &sb);
	if (!why)
		return;
	pb = fs_problem_add(r, ARB_PB_SUPER_COPY, 0);
	if (!pb)
		return;
	pb->addr = super_offs[1 - vol->super_slot];
	snprintf(pb->detail, sizeof(pb->detail),
		 "superblock slot %d at %llu: %s (slot %d, generation %llu, is "
		 "current)",
		 1 - vol->super_slot, (unsigned long long)pb->addr, why,
		 vol->super_slot, (unsigned long long)vol->generation);
	fs_problem_print(out, pb);
}

/* write the current superblock into the other slot */
static int fix_super_copy(struct arb_fs *fs, FILE *out)
{
	struct arb_vol *vol = fs->vol;
	struct arb_super sb = vol->super;
	int other = 1 - vol->super_slot, ret;

	arb_set_super_s_bytenr(&sb, super_offs[other]);
	arb_csum_block(vol->csum_type, &sb, sizeof(sb), sb.s_csum);
	ret = arb_dev_write(vol->dev, &sb, sizeof(sb), super_offs[other],
			    ARB_IO_SUPER);
	if (!ret)
		ret = arb_dev_flush(vol->dev);
	if (!ret && out)
		fprintf(out, "repair: super-copy-bad: slot %d rewritten from "
			     "generation %llu\n",
			other, (unsigned long long)vol->generation);
	return ret;
}

int arb_fs_check_records(struct arb_fs *fs, struct arb_check_result *r,
			 FILE *out)
{
	uint64_t errors = 0;
	int ret;

	fs_lock(fs);
	check_super_copy(fs, r, out);
	/* the trees, the extent tree and the data: one walk */
	ret = check_walk_records(fs, r, out);
	if (!ret && !r->incomplete) {
		ret = fs_check_tree(fs, out, &errors, r);
		if (ret == -EUCLEAN)
			ret = 0;
	}
	fs_unlock(fs);
	if (ret)
		return ret;
	return r->nr ? -EUCLEAN : 0;
}

/* ---- repair ------------------------------------------------------------ */

static bool is_link_problem(const struct arb_problem *p)
{
	switch (p->id) {
	case ARB_PB_DANGLING:
	case ARB_PB_DIR_INDEX_MISSING:
	case ARB_PB_DIR_ITEM_MISSING:
	case ARB_PB_ORPHAN:
		return true;
	case ARB_PB_INODE_REF_MISSING:
		return p->index != 0;
	default:
		return false;
	}
}

static uint8_t mode_dt(uint32_t mode)
{
	return (uint8_t)((mode & S_IFMT) >> 12);
}

static bool is_dir_inode(struct arb_fs *fs, uint64_t ino)
{
	struct arb_inode in;
	return fs_inode_read(fs, ino, &in) == 0 && S_ISDIR(in.mode);
}

/* the directory entry bytes of (ino, type, name) */
static size_t make_dent(uint8_t *buf, struct arb_txn *t, uint64_t ino,
			uint8_t type, const char *name)
{
	size_t len = strlen(name);
	fs_dent_fill(buf, ino, t->transid, type, name, len, NULL, 0);
	return fs_dent_size(len, 0);
}

static int fix_dangling(struct arb_fs *fs, struct arb_txn *t,
			const struct arb_problem *p)
{
	size_t len = strlen(p->name), off, elen;
	uint32_t max = arb_max_item_size(fs->vol);
	struct arb_key k = { p->dir, (uint8_t)p->type, p->index };
	uint8_t *buf;
	int ret;

	if (p->type == ARB_DIR_INDEX)
		return arb_del_item(t, fs_tree0(fs)->root, &k);
	k.offset = arb_name_hash(p->name, len);
	buf = malloc(max);
	if (!buf)
		return -ENOMEM;
	ret = arb_lookup_item(fs_tree0(fs)->root, &k, buf, max);
	if (ret >= 0)
		ret = fs_dent_find(buf, (size_t)ret, p->name, len, &off, &elen);
	if (ret == 0)
		ret = fs_item_cut(t, fs_tree0(fs)->root, &k, off, elen);
	free(buf);
	return ret == -ENOENT ? 1 : ret;
}

/* 0 fixed, 1 not fixable after all, <0 error */
static int fix_link(struct arb_fs *fs, struct arb_txn *t,
		    const struct arb_problem *p)
{
	uint8_t ent[sizeof(struct arb_dir_entry) + ARB_NAME_MAX];
	uint8_t ref[sizeof(struct arb_inode_ref) + ARB_NAME_MAX];
	size_t len = strlen(p->name);
	struct arb_inode in;
	struct arb_key k;
	int ret;

	switch (p->id) {
	case ARB_PB_DANGLING:
		return fix_dangling(fs, t, p);
	case ARB_PB_ORPHAN:
		k.objectid = ARB_ORPHAN_OBJECTID;
		k.type = ARB_ORPHAN_ITEM;
		k.offset = p->ino;
		return arb_del_item(t, fs_tree0(fs)->root, &k);
	case ARB_PB_DIR_INDEX_MISSING:
	case ARB_PB_DIR_ITEM_MISSING:
		if (!len || !is_dir_inode(fs, p->dir))
			return 1;
		ret = fs_inode_read(fs, p->ino, &in);
		if (ret)
			return ret == -ENOENT ? 1 : ret;
		k.objectid = p->dir;
		if (p->id == ARB_PB_DIR_INDEX_MISSING) {
			k.type = ARB_DIR_INDEX;
			k.offset = p->index;
			if (fs_item_exists(fs_tree0(fs)->root, &k))
				return 1;
			return arb_insert_item(t, fs_tree0(fs)->root, &k, ent,
					       (uint32_t)make_dent(
						       ent, t, p->ino,
						       mode_dt(in.mode),
						       p->name));
		}
		k.type = ARB_DIR_ITEM;
		k.offset = arb_name_hash(p->name, len);
		return fs_item_append(t, fs_tree0(fs)->root, &k, ent,
				      make_dent(ent, t, p->ino,
						mode_dt(in.mode), p->name));
	case ARB_PB_INODE_REF_MISSING:
		if (!len || !p->index)
			return 1;
		ret = fs_inode_read(fs, p->ino, &in);
		if (ret)
			return ret == -ENOENT ? 1 : ret;
		arb_set_inode_ref_r_index((struct arb_inode_ref *)ref, p->index);
		arb_set_inode_ref_r_name_len((struct arb_inode_ref *)ref,
					     (uint16_t)len);
		memcpy(ref + sizeof(struct arb_inode_ref), p->name, len);
		k.objectid = p->ino;
		k.type = ARB_INODE_REF;
		k.offset = p->dir;
		return fs_item_append(t, fs_tree0(fs)->root, &k, ref,
				      sizeof(struct arb_inode_ref) + len);
	default:
		return 1;
	}
}

/* /lost+found, created (mode 0700, in the root directory) if needed */
static int lost_found(struct arb_fs *fs, struct arb_txn *t, FILE *out,
		      uint64_t *ino)
{
	static const char name[] = "lost+found";
	struct arb_inode root, in;
	struct timespec now;
	uint8_t type;
	int ret;

	ret = fs_dir_find(fs, ARB_ROOT_INO, name, sizeof(name) - 1, ino, NULL,
			  &type);
	if (ret == 0)
		return is_dir_inode(fs, *ino) ? 0 : -ENOTDIR;
	if (ret != -ENOENT)
		return ret;
	ret = fs_inode_read(fs, ARB_ROOT_INO, &root);
	if (ret)
		return ret;
	fs_now(&now);
	memset(&in, 0, sizeof(in));
	ret = fs_ino_new(fs, t, fs_tree0(fs), &in.ino);
	if (ret)
		return ret;
	in.generation = t->transid;
	in.mode = S_IFDIR | 0700;
	in.nlink = 2;
	in.seq = 2;
	in.atime = in.mtime = in.ctime = in.btime = now;
	ret = fs_inode_insert(fs, t, &in);
	if (ret)
		return ret;
	ret = fs_link_add(fs, t, &root, name, sizeof(name) - 1, in.ino,
			  mode_dt(in.mode), &now);
	if (ret)
		return ret;
	root.nlink++;
	ret = fs_inode_write(fs, t, &root);
	if (ret)
		return ret;
	if (out)
		fprintf(out, "repair: created /lost+found (inode %llu)\n",
			(unsigned long long)in.ino);
	*ino = in.ino;
	return 0;
}

static int fix_unlinked(struct arb_fs *fs, struct arb_txn *t, FILE *out,
			uint64_t ino)
{
	struct arb_inode lf, in;
	struct timespec now;
	struct arb_key k = { ARB_ORPHAN_OBJECTID, ARB_ORPHAN_ITEM, ino };
	uint64_t lf_ino;
	char name[32];
	int ret;

	ret = fs_inode_read(fs, ino, &in);
	if (ret)
		return ret == -ENOENT ? 1 : ret;
	ret = lost_found(fs, t, out, &lf_ino);
	if (ret == -ENOTDIR) {
		if (out)
			fprintf(out, "repair: /lost+found is not a directory: "
				     "inode %llu left unlinked\n",
				(unsigned long long)ino);
		return 1;
	}
	if (ret)
		return ret;
	if (lf_ino == ino)
		return 1;
	ret = fs_inode_read(fs, lf_ino, &lf);
	if (ret)
		return ret;
	snprintf(name, sizeof(name), "#%llu", (unsigned long long)ino);
	{
		uint64_t other;
		ret = fs_dir_find(fs, lf_ino, name, strlen(name), &other, NULL,
				  NULL);
		if (ret == 0) {
			if (out)
				fprintf(out, "repair: /lost+found/%s exists: "
					     "inode %llu left unlinked\n",
					name, (unsigned long long)ino);
			return 1;
		}
		if (ret != -ENOENT)
			return ret;
	}
	fs_now(&now);
	ret = fs_link_add(fs, t, &lf, name, strlen(name), ino, mode_dt(in.mode),
			  &now);
	if (ret)
		return ret;
	if (S_ISDIR(in.mode)) {
		lf.nlink++;
		if (in.nlink < 2)
			in.nlink = 2;
	} else {
		in.nlink = 1;
	}
	in.ctime = now;
	ret = fs_inode_write(fs, t, &lf);
	if (!ret)
		ret = fs_inode_write(fs, t, &in);
	if (!ret && fs_item_exists(fs_tree0(fs)->root, &k))
		ret = arb_del_item(t, fs_tree0(fs)->root, &k);
	if (!ret && out)
		fprintf(out, "repair: inode %llu moved to /lost+found/%s\n",
			(unsigned long long)ino, name);
	return ret;
}

static int fix_count(struct arb_fs *fs, struct arb_txn *t,
		     const struct arb_problem *p)
{
	struct arb_inode in;
	int ret = fs_inode_read(fs, p->ino, &in);

	if (ret)
		return ret == -ENOENT ? 1 : ret;
	switch (p->id) {
	case ARB_PB_NLINK:
		if (!p->expect || p->expect > UINT32_MAX)
			return 1;
		in.nlink = (uint32_t)p->expect;
		break;
	case ARB_PB_DIR_SIZE:
		in.size = p->expect;
		break;
	case ARB_PB_DIR_SEQ:
		in.seq = p->expect;
		break;
	case ARB_PB_NBYTES:
		in.nbytes = p->expect;
		break;
	default:
		return 1;
	}
	return fs_inode_write(fs, t, &in);
}

/* highest-objectid: raised to the highest inode present */
static int fix_highest(struct arb_fs *fs, struct arb_txn *t,
		       const struct arb_problem *p)
{
	if (!p->expect || p->expect >= ARB_ORPHAN_OBJECTID)
		return 1;
	arb_root_note_objectid(t, fs_tree0(fs)->root, p->expect);
	if (fs_tree0(fs)->next_ino <= p->expect)
		fs_tree0(fs)->next_ino = p->expect + 1;
	return 0;
}

/* one round: 0.. records acted on, <0 error */
static int fix_round(struct arb_fs *fs, struct arb_txn *t,
		     const struct arb_check_result *cur, FILE *out)
{
	bool links = false;
	int n = 0, ret;

	for (size_t i = 0; i < cur->nr; i++)
		if (is_link_problem(&cur->pb[i]))
			links = true;
	for (size_t i = 0; i < cur->nr; i++) {
		const struct arb_problem *p = &cur->pb[i];

		/* subvolume trees: reported, not repaired yet */
		if (!arb_problem_fixable(p->id) || p->tree ||
		    links != is_link_problem(p))
			continue;
		if (links)
			ret = fix_link(fs, t, p);
		else if (p->id == ARB_PB_UNLINKED)
			ret = fix_unlinked(fs, t, out, p->ino);
		else if (p->id == ARB_PB_HIGHEST_INO)
			ret = fix_highest(fs, t, p);
		else
			ret = fix_count(fs, t, p);
		if (ret < 0)
			return ret;
		if (ret == 0) {
			n++;
			if (out && p->id != ARB_PB_UNLINKED)
				fprintf(out, "repair: %s: %s: fixed\n",
					arb_problem_name(p->id), p->detail);
		}
	}
	return n;
}

/* Free inodes left as orphans (nlink 0 with an orphan item). */
static int free_orphans(struct arb_fs *fs, struct arb_txn *t, FILE *out,
			bool *changed)
{
	for (uint64_t from = 0;;) {
		struct arb_key k = { ARB_ORPHAN_OBJECTID, ARB_ORPHAN_ITEM, from };
		struct arb_inode in;
		int ret;

		ret = arb_next_key_of(fs_tree0(fs)->root, &k);
		if (ret)
			return ret < 0 ? ret : 0;
		from = k.offset + 1;
		if (fs_inode_read(fs, k.offset, &in) || in.nlink)
			continue;
		ret = fs_inode_free(fs, t, k.offset);
		if (ret)
			return ret;
		*changed = true;
		if (out)
			fprintf(out, "repair: orphan inode %llu freed\n",
				(unsigned long long)k.offset);
		if (!from)
			return 0;
	}
}

/*
 * node-copy-bad: read both copies of the node at addr straight from the
 * device and validate each against its extent item (generation, level,
 * second copy's address), as scrub does.  One good: the other is
 * rewritten from it.  Both good but different: the second is rewritten
 * from the first, the copy every read uses.  Both bad: left (reported).
 * The rewrite puts back the bytes the last commit wrote to a block it
 * references (self-heal does the same), so it needs no transaction.
 * 0 rewritten, 1 left alone, <0 error.
 */
static int fix_copy(struct arb_fs *fs, uint64_t addr, uint8_t *buf,
		    FILE *out)
{
	struct arb_vol *vol = fs->vol;
	struct arb_key k = { addr, ARB_EXTENT_ITEM, vol->nodesize };
	uint8_t item[sizeof(struct arb_extent_item) +
		     sizeof(struct arb_tree_block_ref)];
	const struct arb_extent_item *ei = (const void *)item;
	const struct arb_tree_block_ref *tr = (const void *)(ei + 1);
	uint8_t *b1 = buf, *b2 = buf + vol->nodesize;
	const char *why1 = NULL, *why2 = NULL;
	uint64_t mirror, gen, to;
	int level, r1, r2, ret;

	ret = arb_lookup_item(vol->extent_root, &k, item, sizeof(item));
	if (ret < (int)sizeof(item) ||
	    !(arb_extent_item_e_flags(ei) & ARB_EXTENT_FLAG_TREE_BLOCK) ||
	    !arb_tree_block_ref_t_mirror(tr)) {
		if (out)
			fprintf(out, "repair: node-copy-bad: node %llu: no "
				     "extent item naming its second copy: "
				     "left\n",
				(unsigned long long)addr);
		return ret < 0 && ret != -ENOENT ? ret : 1;
	}
	mirror = arb_tree_block_ref_t_mirror(tr);
	gen = arb_extent_item_e_generation(ei);
	level = arb_tree_block_ref_t_level(tr);
	r1 = arb_node_read_copy(vol, b1, addr, addr, gen, level, &why1);
	r2 = arb_node_read_copy(vol, b2, mirror, addr, gen, level, &why2);
	if (r1 && r2) {
		if (out)
			fprintf(out, "repair: node-copy-bad: node %llu: both "
				     "copies bad (%s; %s): left\n",
				(unsigned long long)addr, why1, why2);
		return 1;
	}
	if (!r1 && !r2 && !memcmp(b1, b2, vol->nodesize))
		return 1; /* good again (healed when read) */
	to = r1 ? addr : mirror;
	ret = arb_dev_write(vol->dev, r1 ? b2 : b1, vol->nodesize, to,
			    ARB_IO_NODE);
	if (!ret)
		ret = arb_dev_flush(vol->dev);
	if (ret)
		return ret;
	if (out)
		fprintf(out, "repair: node-copy-bad: node %llu: %s copy at "
			     "%llu (%s) rewritten from the %s copy\n",
			(unsigned long long)addr, r1 ? "first" : "second",
			(unsigned long long)to,
			r1 ? why1 : r2 ? why2 : "differs", r1 ? "second" : "first");
	return 0;
}

/* every node-copy-bad record, once per node; *n counts the rewrites */
static int fix_copies(struct arb_fs *fs, const struct arb_check_result *r,
		      FILE *out, uint64_t *n)
{
	uint8_t *buf = NULL;
	int ret = 0;

	for (size_t i = 0; i < r->nr && !ret; i++) {
		const struct arb_problem *p = &r->pb[i];
		bool seen = false;

		if (p->id != ARB_PB_NODE_COPY || !p->addr)
			continue;
		for (size_t j = 0; j < i && !seen; j++)
			seen = r->pb[j].id == ARB_PB_NODE_COPY &&
			       r->pb[j].addr == p->addr;
		if (seen)
			continue;
		if (!buf) {
			buf = malloc(2 * (size_t)fs->vol->nodesize);
			if (!buf)
				return -ENOMEM;
		}
		ret = fix_copy(fs, p->addr, buf, out);
		if (ret == 0)
			(*n)++;
		if (ret > 0)
			ret = 0;
	}
	free(buf);
	return ret;
}

int arb_fs_repair(struct arb_fs *fs, const struct arb_check_result *r,
		  FILE *out, uint64_t *fixed)
{
	uint64_t ncopies = 0;
	struct arb_vol *vol = fs->vol;
	struct arb_txn *t;
	bool ext = false, changed = false;
	uint64_t nfix = 0;
	int ret = 0;

	*fixed = 0;
	if (fs->readonly)
		return -EROFS;
	if (r->incomplete || r->space_unsafe)
		return -EUCLEAN;
	for (size_t i = 0; i < r->nr; i++)
		if (r->pb[i].id == ARB_PB_TREE_REFS ||
		    r->pb[i].id == ARB_PB_EXTENT_REFS ||
		    r->pb[i].id == ARB_PB_EXTENT_BACKREF ||
		    r->pb[i].id == ARB_PB_EXTENT_LEAK ||
		    r->pb[i].id == ARB_PB_CSUM_ORPHAN)
			ext = true;
	fs_lock(fs);
	if (vol->running || fs->txn_dirty || fs->dirty_bytes) {
		/* the extent pass needs the trees exactly as committed */
		fs_unlock(fs);
		return -EBUSY;
	}
	/* bad copies first, outside the transaction (see fix_copy) */
	ret = fix_copies(fs, r, out, &ncopies);
	for (size_t i = 0; i < r->nr && !ret; i++) {
		if (r->pb[i].id != ARB_PB_SUPER_COPY)
			continue;
		/* outside the transaction too: the bytes of the current
		 * generation, which a commit rewrites anyway */
		ret = fix_super_copy(fs, out);
		if (!ret)
			ncopies++;
		break;
	}
	*fixed = ncopies;
	if (ret)
		goto out_unlock;
	ret = arb_txn_begin(vol, &t);
	if (ret)
		goto out_unlock;
	if (ext) {
		struct arb_check_result tmp = { 0 };
		ret = fs_check_extents(fs, &tmp, NULL, false, t, out, &nfix);
		arb_check_result_free(&tmp);
		if (ret)
			goto out_abort;
	}
	for (int round = 0; round < 8; round++) {
		struct arb_check_result cur = { 0 };
		uint64_t errors = 0;
		int n;

		ret = fs_check_tree(fs, NULL, &errors, &cur);
		if (ret && ret != -EUCLEAN) {
			arb_check_result_free(&cur);
			goto out_abort;
		}
		n = fix_round(fs, t, &cur, out);
		arb_check_result_free(&cur);
		if (n < 0) {
			ret = n;
			goto out_abort;
		}
		nfix += (uint64_t)n;
		if (n == 0)
			break;
	}
	ret = free_orphans(fs, t, out, &changed);
	if (ret)
		goto out_abort;
	arb_txn_end(t);
	*fixed = nfix + ncopies;
	if (!nfix && !changed) {
		/* nothing changed: no new generation, and nothing failed */
		arb_txn_discard(t);
		goto out_reload;
	}
	/* flushed twice, so without a commit record: closing then leaves the
	 * other slot alone, and undo needs it (generation - 1, lib/core/txn.c).
	 * Today the repair commit is the first since open, which is
	 * two-flush anyway; this keeps it so if that ever changes. */
	if (vol->one_flush) {
		arb_dev_track(vol->dev, 0, 0);
		vol->one_flush = false;
	}
	/* the undo record travels with this commit's superblock */
	arb_set_super_s_repair_gen(&vol->super, vol->generation + 1);
	arb_set_super_s_repair_prev(&vol->super, vol->generation);
	fs->txn_dirty = true;
	ret = fs_commit(fs);
	if (!ret && out)
		fprintf(out,
			"repair: committed generation %llu (undo returns to "
			"%llu)\n",
			(unsigned long long)vol->generation,
			(unsigned long long)vol->generation - 1);
	goto out_unlock;
out_abort:
	arb_txn_abort(t);
out_reload:
	/* the roots were reloaded */
	fs_trees_reload(fs);
	(void)arb_root_get(vol, ARB_CSUM_TREE_ID, &fs->csum);
out_unlock:
	fs_unlock(fs);
	return ret;
}

/* ---- undo -------------------------------------------------------------- */

/* A device showing lower with one superblock slot blanked. */
struct mask_dev {
	struct arb_dev dev;
	struct arb_dev *lower;
	uint64_t off;
};

static int mask_pread(struct arb_dev *d, void *buf, size_t len, uint64_t off,
		      enum arb_io_kind kind)
{
	struct mask_dev *m = d->priv;
	int ret = arb_dev_read(m->lower, buf, len, off, kind);

	if (ret)
		return ret;
	if (off < m->off + ARB_SUPER_SIZE && m->off < off + len) {
		uint64_t a = off > m->off ? off : m->off;
		uint64_t b = off + len < m->off + ARB_SUPER_SIZE
				     ? off + len
				     : m->off + ARB_SUPER_SIZE;
		memset((uint8_t *)buf + (a - off), 0, b - a);
	}
	return 0;
}

static int mask_pwrite(struct arb_dev *d, const void *buf, size_t len,
		       uint64_t off, enum arb_io_kind kind)
{
	(void)d;
	(void)buf;
	(void)len;
	(void)off;
	(void)kind;
	return -EROFS;
}

static int mask_flush(struct arb_dev *d)
{
	(void)d;
	return 0;
}

static void mask_destroy(struct arb_dev *d)
{
	free(d->priv);
}

static const struct arb_dev_ops mask_ops = {
	.pread = mask_pread,
	.pwrite = mask_pwrite,
	.flush = mask_flush,
	.destroy = mask_destroy,
};

/* does the generation in the unmasked slot open (trees readable)? */
static int try_open_masked(struct arb_dev *lower, uint64_t masked_off)
{
	struct mask_dev *m = calloc(1, sizeof(*m));
	struct arb_fs_opts o;
	struct arb_fs *fs;
	int ret;

	if (!m)
		return -ENOMEM;
	m->dev.ops = &mask_ops;
	m->dev.size = lower->size;
	m->dev.priv = m;
	m->lower = lower;
	m->off = masked_off;
	arb_fs_opts_default(&o);
	o.readonly = true;
	ret = arb_fs_open(&m->dev, &o, &fs, NULL);
	if (ret) {
		free(m);
		return ret;
	}
	return arb_fs_close(fs);
}

int arb_undo_repair(struct arb_dev *dev, FILE *out, const char **why)
{
	static const uint64_t off[2] = { ARB_SUPER_OFFSET0, ARB_SUPER_OFFSET1 };
	struct arb_super cur, prev;
	const char *w = NULL;
	uint64_t g;
	int slot, ret;

	*why = NULL;
	ret = arb_read_super(dev, &cur, &slot, &w);
	if (ret) {
		*why = w ? w : "no valid superblock";
		return ret;
	}
	g = arb_super_s_generation(&cur);
	if (arb_super_s_repair_gen(&cur) != g ||
	    arb_super_s_repair_prev(&cur) + 1 != g) {
		*why = "the newest generation was not written by a repair "
		       "(or was written after one)";
		return -EALREADY;
	}
	ret = arb_dev_read(dev, &prev, sizeof(prev), off[1 - slot],
			   ARB_IO_SUPER);
	if (ret) {
		*why = "cannot read the other superblock slot";
		return ret;
	}
	if (arb_super_s_magic(&prev) != ARB_MAGIC ||
	    arb_csum_verify(arb_super_s_csum_type(&prev), &prev,
			    sizeof(prev)) ||
	    arb_super_s_bytenr(&prev) != off[1 - slot] ||
	    arb_super_s_generation(&prev) + 1 != g) {
		*why = "the other superblock slot no longer holds the "
		       "generation before the repair";
		return -EALREADY;
	}
	ret = try_open_masked(dev, off[slot]);
	if (ret) {
		*why = "the generation before the repair does not open";
		return ret == -ENOMEM ? ret : -EUCLEAN;
	}
	/* G-1's superblock again, as generation G+1: newer than the
	 * repair's, in G-1's own slot ((G+1) % 2), without an undo record */
	arb_set_super_s_generation(&prev, g + 1);
	/* its blocks were flushed long ago: no record to check (and the
	 * ranges G-1's record listed may have been reused since) */
	arb_super_strip_record(&prev);
	arb_set_super_s_repair_gen(&prev, 0);
	arb_set_super_s_repair_prev(&prev, 0);
	arb_csum_block(arb_super_s_csum_type(&prev), &prev, sizeof(prev),
		       prev.s_csum);
	ret = arb_dev_write(dev, &prev, sizeof(prev), off[1 - slot],
			    ARB_IO_SUPER);
	if (!ret)
		ret = arb_dev_flush(dev);
	if (ret) {
		*why = "writing the superblock failed";
		return ret;
	}
	if (out)
		fprintf(out,
			"undo: generation %llu (before the repair) is current "
			"again, as generation %llu\n",
			(unsigned long long)(g - 1),
			(unsigned long long)(g + 1));
	return 0;
}
