/* SPDX-License-Identifier: MIT */
/*
 * arbor/send.h - send streams of read-only subvolumes, receiving them,
 * and the digest of a subvolume's content.
 *
 * A send stream (docs/SEND-STREAM.md, byte by byte) describes a
 * subvolume by inode: every inode keeps on the receiving side the
 * objectid it has on the sending side, and names are added and removed
 * as (directory objectid, name) -> objectid, so the commands apply in
 * any order that keeps each directory's names unique, with no temporary
 * names.  A full stream builds a subvolume from nothing; an incremental
 * one (parent given) starts from a snapshot of the received parent.
 *
 * Conventions as arbor.h: 0 or a negative errno.
 */
#ifndef ARBOR_SEND_H
#define ARBOR_SEND_H

#include <stdio.h>

#include "arbor/arbor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* bytes of a digest (SHA-256) */
#define ARB_DIGEST_SIZE 32

/*
 * The digest of subvolume id's content (digest version 2, the one send
 * streams of version 3 end with; docs/SEND-STREAM.md says exactly what
 * goes in): for every inode with a link, by its objectid, its type,
 * permission bits, owner, group, mtime (to the nanosecond), device
 * number and size; each of its names (parent directory and name); its
 * xattrs; and its data by 4 KiB block: where the holes and preallocated
 * blocks are, and the crc32c of every block of data.  atime, ctime,
 * birth time, nlink, directory sizes and file attributes (chattr) are
 * left out, and so are nested subvolume links.  Receive keeps objectids,
 * so a received subvolume has its source's digest.  Computed anew from
 * the tree, without the kept sum (that is kept, for the incremental
 * sends to come, when id is read-only).
 */
int arb_subvol_digest(struct arb_fs *fs, uint64_t id,
		      uint8_t digest[ARB_DIGEST_SIZE]);
/*
 * The digest version 1 of subvolume id (the one streams of versions 1
 * and 2 end with): every inode reachable from its root, directories'
 * entries in byte order of their names; for each name its inode's type,
 * permission bits, owner, group, mtime, device number, size, xattrs
 * (sorted by name), symlink target, the data with its holes
 * (SEEK_DATA/SEEK_HOLE ranges and their bytes), and for a second name of
 * an inode only which earlier name it shares the inode with.  It is
 * independent of objectids (two trees copied file by file agree) and a
 * SHA-256 of every byte of data, so it reads all of them.
 */
int arb_subvol_digest_portable(struct arb_fs *fs, uint64_t id,
			       uint8_t digest[ARB_DIGEST_SIZE]);
/* digest as 64 lowercase hex digits and a NUL */
void arb_digest_hex(const uint8_t digest[ARB_DIGEST_SIZE], char out[65]);

struct arb_send_stats {
	uint64_t bytes;     /* stream bytes written */
	uint64_t commands;  /* commands written */
	uint64_t inodes;    /* inodes sent (changed ones when incremental) */
	uint64_t data;      /* file data bytes sent */
	/* incremental: tree nodes read to find the changed inodes (the
	 * paths that differ; nodes both trees share are skipped) */
	uint64_t nodes_read;
	/* file bytes sent as clones of data the receiver has (version 2) */
	uint64_t cloned;
	/* compressed extents sent as stored: their file bytes, and the
	 * stream bytes they took (version 2) */
	uint64_t encoded, encoded_stored;
};

/* arb_send flags: count only, write nothing (fd ignored): --estimate */
#define ARB_SEND_ESTIMATE (1u << 0)
/* incremental: compare every inode of both trees instead of skipping
 * the subtrees they share (slower; for tests and as a cross-check) */
#define ARB_SEND_FULL_COMPARE (1u << 1)
/* write stream format version 1 (for an older receiver): a changed file
 * goes whole, as bytes; no clones, no compressed extents, no punches */
#define ARB_SEND_PROTO1 (1u << 2)
/* write stream format version 2 (for a receiver that predates version 3):
 * it ends with digest version 1, which reads the whole snapshot at both
 * ends */
#define ARB_SEND_PROTO2 (1u << 3)

/*
 * Write a stream of read-only subvolume id to fd: full when parent is 0,
 * else incremental against read-only subvolume parent (which the
 * receiving side must hold, received or as the original).  -EINVAL: id
 * (or parent) is not a read-only subvolume, or is tree 5; -EPIPE and
 * other write errors of fd as they come.  The subvolume stays read-only
 * and cannot be deleted while it is being sent (-EBUSY).
 * why (may be NULL, size why_len) receives a sentence on failure.
 */
int arb_send(struct arb_fs *fs, uint64_t id, uint64_t parent, int fd,
	     unsigned flags, struct arb_send_stats *st, char *why,
	     size_t why_len);

/*
 * A receive cut short (the stream ended early or could not be read, or
 * the receiving image filled up) keeps what it built as a partial receive
 * and reports a resume token, text of at most ARB_RESUME_TOKEN_MAX bytes
 * with its NUL: "r1.ID.UUID.GEN.OBJ.OFF" (the partial subvolume's id on
 * the receiving side, the source's UUID as 32 hex digits and generation,
 * the objectid the rest starts at, 2^40 when only names remain, and the
 * offset in that file from which its data is missing).
 * arb_send_resume writes the rest of the same stream (same snapshot, same
 * parent): the inodes before OBJ and OBJ's data before OFF are not sent
 * (its attributes are again), the names, deletions and
 * times all are; the receiver applies it onto the partial tree and checks
 * the whole result against the digest as for any stream.  -EINVAL: the
 * token is malformed or names another snapshot (why says which).
 */
#define ARB_RESUME_TOKEN_MAX 96
struct arb_resume_token {
	uint64_t id;
	uint8_t uuid[16];
	uint64_t gen, obj, off;
};
int arb_resume_token_parse(const char *s, struct arb_resume_token *t);
void arb_resume_token_format(const struct arb_resume_token *t,
			     char out[ARB_RESUME_TOKEN_MAX]);
int arb_send_resume(struct arb_fs *fs, uint64_t id, uint64_t parent, int fd,
		    unsigned flags, const char *token,
		    struct arb_send_stats *st, char *why, size_t why_len);
/* give up the partial receive of token (its space comes back): 0,
 * -EINVAL (not a token), -ENOENT (no such partial receive here) */
int arb_receive_discard(struct arb_fs *fs, const char *token);

struct arb_recv_result {
	/* the new subvolume (tree id) and its name in the directory */
	uint64_t id;
	char name[ARB_NAME_MAX + 1];
	uint64_t commands, bytes;
	uint8_t digest[ARB_DIGEST_SIZE];
	/* on failure: what went wrong, naming the command index and the
	 * byte offset in the stream */
	char error[512];
	/* on failure: "" or the token to resume it (arb_send_resume) */
	char resume_token[ARB_RESUME_TOKEN_MAX];
};

/*
 * Read a stream from fd and build the subvolume it describes in
 * directory dir, named as on the sending side.  The subvolume is built
 * unlinked (a tree with an ORPHAN_ITEM, as a deleted subvolume: a crash
 * leaves it to the cleaner) and linked as a read-only snapshot, with its
 * received UUID, stransid and rtransid, only after the end command
 * arrived and the digest of what was built matched the stream's.  On
 * any failure nothing is linked; the partial tree is cleaned as a
 * deleted subvolume, or, when the stream was cut short (or the image is
 * full) after its begin, kept as a partial receive with
 * res->resume_token set (arb_send_resume).  A resumed stream (the rest
 * of one) continues its partial receive.  -EBADMSG: the stream is truncated, corrupt or
 * crafted (res->error says where and what); -ENOENT: the parent of an
 * incremental stream is not here (res->error names it); -EEXIST: dir
 * holds the name already.
 */
/* arb_receive flags: refuse a stream that is not a resumed one (-EINVAL;
 * arbor receive --resume) */
#define ARB_RECEIVE_RESUMED (1u << 0)
int arb_receive(struct arb_fs *fs, uint64_t dir, int fd, unsigned flags,
		struct arb_recv_result *res);

/*
 * Print a stream readably to out without applying it (arbor receive
 * --dump).  Validates it as arb_receive does (checksums, lengths,
 * names); -EBADMSG with why (size why_len) naming where.
 */
int arb_receive_dump(int fd, FILE *out, char *why, size_t why_len);

/*
 * Write a full stream from fd as plain files under directory dirfd, on
 * any filesystem (arbor receive --extract): the tree appears as dirfd/NAME
 * (NAME from the stream, copied to name_out, ARB_NAME_MAX + 1 bytes, may
 * be NULL) once the stream ended; until then, and after a failure, it is
 * in dirfd/.arbor-extract-NAME.  Owners are set when running as root;
 * devices that cannot be made and xattrs the filesystem refuses are left
 * out with a line on warnings (may be NULL).  -EBADMSG / -EINVAL (an
 * incremental stream) / -EEXIST / -errno, with why naming the command.
 */
int arb_receive_extract(int fd, int dirfd, FILE *warnings, char *name_out,
			char *why, size_t why_len);

#ifdef __cplusplus
}
#endif

#endif
