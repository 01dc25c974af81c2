/* SPDX-License-Identifier: Apache-2.0 */
/* The sidecar server: the Unix-socket side of the protocol, run by kvtierd.
 *
 * One event-loop thread (the caller of kvt_server_run) accepts connections,
 * reads and validates frames, answers the quick operations (HELLO, LOOKUP,
 * PIN, UNPIN, REMOVE, STATS, PING) itself and hands SAVE and LOAD to a small
 * pool of copy workers; a worker's progress and completion come back to the
 * loop through an eventfd, and the loop answers WAITs. Replies leave in the
 * order operations finish, matched by request id.
 *
 * Bad input costs only its sender: a frame that breaks the framing (magic,
 * version, length) gets an error reply and its connection is closed; a frame
 * with a bad payload gets an error reply and the connection goes on. A client
 * that vanishes has its queued jobs cancelled and its in-flight ones finished
 * against the daemon's own mapping of its memory, then everything it held is
 * freed. */
#ifndef KVT_TRANSPORT_SERVER_H
#define KVT_TRANSPORT_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvtier/log.h"
#include "kvtier/store.h"

struct kvt_dev;

/* A tenant: who may connect with which token, under which salt. */
struct kvt_server_tenant {
	const char *name;
	const char *token;       /* "" = no token */
	const uint8_t *salt;     /* mixed into every namespace of the tenant; tenants
	                          * with equal salts share blocks */
	uint32_t salt_len;       /* <= KVT_SALT_MAX */
	const char *models;      /* comma-separated fnmatch patterns of the model ids
	                          * the tenant may use; NULL or "*" = any */
};

enum kvt_prefault {
	KVT_PREFAULT_NONE = 0,
	KVT_PREFAULT_BACKGROUND = 1, /* a thread while serving, ahead of the slots
	                              * handed out (not the whole region) */
	KVT_PREFAULT_BEFORE = 2,     /* all of it before listening */
};

/* What a cluster adds to the sidecar (kvtierd fills it from
 * app/daemon_cluster.c; every hook is optional): hints and counters. Other
 * nodes' blocks are not reached through hooks: the cluster's peer tier is
 * one of the store's tiers. The server calls them outside any lock of its
 * own; each must return within a bounded time of its own. */
struct kvt_server_hooks {
	/* A client attached namespace ns (HELLO). Returning true takes a hold
	 * on it for the cluster until the server closes (peers may ask for
	 * its blocks, so it is never detached under them). From the loop. */
	bool (*ns_cb)(void *arg, struct kvt_ns *ns);
	/* A SAVE stored keys[0..n) of ns (newly or already present). From a
	 * worker. */
	void (*saved_cb)(void *arg, struct kvt_ns *ns, const struct kvt_key *keys, size_t n);
	/* Counters for STATS (one JSON object, put under "cluster") and for
	 * /metrics (Prometheus text appended): malloc'd, NULL for none. */
	char *(*json_cb)(void *arg);
	char *(*prom_cb)(void *arg);
	/* Why the node should not be sent work (/readyz: not joined, the
	 * directory out of reach), a static string; NULL when ready. From the
	 * loop. */
	const char *(*ready_cb)(void *arg);
	void *arg;
};

struct kvt_server_opts {
	size_t size;                /* sizeof(struct kvt_server_opts), set by _init */
	const char *socket_path;    /* required; with listen_fd, only named in logs */
	unsigned socket_mode;       /* default 0660 */
	gid_t socket_gid;           /* group of the socket and of allowed peers;
	                             * (gid_t)-1 (default) = the daemon's */
	const uid_t *allow_uids;    /* peers allowed besides root, the daemon's uid and
	                             * members of socket_gid */
	size_t n_allow_uids;
	struct kvt_store *store;    /* required; not owned */
	const struct kvt_server_tenant *tenants; /* required, >= 1; copied */
	size_t n_tenants;
	unsigned workers;           /* copy threads; default 4 */
	unsigned peer_workers;      /* of them, how many may run LOADs that may
	                             * wait on other nodes (a key LOOKUP saw in
	                             * tier remote, or did not see) at once; the
	                             * others keep running SAVEs and local LOADs.
	                             * 0 (default): no cluster, no such LOADs */
	unsigned max_clients;       /* default 1024 */
	const char *metrics_addr;   /* "HOST:PORT" of the HTTP metrics endpoint;
	                             * NULL = none */
	kvt_log_cb log;             /* the server's own lines (loop and workers);
	                             * NULL = no logging */
	void *log_arg;
	enum kvt_log_level log_level; /* default KVT_LOG_INFO */
	struct kvt_dev *dev_cuda;   /* serves CUDA IPC registrations; NULL = refused
	                             * (-EOPNOTSUPP). Not owned; the DRAM region
	                             * should be registered with it (mapped). */
	struct kvt_dev *dev_host;   /* when set, memfd registrations go through the
	                             * device layer's host backend too (else the
	                             * server maps them and copies itself). Not owned. */
	enum kvt_prefault prefault_dram; /* fault the store's DRAM region in, so
	                             * no save pays for first-touch page faults
	                             * (default KVT_PREFAULT_NONE) */
	unsigned drain_timeout_ms;  /* how long kvt_server_run waits, once stopped,
	                             * for the jobs in flight (default 30000) */
	unsigned plan_retry_ms;     /* LOOKUP's plan takes a tier measured too slow
	                             * to load from at its default rate again once
	                             * the measurement is this old, so a tier that
	                             * recovers is measured anew (default 30000) */
	unsigned hello_timeout_ms;  /* a connection without a successful HELLO
	                             * this long after accept is closed (default
	                             * 5000; 0 = never) */
	unsigned max_conns_per_uid; /* connections one peer uid may hold (default
	                             * 256; 0 = only max_clients) */
	unsigned max_ns_per_tenant; /* namespaces one tenant may have attached
	                             * (default 1024; 0 = no cap). One with no
	                             * block and no connection is detached. */
	int listen_fd;              /* an already-listening Unix stream socket to
	                             * serve instead of binding socket_path (socket
	                             * activation); -1 (default) binds. The server's
	                             * once kvt_server_open succeeds; its file is left
	                             * as it is (no chmod, chown or unlink). */
	size_t mrc_budget;          /* memory for the live miss-ratio curves of the
	                             * LOOKUP stream, all of them (default 8 MiB;
	                             * 0 = none) */
	double mrc_rate;            /* their highest sampling rate (default 1: every
	                             * block until the budget is full, then fewer,
	                             * fixed-size SHARDS) */
	unsigned stats_namespaces;  /* namespaces with figures of their own in
	                             * STATS and the metrics (default 16); a
	                             * tenant's others count as its "other" */
	bool metrics_tenants;       /* the metrics endpoint also gives per-tenant
	                             * and per-namespace series, labelled with the
	                             * tenants' names and the model ids (default
	                             * false: the endpoint, which needs no
	                             * credentials, names no tenant nor model) */
	struct kvt_server_hooks hooks; /* the cluster's; zeroed = none */
};

struct kvt_server;

void kvt_server_opts_init(struct kvt_server_opts *opts, size_t size_bytes);

/* Bind the socket (replacing a stale socket file, one no daemon listens on;
 * refusing with -EADDRINUSE a live socket or anything else at the path, a
 * regular file or a symlink, which is left as it was and logged) or take
 * opts->listen_fd, bind the metrics endpoint, and start the workers. Returns
 * 0 and *out, -EINVAL for bad opts, or the errno of socket/bind/listen. */
int kvt_server_open(const struct kvt_server_opts *opts, struct kvt_server **out);

/* Run the event loop until kvt_server_stop(); then stop accepting, let the
 * operations in flight finish and their replies go out, waiting at most
 * opts.drain_timeout_ms. Returns 0, or -ETIMEDOUT when jobs were still in
 * flight at the timeout (each is logged, running or queued: event=
 * server.stuck_job): a copy is stuck (a device that does not answer), and
 * kvt_server_close would wait for it, so the caller should leave without
 * closing. The store stays usable meanwhile. */
int kvt_server_run(struct kvt_server *srv);

/* Ask a running loop to stop. Async-signal-safe; callable from any thread. */
void kvt_server_stop(struct kvt_server *srv);

/* Stop as kvt_server_stop does, for a hand-over: the listening socket is
 * kept open (not unlinked), so that connections wait in its backlog for
 * the successor; take it with kvt_server_take_listener once run returns.
 * Callable from any thread. */
void kvt_server_handover(struct kvt_server *srv);

/* The listening socket, now the caller's (kvt_server_close leaves it
 * alone); -1 when the server has none open. */
int kvt_server_take_listener(struct kvt_server *srv);

/* Leave the socket's file in place when the server stops and closes: the
 * socket itself outlives the process (systemd's fd store keeps it). Call
 * before kvt_server_run. */
void kvt_server_keep_path(struct kvt_server *srv);

/* The listening socket (still the server's), -1 once closed. */
int kvt_server_listen_fd(const struct kvt_server *srv);

/* The bound metrics port (useful when opts asked for port 0); 0 when none. */
int kvt_server_metrics_port(const struct kvt_server *srv);

/* Close the listening socket (unlinking its file), stop the workers, free
 * every connection. The store is left open. NULL is accepted. */
void kvt_server_close(struct kvt_server *srv);

#endif /* KVT_TRANSPORT_SERVER_H */
