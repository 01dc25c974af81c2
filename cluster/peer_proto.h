/* SPDX-License-Identifier: Apache-2.0 */
/* The peer protocol: frames between kvtierd nodes over TCP, for block
 * transfers, leases of DRAM slots for RDMA reads, and RDMA queue-pair setup.
 *
 * Frames have the sidecar protocol's 24-byte header (proto.h) with their own
 * magic "KVP1" and version; payloads are little-endian, at most
 * KVT_PROTO_MAX_PAYLOAD bytes, decoded field by field and strictly (exact
 * size, reserved fields zero, counts bounded, enums known), like proto.c.
 *
 * A connection starts with the owner's CHALLENGE and the reader's AUTH (see
 * peer_auth.h); nothing else is served before. Then the reader sends
 * requests, the owner answers each in order:
 *
 *   GET      salt[16] u64 block_bytes u32 n u32 0 key[n]
 *            -> n BLOCK frames (op GET|REPLY) in key order, each a 32-byte
 *               meta  u32 index u32 0 key[16] u64 data_len
 *               followed, outside the frame, when the frame's status is 0,
 *               by data_len block bytes (data_len == block_bytes) and an
 *               8-byte trailer: u64 XXH3-64 of those bytes, computed by the
 *               owner as it sends them (so it reads each block once). A
 *               block the owner cannot serve has a negative status and
 *               data_len 0. A request that fails whole (unknown namespace)
 *               gets one frame with a negative status and an empty payload
 *               instead.
 *   LEASE    salt[16] u64 block_bytes u32 n u32 lease_ms key[n]
 *            -> u64 lease_id u32 n u32 lease_ms, then n entries
 *               i32 status u32 rkey key[16] u64 addr u64 len u64 generation u64 xxh3
 *   RELEASE  u64 lease_id            -> u32 blocks released (-ENOENT: expired)
 *   QP_CONNECT  endpoint (below)     -> the owner's endpoint
 *
 * Block bytes travel beside the frames so that they can be sent straight
 * from a DRAM slot and received straight into one. */
#ifndef KVT_CLUSTER_PEER_PROTO_H
#define KVT_CLUSTER_PEER_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/types.h"
#include "transport/proto.h"

#define KVT_PEER_MAGIC 0x3150564bu /* "KVP1" */
#define KVT_PEER_VERSION 1
#define KVT_PEER_MAX_KEYS 16384u
#define KVT_PEER_NONCE_BYTES 32
#define KVT_PEER_MAC_BYTES 32
#define KVT_PEER_ID_MAX 64
#define KVT_PEER_MAX_BLOCK (1ull << 30)
#define KVT_PEER_BLOCK_META_BYTES 32
#define KVT_PEER_TRAILER_BYTES 8
#define KVT_PEER_LEASE_ENTRY_BYTES 56
#define KVT_PEER_MAX_LEASE_MS 60000u

enum kvt_peer_op {
	KVT_PEER_CHALLENGE = 1,
	KVT_PEER_AUTH = 2,
	KVT_PEER_GET = 3,
	KVT_PEER_LEASE = 4,
	KVT_PEER_RELEASE = 5,
	KVT_PEER_QP_CONNECT = 6,
	KVT_PEER_OP_COUNT
};

/* CHALLENGE flags: what the owner offers. */
#define KVT_PEER_F_RDMA 0x1u

/* CHALLENGE: u16 min_version u16 max_version u32 flags nonce[32]
 * u16 id_len u16 0 id[id_len] (a node id). */
struct kvt_peer_challenge {
	uint16_t min_version, max_version;
	uint32_t flags;
	uint8_t nonce[KVT_PEER_NONCE_BYTES];
	char id[KVT_PEER_ID_MAX + 1];
};

/* AUTH: u32 0 nonce[32] mac[32] u16 id_len u16 0 id[id_len]. Its reply
 * (status 0) is mac[32], the owner's proof. */
struct kvt_peer_auth {
	uint8_t nonce[KVT_PEER_NONCE_BYTES];
	uint8_t mac[KVT_PEER_MAC_BYTES];
	char id[KVT_PEER_ID_MAX + 1];
};

/* GET and LEASE requests (lease_ms is 0 for GET). keys points into the
 * payload. */
struct kvt_peer_keys_req {
	struct kvt_key salt;
	uint64_t block_bytes;
	uint32_t n, lease_ms;
	const struct kvt_key *keys;
};

/* The meta of one BLOCK frame (its checksum follows the bytes). */
struct kvt_peer_block {
	uint32_t index;
	struct kvt_key key;
	uint64_t data_len;
};

/* One entry of a LEASE reply. */
struct kvt_peer_lease_entry {
	int32_t status;
	uint32_t rkey;
	struct kvt_key key;
	uint64_t addr, len;
	uint64_t generation; /* names this grant; nonzero when status is 0 */
	uint64_t xxh3;
};

/* A LEASE reply; entries are decoded one by one with kvt_peer_lease_entry_at. */
struct kvt_peer_lease_rep {
	uint64_t lease_id;
	uint32_t n, lease_ms;
	const uint8_t *entries;
};

/* An RDMA RC endpoint: u32 qpn u32 psn u16 lid u8 port u8 mtu gid[16]
 * u32 flags(0) u32 0. mtu is the ibv_mtu enum (1..5). */
struct kvt_peer_ep {
	uint32_t qpn, psn;
	uint16_t lid;
	uint8_t port, mtu;
	uint8_t gid[16];
};
#define KVT_PEER_EP_BYTES 36

/* A node id: 1..KVT_PEER_ID_MAX characters of [A-Za-z0-9._-] (it lands in
 * Redis keys and logs unquoted). */
bool kvt_node_id_valid(const char *id);

/* "CHALLENGE", ... or NULL (the reply bit is ignored). */
const char *kvt_peer_op_name(unsigned op);

/* Decode a peer frame header. Returns 0, -EAGAIN (short), -EPROTO (magic),
 * -EPROTONOSUPPORT (version), -EMSGSIZE (payload too long). */
int kvt_peer_hdr_decode(const void *buf, size_t len, struct kvt_frame_hdr *h);

/* Start a peer frame in w (finish it with kvt_wr_end). */
void kvt_peer_wr_begin(struct kvt_wr *w, uint16_t op, uint64_t id, int32_t status);

/* Decoders: 0 or -EBADMSG. Pointers in the results point into p. */
int kvt_peer_dec_challenge(const void *p, size_t len, struct kvt_peer_challenge *out);
int kvt_peer_dec_auth(const void *p, size_t len, struct kvt_peer_auth *out);
int kvt_peer_dec_mac(const void *p, size_t len, uint8_t mac[KVT_PEER_MAC_BYTES]);
int kvt_peer_dec_keys_req(uint16_t op, const void *p, size_t len, struct kvt_peer_keys_req *out);
int kvt_peer_dec_block(const void *p, size_t len, struct kvt_peer_block *out);
int kvt_peer_dec_lease_rep(const void *p, size_t len, struct kvt_peer_lease_rep *out);
void kvt_peer_lease_entry_at(const struct kvt_peer_lease_rep *r, uint32_t i,
			     struct kvt_peer_lease_entry *out);
int kvt_peer_dec_u64(const void *p, size_t len, uint64_t *out);
int kvt_peer_dec_u32(const void *p, size_t len, uint32_t *out);
int kvt_peer_dec_ep(const void *p, size_t len, struct kvt_peer_ep *out);

/* Encoders appending one whole frame to w: 0, -EINVAL, -ENOMEM, -EMSGSIZE. */
int kvt_peer_enc_challenge(struct kvt_wr *w, const struct kvt_peer_challenge *c);
int kvt_peer_enc_auth(struct kvt_wr *w, const struct kvt_peer_auth *a);
int kvt_peer_enc_auth_rep(struct kvt_wr *w, int32_t status, const uint8_t *mac);
int kvt_peer_enc_keys_req(struct kvt_wr *w, uint16_t op, uint64_t id, const struct kvt_key *salt,
			  uint64_t block_bytes, const struct kvt_key *keys, uint32_t n,
			  uint32_t lease_ms);
int kvt_peer_enc_block(struct kvt_wr *w, uint64_t id, int32_t status,
		       const struct kvt_peer_block *b);
/* A LEASE reply's head; the caller appends n entries with
 * kvt_peer_enc_lease_entry and then calls kvt_wr_end. */
void kvt_peer_enc_lease_rep_begin(struct kvt_wr *w, uint64_t id, uint64_t lease_id, uint32_t n,
				  uint32_t lease_ms);
void kvt_peer_enc_lease_entry(struct kvt_wr *w, const struct kvt_peer_lease_entry *e);
int kvt_peer_enc_u64(struct kvt_wr *w, uint16_t op, uint64_t id, int32_t status, uint64_t v);
int kvt_peer_enc_u32(struct kvt_wr *w, uint16_t op, uint64_t id, int32_t status, uint32_t v);
int kvt_peer_enc_ep(struct kvt_wr *w, uint16_t op, uint64_t id, int32_t status,
		    const struct kvt_peer_ep *ep);
/* A reply with a status and no payload. */
int kvt_peer_enc_status(struct kvt_wr *w, uint16_t op, uint64_t id, int32_t status);

#endif /* KVT_CLUSTER_PEER_PROTO_H */
