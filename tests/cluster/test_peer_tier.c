/* SPDX-License-Identifier: Apache-2.0 */
/* The peer tier as a storage tier of a reader's store, driven through the
 * store's public API alone (kvt_store_add_tier, kvt_lookup, kvt_get_many,
 * kvt_acquire): real owners over loopback TCP (a kvtier store and peer
 * server, or a misbehaving owner that speaks the protocol), and a
 * directory the test answers for (the directory's ops table), so that a
 * directory that does not answer is one call away. A lookup carries the
 * local prefix on to blocks a peer holds; reads by key bring them byte-exact
 * into the reader's DRAM, where they join the index; a holder that is gone,
 * resets, stays silent or sends wrong bytes is a miss with its reason, and
 * never data; the next holder serves what one failed; a node with a peer
 * tier still serves peers only the blocks it holds. Over RDMA (the fake
 * verbs provider, leases over the real TCP control channel) the same reads
 * are one-sided READs into the store's slots, failed and corrupted READs
 * are misses, and an owner that lends nothing by RDMA is read over TCP.
 * kvt_read_into receives blocks other nodes hold straight into a caller's
 * pieces over TCP, keeps none of them, and leaves a second read of one to
 * the acquire, which keeps it. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cluster/directory.h"
#include "cluster/lease.h"
#include "cluster/peer_tier.h"
#include "fake_owner.h"
#include "helpers.h"
#include "kvtier/store.h"
#include "cluster/peer_client.h"
#include "cluster/peer_rdma.h"
#include "cluster/peer_server.h"
#include "transport/sockio.h"
#include "verbs_fake.h"

#define SECRET "a cluster secret for the tests"
#define TIMEOUT_MS 1000
/* "within the timeout" on a loaded machine: the timeout plus scheduling */
#define BOUND_MS (TIMEOUT_MS + 2000)
#define N 8
#define MAX_FETCHED 64
#define LONG 2048 /* keys of a long prefix: twice the holders the tier once kept */

static struct kvt_peer_secret secret;

static void small_desc(struct kvt_ns_desc *d)
{
	kvt_ns_desc_init(d, sizeof(*d));
	strcpy(d->model_id, "test/peer-tier");
	d->layout = KVT_LAYOUT_PAGED_KV;
	d->dtype = KVT_DTYPE_BF16;
	d->layers = 4;
	d->kv_heads = 2;
	d->head_dim = 64;
	d->block_tokens = 16; /* 2 KiB per token: 32 KiB blocks */
	d->tp_size = 1;
}

static void log_cb(void *arg, enum kvt_log_level lvl, const char *msg)
{
	(void)lvl;
	fprintf(stderr, "  [%s] %s\n", (const char *)arg, msg);
}

static struct kvt_key key_n(int i)
{
	struct kvt_key k;

	kvt_test_fill(&k, sizeof(k), 7000003ull + (uint64_t)i);
	return k;
}

/* The bytes of a key's block, the same on every node that has it. */
static void block_of(const struct kvt_key *k, void *buf, size_t len)
{
	uint64_t s;

	memcpy(&s, k->bytes, sizeof(s));
	kvt_test_fill(buf, len, s | 1);
}

/* ---- a directory the test answers for ------------------------------------- */

struct fake_dir {
	struct kvt_dir base; /* first */
	pthread_mutex_t mu;
	int answer;          /* 0, or the error every lookup gets */
	uint64_t lookups;
	size_t n;
	struct {
		struct kvt_key key;
		struct kvt_dir_holders h;
	} e[LONG];
};

static int fd_lookup(struct kvt_dir *d, const struct kvt_key *keys, size_t n,
		     struct kvt_dir_holders *out)
{
	struct fake_dir *f = (struct fake_dir *)d;
	int lead = 0;
	bool prefix = true;

	pthread_mutex_lock(&f->mu);
	f->lookups++;
	if (f->answer) {
		pthread_mutex_unlock(&f->mu);
		return f->answer;
	}
	for (size_t i = 0; i < n; i++) {
		out[i].n = 0;
		for (size_t j = 0; j < f->n; j++)
			if (!memcmp(&f->e[j].key, &keys[i], sizeof(keys[i])))
				out[i] = f->e[j].h;
		prefix = prefix && out[i].n;
		lead += prefix;
	}
	pthread_mutex_unlock(&f->mu);
	return lead;
}

static void fd_stats(struct kvt_dir *d, struct kvt_dir_stats *out)
{
	struct fake_dir *f = (struct fake_dir *)d;

	pthread_mutex_lock(&f->mu);
	out->reachable = f->answer == 0;
	out->lookups = f->lookups;
	pthread_mutex_unlock(&f->mu);
}

static const struct kvt_dir_ops fake_dir_ops = { .name = "fake", .lookup = fd_lookup,
						 .stats = fd_stats };

/* Name node at addr a holder of keys[from..to). */
static void dir_hold(struct fake_dir *f, int from, int to, const char *node, const char *addr)
{
	for (int i = from; i < to; i++) {
		struct kvt_key k = key_n(i);
		size_t j;

		for (j = 0; j < f->n && memcmp(&f->e[j].key, &k, sizeof(k)); j++)
			;
		if (j == f->n) {
			assert_true(f->n < LONG);
			f->e[f->n++].key = k;
			f->e[j].h.n = 0;
		}
		struct kvt_dir_holder *h = &f->e[j].h.h[f->e[j].h.n++];

		snprintf(h->node, sizeof(h->node), "%s", node);
		snprintf(h->addr, sizeof(h->addr), "%s", addr);
		h->epoch = 1;
		h->tier = KVT_TIER_DRAM;
	}
}

static uint64_t dir_lookups(struct fake_dir *f)
{
	uint64_t n;

	pthread_mutex_lock(&f->mu);
	n = f->lookups;
	pthread_mutex_unlock(&f->mu);
	return n;
}

/* ---- nodes ------------------------------------------------------------------ */

/* warm: the DRAM tier in a memfd with a sum per block, as kvtierd runs by
 * default (the store keeps each block's sum and checks it after a restart
 * only, not at every read) */
static struct kvt_store *open_store_with(struct kvt_ns **ns, bool warm)
{
	struct kvt_store_opts o;
	struct kvt_ns_desc d;
	struct kvt_store *st;

	kvt_store_opts_init(&o, sizeof(o));
	o.dram_bytes = 4 << 20;
	o.dram_slab_bytes = 1 << 20;
	o.dram_huge_pages = false;
	o.dram_warm = warm;
	assert_int_equal(kvt_store_open(&o, &st), 0);
	small_desc(&d);
	assert_int_equal(kvt_ns_attach(st, &d, ns), 0);
	return st;
}

static struct kvt_store *open_store(struct kvt_ns **ns)
{
	return open_store_with(ns, false);
}

static void put_chain(struct kvt_ns *ns, int from, int to)
{
	uint64_t bb = kvt_ns_block_bytes(ns);
	uint8_t *buf = malloc(bb);

	for (int i = from; i < to; i++) {
		struct kvt_key k = key_n(i), p = key_n(i - 1);

		block_of(&k, buf, bb);
		assert_int_equal(kvt_put(ns, &k, i ? &p : NULL, buf, bb), 0);
	}
	free(buf);
}

/* A node: a store and its peer server (serving the store's namespace);
 * with RDMA, its DRAM region registered for remote READs and a lease table. */
struct owner {
	struct kvt_store *store;
	struct kvt_ns *ns;
	struct kvt_peer_server *srv;
	char addr[64];
	struct kvt_rdma *rdma;
	struct kvt_lease_table *leases;
};

/* The fake verbs provider, for a node's RDMA side. */
static struct kvt_rdma *rdma_open(struct kvt_peer_client *exchange_with)
{
	struct kvt_rdma_opts ro;
	struct kvt_rdma *r;

	kvt_rdma_opts_init(&ro, sizeof(ro));
	ro.verbs = &fake_verbs_ops;
	ro.mr_overlap = 1 << 20;
	if (exchange_with) {
		ro.exchange_cb = kvt_peer_tier_rdma_exchange_cb;
		ro.release_cb = kvt_peer_tier_rdma_release_cb;
		ro.exchange_arg = exchange_with;
	}
	assert_int_equal(kvt_rdma_open(&ro, &r), 0);
	return r;
}

static struct kvt_ns *find_ns(void *arg, const struct kvt_key *salt)
{
	struct owner *o = arg;

	return !memcmp(kvt_ns_salt(o->ns), salt, sizeof(*salt)) ? o->ns : NULL;
}

static void serve(struct owner *o, const char *id)
{
	struct kvt_peer_server_opts so;

	kvt_peer_server_opts_init(&so, sizeof(so));
	if (o->rdma) {
		so.leases = o->leases;
		so.rdma = kvt_rdma_owner_hooks(o->rdma);
	}
	so.listen = "127.0.0.1:0";
	so.node_id = id;
	so.secret = &secret;
	so.find_ns_cb = find_ns;
	so.find_ns_arg = o;
	so.timeout_ms = TIMEOUT_MS;
	so.log = log_cb;
	so.log_arg = (void *)id;
	assert_int_equal(kvt_peer_server_open(&so, &o->srv), 0);
	snprintf(o->addr, sizeof(o->addr), "127.0.0.1:%d", kvt_peer_server_port(o->srv));
}

static void owner_open(struct owner *o, const char *id)
{
	memset(o, 0, sizeof(*o));
	o->store = open_store(&o->ns);
	serve(o, id);
}

/* An owner that lends its blocks to RDMA readers. */
static void owner_open_rdma(struct owner *o, const char *id)
{
	struct kvt_lease_opts lo;
	void *base;
	uint64_t len;

	memset(o, 0, sizeof(*o));
	o->store = open_store(&o->ns);
	o->rdma = rdma_open(NULL);
	assert_int_equal(kvt_store_dram_region(o->store, &base, &len), 0);
	assert_int_equal(kvt_rdma_register(o->rdma, base, len, KVT_VERBS_REMOTE_READ), 0);
	kvt_lease_opts_init(&lo, sizeof(lo));
	assert_int_equal(kvt_lease_table_open(&lo, &o->leases), 0);
	serve(o, id);
}

static void owner_close(struct owner *o)
{
	kvt_peer_server_close(o->srv);
	kvt_lease_table_close(o->leases);
	kvt_rdma_close(o->rdma);
	kvt_store_close(o->store);
}

static uint64_t served(struct owner *o)
{
	struct kvt_peer_server_stats st;

	kvt_peer_server_stats(o->srv, &st);
	return st.blocks_sent;
}

/* Blocks o sent, once it has counted `want` (its thread counts a request
 * after the reader may have its bytes) or 2 s have passed. */
static uint64_t served_at_least(struct owner *o, uint64_t want)
{
	for (int i = 0; i < 200 && served(o) < want; i++)
		kvt_test_sleep_ms(10);
	return served(o);
}

/* The reader: a store with the peer tier added, its client and directory. */
struct reader {
	struct owner node;          /* its store (and a peer server, if asked) */
	struct fake_dir dir;
	struct kvt_peer_client *cli;
	struct kvt_rdma *rdma;      /* NULL: TCP only */
	struct kvt_peer_tier *tier; /* the store's */
	pthread_mutex_t mu;
	struct kvt_key fetched[MAX_FETCHED];
	size_t n_fetched;
};

static void on_fetched(void *arg, const struct kvt_key *keys, size_t n)
{
	struct reader *r = arg;

	pthread_mutex_lock(&r->mu);
	for (size_t i = 0; i < n && r->n_fetched < MAX_FETCHED; i++)
		r->fetched[r->n_fetched++] = keys[i];
	pthread_mutex_unlock(&r->mu);
}

static struct reader *reader_open_with(bool rdma)
{
	struct reader *r = calloc(1, sizeof(*r));
	struct kvt_peer_client_opts co;
	struct kvt_peer_tier_opts to;

	assert_non_null(r);
	r->node.store = open_store(&r->node.ns);
	r->dir.base.ops = &fake_dir_ops;
	pthread_mutex_init(&r->dir.mu, NULL);
	pthread_mutex_init(&r->mu, NULL);
	kvt_peer_client_opts_init(&co, sizeof(co));
	co.node_id = "reader";
	co.secret = &secret;
	co.timeout_ms = TIMEOUT_MS;
	co.conns_per_peer = 1; /* a misbehaving owner takes one connection */
	co.log = log_cb;
	co.log_arg = "reader";
	assert_int_equal(kvt_peer_client_open(&co, &r->cli), 0);
	kvt_peer_tier_opts_init(&to, sizeof(to));
	to.dir = &r->dir.base;
	to.client = r->cli;
	to.fetched_cb = on_fetched;
	to.fetched_arg = r;
	if (rdma) {
		r->rdma = rdma_open(r->cli);
		to.rdma = r->rdma;
	}
	to.log = log_cb;
	to.log_arg = "reader";
	assert_int_equal(kvt_peer_tier_open(&to, &r->tier), 0);
	assert_int_equal(kvt_store_add_tier(r->node.store, kvt_peer_tier_storage(r->tier)), 0);
	return r;
}

static struct reader *reader_open(void)
{
	return reader_open_with(false);
}

static void reader_close(struct reader *r)
{
	if (r->node.srv)
		kvt_peer_server_close(r->node.srv);
	kvt_rdma_close(r->rdma); /* its queue pairs' connections go to the client */
	kvt_store_close(r->node.store); /* closes the peer tier */
	kvt_peer_client_close(r->cli);
	pthread_mutex_destroy(&r->dir.mu);
	pthread_mutex_destroy(&r->mu);
	free(r);
}

static struct kvt_peer_tier_stats tier_stats(struct reader *r)
{
	struct kvt_peer_tier_stats st;

	kvt_peer_tier_stats(r->tier, &st);
	return st;
}

static struct kvt_store_stats store_stats(struct kvt_store *s)
{
	struct kvt_store_stats st = { .size = sizeof(st) };

	assert_int_equal(kvt_store_stats(s, &st), 0);
	return st;
}

/* Whether the reader's store holds key i itself (the directory silenced,
 * so that the peer tier carries nothing). */
static bool holds_locally(struct reader *r, int i)
{
	struct kvt_key k = key_n(i);
	int was, n;

	pthread_mutex_lock(&r->dir.mu);
	was = r->dir.answer;
	r->dir.answer = -ENOTCONN;
	pthread_mutex_unlock(&r->dir.mu);
	n = kvt_lookup(r->node.ns, &k, 1, NULL);
	pthread_mutex_lock(&r->dir.mu);
	r->dir.answer = was;
	pthread_mutex_unlock(&r->dir.mu);
	return n == 1;
}

/* Get keys [from, to) through the reader's store into fresh buffers,
 * checked byte-exact where res is 0 and untouched where it is not. */
static int get_range(struct reader *r, int from, int to, int *res)
{
	uint64_t bb = kvt_ns_block_bytes(r->node.ns);
	size_t n = (size_t)(to - from);
	struct kvt_key keys[N];
	void *bufs[N];
	uint8_t *want = malloc(bb), *untouched = malloc(bb);
	int got;

	assert_true(n <= N);
	memset(untouched, 0x5a, bb);
	for (size_t i = 0; i < n; i++) {
		keys[i] = key_n(from + (int)i);
		bufs[i] = malloc(bb);
		memcpy(bufs[i], untouched, bb);
	}
	got = kvt_get_many(r->node.ns, keys, n, bufs, bb, res);
	for (size_t i = 0; i < n; i++) {
		block_of(&keys[i], want, bb);
		/* never wrong bytes: a block is exact, or not handed over at all */
		assert_memory_equal(bufs[i], res[i] ? untouched : want, bb);
		free(bufs[i]);
	}
	free(want);
	free(untouched);
	return got;
}

static int setup(void **state)
{
	(void)state;
	assert_int_equal(kvt_peer_secret_set(&secret, SECRET, strlen(SECRET)), 0);
	return 0;
}

/* ---- lookups and reads by key ----------------------------------------------- */

/* A LOAD's windows look up the keys its LOOKUP found a moment ago: they are
 * answered from what that LOOKUP found, not asked of the directory again,
 * for a prefix longer than the 1,024 keys whose holders the tier kept
 * before (each window then cost a directory round trip). */
static void a_long_lookups_holders_answer_the_windows_after_it(void **state)
{
	struct reader *r = reader_open();
	struct kvt_key *keys = calloc(LONG, sizeof(*keys));
	uint64_t asked;

	(void)state;
	assert_non_null(keys);
	dir_hold(&r->dir, 0, LONG, "a", "127.0.0.1:9");
	for (int i = 0; i < LONG; i++)
		keys[i] = key_n(i);
	assert_int_equal(kvt_lookup(r->node.ns, keys, LONG, NULL), LONG);
	asked = dir_lookups(&r->dir);
	for (int w = 0; w < LONG; w += 32)
		assert_int_equal(kvt_lookup(r->node.ns, keys + w, 32, NULL), 32);
	assert_int_equal(dir_lookups(&r->dir), asked);
	assert_int_equal(tier_stats(r).lookup_cached_keys, LONG);
	/* the directory out of reach: local-only at once, the cache unused */
	pthread_mutex_lock(&r->dir.mu);
	r->dir.answer = -ENOTCONN;
	pthread_mutex_unlock(&r->dir.mu);
	assert_int_equal(kvt_lookup(r->node.ns, keys, 32, NULL), 0);
	free(keys);
	reader_close(r);
}

static void lookup_carries_the_prefix_and_reads_fetch_it_into_the_store(void **state)
{
	struct owner a;
	struct reader *r = reader_open();
	struct kvt_key keys[N + 2];
	uint8_t tiers[N + 2];
	int res[N];
	struct kvt_store_stats st;
	struct kvt_peer_tier_stats ts;
	uint64_t bb = kvt_ns_block_bytes(r->node.ns), looked;

	(void)state;
	owner_open(&a, "a");
	put_chain(a.ns, 0, N);
	put_chain(r->node.ns, 0, 2); /* the reader has the first two itself */
	dir_hold(&r->dir, 0, N, "a", a.addr);
	for (int i = 0; i < N + 2; i++)
		keys[i] = key_n(i);

	assert_int_equal(kvt_lookup(r->node.ns, keys, N + 2, tiers), N);
	for (int i = 0; i < N + 2; i++)
		assert_int_equal(tiers[i], i < 2 ? KVT_TIER_DRAM : i < N ? KVT_TIER_REMOTE :
									   KVT_TIER_NONE);
	looked = dir_lookups(&r->dir);
	assert_int_equal(looked, 1);

	assert_int_equal(get_range(r, 0, N, res), N);
	for (int i = 0; i < N; i++)
		assert_int_equal(res[i], 0);
	/* the store's lookup after its local miss is answered from what the
	 * first one found a moment ago, and the reads went to those holders:
	 * no second round trip */
	assert_int_equal(dir_lookups(&r->dir), looked);
	assert_int_equal(served_at_least(&a, N - 2), N - 2);

	/* the blocks joined the reader's index, in DRAM */
	assert_int_equal(kvt_lookup(r->node.ns, keys, N, tiers), N);
	for (int i = 0; i < N; i++)
		assert_int_equal(tiers[i], KVT_TIER_DRAM);
	assert_int_equal(dir_lookups(&r->dir), looked);
	assert_true(holds_locally(r, N - 1));

	/* counted as the remote tier's, and told to the hint callback */
	st = store_stats(r->node.store);
	assert_true(st.tier[KVT_TIER_REMOTE].present);
	assert_int_equal(st.tier[KVT_TIER_REMOTE].hits, N - 2);
	assert_int_equal(st.tier[KVT_TIER_REMOTE].bytes_out, (N - 2) * bb);
	assert_int_equal(st.tier[KVT_TIER_REMOTE].errors, 0);
	ts = tier_stats(r);
	assert_int_equal(ts.blocks, N - 2);
	assert_int_equal(ts.bytes, (N - 2) * bb);
	assert_int_equal(ts.lookup_remote_keys, 2 * (N - 2));
	assert_int_equal(ts.lookup_cached_keys, N - 2);
	assert_int_equal(ts.errors + ts.misses + ts.retries, 0);
	assert_int_equal(r->n_fetched, N - 2);
	for (int i = 2; i < N; i++)
		assert_memory_equal(&r->fetched[i - 2], &keys[i], sizeof(keys[i]));

	/* a key nobody holds is a miss */
	{
		struct kvt_key none = key_n(999);
		struct kvt_slot slot;

		assert_int_equal(kvt_acquire(r->node.ns, &none, &slot), -ENOENT);
	}
	reader_close(r);
	owner_close(&a);
}

/* kvt_read_into of keys the reader's index lacks: found=planned. */
static void on_planned(void *arg, size_t found)
{
	*(size_t *)arg = found;
}

/* Pieces of a block in read_into_pieces: more than one receive fills. */
#define MAX_PIECES 128

/* Read keys [0, n) through kvt_read_into into blocks of pieces of odd
 * sizes (not whole pages: the peer transport needs none; 1000 and 15001
 * bytes, then about a hundred of 167), each first set to 0x5a. Returns
 * what kvt_read_into returned; *found what it planned. */
static int read_into_pieces(struct reader *r, size_t n, uint8_t *mem, int *res, size_t *found)
{
	uint64_t bb = kvt_ns_block_bytes(r->node.ns);
	static struct iovec iov[N + 1][MAX_PIECES];
	const struct iovec *dst[N + 1];
	unsigned cnt[N + 1];
	struct kvt_key keys[N + 1];
	struct kvt_read_into ri = { .dst = dst, .dst_cnt = cnt, .res = res,
				    .planned_cb = on_planned, .arg = found };

	assert_true(n <= N + 1);
	memset(mem, 0x5a, n * bb);
	for (size_t k = 0; k < n; k++) {
		uint8_t *at = mem + k * bb;
		size_t off = 0;

		keys[k] = key_n((int)k);
		for (cnt[k] = 0; off < bb; cnt[k]++) {
			size_t len = cnt[k] == 0 ? 1000 : cnt[k] == 1 ? 15001 : 167;

			assert_true(cnt[k] < MAX_PIECES);
			if (len > bb - off)
				len = bb - off;
			iov[k][cnt[k]] = (struct iovec){ at + off, len };
			off += len;
		}
		dst[k] = iov[k];
	}
	*found = SIZE_MAX;
	return kvt_read_into(r->node.ns, keys, n, &ri);
}

/* Without RDMA, blocks other nodes hold are received straight into the
 * caller's pieces (an engine's pages): checked, byte-exact, and not kept
 * by the reader (no index entry, no hint); read again, they are left to
 * the acquire, which keeps them. With RDMA reads land only in the store's
 * registered slots: nothing is read into pieces. */
static void read_into_receives_peer_blocks_straight_into_pieces(void **state)
{
	struct owner a;
	struct reader *r = reader_open(), *rr;
	uint64_t bb = kvt_ns_block_bytes(r->node.ns);
	uint8_t *mem = malloc((N + 1) * bb), *want = malloc(bb), *untouched = malloc(bb);
	int res[N + 1], res2[N];
	size_t found;
	struct kvt_store_stats st;

	(void)state;
	owner_open(&a, "a");
	put_chain(a.ns, 0, N);
	put_chain(r->node.ns, 0, 2); /* the reader has the first two in DRAM */
	dir_hold(&r->dir, 0, N, "a", a.addr);
	memset(untouched, 0x5a, bb);

	/* key N nobody holds: found are the N before it */
	assert_int_equal(read_into_pieces(r, N + 1, mem, res, &found), N - 2);
	assert_int_equal(found, N);
	for (int k = 0; k <= N; k++) {
		struct kvt_key key = key_n(k);

		block_of(&key, want, bb);
		/* in DRAM, and after the found keys: left to the acquire */
		assert_int_equal(res[k], k < 2 || k == N ? -EAGAIN : 0);
		assert_memory_equal(mem + (size_t)k * bb, res[k] ? untouched : want, bb);
	}
	assert_int_equal(served_at_least(&a, N - 2), N - 2);
	assert_false(holds_locally(r, 2));
	assert_false(holds_locally(r, N - 1));
	assert_int_equal(r->n_fetched, 0); /* not the reader's: no hint */
	st = store_stats(r->node.store);
	assert_int_equal(st.tier[KVT_TIER_REMOTE].hits, N - 2);
	assert_int_equal(st.tier[KVT_TIER_REMOTE].bytes_out, (N - 2) * bb);
	assert_int_equal(tier_stats(r).blocks, N - 2);

	/* read again: found, not read here, and the acquire keeps them */
	assert_int_equal(read_into_pieces(r, N, mem, res, &found), 0);
	assert_int_equal(found, N);
	for (int k = 0; k < N; k++)
		assert_int_equal(res[k], -EAGAIN);
	assert_int_equal(get_range(r, 0, N, res2), N);
	assert_true(holds_locally(r, 2));
	assert_true(holds_locally(r, N - 1));
	assert_int_equal(r->n_fetched, N - 2);
	reader_close(r);

	/* a reader reading by RDMA reads nothing into pieces */
	fake_reset(1ull << 40, 1024);
	rr = reader_open_with(true);
	dir_hold(&rr->dir, 0, N, "a", a.addr);
	assert_int_equal(read_into_pieces(rr, N, mem, res, &found), 0);
	assert_int_equal(found, 0);
	for (int k = 0; k < N; k++)
		assert_int_equal(res[k], -EAGAIN);
	assert_memory_equal(mem, untouched, bb);
	reader_close(rr);
	owner_close(&a);
	free(mem);
	free(want);
	free(untouched);
}

static void an_unanswering_directory_is_local_only(void **state)
{
	struct owner a;
	struct reader *r = reader_open();
	struct kvt_key keys[N];
	struct kvt_slot slot;
	int res[N];

	(void)state;
	owner_open(&a, "a");
	put_chain(a.ns, 0, N);
	put_chain(r->node.ns, 0, 2);
	dir_hold(&r->dir, 0, N, "a", a.addr);
	for (int i = 0; i < N; i++)
		keys[i] = key_n(i);
	r->dir.answer = -ETIMEDOUT;
	assert_int_equal(kvt_lookup(r->node.ns, keys, N, NULL), 2);
	assert_int_equal(kvt_acquire(r->node.ns, &keys[2], &slot), -ENOENT);
	assert_int_equal(get_range(r, 0, 4, res), 2);
	assert_int_equal(res[2], -ENOENT);
	assert_int_equal(served(&a), 0);
	assert_true(tier_stats(r).lookup_unanswered >= 3);
	reader_close(r);
	owner_close(&a);
}

/* ---- holders that fail ------------------------------------------------------- */

enum evil { EVIL_CLOSE, EVIL_SILENT, EVIL_BAD_SUM };

/* An owner that authenticates as `id`, takes one GET, then per mode: closes
 * the connection, says nothing more, or sends every block with a bit
 * flipped after its checksum. */
struct evil_owner {
	enum evil mode;
	const char *id;
	struct kvt_fake_owner fo;
};

static void *evil_thread(void *arg)
{
	struct evil_owner *e = arg;
	uint8_t *buf = malloc(KVT_PROTO_MAX_PAYLOAD), *data = malloc(1 << 20), *good = malloc(1 << 20);
	struct kvt_peer_keys_req q;
	struct kvt_frame_hdr h;
	struct kvt_wr w;
	int fd;

	kvt_wr_init(&w);
	fd = kvt_fake_owner_get(&e->fo, &secret, e->id, buf, &h, &q);
	if (fd < 0 || q.block_bytes > (1 << 20) || e->mode == EVIL_CLOSE)
		goto out;
	for (uint32_t i = 0; e->mode == EVIL_BAD_SUM && i < q.n; i++) {
		struct kvt_key k;

		memcpy(&k, &q.keys[i], sizeof(k));
		block_of(&k, good, q.block_bytes);
		memcpy(data, good, q.block_bytes);
		data[100] ^= 1;
		kvt_fake_owner_send_block(fd, &w, h.id, i, &k, data, good, q.block_bytes);
	}
	/* silent: as a host whose link dropped would */
	kvt_fake_owner_idle(&e->fo);
out:
	if (fd >= 0)
		close(fd);
	kvt_wr_free(&w);
	free(good);
	free(data);
	free(buf);
	return NULL;
}

static void evil_start(struct evil_owner *e, enum evil mode, const char *id)
{
	e->mode = mode;
	e->id = id;
	kvt_fake_owner_start(&e->fo, evil_thread, e);
}

static void evil_stop(struct evil_owner *e)
{
	kvt_fake_owner_stop(&e->fo);
}

/* An address nothing listens on any more. */
static void dead_addr(char *out, size_t len)
{
	struct owner gone;

	owner_open(&gone, "gone");
	snprintf(out, len, "%s", gone.addr);
	owner_close(&gone);
}

static void a_holder_that_fails_is_a_miss_never_wrong_bytes(void **state)
{
	struct reader *r = reader_open();
	struct evil_owner e;
	char gone[64];
	int res[N];
	uint64_t t0, ms, checksum0;

	(void)state;
	/* gone: nothing listens at its address */
	dead_addr(gone, sizeof(gone));
	dir_hold(&r->dir, 0, 2, "gone", gone);
	assert_int_equal(get_range(r, 0, 2, res), 0);
	assert_int_equal(res[0], -ECONNREFUSED);
	assert_int_equal(res[1], -ECONNREFUSED);
	assert_false(holds_locally(r, 0));

	/* dies mid-request: reset */
	evil_start(&e, EVIL_CLOSE, "closer");
	dir_hold(&r->dir, 2, 4, "closer", e.fo.addr);
	assert_int_equal(get_range(r, 2, 4, res), 0);
	assert_int_equal(res[0], -ECONNRESET);
	assert_int_equal(res[1], -ECONNRESET);
	assert_false(holds_locally(r, 2));
	evil_stop(&e);

	/* silent (a cut link): timed out, within the client's timeout */
	evil_start(&e, EVIL_SILENT, "silent");
	dir_hold(&r->dir, 4, 6, "silent", e.fo.addr);
	t0 = kvt_now_ns();
	assert_int_equal(get_range(r, 4, 6, res), 0);
	ms = (kvt_now_ns() - t0) / 1000000;
	fprintf(stderr, "a silent holder: a miss after %llu ms\n", (unsigned long long)ms);
	assert_int_equal(res[0], -ETIMEDOUT);
	assert_int_equal(res[1], -ETIMEDOUT);
	assert_true(ms >= TIMEOUT_MS && ms < BOUND_MS);
	assert_false(holds_locally(r, 4));
	evil_stop(&e);

	/* wrong bytes: a checksum failure, counted, never data */
	checksum0 = store_stats(r->node.store).checksum_failures;
	evil_start(&e, EVIL_BAD_SUM, "liar");
	dir_hold(&r->dir, 6, 8, "liar", e.fo.addr);
	assert_int_equal(get_range(r, 6, 8, res), 0);
	assert_int_equal(res[0], -EIO);
	assert_int_equal(res[1], -EIO);
	assert_false(holds_locally(r, 6));
	assert_int_equal(store_stats(r->node.store).checksum_failures, checksum0 + 2);
	evil_stop(&e);

	assert_int_equal(tier_stats(r).errors, 8);
	assert_int_equal(tier_stats(r).misses, 8);
	assert_int_equal(tier_stats(r).blocks, 0);
	assert_true(store_stats(r->node.store).tier[KVT_TIER_REMOTE].errors >= 8);
	assert_int_equal(r->n_fetched, 0);
	reader_close(r);
}

/* A holder that sends wrong bytes into a caller's pieces: -EIO, counted as
 * a checksum failure, never kept. */
static void read_into_a_liars_blocks_is_an_error_never_kept(void **state)
{
	struct reader *r = reader_open();
	uint64_t bb = kvt_ns_block_bytes(r->node.ns);
	uint8_t *mem = malloc(2 * bb);
	struct evil_owner e;
	uint64_t checksum0 = store_stats(r->node.store).checksum_failures;
	int res[2];
	size_t found;

	(void)state;
	evil_start(&e, EVIL_BAD_SUM, "liar");
	dir_hold(&r->dir, 0, 2, "liar", e.fo.addr);
	assert_int_equal(read_into_pieces(r, 2, mem, res, &found), 0);
	assert_int_equal(found, 2);
	assert_int_equal(res[0], -EIO);
	assert_int_equal(res[1], -EIO);
	assert_int_equal(store_stats(r->node.store).checksum_failures, checksum0 + 2);
	assert_false(holds_locally(r, 0));
	assert_int_equal(r->n_fetched, 0);
	evil_stop(&e);
	reader_close(r);
	free(mem);
}

/* An owner that keeps each block's sum from its put (a warm DRAM tier)
 * sends that sum, not one of the bytes as they are now: a block that rotted
 * in the owner's memory after its put fails at the reader, never served
 * (the owner also reads each block once, not twice). */
static void an_owner_sends_the_sum_kept_at_put(void **state)
{
	struct owner a;
	struct reader *r = reader_open();
	struct kvt_key k = key_n(1);
	struct kvt_slot slot;
	int res[2];

	(void)state;
	memset(&a, 0, sizeof(a));
	a.store = open_store_with(&a.ns, true);
	serve(&a, "a");
	put_chain(a.ns, 0, 2);
	dir_hold(&r->dir, 0, 2, "a", a.addr);
	assert_int_equal(kvt_acquire(a.ns, &k, &slot), 0);
	((uint8_t *)slot.data)[123] ^= 0x10;
	kvt_release(a.ns, &slot);
	assert_int_equal(get_range(r, 0, 2, res), 1);
	assert_int_equal(res[0], 0);
	assert_int_equal(res[1], -EIO);
	assert_true(holds_locally(r, 0));
	assert_false(holds_locally(r, 1));
	reader_close(r);
	owner_close(&a);
}

static void a_failed_holder_gives_way_to_the_next(void **state)
{
	struct owner a;
	struct reader *r = reader_open();
	char gone[64];
	int res[N];

	(void)state;
	owner_open(&a, "a");
	put_chain(a.ns, 0, 4);
	dead_addr(gone, sizeof(gone));
	dir_hold(&r->dir, 0, 4, "gone", gone); /* named first */
	dir_hold(&r->dir, 0, 4, "a", a.addr);
	assert_int_equal(get_range(r, 0, 4, res), 4);
	assert_int_equal(served_at_least(&a, 4), 4);
	assert_int_equal(tier_stats(r).retries, 4);
	assert_int_equal(tier_stats(r).errors, 4);
	assert_int_equal(tier_stats(r).misses, 0);
	assert_true(holds_locally(r, 3));
	reader_close(r);
	owner_close(&a);
}

/* A node with a peer tier serves peers what it holds, and only that: a
 * block only another node holds is a miss, never fetched on their behalf
 * (or two nodes with stale hints would pass a request back and forth). */
static void a_node_serves_peers_its_own_blocks_only(void **state)
{
	struct owner a;
	struct reader *r = reader_open();
	struct kvt_peer_client_opts co;
	struct kvt_peer_client *third;
	struct kvt_peer_item it[2];
	uint64_t bb = kvt_ns_block_bytes(r->node.ns), looked;
	uint8_t *buf[2] = { malloc(bb), malloc(bb) }, *want = malloc(bb);

	(void)state;
	owner_open(&a, "a");
	put_chain(a.ns, 0, N);
	put_chain(r->node.ns, 0, 1);
	dir_hold(&r->dir, 0, N, "a", a.addr);
	serve(&r->node, "r");
	kvt_peer_client_opts_init(&co, sizeof(co));
	co.node_id = "third";
	co.secret = &secret;
	co.timeout_ms = TIMEOUT_MS;
	assert_int_equal(kvt_peer_client_open(&co, &third), 0);
	looked = dir_lookups(&r->dir);
	it[0] = (struct kvt_peer_item){ .key = key_n(0), .dst = buf[0] };
	it[1] = (struct kvt_peer_item){ .key = key_n(5), .dst = buf[1] };
	assert_int_equal(kvt_peer_fetch(third,
					&(struct kvt_peer_target){ .node_id = "r", .addr = r->node.addr },
					kvt_ns_salt(r->node.ns), bb, it, 2), 1);
	assert_int_equal(it[0].status, 0);
	block_of(&it[0].key, want, bb);
	assert_memory_equal(buf[0], want, bb);
	assert_int_equal(it[1].status, -ENOENT);
	assert_int_equal(dir_lookups(&r->dir), looked);
	assert_int_equal(served(&a), 0);
	assert_false(holds_locally(r, 5));
	kvt_peer_client_close(third);
	reader_close(r);
	owner_close(&a);
	free(buf[0]);
	free(buf[1]);
	free(want);
}

/* ---- RDMA ------------------------------------------------------------------------ */

static void rdma_reads_lease_the_blocks_and_read_them_one_sided(void **state)
{
	struct owner a, b;
	struct reader *r;
	struct kvt_peer_server_stats ss;
	int res[N], bad = 0;
	bool local_write = false;

	(void)state;
	fake_reset(1ull << 40, 1024);
	r = reader_open_with(true);
	/* the tier registered the reader's DRAM region for READ destinations */
	for (int i = 0; i < fake.n_mrs; i++)
		local_write = local_write || fake.mrs[i].access == KVT_VERBS_LOCAL_WRITE;
	assert_true(local_write);
	owner_open_rdma(&a, "a");
	put_chain(a.ns, 0, 30);
	dir_hold(&r->dir, 0, 30, "a", a.addr);

	assert_int_equal(get_range(r, 0, N, res), N);
	assert_int_equal(tier_stats(r).rdma_blocks, N);
	assert_int_equal(fake.posted, N);
	kvt_peer_server_stats(a.srv, &ss);
	assert_int_equal(ss.blocks_sent, 0); /* not one byte over TCP */
	assert_true(ss.leases >= 1);
	assert_true(holds_locally(r, N - 1));

	/* a READ that fails (the peer or link gone): a miss, never bytes; the
	 * next read makes a new queue pair and gets it */
	fake.fail_at = (long)fake.posted + 1;
	fake.fail_status = KVT_WC_RETRY_EXCEEDED;
	assert_true(get_range(r, 10, 14, res) < 4);
	for (int i = 0; i < 4; i++) {
		fprintf(stderr, "rdma read %d with a failed READ: %s\n", 10 + i, kvt_strerror(res[i]));
		bad += res[i] != 0;
	}
	assert_int_equal(res[1], -ETIMEDOUT);
	assert_true(bad >= 1);
	fake.fail_at = -1;
	assert_int_equal(get_range(r, 10, 14, res), 4);

	/* a READ that delivers a flipped byte: its checksum fails, a miss */
	fake.corrupt_at = (long)fake.posted;
	assert_int_equal(get_range(r, 20, 22, res), 1);
	assert_int_equal(res[0], -EIO);
	assert_int_equal(res[1], 0);
	assert_false(holds_locally(r, 20));
	fake.corrupt_at = -1;

	/* an owner that lends nothing by RDMA is read over TCP */
	owner_open(&b, "b");
	put_chain(b.ns, 40, 44);
	dir_hold(&r->dir, 40, 44, "b", b.addr);
	assert_int_equal(get_range(r, 40, 44, res), 4);
	assert_int_equal(served_at_least(&b, 4), 4);
	assert_int_equal(tier_stats(r).rdma_fallbacks, 1);

	reader_close(r);
	owner_close(&a);
	owner_close(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(lookup_carries_the_prefix_and_reads_fetch_it_into_the_store),
		cmocka_unit_test(a_long_lookups_holders_answer_the_windows_after_it),
		cmocka_unit_test(read_into_receives_peer_blocks_straight_into_pieces),
		cmocka_unit_test(an_unanswering_directory_is_local_only),
		cmocka_unit_test(a_holder_that_fails_is_a_miss_never_wrong_bytes),
		cmocka_unit_test(read_into_a_liars_blocks_is_an_error_never_kept),
		cmocka_unit_test(an_owner_sends_the_sum_kept_at_put),
		cmocka_unit_test(a_failed_holder_gives_way_to_the_next),
		cmocka_unit_test(a_node_serves_peers_its_own_blocks_only),
		cmocka_unit_test(rdma_reads_lease_the_blocks_and_read_them_one_sided),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
