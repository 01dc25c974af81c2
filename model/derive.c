/* SPDX-License-Identifier: Apache-2.0 */
/* Figures derived from a model's shape: KV bytes, parameters, FLOPs.
 *
 * Every MLP is gated (gate, up, down: 3 x hidden x width), as in all the
 * families kvtier ships; norms are RMSNorm (one vector each). */
#include <errno.h>
#include <math.h>
#include <stdio.h>

#include "kvtier/model.h"
#include "kvtier/store.h"

static bool is_mla(const struct kvt_model *m)
{
	return m->kv_lora_rank > 0;
}

uint64_t kvt_model_kv_bytes_per_token(const struct kvt_model *m, enum kvt_dtype kv_dtype)
{
	uint64_t b = kvt_dtype_bytes(kv_dtype);

	if (!m)
		return 0;
	/* MLA caches one compressed latent plus the shared rope key per token */
	if (is_mla(m))
		return (uint64_t)m->layers * (m->kv_lora_rank + m->qk_rope_head_dim) * b;
	return 2ull * m->layers * m->kv_heads * m->head_dim * b;
}

int kvt_model_ns_desc(const struct kvt_model *m, enum kvt_dtype kv_dtype,
		      uint32_t block_tokens, struct kvt_ns_desc *d)
{
	if (!m || !d || !block_tokens || !kvt_dtype_bytes(kv_dtype))
		return -EINVAL;
	kvt_ns_desc_init(d, sizeof(*d));
	snprintf(d->model_id, sizeof(d->model_id), "%s", m->name);
	d->dtype = kv_dtype;
	d->layers = m->layers;
	d->block_tokens = block_tokens;
	if (is_mla(m)) {
		d->layout = KVT_LAYOUT_MLA;
		d->kv_heads = 1;
		d->head_dim = m->kv_lora_rank + m->qk_rope_head_dim;
	} else {
		d->layout = KVT_LAYOUT_PAGED_KV;
		d->kv_heads = m->kv_heads;
		d->head_dim = m->head_dim;
	}
	return 0;
}

static uint64_t attn_params(const struct kvt_model *m)
{
	uint64_t h = m->hidden, p;

	if (is_mla(m)) {
		uint64_t qk = m->qk_nope_head_dim + m->qk_rope_head_dim;

		if (m->q_lora_rank)
			p = h * m->q_lora_rank + m->q_lora_rank +
			    (uint64_t)m->q_lora_rank * m->heads * qk;
		else
			p = h * m->heads * qk;
		p += h * (m->kv_lora_rank + m->qk_rope_head_dim) + m->kv_lora_rank +
		     (uint64_t)m->kv_lora_rank * m->heads * (m->qk_nope_head_dim + m->v_head_dim);
		p += (uint64_t)m->heads * m->v_head_dim * h;
		return p;
	}
	p = h * m->heads * m->head_dim + 2 * h * m->kv_heads * m->head_dim +
	    (uint64_t)m->heads * m->head_dim * h;
	if (m->qkv_bias)
		p += (uint64_t)(m->heads + 2 * m->kv_heads) * m->head_dim;
	if (m->qk_norm)
		p += 2ull * m->head_dim;
	return p;
}

static uint64_t expert_params(const struct kvt_model *m)
{
	return 3ull * m->hidden * m->expert_intermediate;
}

/* Everything but the routed experts and the embeddings/head: attention, norms,
 * dense MLPs, shared experts, routers. */
static uint64_t body_params(const struct kvt_model *m)
{
	uint64_t h = m->hidden;
	uint64_t p = (uint64_t)m->layers * (attn_params(m) + 2 * h);

	p += (uint64_t)m->dense_layers * 3 * h * m->intermediate;
	p += (uint64_t)m->moe_layers * (3 * h * m->shared_intermediate + (uint64_t)m->experts * h);
	return p + h; /* final norm */
}

static uint64_t embed_params(const struct kvt_model *m)
{
	uint64_t e = (uint64_t)m->vocab * m->hidden;

	return m->tie_embeddings ? e : 2 * e;
}

uint64_t kvt_model_params_total(const struct kvt_model *m)
{
	if (!m)
		return 0;
	return body_params(m) + embed_params(m) +
	       (uint64_t)m->moe_layers * m->experts * expert_params(m);
}

uint64_t kvt_model_params_active(const struct kvt_model *m)
{
	if (!m)
		return 0;
	return body_params(m) + embed_params(m) +
	       (uint64_t)m->moe_layers * m->experts_per_tok * expert_params(m);
}

uint64_t kvt_model_weight_bytes(const struct kvt_model *m, enum kvt_dtype dtype)
{
	if (!m)
		return 0;
	return kvt_model_params_total(m) * kvt_dtype_bytes(dtype ? dtype : m->dtype);
}

double kvt_model_decode_weight_bytes(const struct kvt_model *m, enum kvt_dtype dtype,
				     uint32_t batch)
{
	double b, routed, frac;

	if (!m)
		return 0;
	b = (double)kvt_dtype_bytes(dtype ? dtype : m->dtype);
	routed = (double)m->moe_layers * m->experts * (double)expert_params(m);
	frac = 1;
	if (m->experts && batch)
		frac = 1 - pow(1 - (double)m->experts_per_tok / m->experts, batch);
	return b * ((double)(body_params(m) + embed_params(m)) + routed * frac);
}

double kvt_model_prefill_flops(const struct kvt_model *m, uint64_t start, uint64_t end)
{
	double n, linear, positions, dqk, dv;

	if (!m || end <= start)
		return 0;
	n = (double)(end - start);
	/* the embedding lookup is no matmul; the head runs for one token only */
	linear = (double)(body_params(m) +
			  (uint64_t)m->moe_layers * m->experts_per_tok * expert_params(m));
	/* sum over tokens i in [start, end) of the i + 1 positions each attends to */
	positions = ((double)end * (double)(end + 1) - (double)start * (double)(start + 1)) / 2;
	if (is_mla(m)) {
		dqk = m->qk_nope_head_dim + m->qk_rope_head_dim;
		dv = m->v_head_dim;
	} else {
		dqk = dv = m->head_dim;
	}
	return 2 * linear * n + 2.0 * m->heads * (dqk + dv) * m->layers * positions;
}
