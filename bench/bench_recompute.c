/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier-bench recompute: for each model and interconnect, the time to load an
 * n-token prefix's KV against the time to recompute its prefill, the
 * break-even length, and the TTFT that loading saves, for n from 512 to 128K.
 *
 * Measured on this machine, each beside a reference run in the same process:
 * the DRAM tier (kvt_get out of a real store, against memcpy), the raw SSD
 * path (O_DIRECT io_uring reads of a file under --dir, against memcpy), the
 * SSD tier (kvt_get of blocks the store demoted, against the raw path), TCP
 * over loopback (a real socket pair, against memcpy), host-to-GPU copies
 * through the device layer where a GPU exists (against the PCIe spec of the
 * link), and a prefill-shaped GEMM workload on the CPU (OpenBLAS sgemm at
 * each model's layer shapes).
 * Modeled from public specs, and marked "modeled" everywhere they appear: HBM,
 * PCIe Gen4/Gen5 pinned copies, NVLink-C2C, local NVMe, RDMA at 100/200/400
 * Gb/s, and GPU prefill (dense bf16 peak x --mfu of --gpu). Every timing is a
 * median over --reps repetitions. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cblas.h>
#include <jansson.h>
#include <liburing.h>

#include "bench/bench.h"
#include "kvtier/device.h"
#include "kvtier/model.h"
#include "kvtier/store.h"

#define MAX_MODELS 16
#define MAX_SIZES 32
#define MAX_LINKS 16
/* break-even search stops here: "never" beyond it */
#define BREAK_EVEN_MAX (16ull << 20)

struct rc_args {
	const char *models[MAX_MODELS];
	size_t n_models;
	uint64_t sizes[MAX_SIZES];
	size_t n_sizes;
	const char *dir;
	const char *gpu;
	const char *svg;
	uint64_t bytes;         /* bytes moved per bandwidth measurement */
	uint32_t gemm_tokens;   /* rows of the CPU GEMMs */
	uint32_t block_tokens;  /* block size of the DRAM-tier measurement */
	double mfu;
	int reps;
	bool json, csv;
};

/* One way a prefix's KV reaches the GPU. */
struct link {
	const char *name;
	bool measured;
	double bw;             /* bytes/s; 0 = not available this run */
	double vs_memcpy;      /* measured / its reference, 0 if modeled */
	const char *what;
	const char *ref;       /* the reference of vs_memcpy: "memcpy" unless said */
	const char *error;     /* why a measured one has no figure this run */
	bool per_gpu;          /* each GPU of a TP group has its own (HBM, host link) */
	const char *pages;     /* the measured path's source pages, where it has one */
	const char *ref_pages; /* the reference's source pages */
};

struct model_run {
	struct kvt_model m;
	uint64_t kv_per_token;
	double cpu_flops;      /* measured GEMM FLOP/s at its layer shapes */
	double gpu_flops;      /* modeled: bf16 peak x mfu, x tp */
	uint32_t tp;           /* GPUs its weights and prefix need (tensor-parallel) */
	double kv_share;       /* of a block's KV, what each of those GPUs holds */
};

static void usage(FILE *f)
{
	fprintf(f,
"usage: kvtier-bench recompute [OPTIONS]\n"
"\n"
"Offload vs recompute: per model and interconnect, the time to load an n-token\n"
"prefix's KV cache against the time to recompute its prefill, the break-even\n"
"prefix length (loading is faster from there on), and the TTFT loading saves.\n"
"Measured here (medians, each with its ratio to a reference run alongside): the\n"
"DRAM tier (kvt_get from a store; vs memcpy), the raw SSD path (O_DIRECT\n"
"io_uring reads of a file under --dir; vs memcpy), the SSD tier (kvt_get of\n"
"blocks the store demoted to SSD under --dir; vs the raw path), TCP over\n"
"loopback (vs memcpy), host-to-GPU pinned copies where a GPU exists (vs the\n"
"link's PCIe spec), and CPU prefill (OpenBLAS sgemm at the model's layer\n"
"shapes). Modeled from public specs, and marked so in every output: HBM, PCIe\n"
"Gen4/Gen5 pinned, NVLink-C2C, local NVMe, RDMA 100/200/400 Gb/s, and GPU\n"
"prefill at --mfu of --gpu's dense bf16 peak (and host-to-GPU copies where no\n"
"GPU is found).\n"
"\n"
"options:\n"
"  --models LIST       comma-separated shipped names or config.json paths\n"
"                      (default Qwen3-8B,Llama-3.1-70B,DeepSeek-V3)\n"
"  --sizes LIST        prefix lengths in tokens, K suffix = x1024\n"
"                      (default 512,1K,2K,4K,8K,16K,32K,64K,128K)\n"
"  --gpu NAME          GPU whose HBM and bf16 peak are modeled (default H100-SXM;\n"
"                      'kvtier calc --list' shows the table); a model whose\n"
"                      weights and longest prefix do not fit one is modeled on\n"
"                      the tensor-parallel group it needs (said on stderr, and\n"
"                      as models[].tp)\n"
"  --mfu F             fraction of bf16 peak a GPU prefill sustains (default 0.5)\n"
"  --dir DIR           directory for the SSD file and the SSD tier's segments;\n"
"                      must allow O_DIRECT, so not tmpfs (default /var/tmp)\n"
"  --bytes SIZE        bytes per bandwidth measurement (default 64M)\n"
"  --block-tokens N    tokens per block in the DRAM-tier measurement (default 16)\n"
"  --gemm-tokens N     rows of the CPU GEMMs (default 32)\n"
"  --reps N            repetitions, the median is reported (default 3)\n"
"  --json              print one JSON object\n"
"  --csv               print CSV rows (one per model, path and length)\n"
"  --svg FILE          also write an SVG plot: time against prefix length,\n"
"                      log-log, one line per interconnect, one panel per model\n"
"  -h, --help          this text\n"
"\n"
"SIZE takes K, M, G suffixes (powers of 1024).\n");
}

static int parse_list(char *s, const char **out, size_t max, size_t *n)
{
	char *save = NULL;

	*n = 0;
	for (char *t = strtok_r(s, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (*n == max)
			return -E2BIG;
		out[(*n)++] = t;
	}
	return *n ? 0 : -EINVAL;
}

static int parse_args(int argc, char **argv, struct rc_args *a)
{
	static const struct option opts[] = {
		{ "models", required_argument, NULL, 'm' },
		{ "sizes", required_argument, NULL, 's' },
		{ "gpu", required_argument, NULL, 'g' },
		{ "mfu", required_argument, NULL, 'f' },
		{ "dir", required_argument, NULL, 'd' },
		{ "bytes", required_argument, NULL, 'b' },
		{ "block-tokens", required_argument, NULL, 'B' },
		{ "gemm-tokens", required_argument, NULL, 'G' },
		{ "reps", required_argument, NULL, 'r' },
		{ "json", no_argument, NULL, 'j' },
		{ "csv", no_argument, NULL, 'c' },
		{ "svg", required_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	static char models_dflt[] = "Qwen3-8B,Llama-3.1-70B,DeepSeek-V3";
	const char *sz[MAX_SIZES];
	uint64_t v;
	int c, err;

	memset(a, 0, sizeof(*a));
	a->dir = "/var/tmp";
	a->gpu = "H100-SXM";
	a->bytes = 64ull << 20;
	a->gemm_tokens = 32;
	a->block_tokens = 16;
	a->mfu = 0.5;
	a->reps = 3;
	parse_list(models_dflt, a->models, MAX_MODELS, &a->n_models);
	for (int i = 0; i < 9; i++)
		a->sizes[a->n_sizes++] = 512ull << i;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		err = 0;
		switch (c) {
		case 'm': err = parse_list(optarg, a->models, MAX_MODELS, &a->n_models); break;
		case 's':
			err = parse_list(optarg, sz, MAX_SIZES, &a->n_sizes);
			for (size_t i = 0; !err && i < a->n_sizes; i++) {
				err = kvt_bench_parse_size(sz[i], &a->sizes[i]);
				if (!err && !a->sizes[i])
					err = -EINVAL;
			}
			break;
		case 'g': a->gpu = optarg; break;
		case 'f':
			a->mfu = strtod(optarg, NULL);
			err = a->mfu > 0 && a->mfu <= 1 ? 0 : -EINVAL;
			break;
		case 'd': a->dir = optarg; break;
		case 'b':
			err = kvt_bench_parse_size(optarg, &a->bytes);
			if (!err && a->bytes < (1 << 20))
				err = -EINVAL;
			break;
		case 'B':
		case 'G':
			err = kvt_bench_parse_size(optarg, &v);
			if (!err && (!v || v > 65536))
				err = -EINVAL;
			*(c == 'B' ? &a->block_tokens : &a->gemm_tokens) = (uint32_t)v;
			break;
		case 'r':
			a->reps = atoi(optarg);
			err = a->reps > 0 ? 0 : -EINVAL;
			break;
		case 'j': a->json = true; break;
		case 'c': a->csv = true; break;
		case 'S': a->svg = optarg; break;
		case 'h': usage(stdout); exit(0);
		default: return -EINVAL;
		}
		if (err) {
			fprintf(stderr, "kvtier-bench recompute: bad value '%s'\n", optarg);
			return -EINVAL;
		}
	}
	if (optind != argc || (a->json && a->csv))
		return -EINVAL;
	/* sizes ascending, for the plot and the tables */
	for (size_t i = 1; i < a->n_sizes; i++)
		for (size_t j = i; j > 0 && a->sizes[j - 1] > a->sizes[j]; j--) {
			v = a->sizes[j];
			a->sizes[j] = a->sizes[j - 1];
			a->sizes[j - 1] = v;
		}
	return 0;
}

/* ---- measurements ------------------------------------------------------ */

/* Reference: memcpy of `bytes` out of a page-touched buffer, `chunk` bytes
 * (the DRAM tier's block) at a time into one chunk-sized buffer: the pattern
 * of the DRAM-tier measurement, which gets every block into one buffer. */
static double measure_memcpy(uint64_t bytes, uint64_t chunk, int reps)
{
	void *src = kvt_bench_alloc(bytes), *dst = kvt_bench_alloc(chunk);
	double t[64], bw = 0;
	int n = reps < 64 ? reps : 64;

	if (src && dst) {
		for (int r = 0; r < n; r++) {
			uint64_t t0 = kvt_now_ns(), off;
			for (off = 0; off + chunk <= bytes; off += chunk)
				memcpy(dst, (char *)src + off, chunk);
			t[r] = (double)off * 1e9 / (double)(kvt_now_ns() - t0);
		}
		bw = kvt_bench_median(t, (size_t)n);
	}
	kvt_bench_free(src, bytes);
	kvt_bench_free(dst, chunk);
	return bw;
}

/* The DRAM tier: blocks of the model's layout put into a real store, then
 * read back with kvt_get, all of them per repetition, each repetition right
 * after a memcpy pass of the same blocks from a buffer into the same
 * destination (*ref_bw: its median), so both see the same machine load.
 * The reference's source is in the kind of pages the tier's region is in
 * (tiers/dram.c: explicit huge pages when enough are reserved, else
 * transparent ones), named in *pages and *ref_pages: a reference on 4 KiB
 * pages made the tier look faster than memcpy. Returns B/s or -errno. */
static double measure_dram_tier(const struct kvt_model *m, uint32_t block_tokens,
				uint64_t bytes, int reps, double *ref_bw,
				const char **pages, const char **ref_pages)
{
	void *src = NULL;
	double tref[64];
	struct kvt_store_opts so;
	struct kvt_ns_desc d;
	struct kvt_store *st = NULL;
	struct kvt_ns *ns;
	struct kvt_key *keys = NULL;
	uint64_t bb, nblocks;
	void *buf = NULL;
	double t[64], bw;
	int n = reps < 64 ? reps : 64, err;

	kvt_model_ns_desc(m, KVT_DTYPE_BF16, block_tokens, &d);
	bb = kvt_ns_desc_block_bytes(&d);
	if (!bb)
		return -EINVAL;
	nblocks = bytes / bb ? bytes / bb : 1;
	kvt_store_opts_init(&so, sizeof(so));
	/* room for every block with slack, so nothing is evicted */
	so.dram_bytes = nblocks * bb + nblocks * bb / 4 + (64ull << 20);
	*pages = kvt_bench_huge_free() >= so.dram_bytes ? "hugetlb" : "thp";
	err = kvt_store_open(&so, &st);
	if (err)
		return err;
	err = kvt_ns_attach(st, &d, &ns);
	if (err)
		goto out;
	keys = calloc(nblocks, sizeof(*keys));
	buf = kvt_bench_alloc(bb);
	if (!strcmp(*pages, "hugetlb") && kvt_bench_huge_free() >= nblocks * bb)
		src = kvt_bench_region(nblocks * bb, true);
	*ref_pages = src ? "hugetlb" : "thp";
	if (!src)
		src = kvt_bench_alloc_pages(nblocks * bb, true);
	if (!keys || !buf || !src) {
		err = -ENOMEM;
		goto out;
	}
	for (uint64_t i = 0; i < nblocks; i++) {
		memcpy(keys[i].bytes, &i, sizeof(i));
		memset(buf, (int)i, 64);
		err = kvt_put(ns, &keys[i], i ? &keys[i - 1] : NULL, buf, bb);
		if (err)
			goto out;
	}
	for (int r = 0; r < n; r++) {
		uint64_t t0 = kvt_now_ns();
		for (uint64_t i = 0; i < nblocks; i++)
			memcpy(buf, (char *)src + i * bb, bb);
		tref[r] = (double)(nblocks * bb) * 1e9 / (double)(kvt_now_ns() - t0);
		t0 = kvt_now_ns();
		for (uint64_t i = 0; i < nblocks; i++) {
			err = kvt_get(ns, &keys[i], buf, bb);
			if (err)
				goto out;
		}
		t[r] = (double)(nblocks * bb) * 1e9 / (double)(kvt_now_ns() - t0);
	}
	err = 0;
out:
	bw = err ? err : kvt_bench_median(t, (size_t)n);
	*ref_bw = err ? 0 : kvt_bench_median(tref, (size_t)n);
	kvt_bench_free(src, nblocks * bb);
	kvt_bench_free(buf, bb);
	free(keys);
	kvt_store_close(st);
	return bw;
}

/* The SSD path: a file of `bytes` under dir, written, then read whole with
 * O_DIRECT through io_uring, 1 MiB requests, 16 in flight. Returns B/s or
 * -errno (-EINVAL: the filesystem refuses O_DIRECT). */
static double measure_ssd(const char *dir, uint64_t bytes, int reps)
{
	enum { CHUNK = 1 << 20, QD = 16 };
	struct io_uring ring;
	char path[4096];
	void *bufs[QD] = { NULL };
	double t[64], bw;
	int n = reps < 64 ? reps : 64, fd = -1, err;
	bool ring_ok = false;
	uint64_t nchunks = bytes / CHUNK;

	snprintf(path, sizeof(path), "%s/kvtier-bench-recompute.XXXXXX", dir);
	fd = mkstemp(path);
	if (fd < 0)
		return -errno;
	unlink(path);
	for (int i = 0; i < QD; i++) {
		if (posix_memalign(&bufs[i], 4096, CHUNK)) {
			err = -ENOMEM;
			goto out;
		}
		memset(bufs[i], 0xa5 + i, CHUNK);
	}
	for (uint64_t c = 0; c < nchunks; c++)
		if (pwrite(fd, bufs[c % QD], CHUNK, (off_t)(c * CHUNK)) != CHUNK) {
			err = -EIO;
			goto out;
		}
	if (fsync(fd)) {
		err = -errno;
		goto out;
	}
	/* reopen the same inode with O_DIRECT, so the page cache is bypassed */
	{
		char proc[64];
		int dfd;

		snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
		dfd = open(proc, O_RDONLY | O_DIRECT);
		if (dfd < 0) {
			err = -errno;
			goto out;
		}
		close(fd);
		fd = dfd;
	}
	err = io_uring_queue_init(QD, &ring, 0);
	if (err)
		goto out;
	ring_ok = true;
	for (int r = 0; r < n; r++) {
		uint64_t t0 = kvt_now_ns(), next = 0, done = 0;
		unsigned inflight = 0;

		while (done < nchunks) {
			while (inflight < QD && next < nchunks) {
				struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
				io_uring_prep_read(sqe, fd, bufs[next % QD], CHUNK, next * CHUNK);
				io_uring_sqe_set_data64(sqe, next);
				next++;
				inflight++;
			}
			io_uring_submit(&ring);
			struct io_uring_cqe *cqe;
			err = io_uring_wait_cqe(&ring, &cqe);
			if (err)
				goto out;
			if (cqe->res != CHUNK) {
				err = cqe->res < 0 ? cqe->res : -EIO;
				io_uring_cqe_seen(&ring, cqe);
				goto out;
			}
			io_uring_cqe_seen(&ring, cqe);
			inflight--;
			done++;
		}
		t[r] = (double)(nchunks * CHUNK) * 1e9 / (double)(kvt_now_ns() - t0);
	}
	err = 0;
out:
	bw = err ? err : kvt_bench_median(t, (size_t)n);
	if (ring_ok)
		io_uring_queue_exit(&ring);
	for (int i = 0; i < QD; i++)
		free(bufs[i]);
	if (fd >= 0)
		close(fd);
	return bw;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(path);
}

/* The SSD tier through the store: blocks of the model's layout put into a
 * store whose DRAM tier holds an eighth of them, so the demoter moves the
 * rest to SSD (a fresh directory under dir); then, per repetition, the
 * blocks a lookup reports on SSD are read back with kvt_get (which may
 * promote them). Returns B/s or -errno. */
static double measure_ssd_tier(const struct kvt_model *m, uint32_t block_tokens, const char *dir,
			       uint64_t bytes, int reps)
{
	struct kvt_store_opts so;
	struct kvt_store_stats st;
	struct kvt_ns_desc d;
	struct kvt_store *store = NULL;
	struct kvt_ns *ns;
	struct kvt_key *keys = NULL;
	uint8_t *tiers = NULL;
	char sub[4096];
	uint64_t bb, nblocks, last = UINT64_MAX;
	void *buf = NULL;
	double t[64], bw;
	int n = reps < 64 ? reps : 64, err;

	kvt_model_ns_desc(m, KVT_DTYPE_BF16, block_tokens, &d);
	bb = kvt_ns_desc_block_bytes(&d);
	if (!bb)
		return -EINVAL;
	nblocks = bytes / bb > 8 ? bytes / bb : 8;
	snprintf(sub, sizeof(sub), "%s/kvtier-bench-ssd-tier.XXXXXX", dir);
	if (!mkdtemp(sub))
		return -errno;
	kvt_store_opts_init(&so, sizeof(so));
	so.dram_bytes = (nblocks / 8 + 2) * bb + (8ull << 20);
	so.ssd_dir = sub;
	so.ssd_bytes = 2 * nblocks * bb + (256ull << 20);
	so.ssd_segment_bytes = 64ull << 20;
	err = kvt_store_open(&so, &store);
	if (err)
		goto out;
	err = kvt_ns_attach(store, &d, &ns);
	if (err)
		goto out;
	keys = calloc(nblocks, sizeof(*keys));
	tiers = calloc(nblocks, 1);
	buf = kvt_bench_alloc(bb);
	if (!keys || !tiers || !buf) {
		err = -ENOMEM;
		goto out;
	}
	for (uint64_t i = 0; i < nblocks; i++) {
		memcpy(keys[i].bytes, &i, sizeof(i));
		memset(buf, (int)i, 64);
		err = kvt_put(ns, &keys[i], i ? &keys[i - 1] : NULL, buf, bb);
		if (err)
			goto out;
	}
	/* let the demoter settle: SSD block count unchanged for 50 ms (<= 10 s) */
	for (int i = 0; i < 200; i++) {
		struct timespec ts = { 0, 50 * 1000 * 1000 };
		st.size = sizeof(st);
		err = kvt_store_stats(store, &st);
		if (err)
			goto out;
		if (st.tier[KVT_TIER_SSD].blocks == last)
			break;
		last = st.tier[KVT_TIER_SSD].blocks;
		nanosleep(&ts, NULL);
	}
	for (int r = 0; r < n; r++) {
		uint64_t t0, moved = 0;
		int got = kvt_lookup(ns, keys, nblocks, tiers);

		if (got < 0) {
			err = got;
			goto out;
		}
		t0 = kvt_now_ns();
		for (uint64_t i = 0; i < (uint64_t)got; i++) {
			if (tiers[i] != KVT_TIER_SSD)
				continue;
			err = kvt_get(ns, &keys[i], buf, bb);
			if (err)
				goto out;
			moved += bb;
		}
		if (!moved) {
			err = -ENODATA; /* nothing reached the SSD tier */
			goto out;
		}
		t[r] = (double)moved * 1e9 / (double)(kvt_now_ns() - t0);
	}
	err = 0;
out:
	bw = err ? err : kvt_bench_median(t, (size_t)n);
	kvt_bench_free(buf, bb);
	free(tiers);
	free(keys);
	kvt_store_close(store);
	/* the segment files, then the directory */
	if (nftw(sub, rm_entry, 16, FTW_DEPTH | FTW_PHYS))
		fprintf(stderr, "kvtier-bench recompute: could not remove %s\n", sub);
	return bw;
}

/* Host to GPU: pinned host memory to device memory with kvt_dev_copy_async,
 * `bytes` per repetition, where the device layer finds a GPU. Returns B/s,
 * 0 without a GPU (*why says so), or -errno; *link_bw is the spec rate of
 * the PCIe link the GPU reports (0 if unknown). */
static double measure_h2d(uint64_t bytes, int reps, double *link_bw, char *why, size_t why_len)
{
	struct kvt_dev_opts o;
	struct kvt_dev_info info = { .size = sizeof(info) };
	struct kvt_dev *dev = NULL;
	struct kvt_dev_mem *mem = NULL;
	struct kvt_dev_stream *st = NULL;
	struct kvt_dev_event *ev = NULL;
	void *host = NULL;
	double t[64], bw = 0;
	int n = reps < 64 ? reps : 64, err;

	*link_bw = 0;
	kvt_dev_opts_init(&o, sizeof(o));
	o.backend = KVT_DEV_CUDA;
	err = kvt_dev_open(&o, &dev);
	if (err) {
		snprintf(why, why_len, "no GPU here (%s): modeled", kvt_strerror(err));
		return 0;
	}
	err = kvt_dev_info(dev, &info);
	if (err)
		goto out;
	*link_bw = kvt_pcie_bw((uint32_t)info.pcie_gen) * (info.pcie_width > 0 ? info.pcie_width : 16) / 16;
	snprintf(why, why_len, "%s, PCIe Gen%d x%d: pinned host to device", info.name, info.pcie_gen,
		 info.pcie_width);
	err = kvt_dev_host_alloc(dev, bytes, 0, &host);
	if (!err)
		err = kvt_dev_mem_alloc(dev, bytes, &mem);
	if (!err)
		err = kvt_dev_stream_create(dev, true, &st);
	if (!err)
		err = kvt_dev_event_create(dev, &ev);
	if (err)
		goto out;
	/* one untimed copy: first-touch and context warm-up are not the link */
	err = kvt_dev_copy_async(st, kvt_dev_mem_ptr(mem), host, bytes);
	if (!err)
		err = kvt_dev_stream_sync(st);
	for (int r = 0; !err && r < n; r++) {
		uint64_t t0 = kvt_now_ns();
		err = kvt_dev_copy_async(st, kvt_dev_mem_ptr(mem), host, bytes);
		if (!err)
			err = kvt_dev_event_record(ev, st);
		if (!err)
			err = kvt_dev_event_wait(ev);
		t[r] = (double)bytes * 1e9 / (double)(kvt_now_ns() - t0);
	}
	if (!err)
		bw = kvt_bench_median(t, (size_t)n);
out:
	kvt_dev_event_destroy(ev);
	kvt_dev_stream_destroy(st);
	kvt_dev_mem_free(mem);
	kvt_dev_host_free(dev, host);
	kvt_dev_close(dev);
	return err ? err : bw;
}

/* The (K, N) of each linear op of one layer, as the prefill runs them on m
 * tokens: C[m x N] = A[m x K] B[K x N]. MoE experts are one GEMM as wide as
 * the experts a token uses (same FLOPs; real grouped GEMMs do a bit worse). */
static size_t layer_shapes(const struct kvt_model *m, uint32_t k[12], uint32_t n[12])
{
	size_t i = 0;
	uint32_t h = m->hidden;
	bool moe = m->moe_layers > 0;
	uint32_t mlp = moe ? m->experts_per_tok * m->expert_intermediate + m->shared_intermediate
			   : m->intermediate;

#define OP(kk, nn) (k[i] = (kk), n[i] = (nn), i++)
	if (m->kv_lora_rank) {
		uint32_t qk = m->qk_nope_head_dim + m->qk_rope_head_dim;
		if (m->q_lora_rank) {
			OP(h, m->q_lora_rank);
			OP(m->q_lora_rank, m->heads * qk);
		} else {
			OP(h, m->heads * qk);
		}
		OP(h, m->kv_lora_rank + m->qk_rope_head_dim);
		OP(m->kv_lora_rank, m->heads * (m->qk_nope_head_dim + m->v_head_dim));
		OP(m->heads * m->v_head_dim, h);
	} else {
		OP(h, (m->heads + 2 * m->kv_heads) * m->head_dim); /* fused q, k, v */
		OP(m->heads * m->head_dim, h);
	}
	OP(h, 2 * mlp); /* gate and up */
	OP(mlp, h);     /* down */
#undef OP
	return i;
}

/* Sustained sgemm FLOP/s over one layer's linear ops at m tokens. Wide
 * weights are done in column tiles of 1024 so the B buffer stays small; the
 * FLOPs are the same. Returns FLOP/s or -errno. */
static double measure_gemm(const struct kvt_model *m, uint32_t tokens, int reps)
{
	enum { TILE = 1024 };
	uint32_t k[12], n[12], maxk = 0;
	size_t ops = layer_shapes(m, k, n);
	float *a, *b, *c;
	double t[64], flops = 0;
	int nr = reps < 64 ? reps : 64;

	for (size_t i = 0; i < ops; i++) {
		maxk = k[i] > maxk ? k[i] : maxk;
		flops += 2.0 * tokens * k[i] * n[i];
	}
	a = malloc((size_t)tokens * maxk * sizeof(float));
	b = malloc((size_t)maxk * TILE * sizeof(float));
	c = malloc((size_t)tokens * TILE * sizeof(float));
	if (!a || !b || !c) {
		free(a);
		free(b);
		free(c);
		return -ENOMEM;
	}
	for (size_t i = 0; i < (size_t)tokens * maxk; i++)
		a[i] = (float)(i % 13) * 0.01f;
	for (size_t i = 0; i < (size_t)maxk * TILE; i++)
		b[i] = (float)(i % 7) * 0.01f;
	/* one untimed pass: thread pool start-up is not the GEMM's cost */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)tokens, TILE, (int)maxk,
		    1.0f, a, (int)maxk, b, TILE, 0.0f, c, TILE);
	for (int r = 0; r < nr; r++) {
		uint64_t t0 = kvt_now_ns();
		for (size_t i = 0; i < ops; i++)
			for (uint32_t col = 0; col < n[i]; col += TILE) {
				int w = (int)(n[i] - col < TILE ? n[i] - col : TILE);
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)tokens,
					    w, (int)k[i], 1.0f, a, (int)k[i], b, w, 0.0f, c, w);
			}
		t[r] = flops * 1e9 / (double)(kvt_now_ns() - t0);
	}
	free(a);
	free(b);
	free(c);
	return kvt_bench_median(t, (size_t)nr);
}

/* ---- the model --------------------------------------------------------- */

/* Over a path each GPU has its own of, a TP group loads its shares at once. */
static double load_s(const struct model_run *mr, const struct link *l, uint64_t tokens)
{
	return (double)(tokens * mr->kv_per_token) * (l->per_gpu ? mr->kv_share : 1) / l->bw;
}

static double recompute_s(const struct model_run *mr, double flops_s, uint64_t tokens)
{
	return kvt_model_prefill_flops(&mr->m, 0, tokens) / flops_s;
}

/* Shortest prefix (tokens) from which loading over l beats recomputing at
 * flops_s: recompute per token grows with length (attention), loading per
 * token does not, so past one crossing loading stays ahead. -1: not within
 * BREAK_EVEN_MAX tokens. */
static int64_t break_even(const struct model_run *mr, const struct link *l, double flops_s)
{
	uint64_t lo = 1, hi = BREAK_EVEN_MAX;

	if (load_s(mr, l, 1) <= recompute_s(mr, flops_s, 1))
		return 1;
	if (load_s(mr, l, hi) > recompute_s(mr, flops_s, hi))
		return -1;
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (load_s(mr, l, mid) <= recompute_s(mr, flops_s, mid))
			hi = mid;
		else
			lo = mid;
	}
	return (int64_t)hi;
}

/* ---- output ------------------------------------------------------------ */

static const char *tok_str(uint64_t n, char *buf, size_t len)
{
	if (n >= 1024 && n % 1024 == 0)
		snprintf(buf, len, "%lluK", (unsigned long long)(n / 1024));
	else
		snprintf(buf, len, "%llu", (unsigned long long)n);
	return buf;
}

static const char *time_str(double s, char *buf, size_t len)
{
	if (s >= 100)
		snprintf(buf, len, "%.0fs", s);
	else if (s >= 1)
		snprintf(buf, len, "%.2fs", s);
	else if (s >= 1e-3)
		snprintf(buf, len, "%.2fms", s * 1e3);
	else
		snprintf(buf, len, "%.1fus", s * 1e6);
	return buf;
}

static void print_table(const struct rc_args *a, const struct kvt_gpu *gpu, double memcpy_bw,
			const struct link *links, size_t n_links, const struct model_run *runs)
{
	char b[32], t[32];

	printf("reference: memcpy %.2f GB/s (measured: %s in %s blocks, median of %d)\n",
	       memcpy_bw / 1e9, kvt_fmt_bytes(a->bytes, b, sizeof(b)),
	       kvt_fmt_bytes(a->block_tokens * runs[0].kv_per_token, t, sizeof(t)),
	       a->reps);
	printf("paths (B/s into GPU memory; measured ones also as a ratio to a reference):\n");
	for (size_t i = 0; i < n_links; i++) {
		if (links[i].bw > 0)
			printf("  %-14s %8.2f GB/s  %-8s", links[i].name, links[i].bw / 1e9,
			       links[i].measured ? "measured" : "modeled");
		else if (links[i].error)
			printf("  %-14s %13s  %-8s", links[i].name, "failed", "measured");
		else
			printf("  %-14s %13s  %-8s", links[i].name, "n/a", "measured");
		if (links[i].measured && links[i].bw > 0 && links[i].vs_memcpy > 0)
			printf(" %5.2fx %-8s", links[i].vs_memcpy,
			       links[i].ref ? links[i].ref : "memcpy");
		else
			printf(" %15s", "");
		if (links[i].error)
			printf("  %s: %s\n", links[i].what, links[i].error);
		else
			printf("  %s\n", links[i].what);
	}
	for (size_t mi = 0; mi < a->n_models; mi++) {
		const struct model_run *mr = &runs[mi];

		printf("\n%s: %llu B/token KV (bf16); recompute on %u x %s at %.0f%% of %.0f TFLOP/s "
		       "= %.0f TFLOP/s (modeled); on this CPU %.1f GFLOP/s (measured, OpenBLAS "
		       "sgemm at %u tokens)\n",
		       mr->m.name, (unsigned long long)mr->kv_per_token, mr->tp, gpu->name,
		       a->mfu * 100, gpu->bf16_flops * mr->tp / 1e12, mr->gpu_flops / 1e12,
		       mr->cpu_flops / 1e9, a->gemm_tokens);
		if (mr->tp > 1)
			printf("  tensor-parallel: the weights and a %s prefix need %u GPUs; each "
			       "loads its share over its own HBM and host link\n",
			       tok_str(a->sizes[a->n_sizes - 1], t, sizeof(t)), mr->tp);
		printf("  %-24s", "prefix tokens");
		for (size_t s = 0; s < a->n_sizes; s++)
			printf(" %8s", tok_str(a->sizes[s], t, sizeof(t)));
		printf("  %s\n", "break-even vs GPU");
		printf("  %-24s", "recompute GPU (modeled)");
		for (size_t s = 0; s < a->n_sizes; s++)
			printf(" %8s", time_str(recompute_s(mr, mr->gpu_flops, a->sizes[s]), b,
						sizeof(b)));
		printf("\n  %-24s", "recompute CPU (measured)");
		for (size_t s = 0; s < a->n_sizes; s++)
			printf(" %8s", time_str(recompute_s(mr, mr->cpu_flops, a->sizes[s]), b,
						sizeof(b)));
		printf("\n");
		for (size_t i = 0; i < n_links; i++) {
			const struct link *l = &links[i];
			int64_t be;
			char name[40];

			if (!(l->bw > 0))
				continue;
			snprintf(name, sizeof(name), "load %s (%s)", l->name,
				 l->measured ? "meas." : "model");
			printf("  %-24s", name);
			for (size_t s = 0; s < a->n_sizes; s++)
				printf(" %8s", time_str(load_s(mr, l, a->sizes[s]), b, sizeof(b)));
			be = break_even(mr, l, mr->gpu_flops);
			if (be == 1)
				printf("  always load\n");
			else if (be < 0)
				printf("  recompute (< %lluM)\n",
				       (unsigned long long)(BREAK_EVEN_MAX >> 20));
			else
				printf("  load from %s\n", tok_str((uint64_t)be, t, sizeof(t)));
		}
		printf("  TTFT saved by loading at %s (GPU recompute - load):",
		       tok_str(a->sizes[a->n_sizes - 1], t, sizeof(t)));
		for (size_t i = 0, col = 0; i < n_links; i++) {
			uint64_t n = a->sizes[a->n_sizes - 1];
			double saved;
			if (!(links[i].bw > 0))
				continue;
			saved = recompute_s(mr, mr->gpu_flops, n) - load_s(mr, &links[i], n);
			printf("%s %s %s", col++ % 4 ? "," : "\n   ", links[i].name,
			       saved > 0 ? time_str(saved, b, sizeof(b)) : "none");
		}
		printf("\n");
	}
	printf("\nmodeled: from public specs (no such hardware here); measured: on this machine.\n"
	       "Load = prefix KV bytes / path bandwidth; recompute = prefill FLOPs (linear layers\n"
	       "+ causal attention) / FLOP/s. \"none\": recomputing is faster there.\n");
}

static json_t *points_json(const struct rc_args *a, const struct model_run *mr,
			   const struct link *l, double flops_s)
{
	json_t *arr = json_array();

	for (size_t s = 0; s < a->n_sizes; s++) {
		uint64_t n = a->sizes[s];
		double rc = recompute_s(mr, mr->gpu_flops, n);

		if (l) {
			double ld = load_s(mr, l, n);
			json_array_append_new(arr, json_pack("{s:I, s:f, s:f, s:f, s:f, s:f}",
				"tokens", (json_int_t)n, "load_s", ld, "recompute_s", rc,
				"recompute_cpu_s", recompute_s(mr, mr->cpu_flops, n),
				"ttft_saved_s", rc - ld, "load_over_recompute", ld / rc));
		} else {
			json_array_append_new(arr, json_pack("{s:I, s:f}", "tokens", (json_int_t)n,
				"seconds", recompute_s(mr, flops_s, n)));
		}
	}
	return arr;
}

static int print_json(const struct rc_args *a, const struct kvt_gpu *gpu, double memcpy_bw,
		      const struct link *links, size_t n_links, const struct model_run *runs)
{
	json_t *root, *models = json_array(), *paths = json_array();

	for (size_t i = 0; i < n_links; i++)
		json_array_append_new(paths, json_pack("{s:s, s:s, s:f, s:f, s:s, s:s, s:s?, s:b, s:s?, s:s?}",
			"name", links[i].name, "source", links[i].measured ? "measured" : "modeled",
			"bytes_per_s", links[i].bw > 0 ? links[i].bw : 0.0,
			"vs_reference", links[i].vs_memcpy,
			"reference", links[i].ref ? links[i].ref : "memcpy", "what", links[i].what,
			"error", links[i].error, "per_gpu", links[i].per_gpu,
			"pages", links[i].pages, "reference_pages", links[i].ref_pages));
	for (size_t mi = 0; mi < a->n_models; mi++) {
		const struct model_run *mr = &runs[mi];
		json_t *ls = json_array();

		for (size_t i = 0; i < n_links; i++) {
			if (!(links[i].bw > 0))
				continue;
			json_array_append_new(ls, json_pack("{s:s, s:s, s:f, s:I, s:o}",
				"name", links[i].name,
				"source", links[i].measured ? "measured" : "modeled",
				"bytes_per_s", links[i].bw,
				"break_even_tokens", (json_int_t)break_even(mr, &links[i], mr->gpu_flops),
				"points", points_json(a, mr, &links[i], 0)));
		}
		json_array_append_new(models, json_pack("{s:s, s:I, s:I, s:I, s:I, s:[{s:s, s:s, s:f, s:o},"
			" {s:s, s:s, s:f, s:I, s:f, s:o}], s:o}",
			"name", mr->m.name, "kv_bytes_per_token", (json_int_t)mr->kv_per_token,
			"tp", (json_int_t)mr->tp,
			"params_total", (json_int_t)kvt_model_params_total(&mr->m),
			"params_active", (json_int_t)kvt_model_params_active(&mr->m),
			"recompute",
			"name", "gpu", "source", "modeled", "flops_per_s", mr->gpu_flops,
			"points", points_json(a, mr, NULL, mr->gpu_flops),
			"name", "cpu-openblas", "source", "measured", "flops_per_s", mr->cpu_flops,
			"gemm_tokens", (json_int_t)a->gemm_tokens,
			"cpu_over_gpu", mr->cpu_flops / mr->gpu_flops,
			"points", points_json(a, mr, NULL, mr->cpu_flops),
			"interconnects", ls));
	}
	root = json_pack("{s:s, s:s, s:f, s:f, s:f, s:I, s:i, s:f, s:o, s:o}",
		"bench", "recompute", "gpu", gpu->name, "gpu_bf16_flops", gpu->bf16_flops,
		"gpu_mem_bw", gpu->mem_bw, "mfu", a->mfu, "bytes", (json_int_t)a->bytes,
		"reps", a->reps, "memcpy_bytes_per_s", memcpy_bw, "paths", paths, "models", models);
	if (!root)
		return -ENOMEM;
	json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
	putchar('\n');
	json_decref(root);
	return 0;
}

static void print_csv(const struct rc_args *a, const struct link *links, size_t n_links,
		      const struct model_run *runs)
{
	printf("model,kind,path,source,rate,tokens,seconds,recompute_gpu_s,ttft_saved_s,"
	       "break_even_tokens\n");
	for (size_t mi = 0; mi < a->n_models; mi++) {
		const struct model_run *mr = &runs[mi];

		for (size_t s = 0; s < a->n_sizes; s++) {
			uint64_t n = a->sizes[s];
			double rc = recompute_s(mr, mr->gpu_flops, n);

			printf("%s,recompute,gpu,modeled,%.6g,%llu,%.6g,%.6g,0,\n", mr->m.name,
			       mr->gpu_flops, (unsigned long long)n, rc, rc);
			printf("%s,recompute,cpu-openblas,measured,%.6g,%llu,%.6g,%.6g,,\n",
			       mr->m.name, mr->cpu_flops, (unsigned long long)n,
			       recompute_s(mr, mr->cpu_flops, n), rc);
			for (size_t i = 0; i < n_links; i++) {
				double ld;
				if (!(links[i].bw > 0))
					continue;
				ld = load_s(mr, &links[i], n);
				printf("%s,load,%s,%s,%.6g,%llu,%.6g,%.6g,%.6g,%lld\n", mr->m.name,
				       links[i].name, links[i].measured ? "measured" : "modeled",
				       links[i].bw, (unsigned long long)n, ld, rc, rc - ld,
				       (long long)break_even(mr, &links[i], mr->gpu_flops));
			}
		}
	}
}

/* A token count for a label: 604K, 1.3M. */
static const char *count_str(int64_t n, char *buf, size_t len)
{
	if (n >= 1000000)
		snprintf(buf, len, "%.1fM", (double)n / 1e6);
	else if (n >= 10000)
		snprintf(buf, len, "%.0fK", (double)n / 1e3);
	else
		snprintf(buf, len, "%lld", (long long)n);
	return buf;
}

/* Hand-written SVG: one panel per model, log-log axes (tokens, seconds), a
 * polyline per path's load time and the two recompute curves. The time axis
 * spans the GPU recompute and the loads, which is where the decision lies;
 * the CPU recompute (hours on a CPU) is clipped at the top instead of
 * squeezing the rest into a corner, and its legend says where it is. A
 * circle marks where each path's load becomes faster than the GPU
 * recompute (its break-even), and the legend gives the length. */
static int write_svg(const struct rc_args *a, const struct kvt_gpu *gpu,
		     const struct link *links, size_t n_links, const struct model_run *runs)
{
	static const char *colors[] = { "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
					"#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
					"#393b79", "#637939", "#8c6d31", "#843c39" };
	const double W = 1000, PH = 400, L = 84, R = 370, T = 40, B = 50;
	uint64_t first = a->sizes[0], last = a->sizes[a->n_sizes - 1];
	double x0 = log10((double)first), x1 = log10((double)last);
	FILE *f = fopen(a->svg, "w");
	char b[32], c[32];

	if (!f)
		return -errno;
	if (x1 <= x0)
		x1 = x0 + 1;
	fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
		   "font-family=\"sans-serif\" font-size=\"11\">\n"
		   "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
		W, PH * (double)a->n_models);
	for (size_t mi = 0; mi < a->n_models; mi++) {
		const struct model_run *mr = &runs[mi];
		double oy = PH * (double)mi, pw = W - L - R, ph = PH - T - B;
		double ymin = INFINITY, ymax = 0, y0, y1;
		size_t col = 0;

		/* y range over the GPU recompute and the loads */
		for (size_t s = 0; s < a->n_sizes; s++) {
			double v = recompute_s(mr, mr->gpu_flops, a->sizes[s]);

			ymin = fmin(ymin, v);
			ymax = fmax(ymax, v);
			for (size_t i = 0; i < n_links; i++)
				if (links[i].bw > 0) {
					ymin = fmin(ymin, load_s(mr, &links[i], a->sizes[s]));
					ymax = fmax(ymax, load_s(mr, &links[i], a->sizes[s]));
				}
		}
		y0 = floor(log10(ymin));
		y1 = ceil(log10(ymax));
		if (y1 <= y0)
			y1 = y0 + 1;
#define PX(x) (L + (log10(x) - x0) / (x1 - x0) * pw)
#define PY(y) (oy + T + ph - (log10(y) - y0) / (y1 - y0) * ph)
		fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"14\">%s: load vs recompute "
			   "(recompute GPU: %s at %.0f%% peak, modeled; o = break-even)</text>\n",
			L, oy + 22, mr->m.name, gpu->name, a->mfu * 100);
		fprintf(f, "<clipPath id=\"plot%zu\"><rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" "
			   "height=\"%.0f\"/></clipPath>\n", mi, L, oy + T, pw, ph);
		fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" "
			   "stroke=\"#444\"/>\n", L, oy + T, pw, ph);
		for (size_t s = 0; s < a->n_sizes; s++)
			fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
				   "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
				PX((double)a->sizes[s]), oy + T, PX((double)a->sizes[s]), oy + T + ph,
				PX((double)a->sizes[s]), oy + T + ph + 15,
				tok_str(a->sizes[s], b, sizeof(b)));
		for (double e = y0; e <= y1 + 1e-9; e++)
			fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
				   "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
				L, PY(pow(10, e)), L + pw, PY(pow(10, e)), L - 5, PY(pow(10, e)) + 4,
				time_str(pow(10, e), b, sizeof(b)));
		fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">prefix tokens (log)</text>\n",
			L + pw / 2, oy + T + ph + 32);
		fprintf(f, "<text transform=\"translate(14 %.0f) rotate(-90)\" text-anchor=\"middle\">"
			   "time (log)</text>\n", oy + T + ph / 2);
		for (size_t i = 0; i < n_links + 2; i++) {
			const char *name, *src, *color, *dash = "";
			double width = 1.5, flops = 0;
			const struct link *l = NULL;
			char note[96] = "";

			if (i < n_links) {
				int64_t be;

				l = &links[i];
				if (!(l->bw > 0))
					continue;
				name = l->name;
				src = l->measured ? "measured" : "modeled";
				color = colors[col % (sizeof(colors) / sizeof(colors[0]))];
				dash = l->measured ? "" : " stroke-dasharray=\"5,3\"";
				be = break_even(mr, l, mr->gpu_flops);
				if (be < 0 || (uint64_t)be > last)
					snprintf(note, sizeof(note), ": recompute up to %s",
						 tok_str(last, b, sizeof(b)));
				else if ((uint64_t)be <= first)
					snprintf(note, sizeof(note), ": always load");
				else
					snprintf(note, sizeof(note), ": load from %s",
						 count_str(be, c, sizeof(c)));
				if (be > 0 && (uint64_t)be > first && (uint64_t)be <= last)
					fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"white\" "
						   "stroke=\"%s\" stroke-width=\"2\"/>\n", PX((double)be),
						PY(load_s(mr, l, (uint64_t)be)), color);
			} else if (i == n_links) {
				name = "recompute GPU";
				src = "modeled";
				color = "#000";
				width = 3;
				flops = mr->gpu_flops;
				dash = " stroke-dasharray=\"8,3\"";
			} else {
				name = "recompute CPU";
				src = "measured";
				color = "#000";
				width = 3;
				flops = mr->cpu_flops;
				if (recompute_s(mr, flops, first) > pow(10, y1))
					snprintf(note, sizeof(note), ": off the top, from %s",
						 time_str(recompute_s(mr, flops, first), b, sizeof(b)));
			}
			fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\"%s "
				   "clip-path=\"url(#plot%zu)\" points=\"", color, width, dash, mi);
			for (size_t s = 0; s < a->n_sizes; s++) {
				double v = l ? load_s(mr, l, a->sizes[s])
					     : recompute_s(mr, flops, a->sizes[s]);
				fprintf(f, "%.1f,%.1f ", PX((double)a->sizes[s]), PY(v));
			}
			fprintf(f, "\"/>\n<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" "
				   "stroke=\"%s\" stroke-width=\"%.1f\"%s/><text x=\"%.0f\" y=\"%.0f\">"
				   "%s (%s)%s</text>\n",
				L + pw + 12, oy + T + 8 + 16.0 * (double)col, L + pw + 36,
				oy + T + 8 + 16.0 * (double)col, color, width, dash, L + pw + 42,
				oy + T + 12 + 16.0 * (double)col, name, src, note);
			col++;
		}
#undef PX
#undef PY
	}
	fprintf(f, "</svg>\n");
	return fclose(f) ? -errno : 0;
}

/* The tensor-parallel degree (a power of two up to 64) mr needs on gpu: the
 * least whose GPUs hold its weights (in its own dtype) and one
 * `tokens`-token prefix, as `kvtier calc` sizes them. 0, or -ENOSPC. */
static int pick_tp(struct model_run *mr, const struct kvt_gpu *gpu, uint64_t tokens)
{
	for (uint32_t tp = 1; tp <= 64; tp *= 2) {
		struct kvt_sizing_opts so;
		struct kvt_sizing s;

		kvt_sizing_opts_init(&so, sizeof(so));
		so.tp = tp;
		so.context = tokens;
		if (kvt_model_size(&mr->m, gpu, &so, &s) == 0 && s.users_fit >= 1) {
			mr->tp = tp;
			mr->kv_share = mr->m.kv_lora_rank ? 1.0 : mr->m.kv_heads >= tp ? 1.0 / tp :
				       1.0 / mr->m.kv_heads;
			return 0;
		}
	}
	return -ENOSPC;
}

/* ---- main -------------------------------------------------------------- */

int kvt_bench_recompute_main(int argc, char **argv)
{
	struct rc_args a;
	struct model_run runs[MAX_MODELS];
	struct link links[MAX_LINKS];
	struct kvt_gpu gpu;
	size_t nl = 0;
	double memcpy_bw, v;
	int err;

	if (parse_args(argc, argv, &a)) {
		usage(stderr);
		return 2;
	}
	if (kvt_gpu_find(a.gpu, NULL, &gpu)) {
		fprintf(stderr, "kvtier-bench recompute: unknown GPU '%s'\n", a.gpu);
		return 2;
	}
	for (size_t i = 0; i < a.n_models; i++) {
		err = kvt_model_load(a.models[i], &runs[i].m);
		if (err) {
			fprintf(stderr, "kvtier-bench recompute: model '%s': %s\n", a.models[i],
				kvt_strerror(err));
			return 1;
		}
		runs[i].kv_per_token = kvt_model_kv_bytes_per_token(&runs[i].m, KVT_DTYPE_BF16);
		err = pick_tp(&runs[i], &gpu, a.sizes[a.n_sizes - 1]);
		if (err) {
			fprintf(stderr, "kvtier-bench recompute: %s does not fit %s GPUs at %llu "
				"tokens even 64 to a group; choose another --gpu or fewer --sizes\n",
				runs[i].m.name, gpu.name, (unsigned long long)a.sizes[a.n_sizes - 1]);
			return 1;
		}
		if (runs[i].tp > 1)
			fprintf(stderr, "kvtier-bench recompute: %s needs %u x %s (tensor-parallel%s): "
				"its weights and a %llu-token prefix do not fit fewer; modeled so\n",
				runs[i].m.name, runs[i].tp, gpu.name,
				runs[i].tp > 8 ? ", more than one node of 8" : "",
				(unsigned long long)a.sizes[a.n_sizes - 1]);
		runs[i].gpu_flops = gpu.bf16_flops * a.mfu * runs[i].tp;
	}

	/* the reference copies in blocks of the first model's DRAM-tier block */
	memcpy_bw = measure_memcpy(a.bytes, a.block_tokens * runs[0].kv_per_token, a.reps);
	if (!(memcpy_bw > 0)) {
		fprintf(stderr, "kvtier-bench recompute: cannot allocate 2 x %llu bytes\n",
			(unsigned long long)a.bytes);
		return 1;
	}
#define MODELED(n, b, w) (links[nl++] = (struct link){ n, false, b, 0, w, NULL, NULL, false, NULL, NULL })
#define MODELED_GPU(n, b, w) (links[nl++] = (struct link){ n, false, b, 0, w, NULL, NULL, true, NULL, NULL })
#define MEASURED(n, b, w) (links[nl++] = (struct link){ n, true, (b) > 0 ? (b) : 0, \
							 (b) > 0 ? (b) / memcpy_bw : 0, w, NULL, \
							 (b) < 0 ? kvt_strerror((int)(b)) : NULL, false, \
							 NULL, NULL })
	{
		static char why[256];
		double spec = 0;

		v = measure_h2d(a.bytes, a.reps, &spec, why, sizeof(why));
		if (v < 0)
			fprintf(stderr, "kvtier-bench recompute: host to GPU: %s (%s)\n",
				kvt_strerror((int)v), kvt_dev_last_error());
		if (v > 0) {
			links[nl++] = (struct link){ "h2d-pinned", true, v, spec > 0 ? v / spec : 0,
						     why, "PCIe spec", NULL, true,
						     NULL, NULL };
		} else if (v == 0) {
			fprintf(stderr, "kvtier-bench recompute: host to GPU: %s\n", why);
		}
	}
	/* a TP group has these once per GPU: each loads its share at once */
	MODELED_GPU("hbm", gpu.mem_bw, "KV already in GPU memory: a device copy at HBM bandwidth");
	MODELED_GPU("nvlink-c2c", 450e9, "GH200 NVLink-C2C, 450 GB/s per direction (datasheet)");
	{
		const char *why5, *why4;
		double bw5 = kvt_pcie_achieved_bw(5, &why5), bw4 = kvt_pcie_achieved_bw(4, &why4);

		MODELED_GPU("pcie5", bw5, why5);
		MODELED_GPU("pcie4", bw4, why4);
	}
	MODELED("rdma400", 50e9, "RDMA at 400 Gb/s line rate");
	MODELED("rdma200", 25e9, "RDMA at 200 Gb/s line rate");
	MODELED("rdma100", 12.5e9, "RDMA at 100 Gb/s line rate");
	MODELED("nvme", 7e9, "one PCIe Gen4 x4 NVMe drive, 7 GB/s sequential read");
	{
		double ref = 0;
		const char *pages = NULL, *ref_pages = NULL;

		v = measure_dram_tier(&runs[0].m, a.block_tokens, a.bytes, a.reps, &ref,
				      &pages, &ref_pages);
		if (v < 0)
			fprintf(stderr, "kvtier-bench recompute: DRAM tier: %s\n",
				kvt_strerror((int)v));
		MEASURED("dram-tier", v, "kvt_get out of a store's DRAM tier (host copy only; "
					 "vs memcpy passes interleaved with it)");
		/* its ratio is to the memcpy passes interleaved with it */
		if (v > 0 && ref > 0)
			links[nl - 1].vs_memcpy = v / ref;
		links[nl - 1].ref = "memcpy";
		links[nl - 1].pages = pages;
		links[nl - 1].ref_pages = ref_pages;
	}
	v = measure_ssd(a.dir, a.bytes, a.reps);
	if (v < 0)
		fprintf(stderr, "kvtier-bench recompute: SSD path under %s: %s%s\n", a.dir,
			kvt_strerror((int)v), v == -EINVAL ? " (no O_DIRECT here? try --dir)" : "");
	MEASURED("ssd-odirect", v, "O_DIRECT io_uring reads of a file (raw file path, QD 16, 1 MiB)");
	{
		double raw = v;

		v = measure_ssd_tier(&runs[0].m, a.block_tokens, a.dir, a.bytes, a.reps);
		if (v < 0)
			fprintf(stderr, "kvtier-bench recompute: SSD tier under %s: %s\n", a.dir,
				kvt_strerror((int)v));
		MEASURED("ssd-tier", v, "kvt_get, one block at a time, of blocks the store demoted "
					"to its SSD tier");
		/* the SSD tier's reference is the raw file path on the same disk */
		links[nl - 1].vs_memcpy = v > 0 && raw > 0 ? v / raw : 0;
		links[nl - 1].ref = "raw file";
	}
	v = kvt_bench_tcp_loopback(a.bytes, a.reps);
	if (v < 0)
		fprintf(stderr, "kvtier-bench recompute: TCP loopback: %s\n", kvt_strerror((int)v));
	MEASURED("tcp-loopback", v, "TCP over loopback, one connection");
#undef MODELED
#undef MODELED_GPU
#undef MEASURED
	for (size_t i = 0; i < a.n_models; i++) {
		runs[i].cpu_flops = measure_gemm(&runs[i].m, a.gemm_tokens, a.reps);
		if (!(runs[i].cpu_flops > 0)) {
			fprintf(stderr, "kvtier-bench recompute: GEMM: out of memory\n");
			return 1;
		}
	}

	if (a.svg) {
		err = write_svg(&a, &gpu, links, nl, runs);
		if (err) {
			fprintf(stderr, "kvtier-bench recompute: %s: %s\n", a.svg, kvt_strerror(err));
			return 1;
		}
	}
	if (a.json)
		return print_json(&a, &gpu, memcpy_bw, links, nl, runs) ? 1 : 0;
	if (a.csv)
		print_csv(&a, links, nl, runs);
	else
		print_table(&a, &gpu, memcpy_bw, links, nl, runs);
	return 0;
}
