/* SPDX-License-Identifier: Apache-2.0 */
/* Protocol version 2 against a real kvtierd: completions pushed per ticket
 * and per LOAD layer (no WAIT round trip), WAIT kept for clients that ask
 * for it, a version 1 client served as before, and LOOKUP's plan following
 * the prefill speed engines report and the rates the daemon measures, shown
 * in stats and on the metrics endpoint. */
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
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "daemon_proc.h"
#include "helpers.h"
#include "raw_frames.h"
#include "transport/proto.h"

#define PAGES 32
#define BLOCKS 8

struct fx {
	struct kvtd_proc d;
	int port;
	struct kvt_ns_desc desc;
	uint64_t seed;
};

static int setup(void **state)
{
	const char *extra[] = { "--metrics", "127.0.0.1:0", NULL };
	struct fx *f = calloc(1, sizeof(*f));

	if (!f || kvtd_start(&f->d, NULL, extra))
		return -1;
	f->port = kvtd_metrics_port(&f->d);
	kvtd_test_desc(&f->desc, NULL);
	f->seed = kvt_test_seed();
	*state = f;
	return f->port > 0 ? 0 : -1;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	int status;

	if (!f)
		return 0;
	status = kvtd_stop(&f->d, SIGTERM);
	kvtd_cleanup(&f->d);
	free(f);
	return status == 0 ? 0 : -1;
}

/* An engine: a connection of the given completions, its namespace and memory. */
struct eng {
	struct kvt_client *c;
	struct kvt_client_ns ns;
	struct engine_mem mem;
};

static void eng_open(struct fx *f, struct eng *e, enum kvt_client_completions how)
{
	struct kvt_client_opts o;

	kvt_client_opts_init(&o, sizeof(o));
	o.socket_path = f->d.socket;
	o.completions = how;
	assert_int_equal(kvt_client_connect(&o, &e->c), 0);
	assert_int_equal(kvt_client_hello(e->c, &f->desc, &e->ns), 0);
	assert_int_equal(kvt_client_version(e->c), KVT_PROTO_VERSION_MAX);
	assert_int_equal(engine_mem_open(&e->mem, e->c, &e->ns, &f->desc, PAGES), 0);
}

static void eng_close(struct eng *e)
{
	engine_mem_close(&e->mem);
	kvt_client_close(e->c);
}

static void make_keys(struct fx *f, const struct eng *e, uint64_t tag, struct kvt_key *keys,
		      int n)
{
	uint32_t tokens[BLOCKS * 4];
	uint64_t s = f->seed ^ (tag * 0x9e3779b97f4a7c15ull) ^ 3;

	for (uint32_t i = 0; i < n * f->desc.block_tokens; i++)
		tokens[i] = (uint32_t)kvt_test_rand(&s);
	assert_int_equal(kvt_client_prefix_keys(&e->ns, NULL, tokens, n * f->desc.block_tokens,
						keys, (size_t)n), n);
}

/* ops.NAME.count of the daemon's stats. */
static double op_count(struct kvt_client *c, const char *op)
{
	char *text;
	json_t *root;
	double v;

	assert_int_equal(kvt_client_stats(c, &text), 0);
	root = json_loads(text, 0, NULL);
	free(text);
	assert_non_null(root);
	v = json_number_value(json_object_get(json_object_get(json_object_get(root, "ops"), op),
					      "count"));
	json_decref(root);
	return v;
}

/* Save BLOCKS blocks from pages 0.., load them into pages 16.. waiting layer
 * by layer, check every byte; returns the change in WAIT and DONE counts. */
static void save_and_load(struct fx *f, struct eng *e, uint64_t tag, double *waits,
			  double *dones)
{
	struct kvt_key keys[BLOCKS];
	uint32_t src[BLOCKS], dst[BLOCKS];
	double w0 = op_count(e->c, "WAIT"), d0 = op_count(e->c, "DONE");
	uint64_t t;

	make_keys(f, e, tag, keys, BLOCKS);
	for (uint32_t i = 0; i < BLOCKS; i++) {
		src[i] = i;
		dst[i] = 16 + i;
		engine_page_fill(&e->mem, src[i], f->seed + tag + i);
		memset(engine_page(&e->mem, dst[i], 0, 0), 0, e->mem.page_bytes);
	}
	assert_int_equal(kvt_client_save(e->c, &e->ns, (uint32_t)e->mem.region, NULL, keys, src,
					 BLOCKS, &t), 0);
	assert_int_equal(kvt_client_wait(e->c, t, 5000), BLOCKS);
	assert_int_equal(kvt_client_load(e->c, &e->ns, (uint32_t)e->mem.region, keys, dst, BLOCKS,
					 &t), 0);
	for (uint32_t l = 0; l < f->desc.layers; l++)
		assert_int_equal(kvt_client_wait_layer(e->c, t, l, 5000), 0);
	assert_int_equal(kvt_client_wait(e->c, t, 5000), BLOCKS);
	for (uint32_t i = 0; i < BLOCKS; i++)
		assert_int_equal(engine_page_check(&e->mem, dst[i], f->seed + tag + i), 0);
	*waits = op_count(e->c, "WAIT") - w0;
	*dones = op_count(e->c, "DONE") - d0;
	/* the result was taken: the ticket is gone either way */
	assert_int_equal(kvt_client_wait(e->c, t, 0), -ENOENT);
}

static void completions_are_pushed_without_a_wait(void **state)
{
	struct fx *f = *state;
	struct eng e;
	double waits, dones;

	eng_open(f, &e, KVT_CLIENT_PUSHED);
	save_and_load(f, &e, 1, &waits, &dones);
	assert_true(waits == 0);
	/* at least the SAVE's and the LOAD's final frames, at most one per
	 * layer of the LOAD besides */
	assert_true(dones >= 2 && dones <= 2 + f->desc.layers);
	eng_close(&e);
}

static void wait_round_trips_stay_for_who_asks(void **state)
{
	struct fx *f = *state;
	struct eng e;
	double waits, dones;

	eng_open(f, &e, KVT_CLIENT_WAITED);
	save_and_load(f, &e, 2, &waits, &dones);
	/* the SAVE's, one per layer, the LOAD's result */
	assert_true(waits == 1 + f->desc.layers + 1);
	assert_true(dones == 0);
	eng_close(&e);
}

/* A pushed ticket polled until done: POLL reads the frames already there. */
static void a_pushed_ticket_can_be_polled(void **state)
{
	struct fx *f = *state;
	struct eng e;
	struct kvt_key keys[BLOCKS];
	uint32_t pages[BLOCKS];
	uint32_t layers = 0;
	uint64_t t;
	int result = -1, r = 0;

	eng_open(f, &e, KVT_CLIENT_PUSHED);
	make_keys(f, &e, 3, keys, BLOCKS);
	for (uint32_t i = 0; i < BLOCKS; i++)
		pages[i] = i;
	assert_int_equal(kvt_client_save(e.c, &e.ns, (uint32_t)e.mem.region, NULL, keys, pages,
					 BLOCKS, &t), 0);
	for (int i = 0; i < 5000 && (r = kvt_client_poll(e.c, t, &result, &layers)) == 0; i++)
		usleep(1000);
	assert_int_equal(r, 1);
	assert_int_equal(result, BLOCKS);
	assert_int_equal(layers, f->desc.layers);
	assert_int_equal(kvt_client_poll(e.c, t, &result, &layers), -ENOENT);
	eng_close(&e);
}

/* A client of version 1 (its HELLO offers 1 only) gets version 1's replies
 * and cannot ask for pushed completions. */
static void a_version_1_client_is_served_as_before(void **state)
{
	struct fx *f = *state;
	struct kvt_frame_hdr h;
	struct kvt_rep_hello hello;
	struct kvt_wr w;
	struct kvt_key key = { { 1, 2, 3 } };
	uint8_t *p;
	uint32_t page = 0;
	int fd = kvtd_connect_raw(&f->d);

	assert_true(fd >= 0);
	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_hello(&w, 1, "", &f->desc), 0);
	w.buf[KVT_PROTO_HDR_BYTES + 2] = 1; /* max_version 1 */
	raw_send(fd, &w);
	raw_read(fd, &h, &p);
	assert_int_equal(h.status, 0);
	assert_int_equal(kvt_proto_rep_hello(p, h.len, &hello), 0);
	assert_int_equal(hello.version, 1);
	free(p);

	assert_int_equal(kvt_proto_enc_keys(&w, KVT_OP_LOOKUP, 2, hello.ns, &key, 1), 0);
	raw_send(fd, &w);
	raw_read(fd, &h, &p);
	assert_int_equal(h.status, 0);
	assert_int_equal(h.len, 4 + 4 + 1); /* hit, n, one tier: no plan */
	free(p);

	assert_int_equal(kvt_proto_enc_xfer_flags(&w, KVT_OP_LOAD, 3, hello.ns, 1, NULL, &key,
						  &page, 1, KVT_XFER_PUSH), 0);
	raw_send(fd, &w);
	raw_read(fd, &h, &p);
	assert_int_equal(h.status, -EINVAL);
	free(p);
	kvt_wr_free(&w);
	close(fd);
}

/* The plan loads what is stored until an engine reports its speed; a
 * prefill faster than any tier makes it recompute everything, a slow one
 * load everything again. What it measured shows in stats and metrics. */
static void the_plan_follows_the_engine_and_the_tiers(void **state)
{
	struct fx *f = *state;
	struct eng e;
	struct kvt_key keys[BLOCKS];
	uint32_t pages[BLOCKS], load = 99;
	uint8_t tiers[BLOCKS];
	double before;
	uint64_t t;
	char *text, *prom;
	json_t *root, *plan, *dram;

	kvtd_test_desc(&f->desc, "test/plan");
	eng_open(f, &e, KVT_CLIENT_PUSHED);
	make_keys(f, &e, 4, keys, BLOCKS);
	for (uint32_t i = 0; i < BLOCKS; i++)
		pages[i] = i;
	assert_int_equal(kvt_client_save(e.c, &e.ns, (uint32_t)e.mem.region, NULL, keys, pages,
					 BLOCKS, &t), 0);
	assert_int_equal(kvt_client_wait(e.c, t, 5000), BLOCKS);
	assert_int_equal(kvt_client_lookup_plan(e.c, &e.ns, keys, BLOCKS, tiers, &load), BLOCKS);
	assert_int_equal(load, BLOCKS); /* no speed reported: load all */
	assert_int_equal(tiers[0], KVT_TIER_DRAM);

	/* a LOAD measures the DRAM tier */
	for (uint32_t i = 0; i < BLOCKS; i++)
		pages[i] = 16 + i;
	assert_int_equal(kvt_client_load(e.c, &e.ns, (uint32_t)e.mem.region, keys, pages, BLOCKS,
					 &t), 0);
	assert_int_equal(kvt_client_wait(e.c, t, 5000), BLOCKS);

	/* an engine that prefills a billion tokens in a nanosecond */
	assert_int_equal(kvt_client_prefill(e.c, &e.ns, 1000000000u, 1), 0);
	assert_int_equal(kvt_client_lookup_plan(e.c, &e.ns, keys, BLOCKS, NULL, &load), BLOCKS);
	assert_int_equal(load, 0);
	/* the stored count stays what it was for who looks up without a plan */
	assert_int_equal(kvt_client_lookup(e.c, &e.ns, keys, BLOCKS, NULL), BLOCKS);
	/* and one that takes an hour per token: its reports outweigh the first */
	for (int i = 0; i < 4; i++)
		assert_int_equal(kvt_client_prefill(e.c, &e.ns, 1, 3600ull * 1000000000), 0);
	assert_int_equal(kvt_client_lookup_plan(e.c, &e.ns, keys, BLOCKS, NULL, &load), BLOCKS);
	assert_int_equal(load, BLOCKS);
	assert_int_equal(kvt_client_prefill(e.c, &e.ns, 0, 1), -EINVAL);

	assert_int_equal(kvt_client_stats(e.c, &text), 0);
	root = json_loads(text, 0, NULL);
	free(text);
	assert_non_null(root);
	plan = json_object_get(root, "plan");
	dram = json_object_get(json_object_get(plan, "tiers"), "dram");
	assert_true(json_number_value(json_object_get(dram, "bytes_per_s")) > 0);
	assert_true(json_number_value(json_object_get(dram, "samples")) >= 1);
	assert_true(json_number_value(json_object_get(plan, "recompute_blocks")) >= BLOCKS);
	assert_true(json_number_value(json_object_get(plan, "load_blocks")) >= 2 * BLOCKS);
	assert_true(json_number_value(json_object_get(plan, "prefill_reports")) >= 5);
	assert_true(json_number_value(json_object_get(plan, "namespaces_reporting")) >= 1);
	assert_true(json_number_value(json_object_get(json_array_get(
		json_object_get(plan, "engines"), 0), "prefill_tokens_per_s")) > 0);
	json_decref(root);

	prom = kvtd_http(f->port, "GET /metrics HTTP/1.0\r\n\r\n");
	assert_non_null(prom);
	assert_true(kvtd_metric(prom, "kvtier_tier_delivered_bytes_per_second{tier=\"dram\"}") > 0);
	before = kvtd_metric(prom, "kvtier_plan_blocks_total{action=\"recompute\"}");
	assert_true(before >= BLOCKS);
	assert_true(kvtd_metric(prom, "kvtier_prefill_reports_total") >= 5);
	assert_true(kvtd_metric(prom, "kvtier_ops_total{op=\"DONE\",result=\"ok\"}") >= 2);
	free(prom);
	eng_close(&e);
}

/* The plan of a LOOKUP in a tensor-parallel rank's namespace: the group's
 * prefill speed against the group's load, every rank's share of a block. An
 * engine that recomputes a block in twice the time one share loads in loads
 * every block at tp_size 1 and none at tp_size 4, where its four ranks load
 * four shares through this daemon. */
static void the_plan_costs_the_whole_tensor_parallel_group(void **state)
{
	struct fx *f = *state;
	struct eng one, four;
	struct kvt_key keys[BLOCKS];
	uint32_t pages[BLOCKS], load = 99;
	uint64_t t, block_bytes;
	double bw;
	char *text;
	json_t *root;

	kvtd_test_desc(&f->desc, "test/plan-tp");
	eng_open(f, &one, KVT_CLIENT_PUSHED);
	f->desc.tp_rank = 0;
	f->desc.tp_size = 4;
	eng_open(f, &four, KVT_CLIENT_PUSHED);
	f->desc.tp_size = 1;
	block_bytes = 2ull * f->desc.layers * one.mem.page_bytes;
	make_keys(f, &one, 5, keys, BLOCKS);
	for (uint32_t i = 0; i < BLOCKS; i++)
		pages[i] = i;
	assert_int_equal(kvt_client_save(one.c, &one.ns, (uint32_t)one.mem.region, NULL, keys,
					 pages, BLOCKS, &t), 0);
	assert_int_equal(kvt_client_wait(one.c, t, 5000), BLOCKS);
	assert_int_equal(kvt_client_save(four.c, &four.ns, (uint32_t)four.mem.region, NULL, keys,
					 pages, BLOCKS, &t), 0);
	assert_int_equal(kvt_client_wait(four.c, t, 5000), BLOCKS);
	/* a LOAD measures the DRAM tier; the plan takes the rate STATS shows */
	for (uint32_t i = 0; i < BLOCKS; i++)
		pages[i] = 16 + i;
	assert_int_equal(kvt_client_load(one.c, &one.ns, (uint32_t)one.mem.region, keys, pages,
					 BLOCKS, &t), 0);
	assert_int_equal(kvt_client_wait(one.c, t, 5000), BLOCKS);
	assert_int_equal(kvt_client_stats(one.c, &text), 0);
	root = json_loads(text, 0, NULL);
	free(text);
	assert_non_null(root);
	bw = json_number_value(json_object_get(json_object_get(json_object_get(
		json_object_get(root, "plan"), "tiers"), "dram"), "bytes_per_s"));
	json_decref(root);
	assert_true(bw > 0);

	/* 1,000 blocks' tokens in 2,000 times one share's load time */
	for (int e = 0; e < 2; e++) {
		struct eng *x = e ? &four : &one;

		assert_int_equal(kvt_client_prefill(x->c, &x->ns, 1000 * f->desc.block_tokens,
						    (uint64_t)(2000 * block_bytes / bw * 1e9)), 0);
	}
	assert_int_equal(kvt_client_lookup_plan(one.c, &one.ns, keys, BLOCKS, NULL, &load),
			 BLOCKS);
	assert_int_equal(load, BLOCKS);
	assert_int_equal(kvt_client_lookup_plan(four.c, &four.ns, keys, BLOCKS, NULL, &load),
			 BLOCKS);
	assert_int_equal(load, 0);
	eng_close(&four);
	eng_close(&one);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(completions_are_pushed_without_a_wait),
		cmocka_unit_test(wait_round_trips_stay_for_who_asks),
		cmocka_unit_test(a_pushed_ticket_can_be_polled),
		cmocka_unit_test(a_version_1_client_is_served_as_before),
		cmocka_unit_test(the_plan_follows_the_engine_and_the_tiers),
		cmocka_unit_test(the_plan_costs_the_whole_tensor_parallel_group),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
