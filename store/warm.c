/* SPDX-License-Identifier: Apache-2.0 */
/* The store across a restart of its process: see warm.h. */
#include "store/warm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store/catalog.h"
#include "util/log.h"
#include "store/tiering.h"
#include "tiers/dram.h"
#include "tiers/warm_region.h"
#include "util/block_sum.h"
#include "util/clock.h"

_Static_assert(KVT_WARM_MAX_NS >= MAX_NAMESPACES,
	       "the region keeps every namespace a store can have");


/* The catalog's report that record i became live in a tier: in the memory
 * tier, its slot's header is written (committed). */
static void placed_cb(void *arg, uint32_t i)
{
	struct kvt_store *s = arg;
	struct kvt_rec *r = rec(s, i);
	struct kvt_warm_slot h;

	if (r->tier != s->mem->kind || r->state != KVT_REC_LIVE)
		return;
	/* a block fetched by key from a peer has no checksum yet */
	if (!r->checksum)
		r->checksum = kvt_block_sum(s->mem->ops->slot_ptr(s->mem, r->loc), r->size);
	memset(&h, 0, sizeof(h));
	h.len = r->size;
	h.key = r->key;
	h.ns = s->ns[r->ns - 1]->salt;
	h.checksum = r->checksum;
	h.depth = r->depth;
	h.reuse_class = r->reuse_class;
	if (r->parent != KVT_NIL) {
		h.parent = rec(s, r->parent)->key;
		h.has_parent = 1;
	}
	kvt_dram_slot_commit(s->mem, r->loc, &h);
}

void kvt_warm_init(struct kvt_store *s)
{
	struct kvt_warm_region *wr = kvt_dram_warm(s->mem);

	s->warm = wr != NULL;
	if (!wr)
		return;
	s->warm_stats.on = true;
	s->warm_stats.adopted = wr->adopted;
	s->warm_stats.refused = !wr->adopted && wr->refusal != KVT_WARM_ADOPTED;
	s->warm_stats.generation = kvt_warm_generation(wr);
}

void kvt_warm_ns_attached(struct kvt_store *s, struct kvt_ns *ns)
{
	struct kvt_warm_region *wr = s->warm ? kvt_dram_warm(s->mem) : NULL;

	/* not reached while the table has an entry per namespace id */
	if (wr && kvt_warm_ns_put(wr, &ns->salt, &ns->desc))
		kvt_log(KVT_LOG_ERROR, "event=dram.warm.ns_table_full model=%s reason=\"its blocks "
			"will not survive a restart in DRAM\"", ns->desc.model_id);
}

void kvt_warm_ns_detached(struct kvt_store *s, struct kvt_ns *ns)
{
	struct kvt_warm_region *wr = s->warm ? kvt_dram_warm(s->mem) : NULL;

	if (wr)
		kvt_warm_ns_drop(wr, &ns->salt);
}

int kvt_warm_verify(struct kvt_store *s, uint32_t i, bool held)
{
	struct kvt_rec *r = rec(s, i);

	if (!(r->flags & KVT_REC_UNVERIFIED))
		return 0;
	if (r->tier != s->mem->kind ||
	    kvt_block_sum(s->mem->ops->slot_ptr(s->mem, r->loc), r->size) == r->checksum) {
		r->flags &= (uint8_t)~KVT_REC_UNVERIFIED;
		s->warm_stats.verified++;
		return 0;
	}
	s->warm_stats.dropped_checksum++;
	s->counters.checksum_failures++;
	s->counters.tier[r->tier].errors++;
	kvt_log(KVT_LOG_WARN, "event=dram.warm.dropped reason=checksum bytes=%u", r->size);
	if (!held)
		kvt_tiering_discard(s, i);
	else if (r->state == KVT_REC_LIVE)
		kvt_catalog_retire(&s->cat, i);
	return -EIO;
}

/* Attach the namespaces of the region's table whose descriptor still
 * digests to the fingerprint kept with it. Returns how many were not. */
static uint64_t attach_namespaces(struct kvt_store *s, struct kvt_warm_region *wr)
{
	uint32_t used = kvt_warm_ns_used(wr);
	uint64_t bad = 0;

	for (uint32_t k = 0; k < used; k++) {
		struct kvt_warm_ns e = wr->ns_table[k];
		struct kvt_key salt;
		struct kvt_ns *ns;

		if (e.state != KVT_WARM_COMMITTED)
			continue;
		if (e.desc_bytes != sizeof(e.desc) || e.desc.size != sizeof(e.desc) ||
		    kvt_ns_digest(&e.desc, &salt) || memcmp(&salt, &e.salt, sizeof(salt)) ||
		    kvt_ns_attach(s, &e.desc, &ns)) {
			kvt_warm_ns_drop(wr, &e.salt);
			bad++;
		}
	}
	return bad;
}

static struct kvt_ns *ns_of_salt(struct kvt_store *s, const struct kvt_key *salt)
{
	for (uint32_t i = 0; i < s->n_ns; i++)
		if (s->ns[i] && !memcmp(&s->ns[i]->salt, salt, sizeof(*salt)))
			return s->ns[i];
	return NULL;
}

/* A block found in the region, to index. */
struct found {
	uint64_t loc;
	uint32_t depth;
	struct kvt_ns *ns;
};

static int by_depth(const void *a, const void *b)
{
	const struct found *x = a, *y = b;

	return x->depth < y->depth ? -1 : x->depth > y->depth;
}

/* Index the block of slot f (lock held). One a storage tier already had
 * (indexed as its namespace attached) moves up to the slot, its record
 * there kept as the block's clean copy. Returns whether it was indexed. */
static bool index_found(struct kvt_store *s, const struct found *f)
{
	const struct kvt_warm_slot *h = kvt_dram_slot_hdr(s->mem, f->loc);
	uint32_t i;
	int err = kvt_index_insert(s->cat.idx, f->ns->id, &h->key, &i);
	struct kvt_rec *r;

	if (err == -EEXIST) {
		r = rec(s, i);
		if (r->state != KVT_REC_LIVE || r->tier == s->mem->kind || r->loc == KVT_LOC_NONE ||
		    !kvt_tiering_keep_copy(s, i, (enum kvt_tier)r->tier, r->loc))
			return false;
		r->checksum = h->checksum;
		r->flags |= KVT_REC_UNVERIFIED;
		kvt_tiering_move(s, i, s->mem->kind, f->loc);
		return true;
	}
	if (err)
		return false;
	r = rec(s, i);
	r->size = h->len;
	r->loc = f->loc;
	r->checksum = h->checksum;
	r->reuse_class = h->reuse_class;
	r->flags |= KVT_REC_UNVERIFIED;
	kvt_catalog_publish(&s->cat, i, s->mem->kind, h->has_parent ? &h->parent : NULL);
	return true;
}

int kvt_warm_rebuild(struct kvt_store *s)
{
	struct kvt_warm_region *wr = kvt_dram_warm(s->mem);
	uint64_t t0 = kvt_now_ns();
	struct kvt_dram_found df;
	struct found *v = NULL;
	uint64_t bad_ns = 0;
	size_t n = 0;
	int err = 0;

	kvt_warm_init(s);
	if (!wr)
		return 0;
	kvt_dram_found(s->mem, &df);
	s->warm_stats.dropped_torn = df.torn;
	s->warm_stats.dropped_header = df.bad_header;
	if (wr->adopted && (bad_ns = attach_namespaces(s, wr)))
		kvt_log(KVT_LOG_WARN, "event=dram.warm.ns_refused namespaces=%llu reason=\"their "
			"descriptors do not digest to their fingerprints\"", (unsigned long long)bad_ns);
	if (df.n && !(v = malloc(df.n * sizeof(*v))))
		err = -ENOMEM;
	pthread_mutex_lock(&s->lock);
	for (size_t k = 0; err && k < df.n; k++)
		s->mem->ops->free(s->mem, df.locs[k]); /* nothing indexed: all let go */
	for (size_t k = 0; !err && k < df.n; k++) {
		const struct kvt_warm_slot *h = kvt_dram_slot_hdr(s->mem, df.locs[k]);
		struct kvt_ns *ns = ns_of_salt(s, &h->ns);

		if (!ns || h->len != ns->block_bytes) {
			/* no namespace to serve it in, or not its size */
			s->warm_stats.dropped_namespace += !ns;
			s->warm_stats.dropped_header += ns != NULL;
			s->mem->ops->free(s->mem, df.locs[k]);
			continue;
		}
		v[n++] = (struct found){ .loc = df.locs[k], .depth = h->depth, .ns = ns };
	}
	/* parents before their children, so the prefix links come back */
	if (n)
		qsort(v, n, sizeof(*v), by_depth);
	for (size_t k = 0; k < n; k++) {
		if (index_found(s, &v[k])) {
			s->warm_stats.blocks++;
			s->warm_stats.bytes += v[k].ns->block_bytes;
		} else {
			s->warm_stats.dropped_header++;
			s->mem->ops->free(s->mem, v[k].loc);
		}
	}
	/* from now on, a block that becomes live in DRAM gets its header */
	s->cat.placed_cb = placed_cb;
	s->cat.placed_arg = s;
	pthread_mutex_unlock(&s->lock);
	free(v);
	kvt_dram_found_done(s->mem);
	s->warm_stats.rebuild_us = (kvt_now_ns() - t0) / 1000;
	if (wr->adopted)
		kvt_log(KVT_LOG_INFO, "event=dram.warm.rebuilt blocks=%llu bytes=%llu torn=%llu "
			"bad_header=%llu no_namespace=%llu generation=%llu rebuild_us=%llu",
			(unsigned long long)s->warm_stats.blocks,
			(unsigned long long)s->warm_stats.bytes,
			(unsigned long long)s->warm_stats.dropped_torn,
			(unsigned long long)s->warm_stats.dropped_header,
			(unsigned long long)s->warm_stats.dropped_namespace,
			(unsigned long long)s->warm_stats.generation,
			(unsigned long long)s->warm_stats.rebuild_us);
	return err;
}
