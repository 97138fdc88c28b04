/* SPDX-License-Identifier: MIT */
/*
 * cache.c - the node cache.
 *
 * Every tree node in memory is a struct arb_node in one hash table keyed by
 * its address.  A node is in exactly one of three states:
 *   pinned   pins > 0: some path or root uses it; never evicted
 *   dirty    changed in the running transaction; on the dirty list until
 *            the commit writes it; never evicted
 *   clean    on the LRU list, evicted first when the cache is over its bound
 * Nodes read from disk are validated before anyone sees them (see
 * arb_node_validate); a node that fails gives -EUCLEAN and a log line with
 * its address and the reason.
 *
 * Duplicated metadata: a node may have a second copy (node->mirror, from
 * the pointer that reaches it), byte-identical to the first.  The commit
 * writes both.  A read whose first copy fails (I/O error, checksum, uuid,
 * address, generation/level against the parent's pointer, structure) reads
 * the second; if that one validates it is used and written back over the
 * first (self-heal), counted in vol->nr_healed and logged.  Only when no
 * copy validates does the read fail (vol->nr_unrecoverable).  A freed node is unhashed and marked STALE so
 * that the address can be reused at once, and its memory goes with its last
 * pin.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core.h"

/* arb_node_nowait: this thread's setting, and the node it missed */
static __thread bool nowait;
static __thread uint64_t nowait_miss;

static size_t hash_slot(const struct arb_cache *c, uint64_t bytenr)
{
	uint64_t h = bytenr * 0x9E3779B97F4A7C15ULL;
	return (size_t)(h >> 20) & (c->table_size - 1);
}

/*
 * Node buffers.  Each node read from the image needs a fresh nodesize
 * buffer, and a fresh buffer from malloc costs a page fault per 4 KiB
 * page on first touch: on the VMs measured here 10-12 us each, four per
 * 16 KiB node, as much as reading the node from the host's page cache.
 * So the buffers come from one region of address space reserved at open
 * for the cache's bound (nothing is allocated until touched) and
 * marked for transparent huge pages: where the kernel grants them
 * (THP "always" or "madvise"), one fault maps 2 MiB, 128 nodes.
 * Evicted buffers go on a stack and are reused first, so the region's
 * resident part is the cache's high-water mark.  Nodes beyond the bound
 * (pinned and dirty ones are not evicted) and all of them when the
 * region cannot be had come from malloc, as before.  Under
 * AddressSanitizer a buffer on the stack is poisoned, so a use after
 * free is still caught.
 */
#define BUF_ALIGN (2u << 20)

#if defined(__has_feature)
#if __has_feature(address_sanitizer) /* clang */
#define ARB_BUF_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(ARB_BUF_ASAN)
#include <sanitizer/asan_interface.h>
#define BUF_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define BUF_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define BUF_POISON(p, n) ((void)(p), (void)(n))
#define BUF_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

static void buf_region_init(struct arb_cache *c, size_t nodesize)
{
	size_t size = (c->max_bytes + nodesize - 1) / nodesize * nodesize;
	size_t head;
	uint8_t *p;

	if (!size)
		return;
	if (size >= BUF_ALIGN)
		size = (size + BUF_ALIGN - 1) / BUF_ALIGN * BUF_ALIGN;
	p = mmap(NULL, size + BUF_ALIGN, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return;
	/* 2 MiB-aligned, so that each huge page lies inside */
	head = (BUF_ALIGN - (uintptr_t)p % BUF_ALIGN) % BUF_ALIGN;
	if (head)
		munmap(p, head);
	munmap(p + head + size, BUF_ALIGN - head);
	p += head;
	c->buf_free = malloc(size / nodesize * sizeof(*c->buf_free));
	if (!c->buf_free) {
		munmap(p, size);
		return;
	}
#ifdef MADV_HUGEPAGE
	(void)madvise(p, size, MADV_HUGEPAGE);
#endif
	BUF_POISON(p, size);
	c->buf_base = p;
	c->buf_size = size;
}

static bool buf_in_region(const struct arb_cache *c, const void *p)
{
	return c->buf_base && (const uint8_t *)p >= c->buf_base &&
	       (const uint8_t *)p < c->buf_base + c->buf_size;
}

static void *buf_get(struct arb_cache *c, size_t nodesize)
{
	void *p;

	if (c->buf_nr_free)
		p = c->buf_free[--c->buf_nr_free];
	else if (c->buf_base && c->buf_size - c->buf_next >= nodesize)
		p = c->buf_base + (c->buf_next += nodesize) - nodesize;
	else
		return malloc(nodesize);
	BUF_UNPOISON(p, nodesize);
	return p;
}

static void buf_put(struct arb_cache *c, void *p, size_t nodesize)
{
	if (!buf_in_region(c, p)) {
		free(p);
		return;
	}
	BUF_POISON(p, nodesize);
	c->buf_free[c->buf_nr_free++] = p;
}

int arb_cache_init(struct arb_vol *vol, size_t max_bytes)
{
	struct arb_cache *c = &vol->cache;
	size_t want = max_bytes / vol->nodesize * 2, n = 1024;

	memset(c, 0, sizeof(*c));
	while (n < want && n < (1u << 24))
		n <<= 1;
	c->table = calloc(n, sizeof(*c->table));
	if (!c->table)
		return -ENOMEM;
	c->table_size = n;
	c->max_bytes = max_bytes;
	buf_region_init(c, vol->nodesize);
	return 0;
}

static void lru_del(struct arb_cache *c, struct arb_node *n)
{
	if (n->lru_prev)
		n->lru_prev->lru_next = n->lru_next;
	else if (c->lru_head == n)
		c->lru_head = n->lru_next;
	else
		return; /* not on the list */
	if (n->lru_next)
		n->lru_next->lru_prev = n->lru_prev;
	else
		c->lru_tail = n->lru_prev;
	n->lru_prev = n->lru_next = NULL;
}

static void lru_add_tail(struct arb_cache *c, struct arb_node *n)
{
	n->lru_next = NULL;
	n->lru_prev = c->lru_tail;
	if (c->lru_tail)
		c->lru_tail->lru_next = n;
	else
		c->lru_head = n;
	c->lru_tail = n;
}

/* first in line for eviction (arb_cache_shrink takes the head) */
static void lru_add_head(struct arb_cache *c, struct arb_node *n)
{
	n->lru_prev = NULL;
	n->lru_next = c->lru_head;
	if (c->lru_head)
		c->lru_head->lru_prev = n;
	else
		c->lru_tail = n;
	c->lru_head = n;
}

static void dirty_del(struct arb_cache *c, struct arb_node *n)
{
	if (!(n->flags & ARB_NODE_DIRTY))
		return;
	if (n->dirty_prev)
		n->dirty_prev->dirty_next = n->dirty_next;
	else
		c->dirty_head = n->dirty_next;
	if (n->dirty_next)
		n->dirty_next->dirty_prev = n->dirty_prev;
	n->dirty_prev = n->dirty_next = NULL;
	n->flags &= ~ARB_NODE_DIRTY;
	c->nr_dirty--;
}

static void hash_del(struct arb_cache *c, struct arb_node *n)
{
	struct arb_node **pp = &c->table[hash_slot(c, n->bytenr)];

	while (*pp) {
		if (*pp == n) {
			*pp = n->hash_next;
			n->hash_next = NULL;
			c->nr_nodes--;
			return;
		}
		pp = &(*pp)->hash_next;
	}
}

static struct arb_node *hash_find(struct arb_cache *c, uint64_t bytenr)
{
	struct arb_node *n = c->table[hash_slot(c, bytenr)];

	while (n && n->bytenr != bytenr)
		n = n->hash_next;
	return n;
}

static void node_free(struct arb_vol *vol, struct arb_node *n)
{
	buf_put(&vol->cache, n->data, vol->nodesize);
	free(n);
}

void arb_cache_destroy(struct arb_vol *vol)
{
	struct arb_cache *c = &vol->cache;

	for (size_t i = 0; i < c->table_size; i++) {
		struct arb_node *n = c->table[i], *next;
		for (; n; n = next) {
			next = n->hash_next;
			node_free(vol, n);
		}
	}
	if (c->buf_base) {
		BUF_UNPOISON(c->buf_base, c->buf_size);
		munmap(c->buf_base, c->buf_size);
	}
	free(c->buf_free);
	free(c->table);
	memset(c, 0, sizeof(*c));
}

void arb_cache_shrink(struct arb_vol *vol)
{
	struct arb_cache *c = &vol->cache;

	while (c->lru_head && c->nr_nodes * vol->nodesize > c->max_bytes) {
		struct arb_node *n = c->lru_head;
		lru_del(c, n);
		hash_del(c, n);
		node_free(vol, n);
		c->evictions++;
	}
}

static struct arb_node *node_alloc(struct arb_vol *vol, uint64_t bytenr)
{
	struct arb_node *n = calloc(1, sizeof(*n));

	if (!n)
		return NULL;
	n->data = buf_get(&vol->cache, vol->nodesize);
	if (!n->data) {
		free(n);
		return NULL;
	}
	n->bytenr = bytenr;
	return n;
}

static void hash_add(struct arb_cache *c, struct arb_node *n)
{
	size_t s = hash_slot(c, n->bytenr);

	n->hash_next = c->table[s];
	c->table[s] = n;
	c->nr_nodes++;
}

void arb_node_pin(struct arb_node *n)
{
	n->pins++;
}

void arb_node_put(struct arb_vol *vol, struct arb_node *n)
{
	if (!n)
		return;
	ARB_ASSERT(n->pins > 0);
	if (--n->pins > 0)
		return;
	if (n->flags & ARB_NODE_STALE) {
		node_free(vol, n);
		return;
	}
	if (!(n->flags & ARB_NODE_DIRTY)) {
		lru_add_tail(&vol->cache, n);
		arb_cache_shrink(vol);
	}
}

void arb_node_put_cold(struct arb_vol *vol, struct arb_node *n)
{
	if (!n)
		return;
	ARB_ASSERT(n->pins > 0);
	if (n->pins > 1 || (n->flags & (ARB_NODE_STALE | ARB_NODE_DIRTY))) {
		arb_node_put(vol, n);
		return;
	}
	n->pins = 0;
	lru_add_head(&vol->cache, n);
	arb_cache_shrink(vol);
}

void arb_node_mark_dirty(struct arb_vol *vol, struct arb_node *n)
{
	struct arb_cache *c = &vol->cache;

	if (n->flags & ARB_NODE_DIRTY)
		return;
	lru_del(c, n);
	n->flags |= ARB_NODE_DIRTY;
	n->dirty_prev = NULL;
	n->dirty_next = c->dirty_head;
	if (c->dirty_head)
		c->dirty_head->dirty_prev = n;
	c->dirty_head = n;
	c->nr_dirty++;
}

void arb_node_forget(struct arb_vol *vol, uint64_t bytenr)
{
	struct arb_cache *c = &vol->cache;
	struct arb_node *n = hash_find(c, bytenr);

	if (!n)
		return;
	hash_del(c, n);
	dirty_del(c, n);
	lru_del(c, n);
	if (n->pins == 0)
		node_free(vol, n);
	else
		n->flags |= ARB_NODE_STALE;
}

uint32_t arb_leaf_free_space(const struct arb_vol *vol,
			     const struct arb_node *leaf)
{
	uint32_t nr = arb_nritems(leaf);
	uint32_t end = sizeof(struct arb_node_header) + nr * sizeof(struct arb_item);
	uint32_t data_start = nr ? arb_item_i_offset(arb_item_nr(leaf, nr - 1))
				 : vol->nodesize;
	return data_start - end;
}

#define BAD(msg)                                                               \
	do {                                                                   \
		reason = msg;                                                  \
		goto bad;                                                      \
	} while (0)

int arb_node_validate(struct arb_vol *vol, const uint8_t *buf, uint64_t bytenr,
		      const char **why)
{
	const struct arb_node_header *h = (const void *)buf;
	const char *reason;
	uint32_t nr, level;
	struct arb_key prev, k;

	if (arb_csum_verify(vol->csum_type, buf, vol->nodesize))
		BAD("checksum mismatch");
	if (memcmp(h->h_uuid, vol->uuid, ARB_UUID_SIZE))
		BAD("node belongs to another filesystem (uuid)");
	if (arb_node_header_h_bytenr(h) != bytenr)
		BAD("node address in header does not match its location");
	if (arb_node_header_h_generation(h) > vol->generation ||
	    arb_node_header_h_generation(h) == 0)
		BAD("generation newer than the superblock's");
	if (arb_node_header_h_owner(h) == 0)
		BAD("owner is 0");
	level = arb_node_header_h_level(h);
	if (level >= ARB_MAX_LEVEL)
		BAD("level out of range");
	nr = arb_node_header_h_nritems(h);
	if (level > 0) {
		const struct arb_key_ptr *p = (const void *)(h + 1);
		if (nr == 0 || nr > arb_node_max_ptrs(vol))
			BAD("bad pointer count in internal node");
		for (uint32_t i = 0; i < nr; i++) {
			uint64_t b = arb_key_ptr_p_blockptr(&p[i]);
			arb_key_from_disk(&k, &p[i].p_key);
			if (i && arb_key_cmp(&prev, &k) >= 0)
				BAD("keys out of order in internal node");
			uint64_t m = arb_key_ptr_p_mirror(&p[i]);
			if (b < ARB_DATA_START || b % vol->sectorsize ||
			    b + vol->nodesize > vol->total_bytes)
				BAD("child pointer out of range");
			if (vol->meta_copies < 2 && m)
				BAD("second-copy pointer on a single-copy volume");
			if (vol->meta_copies >= 2 &&
			    (m < ARB_DATA_START || m % vol->sectorsize ||
			     m + vol->nodesize > vol->total_bytes ||
			     (m < b + vol->nodesize && b < m + vol->nodesize)))
				BAD("second-copy pointer out of range");
			if (arb_key_ptr_p_generation(&p[i]) >
			    arb_node_header_h_generation(h))
				BAD("child generation newer than parent");
			prev = k;
		}
	} else {
		const struct arb_item *it = (const void *)(h + 1);
		uint32_t end = vol->nodesize;
		uint64_t items_end = sizeof(*h) + (uint64_t)nr * sizeof(*it);
		if (items_end > vol->nodesize)
			BAD("item count too large for node");
		for (uint32_t i = 0; i < nr; i++) {
			uint32_t off = arb_item_i_offset(&it[i]);
			uint32_t size = arb_item_i_size(&it[i]);
			arb_key_from_disk(&k, &it[i].i_key);
			if (i && arb_key_cmp(&prev, &k) >= 0)
				BAD("keys out of order in leaf");
			if ((uint64_t)off + size != end)
				BAD("item data not contiguous");
			if (off < items_end)
				BAD("item data overlaps item headers");
			end = off;
			prev = k;
		}
	}
	return 0;
bad:
	if (why)
		*why = reason;
	return -EUCLEAN;
}

/* the checks of a copy read into buf */
static int copy_check(struct arb_vol *vol, const uint8_t *buf,
		      uint64_t bytenr, uint64_t expect_gen, int expect_level,
		      const char **why)
{
	int ret = arb_node_validate(vol, buf, bytenr, why);

	if (ret)
		return ret;
	if ((expect_gen != (uint64_t)-1 &&
	     arb_node_header_h_generation((const void *)buf) != expect_gen) ||
	    (expect_level >= 0 &&
	     arb_node_header_h_level((const void *)buf) != expect_level)) {
		*why = "generation or level differs from the parent's pointer "
		       "(lost or misplaced write)";
		return -EUCLEAN;
	}
	return 0;
}

int arb_node_read_copy(struct arb_vol *vol, uint8_t *buf, uint64_t addr,
		       uint64_t bytenr, uint64_t expect_gen, int expect_level,
		       const char **why)
{
	int ret;

	ret = arb_dev_read(vol->dev, buf, vol->nodesize, addr, ARB_IO_NODE);
	if (ret) {
		*why = "read error";
		return ret;
	}
	return copy_check(vol, buf, bytenr, expect_gen, expect_level, why);
}

static bool addr_ok(const struct arb_vol *vol, uint64_t a)
{
	return a >= ARB_DATA_START && a % vol->sectorsize == 0 &&
	       a + vol->nodesize <= vol->total_bytes;
}

/*
 * The first copy at bytenr failed (ret, why1): answer from the second copy
 * at mirror into buf, and rewrite the first from it.
 */
static int read_mirror(struct arb_vol *vol, uint8_t *buf, uint64_t bytenr,
		       uint64_t mirror, uint64_t expect_gen, int expect_level,
		       int ret1, const char *why1)
{
	const char *why2 = NULL;
	int ret;

	if (!addr_ok(vol, mirror)) {
		arb_log(ARB_LOG_ERR, "node %llu: second copy address %llu out "
			"of range", (unsigned long long)bytenr,
			(unsigned long long)mirror);
		return ret1;
	}
	ret = arb_node_read_copy(vol, buf, mirror, bytenr, expect_gen,
				 expect_level, &why2);
	if (ret) {
		arb_log(ARB_LOG_ERR,
			"node %llu: both copies bad: first: %s; second (at "
			"%llu): %s", (unsigned long long)bytenr, why1,
			(unsigned long long)mirror, why2);
		/* report the first copy's error, as with a single copy */
		return ret1;
	}
	vol->nr_healed++;
	if (vol->readonly || vol->fatal_error) {
		/* read-only (fsck -n) or a failed commit: write nothing */
		arb_log(ARB_LOG_WARN,
			"node %llu (tree %llu, level %d): first copy bad (%s); "
			"read the second copy at %llu; not rewritten: read-only",
			(unsigned long long)bytenr,
			(unsigned long long)arb_node_header_h_owner((void *)buf),
			arb_node_header_h_level((void *)buf), why1,
			(unsigned long long)mirror);
		return 0;
	}
	/* the copies are identical and the node is reachable from the last
	 * commit: rewriting the first copy with the same bytes is safe */
	ret = arb_dev_write(vol->dev, buf, vol->nodesize, bytenr, ARB_IO_NODE);
	arb_log(ARB_LOG_WARN,
		"node %llu (tree %llu, level %d): first copy bad (%s); healed "
		"from the second copy at %llu%s",
		(unsigned long long)bytenr,
		(unsigned long long)arb_node_header_h_owner((void *)buf),
		arb_node_header_h_level((void *)buf), why1,
		(unsigned long long)mirror,
		ret ? ", but rewriting the first copy failed" : "");
	return 0;
}

int arb_node_read(struct arb_vol *vol, uint64_t bytenr, uint64_t mirror,
		  uint64_t expect_gen, int expect_level, struct arb_node **out)
{
	struct arb_cache *c = &vol->cache;
	struct arb_node *n = hash_find(c, bytenr);
	const char *why = NULL;
	int ret;

	if (n) {
		c->hits++;
		if (n->pins == 0)
			lru_del(c, n);
		n->pins++;
	} else {
		int cached = -1;

		if (!addr_ok(vol, bytenr)) {
			c->misses++;
			arb_log(ARB_LOG_ERR, "node %llu: address out of range",
				(unsigned long long)bytenr);
			vol->nr_unrecoverable++;
			return -EUCLEAN;
		}
		n = node_alloc(vol, bytenr);
		if (!n)
			return -ENOMEM;
		if (nowait) {
			/* one read: from the host's cache, or none */
			cached = arb_dev_read_cached(vol->dev, n->data,
						     vol->nodesize, bytenr,
						     ARB_IO_NODE);
			if (cached == 0) {
				node_free(vol, n);
				nowait_miss = bytenr;
				return -EWOULDBLOCK;
			}
		}
		c->misses++;
		if (cached == 1)
			ret = copy_check(vol, n->data, bytenr, expect_gen,
					 expect_level, &why);
		else
			ret = arb_node_read_copy(vol, n->data, bytenr, bytenr,
						 expect_gen, expect_level,
						 &why);
		if (ret && mirror)
			ret = read_mirror(vol, n->data, bytenr, mirror,
					  expect_gen, expect_level, ret, why);
		else if (ret)
			arb_log(ARB_LOG_ERR, "node %llu: %s: %s (%d)",
				(unsigned long long)bytenr,
				ret == -EUCLEAN ? "corrupt" : "unreadable", why,
				ret);
		if (ret) {
			vol->nr_unrecoverable++;
			node_free(vol, n);
			return ret;
		}
		n->mirror = mirror;
		n->pins = 1;
		hash_add(c, n);
	}
	if ((expect_gen != (uint64_t)-1 && arb_node_gen(n) != expect_gen) ||
	    (expect_level >= 0 && arb_level(n) != expect_level)) {
		arb_log(ARB_LOG_ERR,
			"node %llu: expected generation %llu level %d, found "
			"generation %llu level %d (lost or misplaced write)",
			(unsigned long long)bytenr,
			(unsigned long long)expect_gen, expect_level,
			(unsigned long long)arb_node_gen(n), arb_level(n));
		arb_node_put(vol, n);
		return -EUCLEAN;
	}
	*out = n;
	return 0;
}

/* ---- readahead of siblings ----------------------------------------------- */

/* The stream of parent, or the least recently used one reset for it. */
static struct arb_ra_stream *ra_stream(struct arb_cache *c, uint64_t parent,
				       bool *fresh)
{
	struct arb_ra_stream *old = &c->ra[0];

	for (int i = 0; i < ARB_RA_STREAMS; i++) {
		struct arb_ra_stream *s = &c->ra[i];

		if (s->parent == parent) {
			*fresh = false;
			return s;
		}
		if (s->used < old->used)
			old = s;
	}
	old->parent = parent;
	old->last = old->end = -2;
	old->win = ARB_RA_FIRST;
	old->scattered = 0;
	*fresh = true;
	return old;
}

/* Hint children from..to of parent that are not cached, one request per
 * run of adjacent addresses. */
static void ra_issue(struct arb_vol *vol, const struct arb_node *parent,
		     int from, int to)
{
	uint64_t start = 0, len = 0;

	for (int i = from; i <= to; i++) {
		uint64_t b = arb_child_bytenr(parent, i);

		if (hash_find(&vol->cache, b))
			continue;
		vol->cache.readahead++;
		if (len && b == start + len) {
			len += vol->nodesize;
			continue;
		}
		if (len)
			arb_dev_readahead(vol->dev, start, len);
		start = b;
		len = vol->nodesize;
	}
	if (len)
		arb_dev_readahead(vol->dev, start, len);
}

void arb_node_hint_children(struct arb_vol *vol, const struct arb_node *parent,
			    int from, int to)
{
	int nr = (int)arb_nritems(parent);

	if (!vol->dev->ops->readahead || from >= nr || to < from)
		return;
	if (from < 0)
		from = 0;
	if (to >= nr)
		to = nr - 1;
	ra_issue(vol, parent, from, to);
}

bool arb_node_is_cached(struct arb_vol *vol, uint64_t bytenr)
{
	return hash_find(&vol->cache, bytenr) != NULL;
}

void arb_node_hint(struct arb_vol *vol, uint64_t bytenr)
{
	if (!vol->dev->ops->readahead || hash_find(&vol->cache, bytenr))
		return;
	vol->cache.readahead++;
	arb_dev_readahead(vol->dev, bytenr, vol->nodesize);
}

bool arb_node_nowait(bool on)
{
	bool was = nowait;

	nowait = on;
	return was;
}

uint64_t arb_node_nowait_miss(void)
{
	return nowait_miss;
}

/*
 * The children of parent around slot that map file data: all of a
 * checksum-tree parent's, or the run of children holding nothing but one
 * file's extent items (the child just before the run too: it may hold the
 * file's first extents).  False when the child at slot is neither, as
 * for the inode items and directory entries a cold `find` misses.
 */
static bool data_map_run(const struct arb_node *parent, int slot, int *from,
			 int *to)
{
	int nr = (int)arb_nritems(parent), lo = slot, hi = slot;
	struct arb_key k, o;

	arb_node_key(parent, slot, &k);
	if (k.objectid == ARB_EXTENT_CSUM_OBJECTID &&
	    k.type == ARB_EXTENT_CSUM) {
		*from = 0;
		*to = nr - 1;
		return true;
	}
	if (k.type != ARB_EXTENT_DATA || slot + 1 >= nr)
		return false;
	arb_node_key(parent, slot + 1, &o);
	if (o.objectid != k.objectid || o.type != ARB_EXTENT_DATA)
		return false;
	while (lo > 0) {
		arb_node_key(parent, lo - 1, &o);
		lo--;
		if (o.objectid != k.objectid || o.type != ARB_EXTENT_DATA)
			break;
	}
	while (hi + 1 < nr) {
		arb_node_key(parent, hi + 1, &o);
		if (o.objectid != k.objectid || o.type != ARB_EXTENT_DATA)
			break;
		hi++;
	}
	*from = lo;
	*to = hi;
	return true;
}

/* The scattered-miss rule (ARB_RA_SCATTER_MISSES): at most
 * ARB_RA_SCATTER_NODES of the data-map children around slot, once per
 * stream. */
static void ra_scatter(struct arb_vol *vol, struct arb_ra_stream *s,
		       const struct arb_node *parent, int slot)
{
	int from, to;

	if (s->scattered < 0 || !data_map_run(parent, slot, &from, &to) ||
	    ++s->scattered < ARB_RA_SCATTER_MISSES)
		return;
	s->scattered = -1;
	if (to - from + 1 > ARB_RA_SCATTER_NODES) {
		from = slot - ARB_RA_SCATTER_NODES / 2 > from
			       ? slot - ARB_RA_SCATTER_NODES / 2
			       : from;
		to = from + ARB_RA_SCATTER_NODES - 1 < to
			     ? from + ARB_RA_SCATTER_NODES - 1
			     : to;
	}
	ra_issue(vol, parent, from, to);
}

void arb_node_readahead(struct arb_vol *vol, const struct arb_node *parent,
			int slot, bool seq)
{
	struct arb_cache *c = &vol->cache;
	int nr = (int)arb_nritems(parent);
	struct arb_ra_stream *s;
	bool fresh, in_order;

	/* only a miss can start or move a stream: hits cost no I/O */
	if (!vol->dev->ops->readahead || slot < 0 || slot >= nr ||
	    hash_find(c, arb_child_bytenr(parent, slot)))
		return;
	s = ra_stream(c, parent->bytenr, &fresh);
	s->used = ++c->ra_clock;
	/* the next child after the previous miss, or one hinted already:
	 * a scan, not a random lookup that happens to share the parent */
	in_order = seq || (!fresh && slot > s->last &&
			   (slot == s->last + 1 || slot <= s->end));
	s->last = slot;
	if (!in_order) {
		ra_scatter(vol, s, parent, slot);
		return;
	}
	/* refill when half of the window is used up */
	if (slot + s->win / 2 > s->end) {
		int from = slot + 1 > s->end + 1 ? slot + 1 : s->end + 1;
		int to = slot + s->win < nr - 1 ? slot + s->win : nr - 1;

		if (from <= to)
			ra_issue(vol, parent, from, to);
		s->end = to;
		if (s->win < ARB_RA_NODES)
			s->win *= 2;
	}
}

void arb_vol_heal_stats(struct arb_vol *vol, uint64_t *healed,
			uint64_t *failed)
{
	if (healed)
		*healed = vol->nr_healed;
	if (failed)
		*failed = vol->nr_unrecoverable;
}

int arb_node_create(struct arb_vol *vol, uint64_t bytenr, struct arb_node **out)
{
	struct arb_node *n;

	arb_node_forget(vol, bytenr);
	n = node_alloc(vol, bytenr);
	if (!n)
		return -ENOMEM;
	memset(n->data, 0, vol->nodesize);
	n->pins = 1;
	hash_add(&vol->cache, n);
	arb_node_mark_dirty(vol, n);
	*out = n;
	return 0;
}

struct node_write {
	uint64_t addr;
	struct arb_node *n;
};

static int cmp_write_addr(const void *a, const void *b)
{
	const struct node_write *x = a, *y = b;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/*
 * Write every dirty node, both copies, in address order, merging
 * neighbours into one write of up to 1 MiB.  Nodes stay dirty until all
 * writes succeeded.
 */
int arb_cache_write_dirty(struct arb_vol *vol)
{
	struct arb_cache *c = &vol->cache;
	struct node_write *v;
	struct arb_node *n;
	size_t nr = 0, i, j, max_run = (1 << 20) / vol->nodesize;
	uint8_t *buf = NULL;
	int ret = 0;

	if (!c->nr_dirty)
		return 0;
	v = malloc(2 * c->nr_dirty * sizeof(*v));
	buf = malloc((size_t)max_run * vol->nodesize);
	if (!v || !buf) {
		ret = -ENOMEM;
		goto out;
	}
	for (n = c->dirty_head; n; n = n->dirty_next) {
		arb_csum_block(vol->csum_type, n->data, vol->nodesize,
			       arb_hdr(n)->h_csum);
		v[nr++] = (struct node_write){ n->bytenr, n };
		if (n->mirror)
			v[nr++] = (struct node_write){ n->mirror, n };
	}
	qsort(v, nr, sizeof(*v), cmp_write_addr);
	for (i = 0; i < nr; i = j) {
		j = i + 1;
		while (j < nr && j - i < max_run &&
		       v[j].addr == v[j - 1].addr + vol->nodesize)
			j++;
		if (j - i == 1) {
			ret = arb_dev_write(vol->dev, v[i].n->data,
					    vol->nodesize, v[i].addr,
					    ARB_IO_NODE);
		} else {
			for (size_t k = i; k < j; k++)
				memcpy(buf + (k - i) * vol->nodesize,
				       v[k].n->data, vol->nodesize);
			ret = arb_dev_write(vol->dev, buf,
					    (j - i) * vol->nodesize,
					    v[i].addr, ARB_IO_NODE);
		}
		if (ret) {
			arb_log(ARB_LOG_ERR, "writing node %llu failed: %d",
				(unsigned long long)v[i].addr, ret);
			goto out;
		}
	}
	for (i = 0; i < nr; i++) {
		n = v[i].n;
		if (!(n->flags & ARB_NODE_DIRTY))
			continue; /* the other copy of a node done already */
		dirty_del(c, n);
		if (n->pins == 0)
			lru_add_tail(c, n);
	}
	arb_cache_shrink(vol);
out:
	free(buf);
	free(v);
	return ret;
}

/* Drop every dirty node (transaction abort). */
void arb_cache_drop_dirty(struct arb_vol *vol)
{
	struct arb_cache *c = &vol->cache;

	while (c->dirty_head)
		arb_node_forget(vol, c->dirty_head->bytenr);
}
