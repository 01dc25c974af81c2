/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's metrics: the Prometheus endpoint on loopback serves every
 * family docs/metrics.md promises with values that follow the traffic, odd HTTP
 * gets an error and no harm, and `kvtier stats` prints the same counters
 * (table and --json); each tier's table of named counters reaches STATS,
 * /metrics and `kvtier stats` whole, with the same values. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "daemon_proc.h"
#include "metrics_checked.h"
#include "stats_checked.h"
#include "helpers.h"

static struct kvtd_proc d;
static int port;
/* the daemon with an SSD tier of one test: stopped by teardown too, so a
 * failed assertion does not leave it running */
static struct kvtd_proc ds;

static int setup(void **state)
{
	const char *extra[] = { "--metrics", "127.0.0.1:0", NULL };

	if (kvtd_start(&d, NULL, extra))
		return -1;
	port = kvtd_metrics_port(&d);
	return port > 0 ? 0 : -1;
}

static int teardown(void **state)
{
	int status = kvtd_stop(&d, SIGTERM);

	kvtd_cleanup(&d);
	if (ds.dir)
		kvtd_cleanup(&ds);
	return status == 0 ? 0 : -1;
}

static char *http(const char *req)
{
	return kvtd_http_checked(port, req);
}

static void traffic(void)
{
	struct kvt_client *c = kvtd_connect(&d, NULL);
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;
	struct engine_mem m;
	struct kvt_key keys[6];
	uint32_t tokens[24], pages[4] = { 0, 1, 2, 3 };
	uint64_t t;

	for (int i = 0; i < 24; i++)
		tokens[i] = (uint32_t)i * 7;
	kvtd_test_desc(&desc, NULL);
	assert_int_equal(kvt_client_hello(c, &desc, &ns), 0);
	assert_int_equal(engine_mem_open(&m, c, &ns, &desc, 8), 0);
	assert_int_equal(kvt_client_prefix_keys(&ns, NULL, tokens, 24, keys, 6), 6);
	assert_int_equal(kvt_client_save(c, &ns, (uint32_t)m.region, NULL, keys, pages, 4, &t), 0);
	assert_int_equal(kvt_client_wait(c, t, -1), 4);
	assert_int_equal(kvt_client_lookup(c, &ns, keys, 6, NULL), 4);
	assert_int_equal(kvt_client_load(c, &ns, (uint32_t)m.region, keys, pages, 4, &t), 0);
	assert_int_equal(kvt_client_wait(c, t, -1), 4);
	engine_mem_close(&m);
	kvt_client_close(c);
}

/* The endpoint needs no credentials (any local uid, or any host when bound
 * beyond loopback, can read it): it carries counters only, never a tenant,
 * a model id or a socket path. */
static void the_endpoint_names_no_tenant_or_model(void **state)
{
	static const char *const paths[] = { "GET /metrics HTTP/1.0\r\n\r\n",
					     "GET /stats HTTP/1.0\r\n\r\n" };
	struct kvt_client *c = kvtd_connect(&d, NULL);
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;

	kvtd_test_desc(&desc, "acme-corp/secret-model");
	assert_int_equal(kvt_client_hello(c, &desc, &ns), 0);
	for (size_t i = 0; i < 2; i++) {
		char *text = http(paths[i]);

		assert_non_null(strstr(text, "200 OK"));
		if (strstr(text, "acme-corp") || strstr(text, "secret-model") ||
		    strstr(text, "test/tiny") || strstr(text, "tenant") || strstr(text, d.socket))
			fail_msg("%s names a tenant, a model or the socket:\n%s", paths[i], text);
		free(text);
	}
	kvt_client_close(c);
}

static void prometheus_endpoint_follows_the_traffic(void **state)
{
	char *before = http("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), *after;
	uint64_t block = 2 * 4 * 2 * 16 * 2 * 4;

	assert_non_null(strstr(before, "HTTP/1.1 200 OK"));
	assert_non_null(strstr(before, "text/plain; version=0.0.4"));
	traffic();
	after = http("GET /metrics HTTP/1.0\r\n\r\n");
	assert_true(kvtd_metric_checked(after, "kvtier_tier_blocks{tier=\"dram\"}") -
		    kvtd_metric_checked(before, "kvtier_tier_blocks{tier=\"dram\"}") == 4);
	assert_true(kvtd_metric_checked(after, "kvtier_tier_bytes_total{tier=\"dram\",direction=\"in\"}") -
		    kvtd_metric_checked(before, "kvtier_tier_bytes_total{tier=\"dram\",direction=\"in\"}") == 4 * block);
	assert_true(kvtd_metric_checked(after, "kvtier_engine_bytes_total{direction=\"scatter\"}") -
		    kvtd_metric_checked(before, "kvtier_engine_bytes_total{direction=\"scatter\"}") == 4 * block);
	assert_true(kvtd_metric_checked(after, "kvtier_lookup_keys_total{result=\"hit\"}") -
		    kvtd_metric_checked(before, "kvtier_lookup_keys_total{result=\"hit\"}") == 4);
	assert_true(kvtd_metric_checked(after, "kvtier_lookup_keys_total{result=\"miss\"}") -
		    kvtd_metric_checked(before, "kvtier_lookup_keys_total{result=\"miss\"}") == 2);
	assert_true(kvtd_metric_checked(after, "kvtier_tier_hits_total{tier=\"dram\"}") >
		    kvtd_metric_checked(before, "kvtier_tier_hits_total{tier=\"dram\"}"));
	assert_true(kvtd_metric_checked(after, "kvtier_op_latency_seconds_count{op=\"SAVE\"}") >= 1);
	assert_true(kvtd_metric_checked(after, "kvtier_op_latency_seconds_bucket{op=\"LOOKUP\",le=\"+Inf\"}") >= 1);
	assert_true(kvtd_metric_checked(after, "kvtier_tier_occupancy_ratio{tier=\"dram\"}") > 0);
	assert_true(kvtd_metric_checked(after, "kvtier_tier_degraded{tier=\"dram\"}") == 0);
	free(before);
	free(after);
}

static void odd_http_is_refused_harmlessly(void **state)
{
	char *r = http("GET /nothing HTTP/1.1\r\n\r\n");

	assert_non_null(strstr(r, "404"));
	free(r);
	r = http("POST /metrics HTTP/1.1\r\n\r\n");
	assert_non_null(strstr(r, "405"));
	free(r);
	r = http("GET /stats HTTP/1.1\r\n\r\n");
	assert_non_null(strstr(r, "application/json"));
	free(r);
	/* a head that never ends is cut off, and the daemon still answers */
	{
		char junk[4096];
		memset(junk, 'A', sizeof(junk) - 1);
		junk[sizeof(junk) - 1] = 0;
		r = http(junk);
		free(r);
	}
	r = http("GET /metrics HTTP/1.1\r\n\r\n");
	assert_non_null(strstr(r, "200 OK"));
	free(r);
}

static void kvtier_stats_prints_the_same_counters(void **state)
{
	const char *cli = getenv("KVTIER_CLI");
	char cmd[600], *out = malloc(1 << 20);
	size_t len;
	json_t *root;
	FILE *p;

	if (!cli) {
		/* the CLI is built with the daemon; ctest sets its path */
		print_message("SKIP: KVTIER_CLI is not set: no kvtier CLI to run\n");
		skip();
	}
	snprintf(cmd, sizeof(cmd), "%s stats --socket %s --json", cli, d.socket);
	p = popen(cmd, "r");
	len = fread(out, 1, (1 << 20) - 1, p);
	out[len] = 0;
	assert_int_equal(pclose(p), 0);
	root = json_loads(out, 0, NULL);
	assert_non_null(root);
	assert_true(json_integer_value(json_object_get(json_object_get(json_object_get(root, "tiers"),
		"dram"), "blocks")) >= 4);
	json_decref(root);

	snprintf(cmd, sizeof(cmd), "%s stats --socket %s", cli, d.socket);
	p = popen(cmd, "r");
	len = fread(out, 1, (1 << 20) - 1, p);
	out[len] = 0;
	assert_int_equal(pclose(p), 0);
	assert_non_null(strstr(out, "dram"));
	assert_non_null(strstr(out, "LOOKUP"));
	/* no daemon there: a clear error, status 1 */
	snprintf(cmd, sizeof(cmd), "%s stats --socket %s/none.sock 2>/dev/null", cli, d.sockdir);
	p = popen(cmd, "r");
	len = fread(out, 1, (1 << 20) - 1, p);
	assert_int_equal(WEXITSTATUS(pclose(p)), 1);
	free(out);
}

/* Idle sockets cannot lock scrapes out: when the endpoint's table is full
 * the oldest connection gives way to the new one. */
static void idle_sockets_do_not_block_scrapes(void **state)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int idle[70];
	char *r;

	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	for (int i = 0; i < 70; i++) {
		idle[i] = socket(AF_INET, SOCK_STREAM, 0);
		assert_int_equal(connect(idle[i], (struct sockaddr *)&sa, sizeof(sa)), 0);
		/* half a request head, so each stays open waiting for the rest */
		assert_int_equal(send(idle[i], "GET /met", 8, MSG_NOSIGNAL), 8);
	}
	r = http("GET /metrics HTTP/1.1\r\n\r\n");
	assert_non_null(strstr(r, "200 OK"));
	assert_non_null(strstr(r, "kvtier_"));
	free(r);
	for (int i = 0; i < 70; i++)
		close(idle[i]);
}

/* The output of `kvtier stats ARGS` on d's socket (the caller frees it);
 * NULL and a skip where there is no CLI. */
static char *kvtier_stats(const struct kvtd_proc *dp, const char *args)
{
	const char *cli = getenv("KVTIER_CLI");
	char cmd[600], *out;
	size_t len;
	FILE *p;

	if (!cli)
		return NULL;
	out = malloc(1 << 20);
	assert_non_null(out);
	snprintf(cmd, sizeof(cmd), "%s stats --socket %s %s", cli, dp->socket, args);
	p = popen(cmd, "r");
	assert_non_null(p);
	len = fread(out, 1, (1 << 20) - 1, p);
	out[len] = 0;
	assert_int_equal(pclose(p), 0);
	return out;
}

/* Every row of tier's table in STATS (tiers.<tier>.counters) is on
 * /metrics as kvtier_<tier>_<name>[_total] with the same value, and in
 * `kvtier stats` (table) by name. Returns the rows checked. */
static size_t table_everywhere(json_t *st, const char *tier, const char *metrics,
			       const char *table)
{
	json_t *counters = json_object_get(json_object_get(json_object_get(st, "tiers"), tier),
					   "counters");
	const char *name;
	json_t *v;
	size_t n = 0;

	assert_true(json_is_object(counters));
	json_object_foreach(counters, name, v) {
		char series[160], total[160];
		double m;

		snprintf(series, sizeof(series), "kvtier_%s_%s ", tier, name);
		snprintf(total, sizeof(total), "kvtier_%s_%s_total ", tier, name);
		m = kvtd_metric(metrics, series);
		if (isnan(m))
			m = kvtd_metric_checked(metrics, total);
		if (m != (double)json_integer_value(v))
			fail_msg("%s.%s: STATS %lld, /metrics %.0f", tier, name,
				 (long long)json_integer_value(v), m);
		if (table && !strstr(table, name))
			fail_msg("kvtier stats does not show %s.%s", tier, name);
		n++;
	}
	return n;
}

/* A daemon with an SSD tier, blocks demoted to it and read back: the DRAM
 * and SSD tiers' tables reach every reader whole, and the rows that were
 * fields before keep their old STATS fields and metric names. */
static void tier_counters_reach_stats_metrics_and_cli(void **state)
{
	const char *extra[] = { "--dram", "8M", "--ssd", "64M", "--metrics", "127.0.0.1:0", NULL };
	/* the demoter still: what each tier holds the same twice */
	static const struct kvtd_stat_path paths[] = {
		{ "tiers", "ssd", "blocks" },
		{ "tiers", "ssd", "bytes_out" },
		{ "tiers", "dram", "blocks" },
		{ "tiers", "dram", "evictions" },
	};
	enum { N = 96 }; /* 12 MiB of 128 KiB blocks: a third goes to SSD */
	struct kvtd_chain e;
	struct kvt_key keys[16];
	uint32_t pages[N], n_ssd = 0;
	uint8_t tiers[N];
	uint64_t ticket;
	char *metrics, *table;
	json_t *st, *ssd;
	int mport;

	assert_int_equal(kvtd_start(&ds, NULL, extra), 0);
	mport = kvtd_metrics_port(&ds);
	assert_true(mport > 0);
	assert_int_equal(kvtd_chain_open(&e, &ds, "test/tier-counters", N, N, 7), 0);
	for (uint32_t i = 0; i < N; i++) {
		pages[i] = i;
		engine_page_fill(&e.m, i, 7 + i);
	}
	assert_int_equal(kvt_client_save(e.c, &e.ns, (uint32_t)e.m.region, NULL, e.keys, pages, N,
					 &ticket), 0);
	assert_int_equal(kvt_client_wait(e.c, ticket, 60000), N);
	/* read back (into their own pages) blocks the demoter wrote to SSD */
	json_decref(kvtd_settled_stats(e.c, paths, 4));
	assert_int_equal(kvt_client_lookup(e.c, &e.ns, e.keys, N, tiers), N);
	for (uint32_t i = 0; i < N && n_ssd < 16; i++)
		if (tiers[i] == KVT_TIER_SSD) {
			keys[n_ssd] = e.keys[i];
			pages[n_ssd++] = i;
			engine_page_fill(&e.m, i, 0);
		}
	assert_true(n_ssd > 0);
	assert_int_equal(kvt_client_load(e.c, &e.ns, (uint32_t)e.m.region, keys, pages, n_ssd,
					 &ticket), 0);
	assert_int_equal(kvt_client_wait(e.c, ticket, 60000), (int)n_ssd);
	for (uint32_t j = 0; j < n_ssd; j++)
		assert_int_equal(engine_page_check(&e.m, pages[j], 7 + pages[j]), 0);

	st = kvtd_settled_stats(e.c, paths, 4);
	assert_true(kvtd_stat(st, "tiers", "ssd", "blocks") > 0);
	assert_true(kvtd_stat(st, "tiers", "ssd", "bytes_out") > 0);
	metrics = kvtd_http_checked(mport, "GET /metrics HTTP/1.0\r\n\r\n");
	table = kvtier_stats(&ds, "");
	assert_true(table_everywhere(st, "ssd", metrics, table) >= 8);
	assert_true(table_everywhere(st, "dram", metrics, table) >= 4);
	ssd = json_object_get(json_object_get(st, "tiers"), "ssd");
	assert_true(kvtd_stat(ssd, "counters", NULL, "tombstones") >= 0);
	/* the LOAD had its SSD reads in flight together */
	assert_true(kvtd_stat(ssd, "counters", NULL, "reads_in_flight_max") >= 1);
	assert_true(kvtd_stat(ssd, "counters", NULL, "reads_in_flight_max") <= N);
	assert_true(kvtd_metric_checked(metrics, "kvtier_ssd_reads_in_flight_max ") >= 1);
	if (table)
		assert_non_null(strstr(table, "reads_in_flight_max"));
	/* rows that were fields: the old field and the old metric name hold */
	assert_int_equal(kvtd_stat(ssd, "counters", NULL, "compressed_writes"),
			 kvtd_stat(st, "store", NULL, "ssd_compressed_writes"));
	assert_int_equal(kvtd_stat(ssd, "counters", NULL, "copies_dropped"),
			 kvtd_stat(st, "store", NULL, "ssd_copies_dropped"));
	assert_int_equal(kvtd_stat(ssd, "counters", NULL, "admission_refused_bytes"),
			 kvtd_stat(st, "store", NULL, "ssd_admission_refused_bytes"));
	assert_int_equal(kvtd_stat(ssd, "counters", NULL, "probes"),
			 kvtd_stat(st, "tiers", "ssd", "probes"));
	kvtd_metric_checked(metrics, "kvtier_ssd_admission_refused_total ");
	kvtd_metric_checked(metrics, "kvtier_ssd_recovery_scanned_segments ");
	kvtd_metric_checked(metrics, "kvtier_ssd_tombstones ");
	kvtd_metric_checked(metrics, "kvtier_ssd_write_bytes_total{kind=\"raw\"}");
	/* one HELP line per family: a row is not also printed the old way */
	assert_null(strstr(strstr(metrics, "# HELP kvtier_ssd_probes_total") + 1,
			   "# HELP kvtier_ssd_probes_total"));
	assert_string_equal(json_string_value(json_object_get(json_object_get(ssd, "units"),
							      "admission_refused_bytes")), "bytes");
	free(table);
	free(metrics);
	json_decref(st);
	kvtd_chain_close(&e);
	assert_int_equal(kvtd_stop(&ds, SIGTERM), 0);
	kvtd_cleanup(&ds);
	memset(&ds, 0, sizeof(ds));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(idle_sockets_do_not_block_scrapes),
		cmocka_unit_test(prometheus_endpoint_follows_the_traffic),
		cmocka_unit_test(odd_http_is_refused_harmlessly),
		cmocka_unit_test(the_endpoint_names_no_tenant_or_model),
		cmocka_unit_test(kvtier_stats_prints_the_same_counters),
		cmocka_unit_test(tier_counters_reach_stats_metrics_and_cli),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
