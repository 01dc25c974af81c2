/* SPDX-License-Identifier: Apache-2.0 */
/* The prefill estimate of a replay against the cost model computed by hand:
 * no hits cost the whole prefill; a hit block costs the cheaper of its load
 * and its recompute, and the rest of the input its prefill. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bench/trace/prefill.h"

static void assert_close(double a, double b)
{
	if (!(fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b))))
		fail_msg("%.12g != %.12g", a, b);
}

static void estimate_matches_the_model(void **state)
{
	struct kvt_prefill_est e;
	uint8_t dram[2] = { KVT_TIER_DRAM, KVT_TIER_DRAM }, ssd[1] = { KVT_TIER_SSD };
	double rate, full, bytes, want_no = 0, want_with = 0;

	assert_int_equal(kvt_prefill_est_init(&e, "Qwen3-8B", "H100-SXM", 0.5, 512, 0), 0);
	rate = e.gpu.bf16_flops * 0.5;
	bytes = 512.0 * (double)kvt_model_kv_bytes_per_token(&e.model, KVT_DTYPE_BF16);

	/* a request with no hit: the whole prefill either way */
	assert_int_equal(kvt_prefill_est_add(&e, 3000, NULL, 0), 0);
	full = kvt_model_prefill_flops(&e.model, 0, 3000) / rate;
	want_no += full;
	want_with += full;
	/* two DRAM hits of a 1,200-token input: loading beats recomputing at
	 * 25 GB/s, then tokens 1,024..1,200 are prefilled */
	assert_int_equal(kvt_prefill_est_add(&e, 1200, dram, 2), 0);
	want_no += kvt_model_prefill_flops(&e.model, 0, 1200) / rate;
	want_with += fmin(2 * bytes / 25e9, kvt_model_prefill_flops(&e.model, 0, 1024) / rate) +
		     kvt_model_prefill_flops(&e.model, 1024, 1200) / rate;
	/* one SSD hit: 3 GB/s and 100 us, against recomputing 512 tokens */
	assert_int_equal(kvt_prefill_est_add(&e, 600, ssd, 1), 0);
	want_no += kvt_model_prefill_flops(&e.model, 0, 600) / rate;
	want_with += fmin(bytes / 3e9 + 100e-6, kvt_model_prefill_flops(&e.model, 0, 512) / rate) +
		     kvt_model_prefill_flops(&e.model, 512, 600) / rate;

	assert_int_equal(e.requests, 3);
	assert_close(e.no_cache_s, want_no);
	assert_close(e.with_cache_s, want_with);
	assert_true(e.with_cache_s < e.no_cache_s);
	assert_int_equal(e.loaded_blocks + e.recomputed_hit_blocks, 3);
}

static void bad_setup(void **state)
{
	struct kvt_prefill_est e;

	assert_int_equal(kvt_prefill_est_init(&e, "no-such-model", "H100-SXM", 0.5, 512, 0),
			 -ENOENT);
	assert_int_equal(kvt_prefill_est_init(&e, "Qwen3-8B", "no-such-gpu", 0.5, 512, 0),
			 -ENOENT);
	assert_int_equal(kvt_prefill_est_init(&e, "Qwen3-8B", "H100-SXM", 0, 512, 0), -EINVAL);
	assert_int_equal(kvt_prefill_est_init(&e, "Qwen3-8B", "H100-SXM", 0.5, 0, 0), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(estimate_matches_the_model),
		cmocka_unit_test(bad_setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
