/* SPDX-License-Identifier: Apache-2.0 */
/* The frame codec: every request round-trips, and the decoder refuses every
 * truncation, extension, unknown enum and nonzero reserved field. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "helpers.h"
#include "transport/proto.h"

static void make_desc(struct kvt_ns_desc *d)
{
	memset(d, 0, sizeof(*d));
	d->size = sizeof(*d);
	strcpy(d->model_id, "Qwen/Qwen3-8B");
	d->layout = KVT_LAYOUT_PAGED_KV;
	d->dtype = KVT_DTYPE_BF16;
	d->layers = 36;
	d->kv_heads = 8;
	d->head_dim = 128;
	d->block_tokens = 16;
	d->tp_rank = 0;
	d->tp_size = 1;
}

/* Decode the single frame of w (header and payload). */
static int decode_one(const struct kvt_wr *w, struct kvt_req *req)
{
	struct kvt_frame_hdr h;
	int err = kvt_proto_hdr_decode(w->buf, w->len, &h);

	if (err)
		return err;
	assert_int_equal(h.len + KVT_PROTO_HDR_BYTES, w->len);
	return kvt_proto_req_decode(&h, w->buf + KVT_PROTO_HDR_BYTES, req);
}

/* Decode the frame of w with its payload cut to `len` bytes (header patched). */
static int decode_resized(const struct kvt_wr *w, size_t len, struct kvt_req *req)
{
	struct kvt_frame_hdr h;
	uint8_t *copy = malloc(len + 1);
	int err;

	assert_int_equal(kvt_proto_hdr_decode(w->buf, w->len, &h), 0);
	memset(copy, 0, len + 1);
	memcpy(copy, w->buf + KVT_PROTO_HDR_BYTES, len < h.len ? len : h.len);
	h.len = (uint32_t)len;
	err = kvt_proto_req_decode(&h, copy, req);
	free(copy);
	return err;
}

/* Every shorter and one longer payload is refused. */
static void assert_strict_length(const struct kvt_wr *w)
{
	size_t full = w->len - KVT_PROTO_HDR_BYTES;
	struct kvt_req req;

	for (size_t len = 0; len < full; len++)
		assert_int_equal(decode_resized(w, len, &req), -EBADMSG);
	assert_int_equal(decode_resized(w, full + 1, &req), -EBADMSG);
	assert_int_equal(decode_resized(w, full, &req), 0);
}

static void header_round_trip_and_refusals(void **state)
{
	struct kvt_frame_hdr h = { KVT_PROTO_MAGIC, KVT_PROTO_VERSION, KVT_OP_PING | KVT_OP_REPLY,
				   7, -EIO, 0x1122334455667788ull }, g;
	uint8_t b[KVT_PROTO_HDR_BYTES];

	kvt_proto_hdr_encode(&h, b);
	assert_int_equal(b[0], 'K');
	assert_int_equal(b[3], '1');
	assert_int_equal(kvt_proto_hdr_decode(b, sizeof(b), &g), 0);
	assert_memory_equal(&h, &g, sizeof(h));
	assert_int_equal(kvt_proto_hdr_decode(b, sizeof(b) - 1, &g), -EAGAIN);

	h.magic ^= 1;
	kvt_proto_hdr_encode(&h, b);
	assert_int_equal(kvt_proto_hdr_decode(b, sizeof(b), &g), -EPROTO);
	h.magic = KVT_PROTO_MAGIC;
	h.version = 2;
	kvt_proto_hdr_encode(&h, b);
	assert_int_equal(kvt_proto_hdr_decode(b, sizeof(b), &g), -EPROTONOSUPPORT);
	h.version = KVT_PROTO_VERSION;
	h.len = KVT_PROTO_MAX_PAYLOAD + 1;
	kvt_proto_hdr_encode(&h, b);
	assert_int_equal(kvt_proto_hdr_decode(b, sizeof(b), &g), -EMSGSIZE);
	h.len = UINT32_MAX;
	kvt_proto_hdr_encode(&h, b);
	assert_int_equal(kvt_proto_hdr_decode(b, sizeof(b), &g), -EMSGSIZE);
}

static void hello_round_trip(void **state)
{
	struct kvt_ns_desc d;
	struct kvt_wr w;
	struct kvt_req req;

	make_desc(&d);
	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_hello(&w, 42, "s3cret", &d), 0);
	assert_int_equal(decode_one(&w, &req), 0);
	assert_int_equal(req.hdr.op, KVT_OP_HELLO);
	assert_int_equal(req.hdr.id, 42);
	assert_int_equal(req.u.hello.token_len, 6);
	assert_memory_equal(req.u.hello.token, "s3cret", 6);
	assert_string_equal(req.u.hello.desc.model_id, "Qwen/Qwen3-8B");
	assert_int_equal(req.u.hello.desc.layers, 36);
	assert_int_equal(req.u.hello.desc.kv_heads, 8);
	assert_int_equal(req.u.hello.desc.head_dim, 128);
	assert_int_equal(req.u.hello.desc.block_tokens, 16);
	assert_int_equal(req.u.hello.desc.tenant_salt_len, 0);
	assert_strict_length(&w);
	kvt_wr_free(&w);
}

static void hello_refuses_bad_descriptors(void **state)
{
	struct kvt_ns_desc d;
	struct kvt_wr w;
	struct kvt_req req;
	struct { const char *what; void (*set)(struct kvt_ns_desc *); } cases[] = {
		{ "layout", NULL }, { "dtype", NULL }, { "tp", NULL },
		{ "zero layers", NULL }, { "mla heads", NULL }, { "huge", NULL },
	};

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		make_desc(&d);
		switch (c) {
		case 0: d.layout = 9; break;
		case 1: d.dtype = 99; break;
		case 2: d.tp_rank = 2; d.tp_size = 2; break;
		case 3: d.layers = 0; break;
		case 4: d.layout = KVT_LAYOUT_MLA; d.kv_heads = 8; break;
		case 5: d.head_dim = 1u << 20; d.layers = 1u << 12; break;
		}
		kvt_wr_init(&w);
		assert_int_equal(kvt_proto_enc_hello(&w, 1, "", &d), 0);
		if (decode_one(&w, &req) != -EBADMSG)
			fail_msg("descriptor with bad %s accepted", cases[c].what);
		kvt_wr_free(&w);
	}

	/* a control character in the model id */
	make_desc(&d);
	d.model_id[3] = '\n';
	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_hello(&w, 1, "", &d), 0);
	assert_int_equal(decode_one(&w, &req), -EBADMSG);
	/* a nonzero reserved field (bytes 6..7 of the payload) */
	make_desc(&d);
	kvt_wr_free(&w);
	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_hello(&w, 1, "", &d), 0);
	w.buf[KVT_PROTO_HDR_BYTES + 6] = 1;
	assert_int_equal(decode_one(&w, &req), -EBADMSG);
	kvt_wr_free(&w);
}

static void register_round_trip(void **state)
{
	struct kvt_req_register r = {
		.ns = 3, .kind = KVT_MEM_HOST_MEMFD, .bytes = 1 << 20, .offset = 4096,
		.layers = 4, .pages = 16, .layer_stride = 65536, .kv_stride = 32768,
		.page_stride = 2048,
	};
	uint8_t ipc[64];
	struct kvt_wr w;
	struct kvt_req req;

	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_register(&w, 9, &r), 0);
	assert_int_equal(decode_one(&w, &req), 0);
	assert_int_equal(req.u.reg.ns, 3);
	assert_int_equal(req.u.reg.bytes, 1 << 20);
	assert_int_equal(req.u.reg.offset, 4096);
	assert_int_equal(req.u.reg.pages, 16);
	assert_int_equal(req.u.reg.layer_stride, 65536);
	assert_int_equal(req.u.reg.kv_stride, 32768);
	assert_int_equal(req.u.reg.page_stride, 2048);
	assert_strict_length(&w);
	kvt_wr_free(&w);

	/* an IPC handle belongs to CUDA memory only, and CUDA memory needs one */
	memset(ipc, 0xab, sizeof(ipc));
	r.ipc = ipc;
	r.ipc_len = 64;
	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_register(&w, 9, &r), 0);
	assert_int_equal(decode_one(&w, &req), -EBADMSG);
	kvt_wr_free(&w);
	r.kind = KVT_MEM_CUDA_IPC;
	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_register(&w, 9, &r), 0);
	assert_int_equal(decode_one(&w, &req), 0);
	assert_memory_equal(req.u.reg.ipc, ipc, 64);
	kvt_wr_free(&w);
	r.kind = 7;
	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_register(&w, 9, &r), 0);
	assert_int_equal(decode_one(&w, &req), -EBADMSG);
	kvt_wr_free(&w);
}

/* REGISTER_PARTS: parts and the layer table come back as sent; the decoder
 * is strict about counts, reserved fields and kinds. */
static void register_parts_round_trip(void **state)
{
	struct kvt_region_part parts[2] = { { 0, 8192, NULL }, { 4096, 65536, NULL } };
	struct kvt_region_layer layer[3] = { { 1, 640 }, { 0, 128 }, { 1, 32768 } };
	struct kvt_region r = { .ns = 2, .kind = KVT_MEM_HOST_MEMFD, .layers = 3, .pages = 8,
				.n_parts = 2, .kv_stride = 256, .page_stride = 512,
				.parts = parts, .layer = layer };
	struct kvt_region_fault f = { KVT_REGION_PAST_PART, 2, 1, 99999 }, g;
	struct kvt_wr w;
	struct kvt_req req;

	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_register_parts(&w, 4, &r), 0);
	assert_int_equal(decode_one(&w, &req), 0);
	assert_int_equal(req.u.parts.ns, 2);
	assert_int_equal(req.u.parts.n_parts, 2);
	assert_int_equal(req.u.parts.layers, 3);
	assert_int_equal(req.u.parts.kv_stride, 256);
	assert_int_equal(req.u.parts.page_stride, 512);
	assert_int_equal(kvt_proto_reg_part(&req.u.parts, 1).offset, 4096);
	assert_int_equal(kvt_proto_reg_part(&req.u.parts, 1).bytes, 65536);
	assert_int_equal(kvt_proto_reg_layer(&req.u.parts, 0).part, 1);
	assert_int_equal(kvt_proto_reg_layer(&req.u.parts, 2).offset, 32768);
	assert_strict_length(&w);
	/* the reserved word of a layer entry */
	w.buf[w.len - 16 + 4] = 1;
	assert_int_equal(decode_one(&w, &req), -EBADMSG);
	kvt_wr_free(&w);
	/* no parts, or more than the protocol takes */
	r.n_parts = 0;
	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_register_parts(&w, 4, &r), -EINVAL);
	kvt_wr_free(&w);
	r.n_parts = KVT_PROTO_MAX_PARTS + 1;
	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_register_parts(&w, 4, &r), -EINVAL);
	kvt_wr_free(&w);
	/* CUDA parts carry handles, memfds none */
	r.n_parts = 2;
	r.kind = KVT_MEM_CUDA_IPC;
	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_register_parts(&w, 4, &r), 0);
	assert_int_equal(decode_one(&w, &req), -EBADMSG);
	kvt_wr_free(&w);

	/* the fault of a refusal */
	kvt_wr_init(&w);
	kvt_wr_begin(&w, KVT_OP_REGISTER_PARTS | KVT_OP_REPLY, 4, -EINVAL);
	kvt_proto_put_region_fault(&w, &f);
	assert_int_equal(kvt_wr_end(&w), 0);
	assert_int_equal(kvt_proto_rep_region_fault(w.buf + KVT_PROTO_HDR_BYTES,
						    w.len - KVT_PROTO_HDR_BYTES, &g), 0);
	assert_true(g.kind == f.kind && g.layer == f.layer && g.other == f.other &&
		    g.value == f.value);
	assert_int_equal(kvt_proto_rep_region_fault(w.buf + KVT_PROTO_HDR_BYTES, 8, &g), -EBADMSG);
	kvt_wr_free(&w);
}

static void keys_and_xfer_round_trip(void **state)
{
	struct kvt_key keys[5], parent;
	uint32_t pages[5] = { 7, 0, 65535, 1u << 31, 3 };
	struct kvt_wr w;
	struct kvt_req req;
	static const uint16_t key_ops[] = { KVT_OP_LOOKUP, KVT_OP_PIN, KVT_OP_UNPIN, KVT_OP_REMOVE };

	kvt_test_fill(keys, sizeof(keys), 5);
	kvt_test_fill(&parent, sizeof(parent), 6);
	for (size_t o = 0; o < 4; o++) {
		kvt_wr_init(&w);
		assert_int_equal(kvt_proto_enc_keys(&w, key_ops[o], 100 + o, 2, keys, 5), 0);
		assert_int_equal(decode_one(&w, &req), 0);
		assert_int_equal(req.hdr.op, key_ops[o]);
		assert_int_equal(req.u.keys.ns, 2);
		assert_int_equal(req.u.keys.n, 5);
		assert_memory_equal(req.u.keys.keys, keys, sizeof(keys));
		assert_strict_length(&w);
		kvt_wr_free(&w);
	}

	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_xfer(&w, KVT_OP_SAVE, 1, 2, 3, &parent, keys, pages, 5), 0);
	assert_int_equal(decode_one(&w, &req), 0);
	assert_int_equal(req.u.xfer.flags, KVT_SAVE_HAS_PARENT);
	assert_memory_equal(&req.u.xfer.parent, &parent, sizeof(parent));
	assert_memory_equal(req.u.xfer.keys, keys, sizeof(keys));
	for (uint32_t i = 0; i < 5; i++)
		assert_int_equal(kvt_proto_page(&req.u.xfer, i), pages[i]);
	assert_strict_length(&w);
	kvt_wr_free(&w);

	/* LOAD takes no parent */
	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_xfer(&w, KVT_OP_LOAD, 1, 2, 3, NULL, keys, pages, 5), 0);
	assert_int_equal(decode_one(&w, &req), 0);
	assert_strict_length(&w);
	kvt_wr_free(&w);
	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_xfer(&w, KVT_OP_LOAD, 1, 2, 3, &parent, keys, pages, 5), 0);
	assert_int_equal(decode_one(&w, &req), -EBADMSG);
	kvt_wr_free(&w);
	/* nor zero keys */
	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_xfer(&w, KVT_OP_SAVE, 1, 2, 3, NULL, keys, pages, 0), 0);
	assert_int_equal(decode_one(&w, &req), -EBADMSG);
	kvt_wr_free(&w);
	/* pushed completions: both flags on a LOAD, the whole-ticket one on a
	 * SAVE, no other bit */
	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_xfer_flags(&w, KVT_OP_LOAD, 1, 2, 3, NULL, keys, pages, 5,
						  KVT_XFER_PUSH | KVT_XFER_PUSH_LAYERS), 0);
	assert_int_equal(decode_one(&w, &req), 0);
	assert_int_equal(req.u.xfer.flags, KVT_XFER_PUSH | KVT_XFER_PUSH_LAYERS);
	kvt_wr_free(&w);
	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_xfer_flags(&w, KVT_OP_SAVE, 1, 2, 3, &parent, keys, pages, 5,
						  KVT_XFER_PUSH), 0);
	assert_int_equal(decode_one(&w, &req), 0);
	assert_int_equal(req.u.xfer.flags, KVT_XFER_PUSH | KVT_SAVE_HAS_PARENT);
	kvt_wr_free(&w);
	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_xfer_flags(&w, KVT_OP_SAVE, 1, 2, 3, NULL, keys, pages, 5,
						  KVT_XFER_PUSH_LAYERS), 0);
	assert_int_equal(decode_one(&w, &req), -EBADMSG);
	kvt_wr_free(&w);
	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_xfer_flags(&w, KVT_OP_LOAD, 1, 2, 3, NULL, keys, pages, 5,
						  0x8), 0);
	assert_int_equal(decode_one(&w, &req), -EBADMSG);
	kvt_wr_free(&w);
	/* PREFILL: ns, tokens, nanoseconds; DONE is never a request */
	kvt_wr_init(&w);
	{
		struct kvt_req_prefill pf = { .ns = 2, .tokens = 512, .ns_elapsed = 123456789 };

		assert_int_equal(kvt_proto_enc_prefill(&w, 9, &pf), 0);
	}
	assert_int_equal(decode_one(&w, &req), 0);
	assert_int_equal(req.u.prefill.ns, 2);
	assert_int_equal(req.u.prefill.tokens, 512);
	assert_int_equal(req.u.prefill.ns_elapsed, 123456789);
	assert_strict_length(&w);
	kvt_wr_free(&w);
	kvt_wr_init(&w);
	kvt_wr_begin(&w, KVT_OP_DONE, 1, 0);
	kvt_wr_end(&w);
	assert_int_equal(decode_one(&w, &req), -EOPNOTSUPP);
	kvt_wr_free(&w);
}

static void counts_that_lie_are_refused(void **state)
{
	struct kvt_key keys[2] = { 0 };
	struct kvt_wr w;
	struct kvt_req req;

	/* n says 0xffffffff keys but the payload holds two */
	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_keys(&w, KVT_OP_LOOKUP, 1, 0, keys, 2), 0);
	memset(w.buf + KVT_PROTO_HDR_BYTES + 4, 0xff, 4);
	assert_int_equal(decode_one(&w, &req), -EBADMSG);
	/* n = 3 with room for two */
	w.buf[KVT_PROTO_HDR_BYTES + 4] = 3;
	memset(w.buf + KVT_PROTO_HDR_BYTES + 5, 0, 3);
	assert_int_equal(decode_one(&w, &req), -EBADMSG);
	kvt_wr_free(&w);
	assert_int_equal(kvt_proto_enc_keys(&w, KVT_OP_LOOKUP, 1, 0, keys, KVT_PROTO_MAX_KEYS + 1),
			 -E2BIG);
}

static void wait_poll_stats_ping(void **state)
{
	struct kvt_wr w;
	struct kvt_req req;
	struct kvt_frame_hdr h;

	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_wait(&w, KVT_OP_WAIT, 5, 77, 3, 1000), 0);
	assert_int_equal(decode_one(&w, &req), 0);
	assert_int_equal(req.u.wait.ticket, 77);
	assert_int_equal(req.u.wait.layer, 3);
	assert_int_equal(req.u.wait.timeout_ms, 1000);
	assert_strict_length(&w);
	kvt_wr_free(&w);

	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_wait(&w, KVT_OP_POLL, 5, 78, 0, 0), 0);
	assert_int_equal(decode_one(&w, &req), 0);
	assert_int_equal(req.u.wait.ticket, 78);
	assert_int_equal(req.u.wait.layer, KVT_WAIT_ALL);
	assert_strict_length(&w);
	kvt_wr_free(&w);

	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_blob(&w, KVT_OP_STATS, 5, NULL, 0), 0);
	assert_int_equal(decode_one(&w, &req), 0);
	assert_int_equal(req.u.blob.len, 0);
	/* a tenant's token, up to KVT_PROTO_MAX_TOKEN bytes, and no longer */
	assert_int_equal(decode_resized(&w, KVT_PROTO_MAX_TOKEN, &req), 0);
	assert_int_equal(req.u.blob.len, KVT_PROTO_MAX_TOKEN);
	assert_int_equal(decode_resized(&w, KVT_PROTO_MAX_TOKEN + 1, &req), -EBADMSG);
	kvt_wr_free(&w);

	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_blob(&w, KVT_OP_STATS, 5, "ta", 2), 0);
	assert_int_equal(decode_one(&w, &req), 0);
	assert_int_equal(req.u.blob.len, 2);
	assert_memory_equal(req.u.blob.data, "ta", 2);
	kvt_wr_free(&w);

	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_blob(&w, KVT_OP_PING, 5, "hello", 5), 0);
	assert_int_equal(decode_one(&w, &req), 0);
	assert_int_equal(req.u.blob.len, 5);
	assert_memory_equal(req.u.blob.data, "hello", 5);
	assert_int_equal(decode_resized(&w, KVT_PROTO_MAX_PING + 1, &req), -EBADMSG);
	kvt_wr_free(&w);

	/* unknown ops, replies sent as requests, and requests carrying a status */
	kvt_wr_init(&w);
	kvt_wr_begin(&w, 99, 1, 0);
	assert_int_equal(kvt_wr_end(&w), 0);
	assert_int_equal(decode_one(&w, &req), -EOPNOTSUPP);
	kvt_wr_free(&w);
	kvt_wr_init(&w);
	kvt_wr_begin(&w, KVT_OP_PING | KVT_OP_REPLY, 1, 0);
	assert_int_equal(kvt_wr_end(&w), 0);
	assert_int_equal(decode_one(&w, &req), -EOPNOTSUPP);
	kvt_wr_free(&w);
	kvt_wr_init(&w);
	kvt_wr_begin(&w, KVT_OP_PING, 1, -5);
	assert_int_equal(kvt_wr_end(&w), 0);
	assert_int_equal(kvt_proto_hdr_decode(w.buf, w.len, &h), 0);
	assert_int_equal(kvt_proto_req_decode(&h, w.buf + KVT_PROTO_HDR_BYTES, &req), -EBADMSG);
	kvt_wr_free(&w);
}

static void replies_decode_strictly(void **state)
{
	struct kvt_wr w;
	struct kvt_rep_hello hello;
	struct kvt_rep_lookup lk;
	struct kvt_rep_wait wt;
	uint8_t *p;

	kvt_wr_init(&w);
	kvt_wr_u16(&w, 1);
	kvt_wr_u16(&w, 0);
	kvt_wr_u32(&w, 5);
	kvt_wr_u64(&w, 4096);
	kvt_wr_bytes(&w, "0123456789abcdef", 16);
	kvt_wr_u32(&w, 1000);
	assert_int_equal(kvt_proto_rep_hello(w.buf, w.len, &hello), 0);
	assert_int_equal(hello.ns, 5);
	assert_int_equal(hello.block_bytes, 4096);
	assert_memory_equal(hello.salt.bytes, "0123456789abcdef", 16);
	assert_int_equal(hello.max_keys, 1000);
	assert_int_equal(kvt_proto_rep_hello(w.buf, w.len - 1, &hello), -EBADMSG);
	kvt_wr_free(&w);

	kvt_wr_init(&w);
	kvt_wr_u32(&w, 2);
	kvt_wr_u32(&w, 3);
	kvt_wr_u8(&w, KVT_TIER_DRAM);
	kvt_wr_u8(&w, KVT_TIER_SSD);
	kvt_wr_u8(&w, KVT_TIER_NONE);
	assert_int_equal(kvt_proto_rep_lookup(w.buf, w.len, &lk), 0);
	assert_int_equal(lk.hit, 2);
	assert_int_equal(lk.tiers[1], KVT_TIER_SSD);
	assert_int_equal(lk.load, 2); /* version 1's: the plan is the stored count */
	p = w.buf;
	p[8] = 200; /* no such tier */
	assert_int_equal(kvt_proto_rep_lookup(w.buf, w.len, &lk), -EBADMSG);
	p[8] = KVT_TIER_DRAM;
	p[0] = 4; /* more hits than keys */
	assert_int_equal(kvt_proto_rep_lookup(w.buf, w.len, &lk), -EBADMSG);
	p[0] = 2;
	/* version 2's appends the plan's count, at most the hits */
	kvt_wr_u32(&w, 1);
	assert_int_equal(kvt_proto_rep_lookup(w.buf, w.len, &lk), 0);
	assert_int_equal(lk.hit, 2);
	assert_int_equal(lk.load, 1);
	p = w.buf;
	p[w.len - 4] = 3;
	assert_int_equal(kvt_proto_rep_lookup(w.buf, w.len, &lk), -EBADMSG);
	kvt_wr_u8(&w, 0); /* neither form's size */
	assert_int_equal(kvt_proto_rep_lookup(w.buf, w.len, &lk), -EBADMSG);
	kvt_wr_free(&w);

	kvt_wr_init(&w);
	kvt_wr_u32(&w, (uint32_t)-ENOENT);
	kvt_wr_u32(&w, 0);
	kvt_wr_u32(&w, 1);
	assert_int_equal(kvt_proto_rep_wait(w.buf, w.len, &wt), 0);
	assert_int_equal(wt.result, -ENOENT);
	assert_int_equal(wt.done, 1);
	w.buf[8] = 2;
	assert_int_equal(kvt_proto_rep_wait(w.buf, w.len, &wt), -EBADMSG);
	kvt_wr_free(&w);
}

/* Random corruptions of valid frames: the decoder never reads out of bounds
 * (ASan watches), and whatever it accepts re-encodes to the same bytes. */
static void random_corruptions_never_crash(void **state)
{
	uint64_t s = kvt_test_seed();
	struct kvt_ns_desc d;
	struct kvt_key keys[8];
	uint32_t pages[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	struct kvt_wr w, again;
	struct kvt_req req;
	struct kvt_frame_hdr h;
	int accepted = 0;

	make_desc(&d);
	kvt_test_fill(keys, sizeof(keys), s);
	for (int iter = 0; iter < 20000; iter++) {
		kvt_wr_init(&w);
		switch (iter % 4) {
		case 0: kvt_proto_enc_hello(&w, iter, "tok", &d); break;
		case 1: kvt_proto_enc_keys(&w, KVT_OP_LOOKUP, iter, 1, keys, 8); break;
		case 2: kvt_proto_enc_xfer(&w, KVT_OP_SAVE, iter, 1, 0, keys, keys + 1, pages, 7); break;
		case 3: kvt_proto_enc_wait(&w, KVT_OP_WAIT, iter, 9, 1, 2); break;
		}
		for (int flips = 1 + (int)(kvt_test_rand(&s) % 4); flips > 0; flips--) {
			size_t at = kvt_test_rand(&s) % w.len;
			w.buf[at] ^= (uint8_t)(1u << (kvt_test_rand(&s) % 8));
		}
		if (kvt_proto_hdr_decode(w.buf, w.len, &h) == 0 &&
		    h.len <= w.len - KVT_PROTO_HDR_BYTES &&
		    kvt_proto_req_decode(&h, w.buf + KVT_PROTO_HDR_BYTES, &req) == 0) {
			accepted++;
			kvt_wr_init(&again);
			if (h.op == KVT_OP_LOOKUP)
				kvt_proto_enc_keys(&again, h.op, h.id, req.u.keys.ns,
						   req.u.keys.keys, req.u.keys.n);
			else if (h.op == KVT_OP_WAIT)
				kvt_proto_enc_wait(&again, h.op, h.id, req.u.wait.ticket,
						   req.u.wait.layer, req.u.wait.timeout_ms);
			if (again.len) {
				assert_int_equal(again.len, h.len + KVT_PROTO_HDR_BYTES);
				assert_memory_equal(again.buf, w.buf, again.len);
			}
			kvt_wr_free(&again);
		}
		kvt_wr_free(&w);
	}
	/* flips in keys and tokens are legal, so some corrupt frames must pass */
	assert_true(accepted > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(header_round_trip_and_refusals),
		cmocka_unit_test(hello_round_trip),
		cmocka_unit_test(hello_refuses_bad_descriptors),
		cmocka_unit_test(register_round_trip),
		cmocka_unit_test(register_parts_round_trip),
		cmocka_unit_test(keys_and_xfer_round_trip),
		cmocka_unit_test(counts_that_lie_are_refused),
		cmocka_unit_test(wait_poll_stats_ping),
		cmocka_unit_test(replies_decode_strictly),
		cmocka_unit_test(random_corruptions_never_crash),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
