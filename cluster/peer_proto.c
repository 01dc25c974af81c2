/* SPDX-License-Identifier: Apache-2.0 */
/* Frame encoding and strict decoding of the peer protocol (see peer_proto.h). */
#include "cluster/peer_proto.h"

#include <errno.h>
#include <string.h>

#include "transport/wire.h"

static const char *const op_names[KVT_PEER_OP_COUNT] = {
	[KVT_PEER_CHALLENGE] = "CHALLENGE", [KVT_PEER_AUTH] = "AUTH",
	[KVT_PEER_GET] = "GET",             [KVT_PEER_LEASE] = "LEASE",
	[KVT_PEER_RELEASE] = "RELEASE",     [KVT_PEER_QP_CONNECT] = "QP_CONNECT",
};

const char *kvt_peer_op_name(unsigned op)
{
	op &= ~KVT_OP_REPLY;
	return op < KVT_PEER_OP_COUNT ? op_names[op] : NULL;
}

bool kvt_node_id_valid(const char *id)
{
	size_t n = 0;

	if (!id)
		return false;
	for (; id[n]; n++) {
		char c = id[n];

		if (n >= KVT_PEER_ID_MAX ||
		    !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return n > 0;
}

int kvt_peer_hdr_decode(const void *buf, size_t len, struct kvt_frame_hdr *h)
{
	return kvt_frame_hdr_decode(buf, len, KVT_PEER_MAGIC, KVT_PEER_VERSION, h);
}

void kvt_peer_wr_begin(struct kvt_wr *w, uint16_t op, uint64_t id, int32_t status)
{
	struct kvt_frame_hdr h = {
		.magic = KVT_PEER_MAGIC, .version = KVT_PEER_VERSION,
		.op = op, .status = status, .id = id,
	};

	kvt_wr_begin_frame(w, &h);
}

/* ---- decoders ---------------------------------------------------------- */

static void rd_key(struct kvt_rd *r, struct kvt_key *k)
{
	const uint8_t *p = kvt_rd_take(r, KVT_KEY_BYTES);

	if (p)
		memcpy(k->bytes, p, KVT_KEY_BYTES);
	else
		memset(k, 0, sizeof(*k));
}

/* u16 id_len, u16 0, a valid node id. */
static void rd_id(struct kvt_rd *r, char *out)
{
	uint16_t n = kvt_rd_u16(r);
	const uint8_t *p;

	kvt_rd_zero(r, 2);
	out[0] = '\0';
	if (n == 0 || n > KVT_PEER_ID_MAX) {
		r->bad = true;
		return;
	}
	p = kvt_rd_take(r, n);
	if (!p)
		return;
	memcpy(out, p, n);
	out[n] = '\0';
	if (strlen(out) != n || !kvt_node_id_valid(out))
		r->bad = true;
}

int kvt_peer_dec_challenge(const void *p, size_t len, struct kvt_peer_challenge *c)
{
	struct kvt_rd r = { .p = p, .len = len };
	const uint8_t *nonce;

	c->min_version = kvt_rd_u16(&r);
	c->max_version = kvt_rd_u16(&r);
	c->flags = kvt_rd_u32(&r);
	nonce = kvt_rd_take(&r, KVT_PEER_NONCE_BYTES);
	if (nonce)
		memcpy(c->nonce, nonce, KVT_PEER_NONCE_BYTES);
	rd_id(&r, c->id);
	if (kvt_rd_done(&r) || c->min_version == 0 || c->min_version > c->max_version ||
	    (c->flags & ~KVT_PEER_F_RDMA))
		return -EBADMSG;
	return 0;
}

int kvt_peer_dec_auth(const void *p, size_t len, struct kvt_peer_auth *a)
{
	struct kvt_rd r = { .p = p, .len = len };
	const uint8_t *nonce, *mac;

	kvt_rd_zero(&r, 4);
	nonce = kvt_rd_take(&r, KVT_PEER_NONCE_BYTES);
	mac = kvt_rd_take(&r, KVT_PEER_MAC_BYTES);
	if (nonce && mac) {
		memcpy(a->nonce, nonce, KVT_PEER_NONCE_BYTES);
		memcpy(a->mac, mac, KVT_PEER_MAC_BYTES);
	}
	rd_id(&r, a->id);
	return kvt_rd_done(&r);
}

int kvt_peer_dec_mac(const void *p, size_t len, uint8_t mac[KVT_PEER_MAC_BYTES])
{
	if (len != KVT_PEER_MAC_BYTES)
		return -EBADMSG;
	memcpy(mac, p, KVT_PEER_MAC_BYTES);
	return 0;
}

int kvt_peer_dec_keys_req(uint16_t op, const void *p, size_t len, struct kvt_peer_keys_req *q)
{
	struct kvt_rd r = { .p = p, .len = len };

	if (op != KVT_PEER_GET && op != KVT_PEER_LEASE)
		return -EBADMSG;
	rd_key(&r, &q->salt);
	q->block_bytes = kvt_rd_u64(&r);
	q->n = kvt_rd_u32(&r);
	q->lease_ms = kvt_rd_u32(&r);
	if (q->n == 0 || q->n > KVT_PEER_MAX_KEYS || q->block_bytes == 0 ||
	    q->block_bytes > KVT_PEER_MAX_BLOCK)
		return -EBADMSG;
	if (op == KVT_PEER_GET ? q->lease_ms != 0
			       : q->lease_ms == 0 || q->lease_ms > KVT_PEER_MAX_LEASE_MS)
		return -EBADMSG;
	q->keys = (const struct kvt_key *)kvt_rd_take(&r, (size_t)q->n * KVT_KEY_BYTES);
	return kvt_rd_done(&r);
}

int kvt_peer_dec_block(const void *p, size_t len, struct kvt_peer_block *b)
{
	struct kvt_rd r = { .p = p, .len = len };

	b->index = kvt_rd_u32(&r);
	kvt_rd_zero(&r, 4);
	rd_key(&r, &b->key);
	b->data_len = kvt_rd_u64(&r);
	if (kvt_rd_done(&r) || b->index >= KVT_PEER_MAX_KEYS || b->data_len > KVT_PEER_MAX_BLOCK)
		return -EBADMSG;
	return 0;
}

int kvt_peer_dec_lease_rep(const void *p, size_t len, struct kvt_peer_lease_rep *out)
{
	struct kvt_rd r = { .p = p, .len = len };
	struct kvt_peer_lease_entry e;

	out->lease_id = kvt_rd_u64(&r);
	out->n = kvt_rd_u32(&r);
	out->lease_ms = kvt_rd_u32(&r);
	if (out->n == 0 || out->n > KVT_PEER_MAX_KEYS || out->lease_ms > KVT_PEER_MAX_LEASE_MS)
		return -EBADMSG;
	out->entries = kvt_rd_take(&r, (size_t)out->n * KVT_PEER_LEASE_ENTRY_BYTES);
	if (kvt_rd_done(&r))
		return -EBADMSG;
	for (uint32_t i = 0; i < out->n; i++) {
		kvt_peer_lease_entry_at(out, i, &e);
		if (e.status > 0 || (e.status == 0 && (e.generation == 0 || e.len == 0 ||
						       e.len > KVT_PEER_MAX_BLOCK ||
						       e.addr + e.len < e.addr)))
			return -EBADMSG;
	}
	return 0;
}

void kvt_peer_lease_entry_at(const struct kvt_peer_lease_rep *rep, uint32_t i,
			     struct kvt_peer_lease_entry *e)
{
	struct kvt_rd r = { .p = rep->entries + (size_t)i * KVT_PEER_LEASE_ENTRY_BYTES,
			    .len = KVT_PEER_LEASE_ENTRY_BYTES };

	e->status = (int32_t)kvt_rd_u32(&r);
	e->rkey = kvt_rd_u32(&r);
	rd_key(&r, &e->key);
	e->addr = kvt_rd_u64(&r);
	e->len = kvt_rd_u64(&r);
	e->generation = kvt_rd_u64(&r);
	e->xxh3 = kvt_rd_u64(&r);
}

int kvt_peer_dec_u64(const void *p, size_t len, uint64_t *out)
{
	struct kvt_rd r = { .p = p, .len = len };

	*out = kvt_rd_u64(&r);
	return kvt_rd_done(&r);
}

int kvt_peer_dec_u32(const void *p, size_t len, uint32_t *out)
{
	struct kvt_rd r = { .p = p, .len = len };

	*out = kvt_rd_u32(&r);
	return kvt_rd_done(&r);
}

int kvt_peer_dec_ep(const void *p, size_t len, struct kvt_peer_ep *ep)
{
	struct kvt_rd r = { .p = p, .len = len };
	const uint8_t *gid;

	ep->qpn = kvt_rd_u32(&r);
	ep->psn = kvt_rd_u32(&r);
	ep->lid = kvt_rd_u16(&r);
	ep->port = kvt_rd_u8(&r);
	ep->mtu = kvt_rd_u8(&r);
	gid = kvt_rd_take(&r, 16);
	if (gid)
		memcpy(ep->gid, gid, 16);
	kvt_rd_zero(&r, 8);
	/* a QP number and a PSN are 24-bit; ibv_mtu is 256..4096 (1..5) */
	if (kvt_rd_done(&r) || ep->qpn == 0 || ep->qpn > 0xffffff || ep->psn > 0xffffff ||
	    ep->mtu < 1 || ep->mtu > 5 || ep->port == 0)
		return -EBADMSG;
	return 0;
}

/* ---- encoders ---------------------------------------------------------- */

static void wr_id(struct kvt_wr *w, const char *id)
{
	size_t n = strlen(id);

	kvt_wr_u16(w, (uint16_t)n);
	kvt_wr_u16(w, 0);
	kvt_wr_bytes(w, id, n);
}

int kvt_peer_enc_challenge(struct kvt_wr *w, const struct kvt_peer_challenge *c)
{
	if (!kvt_node_id_valid(c->id))
		return -EINVAL;
	kvt_peer_wr_begin(w, KVT_PEER_CHALLENGE, 0, 0);
	kvt_wr_u16(w, c->min_version);
	kvt_wr_u16(w, c->max_version);
	kvt_wr_u32(w, c->flags);
	kvt_wr_bytes(w, c->nonce, KVT_PEER_NONCE_BYTES);
	wr_id(w, c->id);
	return kvt_wr_end(w);
}

int kvt_peer_enc_auth(struct kvt_wr *w, const struct kvt_peer_auth *a)
{
	if (!kvt_node_id_valid(a->id))
		return -EINVAL;
	kvt_peer_wr_begin(w, KVT_PEER_AUTH, 0, 0);
	kvt_wr_u32(w, 0);
	kvt_wr_bytes(w, a->nonce, KVT_PEER_NONCE_BYTES);
	kvt_wr_bytes(w, a->mac, KVT_PEER_MAC_BYTES);
	wr_id(w, a->id);
	return kvt_wr_end(w);
}

int kvt_peer_enc_auth_rep(struct kvt_wr *w, int32_t status, const uint8_t *mac)
{
	kvt_peer_wr_begin(w, KVT_PEER_AUTH | KVT_OP_REPLY, 0, status);
	if (status == 0)
		kvt_wr_bytes(w, mac, KVT_PEER_MAC_BYTES);
	return kvt_wr_end(w);
}

int kvt_peer_enc_keys_req(struct kvt_wr *w, uint16_t op, uint64_t id, const struct kvt_key *salt,
			  uint64_t block_bytes, const struct kvt_key *keys, uint32_t n,
			  uint32_t lease_ms)
{
	if (n == 0 || n > KVT_PEER_MAX_KEYS || (op != KVT_PEER_GET && op != KVT_PEER_LEASE))
		return -EINVAL;
	kvt_peer_wr_begin(w, op, id, 0);
	kvt_wr_bytes(w, salt->bytes, KVT_KEY_BYTES);
	kvt_wr_u64(w, block_bytes);
	kvt_wr_u32(w, n);
	kvt_wr_u32(w, op == KVT_PEER_LEASE ? lease_ms : 0);
	kvt_wr_bytes(w, keys, (size_t)n * KVT_KEY_BYTES);
	return kvt_wr_end(w);
}

int kvt_peer_enc_block(struct kvt_wr *w, uint64_t id, int32_t status,
		       const struct kvt_peer_block *b)
{
	kvt_peer_wr_begin(w, KVT_PEER_GET | KVT_OP_REPLY, id, status);
	kvt_wr_u32(w, b->index);
	kvt_wr_u32(w, 0);
	kvt_wr_bytes(w, b->key.bytes, KVT_KEY_BYTES);
	kvt_wr_u64(w, status == 0 ? b->data_len : 0);
	return kvt_wr_end(w);
}

void kvt_peer_enc_lease_rep_begin(struct kvt_wr *w, uint64_t id, uint64_t lease_id, uint32_t n,
				  uint32_t lease_ms)
{
	kvt_peer_wr_begin(w, KVT_PEER_LEASE | KVT_OP_REPLY, id, 0);
	kvt_wr_u64(w, lease_id);
	kvt_wr_u32(w, n);
	kvt_wr_u32(w, lease_ms);
}

void kvt_peer_enc_lease_entry(struct kvt_wr *w, const struct kvt_peer_lease_entry *e)
{
	kvt_wr_u32(w, (uint32_t)e->status);
	kvt_wr_u32(w, e->rkey);
	kvt_wr_bytes(w, e->key.bytes, KVT_KEY_BYTES);
	kvt_wr_u64(w, e->addr);
	kvt_wr_u64(w, e->len);
	kvt_wr_u64(w, e->generation);
	kvt_wr_u64(w, e->xxh3);
}

int kvt_peer_enc_u64(struct kvt_wr *w, uint16_t op, uint64_t id, int32_t status, uint64_t v)
{
	kvt_peer_wr_begin(w, op, id, status);
	kvt_wr_u64(w, v);
	return kvt_wr_end(w);
}

int kvt_peer_enc_u32(struct kvt_wr *w, uint16_t op, uint64_t id, int32_t status, uint32_t v)
{
	kvt_peer_wr_begin(w, op, id, status);
	kvt_wr_u32(w, v);
	return kvt_wr_end(w);
}

int kvt_peer_enc_ep(struct kvt_wr *w, uint16_t op, uint64_t id, int32_t status,
		    const struct kvt_peer_ep *ep)
{
	kvt_peer_wr_begin(w, op, id, status);
	kvt_wr_u32(w, ep->qpn);
	kvt_wr_u32(w, ep->psn);
	kvt_wr_u16(w, ep->lid);
	kvt_wr_u8(w, ep->port);
	kvt_wr_u8(w, ep->mtu);
	kvt_wr_bytes(w, ep->gid, 16);
	kvt_wr_u32(w, 0);
	kvt_wr_u32(w, 0);
	return kvt_wr_end(w);
}

int kvt_peer_enc_status(struct kvt_wr *w, uint16_t op, uint64_t id, int32_t status)
{
	kvt_peer_wr_begin(w, op, id, status);
	return kvt_wr_end(w);
}
