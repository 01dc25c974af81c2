/* SPDX-License-Identifier: Apache-2.0 */
/* An engine's registered KV memory as the daemon sees it: its parts (memfds
 * mapped into the daemon, or memory opened through the device layer), and
 * the paged layout that says where each page of each layer lies. Gathers a block's pages into one
 * contiguous buffer (a DRAM slot) and scatters it back, layer by layer.
 *
 * A block in a slot is laid out [layer][kv][page_bytes]: layer-major, so a
 * LOAD can finish layer 0 of every block before layer 1 and an engine can
 * start computing early. */
#ifndef KVT_TRANSPORT_ENGINE_MEM_H
#define KVT_TRANSPORT_ENGINE_MEM_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "transport/proto.h"

struct kvt_dev;
struct kvt_dev_mem;
struct kvt_dev_layout;

/* One part of the engine's memory: a memfd mapped here, or memory opened
 * through the device layer (a CUDA IPC handle, or a memfd on the host
 * backend). */
struct kvt_engine_part {
	uint8_t *map;           /* mapped here (NULL when imported) */
	uint64_t map_len;
	struct kvt_dev_mem *dmem; /* imported through the device layer */
	/* the memfd as mapped here (NULL for CUDA memory), faulted in piece by
	 * piece as jobs name its pages (kvt_engine_mem_populate) */
	uint8_t *host;
	uint64_t host_len;
	uint64_t *faulted;      /* atomic bits: one per KVT_ENGINE_MEM_CHUNK of
	                         * host, set once that chunk was faulted in */
};

/* The region: its parts, each released once, by kvt_engine_mem_put; and
 * where each layer's page 0 lies in this process. */
struct kvt_engine_mem {
	int refs;               /* atomic: the connection and each job using it */
	uint32_t ns;            /* handle of the namespace it was registered for */
	uint32_t layers, pages, kvn, n_parts;
	uint64_t kv_stride, page_stride, page_bytes;
	struct kvt_engine_part *parts;
	uint8_t **layer_base;   /* layers: part base + the layer's offset */
	uint32_t *layer_part;   /* layers: the part holding each */
	bool on_host;           /* memfds (not CUDA memory) */
	/* imported through the device layer (then copies go through
	 * kvt_dev_gather/scatter on `dev`) */
	struct kvt_dev *dev;
	struct kvt_dev_layout *layout;
};

/* What kvt_engine_mem_populate faults in at a time. */
#define KVT_ENGINE_MEM_CHUNK (64u << 10)

/* Open engine memory laid out per r (checked by kvt_region_check) for a
 * namespace of descriptor d: fds[i] is part i's memfd (NULL for CUDA
 * memory, whose handles are in r's parts). With dev NULL each memfd is
 * mapped here and copies are plain; with a device the parts are imported
 * through it (a CUDA IPC handle on the cuda backend, the memfd on the host
 * backend) and the layout registered for kvt_dev_gather/scatter. A memfd
 * must be sealed against shrinking (F_SEAL_SHRINK): a file the engine could
 * truncate under the daemon would turn its copies into SIGBUS. A hole the
 * engine punches (which the seal allows) is met by the copies' fault guard
 * instead. Nothing is faulted in here. Returns 0 and *out (one reference),
 * -EINVAL for a memfd smaller than its part or a layout the namespace
 * cannot have, -EPERM for an unsealed fd, or the errno of fstat/mmap,
 * kvt_dev_mem_import and kvt_dev_layout_create. The fds stay the caller's. */
int kvt_engine_mem_open(struct kvt_dev *dev, const int *fds, const struct kvt_region *r,
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

/* The copies below run under a fault guard (util/fault_guard.h), each
 * layer's over its part: engine memory the engine punched a hole in, where no page can back it (huge
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
