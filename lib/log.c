/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core.h"

int arb_log_level = ARB_LOG_WARN;

__attribute__((constructor)) static void log_init(void)
{
	const char *s = getenv("ARBOR_LOG_LEVEL");
	if (s)
		arb_log_level = atoi(s);
}

static void (*log_sink)(int level, const char *msg);

void arb_log_set_sink(void (*sink)(int level, const char *msg))
{
	log_sink = sink;
}

void arb_log(int level, const char *fmt, ...)
{
	va_list ap;

	if (level > arb_log_level)
		return;
	va_start(ap, fmt);
	if (log_sink) {
		char msg[1024];

		vsnprintf(msg, sizeof(msg), fmt, ap);
		log_sink(level, msg);
	} else {
		fputs("arborfs: ", stderr);
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
	}
	va_end(ap);
}

void arb_assert_fail(const char *file, int line, const char *expr)
{
	fprintf(stderr, "arborfs: assertion failed at %s:%d: %s\n", file, line,
		expr);
	abort();
}
