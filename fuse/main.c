// SPDX-License-Identifier: MIT
/*
 * main.c - arborfs, the FUSE daemon: arborfs [options] IMAGE MOUNTPOINT
 *
 * Order of events, and why:
 *   1. parse our -o options, then libfuse's command line;
 *   2. unless -f/-d, fork: the parent waits on a pipe and exits with the
 *      child's verdict, so mount(8) and shell scripts see failures.  The
 *      fork comes before arb_fs_open() because the library may start
 *      threads (the commit timer) that a later fork would not copy; this
 *      is why fuse_daemonize() is not used;
 *   3. open the image and the filesystem: a bad image is reported with the
 *      library's reason and exit status 1 before anything is mounted;
 *   4. create the session and mount, then detach (setsid, stdio to
 *      /dev/null) and tell the parent;
 *   5. serve from a pool of threads (-o singlethread: one) until unmounted or
 *      signalled;
 *   6. arb_fs_close() commits everything.
 *
 * Mounting through mount(8):  mount -t fuse.arborfs IMAGE /mnt -o OPTS, or
 * the fstab line  "IMAGE /mnt fuse.arborfs defaults,commit=10 0 0".  mount(8)
 * runs mount.fuse3, which runs "arborfs IMAGE /mnt -o OPTS" from a fixed
 * PATH (/usr/local/sbin, where meson installs it, is on it).  mount(8)
 * options without meaning here (defaults, auto, nofail, x-*, relatime,
 * ...) are accepted and dropped, with a note for those that would ask
 * for something arborfs does not do (diratime, strictatime, mand,
 * iversion); dev and suid must be asked for, as for any FUSE mount.
 * `mount -o remount,OPTS /mnt` runs us with remount: the running mount's
 * per-mount flags change (do_remount) and no daemon starts; the daemon's
 * own options (noatime for its atime updates too, commit=, ...) stay as
 * they were mounted.  Run by root, arborfs adds allow_other (permissions
 * are the kernel's business: default_permissions is always on).
 *
 * SIGTERM, SIGINT and SIGHUP are taken by a thread of their own instead of
 * fuse_set_signal_handlers(): libfuse's handler ends the session at once,
 * and fuse_session_unmount() then closes /dev/fuse before unmounting, which
 * drops whatever the kernel still holds in its writeback cache.  Our thread
 * first flushes the kernel's dirty pages through the running daemon
 * (syncfs), then unmounts (root) or ends the session.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include <fuse_opt.h>

#include "arborfs_fuse.h"

#ifndef ARBORFS_VERSION
#define ARBORFS_VERSION "unknown"
#endif

#define AFS_TIMEOUT 3600.0
/* how long a mount waits for an image in use (-o no_wait: not at all) */
#define AFS_LOCK_WAIT_MS 10000

struct afs_config {
	char *image;
	unsigned commit;
	/* -o idle_commit=MS */
	unsigned idle_commit;
	unsigned max_inline;
	/* -o clean_batch=NODES */
	unsigned clean_batch;
	/* -o compress[=zlib[:LEVEL]|no], compress-force[=zlib[:LEVEL]] */
	uint8_t compress, compress_level;
	bool compress_force;
	uint64_t cache_size;
	uint64_t autogrow;
	uint64_t dirty_limit; /* 0: the kernel's */
	uint64_t fsync_dirty_limit; /* 0: none (syncmode.c) */
	uint64_t readahead;   /* bytes; 0: the kernel's */
	bool readahead_set;   /* given with -o (else the default, quietly) */
	bool noatime;
	bool readonly;
	bool noacl;
	bool multithread;
	bool open_requests;
	bool no_uring;
	bool uring_normal; /* ring threads at SCHED_OTHER */
	char *trace;
	/* -o log=FILE: messages once detached (else syslog, or stderr
	 * when it is not a terminal) */
	char *log;
	/* -o no_wait: an image in use fails at once */
	bool no_wait;
	/* -o discard[=async]: give freed space back to the host */
	bool discard;
	/* -o subvol=PATH, subvolid=ID: the subvolume shown as the root */
	char *subvol;
	uint64_t subvolid;
	bool have_subvolid;
	/* -o user_subvol_rm_allowed: owners may delete their subvolumes */
	bool user_subvol_rm_allowed;
	/* -o grace=SECONDS, grace_commits=N: how long generations stay
	 * recoverable; -o generation=N (with ro): mount that generation */
	unsigned grace, grace_commits;
	uint64_t generation;
	bool have_fsname;
	bool have_max_threads;
	bool have_subtype;
	bool have_allow_other;
	bool bad;
	/* -o remount: change the flags of the running mount (mount_ops) */
	bool remount;
	struct mount_op {
		unsigned long flag;
		bool set;
	} mount_ops[64];
	unsigned nr_mount_ops;
};

enum {
	KEY_RO,
	KEY_RW,
	KEY_NOATIME,
	KEY_ACL,
	KEY_NOACL,
	KEY_COMMIT,
	KEY_IDLE_COMMIT,
	KEY_MAX_INLINE,
	KEY_CLEAN_BATCH,
	KEY_CACHE_SIZE,
	KEY_AUTOGROW,
	KEY_DIRTY_LIMIT,
	KEY_FSYNC_DIRTY_LIMIT,
	KEY_READAHEAD,
	KEY_TRACE,
	KEY_MULTITHREAD,
	KEY_SINGLETHREAD,
	KEY_OPEN_REQUESTS,
	KEY_URING,
	KEY_NO_URING,
	KEY_URING_SCHED,
	KEY_FSNAME,
	KEY_MAX_THREADS,
	KEY_SUBTYPE,
	KEY_ALLOW_OTHER,
	KEY_DISCARD,
	KEY_LOG,
	KEY_NO_WAIT,
	KEY_TRIM_ASYNC,
	KEY_NO_TRIM,
	KEY_NOTE,
	KEY_REMOUNT,
	KEY_SUBVOL,
	KEY_SUBVOLID,
	KEY_USER_SUBVOL_RM,
	KEY_GRACE,
	KEY_GRACE_COMMITS,
	KEY_GENERATION,
	KEY_COMPRESS,
	KEY_COMPRESS_FORCE,
};

static const struct fuse_opt afs_opt_spec[] = {
	FUSE_OPT_KEY("ro", KEY_RO),
	FUSE_OPT_KEY("rw", KEY_RW),
	FUSE_OPT_KEY("noatime", KEY_NOATIME),
	FUSE_OPT_KEY("acl", KEY_ACL),
	FUSE_OPT_KEY("noacl", KEY_NOACL),
	FUSE_OPT_KEY("commit=", KEY_COMMIT),
	FUSE_OPT_KEY("idle_commit=", KEY_IDLE_COMMIT),
	FUSE_OPT_KEY("max_inline=", KEY_MAX_INLINE),
	FUSE_OPT_KEY("clean_batch=", KEY_CLEAN_BATCH),
	FUSE_OPT_KEY("compress", KEY_COMPRESS),
	FUSE_OPT_KEY("compress=", KEY_COMPRESS),
	FUSE_OPT_KEY("compress-force", KEY_COMPRESS_FORCE),
	FUSE_OPT_KEY("compress-force=", KEY_COMPRESS_FORCE),
	FUSE_OPT_KEY("cache_size=", KEY_CACHE_SIZE),
	FUSE_OPT_KEY("autogrow=", KEY_AUTOGROW),
	FUSE_OPT_KEY("dirty_limit=", KEY_DIRTY_LIMIT),
	FUSE_OPT_KEY("fsync_dirty_limit=", KEY_FSYNC_DIRTY_LIMIT),
	FUSE_OPT_KEY("readahead=", KEY_READAHEAD),
	FUSE_OPT_KEY("trace=", KEY_TRACE),
	FUSE_OPT_KEY("log=", KEY_LOG),
	FUSE_OPT_KEY("no_wait", KEY_NO_WAIT),
	FUSE_OPT_KEY("discard", KEY_TRIM_ASYNC),
	FUSE_OPT_KEY("discard=async", KEY_TRIM_ASYNC),
	FUSE_OPT_KEY("nodiscard", KEY_NO_TRIM),
	FUSE_OPT_KEY("multithread", KEY_MULTITHREAD),
	FUSE_OPT_KEY("singlethread", KEY_SINGLETHREAD),
	FUSE_OPT_KEY("open_requests", KEY_OPEN_REQUESTS),
	FUSE_OPT_KEY("uring", KEY_URING),
	FUSE_OPT_KEY("no_uring", KEY_NO_URING),
	FUSE_OPT_KEY("uring_sched=", KEY_URING_SCHED),
	FUSE_OPT_KEY("fsname=", KEY_FSNAME),
	FUSE_OPT_KEY("max_threads=", KEY_MAX_THREADS),
	FUSE_OPT_KEY("subtype=", KEY_SUBTYPE),
	FUSE_OPT_KEY("allow_other", KEY_ALLOW_OTHER),
	FUSE_OPT_KEY("allow_root", KEY_ALLOW_OTHER),
	FUSE_OPT_KEY("remount", KEY_REMOUNT),
	FUSE_OPT_KEY("subvol=", KEY_SUBVOL),
	FUSE_OPT_KEY("subvolid=", KEY_SUBVOLID),
	FUSE_OPT_KEY("user_subvol_rm_allowed", KEY_USER_SUBVOL_RM),
	FUSE_OPT_KEY("grace=", KEY_GRACE),
	FUSE_OPT_KEY("grace_commits=", KEY_GRACE_COMMITS),
	FUSE_OPT_KEY("generation=", KEY_GENERATION),
	/*
	 * The filesystem-independent options of mount(8) (its man page) that
	 * libfuse 3.14 would refuse or that mean nothing here.  libfuse turns
	 * ro, rw, [no]suid, [no]dev, [no]exec, async, sync, dirsync and
	 * noatime into flags of mount(2); they go on to it (above, or as
	 * any unknown option).  Those of mount(8) itself and of fstab are
	 * dropped quietly; the others with a note (KEY_NOTE, note_option).
	 */
	FUSE_OPT_KEY("defaults", KEY_DISCARD),
	FUSE_OPT_KEY("auto", KEY_DISCARD),
	FUSE_OPT_KEY("noauto", KEY_DISCARD),
	FUSE_OPT_KEY("nofail", KEY_DISCARD),
	FUSE_OPT_KEY("_netdev", KEY_DISCARD),
	FUSE_OPT_KEY("user", KEY_DISCARD),
	FUSE_OPT_KEY("users", KEY_DISCARD),
	FUSE_OPT_KEY("nouser", KEY_DISCARD),
	FUSE_OPT_KEY("owner", KEY_DISCARD),
	FUSE_OPT_KEY("group", KEY_DISCARD),
	FUSE_OPT_KEY("loop", KEY_DISCARD),
	FUSE_OPT_KEY("atime", KEY_DISCARD),
	FUSE_OPT_KEY("relatime", KEY_DISCARD),
	FUSE_OPT_KEY("norelatime", KEY_DISCARD),
	FUSE_OPT_KEY("lazytime", KEY_DISCARD),
	FUSE_OPT_KEY("nolazytime", KEY_DISCARD),
	FUSE_OPT_KEY("noiversion", KEY_DISCARD),
	FUSE_OPT_KEY("comment=", KEY_DISCARD),
	/* describe what arborfs does anyway */
	FUSE_OPT_KEY("nodiratime", KEY_DISCARD),
	FUSE_OPT_KEY("nostrictatime", KEY_DISCARD),
	FUSE_OPT_KEY("nomand", KEY_DISCARD),
	FUSE_OPT_KEY("silent", KEY_DISCARD),
	FUSE_OPT_KEY("loud", KEY_DISCARD),
	/* would ask for something arborfs does not do */
	FUSE_OPT_KEY("diratime", KEY_NOTE),
	FUSE_OPT_KEY("strictatime", KEY_NOTE),
	FUSE_OPT_KEY("iversion", KEY_NOTE),
	FUSE_OPT_KEY("mand", KEY_NOTE),
	FUSE_OPT_END
};

/*
 * Why an option of mount(8) changes nothing here, for the note printed
 * when it is given (stderr, which mount(8) shows).
 */
static void note_option(const char *arg)
{
	static const struct {
		const char *name, *why;
	} notes[] = {
		{ "diratime", "directories' access times are never updated" },
		{ "strictatime", "access times follow relatime (noatime: "
				 "never)" },
		{ "iversion", "FUSE keeps no i_version" },
		{ "mand", "no mandatory locks (Linux dropped them in 5.15)" },
	};

	for (size_t i = 0; i < sizeof(notes) / sizeof(notes[0]); i++)
		if (strcmp(arg, notes[i].name) == 0)
			afs_log(LOG_NOTICE, "-o %s ignored: %s", arg,
				notes[i].why);
}

/*
 * The per-mount flags an option sets or clears, recorded in order for
 * -o remount (do_remount).
 */
static void note_mount_flag(struct afs_config *c, const char *arg)
{
	static const struct {
		const char *name;
		unsigned long flag;
		bool set;
	} flags[] = {
		{ "ro", MS_RDONLY, true },
		{ "rw", MS_RDONLY, false },
		{ "nosuid", MS_NOSUID, true },
		{ "suid", MS_NOSUID, false },
		{ "nodev", MS_NODEV, true },
		{ "dev", MS_NODEV, false },
		{ "noexec", MS_NOEXEC, true },
		{ "exec", MS_NOEXEC, false },
		{ "noatime", MS_NOATIME, true },
		{ "atime", MS_NOATIME, false },
		{ "nodiratime", MS_NODIRATIME, true },
		{ "diratime", MS_NODIRATIME, false },
		{ "relatime", MS_RELATIME, true },
		{ "norelatime", MS_RELATIME, false },
		{ "strictatime", MS_STRICTATIME, true },
		{ "nostrictatime", MS_STRICTATIME, false },
	};

	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
		if (strcmp(arg, flags[i].name) != 0)
			continue;
		if (c->nr_mount_ops == sizeof(c->mount_ops) /
					       sizeof(c->mount_ops[0]))
			return;
		c->mount_ops[c->nr_mount_ops].flag = flags[i].flag;
		c->mount_ops[c->nr_mount_ops++].set = flags[i].set;
		return;
	}
}

/* the library's parser, as a predicate */
static bool parse_size(const char *s, uint64_t *out)
{
	return arb_parse_size(s, out) == 0;
}

static bool parse_uint(const char *s, unsigned *out)
{
	unsigned long v;
	char *end;

	if (!*s || *s == '-' || *s == '+')
		return false;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || end == s || v > UINT_MAX)
		return false;
	*out = (unsigned)v;
	return true;
}

/* "zlib", "zlib:LEVEL" (1-9); "no", "none" (not with force) */
static bool parse_compress(struct afs_config *c, bool force, const char *v)
{
	unsigned level = 0;

	if (!force && (!strcmp(v, "no") || !strcmp(v, "none"))) {
		c->compress = ARB_COMPRESS_NONE;
		c->compress_force = false;
		return true;
	}
	if (strncmp(v, "zlib", 4))
		return false;
	if (v[4] == ':') {
		if (!parse_uint(v + 5, &level) || level < 1 || level > 9)
			return false;
	} else if (v[4]) {
		return false;
	}
	c->compress = ARB_COMPRESS_ZLIB;
	c->compress_level = (uint8_t)level;
	c->compress_force = force;
	return true;
}

static int afs_opt_proc(void *data, const char *arg, int key,
			struct fuse_args *outargs)
{
	struct afs_config *c = data;
	const char *val = strchr(arg, '=');
	uint64_t size;

	(void)outargs;
	val = val ? val + 1 : "";
	if (key != FUSE_OPT_KEY_NONOPT)
		note_mount_flag(c, arg);
	switch (key) {
	case FUSE_OPT_KEY_NONOPT:
		/* the first one is the image; libfuse takes the mountpoint */
		if (!c->image) {
			c->image = strdup(arg);
			return 0;
		}
		return 1;
	case FUSE_OPT_KEY_OPT:
		/* for fstab's users: systemd, mount(8) */
		if (strncmp(arg, "x-", 2) == 0 || strncmp(arg, "X-", 2) == 0)
			return 0;
		return 1;
	case KEY_RO:
		c->readonly = true;
		return 1;
	case KEY_RW:
		c->readonly = false;
		return 1;
	case KEY_NOATIME:
		/* ours (no atime updates) and the kernel's flag alike */
		c->noatime = true;
		return 1;
	case KEY_ACL:
		c->noacl = false;
		return 0;
	case KEY_NOACL:
		c->noacl = true;
		return 0;
	case KEY_COMMIT:
		if (!parse_uint(val, &c->commit)) {
			fprintf(stderr, "arborfs: bad commit=%s: want seconds\n",
				val);
			c->bad = true;
		}
		return 0;
	case KEY_IDLE_COMMIT:
		if (!parse_uint(val, &c->idle_commit)) {
			fprintf(stderr,
				"arborfs: bad idle_commit=%s: want milliseconds\n",
				val);
			c->bad = true;
		}
		return 0;
	case KEY_MAX_INLINE:
		if (!parse_uint(val, &c->max_inline)) {
			fprintf(stderr,
				"arborfs: bad max_inline=%s: want bytes\n",
				val);
			c->bad = true;
		}
		return 0;
	case KEY_COMPRESS:
	case KEY_COMPRESS_FORCE:
		if (!parse_compress(c, key == KEY_COMPRESS_FORCE,
				    strchr(arg, '=') ? val : "zlib")) {
			fprintf(stderr,
				"arborfs: bad %s: want compress=zlib, "
				"compress=zlib:LEVEL (1-9), compress=no, or "
				"compress-force=zlib[:LEVEL]\n",
				arg);
			c->bad = true;
		}
		return 0;
	case KEY_CLEAN_BATCH:
		if (!parse_uint(val, &c->clean_batch) || c->clean_batch == 0) {
			fprintf(stderr,
				"arborfs: bad clean_batch=%s: want a number of "
				"tree nodes, at least 1\n",
				val);
			c->bad = true;
		}
		return 0;
	case KEY_CACHE_SIZE:
		if (!parse_size(val, &size) || size == 0 || size > SIZE_MAX) {
			fprintf(stderr,
				"arborfs: bad cache_size=%s: want bytes with an optional K, M or G suffix\n",
				val);
			c->bad = true;
		} else {
			c->cache_size = size;
		}
		return 0;
	case KEY_AUTOGROW:
		if (!parse_size(val, &size) || size == 0) {
			fprintf(stderr,
				"arborfs: bad autogrow=%s: want the largest size "
				"of the image, bytes with an optional K, M, G or "
				"T suffix\n",
				val);
			c->bad = true;
		} else {
			c->autogrow = size;
		}
		return 0;
	case KEY_DIRTY_LIMIT:
		if (!parse_size(val, &size) || size < 4096) {
			fprintf(stderr,
				"arborfs: bad dirty_limit=%s: want bytes (at least "
				"4K) with an optional K, M or G suffix\n",
				val);
			c->bad = true;
		} else {
			c->dirty_limit = size;
		}
		return 0;
	case KEY_FSYNC_DIRTY_LIMIT:
		if (!parse_size(val, &size) || (size && size < 4096)) {
			fprintf(stderr,
				"arborfs: bad fsync_dirty_limit=%s: want bytes "
				"(0, or at least 4K) with an optional K, M or G "
				"suffix\n",
				val);
			c->bad = true;
		} else {
			c->fsync_dirty_limit = size;
		}
		return 0;
	case KEY_READAHEAD:
		if (!parse_size(val, &size) || (size && size < 4096) ||
		    size > (1ULL << 30)) {
			fprintf(stderr,
				"arborfs: bad readahead=%s: want bytes (0, or 4K "
				"to 1G) with an optional K, M or G suffix\n",
				val);
			c->bad = true;
		} else {
			c->readahead = size;
			c->readahead_set = true;
		}
		return 0;
	case KEY_TRACE:
		if (!*val) {
			fprintf(stderr, "arborfs: trace= needs a file name\n");
			c->bad = true;
		}
		free(c->trace);
		c->trace = strdup(val);
		return 0;
	case KEY_LOG:
		if (!*val) {
			fprintf(stderr, "arborfs: log= needs a file name\n");
			c->bad = true;
		}
		free(c->log);
		c->log = strdup(val);
		return 0;
	case KEY_NO_WAIT:
		c->no_wait = true;
		return 0;
	case KEY_TRIM_ASYNC:
		c->discard = true;
		return 0;
	case KEY_NO_TRIM:
		c->discard = false;
		return 0;
	case KEY_MULTITHREAD:
		c->multithread = true;
		return 0;
	case KEY_OPEN_REQUESTS:
		c->open_requests = true;
		return 0;
	case KEY_SINGLETHREAD:
		c->multithread = false;
		return 0;
	case KEY_URING:
		c->no_uring = false;
		return 0;
	case KEY_NO_URING:
		c->no_uring = true;
		return 0;
	case KEY_URING_SCHED:
		if (!strcmp(val, "idle")) {
			c->uring_normal = false;
		} else if (!strcmp(val, "normal")) {
			c->uring_normal = true;
		} else {
			fprintf(stderr, "arborfs: uring_sched= takes idle or "
				"normal, not '%s'\n", val);
			c->bad = true;
		}
		return 0;
	case KEY_FSNAME:
		c->have_fsname = true;
		return 1;
	case KEY_MAX_THREADS: /* libfuse's, noted */
		c->have_max_threads = true;
		return 1;
	case KEY_SUBTYPE:
		c->have_subtype = true;
		return 1;
	case KEY_ALLOW_OTHER:
		c->have_allow_other = true;
		return 1;
	case KEY_DISCARD:
		return 0;
	case KEY_NOTE:
		note_option(arg);
		return 0;
	case KEY_REMOUNT:
		c->remount = true;
		return 0;
	case KEY_SUBVOL:
		if (!*val) {
			fprintf(stderr, "arborfs: subvol= needs a path (from "
				"the top-level subvolume)\n");
			c->bad = true;
		}
		free(c->subvol);
		c->subvol = strdup(val);
		return 0;
	case KEY_SUBVOLID: {
		char *end;

		errno = 0;
		c->subvolid = strtoull(val, &end, 10);
		if (!*val || *val == '-' || *end || errno ||
		    (c->subvolid != ARB_INUM_FS_TREE &&
		     c->subvolid < ARB_INUM_FIRST_SUBVOL)) {
			fprintf(stderr, "arborfs: bad subvolid=%s: want a "
				"subvolume id (5, or from 256: `arbor "
				"subvolume list`)\n", val);
			c->bad = true;
		}
		c->have_subvolid = true;
		return 0;
	}
	case KEY_USER_SUBVOL_RM:
		c->user_subvol_rm_allowed = true;
		return 0;
	case KEY_GRACE:
		if (!parse_uint(val, &c->grace)) {
			fprintf(stderr, "arborfs: bad grace=%s: want seconds "
				"(0: none)\n", val);
			c->bad = true;
		}
		return 0;
	case KEY_GRACE_COMMITS:
		if (!parse_uint(val, &c->grace_commits)) {
			fprintf(stderr, "arborfs: bad grace_commits=%s: want a "
				"number of commits (0: none)\n", val);
			c->bad = true;
		}
		return 0;
	case KEY_GENERATION: {
		char *end;

		errno = 0;
		c->generation = strtoull(val, &end, 10);
		if (!*val || *val == '-' || *end || errno || !c->generation) {
			fprintf(stderr, "arborfs: bad generation=%s: want a "
				"generation (`arbor filesystem history`)\n",
				val);
			c->bad = true;
		}
		return 0;
	}
	}
	return 1;
}

/*
 * -o remount, as mount.fuse3 runs us for `mount -o remount,OPTS MNT`:
 * "arborfs IMAGE MNT -o <the mount's flags>,remount,OPTS,<FUSE options>",
 * where mount(8) merged the flags it found with OPTS (remount,diratime on
 * a nodiratime mount comes without either).  A second daemon must not
 * start: the running one's mount gets the flags the options describe (a
 * bind remount, as `mount -o remount,bind` does), starting from what a
 * new mount would have (libfuse's nosuid,nodev; relatime), as mount(2)
 * takes the whole set with MS_REMOUNT.  What else the options say (ours,
 * FUSE's) cannot change on a running daemon and is ignored.
 */
static int do_remount(const char *mountpoint, const struct afs_config *c)
{
	unsigned long flags = MS_NOSUID | MS_NODEV;

	for (unsigned i = 0; i < c->nr_mount_ops; i++) {
		unsigned long f = c->mount_ops[i].flag;

		if (!c->mount_ops[i].set) {
			flags &= ~f;
			continue;
		}
		/* one of noatime, relatime, strictatime at a time */
		if (f & (MS_NOATIME | MS_RELATIME | MS_STRICTATIME))
			flags &= ~(MS_NOATIME | MS_RELATIME | MS_STRICTATIME);
		flags |= f;
	}
	/* with none of the three the kernel would keep the mount's atime
	 * flags (noatime after "atime"): relatime, as for a new mount */
	if (!(flags & (MS_NOATIME | MS_RELATIME | MS_STRICTATIME)))
		flags |= MS_RELATIME;
	if (mount(NULL, mountpoint, NULL, MS_REMOUNT | MS_BIND | flags,
		  NULL)) {
		fprintf(stderr, "arborfs: remount of %s: %s\n", mountpoint,
			strerror(errno));
		return 1;
	}
	return 0;
}

/* the text of docs/man/arborfs.help (which makes the man page too), then
 * libfuse's own options */
#include "arborfs_help.h"
static void usage(const char *prog)
{
	(void)prog;
	fputs(ARBORFS_HELP, stdout);
	printf("\n");
	printf("FUSE options:\n");
	fuse_cmdline_help();
	fuse_lowlevel_help();
}

/* ---- messages ---------------------------------------------------------- */

/*
 * stderr until detached; then -o log=FILE, or stderr still when it is not
 * a terminal (a container, a service manager, a redirect: without syslog
 * the messages of a failed commit were lost), or syslog.  Lines written
 * to a file carry the time, as syslog would add it.
 */
static bool log_to_syslog;
static bool log_stamped;

void afs_log(int prio, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (log_to_syslog) {
		vsyslog(prio, fmt, ap);
	} else {
		if (log_stamped) {
			char stamp[32];
			time_t now = time(NULL);
			struct tm tm;

			localtime_r(&now, &tm);
			strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S ",
				 &tm);
			fputs(stamp, stderr);
		}
		fprintf(stderr, "arborfs[%d]: ", (int)getpid());
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
		fflush(stderr);
	}
	va_end(ap);
}

static void lib_log_sink(int level, const char *msg)
{
	afs_log(level, "%s", msg);
}

/*
 * A mount point must be a directory: on a regular file the mount
 * succeeded and left a file that answered EIO.  A daemon that died leaves
 * its mount point answering ENOTCONN: say what to do.
 */
static int check_mountpoint(const char *mnt)
{
	struct stat st;

	if (stat(mnt, &st) < 0) {
		if (errno == ENOTCONN)
			fprintf(stderr,
				"arborfs: %s: %s: the daemon of a mount here "
				"died; `fusermount3 -u %s` first, then mount "
				"again\n",
				mnt, strerror(errno), mnt);
		else
			fprintf(stderr, "arborfs: %s: %s\n", mnt,
				strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr,
			"arborfs: %s: not a directory (mount on a directory)\n",
			mnt);
		return -1;
	}
	return 0;
}

/* ---- daemonizing ------------------------------------------------------- */

static int status_fd = -1;

/*
 * Fork; the parent waits until the child reports (one byte: its exit
 * status) or dies, and exits with that status.  Returns in the child.
 */
static int daemon_fork(void)
{
	int fds[2];
	pid_t pid;

	if (pipe(fds)) {
		perror("arborfs: pipe");
		return -1;
	}
	pid = fork();
	if (pid < 0) {
		perror("arborfs: fork");
		return -1;
	}
	if (pid > 0) {
		unsigned char st = 1;

		close(fds[1]);
		while (read(fds[0], &st, 1) < 0 && errno == EINTR)
			;
		_exit(st);
	}
	close(fds[0]);
	status_fd = fds[1];
	return 0;
}

/* In the child, once mounted: detach and let the parent exit 0. */
/* mountinfo's escaping of a path (octal for space, tab, newline, \\) */
static void mountinfo_escape(const char *in, char *out, size_t size)
{
	size_t n = 0;

	for (; *in && n + 5 < size; in++) {
		if (*in == ' ' || *in == '\t' || *in == '\n' || *in == '\\')
			n += (size_t)snprintf(out + n, size - n, "\\%03o",
					      (unsigned char)*in);
		else
			out[n++] = *in;
	}
	out[n] = 0;
}

/*
 * This mount's backing device, MAJ:MIN, into dev.  The device number comes
 * from /proc/self/mountinfo: absolute already (fuse_parse_cmdline); no
 * realpath or stat, as a lookup on the mountpoint would ask this daemon,
 * which is not serving yet.  Returns 0, or -1 with why set.
 */
static int find_bdi(const char *mountpoint, char *dev, size_t devsz,
		    const char **why)
{
	char want[PATH_MAX * 4], line[PATH_MAX * 4 + 512];
	FILE *f;

	*dev = 0;
	mountinfo_escape(mountpoint, want, sizeof(want));
	f = fopen("/proc/self/mountinfo", "re");
	if (!f) {
		*why = "no /proc/self/mountinfo";
		return -1;
	}
	/* the last match is the mount on top */
	while (fgets(line, sizeof(line), f)) {
		char mdev[64], mpoint[sizeof(line)];

		if (sscanf(line, "%*s %*s %63s %*s %s", mdev, mpoint) == 2 &&
		    strcmp(mpoint, want) == 0)
			snprintf(dev, devsz, "%s", mdev);
	}
	fclose(f);
	if (!*dev) {
		*why = "mount not found";
		return -1;
	}
	return 0;
}

/*
 * Write val to the attribute attr of the backing device dev
 * (/sys/class/bdi/MAJ:MIN/attr; root only).  Returns 0, or -1 with why
 * set.
 */
static int set_bdi(const char *dev, const char *attr, uint64_t val,
		   const char **why)
{
	char path[PATH_MAX];
	FILE *f;

	snprintf(path, sizeof(path), "/sys/class/bdi/%s/%s", dev, attr);
	*why = "cannot write the backing device's ";
	f = fopen(path, "we");
	if (!f)
		return -1;
	fprintf(f, "%llu\n", (unsigned long long)val);
	return fclose(f) == 0 ? 0 : -1;
}

/*
 * -o dirty_limit: the most dirty page cache the kernel keeps for this
 * mount (its backing device's max_bytes).  The kernel's own limit for a
 * FUSE mount is a share of its global dirty limit (about 47 MiB here); the
 * dirty pages of a streaming writer queue ahead of an fsync's own page, so
 * a lower limit shortens fsync waits beside big writers and slows those
 * writers (docs/PERFORMANCE.md, "-o dirty_limit").
 *
 * -o readahead: the kernel's read-ahead window for this mount
 * (read_ahead_kb).  A FUSE mount gets 128 KiB, whatever max_readahead the
 * INIT reply offers (the kernel takes the smaller); sequential reads then
 * come as 256 KiB requests with little in flight.  1 GiB read cold with fio
 * (1 MiB reads), alternating, MB/s: 128 KiB 514-904 (median 742), 1 MiB
 * 875-1,040 (956), 4 MiB 713-888 (824); over io_uring 416-856 / 582-873 /
 * 376-788 (docs/design/fuse.md, "Read-ahead window").  Random reads are
 * not widened (the
 * kernel reads ahead only for sequential access).
 */
static void set_bdi_limits(struct afs *afs, const char *mountpoint,
			   const struct afs_config *c)
{
	const char *why = "";
	char dev[64];

	if (find_bdi(mountpoint, dev, sizeof(dev), &why)) {
		if (c->dirty_limit || c->readahead_set)
			afs_log(LOG_WARNING, "dirty_limit, readahead: no "
				"backing device for %s (%s)", mountpoint, why);
		return;
	}
	if (c->dirty_limit && !c->readonly &&
	    set_bdi(dev, "max_bytes", c->dirty_limit, &why))
		afs_log(LOG_WARNING, "dirty_limit: cannot set the limit of "
			"%s (%smax_bytes, device %s)", mountpoint, why, dev);
	/* the default quietly: not root, or no such attribute */
	if (c->readahead &&
	    set_bdi(dev, "read_ahead_kb", c->readahead / 1024, &why) &&
	    c->readahead_set)
		afs_log(LOG_WARNING, "readahead: cannot set the window of "
			"%s (%sread_ahead_kb, device %s)", mountpoint, why,
			dev);
	/* after dirty_limit: the limit found is the one to put back */
	afs_syncmode_start(afs, dev, c->fsync_dirty_limit);
}

static void daemon_detach(const char *log_file)
{
	unsigned char ok = 0;
	int fd, log_fd = -1;

	if (status_fd < 0)
		return;
	if (log_file) {
		/* opened at mount, before the chdir below */
		log_fd = open(log_file,
			      O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
		if (log_fd < 0)
			afs_log(LOG_WARNING, "log=%s: %s; logging to syslog",
				log_file, strerror(errno));
	} else if (!isatty(2)) {
		log_fd = dup(2);
	}
	if (log_fd >= 0) {
		log_stamped = true;
	} else {
		/* from now on stderr is /dev/null: messages go to syslog */
		openlog("arborfs", LOG_PID, LOG_DAEMON);
		log_to_syslog = true;
	}
	arb_log_set_sink(lib_log_sink);
	setsid();
	/* only so that we do not pin a directory; failure is harmless */
	if (chdir("/")) {
	}
	fd = open("/dev/null", O_RDWR);
	if (fd >= 0) {
		dup2(fd, 0);
		dup2(fd, 1);
		dup2(log_fd >= 0 ? log_fd : fd, 2);
		if (fd > 2)
			close(fd);
	}
	if (log_fd > 2)
		close(log_fd);
	/* if the parent is gone there is nobody to tell */
	if (write(status_fd, &ok, 1) != 1) {
	}
	close(status_fd);
	status_fd = -1;
}

/* ---- signals ----------------------------------------------------------- */

struct afs_sigctx {
	struct fuse_session *se;
	const char *mountpoint;
	pthread_t main_thread;
	sigset_t set;
	_Atomic int loop_done; /* the signal thread polls it */
};

static void wake_handler(int sig)
{
	(void)sig;
}

static void *signal_thread(void *arg)
{
	struct afs_sigctx *sc = arg;
	int sig, fd;

	if (sigwait(&sc->set, &sig))
		return NULL;
	/* the kernel's dirty pages reach us while the loop still serves */
	fd = open(sc->mountpoint, O_RDONLY | O_DIRECTORY);
	if (fd >= 0) {
		syncfs(fd);
		close(fd);
	}
	/* a clean unmount ends the loop by itself */
	if (geteuid() == 0 && umount2(sc->mountpoint, UMOUNT_NOFOLLOW) == 0)
		return NULL;
	fuse_session_exit(sc->se);
	/* interrupt the main thread's wait in the loop until it returns */
	while (!sc->loop_done) {
		pthread_kill(sc->main_thread, SIGUSR1);
		usleep(50 * 1000);
	}
	return NULL;
}

/* ---- main -------------------------------------------------------------- */

/*
 * The node cache's bound when cache_size= is not given: 1/64 of the RAM,
 * at least 64 MiB and at most 512 MiB.  64 MiB held the tree of a
 * 200,000-file directory but not of 1,000,000 files spread over 1,000
 * directories: there creates slowed to 0.45x of the first tenth (each
 * commit, forced by dirty nodes, rewrote most directories' leaves), and
 * 256 MiB kept 0.75x (docs/design/cache.md, "Size and dirty bound").
 * The cache
 * fills only with nodes actually used, so a small filesystem stays small.
 */
static uint64_t default_cache_size(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	uint64_t ram, size;

	if (pages <= 0 || psize <= 0)
		return 64ULL << 20;
	ram = (uint64_t)pages * (uint64_t)psize;
	size = ram / 64;
	if (size < (64ULL << 20))
		size = 64ULL << 20;
	if (size > (512ULL << 20))
		size = 512ULL << 20;
	return size;
}

static int open_fs(const struct afs_config *c, struct arb_fs **fsp)
{
	struct arb_fs_opts fo;
	struct arb_dev *dev, *tdev;
	const char *why = NULL;
	FILE *tf;
	int ret;

	ret = arb_dev_open_file(c->image, c->readonly, 0, &dev);
	if (ret) {
		/* a read-only file or filesystem: it can still be mounted */
		bool ro_hint = !c->readonly && (ret == -EACCES ||
						ret == -EROFS || ret == -EPERM);

		fprintf(stderr, "arborfs: cannot open %s: %s%s\n", c->image,
			ret == -EBUSY ? ARB_BUSY_HINT : strerror(-ret),
			ro_hint ? " (not writable here: mount it with -o ro)"
				: "");
		return ret;
	}
	if (c->trace) {
		tf = fopen(c->trace, "w");
		if (!tf) {
			ret = -errno;
			fprintf(stderr, "arborfs: cannot open trace file %s: %s\n",
				c->trace, strerror(-ret));
			arb_dev_destroy(dev);
			return ret;
		}
		setvbuf(tf, NULL, _IOLBF, 0);
		ret = arb_dev_trace_wrap(dev, tf, &tdev);
		if (ret) {
			fprintf(stderr, "arborfs: cannot trace: %s\n",
				strerror(-ret));
			arb_dev_destroy(dev);
			fclose(tf);
			return ret;
		}
		/* tf stays open until the process ends */
		dev = tdev;
	}
	arb_fs_opts_default(&fo);
	fo.readonly = c->readonly;
	fo.noatime = c->noatime;
	/* a writable mount asks for the writeback cache (ops.c, afs_init),
	 * in which the kernel owns mtime/ctime of written files */
	fo.write_keeps_times = !c->readonly;
	fo.commit_interval = c->commit;
	fo.idle_commit_ms = c->idle_commit;
	fo.discard = c->discard;
	fo.max_inline = c->max_inline;
	fo.clean_batch_nodes = c->clean_batch;
	fo.compress = c->compress;
	fo.compress_level = c->compress_level;
	fo.compress_force = c->compress_force;
	fo.cache_bytes = (size_t)(c->cache_size ? c->cache_size
						 : default_cache_size());
	fo.autogrow_max = c->autogrow;
	fo.history_secs = c->grace;
	fo.history_commits = c->grace_commits;
	fo.generation = c->generation;
	ret = arb_fs_open(dev, &fo, fsp, &why);
	if (ret) {
		fprintf(stderr, "arborfs: %s: %s (%s)\n", c->image,
			why ? why : "cannot open the filesystem",
			strerror(-ret));
		/* a failed arb_fs_open() leaves dev with the caller */
		arb_dev_destroy(dev);
		return ret;
	}
	return 0;
}

/*
 * One malloc arena for all threads.  Delayed file data is allocated and
 * freed a block at a time, and glibc gives each FUSE worker thread an
 * arena of its own: a buffer freed by one thread goes back to the arena
 * of the thread that allocated it, and each arena keeps its free chunks.
 * Creating 300,000 files in 1,000 directories peaked at 141 MiB RSS for a
 * 64 MiB cache, 95 MiB with one arena, at the same speed (the workers
 * serialize on the filesystem lock anyway; node buffers were still
 * malloc'd then).
 *
 * Fixed trim and mmap thresholds.  Since tree nodes have their own
 * region (lib/core/cache.c), the heap holds mostly delayed file data, which
 * a commit frees all at once: glibc then gave the top of the heap back to
 * the kernel (its trim threshold starts at 128 KiB) and the next writes
 * faulted it in again, 4 KiB at a time, and buffers of 128 KiB or more
 * went to mmap and munmap each time.  Beside a streaming writer that
 * doubled the slowest fsyncs' wait (p99 8.1-10.9 ms against 4.2-5.3 with
 * node buffers from malloc; 4.5-5.2 ms with these thresholds;
 * docs/design/cache.md, "Heap thresholds").  The heap now keeps up to
 * 16 MiB free at its top, and only allocations of 32 MiB or more are
 * mapped on their own.  MALLOC_ARENA_MAX, MALLOC_TRIM_THRESHOLD_ and
 * MALLOC_MMAP_THRESHOLD_ in the environment still override these.
 */
static void tune_malloc(void)
{
#ifdef M_ARENA_MAX
	if (!getenv("MALLOC_ARENA_MAX"))
		(void)mallopt(M_ARENA_MAX, 1);
#endif
	if (!getenv("MALLOC_TRIM_THRESHOLD_"))
		(void)mallopt(M_TRIM_THRESHOLD, 16 << 20);
	if (!getenv("MALLOC_MMAP_THRESHOLD_"))
		(void)mallopt(M_MMAP_THRESHOLD, 32 << 20);
}

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct afs_config conf = {
		.commit = 5,
		.idle_commit = 100,
		.max_inline = 2048,
		.cache_size = 0, /* default_cache_size() */
		.readahead = 1ULL << 20,
		.fsync_dirty_limit = 2ULL << 20,
		.multithread = true,
		.grace = 0,
		.grace_commits = 8,
	};
	struct fuse_cmdline_opts opts = { 0 };
	struct afs afs = {
		.entry_timeout = AFS_TIMEOUT,
		.attr_timeout = AFS_TIMEOUT,
	};
	struct afs_sigctx sc = { 0 };
	struct fuse_session *se = NULL;
	struct sigaction sa;
	pthread_t sigthr;
	bool sigthr_started = false;
	char *extra = NULL;
	char *optstr = NULL;
	int ret = 1;

	if (fuse_opt_parse(&args, &conf, afs_opt_spec, afs_opt_proc) == -1)
		goto out_free_args;
	if (fuse_parse_cmdline(&args, &opts) != 0)
		goto out_free_args;
	if (opts.show_help) {
		usage(argv[0]);
		ret = 0;
		goto out_free_opts;
	}
	if (opts.show_version) {
		printf("arborfs (arborfs) %s\n", ARBORFS_VERSION);
		printf("FUSE library version %s\n", fuse_pkgversion());
		/* it runs fusermount3 --version, which must come after */
		fflush(stdout);
		fuse_lowlevel_version();
		ret = 0;
		goto out_free_opts;
	}
	if (!conf.bad && conf.generation && !conf.readonly) {
		fprintf(stderr, "arborfs: generation=%llu mounts an older "
			"generation, which is read-only: add -o ro\n",
			(unsigned long long)conf.generation);
		conf.bad = true;
	}
	if (conf.bad)
		goto out_free_opts;
	if (!conf.image || !opts.mountpoint) {
		fprintf(stderr, "usage: %s [options] IMAGE MOUNTPOINT\n"
				"       %s --help for the options\n",
			argv[0], argv[0]);
		goto out_free_opts;
	}
	if (conf.remount) {
		ret = do_remount(opts.mountpoint, &conf);
		goto out_free_opts;
	}
	if (check_mountpoint(opts.mountpoint))
		goto out_free_opts;
	/* after an unmount the last daemon may still be committing */
	arb_dev_set_lock_wait(conf.no_wait ? 0 : AFS_LOCK_WAIT_MS);

	/* options we add: the kernel checks permissions and ACLs; mtab
	 * shows IMAGE and type fuse.arborfs */
	if (fuse_opt_add_opt(&optstr, "default_permissions"))
		goto out_nomem;
	if (!conf.have_fsname) {
		char *real = realpath(conf.image, NULL);
		size_t n = strlen(real ? real : conf.image) + 8;

		extra = malloc(n);
		if (!extra) {
			free(real);
			goto out_nomem;
		}
		snprintf(extra, n, "fsname=%s", real ? real : conf.image);
		free(real);
		if (fuse_opt_add_opt_escaped(&optstr, extra))
			goto out_nomem;
	}
	if (!conf.have_subtype && fuse_opt_add_opt(&optstr, "subtype=arborfs"))
		goto out_nomem;
	/* permissions are checked by the kernel, so other users may enter;
	 * others than root would need user_allow_other in /etc/fuse.conf */
	if (!conf.have_allow_other && geteuid() == 0 &&
	    fuse_opt_add_opt(&optstr, "allow_other"))
		goto out_nomem;
	if (fuse_opt_add_arg(&args, "-o") || fuse_opt_add_arg(&args, optstr))
		goto out_nomem;

	if (!opts.foreground && daemon_fork())
		goto out_free_opts;

	tune_malloc();

	/*
	 * Signals: see the comment at the top.  Blocked before the library
	 * starts threads of its own, which inherit the mask: only our
	 * signal thread may take them.
	 */
	sigemptyset(&sc.set);
	sigaddset(&sc.set, SIGTERM);
	sigaddset(&sc.set, SIGINT);
	sigaddset(&sc.set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sc.set, NULL);

	if (open_fs(&conf, &afs.fs))
		goto out_free_opts;
	/* before the session: FUSE_ROOT_ID's inode (subvol.c) */
	if (afs_subvol_mount_root(&afs, conf.subvol, conf.subvolid,
				  conf.have_subvolid))
		goto out_close_fs;
	afs.user_subvol_rm_allowed = conf.user_subvol_rm_allowed;
	afs.readonly = conf.readonly;
	afs.debug = opts.debug;
	afs.posix_acl = !conf.noacl;
	afs.open_requests = conf.open_requests;
	afs.readahead = conf.readahead;
	if (afs_lookup_init(&afs.lookups))
		goto out_close_fs;
	afs_stats_init(&afs);
	afs_syncmode_init(&afs);
	afs_wberr_init(&afs.wberr);
	afs_wbext_init(&afs.wbext);
	afs_atime_init(&afs);
	pthread_mutex_init(&afs.scrub_lock, NULL);
	pthread_mutex_init(&afs.check_lock, NULL);

	se = fuse_session_new(&args, &afs_ops, sizeof(afs_ops), &afs);
	if (!se)
		goto out_destroy_lookups;
	afs.se = se;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = wake_handler;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0; /* no SA_RESTART: the loop's wait must see EINTR */
	sigaction(SIGUSR1, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);

	if (fuse_session_mount(se, opts.mountpoint) != 0)
		goto out_destroy_session;
	afs.mountpoint = opts.mountpoint;
	/* cannot fail after a mount (only on a NULL io or a bad fd) */
	set_bdi_limits(&afs, opts.mountpoint, &conf);
	if (!afs.readonly && !conf.noatime)
		afs_atime_start(&afs);
	if (afs_killpriv_attach(se) != 0)
		afs_log(LOG_WARNING, "no FUSE_HANDLE_KILLPRIV_V2: each write "
			"asks for security.capability");

	sc.se = se;
	sc.mountpoint = opts.mountpoint;
	sc.main_thread = pthread_self();
	if (pthread_create(&sigthr, NULL, signal_thread, &sc) == 0)
		sigthr_started = true;

	daemon_detach(conf.log);

	if (opts.singlethread || !conf.multithread) {
		/*
		 * One thread on request (-s, -o singlethread).  Not the
		 * default: on an idle 2-vCPU VM the pool created empty files
		 * 2x and removed small ones 1.5x faster (the kernel's side of
		 * one request overlaps the daemon's side of the next); only
		 * on a heavily loaded machine did one thread win, by saving
		 * hand-offs between threads (docs/design/concurrency.md,
		 * "Request threads").
		 */
		if (!afs.readonly && afs_fsyncq_start(&afs) != 0)
			afs_log(LOG_WARNING, "no group commit thread: each "
				"fsync commits on its own");
		ret = fuse_session_loop(se);
		afs_fsyncq_stop(&afs);
	} else {
		/* the rings start once the kernel has accepted them in INIT */
		if (!conf.no_uring &&
		    afs_uring_prepare(se, AFS_MAX_WRITE, !conf.uring_normal))
			afs_log(LOG_WARNING, "io_uring: out of memory; requests "
				"go through /dev/fuse");
#if FUSE_USE_VERSION >= 312
		struct fuse_loop_config *lc = fuse_loop_cfg_create();

		if (!lc) {
			ret = -1;
		} else {
			fuse_loop_cfg_set_clone_fd(lc, 1);
			fuse_loop_cfg_set_max_threads(
				lc, conf.have_max_threads ? opts.max_threads
							  : AFS_MAX_THREADS);
			if (opts.max_idle_threads != UINT_MAX)
				fuse_loop_cfg_set_idle_threads(
					lc, opts.max_idle_threads);
			ret = fuse_session_loop_mt(se, lc);
			fuse_loop_cfg_destroy(lc);
		}
#else
		struct fuse_loop_config lc = {
			.clone_fd = 1,
			.max_idle_threads = opts.max_idle_threads == UINT_MAX
						    ? 10 : opts.max_idle_threads,
		};

		ret = fuse_session_loop_mt(se, &lc);
#endif
	}
	afs_uring_stop();
	afs_lseek_stop();
	afs_dio_stop();
	afs_shutdown_stop();
	afs_subvol_stop();
	sc.loop_done = 1;
	if (sigthr_started) {
		pthread_cancel(sigthr);
		pthread_join(sigthr, NULL);
	}
	/* a signal ends the loop with the signal number: not a failure */
	ret = ret < 0 ? 1 : 0;
	afs_scrub_stop(&afs);
	afs_check_stop(&afs);
	/* it notifies through the session */
	afs_atime_stop(&afs);
	fuse_session_unmount(se);
	/* the kernel forgets nothing at unmount: drop its pins, so that
	 * unlinked inodes are freed by the final commit */
	afs_release_all(&afs);
out_destroy_session:
	fuse_session_destroy(se);
out_destroy_lookups:
	afs_syncmode_destroy(&afs);
	afs_wberr_destroy(&afs.wberr);
	afs_atime_destroy(&afs);
	afs_wbext_destroy(&afs.wbext);
	afs_lookup_destroy(&afs.lookups);
out_close_fs: {
	int cret = arb_fs_close(afs.fs);

	if (cret) {
		afs_log(LOG_ERR, "%s: final commit failed: %s", conf.image,
			strerror(-cret));
		ret = 1;
	}
}
out_free_opts:
	free(opts.mountpoint);
out_free_args:
	fuse_opt_free_args(&args);
	free(conf.image);
	free(conf.trace);
	free(conf.log);
	free(conf.subvol);
	free(extra);
	free(optstr);
	return ret;
out_nomem:
	fprintf(stderr, "arborfs: out of memory\n");
	goto out_free_opts;
}
