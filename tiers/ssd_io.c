/* SPDX-License-Identifier: Apache-2.0 */
/* The I/O engine's runs over io_uring or the thread pool: start, add, poll,
 * reap, end; opening and closing the engine, its file table, its stats and
 * the tests' fault injection. */
#include "tiers/ssd_io_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "util/opts.h"
#include "util/log.h"

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

void kvt_io_run_hook(struct kvt_ssd_io_run *run)
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

int kvt_io_take_fault(struct kvt_ssd_io *io, const struct kvt_ssd_io_op *op)
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

int kvt_io_take_ring_fault(struct kvt_ssd_io *io)
{
	int fault;

	pthread_mutex_lock(&io->lock);
	fault = io->ring_fault;
	io->ring_fault = 0;
	pthread_mutex_unlock(&io->lock);
	return fault;
}
#endif

static const struct kvt_ssd_io_opts io_defaults = { .size = sizeof(struct kvt_ssd_io_opts) };

void kvt_ssd_io_opts_init(struct kvt_ssd_io_opts *opts, size_t size_bytes)
{
	kvt_opts_init(opts, size_bytes, &io_defaults, sizeof(io_defaults));
}

void kvt_io_account(struct kvt_ssd_io *io, struct kvt_ssd_io_op *op)
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

void kvt_io_complete(struct kvt_ssd_io_run *run, size_t i)
{
	run->state[i] = OP_DONE;
	run->ready[(run->rhead + run->rcount++) % run->cap] = i;
}

/* ---- runs --------------------------------------------------------------- */

static bool op_valid(const struct kvt_ssd_io *io, const struct kvt_ssd_io_op *op)
{
	return op->file < io->opts.max_files && op->kind <= KVT_SSD_IO_SYNC &&
	       (!op->iov || (op->kind == KVT_SSD_IO_READ && op->iovcnt > 0));
}

/* Issue what can be issued (lock held). On the pool every op is queued at
 * once: the workers are the window. */
static void run_fill(struct kvt_ssd_io_run *run)
{
	if (run->ring) {
		kvt_io_uring_fill(run);
		return;
	}
	for (; run->next < run->n; run->next++)
		kvt_io_pool_queue(run, run->next, true);
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
		if (!op_valid(io, &ops[i]))
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
	run->ring = kvt_io_ring_get(io);
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
		if (!op_valid(io, &run->ops[i]))
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
		kvt_io_uring_take(run, false);
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
			rc = kvt_io_uring_submit_wait(run);
			if (rc < 0 && !kvt_io_transient(rc)) {
				kvt_io_uring_break(run, rc);
				continue;
			}
			pthread_mutex_lock(&io->lock);
			kvt_io_uring_take(run, false);
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
			kvt_io_pool_do_next(io);
			pthread_mutex_unlock(&io->lock);
			continue;
		}
		pthread_mutex_unlock(&io->lock);
		kvt_io_run_hook(run);
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
		kvt_io_ring_put(run->io, run->ring, false);
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
		r = kvt_io_ring_make(io, &rc);
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
	rc = kvt_io_pool_start(io);
	if (rc)
		goto err_pool;
	*out = io;
	return 0;

err_pool:
	kvt_io_pool_stop(io);
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
		kvt_io_ring_free(r);
	}
	if (io->have_master)
		io_uring_queue_exit(&io->master);
	kvt_io_pool_stop(io);
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
