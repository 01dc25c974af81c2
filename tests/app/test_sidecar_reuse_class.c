/* SPDX-License-Identifier: Apache-2.0 */
/* The reuse class of SAVE, through a real kvtierd running class-lru over
 * its socket: blocks an engine saves with a class it never asks for again
 * are evicted first once the daemon has learnt it, while blocks of a class
 * it looks up again keep their LRU place; the same saves without a class
 * (kvt_client_save, the frames of an older client) are evicted in LRU
 * order. Protocol versions: HELLO agrees on 3, a client of version 2 has
 * its SAVEs served as before and a class in its flags refused. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon_proc.h"
#include "helpers.h"
#include "raw_frames.h"
#include "transport/proto.h"

#define BLOCK_TOKENS 16
#define SLOTS 64  /* kvtd_test_desc_128k: 64 blocks fill the 8 MiB DRAM tier */
#define TRAIN 100 /* blocks of each class before the scene */
#define PAGES 64
enum { WARM = 3, COLD = 9 };

static uint64_t seed;

struct engine {
	struct kvt_client *c;
	struct kvt_client_ns ns;
	struct kvt_ns_desc desc;
	struct engine_mem m;
	uint64_t s;
};

static void engine_open(struct engine *e, const struct kvtd_proc *d)
{
	e->c = kvtd_connect(d, NULL);
	assert_non_null(e->c);
	kvtd_test_desc_128k(&e->desc, "test/reuse-class");
	assert_int_equal(kvt_client_hello(e->c, &e->desc, &e->ns), 0);
	assert_true(kvt_client_version(e->c) >= 3); /* the class is version 3's */
	assert_int_equal(engine_mem_open(&e->m, e->c, &e->ns, &e->desc, PAGES), 0);
	e->s = seed | 1;
}

static void engine_close(struct engine *e)
{
	engine_mem_close(&e->m);
	kvt_client_close(e->c);
}

/* The keys of a new sequence of n blocks of random tokens. */
static void new_keys(struct engine *e, struct kvt_key *keys, int n)
{
	uint32_t tokens[SLOTS * BLOCK_TOKENS];

	for (int t = 0; t < n * BLOCK_TOKENS; t++)
		tokens[t] = (uint32_t)kvt_test_rand(&e->s);
	assert_int_equal(kvt_client_prefix_keys(&e->ns, NULL, tokens, (size_t)n * BLOCK_TOKENS,
						keys, (size_t)n), n);
}

/* SAVE keys[0..n) under parent with class cls, by kvt_client_save when
 * cls is 0 and `hinted` is false. */
static void save(struct engine *e, const struct kvt_key *parent, const struct kvt_key *keys,
		 uint32_t n, unsigned cls, bool hinted)
{
	uint32_t pages[PAGES];
	uint64_t ticket;

	for (uint32_t i = 0; i < n; i++)
		pages[i] = i;
	if (hinted)
		assert_int_equal(kvt_client_save_class(e->c, &e->ns, (uint32_t)e->m.region, parent,
						       keys, pages, n, cls, &ticket), 0);
	else
		assert_int_equal(kvt_client_save(e->c, &e->ns, (uint32_t)e->m.region, parent, keys,
						 pages, n, &ticket), 0);
	assert_int_equal(kvt_client_wait(e->c, ticket, 60000), (int)n);
}

static bool present(struct engine *e, const struct kvt_key *key)
{
	uint8_t t;

	return kvt_client_lookup(e->c, &e->ns, key, 1, &t) == 1;
}

/* Through a fresh kvtierd --policy class-lru: blocks of class WARM looked
 * up again, of class COLD never (TRAIN each); a chain of SLOTS blocks,
 * looked up, fills DRAM; then three fresh blocks: y (WARM), x (COLD), z
 * (WARM). Whether x made room for z (its class is cold) or the chain's
 * tail did (LRU order). With hinted false, every SAVE goes without a
 * class. */
static bool cold_block_went_first(bool hinted)
{
	const char *extra[] = { "--dram", "8M", "--policy", "class-lru", NULL };
	struct kvtd_proc d = { 0 };
	struct kvt_key chain[SLOTS], y, x, z, k;
	struct engine e;
	bool went;

	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	engine_open(&e, &d);
	for (int i = 0; i < TRAIN; i++) {
		new_keys(&e, &k, 1);
		save(&e, NULL, &k, 1, hinted ? WARM : 0, hinted);
		assert_true(present(&e, &k));
		new_keys(&e, &k, 1);
		save(&e, NULL, &k, 1, hinted ? COLD : 0, hinted);
	}
	new_keys(&e, chain, SLOTS);
	for (uint32_t j = 0; j < SLOTS; j += 16)
		save(&e, j ? &chain[j - 1] : NULL, &chain[j], 16, hinted ? WARM : 0, hinted);
	assert_int_equal(kvt_client_lookup(e.c, &e.ns, chain, SLOTS, NULL), SLOTS);
	new_keys(&e, &y, 1);
	new_keys(&e, &x, 1);
	new_keys(&e, &z, 1);
	save(&e, NULL, &y, 1, hinted ? WARM : 0, hinted);
	save(&e, NULL, &x, 1, hinted ? COLD : 0, hinted);
	save(&e, NULL, &z, 1, hinted ? WARM : 0, hinted);
	went = !present(&e, &x);
	assert_true(present(&e, &y));
	assert_true(present(&e, &z));
	assert_int_equal(present(&e, &chain[SLOTS - 3]), went);
	engine_close(&e);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
	return went;
}

static void a_class_saved_and_never_asked_for_goes_first(void **state)
{
	(void)state;
	assert_true(cold_block_went_first(true));
}

static void saves_without_a_class_are_evicted_in_lru_order(void **state)
{
	(void)state;
	assert_false(cold_block_went_first(false));
}

/* A raw connection whose HELLO offers versions 1..max: its namespace. */
static uint32_t raw_hello(int fd, uint16_t max, const struct kvt_ns_desc *desc)
{
	struct kvt_frame_hdr h;
	struct kvt_rep_hello hello;
	struct kvt_wr w;
	uint8_t *p;

	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_hello(&w, 1, "", desc), 0);
	w.buf[KVT_PROTO_HDR_BYTES + 2] = (uint8_t)max; /* max_version */
	raw_send(fd, &w);
	raw_read(fd, &h, &p);
	assert_int_equal(h.status, 0);
	assert_int_equal(kvt_proto_rep_hello(p, h.len, &hello), 0);
	assert_int_equal(hello.version, max);
	free(p);
	kvt_wr_free(&w);
	return hello.ns;
}

/* The status of a one-block SAVE to region 1 (none registered: -EBADF once
 * the flags pass) with flags. */
static int raw_save(int fd, uint32_t ns, uint32_t flags)
{
	struct kvt_key key = { { 7, 7, 7 } };
	struct kvt_frame_hdr h;
	struct kvt_wr w;
	uint32_t page = 0;
	uint8_t *p;

	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_xfer_flags(&w, KVT_OP_SAVE, 9, ns, 1, NULL, &key, &page, 1,
						  flags), 0);
	raw_send(fd, &w);
	raw_read(fd, &h, &p);
	free(p);
	kvt_wr_free(&w);
	return h.status;
}

static void a_version_2_client_saves_as_before_and_cannot_send_a_class(void **state)
{
	struct kvtd_proc d = { 0 };
	struct kvt_ns_desc desc;
	uint32_t cls = (uint32_t)COLD << KVT_SAVE_CLASS_SHIFT, ns;
	int fd;

	(void)state;
	assert_int_equal(kvtd_start(&d, NULL, NULL), 0);
	kvtd_test_desc_128k(&desc, "test/reuse-class");

	fd = kvtd_connect_raw(&d);
	assert_true(fd >= 0);
	ns = raw_hello(fd, 2, &desc);
	assert_int_equal(raw_save(fd, ns, 0), -EBADF);
	assert_int_equal(raw_save(fd, ns, cls), -EINVAL);
	close(fd);

	fd = kvtd_connect_raw(&d);
	assert_true(fd >= 0);
	ns = raw_hello(fd, 3, &desc);
	assert_int_equal(raw_save(fd, ns, cls), -EBADF);
	assert_int_equal(raw_save(fd, ns, 0), -EBADF);
	/* bits past the class are still reserved */
	assert_int_equal(raw_save(fd, ns, 1u << 12), -EBADMSG);
	close(fd);

	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_class_saved_and_never_asked_for_goes_first),
		cmocka_unit_test(saves_without_a_class_are_evicted_in_lru_order),
		cmocka_unit_test(a_version_2_client_saves_as_before_and_cannot_send_a_class),
	};

	seed = kvt_test_seed();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
