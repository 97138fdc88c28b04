/* SPDX-License-Identifier: MIT */
/*
 * fs_problem.c - the table of named fsck problems (ARB_PROBLEMS in
 * arbor.h) and the record list the checkers fill.
 */
#include <stdlib.h>
#include <string.h>

#include "check_int.h"

struct pb_desc {
	const char *name, *msg;
	bool fix;
};

static const struct pb_desc pb_table[ARB_PB_MAX] = {
#define ARB_PB_DESC(id, nr, nm, fx, ms) [nr] = { nm, ms, fx },
	ARB_PROBLEMS(ARB_PB_DESC)
#undef ARB_PB_DESC
};

const char *arb_problem_name(enum arb_problem_id id)
{
	if ((unsigned)id >= ARB_PB_MAX || !pb_table[id].name)
		return "unknown-problem";
	return pb_table[id].name;
}

const char *arb_problem_message(enum arb_problem_id id)
{
	if ((unsigned)id >= ARB_PB_MAX || !pb_table[id].msg)
		return "unknown problem";
	return pb_table[id].msg;
}

bool arb_problem_fixable(enum arb_problem_id id)
{
	return (unsigned)id < ARB_PB_MAX && pb_table[id].fix;
}

void arb_check_result_free(struct arb_check_result *r)
{
	if (!r)
		return;
	free(r->pb);
	memset(r, 0, sizeof(*r));
}

struct arb_problem *fs_problem_add(struct arb_check_result *r,
				   enum arb_problem_id id, uint64_t ino)
{
	struct arb_problem *p;

	if (!r)
		return NULL;
	if (r->nr == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 16;
		p = realloc(r->pb, cap * sizeof(*p));
		if (!p)
			return NULL;
		r->pb = p;
		r->cap = cap;
	}
	p = &r->pb[r->nr++];
	memset(p, 0, sizeof(*p));
	p->id = id;
	p->ino = ino;
	return p;
}

void fs_problem_print(FILE *out, const struct arb_problem *p)
{
	if (!out)
		return;
	fprintf(out, "%s: %s\n", arb_problem_name(p->id), p->detail);
}
