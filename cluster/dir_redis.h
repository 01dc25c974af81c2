/* SPDX-License-Identifier: Apache-2.0 */
/* The Redis directory's internals, shared by its files:
 *   dir_redis.c          the ops, the queues, the thread and its connection
 *   dir_redis_members.c  joining, renewing, the member snapshot
 *   dir_redis_hints.c    block hints: lookups (MGET) and writes (Lua)
 *
 * Keys, under the configured prefix P (default "kvt:"):
 *   P node:<id>   the node's record (JSON), PX member_ttl, renewed every third
 *   P members     a set of node ids; an id whose record is gone is removed by
 *                 whoever notices first
 *   P epoch       the epoch counter (INCR): each join takes the next value
 *   P blk:<hex>   the block's holders, "NODE=EPOCH:TIER,...", PX hint_ttl.
 *                 Keys are hex because raw bytes with '{' would pick Redis
 *                 Cluster hash slots; tenants stay apart because block keys
 *                 already digest their namespace's salt.
 *
 * A lookup reads the keys of the prefix with one MGET per lookup_batch_keys
 * keys, pipelined: one round trip whatever the prefix's length, and no
 * single command that holds Redis long (docs/cluster.md, the directory's
 * cost). Writes change one holder of a list
 * atomically with a small Lua script per key (EVALSHA, pipelined), loaded
 * at each connect.
 *
 * One thread owns the connection: it connects, joins, renews, refreshes the
 * members and writes the hints; callers only touch queues and snapshots
 * under the mutex. The one exception is a lookup: when the connection is
 * up and idle (io_mu free, the thread asleep), the caller does its MGET on
 * the connection itself, under io_mu and by its own deadline, which saves
 * two thread wake-ups per lookup; a connection that misses the deadline is
 * dropped as on the thread. Otherwise the lookup is queued and waits on a
 * condition variable until its own deadline; if the thread is stuck on a
 * slow Redis the caller still returns on time (-ETIMEDOUT), and the request
 * is freed by whichever side lets go of it last. */
#ifndef KVT_CLUSTER_DIR_REDIS_H
#define KVT_CLUSTER_DIR_REDIS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cluster/directory.h"
#include "cluster/redis_conn.h"
#include "util/log.h"

#define RECONNECT_MIN_MS 50
#define RECONNECT_MAX_MS 2000
/* With Sentinels a retry asks them first, which costs them little, and a
 * failover is over as soon as they name the new primary: retry sooner. */
#define RECONNECT_MAX_SENTINEL_MS 200
#define MAX_LOOKUP_KEYS KVT_DIR_MAX_LOOKUP_KEYS

struct wop {
	struct kvt_key key;
	uint8_t tier; /* KVT_TIER_NONE: forget */
};

struct lookup_req {
	struct lookup_req *next;
	struct kvt_key *keys;
	size_t n;
	struct kvt_dir_holders *out;
	int result;
	bool done;
	int refs; /* the caller's and the queue's/thread's; freed at 0 */
};

struct kvt_rdir {
	struct kvt_dir base;
	struct kvt_dir_opts o;
	struct kvt_redis_url url;
	char prefix[64];
	char url_shown[320]; /* the URL without its password, for logs */

	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t wake;    /* the thread waits here */
	pthread_cond_t done_cv; /* lookup callers wait here */
	bool stop;

	/* under mu */
	struct wop *ring;
	size_t ring_cap, ring_head, ring_n;
	struct lookup_req *lk_head, *lk_tail;
	struct kvt_node_info self; /* epoch = the current one */
	bool self_dirty;
	struct kvt_node_info *members; /* sorted by id */
	size_t n_members;
	struct kvt_dir_stats st;
	bool conn_dropped; /* a caller dropped the connection: wake the thread */

	/* io_mu: held by the thread except while it sleeps, and by a caller
	 * doing its lookup on the idle connection; it guards conn, the scripts
	 * and the member array. The thread raises io_wanted before taking it,
	 * so callers cannot starve it. */
	pthread_mutex_t io_mu;
	atomic_bool io_wanted;
	struct kvt_redis *conn; /* under io_mu, as are the fields below */
	char sha_publish[41], sha_forget[41]; /* the scripts, loaded per connection */
	bool scripts_lost;        /* Redis forgot them: reconnect */
	uint64_t last_epoch; /* the highest epoch this node ever held */
	char primary[300];   /* the server last connected to (kvt_redis_addr) */
	/* the hint writes sent lately, oldest first, with when they went
	 * (dir_redis_replay.c): sent again to a new primary */
	struct wop *sent;
	uint64_t *sent_ns;
	size_t sent_cap, sent_head, sent_n;
	bool was_up;
	/* while Redis is out of reach: the failure last logged, so that each
	 * kind (refused, junk, silence) is logged once, not each retry */
	char down_logged[96];
};

static inline uint64_t kvt_rdir_deadline(const struct kvt_rdir *d)
{
	return kvt_deadline_ms(d->o.io_timeout_ms);
}

/* MGETs of a lookup of n keys. */
static inline size_t kvt_rdir_mgets(const struct kvt_rdir *d, size_t n)
{
	return (n + d->o.lookup_batch_keys - 1) / d->o.lookup_batch_keys;
}

/* What a lookup of n keys may take past its base timeout. */
static inline unsigned kvt_rdir_lookup_extra_ms(const struct kvt_rdir *d, size_t n)
{
	return (unsigned)kvt_rdir_mgets(d, n) * KVT_DIR_LOOKUP_MS_PER_BATCH;
}

/* ---- helpers (dir_redis.c); all but the log run on the thread --------- */

#define kvt_rdir_log(d, lvl, ...) kvt_log_to((d)->o.log, (d)->o.log_arg, lvl, __VA_ARGS__)

/* "<prefix><kind><name>" into buf. */
int kvt_rdir_key(const struct kvt_rdir *d, char *buf, size_t len, const char *kind,
		 const char *name);

/* Queue one command (argv NULL-terminated) for the next kvt_rdir_exec. */
int kvt_rdir_cmd(struct kvt_rdir *d, const char **argv);
#define CMD(d, ...) kvt_rdir_cmd((d), (const char *[]){ __VA_ARGS__, NULL })

/* Send what is queued and read n replies by the I/O deadline. */
int kvt_rdir_exec(struct kvt_rdir *d, redisReply **rep, size_t n);

/* A +OK status reply. */
bool kvt_rdir_ok(const redisReply *r);

/* The connection failed: close it, count, log the outage once. */
void kvt_rdir_conn_lost(struct kvt_rdir *d, int err);

/* ---- a new primary (dir_redis_replay.c) ------------------------------- */

/* Remember ops[0..n), just written. */
void kvt_rdir_sent(struct kvt_rdir *d, const struct wop *ops, size_t n);

/* A connection was just made: if it reached another server than the last
 * one (Sentinel promoted a replica), the writes sent in the last
 * replay_ms go out again, before those queued since, since the old
 * primary may have acknowledged them without passing them on. */
void kvt_rdir_primary_seen(struct kvt_rdir *d);

/* ---- membership (dir_redis_members.c) --------------------------------- */

/* Renew this node's record, or (re)join under a new epoch. */
int kvt_rdir_renew(struct kvt_rdir *d);

/* Read the member set and records into a new snapshot. */
int kvt_rdir_refresh_members(struct kvt_rdir *d);

/* A member of the current snapshot, or NULL (the thread's to read without
 * the lock: only the thread replaces it). */
const struct kvt_node_info *kvt_rdir_member(const struct kvt_rdir *d, const char *id);

/* Delete this node's record and set entry (closing). */
void kvt_rdir_leave(struct kvt_rdir *d);

/* ---- hints (dir_redis_hints.c) ----------------------------------------- */

/* SCRIPT LOAD the writers' scripts on a new connection. */
int kvt_rdir_load_scripts(struct kvt_rdir *d);

/* Answer the queued lookups; send a batch of queued writes. */
void kvt_rdir_lookups(struct kvt_rdir *d);
void kvt_rdir_writes(struct kvt_rdir *d);

/* Answer one lookup on the caller's thread, io_mu held and the connection
 * up, by deadline_ns; returns the prefix length or a negative errno (the
 * connection is dropped on failure, as on the thread). */
int kvt_rdir_lookup_now(struct kvt_rdir *d, struct lookup_req *r, uint64_t deadline_ns);

/* Complete lookups with err (or their results), waking their callers. */
void kvt_rdir_finish_lookups(struct kvt_rdir *d, struct lookup_req *list, int err, uint64_t stale);

/* Drop one reference to a lookup; freed with the last. Lock held. */
void kvt_rdir_req_put(struct lookup_req *r);

#endif /* KVT_CLUSTER_DIR_REDIS_H */
