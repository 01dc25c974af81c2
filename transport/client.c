/* SPDX-License-Identifier: Apache-2.0 */
/* The engine-side client of kvtierd (see include/kvtier/client.h).
 *
 * Replies may come out of order, and several threads may wait on one
 * connection: each call registers a pending slot by request id, and whichever
 * waiting thread finds nobody reading becomes the reader for a while, handing
 * every frame it reads to its slot (leader/followers). A SAVE or LOAD asked
 * with pushed completions also registers its ticket's state, which the DONE
 * frames the daemon pushes update; waiting on such a ticket is waiting for
 * that state, reading frames meanwhile if no one else is. */
#include "kvtier/client.h"

#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "transport/client_int.h"
#include "transport/proto.h"
#include "util/clock.h"
#include "util/opts.h"

/* A ticket whose completions the daemon pushes (DONE frames carrying the
 * request id of its SAVE/LOAD), until its result is taken. */
struct pushed {
	uint64_t req_id;
	uint64_t ticket;            /* 0 until the SAVE/LOAD reply */
	uint32_t layers_done;
	bool done;
	int32_t result;
	struct pushed *next;
};

struct kvt_client {
	int fd;
	pthread_mutex_t send_lock; /* one frame on the wire at a time */
	pthread_mutex_t lock;      /* calls, reading, broken, next_id */
	pthread_cond_t cond;
	struct call *calls;
	struct pushed *pushed;
	bool reading;
	int broken;                /* 0 or the -errno that ended the connection */
	uint64_t next_id;
	char *token;
	enum kvt_client_completions completions;
	uint16_t version;          /* agreed at the last HELLO */
};

static const struct kvt_client_opts client_defaults = { .size = sizeof(struct kvt_client_opts) };

void kvt_client_opts_init(struct kvt_client_opts *opts, size_t size_bytes)
{
	kvt_opts_init(opts, size_bytes, &client_defaults, sizeof(client_defaults));
}

void kvt_client_desc_init(struct kvt_ns_desc *desc, size_t size_bytes)
{
	kvt_ns_desc_init(desc, size_bytes);
}

const char *kvt_client_socket_path(const struct kvt_client_opts *given, char *buf, size_t len)
{
	struct kvt_client_opts opts = client_defaults;
	const char *path;

	if (!buf || !len)
		return buf;
	if (given && kvt_opts_load(&opts, sizeof(opts), given))
		opts = client_defaults;
	path = opts.socket_path ? opts.socket_path : getenv("KVTIER_SOCKET");
	if (path && *path)
		snprintf(buf, len, "%s", path);
	else if (geteuid() == 0) /* kvtierd's own default: /run for root */
		snprintf(buf, len, "%s", KVT_CLIENT_DEFAULT_SOCKET);
	else                     /* and a per-user dir otherwise */
		snprintf(buf, len, "/tmp/kvtier-%u/kvtierd.sock", (unsigned)geteuid());
	return buf;
}

int kvt_client_connect(const struct kvt_client_opts *given, struct kvt_client **out)
{
	struct kvt_client_opts opts = client_defaults;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *token;
	char path[4096];
	struct kvt_client *c;
	int err;

	pthread_condattr_t ca;

	if (!out || kvt_opts_load(&opts, sizeof(opts), given) ||
	    (opts.completions != KVT_CLIENT_PUSHED && opts.completions != KVT_CLIENT_WAITED))
		return -EINVAL;
	kvt_client_socket_path(given, path, sizeof(path));
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	token = opts.token ? opts.token : getenv("KVTIER_TOKEN");
	c->token = strdup(token ? token : "");
	if (!c->token) {
		free(c);
		return -ENOMEM;
	}
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		err = -errno;
		goto fail_free;
	}
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa))) {
		err = -errno;
		goto fail_close;
	}
	pthread_mutex_init(&c->send_lock, NULL);
	pthread_mutex_init(&c->lock, NULL);
	/* waits with a deadline measure it on the monotonic clock */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cond, &ca);
	pthread_condattr_destroy(&ca);
	c->completions = opts.completions;
	*out = c;
	return 0;

fail_close:
	close(c->fd);
fail_free:
	free(c->token);
	free(c);
	return err;
}

void kvt_client_close(struct kvt_client *c)
{
	if (!c)
		return;
	close(c->fd);
	while (c->pushed) {
		struct pushed *p = c->pushed;

		c->pushed = p->next;
		free(p);
	}
	pthread_mutex_destroy(&c->send_lock);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->cond);
	free(c->token);
	free(c);
}

/* ---- wire -------------------------------------------------------------- */

static int send_all(struct kvt_client *c, const uint8_t *buf, size_t len, const int *fds,
		    int n_fds)
{
	union { struct cmsghdr h; char buf[CMSG_SPACE(sizeof(int) * KVT_PROTO_MAX_PARTS)]; } ctl;
	bool with_fd = n_fds > 0; /* 0..KVT_PROTO_MAX_PARTS: kvt_client_roundtrip */

	while (len) {
		struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
		ssize_t n;

		if (with_fd) {
			/* the fds ride on the first byte of the frame they belong to */
			memset(&ctl, 0, sizeof(ctl));
			msg.msg_control = ctl.buf;
			msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n_fds);
			struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n_fds);
			memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)n_fds);
		}
		n = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EPIPE ? -ECONNRESET : -errno;
		}
		with_fd = false;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

static int recv_all(struct kvt_client *c, uint8_t *buf, size_t len)
{
	while (len) {
		ssize_t n = recv(c->fd, buf, len, 0);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -ECONNRESET;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

static struct pushed *pushed_by_id(struct kvt_client *c, uint64_t req_id)
{
	for (struct pushed *p = c->pushed; p; p = p->next)
		if (p->req_id == req_id)
			return p;
	return NULL;
}

static struct pushed *pushed_by_ticket(struct kvt_client *c, uint64_t ticket)
{
	for (struct pushed *p = c->pushed; p; p = p->next)
		if (p->ticket == ticket && ticket)
			return p;
	return NULL;
}

static void pushed_drop(struct kvt_client *c, struct pushed *p)
{
	for (struct pushed **pp = &c->pushed; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			free(p);
			return;
		}
	}
}

/* A DONE frame: news of a pushed ticket. Called with c->lock. */
static int take_done(struct kvt_client *c, const struct kvt_frame_hdr *h, const uint8_t *payload)
{
	struct kvt_rep_wait rep;
	struct pushed *p = pushed_by_id(c, h->id);

	if (h->status || kvt_proto_rep_wait(payload, h->len, &rep))
		return -EBADMSG;
	if (!p || p->done)
		return 0; /* not a ticket of ours: dropped */
	if (rep.layers_done > p->layers_done)
		p->layers_done = rep.layers_done;
	if (rep.done) {
		p->done = true;
		p->result = rep.result;
	}
	return 0;
}

/* Read one frame and give it to its call (or, a DONE frame, to its pushed
 * ticket); a reply nobody waits for (its caller gave up) is dropped. Called
 * without c->lock. */
static int read_one(struct kvt_client *c)
{
	uint8_t hb[KVT_PROTO_HDR_BYTES];
	struct kvt_frame_hdr h;
	uint8_t *payload = NULL;
	int err;

	err = recv_all(c, hb, sizeof(hb));
	if (err)
		return err;
	err = kvt_proto_hdr_decode(hb, sizeof(hb), &h);
	if (err)
		return -EBADMSG;
	if (!(h.op & KVT_OP_REPLY))
		return -EBADMSG;
	payload = malloc(h.len ? h.len : 1);
	if (!payload)
		return -ENOMEM;
	err = recv_all(c, payload, h.len);
	if (err) {
		free(payload);
		return err;
	}
	pthread_mutex_lock(&c->lock);
	if (h.op == (KVT_OP_DONE | KVT_OP_REPLY)) {
		err = take_done(c, &h, payload);
		pthread_mutex_unlock(&c->lock);
		free(payload);
		return err;
	}
	for (struct call *k = c->calls; k; k = k->next) {
		if (k->id == h.id && !k->done) {
			k->hdr = h;
			k->payload = payload;
			k->done = true;
			payload = NULL;
			break;
		}
	}
	pthread_mutex_unlock(&c->lock);
	free(payload);
	return 0;
}

/* Send the frame in w (request id already set to k->id) and wait for its
 * reply. On 0, k->hdr/k->payload hold the reply (caller frees payload). */
static int call(struct kvt_client *c, struct kvt_wr *w, struct call *k, const int *fds,
		int n_fds)
{
	int err;

	pthread_mutex_lock(&c->lock);
	if (c->broken) {
		pthread_mutex_unlock(&c->lock);
		return c->broken;
	}
	k->next = c->calls;
	c->calls = k;
	pthread_mutex_unlock(&c->lock);

	pthread_mutex_lock(&c->send_lock);
	err = send_all(c, w->buf, w->len, fds, n_fds);
	pthread_mutex_unlock(&c->send_lock);

	pthread_mutex_lock(&c->lock);
	if (err && !c->broken)
		c->broken = err;
	while (!k->done && !c->broken) {
		if (c->reading) {
			pthread_cond_wait(&c->cond, &c->lock);
			continue;
		}
		c->reading = true;
		pthread_mutex_unlock(&c->lock);
		err = read_one(c);
		pthread_mutex_lock(&c->lock);
		c->reading = false;
		if (err)
			c->broken = err;
		pthread_cond_broadcast(&c->cond);
	}
	for (struct call **p = &c->calls; *p; p = &(*p)->next) {
		if (*p == k) {
			*p = k->next;
			break;
		}
	}
	err = k->done ? 0 : c->broken;
	pthread_mutex_unlock(&c->lock);
	return err;
}

uint64_t kvt_client_new_id(struct kvt_client *c)
{
	return __atomic_add_fetch(&c->next_id, 1, __ATOMIC_RELAXED);
}

int kvt_client_roundtrip(struct kvt_client *c, struct kvt_wr *w, int enc_err, struct call *k,
			 const int *fds, int n_fds, uint16_t op)
{
	int err = enc_err;

	if (!err && (n_fds < 0 || n_fds > (int)KVT_PROTO_MAX_PARTS))
		err = -EINVAL;
	if (!err)
		err = call(c, w, k, fds, n_fds);
	kvt_wr_free(w);
	if (err)
		return err;
	if ((k->hdr.op & ~KVT_OP_REPLY) != op) {
		free(k->payload);
		k->payload = NULL;
		return -EBADMSG;
	}
	if (k->hdr.status > 0 || k->hdr.status < -4095) {
		free(k->payload);
		k->payload = NULL;
		return -EBADMSG;
	}
	return k->hdr.status;
}

/* kvt_client_roundtrip with at most one fd (-1: none). */
static int roundtrip(struct kvt_client *c, struct kvt_wr *w, int enc_err, struct call *k,
		     int fd, uint16_t op)
{
	return kvt_client_roundtrip(c, w, enc_err, k, &fd, fd >= 0, op);
}

static uint64_t new_id(struct kvt_client *c)
{
	return kvt_client_new_id(c);
}

/* ---- operations -------------------------------------------------------- */

int kvt_client_hello(struct kvt_client *c, const struct kvt_ns_desc *desc,
		     struct kvt_client_ns *out)
{
	struct kvt_rep_hello rep;
	struct kvt_ns_desc d;
	struct kvt_wr w;
	struct call k = { 0 };
	int err;

	kvt_ns_desc_init(&d, sizeof(d));
	if (!c || !out || kvt_opts_load(&d, sizeof(d), desc))
		return -EINVAL;
	kvt_wr_init(&w);
	k.id = new_id(c);
	err = roundtrip(c, &w, kvt_proto_enc_hello(&w, k.id, c->token, &d), &k, -1, KVT_OP_HELLO);
	if (err)
		goto out;
	err = kvt_proto_rep_hello(k.payload, k.hdr.len, &rep);
	if (!err && (rep.version < KVT_PROTO_VERSION || rep.version > KVT_PROTO_VERSION_MAX))
		err = -EBADMSG;
	if (err)
		goto out;
	c->version = rep.version;
	memset(out, 0, sizeof(*out));
	out->handle = rep.ns;
	out->block_bytes = rep.block_bytes;
	out->salt = rep.salt;
	out->block_tokens = d.block_tokens;
	out->max_keys = rep.max_keys;
out:
	free(k.payload);
	return err;
}

int kvt_client_prefix_keys(const struct kvt_client_ns *ns, const struct kvt_key *parent,
			   const uint32_t *tokens, size_t n_tokens,
			   struct kvt_key *keys, size_t max_keys)
{
	if (!ns)
		return -EINVAL;
	return kvt_prefix_keys(ns->salt.bytes, KVT_KEY_BYTES, parent, tokens, n_tokens,
			       ns->block_tokens, keys, max_keys);
}

static int keys_op(struct kvt_client *c, uint16_t op, const struct kvt_client_ns *ns,
		   const struct kvt_key *keys, uint32_t n, uint8_t *tiers, uint32_t *load)
{
	struct kvt_rep_lookup lk;
	struct kvt_wr w;
	struct call k = { 0 };
	uint32_t count = 0;
	int err;

	if (!c || !ns || (n && !keys))
		return -EINVAL;
	if (n > KVT_PROTO_MAX_KEYS)
		return -E2BIG;
	kvt_wr_init(&w);
	k.id = new_id(c);
	err = roundtrip(c, &w, kvt_proto_enc_keys(&w, op, k.id, ns->handle, keys, n), &k, -1, op);
	if (!err && op == KVT_OP_LOOKUP) {
		err = kvt_proto_rep_lookup(k.payload, k.hdr.len, &lk);
		if (!err && lk.n != n)
			err = -EBADMSG;
		if (!err && tiers)
			memcpy(tiers, lk.tiers, n);
		if (!err && load)
			*load = lk.load;
		count = lk.hit;
	} else if (!err) {
		err = kvt_proto_rep_u32(k.payload, k.hdr.len, &count);
	}
	free(k.payload);
	if (!err && count > n)
		err = -EBADMSG;
	return err ? err : (int)count;
}

int kvt_client_lookup(struct kvt_client *c, const struct kvt_client_ns *ns,
		      const struct kvt_key *keys, uint32_t n, uint8_t *tiers)
{
	return keys_op(c, KVT_OP_LOOKUP, ns, keys, n, tiers, NULL);
}

int kvt_client_lookup_plan(struct kvt_client *c, const struct kvt_client_ns *ns,
			   const struct kvt_key *keys, uint32_t n, uint8_t *tiers,
			   uint32_t *load)
{
	if (!load)
		return -EINVAL;
	return keys_op(c, KVT_OP_LOOKUP, ns, keys, n, tiers, load);
}

int kvt_client_prefill(struct kvt_client *c, const struct kvt_client_ns *ns, uint32_t tokens,
		       uint64_t ns_elapsed)
{
	struct kvt_req_prefill p = { .tokens = tokens, .ns_elapsed = ns_elapsed };
	struct kvt_wr w;
	struct call k = { 0 };
	int err;

	if (!c || !ns || !tokens || !ns_elapsed)
		return -EINVAL;
	if (c->version < 2)
		return c->version ? -EOPNOTSUPP : -EPERM;
	p.ns = ns->handle;
	kvt_wr_init(&w);
	k.id = new_id(c);
	err = roundtrip(c, &w, kvt_proto_enc_prefill(&w, k.id, &p), &k, -1, KVT_OP_PREFILL);
	if (!err && k.hdr.len)
		err = -EBADMSG;
	free(k.payload);
	return err;
}

int kvt_client_version(const struct kvt_client *c)
{
	return c ? c->version : 0;
}

int kvt_client_pin(struct kvt_client *c, const struct kvt_client_ns *ns,
		   const struct kvt_key *keys, uint32_t n)
{
	return keys_op(c, KVT_OP_PIN, ns, keys, n, NULL, NULL);
}

int kvt_client_unpin(struct kvt_client *c, const struct kvt_client_ns *ns,
		     const struct kvt_key *keys, uint32_t n)
{
	return keys_op(c, KVT_OP_UNPIN, ns, keys, n, NULL, NULL);
}

int kvt_client_remove(struct kvt_client *c, const struct kvt_client_ns *ns,
		      const struct kvt_key *keys, uint32_t n)
{
	return keys_op(c, KVT_OP_REMOVE, ns, keys, n, NULL, NULL);
}

static int xfer(struct kvt_client *c, uint16_t op, const struct kvt_client_ns *ns,
		uint32_t region, const struct kvt_key *parent, const struct kvt_key *keys,
		const uint32_t *pages, uint32_t n, unsigned reuse_class, uint64_t *ticket)
{
	struct kvt_wr w;
	struct call k = { 0 };
	struct pushed *p = NULL;
	uint32_t layers, flags = 0;
	int err;

	if (!c || !ns || !keys || !pages || !ticket || n == 0 || reuse_class > KVT_REUSE_CLASS_MAX)
		return -EINVAL;
	/* a hint: a daemon older than version 3 is not told */
	if (op == KVT_OP_SAVE && c->version >= 3)
		flags |= (uint32_t)reuse_class << KVT_SAVE_CLASS_SHIFT;
	if (n > KVT_PROTO_MAX_KEYS)
		return -E2BIG;
	kvt_wr_init(&w);
	k.id = new_id(c);
	if (c->completions == KVT_CLIENT_PUSHED && c->version >= 2) {
		/* registered before sending: a DONE frame may follow the reply at once */
		p = calloc(1, sizeof(*p));
		if (!p) {
			kvt_wr_free(&w);
			return -ENOMEM;
		}
		p->req_id = k.id;
		flags |= KVT_XFER_PUSH | (op == KVT_OP_LOAD ? KVT_XFER_PUSH_LAYERS : 0);
		pthread_mutex_lock(&c->lock);
		p->next = c->pushed;
		c->pushed = p;
		pthread_mutex_unlock(&c->lock);
	}
	err = roundtrip(c, &w, kvt_proto_enc_xfer_flags(&w, op, k.id, ns->handle, region, parent,
							 keys, pages, n, flags), &k, -1, op);
	if (!err)
		err = op == KVT_OP_SAVE ? kvt_proto_rep_u64(k.payload, k.hdr.len, ticket) :
		      kvt_proto_rep_load(k.payload, k.hdr.len, ticket, &layers);
	if (!err && !*ticket)
		err = -EBADMSG;
	free(k.payload);
	if (p) {
		pthread_mutex_lock(&c->lock);
		if (err)
			pushed_drop(c, p);
		else
			p->ticket = *ticket;
		pthread_mutex_unlock(&c->lock);
	}
	return err;
}

int kvt_client_save(struct kvt_client *c, const struct kvt_client_ns *ns, uint32_t region,
		    const struct kvt_key *parent, const struct kvt_key *keys,
		    const uint32_t *pages, uint32_t n, uint64_t *ticket)
{
	return xfer(c, KVT_OP_SAVE, ns, region, parent, keys, pages, n, 0, ticket);
}

int kvt_client_save_class(struct kvt_client *c, const struct kvt_client_ns *ns,
			  uint32_t region, const struct kvt_key *parent,
			  const struct kvt_key *keys, const uint32_t *pages, uint32_t n,
			  unsigned reuse_class, uint64_t *ticket)
{
	return xfer(c, KVT_OP_SAVE, ns, region, parent, keys, pages, n, reuse_class, ticket);
}

int kvt_client_load(struct kvt_client *c, const struct kvt_client_ns *ns, uint32_t region,
		    const struct kvt_key *keys, const uint32_t *pages, uint32_t n,
		    uint64_t *ticket)
{
	return xfer(c, KVT_OP_LOAD, ns, region, NULL, keys, pages, n, 0, ticket);
}

static int wait_op(struct kvt_client *c, uint16_t op, uint64_t ticket, uint32_t layer,
		   int timeout_ms, struct kvt_rep_wait *rep)
{
	struct kvt_wr w;
	struct call k = { 0 };
	uint32_t tmo = timeout_ms < 0 ? KVT_WAIT_FOREVER : (uint32_t)timeout_ms;
	int err, dec;

	if (!c)
		return -EINVAL;
	kvt_wr_init(&w);
	k.id = new_id(c);
	err = roundtrip(c, &w, kvt_proto_enc_wait(&w, op, k.id, ticket, layer, tmo), &k, -1, op);
	/* WAIT and POLL carry the ticket's state even with a timeout status */
	if ((!err || err == -ETIMEDOUT) && k.payload) {
		dec = kvt_proto_rep_wait(k.payload, k.hdr.len, rep);
		if (dec)
			err = dec;
	}
	free(k.payload);
	return err;
}

/* Whether the pushed ticket p is done, or has layer in place. */
static bool pushed_ready(const struct pushed *p, uint32_t layer)
{
	return p->done || (layer != KVT_WAIT_ALL && p->layers_done > layer);
}

/* Wait (with c->lock held) until pushed ticket is ready for layer, reading
 * frames when no other thread is; timeout_ms < 0 waits forever, 0 only takes
 * the frames already there. Returns 0 and *out, -ETIMEDOUT (*out set too),
 * -ENOENT (another thread took its result), or the error that broke the
 * connection. */
static int pushed_wait(struct kvt_client *c, uint64_t ticket, uint32_t layer, int timeout_ms,
		       struct pushed **out)
{
	uint64_t deadline = kvt_now_ns() + (timeout_ms > 0 ? (uint64_t)timeout_ms * 1000000 : 0);
	struct pushed *p;

	/* looked up again after each read: the lock was let go meanwhile */
	while ((*out = p = pushed_by_ticket(c, ticket)) && !pushed_ready(p, layer)) {
		uint64_t now = kvt_now_ns();
		struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
		int left, r, err;

		if (c->broken)
			return c->broken;
		if (timeout_ms > 0 && now >= deadline)
			return -ETIMEDOUT;
		if (c->reading) {
			struct timespec ts = { .tv_sec = (time_t)(deadline / 1000000000),
					       .tv_nsec = (long)(deadline % 1000000000) };

			if (timeout_ms == 0)
				return -ETIMEDOUT;
			if (timeout_ms < 0)
				pthread_cond_wait(&c->cond, &c->lock);
			else
				pthread_cond_timedwait(&c->cond, &c->lock, &ts);
			continue;
		}
		/* nobody reads: this thread does, until its news or its deadline */
		c->reading = true;
		pthread_mutex_unlock(&c->lock);
		left = timeout_ms < 0 ? -1 : timeout_ms == 0 ? 0 :
		       (int)((deadline - now + 999999) / 1000000);
		r = poll(&pfd, 1, left);
		err = r > 0 ? read_one(c) : r < 0 && errno != EINTR ? -errno : 0;
		pthread_mutex_lock(&c->lock);
		c->reading = false;
		if (err && !c->broken)
			c->broken = err;
		pthread_cond_broadcast(&c->cond);
		if (r == 0 && timeout_ms == 0) {
			*out = p = pushed_by_ticket(c, ticket);
			return !p ? -ENOENT : pushed_ready(p, layer) ? 0 : -ETIMEDOUT;
		}
	}
	return p ? 0 : -ENOENT;
}

/* Wait on ticket's pushed state, when it has one: returns true and *err (0,
 * or for a whole-ticket wait the result, taken), or false for a ticket not
 * pushed, which the daemon is asked about. */
static bool wait_pushed(struct kvt_client *c, uint64_t ticket, uint32_t layer, int timeout_ms,
			int *err)
{
	struct pushed *p;
	bool pushed;

	pthread_mutex_lock(&c->lock);
	pushed = pushed_by_ticket(c, ticket) != NULL;
	if (pushed) {
		*err = pushed_wait(c, ticket, layer, timeout_ms, &p);
		if (!*err && layer == KVT_WAIT_ALL) {
			*err = p->result;
			pushed_drop(c, p);
		}
	}
	pthread_mutex_unlock(&c->lock);
	return pushed;
}

int kvt_client_wait(struct kvt_client *c, uint64_t ticket, int timeout_ms)
{
	struct kvt_rep_wait rep;
	int err;

	if (!c)
		return -EINVAL;
	if (wait_pushed(c, ticket, KVT_WAIT_ALL, timeout_ms, &err))
		return err;
	err = wait_op(c, KVT_OP_WAIT, ticket, KVT_WAIT_ALL, timeout_ms, &rep);
	if (err)
		return err;
	return rep.done ? rep.result : -EBADMSG;
}

int kvt_client_wait_layer(struct kvt_client *c, uint64_t ticket, uint32_t layer,
			  int timeout_ms)
{
	struct kvt_rep_wait rep;
	int err;

	if (!c || layer == KVT_WAIT_ALL)
		return -EINVAL;
	if (wait_pushed(c, ticket, layer, timeout_ms, &err))
		return err;
	return wait_op(c, KVT_OP_WAIT, ticket, layer, timeout_ms, &rep);
}

int kvt_client_poll(struct kvt_client *c, uint64_t ticket, int *result, uint32_t *layers_done)
{
	struct kvt_rep_wait rep;
	struct pushed *p;
	int err;

	if (!c)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	if (pushed_by_ticket(c, ticket)) {
		/* take the frames already there, without waiting */
		err = pushed_wait(c, ticket, KVT_WAIT_ALL, 0, &p);
		if (err == -ETIMEDOUT)
			err = 0;
		if (!err && layers_done)
			*layers_done = p->layers_done;
		if (!err && p->done) {
			if (result)
				*result = p->result;
			pushed_drop(c, p);
			err = 1;
		}
		pthread_mutex_unlock(&c->lock);
		return err;
	}
	pthread_mutex_unlock(&c->lock);
	err = wait_op(c, KVT_OP_POLL, ticket, KVT_WAIT_ALL, 0, &rep);
	if (err)
		return err;
	if (layers_done)
		*layers_done = rep.layers_done;
	if (rep.done && result)
		*result = rep.result;
	return rep.done ? 1 : 0;
}

int kvt_client_stats(struct kvt_client *c, char **json)
{
	struct kvt_wr w;
	struct call k = { 0 };
	int err;

	if (!c || !json)
		return -EINVAL;
	kvt_wr_init(&w);
	k.id = new_id(c);
	/* the client's token, if it has one, asks for its tenant's figures too */
	err = roundtrip(c, &w, kvt_proto_enc_blob(&w, KVT_OP_STATS, k.id, c->token,
						  (uint32_t)strlen(c->token)), &k, -1, KVT_OP_STATS);
	if (err) {
		free(k.payload);
		return err;
	}
	*json = realloc(k.payload, (size_t)k.hdr.len + 1);
	if (!*json) {
		free(k.payload);
		return -ENOMEM;
	}
	(*json)[k.hdr.len] = 0;
	return 0;
}

int kvt_client_ping(struct kvt_client *c, const void *data, size_t len)
{
	struct kvt_wr w;
	struct call k = { 0 };
	int err;

	if (!c || (len && !data) || len > KVT_PROTO_MAX_PING)
		return -EINVAL;
	kvt_wr_init(&w);
	k.id = new_id(c);
	err = roundtrip(c, &w, kvt_proto_enc_blob(&w, KVT_OP_PING, k.id, data, (uint32_t)len), &k,
			-1, KVT_OP_PING);
	if (!err && (k.hdr.len != len || (len && memcmp(k.payload, data, len))))
		err = -EBADMSG;
	free(k.payload);
	return err;
}
