/* SPDX-License-Identifier: Apache-2.0 */
/* kvt_read_into: blocks read from a storage tier straight into the caller's
 * memory (an engine's KV pages), with no DRAM slot in between. A LOAD of
 * blocks on SSD otherwise lands each in a DRAM slot, which may first have
 * to wait for the demoter to write another block out, and then copies it
 * once more; read so, the device's bytes go where they are wanted, and
 * the reads of a window need nothing from the DRAM tier. The first such
 * read leaves the block where it is; one read again is reused, and is
 * left to the caller's acquire, which brings it up into DRAM (a prefix
 * loaded twice is likely to be loaded again).
 *
 * Keys the index lacks after the found ones may be held by other nodes:
 * a keyed tier that reads into pieces (the peer tier over TCP) receives
 * them straight into the caller's memory too, with no record made here.
 * The store remembers such keys (s->read_keyed); a second read of one is
 * left to the acquire, which keeps it in DRAM as the cluster's copy. */
#include <errno.h>
#include <stdlib.h>

#include "store/store_blocks.h"
#include "store/tiering.h"

struct direct {
	uint32_t rec;             /* KVT_NIL: read by key (no record here) */
	size_t k;                 /* the caller's key */
	struct kvt_storage_tier *t;
};

struct read_into {
	struct kvt_ns *ns;
	const struct kvt_read_into *ri;
	struct direct *items;
	struct kvt_tier_io *io;   /* io[j] reads items[j] */
	size_t in_flight;
	int ok;
};


/* Count a read from tier `from` that served len bytes (ok) or failed. */
static void count_read_locked(struct kvt_store *s, enum kvt_tier from, bool ok, size_t len)
{
	s->counters.gets++;
	if (ok) {
		s->counters.tier[from].hits++;
		s->counters.tier[from].bytes_out += len;
	} else {
		s->counters.tier[from].errors++;
		s->counters.get_misses++;
	}
}

/* The read of item d ended with res (lock held): count it, let go of the
 * hold, and say what the caller gets. */
static int finish_locked(struct kvt_store *s, const struct direct *d, struct kvt_tier_io *io)
{
	struct kvt_rec *r = rec(s, d->rec);
	enum kvt_tier from = d->t->kind;
	bool same = r->state == KVT_REC_LIVE && r->tier == from && r->loc == io->loc;
	int res = io->res;

	if (res == 0) {
		if (same)
			r->flags |= KVT_REC_READ_STRAIGHT;
		count_read_locked(s, from, true, io->len);
	} else if (res == -EFAULT) {
		/* the caller's memory, not the record (tiers/tier.h): its
		 * acquire reads it again into a DRAM slot, and blames the
		 * record only if it fails there */
	} else if (res == -EBADMSG || res == -EIO) {
		/* a block that cannot be read back is dropped, never served */
		if (res == -EBADMSG)
			s->counters.checksum_failures++;
		count_read_locked(s, from, false, 0);
		if (same)
			kvt_catalog_retire(&s->cat, d->rec);
		res = -EIO;
	} else {
		/* stale, not readable into pieces, no memory: the caller's
		 * acquire finds out what became of it (and counts it) */
		res = -EAGAIN;
	}
	unhold_locked(s, d->rec);
	return res;
}

/* The read by key of item d ended with res (lock held): remember the key
 * when it came, and say what the caller gets (a block whose bytes failed
 * their checksum from every holder is -EIO; any other failure is left to
 * the caller's acquire, which asks again or reports the miss). */
static int finish_keyed_locked(struct kvt_ns *ns, const struct direct *d,
			       struct kvt_tier_io *io)
{
	struct kvt_store *s = ns->store;

	if (io->res == 0) {
		kvt_ghost_add(&s->read_keyed, kvt_ghost_hash_key(&io->key, ns->id), 0);
		count_read_locked(s, d->t->kind, true, io->len);
		return 0;
	}
	if (io->res == -EFAULT)
		return -EFAULT;
	if (io->res != -EBADMSG && io->res != -EIO)
		return -EAGAIN;
	s->counters.checksum_failures++;
	count_read_locked(s, d->t->kind, false, 0);
	return -EIO;
}

static void on_done(struct kvt_tier_batch *b, size_t j)
{
	struct read_into *x = b->arg;
	struct kvt_store *s = x->ns->store;
	size_t at = (size_t)(b->io - x->io) + j;
	const struct direct *d = &x->items[at];
	int res;

	pthread_mutex_lock(&s->lock);
	res = d->rec == KVT_NIL ? finish_keyed_locked(x->ns, d, &x->io[at]) :
				  finish_locked(s, d, &x->io[at]);
	pthread_mutex_unlock(&s->lock);
	x->ri->res[d->k] = res;
	x->ok += res == 0;
	x->in_flight--;
	if (x->ri->landed_cb)
		x->ri->landed_cb(x->ri->arg, d->k, res, x->in_flight);
}

/* Whether every piece is whole 4 KiB pages: what a tier reading with
 * O_DIRECT needs (tiers/tier.h). */
static bool whole_pages(const struct iovec *iov, unsigned cnt)
{
	uintptr_t bits = 0;

	for (unsigned k = 0; k < cnt; k++)
		bits |= (uintptr_t)iov[k].iov_base | iov[k].iov_len;
	return bits % 4096 == 0;
}

/* Look at every key in order (lock held): hold and queue in items/io the
 * blocks a storage tier can read into the caller's pieces, up to the first
 * key the index lacks. Returns how many were queued; *found gets the
 * number of leading keys the index holds. From the first key it lacks on,
 * the run of keys it lacks goes up to *keyed_end, to be asked of *keyed:
 * the first keyed tier (the one the acquire would ask first), where it
 * reads into pieces (else *keyed_end is *found). */
static size_t plan_locked(struct read_into *x, const struct kvt_key *keys, size_t n,
			  size_t *found, struct kvt_storage_tier **keyed, size_t *keyed_end)
{
	struct kvt_ns *ns = x->ns;
	struct kvt_store *s = ns->store;
	const struct kvt_read_into *ri = x->ri;
	size_t m = 0;

	*found = *keyed_end = n;
	for (size_t k = 0; k < n; k++) {
		uint32_t i = kvt_index_find(s->cat.idx, ns->id, &keys[k]);
		struct kvt_storage_tier *t;
		struct kvt_rec *r;

		if (i == KVT_NIL || rec(s, i)->state != KVT_REC_LIVE) {
			*found = k;
			*keyed_end = k;
			if (i == KVT_NIL && kvt_tiering_keyed(s, keyed, 1) &&
			    ((*keyed)->caps & KVT_TIER_CAP_READ_IOV))
				while (++*keyed_end < n &&
				       kvt_index_find(s->cat.idx, ns->id, &keys[*keyed_end]) == KVT_NIL)
					;
			break;
		}
		r = rec(s, i);
		if (r->tier == s->mem->kind || (r->flags & (KVT_REC_MOVING | KVT_REC_READ_STRAIGHT)) ||
		    r->loc == KVT_LOC_NONE || r->size != ns->block_bytes)
			continue;
		t = kvt_tiering_tier(s, (enum kvt_tier)r->tier);
		if (!t || !(t->caps & KVT_TIER_CAP_READ_IOV) ||
		    !whole_pages(ri->dst[k], ri->dst_cnt[k]))
			continue;
		hold_locked(s, i);
		x->items[m] = (struct direct){ .rec = i, .k = k, .t = t };
		x->io[m++] = (struct kvt_tier_io){
			.ns_id = kvt_ns_storage_id(ns), .ns_salt = &ns->salt, .key = r->key,
			.len = r->size, .loc = r->loc, .iov = ri->dst[k], .iovcnt = ri->dst_cnt[k] };
	}
	return m;
}

/* Queue in items/io, from m on, the reads by key of keys [*found, end),
 * which the index lacks, as far as tier t answers for them (its lookup is
 * one round trip; lock not held). Keys read so before are found, and left
 * to the acquire. Returns the new count of queued reads; *found grows by
 * the keys the tier answers for. */
static size_t plan_keyed(struct read_into *x, const struct kvt_key *keys, size_t m,
			 size_t *found, struct kvt_storage_tier *t, size_t end)
{
	struct kvt_ns *ns = x->ns;
	struct kvt_store *s = ns->store;
	size_t from = *found;
	int held;

	if (end == from)
		return m;
	held = t->ops->lookup(t, kvt_ns_storage_id(ns), keys + from, end - from);
	if (held <= 0)
		return m;
	pthread_mutex_lock(&s->lock);
	for (size_t k = from; k < from + (size_t)held; k++) {
		unsigned tag;
		uint64_t age;

		if (kvt_ghost_take(&s->read_keyed, kvt_ghost_hash_key(&keys[k], ns->id), &tag, &age))
			continue; /* read before: the acquire keeps it this time */
		x->items[m] = (struct direct){ .rec = KVT_NIL, .k = k, .t = t };
		x->io[m++] = (struct kvt_tier_io){
			.ns_id = kvt_ns_storage_id(ns), .ns_salt = &ns->salt, .key = keys[k],
			.by_key = true, .len = ns->block_bytes, .iov = x->ri->dst[k],
			.iovcnt = x->ri->dst_cnt[k] };
	}
	pthread_mutex_unlock(&s->lock);
	*found = from + (size_t)held;
	return m;
}

/* Put items [0, m) in order of their tier, io beside them, so that each
 * tier's reads are one run of io[]. */
static void group_by_tier(struct read_into *x, size_t m)
{
	for (size_t a = 1; a < m; a++) {
		struct direct d = x->items[a];
		struct kvt_tier_io io = x->io[a];
		size_t b = a;

		for (; b > 0 && x->items[b - 1].t->kind > d.t->kind; b--) {
			x->items[b] = x->items[b - 1];
			x->io[b] = x->io[b - 1];
		}
		x->items[b] = d;
		x->io[b] = io;
	}
}

int kvt_read_into(struct kvt_ns *ns, const struct kvt_key *keys, size_t n,
		  const struct kvt_read_into *ri)
{
	struct read_into x = { .ns = ns, .ri = ri };
	struct kvt_tier_batch b[KVT_MAX_STORAGE_TIERS];
	bool submitted[KVT_MAX_STORAGE_TIERS];
	struct kvt_storage_tier *keyed = NULL;
	size_t m, found, keyed_end, nb = 0;
	struct kvt_store *s;

	if (!ns || !ri || (n && (!keys || !ri->dst || !ri->dst_cnt || !ri->res)) || n > INT32_MAX)
		return -EINVAL;
	for (size_t k = 0; k < n; k++)
		ri->res[k] = -EAGAIN;
	if (!n)
		return 0;
	s = ns->store;
	x.items = malloc(n * sizeof(*x.items));
	x.io = malloc(n * sizeof(*x.io));
	if (!x.items || !x.io) {
		free(x.items);
		free(x.io);
		return -ENOMEM;
	}
	pthread_mutex_lock(&s->lock);
	m = plan_locked(&x, keys, n, &found, &keyed, &keyed_end);
	pthread_mutex_unlock(&s->lock);
	m = plan_keyed(&x, keys, m, &found, keyed, keyed_end);
	if (ri->planned_cb)
		ri->planned_cb(ri->arg, found);

	group_by_tier(&x, m);
	x.in_flight = m;
	for (size_t j = 0; j < m; nb++) {
		size_t j0 = j;

		while (j < m && x.items[j].t == x.items[j0].t)
			j++;
		b[nb] = (struct kvt_tier_batch){ .io = x.io + j0, .n = j - j0, .done_cb = on_done,
						 .arg = &x };
		/* a refused batch has every res set, nothing in flight */
		submitted[nb] = x.items[j0].t->ops->submit(x.items[j0].t, &b[nb]) == 0;
		if (!submitted[nb])
			for (size_t i = 0; i < b[nb].n; i++)
				on_done(&b[nb], i);
	}
	for (size_t t = 0; t < nb; t++)
		if (submitted[t])
			x.items[b[t].io - x.io].t->ops->wait(x.items[b[t].io - x.io].t, &b[t]);
	if ((size_t)x.ok < m) {
		/* a failing read may have taken a device out: its blocks leave
		 * the index now, not at the demoter's next pass (tiers/ssd_stripe.h) */
		pthread_mutex_lock(&s->lock);
		kvt_tiering_forget_dropped(s);
		pthread_mutex_unlock(&s->lock);
	}
	free(x.items);
	free(x.io);
	return x.ok;
}
