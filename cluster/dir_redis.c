/* The cluster directory on Redis (see directory.h).
 *
 * Keys, under the configured prefix P (default "kvt:"):
 *   P node:<id>   the node's record (JSON), PX member_ttl, renewed every third
 *   P members     a set of node ids; an id whose record is gone is removed by
 *                 whoever notices first
 *   P epoch       the epoch counter (INCR): each join takes the next value
 *   P blk:<hex>   the block's holders, "NODE=EPOCH:TIER,...", PX hint_ttl.
 *                 Keys are hex because raw bytes with '{' would pick Redis
 *                 Cluster hash slots; tenants stay apart because block keys
 *                 already digest their namespace's salt.
 *
 * A lookup reads every key of the prefix with one MGET, so Redis does one
 * command whatever the prefix's length. Writes change one holder of a list
 * atomically with a small Lua script per key (EVALSHA, pipelined), loaded
 * at each connect.
 *
 * One thread owns the connection and does all the I/O; callers only touch
 * queues and snapshots under the mutex. A lookup waits on a condition
 * variable until its own deadline; if the thread is stuck on a slow Redis
 * the caller still returns on time (-ETIMEDOUT), and the request is freed by
 * whichever side lets go of it last. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/dir_record.h"
#include "cluster/directory.h"
#include "cluster/redis_conn.h"

#define RECONNECT_MIN_MS 50
#define RECONNECT_MAX_MS 2000
#define MAX_LOOKUP_KEYS 65536u

struct wop {
	struct kvt_key key;
	uint8_t tier; /* KVT_TIER_NONE: forget */
};

struct lookup_req {
	struct lookup_req *next;
	struct kvt_key *keys;
	size_t n;
	struct kvt_dir_holders *out;
	int result;
	bool done;
	int refs; /* the caller's and the queue's/thread's; freed at 0 */
};

struct rdir {
	struct kvt_dir base;
	struct kvt_dir_opts o;
	struct kvt_redis_url url;
	char prefix[64];
	char url_shown[320]; /* the URL without its password, for logs */

	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t wake;    /* the thread waits here */
	pthread_cond_t done_cv; /* lookup callers wait here */
	bool stop;

	/* under mu */
	struct wop *ring;
	size_t ring_cap, ring_head, ring_n;
	struct lookup_req *lk_head, *lk_tail;
	struct kvt_node_info self; /* epoch = the current one */
	bool self_dirty;
	struct kvt_node_info *members; /* sorted by id */
	size_t n_members;
	struct kvt_dir_stats st;

	/* the thread's own */
	struct kvt_redis *conn;
	char sha_publish[41], sha_forget[41]; /* the scripts, loaded per connection */
	bool scripts_lost;        /* Redis forgot them: reconnect */
	uint64_t last_epoch; /* the highest epoch this node ever held */
	bool was_up;
};

static void dlog(struct rdir *d, enum kvt_log_level lvl, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void dlog(struct rdir *d, enum kvt_log_level lvl, const char *fmt, ...)
{
	char msg[768];
	va_list ap;

	if (!d->o.log)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	d->o.log(d->o.log_arg, lvl, msg);
}

static int mkkey(const struct rdir *d, char *buf, size_t len, const char *kind, const char *name)
{
	return snprintf(buf, len, "%s%s%s", d->prefix, kind, name);
}

/* ---- the thread's Redis exchanges ------------------------------------- */

static uint64_t io_deadline(const struct rdir *d)
{
	return kvt_deadline_ms(d->o.io_timeout_ms);
}


/* Append one command; the argument list is NULL-terminated. */
#define CMD(d, ...) cmdv((d), (const char *[]){ __VA_ARGS__, NULL })

static int cmdv(struct rdir *d, const char **argv)
{
	size_t lens[12];
	int n = 0;

	for (; argv[n]; n++)
		lens[n] = strlen(argv[n]);
	return kvt_redis_append(d->conn, n, argv, lens);
}

static int exec(struct rdir *d, redisReply **rep, size_t n)
{
	return kvt_redis_exec(d->conn, rep, n, io_deadline(d));
}

static bool is_ok(const redisReply *r)
{
	return r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
}

static void conn_lost(struct rdir *d, int err)
{
	char why[200];

	snprintf(why, sizeof(why), "%s", d->conn ? kvt_redis_errstr(d->conn) : strerror(-err));
	kvt_redis_close(d->conn);
	d->conn = NULL;
	pthread_mutex_lock(&d->mu);
	d->st.errors++;
	if (d->st.reachable)
		dlog(d, KVT_LOG_WARN, "event=cluster.redis_down url=%s err=\"%s\" effect=local-only",
		     d->url_shown, why);
	d->st.reachable = false;
	pthread_mutex_unlock(&d->mu);
}

static int cmp_member(const void *a, const void *b)
{
	return strcmp(((const struct kvt_node_info *)a)->id, ((const struct kvt_node_info *)b)->id);
}

/* A member of the current snapshot (the thread's to read without the lock:
 * only the thread replaces it). */
static const struct kvt_node_info *find_member(const struct rdir *d, const char *id)
{
	struct kvt_node_info k;

	snprintf(k.id, sizeof(k.id), "%s", id);
	return bsearch(&k, d->members, d->n_members, sizeof(*d->members), cmp_member);
}

/* Upsert this node's entry in a key's holder list (KEYS[1]; ARGV: node,
 * "EPOCH:TIER", ttl ms, most holders kept, the oldest going first). */
static const char publish_lua[] =
	"local me = ARGV[1] .. '='\n"
	"local cur = redis.call('GET', KEYS[1])\n"
	"local out = {}\n"
	"if cur then\n"
	"  for e in string.gmatch(cur, '[^,]+') do\n"
	"    if string.sub(e, 1, #me) ~= me then out[#out + 1] = e end\n"
	"  end\n"
	"end\n"
	"while #out >= tonumber(ARGV[4]) do table.remove(out, 1) end\n"
	"out[#out + 1] = me .. ARGV[2]\n"
	"redis.call('SET', KEYS[1], table.concat(out, ','), 'PX', ARGV[3])\n"
	"return #out\n";

/* Remove this node's entry (KEYS[1]; ARGV: node); the key goes with the
 * last holder. */
static const char forget_lua[] =
	"local me = ARGV[1] .. '='\n"
	"local cur = redis.call('GET', KEYS[1])\n"
	"if not cur then return 0 end\n"
	"local out = {}\n"
	"for e in string.gmatch(cur, '[^,]+') do\n"
	"  if string.sub(e, 1, #me) ~= me then out[#out + 1] = e end\n"
	"end\n"
	"if #out == 0 then redis.call('DEL', KEYS[1])\n"
	"else redis.call('SET', KEYS[1], table.concat(out, ','), 'KEEPTTL') end\n"
	"return #out\n";

/* SCRIPT LOAD both scripts on a new connection; their SHA1s name them. */
static int load_scripts(struct rdir *d)
{
	redisReply *rep[2];
	int err;

	if ((err = CMD(d, "SCRIPT", "LOAD", publish_lua)) ||
	    (err = CMD(d, "SCRIPT", "LOAD", forget_lua)) || (err = exec(d, rep, 2)))
		return err;
	for (int i = 0; i < 2 && !err; i++)
		if (rep[i]->type != REDIS_REPLY_STRING || rep[i]->len != 40)
			err = -EPROTO;
	if (!err) {
		memcpy(d->sha_publish, rep[0]->str, 41);
		memcpy(d->sha_forget, rep[1]->str, 41);
	}
	kvt_redis_free_replies(rep, 2);
	return err;
}

/* Take a new epoch and publish this node's record under it. */
static int join(struct rdir *d)
{
	char nkey[160], mkey[96], ekey[96], num[24], ttl[24], *json;
	struct kvt_node_info me;
	redisReply *rep[2];
	uint64_t e;
	int err;

	mkkey(d, ekey, sizeof(ekey), "epoch", "");
	if ((err = CMD(d, "INCR", ekey)) || (err = exec(d, rep, 1)))
		return err;
	err = rep[0]->type == REDIS_REPLY_INTEGER && rep[0]->integer > 0 ? 0 : -EPROTO;
	e = err ? 0 : (uint64_t)rep[0]->integer;
	kvt_redis_free_replies(rep, 1);
	if (err)
		return err;
	if (e <= d->last_epoch) {
		/* Redis lost its data (restarted without persistence): lift the
		 * counter above every epoch this node held, so a fencing token
		 * never goes back. */
		snprintf(num, sizeof(num), "%" PRIu64, d->last_epoch - e + 1);
		if ((err = CMD(d, "INCRBY", ekey, num)) || (err = exec(d, rep, 1)))
			return err;
		err = rep[0]->type == REDIS_REPLY_INTEGER &&
				      rep[0]->integer > (long long)d->last_epoch ? 0 : -EPROTO;
		e = err ? 0 : (uint64_t)rep[0]->integer;
		kvt_redis_free_replies(rep, 1);
		if (err)
			return err;
	}
	pthread_mutex_lock(&d->mu);
	me = d->self;
	pthread_mutex_unlock(&d->mu);
	me.epoch = e;
	json = kvt_node_record_encode(&me);
	if (!json)
		return -ENOMEM;
	mkkey(d, nkey, sizeof(nkey), "node:", me.id);
	mkkey(d, mkey, sizeof(mkey), "members", "");
	snprintf(ttl, sizeof(ttl), "%u", d->o.member_ttl_ms);
	err = CMD(d, "SET", nkey, json, "PX", ttl);
	if (!err)
		err = CMD(d, "SADD", mkey, me.id);
	free(json);
	if (err || (err = exec(d, rep, 2)))
		return err;
	err = is_ok(rep[0]) && rep[1]->type == REDIS_REPLY_INTEGER ? 0 : -EPROTO;
	kvt_redis_free_replies(rep, 2);
	if (err)
		return err;
	d->last_epoch = e;
	pthread_mutex_lock(&d->mu);
	d->self.epoch = e;
	d->st.epoch = e;
	d->st.joins++;
	d->self_dirty = false;
	pthread_mutex_unlock(&d->mu);
	dlog(d, KVT_LOG_INFO, "event=cluster.join node=%s epoch=%" PRIu64 " addr=%s", me.id, e, me.addr);
	if (d->o.rejoin_cb)
		d->o.rejoin_cb(d->o.rejoin_arg, e);
	return 0;
}

/* Renew this node's record (SET XX keeps the TTL from lapsing); a record
 * that is gone (expired while Redis was out of reach, or Redis restarted)
 * means a new join. */
static int renew(struct rdir *d)
{
	char nkey[160], ttl[24], *json;
	struct kvt_node_info me;
	redisReply *rep[1];
	int err;

	pthread_mutex_lock(&d->mu);
	me = d->self;
	pthread_mutex_unlock(&d->mu);
	if (me.epoch == 0)
		return join(d);
	json = kvt_node_record_encode(&me);
	if (!json)
		return -ENOMEM;
	mkkey(d, nkey, sizeof(nkey), "node:", me.id);
	snprintf(ttl, sizeof(ttl), "%u", d->o.member_ttl_ms);
	err = CMD(d, "SET", nkey, json, "PX", ttl, "XX");
	free(json);
	if (err || (err = exec(d, rep, 1)))
		return err;
	if (rep[0]->type == REDIS_REPLY_NIL) {
		kvt_redis_free_replies(rep, 1);
		dlog(d, KVT_LOG_WARN, "event=cluster.record_lost node=%s epoch=%" PRIu64
		     " effect=rejoin", me.id, me.epoch);
		return join(d);
	}
	err = is_ok(rep[0]) ? 0 : -EPROTO;
	kvt_redis_free_replies(rep, 1);
	if (!err) {
		pthread_mutex_lock(&d->mu);
		d->self_dirty = false;
		pthread_mutex_unlock(&d->mu);
	}
	return err;
}

/* Log who joined and who left between two sorted snapshots. */
static void log_changes(struct rdir *d, const struct kvt_node_info *old, size_t n_old,
			const struct kvt_node_info *cur, size_t n_cur)
{
	size_t i = 0, j = 0;
	int c;

	while (i < n_old || j < n_cur) {
		c = i == n_old ? 1 : j == n_cur ? -1 : strcmp(old[i].id, cur[j].id);
		if (c < 0) {
			dlog(d, KVT_LOG_INFO, "event=cluster.member_gone node=%s epoch=%" PRIu64,
			     old[i].id, old[i].epoch);
			i++;
		} else if (c > 0 || old[i].epoch != cur[j].epoch) {
			dlog(d, KVT_LOG_INFO, "event=cluster.member_up node=%s epoch=%" PRIu64 " addr=%s",
			     cur[j].id, cur[j].epoch, cur[j].addr);
			i += c == 0;
			j++;
		} else {
			i++;
			j++;
		}
	}
}

/* Read the member set and every member's record; drop from the set the ids
 * whose record expired. */
static int refresh_members(struct rdir *d)
{
	char mkey[96], key[160];
	redisReply *set = NULL, **rep = NULL;
	struct kvt_node_info *cur = NULL, *old;
	size_t n = 0, n_cur = 0, n_gone = 0;
	int err;

	mkkey(d, mkey, sizeof(mkey), "members", "");
	if ((err = CMD(d, "SMEMBERS", mkey)) || (err = exec(d, &set, 1)))
		return err;
	if (set->type != REDIS_REPLY_ARRAY) {
		err = -EPROTO;
		goto out;
	}
	n = set->elements;
	rep = calloc(n ? n : 1, sizeof(*rep));
	cur = calloc(n ? n : 1, sizeof(*cur));
	if (!rep || !cur) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		const redisReply *id = set->element[i];

		if (id->type != REDIS_REPLY_STRING || !kvt_node_id_valid(id->str)) {
			err = -EPROTO;
			goto out;
		}
		mkkey(d, key, sizeof(key), "node:", id->str);
		if ((err = CMD(d, "GET", key)))
			goto out;
	}
	if (n && (err = exec(d, rep, n)))
		goto out;
	for (size_t i = 0; i < n; i++) {
		const char *id = set->element[i]->str;

		if (rep[i]->type == REDIS_REPLY_NIL) {
			mkkey(d, key, sizeof(key), "members", "");
			if ((err = CMD(d, "SREM", key, id)))
				goto out;
			n_gone++;
		} else if (rep[i]->type != REDIS_REPLY_STRING ||
			   kvt_node_record_decode(rep[i]->str, rep[i]->len, &cur[n_cur]) ||
			   strcmp(cur[n_cur].id, id) != 0) {
			dlog(d, KVT_LOG_WARN, "event=cluster.bad_record node=%s effect=ignored", id);
		} else {
			n_cur++;
		}
	}
	kvt_redis_free_replies(rep, n);
	if (n_gone && (err = exec(d, rep, n_gone)))
		goto out;
	kvt_redis_free_replies(rep, n_gone);
	qsort(cur, n_cur, sizeof(*cur), cmp_member);
	log_changes(d, d->members, d->n_members, cur, n_cur);
	pthread_mutex_lock(&d->mu);
	old = d->members;
	d->members = cur;
	d->n_members = n_cur;
	d->st.members = (uint32_t)n_cur;
	pthread_mutex_unlock(&d->mu);
	cur = old; /* freed below */
	err = 0;
out:
	if (rep)
		kvt_redis_free_replies(rep, n);
	free(rep);
	free(cur);
	if (set)
		freeReplyObject(set);
	return err;
}

/* ---- lookups ----------------------------------------------------------- */

static void req_put(struct lookup_req *r)
{
	if (--r->refs > 0)
		return;
	free(r->keys);
	free(r->out);
	free(r);
}

/* Holders of one key from its hint list: live members at the same epoch,
 * other than this node, DRAM first. A value that does not parse is stale. */
static uint32_t holders_of(struct rdir *d, const redisReply *v, const char *self,
			   struct kvt_dir_holders *out, uint64_t *stale)
{
	struct kvt_hint_holder hl[KVT_HINT_MAX_HOLDERS];
	int n;

	out->n = 0;
	if (v->type != REDIS_REPLY_STRING)
		return 0; /* nil: nobody holds it */
	n = kvt_hint_list_decode(v->str, v->len, hl, KVT_HINT_MAX_HOLDERS);
	if (n < 0) {
		(*stale)++;
		return 0;
	}
	for (int i = 0; i < n; i++) {
		const struct kvt_node_info *m;
		struct kvt_dir_holder *x;
		char id[KVT_NODE_ID_MAX + 1];
		uint64_t epoch = hl[i].epoch;
		uint8_t tier = hl[i].tier;

		memcpy(id, hl[i].node, hl[i].node_len);
		id[hl[i].node_len] = '\0';
		if (strcmp(id, self) == 0)
			continue;
		m = find_member(d, id);
		if (!m || m->epoch != epoch) {
			(*stale)++;
			continue;
		}
		if (out->n == KVT_DIR_MAX_HOLDERS) {
			/* full: an SSD holder gives way to a DRAM one */
			uint32_t j = 0;

			while (j < out->n && !(tier < out->h[j].tier))
				j++;
			if (j == out->n)
				continue;
			out->h[j] = out->h[out->n - 1];
			out->n--;
		}
		x = &out->h[out->n++];
		snprintf(x->node, sizeof(x->node), "%s", m->id);
		snprintf(x->addr, sizeof(x->addr), "%s", m->addr);
		x->epoch = epoch;
		x->tier = tier;
	}
	/* DRAM holders first (a stable insertion sort of at most four) */
	for (uint32_t i = 1; i < out->n; i++)
		for (uint32_t j = i; j > 0 && out->h[j].tier < out->h[j - 1].tier; j--) {
			struct kvt_dir_holder t = out->h[j];
			out->h[j] = out->h[j - 1];
			out->h[j - 1] = t;
		}
	return out->n;
}

static void finish_lookups(struct rdir *d, struct lookup_req *list, int err, uint64_t stale)
{
	pthread_mutex_lock(&d->mu);
	d->st.stale_hints += stale;
	while (list) {
		struct lookup_req *next = list->next;

		if (err)
			list->result = err;
		else
			d->st.lookup_hit_keys += (uint64_t)list->result;
		list->done = true;
		req_put(list);
		list = next;
	}
	pthread_cond_broadcast(&d->done_cv);
	pthread_mutex_unlock(&d->mu);
}

/* Append MGET of a request's keys. */
static int append_mget(struct rdir *d, const struct lookup_req *r)
{
	size_t plen = strlen(d->prefix) + 4, klen = plen + 32;
	const char **argv = malloc((r->n + 1) * sizeof(*argv));
	size_t *lens = malloc((r->n + 1) * sizeof(*lens));
	char *names = malloc(r->n * (klen + 1));
	int err = -ENOMEM;

	if (argv && lens && names) {
		argv[0] = "MGET";
		lens[0] = 4;
		for (size_t i = 0; i < r->n; i++) {
			char *k = names + i * (klen + 1);

			memcpy(k, d->prefix, plen - 4);
			memcpy(k + plen - 4, "blk:", 4);
			kvt_key_hex(&r->keys[i], k + plen);
			argv[i + 1] = k;
			lens[i + 1] = klen;
		}
		err = kvt_redis_append(d->conn, (int)r->n + 1, argv, lens);
	}
	free(argv);
	free(lens);
	free(names);
	return err;
}

/* Answer every queued lookup (up to MAX_LOOKUP_KEYS keys): one MGET each,
 * pipelined. */
static void do_lookups(struct rdir *d)
{
	struct lookup_req *list, *r, *last = NULL;
	redisReply **rep = NULL;
	char self[KVT_NODE_ID_MAX + 1];
	uint64_t stale = 0;
	size_t total = 0, n_req = 0, k = 0;
	int err = 0;

	pthread_mutex_lock(&d->mu);
	list = d->lk_head;
	for (r = list; r && total + r->n <= MAX_LOOKUP_KEYS; r = r->next) {
		total += r->n;
		n_req++;
		last = r;
	}
	if (!last) { /* cannot happen: a request has at most MAX_LOOKUP_KEYS */
		pthread_mutex_unlock(&d->mu);
		return;
	}
	d->lk_head = last->next;
	if (!d->lk_head)
		d->lk_tail = NULL;
	last->next = NULL;
	snprintf(self, sizeof(self), "%s", d->self.id);
	pthread_mutex_unlock(&d->mu);

	rep = calloc(n_req, sizeof(*rep));
	if (!rep) {
		finish_lookups(d, list, -ENOMEM, 0);
		return;
	}
	for (r = list; r && !err; r = r->next)
		err = append_mget(d, r);
	if (!err)
		err = exec(d, rep, n_req);
	if (err) {
		free(rep);
		conn_lost(d, err);
		finish_lookups(d, list, err == -ETIMEDOUT ? -ETIMEDOUT : -ENOTCONN, 0);
		return;
	}
	for (r = list; r; r = r->next, k++) {
		bool prefix = true;

		r->result = 0;
		if (rep[k]->type != REDIS_REPLY_ARRAY || rep[k]->elements != r->n) {
			r->result = -EPROTO;
			continue;
		}
		for (size_t i = 0; i < r->n; i++) {
			uint32_t h = holders_of(d, rep[k]->element[i], self, &r->out[i], &stale);

			if (prefix && h)
				r->result++;
			else
				prefix = false;
		}
	}
	kvt_redis_free_replies(rep, n_req);
	free(rep);
	finish_lookups(d, list, 0, stale);
}

/* ---- hint writes ------------------------------------------------------- */

static void do_writes(struct rdir *d)
{
	char key[160], hex[33], val[KVT_HINT_VALUE_MAX], ttl[24], self[KVT_NODE_ID_MAX + 1];
	char most[8];
	struct wop *ops;
	redisReply **rep = NULL;
	size_t n, n_cmds = 0, pub = 0;
	uint64_t epoch;
	int err = 0;

	pthread_mutex_lock(&d->mu);
	n = d->ring_n < d->o.batch_keys ? d->ring_n : d->o.batch_keys;
	ops = malloc(n * sizeof(*ops));
	if (!ops) {
		pthread_mutex_unlock(&d->mu);
		return;
	}
	for (size_t i = 0; i < n; i++)
		ops[i] = d->ring[(d->ring_head + i) % d->ring_cap];
	d->ring_head = (d->ring_head + n) % d->ring_cap;
	d->ring_n -= n;
	epoch = d->self.epoch;
	snprintf(self, sizeof(self), "%s", d->self.id);
	pthread_mutex_unlock(&d->mu);

	snprintf(ttl, sizeof(ttl), "%u", d->o.hint_ttl_ms);
	snprintf(most, sizeof(most), "%d", KVT_HINT_MAX_HOLDERS);
	rep = calloc(n ? n : 1, sizeof(*rep));
	if (!rep || epoch == 0) {
		err = -ENOMEM;
		goto drop;
	}
	for (size_t i = 0; i < n && !err; i++) {
		kvt_key_hex(&ops[i].key, hex);
		mkkey(d, key, sizeof(key), "blk:", hex);
		if (ops[i].tier == KVT_TIER_NONE) {
			err = CMD(d, "EVALSHA", d->sha_forget, "1", key, self);
			n_cmds++;
			continue;
		}
		kvt_hint_value_encode(epoch, ops[i].tier, val, sizeof(val));
		err = CMD(d, "EVALSHA", d->sha_publish, "1", key, self, val, ttl, most);
		n_cmds++;
		pub++;
	}
	if (!err)
		err = exec(d, rep, n_cmds);
	if (err && err != -ENOMEM) {
		/* the connection went: the batch goes back to the head of the
		 * queue, in order, for when it returns */
		conn_lost(d, err);
		pthread_mutex_lock(&d->mu);
		if (d->ring_n + n <= d->ring_cap) {
			d->ring_head = (d->ring_head + d->ring_cap - n % d->ring_cap) % d->ring_cap;
			for (size_t i = 0; i < n; i++)
				d->ring[(d->ring_head + i) % d->ring_cap] = ops[i];
			d->ring_n += n;
			n = 0;
		}
		pthread_mutex_unlock(&d->mu);
		goto drop;
	}
	if (err)
		goto drop;
	pthread_mutex_lock(&d->mu);
	for (size_t i = 0; i < n_cmds; i++)
		if (rep[i]->type == REDIS_REPLY_ERROR) {
			/* NOSCRIPT after a SCRIPT FLUSH: the next connection reloads */
			if (!strncmp(rep[i]->str, "NOSCRIPT", 8))
				d->scripts_lost = true;
			d->st.errors++;
		}
	d->st.published_keys += pub;
	d->st.forgotten_keys += n - pub;
	pthread_mutex_unlock(&d->mu);
	kvt_redis_free_replies(rep, n_cmds);
	free(rep);
	free(ops);
	return;
drop:
	pthread_mutex_lock(&d->mu);
	d->st.dropped_keys += n;
	pthread_mutex_unlock(&d->mu);
	free(rep);
	free(ops);
}

/* ---- the thread -------------------------------------------------------- */

/* Fail the lookups queued while Redis is out of reach, at once; with
 * `writes`, drop the queued hint writes too (counted), as when closing.
 * Otherwise the writes wait, in order, for the connection to come back:
 * the queue is bounded, and what overflows it is dropped and counted. */
static void flush_queues(struct rdir *d, bool writes)
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
		finish_lookups(d, list, -ENOTCONN, 0);
}

/* Wait on the wake condition until deadline_ns or a signal; false once the
 * directory is closing. */
static bool sleep_until(struct rdir *d, uint64_t deadline_ns, bool idle_only)
{
	struct timespec ts = { .tv_sec = (time_t)(deadline_ns / 1000000000ull),
			       .tv_nsec = (long)(deadline_ns % 1000000000ull) };
	bool stop;

	pthread_mutex_lock(&d->mu);
	while (!d->stop && (!idle_only || (!d->lk_head && !d->ring_n && !d->self_dirty)) &&
	       kvt_clock_ns() < deadline_ns)
		if (pthread_cond_timedwait(&d->wake, &d->mu, &ts) == ETIMEDOUT)
			break;
	stop = d->stop;
	pthread_mutex_unlock(&d->mu);
	return !stop;
}

static void leave(struct rdir *d)
{
	char nkey[160], mkey[96];
	redisReply *rep[2];

	mkkey(d, nkey, sizeof(nkey), "node:", d->self.id);
	mkkey(d, mkey, sizeof(mkey), "members", "");
	if (!CMD(d, "DEL", nkey) && !CMD(d, "SREM", mkey, d->self.id) && !exec(d, rep, 2))
		kvt_redis_free_replies(rep, 2);
}

static void *dir_thread(void *arg)
{
	struct rdir *d = arg;
	unsigned backoff = RECONNECT_MIN_MS;
	uint64_t next_renew = 0, next_connect = 0;
	bool logged_unreachable = false;
	char why[200];
	int err;

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
			if (kvt_clock_ns() < next_connect && !sleep_until(d, next_connect, false))
				break;
			next_connect = kvt_deadline_ms(backoff);
			backoff = backoff * 2 > RECONNECT_MAX_MS ? RECONNECT_MAX_MS : backoff * 2;
			err = kvt_redis_connect(&d->url, io_deadline(d), &d->conn, why, sizeof(why));
			if (err) {
				pthread_mutex_lock(&d->mu);
				d->st.errors++;
				pthread_mutex_unlock(&d->mu);
				if (!d->was_up && !logged_unreachable)
					dlog(d, KVT_LOG_WARN, "event=cluster.redis_unreachable url=%s "
					     "err=\"%s\" effect=local-only", d->url_shown, why);
				logged_unreachable = true;
				flush_queues(d, false);
				continue;
			}
			err = load_scripts(d);
			if (err) {
				conn_lost(d, err);
				continue;
			}
			next_renew = 0;
		}
		if (d->scripts_lost) {
			d->scripts_lost = false;
			conn_lost(d, -ENOENT);
			continue;
		}
		if (kvt_clock_ns() >= next_renew || dirty) {
			err = renew(d);
			if (!err)
				err = refresh_members(d);
			if (err) {
				conn_lost(d, err);
				continue;
			}
			next_renew = kvt_deadline_ms(d->o.member_ttl_ms / 3);
			backoff = RECONNECT_MIN_MS; /* this connection works */
			pthread_mutex_lock(&d->mu);
			if (!d->st.reachable) {
				if (d->was_up)
					d->st.reconnects++;
				dlog(d, KVT_LOG_INFO, "event=cluster.redis_up url=%s epoch=%" PRIu64
				     " members=%u", d->url_shown, d->st.epoch, d->st.members);
			}
			d->st.reachable = true;
			d->was_up = true;
			logged_unreachable = false;
			pthread_mutex_unlock(&d->mu);
			continue;
		}
		if (lookups) {
			do_lookups(d);
			continue;
		}
		if (writes) {
			do_writes(d);
			continue;
		}
		if (!sleep_until(d, next_renew, true))
			break;
	}
	if (d->conn)
		leave(d);
	kvt_redis_close(d->conn);
	d->conn = NULL;
	flush_queues(d, true);
	return NULL;
}

/* ---- the ops ----------------------------------------------------------- */

static struct rdir *rd(struct kvt_dir *d)
{
	return (struct rdir *)d;
}

static void push_ops(struct kvt_dir *dir, const struct kvt_key *keys, size_t n, uint8_t tier)
{
	struct rdir *d = rd(dir);
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
	struct rdir *d = rd(dir);
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
	r = calloc(1, sizeof(*r));
	if (r) {
		r->keys = malloc(n * sizeof(*keys));
		r->out = calloc(n, sizeof(*out));
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
	deadline = kvt_deadline_ms(d->o.lookup_timeout_ms);
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
			memcpy(out, r->out, n * sizeof(*out));
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
	req_put(r);
	pthread_mutex_unlock(&d->mu);
	return rc;
}

static int rd_members(struct kvt_dir *dir, struct kvt_node_info *out, size_t max)
{
	struct rdir *d = rd(dir);
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
	struct rdir *d = rd(dir);

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
	struct rdir *d = rd(dir);

	pthread_mutex_lock(&d->mu);
	*out = d->st;
	pthread_mutex_unlock(&d->mu);
}

static void rd_close(struct kvt_dir *dir)
{
	struct rdir *d = rd(dir);

	pthread_mutex_lock(&d->mu);
	d->stop = true;
	pthread_cond_signal(&d->wake);
	pthread_mutex_unlock(&d->mu);
	pthread_join(d->thread, NULL);
	pthread_cond_destroy(&d->wake);
	pthread_cond_destroy(&d->done_cv);
	pthread_mutex_destroy(&d->mu);
	free(d->members);
	free(d->ring);
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
	struct rdir *d;
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
	if (!d->ring) {
		err = -ENOMEM;
		goto fail_free;
	}
	pthread_mutex_init(&d->mu, NULL);
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
	pthread_mutex_destroy(&d->mu);
fail_free:
	free(d->ring);
	free(d);
	return err ? err : -EINVAL;
}
