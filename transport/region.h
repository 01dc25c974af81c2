/* SPDX-License-Identifier: Apache-2.0 */
/* Engine KV memory as a list of parts: where each layer of a region lies.
 *
 * A region is `layers` layers of `pages` pages. Layer l lives in part
 * layer[l].part at layer[l].offset from the part's start; its page p begins
 * p*page_stride further on, and the page's V kv_stride after its K (MLA: one
 * tensor, kv_stride 0). The strides are the region's, so one description
 * covers FlashAttention's [2, blocks, ...] (kv_stride = blocks x page),
 * FlashInfer's [blocks, 2, ...] (kv_stride = page, page_stride = 2 x page)
 * and layers spread over as many allocations as the engine made. The old,
 * single-part REGISTER is the case of one part and layer offsets
 * l*layer_stride.
 *
 * kvt_region_check is the one set of rules: the daemon applies it to every
 * REGISTER and sends its fault back, which the client library turns into a
 * message with kvt_region_fault_str. */
#ifndef KVT_TRANSPORT_REGION_H
#define KVT_TRANSPORT_REGION_H

#include <stddef.h>
#include <stdint.h>

#define KVT_PROTO_MAX_PARTS 128u /* parts of a REGISTER_PARTS (memfds in one
                                  * SCM_RIGHTS message: the kernel takes 253) */

struct kvt_region_part {
	uint64_t offset, bytes; /* [offset, offset + bytes) of the fd or allocation */
	const uint8_t *ipc;     /* CUDA: the handle (the region's ipc_len bytes) */
};

struct kvt_region_layer {
	uint32_t part;
	uint64_t offset;        /* from the part's offset */
};

struct kvt_region {
	uint32_t ns, kind, device;
	uint32_t layers, pages, n_parts, ipc_len;
	uint64_t kv_stride, page_stride;
	const struct kvt_region_part *parts;
	const struct kvt_region_layer *layer;
};

/* What is wrong with a region, as REGISTER's -EINVAL reply carries it. */
enum kvt_region_fault_kind {
	KVT_REGION_SHAPE = 1,         /* layers or strides not the namespace's */
	KVT_REGION_PART_RANGE = 2,    /* layer names a part the region lacks */
	KVT_REGION_PAST_PART = 3,     /* layer's last page ends past its part */
	KVT_REGION_PAGES_OVERLAP = 4, /* page_stride shorter than a page */
	KVT_REGION_KV_OVERLAP = 5,    /* V pages fall on K pages (kv_stride) */
	KVT_REGION_LAYERS_OVERLAP = 6,/* two layers of one part share bytes */
};

struct kvt_region_fault {
	uint32_t kind;   /* enum kvt_region_fault_kind */
	uint32_t layer;
	uint32_t other;  /* PART_RANGE, PAST_PART: the part; LAYERS_OVERLAP: the
	                  * other layer; SHAPE: the namespace's layers */
	uint64_t value;  /* PAST_PART: the end of the layer's last page;
	                  * SHAPE: the namespace's page bytes */
};

/* Check r for a namespace of `layers` layers, kvn (1 or 2) tensors per layer
 * and pages of page_bytes: every layer inside its part, no two pages of the
 * region overlapping within a part. Returns 0, or -EINVAL with *f. */
int kvt_region_check(const struct kvt_region *r, uint32_t layers, uint32_t kvn,
		     uint64_t page_bytes, struct kvt_region_fault *f);

/* The fault as one line naming the layer and the stride or part at fault,
 * for r as it was sent. Returns buf. */
char *kvt_region_fault_str(const struct kvt_region_fault *f, const struct kvt_region *r,
			   char *buf, size_t len);

#endif /* KVT_TRANSPORT_REGION_H */
