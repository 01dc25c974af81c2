/* SPDX-License-Identifier: Apache-2.0 */
/* A real kvtierd in a cluster whose other node trickles: a peer that joined
 * the directory (a real redis-server on a Unix socket) and hinted blocks,
 * and that answers every GET with a block's frame and then one byte every
 * 3/4 of the daemon's --peer-timeout, so the idle clock never runs out.
 * Six LOADs of its blocks are queued; meanwhile a SAVE and a LOAD of the
 * engine's own blocks complete promptly (the LOADs that may wait on other
 * nodes take at most half the copy workers); every LOAD of the trickler's
 * blocks ends by its fetch deadline with nothing loaded, and the peer is
 * counted slow and marked down in STATS and /metrics. Before, the six
 * LOADs held all four workers for as long as the peer trickled, and the
 * SAVE waited behind them. Runs on loopback: no namespaces needed. */
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "bench/netlab/netlab.h"
#include "cluster/directory.h"
#include "fake_owner.h"
#include "helpers.h"
#include "app/daemon_proc.h"
#include "util/clock.h"

/* The daemon's --peer-timeout: a LOAD from the trickler takes that long,
 * far longer than a local SAVE or LOAD, so those are seen to complete while
 * the trickler's are still waiting, whatever the order the workers run in. */
#define TIMEOUT_MS 3000
#define TIMEOUT_ARG "3000"
#define PROMPT_MS 5000   /* "promptly": generous, not a speed claim */
#define N 4              /* blocks per prefix */
#define SLOW_LOADS 6     /* more than the daemon's 4 workers */
#define LOCAL_TAG 100

static struct kvt_redis_proc redis;
static struct kvt_fake_trickler slow;
static struct kvt_peer_secret secret;
static struct kvt_dir *slow_dir;
static struct kvtd_proc d;
static struct kvt_client *c;
static struct kvt_client_ns ns;
static struct engine_mem mem;
static struct kvt_ns_desc desc;
static char *tmpdir, secret_file[512];
static uint64_t seed;

static uint64_t now_ms(void)
{
	return kvt_now_ns() / 1000000;
}

/* A port nothing listens on now, for the daemon's peer listener. */
static int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	port = ntohs(a.sin_port);
	close(fd);
	return port;
}

static void make_keys(int tag, struct kvt_key *keys)
{
	uint32_t tokens[N * 16];
	uint64_t s = seed ^ ((uint64_t)tag * 0x9e3779b97f4a7c15ull) ^ 1;

	for (uint32_t i = 0; i < N * desc.block_tokens; i++)
		tokens[i] = (uint32_t)kvt_test_rand(&s);
	assert_int_equal(kvt_client_prefix_keys(&ns, NULL, tokens, N * desc.block_tokens, keys, N),
			 N);
}

/* LOOKUP prefix tag: blocks found; *remote counts those in tier remote
 * (the daemon remembers the tiers for the LOAD that follows). */
static int lookup(int tag, int *remote)
{
	struct kvt_key keys[N];
	uint8_t tiers[N];
	int got;

	make_keys(tag, keys);
	got = kvt_client_lookup(c, &ns, keys, N, tiers);
	*remote = 0;
	for (int i = 0; i < got; i++)
		*remote += tiers[i] == KVT_TIER_REMOTE;
	return got;
}

static uint64_t load_start(int tag, uint32_t first_page)
{
	struct kvt_key keys[N];
	uint32_t pages[N];
	uint64_t ticket;

	make_keys(tag, keys);
	for (uint32_t i = 0; i < N; i++)
		pages[i] = first_page + i;
	assert_int_equal(kvt_client_load(c, &ns, (uint32_t)mem.region, keys, pages, N, &ticket), 0);
	return ticket;
}

static int setup(void **state)
{
	struct kvt_dir_opts o;
	struct kvt_dir_stats ds;
	char listen[32];

	(void)state;
	if (!getenv("KVTIERD"))
		kvt_test_skip(NULL, "KVTIERD is not set (run through ctest)");
	if (!kvt_redis_server_path())
		kvt_test_skip(NULL, "redis-server is not installed (apt-get install redis-server)");
	seed = kvt_test_seed();
	kvtd_test_desc(&desc, NULL);
	tmpdir = kvt_test_sockdir("slow_peer"); /* redis-server's socket: a short path */
	assert_non_null(tmpdir);
	snprintf(secret_file, sizeof(secret_file), "%s/secret", tmpdir);
	kvt_test_write_secret(secret_file, "the cluster secret of the slow peer test");
	assert_int_equal(kvt_peer_secret_load(secret_file, &secret), 0);
	assert_int_equal(kvt_redis_proc_start(&redis, tmpdir, NULL, 0, NULL, 0), 0);

	/* the trickler, a member of the cluster */
	slow.secret = &secret;
	slow.id = "slow";
	slow.every_ms = TIMEOUT_MS * 3 / 4;
	kvt_fake_owner_start(&slow.fo, kvt_fake_trickler_main, &slow);
	kvt_dir_opts_init(&o, sizeof(o));
	o.url = redis.url;
	snprintf(o.self.id, sizeof(o.self.id), "slow");
	snprintf(o.self.addr, sizeof(o.self.addr), "%s", slow.fo.addr);
	o.self.transports = KVT_NODE_TCP;
	assert_int_equal(kvt_dir_open(&o, &slow_dir), 0);
	for (int i = 0; i < 250; i++) {
		kvt_dir_stats(slow_dir, &ds);
		if (ds.epoch)
			break;
		kvt_test_sleep_ms(20);
	}
	assert_true(ds.epoch != 0);

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", free_port());
	const char *extra[] = { "--cluster", redis.url, "--node-id", "B", "--peer-listen", listen,
				"--cluster-secret-file", secret_file, "--peer-timeout", TIMEOUT_ARG,
				"--workers", "4", "--metrics", "127.0.0.1:0", NULL };
	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	c = kvtd_connect(&d, NULL);
	assert_non_null(c);
	assert_int_equal(kvt_client_hello(c, &desc, &ns), 0);
	assert_int_equal(engine_mem_open(&mem, c, &ns, &desc, 64), 0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (c) {
		engine_mem_close(&mem);
		kvt_client_close(c);
	}
	if (d.pid > 0)
		kvtd_stop(&d, SIGKILL);
	kvtd_cleanup(&d);
	kvt_dir_close(slow_dir);
	kvt_fake_owner_stop(&slow.fo); /* every trickle ends */
	kvt_redis_proc_stop(&redis);
	kvt_test_rmdir(tmpdir);
	free(tmpdir);
	return 0;
}

/* The slow peer's entry in STATS' cluster.peers. */
static json_t *slow_peer_stats(json_t **root)
{
	json_t *peers;
	char *text = NULL;
	size_t i;
	json_t *p;

	assert_int_equal(kvt_client_stats(c, &text), 0);
	*root = json_loads(text, 0, NULL);
	free(text);
	assert_non_null(*root);
	peers = json_object_get(json_object_get(*root, "cluster"), "peers");
	json_array_foreach(peers, i, p)
		if (!strcmp(json_string_value(json_object_get(p, "node")), "slow"))
			return p;
	fail_msg("no peer \"slow\" in STATS");
	return NULL;
}

static void local_jobs_go_on_while_loads_wait_on_a_trickling_peer(void **state)
{
	struct kvt_key keys[N];
	uint32_t pages[N];
	uint64_t tickets[SLOW_LOADS], ticket, t0;
	int results[SLOW_LOADS], remote = 0, got, waiting = 0;
	bool done[SLOW_LOADS] = { false };
	json_t *root, *p;
	char *text;
	int port;

	(void)state;
	/* the trickler holds prefixes 1..SLOW_LOADS, as its hints say */
	for (int tag = 1; tag <= SLOW_LOADS; tag++) {
		make_keys(tag, keys);
		kvt_dir_publish(slow_dir, keys, N, KVT_TIER_DRAM);
	}
	for (int i = 0; i < 100; i++) {
		if (lookup(SLOW_LOADS, &remote) == N && remote == N)
			break;
		kvt_test_sleep_ms(50);
	}
	assert_int_equal(remote, N);
	for (int tag = 1; tag <= SLOW_LOADS; tag++) {
		assert_int_equal(lookup(tag, &remote), N);
		assert_int_equal(remote, N);
	}
	for (int tag = 1; tag <= SLOW_LOADS; tag++)
		tickets[tag - 1] = load_start(tag, 8 + (uint32_t)tag * N);
	t0 = now_ms();

	/* the engine's own SAVE and LOAD complete meanwhile */
	make_keys(LOCAL_TAG, keys);
	for (uint32_t i = 0; i < N; i++) {
		pages[i] = i;
		engine_page_fill(&mem, i, seed + i);
	}
	assert_int_equal(kvt_client_save(c, &ns, (uint32_t)mem.region, NULL, keys, pages, N,
					 &ticket), 0);
	got = kvt_client_wait(c, ticket, PROMPT_MS);
	fprintf(stderr, "local SAVE: %d after %llu ms\n", got, (unsigned long long)(now_ms() - t0));
	assert_int_equal(got, N);
	assert_int_equal(lookup(LOCAL_TAG, &remote), N);
	assert_int_equal(remote, 0);
	ticket = load_start(LOCAL_TAG, 40);
	got = kvt_client_wait(c, ticket, PROMPT_MS);
	fprintf(stderr, "local LOAD: %d after %llu ms\n", got, (unsigned long long)(now_ms() - t0));
	assert_int_equal(got, N);
	for (uint32_t i = 0; i < N; i++)
		assert_int_equal(engine_page_check(&mem, 40 + i, seed + i), 0);
	/* and while every LOAD of the trickler's blocks still waits: none had
	 * to end first (before, they held every worker and the SAVE came after
	 * them, at their deadline with one alone) */
	for (int k = 0; k < SLOW_LOADS; k++) {
		done[k] = kvt_client_poll(c, tickets[k], &results[k], NULL) == 1;
		waiting += !done[k];
	}
	fprintf(stderr, "slow LOADs still waiting then: %d of %d\n", waiting, SLOW_LOADS);
	assert_int_equal(waiting, SLOW_LOADS);

	/* each LOAD of the trickler's blocks ends by its fetch deadline (the
	 * first few; then the peer is down and the rest miss at once), with
	 * nothing loaded: a miss, never the bytes that trickled in */
	for (int k = 0; k < SLOW_LOADS; k++) {
		if (!done[k])
			results[k] = kvt_client_wait(c, tickets[k], TIMEOUT_MS + PROMPT_MS);
		assert_int_equal(results[k], 0);
	}
	fprintf(stderr, "slow LOADs: all done after %llu ms\n", (unsigned long long)(now_ms() - t0));
	fprintf(stderr, "trickler: %u connections, %u GETs\n",
		__atomic_load_n(&slow.conns, __ATOMIC_RELAXED),
		__atomic_load_n(&slow.gets, __ATOMIC_RELAXED));

	/* counted and marked slow: STATS, /metrics and the log say so */
	p = slow_peer_stats(&root);
	assert_true(json_integer_value(json_object_get(p, "slow")) >= 1);
	assert_true(json_is_true(json_object_get(p, "down")));
	json_decref(root);
	port = kvtd_metrics_port(&d);
	assert_true(port > 0);
	text = kvtd_http(port, "GET /metrics HTTP/1.0\r\n\r\n");
	assert_non_null(text);
	assert_true(kvtd_metric(text, "kvtier_peer_errors_total{peer=\"slow\",kind=\"slow\"}") >= 1);
	free(text);
	assert_true(kvtd_log_has(&d, "event=peer.slow node=slow"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(local_jobs_go_on_while_loads_wait_on_a_trickling_peer),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
