/* SPDX-License-Identifier: Apache-2.0 */
/* The copy workers of the sidecar server: the job queue they take SAVEs
 * and LOADs from, their completion notes to the event loop, and the SAVE:
 * engine pages gathered into reserved DRAM slots, then committed. The
 * LOAD is server_load.c, the copies themselves server_copy.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transport/server_copy.h"

void kvt_job_free(struct kvt_job *job)
{
	if (!job)
		return;
	kvt_engine_mem_put(job->mem);
	free(job->keys);
	free(job->pages);
	free(job->tiers);
	free(job);
}

void kvt_job_release_arrays(struct kvt_job *job)
{
	free(job->keys);
	free(job->pages);
	free(job->tiers);
	job->keys = NULL;
	job->pages = NULL;
	job->tiers = NULL;
}

void kvt_jobs_notify(struct kvt_server *srv, struct kvt_job *job, bool final)
{
	uint64_t one = 1;
	bool wake = false;

	pthread_mutex_lock(&srv->nlock);
	if (final)
		job->note_final = true;
	/* already queued: the loop will see the latest state when it takes it */
	if (!job->note_queued) {
		job->note_queued = true;
		job->note_next = NULL;
		if (srv->note_tail) {
			srv->note_tail->note_next = job;
		} else {
			/* the loop drains the list whole: only an empty one needs a wake */
			srv->note_head = job;
			wake = true;
		}
		srv->note_tail = job;
	}
	pthread_mutex_unlock(&srv->nlock);
	if (wake && write(srv->wake.fd, &one, sizeof(one)) < 0) {
		/* the eventfd counter is saturated: the loop is awake anyway */
	}
}

/* ---- SAVE --------------------------------------------------------------- */

/* Gather a window of reserved slots and commit them (abort them all when
 * the copy fails). Returns 0 or the copy's error. */
static int save_window(struct worker *w, struct kvt_job *job, struct kvt_slot *slots,
		       void **blocks, const uint32_t *pages, uint32_t m)
{
	struct kvt_server *srv = w->srv;
	/* a store that keeps checksums gets each computed as its block is
	 * gathered on the host, not in a second pass over it at commit */
	bool summed = m && kvt_copy_of(job) == &kvt_direct_copy && kvt_ns_sums_blocks(job->ns);
	uint64_t sums[WINDOW];
	int err = 0;

	for (uint32_t k = 0; summed && k < m && !err; k++)
		err = kvt_engine_mem_gather_sum(job->mem, pages[k], blocks[k], &sums[k]);
	if (summed && err)
		kvt_job_engine_fault(srv, job, err, "SAVE failed");
	if (m && !summed)
		err = kvt_copy_of(job)->gather(w, job, pages, blocks, m);
	for (uint32_t k = 0; k < m; k++) {
		if (err) {
			kvt_abort(job->ns, &slots[k]);
			continue;
		}
		if ((summed ? kvt_commit_summed(job->ns, &slots[k], sums[k]) :
			      kvt_commit(job->ns, &slots[k])) == 0) {
			__atomic_add_fetch(&srv->c.save_blocks, 1, __ATOMIC_RELAXED);
			__atomic_add_fetch(&srv->c.gather_bytes, slots[k].len, __ATOMIC_RELAXED);
		}
	}
	return err;
}

/* Result: the number of leading keys stored after the SAVE (newly saved or
 * already present), or a negative errno when the first one fails. */
static int32_t run_save(struct worker *w, struct kvt_job *job)
{
	struct kvt_slot slots[WINDOW];
	void *blocks[WINDOW];
	uint32_t pages[WINDOW];
	uint32_t i = 0, m = 0, first = 0; /* first: key of slots[0] */
	int err = 0;

	while (i < job->n) {
		const struct kvt_key *parent = i ? &job->keys[i - 1] :
					       job->has_parent ? &job->parent : NULL;

		if (kvt_job_cancelled(job)) {
			err = -ECANCELED;
			break;
		}
		if (!m)
			first = i;
		err = kvt_reserve_class(job->ns, &job->keys[i], parent, job->reuse_class,
					&slots[m]);
		if (err == -EEXIST) {
			__atomic_add_fetch(&w->srv->c.save_present, 1, __ATOMIC_RELAXED);
			err = 0;
			i++;
			continue;
		}
		if (err == -ENOSPC && m) {
			/* the tier has no slot for now: let this window go, retry i */
			err = save_window(w, job, slots, blocks, pages, m);
			m = 0;
			if (err) {
				i = first;
				break;
			}
			continue;
		}
		if (err)
			break;
		blocks[m] = slots[m].data;
		pages[m++] = job->pages[i++];
		if (m == WINDOW) {
			err = save_window(w, job, slots, blocks, pages, m);
			m = 0;
			if (err) {
				i = first;
				break;
			}
		}
	}
	if (m) {
		int xerr = save_window(w, job, slots, blocks, pages, m);

		if (xerr) {
			i = first;
			err = xerr;
		}
	}
	__atomic_store_n(&job->layers_done, (int)job->mem->layers, __ATOMIC_RELEASE);
	if (i && w->srv->opts.hooks.saved_cb) /* the cluster's hints */
		w->srv->opts.hooks.saved_cb(w->srv->opts.hooks.arg, job->ns, job->keys, i);
	return i == 0 && err ? err : (int32_t)i;
}

/* Replace `from` by `to` in the list of running jobs (qlock held). */
static void running_set(struct kvt_server *srv, const struct kvt_job *from, struct kvt_job *to)
{
	for (unsigned i = 0; srv->running && i < srv->n_threads; i++)
		if (srv->running[i] == from) {
			srv->running[i] = to;
			return;
		}
}

/* Take the first queued job this worker may run (qlock held): a LOAD that
 * may wait on other nodes only while fewer than opts.peer_workers run such
 * LOADs, so a slow peer never holds every worker and SAVEs and local LOADs
 * queued behind peer LOADs go first. NULL when none may run now. */
static struct kvt_job *take_job(struct kvt_server *srv)
{
	struct kvt_job *prev = NULL, *job;

	for (job = srv->qhead; job; prev = job, job = job->qnext)
		if (!job->peer || srv->peer_running < srv->opts.peer_workers)
			break;
	if (!job)
		return NULL;
	if (prev)
		prev->qnext = job->qnext;
	else
		srv->qhead = job->qnext;
	if (srv->qtail == job)
		srv->qtail = prev;
	job->qnext = NULL;
	srv->peer_running += job->peer;
	return job;
}

static void *worker_main(void *arg)
{
	struct worker w = { .srv = arg };
	struct kvt_server *srv = w.srv;
	struct kvt_job *job;

	for (;;) {
		pthread_mutex_lock(&srv->qlock);
		/* a queue of peer LOADs none may take yet is not empty: a worker
		 * leaves only once every job was taken */
		while (!(job = take_job(srv)) && (srv->qhead || !srv->qstop))
			pthread_cond_wait(&srv->qcond, &srv->qlock);
		if (job)
			running_set(srv, NULL, job);
		pthread_mutex_unlock(&srv->qlock);
		if (!job)
			break;

		/* here, not at REGISTER: faulting pages in would hold up the loop */
		kvt_engine_mem_populate(job->mem, job->pages, job->n);
		job->result = job->op == KVT_OP_SAVE ? run_save(&w, job) : kvt_run_load(&w, job);
		/* off the list before the note: the loop may free the job then;
		 * a peer LOAD queued behind the bound may go now */
		pthread_mutex_lock(&srv->qlock);
		running_set(srv, job, NULL);
		if (job->peer) {
			srv->peer_running--;
			pthread_cond_broadcast(&srv->qcond);
		}
		pthread_mutex_unlock(&srv->qlock);
		kvt_jobs_notify(srv, job, true);
	}
	kvt_worker_fini(&w);
	return NULL;
}

void kvt_jobs_submit(struct kvt_server *srv, struct kvt_job *job)
{
	__atomic_add_fetch(&srv->busy_jobs, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&srv->qlock);
	job->qnext = NULL;
	if (srv->qtail)
		srv->qtail->qnext = job;
	else
		srv->qhead = job;
	srv->qtail = job;
	pthread_cond_signal(&srv->qcond);
	pthread_mutex_unlock(&srv->qlock);
}

int kvt_jobs_start(struct kvt_server *srv)
{
	unsigned n = srv->opts.workers ? srv->opts.workers : 4;

	srv->threads = calloc(n, sizeof(*srv->threads));
	srv->running = calloc(n, sizeof(*srv->running));
	if (!srv->threads || !srv->running) {
		free(srv->threads);
		free(srv->running);
		srv->threads = NULL;
		srv->running = NULL;
		return -ENOMEM;
	}
	for (; srv->n_threads < n; srv->n_threads++) {
		int err = pthread_create(&srv->threads[srv->n_threads], NULL, worker_main, srv);
		if (err) {
			kvt_jobs_stop(srv);
			return -err;
		}
	}
	return 0;
}

/* Workers finish the queue before they leave. */
void kvt_jobs_stop(struct kvt_server *srv)
{
	pthread_mutex_lock(&srv->qlock);
	srv->qstop = true;
	pthread_cond_broadcast(&srv->qcond);
	pthread_mutex_unlock(&srv->qlock);
	for (unsigned i = 0; i < srv->n_threads; i++)
		pthread_join(srv->threads[i], NULL);
	free(srv->threads);
	free(srv->running);
	srv->threads = NULL;
	srv->running = NULL;
	srv->n_threads = 0;
}

/* What kvt_jobs_log_stuck names of a job. */
struct stuck {
	bool running;
	uint16_t op;
	uint64_t ticket, conn, age_ms;
	uint32_t blocks;
	int pid, layers_done;
	unsigned uid;
};

#define STUCK_MAX 32 /* jobs named one by one; the rest are counted */

static void stuck_note(struct stuck *v, size_t *n, const struct kvt_job *job, bool running,
		       uint64_t now)
{
	if (*n == STUCK_MAX)
		return;
	v[(*n)++] = (struct stuck){
		.running = running, .op = job->op, .ticket = job->ticket, .conn = job->conn->id,
		.age_ms = (now - job->start_ns) / 1000000, .blocks = job->n, .pid = job->conn->pid,
		.layers_done = __atomic_load_n(&job->layers_done, __ATOMIC_ACQUIRE),
		.uid = (unsigned)job->conn->uid,
	};
}

void kvt_jobs_log_stuck(struct kvt_server *srv)
{
	struct stuck v[STUCK_MAX];
	uint64_t now = kvt_now_ns();
	unsigned running = 0, queued = 0;
	size_t n = 0;

	/* a job's connection outlives it (its reference), so the loop may read
	 * it; the list is copied under the lock and logged after */
	pthread_mutex_lock(&srv->qlock);
	for (unsigned i = 0; srv->running && i < srv->n_threads; i++)
		if (srv->running[i]) {
			running++;
			stuck_note(v, &n, srv->running[i], true, now);
		}
	for (const struct kvt_job *j = srv->qhead; j; j = j->qnext) {
		queued++;
		stuck_note(v, &n, j, false, now);
	}
	pthread_mutex_unlock(&srv->qlock);
	for (size_t k = 0; k < n; k++)
		kvt_srv_log(srv, KVT_LOG_ERROR, "event=server.stuck_job state=%s op=%s ticket=%llu "
			    "conn=%llu pid=%d uid=%u blocks=%u layers_done=%d age_ms=%llu",
			    v[k].running ? "running" : "queued", kvt_op_name(v[k].op),
			    (unsigned long long)v[k].ticket, (unsigned long long)v[k].conn, v[k].pid,
			    v[k].uid, v[k].blocks, v[k].layers_done, (unsigned long long)v[k].age_ms);
	kvt_srv_log(srv, KVT_LOG_ERROR, "event=server.stuck_jobs running=%u queued=%u named=%zu",
		    running, queued, n);
}
