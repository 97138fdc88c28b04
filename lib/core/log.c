/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stdbool.h>
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

/* ---- messages for tools ------------------------------------------------ */

static const char *tool_prog;
static char held[1024];
static bool holding;
/* errors are held only while a tool opens an image (arb_log_hold): the
 * tool then says the reason once, in its own words; later ones print in
 * order, as they come */
static bool hold_errors;

static void tool_flush(void)
{
	if (holding)
		fprintf(stderr, "%s: %s\n", tool_prog, held);
	holding = false;
}

static void tool_sink(int level, const char *msg)
{
	if (level <= ARB_LOG_ERR && hold_errors) {
		/* a second error before the tool took the first: both count */
		tool_flush();
		snprintf(held, sizeof(held), "%s", msg);
		holding = true;
		return;
	}
	fprintf(stderr, "%s: %s\n", tool_prog, msg);
}

void arb_log_tool(const char *prog)
{
	tool_prog = prog;
	arb_log_set_sink(tool_sink);
	atexit(tool_flush);
}

void arb_log_hold(bool on)
{
	if (!tool_prog)
		return;
	hold_errors = on;
	if (!on)
		tool_flush();
}

const char *arb_log_take_error(void)
{
	if (!holding)
		return NULL;
	holding = false;
	return held;
}

void arb_assert_fail(const char *file, int line, const char *expr)
{
	fprintf(stderr, "arborfs: assertion failed at %s:%d: %s\n", file, line,
		expr);
	abort();
}
