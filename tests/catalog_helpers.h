/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers of the tests that drive the store's catalog directly (policies,
 * admission rules): blocks named by small numbers, published into DRAM,
 * evicted by the policy. Include after <cmocka.h>. */
#ifndef KVT_TESTS_CATALOG_HELPERS_H
#define KVT_TESTS_CATALOG_HELPERS_H

#include <stdint.h>
#include <string.h>

#include "store/catalog.h"

/* The key of block `id`: id in its first 4 bytes (little-endian), the rest
 * zero. */
static inline struct kvt_key cat_key(uint32_t id)
{
	struct kvt_key k;

	memset(&k, 0, sizeof(k));
	memcpy(k.bytes, &id, sizeof(id));
	return k;
}

/* The id of record i. */
static inline uint32_t cat_id(const struct kvt_catalog *cat, uint32_t i)
{
	uint32_t id;

	memcpy(&id, kvt_index_rec(cat->idx, i)->key.bytes, sizeof(id));
	return id;
}

/* Publish key k (size bytes) in DRAM under block `parent` (0 = none); its
 * record number. */
static inline uint32_t cat_add_key(struct kvt_catalog *cat, struct kvt_key k, uint32_t parent,
				   uint32_t size)
{
	struct kvt_key p = cat_key(parent);
	uint32_t i;

	assert_int_equal(kvt_index_insert(cat->idx, 0, &k, &i), 0);
	kvt_index_rec(cat->idx, i)->size = size;
	kvt_catalog_publish(cat, i, KVT_TIER_DRAM, parent ? &p : NULL);
	return i;
}

static inline uint32_t cat_add(struct kvt_catalog *cat, uint32_t id, uint32_t parent,
			       uint32_t size)
{
	return cat_add_key(cat, cat_key(id), parent, size);
}

/* The id of DRAM's victim, 0 when there is none. */
static inline uint32_t cat_victim_id(struct kvt_catalog *cat)
{
	uint32_t v = kvt_catalog_victim(cat, KVT_TIER_DRAM);

	return v == KVT_NIL ? 0 : cat_id(cat, v);
}

/* Drop DRAM's victim (there must be one); its id. */
static inline uint32_t cat_evict(struct kvt_catalog *cat)
{
	uint32_t v = kvt_catalog_victim(cat, KVT_TIER_DRAM), id;

	assert_true(v != KVT_NIL);
	id = cat_id(cat, v);
	kvt_catalog_drop(cat, v);
	return id;
}

#endif
