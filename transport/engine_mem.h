/* SPDX-License-Identifier: Apache-2.0 */
/* An engine's registered KV memory as the daemon sees it on the host backend:
 * the engine's memfd mapped into the daemon, and the paged layout that says
 * where each page of each layer lies. Gathers a block's pages into one
 * contiguous buffer (a DRAM slot) and scatters it back, layer by layer.
 *
 * A block in a slot is laid out [layer][kv][page_bytes]: layer-major, so a
 * LOAD can finish layer 0 of every block before layer 1 and an engine can
 * start computing early. */
#ifndef KVT_TRANSPORT_ENGINE_MEM_H
#define KVT_TRANSPORT_ENGINE_MEM_H

#include <pthread.h>
#include <stdint.h>
#include <sys/uio.h>

#include "transport/proto.h"

struct kvt_dev;
struct kvt_dev_mem;
struct kvt_dev_layout;

struct kvt_engine_mem {
	int refs;               /* atomic: the connection and each job using it */
	uint8_t *map;
	uint64_t map_len;
	uint8_t *base;          /* map + offset */
	uint32_t ns;            /* handle of the namespace it was registered for */
	uint32_t layers, pages, kvn;
	uint64_t layer_stride, kv_stride, page_stride, page_bytes;
	/* imported through the device layer (then map is NULL and copies go
	 * through kvt_dev_gather/scatter on `dev`) */
	struct kvt_dev *dev;
	struct kvt_dev_mem *dmem;
	struct kvt_dev_layout *layout;
	/* the engine's memfd as mapped here (NULL for CUDA memory), faulted in
	 * piece by piece as jobs name its pages (kvt_engine_mem_populate) */
	uint8_t *host;
	uint64_t host_len;
	uint64_t *faulted;      /* atomic bits: one per KVT_ENGINE_MEM_CHUNK of
	                         * host, set once that chunk was faulted in */
};

/* What kvt_engine_mem_populate faults in at a time. */
#define KVT_ENGINE_MEM_CHUNK (64u << 10)

/* Map fd per r for a namespace whose pages are page_bytes long with kvn (1 or
 * 2) tensors per layer. The memfd must be sealed against shrinking
 * (F_SEAL_SHRINK): a file the engine could truncate under the daemon would
 * turn its copies into SIGBUS. A hole the engine punches (which the seal
 * allows) is met by the copies' fault guard instead. Nothing is faulted in
 * here. Returns 0 and *out (one reference), -EINVAL
 * for a layout that leaves the region or disagrees with the namespace, -EPERM
 * for an unsealed fd, or the errno of fstat/mmap. fd stays the caller's. */
int kvt_engine_mem_map(int fd, const struct kvt_req_register *r, uint32_t kvn,
		       uint64_t page_bytes, struct kvt_engine_mem **out);

/* Open engine memory through the device layer instead: a CUDA IPC handle
 * (fd < 0, r->ipc) on the cuda backend, or the memfd fd on the host backend,
 * and register its layout for kvt_dev_gather/scatter. d is the namespace's
 * descriptor. Errors as kvt_engine_mem_map, plus those of kvt_dev_mem_import
 * and kvt_dev_layout_create. */
int kvt_engine_mem_import(struct kvt_dev *dev, int fd, const struct kvt_req_register *r,
			  const struct kvt_ns_desc *d, struct kvt_engine_mem **out);

/* Map the n engine pages a job names into the daemon before it copies them
 * (MADV_POPULATE_WRITE: no byte changes), so that copies do not take one
 * page fault per 4 KiB page of engine memory. Only those pages, never the
 * whole memfd: its size is the engine's to choose, and faulting in what no
 * job uses cost the daemon the memfd's size in shared memory (an untouched
 * 4 GiB memfd, 4.1 GiB and 4.6 s at the first SAVE). A chunk of
 * KVT_ENGINE_MEM_CHUNK bytes is faulted in once; later jobs skip it. For a
 * copy worker, never the event loop. A kernel without MADV_POPULATE_WRITE
 * gets each page read once (guarded); a failure leaves the pages to fault
 * as they are copied (never an error for the copy). No-op for CUDA memory. */
void kvt_engine_mem_populate(struct kvt_engine_mem *m, const uint32_t *pages, uint32_t n);

void kvt_engine_mem_get(struct kvt_engine_mem *m);
/* Drop a reference; the last one unmaps. NULL is accepted. */
void kvt_engine_mem_put(struct kvt_engine_mem *m);

/* The copies below run under a fault guard (util/fault_guard.h): engine
 * memory the engine punched a hole in, where no page can back it (huge
 * pages, none free), fails the copy with -EFAULT instead of killing the
 * daemon with SIGBUS. What was copied before the fault stays copied. */

/* Copy every layer of engine page `page` into block (page_bytes*kvn*layers).
 * 0 or -EFAULT. */
int kvt_engine_mem_gather(const struct kvt_engine_mem *m, uint32_t page, void *block);

/* kvt_engine_mem_gather, with *sum the XXH3-64 of the block's bytes,
 * computed as they are copied (util/block_sum.h). 0 or -EFAULT. */
int kvt_engine_mem_gather_sum(const struct kvt_engine_mem *m, uint32_t page, void *block,
			      uint64_t *sum);

/* Where engine page `page`'s pieces lie, in the order of a block (layer,
 * then K/V): v gets layers * kvn entries. */
void kvt_engine_mem_pieces(const struct kvt_engine_mem *m, uint32_t page, struct iovec *v);

/* Copy layer `layer` of block into engine page `page`. 0 or -EFAULT. */
int kvt_engine_mem_scatter_layer(const struct kvt_engine_mem *m, uint32_t page,
				  uint32_t layer, const void *block);

#endif /* KVT_TRANSPORT_ENGINE_MEM_H */
