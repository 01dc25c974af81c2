/* SPDX-License-Identifier: Apache-2.0 */
/* REGISTER and REGISTER_PARTS: engine memory becomes a region of the
 * connection. Both become one description (transport/region.h), checked by
 * one set of rules; a REGISTER_PARTS refused for its layout gets the fault
 * in its reply, so the engine can say which layer and stride are wrong. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transport/server_int.h"

/* Refuse r for its layout: logged with the fault in words; a
 * REGISTER_PARTS reply carries the fault. */
static int refuse(struct kvt_conn *c, const struct kvt_req *req, const struct kvt_region *r,
		  const struct kvt_ns_desc *d, const struct kvt_region_fault *f)
{
	char why[320];

	kvt_srv_log(c->srv, KVT_LOG_WARN, "event=register.refused conn=%llu ns=%u model=\"%s\" "
		    "parts=%u reason=\"%s\"", (unsigned long long)c->id, r->ns, d->model_id,
		    r->n_parts, kvt_region_fault_str(f, r, why, sizeof(why)));
	if (req->hdr.op != KVT_OP_REGISTER_PARTS)
		return -EINVAL;
	kvt_wr_begin(&c->out, KVT_OP_REGISTER_PARTS | KVT_OP_REPLY, req->hdr.id, -EINVAL);
	kvt_proto_put_region_fault(&c->out, f);
	return kvt_wr_end(&c->out) ? -ENOMEM : KVT_REQ_ANSWERED;
}

/* The region a REGISTER or REGISTER_PARTS describes; parts and layer are
 * allocated (the caller frees them). */
static int region_of(const struct kvt_req *req, struct kvt_region *r,
		     struct kvt_region_part **parts, struct kvt_region_layer **layer)
{
	const struct kvt_req_register *o = &req->u.reg;
	const struct kvt_req_register_parts *p = &req->u.parts;
	bool many = req->hdr.op == KVT_OP_REGISTER_PARTS;

	memset(r, 0, sizeof(*r));
	r->ns = many ? p->ns : o->ns;
	r->kind = many ? p->kind : o->kind;
	r->device = many ? p->device : o->device;
	r->layers = many ? p->layers : o->layers;
	r->pages = many ? p->pages : o->pages;
	r->n_parts = many ? p->n_parts : 1;
	r->ipc_len = many ? p->ipc_len : o->ipc_len;
	r->kv_stride = many ? p->kv_stride : o->kv_stride;
	r->page_stride = many ? p->page_stride : o->page_stride;
	*parts = calloc(r->n_parts, sizeof(**parts));
	*layer = calloc(r->layers, sizeof(**layer));
	if (!*parts || !*layer)
		return -ENOMEM;
	for (uint32_t i = 0; i < r->n_parts; i++)
		(*parts)[i] = many ? kvt_proto_reg_part(p, i) :
				     (struct kvt_region_part){ o->offset, o->bytes, o->ipc };
	for (uint32_t l = 0; l < r->layers; l++) {
		/* the old REGISTER: evenly spaced layers; an offset that
		 * overflows is refused by kvt_region_check as past the part */
		uint64_t off;

		if (many)
			(*layer)[l] = kvt_proto_reg_layer(p, l);
		else
			(*layer)[l] = (struct kvt_region_layer){ 0, __builtin_mul_overflow(
				(uint64_t)l, o->layer_stride, &off) ? UINT64_MAX : off };
	}
	r->parts = *parts;
	r->layer = *layer;
	return 0;
}

/* Take the memfds of this frame, one per part, into fds; the frame's others
 * are closed after it. 0, -EBADF for another count, -EAGAIN when the daemon
 * dropped passed fds over its budget (try again). */
static int take_fds(struct kvt_conn *c, const struct kvt_region *r, int *fds)
{
	uint32_t want = r->kind == KVT_MEM_HOST_MEMFD ? r->n_parts : 0;

	if ((uint32_t)c->n_frame_fds != want && want)
		return c->fds_dropped ? -EAGAIN : -EBADF;
	memcpy(fds, c->frame_fds, want * sizeof(*fds));
	if (want)
		c->n_frame_fds = 0;
	return 0;
}

int kvt_op_register(struct kvt_conn *c, const struct kvt_req *req)
{
	struct kvt_dev *dev = c->srv->opts.dev_host;
	struct kvt_region_part *parts = NULL;
	struct kvt_region_layer *layer = NULL;
	struct kvt_engine_mem *m = NULL;
	struct kvt_region_fault f;
	const struct kvt_ns_desc *d;
	struct kvt_region r;
	int fds[KVT_PROTO_MAX_PARTS], n_fds = 0, slot = -1, err;
	uint32_t kvn;

	if (req->hdr.op == KVT_OP_REGISTER_PARTS && c->version < 4)
		return -EOPNOTSUPP;
	err = region_of(req, &r, &parts, &layer);
	if (!err && (r.ns < 1 || r.ns > KVT_CONN_MAX_NS || !c->ns[r.ns - 1]))
		err = -EBADF;
	if (!err && r.kind == KVT_MEM_CUDA_IPC && !c->srv->opts.dev_cuda)
		err = -EOPNOTSUPP; /* no GPU driven here: engine memory comes as memfds */
	if (!err)
		err = take_fds(c, &r, fds);
	if (!err)
		n_fds = r.kind == KVT_MEM_HOST_MEMFD ? (int)r.n_parts : 0;
	for (int i = 0; !err && i < KVT_CONN_MAX_REGIONS && slot < 0; i++)
		if (!c->regions[i])
			slot = i;
	if (!err && slot < 0)
		err = -EMFILE;
	if (err)
		goto out;
	/* the region's pages are the namespace's: a block is layers x kvn pages */
	d = &c->ns_desc[r.ns - 1];
	kvn = d->layout == KVT_LAYOUT_MLA ? 1 : 2;
	err = kvt_region_check(&r, d->layers, kvn,
			       c->ns_block_bytes[r.ns - 1] / ((uint64_t)d->layers * kvn), &f);
	if (err == -EINVAL) {
		err = refuse(c, req, &r, d, &f);
		goto out;
	}
	if (!err)
		err = kvt_engine_mem_open(r.kind == KVT_MEM_CUDA_IPC ? c->srv->opts.dev_cuda : dev,
					  r.kind == KVT_MEM_HOST_MEMFD ? fds : NULL, &r, d, &m);
	if (err)
		goto out;
	c->regions[slot] = m;
	kvt_srv_log(c->srv, KVT_LOG_INFO, "event=register conn=%llu region=%d ns=%u parts=%u "
		    "layers=%u pages=%u", (unsigned long long)c->id, slot + 1, r.ns, r.n_parts,
		    r.layers, r.pages);
	kvt_wr_begin(&c->out, req->hdr.op | KVT_OP_REPLY, req->hdr.id, 0);
	kvt_wr_u32(&c->out, (uint32_t)slot + 1);
	err = kvt_wr_end(&c->out) ? -ENOMEM : KVT_REQ_ANSWERED;
out:
	for (int i = 0; i < n_fds; i++)
		close(fds[i]); /* mapped or duplicated: the daemon's copies are not needed */
	free(parts);
	free(layer);
	return err;
}
