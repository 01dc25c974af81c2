/* SPDX-License-Identifier: Apache-2.0 */
/* Derived figures of the shipped models against the public worked numbers:
 * KV bytes per token and per context, parameter counts as published on the
 * model cards (within a stated tolerance), decode bounds. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "kvtier/model.h"
#include "kvtier/store.h"

static struct kvt_model load(const char *name)
{
	struct kvt_model m;

	assert_int_equal(kvt_model_load(name, &m), 0);
	return m;
}

/* |got / want - 1| <= tol */
static void assert_near(double got, double want, double tol)
{
	if (fabs(got / want - 1) > tol) {
		fprintf(stderr, "got %.6g, want %.6g within %.1f%%\n", got, want, tol * 100);
		fail();
	}
}

static void kv_bytes_per_token_worked_numbers(void **state)
{
	struct kvt_model q8 = load("Qwen3-8B"), l70 = load("Llama-3.1-70B");

	/* 2 x 36 x 8 x 128 x 2 */
	assert_int_equal(kvt_model_kv_bytes_per_token(&q8, KVT_DTYPE_BF16), 147456);
	assert_int_equal(kvt_model_kv_bytes_per_token(&q8, KVT_DTYPE_FP16), 147456);
	assert_int_equal(kvt_model_kv_bytes_per_token(&q8, KVT_DTYPE_FP8_E4M3), 73728);
	/* about 19.3 GB for 131,072 tokens */
	assert_int_equal(kvt_model_kv_bytes_per_token(&q8, KVT_DTYPE_BF16) * 131072,
			 19327352832ull);
	/* 2 x 80 x 8 x 128 x 2, and exactly 40 GiB at 131,072 tokens */
	assert_int_equal(kvt_model_kv_bytes_per_token(&l70, KVT_DTYPE_BF16), 327680);
	assert_int_equal(kvt_model_kv_bytes_per_token(&l70, KVT_DTYPE_BF16) * 131072,
			 40ull << 30);
}

static void mla_caches_the_latent(void **state)
{
	struct kvt_model ds = load("DeepSeek-V3");

	assert_int_equal(ds.kv_lora_rank, 512);
	assert_int_equal(ds.qk_rope_head_dim, 64);
	/* 61 layers x (512 + 64) x 2 bytes, not 2 x 61 x 128 heads x ... */
	assert_int_equal(kvt_model_kv_bytes_per_token(&ds, KVT_DTYPE_BF16), 70272);
	assert_int_equal(kvt_model_kv_bytes_per_token(&ds, KVT_DTYPE_FP8_E4M3), 35136);
}

static void namespace_descriptors_agree_with_kv_bytes(void **state)
{
	struct kvt_model q = load("Qwen3-8B"), ds = load("DeepSeek-V3");
	struct kvt_ns_desc d;

	/* one token per block: the block is exactly the KV of one token */
	assert_int_equal(kvt_model_ns_desc(&q, KVT_DTYPE_BF16, 1, &d), 0);
	assert_int_equal(d.layout, KVT_LAYOUT_PAGED_KV);
	assert_string_equal(d.model_id, q.name);
	assert_int_equal(kvt_ns_desc_block_bytes(&d), 147456);
	assert_int_equal(kvt_model_ns_desc(&ds, KVT_DTYPE_FP8_E4M3, 16, &d), 0);
	assert_int_equal(d.layout, KVT_LAYOUT_MLA);
	assert_int_equal(kvt_ns_desc_block_bytes(&d), 16 * 35136);
	assert_int_equal(kvt_model_ns_desc(&q, KVT_DTYPE_BF16, 0, &d), -EINVAL);
	assert_int_equal(kvt_model_ns_desc(NULL, KVT_DTYPE_BF16, 16, &d), -EINVAL);
}

static void dense_param_counts_match_model_cards(void **state)
{
	/* exact where the checkpoint's tensor count is public */
	struct kvt_model q8 = load("Qwen3-8B"), l70 = load("Llama-3.1-70B"),
			 l8 = load("Llama-3.1-8B");

	assert_int_equal(kvt_model_params_total(&q8), 8190735360ull);
	assert_int_equal(kvt_model_params_total(&l70), 70553706496ull);
	assert_int_equal(kvt_model_params_total(&l8), 8030261248ull);
	assert_int_equal(kvt_model_params_active(&l8), kvt_model_params_total(&l8));
	/* model cards round: 1% */
	assert_near((double)kvt_model_params_total(&q8), 8.2e9, 0.01);
	assert_near((double)kvt_model_params_total(&l70), 70.6e9, 0.01);
	{
		struct kvt_model q32 = load("Qwen3-32B"), mi = load("Mistral-7B-v0.1"),
				 q25 = load("Qwen2.5-7B");
		assert_near((double)kvt_model_params_total(&q32), 32.8e9, 0.01);
		assert_near((double)kvt_model_params_total(&mi), 7.24e9, 0.01);
		assert_near((double)kvt_model_params_total(&q25), 7.61e9, 0.01);
	}
	{
		/* Llama-3.2-3B ties its head to the embeddings: 3.21B, not 3.6B */
		struct kvt_model q14 = load("Qwen3-14B"), l3 = load("Llama-3.2-3B");
		assert_near((double)kvt_model_params_total(&q14), 14.8e9, 0.01);
		assert_true(l3.tie_embeddings);
		assert_near((double)kvt_model_params_total(&l3), 3.21e9, 0.01);
		/* 2 x 28 x 8 x 128 x 2 */
		assert_int_equal(kvt_model_kv_bytes_per_token(&l3, KVT_DTYPE_BF16), 114688);
	}
}

static void moe_total_and_active(void **state)
{
	struct kvt_model ds = load("DeepSeek-V3"), q3 = load("Qwen3-30B-A3B");

	/* DeepSeek-V3: 3 dense layers, 58 MoE layers of 256 routed + 1 shared */
	assert_int_equal(ds.dense_layers, 3);
	assert_int_equal(ds.moe_layers, 58);
	assert_int_equal(ds.shared_intermediate, 2048);
	/* published: 671B total, 37B activated (MTP module excluded); 2% */
	assert_near((double)kvt_model_params_total(&ds), 671e9, 0.02);
	assert_near((double)kvt_model_params_active(&ds), 37e9, 0.02);
	/* Qwen3-30B-A3B: 30.5B total, 3.3B activated; all 48 layers MoE */
	assert_int_equal(q3.moe_layers, 48);
	assert_near((double)kvt_model_params_total(&q3), 30.5e9, 0.02);
	assert_near((double)kvt_model_params_active(&q3), 3.3e9, 0.02);
	/* Mixtral-8x7B: 46.7B total, 12.9B active (2 of 8 experts) */
	{
		struct kvt_model mx = load("Mixtral-8x7B-v0.1");
		assert_int_equal(mx.moe_layers, 32);
		assert_near((double)kvt_model_params_total(&mx), 46.7e9, 0.01);
		assert_near((double)kvt_model_params_active(&mx), 12.9e9, 0.01);
	}
	/* the checkpoint is fp8: 1 byte per parameter */
	assert_int_equal(ds.dtype, KVT_DTYPE_FP8_E4M3);
	assert_int_equal(kvt_model_weight_bytes(&ds, 0), kvt_model_params_total(&ds));
}

static void decode_bound_qwen3_8b_on_h100(void **state)
{
	struct kvt_model q8 = load("Qwen3-8B");
	struct kvt_gpu h100;
	struct kvt_sizing_opts o;
	struct kvt_sizing s;

	assert_int_equal(kvt_gpu_find("H100-SXM", NULL, &h100), 0);
	kvt_sizing_opts_init(&o, sizeof(o));
	o.context = 1;
	assert_int_equal(kvt_model_size(&q8, &h100, &o, &s), 0);
	/* 3.35 TB/s / 16.38 GB of bf16 weights: about 204 tokens/s */
	assert_near(s.decode_tok_s_batch1, 204.0, 0.005);
	assert_int_equal(s.weight_bytes, 2 * 8190735360ull);
	/* at 32K context each step also reads 4.8 GB of KV */
	o.context = 32768;
	assert_int_equal(kvt_model_size(&q8, &h100, &o, &s), 0);
	assert_near(s.decode_tok_s_batch1, 3.35e12 / (16381470720.0 + 147456.0 * 32768), 1e-9);
	/* batch 8: weights read once per step for all 8 */
	o.users = 8;
	assert_int_equal(kvt_model_size(&q8, &h100, &o, &s), 0);
	assert_near(s.decode_tok_s_batch, 8 * 3.35e12 / (16381470720.0 + 8 * 147456.0 * 32768),
		    1e-9);
}

static void moe_decode_reads_the_experts_a_batch_touches(void **state)
{
	struct kvt_model q3 = load("Qwen3-30B-A3B");
	double total = (double)kvt_model_params_total(&q3);
	double active = (double)kvt_model_params_active(&q3);
	/* all routed expert weights: (total - active) is 120 of the 128 experts */
	double routed = (total - active) * 128 / 120;
	double b1 = kvt_model_decode_weight_bytes(&q3, 0, 1);
	double b40 = kvt_model_decode_weight_bytes(&q3, 0, 40);
	double b1000 = kvt_model_decode_weight_bytes(&q3, 0, 1000);

	/* batch 1 reads the active weights; 40 tokens touch 1 - (120/128)^40 =
	 * 92.4% of the experts; 1000 tokens all of them */
	assert_near(b1, 2.0 * active, 1e-9);
	assert_near(b40, 2.0 * (total - routed * pow(120.0 / 128, 40)), 1e-9);
	assert_true(b1 < b40 && b40 < 2.0 * total);
	assert_near(b1000, 2.0 * total, 1e-9);
}

static void users_fit_by_hand(void **state)
{
	struct kvt_model l8 = load("Llama-3.1-8B"), l70 = load("Llama-3.1-70B");
	struct kvt_gpu g;
	struct kvt_sizing_opts o;
	struct kvt_sizing s;

	kvt_sizing_opts_init(&o, sizeof(o));
	o.context = 8192;
	assert_int_equal(kvt_gpu_find("H100-SXM", NULL, &g), 0);
	assert_int_equal(kvt_model_size(&l8, &g, &o, &s), 0);
	/* (80e9 x 0.9 - 16,060,522,496 - 2 GiB) / (131,072 x 8,192) = 50.09 */
	assert_int_equal(s.users_fit, 50);
	assert_int_equal(s.mem_for_users, 16060522496ull + (1ull << 30) + (2ull << 30));
	/* fp8 KV halves the per-user bytes: 100.19 */
	o.kv_dtype = KVT_DTYPE_FP8_E4M3;
	assert_int_equal(kvt_model_size(&l8, &g, &o, &s), 0);
	assert_int_equal(s.users_fit, 100);
	/* 141 GB of bf16 weights fit no A100-40GB; over 4 H100s they do */
	o.kv_dtype = KVT_DTYPE_BF16;
	assert_int_equal(kvt_gpu_find("A100-40GB", NULL, &g), 0);
	assert_int_equal(kvt_model_size(&l70, &g, &o, &s), 0);
	assert_int_equal(s.users_fit, -1);
	o.tp = 4;
	assert_int_equal(kvt_gpu_find("H100-SXM", NULL, &g), 0);
	assert_int_equal(kvt_model_size(&l70, &g, &o, &s), 0);
	/* (72e9 - 141,107,412,992 / 4 - 2 GiB) / (327,680 x 8,192 / 4) = 51.5 */
	assert_int_equal(s.users_fit, 51);
	/* MLA's latent is on every GPU of the group: DeepSeek-V3 over 8 H200s,
	 * fp8 weights 83.9 GB per GPU, 32K contexts of 70,272 B/token, whole:
	 * (126.9e9 - 671,026,404,352 / 8 - 2 GiB) / 2,302,672,896 = 17.8 */
	{
		struct kvt_model ds = load("DeepSeek-V3");
		struct kvt_sizing_opts od;

		kvt_sizing_opts_init(&od, sizeof(od));
		od.tp = 8;
		od.context = 32768;
		assert_int_equal(kvt_gpu_find("H200", NULL, &g), 0);
		assert_int_equal(kvt_model_size(&ds, &g, &od, &s), 0);
		assert_int_equal(s.users_fit, 17);
		/* GQA with more GPUs than KV heads: Llama's 8 over 16 keep one each */
		od.tp = 16;
		od.context = 8192;
		assert_int_equal(kvt_model_size(&l70, &g, &od, &s), 0);
		assert_int_equal(s.mem_for_users,
				 141107412992ull / 16 + 327680ull * 8192 / 8 + (2ull << 30));
	}
	/* bad options */
	o.tp = 0;
	assert_int_equal(kvt_model_size(&l70, &g, &o, &s), -EINVAL);
}

static void prefill_flops_by_hand(void **state)
{
	/* one layer, one head of 64, MLP 64 wide: linear weights (no embeddings)
	 * 4 x 64 x 64 + 3 x 64 x 64 + norms 2 x 64 + 64 = 28,864 */
	static const char cfg[] =
		"{\"num_hidden_layers\":1,\"hidden_size\":64,\"num_attention_heads\":1,"
		"\"num_key_value_heads\":1,\"intermediate_size\":64,\"vocab_size\":10,"
		"\"model_type\":\"llama\"}";
	struct kvt_model m;
	struct kvt_model q8 = load("Qwen3-8B");

	assert_int_equal(kvt_model_parse(cfg, sizeof(cfg) - 1, "tiny", &m), 0);
	assert_int_equal(m.head_dim, 64);
	/* 4 tokens: 2 x 28,864 x 4 + 2 x (64 + 64) x (1 + 2 + 3 + 4) */
	assert_true(kvt_model_prefill_flops(&m, 0, 4) == 230912.0 + 2560.0);
	/* tokens 4..8 attend to 5..8 positions: 2 x 128 x 26 */
	assert_true(kvt_model_prefill_flops(&m, 4, 8) == 230912.0 + 6656.0);
	assert_true(kvt_model_prefill_flops(&m, 8, 8) == 0);
	/* the split adds up, and the quadratic term shows at length */
	assert_near(kvt_model_prefill_flops(&q8, 0, 100000),
		    kvt_model_prefill_flops(&q8, 0, 40000) +
			    kvt_model_prefill_flops(&q8, 40000, 100000), 1e-12);
	assert_true(kvt_model_prefill_flops(&q8, 0, 131072) >
		    2.2 * kvt_model_prefill_flops(&q8, 0, 65536));
	/* short prompts are linear: about 2 x 7.6e9 FLOPs per token */
	assert_near(kvt_model_prefill_flops(&q8, 0, 1) / 2, 8190735360.0 - 2 * 622329856.0, 1e-4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(kv_bytes_per_token_worked_numbers),
		cmocka_unit_test(mla_caches_the_latent),
		cmocka_unit_test(namespace_descriptors_agree_with_kv_bytes),
		cmocka_unit_test(dense_param_counts_match_model_cards),
		cmocka_unit_test(moe_total_and_active),
		cmocka_unit_test(decode_bound_qwen3_8b_on_h100),
		cmocka_unit_test(moe_decode_reads_the_experts_a_batch_touches),
		cmocka_unit_test(users_fit_by_hand),
		cmocka_unit_test(prefill_flops_by_hand),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
