/* SPDX-License-Identifier: Apache-2.0 */
/* What storage tiers report (records found at open, records dropped for
 * room), and room made in a storage tier: see tiering.h. */
#include "store/tiering_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

int kvt_tiering_recovered_push(struct storage *st, const struct kvt_tier_rec *r)
{
	if (st->n_recovered == st->cap_recovered) {
		size_t cap = st->cap_recovered ? 2 * st->cap_recovered : 256;
		struct kvt_tier_rec *v = realloc(st->recovered, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		st->recovered = v;
		st->cap_recovered = cap;
	}
	st->recovered[st->n_recovered++] = *r;
	return 0;
}

void kvt_tiering_import(struct kvt_store *s, struct kvt_ns *ns)
{
	struct kvt_tiering *t = s->tiering;
	uint64_t id = kvt_ns_storage_id(ns);

	kvt_tiering_forget_dropped(s); /* none of what tiers dropped is indexed */
	for (size_t k = 0; k < t->n; k++) {
		struct storage *st = &t->st[k];
		size_t keep = 0;

		/* oldest first, so a parent is usually indexed before its children */
		for (size_t j = 0; j < st->n_recovered; j++) {
			struct kvt_tier_rec *r = &st->recovered[j];
			uint32_t i;

			if (r->ns_id != id) {
				st->recovered[keep++] = *r;
				continue;
			}
			if (r->len != ns->block_bytes ||
			    kvt_index_insert(s->cat.idx, ns->id, &r->key, &i)) {
				st->t->ops->free(st->t, r->loc);
				continue;
			}
			rec(s, i)->size = (uint32_t)r->len;
			rec(s, i)->loc = r->loc;
			kvt_catalog_publish(&s->cat, i, st->t->kind, r->has_parent ? &r->parent : NULL);
		}
		st->n_recovered = keep;
	}
}

static struct kvt_ns *ns_of_storage_id(struct kvt_store *s, uint64_t id)
{
	for (uint32_t i = 0; i < s->n_ns; i++)
		if (s->ns[i] && kvt_ns_storage_id(s->ns[i]) == id)
			return s->ns[i];
	return NULL;
}

/* Have the demoter write record i's block again (it lost its copy). */
void kvt_tiering_want_rewrite(struct kvt_tiering *t, uint32_t i)
{
	if (t->n_rewrite == t->cap_rewrite) {
		size_t cap = t->cap_rewrite ? 2 * t->cap_rewrite : 64;
		uint32_t *v = realloc(t->rewrite, cap * sizeof(*v));
		if (!v)
			return; /* durable again at its next demotion */
		t->rewrite = v;
		t->cap_rewrite = cap;
	}
	t->rewrite[t->n_rewrite++] = i;
	pthread_cond_signal(&t->wake);
}

static int cmp_loc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Drop from st->recovered the records whose locs (sorted) are gone, so that
 * neither eviction nor a later attach of their namespace uses them.
 * Returns how many there were. */
static size_t prune_recovered(struct storage *st, const uint64_t *gone, size_t n)
{
	size_t keep = 0, pruned;

	for (size_t k = 0; k < st->n_recovered; k++)
		if (!bsearch(&st->recovered[k].loc, gone, n, sizeof(*gone), cmp_loc))
			st->recovered[keep++] = st->recovered[k];
	pruned = st->n_recovered - keep;
	st->n_recovered = keep;
	return pruned;
}

static void forget_dropped_of(struct kvt_store *s, struct storage *st)
{
	unsigned kind = st->t->kind;
	struct kvt_tier_rec d[64];
	uint64_t unclaimed[64];
	size_t n;

	if (!st->t->ops->take_dropped)
		return;
	while ((n = st->t->ops->take_dropped(st->t, d, 64)) > 0) {
		size_t n_unclaimed = 0;

		for (size_t k = 0; k < n; k++) {
			struct kvt_ns *ns = ns_of_storage_id(s, d[k].ns_id);
			uint32_t i = ns ? kvt_index_find(s->cat.idx, ns->id, &d[k].key) : KVT_NIL;
			struct kvt_rec *r;

			/* not indexed: a recovered record not imported yet (its
			 * namespace may be attaching right now) */
			if (i == KVT_NIL) {
				unclaimed[n_unclaimed++] = d[k].loc;
				continue;
			}
			r = rec(s, i);
			if (r->copy_tier == kind && r->copy_loc == d[k].loc) {
				/* the block stays in memory; its copy is written again */
				r->copy_tier = KVT_TIER_NONE;
				st->copies_dropped++;
				kvt_tiering_want_rewrite(s->tiering, i);
				continue;
			}
			if (r->tier != kind || r->loc != d[k].loc)
				continue;
			r->loc = KVT_LOC_NONE;
			s->counters.tier[kind].evictions++;
			if (r->state == KVT_REC_LIVE && r->busy)
				kvt_catalog_retire(&s->cat, i);
			else if (!r->busy)
				kvt_tiering_discard(s, i);
		}
		if (n_unclaimed) {
			qsort(unclaimed, n_unclaimed, sizeof(*unclaimed), cmp_loc);
			s->counters.tier[kind].evictions += prune_recovered(st, unclaimed, n_unclaimed);
		}
	}
}

void kvt_tiering_forget_dropped(struct kvt_store *s)
{
	for (size_t k = 0; k < s->tiering->n; k++)
		forget_dropped_of(s, &s->tiering->st[k]);
}

/* Make room in storage tier st for about `bytes`: first records no
 * namespace claimed, then its policy's coldest blocks, and only when none
 * is left (and `copies`) the spare copies of blocks that are in memory. A
 * block read back sits in memory, where it is more recent than any block
 * only in st (the tier's policy takes a block coming down as its most
 * recent), so its copy goes after them: it stays durable as long as colder
 * blocks are kept. Every record let go is counted: an eviction when the
 * block is lost, a dropped copy when not. Returns the number of records
 * let go. */
uint64_t kvt_tiering_evict_from(struct kvt_store *s, struct storage *st, uint64_t bytes,
				bool copies)
{
	struct kvt_tiering *t = s->tiering;
	unsigned kind = st->t->kind;
	uint64_t freed = 0, n_freed = 0;
	uint32_t high = kvt_index_high(s->cat.idx);

	while (freed < bytes && st->n_recovered) {
		struct kvt_tier_rec *r = &st->recovered[--st->n_recovered];

		st->t->ops->free(st->t, r->loc);
		freed += r->len;
		s->counters.tier[kind].evictions++;
		n_freed++;
	}
	while (freed < bytes) {
		uint32_t v = kvt_catalog_victim(&s->cat, kind);

		if (v == KVT_NIL)
			break;
		freed += rec(s, v)->size;
		s->counters.tier[kind].evictions++;
		kvt_tiering_discard(s, v);
		n_freed++;
	}
	for (uint32_t n = 0; copies && freed < bytes && n < high; n++) {
		uint32_t i = t->copy_cursor++ % high;
		struct kvt_rec *r = rec(s, i);

		if (r->state != KVT_REC_FREE && r->copy_tier == kind) {
			freed += r->size;
			kvt_tiering_drop_copy(s, r);
			st->copies_dropped++;
			n_freed++;
		}
	}
	return n_freed;
}
