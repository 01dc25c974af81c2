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
		pthread_mutex_unlock(&srv->qlock);
		if (!job)
			break;

		/* here, not at REGISTER: faulting pages in would hold up the loop */
		kvt_engine_mem_populate(job->mem, job->pages, job->n);
		job->result = job->op == KVT_OP_SAVE ? run_save(&w, job) : kvt_run_load(&w, job);
		if (job->peer) {
			/* a peer LOAD queued behind the bound may go now */
			pthread_mutex_lock(&srv->qlock);
			srv->peer_running--;
			pthread_cond_broadcast(&srv->qcond);
			pthread_mutex_unlock(&srv->qlock);
		}
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
	if (!srv->threads)
		return -ENOMEM;
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
	srv->threads = NULL;
	srv->n_threads = 0;
}
