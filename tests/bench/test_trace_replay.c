/* SPDX-License-Identifier: Apache-2.0 */
/* Accounting replay: the hit rates of issue 7 on the Mooncake synthetic
 * trace, exact counts on hand-made traces, an independent LRU and an
 * independent infinite cache on random traces, tail-before-parent eviction,
 * the tier cascade with and without promotion, and output blocks. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "trace_util.h"

static double rate(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0;
}

/* ---- the four numbers ---------------------------------------------------- */

static void mooncake_synthetic_lru_hit_rates(void **state)
{
	static const struct {
		uint64_t cap;
		double want;
	} cases[] = {
		{ 1000, 0.0825 }, { 10000, 0.4235 }, { 30000, 0.6242 },
		{ KVT_REPLAY_INFINITE, 0.6396 },
	};
	char *path = data_file("synthetic_trace.jsonl");

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct kvt_replay_opts o;
		struct kvt_replay_stats st;
		char got[16], want[16];

		one_tier(&o, "lru", cases[k].cap);
		assert_int_equal(replay_file(path, &o, &st), 0);
		assert_int_equal(st.requests, 3993);
		assert_int_equal(st.blocks, 121877);
		/* to the fourth decimal, as printed */
		snprintf(got, sizeof(got), "%.4f", rate(st.hit_blocks, st.blocks));
		snprintf(want, sizeof(want), "%.4f", cases[k].want);
		assert_string_equal(got, want);
		snprintf(got, sizeof(got), "%.4f", rate(st.ideal_hit_blocks, st.blocks));
		assert_string_equal(got, "0.6396");
	}
	free(path);
}

/* class-lru, told each request's reuse class (the bit length of its output
 * length): above LRU at 1,000, 10,000 and 30,000 blocks, 0.472 or more at
 * 10,000 (a quarter of the way from LRU's 0.4235 to Belady's 0.6180); and
 * without the classes exactly tail-lru. */
static void mooncake_synthetic_class_lru_hit_rates(void **state)
{
	static const struct {
		uint64_t cap;
		double lru, want;
	} cases[] = {
		{ 1000, 0.0825, 0.0899 }, { 10000, 0.4235, 0.4775 }, { 30000, 0.6242, 0.6380 },
	};
	char *path = data_file("synthetic_trace.jsonl");

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct kvt_replay_opts o;
		struct kvt_replay_stats st, tail;
		char got[16], want[16];

		one_tier(&o, "class-lru", cases[k].cap);
		assert_int_equal(replay_file(path, &o, &st), 0);
		snprintf(got, sizeof(got), "%.4f", rate(st.hit_blocks, st.blocks));
		snprintf(want, sizeof(want), "%.4f", cases[k].want);
		assert_string_equal(got, want);
		assert_true(rate(st.hit_blocks, st.blocks) > cases[k].lru);
		o.reuse_class = false;
		assert_int_equal(replay_file(path, &o, &st), 0);
		one_tier(&o, "tail-lru", cases[k].cap);
		assert_int_equal(replay_file(path, &o, &tail), 0);
		assert_int_equal(st.hit_blocks, tail.hit_blocks);
	}
	free(path);
}

/* ---- hand-made traces ---------------------------------------------------- */

#define REQ(ts, in, ids) "{\"timestamp\": " #ts ", \"input_length\": " #in \
			 ", \"output_length\": 1, \"hash_ids\": " ids "}\n"

static void exact_counts_on_a_small_trace(void **state)
{
	/* capacity 4, LRU:
	 * r1 [1 2 3]     miss, cache 1 2 3
	 * r2 [1 2 4]     hits 1 2; cache 3 1 2 4 (LRU first)
	 * r3 [5 6]       misses; evicts 3 then 1 -> 2 4 5 6
	 * r4 [1 2]       1 missing: 0 hits, though 2 is cached (after the miss);
	 *                inserting 1 evicts 2 (the least recent), then 2 comes
	 *                back and evicts 4 -> 5 6 1 2
	 * r5 [2]         id 2 is cached: 1 hit
	 * blocks 3+3+2+2+1 = 11, hits 2 + 1 = 3; tokens: r2 hits 2 x 4 tokens of
	 * 10, r5 hits 3 of 3 */
	char *path = trace_file("trace-small",
				REQ(0, 12, "[1, 2, 3]") REQ(1, 10, "[1, 2, 4]") REQ(2, 8, "[5, 6]")
				REQ(3, 8, "[1, 2]") REQ(4, 3, "[2]"));
	struct kvt_replay_opts o;
	struct kvt_replay_stats st;

	one_tier(&o, "lru", 4);
	o.block_tokens = 4;
	assert_int_equal(replay_file(path, &o, &st), 0);
	assert_int_equal(st.requests, 5);
	assert_int_equal(st.blocks, 11);
	assert_int_equal(st.hit_blocks, 3);
	assert_int_equal(st.tokens, 12 + 10 + 8 + 8 + 3);
	assert_int_equal(st.hit_tokens, 8 + 3);
	/* ideal: r2 hits 1 2, r4 hits 1 2, r5 hits 2 */
	assert_int_equal(st.ideal_hit_blocks, 5);
	assert_int_equal(st.ideal_hit_tokens, 8 + 8 + 3);
	assert_int_equal(st.tier[KVT_TIER_DRAM].hit_blocks, 3);
	assert_int_equal(st.tier[KVT_TIER_DRAM].blocks, 4);
	assert_int_equal(st.tier[KVT_TIER_DRAM].inserted, 3 + 1 + 2 + 2);
	assert_int_equal(st.tier[KVT_TIER_DRAM].evicted, 4);
	trace_file_remove(path);
}

/* Blocks a..a+k-1 cycled: LRU with capacity below the cycle never hits, and
 * with room for the cycle hits everything after the first round. */
static void lru_on_a_cyclic_trace(void **state)
{
	char text[4096] = "", line[128];
	struct kvt_replay_opts o;
	struct kvt_replay_stats st;
	char *path;

	for (int i = 0; i < 40; i++) {
		snprintf(line, sizeof(line), REQ(%d, 512, "[%d]"), i, 100 + i % 8);
		strcat(text, line);
	}
	path = trace_file("trace-cyclic", text);
	one_tier(&o, "lru", 7);
	assert_int_equal(replay_file(path, &o, &st), 0);
	assert_int_equal(st.hit_blocks, 0);
	one_tier(&o, "lru", 8);
	assert_int_equal(replay_file(path, &o, &st), 0);
	assert_int_equal(st.hit_blocks, 40 - 8);
	assert_int_equal(st.ideal_hit_blocks, 40 - 8);
	trace_file_remove(path);

	/* two-block requests cycling over 4 prefixes: capacity 6 < 8 blocks */
	text[0] = 0;
	for (int i = 0; i < 20; i++) {
		snprintf(line, sizeof(line), REQ(%d, 1024, "[%d, %d]"), i, 10 * (i % 4),
			 10 * (i % 4) + 1);
		strcat(text, line);
	}
	path = trace_file("trace-cyclic2", text);
	one_tier(&o, "lru", 6);
	assert_int_equal(replay_file(path, &o, &st), 0);
	assert_int_equal(st.hit_blocks, 0);
	one_tier(&o, "lru", 8);
	assert_int_equal(replay_file(path, &o, &st), 0);
	assert_int_equal(st.hit_blocks, 2 * (20 - 4));
	trace_file_remove(path);
}

/* A chain 1-2-3 then an unrelated block: LRU evicts the chain's root (the
 * least recently used), which makes 2 and 3 unreachable; tail-lru evicts
 * the tail 3, keeping the prefix 1-2 that the next request uses. */
static void tail_lru_evicts_tails_before_parents(void **state)
{
	char *path = trace_file("trace-tail", REQ(0, 1536, "[1, 2, 3]") REQ(1, 512, "[4]")
						 REQ(2, 1536, "[1, 2, 3]"));
	struct kvt_replay_opts o;
	struct kvt_replay_stats st;

	one_tier(&o, "lru", 3);
	assert_int_equal(replay_file(path, &o, &st), 0);
	assert_int_equal(st.hit_blocks, 0);
	one_tier(&o, "tail-lru", 3);
	assert_int_equal(replay_file(path, &o, &st), 0);
	assert_int_equal(st.hit_blocks, 2);
	/* cost: tails only too, and of the tails 3 (depth 2) and 4 (depth 0)
	 * the cheaper to recompute, 4, leaves: the whole chain survives */
	one_tier(&o, "cost", 3);
	assert_int_equal(replay_file(path, &o, &st), 0);
	assert_int_equal(st.hit_blocks, 3);
	trace_file_remove(path);
}

/* DRAM 2 + SSD 2: evicted DRAM blocks land on SSD and hit there; with
 * promotion a hit moves back to DRAM. */
static void cascade_demotes_and_promotes(void **state)
{
	/* r1 [1 2]: DRAM 1 2. r2 [3 4]: DRAM 3 4, SSD 1 2. r3 [1 2]: hits on SSD. */
	char *path = trace_file("trace-cascade", REQ(0, 1024, "[1, 2]") REQ(1, 1024, "[3, 4]")
						    REQ(2, 1024, "[1, 2]") REQ(3, 1024, "[1, 2]"));
	struct kvt_replay_opts o;
	struct kvt_replay_stats st;

	kvt_replay_opts_init(&o, sizeof(o));
	o.capacity[KVT_TIER_DRAM] = 2;
	o.capacity[KVT_TIER_SSD] = 2;
	o.block_bytes = 1000;
	assert_int_equal(replay_file(path, &o, &st), 0);
	/* without promotion 1 2 stay on SSD: r3 and r4 hit there */
	assert_int_equal(st.tier[KVT_TIER_SSD].hit_blocks, 4);
	assert_int_equal(st.tier[KVT_TIER_DRAM].hit_blocks, 0);
	assert_int_equal(st.tier[KVT_TIER_SSD].demoted_in, 2);
	assert_int_equal(st.tier[KVT_TIER_DRAM].bytes_in, 4 * 1000);
	assert_int_equal(st.tier[KVT_TIER_SSD].bytes_in, 2 * 1000);
	assert_int_equal(st.tier[KVT_TIER_SSD].bytes_out, 4 * 1000);
	assert_int_equal(st.dropped, 0);

	o.promote = true;
	assert_int_equal(replay_file(path, &o, &st), 0);
	/* r3 hits on SSD and promotes 1 2 (3 4 go down); r4 hits in DRAM */
	assert_int_equal(st.tier[KVT_TIER_SSD].hit_blocks, 2);
	assert_int_equal(st.tier[KVT_TIER_DRAM].hit_blocks, 2);
	assert_int_equal(st.tier[KVT_TIER_DRAM].promoted_in, 2);
	assert_int_equal(st.tier[KVT_TIER_SSD].demoted_in, 4);
	assert_int_equal(st.tier[KVT_TIER_DRAM].blocks, 2);
	assert_int_equal(st.tier[KVT_TIER_SSD].blocks, 2);
	trace_file_remove(path);
}

static void output_blocks_take_room(void **state)
{
	/* 2 input blocks + 700 output tokens: ceil(1724 / 512) = 4 blocks, 2 of
	 * them for the output. With room for 3, the output pushes out block 1. */
	char *path = trace_file("trace-output",
				"{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 700, "
				"\"hash_ids\": [1, 2]}\n"
				"{\"timestamp\": 1, \"input_length\": 1024, \"output_length\": 0, "
				"\"hash_ids\": [1, 2]}\n");
	struct kvt_replay_opts o;
	struct kvt_replay_stats st;

	one_tier(&o, "lru", 3);
	assert_int_equal(replay_file(path, &o, &st), 0);
	assert_int_equal(st.hit_blocks, 2);
	o.store_output = true;
	assert_int_equal(replay_file(path, &o, &st), 0);
	assert_int_equal(st.output_blocks, 2);
	assert_int_equal(st.hit_blocks, 0);
	trace_file_remove(path);
}

/* ---- independent references on random traces ---------------------------- */

/* The reference LRU: an array in recency order, linear scans. */
struct ref_lru {
	uint64_t *v; /* v[0] least recently used */
	size_t n, cap;
};

static bool ref_has(const struct ref_lru *c, uint64_t id)
{
	for (size_t i = 0; i < c->n; i++)
		if (c->v[i] == id)
			return true;
	return false;
}

static void ref_use(struct ref_lru *c, uint64_t id)
{
	size_t i;

	for (i = 0; i < c->n && c->v[i] != id; i++)
		;
	if (i < c->n) {
		memmove(&c->v[i], &c->v[i + 1], (c->n - i - 1) * sizeof(*c->v));
		c->v[c->n - 1] = id;
		return;
	}
	if (c->n == c->cap) {
		memmove(&c->v[0], &c->v[1], (c->n - 1) * sizeof(*c->v));
		c->n--;
	}
	c->v[c->n++] = id;
}

/* A random trace of n requests: prefixes of a few random chains, so that
 * requests share prefixes and diverge. Returns the text, malloc'd; ids[]
 * and lens[] receive each request's ids (at most 16). */
static char *random_trace(uint64_t *seed, int n, uint64_t ids[][16], int *lens)
{
	size_t cap = (size_t)n * 200, used = 0;
	char *text = malloc(cap);

	assert_non_null(text);
	for (int r = 0; r < n; r++) {
		int chain = (int)(kvt_test_rand(seed) % 12), len = 1 + (int)(kvt_test_rand(seed) % 16);
		int fork = (int)(kvt_test_rand(seed) % 16);

		used += (size_t)snprintf(text + used, cap - used,
					 "{\"timestamp\": %d, \"input_length\": %d, "
					 "\"output_length\": 3, \"hash_ids\": [", r, len * 512 - 100);
		for (int j = 0; j < len; j++) {
			/* past `fork` the chain continues into one of two branches */
			uint64_t id = (uint64_t)chain * 1000 + (uint64_t)j +
				      (j >= fork ? 100 * (1 + (kvt_test_rand(seed) & 1)) : 0);

			if (j > fork)
				id = ids[r][j - 1] + 1;
			ids[r][j] = id;
			used += (size_t)snprintf(text + used, cap - used, j ? ", %llu" : "%llu",
						 (unsigned long long)id);
		}
		lens[r] = len;
		used += (size_t)snprintf(text + used, cap - used, "]}\n");
	}
	return text;
}

static void lru_matches_an_independent_lru(void **state)
{
	enum { N = 400 };
	static uint64_t ids[N][16];
	static int lens[N];
	uint64_t seed = kvt_test_seed();

	for (int round = 0; round < 4; round++) {
		char *text = random_trace(&seed, N, ids, lens);
		char *path = trace_file("trace-ref", text);
		static const uint64_t caps[] = { 1, 5, 17, 40, 100, 1000 };

		for (size_t k = 0; k < sizeof(caps) / sizeof(caps[0]); k++) {
			struct ref_lru ref = { .cap = caps[k] };
			struct kvt_replay_opts o;
			struct kvt_replay_stats st;
			uint64_t hits = 0, blocks = 0;

			ref.v = calloc(caps[k], sizeof(*ref.v));
			assert_non_null(ref.v);
			for (int r = 0; r < N; r++) {
				int h = 0;

				while (h < lens[r] && ref_has(&ref, ids[r][h]))
					h++;
				hits += (uint64_t)h;
				blocks += (uint64_t)lens[r];
				for (int j = 0; j < lens[r]; j++)
					ref_use(&ref, ids[r][j]);
			}
			free(ref.v);
			one_tier(&o, "lru", caps[k]);
			assert_int_equal(replay_file(path, &o, &st), 0);
			assert_int_equal(st.blocks, blocks);
			assert_int_equal(st.hit_blocks, hits);
		}
		trace_file_remove(path);
		free(text);
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* Infinite capacity: a block hits iff it was seen before (and all before it
 * in the request hit). Computed with a sorted array of seen ids. */
static void infinite_capacity_matches_an_independent_count(void **state)
{
	enum { N = 600 };
	static uint64_t ids[N][16], seen[N * 16];
	static int lens[N];
	uint64_t seed = kvt_test_seed(), hits = 0, tokens = 0;
	size_t n_seen = 0;
	char *text = random_trace(&seed, N, ids, lens), *path = trace_file("trace-inf", text);
	const struct kvt_policy_ops *ops;

	for (int r = 0; r < N; r++) {
		int h = 0;

		while (h < lens[r] &&
		       bsearch(&ids[r][h], seen, n_seen, sizeof(*seen), cmp_u64))
			h++;
		hits += (uint64_t)h;
		/* every block is 512 tokens but the last, 412 */
		tokens += h == lens[r] ? (uint64_t)h * 512 - 100 : (uint64_t)h * 512;
		for (int j = 0; j < lens[r]; j++)
			if (!bsearch(&ids[r][j], seen, n_seen, sizeof(*seen), cmp_u64)) {
				seen[n_seen++] = ids[r][j];
				qsort(seen, n_seen, sizeof(*seen), cmp_u64);
			}
	}
	for (size_t k = 0; (ops = kvt_policy_at(k)); k++) {
		struct kvt_replay_opts o;
		struct kvt_replay_stats st;

		one_tier(&o, ops->name, KVT_REPLAY_INFINITE);
		assert_int_equal(replay_file(path, &o, &st), 0);
		assert_int_equal(st.hit_blocks, hits);
		assert_int_equal(st.ideal_hit_blocks, hits);
		assert_int_equal(st.hit_tokens, tokens);
		assert_int_equal(st.ideal_hit_tokens, tokens);
		assert_int_equal(st.dropped, 0);
		assert_int_equal(st.tier[KVT_TIER_DRAM].blocks, n_seen);
	}
	trace_file_remove(path);
	free(text);
}

/* Every policy, every capacity: never more hits than the ideal, and the
 * tiers never over their capacities. */
static void policies_stay_within_capacity_and_ideal(void **state)
{
	enum { N = 300 };
	static uint64_t ids[N][16];
	static int lens[N];
	uint64_t seed = kvt_test_seed();
	char *text = random_trace(&seed, N, ids, lens), *path = trace_file("trace-bounds", text);
	const struct kvt_policy_ops *ops;

	for (size_t k = 0; (ops = kvt_policy_at(k)); k++)
		for (uint64_t cap = 1; cap < 200; cap = cap * 3 + 1)
			for (int promote = 0; promote < 2; promote++) {
				struct kvt_replay_opts o;
				struct kvt_replay_stats st;

				kvt_replay_opts_init(&o, sizeof(o));
				o.policy = ops->name;
				o.capacity[KVT_TIER_HBM] = cap;
				o.capacity[KVT_TIER_DRAM] = cap * 2;
				o.capacity[KVT_TIER_SSD] = cap * 4;
				o.promote = promote;
				assert_int_equal(replay_file(path, &o, &st), 0);
				assert_true(st.hit_blocks <= st.ideal_hit_blocks);
				for (int t = KVT_TIER_HBM; t <= KVT_TIER_SSD; t++)
					assert_true(st.tier[t].peak_blocks <= o.capacity[t]);
				assert_int_equal(st.tier[KVT_TIER_HBM].hit_blocks +
						 st.tier[KVT_TIER_DRAM].hit_blocks +
						 st.tier[KVT_TIER_SSD].hit_blocks, st.hit_blocks);
			}
	trace_file_remove(path);
	free(text);
}

/* DRAM + SSD with every admission rule: what DRAM evicts is either written
 * to SSD or refused, never both; "always" refuses nothing; a rule that
 * refuses writes less; and on the Mooncake trace, "reused" writes fewer
 * than half the bytes of "always" into an SSD of 10,000 blocks under 2,000
 * of DRAM, at no lower a hit rate (docs/design-notes.md). */
static void admission_decides_what_ssd_writes(void **state)
{
	enum { N = 300 };
	static uint64_t ids[N][16];
	static int lens[N];
	uint64_t seed = kvt_test_seed(), always_in = 0;
	char *text = random_trace(&seed, N, ids, lens), *path = trace_file("trace-adm", text);
	char *mooncake = data_file("synthetic_trace.jsonl");
	const struct kvt_admission_ops *ops;
	struct kvt_replay_stats base, st;
	struct kvt_replay_opts o;

	for (size_t k = 0; (ops = kvt_admission_at(k)); k++) {
		kvt_replay_opts_init(&o, sizeof(o));
		o.capacity[KVT_TIER_DRAM] = 20;
		o.capacity[KVT_TIER_SSD] = 60;
		o.ssd_admission = ops->name;
		assert_int_equal(replay_file(path, &o, &st), 0);
		assert_int_equal(st.tier[KVT_TIER_DRAM].evicted,
				 st.tier[KVT_TIER_SSD].demoted_in + st.tier[KVT_TIER_SSD].refused);
		assert_true(st.hit_blocks <= st.ideal_hit_blocks);
		if (!strcmp(ops->name, "always")) {
			assert_int_equal(st.tier[KVT_TIER_SSD].refused, 0);
			always_in = st.tier[KVT_TIER_SSD].bytes_in;
		} else if (st.tier[KVT_TIER_SSD].refused) {
			assert_true(st.tier[KVT_TIER_SSD].bytes_in < always_in);
		}
	}
	kvt_replay_opts_init(&o, sizeof(o));
	o.capacity[KVT_TIER_DRAM] = 2000;
	o.capacity[KVT_TIER_SSD] = 10000;
	assert_int_equal(replay_file(mooncake, &o, &base), 0);
	o.ssd_admission = "reused";
	assert_int_equal(replay_file(mooncake, &o, &st), 0);
	assert_true(st.tier[KVT_TIER_SSD].bytes_in * 2 < base.tier[KVT_TIER_SSD].bytes_in);
	assert_true(st.hit_blocks >= base.hit_blocks);
	o.ssd_admission = "no-such-rule";
	assert_int_equal(replay_file(mooncake, &o, &st), -EINVAL);
	free(mooncake);
	trace_file_remove(path);
	free(text);
}

static void bad_options_are_rejected(void **state)
{
	struct kvt_replay_opts o;
	struct kvt_replay *r;

	one_tier(&o, "no-such-policy", 10);
	assert_int_equal(kvt_replay_open(&o, &r), -EINVAL);
	one_tier(&o, "lru", 0);
	assert_int_equal(kvt_replay_open(&o, &r), -EINVAL);
	one_tier(&o, "lru", 10);
	o.block_tokens = 0;
	assert_int_equal(kvt_replay_open(&o, &r), -EINVAL);
	kvt_replay_close(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(mooncake_synthetic_lru_hit_rates),
		cmocka_unit_test(mooncake_synthetic_class_lru_hit_rates),
		cmocka_unit_test(exact_counts_on_a_small_trace),
		cmocka_unit_test(lru_on_a_cyclic_trace),
		cmocka_unit_test(tail_lru_evicts_tails_before_parents),
		cmocka_unit_test(cascade_demotes_and_promotes),
		cmocka_unit_test(output_blocks_take_room),
		cmocka_unit_test(lru_matches_an_independent_lru),
		cmocka_unit_test(infinite_capacity_matches_an_independent_count),
		cmocka_unit_test(policies_stay_within_capacity_and_ideal),
		cmocka_unit_test(admission_decides_what_ssd_writes),
		cmocka_unit_test(bad_options_are_rejected),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
