/* SPDX-License-Identifier: Apache-2.0 */
/* Prefill time saved by the cache of a replay, and the change in time to
 * first token, from kvtier's offload-vs-recompute cost model
 * (include/kvtier/model.h): for each request, the prefill of its whole input
 * with no cache, against the plan kvt_plan_prefix() chooses for its matched
 * prefix (load a leading run of blocks from their tiers, recompute the rest)
 * plus the prefill of the tokens after the prefix. TTFT here is that prefill
 * time alone: no queueing, no decode step, loads not overlapped with compute
 * (the model's upper bound on both sides). */
#ifndef KVT_TRACE_PREFILL_H
#define KVT_TRACE_PREFILL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "kvtier/model.h"

struct kvt_prefill_est {
	struct kvt_model model;
	struct kvt_gpu gpu;
	double mfu;
	struct kvt_plan_opts plan;
	/* sums over requests */
	uint64_t requests;
	double no_cache_s;      /* every input prefilled from scratch */
	double with_cache_s;    /* the plans, plus the tokens after the prefix */
	double load_s;          /* of which loading blocks */
	uint64_t loaded_blocks, recomputed_hit_blocks;
};

/* Set up an estimate for model (a shipped name or a config path) on gpu (a
 * name of the GPU table) at mfu, with blocks of block_tokens tokens and
 * block_bytes bytes (0 = from the model, bf16). Returns 0, or the errors of
 * kvt_model_load / kvt_gpu_find, or -EINVAL. */
int kvt_prefill_est_init(struct kvt_prefill_est *e, const char *model, const char *gpu,
			 double mfu, uint32_t block_tokens, uint64_t block_bytes);

/* Add one request of input_length tokens whose leading `hits` blocks were
 * found in tiers[0..hits). Returns 0 or -EINVAL. */
int kvt_prefill_est_add(struct kvt_prefill_est *e, uint64_t input_length,
			const uint8_t *tiers, size_t hits);

/* The estimate as a JSON object; NULL on -ENOMEM. */
json_t *kvt_prefill_est_json(const struct kvt_prefill_est *e);

#endif /* KVT_TRACE_PREFILL_H */
