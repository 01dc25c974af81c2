/* SPDX-License-Identifier: Apache-2.0 */
/* The SSD tier's I/O engine: runs of positioned reads, writes and syncs on a
 * table of O_DIRECT files, through io_uring (registered files, fixed
 * buffers) or, where io_uring cannot be set up or is refused by the option,
 * through a small pool of pread/pwrite threads. Both engines give the same
 * results; which one runs is logged once and reported in stats.
 *
 * A run is one caller's set of operations. Runs proceed independently: each
 * takes a ring of its own (rings are made on demand, up to max_rings, and
 * reused), so a read never waits behind another caller's writes or their
 * fdatasync, and two readers share only the device. Within a run, up to
 * queue_depth operations and max_inflight_bytes are in flight; the caller
 * reaps completions as they come (kvt_ssd_io_reap), may add operations to a
 * running run (a sync after its writes), and ends it once all are reaped.
 * Nothing is allocated after kvt_ssd_io_start: reaping and completing only
 * move indexes between arrays the run owns.
 *
 * Stats, set_file and inject take only a small state lock that no run holds
 * while it waits for I/O. If a ring fails mid-run, the operations in flight
 * on it are cancelled and reaped before the run goes on, the rest run on the
 * thread pool, and the engine uses the pool for good (logged, counted in
 * stats.fallbacks). Faults can be injected here for the tests. */
#ifndef KVT_TIERS_SSD_IO_H
#define KVT_TIERS_SSD_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct kvt_ssd_io;
struct kvt_ssd_io_run;

struct kvt_ssd_io_opts {
	size_t size;                 /* sizeof(struct kvt_ssd_io_opts), set by _init */
	uint32_t queue_depth;        /* operations in flight per run; 0 = 32 */
	uint64_t max_inflight_bytes; /* bytes in flight per run; 0 = 256 MiB (one op always goes) */
	uint32_t max_files;          /* size of the file table; 0 = 1024 */
	uint32_t threads;            /* fallback pool size; 0 = min(queue_depth, 8) */
	bool force_threads;          /* do not try io_uring */
	uint32_t max_rings;          /* rings, hence runs at once on io_uring; 0 = 16 */
};

void kvt_ssd_io_opts_init(struct kvt_ssd_io_opts *opts, size_t size_bytes);

enum kvt_ssd_io_kind {
	KVT_SSD_IO_READ = 0,
	KVT_SSD_IO_WRITE = 1,
	KVT_SSD_IO_SYNC = 2, /* fdatasync of the file; off, buf, len unused */
};

/* One operation of a run. The caller fills kind..iovcnt; the engine fills
 * res and lat_ns. */
struct kvt_ssd_io_op {
	enum kvt_ssd_io_kind kind;
	uint32_t file;   /* slot of the file table */
	uint64_t off;    /* 4 KiB aligned for O_DIRECT */
	void *buf;       /* 4 KiB aligned */
	size_t len;      /* multiple of 4 KiB */
	/* A read may land in pieces instead of buf: iov[0..iovcnt), each
	 * piece 4 KiB aligned and a multiple of 4 KiB long, len bytes in all
	 * (another's memory, such as an engine's mapped KV pages: never a
	 * registered buffer). The array must stay until the op is reaped. */
	const struct iovec *iov;
	unsigned iovcnt;
	int res;         /* 0, or -errno; a short transfer is -EIO */
	uint64_t lat_ns; /* submission to completion */
};

struct kvt_ssd_io_stats {
	bool uring;             /* io_uring in use (else the thread pool) */
	int uring_error;        /* why io_uring is not in use: -errno, 0 if forced or in use */
	bool fixed_files;       /* files registered with the rings */
	bool fixed_buffers;     /* buffers registered with the rings */
	uint64_t ops, bytes_read, bytes_written, syncs;
	uint64_t fixed_ops;     /* reads/writes that used a registered buffer */
	uint64_t errors;        /* operations that failed */
	uint64_t injected;      /* of which injected faults */
	uint64_t fallbacks;     /* io_uring failed in use and the pool replaced it */
	uint64_t rings;         /* rings made (each run takes one; they are reused) */
	uint64_t runs_waited;   /* runs that waited for a ring (all max_rings busy) */
};

/* Open an engine. Returns 0 and *out, -EINVAL, -ENOMEM. Never fails because
 * io_uring is unavailable: it falls back to threads and logs why. */
int kvt_ssd_io_open(const struct kvt_ssd_io_opts *opts, struct kvt_ssd_io **out);

/* Close the engine; no run may be open. The files of the table are not
 * closed (the caller owns them). NULL is accepted. */
void kvt_ssd_io_close(struct kvt_ssd_io *io);

/* Put fd (opened O_DIRECT by the caller, who keeps owning it) in table slot
 * `file`, or clear the slot with fd = -1. Does not wait for running runs:
 * the caller must not clear (or close the fd of) a slot that a run has
 * operations on. Returns 0, -EINVAL (slot out of range), or an error of the
 * file registration (the slot is then unusable). */
int kvt_ssd_io_set_file(struct kvt_ssd_io *io, uint32_t file, int fd);

/* Register [ptr, ptr + len) as fixed buffers so operations inside it skip the
 * per-I/O page pinning. Runs started from now on see it; none is waited for.
 * The memory stays the caller's and must outlive the engine or a
 * kvt_ssd_io_remove_buffer. A refused registration (RLIMIT_MEMLOCK, old
 * kernel) is logged and the range simply stays unregistered: returns 0
 * either way, -EINVAL for bad arguments, -ENOMEM. */
int kvt_ssd_io_add_buffer(struct kvt_ssd_io *io, void *ptr, size_t len);

/* Forget a range added by kvt_ssd_io_add_buffer (same ptr). No run may have
 * operations on it. */
void kvt_ssd_io_remove_buffer(struct kvt_ssd_io *io, void *ptr);

/* Start a run of ops[0..n), the array having room for cap >= n operations
 * (kvt_ssd_io_add fills the rest). The ops stay the caller's and must not
 * move until kvt_ssd_io_end. Issues the first of them (up to the queue depth)
 * and returns without waiting; waits only for a ring when max_rings runs are
 * open. Returns 0 and *out, -EINVAL, or -ENOMEM (nothing was issued). */
int kvt_ssd_io_start(struct kvt_ssd_io *io, struct kvt_ssd_io_op *ops, size_t n, size_t cap,
		     struct kvt_ssd_io_run **out);

/* Add ops[n..n+k) (filled by the caller) to a run; they are issued as its
 * window allows (completions already there are taken first, as
 * kvt_ssd_io_poll does). Returns 0, or -EINVAL past the run's cap. */
int kvt_ssd_io_add(struct kvt_ssd_io_run *run, size_t k);

/* Take the completions that are there and issue what the window then
 * allows, without waiting: a caller with CPU work between its adds and reaps
 * (checksums, encoding) calls it so that the device does not idle meanwhile.
 * Completions taken are reported by the next kvt_ssd_io_reap. */
void kvt_ssd_io_poll(struct kvt_ssd_io_run *run);

/* Wait for operations of the run to complete and write the indexes of those
 * completed since the last call into done[0..max): at least one, unless every
 * operation added so far was reported already (then 0, without waiting).
 * Keeps the window full meanwhile. */
size_t kvt_ssd_io_reap(struct kvt_ssd_io_run *run, size_t *done, size_t max);

/* Finish a run: waits for what was not reaped yet (the kernel then holds
 * none of its buffers), gives its ring back, frees it. NULL is accepted. */
void kvt_ssd_io_end(struct kvt_ssd_io_run *run);

/* Execute ops[0..n) as one run and wait for all of them: start, reap, end.
 * Returns 0 (each op's res tells its outcome), -EINVAL, or -ENOMEM (no op
 * was issued). */
int kvt_ssd_io_run(struct kvt_ssd_io *io, struct kvt_ssd_io_op *ops, size_t n);

#ifdef KVT_TESTING
/* Fault injection for tests: after `skip` more operations of `kind`, fail the
 * next `count` of them with err (a negative errno) without issuing them. */
void kvt_ssd_io_inject(struct kvt_ssd_io *io, enum kvt_ssd_io_kind kind, uint32_t skip,
		       uint32_t count, int err);

/* Fault injection for tests: the next wait for completions of any of the
 * engine's rings fails with err (a negative errno), as a broken ring would,
 * with that run's operations in flight. No effect on the thread pool. */
void kvt_ssd_io_inject_ring(struct kvt_ssd_io *io, int err);

/* Tests: cb(io, kind, arg) is called by a run the first time it is about to
 * wait with operations of `kind` issued (for a write run: once for its
 * writes, once for its sync), with no engine lock held. NULL removes it.
 * Not for production use. */
typedef void (*kvt_ssd_io_hook_cb)(struct kvt_ssd_io *io, enum kvt_ssd_io_kind kind, void *arg);
void kvt_ssd_io_set_test_hook(kvt_ssd_io_hook_cb cb, void *arg);
#endif

/* A copy of the counters; never waits for a run. */
void kvt_ssd_io_stats(struct kvt_ssd_io *io, struct kvt_ssd_io_stats *out);

#endif /* KVT_TIERS_SSD_IO_H */
