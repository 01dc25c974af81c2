/* SPDX-License-Identifier: Apache-2.0 */
/* Internals of the sidecar server shared by its files:
 *   server.c       the lifecycle: open, the event loop, drain, close
 *   server_conn.c  connections: accept, credentials, read/write, passed fds, close
 *   server_ops.c   operations: dispatch, HELLO's token and model checks, op_*
 *   server_register.c  REGISTER and REGISTER_PARTS: engine memory as regions
 *   server_wait.c  tickets, parked WAITs, the workers' completion notes
 *   server_jobs.c  the copy workers: SAVE and LOAD
 *   server_plan.c  LOOKUP's plan: load or recompute, from the measured rates
 *   rates.c        moving averages of what tiers and engines deliver
 *   metrics.c      counters, Prometheus text, JSON stats
 *   http.c         the metrics endpoint */
#ifndef KVT_TRANSPORT_SERVER_INT_H
#define KVT_TRANSPORT_SERVER_INT_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "transport/engine_mem.h"
#include "transport/insight.h"
#include "transport/proto.h"
#include "transport/rates.h"
#include "transport/server.h"
#include "util/clock.h"

#define KVT_CONN_MAX_NS 16
#define KVT_CONN_MAX_REGIONS 16
#define KVT_CONN_MAX_FDS 4   /* passed fds a connection may always queue */
/* Past KVT_CONN_MAX_FDS, a connection queues fds lent from its uid's share
 * and the server's pool (a REGISTER_PARTS sends a memfd per part): at most
 * KVT_UID_LENT_FDS per uid, KVT_SRV_LENT_FDS in all (an eighth of the
 * open-file limit where that is less), and only once it said HELLO. Fds over
 * the budget are closed: the REGISTER_PARTS they came with gets -EAGAIN; a
 * connection without HELLO that sends more than its own is closed. */
#define KVT_CONN_QUEUE_FDS (KVT_CONN_MAX_FDS + (int)KVT_PROTO_MAX_PARTS)
#define KVT_UID_LENT_FDS (2 * KVT_PROTO_MAX_PARTS)
#define KVT_SRV_LENT_FDS 1024u
#define KVT_CONN_MAX_TICKETS 4096
/* Bytes of unreaped tickets a connection may hold (job records plus the key
 * and page arrays of the unfinished ones). */
#define KVT_CONN_MAX_TICKET_BYTES (64u << 20)
#define KVT_CONN_MAX_WAITS 256      /* parked WAITs per connection */
#define KVT_CONN_OUT_HIGH (4u << 20) /* stop reading a client that does not read */
#define KVT_HELLO_MAX_FAILS 3       /* failed HELLOs that close a connection */
/* Guessing tokens across reconnects: past KVT_HELLO_FREE_FAILS failed HELLOs
 * of a uid, each of its HELLOs waits until a delay after its last failure,
 * 100 ms doubling up to 10 s; failures a minute old are forgotten. */
#define KVT_HELLO_FREE_FAILS 3
#define KVT_HELLO_DELAY_NS (100ull * 1000000)
#define KVT_HELLO_DELAY_MAX_NS (10ull * 1000000000)
#define KVT_HELLO_FAIL_MEMORY_NS (60ull * 1000000000)

/* What handling a request did, when it did not fail with -errno. */
enum kvt_req_result {
	KVT_REQ_ANSWERED = 1, /* its reply is queued */
	KVT_REQ_PARKED = 2,   /* a WAIT parked on its ticket: answered later */
};

/* How far a stop has gone (kvt_server.stop). */
enum kvt_stop_level {
	KVT_STOP_NONE = 0,
	KVT_STOP_DRAIN = 1,  /* kvt_server_stop: no new connections, jobs in flight finish */
	KVT_STOP_CANCEL = 2, /* kvt_server_close: queued jobs are cancelled */
};

/* What an epoll event points at: every watched object starts with one. */
enum kvt_ev_kind { KVT_EV_LISTEN, KVT_EV_CONN, KVT_EV_WAKE, KVT_EV_HTTP_LISTEN, KVT_EV_HTTP };

struct kvt_conn;

/* A SAVE or LOAD: owned by the loop; a worker borrows it from the queue until
 * it posts its final completion, after which only the loop touches it. */
struct kvt_job {
	uint64_t ticket;
	uint16_t op;
	struct kvt_conn *conn;
	struct kvt_ns *ns;
	struct kvt_engine_mem *mem; /* a reference */
	uint32_t n;
	bool has_parent;
	uint8_t reuse_class;        /* SAVE: its blocks' reuse class (0 = none) */
	struct kvt_key parent;
	struct kvt_key *keys;
	uint32_t *pages;
	uint8_t *tiers;             /* LOAD: the tier LOOKUP saw each key in
	                             * (KVT_TIER_NONE: unknown, not measured) */
	uint64_t start_ns;
	uint64_t req_id;            /* the SAVE/LOAD request's: DONE frames carry it */
	uint32_t push;              /* KVT_XFER_PUSH* of the request */
	bool peer;                  /* LOAD: may wait on other nodes (counted
	                             * against opts.peer_workers) */
	int layers_pushed;          /* loop: the watermark last pushed */
	/* written by the worker, read by the loop */
	int layers_done;            /* atomic */
	uint64_t progress_ns;       /* worker: when it last posted layer progress */
	int32_t result;
	bool finished;              /* loop-side: the final note was processed */
	bool reaped;                /* loop-side: a WAIT/POLL took the result */
	struct kvt_wait *waits;     /* loop: WAITs parked on this job */
	size_t bytes;               /* loop: charged to conn->job_bytes */
	struct kvt_job *next;       /* the connection's tickets (loop) */
	struct kvt_job *qnext;      /* the work queue (qlock) */
	/* the job is its own note to the loop, so posting one never allocates:
	 * queued at most once, a final note overriding a progress one (nlock) */
	struct kvt_job *note_next;  /* the server's notes */
	bool note_queued;           /* on the notes list */
	bool note_final;            /* the worker is done with the job */
};

/* A WAIT parked until its ticket (or one of its layers) completes: on its
 * job's list, and on the server's list of timed waits when it has a deadline. */
struct kvt_wait {
	struct kvt_job *job;
	uint64_t req_id;
	uint32_t layer;
	uint64_t deadline_ns;       /* 0 = none */
	struct kvt_wait *next;      /* the job's waits */
	struct kvt_wait *tprev, *tnext; /* the server's timed waits */
};

/* A passed fd and the stream bytes of the read it came with: it belongs to
 * the frame holding the read's last byte, if that frame starts in the read. */
struct kvt_conn_fd {
	int fd;
	uint64_t start, end;
};

/* A key LOOKUP answered and the tier it was in, remembered by the
 * connection so its LOADs are measured by the tiers the plan saw. */
struct kvt_memo_slot {
	struct kvt_key key;
	uint8_t tier;
};

#define KVT_MEMO_SLOTS 1024 /* direct-mapped by key; a key overwritten before
                             * its LOAD is not measured */

struct kvt_conn {
	enum kvt_ev_kind kind;
	struct kvt_server *srv;
	int fd;
	pid_t pid;
	uid_t uid;
	uint64_t id;
	int refs;                   /* loop: the connection itself + unfinished jobs */
	int dead;                   /* atomic: closed; workers cancel its queued jobs */
	bool closing;               /* flush the output, then close */
	uint32_t events;            /* registered with epoll */
	const struct kvt_server_tenant *tenant;
	uint16_t version;           /* of the ops, agreed at HELLO (1 before) */
	struct kvt_memo_slot *memo; /* KVT_MEMO_SLOTS, from the first LOOKUP hit */
	int hello_fails;
	uint8_t *in;
	size_t in_len, in_cap;
	struct kvt_wr out;
	size_t out_off;
	uint64_t in_base;           /* stream offset of in[0] */
	struct kvt_conn_fd fds[KVT_CONN_QUEUE_FDS];
	int n_fds;
	int frame_fds[KVT_CONN_QUEUE_FDS]; /* the fds of the frame in dispatch */
	int n_frame_fds;
	unsigned fds_lent;          /* of n_fds + n_frame_fds, past KVT_CONN_MAX_FDS */
	bool fds_dropped;           /* fds were closed over the budget since the
	                             * last frame */
	struct kvt_ns *ns[KVT_CONN_MAX_NS];
	uint64_t ns_block_bytes[KVT_CONN_MAX_NS];
	struct kvt_ns_desc ns_desc[KVT_CONN_MAX_NS];
	int ns_insight[KVT_CONN_MAX_NS]; /* each namespace's kvt_insight handle */
	struct kvt_engine_mem *regions[KVT_CONN_MAX_REGIONS];
	struct kvt_job *jobs;       /* tickets not yet reaped */
	unsigned n_jobs;
	size_t job_bytes;
	unsigned n_waits;
	struct kvt_conn *prev, *next;
	/* until its first successful HELLO: on the server's hello list, closed
	 * at hello_deadline_ns */
	bool on_hello_list;
	uint64_t hello_deadline_ns;
	struct kvt_conn *hprev, *hnext;
	/* a HELLO held back while its uid's delay runs: not read from until
	 * delay_until_ns, on the server's delayed list */
	bool delayed;
	uint64_t delay_until_ns;
	struct kvt_conn *dprev, *dnext;
};

/* A namespace the server handed out: charged to `tenant` (an index in
 * srv->tenants), held by `conns` connections; on a hash chain by ns and on
 * its tenant's list. */
struct kvt_ns_use {
	struct kvt_ns *ns;
	struct kvt_ns_desc desc;    /* as the first HELLO gave it (salted) */
	size_t tenant;
	unsigned conns;
	struct kvt_rate prefill;    /* tokens/s its engines reported (PREFILL) */
	struct kvt_ns_use *hnext;
	struct kvt_ns_use *tprev, *tnext;
};

#define KVT_NS_USE_BUCKETS 8192

/* What the daemon keeps per peer uid: its open connections (capped by
 * max_conns_per_uid) and its failed HELLOs (which delay its next ones).
 * Kept while it has connections or remembered failures. */
struct kvt_uid {
	uid_t uid;
	unsigned conns;
	unsigned hello_fails;
	uint64_t last_fail_ns;
	uint64_t hello_retry_ns;    /* its HELLOs wait until then */
	unsigned fds_lent;          /* passed fds its connections hold past
	                             * KVT_CONN_MAX_FDS each */
};

#define KVT_LAT_BUCKETS 18
extern const double kvt_lat_bounds_us[KVT_LAT_BUCKETS];

struct kvt_op_stats {
	uint64_t count, errors;
	uint64_t bucket[KVT_LAT_BUCKETS + 1]; /* last = +Inf */
	double sum_us;
};

/* Counters kept by the loop (plain) and by the workers (atomic). */
struct kvt_server_counters {
	struct kvt_op_stats op[KVT_OP_COUNT];
	uint64_t conns_accepted, conns_refused, conns_open;
	uint64_t conns_uid_refused, hello_timeouts, hello_delayed, ns_reclaimed;
	uint64_t bad_frames, hello_refused;
	uint64_t hello_shape_mismatch; /* HELLOs of a model id known in another shape */
	uint64_t lookup_keys, lookup_hits;
	uint64_t lookup_remote;     /* keys LOOKUP reported held by other nodes */
	uint64_t jobs_cancelled;
	uint64_t plan_lookups, plan_load_blocks, plan_recompute_blocks, plan_retries;
	uint64_t prefill_reports;
	/* atomic, from the workers */
	uint64_t gather_bytes, scatter_bytes;
	uint64_t save_blocks, save_present, load_blocks, load_misses;
};

struct kvt_http;

struct kvt_server {
	struct kvt_server_opts opts;
	struct kvt_server_tenant *tenants;
	int epfd;
	struct { enum kvt_ev_kind kind; int fd; } listen, wake, http_listen;
	int metrics_port;
	int stop;                   /* atomic: enum kvt_stop_level */
	int keep_listener;          /* atomic: a stop for a hand-over keeps the
	                             * listening socket open (kvt_server_handover) */
	bool keep_path;             /* the socket's file is left at close
	                             * (kvt_server_keep_path) */
	uint64_t next_conn_id, next_ticket;
	struct kvt_conn *conns;
	struct kvt_conn *hello_head, *hello_tail; /* no HELLO yet, oldest first */
	struct kvt_conn *delayed;   /* HELLOs held back by their uid's delay */
	struct kvt_uid *uids;       /* the uids with connections */
	size_t n_uids, cap_uids;
	unsigned fds_lent, max_fds_lent; /* passed fds lent, of at most */
	struct kvt_wait *timed;     /* parked waits with a deadline */
	/* the namespaces handed out (server_ns.c) */
	struct kvt_ns_use **ns_uses;       /* KVT_NS_USE_BUCKETS chains */
	struct kvt_ns_use **tenant_uses;   /* per tenant, the namespaces charged to it */
	unsigned *tenant_ns;               /* per tenant, how many */
	struct kvt_http_conn *https;
	unsigned n_https;
	int reserve_fd;             /* given up to accept-and-close at EMFILE */
	bool accept_full;           /* EMFILE logged for this burst */
	bool listen_paused;         /* out of fds: the listener is not watched */
	struct kvt_server_counters c;
	struct kvt_insight *insight; /* per tenant and namespace, and the MRC */
	const char **tenant_names;
	uint64_t start_ns;
	struct kvt_tier_rates rates;       /* what each tier delivered to LOADs */
	uint64_t plan_retry_ns[KVT_TIER_COUNT]; /* loop: a stale tier last retried */

	/* the work queue, guarded by qlock */
	pthread_mutex_t qlock;
	pthread_cond_t qcond;
	struct kvt_job *qhead, *qtail;
	bool qstop;
	unsigned peer_running;      /* workers running peer jobs (qlock) */
	pthread_t prefault_thread;
	bool prefault_running;
	pthread_t *threads;
	unsigned n_threads;
	struct kvt_job **running;   /* qlock: the job each worker runs, NULL when
	                             * idle (n_threads entries): what a drain
	                             * that timed out names */
	int busy_jobs;              /* atomic: handed to the queue, not yet final */

	/* notes from the workers to the loop: jobs linked by note_next, oldest
	 * first, guarded by nlock */
	pthread_mutex_t nlock;
	struct kvt_job *note_head, *note_tail;
};

/* server.c */
void kvt_srv_log(struct kvt_server *srv, enum kvt_log_level lvl, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* epoll_ctl of the loop; 0 or -errno. */
int kvt_srv_watch(struct kvt_server *srv, int op, int fd, uint32_t events, void *ptr);

/* server_conn.c */
/* Accept what the listener has: check credentials and limits, watch each. */
void kvt_conn_accept(struct kvt_server *srv);
/* The loop's handler of a connection's epoll events. */
void kvt_conn_event(struct kvt_conn *c, uint32_t events);
/* Watch for output room while replies wait; stop reading a closing or
 * throttled connection. */
void kvt_conn_want_out(struct kvt_conn *c);
/* Close the socket and free what the connection holds; running jobs keep it
 * (refs) until their final note. */
void kvt_conn_close(struct kvt_conn *c, const char *why);
/* Drop a reference; the last frees the connection. */
void kvt_conn_unref(struct kvt_conn *c);
/* c said its first successful HELLO: it is no longer on the clock. */
void kvt_conn_hello_done(struct kvt_conn *c);
/* Close the connections whose HELLO timeout has passed, and resume those
 * whose delayed HELLO may go on. */
void kvt_conn_expire_hellos(struct kvt_server *srv, uint64_t now);
/* The first HELLO deadline or delay, 0 when none. */
uint64_t kvt_conn_first_deadline(const struct kvt_server *srv);
/* A HELLO on c failed for its token: count it against c's uid. */
void kvt_conn_hello_failed(struct kvt_conn *c);

/* server_ops.c */
/* Handle one decoded request. Returns a kvt_req_result, or -errno (answer
 * with that status). */
int kvt_dispatch(struct kvt_conn *c, const struct kvt_req *req);

/* server_register.c */
/* REGISTER or REGISTER_PARTS. Returns KVT_REQ_ANSWERED (a refused layout of
 * REGISTER_PARTS is answered with its fault) or -errno. */
int kvt_op_register(struct kvt_conn *c, const struct kvt_req *req);

/* server_ns.c */
int kvt_tenant_ns_init(struct kvt_server *srv);
void kvt_tenant_ns_fini(struct kvt_server *srv);
/* Attach the namespace of desc for tenant t (an index in srv->tenants): a
 * namespace new to the server is charged to t, which must be under its
 * quota (what t no longer uses is reclaimed first). Returns 0 and *out, or
 * -EDQUOT, or kvt_ns_attach's errors (-ENOSPC only once what no tenant uses
 * was reclaimed). */
int kvt_tenant_ns_open(struct kvt_server *srv, size_t t, const struct kvt_ns_desc *desc,
		       struct kvt_ns **out);
/* Another namespace of tenant t for the model id of desc (ns's) in another
 * shape: NULL when none. Ranks of one tensor-parallel shape are not other
 * shapes (each rank has its namespace). */
const struct kvt_ns_desc *kvt_tenant_ns_other_shape(struct kvt_server *srv, size_t t,
						    const struct kvt_ns *ns,
						    const struct kvt_ns_desc *desc);
/* A connection holds ns (it said HELLO for it). */
void kvt_tenant_ns_hold(struct kvt_server *srv, struct kvt_ns *ns);
/* A connection lets go of ns (held: it held it) or never took it; with no
 * holder left and no block in it, the namespace is detached. */
void kvt_tenant_ns_put(struct kvt_server *srv, struct kvt_ns *ns, bool held);
/* An engine of ns prefilled `tokens` tokens in ns_elapsed nanoseconds. */
void kvt_tenant_ns_prefill_add(struct kvt_server *srv, struct kvt_ns *ns, uint32_t tokens,
			       uint64_t ns_elapsed);
/* The prefill speed ns's engines reported, tokens/s; 0 when none did. */
double kvt_tenant_ns_prefill(struct kvt_server *srv, struct kvt_ns *ns);

/* server_plan.c */
/* Of the hit leading keys a LOOKUP matched in ns (their tiers; d, the
 * namespace as the engine described it), how many the engine should load;
 * the rest it recomputes. */
uint32_t kvt_plan_loads(struct kvt_server *srv, struct kvt_ns *ns, const struct kvt_ns_desc *d,
			const uint8_t *tiers, uint32_t hit);
/* Remember the tiers of the keys a LOOKUP of c matched, for its LOADs. */
void kvt_plan_remember(struct kvt_conn *c, const struct kvt_key *keys, const uint8_t *tiers,
		       uint32_t hit);
/* The tier a LOOKUP of c found key in; KVT_TIER_NONE when not remembered. */
uint8_t kvt_plan_tier_of(const struct kvt_conn *c, const struct kvt_key *key);

/* server_wait.c */
/* The unreaped ticket of c, or NULL. */
struct kvt_job *kvt_ticket_find(struct kvt_conn *c, uint64_t ticket);
/* Whether a WAIT on job (KVT_WAIT_ALL or a layer) can be answered now. */
bool kvt_wait_satisfied(const struct kvt_job *job, uint32_t layer);
/* Answer a WAIT or POLL now with the job's state (-ETIMEDOUT for a WAIT not
 * satisfied); a finished job whose result was taken is freed. */
void kvt_wait_answer(struct kvt_conn *c, uint16_t op, uint64_t id, struct kvt_job *job,
		     uint32_t layer);
/* Park a WAIT on job until it is satisfied or timeout_ms passes. Returns
 * KVT_REQ_PARKED, -EBUSY (too many parked on c), -ENOMEM. */
int kvt_wait_park(struct kvt_conn *c, struct kvt_job *job, uint64_t id, uint32_t layer,
		  uint32_t timeout_ms);
/* Answer the timed waits past their deadline with -ETIMEDOUT. */
void kvt_waits_expire(struct kvt_server *srv, uint64_t now);
/* The earliest deadline of a timed wait, 0 when none. */
uint64_t kvt_waits_first_deadline(const struct kvt_server *srv);
/* Take the workers' notes and act on them: progress answers the waits it
 * satisfies, a final note finishes its job. */
void kvt_notes_drain(struct kvt_server *srv);
/* A closing connection's tickets: parked waits dropped, finished jobs freed. */
void kvt_tickets_close(struct kvt_conn *c);

/* server_jobs.c */
int kvt_jobs_start(struct kvt_server *srv);
void kvt_jobs_stop(struct kvt_server *srv);
void kvt_jobs_submit(struct kvt_server *srv, struct kvt_job *job);
/* Log each job the workers run and each still queued (loop thread). */
void kvt_jobs_log_stuck(struct kvt_server *srv);
/* Post a note to the loop (worker side): progress (a layer is in place), or
 * final (the result is set; the worker never touches the job again).
 * Never allocates or fails. */
void kvt_jobs_notify(struct kvt_server *srv, struct kvt_job *job, bool final);
void kvt_job_free(struct kvt_job *job);
/* Free the key and page arrays of a job the workers are done with. */
void kvt_job_release_arrays(struct kvt_job *job);

/* metrics.c */
void kvt_metrics_observe(struct kvt_server *srv, uint16_t op, uint64_t start_ns, int err);
/* Malloc'd JSON text of the server's and the store's counters, with tenant
 * `t`'s own figures (t an index in srv->tenants; SIZE_MAX: none), and with
 * `paths` the SSD devices' directories (STATS over the socket; GET /stats
 * needs no credentials and names none), or NULL. */
char *kvt_metrics_json(struct kvt_server *srv, size_t t, bool paths);
/* Malloc'd Prometheus text exposition, or NULL. */
char *kvt_metrics_prom(struct kvt_server *srv);
/* kvtier_build_info and the process_* families (process_prom.c). */
struct kvt_textbuf;
void kvt_process_prom(struct kvt_textbuf *b);
/* /readyz's body, one reason a line ("ready" when *ready); malloc'd, NULL
 * when out of memory (health.c). */
char *kvt_health_ready(struct kvt_server *srv, bool *ready);

/* The devices of a tier over several (metrics_devices.c): STATS'
 * tiers.<tier>.devices array (NULL: one device; paths: each device's
 * directory too, for STATS over the socket), /metrics' kvtier_ssd_device_*
 * families, and /readyz's line per device not ok (each does not make the
 * daemon unready: the others serve). */
struct json_t;
struct kvt_textbuf;
struct json_t *kvt_metrics_devices_json(struct kvt_store *store, int t, bool paths);
void kvt_metrics_devices_prom(struct kvt_textbuf *b, struct kvt_store *store);
void kvt_health_devices(struct kvt_textbuf *b, struct kvt_store *store);

/* http.c */
int kvt_http_listen(struct kvt_server *srv, const char *addr);
void kvt_http_accept(struct kvt_server *srv);
void kvt_http_event(struct kvt_server *srv, void *ptr, uint32_t events);
void kvt_http_close_all(struct kvt_server *srv);
/* Drop scrapes past their deadline; returns ms to the next one, or -1. */
int kvt_http_expire(struct kvt_server *srv, uint64_t now);

#endif /* KVT_TRANSPORT_SERVER_INT_H */
