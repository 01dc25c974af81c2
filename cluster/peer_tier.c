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

/* Fetch items[i..r) from holder h, the run of keys it holds. Returns how
 * many leading items of the run it served, verified. */
static size_t fetch_run(struct kvt_peer_tier *pt, const struct kvt_key *salt, uint64_t bb,
			const struct kvt_dir_holders *hs, size_t i, size_t r,
			const struct kvt_dir_holder *h, struct kvt_peer_item *items)
{
	struct kvt_peer_target t = { .node_id = h->node, .addr = h->addr, .epoch = h->epoch };
	size_t j = i, done = 0;

	while (j < r && holds(&hs[j], h->node))
		j++;
	kvt_peer_fetch(pt->opts.client, &t, salt, bb, items + i, j - i);
	while (i + done < j && !items[i + done].status)
		done++;
	/* the first block not served ends the run: it, and what follows, is
	 * asked of another holder */
	if (i + done < j) {
		int st = items[i + done].status;

		if (st != -ENOENT)
			ADD(errors, 1);
		logf_(pt, KVT_LOG_DEBUG, "event=peer.fetch.failed node=%s addr=%s blocks=%zu "
		      "err=\"%s\"", h->node, h->addr, j - i - done, kvt_strerror(st));
	}
	ADD(blocks, done);
	ADD(bytes, done * bb);
	return done;
}

int kvt_peer_tier_read(struct kvt_peer_tier *pt, const struct kvt_key *salt, uint64_t block_bytes,
		       const struct kvt_dir_holders *hs, struct kvt_peer_item *items, size_t n)
{
	size_t i = 0;

	/* a run per holder; when a holder fails a block, its next holder */
	while (i < n) {
		size_t got = 0;

		for (uint32_t a = 0; a < hs[i].n && !got; a++) {
			if (a)
				ADD(retries, 1);
			got = fetch_run(pt, salt, block_bytes, hs, i, n, &hs[i].h[a], items);
		}
		if (!got) {
			ADD(misses, n - i);
			break;
		}
		i += got;
	}
	return (int)i;
}

int kvt_peer_tier_fetch(struct kvt_peer_tier *pt, struct kvt_ns *ns, const struct kvt_key *keys,
			size_t n, const struct kvt_key *parent)
{
	struct kvt_dir_holders *hs;
	struct kvt_peer_item *items;
	struct kvt_slot *slots;
	size_t m = 0, done = 0;
	int r, got = 0;

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
	/* a slot for each block the directory knows, as far as they go */
	for (; r > 0 && m < (size_t)r; m++) {
		int err = kvt_reserve(ns, &keys[m], m ? &keys[m - 1] : parent, &slots[m]);

		if (err == -EEXIST && m == 0) {
			got = 1; /* stored meanwhile (another LOAD brought it) */
			break;
		}
		if (err)
			break;
		items[m] = (struct kvt_peer_item){ .key = keys[m], .dst = slots[m].data };
	}
	if (m)
		got = kvt_peer_tier_read(pt, kvt_ns_salt(ns), kvt_ns_block_bytes(ns), hs, items, m);
	/* the verified leading blocks join the store, in order */
	for (size_t k = 0; k < m; k++) {
		if ((int)k < got && kvt_commit(ns, &slots[k]) == 0 && done == k)
			done++;
		else if ((int)k >= got)
			kvt_abort(ns, &slots[k]);
	}
	free(hs);
	free(items);
	free(slots);
	return m ? (int)done : got;
}

void kvt_peer_tier_stats(struct kvt_peer_tier *pt, struct kvt_peer_tier_stats *out)
{
	uint64_t *d = (uint64_t *)out;
	const uint64_t *s = (const uint64_t *)&pt->st;

	for (size_t k = 0; k < sizeof(*out) / sizeof(uint64_t); k++)
		d[k] = __atomic_load_n(&s[k], __ATOMIC_RELAXED);
}
