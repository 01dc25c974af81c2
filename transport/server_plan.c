/* SPDX-License-Identifier: Apache-2.0 */
/* LOOKUP's plan: how many leading blocks of a matched prefix an engine
 * should load, the rest being cheaper to recompute, from what this machine
 * measures: the bytes/s each tier delivered to engines (the copy workers'
 * rates) and the prefill speed the namespace's engines reported (PREFILL),
 * through the model's kvt_plan_prefix. The cost is the whole group's: a
 * namespace of tensor-parallel rank r of n holds a 1/n share of each block,
 * and the group's load of a block moves all n shares.
 *
 * Cold start needs no configuration: a tier not yet measured is taken at
 * kvt_plan_opts_init's rate (DRAM 25 GB/s, SSD 3 GB/s), and until an engine
 * of the namespace has reported its speed every stored block is loaded, as
 * before there was a plan. A tier measured slower than its default whose
 * last measurement is older than opts.plan_retry_ms is taken at its default
 * rate again for one LOOKUP, so a tier the plan stopped loading from (and so
 * stopped measuring) is tried again and a device that recovered is seen to. */
#include <stdlib.h>
#include <string.h>

#include "kvtier/model.h"
#include "transport/server_int.h"

/* The remote tier has no default in the model's plan (it cannot be
 * costed without a link); a peer over TCP is assumed to deliver 1 GB/s. */
#define KVT_PLAN_REMOTE_BPS 1e9

uint32_t kvt_plan_loads(struct kvt_server *srv, struct kvt_ns *ns, const struct kvt_ns_desc *d,
			const uint8_t *tiers, uint32_t hit)
{
	struct kvt_plan_opts o;
	struct kvt_plan plan;
	double tok_s = kvt_tenant_ns_prefill(srv, ns);
	uint64_t now = kvt_now_ns();
	bool used[KVT_TIER_COUNT] = { false };

	if (!hit || !(tok_s > 0))
		return hit;
	kvt_plan_opts_init(&o, sizeof(o));
	if (!(o.tier_bw[KVT_TIER_REMOTE] > 0))
		o.tier_bw[KVT_TIER_REMOTE] = KVT_PLAN_REMOTE_BPS;
	o.block_tokens = d->block_tokens;
	/* The engine's prefill speed is its whole group's (every rank of a
	 * tensor- or pipeline-parallel group computes each step together),
	 * while a namespace holds one rank's share of a block: a load moves
	 * tp_size shares through this node's tiers for the group. */
	o.block_bytes = kvt_ns_block_bytes(ns) * d->tp_size;
	o.prefill_tokens_s = tok_s;
	for (uint32_t i = 0; i < hit; i++)
		if (tiers[i] < KVT_TIER_COUNT)
			used[tiers[i]] = true;
	for (unsigned t = KVT_TIER_HBM; t < KVT_TIER_COUNT; t++) {
		struct kvt_rate r = kvt_tier_rates_get(&srv->rates, t);
		uint64_t seen = r.last_ns > srv->plan_retry_ns[t] ? r.last_ns : srv->plan_retry_ns[t];

		if (!r.samples || !used[t])
			continue;
		if (now - seen > (uint64_t)srv->opts.plan_retry_ms * 1000000 &&
		    kvt_rate_value(&r) < o.tier_bw[t]) {
			/* stale and slower than the default: the default for this
			 * once, and a new measurement */
			srv->plan_retry_ns[t] = now;
			srv->c.plan_retries++;
			continue;
		}
		/* the measured time of a block holds its tier's latency too */
		o.tier_bw[t] = kvt_rate_value(&r);
		o.tier_latency_s[t] = 0;
	}
	if (kvt_plan_prefix(&o, tiers, hit, &plan, NULL))
		return hit;
	return (uint32_t)plan.load_blocks;
}

static size_t memo_slot(const struct kvt_key *key)
{
	/* keys are digests: any of their bytes is as good as a hash */
	return ((size_t)key->bytes[0] | (size_t)key->bytes[1] << 8) & (KVT_MEMO_SLOTS - 1);
}

void kvt_plan_remember(struct kvt_conn *c, const struct kvt_key *keys, const uint8_t *tiers,
		       uint32_t hit)
{
	if (!hit)
		return;
	if (!c->memo)
		c->memo = calloc(KVT_MEMO_SLOTS, sizeof(*c->memo));
	if (!c->memo)
		return; /* then its loads are not measured */
	for (uint32_t i = 0; i < hit; i++) {
		struct kvt_memo_slot *m = &c->memo[memo_slot(&keys[i])];

		m->key = keys[i];
		m->tier = tiers[i];
	}
}

uint8_t kvt_plan_tier_of(const struct kvt_conn *c, const struct kvt_key *key)
{
	const struct kvt_memo_slot *m;

	if (!c->memo)
		return KVT_TIER_NONE;
	m = &c->memo[memo_slot(key)];
	return memcmp(m->key.bytes, key->bytes, KVT_KEY_BYTES) ? KVT_TIER_NONE : m->tier;
}
