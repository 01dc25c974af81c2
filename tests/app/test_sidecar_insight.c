/* SPDX-License-Identifier: Apache-2.0 */
/* What kvtierd tells of its traffic, through a real daemon: per-tenant and
 * per-namespace lookups, hits and tokens saved in STATS, only for the
 * holder of the tenant's token; namespaces past --stats-namespaces counted
 * as the tenant's "other"; the same figures on the metrics endpoint with
 * --metrics-tenants, and the live miss-ratio curve there
 * (kvtier_mrc_hit_ratio) and in `kvtier stats --mrc --json`. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "daemon_proc.h"
#include "metrics_checked.h"
#include "helpers.h"

static struct kvtd_proc d;
static int port;

static int setup(void **state)
{
	const char *extra[] = { "--tenant", "alice:ta", "--tenant", "bob:tb", "--stats-namespaces",
				"2", "--metrics", "127.0.0.1:0", "--metrics-tenants", "--mrc-budget",
				"4M", NULL };

	if (kvtd_start(&d, NULL, extra))
		return -1;
	port = kvtd_metrics_port(&d);
	return port > 0 ? 0 : -1;
}

static int teardown(void **state)
{
	int status = kvtd_stop(&d, SIGTERM);

	kvtd_cleanup(&d);
	return status == 0 ? 0 : -1;
}

/* As tenant `token`, in namespace `model`: save the first `save` of `n`
 * blocks, then look all n up `rounds` times. Returns the hits of the last. */
static int traffic(const char *token, const char *model, int save, int n, int rounds)
{
	struct kvt_client *c = kvtd_connect(&d, token);
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;
	struct engine_mem m;
	struct kvt_key keys[16];
	uint32_t tokens[64], pages[16];
	uint64_t t;
	int hit = 0;

	assert_non_null(c);
	assert_true(n <= 16);
	for (int i = 0; i < 64; i++)
		tokens[i] = (uint32_t)i * 31 + 7;
	kvtd_test_desc(&desc, model);
	assert_int_equal(kvt_client_hello(c, &desc, &ns), 0);
	assert_int_equal(kvt_client_prefix_keys(&ns, NULL, tokens, (size_t)n * desc.block_tokens,
						keys, (size_t)n), n);
	if (save) {
		assert_int_equal(engine_mem_open(&m, c, &ns, &desc, 16), 0);
		for (int i = 0; i < save; i++)
			pages[i] = (uint32_t)i;
		assert_int_equal(kvt_client_save(c, &ns, (uint32_t)m.region, NULL, keys, pages,
						 (uint32_t)save, &t), 0);
		assert_int_equal(kvt_client_wait(c, t, -1), save);
		engine_mem_close(&m);
	}
	for (int r = 0; r < rounds; r++)
		hit = kvt_client_lookup(c, &ns, keys, (uint32_t)n, NULL);
	kvt_client_close(c);
	return hit;
}

/* STATS as `token` ("" for none), parsed; NULL when refused (*err). */
static json_t *stats(const char *token, int *err)
{
	struct kvt_client *c = kvtd_connect(&d, token);
	char *text = NULL;
	json_t *j = NULL;

	assert_non_null(c);
	*err = kvt_client_stats(c, &text);
	if (!*err) {
		j = json_loads(text, 0, NULL);
		assert_non_null(j);
	}
	free(text);
	kvt_client_close(c);
	return j;
}

static double num(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_number(v))
		fail_msg("no number \"%s\"", key);
	return json_number_value(v);
}

/* The namespace named `label` of a tenant section, NULL if absent. */
static json_t *ns_named(json_t *tenant, const char *label)
{
	json_t *n;
	size_t i;

	json_array_foreach(json_object_get(tenant, "namespaces"), i, n)
		if (!strcmp(json_string_value(json_object_get(n, "namespace")), label))
			return n;
	return NULL;
}

static char *http(const char *req)
{
	return kvtd_http_checked(port, req);
}

static void tenant_figures_need_the_token(void **state)
{
	json_t *j, *t, *n;
	int err;

	/* alice: 4 of 6 blocks stored, looked up twice: 12 keys, 8 hits, 8
	 * blocks of 4 tokens saved; bob: 3 keys, none stored */
	assert_int_equal(traffic("ta", "m/one", 4, 6, 2), 4);
	assert_int_equal(traffic("tb", "m/one", 0, 3, 1), 0);

	j = stats("", &err);
	assert_int_equal(err, 0);
	assert_null(json_object_get(j, "tenant")); /* the daemon-wide view alone */
	assert_non_null(json_object_get(j, "mrc"));
	json_decref(j);

	j = stats("ta", &err);
	assert_int_equal(err, 0);
	t = json_object_get(j, "tenant");
	assert_string_equal(json_string_value(json_object_get(t, "name")), "alice");
	assert_true(num(t, "lookups") == 2);
	assert_true(num(t, "lookup_keys") == 12);
	assert_true(num(t, "lookup_hit_keys") == 8);
	assert_true(num(t, "lookup_miss_keys") == 4);
	assert_true(num(t, "tokens_saved") == 32);
	n = ns_named(t, "m/one");
	assert_non_null(n);
	assert_true(num(n, "lookup_keys") == 12);
	assert_int_equal(json_array_size(json_object_get(t, "namespaces")), 1); /* not bob's */
	json_decref(j);

	j = stats("tb", &err);
	t = json_object_get(j, "tenant");
	assert_string_equal(json_string_value(json_object_get(t, "name")), "bob");
	assert_true(num(t, "lookup_keys") == 3 && num(t, "lookup_hit_keys") == 0);
	json_decref(j);

	assert_null(stats("not-a-token", &err));
	assert_int_equal(err, -EACCES);
}

static void namespaces_past_the_limit_are_other(void **state)
{
	json_t *j, *t, *other;
	int err;

	/* --stats-namespaces 2: alice's m/one and bob's m/one have figures of
	 * their own (the first test); alice's m/two and m/three are "other" */
	traffic("ta", "m/two", 0, 5, 1);
	traffic("ta", "m/three", 0, 2, 1);
	j = stats("ta", &err);
	assert_int_equal(err, 0);
	t = json_object_get(j, "tenant");
	assert_null(ns_named(t, "m/two"));
	other = json_object_get(t, "other");
	assert_true(num(other, "lookups") == 2);
	assert_true(num(other, "lookup_keys") == 7);
	assert_true(num(t, "lookup_keys") == 12 + 7); /* the tenant counts them all */
	json_decref(j);
}

static void metrics_give_tenants_and_the_curve(void **state)
{
	char *text = http("GET /metrics HTTP/1.0\r\n\r\n");

	assert_non_null(strstr(text, "200 OK"));
	assert_true(kvtd_metric_checked(text, "kvtier_tenant_lookup_keys_total{tenant=\"alice\",result=\"hit\"}")
		    == 8);
	assert_true(kvtd_metric_checked(text, "kvtier_tenant_lookup_keys_total{tenant=\"bob\",result=\"miss\"}")
		    == 3);
	assert_true(kvtd_metric_checked(text, "kvtier_tenant_tokens_saved_total{tenant=\"alice\"}") == 32);
	assert_true(kvtd_metric_checked(text, "kvtier_namespace_lookup_keys_total{tenant=\"alice\","
				 "namespace=\"m/one\",result=\"hit\"}") == 8);
	assert_true(kvtd_metric_checked(text, "kvtier_namespace_lookup_keys_total{tenant=\"alice\","
				 "namespace=\"other\",result=\"miss\"}") == 7);
	/* the curve: a ratio, not decreasing with capacity */
	{
		double a = kvtd_metric_checked(text, "kvtier_mrc_hit_ratio{tier=\"dram\",capacity_factor=\"0.125\"}");
		double b = kvtd_metric_checked(text, "kvtier_mrc_hit_ratio{tier=\"dram\",capacity_factor=\"8\"}");

		assert_true(a >= 0 && b <= 1 && a <= b);
	}
	free(text);
}

static void kvtier_stats_prints_the_curve(void **state)
{
	const char *cli = getenv("KVTIER_CLI");
	char *cmd, out[1 << 16];
	size_t len;
	json_t *j, *dram, *p, *n, *pts, *one = NULL;
	size_t i;
	int big = 0;
	FILE *f;

	if (!cli)
		fail_msg("KVTIER_CLI is not set");
	assert_true(asprintf(&cmd, "'%s' stats --socket '%s' --token ta --mrc --json", cli,
			     d.socket) > 0);
	f = popen(cmd, "r");
	assert_non_null(f);
	len = fread(out, 1, sizeof(out) - 1, f);
	assert_int_equal(pclose(f), 0);
	out[len] = 0;
	j = json_loads(out, 0, NULL);
	assert_non_null(j);
	dram = json_object_get(json_object_get(json_object_get(j, "mrc"), "tiers"), "dram");
	assert_int_equal(json_array_size(dram), 7);
	p = json_array_get(dram, 3);
	assert_true(num(p, "capacity_factor") == 1);
	assert_true(num(p, "capacity_bytes") == 64 << 20); /* --dram 64M */
	assert_true(num(p, "capacity_blocks") > 0);
	assert_true(num(p, "hit_ratio") >= 0 && num(p, "hit_ratio") <= 1);
	assert_true(num(json_array_get(dram, 0), "capacity_bytes") == 8 << 20);
	/* the tenant's namespaces with a curve of their own; alice's m/one saw
	 * its 6 keys looked up twice (the first test), every block sampled
	 * (rate 1 while the budget holds them): the second round hits in any
	 * cache of 6 blocks or more, nothing hits in a smaller one */
	json_array_foreach(json_object_get(j, "namespaces"), i, n)
		if (!strcmp(json_string_value(json_object_get(n, "namespace")), "m/one"))
			one = json_object_get(n, "mrc");
	assert_non_null(one);
	pts = json_object_get(one, "dram");
	assert_int_equal(json_array_size(pts), 7);
	json_array_foreach(pts, i, p) {
		double want = num(p, "capacity_blocks") >= 6 ? 0.5 : 0;

		if (fabs(num(p, "hit_ratio") - want) > 1e-9)
			fail_msg("m/one at %g blocks: hit ratio %g, not %g", num(p, "capacity_blocks"),
				 num(p, "hit_ratio"), want);
		big += num(p, "capacity_blocks") >= 6;
	}
	assert_true(big > 0);
	json_decref(j);
	free(cmd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(tenant_figures_need_the_token),
		cmocka_unit_test(namespaces_past_the_limit_are_other),
		cmocka_unit_test(metrics_give_tenants_and_the_curve),
		cmocka_unit_test(kvtier_stats_prints_the_curve),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
