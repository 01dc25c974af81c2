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
	 * whole by the first copy that uses it (kvt_engine_mem_populate) */
	uint8_t *host;
	uint64_t host_len;
	pthread_mutex_t populate_lock;
	int populated;          /* atomic: 0, then 1 once tried */
};

/* Map fd per r for a namespace whose pages are page_bytes long with kvn (1 or
 * 2) tensors per layer. The memfd must be sealed against shrinking
 * (F_SEAL_SHRINK): a file the engine could truncate under the daemon would
 * turn its copies into SIGBUS. Returns 0 and *out (one reference), -EINVAL
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

/* Map every page of the engine's memfd into the daemon before the first copy
 * that uses it (MADV_POPULATE_WRITE: no byte changes), so that copies do not
 * take one page fault per 4 KiB page of engine memory inside a request. For
 * a copy worker, never the event loop: a large region takes a while. The
 * first caller populates, callers meanwhile wait for it, later ones return
 * at once. A kernel without MADV_POPULATE_WRITE gets each page read once;
 * a failure leaves the pages to fault as they are copied (never an error
 * for the copy). No-op for CUDA memory. */
void kvt_engine_mem_populate(struct kvt_engine_mem *m);

void kvt_engine_mem_get(struct kvt_engine_mem *m);
/* Drop a reference; the last one unmaps. NULL is accepted. */
void kvt_engine_mem_put(struct kvt_engine_mem *m);

/* Copy every layer of engine page `page` into block (page_bytes*kvn*layers). */
void kvt_engine_mem_gather(const struct kvt_engine_mem *m, uint32_t page, void *block);

/* kvt_engine_mem_gather, returning the XXH3-64 of the block's bytes,
 * computed as they are copied (util/block_sum.h). */
uint64_t kvt_engine_mem_gather_sum(const struct kvt_engine_mem *m, uint32_t page, void *block);

/* Where engine page `page`'s pieces lie, in the order of a block (layer,
 * then K/V): v gets layers * kvn entries. */
void kvt_engine_mem_pieces(const struct kvt_engine_mem *m, uint32_t page, struct iovec *v);

/* Copy layer `layer` of block into engine page `page`. */
void kvt_engine_mem_scatter_layer(const struct kvt_engine_mem *m, uint32_t page,
				  uint32_t layer, const void *block);

#endif /* KVT_TRANSPORT_ENGINE_MEM_H */
