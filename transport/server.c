/* The sidecar server: event loop, connections, frame dispatch (see server.h). */
#include "transport/server.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "transport/server_int.h"

uint64_t kvt_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void kvt_srv_log(struct kvt_server *srv, enum kvt_log_level lvl, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	if (!srv->opts.log || lvl > srv->opts.log_level)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	srv->opts.log(srv->opts.log_arg, lvl, msg);
}

void kvt_server_opts_init(struct kvt_server_opts *opts, size_t size_bytes)
{
	memset(opts, 0, size_bytes);
	opts->size = size_bytes;
	opts->socket_mode = 0660;
	opts->listen_fd = -1;
	opts->socket_gid = (gid_t)-1;
	opts->workers = 4;
	opts->max_clients = 1024;
	opts->log_level = KVT_LOG_INFO;
}

static int ep_mod(struct kvt_server *srv, int op, int fd, uint32_t events, void *ptr)
{
	struct epoll_event ev = { .events = events, .data.ptr = ptr };

	return epoll_ctl(srv->epfd, op, fd, &ev) ? -errno : 0;
}

/* ---- connections ------------------------------------------------------- */

static void wait_drop(struct kvt_server *srv, struct kvt_wait *w);
static void accept_resume(struct kvt_server *srv);

static void conn_unref(struct kvt_conn *c)
{
	if (--c->refs > 0)
		return;
	kvt_wr_free(&c->out);
	free(c->in);
	free(c);
}

/* Queue a reply with an empty payload. */
static void reply_status(struct kvt_conn *c, uint16_t op, uint64_t id, int status)
{
	kvt_wr_begin(&c->out, op | KVT_OP_REPLY, id, status);
	kvt_wr_end(&c->out);
}

/* Output queued past the high-water mark: the client is not reading its
 * replies, so its input waits in the socket until they drain. */
static bool conn_throttled(const struct kvt_conn *c)
{
	return c->out.len - c->out_off >= KVT_CONN_OUT_HIGH;
}

/* Watch for output room while replies wait, and stop reading a connection
 * that is closing (its unread input would keep the loop spinning) or whose
 * replies are piling up. */
static void conn_want_out(struct kvt_conn *c)
{
	uint32_t ev = c->closing || conn_throttled(c) ? 0 : EPOLLIN | EPOLLRDHUP;

	if (c->out_off < c->out.len)
		ev |= EPOLLOUT;
	if (ev != c->events && c->fd >= 0) {
		c->events = ev;
		ep_mod(c->srv, EPOLL_CTL_MOD, c->fd, ev, c);
	}
}

static void conn_close(struct kvt_conn *c, const char *why)
{
	struct kvt_server *srv = c->srv;
	struct kvt_job **pj;

	if (c->fd < 0)
		return;
	kvt_srv_log(srv, KVT_LOG_INFO, "event=conn.close conn=%llu pid=%d reason=%s tickets=%u",
		    (unsigned long long)c->id, (int)c->pid, why, c->n_jobs);
	__atomic_store_n(&c->dead, 1, __ATOMIC_RELEASE);
	epoll_ctl(srv->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	for (int i = 0; i < c->n_fds; i++)
		close(c->fds[i].fd);
	c->n_fds = 0;
	for (int i = 0; i < KVT_CONN_MAX_REGIONS; i++) {
		kvt_engine_mem_put(c->regions[i]);
		c->regions[i] = NULL;
	}
	/* finished jobs go now; running ones when their final note arrives */
	for (pj = &c->jobs; *pj;) {
		struct kvt_job *j = *pj;
		while (j->waits)
			wait_drop(srv, j->waits);
		if (j->finished) {
			*pj = j->next;
			c->n_jobs--;
			c->job_bytes -= j->bytes;
			kvt_job_free(j);
		} else {
			pj = &j->next;
		}
	}
	if (c->prev)
		c->prev->next = c->next;
	else
		srv->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	srv->c.conns_open--;
	accept_resume(srv);
	conn_unref(c);
}

static bool peer_allowed(const struct kvt_server *srv, const struct ucred *cr)
{
	gid_t gid = srv->opts.socket_gid != (gid_t)-1 ? srv->opts.socket_gid : getegid();

	if (cr->uid == 0 || cr->uid == geteuid() || cr->gid == gid)
		return true;
	for (size_t i = 0; i < srv->opts.n_allow_uids; i++)
		if (srv->opts.allow_uids[i] == cr->uid)
			return true;
	return false;
}

/* Out of descriptors with a connection pending: the listener would stay
 * readable and the loop spin. Spend the reserve fd to accept it and close it
 * at once (the client sees a hangup), logging once per burst. Without the
 * reserve, stop watching the listener until a connection closes. */
static bool accept_shed(struct kvt_server *srv, int err)
{
	if (!srv->accept_full)
		kvt_srv_log(srv, KVT_LOG_WARN, "event=conn.refused reason=\"%s\" open=%llu",
			    strerror(err), (unsigned long long)srv->c.conns_open);
	srv->accept_full = true;
	if (srv->reserve_fd >= 0) {
		int fd, aerr;

		close(srv->reserve_fd);
		fd = accept4(srv->listen.fd, NULL, NULL, SOCK_CLOEXEC);
		aerr = errno;
		if (fd >= 0) {
			close(fd);
			srv->c.conns_refused++;
		}
		srv->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fd >= 0 && srv->reserve_fd >= 0)
			return true; /* shed one; there may be more */
		if (fd < 0 && aerr != EMFILE && aerr != ENFILE && srv->reserve_fd >= 0)
			return false; /* none pending any more */
	}
	if (!srv->listen_paused) {
		epoll_ctl(srv->epfd, EPOLL_CTL_DEL, srv->listen.fd, NULL);
		srv->listen_paused = true;
	}
	return false;
}

/* A connection closed: a descriptor is free again for the reserve or for
 * the listener. */
static void accept_resume(struct kvt_server *srv)
{
	if (srv->reserve_fd < 0)
		srv->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (srv->listen_paused && srv->listen.fd >= 0 &&
	    ep_mod(srv, EPOLL_CTL_ADD, srv->listen.fd, EPOLLIN, &srv->listen) == 0)
		srv->listen_paused = false;
}

static void accept_conns(struct kvt_server *srv)
{
	for (;;) {
		struct ucred cr;
		socklen_t len = sizeof(cr);
		struct kvt_conn *c;
		int fd = accept4(srv->listen.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE) {
				if (accept_shed(srv, errno))
					continue;
				return;
			}
			if (errno != EAGAIN && errno != EINTR)
				kvt_srv_log(srv, KVT_LOG_WARN, "event=accept.error err=\"%s\"",
					    strerror(errno));
			return;
		}
		srv->accept_full = false;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) || !peer_allowed(srv, &cr)) {
			srv->c.conns_refused++;
			kvt_srv_log(srv, KVT_LOG_WARN, "event=conn.refused reason=credentials "
				    "pid=%d uid=%d", (int)cr.pid, (int)cr.uid);
			close(fd);
			continue;
		}
		if (srv->c.conns_open >= srv->opts.max_clients || !(c = calloc(1, sizeof(*c)))) {
			srv->c.conns_refused++;
			kvt_srv_log(srv, KVT_LOG_WARN, "event=conn.refused reason=max_clients pid=%d",
				    (int)cr.pid);
			close(fd);
			continue;
		}
		c->kind = KVT_EV_CONN;
		c->srv = srv;
		c->fd = fd;
		c->pid = cr.pid;
		c->uid = cr.uid;
		c->id = ++srv->next_conn_id;
		c->refs = 1;
		c->events = EPOLLIN | EPOLLRDHUP;
		kvt_wr_init(&c->out);
		if (ep_mod(srv, EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLRDHUP, c)) {
			close(fd);
			free(c);
			continue;
		}
		c->next = srv->conns;
		if (c->next)
			c->next->prev = c;
		srv->conns = c;
		srv->c.conns_accepted++;
		srv->c.conns_open++;
		kvt_srv_log(srv, KVT_LOG_INFO, "event=conn.open conn=%llu pid=%d uid=%d",
			    (unsigned long long)c->id, (int)cr.pid, (int)cr.uid);
	}
}

/* ---- tickets and waits ------------------------------------------------- */

static struct kvt_job *find_job(struct kvt_conn *c, uint64_t ticket)
{
	for (struct kvt_job *j = c->jobs; j; j = j->next)
		if (j->ticket == ticket && !j->reaped)
			return j;
	return NULL;
}

/* Unlink a parked wait from its job and from the timed list, and free it. */
static void wait_drop(struct kvt_server *srv, struct kvt_wait *w)
{
	struct kvt_job *job = w->job;

	for (struct kvt_wait **pw = &job->waits; *pw; pw = &(*pw)->next) {
		if (*pw == w) {
			*pw = w->next;
			break;
		}
	}
	if (w->deadline_ns) {
		if (w->tprev)
			w->tprev->tnext = w->tnext;
		else
			srv->timed = w->tnext;
		if (w->tnext)
			w->tnext->tprev = w->tprev;
	}
	job->conn->n_waits--;
	free(w);
}

static void job_unlink_free(struct kvt_conn *c, struct kvt_job *job)
{
	c->n_jobs--;
	c->job_bytes -= job->bytes;
	kvt_job_free(job);
}

static void reap_job(struct kvt_conn *c, struct kvt_job *job)
{
	for (struct kvt_job **pj = &c->jobs; *pj; pj = &(*pj)->next) {
		if (*pj == job) {
			*pj = job->next;
			job_unlink_free(c, job);
			return;
		}
	}
}

/* Reply to a WAIT/POLL with the job's state. A finished job whose whole
 * result was asked for is marked reaped (freed once every wait parked on it
 * has been answered). */
static void reply_wait(struct kvt_conn *c, uint16_t op, uint64_t id, struct kvt_job *job,
		       uint32_t layer, int status)
{
	int layers = __atomic_load_n(&job->layers_done, __ATOMIC_ACQUIRE);
	bool whole = layer == KVT_WAIT_ALL;

	kvt_wr_begin(&c->out, op | KVT_OP_REPLY, id, status);
	kvt_wr_u32(&c->out, job->finished ? (uint32_t)job->result : 0);
	kvt_wr_u32(&c->out, (uint32_t)layers);
	kvt_wr_u32(&c->out, job->finished);
	kvt_wr_end(&c->out);
	if (job->finished && whole && status == 0)
		job->reaped = true;
}

static bool wait_satisfied(const struct kvt_job *job, uint32_t layer)
{
	if (job->finished)
		return true;
	return layer != KVT_WAIT_ALL &&
	       (uint32_t)__atomic_load_n(&job->layers_done, __ATOMIC_ACQUIRE) > layer;
}

static void answer_wait(struct kvt_server *srv, struct kvt_wait *w, int status)
{
	struct kvt_job *job = w->job;
	struct kvt_conn *c = job->conn;

	kvt_metrics_observe(srv, KVT_OP_WAIT, 0, status);
	reply_wait(c, KVT_OP_WAIT, w->req_id, job, w->layer, status);
	wait_drop(srv, w);
	conn_want_out(c);
}

/* A job was reaped and nothing waits on it any more: free it. */
static void job_maybe_free(struct kvt_job *job)
{
	if (job->reaped && job->finished && !job->waits)
		reap_job(job->conn, job);
}

/* Answer the WAITs parked on job that are now satisfied. */
static void serve_waits(struct kvt_server *srv, struct kvt_job *job)
{
	for (struct kvt_wait *w = job->waits, *next; w; w = next) {
		next = w->next;
		if (wait_satisfied(job, w->layer))
			answer_wait(srv, w, 0);
	}
	job_maybe_free(job);
}

/* Answer the timed waits past their deadline with -ETIMEDOUT. */
static void expire_waits(struct kvt_server *srv, uint64_t now)
{
	for (struct kvt_wait *w = srv->timed, *next; w; w = next) {
		struct kvt_job *job = w->job;

		next = w->tnext;
		if (now < w->deadline_ns)
			continue;
		answer_wait(srv, w, wait_satisfied(job, w->layer) ? 0 : -ETIMEDOUT);
		job_maybe_free(job); /* frees job only when no wait is left on it */
	}
}

static int next_deadline_ms(struct kvt_server *srv)
{
	uint64_t now = kvt_now_ns(), first = 0;
	int http = kvt_http_expire(srv, now), ms;

	for (struct kvt_wait *w = srv->timed; w; w = w->tnext)
		if (!first || w->deadline_ns < first)
			first = w->deadline_ns;
	if (!first)
		return http;
	ms = first <= now ? 0 : (int)((first - now) / 1000000 + 1);
	return http >= 0 && http < ms ? http : ms;
}

/* Take the workers' notes and act on them. */
static void drain_notes(struct kvt_server *srv)
{
	uint64_t v;

	if (read(srv->wake.fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		kvt_srv_log(srv, KVT_LOG_WARN, "event=wake.error err=\"%s\"", strerror(errno));
	for (;;) {
		struct kvt_job *job;
		bool final;
		struct kvt_conn *c;

		pthread_mutex_lock(&srv->nlock);
		if (srv->n_notes == 0) {
			pthread_mutex_unlock(&srv->nlock);
			return;
		}
		job = srv->notes[0].job;
		final = srv->notes[0].final;
		memmove(srv->notes, srv->notes + 1, --srv->n_notes * sizeof(*srv->notes));
		pthread_mutex_unlock(&srv->nlock);

		c = job->conn;
		if (!final) {
			__atomic_store_n(&job->notify_pending, 0, __ATOMIC_RELEASE);
			if (c->fd >= 0)
				serve_waits(srv, job);
			continue;
		}
		job->finished = true;
		/* the workers are done with it: keep only the result until reaped */
		kvt_job_release_arrays(job);
		kvt_engine_mem_put(job->mem);
		job->mem = NULL;
		c->job_bytes -= job->bytes - sizeof(*job);
		job->bytes = sizeof(*job);
		__atomic_sub_fetch(&srv->busy_jobs, 1, __ATOMIC_RELAXED);
		kvt_metrics_observe(srv, job->op, job->start_ns, job->result < 0 ? job->result : 0);
		if (job->result == -ECANCELED)
			srv->c.jobs_cancelled++;
		if (c->fd >= 0) {
			serve_waits(srv, job);
		} else {
			reap_job(c, job);
		}
		conn_unref(c); /* the job's hold on its connection */
	}
}

/* ---- operations -------------------------------------------------------- */

/* Constant-time comparison of a received token with a configured one. */
static bool token_equal(const char *want, const char *got, size_t got_len)
{
	size_t want_len = strlen(want);
	unsigned diff = want_len != got_len;

	for (size_t i = 0; i < got_len; i++)
		diff |= (unsigned)(uint8_t)got[i] ^ (uint8_t)(i < want_len ? want[i] : 0);
	return diff == 0;
}

static bool model_allowed(const char *patterns, const char *model)
{
	char buf[512], *save, *tok;

	if (!patterns || !*patterns)
		return true;
	snprintf(buf, sizeof(buf), "%s", patterns);
	for (tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save))
		if (fnmatch(tok, model, 0) == 0)
			return true;
	return false;
}

static int op_hello(struct kvt_conn *c, const struct kvt_req *req)
{
	struct kvt_server *srv = c->srv;
	const struct kvt_req_hello *h = &req->u.hello;
	const struct kvt_server_tenant *t = NULL;
	struct kvt_ns_desc desc = h->desc;
	struct kvt_ns *ns;
	int slot = -1, err;

	if (h->min_version > KVT_PROTO_VERSION || h->max_version < KVT_PROTO_VERSION)
		return -EPROTONOSUPPORT;
	for (size_t i = 0; i < srv->opts.n_tenants; i++)
		if (token_equal(srv->tenants[i].token, h->token, h->token_len))
			t = &srv->tenants[i];
	if (!t || (c->tenant && c->tenant != t)) {
		srv->c.hello_refused++;
		kvt_srv_log(srv, KVT_LOG_WARN, "event=hello.refused conn=%llu pid=%d reason=%s",
			    (unsigned long long)c->id, (int)c->pid, t ? "tenant_change" : "token");
		if (++c->hello_fails >= KVT_HELLO_MAX_FAILS)
			c->closing = true;
		return -EACCES;
	}
	if (!model_allowed(t->models, desc.model_id)) {
		srv->c.hello_refused++;
		kvt_srv_log(srv, KVT_LOG_WARN, "event=hello.refused conn=%llu tenant=%s "
			    "reason=namespace model=\"%s\"", (unsigned long long)c->id, t->name,
			    desc.model_id);
		return -EACCES;
	}
	memcpy(desc.tenant_salt, t->salt, t->salt_len);
	desc.tenant_salt_len = t->salt_len;
	err = kvt_ns_attach(srv->opts.store, &desc, &ns);
	if (err)
		return err;
	for (int i = 0; i < KVT_CONN_MAX_NS; i++) {
		if (c->ns[i] == ns) {
			slot = i;
			break;
		}
		if (!c->ns[i] && slot < 0)
			slot = i;
	}
	if (slot < 0)
		return -EMFILE;
	c->tenant = t;
	if (srv->opts.hooks.ns_cb && c->ns[slot] != ns)
		srv->opts.hooks.ns_cb(srv->opts.hooks.arg, ns);
	c->ns[slot] = ns;
	c->ns_block_bytes[slot] = kvt_ns_block_bytes(ns);
	c->ns_desc[slot] = desc;
	kvt_srv_log(srv, KVT_LOG_INFO, "event=hello conn=%llu tenant=%s ns=%d model=\"%s\" "
		    "block_bytes=%llu", (unsigned long long)c->id, t->name, slot + 1,
		    desc.model_id, (unsigned long long)c->ns_block_bytes[slot]);
	kvt_wr_begin(&c->out, KVT_OP_HELLO | KVT_OP_REPLY, req->hdr.id, 0);
	kvt_wr_u16(&c->out, KVT_PROTO_VERSION);
	kvt_wr_u16(&c->out, 0);
	kvt_wr_u32(&c->out, (uint32_t)slot + 1);
	kvt_wr_u64(&c->out, c->ns_block_bytes[slot]);
	kvt_wr_bytes(&c->out, kvt_ns_salt(ns), KVT_KEY_BYTES);
	kvt_wr_u32(&c->out, KVT_PROTO_MAX_KEYS);
	return kvt_wr_end(&c->out) ? -ENOMEM : 1;
}

/* The namespace of a handle of this connection, or NULL. */
static struct kvt_ns *conn_ns(struct kvt_conn *c, uint32_t handle)
{
	return handle >= 1 && handle <= KVT_CONN_MAX_NS ? c->ns[handle - 1] : NULL;
}

static int op_register(struct kvt_conn *c, const struct kvt_req *req)
{
	const struct kvt_req_register *r = &req->u.reg;
	struct kvt_ns *ns = conn_ns(c, r->ns);
	const struct kvt_ns_desc *d;
	struct kvt_engine_mem *m;
	uint64_t page;
	uint32_t kvn;
	int slot = -1, fd, err;

	if (!ns)
		return -EBADF;
	if (r->kind == KVT_MEM_CUDA_IPC && !c->srv->opts.dev_cuda)
		return -EOPNOTSUPP; /* no GPU driven here: engine memory comes as a memfd */
	if (r->kind == KVT_MEM_HOST_MEMFD) {
		/* only the fd sent with this frame; frame_close_fds closes extras */
		if (c->n_frame_fds != 1)
			return -EBADF;
		fd = c->frame_fds[0];
		c->n_frame_fds = 0;
	} else {
		fd = -1;
	}
	for (int i = 0; i < KVT_CONN_MAX_REGIONS && slot < 0; i++)
		if (!c->regions[i])
			slot = i;
	/* the region's pages are the namespace's: a block is layers x kvn pages */
	d = &c->ns_desc[r->ns - 1];
	kvn = d->layout == KVT_LAYOUT_MLA ? 1 : 2;
	page = c->ns_block_bytes[r->ns - 1] / ((uint64_t)d->layers * kvn);
	if (slot < 0)
		err = -EMFILE;
	else if (r->layers != d->layers || (kvn == 2 && r->kv_stride < page))
		err = -EINVAL;
	else if (r->kind == KVT_MEM_CUDA_IPC)
		err = kvt_engine_mem_import(c->srv->opts.dev_cuda, -1, r, d, &m);
	else if (c->srv->opts.dev_host)
		err = kvt_engine_mem_import(c->srv->opts.dev_host, fd, r, d, &m);
	else
		err = kvt_engine_mem_map(fd, r, kvn, page, &m);
	if (fd >= 0)
		close(fd); /* mapped or duplicated: the daemon's copy is not needed */
	if (err)
		return err;
	c->regions[slot] = m;
	kvt_srv_log(c->srv, KVT_LOG_INFO, "event=register conn=%llu region=%d ns=%u bytes=%llu "
		    "layers=%u pages=%u", (unsigned long long)c->id, slot + 1, r->ns,
		    (unsigned long long)r->bytes, r->layers, r->pages);
	kvt_wr_begin(&c->out, KVT_OP_REGISTER | KVT_OP_REPLY, req->hdr.id, 0);
	kvt_wr_u32(&c->out, (uint32_t)slot + 1);
	return kvt_wr_end(&c->out) ? -ENOMEM : 1;
}

static int op_keys(struct kvt_conn *c, const struct kvt_req *req)
{
	const struct kvt_req_keys *k = &req->u.keys;
	struct kvt_ns *ns = conn_ns(c, k->ns);
	struct kvt_key *keys;
	uint8_t *tiers = NULL;
	int n;

	if (!ns)
		return -EBADF;
	/* the frame's keys are unaligned bytes; the store takes an array */
	keys = malloc((size_t)k->n * sizeof(*keys) + 1);
	if (!keys)
		return -ENOMEM;
	memcpy(keys, k->keys, (size_t)k->n * sizeof(*keys));
	switch (req->hdr.op) {
	case KVT_OP_LOOKUP:
		tiers = malloc(k->n + 1);
		n = tiers ? kvt_lookup(ns, keys, k->n, tiers) : -ENOMEM;
		if (n >= 0 && (uint32_t)n < k->n && c->srv->opts.hooks.lookup_cb) {
			/* the rest of the prefix from other nodes: reported
			 * remote, not counted as a local hit */
			int r = c->srv->opts.hooks.lookup_cb(c->srv->opts.hooks.arg, ns,
							     keys + n, k->n - (uint32_t)n);

			for (int i = 0; i < r; i++)
				tiers[n + i] = KVT_TIER_REMOTE;
			if (r > 0) {
				c->srv->c.lookup_remote += (uint64_t)r;
				c->srv->c.lookup_keys += k->n;
				c->srv->c.lookup_hits += (uint64_t)n;
				n += r;
				break;
			}
		}
		if (n >= 0) {
			c->srv->c.lookup_keys += k->n;
			c->srv->c.lookup_hits += (uint64_t)n;
		}
		break;
	case KVT_OP_PIN:
		n = kvt_pin(ns, keys, k->n);
		break;
	case KVT_OP_UNPIN:
		n = kvt_unpin(ns, keys, k->n);
		break;
	default: /* REMOVE: the count of keys removed */
		n = 0;
		for (uint32_t i = 0; i < k->n; i++)
			n += kvt_remove(ns, &keys[i]) == 0;
		break;
	}
	free(keys);
	if (n < 0) {
		free(tiers);
		return n;
	}
	kvt_wr_begin(&c->out, req->hdr.op | KVT_OP_REPLY, req->hdr.id, 0);
	kvt_wr_u32(&c->out, (uint32_t)n);
	if (tiers) {
		kvt_wr_u32(&c->out, k->n);
		kvt_wr_bytes(&c->out, tiers, k->n);
		free(tiers);
	}
	return kvt_wr_end(&c->out) ? -ENOMEM : 1;
}

static int op_xfer(struct kvt_conn *c, const struct kvt_req *req)
{
	struct kvt_server *srv = c->srv;
	const struct kvt_req_xfer *x = &req->u.xfer;
	struct kvt_ns *ns = conn_ns(c, x->ns);
	struct kvt_engine_mem *m;
	struct kvt_job *job;
	size_t bytes;

	if (!ns)
		return -EBADF;
	if (x->region < 1 || x->region > KVT_CONN_MAX_REGIONS || !c->regions[x->region - 1])
		return -EBADF;
	m = c->regions[x->region - 1];
	if (m->ns != x->ns)
		return -EINVAL;
	bytes = sizeof(*job) + (size_t)x->n * (sizeof(*job->keys) + sizeof(*job->pages));
	if (c->n_jobs >= KVT_CONN_MAX_TICKETS || c->job_bytes + bytes > KVT_CONN_MAX_TICKET_BYTES)
		return -EBUSY;
	for (uint32_t i = 0; i < x->n; i++)
		if (kvt_proto_page(x, i) >= m->pages)
			return -ERANGE;
	job = calloc(1, sizeof(*job));
	if (!job)
		return -ENOMEM;
	job->keys = malloc((size_t)x->n * sizeof(*job->keys));
	job->pages = malloc((size_t)x->n * sizeof(*job->pages));
	if (!job->keys || !job->pages) {
		kvt_job_free(job);
		return -ENOMEM;
	}
	memcpy(job->keys, x->keys, (size_t)x->n * sizeof(*job->keys));
	for (uint32_t i = 0; i < x->n; i++)
		job->pages[i] = kvt_proto_page(x, i);
	job->op = req->hdr.op;
	job->ticket = ++srv->next_ticket;
	job->conn = c;
	job->ns = ns;
	job->mem = m;
	kvt_engine_mem_get(m);
	job->n = x->n;
	job->has_parent = x->flags & KVT_SAVE_HAS_PARENT;
	job->parent = x->parent;
	job->start_ns = kvt_now_ns();
	job->bytes = bytes;
	job->next = c->jobs;
	c->jobs = job;
	c->n_jobs++;
	c->job_bytes += bytes;
	c->refs++; /* until the final note */

	kvt_wr_begin(&c->out, req->hdr.op | KVT_OP_REPLY, req->hdr.id, 0);
	kvt_wr_u64(&c->out, job->ticket);
	if (job->op == KVT_OP_LOAD)
		kvt_wr_u32(&c->out, m->layers);
	kvt_wr_end(&c->out);
	kvt_jobs_submit(srv, job);
	return 1;
}

static int op_wait(struct kvt_conn *c, const struct kvt_req *req)
{
	const struct kvt_req_wait *w = &req->u.wait;
	struct kvt_job *job = find_job(c, w->ticket);
	struct kvt_wait *p;

	if (!job)
		return -ENOENT;
	if (req->hdr.op == KVT_OP_POLL || wait_satisfied(job, w->layer) || w->timeout_ms == 0) {
		reply_wait(c, req->hdr.op, req->hdr.id, job, w->layer,
			   req->hdr.op == KVT_OP_WAIT && !wait_satisfied(job, w->layer) ?
			   -ETIMEDOUT : 0);
		job_maybe_free(job);
		return 1;
	}
	if (c->n_waits >= KVT_CONN_MAX_WAITS)
		return -EBUSY;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->job = job;
	p->req_id = req->hdr.id;
	p->layer = w->layer;
	p->next = job->waits;
	job->waits = p;
	c->n_waits++;
	if (w->timeout_ms != KVT_WAIT_FOREVER) {
		p->deadline_ns = kvt_now_ns() + (uint64_t)w->timeout_ms * 1000000;
		p->tnext = c->srv->timed;
		if (p->tnext)
			p->tnext->tprev = p;
		c->srv->timed = p;
	}
	return 2; /* parked: the latency is observed when it is answered */
}

static int op_stats(struct kvt_conn *c, const struct kvt_req *req)
{
	char *json = kvt_metrics_json(c->srv);
	size_t len;

	if (!json)
		return -ENOMEM;
	len = strlen(json);
	if (len > KVT_PROTO_MAX_PAYLOAD) {
		free(json);
		return -EMSGSIZE;
	}
	kvt_wr_begin(&c->out, KVT_OP_STATS | KVT_OP_REPLY, req->hdr.id, 0);
	kvt_wr_bytes(&c->out, json, len);
	free(json);
	return kvt_wr_end(&c->out) ? -ENOMEM : 1;
}

/* Handle one decoded request. Returns 1 (answered), 2 (parked) or -errno
 * (answer with that status). */
static int dispatch(struct kvt_conn *c, const struct kvt_req *req)
{
	uint16_t op = req->hdr.op;

	if (!c->tenant && op != KVT_OP_HELLO && op != KVT_OP_PING && op != KVT_OP_STATS)
		return -EPERM;
	switch (op) {
	case KVT_OP_HELLO:
		return op_hello(c, req);
	case KVT_OP_REGISTER:
		return op_register(c, req);
	case KVT_OP_LOOKUP:
	case KVT_OP_PIN:
	case KVT_OP_UNPIN:
	case KVT_OP_REMOVE:
		return op_keys(c, req);
	case KVT_OP_SAVE:
	case KVT_OP_LOAD:
		return op_xfer(c, req);
	case KVT_OP_WAIT:
	case KVT_OP_POLL:
		return op_wait(c, req);
	case KVT_OP_STATS:
		return op_stats(c, req);
	case KVT_OP_PING:
		kvt_wr_begin(&c->out, KVT_OP_PING | KVT_OP_REPLY, req->hdr.id, 0);
		kvt_wr_bytes(&c->out, req->u.blob.data, req->u.blob.len);
		return kvt_wr_end(&c->out) ? -ENOMEM : 1;
	}
	return -EOPNOTSUPP;
}

/* Give the frame at stream bytes [fs, fe) the fds that came with it: those
 * of reads ending inside it that started no later than it did. Fds of reads
 * that ended inside it but began after its first byte rode on no frame's
 * first byte and are closed. */
static void frame_take_fds(struct kvt_conn *c, uint64_t fs, uint64_t fe)
{
	int kept = 0;

	for (int i = 0; i < c->n_fds; i++) {
		struct kvt_conn_fd *f = &c->fds[i];

		if (f->end > fe)
			c->fds[kept++] = *f;
		else if (f->start <= fs && c->n_frame_fds < KVT_CONN_MAX_FDS)
			c->frame_fds[c->n_frame_fds++] = f->fd;
		else
			close(f->fd);
	}
	c->n_fds = kept;
}

static void frame_close_fds(struct kvt_conn *c)
{
	for (int i = 0; i < c->n_frame_fds; i++)
		close(c->frame_fds[i]);
	c->n_frame_fds = 0;
}

/* Parse and handle the whole frames in c->in. */
static void conn_process(struct kvt_conn *c)
{
	struct kvt_server *srv = c->srv;
	size_t off = 0;

	while (!c->closing && !conn_throttled(c)) {
		struct kvt_frame_hdr h;
		struct kvt_req req;
		uint64_t t0;
		int err = kvt_proto_hdr_decode(c->in + off, c->in_len - off, &h);

		if (err == -EAGAIN)
			break;
		if (err) {
			/* the stream cannot be resynchronised: say why and close */
			srv->c.bad_frames++;
			kvt_srv_log(srv, KVT_LOG_WARN, "event=frame.bad conn=%llu pid=%d err=\"%s\"",
				    (unsigned long long)c->id, (int)c->pid, kvt_strerror(err));
			reply_status(c, h.op & ~KVT_OP_REPLY, h.id, err);
			c->closing = true;
			break;
		}
		if (c->in_len - off < KVT_PROTO_HDR_BYTES + (size_t)h.len)
			break;
		t0 = kvt_now_ns();
		frame_take_fds(c, c->in_base + off, c->in_base + off + KVT_PROTO_HDR_BYTES + h.len);
		err = kvt_proto_req_decode(&h, c->in + off + KVT_PROTO_HDR_BYTES, &req);
		if (err) {
			srv->c.bad_frames++;
			kvt_srv_log(srv, KVT_LOG_DEBUG, "event=frame.invalid conn=%llu op=%u err=\"%s\"",
				    (unsigned long long)c->id, h.op, kvt_strerror(err));
		} else {
			err = dispatch(c, &req);
		}
		frame_close_fds(c); /* any this frame did not use */
		if (err < 0)
			reply_status(c, h.op & ~KVT_OP_REPLY, h.id, err);
		if (err != 2 && h.op < KVT_OP_COUNT && h.op != KVT_OP_SAVE && h.op != KVT_OP_LOAD)
			kvt_metrics_observe(srv, h.op, t0, err < 0 ? err : 0);
		else if (err < 0 && h.op < KVT_OP_COUNT)
			kvt_metrics_observe(srv, h.op, t0, err);
		off += KVT_PROTO_HDR_BYTES + h.len;
	}
	if (off) {
		memmove(c->in, c->in + off, c->in_len - off);
		c->in_len -= off;
		c->in_base += off;
	}
}

/* Read what is there, with any passed fds, and handle the whole frames.
 * Returns 1, 0 at the peer's end of stream, -1 on an error or a violation at
 * the socket level (too many fds at once, a frame that cannot fit). */
static int conn_read(struct kvt_conn *c)
{
	for (int rounds = 0; rounds < 16; rounds++) {
		union { struct cmsghdr h; char buf[CMSG_SPACE(sizeof(int) * KVT_CONN_MAX_FDS)]; } ctl;
		struct msghdr msg = { 0 };
		struct iovec iov;
		ssize_t n;
		size_t want = 64 * 1024;

		if (c->in_cap - c->in_len < want) {
			size_t cap = c->in_cap ? c->in_cap : want;
			uint8_t *p;

			while (cap - c->in_len < want)
				cap *= 2;
			/* at most one frame and one read beyond it are ever buffered */
			if (cap > 2 * (KVT_PROTO_MAX_PAYLOAD + KVT_PROTO_HDR_BYTES) + 2 * want)
				return -1;
			p = realloc(c->in, cap);
			if (!p)
				return -1;
			c->in = p;
			c->in_cap = cap;
		}
		iov.iov_base = c->in + c->in_len;
		iov.iov_len = c->in_cap - c->in_len;
		msg.msg_iov = &iov;
		msg.msg_iovlen = 1;
		msg.msg_control = ctl.buf;
		msg.msg_controllen = sizeof(ctl.buf);
		n = recvmsg(c->fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 1 : -1;
		if (n == 0)
			return 0;
		for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
			int *fds = (int *)CMSG_DATA(cm);
			size_t nf;

			if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
				continue;
			nf = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < nf; i++) {
				uint64_t start = c->in_base + c->in_len;

				if (c->n_fds < KVT_CONN_MAX_FDS)
					c->fds[c->n_fds++] = (struct kvt_conn_fd){
						fds[i], start, start + (uint64_t)n };
				else
					close(fds[i]);
			}
		}
		if (msg.msg_flags & MSG_CTRUNC)
			return -1;
		c->in_len += (size_t)n;
		conn_process(c);
		if (c->closing || conn_throttled(c) || (size_t)n < iov.iov_len)
			return 1;
	}
	return 1;
}

static bool conn_write(struct kvt_conn *c)
{
	while (c->out_off < c->out.len) {
		ssize_t n = send(c->fd, c->out.buf + c->out_off, c->out.len - c->out_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR;
		c->out_off += (size_t)n;
	}
	c->out.len = c->out_off = 0;
	return true;
}

static void conn_event(struct kvt_conn *c, uint32_t events)
{
	bool eof = false;

	if (!c->closing && !conn_throttled(c) &&
	    (events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))) {
		int r = conn_read(c);

		if (r < 0) {
			conn_close(c, "error");
			return;
		}
		if (r == 0) {
			/* the peer is done sending: answer what it sent, then close */
			c->closing = true;
			eof = true;
		}
	}
	if (!conn_write(c)) {
		conn_close(c, "eof");
		return;
	}
	/* input held back by a full output buffer can go on now */
	if (!c->closing && c->in_len && !conn_throttled(c)) {
		conn_process(c);
		if (!conn_write(c)) {
			conn_close(c, "eof");
			return;
		}
	}
	if (c->closing && c->out.len == 0) {
		conn_close(c, eof ? "eof" : "protocol");
		return;
	}
	conn_want_out(c);
}

/* ---- server ------------------------------------------------------------ */

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
		/* a socket file left by a daemon that died: replace it, unless a
		 * live daemon still answers on it */
		int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		bool live = probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0;
		if (probe >= 0)
			close(probe);
		if (live)
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

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Fault the pages of the DRAM region in, 64 MiB at a time. MADV_POPULATE_WRITE
 * maps pages without changing their bytes, so it is safe while blocks are
 * being stored; where the kernel lacks it, pages are touched by writing
 * zeros, which is safe only before serving. Returns 0 or -errno. */
static int prefault_dram(struct kvt_server *srv, bool serving)
{
	const uint64_t chunk = 64ull << 20;
	uint64_t t0 = kvt_now_ns(), len, off;
	uint8_t *base;
	int err = 0;

	if (kvt_store_dram_region(srv->opts.store, (void **)&base, &len))
		return -EINVAL;
	for (off = 0; off < len && !__atomic_load_n(&srv->stop, __ATOMIC_ACQUIRE); off += chunk) {
		uint64_t n = len - off < chunk ? len - off : chunk;

		if (madvise(base + off, n, MADV_POPULATE_WRITE) == 0)
			continue;
		if (errno != EINVAL || serving) {
			err = -errno;
			break;
		}
		for (uint64_t p = 0; p < n; p += 4096)
			((volatile uint8_t *)base)[off + p] = 0;
	}
	kvt_srv_log(srv, err ? KVT_LOG_WARN : KVT_LOG_INFO,
		    "event=dram.prefault bytes=%llu of=%llu ms=%.1f%s%s",
		    (unsigned long long)(off < len ? off : len), (unsigned long long)len,
		    (double)(kvt_now_ns() - t0) / 1e6, err ? " err=" : "",
		    err ? kvt_strerror(err) : "");
	return err;
}

static void *prefault_main(void *arg)
{
	prefault_dram(arg, true);
	return NULL;
}

/* Each client holds its socket and may queue KVT_CONN_MAX_FDS passed fds;
 * keep max_clients within RLIMIT_NOFILE, less a margin for the store, the
 * metrics endpoint and the daemon itself. */
static void size_max_clients(struct kvt_server *srv)
{
	const unsigned per_client = 1 + KVT_CONN_MAX_FDS, margin = 64;
	struct rlimit rl;
	unsigned fit;

	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur == RLIM_INFINITY)
		return;
	fit = rl.rlim_cur > margin + per_client ? (unsigned)((rl.rlim_cur - margin) / per_client) : 1;
	if (srv->opts.max_clients > fit) {
		kvt_srv_log(srv, KVT_LOG_WARN, "event=max_clients.lowered from=%u to=%u nofile=%llu",
			    srv->opts.max_clients, fit, (unsigned long long)rl.rlim_cur);
		srv->opts.max_clients = fit;
	}
}

int kvt_server_open(const struct kvt_server_opts *opts, struct kvt_server **out)
{
	struct kvt_server *srv;
	int err;

	if (!opts || !out || opts->size != sizeof(*opts) || !opts->socket_path ||
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
	if (opts->prefault_dram == KVT_PREFAULT_BEFORE)
		prefault_dram(srv, false);
	srv->epfd = epoll_create1(EPOLL_CLOEXEC);
	srv->wake.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (srv->epfd < 0 || srv->wake.fd < 0) {
		err = -errno;
		goto fail;
	}
	err = bind_socket(srv);
	if (err)
		goto fail;
	if ((err = ep_mod(srv, EPOLL_CTL_ADD, srv->listen.fd, EPOLLIN, &srv->listen)) ||
	    (err = ep_mod(srv, EPOLL_CTL_ADD, srv->wake.fd, EPOLLIN, &srv->wake)))
		goto fail;
	if (opts->metrics_addr && (err = kvt_http_listen(srv, opts->metrics_addr)))
		goto fail;
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

	__atomic_store_n(&srv->stop, 1, __ATOMIC_RELEASE);
	if (write(srv->wake.fd, &one, sizeof(one)) < 0) {
		/* saturated counter: the loop wakes anyway */
	}
}

int kvt_server_metrics_port(const struct kvt_server *srv)
{
	return srv->metrics_port;
}

static void loop_once(struct kvt_server *srv, int timeout_ms)
{
	struct epoll_event evs[64];
	int n = epoll_wait(srv->epfd, evs, 64, timeout_ms);

	for (int i = 0; i < n; i++) {
		enum kvt_ev_kind *kind = evs[i].data.ptr;

		switch (*kind) {
		case KVT_EV_LISTEN:
			accept_conns(srv);
			break;
		case KVT_EV_WAKE:
			drain_notes(srv);
			break;
		case KVT_EV_CONN:
			conn_event((struct kvt_conn *)kind, evs[i].events);
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
		expire_waits(srv, kvt_now_ns());
}

int kvt_server_run(struct kvt_server *srv)
{
	uint64_t drain_until;

	kvt_srv_log(srv, KVT_LOG_INFO, "event=server.listen socket=%s workers=%u",
		    srv->opts.socket_path, srv->n_threads);
	while (!__atomic_load_n(&srv->stop, __ATOMIC_ACQUIRE))
		loop_once(srv, next_deadline_ms(srv));

	/* stop accepting; let the jobs in flight finish and their waits be answered */
	kvt_srv_log(srv, KVT_LOG_INFO, "event=server.draining jobs=%d conns=%llu",
		    __atomic_load_n(&srv->busy_jobs, __ATOMIC_ACQUIRE),
		    (unsigned long long)srv->c.conns_open);
	epoll_ctl(srv->epfd, EPOLL_CTL_DEL, srv->listen.fd, NULL);
	close(srv->listen.fd);
	srv->listen.fd = -1;
	if (srv->opts.listen_fd < 0)
		unlink(srv->opts.socket_path);
	drain_until = kvt_now_ns() + 30ull * 1000000000;
	while (__atomic_load_n(&srv->busy_jobs, __ATOMIC_ACQUIRE) > 0 && kvt_now_ns() < drain_until)
		loop_once(srv, 50);
	/* a moment for the last replies to leave */
	for (int i = 0; i < 10; i++) {
		bool pending = false;
		for (struct kvt_conn *c = srv->conns; c; c = c->next)
			pending |= c->out.len > c->out_off;
		if (!pending)
			break;
		loop_once(srv, 10);
	}
	kvt_srv_log(srv, KVT_LOG_INFO, "event=server.stopped");
	return 0;
}

void kvt_server_close(struct kvt_server *srv)
{
	if (!srv)
		return;
	/* cancel what is queued, then let the workers finish and leave */
	__atomic_store_n(&srv->stop, 2, __ATOMIC_RELEASE);
	for (struct kvt_conn *c = srv->conns; c; c = c->next)
		__atomic_store_n(&c->dead, 1, __ATOMIC_RELEASE);
	if (srv->prefault_running)
		pthread_join(srv->prefault_thread, NULL);
	if (srv->threads)
		kvt_jobs_stop(srv);
	if (srv->wake.fd >= 0)
		drain_notes(srv);
	while (srv->conns)
		conn_close(srv->conns, "shutdown");
	kvt_http_close_all(srv);
	if (srv->listen.fd >= 0) {
		close(srv->listen.fd);
		if (srv->opts.listen_fd < 0)
			unlink(srv->opts.socket_path);
	}
	if (srv->wake.fd >= 0)
		close(srv->wake.fd);
	if (srv->epfd >= 0)
		close(srv->epfd);
	if (srv->reserve_fd >= 0)
		close(srv->reserve_fd);
	pthread_mutex_destroy(&srv->qlock);
	pthread_cond_destroy(&srv->qcond);
	pthread_mutex_destroy(&srv->nlock);
	free(srv->notes);
	free(srv->tenants);
	free(srv);
}
