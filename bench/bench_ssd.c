/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier-bench ssd: the SSD tier's write and read throughput and latency per
 * block size and queue depth, beside fio with the same engine (io_uring),
 * block size, queue depth, O_DIRECT, total size and kind of memory (explicit
 * huge pages for both where enough are reserved, else 4 KiB pages for both)
 * on the same file system in the same run; the device's ceiling (fio's best
 * read and write of the run); and the block codecs on real floating-point
 * tensors (random normal bf16, and the K/V of a small attention computation
 * done here), beside memcpy.
 *
 * kvtier writes records (a 4 KiB header + the block) from a region
 * registered as fixed buffers, laid out as the store's DRAM tier lays out its
 * slots (a page of headroom before each block, so header and block go in one
 * write), all of a pass in one batch the tier keeps `qd` records deep; its
 * MB/s counts block bytes only, so the header is overhead it pays. Latency
 * is per record: submission to completion of its I/O. Every figure is a
 * median over --reps repetitions. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "bench/bench.h"
#include "tiers/codec.h"
#include "tiers/ssd.h"

#define MAX_LIST 16

struct ssd_args {
	const char *dir;
	uint64_t blocks[MAX_LIST];
	int n_blocks;
	uint64_t qds[MAX_LIST];
	int n_qds;
	uint64_t bytes;
	uint64_t comp_bytes;
	uint64_t comp_block;
	bool comp_only[KVT_CODEC_LAST + 1]; /* --codecs: those measured */
	bool comp_some;                            /* --codecs was given */
	int reps;
	bool sync, threads, no_fio, no_comp, json;
	int pages; /* PAGES_AUTO, PAGES_HUGE, PAGES_4K */
};

enum { PAGES_AUTO, PAGES_HUGE, PAGES_4K };

struct ssd_case {
	const char *op;
	uint64_t block, qd;
	double kvt_mbps, fio_mbps, p50_us, p99_us, fio_p50_us, fio_p99_us;
};

struct comp_case {
	const char *data;
	const char *codec;
	uint64_t block;
	double ratio, enc_gbps, dec_gbps, memcpy_gbps;
};

static void usage(FILE *f)
{
	fprintf(f,
"usage: kvtier-bench ssd [OPTIONS]\n"
"\n"
"Measures the SSD tier: write and read MB/s and per-record p50/p99 latency per\n"
"block size and queue depth, beside fio (io_uring, O_DIRECT, fixed buffers,\n"
"same block size, queue depth, total size, kind of memory and directory) run\n"
"by the bench when installed, and the device's ceiling (fio's best read and\n"
"write of the run); then the block codecs on bf16 tensors (random normal; K/V\n"
"of a small attention computation) beside memcpy. Medians.\n"
"\n"
"options:\n"
"  --dir DIR          directory on the file system under test (default\n"
"                     ./kvtier-bench-ssd.d, created and removed)\n"
"  --blocks LIST      block sizes (default 256K,1M,32M; 256K to 32M meaningful)\n"
"  --qd LIST          queue depths (default 1,16; 1 to 64)\n"
"  --bytes SIZE       bytes written then read per case (default 1G; at least\n"
"                     2 blocks)\n"
"  --reps N           repetitions, the median is reported (default 3)\n"
"  --sync             fdatasync each batch before it counts as written (the\n"
"                     tier's durable default); fio then gets --fdatasync too\n"
"  --threads          use the pread/pwrite thread pool instead of io_uring\n"
"                     (fio keeps io_uring: the ratio shows the fallback's cost)\n"
"  --no-fio           skip fio (fio_mbps and ratio are then 0)\n"
"  --pages KIND       memory of both the tier's blocks and fio's buffers:\n"
"                     huge (explicit huge pages, fio --iomem=shmhuge), 4k\n"
"                     (4 KiB pages; transparent huge pages refused), or auto\n"
"                     (default: huge when enough are reserved, else 4k)\n"
"  --comp-bytes SIZE  tensor size for the compression figures (default 4M)\n"
"  --comp-block SIZE  block size the codecs compress (default 256K; 4K\n"
"                     multiples up to --comp-bytes)\n"
"  --codecs LIST      the codecs measured, by name (default: all but raw)\n"
"  --no-comp          skip the compression figures\n"
"  --json             print one JSON object instead of a table\n"
"  -h, --help         this text\n"
"\n"
"SIZE and LIST entries take K, M, G suffixes (powers of 1024). MB = 1e6 bytes.\n");
}

static int parse_list(const char *s, uint64_t *v, int *n, bool sizes)
{
	char *copy = strdup(s), *save = NULL, *tok;
	int err = 0;

	*n = 0;
	for (tok = strtok_r(copy, ",", &save); tok && !err; tok = strtok_r(NULL, ",", &save)) {
		if (*n == MAX_LIST) {
			err = -EINVAL;
			break;
		}
		if (sizes)
			err = kvt_bench_parse_size(tok, &v[*n]);
		else
			v[*n] = strtoull(tok, NULL, 0);
		(*n)++;
	}
	free(copy);
	return err || !*n ? -EINVAL : 0;
}

/* --codecs: names as kvt_codec_name prints them. */
static int parse_codecs(const char *s, struct ssd_args *a)
{
	char *copy = strdup(s), *save = NULL, *tok;
	int err = copy ? 0 : -ENOMEM;

	for (tok = copy ? strtok_r(copy, ",", &save) : NULL; tok && !err;
	     tok = strtok_r(NULL, ",", &save)) {
		int id = kvt_codec_parse(tok);

		if (id < 0)
			err = id;
		else
			a->comp_only[id] = a->comp_some = true;
	}
	free(copy);
	return err || !a->comp_some ? -EINVAL : 0;
}

static int parse_args(int argc, char **argv, struct ssd_args *a)
{
	static const struct option opts[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "blocks", required_argument, NULL, 'b' },
		{ "qd", required_argument, NULL, 'q' },
		{ "bytes", required_argument, NULL, 'B' },
		{ "reps", required_argument, NULL, 'r' },
		{ "sync", no_argument, NULL, 's' },
		{ "threads", no_argument, NULL, 't' },
		{ "no-fio", no_argument, NULL, 'F' },
		{ "comp-bytes", required_argument, NULL, 'c' },
		{ "comp-block", required_argument, NULL, 'k' },
		{ "codecs", required_argument, NULL, 'z' },
		{ "no-comp", no_argument, NULL, 'C' },
		{ "pages", required_argument, NULL, 'p' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int c, err = 0;

	*a = (struct ssd_args){ .dir = NULL, .bytes = 1ULL << 30, .comp_bytes = 4 << 20,
				.comp_block = 256 << 10, .reps = 3 };
	parse_list("256K,1M,32M", a->blocks, &a->n_blocks, true);
	parse_list("1,16", a->qds, &a->n_qds, false);
	optind = 1;
	while (!err && (c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': a->dir = optarg; break;
		case 'b': err = parse_list(optarg, a->blocks, &a->n_blocks, true); break;
		case 'q': err = parse_list(optarg, a->qds, &a->n_qds, false); break;
		case 'B': err = kvt_bench_parse_size(optarg, &a->bytes); break;
		case 'r': a->reps = atoi(optarg); break;
		case 's': a->sync = true; break;
		case 't': a->threads = true; break;
		case 'F': a->no_fio = true; break;
		case 'c': err = kvt_bench_parse_size(optarg, &a->comp_bytes); break;
		case 'C': a->no_comp = true; break;
		case 'k': err = kvt_bench_parse_size(optarg, &a->comp_block); break;
		case 'z': err = parse_codecs(optarg, a); break;
		case 'p':
			if (!strcmp(optarg, "auto"))
				a->pages = PAGES_AUTO;
			else if (!strcmp(optarg, "huge"))
				a->pages = PAGES_HUGE;
			else if (!strcmp(optarg, "4k"))
				a->pages = PAGES_4K;
			else
				err = -EINVAL;
			break;
		case 'j': a->json = true; break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -EINVAL;
		}
	}
	for (int i = 0; !err && i < a->n_blocks; i++)
		if (a->blocks[i] < 4096 || a->blocks[i] % 4096 || a->blocks[i] > (1ULL << 30))
			err = -EINVAL;
	for (int i = 0; !err && i < a->n_qds; i++)
		if (a->qds[i] < 1 || a->qds[i] > 1024)
			err = -EINVAL;
	if (err || a->reps < 1 || a->comp_bytes < 4096 || a->comp_block < 4096 ||
	    a->comp_block % 4096 || a->comp_block > a->comp_bytes) {
		fprintf(stderr, "kvtier-bench ssd: bad options (blocks: 4K multiples up to 1G; "
				"qd 1..1024; reps >= 1; comp-block: 4K multiples up to "
				"comp-bytes; codecs by name)\n");
		return -EINVAL;
	}
	return 0;
}

/* ---- the tier ----------------------------------------------------------- */

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

/* One write pass then one read pass of n blocks at queue depth qd. Fills
 * MB/s and latency quantiles (of this repetition) for both. */
static int run_tier(const struct ssd_args *a, const char *dir, uint64_t block, uint64_t qd,
		    uint64_t n, char *region, double mbps[2], double p50[2], double p99[2])
{
	struct kvt_ssd_opts o;
	struct kvt_ssd *ssd;
	struct kvt_ssd_write *w = calloc(n, sizeof(*w));
	struct kvt_ssd_read *r = calloc(n, sizeof(*r));
	uint64_t *lat = calloc(n, sizeof(*lat));
	uint64_t stride = block + 4096; /* headroom, then the block */
	int err = -ENOMEM;

	if (!w || !r || !lat)
		goto out;
	kvt_ssd_opts_init(&o, sizeof(o));
	o.dir = dir;
	/* up to 64 records a segment (and its superblock page), room for all */
	o.segment_bytes = (block + 4096) * (n < 64 ? n : 64) + 4096;
	o.capacity_bytes = o.segment_bytes * ((n + 63) / 64 + 2);
	o.queue_depth = (uint32_t)qd;
	o.max_inflight_bytes = 1ULL << 40; /* the queue depth is the limit here */
	o.sync = a->sync;
	o.force_threads = a->threads;
	o.threads = (uint32_t)qd;
	/* the tier's queue depth counts records (header + body operations) */
	err = kvt_ssd_open(&o, NULL, NULL, &ssd);
	if (err)
		goto out;
	kvt_ssd_register_region(ssd, region, n * stride);
	for (uint64_t i = 0; i < n; i++) {
		w[i] = (struct kvt_ssd_write){ .ns_id = 1, .data = region + i * stride + 4096,
					       .len = block, .room = true };
		memcpy(w[i].key.bytes, &i, sizeof(i));
	}
	for (int pass = 0; pass < 2 && !err; pass++) {
		uint64_t t0 = kvt_now_ns(), done = 0;

		done = (uint64_t)(pass == 0 ? kvt_ssd_write(ssd, w, n) : kvt_ssd_read(ssd, r, n));
		double secs = (double)(kvt_now_ns() - t0) / 1e9;
		if (done != n) {
			fprintf(stderr, "kvtier-bench ssd: %s of %llu blocks: %llu done (%s)\n",
				pass ? "read" : "write", (unsigned long long)n,
				(unsigned long long)done,
				strerror(-(pass ? r[0].res : w[0].res)));
			err = -EIO;
			break;
		}
		for (uint64_t i = 0; i < n; i++)
			lat[i] = pass == 0 ? w[i].lat_ns : r[i].lat_ns;
		qsort(lat, n, sizeof(*lat), cmp_u64);
		mbps[pass] = (double)(n * block) / secs / 1e6;
		p50[pass] = (double)lat[(n - 1) / 2] / 1e3;
		p99[pass] = (double)lat[(size_t)((double)(n - 1) * 0.99)] / 1e3;
		if (pass == 0)
			for (uint64_t i = 0; i < n; i++)
				r[i] = (struct kvt_ssd_read){ .loc = w[i].loc, .ns_id = 1, .key = w[i].key,
							      .buf = region + i * stride + 4096,
							      .len = block, .room = true };
	}
	kvt_ssd_close(ssd);
out:
	free(lat);
	free(r);
	free(w);
	return err;
}

static void rm_tree(const char *dir)
{
	char cmd[8192];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		fprintf(stderr, "kvtier-bench ssd: cannot remove %s\n", dir);
}

/* ---- fio ---------------------------------------------------------------- */

/* fio's write then read of one repetition r into the per-op figure arrays. */
static void fio_pair(const struct ssd_args *a, bool fio, bool huge, const char *file,
		     uint64_t block, uint64_t qd, uint64_t n, double fm[2][64], double f50[2][64],
		     double f99[2][64], int r)
{
	uint64_t batch = qd * 8 < 64 ? 64 : qd * 8;

	for (int op = 0; op < 2; op++) {
		struct kvt_bench_fio_job j = {
			.file = file, .write = op == 0, .block = block, .bytes = n * block,
			.qd = (unsigned)qd, .huge = huge,
			.fdatasync = a->sync && op == 0 ? (unsigned)batch : 0 };
		struct kvt_bench_fio_result res = { 0 };

		if (fio && kvt_bench_fio(&j, &res))
			fprintf(stderr, "kvtier-bench ssd: fio failed\n");
		fm[op][r] = res.mbps;
		f50[op][r] = res.p50_us;
		f99[op][r] = res.p99_us;
	}
	unlink(file);
}

/* ---- compression -------------------------------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static double rand_normal(void)
{
	return kvt_bench_rand_normal(&rng);
}

static void fill_normal(uint16_t *v, size_t n)
{
	kvt_bench_fill_bf16_normal(v, n, &rng);
}

/* c[m][n] = a[m][k] . b[k][n], row by row so that the inner loop runs along
 * rows of b and c (the sums are taken in the same order as a dot product) */
static void matmul(const float *a, const float *b, float *c, int m, int k, int n)
{
	for (int i = 0; i < m; i++) {
		for (int j = 0; j < n; j++)
			c[i * n + j] = 0;
		for (int l = 0; l < k; l++)
			for (int j = 0; j < n; j++)
				c[i * n + j] += a[i * k + l] * b[l * n + j];
	}
}

/* The K and V caches of two layers of a small transformer: token embeddings
 * (a 512-token vocabulary, so rows repeat as in real text), rotary positions
 * on K, causal softmax attention with a residual between the layers. Writes
 * at most n elements (128 KiB for a whole pass) and returns how many. */
static size_t attention_pass(uint16_t *out, size_t n)
{
	enum { T = 256, D = 256, H = 64, V = 512 };
	float *emb = malloc(sizeof(float) * V * D), *x = malloc(sizeof(float) * T * D);
	float *wq = malloc(sizeof(float) * D * H), *wk = malloc(sizeof(float) * D * H);
	float *wv = malloc(sizeof(float) * D * H), *wo = malloc(sizeof(float) * H * D);
	float *q = malloc(sizeof(float) * T * H), *k = malloc(sizeof(float) * T * H);
	float *v = malloc(sizeof(float) * T * H), *o = malloc(sizeof(float) * T * H);
	float *p = malloc(sizeof(float) * T), *xo = malloc(sizeof(float) * T * D);
	size_t w = 0;

	for (int i = 0; i < V * D; i++)
		emb[i] = (float)rand_normal();
	for (int t = 0; t < T; t++) {
		rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
		memcpy(x + t * D, emb + (rng % V) * D, sizeof(float) * D);
	}
	for (int layer = 0; layer < 2 && w < n; layer++) {
		for (int i = 0; i < D * H; i++) {
			wq[i] = (float)(rand_normal() / sqrt(D));
			wk[i] = (float)(rand_normal() / sqrt(D));
			wv[i] = (float)(rand_normal() / sqrt(D));
			wo[i] = (float)(rand_normal() / sqrt(H));
		}
		matmul(x, wq, q, T, D, H);
		matmul(x, wk, k, T, D, H);
		matmul(x, wv, v, T, D, H);
		for (int t = 0; t < T; t++) /* rotary embedding of positions on q, k */
			for (int i = 0; i < H / 2; i++) {
				double th = t * pow(10000.0, -2.0 * i / H), c = cos(th), s = sin(th);
				float k0 = k[t * H + 2 * i], k1 = k[t * H + 2 * i + 1];
				float q0 = q[t * H + 2 * i], q1 = q[t * H + 2 * i + 1];
				k[t * H + 2 * i] = (float)(k0 * c - k1 * s);
				k[t * H + 2 * i + 1] = (float)(k0 * s + k1 * c);
				q[t * H + 2 * i] = (float)(q0 * c - q1 * s);
				q[t * H + 2 * i + 1] = (float)(q0 * s + q1 * c);
			}
		for (int t = 0; t < T; t++) {
			float mx = -INFINITY, sum = 0;
			for (int u = 0; u <= t; u++) {
				float s = 0;
				for (int i = 0; i < H; i++)
					s += q[t * H + i] * k[u * H + i];
				p[u] = s / sqrtf(H);
				mx = p[u] > mx ? p[u] : mx;
			}
			for (int u = 0; u <= t; u++)
				sum += (p[u] = expf(p[u] - mx));
			for (int i = 0; i < H; i++) {
				float s = 0;
				for (int u = 0; u <= t; u++)
					s += p[u] * v[u * H + i];
				o[t * H + i] = s / sum;
			}
		}
		/* the KV cache of this layer: K then V, bf16 */
		for (int i = 0; i < T * H && w < n; i++)
			out[w++] = kvt_bench_bf16(k[i]);
		for (int i = 0; i < T * H && w < n; i++)
			out[w++] = kvt_bench_bf16(v[i]);
		matmul(o, wo, xo, T, H, D);
		for (int i = 0; i < T * D; i++)
			x[i] += xo[i];
	}
	free(emb), free(x), free(wq), free(wk), free(wv), free(wo);
	free(q), free(k), free(v), free(o), free(p), free(xo);
	return w;
}

/* Passes of new sequences through new weights until n elements are filled.
 * Not one pass repeated: a 256 KiB block holding the same 128 KiB twice lets
 * a codec that transposes bits or bytes before LZ4 match each plane against
 * its copy 8 KiB back, which doubled the ratio of the bit shuffle (2.50
 * against 1.25 on distinct passes) with no bearing on real caches. */
static void fill_attention(uint16_t *out, size_t n)
{
	for (size_t w = 0; w < n;)
		w += attention_pass(out + w, n - w);
}

static double median_of(double *v, int n)
{
	return kvt_bench_median(v, (size_t)n);
}

/* The codecs measured, on each tensor. */
static const enum kvt_codec_id comp_codecs[] = {
	KVT_CODEC_LZ4, KVT_CODEC_SHUF16_LZ4, KVT_CODEC_BLOSC_BITSHUF16_LZ4,
	KVT_CODEC_BLOSC_SHUF16_ZSTD, KVT_CODEC_SHUF16_ZSTD, KVT_CODEC_SHUF16_PACK4,
};
#define N_COMP_CODECS (sizeof(comp_codecs) / sizeof(comp_codecs[0]))

/* Compress src in blocks of --comp-block bytes (default 256 KiB, the
 * smallest block size of the bench). */
static void run_comp(const struct ssd_args *a, const char *data, const uint16_t *src,
		     size_t bytes, enum kvt_codec_id id, struct comp_case *out)
{
	const size_t blk = a->comp_block;
	size_t nblk = bytes / blk;
	char *dst = malloc(nblk * kvt_codec_bound(blk)), *back = malloc(bytes);
	char *scratch = malloc(kvt_codec_scratch_bytes(id, blk) + 1);
	long *stored = calloc(nblk, sizeof(*stored));
	enum kvt_codec_id *used = calloc(nblk, sizeof(*used));
	double enc[64], dec[64], ref[64];
	int reps = a->reps < 64 ? a->reps : 64;
	struct kvt_codec_cfg cfg;
	uint64_t total = 0;

	kvt_codec_cfg_init(&cfg);
	cfg.id = id;
	cfg.min_ratio = 1.0;
	for (int r = 0; r < reps; r++) {
		uint64_t t0 = kvt_now_ns();
		total = 0;
		for (size_t b = 0; b < nblk; b++) {
			stored[b] = kvt_codec_encode(&cfg, (const char *)src + b * blk, blk,
						     dst + b * kvt_codec_bound(blk), kvt_codec_bound(blk),
						     scratch, &used[b]);
			total += (uint64_t)stored[b];
		}
		uint64_t t1 = kvt_now_ns();
		for (size_t b = 0; b < nblk; b++)
			if (kvt_codec_decode(used[b], dst + b * kvt_codec_bound(blk), (size_t)stored[b],
					     back + b * blk, blk, scratch))
				fprintf(stderr, "kvtier-bench ssd: decode failed\n");
		uint64_t t2 = kvt_now_ns();
		memcpy(back, src, nblk * blk);
		uint64_t t3 = kvt_now_ns();
		enc[r] = (double)(nblk * blk) / (double)(t1 - t0);
		dec[r] = (double)(nblk * blk) / (double)(t2 - t1);
		ref[r] = (double)(nblk * blk) / (double)(t3 - t2);
	}
	if (memcmp(back, src, nblk * blk))
		fprintf(stderr, "kvtier-bench ssd: round trip mismatch\n");
	*out = (struct comp_case){ data, kvt_codec_name(id), blk, (double)(nblk * blk) / (double)total,
				   median_of(enc, reps), median_of(dec, reps), median_of(ref, reps) };
	free(used), free(stored), free(scratch), free(back), free(dst);
}

/* ---- main --------------------------------------------------------------- */

int kvt_bench_ssd_main(int argc, char **argv)
{
	struct ssd_args a;
	struct ssd_case *cases;
	struct comp_case comp[2 * N_COMP_CODECS];
	int n_cases = 0, n_comp = 0, err = 0;
	char dir[4096], kdir[4200], ffile[4200];
	double best[2] = { 0, 0 }; /* the device's ceiling: fio's best write, read */
	uint64_t need = 0;
	bool fio, huge;

	if (parse_args(argc, argv, &a))
		return 2;
	/* both sides get explicit huge pages only when each can have its own */
	for (int bi = 0; bi < a.n_blocks; bi++)
		for (int qi = 0; qi < a.n_qds; qi++) {
			uint64_t n = a.bytes / a.blocks[bi] < 2 ? 2 : a.bytes / a.blocks[bi];
			uint64_t m = n * a.blocks[bi] > a.qds[qi] * a.blocks[bi] ?
				     n * a.blocks[bi] : a.qds[qi] * a.blocks[bi];
			need = m > need ? m : need;
		}
	huge = a.pages == PAGES_HUGE || (a.pages == PAGES_AUTO && kvt_bench_huge_free() >= need);
	snprintf(dir, sizeof(dir), "%s/kvtier-bench-ssd.%d", a.dir ? a.dir : ".", (int)getpid());
	if (mkdir(dir, 0755)) {
		fprintf(stderr, "kvtier-bench ssd: cannot create %s: %s\n", dir, strerror(errno));
		return 1;
	}
	snprintf(kdir, sizeof(kdir), "%s/tier", dir);
	snprintf(ffile, sizeof(ffile), "%s/fio.dat", dir);
	fio = !a.no_fio && kvt_bench_have_fio();
	if (!a.no_fio && !fio)
		fprintf(stderr, "kvtier-bench ssd: fio not found; fio figures are 0\n");
	cases = calloc((size_t)(2 * a.n_blocks * a.n_qds), sizeof(*cases));

	for (int bi = 0; bi < a.n_blocks && !err; bi++)
		for (int qi = 0; qi < a.n_qds && !err; qi++) {
			uint64_t block = a.blocks[bi], qd = a.qds[qi];
			uint64_t n = a.bytes / block < 2 ? 2 : a.bytes / block;
			double m[2][64], l50[2][64], l99[2][64], fm[2][64], f50[2][64], f99[2][64];
			int reps = a.reps < 64 ? a.reps : 64;

			for (int r = 0; r < reps && !err; r++) {
				double mb[2], p50[2], p99[2];
				uint64_t rlen;
				char *region;

				/* who goes first alternates: a virtual disk still busy
				 * with the previous run's writes would tax one side */
				if (r & 1)
					fio_pair(&a, fio, huge, ffile, block, qd, n, fm, f50, f99, r);
				/* the tier's memory is mapped only while it runs, so
				 * that fio can have the huge pages in its turn */
				/* whole huge pages: a hugetlb mapping is made of them */
				rlen = (n * (block + 4096) + (2u << 20) - 1) & ~(uint64_t)((2u << 20) - 1);
				region = kvt_bench_region(rlen, huge);
				if (!region) {
					fprintf(stderr, "kvtier-bench ssd: no memory for %llu bytes%s\n",
						(unsigned long long)(n * block),
						huge ? " of huge pages" : "");
					err = -ENOMEM;
					break;
				}
				for (uint64_t i = 0; i < rlen / 8; i++)
					((uint64_t *)region)[i] = i * 0x9e3779b97f4a7c15ULL;
				err = run_tier(&a, kdir, block, qd, n, region, mb, p50, p99);
				munmap(region, rlen);
				rm_tree(kdir);
				for (int op = 0; op < 2 && !err; op++)
					m[op][r] = mb[op], l50[op][r] = p50[op], l99[op][r] = p99[op];
				if (!(r & 1))
					fio_pair(&a, fio, huge, ffile, block, qd, n, fm, f50, f99, r);
				for (int op = 0; op < 2 && !err; op++)
					best[op] = fm[op][r] > best[op] ? fm[op][r] : best[op];
			}
			for (int op = 0; op < 2 && !err; op++)
				cases[n_cases++] = (struct ssd_case){
					op ? "read" : "write", block, qd,
					median_of(m[op], reps), median_of(fm[op], reps),
					median_of(l50[op], reps), median_of(l99[op], reps),
					median_of(f50[op], reps), median_of(f99[op], reps) };
			if (err)
				fprintf(stderr, "kvtier-bench ssd: block %llu qd %llu: %s\n",
					(unsigned long long)block, (unsigned long long)qd,
					strerror(-err));
		}
	rm_tree(dir);

	if (!a.no_comp && !err) {
		size_t n = a.comp_bytes / 2;
		uint16_t *t = malloc(n * 2);

		fill_normal(t, n);
		for (size_t c = 0; c < N_COMP_CODECS; c++)
			if (!a.comp_some || a.comp_only[comp_codecs[c]])
				run_comp(&a, "normal-bf16", t, n * 2, comp_codecs[c], &comp[n_comp++]);
		fill_attention(t, n);
		for (size_t c = 0; c < N_COMP_CODECS; c++)
			if (!a.comp_some || a.comp_only[comp_codecs[c]])
				run_comp(&a, "attention-kv-bf16", t, n * 2, comp_codecs[c],
					 &comp[n_comp++]);
		free(t);
	}

	if (a.json) {
		json_t *root = json_object(), *jc = json_array(), *jz = json_array();
		for (int i = 0; i < n_cases; i++) {
			struct ssd_case *c = &cases[i];
			json_array_append_new(jc, json_pack("{s:s,s:I,s:I,s:f,s:f,s:f,s:f,s:f,s:f,s:f}",
				"op", c->op, "block_bytes", (json_int_t)c->block, "qd", (json_int_t)c->qd,
				"kvtier_mbps", c->kvt_mbps, "fio_mbps", c->fio_mbps,
				"ratio", c->fio_mbps > 0 ? c->kvt_mbps / c->fio_mbps : 0.0,
				"p50_us", c->p50_us, "p99_us", c->p99_us,
				"fio_p50_us", c->fio_p50_us, "fio_p99_us", c->fio_p99_us));
		}
		for (int i = 0; i < n_comp; i++)
			json_array_append_new(jz, json_pack("{s:s,s:s,s:I,s:f,s:f,s:f,s:f,s:f,s:f}",
				"data", comp[i].data, "codec", comp[i].codec,
				"block_bytes", (json_int_t)comp[i].block, "ratio", comp[i].ratio,
				"encode_gbps", comp[i].enc_gbps, "decode_gbps", comp[i].dec_gbps,
				"memcpy_gbps", comp[i].memcpy_gbps,
				"encode_vs_memcpy", comp[i].enc_gbps / comp[i].memcpy_gbps,
				"decode_vs_memcpy", comp[i].dec_gbps / comp[i].memcpy_gbps));
		json_object_set_new(root, "bench", json_string("ssd"));
		json_object_set_new(root, "dir", json_string(a.dir ? a.dir : "."));
		json_object_set_new(root, "engine", json_string(a.threads ? "threads" : "io_uring"));
		json_object_set_new(root, "sync", json_boolean(a.sync));
		json_object_set_new(root, "pages", json_string(huge ? "huge" : "4k"));
		json_object_set_new(root, "fio_best_write_mbps", json_real(best[0]));
		json_object_set_new(root, "fio_best_read_mbps", json_real(best[1]));
		json_object_set_new(root, "fio", json_boolean(fio));
		json_object_set_new(root, "reps", json_integer(a.reps));
		json_object_set_new(root, "cases", jc);
		json_object_set_new(root, "compression", jz);
		json_dumpf(root, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
		putchar('\n');
		json_decref(root);
	} else {
		printf("SSD tier in %s, %s%s, tier and fio in %s pages, medians of %d reps "
		       "(MB = 1e6 B)\n", a.dir ? a.dir : ".", a.threads ? "thread pool" : "io_uring",
		       a.sync ? ", fdatasync per batch" : "", huge ? "explicit huge" : "4 KiB",
		       a.reps);
		printf("%-6s %8s %4s %12s %12s %7s %9s %9s %9s %9s\n", "op", "block", "qd",
		       "kvtier MB/s", "fio MB/s", "ratio", "p50 us", "p99 us", "fio p50", "fio p99");
		for (int i = 0; i < n_cases; i++) {
			struct ssd_case *c = &cases[i];
			char b[32];
			printf("%-6s %8s %4llu %12.1f %12.1f %7.2f %9.0f %9.0f %9.0f %9.0f\n", c->op,
			       kvt_fmt_bytes(c->block, b, sizeof(b)), (unsigned long long)c->qd,
			       c->kvt_mbps, c->fio_mbps,
			       c->fio_mbps > 0 ? c->kvt_mbps / c->fio_mbps : 0.0, c->p50_us, c->p99_us,
			       c->fio_p50_us, c->fio_p99_us);
		}
		if (fio)
			printf("device ceiling (fio's best of the run): write %.1f MB/s, read %.1f MB/s\n",
			       best[0], best[1]);
		if (n_comp)
			printf("\ncompression of %s blocks, %s of bf16 (GB/s = 1e9 B/s)\n"
			       "%-18s %-19s %6s %10s %10s %12s\n",
			       kvt_fmt_bytes(a.comp_block, ffile, sizeof(ffile)),
			       kvt_fmt_bytes(a.comp_bytes, kdir, sizeof(kdir)), "data", "codec",
			       "ratio", "enc GB/s", "dec GB/s", "memcpy GB/s");
		for (int i = 0; i < n_comp; i++)
			printf("%-18s %-19s %6.3f %10.2f %10.2f %12.2f\n", comp[i].data, comp[i].codec,
			       comp[i].ratio, comp[i].enc_gbps, comp[i].dec_gbps, comp[i].memcpy_gbps);
	}
	free(cases);
	return err ? 1 : 0;
}
