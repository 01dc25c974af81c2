/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier-bench remote: the cluster's data and metadata paths between two
 * nodes, each beside its reference in the same run.
 *
 * Two network namespaces joined by one veth pair: the owner (10.77.0.2: a
 * store holding the blocks, the peer server, the directory, and
 * redis-server) and the reader (10.77.0.1). Both are child processes of the
 * bench, each inside its namespace.
 *
 *  - Block fetch over TCP: the reader fetches every block, over --conns
 *    connections, into slots reserved in its own store (as the peer tier
 *    will), repeatedly for --secs; beside iperf3 with as many streams in the
 *    same direction (owner -> reader, -R) over the same veth pair for as
 *    long. The two alternate, --reps times; medians.
 *  - LOOKUP: a directory lookup of --lookup-keys keys (one MGET, through
 *    the directory's thread), beside a plain Redis GET
 *    round trip from the same namespace to the same server; interleaved,
 *    p50 of each.
 *  - RDMA beside ib_read_bw where a device exists; skipped with the reason
 *    otherwise. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "bench/bench.h"
#include "bench/netlab/netlab.h"
#include "cluster/directory.h"
#include "cluster/redis_conn.h"
#include "kvtier/store.h"
#include "cluster/peer_client.h"
#include "cluster/peer_server.h"
#include "transport/sockio.h"
#include "cluster/verbs.h"
#include "util/clock.h"
#include "util/size.h"

#define OWNER 1
#define READER 0
#define PEER_PORT 7400
#define REDIS_PORT 6379
#define IPERF_PORT 5201
#define SECRET "kvtier-bench remote: a secret for one run"

struct rm_args {
	uint64_t block_bytes;
	int blocks, conns, reps, lookup_keys, lookups;
	double secs;
	bool json;
};

static void usage(FILE *f)
{
	fprintf(f,
"usage: kvtier-bench remote [OPTIONS]\n"
"\n"
"Block fetch throughput between two nodes over TCP beside iperf3 on the same\n"
"veth pair, directory LOOKUP latency beside a Redis GET round trip, and RDMA\n"
"beside ib_read_bw where a device exists. The two nodes run in network\n"
"namespaces made for the run (needs root, iproute2, redis-server, iperf3).\n"
"\n"
"options:\n"
"  --block SIZE        block size (default 4M)\n"
"  --blocks N          blocks the owner holds and the reader fetches (default 64)\n"
"  --conns N           connections (and iperf3 streams) (default 4)\n"
"  --secs S            seconds per measurement (default 3)\n"
"  --reps N            alternating repetitions, medians reported (default 3)\n"
"  --lookup-keys N     keys per LOOKUP (default 32)\n"
"  --lookups N         LOOKUPs and GETs timed (default 2000)\n"
"  --json              one JSON object instead of a table\n"
"  -h, --help          this text\n"
"\n"
"JSON: block_bytes, blocks, conns, reps, remote_gbps, iperf3_gbps, ratio,\n"
"lookup_keys, lookup_p50_us, lookup_p99_us, redis_get_p50_us, lookup_ratio,\n"
"lookup_mean_us, lookup_thread_mean_us (of a lookup's mean, the Redis\n"
"exchange: command built, sent, answered, parsed, on the caller's thread\n"
"when the directory's connection is idle, else on the directory's thread;\n"
"the rest is taking the connection or handing the request over),\n"
"rdma {gbps, ib_read_bw_gbps, ratio} or rdma {skipped: reason}.\n"
"Targets: ratio >= 0.8; lookup_ratio <= 2; rdma ratio >= 0.9.\n");
}

static int parse_args(int argc, char **argv, struct rm_args *a)
{
	static const struct option opts[] = {
		{ "block", required_argument, NULL, 'b' }, { "blocks", required_argument, NULL, 'n' },
		{ "conns", required_argument, NULL, 'c' }, { "secs", required_argument, NULL, 's' },
		{ "reps", required_argument, NULL, 'r' }, { "lookup-keys", required_argument, NULL, 'k' },
		{ "lookups", required_argument, NULL, 'l' }, { "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 },
	};
	int opt;

	*a = (struct rm_args){ .block_bytes = 4 << 20, .blocks = 64, .conns = 4, .reps = 3,
			       .lookup_keys = 32, .lookups = 2000, .secs = 3 };
	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'b':
			if (kvt_bench_parse_size(optarg, &a->block_bytes))
				return -EINVAL;
			break;
		case 'n': a->blocks = atoi(optarg); break;
		case 'c': a->conns = atoi(optarg); break;
		case 's': a->secs = atof(optarg); break;
		case 'r': a->reps = atoi(optarg); break;
		case 'k': a->lookup_keys = atoi(optarg); break;
		case 'l': a->lookups = atoi(optarg); break;
		case 'j': a->json = true; break;
		case 'h': usage(stdout); exit(0);
		default: return -EINVAL;
		}
	}
	if (a->blocks < 1 || a->blocks > 16384 || a->conns < 1 || a->conns > 64 || a->reps < 1 ||
	    a->secs <= 0 || a->lookup_keys < 1 || a->lookup_keys > a->blocks || a->lookups < 1 ||
	    a->block_bytes < 4096 || a->block_bytes > (256ull << 20))
		return -EINVAL;
	return 0;
}

/* ---- the namespace: a model whose block is block_bytes ----------------- */

static void bench_desc(struct kvt_ns_desc *d, uint64_t block_bytes)
{
	kvt_ns_desc_init(d, sizeof(*d));
	strcpy(d->model_id, "bench/remote");
	d->layout = KVT_LAYOUT_MLA; /* 1 x layers x 1 x head_dim x 2 B x tokens */
	d->dtype = KVT_DTYPE_BF16;
	d->kv_heads = 1;
	d->head_dim = 512;
	d->block_tokens = 16;
	d->layers = (uint32_t)(block_bytes / (512 * 2 * 16)); /* 16 KiB per layer */
	d->tp_size = 1;
}

static void keys_of(int n, struct kvt_key *k)
{
	for (int i = 0; i < n; i++) {
		memset(&k[i], 0, sizeof(k[i]));
		memcpy(k[i].bytes, &i, sizeof(i));
		k[i].bytes[15] = 0x5a;
	}
}

static struct kvt_store *open_store(const struct rm_args *a, struct kvt_ns **ns)
{
	struct kvt_store_opts o;
	struct kvt_ns_desc d;
	struct kvt_store *s;

	kvt_store_opts_init(&o, sizeof(o));
	o.dram_bytes = (uint64_t)a->blocks * a->block_bytes + (64ull << 20);
	/* as kvtierd runs by default: a warm DRAM tier, which keeps each
	 * block's sum from its put (the owner sends it, not a new hash) */
	o.dram_warm = true;
	if (kvt_store_open(&o, &s))
		return NULL;
	bench_desc(&d, a->block_bytes);
	if (kvt_ns_attach(s, &d, ns)) {
		kvt_store_close(s);
		return NULL;
	}
	return s;
}

static struct kvt_peer_secret secret;

/* Bytes that do not compress and differ per block. */
static void fill(void *buf, size_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull | 1, *p = buf;

	for (size_t i = 0; i < len / 8; i++) {
		x ^= x >> 12;
		x ^= x << 25;
		x ^= x >> 27;
		p[i] = x * 0x2545F4914F6CDD1Dull;
	}
}

/* ---- the owner (child process in its namespace) ------------------------ */

static struct kvt_ns *owner_ns;

static struct kvt_ns *owner_find(void *arg, const struct kvt_key *salt)
{
	return memcmp(kvt_ns_salt(owner_ns), salt, sizeof(*salt)) == 0 ? owner_ns : NULL;
}

/* Hold the blocks, serve them, publish them; say "ready" on out; end when
 * in closes. */
static int owner_main(const struct rm_args *a, const struct kvt_netlab *net, int in, int out)
{
	struct kvt_peer_server_opts po;
	struct kvt_dir_opts dopt;
	struct kvt_peer_server *srv = NULL;
	struct kvt_dir *dir = NULL;
	struct kvt_store *store;
	struct kvt_key *keys = calloc((size_t)a->blocks, sizeof(*keys));
	uint8_t *buf = malloc(a->block_bytes);
	char listen[64], url[64], c;
	int rc = 1;

	store = open_store(a, &owner_ns);
	if (!store || !keys || !buf)
		goto out;
	keys_of(a->blocks, keys);
	for (int i = 0; i < a->blocks; i++) {
		fill(buf, a->block_bytes, (uint64_t)i + 1);
		if (kvt_put(owner_ns, &keys[i], i ? &keys[i - 1] : NULL, buf, a->block_bytes))
			goto out;
	}
	snprintf(listen, sizeof(listen), "%s:%d", net->addr[OWNER], PEER_PORT);
	snprintf(url, sizeof(url), "redis://%s:%d", net->addr[OWNER], REDIS_PORT);
	kvt_peer_server_opts_init(&po, sizeof(po));
	po.listen = listen;
	po.node_id = "owner";
	po.secret = &secret;
	po.find_ns_cb = owner_find;
	if (kvt_peer_server_open(&po, &srv))
		goto out;
	kvt_dir_opts_init(&dopt, sizeof(dopt));
	dopt.url = url;
	strcpy(dopt.self.id, "owner");
	snprintf(dopt.self.addr, sizeof(dopt.self.addr), "%s", listen);
	if (kvt_dir_open(&dopt, &dir))
		goto out;
	for (int i = 0; i < 500; i++) { /* joined, then the hints go out */
		struct kvt_dir_stats st;

		kvt_dir_stats(dir, &st);
		if (st.reachable)
			break;
		usleep(10000);
	}
	kvt_dir_publish(dir, keys, (size_t)a->blocks, KVT_TIER_DRAM);
	usleep(200000);
	if (write(out, "r", 1) != 1)
		goto out;
	while (read(in, &c, 1) > 0)
		;
	rc = 0;
out:
	kvt_dir_close(dir);
	kvt_peer_server_close(srv);
	kvt_store_close(store);
	free(keys);
	free(buf);
	return rc;
}

/* ---- the reader (child process in its namespace) ----------------------- */

enum { CMD_FETCH = 1, CMD_LOOKUP = 2, CMD_QUIT = 3 };

struct cmd {
	int op;
	double secs;
};

struct result {
	int err;
	double gbps;                   /* FETCH */
	double lookup_p50, lookup_p99; /* LOOKUP, in microseconds */
	double get_p50;
	double lookup_mean, lookup_thread_mean; /* whole call; on the directory's thread */
	uint64_t blocks;
};

/* Fetch all blocks into reserved slots, again and again for secs. */
static void reader_fetch(const struct rm_args *a, struct kvt_peer_client *c, struct kvt_ns *ns,
			 const struct kvt_key *keys, const struct kvt_peer_target *t, double secs,
			 struct result *res)
{
	struct kvt_peer_item *it = calloc((size_t)a->blocks, sizeof(*it));
	struct kvt_slot *slots = calloc((size_t)a->blocks, sizeof(*slots));
	uint64_t t0 = kvt_now_ns(), bytes = 0, end = t0 + (uint64_t)(secs * 1e9);
	int got;

	while (kvt_now_ns() < end && !res->err) {
		for (int i = 0; i < a->blocks; i++) {
			res->err = kvt_reserve(ns, &keys[i], i ? &keys[i - 1] : NULL, &slots[i]);
			if (res->err)
				break;
			it[i] = (struct kvt_peer_item){ .key = keys[i], .dst = slots[i].data };
		}
		if (res->err)
			break;
		got = kvt_peer_fetch(c, t, kvt_ns_salt(ns), a->block_bytes, it, (size_t)a->blocks);
		for (int i = 0; i < a->blocks; i++)
			kvt_abort(ns, &slots[i]); /* measured, not kept */
		if (got != a->blocks) {
			res->err = it[0].status ? it[0].status : -EIO;
			break;
		}
		bytes += (uint64_t)a->blocks * a->block_bytes;
		res->blocks += (uint64_t)a->blocks;
	}
	res->gbps = (double)bytes * 8 / (double)(kvt_now_ns() - t0);
	free(it);
	free(slots);
}

/* LOOKUPs through the directory and GETs on a plain connection,
 * interleaved. */
static void reader_lookup(const struct rm_args *a, struct kvt_dir *dir, const char *url,
			  const struct kvt_key *keys, struct result *res)
{
	struct kvt_dir_holders *h = calloc((size_t)a->lookup_keys, sizeof(*h));
	double *lk = calloc((size_t)a->lookups, sizeof(double));
	double *gt = calloc((size_t)a->lookups, sizeof(double));
	struct kvt_redis_url u;
	struct kvt_redis *r = NULL;
	const char *argv[2] = { "GET", "kvt:node:owner" };
	size_t lens[2] = { 3, strlen(argv[1]) };
	redisReply *rep;
	struct kvt_dir_stats s0, s1;
	double sum = 0;
	int n = 0;

	if (kvt_redis_url_parse(url, &u) || kvt_redis_connect(&u, kvt_deadline_ms(2000), &r, NULL, 0)) {
		res->err = -ENOTCONN;
		goto out;
	}
	for (int i = 0; i < a->lookups + 50; i++) {
		uint64_t t0 = kvt_now_ns(), t1, t2;
		int hit = kvt_dir_lookup(dir, keys, (size_t)a->lookup_keys, h);

		t1 = kvt_now_ns();
		if (kvt_redis_append(r, 2, argv, lens) || kvt_redis_exec(r, &rep, 1, kvt_deadline_ms(1000))) {
			res->err = -ENOTCONN;
			goto out;
		}
		t2 = kvt_now_ns();
		kvt_redis_free_replies(&rep, 1);
		if (hit != a->lookup_keys) {
			res->err = hit < 0 ? hit : -ENOENT;
			goto out;
		}
		if (i < 50) {
			kvt_dir_stats(dir, &s0); /* warm-up */
			continue;
		}
		lk[n] = (double)(t1 - t0) / 1e3;
		sum += lk[n];
		gt[n++] = (double)(t2 - t1) / 1e3;
	}
	res->lookup_p50 = kvt_bench_quantile(lk, (size_t)n, 0.5);
	res->lookup_p99 = kvt_bench_quantile(lk, (size_t)n, 0.99);
	res->get_p50 = kvt_bench_quantile(gt, (size_t)n, 0.5);
	/* where a lookup's time goes: the Redis exchange on the directory's
	 * thread, and the rest (handing the request over and the answer back) */
	kvt_dir_stats(dir, &s1);
	res->lookup_mean = n ? sum / n : 0;
	if (s1.lookup_batches > s0.lookup_batches)
		res->lookup_thread_mean = (double)(s1.lookup_batch_ns - s0.lookup_batch_ns) / 1e3 /
					  (double)(s1.lookup_batches - s0.lookup_batches);
out:
	kvt_redis_close(r);
	free(h);
	free(lk);
	free(gt);
}

static int reader_main(const struct rm_args *a, const struct kvt_netlab *net, int in, int out)
{
	struct kvt_peer_client_opts co;
	struct kvt_dir_opts dopt;
	struct kvt_peer_client *cli = NULL;
	struct kvt_dir *dir = NULL;
	struct kvt_store *store;
	struct kvt_ns *ns;
	struct kvt_key *keys = calloc((size_t)a->blocks, sizeof(*keys));
	char addr[64], url[64];
	struct kvt_peer_target t = { .node_id = "owner", .addr = addr };
	struct cmd cmd;
	int rc = 1;

	store = open_store(a, &ns);
	if (!store || !keys)
		goto out;
	keys_of(a->blocks, keys);
	snprintf(addr, sizeof(addr), "%s:%d", net->addr[OWNER], PEER_PORT);
	snprintf(url, sizeof(url), "redis://%s:%d", net->addr[OWNER], REDIS_PORT);
	kvt_peer_client_opts_init(&co, sizeof(co));
	co.node_id = "reader";
	co.secret = &secret;
	co.conns_per_peer = (unsigned)a->conns;
	co.timeout_ms = 5000;
	if (kvt_peer_client_open(&co, &cli))
		goto out;
	kvt_dir_opts_init(&dopt, sizeof(dopt));
	dopt.url = url;
	strcpy(dopt.self.id, "reader");
	snprintf(dopt.self.addr, sizeof(dopt.self.addr), "%s:%d", net->addr[READER], PEER_PORT);
	dopt.lookup_timeout_ms = 1000; /* a latency bench: no give-ups */
	if (kvt_dir_open(&dopt, &dir))
		goto out;
	for (int i = 0; i < 500 && kvt_dir_members(dir, NULL, 0) < 2; i++)
		usleep(10000);
	while (read(in, &cmd, sizeof(cmd)) == sizeof(cmd) && cmd.op != CMD_QUIT) {
		struct result res = { 0 };

		if (cmd.op == CMD_FETCH)
			reader_fetch(a, cli, ns, keys, &t, cmd.secs, &res);
		else
			reader_lookup(a, dir, url, keys, &res);
		if (write(out, &res, sizeof(res)) != sizeof(res))
			break;
	}
	rc = 0;
out:
	kvt_dir_close(dir);
	kvt_peer_client_close(cli);
	kvt_store_close(store);
	free(keys);
	return rc;
}

/* A child running fn inside node's namespace, with a pipe each way. */
static pid_t start_child(const struct rm_args *a, const struct kvt_netlab *net, int node,
			 int (*fn)(const struct rm_args *, const struct kvt_netlab *, int, int),
			 int *to, int *from)
{
	int p1[2], p2[2];
	pid_t pid;

	if (pipe(p1) || pipe(p2))
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		close(p1[1]);
		close(p2[0]);
		_exit(kvt_netlab_enter(net, node) ? 1 : fn(a, net, p1[0], p2[1]));
	}
	close(p1[0]);
	close(p2[1]);
	*to = p1[1];
	*from = p2[0];
	return pid;
}

/* ---- iperf3 ------------------------------------------------------------ */

static bool have(const char *bin)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", bin);
	return system(cmd) == 0;
}

/* iperf3 -R (server sends, as the owner does) with conns streams for secs,
 * in Gbit/s, or a negative errno. */
static double iperf3_gbps(const struct rm_args *a, const struct kvt_netlab *net)
{
	char port[16], streams[16], secs[16], *out = NULL;
	char *srv_argv[] = { "iperf3", "-s", "-1", "-B", (char *)net->addr[OWNER], "-p", port, NULL };
	char *cli_argv[] = { "iperf3", "-c", (char *)net->addr[OWNER], "-p", port, "-R", "-P", streams,
			     "-t", secs, "-J", NULL };
	int p[2], st;
	size_t len = 0, cap = 0;
	ssize_t r;
	pid_t srv, cli;
	double gbps = -EIO;
	json_t *js;

	snprintf(port, sizeof(port), "%d", IPERF_PORT);
	snprintf(streams, sizeof(streams), "%d", a->conns);
	snprintf(secs, sizeof(secs), "%d", a->secs < 1 ? 1 : (int)(a->secs + 0.5));
	srv = kvt_netlab_spawn(net, OWNER, srv_argv, -1, open("/dev/null", O_WRONLY), -1);
	if (srv < 0)
		return srv;
	usleep(300000);
	if (pipe(p))
		return -errno;
	cli = kvt_netlab_spawn(net, READER, cli_argv, -1, p[1], -1);
	close(p[1]);
	for (;;) {
		if (len + 4096 > cap) {
			cap = cap ? 2 * cap : 65536;
			out = realloc(out, cap);
		}
		r = read(p[0], out + len, cap - len - 1);
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	close(p[0]);
	if (cli > 0)
		waitpid(cli, &st, 0);
	kill(srv, SIGTERM);
	waitpid(srv, NULL, 0);
	if (!out)
		return -EIO;
	out[len] = '\0';
	js = json_loads(out, 0, NULL);
	if (js) {
		json_t *bps = json_object_get(json_object_get(json_object_get(js, "end"),
							      "sum_received"), "bits_per_second");

		if (json_is_number(bps))
			gbps = json_number_value(bps) / 1e9;
		json_decref(js);
	}
	free(out);
	return gbps;
}

/* ---- RDMA -------------------------------------------------------------- */

static const char *rdma_skip_reason(void)
{
	const struct kvt_verbs_ops *v = kvt_verbs_ibv();
	char names[4][32];

	if (!v)
		return "built without libibverbs";
	if (v->devices(names, 4) <= 0)
		return "no RDMA device (ibv_get_device_list found none)";
	if (!have("ib_read_bw"))
		return "ib_read_bw (perftest) is not installed";
	return "an RDMA device exists, but the RDMA bench needs two kvtierd nodes (phase 2); "
	       "run ib_read_bw by hand meanwhile";
}

/* ---- main -------------------------------------------------------------- */

int kvt_bench_remote_main(int argc, char **argv)
{
	struct rm_args a;
	struct kvt_netlab net;
	struct kvt_redis_proc redis = { 0 };
	char why[256], dir[] = "/tmp/kvt-remote.XXXXXX";
	double *remote = NULL, *ip = NULL;
	struct result lres = { 0 };
	int to_owner = -1, from_owner = -1, to_reader = -1, from_reader = -1, rc = 1, err;
	pid_t owner = -1, reader = -1;
	char c;

	if (parse_args(argc, argv, &a)) {
		usage(stderr);
		return 2;
	}
	kvt_peer_secret_set(&secret, SECRET, strlen(SECRET));
	if (!kvt_redis_server_path()) {
		fprintf(stderr, "kvtier-bench remote: redis-server is not installed\n");
		return 77;
	}
	err = kvt_netlab_open(&net, 2, false, why, sizeof(why));
	if (err) {
		fprintf(stderr, "kvtier-bench remote: cannot make network namespaces: %s\n", why);
		return err == -EPERM || err == -ENOENT ? 77 : 1;
	}
	remote = calloc((size_t)a.reps, sizeof(double));
	ip = calloc((size_t)a.reps, sizeof(double));
	if (!mkdtemp(dir) ||
	    kvt_redis_proc_start(&redis, dir, &net, OWNER, net.addr[OWNER], REDIS_PORT)) {
		fprintf(stderr, "kvtier-bench remote: redis-server did not start\n");
		goto out;
	}
	owner = start_child(&a, &net, OWNER, owner_main, &to_owner, &from_owner);
	if (owner < 0 || read(from_owner, &c, 1) != 1) {
		fprintf(stderr, "kvtier-bench remote: the owner did not start\n");
		goto out;
	}
	reader = start_child(&a, &net, READER, reader_main, &to_reader, &from_reader);
	if (reader < 0)
		goto out;
	for (int rep = 0; rep < a.reps; rep++) {
		struct cmd cmd = { .op = CMD_FETCH, .secs = a.secs };
		struct result res = { 0 };

		/* who goes first alternates, so neither always runs on a warmer link */
		if (rep % 2 == 0)
			ip[rep] = have("iperf3") ? iperf3_gbps(&a, &net) : -ENOENT;
		if (write(to_reader, &cmd, sizeof(cmd)) != sizeof(cmd) ||
		    read(from_reader, &res, sizeof(res)) != sizeof(res) || res.err) {
			fprintf(stderr, "kvtier-bench remote: fetch failed: %s\n", kvt_strerror(res.err));
			goto out;
		}
		remote[rep] = res.gbps;
		if (rep % 2 == 1)
			ip[rep] = have("iperf3") ? iperf3_gbps(&a, &net) : -ENOENT;
		if (!a.json)
			fprintf(stderr, "rep %d: remote %.2f Gbit/s, iperf3 %.2f Gbit/s\n", rep,
				remote[rep], ip[rep]);
	}
	{
		struct cmd cmd = { .op = CMD_LOOKUP };

		if (write(to_reader, &cmd, sizeof(cmd)) != sizeof(cmd) ||
		    read(from_reader, &lres, sizeof(lres)) != sizeof(lres) || lres.err) {
			fprintf(stderr, "kvtier-bench remote: lookups failed: %s\n", kvt_strerror(lres.err));
			goto out;
		}
	}
	{
		double r = kvt_bench_median(remote, (size_t)a.reps);
		double i = kvt_bench_median(ip, (size_t)a.reps);
		const char *rdma = rdma_skip_reason();

		if (a.json) {
			json_t *o = json_object();

			json_object_set_new(o, "link", json_string("veth pair between two network namespaces"));
			json_object_set_new(o, "block_bytes", json_integer((json_int_t)a.block_bytes));
			json_object_set_new(o, "blocks", json_integer(a.blocks));
			json_object_set_new(o, "conns", json_integer(a.conns));
			json_object_set_new(o, "reps", json_integer(a.reps));
			json_object_set_new(o, "remote_gbps", json_real(r));
			json_object_set_new(o, "iperf3_gbps", i > 0 ? json_real(i) : json_null());
			json_object_set_new(o, "ratio", i > 0 ? json_real(r / i) : json_null());
			json_object_set_new(o, "lookup_keys", json_integer(a.lookup_keys));
			json_object_set_new(o, "lookup_p50_us", json_real(lres.lookup_p50));
			json_object_set_new(o, "lookup_p99_us", json_real(lres.lookup_p99));
			json_object_set_new(o, "redis_get_p50_us", json_real(lres.get_p50));
			json_object_set_new(o, "lookup_ratio", json_real(lres.lookup_p50 / lres.get_p50));
			json_object_set_new(o, "lookup_mean_us", json_real(lres.lookup_mean));
			json_object_set_new(o, "lookup_thread_mean_us", json_real(lres.lookup_thread_mean));
			json_object_set_new(o, "rdma", json_pack("{s:s}", "skipped", rdma));
			json_dumpf(o, stdout, JSON_INDENT(2));
			fputc('\n', stdout);
			json_decref(o);
		} else {
			char bs[32];

			printf("remote, veth pair, %s blocks x %d, %d connections, medians of %d\n",
			       kvt_fmt_bytes(a.block_bytes, bs, sizeof(bs)), a.blocks, a.conns, a.reps);
			printf("  TCP fetch   %8.2f Gbit/s   iperf3 %8.2f Gbit/s   ratio %.2f (target >= 0.8)\n",
			       r, i, i > 0 ? r / i : 0);
			printf("  LOOKUP      %8.1f us p50 (%d keys, p99 %.1f)   Redis GET %6.1f us p50   "
			       "ratio %.2f (target <= 2)\n", lres.lookup_p50, a.lookup_keys, lres.lookup_p99,
			       lres.get_p50, lres.lookup_p50 / lres.get_p50);
			printf("  RDMA        skipped: %s\n", rdma);
		}
	}
	rc = 0;
out:
	if (to_reader >= 0) {
		struct cmd q = { .op = CMD_QUIT };

		if (write(to_reader, &q, sizeof(q)) < 0) {
			/* the reader is gone already */
		}
		close(to_reader);
	}
	if (reader > 0)
		waitpid(reader, NULL, 0);
	if (to_owner >= 0)
		close(to_owner);
	if (owner > 0)
		waitpid(owner, NULL, 0);
	if (from_owner >= 0)
		close(from_owner);
	if (from_reader >= 0)
		close(from_reader);
	kvt_redis_proc_stop(&redis);
	kvt_netlab_close(&net);
	{
		char log[sizeof(dir) + 16];

		snprintf(log, sizeof(log), "%s/redis.log", dir);
		unlink(log);
		rmdir(dir);
	}
	free(remote);
	free(ip);
	return rc;
}
