/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier-bench dram: the DRAM tier's put and get throughput against memcpy of
 * the same sizes over the same working set, the lookup rate at a million
 * stored blocks, and the index's memory per block record.
 *
 * The reference copies between two buffers as large as the store, block by
 * block, exactly as put and get walk their slots: a cache-hot memcpy would
 * flatter the reference and hide what the store costs. Every figure is a
 * median over --reps repetitions. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "bench/bench.h"
#include "kvtier/store.h"
#include "store/index.h"

struct dram_args {
	uint64_t store_bytes;
	uint64_t min_block, max_block;
	uint64_t lookup_blocks;
	uint64_t index_entries;
	int reps;
	bool json;
	bool warm;  /* the DRAM tier as kvtierd keeps it for warm restarts */
};

static void usage(FILE *f)
{
	fprintf(f,
"usage: kvtier-bench dram [OPTIONS]\n"
"\n"
"Measures the DRAM tier: put and get throughput per block size beside memcpy\n"
"of the same bytes over a working set as large as the store, the lookup rate\n"
"(keys/s, 64-key prefixes) at --lookup-blocks stored blocks, and the block\n"
"index's memory per record at --index-entries records. Figures are medians.\n"
"\n"
"options:\n"
"  --store SIZE          DRAM tier capacity and working set (default 1G)\n"
"  --min-block SIZE      smallest block size (default 64K)\n"
"  --max-block SIZE      largest block size, doubling from the smallest (default 32M)\n"
"  --lookup-blocks N     blocks stored for the lookup rate (default 1000000; 0 skips)\n"
"  --index-entries N     records for the bytes/entry figure (default 10000000; 0 skips)\n"
"  --reps N              repetitions per figure, the median is reported (default 5)\n"
"  --json                print one JSON object instead of a table\n"
"  --warm                the DRAM tier in a memfd with a header and an XXH3 per\n"
"                        block, as kvtierd keeps it for warm restarts (its cost\n"
"                        at put: compare with a run without)\n"
"  -h, --help            this text\n"
"\n"
"SIZE takes K, M, G suffixes (powers of 1024).\n");
}

static int parse_args(int argc, char **argv, struct dram_args *a)
{
	static const struct option opts[] = {
		{ "store", required_argument, NULL, 's' },
		{ "min-block", required_argument, NULL, 'm' },
		{ "max-block", required_argument, NULL, 'M' },
		{ "lookup-blocks", required_argument, NULL, 'l' },
		{ "index-entries", required_argument, NULL, 'i' },
		{ "reps", required_argument, NULL, 'r' },
		{ "json", no_argument, NULL, 'j' },
		{ "warm", no_argument, NULL, 'w' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int c;

	*a = (struct dram_args){ 1ull << 30, 64 << 10, 32 << 20, 1000000, 10000000, 5, false, false };
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		int err = 0;
		switch (c) {
		case 's': err = kvt_bench_parse_size(optarg, &a->store_bytes); break;
		case 'm': err = kvt_bench_parse_size(optarg, &a->min_block); break;
		case 'M': err = kvt_bench_parse_size(optarg, &a->max_block); break;
		case 'l': a->lookup_blocks = strtoull(optarg, NULL, 0); break;
		case 'i': a->index_entries = strtoull(optarg, NULL, 0); break;
		case 'r': a->reps = atoi(optarg); break;
		case 'j': a->json = true; break;
		case 'w': a->warm = true; break;
		case 'h': usage(stdout); exit(0);
		default: return -EINVAL;
		}
		if (err) {
			fprintf(stderr, "kvtier-bench dram: bad size '%s'\n", optarg);
			return -EINVAL;
		}
	}
	if (a->reps < 1 || a->min_block < 4096 || a->max_block < a->min_block ||
	    a->store_bytes < 2 * a->max_block) {
		fprintf(stderr, "kvtier-bench dram: need reps >= 1, 4K <= min-block <= max-block, "
				"store >= 2 x max-block\n");
		return -EINVAL;
	}
	return 0;
}

static struct kvt_key key_n(uint64_t n)
{
	struct kvt_key k = { { 0 } };

	memcpy(k.bytes, &n, sizeof(n));
	return k;
}

/* A namespace whose blocks are exactly `bytes`: 1 layer, 1 head, bf16,
 * block_tokens 1, head_dim = bytes / 4 (K and V). */
static int attach_sized(struct kvt_store *s, uint64_t bytes, struct kvt_ns **ns)
{
	struct kvt_ns_desc d;

	kvt_ns_desc_init(&d, sizeof(d));
	snprintf(d.model_id, sizeof(d.model_id), "bench/%llu", (unsigned long long)bytes);
	d.layers = 1;
	d.kv_heads = 1;
	d.head_dim = (uint32_t)(bytes / 4);
	d.block_tokens = 1;
	return kvt_ns_attach(s, &d, ns);
}

struct case_result {
	uint64_t block;
	double put_gbps, get_gbps, memcpy_gbps;
	double put_ratio, get_ratio; /* medians of the per-repetition ratios */
};

/* One block size: fill the store once (untimed, so page faults are not
 * timed), then time rounds of put (after removing), get, and memcpy. */
static int run_case(const struct dram_args *a, uint64_t block, struct case_result *out)
{
	uint64_t n = a->store_bytes / block - 1; /* one slot spare: no eviction */
	/* the reference's buffers, and put's source and get's destination, in
	 * the pages of the tier's region: transparent huge pages (a warm tier
	 * is a memfd: 4 KiB shmem pages) */
	uint8_t *src = kvt_bench_alloc_pages(n * block, !a->warm);
	uint8_t *dst = kvt_bench_alloc_pages(n * block, !a->warm);
	double *put = calloc(a->reps, sizeof(double)), *get = calloc(a->reps, sizeof(double));
	double *ref = calloc(a->reps, sizeof(double));
	double *put_ratio = calloc(a->reps, sizeof(double));
	double *get_ratio = calloc(a->reps, sizeof(double));
	struct kvt_store_opts o;
	struct kvt_store *s = NULL;
	struct kvt_ns *ns;
	int err = -ENOMEM;

	if (!src || !dst || !put || !get || !ref || !put_ratio || !get_ratio)
		goto out;
	kvt_store_opts_init(&o, sizeof(o));
	o.dram_bytes = a->store_bytes;
	o.dram_slab_bytes = block > (64 << 20) ? block : 0;
	o.dram_warm = a->warm;
	err = kvt_store_open(&o, &s);
	if (!err)
		err = attach_sized(s, block, &ns);
	if (err)
		goto out;
	for (uint64_t i = 0; i < n; i++) {
		struct kvt_key k = key_n(i);
		if ((err = kvt_put(ns, &k, NULL, src + i * block, block)))
			goto out;
	}
	for (int r = 0; r < a->reps; r++) {
		uint64_t t0, t1;

		t0 = kvt_now_ns();
		for (uint64_t i = 0; i < n; i++)
			memcpy(dst + i * block, src + i * block, block);
		t1 = kvt_now_ns();
		ref[r] = (double)(n * block) / (double)(t1 - t0);

		for (uint64_t i = 0; i < n; i++) {
			struct kvt_key k = key_n(i);
			kvt_remove(ns, &k);
		}
		t0 = kvt_now_ns();
		for (uint64_t i = 0; i < n; i++) {
			struct kvt_key k = key_n(i);
			if ((err = kvt_put(ns, &k, NULL, src + i * block, block)))
				goto out;
		}
		t1 = kvt_now_ns();
		put[r] = (double)(n * block) / (double)(t1 - t0);

		t0 = kvt_now_ns();
		for (uint64_t i = 0; i < n; i++) {
			struct kvt_key k = key_n(i);
			if ((err = kvt_get(ns, &k, dst + i * block, block)))
				goto out;
		}
		t1 = kvt_now_ns();
		get[r] = (double)(n * block) / (double)(t1 - t0);
		/* ratios pair each repetition with its own reference, so a drift
		 * of the machine's speed between repetitions cancels out */
		put_ratio[r] = put[r] / ref[r];
		get_ratio[r] = get[r] / ref[r];
	}
	out->block = block;
	out->put_gbps = kvt_bench_median(put, a->reps);
	out->get_gbps = kvt_bench_median(get, a->reps);
	out->memcpy_gbps = kvt_bench_median(ref, a->reps);
	out->put_ratio = kvt_bench_median(put_ratio, a->reps);
	out->get_ratio = kvt_bench_median(get_ratio, a->reps);
out:
	kvt_store_close(s);
	kvt_bench_free(src, n * block);
	kvt_bench_free(dst, n * block);
	free(put);
	free(get);
	free(ref);
	free(put_ratio);
	free(get_ratio);
	return err;
}

/* Lookup rate: `blocks` blocks in chains of 64, then 64-key lookups of
 * random chains. Slots are reserved and committed without being written, so
 * a million blocks cost index memory only, not a million touched pages. */
static int run_lookup(const struct dram_args *a, double *keys_per_s)
{
	const uint64_t chain = 64, block = 4096;
	uint64_t chains = a->lookup_blocks / chain, seed = 88172645463325252ull;
	double *rate = calloc(a->reps, sizeof(double));
	struct kvt_key keys[64];
	struct kvt_store_opts o;
	struct kvt_store *s = NULL;
	struct kvt_ns *ns;
	int err;

	kvt_store_opts_init(&o, sizeof(o));
	o.dram_bytes = (chains * chain + 1) * block;
	o.dram_slab_bytes = 1 << 20;
	o.dram_bytes = (o.dram_bytes + (1 << 20)) & ~((1ull << 20) - 1);
	err = rate ? kvt_store_open(&o, &s) : -ENOMEM;
	if (!err)
		err = attach_sized(s, block, &ns);
	for (uint64_t c = 0; !err && c < chains; c++) {
		for (uint64_t i = 0; !err && i < chain; i++) {
			struct kvt_key k = key_n(c * chain + i), p = key_n(c * chain + i - 1);
			struct kvt_slot slot;
			err = kvt_reserve(ns, &k, i ? &p : NULL, &slot);
			if (!err)
				err = kvt_commit(ns, &slot);
		}
	}
	for (int r = 0; !err && r < a->reps; r++) {
		const int lookups = 20000;
		uint64_t t0, t1, found = 0;

		t0 = kvt_now_ns();
		for (int l = 0; l < lookups; l++) {
			uint64_t c;
			seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
			c = seed % chains;
			for (uint64_t i = 0; i < chain; i++)
				keys[i] = key_n(c * chain + i);
			found += (uint64_t)kvt_lookup(ns, keys, chain, NULL);
		}
		t1 = kvt_now_ns();
		if (found != (uint64_t)lookups * chain)
			err = -EIO; /* every chain is whole: a short match is a bug */
		rate[r] = (double)lookups * chain * 1e9 / (double)(t1 - t0);
	}
	if (!err)
		*keys_per_s = kvt_bench_median(rate, a->reps);
	kvt_store_close(s);
	free(rate);
	return err;
}

/* Index memory per record, measured on the index itself at `n` records. */
static int run_index(uint64_t n, double *bytes_per_entry)
{
	struct kvt_index *idx;
	int err = kvt_index_create(0, &idx);

	for (uint64_t i = 0; !err && i < n; i++) {
		struct kvt_key k = key_n(i * 0x9E3779B97F4A7C15ull);
		uint32_t r;
		err = kvt_index_insert(idx, 1, &k, &r);
	}
	if (!err)
		*bytes_per_entry = (double)kvt_index_memory(idx) / (double)kvt_index_count(idx);
	kvt_index_destroy(idx);
	return err;
}

int kvt_bench_dram_main(int argc, char **argv)
{
	struct dram_args a;
	struct case_result res[32];
	double lookup = 0, per_entry = 0;
	bool progress;
	int n = 0, err;
	char b1[32];

	if (parse_args(argc, argv, &a))
		return 2;
	progress = !a.json && isatty(STDERR_FILENO); /* only where a person watches */
	for (uint64_t block = a.min_block; block <= a.max_block && n < 32; block *= 2, n++) {
		if (progress)
			fprintf(stderr, "\rdram: %s blocks...", kvt_fmt_bytes(block, b1, sizeof(b1)));
		if ((err = run_case(&a, block, &res[n]))) {
			fprintf(stderr, "kvtier-bench dram: %s blocks: %s\n",
				kvt_fmt_bytes(block, b1, sizeof(b1)), kvt_strerror(err));
			return 1;
		}
	}
	if (progress)
		fprintf(stderr, "\rdram: lookups over %llu blocks...   ",
			(unsigned long long)a.lookup_blocks);
	if (a.lookup_blocks >= 64 && (err = run_lookup(&a, &lookup))) {
		fprintf(stderr, "kvtier-bench dram: lookup: %s\n", kvt_strerror(err));
		return 1;
	}
	if (progress)
		fprintf(stderr, "\rdram: index at %llu entries...   ",
			(unsigned long long)a.index_entries);
	if (a.index_entries && (err = run_index(a.index_entries, &per_entry))) {
		fprintf(stderr, "kvtier-bench dram: index: %s\n", kvt_strerror(err));
		return 1;
	}
	if (progress)
		fprintf(stderr, "\r%40s\r", "");

	if (a.json) {
		json_t *root = json_object(), *cases = json_array();
		for (int i = 0; i < n; i++)
			json_array_append_new(cases, json_pack("{s:I,s:f,s:f,s:f,s:f,s:f}",
				"block_bytes", (json_int_t)res[i].block,
				"put_gbps", res[i].put_gbps, "get_gbps", res[i].get_gbps,
				"memcpy_gbps", res[i].memcpy_gbps,
				"put_ratio", res[i].put_ratio, "get_ratio", res[i].get_ratio));
		json_object_set_new(root, "bench", json_string("dram"));
		json_object_set_new(root, "store_bytes", json_integer((json_int_t)a.store_bytes));
		json_object_set_new(root, "reps", json_integer(a.reps));
		json_object_set_new(root, "cases", cases);
		json_object_set_new(root, "lookup_blocks", json_integer((json_int_t)a.lookup_blocks));
		json_object_set_new(root, "lookup_keys_per_s", json_real(lookup));
		json_object_set_new(root, "index_entries", json_integer((json_int_t)a.index_entries));
		json_object_set_new(root, "index_bytes_per_entry", json_real(per_entry));
		json_dumpf(root, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
		putchar('\n');
		json_decref(root);
		return 0;
	}
	printf("DRAM tier, store %s, medians of %d reps (GB/s = 1e9 B/s; ratios are\n"
	       "medians of each repetition's ratio to its own memcpy)\n",
	       kvt_fmt_bytes(a.store_bytes, b1, sizeof(b1)), a.reps);
	printf("%10s %10s %10s %10s %9s %9s\n", "block", "put", "get", "memcpy", "put/mcp",
	       "get/mcp");
	for (int i = 0; i < n; i++)
		printf("%10s %10.2f %10.2f %10.2f %9.3f %9.3f\n",
		       kvt_fmt_bytes(res[i].block, b1, sizeof(b1)), res[i].put_gbps,
		       res[i].get_gbps, res[i].memcpy_gbps, res[i].put_ratio, res[i].get_ratio);
	if (a.lookup_blocks >= 64)
		printf("lookup: %.2f M keys/s (64-key prefixes, %llu blocks stored)\n", lookup / 1e6,
		       (unsigned long long)a.lookup_blocks);
	if (a.index_entries)
		printf("index: %.1f bytes/entry at %llu entries\n", per_entry,
		       (unsigned long long)a.index_entries);
	return 0;
}
