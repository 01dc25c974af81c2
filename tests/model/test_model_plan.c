/* SPDX-License-Identifier: Apache-2.0 */
/* kvt_plan_prefix against cases worked by hand.
 *
 * The model is one layer, one 64-wide head, a 64-wide MLP, bf16 KV:
 *   linear weights 28,864 -> 57,728 FLOPs per token,
 *   attention 2 x 1 head x (64 + 64) = 256 FLOPs per attended position,
 *   KV 256 B per token; blocks of 4 tokens = 1,024 B.
 * Block j's tokens 4j..4j+3 attend to 16j + 10 positions in all, so its
 * recompute is 230,912 + 256 x (16j + 10) FLOPs. With the GPU at 230,912
 * FLOP/s a block's linear part takes exactly 1 s. */
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

static struct kvt_model tiny;

static int setup(void **state)
{
	static const char cfg[] =
		"{\"num_hidden_layers\":1,\"hidden_size\":64,\"num_attention_heads\":1,"
		"\"intermediate_size\":64,\"vocab_size\":10}";

	return kvt_model_parse(cfg, sizeof(cfg) - 1, "tiny", &tiny);
}

static void opts(struct kvt_plan_opts *o)
{
	kvt_plan_opts_init(o, sizeof(*o));
	o->model = &tiny;
	o->block_tokens = 4;
	o->tier_bw[KVT_TIER_DRAM] = 1024;     /* 1 s per block */
	o->tier_bw[KVT_TIER_SSD] = 256;       /* 4 s per block */
	o->tier_latency_s[KVT_TIER_SSD] = 0.5;
	o->tier_bw[KVT_TIER_REMOTE] = 0;
	o->prefill_flops_s = 230912;
}

static void near(double got, double want)
{
	if (fabs(got - want) > 1e-9 * (fabs(want) + 1)) {
		fprintf(stderr, "got %.12g want %.12g\n", got, want);
		fail();
	}
}

static void loads_when_loading_is_cheaper(void **state)
{
	const uint8_t tiers[] = { KVT_TIER_DRAM, KVT_TIER_DRAM, KVT_TIER_DRAM, KVT_TIER_DRAM };
	struct kvt_plan_opts o;
	struct kvt_plan p;
	uint8_t act[4];

	opts(&o);
	assert_int_equal(kvt_plan_prefix(&o, tiers, 4, &p, act), 0);
	/* each block: load 1 s, recompute 1 + (2560 + 4096 j) / 230912 s */
	assert_int_equal(p.blocks, 4);
	assert_int_equal(p.load_blocks, 4);
	near(p.load_s, 4.0);
	near(p.recompute_s, 0.0);
	near(p.total_s, 4.0);
	assert_int_equal(p.load_bytes, 4096);
	/* all 16 tokens: 16 x 57,728 + 256 x (1 + ... + 16) = 958,464 FLOPs */
	near(p.all_recompute_s, 958464.0 / 230912);
	near(p.all_load_s, 4.0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(act[i], KVT_PLAN_LOAD);
}

static void recomputes_a_short_ssd_tail(void **state)
{
	const uint8_t tiers[] = { KVT_TIER_DRAM, KVT_TIER_DRAM, KVT_TIER_SSD, KVT_TIER_SSD };
	struct kvt_plan_opts o;
	struct kvt_plan p;
	uint8_t act[4];

	opts(&o);
	assert_int_equal(kvt_plan_prefix(&o, tiers, 4, &p, act), 0);
	/* split k -> cost:
	 *   0: 958,464 / 230,912                              = 4.15077
	 *   1: 1 + (12 x 57,728 + 256 x 126) / 230,912        = 4.13969
	 *   2: 2 + (8 x 57,728 + 256 x 100) / 230,912         = 4.11086
	 *   3: 2 + 4 + 0.5 + (4 x 57,728 + 256 x 58) / 230,912 = 7.56430
	 *   4: 2 + 8 + 0.5                                    = 10.5 */
	assert_int_equal(p.load_blocks, 2);
	near(p.load_s, 2.0);
	near(p.recompute_s, 487424.0 / 230912);
	near(p.all_load_s, 10.5);
	assert_int_equal(act[0], KVT_PLAN_LOAD);
	assert_int_equal(act[1], KVT_PLAN_LOAD);
	assert_int_equal(act[2], KVT_PLAN_RECOMPUTE);
	assert_int_equal(act[3], KVT_PLAN_RECOMPUTE);
	/* a slower GPU makes the same SSD tail worth loading: at 1/10 the
	 * FLOP/s, recomputing block 3 alone costs 10.64 s against 4.5 s */
	o.prefill_flops_s = 23091.2;
	assert_int_equal(kvt_plan_prefix(&o, tiers, 4, &p, act), 0);
	assert_int_equal(p.load_blocks, 4);
	near(p.total_s, 10.5);
}

static void fast_gpu_recomputes_everything(void **state)
{
	const uint8_t tiers[] = { KVT_TIER_SSD, KVT_TIER_SSD };
	struct kvt_plan_opts o;
	struct kvt_plan p;
	uint8_t act[2];

	opts(&o);
	o.prefill_flops_s = 1e12;
	assert_int_equal(kvt_plan_prefix(&o, tiers, 2, &p, act), 0);
	assert_int_equal(p.load_blocks, 0);
	/* 8 tokens: 8 x 57,728 + 256 x 36 */
	near(p.total_s, (461824.0 + 9216.0) / 1e12);
	near(p.all_load_s, 8.5);
	assert_int_equal(act[0], KVT_PLAN_RECOMPUTE);
}

/* Without a model the engine's measured speed prices the recompute: with
 * 1 KiB blocks of 16 tokens, DRAM at 1 MB/s costs 1.024 ms a block and SSD at
 * 100 kB/s 10.24 ms; at 4,000 tokens/s a block recomputes in 4 ms, so the
 * DRAM blocks are loaded and the prefix ends where SSD begins. */
static void measured_tokens_per_second_price_the_recompute(void **state)
{
	const uint8_t tiers[] = { KVT_TIER_DRAM, KVT_TIER_DRAM, KVT_TIER_SSD, KVT_TIER_SSD };
	struct kvt_plan_opts o;
	struct kvt_plan p;

	kvt_plan_opts_init(&o, sizeof(o));
	o.block_tokens = 16;
	o.block_bytes = 1024;
	o.tier_bw[KVT_TIER_DRAM] = 1e6;
	o.tier_bw[KVT_TIER_SSD] = 1e5;
	o.tier_latency_s[KVT_TIER_SSD] = 0;
	o.prefill_tokens_s = 4000;
	assert_int_equal(kvt_plan_prefix(&o, tiers, 4, &p, NULL), 0);
	assert_int_equal(p.load_blocks, 2);
	near(p.total_s, 2 * 1.024e-3 + 2 * 4e-3);
	near(p.all_recompute_s, 16e-3);
	/* a slower engine makes the SSD blocks worth loading */
	o.prefill_tokens_s = 1000;
	assert_int_equal(kvt_plan_prefix(&o, tiers, 4, &p, NULL), 0);
	assert_int_equal(p.load_blocks, 4);
	/* no model and no speed, or no block size: nothing to plan with */
	o.prefill_tokens_s = 0;
	assert_int_equal(kvt_plan_prefix(&o, tiers, 4, &p, NULL), -EINVAL);
	o.prefill_tokens_s = 1000;
	o.block_bytes = 0;
	assert_int_equal(kvt_plan_prefix(&o, tiers, 4, &p, NULL), -EINVAL);
}

static void tie_goes_to_the_load(void **state)
{
	const uint8_t tiers[] = { KVT_TIER_DRAM };
	struct kvt_plan_opts o;
	struct kvt_plan p;

	opts(&o);
	/* block 0: 230,912 + 2,560 = 233,472 FLOPs, at 233,472 FLOP/s 1 s = its load */
	o.prefill_flops_s = 233472;
	assert_int_equal(kvt_plan_prefix(&o, tiers, 1, &p, NULL), 0);
	assert_int_equal(p.load_blocks, 1);
	near(p.total_s, 1.0);
	near(p.all_recompute_s, 1.0);
}

static void unloadable_block_ends_the_loads(void **state)
{
	const uint8_t tiers[] = { KVT_TIER_DRAM, KVT_TIER_REMOTE, KVT_TIER_DRAM };
	const uint8_t gap[] = { KVT_TIER_DRAM, KVT_TIER_DRAM, KVT_TIER_NONE, KVT_TIER_DRAM };
	struct kvt_plan_opts o;
	struct kvt_plan p;

	opts(&o);
	/* no bandwidth to the remote tier: load block 0, recompute 1 and 2 */
	assert_int_equal(kvt_plan_prefix(&o, tiers, 3, &p, NULL), 0);
	assert_int_equal(p.blocks, 3);
	assert_int_equal(p.load_blocks, 1);
	assert_true(isinf(p.all_load_s));
	/* 1 + (8 x 57,728 + 256 x (5 + ... + 12)) / 230,912 */
	near(p.total_s, 1 + (461824.0 + 256.0 * 68) / 230912);
	/* the first miss ends the prefix */
	assert_int_equal(kvt_plan_prefix(&o, gap, 4, &p, NULL), 0);
	assert_int_equal(p.blocks, 2);
	assert_int_equal(p.load_blocks, 2);
	/* nothing matched */
	assert_int_equal(kvt_plan_prefix(&o, gap + 2, 1, &p, NULL), 0);
	assert_int_equal(p.blocks, 0);
	near(p.total_s, 0);
}

static void explicit_block_bytes_and_bad_opts(void **state)
{
	const uint8_t tiers[] = { KVT_TIER_DRAM };
	struct kvt_plan_opts o;
	struct kvt_plan p;

	opts(&o);
	/* a TP shard holds half the block: 0.5 s to load */
	o.block_bytes = 512;
	assert_int_equal(kvt_plan_prefix(&o, tiers, 1, &p, NULL), 0);
	near(p.load_s, 0.5);
	o.prefill_flops_s = 0;
	assert_int_equal(kvt_plan_prefix(&o, tiers, 1, &p, NULL), -EINVAL);
	opts(&o);
	o.block_tokens = 0;
	assert_int_equal(kvt_plan_prefix(&o, tiers, 1, &p, NULL), -EINVAL);
	opts(&o);
	o.model = NULL;
	assert_int_equal(kvt_plan_prefix(&o, tiers, 1, &p, NULL), -EINVAL);
	opts(&o);
	assert_int_equal(kvt_plan_prefix(&o, NULL, 1, &p, NULL), -EINVAL);
}

static void real_model_short_ssd_tail_on_h100(void **state)
{
	/* Qwen3-8B, 16-token blocks (2.36 MB), H100 SXM at 40% MFU: 60 blocks
	 * in DRAM over PCIe Gen5 and a 4-block SSD tail at 2 GB/s. The tail
	 * costs 4.8 ms to read and 2.3 ms to recompute: recompute it. A DRAM
	 * block loads in 37 us and recomputes in 0.6 ms: load those. */
	struct kvt_model q8;
	struct kvt_plan_opts o;
	struct kvt_plan p;
	uint8_t tiers[64];

	assert_int_equal(kvt_model_load("Qwen3-8B", &q8), 0);
	kvt_plan_opts_init(&o, sizeof(o));
	o.model = &q8;
	o.block_tokens = 16;
	o.tier_bw[KVT_TIER_DRAM] = kvt_pcie_bw(5);
	o.tier_bw[KVT_TIER_SSD] = 2e9;
	o.tier_latency_s[KVT_TIER_SSD] = 100e-6;
	o.prefill_flops_s = 989e12 * 0.4;
	memset(tiers, KVT_TIER_DRAM, 60);
	memset(tiers + 60, KVT_TIER_SSD, 4);
	assert_int_equal(kvt_plan_prefix(&o, tiers, 64, &p, NULL), 0);
	assert_int_equal(p.load_blocks, 60);
	assert_true(p.total_s < p.all_load_s);
	assert_true(p.total_s < p.all_recompute_s);
}

static void lookup_plans_what_the_store_holds(void **state)
{
	/* a real store; the tiny model's namespace: 1 layer x 1 head x 64 x bf16
	 * x 2 (K, V) x 4 tokens = 1,024 B blocks */
	struct kvt_store_opts so;
	struct kvt_ns_desc d;
	struct kvt_store *st;
	struct kvt_ns *ns;
	struct kvt_key keys[5];
	struct kvt_plan_opts o;
	struct kvt_plan p;
	uint32_t tokens[20];
	uint8_t tiers[5], act[5], block[1024];

	kvt_store_opts_init(&so, sizeof(so));
	so.dram_bytes = 16 << 20;
	assert_int_equal(kvt_store_open(&so, &st), 0);
	kvt_ns_desc_init(&d, sizeof(d));
	strcpy(d.model_id, "tiny");
	d.layout = KVT_LAYOUT_PAGED_KV;
	d.dtype = KVT_DTYPE_BF16;
	d.layers = 1;
	d.kv_heads = 1;
	d.head_dim = 64;
	d.block_tokens = 4;
	d.tp_size = 1;
	assert_int_equal(kvt_ns_attach(st, &d, &ns), 0);
	assert_int_equal(kvt_ns_block_bytes(ns), 1024);
	for (int i = 0; i < 20; i++)
		tokens[i] = (uint32_t)(1000 + i);
	assert_int_equal(kvt_ns_prefix_keys(ns, tokens, 20, keys, 5), 5);
	memset(block, 7, sizeof(block));
	for (int i = 0; i < 3; i++)
		assert_int_equal(kvt_put(ns, &keys[i], i ? &keys[i - 1] : NULL, block,
					 sizeof(block)), 0);

	/* 3 of 5 stored, in DRAM at 1 s a block: loading all 3 (3 s) beats
	 * loading 2 and recomputing the third (2 + 241,664 / 230,912 s) */
	opts(&o);
	assert_int_equal(kvt_plan_lookup(ns, keys, 5, &o, tiers, &p, act), 3);
	assert_int_equal(tiers[0], KVT_TIER_DRAM);
	assert_int_equal(tiers[3], KVT_TIER_NONE);
	assert_int_equal(p.blocks, 3);
	assert_int_equal(p.load_blocks, 3);
	near(p.total_s, 3.0);
	assert_int_equal(act[2], KVT_PLAN_LOAD);
	/* a GPU a million times faster recomputes them all; no tiers wanted */
	o.prefill_flops_s = 230912e6;
	assert_int_equal(kvt_plan_lookup(ns, keys, 5, &o, NULL, &p, act), 3);
	assert_int_equal(p.load_blocks, 0);
	assert_int_equal(act[0], KVT_PLAN_RECOMPUTE);
	assert_int_equal(kvt_plan_lookup(NULL, keys, 5, &o, NULL, &p, act), -EINVAL);
	kvt_store_close(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(loads_when_loading_is_cheaper),
		cmocka_unit_test(recomputes_a_short_ssd_tail),
		cmocka_unit_test(fast_gpu_recomputes_everything),
		cmocka_unit_test(measured_tokens_per_second_price_the_recompute),
		cmocka_unit_test(tie_goes_to_the_load),
		cmocka_unit_test(unloadable_block_ends_the_loads),
		cmocka_unit_test(explicit_block_bytes_and_bad_opts),
		cmocka_unit_test(real_model_short_ssd_tail_on_h100),
		cmocka_unit_test(lookup_plans_what_the_store_holds),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
