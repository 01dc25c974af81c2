/* SPDX-License-Identifier: Apache-2.0 */
/* A directory that survives its Redis server: real redis-servers, a primary
 * and its replica, and one Sentinel monitoring them (down after 500 ms), all
 * on 127.0.0.1 at free ports with their files in a temp dir; two real
 * kvtierd nodes whose directory is `--cluster sentinel://127.0.0.1:PORT/kvtdir`.
 * Node A saves a new prefix every turn and node B LOOKUPs and LOADs one
 * saved a few turns before. The primary is killed (SIGKILL) under that load:
 * Sentinel promotes the replica and both nodes follow it. Meanwhile every
 * LOOKUP answers (remote hits may drop, never wrong bytes) and no call takes
 * as long as --peer-timeout; remote hits come back, for prefixes saved
 * before and after the kill. Hints lost in the failover come back: the
 * hints of one prefix are deleted on the (writable) replica before the kill,
 * as if the primary had acknowledged them without passing them on, and
 * node A sends its recent writes again to the new primary; then FLUSHALL
 * on the new primary loses every record and hint, and the nodes rejoin and
 * republish. Skips where redis-server is not installed. */
#include <errno.h>
#include <fcntl.h>
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <jansson.h>

#include "bench/netlab/netlab.h"
#include "cluster/dir_record.h"
#include "helpers.h"
#include "app/daemon_proc.h"
#include "util/clock.h"

#define TIMEOUT_MS 2000  /* the nodes' --peer-timeout */
#define TIMEOUT_ARG "2000"
#define N 4              /* blocks per prefix */
#define PAGES 64
#define LAG 3            /* B reads the prefix A saved this many turns before */
#define LOST_TAG 1       /* the prefix whose hints the replica never got */
#define OLD_TAG 2        /* one saved before the kill, replicated, never loaded */
#define MASTER "kvtdir"
#define FAILOVER_BOUND_MS 30000 /* the test gives up: not a speed claim */

struct rproc {
	pid_t pid;
	int port;
	char dir[300];
};

static struct rproc primary, replica, sentinel;
static struct kvtd_proc d[2];
static struct kvt_client *c[2];
static struct kvt_client_ns ns[2];
static struct engine_mem mem[2];
static struct kvt_ns_desc desc;
static char *tmpdir, secret_file[512];
static uint64_t seed;

static uint64_t now_ms(void)
{
	return kvt_now_ns() / 1000000;
}

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

/* ---- the Redis side ------------------------------------------------------ */

/* One command to the server at port; NULL when it does not answer. */
static redisReply *rcmd(int port, const char *fmt, ...)
{
	struct timeval tv = { .tv_sec = 1 };
	redisContext *ctx = redisConnectWithTimeout("127.0.0.1", port, tv);
	redisReply *rep = NULL;
	va_list ap;

	if (ctx && !ctx->err) {
		redisSetTimeout(ctx, tv);
		va_start(ap, fmt);
		rep = redisvCommand(ctx, fmt, ap);
		va_end(ap);
	}
	if (ctx)
		redisFree(ctx);
	return rep;
}

/* Whether the reply to INFO section at port holds `what`. */
static bool info_has(int port, const char *section, const char *what)
{
	redisReply *r = rcmd(port, "INFO %s", section);
	bool has = r && r->type == REDIS_REPLY_STRING && strstr(r->str, what);

	if (r)
		freeReplyObject(r);
	return has;
}

static void print_file(const char *path)
{
	char line[512];
	FILE *f = fopen(path, "r");

	if (!f)
		return;
	fprintf(stderr, "--- %s\n", path);
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fclose(f);
}

/* Start redis-server (args after the binary, NULL-terminated) in dir p->dir
 * and wait until it answers PING. */
static void rproc_start(struct rproc *p, const char *const *args)
{
	char log[340], *argv[32];
	int a = 0, fd;

	argv[a++] = (char *)kvt_redis_server_path();
	for (; *args; args++)
		argv[a++] = (char *)*args;
	argv[a] = NULL;
	snprintf(log, sizeof(log), "%s/out.log", p->dir);
	fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
	assert_true(fd >= 0);
	p->pid = kvt_netlab_spawn(NULL, 0, argv, -1, fd, fd);
	close(fd);
	assert_true(p->pid > 0);
	for (int i = 0; i < 250; i++) {
		redisReply *r = rcmd(p->port, "PING");
		bool up = r && r->type == REDIS_REPLY_STATUS;

		if (r)
			freeReplyObject(r);
		if (up)
			return;
		kvt_test_sleep_ms(20);
	}
	print_file(log);
	fail_msg("redis-server on port %d did not come up", p->port);
}

static void rproc_kill(struct rproc *p)
{
	if (p->pid > 0) {
		kill(p->pid, SIGKILL);
		waitpid(p->pid, NULL, 0);
	}
	p->pid = 0;
}

static void rproc_dir(struct rproc *p, const char *name)
{
	snprintf(p->dir, sizeof(p->dir), "%s/%s", tmpdir, name);
	assert_int_equal(mkdir(p->dir, 0700), 0);
	p->port = free_port();
}

/* A Redis server on 127.0.0.1, no persistence; replica_of: the primary's
 * port, or 0. The replica is writable, so the test can take from it what
 * a primary acknowledged and never passed on. */
static void start_redis(struct rproc *p, const char *name, int replica_of)
{
	char port[16], of[32];

	rproc_dir(p, name);
	snprintf(port, sizeof(port), "%d", p->port);
	snprintf(of, sizeof(of), "127.0.0.1 %d", replica_of);
	const char *args[] = { "--port", port, "--bind", "127.0.0.1", "--save", "",
			       "--appendonly", "no", "--dir", p->dir, "--daemonize", "no",
			       "--replica-read-only", "no", NULL, NULL, NULL };
	if (replica_of) {
		args[14] = "--replicaof";
		args[15] = of;
	}
	rproc_start(p, args);
}

/* One Sentinel monitoring the primary, alone a quorum: down after 500 ms. */
static void start_sentinel(void)
{
	char conf[340];
	FILE *f;

	rproc_dir(&sentinel, "sentinel");
	snprintf(conf, sizeof(conf), "%s/sentinel.conf", sentinel.dir);
	f = fopen(conf, "w");
	assert_non_null(f);
	fprintf(f, "port %d\nbind 127.0.0.1\ndir %s\n"
		"sentinel monitor " MASTER " 127.0.0.1 %d 1\n"
		"sentinel down-after-milliseconds " MASTER " 500\n"
		"sentinel failover-timeout " MASTER " 5000\n"
		"sentinel parallel-syncs " MASTER " 1\n",
		sentinel.port, sentinel.dir, primary.port);
	fclose(f);
	const char *args[] = { conf, "--sentinel", NULL };
	rproc_start(&sentinel, args);
}

/* Whether the Sentinel sees the replica, its link to the primary up (only
 * then can it promote it). */
static bool sentinel_sees_replica(void)
{
	redisReply *r = rcmd(sentinel.port, "SENTINEL replicas " MASTER);
	bool ok = false;

	for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
		redisReply *e = r->element[i];

		for (size_t j = 0; j + 1 < e->elements; j += 2)
			if (!strcmp(e->element[j]->str, "master-link-status") &&
			    !strcmp(e->element[j + 1]->str, "ok"))
				ok = true;
	}
	if (r)
		freeReplyObject(r);
	return ok;
}

/* ---- the nodes ----------------------------------------------------------- */

static void node_start(int i, const char *id)
{
	char url[64], listen[32];

	snprintf(url, sizeof(url), "sentinel://127.0.0.1:%d/" MASTER, sentinel.port);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", free_port());
	const char *extra[] = { "--cluster", url, "--node-id", id, "--peer-listen", listen,
				"--cluster-secret-file", secret_file, "--peer-timeout", TIMEOUT_ARG,
				"--metrics", "127.0.0.1:0", NULL };
	assert_int_equal(kvtd_start(&d[i], NULL, extra), 0);
	c[i] = kvtd_connect(&d[i], NULL);
	assert_non_null(c[i]);
	assert_int_equal(kvt_client_hello(c[i], &desc, &ns[i]), 0);
	assert_int_equal(engine_mem_open(&mem[i], c[i], &ns[i], &desc, PAGES), 0);
}

static void make_keys(int tag, struct kvt_key *keys)
{
	uint32_t tokens[N * 16];
	uint64_t s = seed ^ ((uint64_t)tag * 0x9e3779b97f4a7c15ull) ^ 1;

	for (uint32_t i = 0; i < N * desc.block_tokens; i++)
		tokens[i] = (uint32_t)kvt_test_rand(&s);
	assert_int_equal(kvt_client_prefix_keys(&ns[0], NULL, tokens, N * desc.block_tokens, keys,
						N), N);
}

static uint64_t page_seed(int tag, uint32_t i)
{
	return seed * 31 + (uint64_t)tag * 1000 + i;
}

/* Save prefix tag through A (its pages 0..N); returns the call's time. */
static uint64_t save(int tag)
{
	struct kvt_key keys[N];
	uint32_t pages[N];
	uint64_t ticket, t0 = now_ms();

	make_keys(tag, keys);
	for (uint32_t i = 0; i < N; i++) {
		pages[i] = i;
		engine_page_fill(&mem[0], i, page_seed(tag, i));
	}
	assert_int_equal(kvt_client_save(c[0], &ns[0], (uint32_t)mem[0].region, NULL, keys, pages,
					 N, &ticket), 0);
	assert_int_equal(kvt_client_wait(c[0], ticket, TIMEOUT_MS), N);
	return now_ms() - t0;
}

/* LOOKUP prefix tag on B: the blocks found remote; *ms the call's time. */
static int lookup_remote(int tag, uint64_t *ms)
{
	struct kvt_key keys[N];
	uint8_t tiers[N];
	uint64_t t0 = now_ms();
	int got, remote = 0;

	make_keys(tag, keys);
	got = kvt_client_lookup(c[1], &ns[1], keys, N, tiers);
	if (ms)
		*ms = now_ms() - t0;
	assert_true(got >= 0); /* it answers, whatever the directory's state */
	for (int i = 0; i < got; i++)
		remote += tiers[i] == KVT_TIER_REMOTE;
	return remote;
}

/* LOAD prefix tag through B into pages 32.. and check every byte that
 * loaded; returns the count loaded, *ms the call's time. */
static int load(int tag, uint64_t *ms)
{
	struct kvt_key keys[N];
	uint32_t pages[N];
	uint64_t ticket, t0 = now_ms();
	int got;

	make_keys(tag, keys);
	for (uint32_t i = 0; i < N; i++) {
		pages[i] = 32 + i;
		for (uint32_t l = 0; l < mem[1].layers; l++)
			for (uint32_t kv = 0; kv < 2; kv++)
				memset(engine_page(&mem[1], 32 + i, l, kv), 0, mem[1].page_bytes);
	}
	assert_int_equal(kvt_client_load(c[1], &ns[1], (uint32_t)mem[1].region, keys, pages, N,
					 &ticket), 0);
	got = kvt_client_wait(c[1], ticket, TIMEOUT_MS * 4);
	*ms = now_ms() - t0;
	for (int i = 0; i < got; i++)
		assert_int_equal(engine_page_check(&mem[1], 32 + (uint32_t)i,
						   page_seed(tag, (uint32_t)i)), 0);
	return got;
}

static int hints_at(int port, int tag);

/* Wait up to ms for prefix tag's hints to be on the primary at port and
 * for B to find all of it remote; the time taken, or -1. Redis is asked
 * too: B's LOOKUP may answer from the holders it found in the last second,
 * which says nothing of what the primary holds now. */
static long wait_hinted(int port, int tag, unsigned ms)
{
	uint64_t t0 = now_ms();

	while (now_ms() - t0 < ms) {
		if (hints_at(port, tag) == N && lookup_remote(tag, NULL) == N)
			return (long)(now_ms() - t0);
		kvt_test_sleep_ms(25);
	}
	return -1;
}

/* Node i's STATS cluster.directory.key */
static long dir_stat(int i, const char *key)
{
	char *text = NULL;
	json_t *root;
	long v;

	assert_int_equal(kvt_client_stats(c[i], &text), 0);
	root = json_loads(text, 0, NULL);
	free(text);
	assert_non_null(root);
	v = (long)json_integer_value(
		json_object_get(json_object_get(json_object_get(root, "cluster"), "directory"), key));
	json_decref(root);
	return v;
}

/* How many of prefix tag's hints the server at port holds. */
static int hints_at(int port, int tag)
{
	struct kvt_key keys[N];
	char hex[33];
	int n = 0;

	make_keys(tag, keys);
	for (int i = 0; i < N; i++) {
		redisReply *r;

		kvt_key_hex(&keys[i], hex);
		r = rcmd(port, "EXISTS kvt:blk:%s", hex);
		n += r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
		if (r)
			freeReplyObject(r);
	}
	return n;
}

/* Take prefix tag's hints from the replica only: what the primary
 * acknowledged and never passed on. */
static void lose_on_replica(int tag)
{
	struct kvt_key keys[N];
	char hex[33];

	for (int i = 0; i < 200 && hints_at(replica.port, tag) < N; i++)
		kvt_test_sleep_ms(10);
	assert_int_equal(hints_at(replica.port, tag), N);
	make_keys(tag, keys);
	for (int i = 0; i < N; i++) {
		redisReply *r;

		kvt_key_hex(&keys[i], hex);
		r = rcmd(replica.port, "DEL kvt:blk:%s", hex);
		assert_non_null(r);
		freeReplyObject(r);
	}
	assert_int_equal(hints_at(replica.port, tag), 0);
	assert_int_equal(hints_at(primary.port, tag), N);
}

static int setup(void **state)
{
	(void)state;
	if (!getenv("KVTIERD"))
		kvt_test_skip(NULL, "KVTIERD is not set (run through ctest)");
	if (!kvt_redis_server_path())
		kvt_test_skip(NULL, "redis-server is not installed (apt-get install redis-server)");
	seed = kvt_test_seed();
	kvtd_test_desc(&desc, NULL);
	tmpdir = kvt_test_sockdir("sentinel");
	assert_non_null(tmpdir);
	snprintf(secret_file, sizeof(secret_file), "%s/secret", tmpdir);
	kvt_test_write_secret(secret_file, "the cluster secret of the sentinel test");
	start_redis(&primary, "primary", 0);
	start_redis(&replica, "replica", primary.port);
	for (int i = 0; i < 250 && !info_has(replica.port, "replication", "master_link_status:up");
	     i++)
		kvt_test_sleep_ms(20);
	assert_true(info_has(replica.port, "replication", "master_link_status:up"));
	start_sentinel();
	for (int i = 0; i < 600 && !sentinel_sees_replica(); i++)
		kvt_test_sleep_ms(50);
	assert_true(sentinel_sees_replica());
	node_start(0, "A");
	node_start(1, "B");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < 2; i++) {
		if (c[i]) {
			engine_mem_close(&mem[i]);
			kvt_client_close(c[i]);
		}
		if (d[i].pid > 0)
			kvtd_stop(&d[i], SIGKILL);
		kvtd_cleanup(&d[i]);
	}
	rproc_kill(&sentinel);
	rproc_kill(&replica);
	rproc_kill(&primary);
	kvt_test_rmdir(tmpdir);
	free(tmpdir);
	return 0;
}

/* What the turns saw. */
struct tally {
	uint64_t max_lookup_ms, max_load_ms, max_save_ms;
	unsigned lookups, hits, loaded;
};

/* One turn: A saves prefix tag, B looks up (and loads what is remote of)
 * the prefix saved LAG turns before. Returns the blocks B found remote. */
static int turn(int tag, struct tally *t)
{
	uint64_t ms;
	int remote;

	ms = save(tag);
	t->max_save_ms = ms > t->max_save_ms ? ms : t->max_save_ms;
	remote = lookup_remote(tag - LAG, &ms);
	t->lookups++;
	t->max_lookup_ms = ms > t->max_lookup_ms ? ms : t->max_lookup_ms;
	if (remote == N) {
		t->hits++;
		t->loaded += (unsigned)load(tag - LAG, &ms);
		t->max_load_ms = ms > t->max_load_ms ? ms : t->max_load_ms;
	}
	kvt_test_sleep_ms(20);
	return remote;
}

static void the_nodes_follow_a_failover_and_lost_hints_come_back(void **state)
{
	struct tally before = { 0 }, during = { 0 };
	uint64_t t_kill, t_back = 0, t_new = 0;
	int tag = 100, first_after;
	long ms;

	(void)state;
	save(OLD_TAG);
	assert_true(wait_hinted(primary.port, OLD_TAG, 5000) >= 0);
	/* a prefix whose hints the replica will not have */
	save(LOST_TAG);
	assert_true(wait_hinted(primary.port, LOST_TAG, 5000) >= 0);
	lose_on_replica(LOST_TAG);

	/* load, and remote hits, before the kill */
	for (int i = 0; i < 40 && before.hits < 10; i++)
		turn(tag++, &before);
	assert_true(before.hits >= 10);

	rproc_kill(&primary);
	t_kill = now_ms();
	first_after = tag;
	while (now_ms() - t_kill < FAILOVER_BOUND_MS && !t_new) {
		int this_tag = tag++;

		if (turn(this_tag, &during) == N) {
			if (!t_back)
				t_back = now_ms();
			if (this_tag - LAG >= first_after)
				t_new = now_ms();
		}
	}
	print_message("failover: remote hits back %llu ms after the primary's kill, for a "
		      "prefix saved after it at %llu ms; %u lookups meanwhile, the longest "
		      "%llu ms, loads %llu ms, saves %llu ms\n",
		      (unsigned long long)(t_back - t_kill), (unsigned long long)(t_new - t_kill),
		      during.lookups, (unsigned long long)during.max_lookup_ms,
		      (unsigned long long)during.max_load_ms, (unsigned long long)during.max_save_ms);
	assert_true(t_back && t_new);
	/* nothing waited on the dead primary as long as --peer-timeout */
	assert_true(during.max_lookup_ms < TIMEOUT_MS);
	assert_true(during.max_load_ms < TIMEOUT_MS);
	assert_true(during.max_save_ms < TIMEOUT_MS);
	assert_true(during.loaded >= N);
	assert_true(info_has(replica.port, "replication", "role:master"));
	assert_true(dir_stat(0, "primary_changes") >= 1);
	assert_true(dir_stat(1, "primary_changes") >= 1);

	/* the lost hints were sent again to the new primary by their holder */
	ms = wait_hinted(replica.port, LOST_TAG, 10000);
	print_message("the hints the replica lacked were back %ld ms after that\n", ms);
	assert_true(ms >= 0);
	assert_true(dir_stat(0, "replayed_keys") >= N);
	{
		int port = kvtd_metrics_port(&d[0]);
		char *text;

		assert_true(port > 0);
		text = kvtd_http(port, "GET /metrics HTTP/1.0\r\n\r\n");
		assert_non_null(text);
		assert_true(kvtd_metric(text, "kvtier_cluster_primary_changes_total") >= 1);
		assert_true(kvtd_metric(text, "kvtier_cluster_hints_total{op=\"replayed\"}") >= N);
		free(text);
	}
	assert_int_equal(hints_at(replica.port, LOST_TAG), N);
	assert_true(wait_hinted(replica.port, OLD_TAG, 5000) >= 0);

	/* the new primary loses everything: records lost, the nodes rejoin
	 * under new epochs and publish what they hold again */
	{
		redisReply *r = rcmd(replica.port, "FLUSHALL");

		assert_non_null(r);
		freeReplyObject(r);
	}
	assert_int_equal(hints_at(replica.port, LOST_TAG), 0);
	ms = wait_hinted(replica.port, LOST_TAG, 15000);
	print_message("after FLUSHALL the hints were back in %ld ms\n", ms);
	assert_true(ms >= 0);
	assert_true(dir_stat(0, "joins") >= 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_nodes_follow_a_failover_and_lost_hints_come_back),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
