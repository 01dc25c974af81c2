/* Internals of the sidecar server shared by its files: server.c (event loop,
 * connections, dispatch), server_jobs.c (copy workers: SAVE and LOAD),
 * metrics.c (counters, Prometheus text, JSON stats, the HTTP endpoint). */
#ifndef KVT_TRANSPORT_SERVER_INT_H
#define KVT_TRANSPORT_SERVER_INT_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "transport/engine_mem.h"
#include "transport/proto.h"
#include "transport/server.h"

#define KVT_CONN_MAX_NS 16
#define KVT_CONN_MAX_REGIONS 16
#define KVT_CONN_MAX_FDS 4
#define KVT_CONN_MAX_TICKETS 4096
/* Bytes of unreaped tickets a connection may hold (job records plus the key
 * and page arrays of the unfinished ones). */
#define KVT_CONN_MAX_TICKET_BYTES (64u << 20)
#define KVT_CONN_MAX_WAITS 256      /* parked WAITs per connection */
#define KVT_CONN_OUT_HIGH (4u << 20) /* stop reading a client that does not read */
#define KVT_HELLO_MAX_FAILS 3

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
	struct kvt_key parent;
	struct kvt_key *keys;
	uint32_t *pages;
	uint64_t start_ns;
	/* written by the worker, read by the loop */
	int layers_done;            /* atomic */
	int notify_pending;         /* atomic: a progress note is queued */
	int32_t result;
	bool finished;              /* loop-side: the final note was processed */
	bool reaped;                /* loop-side: a WAIT/POLL took the result */
	struct kvt_wait *waits;     /* loop: WAITs parked on this job */
	size_t bytes;               /* loop: charged to conn->job_bytes */
	struct kvt_job *next;       /* the connection's tickets (loop) */
	struct kvt_job *qnext;      /* the work queue (qlock) */
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
	int hello_fails;
	uint8_t *in;
	size_t in_len, in_cap;
	struct kvt_wr out;
	size_t out_off;
	uint64_t in_base;           /* stream offset of in[0] */
	struct kvt_conn_fd fds[KVT_CONN_MAX_FDS];
	int n_fds;
	int frame_fds[KVT_CONN_MAX_FDS]; /* the fds of the frame in dispatch */
	int n_frame_fds;
	struct kvt_ns *ns[KVT_CONN_MAX_NS];
	uint64_t ns_block_bytes[KVT_CONN_MAX_NS];
	struct kvt_ns_desc ns_desc[KVT_CONN_MAX_NS];
	struct kvt_engine_mem *regions[KVT_CONN_MAX_REGIONS];
	struct kvt_job *jobs;       /* tickets not yet reaped */
	unsigned n_jobs;
	size_t job_bytes;
	unsigned n_waits;
	struct kvt_conn *prev, *next;
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
	uint64_t bad_frames, hello_refused;
	uint64_t lookup_keys, lookup_hits;
	uint64_t lookup_remote;     /* keys LOOKUP reported held by other nodes */
	uint64_t jobs_cancelled;
	/* atomic, from the workers */
	uint64_t gather_bytes, scatter_bytes;
	uint64_t save_blocks, save_present, load_blocks, load_misses;
	uint64_t load_remote;       /* blocks LOAD brought from other nodes */
};

struct kvt_http;

struct kvt_server {
	struct kvt_server_opts opts;
	struct kvt_server_tenant *tenants;
	int epfd;
	struct { enum kvt_ev_kind kind; int fd; } listen, wake, http_listen;
	int metrics_port;
	int stop;                   /* atomic */
	uint64_t next_conn_id, next_ticket;
	struct kvt_conn *conns;
	struct kvt_wait *timed;     /* parked waits with a deadline */
	struct kvt_http_conn *https;
	unsigned n_https;
	int reserve_fd;             /* given up to accept-and-close at EMFILE */
	bool accept_full;           /* EMFILE logged for this burst */
	bool listen_paused;         /* out of fds: the listener is not watched */
	struct kvt_server_counters c;
	uint64_t start_ns;

	/* the work queue, guarded by qlock */
	pthread_mutex_t qlock;
	pthread_cond_t qcond;
	struct kvt_job *qhead, *qtail;
	bool qstop;
	pthread_t prefault_thread;
	bool prefault_running;
	pthread_t *threads;
	unsigned n_threads;
	int busy_jobs;              /* atomic: handed to the queue, not yet final */

	/* notes from the workers to the loop, guarded by nlock */
	pthread_mutex_t nlock;
	struct { struct kvt_job *job; bool final; } *notes;
	size_t n_notes, cap_notes;
};

uint64_t kvt_now_ns(void);

void kvt_srv_log(struct kvt_server *srv, enum kvt_log_level lvl, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* server_jobs.c */
int kvt_jobs_start(struct kvt_server *srv);
void kvt_jobs_stop(struct kvt_server *srv);
void kvt_jobs_submit(struct kvt_server *srv, struct kvt_job *job);
/* Post a note to the loop (worker side). */
void kvt_jobs_notify(struct kvt_server *srv, struct kvt_job *job, bool final);
void kvt_job_free(struct kvt_job *job);
/* Free the key and page arrays of a job the workers are done with. */
void kvt_job_release_arrays(struct kvt_job *job);

/* metrics.c */
void kvt_metrics_observe(struct kvt_server *srv, uint16_t op, uint64_t start_ns, int err);
/* Malloc'd JSON text of the server's and the store's counters, or NULL. */
char *kvt_metrics_json(struct kvt_server *srv);
/* Malloc'd Prometheus text exposition, or NULL. */
char *kvt_metrics_prom(struct kvt_server *srv);
int kvt_http_listen(struct kvt_server *srv, const char *addr);
void kvt_http_accept(struct kvt_server *srv);
void kvt_http_event(struct kvt_server *srv, void *ptr, uint32_t events);
void kvt_http_close_all(struct kvt_server *srv);
/* Drop scrapes past their deadline; returns ms to the next one, or -1. */
int kvt_http_expire(struct kvt_server *srv, uint64_t now);

#endif /* KVT_TRANSPORT_SERVER_INT_H */
