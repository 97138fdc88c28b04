/* SPDX-License-Identifier: MIT */
/* arbor_cli.h - the parts of the arbor tool (cli/). */
#ifndef ARBOR_CLI_H
#define ARBOR_CLI_H

/* "arbor filesystem ...": argv[0] is "filesystem"; returns the exit status
 * (0 ok, 1 failed, 2 bad usage) */
int arbor_filesystem(int argc, char **argv);

#endif
