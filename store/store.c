/* SPDX-License-Identifier: Apache-2.0 */
/* The store: namespaces and the block operations of include/kvtier/store.h.
 *
 * Blocks are read and written in the memory tier (s->mem); the storage
 * tiers after it (store/tiering.c) take what does not fit and are read back
 * through store/fetch.c. No tier is named here: tiers are behind the ops of
 * tiers/tier.h.
 *
 * The API is spread over files by job: this one opens, closes and reports
 * the store; namespace.c attaches namespaces; store_put.c writes blocks
 * (put, reserve and commit); store_get.c reads them (acquire, get,
 * release); store_keys.c answers for keys (lookup, pin, remove).
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

/* Keys read straight from a keyed tier that the store remembers: enough for
 * the prefixes of a few dozen requests in flight. */
#define READ_KEYED_REMEMBERED 4096u

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
	s->opts.ssd_dirs = NULL;
	s->opts.n_ssd_dirs = 0;
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
	err = kvt_ghost_init(&s->read_keyed, READ_KEYED_REMEMBERED);
	if (err)
		goto fail_catalog;
	err = pthread_mutex_init(&s->lock, NULL);
	if (err) {
		err = -err;
		goto fail_ghost;
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
fail_ghost:
	kvt_ghost_fini(&s->read_keyed);
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
	kvt_ghost_fini(&s->read_keyed);
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

int kvt_store_tier_devices(struct kvt_store *s, enum kvt_tier tier, struct kvt_tier_device *out,
			   size_t max)
{
	size_t n;

	if (!s || (max && !out))
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	n = kvt_tiering_devices(s, tier, out, max);
	pthread_mutex_unlock(&s->lock);
	return (int)n;
}

int kvt_store_tier_counters(struct kvt_store *s, enum kvt_tier tier, struct kvt_counter *out,
			    size_t max)
{
	size_t n;

	if (!s || (max && !out))
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	if (tier == s->mem->kind)
		n = s->mem->ops->counters ? s->mem->ops->counters(s->mem, out, max) : 0;
	else
		n = kvt_tiering_counters(s, tier, out, max);
	pthread_mutex_unlock(&s->lock);
	return (int)n;
}
