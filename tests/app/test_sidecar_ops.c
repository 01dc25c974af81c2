/* SPDX-License-Identifier: Apache-2.0 */
/* The operations end to end against a real kvtierd process: save engine
 * pages, look them up, load them into other pages and compare every byte;
 * per-layer completion, prefix semantics, pin/unpin/remove, stats, ping. */
#include <errno.h>
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
#include "helpers.h"

#define PAGES 64
#define BLOCKS 8

struct fx {
	struct kvtd_proc d;
	struct kvt_client *c;
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;
	struct engine_mem mem;
	uint64_t seed;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (kvtd_start(&f->d, NULL, NULL))
		return -1;
	f->c = kvtd_connect(&f->d, NULL);
	if (!f->c)
		return -1;
	kvtd_test_desc(&f->desc, NULL);
	if (kvt_client_hello(f->c, &f->desc, &f->ns))
		return -1;
	if (engine_mem_open(&f->mem, f->c, &f->ns, &f->desc, PAGES))
		return -1;
	f->seed = kvt_test_seed();
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	if (!f)
		return 0;
	kvt_client_close(f->c);
	engine_mem_close(&f->mem);
	if (kvtd_stop(&f->d, SIGTERM) != 0)
		fprintf(stderr, "kvtierd did not exit cleanly\n");
	kvtd_cleanup(&f->d);
	free(f);
	return 0;
}

/* Keys of a fresh token sequence of n blocks. */
static void make_keys(struct fx *f, uint64_t tag, struct kvt_key *keys, int n)
{
	uint32_t tokens[BLOCKS * 4 * 4];
	uint64_t s = f->seed ^ (tag * 0x9e3779b97f4a7c15ull) ^ 1;

	assert_true(n * f->desc.block_tokens <= sizeof(tokens) / sizeof(tokens[0]));
	for (uint32_t i = 0; i < n * f->desc.block_tokens; i++)
		tokens[i] = (uint32_t)kvt_test_rand(&s);
	assert_int_equal(kvt_client_prefix_keys(&f->ns, NULL, tokens, n * f->desc.block_tokens,
						keys, (size_t)n), n);
}

static int run(struct fx *f, bool save, const struct kvt_key *parent, const struct kvt_key *keys,
	       const uint32_t *pages, uint32_t n)
{
	uint64_t ticket;
	int err = save ? kvt_client_save(f->c, &f->ns, (uint32_t)f->mem.region, parent, keys,
					 pages, n, &ticket)
		       : kvt_client_load(f->c, &f->ns, (uint32_t)f->mem.region, keys, pages, n,
					 &ticket);
	if (err)
		return err;
	return kvt_client_wait(f->c, ticket, -1);
}

static void save_lookup_load_every_byte(void **state)
{
	struct fx *f = *state;
	struct kvt_key keys[BLOCKS + 1];
	uint32_t src[BLOCKS], dst[BLOCKS];
	uint8_t tiers[BLOCKS + 1];

	make_keys(f, 1, keys, BLOCKS + 1);
	assert_int_equal(kvt_client_lookup(f->c, &f->ns, keys, BLOCKS, tiers), 0);
	for (uint32_t i = 0; i < BLOCKS; i++) {
		src[i] = i;
		dst[i] = 32 + (BLOCKS - 1 - i); /* other pages, in another order */
		engine_page_fill(&f->mem, src[i], f->seed + i);
		memset(engine_page(&f->mem, dst[i], 0, 0), 0, f->mem.page_bytes);
	}
	assert_int_equal(run(f, true, NULL, keys, src, BLOCKS), BLOCKS);
	/* saving again stores nothing new but reports the whole prefix present */
	assert_int_equal(run(f, true, NULL, keys, src, BLOCKS), BLOCKS);

	memset(tiers, 0xee, sizeof(tiers));
	assert_int_equal(kvt_client_lookup(f->c, &f->ns, keys, BLOCKS + 1, tiers), BLOCKS);
	for (int i = 0; i < BLOCKS; i++)
		assert_int_equal(tiers[i], KVT_TIER_DRAM);
	assert_int_equal(tiers[BLOCKS], KVT_TIER_NONE);

	/* the engine drops its copy; kvtier's comes back into other pages */
	for (uint32_t i = 0; i < BLOCKS; i++)
		engine_page_fill(&f->mem, src[i], 0xdead);
	assert_int_equal(run(f, false, NULL, keys, dst, BLOCKS), BLOCKS);
	for (uint32_t i = 0; i < BLOCKS; i++)
		if (engine_page_check(&f->mem, dst[i], f->seed + i))
			fail_msg("block %u came back with wrong bytes", i);
}

static void load_completes_layer_by_layer(void **state)
{
	struct fx *f = *state;
	struct kvt_key keys[BLOCKS];
	uint32_t pages[BLOCKS];
	uint64_t ticket;
	uint32_t layers = 0;
	int result = -1;

	make_keys(f, 2, keys, BLOCKS);
	for (uint32_t i = 0; i < BLOCKS; i++) {
		pages[i] = i;
		engine_page_fill(&f->mem, i, f->seed * 3 + i);
	}
	assert_int_equal(run(f, true, NULL, keys, pages, BLOCKS), BLOCKS);
	for (uint32_t i = 0; i < BLOCKS; i++)
		pages[i] = 16 + i;
	assert_int_equal(kvt_client_load(f->c, &f->ns, (uint32_t)f->mem.region, keys, pages,
					 BLOCKS, &ticket), 0);
	for (uint32_t l = 0; l < f->desc.layers; l++) {
		assert_int_equal(kvt_client_wait_layer(f->c, ticket, l, -1), 0);
		/* layer l of every block is in place once its wait returns */
		for (uint32_t i = 0; i < BLOCKS; i++) {
			uint8_t *want = malloc(f->mem.page_bytes);
			kvt_test_fill(want, f->mem.page_bytes, (f->seed * 3 + i) * 1000003 + l * 2 + 1);
			assert_memory_equal(engine_page(&f->mem, 16 + i, l, 0), want, f->mem.page_bytes);
			free(want);
		}
	}
	/* the last layer in place, the ticket completes right after */
	for (int i = 0; i < 10000; i++) {
		int done = kvt_client_poll(f->c, ticket, &result, &layers);

		assert_true(done >= 0);
		if (done)
			break;
		usleep(100);
	}
	assert_int_equal(result, BLOCKS);
	assert_int_equal(layers, f->desc.layers);
	/* a result is taken once */
	assert_int_equal(kvt_client_wait(f->c, ticket, 0), -ENOENT);
	assert_int_equal(kvt_client_poll(f->c, ticket, &result, NULL), -ENOENT);
}

static void load_stops_at_the_first_missing_block(void **state)
{
	struct fx *f = *state;
	struct kvt_key keys[BLOCKS];
	uint32_t pages[BLOCKS];

	make_keys(f, 3, keys, BLOCKS);
	for (uint32_t i = 0; i < BLOCKS; i++) {
		pages[i] = i;
		engine_page_fill(&f->mem, i, f->seed * 5 + i);
	}
	assert_int_equal(run(f, true, NULL, keys, pages, BLOCKS), BLOCKS);
	assert_int_equal(kvt_client_remove(f->c, &f->ns, &keys[3], 1), 1);
	assert_int_equal(kvt_client_remove(f->c, &f->ns, &keys[3], 1), 0);
	assert_int_equal(kvt_client_lookup(f->c, &f->ns, keys, BLOCKS, NULL), 3);
	for (uint32_t i = 0; i < BLOCKS; i++)
		pages[i] = 40 + i;
	assert_int_equal(run(f, false, NULL, keys, pages, BLOCKS), 3);
	for (uint32_t i = 0; i < 3; i++)
		assert_int_equal(engine_page_check(&f->mem, 40 + i, f->seed * 5 + i), 0);
}

static void save_continues_a_parent_chain(void **state)
{
	struct fx *f = *state;
	struct kvt_key keys[BLOCKS];
	uint32_t pages[BLOCKS];

	make_keys(f, 4, keys, BLOCKS);
	for (uint32_t i = 0; i < BLOCKS; i++) {
		pages[i] = i;
		engine_page_fill(&f->mem, i, f->seed * 7 + i);
	}
	assert_int_equal(run(f, true, NULL, keys, pages, 4), 4);
	assert_int_equal(run(f, true, &keys[3], keys + 4, pages + 4, 4), 4);
	assert_int_equal(kvt_client_lookup(f->c, &f->ns, keys, BLOCKS, NULL), BLOCKS);
	assert_int_equal(kvt_client_pin(f->c, &f->ns, keys, BLOCKS), BLOCKS);
	assert_int_equal(kvt_client_unpin(f->c, &f->ns, keys, BLOCKS), BLOCKS);
}

static void bad_requests_get_clear_errors(void **state)
{
	struct fx *f = *state;
	struct kvt_key keys[2];
	uint32_t pages[2] = { 0, PAGES };
	struct kvt_client_ns bogus = f->ns;
	uint64_t ticket;

	make_keys(f, 5, keys, 2);
	assert_int_equal(kvt_client_save(f->c, &f->ns, (uint32_t)f->mem.region, NULL, keys, pages,
					 2, &ticket), -ERANGE);
	pages[1] = 1;
	assert_int_equal(kvt_client_save(f->c, &f->ns, 99, NULL, keys, pages, 2, &ticket), -EBADF);
	bogus.handle = 12;
	assert_int_equal(kvt_client_lookup(f->c, &bogus, keys, 2, NULL), -EBADF);
	assert_int_equal(kvt_client_wait(f->c, 123456789, 0), -ENOENT);
	/* the connection is still good */
	assert_int_equal(kvt_client_ping(f->c, "x", 1), 0);
}

/* A client built against older, smaller structs (each cut where a later
 * field begins) still connects, says HELLO, registers memory and moves
 * blocks; a newer, larger one is refused before anything is sent. */
static void an_older_clients_structs_still_work(void **state)
{
	struct fx *f = *state;
	struct kvt_client_opts o;
	struct kvt_ns_desc d;
	struct kvt_client_region r = { .size = offsetof(struct kvt_client_region, cuda_ipc),
				       .memfd = f->mem.fd, .bytes = f->mem.bytes,
				       .layers = f->mem.layers, .pages = f->mem.pages,
				       .layer_stride = f->mem.layer_stride,
				       .kv_stride = f->mem.kv_stride,
				       .page_stride = f->mem.page_stride };
	struct kvt_client_ns ns;
	struct kvt_client *c;
	struct kvt_key key;
	uint32_t page = 40, back = 41;
	uint64_t ticket;
	int region;

	kvt_client_opts_init(&o, offsetof(struct kvt_client_opts, token)); /* token: "" */
	o.socket_path = f->d.socket;
	assert_int_equal(kvt_client_connect(&o, &c), 0);
	kvtd_test_desc(&d, NULL);
	d.size = offsetof(struct kvt_ns_desc, tenant_salt);
	assert_int_equal(kvt_client_hello(c, &d, &ns), 0);
	assert_memory_equal(&ns.salt, &f->ns.salt, sizeof(ns.salt)); /* the same namespace */
	region = kvt_client_register(c, &ns, &r);
	assert_true(region > 0);

	make_keys(f, 6, &key, 1);
	engine_page_fill(&f->mem, page, f->seed * 11);
	assert_int_equal(kvt_client_save(c, &ns, (uint32_t)region, NULL, &key, &page, 1, &ticket), 0);
	assert_int_equal(kvt_client_wait(c, ticket, -1), 1);
	assert_int_equal(kvt_client_load(c, &ns, (uint32_t)region, &key, &back, 1, &ticket), 0);
	assert_int_equal(kvt_client_wait(c, ticket, -1), 1);
	assert_int_equal(engine_page_check(&f->mem, back, f->seed * 11), 0);

	r.size = sizeof(r) + 8;
	assert_int_equal(kvt_client_register(c, &ns, &r), -EINVAL);
	d.size = sizeof(d) + 8;
	assert_int_equal(kvt_client_hello(c, &d, &ns), -EINVAL);
	kvt_client_close(c);
	o.size = sizeof(o) + 8;
	assert_int_equal(kvt_client_connect(&o, &c), -EINVAL);
}

static void stats_and_ping(void **state)
{
	struct fx *f = *state;
	char *text = NULL;
	json_t *root, *dram, *save;
	json_error_t jerr;

	assert_int_equal(kvt_client_ping(f->c, "hello kvtier", 12), 0);
	assert_int_equal(kvt_client_stats(f->c, &text), 0);
	root = json_loads(text, 0, &jerr);
	if (!root)
		fail_msg("stats is not JSON: %s", jerr.text);
	dram = json_object_get(json_object_get(root, "tiers"), "dram");
	assert_non_null(dram);
	assert_true(json_integer_value(json_object_get(dram, "capacity_bytes")) == 64 << 20);
	assert_true(json_integer_value(json_object_get(dram, "blocks")) > 0);
	save = json_object_get(json_object_get(root, "ops"), "SAVE");
	assert_true(json_integer_value(json_object_get(save, "count")) > 0);
	assert_true(json_integer_value(json_object_get(json_object_get(root, "copies"),
						       "gather_bytes")) > 0);
	json_decref(root);
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(save_lookup_load_every_byte),
		cmocka_unit_test(load_completes_layer_by_layer),
		cmocka_unit_test(load_stops_at_the_first_missing_block),
		cmocka_unit_test(save_continues_a_parent_chain),
		cmocka_unit_test(bad_requests_get_clear_errors),
		cmocka_unit_test(an_older_clients_structs_still_work),
		cmocka_unit_test(stats_and_ping),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
