/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier-bench sidecar: the daemon's protocol and copy costs as an engine sees
 * them, through libkvtier-client and a real Unix socket to a server running in
 * this process (the same code as kvtierd).
 *
 * Latency: per client, round trips of PING (the socket's floor), LOOKUP of 64
 * stored keys, SAVE of one small block (request + WAIT) and LOAD of one
 * (request + WAIT), interleaved so they share the same conditions; p50/p99
 * over all samples, and ops/s per op as clients / mean latency (the rate the
 * clients would sustain doing only that op), with 1 and 16 clients.
 *
 * Per-layer LOAD: a LOAD of --layer-blocks 2 MiB blocks waited layer by
 * layer, as an engine does before each layer's attention (and between two
 * waits it computes the layer: --layer-compute-us of spinning), once with the
 * daemon pushing completions and once with a WAIT round trip per layer
 * (KVT_CLIENT_WAITED), alternating on two connections of one process:
 * medians of each wait_layer call and of the whole LOAD.
 *
 * Throughput: SAVE and LOAD of --xfer-blocks blocks of 2 MiB (a 32-layer,
 * 8-KV-head bf16 model at 16 tokens per block) between engine memory and the
 * DRAM tier, each repetition beside a memcpy of the same bytes over the same
 * kind of buffers (engine memfd -> fresh DRAM). Figures are medians; ratios
 * are the median of each repetition's ratio to its own memcpy. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <jansson.h>

#include "bench/bench.h"
#include "kvtier/client.h"
#include "kvtier/device.h"
#include "kvtier/store.h"
#include "transport/server.h"

struct sc_args {
	int clients[8];
	int n_clients;
	int ops;
	int xfer_blocks;
	int layer_blocks, layer_loads, layer_compute_us;
	int reps;
	unsigned workers;
	uint64_t dram;
	bool json;
	bool host_copy_device;
	bool warm;  /* the DRAM tier as kvtierd keeps it for warm restarts */
};

static void usage(FILE *f)
{
	fprintf(f,
"usage: kvtier-bench sidecar [OPTIONS]\n"
"\n"
"Round trips through the sidecar protocol (PING, LOOKUP of 64 keys, SAVE and\n"
"LOAD of one block, each waited for) with 1 and 16 clients, LOADs waited layer\n"
"by layer with pushed completions and with WAIT round trips, and SAVE/LOAD\n"
"throughput of 2 MiB blocks through the host backend beside memcpy, against\n"
"an in-process server on a Unix socket. Figures are medians.\n"
"\n"
"options:\n"
"  --clients LIST     client counts to run, comma-separated (default 1,16)\n"
"  --ops N            round trips of each op per client (default 1000)\n"
"  --xfer-blocks N    2 MiB blocks per SAVE/LOAD in the throughput run (default 32)\n"
"  --layer-blocks N   2 MiB blocks (32 layers) per layer-by-layer LOAD (default 4)\n"
"  --layer-loads N    layer-by-layer LOADs per completion mode (default 200)\n"
"  --layer-compute-us N  the engine's compute per layer between two waits,\n"
"                     spun (default 100)\n"
"  --reps N           throughput repetitions, the median is reported (default 5)\n"
"  --workers N        server copy threads (default 4)\n"
"  --host-copy HOW    direct (default: the server maps the memfd and copies) or\n"
"                     device (through the device layer's host backend)\n"
"  --dram SIZE        DRAM tier capacity, prefaulted as kvtierd does (default 256M;\n"
"                     must hold the blocks)\n"
"  --warm             the DRAM tier as kvtierd keeps it by default, for warm\n"
"                     restarts: in a memfd, a header and an XXH3 per block\n"
"  --tier TIER        dram (default: this run) or ssd: end to end through a\n"
"                     real kvtierd with a working set several times its DRAM\n"
"                     tier, beside fio ('kvtier-bench sidecar --tier ssd --help')\n"
"  --json             print one JSON object instead of a table\n"
"  -h, --help         this text\n"
"\n"
"JSON: ping_p50_us, lookup_p50_us, lookup_p99_us (1 client), save_gbps,\n"
"load_gbps, memcpy_gbps, lookup_vs_ping, save_vs_memcpy, load_vs_memcpy,\n"
"layer_wait_p50_us_pushed / _waited (one wait_layer call),\n"
"layer_load_p50_us_pushed / _waited (a whole LOAD, every layer waited),\n"
"clients (the counts run) and runs[] with every figure per client count.\n"
"Targets: LOOKUP p50 <= 2x PING p50; SAVE and LOAD >= 0.8x memcpy.\n");
}

static int parse_args(int argc, char **argv, struct sc_args *a)
{
	static const struct option opts[] = {
		{ "clients", required_argument, NULL, 'c' }, { "ops", required_argument, NULL, 'o' },
		{ "xfer-blocks", required_argument, NULL, 'x' }, { "reps", required_argument, NULL, 'r' },
		{ "workers", required_argument, NULL, 'w' }, { "dram", required_argument, NULL, 'd' },
		{ "json", no_argument, NULL, 'j' }, { "help", no_argument, NULL, 'h' },
		{ "host-copy", required_argument, NULL, 'H' }, { "warm", no_argument, NULL, 'W' },
		{ "tier", required_argument, NULL, 'T' },
		{ "layer-blocks", required_argument, NULL, 'b' },
		{ "layer-loads", required_argument, NULL, 'l' },
		{ "layer-compute-us", required_argument, NULL, 'C' },
		{ NULL, 0, NULL, 0 },
	};
	int opt;

	*a = (struct sc_args){ .clients = { 1, 16 }, .n_clients = 2, .ops = 1000,
			       .xfer_blocks = 32, .layer_blocks = 4, .layer_loads = 200,
			       .layer_compute_us = 100, .reps = 5,
			       .workers = 4, .dram = 256ull << 20 };
	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'c': {
			char buf[128], *save, *tok;
			snprintf(buf, sizeof(buf), "%s", optarg);
			a->n_clients = 0;
			for (tok = strtok_r(buf, ",", &save); tok && a->n_clients < 8;
			     tok = strtok_r(NULL, ",", &save)) {
				int n = atoi(tok);
				if (n < 1 || n > 256)
					return -EINVAL;
				a->clients[a->n_clients++] = n;
			}
			if (!a->n_clients)
				return -EINVAL;
			break;
		}
		case 'o': a->ops = atoi(optarg); break;
		case 'x': a->xfer_blocks = atoi(optarg); break;
		case 'b': a->layer_blocks = atoi(optarg); break;
		case 'l': a->layer_loads = atoi(optarg); break;
		case 'C': a->layer_compute_us = atoi(optarg); break;
		case 'r': a->reps = atoi(optarg); break;
		case 'w': a->workers = (unsigned)atoi(optarg); break;
		case 'd':
			if (kvt_bench_parse_size(optarg, &a->dram))
				return -EINVAL;
			break;
		case 'j': a->json = true; break;
		case 'H':
			if (strcmp(optarg, "direct") && strcmp(optarg, "device"))
				return -EINVAL;
			a->host_copy_device = !strcmp(optarg, "device");
			break;
		case 'W': a->warm = true; break;
		case 'T': break; /* dram: this run; ssd: kvt_bench_sidecar_ssd_main */
		case 'h': usage(stdout); exit(0);
		default: return -EINVAL;
		}
	}
	if (a->ops < 1 || a->xfer_blocks < 1 || a->reps < 1 || a->workers < 1 ||
	    a->layer_blocks < 1 || a->layer_loads < 1 || a->layer_compute_us < 0 || optind < argc)
		return -EINVAL;
	return 0;
}

/* ---- the server, in this process --------------------------------------- */

struct sc_server {
	char dir[64];
	char socket[128];
	struct kvt_store *store;
	struct kvt_server *srv;
	struct kvt_dev *dev;
	pthread_t thread;
};

static void *server_main(void *arg)
{
	kvt_server_run(arg);
	return NULL;
}

static int server_start(struct sc_server *s, const struct sc_args *a)
{
	static const struct kvt_server_tenant tenant = { .name = "bench", .token = "",
							 .salt = (const uint8_t *)"bench", .salt_len = 5 };
	struct kvt_store_opts so;
	struct kvt_server_opts vo;
	int err;

	snprintf(s->dir, sizeof(s->dir), "/tmp/kvtier-bench.XXXXXX");
	if (!mkdtemp(s->dir))
		return -errno;
	snprintf(s->socket, sizeof(s->socket), "%s/kvtierd.sock", s->dir);
	kvt_store_opts_init(&so, sizeof(so));
	so.dram_bytes = a->dram;
	so.dram_warm = a->warm;
	err = kvt_store_open(&so, &s->store);
	if (err)
		return err;
	kvt_server_opts_init(&vo, sizeof(vo));
	vo.socket_path = s->socket;
	vo.store = s->store;
	vo.tenants = &tenant;
	vo.n_tenants = 1;
	vo.workers = a->workers;
	vo.prefault_dram = KVT_PREFAULT_BEFORE; /* steady state, as kvtierd reaches it */
	if (a->host_copy_device) {
		struct kvt_dev_opts d;

		kvt_dev_opts_init(&d, sizeof(d));
		d.backend = KVT_DEV_HOST;
		err = kvt_dev_open(&d, &s->dev);
		if (err)
			return err;
		vo.dev_host = s->dev;
	}
	err = kvt_server_open(&vo, &s->srv);
	if (err)
		return err;
	err = pthread_create(&s->thread, NULL, server_main, s->srv);
	return -err;
}

static void server_stop(struct sc_server *s)
{
	if (s->srv) {
		kvt_server_stop(s->srv);
		pthread_join(s->thread, NULL);
		kvt_server_close(s->srv);
	}
	kvt_dev_close(s->dev);
	kvt_store_close(s->store);
	rmdir(s->dir);
}

/* ---- one engine -------------------------------------------------------- */

struct engine {
	struct kvt_client *c;
	struct kvt_client_ns ns;
	uint8_t *kv;
	int fd;
	uint64_t bytes;
	int region;
	uint32_t pages;
};

static void small_desc(struct kvt_ns_desc *d)
{
	kvt_ns_desc_init(d, sizeof(*d));
	snprintf(d->model_id, sizeof(d->model_id), "bench/small");
	d->layout = KVT_LAYOUT_PAGED_KV;
	d->dtype = KVT_DTYPE_BF16;
	d->layers = 4;
	d->kv_heads = 2;
	d->head_dim = 64;
	d->block_tokens = 16;   /* 32 KiB blocks */
	d->tp_size = 1;
}

static void big_desc(struct kvt_ns_desc *d)
{
	small_desc(d);
	snprintf(d->model_id, sizeof(d->model_id), "bench/2mib");
	d->layers = 32;
	d->kv_heads = 8;
	d->head_dim = 128;      /* 2 x 32 x 8 x 128 x 2 B x 16 tokens = 2 MiB */
}

static int engine_open_with(struct engine *e, const char *socket, const struct kvt_ns_desc *d,
			    uint32_t pages, enum kvt_client_completions completions)
{
	struct kvt_client_opts o;
	struct kvt_client_region r = { .size = sizeof(r) };
	uint64_t page = (uint64_t)d->block_tokens * d->kv_heads * d->head_dim * 2;
	int err;

	memset(e, 0, sizeof(*e));
	kvt_client_opts_init(&o, sizeof(o));
	o.socket_path = socket;
	o.completions = completions;
	err = kvt_client_connect(&o, &e->c);
	if (!err)
		err = kvt_client_hello(e->c, d, &e->ns);
	if (err)
		return err;
	e->pages = pages;
	e->bytes = page * pages * 2 * d->layers;
	e->fd = kvt_client_memfd_create("bench-engine", e->bytes, (void **)&e->kv);
	if (e->fd < 0)
		return e->fd;
	memset(e->kv, 0x5a, e->bytes); /* touched, so copies time memory, not faults */
	r.memfd = e->fd;
	r.bytes = e->bytes;
	r.layers = d->layers;
	r.pages = pages;
	r.page_stride = page;
	r.kv_stride = page * pages;
	r.layer_stride = 2 * r.kv_stride;
	e->region = kvt_client_register(e->c, &e->ns, &r);
	return e->region < 0 ? e->region : 0;
}

static int engine_open(struct engine *e, const char *socket, const struct kvt_ns_desc *d,
		       uint32_t pages)
{
	return engine_open_with(e, socket, d, pages, KVT_CLIENT_PUSHED);
}

static void engine_close(struct engine *e)
{
	if (e->kv)
		munmap(e->kv, e->bytes);
	if (e->fd > 0)
		close(e->fd);
	kvt_client_close(e->c);
}

static void make_keys(const struct engine *e, uint64_t tag, struct kvt_key *keys, uint32_t n)
{
	uint32_t tokens[16];
	struct kvt_key parent;

	for (uint32_t i = 0; i < n; i++) {
		/* the whole tag is in the tokens: no two clients share a key */
		tokens[0] = (uint32_t)(tag >> 32);
		tokens[1] = (uint32_t)tag;
		for (int t = 2; t < 16; t++)
			tokens[t] = i * 17 + (uint32_t)t;
		kvt_client_prefix_keys(&e->ns, i ? &parent : NULL, tokens, 16, &keys[i], 1);
		parent = keys[i];
	}
}

/* ---- latency ----------------------------------------------------------- */

enum { OP_PING, OP_LOOKUP, OP_SAVE, OP_LOAD, N_OPS };
static const char *const op_names[N_OPS] = { "ping", "lookup", "save", "load" };

struct lat_client {
	pthread_t thread;
	const char *socket;
	int id, ops;
	double *us[N_OPS];
	int err;
};

static void *lat_main(void *arg)
{
	struct lat_client *lc = arg;
	struct kvt_ns_desc d;
	struct engine e;
	struct kvt_key lookup_keys[64], key;
	uint32_t page = 0;
	uint64_t ticket;
	int err;

	small_desc(&d);
	err = engine_open(&e, lc->socket, &d, 2);
	if (err)
		goto out;
	/* 64 stored keys of this client's own prefix to look up */
	make_keys(&e, 1000000 + (uint64_t)lc->id, lookup_keys, 64);
	for (uint32_t i = 0; i < 64 && !err; i++) {
		err = kvt_client_save(e.c, &e.ns, (uint32_t)e.region, i ? &lookup_keys[i - 1] : NULL,
				      &lookup_keys[i], &page, 1, &ticket);
		if (!err)
			err = kvt_client_wait(e.c, ticket, -1) == 1 ? 0 : -EIO;

	}
	for (int i = 0; i < lc->ops && !err; i++) {
		uint64_t t0 = kvt_now_ns(), t1, t2, t3, t4;
		int r;

		err = kvt_client_ping(e.c, "p", 1);
		t1 = kvt_now_ns();
		r = kvt_client_lookup(e.c, &e.ns, lookup_keys, 64, NULL);
		t2 = kvt_now_ns();
		if (!err && r != 64)
			err = r < 0 ? r : -EIO;

		/* a new block each time, so every SAVE copies */
		make_keys(&e, ((uint64_t)lc->id << 32) | (uint64_t)i, &key, 1);
		page = 0;
		if (!err)
			err = kvt_client_save(e.c, &e.ns, (uint32_t)e.region, NULL, &key, &page, 1, &ticket);
		if (!err && kvt_client_wait(e.c, ticket, -1) != 1)
			err = -EIO;
		t3 = kvt_now_ns();
		page = 1;
		if (!err)
			err = kvt_client_load(e.c, &e.ns, (uint32_t)e.region, &key, &page, 1, &ticket);
		if (!err && kvt_client_wait(e.c, ticket, -1) != 1)
			err = -EIO;
		t4 = kvt_now_ns();
		lc->us[OP_PING][i] = (double)(t1 - t0) / 1e3;
		lc->us[OP_LOOKUP][i] = (double)(t2 - t1) / 1e3;
		lc->us[OP_SAVE][i] = (double)(t3 - t2) / 1e3;
		lc->us[OP_LOAD][i] = (double)(t4 - t3) / 1e3;
		if (!err && kvt_client_remove(e.c, &e.ns, &key, 1) != 1)
			err = -EIO;
	}
	engine_close(&e);
out:
	lc->err = err;
	return NULL;
}

struct lat_result {
	int clients;
	double p50[N_OPS], p99[N_OPS], ops_per_s[N_OPS];
};

static int run_latency(const char *socket, int clients, int ops, struct lat_result *res)
{
	struct lat_client *lc = calloc((size_t)clients, sizeof(*lc));
	double *all[N_OPS], sum[N_OPS] = { 0 };
	size_t n = (size_t)clients * (size_t)ops;
	int err = 0;

	for (int o = 0; o < N_OPS; o++)
		all[o] = malloc(n * sizeof(double));
	for (int i = 0; i < clients; i++) {
		lc[i].socket = socket;
		lc[i].id = i;
		lc[i].ops = ops;
		for (int o = 0; o < N_OPS; o++)
			lc[i].us[o] = all[o] + (size_t)i * (size_t)ops;
	}
	for (int i = 0; i < clients; i++)
		pthread_create(&lc[i].thread, NULL, lat_main, &lc[i]);
	for (int i = 0; i < clients; i++) {
		pthread_join(lc[i].thread, NULL);
		if (lc[i].err && !err)
			err = lc[i].err;
	}
	res->clients = clients;
	for (int o = 0; o < N_OPS && !err; o++) {
		for (size_t i = 0; i < n; i++)
			sum[o] += all[o][i];
		/* aggregate rate of the op: clients in flight / its mean latency */
		res->ops_per_s[o] = (double)clients * (double)n / (sum[o] / 1e6);
		res->p50[o] = kvt_bench_quantile(all[o], n, 0.5);
		res->p99[o] = kvt_bench_quantile(all[o], n, 0.99);
	}
	for (int o = 0; o < N_OPS; o++)
		free(all[o]);
	free(lc);
	return err;
}

/* ---- per-layer LOAD ---------------------------------------------------- */

enum { PUSHED, WAITED, N_MODES };

struct layer_result {
	double wait_p50_us[N_MODES], load_p50_us[N_MODES];
	int layers;
};

/* One LOAD of n blocks into pages[], each layer waited for in turn and
 * then computed (compute_us spun): the wait_layer calls' durations go to
 * waits[], the whole LOAD's is returned. */
static int layer_load(struct engine *e, const struct kvt_key *keys, const uint32_t *pages,
		      uint32_t n, uint32_t layers, int compute_us, double *waits, double *whole_us)
{
	uint64_t t0 = kvt_now_ns(), ticket;
	int err = kvt_client_load(e->c, &e->ns, (uint32_t)e->region, keys, pages, n, &ticket);

	for (uint32_t l = 0; l < layers && !err; l++) {
		uint64_t w0 = kvt_now_ns(), w1;

		err = kvt_client_wait_layer(e->c, ticket, l, -1);
		w1 = kvt_now_ns();
		waits[l] = (double)(w1 - w0) / 1e3;
		while (kvt_now_ns() - w1 < (uint64_t)compute_us * 1000)
			;
	}
	if (!err && kvt_client_wait(e->c, ticket, -1) != (int)n)
		err = -EIO;
	*whole_us = (double)(kvt_now_ns() - t0) / 1e3;
	return err;
}

static int run_layers(const char *socket, const struct sc_args *a, struct layer_result *res)
{
	uint32_t n = (uint32_t)a->layer_blocks, layers, loads = (uint32_t)a->layer_loads;
	struct kvt_key *keys = calloc(n, sizeof(*keys));
	uint32_t *src = calloc(n, sizeof(*src)), *dst = calloc(n, sizeof(*dst));
	struct engine e[N_MODES];
	double *waits[N_MODES] = { NULL }, *whole[N_MODES] = { NULL };
	struct kvt_ns_desc d;
	uint64_t ticket;
	int err = keys && src && dst ? 0 : -ENOMEM;

	memset(e, 0, sizeof(e));
	big_desc(&d);
	layers = d.layers;
	for (int m = 0; m < N_MODES && !err; m++) {
		err = engine_open_with(&e[m], socket, &d, 2 * n, m == PUSHED ? KVT_CLIENT_PUSHED
								  : KVT_CLIENT_WAITED);
		waits[m] = calloc((size_t)loads * layers, sizeof(double));
		whole[m] = calloc(loads, sizeof(double));
		if (!err && (!waits[m] || !whole[m]))
			err = -ENOMEM;
	}
	if (err)
		goto out;
	make_keys(&e[0], 4242, keys, n);
	for (uint32_t i = 0; i < n; i++) {
		src[i] = i;
		dst[i] = n + i;
	}
	err = kvt_client_save(e[0].c, &e[0].ns, (uint32_t)e[0].region, NULL, keys, src, n, &ticket);
	if (!err && kvt_client_wait(e[0].c, ticket, -1) != (int)n)
		err = -EIO;
	/* one untimed LOAD each, then the modes alternate */
	for (int i = -1; i < (int)loads && !err; i++) {
		for (int m = 0; m < N_MODES && !err; m++) {
			double scratch[64], us;
			double *w = i < 0 ? scratch : waits[m] + (size_t)i * layers;

			if (i < 0 && layers > 64)
				break;
			err = layer_load(&e[m], keys, dst, n, layers, a->layer_compute_us, w, &us);
			if (i >= 0)
				whole[m][i] = us;
		}
	}
	res->layers = (int)layers;
	for (int m = 0; m < N_MODES && !err; m++) {
		res->wait_p50_us[m] = kvt_bench_median(waits[m], (size_t)loads * layers);
		res->load_p50_us[m] = kvt_bench_median(whole[m], loads);
	}
	kvt_client_remove(e[0].c, &e[0].ns, keys, n);
out:
	for (int m = 0; m < N_MODES; m++) {
		if (e[m].c)
			engine_close(&e[m]);
		free(waits[m]);
		free(whole[m]);
	}
	free(keys);
	free(src);
	free(dst);
	return err;
}

/* ---- throughput -------------------------------------------------------- */

struct xfer_result {
	double save_gbps, load_gbps, memcpy_gbps, save_ratio, load_ratio;
	uint64_t block_bytes;
};

static int run_xfer(const char *socket, const struct sc_args *a, struct xfer_result *res)
{
	uint32_t n = (uint32_t)a->xfer_blocks;
	double *save = calloc((size_t)a->reps, sizeof(double)), *load = calloc((size_t)a->reps, sizeof(double));
	double *ref = calloc((size_t)a->reps, sizeof(double)), *sr = calloc((size_t)a->reps, sizeof(double));
	double *lr = calloc((size_t)a->reps, sizeof(double));
	struct kvt_key *keys = calloc(n, sizeof(*keys));
	uint32_t *src = calloc(n, sizeof(*src)), *dst = calloc(n, sizeof(*dst));
	struct kvt_ns_desc d;
	struct engine e;
	uint8_t *dram = NULL;
	uint64_t bytes, ticket;
	int err;

	big_desc(&d);
	err = engine_open(&e, socket, &d, 2 * n);
	if (err)
		goto out;
	res->block_bytes = e.ns.block_bytes;
	bytes = (uint64_t)n * e.ns.block_bytes;
	/* the reference's destination: fresh DRAM as large as the copied bytes */
	dram = kvt_bench_alloc(bytes);
	make_keys(&e, 42, keys, n);
	for (uint32_t i = 0; i < n; i++) {
		src[i] = i;
		dst[i] = n + i;
	}
	/* one untimed round, so the DRAM tier's slots are faulted in */
	for (int rep = -1; rep < a->reps && !err; rep++) {
		uint64_t t0, t1, t2, t3;

		kvt_client_remove(e.c, &e.ns, keys, n);
		t0 = kvt_now_ns();
		memcpy(dram, e.kv, bytes);
		t1 = kvt_now_ns();
		err = kvt_client_save(e.c, &e.ns, (uint32_t)e.region, NULL, keys, src, n, &ticket);
		if (!err && kvt_client_wait(e.c, ticket, -1) != (int)n)
			err = -EIO;
		t2 = kvt_now_ns();
		if (!err)
			err = kvt_client_load(e.c, &e.ns, (uint32_t)e.region, keys, dst, n, &ticket);
		if (!err && kvt_client_wait(e.c, ticket, -1) != (int)n)
			err = -EIO;
		t3 = kvt_now_ns();
		if (rep < 0)
			continue;
		ref[rep] = (double)bytes / (double)(t1 - t0);
		save[rep] = (double)bytes / (double)(t2 - t1);
		load[rep] = (double)bytes / (double)(t3 - t2);
		sr[rep] = save[rep] / ref[rep];
		lr[rep] = load[rep] / ref[rep];
	}
	res->save_gbps = kvt_bench_median(save, (size_t)a->reps);
	res->load_gbps = kvt_bench_median(load, (size_t)a->reps);
	res->memcpy_gbps = kvt_bench_median(ref, (size_t)a->reps);
	res->save_ratio = kvt_bench_median(sr, (size_t)a->reps);
	res->load_ratio = kvt_bench_median(lr, (size_t)a->reps);
	kvt_client_remove(e.c, &e.ns, keys, n);
	kvt_bench_free(dram, bytes);
	engine_close(&e);
out:
	free(save);
	free(load);
	free(ref);
	free(sr);
	free(lr);
	free(keys);
	free(src);
	free(dst);
	return err;
}

/* ---- report ------------------------------------------------------------ */

int kvt_bench_sidecar_main(int argc, char **argv)
{
	struct sc_server s = { 0 };
	struct lat_result lat[8];
	struct xfer_result x = { 0 };
	struct layer_result lr;
	struct sc_args a;
	int err;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--tier") || !strncmp(argv[i], "--tier=", 7)) {
			const char *t = argv[i][6] ? argv[i] + 7 : i + 1 < argc ? argv[i + 1] : "";

			if (!strcmp(t, "ssd"))
				return kvt_bench_sidecar_ssd_main(argc, argv);
			if (strcmp(t, "dram")) {
				fprintf(stderr, "kvtier-bench sidecar: --tier takes dram or ssd\n");
				return 2;
			}
		}
	memset(&lr, 0, sizeof(lr));
	if (parse_args(argc, argv, &a)) {
		usage(stderr);
		return 2;
	}
	err = server_start(&s, &a);
	for (int i = 0; i < a.n_clients && !err; i++)
		err = run_latency(s.socket, a.clients[i], a.ops, &lat[i]);
	if (!err)
		err = run_layers(s.socket, &a, &lr);
	if (!err)
		err = run_xfer(s.socket, &a, &x);
	server_stop(&s);
	if (err) {
		fprintf(stderr, "kvtier-bench sidecar: %s\n", kvt_strerror(err));
		return 1;
	}

	if (a.json) {
		json_t *root = json_object(), *runs = json_array(), *cl = json_array();

		json_object_set_new(root, "bench", json_string("sidecar"));
		json_object_set_new(root, "ping_p50_us", json_real(lat[0].p50[OP_PING]));
		json_object_set_new(root, "lookup_p50_us", json_real(lat[0].p50[OP_LOOKUP]));
		json_object_set_new(root, "lookup_p99_us", json_real(lat[0].p99[OP_LOOKUP]));
		json_object_set_new(root, "lookup_vs_ping",
				    json_real(lat[0].p50[OP_LOOKUP] / lat[0].p50[OP_PING]));
		json_object_set_new(root, "save_gbps", json_real(x.save_gbps));
		json_object_set_new(root, "load_gbps", json_real(x.load_gbps));
		json_object_set_new(root, "memcpy_gbps", json_real(x.memcpy_gbps));
		json_object_set_new(root, "save_vs_memcpy", json_real(x.save_ratio));
		json_object_set_new(root, "load_vs_memcpy", json_real(x.load_ratio));
		json_object_set_new(root, "block_bytes", json_integer((json_int_t)x.block_bytes));
		json_object_set_new(root, "xfer_blocks", json_integer(a.xfer_blocks));
		json_object_set_new(root, "host_copy", json_string(a.host_copy_device ? "device" : "direct"));
		json_object_set_new(root, "warm", json_boolean(a.warm));
		json_object_set_new(root, "layer_wait_p50_us_pushed", json_real(lr.wait_p50_us[PUSHED]));
		json_object_set_new(root, "layer_wait_p50_us_waited", json_real(lr.wait_p50_us[WAITED]));
		json_object_set_new(root, "layer_load_p50_us_pushed", json_real(lr.load_p50_us[PUSHED]));
		json_object_set_new(root, "layer_load_p50_us_waited", json_real(lr.load_p50_us[WAITED]));
		json_object_set_new(root, "layer_blocks", json_integer(a.layer_blocks));
		json_object_set_new(root, "layers", json_integer(lr.layers));
		json_object_set_new(root, "layer_compute_us", json_integer(a.layer_compute_us));
		for (int i = 0; i < a.n_clients; i++) {
			json_t *r = json_object();
			char key[48];

			json_array_append_new(cl, json_integer(lat[i].clients));
			json_object_set_new(r, "clients", json_integer(lat[i].clients));
			for (int o = 0; o < N_OPS; o++) {
				snprintf(key, sizeof(key), "%s_p50_us", op_names[o]);
				json_object_set_new(r, key, json_real(lat[i].p50[o]));
				snprintf(key, sizeof(key), "%s_p99_us", op_names[o]);
				json_object_set_new(r, key, json_real(lat[i].p99[o]));
				snprintf(key, sizeof(key), "%s_ops_per_s", op_names[o]);
				json_object_set_new(r, key, json_real(lat[i].ops_per_s[o]));
			}
			json_array_append_new(runs, r);
		}
		json_object_set_new(root, "clients", cl);
		json_object_set_new(root, "runs", runs);
		json_dumpf(root, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(root);
		return 0;
	}

	printf("sidecar round trips over a Unix socket, %d per op per client "
	       "(p50 / p99 in us, ops/s)\n", a.ops);
	printf("%8s %-7s %10s %10s %12s\n", "clients", "op", "p50", "p99", "ops/s");
	for (int i = 0; i < a.n_clients; i++)
		for (int o = 0; o < N_OPS; o++)
			printf("%8d %-7s %10.1f %10.1f %12.0f\n", lat[i].clients, op_names[o],
			       lat[i].p50[o], lat[i].p99[o], lat[i].ops_per_s[o]);
	printf("LOOKUP(64 keys) p50 / PING p50 = %.2f with %d client(s) (target <= 2)\n\n",
	       lat[0].p50[OP_LOOKUP] / lat[0].p50[OP_PING], lat[0].clients);
	printf("LOAD of %d blocks waited layer by layer (%d layers, %d us of compute after each), "
	       "median of %d per mode (us)\n", a.layer_blocks, lr.layers, a.layer_compute_us,
	       a.layer_loads);
	printf("%10s %14s %14s\n", "", "wait_layer", "whole LOAD");
	printf("%10s %14.1f %14.1f\n", "pushed", lr.wait_p50_us[PUSHED], lr.load_p50_us[PUSHED]);
	printf("%10s %14.1f %14.1f\n", "WAIT", lr.wait_p50_us[WAITED], lr.load_p50_us[WAITED]);
	printf("pushed / WAIT: wait_layer %.3fx, whole LOAD %.2fx\n\n",
	       lr.wait_p50_us[PUSHED] / lr.wait_p50_us[WAITED],
	       lr.load_p50_us[PUSHED] / lr.load_p50_us[WAITED]);
	printf("throughput, %d blocks of %llu KiB per op, median of %d, %s copies%s (GB/s)\n",
	       a.xfer_blocks, (unsigned long long)(x.block_bytes >> 10), a.reps,
	       a.host_copy_device ? "device-layer" : "direct", a.warm ? ", warm DRAM tier" : "");
	printf("  memcpy %.2f   save %.2f (%.2fx)   load %.2f (%.2fx)   (target >= 0.8x)\n",
	       x.memcpy_gbps, x.save_gbps, x.save_ratio, x.load_gbps, x.load_ratio);
	return 0;
}
