/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier-bench restart: what a restart of kvtierd costs the engines, each
 * way its DRAM tier survives one (docs/restart.md). A real kvtierd (no SSD
 * tier: every block served after the restart came back in DRAM) is filled
 * by one engine to --fill of its DRAM tier, then restarted:
 *
 *   handover  `kvtierd --take-over` asks the running daemon for its socket
 *             and region;
 *   fdstore   SIGTERM, and the next start gets the region from the fd
 *             store (bench/fdstore.c plays systemd's side of the protocol);
 *   kill9     kill -9 under the fd store.
 *
 * After each, the engine LOOKUPs every block (how many are in DRAM) and
 * LOADs every one, comparing each byte with what it saved. Reported per
 * way, medians over --reps: the share of committed blocks served from
 * DRAM, wrong bytes (must be 0), the time from the start of the restart to
 * the first request (STATS) answered by the new daemon (one whose uptime
 * began after it), and the new daemon's index rebuild time (its STATS). The reference, in the same run: a cold start
 * of the same daemon (an empty region) to its first PING. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
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
#include "bench/fdstore.h"
#include "kvtier/client.h"

#define MAX_REPS 16
#define BATCH 64u /* engine pages: blocks per SAVE and LOAD */
#define N_WAYS 3

static const char *const way_names[N_WAYS] = { "handover", "fdstore", "kill9" };

struct args {
	uint64_t dram, block;
	double fill;
	int reps;
	const char *kvtierd, *dir;
	bool json, small_pages;
};

struct rep {
	double warm_pct, accept_ms, rebuild_ms, cold_ms;
	double old_exit_ms;  /* from the start of the restart to the old process's end */
	uint64_t wrong_bytes, blocks, missing;
};

static void usage(FILE *f)
{
	fprintf(f,
"usage: kvtier-bench restart [OPTIONS]\n"
"\n"
"Fill a real kvtierd's DRAM tier, restart it each way its DRAM tier\n"
"survives (handover: kvtierd --take-over; fdstore: SIGTERM and a start with\n"
"the region from the fd store; kill9: kill -9 under the fd store), and\n"
"report the share of blocks served from DRAM after it, wrong bytes, the time\n"
"to the new daemon's first answer and its index rebuild time, against a\n"
"cold start of the same daemon.\n"
"\n"
"  --dram SIZE     the DRAM tier (default 1G)\n"
"  --block SIZE    block size, a multiple of 32K (default 256K)\n"
"  --fill F        share of the DRAM tier filled, 0.1 to 0.88 (default 0.85)\n"
"  --reps N        repetitions of each way (default 3, at most %d)\n"
"  --dir DIR       where the daemons' sockets and logs go (default /tmp)\n"
"  --no-huge-pages the daemons map 4 KiB pages only (by default reserved\n"
"                  huge pages when enough are free, else 4 KiB pages)\n"
"  --kvtierd PATH  the daemon (default: $KVTIERD, else beside this program)\n"
"  --json          one JSON object\n", MAX_REPS);
}

/* One engine: a connection, the namespace, BATCH pages of memory. */
struct engine {
	struct kvt_client *c;
	struct kvt_client_ns ns;
	int fd, region;
	uint8_t *map;
	uint64_t bytes, page_bytes;
	uint32_t layers;
};

static void desc_of(struct kvt_ns_desc *d, uint64_t block)
{
	kvt_client_desc_init(d, sizeof(*d));
	snprintf(d->model_id, sizeof(d->model_id), "bench/restart");
	d->layers = (uint32_t)(block >> 15); /* 2 x 4 heads x 128 x bf16 x 16 = 32 KiB */
	d->kv_heads = 4;
	d->head_dim = 128;
	d->block_tokens = 16;
}

static int engine_open(struct engine *e, const char *socket, uint64_t block)
{
	struct kvt_client_opts o;
	struct kvt_client_region r = { .size = sizeof(r) };
	struct kvt_ns_desc d;
	void *map;
	int err;

	memset(e, 0, sizeof(*e));
	e->fd = -1;
	kvt_client_opts_init(&o, sizeof(o));
	o.socket_path = socket;
	o.token = "";
	err = kvt_client_connect(&o, &e->c);
	if (err)
		return err;
	desc_of(&d, block);
	err = kvt_client_hello(e->c, &d, &e->ns);
	if (err)
		return err;
	e->layers = d.layers;
	e->page_bytes = 16ull * 4 * 128 * 2;
	e->bytes = e->page_bytes * BATCH * 2 * e->layers;
	e->fd = kvt_client_memfd_create("bench-restart", e->bytes, &map);
	if (e->fd < 0)
		return e->fd;
	e->map = map;
	r.memfd = e->fd;
	r.bytes = e->bytes;
	r.layers = e->layers;
	r.pages = BATCH;
	r.page_stride = e->page_bytes;
	r.kv_stride = e->page_bytes * BATCH;
	r.layer_stride = 2 * r.kv_stride;
	e->region = kvt_client_register(e->c, &e->ns, &r);
	return e->region < 0 ? e->region : 0;
}

static void engine_close(struct engine *e)
{
	if (e->map)
		munmap(e->map, e->bytes);
	if (e->fd >= 0)
		close(e->fd);
	kvt_client_close(e->c);
	memset(e, 0, sizeof(*e));
}

/* The bytes of block k: a stream of 64-bit words from its number. */
static void fill_page(struct engine *e, uint32_t page, uint64_t k, bool check, uint64_t *wrong)
{
	uint64_t x = k * 0x9e3779b97f4a7c15ull + 1;

	for (uint32_t l = 0; l < e->layers; l++)
		for (uint32_t kv = 0; kv < 2; kv++) {
			uint64_t *p = (uint64_t *)(e->map + (uint64_t)l * 2 * e->page_bytes * BATCH +
						   kv * e->page_bytes * BATCH + page * e->page_bytes);

			for (uint64_t w = 0; w < e->page_bytes / 8; w++) {
				x ^= x << 13;
				x ^= x >> 7;
				x ^= x << 17;
				if (!check)
					p[w] = x;
				else if (p[w] != x)
					*wrong += 8;
			}
		}
}

/* SAVE (load = false) or LOAD and check blocks [0, n) of keys, BATCH at a
 * time. Returns the blocks done, or -errno. */
static long move_blocks(struct engine *e, const struct kvt_key *keys, uint32_t n, bool load,
			uint64_t *wrong)
{
	uint32_t pages[BATCH];
	long done = 0;

	for (uint32_t i = 0; i < BATCH; i++)
		pages[i] = i;
	for (uint32_t from = 0; from < n; from += BATCH) {
		uint32_t m = n - from < BATCH ? n - from : BATCH;
		uint64_t ticket;
		int r;

		for (uint32_t i = 0; !load && i < m; i++)
			fill_page(e, i, from + i, false, NULL);
		r = load ? kvt_client_load(e->c, &e->ns, (uint32_t)e->region, keys + from, pages, m,
					   &ticket) :
			   kvt_client_save(e->c, &e->ns, (uint32_t)e->region, NULL, keys + from, pages,
					   m, &ticket);
		if (r)
			return r;
		r = kvt_client_wait(e->c, ticket, 120000);
		if (r < 0)
			return r;
		for (uint32_t i = 0; load && i < (uint32_t)r; i++)
			fill_page(e, i, from + i, true, wrong);
		done += r;
	}
	return done;
}

/* The daemon's uptime in ms from its STATS, -1 when it does not answer. */
static double uptime_ms(struct kvt_client *c)
{
	char *text = NULL;
	json_t *root;
	double v = -1;

	if (kvt_client_stats(c, &text))
		return -1;
	root = json_loads(text, 0, NULL);
	if (root)
		v = 1e3 * json_number_value(json_object_get(json_object_get(root, "server"),
							    "uptime_s"));
	json_decref(root);
	free(text);
	return v;
}

/* The ms from t0 to the first request answered at socket by a daemon that
 * started after t0 (a hand-over's old daemon answers until it is asked),
 * or -1. */
static double first_answer_ms(const char *socket, uint64_t t0, pid_t child)
{
	for (int i = 0; i < 60000; i++) {
		struct kvt_client_opts o;
		struct kvt_client *c;
		int status;

		kvt_client_opts_init(&o, sizeof(o));
		o.socket_path = socket;
		o.token = "";
		if (kvt_client_connect(&o, &c) == 0) {
			double up = uptime_ms(c), since = (double)(kvt_now_ns() - t0) / 1e6;

			kvt_client_close(c);
			if (up >= 0 && up <= since)
				return since;
		}
		if (child > 0 && waitpid(child, &status, WNOHANG) == child)
			return -1;
		usleep(1000);
	}
	return -1;
}

static long long stat_restart(struct kvt_client *c, const char *key)
{
	char *text = NULL;
	json_t *root;
	long long v = -1;

	if (kvt_client_stats(c, &text))
		return -1;
	root = json_loads(text, 0, NULL);
	if (root)
		v = json_integer_value(json_object_get(json_object_get(root, "restart"), key));
	json_decref(root);
	free(text);
	return v;
}

static bool small_pages; /* --no-huge-pages for the daemons */

static void daemon_argv(const char **argv, const char *bin, const char *dir, const char *dram,
			char *sock, char *data, const char *take_over)
{
	int n = 0;

	sprintf(sock, "%s/kvtierd.sock", dir);
	sprintf(data, "%s/data", dir);
	argv[n++] = bin;
	argv[n++] = "--socket";
	argv[n++] = sock;
	argv[n++] = "--data-dir";
	argv[n++] = data;
	argv[n++] = "--dram";
	argv[n++] = dram;
	argv[n++] = "--ssd";
	argv[n++] = "0";
	argv[n++] = "--metrics";
	argv[n++] = "off";
	argv[n++] = "--no-gpu";
	argv[n++] = "--no-prefault";
	if (small_pages)
		argv[n++] = "--no-huge-pages";
	if (take_over) {
		argv[n++] = "--take-over";
		argv[n++] = take_over;
	}
	argv[n] = NULL;
}

static pid_t spawn(const char *const *argv, const char *log)
{
	pid_t pid = fork();

	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

static int reap(pid_t pid, int sig)
{
	int status = 0;

	if (pid <= 0)
		return -1;
	if (sig)
		kill(pid, sig);
	waitpid(pid, &status, 0);
	return status;
}

/* One repetition of one way. */
static int run_way(const struct args *a, const char *bin, int way, int rep_no, struct rep *out)
{
	char dir[PATH_MAX], sock[PATH_MAX + 32], data[PATH_MAX + 32], log[PATH_MAX + 32];
	char hsock[PATH_MAX + 48], dram[32];
	const char *argv[24];
	struct kvt_key *keys = NULL;
	uint32_t *tokens = NULL, n;
	struct kvt_fdstore m = { .notify_fd = -1 };
	struct engine e = { .fd = -1 };
	uint64_t t0, wrong = 0, s = 0x5eed + (uint64_t)rep_no;
	pid_t old = 0, cur = 0;
	uint8_t *tiers = NULL;
	int err = -ENOMEM, found, warm = 0;
	long moved;

	snprintf(dir, sizeof(dir), "%s/kvtier-bench-restart.%d.%s.%d", a->dir, (int)getpid(),
		 way_names[way], rep_no);
	if (mkdir(dir, 0700))
		return -errno;
	snprintf(log, sizeof(log), "%s/kvtierd.log", dir);
	snprintf(dram, sizeof(dram), "%lluM", (unsigned long long)(a->dram >> 20));
	daemon_argv(argv, bin, dir, dram, sock, data, NULL);
	snprintf(hsock, sizeof(hsock), "%s.takeover", sock);
	n = (uint32_t)((double)a->dram * a->fill / (double)a->block);
	keys = calloc(n, sizeof(*keys));
	tiers = calloc(n, 1);
	tokens = calloc((size_t)n * 16, sizeof(*tokens));
	if (!keys || !tiers || !tokens)
		goto out;
	for (size_t i = 0; i < (size_t)n * 16; i++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		tokens[i] = (uint32_t)s;
	}

	/* the reference: a cold start to the first answer */
	err = way ? kvt_fdstore_open(&m, dir) : 0;
	if (err)
		goto out;
	t0 = kvt_now_ns();
	cur = way ? kvt_fdstore_start(&m, argv, log) : spawn(argv, log);
	out->cold_ms = first_answer_ms(sock, t0, way ? 0 : cur);
	err = -EIO;
	if (out->cold_ms < 0 || engine_open(&e, sock, a->block))
		goto out;
	if (kvt_client_prefix_keys(&e.ns, NULL, tokens, (size_t)n * 16, keys, n) != (int)n)
		goto out;
	moved = move_blocks(&e, keys, n, false, NULL);
	if (moved != (long)n) {
		fprintf(stderr, "kvtier-bench: SAVE stored %ld of %u blocks\n", moved, n);
		goto out;
	}
	engine_close(&e);

	/* the restart */
	t0 = kvt_now_ns();
	if (way == 0) {
		old = cur;
		daemon_argv(argv, bin, dir, dram, sock, data, hsock);
		cur = spawn(argv, log);
	} else {
		kvt_fdstore_stop(&m, way == 1 ? SIGTERM : SIGKILL);
		out->old_exit_ms = (double)(kvt_now_ns() - t0) / 1e6;
		cur = kvt_fdstore_start(&m, argv, log);
	}
	out->accept_ms = first_answer_ms(sock, t0, way ? 0 : cur);
	if (old) {
		reap(old, 0); /* it exits once it has handed over */
		out->old_exit_ms = (double)(kvt_now_ns() - t0) / 1e6;
		old = 0;
	}
	if (out->accept_ms < 0 || engine_open(&e, sock, a->block))
		goto out;
	out->rebuild_ms = (double)stat_restart(e.c, "rebuild_us") / 1e3;
	/* a request carries at most max_keys keys: the chain a piece at a time */
	for (uint32_t from = 0; from < n; from += e.ns.max_keys) {
		uint32_t part = n - from < e.ns.max_keys ? n - from : e.ns.max_keys;

		found = kvt_client_lookup(e.c, &e.ns, keys + from, part, tiers + from);
		for (int i = 0; i < found; i++)
			warm += tiers[from + i] == KVT_TIER_DRAM;
		if (found != (int)part)
			break;
	}
	moved = move_blocks(&e, keys, n, true, &wrong);
	out->blocks = n;
	out->missing = moved < 0 ? n : n - (uint64_t)moved;
	out->warm_pct = 100.0 * warm / n;
	out->wrong_bytes = wrong;
	err = 0;
out:
	engine_close(&e);
	if (way)
		kvt_fdstore_stop(&m, SIGTERM);
	else
		reap(cur, SIGTERM);
	reap(old, SIGTERM);
	if (way)
		kvt_fdstore_close(&m);
	if (!err) {
		unlink(log);
		unlink(sock);
		unlink(hsock);
		rmdir(data);
		rmdir(dir);
	} else {
		fprintf(stderr, "kvtier-bench: restart %s failed, see %s\n", way_names[way], log);
	}
	free(keys);
	free(tiers);
	free(tokens);
	return err;
}

static int parse_args(int argc, char **argv, struct args *a)
{
	static const struct option opts[] = {
		{ "dram", required_argument, NULL, 'd' }, { "block", required_argument, NULL, 'b' },
		{ "fill", required_argument, NULL, 'f' }, { "reps", required_argument, NULL, 'r' },
		{ "dir", required_argument, NULL, 'D' }, { "kvtierd", required_argument, NULL, 'k' },
		{ "json", no_argument, NULL, 'j' }, { "help", no_argument, NULL, 'h' },
		{ "no-huge-pages", no_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*a = (struct args){ .dram = 1ull << 30, .block = 256 << 10, .fill = 0.85, .reps = 3,
			    .dir = "/tmp" };
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': if (kvt_bench_parse_size(optarg, &a->dram)) return -EINVAL; break;
		case 'b': if (kvt_bench_parse_size(optarg, &a->block)) return -EINVAL; break;
		case 'f': a->fill = atof(optarg); break;
		case 'r': a->reps = atoi(optarg); break;
		case 'D': a->dir = optarg; break;
		case 'k': a->kvtierd = optarg; break;
		case 'j': a->json = true; break;
		case 'n': a->small_pages = true; break;
		case 'h': usage(stdout); return 1;
		default: usage(stderr); return -EINVAL;
		}
	}
	if (a->block < (32 << 10) || a->block % (32 << 10) || a->fill < 0.1 || a->fill > 0.88 ||
	    a->reps < 1 || a->reps > MAX_REPS || a->dram < (64ull << 20) ||
	    a->dram * a->fill < (double)a->block) {
		usage(stderr);
		return -EINVAL;
	}
	return 0;
}

int kvt_bench_restart_main(int argc, char **argv)
{
	static struct rep reps[N_WAYS][MAX_REPS];
	char bin[PATH_MAX];
	json_t *root = NULL, *ways = NULL;
	uint64_t all_wrong = 0;
	struct args a;
	int err = parse_args(argc, argv, &a);

	if (err)
		return err > 0 ? 0 : 2;
	small_pages = a.small_pages;
	if (kvt_bench_find_kvtierd(a.kvtierd, bin, sizeof(bin))) {
		fprintf(stderr, "kvtier-bench: no kvtierd (--kvtierd PATH or $KVTIERD)\n");
		return 1;
	}
	for (int r = 0; r < a.reps; r++)
		for (int w = 0; w < N_WAYS; w++)
			if (run_way(&a, bin, w, r, &reps[w][r]))
				return 1;
	if (a.json) {
		root = json_object();
		ways = json_object();
		json_object_set_new(root, "dram_bytes", json_integer((json_int_t)a.dram));
		json_object_set_new(root, "block_bytes", json_integer((json_int_t)a.block));
		json_object_set_new(root, "blocks", json_integer((json_int_t)reps[0][0].blocks));
		json_object_set_new(root, "reps", json_integer(a.reps));
	} else {
		printf("restart of kvtierd, DRAM tier %llu MiB, %llu blocks of %llu KiB (%.0f%% full), "
		       "medians of %d\n", (unsigned long long)(a.dram >> 20),
		       (unsigned long long)reps[0][0].blocks, (unsigned long long)(a.block >> 10),
		       a.fill * 100, a.reps);
		printf("%-9s %7s %6s %8s %10s %9s %11s %8s %11s\n", "way", "warm %", "wrong",
		       "missing", "accept ms", "old end", "rebuild ms", "cold ms", "accept/cold");
	}
	for (int w = 0; w < N_WAYS; w++) {
		double warm[MAX_REPS], acc[MAX_REPS], reb[MAX_REPS], cold[MAX_REPS], ex[MAX_REPS];
		uint64_t wrong = 0, missing = 0;
		double mw, ma, mr, mc, me;

		for (int r = 0; r < a.reps; r++) {
			warm[r] = reps[w][r].warm_pct;
			acc[r] = reps[w][r].accept_ms;
			reb[r] = reps[w][r].rebuild_ms;
			cold[r] = reps[w][r].cold_ms;
			ex[r] = reps[w][r].old_exit_ms;
			wrong += reps[w][r].wrong_bytes;
			missing += reps[w][r].missing;
		}
		all_wrong += wrong;
		mw = kvt_bench_median(warm, (size_t)a.reps);
		ma = kvt_bench_median(acc, (size_t)a.reps);
		mr = kvt_bench_median(reb, (size_t)a.reps);
		mc = kvt_bench_median(cold, (size_t)a.reps);
		me = kvt_bench_median(ex, (size_t)a.reps);
		if (a.json) {
			json_t *o = json_object();

			json_object_set_new(o, "warm_pct", json_real(mw));
			json_object_set_new(o, "wrong_bytes", json_integer((json_int_t)wrong));
			json_object_set_new(o, "missing_blocks", json_integer((json_int_t)missing));
			json_object_set_new(o, "accept_ms", json_real(ma));
			json_object_set_new(o, "rebuild_ms", json_real(mr));
			json_object_set_new(o, "cold_start_ms", json_real(mc));
			json_object_set_new(o, "old_exit_ms", json_real(me));
			json_object_set_new(o, "accept_vs_cold", json_real(mc > 0 ? ma / mc : 0));
			json_object_set_new(ways, way_names[w], o);
		} else {
			printf("%-9s %7.2f %6llu %8llu %10.1f %9.1f %11.2f %8.1f %11.2f\n", way_names[w],
			       mw, (unsigned long long)wrong, (unsigned long long)missing, ma, me, mr, mc,
			       mc > 0 ? ma / mc : 0);
		}
	}
	if (a.json) {
		char *text;

		json_object_set_new(root, "ways", ways);
		text = json_dumps(root, JSON_INDENT(2));
		if (text)
			printf("%s\n", text);
		free(text);
		json_decref(root);
	}
	/* a wrong byte served is a failure, whatever the timings */
	if (all_wrong)
		fprintf(stderr, "kvtier-bench: %llu wrong bytes served after a restart\n",
			(unsigned long long)all_wrong);
	return all_wrong ? 1 : 0;
}
