/* SPDX-License-Identifier: Apache-2.0 */
/* The I/O engine's registered buffers: the caller's regions as iovecs,
 * registered once on a master ring and cloned into each ring where the
 * kernel can (else registered per ring), brought up to date when a run
 * takes a ring or the regions change. */
#include "tiers/ssd_io_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/log.h"

/* Registrations are slow (pages get pinned): one at a time, outside the
 * state lock. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

/* Give ring r the engine's current buffers: cloned from the master ring
 * (registered once per change of the regions) where the kernel can, else
 * registered on r itself. A refused registration (RLIMIT_MEMLOCK) is logged
 * once per change and leaves the ring with plain buffers. Lock not held;
 * r is the caller's (busy). */
void kvt_io_ring_sync_buffers(struct kvt_ssd_io *io, struct kvt_io_ring *r)
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
		kvt_io_ring_sync_buffers(io, r);
		kvt_io_ring_put(io, r, false);
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
