/* io_uring and thread-pool engines behind one batch interface. */
#include "tiers/ssd_io.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>

/* io_uring refuses to register more than 1 GiB in one iovec. */
#define KVT_IO_BUF_CHUNK (1ULL << 30)

struct kvt_io_region {
	char *ptr;
	size_t len;
};

struct kvt_io_fault {
	uint32_t skip, count;
	int err;
};

struct kvt_ssd_io {
	struct kvt_ssd_io_opts opts;
	pthread_mutex_t lock; /* one batch at a time; guards everything below */
	int *fds;
	struct kvt_io_fault faults[3];
	struct kvt_ssd_io_stats stats;

	/* the caller's regions, and their registered iovecs (chunks of them) */
	struct kvt_io_region *regions;
	size_t n_regions;
	struct iovec *iov;
	size_t n_iov;

	/* io_uring engine */
	bool uring;
	struct io_uring ring;

	/* thread-pool engine: workers take ops of the current batch by index */
	pthread_t *threads;
	uint32_t n_threads;
	pthread_cond_t work_cv, done_cv;
	struct kvt_ssd_io_op *batch;
	size_t batch_n, batch_next, batch_done;
	bool stop;
};

void kvt_ssd_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("kvtier ssd: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void kvt_ssd_io_opts_init(struct kvt_ssd_io_opts *opts, size_t size_bytes)
{
	memset(opts, 0, size_bytes);
	opts->size = size_bytes;
}

/* An injected fault for op, consumed, or 0. */
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

static void *worker_main(void *arg)
{
	struct kvt_ssd_io *io = arg;

	pthread_mutex_lock(&io->lock);
	for (;;) {
		while (!io->stop && (!io->batch || io->batch_next == io->batch_n))
			pthread_cond_wait(&io->work_cv, &io->lock);
		if (io->stop)
			break;
		struct kvt_ssd_io_op *op = &io->batch[io->batch_next++];
		int fault = take_fault(io, op);
		int fd = io->fds[op->file];
		uint64_t t0 = now_ns();

		if (fault) {
			op->res = fault;
		} else {
			pthread_mutex_unlock(&io->lock);
			op->res = do_sync_op(fd, op);
			pthread_mutex_lock(&io->lock);
		}
		op->lat_ns = now_ns() - t0;
		account(io, op);
		if (++io->batch_done == io->batch_n)
			pthread_cond_signal(&io->done_cv);
	}
	pthread_mutex_unlock(&io->lock);
	return NULL;
}

static int pool_run(struct kvt_ssd_io *io, struct kvt_ssd_io_op *ops, size_t n)
{
	io->batch = ops;
	io->batch_n = n;
	io->batch_next = io->batch_done = 0;
	pthread_cond_broadcast(&io->work_cv);
	while (io->batch_done < n)
		pthread_cond_wait(&io->done_cv, &io->lock);
	io->batch = NULL;
	return 0;
}

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
}

/* ---- io_uring ---------------------------------------------------------- */

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

/* Progress of each op (bytes done) is kept in a side array so short transfers
 * are resumed rather than failed: O_DIRECT writes can be split by the kernel. */
static int uring_run(struct kvt_ssd_io *io, struct kvt_ssd_io_op *ops, size_t n)
{
	size_t *done = calloc(n, sizeof(*done));
	size_t next = 0, completed = 0, inflight = 0, inflight_bytes = 0;
	size_t *retry = NULL, n_retry = 0;

	if (!done)
		return -ENOMEM;
	retry = calloc(n, sizeof(*retry));
	if (!retry) {
		free(done);
		return -ENOMEM;
	}
	while (completed < n) {
		bool queued = false;

		/* fill the window: resumed ops first, then new ones */
		while (inflight < io->opts.queue_depth && (n_retry || next < n)) {
			size_t i = n_retry ? retry[--n_retry] : next;
			struct kvt_ssd_io_op *op = &ops[i];
			struct io_uring_sqe *sqe;

			if (i == next) {
				if (inflight && inflight_bytes + op->len > io->opts.max_inflight_bytes)
					break;
				int fault = take_fault(io, op);
				next++;
				op->lat_ns = now_ns();
				if (fault || (io->fds[op->file] < 0)) {
					op->res = fault ? fault : -EBADF;
					op->lat_ns = 0;
					account(io, op);
					completed++;
					continue;
				}
				inflight_bytes += op->len;
			}
			sqe = io_uring_get_sqe(&io->ring);
			if (!sqe) { /* ring full: should not happen with entries >= qd */
				retry[n_retry++] = i;
				break;
			}
			prep(io, sqe, op, done[i]);
			io_uring_sqe_set_data64(sqe, i);
			inflight++;
			queued = true;
		}
		if (!inflight)
			continue;
		int rc = queued ? io_uring_submit_and_wait(&io->ring, 1) : 0;
		struct io_uring_cqe *cqe;

		if (!queued || rc >= 0)
			rc = io_uring_wait_cqe(&io->ring, &cqe);
		if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
			/* the ring itself broke: fail what is left, do not spin */
			kvt_ssd_log("io_uring wait failed: %s", strerror(-rc));
			break;
		}
		unsigned head, seen = 0;
		io_uring_for_each_cqe(&io->ring, head, cqe) {
			size_t i = (size_t)io_uring_cqe_get_data64(cqe);
			struct kvt_ssd_io_op *op = &ops[i];
			int res = cqe->res;

			seen++;
			inflight--;
			if (res == -EAGAIN || res == -EINTR) {
				retry[n_retry++] = i;
				continue;
			}
			if (res > 0 && op->kind != KVT_SSD_IO_SYNC) {
				done[i] += (size_t)res;
				if (done[i] < op->len) {
					retry[n_retry++] = i;
					continue;
				}
				res = 0;
			} else if (res == 0 && op->kind != KVT_SSD_IO_SYNC && op->len) {
				res = -EIO; /* end of file inside the op */
			}
			op->res = res < 0 ? res : 0;
			op->lat_ns = now_ns() - op->lat_ns;
			inflight_bytes -= op->len;
			account(io, op);
			completed++;
		}
		io_uring_cq_advance(&io->ring, seen);
	}
	if (completed < n) {
		/* only after a broken ring: drain, then fail the rest */
		for (size_t i = 0; i < n; i++)
			if (i >= next || ops[i].res == 0) {
				ops[i].res = -EIO;
				account(io, &ops[i]);
			}
	}
	free(retry);
	free(done);
	return 0;
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
		kvt_ssd_log("cannot register %zu buffers with io_uring (%s); "
			    "using unregistered buffers", io->n_iov, strerror(-rc));
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
		kvt_ssd_log("cannot register files with io_uring (%s); using plain fds",
			    strerror(-rc));
	else
		io->stats.fixed_files = true;
	return 0;
}

/* ---- the interface ----------------------------------------------------- */

int kvt_ssd_io_open(const struct kvt_ssd_io_opts *opts, struct kvt_ssd_io **out)
{
	struct kvt_ssd_io *io;
	int rc = -ENOMEM;

	if (!opts || !out || opts->size < sizeof(*opts))
		return -EINVAL;
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
		kvt_ssd_log("io_uring unavailable (%s); falling back to a pread/pwrite "
			    "thread pool", strerror(-rc));
	} else {
		kvt_ssd_log("io_uring disabled by option; using a pread/pwrite thread pool");
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
				/* cannot shrink the table: unregister all, stay correct */
				if (io->uring && io->stats.fixed_buffers)
					io_uring_unregister_buffers(&io->ring);
				io->stats.fixed_buffers = false;
				io->n_iov = 0;
			}
			break;
		}
	pthread_mutex_unlock(&io->lock);
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
	pthread_mutex_lock(&io->lock);
	rc = io->uring ? uring_run(io, ops, n) : pool_run(io, ops, n);
	pthread_mutex_unlock(&io->lock);
	return rc;
}

void kvt_ssd_io_inject(struct kvt_ssd_io *io, enum kvt_ssd_io_kind kind, uint32_t skip,
		       uint32_t count, int err)
{
	if (!io || kind > KVT_SSD_IO_SYNC)
		return;
	pthread_mutex_lock(&io->lock);
	io->faults[kind] = (struct kvt_io_fault){ skip, count, err < 0 ? err : -EIO };
	pthread_mutex_unlock(&io->lock);
}

void kvt_ssd_io_stats(struct kvt_ssd_io *io, struct kvt_ssd_io_stats *out)
{
	pthread_mutex_lock(&io->lock);
	*out = io->stats;
	pthread_mutex_unlock(&io->lock);
}
