/* SPDX-License-Identifier: MIT */
/*
 * stream.c - the send stream's bytes: writing commands, reading and
 * validating them, and printing them (arb_receive_dump).
 *
 * The reader trusts nothing: every command's length is bounded before
 * anything is read into the buffer, its checksum checked before its
 * fields are decoded, and every field checked for shape (names, modes,
 * objectids, offsets) before a caller sees it.  Whether a command makes
 * sense against the tree being built (the inode exists, the name is
 * free) is receive.c's business.  Every error names the command index
 * and the byte offset where its header starts.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arbor/send.h"
#include "format.h"
#include "stream_int.h"

static const char *const scmd_names[ARB_SCMD_MAX] = {
	[ARB_SCMD_BEGIN] = "begin",	    [ARB_SCMD_INODE] = "inode",
	[ARB_SCMD_XATTR] = "xattr",	    [ARB_SCMD_RMXATTR] = "rmxattr",
	[ARB_SCMD_WRITE] = "write",	    [ARB_SCMD_PREALLOC] = "prealloc",
	[ARB_SCMD_LINK] = "link",	    [ARB_SCMD_UNLINK] = "unlink",
	[ARB_SCMD_DELETE] = "delete",	    [ARB_SCMD_TIMES] = "times",
	[ARB_SCMD_TRUNCATE] = "truncate", [ARB_SCMD_END] = "end",
	[ARB_SCMD_CLONE] = "clone",	    [ARB_SCMD_ENCODED_WRITE] = "encoded",
	[ARB_SCMD_PUNCH] = "punch",	    [ARB_SCMD_RESUME] = "resume",
};

const char *arb_scmd_name(unsigned type)
{
	if (type > 0 && type < ARB_SCMD_MAX && scmd_names[type])
		return scmd_names[type];
	return "unknown";
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}
static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* ---- writing ------------------------------------------------------------ */

static int write_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n) {
		ssize_t w = write(fd, b, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		if (w == 0)
			return -EIO;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

int sw_init(struct arb_swriter *w, int fd, bool estimate)
{
	memset(w, 0, sizeof(*w));
	w->fd = fd;
	w->estimate = estimate;
	w->cap = ARB_SEND_CMD_HDR + ARB_SEND_CMD_MAX;
	w->buf = malloc(w->cap);
	return w->buf ? 0 : -ENOMEM;
}

void sw_free(struct arb_swriter *w)
{
	free(w->buf);
	w->buf = NULL;
}

int sw_header(struct arb_swriter *w, const struct arb_send_hdr *h)
{
	uint8_t b[ARB_SEND_HDR_SIZE];

	memset(b, 0, sizeof(b));
	memcpy(b, ARB_SEND_MAGIC, 8);
	put32(b + 8, h->version);
	put32(b + 12, h->flags);
	memcpy(b + 16, h->uuid, 16);
	put64(b + 32, h->gen);
	memcpy(b + 40, h->parent_uuid, 16);
	put64(b + 56, h->parent_gen);
	put32(b + 64, arb_crc32c(0, b, 64));
	w->bytes += sizeof(b);
	if (w->estimate)
		return 0;
	return w->error = write_all(w->fd, b, sizeof(b));
}

void sw_begin(struct arb_swriter *w, unsigned type)
{
	memset(w->buf, 0, ARB_SEND_CMD_HDR);
	put16(w->buf, (uint16_t)type);
	w->len = ARB_SEND_CMD_HDR;
}

void sw_bytes(struct arb_swriter *w, const void *p, size_t n)
{
	/* our own commands never exceed the bound: a bug, not input */
	if (w->len + n > w->cap) {
		w->error = -EOVERFLOW;
		return;
	}
	memcpy(w->buf + w->len, p, n);
	w->len += n;
}
void sw_u16(struct arb_swriter *w, uint16_t v)
{
	uint8_t b[2];

	put16(b, v);
	sw_bytes(w, b, 2);
}
void sw_u32(struct arb_swriter *w, uint32_t v)
{
	uint8_t b[4];

	put32(b, v);
	sw_bytes(w, b, 4);
}
void sw_u64(struct arb_swriter *w, uint64_t v)
{
	uint8_t b[8];

	put64(b, v);
	sw_bytes(w, b, 8);
}

int sw_end(struct arb_swriter *w)
{
	uint32_t crc;

	if (w->error)
		return w->error;
	put32(w->buf + 4, (uint32_t)(w->len - ARB_SEND_CMD_HDR));
	crc = arb_crc32c(0, w->buf, 8);
	crc = arb_crc32c(crc, w->buf + ARB_SEND_CMD_HDR,
			 w->len - ARB_SEND_CMD_HDR);
	put32(w->buf + 8, crc);
	w->bytes += w->len;
	w->commands++;
	if (w->estimate)
		return 0;
	return w->error = write_all(w->fd, w->buf, w->len);
}

/* ---- reading ------------------------------------------------------------ */

int sr_init(struct arb_sreader *r, int fd, char *why, size_t why_len)
{
	memset(r, 0, sizeof(*r));
	r->fd = fd;
	r->why = why;
	r->why_len = why_len;
	if (why && why_len)
		why[0] = 0;
	r->buf = malloc(ARB_SEND_CMD_MAX);
	return r->buf ? 0 : -ENOMEM;
}

void sr_free(struct arb_sreader *r)
{
	free(r->buf);
	r->buf = NULL;
}

static void set_why(struct arb_sreader *r, const char *prefix,
		    const char *fmt, va_list ap)
{
	size_t n;

	if (!r->why || !r->why_len)
		return;
	snprintf(r->why, r->why_len, "%s", prefix);
	n = strlen(r->why);
	vsnprintf(r->why + n, r->why_len - n, fmt, ap);
}

int sr_fail(struct arb_sreader *r, int err, const char *fmt, ...)
{
	char prefix[96];
	va_list ap;

	snprintf(prefix, sizeof(prefix), "command %llu at byte %llu: ",
		 (unsigned long long)r->index, (unsigned long long)r->cmd_off);
	va_start(ap, fmt);
	set_why(r, prefix, fmt, ap);
	va_end(ap);
	return err;
}

/* n bytes: 0, 1 at a clean end of file before any byte, or -errno */
static int read_full(struct arb_sreader *r, void *p, size_t n, size_t *got)
{
	uint8_t *b = p;

	*got = 0;
	while (*got < n) {
		ssize_t k = read(r->fd, b + *got, n - *got);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			break;
		*got += (size_t)k;
	}
	r->off += *got;
	return *got == n ? 0 : 1;
}

int sr_header(struct arb_sreader *r, struct arb_send_hdr *h)
{
	uint8_t b[ARB_SEND_HDR_SIZE];
	size_t got;
	int ret;

	ret = read_full(r, b, sizeof(b), &got);
	if (ret < 0)
		return sr_fail(r, ret, "reading the stream header: %s",
			       strerror(-ret));
	if (ret) {
		if (got == 0)
			return sr_fail(r, -EBADMSG, "the stream is empty");
		return sr_fail(r, -EBADMSG,
			       "the stream ends inside its header (%zu of %d bytes)",
			       got, ARB_SEND_HDR_SIZE);
	}
	if (memcmp(b, ARB_SEND_MAGIC, 8))
		return sr_fail(r, -EBADMSG, "not an arborfs send stream (bad magic)");
	h->version = get32(b + 8);
	if (h->version < 1 || h->version > ARB_SEND_VERSION)
		return sr_fail(r, -EBADMSG,
			       "stream format version %u, this arborfs reads versions 1 to %u",
			       h->version, ARB_SEND_VERSION);
	if (get32(b + 64) != arb_crc32c(0, b, 64))
		return sr_fail(r, -EBADMSG, "stream header checksum mismatch");
	h->flags = get32(b + 12);
	if (h->flags & ~ARB_SEND_F_KNOWN)
		return sr_fail(r, -EBADMSG, "unknown header flags 0x%x",
			       h->flags & ~ARB_SEND_F_KNOWN);
	if ((h->flags & ARB_SEND_F_RESUME) && h->version < 2)
		return sr_fail(r, -EBADMSG, "a resumed stream of version %u",
			       h->version);
	memcpy(h->uuid, b + 16, 16);
	h->gen = get64(b + 32);
	memcpy(h->parent_uuid, b + 40, 16);
	h->parent_gen = get64(b + 56);
	r->version = h->version;
	return 0;
}

static bool obj_ok(uint64_t obj)
{
	return obj >= ARB_FIRST_INO && obj <= ARB_INUM_OBJ_MAX;
}

/* a directory entry's name: 1..255 bytes, no '/', no NUL, not . or .. */
static const char *name_problem(const char *n, size_t len)
{
	if (len == 0)
		return "empty name";
	if (len > ARB_NAME_MAX)
		return "name longer than 255 bytes";
	if (memchr(n, '/', len))
		return "name holds '/'";
	if (memchr(n, 0, len))
		return "name holds a NUL byte";
	if ((len == 1 && n[0] == '.') ||
	    (len == 2 && n[0] == '.' && n[1] == '.'))
		return "name is '.' or '..'";
	return NULL;
}

static bool mode_ok(uint32_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG: case S_IFDIR: case S_IFLNK: case S_IFCHR:
	case S_IFBLK: case S_IFIFO: case S_IFSOCK:
		return (mode & ~(uint32_t)(S_IFMT | 07777)) == 0;
	}
	return false;
}

static int decode(struct arb_sreader *r, unsigned type, const uint8_t *p,
		  size_t len, struct arb_scmd_dec *c)
{
	const char *why;

	memset(c, 0, sizeof(*c));
	c->type = type;
	if (type >= ARB_SCMD_CLONE && type < ARB_SCMD_MAX && r->version < 2)
		return sr_fail(r, -EBADMSG,
			       "%s command in a version %u stream (it came with version 2)",
			       arb_scmd_name(type), r->version);
	switch (type) {
	case ARB_SCMD_BEGIN:
		c->name = (const char *)p;
		c->name_len = len;
		break;
	case ARB_SCMD_INODE:
		if (len < ARB_SINODE_FIXED)
			goto short_cmd;
		c->obj = get64(p);
		c->size = get64(p + 8);
		c->rdev = get64(p + 16);
		c->atime.tv_sec = (time_t)get64(p + 24);
		c->mtime.tv_sec = (time_t)get64(p + 32);
		c->mode = get32(p + 40);
		c->uid = get32(p + 44);
		c->gid = get32(p + 48);
		c->atime.tv_nsec = get32(p + 52);
		c->mtime.tv_nsec = get32(p + 56);
		c->data = p + ARB_SINODE_FIXED;
		c->data_len = len - ARB_SINODE_FIXED;
		if (!mode_ok(c->mode))
			return sr_fail(r, -EBADMSG, "invalid mode 0%o", c->mode);
		if (c->size > ARB_MAX_FILE_SIZE)
			return sr_fail(r, -EBADMSG, "size %llu past the largest file",
				       (unsigned long long)c->size);
		if (c->atime.tv_nsec >= 1000000000 ||
		    c->mtime.tv_nsec >= 1000000000)
			return sr_fail(r, -EBADMSG, "nanoseconds out of range");
		if (S_ISLNK(c->mode)) {
			if (c->data_len == 0 || c->data_len > 4095 ||
			    memchr(c->data, 0, c->data_len))
				return sr_fail(r, -EBADMSG,
					       "symlink target of %zu bytes (1..4095, no NUL)",
					       c->data_len);
			if (c->size != c->data_len)
				return sr_fail(r, -EBADMSG,
					       "symlink size differs from its target");
		} else if (c->data_len) {
			return sr_fail(r, -EBADMSG, "%zu trailing bytes",
				       c->data_len);
		}
		if (S_ISDIR(c->mode) && c->size)
			c->size = 0; /* a directory's size is its names' */
		break;
	case ARB_SCMD_XATTR:
		if (len < 10)
			goto short_cmd;
		c->obj = get64(p);
		c->name_len = get16(p + 8);
		if (c->name_len == 0 || c->name_len > ARB_XATTR_NAME_MAX ||
		    10 + c->name_len > len)
			return sr_fail(r, -EBADMSG, "xattr name length %zu",
				       c->name_len);
		c->name = (const char *)p + 10;
		if (memchr(c->name, 0, c->name_len))
			return sr_fail(r, -EBADMSG, "xattr name holds a NUL byte");
		c->data = p + 10 + c->name_len;
		c->data_len = len - 10 - c->name_len;
		if (c->data_len > ARB_XATTR_SIZE_MAX)
			return sr_fail(r, -EBADMSG, "xattr value of %zu bytes",
				       c->data_len);
		break;
	case ARB_SCMD_RMXATTR:
		if (len < 9)
			goto short_cmd;
		c->obj = get64(p);
		c->name = (const char *)p + 8;
		c->name_len = len - 8;
		if (c->name_len > ARB_XATTR_NAME_MAX ||
		    memchr(c->name, 0, c->name_len))
			return sr_fail(r, -EBADMSG, "bad xattr name");
		break;
	case ARB_SCMD_WRITE:
		if (len < 17)
			goto short_cmd;
		c->obj = get64(p);
		c->off = get64(p + 8);
		c->data = p + 16;
		c->data_len = len - 16;
		if (c->data_len > ARB_SEND_DATA_MAX ||
		    c->off > ARB_MAX_FILE_SIZE ||
		    c->data_len > ARB_MAX_FILE_SIZE - c->off)
			return sr_fail(r, -EBADMSG,
				       "write of %zu bytes at %llu out of range",
				       c->data_len, (unsigned long long)c->off);
		break;
	case ARB_SCMD_PREALLOC:
	case ARB_SCMD_PUNCH:
		if (len != 24)
			goto bad_len;
		c->obj = get64(p);
		c->off = get64(p + 8);
		c->len = get64(p + 16);
		if (c->len == 0 || c->off > ARB_MAX_FILE_SIZE ||
		    c->len > ARB_MAX_FILE_SIZE - c->off)
			return sr_fail(r, -EBADMSG,
				       "%s range %llu+%llu out of range",
				       arb_scmd_name(type),
				       (unsigned long long)c->off,
				       (unsigned long long)c->len);
		break;
	case ARB_SCMD_LINK:
	case ARB_SCMD_UNLINK:
		if (len < 17)
			goto short_cmd;
		c->dir = get64(p);
		c->obj = get64(p + 8);
		c->name = (const char *)p + 16;
		c->name_len = len - 16;
		if (!obj_ok(c->dir))
			return sr_fail(r, -EBADMSG, "directory objectid %llu out of range",
				       (unsigned long long)c->dir);
		break;
	case ARB_SCMD_DELETE:
		if (len != 8)
			goto bad_len;
		c->obj = get64(p);
		break;
	case ARB_SCMD_TIMES:
		if (len != 32)
			goto bad_len;
		c->obj = get64(p);
		c->atime.tv_sec = (time_t)get64(p + 8);
		c->mtime.tv_sec = (time_t)get64(p + 16);
		c->atime.tv_nsec = get32(p + 24);
		c->mtime.tv_nsec = get32(p + 28);
		if (c->atime.tv_nsec >= 1000000000 ||
		    c->mtime.tv_nsec >= 1000000000)
			return sr_fail(r, -EBADMSG, "nanoseconds out of range");
		break;
	case ARB_SCMD_TRUNCATE:
		if (len != 16)
			goto bad_len;
		c->obj = get64(p);
		c->size = get64(p + 8);
		if (c->size > ARB_MAX_FILE_SIZE)
			return sr_fail(r, -EBADMSG, "size %llu past the largest file",
				       (unsigned long long)c->size);
		break;
	case ARB_SCMD_CLONE:
		if (len != 40)
			goto bad_len;
		c->obj = get64(p);
		c->off = get64(p + 8);
		c->len = get64(p + 16);
		c->src_obj = get64(p + 24);
		c->src_off = get64(p + 32);
		if (!obj_ok(c->src_obj))
			return sr_fail(r, -EBADMSG, "clone source objectid %llu out of range",
				       (unsigned long long)c->src_obj);
		if (c->len == 0 || c->off > ARB_MAX_FILE_SIZE ||
		    c->len > ARB_MAX_FILE_SIZE - c->off ||
		    c->src_off > ARB_MAX_FILE_SIZE ||
		    c->len > ARB_MAX_FILE_SIZE - c->src_off)
			return sr_fail(r, -EBADMSG,
				       "clone of %llu bytes from %llu to %llu out of range",
				       (unsigned long long)c->len,
				       (unsigned long long)c->src_off,
				       (unsigned long long)c->off);
		break;
	case ARB_SCMD_ENCODED_WRITE:
		if (len < ARB_SEND_ENC_FIXED + 1)
			goto short_cmd;
		c->obj = get64(p);
		c->off = get64(p + 8);
		c->len = get64(p + 16);
		c->ram_bytes = get64(p + 24);
		c->ext_off = get64(p + 32);
		c->compression = get32(p + 40);
		c->data = p + ARB_SEND_ENC_FIXED;
		c->data_len = len - ARB_SEND_ENC_FIXED;
		if (c->compression != ARB_SEND_ENC_ZLIB)
			return sr_fail(r, -EBADMSG, "unknown compression %u",
				       c->compression);
		if (c->data_len > ARB_SEND_ENC_MAX ||
		    c->ram_bytes == 0 || c->ram_bytes > ARB_SEND_ENC_MAX ||
		    c->len == 0 || c->ext_off > c->ram_bytes ||
		    c->len > c->ram_bytes - c->ext_off ||
		    c->off > ARB_MAX_FILE_SIZE ||
		    c->len > ARB_MAX_FILE_SIZE - c->off)
			return sr_fail(r, -EBADMSG,
				       "encoded write of %llu bytes at %llu (%llu inflated from %zu, from %llu) out of range",
				       (unsigned long long)c->len,
				       (unsigned long long)c->off,
				       (unsigned long long)c->ram_bytes,
				       c->data_len,
				       (unsigned long long)c->ext_off);
		break;
	case ARB_SCMD_RESUME:
		if (len != 24)
			goto bad_len;
		c->dir = get64(p);	/* the partial receive's subvolume */
		c->obj = get64(p + 8);	/* the first objectid sent */
		c->off = get64(p + 16);	/* its data from this offset */
		if (c->off > ARB_MAX_FILE_SIZE)
			return sr_fail(r, -EBADMSG, "resume at offset %llu",
				       (unsigned long long)c->off);
		if (c->obj > ARB_INUM_OBJ_MAX)
			c->obj = ARB_INUM_OBJ_MAX + 1; /* names only */
		else if (c->obj < ARB_FIRST_INO)
			return sr_fail(r, -EBADMSG, "resume at objectid %llu",
				       (unsigned long long)c->obj);
		return 0;
	case ARB_SCMD_END:
		if (len != ARB_DIGEST_SIZE + 8)
			goto bad_len;
		c->digest = p;
		c->count = get64(p + ARB_DIGEST_SIZE);
		c->obj = ARB_FIRST_INO;
		break;
	default:
		return sr_fail(r, -EBADMSG, "unknown command type %u", type);
	}
	if (type != ARB_SCMD_BEGIN && !obj_ok(c->obj))
		return sr_fail(r, -EBADMSG, "objectid %llu out of range",
			       (unsigned long long)c->obj);
	if (type == ARB_SCMD_BEGIN || type == ARB_SCMD_LINK ||
	    type == ARB_SCMD_UNLINK) {
		why = name_problem(c->name, c->name_len);
		if (why)
			return sr_fail(r, -EBADMSG, "%s", why);
	}
	return 0;
short_cmd:
	return sr_fail(r, -EBADMSG, "%s command of %zu bytes is too short",
		       arb_scmd_name(type), len);
bad_len:
	return sr_fail(r, -EBADMSG, "%s command of %zu bytes (wrong length)",
		       arb_scmd_name(type), len);
}

int sr_next(struct arb_sreader *r, struct arb_scmd_dec *c)
{
	uint8_t h[ARB_SEND_CMD_HDR];
	uint32_t len, crc;
	unsigned type;
	size_t got;
	int ret;

	r->index++;
	r->cmd_off = r->off;
	ret = read_full(r, h, sizeof(h), &got);
	r->cut = ret != 0;
	if (ret < 0)
		return sr_fail(r, ret, "read error: %s", strerror(-ret));
	if (ret && got == 0)
		return sr_fail(r, -EBADMSG,
			       "the stream ends before its end command (truncated)");
	if (ret)
		return sr_fail(r, -EBADMSG,
			       "the stream ends inside a command header (truncated)");
	type = get16(h);
	len = get32(h + 4);
	if (get16(h + 2))
		return sr_fail(r, -EBADMSG, "reserved header bytes are not 0");
	if (len > (r->version < 2 ? ARB_SEND_CMD_MAX_V1 : ARB_SEND_CMD_MAX))
		return sr_fail(r, -EBADMSG,
			       "command length %u past the largest (%u)", len,
			       r->version < 2 ? ARB_SEND_CMD_MAX_V1
					      : ARB_SEND_CMD_MAX);
	ret = read_full(r, r->buf, len, &got);
	r->cut = ret != 0;
	if (ret < 0)
		return sr_fail(r, ret, "read error: %s", strerror(-ret));
	if (ret)
		return sr_fail(r, -EBADMSG,
			       "the stream ends inside a %s command (%zu of %u bytes; truncated)",
			       arb_scmd_name(type), got, len);
	crc = arb_crc32c(0, h, 8);
	crc = arb_crc32c(crc, r->buf, len);
	if (crc != get32(h + 8))
		return sr_fail(r, -EBADMSG, "checksum mismatch (corrupt stream)");
	return decode(r, type, r->buf, len, c);
}

/* ---- printing ----------------------------------------------------------- */

static void print_name(FILE *out, const char *n, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)n[i];

		if (ch < 0x20 || ch == 0x7f || ch == '\\')
			fprintf(out, "\\x%02x", ch);
		else
			fputc(ch, out);
	}
}

static void print_uuid(FILE *out, const uint8_t *u)
{
	for (int i = 0; i < 16; i++)
		fprintf(out, "%02x%s", u[i],
			i == 3 || i == 5 || i == 7 || i == 9 ? "-" : "");
}

int arb_receive_dump(int fd, FILE *out, char *why, size_t why_len)
{
	struct arb_sreader r;
	struct arb_send_hdr h;
	struct arb_scmd_dec c;
	char hex[65];
	int ret;

	ret = sr_init(&r, fd, why, why_len);
	if (ret)
		return ret;
	ret = sr_header(&r, &h);
	if (ret)
		goto out;
	fprintf(out, "stream version %u, %s%s\nsource ", h.version,
		h.flags & ARB_SEND_F_INCREMENTAL ? "incremental" : "full",
		h.flags & ARB_SEND_F_RESUME ? ", resumed" : "");
	print_uuid(out, h.uuid);
	fprintf(out, " generation %llu\n", (unsigned long long)h.gen);
	if (h.flags & ARB_SEND_F_INCREMENTAL) {
		fprintf(out, "parent ");
		print_uuid(out, h.parent_uuid);
		fprintf(out, " generation %llu\n",
			(unsigned long long)h.parent_gen);
	}
	for (;;) {
		ret = sr_next(&r, &c);
		if (ret)
			goto out;
		if (r.index == 1 && c.type != ARB_SCMD_BEGIN) {
			ret = sr_fail(&r, -EBADMSG, "the first command is not begin");
			goto out;
		}
		fprintf(out, "%-9s", arb_scmd_name(c.type));
		switch (c.type) {
		case ARB_SCMD_BEGIN:
			fprintf(out, "name=");
			print_name(out, c.name, c.name_len);
			break;
		case ARB_SCMD_INODE:
			fprintf(out,
				"ino=%llu mode=0%o uid=%u gid=%u size=%llu rdev=%llu mtime=%lld.%09ld",
				(unsigned long long)c.obj, c.mode, c.uid, c.gid,
				(unsigned long long)c.size,
				(unsigned long long)c.rdev,
				(long long)c.mtime.tv_sec, c.mtime.tv_nsec);
			if (c.data_len) {
				fprintf(out, " target=");
				print_name(out, (const char *)c.data,
					   c.data_len);
			}
			break;
		case ARB_SCMD_XATTR:
		case ARB_SCMD_RMXATTR:
			fprintf(out, "ino=%llu name=", (unsigned long long)c.obj);
			print_name(out, c.name, c.name_len);
			if (c.type == ARB_SCMD_XATTR)
				fprintf(out, " len=%zu", c.data_len);
			break;
		case ARB_SCMD_WRITE:
			fprintf(out, "ino=%llu off=%llu len=%zu",
				(unsigned long long)c.obj,
				(unsigned long long)c.off, c.data_len);
			break;
		case ARB_SCMD_CLONE:
			fprintf(out, "ino=%llu off=%llu len=%llu from ino=%llu off=%llu",
				(unsigned long long)c.obj,
				(unsigned long long)c.off,
				(unsigned long long)c.len,
				(unsigned long long)c.src_obj,
				(unsigned long long)c.src_off);
			break;
		case ARB_SCMD_ENCODED_WRITE:
			fprintf(out, "ino=%llu off=%llu len=%llu zlib=%zu ram=%llu ext_off=%llu",
				(unsigned long long)c.obj,
				(unsigned long long)c.off,
				(unsigned long long)c.len, c.data_len,
				(unsigned long long)c.ram_bytes,
				(unsigned long long)c.ext_off);
			break;
		case ARB_SCMD_PUNCH:
		case ARB_SCMD_PREALLOC:
			fprintf(out, "ino=%llu off=%llu len=%llu",
				(unsigned long long)c.obj,
				(unsigned long long)c.off,
				(unsigned long long)c.len);
			break;
		case ARB_SCMD_LINK:
		case ARB_SCMD_UNLINK:
			fprintf(out, "dir=%llu ino=%llu name=",
				(unsigned long long)c.dir,
				(unsigned long long)c.obj);
			print_name(out, c.name, c.name_len);
			break;
		case ARB_SCMD_DELETE:
			fprintf(out, "ino=%llu", (unsigned long long)c.obj);
			break;
		case ARB_SCMD_TIMES:
			fprintf(out, "ino=%llu atime=%lld.%09ld mtime=%lld.%09ld",
				(unsigned long long)c.obj,
				(long long)c.atime.tv_sec, c.atime.tv_nsec,
				(long long)c.mtime.tv_sec, c.mtime.tv_nsec);
			break;
		case ARB_SCMD_TRUNCATE:
			fprintf(out, "ino=%llu size=%llu",
				(unsigned long long)c.obj,
				(unsigned long long)c.size);
			break;
		case ARB_SCMD_RESUME:
			fprintf(out, "partial=%llu from ino=%llu off=%llu",
				(unsigned long long)c.dir,
				(unsigned long long)c.obj,
				(unsigned long long)c.off);
			break;
		case ARB_SCMD_END:
			arb_digest_hex(c.digest, hex);
			fprintf(out, "inodes=%llu digest=%s",
				(unsigned long long)c.count, hex);
			break;
		}
		fputc('\n', out);
		if (c.type == ARB_SCMD_END)
			break;
	}
	/* nothing may follow the end command */
	{
		uint8_t b;
		ssize_t k;

		do
			k = read(fd, &b, 1);
		while (k < 0 && errno == EINTR);
		if (k > 0)
			ret = sr_fail(&r, -EBADMSG, "bytes after the end command");
	}
out:
	sr_free(&r);
	return ret;
}
