/* SPDX-License-Identifier: Apache-2.0 */
/* The Redis directory's membership: joining under an epoch, renewing the
 * record under its TTL, and the snapshot of live members (see dir_redis.h).
 * Everything here runs on the directory's thread. */
#include "cluster/dir_redis.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/dir_record.h"

static int cmp_member(const void *a, const void *b)
{
	return strcmp(((const struct kvt_node_info *)a)->id, ((const struct kvt_node_info *)b)->id);
}

/* A member of the current snapshot (the thread's to read without the lock:
 * only the thread replaces it). */
const struct kvt_node_info *kvt_rdir_member(const struct kvt_rdir *d, const char *id)
{
	struct kvt_node_info k;

	snprintf(k.id, sizeof(k.id), "%s", id);
	return bsearch(&k, d->members, d->n_members, sizeof(*d->members), cmp_member);
}

/* Take a new epoch and publish this node's record under it. */
static int join(struct kvt_rdir *d)
{
	char nkey[160], mkey[96], ekey[96], num[24], ttl[24], *json;
	struct kvt_node_info me;
	redisReply *rep[2];
	uint64_t e;
	int err;

	kvt_rdir_key(d, ekey, sizeof(ekey), "epoch", "");
	if ((err = CMD(d, "INCR", ekey)) || (err = kvt_rdir_exec(d, rep, 1)))
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
		if ((err = CMD(d, "INCRBY", ekey, num)) || (err = kvt_rdir_exec(d, rep, 1)))
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
	kvt_rdir_key(d, nkey, sizeof(nkey), "node:", me.id);
	kvt_rdir_key(d, mkey, sizeof(mkey), "members", "");
	snprintf(ttl, sizeof(ttl), "%u", d->o.member_ttl_ms);
	err = CMD(d, "SET", nkey, json, "PX", ttl);
	if (!err)
		err = CMD(d, "SADD", mkey, me.id);
	free(json);
	if (err || (err = kvt_rdir_exec(d, rep, 2)))
		return err;
	err = kvt_rdir_ok(rep[0]) && rep[1]->type == REDIS_REPLY_INTEGER ? 0 : -EPROTO;
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
	kvt_rdir_log(d, KVT_LOG_INFO, "event=cluster.join node=%s epoch=%" PRIu64 " addr=%s", me.id, e,
		     me.addr);
	if (d->o.rejoin_cb)
		d->o.rejoin_cb(d->o.rejoin_arg, e);
	return 0;
}

/* Renew this node's record (SET XX keeps the TTL from lapsing) and its
 * member-set entry; a record that is gone (expired while Redis was out of
 * reach, or Redis restarted) means a new join. The set entry is written
 * again each time because another node may have removed it: one that read
 * the set while this node was rejoining saw no record yet and removed the
 * id, just after this node added it. */
int kvt_rdir_renew(struct kvt_rdir *d)
{
	char nkey[160], mkey[96], ttl[24], *json;
	struct kvt_node_info me;
	redisReply *rep[2];
	int err;

	pthread_mutex_lock(&d->mu);
	me = d->self;
	pthread_mutex_unlock(&d->mu);
	if (me.epoch == 0)
		return join(d);
	json = kvt_node_record_encode(&me);
	if (!json)
		return -ENOMEM;
	kvt_rdir_key(d, nkey, sizeof(nkey), "node:", me.id);
	kvt_rdir_key(d, mkey, sizeof(mkey), "members", "");
	snprintf(ttl, sizeof(ttl), "%u", d->o.member_ttl_ms);
	err = CMD(d, "SET", nkey, json, "PX", ttl, "XX");
	if (!err)
		err = CMD(d, "SADD", mkey, me.id);
	free(json);
	if (err || (err = kvt_rdir_exec(d, rep, 2)))
		return err;
	if (rep[0]->type == REDIS_REPLY_NIL) {
		kvt_redis_free_replies(rep, 2);
		kvt_rdir_log(d, KVT_LOG_WARN, "event=cluster.record_lost node=%s epoch=%" PRIu64
			     " effect=rejoin", me.id, me.epoch);
		return join(d);
	}
	err = kvt_rdir_ok(rep[0]) && rep[1]->type == REDIS_REPLY_INTEGER ? 0 : -EPROTO;
	kvt_redis_free_replies(rep, 2);
	if (!err) {
		pthread_mutex_lock(&d->mu);
		d->self_dirty = false;
		pthread_mutex_unlock(&d->mu);
	}
	return err;
}

/* Log who joined and who left between two sorted snapshots. */
static void log_changes(struct kvt_rdir *d, const struct kvt_node_info *old, size_t n_old,
			const struct kvt_node_info *cur, size_t n_cur)
{
	size_t i = 0, j = 0;
	int c;

	while (i < n_old || j < n_cur) {
		c = i == n_old ? 1 : j == n_cur ? -1 : strcmp(old[i].id, cur[j].id);
		if (c < 0) {
			kvt_rdir_log(d, KVT_LOG_INFO, "event=cluster.member_gone node=%s epoch=%" PRIu64,
				     old[i].id, old[i].epoch);
			i++;
		} else if (c > 0 || old[i].epoch != cur[j].epoch) {
			kvt_rdir_log(d, KVT_LOG_INFO, "event=cluster.member_up node=%s epoch=%" PRIu64 " addr=%s",
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
int kvt_rdir_refresh_members(struct kvt_rdir *d)
{
	char mkey[96], key[160];
	redisReply *set = NULL, **rep = NULL;
	struct kvt_node_info *cur = NULL, *old;
	size_t n = 0, n_cur = 0, n_gone = 0;
	int err;

	kvt_rdir_key(d, mkey, sizeof(mkey), "members", "");
	if ((err = CMD(d, "SMEMBERS", mkey)) || (err = kvt_rdir_exec(d, &set, 1)))
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
		kvt_rdir_key(d, key, sizeof(key), "node:", id->str);
		if ((err = CMD(d, "GET", key)))
			goto out;
	}
	if (n && (err = kvt_rdir_exec(d, rep, n)))
		goto out;
	for (size_t i = 0; i < n; i++) {
		const char *id = set->element[i]->str;

		if (rep[i]->type == REDIS_REPLY_NIL) {
			kvt_rdir_key(d, key, sizeof(key), "members", "");
			if ((err = CMD(d, "SREM", key, id)))
				goto out;
			n_gone++;
		} else if (rep[i]->type != REDIS_REPLY_STRING ||
			   kvt_node_record_decode(rep[i]->str, rep[i]->len, &cur[n_cur]) ||
			   strcmp(cur[n_cur].id, id) != 0) {
			kvt_rdir_log(d, KVT_LOG_WARN, "event=cluster.bad_record node=%s effect=ignored", id);
		} else {
			n_cur++;
		}
	}
	kvt_redis_free_replies(rep, n);
	if (n_gone && (err = kvt_rdir_exec(d, rep, n_gone)))
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

void kvt_rdir_leave(struct kvt_rdir *d)
{
	char nkey[160], mkey[96];
	redisReply *rep[2];

	kvt_rdir_key(d, nkey, sizeof(nkey), "node:", d->self.id);
	kvt_rdir_key(d, mkey, sizeof(mkey), "members", "");
	if (!CMD(d, "DEL", nkey) && !CMD(d, "SREM", mkey, d->self.id) && !kvt_rdir_exec(d, rep, 2))
		kvt_redis_free_replies(rep, 2);
}
