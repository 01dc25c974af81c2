/* SPDX-License-Identifier: Apache-2.0 */
/* What the daemon sees of its traffic: LOOKUP keys, hits and the tokens they
 * saved, per tenant and per namespace (a bounded number of namespaces have
 * their own figures; a tenant's others count as its "other"), and the live
 * miss-ratio curve of the whole LOOKUP stream (store/mrc.h), and of each
 * namespace with figures while the memory budget lasts.
 *
 * Everything here is the loop thread's (LOOKUP, STATS and the metrics
 * endpoint all run on it): no lock. */
#ifndef KVT_TRANSPORT_INSIGHT_H
#define KVT_TRANSPORT_INSIGHT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "kvtier/store.h"
#include "kvtier/types.h"

struct kvt_insight;

/* Figures of one tenant or one namespace. */
struct kvt_insight_row {
	uint64_t lookups;      /* LOOKUP requests */
	uint64_t keys, hits;   /* keys looked up, keys found (the leading run) */
	uint64_t tokens_saved; /* hit keys x the namespace's block_tokens */
};

/* Per-namespace figures for n_tenants tenants (names kept, not copied),
 * `max_ns` namespaces with their own, MRCs in `mrc_budget` bytes at most
 * (0: none) sampled at `mrc_rate`. Returns 0, -ENOMEM. */
int kvt_insight_open(size_t n_tenants, const char *const *tenant_names, unsigned max_ns,
		     size_t mrc_budget, double mrc_rate, struct kvt_insight **out);
void kvt_insight_close(struct kvt_insight *in); /* NULL is accepted */

/* The namespace a HELLO of tenant t opened (desc with its salt): its handle
 * for kvt_insight_lookup, a namespace with figures or the tenant's "other". */
int kvt_insight_ns(struct kvt_insight *in, size_t t, const struct kvt_ns_desc *desc);

/* A LOOKUP of n keys in the namespace of handle h (blocks of block_tokens
 * tokens), of which `hit` led. */
void kvt_insight_lookup(struct kvt_insight *in, int h, const struct kvt_key *keys, uint32_t n,
			uint32_t hit, uint32_t block_tokens);

/* The tenant `t` section of STATS: its figures, its namespaces' (each with
 * its MRC, when it has one) and its "other". NULL on -ENOMEM. */
json_t *kvt_insight_tenant_json(struct kvt_insight *in, size_t t,
				const struct kvt_store_stats *st);

/* The daemon-wide MRC of STATS: sampling figures, and per tier the hit
 * ratio of the tiers down to it had it 1/8 to 8 times its size (in blocks
 * and bytes). JSON null when there is no estimate yet. */
json_t *kvt_insight_mrc_json(struct kvt_insight *in, const struct kvt_store_stats *st);

/* Prometheus families into *text (realloc'd, *len bytes used, *cap
 * allocated): kvtier_mrc_hit_ratio{tier,capacity_factor}, and with
 * `tenants` per tenant and per namespace keys by result and tokens saved.
 * Returns 0 or -ENOMEM. */
int kvt_insight_prom(struct kvt_insight *in, const struct kvt_store_stats *st, bool tenants,
		     char **text, size_t *len, size_t *cap);

#endif /* KVT_TRANSPORT_INSIGHT_H */
