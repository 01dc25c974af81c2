/* SPDX-License-Identifier: Apache-2.0 */
/* The RDMA path end to end, minus the NIC: an owner (store, lease table,
 * peer server with the RDMA owner hooks) and a reader (store, peer client,
 * RDMA reader) in one process, the queue pairs set up over the real TCP
 * control channel (QP_CONNECT), leases asked for over it (LEASE, RELEASE),
 * and the READs done by the fake verbs provider straight out of the owner's
 * DRAM slots into the reader's reserved slots. Leased blocks are not
 * evicted; leases end when returned, when they expire, and when their
 * connection closes. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "cluster/lease.h"
#include "helpers.h"
#include "kvtier/store.h"
#include "cluster/peer_client.h"
#include "cluster/peer_rdma.h"
#include "cluster/peer_server.h"
#include "transport/sockio.h"
#include "verbs_fake.h"

#define SECRET "the secret of the lease tests"
#define BB 32768ull

struct node {
	struct kvt_store *store;
	struct kvt_ns *ns;
	struct kvt_rdma *rdma;
};

static struct node own, rd;
static struct kvt_lease_table *leases;
static struct kvt_peer_server *srv;
static struct kvt_peer_client *cli;
static struct kvt_peer_secret secret;
static char addr[64];
static struct kvt_peer_target target;

static struct kvt_key key_of(uint64_t seed, int i)
{
	struct kvt_key k;

	kvt_test_fill(&k, sizeof(k), seed * 7919 + (uint64_t)i + 1);
	return k;
}

static void fill_block(const struct kvt_key *k, void *buf)
{
	uint64_t s;

	memcpy(&s, k->bytes, sizeof(s));
	kvt_test_fill(buf, BB, s | 1);
}

static int exchange(void *arg, const char *peer, const struct kvt_peer_ep *local,
		    struct kvt_peer_ep *remote, void **conn);
static void release(void *arg, void *conn);

/* A store and its RDMA side; the reader's queue pairs are set up through
 * exchange (reader true). */
static void open_node(struct node *n, unsigned access, bool reader)
{
	struct kvt_store_opts o;
	struct kvt_ns_desc d;
	struct kvt_rdma_opts ro;
	void *base;
	uint64_t len;

	kvt_store_opts_init(&o, sizeof(o));
	o.dram_bytes = 4 << 20; /* 128 blocks */
	o.dram_slab_bytes = 1 << 20;
	o.dram_huge_pages = false;
	assert_int_equal(kvt_store_open(&o, &n->store), 0);
	kvt_ns_desc_init(&d, sizeof(d));
	strcpy(d.model_id, "test/lease");
	d.layout = KVT_LAYOUT_PAGED_KV;
	d.dtype = KVT_DTYPE_BF16;
	d.layers = 4;
	d.kv_heads = 2;
	d.head_dim = 64;
	d.block_tokens = 16;
	d.tp_size = 1;
	assert_int_equal(kvt_ns_attach(n->store, &d, &n->ns), 0);
	assert_int_equal(kvt_ns_block_bytes(n->ns), BB);
	kvt_rdma_opts_init(&ro, sizeof(ro));
	ro.verbs = &fake_verbs_ops;
	ro.mr_overlap = 1 << 20;
	if (reader) {
		ro.exchange_cb = exchange;
		ro.release_cb = release;
	}
	assert_int_equal(kvt_rdma_open(&ro, &n->rdma), 0);
	assert_int_equal(kvt_store_dram_region(n->store, &base, &len), 0);
	assert_int_equal(kvt_rdma_register(n->rdma, base, len, access), 0);
}

static struct kvt_ns *find_ns(void *arg, const struct kvt_key *salt)
{
	return memcmp(kvt_ns_salt(own.ns), salt, sizeof(*salt)) == 0 ? own.ns : NULL;
}

/* The reader's queue pairs are set up over the TCP control channel. */
static int exchange(void *arg, const char *peer, const struct kvt_peer_ep *local,
		    struct kvt_peer_ep *remote, void **conn)
{
	return kvt_peer_qp_connect(cli, &target, local, remote, (struct kvt_peer_conn **)conn);
}

static void release(void *arg, void *conn)
{
	kvt_peer_conn_close(conn);
}

static int setup(void **state)
{
	struct kvt_lease_opts lo;
	struct kvt_peer_server_opts so;
	struct kvt_peer_client_opts co;

	fake_reset(1ull << 40, 1024);
	assert_int_equal(kvt_peer_secret_set(&secret, SECRET, strlen(SECRET)), 0);
	open_node(&own, KVT_VERBS_REMOTE_READ, false);
	open_node(&rd, KVT_VERBS_LOCAL_WRITE, true);

	kvt_lease_opts_init(&lo, sizeof(lo));
	lo.max_blocks = 32;
	lo.max_lease_ms = 5000;
	assert_int_equal(kvt_lease_table_open(&lo, &leases), 0);
	kvt_peer_server_opts_init(&so, sizeof(so));
	so.listen = "127.0.0.1:0";
	so.node_id = "owner";
	so.secret = &secret;
	so.find_ns_cb = find_ns;
	so.leases = leases;
	so.rdma = kvt_rdma_owner_hooks(own.rdma);
	assert_int_equal(kvt_peer_server_open(&so, &srv), 0);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", kvt_peer_server_port(srv));
	target = (struct kvt_peer_target){ .node_id = "owner", .addr = addr };
	kvt_peer_client_opts_init(&co, sizeof(co));
	co.node_id = "reader";
	co.secret = &secret;
	assert_int_equal(kvt_peer_client_open(&co, &cli), 0);
	return 0;
}

static int teardown(void **state)
{
	kvt_rdma_close(rd.rdma);
	kvt_peer_client_close(cli);
	kvt_peer_server_close(srv);
	kvt_lease_table_close(leases);
	kvt_rdma_close(own.rdma);
	kvt_store_close(own.store);
	kvt_store_close(rd.store);
	return 0;
}

static void owner_put(uint64_t seed, int n)
{
	uint8_t buf[BB];

	for (int i = 0; i < n; i++) {
		struct kvt_key k = key_of(seed, i), p = key_of(seed, i - 1);

		fill_block(&k, buf);
		assert_int_equal(kvt_put(own.ns, &k, i ? &p : NULL, buf, BB), 0);
	}
}

static void blocks_are_read_under_a_lease(void **state)
{
	struct kvt_key keys[18];
	struct kvt_peer_lease_entry e[18];
	struct kvt_rdma_item it[16];
	struct kvt_slot slots[16];
	struct kvt_lease_stats ls;
	uint64_t lease_id, sent;
	uint32_t ms;
	uint8_t want[BB], got[BB];

	owner_put(1, 16);
	for (int i = 0; i < 18; i++)
		keys[i] = key_of(1, i); /* the last two the owner never had */
	assert_int_equal(kvt_peer_lease(cli, &target, kvt_ns_salt(own.ns), BB, keys, 18, 2000, e,
					&lease_id, &ms, &sent), 0);
	assert_int_equal(ms, 2000);
	kvt_lease_stats(leases, &ls);
	assert_int_equal(ls.active, 1);
	assert_int_equal(e[16].status, -ENOENT);
	assert_int_equal(e[17].status, -ENOENT);
	for (int i = 0; i < 16; i++) {
		struct kvt_key parent = key_of(1, i - 1);

		assert_int_equal(e[i].status, 0);
		assert_int_equal(e[i].len, BB);
		assert_true(e[i].generation != 0);
		assert_int_equal(kvt_reserve(rd.ns, &keys[i], i ? &parent : NULL, &slots[i]), 0);
		it[i] = (struct kvt_rdma_item){ .dst = slots[i].data, .remote = e[i].addr,
						.rkey = e[i].rkey, .len = (uint32_t)e[i].len,
						.xxh3 = e[i].xxh3,
						.valid_until_ns = sent + (uint64_t)ms * 1000000ull };
	}
	assert_int_equal(kvt_rdma_read(rd.rdma, "owner", it, 16, 5000), 16);
	for (int i = 0; i < 16; i++) {
		assert_int_equal(kvt_commit(rd.ns, &slots[i]), 0);
		assert_int_equal(kvt_get(rd.ns, &keys[i], got, BB), 0);
		fill_block(&keys[i], want);
		assert_memory_equal(got, want, BB);
	}
	/* the queue pairs came from QP_CONNECT: the owner's allow remote READs */
	assert_int_equal(fake.qps_remote_read, 2);
	assert_int_equal(kvt_peer_release(cli, &target, lease_id), 16);
	assert_int_equal(kvt_peer_release(cli, &target, lease_id), -ENOENT);
	kvt_lease_stats(leases, &ls);
	assert_int_equal(ls.active, 0);
	assert_int_equal(ls.blocks_held, 0);
}

static void leased_blocks_are_not_evicted(void **state)
{
	struct kvt_key keys[8];
	struct kvt_peer_lease_entry e[8];
	uint64_t lease_id, sent;
	uint32_t ms;

	owner_put(2, 8);
	for (int i = 0; i < 8; i++)
		keys[i] = key_of(2, i);
	assert_int_equal(kvt_peer_lease(cli, &target, kvt_ns_salt(own.ns), BB, keys, 8, 5000, e,
					&lease_id, &ms, &sent), 0);
	/* 300 new blocks through a 128-block DRAM tier evict everything else */
	owner_put(3, 300);
	assert_int_equal(kvt_lookup(own.ns, keys, 8, NULL), 8);
	assert_int_equal(kvt_lookup(own.ns, (struct kvt_key[]){ key_of(1, 0) }, 1, NULL), 0);
	assert_int_equal(kvt_peer_release(cli, &target, lease_id), 8);
	owner_put(4, 300);
	assert_int_equal(kvt_lookup(own.ns, keys, 8, NULL), 0); /* released: evictable again */
}

static void leases_expire_and_are_bounded(void **state)
{
	struct kvt_key keys[40];
	struct kvt_peer_lease_entry e[40];
	struct kvt_lease_stats ls;
	uint64_t lease_id, sent;
	uint32_t ms;

	owner_put(5, 40);
	for (int i = 0; i < 40; i++)
		keys[i] = key_of(5, i);
	assert_int_equal(kvt_peer_lease(cli, &target, kvt_ns_salt(own.ns), BB, keys, 40, 1000, e,
					&lease_id, &ms, &sent), -ENOSPC); /* more than 32 at once */
	assert_int_equal(kvt_peer_lease(cli, &target, kvt_ns_salt(own.ns), BB, keys, 4, 150, e,
					&lease_id, &ms, &sent), 0);
	kvt_test_sleep_ms(600);
	kvt_lease_stats(leases, &ls);
	assert_int_equal(ls.active, 0);
	assert_true(ls.expired >= 1);
	assert_int_equal(ls.refused, 1);
	assert_int_equal(kvt_peer_release(cli, &target, lease_id), -ENOENT);
}

static void a_closed_connection_returns_its_leases(void **state)
{
	struct kvt_key keys[4];
	struct kvt_peer_lease_entry e[4];
	struct kvt_lease_stats ls;
	struct kvt_peer_client_opts co;
	struct kvt_peer_client *c2;
	uint64_t lease_id, sent;
	uint32_t ms;

	owner_put(6, 4);
	for (int i = 0; i < 4; i++)
		keys[i] = key_of(6, i);
	kvt_peer_client_opts_init(&co, sizeof(co));
	co.node_id = "reader2";
	co.secret = &secret;
	assert_int_equal(kvt_peer_client_open(&co, &c2), 0);
	assert_int_equal(kvt_peer_lease(c2, &target, kvt_ns_salt(own.ns), BB, keys, 4, 5000, e,
					&lease_id, &ms, &sent), 0);
	kvt_lease_stats(leases, &ls);
	assert_int_equal(ls.blocks_held, 4);
	kvt_peer_client_close(c2);
	for (int i = 0; i < 200; i++) {
		kvt_lease_stats(leases, &ls);
		if (ls.blocks_held == 0)
			break;
		kvt_test_sleep_ms(10);
	}
	assert_int_equal(ls.blocks_held, 0);
}

static void closing_the_reader_drops_the_owners_queue_pairs(void **state)
{
	struct kvt_rdma_stats st;

	kvt_rdma_stats(own.rdma, &st);
	assert_int_equal(st.qps_accepted, 2);
	kvt_rdma_close(rd.rdma); /* closes the two QP_CONNECT connections */
	rd.rdma = NULL;
	for (int i = 0; i < 200; i++) {
		kvt_rdma_stats(own.rdma, &st);
		if (st.qps_destroyed == 2)
			break;
		kvt_test_sleep_ms(10);
	}
	assert_int_equal(st.qps_destroyed, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(blocks_are_read_under_a_lease),
		cmocka_unit_test(leased_blocks_are_not_evicted),
		cmocka_unit_test(leases_expire_and_are_bounded),
		cmocka_unit_test(a_closed_connection_returns_its_leases),
		cmocka_unit_test(closing_the_reader_drops_the_owners_queue_pairs),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
