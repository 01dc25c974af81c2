/* SPDX-License-Identifier: Apache-2.0 */
/* Reading blocks (include/kvtier/store.h): acquire a slot in the memory
 * tier (read up from a storage tier when the block is below), get a copy,
 * release a slot acquired. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier/store.h"
#include "store/catalog.h"
#include "store/fetch.h"
#include "store/store_blocks.h"
#include "store/tiering.h"
#include "store/warm.h"
#include "util/block_sum.h"

/* Verify a block in the memory tier when checksums are kept at put. A
 * mismatch drops the block: wrong bytes are never served. Returns 0 or
 * -EIO. */
static int verify_locked(struct kvt_store *s, uint32_t i, const void *bytes)
{
	struct kvt_rec *r = rec(s, i);

	/* a block found in a region handed over is checked at its first use */
	if (r->flags & KVT_REC_UNVERIFIED)
		return kvt_warm_verify(s, i, true);
	if (!s->opts.checksum_on_put || r->checksum == 0 ||
	    kvt_block_sum(bytes, r->size) == r->checksum)
		return 0;
	s->counters.checksum_failures++;
	s->counters.tier[r->tier].errors++;
	if (r->state == KVT_REC_LIVE)
		kvt_catalog_retire(&s->cat, i);
	return -EIO;
}

/* ---- reading blocks ----------------------------------------------------- */

/* Rounds of kvt_acquire_many for a block another reader was bringing up
 * (each round finds it in memory, unless it went down again meanwhile). */
#define ACQUIRE_ROUNDS 16

/* One kvt_acquire_many call. */
struct acquire {
	struct kvt_ns *ns;
	const struct kvt_key *keys;
	struct kvt_slot *slots;
	int *res;
	kvt_acquire_cb cb;
	void *arg;
	struct kvt_fetch *f;    /* this round's reads */
	int ok;
	size_t *now, n_now;     /* lent under the lock, reported once it is let go */
	size_t *later, n_later; /* moving up for another reader: next round */
	size_t *miss, n_miss;   /* not in the index: asked of KEYED tiers */
	bool local;             /* KEYED tiers are not asked (kvt_acquire_local) */
	bool full;              /* the memory tier had no slot this round */
	size_t untaken;         /* keys of this round not taken yet */
};

/* What take_locked did with a key. */
enum { TAKE_NOW, TAKE_QUEUED, TAKE_LATER };

/* Key k's block is done: res 0 (slots[k] lent) or -errno. Lock not held. */
static void done(struct acquire *a, size_t k, int res)
{
	a->res[k] = res;
	a->ok += res == 0;
	if (a->cb)
		a->cb(a->arg, k, res, kvt_fetch_in_flight(a->f) + a->n_later + a->untaken);
}

/* Lend record i (in the memory tier, held busy for the caller) as slots[k],
 * verified where checksums are kept. Returns 0, or -EIO (the hold is
 * dropped). Lock held. */
static int lend_locked(struct acquire *a, size_t k, uint32_t i)
{
	struct kvt_store *s = a->ns->store;
	struct kvt_slot *slot = &a->slots[k];

	slot->data = s->mem->ops->slot_ptr(s->mem, rec(s, i)->loc);
	slot->len = a->ns->block_bytes;
	if (verify_locked(s, i, slot->data)) {
		unhold_locked(s, i);
		slot->data = NULL;
		return -EIO;
	}
	/* verified: a block found at a restart is no longer flagged */
	slot_lend_stored(slot, i, rec(s, i)->size == slot->len ? rec(s, i)->checksum : 0);
	s->counters.tier[rec(s, i)->tier].bytes_out += slot->len;
	return 0;
}

/* Take key k: a block in memory is held and lent now, one in a storage
 * tier is held and queued in f, one moving up for another reader is left
 * for the next round. Returns TAKE_*, or -ENOENT (not stored), or the
 * errors of kvt_fetch_add; once the memory tier had no slot, later blocks
 * that need one get -ENOSPC at once. Lock held (let go while the memory
 * tier makes room). */
static int take_locked(struct acquire *a, struct kvt_fetch *f, size_t k, bool first)
{
	struct kvt_store *s = a->ns->store;
	uint32_t i = kvt_index_find(s->cat.idx, a->ns->id, &a->keys[k]);
	int rc;

	if (first)
		s->counters.gets++;
	if (i == KVT_NIL || rec(s, i)->state != KVT_REC_LIVE)
		return -ENOENT;
	if (rec(s, i)->flags & KVT_REC_MOVING)
		return TAKE_LATER;
	hold_locked(s, i);
	if (first)
		s->counters.tier[rec(s, i)->tier].hits++;
	if (rec(s, i)->tier == s->mem->kind) {
		rc = lend_locked(a, k, i);
		return rc ? rc : TAKE_NOW;
	}
	rc = a->full ? -ENOSPC : kvt_fetch_add(f, i, k);
	a->full = a->full || rc == -ENOSPC;
	if (rc == KVT_FETCH_QUEUED)
		return TAKE_QUEUED;
	if (rc == KVT_FETCH_IN_MEM) {
		rc = lend_locked(a, k, i);
		return rc ? rc : TAKE_NOW;
	}
	unhold_locked(s, i);
	return rc == KVT_FETCH_MOVING ? TAKE_LATER : rc;
}

/* A block read up by f: lend it, or report its failure. */
static void fetched(void *arg, size_t k, uint32_t i, int res, size_t in_flight)
{
	struct acquire *a = arg;
	struct kvt_store *s = a->ns->store;

	(void)in_flight; /* done() asks the fetch */
	if (!res) {
		pthread_mutex_lock(&s->lock);
		res = lend_locked(a, k, i);
		pthread_mutex_unlock(&s->lock);
	}
	done(a, k, res);
}

/* Queue the blocks of a->miss that a KEYED tier answers for in f (each read
 * by key into a fresh slot); the rest are misses. Lock not held. */
static void take_keyed(struct acquire *a, struct kvt_fetch *f)
{
	struct kvt_store *s = a->ns->store;
	struct kvt_storage_tier *keyed[KVT_MAX_STORAGE_TIERS];
	struct kvt_key *mk = NULL;
	size_t n_keyed, from = 0;

	pthread_mutex_lock(&s->lock);
	n_keyed = a->local ? 0 : kvt_tiering_keyed(s, keyed, KVT_MAX_STORAGE_TIERS);
	pthread_mutex_unlock(&s->lock);
	if (n_keyed && a->n_miss && (mk = malloc(a->n_miss * sizeof(*mk)))) {
		for (size_t j = 0; j < a->n_miss; j++)
			mk[j] = a->keys[a->miss[j]];
		/* each tier answers for the leading run of what is still missing */
		for (size_t t = 0; t < n_keyed && from < a->n_miss; t++) {
			int c = keyed[t]->ops->lookup(keyed[t], kvt_ns_storage_id(a->ns), mk + from,
						      a->n_miss - from);

			pthread_mutex_lock(&s->lock);
			for (; c > 0 && from < a->n_miss; c--, from++) {
				size_t k = a->miss[from];
				int rc = kvt_fetch_add_key(f, a->ns, keyed[t], &a->keys[k],
							   k ? &a->keys[k - 1] : NULL, k);

				if (rc == -EEXIST)
					a->later[a->n_later++] = k; /* stored meanwhile */
				else if (rc)
					a->now[a->n_now++] = k, a->res[k] = rc;
			}
			pthread_mutex_unlock(&s->lock);
		}
		free(mk);
	}
	pthread_mutex_lock(&s->lock);
	s->counters.get_misses += a->n_miss - from;
	pthread_mutex_unlock(&s->lock);
	for (size_t j = from; j < a->n_miss; j++)
		done(a, a->miss[j], -ENOENT);
	a->n_miss = 0;
}

static int acquire_many(struct kvt_ns *ns, const struct kvt_key *keys, size_t n,
			struct kvt_slot *slots, int *res, kvt_acquire_cb cb, void *arg, bool local)
{
	struct acquire a = { .ns = ns, .keys = keys, .slots = slots, .res = res, .cb = cb,
			     .arg = arg, .local = local };
	struct kvt_store *s;
	struct kvt_fetch *f;
	size_t *todo;
	size_t n_todo = n;

	if (!ns || (n && (!keys || !slots || !res)) || n > INT32_MAX)
		return -EINVAL;
	if (!n)
		return 0;
	s = ns->store;
	a.f = f = kvt_fetch_new(s, n, fetched, &a);
	todo = malloc(4 * n * sizeof(*todo));
	if (!f || !todo) {
		kvt_fetch_free(f);
		free(todo);
		return -ENOMEM;
	}
	a.now = todo + n;
	a.later = todo + 2 * n;
	a.miss = todo + 3 * n;
	for (size_t k = 0; k < n; k++) {
		todo[k] = k;
		slots[k].data = NULL;
	}
	for (int round = 0; n_todo; round++) {
		a.n_now = a.n_later = 0;
		a.full = false;
		pthread_mutex_lock(&s->lock);
		for (size_t j = 0; j < n_todo; j++) {
			size_t k = todo[j];
			int rc;

			/* reads may be driven while later keys wait for room */
			a.untaken = n_todo - j - 1;
			rc = round < ACQUIRE_ROUNDS ? take_locked(&a, f, k, round == 0) : -EBUSY;

			if (rc == TAKE_LATER) {
				a.later[a.n_later++] = k;
			} else if (rc == -ENOENT && round == 0) {
				a.miss[a.n_miss++] = k;
			} else if (rc != TAKE_QUEUED) {
				if (rc < 0)
					s->counters.get_misses++;
				a.res[k] = rc < 0 ? rc : 0;
				a.now[a.n_now++] = k;
			}
		}
		a.untaken = 0;
		pthread_mutex_unlock(&s->lock);
		if (a.n_miss)
			take_keyed(&a, f);
		/* reads in flight first, then what was at hand is reported */
		kvt_fetch_submit(f);
		for (size_t j = 0; j < a.n_now; j++)
			done(&a, a.now[j], a.res[a.now[j]]);
		kvt_fetch_wait(f);
		if (!a.n_later)
			break;
		/* blocks other readers are bringing up: wait for them to land */
		pthread_mutex_lock(&s->lock);
		for (size_t j = 0; j < a.n_later; j++) {
			uint32_t i;

			while ((i = kvt_index_find(s->cat.idx, ns->id, &keys[a.later[j]])) != KVT_NIL &&
			       (rec(s, i)->flags & KVT_REC_MOVING))
				pthread_cond_wait(&s->moved, &s->lock);
		}
		pthread_mutex_unlock(&s->lock);
		memcpy(todo, a.later, a.n_later * sizeof(*todo));
		n_todo = a.n_later;
	}
	kvt_fetch_free(f);
	free(todo);
	return a.ok;
}

int kvt_acquire_many(struct kvt_ns *ns, const struct kvt_key *keys, size_t n,
		     struct kvt_slot *slots, int *res, kvt_acquire_cb cb, void *arg)
{
	return acquire_many(ns, keys, n, slots, res, cb, arg, false);
}

static int acquire_one(struct kvt_ns *ns, const struct kvt_key *key, struct kvt_slot *slot,
		       bool local)
{
	int res = 0, rc;

	if (!ns || !key || !slot)
		return -EINVAL;
	rc = acquire_many(ns, key, 1, slot, &res, NULL, NULL, local);
	return rc < 0 ? rc : res;
}

int kvt_acquire(struct kvt_ns *ns, const struct kvt_key *key, struct kvt_slot *slot)
{
	return acquire_one(ns, key, slot, false);
}

int kvt_acquire_local(struct kvt_ns *ns, const struct kvt_key *key, struct kvt_slot *slot)
{
	return acquire_one(ns, key, slot, true);
}

/* kvt_get_many: each block is copied out and let go as it comes. */
struct get_many {
	struct kvt_ns *ns;
	struct kvt_slot *slots;
	void *const *bufs;
	size_t len;
};

static void got(void *arg, size_t k, int res, size_t reading)
{
	struct get_many *g = arg;

	(void)reading;
	if (res)
		return;
	memcpy(g->bufs[k], g->slots[k].data, g->len);
	kvt_release(g->ns, &g->slots[k]);
}

int kvt_get_many(struct kvt_ns *ns, const struct kvt_key *keys, size_t n, void *const *bufs,
		 size_t len, int *res)
{
	struct get_many g = { .ns = ns, .len = len };
	struct kvt_key *mk;
	void **mbufs;
	size_t *idx, m = n;
	int *mres, copied = 0, rc = -ENOMEM;

	if (!ns || (n && (!keys || !bufs || !res)) || len != ns->block_bytes || n > INT32_MAX)
		return -EINVAL;
	for (size_t k = 0; k < n; k++)
		if (!bufs[k])
			return -EINVAL;
	if (!n)
		return 0;
	g.slots = malloc(n * sizeof(*g.slots));
	mk = malloc(n * sizeof(*mk));
	mbufs = malloc(n * sizeof(*mbufs));
	idx = malloc(n * sizeof(*idx));
	mres = malloc(n * sizeof(*mres));
	if (!g.slots || !mk || !mbufs || !idx || !mres)
		goto out;
	for (size_t k = 0; k < n; k++) {
		idx[k] = k;
		mk[k] = keys[k];
		mbufs[k] = bufs[k];
	}
	g.bufs = mbufs;
	/* more blocks than DRAM holds: a round's blocks are let go as they
	 * are copied, so those it had no slot for are tried again, for as
	 * long as rounds copy something */
	for (;;) {
		size_t left = 0;

		rc = kvt_acquire_many(ns, mk, m, g.slots, mres, got, &g);
		if (rc < 0)
			break;
		copied += rc;
		for (size_t j = 0; j < m; j++) {
			res[idx[j]] = mres[j];
			if (mres[j] == -ENOSPC) {
				idx[left] = idx[j];
				mk[left] = mk[j];
				mbufs[left++] = mbufs[j];
			}
		}
		if (!rc || !left)
			break;
		m = left;
	}
	rc = rc < 0 && !copied ? rc : copied;
out:
	free(mres);
	free(idx);
	free(mbufs);
	free(mk);
	free(g.slots);
	return rc;
}

int kvt_get(struct kvt_ns *ns, const struct kvt_key *key, void *buf, size_t len)
{
	int res = 0, rc;

	if (!ns || !key || !buf)
		return -EINVAL;
	rc = kvt_get_many(ns, key, 1, &buf, len, &res);
	return rc < 0 ? rc : res;
}

void kvt_release(struct kvt_ns *ns, struct kvt_slot *slot)
{
	struct kvt_store *s;
	uint64_t handle;
	uint32_t i;

	if (!ns || !slot || !slot->data)
		return;
	handle = slot_get(slot).handle;
	if (handle >= UINT32_MAX)
		return;
	s = ns->store;
	i = (uint32_t)handle;
	pthread_mutex_lock(&s->lock);
	if (kvt_index_valid(s->cat.idx, i) && rec(s, i)->busy > 0 && rec(s, i)->ns == ns->id)
		unhold_locked(s, i);
	slot->data = NULL;
	pthread_mutex_unlock(&s->lock);
}

int kvt_slot_sum(struct kvt_ns *ns, const struct kvt_slot *slot, uint64_t *xxh3)
{
	struct slot_priv p;

	if (!ns || !slot || !slot->data || !xxh3)
		return -EINVAL;
	p = slot_get(slot);
	if (p.handle >= UINT32_MAX || p.has_parent)
		return -EINVAL;
	if (!p.sum)
		return -ENOENT;
	*xxh3 = p.sum;
	return 0;
}
