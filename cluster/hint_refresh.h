/* SPDX-License-Identifier: Apache-2.0 */
/* Keeps the directory's hints of the blocks this node holds alive.
 *
 * A hint lives for the directory's hint TTL unless published again, and a
 * node that rejoins (restarted, or cut off past its membership TTL) does so
 * under a new epoch that voids its old hints. So a thread walks the store
 * (kvt_store_scan) and hands every key held in DRAM or on SSD, with its
 * tier, to a publish callback: a whole walk every `every_ms`, and one at
 * once when asked (kvt_hint_refresh_now, at a (re)join). Blocks recovered
 * from SSD after a restart are published that way at the first join; the
 * hints of blocks gone from the store are no longer refreshed and lapse.
 *
 * It paces itself on the publisher's backlog, so a bounded write queue is
 * not overrun: keys are handed over only while backlog_cb reports fewer
 * than backlog_max waiting. Thread-safe. */
#ifndef KVT_CLUSTER_HINT_REFRESH_H
#define KVT_CLUSTER_HINT_REFRESH_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier/store.h"

struct kvt_hint_refresh_opts {
	size_t size;              /* sizeof(struct kvt_hint_refresh_opts), set by _init */
	struct kvt_store *store;  /* required; outlives the refresher */
	unsigned every_ms;        /* a whole walk at least this often (200000: a
	                           * third of the directory's 10 min hint TTL) */
	unsigned batch_keys;      /* keys per publish_cb call at most (512) */
	size_t backlog_max;       /* hand over keys only while backlog_cb says
	                           * fewer are waiting (32768) */
	/* keys[0..n) are held here in `tier`; called on the refresher's thread */
	void (*publish_cb)(void *arg, const struct kvt_key *keys, size_t n, uint8_t tier);
	size_t (*backlog_cb)(void *arg); /* keys queued, not sent; NULL: no pacing */
	void *arg;
};

struct kvt_hint_refresh_stats {
	uint64_t walks;           /* whole walks of the store done */
	uint64_t keys;            /* keys handed to publish_cb */
};

struct kvt_hint_refresh;

void kvt_hint_refresh_opts_init(struct kvt_hint_refresh_opts *opts, size_t size_bytes);

/* Start the thread; its first walk starts at once. Returns 0 and *out, or
 * -EINVAL (no store or publish_cb, zero sizes), -ENOMEM, or
 * pthread_create's error. */
int kvt_hint_refresh_start(const struct kvt_hint_refresh_opts *opts,
			   struct kvt_hint_refresh **out);

/* Walk again as soon as the walk under way (if any) ends. Never blocks on
 * the walk; callable from any thread, a directory's rejoin callback
 * included. */
void kvt_hint_refresh_now(struct kvt_hint_refresh *h);

void kvt_hint_refresh_stats(struct kvt_hint_refresh *h, struct kvt_hint_refresh_stats *out);

/* Stop the thread (a walk under way ends at its next piece) and free.
 * NULL is accepted. */
void kvt_hint_refresh_stop(struct kvt_hint_refresh *h);

#endif /* KVT_CLUSTER_HINT_REFRESH_H */
