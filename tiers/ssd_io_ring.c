/* SPDX-License-Identifier: Apache-2.0 */
/* The I/O engine's rings: made on demand and lent to one run at a time;
 * ops prepared on them (fixed files and buffers where registered),
 * completions taken, short transfers resumed, and a failing ring cancelled
 * and reaped before the run goes on on the thread pool. */
#include "tiers/ssd_io_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/clock.h"
#include "util/log.h"

bool kvt_io_transient(int rc)
{
	return rc == -EINTR || rc == -EAGAIN || rc == -EBUSY || rc == -ETIME;
}

/* Index of the registered iovec of ring r holding [p, p + len), -1 if none. */
static int buf_index(const struct kvt_io_ring *r, const void *p, size_t len)
{
	const char *c = p;

	if (!r->fixed_buffers)
		return -1;
	for (size_t i = 0; i < r->n_iov; i++) {
		const char *b = r->iov[i].iov_base;
		if (c >= b && c + len <= b + r->iov[i].iov_len)
			return (int)i;
	}
	return -1;
}

/* A new ring with the file table registered. Lock not held. Returns NULL
 * (and *err) when io_uring cannot be set up. */
struct kvt_io_ring *kvt_io_ring_make(struct kvt_ssd_io *io, int *err)
{
	struct kvt_io_ring *r = calloc(1, sizeof(*r));
	int *fds = NULL;
	int rc;

	if (!r) {
		*err = -ENOMEM;
		return NULL;
	}
	rc = io_uring_queue_init(io->opts.queue_depth * 2, &r->ring, 0);
	if (rc < 0) {
		free(r);
		*err = rc;
		return NULL;
	}
	fds = malloc(io->opts.max_files * sizeof(*fds));
	if (fds) {
		pthread_mutex_lock(&io->lock);
		memcpy(fds, io->fds, io->opts.max_files * sizeof(*fds));
		pthread_mutex_unlock(&io->lock);
		rc = io_uring_register_files(&r->ring, fds, io->opts.max_files);
		r->fixed_files = rc == 0;
		if (rc < 0)
			kvt_log(KVT_LOG_WARN, "event=ssd.io.files_unregistered err=\"%s\" "
				"action=\"plain fds\"", strerror(-rc));
		free(fds);
	}
	r->buf_gen = UINT64_MAX; /* buffers are given when a run takes it */
	return r;
}

void kvt_io_ring_free(struct kvt_io_ring *r)
{
	io_uring_queue_exit(&r->ring);
	free(r->iov);
	free(r);
}

/* A ring for a new run, or NULL when the engine is on the thread pool. Waits
 * when max_rings runs hold one. */
struct kvt_io_ring *kvt_io_ring_get(struct kvt_ssd_io *io)
{
	struct kvt_io_ring *r = NULL;
	bool waited = false;
	int err = 0;

	pthread_mutex_lock(&io->lock);
	for (;;) {
		if (!io->uring)
			break;
		for (r = io->rings; r && r->busy; r = r->next)
			;
		if (r)
			break;
		if (io->n_rings < io->opts.max_rings) {
			io->n_rings++;
			pthread_mutex_unlock(&io->lock);
			r = kvt_io_ring_make(io, &err);
			pthread_mutex_lock(&io->lock);
			if (!r) {
				io->n_rings--;
				pthread_cond_broadcast(&io->ring_cv);
				/* the first ring was made at open: this is a
				 * passing failure (memory); the run uses the
				 * pool's way, on this thread if need be */
				kvt_log(KVT_LOG_WARN, "event=ssd.io.ring_failed err=\"%s\" "
					"action=\"this run on the thread pool\"", strerror(-err));
				pthread_mutex_unlock(&io->lock);
				kvt_io_pool_start(io);
				return NULL;
			}
			r->next = io->rings;
			io->rings = r;
			io->stats.rings++;
			io->stats.fixed_files = r->fixed_files;
			break;
		}
		if (!waited)
			io->stats.runs_waited++;
		waited = true;
		pthread_cond_wait(&io->ring_cv, &io->lock);
	}
	if (r)
		r->busy = true;
	pthread_mutex_unlock(&io->lock);
	if (r && r->buf_gen != __atomic_load_n(&io->buf_gen, __ATOMIC_ACQUIRE))
		kvt_io_ring_sync_buffers(io, r);
	return r;
}

/* Give back a run's ring; one of a retired engine (now on the pool) goes. */
void kvt_io_ring_put(struct kvt_ssd_io *io, struct kvt_io_ring *r, bool broken)
{
	struct kvt_io_ring **p;

	pthread_mutex_lock(&io->lock);
	r->busy = false;
	if (broken || !io->uring) {
		for (p = &io->rings; *p != r; p = &(*p)->next)
			;
		*p = r->next;
		io->n_rings--;
	} else {
		r = NULL;
	}
	pthread_cond_broadcast(&io->ring_cv);
	pthread_mutex_unlock(&io->lock);
	if (r)
		kvt_io_ring_free(r);
}

static void prep(struct kvt_ssd_io *io, struct kvt_io_ring *r, struct io_uring_sqe *sqe,
		 struct kvt_ssd_io_op *op, size_t done)
{
	int fd = r->fixed_files ? (int)op->file : io->fds[op->file];
	uint64_t off = op->off + done;
	char *buf;
	size_t len;
	int bi;

	kvt_io_piece(op, done, &buf, &len);
	bi = op->kind == KVT_SSD_IO_SYNC || op->iov ? -1 : buf_index(r, buf, len);
	switch (op->kind) {
	case KVT_SSD_IO_READ:
		if (op->iov && !done)
			io_uring_prep_readv(sqe, fd, op->iov, op->iovcnt, off);
		else if (bi >= 0)
			io_uring_prep_read_fixed(sqe, fd, buf, (unsigned)len, off, bi);
		else
			io_uring_prep_read(sqe, fd, buf, (unsigned)len, off);
		break;
	case KVT_SSD_IO_WRITE:
		if (bi >= 0)
			io_uring_prep_write_fixed(sqe, fd, buf, (unsigned)len, off, bi);
		else
			io_uring_prep_write(sqe, fd, buf, (unsigned)len, off);
		break;
	case KVT_SSD_IO_SYNC:
		io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
		break;
	}
	if (bi >= 0)
		io->stats.fixed_ops++;
	if (r->fixed_files)
		sqe->flags |= IOSQE_FIXED_FILE;
}

/* Queue on the run's ring what the window allows, resumed ops first (lock
 * held). Ops that fail before issue complete at once. */
void kvt_io_uring_fill(struct kvt_ssd_io_run *run)
{
	struct kvt_ssd_io *io = run->io;
	struct io_uring *ring = &run->ring->ring;

	while (run->inflight < io->opts.queue_depth && (run->n_retry || run->next < run->n) &&
	       io_uring_sq_space_left(ring)) {
		bool fresh = !run->n_retry;
		size_t i = fresh ? run->next : run->retry[run->n_retry - 1];
		struct kvt_ssd_io_op *op = &run->ops[i];
		struct io_uring_sqe *sqe;

		if (fresh) {
			if (run->inflight &&
			    run->inflight_bytes + op->len > io->opts.max_inflight_bytes)
				break;
			int fault = kvt_io_take_fault(io, op);
			run->next++;
			if (fault || io->fds[op->file] < 0) {
				op->res = fault ? fault : -EBADF;
				kvt_io_account(io, op);
				kvt_io_complete(run, i);
				continue;
			}
			op->lat_ns = kvt_now_ns();
			run->inflight_bytes += op->len;
			run->issued_kinds |= 1u << op->kind;
		} else {
			run->n_retry--;
		}
		sqe = io_uring_get_sqe(ring);
		prep(io, run->ring, sqe, op, run->done[i]);
		io_uring_sqe_set_data64(sqe, i);
		run->state[i] = OP_INFLIGHT;
		run->inflight++;
	}
}

/* Take the completions that are there (lock held). */
void kvt_io_uring_take(struct kvt_ssd_io_run *run, bool broken)
{
	struct kvt_ssd_io *io = run->io;
	struct io_uring *ring = &run->ring->ring;
	struct io_uring_cqe *cqe;
	unsigned head, seen = 0;

	io_uring_for_each_cqe(ring, head, cqe) {
		uint64_t tag = io_uring_cqe_get_data64(cqe);
		int res = cqe->res;

		seen++;
		if (tag == KVT_IO_CANCEL_TAG)
			continue;
		size_t i = (size_t)tag;
		struct kvt_ssd_io_op *op = &run->ops[i];

		run->inflight--;
		if (res == -EAGAIN || res == -EINTR || (broken && res == -ECANCELED)) {
			run->state[i] = OP_RETRY;
			run->retry[run->n_retry++] = i;
			continue;
		}
		if (res > 0 && op->kind != KVT_SSD_IO_SYNC) {
			run->done[i] += (size_t)res;
			if (run->done[i] < op->len) {
				run->state[i] = OP_RETRY;
				run->retry[run->n_retry++] = i;
				continue;
			}
			res = 0;
		} else if (res == 0 && op->kind != KVT_SSD_IO_SYNC && op->len) {
			res = -EIO; /* end of file inside the op */
		}
		op->res = res < 0 ? res : 0;
		op->lat_ns = kvt_now_ns() - op->lat_ns;
		run->inflight_bytes -= op->len;
		kvt_io_account(io, op);
		kvt_io_complete(run, i);
	}
	io_uring_cq_advance(ring, seen);
}

/* Submit what is queued and wait for a completion. A transient submit
 * error returns before waiting (what it left queued may be all there is in
 * flight): the caller reaps and comes back. An injected ring fault is
 * returned after the submission, as a ring that breaks with ops in flight
 * would. */
int kvt_io_uring_submit_wait(struct kvt_ssd_io_run *run)
{
	struct io_uring *ring = &run->ring->ring;
	struct io_uring_cqe *cqe;
	int rc, fault;

	if (io_uring_sq_ready(ring)) {
		rc = io_uring_submit(ring);
		if (rc < 0)
			return rc;
	}
	kvt_io_run_hook(run);
	fault = kvt_io_take_ring_fault(run->io);
	if (fault)
		return fault;
	return io_uring_wait_cqe(ring, &cqe);
}

/* The run's ring failed with err while ops were in flight: cancel them and
 * reap until the kernel holds none of the caller's buffers (their memory may
 * be freed as soon as the run ends), then retire the ring and switch the
 * engine to the pool. Ops issued and not finished, then those never issued,
 * go to the pool. Lock not held. */
void kvt_io_uring_break(struct kvt_ssd_io_run *run, int err)
{
	struct kvt_ssd_io *io = run->io;
	struct io_uring *ring = &run->ring->ring;
	struct io_uring_sqe *sqe;
	bool cancel_queued = false, first;

	kvt_log(KVT_LOG_WARN, "event=ssd.io.uring_failed err=\"%s\" in_flight=%zu "
		"action=\"cancelling and reaping them, then a pread/pwrite thread pool for good\"",
		strerror(-err), run->inflight);
	if (run->inflight && (sqe = io_uring_get_sqe(ring))) {
		io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY | IORING_ASYNC_CANCEL_ALL);
		io_uring_sqe_set_data64(sqe, KVT_IO_CANCEL_TAG);
		cancel_queued = true;
	}
	while (run->inflight) {
		int rc = io_uring_submit_and_wait(ring, 1);

		if (rc < 0 && !kvt_io_transient(rc)) {
			/* completions still land in the CQ ring without the syscall;
			 * what the kernel never took from the SQ ring is not in flight */
			unsigned unconsumed = io_uring_sq_ready(ring);

			if (cancel_queued && unconsumed)
				unconsumed--;
			if (run->inflight <= unconsumed)
				break;
			nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
		}
		pthread_mutex_lock(&io->lock);
		kvt_io_uring_take(run, true);
		pthread_mutex_unlock(&io->lock);
	}

	pthread_mutex_lock(&io->lock);
	first = io->uring;
	io->uring = false;
	if (first) {
		io->stats.uring = false;
		io->stats.uring_error = err;
		io->stats.fixed_files = false;
		io->stats.fixed_buffers = false;
		io->stats.fallbacks++;
	}
	pthread_mutex_unlock(&io->lock);
	kvt_io_ring_put(io, run->ring, true);
	run->ring = NULL;
	if (kvt_io_pool_start(io))
		kvt_log(KVT_LOG_WARN, "event=ssd.io.no_threads action=\"the calling thread does the I/O\"");

	/* reissuing a read, write or sync is harmless: the issued ops without a
	 * result run again (their faults were taken), then the rest as new */
	pthread_mutex_lock(&io->lock);
	for (size_t i = 0; i < run->next; i++)
		if (run->state[i] != OP_DONE)
			kvt_io_pool_queue(run, i, false);
	run->n_retry = 0;
	run->inflight = run->inflight_bytes = 0;
	pthread_mutex_unlock(&io->lock);
}
