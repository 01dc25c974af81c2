/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier calc: the sizing calculator an operator reaches for before deploying
 * a model: KV bytes per token and per context, memory for N users, users per
 * GPU (or MIG slice), decode-speed upper bounds, over the GPU table. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "app/kvtier_cmds.h"
#include "kvtier/model.h"
#include "util/size.h"

void kvt_calc_usage(FILE *f)
{
	fprintf(f,
		"NAME\n"
		"    kvtier calc - size a model's KV cache, memory and decode speed per GPU\n\n"
		"SYNOPSIS\n"
		"    kvtier calc --model NAME|config.json [--kv-dtype bf16|fp16|fp8]\n"
		"                [--weight-dtype DTYPE] [--context N] [--users N] [--tp N]\n"
		"                [--gpu NAME] [--mig PROFILE] [--mem-util F] [--overhead SIZE]\n"
		"                [--mfu F] [--plan TIER:N,...] [--block-tokens N]\n"
		"                [--tier-bw TIER=B/s]... [--json]\n"
		"    kvtier calc --list\n\n"
		"DESCRIPTION\n"
		"    Reads a Hugging Face config.json (or a shipped one by name) and prints:\n"
		"    KV bytes per token (2 x layers x kv_heads x head_dim x dtype bytes; MLA:\n"
		"    layers x (kv_lora_rank + qk_rope_head_dim) x dtype bytes), KV for one\n"
		"    context, total and active parameters (MoE), weight bytes, the memory N\n"
		"    users need (weights + N x KV per context + overhead), how many users of\n"
		"    that context fit in GPU memory x mem-util, and decode tokens/s upper\n"
		"    bounds at batch 1 and at batch N (memory bandwidth / bytes read per step:\n"
		"    the weights a step touches, active experts for MoE, plus every user's\n"
		"    KV). Without --gpu it prints the whole GPU table; the JSON's top-level\n"
		"    GPU figures are then those of H100-SXM.\n\n"
		"OPTIONS\n"
		"    --model NAME|PATH  a shipped model (see --list), a config.json path, or a\n"
		"                       model directory holding one\n"
		"    --kv-dtype DTYPE   KV cache element type: bf16 (default), fp16, fp8\n"
		"    --weight-dtype D   weight type; default the config's torch_dtype (fp8\n"
		"                       when the config declares fp8 quantization)\n"
		"    --context N        tokens per user (default 8192); K/M suffixes (x1024)\n"
		"    --users N          concurrent users (default 1)\n"
		"    --tp N             tensor-parallel GPUs sharing weights and KV (default 1)\n"
		"    --gpu NAME         one GPU of the table (e.g. H100-SXM, a100-80gb)\n"
		"    --mig PROFILE      a MIG slice of --gpu (e.g. 3g.40gb); also NAME/PROFILE\n"
		"    --mem-util F       fraction of GPU memory usable (default 0.90)\n"
		"    --overhead SIZE    per-GPU memory besides weights and KV: CUDA context,\n"
		"                       activations, allocator slack (default 2G = 2 GiB)\n"
		"    --mfu F            fraction of dense bf16 peak a prefill sustains, for the\n"
		"                       prefill-time column (default 0.5)\n"
		"    --plan TIER:N,...  plan a matched prefix: N blocks on each tier in prefix\n"
		"                       order (hbm, dram, ssd, remote), e.g. dram:60,ssd:4;\n"
		"                       prints which blocks to load and which to recompute\n"
		"                       (kvt_plan_prefix: load a leading run, recompute the\n"
		"                       rest, whichever split is fastest)\n"
		"    --block-tokens N   tokens per block for --plan (default 16)\n"
		"    --tier-bw T=B/s    bandwidth from tier T into GPU memory for --plan, e.g.\n"
		"                       ssd=3e9; defaults: hbm = the GPU's memory bandwidth,\n"
		"                       dram = its NVLink-C2C rate or what pinned copies\n"
		"                       achieve over its PCIe x16 (Gen5 52e9, Gen4 25e9), ssd\n"
		"                       3e9 (plus 100 us), remote 12.5e9 (100 Gb/s); prefill\n"
		"                       runs at --mfu of the GPU's dense bf16 peak. With --tp\n"
		"                       the group prefills on all its GPUs and each loads its\n"
		"                       share over its own HBM and link; a given rate is the\n"
		"                       group's\n"
		"    --list             list the shipped models and the GPU table, then exit\n"
		"    --json             print one JSON object instead of text\n"
		"    -h, --help         this text\n\n"
		"JSON KEYS\n"
		"    model, kv_dtype, weight_dtype, context, users, tp, gpu, kv_bytes_per_token,\n"
		"    kv_bytes_per_context, params_total, params_active, weight_bytes,\n"
		"    mem_for_users, mem_usable, users_fit (-1: the weights alone do not fit),\n"
		"    decode_tok_s_upper (batch 1), decode_tok_s_upper_batch (at a batch of\n"
		"    decode_batch_users: the users, or those that fit when fewer do),\n"
		"    prefill_s, prefill_flops, and gpus: the same per GPU of the table; with\n"
		"    --plan, plan: block_tokens, dram_bw, prefill_flops_s, dram_bw_source,\n"
		"    blocks, load_blocks, load_s, recompute_s, total_s, all_load_s (-1: some\n"
		"    block cannot be loaded), all_recompute_s.\n\n"
		"EXAMPLES\n"
		"    kvtier calc --model Qwen3-8B --context 131072\n"
		"    kvtier calc --model Llama-3.1-70B --tp 4 --gpu H100-SXM --users 16 --json\n"
		"    kvtier calc --model ./config.json --gpu H200 --mig 3g.71gb --kv-dtype fp8\n"
		"    kvtier calc --model Qwen3-8B --gpu H100-SXM --plan dram:60,ssd:4 --tier-bw ssd=2e9\n");
}

/* "131072", "128K", "2G" (x1024 powers): the shared size parser's forms,
 * less its percentages, which mean nothing here. */
static int parse_count(const char *s, uint64_t *out)
{
	if (strchr(s, '%'))
		return -EINVAL;
	return kvt_parse_size(s, 0, out);
}

static int parse_frac(const char *s, double lo, double hi, double *out)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || *end || !(v > lo) || v > hi)
		return -EINVAL;
	*out = v;
	return 0;
}

static const char *human(double bytes, char *buf, size_t len)
{
	if (bytes >= 1e12)
		snprintf(buf, len, "%.2f TB", bytes / 1e12);
	else if (bytes >= 1e9)
		snprintf(buf, len, "%.2f GB", bytes / 1e9);
	else if (bytes >= 1e6)
		snprintf(buf, len, "%.2f MB", bytes / 1e6);
	else
		snprintf(buf, len, "%.0f B", bytes);
	return buf;
}

static const char *grouped(uint64_t v, char *buf, size_t len)
{
	char tmp[32];
	int n = snprintf(tmp, sizeof(tmp), "%llu", (unsigned long long)v), o = 0;

	for (int i = 0; i < n && o + 2 < (int)len; i++) {
		if (i && (n - i) % 3 == 0)
			buf[o++] = ',';
		buf[o++] = tmp[i];
	}
	buf[o] = 0;
	return buf;
}

static json_t *sizing_json(const struct kvt_gpu *gpu, const struct kvt_sizing *s)
{
	return json_pack("{s:s, s:I, s:f, s:f, s:I, s:I, s:f, s:f, s:I, s:f}",
			 "gpu", gpu->name, "mem_bytes", (json_int_t)gpu->mem_bytes,
			 "mem_bw", gpu->mem_bw, "bf16_flops", gpu->bf16_flops,
			 "mem_usable", (json_int_t)s->mem_usable, "users_fit",
			 (json_int_t)(s->users_fit == INT64_MAX ? -2 : s->users_fit),
			 "decode_tok_s_upper", s->decode_tok_s_batch1,
			 "decode_tok_s_upper_batch", s->decode_tok_s_batch,
			 "decode_batch_users", (json_int_t)s->batch_users, "prefill_s",
			 s->prefill_s);
}

static void print_gpu_row(const struct kvt_gpu *g, const struct kvt_sizing *s)
{
	char fit[24], batch[40];

	if (s->users_fit < 0)
		snprintf(fit, sizeof(fit), "no (weights)");
	else
		snprintf(fit, sizeof(fit), "%lld", (long long)s->users_fit);
	/* the batch is the users asked for, or those that fit when fewer do */
	snprintf(batch, sizeof(batch), "%.1f b=%u", s->decode_tok_s_batch, s->batch_users);
	printf("  %-18s %7.0f GB %6.2f TB/s %12s %12.1f %16s %10.3f\n", g->name,
	       (double)g->mem_bytes / 1e9, g->mem_bw / 1e12, fit, s->decode_tok_s_batch1,
	       batch, s->prefill_s);
}

static int list_all(void)
{
	const struct kvt_gpu *g;
	const char *n;

	printf("shipped models:\n");
	for (size_t i = 0; (n = kvt_model_shipped(i)); i++)
		printf("  %s\n", n);
	printf("\nGPUs (dense bf16; memory in GB = 10^9 B):\n");
	printf("  %-10s %7s %10s %12s %5s %10s  %s\n", "name", "memory", "bandwidth",
	       "bf16 TFLOP/s", "PCIe", "C2C", "MIG profiles");
	for (size_t i = 0; (g = kvt_gpu_at(i)); i++)
		printf("  %-10s %4.0f GB %5.2f TB/s %12.0f %5u %7.0f GB/s  %s\n", g->name,
		       (double)g->mem_bytes / 1e9, g->mem_bw / 1e12, g->bf16_flops / 1e12,
		       g->pcie_gen, g->c2c_bw / 1e9, g->mig ? g->mig : "-");
	return 0;
}

static int tier_parse(const char *s, size_t len)
{
	for (int t = KVT_TIER_HBM; t < KVT_TIER_COUNT; t++)
		if (strlen(kvt_tier_name((enum kvt_tier)t)) == len &&
		    !strncmp(s, kvt_tier_name((enum kvt_tier)t), len))
			return t;
	return -EINVAL;
}

#define PLAN_MAX 65536

/* "dram:60,ssd:4" -> tiers[] in prefix order; returns the count or -EINVAL */
static long plan_parse(const char *spec, uint8_t *tiers)
{
	long n = 0;

	while (*spec) {
		const char *colon = strchr(spec, ':');
		char *end;
		unsigned long k;
		int t;

		if (!colon || (t = tier_parse(spec, (size_t)(colon - spec))) < 0)
			return -EINVAL;
		k = strtoul(colon + 1, &end, 10);
		if (end == colon + 1 || (*end && *end != ',') || k > PLAN_MAX - (unsigned long)n)
			return -EINVAL;
		memset(tiers + n, t, k);
		n += (long)k;
		spec = *end ? end + 1 : end;
	}
	return n;
}

/* "ssd=2e9" into o->tier_bw */
static int tier_bw_parse(const char *s, struct kvt_plan_opts *o)
{
	const char *eq = strchr(s, '=');
	char *end;
	double v;
	int t;

	if (!eq || (t = tier_parse(s, (size_t)(eq - s))) < 0)
		return -EINVAL;
	v = strtod(eq + 1, &end);
	if (end == eq + 1 || *end || v < 0)
		return -EINVAL;
	o->tier_bw[t] = v;
	return 0;
}

static const struct option longopts[] = {
	{ "model", required_argument, NULL, 'm' },
	{ "kv-dtype", required_argument, NULL, 'k' },
	{ "weight-dtype", required_argument, NULL, 'w' },
	{ "context", required_argument, NULL, 'c' },
	{ "users", required_argument, NULL, 'u' },
	{ "tp", required_argument, NULL, 't' },
	{ "gpu", required_argument, NULL, 'g' },
	{ "mig", required_argument, NULL, 'M' },
	{ "mem-util", required_argument, NULL, 'U' },
	{ "overhead", required_argument, NULL, 'o' },
	{ "mfu", required_argument, NULL, 'f' },
	{ "plan", required_argument, NULL, 'p' },
	{ "block-tokens", required_argument, NULL, 'b' },
	{ "tier-bw", required_argument, NULL, 'T' },
	{ "list", no_argument, NULL, 'l' },
	{ "json", no_argument, NULL, 'j' },
	{ "help", no_argument, NULL, 'h' },
	{ 0, 0, 0, 0 },
};

/* One run of kvtier calc: what was asked, then what was worked out. */
struct calc {
	struct kvt_sizing_opts so;
	const char *model, *gpu_name, *mig, *plan_spec;
	const char *tier_bw[8];
	size_t n_tier_bw;
	uint32_t block_tokens;
	bool json;
	struct kvt_model m;
	struct kvt_gpu gpu;
	struct kvt_sizing top; /* on the GPU asked for, or H100-SXM */
	const char *dram_source; /* where --plan's host-link rate comes from */
	struct kvt_plan_opts po;
	struct kvt_plan plan;
	long plan_n;           /* blocks planned, -1 without --plan */
};

/* Option c (its value in optarg) into k. Returns 0, or -EINVAL for a bad
 * value. */
static int parse_opt(struct calc *k, int c)
{
	uint64_t v;
	int d;

	switch (c) {
	case 'm': k->model = optarg; break;
	case 'g': k->gpu_name = optarg; break;
	case 'M': k->mig = optarg; break;
	case 'p': k->plan_spec = optarg; break;
	case 'T':
		if (k->n_tier_bw == sizeof(k->tier_bw) / sizeof(k->tier_bw[0]))
			return -EINVAL;
		k->tier_bw[k->n_tier_bw++] = optarg;
		break;
	case 'b':
		if (parse_count(optarg, &v) || !v || v > UINT32_MAX)
			return -EINVAL;
		k->block_tokens = (uint32_t)v;
		break;
	case 'j': k->json = true; break;
	case 'k':
	case 'w':
		d = kvt_dtype_parse(optarg);
		if (d < 0)
			return -EINVAL;
		*(c == 'k' ? &k->so.kv_dtype : &k->so.weight_dtype) = (enum kvt_dtype)d;
		break;
	case 'c':
		if (parse_count(optarg, &k->so.context) || !k->so.context)
			return -EINVAL;
		break;
	case 'u':
	case 't':
		if (parse_count(optarg, &v) || !v || v > UINT32_MAX)
			return -EINVAL;
		*(c == 'u' ? &k->so.users : &k->so.tp) = (uint32_t)v;
		break;
	case 'o':
		if (parse_count(optarg, &k->so.overhead_bytes))
			return -EINVAL;
		break;
	case 'U':
		if (parse_frac(optarg, 0, 1, &k->so.mem_util))
			return -EINVAL;
		break;
	case 'f':
		if (parse_frac(optarg, 0, 1, &k->so.mfu))
			return -EINVAL;
		break;
	}
	return 0;
}

/* The command line into k. Returns -1 to go on, or the exit status when
 * done (--help, --list, a usage error). */
static int parse_args(int argc, char **argv, struct calc *k)
{
	int c, li = 0;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, &li)) != -1) {
		switch (c) {
		case 'l':
			return list_all();
		case 'h':
			kvt_calc_usage(stdout);
			return 0;
		case 'm': case 'g': case 'M': case 'p': case 'T': case 'b': case 'j':
		case 'k': case 'w': case 'c': case 'u': case 't': case 'o': case 'U': case 'f':
			if (!parse_opt(k, c))
				break;
			fprintf(stderr, "kvtier calc: bad value '%s' for --%s\n\n", optarg,
				longopts[li].name);
			kvt_calc_usage(stderr);
			return 2;
		default:
			kvt_calc_usage(stderr);
			return 2;
		}
	}
	if (!k->model || optind != argc) {
		fprintf(stderr, "kvtier calc: %s\n\n",
			k->model ? "unexpected argument" : "--model is required");
		kvt_calc_usage(stderr);
		return 2;
	}
	return -1;
}

/* The model, the GPU and the sizing on it. Returns -1 to go on, or the exit
 * status. */
static int load_and_size(struct calc *k)
{
	int err = kvt_model_load(k->model, &k->m);

	if (err) {
		fprintf(stderr, "kvtier calc: model '%s': %s%s\n", k->model, kvt_strerror(err),
			err == -ENOENT ? " (not a shipped name nor a readable file; see --list)" : "");
		return 1;
	}
	if (k->mig && !k->gpu_name) {
		fprintf(stderr, "kvtier calc: --mig needs --gpu\n");
		return 2;
	}
	err = kvt_gpu_find(k->gpu_name ? k->gpu_name : "H100-SXM", k->mig, &k->gpu);
	if (err) {
		const char *name = k->gpu_name ? k->gpu_name : "H100-SXM";
		struct kvt_gpu whole;
		char like[160];

		if (kvt_gpu_find(name, "", &whole) == 0)
			fprintf(stderr, "kvtier calc: %s has no MIG profile '%s' (its profiles: %s)\n",
				whole.name, k->mig ? k->mig : strchr(name, '/') + 1,
				whole.mig ? whole.mig : "none");
		else if (kvt_gpu_suggest(name, like, sizeof(like)))
			fprintf(stderr, "kvtier calc: unknown GPU '%.*s': did you mean %s? (see "
				"--list)\n", (int)strcspn(name, "/"), name, like);
		else
			fprintf(stderr, "kvtier calc: unknown GPU '%s' (see --list)\n", name);
		return 1;
	}
	err = kvt_model_size(&k->m, &k->gpu, &k->so, &k->top);
	if (err) {
		fprintf(stderr, "kvtier calc: %s\n", kvt_strerror(err));
		return 1;
	}
	return -1;
}

/* --plan: which blocks of the prefix to load and which to recompute.
 * Returns -1 to go on, or the exit status. */
static int make_plan(struct calc *k)
{
	static uint8_t plan_tiers[PLAN_MAX], plan_act[PLAN_MAX];
	struct kvt_plan_opts *po = &k->po;
	const struct kvt_gpu *gpu = &k->gpu;
	double share;
	int err;

	kvt_plan_opts_init(po, sizeof(*po));
	po->model = &k->m;
	po->kv_dtype = k->so.kv_dtype;
	po->block_tokens = k->block_tokens;
	/* a TP group recomputes on all its GPUs, and each loads its share of
	 * a block (its KV heads; MLA's latent whole) over its own HBM and host
	 * link at once: per block, the group takes the time of one share */
	share = k->m.kv_lora_rank ? 1.0 : k->m.kv_heads >= k->so.tp ? 1.0 / k->so.tp :
		1.0 / k->m.kv_heads;
	po->tier_bw[KVT_TIER_HBM] = gpu->mem_bw / share;
	po->tier_bw[KVT_TIER_DRAM] = (gpu->c2c_bw > 0 ? gpu->c2c_bw :
				      kvt_pcie_achieved_bw(gpu->pcie_gen, &k->dram_source)) / share;
	if (gpu->c2c_bw > 0)
		k->dram_source = "NVLink-C2C, the datasheet's rate per direction";
	po->tier_bw[KVT_TIER_REMOTE] = 12.5e9;
	po->prefill_flops_s = gpu->bf16_flops * k->so.mfu * k->so.tp;
	for (size_t i = 0; i < k->n_tier_bw; i++) {
		if (tier_bw_parse(k->tier_bw[i], po)) {
			fprintf(stderr, "kvtier calc: bad --tier-bw '%s' (TIER=bytes/s)\n",
				k->tier_bw[i]);
			return 2;
		}
		if (!strncmp(k->tier_bw[i], "dram=", 5))
			k->dram_source = NULL; /* the user's figure */
	}
	k->plan_n = plan_parse(k->plan_spec, plan_tiers);
	if (k->plan_n < 0) {
		fprintf(stderr, "kvtier calc: bad --plan '%s' (TIER:BLOCKS,...)\n", k->plan_spec);
		return 2;
	}
	err = kvt_plan_prefix(po, plan_tiers, (size_t)k->plan_n, &k->plan, plan_act);
	if (err) {
		fprintf(stderr, "kvtier calc: plan: %s\n", kvt_strerror(err));
		return 1;
	}
	return -1;
}

static int print_json(const struct calc *k)
{
	const struct kvt_sizing_opts *so = &k->so;
	const struct kvt_sizing *top = &k->top;
	const struct kvt_plan *plan = &k->plan;
	enum kvt_dtype wd = so->weight_dtype ? so->weight_dtype : k->m.dtype;
	json_t *o, *arr = json_array();
	const struct kvt_gpu *g;

	for (size_t i = 0; (g = kvt_gpu_at(i)); i++) {
		struct kvt_sizing s;
		if (kvt_model_size(&k->m, g, so, &s) == 0)
			json_array_append_new(arr, sizing_json(g, &s));
	}
	o = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:s, s:I, s:I, s:I, s:I, s:I, s:I,"
		      " s:I, s:I, s:f, s:f, s:I, s:f, s:f, s:o}",
		      "model", k->m.name, "kv_dtype", kvt_dtype_name(so->kv_dtype),
		      "weight_dtype", kvt_dtype_name(wd), "context", (json_int_t)so->context,
		      "users", (json_int_t)so->users, "tp", (json_int_t)so->tp, "gpu", k->gpu.name,
		      "kv_bytes_per_token", (json_int_t)top->kv_bytes_per_token,
		      "kv_bytes_per_context", (json_int_t)top->kv_bytes_per_context,
		      "params_total", (json_int_t)top->params_total,
		      "params_active", (json_int_t)top->params_active,
		      "weight_bytes", (json_int_t)top->weight_bytes,
		      "mem_for_users", (json_int_t)top->mem_for_users,
		      "mem_usable", (json_int_t)top->mem_usable,
		      "users_fit", (json_int_t)(top->users_fit == INT64_MAX ? -2 : top->users_fit),
		      "decode_tok_s_upper", top->decode_tok_s_batch1,
		      "decode_tok_s_upper_batch", top->decode_tok_s_batch,
		      "decode_batch_users", (json_int_t)top->batch_users,
		      "prefill_s", top->prefill_s,
		      "prefill_flops", kvt_model_prefill_flops(&k->m, 0, so->context),
		      "gpus", arr);
	if (o && k->plan_n >= 0)
		json_object_set_new(o, "plan", json_pack("{s:I, s:f, s:f, s:s?, s:I, s:I, s:f, s:f, "
							 "s:f, s:f, s:f}",
			"block_tokens", (json_int_t)k->block_tokens,
			"dram_bw", k->po.tier_bw[KVT_TIER_DRAM],
			"prefill_flops_s", k->po.prefill_flops_s, "dram_bw_source", k->dram_source,
			"blocks", (json_int_t)plan->blocks, "load_blocks", (json_int_t)plan->load_blocks,
			"load_s", plan->load_s, "recompute_s", plan->recompute_s, "total_s", plan->total_s,
			"all_load_s", isinf(plan->all_load_s) ? -1.0 : plan->all_load_s,
			"all_recompute_s", plan->all_recompute_s));
	if (!o) {
		fprintf(stderr, "kvtier calc: out of memory\n");
		return 1;
	}
	json_dumpf(o, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
	putchar('\n');
	json_decref(o);
	return 0;
}

/* The model's figures: shape, parameters, weights, KV, memory, prefill. */
static void print_model(const struct calc *k)
{
	const struct kvt_model *m = &k->m;
	const struct kvt_sizing_opts *so = &k->so;
	const struct kvt_sizing *top = &k->top;
	char b1[32], b2[32], b3[32], b4[32];

	printf("model           %s (%s; %u layers, hidden %u, %u heads, %u KV heads, head_dim %u",
	       m->name, m->model_type[0] ? m->model_type : "?", m->layers, m->hidden, m->heads,
	       m->kv_heads, m->head_dim);
	if (m->experts)
		printf("; %u experts, %u per token", m->experts, m->experts_per_tok);
	if (m->kv_lora_rank)
		printf("; MLA latent %u + rope %u", m->kv_lora_rank, m->qk_rope_head_dim);
	printf(")\n");
	printf("params          %.2f B total, %.2f B active per token\n",
	       top->params_total / 1e9, top->params_active / 1e9);
	printf("weights         %s in %s%s\n", human((double)top->weight_bytes, b1, sizeof(b1)),
	       kvt_dtype_name(so->weight_dtype ? so->weight_dtype : m->dtype),
	       so->tp > 1 ? " per GPU" : "");
	printf("KV per token    %s B in %s\n", grouped(top->kv_bytes_per_token, b1, sizeof(b1)),
	       kvt_dtype_name(so->kv_dtype));
	printf("KV per context  %s = %.2f GiB for %llu tokens\n",
	       human((double)top->kv_bytes_per_context, b1, sizeof(b1)),
	       (double)top->kv_bytes_per_context / (1ull << 30), (unsigned long long)so->context);
	printf("memory, %u user%s %s = weights %s + KV %s + overhead %s%s\n", so->users,
	       so->users > 1 ? "s" : "", human((double)top->mem_for_users, b1, sizeof(b1)),
	       human((double)top->weight_bytes, b2, sizeof(b2)),
	       human((double)(top->mem_for_users - top->weight_bytes - so->overhead_bytes), b3,
		     sizeof(b3)),
	       human((double)so->overhead_bytes, b4, sizeof(b4)), so->tp > 1 ? " (per GPU)" : "");
	printf("prefill         %.3g FLOPs for %llu tokens\n\n",
	       kvt_model_prefill_flops(m, 0, so->context), (unsigned long long)so->context);
}

/* One row per GPU: the one asked for, or the whole table. */
static void print_gpus(const struct calc *k)
{
	printf("  %-18s %10s %11s %12s %12s %16s %10s\n", "GPU", "memory", "bandwidth",
	       "users fit", "tok/s b=1", "tok/s batch", "prefill s");
	if (k->gpu_name) {
		print_gpu_row(&k->gpu, &k->top);
	} else {
		const struct kvt_gpu *g;
		for (size_t i = 0; (g = kvt_gpu_at(i)); i++) {
			struct kvt_sizing s;
			if (kvt_model_size(&k->m, g, &k->so, &s) == 0)
				print_gpu_row(g, &s);
		}
	}
	printf("\nusers fit: (memory x %.2f - weights - overhead) / KV per context%s; tok/s are\n"
	       "upper bounds (bandwidth / bytes per step), the batch b the users asked for or\n"
	       "those that fit when fewer do; prefill at %.0f%% of dense bf16 peak.\n",
	       k->so.mem_util, k->so.tp > 1 ? ", per GPU of the TP group" : "", k->so.mfu * 100);
}

static void print_plan(const struct calc *k)
{
	const struct kvt_plan_opts *po = &k->po;
	const struct kvt_plan *plan = &k->plan;

	printf("\nplan on %s%s (%u-token blocks; hbm %.3g, dram %.3g, ssd %.3g, remote %.3g "
	       "B/s; prefill %.3g FLOP/s):\n", k->so.tp > 1 ? "a TP group of " : "", k->gpu.name,
	       k->block_tokens, po->tier_bw[KVT_TIER_HBM], po->tier_bw[KVT_TIER_DRAM],
	       po->tier_bw[KVT_TIER_SSD], po->tier_bw[KVT_TIER_REMOTE], po->prefill_flops_s);
	if (k->dram_source)
		printf("  dram: %s%s\n", k->dram_source,
		       k->so.tp > 1 ? ", one link per GPU of the group" : "");
	if (plan->load_blocks)
		printf("  load blocks 0-%zu", plan->load_blocks - 1);
	else
		printf("  load nothing");
	if (plan->load_blocks < plan->blocks)
		printf(", recompute blocks %zu-%zu", plan->load_blocks, plan->blocks - 1);
	else
		printf(", recompute nothing");
	printf(": %.3f ms (load %.3f + recompute %.3f)\n", plan->total_s * 1e3,
	       plan->load_s * 1e3, plan->recompute_s * 1e3);
	if (isinf(plan->all_load_s))
		printf("  all loaded: impossible (a tier without bandwidth); ");
	else
		printf("  all loaded: %.3f ms; ", plan->all_load_s * 1e3);
	printf("all recomputed: %.3f ms\n", plan->all_recompute_s * 1e3);
}

int kvt_calc_main(int argc, char **argv)
{
	struct calc k;
	int rc;

	memset(&k, 0, sizeof(k));
	k.block_tokens = 16;
	k.plan_n = -1;
	kvt_sizing_opts_init(&k.so, sizeof(k.so));
	rc = parse_args(argc, argv, &k);
	if (rc < 0)
		rc = load_and_size(&k);
	if (rc < 0 && k.plan_spec)
		rc = make_plan(&k);
	if (rc >= 0)
		return rc;
	if (k.json)
		return print_json(&k);
	print_model(&k);
	print_gpus(&k);
	if (k.plan_n >= 0)
		print_plan(&k);
	return 0;
}
