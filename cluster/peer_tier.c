/* The peer tier: lookups through the directory, fetches over the peer
 * transport into reserved DRAM slots, another holder when one fails. */
#include "cluster/peer_tier.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kvt_peer_tier {
	struct kvt_peer_tier_opts opts;
	struct kvt_peer_tier_stats st; /* atomic */
};

#define ADD(field, v) __atomic_add_fetch(&pt->st.field, (uint64_t)(v), __ATOMIC_RELAXED)

void kvt_peer_tier_opts_init(struct kvt_peer_tier_opts *opts, size_t size_bytes)
{
	memset(opts, 0, size_bytes);
	opts->size = size_bytes;
}

int kvt_peer_tier_open(const struct kvt_peer_tier_opts *opts, struct kvt_peer_tier **out)
{
	struct kvt_peer_tier *pt;

	if (!opts || opts->size != sizeof(*opts) || !opts->dir || !opts->client || !out)
		return -EINVAL;
	pt = calloc(1, sizeof(*pt));
	if (!pt)
		return -ENOMEM;
	pt->opts = *opts;
	*out = pt;
	return 0;
}

void kvt_peer_tier_close(struct kvt_peer_tier *pt)
{
	free(pt);
}

static void logf_(struct kvt_peer_tier *pt, enum kvt_log_level lvl, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void logf_(struct kvt_peer_tier *pt, enum kvt_log_level lvl, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (!pt->opts.log)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pt->opts.log(pt->opts.log_arg, lvl, msg);
}

int kvt_peer_tier_lookup(struct kvt_peer_tier *pt, const struct kvt_key *keys, size_t n)
{
	struct kvt_dir_holders *hs;
	int r;

	if (n > KVT_PEER_TIER_MAX_KEYS)
		n = KVT_PEER_TIER_MAX_KEYS;
	if (!n)
		return 0;
	hs = malloc(n * sizeof(*hs));
	if (!hs)
		return 0;
	ADD(lookups, 1);
	ADD(lookup_keys, n);
	r = kvt_dir_lookup(pt->opts.dir, keys, n, hs);
	free(hs);
	if (r < 0) {
		ADD(lookup_unanswered, 1);
		return 0;
	}
	ADD(lookup_remote_keys, r);
	return r;
}

/* Whether h lists node. */
static bool holds(const struct kvt_dir_holders *h, const char *node)
{
	for (uint32_t i = 0; i < h->n; i++)
		if (!strcmp(h->h[i].node, node))
			return true;
	return false;
}

/* Fetch keys[i..) from holder h: the run of keys h holds, into slots
 * reserved for them, committed in order while they verify. Returns how
 * many leading keys of the run are stored now (-EEXIST at keys[i]: stored
 * meanwhile, counts as one). */
static size_t fetch_run(struct kvt_peer_tier *pt, struct kvt_ns *ns, const struct kvt_key *keys,
			const struct kvt_key *parent, const struct kvt_dir_holders *hs, size_t i,
			size_t r, const struct kvt_dir_holder *h, struct kvt_peer_item *items,
			struct kvt_slot *slots)
{
	struct kvt_peer_target t = { .node_id = h->node, .addr = h->addr, .epoch = h->epoch };
	uint64_t bb = kvt_ns_block_bytes(ns);
	size_t j = i, k, done = 0;

	while (j < r && holds(&hs[j], h->node))
		j++;
	for (k = i; k < j; k++) {
		int err = kvt_reserve(ns, &keys[k], k ? &keys[k - 1] : parent, &slots[k]);

		if (err == -EEXIST && k == i)
			return 1;
		if (err)
			break;
		items[k] = (struct kvt_peer_item){ .key = keys[k], .dst = slots[k].data };
	}
	j = k;
	if (j == i)
		return 0;
	kvt_peer_fetch(pt->opts.client, &t, kvt_ns_salt(ns), bb, items + i, j - i);
	for (k = i; k < j; k++) {
		int st = items[k].status;

		if (!st && done == k - i) {
			if (kvt_commit(ns, &slots[k]) == 0)
				done++;
			continue;
		}
		/* the prefix stops at the first block not served: the rest of
		 * the run goes back, and is asked of another holder */
		if (st && st != -ENOENT)
			ADD(errors, 1);
		if (st && done == k - i)
			logf_(pt, KVT_LOG_DEBUG, "event=peer.fetch.failed node=%s addr=%s blocks=%zu "
			      "err=\"%s\"", h->node, h->addr, j - k, kvt_strerror(st));
		kvt_abort(ns, &slots[k]);
	}
	ADD(blocks, done);
	ADD(bytes, done * bb);
	return done;
}

int kvt_peer_tier_fetch(struct kvt_peer_tier *pt, struct kvt_ns *ns, const struct kvt_key *keys,
			size_t n, const struct kvt_key *parent)
{
	struct kvt_dir_holders *hs;
	struct kvt_peer_item *items;
	struct kvt_slot *slots;
	size_t i = 0;
	int r;

	if (n > KVT_PEER_TIER_MAX_KEYS)
		n = KVT_PEER_TIER_MAX_KEYS;
	if (!n || !ns)
		return 0;
	ADD(fetches, 1);
	hs = malloc(n * sizeof(*hs));
	items = malloc(n * sizeof(*items));
	slots = malloc(n * sizeof(*slots));
	r = hs && items && slots ? kvt_dir_lookup(pt->opts.dir, keys, n, hs) : -ENOMEM;
	if (r < 0)
		ADD(lookup_unanswered, 1);
	/* a run per holder; when a holder fails a block, its next holder */
	while (r > 0 && i < (size_t)r) {
		size_t got = 0;

		for (uint32_t a = 0; a < hs[i].n && !got; a++) {
			if (a)
				ADD(retries, 1);
			got = fetch_run(pt, ns, keys, parent, hs, i, (size_t)r, &hs[i].h[a], items,
					slots);
		}
		if (!got) {
			ADD(misses, (size_t)r - i);
			break;
		}
		i += got;
	}
	free(hs);
	free(items);
	free(slots);
	return (int)i;
}

void kvt_peer_tier_stats(struct kvt_peer_tier *pt, struct kvt_peer_tier_stats *out)
{
	uint64_t *d = (uint64_t *)out;
	const uint64_t *s = (const uint64_t *)&pt->st;

	for (size_t k = 0; k < sizeof(*out) / sizeof(uint64_t); k++)
		d[k] = __atomic_load_n(&s[k], __ATOMIC_RELAXED);
}
