/* SPDX-License-Identifier: Apache-2.0 */
/* The Redis directory after a failover: the hint writes an old primary may
 * have acknowledged without passing them on to its replica are sent again
 * to the new one (see dir_redis.h). Redis replicates asynchronously, so
 * what a primary wrote in its last moments (or, cut off from Sentinel,
 * until its clients noticed) is not on the replica Sentinel promotes. The
 * node keeps the writes it sent lately, a bounded ring, and replays those
 * of the last replay_ms when a connect reaches another server than the
 * last one: a bounded re-announce of what may be missing, not a walk of
 * the whole store. Everything here runs on the directory's thread. */
#include "cluster/dir_redis.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void kvt_rdir_sent(struct kvt_rdir *d, const struct wop *ops, size_t n)
{
	uint64_t now = kvt_now_ns();

	if (!d->sent_cap)
		return;
	for (size_t i = 0; i < n; i++) {
		size_t at = (d->sent_head + d->sent_n) % d->sent_cap;

		if (d->sent_n == d->sent_cap) /* full: the oldest goes */
			d->sent_head = (d->sent_head + 1) % d->sent_cap;
		else
			d->sent_n++;
		d->sent[at] = ops[i];
		d->sent_ns[at] = now;
	}
}

/* Put the sent writes of the window back at the head of the write queue,
 * in their order and before the writes queued since (those are newer).
 * What the queue has no room for is the oldest of the window: dropped and
 * counted. Returns how many went back. */
static size_t requeue(struct kvt_rdir *d, uint64_t since_ns)
{
	size_t first = 0, n, room;

	while (first < d->sent_n && d->sent_ns[(d->sent_head + first) % d->sent_cap] < since_ns)
		first++;
	n = d->sent_n - first;
	pthread_mutex_lock(&d->mu);
	room = d->ring_cap - d->ring_n;
	if (n > room) {
		d->st.dropped_keys += n - room;
		first += n - room;
		n = room;
	}
	d->ring_head = (d->ring_head + d->ring_cap - n % d->ring_cap) % d->ring_cap;
	for (size_t i = 0; i < n; i++)
		d->ring[(d->ring_head + i) % d->ring_cap] =
			d->sent[(d->sent_head + first + i) % d->sent_cap];
	d->ring_n += n;
	d->st.replayed_keys += n;
	pthread_mutex_unlock(&d->mu);
	/* they are recorded again as they go out */
	d->sent_head = d->sent_n = 0;
	return n;
}

void kvt_rdir_primary_seen(struct kvt_rdir *d)
{
	const char *now = kvt_redis_addr(d->conn);
	uint64_t window = (uint64_t)d->o.replay_ms * 1000000ull, t = kvt_now_ns();
	size_t n;

	if (!strcmp(now, d->primary))
		return;
	if (!d->primary[0]) { /* the first connection */
		snprintf(d->primary, sizeof(d->primary), "%s", now);
		return;
	}
	n = requeue(d, t > window ? t - window : 0);
	pthread_mutex_lock(&d->mu);
	d->st.primary_changes++;
	pthread_mutex_unlock(&d->mu);
	kvt_rdir_log(d, KVT_LOG_WARN, "event=cluster.redis_primary_changed url=%s from=%s to=%s "
		     "replayed=%zu", d->url_shown, d->primary, now, n);
	snprintf(d->primary, sizeof(d->primary), "%s", now);
}
