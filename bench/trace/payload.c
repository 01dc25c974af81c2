/* SPDX-License-Identifier: Apache-2.0 */
/* The payload replay; see payload.h. */
#include "bench/trace/payload.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench/trace/replay.h"
#include "tiers/dram.h"
#include "tiers/tier.h"

struct kvt_payload {
	struct kvt_payload_opts opts;
	struct kvt_store *store;
	struct kvt_ns *ns;
	uint8_t *block;          /* bytes of the block being put or got */
	uint8_t *want;           /* what a block read back must hold */
	struct kvt_key *keys;
	uint8_t *tiers;
	size_t cap;
	struct kvt_payload_stats st;
};

void kvt_payload_opts_init(struct kvt_payload_opts *opts, size_t size_bytes)
{
	memset(opts, 0, size_bytes);
	opts->size = size_bytes;
	opts->policy = "lru";
	opts->block_tokens = 512;
	opts->block_bytes = 64 << 10;
	opts->dram_blocks = 4096;
	opts->reuse_class = true;
}

int kvt_payload_open(const struct kvt_payload_opts *o, struct kvt_payload **out)
{
	struct kvt_store_opts so;
	struct kvt_ns_desc d;
	struct kvt_payload *p;
	uint64_t unit, slot;
	int err;

	if (!o || o->size != sizeof(*o) || !out || !o->block_tokens || !o->dram_blocks)
		return -EINVAL;
	/* one layer, one bf16 head of K and V: 4 bytes per token per head_dim */
	unit = 4ull * o->block_tokens;
	if (!o->block_bytes || o->block_bytes % unit || o->block_bytes / unit > UINT32_MAX)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->opts = *o;
	p->block = malloc(o->block_bytes);
	p->want = malloc(o->block_bytes);
	if (!p->block || !p->want) {
		err = -ENOMEM;
		goto err_free;
	}
	kvt_store_opts_init(&so, sizeof(so));
	/* DRAM for dram_blocks slots: each is the block rounded to pages, and
	 * with an SSD tier a page in front for its record header */
	slot = (o->block_bytes + KVT_DRAM_SLOT_ALIGN - 1) & ~(uint64_t)(KVT_DRAM_SLOT_ALIGN - 1);
	if (o->ssd_dir)
		slot += KVT_TIER_HEADROOM;
	so.dram_bytes = o->dram_blocks * slot;
	so.policy = o->policy;
	so.dram_huge_pages = false;
	so.ssd_dir = o->ssd_dir;
	so.ssd_bytes = o->ssd_blocks * o->block_bytes;
	if (o->ssd_dir) {
		/* segments of an eighth of a small tier (256 MiB at most), so
		 * scaled-down tiers still span several of them */
		uint64_t seg = (so.ssd_bytes / 8) & ~(uint64_t)4095, least = 4 * o->block_bytes;

		least = (least + 4095) & ~(uint64_t)4095;
		if (seg < least)
			seg = least;
		so.ssd_segment_bytes = seg < (256ull << 20) ? seg : 256ull << 20;
	}
	err = kvt_store_open(&so, &p->store);
	if (err)
		goto err_block;
	kvt_ns_desc_init(&d, sizeof(d));
	snprintf(d.model_id, sizeof(d.model_id), "trace-replay");
	d.layers = 1;
	d.kv_heads = 1;
	d.head_dim = (uint32_t)(o->block_bytes / unit);
	d.block_tokens = o->block_tokens;
	d.tp_size = 1;
	err = kvt_ns_attach(p->store, &d, &p->ns);
	if (err)
		goto err_store;
	*out = p;
	return 0;

err_store:
	kvt_store_close(p->store);
err_block:
	free(p->want);
	free(p->block);
err_free:
	free(p);
	return err;
}

void kvt_payload_close(struct kvt_payload *p)
{
	if (!p)
		return;
	kvt_store_close(p->store);
	free(p->keys);
	free(p->tiers);
	free(p->want);
	free(p->block);
	free(p);
}

/* The bytes of block id: the id, then a pattern derived from it, so a block
 * served for the wrong key or torn shows. */
static void fill(uint8_t *buf, uint64_t len, uint64_t id)
{
	uint64_t x = id * 0x9E3779B97F4A7C15ull + 1;

	for (uint64_t o = 0; o + 8 <= len; o += 8) {
		memcpy(buf + o, o ? &x : &id, 8);
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
	}
}

static bool check(const uint8_t *buf, uint64_t len, uint64_t id, uint8_t *scratch)
{
	fill(scratch, len, id);
	return !memcmp(buf, scratch, len);
}

static inline uint64_t tokens_of(uint64_t j, uint64_t n, uint32_t bt)
{
	uint64_t start = j * bt;

	return start >= n ? 0 : (n - start < bt ? n - start : bt);
}

int kvt_payload_request(struct kvt_payload *p, const struct kvt_trace_req *req)
{
	uint64_t bb = p->opts.block_bytes;
	size_t n = req->n_ids;
	int hits, err;

	if (kvt_replay_keys(req, &p->keys, &p->tiers, &p->cap))
		return -ENOMEM;
	p->st.requests++;
	p->st.blocks += n;
	p->st.tokens += req->input_length;
	hits = n ? kvt_lookup(p->ns, p->keys, n, p->tiers) : 0;
	if (hits < 0)
		return hits;
	for (int j = 0; j < hits; j++) {
		err = kvt_get(p->ns, &p->keys[j], p->block, bb);
		if (err == -ENOENT) {
			hits = j; /* evicted between the lookup and the read */
			break;
		}
		if (err == -EIO) {
			p->st.bad_bytes++;
			hits = j;
			break;
		}
		if (err)
			return err;
		p->st.bytes_got += bb;
		if (!check(p->block, bb, req->hash_ids[j], p->want)) {
			p->st.bad_bytes++;
			hits = j;
			break;
		}
		p->st.hit_blocks++;
		if (p->tiers[j] < KVT_TIER_COUNT)
			p->st.tier_hits[p->tiers[j]]++;
		p->st.hit_tokens += tokens_of((uint64_t)j, req->input_length, p->opts.block_tokens);
	}
	for (size_t j = (size_t)hits; j < n; j++) {
		fill(p->block, bb, req->hash_ids[j]);
		err = kvt_put_class(p->ns, &p->keys[j], j ? &p->keys[j - 1] : NULL, p->block, bb,
				    p->opts.reuse_class ? kvt_reuse_class_of(req->output_length) : 0);
		if (err == -EEXIST) {
			p->st.put_exists++;
			/* stored already, past the first miss: still a use */
			err = kvt_lookup(p->ns, &p->keys[j], 1, NULL);
			if (err < 0)
				return err;
			continue;
		}
		if (err == -ENOSPC) {
			p->st.put_nospace++;
			continue;
		}
		if (err)
			return err;
		p->st.puts++;
		p->st.bytes_put += bb;
	}
	return 0;
}

int kvt_payload_stats(struct kvt_payload *p, struct kvt_payload_stats *out)
{
	*out = p->st;
	out->store.size = sizeof(out->store);
	return kvt_store_stats(p->store, &out->store);
}
