/* SPDX-License-Identifier: Apache-2.0 */
/* The sidecar server's lifecycle: open (the socket, the event loop, the
 * workers, the metrics endpoint), run the loop until stopped, drain what is
 * in flight, close. Connections are in server_conn.c, operations in
 * server_ops.c, tickets and waits in server_wait.c, the copy workers in
 * server_jobs.c, counters in metrics.c and the HTTP endpoint in http.c. */
#include "transport/server.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "tiers/dram.h"
#include "transport/server_int.h"
#include "util/log.h"
#include "util/opts.h"
#include "util/unix_sock.h"

void kvt_srv_log(struct kvt_server *srv, enum kvt_log_level lvl, const char *fmt, ...)
{
	va_list ap;

	if (lvl > srv->opts.log_level)
		return;
	va_start(ap, fmt);
	kvt_vlog_to(srv->opts.log, srv->opts.log_arg, lvl, fmt, ap);
	va_end(ap);
}

static const struct kvt_server_opts server_defaults = {
	.size = sizeof(struct kvt_server_opts),
	.socket_mode = 0660,
	.socket_gid = (gid_t)-1,
	.workers = 4,
	.max_clients = 1024,
	.log_level = KVT_LOG_INFO,
	.drain_timeout_ms = 30000,
	.hello_timeout_ms = 5000,
	.plan_retry_ms = 30000,
	.max_conns_per_uid = 256,
	.max_ns_per_tenant = 1024,
	.listen_fd = -1,
	.mrc_budget = 8u << 20,
	.mrc_rate = 1.0,
	.stats_namespaces = 16,
};

void kvt_server_opts_init(struct kvt_server_opts *opts, size_t size_bytes)
{
	kvt_opts_init(opts, size_bytes, &server_defaults, sizeof(server_defaults));
}

int kvt_srv_watch(struct kvt_server *srv, int op, int fd, uint32_t events, void *ptr)
{
	struct epoll_event ev = { .events = events, .data.ptr = ptr };

	return epoll_ctl(srv->epfd, op, fd, &ev) ? -errno : 0;
}

/* Whether the socket file at sa is stale (kvt_unix_sock_stale); why not
 * goes to the log. */
static bool socket_stale(struct kvt_server *srv, const struct sockaddr_un *sa)
{
	const char *path = srv->opts.socket_path;
	struct stat st;

	if (lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode)) {
		kvt_srv_log(srv, KVT_LOG_ERROR, "event=socket.refused path=%s reason=\"it exists and "
			    "is not a socket: not replaced\"", path);
		return false;
	}
	if (kvt_unix_sock_stale(sa))
		return true;
	kvt_srv_log(srv, KVT_LOG_ERROR, "event=socket.refused path=%s reason=\"a daemon "
		    "listens on it\"", path);
	return false;
}

static int bind_socket(struct kvt_server *srv)
{
	const struct kvt_server_opts *o = &srv->opts;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, err;

	if (o->listen_fd >= 0) {
		/* socket activation: the socket and its file are the service
		 * manager's; accept must not block the loop */
		int fl = fcntl(o->listen_fd, F_GETFL);
		if (fl < 0 || fcntl(o->listen_fd, F_SETFL, fl | O_NONBLOCK))
			return -errno;
		srv->listen.fd = o->listen_fd;
		return 0;
	}
	if (strlen(o->socket_path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, o->socket_path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		err = -errno;
		if (err != -EADDRINUSE)
			goto fail;
		/* only a socket file left by a daemon that died is replaced */
		if (!socket_stale(srv, &sa))
			goto fail;
		unlink(o->socket_path);
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
			err = -errno;
			goto fail;
		}
	}
	if (chmod(o->socket_path, o->socket_mode) ||
	    (o->socket_gid != (gid_t)-1 && chown(o->socket_path, (uid_t)-1, o->socket_gid))) {
		err = -errno;
		goto fail_unlink;
	}
	if (listen(fd, 128)) {
		err = -errno;
		goto fail_unlink;
	}
	srv->listen.fd = fd;
	return 0;

fail_unlink:
	unlink(o->socket_path);
fail:
	close(fd);
	return err;
}

/* Fault the store's DRAM region in whole (the DRAM tier's kvt_dram_prefault),
 * before serving; log how far it got. */
static int prefault_dram(struct kvt_server *srv)
{
	uint64_t t0 = kvt_now_ns(), len, done = 0;
	void *base;
	int err;

	if (kvt_store_dram_region(srv->opts.store, &base, &len))
		return -EINVAL;
	err = kvt_dram_prefault(base, len, true, &srv->stop, &done);
	kvt_srv_log(srv, err ? KVT_LOG_WARN : KVT_LOG_INFO,
		    "event=dram.prefault bytes=%llu of=%llu ms=%.1f%s%s",
		    (unsigned long long)done, (unsigned long long)len,
		    (double)(kvt_now_ns() - t0) / 1e6, err ? " err=" : "",
		    err ? kvt_strerror(err) : "");
	return err;
}

/* How far past the slots handed out so far the background prefault keeps the
 * DRAM region faulted in: one default slab, so a SAVE finds the next slab's
 * pages in place while the daemon's memory grows with what it stores rather
 * than with its capacity (a daemon given 100 GiB and holding 1 GiB uses
 * about 1 GiB and 64 MiB). How often it looks: a put at 4 GB/s fills the
 * lead in 16 ms; a put that overtakes it faults its pages itself. */
#define PREFAULT_AHEAD (64ull << 20)
#define PREFAULT_LOOK_NS (5ull * 1000000)

/* The background prefault: keeps [0, reach + PREFAULT_AHEAD) faulted in as
 * the DRAM tier's reach grows, until the whole region is or the server
 * stops. It runs beside the copies, never ahead of the socket: the daemon
 * answers first (start to ready is the socket's, not the region's). */
static void *prefault_main(void *arg)
{
	const struct timespec look = { 0, (long)PREFAULT_LOOK_NS };
	struct kvt_server *srv = arg;
	uint64_t t0 = kvt_now_ns(), len, to = 0;
	uint8_t *base;
	int err = 0;

	if (kvt_store_dram_region(srv->opts.store, (void **)&base, &len))
		return NULL;
	while (to < len && !__atomic_load_n(&srv->stop, __ATOMIC_ACQUIRE)) {
		uint64_t reach = 0, want, done = 0;

		kvt_store_dram_reach(srv->opts.store, &reach);
		want = len - reach > PREFAULT_AHEAD ? reach + PREFAULT_AHEAD : len;
		if (to >= want) {
			nanosleep(&look, NULL);
			continue;
		}
		err = kvt_dram_prefault(base + to, want - to, false, &srv->stop, &done);
		to += done;
		kvt_srv_log(srv, err ? KVT_LOG_WARN : to == len ? KVT_LOG_INFO : KVT_LOG_DEBUG,
			    "event=dram.prefault bytes=%llu of=%llu reach=%llu ms=%.1f%s%s",
			    (unsigned long long)to, (unsigned long long)len,
			    (unsigned long long)reach, (double)(kvt_now_ns() - t0) / 1e6,
			    err ? " err=" : "", err ? kvt_strerror(err) : "");
		if (err)
			break;
	}
	return NULL;
}

/* Each client holds its socket and may queue KVT_CONN_MAX_FDS passed fds,
 * and all of them together KVT_SRV_LENT_FDS more (an eighth of the limit at
 * most); keep max_clients within RLIMIT_NOFILE, less a margin for the
 * store, the metrics endpoint and the daemon itself. */
static void size_max_clients(struct kvt_server *srv)
{
	const unsigned per_client = 1 + KVT_CONN_MAX_FDS;
	unsigned margin = 64, fit;
	struct rlimit rl;

	srv->max_fds_lent = KVT_SRV_LENT_FDS;
	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur == RLIM_INFINITY)
		return;
	if (rl.rlim_cur / 8 < srv->max_fds_lent)
		srv->max_fds_lent = (unsigned)(rl.rlim_cur / 8);
	margin += srv->max_fds_lent;
	fit = rl.rlim_cur > margin + per_client ? (unsigned)((rl.rlim_cur - margin) / per_client) : 1;
	if (srv->opts.max_clients > fit) {
		kvt_srv_log(srv, KVT_LOG_WARN, "event=max_clients.lowered from=%u to=%u nofile=%llu",
			    srv->opts.max_clients, fit, (unsigned long long)rl.rlim_cur);
		srv->opts.max_clients = fit;
	}
}

int kvt_server_open(const struct kvt_server_opts *given, struct kvt_server **out)
{
	struct kvt_server_opts whole = server_defaults;
	const struct kvt_server_opts *opts = &whole;
	struct kvt_server *srv;
	int err;

	if (!out || kvt_opts_load(&whole, sizeof(whole), given) || !opts->socket_path ||
	    !opts->store || !opts->tenants || opts->n_tenants == 0)
		return -EINVAL;
	for (size_t i = 0; i < opts->n_tenants; i++)
		if (!opts->tenants[i].name || !opts->tenants[i].token ||
		    opts->tenants[i].salt_len > KVT_SALT_MAX)
			return -EINVAL;
	srv = calloc(1, sizeof(*srv));
	if (!srv)
		return -ENOMEM;
	srv->opts = *opts;
	srv->listen.kind = KVT_EV_LISTEN;
	srv->wake.kind = KVT_EV_WAKE;
	srv->http_listen.kind = KVT_EV_HTTP_LISTEN;
	srv->listen.fd = srv->wake.fd = srv->http_listen.fd = srv->epfd = -1;
	srv->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	size_max_clients(srv);
	srv->start_ns = kvt_now_ns();
	kvt_tier_rates_init(&srv->rates);
	pthread_mutex_init(&srv->qlock, NULL);
	pthread_cond_init(&srv->qcond, NULL);
	pthread_mutex_init(&srv->nlock, NULL);
	/* the tenants are copied; their strings stay the caller's */
	srv->tenants = calloc(opts->n_tenants, sizeof(*srv->tenants));
	if (!srv->tenants) {
		err = -ENOMEM;
		goto fail;
	}
	memcpy(srv->tenants, opts->tenants, opts->n_tenants * sizeof(*srv->tenants));
	err = kvt_tenant_ns_init(srv);
	if (err)
		goto fail;
	srv->tenant_names = calloc(opts->n_tenants, sizeof(*srv->tenant_names));
	if (!srv->tenant_names) {
		err = -ENOMEM;
		goto fail;
	}
	for (size_t i = 0; i < opts->n_tenants; i++)
		srv->tenant_names[i] = opts->tenants[i].name;
	err = kvt_insight_open(opts->n_tenants, srv->tenant_names, opts->stats_namespaces,
			       opts->mrc_budget, opts->mrc_rate, &srv->insight);
	if (err)
		goto fail;
	if (opts->prefault_dram == KVT_PREFAULT_BEFORE)
		prefault_dram(srv);
	srv->epfd = epoll_create1(EPOLL_CLOEXEC);
	srv->wake.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (srv->epfd < 0 || srv->wake.fd < 0) {
		err = -errno;
		goto fail;
	}
	err = bind_socket(srv);
	if (err)
		goto fail;
	if ((err = kvt_srv_watch(srv, EPOLL_CTL_ADD, srv->listen.fd, EPOLLIN, &srv->listen)) ||
	    (err = kvt_srv_watch(srv, EPOLL_CTL_ADD, srv->wake.fd, EPOLLIN, &srv->wake)))
		goto fail;
	if (opts->metrics_addr && (err = kvt_http_listen(srv, opts->metrics_addr))) {
		/* said here: the caller's error alone reads as the socket's */
		kvt_srv_log(srv, KVT_LOG_ERROR, "event=metrics.listen_failed addr=%s err=\"%s\" "
			    "reason=\"%s\"", opts->metrics_addr, kvt_strerror(err),
			    err == -EADDRINUSE ? "another process listens on the metrics address: "
			    "choose another with --metrics HOST:PORT (:0 for any free port), or "
			    "--metrics off" : err == -EINVAL ? "--metrics takes HOST:PORT with an "
			    "IPv4 address or localhost" : "the metrics address cannot be bound");
		goto fail;
	}
	err = kvt_jobs_start(srv);
	if (err)
		goto fail;
	if (opts->prefault_dram == KVT_PREFAULT_BACKGROUND)
		srv->prefault_running = pthread_create(&srv->prefault_thread, NULL, prefault_main,
						       srv) == 0;
	*out = srv;
	return 0;

fail:
	if (opts->listen_fd >= 0)
		srv->listen.fd = -1; /* on failure the socket stays the caller's */
	kvt_server_close(srv);
	return err;
}

void kvt_server_stop(struct kvt_server *srv)
{
	uint64_t one = 1;

	__atomic_store_n(&srv->stop, KVT_STOP_DRAIN, __ATOMIC_RELEASE);
	if (write(srv->wake.fd, &one, sizeof(one)) < 0) {
		/* saturated counter: the loop wakes anyway */
	}
}

void kvt_server_handover(struct kvt_server *srv)
{
	__atomic_store_n(&srv->keep_listener, 1, __ATOMIC_RELEASE);
	kvt_server_stop(srv);
}

int kvt_server_take_listener(struct kvt_server *srv)
{
	int fd = srv->listen.fd;

	srv->listen.fd = -1;
	return fd;
}

void kvt_server_keep_path(struct kvt_server *srv)
{
	srv->keep_path = true;
}

int kvt_server_listen_fd(const struct kvt_server *srv)
{
	return srv->listen.fd;
}

int kvt_server_metrics_port(const struct kvt_server *srv)
{
	return srv->metrics_port;
}

/* How long the loop may sleep: until the first timed wait, HELLO timeout or
 * scrape expires (-1: nothing is timed). Expired scrapes are dropped on the
 * way. */
static int next_deadline_ms(struct kvt_server *srv)
{
	uint64_t now = kvt_now_ns(), first = kvt_waits_first_deadline(srv);
	uint64_t conn_first = kvt_conn_first_deadline(srv);
	int http = kvt_http_expire(srv, now), ms;

	if (conn_first && (!first || conn_first < first))
		first = conn_first;
	if (!first)
		return http;
	ms = first <= now ? 0 : (int)((first - now) / 1000000 + 1);
	return http >= 0 && http < ms ? http : ms;
}

static void loop_once(struct kvt_server *srv, int timeout_ms)
{
	struct epoll_event evs[64];
	int n = epoll_wait(srv->epfd, evs, 64, timeout_ms);

	for (int i = 0; i < n; i++) {
		enum kvt_ev_kind *kind = evs[i].data.ptr;

		switch (*kind) {
		case KVT_EV_LISTEN:
			kvt_conn_accept(srv);
			break;
		case KVT_EV_WAKE:
			kvt_notes_drain(srv);
			break;
		case KVT_EV_CONN:
			kvt_conn_event((struct kvt_conn *)kind, evs[i].events);
			break;
		case KVT_EV_HTTP_LISTEN:
			kvt_http_accept(srv);
			break;
		case KVT_EV_HTTP:
			kvt_http_event(srv, kind, evs[i].events);
			break;
		}
	}
	if (srv->timed)
		kvt_waits_expire(srv, kvt_now_ns());
	if (srv->hello_head || srv->delayed)
		kvt_conn_expire_hellos(srv, kvt_now_ns());
}

int kvt_server_run(struct kvt_server *srv)
{
	uint64_t drain_until;
	int busy;

	kvt_srv_log(srv, KVT_LOG_INFO, "event=server.listen socket=%s workers=%u",
		    srv->opts.socket_path, srv->n_threads);
	while (!__atomic_load_n(&srv->stop, __ATOMIC_ACQUIRE))
		loop_once(srv, next_deadline_ms(srv));

	/* stop accepting; let the jobs in flight finish and their waits be answered */
	kvt_srv_log(srv, KVT_LOG_INFO, "event=server.draining jobs=%d conns=%llu",
		    __atomic_load_n(&srv->busy_jobs, __ATOMIC_ACQUIRE),
		    (unsigned long long)srv->c.conns_open);
	epoll_ctl(srv->epfd, EPOLL_CTL_DEL, srv->listen.fd, NULL);
	/* for a hand-over the socket stays open, file and all: connections
	 * wait in its backlog for the successor */
	if (!__atomic_load_n(&srv->keep_listener, __ATOMIC_ACQUIRE)) {
		close(srv->listen.fd);
		srv->listen.fd = -1;
		if (srv->opts.listen_fd < 0 && !srv->keep_path)
			unlink(srv->opts.socket_path);
	}
	drain_until = kvt_now_ns() + (uint64_t)srv->opts.drain_timeout_ms * 1000000;
	while (__atomic_load_n(&srv->busy_jobs, __ATOMIC_ACQUIRE) > 0 && kvt_now_ns() < drain_until)
		loop_once(srv, 50);
	busy = __atomic_load_n(&srv->busy_jobs, __ATOMIC_ACQUIRE);
	/* a moment for the last replies to leave */
	for (int i = 0; i < 10; i++) {
		bool pending = false;
		for (struct kvt_conn *c = srv->conns; c; c = c->next)
			pending |= c->out.len > c->out_off;
		if (!pending)
			break;
		loop_once(srv, 10);
	}
	if (busy > 0) {
		kvt_srv_log(srv, KVT_LOG_ERROR, "event=server.drain_timeout jobs=%d timeout_ms=%u",
			    busy, srv->opts.drain_timeout_ms);
		kvt_jobs_log_stuck(srv);
		return -ETIMEDOUT;
	}
	kvt_srv_log(srv, KVT_LOG_INFO, "event=server.stopped");
	return 0;
}

void kvt_server_close(struct kvt_server *srv)
{
	if (!srv)
		return;
	/* cancel what is queued, then let the workers finish and leave */
	__atomic_store_n(&srv->stop, KVT_STOP_CANCEL, __ATOMIC_RELEASE);
	for (struct kvt_conn *c = srv->conns; c; c = c->next)
		__atomic_store_n(&c->dead, 1, __ATOMIC_RELEASE);
	if (srv->prefault_running)
		pthread_join(srv->prefault_thread, NULL);
	if (srv->threads)
		kvt_jobs_stop(srv);
	if (srv->wake.fd >= 0)
		kvt_notes_drain(srv);
	while (srv->conns)
		kvt_conn_close(srv->conns, "shutdown");
	kvt_http_close_all(srv);
	if (srv->listen.fd >= 0) {
		close(srv->listen.fd);
		if (srv->opts.listen_fd < 0 && !srv->keep_path)
			unlink(srv->opts.socket_path);
	}
	if (srv->wake.fd >= 0)
		close(srv->wake.fd);
	if (srv->epfd >= 0)
		close(srv->epfd);
	if (srv->reserve_fd >= 0)
		close(srv->reserve_fd);
	pthread_mutex_destroy(&srv->qlock);
	kvt_tier_rates_fini(&srv->rates);
	pthread_cond_destroy(&srv->qcond);
	pthread_mutex_destroy(&srv->nlock);
	kvt_tenant_ns_fini(srv);
	kvt_insight_close(srv->insight);
	free(srv->tenant_names);
	free(srv->uids);
	free(srv->tenants);
	free(srv);
}
