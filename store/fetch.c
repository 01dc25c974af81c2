/* SPDX-License-Identifier: Apache-2.0 */
/* Batched reads up from storage tiers: see fetch.h. */
#include "store/fetch.h"

#include <errno.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>

#include "store/tiering.h"

struct item {
	uint32_t rec;
	size_t k;                 /* the caller's slot */
	uint64_t mem_loc;
	uint64_t from_loc;        /* KVT_LOC_NONE: read by key */
	struct kvt_storage_tier *from;
	struct kvt_key parent;    /* by key: the block's parent, if known */
	bool has_parent;
};

struct kvt_fetch {
	struct kvt_store *s;
	size_t max, n;
	struct item *items;
	struct kvt_tier_io *io;   /* grouped by tier at each submit */
	size_t *item_of_io;
	/* batches in flight, in the order submitted: one per tier per submit,
	 * each with at least one record, so never more than max */
	struct kvt_tier_batch *b;
	size_t *b_first;          /* io index of each batch's first */
	struct kvt_storage_tier **tiers; /* each batch's tier */
	bool *submitted;
	size_t nb;
	size_t nw;                /* batches [0, nw) were driven to their end */
	size_t n_sub;             /* items [0, n_sub) are in batches */
	size_t in_flight;         /* added and not done yet */
	kvt_fetch_cb cb;
	void *arg;
};


static void drive(struct kvt_fetch *f);

struct kvt_fetch *kvt_fetch_new(struct kvt_store *s, size_t max, kvt_fetch_cb cb, void *arg)
{
	struct kvt_fetch *f = calloc(1, sizeof(*f));
	size_t m = max ? max : 1;

	if (!f)
		return NULL;
	f->s = s;
	f->max = max;
	f->cb = cb;
	f->arg = arg;
	f->items = calloc(m, sizeof(*f->items));
	f->io = calloc(m, sizeof(*f->io));
	f->item_of_io = calloc(m, sizeof(*f->item_of_io));
	f->b = calloc(m, sizeof(*f->b));
	f->b_first = calloc(m, sizeof(*f->b_first));
	f->tiers = calloc(m, sizeof(*f->tiers));
	f->submitted = calloc(m, sizeof(*f->submitted));
	if (!f->items || !f->io || !f->item_of_io || !f->b || !f->b_first || !f->tiers ||
	    !f->submitted) {
		kvt_fetch_free(f);
		return NULL;
	}
	return f;
}

void kvt_fetch_free(struct kvt_fetch *f)
{
	if (!f)
		return;
	free(f->items);
	free(f->io);
	free(f->item_of_io);
	free(f->b);
	free(f->b_first);
	free(f->tiers);
	free(f->submitted);
	free(f);
}

int kvt_fetch_add(struct kvt_fetch *f, uint32_t i, size_t k)
{
	struct kvt_store *s = f->s;
	struct kvt_rec *r = rec(s, i);
	uint64_t loc;
	int err;

	if (f->n == f->max)
		return -EINVAL;
	if (r->flags & KVT_REC_MOVING)
		return KVT_FETCH_MOVING;
	if (r->state != KVT_REC_LIVE || r->loc == KVT_LOC_NONE)
		return -ENOENT;
	err = kvt_tiering_alloc_now(s, r->size, &loc);
	if (err == -EAGAIN) {
		/* room comes only as the demoter writes blocks out: the reads
		 * that have their slots go first and are driven to their end
		 * (each block handed over as it lands) while it does */
		if (f->n > f->n_sub) {
			pthread_mutex_unlock(&s->lock);
			kvt_fetch_submit(f);
			drive(f);
			pthread_mutex_lock(&s->lock);
		}
		err = kvt_tiering_alloc(s, r->size, &loc);
	}
	/* the lock may have been let go: look again */
	r = rec(s, i);
	if (err)
		return err;
	if (r->state != KVT_REC_LIVE || r->loc == KVT_LOC_NONE || r->tier == s->mem->kind ||
	    (r->flags & KVT_REC_MOVING)) {
		s->mem->ops->free(s->mem, loc);
		if (r->state != KVT_REC_LIVE || r->loc == KVT_LOC_NONE)
			return -ENOENT;
		return r->tier == s->mem->kind ? KVT_FETCH_IN_MEM : KVT_FETCH_MOVING;
	}
	r->flags |= KVT_REC_MOVING;
	f->items[f->n++] = (struct item){ .rec = i, .k = k, .mem_loc = loc, .from_loc = r->loc,
					  .from = kvt_tiering_tier(s, r->tier) };
	f->in_flight++;
	return KVT_FETCH_QUEUED;
}

int kvt_fetch_add_key(struct kvt_fetch *f, struct kvt_ns *ns, struct kvt_storage_tier *t,
		      const struct kvt_key *key, const struct kvt_key *parent, size_t k)
{
	struct kvt_store *s = f->s;
	uint32_t i;
	int err;

	if (f->n == f->max || !(t->caps & KVT_TIER_CAP_KEYED))
		return -EINVAL;
	err = kvt_index_insert(s->cat.idx, ns->id, key, &i);
	if (err)
		return err;
	rec(s, i)->size = (uint32_t)ns->block_bytes;
	err = kvt_tiering_alloc(s, ns->block_bytes, &rec(s, i)->loc);
	if (err) {
		kvt_catalog_drop(&s->cat, i);
		return err;
	}
	rec(s, i)->tier = (uint8_t)s->mem->kind;
	/* the parent is resolved when the block is published */
	f->items[f->n++] = (struct item){ .rec = i, .k = k, .mem_loc = rec(s, i)->loc,
					  .from_loc = KVT_LOC_NONE, .from = t,
					  .parent = parent ? *parent : (struct kvt_key){ { 0 } },
					  .has_parent = parent != NULL };
	f->in_flight++;
	return 0;
}

/* A read by loc is done (lock held): the block moves up, or is dropped. */
static int finish_loc(struct kvt_fetch *f, struct item *it, struct kvt_tier_io *io)
{
	struct kvt_store *s = f->s;
	struct kvt_rec *r = rec(s, it->rec);
	enum kvt_tier from = it->from->kind;
	int err;

	r->flags &= (uint8_t)~KVT_REC_MOVING;
	if (io->res == 0 && r->state == KVT_REC_LIVE && r->tier == from && r->loc == it->from_loc) {
		/* the tier's record stays: the block remains durable there */
		if (!kvt_tiering_keep_copy(s, it->rec, from, it->from_loc))
			it->from->ops->free(it->from, it->from_loc);
		kvt_tiering_move(s, it->rec, s->mem->kind, it->mem_loc);
		s->counters.tier[from].bytes_out += io->len;
		s->counters.tier[s->mem->kind].bytes_in += io->len;
		return 0;
	}
	s->mem->ops->free(s->mem, it->mem_loc);
	if (io->res == -EBADMSG) {
		s->counters.checksum_failures++;
		s->counters.tier[from].errors++;
		err = -EIO;
	} else if (io->res == -EIO) {
		s->counters.tier[from].errors++;
		err = -EIO;
	} else if (io->res == -ENOENT && r->tier == from && r->loc == it->from_loc) {
		/* the tier dropped it before the index heard: an eviction,
		 * counted once (the dropped feed then finds the loc gone) */
		r->loc = KVT_LOC_NONE;
		s->counters.tier[from].evictions++;
		err = -ENOENT;
	} else {
		err = io->res ? io->res : -ENOENT;
	}
	/* a block that cannot be read back is dropped, never served */
	if (r->state == KVT_REC_LIVE)
		kvt_catalog_retire(&s->cat, it->rec);
	s->counters.get_misses++;
	kvt_catalog_busy(&s->cat, it->rec, -1);
	if (r->state == KVT_REC_DYING && r->busy == 0)
		kvt_tiering_discard(s, it->rec);
	return err;
}

/* A read by key is done (lock held): the pending record is published in the
 * memory tier and held for the caller, or forgotten. */
static int finish_key(struct kvt_fetch *f, struct item *it, struct kvt_tier_io *io)
{
	struct kvt_store *s = f->s;
	struct kvt_rec *r = rec(s, it->rec);
	enum kvt_tier from = it->from->kind;

	if (io->res || r->state != KVT_REC_PENDING) {
		if (io->res == -EBADMSG) {
			s->counters.checksum_failures++;
			s->counters.tier[from].errors++;
		}
		s->counters.get_misses++;
		kvt_tiering_discard(s, it->rec);
		return io->res == -EBADMSG ? -EIO : io->res ? io->res : -ENOENT;
	}
	kvt_catalog_publish(&s->cat, it->rec, s->mem->kind, it->has_parent ? &it->parent : NULL);
	kvt_catalog_touch(&s->cat, it->rec);
	kvt_catalog_busy(&s->cat, it->rec, +1);
	s->counters.tier[from].hits++;
	s->counters.tier[from].bytes_out += io->len;
	s->counters.tier[s->mem->kind].bytes_in += io->len;
	return 0;
}

static void on_done(struct kvt_tier_batch *b, size_t j)
{
	struct kvt_fetch *f = b->arg;
	size_t x = f->b_first[b - f->b] + j;
	struct item *it = &f->items[f->item_of_io[x]];
	struct kvt_store *s = f->s;
	int res;

	pthread_mutex_lock(&s->lock);
	res = it->from_loc == KVT_LOC_NONE ? finish_key(f, it, &f->io[x]) :
					     finish_loc(f, it, &f->io[x]);
	pthread_cond_broadcast(&s->moved);
	if (res == 0)
		kvt_tiering_kick(s);
	pthread_mutex_unlock(&s->lock);
	f->in_flight--;
	f->cb(f->arg, it->k, it->rec, res, f->in_flight);
}

size_t kvt_fetch_in_flight(const struct kvt_fetch *f)
{
	return f->in_flight;
}

void kvt_fetch_submit(struct kvt_fetch *f)
{
	struct kvt_store *s = f->s;
	size_t x = f->n_sub, nb0 = f->nb;

	/* the items added since the last submit, one batch per tier, each
	 * batch's records side by side in io[] after those already out */
	for (size_t j = f->n_sub; j < f->n; j++) {
		size_t t;

		for (t = nb0; t < f->nb && f->tiers[t] != f->items[j].from; t++)
			;
		if (t == f->nb)
			f->tiers[f->nb++] = f->items[j].from;
	}
	for (size_t t = nb0; t < f->nb; t++) {
		f->b_first[t] = x;
		for (size_t j = f->n_sub; j < f->n; j++) {
			struct item *it = &f->items[j];
			struct kvt_rec *r = rec(s, it->rec);
			struct kvt_ns *ns = s->ns[r->ns - 1];

			if (it->from != f->tiers[t])
				continue;
			f->io[x] = (struct kvt_tier_io){
				.ns_id = kvt_ns_storage_id(ns), .ns_salt = &ns->salt, .key = r->key,
				.buf = s->mem->ops->slot_ptr(s->mem, it->mem_loc), .len = r->size,
				.room = s->mem->headroom >= KVT_TIER_HEADROOM, .loc = it->from_loc,
				.by_key = it->from_loc == KVT_LOC_NONE };
			f->item_of_io[x++] = j;
		}
		f->b[t] = (struct kvt_tier_batch){ .io = f->io + f->b_first[t],
						   .n = x - f->b_first[t], .done_cb = on_done,
						   .arg = f };
	}
	f->n_sub = f->n;
	/* every tier's reads in flight at once */
	for (size_t t = nb0; t < f->nb; t++) {
		f->submitted[t] = !f->tiers[t]->ops->submit(f->tiers[t], &f->b[t]);
		if (!f->submitted[t])
			for (size_t j = 0; j < f->b[t].n; j++)
				on_done(&f->b[t], j);
	}
}

/* Drive the batches submitted and not driven yet to their end. */
static void drive(struct kvt_fetch *f)
{
	for (; f->nw < f->nb; f->nw++)
		if (f->submitted[f->nw])
			f->tiers[f->nw]->ops->wait(f->tiers[f->nw], &f->b[f->nw]);
}

void kvt_fetch_wait(struct kvt_fetch *f)
{
	kvt_fetch_submit(f);
	drive(f);
	f->nb = f->nw = 0;
	f->n = f->n_sub = f->in_flight = 0; /* ready for the next round of adds */
}
