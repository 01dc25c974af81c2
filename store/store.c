/* The store: namespaces and the block operations of include/kvtier/store.h.
 *
 * One mutex guards the catalog (index, policies, accounting) and the tiers'
 * allocators; block bytes are copied outside it. A record being copied is
 * held busy, so the policy never picks it and remove only retires it: the
 * last reader frees it. Eviction order is global across namespaces, which is
 * why a single lock (rather than shards) guards the catalog; the critical
 * sections are short (a hash probe and a few list links per block). */
#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <xxhash.h>

#include "kvtier/store.h"
#include "store/catalog.h"
#include "store/store_impl.h"
#include "store/tiering.h"
#include "tiers/dram.h"
#include "util/opts.h"

static const struct kvt_store_opts store_defaults = {
	.size = sizeof(struct kvt_store_opts),
	.dram_huge_pages = true,
	.policy = "tail-lru",
	.dram_high_watermark = 0.90,
	.dram_low_watermark = 0.75,
};

void kvt_store_opts_init(struct kvt_store_opts *opts, size_t size_bytes)
{
	kvt_opts_init(opts, size_bytes, &store_defaults, sizeof(store_defaults));
}

int kvt_store_open(const struct kvt_store_opts *opts, struct kvt_store **out)
{
	struct kvt_store_opts o = store_defaults;
	struct kvt_dram_opts dopts;
	const struct kvt_policy_ops *policy;
	struct kvt_store *s;
	int err;

	if (!out || kvt_opts_load(&o, sizeof(o), opts) || o.dram_bytes == 0)
		return -EINVAL;
	policy = kvt_policy_find(o.policy ? o.policy : "tail-lru");
	if (!policy)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->opts = o;
	s->opts.ssd_dir = NULL; /* not kept: the caller owns the string */
	s->opts.policy = policy->name;

	kvt_dram_opts_init(&dopts, sizeof(dopts));
	dopts.bytes = o.dram_bytes;
	dopts.slab_bytes = o.dram_slab_bytes;
	dopts.huge_pages = o.dram_huge_pages;
	if (dopts.slab_bytes == 0 && dopts.bytes < KVT_DRAM_DEFAULT_SLAB)
		dopts.slab_bytes = dopts.bytes & ~(uint64_t)(KVT_DRAM_SLOT_ALIGN - 1);
	err = kvt_dram_open(&dopts, &s->dram);
	if (err)
		goto fail_free;
	/* room for the records of a full DRAM tier of 64 KiB blocks */
	err = kvt_catalog_init(&s->cat, policy, o.dram_bytes / (64 << 10));
	if (err)
		goto fail_dram;
	err = pthread_mutex_init(&s->lock, NULL);
	if (err) {
		err = -err;
		goto fail_catalog;
	}
	if (o.ssd_dir) {
		err = kvt_tiering_open(s, &o);
		if (err)
			goto fail_lock;
	}
	*out = s;
	return 0;

fail_lock:
	pthread_mutex_destroy(&s->lock);
fail_catalog:
	kvt_catalog_fini(&s->cat);
fail_dram:
	s->dram->ops->close(s->dram);
fail_free:
	free(s);
	return err;
}

void kvt_store_close(struct kvt_store *s)
{
	if (!s)
		return;
	kvt_tiering_close(s); /* stops the demoter before anything it uses goes */
	for (uint32_t i = 0; i < s->n_ns; i++)
		free(s->ns[i]);
	free(s->ns);
	free(s->free_ids);
	kvt_catalog_fini(&s->cat);
	s->dram->ops->close(s->dram);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

int kvt_store_dram_region(struct kvt_store *s, void **base, uint64_t *len)
{
	if (!s || !base || !len)
		return -EINVAL;
	*base = kvt_dram_region(s->dram, len);
	return 0;
}

/* ---- namespaces --------------------------------------------------------- */

/* The caller's descriptor as a whole one (fields it lacks at their
 * defaults). Returns 0 or -EINVAL. */
static int ns_desc_load(const struct kvt_ns_desc *desc, struct kvt_ns_desc *d)
{
	kvt_ns_desc_init(d, sizeof(*d));
	return kvt_opts_load(d, sizeof(*d), desc);
}

/* Block bytes of a whole descriptor, 0 when it is invalid. */
static uint64_t block_bytes_of(const struct kvt_ns_desc *d)
{
	uint64_t planes, elem;

	if (!d->layers || !d->kv_heads || !d->head_dim ||
	    !d->block_tokens || !d->tp_size || d->tp_rank >= d->tp_size ||
	    d->tenant_salt_len > KVT_SALT_MAX)
		return 0;
	switch (d->layout) {
	case KVT_LAYOUT_PAGED_KV:
	case KVT_LAYOUT_SPLIT_KV:
		planes = 2;
		break;
	case KVT_LAYOUT_MLA:
		planes = 1;
		break;
	default:
		return 0;
	}
	elem = kvt_dtype_bytes(d->dtype);
	if (!elem)
		return 0;
	/* a descriptor comes from a client: a product that wraps is invalid */
	{
		uint64_t f[] = { d->layers, d->kv_heads, d->head_dim, elem, d->block_tokens };
		uint64_t bytes = planes;
		for (size_t k = 0; k < sizeof(f) / sizeof(f[0]); k++)
			if (__builtin_mul_overflow(bytes, f[k], &bytes))
				return 0;
		return bytes;
	}
}

uint64_t kvt_ns_desc_block_bytes(const struct kvt_ns_desc *desc)
{
	struct kvt_ns_desc d;

	return ns_desc_load(desc, &d) ? 0 : block_bytes_of(&d);
}

/* The namespace's identity: SHA-256 over every field that defines it, in a
 * fixed little-endian encoding, so it is stable across runs and machines. */
static int ns_digest(const struct kvt_ns_desc *d, struct kvt_key *out)
{
	uint32_t fields[] = { (uint32_t)d->layout, (uint32_t)d->dtype, d->layers, d->kv_heads,
			      d->head_dim, d->block_tokens, d->tp_rank, d->tp_size,
			      d->tenant_salt_len };
	unsigned char md[EVP_MAX_MD_SIZE];
	char model[KVT_MODEL_ID_MAX] = { 0 };
	unsigned int md_len = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	int ok;

	if (!ctx)
		return -ENOMEM;
	memcpy(model, d->model_id, strnlen(d->model_id, sizeof(model) - 1));
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		fields[i] = htole32(fields[i]);
	ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) &&
	     EVP_DigestUpdate(ctx, "kvtier-ns-v1", 12) &&
	     EVP_DigestUpdate(ctx, model, sizeof(model)) &&
	     EVP_DigestUpdate(ctx, fields, sizeof(fields)) &&
	     EVP_DigestUpdate(ctx, d->tenant_salt, d->tenant_salt_len) &&
	     EVP_DigestFinal_ex(ctx, md, &md_len);
	EVP_MD_CTX_free(ctx);
	if (!ok)
		return -EIO;
	memcpy(out->bytes, md, KVT_KEY_BYTES);
	return 0;
}

int kvt_ns_attach(struct kvt_store *s, const struct kvt_ns_desc *desc, struct kvt_ns **out)
{
	struct kvt_ns *ns, **grown;
	struct kvt_ns_desc d;
	struct kvt_key salt;
	uint64_t bytes;
	int err;

	if (!s || !out || ns_desc_load(desc, &d))
		return -EINVAL;
	bytes = block_bytes_of(&d);
	if (!bytes || memchr(d.model_id, 0, KVT_MODEL_ID_MAX) == NULL)
		return -EINVAL;
	if (bytes > kvt_dram_max_block(s->dram) || bytes > UINT32_MAX)
		return -EFBIG;
	err = ns_digest(&d, &salt);
	if (err)
		return err;

	pthread_mutex_lock(&s->lock);
	for (uint32_t i = 0; i < s->n_ns; i++) {
		if (s->ns[i] && !memcmp(&s->ns[i]->salt, &salt, sizeof(salt))) {
			*out = s->ns[i];
			pthread_mutex_unlock(&s->lock);
			return 0;
		}
	}
	err = -ENOSPC;
	if (s->n_ns == MAX_NAMESPACES && !s->n_free_ids)
		goto unlock;
	err = -ENOMEM;
	ns = calloc(1, sizeof(*ns));
	grown = s->n_free_ids ? s->ns : realloc(s->ns, (s->n_ns + 1) * sizeof(*grown));
	if (!ns || !grown) {
		free(ns);
		if (grown)
			s->ns = grown;
		goto unlock;
	}
	s->ns = grown;
	ns->store = s;
	/* a detached namespace's id is free: none of its records is left */
	ns->id = s->n_free_ids ? s->free_ids[--s->n_free_ids] : (uint16_t)++s->n_ns;
	ns->desc = d;
	ns->block_bytes = bytes;
	ns->salt = salt;
	kvt_codec_cfg_init(&ns->ssd_codec);
	s->ns[ns->id - 1] = ns;
	s->live_ns++;
	if (s->tiering)
		kvt_tiering_import(s, ns);
	*out = ns;
	err = 0;
unlock:
	pthread_mutex_unlock(&s->lock);
	return err;
}

int kvt_ns_detach(struct kvt_ns *ns)
{
	struct kvt_store *s;
	int err = 0;

	if (!ns)
		return -EINVAL;
	s = ns->store;
	pthread_mutex_lock(&s->lock);
	if (kvt_index_ns_count(s->cat.idx, ns->id)) {
		err = -EBUSY;
	} else if (!s->free_ids && !(s->free_ids = malloc(MAX_NAMESPACES * sizeof(*s->free_ids)))) {
		err = -ENOMEM;
	} else {
		s->ns[ns->id - 1] = NULL;
		s->free_ids[s->n_free_ids++] = ns->id;
		s->live_ns--;
	}
	pthread_mutex_unlock(&s->lock);
	if (!err)
		free(ns);
	return err;
}

uint64_t kvt_ns_block_bytes(const struct kvt_ns *ns)
{
	return ns ? ns->block_bytes : 0;
}

const struct kvt_key *kvt_ns_salt(const struct kvt_ns *ns)
{
	return ns ? &ns->salt : NULL;
}

int kvt_ns_prefix_keys(const struct kvt_ns *ns, const uint32_t *tokens, size_t n_tokens,
		       struct kvt_key *keys, size_t max_keys)
{
	if (!ns)
		return -EINVAL;
	return kvt_prefix_keys(ns->salt.bytes, KVT_KEY_BYTES, NULL, tokens, n_tokens,
			       ns->desc.block_tokens, keys, max_keys);
}

/* ---- blocks ------------------------------------------------------------- */

/* Demotion rounds one DRAM allocation may wait for: each moves a batch, so
 * only an allocation that others keep beating to the room it makes gets
 * this far. */
#define DRAM_ALLOC_ROUNDS 32

static inline struct kvt_rec *rec(struct kvt_store *s, uint32_t i)
{
	return kvt_index_rec(s->cat.idx, i);
}

void kvt_store_discard(struct kvt_store *s, uint32_t i)
{
	struct kvt_rec *r = rec(s, i);

	if (r->tier == KVT_TIER_DRAM)
		s->dram->ops->free(s->dram, r->loc);
	else if (r->tier == KVT_TIER_SSD && s->tiering)
		kvt_tiering_free(s, r->loc);
	if (s->tiering)
		kvt_tiering_forget(s, i);
	kvt_catalog_drop(&s->cat, i);
}

int kvt_store_dram_alloc(struct kvt_store *s, uint64_t bytes, uint64_t *loc)
{
	for (int rounds = 0;; rounds++) {
		int err = s->dram->ops->alloc(s->dram, bytes, loc);
		uint32_t victim;

		if (err != -ENOSPC)
			return err;
		/* with a working SSD tier, overflow demotes and nothing is
		 * dropped: when no demotion round makes progress (all busy or
		 * pinned) or others keep taking the room it makes, the caller
		 * gets -ENOSPC rather than wait without end. With a degraded
		 * one, the round only lets go of the blocks it had in flight,
		 * and then the policy's victim is dropped */
		if (s->tiering) {
			if (rounds < DRAM_ALLOC_ROUNDS && kvt_tiering_make_room(s))
				continue;
			if (kvt_tiering_usable(s))
				return -ENOSPC;
		}
		victim = kvt_catalog_victim(&s->cat, KVT_TIER_DRAM);
		if (victim == KVT_NIL)
			return -ENOSPC;
		s->counters.tier[KVT_TIER_DRAM].evictions++;
		s->counters.dram_dropped++;
		kvt_store_discard(s, victim);
	}
}

/* What a lent slot carries for the store, kept in kvt_slot.priv. */
struct slot_priv {
	uint64_t handle;       /* the record */
	struct kvt_key parent; /* a reservation's parent, resolved at commit */
	bool has_parent;
};

_Static_assert(sizeof(struct slot_priv) <= sizeof(((struct kvt_slot *)0)->priv),
	       "struct kvt_slot has no room for the store's record of a loan");

static struct slot_priv slot_get(const struct kvt_slot *slot)
{
	struct slot_priv p;

	memcpy(&p, slot->priv, sizeof(p));
	return p;
}

static void slot_lend(struct kvt_slot *slot, uint64_t handle, const struct kvt_key *parent)
{
	struct slot_priv p = { .handle = handle, .has_parent = parent != NULL };

	if (parent)
		p.parent = *parent;
	memset(slot->priv, 0, sizeof(slot->priv));
	memcpy(slot->priv, &p, sizeof(p));
}

/* Reserve record + slot for a new block; lock held. */
static int reserve_locked(struct kvt_ns *ns, const struct kvt_key *key, uint32_t *out)
{
	struct kvt_store *s = ns->store;
	uint32_t i;
	int err;

	err = kvt_index_insert(s->cat.idx, ns->id, key, &i);
	if (err == -EEXIST) {
		if (rec(s, i)->state == KVT_REC_DYING)
			return -EBUSY; /* removed, its last reader not done: not stored */
		if (rec(s, i)->state == KVT_REC_LIVE)
			kvt_catalog_touch(&s->cat, i); /* re-saved: it is in use */
		return -EEXIST;
	}
	if (err)
		return err;
	rec(s, i)->size = (uint32_t)ns->block_bytes;
	err = kvt_store_dram_alloc(s, ns->block_bytes, &rec(s, i)->loc);
	if (err) {
		kvt_catalog_drop(&s->cat, i);
		return err;
	}
	rec(s, i)->tier = KVT_TIER_DRAM;
	*out = i;
	return 0;
}

static void publish_locked(struct kvt_ns *ns, uint32_t i, const struct kvt_key *parent)
{
	struct kvt_store *s = ns->store;

	kvt_catalog_publish(&s->cat, i, KVT_TIER_DRAM, parent);
	s->counters.puts++;
	s->counters.tier[KVT_TIER_DRAM].bytes_in += ns->block_bytes;
	if (s->tiering)
		kvt_tiering_kick(s);
}

int kvt_put(struct kvt_ns *ns, const struct kvt_key *key, const struct kvt_key *parent,
	    const void *data, size_t len)
{
	struct kvt_store *s;
	uint64_t sum = 0;
	uint32_t i;
	void *dst;
	int err;

	if (!ns || !key || !data || len != ns->block_bytes)
		return -EINVAL;
	s = ns->store;
	pthread_mutex_lock(&s->lock);
	err = reserve_locked(ns, key, &i);
	dst = err ? NULL : s->dram->ops->slot_ptr(s->dram, rec(s, i)->loc);
	pthread_mutex_unlock(&s->lock);
	if (err)
		return err;

	memcpy(dst, data, len);
	if (s->opts.checksum_on_put)
		sum = XXH3_64bits(dst, len);

	pthread_mutex_lock(&s->lock);
	rec(s, i)->checksum = sum;
	publish_locked(ns, i, parent);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* Find a live block of ns and hold it busy for reading; lock held. */
static int hold_for_read(struct kvt_ns *ns, const struct kvt_key *key, uint32_t *out)
{
	struct kvt_store *s = ns->store;
	uint32_t i = kvt_index_find(s->cat.idx, ns->id, key);

	s->counters.gets++;
	if (i == KVT_NIL || rec(s, i)->state != KVT_REC_LIVE) {
		s->counters.get_misses++;
		return -ENOENT;
	}
	kvt_catalog_touch(&s->cat, i);
	kvt_catalog_busy(&s->cat, i, +1);
	if (s->tiering)
		kvt_tiering_sync_hold(s, i);
	s->counters.tier[rec(s, i)->tier].hits++;
	*out = i;
	return 0;
}

/* Drop a busy hold; the last reader of a removed block frees it. Lock held. */
static void unhold_locked(struct kvt_store *s, uint32_t i)
{
	kvt_catalog_busy(&s->cat, i, -1);
	if (s->tiering)
		kvt_tiering_sync_hold(s, i);
	if (rec(s, i)->state == KVT_REC_DYING && rec(s, i)->busy == 0)
		kvt_store_discard(s, i);
	else if (s->tiering && rec(s, i)->busy == 0)
		kvt_tiering_kick(s); /* it may be demoted now */
}

/* Bring held block i from SSD into DRAM; on failure the hold is dropped.
 * Lock held (released during the read). */
static int promote_locked(struct kvt_store *s, uint32_t i)
{
	int err = kvt_tiering_promote(s, i);

	if (err) {
		s->counters.get_misses++;
		unhold_locked(s, i);
	}
	return err;
}

/* Verify a block read from DRAM when checksums are kept at put. A mismatch
 * drops the block: wrong bytes are never served. Returns 0 or -EIO. */
static int verify_locked(struct kvt_store *s, uint32_t i, const void *bytes)
{
	struct kvt_rec *r = rec(s, i);

	if (!s->opts.checksum_on_put || r->checksum == 0 ||
	    XXH3_64bits(bytes, r->size) == r->checksum)
		return 0;
	s->counters.checksum_failures++;
	s->counters.tier[r->tier].errors++;
	if (r->state == KVT_REC_LIVE)
		kvt_catalog_retire(&s->cat, i);
	return -EIO;
}

int kvt_get(struct kvt_ns *ns, const struct kvt_key *key, void *buf, size_t len)
{
	struct kvt_store *s;
	const void *src;
	uint32_t i;
	int err;

	if (!ns || !key || !buf || len != ns->block_bytes)
		return -EINVAL;
	s = ns->store;
	pthread_mutex_lock(&s->lock);
	err = hold_for_read(ns, key, &i);
	if (!err && rec(s, i)->tier == KVT_TIER_SSD)
		err = promote_locked(s, i);
	src = err ? NULL : s->dram->ops->slot_ptr(s->dram, rec(s, i)->loc);
	pthread_mutex_unlock(&s->lock);
	if (err)
		return err;

	memcpy(buf, src, len);

	pthread_mutex_lock(&s->lock);
	/* checked on the copy, so what the caller holds is what was verified */
	err = verify_locked(s, i, buf);
	s->counters.tier[rec(s, i)->tier].bytes_out += len;
	unhold_locked(s, i);
	pthread_mutex_unlock(&s->lock);
	return err;
}

int kvt_reserve(struct kvt_ns *ns, const struct kvt_key *key, const struct kvt_key *parent,
		struct kvt_slot *slot)
{
	struct kvt_store *s;
	uint32_t i;
	int err;

	if (!ns || !key || !slot)
		return -EINVAL;
	s = ns->store;
	pthread_mutex_lock(&s->lock);
	err = reserve_locked(ns, key, &i);
	if (!err) {
		/* the parent is resolved at commit: it may come or go meanwhile */
		slot_lend(slot, i, parent);
		slot->data = s->dram->ops->slot_ptr(s->dram, rec(s, i)->loc);
		slot->len = ns->block_bytes;
	}
	pthread_mutex_unlock(&s->lock);
	return err;
}

/* The pending record a slot names, or KVT_NIL; lock held. */
static uint32_t pending_of(struct kvt_ns *ns, const struct kvt_slot *slot)
{
	struct kvt_store *s = ns->store;
	uint64_t handle = slot_get(slot).handle;
	uint32_t i = (uint32_t)handle;
	struct kvt_rec *r;

	if (handle >= UINT32_MAX || !kvt_index_valid(s->cat.idx, i))
		return KVT_NIL;
	r = rec(s, i);
	if (r->state != KVT_REC_PENDING || r->ns != ns->id ||
	    s->dram->ops->slot_ptr(s->dram, r->loc) != slot->data)
		return KVT_NIL;
	return i;
}

int kvt_commit(struct kvt_ns *ns, struct kvt_slot *slot)
{
	struct kvt_store *s;
	uint32_t i;
	int err = -EINVAL;

	if (!ns || !slot)
		return -EINVAL;
	s = ns->store;
	pthread_mutex_lock(&s->lock);
	i = pending_of(ns, slot);
	if (i != KVT_NIL) {
		struct slot_priv p = slot_get(slot);

		if (s->opts.checksum_on_put)
			rec(s, i)->checksum = XXH3_64bits(slot->data, slot->len);
		publish_locked(ns, i, p.has_parent ? &p.parent : NULL);
		slot->data = NULL;
		err = 0;
	}
	pthread_mutex_unlock(&s->lock);
	return err;
}

void kvt_abort(struct kvt_ns *ns, struct kvt_slot *slot)
{
	struct kvt_store *s;
	uint32_t i;

	if (!ns || !slot)
		return;
	s = ns->store;
	pthread_mutex_lock(&s->lock);
	i = pending_of(ns, slot);
	if (i != KVT_NIL) {
		kvt_store_discard(s, i);
		slot->data = NULL;
	}
	pthread_mutex_unlock(&s->lock);
}

int kvt_acquire(struct kvt_ns *ns, const struct kvt_key *key, struct kvt_slot *slot)
{
	struct kvt_store *s;
	uint32_t i;
	int err;

	if (!ns || !key || !slot)
		return -EINVAL;
	s = ns->store;
	pthread_mutex_lock(&s->lock);
	err = hold_for_read(ns, key, &i);
	if (!err && rec(s, i)->tier == KVT_TIER_SSD)
		err = promote_locked(s, i);
	if (!err) {
		slot_lend(slot, i, NULL);
		slot->data = s->dram->ops->slot_ptr(s->dram, rec(s, i)->loc);
		slot->len = ns->block_bytes;
		s->counters.tier[rec(s, i)->tier].bytes_out += ns->block_bytes;
	}
	pthread_mutex_unlock(&s->lock);
	if (!err && s->opts.checksum_on_put) {
		pthread_mutex_lock(&s->lock);
		err = verify_locked(s, i, slot->data);
		if (err) {
			unhold_locked(s, i);
			slot->data = NULL;
		}
		pthread_mutex_unlock(&s->lock);
	}
	return err;
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

/* Keys per prefetch batch: enough misses in flight to hide DRAM latency,
 * few enough that the prefetched lines are still cached when used. */
#define LOOKUP_BATCH 16

int kvt_lookup(struct kvt_ns *ns, const struct kvt_key *keys, size_t n, uint8_t *tiers)
{
	uint32_t hash[LOOKUP_BATCH];
	struct kvt_store *s;
	size_t hit = 0;
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
	pthread_mutex_unlock(&s->lock);
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
		if (s->tiering)
			kvt_tiering_sync_hold(s, i);
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
		if (s->tiering)
			kvt_tiering_removed(s, i);
		if (rec(s, i)->busy)
			kvt_catalog_retire(&s->cat, i);
		else
			kvt_store_discard(s, i);
	}
	pthread_mutex_unlock(&s->lock);
	return err;
}

int kvt_store_stats(struct kvt_store *s, struct kvt_store_stats *out)
{
	struct kvt_store_stats st;

	if (!s || !out || out->size < sizeof(out->size))
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	st = s->counters;
	for (int t = 0; t < KVT_TIER_COUNT; t++) {
		st.tier[t].used_bytes = s->cat.used_bytes[t];
		st.tier[t].blocks = s->cat.blocks[t];
		st.blocks += s->cat.blocks[t];
	}
	s->dram->ops->stats(s->dram, &st.tier[KVT_TIER_DRAM]);
	if (s->tiering)
		kvt_tiering_stats(s, &st);
	st.namespaces = s->live_ns;
	st.index_bytes = kvt_index_memory(s->cat.idx);
	pthread_mutex_unlock(&s->lock);
	/* a caller built against an older, smaller struct gets its prefix */
	return kvt_opts_store(out, &st, sizeof(st));
}
