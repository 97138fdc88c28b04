/* SPDX-License-Identifier: MIT */
/*
 * progress.c - a pump for send streams: a child process that copies a
 * stream from one descriptor to another, counts its bytes and commands,
 * optionally holds a rate and draws a progress line on stderr.
 *
 * Why a process and not a thread: on a mount the daemon opens the
 * caller's descriptors itself (/proc/PID/fd/N), and a process blocked in
 * a FUSE ioctl cannot die before the daemon answers.  A pump thread
 * killed with its process (SIGKILL) would leave the pipe's other end
 * open in a process that never finishes exiting, and the daemon blocked
 * on it forever.  A child process holds its ends alone: if it dies they
 * close, and the daemons see a broken pipe or an end of stream; if the
 * parent dies the child carries the stream to its end.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "arbor_cli.h"

/* the stream's header and a command's header (docs/SEND-STREAM.md) */
#define STREAM_HDR 68
#define CMD_HDR 12
#define CMD_END 12 /* the last command's type */
#define REFRESH_NS 250000000ull /* at most 4 lines a second */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* counts commands as their headers go by: bytes to skip to the next one,
 * and the part of a header seen so far */
struct cmd_count {
	uint64_t skip, commands;
	uint8_t hdr[CMD_HDR];
	unsigned have;
	bool in_end, ended; /* in the END command; past it */
};

/* count the commands in p[0..n); the bytes of p up to the end of the
 * END command (n if it is not in p) */
static size_t count_cmds(struct cmd_count *c, const uint8_t *p, size_t n)
{
	size_t len = n;

	while (n) {
		size_t k;

		if (c->skip) {
			k = c->skip < n ? (size_t)c->skip : n;
			c->skip -= k;
			p += k;
			n -= k;
			if (!c->skip && c->in_end) {
				c->ended = true;
				return len - n;
			}
			continue;
		}
		k = CMD_HDR - c->have < n ? CMD_HDR - c->have : n;
		memcpy(c->hdr + c->have, p, k);
		c->have += (unsigned)k;
		p += k;
		n -= k;
		if (c->have == CMD_HDR) {
			c->skip = (uint64_t)c->hdr[4] | (uint64_t)c->hdr[5] << 8 |
				  (uint64_t)c->hdr[6] << 16 |
				  (uint64_t)c->hdr[7] << 24;
			c->have = 0;
			c->commands++;
			c->in_end = c->hdr[0] == CMD_END && !c->hdr[1];
			if (c->in_end && !c->skip) {
				c->ended = true;
				return len - n;
			}
		}
	}
	return len;
}

void cli_human_bytes(uint64_t b, char *buf, size_t len)
{
	static const char *const u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)b;
	unsigned i = 0;

	while (v >= 1024 && i < 4) {
		v /= 1024;
		i++;
	}
	if (i == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)b);
	else
		snprintf(buf, len, "%.1f %s", v, u[i]);
}

static void clock_text(double s, char *buf, size_t len)
{
	unsigned long t = s < 0 ? 0 : (unsigned long)(s + 0.5);

	if (t >= 3600)
		snprintf(buf, len, "%lu:%02lu:%02lu", t / 3600, t / 60 % 60,
			 t % 60);
	else
		snprintf(buf, len, "%lu:%02lu", t / 60, t % 60);
}

/* one progress line: refreshed in place (\r), or the last one (\n) */
static void draw(const struct cli_progress *p, uint64_t bytes,
		 uint64_t cmds, uint64_t t0, uint64_t moved, bool last)
{
	double secs = (double)(now_ns() - t0) / 1e9;
	double rate = secs > 0 ? (double)bytes / secs / 1e6 : 0;
	char b[32], tail[64], el[32];

	cli_human_bytes(bytes, b, sizeof(b));
	clock_text(secs, el, sizeof(el));
	if (last) {
		fprintf(stderr, "\r%s: %s (%llu bytes) in %.1f s, %.1f MB/s, "
			"%llu commands\n",
			p->what, b, (unsigned long long)bytes, secs, rate,
			(unsigned long long)cmds);
		return;
	}
	tail[0] = 0;
	if (now_ns() - moved >= 1000000000ull && !p->total) {
		/* a sender's digest, at the end: a walk of what changed, or
		 * of the whole snapshot's metadata for a full stream */
		snprintf(tail, sizeof(tail), ", waiting %.0f s",
			 (double)(now_ns() - moved) / 1e9);
	} else if (p->total && bytes + 128 >= p->total) {
		/* the digest at the end */
		snprintf(tail, sizeof(tail), ", verifying the digest");
	} else if (p->total && rate > 0) {
		char eta[32];

		clock_text((double)(p->total - bytes) / (rate * 1e6), eta,
			   sizeof(eta));
		snprintf(tail, sizeof(tail), ", %u%%, ETA %s",
			 (unsigned)(bytes * 100 / p->total), eta);
	}
	fprintf(stderr, "\r%s: %s, %llu commands, %.1f MB/s, %s%s    ",
		p->what, b, (unsigned long long)cmds, rate, el, tail);
}

static int write_all(int fd, const uint8_t *b, size_t n)
{
	while (n) {
		ssize_t w = write(fd, b, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

/* the child: copy in to out until the end of in; never returns */
static void pump(int in, int out, const struct cli_progress *p)
{
	enum { BUF = 256 << 10 };
	struct cmd_count cc = { .skip = STREAM_HDR };
	uint64_t t0 = now_ns(), next = t0 + REFRESH_NS, bytes = 0, moved = t0;
	uint8_t *buf = malloc(BUF);
	int status = 1;

	if (!buf)
		_exit(1);
	for (;;) {
		struct pollfd pf = { .fd = in, .events = POLLIN };
		ssize_t n;
		int r = poll(&pf, 1, p->show ? 250 : -1);

		if (r < 0 && errno != EINTR)
			break;
		if (p->show && now_ns() >= next) {
			draw(p, bytes, cc.commands, t0, moved, false);
			next = now_ns() + REFRESH_NS;
		}
		if (r <= 0)
			continue;
		n = read(in, buf, BUF);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0)
			break;
		if (n == 0) {
			status = 0;
			break;
		}
		if (p->stop_at_end)
			n = (ssize_t)count_cmds(&cc, buf, (size_t)n);
		else
			count_cmds(&cc, buf, (size_t)n);
		if (write_all(out, buf, (size_t)n))
			break;
		bytes += (uint64_t)n;
		moved = now_ns();
		if (p->bwlimit) {
			/* hold the rate: sleep until these bytes are due */
			uint64_t due = t0 + bytes * 1000000000ull / p->bwlimit,
				 t = now_ns();

			if (due > t) {
				struct timespec ts = {
					.tv_sec = (time_t)((due - t) / 1000000000ull),
					.tv_nsec = (long)((due - t) % 1000000000ull)
				};

				nanosleep(&ts, NULL);
			}
		}
		if (p->stop_at_end && cc.ended) {
			status = 0;
			break;
		}
	}
	if (p->show) {
		if (status)
			fputc('\n', stderr);
		else
			draw(p, bytes, cc.commands, t0, moved, true);
	}
	free(buf);
	_exit(status);
}

/* every descriptor from 3 up except keep[0..1] */
static void close_others(int a, int b)
{
	int lo = a < b ? a : b, hi = a < b ? b : a;

	if (lo > 3)
		close_range(3, (unsigned)lo - 1, 0);
	if (hi > lo + 1)
		close_range((unsigned)lo + 1, (unsigned)hi - 1, 0);
	close_range((unsigned)hi + 1, ~0u, 0);
}

pid_t cli_pump_start(int in, int out, const struct cli_progress *p)
{
	sigset_t all;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "arbor: fork: %s\n", strerror(errno));
		return -1;
	}
	if (pid)
		return pid;
	/* the child: its own ends only, default signals but SIGPIPE (a
	 * closed reader is an error to report, not a death) */
	if (in < 3 || out < 3) {
		int a = fcntl(in, F_DUPFD, 3), b = fcntl(out, F_DUPFD, 3);

		if (a < 0 || b < 0)
			_exit(1);
		in = a;
		out = b;
	}
	close_others(in, out);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	pump(in, out, p);
	return -1;
}

int cli_pump_wait(pid_t pid)
{
	int st;

	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return 1;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

bool cli_progress_wanted(int opt)
{
	return opt > 0 || (opt < 0 && isatty(STDERR_FILENO));
}
