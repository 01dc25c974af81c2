/* SPDX-License-Identifier: Apache-2.0 */
/* The sidecar server's connections: accepting them (peer credentials, the
 * client limit, running out of descriptors), reading frames with the fds
 * passed on them, handing each whole frame to kvt_dispatch, writing the
 * replies back with backpressure, and closing. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/server_int.h"

static void accept_resume(struct kvt_server *srv);

static void fds_account(struct kvt_conn *c);

/* Whether u's failed HELLOs are recent enough to count. */
static bool fails_remembered(const struct kvt_uid *u, uint64_t now)
{
	return u->hello_fails && now < u->last_fail_ns + KVT_HELLO_FAIL_MEMORY_NS;
}

/* The entry of uid, created (with no connections) when `create`; NULL when
 * absent or out of memory. Entries of uids gone and forgiven are dropped on
 * the way. */
static struct kvt_uid *uid_get(struct kvt_server *srv, uid_t uid, bool create)
{
	uint64_t now = kvt_now_ns();

	for (size_t i = 0; i < srv->n_uids;) {
		struct kvt_uid *u = &srv->uids[i];

		if (!fails_remembered(u, now))
			u->hello_fails = 0;
		if (u->uid == uid)
			return u;
		if (!u->conns && !u->hello_fails)
			*u = srv->uids[--srv->n_uids];
		else
			i++;
	}
	if (!create)
		return NULL;
	if (srv->n_uids == srv->cap_uids) {
		size_t cap = srv->cap_uids ? srv->cap_uids * 2 : 8;
		struct kvt_uid *p = realloc(srv->uids, cap * sizeof(*p));

		if (!p)
			return NULL;
		srv->uids = p;
		srv->cap_uids = cap;
	}
	srv->uids[srv->n_uids] = (struct kvt_uid){ .uid = uid };
	return &srv->uids[srv->n_uids++];
}

/* Forget u once it holds nothing and no failure counts against it
 * (entries move: u is invalid after). */
static void uid_put(struct kvt_server *srv, struct kvt_uid *u)
{
	if (u->conns || fails_remembered(u, kvt_now_ns()))
		return;
	*u = srv->uids[--srv->n_uids];
}

static void hello_list_remove(struct kvt_conn *c)
{
	struct kvt_server *srv = c->srv;

	if (!c->on_hello_list)
		return;
	if (c->hprev)
		c->hprev->hnext = c->hnext;
	else
		srv->hello_head = c->hnext;
	if (c->hnext)
		c->hnext->hprev = c->hprev;
	else
		srv->hello_tail = c->hprev;
	c->hprev = c->hnext = NULL;
	c->on_hello_list = false;
}

/* Put a new connection on the clock of its HELLO: deadlines grow with
 * accept time, so the list stays ordered by appending. */
static void hello_list_add(struct kvt_conn *c)
{
	struct kvt_server *srv = c->srv;

	if (!srv->opts.hello_timeout_ms)
		return;
	c->hello_deadline_ns = kvt_now_ns() + (uint64_t)srv->opts.hello_timeout_ms * 1000000;
	c->hprev = srv->hello_tail;
	c->hnext = NULL;
	if (srv->hello_tail)
		srv->hello_tail->hnext = c;
	else
		srv->hello_head = c;
	srv->hello_tail = c;
	c->on_hello_list = true;
}

void kvt_conn_hello_failed(struct kvt_conn *c)
{
	struct kvt_uid *u = uid_get(c->srv, c->uid, false);
	uint64_t now = kvt_now_ns(), delay;
	unsigned doublings;

	if (!u)
		return;
	u->hello_fails++;
	u->last_fail_ns = now;
	if (u->hello_fails <= KVT_HELLO_FREE_FAILS)
		return;
	doublings = u->hello_fails - KVT_HELLO_FREE_FAILS - 1;
	delay = doublings < 16 ? KVT_HELLO_DELAY_NS << doublings : KVT_HELLO_DELAY_MAX_NS;
	u->hello_retry_ns = now + (delay < KVT_HELLO_DELAY_MAX_NS ? delay : KVT_HELLO_DELAY_MAX_NS);
}

static void delayed_remove(struct kvt_conn *c)
{
	if (!c->delayed)
		return;
	if (c->dprev)
		c->dprev->dnext = c->dnext;
	else
		c->srv->delayed = c->dnext;
	if (c->dnext)
		c->dnext->dprev = c->dprev;
	c->dprev = c->dnext = NULL;
	c->delayed = false;
}

/* Whether c's next frame, a HELLO, must wait for its uid's delay: then c is
 * held (not read) until it passes. */
static bool hello_delayed(struct kvt_conn *c)
{
	struct kvt_uid *u = uid_get(c->srv, c->uid, false);
	uint64_t now = kvt_now_ns();

	if (!u || now >= u->hello_retry_ns)
		return false;
	c->srv->c.hello_delayed++;
	/* it said HELLO in time: the wait is the daemon's, off the HELLO clock */
	hello_list_remove(c);
	c->delay_until_ns = u->hello_retry_ns;
	c->delayed = true;
	c->dprev = NULL;
	c->dnext = c->srv->delayed;
	if (c->dnext)
		c->dnext->dprev = c;
	c->srv->delayed = c;
	return true;
}

void kvt_conn_hello_done(struct kvt_conn *c)
{
	hello_list_remove(c);
}

void kvt_conn_expire_hellos(struct kvt_server *srv, uint64_t now)
{
	while (srv->hello_head && srv->hello_head->hello_deadline_ns <= now) {
		srv->c.hello_timeouts++;
		kvt_conn_close(srv->hello_head, "hello_timeout");
	}
	for (struct kvt_conn *c = srv->delayed, *next; c; c = next) {
		next = c->dnext;
		if (c->delay_until_ns > now)
			continue;
		delayed_remove(c);
		if (!c->tenant)
			hello_list_add(c); /* a fresh HELLO clock from now */
		kvt_conn_event(c, 0); /* its HELLO goes on (or waits again) */
	}
}

uint64_t kvt_conn_first_deadline(const struct kvt_server *srv)
{
	uint64_t first = srv->hello_head ? srv->hello_head->hello_deadline_ns : 0;

	for (const struct kvt_conn *c = srv->delayed; c; c = c->dnext)
		if (!first || c->delay_until_ns < first)
			first = c->delay_until_ns;
	return first;
}

void kvt_conn_unref(struct kvt_conn *c)
{
	if (--c->refs > 0)
		return;
	/* no job of it runs any more: its namespaces may go */
	for (int i = 0; i < KVT_CONN_MAX_NS; i++)
		if (c->ns[i])
			kvt_tenant_ns_put(c->srv, c->ns[i], true);
	kvt_wr_free(&c->out);
	free(c->in);
	free(c->memo);
	free(c);
}

/* Queue a reply with an empty payload. */
static void reply_status(struct kvt_conn *c, uint16_t op, uint64_t id, int status)
{
	kvt_wr_begin(&c->out, op | KVT_OP_REPLY, id, status);
	kvt_wr_end(&c->out);
}

/* Output queued past the high-water mark: the client is not reading its
 * replies, so its input waits in the socket until they drain. A delayed
 * HELLO holds the input back the same way. */
static bool conn_throttled(const struct kvt_conn *c)
{
	return c->out.len - c->out_off >= KVT_CONN_OUT_HIGH || c->delayed;
}

/* Watch for output room while replies wait, and stop reading a connection
 * that is closing (its unread input would keep the loop spinning) or whose
 * replies are piling up. */
void kvt_conn_want_out(struct kvt_conn *c)
{
	uint32_t ev = c->closing || conn_throttled(c) ? 0 : EPOLLIN | EPOLLRDHUP;

	if (c->out_off < c->out.len)
		ev |= EPOLLOUT;
	if (ev != c->events && c->fd >= 0) {
		c->events = ev;
		kvt_srv_watch(c->srv, EPOLL_CTL_MOD, c->fd, ev, c);
	}
}

void kvt_conn_close(struct kvt_conn *c, const char *why)
{
	struct kvt_server *srv = c->srv;
	struct kvt_uid *u;

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
	fds_account(c);
	for (int i = 0; i < KVT_CONN_MAX_REGIONS; i++) {
		kvt_engine_mem_put(c->regions[i]);
		c->regions[i] = NULL;
	}
	kvt_tickets_close(c);
	hello_list_remove(c);
	delayed_remove(c);
	u = uid_get(srv, c->uid, false);
	if (u) {
		u->conns--;
		uid_put(srv, u);
	}
	if (c->prev)
		c->prev->next = c->next;
	else
		srv->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	srv->c.conns_open--;
	accept_resume(srv);
	kvt_conn_unref(c);
}

/* Whether the peer on fd is in group gid by a supplementary group: the
 * groups it had when it connected (SO_PEERGROUPS). */
static bool peer_in_group(int fd, gid_t gid)
{
	gid_t small[64], *groups = small;
	socklen_t len = sizeof(small);
	bool in = false;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len)) {
		if (errno != ERANGE || !(groups = malloc(len)) ||
		    getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len)) {
			if (groups != small)
				free(groups);
			return false;
		}
	}
	for (size_t i = 0; i < len / sizeof(gid_t) && !in; i++)
		in = groups[i] == gid;
	if (groups != small)
		free(groups);
	return in;
}

static bool peer_allowed(const struct kvt_server *srv, int fd, const struct ucred *cr)
{
	gid_t gid = srv->opts.socket_gid != (gid_t)-1 ? srv->opts.socket_gid : getegid();

	if (cr->uid == 0 || cr->uid == geteuid() || cr->gid == gid)
		return true;
	for (size_t i = 0; i < srv->opts.n_allow_uids; i++)
		if (srv->opts.allow_uids[i] == cr->uid)
			return true;
	return peer_in_group(fd, gid);
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
	    kvt_srv_watch(srv, EPOLL_CTL_ADD, srv->listen.fd, EPOLLIN, &srv->listen) == 0)
		srv->listen_paused = false;
}

void kvt_conn_accept(struct kvt_server *srv)
{
	for (;;) {
		struct ucred cr;
		socklen_t len = sizeof(cr);
		struct kvt_conn *c = NULL;
		struct kvt_uid *u;
		const char *why = NULL;
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
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) ||
		    !peer_allowed(srv, fd, &cr)) {
			srv->c.conns_refused++;
			kvt_srv_log(srv, KVT_LOG_WARN, "event=conn.refused reason=credentials "
				    "pid=%d uid=%d", (int)cr.pid, (int)cr.uid);
			close(fd);
			continue;
		}
		u = uid_get(srv, cr.uid, true);
		if (srv->c.conns_open >= srv->opts.max_clients) {
			why = "max_clients";
		} else if (u && srv->opts.max_conns_per_uid &&
			   u->conns >= srv->opts.max_conns_per_uid) {
			why = "max_conns_per_uid";
			srv->c.conns_uid_refused++;
		} else if (!u || !(c = calloc(1, sizeof(*c)))) {
			why = "out_of_memory";
		}
		if (why) {
			srv->c.conns_refused++;
			kvt_srv_log(srv, KVT_LOG_WARN, "event=conn.refused reason=%s pid=%d uid=%d "
				    "uid_conns=%u", why, (int)cr.pid, (int)cr.uid, u ? u->conns : 0);
			if (u)
				uid_put(srv, u);
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
		if (kvt_srv_watch(srv, EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLRDHUP, c)) {
			close(fd);
			free(c);
			uid_put(srv, u);
			continue;
		}
		u->conns++;
		hello_list_add(c);
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

/* Charge c's fds past KVT_CONN_MAX_FDS to its uid and the server, after
 * the count changed. */
static void fds_account(struct kvt_conn *c)
{
	int held = c->n_fds + c->n_frame_fds;
	unsigned lent = held > KVT_CONN_MAX_FDS ? (unsigned)(held - KVT_CONN_MAX_FDS) : 0;
	struct kvt_uid *u = uid_get(c->srv, c->uid, false);

	if (u)
		u->fds_lent = u->fds_lent + lent - c->fds_lent;
	c->srv->fds_lent = c->srv->fds_lent + lent - c->fds_lent;
	c->fds_lent = lent;
}

/* Whether c may queue one more passed fd: within its own KVT_CONN_MAX_FDS,
 * or lent one from its uid's share and the server's pool. */
static bool fd_room(struct kvt_conn *c)
{
	struct kvt_uid *u;

	if (c->n_fds + c->n_frame_fds < KVT_CONN_MAX_FDS)
		return true;
	if (!c->tenant || c->n_fds >= KVT_CONN_QUEUE_FDS ||
	    c->srv->fds_lent >= c->srv->max_fds_lent)
		return false;
	u = uid_get(c->srv, c->uid, false);
	return u && u->fds_lent < KVT_UID_LENT_FDS;
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
		else if (f->start <= fs && c->n_frame_fds < KVT_CONN_QUEUE_FDS)
			c->frame_fds[c->n_frame_fds++] = f->fd;
		else
			close(f->fd);
	}
	c->n_fds = kept;
	fds_account(c);
}

static void frame_close_fds(struct kvt_conn *c)
{
	for (int i = 0; i < c->n_frame_fds; i++)
		close(c->frame_fds[i]);
	c->n_frame_fds = 0;
	c->fds_dropped = false;
	fds_account(c);
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
		if (h.op == KVT_OP_HELLO && hello_delayed(c))
			break;
		t0 = kvt_now_ns();
		frame_take_fds(c, c->in_base + off, c->in_base + off + KVT_PROTO_HDR_BYTES + h.len);
		err = kvt_proto_req_decode(&h, c->in + off + KVT_PROTO_HDR_BYTES, &req);
		if (err) {
			srv->c.bad_frames++;
			kvt_srv_log(srv, KVT_LOG_DEBUG, "event=frame.invalid conn=%llu op=%u err=\"%s\"",
				    (unsigned long long)c->id, h.op, kvt_strerror(err));
		} else {
			err = kvt_dispatch(c, &req);
		}
		frame_close_fds(c); /* any this frame did not use */
		if (err < 0)
			reply_status(c, h.op & ~KVT_OP_REPLY, h.id, err);
		if (err != KVT_REQ_PARKED && h.op < KVT_OP_COUNT && h.op != KVT_OP_SAVE && h.op != KVT_OP_LOAD)
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
		union { struct cmsghdr h; char buf[CMSG_SPACE(sizeof(int) * KVT_CONN_QUEUE_FDS)]; } ctl;
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

				if (fd_room(c)) {
					c->fds[c->n_fds++] = (struct kvt_conn_fd){
						fds[i], start, start + (uint64_t)n };
					fds_account(c);
				} else {
					close(fds[i]);
					c->fds_dropped = true;
				}
			}
		}
		if ((msg.msg_flags & MSG_CTRUNC) || (c->fds_dropped && !c->tenant))
			return -1; /* more fds than a frame of its may carry */
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

void kvt_conn_event(struct kvt_conn *c, uint32_t events)
{
	bool eof = false;

	/* A held-back HELLO is not read, but a hangup is reported whatever the
	 * watched events: with no one left to answer, close now, or the loop
	 * would be woken for it until the delay ends. */
	if (c->delayed && (events & (EPOLLHUP | EPOLLERR))) {
		kvt_conn_close(c, "hangup");
		return;
	}
	if (!c->closing && !conn_throttled(c) &&
	    (events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))) {
		int r = conn_read(c);

		if (r < 0) {
			kvt_conn_close(c, "error");
			return;
		}
		if (r == 0) {
			/* the peer is done sending: answer what it sent, then close */
			c->closing = true;
			eof = true;
		}
	}
	if (!conn_write(c)) {
		kvt_conn_close(c, "eof");
		return;
	}
	/* input held back by a full output buffer can go on now */
	if (!c->closing && c->in_len && !conn_throttled(c)) {
		conn_process(c);
		if (!conn_write(c)) {
			kvt_conn_close(c, "eof");
			return;
		}
	}
	if (c->closing && c->out.len == 0) {
		kvt_conn_close(c, eof ? "eof" : "protocol");
		return;
	}
	kvt_conn_want_out(c);
}
