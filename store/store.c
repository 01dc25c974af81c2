/* SPDX-License-Identifier: Apache-2.0 */
/* The store: namespaces and the block operations of include/kvtier/store.h.
 *
 * Blocks are read and written in the memory tier (s->mem); the storage
 * tiers after it (store/tiering.c) take what does not fit and are read back
 * through store/fetch.c. No tier is named here: tiers are behind the ops of
 * tiers/tier.h.
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
#include <unistd.h>

#include <openssl/evp.h>
#include <xxhash.h>

#include "kvtier/store.h"
#include "store/catalog.h"
#include "store/fetch.h"
#include "store/store_impl.h"
#include "store/tiering.h"
#include "store/warm.h"
#include "tiers/dram.h"
#include "tiers/warm_region.h"
#include "util/clock.h"
#include "util/opts.h"

static const struct kvt_store_opts store_defaults = {
	.size = sizeof(struct kvt_store_opts),
	.dram_huge_pages = true,
	.policy = "tail-lru",
	.dram_high_watermark = 0.90,
	.dram_low_watermark = 0.75,
	.dram_fd = -1,
};

void kvt_store_opts_init(struct kvt_store_opts *opts, size_t size_bytes)
{
	kvt_opts_init(opts, size_bytes, &store_defaults, sizeof(store_defaults));
}

int kvt_store_open(const struct kvt_store_opts *opts, struct kvt_store **out)
{
	struct kvt_store_opts o = store_defaults;
	const struct kvt_policy_ops *policy;
	const struct kvt_admission_ops *admission;
	struct kvt_store *s;
	int codec, err;

	if (!out || kvt_opts_load(&o, sizeof(o), opts))
		return -EINVAL;
	if (!o.dram_warm)
		o.dram_fd = -1; /* read only with dram_warm (zeroed opts say fd 0) */
	if (o.dram_bytes == 0)
		goto fail_fd;
	policy = kvt_policy_find(o.policy ? o.policy : "tail-lru");
	admission = kvt_admission_find(o.ssd_admission ? o.ssd_admission : "always");
	codec = o.ssd_codec && !strcmp(o.ssd_codec, KVT_SSD_CODEC_AUTO) ?
			0 : kvt_codec_parse(o.ssd_codec ? o.ssd_codec : "raw");
	if (!policy || !admission || codec < 0 || o.ssd_codec_min_ratio < 0)
		goto fail_fd;
	s = calloc(1, sizeof(*s));
	if (!s) {
		if (o.dram_fd >= 0)
			close(o.dram_fd);
		return -ENOMEM;
	}
	s->opts = o;
	s->opts.ssd_dir = NULL; /* not kept: the caller owns the string */
	s->opts.policy = policy->name;
	s->opts.ssd_admission = admission->name;
	s->opts.ssd_codec = o.ssd_codec && !strcmp(o.ssd_codec, KVT_SSD_CODEC_AUTO) ?
				    KVT_SSD_CODEC_AUTO : kvt_codec_name((enum kvt_codec_id)codec);

	err = kvt_store_open_mem(&o, &s->mem);
	if (err)
		goto fail_free;
	/* room for the records of a full DRAM tier of 64 KiB blocks */
	err = kvt_catalog_init(&s->cat, policy, o.dram_bytes / (64 << 10));
	if (err)
		goto fail_mem;
	err = pthread_mutex_init(&s->lock, NULL);
	if (err) {
		err = -err;
		goto fail_catalog;
	}
	err = pthread_cond_init(&s->moved, NULL);
	if (err) {
		err = -err;
		goto fail_lock;
	}
	err = kvt_tiering_open(s, &o);
	if (err)
		goto fail_cond;
	err = kvt_store_add_tiers(s, &o);
	if (err)
		goto fail_tiering;
	/* blocks that were on SSD are indexed as their namespaces attach, so a
	 * block the region also holds comes up with its SSD record as a copy */
	err = kvt_warm_rebuild(s);
	if (err) {
		kvt_store_close(s);
		return err;
	}
	*out = s;
	return 0;

fail_tiering:
	kvt_tiering_close(s);
fail_cond:
	pthread_cond_destroy(&s->moved);
fail_lock:
	pthread_mutex_destroy(&s->lock);
fail_catalog:
	kvt_catalog_fini(&s->cat);
fail_mem:
	s->mem->ops->close(s->mem);
fail_free:
	free(s);
	return err;

fail_fd:
	if (o.dram_fd >= 0)
		close(o.dram_fd);
	return -EINVAL;
}

void kvt_store_quiesce(struct kvt_store *s)
{
	if (s)
		kvt_tiering_close(s); /* kvt_store_close finds it closed */
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
	s->mem->ops->close(s->mem);
	pthread_cond_destroy(&s->moved);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

int kvt_store_dram_fd(struct kvt_store *s)
{
	struct kvt_warm_region *wr = s ? kvt_dram_warm(s->mem) : NULL;

	return wr ? wr->fd : -EINVAL;
}

int kvt_store_write_down(struct kvt_store *s, unsigned timeout_ms, struct kvt_write_down *out)
{
	struct kvt_write_down wd;
	int err;

	if (!s)
		return -EINVAL;
	err = kvt_tiering_write_down(s, kvt_now_ns() + (uint64_t)timeout_ms * 1000000, &wd);
	if (err)
		return err;
	pthread_mutex_lock(&s->lock);
	s->warm_stats.write_down = wd;
	pthread_mutex_unlock(&s->lock);
	if (out)
		*out = wd;
	return 0;
}

int kvt_store_dram_region(struct kvt_store *s, void **base, uint64_t *len)
{
	if (!s || !base || !len)
		return -EINVAL;
	*base = s->mem->ops->region(s->mem, len);
	return 0;
}

int kvt_store_dram_reach(struct kvt_store *s, uint64_t *end)
{
	if (!s || !end)
		return -EINVAL;
	*end = kvt_dram_reach(s->mem);
	return 0;
}

/* ---- namespaces --------------------------------------------------------- */

/* The caller's descriptor as a whole one (fields it lacks at their
 * defaults). Returns 0 or -EINVAL. */
/* The codec of a namespace of dtype under the store's ssd_codec: "auto"
 * packs bf16's exponent bytes (shuf16-pack4: 1.33x fewer bytes at about
 * memcpy's speed) and leaves other dtypes raw, where it does not pay. */
static enum kvt_codec_id codec_of(const char *ssd_codec, enum kvt_dtype dtype)
{
	if (!strcmp(ssd_codec, KVT_SSD_CODEC_AUTO))
		return dtype == KVT_DTYPE_BF16 ? KVT_CODEC_SHUF16_PACK4 : KVT_CODEC_RAW;
	return (enum kvt_codec_id)kvt_codec_parse(ssd_codec);
}

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
int kvt_ns_digest(const struct kvt_ns_desc *d, struct kvt_key *out)
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
	if (bytes > s->mem->ops->max_block(s->mem) || bytes > UINT32_MAX)
		return -EFBIG;
	err = kvt_ns_digest(&d, &salt);
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
	kvt_codec_cfg_init(&ns->codec);
	/* the store's codec, where there is a tier to write to */
	if (kvt_tiering_has(s, KVT_TIER_CAP_DEMOTE)) {
		ns->codec.id = codec_of(s->opts.ssd_codec, d.dtype);
		if (s->opts.ssd_codec_min_ratio > 0)
			ns->codec.min_ratio = s->opts.ssd_codec_min_ratio;
	}
	s->ns[ns->id - 1] = ns;
	s->live_ns++;
	kvt_warm_ns_attached(s, ns);
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
		kvt_warm_ns_detached(s, ns);
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

uint64_t kvt_ns_storage_id(const struct kvt_ns *ns)
{
	uint64_t v;

	memcpy(&v, ns->salt.bytes, sizeof(v));
	return le64toh(v);
}

int kvt_ns_set_ssd_codec(struct kvt_ns *ns, const char *codec, double min_ratio)
{
	struct kvt_store *s = ns ? ns->store : NULL;
	int id = kvt_codec_parse(codec);
	int err = -EINVAL;

	if (!s || id < 0 || min_ratio < 0)
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	if (kvt_tiering_has(s, KVT_TIER_CAP_DEMOTE)) {
		kvt_codec_cfg_init(&ns->codec); /* min_ratio 0 means the default, 1.1 */
		ns->codec.id = (enum kvt_codec_id)id;
		if (min_ratio > 0)
			ns->codec.min_ratio = min_ratio;
		err = 0;
	}
	pthread_mutex_unlock(&s->lock);
	return err;
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

static inline struct kvt_rec *rec(struct kvt_store *s, uint32_t i)
{
	return kvt_index_rec(s->cat.idx, i);
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

/* Reserve record + slot for a new block of reuse class cls; lock held. */
static int reserve_locked(struct kvt_ns *ns, const struct kvt_key *key, unsigned cls,
			  uint32_t *out)
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
	rec(s, i)->reuse_class = (uint8_t)cls;
	/* the lock may be let go meanwhile: the pending record keeps the key */
	err = kvt_tiering_alloc(s, ns->block_bytes, &rec(s, i)->loc);
	if (err) {
		kvt_catalog_drop(&s->cat, i);
		return err;
	}
	rec(s, i)->tier = (uint8_t)s->mem->kind;
	*out = i;
	return 0;
}

static void publish_locked(struct kvt_ns *ns, uint32_t i, const struct kvt_key *parent)
{
	struct kvt_store *s = ns->store;

	kvt_catalog_publish(&s->cat, i, s->mem->kind, parent);
	s->counters.puts++;
	s->counters.tier[s->mem->kind].bytes_in += ns->block_bytes;
	kvt_tiering_kick(s);
}

int kvt_put(struct kvt_ns *ns, const struct kvt_key *key, const struct kvt_key *parent,
	    const void *data, size_t len)
{
	return kvt_put_class(ns, key, parent, data, len, 0);
}

int kvt_put_class(struct kvt_ns *ns, const struct kvt_key *key, const struct kvt_key *parent,
		  const void *data, size_t len, unsigned reuse_class)
{
	struct kvt_store *s;
	uint64_t sum = 0;
	uint32_t i;
	void *dst;
	int err;

	if (!ns || !key || !data || len != ns->block_bytes || reuse_class > KVT_REUSE_CLASS_MAX)
		return -EINVAL;
	s = ns->store;
	pthread_mutex_lock(&s->lock);
	err = reserve_locked(ns, key, reuse_class, &i);
	dst = err ? NULL : s->mem->ops->slot_ptr(s->mem, rec(s, i)->loc);
	pthread_mutex_unlock(&s->lock);
	if (err)
		return err;

	memcpy(dst, data, len);
	/* a warm tier keeps every block's checksum in its slot's header */
	if (s->opts.checksum_on_put || s->warm)
		sum = XXH3_64bits(dst, len);

	pthread_mutex_lock(&s->lock);
	rec(s, i)->checksum = sum;
	publish_locked(ns, i, parent);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* Drop a busy hold; the last reader of a removed block frees it. Lock held. */
static void unhold_locked(struct kvt_store *s, uint32_t i)
{
	kvt_catalog_busy(&s->cat, i, -1);
	if (rec(s, i)->state == KVT_REC_DYING && rec(s, i)->busy == 0)
		kvt_tiering_discard(s, i);
	else if (rec(s, i)->busy == 0)
		kvt_tiering_kick(s); /* it may be demoted now */
}

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
	    XXH3_64bits(bytes, r->size) == r->checksum)
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

	slot_lend(slot, i, NULL);
	slot->data = s->mem->ops->slot_ptr(s->mem, rec(s, i)->loc);
	slot->len = a->ns->block_bytes;
	if (verify_locked(s, i, slot->data)) {
		unhold_locked(s, i);
		slot->data = NULL;
		return -EIO;
	}
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
	kvt_catalog_touch(&s->cat, i);
	kvt_catalog_busy(&s->cat, i, +1);
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

/* ---- zero-copy slots ---------------------------------------------------- */

int kvt_reserve(struct kvt_ns *ns, const struct kvt_key *key, const struct kvt_key *parent,
		struct kvt_slot *slot)
{
	return kvt_reserve_class(ns, key, parent, 0, slot);
}

int kvt_reserve_class(struct kvt_ns *ns, const struct kvt_key *key,
		      const struct kvt_key *parent, unsigned reuse_class, struct kvt_slot *slot)
{
	struct kvt_store *s;
	uint32_t i;
	int err;

	if (!ns || !key || !slot || reuse_class > KVT_REUSE_CLASS_MAX)
		return -EINVAL;
	s = ns->store;
	pthread_mutex_lock(&s->lock);
	err = reserve_locked(ns, key, reuse_class, &i);
	if (!err) {
		/* the parent is resolved at commit: it may come or go meanwhile */
		slot_lend(slot, i, parent);
		slot->data = s->mem->ops->slot_ptr(s->mem, rec(s, i)->loc);
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
	if (r->state != KVT_REC_PENDING || r->ns != ns->id || r->tier != s->mem->kind ||
	    s->mem->ops->slot_ptr(s->mem, r->loc) != slot->data)
		return KVT_NIL;
	return i;
}

int kvt_commit(struct kvt_ns *ns, struct kvt_slot *slot)
{
	struct kvt_store *s;
	uint64_t sum = 0;
	uint32_t i;
	int err = -EINVAL;

	if (!ns || !slot)
		return -EINVAL;
	s = ns->store;
	/* hashed before the lock is taken: the slot is the caller's until then */
	if ((s->opts.checksum_on_put || s->warm) && slot->data && slot->len == ns->block_bytes)
		sum = XXH3_64bits(slot->data, slot->len);
	pthread_mutex_lock(&s->lock);
	i = pending_of(ns, slot);
	if (i != KVT_NIL) {
		struct slot_priv p = slot_get(slot);

		rec(s, i)->checksum = sum;
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
		kvt_tiering_discard(s, i);
		slot->data = NULL;
	}
	pthread_mutex_unlock(&s->lock);
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
	s->mem->ops->stats(s->mem, &st.tier[s->mem->kind]);
	kvt_tiering_stats(s, &st);
	st.namespaces = s->live_ns;
	st.warm = s->warm_stats;
	st.index_bytes = kvt_index_memory(s->cat.idx);
	pthread_mutex_unlock(&s->lock);
	/* a caller built against an older, smaller struct gets its prefix */
	return kvt_opts_store(out, &st, sizeof(st));
}
