/* SPDX-License-Identifier: Apache-2.0 */
/* A Redis connection with deadlines (see redis_conn.h). */
#include "cluster/redis_conn.h"

#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct kvt_redis {
	redisContext *c;
	size_t pending; /* commands appended since the last exec */
	char addr[300]; /* the server's "HOST:PORT" or socket path */
	char err[160];
};

static int copy_part(char *dst, size_t cap, const char *src, size_t len)
{
	if (len >= cap)
		return -EINVAL;
	memcpy(dst, src, len);
	dst[len] = '\0';
	return 0;
}

static int parse_db(const char *s, unsigned *db)
{
	char *end;
	unsigned long v;

	if (!*s)
		return 0;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v > 1000000 || *s == '-' || *s == '+')
		return -EINVAL;
	*db = (unsigned)v;
	return 0;
}

/* "HOST[:PORT]" (or "[v6][:PORT]") of len bytes into out as "HOST:PORT",
 * def_port when it has none. */
static int parse_hostport(const char *p, size_t len, unsigned def_port, char *out, size_t cap)
{
	char host[300];
	const char *port;
	char *end;
	long v;

	if (len == 0 || copy_part(host, sizeof(host) - 6, p, len))
		return -EINVAL;
	if ((host[0] == '[' && host[len - 1] == ']') || (host[0] != '[' && !strchr(host, ':')))
		return snprintf(out, cap, "%s:%u", host, def_port) < (int)cap ? 0 : -EINVAL;
	port = strrchr(host, ':') + 1;
	errno = 0;
	v = strtol(port, &end, 10);
	if (!*port || *end || errno || v < 1 || v > 65535 || *port == '+' || *port == '-')
		return -EINVAL;
	return snprintf(out, cap, "%s", host) < (int)cap ? 0 : -EINVAL;
}

/* sentinel://HOST:PORT[,HOST:PORT...]/MASTER (the part after the scheme) */
static int parse_sentinels(const char *p, struct kvt_redis_url *out)
{
	const char *slash = strchr(p, '/'), *m;

	if (!slash || strchr(slash + 1, '/'))
		return -EINVAL;
	for (m = slash + 1; *m; m++)
		if (!isalnum((unsigned char)*m) && *m != '.' && *m != '_' && *m != '-')
			return -EINVAL;
	if (copy_part(out->master, sizeof(out->master), slash + 1, strlen(slash + 1)) ||
	    !out->master[0])
		return -EINVAL;
	while (p < slash) {
		const char *comma = memchr(p, ',', (size_t)(slash - p));
		const char *end = comma ? comma : slash;

		if (out->n_sentinels == KVT_REDIS_MAX_SENTINELS ||
		    parse_hostport(p, (size_t)(end - p), 26379, out->sentinels[out->n_sentinels],
				   sizeof(out->sentinels[0])))
			return -EINVAL;
		out->n_sentinels++;
		p = end + 1;
		if (comma && p == slash)
			return -EINVAL; /* a trailing comma */
	}
	return out->n_sentinels ? 0 : -EINVAL;
}

int kvt_redis_url_parse(const char *url, struct kvt_redis_url *out)
{
	const char *p, *at, *slash, *q;
	size_t hlen;

	memset(out, 0, sizeof(*out));
	if (!url)
		return -EINVAL;
	if (strncmp(url, "unix://", 7) == 0) {
		p = url + 7;
		q = strchr(p, '?');
		if (*p != '/' || copy_part(out->hostport, 108, p, q ? (size_t)(q - p) : strlen(p)))
			return -EINVAL;
		if (q)
			return strncmp(q, "?db=", 4) == 0 && q[4] ? parse_db(q + 4, &out->db) : -EINVAL;
		return 0;
	}
	if (strncmp(url, "sentinel://", 11) == 0) {
		int err = parse_sentinels(url + 11, out);

		if (err)
			memset(out, 0, sizeof(*out));
		return err;
	}
	if (strncmp(url, "redis://", 8) != 0)
		return -EINVAL;
	p = url + 8;
	slash = strchr(p, '/');
	at = strchr(p, '@');
	if (at && (!slash || at < slash)) {
		/* [user]:password@ — only the password is used (Redis < 6 AUTH) */
		const char *colon = memchr(p, ':', (size_t)(at - p));

		if (!colon || copy_part(out->password, sizeof(out->password), colon + 1,
					(size_t)(at - colon - 1)))
			return -EINVAL;
		p = at + 1;
	}
	hlen = slash ? (size_t)(slash - p) : strlen(p);
	if (slash && parse_db(slash + 1, &out->db))
		return -EINVAL;
	/* HOST alone gets the default port; "[v6]" likewise */
	return parse_hostport(p, hlen, 6379, out->hostport, sizeof(out->hostport));
}

static int fail(struct kvt_redis *r, int err, const char *what)
{
	snprintf(r->err, sizeof(r->err), "%s: %s", what,
		 r->c && r->c->err ? r->c->errstr : strerror(-err));
	return err;
}

int kvt_redis_append(struct kvt_redis *r, int argc, const char **argv, const size_t *argvlen)
{
	if (redisAppendCommandArgv(r->c, argc, argv, argvlen) != REDIS_OK)
		return -ENOMEM;
	r->pending++;
	return 0;
}

/* redisBufferWrite with SIGPIPE kept from the process: hiredis writes with
 * write(2), and a server gone away must be an error here, not the end of
 * the program. The signal is blocked in this thread around the call and a
 * pending one is consumed before the mask is restored. */
static int buffer_write(redisContext *c, int *done)
{
	sigset_t pipe_set, old;
	struct timespec zero = { 0 };
	int rc;

	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
	rc = redisBufferWrite(c, done);
	if (rc != REDIS_OK) {
		sigset_t pending;

		sigpending(&pending);
		if (sigismember(&pending, SIGPIPE) && !sigismember(&old, SIGPIPE))
			sigtimedwait(&pipe_set, NULL, &zero);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

/* Wait for events on the connection's socket until the deadline; returns
 * the revents, or a negative errno. */
static int wait_fd(struct kvt_redis *r, short events, uint64_t deadline_ns)
{
	struct pollfd pfd = { .fd = r->c->fd, .events = events };
	uint64_t now;
	int rc;

	for (;;) {
		now = kvt_now_ns();
		if (now >= deadline_ns)
			return -ETIMEDOUT;
		rc = poll(&pfd, 1, (int)((deadline_ns - now + 999999) / 1000000));
		if (rc > 0)
			return pfd.revents;
		if (rc < 0 && errno != EINTR)
			return -errno;
	}
}

int kvt_redis_exec(struct kvt_redis *r, redisReply **replies, size_t n, uint64_t deadline_ns)
{
	size_t got = 0;
	void *reply;
	int done = 0, ev, err;

	if (n != r->pending)
		return fail(r, -EINVAL, "pipeline");
	r->pending = 0;
	for (size_t i = 0; i < n; i++)
		replies[i] = NULL;
	/* Write while reading: a long pipeline's replies must not fill the
	 * socket while we still write (Redis buffers them, but be safe). */
	while (!done || got < n) {
		if (got < n && redisGetReplyFromReader(r->c, &reply) != REDIS_OK) {
			err = fail(r, -EPROTO, "reply");
			goto out;
		}
		if (got < n && reply) {
			replies[got++] = reply;
			continue;
		}
		ev = wait_fd(r, (short)(POLLIN | (done ? 0 : POLLOUT)), deadline_ns);
		if (ev < 0) {
			err = fail(r, ev, ev == -ETIMEDOUT ? "timed out" : "poll");
			goto out;
		}
		if (!done && (ev & (POLLOUT | POLLERR | POLLHUP)) &&
		    buffer_write(r->c, &done) != REDIS_OK) {
			err = fail(r, -ECONNRESET, "write");
			goto out;
		}
		if ((ev & (POLLIN | POLLERR | POLLHUP)) && redisBufferRead(r->c) != REDIS_OK) {
			err = fail(r, -ECONNRESET, "read");
			goto out;
		}
	}
	for (size_t i = 0; i < n; i++)
		if (replies[i]->type == REDIS_REPLY_ERROR && !strncmp(replies[i]->str, "READONLY", 8)) {
			snprintf(r->err, sizeof(r->err), "%.60s is a replica now (READONLY)", r->addr);
			err = -EROFS;
			goto out;
		}
	return 0;
out:
	kvt_redis_free_replies(replies, got);
	return err;
}

void kvt_redis_free_replies(redisReply **replies, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (replies[i])
			freeReplyObject(replies[i]);
		replies[i] = NULL;
	}
}

/* AUTH and SELECT, as the URL asks. */
static int handshake(struct kvt_redis *r, const struct kvt_redis_url *url, uint64_t deadline_ns)
{
	char db[16];
	const char *argv[2];
	size_t lens[2];
	redisReply *rep[2];
	size_t n = 0;
	int err, auth = -1;

	if (url->password[0]) {
		argv[0] = "AUTH";
		argv[1] = url->password;
		lens[0] = 4;
		lens[1] = strlen(url->password);
		if (kvt_redis_append(r, 2, argv, lens))
			return -ENOMEM;
		auth = (int)n++;
	}
	if (url->db) {
		snprintf(db, sizeof(db), "%u", url->db);
		argv[0] = "SELECT";
		argv[1] = db;
		lens[0] = 6;
		lens[1] = strlen(db);
		if (kvt_redis_append(r, 2, argv, lens))
			return -ENOMEM;
		n++;
	}
	if (n == 0)
		return 0;
	err = kvt_redis_exec(r, rep, n, deadline_ns);
	if (err)
		return err;
	for (size_t i = 0; i < n && !err; i++) {
		if (rep[i]->type == REDIS_REPLY_STATUS)
			continue;
		snprintf(r->err, sizeof(r->err), "%s refused: %.100s", (int)i == auth ? "AUTH" : "SELECT",
			 rep[i]->type == REDIS_REPLY_ERROR ? rep[i]->str : "unexpected reply");
		err = (int)i == auth ? -EACCES : -EPROTO;
	}
	kvt_redis_free_replies(rep, n);
	return err;
}

/* A connection to hostport by deadline_ns, for hiredis's protocol only. */
static int open_fd(struct kvt_redis *r, const char *hostport, uint64_t deadline_ns)
{
	struct kvt_sockaddr sa;
	int fd, err;

	snprintf(r->addr, sizeof(r->addr), "%s", hostport);
	err = kvt_sockaddr_parse(hostport, false, &sa);
	if (err) {
		snprintf(r->err, sizeof(r->err), "cannot resolve %.120s", hostport);
		return err;
	}
	fd = kvt_sock_connect(&sa, deadline_ns);
	if (fd < 0) {
		snprintf(r->err, sizeof(r->err), "connect %.120s: %s", hostport, strerror(-fd));
		return fd;
	}
	r->c = redisConnectFd(fd);
	if (!r->c) {
		close(fd);
		snprintf(r->err, sizeof(r->err), "out of memory");
		return -ENOMEM;
	}
	/* hiredis treats EAGAIN as "try again later" only without REDIS_BLOCK;
	 * the socket is non-blocking and every wait is our poll(). */
	r->c->flags &= ~REDIS_BLOCK;
	return 0;
}

/* One command of argc arguments and its reply, by deadline_ns. */
static int call(struct kvt_redis *r, int argc, const char **argv, redisReply **rep,
		uint64_t deadline_ns)
{
	size_t lens[4];

	for (int i = 0; i < argc; i++)
		lens[i] = strlen(argv[i]);
	if (kvt_redis_append(r, argc, argv, lens))
		return -ENOMEM;
	return kvt_redis_exec(r, rep, 1, deadline_ns);
}

/* Ask one Sentinel where the primary of url->master is, into addr. */
static int ask_sentinel(struct kvt_redis *s, const struct kvt_redis_url *url, const char *where,
			uint64_t deadline_ns, char *addr, size_t len)
{
	const char *argv[] = { "SENTINEL", "get-master-addr-by-name", url->master };
	redisReply *rep;
	int err;

	err = open_fd(s, where, deadline_ns);
	if (!err)
		err = call(s, 3, argv, &rep, deadline_ns);
	if (err)
		return err;
	if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
	    rep->element[0]->type == REDIS_REPLY_STRING &&
	    rep->element[1]->type == REDIS_REPLY_STRING && rep->element[0]->len < 256 &&
	    rep->element[1]->len < 8) {
		const char *host = rep->element[0]->str;

		snprintf(addr, len, strchr(host, ':') ? "[%s]:%s" : "%s:%s", host,
			 rep->element[1]->str);
	} else if (rep->type == REDIS_REPLY_NIL) {
		snprintf(s->err, sizeof(s->err), "sentinel %.60s knows no master %.64s", where,
			 url->master);
		err = -ENOENT;
	} else {
		snprintf(s->err, sizeof(s->err), "sentinel %.80s: %.60s", where,
			 rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
		err = -EPROTO;
	}
	kvt_redis_free_replies(&rep, 1);
	return err;
}

/* The primary's address from the first Sentinel that names it; each is
 * given an equal share of the time left, so one that is black-holed does
 * not take the others' turn. */
static int discover(struct kvt_redis *r, const struct kvt_redis_url *url, uint64_t deadline_ns,
		    char *addr, size_t len)
{
	int err = -EHOSTUNREACH;

	for (unsigned i = 0; i < url->n_sentinels; i++) {
		uint64_t now = kvt_now_ns(), step;
		struct kvt_redis s = { 0 };

		if (now >= deadline_ns) {
			err = -ETIMEDOUT;
			break;
		}
		step = now + (deadline_ns - now) / (url->n_sentinels - i);
		err = ask_sentinel(&s, url, url->sentinels[i], step, addr, len);
		if (err)
			snprintf(r->err, sizeof(r->err), "%s", s.err);
		if (s.c)
			redisFree(s.c);
		if (!err)
			return 0;
	}
	return err;
}

/* A server that Sentinel named must be a primary now. */
static int check_primary(struct kvt_redis *r, uint64_t deadline_ns)
{
	const char *argv[] = { "ROLE" };
	redisReply *rep;
	int err = call(r, 1, argv, &rep, deadline_ns);

	if (err)
		return err;
	if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 1 ||
	    rep->element[0]->type != REDIS_REPLY_STRING) {
		snprintf(r->err, sizeof(r->err), "ROLE: unexpected reply from %.80s", r->addr);
		err = -EPROTO;
	} else if (strcmp(rep->element[0]->str, "master") != 0) {
		snprintf(r->err, sizeof(r->err), "%.80s is a %.20s, not the primary yet", r->addr,
			 rep->element[0]->str);
		err = -EAGAIN;
	}
	kvt_redis_free_replies(&rep, 1);
	return err;
}

int kvt_redis_connect(const struct kvt_redis_url *url, uint64_t deadline_ns,
		      struct kvt_redis **out, char *errbuf, size_t errlen)
{
	char primary[300];
	struct kvt_redis *r;
	int err;

	*out = NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	if (url->n_sentinels) {
		err = discover(r, url, deadline_ns, primary, sizeof(primary));
		if (!err)
			err = open_fd(r, primary, deadline_ns);
	} else {
		err = open_fd(r, url->hostport, deadline_ns);
	}
	if (!err)
		err = handshake(r, url, deadline_ns);
	if (!err && url->n_sentinels)
		err = check_primary(r, deadline_ns);
	if (err)
		goto fail;
	*out = r;
	return 0;
fail:
	if (errbuf)
		snprintf(errbuf, errlen, "%s", r->err);
	kvt_redis_close(r);
	return err;
}

const char *kvt_redis_addr(const struct kvt_redis *r)
{
	return r->addr;
}

const char *kvt_redis_errstr(const struct kvt_redis *r)
{
	return r->err;
}

void kvt_redis_close(struct kvt_redis *r)
{
	if (!r)
		return;
	if (r->c)
		redisFree(r->c); /* closes the fd */
	free(r);
}
