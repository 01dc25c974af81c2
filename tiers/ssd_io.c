/* SPDX-License-Identifier: Apache-2.0 */
/* io_uring and thread-pool engines behind one interface of runs. */
#include "tiers/ssd_io.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>

#include "util/clock.h"
#include "util/opts.h"
#include "util/log.h"

/* io_uring refuses to register more than 1 GiB in one iovec. */
#define KVT_IO_BUF_CHUNK (1ULL << 30)

/* IORING_REGISTER_CLONE_BUFFERS (Linux 6.12): a ring takes another ring's
 * registered buffers without pinning the pages again, so every ring can have
 * the DRAM region for the cost of registering it once. Defined here because
 * liburing 2.3's headers predate it; where the kernel lacks it (-EINVAL),
 * each ring registers the buffers itself. */
#define KVT_IORING_REGISTER_CLONE_BUFFERS 30
struct kvt_io_clone_buffers {
	uint32_t src_fd, flags, src_off, dst_off, nr, pad[3];
};

struct kvt_io_region {
	char *ptr;
	size_t len;
};

#ifdef KVT_TESTING
struct kvt_io_fault {
	uint32_t skip, count;
	int err;
};
#endif

/* One io_uring and what is registered with it. A ring is taken by one run
 * at a time; runs on different rings proceed independently. */
struct kvt_io_ring {
	struct io_uring ring;
	struct kvt_io_ring *next;  /* io->rings */
	bool busy;                 /* taken by a run */
	bool fixed_files;
	bool fixed_buffers;
	uint64_t buf_gen;          /* io->buf_gen its buffers match */
	struct iovec *iov;         /* what is registered, for buffer indexes */
	size_t n_iov;
};

/* An op of a run waiting for, or taken by, a pool worker. */
struct kvt_io_item {
	struct kvt_ssd_io_run *run;
	size_t idx;
	bool faults;               /* take injected faults (not when rerun) */
	struct kvt_io_item *next;
};

enum kvt_io_state { OP_NEW, OP_INFLIGHT, OP_RETRY, OP_DONE };

struct kvt_ssd_io_run {
	struct kvt_ssd_io *io;
	struct kvt_ssd_io_op *ops;
	size_t n, cap;
	struct kvt_io_ring *ring;  /* NULL: on the thread pool */
	size_t *done;              /* bytes done per op (short transfers resume) */
	unsigned char *state;      /* enum kvt_io_state per op */
	size_t *retry, n_retry;    /* issued ops to issue again */
	struct kvt_io_item *items; /* per op, for the pool */
	size_t next;               /* ops [next, n) not issued yet */
	size_t inflight, inflight_bytes;
	size_t *ready;             /* completed, not reported yet: a FIFO of cap */
	size_t rhead, rcount;
	size_t reported;
	unsigned hooked;           /* kinds whose test hook ran */
	unsigned issued_kinds;     /* kinds issued so far */
	pthread_cond_t cv;         /* pool completions */
};

/* Lock order: the state lock is innermost; it is never held across a wait
 * for I/O, nor while buffers are pinned. */
struct kvt_ssd_io {
	struct kvt_ssd_io_opts opts;
	pthread_mutex_t lock;      /* guards everything below */
	int *fds;
#ifdef KVT_TESTING
	struct kvt_io_fault faults[3];
	int ring_fault;            /* injected: the next wait of a ring fails so */
#endif
	struct kvt_ssd_io_stats stats;

	/* the caller's regions, their iovecs (chunks of them), and a ring that
	 * only holds their registration, for the others to clone */
	struct kvt_io_region *regions;
	size_t n_regions;
	struct iovec *iov;
	size_t n_iov;
	uint64_t buf_gen;          /* bumped when the regions change */
	struct io_uring master;
	bool have_master, master_buffers, clone_works;
	uint64_t master_gen, refused_gen, logged_gen; /* UINT64_MAX: none */

	/* io_uring engine: rings made on demand, up to opts.max_rings */
	bool uring;
	struct kvt_io_ring *rings;
	uint32_t n_rings;          /* made, or being made */
	pthread_cond_t ring_cv;

	/* thread-pool engine: ops of every run in one FIFO */
	pthread_t *threads;
	uint32_t n_threads;
	bool pool_started;
	pthread_cond_t work_cv;
	struct kvt_io_item *qhead, *qtail;
	bool stop;
};

/* Test hooks and fault injection exist only in test builds (KVT_TESTING):
 * the library proper has none of them. */
#ifdef KVT_TESTING
static pthread_mutex_t hook_lock = PTHREAD_MUTEX_INITIALIZER;
static kvt_ssd_io_hook_cb hook_cb;
static void *hook_arg;

void kvt_ssd_io_set_test_hook(kvt_ssd_io_hook_cb cb, void *arg)
{
	pthread_mutex_lock(&hook_lock);
	hook_cb = cb;
	hook_arg = arg;
	pthread_mutex_unlock(&hook_lock);
}

/* Run the hook for each kind the run issued and has not shown it yet. */
static void run_hook(struct kvt_ssd_io_run *run)
{
	kvt_ssd_io_hook_cb cb;
	void *arg;

	pthread_mutex_lock(&hook_lock);
	cb = hook_cb;
	arg = hook_arg;
	pthread_mutex_unlock(&hook_lock);
	for (int k = KVT_SSD_IO_READ; k <= KVT_SSD_IO_SYNC; k++) {
		if (!(run->issued_kinds & ~run->hooked & (1u << k)))
			continue;
		run->hooked |= 1u << k;
		if (cb)
			cb(run->io, (enum kvt_ssd_io_kind)k, arg);
	}
}

/* An injected fault for op, consumed, or 0 (lock held). */
static int take_fault(struct kvt_ssd_io *io, const struct kvt_ssd_io_op *op)
{
	struct kvt_io_fault *f = &io->faults[op->kind];

	if (!f->count)
		return 0;
	if (f->skip) {
		f->skip--;
		return 0;
	}
	f->count--;
	io->stats.injected++;
	return f->err;
}

/* The injected ring fault, consumed, or 0. */
static int take_ring_fault(struct kvt_ssd_io *io)
{
	int fault;

	pthread_mutex_lock(&io->lock);
	fault = io->ring_fault;
	io->ring_fault = 0;
	pthread_mutex_unlock(&io->lock);
	return fault;
}
#else
static void run_hook(struct kvt_ssd_io_run *run) { (void)run; }
static int take_fault(struct kvt_ssd_io *io, const struct kvt_ssd_io_op *op) { return 0; }
static int take_ring_fault(struct kvt_ssd_io *io) { return 0; }
#endif

static const struct kvt_ssd_io_opts io_defaults = { .size = sizeof(struct kvt_ssd_io_opts) };

void kvt_ssd_io_opts_init(struct kvt_ssd_io_opts *opts, size_t size_bytes)
{
	kvt_opts_init(opts, size_bytes, &io_defaults, sizeof(io_defaults));
}

static void account(struct kvt_ssd_io *io, struct kvt_ssd_io_op *op)
{
	io->stats.ops++;
	if (op->res) {
		io->stats.errors++;
		return;
	}
	if (op->kind == KVT_SSD_IO_READ)
		io->stats.bytes_read += op->len;
	else if (op->kind == KVT_SSD_IO_WRITE)
		io->stats.bytes_written += op->len;
	else
		io->stats.syncs++;
}

/* Op i of the run is finished (its res set): queue it for the caller. */
static void complete(struct kvt_ssd_io_run *run, size_t i)
{
	run->state[i] = OP_DONE;
	run->ready[(run->rhead + run->rcount++) % run->cap] = i;
}

/* ---- thread pool ------------------------------------------------------- */

static int do_sync_op(int fd, struct kvt_ssd_io_op *op)
{
	size_t done = 0;

	if (fd < 0)
		return -EBADF;
	if (op->kind == KVT_SSD_IO_SYNC)
		return fdatasync(fd) ? -errno : 0;
	while (done < op->len) {
		ssize_t r = op->kind == KVT_SSD_IO_READ ?
			pread(fd, (char *)op->buf + done, op->len - done, (off_t)(op->off + done)) :
			pwrite(fd, (char *)op->buf + done, op->len - done, (off_t)(op->off + done));
		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		if (r == 0)
			return -EIO;
		done += (size_t)r;
	}
	return 0;
}

/* Take the first item of the pool's FIFO and execute it (lock held; dropped
 * for the I/O). */
static void pool_do_next(struct kvt_ssd_io *io)
{
	struct kvt_io_item *it = io->qhead;
	struct kvt_ssd_io_run *run = it->run;
	struct kvt_ssd_io_op *op = &run->ops[it->idx];
	int fault = it->faults ? take_fault(io, op) : 0;
	int fd = io->fds[op->file];
	uint64_t t0 = kvt_now_ns();

	io->qhead = it->next;
	if (!io->qhead)
		io->qtail = NULL;
	if (fault) {
		op->res = fault;
	} else {
		pthread_mutex_unlock(&io->lock);
		op->res = do_sync_op(fd, op);
		pthread_mutex_lock(&io->lock);
	}
	op->lat_ns = kvt_now_ns() - t0;
	account(io, op);
	complete(run, it->idx);
	pthread_cond_signal(&run->cv);
}

static void *worker_main(void *arg)
{
	struct kvt_ssd_io *io = arg;

	pthread_mutex_lock(&io->lock);
	for (;;) {
		while (!io->stop && !io->qhead)
			pthread_cond_wait(&io->work_cv, &io->lock);
		if (io->stop)
			break;
		pool_do_next(io);
	}
	pthread_mutex_unlock(&io->lock);
	return NULL;
}

/* Queue op i of the run for the pool (lock held). */
static void pool_queue(struct kvt_ssd_io_run *run, size_t i, bool faults)
{
	struct kvt_ssd_io *io = run->io;
	struct kvt_io_item *it = &run->items[i];

	*it = (struct kvt_io_item){ .run = run, .idx = i, .faults = faults };
	if (io->qtail)
		io->qtail->next = it;
	else
		io->qhead = it;
	io->qtail = it;
	run->state[i] = OP_INFLIGHT;
	run->issued_kinds |= 1u << run->ops[i].kind;
	pthread_cond_signal(&io->work_cv);
}

/* Start the workers once; 0 also when only some (or, mid-life, none) could
 * be: the runs then execute their own ops. Lock not held. */
static int pool_start(struct kvt_ssd_io *io)
{
	uint32_t want = io->opts.threads ? io->opts.threads :
			(io->opts.queue_depth < 8 ? io->opts.queue_depth : 8);
	pthread_t *t;

	pthread_mutex_lock(&io->lock);
	if (io->pool_started) {
		pthread_mutex_unlock(&io->lock);
		return 0;
	}
	io->pool_started = true;
	pthread_mutex_unlock(&io->lock);
	t = calloc(want, sizeof(*t));
	if (!t)
		return -ENOMEM;
	io->threads = t;
	for (uint32_t k = 0; k < want; k++) {
		int rc = pthread_create(&t[k], NULL, worker_main, io);

		if (rc)
			return k ? 0 : -rc;
		pthread_mutex_lock(&io->lock);
		io->n_threads++;
		pthread_mutex_unlock(&io->lock);
	}
	return 0;
}

static void pool_stop(struct kvt_ssd_io *io)
{
	pthread_mutex_lock(&io->lock);
	io->stop = true;
	pthread_cond_broadcast(&io->work_cv);
	pthread_mutex_unlock(&io->lock);
	for (uint32_t i = 0; i < io->n_threads; i++)
		pthread_join(io->threads[i], NULL);
	free(io->threads);
	io->threads = NULL;
	io->n_threads = 0;
}

/* ---- rings ---------------------------------------------------------------- */

/* user_data of the cancel request, never an op index */
#define KVT_IO_CANCEL_TAG UINT64_MAX

static bool transient(int rc)
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

/* Registrations are slow (pages get pinned): one at a time, outside the
 * state lock. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

/* Give ring r the engine's current buffers: cloned from the master ring
 * (registered once per change of the regions) where the kernel can, else
 * registered on r itself. A refused registration (RLIMIT_MEMLOCK) is logged
 * once per change and leaves the ring with plain buffers. Lock not held;
 * r is the caller's (busy). */
static void ring_sync_buffers(struct kvt_ssd_io *io, struct kvt_io_ring *r)
{
	struct iovec *iov = NULL;
	size_t n = 0;
	uint64_t gen;
	int rc = -EINVAL;

	pthread_mutex_lock(&reg_lock);
	pthread_mutex_lock(&io->lock);
	gen = io->buf_gen;
	if (io->n_iov && (iov = malloc(io->n_iov * sizeof(*iov)))) {
		memcpy(iov, io->iov, io->n_iov * sizeof(*iov));
		n = io->n_iov;
	}
	pthread_mutex_unlock(&io->lock);

	if (r->fixed_buffers)
		io_uring_unregister_buffers(&r->ring);
	r->fixed_buffers = false;
	free(r->iov);
	r->iov = NULL;
	r->n_iov = 0;
	if (n && io->clone_works && io->master_gen != gen) {
		if (io->master_buffers)
			io_uring_unregister_buffers(&io->master);
		rc = io_uring_register_buffers(&io->master, iov, (unsigned)n);
		io->master_buffers = rc == 0;
		io->master_gen = gen;
		if (rc)
			io->refused_gen = gen;
	}
	if (n && io->clone_works && io->master_buffers) {
		struct kvt_io_clone_buffers arg = { .src_fd = (uint32_t)io->master.ring_fd };

		rc = (int)syscall(__NR_io_uring_register, r->ring.ring_fd,
				  KVT_IORING_REGISTER_CLONE_BUFFERS, &arg, 1);
		rc = rc < 0 ? -errno : 0;
		if (rc) {
			/* an older kernel: each ring registers for itself, and
			 * the master lets go of its pages */
			io->clone_works = false;
			io_uring_unregister_buffers(&io->master);
			io->master_buffers = false;
		}
	}
	if (n && rc && !io->clone_works && io->refused_gen != gen) {
		rc = io_uring_register_buffers(&r->ring, iov, (unsigned)n);
		if (rc)
			io->refused_gen = gen;
	}
	if (n && rc && io->logged_gen != gen) {
		io->logged_gen = gen;
		kvt_log(KVT_LOG_WARN, "event=ssd.io.buffers_unregistered buffers=%zu err=\"%s\" "
			"action=\"plain buffers\"", n, strerror(rc < 0 ? -rc : EINVAL));
	}
	if (n && !rc) {
		r->fixed_buffers = true;
		r->iov = iov;
		r->n_iov = n;
		iov = NULL;
	}
	r->buf_gen = gen;
	pthread_mutex_lock(&io->lock);
	io->stats.fixed_buffers = r->fixed_buffers;
	pthread_mutex_unlock(&io->lock);
	pthread_mutex_unlock(&reg_lock);
	free(iov);
}

/* A new ring with the file table registered. Lock not held. Returns NULL
 * (and *err) when io_uring cannot be set up. */
static struct kvt_io_ring *ring_make(struct kvt_ssd_io *io, int *err)
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

static void ring_free(struct kvt_io_ring *r)
{
	io_uring_queue_exit(&r->ring);
	free(r->iov);
	free(r);
}

/* A ring for a new run, or NULL when the engine is on the thread pool. Waits
 * when max_rings runs hold one. */
static struct kvt_io_ring *ring_get(struct kvt_ssd_io *io)
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
			r = ring_make(io, &err);
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
				pool_start(io);
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
		ring_sync_buffers(io, r);
	return r;
}

/* Give back a run's ring; one of a retired engine (now on the pool) goes. */
static void ring_put(struct kvt_ssd_io *io, struct kvt_io_ring *r, bool broken)
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
		ring_free(r);
}

static void prep(struct kvt_ssd_io *io, struct kvt_io_ring *r, struct io_uring_sqe *sqe,
		 struct kvt_ssd_io_op *op, size_t done)
{
	int fd = r->fixed_files ? (int)op->file : io->fds[op->file];
	char *buf = (char *)op->buf + done;
	size_t len = op->len - done;
	uint64_t off = op->off + done;
	int bi = op->kind == KVT_SSD_IO_SYNC ? -1 : buf_index(r, buf, len);

	switch (op->kind) {
	case KVT_SSD_IO_READ:
		if (bi >= 0)
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
static void uring_fill(struct kvt_ssd_io_run *run)
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
			int fault = take_fault(io, op);
			run->next++;
			if (fault || io->fds[op->file] < 0) {
				op->res = fault ? fault : -EBADF;
				account(io, op);
				complete(run, i);
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
static void uring_take(struct kvt_ssd_io_run *run, bool broken)
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
		account(io, op);
		complete(run, i);
	}
	io_uring_cq_advance(ring, seen);
}

/* Submit what is queued and wait for a completion. A transient submit
 * error returns before waiting (what it left queued may be all there is in
 * flight): the caller reaps and comes back. An injected ring fault is
 * returned after the submission, as a ring that breaks with ops in flight
 * would. */
static int uring_submit_wait(struct kvt_ssd_io_run *run)
{
	struct io_uring *ring = &run->ring->ring;
	struct io_uring_cqe *cqe;
	int rc, fault;

	if (io_uring_sq_ready(ring)) {
		rc = io_uring_submit(ring);
		if (rc < 0)
			return rc;
	}
	run_hook(run);
	fault = take_ring_fault(run->io);
	if (fault)
		return fault;
	return io_uring_wait_cqe(ring, &cqe);
}

/* The run's ring failed with err while ops were in flight: cancel them and
 * reap until the kernel holds none of the caller's buffers (their memory may
 * be freed as soon as the run ends), then retire the ring and switch the
 * engine to the pool. Ops issued and not finished, then those never issued,
 * go to the pool. Lock not held. */
static void uring_break(struct kvt_ssd_io_run *run, int err)
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

		if (rc < 0 && !transient(rc)) {
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
		uring_take(run, true);
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
	ring_put(io, run->ring, true);
	run->ring = NULL;
	if (pool_start(io))
		kvt_log(KVT_LOG_WARN, "event=ssd.io.no_threads action=\"the calling thread does the I/O\"");

	/* reissuing a read, write or sync is harmless: the issued ops without a
	 * result run again (their faults were taken), then the rest as new */
	pthread_mutex_lock(&io->lock);
	for (size_t i = 0; i < run->next; i++)
		if (run->state[i] != OP_DONE)
			pool_queue(run, i, false);
	run->n_retry = 0;
	run->inflight = run->inflight_bytes = 0;
	pthread_mutex_unlock(&io->lock);
}

/* ---- runs --------------------------------------------------------------- */

/* Issue what can be issued (lock held). On the pool every op is queued at
 * once: the workers are the window. */
static void run_fill(struct kvt_ssd_io_run *run)
{
	if (run->ring) {
		uring_fill(run);
		return;
	}
	for (; run->next < run->n; run->next++)
		pool_queue(run, run->next, true);
}

/* Pop up to max reported indexes (lock held). */
static size_t run_pop(struct kvt_ssd_io_run *run, size_t *done, size_t max)
{
	size_t k = 0;

	while (k < max && run->rcount) {
		done[k++] = run->ready[run->rhead];
		run->rhead = (run->rhead + 1) % run->cap;
		run->rcount--;
	}
	run->reported += k;
	return k;
}

int kvt_ssd_io_start(struct kvt_ssd_io *io, struct kvt_ssd_io_op *ops, size_t n, size_t cap,
		     struct kvt_ssd_io_run **out)
{
	struct kvt_ssd_io_run *run;

	if (!io || !out || cap < n || !cap || !ops)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (ops[i].file >= io->opts.max_files || ops[i].kind > KVT_SSD_IO_SYNC)
			return -EINVAL;
	run = calloc(1, sizeof(*run));
	if (!run)
		return -ENOMEM;
	run->done = calloc(cap, sizeof(*run->done));
	run->state = calloc(cap, sizeof(*run->state));
	run->retry = calloc(cap, sizeof(*run->retry));
	run->ready = calloc(cap, sizeof(*run->ready));
	run->items = calloc(cap, sizeof(*run->items));
	if (!run->done || !run->state || !run->retry || !run->ready || !run->items) {
		free(run->done), free(run->state), free(run->retry), free(run->ready);
		free(run->items), free(run);
		return -ENOMEM;
	}
	pthread_cond_init(&run->cv, NULL);
	run->io = io;
	run->ops = ops;
	run->n = n;
	run->cap = cap;
	for (size_t i = 0; i < n; i++) {
		ops[i].res = 0;
		ops[i].lat_ns = 0;
	}
	run->ring = ring_get(io);
	pthread_mutex_lock(&io->lock);
	run_fill(run);
	pthread_mutex_unlock(&io->lock);
	if (run->ring && io_uring_sq_ready(&run->ring->ring))
		io_uring_submit(&run->ring->ring); /* a failure shows at the first wait */
	*out = run;
	return 0;
}

int kvt_ssd_io_add(struct kvt_ssd_io_run *run, size_t k)
{
	struct kvt_ssd_io *io;

	if (!run || run->n + k > run->cap)
		return -EINVAL;
	io = run->io;
	for (size_t i = run->n; i < run->n + k; i++) {
		if (run->ops[i].file >= io->opts.max_files || run->ops[i].kind > KVT_SSD_IO_SYNC)
			return -EINVAL;
		run->ops[i].res = 0;
		run->ops[i].lat_ns = 0;
	}
	pthread_mutex_lock(&io->lock);
	run->n += k;
	pthread_mutex_unlock(&io->lock);
	kvt_ssd_io_poll(run);
	return 0;
}

void kvt_ssd_io_poll(struct kvt_ssd_io_run *run)
{
	struct kvt_ssd_io *io;

	if (!run)
		return;
	io = run->io;
	pthread_mutex_lock(&io->lock);
	if (run->ring)
		uring_take(run, false);
	run_fill(run);
	pthread_mutex_unlock(&io->lock);
	if (run->ring && io_uring_sq_ready(&run->ring->ring))
		io_uring_submit(&run->ring->ring);
}

size_t kvt_ssd_io_reap(struct kvt_ssd_io_run *run, size_t *done, size_t max)
{
	struct kvt_ssd_io *io;
	size_t k;

	if (!run || !max)
		return 0;
	io = run->io;
	for (;;) {
		pthread_mutex_lock(&io->lock);
		k = run_pop(run, done, max);
		if (k || run->reported == run->n) {
			pthread_mutex_unlock(&io->lock);
			return k;
		}
		run_fill(run);
		if (run->rcount) {
			pthread_mutex_unlock(&io->lock);
			continue;
		}
		if (run->ring) {
			int rc;

			pthread_mutex_unlock(&io->lock);
			rc = uring_submit_wait(run);
			if (rc < 0 && !transient(rc)) {
				uring_break(run, rc);
				continue;
			}
			pthread_mutex_lock(&io->lock);
			uring_take(run, false);
			/* issue the next ops before the caller handles these: at
			 * a low queue depth the device would idle while it
			 * verifies or acks them */
			run_fill(run);
			pthread_mutex_unlock(&io->lock);
			if (run->ring && io_uring_sq_ready(&run->ring->ring))
				io_uring_submit(&run->ring->ring);
			continue;
		}
		/* on the pool: execute an op here when no worker runs */
		if (!io->n_threads && io->qhead) {
			pool_do_next(io);
			pthread_mutex_unlock(&io->lock);
			continue;
		}
		pthread_mutex_unlock(&io->lock);
		run_hook(run);
		pthread_mutex_lock(&io->lock);
		/* with no worker, an op of this run another run's thread took
		 * is signalled when done, like a worker's */
		while (!run->rcount && (io->n_threads || !io->qhead))
			pthread_cond_wait(&run->cv, &io->lock);
		pthread_mutex_unlock(&io->lock);
	}
}

void kvt_ssd_io_end(struct kvt_ssd_io_run *run)
{
	size_t idx[64];

	if (!run)
		return;
	while (kvt_ssd_io_reap(run, idx, 64))
		;
	if (run->ring)
		ring_put(run->io, run->ring, false);
	pthread_cond_destroy(&run->cv);
	free(run->done);
	free(run->state);
	free(run->retry);
	free(run->ready);
	free(run->items);
	free(run);
}

int kvt_ssd_io_run(struct kvt_ssd_io *io, struct kvt_ssd_io_op *ops, size_t n)
{
	struct kvt_ssd_io_run *run;
	int rc;

	if (!io || (n && !ops))
		return -EINVAL;
	if (!n)
		return 0;
	rc = kvt_ssd_io_start(io, ops, n, n, &run);
	if (rc)
		return rc;
	kvt_ssd_io_end(run);
	return 0;
}

/* ---- the engine --------------------------------------------------------- */

int kvt_ssd_io_open(const struct kvt_ssd_io_opts *opts, struct kvt_ssd_io **out)
{
	struct kvt_ssd_io_opts o = io_defaults;
	struct kvt_ssd_io *io;
	struct kvt_io_ring *r;
	int rc = -ENOMEM;

	if (!out || kvt_opts_load(&o, sizeof(o), opts))
		return -EINVAL;
	opts = &o;
	io = calloc(1, sizeof(*io));
	if (!io)
		return -ENOMEM;
	io->opts = *opts;
	if (!io->opts.queue_depth)
		io->opts.queue_depth = 32;
	if (!io->opts.max_inflight_bytes)
		io->opts.max_inflight_bytes = 256ULL << 20;
	if (!io->opts.max_files)
		io->opts.max_files = 1024;
	if (!io->opts.max_rings)
		io->opts.max_rings = 16;
	io->fds = malloc(io->opts.max_files * sizeof(*io->fds));
	if (!io->fds)
		goto err_io;
	for (uint32_t i = 0; i < io->opts.max_files; i++)
		io->fds[i] = -1;
	pthread_mutex_init(&io->lock, NULL);
	pthread_cond_init(&io->work_cv, NULL);
	pthread_cond_init(&io->ring_cv, NULL);

	if (!io->opts.force_threads) {
		/* the first ring now: io_uring refused shows here, once */
		io->uring = true;
		r = ring_make(io, &rc);
		if (r) {
			r->next = NULL;
			io->rings = r;
			io->n_rings = 1;
			io->stats.rings = 1;
			io->stats.uring = true;
			io->stats.fixed_files = r->fixed_files;
			io->have_master = io_uring_queue_init(1, &io->master, 0) == 0;
			io->clone_works = io->have_master;
			io->master_gen = io->refused_gen = io->logged_gen = UINT64_MAX;
			*out = io;
			return 0;
		}
		io->uring = false;
		io->stats.uring_error = rc;
		kvt_log(KVT_LOG_WARN, "event=ssd.io.uring_unavailable err=\"%s\" "
			"action=\"a pread/pwrite thread pool\"", strerror(-rc));
	} else {
		kvt_log(KVT_LOG_INFO, "event=ssd.io.threads reason=\"io_uring disabled by option\"");
	}
	rc = pool_start(io);
	if (rc)
		goto err_pool;
	*out = io;
	return 0;

err_pool:
	pool_stop(io);
	pthread_cond_destroy(&io->ring_cv);
	pthread_cond_destroy(&io->work_cv);
	pthread_mutex_destroy(&io->lock);
	free(io->fds);
err_io:
	free(io);
	return rc;
}

void kvt_ssd_io_close(struct kvt_ssd_io *io)
{
	if (!io)
		return;
	while (io->rings) {
		struct kvt_io_ring *r = io->rings;

		io->rings = r->next;
		ring_free(r);
	}
	if (io->have_master)
		io_uring_queue_exit(&io->master);
	pool_stop(io);
	pthread_cond_destroy(&io->ring_cv);
	pthread_cond_destroy(&io->work_cv);
	pthread_mutex_destroy(&io->lock);
	free(io->iov);
	free(io->regions);
	free(io->fds);
	free(io);
}

int kvt_ssd_io_set_file(struct kvt_ssd_io *io, uint32_t file, int fd)
{
	int rc = 0;

	if (!io || file >= io->opts.max_files)
		return -EINVAL;
	pthread_mutex_lock(&io->lock);
	for (struct kvt_io_ring *r = io->rings; r; r = r->next) {
		int x;

		if (!r->fixed_files)
			continue;
		x = io_uring_register_files_update(&r->ring, file, &fd, 1);
		if (x < 0 && !rc)
			rc = x;
	}
	io->fds[file] = rc ? -1 : fd;
	pthread_mutex_unlock(&io->lock);
	return rc;
}

/* Rebuild the iovecs from the regions (lock held). */
static int rebuild_iov(struct kvt_ssd_io *io)
{
	size_t n = 0;
	struct iovec *iov;

	for (size_t r = 0; r < io->n_regions; r++)
		n += (io->regions[r].len + KVT_IO_BUF_CHUNK - 1) / KVT_IO_BUF_CHUNK;
	iov = calloc(n ? n : 1, sizeof(*iov));
	if (!iov)
		return -ENOMEM;
	n = 0;
	for (size_t r = 0; r < io->n_regions; r++)
		for (size_t o = 0; o < io->regions[r].len; o += KVT_IO_BUF_CHUNK) {
			size_t left = io->regions[r].len - o;
			iov[n].iov_base = io->regions[r].ptr + o;
			iov[n++].iov_len = left < KVT_IO_BUF_CHUNK ? left : KVT_IO_BUF_CHUNK;
		}
	free(io->iov);
	io->iov = iov;
	io->n_iov = n;
	__atomic_add_fetch(&io->buf_gen, 1, __ATOMIC_RELEASE);
	return 0;
}

/* Bring the idle rings' buffers up to date now, so that no stale
 * registration keeps pages pinned (lock not held). */
static void sync_idle_rings(struct kvt_ssd_io *io)
{
	for (;;) {
		struct kvt_io_ring *r;

		pthread_mutex_lock(&io->lock);
		for (r = io->rings; r && (r->busy || r->buf_gen == io->buf_gen); r = r->next)
			;
		if (r)
			r->busy = true;
		pthread_mutex_unlock(&io->lock);
		if (!r)
			return;
		ring_sync_buffers(io, r);
		ring_put(io, r, false);
	}
}

int kvt_ssd_io_add_buffer(struct kvt_ssd_io *io, void *ptr, size_t len)
{
	struct kvt_io_region *r;
	int rc;

	if (!io || !ptr || !len)
		return -EINVAL;
	pthread_mutex_lock(&io->lock);
	r = realloc(io->regions, (io->n_regions + 1) * sizeof(*r));
	if (!r) {
		pthread_mutex_unlock(&io->lock);
		return -ENOMEM;
	}
	io->regions = r;
	r[io->n_regions++] = (struct kvt_io_region){ ptr, len };
	rc = rebuild_iov(io);
	if (rc)
		io->n_regions--;
	pthread_mutex_unlock(&io->lock);
	if (!rc)
		sync_idle_rings(io);
	return rc;
}

void kvt_ssd_io_remove_buffer(struct kvt_ssd_io *io, void *ptr)
{
	if (!io)
		return;
	pthread_mutex_lock(&io->lock);
	for (size_t r = 0; r < io->n_regions; r++)
		if (io->regions[r].ptr == ptr) {
			io->regions[r] = io->regions[--io->n_regions];
			if (rebuild_iov(io)) {
				/* cannot rebuild the table: none is registered from now */
				io->n_iov = 0;
				__atomic_add_fetch(&io->buf_gen, 1, __ATOMIC_RELEASE);
			}
			break;
		}
	pthread_mutex_unlock(&io->lock);
	sync_idle_rings(io);
}

#ifdef KVT_TESTING
void kvt_ssd_io_inject(struct kvt_ssd_io *io, enum kvt_ssd_io_kind kind, uint32_t skip,
		       uint32_t count, int err)
{
	if (!io || kind > KVT_SSD_IO_SYNC)
		return;
	pthread_mutex_lock(&io->lock);
	io->faults[kind] = (struct kvt_io_fault){ skip, count, err < 0 ? err : -EIO };
	pthread_mutex_unlock(&io->lock);
}

void kvt_ssd_io_inject_ring(struct kvt_ssd_io *io, int err)
{
	if (!io)
		return;
	pthread_mutex_lock(&io->lock);
	io->ring_fault = err < 0 ? err : -EIO;
	pthread_mutex_unlock(&io->lock);
}
#endif

void kvt_ssd_io_stats(struct kvt_ssd_io *io, struct kvt_ssd_io_stats *out)
{
	pthread_mutex_lock(&io->lock);
	*out = io->stats;
	pthread_mutex_unlock(&io->lock);
}
