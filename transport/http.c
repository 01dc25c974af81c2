/* SPDX-License-Identifier: Apache-2.0 */
/* The metrics endpoint: a small HTTP server in the event loop that answers
 * GET /metrics (Prometheus text), GET /stats (JSON), GET /healthz (live:
 * the loop answers) and GET /readyz (ready for work, or 503 with the
 * reasons) and closes. Scrapes
 * are bounded in number and time, so idle or slow ones never block the loop
 * or each other. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/server_int.h"

#define KVT_HTTP_MAX_CONNS 64
#define KVT_HTTP_DEADLINE_NS (5ull * 1000000000) /* a scrape's whole life */

/* One scrape: read a request head, answer, close. Non-blocking in the loop.
 * The list runs newest first, so the oldest is at its tail. */
struct kvt_http_conn {
	enum kvt_ev_kind kind;
	int fd;
	uint64_t deadline_ns;
	char in[2048];
	size_t in_len;
	char *out;
	size_t out_len, out_off;
	struct kvt_http_conn *next;
};

int kvt_http_listen(struct kvt_server *srv, const char *addr)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	char host[64];
	const char *colon = strrchr(addr, ':');
	char *end;
	long port;
	int fd, one = 1, err;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &srv->http_listen };

	if (!colon || (size_t)(colon - addr) >= sizeof(host))
		return -EINVAL;
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = 0;
	port = strtol(colon + 1, &end, 10);
	if (*end || port < 0 || port > 65535)
		return -EINVAL;
	if (!strcmp(host, "localhost") || !*host)
		strcpy(host, "127.0.0.1");
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		return -EINVAL;
	sa.sin_port = htons((uint16_t)port);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 16) ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) ||
	    epoll_ctl(srv->epfd, EPOLL_CTL_ADD, fd, &ev)) {
		err = -errno;
		close(fd);
		return err;
	}
	srv->http_listen.fd = fd;
	srv->metrics_port = ntohs(sa.sin_port);
	return 0;
}

static void http_free(struct kvt_server *srv, struct kvt_http_conn *h)
{
	for (struct kvt_http_conn **p = &srv->https; *p; p = &(*p)->next) {
		if (*p == h) {
			*p = h->next;
			break;
		}
	}
	srv->n_https--;
	epoll_ctl(srv->epfd, EPOLL_CTL_DEL, h->fd, NULL);
	close(h->fd);
	free(h->out);
	free(h);
}

int kvt_http_expire(struct kvt_server *srv, uint64_t now)
{
	uint64_t first = 0;

	for (struct kvt_http_conn *h = srv->https, *next; h; h = next) {
		next = h->next;
		if (now >= h->deadline_ns)
			http_free(srv, h);
		else if (!first || h->deadline_ns < first)
			first = h->deadline_ns;
	}
	return first ? (int)((first - now) / 1000000 + 1) : -1;
}

void kvt_http_close_all(struct kvt_server *srv)
{
	while (srv->https)
		http_free(srv, srv->https);
	if (srv->http_listen.fd >= 0) {
		close(srv->http_listen.fd);
		srv->http_listen.fd = -1;
	}
}

void kvt_http_accept(struct kvt_server *srv)
{
	for (;;) {
		int fd = accept4(srv->http_listen.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct kvt_http_conn *h;
		struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP };

		if (fd < 0)
			return;
		if (srv->n_https >= KVT_HTTP_MAX_CONNS) {
			/* full of idle sockets: the oldest gives way to the new scrape */
			struct kvt_http_conn *old = srv->https;

			while (old->next)
				old = old->next;
			http_free(srv, old);
		}
		if (!(h = calloc(1, sizeof(*h)))) {
			close(fd);
			continue;
		}
		h->kind = KVT_EV_HTTP;
		h->fd = fd;
		h->deadline_ns = kvt_now_ns() + KVT_HTTP_DEADLINE_NS;
		ev.data.ptr = h;
		if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, fd, &ev)) {
			close(fd);
			free(h);
			continue;
		}
		h->next = srv->https;
		srv->https = h;
		srv->n_https++;
	}
}

static void http_respond(struct kvt_server *srv, struct kvt_http_conn *h)
{
	const char *status = "200 OK", *ctype = "text/plain; version=0.0.4; charset=utf-8";
	char *body = NULL;
	bool get = !strncmp(h->in, "GET ", 4);
	const char *path = h->in + 4;

	if (!get) {
		status = "405 Method Not Allowed";
	} else if (!strncmp(path, "/metrics ", 9) || !strncmp(path, "/metrics?", 9)) {
		body = kvt_metrics_prom(srv);
	} else if (!strncmp(path, "/stats ", 7)) {
		body = kvt_metrics_json(srv, SIZE_MAX, false);
		ctype = "application/json";
	} else if (!strncmp(path, "/healthz ", 9)) {
		body = strdup("ok\n");
		ctype = "text/plain; charset=utf-8";
	} else if (!strncmp(path, "/readyz ", 8)) {
		bool ready;

		body = kvt_health_ready(srv, &ready);
		ctype = "text/plain; charset=utf-8";
		if (body && !ready)
			status = "503 Service Unavailable";
	} else {
		status = "404 Not Found";
	}
	if (get && !body && !strncmp(status, "200", 3))
		status = "500 Internal Server Error";
	if (asprintf(&h->out, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
		     "Connection: close\r\n\r\n%s", status, ctype, body ? strlen(body) : 0,
		     body ? body : "") < 0)
		h->out = NULL;
	free(body);
	h->out_len = h->out ? strlen(h->out) : 0;
}

void kvt_http_event(struct kvt_server *srv, void *ptr, uint32_t events)
{
	struct kvt_http_conn *h = ptr;

	if (!h->out) {
		ssize_t n = recv(h->fd, h->in + h->in_len, sizeof(h->in) - 1 - h->in_len, 0);

		if (n <= 0) {
			if (n < 0 && errno == EAGAIN)
				return;
			http_free(srv, h);
			return;
		}
		h->in_len += (size_t)n;
		h->in[h->in_len] = 0;
		if (!strstr(h->in, "\r\n\r\n") && !strstr(h->in, "\n\n")) {
			if (h->in_len + 1 >= sizeof(h->in))
				http_free(srv, h); /* a head this long is not a scrape */
			return;
		}
		http_respond(srv, h);
		if (!h->out) {
			http_free(srv, h);
			return;
		}
		struct epoll_event ev = { .events = EPOLLOUT, .data.ptr = h };
		epoll_ctl(srv->epfd, EPOLL_CTL_MOD, h->fd, &ev);
	}
	while (h->out_off < h->out_len) {
		ssize_t n = send(h->fd, h->out + h->out_off, h->out_len - h->out_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EAGAIN)
				return;
			break;
		}
		h->out_off += (size_t)n;
	}
	http_free(srv, h);
}
