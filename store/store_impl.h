/* The store's own structures, shared by the files of the store core
 * (store.c: the API; tiering.c: movement between DRAM and SSD). Not a public
 * header: callers see only include/kvtier/store.h. */
#ifndef KVT_STORE_STORE_IMPL_H
#define KVT_STORE_STORE_IMPL_H

#include <pthread.h>
#include <stdint.h>

#include "kvtier/store.h"
#include "store/catalog.h"
#include "tiers/codec.h"
#include "tiers/tier.h"

#define MAX_NAMESPACES 65535

struct kvt_tiering;
struct kvt_ssd;

struct kvt_ns {
	struct kvt_store *store;
	uint16_t id; /* 1-based; the index keys blocks by (id, key) */
	struct kvt_ns_desc desc;
	uint64_t block_bytes;
	struct kvt_key salt;
	struct kvt_codec_cfg ssd_codec; /* guarded by the store's lock */
};

struct kvt_store {
	pthread_mutex_t lock;
	struct kvt_store_opts opts;
	struct kvt_catalog cat;
	struct kvt_tier_impl *dram;
	struct kvt_ns **ns;         /* by id - 1; NULL once detached */
	uint32_t n_ns;              /* ids handed out: 1..n_ns */
	uint32_t live_ns;           /* namespaces attached */
	uint16_t *free_ids;         /* ids of detached namespaces, reused first */
	uint32_t n_free_ids;
	struct kvt_store_stats counters; /* tier[] holds hits/bytes/evictions/errors */
	/* the SSD tier and the demoter, NULL without ssd_dir (tiering.c) */
	struct kvt_tiering *tiering;
};

/* A DRAM slot for `bytes`: with a working SSD tier, demoting cold blocks
 * (never dropping one) for a bounded number of rounds; without one, evicting
 * as the policy orders. Lock held; it may be released while waiting for the
 * demoter. Returns 0, -ENOSPC (nothing can move or be evicted, or others
 * took every slot the rounds freed). */
int kvt_store_dram_alloc(struct kvt_store *s, uint64_t bytes, uint64_t *loc);

/* Free a record's bytes in its tier and forget it. Lock held. */
void kvt_store_discard(struct kvt_store *s, uint32_t i);

#endif /* KVT_STORE_STORE_IMPL_H */
