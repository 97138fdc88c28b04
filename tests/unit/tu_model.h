/* SPDX-License-Identifier: MIT */
/*
 * tu_model.h - a compact model of one test tree, shared by the storage-core
 * suites that need many trees or many saved states (clone, crash, fault,
 * corrupt).  Header only: each suite is one file plus testutil.c.
 *
 * The key space is a dense array of slots; slot i stands for one key, and
 * slot order is key order:
 *   objectid = 256 + i / 4
 *   i % 4 == 0  (objectid, EXTENT_DATA, 1 MiB)   file extent (REG)
 *   i % 4 == 1  (objectid, EXTENT_DATA, 2 MiB)   file extent (REG)
 *   i % 4 == 2  (objectid, TEST_ITEM, 0)         bytes of (i, version, size)
 *   i % 4 == 3  (objectid, TEST_ITEM, 1)
 * A file extent slot remembers its disk extent; its item bytes are a
 * function of the slot, so a saved model (a memcpy of the array) is enough
 * to compare a whole tree.  File extents allocate data with arb_alloc_data
 * or share ("reflink") another slot's extent, and add/drop their data
 * back-reference (tree id, objectid, key offset - f_offset) as the fs layer
 * would, so that the checker's data reference counts are exercised.
 */
#ifndef ARB_TU_MODEL_H
#define ARB_TU_MODEL_H

#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "testutil.h"

#define TM_OBJ0 256ULL

struct tm_ent {
	uint64_t bytenr;     /* file extent: disk address */
	uint32_t disk_bytes; /* file extent: disk extent length */
	uint32_t size;       /* test item: data size */
	uint32_t version;
	uint16_t foff;       /* file extent: f_offset in sectors */
	uint8_t present;
};

struct tmodel {
	struct tm_ent *e;
	size_t n;     /* slots */
	size_t count; /* present slots */
	uint64_t id;  /* tree id */
};

struct tm_opts {
	uint32_t max_size;  /* largest test item */
	unsigned extent_pct; /* share of ops on file extent slots, 0..100 */
};

static inline void tm_init(struct tmodel *m, uint64_t id, size_t n)
{
	m->e = calloc(n, sizeof(*m->e));
	ck_assert_ptr_nonnull(m->e);
	m->n = n;
	m->count = 0;
	m->id = id;
}

static inline void tm_free(struct tmodel *m)
{
	free(m->e);
	m->e = NULL;
}

/* deep copy (saved states, clones) */
static inline void tm_copy(struct tmodel *dst, const struct tmodel *src, uint64_t id)
{
	tm_init(dst, id, src->n);
	memcpy(dst->e, src->e, src->n * sizeof(*src->e));
	dst->count = src->count;
}

static inline bool tm_is_extent(size_t i)
{
	return i % 4 < 2;
}

static inline void tm_key(size_t i, struct arb_key *k)
{
	k->objectid = TM_OBJ0 + i / 4;
	if (tm_is_extent(i)) {
		k->type = ARB_EXTENT_DATA;
		k->offset = (uint64_t)(i % 4 + 1) << 20;
	} else {
		k->type = ARB_TEST_ITEM;
		k->offset = i % 4 - 2;
	}
}

/* The item bytes slot i holds; returns the size. */
static inline uint32_t tm_item(const struct tm_ent *e, size_t i, uint8_t *buf)
{
	if (tm_is_extent(i)) {
		struct arb_file_extent fe;
		uint64_t foff = (uint64_t)e->foff * ARB_SECTORSIZE;
		memset(&fe, 0, sizeof(fe));
		arb_set_file_extent_f_generation(&fe, e->version);
		arb_set_file_extent_f_ram_bytes(&fe, e->disk_bytes - foff);
		arb_set_file_extent_f_type(&fe, ARB_FILE_EXTENT_REG);
		arb_set_file_extent_f_disk_bytenr(&fe, e->bytenr);
		arb_set_file_extent_f_disk_num_bytes(&fe, e->disk_bytes);
		arb_set_file_extent_f_offset(&fe, foff);
		arb_set_file_extent_f_num_bytes(&fe, e->disk_bytes - foff);
		memcpy(buf, &fe, sizeof(fe));
		return sizeof(fe);
	}
	uint64_t s = i * 0x9E3779B97F4A7C15ULL + e->version * 31ULL + e->size + 1;
	for (uint32_t j = 0; j < e->size; j++)
		buf[j] = (uint8_t)(tu_rand(&s) >> 56);
	return e->size;
}

/*
 * Compare the tree with the model.  0 equal, 1 different (why says how),
 * <0 a read error.  No ck_assert inside: the crash suite calls it on
 * thousands of images and reports the replay point itself.
 */
static inline int tm_compare(struct arb_root *root, const struct tmodel *m,
			     char *why, size_t whylen)
{
	static uint8_t buf[ARB_MAX_NODESIZE];
	struct arb_iter it;
	struct arb_key k = { 0, 0, 0 }, want;
	size_t i = 0;
	int ret, diff = 0;

	arb_iter_init(&it, root);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		uint32_t size;
		arb_iter_key(&it, &k);
		while (i < m->n && !m->e[i].present)
			i++;
		if (i == m->n) {
			snprintf(why, whylen, "tree %llu: extra item (%llu,%u,%llu)",
				 (unsigned long long)m->id,
				 (unsigned long long)k.objectid, k.type,
				 (unsigned long long)k.offset);
			diff = 1;
			break;
		}
		tm_key(i, &want);
		if (arb_key_cmp(&k, &want)) {
			snprintf(why, whylen,
				 "tree %llu: item (%llu,%u,%llu), model has "
				 "(%llu,%u,%llu)",
				 (unsigned long long)m->id,
				 (unsigned long long)k.objectid, k.type,
				 (unsigned long long)k.offset,
				 (unsigned long long)want.objectid, want.type,
				 (unsigned long long)want.offset);
			diff = 1;
			break;
		}
		size = tm_item(&m->e[i], i, buf);
		if (size != arb_iter_size(&it) ||
		    memcmp(buf, arb_iter_data(&it), size)) {
			snprintf(why, whylen,
				 "tree %llu: item (%llu,%u,%llu) has other "
				 "bytes (size %u, model %u)",
				 (unsigned long long)m->id,
				 (unsigned long long)k.objectid, k.type,
				 (unsigned long long)k.offset,
				 arb_iter_size(&it), size);
			diff = 1;
			break;
		}
		i++;
	}
	arb_iter_release(&it);
	if (ret < 0)
		return ret;
	if (diff)
		return 1;
	while (i < m->n && !m->e[i].present)
		i++;
	if (i < m->n) {
		tm_key(i, &want);
		snprintf(why, whylen, "tree %llu: item (%llu,%u,%llu) missing",
			 (unsigned long long)m->id,
			 (unsigned long long)want.objectid, want.type,
			 (unsigned long long)want.offset);
		return 1;
	}
	return 0;
}

static inline void tm_verify(struct arb_root *root, const struct tmodel *m)
{
	char why[256] = "";
	int ret = tm_compare(root, m, why, sizeof(why));

	ck_assert_msg(ret == 0, "tree %llu differs from its model: %d %s",
		      (unsigned long long)m->id, ret, why);
}

/* A disk extent for slot i: fresh, or a share of another present slot's. */
static inline int tm_new_extent(struct arb_txn *t, struct tmodel *m,
				struct tm_ent *e, uint64_t *rng)
{
	uint64_t b, got, sectors;
	int ret;

	if (tu_rand_range(rng, 3) == 0) {
		for (int probe = 0; probe < 8; probe++) {
			size_t j = (size_t)tu_rand_range(rng, m->n);
			if (!tm_is_extent(j) || !m->e[j].present)
				continue;
			e->bytenr = m->e[j].bytenr;
			e->disk_bytes = m->e[j].disk_bytes;
			e->foff = (uint16_t)tu_rand_range(
				rng, e->disk_bytes / ARB_SECTORSIZE);
			return 0;
		}
	}
	sectors = 1 + tu_rand_range(rng, 4);
	ret = arb_alloc_data(t, sectors * ARB_SECTORSIZE,
			     sectors * ARB_SECTORSIZE, 0, &b, &got);
	if (ret)
		return ret;
	e->bytenr = b;
	e->disk_bytes = (uint32_t)got;
	e->foff = (uint16_t)tu_rand_range(rng, got / ARB_SECTORSIZE);
	return 0;
}

static inline int tm_ref(struct arb_txn *t, const struct tmodel *m, size_t i,
			 const struct tm_ent *e, int delta)
{
	struct arb_key k;

	tm_key(i, &k);
	return arb_ref_data(t, e->bytenr, e->disk_bytes, m->id, k.objectid,
			    k.offset - (uint64_t)e->foff * ARB_SECTORSIZE,
			    delta);
}

/*
 * One random insert, delete or update of slot i (random when i == SIZE_MAX)
 * in root, mirrored in the model.  Returns 0, or the first error of the
 * tree operation (the model is then unchanged) -- callers that inject
 * faults want it; the others assert it is 0.
 */
static inline int tm_op(struct arb_txn *t, struct arb_root *root, struct tmodel *m,
			uint64_t *rng, const struct tm_opts *o, size_t i)
{
	static uint8_t buf[ARB_MAX_NODESIZE];
	struct tm_ent ne, *e;
	struct arb_key k;
	uint32_t size;
	int ret;

	if (i == SIZE_MAX) {
		i = (size_t)tu_rand_range(rng, m->n);
		/* steer the share of file extent slots */
		if (tm_is_extent(i) !=
		    (tu_rand_range(rng, 100) < o->extent_pct))
			i ^= 2;
		if (i >= m->n)
			i = m->n - 1;
	}
	e = &m->e[i];
	tm_key(i, &k);
	ne = *e;
	ne.version++;
	if (e->present && tu_rand_range(rng, 10) < 4) {
		/* delete */
		ret = arb_del_item(t, root, &k);
		if (!ret && tm_is_extent(i))
			ret = tm_ref(t, m, i, e, -1);
		if (ret)
			return ret;
		e->present = 0;
		m->count--;
		return 0;
	}
	if (tm_is_extent(i)) {
		ret = tm_new_extent(t, m, &ne, rng);
		if (ret)
			return ret;
	} else {
		ne.size = (uint32_t)tu_rand_range(rng, o->max_size + 1);
	}
	ne.present = 1;
	size = tm_item(&ne, i, buf);
	if (e->present) {
		ret = arb_update_item(t, root, &k, buf, size);
		if (!ret && tm_is_extent(i)) {
			ret = tm_ref(t, m, i, e, -1);
			if (!ret)
				ret = tm_ref(t, m, i, &ne, 1);
		}
	} else {
		ret = arb_insert_item(t, root, &k, buf, size);
		if (!ret && tm_is_extent(i))
			ret = tm_ref(t, m, i, &ne, 1);
		if (!ret)
			m->count++;
	}
	if (ret)
		return ret;
	*e = ne;
	return 0;
}

/* ---- sets of addresses (node lists) ------------------------------------ */

struct tm_set {
	uint64_t *v;
	size_t n, cap;
};

static inline void tm_set_add(struct tm_set *s, uint64_t x)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 256;
		s->v = realloc(s->v, s->cap * sizeof(*s->v));
		ck_assert_ptr_nonnull(s->v);
	}
	s->v[s->n++] = x;
}

static inline int tm_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* sort, and drop duplicates */
static inline void tm_set_unique(struct tm_set *s)
{
	size_t j = 0;

	qsort(s->v, s->n, sizeof(*s->v), tm_cmp_u64);
	for (size_t i = 0; i < s->n; i++)
		if (!j || s->v[j - 1] != s->v[i])
			s->v[j++] = s->v[i];
	s->n = j;
}

/*
 * Add every node of the subtree at bytenr to nodes, and when data is not
 * NULL, every data extent (address, then length, pairs) its file extent
 * items reference.  Independent of check.c on purpose.
 */
static inline void tm_walk(struct arb_vol *vol, uint64_t bytenr,
			   uint64_t mirror, uint64_t gen, int level,
			   struct tm_set *nodes, struct tm_set *data)
{
	struct arb_node *n;
	int ret = arb_node_read(vol, bytenr, mirror, gen, level, &n);

	ck_assert_msg(ret == 0, "walk: node %llu unreadable: %d",
		      (unsigned long long)bytenr, ret);
	tm_set_add(nodes, bytenr);
	for (uint32_t s = 0; s < arb_nritems(n); s++) {
		struct arb_key k;
		if (level > 0) {
			tm_walk(vol, arb_child_bytenr(n, (int)s),
				arb_child_mirror(n, (int)s),
				arb_child_gen(n, (int)s), level - 1, nodes,
				data);
			continue;
		}
		arb_node_key(n, (int)s, &k);
		if (data && k.type == ARB_EXTENT_DATA &&
		    arb_item_size(n, (int)s) >= sizeof(struct arb_file_extent)) {
			const struct arb_file_extent *fe = arb_item_ptr(n, (int)s);
			/* pack (address, length): addresses are 4 KiB aligned
			 * and lengths small, so one u64 holds both */
			tm_set_add(data, arb_file_extent_f_disk_bytenr(fe) |
						 (arb_file_extent_f_disk_num_bytes(fe) /
						  ARB_SECTORSIZE));
		}
	}
	arb_node_put(vol, n);
}

/* Walk the root tree and every tree it has a ROOT_ITEM for. */
static inline void tm_walk_all(struct arb_vol *vol, struct tm_set *nodes,
			       struct tm_set *data)
{
	struct arb_node *r = vol->tree_root->node;
	struct arb_iter it;
	struct arb_key k = { 0, 0, 0 };
	int ret;

	tm_walk(vol, r->bytenr, r->mirror, arb_node_gen(r), arb_level(r), nodes,
		data);
	arb_iter_init(&it, vol->tree_root);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		const struct arb_root_item *ri = arb_iter_data(&it);
		arb_iter_key(&it, &k);
		if (k.type != ARB_ROOT_ITEM)
			continue;
		tm_walk(vol, arb_root_item_r_bytenr(ri),
			arb_root_item_r_mirror(ri),
			arb_root_item_r_generation(ri), arb_root_item_r_level(ri),
			nodes, data);
	}
	ck_assert_int_eq(ret, 1);
	arb_iter_release(&it);
}

#endif
