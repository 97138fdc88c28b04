/* SPDX-License-Identifier: MIT */
/* cli.h - the commands of `arbor` that live in their own files. */
#ifndef ARBOR_CLI_H
#define ARBOR_CLI_H

#include "arbor/arbor.h"

/* arbor scrub ... (argv[1] is "scrub"); returns the exit status */
int cli_scrub(int argc, char **argv);
void cli_scrub_summary(const struct arb_scrub_stats *st, double secs);

#endif
