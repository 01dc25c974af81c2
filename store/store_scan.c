/* SPDX-License-Identifier: Apache-2.0 */
/* kvt_store_scan: the keys of the blocks a store holds, walked in pieces.
 *
 * For owners that tell others what this store holds (a cluster directory's
 * hints): the index is walked by record number, a bounded piece per call
 * under the store's lock, so a walk of millions of blocks never keeps
 * savers and loaders waiting for long. */
#include <errno.h>
#include <pthread.h>

#include "kvtier/store.h"
#include "store/index.h"
#include "store/store_impl.h"

/* Records looked at per call at most, found or not: bounds the lock hold
 * (a few tens of microseconds) when most records are free. */
#define SCAN_RECORDS_PER_CALL 65536u

int kvt_store_scan(struct kvt_store *s, uint64_t *cursor, struct kvt_key *keys,
		   uint8_t *tiers, size_t max)
{
	uint32_t i, high, end;
	size_t n = 0;

	if (!s || !cursor || !keys || !tiers || max == 0)
		return -EINVAL;
	if (*cursor == KVT_SCAN_END)
		return 0;
	pthread_mutex_lock(&s->lock);
	high = kvt_index_high(s->cat.idx);
	i = *cursor < high ? (uint32_t)*cursor : high;
	end = high - i > SCAN_RECORDS_PER_CALL ? i + SCAN_RECORDS_PER_CALL : high;
	for (; i < end && n < max; i++) {
		const struct kvt_rec *r = kvt_index_rec(s->cat.idx, i);

		/* blocks held here: not a remote tier's, not being filled or
		 * removed */
		if (r->state != KVT_REC_LIVE || r->tier == KVT_TIER_NONE ||
		    r->tier >= KVT_TIER_REMOTE)
			continue;
		keys[n] = r->key;
		tiers[n] = r->tier;
		n++;
	}
	*cursor = i >= high ? KVT_SCAN_END : i;
	pthread_mutex_unlock(&s->lock);
	return (int)n;
}
