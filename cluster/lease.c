/* SPDX-License-Identifier: Apache-2.0 */
/* Leases on blocks lent to remote readers (see lease.h). */
#include "cluster/lease.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "transport/sockio.h"
#include "util/block_sum.h"
#include "util/log.h"

struct lease {
	struct lease *next;
	uint64_t id, owner, deadline_ns;
	struct kvt_ns *ns;
	uint32_t n;              /* slots reserved against max_blocks */
	struct kvt_slot *slots;  /* data NULL: not acquired */
};

struct kvt_lease_table {
	struct kvt_lease_opts o;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t thread;
	bool stop;
	struct lease *head;
	uint64_t next_id, next_gen;
	struct kvt_lease_stats st;
};

void kvt_lease_opts_init(struct kvt_lease_opts *opts, size_t size_bytes)
{
	memset(opts, 0, size_bytes);
	opts->size = size_bytes;
	opts->max_blocks = 65536;
	opts->max_lease_ms = 10000;
}

#define llog(t, lvl, ...) kvt_log_to((t)->o.log, (t)->o.log_arg, lvl, __VA_ARGS__)

/* Release a lease's blocks and free it (lock not held). Returns how many
 * blocks it held. */
static int drop(struct lease *l)
{
	int held = 0;

	for (uint32_t i = 0; i < l->n; i++)
		if (l->slots[i].data) {
			kvt_release(l->ns, &l->slots[i]);
			held++;
		}
	free(l->slots);
	free(l);
	return held;
}

/* Unlink the leases matching (id or owner, or expired by now) into a list. */
static struct lease *unlink_where(struct kvt_lease_table *t, uint64_t id, uint64_t owner,
				  uint64_t now, bool by_owner)
{
	struct lease **p = &t->head, *out = NULL, *l;

	while ((l = *p)) {
		bool hit = now ? l->deadline_ns <= now
			       : by_owner ? l->owner == owner : (l->id == id && l->owner == owner);

		if (!hit) {
			p = &l->next;
			continue;
		}
		*p = l->next;
		l->next = out;
		out = l;
		t->st.active--;
		t->st.blocks_held -= l->n;
	}
	return out;
}

static int drop_list(struct lease *l)
{
	int n = 0;

	while (l) {
		struct lease *next = l->next;

		n += drop(l);
		l = next;
	}
	return n;
}

static void *reaper(void *arg)
{
	struct kvt_lease_table *t = arg;

	pthread_mutex_lock(&t->mu);
	while (!t->stop) {
		uint64_t now = kvt_now_ns(), next = now + 1000000000ull;
		struct lease *gone;
		struct timespec ts;
		uint64_t n = 0;

		gone = unlink_where(t, 0, 0, now, false);
		for (struct lease *l = gone; l; l = l->next)
			n++;
		t->st.expired += n;
		if (gone) {
			pthread_mutex_unlock(&t->mu);
			drop_list(gone);
			llog(t, KVT_LOG_DEBUG, "event=lease.expired leases=%" PRIu64, n);
			pthread_mutex_lock(&t->mu);
			continue;
		}
		for (struct lease *l = t->head; l; l = l->next)
			if (l->deadline_ns < next)
				next = l->deadline_ns;
		ts.tv_sec = (time_t)(next / 1000000000ull);
		ts.tv_nsec = (long)(next % 1000000000ull);
		pthread_cond_timedwait(&t->cv, &t->mu, &ts);
	}
	pthread_mutex_unlock(&t->mu);
	return NULL;
}

int kvt_lease_table_open(const struct kvt_lease_opts *o, struct kvt_lease_table **out)
{
	struct kvt_lease_table *t;
	pthread_condattr_t ca;
	int err;

	if (!o || !out || o->size != sizeof(*o) || !o->max_blocks || !o->max_lease_ms ||
	    o->max_lease_ms > 600000)
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->o = *o;
	t->next_id = 1;
	t->next_gen = 1;
	pthread_mutex_init(&t->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&t->cv, &ca);
	pthread_condattr_destroy(&ca);
	err = pthread_create(&t->thread, NULL, reaper, t);
	if (err) {
		pthread_cond_destroy(&t->cv);
		pthread_mutex_destroy(&t->mu);
		free(t);
		return -err;
	}
	*out = t;
	return 0;
}

int kvt_lease_grant(struct kvt_lease_table *t, struct kvt_ns *ns, const struct kvt_key *keys,
		    uint32_t n, uint32_t lease_ms, uint64_t owner, uint32_t *granted_ms,
		    struct kvt_lease_grant *out, uint64_t *lease_id)
{
	struct lease *l;
	uint64_t gen, id;

	if (!t || !ns || !keys || !out || !lease_id || n == 0 || lease_ms == 0)
		return -EINVAL;
	if (lease_ms > t->o.max_lease_ms)
		lease_ms = t->o.max_lease_ms;
	l = calloc(1, sizeof(*l));
	if (l)
		l->slots = calloc(n, sizeof(*l->slots));
	if (!l || !l->slots) {
		if (l)
			free(l->slots);
		free(l);
		return -ENOMEM;
	}
	/* room first, so that a burst of requests cannot pin the whole store */
	pthread_mutex_lock(&t->mu);
	if (t->st.blocks_held + n > t->o.max_blocks) {
		t->st.refused++;
		pthread_mutex_unlock(&t->mu);
		free(l->slots);
		free(l);
		return -ENOSPC;
	}
	t->st.blocks_held += n;
	t->st.active++;
	l->id = id = t->next_id++;
	gen = t->next_gen;
	t->next_gen += n;
	pthread_mutex_unlock(&t->mu);

	l->ns = ns;
	l->n = n;
	l->owner = owner;
	for (uint32_t i = 0; i < n; i++) {
		struct kvt_lease_grant *g = &out[i];

		memset(g, 0, sizeof(*g));
		g->key = keys[i];
		/* this node's blocks only: a lease is never passed on to a peer */
		g->status = kvt_acquire_local(ns, &keys[i], &l->slots[i]);
		if (g->status) {
			l->slots[i].data = NULL;
			continue;
		}
		g->data = l->slots[i].data;
		g->len = l->slots[i].len;
		g->generation = gen + i;
		if (kvt_slot_sum(ns, &l->slots[i], &g->xxh3))
			g->xxh3 = kvt_block_sum(g->data, g->len);
	}
	/* the lease runs from now: every block is held from here on */
	l->deadline_ns = kvt_deadline_ms(lease_ms);

	pthread_mutex_lock(&t->mu);
	l->next = t->head;
	t->head = l;
	t->st.granted++;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->mu);
	/* from here l belongs to the table: a short lease may be gone already */
	*lease_id = id;
	*granted_ms = lease_ms;
	return 0;
}

int kvt_lease_return(struct kvt_lease_table *t, uint64_t lease_id, uint64_t owner)
{
	struct lease *l;

	pthread_mutex_lock(&t->mu);
	l = unlink_where(t, lease_id, owner, 0, false);
	if (l)
		t->st.returned++;
	pthread_mutex_unlock(&t->mu);
	return l ? drop_list(l) : -ENOENT;
}

int kvt_lease_return_owner(struct kvt_lease_table *t, uint64_t owner)
{
	struct lease *l;
	int n = 0;

	pthread_mutex_lock(&t->mu);
	l = unlink_where(t, 0, owner, 0, true);
	for (struct lease *x = l; x; x = x->next)
		n++;
	t->st.returned += (uint64_t)n;
	pthread_mutex_unlock(&t->mu);
	drop_list(l);
	return n;
}

void kvt_lease_stats(struct kvt_lease_table *t, struct kvt_lease_stats *out)
{
	pthread_mutex_lock(&t->mu);
	*out = t->st;
	pthread_mutex_unlock(&t->mu);
}

void kvt_lease_table_close(struct kvt_lease_table *t)
{
	struct lease *all;

	if (!t)
		return;
	pthread_mutex_lock(&t->mu);
	t->stop = true;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->mu);
	pthread_join(t->thread, NULL);
	all = t->head;
	t->head = NULL;
	drop_list(all);
	pthread_cond_destroy(&t->cv);
	pthread_mutex_destroy(&t->mu);
	free(t);
}
