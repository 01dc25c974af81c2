/* SPDX-License-Identifier: Apache-2.0 */
/* The `kvtier calc` binary, run for real: its JSON carries the documented
 * keys with the worked numbers, and bad input gets exit status 2 or 1. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <jansson.h>

static const char *bin;

/* Run `bin args`, capture stdout into out (malloc'd), return exit status. */
static int run(const char *args, char **out)
{
	char cmd[1024];
	size_t cap = 1 << 16, len = 0, got;
	FILE *p;
	int st;

	snprintf(cmd, sizeof(cmd), "'%s' %s 2>/dev/null", bin, args);
	p = popen(cmd, "r");
	assert_non_null(p);
	*out = malloc(cap);
	assert_non_null(*out);
	while ((got = fread(*out + len, 1, cap - 1 - len, p)) > 0)
		len += got;
	(*out)[len] = 0;
	st = pclose(p);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

static json_t *run_json(const char *args)
{
	json_error_t err;
	json_t *j;
	char *out;

	assert_int_equal(run(args, &out), 0);
	j = json_loads(out, 0, &err);
	if (!j)
		fprintf(stderr, "bad JSON (%s): %s\n", err.text, out);
	assert_non_null(j);
	free(out);
	return j;
}

static json_int_t geti(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);

	if (!json_is_integer(v)) {
		fprintf(stderr, "key %s missing or not an integer\n", k);
		fail();
	}
	return json_integer_value(v);
}

static void json_has_the_documented_keys(void **state)
{
	json_t *j = run_json("calc --model Qwen3-8B --context 131072 --gpu H100-SXM --json");
	const char *keys[] = { "kv_bytes_per_token", "kv_bytes_per_context", "params_total",
			       "params_active", "weight_bytes", "users_fit",
			       "decode_tok_s_upper", "gpus" };

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		assert_non_null(json_object_get(j, keys[i]));
	assert_int_equal(geti(j, "kv_bytes_per_token"), 147456);
	assert_int_equal(geti(j, "kv_bytes_per_context"), 19327352832LL);
	assert_int_equal(geti(j, "params_total"), 8190735360LL);
	/* (72e9 - 16.38e9 - 2 GiB) / 19.33e9 */
	assert_int_equal(geti(j, "users_fit"), 2);
	assert_string_equal(json_string_value(json_object_get(j, "gpu")), "H100-SXM");
	assert_true(json_array_size(json_object_get(j, "gpus")) >= 9);
	json_decref(j);
}

static void decode_bound_at_short_context(void **state)
{
	json_t *j = run_json("calc --model Qwen3-8B --context 1 --gpu h100sxm --json");
	double tok = json_real_value(json_object_get(j, "decode_tok_s_upper"));

	assert_true(tok > 203.5 && tok < 205.0);
	json_decref(j);
}

static void mig_and_kv_dtype(void **state)
{
	json_t *j = run_json("calc --model Llama-3.1-70B --kv-dtype fp8 --context 128K "
			     "--gpu H200 --mig 7g.141gb --json");

	assert_int_equal(geti(j, "kv_bytes_per_token"), 163840);
	assert_int_equal(geti(j, "kv_bytes_per_context"), 20LL << 30);
	assert_string_equal(json_string_value(json_object_get(j, "gpu")), "H200/7g.141gb");
	assert_string_equal(json_string_value(json_object_get(j, "kv_dtype")), "fp8_e4m3");
	json_decref(j);
}

static void plan_of_a_prefix(void **state)
{
	/* Qwen3-8B on an H100 SXM at 40% MFU: 60 DRAM blocks over PCIe Gen5
	 * (2.36 MB each, 37 us) and 4 SSD blocks at 2 GB/s (1.18 ms each): the
	 * tail is recomputed (test_model_plan works the same case) */
	json_t *j = run_json("calc --model Qwen3-8B --gpu H100-SXM --mfu 0.4 "
			     "--plan dram:60,ssd:4 --tier-bw ssd=2e9 --json");
	json_t *p = json_object_get(j, "plan");
	double load_s;

	assert_non_null(p);
	assert_int_equal(geti(p, "blocks"), 64);
	assert_int_equal(geti(p, "load_blocks"), 60);
	assert_int_equal(geti(p, "block_tokens"), 16);
	/* 60 x 16 x 147,456 B / 52e9 B/s: what pinned copies achieve over
	 * PCIe Gen5 x16, not the link's 63.0e9 */
	load_s = json_real_value(json_object_get(p, "load_s"));
	assert_true(fabs(load_s - 60 * 16 * 147456.0 / 52e9) < 1e-5 * load_s); /* 6 digits */
	assert_true(json_real_value(json_object_get(p, "dram_bw")) == 52e9);
	assert_non_null(strstr(json_string_value(json_object_get(p, "dram_bw_source")),
			       "Gen5"));
	json_decref(j);
	/* no bandwidth to the remote tier: loading everything is impossible */
	j = run_json("calc --model Qwen3-8B --gpu H100-SXM --plan dram:2,remote:2 "
		     "--tier-bw remote=0 --json");
	p = json_object_get(j, "plan");
	assert_int_equal(geti(p, "load_blocks"), 2);
	assert_true(json_real_value(json_object_get(p, "all_load_s")) == -1.0);
	json_decref(j);
}

/* A TP group recomputes on all its GPUs and loads each GPU's share of
 * the KV over that GPU's own link: four GPUs, a quarter of either time. */
static void a_tp_plan_prices_the_whole_group(void **state)
{
	json_t *one = run_json("calc --model Llama-3.1-70B --gpu H100-SXM --plan dram:64 --json");
	json_t *four = run_json("calc --model Llama-3.1-70B --gpu H100-SXM --tp 4 "
				"--plan dram:64 --json");
	json_t *p1 = json_object_get(one, "plan"), *p4 = json_object_get(four, "plan");
	double r1 = json_real_value(json_object_get(p1, "all_recompute_s"));
	double r4 = json_real_value(json_object_get(p4, "all_recompute_s"));
	double l1 = json_real_value(json_object_get(p1, "all_load_s"));
	double l4 = json_real_value(json_object_get(p4, "all_load_s"));

	assert_true(r1 > 0 && l1 > 0);
	assert_true(fabs(r4 - r1 / 4) < 1e-5 * r1); /* the JSON has 6 digits */
	assert_true(fabs(l4 - l1 / 4) < 1e-5 * l1);
	assert_true(json_real_value(json_object_get(p4, "prefill_flops_s")) == 4 * 989e12 * 0.5);
	json_decref(one);
	json_decref(four);
}

/* tok/s at a batch is at the users that fit when fewer fit than asked. */
static void the_batch_is_the_users_that_fit(void **state)
{
	json_t *asked = run_json("calc --model Llama-3.1-8B --gpu H100-SXM --users 16 "
				 "--context 131072 --json");
	json_t *fit = run_json("calc --model Llama-3.1-8B --gpu H100-SXM --users 3 "
			       "--context 131072 --json");

	assert_int_equal(geti(asked, "users_fit"), 3);
	assert_int_equal(geti(asked, "decode_batch_users"), 3);
	assert_true(json_real_value(json_object_get(asked, "decode_tok_s_upper_batch")) ==
		    json_real_value(json_object_get(fit, "decode_tok_s_upper_batch")));
	json_decref(asked);
	json_decref(fit);
}

/* Run `bin args`: its exit status, and what it printed on stderr in *out. */
static int run_err(const char *args, char **out)
{
	char cmd[1024];
	size_t len;
	FILE *p;
	int st;

	snprintf(cmd, sizeof(cmd), "'%s' %s 2>&1 >/dev/null", bin, args);
	p = popen(cmd, "r");
	assert_non_null(p);
	*out = malloc(1 << 16);
	assert_non_null(*out);
	len = fread(*out, 1, (1 << 16) - 1, p);
	(*out)[len] = 0;
	st = pclose(p);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

static void names_as_users_write_them(void **state)
{
	json_t *j;
	char *out;

	/* a Hugging Face id is its shipped config; -Instruct has its shape */
	j = run_json("calc --model meta-llama/Llama-3.1-70B --json");
	assert_string_equal(json_string_value(json_object_get(j, "model")), "Llama-3.1-70B");
	json_decref(j);
	j = run_json("calc --model Qwen/Qwen3-8B-Instruct --json");
	assert_string_equal(json_string_value(json_object_get(j, "model")), "Qwen3-8B");
	json_decref(j);
	assert_int_equal(run("calc --model some-org/Unknown-1B", &out), 1);
	free(out);
	/* a GPU family is answered with its members */
	assert_int_equal(run_err("calc --model Qwen3-8B --gpu H100", &out), 1);
	if (!strstr(out, "did you mean H100-SXM, H100-PCIe"))
		fail_msg("no suggestion for --gpu H100: %s", out);
	free(out);
	assert_int_equal(run_err("calc --model Qwen3-8B --gpu H100-SXM --mig 9g.1gb", &out), 1);
	assert_non_null(strstr(out, "no MIG profile '9g.1gb'"));
	free(out);
}

static void text_output_and_help(void **state)
{
	char *out;

	assert_int_equal(run("calc --model Llama-3.1-70B --context 131072", &out), 0);
	assert_non_null(strstr(out, "327,680 B"));
	assert_non_null(strstr(out, "40.00 GiB"));
	free(out);
	assert_int_equal(run("--help", &out), 0);
	assert_non_null(strstr(out, "calc"));
	free(out);
	assert_int_equal(run("calc --help", &out), 0);
	assert_non_null(strstr(out, "--mem-util"));
	free(out);
	assert_int_equal(run("calc --list", &out), 0);
	assert_non_null(strstr(out, "DeepSeek-V3"));
	assert_non_null(strstr(out, "3g.71gb"));
	free(out);
}

static void bad_input_exit_status(void **state)
{
	char *out;

	assert_int_equal(run("", &out), 2);
	free(out);
	assert_int_equal(run("frobnicate", &out), 2);
	free(out);
	assert_int_equal(run("calc", &out), 2); /* no --model */
	free(out);
	assert_int_equal(run("calc --model Qwen3-8B --kv-dtype fp7", &out), 2);
	free(out);
	assert_int_equal(run("calc --model Qwen3-8B --mem-util 1.5", &out), 2);
	free(out);
	assert_int_equal(run("calc --model no/such/config.json", &out), 1);
	free(out);
	assert_int_equal(run("calc --model Qwen3-8B --gpu H100-SXM --mig 9g.1gb", &out), 1);
	free(out);
	assert_int_equal(run("calc --model Qwen3-8B --plan tape:3", &out), 2);
	free(out);
	assert_int_equal(run("calc --model Qwen3-8B --plan dram:2 --tier-bw dram", &out), 2);
	free(out);
}

/* Token counts and sizes are read by the shared size parser: what is no
 * count (NaN, infinity, a number past 64 bits, a percentage) is a usage
 * error, never a figure made of it. */
static void counts_that_are_no_number_are_refused(void **state)
{
	const char *bad[] = {
		"--context nan", "--context inf", "--context 1e30", "--context 50%",
		"--overhead inf", "--overhead nan", "--users 1e30", "--block-tokens nan",
	};
	char args[256], *out;
	json_t *j;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(args, sizeof(args), "calc --model Qwen3-8B --gpu H100-SXM %s --json", bad[i]);
		if (run(args, &out) != 2)
			fail_msg("kvtier %s: not refused:\n%s", args, out);
		free(out);
	}
	j = run_json("calc --model Qwen3-8B --gpu H100-SXM --context 128KiB --overhead 1.5G --json");
	assert_int_equal(geti(j, "context"), 131072);
	json_decref(j);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(json_has_the_documented_keys),
		cmocka_unit_test(decode_bound_at_short_context),
		cmocka_unit_test(mig_and_kv_dtype),
		cmocka_unit_test(plan_of_a_prefix),
		cmocka_unit_test(a_tp_plan_prices_the_whole_group),
		cmocka_unit_test(the_batch_is_the_users_that_fit),
		cmocka_unit_test(names_as_users_write_them),
		cmocka_unit_test(counts_that_are_no_number_are_refused),
		cmocka_unit_test(text_output_and_help),
		cmocka_unit_test(bad_input_exit_status),
	};

	if (argc < 2) {
		fprintf(stderr, "usage: %s PATH-TO-kvtier\n", argv[0]);
		return 2;
	}
	bin = argv[1];
	return cmocka_run_group_tests(tests, NULL, NULL);
}
