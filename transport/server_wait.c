/* SPDX-License-Identifier: Apache-2.0 */
/* The sidecar server's tickets and waits: a SAVE or LOAD is a ticket of its
 * connection until its result is taken; a WAIT that cannot be answered yet is
 * parked on its ticket (and on the timed list when it has a deadline) until
 * the workers' notes say the ticket, or the layer it waits for, is done. A
 * ticket asked with a PUSH flag gets DONE frames instead: as its layers land
 * and when it finishes, the last one taking its result. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transport/server_int.h"

struct kvt_job *kvt_ticket_find(struct kvt_conn *c, uint64_t ticket)
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

bool kvt_wait_satisfied(const struct kvt_job *job, uint32_t layer)
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
	kvt_conn_want_out(c);
}

/* A job was reaped and nothing waits on it any more: free it. */
static void job_maybe_free(struct kvt_job *job)
{
	if (job->reaped && job->finished && !job->waits)
		reap_job(job->conn, job);
}

void kvt_wait_answer(struct kvt_conn *c, uint16_t op, uint64_t id, struct kvt_job *job,
		     uint32_t layer)
{
	reply_wait(c, op, id, job, layer,
		   op == KVT_OP_WAIT && !kvt_wait_satisfied(job, layer) ? -ETIMEDOUT : 0);
	job_maybe_free(job);
}

int kvt_wait_park(struct kvt_conn *c, struct kvt_job *job, uint64_t id, uint32_t layer,
		  uint32_t timeout_ms)
{
	struct kvt_wait *p;

	if (c->n_waits >= KVT_CONN_MAX_WAITS)
		return -EBUSY;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->job = job;
	p->req_id = id;
	p->layer = layer;
	p->next = job->waits;
	job->waits = p;
	c->n_waits++;
	if (timeout_ms != KVT_WAIT_FOREVER) {
		p->deadline_ns = kvt_now_ns() + (uint64_t)timeout_ms * 1000000;
		p->tnext = c->srv->timed;
		if (p->tnext)
			p->tnext->tprev = p;
		c->srv->timed = p;
	}
	return KVT_REQ_PARKED; /* the latency is observed when it is answered */
}

/* Answer the WAITs parked on job that are now satisfied. */
static void serve_waits(struct kvt_server *srv, struct kvt_job *job)
{
	for (struct kvt_wait *w = job->waits, *next; w; w = next) {
		next = w->next;
		if (kvt_wait_satisfied(job, w->layer))
			answer_wait(srv, w, 0);
	}
	job_maybe_free(job);
}

/* Answer the timed waits past their deadline with -ETIMEDOUT. */
void kvt_waits_expire(struct kvt_server *srv, uint64_t now)
{
	for (struct kvt_wait *w = srv->timed, *next; w; w = next) {
		struct kvt_job *job = w->job;

		next = w->tnext;
		if (now < w->deadline_ns)
			continue;
		answer_wait(srv, w, kvt_wait_satisfied(job, w->layer) ? 0 : -ETIMEDOUT);
		job_maybe_free(job); /* frees job only when no wait is left on it */
	}
}

uint64_t kvt_waits_first_deadline(const struct kvt_server *srv)
{
	uint64_t first = 0;

	for (const struct kvt_wait *w = srv->timed; w; w = w->tnext)
		if (!first || w->deadline_ns < first)
			first = w->deadline_ns;
	return first;
}

/* Push a DONE frame for job when there is news: layers past the last
 * frame's, or the end (whose frame takes the result). */
static void push_done(struct kvt_server *srv, struct kvt_conn *c, struct kvt_job *job)
{
	int layers = __atomic_load_n(&job->layers_done, __ATOMIC_ACQUIRE);

	if (!job->finished && (!(job->push & KVT_XFER_PUSH_LAYERS) || layers <= job->layers_pushed))
		return;
	kvt_wr_begin(&c->out, KVT_OP_DONE | KVT_OP_REPLY, job->req_id, 0);
	kvt_wr_u32(&c->out, job->finished ? (uint32_t)job->result : 0);
	kvt_wr_u32(&c->out, (uint32_t)layers);
	kvt_wr_u32(&c->out, job->finished);
	if (kvt_wr_end(&c->out))
		return; /* out of memory: the ticket stays for a WAIT or POLL */
	job->layers_pushed = layers;
	if (job->finished)
		job->reaped = true;
	kvt_metrics_observe(srv, KVT_OP_DONE, 0, 0);
	kvt_conn_want_out(c);
}

/* Take the workers' notes and act on them. */
void kvt_notes_drain(struct kvt_server *srv)
{
	uint64_t v;

	if (read(srv->wake.fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		kvt_srv_log(srv, KVT_LOG_WARN, "event=wake.error err=\"%s\"", strerror(errno));
	for (;;) {
		struct kvt_job *job;
		bool final;
		struct kvt_conn *c;

		pthread_mutex_lock(&srv->nlock);
		job = srv->note_head;
		if (!job) {
			pthread_mutex_unlock(&srv->nlock);
			return;
		}
		srv->note_head = job->note_next;
		if (!srv->note_head)
			srv->note_tail = NULL;
		job->note_next = NULL;
		job->note_queued = false;
		final = job->note_final;
		pthread_mutex_unlock(&srv->nlock);

		c = job->conn;
		if (!final) {
			if (c->fd >= 0 && job->push)
				push_done(srv, c, job);
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
		if (c->fd >= 0 && job->push)
			push_done(srv, c, job);
		if (c->fd >= 0) {
			serve_waits(srv, job);
		} else {
			reap_job(c, job);
		}
		kvt_conn_unref(c); /* the job's hold on its connection */
	}
}

void kvt_tickets_close(struct kvt_conn *c)
{
	/* finished jobs go now; running ones when their final note arrives */
	for (struct kvt_job **pj = &c->jobs; *pj;) {
		struct kvt_job *j = *pj;

		while (j->waits)
			wait_drop(c->srv, j->waits);
		if (j->finished) {
			*pj = j->next;
			job_unlink_free(c, j);
		} else {
			pj = &j->next;
		}
	}
}
