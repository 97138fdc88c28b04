/* SPDX-License-Identifier: MIT */
/*
 * send.c - arbor send, arbor receive, arbor subvolume digest.
 *
 *   arbor send [-p PARENT] [-f FILE] [--estimate] [--image IMG]
 *              [--progress|--no-progress] SNAPSHOT
 *   arbor receive [-f FILE] [--image IMG] [--progress|--no-progress] DIR
 *   arbor receive --dump [-f FILE]
 *   arbor subvolume digest [--image IMG] PATH
 *
 * On a mount the daemon does the work (ARB_IOC_SEND, _RECEIVE, _DIGEST:
 * it opens our descriptor of the stream through /proc, see
 * fuse/sendrecv.c); on an image (--image) the library does it here.
 * With progress (--progress, or stderr a terminal) the stream goes
 * through a pump (progress.c) that counts it and draws a line on stderr;
 * stdout carries only the stream (send) or the result (receive).
 * cli_send_mount and cli_receive_mount are also arbor backup's.
 * Exit status: 0 done, 1 failed, 2 bad usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arbor/ioctl.h"
#include "arbor/send.h"
#include "arbor/subvol.h"
#include "arbor_cli.h"
#include "arbor_help.h"

static void err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void err(const char *fmt, ...)
{
	va_list ap;

	fputs("arbor: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static int open_image(const char *image, bool rw, struct arb_fs **fs)
{
	struct arb_fs_opts o;
	const char *why = NULL;
	int ret;

	arb_fs_opts_default(&o);
	o.readonly = !rw;
	o.commit_interval = 0;
	ret = arb_fs_open_image(image, &o, fs, &why);
	if (ret)
		err("%s: cannot open: %s", image, arb_reason(ret, why));
	return ret ? 1 : 0;
}

static int close_image(const char *image, struct arb_fs *fs, int rc)
{
	int ret = arb_fs_close(fs);

	if (ret) {
		err("%s: %s", image, arb_reason(ret, NULL));
		return 1;
	}
	return rc;
}

/* the inode of path inside an image, from its top-level directory */
static int image_resolve(struct arb_fs *fs, const char *path, uint64_t *ino)
{
	return arb_fs_lookup_path(fs, ARB_ROOT_INO, path, ino);
}

/* the subvolume id holding path in an image (message on failure) */
static int image_subvol(struct arb_fs *fs, const char *image,
			const char *path, uint64_t *id)
{
	struct arb_subvol_info si;
	uint64_t ino;
	int ret = image_resolve(fs, path, &ino);

	if (!ret)
		ret = arb_subvol_info(fs, ino, &si);
	if (ret) {
		err("%s: %s: %s", image, path, arb_reason(ret, NULL));
		return -1;
	}
	*id = si.id;
	return 0;
}

static void print_digest(const uint8_t *d, const char *path)
{
	char hex[65];

	arb_digest_hex(d, hex);
	printf("%s  %s\n", hex, path);
}

/* a request to the daemon: 0 done, 1 refused or failed (message out) */
static int mount_request(const char *path, unsigned long cmd,
			 struct arb_ioc_send *io, const char *what)
{
	int fd = cli_open_mount(path);

	if (fd < 0)
		return 1;
	io->size = sizeof(*io);
	io->version = ARB_IOC_VERSION;
	if (ioctl(fd, cmd, io)) {
		int e = errno;

		close(fd);
		if (e == ENOTTY)
			err("%s: %s: not on a mounted arborfs, or its daemon is too old for send streams",
			    path, what);
		else if (e == EPERM)
			err("%s: %s: permission denied (needs root or CAP_SYS_ADMIN)",
			    path, what);
		else
			err("%s: %s: %s", path, what, strerror(e));
		return 1;
	}
	close(fd);
	if (io->result) {
		err("%s: %s: %s", path, what,
		    io->error[0] ? io->error : strerror(-io->result));
		return 1;
	}
	return 0;
}

int cli_mount_subvol_id(const char *path, uint64_t *id)
{
	struct arb_ioc_subvol_info in;
	int fd = cli_open_mount(path), ret;

	if (fd < 0)
		return -1;
	memset(&in, 0, sizeof(in));
	in.size = sizeof(in);
	in.version = ARB_IOC_VERSION;
	ret = cli_ioctl(fd, path, ARB_IOC_SUBVOL_INFO, &in, "subvolume info");
	close(fd);
	if (ret)
		return -1;
	*id = in.e.id;
	return 0;
}

int cli_send_mount(const char *snap, uint64_t parent, int fd, unsigned flags,
		   const char *token, struct arb_ioc_send *io)
{
	memset(io, 0, sizeof(*io));
	io->fd = fd;
	io->parent = parent;
	io->flags = flags;
	if (token)
		snprintf(io->name, sizeof(io->name), "%s", token);
	return mount_request(snap, ARB_IOC_SEND, io, "send");
}

/* a receive cut short kept what arrived: say how to finish it */
static void resume_hint(const char *token, const char *dir)
{
	if (!token[0])
		return;
	fprintf(stderr,
		"arbor: what arrived is kept; send the rest with the same snapshot (and -p PARENT) as before:\n"
		"arbor:   arbor send --resume %s [-p PARENT] SNAPSHOT | arbor receive --resume %s\n",
		token, dir);
}

int cli_receive_mount(const char *dir, int fd, unsigned flags,
		      struct arb_ioc_send *io)
{
	int rc;

	memset(io, 0, sizeof(*io));
	io->fd = fd;
	io->flags = flags;
	rc = mount_request(dir, ARB_IOC_RECEIVE, io, "receive");
	return rc;
}

int cli_receive_discard(const char *dir, const char *token)
{
	struct arb_ioc_send io;

	memset(&io, 0, sizeof(io));
	io.fd = -1;
	io.flags = ARB_IOC_RECV_DISCARD;
	snprintf(io.name, sizeof(io.name), "%s", token);
	return mount_request(dir, ARB_IOC_RECEIVE, &io, "receive --discard");
}

int cli_receive_image(struct arb_fs *fs, const char *image, const char *dir,
		      int fd, unsigned flags, struct arb_recv_result *res)
{
	uint64_t ino;
	int ret;

	memset(res, 0, sizeof(*res));
	ret = image_resolve(fs, dir, &ino);
	if (ret) {
		err("%s: %s: %s", image, dir, arb_reason(ret, NULL));
		return 1;
	}
	ret = arb_receive(fs, ino, fd,
			  flags & ARB_IOC_SEND_RESUME ? ARB_RECEIVE_RESUMED : 0,
			  res);
	if (ret) {
		err("%s: receive into %s: %s", image, dir,
		    res->error[0] ? res->error : strerror(-ret));
		return 1;
	}
	return 0;
}

/*
 * Put a pump (progress.c) between the stream's descriptor *fd and the
 * engine: for a send (to_fd) the engine writes into a pipe the pump
 * reads, for a receive it reads a pipe the pump fills.  *fd becomes the
 * engine's end; pump_end finishes.  The pid, or -1 after a message.
 */
static pid_t pump_begin(int *fd, bool to_fd, const struct cli_progress *pg,
			int *mine)
{
	int p[2];
	pid_t pid;

	if (pipe2(p, O_CLOEXEC)) {
		err("pipe: %s", strerror(errno));
		return -1;
	}
	/* our writes into a pipe whose pump died are an error, not a death */
	signal(SIGPIPE, SIG_IGN);
	pid = to_fd ? cli_pump_start(p[0], *fd, pg)
		    : cli_pump_start(*fd, p[1], pg);
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	close(to_fd ? p[0] : p[1]);
	*mine = *fd = to_fd ? p[1] : p[0];
	return pid;
}

/* close the engine's end and wait for the pump; rc updated (1 if the
 * pump could not carry the whole stream) */
static int pump_end(pid_t pid, int mine, int rc, const char *what)
{
	close(mine);
	if (rc)
		kill(pid, SIGTERM);
	if (cli_pump_wait(pid) && !rc) {
		err("%s: the stream was not carried to its end", what);
		rc = 1;
	}
	return rc;
}

int cli_send(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "parent", 1, 0, 'p' }, { "file", 1, 0, 'f' },
		{ "image", 1, 0, 'i' },	 { "estimate", 0, 0, 'e' },
		{ "help", 0, 0, 'h' },	 { "progress", 0, 0, 'P' },
		{ "no-progress", 0, 0, 'N' }, { "proto", 1, 0, 'V' },
		{ "resume", 1, 0, 'R' }, { 0, 0, 0, 0 }
	};
	const char *parent = NULL, *file = NULL, *image = NULL, *snap;
	const char *token = NULL;
	struct arb_send_stats st = { 0 };
	struct cli_progress pg = { .what = "send" };
	bool estimate = false;
	int proto = 3;
	uint64_t id, pid = 0;
	int c, fd = STDOUT_FILENO, ofd, rc = 0, progress = -1, mine = -1;
	pid_t pump = -1;

	optind = 1;
	while ((c = getopt_long(argc, argv, "p:f:i:eh", lo, NULL)) != -1) {
		switch (c) {
		case 'p': parent = optarg; break;
		case 'f': file = optarg; break;
		case 'i': image = optarg; break;
		case 'e': estimate = true; break;
		case 'P': progress = 1; break;
		case 'N': progress = 0; break;
		case 'V':
			if (strcmp(optarg, "1") && strcmp(optarg, "2") &&
			    strcmp(optarg, "3")) {
				err("send: --proto %s: stream format versions are 1, 2 and 3",
				    optarg);
				return 2;
			}
			proto = optarg[0] - '0';
			break;
		case 'R': {
			struct arb_resume_token t;

			if (arb_resume_token_parse(optarg, &t) ||
			    strlen(optarg) >= ARB_RESUME_TOKEN_MAX) {
				err("send: --resume %s: not a resume token (r1.ID.UUID.GEN.OBJ, as receive printed it)",
				    optarg);
				return 2;
			}
			token = optarg;
			break;
		}
		case 'h': fputs(ARBOR_HELP_SEND, stdout); return 0;
		default: fputs(ARBOR_HELP_SEND, stderr); return 2;
		}
	}
	if (optind != argc - 1) {
		fputs(ARBOR_HELP_SEND, stderr);
		return 2;
	}
	snap = argv[optind];
	if (!estimate && !file && isatty(STDOUT_FILENO)) {
		err("send: not writing a stream to a terminal: use -f FILE or a pipe");
		return 2;
	}
	if (!estimate && file) {
		fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0) {
			err("%s: %s", file, strerror(errno));
			return 1;
		}
	}
	ofd = fd;
	pg.show = !estimate && cli_progress_wanted(progress);
	if (image) {
		struct arb_fs *fs;
		char why[512];
		int ret;

		if (open_image(image, false, &fs)) {
			rc = 1;
			goto out;
		}
		if (image_subvol(fs, image, snap, &id) ||
		    (parent && image_subvol(fs, image, parent, &pid))) {
			rc = close_image(image, fs, 1);
			goto out;
		}
		/* an incremental stream is sized first for the ETA: that
		 * reads only what changed (a full one would read it all) */
		if (pg.show && pid &&
		    !arb_send(fs, id, pid, -1, ARB_SEND_ESTIMATE, &st, why,
			      sizeof(why)))
			pg.total = st.bytes;
		if (pg.show) {
			pump = pump_begin(&fd, true, &pg, &mine);
			if (pump < 0) {
				rc = close_image(image, fs, 1);
				goto out;
			}
		}
		ret = arb_send_resume(fs, id, pid, fd,
				      (estimate ? ARB_SEND_ESTIMATE : 0) |
					      (proto == 1 ? ARB_SEND_PROTO1 : 0) |
					      (proto == 2 ? ARB_SEND_PROTO2 : 0),
				      token, &st, why, sizeof(why));
		if (ret) {
			err("send %s: %s", snap, why[0] ? why : strerror(-ret));
			rc = 1;
		}
		rc = close_image(image, fs, rc);
	} else {
		struct arb_ioc_send io;

		if (parent && cli_mount_subvol_id(parent, &pid)) {
			rc = 1;
			goto out;
		}
		unsigned pflag = (proto == 1 ? ARB_IOC_SEND_PROTO1 : 0) |
				 (proto == 2 ? ARB_IOC_SEND_PROTO2 : 0) |
				 (token ? ARB_IOC_SEND_RESUME : 0);

		if (pg.show && pid &&
		    !cli_send_mount(snap, pid, -1,
				    ARB_IOC_SEND_ESTIMATE | pflag, token, &io))
			pg.total = io.bytes;
		if (pg.show) {
			pump = pump_begin(&fd, true, &pg, &mine);
			if (pump < 0) {
				rc = 1;
				goto out;
			}
		}
		rc = cli_send_mount(snap, pid, fd,
				    (estimate ? ARB_IOC_SEND_ESTIMATE : 0) |
					    pflag,
				    token, &io);
		st.bytes = io.bytes;
		st.inodes = io.inodes;
		st.data = io.data;
		st.commands = io.commands;
		st.cloned = io.cloned;
		st.encoded = io.encoded;
		st.encoded_stored = io.encoded_stored;
	}
	if (pump > 0) {
		rc = pump_end(pump, mine, rc, "send");
		fd = ofd;
	}
	if (!rc && estimate)
		printf("%llu bytes, %llu inodes, %llu bytes of data, %llu cloned, %llu compressed in %llu\n",
		       (unsigned long long)st.bytes,
		       (unsigned long long)st.inodes,
		       (unsigned long long)st.data,
		       (unsigned long long)st.cloned,
		       (unsigned long long)st.encoded,
		       (unsigned long long)st.encoded_stored);
	else if (!rc && !pg.show && isatty(STDERR_FILENO))
		fprintf(stderr, "arbor: sent %s: %llu bytes, %llu inodes, %llu bytes cloned\n",
			snap, (unsigned long long)st.bytes,
			(unsigned long long)st.inodes,
			(unsigned long long)st.cloned);
out:
	if (file && !estimate && fd >= 0 && close(fd) && !rc) {
		err("%s: %s", file, strerror(errno));
		rc = 1;
	}
	return rc;
}

static void uuid_text(const uint8_t *u, char out[37])
{
	for (int i = 0, n = 0; i < 16; i++)
		n += sprintf(out + n, "%02x%s", u[i],
			     i == 3 || i == 5 || i == 7 || i == 9 ? "-" : "");
}

/* one line of --list-parents: a read-only, live subvolume */
static void parent_line(uint64_t id, uint32_t flags, bool deleted,
			const uint8_t *uuid, uint64_t gen,
			const uint8_t *ruuid, uint64_t stransid,
			const char *name)
{
	static const uint8_t zero[16];
	char u[37], r[37];

	if (!(flags & ARB_SUBVOL_RDONLY) || deleted)
		return;
	uuid_text(uuid, u);
	if (memcmp(ruuid, zero, 16)) {
		uuid_text(ruuid, r);
		printf("%-6llu %s %llu (received: %s %llu)\n",
		       (unsigned long long)id, name, (unsigned long long)gen, r,
		       (unsigned long long)stransid);
	} else {
		printf("%-6llu %s %llu (own: %s %llu)\n",
		       (unsigned long long)id, name, (unsigned long long)gen, u,
		       (unsigned long long)gen);
	}
}

static int list_image_fn(void *ctx, const struct arb_subvol_info *si)
{
	(void)ctx;
	parent_line(si->id, si->flags & ARB_SUBVOL_RDONLY,
		    si->flags & ARB_SUBVOL_DELETED, si->uuid, si->gen,
		    si->received_uuid, si->stransid, si->name);
	return 0;
}

/* the subvolumes an incremental stream can name as its parent here */
static int list_parents(const char *image, const char *dir)
{
	puts("ID     NAME GENERATION (PARENT UUID AND GENERATION A STREAM MAY NAME)");
	if (image) {
		struct arb_fs *fs;
		int ret, rc = 0;

		if (open_image(image, false, &fs))
			return 1;
		ret = arb_subvol_list(fs, list_image_fn, NULL);
		if (ret < 0) {
			err("%s: listing the subvolumes: %s", image,
			    arb_reason(ret, NULL));
			rc = 1;
		}
		return close_image(image, fs, rc);
	}
	{
		struct arb_ioc_subvol_list *l = calloc(1, sizeof(*l));
		int fd = cli_open_mount(dir), rc = 0;

		if (!l || fd < 0) {
			free(l);
			if (fd >= 0)
				close(fd);
			return 1;
		}
		do {
			l->size = sizeof(*l);
			l->version = ARB_IOC_VERSION;
			l->start = l->next;
			if (cli_ioctl(fd, dir, ARB_IOC_SUBVOL_LIST, l,
				      "list subvolumes")) {
				rc = 1;
				break;
			}
			for (uint32_t i = 0; i < l->nr; i++) {
				const struct arb_ioc_subvol_entry *e = &l->e[i];

				parent_line(e->id,
					    e->flags & ARB_IOC_SUBVOL_RDONLY
						    ? ARB_SUBVOL_RDONLY
						    : 0,
					    e->flags & ARB_IOC_SUBVOL_DELETED,
					    e->uuid, e->gen, e->received_uuid,
					    e->stransid, e->name);
			}
		} while (l->next);
		free(l);
		close(fd);
		return rc;
	}
}

/* arbor receive --discard TOKEN DIR: give up a partial receive */
static int discard_partial(const char *image, const char *dir,
			   const char *token)
{
	struct arb_resume_token t;
	int ret, rc;

	if (arb_resume_token_parse(token, &t) ||
	    strlen(token) >= ARB_RESUME_TOKEN_MAX) {
		err("receive --discard %s: not a resume token", token);
		return 2;
	}
	if (image) {
		struct arb_fs *fs;

		if (open_image(image, true, &fs))
			return 1;
		ret = arb_receive_discard(fs, token);
		rc = ret ? 1 : 0;
		if (ret)
			err("%s: receive --discard: %s", image,
			    ret == -ENOENT ? "no partial receive for that token here"
					   : strerror(-ret));
		return close_image(image, fs, rc);
	} else {
		rc = cli_receive_discard(dir, token);
	}
	if (!rc)
		printf("Gave up the partial receive %s\n", token);
	return rc;
}

int cli_receive(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "file", 1, 0, 'f' }, { "image", 1, 0, 'i' },
		{ "dump", 0, 0, 'd' }, { "help", 0, 0, 'h' },
		{ "list-parents", 0, 0, 'l' }, { "extract", 0, 0, 'x' },
		{ "progress", 0, 0, 'P' }, { "no-progress", 0, 0, 'N' },
		{ "resume", 0, 0, 'R' }, { "discard", 1, 0, 'D' },
		{ 0, 0, 0, 0 }
	};
	const char *file = NULL, *image = NULL, *dir = NULL, *discard = NULL;
	struct arb_recv_result *res;
	struct cli_progress pg = { .what = "receive" };
	bool dump = false, parents = false, extract = false;
	unsigned rflags = 0;
	int c, fd = STDIN_FILENO, ofd, rc = 0, ret, progress = -1, mine = -1;
	pid_t pump = -1;
	struct stat sst;

	optind = 1;
	while ((c = getopt_long(argc, argv, "f:i:h", lo, NULL)) != -1) {
		switch (c) {
		case 'f': file = optarg; break;
		case 'i': image = optarg; break;
		case 'd': dump = true; break;
		case 'l': parents = true; break;
		case 'x': extract = true; break;
		case 'P': progress = 1; break;
		case 'N': progress = 0; break;
		case 'R': rflags = ARB_IOC_SEND_RESUME; break;
		case 'D': discard = optarg; break;
		case 'h': fputs(ARBOR_HELP_RECEIVE, stdout); return 0;
		default: fputs(ARBOR_HELP_RECEIVE, stderr); return 2;
		}
	}
	if (parents) {
		if (optind != argc - 1 || dump || file) {
			fputs(ARBOR_HELP_RECEIVE, stderr);
			return 2;
		}
		return list_parents(image, argv[optind]);
	}
	if (dump ? optind != argc : optind != argc - 1) {
		fputs(ARBOR_HELP_RECEIVE, stderr);
		return 2;
	}
	if (discard)
		return discard_partial(image, argv[optind], discard);
	if (!dump)
		dir = argv[optind];
	if (file) {
		fd = open(file, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			err("%s: %s", file, strerror(errno));
			return 1;
		}
	} else if (isatty(STDIN_FILENO)) {
		err("receive: not reading a stream from a terminal: use -f FILE or a pipe");
		return 2;
	}
	ofd = fd;
	/* progress: not for --dump, which writes to stdout anyway; a file's
	 * size is the stream's, for the ETA */
	pg.show = !dump && cli_progress_wanted(progress);
	if (pg.show) {
		if (!fstat(fd, &sst) && S_ISREG(sst.st_mode))
			pg.total = (uint64_t)sst.st_size;
		pump = pump_begin(&fd, false, &pg, &mine);
		if (pump < 0) {
			rc = 1;
			goto out;
		}
	}
	if (dump) {
		char why[512];

		ret = arb_receive_dump(fd, stdout, why, sizeof(why));
		if (ret) {
			fflush(stdout);
			err("receive --dump: %s: %s", file ? file : "stdin",
			    why[0] ? why : strerror(-ret));
			rc = 1;
		}
		goto out;
	}
	if (extract) {
		char why[600], name[ARB_NAME_MAX + 1];
		int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		if (image) {
			err("receive --extract writes plain files: no --image");
			rc = 2;
			goto out;
		}
		if (dfd < 0) {
			err("%s: %s", dir, strerror(errno));
			rc = 1;
			goto out;
		}
		ret = arb_receive_extract(fd, dfd, stderr, name, why,
					  sizeof(why));
		close(dfd);
		if (ret) {
			err("receive --extract into %s: %s", dir,
			    why[0] ? why : strerror(-ret));
			rc = 1;
		} else {
			printf("Extracted '%s' in %s\n", name, dir);
		}
		goto out;
	}
	if (image) {
		struct arb_fs *fs;

		res = calloc(1, sizeof(*res));
		if (!res || open_image(image, true, &fs)) {
			free(res);
			rc = 1;
			goto out;
		}
		rc = cli_receive_image(fs, image, dir, fd, rflags, res);
		if (rc)
			resume_hint(res->resume_token, dir);
		if (!rc)
			printf("Received subvolume '%s' in %s (id %llu)\n",
			       res->name, dir, (unsigned long long)res->id);
		free(res);
		rc = close_image(image, fs, rc);
	} else {
		struct arb_ioc_send io;

		rc = cli_receive_mount(dir, fd, rflags, &io);
		if (rc)
			resume_hint(io.resume_token, dir);
		if (!rc)
			printf("Received subvolume '%s' in %s (id %llu)\n",
			       io.name, dir, (unsigned long long)io.id);
	}
out:
	if (pump > 0)
		rc = pump_end(pump, mine, rc, "receive");
	if (file)
		close(ofd);
	return rc;
}

/* "arbor subvolume digest [--portable] [--image IMG] PATH" (argv[0] is
 * "digest") */
int cli_digest(int argc, char **argv)
{
	static const struct option lo[] = { { "image", 1, 0, 'i' },
					    { "portable", 0, 0, 'P' },
					    { "help", 0, 0, 'h' },
					    { 0, 0, 0, 0 } };
	const char *image = NULL, *path;
	uint8_t d[ARB_DIGEST_SIZE];
	bool portable = false;
	int c, rc = 0;

	optind = 1;
	while ((c = getopt_long(argc, argv, "i:h", lo, NULL)) != -1) {
		switch (c) {
		case 'i': image = optarg; break;
		case 'P': portable = true; break;
		case 'h': fputs(ARBOR_HELP_SUBVOLUME, stdout); return 0;
		default: fputs(ARBOR_HELP_SUBVOLUME, stderr); return 2;
		}
	}
	if (optind != argc - 1) {
		err("subvolume digest: takes one PATH");
		return 2;
	}
	path = argv[optind];
	if (image) {
		struct arb_fs *fs;
		uint64_t id;
		int ret;

		if (open_image(image, false, &fs))
			return 1;
		if (image_subvol(fs, image, path, &id))
			return close_image(image, fs, 1);
		ret = portable ? arb_subvol_digest_portable(fs, id, d)
			       : arb_subvol_digest(fs, id, d);
		if (ret) {
			err("%s: %s: digest: %s", image, path,
			    arb_reason(ret, NULL));
			rc = 1;
		} else {
			print_digest(d, path);
		}
		return close_image(image, fs, rc);
	}
	{
		struct arb_ioc_send io;

		memset(&io, 0, sizeof(io));
		io.fd = -1;
		io.flags = portable ? ARB_IOC_DIGEST_PORTABLE : 0;
		rc = mount_request(path, ARB_IOC_DIGEST, &io, "digest");
		if (!rc)
			print_digest(io.digest, path);
	}
	return rc;
}
