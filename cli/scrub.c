/* SPDX-License-Identifier: MIT */
/*
 * arbor scrub --image IMG [-r]: verify every tree node and data block of
 * an unmounted image against its checksum (lib/check/scrub.c), rewrite a bad
 * copy of a tree node from its good copy (duplicated metadata; not with
 * -r, which opens the image read-only), print each problem with the paths
 * of the affected files and a summary.
 *
 * Exit status: 0 no errors, 1 operational error (cannot open, I/O error
 * of the walk itself), 2 usage, 3 uncorrectable errors found.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arbor/ioctl.h>

#include "arbor/arbor.h"
#include "arbor_cli.h"
#include "arbor_help.h"

static void print_line(void *arg, const char *line)
{
	(void)arg;
	printf("%s\n", line);
	fflush(stdout);
}

/* the scrub part of docs/man/arbor.help */
static void scrub_usage(FILE *f)
{
	fputs(ARBOR_HELP_SCRUB, f);
}

void cli_scrub_summary(const struct arb_scrub_stats *st, double secs)
{
	uint64_t bad = st->nodes_uncorrectable + st->data_uncorrectable;

	printf("scrub %s: %" PRIu64 " tree nodes, %" PRIu64
	       " data sectors checked (%.1f MiB in %.2fs)\n",
	       st->done ? "done" : "stopped", st->nodes_checked,
	       st->data_sectors_checked,
	       (double)st->bytes_checked / (1024.0 * 1024.0), secs);
	printf("  corrected %" PRIu64 ", uncorrectable %" PRIu64
	       " (checksum %" PRIu64 ", read %" PRIu64 "), files affected %"
	       PRIu64 "\n",
	       st->nodes_corrected, bad, st->csum_errors, st->read_errors,
	       st->files_affected);
	if (st->data_no_csum)
		printf("  %" PRIu64 " bytes without checksums (preallocated)\n",
		       st->data_no_csum);
}

static const char *const scrub_state[] = { "never run", "running",
					     "finished", "cancelled",
					     "failed" };

/* print a status; returns the exit status it stands for */
static int print_status(const struct arb_ioc_scrub *sc)
{
	struct arb_scrub_stats st;

	memset(&st, 0, sizeof(st));
	st.bytes_checked = sc->bytes_checked;
	st.nodes_checked = sc->nodes_checked;
	st.nodes_corrected = sc->nodes_corrected;
	st.nodes_uncorrectable = sc->nodes_uncorrectable;
	st.data_sectors_checked = sc->data_sectors_checked;
	st.data_uncorrectable = sc->data_uncorrectable;
	st.data_no_csum = sc->data_no_csum;
	st.csum_errors = sc->csum_errors;
	st.read_errors = sc->read_errors;
	st.files_affected = sc->files_affected;
	st.done = sc->state == ARB_IOC_SCRUB_FINISHED;
	printf("state: %s", sc->state < 5 ? scrub_state[sc->state] : "?");
	if (sc->state == ARB_IOC_SCRUB_FAILED)
		printf(" (%s)", strerror((int)sc->error));
	if (sc->state == ARB_IOC_SCRUB_RUNNING && sc->total_bytes)
		printf(", %.0f%% of %.1f MiB", 100.0 * (double)sc->bytes_checked /
						  (double)sc->total_bytes,
		       (double)sc->total_bytes / (1024.0 * 1024.0));
	printf("\n");
	if (sc->state == ARB_IOC_SCRUB_IDLE)
		return 0;
	for (uint32_t i = 0; i < sc->nr_lines && i < ARB_IOC_SCRUB_LINES; i++)
		printf("%.*s\n", ARB_IOC_SCRUB_LINE_LEN, sc->lines[i]);
	if (sc->nr_problems > sc->nr_lines)
		printf("... %llu more problems in the daemon's log\n",
		       (unsigned long long)(sc->nr_problems - sc->nr_lines));
	cli_scrub_summary(&st, (double)sc->elapsed_ns / 1e9);
	if (sc->state == ARB_IOC_SCRUB_FAILED)
		return 1;
	return sc->nodes_uncorrectable + sc->data_uncorrectable ? 3 : 0;
}

static int scrub_online(const char *cmd, const char *path, bool wait)
{
	struct arb_ioc_scrub sc;
	int fd, rc = 1;

	fd = cli_open_mount(path);
	if (fd < 0)
		return 1;
	memset(&sc, 0, sizeof(sc));
	if (!strcmp(cmd, "cancel")) {
		if (!cli_ioctl(fd, path, ARB_IOC_SCRUB_CANCEL, NULL, "scrub cancel"))
			rc = 0;
		goto out;
	}
	if (!strcmp(cmd, "start")) {
		if (cli_ioctl(fd, path, ARB_IOC_SCRUB_START, &sc, "scrub start"))
			goto out;
		printf("scrub started on %s\n", path);
		if (!wait) {
			rc = 0;
			goto out;
		}
	}
	for (;;) {
		if (cli_ioctl(fd, path, ARB_IOC_SCRUB_STATUS, &sc, "scrub status"))
			goto out;
		if (!wait || sc.state != ARB_IOC_SCRUB_RUNNING)
			break;
		if (isatty(STDERR_FILENO) && sc.total_bytes)
			fprintf(stderr, "\r%.0f%% ",
				100.0 * (double)sc.bytes_checked /
					(double)sc.total_bytes);
		usleep(200 * 1000);
	}
	if (wait && isatty(STDERR_FILENO))
		fprintf(stderr, "\r");
	rc = print_status(&sc);
out:
	close(fd);
	return rc;
}

int cli_scrub(int argc, char **argv)
{
	static const struct option lo[] = { { "image", 1, 0, 'i' },
					    { "help", 0, 0, 'h' },
					    { 0, 0, 0, 0 } };
	struct arb_scrub_stats st;
	struct arb_fs_opts o;
	struct arb_fs *fs;
	struct timespec t0, t1;
	const char *image = NULL, *why = NULL;
	bool quiet = false, readonly = false;
	int c, ret;

	if (argc >= 3 && (!strcmp(argv[2], "start") || !strcmp(argv[2], "status") ||
			  !strcmp(argv[2], "cancel"))) {
		bool wait = false;
		int i = 3;
		if (!strcmp(argv[2], "start") && i < argc && !strcmp(argv[i], "-B")) {
			wait = true;
			i++;
		}
		if (i != argc - 1) {
			scrub_usage(stderr);
			return 2;
		}
		return scrub_online(argv[2], argv[i], wait);
	}
	optind = 2;
	while ((c = getopt_long(argc, argv, "i:qrh", lo, NULL)) != -1) {
		switch (c) {
		case 'i': image = optarg; break;
		case 'r': readonly = true; break;
		case 'q': quiet = true; break;
		case 'h': scrub_usage(stdout); return 0;
		default: scrub_usage(stderr); return 2;
		}
	}
	if (!image || optind != argc) {
		scrub_usage(stderr);
		return 2;
	}
	arb_fs_opts_default(&o);
	o.readonly = readonly;
	ret = arb_fs_open_image(image, &o, &fs, &why);
	if (ret) {
		fprintf(stderr, "arbor scrub: %s: cannot open: %s\n", image,
			arb_reason(ret, why));
		return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ret = arb_fs_scrub(fs, &st, quiet ? NULL : print_line, NULL, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	arb_fs_close(fs);
	cli_scrub_summary(&st, (double)(t1.tv_sec - t0.tv_sec) +
				       (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	if (ret) {
		fprintf(stderr, "arbor scrub: %s: %s\n", image, arb_reason(ret, NULL));
		return 1;
	}
	return st.nodes_uncorrectable + st.data_uncorrectable ? 3 : 0;
}
