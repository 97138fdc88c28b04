/* SPDX-License-Identifier: MIT */
/* Helpers shared by the Check suites. */
#ifndef ARB_TESTUTIL_H
#define ARB_TESTUTIL_H

#include <check.h>
#include <stdint.h>

#include <arbor/dev.h>

/* ARBOR_TEST_SCALE=ci (default) or full */
int tu_full_scale(void);
/* pick n for ci, m for full */
#define TU_SCALE(ci, full) (tu_full_scale() ? (full) : (ci))

/* Seed from ARBOR_TEST_SEED or the clock; printed so a failure can be
 * reproduced with ARBOR_TEST_SEED=<seed>. */
uint64_t tu_seed(const char *what);
/* xorshift64* */
uint64_t tu_rand(uint64_t *state);
static inline uint64_t tu_rand_range(uint64_t *s, uint64_t n)
{
	return n ? tu_rand(s) % n : 0;
}

/* Run one suite; honours CK_RUN_CASE.  Returns the exit status for main. */
int tu_run_suite(Suite *s);

#endif

/* ---- storage-core fixtures (tests link the internal library) ---- */
struct arb_dev;
struct arb_vol;
/* Format a memory device of size bytes (nodesize 0 = default) and open it. */
void tu_vol_new(uint64_t size, uint32_t nodesize, struct arb_dev **dev,
		struct arb_vol **vol);
/* The same with meta_copies copies of every node (0 = default, dup). */
void tu_vol_new_copies(uint64_t size, uint32_t nodesize, unsigned meta_copies,
		       struct arb_dev **dev, struct arb_vol **vol);
/* Close (committing) and open again on the same device. */
void tu_vol_reopen(struct arb_dev *dev, struct arb_vol **vol);
/* Run the checker; fail the test with its report if it finds problems. */
void tu_vol_check(struct arb_vol *vol);
/* A device passing everything to lower whose destroy leaves lower alone:
 * a filesystem closed on it keeps its bytes in lower for the next open. */
struct arb_dev *tu_dev_borrow(struct arb_dev *lower);
/* The same, calling before_read (may be NULL) before each read, e.g. to
 * make reads slow. */
struct arb_dev *tu_dev_borrow_hooked(struct arb_dev *lower,
				     void (*before_read)(enum arb_io_kind kind));
/* ... and before_write (may be NULL) before each write, e.g. to hold one
 * up. */
struct arb_dev *tu_dev_borrow_hooks(struct arb_dev *lower,
				    void (*before_read)(enum arb_io_kind kind),
				    void (*before_write)(enum arb_io_kind kind,
							 size_t len));
