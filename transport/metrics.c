/* The server's counters, rendered two ways: JSON (the STATS reply, read by
 * `kvtier stats`) and Prometheus text (the HTTP endpoint, GET /metrics). Both
 * come from one snapshot of the server's and the store's counters, so a
 * person and a scraper see the same numbers. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "transport/server_int.h"

const double kvt_lat_bounds_us[KVT_LAT_BUCKETS] = {
	5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000,
	100000, 250000, 500000, 1000000, 5000000,
};

void kvt_metrics_observe(struct kvt_server *srv, uint16_t op, uint64_t start_ns, int err)
{
	struct kvt_op_stats *s;
	double us;
	int b = 0;

	if (op == 0 || op >= KVT_OP_COUNT)
		return;
	s = &srv->c.op[op];
	s->count++;
	if (err)
		s->errors++;
	if (!start_ns)
		return; /* WAITs parked: their time is the job's, not theirs */
	us = (double)(kvt_now_ns() - start_ns) / 1e3;
	while (b < KVT_LAT_BUCKETS && us > kvt_lat_bounds_us[b])
		b++;
	s->bucket[b]++;
	s->sum_us += us;
}

static uint64_t ld(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* ---- JSON -------------------------------------------------------------- */

char *kvt_metrics_json(struct kvt_server *srv)
{
	struct kvt_store_stats st = { .size = sizeof(st) };
	const struct kvt_server_counters *c = &srv->c;
	json_t *root = json_object(), *tiers = json_object(), *ops = json_object();
	json_t *server = json_object(), *store = json_object(), *copies = json_object();
	char *text;

	if (!root || !tiers || !ops || !server || !store || !copies) {
		json_decref(root);
		json_decref(tiers);
		json_decref(ops);
		json_decref(server);
		json_decref(store);
		json_decref(copies);
		return NULL;
	}
	kvt_store_stats(srv->opts.store, &st);
	json_object_set_new(server, "uptime_s", json_real((double)(kvt_now_ns() - srv->start_ns) / 1e9));
	json_object_set_new(server, "connections_open", json_integer((json_int_t)c->conns_open));
	json_object_set_new(server, "connections_accepted", json_integer((json_int_t)c->conns_accepted));
	json_object_set_new(server, "connections_refused", json_integer((json_int_t)c->conns_refused));
	json_object_set_new(server, "hello_refused", json_integer((json_int_t)c->hello_refused));
	json_object_set_new(server, "bad_frames", json_integer((json_int_t)c->bad_frames));
	json_object_set_new(server, "jobs_in_flight",
			    json_integer(__atomic_load_n(&srv->busy_jobs, __ATOMIC_RELAXED)));
	{
		json_int_t parked = 0;
		for (struct kvt_conn *cn = srv->conns; cn; cn = cn->next)
			parked += cn->n_waits;
		json_object_set_new(server, "waits_parked", json_integer(parked));
	}
	json_object_set_new(server, "jobs_cancelled", json_integer((json_int_t)c->jobs_cancelled));
	json_object_set_new(server, "workers", json_integer(srv->n_threads));
	json_object_set_new(server, "gpu", json_boolean(srv->opts.dev_cuda != NULL));
	json_object_set_new(server, "host_copy",
			    json_string(srv->opts.dev_host ? "device" : "direct"));
	json_object_set_new(root, "server", server);

	json_object_set_new(copies, "gather_bytes", json_integer((json_int_t)ld(&c->gather_bytes)));
	json_object_set_new(copies, "scatter_bytes", json_integer((json_int_t)ld(&c->scatter_bytes)));
	json_object_set_new(copies, "save_blocks", json_integer((json_int_t)ld(&c->save_blocks)));
	json_object_set_new(copies, "save_already_present", json_integer((json_int_t)ld(&c->save_present)));
	json_object_set_new(copies, "load_blocks", json_integer((json_int_t)ld(&c->load_blocks)));
	json_object_set_new(copies, "load_misses", json_integer((json_int_t)ld(&c->load_misses)));
	json_object_set_new(copies, "load_remote_blocks", json_integer((json_int_t)ld(&c->load_remote)));
	json_object_set_new(copies, "lookup_remote_keys", json_integer((json_int_t)c->lookup_remote));
	json_object_set_new(root, "copies", copies);

	json_object_set_new(store, "namespaces", json_integer((json_int_t)st.namespaces));
	json_object_set_new(store, "blocks", json_integer((json_int_t)st.blocks));
	json_object_set_new(store, "puts", json_integer((json_int_t)st.puts));
	json_object_set_new(store, "gets", json_integer((json_int_t)st.gets));
	json_object_set_new(store, "get_misses", json_integer((json_int_t)st.get_misses));
	json_object_set_new(store, "removes", json_integer((json_int_t)st.removes));
	json_object_set_new(store, "lookups", json_integer((json_int_t)st.lookups));
	json_object_set_new(store, "lookup_keys", json_integer((json_int_t)st.lookup_keys));
	json_object_set_new(store, "lookup_hit_keys", json_integer((json_int_t)st.lookup_hit_keys));
	json_object_set_new(store, "lookup_miss_keys",
			    json_integer((json_int_t)(st.lookup_keys - st.lookup_hit_keys)));
	json_object_set_new(store, "checksum_failures", json_integer((json_int_t)st.checksum_failures));
	json_object_set_new(store, "index_bytes", json_integer((json_int_t)st.index_bytes));
	json_object_set_new(root, "store", store);

	for (int t = KVT_TIER_HBM; t < KVT_TIER_COUNT; t++) {
		const struct kvt_tier_stats *ts = &st.tier[t];
		json_t *o;

		if (!ts->present)
			continue;
		o = json_object();
		json_object_set_new(o, "capacity_bytes", json_integer((json_int_t)ts->capacity_bytes));
		json_object_set_new(o, "used_bytes", json_integer((json_int_t)ts->used_bytes));
		json_object_set_new(o, "occupancy", json_real(ts->capacity_bytes ?
			(double)ts->used_bytes / (double)ts->capacity_bytes : 0));
		json_object_set_new(o, "blocks", json_integer((json_int_t)ts->blocks));
		json_object_set_new(o, "hits", json_integer((json_int_t)ts->hits));
		json_object_set_new(o, "bytes_in", json_integer((json_int_t)ts->bytes_in));
		json_object_set_new(o, "bytes_out", json_integer((json_int_t)ts->bytes_out));
		json_object_set_new(o, "evictions", json_integer((json_int_t)ts->evictions));
		json_object_set_new(o, "errors", json_integer((json_int_t)ts->errors));
		json_object_set_new(o, "degraded", json_boolean(ts->degraded));
		json_object_set_new(tiers, kvt_tier_name(t), o);
	}
	json_object_set_new(root, "tiers", tiers);

	for (unsigned op = 1; op < KVT_OP_COUNT; op++) {
		const struct kvt_op_stats *s = &c->op[op];
		uint64_t timed = 0;
		json_t *o = json_object(), *h = json_array();

		for (int b = 0; b <= KVT_LAT_BUCKETS; b++) {
			timed += s->bucket[b];
			json_array_append_new(h, json_integer((json_int_t)s->bucket[b]));
		}
		json_object_set_new(o, "count", json_integer((json_int_t)s->count));
		json_object_set_new(o, "errors", json_integer((json_int_t)s->errors));
		json_object_set_new(o, "mean_us", json_real(timed ? s->sum_us / (double)timed : 0));
		json_object_set_new(o, "latency_buckets", h);
		json_object_set_new(ops, kvt_op_name(op), o);
	}
	{
		json_t *bounds = json_array();
		for (int b = 0; b < KVT_LAT_BUCKETS; b++)
			json_array_append_new(bounds, json_real(kvt_lat_bounds_us[b]));
		json_object_set_new(root, "latency_bounds_us", bounds);
	}
	json_object_set_new(root, "ops", ops);
	if (srv->opts.hooks.json_cb) {
		char *cl = srv->opts.hooks.json_cb(srv->opts.hooks.arg);
		json_t *o = cl ? json_loads(cl, 0, NULL) : NULL;

		if (o)
			json_object_set_new(root, "cluster", o);
		free(cl);
	}
	text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(root);
	return text;
}

/* ---- Prometheus text --------------------------------------------------- */

struct buf {
	char *p;
	size_t len, cap;
	bool bad;
};

static void bprintf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void bprintf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		if (b->bad)
			return;
		va_start(ap, fmt);
		n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->bad = true;
			return;
		}
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = b->cap ? b->cap * 2 : 8192;
		while (cap - b->len <= (size_t)n)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->bad = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
}

static void help(struct buf *b, const char *name, const char *type, const char *text)
{
	bprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, text, name, type);
}

char *kvt_metrics_prom(struct kvt_server *srv)
{
	struct kvt_store_stats st = { .size = sizeof(st) };
	const struct kvt_server_counters *c = &srv->c;
	struct buf b = { 0 };
	int t;

	kvt_store_stats(srv->opts.store, &st);
#define TIERS for (t = KVT_TIER_HBM; t < KVT_TIER_COUNT; t++) if (st.tier[t].present)
	help(&b, "kvtier_tier_capacity_bytes", "gauge", "Capacity of each tier.");
	TIERS bprintf(&b, "kvtier_tier_capacity_bytes{tier=\"%s\"} %llu\n", kvt_tier_name(t),
		      (unsigned long long)st.tier[t].capacity_bytes);
	help(&b, "kvtier_tier_used_bytes", "gauge", "Bytes of the blocks stored in each tier.");
	TIERS bprintf(&b, "kvtier_tier_used_bytes{tier=\"%s\"} %llu\n", kvt_tier_name(t),
		      (unsigned long long)st.tier[t].used_bytes);
	help(&b, "kvtier_tier_occupancy_ratio", "gauge", "used / capacity of each tier.");
	TIERS bprintf(&b, "kvtier_tier_occupancy_ratio{tier=\"%s\"} %.6f\n", kvt_tier_name(t),
		      st.tier[t].capacity_bytes ? (double)st.tier[t].used_bytes /
		      (double)st.tier[t].capacity_bytes : 0.0);
	help(&b, "kvtier_tier_blocks", "gauge", "Blocks stored in each tier.");
	TIERS bprintf(&b, "kvtier_tier_blocks{tier=\"%s\"} %llu\n", kvt_tier_name(t),
		      (unsigned long long)st.tier[t].blocks);
	help(&b, "kvtier_tier_hits_total", "counter", "Lookups and reads served from each tier.");
	TIERS bprintf(&b, "kvtier_tier_hits_total{tier=\"%s\"} %llu\n", kvt_tier_name(t),
		      (unsigned long long)st.tier[t].hits);
	help(&b, "kvtier_tier_bytes_total", "counter", "Bytes moved into (in) and out of (out) each tier.");
	TIERS {
		bprintf(&b, "kvtier_tier_bytes_total{tier=\"%s\",direction=\"in\"} %llu\n",
			kvt_tier_name(t), (unsigned long long)st.tier[t].bytes_in);
		bprintf(&b, "kvtier_tier_bytes_total{tier=\"%s\",direction=\"out\"} %llu\n",
			kvt_tier_name(t), (unsigned long long)st.tier[t].bytes_out);
	}
	help(&b, "kvtier_tier_evictions_total", "counter", "Blocks that left each tier for lack of room.");
	TIERS bprintf(&b, "kvtier_tier_evictions_total{tier=\"%s\"} %llu\n", kvt_tier_name(t),
		      (unsigned long long)st.tier[t].evictions);
	help(&b, "kvtier_tier_errors_total", "counter", "I/O errors and checksum mismatches of each tier.");
	TIERS bprintf(&b, "kvtier_tier_errors_total{tier=\"%s\"} %llu\n", kvt_tier_name(t),
		      (unsigned long long)st.tier[t].errors);
	help(&b, "kvtier_tier_degraded", "gauge", "1 when a tier is failing and no longer written to.");
	TIERS bprintf(&b, "kvtier_tier_degraded{tier=\"%s\"} %d\n", kvt_tier_name(t),
		      st.tier[t].degraded ? 1 : 0);
#undef TIERS
	help(&b, "kvtier_lookup_keys_total", "counter", "Keys looked up, by result.");
	bprintf(&b, "kvtier_lookup_keys_total{result=\"hit\"} %llu\n",
		(unsigned long long)st.lookup_hit_keys);
	bprintf(&b, "kvtier_lookup_keys_total{result=\"miss\"} %llu\n",
		(unsigned long long)(st.lookup_keys - st.lookup_hit_keys));
	help(&b, "kvtier_load_misses_total", "counter", "Blocks asked for by LOAD and not found.");
	bprintf(&b, "kvtier_load_misses_total %llu\n", (unsigned long long)ld(&c->load_misses));
	help(&b, "kvtier_load_remote_blocks_total", "counter",
	     "Blocks LOAD brought from other nodes of the cluster.");
	bprintf(&b, "kvtier_load_remote_blocks_total %llu\n", (unsigned long long)ld(&c->load_remote));
	help(&b, "kvtier_lookup_remote_keys_total", "counter",
	     "Keys LOOKUP reported held by other nodes (tier remote).");
	bprintf(&b, "kvtier_lookup_remote_keys_total %llu\n", (unsigned long long)c->lookup_remote);
	help(&b, "kvtier_engine_bytes_total", "counter",
	     "Bytes copied between engine memory and kvtier (gather = save, scatter = load).");
	bprintf(&b, "kvtier_engine_bytes_total{direction=\"gather\"} %llu\n",
		(unsigned long long)ld(&c->gather_bytes));
	bprintf(&b, "kvtier_engine_bytes_total{direction=\"scatter\"} %llu\n",
		(unsigned long long)ld(&c->scatter_bytes));
	help(&b, "kvtier_blocks", "gauge", "Blocks stored in all tiers.");
	bprintf(&b, "kvtier_blocks %llu\n", (unsigned long long)st.blocks);
	help(&b, "kvtier_checksum_failures_total", "counter", "Blocks dropped for a checksum mismatch.");
	bprintf(&b, "kvtier_checksum_failures_total %llu\n", (unsigned long long)st.checksum_failures);
	help(&b, "kvtier_connections", "gauge", "Client connections open.");
	bprintf(&b, "kvtier_connections %llu\n", (unsigned long long)c->conns_open);
	help(&b, "kvtier_connections_refused_total", "counter",
	     "Connections refused (peer credentials, client limit).");
	bprintf(&b, "kvtier_connections_refused_total %llu\n", (unsigned long long)c->conns_refused);
	help(&b, "kvtier_hello_refused_total", "counter", "HELLOs refused (token, namespace).");
	bprintf(&b, "kvtier_hello_refused_total %llu\n", (unsigned long long)c->hello_refused);
	help(&b, "kvtier_bad_frames_total", "counter", "Frames refused by the parser.");
	bprintf(&b, "kvtier_bad_frames_total %llu\n", (unsigned long long)c->bad_frames);
	help(&b, "kvtier_ops_total", "counter", "Requests handled, by op and result.");
	for (unsigned op = 1; op < KVT_OP_COUNT; op++) {
		bprintf(&b, "kvtier_ops_total{op=\"%s\",result=\"ok\"} %llu\n", kvt_op_name(op),
			(unsigned long long)(c->op[op].count - c->op[op].errors));
		bprintf(&b, "kvtier_ops_total{op=\"%s\",result=\"error\"} %llu\n", kvt_op_name(op),
			(unsigned long long)c->op[op].errors);
	}
	help(&b, "kvtier_op_latency_seconds", "histogram",
	     "Time from a request's arrival to its reply (SAVE/LOAD: to completion).");
	for (unsigned op = 1; op < KVT_OP_COUNT; op++) {
		uint64_t cum = 0;
		for (int i = 0; i < KVT_LAT_BUCKETS; i++) {
			cum += c->op[op].bucket[i];
			bprintf(&b, "kvtier_op_latency_seconds_bucket{op=\"%s\",le=\"%g\"} %llu\n",
				kvt_op_name(op), kvt_lat_bounds_us[i] / 1e6, (unsigned long long)cum);
		}
		cum += c->op[op].bucket[KVT_LAT_BUCKETS];
		bprintf(&b, "kvtier_op_latency_seconds_bucket{op=\"%s\",le=\"+Inf\"} %llu\n",
			kvt_op_name(op), (unsigned long long)cum);
		bprintf(&b, "kvtier_op_latency_seconds_sum{op=\"%s\"} %.9f\n", kvt_op_name(op),
			c->op[op].sum_us / 1e6);
		bprintf(&b, "kvtier_op_latency_seconds_count{op=\"%s\"} %llu\n", kvt_op_name(op),
			(unsigned long long)cum);
	}
	if (srv->opts.hooks.prom_cb) {
		char *cl = srv->opts.hooks.prom_cb(srv->opts.hooks.arg);

		if (cl)
			bprintf(&b, "%s", cl);
		free(cl);
	}
	if (b.bad) {
		free(b.p);
		return NULL;
	}
	return b.p;
}

/* ---- HTTP endpoint ----------------------------------------------------- */

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
		body = kvt_metrics_json(srv);
		ctype = "application/json";
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
