/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierd started with --ssd-codec shuf16-zstd, then shuf16-pack4, through
 * its socket: the
 * blocks an engine saves past DRAM go to SSD encoded (bf16-like K/V, whose
 * sign-and-exponent bytes compress), STATS, /metrics and `kvtier stats`
 * count the encoded writes and the bytes before and after, and LOAD brings
 * every block back byte for byte. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "daemon_proc.h"
#include "helpers.h"
#include "metrics_checked.h"
#include "stats_checked.h"

#define BLOCK (128u << 10) /* kvtd_test_desc_128k: 64 fill the 8 MiB DRAM tier */
#define BLOCK_TOKENS 16
#define BLOCKS 192         /* three times what DRAM holds */
#define PAGES 64
#define LOAD_BATCH 32

static uint64_t seed;

/* bf16-like values of block n, layer l, K or V: a random sign and low byte
 * (mantissa), and one of four exponents, as K/V of one scale have. */
static void fill_kv(uint8_t *p, uint64_t bytes, uint64_t n, uint32_t l, uint32_t kv)
{
	uint64_t s = (seed ^ (n * 1000003 + l * 2 + kv + 1)) | 1;

	for (uint64_t i = 0; i + 1 < bytes; i += 2) {
		uint64_t r = kvt_test_rand(&s);

		p[i] = (uint8_t)r;
		p[i + 1] = (uint8_t)((r >> 8 & 0x80) | (0x3c + (r >> 16 & 3)));
	}
}

static void page_fill(const struct engine_mem *m, uint32_t page, uint64_t n)
{
	for (uint32_t l = 0; l < m->layers; l++)
		for (uint32_t kv = 0; kv < 2; kv++)
			fill_kv(engine_page(m, page, l, kv), m->page_bytes, n, l, kv);
}

static bool page_holds(const struct engine_mem *m, uint32_t page, uint64_t n)
{
	uint8_t *want = malloc(m->page_bytes);
	bool same = true;

	for (uint32_t l = 0; l < m->layers && same; l++)
		for (uint32_t kv = 0; kv < 2 && same; kv++) {
			fill_kv(want, m->page_bytes, n, l, kv);
			same = !memcmp(want, engine_page(m, page, l, kv), m->page_bytes);
		}
	free(want);
	return same;
}

/* STATS once the demoter is still: SSD's blocks and bytes written the
 * same twice. */
static json_t *settled_stats(struct kvt_client *c)
{
	static const struct kvtd_stat_path paths[] = {
		{ "tiers", "ssd", "blocks" },
		{ "store", NULL, "ssd_write_raw_bytes" },
	};

	return kvtd_settled_stats(c, paths, 2);
}

static void blocks_go_to_ssd_encoded_and_come_back_whole(void **state)
{
	const char *codec = *state;
	const char *extra[] = { "--dram", "8M", "--ssd", "64M", "--ssd-codec", codec,
				"--metrics", "127.0.0.1:0", NULL };
	struct kvtd_proc d = { 0 };
	struct kvt_client *c;
	struct kvt_client_ns ns;
	struct kvt_ns_desc desc;
	struct engine_mem m;
	struct kvt_key keys[BLOCKS];
	uint32_t tokens[BLOCK_TOKENS], pages[LOAD_BATCH];
	long long ssd_blocks, encoded, raw, stored;
	uint64_t s = seed | 1, ticket;
	char *text, line[64];
	json_t *st;
	int port;

	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	port = kvtd_metrics_port(&d);
	assert_true(port > 0);
	snprintf(line, sizeof(line), ", codec %s", codec);
	assert_true(kvtd_log_has(&d, line));
	c = kvtd_connect(&d, NULL);
	assert_non_null(c);
	kvtd_test_desc_128k(&desc, "test/codec");
	assert_int_equal(kvt_client_hello(c, &desc, &ns), 0);
	assert_int_equal(engine_mem_open(&m, c, &ns, &desc, PAGES), 0);
	assert_int_equal(m.page_bytes * m.layers * 2, BLOCK);

	/* each block the first of its own sequence, saved once */
	for (uint32_t i = 0; i < BLOCKS; i++) {
		uint32_t page = i % PAGES;

		for (int t = 0; t < BLOCK_TOKENS; t++)
			tokens[t] = (uint32_t)kvt_test_rand(&s);
		assert_int_equal(kvt_client_prefix_keys(&ns, NULL, tokens, BLOCK_TOKENS, &keys[i], 1),
				 1);
		page_fill(&m, page, i);
		assert_int_equal(kvt_client_save(c, &ns, (uint32_t)m.region, NULL, &keys[i], &page, 1,
						 &ticket), 0);
		assert_int_equal(kvt_client_wait(c, ticket, 60000), 1);
	}

	/* what went down went encoded: about 16 bits in 11 here with zstd, 12
	 * with the 4-bit codes */
	st = settled_stats(c);
	ssd_blocks = kvtd_stat(st, "tiers", "ssd", "blocks");
	encoded = kvtd_stat(st, "store", NULL, "ssd_compressed_writes");
	raw = kvtd_stat(st, "store", NULL, "ssd_write_raw_bytes");
	stored = kvtd_stat(st, "store", NULL, "ssd_write_stored_bytes");
	print_message("%lld blocks on SSD, %lld written encoded: %lld bytes as %lld\n",
		      ssd_blocks, encoded, raw, stored);
	assert_true(ssd_blocks >= BLOCKS - 64);
	assert_true(encoded >= ssd_blocks);
	assert_int_equal(raw, encoded * (long long)BLOCK);
	if (stored * 5 > raw * 4)
		fail_msg("%lld bytes stored as %lld: not 1.25x smaller", raw, stored);
	json_decref(st);

	/* /metrics says the same */
	text = kvtd_http_checked(port, "GET /metrics HTTP/1.0\r\n\r\n");
	assert_true(kvtd_metric_checked(text, "kvtier_ssd_compressed_writes_total") ==
		    (double)encoded);
	assert_true(kvtd_metric_checked(text, "kvtier_ssd_write_bytes_total{kind=\"raw\"}") ==
		    (double)raw);
	assert_true(kvtd_metric_checked(text, "kvtier_ssd_write_bytes_total{kind=\"stored\"}") ==
		    (double)stored);
	free(text);

	/* and kvtier stats */
	if (getenv("KVTIER_CLI")) {
		char cmd[1024], out[1 << 14], want[64];
		size_t len;
		FILE *p;

		snprintf(cmd, sizeof(cmd), "%s stats --socket %s", getenv("KVTIER_CLI"), d.socket);
		p = popen(cmd, "r");
		assert_non_null(p);
		len = fread(out, 1, sizeof(out) - 1, p);
		out[len] = 0;
		assert_int_equal(pclose(p), 0);
		snprintf(want, sizeof(want), "%lld written encoded", encoded);
		if (!strstr(out, want))
			fail_msg("kvtier stats does not say \"%s\":\n%s", want, out);
	}

	/* every block comes back as it was saved, most of them from SSD */
	for (uint32_t i0 = 0; i0 < BLOCKS; i0 += LOAD_BATCH) {
		for (uint32_t k = 0; k < LOAD_BATCH; k++) {
			pages[k] = k;
			memset(engine_page(&m, k, 0, 0), 0, m.page_bytes);
		}
		assert_int_equal(kvt_client_load(c, &ns, (uint32_t)m.region, &keys[i0], pages,
						 LOAD_BATCH, &ticket), 0);
		assert_int_equal(kvt_client_wait(c, ticket, 60000), LOAD_BATCH);
		for (uint32_t k = 0; k < LOAD_BATCH; k++)
			if (!page_holds(&m, k, i0 + k))
				fail_msg("block %u loaded wrong bytes", i0 + k);
	}
	st = kvtd_stats(c);
	assert_true(kvtd_stat(st, "tiers", "ssd", "hits") >= ssd_blocks);
	assert_int_equal(kvtd_stat(st, "store", NULL, "checksum_failures"), 0);
	json_decref(st);

	engine_mem_close(&m);
	kvt_client_close(c);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_prestate(blocks_go_to_ssd_encoded_and_come_back_whole,
					  "shuf16-zstd"),
		cmocka_unit_test_prestate(blocks_go_to_ssd_encoded_and_come_back_whole,
					  "shuf16-pack4"),
	};

	seed = kvt_test_seed();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
