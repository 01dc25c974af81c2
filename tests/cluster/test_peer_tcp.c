/* SPDX-License-Identifier: Apache-2.0 */
/* The TCP peer transport over real loopback sockets: an owner's store and
 * peer server, a reader's client fetching into slots of its own store.
 * Blocks arrive byte-exact (from DRAM, and staged from the SSD tier); misses
 * and unknown namespaces are told apart; a reader without the secret gets
 * nothing; and misbehaving owners (wrong checksum, wrong key, a block cut
 * short by a close or by silence, bytes trickled) fail those blocks within
 * the timeout (the trickle: the fetch's deadline) and never hand over wrong
 * bytes. */
#include <errno.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "fake_owner.h"
#include "helpers.h"
#include "kvtier/store.h"
#include "cluster/peer_client.h"
#include "cluster/peer_io.h"
#include "cluster/peer_server.h"
#include "transport/sockio.h"
#include "transport/wire.h"

#define SECRET "a cluster secret for the tests"
#define TIMEOUT_MS 1000
/* "within the timeout" on a loaded machine: the timeout plus scheduling */
#define BOUND_MS (TIMEOUT_MS + 2000)

struct owner {
	struct kvt_store *store;
	struct kvt_ns *ns;
	struct kvt_peer_server *srv;
	char addr[64];
	char *ssd_dir;
};

static struct kvt_peer_secret secret;

static void small_desc(struct kvt_ns_desc *d, uint32_t block_tokens)
{
	kvt_ns_desc_init(d, sizeof(*d));
	strcpy(d->model_id, "test/peer");
	d->layout = KVT_LAYOUT_PAGED_KV;
	d->dtype = KVT_DTYPE_BF16;
	d->layers = 4;
	d->kv_heads = 2;
	d->head_dim = 64;
	d->block_tokens = block_tokens; /* 2 KiB per token: 16 -> 32 KiB blocks */
	d->tp_size = 1;
}

static void log_cb(void *arg, enum kvt_log_level lvl, const char *msg)
{
	fprintf(stderr, "  [%s] %s\n", (const char *)arg, msg);
}

static struct kvt_ns *find_ns(void *arg, const struct kvt_key *salt)
{
	struct owner *o = arg;

	return memcmp(kvt_ns_salt(o->ns), salt, sizeof(*salt)) == 0 ? o->ns : NULL;
}

static struct kvt_key key_of(uint64_t seed, int i)
{
	struct kvt_key k;

	kvt_test_fill(&k, sizeof(k), seed * 1000003 + (uint64_t)i + 1);
	return k;
}

static void block_bytes_of(const struct kvt_key *k, void *buf, size_t len)
{
	uint64_t s;

	memcpy(&s, k->bytes, sizeof(s));
	kvt_test_fill(buf, len, s | 1);
}

static void open_store(struct kvt_store **st, struct kvt_ns **ns, uint64_t dram, const char *ssd)
{
	struct kvt_store_opts o;
	struct kvt_ns_desc d;

	kvt_store_opts_init(&o, sizeof(o));
	o.dram_bytes = dram;
	o.dram_slab_bytes = 1 << 20;
	o.dram_huge_pages = false;
	if (ssd) {
		o.ssd_dir = ssd;
		o.ssd_bytes = 64 << 20;
		o.ssd_segment_bytes = 4 << 20;
	}
	assert_int_equal(kvt_store_open(&o, st), 0);
	small_desc(&d, 16);
	assert_int_equal(kvt_ns_attach(*st, &d, ns), 0);
}

/* An owner at listen; max_unauth: its bound on handshakes (0: the default). */
static void owner_open_bounded(struct owner *o, uint64_t dram, const char *ssd,
			       const char *listen, unsigned max_unauth)
{
	struct kvt_peer_server_opts so;

	memset(o, 0, sizeof(*o));
	open_store(&o->store, &o->ns, dram, ssd);
	kvt_peer_server_opts_init(&so, sizeof(so));
	so.listen = listen;
	so.node_id = "owner";
	so.secret = &secret;
	so.find_ns_cb = find_ns;
	so.find_ns_arg = o;
	so.timeout_ms = TIMEOUT_MS;
	so.log = log_cb;
	so.log_arg = "owner";
	if (max_unauth)
		so.max_unauth = max_unauth;
	assert_int_equal(kvt_peer_server_open(&so, &o->srv), 0);
	snprintf(o->addr, sizeof(o->addr), "127.0.0.1:%d", kvt_peer_server_port(o->srv));
}

static void owner_open_at(struct owner *o, uint64_t dram, const char *ssd, const char *listen)
{
	owner_open_bounded(o, dram, ssd, listen, 0);
}

static void owner_open(struct owner *o, uint64_t dram, const char *ssd)
{
	owner_open_at(o, dram, ssd, "127.0.0.1:0");
}

static void owner_close(struct owner *o)
{
	kvt_peer_server_close(o->srv);
	kvt_store_close(o->store);
}

static void owner_put(struct owner *o, uint64_t seed, int n)
{
	uint64_t bb = kvt_ns_block_bytes(o->ns);
	uint8_t *buf = malloc(bb);

	for (int i = 0; i < n; i++) {
		struct kvt_key k = key_of(seed, i), parent = key_of(seed, i - 1);

		block_bytes_of(&k, buf, bb);
		assert_int_equal(kvt_put(o->ns, &k, i ? &parent : NULL, buf, bb), 0);
	}
	free(buf);
}

static struct kvt_peer_client *client(const char *id, const struct kvt_peer_secret *s)
{
	struct kvt_peer_client_opts co;
	struct kvt_peer_client *c;

	kvt_peer_client_opts_init(&co, sizeof(co));
	co.node_id = id;
	co.secret = s;
	co.timeout_ms = TIMEOUT_MS;
	co.down_ms = 500;
	co.log = log_cb;
	co.log_arg = (void *)id;
	assert_int_equal(kvt_peer_client_open(&co, &c), 0);
	return c;
}

/* ---- one record per peer ------------------------------------------------- */

#define RACERS 8
#define RACE_PEERS 200

struct racer {
	struct kvt_peer_client *c;
	pthread_barrier_t *go;
};

/* Fetch once from each of RACE_PEERS peers (nothing listens there), all
 * racers released together for each. */
static void *racer_main(void *arg)
{
	struct racer *r = arg;
	struct kvt_key salt = { 0 }, key = { 0 };
	uint8_t buf[64];

	for (int p = 0; p < RACE_PEERS; p++) {
		char id[16];
		struct kvt_peer_target t = { .node_id = id, .addr = "127.0.0.1:1" };
		struct kvt_peer_item it = { .key = key, .dst = buf };

		snprintf(id, sizeof(id), "p%d", p);
		pthread_barrier_wait(r->go);
		kvt_peer_fetch(r->c, &t, &salt, sizeof(buf), &it, 1);
	}
	return NULL;
}

/* A peer first fetched from by several threads at once (a LOAD asks its
 * holders at once, two windows at a time) gets one record: before, each
 * thread could add its own, and the peer's counters were split between
 * them (STATS showed part of its hits). */
static void concurrent_first_fetches_make_one_record_per_peer(void **state)
{
	struct kvt_peer_client *c = client("reader", &secret);
	struct kvt_peer_stats *st = calloc(RACE_PEERS * RACERS, sizeof(*st));
	pthread_barrier_t go;
	pthread_t th[RACERS];
	struct racer r = { c, &go };

	(void)state;
	assert_non_null(st);
	pthread_barrier_init(&go, NULL, RACERS);
	for (int i = 0; i < RACERS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, racer_main, &r), 0);
	for (int i = 0; i < RACERS; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&go);
	assert_int_equal(kvt_peer_client_stats(c, st, RACE_PEERS * RACERS), RACE_PEERS);
	for (int i = 0; i < RACE_PEERS; i++)
		assert_int_equal(st[i].connects, 0);
	free(st);
	kvt_peer_client_close(c);
}

static int setup(void **state)
{
	assert_int_equal(kvt_peer_secret_set(&secret, SECRET, strlen(SECRET)), 0);
	return 0;
}

/* Fetch n blocks of seed from o into slots reserved in the reader's store,
 * commit the verified ones, compare every byte. Returns the number fetched. */
static int fetch_into_store(struct kvt_peer_client *c, struct owner *o, uint64_t seed, int n,
			    int *statuses)
{
	struct kvt_store *rs;
	struct kvt_ns *rns;
	struct kvt_slot *slots = calloc((size_t)n, sizeof(*slots));
	struct kvt_peer_item *items = calloc((size_t)n, sizeof(*items));
	struct kvt_peer_target t = { .node_id = "owner", .addr = o->addr };
	uint64_t bb = kvt_ns_block_bytes(o->ns);
	uint8_t *want = malloc(bb), *got_buf = malloc(bb);
	int got;

	open_store(&rs, &rns, 64ull << 20, NULL);
	/* the same descriptor: the same salt, so the same keys */
	assert_memory_equal(kvt_ns_salt(rns), kvt_ns_salt(o->ns), sizeof(struct kvt_key));
	for (int i = 0; i < n; i++) {
		struct kvt_key parent = key_of(seed, i - 1);

		items[i].key = key_of(seed, i);
		assert_int_equal(kvt_reserve(rns, &items[i].key, i ? &parent : NULL, &slots[i]), 0);
		items[i].dst = slots[i].data;
	}
	got = kvt_peer_fetch(c, &t, kvt_ns_salt(rns), bb, items, (size_t)n);
	if (got != n && !statuses)
		for (int i = 0; i < n; i++)
			if (items[i].status)
				fprintf(stderr, "block %d: %s\n", i, kvt_strerror(items[i].status));
	for (int i = 0; i < n; i++) {
		if (statuses)
			statuses[i] = items[i].status;
		if (items[i].status) {
			kvt_abort(rns, &slots[i]);
			continue;
		}
		assert_int_equal(kvt_commit(rns, &slots[i]), 0);
		assert_int_equal(kvt_get(rns, &items[i].key, got_buf, bb), 0);
		block_bytes_of(&items[i].key, want, bb);
		assert_memory_equal(got_buf, want, bb);
	}
	kvt_store_close(rs);
	free(got_buf);
	free(want);
	free(items);
	free(slots);
	return got;
}

/* The owner's server stats once it has counted `blocks` sent: it counts a
 * request's blocks after its last send, so the reader can hold them first
 * (waits up to 2 s, then returns what it has). */
static void sent_stats(struct owner *o, uint64_t blocks, struct kvt_peer_server_stats *st)
{
	for (int i = 0; i < 100; i++) {
		kvt_peer_server_stats(o->srv, st);
		if (st->blocks_sent >= blocks)
			return;
		kvt_test_sleep_ms(20);
	}
}

static void blocks_arrive_byte_exact(void **state)
{
	struct owner o;
	struct kvt_peer_client *c = client("reader", &secret);
	struct kvt_peer_server_stats st;
	struct kvt_peer_stats ps;

	owner_open(&o, 32ull << 20, NULL);
	owner_put(&o, 1, 40);
	assert_int_equal(fetch_into_store(c, &o, 1, 40, NULL), 40);
	/* again, over the pooled connections */
	assert_int_equal(fetch_into_store(c, &o, 1, 40, NULL), 40);
	sent_stats(&o, 80, &st);
	assert_int_equal(st.blocks_sent, 80);
	assert_int_equal(st.bytes_sent, 80 * kvt_ns_block_bytes(o.ns));
	assert_int_equal(st.accepted, 4); /* four connections, reused */
	assert_int_equal(kvt_peer_client_stats(c, &ps, 1), 1);
	assert_int_equal(ps.blocks, 80);
	assert_int_equal(ps.checksum_errors, 0);
	assert_int_equal(ps.idle_conns, 4);
	kvt_peer_client_close(c);
	owner_close(&o);
}

static void ssd_blocks_are_staged_and_sent(void **state)
{
	struct owner o;
	struct kvt_peer_client *c = client("reader", &secret);
	struct kvt_store_stats ss = { .size = sizeof(ss) };
	char *dir = kvt_test_mkdtemp("peer_ssd"), probe[600];
	int fd;

	assert_non_null(dir);
	snprintf(probe, sizeof(probe), "%s/probe", dir);
	fd = open(probe, O_RDWR | O_CREAT | O_DIRECT, 0600);
	if (fd < 0) {
		fprintf(stderr, "note: O_DIRECT refused under %s; the SSD case is not run\n", dir);
		kvt_test_rmdir(dir);
		free(dir);
		kvt_peer_client_close(c);
		return;
	}
	close(fd);
	unlink(probe);
	/* 32 slots of DRAM for 96 blocks: most of them are on SSD when asked */
	owner_open(&o, 1 << 20, dir);
	owner_put(&o, 2, 96);
	kvt_store_stats(o.store, &ss);
	assert_true(ss.tier[KVT_TIER_SSD].blocks >= 60);
	assert_int_equal(fetch_into_store(c, &o, 2, 96, NULL), 96);
	kvt_peer_client_close(c);
	owner_close(&o);
	kvt_test_rmdir(dir);
	free(dir);
}

static void misses_and_unknown_namespaces(void **state)
{
	struct owner o;
	struct kvt_peer_client *c = client("reader", &secret);
	struct kvt_peer_target t;
	struct kvt_peer_item it[6];
	uint8_t buf[6][32768];
	struct kvt_key other_salt = key_of(77, 0);
	int st[6];

	owner_open(&o, 32ull << 20, NULL);
	owner_put(&o, 3, 4);
	t = (struct kvt_peer_target){ .node_id = "owner", .addr = o.addr };
	/* 4 held, then 2 the owner never had: they come back -ENOENT */
	fetch_into_store(c, &o, 3, 6, st);
	for (int i = 0; i < 4; i++)
		assert_int_equal(st[i], 0);
	assert_int_equal(st[4], -ENOENT);
	assert_int_equal(st[5], -ENOENT);
	/* a namespace the owner does not have: every block -EBADF */
	for (int i = 0; i < 6; i++)
		it[i] = (struct kvt_peer_item){ .key = key_of(3, i), .dst = buf[i] };
	assert_int_equal(kvt_peer_fetch(c, &t, &other_salt, 32768, it, 6), 0);
	for (int i = 0; i < 6; i++)
		assert_int_equal(it[i].status, -EBADF);
	/* the right namespace with the wrong block size: -EINVAL */
	assert_int_equal(kvt_peer_fetch(c, &t, kvt_ns_salt(o.ns), 4096, it, 6), 0);
	assert_int_equal(it[0].status, -EINVAL);
	/* the connection survived all of it */
	assert_int_equal(fetch_into_store(c, &o, 3, 4, NULL), 4);
	kvt_peer_client_close(c);
	owner_close(&o);
}

static void a_reader_without_the_secret_gets_nothing(void **state)
{
	struct owner o;
	struct kvt_peer_secret wrong;
	struct kvt_peer_client *c;
	struct kvt_peer_server_stats st;
	struct kvt_peer_stats ps;
	int sts[4];

	assert_int_equal(kvt_peer_secret_set(&wrong, "not the cluster secret!", 23), 0);
	c = client("intruder", &wrong);
	owner_open(&o, 32ull << 20, NULL);
	owner_put(&o, 4, 4);
	assert_int_equal(fetch_into_store(c, &o, 4, 4, sts), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(sts[i], -EACCES);
	/* the owner counts the refusal just after sending it */
	for (int i = 0; i < 200; i++) {
		kvt_peer_server_stats(o.srv, &st);
		if (st.auth_failures)
			break;
		usleep(10000);
	}
	assert_true(st.auth_failures >= 1);
	assert_int_equal(st.blocks_sent, 0);
	assert_int_equal(st.requests, 0);
	kvt_peer_client_stats(c, &ps, 1);
	assert_true(ps.auth_errors >= 1);
	kvt_peer_client_close(c);
	owner_close(&o);
}

/* ---- misbehaving owners ------------------------------------------------ */

enum evil { EVIL_BAD_SUM, EVIL_BAD_KEY, EVIL_HALF_CLOSE, EVIL_HALF_SILENT, EVIL_TRICKLE };

/* A trickling owner's pace: under the timeout, so each byte restarts the
 * reader's idle clock; and the bytes it sends at most (then it falls
 * silent), so a reader without a deadline is held about 10 s, not for ever. */
#define TRICKLE_EVERY_MS (TIMEOUT_MS * 3 / 4)
#define TRICKLE_BYTES 12

struct evil_owner {
	enum evil mode;
	struct kvt_fake_owner fo;
};

/* Answers one GET: the first block right, the second per mode. */
static void *evil_thread(void *arg)
{
	struct evil_owner *e = arg;
	uint8_t *buf = malloc(KVT_PROTO_MAX_PAYLOAD), data[32768], good[32768];
	struct kvt_peer_keys_req q;
	struct kvt_frame_hdr h;
	struct kvt_wr w;
	int fd;

	kvt_wr_init(&w);
	fd = kvt_fake_owner_get(&e->fo, &secret, "owner", buf, &h, &q);
	if (fd < 0)
		goto out;
	for (uint32_t i = 0; i < q.n && i < 2; i++) {
		struct kvt_peer_block b = { .index = i, .data_len = q.block_bytes };

		memcpy(&b.key, &q.keys[i], sizeof(b.key));
		block_bytes_of(&b.key, data, sizeof(data));
		memcpy(good, data, sizeof(data));
		if (i == 1 && e->mode == EVIL_BAD_SUM)
			data[100] ^= 1; /* a bit flipped after the checksum */
		if (i == 1 && e->mode == EVIL_BAD_KEY)
			b.key.bytes[0] ^= 1;
		if (i == 1 && e->mode == EVIL_TRICKLE) {
			kvt_peer_enc_block(&w, h.id, 0, &b);
			kvt_peer_send_wr(fd, &w, kvt_deadline_ms(5000));
			kvt_fake_owner_trickle(&e->fo, fd, data, TRICKLE_BYTES, TRICKLE_EVERY_MS);
			break;
		}
		if (i == 1 && (e->mode == EVIL_HALF_CLOSE || e->mode == EVIL_HALF_SILENT)) {
			kvt_peer_enc_block(&w, h.id, 0, &b);
			kvt_peer_send_wr(fd, &w, kvt_deadline_ms(5000));
			kvt_sock_send(fd, data, q.block_bytes / 2, kvt_deadline_ms(5000));
			/* stay connected and say nothing, as a host whose link
			 * dropped would, until the test ends */
			if (e->mode == EVIL_HALF_SILENT)
				kvt_fake_owner_idle(&e->fo);
			goto out;
		}
		kvt_fake_owner_send_block(fd, &w, h.id, i, &b.key, data, good, q.block_bytes);
	}
	/* the rest: answer nothing more, keep the connection */
	kvt_fake_owner_idle(&e->fo);
out:
	if (fd >= 0)
		close(fd);
	kvt_wr_free(&w);
	free(buf);
	return NULL;
}

static void evil_start(struct evil_owner *e, enum evil mode)
{
	e->mode = mode;
	kvt_fake_owner_start(&e->fo, evil_thread, e);
}

static void evil_stop(struct evil_owner *e)
{
	kvt_fake_owner_stop(&e->fo);
}

/* Fetch three blocks from an evil owner over one connection. */
static int evil_fetch(enum evil mode, int *st, uint64_t *ms)
{
	struct evil_owner e;
	struct kvt_peer_client_opts co;
	struct kvt_peer_client *c;
	struct kvt_peer_item it[3];
	struct kvt_key salt = key_of(5, 99);
	char addr[64];
	static uint8_t buf[3][32768];
	uint8_t want[32768];
	uint64_t t0;
	int got;

	evil_start(&e, mode);
	kvt_peer_client_opts_init(&co, sizeof(co));
	co.node_id = "reader";
	co.secret = &secret;
	co.timeout_ms = TIMEOUT_MS;
	co.conns_per_peer = 1;
	assert_int_equal(kvt_peer_client_open(&co, &c), 0);
	snprintf(addr, sizeof(addr), "%s", e.fo.addr);
	for (int i = 0; i < 3; i++)
		it[i] = (struct kvt_peer_item){ .key = key_of(5, i), .dst = buf[i] };
	t0 = kvt_now_ns();
	got = kvt_peer_fetch(c, &(struct kvt_peer_target){ .node_id = "owner", .addr = addr }, &salt, 32768, it, 3);
	*ms = (kvt_now_ns() - t0) / 1000000;
	for (int i = 0; i < 3; i++)
		st[i] = it[i].status;
	/* the block that arrived whole is right */
	block_bytes_of(&it[0].key, want, sizeof(want));
	assert_int_equal(st[0], 0);
	assert_memory_equal(buf[0], want, sizeof(want));
	if (mode == EVIL_TRICKLE) {
		struct kvt_peer_stats ps;

		/* cut by the deadline: counted slow, not as an idle timeout */
		assert_int_equal(kvt_peer_client_stats(c, &ps, 1), 1);
		assert_int_equal(ps.slow, 1);
		assert_int_equal(ps.timeouts, 0);
		assert_true(ps.down);
	}
	if (mode == EVIL_HALF_SILENT || mode == EVIL_TRICKLE) {
		/* the peer is now known down: the next fetch fails at once */
		t0 = kvt_now_ns();
		assert_int_equal(kvt_peer_fetch(c, &(struct kvt_peer_target){ .node_id = "owner", .addr = addr }, &salt,
						32768, it, 1), 0);
		assert_int_equal(it[0].status, -EHOSTDOWN);
		/* well under the timeout it would otherwise wait (a loaded
		 * machine may delay the thread, not by half a second) */
		assert_true((kvt_now_ns() - t0) / 1000000 < TIMEOUT_MS / 2);
	}
	kvt_peer_client_close(c);
	evil_stop(&e);
	return got;
}

static void wrong_bytes_are_never_used(void **state)
{
	int st[3];
	uint64_t ms;

	assert_int_equal(evil_fetch(EVIL_BAD_SUM, st, &ms), 1);
	assert_int_equal(st[1], -EIO);
	/* the owner then says nothing about the third: it times out */
	assert_int_equal(st[2], -ETIMEDOUT);

	assert_int_equal(evil_fetch(EVIL_BAD_KEY, st, &ms), 1);
	assert_int_equal(st[1], -EPROTO);
	assert_int_equal(st[2], -EPROTO);
}

static void a_transfer_cut_short_fails_within_the_timeout(void **state)
{
	int st[3];
	uint64_t ms;

	assert_int_equal(evil_fetch(EVIL_HALF_CLOSE, st, &ms), 1);
	assert_int_equal(st[1], -ECONNRESET);
	assert_int_equal(st[2], -ECONNRESET);
	assert_true(ms < BOUND_MS);

	assert_int_equal(evil_fetch(EVIL_HALF_SILENT, st, &ms), 1);
	assert_int_equal(st[1], -ETIMEDOUT);
	assert_int_equal(st[2], -ETIMEDOUT);
	assert_true(ms >= TIMEOUT_MS);
	assert_true(ms < BOUND_MS);
}

/* An owner that sends a byte of the second block now and then, each
 * within the idle timeout: the fetch ends by its deadline (the timeout and
 * the bytes asked at the lowest rate allowed, a few ms for 96 KiB) with
 * those blocks missed, never in wrong bytes, and the owner is marked slow.
 * Before, every byte restarted the idle clock and the fetch waited as long
 * as the owner trickled. */
static void a_trickling_owner_is_cut_at_the_fetch_deadline(void **state)
{
	int st[3];
	uint64_t ms;

	assert_int_equal(evil_fetch(EVIL_TRICKLE, st, &ms), 1);
	assert_int_equal(st[1], -ETIMEDOUT);
	assert_int_equal(st[2], -ETIMEDOUT);
	assert_true(ms >= TIMEOUT_MS);
	assert_true(ms < BOUND_MS);
}

static void many_small_blocks_over_several_connections(void **state)
{
	struct owner o;
	struct kvt_peer_client *c = client("reader", &secret);
	struct kvt_peer_server_stats st;

	owner_open(&o, 64ull << 20, NULL);
	owner_put(&o, 6, 600);
	assert_int_equal(fetch_into_store(c, &o, 6, 600, NULL), 600);
	sent_stats(&o, 600, &st);
	assert_int_equal(st.blocks_sent, 600);
	assert_int_equal(st.requests, 4);
	kvt_peer_client_close(c);
	owner_close(&o);
}

/* An owner that restarted at the same address: the pooled connections to
 * the old process are dead, and the next fetch must not fail on them. */
static void a_restarted_owner_is_fetched_from_at_once(void **state)
{
	struct owner o;
	struct kvt_peer_client *c = client("reader", &secret);
	struct kvt_peer_stats ps;
	char addr[64];
	int st[4];

	owner_open(&o, 32ull << 20, NULL);
	owner_put(&o, 8, 4);
	assert_int_equal(fetch_into_store(c, &o, 8, 4, NULL), 4);
	snprintf(addr, sizeof(addr), "%s", o.addr);
	owner_close(&o);
	owner_open_at(&o, 32ull << 20, NULL, addr);
	owner_put(&o, 8, 4);
	assert_int_equal(fetch_into_store(c, &o, 8, 4, st), 4);
	kvt_peer_client_stats(c, &ps, 1);
	assert_int_equal(ps.conn_errors, 0);
	assert_false(ps.down);
	kvt_peer_client_close(c);
	owner_close(&o);
}

static void closing_the_server_ends_idle_connections(void **state)
{
	struct owner o;
	struct kvt_peer_client *c = client("reader", &secret);
	uint64_t t0;

	owner_open(&o, 32ull << 20, NULL);
	owner_put(&o, 7, 8);
	assert_int_equal(fetch_into_store(c, &o, 7, 8, NULL), 8);
	t0 = kvt_now_ns();
	owner_close(&o); /* four idle pooled connections are open */
	assert_true((kvt_now_ns() - t0) / 1000000 < 2000);
	kvt_peer_client_close(c);
}

/* Entries of /proc/self/<what>: the process's threads (task) or fds (fd). */
static int proc_count(const char *what)
{
	char path[64];
	struct dirent *e;
	DIR *d;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/self/%s", what);
	d = opendir(path);
	assert_non_null(d);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* A reader that vanishes in the middle of a GET of 400 blocks (its socket
 * reset unread, as a process killed with SIGKILL leaves it) costs the owner
 * nothing that stays: within a few seconds its connections, threads and
 * descriptors are back to what they were, and the next reader gets every
 * block. */
static void a_reader_that_vanishes_mid_get_leaves_nothing_behind(void **state)
{
	struct owner o;
	struct kvt_peer_client *c;
	struct kvt_peer_server_stats st;
	struct kvt_sockaddr sa;
	struct kvt_key keys[400];
	struct kvt_wr w;
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	char server_id[KVT_PEER_ID_MAX + 1], some[8192];
	uint32_t flags;
	int tasks, fds, fd, waited = 0;

	owner_open(&o, 32ull << 20, NULL);
	owner_put(&o, 11, 400);
	tasks = proc_count("task");
	fds = proc_count("fd");
	assert_int_equal(kvt_sockaddr_parse(o.addr, false, &sa), 0);
	fd = kvt_sock_connect(&sa, kvt_deadline_ms(TIMEOUT_MS));
	assert_true(fd >= 0);
	assert_int_equal(kvt_peer_auth_client(fd, &secret, "reader", "owner",
					      kvt_deadline_ms(TIMEOUT_MS), server_id, &flags), 0);
	for (int i = 0; i < 400; i++)
		keys[i] = key_of(11, i);
	kvt_wr_init(&w);
	assert_int_equal(kvt_peer_enc_keys_req(&w, KVT_PEER_GET, 1, kvt_ns_salt(o.ns),
					       kvt_ns_block_bytes(o.ns), keys, 400, 0), 0);
	assert_int_equal(kvt_peer_send_wr(fd, &w, kvt_deadline_ms(TIMEOUT_MS)), 0);
	kvt_wr_free(&w);
	/* the owner is sending: take a little of it, then vanish */
	assert_int_equal(kvt_sock_recv(fd, some, sizeof(some), kvt_deadline_ms(TIMEOUT_MS)), 0);
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
	close(fd);

	for (;; waited += 20) {
		kvt_peer_server_stats(o.srv, &st);
		if ((st.conns == 0 && proc_count("task") <= tasks && proc_count("fd") <= fds) ||
		    waited > 5000)
			break;
		kvt_test_sleep_ms(20);
	}
	if (st.conns || proc_count("task") > tasks || proc_count("fd") > fds)
		fail_msg("after %d ms: %llu connections, %d threads (was %d), %d fds (was %d)",
			 waited, (unsigned long long)st.conns, proc_count("task"), tasks,
			 proc_count("fd"), fds);
	assert_true(st.blocks_sent < 400);
	c = client("reader", &secret);
	assert_int_equal(fetch_into_store(c, &o, 11, 400, NULL), 400);
	kvt_peer_client_close(c);
	owner_close(&o);
}

/* A flood of connections that never answer: a thread keeps FLOOD of them
 * open to the owner from bind_addr, reading what the owner sends, and opens
 * a new one for each the owner closes. */
#define FLOOD 300

struct flood {
	pthread_t th;
	int port;
	const char *bind_addr;
	volatile int stop;
	uint64_t opened;
};

static void *flood_thread(void *arg)
{
	struct flood *f = arg;
	static int fds[FLOOD];
	struct pollfd p[FLOOD];

	for (int i = 0; i < FLOOD; i++)
		fds[i] = -1;
	while (!__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE)) {
		for (int i = 0; i < FLOOD; i++) {
			struct sockaddr_in a = { .sin_family = AF_INET };

			if (fds[i] >= 0)
				continue;
			fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
			assert_true(fds[i] >= 0);
			inet_pton(AF_INET, f->bind_addr, &a.sin_addr);
			assert_int_equal(bind(fds[i], (struct sockaddr *)&a, sizeof(a)), 0);
			a.sin_port = htons((uint16_t)f->port);
			inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
			if (connect(fds[i], (struct sockaddr *)&a, sizeof(a)) && errno != EINPROGRESS) {
				close(fds[i]);
				fds[i] = -1;
				continue;
			}
			f->opened++;
		}
		for (int i = 0; i < FLOOD; i++)
			p[i] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
		if (poll(p, FLOOD, 20) <= 0)
			continue;
		for (int i = 0; i < FLOOD; i++) {
			char junk[256];

			if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			/* the owner's challenge is read and never answered; an
			 * end or an error means the owner closed it */
			if (!(p[i].revents & (POLLHUP | POLLERR)) &&
			    recv(fds[i], junk, sizeof(junk), MSG_DONTWAIT) > 0)
				continue;
			close(fds[i]);
			fds[i] = -1;
		}
	}
	for (int i = 0; i < FLOOD; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return NULL;
}

/* An owner with max_unauth (0: the default) holding 16 blocks, a flood of
 * connections from bind_addr that never answer their challenge, and five
 * fetches of the 16 blocks by a reader with the secret while it lasts: each
 * fetch's count must be 16. Returns the owner's figures. */
static struct kvt_peer_server_stats flood_and_fetch(const char *bind_addr, unsigned max_unauth)
{
	struct owner o;
	struct kvt_peer_client *c = client("reader", &secret);
	struct kvt_peer_server_stats st;
	struct flood f = { .bind_addr = bind_addr };
	int got[5];

	owner_open_bounded(&o, 32ull << 20, NULL, "127.0.0.1:0", max_unauth);
	owner_put(&o, 9, 16);
	f.port = kvt_peer_server_port(o.srv);
	assert_int_equal(pthread_create(&f.th, NULL, flood_thread, &f), 0);
	kvt_test_sleep_ms(300); /* the flood is in place */
	for (int i = 0; i < 5; i++) {
		got[i] = fetch_into_store(c, &o, 9, 16, NULL);
		kvt_test_sleep_ms(100);
	}
	__atomic_store_n(&f.stop, 1, __ATOMIC_RELEASE);
	pthread_join(f.th, NULL);
	kvt_peer_server_stats(o.srv, &st);
	fprintf(stderr, "flood from %s: %llu connections opened; owner: accepted %llu, "
		"refused %llu, dropped in handshake %llu; fetches got %d %d %d %d %d of 16\n",
		bind_addr, (unsigned long long)f.opened, (unsigned long long)st.accepted,
		(unsigned long long)st.refused, (unsigned long long)st.unauth_dropped, got[0],
		got[1], got[2], got[3], got[4]);
	kvt_peer_client_close(c);
	owner_close(&o);
	for (int i = 0; i < 5; i++)
		if (got[i] != 16)
			fail_msg("fetch %d under the flood got %d of 16 blocks", i, got[i]);
	return st;
}

/* Connections without the secret that never finish their handshake, held
 * open from another address and reopened as soon as closed, do not keep a
 * node with the secret out: each of its fetches gets every block. Old code
 * gave the flood all 256 places for the handshake's 5 s (here 1 s): the
 * reader got none. The owner's bound on handshakes is 64 here, under the
 * flood's 300: handshakes are cut, the flooding address's first. */
static void an_unauthenticated_flood_does_not_lock_nodes_out(void **state)
{
	(void)state;
	assert_true(flood_and_fetch("127.0.0.2", 64).unauth_dropped > 0);
}

/* The same flood from the reader's own address (a node's host, or an
 * address it shares behind NAT), under the owner's default bound on
 * handshakes (1,024, each a descriptor): it cannot authenticate, so it does
 * not keep the reader out either. Before, the bound per address refused the
 * reader's connections at accept with the flood's: 0 of 16 blocks in 10 of
 * 10 tries. */
static void a_flood_from_a_nodes_own_address_does_not_lock_it_out(void **state)
{
	(void)state;
	/* the flood was there, all of it */
	assert_true(flood_and_fetch("127.0.0.1", 0).accepted >= FLOOD);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(blocks_arrive_byte_exact),
		cmocka_unit_test(ssd_blocks_are_staged_and_sent),
		cmocka_unit_test(misses_and_unknown_namespaces),
		cmocka_unit_test(a_reader_without_the_secret_gets_nothing),
		cmocka_unit_test(wrong_bytes_are_never_used),
		cmocka_unit_test(a_transfer_cut_short_fails_within_the_timeout),
		cmocka_unit_test(a_trickling_owner_is_cut_at_the_fetch_deadline),
		cmocka_unit_test(many_small_blocks_over_several_connections),
		cmocka_unit_test(a_restarted_owner_is_fetched_from_at_once),
		cmocka_unit_test(closing_the_server_ends_idle_connections),
		cmocka_unit_test(an_unauthenticated_flood_does_not_lock_nodes_out),
		cmocka_unit_test(a_flood_from_a_nodes_own_address_does_not_lock_it_out),
		cmocka_unit_test(a_reader_that_vanishes_mid_get_leaves_nothing_behind),
		cmocka_unit_test(concurrent_first_fetches_make_one_record_per_peer),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
