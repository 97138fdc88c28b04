/* SPDX-License-Identifier: MIT */
/*
 * alloc.c - space allocation and the extent tree.
 *
 * Free space is an in-memory bitmap with one bit per sector, built from the
 * extent tree when a volume is opened: a sector is used when an EXTENT_ITEM
 * covers it or it lies below ARB_DATA_START.  Allocation sets bits at once,
 * so two allocations never overlap.
 *
 * Reference counts change all the time (every shadowed node frees one block
 * and allocates another), and changing the extent tree itself shadows
 * extent-tree nodes.  To break that recursion, changes are queued as
 * delayed references (one head per extent: the net count change and the
 * net change per data back-reference) and applied at commit by
 * arb_run_delayed_refs, which repeats until applying the queue queues
 * nothing new.  That converges because the extent tree's nodes, once
 * shadowed in a transaction, are changed in place.
 *
 * When an extent's count reaches zero its item goes and its space is
 * released: at once when the extent was allocated in this same transaction
 * (nothing committed can point at it), otherwise it stays pinned until the
 * commit that freed it is durable (arb_free_space_unpin), so the last
 * committed generation is never overwritten.
 *
 * Duplicated metadata: a tree node's second copy is allocated with it,
 * searched from its own cursor that starts in the middle of the space (so
 * the two copies of a node are far apart, and the second copies of one
 * commit are contiguous and written in few large writes).  The node's
 * EXTENT_ITEM records it (arb_tree_block_ref.t_mirror) and covers it: the
 * free-space map marks it used at open, and it is released (or pinned)
 * together with the first copy.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

struct arb_free_space {
	uint64_t *bits;   /* 1 = used */
	uint64_t nbits;
	uint64_t free;    /* sectors */
	uint64_t meta_cursor, data_cursor; /* sector numbers */
	uint64_t mirror_cursor; /* second copies of tree nodes */
	/* the transaction whose first node started a cluster (see
	 * node_cluster) */
	uint64_t cluster_txn;
	/* nodes the last transaction allocated, and this one so far */
	uint64_t cluster_last, cluster_cur;
	uint64_t mirror_base; /* where second copies start at open */
	uint64_t reserve; /* sectors kept for tree nodes */
	/* freed by the running transaction, released after its commit;
	 * hold: the range belongs to the held generation (see below) */
	struct range { uint64_t start, len; bool hold; } *pinned; /* sectors */
	size_t nr_pinned, cap_pinned;
	/* the lowest first and second node copies among them, where the
	 * node cursors go back to at unpin; 0: none (sector 0 is never
	 * allocated) */
	uint64_t pinned_low_node, pinned_low_mirror;
	/*
	 * A hold (arb_free_space_hold): every block of generation hold_gen
	 * that a later commit frees stays used in the map, on the held list,
	 * until arb_free_space_release, so that a reader of hold_gen (the
	 * online check) never sees it overwritten.  Not on disk: a crash
	 * forgets the hold and the next open finds these blocks free.
	 */
	bool holding;
	uint64_t hold_gen;
	struct range *held;
	size_t nr_held, cap_held;
	uint64_t held_sectors;
	/*
	 * Grace lists: space freed while data reads ran outside the lock
	 * (arb_data_read_begin).  A range freed during read epoch e stays
	 * used, on grace[e], until every reader registered in e is done
	 * (arb_free_space_grace), so a reader never sees its blocks reused.
	 */
	struct range *grace[2];
	size_t nr_grace[2], cap_grace[2];
	uint64_t grace_sectors;
	/*
	 * Discard (arb_free_space_track_freed): every run that becomes free
	 * is noted here, for arb_fs_trim_freed to give back to the host;
	 * too many, and freed_all asks for a scan of the whole map instead.
	 */
	bool track_freed, freed_all;
	struct range *freed;
	size_t nr_freed, cap_freed;
	/*
	 * History grace (history.c): a range freed by commit gen while the
	 * history lists an older generation stays used in the map, here in
	 * commit order (hist[hist_head..nr_hist)), until no listed
	 * generation is older than gen, or an allocation that cannot be
	 * served otherwise takes it (arb_free_space_history_reclaim).  Not
	 * counted as used: arb_free_bytes includes it.
	 */
	struct hrange { uint64_t start, len, gen; } *hist;
	size_t hist_head, nr_hist, cap_hist;
	uint64_t hist_sectors;
};

struct data_delta {
	uint64_t root, ino, offset;
	int64_t delta;
};

struct dref_head {
	struct dref_head *next;
	uint64_t bytenr, num_bytes;
	int64_t delta;
	bool is_tree, is_new;
	uint64_t owner;
	/* second copy of a tree node allocated in this transaction */
	uint64_t mirror;
	int level;
	struct data_delta *dd;
	size_t nr_dd, cap_dd;
};

struct arb_delayed_refs {
	struct dref_head **table;
	size_t size, count;
};

/* ---- bitmap --------------------------------------------------------------- */

#define FREED_MAX 65536

static int range_add(struct range **v, size_t *n, size_t *cap,
		     struct range r);

static bool bit_test(const struct arb_free_space *f, uint64_t i)
{
	return f->bits[i / 64] >> (i % 64) & 1;
}

static void bits_set(struct arb_free_space *f, uint64_t start, uint64_t n,
		     bool used)
{
	if (!used && f->track_freed && !f->freed_all && n) {
		struct range r = { start, n, false };

		if (f->nr_freed >= FREED_MAX ||
		    range_add(&f->freed, &f->nr_freed, &f->cap_freed, r))
			f->freed_all = true;
	}
	for (uint64_t i = start; i < start + n; i++) {
		uint64_t m = 1ULL << (i % 64);
		if (used && !(f->bits[i / 64] & m)) {
			f->bits[i / 64] |= m;
			f->free--;
		} else if (!used && (f->bits[i / 64] & m)) {
			f->bits[i / 64] &= ~m;
			f->free++;
		}
	}
}

/* first free sector at or after i, or nbits */
static uint64_t next_free(const struct arb_free_space *f, uint64_t i)
{
	while (i < f->nbits) {
		uint64_t w = f->bits[i / 64] | ((1ULL << (i % 64)) - 1);
		if (w != ~0ULL) {
			uint64_t j = (i & ~63ULL) + (uint64_t)__builtin_ctzll(~w);
			return j < f->nbits ? j : f->nbits;
		}
		i = (i & ~63ULL) + 64;
	}
	return f->nbits;
}

/* length of the free run at i, at most max */
static uint64_t run_len(const struct arb_free_space *f, uint64_t i,
			uint64_t max)
{
	uint64_t n = 0;
	while (n < max && i + n < f->nbits && !bit_test(f, i + n))
		n++;
	return n;
}

/*
 * The first free run in [i, end) of at least min sectors (at most want
 * counted), starting aligned to align; at most probes runs looked at.
 * Returns its start (*len: its length, up to want) or UINT64_MAX.
 */
static uint64_t scan_runs(const struct arb_free_space *f, uint64_t i,
			  uint64_t end, uint64_t want, uint64_t min,
			  uint64_t align, uint64_t probes, uint64_t *len)
{
	if (end > f->nbits)
		end = f->nbits;
	while (i < end && probes--) {
		uint64_t n;

		i = next_free(f, i);
		if (i >= end)
			break;
		if (i % align) {
			i += align - i % align;
			continue;
		}
		n = run_len(f, i, want);
		if (n >= min) {
			*len = n;
			return i;
		}
		i += n ? n : 1;
	}
	return UINT64_MAX;
}

/*
 * Find a free run of want sectors (at least min, aligned to align) from
 * cursor on, wrapping once.  Returns the start or UINT64_MAX.
 */
static uint64_t find_run(struct arb_free_space *f, uint64_t cursor,
			 uint64_t want, uint64_t min, uint64_t align,
			 uint64_t *got)
{
	uint64_t first = ARB_DATA_START / ARB_SECTORSIZE, s, n;

	if (cursor < first || cursor >= f->nbits)
		cursor = first;
	s = scan_runs(f, cursor, f->nbits, want, min, align, UINT64_MAX, &n);
	if (s == UINT64_MAX)
		s = scan_runs(f, first, cursor + want, want, min, align,
			      UINT64_MAX, &n);
	if (s == UINT64_MAX)
		return UINT64_MAX;
	*got = n - n % min;
	if (*got == 0)
		*got = min;
	return s;
}

int arb_free_space_load(struct arb_vol *vol)
{
	struct arb_free_space *f;
	struct arb_iter it;
	struct arb_key k = { 0, 0, 0 };
	int ret;

	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->nbits = vol->total_bytes / vol->sectorsize;
	f->bits = calloc((f->nbits + 63) / 64, sizeof(uint64_t));
	if (!f->bits) {
		free(f);
		return -ENOMEM;
	}
	f->free = f->nbits;
	bits_set(f, 0, ARB_DATA_START / vol->sectorsize, true);
	f->meta_cursor = ARB_DATA_START / vol->sectorsize;
	f->data_cursor = f->nbits / 16;
	f->mirror_cursor = f->meta_cursor + (f->nbits - f->meta_cursor) / 2;
	f->mirror_base = f->mirror_cursor;
	vol->fsp = f;
	if (!vol->extent_root)
		return 0; /* a volume being formatted */

	arb_iter_init(&it, vol->extent_root);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		arb_iter_key(&it, &k);
		if (k.type != ARB_EXTENT_ITEM)
			continue;
		if (k.objectid % vol->sectorsize || k.offset % vol->sectorsize ||
		    k.objectid < ARB_DATA_START || k.offset == 0 ||
		    k.objectid + k.offset > vol->total_bytes ||
		    k.objectid + k.offset < k.objectid) {
			arb_log(ARB_LOG_ERR, "extent %llu+%llu out of range",
				(unsigned long long)k.objectid,
				(unsigned long long)k.offset);
			ret = -EUCLEAN;
			break;
		}
		bits_set(f, k.objectid / vol->sectorsize,
			 k.offset / vol->sectorsize, true);
		if (arb_iter_size(&it) >= sizeof(struct arb_extent_item) +
					      sizeof(struct arb_tree_block_ref)) {
			const struct arb_extent_item *ei = arb_iter_data(&it);
			const struct arb_tree_block_ref *tr =
				(const void *)(ei + 1);
			uint64_t m = arb_tree_block_ref_t_mirror(tr);
			if (!(arb_extent_item_e_flags(ei) &
			      ARB_EXTENT_FLAG_TREE_BLOCK) || !m)
				continue;
			if (m % vol->sectorsize || m < ARB_DATA_START ||
			    m + vol->nodesize > vol->total_bytes) {
				arb_log(ARB_LOG_ERR,
					"tree block %llu: second copy %llu out "
					"of range", (unsigned long long)k.objectid,
					(unsigned long long)m);
				ret = -EUCLEAN;
				break;
			}
			bits_set(f, m / vol->sectorsize,
				 vol->nodesize / vol->sectorsize, true);
		}
	}
	arb_iter_release(&it);
	if (ret < 0) {
		arb_free_space_destroy(vol);
		return ret;
	}
	return 0;
}

void arb_free_space_destroy(struct arb_vol *vol)
{
	if (!vol->fsp)
		return;
	free(vol->fsp->bits);
	free(vol->fsp->pinned);
	free(vol->fsp->held);
	free(vol->fsp->grace[0]);
	free(vol->fsp->grace[1]);
	free(vol->fsp->freed);
	free(vol->fsp->hist);
	free(vol->fsp);
	vol->fsp = NULL;
}

bool arb_free_space_next(struct arb_vol *vol, uint64_t pos, uint64_t end,
			 uint64_t *start, uint64_t *len)
{
	struct arb_free_space *f = vol->fsp;
	uint64_t i, n, first = ARB_DATA_START / vol->sectorsize;

	if (end > f->nbits)
		end = f->nbits;
	if (pos < first)
		pos = first;
	if (pos >= end)
		return false;
	i = next_free(f, pos);
	if (i >= end)
		return false;
	n = run_len(f, i, end - i);
	*start = i;
	*len = n;
	return true;
}

void arb_free_space_track_freed(struct arb_vol *vol, bool on)
{
	struct arb_free_space *f = vol->fsp;

	f->track_freed = on;
	f->nr_freed = 0;
	f->freed_all = false;
}

size_t arb_free_space_take_freed(struct arb_vol *vol, uint64_t **runs,
				 bool *all)
{
	struct arb_free_space *f = vol->fsp;
	size_t n = f->nr_freed;

	*all = f->freed_all;
	*runs = NULL;
	if (n && !*all) {
		*runs = malloc(2 * n * sizeof(**runs));
		if (!*runs)
			*all = true;
		for (size_t i = 0; *runs && i < n; i++) {
			(*runs)[2 * i] = f->freed[i].start;
			(*runs)[2 * i + 1] = f->freed[i].len;
		}
	}
	f->nr_freed = 0;
	f->freed_all = false;
	return *all ? 0 : n;
}

/* every sector of each range is marked used; their sum */
static bool ranges_used(const struct arb_free_space *f, const struct range *v,
			size_t n, uint64_t *sum)
{
	*sum = 0;
	for (size_t i = 0; i < n; i++) {
		if (v[i].start + v[i].len > f->nbits)
			return false;
		for (uint64_t s = v[i].start; s < v[i].start + v[i].len; s++)
			if (!bit_test(f, s))
				return false;
		*sum += v[i].len;
	}
	return true;
}

bool arb_free_space_ok(struct arb_vol *vol)
{
	const struct arb_free_space *f = vol->fsp;
	uint64_t zero = 0, sum;

	for (uint64_t i = 0; i < f->nbits; i += 64) {
		uint64_t valid = f->nbits - i < 64 ? f->nbits - i : 64;
		uint64_t mask = valid == 64 ? ~0ULL : (1ULL << valid) - 1;

		zero += valid - (uint64_t)__builtin_popcountll(f->bits[i / 64] &
							       mask);
	}
	if (zero != f->free)
		return false;
	for (uint64_t s = 0; s < ARB_DATA_START / vol->sectorsize; s++)
		if (!bit_test(f, s))
			return false;
	if (!ranges_used(f, f->pinned, f->nr_pinned, &sum))
		return false;
	if (!ranges_used(f, f->held, f->nr_held, &sum) ||
	    sum != f->held_sectors)
		return false;
	{
		uint64_t g0, g1;

		if (!ranges_used(f, f->grace[0], f->nr_grace[0], &g0) ||
		    !ranges_used(f, f->grace[1], f->nr_grace[1], &g1) ||
		    g0 + g1 != f->grace_sectors)
			return false;
	}
	sum = 0;
	for (size_t i = f->hist_head; i < f->nr_hist; i++) {
		const struct hrange *h = &f->hist[i];

		if (h->start + h->len > f->nbits)
			return false;
		for (uint64_t s = h->start; s < h->start + h->len; s++)
			if (!bit_test(f, s))
				return false;
		sum += h->len;
	}
	return sum == f->hist_sectors;
}

uint64_t arb_free_bytes(struct arb_vol *vol)
{
	/* what the history grace keeps is free for whoever needs it */
	return (vol->fsp->free + vol->fsp->hist_sectors) * vol->sectorsize;
}

uint64_t arb_free_space_history_bytes(struct arb_vol *vol)
{
	return vol->fsp->hist_sectors * vol->sectorsize;
}

uint64_t arb_used_bytes(struct arb_vol *vol)
{
	struct arb_free_space *f = vol->fsp;
	uint64_t pinned = f->held_sectors + f->hist_sectors;

	for (size_t i = 0; i < f->nr_pinned; i++)
		pinned += f->pinned[i].len;
	return (f->nbits - f->free - pinned) * vol->sectorsize - ARB_DATA_START;
}

void arb_set_meta_reserve(struct arb_vol *vol, uint64_t bytes)
{
	vol->fsp->reserve = bytes / vol->sectorsize;
}

bool arb_free_space_test(struct arb_vol *vol, uint64_t bytenr, uint64_t len,
			 bool want_free)
{
	struct arb_free_space *f = vol->fsp;
	uint64_t s = bytenr / vol->sectorsize, n = len / vol->sectorsize;

	for (uint64_t i = s; i < s + n; i++) {
		if (i >= f->nbits || bit_test(f, i) == want_free)
			return false;
	}
	return true;
}

static int range_add(struct range **v, size_t *nr, size_t *cap,
		     struct range r)
{
	if (*nr == *cap) {
		size_t ncap = *cap ? *cap * 2 : 256;
		void *p = realloc(*v, ncap * sizeof(**v));
		if (!p)
			return -ENOMEM;
		*v = p;
		*cap = ncap;
	}
	(*v)[(*nr)++] = r;
	return 0;
}

/* ---- unlocked data reads -------------------------------------------------- */

static uint32_t readers_in_flight(struct arb_vol *vol)
{
	return atomic_load(&vol->data_readers[0]) +
	       atomic_load(&vol->data_readers[1]);
}

unsigned arb_data_read_begin(struct arb_vol *vol)
{
	unsigned e;

	arb_free_space_grace(vol);
	e = vol->read_epoch;
	atomic_fetch_add(&vol->data_readers[e], 1);
	return e;
}

void arb_data_read_end(struct arb_vol *vol, unsigned epoch)
{
	atomic_fetch_sub(&vol->data_readers[epoch], 1);
}

void arb_data_readers_wait(struct arb_vol *vol)
{
	while (readers_in_flight(vol))
		sched_yield();
}

void arb_free_space_grace(struct arb_vol *vol)
{
	struct arb_free_space *f = vol->fsp;

	/* two flips at most: with no reader left both lists empty */
	for (int i = 0; i < 2; i++) {
		unsigned prev = vol->read_epoch ^ 1;

		if (atomic_load(&vol->data_readers[prev]))
			return;
		for (size_t j = 0; j < f->nr_grace[prev]; j++) {
			bits_set(f, f->grace[prev][j].start,
				 f->grace[prev][j].len, false);
			f->grace_sectors -= f->grace[prev][j].len;
		}
		f->nr_grace[prev] = 0;
		vol->read_epoch = prev;
	}
}

uint64_t arb_free_space_grace_bytes(struct arb_vol *vol)
{
	return vol->fsp->grace_sectors * vol->sectorsize;
}

bool arb_free_space_grace_drain(struct arb_vol *vol)
{
	struct arb_free_space *f = vol->fsp;
	bool any = f->nr_grace[0] || f->nr_grace[1];

	if (!any)
		return false;
	arb_data_readers_wait(vol);
	arb_free_space_grace(vol);
	return true;
}

/*
 * Make sectors [start, start+len) free: now if no unlocked read is in
 * flight (a reader registers under the lock, which the caller holds, so
 * none can appear meanwhile), else after the readers that may have found
 * them mapped are done.
 */
static void release_sectors(struct arb_vol *vol, uint64_t start, uint64_t len)
{
	struct arb_free_space *f = vol->fsp;
	unsigned e = vol->read_epoch;
	struct range r = { start, len, false };

	if (readers_in_flight(vol) &&
	    range_add(&f->grace[e], &f->nr_grace[e], &f->cap_grace[e], r) == 0) {
		f->grace_sectors += len;
		return;
	}
	/* no memory for the list: wait for the readers instead */
	arb_data_readers_wait(vol);
	bits_set(f, start, len, false);
}

/* gen: the generation that allocated the range (a held generation keeps
 * the ranges it references); low: &pinned_low_node or _mirror for a tree
 * node's copy, else NULL */
static int pin_range(struct arb_vol *vol, uint64_t start, uint64_t len,
		     uint64_t gen, uint64_t *low)
{
	struct arb_free_space *f = vol->fsp;
	struct range r = { start / vol->sectorsize, len / vol->sectorsize,
			   f->holding && gen <= f->hold_gen };

	if (low && (!*low || r.start < *low))
		*low = r.start;
	return range_add(&f->pinned, &f->nr_pinned, &f->cap_pinned, r);
}

static int hist_add(struct arb_free_space *f, uint64_t start, uint64_t len,
		    uint64_t gen)
{
	if (f->hist_head && f->hist_head == f->nr_hist)
		f->hist_head = f->nr_hist = 0;
	if (f->nr_hist == f->cap_hist) {
		size_t ncap;
		void *p;

		if (f->hist_head) {
			/* room at the front: move down first */
			memmove(f->hist, f->hist + f->hist_head,
				(f->nr_hist - f->hist_head) * sizeof(*f->hist));
			f->nr_hist -= f->hist_head;
			f->hist_head = 0;
		}
		if (f->nr_hist == f->cap_hist) {
			ncap = f->cap_hist ? f->cap_hist * 2 : 256;
			p = realloc(f->hist, ncap * sizeof(*f->hist));
			if (!p)
				return -ENOMEM;
			f->hist = p;
			f->cap_hist = ncap;
		}
	}
	f->hist[f->nr_hist++] = (struct hrange){ start, len, gen };
	f->hist_sectors += len;
	return 0;
}

/* release the history ranges freed by commits up to gen (all: UINT64_MAX) */
static void hist_release(struct arb_vol *vol, uint64_t gen)
{
	struct arb_free_space *f = vol->fsp;

	while (f->hist_head < f->nr_hist && f->hist[f->hist_head].gen <= gen) {
		struct hrange *h = &f->hist[f->hist_head++];

		f->hist_sectors -= h->len;
		release_sectors(vol, h->start, h->len);
	}
	if (f->hist_head == f->nr_hist)
		f->hist_head = f->nr_hist = 0;
}

bool arb_free_space_history_reclaim(struct arb_vol *vol)
{
	struct arb_free_space *f = vol->fsp;
	uint64_t gen;

	if (f->hist_head == f->nr_hist)
		return false;
	gen = f->hist[f->hist_head].gen;
	hist_release(vol, gen);
	/* the generations before gen referenced what it freed */
	arb_history_prune_below(vol, gen);
	/* unlocked data readers may hold some of it a little longer */
	arb_free_space_grace_drain(vol);
	return true;
}

static int hrange_cmp(const void *a, const void *b)
{
	const struct hrange *x = a, *y = b;

	return x->gen < y->gen ? -1 : x->gen > y->gen;
}

void arb_free_space_history_sort(struct arb_vol *vol)
{
	struct arb_free_space *f = vol->fsp;

	if (f->nr_hist - f->hist_head < 2)
		return;
	qsort(f->hist + f->hist_head, f->nr_hist - f->hist_head,
	      sizeof(*f->hist), hrange_cmp);
}

void arb_free_space_history_drop(struct arb_vol *vol)
{
	while (arb_free_space_history_reclaim(vol))
		;
}

int arb_free_space_history_keep(struct arb_vol *vol, uint64_t start,
				uint64_t len, uint64_t gen)
{
	struct arb_free_space *f = vol->fsp;
	uint64_t s = start / vol->sectorsize, n = len / vol->sectorsize;
	int ret;

	if (s + n > f->nbits || s + n < s)
		return -EINVAL;
	/* only the sectors free now: the rest belong to something else */
	for (uint64_t i = s; i < s + n;) {
		uint64_t j = i;

		if (bit_test(f, i)) {
			i++;
			continue;
		}
		while (j < s + n && !bit_test(f, j))
			j++;
		bits_set(f, i, j - i, true);
		ret = hist_add(f, i, j - i, gen);
		if (ret) {
			bits_set(f, i, j - i, false);
			return ret;
		}
		i = j;
	}
	return 0;
}

/*
 * Tree nodes go back where the last commit freed them.  The node cursors
 * move forward, so without this every commit would write its nodes to
 * space the image has never used: under a sparse image file each write
 * there makes the host allocate (a 1 MiB zero fill every few commits,
 * host_alloc in dev.c; on a journaled host, a journal commit in the next
 * fdatasync).  An fsync that commits CoWs the same few nodes each time,
 * so their old places, free once the commit that replaced them is on
 * disk, take the next commit's nodes: the image's metadata stays in
 * space the host has already allocated.  1,000 x (append 4 KiB, fsync):
 * docs/design/space.md, "Nodes return to freed places".  (A range kept
 * for a hold
 * stays used in the map; a cursor on it just moves past.)
 */
void arb_free_space_unpin(struct arb_vol *vol)
{
	struct arb_free_space *f = vol->fsp;
	uint64_t oldest = arb_history_oldest(vol), gen = vol->generation;

	for (size_t i = 0; i < f->nr_pinned; i++) {
		struct range *r = &f->pinned[i];
		/* on allocation failure the range is released: the reader of
		 * the held generation may then read a reused block, which
		 * its validation catches; the filesystem stays right */
		if (r->hold && range_add(&f->held, &f->nr_held, &f->cap_held,
					 *r) == 0) {
			f->held_sectors += r->len;
			continue;
		}
		/* an older generation listed in the history references it
		 * (no memory for the list: released, and a reader of that
		 * generation finds the reused block by its validation) */
		if (oldest && oldest < gen &&
		    hist_add(f, r->start, r->len, gen) == 0)
			continue;
		release_sectors(vol, r->start, r->len);
	}
	/* what no listed generation needs any more */
	hist_release(vol, oldest ? oldest : UINT64_MAX);
	f->nr_pinned = 0;
	if (f->pinned_low_node && f->pinned_low_node < f->meta_cursor)
		f->meta_cursor = f->pinned_low_node;
	if (f->pinned_low_mirror && f->pinned_low_mirror < f->mirror_cursor)
		f->mirror_cursor = f->pinned_low_mirror;
	f->pinned_low_node = f->pinned_low_mirror = 0;
	arb_free_space_grace(vol);
}

int arb_free_space_hold(struct arb_vol *vol, uint64_t gen)
{
	struct arb_free_space *f = vol->fsp;

	if (f->holding)
		return -EBUSY;
	f->holding = true;
	f->hold_gen = gen;
	/* what the running transaction freed so far is still referenced by
	 * the last commit: held too */
	for (size_t i = 0; i < f->nr_pinned; i++)
		f->pinned[i].hold = gen == vol->generation;
	return 0;
}

void arb_free_space_release(struct arb_vol *vol)
{
	struct arb_free_space *f = vol->fsp;

	for (size_t i = 0; i < f->nr_held; i++)
		release_sectors(vol, f->held[i].start, f->held[i].len);
	for (size_t i = 0; i < f->nr_pinned; i++)
		f->pinned[i].hold = false;
	free(f->held);
	f->held = NULL;
	f->nr_held = f->cap_held = 0;
	f->held_sectors = 0;
	f->holding = false;
	f->hold_gen = 0;
}

uint64_t arb_free_space_held(struct arb_vol *vol, bool *holding)
{
	if (holding)
		*holding = vol->fsp->holding;
	return vol->fsp->held_sectors * vol->sectorsize;
}

int arb_free_space_reload(struct arb_vol *vol)
{
	struct arb_free_space *old = vol->fsp;
	int ret;

	vol->fsp = NULL;
	ret = arb_free_space_load(vol);
	if (ret) {
		vol->fsp = old;
		return ret;
	}
	if (old) {
		struct arb_free_space *f = vol->fsp;
		for (size_t i = 0; i < old->nr_held; i++)
			bits_set(f, old->held[i].start, old->held[i].len, true);
		/* ranges unlocked readers may still read stay used too */
		for (int e = 0; e < 2; e++) {
			for (size_t i = 0; i < old->nr_grace[e]; i++)
				bits_set(f, old->grace[e][i].start,
					 old->grace[e][i].len, true);
			f->grace[e] = old->grace[e];
			f->nr_grace[e] = old->nr_grace[e];
			f->cap_grace[e] = old->cap_grace[e];
		}
		f->grace_sectors = old->grace_sectors;
		/* and so do the ranges the history keeps */
		for (size_t i = old->hist_head; i < old->nr_hist; i++)
			bits_set(f, old->hist[i].start, old->hist[i].len, true);
		f->hist = old->hist;
		f->hist_head = old->hist_head;
		f->nr_hist = old->nr_hist;
		f->cap_hist = old->cap_hist;
		f->hist_sectors = old->hist_sectors;
		f->holding = old->holding;
		f->hold_gen = old->hold_gen;
		f->held = old->held;
		f->nr_held = old->nr_held;
		f->cap_held = old->cap_held;
		f->held_sectors = old->held_sectors;
		f->reserve = old->reserve;
		/* a rebuilt map: the next discard scans it all */
		f->track_freed = old->track_freed;
		f->freed_all = old->track_freed;
		free(old->freed);
		free(old->bits);
		free(old->pinned);
		free(old);
	}
	return 0;
}

/* ---- delayed references ------------------------------------------------- */

static struct arb_delayed_refs *drefs(struct arb_vol *vol)
{
	if (!vol->drefs) {
		vol->drefs = calloc(1, sizeof(*vol->drefs));
		if (!vol->drefs)
			return NULL;
	}
	return vol->drefs;
}

static size_t dref_slot(size_t size, uint64_t bytenr)
{
	return (size_t)((bytenr * 0x9E3779B97F4A7C15ULL) >> 17) & (size - 1);
}

static int dref_grow(struct arb_delayed_refs *d)
{
	size_t ns = d->size ? d->size * 2 : 1024;
	struct dref_head **nt = calloc(ns, sizeof(*nt));

	if (!nt)
		return -ENOMEM;
	for (size_t i = 0; i < d->size; i++) {
		struct dref_head *h = d->table[i], *next;
		for (; h; h = next) {
			size_t s = dref_slot(ns, h->bytenr);
			next = h->next;
			h->next = nt[s];
			nt[s] = h;
		}
	}
	free(d->table);
	d->table = nt;
	d->size = ns;
	return 0;
}

static struct dref_head *dref_find(struct arb_delayed_refs *d, uint64_t bytenr)
{
	if (!d || !d->size)
		return NULL;
	for (struct dref_head *h = d->table[dref_slot(d->size, bytenr)]; h;
	     h = h->next)
		if (h->bytenr == bytenr)
			return h;
	return NULL;
}

static struct dref_head *dref_get(struct arb_vol *vol, uint64_t bytenr)
{
	struct arb_delayed_refs *d = drefs(vol);
	struct dref_head *h;
	size_t s;

	if (!d)
		return NULL;
	h = dref_find(d, bytenr);
	if (h)
		return h;
	if (d->count >= d->size && dref_grow(d))
		return NULL;
	h = calloc(1, sizeof(*h));
	if (!h)
		return NULL;
	h->bytenr = bytenr;
	s = dref_slot(d->size, bytenr);
	h->next = d->table[s];
	d->table[s] = h;
	d->count++;
	return h;
}

static void dref_free(struct dref_head *h)
{
	free(h->dd);
	free(h);
}

static void dref_remove(struct arb_vol *vol, struct dref_head *h)
{
	struct arb_delayed_refs *d = vol->drefs;
	struct dref_head **pp = &d->table[dref_slot(d->size, h->bytenr)];

	while (*pp != h)
		pp = &(*pp)->next;
	*pp = h->next;
	d->count--;
	dref_free(h);
}

bool arb_delayed_refs_pending(struct arb_vol *vol)
{
	return vol->drefs && vol->drefs->count;
}

size_t arb_delayed_refs_count(struct arb_vol *vol)
{
	return vol->drefs ? vol->drefs->count : 0;
}

void arb_delayed_refs_drop(struct arb_vol *vol)
{
	struct arb_delayed_refs *d = vol->drefs;

	if (!d)
		return;
	for (size_t i = 0; i < d->size; i++) {
		struct dref_head *h = d->table[i], *next;
		for (; h; h = next) {
			next = h->next;
			dref_free(h);
		}
	}
	free(d->table);
	free(d);
	vol->drefs = NULL;
}

int arb_ref_tree_block(struct arb_txn *t, uint64_t bytenr, uint64_t owner,
		       int level, int delta)
{
	struct dref_head *h;

	if (t->error)
		return t->error;
	h = dref_get(t->vol, bytenr);
	if (!h)
		return arb_txn_fail(t, -ENOMEM);
	h->is_tree = true;
	h->num_bytes = t->vol->nodesize;
	if (owner) {
		h->owner = owner;
		h->level = level;
	}
	h->delta += delta;
	return 0;
}

int arb_ref_data(struct arb_txn *t, uint64_t bytenr, uint64_t num_bytes,
		 uint64_t root, uint64_t ino, uint64_t offset, int delta)
{
	struct dref_head *h;
	size_t i;

	if (t->error)
		return t->error;
	h = dref_get(t->vol, bytenr);
	if (!h)
		return arb_txn_fail(t, -ENOMEM);
	h->num_bytes = num_bytes;
	h->delta += delta;
	for (i = 0; i < h->nr_dd; i++) {
		struct data_delta *x = &h->dd[i];
		if (x->root == root && x->ino == ino && x->offset == offset) {
			x->delta += delta;
			return 0;
		}
	}
	if (h->nr_dd == h->cap_dd) {
		size_t cap = h->cap_dd ? h->cap_dd * 2 : 2;
		void *p = realloc(h->dd, cap * sizeof(*h->dd));
		if (!p)
			return arb_txn_fail(t, -ENOMEM);
		h->dd = p;
		h->cap_dd = cap;
	}
	h->dd[h->nr_dd++] = (struct data_delta){ root, ino, offset, delta };
	return 0;
}

int arb_extent_refs(struct arb_txn *t, uint64_t bytenr, uint64_t *refs)
{
	struct arb_vol *vol = t->vol;
	struct arb_key k = { bytenr, ARB_EXTENT_ITEM, vol->nodesize };
	struct arb_extent_item ei;
	struct dref_head *h = dref_find(vol->drefs, bytenr);
	int64_t r = 0;
	int ret;

	ret = arb_lookup_item(vol->extent_root, &k, &ei, sizeof(ei));
	if (ret >= (int)sizeof(ei))
		r = (int64_t)arb_extent_item_e_refs(&ei);
	else if (ret >= 0 || ret != -ENOENT)
		return ret >= 0 ? -EUCLEAN : ret;
	if (h)
		r += h->delta;
	if (r < 0) {
		arb_log(ARB_LOG_ERR, "extent %llu: negative reference count",
			(unsigned long long)bytenr);
		return -EUCLEAN;
	}
	*refs = (uint64_t)r;
	return 0;
}

/*
 * The nodes of one transaction go into one free run when there is one.
 * Without this the few nodes an fsync's commit shadows went into the holes
 * the commit before had left, in address order, and scattered places
 * stayed scattered, commit after commit: the extent items of the new
 * nodes and of the freed ones sat in three leaves of the extent tree
 * instead of one, each shadowed (twice, with duplicated metadata) by every
 * commit.  So the first node of a transaction moves the cursor to the
 * first run, from the start of the space (second copies: from where they
 * start), of as many free nodes as the last transaction allocated, at
 * least 2 and at most ARB_NODE_CLUSTER; the others follow from there as
 * before.  An fsync's commits then alternate between two neighbouring
 * runs: 7 nodes a commit instead of 9 on the bench's populated image.
 * First fit, not from the cursor: searched from the cursor, runs that
 * long are often only found past everything in use, and the cursor
 * marched into space the image never used (see arb_free_space_unpin for
 * why that costs; test_btree test_small_commits_reuse_places).  At most
 * ARB_CLUSTER_PROBES holes are looked at, so that a fragmented volume
 * does not pay a long search per commit.
 */
#define ARB_NODE_CLUSTER 8
#define ARB_CLUSTER_PROBES 4096

static void node_cluster(struct arb_free_space *f, uint64_t *cursor,
			 uint64_t start, uint64_t n)
{
	uint64_t k = f->cluster_last, s, len;

	if (k > ARB_NODE_CLUSTER)
		k = ARB_NODE_CLUSTER;
	if (k < 2)
		return;
	s = scan_runs(f, start, f->nbits, k * n, k * n, n, ARB_CLUSTER_PROBES,
		      &len);
	if (s != UINT64_MAX)
		*cursor = s;
}

int arb_alloc_tree_block(struct arb_txn *t, uint64_t owner, int level,
			 uint64_t *bytenr, uint64_t *mirror)
{
	struct arb_vol *vol = t->vol;
	struct arb_free_space *f = vol->fsp;
	uint64_t n = vol->nodesize / vol->sectorsize, got, s, m = 0;
	struct dref_head *h;

	if (t->error)
		return t->error;
	if (f->cluster_txn != t->transid) {
		f->cluster_txn = t->transid;
		f->cluster_last = f->cluster_cur;
		f->cluster_cur = 0;
		node_cluster(f, &f->meta_cursor, ARB_DATA_START / vol->sectorsize,
			     n);
		if (vol->meta_copies > 1)
			node_cluster(f, &f->mirror_cursor, f->mirror_base, n);
	}
	s = find_run(f, f->meta_cursor, n, n, n, &got);
	if (s == UINT64_MAX && arb_free_space_grace_drain(vol))
		s = find_run(f, f->meta_cursor, n, n, n, &got);
	while (s == UINT64_MAX && arb_free_space_history_reclaim(vol))
		s = find_run(f, f->meta_cursor, n, n, n, &got);
	if (s == UINT64_MAX) {
		arb_log(ARB_LOG_ERR, "no space left for a tree node");
		return arb_txn_fail(t, -ENOSPC);
	}
	bits_set(f, s, n, true);
	if (vol->meta_copies > 1) {
		m = find_run(f, f->mirror_cursor, n, n, n, &got);
		if (m == UINT64_MAX && arb_free_space_grace_drain(vol))
			m = find_run(f, f->mirror_cursor, n, n, n, &got);
		while (m == UINT64_MAX &&
		       arb_free_space_history_reclaim(vol))
			m = find_run(f, f->mirror_cursor, n, n, n, &got);
		if (m == UINT64_MAX) {
			bits_set(f, s, n, false);
			arb_log(ARB_LOG_ERR,
				"no space left for a tree node's second copy");
			return arb_txn_fail(t, -ENOSPC);
		}
		bits_set(f, m, n, true);
		f->mirror_cursor = m + n;
	}
	f->meta_cursor = s + n;
	f->cluster_cur++;
	*bytenr = s * vol->sectorsize;
	*mirror = m * vol->sectorsize;
	h = dref_get(vol, *bytenr);
	if (!h)
		return arb_txn_fail(t, -ENOMEM);
	h->is_tree = true;
	h->is_new = true;
	h->num_bytes = vol->nodesize;
	h->mirror = *mirror;
	h->owner = owner;
	h->level = level;
	h->delta += 1;
	return 0;
}

int arb_alloc_data(struct arb_txn *t, uint64_t num_bytes, uint64_t min_bytes,
		   uint64_t hint, uint64_t *bytenr, uint64_t *got)
{
	struct arb_vol *vol = t->vol;
	struct arb_free_space *f = vol->fsp;
	uint64_t ss = vol->sectorsize;
	uint64_t want = (num_bytes + ss - 1) / ss, min = (min_bytes + ss - 1) / ss;
	uint64_t s, n;
	struct dref_head *h;

	if (t->error)
		return t->error;
	if (!want)
		return -EINVAL;
	if (!min || min > want)
		min = want;
	if (f->free < f->reserve + min)
		arb_free_space_grace_drain(vol);
	while (f->free < f->reserve + min &&
	       arb_free_space_history_reclaim(vol))
		;
	if (f->free < f->reserve + min)
		return -ENOSPC;
	if (want > f->free - f->reserve)
		want = f->free - f->reserve;
	s = find_run(f, hint ? hint / ss : f->data_cursor, want, min, 1, &n);
	if (s == UINT64_MAX && arb_free_space_grace_drain(vol))
		s = find_run(f, hint ? hint / ss : f->data_cursor, want, min, 1,
			     &n);
	while (s == UINT64_MAX && arb_free_space_history_reclaim(vol))
		s = find_run(f, hint ? hint / ss : f->data_cursor, want, min, 1,
			     &n);
	if (s == UINT64_MAX)
		return -ENOSPC;
	bits_set(f, s, n, true);
	f->data_cursor = s + n;
	*bytenr = s * ss;
	*got = n * ss;
	h = dref_get(vol, *bytenr);
	if (!h)
		return arb_txn_fail(t, -ENOMEM);
	h->is_new = true;
	h->num_bytes = *got;
	return 0;
}

/*
 * The extent's item (committed, or its head already run) is put back
 * under its longer key with the same body: one reference, and the
 * generation it had, so that freeing it later still pins its first len
 * bytes, which the last commit may reference, until the commit that frees
 * them is durable.  The new bytes were free in every committed state, so
 * writing them touched no committed data.  Their own head (is_new, no
 * reference) goes, or it would release them at the commit.  An extent
 * with anything pending on it (made in this transaction, or a reference
 * change) is left alone.  One reference means one leaf, not one tree
 * (counts are pushed down lazily): the caller proves that leaf unshared.
 */
int arb_grow_data_extent(struct arb_txn *t, uint64_t bytenr, uint64_t len,
			 uint64_t got)
{
	struct arb_vol *vol = t->vol;
	struct dref_head *h = dref_find(vol->drefs, bytenr);
	struct dref_head *n = dref_find(vol->drefs, bytenr + len);
	struct arb_extent_item ei;
	struct arb_key k = { bytenr, ARB_EXTENT_ITEM, len };
	int ret;

	if (t->error)
		return t->error;
	if (!n || !n->is_new || n->is_tree || n->delta || n->nr_dd ||
	    n->num_bytes != got)
		return 0;
	if (h)
		return 0;
	ret = arb_lookup_item(vol->extent_root, &k, &ei, sizeof(ei));
	if (ret == -ENOENT)
		return 0;
	if (ret < 0)
		return ret;
	if (ret != (int)sizeof(ei) || arb_extent_item_e_refs(&ei) != 1 ||
	    !(arb_extent_item_e_flags(&ei) & ARB_EXTENT_FLAG_DATA))
		return 0;
	ret = arb_del_item(t, vol->extent_root, &k);
	if (ret)
		return arb_txn_fail(t, ret);
	k.offset = len + got;
	ret = arb_insert_item(t, vol->extent_root, &k, &ei, sizeof(ei));
	if (ret)
		return arb_txn_fail(t, ret);
	dref_remove(vol, n);
	return 1;
}

int arb_leaf_data_refs(struct arb_txn *t, struct arb_node *leaf, uint64_t root,
		       int delta)
{
	uint32_t nr = arb_nritems(leaf);
	struct arb_key k;
	int ret;

	for (uint32_t i = 0; i < nr; i++) {
		const struct arb_file_extent *fe;
		arb_node_key(leaf, (int)i, &k);
		if (k.type != ARB_EXTENT_DATA)
			continue;
		if (arb_item_size(leaf, (int)i) < sizeof(*fe))
			continue; /* inline */
		fe = arb_item_ptr(leaf, (int)i);
		if (arb_file_extent_f_type(fe) == ARB_FILE_EXTENT_INLINE ||
		    arb_file_extent_f_disk_bytenr(fe) == 0)
			continue;
		ret = arb_ref_data(t, arb_file_extent_f_disk_bytenr(fe),
				   arb_file_extent_f_disk_num_bytes(fe), root,
				   k.objectid,
				   k.offset - arb_file_extent_f_offset(fe), delta);
		if (ret)
			return ret;
	}
	return 0;
}

/* ---- applying delayed references ----------------------------------------- */

/* mirror: the second copy of a tree node (len bytes too), or 0 */
static int release_extent(struct arb_txn *t, uint64_t bytenr, uint64_t len,
			  uint64_t gen, bool is_tree, uint64_t mirror)
{
	struct arb_vol *vol = t->vol;
	int ret;

	if (is_tree)
		arb_node_forget(vol, bytenr);
	if (gen == t->transid) {
		release_sectors(vol, bytenr / vol->sectorsize,
				len / vol->sectorsize);
		if (mirror)
			release_sectors(vol, mirror / vol->sectorsize,
					len / vol->sectorsize);
		return 0;
	}
	ret = pin_range(vol, bytenr, len, gen,
			is_tree ? &vol->fsp->pinned_low_node : NULL);
	if (!ret && mirror)
		ret = pin_range(vol, mirror, len, gen,
				&vol->fsp->pinned_low_mirror);
	return ret;
}

/* delete the checksums of a freed data extent */
static int drop_csums(struct arb_txn *t, uint64_t bytenr, uint64_t len)
{
	struct arb_root *csum;
	struct arb_iter it;
	struct arb_key k = { ARB_EXTENT_CSUM_OBJECTID, ARB_EXTENT_CSUM, bytenr };
	int ret;

	ret = arb_root_get(t->vol, ARB_CSUM_TREE_ID, &csum);
	if (ret == -ENOENT)
		return 0; /* a volume without a checksum tree */
	if (ret)
		return ret; /* never swallow an I/O error: stale checksums
			     * would fail later reads of reused blocks */
	for (;;) {
		/* the first item at or after bytenr, wherever the leaf ends */
		arb_iter_init(&it, csum);
		ret = arb_iter_seek(&it, &k);
		if (ret == 0)
			arb_iter_key(&it, &k);
		arb_iter_release(&it);
		if (ret)
			return ret < 0 ? ret : 0;
		if (k.objectid != ARB_EXTENT_CSUM_OBJECTID ||
		    k.type != ARB_EXTENT_CSUM || k.offset >= bytenr + len)
			return 0;
		ret = arb_del_item(t, csum, &k);
		if (ret)
			return ret;
	}
}

/*
 * Back-reference items of data extents: open addressing in the key offset
 * (format.h, EXTENT_DATA_REF, states the invariant these keep).  Probing
 * has no bound: a full window of colliding keys, which a user who picks
 * inode numbers and file offsets (reflinks) can build on purpose, must
 * not fail the transaction.
 */
static uint64_t data_ref_home(const struct arb_extent_data_ref *r)
{
	return arb_data_ref_hash(arb_extent_data_ref_d_root(r),
				 arb_extent_data_ref_d_objectid(r),
				 arb_extent_data_ref_d_offset(r));
}

/*
 * Find the EXTENT_DATA_REF item of (root, ino, offset) of extent bytenr:
 * walk the items from its home in key order; a free key offset ends the
 * walk only at or past home + ARB_DATA_REF_WINDOW (below that, images of
 * the bounded probing may have holes before the item).
 * 0 found (*found its key, *count set), 1 absent (*found = the first free
 * key offset at or after home, where it goes), <0 error.
 */
static int find_data_ref(struct arb_root *er, uint64_t bytenr, uint64_t root,
			 uint64_t ino, uint64_t offset, struct arb_key *found,
			 uint32_t *count)
{
	uint64_t home = arb_data_ref_hash(root, ino, offset);
	uint64_t pos = home, stop = home + ARB_DATA_REF_WINDOW;
	struct arb_key k = { bytenr, ARB_EXTENT_DATA_REF, home };
	bool have_hole = false;
	struct arb_iter it;
	int ret;

	arb_iter_init(&it, er);
	for (ret = arb_iter_seek(&it, &k); ret == 0; ret = arb_iter_next(&it)) {
		const struct arb_extent_data_ref *r = arb_iter_data(&it);

		arb_iter_key(&it, &k);
		if (k.objectid != bytenr || k.type != ARB_EXTENT_DATA_REF)
			break;
		if (k.offset != pos) {
			/* [pos, k.offset) is free */
			if (!have_hole)
				found->offset = pos;
			have_hole = true;
			if (k.offset > stop)
				break;
			pos = k.offset;
		}
		if (arb_iter_size(&it) != sizeof(*r)) {
			arb_log(ARB_LOG_ERR,
				"extent %llu: back-reference item at %llu has "
				"size %u",
				(unsigned long long)bytenr,
				(unsigned long long)k.offset,
				arb_iter_size(&it));
			ret = -EUCLEAN;
			break;
		}
		if (arb_extent_data_ref_d_root(r) == root &&
		    arb_extent_data_ref_d_objectid(r) == ino &&
		    arb_extent_data_ref_d_offset(r) == offset) {
			*count = arb_extent_data_ref_d_count(r);
			found->offset = pos;
			ret = 0;
			goto out;
		}
		pos++;
	}
	if (ret < 0)
		goto out;
	if (!have_hole)
		found->offset = pos;
	ret = 1;
out:
	arb_iter_release(&it);
	found->objectid = bytenr;
	found->type = ARB_EXTENT_DATA_REF;
	return ret;
}

/*
 * The back-reference item at key offset hole was just deleted: move later
 * items of the run of consecutive keys after it back into it, each one
 * whose home is at or below the hole (Knuth's deletion for linear
 * probing, vol. 3, 6.4 algorithm R), the hole moving with them.  That
 * keeps every item reachable from its home however the chains of several
 * homes interleave.  A free key offset ends the run: by the invariant no
 * item past it can need a key offset before it.
 */
static int close_data_ref_hole(struct arb_txn *t, struct arb_root *er,
			       uint64_t bytenr, uint64_t hole)
{
	for (uint64_t pos = hole + 1;; pos++) {
		struct arb_key k = { bytenr, ARB_EXTENT_DATA_REF, pos };
		struct arb_extent_data_ref r;
		bool move = false;
		struct arb_iter it;
		int ret;

		arb_iter_init(&it, er);
		for (ret = arb_iter_seek(&it, &k); ret == 0;
		     ret = arb_iter_next(&it), pos++) {
			arb_iter_key(&it, &k);
			if (k.objectid != bytenr ||
			    k.type != ARB_EXTENT_DATA_REF || k.offset != pos) {
				ret = 1;
				break;
			}
			if (arb_iter_size(&it) != sizeof(r)) {
				ret = -EUCLEAN;
				break;
			}
			memcpy(&r, arb_iter_data(&it), sizeof(r));
			if (data_ref_home(&r) <= hole) {
				move = true;
				break;
			}
		}
		arb_iter_release(&it);
		if (!move)
			return ret < 0 ? ret : 0;
		ret = arb_del_item(t, er, &k);
		if (ret)
			return ret;
		k.offset = hole;
		ret = arb_insert_item(t, er, &k, &r, sizeof(r));
		if (ret)
			return ret;
		hole = pos;
	}
}

int arb_data_ref_insert(struct arb_txn *t, uint64_t bytenr,
			const struct arb_extent_data_ref *r)
{
	struct arb_root *er = t->vol->extent_root;
	struct arb_key k;
	uint32_t count;
	int ret;

	ret = find_data_ref(er, bytenr, arb_extent_data_ref_d_root(r),
			    arb_extent_data_ref_d_objectid(r),
			    arb_extent_data_ref_d_offset(r), &k, &count);
	if (ret == 0)
		return -EEXIST;
	if (ret < 0)
		return ret;
	return arb_insert_item(t, er, &k, r, sizeof(*r));
}

static int apply_data_deltas(struct arb_txn *t, struct dref_head *h)
{
	struct arb_root *er = t->vol->extent_root;
	struct arb_extent_data_ref r;
	struct arb_key k;
	uint32_t count = 0;
	int ret;

	for (size_t i = 0; i < h->nr_dd; i++) {
		struct data_delta *x = &h->dd[i];
		int64_t c;
		if (!x->delta)
			continue;
		ret = find_data_ref(er, h->bytenr, x->root, x->ino, x->offset,
				    &k, &count);
		if (ret < 0)
			return ret;
		if (ret == 1)
			count = 0;
		c = (int64_t)count + x->delta;
		if (c < 0) {
			arb_log(ARB_LOG_ERR,
				"extent %llu: back-reference (%llu,%llu,%llu) "
				"would go negative",
				(unsigned long long)h->bytenr,
				(unsigned long long)x->root,
				(unsigned long long)x->ino,
				(unsigned long long)x->offset);
			return -EUCLEAN;
		}
		if (c == 0) {
			ret = arb_del_item(t, er, &k);
			if (!ret)
				ret = close_data_ref_hole(t, er, h->bytenr,
							  k.offset);
		} else {
			arb_set_extent_data_ref_d_root(&r, x->root);
			arb_set_extent_data_ref_d_objectid(&r, x->ino);
			arb_set_extent_data_ref_d_offset(&r, x->offset);
			arb_set_extent_data_ref_d_count(&r, (uint32_t)c);
			if (ret == 1)
				ret = arb_insert_item(t, er, &k, &r, sizeof(r));
			else
				ret = arb_update_item(t, er, &k, &r, sizeof(r));
		}
		if (ret)
			return ret;
	}
	return 0;
}

static int run_one(struct arb_txn *t, struct dref_head *h)
{
	struct arb_vol *vol = t->vol;
	struct arb_root *er = vol->extent_root;
	struct arb_key k = { h->bytenr, ARB_EXTENT_ITEM, h->num_bytes };
	uint8_t buf[sizeof(struct arb_extent_item) +
		    sizeof(struct arb_tree_block_ref)];
	struct arb_extent_item *ei = (void *)buf;
	struct arb_tree_block_ref *tr = (void *)(ei + 1);
	uint32_t size = h->is_tree ? sizeof(buf) : sizeof(*ei);
	int64_t refs;
	uint64_t gen;
	uint32_t item_size;
	int ret;

	ret = arb_lookup_item(er, &k, buf, sizeof(buf));
	if (ret == -ENOENT) {
		if (h->delta == 0 && h->is_new) {
			/* made and dropped again in this transaction (data
			 * flushed, then rewritten before the commit): its
			 * checksums go too, or they would stay over free
			 * space and override those of a later extent that
			 * covers it without starting where it started */
			if (!h->is_tree) {
				ret = drop_csums(t, h->bytenr, h->num_bytes);
				if (ret)
					return ret;
			}
			return release_extent(t, h->bytenr, h->num_bytes,
					      t->transid, h->is_tree,
					      h->mirror);
		}
		if (h->delta <= 0 || !h->is_new) {
			if (h->delta == 0 && h->nr_dd == 0)
				return 0;
			arb_log(ARB_LOG_ERR,
				"extent %llu+%llu: reference change %lld on a "
				"missing extent item",
				(unsigned long long)h->bytenr,
				(unsigned long long)h->num_bytes,
				(long long)h->delta);
			return -EUCLEAN;
		}
		memset(buf, 0, sizeof(buf));
		arb_set_extent_item_e_refs(ei, (uint64_t)h->delta);
		arb_set_extent_item_e_generation(ei, t->transid);
		arb_set_extent_item_e_flags(ei, h->is_tree ? ARB_EXTENT_FLAG_TREE_BLOCK
							   : ARB_EXTENT_FLAG_DATA);
		if (h->is_tree) {
			arb_set_tree_block_ref_t_owner(tr, h->owner);
			arb_set_tree_block_ref_t_level(tr, (uint8_t)h->level);
			arb_set_tree_block_ref_t_mirror(tr, h->mirror);
		}
		ret = arb_insert_item(t, er, &k, buf, size);
		if (!ret && !h->is_tree)
			ret = apply_data_deltas(t, h);
		return ret;
	}
	if (ret < 0)
		return ret;
	if (ret < (int)sizeof(*ei))
		return -EUCLEAN;
	/* ret is reused below: remember the item's size for the update */
	item_size = (uint32_t)ret;
	if (h->is_tree && item_size < sizeof(buf))
		return -EUCLEAN;
	refs = (int64_t)arb_extent_item_e_refs(ei) + h->delta;
	gen = arb_extent_item_e_generation(ei);
	if (refs < 0) {
		arb_log(ARB_LOG_ERR, "extent %llu: reference count below zero",
			(unsigned long long)h->bytenr);
		return -EUCLEAN;
	}
	if (!h->is_tree) {
		ret = apply_data_deltas(t, h);
		if (ret)
			return ret;
	}
	if (refs == 0) {
		ret = arb_del_item(t, er, &k);
		if (!ret && !h->is_tree)
			ret = drop_csums(t, h->bytenr, h->num_bytes);
		if (!ret)
			ret = release_extent(t, h->bytenr, h->num_bytes, gen,
					     h->is_tree,
					     h->is_tree ? arb_tree_block_ref_t_mirror(tr)
							: 0);
		return ret;
	}
	if (h->delta == 0)
		return 0;
	arb_set_extent_item_e_refs(ei, (uint64_t)refs);
	/* not ret: apply_data_deltas() set it to 0, which used to shrink a
	 * shared data extent's item to nothing */
	return arb_update_item(t, er, &k, buf, item_size);
}

int arb_run_delayed_refs(struct arb_txn *t)
{
	struct arb_vol *vol = t->vol;
	int ret = 0;

	while (!t->error && arb_delayed_refs_pending(vol)) {
		struct arb_delayed_refs *d = vol->drefs;
		struct dref_head *list = NULL;

		/* take the whole queue; applying it may queue more */
		for (size_t i = 0; i < d->size; i++) {
			struct dref_head *h = d->table[i], *next;
			for (; h; h = next) {
				next = h->next;
				h->next = list;
				list = h;
			}
			d->table[i] = NULL;
		}
		d->count = 0;
		while (list) {
			struct dref_head *h = list;
			list = h->next;
			if (!ret)
				ret = run_one(t, h);
			dref_free(h);
		}
		if (ret)
			return arb_txn_fail(t, ret);
	}
	return t->error;
}

/* ---- resize ---------------------------------------------------------------- */

/*
 * Make the free-space map cover new_total bytes.  Growing adds free
 * sectors; shrinking needs every sector from new_total on free (and none
 * pinned: commit first), else -EBUSY.  The caller updates vol->total_bytes
 * and the superblock.
 */
int arb_free_space_resize(struct arb_vol *vol, uint64_t new_total)
{
	struct arb_free_space *f = vol->fsp;
	uint64_t nbits = new_total / vol->sectorsize, i;
	size_t oldw = (f->nbits + 63) / 64, neww = (nbits + 63) / 64;

	if (nbits < f->nbits) {
		for (i = nbits; i < f->nbits; i++)
			if (bit_test(f, i))
				return -EBUSY;
		for (size_t p = 0; p < f->nr_pinned; p++)
			if (f->pinned[p].start + f->pinned[p].len > nbits)
				return -EBUSY;
		f->free -= f->nbits - nbits;
		/* bits past the end stay 0: clear the tail of the last word */
		if (nbits % 64)
			f->bits[nbits / 64] &= (1ULL << (nbits % 64)) - 1;
		f->nbits = nbits;
		if (f->meta_cursor >= nbits)
			f->meta_cursor = ARB_DATA_START / vol->sectorsize;
		if (f->data_cursor >= nbits)
			f->data_cursor = nbits / 16;
		return 0;
	}
	if (neww > oldw) {
		uint64_t *b = realloc(f->bits, neww * sizeof(*b));
		if (!b)
			return -ENOMEM;
		memset(b + oldw, 0, (neww - oldw) * sizeof(*b));
		f->bits = b;
	}
	f->free += nbits - f->nbits;
	f->nbits = nbits;
	return 0;
}
