/* io_uring and thread-pool engines behind one batch interface. */
#include "tiers/ssd_io.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>

#include "util/clock.h"
#include "util/opts.h"
#include "store/log.h"

/* io_uring refuses to register more than 1 GiB in one iovec. */
#define KVT_IO_BUF_CHUNK (1ULL << 30)

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

/* Two locks so that nothing but another batch waits for a batch: run_lock is
 * held for a whole batch, lock only for bookkeeping (never across a wait for
 * I/O). Lock order: run_lock, then lock. */
struct kvt_ssd_io {
	struct kvt_ssd_io_opts opts;
	pthread_mutex_t run_lock; /* one batch at a time; owns the ring's queues */
	pthread_mutex_t lock;     /* guards everything below */
	int *fds;
#ifdef KVT_TESTING
	struct kvt_io_fault faults[3];
	int ring_fault;           /* injected: the next wait of the ring fails so */
#endif
	struct kvt_ssd_io_stats stats;

	/* the caller's regions, and their registered iovecs (chunks of them) */
	struct kvt_io_region *regions;
	size_t n_regions;
	struct iovec *iov;
	size_t n_iov;

	/* io_uring engine; uring changes under both locks */
	bool uring;
	struct io_uring ring;

	/* thread-pool engine: workers take ops of the current batch by index */
	pthread_t *threads;
	uint32_t n_threads;
	pthread_cond_t work_cv, done_cv;
	struct kvt_ssd_io_op *batch;
	const size_t *batch_idx; /* ops of the batch by index, or NULL: all in order */
	bool batch_faults;       /* take injected faults */
	size_t batch_n, batch_next, batch_done;
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

static bool hook_installed(void)
{
	bool on;

	pthread_mutex_lock(&hook_lock);
	on = hook_cb != NULL;
	pthread_mutex_unlock(&hook_lock);
	return on;
}

static void run_hook(struct kvt_ssd_io *io)
{
	kvt_ssd_io_hook_cb cb;
	void *arg;

	pthread_mutex_lock(&hook_lock);
	cb = hook_cb;
	arg = hook_arg;
	pthread_mutex_unlock(&hook_lock);
	if (cb)
		cb(io, arg);
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
static bool hook_installed(void) { return false; }
static void run_hook(struct kvt_ssd_io *io) { (void)io; }
static int take_fault(struct kvt_ssd_io *io, const struct kvt_ssd_io_op *op) { return 0; }
static int take_ring_fault(struct kvt_ssd_io *io) { return 0; }
#endif

static const struct kvt_ssd_io_opts io_defaults = { .size = sizeof(struct kvt_ssd_io_opts) };

void kvt_ssd_io_opts_init(struct kvt_ssd_io_opts *opts, size_t size_bytes)
{
	kvt_opts_init(opts, size_bytes, &io_defaults, sizeof(io_defaults));
}

/* Index of the registered iovec holding [p, p + len), -1 if none. */
static int buf_index(const struct kvt_ssd_io *io, const void *p, size_t len)
{
	const char *c = p;

	if (!io->stats.fixed_buffers)
		return -1;
	for (size_t i = 0; i < io->n_iov; i++) {
		const char *b = io->iov[i].iov_base;
		if (c >= b && c + len <= b + io->iov[i].iov_len)
			return (int)i;
	}
	return -1;
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

/* Execute the next op of the current batch (lock held; dropped for the I/O). */
static void pool_do_next(struct kvt_ssd_io *io)
{
	size_t k = io->batch_next++;
	struct kvt_ssd_io_op *op = &io->batch[io->batch_idx ? io->batch_idx[k] : k];
	int fault = io->batch_faults ? take_fault(io, op) : 0;
	int fd = io->fds[op->file];
	uint64_t t0 = kvt_now_ns();

	if (fault) {
		op->res = fault;
	} else {
		pthread_mutex_unlock(&io->lock);
		op->res = do_sync_op(fd, op);
		pthread_mutex_lock(&io->lock);
	}
	op->lat_ns = kvt_now_ns() - t0;
	account(io, op);
	if (++io->batch_done == io->batch_n)
		pthread_cond_signal(&io->done_cv);
}

static void *worker_main(void *arg)
{
	struct kvt_ssd_io *io = arg;

	pthread_mutex_lock(&io->lock);
	for (;;) {
		while (!io->stop && (!io->batch || io->batch_next == io->batch_n))
			pthread_cond_wait(&io->work_cv, &io->lock);
		if (io->stop)
			break;
		pool_do_next(io);
	}
	pthread_mutex_unlock(&io->lock);
	return NULL;
}

/* Execute ops[idx[k]] (ops[k] if idx is NULL) for k < n on the pool, or on
 * this thread when no worker could be started (run_lock held). faults: take
 * injected faults (false for ops that already took theirs). */
static int pool_run(struct kvt_ssd_io *io, struct kvt_ssd_io_op *ops, const size_t *idx, size_t n,
		    bool faults)
{
	if (!n)
		return 0;
	pthread_mutex_lock(&io->lock);
	io->batch = ops;
	io->batch_idx = idx;
	io->batch_faults = faults;
	io->batch_n = n;
	io->batch_next = io->batch_done = 0;
	pthread_cond_broadcast(&io->work_cv);
	pthread_mutex_unlock(&io->lock);
	run_hook(io);
	pthread_mutex_lock(&io->lock);
	while (!io->n_threads && io->batch_next < n)
		pool_do_next(io);
	while (io->batch_done < n)
		pthread_cond_wait(&io->done_cv, &io->lock);
	io->batch = NULL;
	io->batch_idx = NULL;
	pthread_mutex_unlock(&io->lock);
	return 0;
}

/* Start the workers; 0 also when only some (or, mid-life, none) could be. */
static int pool_start(struct kvt_ssd_io *io)
{
	uint32_t want = io->opts.threads ? io->opts.threads :
			(io->opts.queue_depth < 8 ? io->opts.queue_depth : 8);

	io->threads = calloc(want, sizeof(*io->threads));
	if (!io->threads)
		return -ENOMEM;
	for (; io->n_threads < want; io->n_threads++) {
		int rc = pthread_create(&io->threads[io->n_threads], NULL, worker_main, io);
		if (rc)
			return io->n_threads ? 0 : -rc;
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

/* ---- io_uring ---------------------------------------------------------- */

/* user_data of the cancel request, never an op index */
#define KVT_IO_CANCEL_TAG UINT64_MAX

enum kvt_io_state { OP_NEW, OP_INFLIGHT, OP_RETRY, OP_DONE };

/* A batch on the ring. Progress of each op (bytes done) is kept so short
 * transfers are resumed rather than failed: O_DIRECT writes can be split. */
struct uring_batch {
	struct kvt_ssd_io_op *ops;
	size_t n;
	size_t *done;
	unsigned char *state;  /* enum kvt_io_state */
	size_t *retry, n_retry;
	size_t next, completed, inflight, inflight_bytes;
	bool broken;           /* the ring failed: cancelled ops go to the pool */
};

static bool transient(int rc)
{
	return rc == -EINTR || rc == -EAGAIN || rc == -EBUSY || rc == -ETIME;
}

static void prep(struct kvt_ssd_io *io, struct io_uring_sqe *sqe, struct kvt_ssd_io_op *op,
		 size_t done)
{
	int fd = io->stats.fixed_files ? (int)op->file : io->fds[op->file];
	char *buf = (char *)op->buf + done;
	size_t len = op->len - done;
	uint64_t off = op->off + done;
	int bi = op->kind == KVT_SSD_IO_SYNC ? -1 : buf_index(io, buf, len);

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
	if (io->stats.fixed_files)
		sqe->flags |= IOSQE_FIXED_FILE;
}

/* Queue what the window allows, resumed ops first (lock held). */
static void uring_fill(struct kvt_ssd_io *io, struct uring_batch *b)
{
	while (b->inflight < io->opts.queue_depth && (b->n_retry || b->next < b->n) &&
	       io_uring_sq_space_left(&io->ring)) {
		bool fresh = !b->n_retry;
		struct io_uring_sqe *sqe;
		size_t i = fresh ? b->next : b->retry[b->n_retry - 1];
		struct kvt_ssd_io_op *op = &b->ops[i];

		if (fresh) {
			if (b->inflight && b->inflight_bytes + op->len > io->opts.max_inflight_bytes)
				break;
			int fault = take_fault(io, op);
			b->next++;
			if (fault || io->fds[op->file] < 0) {
				op->res = fault ? fault : -EBADF;
				b->state[i] = OP_DONE;
				account(io, op);
				b->completed++;
				continue;
			}
			op->lat_ns = kvt_now_ns();
			b->inflight_bytes += op->len;
		} else {
			b->n_retry--;
		}
		sqe = io_uring_get_sqe(&io->ring);
		prep(io, sqe, op, b->done[i]);
		io_uring_sqe_set_data64(sqe, i);
		b->state[i] = OP_INFLIGHT;
		b->inflight++;
	}
}

/* Take the completions that are there (lock held). */
static void uring_reap(struct kvt_ssd_io *io, struct uring_batch *b)
{
	struct io_uring_cqe *cqe;
	unsigned head, seen = 0;

	io_uring_for_each_cqe(&io->ring, head, cqe) {
		uint64_t tag = io_uring_cqe_get_data64(cqe);
		int res = cqe->res;

		seen++;
		if (tag == KVT_IO_CANCEL_TAG)
			continue;
		size_t i = (size_t)tag;
		struct kvt_ssd_io_op *op = &b->ops[i];

		b->inflight--;
		if (res == -EAGAIN || res == -EINTR || (b->broken && res == -ECANCELED)) {
			b->state[i] = OP_RETRY;
			b->retry[b->n_retry++] = i;
			continue;
		}
		if (res > 0 && op->kind != KVT_SSD_IO_SYNC) {
			b->done[i] += (size_t)res;
			if (b->done[i] < op->len) {
				b->state[i] = OP_RETRY;
				b->retry[b->n_retry++] = i;
				continue;
			}
			res = 0;
		} else if (res == 0 && op->kind != KVT_SSD_IO_SYNC && op->len) {
			res = -EIO; /* end of file inside the op */
		}
		op->res = res < 0 ? res : 0;
		op->lat_ns = kvt_now_ns() - op->lat_ns;
		b->inflight_bytes -= op->len;
		b->state[i] = OP_DONE;
		account(io, op);
		b->completed++;
	}
	io_uring_cq_advance(&io->ring, seen);
}

/* Submit what is queued and wait for a completion. A transient submit
 * error returns before waiting (what it left queued may be all there is in
 * flight): the caller reaps and comes back. The first round of a batch under
 * a test hook submits, runs the hook with the ops in flight, then waits. An
 * injected ring fault is returned after the submission, as a ring that
 * breaks with ops in flight would. */
static int uring_submit_wait(struct kvt_ssd_io *io, bool *first)
{
	struct io_uring_cqe *cqe;
	int rc, fault = take_ring_fault(io);

	if (io_uring_sq_ready(&io->ring)) {
		if (*first && hook_installed()) {
			rc = io_uring_submit(&io->ring);
			run_hook(io);
		} else {
			rc = io_uring_submit_and_wait(&io->ring, 1);
		}
		*first = false;
		if (rc < 0)
			return rc;
	}
	if (!fault)
		fault = take_ring_fault(io); /* set by the hook */
	if (fault)
		return fault;
	return io_uring_wait_cqe(&io->ring, &cqe);
}

/* The ring failed with err while ops were in flight: cancel them and reap
 * until the kernel holds none of the caller's buffers (their memory may be
 * freed as soon as the batch returns), then retire the ring. Ops that never
 * completed are left for the thread pool. */
static void uring_break(struct kvt_ssd_io *io, struct uring_batch *b, int err)
{
	struct io_uring_sqe *sqe;
	bool cancel_queued = false;

	kvt_log(KVT_LOG_WARN, "event=ssd.io.uring_failed err=\"%s\" in_flight=%zu "
		"action=\"cancelling and reaping them, then a pread/pwrite thread pool for good\"",
		strerror(-err), b->inflight);
	b->broken = true;
	if (b->inflight && (sqe = io_uring_get_sqe(&io->ring))) {
		io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY | IORING_ASYNC_CANCEL_ALL);
		io_uring_sqe_set_data64(sqe, KVT_IO_CANCEL_TAG);
		cancel_queued = true;
	}
	while (b->inflight) {
		int rc = io_uring_submit_and_wait(&io->ring, 1);

		if (rc < 0 && !transient(rc)) {
			/* completions still land in the CQ ring without the syscall;
			 * what the kernel never took from the SQ ring is not in flight */
			unsigned unconsumed = io_uring_sq_ready(&io->ring);

			if (cancel_queued && unconsumed)
				unconsumed--;
			if (b->inflight <= unconsumed)
				break;
			nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
		}
		pthread_mutex_lock(&io->lock);
		uring_reap(io, b);
		pthread_mutex_unlock(&io->lock);
	}

	pthread_mutex_lock(&io->lock);
	io_uring_queue_exit(&io->ring);
	io->uring = false;
	io->stats.uring = false;
	io->stats.uring_error = err;
	io->stats.fixed_files = false;
	io->stats.fixed_buffers = false;
	io->stats.fallbacks++;
	pthread_mutex_unlock(&io->lock);
	if (pool_start(io))
		kvt_log(KVT_LOG_WARN, "event=ssd.io.no_threads action=\"the calling thread does the I/O\"");
}

static int uring_run(struct kvt_ssd_io *io, struct kvt_ssd_io_op *ops, size_t n)
{
	struct uring_batch b = { .ops = ops, .n = n };
	bool first = true;
	int rc = 0;

	b.done = calloc(n, sizeof(*b.done));
	b.state = calloc(n, sizeof(*b.state));
	b.retry = calloc(n, sizeof(*b.retry));
	if (!b.done || !b.state || !b.retry) {
		rc = -ENOMEM;
		goto out;
	}
	while (b.completed < n) {
		pthread_mutex_lock(&io->lock);
		uring_fill(io, &b);
		pthread_mutex_unlock(&io->lock);

		if (!b.inflight)
			continue;
		rc = uring_submit_wait(io, &first);
		if (rc < 0 && !transient(rc))
			break;
		pthread_mutex_lock(&io->lock);
		uring_reap(io, &b);
		pthread_mutex_unlock(&io->lock);
	}
	if (b.completed == n) {
		rc = 0;
		goto out;
	}
	uring_break(io, &b, rc);
	/* reissuing a read, write or sync is harmless: the issued ops without a
	 * result run again (their faults were taken), then the rest as new */
	size_t k = 0;
	for (size_t i = 0; i < b.next; i++)
		if (b.state[i] != OP_DONE)
			b.retry[k++] = i;
	pool_run(io, ops, b.retry, k, false);
	rc = pool_run(io, ops + b.next, NULL, n - b.next, true);
out:
	free(b.retry);
	free(b.state);
	free(b.done);
	return rc;
}

static void uring_reregister_buffers(struct kvt_ssd_io *io)
{
	int rc;

	if (!io->uring)
		return;
	if (io->stats.fixed_buffers)
		io_uring_unregister_buffers(&io->ring);
	io->stats.fixed_buffers = false;
	if (!io->n_iov)
		return;
	rc = io_uring_register_buffers(&io->ring, io->iov, (unsigned)io->n_iov);
	if (rc < 0) {
		kvt_log(KVT_LOG_WARN, "event=ssd.io.buffers_unregistered buffers=%zu err=\"%s\" "
			"action=\"plain buffers\"", io->n_iov, strerror(-rc));
		return;
	}
	io->stats.fixed_buffers = true;
}

static int uring_start(struct kvt_ssd_io *io)
{
	int rc = io_uring_queue_init(io->opts.queue_depth * 2, &io->ring, 0);

	if (rc < 0)
		return rc;
	io->uring = true;
	rc = io_uring_register_files_sparse(&io->ring, io->opts.max_files);
	if (rc < 0)
		kvt_log(KVT_LOG_WARN, "event=ssd.io.files_unregistered err=\"%s\" action=\"plain fds\"",
			strerror(-rc));
	else
		io->stats.fixed_files = true;
	return 0;
}

/* ---- the interface ----------------------------------------------------- */

int kvt_ssd_io_open(const struct kvt_ssd_io_opts *opts, struct kvt_ssd_io **out)
{
	struct kvt_ssd_io_opts o = io_defaults;
	struct kvt_ssd_io *io;
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
	io->fds = malloc(io->opts.max_files * sizeof(*io->fds));
	if (!io->fds)
		goto err_io;
	for (uint32_t i = 0; i < io->opts.max_files; i++)
		io->fds[i] = -1;
	pthread_mutex_init(&io->run_lock, NULL);
	pthread_mutex_init(&io->lock, NULL);
	pthread_cond_init(&io->work_cv, NULL);
	pthread_cond_init(&io->done_cv, NULL);

	if (!io->opts.force_threads) {
		rc = uring_start(io);
		if (rc == 0) {
			io->stats.uring = true;
			*out = io;
			return 0;
		}
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
	pthread_cond_destroy(&io->done_cv);
	pthread_cond_destroy(&io->work_cv);
	pthread_mutex_destroy(&io->lock);
	pthread_mutex_destroy(&io->run_lock);
	free(io->fds);
err_io:
	free(io);
	return rc;
}

void kvt_ssd_io_close(struct kvt_ssd_io *io)
{
	if (!io)
		return;
	if (io->uring)
		io_uring_queue_exit(&io->ring);
	else
		pool_stop(io);
	pthread_cond_destroy(&io->done_cv);
	pthread_cond_destroy(&io->work_cv);
	pthread_mutex_destroy(&io->lock);
	pthread_mutex_destroy(&io->run_lock);
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
	if (io->uring && io->stats.fixed_files) {
		rc = io_uring_register_files_update(&io->ring, file, &fd, 1);
		rc = rc < 0 ? rc : 0;
	}
	io->fds[file] = rc ? -1 : fd;
	pthread_mutex_unlock(&io->lock);
	return rc;
}

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
	uring_reregister_buffers(io);
	return 0;
}

int kvt_ssd_io_add_buffer(struct kvt_ssd_io *io, void *ptr, size_t len)
{
	struct kvt_io_region *r;
	int rc;

	if (!io || !ptr || !len)
		return -EINVAL;
	pthread_mutex_lock(&io->run_lock);
	pthread_mutex_lock(&io->lock);
	r = realloc(io->regions, (io->n_regions + 1) * sizeof(*r));
	if (!r) {
		rc = -ENOMEM;
		goto out;
	}
	io->regions = r;
	r[io->n_regions++] = (struct kvt_io_region){ ptr, len };
	rc = rebuild_iov(io);
	if (rc)
		io->n_regions--;
out:
	pthread_mutex_unlock(&io->lock);
	pthread_mutex_unlock(&io->run_lock);
	return rc;
}

void kvt_ssd_io_remove_buffer(struct kvt_ssd_io *io, void *ptr)
{
	if (!io)
		return;
	pthread_mutex_lock(&io->run_lock);
	pthread_mutex_lock(&io->lock);
	for (size_t r = 0; r < io->n_regions; r++)
		if (io->regions[r].ptr == ptr) {
			io->regions[r] = io->regions[--io->n_regions];
			if (rebuild_iov(io)) {
				/* cannot shrink the table: unregister all, stay correct */
				if (io->uring && io->stats.fixed_buffers)
					io_uring_unregister_buffers(&io->ring);
				io->stats.fixed_buffers = false;
				io->n_iov = 0;
			}
			break;
		}
	pthread_mutex_unlock(&io->lock);
	pthread_mutex_unlock(&io->run_lock);
}

int kvt_ssd_io_run(struct kvt_ssd_io *io, struct kvt_ssd_io_op *ops, size_t n)
{
	int rc;

	if (!io || (n && !ops))
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (ops[i].file >= io->opts.max_files || ops[i].kind > KVT_SSD_IO_SYNC)
			return -EINVAL;
		ops[i].res = 0;
		ops[i].lat_ns = 0;
	}
	if (!n)
		return 0;
	pthread_mutex_lock(&io->run_lock);
	rc = io->uring ? uring_run(io, ops, n) : pool_run(io, ops, NULL, n, true);
	pthread_mutex_unlock(&io->run_lock);
	return rc;
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
