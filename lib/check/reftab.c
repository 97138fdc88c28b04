/* SPDX-License-Identifier: MIT */
/*
 * reftab.c - the checker's reference tables, the plan that cuts the disk
 * address space into parts so that they stay within a memory budget, and
 * the bitmap of the nodes a walk has seen (docs/design/check.md, "fsck in
 * bounded memory").
 */
#include <stdlib.h>
#include <string.h>

#include "check_int.h"

static size_t ck_hash(const uint64_t k[4])
{
	uint64_t h = k[0] * 0x9E3779B97F4A7C15ULL;
	h ^= k[1] * 0xC2B2AE3D27D4EB4FULL;
	h ^= k[2] * 0x165667B19E3779F9ULL;
	h ^= k[3] * 0x27D4EB2F165667C5ULL;
	return (size_t)(h ^ (h >> 29));
}

static int ck_tab_grow(struct ck_tab *t)
{
	struct ck_tab n = { 0 };

	n.size = t->size ? t->size * 2 : 4096;
	n.e = calloc(n.size, sizeof(*n.e));
	if (!n.e)
		return -ENOMEM;
	for (size_t i = 0; i < t->size; i++) {
		if (!t->e[i].k[0])
			continue;
		size_t s = ck_hash(t->e[i].k) & (n.size - 1);
		while (n.e[s].k[0])
			s = (s + 1) & (n.size - 1);
		n.e[s] = t->e[i];
	}
	n.used = t->used;
	free(t->e);
	*t = n;
	return 0;
}

struct ck_ent *ck_tab_get(struct ck_tab *t, const uint64_t k[4], bool create)
{
	if (create && t->used * 2 >= t->size && ck_tab_grow(t))
		return NULL;
	if (!t->size)
		return NULL;
	for (size_t s = ck_hash(k) & (t->size - 1);; s = (s + 1) & (t->size - 1)) {
		struct ck_ent *e = &t->e[s];
		if (!e->k[0]) {
			if (!create)
				return NULL;
			memcpy(e->k, k, sizeof(e->k));
			t->used++;
			return e;
		}
		if (!memcmp(e->k, k, sizeof(e->k)))
			return e;
	}
}

void ck_tab_clear(struct ck_tab *t)
{
	if (t->e)
		memset(t->e, 0, t->size * sizeof(*t->e));
	t->used = 0;
}

void ck_tab_free(struct ck_tab *t)
{
	free(t->e);
	memset(t, 0, sizeof(*t));
}

/* ---- parts ---------------------------------------------------------------- */

int arb_check_plan_make(struct arb_vol *vol, uint64_t budget,
			struct arb_check_plan *p)
{
	uint64_t per_part = budget / ARB_CHECK_ENTRY_BYTES, in_part = 0;
	uint64_t last = 0;
	size_t cap = 8;
	struct arb_iter it;
	struct arb_key k = { 0, 0, 0 };
	int ret;

	memset(p, 0, sizeof(*p));
	p->bound = malloc(cap * sizeof(*p->bound));
	if (!p->bound)
		return -ENOMEM;
	p->bound[0] = 0;
	if (!per_part)
		per_part = 1;
	arb_iter_init(&it, vol->extent_root);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		arb_iter_key(&it, &k);
		if (k.type == ARB_EXTENT_DATA_REF) {
			p->refs++;
		} else if (k.type == ARB_EXTENT_ITEM &&
			   arb_iter_size(&it) >= sizeof(struct arb_extent_item)) {
			const struct arb_extent_item *ei = arb_iter_data(&it);
			if (arb_extent_item_e_flags(ei) &
			    ARB_EXTENT_FLAG_TREE_BLOCK) {
				p->nodes++;
			} else {
				p->data++;
				p->data_bytes += k.offset;
			}
		}
		/* cut only between extents: an extent and its references
		 * (same objectid) stay in one part */
		if (budget && in_part >= per_part && k.objectid != last &&
		    p->nparts + 1 < ARB_CHECK_MAX_PARTS) {
			if (p->nparts + 2 > cap) {
				uint64_t *n;
				cap *= 2;
				n = realloc(p->bound, cap * sizeof(*n));
				if (!n) {
					arb_iter_release(&it);
					arb_check_plan_free(p);
					return -ENOMEM;
				}
				p->bound = n;
			}
			p->bound[++p->nparts] = k.objectid;
			in_part = 0;
		}
		in_part++;
		last = k.objectid;
	}
	arb_iter_release(&it);
	if (ret < 0)
		p->nparts = 0; /* unreadable: one part, the checkers say why */
	p->bound[++p->nparts] = UINT64_MAX;
	return 0;
}

void arb_check_plan_free(struct arb_check_plan *p)
{
	free(p->bound);
	memset(p, 0, sizeof(*p));
}

/* ---- nodes seen ----------------------------------------------------------- */

int arb_check_seen_init(struct arb_vol *vol, struct arb_check_seen *s)
{
	s->sectorsize = vol->sectorsize;
	s->nbits = vol->total_bytes / vol->sectorsize;
	s->bits = calloc((s->nbits + 63) / 64, sizeof(uint64_t));
	return s->bits ? 0 : -ENOMEM;
}

bool arb_check_seen_test(const struct arb_check_seen *s, uint64_t addr)
{
	uint64_t b = addr / s->sectorsize;

	if (addr % s->sectorsize || b >= s->nbits)
		return false;
	return s->bits[b / 64] >> (b % 64) & 1;
}

bool arb_check_seen_test_set(struct arb_check_seen *s, uint64_t addr)
{
	uint64_t b = addr / s->sectorsize;

	if (addr % s->sectorsize || b >= s->nbits)
		return false;
	if (s->bits[b / 64] >> (b % 64) & 1)
		return true;
	s->bits[b / 64] |= 1ULL << (b % 64);
	return false;
}

void arb_check_seen_clear(struct arb_check_seen *s)
{
	memset(s->bits, 0, (s->nbits + 63) / 64 * sizeof(uint64_t));
}

void arb_check_seen_free(struct arb_check_seen *s)
{
	free(s->bits);
	s->bits = NULL;
}
