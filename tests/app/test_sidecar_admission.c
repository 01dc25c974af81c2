/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierd started with --ssd-admission reused, through its socket: blocks
 * an engine saves once and never asks for again are dropped when DRAM
 * overflows instead of being written to SSD, and STATS, /metrics and
 * `kvtier stats` count them (blocks and bytes); blocks it looked up after
 * saving are written, and LOAD serves them from SSD, byte for byte. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <jansson.h>

#include "daemon_proc.h"
#include "helpers.h"
#include "metrics_checked.h"
#include "stats_checked.h"

#define BLOCK (128u << 10) /* kvtd_test_desc_128k: 64 fill the 8 MiB DRAM tier */
#define BLOCK_TOKENS 16
#define HOT 16             /* saved, then looked up: used twice */
#define COLD 192           /* saved once, three times what DRAM holds */
#define PAGES 64

static uint64_t seed;

struct engine {
	struct kvt_client *c;
	struct kvt_client_ns ns;
	struct engine_mem m;
	struct kvt_key keys[HOT + COLD]; /* hot first */
};

/* Each block the first of its own sequence: under the default tail-lru
 * every one is a tail, so DRAM lets go of the oldest first. */
static void engine_open(struct engine *e, const struct kvtd_proc *d)
{
	struct kvt_ns_desc desc;
	uint32_t tokens[BLOCK_TOKENS];
	uint64_t s = seed | 1;

	e->c = kvtd_connect(d, NULL);
	assert_non_null(e->c);
	kvtd_test_desc_128k(&desc, "test/admission");
	assert_int_equal(kvt_client_hello(e->c, &desc, &e->ns), 0);
	assert_int_equal(engine_mem_open(&e->m, e->c, &e->ns, &desc, PAGES), 0);
	assert_int_equal(e->m.page_bytes * e->m.layers * 2, BLOCK);
	for (int i = 0; i < HOT + COLD; i++) {
		for (int t = 0; t < BLOCK_TOKENS; t++)
			tokens[t] = (uint32_t)kvt_test_rand(&s);
		assert_int_equal(kvt_client_prefix_keys(&e->ns, NULL, tokens, BLOCK_TOKENS,
							&e->keys[i], 1), 1);
	}
}

static void engine_close(struct engine *e)
{
	engine_mem_close(&e->m);
	kvt_client_close(e->c);
}

static void save(struct engine *e, uint32_t i)
{
	uint32_t page = i % PAGES;
	uint64_t ticket;

	engine_page_fill(&e->m, page, seed + i);
	assert_int_equal(kvt_client_save(e->c, &e->ns, (uint32_t)e->m.region, NULL, &e->keys[i],
					 &page, 1, &ticket), 0);
	assert_int_equal(kvt_client_wait(e->c, ticket, 60000), 1);
}

/* The tier of block i (a lookup: a use), KVT_TIER_NONE when absent. */
static uint8_t tier_of(struct engine *e, uint32_t i)
{
	uint8_t t = KVT_TIER_NONE;

	return kvt_client_lookup(e->c, &e->ns, &e->keys[i], 1, &t) == 1 ? t : KVT_TIER_NONE;
}

/* STATS once the demoter is still: DRAM's evictions and SSD's blocks the
 * same twice. */
static json_t *settled_stats(struct kvt_client *c)
{
	static const struct kvtd_stat_path paths[] = {
		{ "tiers", "dram", "evictions" },
		{ "tiers", "ssd", "blocks" },
	};

	return kvtd_settled_stats(c, paths, 2);
}

static char *run_cli(const char *args)
{
	const char *cli = getenv("KVTIER_CLI");
	char cmd[1024], *out = malloc(1 << 16);
	size_t len;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "%s %s", cli, args);
	p = popen(cmd, "r");
	assert_non_null(p);
	len = fread(out, 1, (1 << 16) - 1, p);
	out[len] = 0;
	assert_int_equal(pclose(p), 0);
	return out;
}

static void blocks_used_once_are_not_written_to_ssd(void **state)
{
	const char *extra[] = { "--dram", "8M", "--ssd", "64M", "--ssd-admission", "reused",
				"--metrics", "127.0.0.1:0", NULL };
	struct kvtd_proc d = { 0 };
	struct engine e;
	long long refused, dram_blocks, ssd_blocks, ssd_hits, batches;
	uint32_t pages[HOT];
	uint64_t ticket;
	char *text, *out, args[600];
	json_t *st;
	int port;

	(void)state;
	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	port = kvtd_metrics_port(&d); /* the summary is written by then */
	assert_true(port > 0);
	assert_true(kvtd_log_has(&d, ", admission reused"));
	engine_open(&e, &d);

	for (uint32_t i = 0; i < HOT; i++) {
		save(&e, i);
		assert_int_equal(tier_of(&e, i), KVT_TIER_DRAM);
	}
	for (uint32_t i = HOT; i < HOT + COLD; i++)
		save(&e, i);

	st = settled_stats(e.c);
	refused = kvtd_stat(st, "store", NULL, "ssd_admission_refused");
	dram_blocks = kvtd_stat(st, "tiers", "dram", "blocks");
	ssd_blocks = kvtd_stat(st, "tiers", "ssd", "blocks");
	/* every block saved is in DRAM, on SSD, or was refused */
	assert_int_equal(dram_blocks + ssd_blocks + refused, HOT + COLD);
	assert_int_equal(kvtd_stat(st, "tiers", "dram", "evictions"), ssd_blocks + refused);
	assert_int_equal(kvtd_stat(st, "store", NULL, "ssd_admission_refused_bytes"), refused * BLOCK);
	/* the hot blocks, the oldest, went down first and were written; of the
	 * cold ones only those still in DRAM were not refused */
	assert_int_equal(ssd_blocks, HOT);
	assert_int_equal(kvtd_stat(st, "tiers", "ssd", "bytes_in"), HOT * BLOCK);
	assert_true(refused >= COLD - 64 && refused < COLD);
	assert_int_equal(kvtd_stat(st, "tiers", "ssd", "evictions"), 0);
	assert_int_equal(kvtd_stat(st, "store", NULL, "dram_dropped"), 0);
	/* the demoter's write batches carried exactly the blocks written */
	batches = kvtd_stat(st, "store", NULL, "demote_batches");
	assert_true(batches >= 1 && batches <= HOT);
	assert_int_equal(kvtd_stat(st, "store", NULL, "demote_batch_blocks"), HOT);
	ssd_hits = kvtd_stat(st, "tiers", "ssd", "hits");
	json_decref(st);

	/* /metrics says the same */
	text = kvtd_http_checked(port, "GET /metrics HTTP/1.0\r\n\r\n");
	assert_true(kvtd_metric_checked(text, "kvtier_ssd_admission_refused_total") == (double)refused);
	assert_true(kvtd_metric_checked(text, "kvtier_ssd_admission_refused_bytes_total") ==
		    (double)refused * BLOCK);
	assert_true(kvtd_metric_checked(text, "kvtier_demote_batches_total") == (double)batches);
	assert_true(kvtd_metric_checked(text, "kvtier_demote_batch_blocks_total") == (double)HOT);
	free(text);

	/* and so does kvtier stats */
	if (getenv("KVTIER_CLI")) {
		char want[128];

		snprintf(args, sizeof(args), "stats --socket %s", d.socket);
		out = run_cli(args);
		snprintf(want, sizeof(want), "%lld blocks refused by the admission rule", refused);
		if (!strstr(out, want))
			fail_msg("kvtier stats does not say \"%s\":\n%s", want, out);
		free(out);
	}

	/* a block used twice is on SSD, and LOAD serves it from there */
	for (uint32_t i = 0; i < HOT; i++) {
		if (tier_of(&e, i) != KVT_TIER_SSD)
			fail_msg("hot block %u is not on SSD", i);
		pages[i] = i;
		engine_page_fill(&e.m, i, 0);
	}
	assert_int_equal(kvt_client_load(e.c, &e.ns, (uint32_t)e.m.region, e.keys, pages, HOT,
					 &ticket), 0);
	assert_int_equal(kvt_client_wait(e.c, ticket, 60000), HOT);
	for (uint32_t i = 0; i < HOT; i++)
		if (engine_page_check(&e.m, i, seed + i))
			fail_msg("hot block %u loaded wrong bytes", i);
	st = kvtd_stats(e.c);
	assert_true(kvtd_stat(st, "tiers", "ssd", "hits") >= ssd_hits + HOT);
	assert_true(kvtd_stat(st, "tiers", "ssd", "bytes_out") >= HOT * BLOCK);
	assert_int_equal(kvtd_stat(st, "store", NULL, "checksum_failures"), 0);
	json_decref(st);

	/* no block saved once ever reached SSD */
	for (uint32_t i = HOT; i < HOT + COLD; i++) {
		uint8_t t = tier_of(&e, i);

		if (t != KVT_TIER_DRAM && t != KVT_TIER_NONE)
			fail_msg("cold block %u is in tier %u", i, t);
	}
	engine_close(&e);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(blocks_used_once_are_not_written_to_ssd),
	};

	seed = kvt_test_seed();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
