/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier-bench trace with tiny sizes: the JSON of a replay, a sweep (and its
 * SVG), the payload mode, and a generated trace read back. argv[1] is the
 * kvtier-bench program. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <jansson.h>

#include "helpers.h"

static const char *bench;
static char *tmpdir;

/* Run kvtier-bench trace with args; its stdout parsed as one JSON object. */
static json_t *run_json(const char *args)
{
	char *cmd, *out = NULL;
	size_t cap = 0, len = 0;
	json_error_t err;
	json_t *j;
	FILE *p;

	assert_true(asprintf(&cmd, "'%s' trace %s", bench, args) > 0);
	p = popen(cmd, "r");
	assert_non_null(p);
	for (;;) {
		if (len + 4096 > cap) {
			cap = cap ? cap * 2 : 65536;
			out = realloc(out, cap);
			assert_non_null(out);
		}
		size_t n = fread(out + len, 1, cap - len, p);
		if (n == 0)
			break;
		len += n;
	}
	if (pclose(p) != 0)
		fail_msg("'%s' failed", cmd);
	j = json_loadb(out, len, 0, &err);
	if (!j)
		fail_msg("'%s' printed no JSON object: %s", cmd, err.text);
	assert_true(json_is_object(j));
	free(out);
	free(cmd);
	return j;
}

static double num(json_t *j, const char *name)
{
	json_t *v = json_object_get(j, name);

	if (!json_is_number(v))
		fail_msg("no number \"%s\"", name);
	return json_number_value(v);
}

static void rate_ok(json_t *j, const char *name)
{
	double v = num(j, name);

	assert_true(v >= 0 && v <= 1);
}

static void replay_json_has_the_issue_fields(void **state)
{
	json_t *j = run_json("--synthetic 2000 --capacity-blocks 500 --reps 1 --quiet --json");
	json_t *hits = json_object_get(j, "hits");

	assert_true(num(j, "requests") == 2000);
	assert_true(num(j, "blocks") > 2000);
	rate_ok(j, "block_hit_rate");
	rate_ok(j, "token_hit_rate");
	rate_ok(j, "ideal_block_hit_rate");
	assert_true(num(j, "ideal_block_hit_rate") >= num(j, "block_hit_rate"));
	assert_true(num(j, "block_hit_rate") > 0);
	assert_true(num(j, "lookups_per_s") > 0);
	assert_true(num(j, "requests_per_s") > 0);
	assert_true(num(j, "replay_over_parse") > 0);
	assert_true(json_is_object(hits));
	assert_true(json_integer_value(json_object_get(hits, "dram")) ==
		    (json_int_t)num(j, "hit_blocks"));
	assert_true(json_is_object(json_object_get(json_object_get(j, "tiers"), "dram")));
	/* the cost model's estimate: some prefill saved, never more than all */
	rate_ok(json_object_get(j, "prefill"), "saved_fraction");
	assert_true(num(json_object_get(j, "prefill"), "saved_fraction") > 0);
	assert_true(num(json_object_get(j, "prefill"), "mean_ttft_with_cache_s") <
		    num(json_object_get(j, "prefill"), "mean_ttft_no_cache_s"));
	json_decref(j);
	j = run_json("--synthetic 200 --model none --reps 1 --quiet --json");
	assert_true(json_is_null(json_object_get(j, "prefill")));
	json_decref(j);
}

static void sweep_json_and_svg(void **state)
{
	char *args, *svg, head[5] = "";
	json_t *j, *sweep, *p;
	FILE *f;

	assert_true(asprintf(&svg, "%s/sweep.svg", tmpdir) > 0);
	assert_true(asprintf(&args, "--trace '%s/tests/data/synthetic_trace.jsonl' --sweep "
				    "--sweep-capacities 1000,inf --policy lru,tail-lru --svg '%s' "
				    "--quiet --json", getenv("KVT_SOURCE_DIR"), svg) > 0);
	j = run_json(args);
	sweep = json_object_get(j, "sweep");
	assert_int_equal(json_array_size(sweep), 4);
	p = json_array_get(sweep, 0);
	assert_string_equal(json_string_value(json_object_get(p, "policy")), "lru");
	assert_int_equal(json_integer_value(json_object_get(p, "capacity_blocks")), 1000);
	rate_ok(p, "block_hit_rate");
	/* lru at 1,000 blocks: the first of issue 7's numbers */
	assert_true(num(p, "block_hit_rate") > 0.08245 && num(p, "block_hit_rate") < 0.08255);
	rate_ok(p, "prefill_saved_fraction");
	assert_true(num(p, "prefill_saved_fraction") > 0);
	p = json_array_get(sweep, 1);
	assert_true(json_is_null(json_object_get(p, "capacity_blocks")));
	assert_true(num(p, "block_hit_rate") == num(j, "ideal_block_hit_rate"));
	/* more capacity, more saved */
	assert_true(num(p, "prefill_saved_fraction") >
		    num(json_array_get(sweep, 0), "prefill_saved_fraction"));
	f = fopen(svg, "r");
	assert_non_null(f);
	assert_int_equal(fread(head, 1, 4, f), 4);
	assert_string_equal(head, "<svg");
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	{
		long len = ftell(f);
		char *text = calloc(1, (size_t)len + 1);

		assert_non_null(text);
		rewind(f);
		assert_int_equal(fread(text, 1, (size_t)len, f), (size_t)len);
		/* the hit-rate axis ends just above the ideal (0.6396), not at
		 * 1.0, and the ideal's label sits inside the plot, at its left
		 * (x = 76), clear of the legend on the right */
		assert_non_null(strstr(text, ">0.7</text>"));
		assert_null(strstr(text, ">1.0</text>"));
		{
			char *label = strstr(text, ">ideal (unlimited capacity) 0.6396<"), *tag;

			assert_non_null(label);
			*label = 0;
			tag = strrchr(text, '<');
			assert_non_null(tag);
			assert_int_equal(strncmp(tag, "<text x=\"76.0\" ", 15), 0);
		}
		free(text);
	}
	fclose(f);
	json_decref(j);
	free(args);
	free(svg);
}

/* --mrc beside the exact sweep: the issue's check, sampled within 0.02 of
 * the exact LRU hit rate at a sampling rate of at most 1%, in at most 4 MiB,
 * and the curve in the SVG. */
static void mrc_beside_the_exact_sweep(void **state)
{
	char *args, *svg, *text = NULL;
	size_t len = 0;
	json_t *j, *mrc, *est, *p;
	FILE *f;

	assert_true(asprintf(&svg, "%s/mrc.svg", tmpdir) > 0);
	assert_true(asprintf(&args, "--trace '%s/tests/data/synthetic_trace.jsonl' --mrc --sweep "
				    "--policy lru --mrc-capacities 1000,10000,100000 --svg '%s' "
				    "--quiet --json --model none", getenv("KVT_SOURCE_DIR"), svg) > 0);
	j = run_json(args);
	mrc = json_object_get(j, "mrc");
	est = json_object_get(j, "mrc_estimator");
	assert_int_equal(json_array_size(mrc), 3);
	for (size_t i = 0; i < 3; i++) {
		p = json_array_get(mrc, i);
		rate_ok(p, "sampled_hit_rate");
		rate_ok(p, "exact_hit_rate");
		assert_true(fabs(num(p, "sampled_hit_rate") - num(p, "exact_hit_rate")) <= 0.02);
	}
	assert_int_equal(json_integer_value(json_object_get(json_array_get(mrc, 1),
							    "capacity_blocks")), 10000);
	assert_true(num(est, "sampling_rate") <= 0.01);
	assert_true(num(est, "memory_bytes") <= 4 << 20);
	assert_true(num(est, "max_abs_error") <= 0.02);
	f = fopen(svg, "r");
	assert_non_null(f);
	assert_true(getdelim(&text, &len, '\0', f) > 0);
	assert_non_null(strstr(text, "sampled"));
	fclose(f);
	free(text);
	json_decref(j);
	free(args);
	free(svg);
}

/* --mrc alone: the default ladder, and the estimator's cost measured against
 * the same replay without it. */
static void mrc_reports_its_cost(void **state)
{
	json_t *j = run_json("--synthetic 2000 --mrc --reps 2 --quiet --json --model none");
	json_t *mrc = json_object_get(j, "mrc"), *est = json_object_get(j, "mrc_estimator");

	assert_int_equal(json_array_size(mrc), 10); /* 1,000 ... 1,000,000 */
	assert_int_equal(json_integer_value(json_object_get(json_array_get(mrc, 9),
							    "capacity_blocks")), 1000000);
	assert_null(json_object_get(json_array_get(mrc, 0), "exact_hit_rate"));
	assert_true(num(est, "replay_s") > 0 && num(est, "replay_s_without") > 0);
	(void)num(est, "overhead");
	(void)num(est, "cpu_overhead");
	json_decref(j);
}

/* --policy all: every policy of the registry replayed in turn, each with its
 * hit rate and speed. */
static void every_policy_in_turn(void **state)
{
	json_t *j = run_json("--synthetic 2000 --capacity-blocks 500 --policy all --reps 1 --quiet "
			     "--json --model none");
	json_t *a = json_object_get(j, "policies"), *p;
	size_t i;
	bool ghost = false, ends = false, cls = false;

	assert_true(json_array_size(a) >= 8);
	json_array_foreach(a, i, p) {
		rate_ok(p, "block_hit_rate");
		assert_true(num(p, "lookups_per_s") > 0);
		ghost |= !strcmp(json_string_value(json_object_get(p, "name")), "ghost-lru");
		ends |= !strcmp(json_string_value(json_object_get(p, "name")), "ghost-ends");
		cls |= !strcmp(json_string_value(json_object_get(p, "name")), "class-lru");
	}
	assert_true(ghost && ends && cls);
	/* the first one is the main replay */
	assert_true(num(json_array_get(a, 0), "block_hit_rate") == num(j, "block_hit_rate"));
	json_decref(j);
}

/* --ssd-admission all on a DRAM + SSD cascade: every rule, with the bytes it
 * wrote to SSD; "always" refuses nothing, "reused" writes less. */
static void every_admission_rule_in_turn(void **state)
{
	json_t *j = run_json("--synthetic 2000 --dram-blocks 200 --ssd-blocks 1000 --ssd-admission "
			     "all --reps 1 --quiet --json --model none");
	json_t *a = json_object_get(j, "admissions");

	assert_int_equal(json_array_size(a), 3);
	assert_string_equal(json_string_value(json_object_get(json_array_get(a, 0), "name")),
			    "always");
	assert_true(num(json_array_get(a, 0), "ssd_refused") == 0);
	assert_true(num(json_array_get(a, 1), "ssd_bytes_written") <
		    num(json_array_get(a, 0), "ssd_bytes_written"));
	assert_true(num(json_array_get(a, 1), "ssd_refused") > 0);
	rate_ok(json_array_get(a, 2), "ssd_block_hit_rate");
	json_decref(j);
}

static void payload_mode_moves_real_bytes(void **state)
{
	json_t *j = run_json("--payload --synthetic 500 --capacity-blocks 64 "
			     "--payload-block-bytes 8K --quiet --json");

	assert_string_equal(json_string_value(json_object_get(j, "mode")), "payload");
	assert_true(num(j, "requests") == 500);
	assert_true(num(j, "bad_bytes") == 0);
	assert_true(num(j, "puts") > 0);
	assert_true(num(j, "bytes_got") > 0);
	rate_ok(j, "block_hit_rate");
	assert_true(num(j, "block_hit_rate") > 0);
	json_decref(j);
}

/* DRAM of 32 blocks over an SSD tier of 256: evicted blocks come back from
 * the SSD, with the right bytes. */
static void payload_mode_through_the_ssd_tier(void **state)
{
	char *args;
	json_t *j, *hits;

	assert_true(asprintf(&args, "--payload --synthetic 150 --capacity-blocks 32 "
				    "--ssd-blocks 256 --ssd-dir '%s/ssd' --payload-block-bytes 8K "
				    "--quiet --json", tmpdir) > 0);
	j = run_json(args);
	hits = json_object_get(j, "hits");
	assert_true(num(j, "bad_bytes") == 0);
	assert_true(json_integer_value(json_object_get(hits, "ssd")) > 0);
	assert_true(json_integer_value(json_object_get(hits, "dram")) +
		    json_integer_value(json_object_get(hits, "ssd")) ==
		    (json_int_t)(num(j, "block_hit_rate") * num(j, "blocks") + 0.5));
	json_decref(j);
	free(args);
}

static void generated_trace_reads_back(void **state)
{
	char *cmd, *args;
	json_t *j;

	assert_true(asprintf(&cmd, "'%s' trace --generate 300 --seed 7 --out '%s/gen.jsonl'",
			     bench, tmpdir) > 0);
	assert_int_equal(system(cmd), 0);
	assert_true(asprintf(&args, "--trace '%s/gen.jsonl' --reps 1 --json", tmpdir) > 0);
	j = run_json(args);
	assert_true(num(j, "requests") == 300);
	assert_true(num(j, "bad_lines") == 0);
	json_decref(j);
	free(cmd);
	free(args);
}

/* A token-id trace converted, then replayed: the second request shares the
 * first one's two full blocks. */
static void converted_trace_replays(void **state)
{
	char *tokens, *cmd, *args;
	json_t *j;
	FILE *f;

	assert_true(asprintf(&tokens, "%s/tokens.jsonl", tmpdir) > 0);
	f = fopen(tokens, "w");
	assert_non_null(f);
	fputs("[1, 2, 3, 4, 5, 6, 7, 8, 9]\n{\"tokens\": [1, 2, 3, 4, 5, 6, 7, 8, 10, 11], "
	      "\"timestamp\": 5}\n", f);
	assert_int_equal(fclose(f), 0);
	assert_true(asprintf(&cmd, "'%s' trace --convert '%s' --out '%s/conv.jsonl' "
				   "--block-tokens 4 2>/dev/null", bench, tokens, tmpdir) > 0);
	assert_int_equal(system(cmd), 0);
	assert_true(asprintf(&args, "--trace '%s/conv.jsonl' --block-tokens 4 --reps 1 --json",
			     tmpdir) > 0);
	j = run_json(args);
	assert_true(num(j, "requests") == 2);
	assert_true(num(j, "blocks") == 6);
	assert_true(num(j, "hit_blocks") == 2);
	json_decref(j);
	free(tokens);
	free(cmd);
	free(args);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(replay_json_has_the_issue_fields),
		cmocka_unit_test(sweep_json_and_svg),
		cmocka_unit_test(mrc_beside_the_exact_sweep),
		cmocka_unit_test(mrc_reports_its_cost),
		cmocka_unit_test(every_policy_in_turn),
		cmocka_unit_test(every_admission_rule_in_turn),
		cmocka_unit_test(payload_mode_moves_real_bytes),
		cmocka_unit_test(payload_mode_through_the_ssd_tier),
		cmocka_unit_test(generated_trace_reads_back),
		cmocka_unit_test(converted_trace_replays),
	};
	int rc;

	if (argc < 2) {
		fprintf(stderr, "usage: %s KVTIER-BENCH\n", argv[0]);
		return 2;
	}
	bench = argv[1];
	tmpdir = kvt_test_mkdtemp("bench-trace");
	assert_non_null(tmpdir);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	kvt_test_rmdir(tmpdir);
	free(tmpdir);
	return rc;
}
