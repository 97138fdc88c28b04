/* SPDX-License-Identifier: MIT */
/* arbor_cli.h - the parts of the arbor tool (cli/). */
#ifndef ARBOR_CLI_H
#define ARBOR_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "arbor/arbor.h"

/* "arbor filesystem ...": argv[0] is "filesystem"; returns the exit status
 * (0 ok, 1 failed, 2 bad usage) */
int arbor_filesystem(int argc, char **argv);

/* open PATH of a mounted arborfs (message and -1 if it is not one) */
int cli_open_mount(const char *path);
/* ioctl with the common messages (what names it); 0 or -1 */
int cli_ioctl(int fd, const char *path, unsigned long cmd, void *arg,
	      const char *what);
/* "arbor filesystem resize ..." (argv[0] is "resize") */
int cli_resize(int argc, char **argv);
/* "arbor filesystem show|label ..." (argv[0] is "show" or "label") */
int cli_show(int argc, char **argv);
/* history.c: arbor filesystem history */
int cli_history(int argc, char **argv);

/* "arbor scrub ..." (argv[1] is "scrub"); returns the exit status */
int cli_scrub(int argc, char **argv);
/* "arbor check ..." (argv[1] is "check"); returns the exit status */
int cli_check(int argc, char **argv);
/* "arbor unmount ..." (argv[1] is "unmount"); returns the exit status */
int cli_unmount(int argc, char **argv);
/* "arbor subvolume|sub ..." (argv[0] is "subvolume"); the exit status */
int cli_subvolume(int argc, char **argv);
/* "arbor subvolume find-new|diff ..." (argv[1] is the command), findnew.c */
int cli_subvol_diff(int argc, char **argv);
/* open an unmounted image through the library (read-write with rw): 0, or
 * 1 after a message (an image a mount uses is refused: its lock); close
 * it, committing: rc, or 1 after a message (subvol.c) */
int cli_image_open(const char *image, bool rw, struct arb_fs **fs);
int cli_image_close(const char *image, struct arb_fs *fs, int rc);
/* the inode of path in an image opened through the library, from the
 * top-level subvolume's root ("" and "/" name it); 0 or -errno */
int cli_image_resolve(struct arb_fs *fs, const char *path, uint64_t *ino);
/* "arbor filesystem du ..." (argv[0] is "du"), du.c */
int cli_du(int argc, char **argv);
/* "arbor property ..." (argv[0] is "property"); the exit status */
int cli_property(int argc, char **argv);
/* "arbor reflink ..." / "arbor dedupe ..." (argv[0] is the command) */
int cli_reflink(int argc, char **argv);
int cli_dedupe(int argc, char **argv);
/* "arbor send|receive ..." (argv[0] is the command) and "arbor subvolume
 * digest ..." (argv[0] is "digest"): send.c; the exit status */
int cli_send(int argc, char **argv);
int cli_receive(int argc, char **argv);
int cli_digest(int argc, char **argv);
void cli_scrub_summary(const struct arb_scrub_stats *st, double secs);

/* send.c, for backup.c: a stream of the snapshot at snap (against the
 * subvolume with id parent; 0: full) into fd, and a receive from fd into
 * the directory dir, by the daemon of their mount; 0, or 1 after a
 * message; io holds the daemon's answer */
struct arb_ioc_send;
int cli_send_mount(const char *snap, uint64_t parent, int fd, unsigned flags,
		   const char *token, struct arb_ioc_send *io);
int cli_receive_mount(const char *dir, int fd, unsigned flags,
		      struct arb_ioc_send *io);
/* give up the partial receive of token on dir's mount: 0, or 1 after a
 * message */
int cli_receive_discard(const char *dir, const char *token);
/* the same receive through the library, into directory dir (from the
 * top-level subvolume) of the image open as fs: 0, or 1 after a message
 * naming image and dir; res says what was received */
struct arb_recv_result;
int cli_receive_image(struct arb_fs *fs, const char *image, const char *dir,
		      int fd, unsigned flags, struct arb_recv_result *res);
/* subvol.c: an ioctl's subvolume entry from the library's description,
 * for code that handles both (backup.c) */
struct arb_ioc_subvol_entry;
struct arb_subvol_info;
void cli_subvol_entry(struct arb_ioc_subvol_entry *e,
		      const struct arb_subvol_info *i);
/* the id of the subvolume holding path, on a mount; 0 or -1 (message) */
int cli_mount_subvol_id(const char *path, uint64_t *id);

/* "arbor backup ..." (argv[0] is "backup"): backup.c */
int cli_backup(int argc, char **argv);

/* progress.c: a child process that copies a stream from in to out,
 * counting it; with show, a line on stderr at most 4 times a second */
struct cli_progress {
	const char *what; /* "send", "receive", "backup" */
	uint64_t total;   /* the stream's expected size; 0: unknown */
	uint64_t bwlimit; /* bytes a second at most; 0: no limit */
	bool show;
	/* end the output after the stream's END command rather than at the
	 * end of the input: for a sender whose end of the pipe may stay
	 * open until the receive is done (backup) */
	bool stop_at_end;
};
/* the pump's pid, or -1 (message out); the caller closes its own copies
 * of the ends the pump holds */
pid_t cli_pump_start(int in, int out, const struct cli_progress *p);
/* 0 if the pump copied everything up to the end of its input, else 1 */
int cli_pump_wait(pid_t pid);
/* --progress (1), --no-progress (0), neither (-1: if stderr is a tty) */
bool cli_progress_wanted(int opt);
void cli_human_bytes(uint64_t b, char *buf, size_t len);

#endif
