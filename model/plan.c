/* SPDX-License-Identifier: Apache-2.0 */
/* The load-vs-recompute plan of a matched prefix. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier/model.h"
#include "kvtier/store.h"
#include "util/opts.h"

static const struct kvt_plan_opts plan_defaults = {
	.size = sizeof(struct kvt_plan_opts),
	.kv_dtype = KVT_DTYPE_BF16,
	.tier_bw = { [KVT_TIER_HBM] = 1e12, [KVT_TIER_DRAM] = 25e9, [KVT_TIER_SSD] = 3e9 },
	.tier_latency_s = { [KVT_TIER_SSD] = 100e-6 },
};

void kvt_plan_opts_init(struct kvt_plan_opts *opts, size_t size_bytes)
{
	kvt_opts_init(opts, size_bytes, &plan_defaults, sizeof(plan_defaults));
}

static bool loadable(const struct kvt_plan_opts *o, uint8_t tier)
{
	return tier > KVT_TIER_NONE && tier < KVT_TIER_COUNT && o->tier_bw[tier] > 0;
}

/* Seconds to recompute tokens [start, end): the model's FLOPs at the
 * sustained rate, or the engine's measured tokens/s. */
static double recompute_s(const struct kvt_plan_opts *o, uint64_t start, uint64_t end)
{
	if (o->model)
		return kvt_model_prefill_flops(o->model, start, end) / o->prefill_flops_s;
	return (double)(end - start) / o->prefill_tokens_s;
}

int kvt_plan_prefix(const struct kvt_plan_opts *opts, const uint8_t *tiers, size_t n,
		    struct kvt_plan *out, uint8_t *actions)
{
	struct kvt_plan_opts whole = plan_defaults;
	const struct kvt_plan_opts *o = &whole;
	uint64_t bt, bb;
	size_t matched = 0, best_k = 0, k;
	double load = 0, best = INFINITY, best_load = 0;
	bool used[KVT_TIER_COUNT] = { false };

	if (!out || kvt_opts_load(&whole, sizeof(whole), opts) || !o->block_tokens ||
	    (n && !tiers))
		return -EINVAL;
	if (o->model ? !(o->prefill_flops_s > 0) : !(o->prefill_tokens_s > 0) || !o->block_bytes)
		return -EINVAL;
	bt = o->block_tokens;
	bb = o->block_bytes ? o->block_bytes : bt * kvt_model_kv_bytes_per_token(o->model, o->kv_dtype);
	if (!bb)
		return -EINVAL;
	while (matched < n && tiers[matched] != KVT_TIER_NONE)
		matched++;

	memset(out, 0, sizeof(*out));
	out->blocks = matched;
	/* split k: load [0, k), recompute [k, matched). load grows with k, the
	 * recompute shrinks; k stops at the first block no tier can serve */
	for (k = 0;; k++) {
		double rc = recompute_s(o, k * bt, matched * bt);
		double cost = load + rc;

		if (cost <= best) { /* <=: on a tie, load */
			best = cost;
			best_k = k;
			best_load = load;
		}
		if (k == matched || !loadable(o, tiers[k]))
			break;
		load += (double)bb / o->tier_bw[tiers[k]];
		if (!used[tiers[k]]) {
			used[tiers[k]] = true;
			load += o->tier_latency_s[tiers[k]];
		}
	}
	out->all_load_s = k == matched ? load : INFINITY;
	out->all_recompute_s = recompute_s(o, 0, matched * bt);
	out->load_blocks = best_k;
	out->load_s = best_load;
	out->recompute_s = best - best_load;
	out->total_s = best;
	out->load_bytes = best_k * bb;
	for (size_t i = 0; actions && i < matched; i++)
		actions[i] = i < best_k ? KVT_PLAN_LOAD : KVT_PLAN_RECOMPUTE;
	return 0;
}

int kvt_plan_lookup(struct kvt_ns *ns, const struct kvt_key *keys, size_t n,
		    const struct kvt_plan_opts *opts, uint8_t *tiers, struct kvt_plan *out,
		    uint8_t *actions)
{
	uint8_t small[256], *t = tiers;
	struct kvt_plan_opts o = plan_defaults;
	int matched, err;

	if (!ns || !out || kvt_opts_load(&o, sizeof(o), opts))
		return -EINVAL;
	if (!t) {
		t = n <= sizeof(small) ? small : malloc(n);
		if (!t)
			return -ENOMEM;
	}
	matched = kvt_lookup(ns, keys, n, t);
	if (matched < 0) {
		err = matched;
		goto out;
	}
	if (!o.block_bytes)
		o.block_bytes = kvt_ns_block_bytes(ns);
	err = kvt_plan_prefix(&o, t, (size_t)matched, out, actions);
out:
	if (t != tiers && t != small)
		free(t);
	return err ? err : matched;
}
