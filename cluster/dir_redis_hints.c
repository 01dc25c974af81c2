/* SPDX-License-Identifier: Apache-2.0 */
/* The Redis directory's block hints: lookups of a prefix with one MGET, and
 * holder-list updates by two Lua scripts (see dir_redis.h). Everything here
 * runs on the directory's thread. */
#include "cluster/dir_redis.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/dir_record.h"

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
int kvt_rdir_load_scripts(struct kvt_rdir *d)
{
	redisReply *rep[2];
	int err;

	if ((err = CMD(d, "SCRIPT", "LOAD", publish_lua)) ||
	    (err = CMD(d, "SCRIPT", "LOAD", forget_lua)) || (err = kvt_rdir_exec(d, rep, 2)))
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

void kvt_rdir_req_put(struct lookup_req *r)
{
	if (--r->refs > 0)
		return;
	free(r->keys);
	free(r->out);
	free(r);
}

/* Holders of one key from its hint list: live members at the same epoch,
 * other than this node, DRAM first. A value that does not parse is stale. */
static uint32_t holders_of(struct kvt_rdir *d, const redisReply *v, const char *self,
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
		m = kvt_rdir_member(d, id);
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

void kvt_rdir_finish_lookups(struct kvt_rdir *d, struct lookup_req *list, int err, uint64_t stale)
{
	pthread_mutex_lock(&d->mu);
	d->st.stale_hints += stale;
	while (list) {
		struct lookup_req *next = list->next;

		if (err)
			list->result = err;
		else if (list->result > 0) /* not a failed request's -errno */
			d->st.lookup_hit_keys += (uint64_t)list->result;
		list->done = true;
		kvt_rdir_req_put(list);
		list = next;
	}
	pthread_cond_broadcast(&d->done_cv);
	pthread_mutex_unlock(&d->mu);
}

/* Append a request's MGETs: one per lookup_batch_keys keys. */
static int append_mget(struct kvt_rdir *d, const struct lookup_req *r)
{
	size_t plen = strlen(d->prefix) + 4, klen = plen + 32, batch = d->o.lookup_batch_keys;
	size_t most = r->n < batch ? r->n : batch;
	const char **argv = malloc((most + 1) * sizeof(*argv));
	size_t *lens = malloc((most + 1) * sizeof(*lens));
	char *names = malloc(most * (klen + 1));
	int err = argv && lens && names ? 0 : -ENOMEM;

	/* hiredis copies each command into its output buffer: one set of
	 * names serves every batch */
	for (size_t from = 0; from < r->n && !err; from += batch) {
		size_t m = r->n - from < batch ? r->n - from : batch;

		argv[0] = "MGET";
		lens[0] = 4;
		for (size_t i = 0; i < m; i++) {
			char *k = names + i * (klen + 1);

			memcpy(k, d->prefix, plen - 4);
			memcpy(k + plen - 4, "blk:", 4);
			kvt_key_hex(&r->keys[from + i], k + plen);
			argv[i + 1] = k;
			lens[i + 1] = klen;
		}
		err = kvt_redis_append(d->conn, (int)m + 1, argv, lens);
	}
	free(argv);
	free(lens);
	free(names);
	return err;
}

/* Request r's result and holders from its MGETs' replies rep[0..). The
 * prefix ends at the first key without a holder; the keys after it get
 * their holders too (a read by key may use them). */
static void take_replies(struct kvt_rdir *d, struct lookup_req *r, redisReply **rep,
			 const char *self, uint64_t *stale)
{
	size_t batch = d->o.lookup_batch_keys;
	bool prefix = true;

	r->result = 0;
	for (size_t from = 0, k = 0; from < r->n; from += batch, k++) {
		size_t m = r->n - from < batch ? r->n - from : batch;

		if (rep[k]->type != REDIS_REPLY_ARRAY || rep[k]->elements != m) {
			r->result = -EPROTO;
			return;
		}
		for (size_t i = 0; i < m; i++) {
			uint32_t h = holders_of(d, rep[k]->element[i], self, &r->out[from + i], stale);

			if (prefix && h)
				r->result++;
			else
				prefix = false;
		}
	}
}

/* The MGETs of every request of list, pipelined in one round trip and read
 * by deadline_ns; each request's result and holders set. 0, or a negative
 * errno after which the connection is not to be used again. */
static int answer(struct kvt_rdir *d, struct lookup_req *list, uint64_t deadline_ns,
		  uint64_t *stale)
{
	char self[KVT_NODE_ID_MAX + 1];
	struct lookup_req *r;
	redisReply **rep;
	size_t n_cmds = 0, k = 0;
	int err = 0;

	pthread_mutex_lock(&d->mu);
	memcpy(self, d->self.id, sizeof(self));
	pthread_mutex_unlock(&d->mu);
	for (r = list; r; r = r->next)
		n_cmds += kvt_rdir_mgets(d, r->n);
	rep = calloc(n_cmds, sizeof(*rep));
	if (!rep) { /* nothing sent: the connection stays good */
		for (r = list; r; r = r->next)
			r->result = -ENOMEM;
		return 0;
	}
	for (r = list; r && !err; r = r->next)
		err = append_mget(d, r);
	if (!err)
		err = kvt_redis_exec(d->conn, rep, n_cmds, deadline_ns);
	if (!err) {
		for (r = list; r; r = r->next) {
			take_replies(d, r, rep + k, self, stale);
			k += kvt_rdir_mgets(d, r->n);
		}
		kvt_redis_free_replies(rep, n_cmds);
	}
	free(rep);
	return err;
}

static void count_batch(struct kvt_rdir *d, uint64_t t0, uint64_t stale, uint64_t hits)
{
	pthread_mutex_lock(&d->mu);
	d->st.lookup_hit_keys += hits;
	d->st.lookup_batches++;
	d->st.lookup_batch_ns += kvt_now_ns() - t0;
	d->st.stale_hints += stale;
	pthread_mutex_unlock(&d->mu);
}

/* Answer the queued lookups (up to MAX_LOOKUP_KEYS keys in all): their
 * MGETs pipelined. */
void kvt_rdir_lookups(struct kvt_rdir *d)
{
	struct lookup_req *list, *r, *last = NULL;
	uint64_t stale = 0, t0 = kvt_now_ns();
	size_t total = 0;
	int err;

	pthread_mutex_lock(&d->mu);
	list = d->lk_head;
	for (r = list; r && total + r->n <= MAX_LOOKUP_KEYS; r = r->next) {
		total += r->n;
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
	pthread_mutex_unlock(&d->mu);

	err = answer(d, list, kvt_deadline_ms(d->o.io_timeout_ms +
					       kvt_rdir_lookup_extra_ms(d, total)), &stale);
	if (err) {
		kvt_rdir_conn_lost(d, err);
		kvt_rdir_finish_lookups(d, list, err == -ETIMEDOUT ? -ETIMEDOUT : -ENOTCONN, 0);
		return;
	}
	count_batch(d, t0, 0, 0);
	kvt_rdir_finish_lookups(d, list, 0, stale);
}

int kvt_rdir_lookup_now(struct kvt_rdir *d, struct lookup_req *r, uint64_t deadline_ns)
{
	uint64_t stale = 0, t0 = kvt_now_ns();
	int err = answer(d, r, deadline_ns, &stale);

	if (err) {
		kvt_rdir_conn_lost(d, err);
		pthread_mutex_lock(&d->mu);
		d->conn_dropped = true; /* the thread reconnects */
		if (err == -ETIMEDOUT)
			d->st.lookups_timed_out++;
		pthread_cond_signal(&d->wake);
		pthread_mutex_unlock(&d->mu);
		return err == -ETIMEDOUT ? -ETIMEDOUT : -ENOTCONN;
	}
	count_batch(d, t0, stale, r->result > 0 ? (uint64_t)r->result : 0);
	return r->result;
}

void kvt_rdir_writes(struct kvt_rdir *d)
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
		kvt_rdir_key(d, key, sizeof(key), "blk:", hex);
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
		err = kvt_rdir_exec(d, rep, n_cmds);
	if (err && err != -ENOMEM) {
		/* the connection went: the batch goes back to the head of the
		 * queue, in order, for when it returns */
		kvt_rdir_conn_lost(d, err);
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
	kvt_rdir_sent(d, ops, n);
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
