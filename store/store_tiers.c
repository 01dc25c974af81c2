/* SPDX-License-Identifier: Apache-2.0 */
/* The tiers a store's options ask for: the DRAM tier as its memory tier,
 * and an SSD tier when ssd_dir is set, with the admission rule of
 * ssd_admission; and the public door for a tier made elsewhere
 * (kvt_store_add_tier). The rest of the store core knows tiers only
 * through tiers/tier.h; this file is where a tier configured by
 * kvt_store_opts is named. */
#include <errno.h>
#include <pthread.h>

#include "store/store_impl.h"
#include "store/tiering.h"
#include "tiers/dram.h"
#include "tiers/ssd.h"
#include "tiers/ssd_stripe.h"

int kvt_store_open_mem(const struct kvt_store_opts *o, struct kvt_mem_tier **out)
{
	struct kvt_dram_opts dopts;

	kvt_dram_opts_init(&dopts, sizeof(dopts));
	dopts.bytes = o->dram_bytes;
	dopts.slab_bytes = o->dram_slab_bytes;
	dopts.huge_pages = o->dram_huge_pages;
	dopts.warm = o->dram_warm;
	dopts.warm_fd = o->dram_fd;
	/* with a storage tier, a slot has room for its record header, so a
	 * block leaves in one device write */
	dopts.headroom = o->ssd_dir || o->n_ssd_dirs ? KVT_TIER_HEADROOM : 0;
	if (dopts.slab_bytes == 0 && dopts.bytes < KVT_DRAM_DEFAULT_SLAB)
		dopts.slab_bytes = dopts.bytes & ~(uint64_t)(KVT_DRAM_SLOT_ALIGN - 1);
	return kvt_dram_open(&dopts, out);
}

/* The SSD segment size for a tier of `bytes`: an eighth of it, from 4 to
 * 256 MiB, so that a small tier still has several segments and releasing
 * one does not empty it (a block must fit in a segment). */
static uint64_t ssd_segment_bytes(uint64_t bytes)
{
	uint64_t seg = bytes / 8 & ~(uint64_t)4095;

	if (seg < (4ULL << 20))
		seg = 4ULL << 20;
	if (seg > (256ULL << 20))
		seg = 256ULL << 20;
	if (seg > bytes)
		seg = bytes & ~(uint64_t)4095;
	return seg;
}

int kvt_store_add_tiers(struct kvt_store *s, const struct kvt_store_opts *opts)
{
	struct kvt_storage_tier *t;
	struct kvt_ssd_opts so;
	int err;

	if (!opts->ssd_dir && !opts->n_ssd_dirs)
		return 0;
	if (opts->ssd_dir ? !opts->ssd_bytes || opts->n_ssd_dirs :
			    !opts->ssd_dirs || opts->n_ssd_dirs > KVT_SSD_MAX_DIRS)
		return -EINVAL;
	kvt_ssd_opts_init(&so, sizeof(so));
	so.dir = opts->ssd_dir;
	so.capacity_bytes = opts->ssd_bytes;
	so.segment_bytes = opts->ssd_segment_bytes ? opts->ssd_segment_bytes :
						     ssd_segment_bytes(opts->ssd_bytes);
	so.queue_depth = opts->ssd_queue_depth;
	so.force_threads = opts->ssd_force_threads;
	/* several directories: a tier per directory under one that spreads
	 * blocks over them (tiers/ssd_stripe.h) */
	if (opts->n_ssd_dirs)
		err = kvt_ssd_stripe_open(&so, opts->ssd_dirs, opts->n_ssd_dirs,
					  opts->ssd_segment_bytes ? NULL : ssd_segment_bytes, &t);
	else
		err = kvt_ssd_tier_open(&so, &t);
	if (!err)
		err = kvt_tiering_add(s, t);
	if (err)
		return err;
	/* the name was checked at open: what the demoter writes to SSD */
	pthread_mutex_lock(&s->lock);
	err = kvt_catalog_set_admission(&s->cat, kvt_admission_find(s->opts.ssd_admission),
					KVT_TIER_SSD);
	pthread_mutex_unlock(&s->lock);
	return err;
}

int kvt_store_add_tier(struct kvt_store *s, struct kvt_storage_tier *t)
{
	if (!t)
		return -EINVAL;
	if (!s) {
		t->ops->close(t); /* owned from the call on, as documented */
		return -EINVAL;
	}
	return kvt_tiering_add(s, t);
}
