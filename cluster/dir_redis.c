/* SPDX-License-Identifier: Apache-2.0 */
/* The cluster directory on Redis: the ops, the queues callers touch, and
 * the thread that owns the connection (see dir_redis.h for the layout of
 * the keys and of the module). */
#include "cluster/dir_redis.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/dir_record.h"

int kvt_rdir_key(const struct kvt_rdir *d, char *buf, size_t len, const char *kind,
		 const char *name)
{
	return snprintf(buf, len, "%s%s%s", d->prefix, kind, name);
}

/* ---- the thread's Redis exchanges ------------------------------------- */

int kvt_rdir_cmd(struct kvt_rdir *d, const char **argv)
{
	size_t lens[12];
	int n = 0;

	for (; argv[n]; n++)
		lens[n] = strlen(argv[n]);
	return kvt_redis_append(d->conn, n, argv, lens);
}

int kvt_rdir_exec(struct kvt_rdir *d, redisReply **rep, size_t n)
{
	return kvt_redis_exec(d->conn, rep, n, kvt_rdir_deadline(d));
}

bool kvt_rdir_ok(const redisReply *r)
{
	return r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
}

/* Log a failure to reach Redis while it is out of reach: the first of each
 * kind, once (a server that answers junk or nothing fails each retry).
 * Called with d->mu held. */
static void log_unreachable(struct kvt_rdir *d, const char *why)
{
	char kind[sizeof(d->down_logged)];

	/* the kind is the message up to any detail after a comma or colon */
	snprintf(kind, sizeof(kind), "%.*s", (int)strcspn(why, ",:"), why);
	if (!strcmp(kind, d->down_logged))
		return;
	snprintf(d->down_logged, sizeof(d->down_logged), "%s", kind);
	kvt_rdir_log(d, KVT_LOG_WARN, "event=cluster.redis_unreachable url=%s err=\"%s\" "
		     "effect=local-only", d->url_shown, why);
}

void kvt_rdir_conn_lost(struct kvt_rdir *d, int err)
{
	char why[200];

	snprintf(why, sizeof(why), "%s", d->conn ? kvt_redis_errstr(d->conn) : strerror(-err));
	if (!why[0])
		snprintf(why, sizeof(why), "%s", strerror(err < 0 ? -err : EIO));
	kvt_redis_close(d->conn);
	d->conn = NULL;
	pthread_mutex_lock(&d->mu);
	d->st.errors++;
	if (d->st.reachable) {
		kvt_rdir_log(d, KVT_LOG_WARN, "event=cluster.redis_down url=%s err=\"%s\" effect=local-only",
			     d->url_shown, why);
		snprintf(d->down_logged, sizeof(d->down_logged), "%.*s", (int)strcspn(why, ",:"),
			 why);
	} else {
		/* connected, but not to a Redis that answers */
		log_unreachable(d, why);
	}
	d->st.reachable = false;
	pthread_mutex_unlock(&d->mu);
}

/* ---- the thread -------------------------------------------------------- */

/* Fail the lookups queued while Redis is out of reach, at once; with
 * `writes`, drop the queued hint writes too (counted), as when closing.
 * Otherwise the writes wait, in order, for the connection to come back:
 * the queue is bounded, and what overflows it is dropped and counted. */
static void flush_queues(struct kvt_rdir *d, bool writes)
{
	struct lookup_req *list;

	pthread_mutex_lock(&d->mu);
	list = d->lk_head;
	d->lk_head = d->lk_tail = NULL;
	if (writes) {
		d->st.dropped_keys += d->ring_n;
		d->ring_n = 0;
	}
	pthread_mutex_unlock(&d->mu);
	if (list)
		kvt_rdir_finish_lookups(d, list, -ENOTCONN, 0);
}

/* Wait on the wake condition until deadline_ns or a signal, the connection
 * left to lookup callers meanwhile; false once the directory is closing. */
static bool sleep_until(struct kvt_rdir *d, uint64_t deadline_ns, bool idle_only)
{
	struct timespec ts = { .tv_sec = (time_t)(deadline_ns / 1000000000ull),
			       .tv_nsec = (long)(deadline_ns % 1000000000ull) };
	bool stop;

	pthread_mutex_unlock(&d->io_mu);
	pthread_mutex_lock(&d->mu);
	while (!d->stop && (!idle_only || (!d->lk_head && !d->ring_n && !d->self_dirty &&
					   !d->conn_dropped)) &&
	       kvt_now_ns() < deadline_ns)
		if (pthread_cond_timedwait(&d->wake, &d->mu, &ts) == ETIMEDOUT)
			break;
	d->conn_dropped = false;
	stop = d->stop;
	pthread_mutex_unlock(&d->mu);
	atomic_store(&d->io_wanted, true);
	pthread_mutex_lock(&d->io_mu);
	atomic_store(&d->io_wanted, false);
	return !stop;
}

static void *dir_thread(void *arg)
{
	struct kvt_rdir *d = arg;
	unsigned backoff = RECONNECT_MIN_MS;
	unsigned max_backoff = d->url.n_sentinels ? RECONNECT_MAX_SENTINEL_MS : RECONNECT_MAX_MS;
	uint64_t next_renew = 0, next_connect = 0;
	char why[200];
	int err;

	pthread_mutex_lock(&d->io_mu);
	for (;;) {
		bool stop, dirty, lookups, writes;

		pthread_mutex_lock(&d->mu);
		stop = d->stop;
		dirty = d->self_dirty;
		lookups = d->lk_head != NULL;
		writes = d->ring_n > 0;
		pthread_mutex_unlock(&d->mu);
		if (stop)
			break;
		if (!d->conn) {
			/* a connection lost soon after it was made waits too, so a
			 * Redis that accepts and then fails is not hammered */
			if (kvt_now_ns() < next_connect && !sleep_until(d, next_connect, false))
				break;
			next_connect = kvt_deadline_ms(backoff);
			backoff = backoff * 2 > max_backoff ? max_backoff : backoff * 2;
			err = kvt_redis_connect(&d->url, kvt_rdir_deadline(d), &d->conn, why, sizeof(why));
			if (err) {
				pthread_mutex_lock(&d->mu);
				d->st.errors++;
				log_unreachable(d, why);
				pthread_mutex_unlock(&d->mu);
				flush_queues(d, false);
				continue;
			}
			err = kvt_rdir_load_scripts(d);
			if (err) {
				kvt_rdir_conn_lost(d, err);
				continue;
			}
			kvt_rdir_primary_seen(d);
			next_renew = 0;
		}
		if (d->scripts_lost) {
			d->scripts_lost = false;
			kvt_rdir_conn_lost(d, -ENOENT);
			continue;
		}
		if (kvt_now_ns() >= next_renew || dirty) {
			err = kvt_rdir_renew(d);
			if (!err)
				err = kvt_rdir_refresh_members(d);
			if (err) {
				kvt_rdir_conn_lost(d, err);
				continue;
			}
			next_renew = kvt_deadline_ms(d->o.member_ttl_ms / 3);
			backoff = RECONNECT_MIN_MS; /* this connection works */
			pthread_mutex_lock(&d->mu);
			if (!d->st.reachable) {
				if (d->was_up)
					d->st.reconnects++;
				kvt_rdir_log(d, KVT_LOG_INFO, "event=cluster.redis_up url=%s epoch=%" PRIu64
					     " members=%u", d->url_shown, d->st.epoch, d->st.members);
			}
			d->st.reachable = true;
			d->was_up = true;
			d->down_logged[0] = 0;
			pthread_mutex_unlock(&d->mu);
			continue;
		}
		if (lookups) {
			kvt_rdir_lookups(d);
			continue;
		}
		if (writes) {
			kvt_rdir_writes(d);
			continue;
		}
		if (!sleep_until(d, next_renew, true))
			break;
	}
	if (d->conn)
		kvt_rdir_leave(d);
	kvt_redis_close(d->conn);
	d->conn = NULL;
	pthread_mutex_unlock(&d->io_mu);
	flush_queues(d, true);
	return NULL;
}

/* ---- the ops ----------------------------------------------------------- */

static struct kvt_rdir *rd(struct kvt_dir *d)
{
	return (struct kvt_rdir *)d;
}

static void push_ops(struct kvt_dir *dir, const struct kvt_key *keys, size_t n, uint8_t tier)
{
	struct kvt_rdir *d = rd(dir);
	size_t i = 0;

	/* Queued once this node has an epoch, even while Redis is out of
	 * reach: they go out, in order, when it is back (a short outage loses
	 * no hint); the queue is bounded, and what overflows is dropped. */
	pthread_mutex_lock(&d->mu);
	if (d->self.epoch)
		for (; i < n && d->ring_n < d->ring_cap; i++) {
			struct wop *w = &d->ring[(d->ring_head + d->ring_n++) % d->ring_cap];

			w->key = keys[i];
			w->tier = tier;
		}
	d->st.dropped_keys += n - i;
	if (i)
		pthread_cond_signal(&d->wake);
	pthread_mutex_unlock(&d->mu);
}

static void rd_publish(struct kvt_dir *dir, const struct kvt_key *keys, size_t n, uint8_t tier)
{
	if (tier != KVT_TIER_DRAM && tier != KVT_TIER_SSD)
		return;
	push_ops(dir, keys, n, tier);
}

static void rd_forget(struct kvt_dir *dir, const struct kvt_key *keys, size_t n)
{
	push_ops(dir, keys, n, KVT_TIER_NONE);
}

static int rd_lookup(struct kvt_dir *dir, const struct kvt_key *keys, size_t n,
		     struct kvt_dir_holders *out)
{
	struct kvt_rdir *d = rd(dir);
	struct lookup_req *r;
	struct timespec ts;
	uint64_t deadline;
	int rc;

	if (n == 0)
		return 0;
	if (n > MAX_LOOKUP_KEYS)
		return -EINVAL;
	pthread_mutex_lock(&d->mu);
	d->st.lookups++;
	d->st.lookup_keys += n;
	if (!d->st.reachable) {
		d->st.lookups_unreachable++;
		pthread_mutex_unlock(&d->mu);
		return -ENOTCONN;
	}
	pthread_mutex_unlock(&d->mu);
	deadline = kvt_deadline_ms(d->o.lookup_timeout_ms + kvt_rdir_lookup_extra_ms(d, n));
	if (!atomic_load(&d->io_wanted) && pthread_mutex_trylock(&d->io_mu) == 0) {
		/* the thread sleeps: ask Redis here, without two wake-ups */
		if (d->conn && !d->scripts_lost) {
			struct lookup_req now = { .keys = (struct kvt_key *)keys, .n = n, .out = out };

			rc = kvt_rdir_lookup_now(d, &now, deadline);
			pthread_mutex_unlock(&d->io_mu);
			return rc;
		}
		pthread_mutex_unlock(&d->io_mu);
	}
	r = calloc(1, sizeof(*r));
	if (r) {
		r->keys = malloc(n * sizeof(*keys));
		r->out = malloc(n * sizeof(*out)); /* every entry's n is set by the thread */
	}
	if (!r || !r->keys || !r->out) {
		if (r) {
			free(r->keys);
			free(r->out);
		}
		free(r);
		return -ENOMEM;
	}
	memcpy(r->keys, keys, n * sizeof(*keys));
	r->n = n;
	r->refs = 2;
	ts.tv_sec = (time_t)(deadline / 1000000000ull);
	ts.tv_nsec = (long)(deadline % 1000000000ull);

	pthread_mutex_lock(&d->mu);
	if (d->lk_tail)
		d->lk_tail->next = r;
	else
		d->lk_head = r;
	d->lk_tail = r;
	pthread_cond_signal(&d->wake);
	while (!r->done)
		if (pthread_cond_timedwait(&d->done_cv, &d->mu, &ts) == ETIMEDOUT)
			break;
	if (r->done) {
		rc = r->result;
		if (rc >= 0)
			for (size_t i = 0; i < n; i++) { /* the holders there are, not all four */
				out[i].n = r->out[i].n;
				memcpy(out[i].h, r->out[i].h, r->out[i].n * sizeof(out[i].h[0]));
			}
	} else {
		/* still queued: take it out; taken by the thread: it frees it */
		struct lookup_req **p = &d->lk_head, *prev = NULL;

		while (*p && *p != r) {
			prev = *p;
			p = &(*p)->next;
		}
		if (*p) {
			*p = r->next;
			if (d->lk_tail == r)
				d->lk_tail = prev;
			r->refs--;
		}
		d->st.lookups_timed_out++;
		rc = -ETIMEDOUT;
	}
	kvt_rdir_req_put(r);
	pthread_mutex_unlock(&d->mu);
	return rc;
}

static int rd_members(struct kvt_dir *dir, struct kvt_node_info *out, size_t max)
{
	struct kvt_rdir *d = rd(dir);
	int n;

	pthread_mutex_lock(&d->mu);
	n = (int)d->n_members;
	if (out)
		memcpy(out, d->members, (d->n_members < max ? d->n_members : max) * sizeof(*out));
	pthread_mutex_unlock(&d->mu);
	return n;
}

static int rd_set_self(struct kvt_dir *dir, const struct kvt_node_info *self)
{
	struct kvt_rdir *d = rd(dir);

	if (kvt_node_info_check(self) || strcmp(self->id, d->o.self.id) != 0)
		return -EINVAL;
	pthread_mutex_lock(&d->mu);
	{
		uint64_t epoch = d->self.epoch;

		d->self = *self;
		d->self.epoch = epoch;
	}
	d->self_dirty = true;
	pthread_cond_signal(&d->wake);
	pthread_mutex_unlock(&d->mu);
	return 0;
}

static void rd_stats(struct kvt_dir *dir, struct kvt_dir_stats *out)
{
	struct kvt_rdir *d = rd(dir);

	pthread_mutex_lock(&d->mu);
	*out = d->st;
	out->queued_keys = d->ring_n;
	pthread_mutex_unlock(&d->mu);
}

static void rd_close(struct kvt_dir *dir)
{
	struct kvt_rdir *d = rd(dir);

	pthread_mutex_lock(&d->mu);
	d->stop = true;
	pthread_cond_signal(&d->wake);
	pthread_mutex_unlock(&d->mu);
	pthread_join(d->thread, NULL);
	pthread_cond_destroy(&d->wake);
	pthread_cond_destroy(&d->done_cv);
	pthread_mutex_destroy(&d->io_mu);
	pthread_mutex_destroy(&d->mu);
	free(d->members);
	free(d->ring);
	free(d->sent);
	free(d->sent_ns);
	free(d);
}

/* The URL with its password replaced, for logs. */
static void shown_url(const char *url, char *out, size_t len)
{
	const char *at = strchr(url, '@'), *scheme = strstr(url, "://");

	if (at && scheme && at > scheme)
		snprintf(out, len, "%.*s***%s", (int)(scheme + 3 - url), url, at);
	else
		snprintf(out, len, "%s", url);
}

static int rd_open(const struct kvt_dir_opts *o, struct kvt_dir **out);

const struct kvt_dir_ops kvt_dir_redis_ops = {
	.name = "redis",
	.open = rd_open,
	.publish = rd_publish,
	.forget = rd_forget,
	.lookup = rd_lookup,
	.members = rd_members,
	.set_self = rd_set_self,
	.stats = rd_stats,
	.close = rd_close,
};

static int rd_open(const struct kvt_dir_opts *o, struct kvt_dir **out)
{
	pthread_condattr_t ca;
	struct kvt_rdir *d;
	int err;

	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->base.ops = &kvt_dir_redis_ops;
	d->o = *o;
	d->o.url = NULL;
	d->o.key_prefix = NULL;
	err = kvt_redis_url_parse(o->url, &d->url);
	if (err || strlen(o->key_prefix) >= sizeof(d->prefix))
		goto fail_free;
	snprintf(d->prefix, sizeof(d->prefix), "%s", o->key_prefix);
	shown_url(o->url, d->url_shown, sizeof(d->url_shown));
	d->self = o->self;
	d->self.epoch = 0;
	d->ring_cap = o->max_queued_keys;
	d->ring = calloc(d->ring_cap, sizeof(*d->ring));
	/* writes to replay after a failover: only where a primary can change */
	d->sent_cap = d->url.n_sentinels && o->replay_ms ? o->max_queued_keys : 0;
	d->sent = d->sent_cap ? calloc(d->sent_cap, sizeof(*d->sent)) : NULL;
	d->sent_ns = d->sent_cap ? calloc(d->sent_cap, sizeof(*d->sent_ns)) : NULL;
	if (!d->ring || (d->sent_cap && (!d->sent || !d->sent_ns))) {
		err = -ENOMEM;
		goto fail_free;
	}
	pthread_mutex_init(&d->mu, NULL);
	pthread_mutex_init(&d->io_mu, NULL);
	atomic_init(&d->io_wanted, false);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&d->wake, &ca);
	pthread_cond_init(&d->done_cv, &ca);
	pthread_condattr_destroy(&ca);
	err = -pthread_create(&d->thread, NULL, dir_thread, d);
	if (err)
		goto fail_sync;
	*out = &d->base;
	return 0;
fail_sync:
	pthread_cond_destroy(&d->wake);
	pthread_cond_destroy(&d->done_cv);
	pthread_mutex_destroy(&d->io_mu);
	pthread_mutex_destroy(&d->mu);
fail_free:
	free(d->ring);
	free(d->sent);
	free(d->sent_ns);
	free(d);
	return err ? err : -EINVAL;
}
