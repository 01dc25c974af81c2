/* SPDX-License-Identifier: Apache-2.0 */
/* A prefix far longer than one directory batch crosses nodes whole: two
 * real kvtierd on loopback in one cluster (a real redis-server on a Unix
 * socket); an engine saves an 8,192-block prefix through node A, and node
 * B's LOOKUP finds every block of it in tier remote, and its LOAD brings
 * every block, byte-exact. Before, B's LOOKUP stopped at 1,024 blocks (the
 * peer tier asked the directory for 1,024 keys at most). Small blocks
 * (2 KiB): 16 MiB in all. */
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "bench/netlab/netlab.h"
#include "helpers.h"
#include "app/daemon_proc.h"
#include "util/clock.h"

#define N 8192u /* blocks in the prefix: 8 directory batches */

struct node {
	struct kvtd_proc d;
	struct kvt_client *c;
	struct kvt_client_ns ns;
	struct engine_mem mem;
};

static struct kvt_redis_proc redis;
static struct node nodes[2];
static struct kvt_ns_desc desc;
static struct kvt_key *keys;
static char *tmpdir, secret_file[512];
static uint64_t seed;

/* A port nothing listens on now, for a daemon's peer listener. */
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

static void node_start(struct node *n, const char *id)
{
	char listen[32];

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", free_port());
	const char *extra[] = { "--cluster", redis.url, "--node-id", id, "--peer-listen", listen,
				"--cluster-secret-file", secret_file, NULL };
	assert_int_equal(kvtd_start(&n->d, NULL, extra), 0);
	n->c = kvtd_connect(&n->d, NULL);
	assert_non_null(n->c);
	assert_int_equal(kvt_client_hello(n->c, &desc, &n->ns), 0);
	assert_int_equal(engine_mem_open(&n->mem, n->c, &n->ns, &desc, N), 0);
}

static void node_stop(struct node *n)
{
	if (n->c) {
		engine_mem_close(&n->mem);
		kvt_client_close(n->c);
		n->c = NULL;
	}
	if (n->d.pid > 0)
		kvtd_stop(&n->d, SIGKILL);
	kvtd_cleanup(&n->d);
}

static int setup(void **state)
{
	uint32_t *tokens;
	uint64_t s;

	(void)state;
	if (!getenv("KVTIERD"))
		kvt_test_skip(NULL, "KVTIERD is not set (run through ctest)");
	if (!kvt_redis_server_path())
		kvt_test_skip(NULL, "redis-server is not installed (apt-get install redis-server)");
	seed = kvt_test_seed();
	kvtd_test_desc(&desc, NULL);
	tmpdir = kvt_test_sockdir("long_prefix"); /* redis-server's socket: a short path */
	assert_non_null(tmpdir);
	snprintf(secret_file, sizeof(secret_file), "%s/secret", tmpdir);
	kvt_test_write_secret(secret_file, "the cluster secret of the long prefix test");
	assert_int_equal(kvt_redis_proc_start(&redis, tmpdir, NULL, 0, NULL, 0), 0);
	node_start(&nodes[0], "A");
	node_start(&nodes[1], "B");

	/* one chain of N blocks, the same keys on both nodes */
	keys = calloc(N, sizeof(*keys));
	tokens = calloc((size_t)N * desc.block_tokens, sizeof(*tokens));
	assert_true(keys && tokens);
	s = seed;
	for (size_t i = 0; i < (size_t)N * desc.block_tokens; i++)
		tokens[i] = (uint32_t)kvt_test_rand(&s);
	assert_int_equal(kvt_client_prefix_keys(&nodes[0].ns, NULL, tokens,
						(size_t)N * desc.block_tokens, keys, N), (int)N);
	free(tokens);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	node_stop(&nodes[1]);
	node_stop(&nodes[0]);
	kvt_redis_proc_stop(&redis);
	kvt_test_rmdir(tmpdir);
	free(tmpdir);
	free(keys);
	return 0;
}

/* B's LOOKUP of the whole prefix: blocks found, *remote of them remote. */
static int lookup_on_b(uint32_t *remote)
{
	struct node *b = &nodes[1];
	uint8_t *tiers = calloc(N, 1);
	int got;

	assert_non_null(tiers);
	got = kvt_client_lookup(b->c, &b->ns, keys, N, tiers);
	*remote = 0;
	for (int i = 0; i < got; i++)
		*remote += tiers[i] == KVT_TIER_REMOTE;
	free(tiers);
	return got;
}

static void an_8192_block_prefix_saved_on_a_loads_whole_on_b(void **state)
{
	struct node *a = &nodes[0], *b = &nodes[1];
	uint32_t *pages = calloc(N, sizeof(*pages)), remote = 0;
	uint64_t ticket, t0;
	int got = 0;

	(void)state;
	assert_non_null(pages);
	for (uint32_t i = 0; i < N; i++) {
		pages[i] = i;
		engine_page_fill(&a->mem, i, seed * 31 + i);
	}
	assert_int_equal(kvt_client_save(a->c, &a->ns, (uint32_t)a->mem.region, NULL, keys, pages,
					 N, &ticket), 0);
	assert_int_equal(kvt_client_wait(a->c, ticket, 30000), (int)N);

	/* A's hints go out in the background: wait until B finds them all */
	t0 = kvt_now_ns();
	for (int i = 0; i < 300; i++) {
		got = lookup_on_b(&remote);
		if ((uint32_t)got == N && remote == N)
			break;
		kvt_test_sleep_ms(50);
	}
	fprintf(stderr, "B's LOOKUP: %d of %u blocks (%u remote) after %llu ms\n", got, N, remote,
		(unsigned long long)((kvt_now_ns() - t0) / 1000000));
	assert_int_equal(got, (int)N);
	assert_int_equal(remote, N);

	/* every block comes from A, byte-exact, into B's own pages */
	t0 = kvt_now_ns();
	assert_int_equal(kvt_client_load(b->c, &b->ns, (uint32_t)b->mem.region, keys, pages, N,
					 &ticket), 0);
	got = kvt_client_wait(b->c, ticket, 60000);
	fprintf(stderr, "B's LOAD: %d of %u blocks in %llu ms\n", got, N,
		(unsigned long long)((kvt_now_ns() - t0) / 1000000));
	assert_int_equal(got, (int)N);
	for (uint32_t i = 0; i < N; i++)
		if (engine_page_check(&b->mem, i, seed * 31 + i))
			fail_msg("block %u: wrong bytes on B", i);
	free(pages);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(an_8192_block_prefix_saved_on_a_loads_whole_on_b),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
