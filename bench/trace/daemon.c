/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon replay; see daemon.h. */
#include "bench/trace/daemon.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "bench/trace/replay.h"
#include "kvtier/client.h"

struct kvt_daemon_replay {
	struct kvt_daemon_replay_opts opts;
	struct kvt_client *c;
	struct kvt_client_ns ns;
	uint32_t region;
	int memfd;
	void *map;
	uint64_t map_bytes;
	uint32_t *pages;         /* 0, 1, ... opts.pages - 1 */
	struct kvt_key *keys;
	uint8_t *tiers;
	size_t cap;
	struct kvt_daemon_replay_stats st;
};

void kvt_daemon_replay_opts_init(struct kvt_daemon_replay_opts *opts, size_t size_bytes)
{
	memset(opts, 0, size_bytes);
	opts->size = size_bytes;
	opts->block_tokens = 16;
	opts->block_bytes = 16 << 10;
	opts->pages = 1024;
	opts->reuse_class = true;
}

int kvt_daemon_replay_open(const struct kvt_daemon_replay_opts *o,
			   struct kvt_daemon_replay **out)
{
	struct kvt_client_opts co;
	struct kvt_client_region r = { .size = sizeof(r) };
	struct kvt_ns_desc desc;
	struct kvt_daemon_replay *d;
	uint64_t unit;
	int err;

	if (!o || o->size != sizeof(*o) || !out || !o->block_tokens || !o->pages)
		return -EINVAL;
	/* one layer, one bf16 head of K and V: 4 bytes per token per head_dim */
	unit = 4ull * o->block_tokens;
	if (!o->block_bytes || o->block_bytes % unit || o->block_bytes / unit > UINT32_MAX)
		return -EINVAL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->opts = *o;
	d->memfd = -1;
	d->pages = malloc(o->pages * sizeof(*d->pages));
	if (!d->pages) {
		err = -ENOMEM;
		goto err;
	}
	for (uint32_t i = 0; i < o->pages; i++)
		d->pages[i] = i;
	kvt_client_opts_init(&co, sizeof(co));
	if (o->socket)
		co.socket_path = o->socket;
	if (o->token)
		co.token = o->token;
	err = kvt_client_connect(&co, &d->c);
	if (err)
		goto err;
	kvt_ns_desc_init(&desc, sizeof(desc));
	snprintf(desc.model_id, sizeof(desc.model_id), "trace-replay");
	desc.layers = 1;
	desc.kv_heads = 1;
	desc.head_dim = (uint32_t)(o->block_bytes / unit);
	desc.block_tokens = o->block_tokens;
	desc.tp_size = 1;
	err = kvt_client_hello(d->c, &desc, &d->ns);
	if (err)
		goto err;
	if (d->ns.block_bytes != o->block_bytes) {
		err = -EPROTO;
		goto err;
	}
	/* K pages, then V pages, of the one layer: a block is a page of each */
	d->map_bytes = 2 * o->pages * (o->block_bytes / 2);
	d->memfd = kvt_client_memfd_create("trace-replay", d->map_bytes, &d->map);
	if (d->memfd < 0) {
		err = d->memfd;
		d->map = NULL;
		goto err;
	}
	r.memfd = d->memfd;
	r.bytes = d->map_bytes;
	r.layers = 1;
	r.pages = o->pages;
	r.page_stride = o->block_bytes / 2;
	r.kv_stride = r.page_stride * o->pages;
	r.layer_stride = 2 * r.kv_stride;
	err = kvt_client_register(d->c, &d->ns, &r);
	if (err < 0)
		goto err;
	d->region = (uint32_t)err;
	*out = d;
	return 0;

err:
	kvt_daemon_replay_close(d);
	return err;
}

void kvt_daemon_replay_close(struct kvt_daemon_replay *d)
{
	if (!d)
		return;
	kvt_client_close(d->c);
	if (d->map)
		munmap(d->map, d->map_bytes);
	if (d->memfd >= 0)
		close(d->memfd);
	free(d->pages);
	free(d->keys);
	free(d->tiers);
	free(d);
}

/* The most keys one LOOKUP, LOAD or SAVE carries. */
static uint32_t chunk(const struct kvt_daemon_replay *d)
{
	uint32_t m = d->ns.max_keys ? d->ns.max_keys : d->opts.pages;

	return m < d->opts.pages ? m : d->opts.pages;
}

/* The stored leading keys of keys[0..n), a LOOKUP per chunk while each is
 * found whole. Returns the count or -errno. */
static int lookup(struct kvt_daemon_replay *d, size_t n)
{
	size_t hits = 0;

	while (hits < n) {
		uint32_t m = (uint32_t)(n - hits < chunk(d) ? n - hits : chunk(d));
		int got = kvt_client_lookup(d->c, &d->ns, &d->keys[hits], m, &d->tiers[hits]);

		if (got < 0)
			return got;
		hits += (size_t)got;
		if ((uint32_t)got < m)
			break;
	}
	return (int)hits;
}

/* LOAD (or SAVE under parent, with reuse class cls) keys[from..to), a chunk
 * at a time, each waited for. Returns the leading blocks done or -errno. */
static int transfer(struct kvt_daemon_replay *d, bool save, size_t from, size_t to,
		    unsigned cls)
{
	size_t done = from;

	while (done < to) {
		uint32_t m = (uint32_t)(to - done < chunk(d) ? to - done : chunk(d));
		uint64_t ticket;
		int err = save ? kvt_client_save_class(d->c, &d->ns, d->region,
						       done ? &d->keys[done - 1] : NULL,
						       &d->keys[done], d->pages, m, cls, &ticket)
			       : kvt_client_load(d->c, &d->ns, d->region, &d->keys[done], d->pages,
						 m, &ticket);

		if (err)
			return err;
		err = kvt_client_wait(d->c, ticket, -1);
		if (err < 0)
			return err;
		done += (size_t)err;
		if ((uint32_t)err < m)
			break;
	}
	return (int)(done - from);
}

int kvt_daemon_replay_request(struct kvt_daemon_replay *d, const struct kvt_trace_req *req)
{
	size_t n = req->n_ids;
	int hits, got;

	if (kvt_replay_keys(req, &d->keys, &d->tiers, &d->cap))
		return -ENOMEM;
	d->st.requests++;
	d->st.blocks += n;
	d->st.tokens += req->input_length;
	if (!n)
		return 0;
	hits = lookup(d, n);
	if (hits < 0)
		return hits;
	d->st.hit_blocks += (uint64_t)hits;
	for (int j = 0; j < hits; j++)
		if (d->tiers[j] < KVT_TIER_COUNT)
			d->st.tier_hits[d->tiers[j]]++;
	/* an engine loads what it found and computes and saves the rest; a
	 * block evicted between the LOOKUP and the LOAD is computed again */
	got = hits ? transfer(d, false, 0, (size_t)hits, 0) : 0;
	if (got < 0)
		return got;
	d->st.loaded += (uint64_t)got;
	d->st.load_short += (uint64_t)(hits - got);
	/* the reuse class an engine saving a finished request knows: that of
	 * its output length, as in the accounting replay */
	got = transfer(d, true, (size_t)hits, n,
		       d->opts.reuse_class ? kvt_reuse_class_of(req->output_length) : 0);
	if (got < 0)
		return got;
	d->st.saved += (uint64_t)got;
	d->st.save_short += n - (size_t)hits - (size_t)got;
	return 0;
}

void kvt_daemon_replay_stats(const struct kvt_daemon_replay *d,
			     struct kvt_daemon_replay_stats *out)
{
	*out = d->st;
}

static long long tier_counter(json_t *root, const char *tier, const char *key)
{
	json_t *v = json_object_get(json_object_get(json_object_get(root, "tiers"), tier), key);

	return json_is_integer(v) ? json_integer_value(v) : -1;
}

int kvt_daemon_replay_settled_stats(struct kvt_daemon_replay *d, char **json)
{
	long long last[2] = { -1, -1 };
	int err;

	*json = NULL;
	for (int i = 0; i < 300; i++) {
		const struct timespec tenth = { 0, 100 * 1000 * 1000 };
		long long now[2];
		json_t *root;

		free(*json);
		*json = NULL;
		err = kvt_client_stats(d->c, json);
		if (err)
			return err;
		root = json_loads(*json, 0, NULL);
		if (!root)
			return -EPROTO;
		now[0] = tier_counter(root, "dram", "evictions");
		now[1] = tier_counter(root, "ssd", "bytes_in");
		json_decref(root);
		if (i && now[0] == last[0] && now[1] == last[1])
			return 0;
		last[0] = now[0];
		last[1] = now[1];
		nanosleep(&tenth, NULL);
	}
	return -ETIMEDOUT;
}
