/* SPDX-License-Identifier: Apache-2.0 */
/* 16 clients at once against a real kvtierd, each on its own connection,
 * plus 4 threads sharing one connection (their replies interleave out of
 * order): thousands of SAVE / LOOKUP / LOAD operations over prefixes that the
 * clients share, every loaded byte compared with what its key must hold.
 *
 * A block's bytes derive from its key, so whichever client saved it first,
 * every client knows what a LOAD must bring back. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "daemon_proc.h"
#include "helpers.h"

#define CLIENTS 16
#define SHARED_THREADS 4
#define OPS 1000
#define SEQS 48        /* token sequences the clients draw from */
#define SEQ_BLOCKS 6
#define PAGES 32

static struct kvtd_proc d;
static uint64_t seed;
static struct kvt_ns_desc desc;

struct worker {
	pthread_t thread;
	struct kvt_client *c;     /* own or shared */
	struct kvt_client_ns ns;
	struct engine_mem *mem;
	uint32_t page_base;       /* pages [page_base, page_base + 2*SEQ_BLOCKS) */
	uint64_t rng;
	int ops, saves, loads, lookups, blocks_checked;
	char error[256];
};

static uint64_t key_seed(const struct kvt_key *k)
{
	uint64_t v;

	memcpy(&v, k->bytes, sizeof(v));
	return v | 1;
}

static void seq_tokens(int seq, uint32_t *tokens, size_t n)
{
	uint64_t s = (seed ^ (uint64_t)(seq + 1) * 0x9e3779b97f4a7c15ull) | 1;

	for (size_t i = 0; i < n; i++)
		tokens[i] = (uint32_t)kvt_test_rand(&s);
}

#define CHECK(w, cond, ...) do { if (!(cond)) { snprintf((w)->error, sizeof((w)->error), __VA_ARGS__); return NULL; } } while (0)

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint32_t tokens[SEQ_BLOCKS * 4], pages[SEQ_BLOCKS];
	struct kvt_key keys[SEQ_BLOCKS];
	uint8_t tiers[SEQ_BLOCKS];

	for (w->ops = 0; w->ops < OPS; w->ops++) {
		int seq = (int)(kvt_test_rand(&w->rng) % SEQS);
		uint32_t n = 1 + (uint32_t)(kvt_test_rand(&w->rng) % SEQ_BLOCKS);
		int action = (int)(kvt_test_rand(&w->rng) % 3), got, hit;
		uint64_t ticket;

		seq_tokens(seq, tokens, SEQ_BLOCKS * 4);
		CHECK(w, kvt_client_prefix_keys(&w->ns, NULL, tokens, n * desc.block_tokens, keys,
						n) == (int)n, "prefix keys");
		if (action == 0) {
			for (uint32_t i = 0; i < n; i++) {
				pages[i] = w->page_base + i;
				engine_page_fill(w->mem, pages[i], key_seed(&keys[i]));
			}
			CHECK(w, kvt_client_save(w->c, &w->ns, (uint32_t)w->mem->region, NULL, keys,
						 pages, n, &ticket) == 0, "save");
			got = kvt_client_wait(w->c, ticket, -1);
			CHECK(w, got == (int)n, "save of %u blocks stored %d", n, got);
			w->saves++;
		} else if (action == 1) {
			hit = kvt_client_lookup(w->c, &w->ns, keys, n, tiers);
			CHECK(w, hit >= 0 && hit <= (int)n, "lookup returned %d", hit);
			for (int i = 0; i < hit; i++)
				CHECK(w, tiers[i] == KVT_TIER_DRAM, "tier %u of a hit", tiers[i]);
			w->lookups++;
		} else {
			for (uint32_t i = 0; i < n; i++) {
				pages[i] = w->page_base + SEQ_BLOCKS + (n - 1 - i);
				memset(engine_page(w->mem, pages[i], 0, 0), 0, w->mem->page_bytes);
			}
			CHECK(w, kvt_client_load(w->c, &w->ns, (uint32_t)w->mem->region, keys, pages,
						 n, &ticket) == 0, "load");
			got = kvt_client_wait(w->c, ticket, -1);
			CHECK(w, got >= 0 && got <= (int)n, "load returned %d", got);
			for (int i = 0; i < got; i++) {
				CHECK(w, engine_page_check(w->mem, pages[i], key_seed(&keys[i])) == 0,
				      "seq %d block %d loaded wrong bytes", seq, i);
				w->blocks_checked++;
			}
			w->loads++;
		}
	}
	return NULL;
}

static int setup(void **state)
{
	const char *extra[] = { "--workers", "4", NULL };

	seed = kvt_test_seed();
	kvtd_test_desc(&desc, "test/concurrent");
	return kvtd_start(&d, NULL, extra) ? -1 : 0;
}

static int teardown(void **state)
{
	int status = kvtd_stop(&d, SIGTERM);

	kvtd_cleanup(&d);
	return status == 0 ? 0 : -1;
}

static void sixteen_clients_every_byte_verified(void **state)
{
	struct worker w[CLIENTS + SHARED_THREADS];
	struct engine_mem mem[CLIENTS + 1];
	struct kvt_client *shared;
	struct kvt_client_ns shared_ns;
	int checked = 0, loads = 0;

	memset(w, 0, sizeof(w));
	for (int i = 0; i < CLIENTS; i++) {
		w[i].c = kvtd_connect(&d, NULL);
		assert_non_null(w[i].c);
		assert_int_equal(kvt_client_hello(w[i].c, &desc, &w[i].ns), 0);
		assert_int_equal(engine_mem_open(&mem[i], w[i].c, &w[i].ns, &desc, PAGES), 0);
		w[i].mem = &mem[i];
		w[i].page_base = 0;
		w[i].rng = seed * 31 + (uint64_t)i + 1;
	}
	/* the shared connection: one region, a page range per thread */
	shared = kvtd_connect(&d, NULL);
	assert_non_null(shared);
	assert_int_equal(kvt_client_hello(shared, &desc, &shared_ns), 0);
	assert_int_equal(engine_mem_open(&mem[CLIENTS], shared, &shared_ns, &desc,
					 SHARED_THREADS * 2 * SEQ_BLOCKS), 0);
	for (int i = CLIENTS; i < CLIENTS + SHARED_THREADS; i++) {
		w[i].c = shared;
		w[i].ns = shared_ns;
		w[i].mem = &mem[CLIENTS];
		w[i].page_base = (uint32_t)(i - CLIENTS) * 2 * SEQ_BLOCKS;
		w[i].rng = seed * 37 + (uint64_t)i + 1;
	}
	for (int i = 0; i < CLIENTS + SHARED_THREADS; i++)
		assert_int_equal(pthread_create(&w[i].thread, NULL, worker_main, &w[i]), 0);
	for (int i = 0; i < CLIENTS + SHARED_THREADS; i++)
		pthread_join(w[i].thread, NULL);
	for (int i = 0; i < CLIENTS + SHARED_THREADS; i++) {
		if (w[i].error[0])
			fail_msg("client %d after %d ops: %s", i, w[i].ops, w[i].error);
		checked += w[i].blocks_checked;
		loads += w[i].loads;
	}
	fprintf(stderr, "%d clients + %d threads on one connection: %d ops, %d loads, "
		"%d blocks compared byte for byte\n", CLIENTS, SHARED_THREADS,
		(CLIENTS + SHARED_THREADS) * OPS, loads, checked);
	/* with 48 shared sequences, loads must have found blocks */
	assert_true(checked > 0);
	for (int i = 0; i < CLIENTS; i++) {
		engine_mem_close(&mem[i]);
		kvt_client_close(w[i].c);
	}
	engine_mem_close(&mem[CLIENTS]);
	kvt_client_close(shared);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sixteen_clients_every_byte_verified),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
