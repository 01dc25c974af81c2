/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier — model-aware sizing and the offload-vs-recompute cost model.
 *
 * A kvt_model holds the shape of a transformer read from a Hugging Face
 * config.json (dense, MoE with shared experts, DeepSeek-style MLA). From it:
 * KV bytes per token, parameter counts (total and active per token), weight
 * bytes, and prefill FLOPs. A GPU table of public specs turns those into
 * capacity and decode-speed bounds, and kvt_plan_prefix() decides, for a
 * matched prefix whose blocks lie in various tiers, which blocks to load and
 * which to recompute.
 *
 * Everything but kvt_plan_lookup (which runs a store lookup) is computation
 * on plain structs the caller owns; nothing returned needs freeing, and every
 * function is thread-safe. Errors are negative errnos. */
#ifndef KVTIER_MODEL_H
#define KVTIER_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVT_MODEL_NAME_MAX 64

/* The shape of a model. Filled by kvt_model_parse(); the derived layer counts
 * (moe_layers, dense_layers) are set there too. Fields a config lacks are 0. */
struct kvt_model {
	char name[KVT_MODEL_NAME_MAX];  /* shipped name, or the file's stem */
	char model_type[32];            /* "llama", "qwen3_moe", "deepseek_v3", ... */
	enum kvt_dtype dtype;           /* torch_dtype (weights); bf16 if absent */
	uint32_t layers;                /* num_hidden_layers */
	uint32_t hidden;                /* hidden_size */
	uint32_t heads;                 /* num_attention_heads */
	uint32_t kv_heads;              /* num_key_value_heads (= heads if absent) */
	uint32_t head_dim;              /* head_dim, or hidden / heads (MLA: nope + rope) */
	uint32_t intermediate;          /* intermediate_size (dense MLP) */
	uint32_t vocab;                 /* vocab_size */
	uint32_t max_context;           /* max_position_embeddings */
	bool tie_embeddings;            /* tie_word_embeddings */
	bool qkv_bias;                  /* q/k/v projections carry a bias (Qwen2) */
	bool qk_norm;                   /* per-head RMSNorm of q and k (Qwen3) */
	/* MoE: 0 experts = dense */
	uint32_t experts;               /* num_experts / n_routed_experts / num_local_experts */
	uint32_t experts_per_tok;       /* num_experts_per_tok */
	uint32_t expert_intermediate;   /* moe_intermediate_size (or intermediate_size) */
	uint32_t shared_intermediate;   /* total width of the shared expert(s), 0 = none */
	uint32_t moe_layers;            /* layers with routed experts */
	uint32_t dense_layers;          /* layers with a dense MLP */
	/* MLA (DeepSeek-V2/V3): kv_lora_rank > 0 */
	uint32_t kv_lora_rank;
	uint32_t q_lora_rank;           /* 0 = q projected directly */
	uint32_t qk_rope_head_dim;
	uint32_t qk_nope_head_dim;
	uint32_t v_head_dim;
	uint32_t mtp_layers;            /* num_nextn_predict_layers: not counted */
};

/* Parse config.json text (len bytes, need not be NUL-terminated) into *out.
 * name is copied into out->name (may be NULL). A config nesting the language
 * model under "text_config" is read from there. Returns 0, -EINVAL for
 * malformed JSON or a config without layers/hidden_size/heads/vocab, -ERANGE
 * for a value that does not fit. */
int kvt_model_parse(const char *json, size_t len, const char *name, struct kvt_model *out);

/* Load a model by shipped name ("Qwen3-8B", case-insensitive; see
 * kvt_model_shipped), by the path of a config.json, or by a directory holding
 * one (a downloaded model). Returns 0, -ENOENT
 * when neither a shipped name nor a readable file, or kvt_model_parse's
 * errors. */
int kvt_model_load(const char *name_or_path, struct kvt_model *out);

/* Name of the i-th shipped config (the ones in model/configs/, built into the
 * library), NULL past the end. */
const char *kvt_model_shipped(size_t i);

/* KV cache bytes per token, all layers, for a KV dtype:
 * 2 x layers x kv_heads x head_dim x dtype bytes, or for MLA
 * layers x (kv_lora_rank + qk_rope_head_dim) x dtype bytes. 0 for an
 * unknown dtype. */
uint64_t kvt_model_kv_bytes_per_token(const struct kvt_model *m, enum kvt_dtype kv_dtype);

struct kvt_ns_desc;

/* Fill a namespace descriptor (include/kvtier/types.h) with the model's KV
 * layout: paged K/V, or MLA's one latent vector per token; the model's name
 * as model_id; tensor-parallel size 1. The caller sets tenant salt and TP
 * shard after. Returns 0 or -EINVAL (NULL, unknown dtype, block_tokens 0). */
int kvt_model_ns_desc(const struct kvt_model *m, enum kvt_dtype kv_dtype,
		      uint32_t block_tokens, struct kvt_ns_desc *desc);

/* Parameter counts: total, and active per token (MoE: the routed experts a
 * token uses, the shared ones, attention, embeddings and head). Norms and
 * biases included; MTP modules not. */
uint64_t kvt_model_params_total(const struct kvt_model *m);
uint64_t kvt_model_params_active(const struct kvt_model *m);

/* Bytes of the weights stored in dtype (m->dtype when dtype is 0). */
uint64_t kvt_model_weight_bytes(const struct kvt_model *m, enum kvt_dtype dtype);

/* Weight bytes one decode step reads for a batch of `batch` tokens: all dense
 * weights plus the routed experts the batch touches, expected under uniform
 * routing: experts x (1 - (1 - k/experts)^batch). Equals weight_bytes for a
 * dense model. */
double kvt_model_decode_weight_bytes(const struct kvt_model *m, enum kvt_dtype dtype,
				     uint32_t batch);

/* FLOPs of a prefill computing the KV of tokens [start, end) when the KV of
 * [0, start) is already present: 2 x active linear parameters per token
 * (embeddings excluded; the head only for the last token's logits) plus
 * attention's quadratic term, causal: token i attends to i+1 positions,
 * 2 x heads x (qk_dim + v_dim) FLOPs per position and layer. Returns 0 for
 * end <= start. */
double kvt_model_prefill_flops(const struct kvt_model *m, uint64_t start, uint64_t end);

/* ---- GPUs -------------------------------------------------------------- */

/* Public datasheet figures of one GPU (or one MIG profile of it). */
struct kvt_gpu {
	char name[48];           /* "H100-SXM", "A100-80GB", ..., "H100-SXM/3g.40gb" */
	uint64_t mem_bytes;      /* device memory, datasheet GB x 10^9 */
	double mem_bw;           /* device memory bandwidth, bytes/s */
	double bf16_flops;       /* dense BF16 tensor FLOP/s (no sparsity) */
	double fp8_flops;        /* dense FP8 tensor FLOP/s, 0 = no FP8 units */
	uint32_t pcie_gen;       /* host link generation (x16) */
	double c2c_bw;           /* NVLink-C2C to the CPU, bytes/s per direction; 0 = none */
	const char *mig;         /* comma-separated MIG profiles, NULL = no MIG */
	const char *source;      /* where the figures come from */
};

/* The i-th GPU of the table, NULL past the end. */
const struct kvt_gpu *kvt_gpu_at(size_t i);

/* Find a GPU by name, case-insensitive, with or without "-" (e.g. "h100sxm").
 * "GPU/PROFILE" or a separate profile (mig != NULL) gives the MIG slice:
 * its memory as the profile names it, and bandwidth and FLOP/s scaled by its
 * memory and compute slices (of 8 and 7). Returns 0 and *out, -ENOENT for an
 * unknown GPU or a profile it lacks. */
int kvt_gpu_find(const char *name, const char *mig, struct kvt_gpu *out);

/* The table's GPUs whose names start with name (case, '-', '_' and ' '
 * aside): "H100" gives "H100-SXM, H100-PCIe" in buf. Returns how many. */
size_t kvt_gpu_suggest(const char *name, char *buf, size_t len);

/* Host-link bandwidth of a PCIe generation x16, bytes/s per direction, after
 * 128b/130b encoding (Gen4: 31.5e9, Gen5: 63.0e9); 0 for an unknown one.
 * The link's ceiling: what copies reach is kvt_pcie_achieved_bw. */
double kvt_pcie_bw(uint32_t gen);

/* What pinned host-to-device copies achieve over a PCIe generation x16,
 * bytes/s (Gen4: 25e9, Gen5: 52e9), the figure models use as they use
 * achieved rates for the other links; *source (when not NULL) says where
 * it comes from. 0 (and NULL) for an unknown generation. */
double kvt_pcie_achieved_bw(uint32_t gen, const char **source);

/* ---- sizing ------------------------------------------------------------ */

struct kvt_sizing {
	uint64_t kv_bytes_per_token;
	uint64_t kv_bytes_per_context;  /* x context */
	uint64_t params_total, params_active;
	uint64_t weight_bytes;          /* per GPU: total / tp */
	uint64_t mem_for_users;         /* weights + users x KV per context + overhead, per GPU */
	uint64_t mem_usable;            /* GPU memory x mem_util */
	int64_t users_fit;              /* contexts of `context` tokens fitting; <0: weights alone do not fit */
	double decode_tok_s_batch1;     /* upper bound: mem_bw / bytes read per step */
	double decode_tok_s_batch;      /* total tokens/s at batch_users concurrent, same bound */
	double prefill_s;               /* a `context`-token prefill at bf16 peak x mfu */
	uint32_t batch_users;           /* `users`, or users_fit when fewer fit (0: none) */
};

struct kvt_sizing_opts {
	size_t size;                /* sizeof(struct kvt_sizing_opts), set by _init */
	enum kvt_dtype kv_dtype;    /* default bf16 */
	enum kvt_dtype weight_dtype; /* 0 = the model's */
	uint64_t context;           /* tokens per user; default 8192 */
	uint32_t users;             /* concurrent users; default 1 */
	uint32_t tp;                /* tensor-parallel GPUs: weights split evenly, KV by
	                             * heads (at least one per GPU; MLA's latent is
	                             * replicated); default 1 */
	double mem_util;            /* fraction of GPU memory usable; default 0.90 */
	uint64_t overhead_bytes;    /* per GPU: CUDA context, activations; default 2 GiB */
	double mfu;                 /* fraction of peak a prefill sustains; default 0.5 */
};

void kvt_sizing_opts_init(struct kvt_sizing_opts *opts, size_t size_bytes);

/* Size model m on gpu (NULL: only the model's figures, GPU ones 0). Returns 0
 * or -EINVAL (bad opts, unknown dtype). */
int kvt_model_size(const struct kvt_model *m, const struct kvt_gpu *gpu,
		   const struct kvt_sizing_opts *opts, struct kvt_sizing *out);

/* ---- load vs recompute ------------------------------------------------- */

enum kvt_plan_action {
	KVT_PLAN_LOAD = 1,      /* copy the block's KV in from its tier */
	KVT_PLAN_RECOMPUTE = 2, /* run the prefill over its tokens */
};

struct kvt_plan_opts {
	size_t size;                /* sizeof(struct kvt_plan_opts), set by _init */
	const struct kvt_model *model;
	enum kvt_dtype kv_dtype;    /* default bf16 */
	uint32_t block_tokens;      /* required */
	uint64_t block_bytes;       /* 0 = block_tokens x KV bytes per token */
	/* bytes/s from each tier into the GPU's memory; 0 = cannot load from it */
	double tier_bw[KVT_TIER_COUNT];
	/* fixed cost of using a tier at all in one load (seek, round trip), s */
	double tier_latency_s[KVT_TIER_COUNT];
	double prefill_flops_s;     /* sustained prefill FLOP/s (peak x MFU); required
	                             * with a model */
	/* Without a model: the engine's measured prefill speed, tokens/s, and
	 * recomputing n tokens costs n / prefill_tokens_s (block_bytes then
	 * required). Ignored when model is set. */
	double prefill_tokens_s;
};

/* Defaults: bf16; HBM 1e12 B/s, DRAM 25e9 (PCIe Gen4 pinned, achieved),
 * SSD 3e9 with 100 us latency, remote 0; everything else 0. */
void kvt_plan_opts_init(struct kvt_plan_opts *opts, size_t size_bytes);

struct kvt_plan {
	size_t blocks;          /* matched blocks planned */
	size_t load_blocks;     /* blocks [0, load_blocks) are loaded, the rest recomputed */
	double load_s;          /* time of the loads chosen */
	double recompute_s;     /* time of the recompute chosen (prefix blocks only) */
	double total_s;         /* load_s + recompute_s */
	double all_load_s;      /* time had every loadable block been loaded (INFINITY if some cannot) */
	double all_recompute_s; /* time had the whole prefix been recomputed */
	uint64_t load_bytes;
};

/* Plan the matched prefix tiers[0..n) (as kvt_lookup() fills them; the first
 * KVT_TIER_NONE ends the prefix). The plan loads a leading run of blocks and
 * recomputes the rest, because an engine's prefill computes one contiguous
 * run of tokens after what it has: for every split k it costs
 *   sum over i < k of (block bytes / tier_bw[tier i])
 *     + sum over tiers used of tier_latency_s
 *     + prefill_flops([k x bt, n x bt)) / prefill_flops_s
 *       (without a model: (n - k) x bt / prefill_tokens_s)
 * and keeps the cheapest, preferring to load on a tie. Loads are counted
 * serially and without overlap with compute (an upper bound on both sides).
 * Recompute is costed at the compute rate because the request's own prefill
 * of its new tokens already pays the pass over the weights; recomputing the
 * tail only lengthens that pass.
 * When actions is not NULL, actions[i] receives the action of block i (i <
 * plan->blocks). Returns 0 or -EINVAL (NULL out, no block_tokens, neither a
 * model with prefill_flops_s nor prefill_tokens_s with block_bytes). */
int kvt_plan_prefix(const struct kvt_plan_opts *opts, const uint8_t *tiers, size_t n,
		    struct kvt_plan *out, uint8_t *actions);

struct kvt_ns;

/* LOOKUP with its plan: kvt_lookup(ns, keys, n, tiers), then kvt_plan_prefix
 * over the matched prefix, with the namespace's block size when
 * opts->block_bytes is 0. tiers (n entries) may be NULL when the caller does
 * not want them. Returns the matched count (as kvt_lookup) with *out and
 * actions filled, or kvt_lookup's / kvt_plan_prefix's errors, or -ENOMEM. */
int kvt_plan_lookup(struct kvt_ns *ns, const struct kvt_key *keys, size_t n,
		    const struct kvt_plan_opts *opts, uint8_t *tiers, struct kvt_plan *out,
		    uint8_t *actions);

#ifdef __cplusplus
}
#endif
#endif /* KVTIER_MODEL_H */
