/* SPDX-License-Identifier: MIT */
/* arbor_cli.h - the parts of the arbor tool (cli/). */
#ifndef ARBOR_CLI_H
#define ARBOR_CLI_H

#include "arbor/arbor.h"

/* "arbor filesystem ...": argv[0] is "filesystem"; returns the exit status
 * (0 ok, 1 failed, 2 bad usage) */
int arbor_filesystem(int argc, char **argv);

/* "arbor scrub ..." (argv[1] is "scrub"); returns the exit status */
int cli_scrub(int argc, char **argv);
void cli_scrub_summary(const struct arb_scrub_stats *st, double secs);

#endif
