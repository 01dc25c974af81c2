/* SPDX-License-Identifier: Apache-2.0 */
/* The hint refresher (see hint_refresh.h). */
#include "cluster/hint_refresh.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/clock.h"

/* How often a paced walk looks at the backlog again. */
#define BACKLOG_POLL_MS 10

struct kvt_hint_refresh {
	struct kvt_hint_refresh_opts o;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t wake;
	bool stop;
	bool pending;             /* walk again once the current walk ends */
	struct kvt_hint_refresh_stats st;
	struct kvt_key *keys;     /* batch_keys each, one piece of a walk */
	uint8_t *tiers;
	struct kvt_key *same;     /* the piece's keys of one tier */
};

void kvt_hint_refresh_opts_init(struct kvt_hint_refresh_opts *o, size_t size_bytes)
{
	memset(o, 0, size_bytes);
	o->size = size_bytes;
	o->every_ms = 200000;
	o->batch_keys = 512;
	o->backlog_max = 32768;
}

/* Sleep on the condition variable until ns (monotonic), a wake or stop. */
static void wait_until(struct kvt_hint_refresh *h, uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000ull),
			       .tv_nsec = (long)(ns % 1000000000ull) };

	pthread_cond_timedwait(&h->wake, &h->mu, &ts);
}

/* Wait (lock held) while the publisher has backlog_max keys waiting; the
 * publisher is asked without the lock, as its own lock may be held while
 * it calls kvt_hint_refresh_now. Returns false when stopping. */
static bool paced(struct kvt_hint_refresh *h)
{
	for (;;) {
		size_t queued;

		if (h->stop || !h->o.backlog_cb)
			return !h->stop;
		pthread_mutex_unlock(&h->mu);
		queued = h->o.backlog_cb(h->o.arg);
		pthread_mutex_lock(&h->mu);
		if (queued < h->o.backlog_max || h->stop)
			return !h->stop;
		wait_until(h, kvt_now_ns() + BACKLOG_POLL_MS * 1000000ull);
	}
}

/* Hand keys[0..n) over, one publish_cb call per tier present. */
static void publish_piece(struct kvt_hint_refresh *h, size_t n)
{
	bool done[256] = { false };

	for (size_t i = 0; i < n; i++) {
		uint8_t t = h->tiers[i];
		size_t m = 0;

		if (done[t])
			continue;
		done[t] = true;
		for (size_t j = i; j < n; j++)
			if (h->tiers[j] == t)
				h->same[m++] = h->keys[j];
		h->o.publish_cb(h->o.arg, h->same, m, t);
	}
}

/* One whole walk of the store (lock held on entry and exit, dropped
 * around the store and the callback). */
static void walk(struct kvt_hint_refresh *h)
{
	uint64_t cursor = 0;

	while (cursor != KVT_SCAN_END && paced(h)) {
		int n;

		pthread_mutex_unlock(&h->mu);
		n = kvt_store_scan(h->o.store, &cursor, h->keys, h->tiers, h->o.batch_keys);
		if (n > 0)
			publish_piece(h, (size_t)n);
		pthread_mutex_lock(&h->mu);
		if (n < 0)
			return;
		h->st.keys += (uint64_t)n;
	}
	if (cursor == KVT_SCAN_END)
		h->st.walks++;
}

static void *run(void *arg)
{
	struct kvt_hint_refresh *h = arg;
	uint64_t next = 0; /* the first walk at once */

	pthread_mutex_lock(&h->mu);
	while (!h->stop) {
		if (!h->pending && kvt_now_ns() < next) {
			wait_until(h, next);
			continue;
		}
		h->pending = false;
		next = kvt_now_ns() + (uint64_t)h->o.every_ms * 1000000ull;
		walk(h);
	}
	pthread_mutex_unlock(&h->mu);
	return NULL;
}

static void destroy(struct kvt_hint_refresh *h)
{
	pthread_cond_destroy(&h->wake);
	pthread_mutex_destroy(&h->mu);
	free(h->keys);
	free(h->tiers);
	free(h->same);
	free(h);
}

int kvt_hint_refresh_start(const struct kvt_hint_refresh_opts *opts,
			   struct kvt_hint_refresh **out)
{
	struct kvt_hint_refresh *h;
	pthread_condattr_t ca;
	int err;

	if (!opts || !out || opts->size != sizeof(*opts) || !opts->store || !opts->publish_cb ||
	    opts->every_ms == 0 || opts->batch_keys == 0 || opts->backlog_max == 0)
		return -EINVAL;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->o = *opts;
	pthread_mutex_init(&h->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&h->wake, &ca);
	pthread_condattr_destroy(&ca);
	h->keys = calloc(opts->batch_keys, sizeof(*h->keys));
	h->tiers = calloc(opts->batch_keys, sizeof(*h->tiers));
	h->same = calloc(opts->batch_keys, sizeof(*h->same));
	if (!h->keys || !h->tiers || !h->same) {
		destroy(h);
		return -ENOMEM;
	}
	err = pthread_create(&h->thread, NULL, run, h);
	if (err) {
		destroy(h);
		return -err;
	}
	*out = h;
	return 0;
}

void kvt_hint_refresh_now(struct kvt_hint_refresh *h)
{
	pthread_mutex_lock(&h->mu);
	h->pending = true;
	pthread_cond_signal(&h->wake);
	pthread_mutex_unlock(&h->mu);
}

void kvt_hint_refresh_stats(struct kvt_hint_refresh *h, struct kvt_hint_refresh_stats *out)
{
	pthread_mutex_lock(&h->mu);
	*out = h->st;
	pthread_mutex_unlock(&h->mu);
}

void kvt_hint_refresh_stop(struct kvt_hint_refresh *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&h->mu);
	h->stop = true;
	pthread_cond_signal(&h->wake);
	pthread_mutex_unlock(&h->mu);
	pthread_join(h->thread, NULL);
	destroy(h);
}
