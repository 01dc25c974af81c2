/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by the SSD I/O tests: hold one batch in flight with the engine's test
 * hook, so a test can prove what other callers do while a batch is running
 * (by ordering, not timing), and a watchdog that fails a test that hangs. */
#ifndef KVT_TESTS_SSD_BATCH_HOLD_H
#define KVT_TESTS_SSD_BATCH_HOLD_H

#include <pthread.h>
#include <stdbool.h>
#include <unistd.h>

#include "tiers/ssd_io.h"

struct batch_hold {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool armed;              /* the next batch to reach the hook stops there */
	int kind;                /* ... with operations of this kind; -1: any */
	bool entered, release;
	int ring_fault;          /* injected into the held batch's engine, if set */
	struct kvt_ssd_io *io;   /* the engine of the held batch */
};

static struct batch_hold batch_hold = {
	.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static inline void batch_hold_cb(struct kvt_ssd_io *io, enum kvt_ssd_io_kind kind, void *arg)
{
	struct batch_hold *h = arg;

	pthread_mutex_lock(&h->mu);
	if (h->armed && (h->kind < 0 || h->kind == (int)kind)) {
		h->armed = false;
		h->entered = true;
		h->io = io;
		if (h->ring_fault)
			kvt_ssd_io_inject_ring(io, h->ring_fault);
		pthread_cond_broadcast(&h->cv);
		while (!h->release)
			pthread_cond_wait(&h->cv, &h->mu);
	}
	pthread_mutex_unlock(&h->mu);
}

/* Arm the hook: the next batch of any engine that is about to wait for
 * operations of `kind` (-1: any) stops in it. ring_fault: 0, or an error
 * the held batch's ring then fails with. */
static inline void batch_hold_arm_kind(int kind, int ring_fault)
{
	pthread_mutex_lock(&batch_hold.mu);
	batch_hold.armed = true;
	batch_hold.kind = kind;
	batch_hold.entered = batch_hold.release = false;
	batch_hold.ring_fault = ring_fault;
	batch_hold.io = NULL;
	pthread_mutex_unlock(&batch_hold.mu);
	kvt_ssd_io_set_test_hook(batch_hold_cb, &batch_hold);
}

/* Arm the hook for the next batch of any kind. */
static inline void batch_hold_arm(int ring_fault)
{
	batch_hold_arm_kind(-1, ring_fault);
}

/* Wait until a batch is held; returns its engine. */
static inline struct kvt_ssd_io *batch_hold_wait(void)
{
	struct kvt_ssd_io *io;

	pthread_mutex_lock(&batch_hold.mu);
	while (!batch_hold.entered)
		pthread_cond_wait(&batch_hold.cv, &batch_hold.mu);
	io = batch_hold.io;
	pthread_mutex_unlock(&batch_hold.mu);
	return io;
}

static inline void batch_hold_release(void)
{
	pthread_mutex_lock(&batch_hold.mu);
	batch_hold.release = true;
	pthread_cond_broadcast(&batch_hold.cv);
	pthread_mutex_unlock(&batch_hold.mu);
}

/* A test that would wait for a held batch hangs: fail it (SIGALRM kills the
 * process) rather than leave it to the harness's timeout. */
static inline void batch_hold_watchdog(unsigned seconds)
{
	alarm(seconds);
}

#endif
