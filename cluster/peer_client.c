/* SPDX-License-Identifier: Apache-2.0 */
/* The reader's side of the peer transport (see peer_client.h). */
#include "cluster/peer_client.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "cluster/peer_io.h"
#include "transport/sockio.h"
#include "transport/wire.h"
#include "util/block_sum.h"
#include "util/log.h"

#define MAX_CONNS 64

struct peer {
	struct peer *next;
	struct kvt_sockaddr sa;
	int idle[MAX_CONNS];
	uint32_t n_idle;
	uint64_t epoch;           /* the node's epoch the pool was made under */
	uint64_t down_until;
	struct kvt_peer_stats st;
};

struct kvt_peer_client {
	struct kvt_peer_client_opts o;
	struct kvt_peer_secret secret;
	char node_id[KVT_PEER_ID_MAX + 1];
	pthread_mutex_t mu;
	struct peer *peers;
	uint64_t next_id;
};

struct kvt_peer_conn {
	int fd;
};

void kvt_peer_client_opts_init(struct kvt_peer_client_opts *opts, size_t size_bytes)
{
	memset(opts, 0, size_bytes);
	opts->size = size_bytes;
	opts->conns_per_peer = 4;
	opts->timeout_ms = 2000;
	opts->down_ms = 1000;
	opts->min_rate = 8ull << 20;
	opts->slow_down_ms = 10000;
}

#define clog_(c, lvl, ...) kvt_log_to((c)->o.log, (c)->o.log_arg, lvl, __VA_ARGS__)

int kvt_peer_client_open(const struct kvt_peer_client_opts *o, struct kvt_peer_client **out)
{
	struct kvt_peer_client *c;

	if (!o || !out || o->size != sizeof(*o) || !kvt_node_id_valid(o->node_id) || !o->secret ||
	    o->secret->len < KVT_PEER_SECRET_MIN || !o->conns_per_peer ||
	    o->conns_per_peer > MAX_CONNS || !o->timeout_ms || !o->min_rate)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->o = *o;
	c->o.node_id = NULL;
	c->o.secret = NULL;
	c->secret = *o->secret;
	snprintf(c->node_id, sizeof(c->node_id), "%s", o->node_id);
	c->next_id = 1;
	pthread_mutex_init(&c->mu, NULL);
	*out = c;
	return 0;
}

void kvt_peer_client_close(struct kvt_peer_client *c)
{
	if (!c)
		return;
	while (c->peers) {
		struct peer *p = c->peers;

		c->peers = p->next;
		for (uint32_t i = 0; i < p->n_idle; i++)
			close(p->idle[i]);
		free(p);
	}
	pthread_mutex_destroy(&c->mu);
	OPENSSL_cleanse(&c->secret, sizeof(c->secret));
	free(c);
}

/* The peer record of t, made on first use. Returns NULL with *err set. */
static struct peer *get_peer(struct kvt_peer_client *c, const struct kvt_peer_target *t, int *err)
{
	struct kvt_sockaddr sa;
	struct peer *p;

	if (!t || !kvt_node_id_valid(t->node_id) || !t->addr || strlen(t->addr) >= sizeof(p->st.addr)) {
		*err = -EINVAL;
		return NULL;
	}
	pthread_mutex_lock(&c->mu);
	for (p = c->peers; p; p = p->next)
		if (!strcmp(p->st.node_id, t->node_id) && !strcmp(p->st.addr, t->addr))
			break;
	if (p && t->epoch && t->epoch != p->epoch) {
		/* the node restarted (or rejoined): what we knew of it is stale */
		for (uint32_t i = 0; i < p->n_idle; i++)
			close(p->idle[i]);
		p->n_idle = 0;
		p->down_until = 0;
		p->epoch = t->epoch;
	}
	pthread_mutex_unlock(&c->mu);
	if (p)
		return p;
	*err = kvt_sockaddr_parse(t->addr, false, &sa); /* may resolve a name: no lock held */
	if (*err)
		return NULL;
	p = calloc(1, sizeof(*p));
	if (!p) {
		*err = -ENOMEM;
		return NULL;
	}
	p->sa = sa;
	p->epoch = t->epoch;
	snprintf(p->st.node_id, sizeof(p->st.node_id), "%s", t->node_id);
	snprintf(p->st.addr, sizeof(p->st.addr), "%s", t->addr);
	pthread_mutex_lock(&c->mu);
	/* another fetch may have made it meanwhile (a LOAD asks its holders
	 * at once): one record per peer, or its counters split */
	for (struct peer *q = c->peers; q; q = q->next)
		if (!strcmp(q->st.node_id, t->node_id) && !strcmp(q->st.addr, t->addr)) {
			pthread_mutex_unlock(&c->mu);
			free(p);
			return q;
		}
	p->next = c->peers;
	c->peers = p;
	pthread_mutex_unlock(&c->mu);
	return p;
}

/* A peer's failure: counted, and fast refusals for down_ms. */
static void peer_failed(struct kvt_peer_client *c, struct peer *p, int err)
{
	pthread_mutex_lock(&c->mu);
	if (err == -ETIMEDOUT)
		p->st.timeouts++;
	else if (err == -EACCES || err == -ESTALE)
		p->st.auth_errors++;
	else
		p->st.conn_errors++;
	if (c->o.down_ms)
		p->down_until = kvt_deadline_ms(c->o.down_ms);
	pthread_mutex_unlock(&c->mu);
	clog_(c, KVT_LOG_WARN, "event=peer.failed node=%s addr=%s err=\"%s\"", p->st.node_id,
	      p->st.addr, kvt_strerror(err));
}

/* A peer that did not deliver a fetch by its deadline (in at bytes of
 * want): counted, logged, and refused for slow_down_ms, so that the next
 * callers ask another holder or miss at once instead of waiting on it. */
static void peer_slow(struct kvt_peer_client *c, struct peer *p, uint64_t in, uint64_t want,
		      uint64_t ms)
{
	pthread_mutex_lock(&c->mu);
	p->st.slow++;
	if (c->o.slow_down_ms)
		p->down_until = kvt_deadline_ms(c->o.slow_down_ms);
	pthread_mutex_unlock(&c->mu);
	clog_(c, KVT_LOG_WARN, "event=peer.slow node=%s addr=%s bytes=%" PRIu64 " of=%" PRIu64
	      " ms=%" PRIu64 " down_ms=%u effect=miss", p->st.node_id, p->st.addr, in, want, ms,
	      c->o.slow_down_ms);
}

static bool peer_down(struct kvt_peer_client *c, struct peer *p)
{
	bool down;

	pthread_mutex_lock(&c->mu);
	down = p->down_until > kvt_now_ns();
	pthread_mutex_unlock(&c->mu);
	return down;
}

/* now + timeout_ms, or dl when that comes first (0: none). */
static uint64_t io_deadline(const struct kvt_peer_client *c, uint64_t dl)
{
	uint64_t t = kvt_deadline_ms(c->o.timeout_ms);

	return dl && dl < t ? dl : t;
}

/* A new authenticated connection to p, made by dl (0: within timeout_ms).
 * Returns the fd or -errno. */
static int dial(struct kvt_peer_client *c, struct peer *p, uint64_t dl)
{
	char server[KVT_PEER_ID_MAX + 1];
	uint32_t flags;
	int fd, err;

	dl = io_deadline(c, dl);
	fd = kvt_sock_connect(&p->sa, dl);
	if (fd < 0)
		return fd;
	err = kvt_peer_auth_client(fd, &c->secret, c->node_id, p->st.node_id, dl, server, &flags);
	if (err) {
		close(fd);
		return err;
	}
	kvt_sock_keepalive(fd, 30, 5);
	pthread_mutex_lock(&c->mu);
	p->st.connects++;
	pthread_mutex_unlock(&c->mu);
	return fd;
}

/* Whether an idle connection is still open: a peer that exited closed it
 * (its FIN is waiting), and nothing else may arrive on an idle one. */
static bool idle_alive(int fd)
{
	char b;
	ssize_t r = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);

	return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* An idle pooled connection that is still open, or a new one made by dl. */
static int checkout(struct kvt_peer_client *c, struct peer *p, uint64_t dl)
{
	for (;;) {
		int fd = -1;

		pthread_mutex_lock(&c->mu);
		if (p->n_idle)
			fd = p->idle[--p->n_idle];
		pthread_mutex_unlock(&c->mu);
		if (fd < 0)
			return dial(c, p, dl);
		if (idle_alive(fd))
			return fd;
		close(fd);
	}
}

static void checkin(struct kvt_peer_client *c, struct peer *p, int fd)
{
	pthread_mutex_lock(&c->mu);
	if (p->n_idle < c->o.conns_per_peer) {
		p->idle[p->n_idle++] = fd;
		fd = -1;
	}
	pthread_mutex_unlock(&c->mu);
	if (fd >= 0)
		close(fd);
}

static uint64_t new_id(struct kvt_peer_client *c)
{
	uint64_t id;

	pthread_mutex_lock(&c->mu);
	id = c->next_id++;
	pthread_mutex_unlock(&c->mu);
	return id;
}

/* ---- fetch ------------------------------------------------------------- */

enum fstate { F_HDR, F_META, F_DATA, F_TRAILER, F_DONE, F_FAILED };

/* One connection's share of a fetch: items [cur, end), sent in GET frames
 * of at most KVT_PEER_MAX_KEYS, one frame in flight. */
struct fconn {
	int fd;
	enum fstate state;
	size_t cur, end, frame_base, frame_end;
	uint64_t frame_id, last_progress;
	struct kvt_frame_hdr h;
	uint8_t buf[KVT_PROTO_HDR_BYTES + KVT_PEER_BLOCK_META_BYTES];
	uint8_t trailer[KVT_PEER_TRAILER_BYTES];
	size_t got;
	unsigned piece;            /* F_DATA into pieces: the one being filled */
	size_t piece_got;          /* and its bytes in */
	struct kvt_sum sum;        /* F_DATA: of the block's bytes in */
};

struct fetch {
	struct kvt_peer_client *c;
	struct peer *p;
	const struct kvt_key *salt;
	uint64_t block_bytes;
	struct kvt_peer_item *items;
	struct kvt_wr w;
	uint64_t blocks, bytes, misses, bad_sums;
	uint64_t start, deadline;  /* of the whole fetch */
	uint64_t in;               /* bytes received */
	bool slow;                 /* the deadline cut it */
	int fail_err; /* the first connection-level error */
};

static void fail_rest(struct fetch *f, struct fconn *fc, int err)
{
	for (size_t i = fc->cur; i < fc->end; i++)
		f->items[i].status = err;
	fc->cur = fc->end;
	fc->state = F_FAILED;
	if (!f->fail_err)
		f->fail_err = err;
}

/* Send the next GET frame of fc's range. */
static int send_frame(struct fetch *f, struct fconn *fc)
{
	size_t n = fc->end - fc->cur;
	struct kvt_key keys_stack[64], *keys = keys_stack;
	int err;

	if (n > KVT_PEER_MAX_KEYS)
		n = KVT_PEER_MAX_KEYS;
	if (n > 64) {
		keys = malloc(n * sizeof(*keys));
		if (!keys)
			return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		keys[i] = f->items[fc->cur + i].key;
	fc->frame_base = fc->cur;
	fc->frame_end = fc->cur + n;
	fc->frame_id = new_id(f->c);
	err = kvt_peer_enc_keys_req(&f->w, KVT_PEER_GET, fc->frame_id, f->salt, f->block_bytes, keys,
				    (uint32_t)n, 0);
	if (keys != keys_stack)
		free(keys);
	if (!err)
		err = kvt_peer_send_wr(fc->fd, &f->w, io_deadline(f->c, f->deadline));
	f->w.len = 0;
	fc->state = F_HDR;
	fc->got = 0;
	fc->last_progress = kvt_now_ns();
	return err;
}

/* The current item is settled: on to the next, or the next frame. */
static int advance(struct fetch *f, struct fconn *fc)
{
	fc->cur++;
	fc->got = 0;
	fc->state = F_HDR;
	if (fc->cur < fc->frame_end)
		return 0;
	if (fc->cur == fc->end) {
		fc->state = F_DONE;
		return 0;
	}
	return send_frame(f, fc);
}

/* A frame header and block meta are complete in fc->buf. */
static int on_meta(struct fetch *f, struct fconn *fc)
{
	struct kvt_peer_item *it = &f->items[fc->cur];
	struct kvt_peer_block b;

	if (kvt_peer_dec_block(fc->buf + KVT_PROTO_HDR_BYTES, KVT_PEER_BLOCK_META_BYTES, &b) ||
	    b.index != fc->cur - fc->frame_base || memcmp(&b.key, &it->key, sizeof(b.key)) != 0)
		return -EPROTO;
	if (fc->h.status != 0) {
		if (fc->h.status > 0 || b.data_len)
			return -EPROTO;
		it->status = fc->h.status;
		if (it->status == -ENOENT)
			f->misses++;
		return advance(f, fc);
	}
	if (b.data_len != f->block_bytes)
		return -EPROTO;
	fc->state = F_DATA;
	fc->got = 0;
	fc->piece = 0;
	fc->piece_got = 0;
	kvt_sum_begin(&fc->sum);
	return 0;
}

static uint64_t iov_bytes(const struct iovec *iov, unsigned cnt)
{
	uint64_t sum = 0;

	for (unsigned k = 0; k < cnt; k++)
		sum += iov[k].iov_len;
	return sum;
}

/* Pieces one receive of a block's bytes fills at most. */
#define SPAN_MAX 64

/* Where the rest of the current item's block goes, as at most SPAN_MAX
 * pieces: the rest of its buffer, or its pieces from the one being filled
 * on. Returns the number of pieces; *want gets their bytes. */
static unsigned data_span(const struct fetch *f, const struct fconn *fc, struct iovec *span,
			  size_t *want)
{
	const struct kvt_peer_item *it = &f->items[fc->cur];
	size_t left = f->block_bytes - fc->got;
	unsigned n = 0;

	if (!it->iov) {
		span[0] = (struct iovec){ (uint8_t *)it->dst + fc->got, left };
		*want = left;
		return 1;
	}
	*want = 0;
	for (unsigned k = fc->piece; k < it->iovcnt && n < SPAN_MAX && *want < left; k++) {
		size_t off = k == fc->piece ? fc->piece_got : 0;
		size_t len = it->iov[k].iov_len - off;

		if (len > left - *want)
			len = left - *want;
		span[n++] = (struct iovec){ (uint8_t *)it->iov[k].iov_base + off, len };
		*want += len;
	}
	return n;
}

/* r bytes came into span: hash them, and move the piece cursor on. */
static void data_landed(const struct fetch *f, struct fconn *fc, const struct iovec *span,
			size_t r)
{
	const struct kvt_peer_item *it = &f->items[fc->cur];

	for (size_t k = 0, left = r; left; k++) {
		size_t take = span[k].iov_len < left ? span[k].iov_len : left;

		kvt_sum_add(&fc->sum, span[k].iov_base, take);
		left -= take;
	}
	while (it->iov && r) {
		size_t take = it->iov[fc->piece].iov_len - fc->piece_got;

		if (take > r)
			take = r;
		fc->piece_got += take;
		r -= take;
		if (fc->piece_got == it->iov[fc->piece].iov_len) {
			fc->piece++;
			fc->piece_got = 0;
		}
	}
}

/* Bytes one connection may take per turn, so that a fast stream cannot
 * starve the others (their owners would time their sends out). */
#define TURN_BYTES (1u << 20)

/* Read what the socket has for fc, up to a turn's worth. 0 (wait for
 * more), or a connection error (the caller fails fc's remaining items). */
static int step(struct fetch *f, struct fconn *fc)
{
	size_t turn = 0;

	for (;;) {
		struct iovec span[SPAN_MAX];
		unsigned n_span = 1;
		uint8_t *dst = NULL;
		size_t want;
		ssize_t r;
		int err;

		switch (fc->state) {
		case F_HDR:
			dst = fc->buf + fc->got;
			want = KVT_PROTO_HDR_BYTES - fc->got;
			break;
		case F_META:
			dst = fc->buf + KVT_PROTO_HDR_BYTES + fc->got;
			want = KVT_PEER_BLOCK_META_BYTES - fc->got;
			break;
		case F_DATA:
			n_span = data_span(f, fc, span, &want);
			break;
		case F_TRAILER:
			dst = fc->trailer + fc->got;
			want = KVT_PEER_TRAILER_BYTES - fc->got;
			break;
		default:
			return 0;
		}
		if (turn >= TURN_BYTES)
			return 0; /* poll says whether there is more */
		r = dst ? recv(fc->fd, dst, want, 0) : readv(fc->fd, span, (int)n_span);
		if (r == 0)
			return -ECONNRESET;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? 0 : -errno;
		}
		fc->last_progress = kvt_now_ns();
		turn += (size_t)r;
		f->in += (size_t)r;
		if (fc->state == F_DATA)
			data_landed(f, fc, span, (size_t)r);
		fc->got += (size_t)r;
		if ((size_t)r < want || (fc->state == F_DATA && fc->got < f->block_bytes))
			continue;
		switch (fc->state) {
		case F_HDR:
			err = kvt_peer_hdr_decode(fc->buf, KVT_PROTO_HDR_BYTES, &fc->h);
			if (err || fc->h.op != (KVT_PEER_GET | KVT_OP_REPLY) || fc->h.id != fc->frame_id)
				return -EPROTO;
			if (fc->h.len == 0 && fc->h.status < 0) {
				/* the whole request failed (unknown namespace, ...) */
				for (size_t i = fc->cur; i < fc->frame_end; i++)
					f->items[i].status = fc->h.status;
				fc->cur = fc->frame_end - 1;
				err = advance(f, fc);
				if (err)
					return err;
				break;
			}
			if (fc->h.len != KVT_PEER_BLOCK_META_BYTES)
				return -EPROTO;
			fc->state = F_META;
			fc->got = 0;
			break;
		case F_META:
			err = on_meta(f, fc);
			if (err)
				return err;
			break;
		case F_DATA:
			fc->state = F_TRAILER;
			fc->got = 0;
			break;
		case F_TRAILER:
			if (kvt_sum_end(&fc->sum) == kvt_get_u64(fc->trailer)) {
				f->items[fc->cur].status = 0;
				f->blocks++;
				f->bytes += f->block_bytes;
			} else {
				/* wrong bytes are a miss, never data */
				f->items[fc->cur].status = -EIO;
				f->bad_sums++;
			}
			err = advance(f, fc);
			if (err)
				return err;
			break;
		default:
			break;
		}
	}
}

/* Drive every connection until its items are settled or the fetch's
 * deadline passes. A connection is timed out only when poll finds nothing
 * to read on it: time this thread spent on the others is not the peer's
 * fault. The deadline is the whole fetch's: the idle clock alone restarts
 * at every byte, so a peer trickling bytes would hold the caller for ever. */
static void run(struct fetch *f, struct fconn *fcs, size_t k)
{
	uint64_t idle = (uint64_t)f->c->o.timeout_ms * 1000000ull;
	struct pollfd pfd[MAX_CONNS];
	size_t map[MAX_CONNS];

	for (;;) {
		uint64_t now = kvt_now_ns(), wake = UINT64_MAX;
		size_t np = 0;
		int rc, ms;

		for (size_t j = 0; j < k; j++) {
			struct fconn *fc = &fcs[j];

			if (fc->state == F_DONE || fc->state == F_FAILED)
				continue;
			if (fc->last_progress + idle < wake)
				wake = fc->last_progress + idle;
			pfd[np] = (struct pollfd){ .fd = fc->fd, .events = POLLIN };
			map[np++] = j;
		}
		if (np == 0)
			return;
		if (f->deadline < wake)
			wake = f->deadline;
		ms = wake > now ? (int)((wake - now + 999999) / 1000000) : 0;
		rc = poll(pfd, np, ms);
		if (rc < 0 && errno != EINTR)
			rc = 0; /* ENOMEM and the like: the idle clock decides */
		now = kvt_now_ns();
		for (size_t i = 0; i < np; i++) {
			struct fconn *fc = &fcs[map[i]];
			int err;

			if (rc > 0 && pfd[i].revents) {
				err = step(f, fc);
				if (err)
					fail_rest(f, fc, err);
			} else if (now - fc->last_progress >= idle) {
				fail_rest(f, fc, -ETIMEDOUT);
			}
			if (fc->state != F_DONE && fc->state != F_FAILED && now >= f->deadline) {
				fail_rest(f, fc, -ETIMEDOUT);
				f->slow = true;
			}
		}
	}
}

/* How long a fetch of `bytes` may take in all, in ns: the no-progress
 * timeout, plus the bytes at the lowest rate a live peer is allowed. */
static uint64_t fetch_allowance(const struct kvt_peer_client *c, uint64_t bytes)
{
	double ns = (double)bytes / (double)c->o.min_rate * 1e9;

	/* a day at most: no overflow for any size asked */
	return (uint64_t)c->o.timeout_ms * 1000000ull + (ns < 864e11 ? (uint64_t)ns : 86400000000000ull);
}

int kvt_peer_fetch(struct kvt_peer_client *c, const struct kvt_peer_target *t,
		   const struct kvt_key *salt, uint64_t block_bytes, struct kvt_peer_item *items,
		   size_t n)
{
	struct fconn fcs[MAX_CONNS];
	struct fetch f = { .c = c, .salt = salt, .block_bytes = block_bytes, .items = items };
	size_t k, per, extra, at = 0;
	int err = 0, ok = 0;

	if (!c || !salt || (n && !items) || block_bytes == 0 || block_bytes > KVT_PEER_MAX_BLOCK)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (items[i].iov && iov_bytes(items[i].iov, items[i].iovcnt) != block_bytes) {
			for (size_t j = 0; j < n; j++)
				items[j].status = -EINVAL;
			return -EINVAL;
		}
	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		items[i].status = -EINPROGRESS;
	f.p = get_peer(c, t, &err);
	if (!f.p)
		goto fail_all;
	if (peer_down(c, f.p)) {
		err = -EHOSTDOWN;
		goto fail_all;
	}
	f.start = kvt_now_ns();
	f.deadline = f.start + fetch_allowance(c, n * block_bytes);
	k = n < c->o.conns_per_peer ? n : c->o.conns_per_peer;
	memset(fcs, 0, sizeof(fcs));
	for (size_t j = 0; j < k; j++) {
		fcs[j].fd = checkout(c, f.p, f.deadline);
		if (fcs[j].fd < 0) {
			err = fcs[j].fd;
			k = j;
			break;
		}
	}
	if (k == 0) {
		peer_failed(c, f.p, err);
		goto fail_all;
	}
	kvt_wr_init(&f.w);
	per = n / k;
	extra = n % k;
	for (size_t j = 0; j < k; j++) {
		struct fconn *fc = &fcs[j];

		fc->cur = at;
		fc->end = at + per + (j < extra);
		at = fc->end;
		err = send_frame(&f, fc);
		if (err)
			fail_rest(&f, fc, err);
	}
	run(&f, fcs, k);
	for (size_t j = 0; j < k; j++) {
		if (fcs[j].state == F_DONE)
			checkin(c, f.p, fcs[j].fd);
		else
			close(fcs[j].fd); /* mid-stream: the stream cannot be reused */
	}
	kvt_wr_free(&f.w);
	if (f.slow)
		peer_slow(c, f.p, f.in, n * block_bytes, (kvt_now_ns() - f.start) / 1000000);
	else if (f.fail_err)
		peer_failed(c, f.p, f.fail_err);
	pthread_mutex_lock(&c->mu);
	f.p->st.blocks += f.blocks;
	f.p->st.bytes += f.bytes;
	f.p->st.misses += f.misses;
	f.p->st.checksum_errors += f.bad_sums;
	pthread_mutex_unlock(&c->mu);
	if (f.bad_sums)
		clog_(c, KVT_LOG_WARN, "event=peer.checksum_mismatch node=%s blocks=%" PRIu64
		      " effect=miss", f.p->st.node_id, f.bad_sums);
	for (size_t i = 0; i < n; i++)
		ok += items[i].status == 0;
	return ok;
fail_all:
	for (size_t i = 0; i < n; i++)
		items[i].status = err;
	return 0;
}

/* ---- control requests -------------------------------------------------- */

/* Send the frame in w over a pooled connection and read one reply of op
 * `op | REPLY` with the same id into buf. */
static int rpc(struct kvt_peer_client *c, const struct kvt_peer_target *t, struct kvt_wr *w,
	       uint16_t op, uint64_t id, struct kvt_frame_hdr *h, uint8_t *buf, size_t cap)
{
	uint64_t dl = kvt_deadline_ms(c->o.timeout_ms);
	struct peer *p;
	int fd, err = 0;

	p = get_peer(c, t, &err);
	if (!p)
		return err;
	if (peer_down(c, p))
		return -EHOSTDOWN;
	fd = checkout(c, p, dl);
	if (fd < 0) {
		peer_failed(c, p, fd);
		return fd;
	}
	err = kvt_peer_exchange(fd, w, h, buf, cap, dl);
	if (!err && (h->op != (op | KVT_OP_REPLY) || h->id != id))
		err = -EPROTO;
	if (err) {
		close(fd);
		peer_failed(c, p, err);
		return err;
	}
	checkin(c, p, fd);
	return 0;
}

int kvt_peer_lease(struct kvt_peer_client *c, const struct kvt_peer_target *t,
		   const struct kvt_key *salt, uint64_t block_bytes, const struct kvt_key *keys,
		   uint32_t n, uint32_t lease_ms, struct kvt_peer_lease_entry *out,
		   uint64_t *lease_id, uint32_t *granted_ms, uint64_t *sent_ns)
{
	struct kvt_peer_lease_rep rep;
	struct kvt_frame_hdr h;
	struct kvt_wr w;
	uint8_t *buf;
	uint64_t id;
	int err;

	if (!c || !salt || !keys || !out || n == 0 || n > KVT_PEER_MAX_KEYS)
		return -EINVAL;
	buf = malloc(KVT_PROTO_MAX_PAYLOAD);
	if (!buf)
		return -ENOMEM;
	kvt_wr_init(&w);
	id = new_id(c);
	err = kvt_peer_enc_keys_req(&w, KVT_PEER_LEASE, id, salt, block_bytes, keys, n, lease_ms);
	*sent_ns = kvt_now_ns();
	if (!err)
		err = rpc(c, t, &w, KVT_PEER_LEASE, id, &h, buf, KVT_PROTO_MAX_PAYLOAD);
	if (!err && h.status)
		err = h.status < 0 ? h.status : -EPROTO;
	if (!err && (kvt_peer_dec_lease_rep(buf, h.len, &rep) || rep.n != n))
		err = -EPROTO;
	for (uint32_t i = 0; !err && i < n; i++) {
		kvt_peer_lease_entry_at(&rep, i, &out[i]);
		if (memcmp(&out[i].key, &keys[i], sizeof(keys[i])) != 0)
			err = -EPROTO; /* the owner leased another block than asked */
	}
	if (!err) {
		*lease_id = rep.lease_id;
		*granted_ms = rep.lease_ms;
	}
	kvt_wr_free(&w);
	free(buf);
	return err;
}

int kvt_peer_release(struct kvt_peer_client *c, const struct kvt_peer_target *t,
		     uint64_t lease_id)
{
	struct kvt_frame_hdr h;
	struct kvt_wr w;
	uint8_t buf[16];
	uint32_t n = 0;
	uint64_t id;
	int err;

	kvt_wr_init(&w);
	id = new_id(c);
	err = kvt_peer_enc_u64(&w, KVT_PEER_RELEASE, id, 0, lease_id);
	if (!err)
		err = rpc(c, t, &w, KVT_PEER_RELEASE, id, &h, buf, sizeof(buf));
	if (!err && h.status)
		err = h.status < 0 ? h.status : -EPROTO;
	if (!err && kvt_peer_dec_u32(buf, h.len, &n))
		err = -EPROTO;
	kvt_wr_free(&w);
	return err ? err : (int)n;
}

int kvt_peer_qp_connect(struct kvt_peer_client *c, const struct kvt_peer_target *t,
			const struct kvt_peer_ep *local, struct kvt_peer_ep *remote,
			struct kvt_peer_conn **conn)
{
	uint64_t dl = kvt_deadline_ms(c->o.timeout_ms);
	struct kvt_frame_hdr h;
	struct kvt_peer_conn *pc;
	struct kvt_wr w;
	struct peer *p;
	uint8_t buf[64];
	uint64_t id;
	int fd, err = 0;

	p = get_peer(c, t, &err);
	if (!p)
		return err;
	pc = calloc(1, sizeof(*pc));
	if (!pc)
		return -ENOMEM;
	fd = dial(c, p, dl);
	if (fd < 0) {
		free(pc);
		peer_failed(c, p, fd);
		return fd;
	}
	kvt_wr_init(&w);
	id = new_id(c);
	err = kvt_peer_enc_ep(&w, KVT_PEER_QP_CONNECT, id, 0, local);
	if (!err)
		err = kvt_peer_exchange(fd, &w, &h, buf, sizeof(buf), dl);
	if (!err && (h.op != (KVT_PEER_QP_CONNECT | KVT_OP_REPLY) || h.id != id))
		err = -EPROTO;
	if (!err && h.status)
		err = h.status < 0 ? h.status : -EPROTO;
	if (!err && kvt_peer_dec_ep(buf, h.len, remote))
		err = -EPROTO;
	kvt_wr_free(&w);
	if (err) {
		close(fd);
		free(pc);
		return err;
	}
	pc->fd = fd;
	*conn = pc;
	return 0;
}

void kvt_peer_conn_close(struct kvt_peer_conn *conn)
{
	if (!conn)
		return;
	close(conn->fd);
	free(conn);
}

int kvt_peer_client_stats(struct kvt_peer_client *c, struct kvt_peer_stats *out, size_t max)
{
	uint64_t now = kvt_now_ns();
	size_t n = 0;

	pthread_mutex_lock(&c->mu);
	for (struct peer *p = c->peers; p; p = p->next, n++)
		if (n < max) {
			out[n] = p->st;
			out[n].idle_conns = p->n_idle;
			out[n].down = p->down_until > now;
		}
	pthread_mutex_unlock(&c->mu);
	return (int)n;
}
