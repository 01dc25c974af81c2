/* The SSD tier's I/O engine: batches of positioned reads and writes on a table
 * of O_DIRECT files, through io_uring (registered files, fixed buffers, one
 * submit call per batch) or, where io_uring cannot be set up or is refused by
 * the option, through a small pool of pread/pwrite threads. Both engines give
 * the same results; which one runs is logged once and reported in stats.
 *
 * Not a general scheduler: kvt_ssd_io_run executes one batch at a time (calls
 * are serialised by the engine's batch lock) keeping up to queue_depth
 * operations and max_inflight_bytes in flight. Stats, set_file and inject
 * take only a small state lock that no batch holds while it waits for I/O, so
 * they never wait for a batch. If the ring fails mid-batch, the operations in
 * flight are cancelled and reaped before the batch returns, and the engine
 * switches to the thread pool for good (logged, counted in stats.fallbacks).
 * Faults can be injected here for the tests. */
#ifndef KVT_TIERS_SSD_IO_H
#define KVT_TIERS_SSD_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct kvt_ssd_io;

struct kvt_ssd_io_opts {
	size_t size;                 /* sizeof(struct kvt_ssd_io_opts), set by _init */
	uint32_t queue_depth;        /* operations in flight; 0 = 32 */
	uint64_t max_inflight_bytes; /* bytes in flight; 0 = 256 MiB (one op always goes) */
	uint32_t max_files;          /* size of the file table; 0 = 1024 */
	uint32_t threads;            /* fallback pool size; 0 = min(queue_depth, 8) */
	bool force_threads;          /* do not try io_uring */
};

void kvt_ssd_io_opts_init(struct kvt_ssd_io_opts *opts, size_t size_bytes);

enum kvt_ssd_io_kind {
	KVT_SSD_IO_READ = 0,
	KVT_SSD_IO_WRITE = 1,
	KVT_SSD_IO_SYNC = 2, /* fdatasync of the file; off, buf, len unused */
};

/* One operation of a batch. The caller fills kind..len; run fills res, lat_ns. */
struct kvt_ssd_io_op {
	enum kvt_ssd_io_kind kind;
	uint32_t file;   /* slot of the file table */
	uint64_t off;    /* 4 KiB aligned for O_DIRECT */
	void *buf;       /* 4 KiB aligned */
	size_t len;      /* multiple of 4 KiB */
	int res;         /* 0, or -errno; a short transfer is -EIO */
	uint64_t lat_ns; /* submission to completion */
};

struct kvt_ssd_io_stats {
	bool uring;             /* io_uring in use (else the thread pool) */
	int uring_error;        /* why io_uring is not in use: -errno, 0 if forced or in use */
	bool fixed_files;       /* files registered with the ring */
	bool fixed_buffers;     /* buffers registered with the ring */
	uint64_t ops, bytes_read, bytes_written, syncs;
	uint64_t fixed_ops;     /* reads/writes that used a registered buffer */
	uint64_t errors;        /* operations that failed */
	uint64_t injected;      /* of which injected faults */
	uint64_t fallbacks;     /* io_uring failed in use and the pool replaced it */
};

/* Open an engine. Returns 0 and *out, -EINVAL, -ENOMEM. Never fails because
 * io_uring is unavailable: it falls back to threads and logs why. */
int kvt_ssd_io_open(const struct kvt_ssd_io_opts *opts, struct kvt_ssd_io **out);

/* Close the engine; the files of the table are not closed (the caller owns
 * them). NULL is accepted. */
void kvt_ssd_io_close(struct kvt_ssd_io *io);

/* Put fd (opened O_DIRECT by the caller, who keeps owning it) in table slot
 * `file`, or clear the slot with fd = -1. Does not wait for a running batch:
 * the caller must not clear (or close the fd of) a slot that a running batch
 * has operations on. Returns 0, -EINVAL (slot out of range), or an error of
 * the file registration (the slot is then unusable). */
int kvt_ssd_io_set_file(struct kvt_ssd_io *io, uint32_t file, int fd);

/* Register [ptr, ptr + len) as fixed buffers so operations inside it skip the
 * per-I/O page pinning. Waits for a running batch. The memory stays the caller's and must outlive the
 * engine or a kvt_ssd_io_remove_buffer. A refused registration (RLIMIT_MEMLOCK,
 * old kernel) is logged and the range simply stays unregistered: returns 0
 * either way, -EINVAL for bad arguments, -ENOMEM. */
int kvt_ssd_io_add_buffer(struct kvt_ssd_io *io, void *ptr, size_t len);

/* Forget a range added by kvt_ssd_io_add_buffer (same ptr). Waits for a
 * running batch. */
void kvt_ssd_io_remove_buffer(struct kvt_ssd_io *io, void *ptr);

/* Execute ops[0..n) and wait for all of them: when it returns, the kernel
 * holds none of the ops' buffers. Returns 0 (each op's res tells its
 * outcome), -EINVAL, or -ENOMEM (no op was issued). */
int kvt_ssd_io_run(struct kvt_ssd_io *io, struct kvt_ssd_io_op *ops, size_t n);

#ifdef KVT_TESTING
/* Fault injection for tests: after `skip` more operations of `kind`, fail the
 * next `count` of them with err (a negative errno) without issuing them. */
void kvt_ssd_io_inject(struct kvt_ssd_io *io, enum kvt_ssd_io_kind kind, uint32_t skip,
		       uint32_t count, int err);

/* Fault injection for tests: the io_uring engine's next wait for completions
 * fails with err (a negative errno), as a broken ring would, after that
 * round's operations were submitted. No effect on the thread pool. */
void kvt_ssd_io_inject_ring(struct kvt_ssd_io *io, int err);

/* Tests: cb(io, arg) is called by every batch of every engine once its first
 * operations are issued and before it waits for them, with no engine lock but
 * the batch lock held. NULL removes it. Not for production use. */
typedef void (*kvt_ssd_io_hook_cb)(struct kvt_ssd_io *io, void *arg);
void kvt_ssd_io_set_test_hook(kvt_ssd_io_hook_cb cb, void *arg);
#endif

/* A copy of the counters; never waits for a running batch. */
void kvt_ssd_io_stats(struct kvt_ssd_io *io, struct kvt_ssd_io_stats *out);

#endif /* KVT_TIERS_SSD_IO_H */
