/* SPDX-License-Identifier: Apache-2.0 */
/* What the store answers for keys (include/kvtier/store.h): lookup of the
 * longest prefix present, pins, removal. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier/store.h"
#include "store/store_blocks.h"
#include "store/tiering.h"

/* Keys per prefetch batch: enough misses in flight to hide DRAM latency,
 * few enough that the prefetched lines are still cached when used. */
#define LOOKUP_BATCH 16

int kvt_lookup(struct kvt_ns *ns, const struct kvt_key *keys, size_t n, uint8_t *tiers)
{
	struct kvt_storage_tier *keyed[KVT_MAX_STORAGE_TIERS];
	uint32_t hash[LOOKUP_BATCH];
	struct kvt_store *s;
	size_t hit = 0, n_keyed, local;
	bool miss = false;

	if (!ns || (n && !keys) || n > INT32_MAX)
		return -EINVAL;
	s = ns->store;
	pthread_mutex_lock(&s->lock);
	for (size_t base = 0; base < n && !miss; base += LOOKUP_BATCH) {
		size_t m = n - base < LOOKUP_BATCH ? n - base : LOOKUP_BATCH;

		for (size_t j = 0; j < m; j++) {
			hash[j] = kvt_index_hash(ns->id, &keys[base + j]);
			kvt_index_prefetch_slot(s->cat.idx, hash[j]);
		}
		for (size_t j = 0; j < m; j++)
			kvt_index_prefetch_rec(s->cat.idx, hash[j]);
		for (size_t j = 0; j < m; j++, hit++) {
			uint32_t i = kvt_index_find_hashed(s->cat.idx, ns->id, &keys[hit], hash[j]);

			if (i == KVT_NIL || rec(s, i)->state != KVT_REC_LIVE) {
				miss = true;
				break;
			}
			kvt_catalog_touch(&s->cat, i);
			s->counters.tier[rec(s, i)->tier].hits++;
			if (tiers)
				tiers[hit] = rec(s, i)->tier;
		}
	}
	s->counters.lookups++;
	s->counters.lookup_keys += n;
	s->counters.lookup_hit_keys += hit;
	n_keyed = hit < n ? kvt_tiering_keyed(s, keyed, KVT_MAX_STORAGE_TIERS) : 0;
	pthread_mutex_unlock(&s->lock);
	/* past the local prefix, tiers that answer for blocks the index lacks
	 * (other nodes') may carry it on, each for a leading run */
	local = hit;
	for (size_t t = 0; t < n_keyed && hit < n; t++) {
		int c = keyed[t]->ops->lookup(keyed[t], kvt_ns_storage_id(ns), keys + hit, n - hit);

		for (; c > 0 && hit < n; c--, hit++)
			if (tiers)
				tiers[hit] = (uint8_t)keyed[t]->kind;
	}
	if (hit > local) {
		pthread_mutex_lock(&s->lock);
		s->counters.lookup_hit_keys += hit - local;
		pthread_mutex_unlock(&s->lock);
	}
	if (tiers)
		memset(tiers + hit, KVT_TIER_NONE, n - hit);
	return (int)hit;
}

static int pin_many(struct kvt_ns *ns, const struct kvt_key *keys, size_t n, int delta)
{
	struct kvt_store *s;
	int done = 0;

	if (!ns || (n && !keys) || n > INT32_MAX)
		return -EINVAL;
	s = ns->store;
	pthread_mutex_lock(&s->lock);
	for (size_t k = 0; k < n; k++) {
		uint32_t i = kvt_index_find(s->cat.idx, ns->id, &keys[k]);

		if (i == KVT_NIL || rec(s, i)->state != KVT_REC_LIVE)
			continue;
		if ((delta > 0 && rec(s, i)->pins == UINT16_MAX) || (delta < 0 && !rec(s, i)->pins))
			continue;
		kvt_catalog_pin(&s->cat, i, delta);
		done++;
	}
	pthread_mutex_unlock(&s->lock);
	return done;
}

int kvt_pin(struct kvt_ns *ns, const struct kvt_key *keys, size_t n)
{
	return pin_many(ns, keys, n, +1);
}

int kvt_unpin(struct kvt_ns *ns, const struct kvt_key *keys, size_t n)
{
	return pin_many(ns, keys, n, -1);
}

int kvt_remove(struct kvt_ns *ns, const struct kvt_key *key)
{
	struct kvt_store *s;
	uint32_t i;
	int err = 0;

	if (!ns || !key)
		return -EINVAL;
	s = ns->store;
	pthread_mutex_lock(&s->lock);
	i = kvt_index_find(s->cat.idx, ns->id, key);
	if (i == KVT_NIL || rec(s, i)->state != KVT_REC_LIVE) {
		err = -ENOENT;
	} else {
		s->counters.removes++;
		kvt_tiering_removed(s, i);
		if (rec(s, i)->busy)
			kvt_catalog_retire(&s->cat, i);
		else
			kvt_tiering_discard(s, i);
	}
	pthread_mutex_unlock(&s->lock);
	return err;
}
