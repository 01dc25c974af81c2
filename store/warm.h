/* SPDX-License-Identifier: Apache-2.0 */
/* The store across a restart of its process (kvt_store_opts.dram_warm): the
 * memory tier's region outlives the process (tiers/warm_region.h), and
 * this file keeps in it what the next store needs to rebuild its index:
 * the namespaces with blocks there, and for each block committed in a
 * slot, the header written when it became live there (the memory tier
 * marks a slot free itself when it is freed). At open, a store handed a
 * region attaches its namespaces again and indexes its blocks, each
 * flagged KVT_REC_UNVERIFIED until its bytes are checked against its
 * checksum, which happens before its first use (a read, or a write down to
 * a storage tier): a block that fails is dropped, never served.
 *
 * All functions but kvt_warm_rebuild run with the store's lock held. */
#ifndef KVT_STORE_WARM_H
#define KVT_STORE_WARM_H

#include <stdbool.h>
#include <stdint.h>

#include "store/store_impl.h"

/* Set s up when its memory tier is warm: the catalog's placed_cb. */
void kvt_warm_init(struct kvt_store *s);

/* Index what the memory tier found in the region it adopted (namespaces
 * first). Call once, at open, after the storage tiers are added; lock not
 * held. Returns 0 or -ENOMEM. */
int kvt_warm_rebuild(struct kvt_store *s);

/* Namespace ns was created: keep its descriptor in the region. */
void kvt_warm_ns_attached(struct kvt_store *s, struct kvt_ns *ns);

/* Namespace ns, holding nothing, is detached: forget it. */
void kvt_warm_ns_detached(struct kvt_store *s, struct kvt_ns *ns);

/* Check record i's bytes (in the memory tier) if they were found in a
 * region and not checked yet. A block that fails is dropped (retired when
 * held, else discarded) and counted. Returns 0, or -EIO. */
int kvt_warm_verify(struct kvt_store *s, uint32_t i, bool held);

#endif /* KVT_STORE_WARM_H */
