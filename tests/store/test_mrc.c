/* SPDX-License-Identifier: Apache-2.0 */
/* The sampled reuse-distance estimator (store/mrc.h) against exact LRU stack
 * distances on generated reference streams: with every block's previous
 * tick known, with none (plain SHARDS), with ticks only for what a smaller
 * cache still holds, under a budget small enough to force the sampling rate
 * down, and with old counts decaying. Seeds are printed (KVT_TEST_SEED
 * replays one); KVT_TEST_MRC_REFS sets the stream length (default 200,000). */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "helpers.h"
#include "store/index.h"
#include "store/mrc.h"

#define NCAP 6
static const uint64_t caps[NCAP] = { 500, 1000, 2000, 5000, 10000, 20000 };

struct stream {
	uint32_t *key; /* block numbers */
	size_t n;
	uint32_t keys; /* distinct block numbers < keys */
};

static size_t stream_len(void)
{
	const char *e = getenv("KVT_TEST_MRC_REFS");

	return e && atol(e) > 1000 ? (size_t)atol(e) : 200000;
}

/* A KV-cache-like stream: requests that re-send a shared prefix (a few hot
 * system prompts), conversations that come back with their context, and
 * one-off documents, each request referencing its blocks in order. */
static void make_stream(struct stream *s, uint64_t seed, size_t n, bool prompts)
{
	uint64_t r = seed | 1;
	uint32_t next = 0, conv_start[256], conv_len[256];

	s->key = malloc(n * sizeof(*s->key));
	assert_non_null(s->key);
	for (int c = 0; c < 256; c++) {
		conv_start[c] = next;
		conv_len[c] = 4 + (uint32_t)(kvt_test_rand(&r) % 12);
		next += 64;
	}
	s->n = 0;
	while (s->n < n) {
		uint64_t x = kvt_test_rand(&r) % 100;
		uint32_t prompt = (uint32_t)(kvt_test_rand(&r) % 8), len;

		for (uint32_t b = 0; prompts && b < 4 && s->n < n; b++) /* shared prompt */
			s->key[s->n++] = 1000000 + prompt * 4 + b;
		if (x < 60) { /* a conversation turn: its context, growing */
			/* skewed: low conversation numbers come back more */
			uint32_t c = (uint32_t)(kvt_test_rand(&r) % 256);

			c = (uint32_t)(c * (kvt_test_rand(&r) % 256) / 256);
			len = conv_len[c];
			for (uint32_t b = 0; b < len && s->n < n; b++)
				s->key[s->n++] = conv_start[c] + b;
			if (conv_len[c] < 60)
				conv_len[c]++;
		} else { /* a one-off document */
			len = 8 + (uint32_t)(kvt_test_rand(&r) % 40);
			for (uint32_t b = 0; b < len && s->n < n; b++)
				s->key[s->n++] = 2000000 + next++;
		}
	}
	s->keys = 2000000 + next + 1;
}

/* Exact LRU hit ratios: stack distances by a Fenwick tree over time. */
static void exact_curve(const struct stream *s, double *hit)
{
	size_t n = s->n;
	uint32_t *bit = calloc(n + 1, sizeof(*bit));
	int64_t *last = malloc(s->keys * sizeof(*last));
	uint64_t h[NCAP] = { 0 };

	assert_non_null(bit);
	assert_non_null(last);
	for (uint32_t k = 0; k < s->keys; k++)
		last[k] = -1;
	for (size_t t = 0; t < n; t++) {
		uint32_t k = s->key[t];

		if (last[k] >= 0) {
			uint64_t d = 0; /* distinct keys in (last, t): set bits there */

			for (size_t i = t; i > 0; i -= i & -i)
				d += bit[i];
			for (size_t i = (size_t)last[k] + 1; i > 0; i -= i & -i)
				d -= bit[i];
			for (int c = 0; c < NCAP; c++)
				h[c] += d < caps[c];
			for (size_t i = (size_t)last[k] + 1; i <= n; i += i & -i)
				bit[i]--;
		}
		for (size_t i = t + 1; i <= n; i += i & -i)
			bit[i]++;
		last[k] = (int64_t)t;
	}
	for (int c = 0; c < NCAP; c++)
		hit[c] = (double)h[c] / (double)n;
	free(bit);
	free(last);
}

/* Sample on the index's 32-bit hash (kvt_mrc_hash32, as the replay does)
 * rather than the key's. */
static bool use_hash32;

static uint64_t key_hash(const struct kvt_mrc *m, uint32_t k)
{
	struct kvt_key key;

	memset(&key, 0, sizeof(key));
	memcpy(key.bytes, &k, sizeof(k));
	return use_hash32 ? kvt_mrc_hash32(m, kvt_index_hash(0, &key)) : kvt_mrc_hash(m, 0, &key);
}

/* Feed the stream. hold: how many most recently used blocks keep their tick
 * (a cache of that size, LRU); 0 = none, SIZE_MAX = all. */
static void feed(struct kvt_mrc *m, const struct stream *s, size_t hold)
{
	uint32_t *tick = calloc(s->keys, sizeof(*tick));
	uint64_t *used = calloc(s->keys, sizeof(*used));

	assert_non_null(tick);
	assert_non_null(used);
	for (size_t t = 0; t < s->n; t++) {
		uint32_t k = s->key[t];
		uint32_t prev = tick[k];

		/* a block the cache dropped has lost its tick: a block stays held
		 * while fewer than `hold` references passed since its last use
		 * (a stand-in for an LRU of that size that errs on the short side) */
		if (hold != SIZE_MAX && (hold == 0 || t - used[k] > hold))
			prev = 0;
		tick[k] = kvt_mrc_ref(m, key_hash(m, k), prev);
		used[k] = t;
	}
	free(tick);
	free(used);
}

static double curve_error(struct kvt_mrc *m, const double *exact, const char *what)
{
	double est[NCAP], worst = 0;

	assert_int_equal(kvt_mrc_curve(m, caps, NCAP, est), 0);
	for (int c = 0; c < NCAP; c++) {
		printf("  %s: capacity %6llu exact %.4f estimate %.4f\n", what,
		       (unsigned long long)caps[c], exact[c], est[c]);
		worst = fmax(worst, fabs(est[c] - exact[c]));
	}
	return worst;
}

static struct kvt_mrc *open_mrc(double rate, size_t budget, bool ticks, uint64_t seed)
{
	struct kvt_mrc_opts o;
	struct kvt_mrc *m;

	kvt_mrc_opts_init(&o, sizeof(o));
	o.max_rate = rate;
	if (budget)
		o.budget_bytes = budget;
	o.use_ticks = ticks;
	o.seed = seed;
	assert_int_equal(kvt_mrc_open(&o, &m), 0);
	return m;
}

/* One case: a generated stream (with or without blocks in every request),
 * an estimator (rate, budget or 0 for the default, ticks used or not) fed
 * with ticks kept for `hold` (feed), its largest error against the exact
 * curve, its stats into *st. */
struct mrc_case {
	const char *what;
	bool prompts;
	double rate;
	size_t budget;
	bool ticks;
	size_t hold;
};

static double run_case(const struct mrc_case *k, struct kvt_mrc_stats *st, size_t *refs)
{
	uint64_t seed = kvt_test_seed();
	struct stream s;
	double exact[NCAP], err;
	struct kvt_mrc *m;

	make_stream(&s, seed, stream_len(), k->prompts);
	exact_curve(&s, exact);
	m = open_mrc(k->rate, k->budget, k->ticks, seed);
	feed(m, &s, k->hold);
	kvt_mrc_stats(m, st);
	err = curve_error(m, exact, k->what);
	*refs = s.n;
	kvt_mrc_close(m);
	free(s.key);
	return err;
}

static void with_ticks_close_to_exact_at_one_percent(void **state)
{
	const struct mrc_case k = { "ticks", true, 0.01, 0, true, SIZE_MAX };
	struct kvt_mrc_stats st;
	size_t refs;

	assert_true(run_case(&k, &st, &refs) <= 0.02);
	assert_true(st.rate <= 0.01);
	assert_int_equal(st.refs, refs);
	assert_true(st.sampled_refs > 0 && st.sampled_refs < refs / 20);
}

/* The same through kvt_mrc_hash32 of the index's hash: as close, and
 * another seed samples other blocks. */
static void hash32_of_the_index_hash_close_to_exact(void **state)
{
	const struct mrc_case k = { "hash32", true, 0.01, 0, true, SIZE_MAX };
	struct kvt_mrc_stats st;
	struct kvt_mrc *a, *b;
	size_t refs, same = 0, either = 0;

	use_hash32 = true;
	assert_true(run_case(&k, &st, &refs) <= 0.02);
	assert_true(st.sampled_refs > 0 && st.sampled_refs < refs / 20);
	a = open_mrc(0.01, 0, true, 1);
	b = open_mrc(0.01, 0, true, 2);
	for (uint32_t i = 0; i < 100000; i++) {
		bool in_a = key_hash(a, i) < (uint64_t)(0.01 * 0x1p64);
		bool in_b = key_hash(b, i) < (uint64_t)(0.01 * 0x1p64);

		same += in_a && in_b;
		either += in_a || in_b;
	}
	use_hash32 = false;
	printf("  hash32: %zu of 100,000 blocks sampled under seed 1 or 2, %zu under both\n",
	       either, same);
	assert_true(either > 1500 && either < 2500); /* about 1% each */
	assert_true(same < 100);                      /* about 1% of 1% */
	kvt_mrc_close(a);
	kvt_mrc_close(b);
}

/* Without ticks the sample alone decides (plain SHARDS): every block
 * sampled, it is exact but for the histogram's bins. */
static void plain_shards_exact_when_all_sampled(void **state)
{
	const struct mrc_case k = { "plain, all", true, 1.0, 16u << 20, false, SIZE_MAX };
	struct kvt_mrc_stats st;
	size_t refs;

	assert_true(run_case(&k, &st, &refs) <= 0.01);
}

/* ... and at 30%, on a stream with no block in every request (a handful of
 * such blocks, sampled or not, would move the curve by their share): with
 * the sample alone, the noise of which blocks are sampled needs a high rate
 * on 200,000 references. */
static void plain_shards_close_to_exact_at_thirty_percent(void **state)
{
	const struct mrc_case k = { "plain, 30%", false, 0.3, 0, false, SIZE_MAX };
	struct kvt_mrc_stats st;
	size_t refs;

	assert_true(run_case(&k, &st, &refs) <= 0.04);
}

/* Ticks only while a block is among the last 3,000 references: beyond, the
 * sample alone decides, at a rate where that is accurate. */
static void ticks_for_part_of_the_stream(void **state)
{
	const struct mrc_case k = { "part", true, 0.2, 0, true, 3000 };
	struct kvt_mrc_stats st;
	size_t refs;

	assert_true(run_case(&k, &st, &refs) <= 0.03);
}

/* Every block sampled at first, then the table fills and the rate drops
 * until the sample fits. */
static void budget_lowers_the_rate(void **state)
{
	const struct mrc_case k = { "budget", true, 1.0, 700u << 10, true, SIZE_MAX };
	struct kvt_mrc_stats st;
	size_t refs;

	assert_true(run_case(&k, &st, &refs) <= 0.02);
	printf("  budget %zu: rate %.4f, %llu blocks sampled, %zu bytes\n", k.budget, st.rate,
	       (unsigned long long)st.sampled_keys, st.memory_bytes);
	assert_true(st.memory_bytes <= k.budget);
	assert_true(st.rate < 1.0);
}

static void half_life_forgets_the_old_stream(void **state)
{
	struct kvt_mrc_opts o;
	struct kvt_mrc *m;
	uint32_t tick[6000] = { 0 };
	uint64_t cap = 2000;
	double hit;

	/* 100,000 references cycling over 1,000 blocks (all hit at 2,000), then
	 * 100,000 over 6,000 (all miss at 2,000) */
	kvt_mrc_opts_init(&o, sizeof(o));
	o.max_rate = 0.2;
	o.half_life = 10000;
	assert_int_equal(kvt_mrc_open(&o, &m), 0);
	for (int t = 0; t < 100000; t++)
		tick[t % 1000] = kvt_mrc_ref(m, key_hash(m, (uint32_t)(t % 1000)), tick[t % 1000]);
	assert_int_equal(kvt_mrc_curve(m, &cap, 1, &hit), 0);
	assert_true(hit > 0.95);
	for (int t = 0; t < 100000; t++) {
		uint32_t k = 10000 + (uint32_t)(t % 6000);

		tick[t % 6000] = kvt_mrc_ref(m, key_hash(m, k), t >= 6000 ? tick[t % 6000] : 0);
	}
	assert_int_equal(kvt_mrc_curve(m, &cap, 1, &hit), 0);
	assert_true(hit < 0.05);
	kvt_mrc_close(m);
}

static void options_and_empty_curve(void **state)
{
	struct kvt_mrc_opts o;
	struct kvt_mrc *m;
	uint64_t cap = 10;
	double hit;

	kvt_mrc_opts_init(&o, sizeof(o));
	o.max_rate = 0;
	assert_int_equal(kvt_mrc_open(&o, &m), -EINVAL);
	o.max_rate = 1.5;
	assert_int_equal(kvt_mrc_open(&o, &m), -EINVAL);
	kvt_mrc_opts_init(&o, sizeof(o));
	o.budget_bytes = 4096;
	assert_int_equal(kvt_mrc_open(&o, &m), -EINVAL);
	/* a larger struct than this build knows is refused */
	kvt_mrc_opts_init(&o, sizeof(o));
	o.size = sizeof(o) + 8;
	assert_int_equal(kvt_mrc_open(&o, &m), -EINVAL);
	/* an older, shorter one gets defaults for what it lacks */
	kvt_mrc_opts_init(&o, offsetof(struct kvt_mrc_opts, budget_bytes));
	assert_int_equal(kvt_mrc_open(&o, &m), 0);
	assert_int_equal(kvt_mrc_curve(m, &cap, 1, &hit), -EAGAIN);
	/* 10 blocks in a loop, 10,000 times: all but the first 10 hit at 10 */
	{
		uint32_t tick[10] = { 0 };

		for (int t = 0; t < 10000; t++)
			tick[t % 10] = kvt_mrc_ref(m, key_hash(m, (uint32_t)(t % 10)), tick[t % 10]);
	}
	assert_int_equal(kvt_mrc_curve(m, &cap, 1, &hit), 0);
	assert_true(hit > 0.98);
	kvt_mrc_close(m);
	kvt_mrc_close(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(with_ticks_close_to_exact_at_one_percent),
		cmocka_unit_test(hash32_of_the_index_hash_close_to_exact),
		cmocka_unit_test(plain_shards_exact_when_all_sampled),
		cmocka_unit_test(plain_shards_close_to_exact_at_thirty_percent),
		cmocka_unit_test(ticks_for_part_of_the_stream),
		cmocka_unit_test(budget_lowers_the_rate),
		cmocka_unit_test(half_life_forgets_the_old_stream),
		cmocka_unit_test(options_and_empty_curve),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
