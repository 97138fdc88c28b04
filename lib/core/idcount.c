/* SPDX-License-Identifier: MIT */
/*
 * idcount.c - a compact id -> count map (see idcount.h): two open-addressing
 * tables (narrow: 32-bit ids and counts, wide: the rest), linear probing,
 * backward-shift deletion.
 *
 * An id lives in at most one of the tables: lookups try the narrow one
 * first when the id fits, then the wide one.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "idcount.h"

/* smallest table once one entry exists */
#define IDCOUNT_MIN_CAP 64

struct slot32 {
	uint32_t id, count;
};

struct slot64 {
	uint64_t id, count;
};

/* ---- one table --------------------------------------------------------- */

static size_t slot_size(const struct arb_idcount_tab *t)
{
	return t->wide ? sizeof(struct slot64) : sizeof(struct slot32);
}

static uint64_t slot_id(const struct arb_idcount_tab *t, size_t i)
{
	return t->wide ? ((const struct slot64 *)t->slots)[i].id
		       : ((const struct slot32 *)t->slots)[i].id;
}

static uint64_t slot_count(const struct arb_idcount_tab *t, size_t i)
{
	return t->wide ? ((const struct slot64 *)t->slots)[i].count
		       : ((const struct slot32 *)t->slots)[i].count;
}

/* the caller made sure id and count fit a narrow slot */
static void slot_set(struct arb_idcount_tab *t, size_t i, uint64_t id,
		     uint64_t count)
{
	if (t->wide) {
		((struct slot64 *)t->slots)[i].id = id;
		((struct slot64 *)t->slots)[i].count = count;
	} else {
		((struct slot32 *)t->slots)[i].id = (uint32_t)id;
		((struct slot32 *)t->slots)[i].count = (uint32_t)count;
	}
}

static size_t home_slot(uint64_t id, size_t cap)
{
	/* Fibonacci hashing: the high bits of the product mix every bit of
	 * the id, and inode numbers are mostly sequential */
	unsigned bits = (unsigned)__builtin_ctzll((unsigned long long)cap);

	return (size_t)((id * 0x9E3779B97F4A7C15ULL) >> (64 - bits));
}

static void tab_free(struct arb_idcount_tab *t)
{
	free(t->slots);
	t->slots = NULL;
	t->cap = t->n = 0;
}

/* the slot holding id, or the empty slot where it would go (cap > 0) */
static size_t tab_find(const struct arb_idcount_tab *t, uint64_t id)
{
	size_t mask = t->cap - 1, i = home_slot(id, t->cap);
	uint64_t s;

	while ((s = slot_id(t, i)) && s != id)
		i = (i + 1) & mask;
	return i;
}

/* true and *i when id is in the table */
static bool tab_lookup(const struct arb_idcount_tab *t, uint64_t id,
		       size_t *i)
{
	if (!t->cap)
		return false;
	*i = tab_find(t, id);
	return slot_id(t, *i) != 0;
}

/* Move every entry into a table of cap slots; -ENOMEM keeps the old. */
static int tab_rehash(struct arb_idcount_tab *t, size_t cap)
{
	struct arb_idcount_tab old = *t;

	t->slots = calloc(cap, slot_size(t));
	if (!t->slots) {
		*t = old;
		return -ENOMEM;
	}
	t->cap = cap;
	for (size_t i = 0; i < old.cap; i++) {
		uint64_t id = slot_id(&old, i);

		if (id)
			slot_set(t, tab_find(t, id), id, slot_count(&old, i));
	}
	free(old.slots);
	return 0;
}

/* Insert an absent id; keeps the load at or below 3/4 (short probes). */
static int tab_insert(struct arb_idcount_tab *t, uint64_t id, uint64_t count)
{
	int ret;

	if ((t->n + 1) * 4 > t->cap * 3) {
		ret = tab_rehash(t, t->cap ? t->cap * 2 : IDCOUNT_MIN_CAP);
		if (ret)
			return ret;
	}
	slot_set(t, tab_find(t, id), id, count);
	t->n++;
	return 0;
}

/* true if home slot k lies cyclically in (i, j]: the entry at j may not
 * move back to i, as a lookup starting at k would no longer reach it */
static bool home_between(size_t k, size_t i, size_t j)
{
	if (i <= j)
		return i < k && k <= j;
	return i < k || k <= j;
}

/* Empty slot i, moving later entries of its run back into the hole; then
 * give memory back once most entries are gone (the gap between 1/8 and
 * 3/4 keeps add/sub at a boundary from rehashing every time; failing to
 * shrink only costs memory). */
static void tab_remove(struct arb_idcount_tab *t, size_t i)
{
	size_t mask = t->cap - 1, j = i;
	uint64_t id;

	for (;;) {
		j = (j + 1) & mask;
		id = slot_id(t, j);
		if (!id)
			break;
		if (home_between(home_slot(id, t->cap), i, j))
			continue;
		slot_set(t, i, id, slot_count(t, j));
		i = j;
	}
	slot_set(t, i, 0, 0);
	t->n--;
	if (t->n == 0)
		tab_free(t);
	else if (t->cap > IDCOUNT_MIN_CAP && t->n * 8 < t->cap)
		(void)tab_rehash(t, t->cap / 2);
}

/* ---- the map ----------------------------------------------------------- */

static bool fits32(uint64_t v)
{
	return v <= UINT32_MAX;
}

void arb_idcount_init(struct arb_idcount *t)
{
	memset(t, 0, sizeof(*t));
	t->wide.wide = true;
}

void arb_idcount_destroy(struct arb_idcount *t)
{
	tab_free(&t->narrow);
	tab_free(&t->wide);
	t->n = 0;
}

void arb_idcount_clear(struct arb_idcount *t)
{
	arb_idcount_destroy(t);
}

/* the table holding id and its slot, or NULL */
static struct arb_idcount_tab *find(const struct arb_idcount *t,
				    uint64_t id, size_t *i)
{
	struct arb_idcount *m = (struct arb_idcount *)t;

	if (!id)
		return NULL;
	if (fits32(id) && tab_lookup(&m->narrow, id, i))
		return &m->narrow;
	if (tab_lookup(&m->wide, id, i))
		return &m->wide;
	return NULL;
}

uint64_t arb_idcount_get(const struct arb_idcount *t, uint64_t id)
{
	struct arb_idcount_tab *tab;
	size_t i;

	tab = find(t, id, &i);
	return tab ? slot_count(tab, i) : 0;
}

/* id's count in the narrow table outgrows 32 bits: move it to the wide */
static int widen(struct arb_idcount *t, size_t i, uint64_t count)
{
	uint64_t id = slot_id(&t->narrow, i);
	int ret = tab_insert(&t->wide, id, count);

	if (ret)
		return ret;
	/* tab_insert did not touch the narrow table: i is still id's slot */
	tab_remove(&t->narrow, i);
	return 0;
}

int arb_idcount_add(struct arb_idcount *t, uint64_t id, uint64_t n)
{
	struct arb_idcount_tab *tab;
	uint64_t c;
	size_t i;
	int ret;

	if (!id || !n)
		return -EINVAL;
	tab = find(t, id, &i);
	if (tab) {
		c = slot_count(tab, i);
		if (c + n < c)
			return -EOVERFLOW;
		if (!tab->wide && !fits32(c + n))
			return widen(t, i, c + n);
		slot_set(tab, i, id, c + n);
		return 0;
	}
	tab = fits32(id) && fits32(n) ? &t->narrow : &t->wide;
	ret = tab_insert(tab, id, n);
	if (ret)
		return ret;
	t->n++;
	return 1;
}

uint64_t arb_idcount_sub(struct arb_idcount *t, uint64_t id, uint64_t n)
{
	struct arb_idcount_tab *tab;
	uint64_t c;
	size_t i;

	tab = find(t, id, &i);
	if (!tab)
		return 0;
	c = slot_count(tab, i);
	if (c > n) {
		slot_set(tab, i, id, c - n);
		return c - n;
	}
	tab_remove(tab, i);
	t->n--;
	return 0;
}

bool arb_idcount_next(const struct arb_idcount *t, size_t *pos,
		      uint64_t *id, uint64_t *count)
{
	/* positions [0, narrow.cap) are the narrow table's, then the wide */
	for (;; (*pos)++) {
		const struct arb_idcount_tab *tab = &t->narrow;
		size_t i = *pos;

		if (i >= tab->cap) {
			i -= tab->cap;
			tab = &t->wide;
			if (i >= tab->cap)
				return false;
		}
		if (slot_id(tab, i)) {
			*id = slot_id(tab, i);
			*count = slot_count(tab, i);
			(*pos)++;
			return true;
		}
	}
}

size_t arb_idcount_bytes(const struct arb_idcount *t)
{
	return t->narrow.cap * slot_size(&t->narrow) +
	       t->wide.cap * slot_size(&t->wide);
}
