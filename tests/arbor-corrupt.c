/* SPDX-License-Identifier: MIT */
/*
 * arbor-corrupt - craft damaged arborfs images for fsck tests (not
 * installed).  Damage to the trees is made through the library, in a
 * transaction that is committed, so the image is otherwise well formed;
 * damage to bytes (checksums, truncation) is made raw after closing.
 *
 *   arbor-corrupt IMAGE KIND [PATH]
 *
 * PATH is relative to the filesystem root ("dir/file"); the last three
 * kinds take none.  Kinds:
 *   nlink PATH               the inode's nlink + 1
 *   dangling-dir-item PATH   the inode is deleted, its names stay
 *   missing-dir-index PATH   the name's DIR_INDEX is deleted
 *   missing-dir-item PATH    the name's DIR_ITEM entry is deleted
 *   missing-inode-ref PATH   the name's INODE_REF entry is deleted
 *   unlinked PATH            the name's three items are deleted, nlink kept
 *                            (an inode no directory reaches)
 *   orphan-item PATH         an orphan item for the (linked) inode
 *   refcount PATH            the file's first data extent: count + 1
 *   missing-backref PATH     ... its back-reference for this file deleted
 *   tree-refcount PATH       the leaf holding the inode: count + 1
 *   overlapping-extents PATH a second file extent item overlapping the
 *                            first one (same data; counts kept right)
 *   compressed PATH          the file's first file extent item says its
 *                            data is compressed with a method no version
 *                            knows (f_compression 7)
 *   bad-data-csum PATH       one byte of the file's first data sector
 *                            flipped on disk
 *   bad-node-csum PATH       one byte of the leaf holding the inode flipped
 *   stale-csum PATH          a copy of the checksum item of the file's first
 *                            data extent, keyed at the leaf holding the
 *                            inode (no data extent there)
 *   missing-csum PATH        the checksum item of the file's first data
 *                            extent deleted
 *   stale-highest PATH       the fs tree's r_highest_objectid set just
 *                            below the inode's number
 *   truncate                 the image file cut to half its size
 *   newer-root-item          a tree 9 with a few items, whose ROOT_ITEM is
 *                            then 8 bytes longer than this version's
 *                            struct (as a newer arborfs could write it)
 *   incompat-bit             an unknown incompatible feature flag (bit 62)
 *                            in both superblock copies, checksums redone
 * Prints what it did: inode, path, addresses.  Exit 0 done, 1 failed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/fs_int.h"
#include "items/items.h"

struct target {
	uint64_t dir, ino, index;
	char name[ARB_NAME_MAX + 1];
};

static int die(const char *what, int err)
{
	fprintf(stderr, "arbor-corrupt: %s: %s\n", what, strerror(-err));
	return 1;
}

static int resolve(struct arb_fs *fs, const char *path, struct target *tg)
{
	char buf[4096], *save = NULL, *c;
	uint64_t dir = ARB_ROOT_INO, ino = ARB_ROOT_INO, index = 0;
	int ret = -ENOENT;

	snprintf(buf, sizeof(buf), "%s", path);
	for (c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		dir = ino;
		ret = fs_dir_find(fs, dir, c, strlen(c), &ino, &index, NULL);
		if (ret)
			return ret;
		snprintf(tg->name, sizeof(tg->name), "%s", c);
	}
	if (ret)
		return ret;
	tg->dir = dir;
	tg->ino = ino;
	tg->index = index;
	return 0;
}

/* the first REG file extent item of ino: its key and item */
static int first_extent(struct arb_fs *fs, uint64_t ino, struct arb_key *key,
			struct arb_file_extent *fe)
{
	struct arb_key k = { ino, ARB_EXTENT_DATA, 0 };
	struct arb_iter it;
	int ret;

	arb_iter_init(&it, fs_tree0(fs)->root);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		arb_iter_key(&it, &k);
		if (k.objectid != ino || k.type != ARB_EXTENT_DATA) {
			ret = 1;
			break;
		}
		if (arb_iter_size(&it) < sizeof(*fe))
			continue;
		memcpy(fe, arb_iter_data(&it), sizeof(*fe));
		if (arb_file_extent_f_type(fe) == ARB_FILE_EXTENT_REG) {
			*key = k;
			break;
		}
	}
	arb_iter_release(&it);
	return ret < 0 ? ret : ret ? -ENODATA : 0;
}

/* cut name's entry out of a multi-entry item */
static int cut_entry(struct arb_fs *fs, struct arb_txn *t,
		     const struct arb_key *k, const char *name, bool iref)
{
	uint32_t max = arb_max_item_size(fs->vol);
	uint8_t *buf = malloc(max);
	size_t nl = strlen(name), off = 0, len = 0;
	struct arb_iref r;
	int ret;

	if (!buf)
		return -ENOMEM;
	ret = arb_lookup_item(fs_tree0(fs)->root, k, buf, max);
	if (ret < 0)
		goto out;
	if (!iref) {
		ret = fs_dent_find(buf, (size_t)ret, name, nl, &off, &len);
	} else {
		ret = arb_iref_find(buf, (size_t)ret, name, nl, &r);
		if (!ret) {
			off = r.off;
			len = r.len;
		}
	}
	if (!ret)
		ret = fs_item_cut(t, fs_tree0(fs)->root, k, off, len);
out:
	free(buf);
	return ret;
}

static int del_backref(struct arb_fs *fs, struct arb_txn *t, uint64_t bytenr,
		       uint64_t ino)
{
	struct arb_root *er = fs->vol->extent_root;
	struct arb_key k = { bytenr, ARB_EXTENT_DATA_REF, 0 };
	struct arb_iter it;
	int ret;

	arb_iter_init(&it, er);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		const struct arb_extent_data_ref *r = arb_iter_data(&it);
		arb_iter_key(&it, &k);
		if (k.objectid != bytenr || k.type != ARB_EXTENT_DATA_REF) {
			ret = 1;
			break;
		}
		if (arb_extent_data_ref_d_objectid(r) == ino)
			break;
	}
	arb_iter_release(&it);
	if (ret)
		return ret < 0 ? ret : -ENOENT;
	printf("deleted back-reference key (%llu, %u, %llu)\n",
	       (unsigned long long)k.objectid, k.type,
	       (unsigned long long)k.offset);
	return arb_del_item(t, er, &k);
}

static int bump_refs(struct arb_fs *fs, struct arb_txn *t, uint64_t bytenr,
		     uint64_t len)
{
	struct arb_root *er = fs->vol->extent_root;
	struct arb_key k = { bytenr, ARB_EXTENT_ITEM, len };
	uint8_t buf[sizeof(struct arb_extent_item) +
		    sizeof(struct arb_tree_block_ref)];
	struct arb_extent_item *ei = (struct arb_extent_item *)buf;
	int ret = arb_lookup_item(er, &k, buf, sizeof(buf));

	if (ret < 0)
		return ret;
	if (ret < (int)sizeof(*ei))
		return -EUCLEAN;
	printf("extent %llu+%llu: refs %llu -> %llu\n",
	       (unsigned long long)bytenr, (unsigned long long)len,
	       (unsigned long long)arb_extent_item_e_refs(ei),
	       (unsigned long long)arb_extent_item_e_refs(ei) + 1);
	arb_set_extent_item_e_refs(ei, arb_extent_item_e_refs(ei) + 1);
	return arb_update_item(t, er, &k, buf, (uint32_t)ret);
}

static int overlap(struct arb_fs *fs, struct arb_txn *t, uint64_t ino)
{
	struct arb_file_extent fe;
	struct arb_key k;
	uint64_t bs = fs->bs;
	int ret = first_extent(fs, ino, &k, &fe);

	if (ret)
		return ret;
	if (arb_file_extent_f_num_bytes(&fe) < 2 * bs)
		return -ERANGE;
	k.offset += bs;
	if (fs_item_exists(fs_tree0(fs)->root, &k))
		return -EEXIST;
	arb_set_file_extent_f_offset(&fe, arb_file_extent_f_offset(&fe) + bs);
	arb_set_file_extent_f_num_bytes(&fe, bs);
	ret = arb_insert_item(t, fs_tree0(fs)->root, &k, &fe, sizeof(fe));
	if (ret)
		return ret;
	printf("inode %llu: extra file extent at %llu -> disk %llu\n",
	       (unsigned long long)ino, (unsigned long long)k.offset,
	       (unsigned long long)arb_file_extent_f_disk_bytenr(&fe));
	return arb_ref_data(t, arb_file_extent_f_disk_bytenr(&fe),
			    arb_file_extent_f_disk_num_bytes(&fe), fs_tree0(fs)->root->id,
			    ino, k.offset - arb_file_extent_f_offset(&fe), 1);
}

/* address of the leaf holding ino's INODE_ITEM (not the tree's root) */
static int inode_leaf(struct arb_fs *fs, uint64_t ino, uint64_t *addr)
{
	struct arb_key k = { ino, ARB_INODE_ITEM, 0 };
	struct arb_path p;
	int ret;

	arb_path_init(&p);
	ret = arb_search_slot(NULL, fs_tree0(fs)->root, &k, &p, 0, 0);
	if (ret == 0) {
		*addr = p.nodes[0]->bytenr;
		if (p.nodes[0] == fs_tree0(fs)->root->node)
			ret = -EXDEV; /* the whole tree would be lost */
	}
	arb_path_release(fs->vol, &p);
	return ret > 0 ? -ENOENT : ret;
}

#define NEWER_TREE 9ULL

/* tree NEWER_TREE with a few items, committed */
static int newer_tree(struct arb_fs *fs)
{
	struct arb_txn *t;
	struct arb_root *r;
	int ret;

	ret = arb_txn_begin(fs->vol, &t);
	if (ret)
		return ret;
	ret = arb_root_create(t, NEWER_TREE, &r);
	for (uint64_t i = 0; i < 20 && !ret; i++) {
		struct arb_key k = { 256 + i, ARB_TEST_ITEM, 0 };
		ret = arb_insert_item(t, r, &k, &i, sizeof(i));
	}
	if (ret) {
		arb_txn_abort(t);
		return ret;
	}
	arb_txn_end(t);
	fs->txn_dirty = true;
	return fs_commit(fs);
}

/* its ROOT_ITEM 8 bytes longer (zeros), as a newer struct could be */
static int newer_root_item(struct arb_fs *fs, struct arb_txn *t)
{
	struct arb_key k = { NEWER_TREE, ARB_ROOT_ITEM, 0 };
	uint8_t buf[sizeof(struct arb_root_item) + 8] = { 0 };
	int ret;

	ret = arb_lookup_item(fs->vol->tree_root, &k, buf, sizeof(buf));
	if (ret < 0)
		return ret;
	if (ret != (int)sizeof(struct arb_root_item))
		return -EUCLEAN;
	ret = arb_del_item(t, fs->vol->tree_root, &k);
	if (!ret)
		ret = arb_insert_item(t, fs->vol->tree_root, &k, buf,
				      sizeof(buf));
	if (!ret)
		printf("tree %llu: ROOT_ITEM of %zu bytes (this version: %zu)\n",
		       (unsigned long long)NEWER_TREE, sizeof(buf),
		       sizeof(struct arb_root_item));
	return ret;
}

/* set bit 62 of s_incompat in both superblock copies */
static int incompat_bit(const char *image)
{
	static const uint64_t offs[2] = { ARB_SUPER_OFFSET0,
					  ARB_SUPER_OFFSET1 };
	struct arb_super sb;
	int fd = open(image, O_RDWR);

	if (fd < 0)
		return -errno;
	for (int i = 0; i < 2; i++) {
		if (pread(fd, &sb, sizeof(sb), (off_t)offs[i]) !=
		    (ssize_t)sizeof(sb)) {
			close(fd);
			return -EIO;
		}
		arb_set_super_s_incompat(&sb, arb_super_s_incompat(&sb) |
						      1ULL << 62);
		arb_csum_block(ARB_CSUM_CRC32C, &sb, sizeof(sb), sb.s_csum);
		if (pwrite(fd, &sb, sizeof(sb), (off_t)offs[i]) !=
		    (ssize_t)sizeof(sb)) {
			close(fd);
			return -EIO;
		}
	}
	if (fsync(fd)) {
		close(fd);
		return -EIO;
	}
	close(fd);
	printf("superblocks: incompatible feature bit 62 set\n");
	return 0;
}

static int flip_byte(const char *image, uint64_t off)
{
	int fd = open(image, O_RDWR);
	uint8_t b;

	if (fd < 0)
		return -errno;
	if (pread(fd, &b, 1, (off_t)off) != 1) {
		close(fd);
		return -EIO;
	}
	b ^= 0x5a;
	if (pwrite(fd, &b, 1, (off_t)off) != 1 || fsync(fd)) {
		close(fd);
		return -EIO;
	}
	close(fd);
	printf("flipped the byte at %llu\n", (unsigned long long)off);
	return 0;
}

int main(int argc, char **argv)
{
	struct arb_fs_opts o;
	struct arb_dev *dev;
	struct arb_fs *fs;
	struct arb_txn *t;
	struct target tg;
	struct arb_key k;
	struct arb_file_extent fe;
	const char *image, *kind, *why = NULL;
	uint64_t raw_off = 0;
	int ret;

	if (argc < 3) {
		fprintf(stderr, "usage: arbor-corrupt IMAGE KIND [PATH]\n");
		return 2;
	}
	image = argv[1];
	kind = argv[2];
	if (!strcmp(kind, "truncate")) {
		struct stat st;
		if (stat(image, &st) || truncate(image, st.st_size / 2))
			return die(image, -errno);
		printf("truncated %s from %lld to %lld bytes\n", image,
		       (long long)st.st_size, (long long)st.st_size / 2);
		return 0;
	}
	if (!strcmp(kind, "incompat-bit")) {
		ret = incompat_bit(image);
		return ret ? die(image, ret) : 0;
	}
	if (argc < 4 && strcmp(kind, "newer-root-item")) {
		fprintf(stderr, "arbor-corrupt: %s needs a PATH\n", kind);
		return 2;
	}
	ret = arb_dev_open_file(image, false, 0, &dev);
	if (ret)
		return die(image, ret);
	arb_fs_opts_default(&o);
	o.commit_interval = 0;
	o.keep_orphans = true;
	ret = arb_fs_open(dev, &o, &fs, &why);
	if (ret) {
		arb_dev_destroy(dev);
		fprintf(stderr, "arbor-corrupt: %s: %s\n", image,
			why ? why : strerror(-ret));
		return 1;
	}
	fs_lock(fs);
	memset(&tg, 0, sizeof(tg));
	if (argc >= 4) {
		ret = resolve(fs, argv[3], &tg);
		if (ret) {
			fs_unlock(fs);
			arb_fs_close(fs);
			return die(argv[3], ret);
		}
		printf("%s: inode %llu, name '%s' in dir %llu, index %llu\n",
		       argv[3], (unsigned long long)tg.ino, tg.name,
		       (unsigned long long)tg.dir,
		       (unsigned long long)tg.index);
	}
	if (!strcmp(kind, "newer-root-item")) {
		/* the tree in a commit of its own: then only the root tree's
		 * item changes, and no dirty root rewrites it at commit */
		ret = newer_tree(fs);
		if (ret)
			goto out_unlock;
	}
	ret = arb_txn_begin(fs->vol, &t);
	if (ret)
		goto out_unlock;
	if (!strcmp(kind, "newer-root-item")) {
		ret = newer_root_item(fs, t);
	} else if (!strcmp(kind, "nlink")) {
		struct arb_inode in;
		ret = fs_inode_read(fs, tg.ino, &in);
		if (!ret) {
			printf("inode %llu: nlink %u -> %u\n",
			       (unsigned long long)tg.ino, in.nlink,
			       in.nlink + 1);
			in.nlink++;
			ret = fs_inode_write(fs, t, &in);
		}
	} else if (!strcmp(kind, "dangling-dir-item")) {
		printf("inode %llu deleted, its names left\n",
		       (unsigned long long)tg.ino);
		ret = fs_inode_free(fs, t, tg.ino);
	} else if (!strcmp(kind, "missing-dir-index")) {
		k.objectid = tg.dir;
		k.type = ARB_DIR_INDEX;
		k.offset = tg.index;
		printf("deleted DIR_INDEX (%llu, %llu)\n",
		       (unsigned long long)tg.dir, (unsigned long long)tg.index);
		ret = arb_del_item(t, fs_tree0(fs)->root, &k);
	} else if (!strcmp(kind, "missing-dir-item")) {
		k.objectid = tg.dir;
		k.type = ARB_DIR_ITEM;
		k.offset = arb_name_hash(tg.name, strlen(tg.name));
		printf("deleted the DIR_ITEM entry '%s' of dir %llu\n", tg.name,
		       (unsigned long long)tg.dir);
		ret = cut_entry(fs, t, &k, tg.name, false);
	} else if (!strcmp(kind, "missing-inode-ref")) {
		k.objectid = tg.ino;
		k.type = ARB_INODE_REF;
		k.offset = tg.dir;
		printf("deleted the INODE_REF entry '%s' of inode %llu\n",
		       tg.name, (unsigned long long)tg.ino);
		ret = cut_entry(fs, t, &k, tg.name, true);
	} else if (!strcmp(kind, "unlinked")) {
		k.objectid = tg.dir;
		k.type = ARB_DIR_ITEM;
		k.offset = arb_name_hash(tg.name, strlen(tg.name));
		ret = cut_entry(fs, t, &k, tg.name, false);
		k.type = ARB_DIR_INDEX;
		k.offset = tg.index;
		if (!ret)
			ret = arb_del_item(t, fs_tree0(fs)->root, &k);
		k.objectid = tg.ino;
		k.type = ARB_INODE_REF;
		k.offset = tg.dir;
		if (!ret)
			ret = cut_entry(fs, t, &k, tg.name, true);
		printf("inode %llu: name '%s' removed from dir %llu (DIR_ITEM, "
		       "DIR_INDEX %llu, INODE_REF), nlink kept\n",
		       (unsigned long long)tg.ino, tg.name,
		       (unsigned long long)tg.dir,
		       (unsigned long long)tg.index);
	} else if (!strcmp(kind, "orphan-item")) {
		uint8_t none = 0;
		k.objectid = ARB_ORPHAN_OBJECTID;
		k.type = ARB_ORPHAN_ITEM;
		k.offset = tg.ino;
		printf("orphan item for linked inode %llu\n",
		       (unsigned long long)tg.ino);
		ret = arb_insert_item(t, fs_tree0(fs)->root, &k, &none, 0);
	} else if (!strcmp(kind, "refcount") ||
		   !strcmp(kind, "missing-backref")) {
		ret = first_extent(fs, tg.ino, &k, &fe);
		if (!ret && kind[0] == 'r')
			ret = bump_refs(fs, t, arb_file_extent_f_disk_bytenr(&fe),
					arb_file_extent_f_disk_num_bytes(&fe));
		else if (!ret)
			ret = del_backref(fs, t,
					  arb_file_extent_f_disk_bytenr(&fe),
					  tg.ino);
	} else if (!strcmp(kind, "tree-refcount")) {
		uint64_t leaf = 0;
		ret = inode_leaf(fs, tg.ino, &leaf);
		if (ret == -EXDEV)
			ret = 0; /* the root leaf is fine here */
		if (!ret) {
			printf("inode %llu: leaf %llu\n",
			       (unsigned long long)tg.ino,
			       (unsigned long long)leaf);
			ret = bump_refs(fs, t, leaf, fs->vol->nodesize);
		}
	} else if (!strcmp(kind, "overlapping-extents")) {
		ret = overlap(fs, t, tg.ino);
	} else if (!strcmp(kind, "compressed")) {
		ret = first_extent(fs, tg.ino, &k, &fe);
		if (!ret) {
			arb_set_file_extent_f_compression(&fe, 7);
			printf("inode %llu: file extent at %llu: compression "
			       "0 -> 7\n",
			       (unsigned long long)tg.ino,
			       (unsigned long long)k.offset);
			ret = arb_update_item(t, fs_tree0(fs)->root, &k, &fe,
					      sizeof(fe));
		}
	} else if (!strcmp(kind, "bad-data-csum")) {
		ret = first_extent(fs, tg.ino, &k, &fe);
		if (!ret) {
			raw_off = arb_file_extent_f_disk_bytenr(&fe) +
				  arb_file_extent_f_offset(&fe) + 100;
			printf("inode %llu: data extent %llu\n",
			       (unsigned long long)tg.ino,
			       (unsigned long long)
				       arb_file_extent_f_disk_bytenr(&fe));
		}
	} else if (!strcmp(kind, "stale-csum") ||
		   !strcmp(kind, "missing-csum")) {
		uint8_t sums[ARB_CSUMS_PER_ITEM * 4];
		uint64_t leaf = 0;
		int size;

		ret = first_extent(fs, tg.ino, &k, &fe);
		if (!ret && kind[0] == 's') {
			ret = inode_leaf(fs, tg.ino, &leaf);
			if (ret == -EXDEV)
				ret = 0;
		}
		k.objectid = ARB_EXTENT_CSUM_OBJECTID;
		k.type = ARB_EXTENT_CSUM;
		k.offset = arb_file_extent_f_disk_bytenr(&fe);
		size = ret ? ret
			   : arb_lookup_item(fs->csum, &k, sums, sizeof(sums));
		/* an item longer than the buffer would be copied from past
		 * its end */
		if (size > (int)sizeof(sums))
			size = -EFBIG;
		ret = size < 0 ? size : 0;
		if (!ret && kind[0] == 'm') {
			printf("inode %llu: checksum item at %llu deleted\n",
			       (unsigned long long)tg.ino,
			       (unsigned long long)k.offset);
			ret = arb_del_item(t, fs->csum, &k);
		} else if (!ret) {
			printf("inode %llu: its checksum item at %llu copied "
			       "to %llu (the leaf holding the inode)\n",
			       (unsigned long long)tg.ino,
			       (unsigned long long)k.offset,
			       (unsigned long long)leaf);
			k.offset = leaf;
			ret = arb_insert_item(t, fs->csum, &k, sums,
					      (uint32_t)size);
		}
	} else if (!strcmp(kind, "stale-highest")) {
		printf("fs tree: highest objectid %llu -> %llu\n",
		       (unsigned long long)arb_root_highest_objectid(fs_tree0(fs)->root),
		       (unsigned long long)tg.ino - 1);
		arb_set_root_item_r_highest_objectid(&fs_tree0(fs)->root->item,
						     tg.ino - 1);
		fs_tree0(fs)->root->dirty = true;
	} else if (!strcmp(kind, "bad-node-csum")) {
		ret = inode_leaf(fs, tg.ino, &raw_off);
		if (!ret) {
			printf("inode %llu: leaf %llu\n",
			       (unsigned long long)tg.ino,
			       (unsigned long long)raw_off);
			raw_off += fs->vol->nodesize / 2;
		}
	} else {
		fprintf(stderr, "arbor-corrupt: unknown kind %s\n", kind);
		ret = -EINVAL;
	}
	if (ret) {
		arb_txn_abort(t);
		goto out_unlock;
	}
	arb_txn_end(t);
	fs->txn_dirty = true;
	ret = fs_commit(fs);
out_unlock:
	fs_unlock(fs);
	if (arb_fs_close(fs) && !ret)
		ret = -EIO;
	if (ret)
		return die(kind, ret);
	if (raw_off && (ret = flip_byte(image, raw_off)))
		return die(image, ret);
	return 0;
}
