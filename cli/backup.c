/* SPDX-License-Identifier: MIT */
/*
 * backup.c - arbor backup SUBVOL DEST: one command for an incremental
 * backup of a subvolume to a directory of another arborfs mount (or of
 * the same one), or of an unmounted image (--dest-image IMG).
 *
 *   arbor backup [--keep N] [--snapdir DIR] [--json] [--dry-run]
 *                [--progress|--no-progress] [--bwlimit RATE]
 *                [--dest-image IMG] SUBVOL DEST
 *
 * 1. A read-only snapshot of SUBVOL, NAME.YYYY-MM-DDTHH:MM:SSZ (UTC; NAME
 *    is SUBVOL's last component; ".1", ".2"... when the name is taken),
 *    in the snapshot directory: DIR of --snapdir, by default .snapshots
 *    beside SUBVOL (created).  Not inside SUBVOL: a snapshot there would
 *    be a nested subvolume, a stale link in every later snapshot of
 *    SUBVOL and in its backups, and would keep SUBVOL from being deleted.
 * 2. The parent: the newest of SUBVOL's backup snapshots (read-only
 *    snapshots of SUBVOL in the snapshot directory named as above) of
 *    which DEST's filesystem holds a received copy (received UUID and
 *    generation: the rule arbor receive applies, and --list-parents
 *    shows).  None: a full stream.
 * 3. The daemon of SUBVOL's mount sends (ARB_IOC_SEND) into a pipe, a
 *    pump process (progress.c) copies it into a second pipe, and the
 *    daemon of DEST's mount receives from it (ARB_IOC_RECEIVE, in a
 *    thread of ours): the code of arbor send and arbor receive
 *    (cli_send_mount, cli_receive_mount).  With --dest-image, DEST is a
 *    directory of an unmounted image (from its top-level subvolume),
 *    which stays open (and locked) through the library for the whole
 *    run: listing, receiving (cli_receive_image, what arbor receive
 *    --image does) and pruning go through it, and closing commits.  The pump counts and shows
 *    progress, and stops the stream when we are told to stop (SIGINT,
 *    SIGTERM, SIGHUP): the receive then abandons its hidden subvolume.
 * 4. On failure the new snapshot is deleted and nothing is pruned; on
 *    success, with --keep N, the newest N backup snapshots of each side
 *    stay (the source's by creation generation, DEST's, named
 *    NAME.TIMESTAMP and received, by receive generation), and so does
 *    the newest one both sides hold, whatever N.
 *
 * Exit status: 0 done, 1 failed (nothing new left visible), 2 bad usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "arbor/arbor.h"
#include "arbor/ioctl.h"
#include "arbor/send.h"
#include "arbor/subvol.h"
#include "arbor_cli.h"
#include "arbor_help.h"

#define STAMP_LEN 20 /* 2026-12-05T19:30:00Z */

static void err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void err(const char *fmt, ...)
{
	va_list ap;

	fputs("arbor backup: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* the subvolumes of one mount, as ARB_IOC_SUBVOL_LIST gives them */
struct svlist {
	struct arb_ioc_subvol_entry *e;
	size_t nr;
};

static int list_subvols(int fd, const char *path, struct svlist *l)
{
	struct arb_ioc_subvol_list *q = calloc(1, sizeof(*q));
	int rc = 0;

	l->e = NULL;
	l->nr = 0;
	if (!q)
		return -1;
	do {
		void *n;

		q->size = sizeof(*q);
		q->version = ARB_IOC_VERSION;
		q->start = q->next;
		if (cli_ioctl(fd, path, ARB_IOC_SUBVOL_LIST, q,
			      "list subvolumes")) {
			rc = -1;
			break;
		}
		n = realloc(l->e, (l->nr + q->nr + 1) * sizeof(*l->e));
		if (!n) {
			rc = -1;
			break;
		}
		l->e = n;
		memcpy(l->e + l->nr, q->e, q->nr * sizeof(*l->e));
		l->nr += q->nr;
	} while (q->next);
	free(q);
	return rc;
}

static bool is_zero16(const __u8 *u)
{
	static const __u8 zero[16];

	return !memcmp(u, zero, 16);
}

static bool live_rdonly(const struct arb_ioc_subvol_entry *e)
{
	return (e->flags & ARB_IOC_SUBVOL_RDONLY) &&
	       !(e->flags & ARB_IOC_SUBVOL_DELETED);
}

/*
 * A directory backups are received in or deleted from: of a mount (fd),
 * or of an unmounted image open through the library (fs; the source's
 * snapshot directory is always a mount's).
 */
struct dest {
	const char *path;  /* on a mount, or in the image from its top */
	const char *image; /* NULL: a mount */
	struct arb_fs *fs;
	int fd;
	uint64_t ino; /* the directory's inode */
	uint64_t id;  /* the subvolume holding it */
	char label[PATH_MAX + 8]; /* how messages name it: IMG:PATH */
};

static int collect_image(void *ctx, const struct arb_subvol_info *i)
{
	struct svlist *l = ctx;
	void *n = realloc(l->e, (l->nr + 2) * sizeof(*l->e));

	if (!n)
		return -ENOMEM;
	l->e = n;
	cli_subvol_entry(&l->e[l->nr++], i);
	return 0;
}

/* the subvolumes of DEST's filesystem; 0 or -1 after a message */
static int dest_list(const struct dest *d, struct svlist *l)
{
	int ret;

	if (!d->fs)
		return list_subvols(d->fd, d->path, l);
	l->e = NULL;
	l->nr = 0;
	ret = arb_subvol_list(d->fs, collect_image, l);
	if (ret) {
		err("%s: listing the subvolumes: %s", d->image,
		    arb_reason(ret, NULL));
		return -1;
	}
	return 0;
}

/* name is free in directory d: true, false (taken, or cannot tell) */
static bool dest_free(const struct dest *d, const char *name)
{
	struct arb_stat ast;
	struct stat st;

	if (d->fs)
		return arb_fs_lookup(d->fs, d->ino, name, &ast) == -ENOENT;
	return fstatat(d->fd, name, &st, AT_SYMLINK_NOFOLLOW) &&
	       errno == ENOENT;
}

/* NAME.YYYY-MM-DDTHH:MM:SSZ or that and .N */
static bool backup_name(const char *s, const char *name)
{
	size_t n = strlen(name);
	const char *t = s + n + 1;

	if (strncmp(s, name, n) || s[n] != '.' || strlen(t) < STAMP_LEN)
		return false;
	for (int i = 0; i < STAMP_LEN; i++) {
		char c = "dddd-dd-ddTdd:dd:ddZ"[i];

		if (c == 'd' ? t[i] < '0' || t[i] > '9' : t[i] != c)
			return false;
	}
	t += STAMP_LEN;
	if (!*t)
		return true;
	if (*t++ != '.' || !*t)
		return false;
	for (; *t; t++)
		if (*t < '0' || *t > '9')
			return false;
	return true;
}

/* the backup snapshots of one side, oldest first */
struct side {
	const struct arb_ioc_subvol_entry **v;
	size_t nr;
};

static uint64_t order_key(const struct arb_ioc_subvol_entry *e)
{
	/* received copies by the generation that received them; the
	 * source's snapshots by the one that made them */
	return is_zero16(e->received_uuid) ? e->otransid : e->rtransid;
}

static int by_age(const void *a, const void *b)
{
	const struct arb_ioc_subvol_entry *x =
		*(const struct arb_ioc_subvol_entry *const *)a;
	const struct arb_ioc_subvol_entry *y =
		*(const struct arb_ioc_subvol_entry *const *)b;
	uint64_t kx = order_key(x), ky = order_key(y);

	if (kx != ky)
		return kx < ky ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/*
 * The entries of l linked in directory dir_ino of subvolume dir_id,
 * read-only and named as backups of name; of the source: snapshots of
 * the subvolume with uuid src_uuid; of DEST (src_uuid NULL): received.
 */
static int pick(const struct svlist *l, uint64_t dir_id, uint64_t dir_ino,
		const char *name, const __u8 *src_uuid, struct side *s)
{
	s->nr = 0;
	s->v = calloc(l->nr + 1, sizeof(*s->v));
	if (!s->v)
		return -1;
	for (size_t i = 0; i < l->nr; i++) {
		const struct arb_ioc_subvol_entry *e = &l->e[i];

		if (!live_rdonly(e) || e->parent_id != dir_id ||
		    e->dir_ino != dir_ino || !backup_name(e->name, name))
			continue;
		if (src_uuid ? memcmp(e->parent_uuid, src_uuid, 16)
			     : is_zero16(e->received_uuid))
			continue;
		s->v[s->nr++] = e;
	}
	qsort(s->v, s->nr, sizeof(*s->v), by_age);
	return 0;
}

/* a received copy of source snapshot e on DEST's filesystem (any
 * directory: the receiver looks for its parent by UUID), or NULL */
static const struct arb_ioc_subvol_entry *
copy_of(const struct svlist *dl, const struct arb_ioc_subvol_entry *e)
{
	for (size_t i = 0; i < dl->nr; i++)
		if (live_rdonly(&dl->e[i]) &&
		    !memcmp(dl->e[i].received_uuid, e->uuid, 16) &&
		    dl->e[i].stransid == e->gen)
			return &dl->e[i];
	return NULL;
}

/* what one run decided and did */
struct plan {
	char snap[PATH_MAX + NAME_MAX + 2]; /* the new snapshot's path */
	char sname[NAME_MAX + 1];	    /* and its name */
	const struct arb_ioc_subvol_entry *parent; /* NULL: full */
	char parent_path[PATH_MAX + NAME_MAX + 2];
	char **deleted;		  /* paths deleted (or to be, --dry-run) */
	size_t nr_deleted;
	struct arb_ioc_send sio, rio;
	double secs;
};

static void note_deleted(struct plan *p, const char *dir, const char *name)
{
	char **n = realloc(p->deleted, (p->nr_deleted + 1) * sizeof(*n));
	size_t len = strlen(dir) + strlen(name) + 2;

	if (!n)
		return;
	p->deleted = n;
	p->deleted[p->nr_deleted] = malloc(len);
	if (p->deleted[p->nr_deleted]) {
		snprintf(p->deleted[p->nr_deleted], len, "%s/%s", dir, name);
		p->nr_deleted++;
	}
}

/* delete subvolume name in directory d; 0 or -1 after a message */
static int dest_delete(const struct dest *d, const char *name)
{
	struct arb_ioc_subvol_create c;
	char what[PATH_MAX + 16];

	if (d->fs) {
		int ret = arb_subvol_delete(d->fs, d->ino, name);

		if (ret)
			err("%s/%s: delete: %s", d->label, name,
			    arb_reason(ret, NULL));
		return ret ? -1 : 0;
	}

	memset(&c, 0, sizeof(c));
	c.size = sizeof(c);
	c.version = ARB_IOC_VERSION;
	snprintf(c.name, sizeof(c.name), "%s", name);
	snprintf(what, sizeof(what), "delete %s", name);
	return cli_ioctl(d->fd, d->path, ARB_IOC_SUBVOL_DELETE, &c, what);
}

/*
 * Keep the newest keep of side s and the one named common (may be
 * NULL); delete the rest, in directory d.  0 or -1.
 */
static int prune(struct plan *p, const struct side *s, size_t keep,
		 const struct arb_ioc_subvol_entry *common,
		 const struct dest *d, bool dry_run)
{
	int rc = 0;

	for (size_t i = 0; i + keep < s->nr; i++) {
		if (s->v[i] == common)
			continue;
		if (!dry_run && dest_delete(d, s->v[i]->name)) {
			rc = -1;
			continue;
		}
		note_deleted(p, d->label, s->v[i]->name);
	}
	return rc;
}

/* ---- the transfer ------------------------------------------------------- */

struct recv_job {
	const struct dest *dest;
	int fd;
	struct arb_ioc_send *io;
	struct arb_recv_result res; /* an image's receive */
	int rc;
};

static void *recv_thread(void *arg)
{
	struct recv_job *j = arg;
	const struct dest *d = j->dest;

	if (d->fs) {
		/* what arbor receive --image does; the answer as the
		 * daemon's would be, for the rest of the run */
		j->rc = cli_receive_image(d->fs, d->image, d->path, j->fd, 0,
					  &j->res);
		memset(j->io, 0, sizeof(*j->io));
		j->io->result = j->rc ? -1 : 0;
		if (!j->rc) {
			j->io->id = j->res.id;
			snprintf(j->io->name, sizeof(j->io->name), "%s",
				 j->res.name);
		}
	} else {
		j->rc = cli_receive_mount(d->path, j->fd, 0, j->io);
	}
	/* a stream cut short kept a partial receive for a resume: a backup
	 * that failed deletes its new snapshot, so the rest could never
	 * come; give it up */
	if (j->rc) {
		const char *tok = d->fs ? j->res.resume_token
					: j->io->resume_token;

		if (tok[0] && (d->fs ? arb_receive_discard(d->fs, tok)
				     : cli_receive_discard(d->path, tok)))
			fprintf(stderr,
				"arbor: backup: could not give up the partial receive %s on %s\n",
				tok, d->path);
	}
	/* our copy of the read end: the pump sees a broken pipe if the
	 * receiver stopped early */
	close(j->fd);
	j->fd = -1;
	return NULL;
}

static volatile sig_atomic_t interrupted;
static pid_t pump_pid;

/* signals come here, not to the threads blocked in ioctls (which could
 * act on them only once the daemon answers): stop the pump, and the
 * stream breaks at both daemons */
static void *signal_thread(void *arg)
{
	sigset_t *set = arg;
	int sig;

	for (;;) {
		if (sigwait(set, &sig))
			continue;
		if (sig == SIGUSR1)
			return NULL;
		interrupted = sig;
		if (pump_pid > 0)
			kill(pump_pid, SIGTERM);
	}
}

/* snapshot → DEST through two pipes and the pump; 0 or 1 (message out) */
static int transfer(struct plan *p, const struct dest *dest,
		    const struct cli_progress *pg, uint64_t parent_id)
{
	struct recv_job *jp = calloc(1, sizeof(*jp));
	struct timespec t0, t1;
	pthread_t th;
	int a[2], b[2], rc;

	if (!jp) {
		err("out of memory");
		return 1;
	}
	jp->dest = dest;
	jp->io = &p->rio;
	if (pipe2(a, O_CLOEXEC)) {
		err("pipe: %s", strerror(errno));
		free(jp);
		return 1;
	}
	if (pipe2(b, O_CLOEXEC)) {
		err("pipe: %s", strerror(errno));
		close(a[0]);
		close(a[1]);
		free(jp);
		return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pump_pid = cli_pump_start(a[0], b[1], pg);
	close(a[0]);
	close(b[1]);
	if (pump_pid < 0) {
		close(a[1]);
		close(b[0]);
		free(jp);
		return 1;
	}
	jp->fd = b[0];
	if (pthread_create(&th, NULL, recv_thread, jp)) {
		err("cannot start a thread");
		close(a[1]);
		close(b[0]);
		kill(pump_pid, SIGTERM);
		cli_pump_wait(pump_pid);
		free(jp);
		return 1;
	}
	rc = cli_send_mount(p->snap, parent_id, a[1], 0, NULL, &p->sio);
	/* our copy of the write end: the pump sees the end of the stream */
	close(a[1]);
	if (rc)
		kill(pump_pid, SIGTERM);
	pthread_join(th, NULL);
	if (jp->rc && !rc)
		kill(pump_pid, SIGTERM);
	if (cli_pump_wait(pump_pid) && !rc && !jp->rc) {
		err("the stream was not carried to its end");
		rc = 1;
	}
	pump_pid = 0;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	p->secs = (double)(t1.tv_sec - t0.tv_sec) +
		  (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	rc = rc || jp->rc ? 1 : 0;
	free(jp);
	return rc;
}

/* ---- output ------------------------------------------------------------- */

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static void report(const struct plan *p, const struct dest *d, bool json,
		   bool dry_run)
{
	const char *dest = d->label;

	if (json) {
		printf("{\"dry_run\": %s, \"snapshot\": ",
		       dry_run ? "true" : "false");
		json_str(p->snap);
		printf(", \"dest\": ");
		json_str(d->path);
		if (d->image) {
			printf(", \"dest_image\": ");
			json_str(d->image);
		}
		printf(", \"mode\": \"%s\", \"parent\": ",
		       p->parent ? "incremental" : "full");
		if (p->parent)
			json_str(p->parent_path);
		else
			printf("null");
		printf(", \"bytes\": %llu, \"commands\": %llu, "
		       "\"inodes\": %llu, \"data_bytes\": %llu, "
		       "\"seconds\": %.3f, \"deleted\": [",
		       (unsigned long long)p->sio.bytes,
		       (unsigned long long)p->sio.commands,
		       (unsigned long long)p->sio.inodes,
		       (unsigned long long)p->sio.data, p->secs);
		for (size_t i = 0; i < p->nr_deleted; i++) {
			if (i)
				printf(", ");
			json_str(p->deleted[i]);
		}
		printf("]}\n");
		return;
	}
	if (p->parent)
		printf("%s: snapshot %s, incremental against %s\n",
		       dry_run ? "would back up" : "backed up", p->snap,
		       p->parent_path);
	else
		printf("%s: snapshot %s, full (no snapshot in common with %s)\n",
		       dry_run ? "would back up" : "backed up", p->snap, dest);
	if (!dry_run) {
		char b[32];

		cli_human_bytes(p->sio.bytes, b, sizeof(b));
		printf("received %s/%s: %llu bytes (%s), %llu commands, "
		       "%llu inodes, %.2f s\n",
		       dest, p->sname, (unsigned long long)p->sio.bytes, b,
		       (unsigned long long)p->sio.commands,
		       (unsigned long long)p->sio.inodes, p->secs);
	}
	for (size_t i = 0; i < p->nr_deleted; i++)
		printf("%s %s\n", dry_run ? "would delete" : "deleted",
		       p->deleted[i]);
}

/* ---- the command -------------------------------------------------------- */

static int parse_rate(const char *s, uint64_t *v)
{
	char *end;
	unsigned long long n = strtoull(s, &end, 10);

	if (end == s)
		return -1;
	switch (*end) {
	case 'k': case 'K': n <<= 10; end++; break;
	case 'm': case 'M': n <<= 20; end++; break;
	case 'g': case 'G': n <<= 30; end++; break;
	}
	if (*end || !n)
		return -1;
	*v = n;
	return 0;
}

/* open a directory of an arborfs mount; -1 after a message */
static int open_dir(const char *path, struct stat *st)
{
	int fd = cli_open_mount(path);

	if (fd < 0)
		return -1;
	if (fstat(fd, st) || !S_ISDIR(st->st_mode)) {
		err("%s: not a directory", path);
		close(fd);
		return -1;
	}
	return fd;
}

static int subvol_info(int fd, const char *path,
		       struct arb_ioc_subvol_info *in)
{
	memset(in, 0, sizeof(*in));
	in->size = sizeof(*in);
	in->version = ARB_IOC_VERSION;
	return cli_ioctl(fd, path, ARB_IOC_SUBVOL_INFO, in, "subvolume info");
}

/* open DEST: a directory of a mount, or of the image (read-write with
 * rw); 0 or -1 after a message (dest_close in any case) */
static int dest_open(struct dest *d, bool rw)
{
	struct arb_ioc_subvol_info di;
	struct arb_subvol_info si;
	struct arb_stat ast;
	struct stat st;
	int ret;

	if (!d->image) {
		snprintf(d->label, sizeof(d->label), "%s", d->path);
		d->fd = open_dir(d->path, &st);
		if (d->fd < 0 || subvol_info(d->fd, d->path, &di))
			return -1;
		d->ino = st.st_ino;
		d->id = di.e.id;
		return 0;
	}
	snprintf(d->label, sizeof(d->label), "%s:%s", d->image, d->path);
	if (cli_image_open(d->image, rw, &d->fs))
		return -1;
	ret = cli_image_resolve(d->fs, d->path, &d->ino);
	if (!ret)
		ret = arb_fs_getattr(d->fs, d->ino, &ast);
	if (!ret && !S_ISDIR(ast.mode)) {
		err("%s: not a directory", d->label);
		return -1;
	}
	if (!ret)
		ret = arb_subvol_info(d->fs, d->ino, &si);
	if (ret) {
		err("%s: %s", d->label,
		    ret == -ENOENT ? "no such directory in the image"
				   : arb_reason(ret, NULL));
		return -1;
	}
	d->id = si.id;
	return 0;
}

/* close DEST (an image: committing); rc, or 1 if that failed */
static int dest_close(struct dest *d, int rc)
{
	if (d->fs) {
		rc = cli_image_close(d->image, d->fs, rc);
		d->fs = NULL;
	}
	if (d->fd >= 0)
		close(d->fd);
	d->fd = -1;
	return rc;
}

/* the name of the new snapshot: free in both directories */
static int new_name(struct plan *p, const char *name, int sdfd,
		    const struct dest *d)
{
	char stamp[STAMP_LEN + 1];
	struct stat st;
	time_t now = time(NULL);
	struct tm tm;

	gmtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
	for (int i = 0; i < 1000; i++) {
		if (i)
			snprintf(p->sname, sizeof(p->sname), "%s.%s.%d", name,
				 stamp, i);
		else
			snprintf(p->sname, sizeof(p->sname), "%s.%s", name,
				 stamp);
		if ((sdfd < 0 ||
		     (fstatat(sdfd, p->sname, &st, AT_SYMLINK_NOFOLLOW) &&
		      errno == ENOENT)) &&
		    dest_free(d, p->sname))
			return 0;
	}
	err("no free name for %s.%s", name, stamp);
	return -1;
}

int cli_backup(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "keep", 1, 0, 'k' },	     { "snapdir", 1, 0, 's' },
		{ "json", 0, 0, 'j' },	     { "dry-run", 0, 0, 'n' },
		{ "progress", 0, 0, 'P' },   { "no-progress", 0, 0, 'N' },
		{ "bwlimit", 1, 0, 'b' },    { "help", 0, 0, 'h' },
		{ "dest-image", 1, 0, 'I' }, { 0, 0, 0, 0 }
	};
	struct cli_progress pg = { .what = "backup", .stop_at_end = true };
	struct arb_ioc_subvol_info si;
	struct arb_ioc_subvol_create c;
	struct dest d = { .fd = -1 }, sd = { .fd = -1 };
	struct svlist sl = { 0 }, dl = { 0 };
	struct side ss = { 0 }, ds = { 0 };
	struct plan p;
	struct stat sst, snst;
	char src[PATH_MAX], dest[PATH_MAX], snapdir[PATH_MAX], *name, *t;
	const char *snapdir_opt = NULL, *dest_image = NULL;
	bool json = false, dry_run = false, made = false;
	unsigned long keep = 0;
	int c2, progress = -1, sfd = -1, sdfd = -1, rc = 1;
	sigset_t sigs, old;
	pthread_t sigth;

	sigemptyset(&old);
	memset(&p, 0, sizeof(p));
	optind = 1;
	while ((c2 = getopt_long(argc, argv, "k:s:njh", lo, NULL)) != -1) {
		char *end;

		switch (c2) {
		case 'k':
			keep = strtoul(optarg, &end, 10);
			if (*end || !keep || optarg[0] == '-') {
				err("--keep takes a number of snapshots, 1 or more");
				return 2;
			}
			break;
		case 's': snapdir_opt = optarg; break;
		case 'I': dest_image = optarg; break;
		case 'j': json = true; break;
		case 'n': dry_run = true; break;
		case 'P': progress = 1; break;
		case 'N': progress = 0; break;
		case 'b':
			if (parse_rate(optarg, &pg.bwlimit)) {
				err("--bwlimit takes bytes a second (K, M, G)");
				return 2;
			}
			break;
		case 'h': fputs(ARBOR_HELP_BACKUP, stdout); return 0;
		default: fputs(ARBOR_HELP_BACKUP, stderr); return 2;
		}
	}
	if (optind != argc - 2) {
		fputs(ARBOR_HELP_BACKUP, stderr);
		return 2;
	}
	if (!realpath(argv[optind], src)) {
		err("%s: %s", argv[optind], strerror(errno));
		return 1;
	}
	if (dest_image) {
		/* a path inside the image, from its top-level subvolume */
		if (strlen(argv[optind + 1]) >= sizeof(dest)) {
			err("%s: path too long", argv[optind + 1]);
			return 2;
		}
		snprintf(dest, sizeof(dest), "%s", argv[optind + 1]);
	} else if (!realpath(argv[optind + 1], dest)) {
		err("%s: %s", argv[optind + 1], strerror(errno));
		return 1;
	}
	pg.show = cli_progress_wanted(progress) && !(json && progress < 0);

	/* the source: a subvolume's root on a mount */
	sfd = cli_open_mount(src);
	if (sfd < 0)
		goto out;
	if (fstat(sfd, &sst) || subvol_info(sfd, src, &si))
		goto out;
	if (si.e.ino != sst.st_ino) {
		err("%s: not a subvolume (a directory of subvolume %llu)", src,
		    (unsigned long long)si.e.id);
		goto out;
	}
	t = strdup(src);
	name = t ? strdup(basename(t)) : NULL;
	free(t);
	if (!name) {
		err("out of memory");
		goto out;
	}
	if (strlen(name) + 1 + STAMP_LEN + 4 > NAME_MAX || !strcmp(name, "/")) {
		err("%s: no usable backup name from its last component", src);
		free(name);
		goto out;
	}

	/* where its snapshots live */
	if (snapdir_opt) {
		snprintf(snapdir, sizeof(snapdir), "%s", snapdir_opt);
	} else {
		struct stat pst;

		t = strdup(src);
		snprintf(snapdir, sizeof(snapdir), "%s/.snapshots",
			 t ? dirname(t) : ".");
		if (!t || stat(dirname(strcpy(t, src)), &pst) ||
		    pst.st_dev != sst.st_dev) {
			err("%s is the root of its mount: nothing beside it "
			    "to hold its snapshots; give --snapdir DIR (a "
			    "directory of the same mount)", src);
			free(t);
			rc = 2;
			goto out_name;
		}
		free(t);
	}
	/* DEST: a directory of an arborfs mount, or of an unmounted image
	 * (which stays open, and so locked, until the end) */
	d.path = dest;
	d.image = dest_image;
	if (dest_open(&d, !dry_run))
		goto out_name;

	if (!dry_run && mkdir(snapdir, 0700) && errno != EEXIST) {
		err("%s: %s", snapdir, strerror(errno));
		goto out_name;
	}
	if (dry_run && access(snapdir, F_OK)) {
		/* nothing there yet: no snapshot of SUBVOL either */
		sdfd = -1;
	} else {
		sdfd = open_dir(snapdir, &snst);
		if (sdfd < 0)
			goto out_name;
		if (snst.st_dev != sst.st_dev) {
			err("%s: not on the mount of %s (a snapshot stays on "
			    "its filesystem)", snapdir, src);
			goto out_name;
		}
	}
	sd.path = snapdir;
	sd.fd = sdfd;
	snprintf(sd.label, sizeof(sd.label), "%s", snapdir);

	/* both sides' backups, and the newest one they share */
	if (list_subvols(sfd, src, &sl) || dest_list(&d, &dl))
		goto out_name;
	if (sdfd >= 0) {
		struct arb_ioc_subvol_info sn;

		if (subvol_info(sdfd, snapdir, &sn) ||
		    pick(&sl, sn.e.id, snst.st_ino, name, si.e.uuid, &ss))
			goto out_name;
	}
	if (pick(&dl, d.id, d.ino, name, NULL, &ds))
		goto out_name;
	for (size_t i = ss.nr; i-- > 0;)
		if (copy_of(&dl, ss.v[i])) {
			p.parent = ss.v[i];
			snprintf(p.parent_path, sizeof(p.parent_path), "%s/%s",
				 snapdir, p.parent->name);
			break;
		}
	if (new_name(&p, name, sdfd, &d))
		goto out_name;
	snprintf(p.snap, sizeof(p.snap), "%s/%s", snapdir, p.sname);

	if (dry_run) {
		/* as if the new one were made and received: it would be
		 * the newest of each side, and the one they share */
		if (keep) {
			prune(&p, &ss, keep - 1, NULL, &sd, true);
			prune(&p, &ds, keep - 1, NULL, &d, true);
		}
		report(&p, &d, json, true);
		rc = 0;
		goto out_name;
	}

	/* 1: the snapshot */
	if (syncfs(sfd) < 0)
		fprintf(stderr, "arbor backup: %s: warning: an earlier "
			"writeback failed (%s)\n", src, strerror(errno));
	memset(&c, 0, sizeof(c));
	c.size = sizeof(c);
	c.version = ARB_IOC_VERSION;
	c.src_ino = sst.st_ino;
	c.flags = ARB_IOC_SUBVOL_RDONLY;
	snprintf(c.name, sizeof(c.name), "%s", p.sname);
	if (cli_ioctl(sdfd, p.snap, ARB_IOC_SUBVOL_SNAPSHOT, &c, "snapshot"))
		goto out_name;
	made = true;

	/* 2, 3: the stream, signals to a thread of their own meanwhile */
	if (pg.show && p.parent) {
		struct arb_ioc_send est;

		if (!cli_send_mount(p.snap, p.parent->id, -1, ARB_IOC_SEND_ESTIMATE, NULL,
				    &est))
			pg.total = est.bytes;
	}
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGHUP);
	sigaddset(&sigs, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &sigs, &old);
	signal(SIGPIPE, SIG_IGN);
	if (pthread_create(&sigth, NULL, signal_thread, &sigs)) {
		err("cannot start a thread");
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		goto out_undo;
	}
	rc = transfer(&p, &d, &pg, p.parent ? p.parent->id : 0);
	pthread_kill(sigth, SIGUSR1);
	pthread_join(sigth, NULL);
	if (interrupted) {
		err("interrupted (%s)", strsignal(interrupted));
		rc = 1;
	}
	if (rc) {
		/* a receive that completed anyway goes too: nothing of a
		 * failed backup stays */
		if (p.rio.result == 0 && p.rio.name[0])
			dest_delete(&d, p.rio.name);
		goto out_undo;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);

	/* 4: pruning, with the lists as they are now */
	if (keep) {
		struct arb_ioc_subvol_info sn;
		const struct arb_ioc_subvol_entry *sc = NULL, *dc = NULL;

		free(sl.e);
		free(dl.e);
		free(ss.v);
		free(ds.v);
		ss.v = ds.v = NULL;
		if (list_subvols(sfd, src, &sl) ||
		    dest_list(&d, &dl) ||
		    subvol_info(sdfd, snapdir, &sn) ||
		    pick(&sl, sn.e.id, snst.st_ino, name, si.e.uuid, &ss) ||
		    pick(&dl, d.id, d.ino, name, NULL, &ds)) {
			err("backup done, but not the pruning");
			goto out_report;
		}
		for (size_t i = ss.nr; i-- > 0 && !sc;)
			if ((dc = copy_of(&dl, ss.v[i])))
				sc = ss.v[i];
		if (prune(&p, &ss, keep, sc, &sd, false) |
		    prune(&p, &ds, keep, dc, &d, false))
			err("backup done, but some old snapshots could not be "
			    "deleted");
	}
out_report:
	report(&p, &d, json, false);
	rc = 0;
	goto out_name;

out_undo:
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (made && dest_delete(&sd, p.sname) == 0)
		err("backup failed; deleted the new snapshot %s", p.snap);
	else
		err("backup failed");
	rc = 1;
out_name:
	free(name);
out:
	for (size_t i = 0; i < p.nr_deleted; i++)
		free(p.deleted[i]);
	free(p.deleted);
	free(ss.v);
	free(ds.v);
	free(sl.e);
	free(dl.e);
	if (sfd >= 0)
		close(sfd);
	if (sdfd >= 0)
		close(sdfd);
	return dest_close(&d, rc);
}
