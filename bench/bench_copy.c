/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier-bench copy: the device layer's copy paths against their references.
 *
 *   plain copies   host<->device, pinned and pageable, block sizes 64 KiB..64 MiB.
 *                  cuda: pinned against the best pinned cudaMemcpyAsync of the
 *                  same direction in this run, pageable against pinned of the
 *                  same size. host: against memcpy of the same bytes.
 *   gather/scatter a batch of blocks of a paged model (default 32 layers,
 *                  8 KV heads, head_dim 128, bf16, 16-token blocks) between
 *                  engine pages and pinned host blocks, on the direct
 *                  (zero-copy), staged and per-layer paths, against one
 *                  contiguous copy of the same bytes (cuda: cudaMemcpyAsync
 *                  pinned; host: memcpy), and direct against the per-layer
 *                  baseline.
 * Every figure is a median over --reps timed repetitions after one warm-up. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "bench/bench.h"
#include "kvtier/device.h"

struct copy_cfg {
	enum kvt_dev_backend backend;
	uint64_t min_size, max_size;
	int reps;
	uint32_t layers, kv_heads, head_dim, block_tokens, blocks;
	enum kvt_dtype dtype;
	bool json;
};

struct copy_case {
	char path[40];
	uint64_t block_bytes;
	double gbps, ref_gbps;
};

struct copy_run {
	struct copy_cfg cfg;
	struct kvt_dev *dev;
	struct kvt_dev_stream *st;
	bool cuda;
	struct copy_case *cases;
	size_t n_cases, cap_cases;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier-bench copy [OPTIONS]\n\n"
		"Bandwidth of the device layer's copies, each as a ratio against a\n"
		"reference measured in the same run (medians over repetitions).\n\n"
		"  --backend B        auto (default: cuda if a GPU is usable), cuda, host\n"
		"  --min-size S       smallest plain copy (default 64K)\n"
		"  --max-size S       largest plain copy (default 64M); sizes go x4\n"
		"  --reps N           timed repetitions per figure (default 5)\n"
		"  --layers N         model layers for gather/scatter (default 32)\n"
		"  --kv-heads N       KV heads (default 8)\n"
		"  --head-dim N       head dimension (default 128)\n"
		"  --dtype T          bf16 (default), fp16, fp32, fp8, int8\n"
		"  --block-tokens N   tokens per block, one engine page (default 16)\n"
		"  --blocks N         blocks per gather/scatter call (default 32)\n"
		"  --json             print one JSON object: backend, device, model, reps,\n"
		"                     compute_capability, pcie_gen, pcie_width, cases[]\n"
		"                     {path, block_bytes, gbps, reference_gbps, ratio}\n"
		"  --help             this text\n\n"
		"paths: h2d_pinned d2h_pinned (ref: best pinned copy of the run; host:\n"
		"memcpy), h2d_pageable d2h_pageable (ref: pinned, same size; host: memcpy),\n"
		"gather_* scatter_* with * = direct, staged, per_layer (ref: one contiguous\n"
		"copy of the same bytes), *_direct_vs_per_layer (ref: the per-layer path).\n");
}

static int parse(int argc, char **argv, struct copy_cfg *c)
{
	static const struct option opts[] = {
		{ "backend", required_argument, NULL, 'b' },
		{ "min-size", required_argument, NULL, 'm' },
		{ "max-size", required_argument, NULL, 'M' },
		{ "reps", required_argument, NULL, 'r' },
		{ "layers", required_argument, NULL, 'l' },
		{ "kv-heads", required_argument, NULL, 'k' },
		{ "head-dim", required_argument, NULL, 'd' },
		{ "dtype", required_argument, NULL, 't' },
		{ "block-tokens", required_argument, NULL, 'T' },
		{ "blocks", required_argument, NULL, 'n' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int o, v;

	c->backend = KVT_DEV_AUTO;
	c->min_size = 64 << 10;
	c->max_size = 64 << 20;
	c->reps = 5;
	c->layers = 32;
	c->kv_heads = 8;
	c->head_dim = 128;
	c->block_tokens = 16;
	c->blocks = 32;
	c->dtype = KVT_DTYPE_BF16;
	c->json = false;
	optind = 1;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'b':
			if (!strcmp(optarg, "auto"))
				c->backend = KVT_DEV_AUTO;
			else if (!strcmp(optarg, "cuda"))
				c->backend = KVT_DEV_CUDA;
			else if (!strcmp(optarg, "host"))
				c->backend = KVT_DEV_HOST;
			else
				return -EINVAL;
			break;
		case 'm':
			if (kvt_bench_parse_size(optarg, &c->min_size))
				return -EINVAL;
			break;
		case 'M':
			if (kvt_bench_parse_size(optarg, &c->max_size))
				return -EINVAL;
			break;
		case 't':
			v = kvt_dtype_parse(optarg);
			if (v < 0)
				return -EINVAL;
			c->dtype = (enum kvt_dtype)v;
			break;
		case 'j':
			c->json = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case '?':
			return -EINVAL;
		default:
			v = atoi(optarg);
			if (v <= 0)
				return -EINVAL;
			if (o == 'r') c->reps = v;
			if (o == 'l') c->layers = (uint32_t)v;
			if (o == 'k') c->kv_heads = (uint32_t)v;
			if (o == 'd') c->head_dim = (uint32_t)v;
			if (o == 'T') c->block_tokens = (uint32_t)v;
			if (o == 'n') c->blocks = (uint32_t)v;
			break;
		}
	}
	if (optind != argc || !c->min_size || c->min_size > c->max_size)
		return -EINVAL;
	return 0;
}

static void add_case(struct copy_run *r, const char *path, uint64_t block_bytes, double gbps,
		     double ref)
{
	struct copy_case *c;

	if (r->n_cases == r->cap_cases) {
		size_t cap = r->cap_cases ? 2 * r->cap_cases : 32;
		struct copy_case *n = realloc(r->cases, cap * sizeof(*n));

		if (!n)
			return;
		r->cases = n;
		r->cap_cases = cap;
	}
	c = &r->cases[r->n_cases++];
	snprintf(c->path, sizeof(c->path), "%s", path);
	c->block_bytes = block_bytes;
	c->gbps = gbps;
	c->ref_gbps = ref;
}

/* One timed operation: queue it, wait for the stream. */
typedef int (*op_fn)(struct copy_run *r, void *arg);

static int time_one(struct copy_run *r, op_fn fn, void *arg, uint64_t bytes, double *gbps)
{
	uint64_t t0 = kvt_now_ns(), t1;

	if (fn(r, arg) || kvt_dev_stream_sync(r->st)) {
		fprintf(stderr, "copy: %s\n", kvt_dev_last_error());
		return -1;
	}
	t1 = kvt_now_ns();
	*gbps = (double)bytes / (double)(t1 > t0 ? t1 - t0 : 1); /* bytes/ns = GB/s */
	return 0;
}

/* Medians of op a and op b, timed alternately so that both see the same
 * moments of a shared, noisy machine. b may be NULL. */
static void median_pair(struct copy_run *r, op_fn fa, void *aa, op_fn fb, void *ab,
			uint64_t bytes, double *ga, double *gb)
{
	int n = r->cfg.reps;
	double *va = calloc((size_t)n, sizeof(double)), *vb = calloc((size_t)n, sizeof(double));
	double x;

	*ga = 0;
	if (gb)
		*gb = 0;
	if (!va || !vb)
		goto out;
	for (int i = -1; i < n; i++) {
		if (time_one(r, fa, aa, bytes, i >= 0 ? &va[i] : &x))
			goto out;
		if (fb && time_one(r, fb, ab, bytes, i >= 0 ? &vb[i] : &x))
			goto out;
	}
	*ga = kvt_bench_median(va, (size_t)n);
	if (gb)
		*gb = kvt_bench_median(vb, (size_t)n);
out:
	free(va);
	free(vb);
}

static double median_gbps(struct copy_run *r, op_fn fn, void *arg, uint64_t bytes)
{
	double g;

	median_pair(r, fn, arg, NULL, NULL, bytes, &g, NULL);
	return g;
}

struct copy_arg {
	void *dst;
	const void *src;
	size_t len;
};

static int op_copy(struct copy_run *r, void *arg)
{
	struct copy_arg *a = arg;

	return kvt_dev_copy_async(r->st, a->dst, a->src, a->len);
}

/* The host backend's reference: memcpy on the calling thread. */
static int op_memcpy(struct copy_run *r, void *arg)
{
	struct copy_arg *a = arg;

	memcpy(a->dst, a->src, a->len);
	return 0;
}

static int plain_copies(struct copy_run *r)
{
	uint64_t max = r->cfg.max_size, n_sizes = 0;
	double pinned[2][32], best[2] = { 0, 0 };
	uint64_t sizes[32];
	struct kvt_dev_mem *dmem = NULL;
	void *pin = NULL, *pageable = NULL;
	int rc;

	for (uint64_t s = r->cfg.min_size; s <= max && n_sizes < 32; s *= 4)
		sizes[n_sizes++] = s;
	if ((rc = kvt_dev_mem_alloc(r->dev, max, &dmem)) ||
	    (rc = kvt_dev_host_alloc(r->dev, max, 0, &pin)))
		goto out;
	pageable = kvt_bench_alloc(max);
	if (!pageable) {
		rc = -ENOMEM;
		goto out;
	}
	memset(pin, 0x5a, max);
	for (uint64_t i = 0; i < n_sizes; i++) {
		for (int dir = 0; dir < 2; dir++) {
			void *dev = kvt_dev_mem_ptr(dmem);
			struct copy_arg a = { dir ? pin : dev, dir ? dev : pin, sizes[i] };

			pinned[dir][i] = median_gbps(r, op_copy, &a, sizes[i]);
			if (pinned[dir][i] > best[dir])
				best[dir] = pinned[dir][i];
		}
	}
	for (uint64_t i = 0; i < n_sizes; i++) {
		for (int dir = 0; dir < 2; dir++) {
			void *dev = kvt_dev_mem_ptr(dmem);
			struct copy_arg a = { dir ? pageable : dev, dir ? dev : pageable, sizes[i] };
			struct copy_arg m = { pin, pageable, sizes[i] };
			double page, ref_pin = best[dir], ref_page = pinned[dir][i];

			if (r->cuda)
				page = median_gbps(r, op_copy, &a, sizes[i]);
			else
				median_pair(r, op_copy, &a, op_memcpy, &m, sizes[i], &page, &ref_page);
			if (!r->cuda) {
				struct copy_arg pa = { dir ? pin : kvt_dev_mem_ptr(dmem),
						       dir ? kvt_dev_mem_ptr(dmem) : pin, sizes[i] };

				median_pair(r, op_copy, &pa, op_memcpy, &m, sizes[i],
					    &pinned[dir][i], &ref_pin);
			}
			add_case(r, dir ? "d2h_pinned" : "h2d_pinned", sizes[i], pinned[dir][i],
				 ref_pin);
			add_case(r, dir ? "d2h_pageable" : "h2d_pageable", sizes[i], page, ref_page);
		}
	}
	rc = 0;
out:
	kvt_bench_free(pageable, max);
	kvt_dev_host_free(r->dev, pin);
	kvt_dev_mem_free(dmem);
	return rc;
}

struct xfer_arg {
	struct kvt_dev_layout *lay;
	const uint32_t *pages;
	size_t n;
	void **blocks;
	struct kvt_dev_xfer_opts xo;
	bool gather;
};

static int op_xfer(struct copy_run *r, void *arg)
{
	struct xfer_arg *a = arg;

	return a->gather ? kvt_dev_gather(a->lay, r->st, a->pages, a->n, a->blocks, &a->xo) :
			   kvt_dev_scatter(a->lay, r->st, a->pages, a->n,
					   (const void *const *)a->blocks, &a->xo);
}

static int gather_scatter(struct copy_run *r)
{
	static const struct { enum kvt_dev_path path; const char *name; } paths[] = {
		{ KVT_DEV_PATH_DIRECT, "direct" },
		{ KVT_DEV_PATH_STAGED, "staged" },
		{ KVT_DEV_PATH_PER_LAYER, "per_layer" },
	};
	const struct copy_cfg *c = &r->cfg;
	struct kvt_dev_layout_desc d;
	struct kvt_dev_layout *lay = NULL;
	struct kvt_dev_mem **t = NULL, *contig = NULL;
	void **base = NULL, **blocks = NULL, *host = NULL;
	uint32_t *pages = NULL;
	uint64_t bb, total, num_pages = 2 * (uint64_t)c->blocks, seed = 0x1234567;
	int rc = -ENOMEM;

	kvt_dev_layout_desc_init(&d, sizeof(d));
	d.kind = KVT_LAYOUT_PAGED_KV;
	d.layers = c->layers;
	d.kv_heads = c->kv_heads;
	d.head_dim = c->head_dim;
	d.elem_bytes = (uint32_t)kvt_dtype_bytes(c->dtype);
	d.page_tokens = c->block_tokens;
	d.num_pages = num_pages;
	bb = kvt_dev_layout_block_bytes(&d);
	if (!bb)
		return -EINVAL;
	total = bb * c->blocks;
	t = calloc(c->layers, sizeof(*t));
	base = calloc(c->layers, sizeof(*base));
	blocks = calloc(c->blocks, sizeof(*blocks));
	pages = calloc(c->blocks, sizeof(*pages));
	if (!t || !base || !blocks || !pages)
		goto out;
	for (uint32_t l = 0; l < c->layers; l++) {
		rc = kvt_dev_mem_alloc(r->dev, 2 * num_pages * (bb / c->layers / 2), &t[l]);
		if (rc)
			goto out;
		base[l] = kvt_dev_mem_ptr(t[l]);
	}
	d.k_base = base;
	if ((rc = kvt_dev_layout_create(r->dev, &d, &lay)) ||
	    (rc = kvt_dev_host_alloc(r->dev, total, KVT_DEV_HOST_MAPPED, &host)) ||
	    (rc = kvt_dev_mem_alloc(r->dev, total, &contig)))
		goto out;
	/* distinct pages in a shuffled order, as an engine's free list leaves them */
	for (uint32_t i = 0; i < c->blocks; i++) {
		uint32_t p;
		bool dup;

		do {
			seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
			p = (uint32_t)(seed % num_pages);
			dup = false;
			for (uint32_t j = 0; j < i; j++)
				dup |= pages[j] == p;
		} while (dup);
		pages[i] = p;
		blocks[i] = (char *)host + (uint64_t)i * bb;
	}

	for (int g = 1; g >= 0; g--) {
		const char *dir = g ? "gather" : "scatter";
		struct copy_arg ca = { g ? host : kvt_dev_mem_ptr(contig),
				       g ? kvt_dev_mem_ptr(contig) : host, total };
		struct xfer_arg xa = { lay, pages, c->blocks, blocks, { 0 }, g == 1 };
		double ref, got[3];
		char name[40];

		for (int p = 0; p < 3; p++) {
			kvt_dev_xfer_opts_init(&xa.xo, sizeof(xa.xo));
			xa.xo.path = paths[p].path;
			median_pair(r, op_xfer, &xa, r->cuda ? op_copy : op_memcpy, &ca, total,
				    &got[p], &ref);
			snprintf(name, sizeof(name), "%s_%s", dir, paths[p].name);
			add_case(r, name, bb, got[p], ref);
		}
		snprintf(name, sizeof(name), "%s_direct_vs_per_layer", dir);
		add_case(r, name, bb, got[0], got[2]);
	}
	rc = 0;
out:
	kvt_dev_mem_free(contig);
	kvt_dev_host_free(r->dev, host);
	kvt_dev_layout_destroy(lay);
	for (uint32_t l = 0; t && l < c->layers; l++)
		kvt_dev_mem_free(t[l]);
	free(pages);
	free(blocks);
	free(base);
	free(t);
	return rc;
}

static void report(struct copy_run *r, const struct kvt_dev_info *info)
{
	char sz[32];

	if (r->cfg.json) {
		json_t *root = json_object(), *cases = json_array(), *model = json_object();
		char *s;

		json_object_set_new(root, "backend", json_string(r->cuda ? "cuda" : "host"));
		json_object_set_new(root, "device", json_string(info->name));
		json_object_set_new(root, "compute_capability",
				    json_sprintf("%d.%d", info->cc_major, info->cc_minor));
		json_object_set_new(root, "pcie_gen", json_integer(info->pcie_gen));
		json_object_set_new(root, "pcie_width", json_integer(info->pcie_width));
		json_object_set_new(model, "layers", json_integer(r->cfg.layers));
		json_object_set_new(model, "kv_heads", json_integer(r->cfg.kv_heads));
		json_object_set_new(model, "head_dim", json_integer(r->cfg.head_dim));
		json_object_set_new(model, "dtype", json_string(kvt_dtype_name(r->cfg.dtype)));
		json_object_set_new(model, "block_tokens", json_integer(r->cfg.block_tokens));
		json_object_set_new(model, "blocks_per_call", json_integer(r->cfg.blocks));
		json_object_set_new(root, "model", model);
		json_object_set_new(root, "reps", json_integer(r->cfg.reps));
		for (size_t i = 0; i < r->n_cases; i++) {
			const struct copy_case *c = &r->cases[i];

			json_array_append_new(cases, json_pack("{s:s, s:I, s:f, s:f, s:f}",
				"path", c->path, "block_bytes", (json_int_t)c->block_bytes,
				"gbps", c->gbps, "reference_gbps", c->ref_gbps,
				"ratio", c->ref_gbps > 0 ? c->gbps / c->ref_gbps : 0.0));
		}
		json_object_set_new(root, "cases", cases);
		s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		if (s)
			printf("%s\n", s);
		free(s);
		json_decref(root);
		return;
	}
	printf("kvtier-bench copy: backend %s (%s", r->cuda ? "cuda" : "host", info->name);
	if (r->cuda)
		printf(", sm_%d%d, PCIe gen %d x%d", info->cc_major, info->cc_minor, info->pcie_gen,
		       info->pcie_width);
	printf("), medians of %d\n", r->cfg.reps);
	printf("%-28s %10s %10s %10s %7s\n", "path", "block", "GB/s", "ref GB/s", "ratio");
	for (size_t i = 0; i < r->n_cases; i++) {
		const struct copy_case *c = &r->cases[i];

		printf("%-28s %10s %10.2f %10.2f %7.2f\n", c->path,
		       kvt_fmt_bytes(c->block_bytes, sz, sizeof(sz)), c->gbps, c->ref_gbps,
		       c->ref_gbps > 0 ? c->gbps / c->ref_gbps : 0.0);
	}
}

int kvt_bench_copy_main(int argc, char **argv)
{
	struct copy_run r = { 0 };
	struct kvt_dev_opts o;
	struct kvt_dev_info info = { .size = sizeof(info) };
	int rc;

	if (parse(argc, argv, &r.cfg)) {
		usage(stderr);
		return 2;
	}
	kvt_dev_opts_init(&o, sizeof(o));
	o.backend = r.cfg.backend;
	rc = kvt_dev_open(&o, &r.dev);
	if (rc) {
		fprintf(stderr, "copy: cannot open the device: %s\n", kvt_dev_last_error());
		return 1;
	}
	if ((rc = kvt_dev_info(r.dev, &info)) ||
	    (rc = kvt_dev_stream_create(r.dev, false, &r.st)))
		goto out;
	r.cuda = info.backend == KVT_DEV_CUDA;
	if ((rc = plain_copies(&r)) || (rc = gather_scatter(&r)))
		goto out;
	report(&r, &info);
out:
	if (rc)
		fprintf(stderr, "copy: %s (%s)\n", kvt_strerror(rc), kvt_dev_last_error());
	kvt_dev_stream_destroy(r.st);
	kvt_dev_close(r.dev);
	free(r.cases);
	return rc ? 1 : 0;
}
