/* SPDX-License-Identifier: Apache-2.0 */
/* Three nodes in network namespaces around a bridge, and one real
 * redis-server in the hub namespace: blocks saved on node A load byte-exact
 * on B and C; a node with the wrong secret gets nothing; a cut link fails
 * the fetch within the timeout and heals; a killed node's blocks come from
 * another holder and the node leaves the membership; Redis stopped makes
 * the nodes local-only at once, and restarted they rejoin and republish by
 * themselves. The nodes are cluster_node processes (the cluster's modules
 * as kvtierd will hold them). Skips where namespaces cannot be made. */
#include <errno.h>
#include <poll.h>
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

#include "bench/netlab/netlab.h"
#include "helpers.h"
#include "transport/sockio.h"

#define TIMEOUT_MS 800 /* the nodes' peer timeout */
#define TTL_MS 3000    /* their membership TTL */
#define BOUND_MS (TIMEOUT_MS + 3000)

struct node {
	pid_t pid;
	int in, out;          /* its stdin, its stdout */
	char buf[4096];
	size_t len;
	char id[16], listen[32];
};

static struct kvt_netlab net;
static struct kvt_redis_proc redis;
static struct node nodes[4];
static char *tmpdir, secret_file[512], wrong_file[512], redis_url[64];

/* Start node idx as `id` in namespace ns, listening on addr:port. */
static void node_start(int idx, int ns, const char *id, int port, const char *secret)
{
	struct node *n = &nodes[idx];
	int to[2], from[2];
	char ttl[16], tmo[16];
	const char *bin = getenv("KVT_CLUSTER_NODE");

	assert_non_null(bin);
	memset(n, 0, sizeof(*n));
	snprintf(n->id, sizeof(n->id), "%s", id);
	snprintf(n->listen, sizeof(n->listen), "%s:%d", net.addr[ns], port);
	snprintf(ttl, sizeof(ttl), "%d", TTL_MS);
	snprintf(tmo, sizeof(tmo), "%d", TIMEOUT_MS);
	char *argv[] = { (char *)bin, "--id", n->id, "--listen", n->listen, "--redis", redis_url,
			 "--secret-file", (char *)secret, "--ttl-ms", ttl, "--timeout-ms", tmo, NULL };
	assert_int_equal(pipe(to), 0);
	assert_int_equal(pipe(from), 0);
	n->pid = kvt_netlab_spawn(&net, ns, argv, to[0], from[1], -1);
	assert_true(n->pid > 0);
	close(to[0]);
	close(from[1]);
	n->in = to[1];
	n->out = from[0];
}

/* Send a command, wait (at most 20 s) for its one-line answer. */
static const char *node_cmd(int idx, const char *fmt, ...)
{
	static char reply[512];
	struct node *n = &nodes[idx];
	uint64_t dl = kvt_deadline_ms(20000);
	char cmd[128];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	strcat(cmd, "\n");
	assert_int_equal(write(n->in, cmd, strlen(cmd)), (ssize_t)strlen(cmd));
	for (;;) {
		char *nl = memchr(n->buf, '\n', n->len);
		ssize_t r;

		if (nl) {
			size_t l = (size_t)(nl - n->buf);

			snprintf(reply, sizeof(reply), "%.*s", (int)l, n->buf);
			memmove(n->buf, nl + 1, n->len - l - 1);
			n->len -= l + 1;
			fprintf(stderr, "%s> %s%s< %s\n", n->id, cmd, "", reply);
			return reply;
		}
		if (kvt_sock_wait(n->out, POLLIN, dl))
			fail_msg("node %s did not answer '%s'", n->id, cmd);
		r = read(n->out, n->buf + n->len, sizeof(n->buf) - n->len - 1);
		if (r <= 0)
			fail_msg("node %s exited", n->id);
		n->len += (size_t)r;
	}
}

/* The integer after "key=" in s. */
static long field(const char *s, const char *key)
{
	char pat[32];
	const char *p;

	snprintf(pat, sizeof(pat), " %s=", key);
	p = strstr(s, pat);
	if (!p)
		fail_msg("no %s in '%s'", key, s);
	return strtol(p + strlen(pat), NULL, 10);
}

static void node_stop(int idx, int sig)
{
	struct node *n = &nodes[idx];

	if (n->pid <= 0)
		return;
	if (sig)
		kill(n->pid, sig);
	else if (write(n->in, "quit\n", 5) != 5)
		kill(n->pid, SIGKILL);
	waitpid(n->pid, NULL, 0);
	close(n->in);
	close(n->out);
	n->pid = 0;
}

static bool members_are(int idx, long want)
{
	for (int i = 0; i < 100; i++) {
		const char *r = node_cmd(idx, "stats");

		if (field(r, "members") == want && field(r, "reachable") == 1)
			return true;
		kvt_test_sleep_ms(100);
	}
	return false;
}

/* Wait until node idx sees n blocks of seed held elsewhere (hints are
 * written asynchronously). */
static bool hinted(int idx, int seed, long n)
{
	for (int i = 0; i < 100; i++) {
		if (field(node_cmd(idx, "lookup %d %ld", seed, n), "remote") == n)
			return true;
		kvt_test_sleep_ms(50);
	}
	return false;
}

static int setup(void **state)
{
	char why[256];
	int err;

	if (!getenv("KVT_CLUSTER_NODE"))
		kvt_test_skip(NULL, "KVT_CLUSTER_NODE is not set (run through ctest)");
	if (!kvt_redis_server_path())
		kvt_test_skip(NULL, "redis-server is not installed (apt-get install redis-server)");
	err = kvt_netlab_open(&net, 3, true, why, sizeof(why));
	if (err == -EPERM || err == -ENOENT)
		kvt_test_skip(NULL, "cannot make network namespaces: %s", why);
	if (err) {
		fprintf(stderr, "netlab: %s\n", why);
		return -1;
	}
	tmpdir = kvt_test_mkdtemp("cluster_netns");
	snprintf(secret_file, sizeof(secret_file), "%s/secret", tmpdir);
	snprintf(wrong_file, sizeof(wrong_file), "%s/wrong", tmpdir);
	kvt_test_write_secret(secret_file, "the cluster secret of the netns test");
	kvt_test_write_secret(wrong_file, "not the secret of this cluster at all");
	assert_int_equal(kvt_redis_proc_start(&redis, tmpdir, &net, KVT_NETLAB_HUB, net.hub_addr, 6379), 0);
	snprintf(redis_url, sizeof(redis_url), "redis://%s:6379", net.hub_addr);
	node_start(0, 0, "A", 7400, secret_file);
	node_start(1, 1, "B", 7400, secret_file);
	node_start(2, 2, "C", 7400, secret_file);
	for (int i = 0; i < 3; i++)
		assert_true(members_are(i, 3));
	return 0;
}

static int teardown(void **state)
{
	for (int i = 0; i < 4; i++)
		node_stop(i, SIGKILL);
	kvt_redis_proc_stop(&redis);
	kvt_netlab_close(&net);
	kvt_test_rmdir(tmpdir);
	free(tmpdir);
	return 0;
}

static void blocks_saved_on_a_load_on_b_and_c(void **state)
{
	const char *r;

	assert_int_equal(field(node_cmd(0, "put 1 8"), "put"), 8);
	assert_true(hinted(1, 1, 8));
	r = node_cmd(1, "fetch 1 8");
	assert_int_equal(field(r, "remote"), 8);
	assert_int_equal(field(r, "fetched"), 8);
	assert_int_equal(field(r, "bad"), 0);
	r = node_cmd(2, "fetch 1 8");
	assert_int_equal(field(r, "fetched"), 8);
	assert_int_equal(field(r, "bad"), 0);
	/* now local */
	r = node_cmd(2, "fetch 1 8");
	assert_int_equal(field(r, "local"), 8);
}

static void a_node_with_the_wrong_secret_gets_nothing(void **state)
{
	const char *r;
	long refused0 = field(node_cmd(0, "peerstats"), "auth_failures");

	node_start(3, 2, "intruder", 7401, wrong_file);
	assert_true(members_are(3, 4)); /* it can reach Redis, not the peers */
	r = node_cmd(3, "fetch 1 8");
	assert_true(field(r, "remote") >= 1);
	assert_int_equal(field(r, "fetched"), 0);
	assert_int_equal(field(r, "miss"), 8);
	assert_int_equal(field(r, "err"), -EACCES);
	assert_true(field(node_cmd(0, "peerstats"), "auth_failures") +
			    field(node_cmd(1, "peerstats"), "auth_failures") +
			    field(node_cmd(2, "peerstats"), "auth_failures") > refused0);
	node_stop(3, 0);
	assert_true(members_are(0, 3));
}

static void a_cut_link_fails_within_the_timeout_and_heals(void **state)
{
	const char *r;

	assert_int_equal(field(node_cmd(0, "put 2 4"), "put"), 4);
	assert_true(hinted(1, 2, 4));
	assert_int_equal(kvt_netlab_link(&net, 0, false), 0);
	r = node_cmd(1, "fetch 2 4");
	assert_int_equal(field(r, "remote"), 4); /* the directory still names A */
	assert_int_equal(field(r, "fetched"), 0);
	assert_int_equal(field(r, "miss"), 4);
	assert_int_equal(field(r, "err"), -ETIMEDOUT);
	assert_true(field(r, "ms") >= TIMEOUT_MS);
	assert_true(field(r, "ms") < BOUND_MS);
	assert_int_equal(kvt_netlab_link(&net, 0, true), 0);
	for (int i = 0; i < 50; i++) { /* A was marked down for a moment */
		r = node_cmd(1, "fetch 2 4");
		if (field(r, "fetched") == 4)
			break;
		kvt_test_sleep_ms(100);
	}
	assert_int_equal(field(r, "fetched"), 4);
	assert_int_equal(field(r, "bad"), 0);
}

static void a_killed_nodes_blocks_come_from_another_holder(void **state)
{
	const char *r;

	assert_int_equal(field(node_cmd(0, "put 3 4"), "put"), 4);
	assert_true(hinted(1, 3, 4));
	assert_int_equal(field(node_cmd(1, "fetch 3 4"), "fetched"), 4);
	assert_true(hinted(0, 3, 4)); /* A sees B as a holder too */
	node_stop(0, SIGKILL);
	/* A's hints are still live (its TTL has not lapsed): C tries it, is
	 * refused, and takes the blocks from B */
	r = node_cmd(2, "fetch 3 4");
	assert_int_equal(field(r, "fetched"), 4);
	assert_int_equal(field(r, "bad"), 0);
	/* once its TTL lapses A is no member, and its blocks are no hits */
	assert_true(members_are(1, 2));
	r = node_cmd(1, "fetch 2 4"); /* B holds it already */
	assert_int_equal(field(r, "local"), 4);
	/* A comes back, rejoins under a new epoch */
	node_start(0, 0, "A", 7400, secret_file);
	assert_true(members_are(0, 3));
	assert_true(members_are(1, 3));
}

static void redis_stopped_means_local_only_and_restarted_it_resumes(void **state)
{
	const char *r;
	long epoch_b;

	assert_int_equal(field(node_cmd(0, "put 4 4"), "put"), 4);
	assert_true(hinted(1, 4, 4));
	epoch_b = field(node_cmd(1, "stats"), "epoch");
	kvt_redis_proc_signal(&redis, SIGKILL);
	/* the first call after the loss may still wait for its own deadline;
	 * after that the node knows and answers at once */
	for (int i = 0; i < 50; i++) {
		r = node_cmd(1, "stats");
		if (field(r, "reachable") == 0)
			break;
		kvt_test_sleep_ms(100);
	}
	r = node_cmd(1, "fetch 4 4");
	assert_int_equal(field(r, "fetched"), 0);
	assert_int_equal(field(r, "miss"), 4);
	assert_int_equal(field(r, "err"), -ENOTCONN);
	assert_true(field(r, "ms") < 1000);
	/* local blocks are still served locally */
	assert_int_equal(field(node_cmd(1, "fetch 1 8"), "local"), 8);

	assert_int_equal(kvt_redis_proc_restart(&redis), 0);
	for (int i = 0; i < 3; i++)
		assert_true(members_are(i, 3));
	assert_true(field(node_cmd(1, "stats"), "epoch") > epoch_b);
	/* A republished what it holds under its new epoch */
	for (int i = 0; i < 50; i++) {
		r = node_cmd(1, "fetch 4 4");
		if (field(r, "fetched") == 4)
			break;
		kvt_test_sleep_ms(100);
	}
	assert_int_equal(field(r, "fetched"), 4);
	assert_int_equal(field(r, "bad"), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(blocks_saved_on_a_load_on_b_and_c),
		cmocka_unit_test(a_node_with_the_wrong_secret_gets_nothing),
		cmocka_unit_test(a_cut_link_fails_within_the_timeout_and_heals),
		cmocka_unit_test(a_killed_nodes_blocks_come_from_another_holder),
		cmocka_unit_test(redis_stopped_means_local_only_and_restarted_it_resumes),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
