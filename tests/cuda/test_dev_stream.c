/* SPDX-License-Identifier: Apache-2.0 */
/* Streams and events keep CUDA's semantics on every backend: work queued on
 * a stream runs in order and after the call returns; its completion shows
 * only through events, stream sync and callbacks; a stream waiting on another
 * stream's event does not start before it; per-layer completions of a scatter
 * come in layer order. A callback that blocks on a gate holds a stream still,
 * so "not yet done" is checked deterministically, never by timing. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/cuda/dev_test.h"

struct gate {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool open;
	bool reached;
};

static void gate_init(struct gate *g)
{
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->cond, NULL);
	g->open = g->reached = false;
}

static void gate_cb(void *arg, int status)
{
	struct gate *g = arg;

	pthread_mutex_lock(&g->lock);
	g->reached = true;
	pthread_cond_broadcast(&g->cond);
	while (!g->open)
		pthread_cond_wait(&g->cond, &g->lock);
	pthread_mutex_unlock(&g->lock);
}

static void gate_open(struct gate *g)
{
	pthread_mutex_lock(&g->lock);
	g->open = true;
	pthread_cond_broadcast(&g->cond);
	pthread_mutex_unlock(&g->lock);
}

static void gate_destroy(struct gate *g)
{
	pthread_cond_destroy(&g->cond);
	pthread_mutex_destroy(&g->lock);
}

#define LEN 65536

struct fixture {
	struct kvt_dev *dev;
	struct kvt_dev_stream *a, *b;
	uint8_t *src, *dst;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	f->dev = dev_test_open();
	assert_int_equal(kvt_dev_stream_create(f->dev, false, &f->a), 0);
	assert_int_equal(kvt_dev_stream_create(f->dev, true, &f->b), 0);
	assert_int_equal(kvt_dev_host_alloc(f->dev, LEN, KVT_DEV_HOST_MAPPED, (void **)&f->src), 0);
	assert_int_equal(kvt_dev_host_alloc(f->dev, LEN, KVT_DEV_HOST_MAPPED, (void **)&f->dst), 0);
	kvt_test_fill(f->src, LEN, 42);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	kvt_dev_stream_destroy(f->a);
	kvt_dev_stream_destroy(f->b);
	kvt_dev_host_free(f->dev, f->src);
	kvt_dev_host_free(f->dev, f->dst);
	kvt_dev_close(f->dev);
	free(f);
	return 0;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

static void unrecorded_event_is_complete(void **state)
{
	struct fixture *f = *state;
	struct kvt_dev_event *ev;

	assert_int_equal(kvt_dev_event_create(f->dev, &ev), 0);
	assert_int_equal(kvt_dev_event_query(ev), 0);
	assert_int_equal(kvt_dev_event_wait(ev), 0);
	kvt_dev_event_destroy(ev);
}

static void work_behind_a_held_stream_stays_pending(void **state)
{
	struct fixture *f = *state;
	struct kvt_dev_event *ev;
	struct gate g;

	gate_init(&g);
	assert_int_equal(kvt_dev_event_create(f->dev, &ev), 0);
	assert_int_equal(kvt_dev_stream_callback(f->a, gate_cb, &g), 0);
	assert_int_equal(kvt_dev_copy_async(f->a, f->dst, f->src, LEN), 0);
	assert_int_equal(kvt_dev_event_record(ev, f->a), 0);

	assert_int_equal(kvt_dev_event_query(ev), -EAGAIN);
	assert_true(all_zero(f->dst, LEN));
	gate_open(&g);
	assert_int_equal(kvt_dev_event_wait(ev), 0);
	assert_int_equal(kvt_dev_event_query(ev), 0);
	assert_memory_equal(f->dst, f->src, LEN);

	kvt_dev_event_destroy(ev);
	gate_destroy(&g);
}

static void stream_waits_for_another_streams_event(void **state)
{
	struct fixture *f = *state;
	struct kvt_dev_event *ea, *eb;
	struct gate g;

	gate_init(&g);
	assert_int_equal(kvt_dev_event_create(f->dev, &ea), 0);
	assert_int_equal(kvt_dev_event_create(f->dev, &eb), 0);
	assert_int_equal(kvt_dev_stream_callback(f->a, gate_cb, &g), 0);
	assert_int_equal(kvt_dev_event_record(ea, f->a), 0);
	assert_int_equal(kvt_dev_stream_wait_event(f->b, ea), 0);
	assert_int_equal(kvt_dev_copy_async(f->b, f->dst, f->src, LEN), 0);
	assert_int_equal(kvt_dev_event_record(eb, f->b), 0);

	assert_int_equal(kvt_dev_event_query(eb), -EAGAIN);
	assert_true(all_zero(f->dst, LEN));
	gate_open(&g);
	assert_int_equal(kvt_dev_event_wait(eb), 0);
	assert_int_equal(kvt_dev_event_query(ea), 0);
	assert_memory_equal(f->dst, f->src, LEN);

	kvt_dev_event_destroy(ea);
	kvt_dev_event_destroy(eb);
	gate_destroy(&g);
}

static void copies_on_one_stream_run_in_order(void **state)
{
	struct fixture *f = *state;
	struct kvt_dev_mem *m1, *m2;

	/* each copy reads what the one before it wrote */
	assert_int_equal(kvt_dev_mem_alloc(f->dev, LEN, &m1), 0);
	assert_int_equal(kvt_dev_mem_alloc(f->dev, LEN, &m2), 0);
	for (int round = 0; round < 8; round++) {
		kvt_test_fill(f->src, LEN, 100 + (uint64_t)round);
		assert_int_equal(kvt_dev_copy_async(f->a, kvt_dev_mem_ptr(m1), f->src, LEN), 0);
		assert_int_equal(kvt_dev_copy_async(f->a, kvt_dev_mem_ptr(m2), kvt_dev_mem_ptr(m1),
						    LEN), 0);
		assert_int_equal(kvt_dev_copy_async(f->a, f->dst, kvt_dev_mem_ptr(m2), LEN), 0);
		assert_int_equal(kvt_dev_stream_sync(f->a), 0);
		assert_memory_equal(f->dst, f->src, LEN);
	}
	kvt_dev_mem_free(m1);
	kvt_dev_mem_free(m2);
}

static void rerecording_moves_the_event(void **state)
{
	struct fixture *f = *state;
	struct kvt_dev_event *ev;
	struct gate g;

	gate_init(&g);
	assert_int_equal(kvt_dev_event_create(f->dev, &ev), 0);
	assert_int_equal(kvt_dev_event_record(ev, f->a), 0);
	assert_int_equal(kvt_dev_event_wait(ev), 0);
	assert_int_equal(kvt_dev_stream_callback(f->a, gate_cb, &g), 0);
	assert_int_equal(kvt_dev_event_record(ev, f->a), 0);
	assert_int_equal(kvt_dev_event_query(ev), -EAGAIN);
	gate_open(&g);
	assert_int_equal(kvt_dev_event_wait(ev), 0);
	kvt_dev_event_destroy(ev);
	gate_destroy(&g);
}

struct order {
	pthread_mutex_t lock;
	uint32_t seen[64];
	uint32_t n;
};

static void note_layer(void *arg, uint32_t layer)
{
	struct order *o = arg;

	pthread_mutex_lock(&o->lock);
	if (o->n < 64)
		o->seen[o->n] = layer;
	o->n++;
	pthread_mutex_unlock(&o->lock);
}

static void layer_completions_come_in_layer_order(void **state)
{
	enum { LAYERS = 12, PAGES = 8 };
	struct fixture *f = *state;
	struct kvt_dev_layout_desc d;
	struct kvt_dev_layout *lay;
	struct kvt_dev_xfer_opts xo;
	struct kvt_dev_event *ev[LAYERS];
	struct kvt_dev_mem *t[LAYERS];
	void *base[LAYERS], *blk;
	struct order o = { .n = 0 };
	uint32_t pages[2] = { 5, 1 };
	void *blocks[2];
	struct gate g;

	pthread_mutex_init(&o.lock, NULL);
	gate_init(&g);
	for (int l = 0; l < LAYERS; l++) {
		assert_int_equal(kvt_dev_mem_alloc(f->dev, 2 * PAGES * 1024, &t[l]), 0);
		base[l] = kvt_dev_mem_ptr(t[l]);
		assert_int_equal(kvt_dev_event_create(f->dev, &ev[l]), 0);
	}
	kvt_dev_layout_desc_init(&d, sizeof(d));
	d.kind = KVT_LAYOUT_PAGED_KV;
	d.layers = LAYERS;
	d.kv_heads = 2;
	d.head_dim = 64;
	d.elem_bytes = 2;
	d.page_tokens = 4;
	d.num_pages = PAGES;
	d.k_base = base;
	assert_int_equal(kvt_dev_layout_create(f->dev, &d, &lay), 0);
	assert_int_equal(kvt_dev_host_alloc(f->dev, 2 * kvt_dev_layout_bytes(lay),
					    KVT_DEV_HOST_MAPPED, &blk), 0);
	blocks[0] = blk;
	blocks[1] = (char *)blk + kvt_dev_layout_bytes(lay);

	kvt_dev_xfer_opts_init(&xo, sizeof(xo));
	xo.layer_events = ev;
	xo.layer_cb = note_layer;
	xo.layer_cb_arg = &o;
	assert_int_equal(kvt_dev_stream_callback(f->b, gate_cb, &g), 0);
	assert_int_equal(kvt_dev_scatter(lay, f->b, pages, 2, (const void *const *)blocks, &xo), 0);
	for (int l = 0; l < LAYERS; l++)
		assert_int_equal(kvt_dev_event_query(ev[l]), -EAGAIN);
	gate_open(&g);
	for (int l = 0; l < LAYERS; l++)
		assert_int_equal(kvt_dev_event_wait(ev[l]), 0);
	assert_int_equal(kvt_dev_stream_sync(f->b), 0);
	assert_int_equal(o.n, LAYERS);
	for (uint32_t l = 0; l < LAYERS; l++)
		assert_int_equal(o.seen[l], l);

	kvt_dev_host_free(f->dev, blk);
	kvt_dev_layout_destroy(lay);
	for (int l = 0; l < LAYERS; l++) {
		kvt_dev_event_destroy(ev[l]);
		kvt_dev_mem_free(t[l]);
	}
	gate_destroy(&g);
	pthread_mutex_destroy(&o.lock);
}

struct seen_copy {
	const uint8_t *dst, *src;
	bool equal;
	int calls;
};

static void check_copy(void *arg, int status)
{
	struct seen_copy *s = arg;

	s->equal = status == 0 && memcmp(s->dst, s->src, LEN) == 0;
	s->calls++;
}

static void callback_runs_after_the_work_before_it(void **state)
{
	struct fixture *f = *state;
	struct seen_copy s = { f->dst, f->src, false, 0 };

	assert_int_equal(kvt_dev_copy_async(f->a, f->dst, f->src, LEN), 0);
	assert_int_equal(kvt_dev_stream_callback(f->a, check_copy, &s), 0);
	assert_int_equal(kvt_dev_stream_sync(f->a), 0);
	assert_int_equal(s.calls, 1);
	assert_true(s.equal);
}

static void destroying_a_pending_event_is_safe(void **state)
{
	struct fixture *f = *state;
	struct kvt_dev_event *ev;
	struct gate g;

	gate_init(&g);
	assert_int_equal(kvt_dev_event_create(f->dev, &ev), 0);
	assert_int_equal(kvt_dev_stream_callback(f->a, gate_cb, &g), 0);
	assert_int_equal(kvt_dev_event_record(ev, f->a), 0);
	kvt_dev_event_destroy(ev);
	gate_open(&g);
	assert_int_equal(kvt_dev_stream_sync(f->a), 0);
	gate_destroy(&g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(unrecorded_event_is_complete, setup, teardown),
		cmocka_unit_test_setup_teardown(work_behind_a_held_stream_stays_pending, setup,
						teardown),
		cmocka_unit_test_setup_teardown(stream_waits_for_another_streams_event, setup,
						teardown),
		cmocka_unit_test_setup_teardown(copies_on_one_stream_run_in_order, setup, teardown),
		cmocka_unit_test_setup_teardown(rerecording_moves_the_event, setup, teardown),
		cmocka_unit_test_setup_teardown(layer_completions_come_in_layer_order, setup,
						teardown),
		cmocka_unit_test_setup_teardown(callback_runs_after_the_work_before_it, setup,
						teardown),
		cmocka_unit_test_setup_teardown(destroying_a_pending_event_is_safe, setup, teardown),
	};

	dev_test_require();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
