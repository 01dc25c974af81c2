/* SPDX-License-Identifier: Apache-2.0 */
/* The store of the store crash test and its blocks, shared by the writer
 * process and the checker: a block's bytes are a function of its number. */
#ifndef KVT_TESTS_SSD_STORE_CRASH_BLOCK_H
#define KVT_TESTS_SSD_STORE_CRASH_BLOCK_H

#include <stdio.h>
#include <string.h>

#include "helpers.h"
#include "kvtier/store.h"

/* 2 layers x 1 kv head x 128 dims x bf16 x 64 tokens x K,V = 64 KiB */
#define SC_BLOCK (64u << 10)

/* Puts after which the writer reports progress: four 1 MiB DRAM tiers. */
#define SC_PROGRESS_PUTS 64u

static inline struct kvt_key sc_key(uint32_t n)
{
	struct kvt_key k;

	memset(&k, 0x77, sizeof(k));
	memcpy(k.bytes, &n, sizeof(n));
	return k;
}

static inline void sc_fill(uint32_t n, void *buf)
{
	kvt_test_fill(buf, SC_BLOCK, 0x5eedULL + n);
}

static inline int sc_open(const char *dir, struct kvt_store **store, struct kvt_ns **ns)
{
	struct kvt_store_opts o;
	struct kvt_ns_desc d;
	int rc;

	kvt_store_opts_init(&o, sizeof(o));
	o.dram_bytes = 1 << 20;
	o.dram_huge_pages = false;
	o.ssd_dir = dir;
	o.ssd_bytes = 64 << 20;
	o.ssd_segment_bytes = 2 << 20;
	o.ssd_queue_depth = 4;
	rc = kvt_store_open(&o, store);
	if (rc)
		return rc;
	kvt_ns_desc_init(&d, sizeof(d));
	snprintf(d.model_id, sizeof(d.model_id), "test/crash-model");
	d.layers = 2;
	d.kv_heads = 1;
	d.head_dim = 128;
	d.block_tokens = 64;
	rc = kvt_ns_attach(*store, &d, ns);
	if (rc)
		kvt_store_close(*store);
	return rc;
}

#endif
