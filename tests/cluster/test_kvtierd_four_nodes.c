/* SPDX-License-Identifier: Apache-2.0 */
/* Four real kvtierd nodes, each in its own network namespace around a
 * bridge, every link shaped by tc (tbf) to a fixed rate, and a real
 * redis-server in the hub. A prefix spread over three holders (block i
 * saved through node i % 3) loads byte-exact through the fourth, its
 * holders asked at once: the peer tier's STATS show three holder requests
 * in flight together (before, a read batch asked its holders one after
 * another, and two LOAD windows made two at most). A fifth node joins and
 * leaves while the reader loads: no wrong byte and no short LOAD of a
 * prefix others hold, and afterwards the reader misses exactly the blocks
 * only the leaver held. Skips where namespaces or tbf cannot be made. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "bench/netlab/netlab.h"
#include "helpers.h"
#include "app/daemon_proc.h"
#include "util/clock.h"

#define N 96                    /* blocks per prefix (128 KiB: 12 MiB) */
#define PAGES (2 * N)           /* pages [0, N) save, [N, 2N) load */
#define RATE 400000000ull       /* bits/s of every link */
#define READER 3
#define JOINER 4

struct node {
	struct kvtd_proc d;
	struct kvt_client *c;
	struct kvt_client_ns ns;
	struct engine_mem mem;
	char id[16];
};

static struct kvt_netlab net;
static struct kvt_redis_proc redis;
static struct node nodes[5];
static struct kvt_ns_desc desc;
static char *tmpdir, secret_file[512], redis_url[64];
static uint64_t seed;

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

/* Connect an engine to n's socket (and map its pages). */
static void engine_open(struct node *n, struct kvt_client **c, struct kvt_client_ns *ns,
			struct engine_mem *mem)
{
	struct kvt_client_opts o;

	kvt_client_opts_init(&o, sizeof(o));
	o.socket_path = n->d.socket;
	assert_int_equal(kvt_client_connect(&o, c), 0);
	assert_int_equal(kvt_client_hello(*c, &desc, ns), 0);
	assert_int_equal(engine_mem_open(mem, *c, ns, &desc, PAGES), 0);
}

/* Start kvtierd `id` as node idx in namespace idx. */
static void node_start(int idx, const char *id)
{
	struct node *n = &nodes[idx];
	char dir[PATH_MAX - 64], data[PATH_MAX], listen[32];
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
	snprintf(listen, sizeof(listen), "%s:7400", net.addr[idx]);
	char *argv[] = { (char *)kvtd_binary(), "--socket", n->d.socket, "--data-dir", data,
			 "--dram", "64M", "--ssd", "0", "--metrics", "off", "--no-prefault",
			 "--no-gpu", "--cluster", redis_url, "--node-id", n->id, "--peer-listen",
			 listen, "--cluster-secret-file", secret_file, "--peer-timeout", "1000", NULL };
	fd = open(n->d.log, O_WRONLY | O_CREAT | O_APPEND, 0644);
	assert_true(fd >= 0);
	n->d.pid = kvt_netlab_spawn(&net, idx, argv, -1, fd, fd);
	close(fd);
	assert_true(n->d.pid > 0);
	for (int i = 0; i < 500; i++) {
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
	kvt_client_close(n->c);
	n->c = NULL;
	engine_open(n, &n->c, &n->ns, &n->mem);
}

static int node_stop(int idx, int sig)
{
	struct node *n = &nodes[idx];
	int st;

	if (n->d.pid <= 0)
		return -1;
	engine_mem_close(&n->mem);
	kvt_client_close(n->c);
	n->c = NULL;
	st = kvtd_stop(&n->d, sig);
	free(n->d.dir);
	n->d.dir = NULL;
	kvt_test_rmdir(n->d.sockdir);
	free(n->d.sockdir);
	n->d.sockdir = NULL;
	return st;
}

/* The keys of prefix tag: the same on every node. */
static void make_keys(int tag, struct kvt_key *keys)
{
	uint32_t tokens[N * 16];
	uint64_t s = seed ^ ((uint64_t)tag * 0x9e3779b97f4a7c15ull) ^ 1;

	assert_true(N * desc.block_tokens <= N * 16);
	for (uint32_t i = 0; i < N * desc.block_tokens; i++)
		tokens[i] = (uint32_t)kvt_test_rand(&s);
	assert_int_equal(kvt_client_prefix_keys(&nodes[READER].ns, NULL, tokens,
						N * desc.block_tokens, keys, N), N);
}

static uint64_t page_seed(int tag, uint32_t i)
{
	return seed * 31 + (uint64_t)tag * 1000 + i;
}

/* Save block i of prefix tag through node idx, with its parent. */
static void save_block(int idx, int tag, const struct kvt_key *keys, uint32_t i)
{
	struct node *n = &nodes[idx];
	uint64_t ticket;

	engine_page_fill(&n->mem, i, page_seed(tag, i));
	assert_int_equal(kvt_client_save(n->c, &n->ns, (uint32_t)n->mem.region,
					 i ? &keys[i - 1] : NULL, &keys[i], &i, 1, &ticket), 0);
	assert_int_equal(kvt_client_wait(n->c, ticket, 10000), 1);
}

/* Keys [from, from + n) of prefix tag through c, into pages N.. and check
 * each loaded block. Returns the blocks loaded; *bad counts wrong ones. */
static int load_on(struct kvt_client *c, struct kvt_client_ns *ns, struct engine_mem *mem,
		   int tag, uint32_t from, uint32_t n, int *bad)
{
	struct kvt_key keys[N];
	uint32_t pages[N];
	uint64_t ticket;
	int got;

	make_keys(tag, keys);
	for (uint32_t i = 0; i < n; i++) {
		pages[i] = N + from + i;
		for (uint32_t l = 0; l < mem->layers; l++)
			for (uint32_t kv = 0; kv < 2; kv++)
				memset(engine_page(mem, N + from + i, l, kv), 0, mem->page_bytes);
	}
	if (kvt_client_load(c, ns, (uint32_t)mem->region, keys + from, pages, n, &ticket))
		return -1;
	got = kvt_client_wait(c, ticket, 30000);
	for (int i = 0; i < got; i++)
		*bad += engine_page_check(mem, N + from + (uint32_t)i,
					  page_seed(tag, from + (uint32_t)i)) != 0;
	return got;
}

/* Blocks of prefix tag node idx finds, and of them remote. */
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

static bool hinted(int idx, int tag)
{
	int remote;

	for (int i = 0; i < 200; i++) {
		if (lookup(idx, tag, &remote) == N && remote == N)
			return true;
		kvt_test_sleep_ms(50);
	}
	return false;
}

/* Node idx's STATS "cluster" member obj (a new reference). */
static json_t *cluster_obj(int idx, const char *obj)
{
	char *text = NULL;
	json_t *root, *o;

	assert_int_equal(kvt_client_stats(nodes[idx].c, &text), 0);
	root = json_loads(text, 0, NULL);
	free(text);
	assert_non_null(root);
	o = json_object_get(json_object_get(root, "cluster"), obj);
	assert_non_null(o);
	json_incref(o);
	json_decref(root);
	return o;
}

static long stat_of(int idx, const char *obj, const char *key)
{
	json_t *o = cluster_obj(idx, obj);
	json_t *v = json_object_get(o, key);
	long r = json_is_true(v) ? 1 : (long)json_integer_value(v);

	json_decref(o);
	return r;
}

/* Blocks node idx fetched from peer `id`. */
static long hits_from(int idx, const char *id)
{
	json_t *peers = cluster_obj(idx, "peers");
	long hits = 0;

	for (size_t i = 0; i < json_array_size(peers); i++) {
		json_t *p = json_array_get(peers, i);

		if (!strcmp(json_string_value(json_object_get(p, "node")), id))
			hits = (long)json_integer_value(json_object_get(p, "hits"));
	}
	json_decref(peers);
	return hits;
}

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

static int setup(void **state)
{
	char why[256];
	int err;

	(void)state;
	if (!getenv("KVTIERD"))
		kvt_test_skip(NULL, "KVTIERD is not set (run through ctest)");
	if (!kvt_redis_server_path())
		kvt_test_skip(NULL, "redis-server is not installed (apt-get install redis-server)");
	err = kvt_netlab_open(&net, 5, true, why, sizeof(why));
	if (err == -EPERM || err == -ENOENT)
		kvt_test_skip(NULL, "cannot make network namespaces: %s", why);
	if (err) {
		fprintf(stderr, "netlab: %s\n", why);
		return -1;
	}
	for (int i = 0; i < 5; i++) {
		/* the reader's link takes its three holders' at once */
		err = kvt_netlab_shape(&net, i, i == READER ? 3 * RATE : RATE, why, sizeof(why));
		if (err == -ENOENT || err == -EOPNOTSUPP) {
			kvt_netlab_close(&net);
			kvt_test_skip(NULL, "cannot shape links with tc tbf: %s", why);
		}
		assert_int_equal(err, 0);
	}
	seed = kvt_test_seed();
	kvtd_test_desc_128k(&desc, NULL);
	tmpdir = kvt_test_mkdtemp("kvtierd_four_nodes");
	snprintf(secret_file, sizeof(secret_file), "%s/secret", tmpdir);
	kvt_test_write_secret(secret_file, "the cluster secret of the four-node test");
	assert_int_equal(kvt_redis_proc_start(&redis, tmpdir, &net, KVT_NETLAB_HUB, net.hub_addr,
					      6379), 0);
	snprintf(redis_url, sizeof(redis_url), "redis://%s:6379", net.hub_addr);
	node_start(0, "A");
	node_start(1, "B");
	node_start(2, "C");
	node_start(READER, "R");
	for (int i = 0; i < 4; i++)
		assert_true(members_are(i, 4));
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < 5; i++)
		node_stop(i, SIGKILL);
	kvt_redis_proc_stop(&redis);
	kvt_netlab_close(&net);
	kvt_test_rmdir(tmpdir);
	free(tmpdir);
	return 0;
}

/* Prefix tag, block i saved through node i % holders. */
static void save_spread(int tag, int holders)
{
	struct kvt_key keys[N];

	make_keys(tag, keys);
	for (uint32_t i = 0; i < N; i++)
		save_block((int)(i % (uint32_t)holders), tag, keys, i);
}

static void a_spread_prefix_loads_from_its_holders_at_once(void **state)
{
	struct node *r = &nodes[READER];
	uint64_t t0;
	int bad = 0, got;

	(void)state;
	save_spread(1, 3);
	assert_true(hinted(READER, 1));
	t0 = kvt_now_ns();
	got = load_on(r->c, &r->ns, &r->mem, 1, 0, N, &bad);
	fprintf(stderr, "R loaded %d of %d blocks from A, B and C in %llu ms; fetching_max %ld, "
		"parallel_rounds %ld\n", got, N, (unsigned long long)((kvt_now_ns() - t0) / 1000000),
		stat_of(READER, "peer_tier", "fetching_max"),
		stat_of(READER, "peer_tier", "parallel_rounds"));
	assert_int_equal(got, N);
	assert_int_equal(bad, 0);
	/* each holder served its third */
	assert_int_equal(hits_from(READER, "A"), N / 3);
	assert_int_equal(hits_from(READER, "B"), N / 3);
	assert_int_equal(hits_from(READER, "C"), N / 3);
	/* and they were asked at once: three requests in flight together */
	assert_true(stat_of(READER, "peer_tier", "parallel_rounds") >= 1);
	assert_true(stat_of(READER, "peer_tier", "fetching_max") >= 3);
}

/* The reader's load: prefix 1 (held by A, B, C) over and over, through an
 * engine of its own, until told to stop. */
struct loader {
	pthread_t th;
	bool stop;              /* atomic */
	int loads, short_loads, bad, failed;
};

static void *loader_main(void *arg)
{
	struct loader *l = arg;
	struct kvt_client *c = NULL;
	struct kvt_client_ns ns;
	struct engine_mem mem;
	struct kvt_client_opts o;
	struct kvt_key keys[N];

	kvt_client_opts_init(&o, sizeof(o));
	o.socket_path = nodes[READER].d.socket;
	if (kvt_client_connect(&o, &c) || kvt_client_hello(c, &desc, &ns) ||
	    engine_mem_open(&mem, c, &ns, &desc, PAGES)) {
		l->failed = 1;
		kvt_client_close(c);
		return NULL;
	}
	make_keys(1, keys);
	while (!__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE)) {
		int got = load_on(c, &ns, &mem, 1, 0, N, &l->bad);

		l->loads++;
		l->short_loads += got != N;
		/* dropped again, so that the next LOAD goes to the peers too */
		kvt_client_remove(c, &ns, keys, N);
	}
	engine_mem_close(&mem);
	kvt_client_close(c);
	return NULL;
}

static void a_node_joining_and_leaving_under_load_costs_only_its_blocks(void **state)
{
	struct node *r = &nodes[READER];
	struct loader l = { 0 };
	int bad = 0, remote;

	(void)state;
	assert_int_equal(pthread_create(&l.th, NULL, loader_main, &l), 0);
	/* D joins while R loads, and holds a quarter of prefix 2 */
	node_start(JOINER, "D");
	for (int i = 0; i < 5; i++)
		assert_true(members_are(i, 5));
	{
		struct kvt_key keys[N];

		make_keys(2, keys);
		for (uint32_t i = 0; i < N; i++)
			save_block(i % 4 == 3 ? JOINER : (int)(i % 4), 2, keys, i);
	}
	assert_true(hinted(READER, 2));
	assert_int_equal(load_on(r->c, &r->ns, &r->mem, 2, 0, N, &bad), N);
	fprintf(stderr, "R took %ld blocks from D\n", hits_from(READER, "D"));
	assert_true(hits_from(READER, "D") >= N / 4);
	/* D leaves (SIGTERM: its record is deleted) while R loads */
	assert_int_equal(node_stop(JOINER, SIGTERM), 0);
	assert_true(members_are(READER, 4));
	kvt_test_sleep_ms(300);
	__atomic_store_n(&l.stop, true, __ATOMIC_RELEASE);
	pthread_join(l.th, NULL);
	fprintf(stderr, "under load: %d LOADs of prefix 1, %d short, %d wrong blocks\n", l.loads,
		l.short_loads, l.bad);
	assert_int_equal(l.failed, 0);
	assert_true(l.loads >= 2);
	assert_int_equal(l.short_loads, 0);
	assert_int_equal(l.bad, 0);
	/* block by block, R misses exactly those only D held */
	assert_int_equal(lookup(READER, 2, &remote), 3); /* its first LOAD kept none */
	for (uint32_t i = 0; i < N; i++) {
		int got = load_on(r->c, &r->ns, &r->mem, 2, i, 1, &bad);

		if (got != (i % 4 == 3 ? 0 : 1))
			fail_msg("block %u (held by %s): LOAD gave %d", i,
				 i % 4 == 3 ? "D alone" : "a live node", got);
	}
	assert_int_equal(bad, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_spread_prefix_loads_from_its_holders_at_once),
		cmocka_unit_test(a_node_joining_and_leaving_under_load_costs_only_its_blocks),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
