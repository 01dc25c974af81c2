/* SPDX-License-Identifier: Apache-2.0 */
/* Registering engine memory with kvtierd: one region (REGISTER) or one in
 * parts (REGISTER_PARTS), and the sealed memfds engines without memory of
 * their own register. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "transport/client_int.h"
#include "transport/region.h"
#include "util/opts.h"

static uint64_t new_id(struct kvt_client *c)
{
	return kvt_client_new_id(c);
}

static int roundtrip(struct kvt_client *c, struct kvt_wr *w, int enc_err, struct call *k,
		     int fd, uint16_t op)
{
	return kvt_client_roundtrip(c, w, enc_err, k, &fd, fd >= 0, op);
}

int kvt_client_register(struct kvt_client *c, const struct kvt_client_ns *ns,
			const struct kvt_client_region *given)
{
	struct kvt_client_region whole = { .size = sizeof(whole), .memfd = -1 };
	const struct kvt_client_region *r = &whole;
	struct kvt_req_register m = { 0 };
	struct kvt_wr w;
	struct call k = { 0 };
	uint32_t region;
	int err;

	if (!c || !ns || kvt_opts_load(&whole, sizeof(whole), given))
		return -EINVAL;
	if (r->memfd < 0 && (!r->cuda_ipc || r->cuda_ipc_len == 0 ||
			     r->cuda_ipc_len > KVT_PROTO_MAX_IPC))
		return -EINVAL;
	m.ns = ns->handle;
	m.kind = r->memfd >= 0 ? KVT_MEM_HOST_MEMFD : KVT_MEM_CUDA_IPC;
	if (r->memfd < 0) {
		m.ipc = r->cuda_ipc;
		m.ipc_len = r->cuda_ipc_len;
		m.device = r->device;
	}
	m.bytes = r->bytes;
	m.offset = r->offset;
	m.layers = r->layers;
	m.pages = r->pages;
	m.layer_stride = r->layer_stride;
	m.kv_stride = r->kv_stride;
	m.page_stride = r->page_stride;
	kvt_wr_init(&w);
	k.id = new_id(c);
	err = roundtrip(c, &w, kvt_proto_enc_register(&w, k.id, &m), &k, r->memfd,
			KVT_OP_REGISTER);
	if (!err)
		err = kvt_proto_rep_u32(k.payload, k.hdr.len, &region);
	free(k.payload);
	if (!err && (region == 0 || region > INT32_MAX))
		err = -EBADMSG;
	return err ? err : (int)region;
}

/* A sealed memfd of bytes, created with extra memfd_create flags, mapped. */
static int memfd_make(const char *name, uint64_t bytes, unsigned flags, void **map)
{
	int fd, err;
	void *p;

	if (!map || bytes == 0 || bytes > SIZE_MAX)
		return -EINVAL;
	fd = memfd_create(name ? name : "kvtier-engine", MFD_CLOEXEC | MFD_ALLOW_SEALING | flags);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)bytes) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		err = -errno;
		close(fd);
		return err;
	}
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		err = -errno;
		close(fd);
		return err;
	}
	*map = p;
	return fd;
}

int kvt_client_memfd_create(const char *name, uint64_t bytes, void **map)
{
	return memfd_make(name, bytes, 0, map);
}

int kvt_client_memfd_create_huge(const char *name, uint64_t bytes, void **map)
{
	if (bytes % KVT_CLIENT_HUGE_PAGE_BYTES)
		return -EINVAL;
	return memfd_make(name, bytes, MFD_HUGETLB, map);
}

/* The parts' memfds into fds and the region r describes into reg (parts and
 * layer allocated, the caller frees them). 0 or -EINVAL. */
static int parts_of(const struct kvt_client_parts *p, const struct kvt_client_ns *ns,
		    int *fds, struct kvt_region *reg, struct kvt_region_part **parts,
		    struct kvt_region_layer **layer)
{
	bool memfd;

	if (!p->parts || !p->layer || p->n_parts == 0 || p->n_parts > KVT_PROTO_MAX_PARTS ||
	    p->layers == 0 || p->layers > KVT_PROTO_MAX_PART_LAYERS)
		return -EINVAL;
	memfd = p->parts[0].memfd >= 0;
	if (!memfd && (p->cuda_ipc_len == 0 || p->cuda_ipc_len > KVT_PROTO_MAX_IPC))
		return -EINVAL;
	*parts = calloc(p->n_parts, sizeof(**parts));
	*layer = calloc(p->layers, sizeof(**layer));
	if (!*parts || !*layer)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->n_parts; i++) {
		const struct kvt_client_part *q = &p->parts[i];

		if ((q->memfd >= 0) != memfd || (!memfd && !q->cuda_ipc))
			return -EINVAL; /* all memfds or all CUDA, each CUDA part a handle */
		fds[i] = q->memfd;
		(*parts)[i] = (struct kvt_region_part){ q->offset, q->bytes, q->cuda_ipc };
	}
	for (uint32_t l = 0; l < p->layers; l++)
		(*layer)[l] = (struct kvt_region_layer){ p->layer[l].part, p->layer[l].offset };
	*reg = (struct kvt_region){
		.ns = ns->handle, .kind = memfd ? KVT_MEM_HOST_MEMFD : KVT_MEM_CUDA_IPC,
		.device = memfd ? 0 : p->device, .layers = p->layers, .pages = p->pages,
		.n_parts = p->n_parts, .ipc_len = memfd ? 0 : p->cuda_ipc_len,
		.kv_stride = p->kv_stride, .page_stride = p->page_stride,
		.parts = *parts, .layer = *layer,
	};
	return 0;
}

int kvt_client_register_parts(struct kvt_client *c, const struct kvt_client_ns *ns,
			      const struct kvt_client_parts *given)
{
	struct kvt_client_parts whole = { .size = sizeof(whole) };
	const struct kvt_client_parts *p = &whole;
	struct kvt_region_part *parts = NULL;
	struct kvt_region_layer *layer = NULL;
	int fds[KVT_PROTO_MAX_PARTS];
	struct kvt_region reg;
	struct call k = { 0 };
	struct kvt_wr w;
	uint32_t region = 0;
	int err;

	if (!c || !ns || kvt_opts_load(&whole, sizeof(whole), given))
		return -EINVAL;
	if (p->why && p->why_len)
		p->why[0] = '\0';
	if (kvt_client_version(c) < 4) {
		err = kvt_client_version(c) ? -EOPNOTSUPP : -EPERM;
		goto out;
	}
	err = parts_of(p, ns, fds, &reg, &parts, &layer);
	if (err)
		goto out;
	kvt_wr_init(&w);
	k.id = new_id(c);
	err = kvt_client_roundtrip(c, &w, kvt_proto_enc_register_parts(&w, k.id, &reg), &k, fds,
				   reg.kind == KVT_MEM_HOST_MEMFD ? (int)reg.n_parts : 0,
				   KVT_OP_REGISTER_PARTS);
	if (err == -EINVAL && k.payload && p->why && p->why_len) {
		struct kvt_region_fault f;

		if (!kvt_proto_rep_region_fault(k.payload, k.hdr.len, &f))
			kvt_region_fault_str(&f, &reg, p->why, p->why_len);
	}
	if (!err)
		err = kvt_proto_rep_u32(k.payload, k.hdr.len, &region);
	free(k.payload);
	if (!err && (region == 0 || region > INT32_MAX))
		err = -EBADMSG;
out:
	free(parts);
	free(layer);
	return err ? err : (int)region;
}
