/* SPDX-License-Identifier: Apache-2.0 */
/* Three kvtierd nodes in network namespaces around a bridge, and one real
 * redis-server in the hub: an engine saves blocks through node A's socket
 * and loads them byte-exact through B's and C's (LOOKUP reports them
 * remote first); a node with the wrong secret joins the membership but
 * loads nothing; A's link cut: B's LOAD misses within the peer timeout and
 * works once the link is back; a block A lost (removed) is a miss for B,
 * and A forgets its hints; A killed: C loads A's blocks from B; Redis
 * killed: LOOKUP and LOAD answer local-only at once; Redis restarted: the
 * nodes rejoin and republish by themselves; a node restarted over its SSD
 * tier publishes the blocks it recovered; STATS and /metrics carry the
 * cluster; SIGTERM leaves the cluster and exits 0. The engine (this test)
 * reaches each daemon over its Unix socket, which no network namespace
 * hides. Skips where namespaces cannot be made. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "bench/netlab/netlab.h"
#include "helpers.h"
#include "app/daemon_proc.h"
#include "transport/sockio.h"

#define TIMEOUT_MS 800   /* the nodes' --peer-timeout */
#define BOUND_MS (TIMEOUT_MS + 2000)
#define PAGES 64
#define N 8              /* blocks per prefix */

struct node {
	struct kvtd_proc d;
	struct kvt_client *c;
	struct kvt_client_ns ns;
	struct engine_mem mem;
	char id[16];
};

static struct kvt_netlab net;
static struct kvt_redis_proc redis;
static struct node nodes[4];
static struct kvt_ns_desc desc;
static char *tmpdir, secret_file[512], wrong_file[512], redis_url[64];
static uint64_t seed;

static uint64_t now_ms(void)
{
	return kvt_now_ns() / 1000000;
}

static void print_log(const char *path)
{
	char line[1024];
	FILE *f = fopen(path, "r");

	fprintf(stderr, "---- %s\n", path);
	while (f && fgets(line, sizeof(line), f))
		fputs(line, stderr);
	if (f)
		fclose(f);
}

/* Start kvtierd `id` in namespace ns with a DRAM and an SSD tier of these
 * sizes, and connect an engine to it. */
static void node_start_with(int idx, int ns, const char *id, const char *secret,
			    const char *dram, const char *ssd)
{
	struct node *n = &nodes[idx];
	char dir[PATH_MAX - 64], data[PATH_MAX], listen[32], tmo[16];
	int fd;

	memset(n, 0, sizeof(*n));
	snprintf(n->id, sizeof(n->id), "%s", id);
	snprintf(dir, sizeof(dir), "%s/%s", tmpdir, id);
	mkdir(dir, 0700);
	n->d.dir = strdup(dir);
	n->d.sockdir = kvt_test_sockdir(id);
	assert_non_null(n->d.sockdir);
	snprintf(n->d.socket, sizeof(n->d.socket), "%.200s/kvtierd.sock", n->d.sockdir);
	snprintf(n->d.log, sizeof(n->d.log), "%s/kvtierd.log", dir);
	snprintf(data, sizeof(data), "%s/data", dir);
	snprintf(listen, sizeof(listen), "%s:7400", net.addr[ns]);
	snprintf(tmo, sizeof(tmo), "%d", TIMEOUT_MS);
	char *argv[] = { (char *)kvtd_binary(), "--socket", n->d.socket, "--data-dir", data,
			 "--dram", (char *)dram, "--ssd", (char *)ssd, "--metrics", "off", "--no-prefault",
			 "--no-gpu", "--log-level", "debug", "--cluster", redis_url, "--node-id",
			 n->id, "--peer-listen", listen, "--cluster-secret-file", (char *)secret,
			 "--peer-timeout", tmo, NULL };
	fd = open(n->d.log, O_WRONLY | O_CREAT | O_APPEND, 0644);
	assert_true(fd >= 0);
	n->d.pid = kvt_netlab_spawn(&net, ns, argv, -1, fd, fd);
	close(fd);
	assert_true(n->d.pid > 0);
	for (int i = 0; i < 500 && !n->c; i++) {
		struct kvt_client_opts o;
		int status;

		kvt_client_opts_init(&o, sizeof(o));
		o.socket_path = n->d.socket;
		if (kvt_client_connect(&o, &n->c) == 0)
			break;
		n->c = NULL;
		if (waitpid(n->d.pid, &status, WNOHANG) == n->d.pid) {
			n->d.pid = 0;
			print_log(n->d.log);
			fail_msg("kvtierd %s exited at start (status %d)", id, status);
		}
		kvt_test_sleep_ms(20);
	}
	if (!n->c) {
		print_log(n->d.log);
		fail_msg("kvtierd %s did not come up", id);
	}
	assert_int_equal(kvt_client_hello(n->c, &desc, &n->ns), 0);
	assert_int_equal(engine_mem_open(&n->mem, n->c, &n->ns, &desc, PAGES), 0);
}

static void node_start(int idx, int ns, const char *id, const char *secret)
{
	node_start_with(idx, ns, id, secret, "32M", "0");
}

/* Stop node idx with sig; returns its exit status (see kvtd_stop). */
static int node_stop(int idx, int sig)
{
	struct node *n = &nodes[idx];
	int st;

	if (n->d.pid <= 0)
		return -1;
	kvt_client_close(n->c);
	n->c = NULL;
	engine_mem_close(&n->mem);
	st = kvtd_stop(&n->d, sig);
	free(n->d.dir);
	n->d.dir = NULL;
	kvt_test_rmdir(n->d.sockdir);
	free(n->d.sockdir);
	n->d.sockdir = NULL;
	return st;
}

/* The keys of prefix `tag`: the same on every node (one namespace, one
 * tenant salt). */
static void make_keys(int tag, struct kvt_key *keys)
{
	uint32_t tokens[N * 4];
	uint64_t s = seed ^ ((uint64_t)tag * 0x9e3779b97f4a7c15ull) ^ 1;

	for (uint32_t i = 0; i < N * desc.block_tokens; i++)
		tokens[i] = (uint32_t)kvt_test_rand(&s);
	assert_int_equal(kvt_client_prefix_keys(&nodes[0].ns, NULL, tokens, N * desc.block_tokens,
						keys, N), N);
}

static uint64_t page_seed(int tag, uint32_t i)
{
	return seed * 31 + (uint64_t)tag * 1000 + i;
}

/* Save prefix tag through node idx (its pages 0..N). */
static void save(int idx, int tag)
{
	struct node *n = &nodes[idx];
	struct kvt_key keys[N];
	uint32_t pages[N];
	uint64_t ticket;

	make_keys(tag, keys);
	for (uint32_t i = 0; i < N; i++) {
		pages[i] = i;
		engine_page_fill(&n->mem, i, page_seed(tag, i));
	}
	assert_int_equal(kvt_client_save(n->c, &n->ns, (uint32_t)n->mem.region, NULL, keys, pages,
					 N, &ticket), 0);
	assert_int_equal(kvt_client_wait(n->c, ticket, 10000), N);
}

/* LOOKUP prefix tag on node idx: blocks found; *remote counts those in
 * tier remote. */
static int lookup(int idx, int tag, int *remote)
{
	struct node *n = &nodes[idx];
	struct kvt_key keys[N];
	uint8_t tiers[N];
	int got;

	make_keys(tag, keys);
	got = kvt_client_lookup(n->c, &n->ns, keys, N, tiers);
	*remote = 0;
	for (int i = 0; i < got; i++)
		*remote += tiers[i] == KVT_TIER_REMOTE;
	return got;
}

/* LOAD prefix tag through node idx into pages 32.. and check every byte of
 * what loaded. Returns the count loaded; *ms its time. */
static int load(int idx, int tag, uint64_t *ms)
{
	struct node *n = &nodes[idx];
	struct kvt_key keys[N];
	uint32_t pages[N];
	uint64_t ticket, t0 = now_ms();
	int got;

	make_keys(tag, keys);
	for (uint32_t i = 0; i < N; i++) {
		pages[i] = 32 + i;
		for (uint32_t l = 0; l < n->mem.layers; l++)
			for (uint32_t kv = 0; kv < 2; kv++)
				memset(engine_page(&n->mem, 32 + i, l, kv), 0, n->mem.page_bytes);
	}
	assert_int_equal(kvt_client_load(n->c, &n->ns, (uint32_t)n->mem.region, keys, pages, N,
					 &ticket), 0);
	got = kvt_client_wait(n->c, ticket, 20000);
	if (ms)
		*ms = now_ms() - t0;
	for (int i = 0; i < got; i++)
		assert_int_equal(engine_page_check(&n->mem, 32 + (uint32_t)i, page_seed(tag, (uint32_t)i)), 0);
	return got;
}

/* Node idx's STATS reply (a new reference). */
static json_t *root_stats(int idx)
{
	char *text = NULL;
	json_t *root;

	assert_int_equal(kvt_client_stats(nodes[idx].c, &text), 0);
	root = json_loads(text, 0, NULL);
	free(text);
	assert_non_null(root);
	return root;
}

/* Node idx's STATS "cluster" object (a new reference). */
static json_t *cluster_stats(int idx)
{
	json_t *root = root_stats(idx), *cl;

	cl = json_object_get(root, "cluster");
	assert_non_null(cl);
	json_incref(cl);
	json_decref(root);
	return cl;
}

static long stat_of(int idx, const char *obj, const char *key)
{
	json_t *cl = cluster_stats(idx);
	long v = (long)json_integer_value(json_object_get(json_object_get(cl, obj), key));

	if (json_is_true(json_object_get(json_object_get(cl, obj), key)))
		v = 1;
	json_decref(cl);
	return v;
}

/* Wait until node idx sees `want` live members, Redis reachable. */
static bool members_are(int idx, long want)
{
	for (int i = 0; i < 150; i++) {
		if (stat_of(idx, "directory", "members") == want &&
		    stat_of(idx, "directory", "reachable") == 1)
			return true;
		kvt_test_sleep_ms(100);
	}
	return false;
}

/* Wait until node idx's LOOKUP of prefix tag finds all of it remote (hints
 * are written in the background). */
static bool hinted(int idx, int tag)
{
	int remote;

	for (int i = 0; i < 100; i++) {
		if (lookup(idx, tag, &remote) == N && remote == N)
			return true;
		kvt_test_sleep_ms(50);
	}
	return false;
}

static int setup(void **state)
{
	char why[256];
	int err;

	(void)state;
	if (!getenv("KVTIERD"))
		kvt_test_skip(NULL, "KVTIERD is not set (run through ctest)");
	if (!kvt_redis_server_path())
		kvt_test_skip(NULL, "redis-server is not installed (apt-get install redis-server)");
	err = kvt_netlab_open(&net, 4, true, why, sizeof(why));
	if (err == -EPERM || err == -ENOENT)
		kvt_test_skip(NULL, "cannot make network namespaces: %s", why);
	if (err) {
		fprintf(stderr, "netlab: %s\n", why);
		return -1;
	}
	seed = kvt_test_seed();
	kvtd_test_desc(&desc, NULL);
	tmpdir = kvt_test_mkdtemp("kvtierd_cluster");
	snprintf(secret_file, sizeof(secret_file), "%s/secret", tmpdir);
	snprintf(wrong_file, sizeof(wrong_file), "%s/wrong", tmpdir);
	kvt_test_write_secret(secret_file, "the cluster secret of the kvtierd test");
	kvt_test_write_secret(wrong_file, "not the secret of this cluster at all");
	assert_int_equal(kvt_redis_proc_start(&redis, tmpdir, &net, KVT_NETLAB_HUB, net.hub_addr,
					      6379), 0);
	snprintf(redis_url, sizeof(redis_url), "redis://%s:6379", net.hub_addr);
	node_start(0, 0, "A", secret_file);
	node_start(1, 1, "B", secret_file);
	node_start(2, 2, "C", secret_file);
	for (int i = 0; i < 3; i++)
		assert_true(members_are(i, 3));
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < 4; i++)
		node_stop(i, SIGKILL);
	kvt_redis_proc_stop(&redis);
	kvt_netlab_close(&net);
	kvt_test_rmdir(tmpdir);
	free(tmpdir);
	return 0;
}

/* `kvtier stats` on node idx prints its cluster line and a row for A. */
static void stats_table_names_the_cluster(int idx)
{
	const char *cli = getenv("KVTIER_CLI");
	char cmd[1024], out[16384];
	size_t len;
	FILE *p;

	if (!cli)
		return;
	snprintf(cmd, sizeof(cmd), "%s stats --socket %s", cli, nodes[idx].d.socket);
	p = popen(cmd, "r");
	assert_non_null(p);
	len = fread(out, 1, sizeof(out) - 1, p);
	out[len] = 0;
	assert_int_equal(pclose(p), 0);
	fprintf(stderr, "%s", out);
	assert_non_null(strstr(out, "redis reachable"));
	assert_non_null(strstr(out, "3 members"));
	assert_non_null(strstr(out, "\nA "));
}

static void saved_on_a_loads_byte_exact_on_b_and_c(void **state)
{
	int remote;
	json_t *cl, *peers, *root;
	bool from_a = false;

	(void)state;
	save(0, 1);
	assert_true(hinted(1, 1));
	assert_int_equal(lookup(2, 1, &remote), N);
	assert_int_equal(remote, N);
	assert_int_equal(load(1, 1, NULL), N);
	assert_int_equal(load(2, 1, NULL), N);
	/* a first LOAD lands the blocks in the engine's pages only (no DRAM
	 * slot, no copy): C holds none of them yet */
	assert_int_equal(lookup(2, 1, &remote), N);
	assert_int_equal(remote, N);
	/* loaded again, they are kept: now local on B and C, found in DRAM */
	assert_int_equal(load(1, 1, NULL), N);
	assert_int_equal(load(2, 1, NULL), N);
	assert_int_equal(lookup(2, 1, &remote), N);
	assert_int_equal(remote, 0);
	assert_int_equal(load(2, 1, NULL), N);
	/* B counts what it took from A, A what it served */
	cl = cluster_stats(1);
	assert_true(json_integer_value(json_object_get(json_object_get(cl, "peer_tier"),
						       "blocks")) >= N);
	peers = json_object_get(cl, "peers");
	for (size_t i = 0; i < json_array_size(peers); i++) {
		json_t *p = json_array_get(peers, i);

		if (!strcmp(json_string_value(json_object_get(p, "node")), "A")) {
			from_a = json_integer_value(json_object_get(p, "hits")) >= N &&
				 json_integer_value(json_object_get(p, "bytes")) >=
					 (json_int_t)(N * nodes[1].ns.block_bytes);
		}
	}
	json_decref(cl);
	assert_true(from_a);
	assert_true(stat_of(0, "serving", "blocks_sent") >= 2 * N);
	/* B looked them up (remote) before its LOAD: the LOAD measured what
	 * the remote tier delivers, for the plan; and counted the blocks */
	root = root_stats(1);
	assert_true(json_integer_value(json_object_get(
		json_object_get(json_object_get(json_object_get(root, "plan"), "tiers"), "remote"),
		"samples")) >= 1);
	assert_true(json_integer_value(json_object_get(json_object_get(root, "copies"),
						       "load_remote_blocks")) >= N);
	assert_true(json_integer_value(json_object_get(json_object_get(root, "copies"),
						       "lookup_remote_keys")) >= N);
	json_decref(root);
	stats_table_names_the_cluster(1);
}

static void a_node_with_the_wrong_secret_loads_nothing(void **state)
{
	long refused0 = stat_of(0, "serving", "auth_failures") +
			stat_of(1, "serving", "auth_failures") +
			stat_of(2, "serving", "auth_failures");
	int remote;

	(void)state;
	node_start(3, 3, "intruder", wrong_file);
	assert_true(members_are(3, 4)); /* it reaches Redis, not the peers' blocks */
	assert_true(hinted(3, 1));
	assert_int_equal(load(3, 1, NULL), 0);
	assert_int_equal(lookup(3, 1, &remote), N); /* still only hints: nothing stored */
	assert_int_equal(remote, N);
	assert_true(stat_of(0, "serving", "auth_failures") + stat_of(1, "serving", "auth_failures") +
		    stat_of(2, "serving", "auth_failures") > refused0);
	assert_int_equal(node_stop(3, SIGTERM), 0);
	assert_true(members_are(0, 3));
}

static void a_cut_link_misses_within_the_timeout_and_heals(void **state)
{
	uint64_t ms;
	int got = 0;

	(void)state;
	save(0, 2);
	assert_true(hinted(1, 2));
	assert_int_equal(kvt_netlab_link(&net, 0, false), 0);
	assert_int_equal(load(1, 2, &ms), 0); /* the directory names A only */
	fprintf(stderr, "load over a cut link: a miss after %llu ms\n", (unsigned long long)ms);
	assert_true(ms >= TIMEOUT_MS);
	assert_true(ms < BOUND_MS);
	/* B still serves its own clients */
	assert_int_equal(load(1, 1, NULL), N);
	assert_int_equal(kvt_netlab_link(&net, 0, true), 0);
	for (int i = 0; i < 50 && got != N; i++) { /* A is marked down for a moment */
		got = load(1, 2, NULL);
		if (got != N)
			kvt_test_sleep_ms(100);
	}
	assert_int_equal(got, N);
}

static void a_block_its_owner_lost_loses_its_hint(void **state)
{
	struct kvt_key keys[N];
	int remote = N, i;

	(void)state;
	save(0, 5);
	assert_true(hinted(1, 5));
	make_keys(5, keys);
	assert_int_equal(kvt_client_remove(nodes[0].c, &nodes[0].ns, keys, N), N);
	/* B is sent to A, A has nothing: a miss, and A forgets its hints */
	assert_int_equal(load(1, 5, NULL), 0);
	assert_true(stat_of(0, "serving", "hints_forgotten") >= 1);
	for (i = 0; i < 50 && remote; i++) {
		int got = lookup(1, 5, &remote);

		assert_int_equal(got, remote); /* B holds none of it */
		if (remote)
			kvt_test_sleep_ms(50);
	}
	assert_int_equal(remote, 0);
}

static void a_killed_nodes_blocks_load_from_another_holder(void **state)
{
	int remote;

	(void)state;
	save(0, 3);
	assert_true(hinted(1, 3));
	assert_int_equal(load(1, 3, NULL), N);
	assert_int_equal(load(1, 3, NULL), N); /* loaded twice: B holds it too now */
	node_stop(0, SIGKILL);
	/* A's hints may still be live: C tries A, is refused, takes B's */
	assert_int_equal(load(2, 3, NULL), N);
	assert_true(members_are(1, 2));
	/* A restarted is empty and rejoins; its old hints name nothing */
	node_start(0, 0, "A", secret_file);
	assert_true(members_are(0, 3));
	assert_int_equal(lookup(0, 3, &remote), N); /* B and C hold it */
	assert_int_equal(remote, N);
	assert_int_equal(load(0, 3, NULL), N);
}

/* Whether node idx holds all of prefix tag on SSD. */
static bool on_ssd(int idx, int tag)
{
	struct kvt_key keys[N];
	uint8_t tiers[N];

	make_keys(tag, keys);
	if (kvt_client_lookup(nodes[idx].c, &nodes[idx].ns, keys, N, tiers) != N)
		return false;
	for (int i = 0; i < N; i++)
		if (tiers[i] != KVT_TIER_SSD)
			return false;
	return true;
}

/* A node restarted over its SSD tier publishes what it recovered (the old
 * code published only what was saved or fetched after the start, so other
 * nodes never found those blocks again). */
static void a_restarted_nodes_ssd_blocks_are_found_again(void **state)
{
	int round, tag = 100;

	(void)state;
	node_start_with(3, 3, "D", secret_file, "8M", "64M");
	assert_true(members_are(3, 4));
	save(3, 7);
	/* other prefixes push prefix 7 down to D's SSD (no lookup of it in
	 * between: that would keep it in DRAM) */
	for (round = 0; round < 8 && !on_ssd(3, 7); round++)
		for (int i = 0; i < 200; i++)
			save(3, tag++);
	assert_true(on_ssd(3, 7));
	assert_int_equal(node_stop(3, SIGTERM), 0);
	assert_true(members_are(1, 3));

	node_start_with(3, 3, "D", secret_file, "8M", "64M");
	assert_true(members_are(1, 4));
	assert_true(hinted(1, 7));
	assert_int_equal(load(1, 7, NULL), N);
	assert_true(stat_of(3, "directory", "refresh_walks") >= 1);
	assert_true(stat_of(3, "directory", "refresh_keys") >= N);
	/* from D: its counter may be bumped just after B has the bytes */
	for (int i = 0; i < 100 && stat_of(3, "serving", "blocks_sent") < N; i++)
		kvt_test_sleep_ms(20);
	assert_true(stat_of(3, "serving", "blocks_sent") >= N);
	assert_int_equal(node_stop(3, SIGTERM), 0);
	assert_true(members_are(0, 3));
}

static void redis_down_is_local_only_and_back_it_resumes(void **state)
{
	uint64_t t0, ms;
	int remote, i;
	long epoch;

	(void)state;
	save(2, 4);
	assert_true(hinted(1, 4));
	epoch = stat_of(1, "directory", "epoch");
	kvt_redis_proc_signal(&redis, SIGKILL);
	for (i = 0; i < 50 && stat_of(1, "directory", "reachable"); i++)
		kvt_test_sleep_ms(100);
	t0 = now_ms();
	assert_int_equal(lookup(1, 4, &remote), 0);
	assert_int_equal(load(1, 4, &ms), 0);
	assert_true(now_ms() - t0 < 1000);
	assert_int_equal(load(1, 1, NULL), N); /* local blocks still load */

	assert_int_equal(kvt_redis_proc_restart(&redis), 0);
	for (i = 0; i < 3; i++)
		assert_true(members_are(i, 3));
	assert_true(stat_of(1, "directory", "epoch") > epoch);
	/* C republished what it saved under its new epoch */
	assert_true(hinted(1, 4));
	assert_int_equal(load(1, 4, NULL), N);
}

static void sigterm_leaves_the_cluster_and_exits_cleanly(void **state)
{
	uint64_t t0;

	(void)state;
	t0 = now_ms();
	assert_int_equal(node_stop(2, SIGTERM), 0);
	/* its record is deleted as it leaves: gone before its TTL (3 s) ends */
	assert_true(members_are(1, 2));
	fprintf(stderr, "C left the membership after %llu ms\n",
		(unsigned long long)(now_ms() - t0));
	assert_true(now_ms() - t0 < 2500);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(saved_on_a_loads_byte_exact_on_b_and_c),
		cmocka_unit_test(a_node_with_the_wrong_secret_loads_nothing),
		cmocka_unit_test(a_cut_link_misses_within_the_timeout_and_heals),
		cmocka_unit_test(a_block_its_owner_lost_loses_its_hint),
		cmocka_unit_test(a_killed_nodes_blocks_load_from_another_holder),
		cmocka_unit_test(a_restarted_nodes_ssd_blocks_are_found_again),
		cmocka_unit_test(redis_down_is_local_only_and_back_it_resumes),
		cmocka_unit_test(sigterm_leaves_the_cluster_and_exits_cleanly),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
