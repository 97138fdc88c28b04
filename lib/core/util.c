/* SPDX-License-Identifier: MIT */
/* util.c - small helpers the tools share. */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "arbor/arbor.h"

int arb_parse_size(const char *s, uint64_t *out)
{
	unsigned long long v;
	unsigned shift = 0;
	char *end;

	if (!s || !*s || *s == '-' || *s == '+')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	}
	if (shift && (end[0] == 'i' || end[0] == 'I') &&
	    (end[1] == 'B' || end[1] == 'b'))
		end += 2;
	else if (shift && (end[0] == 'B' || end[0] == 'b'))
		end++;
	if (*end)
		return -EINVAL;
	if (v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = (uint64_t)v << shift;
	return 0;
}

uint64_t arb_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
