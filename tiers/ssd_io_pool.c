/* SPDX-License-Identifier: Apache-2.0 */
/* The I/O engine's thread pool: pread/pwrite/fdatasync workers taking the
 * ops of every run from one FIFO, where io_uring cannot be used. */
#include "tiers/ssd_io_int.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "util/clock.h"

static int do_sync_op(int fd, struct kvt_ssd_io_op *op)
{
	size_t done = 0;

	if (fd < 0)
		return -EBADF;
	if (op->kind == KVT_SSD_IO_SYNC)
		return fdatasync(fd) ? -errno : 0;
	while (done < op->len) {
		char *at;
		size_t len;
		ssize_t r;

		kvt_io_piece(op, done, &at, &len);
		r = op->kind == KVT_SSD_IO_READ ? pread(fd, at, len, (off_t)(op->off + done)) :
						  pwrite(fd, at, len, (off_t)(op->off + done));
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

void kvt_io_pool_do_next(struct kvt_ssd_io *io)
{
	struct kvt_io_item *it = io->qhead;
	struct kvt_ssd_io_run *run = it->run;
	struct kvt_ssd_io_op *op = &run->ops[it->idx];
	int fault = it->faults ? kvt_io_take_fault(io, op) : 0;
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
	kvt_io_account(io, op);
	kvt_io_complete(run, it->idx);
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
		kvt_io_pool_do_next(io);
	}
	pthread_mutex_unlock(&io->lock);
	return NULL;
}

void kvt_io_pool_queue(struct kvt_ssd_io_run *run, size_t i, bool faults)
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

int kvt_io_pool_start(struct kvt_ssd_io *io)
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

void kvt_io_pool_stop(struct kvt_ssd_io *io)
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
