/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target of the peer protocol's decoders: the input is a byte stream
 * as a peer server (or client) would read it, cut into frames by their
 * headers; every payload goes through the decoder of its op, and through
 * every other decoder too, since a hostile peer chooses the op. Built for
 * libFuzzer with clang, and always as a replay program over the seed corpus
 * (fuzz_replay.c). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cluster/peer_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void decode_all(uint16_t op, const uint8_t *p, size_t n)
{
	struct kvt_peer_challenge c;
	struct kvt_peer_auth a;
	struct kvt_peer_keys_req q;
	struct kvt_peer_block b;
	struct kvt_peer_lease_rep rep;
	struct kvt_peer_lease_entry e;
	struct kvt_peer_ep ep;
	uint8_t mac[KVT_PEER_MAC_BYTES];
	uint64_t u64;
	uint32_t u32;
	volatile unsigned sink = 0;

	(void)op;
	if (kvt_peer_dec_challenge(p, n, &c) == 0)
		sink += (unsigned)strlen(c.id) + c.nonce[31];
	if (kvt_peer_dec_auth(p, n, &a) == 0)
		sink += (unsigned)strlen(a.id) + a.mac[31];
	for (uint16_t o = KVT_PEER_GET; o <= KVT_PEER_LEASE; o++)
		if (kvt_peer_dec_keys_req(o, p, n, &q) == 0)
			for (uint32_t i = 0; i < q.n; i++)
				sink ^= q.keys[i].bytes[15];
	if (kvt_peer_dec_block(p, n, &b) == 0)
		sink += b.index;
	if (kvt_peer_dec_lease_rep(p, n, &rep) == 0)
		for (uint32_t i = 0; i < rep.n; i++) {
			kvt_peer_lease_entry_at(&rep, i, &e);
			sink ^= (unsigned)e.xxh3;
		}
	kvt_peer_dec_ep(p, n, &ep);
	kvt_peer_dec_mac(p, n, mac);
	kvt_peer_dec_u64(p, n, &u64);
	kvt_peer_dec_u32(p, n, &u32);
	(void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvt_frame_hdr h;

	while (size >= KVT_PROTO_HDR_BYTES) {
		if (kvt_peer_hdr_decode(data, size, &h))
			break; /* the connection is closed here */
		data += KVT_PROTO_HDR_BYTES;
		size -= KVT_PROTO_HDR_BYTES;
		if (h.len > size)
			break;
		decode_all(h.op, data, h.len);
		data += h.len;
		size -= h.len;
	}
	return 0;
}
