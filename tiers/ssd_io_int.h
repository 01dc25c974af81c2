/* SPDX-License-Identifier: Apache-2.0 */
/* The I/O engine's insides, shared by its files: the engine, its runs,
 * its rings and the thread pool (tiers/ssd_io.h says what they do). Lock
 * order: the state lock (io->lock) is innermost; it is never held across a
 * wait for I/O, nor while buffers are pinned. */
#ifndef KVT_TIERS_SSD_IO_INT_H
#define KVT_TIERS_SSD_IO_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <liburing.h>

#include "tiers/ssd_io.h"

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

/* user_data of the cancel request, never an op index */
#define KVT_IO_CANCEL_TAG UINT64_MAX

/* ---- the engine and its runs (ssd_io.c) ---- */

/* Count op's outcome in the stats (lock held). */
void kvt_io_account(struct kvt_ssd_io *io, struct kvt_ssd_io_op *op);
/* Op i of the run is finished (its res set): queue it for the caller (lock
 * held). */
void kvt_io_complete(struct kvt_ssd_io_run *run, size_t i);

#ifdef KVT_TESTING
/* Run the test hook for each kind the run issued and has not shown it yet. */
void kvt_io_run_hook(struct kvt_ssd_io_run *run);
/* An injected fault for op, consumed, or 0 (lock held). */
int kvt_io_take_fault(struct kvt_ssd_io *io, const struct kvt_ssd_io_op *op);
/* The injected ring fault, consumed, or 0 (lock not held). */
int kvt_io_take_ring_fault(struct kvt_ssd_io *io);
#else
static inline void kvt_io_run_hook(struct kvt_ssd_io_run *run) { (void)run; }
static inline int kvt_io_take_fault(struct kvt_ssd_io *io, const struct kvt_ssd_io_op *op)
{
	(void)io;
	(void)op;
	return 0;
}
static inline int kvt_io_take_ring_fault(struct kvt_ssd_io *io) { (void)io; return 0; }
#endif

/* Where byte `done` of op lies: the piece of op->iov holding it, and how
 * far into it (for an op without pieces: buf + done). A resumed read of
 * pieces goes on from there, one piece at a time. */
static inline void kvt_io_piece(const struct kvt_ssd_io_op *op, size_t done, char **at,
				size_t *len)
{
	unsigned j = 0;

	if (!op->iov) {
		*at = (char *)op->buf + done;
		*len = op->len - done;
		return;
	}
	while (j + 1 < op->iovcnt && done >= op->iov[j].iov_len)
		done -= op->iov[j++].iov_len;
	*at = (char *)op->iov[j].iov_base + done;
	*len = op->iov[j].iov_len - done;
}

/* ---- the thread pool (ssd_io_pool.c) ---- */

/* Take the first item of the pool's FIFO and execute it (lock held; let go
 * for the I/O). */
void kvt_io_pool_do_next(struct kvt_ssd_io *io);
/* Queue op i of the run for the pool (lock held). */
void kvt_io_pool_queue(struct kvt_ssd_io_run *run, size_t i, bool faults);
/* Start the workers once; 0 also when only some (or, mid-life, none) could
 * be: the runs then execute their own ops. Lock not held. */
int kvt_io_pool_start(struct kvt_ssd_io *io);
void kvt_io_pool_stop(struct kvt_ssd_io *io);

/* ---- rings (ssd_io_ring.c) ---- */

/* A submit or wait error worth trying again. */
bool kvt_io_transient(int rc);
/* A new ring with the file table registered (lock not held); NULL and *err
 * when io_uring cannot be set up. */
struct kvt_io_ring *kvt_io_ring_make(struct kvt_ssd_io *io, int *err);
void kvt_io_ring_free(struct kvt_io_ring *r);
/* A ring for a new run, or NULL when the engine is on the thread pool;
 * waits when max_rings runs hold one. */
struct kvt_io_ring *kvt_io_ring_get(struct kvt_ssd_io *io);
/* Give back a run's ring; one of a retired engine (now on the pool) goes. */
void kvt_io_ring_put(struct kvt_ssd_io *io, struct kvt_io_ring *r, bool broken);
/* Queue on the run's ring what the window allows (lock held). */
void kvt_io_uring_fill(struct kvt_ssd_io_run *run);
/* Take the completions that are there (lock held). */
void kvt_io_uring_take(struct kvt_ssd_io_run *run, bool broken);
/* Submit what is queued and wait for a completion (lock not held). */
int kvt_io_uring_submit_wait(struct kvt_ssd_io_run *run);
/* The run's ring failed with err: cancel, reap, go to the pool (lock not
 * held). */
void kvt_io_uring_break(struct kvt_ssd_io_run *run, int err);

/* ---- registered buffers (ssd_io_buffers.c) ---- */

/* Give ring r (busy, the caller's) the engine's current buffers (lock not
 * held). */
void kvt_io_ring_sync_buffers(struct kvt_ssd_io *io, struct kvt_io_ring *r);

#endif /* KVT_TIERS_SSD_IO_INT_H */
