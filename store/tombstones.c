/* SPDX-License-Identifier: Apache-2.0 */
/* Removals logged in storage tiers (tombstones): queued under the lock,
 * written by the demoter or at close. See tiering.h. */
#include "store/tiering_impl.h"

#include <stdlib.h>

#include "util/log.h"

/* Tombstones waiting while a tier cannot take them (degraded) are capped:
 * past this, a removal is not logged (the block may come back on reopen). */
#define MAX_PENDING_TOMBS 65536

static bool tomb_queue(struct storage *st, const struct kvt_tier_io *w)
{
	if (st->n_tombs == st->cap_tombs) {
		size_t cap = st->cap_tombs ? 2 * st->cap_tombs : 64;
		struct kvt_tier_io *v;

		if (st->n_tombs >= MAX_PENDING_TOMBS)
			return false;
		v = realloc(st->tombs, cap * sizeof(*v));
		if (!v)
			return false;
		st->tombs = v;
		st->cap_tombs = cap;
	}
	st->tombs[st->n_tombs++] = *w;
	return true;
}

/* Log the removals waiting for st (lock held; released during the write).
 * Those the tier could not take yet (degraded, full, out of memory) wait
 * for the demoter's next pass, or the close. */
void kvt_tiering_write_tombs(struct kvt_store *s, struct storage *st)
{
	struct kvt_tier_batch b = { .write = true, .io = st->tombs, .n = st->n_tombs };
	size_t lost = 0;

	st->tombs = NULL;
	st->n_tombs = st->cap_tombs = 0;
	pthread_mutex_unlock(&s->lock);
	kvt_tier_run(st->t, &b);
	pthread_mutex_lock(&s->lock);
	kvt_tiering_forget_dropped(s); /* the writes may have made room */
	for (size_t k = 0; k < b.n; k++)
		if (b.io[k].res && !tomb_queue(st, &b.io[k]))
			lost++;
	if (lost)
		kvt_log(KVT_LOG_WARN, "event=%s.removal_not_logged removals=%zu", st->t->ops->name,
			lost);
	free(b.io);
}

void kvt_tiering_removed(struct kvt_store *s, uint32_t i)
{
	struct kvt_tiering *t = s->tiering;
	struct kvt_rec *r = rec(s, i);

	for (size_t k = 0; k < t->n; k++) {
		struct storage *st = &t->st[k];
		struct kvt_tier_io w = { .ns_id = kvt_ns_storage_id(s->ns[r->ns - 1]), .key = r->key,
					 .tomb = true };

		if (!(st->t->caps & KVT_TIER_CAP_DEMOTE))
			continue;
		w.seq = st->t->ops->seq_reserve ? st->t->ops->seq_reserve(st->t) : 0;
		/* unlogged, the block may come back when the store reopens */
		if (!tomb_queue(st, &w))
			kvt_log(KVT_LOG_WARN, "event=%s.removal_not_logged removals=1 pending=%zu",
				st->t->ops->name, st->n_tombs);
		t->tombs_new = true;
	}
	pthread_cond_signal(&t->wake);
}
