/* The peer tier: blocks other nodes of the cluster hold, as the sidecar
 * sees them. After a local miss, lookup asks the directory which live nodes
 * hold the rest of the prefix (one bounded round trip); fetch brings those
 * blocks into this node's store: each run of keys one holder has is fetched
 * from it over the peer transport straight into reserved DRAM slots,
 * verified end to end, and committed; a block a holder fails (dead, cut
 * off, evicted since its hint, wrong bytes) is asked of its next holder,
 * and the prefix ends at the first block no holder serves (the engine
 * recomputes from there).
 *
 * Time: a lookup waits at most the directory's lookup timeout; a fetch
 * waits on each holder at most the peer client's no-progress timeout, and
 * a holder that failed within the client's down_ms is skipped at once.
 *
 * Thread-safe; the directory and the client are the caller's (not owned). */
#ifndef KVT_CLUSTER_PEER_TIER_H
#define KVT_CLUSTER_PEER_TIER_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/directory.h"
#include "kvtier/store.h"
#include "transport/peer_client.h"

/* Keys one lookup or fetch considers; a longer prefix ends there. */
#define KVT_PEER_TIER_MAX_KEYS 1024u

struct kvt_peer_tier_opts {
	size_t size;                  /* sizeof(struct kvt_peer_tier_opts), set by _init */
	struct kvt_dir *dir;          /* required */
	struct kvt_peer_client *client; /* required */
	kvt_log_cb log;
	void *log_arg;
};

struct kvt_peer_tier_stats {
	uint64_t lookups, lookup_keys;  /* lookups after a local miss, their keys */
	uint64_t lookup_remote_keys;    /* keys found held by other nodes */
	uint64_t lookup_unanswered;     /* the directory could not tell in time */
	uint64_t fetches;               /* fetch calls */
	uint64_t blocks, bytes;         /* brought in, verified and stored */
	uint64_t retries;               /* blocks asked of a next holder */
	uint64_t misses;                /* blocks the directory named and no holder served */
	uint64_t errors;                /* holder failures (timeouts, resets, checksums, refusals) */
};

struct kvt_peer_tier;

void kvt_peer_tier_opts_init(struct kvt_peer_tier_opts *opts, size_t size_bytes);

/* Returns 0 and *out, -EINVAL, -ENOMEM. */
int kvt_peer_tier_open(const struct kvt_peer_tier_opts *opts, struct kvt_peer_tier **out);

/* How many leading keys of keys[0..n) live nodes other than this one hold
 * (n is capped at KVT_PEER_TIER_MAX_KEYS); 0 when the directory is out of
 * reach or slow. */
int kvt_peer_tier_lookup(struct kvt_peer_tier *pt, const struct kvt_key *keys, size_t n);

/* Bring the leading blocks of keys[0..n) that other nodes hold into ns
 * (parent: the key before keys[0], NULL at a sequence's start). Returns how
 * many leading keys are stored afterwards (a key stored meanwhile by
 * another caller counts), 0 when none. */
int kvt_peer_tier_fetch(struct kvt_peer_tier *pt, struct kvt_ns *ns, const struct kvt_key *keys,
			size_t n, const struct kvt_key *parent);

/* Fetch items[0..n) (blocks of block_bytes of the namespace with salt
 * `salt`; item i's holders hs[i], best first, as kvt_dir_lookup gives them)
 * straight into their dst: each run of keys one holder has in one request,
 * and a block a holder fails, with what follows it, from its next holder.
 * Sets every item's status (0: verified bytes in dst). Returns how many
 * leading items are fetched; the first that no holder serves ends them. */
int kvt_peer_tier_read(struct kvt_peer_tier *pt, const struct kvt_key *salt, uint64_t block_bytes,
		       const struct kvt_dir_holders *hs, struct kvt_peer_item *items, size_t n);

void kvt_peer_tier_stats(struct kvt_peer_tier *pt, struct kvt_peer_tier_stats *out);

/* NULL is accepted. No call may be running. */
void kvt_peer_tier_close(struct kvt_peer_tier *pt);

#endif /* KVT_CLUSTER_PEER_TIER_H */
