// SPDX-License-Identifier: MIT
/*
 * diff.c - ARB_IOC_FIND_NEW and ARB_IOC_DIFF (arbor/ioctl.h): find-new
 * and diff of subvolumes for `arbor subvolume find-new|diff` on a mount.
 *
 * The answer can be any size and an ioctl carries a fixed buffer, so it
 * goes in pages: each call runs the library's walk (arbor/diff.h) from
 * the cursor's objectid, skips the records of that inode the previous
 * page carried (cursor_sub of them), and stops when the page is full,
 * handing back where to go on.  The walk costs what changed, and the
 * restart costs one descent to the cursor, so a page costs its share.
 * Each page holds the library's lock only while it is filled.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "arborfs_fuse.h"
#include <arbor/diff.h>
#include <arbor/ioctl.h>

#define CAP_SYS_ADMIN_BIT 21

struct page {
	struct arb_ioc_diff *out;
	/* the inode whose records are being written, and how many */
	uint64_t obj;
	uint32_t sub;
	/* resuming: records of inode skip_obj below skip_sub were sent */
	uint64_t skip_obj;
	uint32_t skip_sub;
};

/* one record (payload a then b): 0, or 1 when the page is full (cursor
 * set to this record) */
static int put(struct page *p, uint16_t type, const void *a, size_t alen,
	       const void *b, size_t blen)
{
	struct arb_ioc_diff *o = p->out;
	struct arb_ioc_diff_rec h = { type, 0, (uint32_t)(alen + blen) };
	size_t need = (sizeof(h) + alen + blen + 7) & ~(size_t)7;
	uint32_t idx = p->sub++;

	if (p->obj == p->skip_obj && idx < p->skip_sub)
		return 0;
	if (o->used + need > sizeof(o->data)) {
		o->cursor = p->obj;
		o->cursor_sub = idx;
		return 1;
	}
	memcpy(o->data + o->used, &h, sizeof(h));
	memcpy(o->data + o->used + sizeof(h), a, alen);
	if (blen)
		memcpy(o->data + o->used + sizeof(h) + alen, b, blen);
	o->used += (uint32_t)need;
	return 0;
}

static int page_fill(void *ctx, const struct arb_change *c)
{
	struct page *p = ctx;
	struct arb_ioc_diff_inode in = { 0 };
	size_t i;
	int ret;

	if (c->obj != p->obj) {
		p->obj = c->obj;
		p->sub = 0;
	}
	in.ino = c->ino;
	in.obj = c->obj;
	in.flags = c->flags;
	in.mode = c->mode;
	in.size = c->size;
	in.old_size = c->old_size;
	in.transid = c->transid;
	in.nr_paths = (uint32_t)c->nr_paths;
	in.nr_old_paths = (uint32_t)c->nr_old_paths;
	in.nr_ranges = (uint32_t)c->nr_ranges;
	ret = put(p, ARB_IOC_DIFF_REC_INODE, &in, sizeof(in), NULL, 0);
	for (i = 0; !ret && i < c->nr_paths; i++)
		ret = put(p, ARB_IOC_DIFF_REC_PATH, c->paths[i],
			  strlen(c->paths[i]) + 1, NULL, 0);
	for (i = 0; !ret && i < c->nr_old_paths; i++)
		ret = put(p, ARB_IOC_DIFF_REC_OLD_PATH, c->old_paths[i],
			  strlen(c->old_paths[i]) + 1, NULL, 0);
	for (i = 0; !ret && i < c->nr_ranges; i++) {
		struct arb_ioc_diff_range r = { c->ranges[i].off,
						c->ranges[i].len };

		ret = put(p, ARB_IOC_DIFF_REC_RANGE, &r, sizeof(r), NULL, 0);
	}
	return ret;
}

static bool privileged(fuse_req_t req)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	return ctx->uid == 0 ||
	       (ctx->pid > 0 && afs_pid_has_cap(ctx->pid, CAP_SYS_ADMIN_BIT));
}

/* a subvolume id of the request: id, or the one holding nodeid */
static uint64_t req_tree(fuse_ino_t nodeid, uint64_t id)
{
	return id ? id : arb_inum_tree(afs_node_ino(nodeid));
}

bool afs_diff_ioctl(fuse_req_t req, fuse_ino_t nodeid, unsigned int cmd,
		    const void *in_buf, size_t in_bufsz, size_t out_bufsz)
{
	struct afs *afs = fuse_req_userdata(req);
	struct arb_ioc_diff *in = NULL, *out = NULL;
	struct arb_diff_stats st = { 0 };
	struct page p = { 0 };
	int ret;

	if (cmd != ARB_IOC_FIND_NEW && cmd != ARB_IOC_DIFF)
		return false;
	/* the kernel sizes the buffers from the number: this is a check */
	if (in_bufsz < sizeof(*in) || out_bufsz < sizeof(*out)) {
		ret = -EINVAL;
		goto out_err;
	}
	if (!privileged(req)) {
		ret = -EPERM;
		goto out_err;
	}
	in = malloc(sizeof(*in));
	out = calloc(1, sizeof(*out));
	if (!in || !out) {
		ret = -ENOMEM;
		goto out_err;
	}
	memcpy(in, in_buf, sizeof(*in));
	if (in->cursor_sub && !in->cursor) {
		ret = -EINVAL;
		goto out_err;
	}
	p.out = out;
	p.obj = UINT64_MAX;
	p.skip_obj = in->cursor;
	p.skip_sub = in->cursor_sub;
	if (cmd == ARB_IOC_FIND_NEW)
		ret = arb_find_new(afs->fs, req_tree(nodeid, in->id_a), in->gen,
				   in->cursor, page_fill, &p, &st);
	else
		ret = in->id_b ? arb_tree_diff(afs->fs,
					       req_tree(nodeid, in->id_a),
					       in->id_b, in->cursor, page_fill,
					       &p, &st)
			       : -EINVAL;
	if (ret < 0)
		goto out_err;
	out->done = ret == 0;
	if (out->done) {
		out->cursor = 0;
		out->cursor_sub = 0;
	}
	out->id_a = in->id_a;
	out->id_b = in->id_b;
	out->gen = in->gen;
	out->generation = st.generation;
	out->nodes_visited = st.nodes_visited;
	out->subtrees_skipped = st.subtrees_skipped;
	out->nodes_read = st.nodes_read;
	out->items = st.items;
	out->inodes = st.inodes;
	out->size = sizeof(*out);
	out->version = ARB_IOC_VERSION;
	fuse_reply_ioctl(req, 0, out, sizeof(*out));
	free(in);
	free(out);
	return true;
out_err:
	afs_op_error(afs);
	fuse_reply_err(req, -ret);
	free(in);
	free(out);
	return true;
}
