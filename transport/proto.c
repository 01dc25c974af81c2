/* SPDX-License-Identifier: Apache-2.0 */
/* Frame encoding and strict decoding of the sidecar protocol (see proto.h). */
#include "transport/proto.h"

#include "transport/wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *const op_names[KVT_OP_COUNT] = {
	[KVT_OP_HELLO] = "HELLO",   [KVT_OP_REGISTER] = "REGISTER",
	[KVT_OP_LOOKUP] = "LOOKUP", [KVT_OP_SAVE] = "SAVE",
	[KVT_OP_LOAD] = "LOAD",     [KVT_OP_WAIT] = "WAIT",
	[KVT_OP_POLL] = "POLL",     [KVT_OP_PIN] = "PIN",
	[KVT_OP_UNPIN] = "UNPIN",   [KVT_OP_REMOVE] = "REMOVE",
	[KVT_OP_STATS] = "STATS",   [KVT_OP_PING] = "PING",
	[KVT_OP_PREFILL] = "PREFILL", [KVT_OP_DONE] = "DONE",
	[KVT_OP_REGISTER_PARTS] = "REGISTER_PARTS",
};

const char *kvt_op_name(unsigned op)
{
	op &= ~KVT_OP_REPLY;
	return op < KVT_OP_COUNT ? op_names[op] : NULL;
}

/* ---- headers ----------------------------------------------------------- */

int kvt_frame_hdr_decode(const void *buf, size_t len, uint32_t magic, uint16_t version,
			 struct kvt_frame_hdr *h)
{
	struct kvt_rd r = { .p = buf, .len = len };

	memset(h, 0, sizeof(*h));
	if (len < KVT_PROTO_HDR_BYTES)
		return -EAGAIN;
	h->magic = kvt_rd_u32(&r);
	h->version = kvt_rd_u16(&r);
	h->op = kvt_rd_u16(&r);
	h->len = kvt_rd_u32(&r);
	h->status = (int32_t)kvt_rd_u32(&r);
	h->id = kvt_rd_u64(&r);
	if (h->magic != magic)
		return -EPROTO;
	if (h->version != version)
		return -EPROTONOSUPPORT;
	if (h->len > KVT_PROTO_MAX_PAYLOAD)
		return -EMSGSIZE;
	return 0;
}

int kvt_proto_hdr_decode(const void *buf, size_t len, struct kvt_frame_hdr *h)
{
	return kvt_frame_hdr_decode(buf, len, KVT_PROTO_MAGIC, KVT_PROTO_VERSION, h);
}

void kvt_proto_hdr_encode(const struct kvt_frame_hdr *h, void *out)
{
	uint8_t *p = out;

	kvt_put_u32(p, h->magic);
	kvt_put_u16(p + 4, h->version);
	kvt_put_u16(p + 6, h->op);
	kvt_put_u32(p + 8, h->len);
	kvt_put_u32(p + 12, (uint32_t)h->status);
	kvt_put_u64(p + 16, h->id);
}

/* ---- requests ---------------------------------------------------------- */

static bool layout_known(unsigned v)
{
	return v == KVT_LAYOUT_PAGED_KV || v == KVT_LAYOUT_SPLIT_KV || v == KVT_LAYOUT_MLA;
}

/* Bytes of one block, or 0 when a field is zero or the product passes 1 GiB
 * (checked here so the parser needs nothing of the store). */
static uint64_t desc_block_bytes(const struct kvt_ns_desc *d)
{
	const uint64_t limit = 1ull << 30;
	uint64_t f[5] = { d->layout == KVT_LAYOUT_MLA ? 1 : 2, d->layers, d->kv_heads,
			  d->head_dim, d->block_tokens };
	uint64_t b = kvt_dtype_bytes(d->dtype);

	if (d->layout == KVT_LAYOUT_MLA && d->kv_heads != 1)
		return 0;
	for (int i = 0; i < 5; i++) {
		if (f[i] == 0 || f[i] > limit || b * f[i] > limit)
			return 0;
		b *= f[i];
	}
	return b;
}

static int dec_hello(struct kvt_rd *r, struct kvt_req_hello *m)
{
	uint16_t model_len;
	const uint8_t *p;

	m->min_version = kvt_rd_u16(r);
	m->max_version = kvt_rd_u16(r);
	m->token_len = kvt_rd_u16(r);
	kvt_rd_zero(r, 2);
	if (m->token_len > KVT_PROTO_MAX_TOKEN || m->min_version > m->max_version)
		return -EBADMSG;
	m->token = (const char *)kvt_rd_take(r, m->token_len);
	memset(&m->desc, 0, sizeof(m->desc));
	m->desc.size = sizeof(m->desc);
	model_len = kvt_rd_u16(r);
	if (model_len == 0 || model_len >= KVT_MODEL_ID_MAX)
		return -EBADMSG;
	p = kvt_rd_take(r, model_len);
	if (!p)
		return -EBADMSG;
	for (uint16_t i = 0; i < model_len; i++)
		if (p[i] < 0x20 || p[i] > 0x7e) /* printable ASCII: it lands in logs */
			return -EBADMSG;
	memcpy(m->desc.model_id, p, model_len);
	m->desc.layout = kvt_rd_u8(r);
	m->desc.dtype = kvt_rd_u8(r);
	kvt_rd_zero(r, 2);
	m->desc.layers = kvt_rd_u32(r);
	m->desc.kv_heads = kvt_rd_u32(r);
	m->desc.head_dim = kvt_rd_u32(r);
	m->desc.block_tokens = kvt_rd_u32(r);
	m->desc.tp_rank = kvt_rd_u32(r);
	m->desc.tp_size = kvt_rd_u32(r);
	if (kvt_rd_done(r))
		return -EBADMSG;
	if (!layout_known(m->desc.layout) || !kvt_dtype_bytes(m->desc.dtype) ||
	    m->desc.tp_size == 0 || m->desc.tp_rank >= m->desc.tp_size ||
	    desc_block_bytes(&m->desc) == 0)
		return -EBADMSG;
	return 0;
}

static int dec_register(struct kvt_rd *r, struct kvt_req_register *m)
{
	m->ns = kvt_rd_u32(r);
	m->kind = kvt_rd_u32(r);
	m->bytes = kvt_rd_u64(r);
	m->offset = kvt_rd_u64(r);
	m->layers = kvt_rd_u32(r);
	m->pages = kvt_rd_u32(r);
	m->layer_stride = kvt_rd_u64(r);
	m->kv_stride = kvt_rd_u64(r);
	m->page_stride = kvt_rd_u64(r);
	m->device = kvt_rd_u32(r);
	m->ipc_len = kvt_rd_u32(r);
	if (m->ipc_len > KVT_PROTO_MAX_IPC)
		return -EBADMSG;
	m->ipc = kvt_rd_take(r, m->ipc_len);
	if (kvt_rd_done(r))
		return -EBADMSG;
	if (m->kind != KVT_MEM_HOST_MEMFD && m->kind != KVT_MEM_CUDA_IPC)
		return -EBADMSG;
	if ((m->kind == KVT_MEM_HOST_MEMFD) != (m->ipc_len == 0))
		return -EBADMSG;
	if (m->layers == 0 || m->pages == 0 || m->bytes == 0)
		return -EBADMSG;
	return 0;
}

#define PART_BYTES 16u  /* u64 offset, u64 bytes; then ipc_len bytes */
#define LAYER_BYTES 16u /* u32 part, u32 0, u64 offset */

static int dec_register_parts(struct kvt_rd *r, struct kvt_req_register_parts *m)
{
	uint32_t reserved;

	m->ns = kvt_rd_u32(r);
	m->kind = kvt_rd_u32(r);
	m->layers = kvt_rd_u32(r);
	m->pages = kvt_rd_u32(r);
	m->kv_stride = kvt_rd_u64(r);
	m->page_stride = kvt_rd_u64(r);
	m->device = kvt_rd_u32(r);
	m->n_parts = kvt_rd_u32(r);
	m->ipc_len = kvt_rd_u32(r);
	reserved = kvt_rd_u32(r);
	if (r->bad || reserved || m->n_parts == 0 || m->n_parts > KVT_PROTO_MAX_PARTS ||
	    m->layers == 0 || m->layers > KVT_PROTO_MAX_PART_LAYERS || m->pages == 0 ||
	    m->ipc_len > KVT_PROTO_MAX_IPC)
		return -EBADMSG;
	if (m->kind != KVT_MEM_HOST_MEMFD && m->kind != KVT_MEM_CUDA_IPC)
		return -EBADMSG;
	if ((m->kind == KVT_MEM_HOST_MEMFD) != (m->ipc_len == 0))
		return -EBADMSG;
	m->parts = kvt_rd_take(r, (size_t)m->n_parts * (PART_BYTES + m->ipc_len));
	m->layer = kvt_rd_take(r, (size_t)m->layers * LAYER_BYTES);
	if (kvt_rd_done(r))
		return -EBADMSG;
	for (uint32_t l = 0; l < m->layers; l++)
		if (kvt_get_u32(m->layer + (size_t)l * LAYER_BYTES + 4))
			return -EBADMSG;
	return 0;
}

struct kvt_region_part kvt_proto_reg_part(const struct kvt_req_register_parts *r, uint32_t i)
{
	const uint8_t *p = r->parts + (size_t)i * (PART_BYTES + r->ipc_len);

	return (struct kvt_region_part){ kvt_get_u64(p), kvt_get_u64(p + 8),
					 r->ipc_len ? p + PART_BYTES : NULL };
}

struct kvt_region_layer kvt_proto_reg_layer(const struct kvt_req_register_parts *r, uint32_t l)
{
	const uint8_t *p = r->layer + (size_t)l * LAYER_BYTES;

	return (struct kvt_region_layer){ kvt_get_u32(p), kvt_get_u64(p + 8) };
}

static int dec_keys(struct kvt_rd *r, struct kvt_req_keys *m)
{
	m->ns = kvt_rd_u32(r);
	m->n = kvt_rd_u32(r);
	if (m->n > KVT_PROTO_MAX_KEYS)
		return -EBADMSG;
	m->keys = (const struct kvt_key *)kvt_rd_take(r, (size_t)m->n * KVT_KEY_BYTES);
	return kvt_rd_done(r);
}

static int dec_xfer(struct kvt_rd *r, uint16_t op, struct kvt_req_xfer *m)
{
	const uint8_t *parent;

	m->ns = kvt_rd_u32(r);
	m->region = kvt_rd_u32(r);
	m->n = kvt_rd_u32(r);
	m->flags = kvt_rd_u32(r);
	if (m->n == 0 || m->n > KVT_PROTO_MAX_KEYS)
		return -EBADMSG;
	if (op == KVT_OP_LOAD) {
		if (m->flags & ~(KVT_XFER_PUSH | KVT_XFER_PUSH_LAYERS))
			return -EBADMSG;
		kvt_rd_zero(r, KVT_KEY_BYTES);
		memset(&m->parent, 0, sizeof(m->parent));
	} else {
		if (m->flags & ~(KVT_SAVE_HAS_PARENT | KVT_XFER_PUSH | KVT_SAVE_CLASS_MASK))
			return -EBADMSG;
		parent = kvt_rd_take(r, KVT_KEY_BYTES);
		if (parent)
			memcpy(m->parent.bytes, parent, KVT_KEY_BYTES);
	}
	m->keys = (const struct kvt_key *)kvt_rd_take(r, (size_t)m->n * KVT_KEY_BYTES);
	m->pages = kvt_rd_take(r, (size_t)m->n * 4);
	return kvt_rd_done(r);
}

uint32_t kvt_proto_page(const struct kvt_req_xfer *x, uint32_t i)
{
	return kvt_get_u32(x->pages + (size_t)i * 4);
}

int kvt_proto_req_decode(const struct kvt_frame_hdr *h, const void *payload,
			 struct kvt_req *req)
{
	struct kvt_rd r = { .p = payload, .len = h->len };

	memset(req, 0, sizeof(*req));
	req->hdr = *h;
	if (h->len && !payload)
		return -EINVAL;
	if (h->status != 0)
		return -EBADMSG;
	switch (h->op) {
	case KVT_OP_HELLO:
		return dec_hello(&r, &req->u.hello);
	case KVT_OP_REGISTER:
		return dec_register(&r, &req->u.reg);
	case KVT_OP_REGISTER_PARTS:
		return dec_register_parts(&r, &req->u.parts);
	case KVT_OP_LOOKUP:
	case KVT_OP_PIN:
	case KVT_OP_UNPIN:
	case KVT_OP_REMOVE:
		return dec_keys(&r, &req->u.keys);
	case KVT_OP_SAVE:
	case KVT_OP_LOAD:
		return dec_xfer(&r, h->op, &req->u.xfer);
	case KVT_OP_WAIT:
		req->u.wait.ticket = kvt_rd_u64(&r);
		req->u.wait.layer = kvt_rd_u32(&r);
		req->u.wait.timeout_ms = kvt_rd_u32(&r);
		return kvt_rd_done(&r);
	case KVT_OP_POLL:
		req->u.wait.ticket = kvt_rd_u64(&r);
		req->u.wait.layer = KVT_WAIT_ALL;
		return kvt_rd_done(&r);
	case KVT_OP_PREFILL:
		req->u.prefill.ns = kvt_rd_u32(&r);
		req->u.prefill.tokens = kvt_rd_u32(&r);
		req->u.prefill.ns_elapsed = kvt_rd_u64(&r);
		return kvt_rd_done(&r);
	case KVT_OP_STATS: /* empty, or a tenant's token */
		if (h->len > KVT_PROTO_MAX_TOKEN)
			return -EBADMSG;
		req->u.blob.data = payload;
		req->u.blob.len = h->len;
		return 0;
	case KVT_OP_PING:
		if (h->len > KVT_PROTO_MAX_PING)
			return -EBADMSG;
		req->u.blob.data = payload;
		req->u.blob.len = h->len;
		return 0;
	default:
		return -EOPNOTSUPP;
	}
}

/* ---- replies ----------------------------------------------------------- */

int kvt_proto_rep_hello(const void *p, size_t len, struct kvt_rep_hello *out)
{
	struct kvt_rd r = { .p = p, .len = len };
	const uint8_t *salt;

	out->version = kvt_rd_u16(&r);
	kvt_rd_zero(&r, 2);
	out->ns = kvt_rd_u32(&r);
	out->block_bytes = kvt_rd_u64(&r);
	salt = kvt_rd_take(&r, KVT_KEY_BYTES);
	if (salt)
		memcpy(out->salt.bytes, salt, KVT_KEY_BYTES);
	out->max_keys = kvt_rd_u32(&r);
	return kvt_rd_done(&r);
}

int kvt_proto_rep_u32(const void *p, size_t len, uint32_t *out)
{
	struct kvt_rd r = { .p = p, .len = len };

	*out = kvt_rd_u32(&r);
	return kvt_rd_done(&r);
}

int kvt_proto_rep_u64(const void *p, size_t len, uint64_t *out)
{
	struct kvt_rd r = { .p = p, .len = len };

	*out = kvt_rd_u64(&r);
	return kvt_rd_done(&r);
}

int kvt_proto_rep_lookup(const void *p, size_t len, struct kvt_rep_lookup *out)
{
	struct kvt_rd r = { .p = p, .len = len };

	out->hit = kvt_rd_u32(&r);
	out->n = kvt_rd_u32(&r);
	if (out->n > KVT_PROTO_MAX_KEYS || out->hit > out->n)
		return -EBADMSG;
	out->tiers = kvt_rd_take(&r, out->n);
	/* version 2 appends the plan's count */
	out->load = r.off < r.len ? kvt_rd_u32(&r) : out->hit;
	if (kvt_rd_done(&r) || out->load > out->hit)
		return -EBADMSG;
	for (uint32_t i = 0; i < out->n; i++)
		if (out->tiers[i] >= KVT_TIER_COUNT)
			return -EBADMSG;
	return 0;
}

int kvt_proto_rep_load(const void *p, size_t len, uint64_t *ticket, uint32_t *layers)
{
	struct kvt_rd r = { .p = p, .len = len };

	*ticket = kvt_rd_u64(&r);
	*layers = kvt_rd_u32(&r);
	return kvt_rd_done(&r);
}

int kvt_proto_rep_wait(const void *p, size_t len, struct kvt_rep_wait *out)
{
	struct kvt_rd r = { .p = p, .len = len };

	out->result = (int32_t)kvt_rd_u32(&r);
	out->layers_done = kvt_rd_u32(&r);
	out->done = kvt_rd_u32(&r);
	if (kvt_rd_done(&r) || out->done > 1)
		return -EBADMSG;
	return 0;
}

int kvt_proto_rep_region_fault(const void *p, size_t len, struct kvt_region_fault *out)
{
	struct kvt_rd r = { .p = p, .len = len };

	out->kind = kvt_rd_u32(&r);
	out->layer = kvt_rd_u32(&r);
	out->other = kvt_rd_u32(&r);
	kvt_rd_zero(&r, 4);
	out->value = kvt_rd_u64(&r);
	return kvt_rd_done(&r) || out->kind == 0 ? -EBADMSG : 0;
}

/* ---- writer ------------------------------------------------------------ */

void kvt_wr_init(struct kvt_wr *w)
{
	memset(w, 0, sizeof(*w));
}

void kvt_wr_free(struct kvt_wr *w)
{
	free(w->buf);
	kvt_wr_init(w);
}

static uint8_t *wr_room(struct kvt_wr *w, size_t n)
{
	uint8_t *p;
	size_t cap;

	if (w->err)
		return NULL;
	if (n > w->cap - w->len) {
		cap = w->cap ? w->cap : 256;
		while (cap - w->len < n)
			cap *= 2;
		p = realloc(w->buf, cap);
		if (!p) {
			w->err = -ENOMEM;
			return NULL;
		}
		w->buf = p;
		w->cap = cap;
	}
	p = w->buf + w->len;
	w->len += n;
	return p;
}

void kvt_wr_begin_frame(struct kvt_wr *w, const struct kvt_frame_hdr *h)
{
	uint8_t *p;

	w->frame = w->len;
	p = wr_room(w, KVT_PROTO_HDR_BYTES);
	if (p)
		kvt_proto_hdr_encode(h, p);
}

void kvt_wr_begin(struct kvt_wr *w, uint16_t op, uint64_t id, int32_t status)
{
	struct kvt_frame_hdr h = {
		.magic = KVT_PROTO_MAGIC, .version = KVT_PROTO_VERSION,
		.op = op, .status = status, .id = id,
	};

	kvt_wr_begin_frame(w, &h);
}

void kvt_wr_u8(struct kvt_wr *w, uint8_t v)
{
	uint8_t *p = wr_room(w, 1);
	if (p)
		*p = v;
}

void kvt_wr_u16(struct kvt_wr *w, uint16_t v)
{
	uint8_t *p = wr_room(w, 2);
	if (p)
		kvt_put_u16(p, v);
}

void kvt_wr_u32(struct kvt_wr *w, uint32_t v)
{
	uint8_t *p = wr_room(w, 4);
	if (p)
		kvt_put_u32(p, v);
}

void kvt_wr_u64(struct kvt_wr *w, uint64_t v)
{
	uint8_t *p = wr_room(w, 8);
	if (p)
		kvt_put_u64(p, v);
}

void kvt_wr_bytes(struct kvt_wr *w, const void *src, size_t n)
{
	uint8_t *p = wr_room(w, n);
	if (p && n)
		memcpy(p, src, n);
}

int kvt_wr_end(struct kvt_wr *w)
{
	size_t payload;
	int err = w->err;

	if (err) {
		w->err = 0; /* the buffer before this frame is intact */
		w->len = w->frame < w->len ? w->frame : w->len;
		return err;
	}
	payload = w->len - w->frame - KVT_PROTO_HDR_BYTES;
	if (payload > KVT_PROTO_MAX_PAYLOAD) {
		w->len = w->frame;
		return -EMSGSIZE;
	}
	kvt_put_u32(w->buf + w->frame + 8, (uint32_t)payload);
	return 0;
}

/* ---- request encoders -------------------------------------------------- */

int kvt_proto_enc_hello(struct kvt_wr *w, uint64_t id, const char *token,
			const struct kvt_ns_desc *d)
{
	size_t tlen = token ? strlen(token) : 0;
	size_t mlen = strnlen(d->model_id, KVT_MODEL_ID_MAX);

	if (tlen > KVT_PROTO_MAX_TOKEN || mlen == 0 || mlen >= KVT_MODEL_ID_MAX)
		return -EINVAL;
	kvt_wr_begin(w, KVT_OP_HELLO, id, 0);
	kvt_wr_u16(w, KVT_PROTO_VERSION);
	kvt_wr_u16(w, KVT_PROTO_VERSION_MAX);
	kvt_wr_u16(w, (uint16_t)tlen);
	kvt_wr_u16(w, 0);
	kvt_wr_bytes(w, token, tlen);
	kvt_wr_u16(w, (uint16_t)mlen);
	kvt_wr_bytes(w, d->model_id, mlen);
	kvt_wr_u8(w, (uint8_t)d->layout);
	kvt_wr_u8(w, (uint8_t)d->dtype);
	kvt_wr_u16(w, 0);
	kvt_wr_u32(w, d->layers);
	kvt_wr_u32(w, d->kv_heads);
	kvt_wr_u32(w, d->head_dim);
	kvt_wr_u32(w, d->block_tokens);
	kvt_wr_u32(w, d->tp_rank);
	kvt_wr_u32(w, d->tp_size);
	return kvt_wr_end(w);
}

int kvt_proto_enc_register(struct kvt_wr *w, uint64_t id, const struct kvt_req_register *m)
{
	if (m->ipc_len > KVT_PROTO_MAX_IPC)
		return -EINVAL;
	kvt_wr_begin(w, KVT_OP_REGISTER, id, 0);
	kvt_wr_u32(w, m->ns);
	kvt_wr_u32(w, m->kind);
	kvt_wr_u64(w, m->bytes);
	kvt_wr_u64(w, m->offset);
	kvt_wr_u32(w, m->layers);
	kvt_wr_u32(w, m->pages);
	kvt_wr_u64(w, m->layer_stride);
	kvt_wr_u64(w, m->kv_stride);
	kvt_wr_u64(w, m->page_stride);
	kvt_wr_u32(w, m->device);
	kvt_wr_u32(w, m->ipc_len);
	kvt_wr_bytes(w, m->ipc, m->ipc_len);
	return kvt_wr_end(w);
}

int kvt_proto_enc_register_parts(struct kvt_wr *w, uint64_t id, const struct kvt_region *r)
{
	if (r->n_parts == 0 || r->n_parts > KVT_PROTO_MAX_PARTS || r->layers == 0 ||
	    r->layers > KVT_PROTO_MAX_PART_LAYERS || r->ipc_len > KVT_PROTO_MAX_IPC)
		return -EINVAL;
	kvt_wr_begin(w, KVT_OP_REGISTER_PARTS, id, 0);
	kvt_wr_u32(w, r->ns);
	kvt_wr_u32(w, r->kind);
	kvt_wr_u32(w, r->layers);
	kvt_wr_u32(w, r->pages);
	kvt_wr_u64(w, r->kv_stride);
	kvt_wr_u64(w, r->page_stride);
	kvt_wr_u32(w, r->device);
	kvt_wr_u32(w, r->n_parts);
	kvt_wr_u32(w, r->ipc_len);
	kvt_wr_u32(w, 0);
	for (uint32_t i = 0; i < r->n_parts; i++) {
		kvt_wr_u64(w, r->parts[i].offset);
		kvt_wr_u64(w, r->parts[i].bytes);
		kvt_wr_bytes(w, r->parts[i].ipc, r->ipc_len);
	}
	for (uint32_t l = 0; l < r->layers; l++) {
		kvt_wr_u32(w, r->layer[l].part);
		kvt_wr_u32(w, 0);
		kvt_wr_u64(w, r->layer[l].offset);
	}
	return kvt_wr_end(w);
}

void kvt_proto_put_region_fault(struct kvt_wr *w, const struct kvt_region_fault *f)
{
	kvt_wr_u32(w, f->kind);
	kvt_wr_u32(w, f->layer);
	kvt_wr_u32(w, f->other);
	kvt_wr_u32(w, 0);
	kvt_wr_u64(w, f->value);
}

int kvt_proto_enc_keys(struct kvt_wr *w, uint16_t op, uint64_t id, uint32_t ns,
		       const struct kvt_key *keys, uint32_t n)
{
	if (n > KVT_PROTO_MAX_KEYS)
		return -E2BIG;
	kvt_wr_begin(w, op, id, 0);
	kvt_wr_u32(w, ns);
	kvt_wr_u32(w, n);
	kvt_wr_bytes(w, keys, (size_t)n * KVT_KEY_BYTES);
	return kvt_wr_end(w);
}

int kvt_proto_enc_xfer(struct kvt_wr *w, uint16_t op, uint64_t id, uint32_t ns,
		       uint32_t region, const struct kvt_key *parent,
		       const struct kvt_key *keys, const uint32_t *pages, uint32_t n)
{
	return kvt_proto_enc_xfer_flags(w, op, id, ns, region, parent, keys, pages, n, 0);
}

int kvt_proto_enc_xfer_flags(struct kvt_wr *w, uint16_t op, uint64_t id, uint32_t ns,
			     uint32_t region, const struct kvt_key *parent,
			     const struct kvt_key *keys, const uint32_t *pages, uint32_t n,
			     uint32_t flags)
{
	static const struct kvt_key zero;

	if (n > KVT_PROTO_MAX_KEYS)
		return -E2BIG;
	kvt_wr_begin(w, op, id, 0);
	kvt_wr_u32(w, ns);
	kvt_wr_u32(w, region);
	kvt_wr_u32(w, n);
	kvt_wr_u32(w, flags | (parent ? KVT_SAVE_HAS_PARENT : 0));
	kvt_wr_bytes(w, parent ? parent : &zero, KVT_KEY_BYTES);
	kvt_wr_bytes(w, keys, (size_t)n * KVT_KEY_BYTES);
	for (uint32_t i = 0; i < n; i++)
		kvt_wr_u32(w, pages[i]);
	return kvt_wr_end(w);
}

int kvt_proto_enc_wait(struct kvt_wr *w, uint16_t op, uint64_t id, uint64_t ticket,
		       uint32_t layer, uint32_t timeout_ms)
{
	kvt_wr_begin(w, op, id, 0);
	kvt_wr_u64(w, ticket);
	if (op == KVT_OP_WAIT) {
		kvt_wr_u32(w, layer);
		kvt_wr_u32(w, timeout_ms);
	}
	return kvt_wr_end(w);
}

int kvt_proto_enc_prefill(struct kvt_wr *w, uint64_t id, const struct kvt_req_prefill *p)
{
	kvt_wr_begin(w, KVT_OP_PREFILL, id, 0);
	kvt_wr_u32(w, p->ns);
	kvt_wr_u32(w, p->tokens);
	kvt_wr_u64(w, p->ns_elapsed);
	return kvt_wr_end(w);
}

int kvt_proto_enc_blob(struct kvt_wr *w, uint16_t op, uint64_t id, const void *p, uint32_t n)
{
	kvt_wr_begin(w, op, id, 0);
	kvt_wr_bytes(w, p, n);
	return kvt_wr_end(w);
}
