/* SPDX-License-Identifier: MIT */
/*
 * idcount.c - a compact id -> count map (see idcount.h): open addressing,
 * linear probing, backward-shift deletion.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "idcount.h"

/* smallest table once one entry exists: 1 KiB */
#define IDCOUNT_MIN_CAP 64

static size_t home_slot(uint64_t id, size_t cap)
{
	/* Fibonacci hashing: the high bits of the product mix every bit of
	 * the id, and inode numbers are mostly sequential */
	unsigned bits = (unsigned)__builtin_ctzll((unsigned long long)cap);

	return (size_t)((id * 0x9E3779B97F4A7C15ULL) >> (64 - bits));
}

void arb_idcount_init(struct arb_idcount *t)
{
	memset(t, 0, sizeof(*t));
}

void arb_idcount_destroy(struct arb_idcount *t)
{
	free(t->slots);
	memset(t, 0, sizeof(*t));
}

void arb_idcount_clear(struct arb_idcount *t)
{
	arb_idcount_destroy(t);
}

/* the slot holding id, or the empty slot where it would go */
static size_t find_slot(const struct arb_idcount *t, uint64_t id)
{
	size_t mask = t->cap - 1, i = home_slot(id, t->cap);

	while (t->slots[i].id && t->slots[i].id != id)
		i = (i + 1) & mask;
	return i;
}

/* Move every entry into a table of cap slots; -ENOMEM keeps the old. */
static int rehash(struct arb_idcount *t, size_t cap)
{
	struct arb_idcount_slot *old = t->slots, *s;
	size_t oldcap = t->cap;

	s = calloc(cap, sizeof(*s));
	if (!s)
		return -ENOMEM;
	t->slots = s;
	t->cap = cap;
	for (size_t i = 0; i < oldcap; i++)
		if (old[i].id)
			t->slots[find_slot(t, old[i].id)] = old[i];
	free(old);
	return 0;
}

uint64_t arb_idcount_get(const struct arb_idcount *t, uint64_t id)
{
	if (!t->cap || !id)
		return 0;
	return t->slots[find_slot(t, id)].count;
}

int arb_idcount_add(struct arb_idcount *t, uint64_t id, uint64_t n)
{
	size_t i;
	int ret;

	if (!id || !n)
		return -EINVAL;
	if (t->cap) {
		i = find_slot(t, id);
		if (t->slots[i].id) {
			t->slots[i].count += n;
			return 0;
		}
	}
	/* a new entry: keep the load at or below 3/4 so probes stay short */
	if ((t->n + 1) * 4 > t->cap * 3) {
		ret = rehash(t, t->cap ? t->cap * 2 : IDCOUNT_MIN_CAP);
		if (ret)
			return ret;
	}
	i = find_slot(t, id);
	t->slots[i].id = id;
	t->slots[i].count = n;
	t->n++;
	return 1;
}

/* true if home slot k lies cyclically in (i, j]: the entry at j may not
 * move back to i, as a lookup starting at k would no longer reach it */
static bool home_between(size_t k, size_t i, size_t j)
{
	if (i <= j)
		return i < k && k <= j;
	return i < k || k <= j;
}

/* Empty slot i, moving later entries of its run back into the hole. */
static void remove_slot(struct arb_idcount *t, size_t i)
{
	size_t mask = t->cap - 1, j = i;

	for (;;) {
		j = (j + 1) & mask;
		if (!t->slots[j].id)
			break;
		if (home_between(home_slot(t->slots[j].id, t->cap), i, j))
			continue;
		t->slots[i] = t->slots[j];
		i = j;
	}
	t->slots[i].id = 0;
	t->slots[i].count = 0;
	t->n--;
}

uint64_t arb_idcount_sub(struct arb_idcount *t, uint64_t id, uint64_t n)
{
	size_t i;

	if (!t->cap || !id)
		return 0;
	i = find_slot(t, id);
	if (!t->slots[i].id)
		return 0;
	if (t->slots[i].count > n) {
		t->slots[i].count -= n;
		return t->slots[i].count;
	}
	remove_slot(t, i);
	/* give memory back once the kernel forgets most inodes; the gap
	 * between 1/8 and 3/4 keeps add/sub at a boundary from rehashing
	 * every time.  Failure to shrink only costs memory. */
	if (t->n == 0)
		arb_idcount_destroy(t);
	else if (t->cap > IDCOUNT_MIN_CAP && t->n * 8 < t->cap)
		(void)rehash(t, t->cap / 2);
	return 0;
}

bool arb_idcount_next(const struct arb_idcount *t, size_t *pos,
		      uint64_t *id, uint64_t *count)
{
	for (; *pos < t->cap; (*pos)++) {
		if (t->slots[*pos].id) {
			*id = t->slots[*pos].id;
			*count = t->slots[*pos].count;
			(*pos)++;
			return true;
		}
	}
	return false;
}

size_t arb_idcount_bytes(const struct arb_idcount *t)
{
	return t->cap * sizeof(*t->slots);
}
