/* SPDX-License-Identifier: MIT */
/*
 * stream_int.h - the send stream (docs/SEND-STREAM.md is the byte-by-byte
 * reference; this header and it must agree), and the helpers the files of
 * lib/send/ share:
 *   stream.c    encoding, reading with validation, the printer (--dump)
 *   sendtree.c  arb_send: walks a read-only subvolume (and its parent)
 *   receive.c   arb_receive: builds a hidden subvolume, publishes it
 *   digest.c    arb_subvol_digest_portable (digest version 1), SHA-256
 *   setdigest.c arb_subvol_digest (digest version 2), kept sums
 *
 * Stream layout: a 68-byte header, then commands, each a 12-byte command
 * header and a payload.  Everything little-endian.
 *
 * Header:
 *   0   8   magic "ARBSEND\0"
 *   8   4   format version (1 to 3; ARB_SEND_VERSION is what we write)
 *   12  4   flags: ARB_SEND_F_INCREMENTAL
 *   16  16  source subvolume UUID
 *   32  8   source generation (the subvolume's last change)
 *   40  16  parent UUID (0 for a full stream)
 *   56  8   parent generation (0 for a full stream)
 *   64  4   crc32c of bytes 0..63
 *
 * Command header:
 *   0   2   command type (ARB_SCMD_*)
 *   2   2   reserved, 0
 *   4   4   payload length in bytes (at most ARB_SEND_CMD_MAX)
 *   8   4   crc32c of bytes 0..7 of this header, then of the payload
 */
#ifndef ARB_SEND_STREAM_INT_H
#define ARB_SEND_STREAM_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "arbor/send.h"

#define ARB_SEND_MAGIC "ARBSEND"
#define ARB_SEND_VERSION 3
#define ARB_SEND_HDR_SIZE 68
#define ARB_SEND_CMD_HDR 12
/* the largest payload: a WRITE of ARB_SEND_DATA_MAX, or an xattr
 * (version 1); an ENCODED_WRITE of ARB_SEND_ENC_MAX (version 2) */
#define ARB_SEND_DATA_MAX (64u << 10)
#define ARB_SEND_CMD_MAX_V1 (ARB_SEND_DATA_MAX + 512)
#define ARB_SEND_ENC_MAX (128u << 10)
#define ARB_SEND_ENC_FIXED 44
#define ARB_SEND_CMD_MAX (ARB_SEND_ENC_MAX + 512)
/* ENCODED_WRITE compression: zlib (the only one) */
#define ARB_SEND_ENC_ZLIB 1
#define ARB_SEND_F_INCREMENTAL (1u << 0)
/* version 2: the rest of a stream a receive kept partial (RESUME) */
#define ARB_SEND_F_RESUME (1u << 1)
#define ARB_SEND_F_KNOWN (ARB_SEND_F_INCREMENTAL | ARB_SEND_F_RESUME)

/* command types: numbers fixed forever */
enum arb_scmd {
	ARB_SCMD_BEGIN = 1,    /* name */
	ARB_SCMD_INODE = 2,    /* obj size rdev atime mtime mode uid gid
				* atime_ns mtime_ns [symlink target] */
	ARB_SCMD_XATTR = 3,    /* obj name_len name value */
	ARB_SCMD_RMXATTR = 4,  /* obj name */
	ARB_SCMD_WRITE = 5,    /* obj off data */
	ARB_SCMD_PREALLOC = 6, /* obj off len */
	ARB_SCMD_LINK = 7,     /* dir obj name */
	ARB_SCMD_UNLINK = 8,   /* dir obj name */
	ARB_SCMD_DELETE = 9,   /* obj */
	ARB_SCMD_TIMES = 10,   /* obj atime mtime atime_ns mtime_ns */
	ARB_SCMD_TRUNCATE = 11, /* obj size */
	ARB_SCMD_END = 12,     /* digest[32] inodes */
	/* version 2 */
	ARB_SCMD_CLONE = 13,   /* obj off len src_obj src_off */
	ARB_SCMD_ENCODED_WRITE = 14, /* obj off len ram_bytes ext_off
				      * compression u32, data */
	ARB_SCMD_PUNCH = 15,   /* obj off len */
	ARB_SCMD_RESUME = 16,  /* partial id, first objectid, offset in it */
	ARB_SCMD_MAX
};
#define ARB_SINODE_FIXED 60

struct arb_send_hdr {
	uint32_t version, flags;
	uint8_t uuid[16];
	uint64_t gen;
	uint8_t parent_uuid[16];
	uint64_t parent_gen;
};

/* one decoded command; pointers point into the reader's buffer */
struct arb_scmd_dec {
	unsigned type;
	uint64_t obj, dir, off, len, size, rdev;
	uint64_t src_obj, src_off;      /* CLONE */
	uint64_t ram_bytes, ext_off;    /* ENCODED_WRITE */
	uint32_t compression;
	uint32_t mode, uid, gid;
	struct timespec atime, mtime;
	const char *name; /* not NUL-terminated */
	size_t name_len;
	const uint8_t *data; /* WRITE data, XATTR value, symlink target */
	size_t data_len;
	const uint8_t *digest;
	uint64_t count;
};

/* ---- writing (stream.c) ---- */
struct arb_swriter {
	int fd;
	bool estimate;     /* count only */
	uint8_t *buf;      /* one command being built */
	size_t len, cap;
	uint64_t bytes, commands;
	int error;
};
int sw_init(struct arb_swriter *w, int fd, bool estimate);
void sw_free(struct arb_swriter *w);
int sw_header(struct arb_swriter *w, const struct arb_send_hdr *h);
/* start a command, append fields, finish (checksum, write) */
void sw_begin(struct arb_swriter *w, unsigned type);
void sw_u16(struct arb_swriter *w, uint16_t v);
void sw_u32(struct arb_swriter *w, uint32_t v);
void sw_u64(struct arb_swriter *w, uint64_t v);
void sw_bytes(struct arb_swriter *w, const void *p, size_t n);
int sw_end(struct arb_swriter *w);

/* ---- reading (stream.c) ---- */
struct arb_sreader {
	int fd;
	uint8_t *buf;          /* ARB_SEND_CMD_MAX */
	uint32_t version;      /* the header's, once read */
	bool cut;              /* it ended early or could not be read */
	uint64_t off;          /* byte offset of the next read */
	uint64_t index;        /* commands read so far */
	uint64_t cmd_off;      /* offset of the current command */
	char *why;             /* the error, when one is returned */
	size_t why_len;
};
int sr_init(struct arb_sreader *r, int fd, char *why, size_t why_len);
void sr_free(struct arb_sreader *r);
/* header: 0, or -EBADMSG with why set */
int sr_header(struct arb_sreader *r, struct arb_send_hdr *h);
/* next command, validated for shape (lengths, names, modes, ranges):
 * 0, or -EBADMSG / -EIO with why naming the command and offset */
int sr_next(struct arb_sreader *r, struct arb_scmd_dec *c);
/* set why to "command N (TYPE) at byte OFF: " + the message */
int sr_fail(struct arb_sreader *r, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
const char *arb_scmd_name(unsigned type);

/* ---- digest.c ---- */
struct arb_sha256 {
	uint32_t h[8];
	uint64_t len;
	uint8_t buf[64];
	size_t n;
};
void arb_sha256_init(struct arb_sha256 *s);
void arb_sha256_update(struct arb_sha256 *s, const void *p, size_t n);
void arb_sha256_final(struct arb_sha256 *s, uint8_t out[32]);
/* the xattr names of ino (listed into list, 65536 bytes) sorted by
 * their bytes: *names (free it) points into list */
struct arb_fs;
int arb_xattr_names_sorted(struct arb_fs *fs, uint64_t ino, char *list,
			   char ***names, size_t *nr);
/* tests: the portable compression even where SHA-NI is there (false:
 * decide by the CPU again) */
void arb_sha256_portable(bool portable);

/* ---- setdigest.c ---- */
struct arb_digest_stats {
	uint64_t elements; /* elements added or taken away */
	uint64_t nodes;    /* tree nodes visited by the walk of two trees */
	bool full;         /* some tree was walked whole */
	bool kept;         /* the kept sum was used as it was */
};
/* fs_digest_sum flags: do not use kept sums (compute from the tree);
 * keep the result when id is read-only */
#define FS_DIGEST_FRESH (1u << 0)
#define FS_DIGEST_KEEP (1u << 1)
/*
 * The sum of digest version 2 of subvolume id, and the generation of its
 * root node it is of (0: the tree changed during the walk): its kept sum
 * if that is current, else from base's (kept, or computed and kept when
 * base is read-only) and a walk of what differs between the two trees
 * (base 0: none, a walk of the whole tree).  Commits first.
 */
int fs_digest_sum(struct arb_fs *fs, uint64_t id, uint64_t base,
		  unsigned flags, uint8_t sum[32], uint64_t *gen,
		  struct arb_digest_stats *st);
/* the digest of a sum */
void fs_digest_final(const uint8_t sum[32], uint8_t digest[ARB_DIGEST_SIZE]);
/* keep the sum of subvolume id, of its root node at gen (its own
 * transaction; nothing for gen 0 or a read-only mount) */
int fs_digest_keep(struct arb_fs *fs, uint64_t id, uint64_t gen,
		   const uint8_t sum[32]);

#endif
