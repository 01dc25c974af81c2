/* SPDX-License-Identifier: Apache-2.0 */
/* The accounting replay; see replay.h. */
#include "bench/trace/replay.h"

#include "bench/trace/idset.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct kvt_replay {
	struct kvt_replay_opts opts;
	struct kvt_idset ideal;  /* every id ever seen: infinite capacity */
	struct kvt_cascade cas;  /* the store's catalog, over capped tiers */
	uint32_t *recs;          /* record of each leading hit of the request */
	uint32_t *hashes;        /* index hash of each block's key */
	uint64_t *mrc_hashes;    /* the estimator's hash of each block's key */
	uint32_t *mrc_ticks;     /* and the tick it gave each hit */
	uint8_t *tiers;          /* tier of each leading hit of the request */
	size_t last_hits;
	struct kvt_key *keys;    /* each block's key */
	size_t recs_cap;
	struct kvt_replay_stats st;
};

void kvt_replay_opts_init(struct kvt_replay_opts *opts, size_t size_bytes)
{
	memset(opts, 0, size_bytes);
	opts->size = size_bytes;
	opts->policy = "lru";
	opts->capacity[KVT_TIER_DRAM] = KVT_REPLAY_INFINITE;
	opts->ideal = true;
	opts->reuse_class = true;
	opts->block_tokens = 512;
	opts->block_bytes = 512ull * 147456; /* Qwen3-8B, bf16 */
}

void kvt_replay_key(uint64_t h, struct kvt_key *key)
{
	memset(key, 0, sizeof(*key));
	for (int b = 0; b < 8; b++)
		key->bytes[b] = (uint8_t)(h >> (8 * b));
}

int kvt_replay_keys(const struct kvt_trace_req *req, struct kvt_key **keys, uint8_t **tiers,
		    size_t *cap)
{
	size_t n = req->n_ids;

	if (n > *cap) {
		size_t want = n < 256 ? 256 : n;
		struct kvt_key *k = realloc(*keys, want * sizeof(*k));
		uint8_t *t;

		if (!k)
			return -ENOMEM;
		*keys = k;
		t = realloc(*tiers, want);
		if (!t)
			return -ENOMEM;
		*tiers = t;
		*cap = want;
	}
	for (size_t j = 0; j < n; j++)
		kvt_replay_key(req->hash_ids[j], &(*keys)[j]);
	return 0;
}

/* Output blocks have no hash id in a trace: they get keys no input id maps
 * to (a non-zero upper half), unique per request and block. */
static void output_key(uint64_t request, uint64_t block, struct kvt_key *key)
{
	kvt_replay_key(block, key);
	request |= 1ull << 63;
	for (int b = 0; b < 8; b++)
		key->bytes[8 + b] = (uint8_t)(request >> (8 * b));
}

int kvt_replay_open(const struct kvt_replay_opts *opts, struct kvt_replay **out)
{
	const struct kvt_admission_ops *adm = NULL;
	const struct kvt_policy_ops *ops;
	struct kvt_replay *r;
	int err;

	if (!opts || opts->size != sizeof(*opts) || !out || !opts->block_tokens)
		return -EINVAL;
	ops = kvt_policy_find(opts->policy);
	if (opts->ssd_admission && !(adm = kvt_admission_find(opts->ssd_admission)))
		return -EINVAL;
	if (!ops)
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->opts = *opts;
	err = kvt_cascade_init(&r->cas, ops, opts->capacity, opts->cost_cb, opts->cost_arg);
	if (err) {
		free(r);
		return err;
	}
	if (adm) {
		err = kvt_catalog_set_admission(&r->cas.cat, adm, KVT_TIER_SSD);
		if (err) {
			kvt_cascade_fini(&r->cas);
			free(r);
			return err;
		}
		/* rules see a block's place in its chain, as in the store,
		 * which always links blocks under their parents */
		r->cas.link = true;
	}
	*out = r;
	return 0;
}

void kvt_replay_close(struct kvt_replay *r)
{
	if (!r)
		return;
	kvt_cascade_fini(&r->cas);
	kvt_idset_clear(&r->ideal);
	free(r->recs);
	free(r->hashes);
	free(r->mrc_hashes);
	free(r->mrc_ticks);
	free(r->keys);
	free(r->tiers);
	free(r);
}

/* Tokens of block j of a request of n input tokens (the last may be partial,
 * and a trace may list more ids than its tokens fill). */
static inline uint64_t block_tokens_of(uint64_t j, uint64_t n, uint32_t bt)
{
	uint64_t start = j * bt;

	if (start >= n)
		return 0;
	return n - start < bt ? n - start : bt;
}

/* Hits of the request against every block seen before. */
static int count_ideal(struct kvt_replay *r, const struct kvt_trace_req *req)
{
	bool leading = true;

	for (size_t j = 0; j < req->n_ids; j++) {
		int added = kvt_idset_add(&r->ideal, req->hash_ids[j]);

		if (added < 0)
			return added;
		if (added) {
			leading = false;
		} else if (leading) {
			r->st.ideal_hit_blocks++;
			r->st.ideal_hit_tokens +=
				block_tokens_of(j, req->input_length, r->opts.block_tokens);
		}
	}
	return 0;
}

/* Use the block of key (its record: known, or KVT_NIL to look it up by its
 * hash) or store it under parent; with an estimator, mrc_hash is its hash
 * there, and a looked-up block (not an output) a reference, unless heard is
 * the tick the estimator gave this reference already (a hit). Returns 0 or
 * -ENOMEM. */
static int use_or_insert(struct kvt_replay *r, const struct kvt_key *key, uint32_t hash,
			 uint32_t known, const struct kvt_key *parent, uint64_t mrc_hash,
			 bool looked_up, uint32_t heard, unsigned reuse_class)
{
	uint64_t bb = r->opts.block_bytes;
	struct kvt_mrc *m = r->opts.mrc;
	uint32_t tick = 0;

	if (known == KVT_NIL)
		known = kvt_index_find_hashed(r->cas.cat.idx, 0, key, hash);
	if (known != KVT_NIL) {
		if (m && !heard) {
			struct kvt_rec *rec = kvt_index_rec(r->cas.cat.idx, known);

			rec->mrc_tick = kvt_mrc_ref(m, mrc_hash, rec->mrc_tick);
		}
		kvt_cascade_use(&r->cas, known, r->opts.promote);
		return 0;
	}
	if (m)
		tick = heard ? heard : looked_up ? kvt_mrc_ref(m, mrc_hash, 0)
						 : kvt_mrc_insert(m, mrc_hash);
	return kvt_cascade_insert(&r->cas, key, parent, bb > UINT32_MAX ? UINT32_MAX : (uint32_t)bb,
				  tick, reuse_class);
}

int kvt_replay_request(struct kvt_replay *r, const struct kvt_trace_req *req)
{
	size_t n = req->n_ids, hits, n_out = 0, j;
	uint32_t bt = r->opts.block_tokens;
	struct kvt_key key, prev;
	uint64_t epoch;
	unsigned cls;
	int err;

	if (n > r->recs_cap) {
		size_t cap = n < 256 ? 256 : n;
		uint32_t *recs = realloc(r->recs, cap * sizeof(*recs));
		uint32_t *hashes;
		struct kvt_key *keys;
		uint8_t *tiers;

		if (!recs)
			return -ENOMEM;
		r->recs = recs;
		tiers = realloc(r->tiers, cap);
		if (!tiers)
			return -ENOMEM;
		r->tiers = tiers;
		hashes = realloc(r->hashes, cap * sizeof(*hashes));
		if (!hashes)
			return -ENOMEM;
		r->hashes = hashes;
		if (r->opts.mrc) {
			uint64_t *mh = realloc(r->mrc_hashes, cap * sizeof(*mh));
			uint32_t *mt;

			if (!mh)
				return -ENOMEM;
			r->mrc_hashes = mh;
			mt = realloc(r->mrc_ticks, cap * sizeof(*mt));
			if (!mt)
				return -ENOMEM;
			r->mrc_ticks = mt;
		}
		keys = realloc(r->keys, cap * sizeof(*keys));
		if (!keys)
			return -ENOMEM;
		r->keys = keys;
		r->recs_cap = cap;
	}
	/* the request's finds overlap their cache misses: hash all, prefetch
	 * the table slots, then the records they name */
	for (j = 0; j < n; j++) {
		kvt_replay_key(req->hash_ids[j], &r->keys[j]);
		r->hashes[j] = kvt_index_hash(0, &r->keys[j]);
		kvt_index_prefetch_slot(r->cas.cat.idx, r->hashes[j]);
		if (r->opts.mrc)
			r->mrc_hashes[j] = kvt_mrc_hash32(r->opts.mrc, r->hashes[j]);
	}
	for (j = 0; j < n; j++)
		kvt_index_prefetch_rec(r->cas.cat.idx, r->hashes[j]);
	r->st.requests++;
	r->st.blocks += n;
	r->st.tokens += req->input_length;

	/* the longest cached prefix, across tiers */
	for (hits = 0; hits < n; hits++) {
		struct kvt_replay_tier_stats *ts;
		struct kvt_rec *rec;
		uint64_t tok;
		uint32_t i;

		i = kvt_index_find_hashed(r->cas.cat.idx, 0, &r->keys[hits], r->hashes[hits]);
		if (i == KVT_NIL)
			break;
		rec = kvt_index_rec(r->cas.cat.idx, i);
		r->tiers[hits] = rec->tier;
		/* the estimator hears the hits here, where their records are at
		 * hand: in the same order as the uses below, and nothing between
		 * depends on it */
		if (r->opts.mrc) {
			rec->mrc_tick = kvt_mrc_ref(r->opts.mrc, r->mrc_hashes[hits], rec->mrc_tick);
			r->mrc_ticks[hits] = rec->mrc_tick;
		}
		ts = &r->st.tier[r->tiers[hits]];
		tok = block_tokens_of(hits, req->input_length, bt);
		ts->hit_blocks++;
		ts->hit_tokens += tok;
		ts->bytes_out += r->opts.block_bytes;
		r->st.hit_blocks++;
		r->st.hit_tokens += tok;
		r->recs[hits] = i;
	}
	r->last_hits = hits;
	if (r->opts.ideal) {
		err = count_ideal(r, req);
		if (err)
			return err;
	}

	/* then every block, in order, used or stored under the one before;
	 * record numbers found above stay valid while no record is freed */
	epoch = r->cas.drops;
	cls = r->opts.reuse_class ? kvt_reuse_class_of(req->output_length) : 0;
	for (j = 0; j < n; j++) {
		uint32_t known = j < hits && r->cas.drops == epoch ? r->recs[j] : KVT_NIL;

		err = use_or_insert(r, &r->keys[j], r->hashes[j], known, j ? &r->keys[j - 1] : NULL,
				    r->opts.mrc ? r->mrc_hashes[j] : 0, true,
				    r->opts.mrc && j < hits ? r->mrc_ticks[j] : 0, cls);
		if (err)
			return err;
	}
	if (n)
		prev = r->keys[n - 1];
	if (r->opts.store_output) {
		uint64_t total = (req->input_length + req->output_length + bt - 1) / bt;

		n_out = total > n ? total - n : 0;
	}
	for (j = 0; j < n_out; j++) {
		uint32_t h;

		output_key(r->st.requests, j, &key);
		h = kvt_index_hash(0, &key);
		err = use_or_insert(r, &key, h, KVT_NIL, n + j ? &prev : NULL,
				    r->opts.mrc ? kvt_mrc_hash32(r->opts.mrc, h) : 0, false, 0, cls);
		if (err)
			return err;
		prev = key;
		r->st.output_blocks++;
	}
	return 0;
}

void kvt_replay_stats(const struct kvt_replay *r, struct kvt_replay_stats *out)
{
	uint64_t bb = r->opts.block_bytes;

	*out = r->st;
	for (int t = KVT_TIER_HBM; t < KVT_TIER_COUNT; t++) {
		const struct kvt_cascade_tier_stats *cs = &r->cas.st[t];
		struct kvt_replay_tier_stats *ts = &out->tier[t];

		ts->capacity = r->cas.cap[t];
		ts->blocks = kvt_cascade_blocks(&r->cas, t);
		ts->peak_blocks = cs->peak_blocks;
		ts->inserted = cs->inserted;
		ts->demoted_in = cs->demoted_in;
		ts->promoted_in = cs->promoted_in;
		ts->evicted = cs->evicted;
		ts->promoted_out = cs->promoted_out;
		ts->refused = cs->refused;
		ts->bytes_in = (cs->inserted + cs->demoted_in + cs->promoted_in) * bb;
		/* hits were counted as read out; demotions and promotions leave
		 * too, while what the last tier evicts is dropped unread */
		ts->bytes_out += cs->promoted_out * bb;
		if (r->cas.n_tiers && t != r->cas.order[r->cas.n_tiers - 1])
			ts->bytes_out += cs->evicted * bb;
	}
	out->dropped = r->cas.drops;
	out->index_bytes = kvt_index_memory(r->cas.cat.idx);
}

const uint8_t *kvt_replay_last_hits(const struct kvt_replay *r, size_t *hits)
{
	*hits = r->last_hits;
	return r->tiers;
}
