/* SPDX-License-Identifier: MIT */
/*
 * arbor check [--status] [-q] [-v] PATH: the checker of fsck.arborfs on a
 * mounted filesystem, in the background of its daemon (ARB_IOC_CHECK_*),
 * on the generation the daemon commits when it starts, while the
 * filesystem stays in use.  Waits for the end (progress on a terminal;
 * Ctrl-C cancels it), prints the problems and a summary.  --status prints
 * the running or last check instead of starting one.
 *
 * Exit status, as fsck.arborfs: 0 clean, 4 problems found, 1 operational
 * error (cannot start, cancelled, failed), 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <arbor/ioctl.h>

#include "arbor_cli.h"
#include "arbor_help.h"

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* the check part of docs/man/arbor.help */
static void check_usage(FILE *f)
{
	fputs(ARBOR_HELP_CHECK, f);
}

#define U(x) ((unsigned long long)(x))

/* print a finished (or other) status; returns the exit status */
static int print_result(const char *path, const struct arb_ioc_check *ck)
{
	double secs = (double)ck->elapsed_ns / 1e9;

	if (ck->state == ARB_IOC_CHECK_IDLE) {
		printf("%s: no check since mount\n", path);
		return 0;
	}
	if (ck->state == ARB_IOC_CHECK_RUNNING) {
		printf("%s: check of generation %llu running, %.1f MiB "
		       "read, %.1fs\n",
		       path, U(ck->generation),
		       (double)ck->bytes_read / (1024.0 * 1024.0), secs);
		return 0;
	}
	if (ck->state == ARB_IOC_CHECK_CANCELLED) {
		printf("%s: check of generation %llu cancelled%s after "
		       "%.2fs\n",
		       path, U(ck->generation),
		       ck->error == ENOSPC ? " (the filesystem ran short of "
					     "space)"
					   : "",
		       secs);
		return 1;
	}
	if (ck->state == ARB_IOC_CHECK_FAILED) {
		printf("%s: check of generation %llu failed: %s\n", path,
		       U(ck->generation), strerror((int)ck->error));
		return 1;
	}
	for (uint32_t i = 0; i < ck->nr_lines && i < ARB_IOC_CHECK_LINES; i++)
		printf("%.*s\n", ARB_IOC_CHECK_LINE_LEN, ck->lines[i]);
	if (ck->nr_problems > ck->nr_lines)
		printf("... %llu more in the daemon's log (or run "
		       "fsck.arborfs -n on the unmounted image)\n",
		       U(ck->nr_problems - ck->nr_lines));
	printf("%s: generation %llu: %s, %llu nodes, %llu"
	       " items, %llu data sectors checked, %llu"
	       " problem%s found, %.2fs\n",
	       path, U(ck->generation), ck->nr_problems ? "ERRORS" : "clean",
	       ck->nodes, ck->items, ck->sectors, ck->nr_problems,
	       ck->nr_problems == 1 ? "" : "s", secs);
	return ck->nr_problems ? 4 : 0;
}

static void progress(const struct arb_ioc_check *ck)
{
	double pct = ck->bytes_used ? 100.0 * (double)ck->bytes_read /
					      (double)ck->bytes_used
				    : 0;

	/* tree nodes are read twice (the check compares both copies) */
	if (pct > 99)
		pct = 99;
	fprintf(stderr, "\rchecking generation %llu: %.1f MiB read "
			"(~%.0f%%) ",
		U(ck->generation), (double)ck->bytes_read / (1024.0 * 1024.0),
		pct);
}

int cli_check(int argc, char **argv)
{
	static const struct option lo[] = { { "status", 0, 0, 's' },
					    { "help", 0, 0, 'h' },
					    { 0, 0, 0, 0 } };
	struct arb_ioc_check ck;
	struct sigaction sa;
	const char *path;
	bool status = false, quiet = false, tty;
	int c, fd, rc = 1;

	optind = 2;
	while ((c = getopt_long(argc, argv, "sqh", lo, NULL)) != -1) {
		switch (c) {
		case 's': status = true; break;
		case 'q': quiet = true; break;
		case 'h': check_usage(stdout); return 0;
		default: check_usage(stderr); return 2;
		}
	}
	if (optind != argc - 1) {
		check_usage(stderr);
		return 2;
	}
	path = argv[optind];
	fd = cli_open_mount(path);
	if (fd < 0)
		return 1;
	memset(&ck, 0, sizeof(ck));
	if (status) {
		if (!cli_ioctl(fd, path, ARB_IOC_CHECK_STATUS, &ck,
			       "check status"))
			rc = print_result(path, &ck);
		if (ck.state == ARB_IOC_CHECK_RUNNING)
			rc = 0;
		goto out;
	}
	/* flush the kernel's dirty pages first, so the check sees them */
	if (syncfs(fd) < 0)
		fprintf(stderr, "arbor: %s: syncfs: %s\n", path,
			strerror(errno));
	if (ioctl(fd, ARB_IOC_CHECK_START, &ck) < 0) {
		if (errno == EBUSY)
			fprintf(stderr, "arbor: %s: a check is running already "
					"(arbor check --status)\n",
				path);
		else
			cli_ioctl(fd, path, ARB_IOC_CHECK_START, &ck,
				  "check start");
		goto out;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	tty = !quiet && isatty(STDERR_FILENO);
	for (;;) {
		if (interrupted) {
			interrupted = 0;
			/* ENOENT: it ended meanwhile */
			if (ioctl(fd, ARB_IOC_CHECK_CANCEL) < 0 &&
			    errno != ENOENT)
				fprintf(stderr, "arbor: %s: check cancel: %s\n",
					path, strerror(errno));
		}
		if (ioctl(fd, ARB_IOC_CHECK_STATUS, &ck) < 0) {
			if (errno == EINTR)
				continue;
			cli_ioctl(fd, path, ARB_IOC_CHECK_STATUS, &ck,
				  "check status");
			goto out;
		}
		if (ck.state != ARB_IOC_CHECK_RUNNING)
			break;
		if (tty)
			progress(&ck);
		usleep(100 * 1000);
	}
	if (tty)
		fprintf(stderr, "\r\033[K");
	rc = print_result(path, &ck);
out:
	close(fd);
	return rc;
}
