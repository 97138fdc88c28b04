// SPDX-License-Identifier: MIT
/*
 * unmount.c - "arbor unmount MNT": unmount and wait for the daemon.
 *
 * fusermount3 -u (and umount) return once the kernel has let go of the
 * mount, while the daemon still writes its last commit and only then
 * releases the image: `fusermount3 -u m; fsck.arborfs e.img` failed with
 * "image is in use" 8 times in 10.  This command finds the image of the
 * mount (its source in /proc/self/mountinfo), unmounts, and waits until
 * nobody holds the image's lock (the daemon has exited), so that the next
 * command of a script can open it.  Exit 0 when the image is free.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "arbor_cli.h"
#include "arbor_help.h"

/* the unmount part of docs/man/arbor.help */
static void usage(FILE *f)
{
	fputs(ARBOR_HELP_UNMOUNT, f);
}

/* mountinfo's octal escapes (\040 for a space, ...) undone in place */
static void unescape(char *s)
{
	char *d = s;

	while (*s) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' &&
		    s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*d++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 +
				      (s[3] - '0'));
			s += 4;
		} else {
			*d++ = *s++;
		}
	}
	*d = '\0';
}

/*
 * The source (image) of the arborfs mount at mnt (a canonical path), into
 * src; 0, or -1 when mnt is not an arborfs mount.
 */
static int find_image(const char *mnt, char *src, size_t size)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	char *line = NULL;
	size_t cap = 0;
	int ret = -1;

	if (!f)
		return -1;
	while (getline(&line, &cap, f) > 0) {
		/* id parent maj:min root mountpoint opts [tags] - type src sb */
		char *fields[5], *sep, *save, *p = line;
		char *type, *source;
		int i;

		for (i = 0; i < 5; i++) {
			fields[i] = strtok_r(p, " ", &save);
			p = NULL;
			if (!fields[i])
				break;
		}
		if (i < 5)
			continue;
		unescape(fields[4]);
		if (strcmp(fields[4], mnt))
			continue;
		sep = strstr(save, " - ");
		if (!sep)
			continue;
		type = strtok_r(sep + 3, " ", &save);
		source = strtok_r(NULL, " ", &save);
		if (!type || !source || strcmp(type, "fuse.arborfs"))
			continue;
		unescape(source);
		snprintf(src, size, "%s", source);
		ret = 0; /* the last match: the mount on top */
	}
	free(line);
	fclose(f);
	return ret;
}

static int run_fusermount(const char *mnt)
{
	pid_t pid = fork();
	int st;

	if (pid < 0)
		return -1;
	if (pid == 0) {
		execlp("fusermount3", "fusermount3", "-u", mnt, (char *)NULL);
		_exit(127);
	}
	if (waitpid(pid, &st, 0) < 0)
		return -1;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

int cli_unmount(int argc, char **argv)
{
	static const struct option lo[] = { { "timeout", 1, 0, 't' },
					    { "help", 0, 0, 'h' },
					    { 0, 0, 0, 0 } };
	char mnt[PATH_MAX], image[PATH_MAX + 1];
	unsigned timeout = 120;
	struct timespec t0, now;
	bool told = false;
	int c, fd;

	optind = 2;
	while ((c = getopt_long(argc, argv, "t:h", lo, NULL)) != -1) {
		switch (c) {
		case 't': {
			char *end;
			unsigned long v = strtoul(optarg, &end, 10);

			if (*end || !*optarg || v > 86400) {
				fprintf(stderr,
					"arbor unmount: bad timeout '%s'\n",
					optarg);
				return 2;
			}
			timeout = (unsigned)v;
			break;
		}
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc - 1) {
		usage(stderr);
		return 2;
	}
	if (!realpath(argv[optind], mnt)) {
		fprintf(stderr, "arbor unmount: %s: %s\n", argv[optind],
			strerror(errno));
		return 1;
	}
	if (find_image(mnt, image, sizeof(image))) {
		fprintf(stderr, "arbor unmount: %s: not an arborfs mount\n",
			mnt);
		return 1;
	}
	/* the image is opened before the unmount: its path may be relative
	 * to the daemon's directory (then this open fails, and we can only
	 * unmount) */
	fd = open(image, O_RDONLY | O_CLOEXEC);
	if (umount2(mnt, 0) < 0 && run_fusermount(mnt) < 0) {
		fprintf(stderr, "arbor unmount: %s: cannot unmount: %s\n", mnt,
			errno == EBUSY ? "busy (files open, or a shell in it)"
				       : "umount and fusermount3 -u failed");
		if (fd >= 0)
			close(fd);
		return 1;
	}
	if (fd < 0) {
		fprintf(stderr,
			"arbor unmount: %s: unmounted, but the image %s cannot "
			"be opened to wait for the daemon: %s\n",
			mnt, image, strerror(errno));
		return 1;
	}
	/* the daemon holds flock(LOCK_EX), or LOCK_SH when read-only */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - t0.tv_sec >= (time_t)timeout) {
			fprintf(stderr,
				"arbor unmount: %s: unmounted, but %s is "
				"still in use after %u s\n",
				mnt, image, timeout);
			close(fd);
			return 1;
		}
		if (!told && now.tv_sec > t0.tv_sec) {
			fprintf(stderr,
				"arbor unmount: waiting for the daemon to "
				"finish its last commit on %s\n",
				image);
			told = true;
		}
		usleep(20000);
	}
	close(fd);
	return 0;
}
