/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier — shared vocabulary of the public API: keys, tiers, dtypes, layouts,
 * errors. Every public function returns 0 (or a count) on success and a
 * negative errno on failure; kvt_strerror() turns that into a message.
 *
 * Versioned structs. Every options struct of the API, and the descriptors
 * and stats like them, starts with `size_t size`: the sizeof the caller was
 * built with. Fields are only ever appended. x_init(o, size) writes the
 * defaults of the fields that fit in size, nothing past it, and sets o->size.
 * A call taking such a struct accepts any size up to its own: the fields an
 * older caller lacks take their defaults, and a larger size (fields this
 * library does not know) is -EINVAL. A struct the library fills for the
 * caller (kvt_store_stats, kvt_dev_info) gets the fields that fit in its
 * size, and its size is set to what was written. */
#ifndef KVTIER_TYPES_H
#define KVTIER_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier/version.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVT_KEY_BYTES 16

/* A block's name: 128 bits digesting its namespace salt and whole prefix. */
struct kvt_key {
	uint8_t bytes[KVT_KEY_BYTES];
};

/* A reuse class: a hint an engine may attach to the blocks it stores, saying
 * which kind of request they came from, so that an eviction policy can learn
 * how often blocks of each kind come back (the "class-lru" policy does).
 * 0 = no hint; 1..KVT_REUSE_CLASS_MAX are the engine's to define. kvtier's
 * own replay and connector use kvt_reuse_class_of(output tokens): the bit
 * length of the request's output token count, capped. */
#define KVT_REUSE_CLASS_MAX 15

/* The reference reuse class of a request with `output_tokens` output
 * tokens: their bit length (0 for none, 1 for 1, 2 for 2-3, 3 for 4-7, ...),
 * at most KVT_REUSE_CLASS_MAX. */
static inline unsigned kvt_reuse_class_of(uint64_t output_tokens)
{
	unsigned c = 0;

	while (output_tokens && c < KVT_REUSE_CLASS_MAX) {
		c++;
		output_tokens >>= 1;
	}
	return c;
}

/* The tiers, fastest first. KVT_TIER_NONE marks a block that is not stored. */
enum kvt_tier {
	KVT_TIER_NONE = 0,
	KVT_TIER_HBM = 1,
	KVT_TIER_DRAM = 2,
	KVT_TIER_SSD = 3,
	KVT_TIER_REMOTE = 4,
	KVT_TIER_COUNT
};

enum kvt_dtype {
	KVT_DTYPE_BF16 = 1,
	KVT_DTYPE_FP16 = 2,
	KVT_DTYPE_FP32 = 3,
	KVT_DTYPE_FP8_E4M3 = 4,
	KVT_DTYPE_FP8_E5M2 = 5,
	KVT_DTYPE_INT8 = 6,
};

/* Where a block's bytes sit in engine memory; decides the gather/scatter plan
 * and the block size. */
enum kvt_layout {
	/* per layer one tensor [2][pages][block_tokens][kv_heads][head_dim] */
	KVT_LAYOUT_PAGED_KV = 1,
	/* per layer two tensors, K and V, each [pages][block_tokens][kv_heads][head_dim] */
	KVT_LAYOUT_SPLIT_KV = 2,
	/* MLA: per layer one latent vector per token, [pages][block_tokens][head_dim]
	 * (head_dim = kv_lora_rank + qk_rope_head_dim, kv_heads = 1) */
	KVT_LAYOUT_MLA = 3,
};

#define KVT_MODEL_ID_MAX 64
#define KVT_SALT_MAX 32

/* What defines a namespace: a model's KV layout and shard, and the tenant's
 * salt. Blocks never cross namespaces. The store attaches one with
 * kvt_ns_attach (store.h); an engine names its own with kvt_client_hello
 * (client.h). A versioned struct: see kvt_ns_desc_init. */
struct kvt_ns_desc {
	size_t size;                    /* sizeof(struct kvt_ns_desc), set by _init */
	char model_id[KVT_MODEL_ID_MAX]; /* e.g. "Qwen/Qwen3-8B" */
	enum kvt_layout layout;         /* default KVT_LAYOUT_PAGED_KV */
	enum kvt_dtype dtype;           /* default KVT_DTYPE_BF16 */
	uint32_t layers;
	uint32_t kv_heads;              /* 1 for MLA */
	uint32_t head_dim;              /* MLA: kv_lora_rank + qk_rope_head_dim */
	uint32_t block_tokens;
	uint32_t tp_rank, tp_size;      /* tensor-parallel shard; default 0 of 1 */
	uint8_t tenant_salt[KVT_SALT_MAX]; /* mixed into every key of the namespace */
	uint32_t tenant_salt_len;       /* default 0: no salt */
};

/* Fill desc with the defaults (every other field zero) as far as size_bytes
 * reaches, and set its size: sizeof(*desc) for a caller of this version, a
 * smaller size for one built against an older header (the fields it lacks
 * then keep their defaults wherever the descriptor is read). */
void kvt_ns_desc_init(struct kvt_ns_desc *desc, size_t size_bytes);

/* Size of one element of dtype in bytes, 0 for an unknown dtype. */
size_t kvt_dtype_bytes(enum kvt_dtype dtype);

/* "bf16", "fp16", ... or NULL for an unknown dtype. */
const char *kvt_dtype_name(enum kvt_dtype dtype);

/* Parse a dtype name ("bf16", "bfloat16", "fp16", "float16", "fp32", "fp8",
 * "fp8_e4m3", "fp8_e5m2", "int8"). Returns the dtype or -EINVAL. */
int kvt_dtype_parse(const char *name);

/* "hbm", "dram", "ssd", "remote", "none". Never NULL. */
const char *kvt_tier_name(enum kvt_tier tier);

/* Message for a kvtier error: err is a negative errno (a positive one is
 * accepted too). Thread-safe; the string is static. */
const char *kvt_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif /* KVTIER_TYPES_H */
