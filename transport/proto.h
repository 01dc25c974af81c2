/* SPDX-License-Identifier: Apache-2.0 */
/* The sidecar protocol: binary, length-prefixed, versioned frames between an
 * engine (the client library) and kvtierd, over a Unix stream socket.
 *
 * Every frame is a 24-byte header and `len` payload bytes, all little-endian:
 *
 *   off size field
 *    0   4   magic   "KVT1" (0x3154564b read as LE u32)
 *    4   2   version KVT_PROTO_VERSION
 *    6   2   op      request op; a reply carries op | KVT_OP_REPLY
 *    8   4   len     payload bytes that follow (<= KVT_PROTO_MAX_PAYLOAD)
 *   12   4   status  requests: 0; replies: 0 or a negative errno
 *   16   8   id      request id chosen by the client, echoed by its reply
 *
 * Many requests may be in flight on one connection; replies come in any order
 * and are matched by id. The header's version is the framing's and stays 1;
 * HELLO agrees on the version of the ops (1 to 4, see KVT_PROTO_VERSION_MAX):
 * version 2 adds pushed completions (DONE frames), PREFILL and LOOKUP's plan;
 * version 3 the reuse class of SAVE's blocks (in its flags); version 4
 * REGISTER_PARTS (memory in several parts, a layer table). Payloads are decoded field by field with bounds checks
 * (never cast onto structs), and strictly: a payload must have exactly the size
 * its counts imply, reserved fields must be zero, enums must be known. The
 * decoders only read the buffer; decoded keys and page ids point into it.
 *
 * The payload of each op is documented beside its struct below and in the
 * protocol table of docs/protocol.md. */
#ifndef KVT_TRANSPORT_PROTO_H
#define KVT_TRANSPORT_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/store.h"
#include "transport/region.h"

#define KVT_PROTO_MAGIC 0x3154564bu
#define KVT_PROTO_VERSION 1     /* of the frames (the header's field) */
#define KVT_PROTO_VERSION_MAX 4 /* of the ops, the newest HELLO agrees on */
#define KVT_PROTO_HDR_BYTES 24
#define KVT_PROTO_MAX_PAYLOAD (1u << 20)
#define KVT_PROTO_MAX_KEYS 16384u
#define KVT_PROTO_MAX_TOKEN 256u
#define KVT_PROTO_MAX_IPC 64u
#define KVT_PROTO_MAX_PING 4096u
#define KVT_OP_REPLY 0x8000u

enum kvt_op {
	KVT_OP_HELLO = 1,
	KVT_OP_REGISTER = 2,
	KVT_OP_LOOKUP = 3,
	KVT_OP_SAVE = 4,
	KVT_OP_LOAD = 5,
	KVT_OP_WAIT = 6,
	KVT_OP_POLL = 7,
	KVT_OP_PIN = 8,
	KVT_OP_UNPIN = 9,
	KVT_OP_REMOVE = 10,
	KVT_OP_STATS = 11,
	KVT_OP_PING = 12,
	KVT_OP_PREFILL = 13, /* version 2 */
	KVT_OP_DONE = 14,    /* version 2: pushed by the daemon, never a request */
	KVT_OP_REGISTER_PARTS = 15, /* version 4 */
	KVT_OP_COUNT
};

/* Engine memory kinds of REGISTER. */
enum kvt_mem_kind {
	KVT_MEM_HOST_MEMFD = 1, /* a memfd passed with SCM_RIGHTS on this frame */
	KVT_MEM_CUDA_IPC = 2,   /* a cudaIpcMemHandle_t in the payload */
};

/* SAVE and LOAD flags. The PUSH flags need version 2, the class version 3. */
#define KVT_SAVE_HAS_PARENT 0x1u
#define KVT_SAVE_CLASS_SHIFT 8    /* SAVE: bits 8-11, the blocks' reuse class */
#define KVT_SAVE_CLASS_MASK (0xfu << KVT_SAVE_CLASS_SHIFT) /* (kvtier/types.h;
                                   * 0 = none) */
#define KVT_XFER_PUSH 0x2u        /* push a DONE frame when the ticket finishes;
                                   * it carries the result, and the ticket is gone */
#define KVT_XFER_PUSH_LAYERS 0x4u /* LOAD: a DONE frame as layers land, too */
#define KVT_WAIT_ALL UINT32_MAX     /* WAIT layer: the whole ticket */
#define KVT_WAIT_FOREVER UINT32_MAX /* WAIT timeout_ms */

struct kvt_frame_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t op;
	uint32_t len;
	int32_t status;
	uint64_t id;
};

/* HELLO: u16 min_version, u16 max_version, u16 token_len, u16 0,
 * token[token_len], u16 model_len, model[model_len], u8 layout, u8 dtype, u16 0,
 * u32 layers, kv_heads, head_dim, block_tokens, tp_rank, tp_size. */
struct kvt_req_hello {
	uint16_t min_version, max_version;
	const char *token; /* not NUL-terminated */
	uint16_t token_len;
	struct kvt_ns_desc desc; /* tenant_salt left empty: the daemon sets it */
};

/* REGISTER: u32 ns, u32 kind, u64 bytes, u64 offset, u32 layers, u32 pages,
 * u64 layer_stride, u64 kv_stride, u64 page_stride, u32 device, u32 ipc_len,
 * ipc[ipc_len]. A page is block_tokens tokens of one layer's K (and V at
 * +kv_stride): page p of layer l starts at offset + l*layer_stride + p*page_stride. */
struct kvt_req_register {
	uint32_t ns, kind;
	uint64_t bytes, offset;
	uint32_t layers, pages;
	uint64_t layer_stride, kv_stride, page_stride;
	uint32_t device, ipc_len;
	const uint8_t *ipc;
};

/* REGISTER_PARTS (version 4): u32 ns, u32 kind, u32 layers, u32 pages,
 * u64 kv_stride, u64 page_stride, u32 device, u32 n_parts, u32 ipc_len, u32 0,
 * then per part u64 offset, u64 bytes, ipc[ipc_len] (CUDA; 0 bytes for
 * memfds, which come with the frame, n_parts of them, in part order), then
 * per layer u32 part, u32 0, u64 offset (region.h). At most
 * KVT_PROTO_MAX_PARTS parts and KVT_PROTO_MAX_PART_LAYERS layers. */
#define KVT_PROTO_MAX_PART_LAYERS 1024u
struct kvt_req_register_parts {
	uint32_t ns, kind, layers, pages;
	uint64_t kv_stride, page_stride;
	uint32_t device, n_parts, ipc_len;
	const uint8_t *parts;  /* raw: kvt_proto_reg_part() */
	const uint8_t *layer;  /* raw: kvt_proto_reg_layer() */
};

/* LOOKUP, PIN, UNPIN, REMOVE: u32 ns, u32 n, key[n] (16 bytes each). */
struct kvt_req_keys {
	uint32_t ns, n;
	const struct kvt_key *keys;
};

/* SAVE, LOAD: u32 ns, u32 region, u32 n, u32 flags, parent key (16 bytes),
 * key[n], u32 page[n]. LOAD takes no HAS_PARENT and a zero parent. */
struct kvt_req_xfer {
	uint32_t ns, region, n, flags;
	struct kvt_key parent;
	const struct kvt_key *keys;
	const uint8_t *pages; /* n little-endian u32: kvt_proto_page() */
};

/* WAIT: u64 ticket, u32 layer, u32 timeout_ms. POLL: u64 ticket. */
struct kvt_req_wait {
	uint64_t ticket;
	uint32_t layer, timeout_ms;
};

/* PREFILL: u32 ns, u32 tokens, u64 nanoseconds: the engine computed the
 * prefill of `tokens` tokens in that time (loads it waited for excluded). */
struct kvt_req_prefill {
	uint32_t ns, tokens;
	uint64_t ns_elapsed;
};

/* PING: opaque bytes (<= KVT_PROTO_MAX_PING), echoed. STATS: empty, or a
 * tenant's token (<= KVT_PROTO_MAX_TOKEN bytes) for its own figures too. */
struct kvt_req_blob {
	const uint8_t *data;
	uint32_t len;
};

struct kvt_req {
	struct kvt_frame_hdr hdr;
	union {
		struct kvt_req_hello hello;
		struct kvt_req_register reg;
		struct kvt_req_register_parts parts;
		struct kvt_req_keys keys;
		struct kvt_req_xfer xfer;
		struct kvt_req_wait wait;
		struct kvt_req_prefill prefill;
		struct kvt_req_blob blob;
	} u;
};

/* Replies (payload present when status is 0, except WAIT/POLL whose payload
 * is always present):
 *   HELLO    u16 version, u16 0, u32 ns, u64 block_bytes, salt[16], u32 max_keys
 *   REGISTER u32 region       REGISTER_PARTS u32 region; with -EINVAL for a
 *            layout it refuses: u32 kind, u32 layer, u32 other, u32 0,
 *            u64 value (struct kvt_region_fault), or empty
 *   LOOKUP   u32 hit, u32 n, u8 tier[n]; version 2 appends u32 load: the
 *            leading blocks the plan loads (<= hit), the rest recomputed
 *   SAVE     u64 ticket          LOAD u64 ticket, u32 layers
 *   WAIT     i32 result, u32 layers_done, u32 done   (POLL likewise)
 *   PIN, UNPIN, REMOVE  u32 count
 *   STATS    JSON text           PING  the request's bytes
 *   PREFILL  empty
 * and pushed, unasked, for a SAVE/LOAD with a PUSH flag: DONE (op
 * KVT_OP_DONE | KVT_OP_REPLY, id = the SAVE/LOAD request's id, status 0 or
 * the operation's errno) with the WAIT reply's payload, layers_done a
 * watermark (layers that land together share a frame); done = 1 ends it. */
struct kvt_rep_hello {
	uint16_t version;
	uint32_t ns;
	uint64_t block_bytes;
	struct kvt_key salt;
	uint32_t max_keys;
};

struct kvt_rep_lookup {
	uint32_t hit, n;
	const uint8_t *tiers;
	uint32_t load;          /* version 2; = hit from a version 1 reply */
};

struct kvt_rep_wait {
	int32_t result;     /* blocks saved/loaded, or a negative errno */
	uint32_t layers_done;
	uint32_t done;
};

/* "HELLO", ... or NULL for an unknown op (the reply bit is ignored). */
const char *kvt_op_name(unsigned op);

/* Decode a frame header from buf[0..len). Returns 0, -EAGAIN when fewer than
 * KVT_PROTO_HDR_BYTES are given, -EPROTO for a wrong magic,
 * -EPROTONOSUPPORT for another version, -EMSGSIZE for a payload longer than
 * KVT_PROTO_MAX_PAYLOAD. On error the fields read so far are in *h. */
int kvt_proto_hdr_decode(const void *buf, size_t len, struct kvt_frame_hdr *h);

/* kvt_proto_hdr_decode for another protocol in the same framing (the peer
 * protocol): the magic and version it must carry. */
int kvt_frame_hdr_decode(const void *buf, size_t len, uint32_t magic, uint16_t version,
			 struct kvt_frame_hdr *h);

/* Encode a header into out[0..KVT_PROTO_HDR_BYTES). */
void kvt_proto_hdr_encode(const struct kvt_frame_hdr *h, void *out);

/* Decode the payload of request h into req (req->hdr = *h). Returns 0,
 * -EOPNOTSUPP for an unknown op or a reply op, -EBADMSG for a payload of the
 * wrong size, nonzero reserved fields, unknown enums or out-of-range counts.
 * req points into payload, which must outlive it. */
int kvt_proto_req_decode(const struct kvt_frame_hdr *h, const void *payload,
			 struct kvt_req *req);

/* Part i and layer l of a REGISTER_PARTS request. */
struct kvt_region_part kvt_proto_reg_part(const struct kvt_req_register_parts *r, uint32_t i);
struct kvt_region_layer kvt_proto_reg_layer(const struct kvt_req_register_parts *r, uint32_t l);

/* Page id i of a SAVE/LOAD request. */
uint32_t kvt_proto_page(const struct kvt_req_xfer *x, uint32_t i);

/* Reply decoders for the client: 0 or -EBADMSG. */
int kvt_proto_rep_hello(const void *p, size_t len, struct kvt_rep_hello *out);
int kvt_proto_rep_u32(const void *p, size_t len, uint32_t *out);
int kvt_proto_rep_u64(const void *p, size_t len, uint64_t *out);
/* Either form of the LOOKUP reply (version 2's has the plan's count). */
int kvt_proto_rep_lookup(const void *p, size_t len, struct kvt_rep_lookup *out);
int kvt_proto_rep_load(const void *p, size_t len, uint64_t *ticket, uint32_t *layers);
int kvt_proto_rep_wait(const void *p, size_t len, struct kvt_rep_wait *out);
/* The fault of a REGISTER_PARTS -EINVAL reply: 0, or -EBADMSG (none sent). */
int kvt_proto_rep_region_fault(const void *p, size_t len, struct kvt_region_fault *out);

/* ---- encoding ---------------------------------------------------------- */

/* A growable frame buffer. Appends never fail: an allocation failure sets err
 * and later calls do nothing, so a caller checks once, at kvt_wr_end. */
struct kvt_wr {
	uint8_t *buf;
	size_t len, cap;
	size_t frame; /* offset of the frame being written */
	int err;
};

void kvt_wr_init(struct kvt_wr *w);
void kvt_wr_free(struct kvt_wr *w);
/* Start a frame at the end of the buffer. */
void kvt_wr_begin(struct kvt_wr *w, uint16_t op, uint64_t id, int32_t status);
/* Start a frame with the header h (its len is patched by kvt_wr_end): for
 * other protocols in the same framing, such as the peer protocol. */
void kvt_wr_begin_frame(struct kvt_wr *w, const struct kvt_frame_hdr *h);
void kvt_wr_u8(struct kvt_wr *w, uint8_t v);
void kvt_wr_u16(struct kvt_wr *w, uint16_t v);
void kvt_wr_u32(struct kvt_wr *w, uint32_t v);
void kvt_wr_u64(struct kvt_wr *w, uint64_t v);
void kvt_wr_bytes(struct kvt_wr *w, const void *p, size_t n);
/* Finish the frame begun last (patches its length). Returns 0, -ENOMEM, or
 * -EMSGSIZE for a payload over KVT_PROTO_MAX_PAYLOAD (the frame is dropped). */
int kvt_wr_end(struct kvt_wr *w);

/* Request encoders used by the client, appending one whole frame. */
/* HELLO offering versions 1 to KVT_PROTO_VERSION_MAX. */
int kvt_proto_enc_hello(struct kvt_wr *w, uint64_t id, const char *token,
			const struct kvt_ns_desc *desc);
int kvt_proto_enc_register(struct kvt_wr *w, uint64_t id, const struct kvt_req_register *r);
/* REGISTER_PARTS of r (r->parts[i].ipc: r->ipc_len bytes each, CUDA). */
int kvt_proto_enc_register_parts(struct kvt_wr *w, uint64_t id, const struct kvt_region *r);
/* The body of a REGISTER_PARTS -EINVAL reply (after kvt_wr_begin). */
void kvt_proto_put_region_fault(struct kvt_wr *w, const struct kvt_region_fault *f);
int kvt_proto_enc_keys(struct kvt_wr *w, uint16_t op, uint64_t id, uint32_t ns,
		       const struct kvt_key *keys, uint32_t n);
int kvt_proto_enc_xfer(struct kvt_wr *w, uint16_t op, uint64_t id, uint32_t ns,
		       uint32_t region, const struct kvt_key *parent,
		       const struct kvt_key *keys, const uint32_t *pages, uint32_t n);
/* The same with flags KVT_XFER_PUSH* (HAS_PARENT is set from parent). */
int kvt_proto_enc_xfer_flags(struct kvt_wr *w, uint16_t op, uint64_t id, uint32_t ns,
			     uint32_t region, const struct kvt_key *parent,
			     const struct kvt_key *keys, const uint32_t *pages, uint32_t n,
			     uint32_t flags);
int kvt_proto_enc_wait(struct kvt_wr *w, uint16_t op, uint64_t id, uint64_t ticket,
		       uint32_t layer, uint32_t timeout_ms);
int kvt_proto_enc_prefill(struct kvt_wr *w, uint64_t id, const struct kvt_req_prefill *p);
int kvt_proto_enc_blob(struct kvt_wr *w, uint16_t op, uint64_t id, const void *p, uint32_t n);

#endif /* KVT_TRANSPORT_PROTO_H */
