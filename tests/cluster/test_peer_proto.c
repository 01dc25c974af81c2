/* SPDX-License-Identifier: Apache-2.0 */
/* The peer protocol's frames: every message round-trips, and the decoders
 * refuse what is not exactly right (sizes, counts, reserved fields, ids,
 * ranges), as the sidecar protocol's do. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cluster/peer_proto.h"
#include "transport/wire.h"

static struct kvt_key key_n(int i)
{
	struct kvt_key k;

	for (int j = 0; j < KVT_KEY_BYTES; j++)
		k.bytes[j] = (uint8_t)(i * 31 + j);
	return k;
}

/* The payload of the one frame in w, after checking its header. */
static const uint8_t *payload(const struct kvt_wr *w, uint16_t op, struct kvt_frame_hdr *h)
{
	assert_int_equal(kvt_peer_hdr_decode(w->buf, w->len, h), 0);
	assert_int_equal(h->op, op);
	assert_int_equal(w->len, KVT_PROTO_HDR_BYTES + h->len);
	return w->buf + KVT_PROTO_HDR_BYTES;
}

static void headers_are_checked(void **state)
{
	struct kvt_frame_hdr h = { .magic = KVT_PEER_MAGIC, .version = KVT_PEER_VERSION, .op = 3 };
	uint8_t b[KVT_PROTO_HDR_BYTES];

	kvt_proto_hdr_encode(&h, b);
	assert_int_equal(kvt_peer_hdr_decode(b, sizeof(b), &h), 0);
	assert_int_equal(kvt_peer_hdr_decode(b, sizeof(b) - 1, &h), -EAGAIN);
	h.magic = KVT_PROTO_MAGIC; /* a sidecar frame on a peer port */
	kvt_proto_hdr_encode(&h, b);
	assert_int_equal(kvt_peer_hdr_decode(b, sizeof(b), &h), -EPROTO);
	h = (struct kvt_frame_hdr){ .magic = KVT_PEER_MAGIC, .version = 2 };
	kvt_proto_hdr_encode(&h, b);
	assert_int_equal(kvt_peer_hdr_decode(b, sizeof(b), &h), -EPROTONOSUPPORT);
	h = (struct kvt_frame_hdr){ .magic = KVT_PEER_MAGIC, .version = 1,
				    .len = KVT_PROTO_MAX_PAYLOAD + 1 };
	kvt_proto_hdr_encode(&h, b);
	assert_int_equal(kvt_peer_hdr_decode(b, sizeof(b), &h), -EMSGSIZE);
	assert_string_equal(kvt_peer_op_name(KVT_PEER_GET | KVT_OP_REPLY), "GET");
	assert_null(kvt_peer_op_name(99));
}

static void handshake_frames_round_trip(void **state)
{
	struct kvt_peer_challenge c = { .min_version = 1, .max_version = 1, .flags = KVT_PEER_F_RDMA }, c2;
	struct kvt_peer_auth a = { 0 }, a2;
	struct kvt_frame_hdr h;
	struct kvt_wr w;
	const uint8_t *p;
	uint8_t mac[KVT_PEER_MAC_BYTES];

	kvt_wr_init(&w);
	memset(c.id, 0, sizeof(c.id)); /* compared whole below */
	memset(&c2, 0, sizeof(c2));
	memset(&a2, 0, sizeof(a2));
	memset(c.nonce, 0xab, sizeof(c.nonce));
	strcpy(c.id, "owner-1");
	assert_int_equal(kvt_peer_enc_challenge(&w, &c), 0);
	p = payload(&w, KVT_PEER_CHALLENGE, &h);
	assert_int_equal(kvt_peer_dec_challenge(p, h.len, &c2), 0);
	assert_memory_equal(&c, &c2, sizeof(c));
	/* one byte short, one too many, an unknown flag */
	assert_int_equal(kvt_peer_dec_challenge(p, h.len - 1, &c2), -EBADMSG);
	w.buf[KVT_PROTO_HDR_BYTES + 4] = 0x2;
	assert_int_equal(kvt_peer_dec_challenge(p, h.len, &c2), -EBADMSG);

	w.len = 0;
	memset(a.nonce, 1, sizeof(a.nonce));
	memset(a.mac, 2, sizeof(a.mac));
	strcpy(a.id, "reader_2");
	assert_int_equal(kvt_peer_enc_auth(&w, &a), 0);
	p = payload(&w, KVT_PEER_AUTH, &h);
	assert_int_equal(kvt_peer_dec_auth(p, h.len, &a2), 0);
	assert_memory_equal(&a, &a2, sizeof(a));
	/* reserved word set */
	w.buf[KVT_PROTO_HDR_BYTES] = 1;
	assert_int_equal(kvt_peer_dec_auth(p, h.len, &a2), -EBADMSG);
	w.buf[KVT_PROTO_HDR_BYTES] = 0;
	/* an id with a byte that is not allowed (it lands in logs and keys) */
	w.buf[w.len - 1] = ' ';
	assert_int_equal(kvt_peer_dec_auth(p, h.len, &a2), -EBADMSG);
	w.buf[w.len - 1] = 0;
	assert_int_equal(kvt_peer_dec_auth(p, h.len, &a2), -EBADMSG);

	strcpy(a.id, "bad id");
	assert_int_equal(kvt_peer_enc_auth(&w, &a), -EINVAL);
	assert_int_equal(kvt_peer_dec_mac(mac, 31, mac), -EBADMSG);
	kvt_wr_free(&w);
}

static void get_and_lease_requests_are_strict(void **state)
{
	struct kvt_key keys[3] = { key_n(1), key_n(2), key_n(3) }, salt = key_n(9);
	struct kvt_peer_keys_req q;
	struct kvt_frame_hdr h;
	struct kvt_wr w;
	const uint8_t *p;
	uint8_t *raw;

	kvt_wr_init(&w);
	assert_int_equal(kvt_peer_enc_keys_req(&w, KVT_PEER_GET, 7, &salt, 4096, keys, 3, 0), 0);
	p = payload(&w, KVT_PEER_GET, &h);
	assert_int_equal(h.id, 7);
	assert_int_equal(kvt_peer_dec_keys_req(KVT_PEER_GET, p, h.len, &q), 0);
	assert_int_equal(q.n, 3);
	assert_int_equal(q.block_bytes, 4096);
	assert_memory_equal(&q.salt, &salt, sizeof(salt));
	assert_memory_equal(q.keys, keys, sizeof(keys));
	/* a GET is not a LEASE: lease_ms must be 0 here, set there */
	assert_int_equal(kvt_peer_dec_keys_req(KVT_PEER_LEASE, p, h.len, &q), -EBADMSG);
	assert_int_equal(kvt_peer_dec_keys_req(KVT_PEER_GET, p, h.len - 16, &q), -EBADMSG);
	raw = w.buf + KVT_PROTO_HDR_BYTES;
	kvt_put_u32(raw + 24, 4);      /* n larger than the keys present */
	assert_int_equal(kvt_peer_dec_keys_req(KVT_PEER_GET, p, h.len, &q), -EBADMSG);
	kvt_put_u32(raw + 24, 0);
	assert_int_equal(kvt_peer_dec_keys_req(KVT_PEER_GET, p, h.len, &q), -EBADMSG);
	kvt_put_u32(raw + 24, 3);
	kvt_put_u64(raw + 16, 0);      /* no block size */
	assert_int_equal(kvt_peer_dec_keys_req(KVT_PEER_GET, p, h.len, &q), -EBADMSG);
	kvt_put_u64(raw + 16, KVT_PEER_MAX_BLOCK + 1);
	assert_int_equal(kvt_peer_dec_keys_req(KVT_PEER_GET, p, h.len, &q), -EBADMSG);
	assert_int_equal(kvt_peer_dec_keys_req(KVT_PEER_RELEASE, p, h.len, &q), -EBADMSG);

	w.len = 0;
	assert_int_equal(kvt_peer_enc_keys_req(&w, KVT_PEER_LEASE, 8, &salt, 4096, keys, 3, 500), 0);
	p = payload(&w, KVT_PEER_LEASE, &h);
	assert_int_equal(kvt_peer_dec_keys_req(KVT_PEER_LEASE, p, h.len, &q), 0);
	assert_int_equal(q.lease_ms, 500);
	raw = w.buf + KVT_PROTO_HDR_BYTES;
	kvt_put_u32(raw + 28, KVT_PEER_MAX_LEASE_MS + 1);
	assert_int_equal(kvt_peer_dec_keys_req(KVT_PEER_LEASE, p, h.len, &q), -EBADMSG);
	assert_int_equal(kvt_peer_enc_keys_req(&w, KVT_PEER_GET, 1, &salt, 1, keys, 0, 0), -EINVAL);
	assert_int_equal(kvt_peer_enc_keys_req(&w, KVT_PEER_GET, 1, &salt, 1, keys,
					       KVT_PEER_MAX_KEYS + 1, 0), -EINVAL);
	kvt_wr_free(&w);
}

static void block_frames(void **state)
{
	struct kvt_peer_block b = { .index = 5, .key = key_n(5), .data_len = 1 << 20 }, b2;
	struct kvt_frame_hdr h;
	struct kvt_wr w;
	const uint8_t *p;

	kvt_wr_init(&w);
	assert_int_equal(kvt_peer_enc_block(&w, 3, 0, &b), 0);
	p = payload(&w, KVT_PEER_GET | KVT_OP_REPLY, &h);
	assert_int_equal(h.len, KVT_PEER_BLOCK_META_BYTES);
	assert_int_equal(kvt_peer_dec_block(p, h.len, &b2), 0);
	assert_int_equal(b2.index, b.index);
	assert_memory_equal(&b2.key, &b.key, sizeof(b.key));
	assert_int_equal(b2.data_len, b.data_len);
	/* an error frame carries no length, whatever b holds */
	w.len = 0;
	assert_int_equal(kvt_peer_enc_block(&w, 3, -ENOENT, &b), 0);
	p = payload(&w, KVT_PEER_GET | KVT_OP_REPLY, &h);
	assert_int_equal(h.status, -ENOENT);
	assert_int_equal(kvt_peer_dec_block(p, h.len, &b2), 0);
	assert_int_equal(b2.data_len, 0);
	/* reserved word, index out of range, block too large */
	w.buf[KVT_PROTO_HDR_BYTES + 4] = 1;
	assert_int_equal(kvt_peer_dec_block(p, h.len, &b2), -EBADMSG);
	w.buf[KVT_PROTO_HDR_BYTES + 4] = 0;
	kvt_put_u32(w.buf + KVT_PROTO_HDR_BYTES, KVT_PEER_MAX_KEYS);
	assert_int_equal(kvt_peer_dec_block(p, h.len, &b2), -EBADMSG);
	kvt_put_u32(w.buf + KVT_PROTO_HDR_BYTES, 0);
	kvt_put_u64(w.buf + KVT_PROTO_HDR_BYTES + 24, KVT_PEER_MAX_BLOCK + 1);
	assert_int_equal(kvt_peer_dec_block(p, h.len, &b2), -EBADMSG);
	kvt_wr_free(&w);
}

static void lease_replies(void **state)
{
	struct kvt_peer_lease_entry e[2] = {
		{ .status = 0, .rkey = 0x42, .key = key_n(1), .addr = 0x10000, .len = 4096,
		  .generation = 9, .xxh3 = 1234 },
		{ .status = -ENOENT, .key = key_n(2) },
	}, got;
	struct kvt_peer_lease_rep rep;
	struct kvt_frame_hdr h;
	struct kvt_wr w;
	const uint8_t *p;
	uint8_t *ent;

	kvt_wr_init(&w);
	kvt_peer_enc_lease_rep_begin(&w, 4, 77, 2, 300);
	kvt_peer_enc_lease_entry(&w, &e[0]);
	kvt_peer_enc_lease_entry(&w, &e[1]);
	assert_int_equal(kvt_wr_end(&w), 0);
	p = payload(&w, KVT_PEER_LEASE | KVT_OP_REPLY, &h);
	assert_int_equal(kvt_peer_dec_lease_rep(p, h.len, &rep), 0);
	assert_int_equal(rep.lease_id, 77);
	assert_int_equal(rep.lease_ms, 300);
	for (uint32_t i = 0; i < 2; i++) {
		kvt_peer_lease_entry_at(&rep, i, &got);
		assert_memory_equal(&got, &e[i], sizeof(got));
	}
	assert_int_equal(kvt_peer_dec_lease_rep(p, h.len - 1, &rep), -EBADMSG);
	ent = w.buf + KVT_PROTO_HDR_BYTES + 16;
	kvt_put_u64(ent + 40, 0); /* a granted block without a generation */
	assert_int_equal(kvt_peer_dec_lease_rep(p, h.len, &rep), -EBADMSG);
	kvt_put_u64(ent + 40, 9);
	kvt_put_u64(ent + 24, UINT64_MAX - 10); /* addr + len wraps */
	assert_int_equal(kvt_peer_dec_lease_rep(p, h.len, &rep), -EBADMSG);
	kvt_put_u64(ent + 24, 0x10000);
	kvt_put_u32(ent, 5); /* a positive status is no errno */
	assert_int_equal(kvt_peer_dec_lease_rep(p, h.len, &rep), -EBADMSG);
	kvt_wr_free(&w);
}

static void endpoints(void **state)
{
	struct kvt_peer_ep ep = { .qpn = 0x123456, .psn = 0xabcdef, .lid = 3, .port = 1, .mtu = 5 }, ep2;
	struct kvt_frame_hdr h;
	struct kvt_wr w;
	const uint8_t *p;

	memset(ep.gid, 0xfe, sizeof(ep.gid));
	kvt_wr_init(&w);
	assert_int_equal(kvt_peer_enc_ep(&w, KVT_PEER_QP_CONNECT, 1, 0, &ep), 0);
	p = payload(&w, KVT_PEER_QP_CONNECT, &h);
	assert_int_equal(h.len, KVT_PEER_EP_BYTES);
	assert_int_equal(kvt_peer_dec_ep(p, h.len, &ep2), 0);
	assert_memory_equal(&ep, &ep2, sizeof(ep));
	kvt_put_u32(w.buf + KVT_PROTO_HDR_BYTES, 0x1000000); /* QP numbers are 24-bit */
	assert_int_equal(kvt_peer_dec_ep(p, h.len, &ep2), -EBADMSG);
	kvt_put_u32(w.buf + KVT_PROTO_HDR_BYTES, 1);
	w.buf[KVT_PROTO_HDR_BYTES + 11] = 6; /* no such MTU */
	assert_int_equal(kvt_peer_dec_ep(p, h.len, &ep2), -EBADMSG);
	w.buf[KVT_PROTO_HDR_BYTES + 11] = 5;
	w.buf[KVT_PROTO_HDR_BYTES + 30] = 1; /* reserved */
	assert_int_equal(kvt_peer_dec_ep(p, h.len, &ep2), -EBADMSG);
	kvt_wr_free(&w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(headers_are_checked),
		cmocka_unit_test(handshake_frames_round_trip),
		cmocka_unit_test(get_and_lease_requests_are_strict),
		cmocka_unit_test(block_frames),
		cmocka_unit_test(lease_replies),
		cmocka_unit_test(endpoints),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
