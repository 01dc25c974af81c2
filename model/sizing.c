/* SPDX-License-Identifier: Apache-2.0 */
/* Sizing a model on a GPU: memory for N users, users that fit, decode bounds. */
#include <errno.h>
#include <string.h>

#include "kvtier/model.h"
#include "util/opts.h"

static const struct kvt_sizing_opts sizing_defaults = {
	.size = sizeof(struct kvt_sizing_opts),
	.kv_dtype = KVT_DTYPE_BF16,
	.context = 8192,
	.users = 1,
	.tp = 1,
	.mem_util = 0.90,
	.overhead_bytes = 2ull << 30,
	.mfu = 0.5,
};

void kvt_sizing_opts_init(struct kvt_sizing_opts *opts, size_t size_bytes)
{
	kvt_opts_init(opts, size_bytes, &sizing_defaults, sizeof(sizing_defaults));
}

int kvt_model_size(const struct kvt_model *m, const struct kvt_gpu *gpu,
		   const struct kvt_sizing_opts *opts, struct kvt_sizing *out)
{
	struct kvt_sizing_opts whole = sizing_defaults;
	const struct kvt_sizing_opts *o = &whole;
	double kv_step, w1, wn, kv_share;
	uint64_t per_user;
	enum kvt_dtype wd;

	if (!m || !out || kvt_opts_load(&whole, sizeof(whole), opts) || !o->tp || !o->users ||
	    o->mem_util <= 0 || o->mem_util > 1)
		return -EINVAL;
	wd = o->weight_dtype ? o->weight_dtype : m->dtype;
	if (!kvt_dtype_bytes(o->kv_dtype) || !kvt_dtype_bytes(wd))
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	out->kv_bytes_per_token = kvt_model_kv_bytes_per_token(m, o->kv_dtype);
	out->kv_bytes_per_context = out->kv_bytes_per_token * o->context;
	out->params_total = kvt_model_params_total(m);
	out->params_active = kvt_model_params_active(m);
	/* tensor parallelism splits the weights evenly and the KV by heads: a
	 * GPU keeps kv_heads / tp of them, at least one (fewer KV heads than
	 * GPUs are replicated), and MLA's single latent is replicated whole */
	out->weight_bytes = kvt_model_weight_bytes(m, wd) / o->tp;
	if (m->kv_lora_rank)
		kv_share = 1;
	else
		kv_share = m->kv_heads >= o->tp ? 1.0 / o->tp : 1.0 / m->kv_heads;
	per_user = (uint64_t)((double)out->kv_bytes_per_context * kv_share);
	out->mem_for_users = out->weight_bytes + o->users * per_user + o->overhead_bytes;
	if (!gpu)
		return 0;

	out->mem_usable = (uint64_t)((double)gpu->mem_bytes * o->mem_util);
	if (out->mem_usable < out->weight_bytes + o->overhead_bytes)
		out->users_fit = -1;
	else
		out->users_fit = per_user ? (int64_t)((out->mem_usable - out->weight_bytes -
						       o->overhead_bytes) / per_user)
					  : INT64_MAX;
	/* a decode step reads the weights once for the whole batch and every
	 * user's KV; each GPU of a TP group reads its share in parallel */
	kv_step = (double)per_user;
	/* a batch is at most the users whose KV fits beside the weights */
	out->batch_users = out->users_fit < 0 ? 0 :
			   out->users_fit < (int64_t)o->users ? (uint32_t)out->users_fit : o->users;
	w1 = kvt_model_decode_weight_bytes(m, wd, 1) / o->tp;
	out->decode_tok_s_batch1 = gpu->mem_bw / (w1 + kv_step);
	if (out->batch_users) {
		wn = kvt_model_decode_weight_bytes(m, wd, out->batch_users) / o->tp;
		out->decode_tok_s_batch = out->batch_users * gpu->mem_bw /
					  (wn + out->batch_users * kv_step);
	}
	out->prefill_s = kvt_model_prefill_flops(m, 0, o->context) /
			 (gpu->bf16_flops * o->tp * o->mfu);
	return 0;
}
