/* SPDX-License-Identifier: Apache-2.0 */
/* The prefill estimate of a replay; see prefill.h. */
#include "bench/trace/prefill.h"

#include <errno.h>
#include <string.h>

int kvt_prefill_est_init(struct kvt_prefill_est *e, const char *model, const char *gpu,
			 double mfu, uint32_t block_tokens, uint64_t block_bytes)
{
	int err;

	memset(e, 0, sizeof(*e));
	if (!model || !gpu || !(mfu > 0 && mfu <= 1) || !block_tokens)
		return -EINVAL;
	err = kvt_model_load(model, &e->model);
	if (err)
		return err;
	err = kvt_gpu_find(gpu, NULL, &e->gpu);
	if (err)
		return err;
	e->mfu = mfu;
	kvt_plan_opts_init(&e->plan, sizeof(e->plan));
	e->plan.model = &e->model;
	e->plan.block_tokens = block_tokens;
	e->plan.block_bytes = block_bytes;
	e->plan.prefill_flops_s = e->gpu.bf16_flops * mfu;
	return e->plan.prefill_flops_s > 0 ? 0 : -EINVAL;
}

int kvt_prefill_est_add(struct kvt_prefill_est *e, uint64_t input_length,
			const uint8_t *tiers, size_t hits)
{
	uint64_t bt = e->plan.block_tokens, prefix;
	struct kvt_plan plan;
	int err;

	e->requests++;
	e->no_cache_s += kvt_model_prefill_flops(&e->model, 0, input_length) /
			 e->plan.prefill_flops_s;
	if (!hits) {
		e->with_cache_s += kvt_model_prefill_flops(&e->model, 0, input_length) /
				   e->plan.prefill_flops_s;
		return 0;
	}
	err = kvt_plan_prefix(&e->plan, tiers, hits, &plan, NULL);
	if (err)
		return err;
	/* the plan covers whole blocks; the last one may hold fewer tokens */
	prefix = hits * bt < input_length ? hits * bt : input_length;
	e->with_cache_s += plan.total_s + kvt_model_prefill_flops(&e->model, prefix, input_length) /
					  e->plan.prefill_flops_s;
	e->load_s += plan.load_s;
	e->loaded_blocks += plan.load_blocks;
	e->recomputed_hit_blocks += plan.blocks - plan.load_blocks;
	return 0;
}

json_t *kvt_prefill_est_json(const struct kvt_prefill_est *e)
{
	double n = e->requests ? (double)e->requests : 1;
	json_t *bw = json_pack("{s:f, s:f, s:f}", "hbm", e->plan.tier_bw[KVT_TIER_HBM], "dram",
			       e->plan.tier_bw[KVT_TIER_DRAM], "ssd", e->plan.tier_bw[KVT_TIER_SSD]);

	return json_pack("{s:s, s:s, s:f, s:f, s:o, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:I}",
			 "model", e->model.name, "gpu", e->gpu.name, "mfu", e->mfu,
			 "prefill_flops_s", e->plan.prefill_flops_s, "tier_bw", bw ? bw : json_null(),
			 "no_cache_s", e->no_cache_s, "with_cache_s", e->with_cache_s,
			 "saved_s", e->no_cache_s - e->with_cache_s,
			 "saved_fraction", e->no_cache_s > 0 ?
				 (e->no_cache_s - e->with_cache_s) / e->no_cache_s : 0.0,
			 "load_s", e->load_s,
			 "mean_ttft_no_cache_s", e->no_cache_s / n,
			 "mean_ttft_with_cache_s", e->with_cache_s / n,
			 "loaded_blocks", (json_int_t)e->loaded_blocks,
			 "recomputed_hit_blocks", (json_int_t)e->recomputed_hit_blocks);
}
