/* SPDX-License-Identifier: Apache-2.0 */
/* The owner's side of the peer transport (see peer_server.h). */
#include "cluster/peer_server.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "cluster/lease.h"
#include "cluster/peer_io.h"
#include "transport/sockio.h"
#include "transport/wire.h"
#include "util/block_sum.h"
#include "util/clock.h"
#include "util/log.h"

/* The most connections in their handshake max_unauth may allow. */
#define UNAUTH_MAX 4096

struct pconn {
	struct pconn *next;
	struct kvt_peer_server *srv;
	pthread_t thread;
	int fd;                 /* closed by whoever joins the thread */
	uint64_t id;            /* grows with accept order */
	bool done;              /* the thread has finished (under srv->mu) */
	uint64_t auth_deadline; /* in its handshake: when it is cut for silence */
	struct sockaddr_storage src;
	uint8_t nonce[KVT_PEER_NONCE_BYTES]; /* of the challenge sent at accept */
	char peer[KVT_PEER_ID_MAX + 1];
	char addr[64];
	struct kvt_wr w;
	uint8_t *buf;           /* one request payload */
	struct kvt_sum *sum;    /* the checksum of the block being sent */
};

struct kvt_peer_server {
	struct kvt_peer_server_opts o;
	struct kvt_peer_secret secret;
	char node_id[KVT_PEER_ID_MAX + 1];
	int lfd, port;
	int stop_fd;            /* eventfd, readable once closing */
	pthread_t accept_thread;
	pthread_mutex_t mu;
	struct pconn *conns;    /* authenticated: a thread each */
	/* in their handshake, oldest first: the accept thread's alone, no
	 * thread of their own (a flood of them costs descriptors, not threads) */
	struct pconn *pend[UNAUTH_MAX];
	unsigned n_pend;
	unsigned short per_bucket[UNAUTH_MAX]; /* unauth_admit's tally, by source_bucket */
	uint64_t next_conn;
	struct kvt_peer_server_stats st;
};

void kvt_peer_server_opts_init(struct kvt_peer_server_opts *opts, size_t size_bytes)
{
	memset(opts, 0, size_bytes);
	opts->size = size_bytes;
	opts->timeout_ms = 5000;
	opts->max_conns = 256;
	opts->auth_timeout_ms = 2000;
	opts->max_unauth = 1024;
	opts->max_unauth_per_source = 8;
}

#define slog(s, lvl, ...) kvt_log_to((s)->o.log, (s)->o.log_arg, lvl, __VA_ARGS__)

static uint64_t deadline(const struct kvt_peer_server *s)
{
	return kvt_deadline_ms(s->o.timeout_ms);
}

static int send_wr(struct pconn *c)
{
	return c->w.len ? kvt_peer_send_wr(c->fd, &c->w, deadline(c->srv)) : 0;
}

/* A status-only reply; the frame is queued and sent. */
static int reply_status(struct pconn *c, uint16_t op, uint64_t id, int status)
{
	kvt_peer_enc_status(&c->w, op | KVT_OP_REPLY, id, status);
	return send_wr(c);
}

static struct kvt_ns *request_ns(struct pconn *c, const struct kvt_peer_keys_req *q, int *err)
{
	struct kvt_peer_server *s = c->srv;
	struct kvt_ns *ns = s->o.find_ns_cb ? s->o.find_ns_cb(s->o.find_ns_arg, &q->salt) : NULL;

	*err = !ns ? -EBADF : kvt_ns_block_bytes(ns) != q->block_bytes ? -EINVAL : 0;
	return *err ? NULL : ns;
}

/* Bytes hashed and then sent at a time: small enough that the hash leaves
 * them in cache for the send's copy, so each block is read from memory once. */
#define SEND_CHUNK (256u << 10)

/* Send a block's bytes straight from the slot, then its XXH3 trailer: the
 * sum the store kept since the block was stored (have_sum: the block goes
 * in one send), else hashing each chunk just before it is sent. The frame
 * (and any miss frames queued before it) leave with the first chunk. */
static int send_block(struct pconn *c, const uint8_t *data, uint64_t len, bool have_sum,
		      uint64_t sum)
{
	uint8_t trailer[KVT_PEER_TRAILER_BYTES];
	uint64_t chunk = have_sum ? len : SEND_CHUNK;
	struct iovec iov[2];
	uint64_t off = 0;
	int err = 0;

	if (!have_sum)
		kvt_sum_begin(c->sum);
	while (off < len && !err) {
		size_t n = len - off < chunk ? (size_t)(len - off) : (size_t)chunk;
		int k = 0;

		if (!have_sum)
			kvt_sum_add(c->sum, data + off, n);
		if (c->w.len)
			iov[k++] = (struct iovec){ c->w.buf, c->w.len };
		iov[k++] = (struct iovec){ (void *)(data + off), n };
		err = kvt_sock_sendv_idle(c->fd, iov, k, MSG_MORE, c->srv->o.timeout_ms);
		c->w.len = 0;
		off += n;
	}
	if (err)
		return err;
	kvt_put_u64(trailer, have_sum ? sum : kvt_sum_end(c->sum));
	/* the trailer leaves with the next frame, or at the end of the request */
	kvt_wr_bytes(&c->w, trailer, sizeof(trailer));
	return c->w.err;
}

/* GET: each block as a BLOCK frame, its bytes sent straight from the slot,
 * the slot released once they are in the socket. */
static int serve_get(struct pconn *c, const struct kvt_frame_hdr *h)
{
	struct kvt_peer_server *s = c->srv;
	struct kvt_peer_keys_req q;
	uint64_t sent = 0, bytes = 0, misses = 0;
	int err = 0;

	if (kvt_peer_dec_keys_req(KVT_PEER_GET, c->buf, h->len, &q)) {
		pthread_mutex_lock(&s->mu);
		s->st.bad_requests++;
		pthread_mutex_unlock(&s->mu);
		return reply_status(c, KVT_PEER_GET, h->id, -EBADMSG);
	}
	struct kvt_ns *ns = request_ns(c, &q, &err);
	if (!ns)
		return reply_status(c, KVT_PEER_GET, h->id, err);
	for (uint32_t i = 0; i < q.n && !err; i++) {
		struct kvt_peer_block b = { .index = i };
		struct kvt_slot slot;
		uint64_t sum = 0;
		bool have_sum;
		int st;

		memcpy(&b.key, &q.keys[i], sizeof(b.key));
		/* this node's blocks only: with a peer tier in the store, a plain
		 * acquire would pass a miss on to other nodes, and they to others */
		st = kvt_acquire_local(ns, &b.key, &slot);
		if (st) {
			/* a miss (or an unreadable block): a small frame, sent with
			 * the next block's or at the end */
			kvt_peer_enc_block(&c->w, h->id, st, &b);
			misses++;
			if (st == -ENOENT && s->o.miss_cb)
				s->o.miss_cb(s->o.find_ns_arg, ns, &b.key);
			continue;
		}
		b.data_len = slot.len;
		have_sum = kvt_slot_sum(ns, &slot, &sum) == 0;
		err = kvt_peer_enc_block(&c->w, h->id, 0, &b);
		if (!err)
			err = send_block(c, slot.data, slot.len, have_sum, sum);
		kvt_release(ns, &slot);
		if (!err) {
			sent++;
			bytes += b.data_len;
		}
	}
	if (!err)
		err = send_wr(c);
	pthread_mutex_lock(&s->mu);
	s->st.blocks_sent += sent;
	s->st.bytes_sent += bytes;
	s->st.misses += misses;
	if (err)
		s->st.send_errors++;
	pthread_mutex_unlock(&s->mu);
	return err;
}

static int serve_lease(struct pconn *c, const struct kvt_frame_hdr *h)
{
	struct kvt_peer_server *s = c->srv;
	struct kvt_peer_keys_req q;
	struct kvt_lease_grant *g;
	uint64_t lease_id;
	uint32_t granted_ms;
	struct kvt_ns *ns;
	int err;

	if (!s->o.leases || !s->o.rdma.rkey_cb)
		return reply_status(c, KVT_PEER_LEASE, h->id, -EOPNOTSUPP);
	if (kvt_peer_dec_keys_req(KVT_PEER_LEASE, c->buf, h->len, &q))
		return reply_status(c, KVT_PEER_LEASE, h->id, -EBADMSG);
	ns = request_ns(c, &q, &err);
	if (!ns)
		return reply_status(c, KVT_PEER_LEASE, h->id, err);
	g = calloc(q.n, sizeof(*g));
	if (!g)
		return reply_status(c, KVT_PEER_LEASE, h->id, -ENOMEM);
	/* the keys are copied out: the payload buffer is not aligned for them */
	struct kvt_key *keys = malloc((size_t)q.n * sizeof(*keys));
	if (!keys) {
		free(g);
		return reply_status(c, KVT_PEER_LEASE, h->id, -ENOMEM);
	}
	memcpy(keys, q.keys, (size_t)q.n * sizeof(*keys));
	err = kvt_lease_grant(s->o.leases, ns, keys, q.n, q.lease_ms, c->id, &granted_ms, g,
			      &lease_id);
	free(keys);
	if (err) {
		free(g);
		return reply_status(c, KVT_PEER_LEASE, h->id, err);
	}
	kvt_peer_enc_lease_rep_begin(&c->w, h->id, lease_id, q.n, granted_ms);
	for (uint32_t i = 0; i < q.n; i++) {
		struct kvt_peer_lease_entry e = {
			.status = g[i].status, .key = g[i].key, .addr = (uint64_t)(uintptr_t)g[i].data,
			.len = g[i].len, .generation = g[i].generation, .xxh3 = g[i].xxh3,
		};

		if (e.status == 0 && s->o.rdma.rkey_cb(s->o.rdma.arg, g[i].data, g[i].len, &e.rkey))
			e = (struct kvt_peer_lease_entry){ .status = -EREMOTEIO, .key = g[i].key };
		kvt_peer_enc_lease_entry(&c->w, &e);
	}
	free(g);
	err = kvt_wr_end(&c->w);
	if (err) {
		kvt_lease_return(s->o.leases, lease_id, c->id);
		return reply_status(c, KVT_PEER_LEASE, h->id, err);
	}
	pthread_mutex_lock(&s->mu);
	s->st.leases++;
	pthread_mutex_unlock(&s->mu);
	return send_wr(c);
}

static int serve_release(struct pconn *c, const struct kvt_frame_hdr *h)
{
	struct kvt_peer_server *s = c->srv;
	uint64_t lease_id;
	int n;

	if (!s->o.leases)
		return reply_status(c, KVT_PEER_RELEASE, h->id, -EOPNOTSUPP);
	if (kvt_peer_dec_u64(c->buf, h->len, &lease_id))
		return reply_status(c, KVT_PEER_RELEASE, h->id, -EBADMSG);
	n = kvt_lease_return(s->o.leases, lease_id, c->id);
	if (n < 0)
		return reply_status(c, KVT_PEER_RELEASE, h->id, n);
	kvt_peer_enc_u32(&c->w, KVT_PEER_RELEASE | KVT_OP_REPLY, h->id, 0, (uint32_t)n);
	return send_wr(c);
}

static int serve_qp(struct pconn *c, const struct kvt_frame_hdr *h)
{
	struct kvt_peer_server *s = c->srv;
	struct kvt_peer_ep remote, local = { 0 };
	int err;

	if (!s->o.rdma.accept_qp_cb)
		return reply_status(c, KVT_PEER_QP_CONNECT, h->id, -EOPNOTSUPP);
	if (kvt_peer_dec_ep(c->buf, h->len, &remote))
		return reply_status(c, KVT_PEER_QP_CONNECT, h->id, -EBADMSG);
	err = s->o.rdma.accept_qp_cb(s->o.rdma.arg, c->id, &remote, &local);
	if (err)
		return reply_status(c, KVT_PEER_QP_CONNECT, h->id, err);
	kvt_peer_enc_ep(&c->w, KVT_PEER_QP_CONNECT | KVT_OP_REPLY, h->id, 0, &local);
	return send_wr(c);
}

/* Wait until the connection has bytes or the server closes; false to end. */
static bool wait_request(struct pconn *c)
{
	struct pollfd p[2] = { { .fd = c->fd, .events = POLLIN },
			       { .fd = c->srv->stop_fd, .events = POLLIN } };

	for (;;) {
		int rc = poll(p, 2, -1);

		if (rc < 0 && errno == EINTR)
			continue;
		return rc > 0 && !(p[1].revents & POLLIN);
	}
}

/* An authenticated connection's requests, until it ends. */
static void *conn_thread(void *arg)
{
	struct pconn *c = arg;
	struct kvt_peer_server *s = c->srv;
	struct kvt_frame_hdr h;
	int err;

	kvt_sock_keepalive(c->fd, 30, 5);
	slog(s, KVT_LOG_DEBUG, "event=peer.conn conn=%" PRIu64 " node=%s addr=%s", c->id, c->peer,
	     c->addr);
	c->buf = malloc(KVT_PROTO_MAX_PAYLOAD);
	c->sum = aligned_alloc(_Alignof(struct kvt_sum), sizeof(*c->sum));
	if (!c->buf || !c->sum)
		goto out;
	while (wait_request(c)) {
		err = kvt_peer_recv_frame(c->fd, &h, c->buf, KVT_PROTO_MAX_PAYLOAD, deadline(s));
		if (err) {
			if (err != -ECONNRESET)
				slog(s, KVT_LOG_WARN, "event=peer.bad_stream conn=%" PRIu64
				     " node=%s err=\"%s\"", c->id, c->peer, kvt_strerror(err));
			break;
		}
		pthread_mutex_lock(&s->mu);
		s->st.requests++;
		pthread_mutex_unlock(&s->mu);
		if (h.status != 0 || (h.op & KVT_OP_REPLY)) {
			err = reply_status(c, h.op & ~KVT_OP_REPLY, h.id, -EBADMSG);
		} else {
			switch (h.op) {
			case KVT_PEER_GET:
				err = serve_get(c, &h);
				break;
			case KVT_PEER_LEASE:
				err = serve_lease(c, &h);
				break;
			case KVT_PEER_RELEASE:
				err = serve_release(c, &h);
				break;
			case KVT_PEER_QP_CONNECT:
				err = serve_qp(c, &h);
				break;
			default:
				err = reply_status(c, h.op, h.id, -EOPNOTSUPP);
			}
		}
		if (err) {
			slog(s, KVT_LOG_INFO, "event=peer.conn_lost conn=%" PRIu64 " node=%s err=\"%s\"",
			     c->id, c->peer, kvt_strerror(err));
			break;
		}
	}
out:
	if (s->o.leases)
		kvt_lease_return_owner(s->o.leases, c->id);
	if (s->o.rdma.conn_closed_cb)
		s->o.rdma.conn_closed_cb(s->o.rdma.arg, c->id);
	shutdown(c->fd, SHUT_RDWR);
	free(c->buf);
	c->buf = NULL;
	free(c->sum);
	c->sum = NULL;
	kvt_wr_free(&c->w);
	pthread_mutex_lock(&s->mu);
	c->done = true;
	s->st.conns--;
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* Join and free the connections whose thread finished (all with `all`,
 * after they were told to stop). */
static void reap(struct kvt_peer_server *s, bool all)
{
	struct pconn **p, *c, *done = NULL;

	pthread_mutex_lock(&s->mu);
	p = &s->conns;
	while ((c = *p)) {
		if (c->done || all) {
			*p = c->next;
			c->next = done;
			done = c;
		} else {
			p = &c->next;
		}
	}
	pthread_mutex_unlock(&s->mu);
	while (done) {
		c = done->next;
		pthread_join(done->thread, NULL);
		close(done->fd);
		free(done);
		done = c;
	}
}

/* A bucket of UNAUTH_MAX for the host of a (the port aside). */
static unsigned source_bucket(const struct sockaddr_storage *a)
{
	const uint8_t *p = NULL;
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	size_t len = 0;

	if (a->ss_family == AF_INET) {
		p = (const uint8_t *)&((const struct sockaddr_in *)a)->sin_addr;
		len = sizeof(struct in_addr);
	} else if (a->ss_family == AF_INET6) {
		p = (const uint8_t *)&((const struct sockaddr_in6 *)a)->sin6_addr;
		len = sizeof(struct in6_addr);
	}
	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return (unsigned)(h % UNAUTH_MAX);
}

/* Close pending handshake i and drop it from the list (the accept thread's;
 * st.conns under s->mu). */
static void pend_close(struct kvt_peer_server *s, unsigned i)
{
	struct pconn *c = s->pend[i];

	close(c->fd);
	free(c);
	memmove(&s->pend[i], &s->pend[i + 1], (s->n_pend - i - 1) * sizeof(s->pend[0]));
	s->n_pend--;
	pthread_mutex_lock(&s->mu);
	s->st.conns--;
	pthread_mutex_unlock(&s->mu);
}

/* Cut pending handshake i to make room. Counted; logged at the 1st, 2nd,
 * 4th, 8th... cut, so that a flood is told, not echoed. */
static void unauth_cut(struct kvt_peer_server *s, unsigned i, const char *why)
{
	uint64_t drops;

	pthread_mutex_lock(&s->mu);
	drops = ++s->st.unauth_dropped;
	pthread_mutex_unlock(&s->mu);
	if (!(drops & (drops - 1)))
		slog(s, KVT_LOG_WARN, "event=peer.unauth_dropped addr=%s drops=%" PRIu64
		     " reason=\"too many connections in their handshake%s\"", s->pend[i]->addr,
		     drops, why);
	pend_close(s, i);
}

/* Whether connection c's answer to its challenge waits whole, unread: a
 * node's, about to be checked. One that is garbage fails when it is read. */
static bool answer_waits(const struct pconn *c)
{
	int n = 0;

	return ioctl(c->fd, FIONREAD, &n) == 0 &&
	       n >= KVT_PROTO_HDR_BYTES + KVT_PEER_NONCE_BYTES + KVT_PEER_MAC_BYTES;
}

/* Make room for one more connection in its handshake: past max_unauth,
 * one is cut: the oldest of the address that holds the most, when it holds
 * max_unauth_per_source or more (a flood's), else the oldest of all. The
 * new one is never the one cut, nor refused: a node's connection from a
 * flooded address (the node's own host, or one it shares behind NAT) looks
 * like the flood's until its handshake proves the secret, which the flood
 * cannot do; the flood's connections, which never answer, are the older,
 * and go first. A node's connection is cut only if max_unauth more get in
 * while its handshake (a round trip) runs; one from an address holding
 * fewer than max_unauth_per_source is not cut while a flooding address
 * holds more. */
static void unauth_admit(struct kvt_peer_server *s)
{
	unsigned short *count = s->per_bucket;
	unsigned n = s->n_pend, most = 0, from = 0;
	int victim = -1;

	if (n < s->o.max_unauth)
		return;
	/* the address holding the most, by a hash of each (two addresses
	 * that share a bucket count as one: a choice of victim, not a bound) */
	memset(count, 0, sizeof(s->per_bucket));
	for (unsigned i = 0; i < n; i++) {
		unsigned b = source_bucket(&s->pend[i]->src);

		if (++count[b] > most) {
			most = count[b];
			from = b;
		}
	}
	/* its oldest, else the oldest of all; one whose answer waits to be
	 * read is passed by while another can go */
	for (int pass = 0; pass < 2 && victim < 0; pass++)
		for (unsigned k = 0; k < n && victim < 0; k++)
			if ((most < s->o.max_unauth_per_source ||
			     source_bucket(&s->pend[k]->src) == from) &&
			    (pass || !answer_waits(s->pend[k])))
				victim = (int)k;
	unauth_cut(s, (unsigned)victim, most >= s->o.max_unauth_per_source ? " from one address" :
		   "");
}

/* Pending handshake i failed (a wrong answer, silence past its deadline,
 * the end of the connection): counted, logged at the 1st, 2nd, 4th...
 * failure (a flood is told, not echoed), closed. */
static void auth_failed(struct kvt_peer_server *s, unsigned i, int err)
{
	uint64_t failures;

	pthread_mutex_lock(&s->mu);
	failures = ++s->st.auth_failures;
	pthread_mutex_unlock(&s->mu);
	if (!(failures & (failures - 1)))
		slog(s, KVT_LOG_WARN, "event=peer.auth_refused addr=%s err=\"%s\" failures=%" PRIu64,
		     s->pend[i]->addr, kvt_strerror(err), failures);
	pend_close(s, i);
}

/* Pending handshake i sent something or hung up: once its answer is whole,
 * check it and give the connection a thread; a wrong answer, or the end of
 * the connection, closes it. A partial answer waits for the rest. */
static void pend_answered(struct kvt_peer_server *s, unsigned i, short revents)
{
	struct pconn *c = s->pend[i];
	int err;

	if (!answer_waits(c) && !(revents & (POLLHUP | POLLERR))) {
		char b;

		if (recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) != 0)
			return; /* more to come */
		err = -ECONNRESET;
	} else {
		/* whole (or never): read at once; the short verdict fits the
		 * empty send buffer */
		err = kvt_peer_auth_finish(c->fd, &s->secret, s->node_id, c->nonce,
					   kvt_deadline_ms(10), c->peer);
	}
	if (!err) {
		c->srv = s;
		kvt_wr_init(&c->w);
		memmove(&s->pend[i], &s->pend[i + 1], (s->n_pend - i - 1) * sizeof(s->pend[0]));
		s->n_pend--;
		pthread_mutex_lock(&s->mu);
		/* the places are the authenticated connections' */
		if (s->st.conns - s->n_pend > s->o.max_conns) {
			s->st.refused++;
			s->st.conns--;
			pthread_mutex_unlock(&s->mu);
			close(c->fd);
			free(c);
			return;
		}
		if (pthread_create(&c->thread, NULL, conn_thread, c)) {
			s->st.conns--;
			pthread_mutex_unlock(&s->mu);
			close(c->fd);
			free(c);
			return;
		}
		c->next = s->conns;
		s->conns = c;
		pthread_mutex_unlock(&s->mu);
		return;
	}
	auth_failed(s, i, err);
}

/* Accept one connection: the challenge goes at once, and the connection
 * waits among the pending handshakes for its answer. */
static void accept_one(struct kvt_peer_server *s)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct kvt_sockaddr sa;
	struct pconn *c;
	int fd, one = 1;

	fd = accept4(s->lfd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		return; /* EAGAIN, ECONNABORTED, EMFILE: the next poll retries */
	/* replies end with small frames (a trailer, a miss): Nagle would hold
	 * them for the reader's delayed ACK */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	memcpy(&sa.ss, &ss, sizeof(ss));
	sa.len = len;
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return;
	}
	kvt_sockaddr_str(&sa, c->addr, sizeof(c->addr));
	if (kvt_peer_auth_challenge(fd, s->node_id, s->o.rdma.rkey_cb ? KVT_PEER_F_RDMA : 0,
				    kvt_deadline_ms(10), c->nonce)) {
		close(fd);
		free(c);
		return;
	}
	unauth_admit(s);
	c->fd = fd;
	c->src = ss;
	c->auth_deadline = kvt_deadline_ms(s->o.auth_timeout_ms);
	pthread_mutex_lock(&s->mu);
	c->id = ++s->next_conn;
	s->st.conns++;
	s->st.accepted++;
	pthread_mutex_unlock(&s->mu);
	s->pend[s->n_pend++] = c;
}

/* The accept thread: new connections, and the handshakes in flight, in one
 * poll. A connection gets a thread of its own only once its handshake
 * proved the cluster's secret. */
static void *accept_thread(void *arg)
{
	struct kvt_peer_server *s = arg;
	struct pollfd p[2 + UNAUTH_MAX];

	p[0] = (struct pollfd){ .fd = s->lfd, .events = POLLIN };
	p[1] = (struct pollfd){ .fd = s->stop_fd, .events = POLLIN };
	for (;;) {
		uint64_t now = kvt_now_ns(), wake = now + 1000000000ull;
		unsigned n = s->n_pend;
		int rc;

		for (unsigned i = 0; i < n; i++) {
			p[2 + i] = (struct pollfd){ .fd = s->pend[i]->fd, .events = POLLIN };
			if (s->pend[i]->auth_deadline < wake)
				wake = s->pend[i]->auth_deadline;
		}
		rc = poll(p, 2 + n, wake > now ? (int)((wake - now + 999999) / 1000000) : 0);
		if (p[1].revents & POLLIN)
			break;
		reap(s, false);
		if (rc < 0)
			continue;
		/* answers first (from the newest: closing one moves those after
		 * it), then the silent past their deadline, then new connections */
		for (unsigned i = n; i-- > 0;)
			if (p[2 + i].revents)
				pend_answered(s, i, p[2 + i].revents);
		now = kvt_now_ns();
		for (unsigned i = s->n_pend; i-- > 0;)
			if (s->pend[i]->auth_deadline <= now)
				auth_failed(s, i, -ETIMEDOUT);
		/* a few at a time: answers of those accepted are read between */
		for (int k = 0; k < 8 && (p[0].revents & POLLIN); k++)
			accept_one(s);
	}
	while (s->n_pend)
		pend_close(s, s->n_pend - 1);
	return NULL;
}

int kvt_peer_server_open(const struct kvt_peer_server_opts *o, struct kvt_peer_server **out)
{
	struct kvt_peer_server *s;
	struct kvt_sockaddr sa;
	struct rlimit rl;
	int err;

	if (!o || !out || o->size != sizeof(*o) || !o->listen || !kvt_node_id_valid(o->node_id) ||
	    !o->secret || o->secret->len < KVT_PEER_SECRET_MIN || !o->timeout_ms || !o->max_conns ||
	    !o->auth_timeout_ms || !o->max_unauth || !o->max_unauth_per_source)
		return -EINVAL;
	err = kvt_sockaddr_parse(o->listen, true, &sa);
	if (err)
		return err == -EHOSTUNREACH ? -EADDRNOTAVAIL : err;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->o = *o;
	s->o.listen = NULL;
	s->o.node_id = NULL;
	s->o.secret = NULL;
	s->secret = *o->secret;
	if (s->o.auth_timeout_ms > s->o.timeout_ms)
		s->o.auth_timeout_ms = s->o.timeout_ms;
	/* handshakes hold descriptors: an eighth of what the process may open */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    s->o.max_unauth > rl.rlim_cur / 8)
		s->o.max_unauth = rl.rlim_cur / 8 ? (unsigned)(rl.rlim_cur / 8) : 1;
	if (s->o.max_unauth > UNAUTH_MAX)
		s->o.max_unauth = UNAUTH_MAX;
	snprintf(s->node_id, sizeof(s->node_id), "%s", o->node_id);
	pthread_mutex_init(&s->mu, NULL);
	s->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->stop_fd < 0) {
		err = -errno;
		goto fail;
	}
	/* room for nodes' connects behind a burst of others, which are taken
	 * at once (each cutting an older handshake past the bound) */
	s->lfd = kvt_sock_listen(&sa, 1024);
	if (s->lfd < 0) {
		err = s->lfd;
		goto fail_efd;
	}
	s->port = kvt_sock_port(s->lfd);
	err = -pthread_create(&s->accept_thread, NULL, accept_thread, s);
	if (err)
		goto fail_lfd;
	slog(s, KVT_LOG_INFO, "event=peer.listen node=%s addr=%s port=%d", s->node_id, o->listen,
	     s->port);
	*out = s;
	return 0;
fail_lfd:
	close(s->lfd);
fail_efd:
	close(s->stop_fd);
fail:
	pthread_mutex_destroy(&s->mu);
	OPENSSL_cleanse(&s->secret, sizeof(s->secret));
	free(s);
	return err;
}

int kvt_peer_server_port(const struct kvt_peer_server *s)
{
	return s->port;
}

void kvt_peer_server_stats(struct kvt_peer_server *s, struct kvt_peer_server_stats *out)
{
	pthread_mutex_lock(&s->mu);
	*out = s->st;
	pthread_mutex_unlock(&s->mu);
}

void kvt_peer_server_close(struct kvt_peer_server *s)
{
	uint64_t one = 1;

	if (!s)
		return;
	if (write(s->stop_fd, &one, sizeof(one)) < 0) {
		/* an eventfd write only fails on overflow; the fd stays readable */
	}
	pthread_join(s->accept_thread, NULL);
	close(s->lfd);
	/* wake threads blocked in a send or a receive: their polls see it */
	pthread_mutex_lock(&s->mu);
	for (struct pconn *c = s->conns; c; c = c->next)
		shutdown(c->fd, SHUT_RDWR);
	pthread_mutex_unlock(&s->mu);
	reap(s, true);
	close(s->stop_fd);
	pthread_mutex_destroy(&s->mu);
	OPENSSL_cleanse(&s->secret, sizeof(s->secret));
	free(s);
}
