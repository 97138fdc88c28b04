/* SPDX-License-Identifier: MIT */
/*
 * items.c - the table of validate and print functions, one row per item
 * type of ARB_ITEM_TYPES (format.h), and the entry points that use it.
 * TEST_ITEM (unit tests only) takes any payload.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "items.h"

struct arb_item_ops {
	arb_item_validate_fn validate;
	arb_item_print_fn print;
};

/* ARB_ITEM_OPS_<name> (items.h) must exist for every type */
static const struct arb_item_ops item_ops[256] = {
#define x(n, v, d) [v] = { ARB_ITEM_OPS_##n },
	ARB_ITEM_TYPES(x)
#undef x
};

int arb_item_why(const char **why, int err, const char *fmt, ...)
{
	static __thread char buf[160];
	va_list ap;

	if (!why)
		return err;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	*why = buf;
	return err;
}

void arb_item_print_bytes(FILE *out, const void *p, size_t len)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < len; i++) {
		if (b[i] >= 0x20 && b[i] < 0x7f && b[i] != '\\' &&
		    b[i] != '\'')
			fputc(b[i], out);
		else
			fprintf(out, "\\x%02x", b[i]);
	}
}

int arb_item_validate(const struct arb_key *k, const void *data, uint32_t size,
		      const char **why)
{
	const struct arb_item_ops *ops = &item_ops[k->type];

	if (!ops->validate)
		return arb_item_why(why, -EUCLEAN, "unknown item type %u",
				    k->type);
	return ops->validate(k, data, size, why);
}

void arb_item_print(FILE *out, const struct arb_key *k, const void *data,
		    uint32_t size)
{
	const struct arb_item_ops *ops = &item_ops[k->type];
	const char *why = NULL;
	int ret;

	fprintf(out, "  (%" PRIu64 " %s %" PRIu64 ") size %u", k->objectid,
		arb_item_type_name(k->type), k->offset, size);
	ret = arb_item_validate(k, data, size, &why);
	if (ret < 0)
		fprintf(out, " invalid: %s\n", why);
	else if (ret == ARB_ITEM_NEWER) {
		fprintf(out, " newer format: %s;", why);
		arb_raw_item_print(out, k, data, size);
	}
	else if (ops->print)
		ops->print(out, k, data, size);
	else
		fputc('\n', out);
}

/* ---- TEST_ITEM, and types with no layout yet --------------------------- */

ARB_ITEM_FN(arb_any_item)
{
	(void)k;
	(void)d;
	(void)size;
	(void)why;
	return 0;
}

/* the first bytes in hex */
ARB_ITEM_PRINT_FN(arb_raw_item)
{
	(void)k;
	if (size)
		fputs(" data", out);
	for (uint32_t i = 0; i < size && i < 32; i++)
		fprintf(out, "%s%02x", i % 8 ? "" : " ", d[i]);
	fputs(size > 32 ? " ...\n" : "\n", out);
}
