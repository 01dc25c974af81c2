/* SPDX-License-Identifier: Apache-2.0 */
/* The peer tier: a storage tier whose lookups go to the directory and whose
 * reads by key go to the holders over the peer transport (TCP, or RDMA
 * under leases). See peer_tier.h. */
#include "cluster/peer_tier.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tiers/tier.h"
#include "util/clock.h"
#include "util/log.h"

/* Holders a lookup found, kept for the lookups and the reads that follow
 * it (the engine's LOOKUP of a whole prefix, then its LOAD's windows, each
 * of which looks up and reads its own keys): open addressing by the key's
 * first bytes (keys are digests), HELD_PROBE slots a key, room for the
 * longest lookup; an entry is taken by the read that uses it. The holder
 * lists are kept apart, once for each run of keys that shares one (a
 * prefix's blocks mostly do), so an entry is small. */
#define HELD_SLOTS KVT_DIR_MAX_LOOKUP_KEYS
#define HELD_PROBE 8
#define HELD_SETS 1024u
/* A lookup's holders older than this are asked of the directory again. */
#define HELD_FRESH_NS 1000000000ull

struct held {
	struct kvt_key key;
	uint64_t at_ns;            /* 0: empty */
	uint64_t set;              /* its holders: sets[set % HELD_SETS], if still there */
};

struct held_set {
	uint64_t seq;              /* 0: never used */
	struct kvt_dir_holders h;
};

struct kvt_peer_tier {
	struct kvt_storage_tier base; /* first: the store's pointer is this */
	struct kvt_peer_tier_opts opts;
	struct kvt_peer_tier_stats st; /* atomic */
	bool rdma_ok;                 /* the store's region is registered */
	pthread_mutex_t held_mu;
	struct held *held;
	struct held_set *sets;
	uint64_t last_set;            /* held_mu: the newest set's seq */
	uint64_t in_flight;           /* holder requests now (atomic) */
};

/* A read batch in flight: its records' holders and transfer items. */
struct rd {
	struct kvt_dir_holders *hs;
	struct kvt_peer_item *items; /* a holder's share, gathered */
	size_t *idx;                 /* items[j] is record idx[j] */
	uint8_t *tried;              /* holders asked, per record */
	struct req *reqs;            /* a round's requests */
	/* with RDMA: a request's keys, its lease, its READs (of items[ridx[j]]) */
	struct kvt_key *keys;
	struct kvt_peer_lease_entry *lease;
	struct kvt_rdma_item *ritems;
	size_t *ridx;
};

#define ADD(field, v) __atomic_add_fetch(&pt->st.field, (uint64_t)(v), __ATOMIC_RELAXED)

static struct kvt_peer_tier *pt_of(struct kvt_storage_tier *t)
{
	return (struct kvt_peer_tier *)t;
}

#define logf_(pt, lvl, ...) kvt_log_to((pt)->opts.log, (pt)->opts.log_arg, lvl, __VA_ARGS__)

/* ---- holders a lookup found ------------------------------------------------ */

static size_t held_home(const struct kvt_key *key)
{
	uint32_t h;

	memcpy(&h, key->bytes, sizeof(h));
	return h & (HELD_SLOTS - 1);
}

static bool same_holders(const struct kvt_dir_holders *a, const struct kvt_dir_holders *b)
{
	if (a->n != b->n)
		return false;
	for (uint32_t i = 0; i < a->n; i++)
		if (a->h[i].epoch != b->h[i].epoch || a->h[i].tier != b->h[i].tier ||
		    strcmp(a->h[i].node, b->h[i].node) || strcmp(a->h[i].addr, b->h[i].addr))
			return false;
	return true;
}

/* key's entry, fresh at now, whose holders are still kept; NULL if none
 * (held_mu held). */
static struct held *held_find(struct kvt_peer_tier *pt, const struct kvt_key *key, uint64_t now)
{
	size_t home = held_home(key);

	for (size_t p = 0; p < HELD_PROBE; p++) {
		struct held *e = &pt->held[(home + p) & (HELD_SLOTS - 1)];

		if (e->at_ns && now - e->at_ns < HELD_FRESH_NS &&
		    !memcmp(e->key.bytes, key->bytes, KVT_KEY_BYTES))
			return pt->sets[e->set % HELD_SETS].seq == e->set ? e : NULL;
	}
	return NULL;
}

/* The slot for key: its own entry, else an empty or stale one, else the
 * oldest of its probe (held_mu held). */
static struct held *held_slot(struct kvt_peer_tier *pt, const struct kvt_key *key, uint64_t now)
{
	size_t home = held_home(key);
	struct held *free_e = NULL, *oldest = NULL;

	for (size_t p = 0; p < HELD_PROBE; p++) {
		struct held *e = &pt->held[(home + p) & (HELD_SLOTS - 1)];

		if (e->at_ns && !memcmp(e->key.bytes, key->bytes, KVT_KEY_BYTES))
			return e;
		if (!free_e && (!e->at_ns || now - e->at_ns >= HELD_FRESH_NS))
			free_e = e;
		if (!oldest || e->at_ns < oldest->at_ns)
			oldest = e;
	}
	return free_e ? free_e : oldest;
}

static void held_put(struct kvt_peer_tier *pt, const struct kvt_key *keys,
		     const struct kvt_dir_holders *hs, size_t n)
{
	uint64_t now = kvt_now_ns();

	pthread_mutex_lock(&pt->held_mu);
	for (size_t i = 0; i < n; i++) {
		struct held_set *last = &pt->sets[pt->last_set % HELD_SETS];
		struct held *e;

		if (!pt->last_set || last->seq != pt->last_set || !same_holders(&last->h, &hs[i])) {
			last = &pt->sets[++pt->last_set % HELD_SETS];
			last->seq = pt->last_set;
			last->h = hs[i];
		}
		e = held_slot(pt, &keys[i], now);
		e->key = keys[i];
		e->at_ns = now;
		e->set = pt->last_set;
	}
	pthread_mutex_unlock(&pt->held_mu);
}

/* The holders of key a lookup found in the last HELD_FRESH_NS, taken (a
 * later read asks the directory, which may know better by then). */
static bool held_take(struct kvt_peer_tier *pt, const struct kvt_key *key, uint64_t now,
		      struct kvt_dir_holders *out)
{
	struct held *e;

	pthread_mutex_lock(&pt->held_mu);
	e = held_find(pt, key, now);
	if (e) {
		*out = pt->sets[e->set % HELD_SETS].h;
		e->at_ns = 0;
	}
	pthread_mutex_unlock(&pt->held_mu);
	return e != NULL;
}

/* How many leading keys a lookup of the last HELD_FRESH_NS found held
 * (left for the reads). */
static size_t held_prefix(struct kvt_peer_tier *pt, const struct kvt_key *keys, size_t n)
{
	uint64_t now = kvt_now_ns();
	size_t i = 0;

	pthread_mutex_lock(&pt->held_mu);
	while (i < n && held_find(pt, &keys[i], now))
		i++;
	pthread_mutex_unlock(&pt->held_mu);
	return i;
}

/* ---- lookup ---------------------------------------------------------------- */

/* The prefix of keys[0..n) other nodes hold, asked of the directory in
 * pieces of at most KVT_DIR_MAX_LOOKUP_KEYS (one round trip each, the next
 * only when the last was held whole): no length is cut short. */
static int op_lookup(struct kvt_storage_tier *t, uint64_t ns_id, const struct kvt_key *keys,
		     size_t n)
{
	struct kvt_peer_tier *pt = pt_of(t);
	size_t piece = n < KVT_DIR_MAX_LOOKUP_KEYS ? n : KVT_DIR_MAX_LOOKUP_KEYS;
	struct kvt_dir_holders *hs;
	struct kvt_dir_stats ds;
	size_t found = 0;

	(void)ns_id; /* keys carry their namespace's salt */
	if (!n || n > INT32_MAX)
		return 0;
	ADD(lookups, 1);
	ADD(lookup_keys, n);
	/* what a lookup just found is not asked again (a LOAD's windows look
	 * up the keys its LOOKUP found a moment ago), while the directory is
	 * there to ask: without it the node is local-only at once */
	kvt_dir_stats(pt->opts.dir, &ds);
	found = ds.reachable ? held_prefix(pt, keys, n) : 0;
	ADD(lookup_cached_keys, found);
	hs = found < n ? malloc(piece * sizeof(*hs)) : NULL;
	while (found < n && hs) {
		size_t m = n - found < piece ? n - found : piece;
		int r = kvt_dir_lookup(pt->opts.dir, keys + found, m, hs);

		if (r < 0) {
			ADD(lookup_unanswered, 1);
			break;
		}
		if (r > 0)
			held_put(pt, keys + found, hs, (size_t)r);
		found += (size_t)r;
		if ((size_t)r < m)
			break;
	}
	free(hs);
	ADD(lookup_remote_keys, found);
	return (int)found;
}

/* ---- reads by key ------------------------------------------------------------ */

/* Holders of every record by key: those a lookup just found, the rest from
 * the directory in one round trip. A record nobody holds gets -ENOENT, and
 * every record without holders a res; the others keep -EINPROGRESS. */
static void find_holders(struct kvt_peer_tier *pt, struct kvt_tier_batch *b, struct rd *rd)
{
	uint64_t now = kvt_now_ns();
	struct kvt_key *ask;
	size_t n_ask = 0;
	int r;

	for (size_t i = 0; i < b->n; i++) {
		struct kvt_tier_io *io = &b->io[i];

		rd->hs[i].n = 0;
		if (io->res != -EINPROGRESS)
			continue;
		if (!held_take(pt, &io->key, now, &rd->hs[i]))
			rd->idx[n_ask++] = i;
	}
	if (!n_ask)
		goto named;
	ask = malloc(n_ask * sizeof(*ask));
	r = -ENOMEM;
	if (ask) {
		for (size_t j = 0; j < n_ask; j++)
			ask[j] = b->io[rd->idx[j]].key;
		/* the holders land in the gathered order, then go to their
		 * records; every key is asked, held or not, in pieces the
		 * directory takes */
		r = 0;
		for (size_t j = 0; j < n_ask && r >= 0; j += KVT_DIR_MAX_LOOKUP_KEYS)
			r = kvt_dir_lookup(pt->opts.dir, ask + j,
					   n_ask - j < KVT_DIR_MAX_LOOKUP_KEYS ?
						   n_ask - j : KVT_DIR_MAX_LOOKUP_KEYS,
					   rd->hs + b->n + j);
		free(ask);
	}
	if (r < 0) {
		ADD(lookup_unanswered, 1);
		for (size_t j = 0; j < n_ask; j++)
			b->io[rd->idx[j]].res = r == -ENOMEM ? -ENOMEM : r == -ETIMEDOUT ?
						 -ETIMEDOUT : -ENOTCONN;
		return;
	}
	for (size_t j = 0; j < n_ask; j++)
		rd->hs[rd->idx[j]] = rd->hs[b->n + j];
named:
	for (size_t i = 0; i < b->n; i++)
		if (b->io[i].res == -EINPROGRESS && rd->hs[i].n == 0)
			b->io[i].res = -ENOENT;
}

/* Whether record j may go in the same request as record i: same holder at
 * attempt a, same namespace, same block size. */
static bool same_request(const struct kvt_tier_batch *b, const struct rd *rd, size_t i, size_t j,
			 uint32_t a)
{
	const struct kvt_tier_io *x = &b->io[i], *y = &b->io[j];

	return rd->hs[j].n > a && !strcmp(rd->hs[i].h[a].node, rd->hs[j].h[a].node) &&
	       x->len == y->len && !memcmp(x->ns_salt, y->ns_salt, sizeof(*x->ns_salt));
}

/* Read items[0..m) from tg by RDMA: a lease on them over the control
 * channel, READs of the leased slots, the lease returned. Sets every
 * item's status; returns 0, or -EOPNOTSUPP with nothing done when the
 * holder lends nothing by RDMA (no NIC, or no room for the lease). */
static int rdma_read(struct kvt_peer_tier *pt, struct rd *rd, size_t m,
		     const struct kvt_peer_target *tg, const struct kvt_key *salt, uint64_t len)
{
	char peer[KVT_NODE_ID_MAX + KVT_NODE_ADDR_MAX + 2];
	uint64_t lease_id, sent_ns, until;
	uint32_t granted_ms;
	size_t nr = 0, ok = 0;
	int err;

	for (size_t k = 0; k < m; k++)
		rd->keys[k] = rd->items[k].key;
	err = kvt_peer_lease(pt->opts.client, tg, salt, len, rd->keys, (uint32_t)m,
			     pt->opts.rdma_lease_ms, rd->lease, &lease_id, &granted_ms, &sent_ns);
	if (err == -EOPNOTSUPP || err == -ENOSPC) {
		ADD(rdma_fallbacks, 1);
		return -EOPNOTSUPP;
	}
	/* the lease is counted from when it was asked for: the owner's clock
	 * started later, so it held the blocks at least this long */
	until = err ? 0 : sent_ns + (uint64_t)granted_ms * 1000000ull;
	for (size_t k = 0; k < m; k++) {
		const struct kvt_peer_lease_entry *e = &rd->lease[k];

		rd->items[k].status = err ? err : e->status ? e->status : e->len != len ? -EPROTO : 0;
		if (rd->items[k].status)
			continue;
		rd->ritems[nr] = (struct kvt_rdma_item){ .dst = rd->items[k].dst, .remote = e->addr,
							 .rkey = e->rkey, .len = (uint32_t)len,
							 .xxh3 = e->xxh3, .valid_until_ns = until };
		rd->ridx[nr++] = k;
	}
	if (err)
		return 0;
	snprintf(peer, sizeof(peer), "%s@%s", tg->node_id, tg->addr);
	if (nr)
		kvt_rdma_read(pt->opts.rdma, peer, rd->ritems, nr, pt->opts.rdma_timeout_ms);
	for (size_t j = 0; j < nr; j++) {
		rd->items[rd->ridx[j]].status = rd->ritems[j].status;
		ok += !rd->ritems[j].status;
	}
	kvt_peer_release(pt->opts.client, tg, lease_id); /* else it expires */
	ADD(rdma_blocks, ok);
	return 0;
}

/* Fetch items[0..m) from tg into their dst: by RDMA where the tier reads
 * so and the holder lends by it, else over TCP. */
static void transfer(struct kvt_peer_tier *pt, struct rd *rd, size_t m,
		     const struct kvt_peer_target *tg, const struct kvt_key *salt, uint64_t len)
{
	/* a tier reading by RDMA is given no pieces (it lacks KVT_TIER_CAP_READ_IOV) */
	if (pt->rdma_ok && rdma_read(pt, rd, m, tg, salt, len) == 0)
		return;
	kvt_peer_fetch(pt->opts.client, tg, salt, len, rd->items, m);
}

/* One request of a read round: a holder's run of records, gathered into
 * the rd arrays at [off, off + m), fetched on lane `lane`. */
struct req {
	size_t i, off, m;         /* first record, where its items lie, how many */
	uint32_t lane;
};

/* Gather the request of holder a of record i: it and every record still
 * unserved the same holder has (up to KVT_PEER_MAX_KEYS blocks), into the
 * arrays at off. Returns the number gathered. */
static size_t gather(struct kvt_tier_batch *b, struct rd *rd, size_t i, uint32_t a, size_t off)
{
	size_t m = 0;

	for (size_t j = i; j < b->n && m < KVT_PEER_MAX_KEYS; j++) {
		if (b->io[j].res != -EINPROGRESS || rd->tried[j] != a || !same_request(b, rd, i, j, a))
			continue;
		rd->tried[j]++;
		rd->idx[off + m] = j;
		rd->items[off + m++] = (struct kvt_peer_item){ .key = b->io[j].key, .dst = b->io[j].buf,
							       .iov = b->io[j].iov,
							       .iovcnt = b->io[j].iovcnt };
	}
	return m;
}

/* A holder request in flight: counted, and the most at once kept. */
static void in_flight(struct kvt_peer_tier *pt, int d)
{
	uint64_t now = __atomic_add_fetch(&pt->in_flight, (uint64_t)(int64_t)d, __ATOMIC_RELAXED);
	uint64_t max = __atomic_load_n(&pt->st.fetching_max, __ATOMIC_RELAXED);

	while (d > 0 && now > max &&
	       !__atomic_compare_exchange_n(&pt->st.fetching_max, &max, now, false,
					    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

/* Fetch request q (attempt a) and settle its records: a record a holder
 * failed keeps -EINPROGRESS when it has a next holder, else gets why. */
static void fetch_req(struct kvt_peer_tier *pt, struct kvt_tier_batch *b, const struct rd *rd,
		      const struct req *q, uint32_t a)
{
	const struct kvt_dir_holder *h = &rd->hs[q->i].h[a];
	struct kvt_peer_target tg = { .node_id = h->node, .addr = h->addr, .epoch = h->epoch };
	/* this request's share of the arrays: other lanes use the rest */
	struct rd v = *rd;
	size_t ok = 0, failed = 0;
	uint64_t t0 = kvt_now_ns(), lat;
	int why = 0;

	v.items += q->off;
	v.idx += q->off;
	if (pt->rdma_ok) {
		v.keys += q->off;
		v.lease += q->off;
		v.ritems += q->off;
		v.ridx += q->off;
	}
	if (a)
		ADD(retries, q->m);
	in_flight(pt, 1);
	transfer(pt, &v, q->m, &tg, b->io[q->i].ns_salt, b->io[q->i].len);
	in_flight(pt, -1);
	lat = kvt_now_ns() - t0;
	for (size_t k = 0; k < q->m; k++) {
		struct kvt_tier_io *io = &b->io[v.idx[k]];
		int st = v.items[k].status;

		io->lat_ns = lat;
		if (!st) {
			io->res = 0;
			ok++;
			continue;
		}
		if (st != -ENOENT) {
			failed++;
			why = st;
		}
		/* asked of the next holder, if it has one; else this is why */
		if (rd->hs[v.idx[k]].n <= a + 1u)
			io->res = st == -EIO ? -EBADMSG : st;
	}
	ADD(blocks, ok);
	ADD(bytes, ok * b->io[q->i].len);
	ADD(errors, failed);
	if (failed)
		logf_(pt, KVT_LOG_DEBUG, "event=peer.fetch.failed node=%s addr=%s blocks=%zu "
		      "err=\"%s\"", h->node, h->addr, failed, kvt_strerror(why));
}

/* Holders one read round fetches from at once: one lane each (a holder's
 * requests go one after another on its lane, whose peer client spreads
 * each over its connections); past this many, lanes are shared. */
#define MAX_LANES 8

struct lane {
	struct kvt_peer_tier *pt;
	struct kvt_tier_batch *b;
	const struct rd *rd;
	const struct req *reqs;
	size_t n_req;
	uint32_t a, id;
	pthread_t th;
};

static void *lane_main(void *arg)
{
	struct lane *l = arg;

	for (size_t r = 0; r < l->n_req; r++)
		if (l->reqs[r].lane == l->id)
			fetch_req(l->pt, l->b, l->rd, &l->reqs[r], l->a);
	return NULL;
}

/* Round a: every record still unserved whose holder a exists is asked of
 * it, each holder's run in one request, the holders at once (a lane
 * thread each, the first on the calling thread): a reader takes a prefix
 * spread over several nodes at the rate of all their links, not of one
 * after another. */
static void fetch_round(struct kvt_peer_tier *pt, struct kvt_tier_batch *b, struct rd *rd,
			uint32_t a)
{
	struct lane lanes[MAX_LANES];
	const char *lane_node[MAX_LANES];
	bool started[MAX_LANES] = { false };
	uint32_t n_lanes = 0;
	size_t n_req = 0, off = 0;

	for (size_t i = 0; i < b->n; i++) {
		struct req *q = &rd->reqs[n_req];
		uint32_t l;

		if (b->io[i].res != -EINPROGRESS || rd->tried[i] != a || rd->hs[i].n <= a)
			continue;
		q->i = i;
		q->off = off;
		q->m = gather(b, rd, i, a, off);
		off += q->m;
		for (l = 0; l < n_lanes; l++)
			if (!strcmp(lane_node[l], rd->hs[i].h[a].node))
				break;
		if (l == n_lanes && n_lanes < MAX_LANES)
			lane_node[n_lanes++] = rd->hs[i].h[a].node;
		q->lane = l < n_lanes ? l : (uint32_t)(n_req % MAX_LANES);
		n_req++;
	}
	if (n_lanes > 1)
		ADD(parallel_rounds, 1);
	for (uint32_t l = 0; l < n_lanes; l++) {
		lanes[l] = (struct lane){ .pt = pt, .b = b, .rd = rd, .reqs = rd->reqs,
					  .n_req = n_req, .a = a, .id = l };
		/* a lane that cannot have a thread runs on this one */
		started[l] = l > 0 && pthread_create(&lanes[l].th, NULL, lane_main, &lanes[l]) == 0;
	}
	for (uint32_t l = 0; l < n_lanes; l++)
		if (!started[l])
			lane_main(&lanes[l]);
	for (uint32_t l = 0; l < n_lanes; l++)
		if (started[l])
			pthread_join(lanes[l].th, NULL);
}

static void rd_free(struct rd *rd)
{
	if (!rd)
		return;
	free(rd->hs);
	free(rd->items);
	free(rd->idx);
	free(rd->tried);
	free(rd->reqs);
	free(rd->keys);
	free(rd->lease);
	free(rd->ritems);
	free(rd->ridx);
	free(rd);
}

static int op_submit(struct kvt_storage_tier *t, struct kvt_tier_batch *b)
{
	struct kvt_peer_tier *pt = pt_of(t);
	struct rd *rd;
	size_t n = b->n;
	int err = 0;

	b->priv = NULL;
	/* the tier takes no writes: it holds nothing of this node's */
	if (b->write)
		err = -EROFS;
	rd = err ? NULL : calloc(1, sizeof(*rd));
	if (rd) {
		/* room for the holders of every record, twice (see find_holders) */
		rd->hs = malloc(2 * (n ? n : 1) * sizeof(*rd->hs));
		rd->items = malloc((n ? n : 1) * sizeof(*rd->items));
		rd->idx = malloc((n ? n : 1) * sizeof(*rd->idx));
		rd->tried = calloc(n ? n : 1, 1);
		rd->reqs = malloc((n ? n : 1) * sizeof(*rd->reqs));
		if (pt->rdma_ok) {
			rd->keys = malloc((n ? n : 1) * sizeof(*rd->keys));
			rd->lease = malloc((n ? n : 1) * sizeof(*rd->lease));
			rd->ritems = malloc((n ? n : 1) * sizeof(*rd->ritems));
			rd->ridx = malloc((n ? n : 1) * sizeof(*rd->ridx));
		}
	}
	if (!err && (!rd || !rd->hs || !rd->items || !rd->idx || !rd->tried || !rd->reqs ||
		     (pt->rdma_ok && (!rd->keys || !rd->lease || !rd->ritems || !rd->ridx))))
		err = -ENOMEM;
	if (err) {
		rd_free(rd);
		for (size_t i = 0; i < n; i++)
			b->io[i].res = err;
		return err;
	}
	ADD(fetches, 1);
	for (size_t i = 0; i < n; i++) {
		struct kvt_tier_io *io = &b->io[i];

		io->lat_ns = 0;
		/* blocks are found by key only: this tier hands out no loc */
		io->res = !io->by_key ? -ENOENT :
			  !io->ns_salt || !(io->buf || io->iov) || !io->len ? -EINVAL : -EINPROGRESS;
	}
	find_holders(pt, b, rd);
	/* each record's first holder, then the next for what failed */
	for (uint32_t a = 0; a < KVT_DIR_MAX_HOLDERS; a++)
		fetch_round(pt, b, rd, a);
	for (size_t i = 0; i < n; i++) {
		if (b->io[i].res == -EINPROGRESS) /* cannot happen: every holder was asked */
			b->io[i].res = -ENOENT;
		if (b->io[i].res && rd->hs[i].n)
			ADD(misses, 1);
	}
	b->priv = rd;
	return 0;
}

static void op_wait(struct kvt_storage_tier *t, struct kvt_tier_batch *b)
{
	struct kvt_peer_tier *pt = pt_of(t);
	struct rd *rd = b->priv;
	struct kvt_key *got = (struct kvt_key *)rd->items; /* reused: items are done */
	size_t n_got = 0;

	/* the peer item is larger than a key, so the keys fit where items were */
	_Static_assert(sizeof(struct kvt_peer_item) >= sizeof(struct kvt_key), "room for keys");
	for (size_t i = 0; i < b->n; i++) {
		/* a block read into another's pieces is not the store's */
		if (!b->io[i].res && !b->io[i].iov)
			got[n_got++] = b->io[i].key;
		if (b->done_cb)
			b->done_cb(b, i);
	}
	if (n_got && pt->opts.fetched_cb)
		pt->opts.fetched_cb(pt->opts.fetched_arg, got, n_got);
	rd_free(rd);
	b->priv = NULL;
}

/* ---- the rest of the tier ---------------------------------------------------- */

static void op_free(struct kvt_storage_tier *t, uint64_t loc)
{
	(void)t, (void)loc; /* no loc is ever handed out */
}

static bool op_degraded(struct kvt_storage_tier *t)
{
	(void)t;
	return false; /* it takes no writes; a failing peer is a miss, per block */
}

static int op_register_region(struct kvt_storage_tier *t, void *base, uint64_t len)
{
	struct kvt_peer_tier *pt = pt_of(t);
	int err;

	if (!pt->opts.rdma)
		return 0; /* TCP receives into any memory */
	/* READs land straight in the slots the store gives */
	err = kvt_rdma_register(pt->opts.rdma, base, len, KVT_VERBS_LOCAL_WRITE);
	pt->rdma_ok = !err;
	if (err)
		logf_(pt, KVT_LOG_WARN, "event=peer_tier.rdma.register_failed bytes=%llu err=\"%s\" "
		      "effect=tcp-only", (unsigned long long)len, kvt_strerror(err));
	return err;
}

static void op_stats(struct kvt_storage_tier *t, struct kvt_store_stats *st)
{
	struct kvt_peer_tier *pt = pt_of(t);

	/* the store counts hits and bytes of what it took in; the tier adds
	 * the blocks its holders failed */
	st->tier[t->kind].errors += __atomic_load_n(&pt->st.errors, __ATOMIC_RELAXED);
}

/* The peer tier's named counters (tiers/tier.h): a new one is a row here. */
static size_t op_counters(struct kvt_storage_tier *t, struct kvt_counter *out, size_t max)
{
	struct kvt_peer_tier_stats ps;

	kvt_peer_tier_stats(pt_of(t), &ps);
	const struct kvt_counter c[] = {
		{ "fetches", "Read batches the peer tier sent to other nodes.", "",
		  KVT_COUNTER_COUNTER, ps.fetches },
		{ "fetched_bytes", "Bytes the peer tier fetched from other nodes and verified.",
		  "bytes", KVT_COUNTER_COUNTER, ps.bytes },
		{ "rdma_blocks", "Blocks the peer tier read by RDMA.", "blocks", KVT_COUNTER_COUNTER,
		  ps.rdma_blocks },
		{ "rdma_fallbacks", "Peer tier requests sent over TCP: the holder lent nothing by "
		  "RDMA.", "", KVT_COUNTER_COUNTER, ps.rdma_fallbacks },
		{ "lookup_unanswered", "Lookups after a local miss the directory could not answer "
		  "in time.", "", KVT_COUNTER_COUNTER, ps.lookup_unanswered },
	};

	return KVT_TIER_COUNTERS(out, max, c);
}

static void op_close(struct kvt_storage_tier *t)
{
	kvt_peer_tier_close(pt_of(t));
}

static const struct kvt_storage_tier_ops peer_tier_ops = {
	.name = "peer",
	.submit = op_submit,
	.wait = op_wait,
	.free = op_free,
	.degraded = op_degraded,
	.register_region = op_register_region,
	.stats = op_stats,
	.counters = op_counters,
	.lookup = op_lookup,
	.close = op_close,
};

/* ---- lifecycle --------------------------------------------------------------- */

void kvt_peer_tier_opts_init(struct kvt_peer_tier_opts *opts, size_t size_bytes)
{
	memset(opts, 0, size_bytes);
	opts->size = size_bytes;
}

int kvt_peer_tier_open(const struct kvt_peer_tier_opts *opts, struct kvt_peer_tier **out)
{
	struct kvt_peer_tier *pt;

	if (!opts || opts->size != sizeof(*opts) || !opts->dir || !opts->client || !out)
		return -EINVAL;
	pt = calloc(1, sizeof(*pt));
	if (!pt)
		return -ENOMEM;
	pt->held = calloc(HELD_SLOTS, sizeof(*pt->held));
	pt->sets = calloc(HELD_SETS, sizeof(*pt->sets));
	if (!pt->held || !pt->sets) {
		free(pt->held);
		free(pt->sets);
		free(pt);
		return -ENOMEM;
	}
	pthread_mutex_init(&pt->held_mu, NULL);
	/* over TCP a block is received wherever it is wanted, an engine's
	 * pages too; RDMA READs land only in the registered memory tier */
	pt->base = (struct kvt_storage_tier){ .ops = &peer_tier_ops, .kind = KVT_TIER_REMOTE,
					      .caps = KVT_TIER_CAP_KEYED |
						      (opts->rdma ? 0 : KVT_TIER_CAP_READ_IOV) };
	pt->opts = *opts;
	if (!pt->opts.rdma_lease_ms)
		pt->opts.rdma_lease_ms = 2000;
	if (!pt->opts.rdma_timeout_ms)
		pt->opts.rdma_timeout_ms = 2000;
	*out = pt;
	return 0;
}

struct kvt_storage_tier *kvt_peer_tier_storage(struct kvt_peer_tier *pt)
{
	return pt ? &pt->base : NULL;
}

void kvt_peer_tier_stats(struct kvt_peer_tier *pt, struct kvt_peer_tier_stats *out)
{
	uint64_t *d = (uint64_t *)out;
	const uint64_t *s = (const uint64_t *)&pt->st;

	for (size_t k = 0; k < sizeof(*out) / sizeof(uint64_t); k++)
		d[k] = __atomic_load_n(&s[k], __ATOMIC_RELAXED);
}

int kvt_peer_tier_rdma_exchange_cb(void *arg, const char *peer, const struct kvt_peer_ep *local,
				   struct kvt_peer_ep *remote, void **conn)
{
	char id[KVT_NODE_ID_MAX + 1];
	const char *at = peer ? strchr(peer, '@') : NULL;
	size_t n = at ? (size_t)(at - peer) : 0;

	if (!n || n > KVT_NODE_ID_MAX)
		return -EINVAL;
	memcpy(id, peer, n);
	id[n] = '\0';
	return kvt_peer_qp_connect(arg, &(struct kvt_peer_target){ .node_id = id, .addr = at + 1 },
				   local, remote, (struct kvt_peer_conn **)conn);
}

void kvt_peer_tier_rdma_release_cb(void *arg, void *conn)
{
	(void)arg;
	kvt_peer_conn_close(conn);
}

void kvt_peer_tier_close(struct kvt_peer_tier *pt)
{
	if (!pt)
		return;
	pthread_mutex_destroy(&pt->held_mu);
	free(pt->held);
	free(pt->sets);
	free(pt);
}
