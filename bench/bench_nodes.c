/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier-bench nodes: a reader taking a prefix spread over 1, 2 and 3
 * holders, beside iperf3 from the same holders over the same links.
 *
 * Four network namespaces around a bridge (netlab's star), every link
 * shaped by tc tbf: the holders' to --rate each, the reader's to
 * --reader-rate, so that the links, not the CPU, are the limit. Redis runs
 * in the hub. Each holder is a child process holding a store, a peer
 * server and the directory; with h holders, block i of the prefix is held
 * by holder i % h. The reader is a child with a store, the peer tier added
 * to it, the peer client and the directory, and reads as kvtierd's LOAD
 * does: a LOOKUP of the prefix, then kvt_acquire_many in windows of 32
 * keys, two windows at a time (each acquired block released and removed,
 * so the next pass fetches again), for --secs. iperf3 runs one client per
 * holder at once (-R, --conns streams each) over the same links, for as
 * long. The two alternate, --reps times; medians. Per link: the bytes each
 * holder sent over the same span. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
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
#include "cluster/peer_client.h"
#include "cluster/peer_server.h"
#include "cluster/peer_tier.h"
#include "kvtier/store.h"
#include "util/clock.h"
#include "util/size.h"

#define HOLDERS 3
#define READER HOLDERS
#define PEER_PORT 7400
#define REDIS_PORT 6379
#define IPERF_PORT 5201
#define WINDOW 32       /* keys a LOAD window acquires (kvtierd's) */
#define SECRET "kvtier-bench nodes: a secret for one run"

struct nb_args {
	uint64_t sizes[4];
	int n_sizes, conns, reps;
	uint64_t prefix_bytes, rate, reader_rate;
	double secs;
	bool json;
};

static struct kvt_peer_secret secret;

static void usage(FILE *f)
{
	fprintf(f,
"usage: kvtier-bench nodes [OPTIONS]\n"
"\n"
"A reader loads a prefix spread over 1, 2 and 3 holders through the peer\n"
"tier, beside iperf3 from the same holders at once, over links shaped by tc\n"
"in network namespaces made for the run (needs root, iproute2 with tc and\n"
"sch_tbf, redis-server, iperf3).\n"
"\n"
"options:\n"
"  --block SIZE        a block size (repeat for several; default 256K and 2M)\n"
"  --prefix SIZE       the prefix's bytes (default 64M)\n"
"  --rate MBIT         each holder's link, Mbit/s (default 1000)\n"
"  --reader-rate MBIT  the reader's link, Mbit/s (default 3 x --rate)\n"
"  --conns N           connections per holder (and iperf3 streams) (default 4)\n"
"  --secs S            seconds per measurement (default 2)\n"
"  --reps N            alternating repetitions, medians reported (default 1)\n"
"  --json              one JSON object instead of a table\n"
"\n"
"JSON: rate_mbit, reader_rate_mbit, conns, reps, prefix_bytes, rows [{block_bytes,\n"
"holders, kvtier_gbps, iperf3_gbps, ratio, links [{holder, kvtier_gbps,\n"
"iperf3_gbps, ratio}], min_link_ratio}]. Target: link ratio >= 0.8.\n");
}

static int parse_args(int argc, char **argv, struct nb_args *a)
{
	static const struct option opts[] = {
		{ "block", required_argument, NULL, 'b' }, { "prefix", required_argument, NULL, 'p' },
		{ "rate", required_argument, NULL, 'r' }, { "reader-rate", required_argument, NULL, 'R' },
		{ "conns", required_argument, NULL, 'c' }, { "secs", required_argument, NULL, 's' },
		{ "reps", required_argument, NULL, 'n' }, { "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 },
	};
	int opt;

	*a = (struct nb_args){ .conns = 4, .reps = 1, .prefix_bytes = 64ull << 20,
			       .rate = 1000000000ull, .secs = 2 };
	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'b':
			if (a->n_sizes == 4 || kvt_bench_parse_size(optarg, &a->sizes[a->n_sizes++]))
				return -EINVAL;
			break;
		case 'p':
			if (kvt_bench_parse_size(optarg, &a->prefix_bytes))
				return -EINVAL;
			break;
		case 'r': a->rate = strtoull(optarg, NULL, 10) * 1000000ull; break;
		case 'R': a->reader_rate = strtoull(optarg, NULL, 10) * 1000000ull; break;
		case 'c': a->conns = atoi(optarg); break;
		case 's': a->secs = atof(optarg); break;
		case 'n': a->reps = atoi(optarg); break;
		case 'j': a->json = true; break;
		case 'h': usage(stdout); exit(0);
		default: return -EINVAL;
		}
	}
	if (!a->n_sizes) {
		a->sizes[a->n_sizes++] = 256 << 10;
		a->sizes[a->n_sizes++] = 2 << 20;
	}
	if (!a->reader_rate)
		a->reader_rate = HOLDERS * a->rate;
	for (int i = 0; i < a->n_sizes; i++)
		if (a->sizes[i] < 16384 || a->sizes[i] % 16384 || a->sizes[i] > (64ull << 20) ||
		    a->prefix_bytes / a->sizes[i] < HOLDERS || a->prefix_bytes / a->sizes[i] > 65536)
			return -EINVAL;
	if (a->conns < 1 || a->conns > 64 || a->reps < 1 || a->reps > 64 || a->secs <= 0 ||
	    a->rate < 1000000 || a->reader_rate < 1000000)
		return -EINVAL;
	return 0;
}

/* ---- what every node agrees on: the namespace and the keys ------------- */

static void bench_desc(struct kvt_ns_desc *d, uint64_t block_bytes)
{
	kvt_ns_desc_init(d, sizeof(*d));
	strcpy(d->model_id, "bench/nodes");
	d->layout = KVT_LAYOUT_MLA; /* 1 x layers x 1 x head_dim x 2 B x tokens */
	d->dtype = KVT_DTYPE_BF16;
	d->kv_heads = 1;
	d->head_dim = 512;
	d->block_tokens = 16;
	d->layers = (uint32_t)(block_bytes / (512 * 2 * 16)); /* 16 KiB per layer */
	d->tp_size = 1;
}

/* Key i of the prefix spread over h holders. */
static struct kvt_key key_of(int h, int i)
{
	struct kvt_key k = { 0 };

	memcpy(k.bytes, &i, sizeof(i));
	k.bytes[14] = (uint8_t)h;
	k.bytes[15] = 0xa5;
	return k;
}

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

static struct kvt_store *open_store(uint64_t dram, uint64_t bs, struct kvt_ns **ns)
{
	struct kvt_store_opts o;
	struct kvt_ns_desc d;
	struct kvt_store *s;

	kvt_store_opts_init(&o, sizeof(o));
	o.dram_bytes = dram;
	o.dram_warm = true; /* as kvtierd runs: the owner sends the sum kept at put */
	if (kvt_store_open(&o, &s))
		return NULL;
	bench_desc(&d, bs);
	if (kvt_ns_attach(s, &d, ns)) {
		kvt_store_close(s);
		return NULL;
	}
	return s;
}

static int open_dir(const struct kvt_netlab *net, int node, const char *id, struct kvt_dir **dir)
{
	struct kvt_dir_opts o;
	char url[64];

	snprintf(url, sizeof(url), "redis://%s:%d", net->hub_addr, REDIS_PORT);
	kvt_dir_opts_init(&o, sizeof(o));
	o.url = url;
	snprintf(o.self.id, sizeof(o.self.id), "%s", id);
	snprintf(o.self.addr, sizeof(o.self.addr), "%s:%d", net->addr[node], PEER_PORT);
	o.lookup_timeout_ms = 1000;
	return kvt_dir_open(&o, dir);
}

/* ---- a holder (child process in its namespace) ------------------------- */

static struct kvt_ns *node_ns;

static struct kvt_ns *holder_find(void *arg, const struct kvt_key *salt)
{
	(void)arg;
	return memcmp(kvt_ns_salt(node_ns), salt, sizeof(*salt)) == 0 ? node_ns : NULL;
}

/* Holder j of blocks of bs bytes: for every h > j, the blocks i % h == j of
 * the prefix spread over h; serve and publish them, say "r", end when in
 * closes. */
static int holder_main(const struct nb_args *a, const struct kvt_netlab *net, int j, uint64_t bs,
		       int in, int out)
{
	int n = (int)(a->prefix_bytes / bs), rc = 1;
	struct kvt_store *store = open_store(2 * a->prefix_bytes + (64ull << 20), bs, &node_ns);
	struct kvt_key *keys = calloc((size_t)n, sizeof(*keys));
	uint8_t *buf = malloc(bs);
	struct kvt_peer_server_opts po;
	struct kvt_peer_server *srv = NULL;
	struct kvt_dir *dir = NULL;
	char listen[64], id[8], c;

	snprintf(id, sizeof(id), "h%d", j);
	if (!store || !keys || !buf)
		goto out;
	snprintf(listen, sizeof(listen), "%s:%d", net->addr[j], PEER_PORT);
	kvt_peer_server_opts_init(&po, sizeof(po));
	po.listen = listen;
	po.node_id = id;
	po.secret = &secret;
	po.find_ns_cb = holder_find;
	if (kvt_peer_server_open(&po, &srv) || open_dir(net, j, id, &dir))
		goto out;
	for (int i = 0; i < 500; i++) {
		struct kvt_dir_stats st;

		kvt_dir_stats(dir, &st);
		if (st.reachable)
			break;
		usleep(10000);
	}
	for (int h = j + 1; h <= HOLDERS; h++) {
		size_t m = 0;

		for (int i = j; i < n; i += h) {
			keys[m] = key_of(h, i);
			fill(buf, bs, (uint64_t)h << 32 | (uint64_t)i);
			if (kvt_put(node_ns, &keys[m++], NULL, buf, bs))
				goto out;
		}
		kvt_dir_publish(dir, keys, m, KVT_TIER_DRAM);
	}
	usleep(300000); /* the hints go out on the directory's thread */
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

struct cmd {
	int holders;   /* 0: quit */
	double secs;
};

struct result {
	int err;
	double gbps;
	double link_gbps[HOLDERS];
	uint64_t blocks;
};

struct pass {
	struct kvt_ns *ns;
	const struct kvt_key *keys;
	int n, first;          /* windows first, first + 2, ... */
	uint64_t blocks;
	int err;
};

/* Acquire every other window of the prefix, as one of a LOAD's two. */
static void *pass_main(void *arg)
{
	struct pass *p = arg;
	struct kvt_slot slots[WINDOW];
	int res[WINDOW];

	for (int w = p->first * WINDOW; w < p->n && !p->err; w += 2 * WINDOW) {
		int m = p->n - w < WINDOW ? p->n - w : WINDOW;

		kvt_acquire_many(p->ns, p->keys + w, (size_t)m, slots, res, NULL, NULL);
		for (int k = 0; k < m; k++) {
			if (res[k]) {
				p->err = res[k];
				continue;
			}
			p->blocks++;
			kvt_release(p->ns, &slots[k]);
			kvt_remove(p->ns, &p->keys[w + k]); /* the next pass fetches it again */
		}
	}
	return NULL;
}

static void link_bytes(struct kvt_peer_client *cli, uint64_t *out)
{
	struct kvt_peer_stats ps[8];
	int n = kvt_peer_client_stats(cli, ps, 8);

	memset(out, 0, HOLDERS * sizeof(*out));
	for (int i = 0; i < n && i < 8; i++)
		if (ps[i].node_id[0] == 'h' && ps[i].node_id[1] >= '0' &&
		    ps[i].node_id[1] < '0' + HOLDERS)
			out[ps[i].node_id[1] - '0'] = ps[i].bytes;
}

static void reader_fetch(int n, struct kvt_ns *ns, struct kvt_peer_client *cli,
			 const struct cmd *cmd, struct result *res)
{
	struct kvt_key *keys = calloc((size_t)n, sizeof(*keys));
	uint64_t b0[HOLDERS], b1[HOLDERS], t0, end, ns_spent;

	if (!keys) {
		res->err = -ENOMEM;
		return;
	}
	for (int i = 0; i < n; i++)
		keys[i] = key_of(cmd->holders, i);
	link_bytes(cli, b0);
	t0 = kvt_now_ns();
	end = t0 + (uint64_t)(cmd->secs * 1e9);
	while (kvt_now_ns() < end && !res->err) {
		struct pass p[2] = { { ns, keys, n, 0, 0, 0 }, { ns, keys, n, 1, 0, 0 } };
		pthread_t th;
		bool two;

		if (kvt_lookup(ns, keys, (size_t)n, NULL) != n) { /* a LOAD's LOOKUP */
			res->err = -ENOENT;
			break;
		}
		two = pthread_create(&th, NULL, pass_main, &p[1]) == 0;
		pass_main(&p[0]);
		if (two)
			pthread_join(th, NULL);
		else
			pass_main(&p[1]);
		res->err = p[0].err ? p[0].err : p[1].err;
		res->blocks += p[0].blocks + p[1].blocks;
	}
	ns_spent = kvt_now_ns() - t0;
	link_bytes(cli, b1);
	res->gbps = (double)res->blocks * (double)kvt_ns_block_bytes(ns) * 8 / (double)ns_spent;
	for (int j = 0; j < HOLDERS; j++)
		res->link_gbps[j] = (double)(b1[j] - b0[j]) * 8 / (double)ns_spent;
	free(keys);
}

static int reader_main(const struct nb_args *a, const struct kvt_netlab *net, uint64_t bs, int in,
		       int out)
{
	int n = (int)(a->prefix_bytes / bs), rc = 1;
	struct kvt_store *store = open_store(a->prefix_bytes + (64ull << 20), bs, &node_ns);
	struct kvt_peer_client_opts co;
	struct kvt_peer_tier_opts to;
	struct kvt_peer_client *cli = NULL;
	struct kvt_peer_tier *pt = NULL;
	struct kvt_dir *dir = NULL;
	struct cmd cmd;

	kvt_peer_client_opts_init(&co, sizeof(co));
	co.node_id = "reader";
	co.secret = &secret;
	co.conns_per_peer = (unsigned)a->conns;
	co.timeout_ms = 5000;
	if (!store || kvt_peer_client_open(&co, &cli) || open_dir(net, READER, "reader", &dir))
		goto out;
	kvt_peer_tier_opts_init(&to, sizeof(to));
	to.dir = dir;
	to.client = cli;
	if (kvt_peer_tier_open(&to, &pt))
		goto out;
	if (kvt_store_add_tier(store, kvt_peer_tier_storage(pt))) {
		kvt_peer_tier_close(pt);
		goto out;
	}
	for (int i = 0; i < 500 && kvt_dir_members(dir, NULL, 0) < HOLDERS + 1; i++)
		usleep(10000);
	while (read(in, &cmd, sizeof(cmd)) == sizeof(cmd) && cmd.holders) {
		struct result res = { 0 };

		reader_fetch(n, node_ns, cli, &cmd, &res);
		if (write(out, &res, sizeof(res)) != sizeof(res))
			break;
	}
	rc = 0;
out:
	kvt_store_close(store); /* closes the peer tier it took */
	kvt_dir_close(dir);
	kvt_peer_client_close(cli);
	return rc;
}

/* A child in node's namespace: a holder (node < READER) or the reader. */
static pid_t start_child(const struct nb_args *a, const struct kvt_netlab *net, int node,
			 uint64_t bs, int *to, int *from)
{
	int p1[2], p2[2];
	pid_t pid;

	if (pipe(p1))
		return -errno;
	if (pipe(p2)) {
		close(p1[0]);
		close(p1[1]);
		return -errno;
	}
	pid = fork();
	if (pid == 0) {
		close(p1[1]);
		close(p2[0]);
		if (kvt_netlab_enter(net, node))
			_exit(1);
		_exit(node == READER ? reader_main(a, net, bs, p1[0], p2[1]) :
				       holder_main(a, net, node, bs, p1[0], p2[1]));
	}
	close(p1[0]);
	close(p2[1]);
	if (pid < 0) {
		close(p1[1]);
		close(p2[0]);
		return -errno;
	}
	*to = p1[1];
	*from = p2[0];
	return pid;
}

/* ---- iperf3 from h holders at once -------------------------------------- */

/* Gbit/s received from each of the first h holders, each iperf3 -R with
 * conns streams for secs, all at once; out[j] < 0 when one failed. */
static void iperf3_links(const struct nb_args *a, const struct kvt_netlab *net, const char *dir,
			 int h, double *out)
{
	pid_t srv[HOLDERS], cli[HOLDERS];
	char path[HOLDERS][300], port[16], streams[16], secs[16];

	snprintf(port, sizeof(port), "%d", IPERF_PORT);
	snprintf(streams, sizeof(streams), "%d", a->conns);
	snprintf(secs, sizeof(secs), "%d", a->secs < 1 ? 1 : (int)(a->secs + 0.5));
	for (int j = 0; j < h; j++) {
		char *argv[] = { "iperf3", "-s", "-1", "-B", (char *)net->addr[j], "-p", port, NULL };
		int null_fd = open("/dev/null", O_WRONLY);

		srv[j] = kvt_netlab_spawn(net, j, argv, -1, null_fd, null_fd);
		if (null_fd >= 0)
			close(null_fd);
	}
	usleep(300000);
	for (int j = 0; j < h; j++) {
		char *argv[] = { "iperf3", "-c", (char *)net->addr[j], "-p", port, "-R", "-P", streams,
				 "-t", secs, "-J", NULL };
		int fd;

		snprintf(path[j], sizeof(path[j]), "%s/iperf3-%d.json", dir, j);
		fd = open(path[j], O_WRONLY | O_CREAT | O_TRUNC, 0600);
		cli[j] = fd < 0 ? -1 : kvt_netlab_spawn(net, READER, argv, -1, fd, -1);
		if (fd >= 0)
			close(fd);
	}
	for (int j = 0; j < h; j++) {
		json_t *js;

		out[j] = -EIO;
		if (cli[j] > 0)
			waitpid(cli[j], NULL, 0);
		if (srv[j] > 0) {
			kill(srv[j], SIGTERM);
			waitpid(srv[j], NULL, 0);
		}
		js = json_load_file(path[j], 0, NULL);
		if (js) {
			json_t *bps = json_object_get(json_object_get(json_object_get(js, "end"),
								      "sum_received"), "bits_per_second");

			if (json_is_number(bps))
				out[j] = json_number_value(bps) / 1e9;
			json_decref(js);
		}
		unlink(path[j]);
	}
}

/* ---- main -------------------------------------------------------------- */

struct row {
	uint64_t bs;
	int holders;
	double kv, ip, kv_link[HOLDERS], ip_link[HOLDERS];
};

/* Measure one block size: start its holders and reader, then h = 1..3. */
static int run_size(const struct nb_args *a, const struct kvt_netlab *net, const char *dir,
		    uint64_t bs, struct row *rows)
{
	int to[HOLDERS + 1], from[HOLDERS + 1], rc = 1, started = 0;
	pid_t pid[HOLDERS + 1];
	char c;

	for (; started <= HOLDERS; started++) {
		int k = started;

		pid[k] = start_child(a, net, k, bs, &to[k], &from[k]);
		if (pid[k] < 0)
			goto out;
		if (k < READER && read(from[k], &c, 1) != 1) {
			fprintf(stderr, "kvtier-bench nodes: holder %d did not start\n", k);
			started++;
			goto out;
		}
	}
	for (int h = 1; h <= HOLDERS; h++) {
		struct row *r = &rows[h - 1];
		double kv[64], ip[64], kvl[HOLDERS][64], ipl[HOLDERS][64];

		for (int rep = 0; rep < a->reps; rep++) {
			struct cmd cmd = { .holders = h, .secs = a->secs };
			struct result res = { 0 };
			double links[HOLDERS] = { 0 };

			if (rep % 2 == 0)
				iperf3_links(a, net, dir, h, links);
			if (write(to[READER], &cmd, sizeof(cmd)) != sizeof(cmd) ||
			    read(from[READER], &res, sizeof(res)) != sizeof(res) || res.err) {
				fprintf(stderr, "kvtier-bench nodes: the reader failed: %s\n",
					kvt_strerror(res.err ? res.err : -EIO));
				goto out;
			}
			if (rep % 2 == 1)
				iperf3_links(a, net, dir, h, links);
			kv[rep] = res.gbps;
			ip[rep] = 0;
			for (int j = 0; j < h; j++) {
				kvl[j][rep] = res.link_gbps[j];
				ipl[j][rep] = links[j];
				ip[rep] += links[j] > 0 ? links[j] : 0;
			}
		}
		*r = (struct row){ .bs = bs, .holders = h, .kv = kvt_bench_median(kv, (size_t)a->reps),
				   .ip = kvt_bench_median(ip, (size_t)a->reps) };
		for (int j = 0; j < h; j++) {
			r->kv_link[j] = kvt_bench_median(kvl[j], (size_t)a->reps);
			r->ip_link[j] = kvt_bench_median(ipl[j], (size_t)a->reps);
		}
		if (!a->json)
			fprintf(stderr, "%llu B blocks, %d holders: %.2f Gbit/s, iperf3 %.2f\n",
				(unsigned long long)bs, h, r->kv, r->ip);
	}
	rc = 0;
out:
	if (started > READER) {
		struct cmd q = { 0 };

		if (write(to[READER], &q, sizeof(q)) < 0) {
			/* the reader is gone already */
		}
	}
	/* every child holds copies of the pipes of those made before it: all
	 * are closed before any is waited for */
	for (int k = 0; k < started; k++)
		close(to[k]);
	for (int k = started - 1; k >= 0; k--) {
		waitpid(pid[k], NULL, 0);
		close(from[k]);
	}
	return rc;
}

static void report(const struct nb_args *a, const struct row *rows, int n_rows)
{
	json_t *o = json_object(), *arr = json_array();

	for (int i = 0; i < n_rows; i++) {
		const struct row *r = &rows[i];
		json_t *row = json_object(), *links = json_array();
		double min_ratio = 1e9;

		for (int j = 0; j < r->holders; j++) {
			double ratio = r->ip_link[j] > 0 ? r->kv_link[j] / r->ip_link[j] : 0;

			json_array_append_new(links, json_pack("{s:i,s:f,s:f,s:f}", "holder", j,
							       "kvtier_gbps", r->kv_link[j],
							       "iperf3_gbps", r->ip_link[j], "ratio", ratio));
			if (ratio < min_ratio)
				min_ratio = ratio;
		}
		json_object_set_new(row, "block_bytes", json_integer((json_int_t)r->bs));
		json_object_set_new(row, "holders", json_integer(r->holders));
		json_object_set_new(row, "kvtier_gbps", json_real(r->kv));
		json_object_set_new(row, "iperf3_gbps", json_real(r->ip));
		json_object_set_new(row, "ratio", json_real(r->ip > 0 ? r->kv / r->ip : 0));
		json_object_set_new(row, "links", links);
		json_object_set_new(row, "min_link_ratio", json_real(min_ratio));
		json_array_append_new(arr, row);
		if (!a->json)
			printf("  %8llu B  %d holder%s  %6.2f Gbit/s  iperf3 %6.2f  ratio %.2f  "
			       "worst link %.2f\n", (unsigned long long)r->bs, r->holders,
			       r->holders > 1 ? "s" : " ", r->kv, r->ip, r->ip > 0 ? r->kv / r->ip : 0,
			       min_ratio);
	}
	json_object_set_new(o, "link", json_string("veth to a bridge, tc tbf on both ends"));
	json_object_set_new(o, "rate_mbit", json_integer((json_int_t)(a->rate / 1000000)));
	json_object_set_new(o, "reader_rate_mbit", json_integer((json_int_t)(a->reader_rate / 1000000)));
	json_object_set_new(o, "conns", json_integer(a->conns));
	json_object_set_new(o, "reps", json_integer(a->reps));
	json_object_set_new(o, "prefix_bytes", json_integer((json_int_t)a->prefix_bytes));
	json_object_set_new(o, "rows", arr);
	if (a->json) {
		json_dumpf(o, stdout, JSON_INDENT(2));
		fputc('\n', stdout);
	}
	json_decref(o);
}

int kvt_bench_nodes_main(int argc, char **argv)
{
	struct nb_args a;
	struct kvt_netlab net;
	struct kvt_redis_proc redis = { 0 };
	struct row rows[4 * HOLDERS];
	char why[256], dir[] = "/tmp/kvt-nodes.XXXXXX", log[64];
	int rc = 1, err, n_rows = 0;

	if (parse_args(argc, argv, &a)) {
		usage(stderr);
		return 2;
	}
	kvt_peer_secret_set(&secret, SECRET, strlen(SECRET));
	if (!kvt_redis_server_path() || system("command -v iperf3 >/dev/null 2>&1")) {
		fprintf(stderr, "kvtier-bench nodes: redis-server and iperf3 are needed\n");
		return 77;
	}
	err = kvt_netlab_open(&net, HOLDERS + 1, true, why, sizeof(why));
	if (err) {
		fprintf(stderr, "kvtier-bench nodes: cannot make network namespaces: %s\n", why);
		return err == -EPERM || err == -ENOENT ? 77 : 1;
	}
	for (int i = 0; i <= HOLDERS; i++) {
		err = kvt_netlab_shape(&net, i, i == READER ? a.reader_rate : a.rate, why, sizeof(why));
		if (err) {
			fprintf(stderr, "kvtier-bench nodes: cannot shape the links: %s\n", why);
			kvt_netlab_close(&net);
			return err == -ENOENT || err == -EOPNOTSUPP ? 77 : 1;
		}
	}
	if (!mkdtemp(dir) ||
	    kvt_redis_proc_start(&redis, dir, &net, KVT_NETLAB_HUB, net.hub_addr, REDIS_PORT)) {
		fprintf(stderr, "kvtier-bench nodes: redis-server did not start\n");
		goto out;
	}
	if (!a.json)
		printf("nodes: holders' links %llu Mbit/s, the reader's %llu Mbit/s, %d connections "
		       "each, medians of %d\n", (unsigned long long)(a.rate / 1000000),
		       (unsigned long long)(a.reader_rate / 1000000), a.conns, a.reps);
	for (int s = 0; s < a.n_sizes; s++, n_rows += HOLDERS)
		if (run_size(&a, &net, dir, a.sizes[s], rows + n_rows))
			goto out;
	report(&a, rows, n_rows);
	rc = 0;
out:
	kvt_redis_proc_stop(&redis);
	kvt_netlab_close(&net);
	snprintf(log, sizeof(log), "%s/redis.log", dir);
	unlink(log);
	rmdir(dir);
	return rc;
}
