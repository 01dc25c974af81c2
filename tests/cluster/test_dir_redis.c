/* SPDX-License-Identifier: Apache-2.0 */
/* The cluster directory against a real redis-server started here (on a
 * unix socket in the test's temp dir): membership and epochs, block hints
 * published, looked up and forgotten, stale hints (gone nodes, old epochs)
 * ignored, and Redis paused (SIGSTOP: slow), killed and restarted: calls
 * stay bounded, the node goes local-only and comes back by itself with a
 * higher epoch; the server made a replica under the node (READONLY): the
 * node goes local-only and its queued hints wait for a primary. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include <cmocka.h>

#include "bench/netlab/netlab.h"
#include "cluster/dir_record.h"
#include "cluster/directory.h"
#include "cluster/redis_conn.h"
#include "helpers.h"

#define TTL_MS 900
#define LOOKUP_MS 100
#define IO_MS 200
/* What "bounded" means under a loaded CI machine: the call's own timeout
 * plus a generous margin for scheduling, never the minutes of a hang. */
#define BOUND_MS 1500

static char *tmpdir;
static struct kvt_redis_proc redis;

/* A node as its owner sees it: on a rejoin (new epoch) it republishes
 * what it holds, as directory.h asks of the owner. */
struct node {
	struct kvt_dir *dir;
	pthread_mutex_t mu;      /* the callback runs on the directory's thread */
	int rejoins;
	uint64_t rejoin_epoch;
	struct kvt_key held[16];
	size_t n_held;
};

static struct node na, nb;

static uint64_t ms_since(uint64_t t0)
{
	return (kvt_now_ns() - t0) / 1000000;
}

static void log_cb(void *arg, enum kvt_log_level lvl, const char *msg)
{
	fprintf(stderr, "  [%s] %s\n", (const char *)arg, msg);
}

static void on_rejoin(void *arg, uint64_t epoch)
{
	struct node *n = arg;

	pthread_mutex_lock(&n->mu);
	n->rejoins++;
	n->rejoin_epoch = epoch;
	if (n->n_held)
		kvt_dir_publish(n->dir, n->held, n->n_held, KVT_TIER_DRAM);
	pthread_mutex_unlock(&n->mu);
}

static int rejoins(struct node *n, uint64_t *epoch)
{
	int r;

	pthread_mutex_lock(&n->mu);
	r = n->rejoins;
	if (epoch)
		*epoch = n->rejoin_epoch;
	pthread_mutex_unlock(&n->mu);
	return r;
}

static void set_held(struct node *n, const struct kvt_key *k, size_t count)
{
	pthread_mutex_lock(&n->mu);
	memcpy(n->held, k, count * sizeof(*k));
	n->n_held = count;
	pthread_mutex_unlock(&n->mu);
}

static struct kvt_dir *open_node(struct node *n, const char *id, const char *addr)
{
	struct kvt_dir_opts o;
	struct kvt_dir *d = NULL;

	kvt_dir_opts_init(&o, sizeof(o));
	o.url = redis.url;
	snprintf(o.self.id, sizeof(o.self.id), "%s", id);
	snprintf(o.self.addr, sizeof(o.self.addr), "%s", addr);
	o.member_ttl_ms = TTL_MS;
	o.lookup_timeout_ms = LOOKUP_MS;
	o.io_timeout_ms = IO_MS;
	o.rejoin_cb = on_rejoin;
	o.rejoin_arg = n;
	o.log = log_cb;
	o.log_arg = (void *)id;
	pthread_mutex_init(&n->mu, NULL);
	/* the first join calls back before kvt_dir_open returns: dir is set
	 * under the same lock the callback takes */
	pthread_mutex_lock(&n->mu);
	assert_int_equal(kvt_dir_open(&o, &d), 0);
	n->dir = d;
	pthread_mutex_unlock(&n->mu);
	return d;
}

/* Poll cond for up to ms; true once it holds. */
#define WAIT_FOR(cond, ms)                                                                 \
	({                                                                                 \
		uint64_t t0_ = kvt_now_ns();                                             \
		bool ok_ = false;                                                          \
		while (!(ok_ = (cond)) && ms_since(t0_) < (ms))                            \
			kvt_test_sleep_ms(10);                                                      \
		ok_;                                                                       \
	})

static bool reachable(struct kvt_dir *d)
{
	struct kvt_dir_stats st;

	kvt_dir_stats(d, &st);
	return st.reachable;
}

static int members(struct kvt_dir *d)
{
	return kvt_dir_members(d, NULL, 0);
}

static void make_keys(struct kvt_key *k, size_t n, uint8_t tag)
{
	for (size_t i = 0; i < n; i++) {
		memset(&k[i], 0, sizeof(k[i]));
		k[i].bytes[0] = tag;
		k[i].bytes[1] = (uint8_t)i;
		k[i].bytes[15] = '{'; /* would pick a hash slot if keys were raw */
	}
}

/* A raw connection, to play a node that stops renewing, or a stray writer. */
static struct kvt_redis *raw(void)
{
	struct kvt_redis_url u;
	struct kvt_redis *r = NULL;

	assert_int_equal(kvt_redis_url_parse(redis.url, &u), 0);
	assert_int_equal(kvt_redis_connect(&u, kvt_deadline_ms(2000), &r, NULL, 0), 0);
	return r;
}

static void raw_cmd(struct kvt_redis *r, int argc, const char **argv)
{
	size_t lens[8];
	redisReply *rep;

	for (int i = 0; i < argc; i++)
		lens[i] = strlen(argv[i]);
	assert_int_equal(kvt_redis_append(r, argc, argv, lens), 0);
	assert_int_equal(kvt_redis_exec(r, &rep, 1, kvt_deadline_ms(2000)), 0);
	assert_int_not_equal(rep->type, REDIS_REPLY_ERROR);
	kvt_redis_free_replies(&rep, 1);
}

static int setup(void **state)
{
	int err;

	if (!kvt_redis_server_path())
		kvt_test_skip(NULL, "redis-server is not installed (apt-get install redis-server)");
	tmpdir = kvt_test_sockdir("dir_redis"); /* its socket: a short path */
	assert_non_null(tmpdir);
	err = kvt_redis_proc_start(&redis, tmpdir, NULL, 0, NULL, 0);
	assert_int_equal(err, 0);
	open_node(&na, "a", "10.0.0.1:7400");
	open_node(&nb, "b", "10.0.0.2:7400");
	return 0;
}

static int teardown(void **state)
{
	kvt_dir_close(na.dir);
	kvt_dir_close(nb.dir);
	kvt_redis_proc_stop(&redis);
	kvt_test_rmdir(tmpdir);
	free(tmpdir);
	return 0;
}

static void nodes_join_with_distinct_epochs(void **state)
{
	struct kvt_node_info m[4];
	struct kvt_dir_stats sa, sb;

	assert_true(WAIT_FOR(members(na.dir) == 2 && members(nb.dir) == 2, 5000));
	kvt_dir_stats(na.dir, &sa);
	kvt_dir_stats(nb.dir, &sb);
	assert_true(sa.reachable && sb.reachable);
	assert_true(sa.epoch > 0 && sb.epoch > 0 && sa.epoch != sb.epoch);
	assert_int_equal(rejoins(&na, NULL), 1);
	assert_int_equal(kvt_dir_members(na.dir, m, 4), 2);
	assert_string_equal(m[0].id, "a"); /* sorted */
	assert_string_equal(m[1].id, "b");
	assert_string_equal(m[1].addr, "10.0.0.2:7400");
	assert_true(m[1].epoch == sb.epoch);
}

static void hints_are_published_looked_up_and_forgotten(void **state)
{
	struct kvt_key k[12];
	struct kvt_dir_holders h[12];
	struct kvt_dir_stats st;

	make_keys(k, 12, 1);
	kvt_dir_publish(na.dir, k, 10, KVT_TIER_DRAM);
	kvt_dir_publish(nb.dir, k + 5, 5, KVT_TIER_SSD);
	/* writes are asynchronous: wait until b sees all ten */
	assert_true(WAIT_FOR(kvt_dir_lookup(nb.dir, k, 12, h) == 10, 5000));
	for (int i = 0; i < 10; i++) {
		assert_int_equal(h[i].n, 1); /* b itself is never reported */
		assert_string_equal(h[i].h[0].node, "a");
		assert_string_equal(h[i].h[0].addr, "10.0.0.1:7400");
		assert_int_equal(h[i].h[0].tier, KVT_TIER_DRAM);
	}
	assert_int_equal(h[10].n, 0);
	/* from a: only b's blocks, so the prefix from k[0] is empty */
	assert_int_equal(kvt_dir_lookup(na.dir, k, 10, h), 0);
	assert_int_equal(kvt_dir_lookup(na.dir, k + 5, 5, h), 5);
	assert_int_equal(h[0].h[0].tier, KVT_TIER_SSD);

	/* an evicted block ends the prefix there */
	kvt_dir_forget(na.dir, &k[3], 1);
	assert_true(WAIT_FOR(kvt_dir_lookup(nb.dir, k, 10, h) == 3, 5000));
	assert_true(WAIT_FOR((kvt_dir_stats(na.dir, &st), st.forgotten_keys == 1), 5000));
	assert_int_equal(st.published_keys, 10);
	assert_int_equal(st.dropped_keys, 0);
}

/* A lookup longer than one MGET batch (1024 keys): its batches go in one
 * pipeline, and the prefix runs across them, ending at the first key
 * nobody holds, whichever batch it is in; the keys after it still get
 * their holders. */
static void a_lookup_spans_its_batches(void **state)
{
	enum { HELD = 2500, ASKED = 3000 };
	struct kvt_key *k = calloc(ASKED, sizeof(*k));
	struct kvt_dir_holders *h = calloc(ASKED, sizeof(*h));

	(void)state;
	assert_true(k && h);
	for (size_t i = 0; i < ASKED; i++) {
		k[i].bytes[0] = 7;
		k[i].bytes[1] = (uint8_t)i;
		k[i].bytes[2] = (uint8_t)(i >> 8);
	}
	kvt_dir_publish(na.dir, k, HELD, KVT_TIER_DRAM);
	assert_true(WAIT_FOR(kvt_dir_lookup(nb.dir, k, ASKED, h) == HELD, 5000));
	assert_int_equal(h[0].n, 1);
	assert_int_equal(h[1024].n, 1); /* the second batch's first */
	assert_string_equal(h[HELD - 1].h[0].node, "a");
	assert_int_equal(h[HELD].n, 0);
	assert_int_equal(h[ASKED - 1].n, 0);
	/* a gap in the second batch ends the prefix there */
	kvt_dir_forget(na.dir, &k[1500], 1);
	assert_true(WAIT_FOR(kvt_dir_lookup(nb.dir, k, ASKED, h) == 1500, 5000));
	assert_int_equal(h[1501].n, 1);
	assert_int_equal(h[2048].n, 1);
	/* at most KVT_DIR_MAX_LOOKUP_KEYS keys a call */
	assert_int_equal(kvt_dir_lookup(nb.dir, k, KVT_DIR_MAX_LOOKUP_KEYS + 1, h), -EINVAL);
	kvt_dir_forget(na.dir, k, HELD);
	free(k);
	free(h);
}

static void dram_holders_come_before_ssd(void **state)
{
	struct kvt_key k;
	struct kvt_dir_holders h;
	struct node nc = { 0 };

	open_node(&nc, "c", "10.0.0.3:7400");
	assert_true(WAIT_FOR(members(na.dir) == 3 && reachable(nc.dir), 5000));
	make_keys(&k, 1, 2);
	kvt_dir_publish(nb.dir, &k, 1, KVT_TIER_SSD);
	kvt_dir_publish(nc.dir, &k, 1, KVT_TIER_DRAM);
	assert_true(WAIT_FOR(kvt_dir_lookup(na.dir, &k, 1, &h) == 1 && h.n == 2, 5000));
	assert_string_equal(h.h[0].node, "c");
	assert_int_equal(h.h[0].tier, KVT_TIER_DRAM);
	assert_string_equal(h.h[1].node, "b");
	kvt_dir_close(nc.dir);
	/* c left: its record is deleted at close, so it is gone at a's next renewal */
	assert_true(WAIT_FOR(members(na.dir) == 2, 5000));
	assert_int_equal(kvt_dir_lookup(na.dir, &k, 1, &h), 1);
	assert_int_equal(h.n, 1);
	assert_string_equal(h.h[0].node, "b");
}

/* A node that stops renewing (a crash) is gone once its TTL lapses, and so
 * are its hints; a hint under an old epoch is never believed. */
static void expired_nodes_and_old_epochs_are_not_holders(void **state)
{
	struct kvt_redis *r = raw();
	struct kvt_node_info z = { 0 };
	struct kvt_key k[3];
	struct kvt_dir_holders h[3];
	struct kvt_dir_stats st0, st1;
	char hex[33], key[64], val[32], *js;
	struct kvt_dir_stats sb;

	strcpy(z.id, "zombie");
	strcpy(z.addr, "10.0.0.9:7400");
	z.transports = KVT_NODE_TCP;
	z.epoch = 1000;
	js = kvt_node_record_encode(&z);
	assert_non_null(js);
	raw_cmd(r, 5, (const char *[]){ "SET", "kvt:node:zombie", js, "PX", "700" });
	raw_cmd(r, 3, (const char *[]){ "SADD", "kvt:members", "zombie" });
	free(js);
	make_keys(k, 2, 3);
	kvt_key_hex(&k[0], hex);
	snprintf(key, sizeof(key), "kvt:blk:%s", hex);
	raw_cmd(r, 3, (const char *[]){ "SET", key, "zombie=1000:dram" });
	/* k[1]: a hint of the live node b under an epoch it no longer has */
	kvt_dir_stats(nb.dir, &sb);
	kvt_key_hex(&k[1], hex);
	snprintf(key, sizeof(key), "kvt:blk:%s", hex);
	snprintf(val, sizeof(val), "b=%llu:dram", (unsigned long long)(sb.epoch - 1 ? sb.epoch - 1 : 99));
	raw_cmd(r, 3, (const char *[]){ "SET", key, val });

	/* k[2]: a value no node wrote: ignored, counted, never a holder */
	make_keys(&k[2], 1, 33);
	kvt_key_hex(&k[2], hex);
	snprintf(key, sizeof(key), "kvt:blk:%s", hex);
	raw_cmd(r, 3, (const char *[]){ "SET", key, "a=1:dram,{garbage}" });

	assert_true(WAIT_FOR(members(na.dir) == 3, 5000));
	assert_int_equal(kvt_dir_lookup(na.dir, k, 1, h), 1);
	assert_string_equal(h[0].h[0].node, "zombie");
	kvt_dir_stats(nb.dir, &st0);
	assert_int_equal(kvt_dir_lookup(nb.dir, &k[2], 1, h), 0);
	kvt_dir_stats(nb.dir, &st1);
	assert_int_equal(st1.stale_hints, st0.stale_hints + 1);
	kvt_dir_stats(na.dir, &st0);
	assert_int_equal(kvt_dir_lookup(na.dir, &k[1], 1, h), 0);
	kvt_dir_stats(na.dir, &st1);
	assert_true(st1.stale_hints > st0.stale_hints);

	/* no renewal: after its TTL the zombie is no member and no holder */
	assert_true(WAIT_FOR(members(na.dir) == 2, 5000));
	assert_int_equal(kvt_dir_lookup(na.dir, k, 1, h), 0);
	kvt_redis_close(r);
}

/* Redis stopped (SIGSTOP): the directory's thread is stuck on a pipeline
 * that will time out, and lookups must still come back by their own
 * deadline; publishes never block. */
static void slow_redis_bounds_every_call(void **state)
{
	struct kvt_key k[4];
	struct kvt_dir_holders h[4];
	struct kvt_dir_stats st;
	uint64_t t0;
	int rc, timed_out = 0, unreachable = 0;

	int rejoins_a = rejoins(&na, NULL);
	uint64_t epoch_a;

	make_keys(k, 4, 4);
	set_held(&na, k, 4);
	kvt_dir_publish(na.dir, k, 4, KVT_TIER_DRAM);
	assert_true(WAIT_FOR(kvt_dir_lookup(nb.dir, k, 4, h) == 4, 5000));

	kvt_redis_proc_signal(&redis, SIGSTOP);
	for (int i = 0; i < 20; i++) {
		t0 = kvt_now_ns();
		rc = kvt_dir_lookup(nb.dir, k, 4, h);
		assert_true(ms_since(t0) < LOOKUP_MS + BOUND_MS);
		if (rc == -ETIMEDOUT)
			timed_out++;
		else if (rc == -ENOTCONN)
			unreachable++;
		else
			assert_int_equal(rc, 4); /* an answer from before the stop */
		t0 = kvt_now_ns();
		kvt_dir_publish(nb.dir, k, 4, KVT_TIER_DRAM);
		assert_true(ms_since(t0) < BOUND_MS);
		kvt_test_sleep_ms(50);
	}
	/* the first lookups waited and timed out; once the pipeline's own
	 * deadline passed the directory knew, and answered at once */
	assert_true(timed_out >= 1);
	assert_true(unreachable >= 1);
	kvt_dir_stats(nb.dir, &st);
	assert_false(st.reachable);
	assert_true(st.lookups_timed_out >= 1);
	assert_true(st.lookups_unreachable >= 1);
	assert_true(st.errors >= 1);

	kvt_redis_proc_signal(&redis, SIGCONT);
	assert_true(WAIT_FOR(reachable(na.dir) && reachable(nb.dir), 10000));
	/* The pause outlasted the membership TTL (Redis expires by the clock),
	 * so each node rejoined under a new epoch, the old hints are no longer
	 * believed, and a's owner republished what it holds. */
	assert_true(WAIT_FOR(members(nb.dir) == 2, 5000));
	/* a's record is in Redis before its rejoin callback runs: wait for it */
	assert_true(WAIT_FOR(rejoins(&na, &epoch_a) == rejoins_a + 1, 5000));
	assert_true(WAIT_FOR(kvt_dir_lookup(nb.dir, k, 4, h) == 4, 5000));
	assert_true(h[0].h[0].epoch == epoch_a);
	kvt_dir_stats(nb.dir, &st);
	assert_true(st.reconnects >= 1);
}

/* Redis killed and restarted empty: local-only at once, then both nodes
 * rejoin by themselves under epochs above any they held, and republish. */
static void redis_restart_pauses_and_resumes(void **state)
{
	struct kvt_key k[3];
	struct kvt_dir_holders h[3];
	struct kvt_dir_stats a0, a1, b1;
	uint64_t t0;
	int rejoins_a = rejoins(&na, NULL);
	uint64_t epoch_a;

	kvt_dir_stats(na.dir, &a0);
	make_keys(k, 3, 5);
	kvt_redis_proc_signal(&redis, SIGKILL);
	assert_true(WAIT_FOR(!reachable(nb.dir), 5000));
	t0 = kvt_now_ns();
	assert_int_equal(kvt_dir_lookup(nb.dir, k, 3, h), -ENOTCONN);
	assert_true(ms_since(t0) < BOUND_MS);
	/* saved while Redis is down: the hints wait in the queue */
	kvt_dir_publish(na.dir, k, 3, KVT_TIER_DRAM);
	kvt_test_sleep_ms(300);

	assert_int_equal(kvt_redis_proc_restart(&redis), 0);
	assert_true(WAIT_FOR(reachable(na.dir) && reachable(nb.dir) && members(na.dir) == 2 &&
				     members(nb.dir) == 2, 10000));
	/* a's record is in Redis before its rejoin callback runs: wait for it */
	assert_true(WAIT_FOR(rejoins(&na, &epoch_a) == rejoins_a + 1, 5000));
	kvt_dir_stats(na.dir, &a1);
	kvt_dir_stats(nb.dir, &b1);
	/* Redis came back empty, its counter at 0: the epochs still went up */
	assert_true(a1.epoch > a0.epoch);
	assert_true(a1.epoch != b1.epoch);
	assert_true(epoch_a == a1.epoch);
	assert_int_equal(a1.dropped_keys, a0.dropped_keys);
	/* the queued hints went out under the new epoch */
	assert_true(WAIT_FOR(kvt_dir_lookup(nb.dir, k, 3, h) == 3, 5000));
	assert_true(h[0].h[0].epoch == a1.epoch);
}

/* The server is made a replica under the node (what a failover does to an
 * old primary that comes back, or REPLICAOF by hand): its writes answer
 * READONLY. The node treats that as a lost connection: local-only, the
 * hints it was writing kept in its queue (not counted as sent and dropped),
 * and written once a primary answers again. */
static void a_demoted_server_keeps_the_writes_queued(void **state)
{
	struct kvt_redis_proc other;
	struct kvt_redis *r = raw();
	struct kvt_key k[4];
	struct kvt_dir_holders h[4];
	struct kvt_dir_stats a0, a1;
	char dir[300], port[16];
	int p;

	snprintf(dir, sizeof(dir), "%s/other", tmpdir);
	assert_int_equal(mkdir(dir, 0700), 0);
	{ /* a port nothing listens on now */
		struct sockaddr_in a = { .sin_family = AF_INET,
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t len = sizeof(a);
		int fd = socket(AF_INET, SOCK_STREAM, 0);

		assert_true(fd >= 0);
		assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
		assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
		p = ntohs(a.sin_port);
		close(fd);
	}
	assert_int_equal(kvt_redis_proc_start(&other, dir, NULL, 0, "127.0.0.1", p), 0);
	snprintf(port, sizeof(port), "%d", p);
	assert_true(WAIT_FOR(reachable(na.dir) && reachable(nb.dir), 5000));
	kvt_dir_stats(na.dir, &a0);
	make_keys(k, 4, 9);
	raw_cmd(r, 3, (const char *[]){ "REPLICAOF", "127.0.0.1", port });
	kvt_dir_publish(na.dir, k, 4, KVT_TIER_DRAM);
	assert_true(WAIT_FOR(!reachable(na.dir), 5000));
	raw_cmd(r, 3, (const char *[]){ "REPLICAOF", "NO", "ONE" });
	assert_true(WAIT_FOR(kvt_dir_lookup(nb.dir, k, 4, h) == 4, 10000));
	assert_string_equal(h[0].h[0].node, "a");
	kvt_dir_stats(na.dir, &a1);
	assert_int_equal(a1.dropped_keys, a0.dropped_keys);
	kvt_redis_close(r);
	kvt_redis_proc_stop(&other);
}

static void bad_options_are_refused(void **state)
{
	struct kvt_dir_opts o;
	struct kvt_dir *d = NULL;

	kvt_dir_opts_init(&o, sizeof(o));
	strcpy(o.self.id, "x");
	strcpy(o.self.addr, "h:1");
	o.url = "http://h";
	assert_int_equal(kvt_dir_open(&o, &d), -EPROTONOSUPPORT);
	o.url = "redis://h:99999";
	assert_int_equal(kvt_dir_open(&o, &d), -EINVAL);
	o.url = redis.url;
	strcpy(o.self.id, "bad id");
	assert_int_equal(kvt_dir_open(&o, &d), -EINVAL);
	strcpy(o.self.id, "x");
	o.self.transports = KVT_NODE_RDMA; /* TCP is always there */
	assert_int_equal(kvt_dir_open(&o, &d), -EINVAL);
	o.self.transports = KVT_NODE_TCP;
	o.lookup_batch_keys = 0;
	assert_int_equal(kvt_dir_open(&o, &d), -EINVAL);
	assert_null(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(nodes_join_with_distinct_epochs),
		cmocka_unit_test(hints_are_published_looked_up_and_forgotten),
		cmocka_unit_test(a_lookup_spans_its_batches),
		cmocka_unit_test(dram_holders_come_before_ssd),
		cmocka_unit_test(expired_nodes_and_old_epochs_are_not_holders),
		cmocka_unit_test(slow_redis_bounds_every_call),
		cmocka_unit_test(redis_restart_pauses_and_resumes),
		cmocka_unit_test(a_demoted_server_keeps_the_writes_queued),
		cmocka_unit_test(bad_options_are_refused),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
