/* SPDX-License-Identifier: Apache-2.0 */
/* The store's list of tiers: lookups, stats, adding a storage tier,
 * opening and closing tiering. See tiering.h. */
#include "store/tiering_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "util/log.h"

struct kvt_storage_tier *kvt_tiering_tier(struct kvt_store *s, enum kvt_tier kind)
{
	struct storage *st = storage_of(s, kind);

	return st ? st->t : NULL;
}

bool kvt_tiering_has(struct kvt_store *s, unsigned caps)
{
	struct kvt_tiering *t = s->tiering;

	for (size_t k = 0; k < t->n; k++)
		if ((t->st[k].t->caps & caps) == caps)
			return true;
	return false;
}

size_t kvt_tiering_keyed(struct kvt_store *s, struct kvt_storage_tier **out, size_t max)
{
	struct kvt_tiering *t = s->tiering;
	size_t n = 0;

	for (size_t k = 0; k < t->n && n < max; k++)
		if (t->st[k].t->caps & KVT_TIER_CAP_KEYED)
			out[n++] = t->st[k].t;
	return n;
}

void kvt_tiering_stats(struct kvt_store *s, struct kvt_store_stats *st)
{
	for (size_t k = 0; k < s->tiering->n; k++) {
		const struct storage *sg = &s->tiering->st[k];
		struct kvt_storage_tier *t = sg->t;

		st->tier[t->kind].present = true;
		t->ops->stats(t, st);
		/* what the tier holds for namespaces not attached since a restart
		 * is on its media all the same: count it there */
		for (size_t j = 0; j < sg->n_recovered; j++)
			st->tier[t->kind].used_bytes += sg->recovered[j].len;
		st->tier[t->kind].blocks += sg->n_recovered;
		st->recovered_unattached += sg->n_recovered;
		/* the fields older callers read: demotions went to the SSD tier
		 * alone when they were named */
		st->ssd_copies_dropped += sg->copies_dropped;
		st->ssd_admission_refused += sg->refused;
		st->ssd_admission_refused_bytes += sg->refused_bytes;
	}
}

size_t kvt_tiering_counters(struct kvt_store *s, enum kvt_tier kind, struct kvt_counter *out,
			    size_t max)
{
	struct storage *sg = storage_of(s, kind);
	size_t n;

	if (!sg)
		return 0;
	n = sg->t->ops->counters ? sg->t->ops->counters(sg->t, out, max) : 0;
	if (sg->t->caps & KVT_TIER_CAP_DEMOTE) {
		const struct kvt_counter c[] = {
			{ "copies_dropped", "Spare copies of blocks in memory the tier let go for "
			  "room (the block stays).", "blocks", KVT_COUNTER_COUNTER,
			  sg->copies_dropped },
			{ "admission_refused", "Blocks leaving memory the tier's admission rule "
			  "refused: dropped, not written.", "blocks", KVT_COUNTER_COUNTER,
			  sg->refused },
			{ "admission_refused_bytes", "Bytes of the blocks the tier's admission rule "
			  "refused: writes saved.", "bytes", KVT_COUNTER_COUNTER, sg->refused_bytes },
		};

		n += KVT_TIER_COUNTERS(out + n, max - n, c);
	}
	return n;
}

size_t kvt_tiering_devices(struct kvt_store *s, enum kvt_tier kind, struct kvt_tier_device *out,
			   size_t max)
{
	struct storage *sg = storage_of(s, kind);

	return sg && sg->t->ops->devices ? sg->t->ops->devices(sg->t, out, max) : 0;
}

/* ---- the list -------------------------------------------------------------- */

int kvt_tiering_add(struct kvt_store *s, struct kvt_storage_tier *t)
{
	struct kvt_tiering *tg = s->tiering;
	struct kvt_tier_rec r[64];
	struct storage st = { .t = t };
	void *region;
	uint64_t len;
	size_t n;
	int err = 0;

	region = s->mem->ops->region(s->mem, &len);
	t->ops->register_region(t, region, len);
	while (t->ops->take_recovered && !err && (n = t->ops->take_recovered(t, r, 64)) > 0)
		for (size_t k = 0; k < n && !err; k++)
			err = kvt_tiering_recovered_push(&st, &r[k]);
	pthread_mutex_lock(&s->lock);
	if (!err && tg->n == KVT_MAX_STORAGE_TIERS)
		err = -ENOSPC;
	if (!err && (storage_of(s, t->kind) || t->kind == s->mem->kind))
		err = -EEXIST;
	if (!err)
		tg->st[tg->n++] = st;
	pthread_mutex_unlock(&s->lock);
	if (err) {
		free(st.recovered);
		t->ops->close(t);
	}
	return err;
}

int kvt_tiering_open(struct kvt_store *s, const struct kvt_store_opts *opts)
{
	struct kvt_tiering *t;
	pthread_condattr_t ca;
	int err;

	if (opts->dram_low_watermark <= 0 || opts->dram_high_watermark > 1 ||
	    opts->dram_low_watermark > opts->dram_high_watermark)
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->high = opts->dram_high_watermark;
	t->low = opts->dram_low_watermark;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&t->wake, &ca);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&t->progress, NULL);
	s->tiering = t;
	s->cat.hold_cb = kvt_tiering_hold_cb;
	s->cat.hold_arg = s;
	err = pthread_create(&t->thread, NULL, kvt_tiering_demoter_main, s);
	if (err) {
		s->tiering = NULL;
		pthread_cond_destroy(&t->progress);
		pthread_cond_destroy(&t->wake);
		free(t);
		return -err;
	}
	t->started = true;
	return 0;
}

void kvt_tiering_close(struct kvt_store *s)
{
	struct kvt_tiering *t = s->tiering;

	if (!t)
		return;
	pthread_mutex_lock(&s->lock);
	t->stop = true;
	pthread_cond_broadcast(&t->wake);
	pthread_cond_broadcast(&t->progress);
	pthread_mutex_unlock(&s->lock);
	if (t->started)
		pthread_join(t->thread, NULL);
	/* blocks whose copy went lately are written again: a graceful close
	 * keeps every block that was durable (nothing else runs now) */
	pthread_mutex_lock(&s->lock);
	for (int round = 0; round < 64 && t->n_rewrite && target(s); round++)
		kvt_tiering_rewrite_copies(s);
	pthread_mutex_unlock(&s->lock);
	for (size_t k = 0; k < t->n; k++) {
		struct storage *st = &t->st[k];

		/* removals not logged yet are logged now (nothing else runs) */
		if (st->n_tombs) {
			struct kvt_tier_batch b = { .write = true, .io = st->tombs, .n = st->n_tombs };

			kvt_tier_run(st->t, &b);
			for (size_t j = 0; j < b.n; j++)
				if (b.io[j].res)
					kvt_log(KVT_LOG_WARN, "event=%s.removal_not_logged err=\"%s\"",
						st->t->ops->name, kvt_strerror(b.io[j].res));
		}
		st->t->ops->close(st->t);
		free(st->tombs);
		free(st->recovered);
	}
	pthread_cond_destroy(&t->progress);
	pthread_cond_destroy(&t->wake);
	free(t->rewrite);
	free(t);
	s->tiering = NULL;
}
