/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier-bench sidecar --tier ssd: what an engine sees end to end when its
 * working set outgrows the DRAM tier. A real kvtierd (a child process, on a
 * real Unix socket, its SSD tier in --dir) is handed a working set several
 * times its DRAM tier by one engine (SAVE requests of --xfer-blocks blocks,
 * each waited for), which then loads back the blocks that went down to SSD.
 * Beside it, in the same run and on the same file system, fio reads and
 * writes the same bytes sequentially at queue depth 32 with the same block
 * size and the same kind of memory (explicit huge pages for both where
 * enough are reserved, else 4 KiB pages for both: kvtierd --no-huge-pages).
 *
 * SAVE is timed from the moment the engine has handed over as many bytes as
 * the DRAM tier holds (from then on every SAVE waits for demotion to SSD) to
 * its last acknowledgement; LOAD over the blocks that LOOKUP reported on SSD
 * (which ones is the eviction policy's choice), in requests of as many. Ratios are medians of each repetition's ratio to its own fio run;
 * who goes first alternates per repetition. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "bench/bench.h"
#include "bench/bench_sidecar_ssd.h"
#include "kvtier/client.h"

#define MAX_REPS 32
#define MAX_ENGINES 8

static void usage(FILE *f)
{
	fprintf(f,
"usage: kvtier-bench sidecar --tier ssd [OPTIONS]\n"
"\n"
"End to end through a real kvtierd with an SSD tier: one engine SAVEs a\n"
"working set several times the DRAM tier and LOADs back the blocks that went\n"
"down to SSD, beside fio reading and writing the same bytes (sequential,\n"
"queue depth 32, same block size, memory and file system) in the same run.\n"
"\n"
"options:\n"
"  --dir DIR          file system under test (default .); the daemon's data\n"
"                     and fio's file go in a directory made there and removed;\n"
"                     repeated (at most 16): a device each, the daemon's SSD\n"
"                     tier over all (kvtierd --ssd-dir), fio on each in turn\n"
"                     and its rates summed (the reference), a row per device\n"
"                     in the JSON (runs[].devices)\n"
"  --dram SIZE        the daemon's DRAM tier (default 512M)\n"
"  --working-set SIZE bytes the engine saves (default 4 x --dram)\n"
"  --layers N         model layers; a block is 64 KiB a layer (8 KV heads,\n"
"                     head_dim 128, bf16, 16 tokens): default 32, 2 MiB blocks\n"
"  --xfer-blocks N    blocks per SAVE and LOAD request (default 32)\n"
"  --workers N        the daemon's copy threads (default 4)\n"
"  --engines N        engines at once (default 1, at most 8), each on its own\n"
"                     connection with its own prefix and an N-th of the\n"
"                     working set; they save together, then load together\n"
"  --ssd-codec CODEC  the daemon's SSD codec (kvtierd --ssd-codec); the\n"
"                     engine's K/V are then bf16 values of a normal, which\n"
"                     codecs for bf16 shrink, instead of bytes none does\n"
"  --reps N           repetitions, each with a fresh daemon (default 3)\n"
"  --pages KIND       huge (the daemon's DRAM tier, the engines' memory and\n"
"                     fio's buffers in explicit huge pages), 4k (all in\n"
"                     4 KiB pages), auto\n"
"                     (default: huge when enough are reserved)\n"
"  --kvtierd PATH     the daemon (default: $KVTIERD, else beside this program\n"
"                     or in the build tree's app/)\n"
"  --json             print one JSON object\n"
"  -h, --help         this text\n"
"\n"
"JSON: save_gbps, load_gbps, fio_read_gbps, fio_write_gbps (no sync),\n"
"fio_write_sync_gbps (fdatasync every --xfer-blocks writes, the demoter's\n"
"group commit), load_vs_fio, save_vs_fio, save_vs_fio_sync, load_rest_gbps\n"
"and load_rest_vs_fio (the LOADs after each engine's first, which runs while\n"
"the daemon still writes back what the SAVEs left in DRAM), blocks_from_ssd,\n"
"engines, and runs[]\n"
"per repetition; ssd_stored_ratio (bytes written to SSD before / after the\n"
"codec, from the daemon's STATS). With several engines, LOAD and SAVE are\n"
"their sums: bytes over the time at least one request was in flight.\n"
"GB = 1e9 B. Targets: LOAD >= 0.8x fio read,\n"
"SAVE >= 0.7x fio write.\n");
}

static int parse_args(int argc, char **argv, struct e2e_args *a)
{
	static const struct option opts[] = {
		{ "tier", required_argument, NULL, 'T' }, { "dir", required_argument, NULL, 'D' },
		{ "dram", required_argument, NULL, 'd' }, { "working-set", required_argument, NULL, 'W' },
		{ "layers", required_argument, NULL, 'L' }, { "xfer-blocks", required_argument, NULL, 'x' },
		{ "workers", required_argument, NULL, 'w' }, { "reps", required_argument, NULL, 'r' },
		{ "pages", required_argument, NULL, 'p' }, { "kvtierd", required_argument, NULL, 'k' },
		{ "json", no_argument, NULL, 'j' }, { "help", no_argument, NULL, 'h' },
		{ "ssd-codec", required_argument, NULL, 'c' },
		{ "engines", required_argument, NULL, 'e' }, { NULL, 0, NULL, 0 },
	};
	int opt;

	*a = (struct e2e_args){ .dir = ".", .dram = 512ull << 20, .layers = 32, .xfer = 32,
				.workers = 4, .reps = 3, .engines = 1 };
	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'T':
			if (strcmp(optarg, "ssd"))
				return -EINVAL;
			break;
		case 'D':
			if (a->n_dirs == E2E_MAX_DEVS)
				return -EINVAL;
			a->dirs[a->n_dirs++] = a->dir = optarg;
			break;
		case 'd':
			if (kvt_bench_parse_size(optarg, &a->dram))
				return -EINVAL;
			break;
		case 'W':
			if (kvt_bench_parse_size(optarg, &a->ws))
				return -EINVAL;
			break;
		case 'L': a->layers = (uint32_t)atoi(optarg); break;
		case 'x': a->xfer = (uint32_t)atoi(optarg); break;
		case 'w': a->workers = (uint32_t)atoi(optarg); break;
		case 'r': a->reps = atoi(optarg); break;
		case 'p':
			if (!strcmp(optarg, "auto"))
				a->pages = 0;
			else if (!strcmp(optarg, "huge"))
				a->pages = 1;
			else if (!strcmp(optarg, "4k"))
				a->pages = 2;
			else
				return -EINVAL;
			break;
		case 'k': a->kvtierd = optarg; break;
		case 'c': a->codec = optarg; break;
		case 'e': a->engines = (uint32_t)atoi(optarg); break;
		case 'j': a->json = true; break;
		case 'h': usage(stdout); exit(0);
		default: return -EINVAL;
		}
	}
	if (!a->n_dirs)
		a->dirs[a->n_dirs++] = a->dir;
	if (!a->ws)
		a->ws = 4 * a->dram;
	if (a->layers < 1 || a->layers > 1024 || a->xfer < 1 || a->xfer > 4096 || a->workers < 1 ||
	    a->reps < 1 || a->reps > MAX_REPS || a->engines < 1 || a->engines > MAX_ENGINES ||
	    a->dram < (16ull << 20) || a->ws < 2 * a->dram ||
	    optind < argc)
		return -EINVAL;
	return 0;
}

/* ---- the daemon --------------------------------------------------------- */

struct daemon {
	pid_t pid;
	char dir[4200], socket[4300], log[4300];
	char sockdir[64];         /* short, under /tmp: a socket's path holds 108 bytes */
};

static int daemon_start(struct daemon *d, const char *bin, char (*tops)[4096],
			const struct e2e_args *a, bool huge)
{
	char dram[32], ssd[32], workers[16], data[4400], devs[E2E_MAX_DEVS][4200];
	/* room for the working set, and the segments reclaim keeps partly live */
	uint64_t ssd_bytes = a->ws + a->ws / 2 + (256ull << 20);
	const char *top = tops[0], *argv[32 + 2 * E2E_MAX_DEVS];
	int n = 0;

	snprintf(d->dir, sizeof(d->dir), "%.4000s/daemon", top);
	snprintf(d->sockdir, sizeof(d->sockdir), "/tmp/kvtier-bench.XXXXXX");
	if (!mkdtemp(d->sockdir)) {
		d->sockdir[0] = '\0';
		return -errno;
	}
	snprintf(d->socket, sizeof(d->socket), "%s/kvtierd.sock", d->sockdir);
	snprintf(d->log, sizeof(d->log), "%.4000s/kvtierd.log", top);
	snprintf(data, sizeof(data), "%s/data", d->dir);
	if (mkdir(d->dir, 0755))
		return -errno;
	snprintf(dram, sizeof(dram), "%lluM", (unsigned long long)(a->dram >> 20));
	snprintf(ssd, sizeof(ssd), "%lluM", (unsigned long long)(ssd_bytes >> 20));
	snprintf(workers, sizeof(workers), "%u", a->workers);
	argv[n++] = bin;
	argv[n++] = "--socket";
	argv[n++] = d->socket;
	argv[n++] = "--data-dir";
	argv[n++] = data;
	argv[n++] = "--dram";
	argv[n++] = dram;
	argv[n++] = "--ssd";
	argv[n++] = ssd;
	/* several devices: an n-th of the tier on each */
	for (unsigned k = 0; a->n_dirs > 1 && k < a->n_dirs; k++) {
		snprintf(devs[k], sizeof(devs[k]), "%.4000s/ssd", tops[k]);
		if (mkdir(devs[k], 0755))
			return -errno;
		snprintf(devs[k] + strlen(devs[k]), sizeof(devs[k]) - strlen(devs[k]), ":%lluM",
			 (unsigned long long)((ssd_bytes / a->n_dirs >> 20) + 64));
		argv[n++] = "--ssd-dir";
		argv[n++] = devs[k];
	}
	argv[n++] = "--workers";
	argv[n++] = workers;
	argv[n++] = "--metrics";
	argv[n++] = "off";
	argv[n++] = "--no-gpu";
	if (!huge)
		argv[n++] = "--no-huge-pages";
	if (a->codec) {
		argv[n++] = "--ssd-codec";
		argv[n++] = a->codec;
	}
	argv[n] = NULL;

	d->pid = fork();
	if (d->pid < 0)
		return -errno;
	if (d->pid == 0) {
		int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	for (int i = 0; i < 1500; i++) {
		struct kvt_client_opts o;
		struct kvt_client *c;
		int status;

		kvt_client_opts_init(&o, sizeof(o));
		o.socket_path = d->socket;
		o.token = "";
		if (kvt_client_connect(&o, &c) == 0) {
			kvt_client_close(c);
			return 0;
		}
		if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
			fprintf(stderr, "kvtier-bench: kvtierd exited (status %d), see %s\n", status,
				d->log);
			d->pid = 0;
			return -ECHILD;
		}
		usleep(20000);
	}
	fprintf(stderr, "kvtier-bench: kvtierd did not come up, see %s\n", d->log);
	return -ETIMEDOUT;
}

static void daemon_stop(struct daemon *d)
{
	int status;

	if (d->pid > 0) {
		kill(d->pid, SIGTERM);
		waitpid(d->pid, &status, 0);
	}
	d->pid = 0;
	if (d->sockdir[0]) {
		unlink(d->socket);
		rmdir(d->sockdir);
		d->sockdir[0] = '\0';
	}
}

/* ---- the engine --------------------------------------------------------- */

struct engine {
	struct kvt_client *c;
	struct kvt_client_ns ns;
	uint8_t *kv;
	int fd, region;
	uint64_t bytes, page;
	uint32_t pages, layers;
};

/* An engine page: 16 tokens x 8 KV heads x head_dim 128 x bf16 (a block is
 * one page of each layer's K and V: 64 KiB a layer). */
#define ENGINE_PAGE_BYTES (16ull * 8 * 128 * 2)

/* Bytes of one engine's memory: 2 x xfer pages of each layer's K and V. */
static uint64_t engine_bytes(const struct e2e_args *a)
{
	return 2ull * a->xfer * 2 * a->layers * ENGINE_PAGE_BYTES;
}

/* The engine's memory: in explicit huge pages where the daemon's DRAM tier
 * and fio's buffers are (like for like: a block read straight into it is
 * one request to the device, as fio's 2 MiB reads are), else 4 KiB. */
static int engine_open(struct engine *e, const char *socket, uint32_t layers, uint32_t pages,
		       bool bf16, bool huge)
{
	struct kvt_client_opts o;
	struct kvt_client_region r = { .size = sizeof(r) };
	struct kvt_ns_desc d;
	int err;

	memset(e, 0, sizeof(*e));
	e->fd = -1;
	kvt_ns_desc_init(&d, sizeof(d));
	snprintf(d.model_id, sizeof(d.model_id), "bench/e2e-%u", layers);
	d.layout = KVT_LAYOUT_PAGED_KV;
	d.dtype = KVT_DTYPE_BF16;
	d.layers = layers;
	d.kv_heads = 8;
	d.head_dim = 128;
	d.block_tokens = 16;
	d.tp_size = 1;
	kvt_client_opts_init(&o, sizeof(o));
	o.socket_path = socket;
	o.token = "";
	err = kvt_client_connect(&o, &e->c);
	if (!err)
		err = kvt_client_hello(e->c, &d, &e->ns);
	if (err)
		return err;
	e->layers = layers;
	e->pages = pages;
	e->page = ENGINE_PAGE_BYTES;
	e->bytes = e->page * pages * 2 * layers;
	if (huge) {
		e->bytes = (e->bytes + KVT_CLIENT_HUGE_PAGE_BYTES - 1) /
			   KVT_CLIENT_HUGE_PAGE_BYTES * KVT_CLIENT_HUGE_PAGE_BYTES;
		e->fd = kvt_client_memfd_create_huge("bench-e2e", e->bytes, (void **)&e->kv);
	} else {
		e->fd = kvt_client_memfd_create("bench-e2e", e->bytes, (void **)&e->kv);
	}
	if (e->fd < 0)
		return e->fd;
	if (bf16) {
		uint64_t rng = 0x9e3779b97f4a7c15ULL;

		kvt_bench_fill_bf16_normal((uint16_t *)(void *)e->kv, e->bytes / 2, &rng);
	} else {
		for (uint64_t i = 0; i < e->bytes / 8; i++) /* no codec would shrink it */
			((uint64_t *)e->kv)[i] = (i + 1) * 0x9e3779b97f4a7c15ULL;
	}
	r.memfd = e->fd;
	r.bytes = e->bytes;
	r.layers = layers;
	r.pages = pages;
	r.page_stride = e->page;
	r.kv_stride = e->page * pages;
	r.layer_stride = 2 * r.kv_stride;
	e->region = kvt_client_register(e->c, &e->ns, &r);
	return e->region < 0 ? e->region : 0;
}

static void engine_close(struct engine *e)
{
	if (e->kv)
		munmap(e->kv, e->bytes);
	if (e->fd >= 0)
		close(e->fd);
	kvt_client_close(e->c);
}

/* Whether engine page `got` holds what page `want` holds, in every layer. */
static bool page_equal(const struct engine *e, uint32_t got, uint32_t want)
{
	uint64_t kv = e->page * e->pages;

	for (uint32_t l = 0; l < e->layers; l++)
		for (int h = 0; h < 2; h++) {
			const uint8_t *base = e->kv + (uint64_t)l * 2 * kv + (uint64_t)h * kv;
			if (memcmp(base + (uint64_t)got * e->page, base + (uint64_t)want * e->page,
				   e->page))
				return false;
		}
	return true;
}

/* Bytes the daemon wrote to SSD before / after its codec (0: none written). */
static double stored_ratio(struct kvt_client *c)
{
	char *text = NULL;
	json_t *root, *store;
	double raw = 0, stored = 0;

	if (kvt_client_stats(c, &text))
		return 0;
	root = json_loads(text, 0, NULL);
	free(text);
	store = json_object_get(root, "store");
	raw = json_number_value(json_object_get(store, "ssd_write_raw_bytes"));
	stored = json_number_value(json_object_get(store, "ssd_write_stored_bytes"));
	json_decref(root);
	return stored > 0 ? raw / stored : 0;
}

/* One engine of a repetition: its own connection, region and prefix (keys
 * of its own tokens), saving its share of the working set and loading back
 * what of it went down to SSD. Each LOAD request's interval is kept: the
 * engines' LOAD rate is their bytes over the time at least one request was
 * in flight, so the byte checks between requests are not counted. */
struct e2e_engine {
	const struct e2e_args *a;
	const char *socket;
	struct e2e_shared *sh;
	uint32_t index;
	struct engine e;
	bool huge;                    /* its memory in explicit huge pages */
	uint64_t n, k;                /* blocks saved, blocks found on SSD */
	struct kvt_key *keys, *ssd_keys;
	uint64_t *ssd_idx, (*spans)[2];
	uint8_t *tiers;
	uint32_t *save_pages, *load_pages;
	int err;
};

/* What the engines of a repetition share: the bytes saved so far (SAVE is
 * timed from when they reach the DRAM tier's size) and that moment. */
struct e2e_shared {
	uint64_t saved, t_pressure, pressured_from;
	pthread_mutex_t lock;
};

static int engine_setup(struct e2e_engine *g)
{
	const struct e2e_args *a = g->a;
	uint32_t x = a->xfer;
	uint64_t block;
	int err;

	err = engine_open(&g->e, g->socket, a->layers, 2 * x, a->codec != NULL, g->huge);
	if (err)
		return err;
	block = g->e.ns.block_bytes;
	g->n = a->ws / block / a->engines;
	g->keys = calloc(g->n, sizeof(*g->keys));
	g->tiers = calloc(g->n, 1);
	g->ssd_keys = calloc(g->n, sizeof(*g->ssd_keys));
	g->ssd_idx = calloc(g->n, sizeof(*g->ssd_idx));
	g->spans = calloc(g->n / x + 2, sizeof(*g->spans));
	g->save_pages = calloc(x, sizeof(*g->save_pages));
	g->load_pages = calloc(x, sizeof(*g->load_pages));
	if (!g->keys || !g->tiers || !g->ssd_keys || !g->ssd_idx || !g->spans || !g->save_pages ||
	    !g->load_pages)
		return -ENOMEM;
	for (uint32_t j = 0; j < x; j++) {
		g->save_pages[j] = j;
		g->load_pages[j] = x + j;
	}
	for (uint64_t i = 0; i < g->n; i++) {
		uint32_t tokens[16];

		/* each engine its own prefix: tokens no other engine has */
		for (int t = 0; t < 16; t++)
			tokens[t] = (uint32_t)((i * 16 + (uint64_t)t) * a->engines + g->index);
		kvt_client_prefix_keys(&g->e.ns, i ? &g->keys[i - 1] : NULL, tokens, 16, &g->keys[i],
				       1);
	}
	return 0;
}

static void engine_teardown(struct e2e_engine *g)
{
	engine_close(&g->e);
	free(g->keys);
	free(g->ssd_keys);
	free(g->ssd_idx);
	free(g->spans);
	free(g->tiers);
	free(g->save_pages);
	free(g->load_pages);
}

/* SAVE the engine's blocks, x at a time; block i comes from page i % x. */
static void *engine_save(void *arg)
{
	struct e2e_engine *g = arg;
	uint32_t x = g->a->xfer;
	uint64_t block = g->e.ns.block_bytes, ticket;
	int r;

	for (uint64_t i = 0; i < g->n && !g->err; i += x) {
		uint32_t m = g->n - i < x ? (uint32_t)(g->n - i) : x;

		pthread_mutex_lock(&g->sh->lock);
		if (!g->sh->t_pressure && g->sh->saved >= g->a->dram) {
			g->sh->t_pressure = kvt_now_ns();
			g->sh->pressured_from = g->sh->saved;
		}
		pthread_mutex_unlock(&g->sh->lock);
		g->err = kvt_client_save(g->e.c, &g->e.ns, (uint32_t)g->e.region,
					 i ? &g->keys[i - 1] : NULL, &g->keys[i], g->save_pages, m,
					 &ticket);
		if (!g->err && (r = kvt_client_wait(g->e.c, ticket, -1)) != (int)m)
			g->err = r < 0 ? r : -EIO;
		pthread_mutex_lock(&g->sh->lock);
		g->sh->saved += (uint64_t)m * block;
		pthread_mutex_unlock(&g->sh->lock);
	}
	return NULL;
}

/* Which of the engine's blocks are on SSD: the policy (tail-first) decides
 * which went. */
static int engine_lookup(struct e2e_engine *g)
{
	int r = kvt_client_lookup(g->e.c, &g->e.ns, g->keys, g->n, g->tiers);

	if (r != (int)g->n) {
		fprintf(stderr, "kvtier-bench: %d of %llu saved blocks found\n", r,
			(unsigned long long)g->n);
		return r < 0 ? r : -EIO;
	}
	g->k = 0;
	for (uint64_t i = 0; i < g->n; i++)
		if (g->tiers[i] == KVT_TIER_SSD) {
			g->ssd_idx[g->k] = i;
			g->ssd_keys[g->k++] = g->keys[i];
		}
	return 0;
}

/* LOAD them back, x at a time, checking the bytes of every loaded block
 * between requests; each request's interval goes to spans. */
static void *engine_load(void *arg)
{
	struct e2e_engine *g = arg;
	uint32_t x = g->a->xfer;
	uint64_t ticket, s = 0;
	int r;

	for (uint64_t i = 0; i < g->k && !g->err; i += x, s++) {
		uint32_t m = g->k - i < x ? (uint32_t)(g->k - i) : x;

		g->spans[s][0] = kvt_now_ns();
		g->err = kvt_client_load(g->e.c, &g->e.ns, (uint32_t)g->e.region, &g->ssd_keys[i],
					 g->load_pages, m, &ticket);
		if (!g->err && (r = kvt_client_wait(g->e.c, ticket, -1)) != (int)m)
			g->err = r < 0 ? r : -EIO;
		g->spans[s][1] = kvt_now_ns();
		for (uint32_t j = 0; j < m && !g->err; j++)
			if (!page_equal(&g->e, x + j, (uint32_t)(g->ssd_idx[i + j] % x))) {
				fprintf(stderr, "kvtier-bench: engine %u block %llu loaded wrong bytes\n",
					g->index, (unsigned long long)g->ssd_idx[i + j]);
				g->err = -EIO;
			}
	}
	return NULL;
}

static int cmp_span(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;

	return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* The time covered by the union of n intervals (sorted here). */
static uint64_t spans_covered(uint64_t (*sp)[2], size_t n)
{
	uint64_t total = 0, from = 0, to = 0;

	qsort(sp, n, sizeof(*sp), cmp_span);
	for (size_t i = 0; i < n; i++) {
		if (i && sp[i][0] <= to) {
			to = sp[i][1] > to ? sp[i][1] : to;
			continue;
		}
		total += to - from;
		from = sp[i][0];
		to = sp[i][1];
	}
	return total + (to - from);
}

/* Run fn on every engine, one thread each (the calling thread for one). */
static int engines_run(struct e2e_engine *g, uint32_t n, void *(*fn)(void *))
{
	pthread_t th[MAX_ENGINES];
	uint32_t started = 0;
	int err = 0;

	if (n == 1) {
		fn(&g[0]);
		return g[0].err;
	}
	for (; started < n; started++)
		if (pthread_create(&th[started], NULL, fn, &g[started])) {
			err = -EAGAIN;
			break;
		}
	for (uint32_t i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	for (uint32_t i = 0; i < n && !err; i++)
		err = g[i].err;
	return err;
}

/* One repetition's kvtierd side: the engines save the working set, then
 * load back what went down to SSD, all at once, checking the bytes of
 * every loaded block (outside the timing). */
static int run_daemon(const struct e2e_args *a, const char *bin, char (*tops)[4096], bool huge,
		      struct e2e_rep *out)
{
	struct daemon d = { 0 };
	struct e2e_engine g[MAX_ENGINES];
	struct e2e_shared sh = { .lock = PTHREAD_MUTEX_INITIALIZER };
	uint64_t (*all)[2] = NULL, (*rest)[2] = NULL;
	uint64_t block = 0, t0, t_end, k = 0, k_rest = 0;
	size_t n_all = 0, n_rest = 0;
	uint32_t ne = a->engines;
	int err;

	memset(g, 0, sizeof(g));
	for (uint32_t i = 0; i < ne; i++)
		g[i] = (struct e2e_engine){ .a = a, .socket = d.socket, .sh = &sh, .index = i,
					    .huge = huge, .e = { .fd = -1 } };
	err = daemon_start(&d, bin, tops, a, huge);
	for (uint32_t i = 0; i < ne && !err; i++)
		err = engine_setup(&g[i]);
	if (err)
		goto out;
	block = g[0].e.ns.block_bytes;

	t0 = kvt_now_ns();
	err = engines_run(g, ne, engine_save);
	t_end = kvt_now_ns();
	if (err)
		goto out;
	if (!sh.t_pressure) {
		sh.t_pressure = t0;
		sh.pressured_from = 0;
	}
	out->save_gbps = (double)(sh.saved - sh.pressured_from) / (double)(t_end - sh.t_pressure);

	for (uint32_t i = 0; i < ne && !err; i++)
		err = engine_lookup(&g[i]);
	if (!err)
		err = engines_run(g, ne, engine_load);
	if (err)
		goto out;

	/* every engine's requests, and those after each engine's first */
	all = calloc(a->ws / block / a->xfer + 2 * ne, sizeof(*all));
	rest = calloc(a->ws / block / a->xfer + 2 * ne, sizeof(*rest));
	if (!all || !rest) {
		err = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < ne; i++) {
		uint64_t reqs = (g[i].k + a->xfer - 1) / a->xfer;

		for (uint64_t s = 0; s < reqs; s++) {
			memcpy(all[n_all++], g[i].spans[s], sizeof(*all));
			if (s)
				memcpy(rest[n_rest++], g[i].spans[s], sizeof(*rest));
		}
		k += g[i].k;
		k_rest += g[i].k > a->xfer ? g[i].k - a->xfer : 0;
	}
	out->blocks_from_ssd = k;
	if (k)
		out->load_gbps = (double)(k * block) / (double)spans_covered(all, n_all);
	if (k_rest)
		out->load_rest_gbps = (double)(k_rest * block) / (double)spans_covered(rest, n_rest);
	out->ssd_ratio = stored_ratio(g[0].e.c);
	kvt_e2e_dev_stats(g[0].e.c, a, out);
out:
	if (err)
		fprintf(stderr, "kvtier-bench: sidecar --tier ssd: %s (daemon log: %s)\n",
			kvt_strerror(err), d.log);
	for (uint32_t i = 0; i < ne; i++)
		engine_teardown(&g[i]);
	daemon_stop(&d);
	free(all);
	free(rest);
	return err;
}

static void rm_tree(const char *dir)
{
	char cmd[8400];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		fprintf(stderr, "kvtier-bench: cannot remove %s\n", dir);
}

int kvt_bench_sidecar_ssd_main(int argc, char **argv)
{
	struct e2e_args a;
	struct e2e_rep reps[MAX_REPS] = { 0 };
	double v[11][MAX_REPS];
	char bin[PATH_MAX + 32], tops[E2E_MAX_DEVS][4096];
	uint64_t block, fio_bytes;
	bool huge;
	int err = 0;

	if (parse_args(argc, argv, &a)) {
		usage(stderr);
		return 2;
	}
	if (kvt_bench_find_kvtierd(a.kvtierd, bin, sizeof(bin))) {
		fprintf(stderr, "kvtier-bench: kvtierd not found (--kvtierd PATH)\n");
		return 2;
	}
	if (!kvt_bench_have_fio()) {
		fprintf(stderr, "kvtier-bench: sidecar --tier ssd needs fio, its reference\n");
		return 1;
	}
	block = (uint64_t)a.layers * (64u << 10);
	/* fio's bytes: as many as the DRAM tier cannot hold, the blocks LOAD
	 * brings back from SSD (what the daemon moved is recounted per rep) */
	fio_bytes = (a.ws - a.dram) / block * block;
	huge = a.pages == 1 ||
	       (a.pages == 0 && kvt_bench_huge_free() >= a.dram + 32 * block + (64ull << 20) +
				a.engines * engine_bytes(&a));
	for (unsigned k = 0; k < a.n_dirs; k++)
		snprintf(tops[k], sizeof(tops[k]), "%s/kvtier-bench-e2e.%d", a.dirs[k], (int)getpid());
	for (int i = 0; i < a.reps && !err; i++) {
		for (unsigned k = 0; k < a.n_dirs && !err; k++)
			err = mkdir(tops[k], 0755) ? -errno : 0;
		if (!err && (i & 1))
			err = kvt_e2e_fio(&a, tops, huge, block, fio_bytes, &reps[i]);
		if (!err)
			err = run_daemon(&a, bin, tops, huge, &reps[i]);
		if (!err && !(i & 1))
			err = kvt_e2e_fio(&a, tops, huge, block, fio_bytes, &reps[i]);
		if (err)
			fprintf(stderr, "kvtier-bench: the kvtierd log is kept: %s/kvtierd.log\n",
				tops[0]);
		else
			for (unsigned k = 0; k < a.n_dirs; k++)
				rm_tree(tops[k]);
	}
	if (err)
		return 1;
	for (int i = 0; i < a.reps; i++) {
		struct e2e_rep *r = &reps[i];

		v[0][i] = r->save_gbps;
		v[1][i] = r->load_gbps;
		v[2][i] = r->fio_read_gbps;
		v[3][i] = r->fio_write_gbps;
		v[4][i] = r->fio_write_sync_gbps;
		v[5][i] = r->fio_read_gbps > 0 ? r->load_gbps / r->fio_read_gbps : 0;
		v[6][i] = r->fio_write_gbps > 0 ? r->save_gbps / r->fio_write_gbps : 0;
		v[7][i] = r->fio_write_sync_gbps > 0 ? r->save_gbps / r->fio_write_sync_gbps : 0;
		v[8][i] = r->load_rest_gbps;
		v[9][i] = r->fio_read_gbps > 0 ? r->load_rest_gbps / r->fio_read_gbps : 0;
		v[10][i] = r->ssd_ratio;
	}
	if (a.json) {
		json_t *root = json_object(), *runs = json_array();
		static const char *const names[11] = {
			"save_gbps", "load_gbps", "fio_read_gbps", "fio_write_gbps",
			"fio_write_sync_gbps", "load_vs_fio", "save_vs_fio", "save_vs_fio_sync",
			"load_rest_gbps", "load_rest_vs_fio", "ssd_stored_ratio" };

		for (int i = 0; i < a.reps; i++) {
			json_t *r = json_object();

			for (int f = 0; f < 11; f++)
				json_object_set_new(r, names[f], json_real(v[f][i]));
			json_object_set_new(r, "blocks_from_ssd",
					    json_integer((json_int_t)reps[i].blocks_from_ssd));
			if (a.n_dirs > 1)
				json_object_set_new(r, "devices", kvt_e2e_devices_json(&a, &reps[i]));
			json_array_append_new(runs, r);
		}
		json_object_set_new(root, "bench", json_string("sidecar-ssd"));
		for (int f = 0; f < 11; f++)
			json_object_set_new(root, names[f],
					    json_real(kvt_bench_median(v[f], (size_t)a.reps)));
		json_object_set_new(root, "ssd_codec", json_string(a.codec ? a.codec : "raw"));
		json_object_set_new(root, "blocks_from_ssd",
				    json_integer((json_int_t)reps[0].blocks_from_ssd));
		json_object_set_new(root, "block_bytes", json_integer((json_int_t)block));
		json_object_set_new(root, "dram_bytes", json_integer((json_int_t)a.dram));
		json_object_set_new(root, "working_set_bytes", json_integer((json_int_t)a.ws));
		json_object_set_new(root, "fio_bytes", json_integer((json_int_t)fio_bytes));
		json_object_set_new(root, "xfer_blocks", json_integer(a.xfer));
		json_object_set_new(root, "engines", json_integer(a.engines));
		json_object_set_new(root, "devices", json_integer(a.n_dirs));
		json_object_set_new(root, "pages", json_string(huge ? "huge" : "4k"));
		json_object_set_new(root, "reps", json_integer(a.reps));
		json_object_set_new(root, "runs", runs);
		json_dumpf(root, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
		putchar('\n');
		json_decref(root);
		return 0;
	}
	printf("kvtierd end to end in %s: DRAM %llu MiB, working set %llu MiB of %llu KiB "
	       "blocks, %u per request, %u engine%s, %s pages, medians of %d (GB = 1e9 B)\n",
	       a.dir, (unsigned long long)(a.dram >> 20), (unsigned long long)(a.ws >> 20),
	       (unsigned long long)(block >> 10), a.xfer, a.engines, a.engines > 1 ? "s" : "",
	       huge ? "explicit huge" : "4 KiB", a.reps);
	printf("%4s %9s %9s %9s %9s %9s %9s %9s %9s %8s\n", "rep", "save", "load", "fio rd",
	       "fio wr", "fio wr+s", "load/fio", "save/fio", "save/wr+s", "from ssd");
	for (int i = 0; i < a.reps; i++)
		printf("%4d %9.3f %9.3f %9.3f %9.3f %9.3f %9.2f %9.2f %9.2f %8llu\n", i, v[0][i],
		       v[1][i], v[2][i], v[3][i], v[4][i], v[5][i], v[6][i], v[7][i],
		       (unsigned long long)reps[i].blocks_from_ssd);
	printf("%4s %9.3f %9.3f %9.3f %9.3f %9.3f %9.2f %9.2f %9.2f\n", "med",
	       kvt_bench_median(v[0], (size_t)a.reps), kvt_bench_median(v[1], (size_t)a.reps),
	       kvt_bench_median(v[2], (size_t)a.reps), kvt_bench_median(v[3], (size_t)a.reps),
	       kvt_bench_median(v[4], (size_t)a.reps), kvt_bench_median(v[5], (size_t)a.reps),
	       kvt_bench_median(v[6], (size_t)a.reps), kvt_bench_median(v[7], (size_t)a.reps));
	if (a.codec)
		printf("ssd codec %s: %.2fx fewer bytes written to SSD (median)\n", a.codec,
		       kvt_bench_median(v[10], (size_t)a.reps));
	printf("targets: load/fio >= 0.8, save/fio >= 0.7\n");
	return 0;
}
