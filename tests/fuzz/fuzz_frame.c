/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target of the frame parser: the input is a byte stream as the daemon
 * would read it from a socket, cut into frames by their headers. Each request
 * is decoded, and each payload is also fed to every reply decoder (the
 * client's side). Built for libFuzzer with clang, and always as a replay
 * program over the seed corpus (fuzz_replay.c). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "transport/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void decode_replies(const uint8_t *p, size_t n)
{
	struct kvt_rep_hello hello;
	struct kvt_rep_lookup lk;
	struct kvt_rep_wait wt;
	uint64_t u64;
	uint32_t u32;
	volatile unsigned sink = 0;

	if (kvt_proto_rep_lookup(p, n, &lk) == 0)
		for (uint32_t i = 0; i < lk.n; i++)
			sink += lk.tiers[i];
	kvt_proto_rep_hello(p, n, &hello);
	kvt_proto_rep_wait(p, n, &wt);
	kvt_proto_rep_u32(p, n, &u32);
	kvt_proto_rep_u64(p, n, &u64);
	kvt_proto_rep_load(p, n, &u64, &u32);
	(void)sink;
}

/* Touch every byte a decoded request points at, so a pointer past the
 * payload is caught by the sanitizer. */
static void touch(const struct kvt_req *req)
{
	volatile uint8_t sink = 0;

	switch (req->hdr.op) {
	case KVT_OP_HELLO:
		for (uint16_t i = 0; i < req->u.hello.token_len; i++)
			sink ^= (uint8_t)req->u.hello.token[i];
		break;
	case KVT_OP_REGISTER:
		for (uint32_t i = 0; i < req->u.reg.ipc_len; i++)
			sink ^= req->u.reg.ipc[i];
		break;
	case KVT_OP_LOOKUP: case KVT_OP_PIN: case KVT_OP_UNPIN: case KVT_OP_REMOVE:
		for (uint32_t i = 0; i < req->u.keys.n; i++)
			sink ^= req->u.keys.keys[i].bytes[15];
		break;
	case KVT_OP_SAVE: case KVT_OP_LOAD:
		for (uint32_t i = 0; i < req->u.xfer.n; i++)
			sink ^= req->u.xfer.keys[i].bytes[15] ^ (uint8_t)kvt_proto_page(&req->u.xfer, i);
		break;
	case KVT_OP_PING:
		for (uint32_t i = 0; i < req->u.blob.len; i++)
			sink ^= req->u.blob.data[i];
		break;
	}
	(void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvt_frame_hdr h;
	struct kvt_req req;

	while (size >= KVT_PROTO_HDR_BYTES) {
		if (kvt_proto_hdr_decode(data, size, &h))
			break; /* the daemon closes the connection here */
		data += KVT_PROTO_HDR_BYTES;
		size -= KVT_PROTO_HDR_BYTES;
		if (h.len > size)
			break; /* truncated: the daemon waits for more */
		if (kvt_proto_req_decode(&h, data, &req) == 0)
			touch(&req);
		decode_replies(data, h.len);
		data += h.len;
		size -= h.len;
	}
	return 0;
}
