/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierd in a cluster: directory, peer server, peer client, and the peer
 * tier added to the store; the sidecar server's hooks for hints and
 * counters. */
#include "app/daemon_cluster.h"

#include <errno.h>
#include <stddef.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "app/daemon_log.h"
#include "app/daemon_rdma.h"
#include "cluster/directory.h"
#include "cluster/hint_refresh.h"
#include "cluster/lease.h"
#include "cluster/peer_tier.h"
#include "cluster/peer_client.h"
#include "cluster/peer_rdma.h"
#include "cluster/peer_server.h"
#include "transport/prom_text.h"
#include "transport/stats_json.h"
#include "transport/textbuf.h"

#define MAX_PEERS 64

struct kvtd_cluster {
	char node_id[KVT_NODE_ID_MAX + 1];
	char listen[KVT_NODE_ADDR_MAX + 1];
	char url[256];
	struct kvt_peer_secret secret;
	struct kvt_dir *dir;
	struct kvt_peer_server *srv;
	struct kvt_peer_client *cli;
	struct kvt_peer_tier *tier; /* the store's once added */
	bool tier_added;
	struct kvt_rdma *rdma;      /* with rdma_device: the store's DRAM region registered */
	struct kvt_lease_table *leases; /* the blocks lent to peers' RDMA reads */

	/* namespaces clients attached, found by salt for peers */
	pthread_mutex_t ns_mu;
	struct kvt_ns **ns;
	size_t n_ns, cap_ns;

	/* publishes again what the store holds: periodically, before the
	 * hints' TTL ends, and at every (re)join */
	struct kvt_hint_refresh *refresh;
	uint64_t forgotten;        /* hints forgotten: a peer asked, the block was gone */
};

/* ---- namespaces -------------------------------------------------------- */

/* Holds ns for good (true) the first time a client attaches it, so the
 * server never detaches it while a peer may be reading it. The store
 * indexes the blocks it recovered from SSD for a namespace when the
 * namespace is first attached: they are published then. */
static bool on_ns(void *arg, struct kvt_ns *ns)
{
	struct kvtd_cluster *cl = arg;
	struct kvt_hint_refresh *r;
	bool added = false;

	pthread_mutex_lock(&cl->ns_mu);
	for (size_t i = 0; i < cl->n_ns; i++)
		if (cl->ns[i] == ns)
			goto out;
	if (cl->n_ns == cl->cap_ns) {
		size_t cap = cl->cap_ns ? cl->cap_ns * 2 : 16;
		struct kvt_ns **p = realloc(cl->ns, cap * sizeof(*p));

		if (!p)
			goto out; /* peers get -EBADF for it: a miss */
		cl->ns = p;
		cl->cap_ns = cap;
	}
	cl->ns[cl->n_ns++] = ns;
	added = true;
out:
	pthread_mutex_unlock(&cl->ns_mu);
	r = __atomic_load_n(&cl->refresh, __ATOMIC_ACQUIRE);
	if (added && r)
		kvt_hint_refresh_now(r);
	return added;
}

/* The server holds every namespace in the list for good (see on_ns): the
 * pointers stay good until the store closes, after the peer server. */
static struct kvt_ns *find_ns(void *arg, const struct kvt_key *salt)
{
	struct kvtd_cluster *cl = arg;
	struct kvt_ns *found = NULL;

	pthread_mutex_lock(&cl->ns_mu);
	for (size_t i = 0; i < cl->n_ns && !found; i++)
		if (!memcmp(kvt_ns_salt(cl->ns[i]), salt, sizeof(*salt)))
			found = cl->ns[i];
	pthread_mutex_unlock(&cl->ns_mu);
	return found;
}

/* ---- hints ------------------------------------------------------------- */

/* This node holds keys[0..n) now, in DRAM. */
static void on_saved(void *arg, struct kvt_ns *ns, const struct kvt_key *keys, size_t n)
{
	struct kvtd_cluster *cl = arg;

	(void)ns;
	kvt_dir_publish(cl->dir, keys, n, KVT_TIER_DRAM);
}

/* A new epoch: hints written under the old one are not believed any more,
 * so everything held is published again (at the first join: blocks
 * recovered from SSD). The first join may come before the refresher
 * exists; it walks once when it starts. */
static void on_rejoin(void *arg, uint64_t epoch)
{
	struct kvtd_cluster *cl = arg;
	struct kvt_hint_refresh *r = __atomic_load_n(&cl->refresh, __ATOMIC_ACQUIRE);

	if (r)
		kvt_hint_refresh_now(r);
	kvtd_log(KVT_LOG_INFO, "event=cluster.republish epoch=%" PRIu64, epoch);
}

/* The refresher's way to the directory. */
static void refresh_publish(void *arg, const struct kvt_key *keys, size_t n, uint8_t tier)
{
	struct kvtd_cluster *cl = arg;
	struct kvt_dir_stats ds;

	/* before the first join they would only be dropped: the join walks */
	kvt_dir_stats(cl->dir, &ds);
	if (ds.epoch)
		kvt_dir_publish(cl->dir, keys, n, tier);
}

static size_t refresh_backlog(void *arg)
{
	struct kvtd_cluster *cl = arg;
	struct kvt_dir_stats ds;

	kvt_dir_stats(cl->dir, &ds);
	return (size_t)ds.queued_keys;
}

/* /readyz: a node that has not joined (or lost the directory) is not told
 * of by its peers and finds none of theirs; it serves, but not as asked. */
static const char *on_ready(void *arg)
{
	struct kvtd_cluster *cl = arg;
	struct kvt_dir_stats ds;

	kvt_dir_stats(cl->dir, &ds);
	if (!ds.epoch)
		return "not joined yet (no epoch from the directory)";
	if (!ds.reachable)
		return "the directory (Redis) is out of reach";
	return NULL;
}

/* A peer asked for a block evicted since its hint was written. */
static void on_miss(void *arg, struct kvt_ns *ns, const struct kvt_key *key)
{
	struct kvtd_cluster *cl = arg;

	(void)ns;
	kvt_dir_forget(cl->dir, key, 1);
	__atomic_add_fetch(&cl->forgotten, 1, __ATOMIC_RELAXED);
}

/* The peer tier brought keys[0..n) into the store's DRAM: one more holder
 * for the next reader. */
static void on_fetched(void *arg, const struct kvt_key *keys, size_t n)
{
	struct kvtd_cluster *cl = arg;

	kvt_dir_publish(cl->dir, keys, n, KVT_TIER_DRAM);
}

/* ---- counters ---------------------------------------------------------- */

static char *on_json(void *arg)
{
	struct kvtd_cluster *cl = arg;
	struct kvt_hint_refresh_stats rs;
	struct kvt_dir_stats ds;
	struct kvt_peer_server_stats ss;
	struct kvt_peer_tier_stats ts;
	struct kvt_peer_stats ps[MAX_PEERS];
	json_t *root = json_object(), *dir = json_object(), *srv = json_object();
	json_t *tier = json_object(), *peers = json_array();
	char *text;
	int np;

	kvt_dir_stats(cl->dir, &ds);
	kvt_hint_refresh_stats(cl->refresh, &rs);
	kvt_peer_server_stats(cl->srv, &ss);
	kvt_peer_tier_stats(cl->tier, &ts);
	np = kvt_peer_client_stats(cl->cli, ps, MAX_PEERS);
	const struct kvt_json_count dir_counts[] = {
		{ "epoch", ds.epoch },
		{ "members", ds.members },
		{ "joins", ds.joins },
		{ "lookups", ds.lookups },
		{ "lookups_unreachable", ds.lookups_unreachable },
		{ "lookups_timed_out", ds.lookups_timed_out },
		{ "published_keys", ds.published_keys },
		{ "forgotten_keys", ds.forgotten_keys },
		{ "dropped_keys", ds.dropped_keys },
		{ "stale_hints", ds.stale_hints },
		{ "queued_keys", ds.queued_keys },
		{ "refresh_walks", rs.walks },
		{ "refresh_keys", rs.keys },
		{ "errors", ds.errors },
		{ "reconnects", ds.reconnects },
		{ "primary_changes", ds.primary_changes },
		{ "replayed_keys", ds.replayed_keys },
	};
	const struct kvt_json_count serving_counts[] = {
		{ "connections", ss.conns },
		{ "accepted", ss.accepted },
		{ "refused", ss.refused },
		{ "auth_failures", ss.auth_failures },
		{ "unauth_dropped", ss.unauth_dropped },
		{ "requests", ss.requests },
		{ "bad_requests", ss.bad_requests },
		{ "blocks_sent", ss.blocks_sent },
		{ "bytes_sent", ss.bytes_sent },
		{ "misses", ss.misses },
		{ "send_errors", ss.send_errors },
		{ "hints_forgotten", __atomic_load_n(&cl->forgotten, __ATOMIC_RELAXED) },
	};
	const struct kvt_json_count tier_counts[] = {
		{ "lookups", ts.lookups },
		{ "lookup_keys", ts.lookup_keys },
		{ "lookup_remote_keys", ts.lookup_remote_keys },
		{ "lookup_cached_keys", ts.lookup_cached_keys },
		{ "lookup_unanswered", ts.lookup_unanswered },
		{ "fetches", ts.fetches },
		{ "blocks", ts.blocks },
		{ "bytes", ts.bytes },
		{ "retries", ts.retries },
		{ "misses", ts.misses },
		{ "errors", ts.errors },
		{ "parallel_rounds", ts.parallel_rounds },
		{ "fetching_max", ts.fetching_max },
	};

	json_object_set_new(root, "node_id", json_string(cl->node_id));
	json_object_set_new(root, "peer_addr", json_string(cl->listen));
	json_object_set_new(dir, "reachable", json_boolean(ds.reachable));
	KVT_JSON_SET_COUNTS(dir, dir_counts);
	json_object_set_new(root, "directory", dir);
	KVT_JSON_SET_COUNTS(srv, serving_counts);
	json_object_set_new(root, "serving", srv);
	KVT_JSON_SET_COUNTS(tier, tier_counts);
	json_object_set_new(root, "peer_tier", tier);
	for (int i = 0; i < np && i < MAX_PEERS; i++) {
		const struct kvt_peer_stats *peer = &ps[i];
		const struct kvt_json_count peer_counts[] = {
			{ "hits", peer->blocks },
			{ "bytes", peer->bytes },
			{ "misses", peer->misses },
			{ "errors", peer->checksum_errors + peer->timeouts + peer->conn_errors +
				    peer->auth_errors + peer->slow },
			{ "checksum_errors", peer->checksum_errors },
			{ "timeouts", peer->timeouts },
			{ "slow", peer->slow },
			{ "conn_errors", peer->conn_errors },
			{ "auth_errors", peer->auth_errors },
			{ "connects", peer->connects },
		};
		json_t *p = json_object();

		json_object_set_new(p, "node", json_string(peer->node_id));
		json_object_set_new(p, "addr", json_string(peer->addr));
		KVT_JSON_SET_COUNTS(p, peer_counts);
		json_object_set_new(p, "down", json_boolean(peer->down));
		json_array_append_new(peers, p);
	}
	json_object_set_new(root, "peers", peers);
	if (cl->rdma)
		json_object_set_new(root, "rdma", kvtd_rdma_json(cl->rdma, cl->leases));
	text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(root);
	return text;
}

/* A family with one sample per peer, labelled by the peer's node id. */
static void per_peer(struct kvt_textbuf *b, const char *name, const char *help,
		     const struct kvt_peer_stats *ps, int np, size_t field)
{
	kvt_prom_help(b, name, "counter", help);
	for (int i = 0; i < np && i < MAX_PEERS; i++) {
		uint64_t v;

		memcpy(&v, (const char *)&ps[i] + field, sizeof(v));
		kvt_textbuf_printf(b, "%s{peer=\"%s\"} %llu\n", name, ps[i].node_id,
				   (unsigned long long)v);
	}
}

static char *on_prom(void *arg)
{
	struct kvtd_cluster *cl = arg;
	struct kvt_dir_stats ds;
	struct kvt_peer_server_stats ss;
	struct kvt_peer_tier_stats ts;
	struct kvt_peer_stats ps[MAX_PEERS];
	struct kvt_textbuf b = { 0 };
	int np;

	kvt_dir_stats(cl->dir, &ds);
	kvt_peer_server_stats(cl->srv, &ss);
	kvt_peer_tier_stats(cl->tier, &ts);
	np = kvt_peer_client_stats(cl->cli, ps, MAX_PEERS);
	const struct kvt_prom_count membership[] = {
		{ "kvtier_cluster_redis_reachable", "gauge",
		  "1 when the last exchange with Redis worked.", ds.reachable ? 1 : 0 },
		{ "kvtier_cluster_members", "gauge",
		  "Live members of the cluster, this node included.", ds.members },
		{ "kvtier_cluster_epoch", "gauge",
		  "This node's epoch (fencing token), 0 before it joined.", ds.epoch },
		{ "kvtier_cluster_joins_total", "counter", "Times this node took an epoch.", ds.joins },
		{ "kvtier_cluster_primary_changes_total", "counter",
		  "Connections to Redis that reached another server than the last (a failover "
		  "Sentinel made).", ds.primary_changes },
	};
	const struct kvt_prom_sample hints[] = {
		{ "publish", ds.published_keys },
		{ "forget", ds.forgotten_keys },
		{ "dropped", ds.dropped_keys },
		{ "replayed", ds.replayed_keys },
	};
	const struct kvt_prom_sample lookups[] = {
		{ "answered", ds.lookups - ds.lookups_unreachable - ds.lookups_timed_out },
		{ "unreachable", ds.lookups_unreachable },
		{ "timed_out", ds.lookups_timed_out },
	};
	const struct kvt_prom_count serving[] = {
		{ "kvtier_cluster_directory_errors_total", "counter",
		  "Failed connects and pipelines to Redis.", ds.errors },
		{ "kvtier_peer_served_blocks_total", "counter", "Blocks this node sent to peers.",
		  ss.blocks_sent },
		{ "kvtier_peer_served_bytes_total", "counter", "Bytes this node sent to peers.",
		  ss.bytes_sent },
		{ "kvtier_peer_served_misses_total", "counter",
		  "Blocks peers asked for that this node lacked.", ss.misses },
		{ "kvtier_peer_auth_failures_total", "counter",
		  "Peer handshakes refused (wrong secret, garbage).", ss.auth_failures },
		{ "kvtier_peer_unauth_dropped_total", "counter",
		  "Peer connections cut in their handshake to make room for newer ones.",
		  ss.unauth_dropped },
	};
	const struct kvt_prom_sample fetched[] = {
		{ "fetched", ts.blocks },
		{ "retried", ts.retries },
		{ "miss", ts.misses },
	};

	kvt_prom_counts(&b, membership, KVT_COUNT_OF(membership));
	kvt_prom_labelled(&b, "kvtier_cluster_hints_total", "counter", "Block hints written, removed, dropped, and sent again to a new primary.",
			  "op", hints, KVT_COUNT_OF(hints));
	kvt_prom_labelled(&b, "kvtier_cluster_directory_lookups_total", "counter",
			  "Directory lookups, by result (unreachable and timed_out: answered local-only).",
			  "result", lookups, KVT_COUNT_OF(lookups));
	kvt_prom_counts(&b, serving, KVT_COUNT_OF(serving));
	kvt_prom_labelled(&b, "kvtier_peer_tier_blocks_total", "counter",
			  "Blocks the peer tier brought in, by result.", "result", fetched,
			  KVT_COUNT_OF(fetched));
	per_peer(&b, "kvtier_peer_hits_total", "Blocks fetched from each peer and verified.", ps, np,
		 offsetof(struct kvt_peer_stats, blocks));
	per_peer(&b, "kvtier_peer_bytes_total", "Bytes fetched from each peer and verified.", ps, np,
		 offsetof(struct kvt_peer_stats, bytes));
	kvt_prom_help(&b, "kvtier_peer_errors_total", "counter",
		      "Failures fetching from each peer, by kind.");
	for (int i = 0; i < np && i < MAX_PEERS; i++) {
		const struct kvt_prom_sample kinds[] = {
			{ "timeout", ps[i].timeouts },
			{ "slow", ps[i].slow },
			{ "connection", ps[i].conn_errors },
			{ "auth", ps[i].auth_errors },
			{ "checksum", ps[i].checksum_errors },
		};

		for (size_t k = 0; k < KVT_COUNT_OF(kinds); k++)
			kvt_textbuf_printf(&b, "kvtier_peer_errors_total{peer=\"%s\",kind=\"%s\"} %llu\n",
					   ps[i].node_id, kinds[k].label_value,
					   (unsigned long long)kinds[k].value);
	}
	per_peer(&b, "kvtier_peer_misses_total", "Blocks a peer named by a hint no longer held.", ps,
		 np, offsetof(struct kvt_peer_stats, misses));
	if (cl->rdma)
		kvtd_rdma_prom(&b, cl->rdma, cl->leases);
	if (b.bad) {
		free(b.p);
		return NULL;
	}
	return b.p;
}

/* ---- lifecycle --------------------------------------------------------- */

int kvtd_cluster_open(const struct kvtd_config *cfg, struct kvt_store *store,
		      struct kvt_server_hooks *hooks, struct kvtd_cluster **out)
{
	struct kvt_peer_server_opts po;
	struct kvt_peer_client_opts co;
	struct kvt_peer_tier_opts to;
	struct kvt_dir_opts dopt;
	struct kvt_hint_refresh_opts ro;
	struct kvt_hint_refresh *refresh;
	struct kvtd_cluster *cl;
	int err;

	cl = calloc(1, sizeof(*cl));
	if (!cl)
		return -ENOMEM;
	pthread_mutex_init(&cl->ns_mu, NULL);
	snprintf(cl->node_id, sizeof(cl->node_id), "%s", cfg->node_id);
	snprintf(cl->listen, sizeof(cl->listen), "%s", cfg->peer_listen);
	snprintf(cl->url, sizeof(cl->url), "%s", cfg->cluster);
	err = kvt_peer_secret_load(cfg->cluster_secret_file, &cl->secret);
	if (err) {
		kvtd_log(KVT_LOG_ERROR, "event=cluster.secret.failed file=%s err=\"%s\" hint=\"%s\"",
			 cfg->cluster_secret_file, kvt_strerror(err),
			 err == -EPERM ? "chmod 600 the file" : err == -EINVAL ?
			 "the secret must be 16 to 1024 bytes" :
			 "create it: head -c 32 /dev/urandom > FILE; chmod 600 FILE");
		goto fail;
	}

	kvt_peer_client_opts_init(&co, sizeof(co));
	co.node_id = cfg->node_id;
	co.secret = &cl->secret;
	co.timeout_ms = cfg->peer_timeout_ms;
	co.log = kvtd_log_cb;
	err = kvt_peer_client_open(&co, &cl->cli);
	if (err)
		goto fail;

	kvt_dir_opts_init(&dopt, sizeof(dopt));
	if (cfg->rdma_device[0] &&
	    (err = kvtd_rdma_open(cfg->rdma_device, NULL, store, cl->cli, &dopt.self, &cl->rdma,
				  &cl->leases)))
		goto fail;

	kvt_peer_server_opts_init(&po, sizeof(po));
	po.listen = cfg->peer_listen;
	po.node_id = cfg->node_id;
	po.secret = &cl->secret;
	po.find_ns_cb = find_ns;
	po.miss_cb = on_miss;
	po.find_ns_arg = cl;
	po.timeout_ms = cfg->peer_timeout_ms > 5000 ? cfg->peer_timeout_ms : 5000;
	po.log = kvtd_log_cb;
	if (cl->rdma) {
		po.leases = cl->leases;
		po.rdma = kvt_rdma_owner_hooks(cl->rdma);
	}
	err = kvt_peer_server_open(&po, &cl->srv);
	if (err) {
		kvtd_log(KVT_LOG_ERROR, "event=peer.listen.failed addr=%s err=\"%s\"", cfg->peer_listen,
			 kvt_strerror(err));
		goto fail;
	}

	dopt.url = cfg->cluster;
	snprintf(dopt.self.id, sizeof(dopt.self.id), "%s", cfg->node_id);
	snprintf(dopt.self.addr, sizeof(dopt.self.addr), "%s", cfg->peer_listen);
	dopt.rejoin_cb = on_rejoin;
	dopt.rejoin_arg = cl;
	dopt.log = kvtd_log_cb;
	err = kvt_dir_open(&dopt, &cl->dir);
	if (err) {
		kvtd_log(KVT_LOG_ERROR, "event=cluster.open.failed url=%s err=\"%s\"", cfg->cluster,
			 kvt_strerror(err));
		goto fail;
	}

	kvt_hint_refresh_opts_init(&ro, sizeof(ro));
	ro.store = store;
	ro.every_ms = dopt.hint_ttl_ms / 3;
	ro.backlog_max = dopt.max_queued_keys / 2;
	ro.publish_cb = refresh_publish;
	ro.backlog_cb = refresh_backlog;
	ro.arg = cl;
	err = kvt_hint_refresh_start(&ro, &refresh);
	if (err)
		goto fail;
	__atomic_store_n(&cl->refresh, refresh, __ATOMIC_RELEASE);

	kvt_peer_tier_opts_init(&to, sizeof(to));
	to.dir = cl->dir;
	to.client = cl->cli;
	to.fetched_cb = on_fetched;
	to.fetched_arg = cl;
	to.rdma = cl->rdma;
	to.log = kvtd_log_cb;
	err = kvt_peer_tier_open(&to, &cl->tier);
	if (err)
		goto fail;
	/* the store asks the peer tier after a local miss, as it asks the SSD
	 * tier for what it holds: LOOKUP reports those blocks remote, LOAD
	 * brings them into DRAM */
	cl->tier_added = true; /* the store's from here on, even on failure */
	err = kvt_store_add_tier(store, kvt_peer_tier_storage(cl->tier));
	if (err) {
		cl->tier = NULL;
		kvtd_log(KVT_LOG_ERROR, "event=cluster.peer_tier.failed err=\"%s\"",
			 kvt_strerror(err));
		goto fail;
	}

	*hooks = (struct kvt_server_hooks){
		.ns_cb = on_ns, .saved_cb = on_saved, .json_cb = on_json, .prom_cb = on_prom,
		.ready_cb = on_ready,
		.arg = cl,
	};
	kvtd_log(KVT_LOG_INFO, "event=cluster.start node=%s peer_addr=%s directory=%s",
		 cl->node_id, cl->listen, cl->url);
	*out = cl;
	return 0;
fail:
	kvtd_cluster_close(cl);
	return err;
}

void kvtd_cluster_describe(struct kvtd_cluster *cl, FILE *f)
{
	fprintf(f, "  cluster   node %s, peers at %s (%s), directory %s\n", cl->node_id,
		cl->listen, cl->rdma ? "tcp, rdma" : "tcp", cl->url);
}

void kvtd_cluster_close(struct kvtd_cluster *cl)
{
	if (!cl)
		return;
	/* it publishes into the directory from the store */
	kvt_hint_refresh_stop(cl->refresh);
	/* leave first, so peers stop being sent here */
	kvt_dir_close(cl->dir);
	kvt_peer_server_close(cl->srv);
	kvt_lease_table_close(cl->leases);
	/* the peer tier, once added, is the store's: closed with it, and not
	 * called once the sidecar server is closed */
	if (!cl->tier_added)
		kvt_peer_tier_close(cl->tier);
	kvt_rdma_close(cl->rdma); /* its queue pairs' control connections are the client's */
	kvt_peer_client_close(cl->cli);
	explicit_bzero(&cl->secret, sizeof(cl->secret));
	free(cl->ns);
	pthread_mutex_destroy(&cl->ns_mu);
	kvtd_log(KVT_LOG_INFO, "event=cluster.leave node=%s", cl->node_id);
	free(cl);
}
