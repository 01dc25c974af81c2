/* SPDX-License-Identifier: Apache-2.0 */
/* Staging buffers of the SSD tier, kept for reuse. A record that cannot go
 * to the device straight from the caller's memory (encoded by a codec, or
 * in memory that is not page-aligned) is written from a stage, and read
 * into one before it is verified and decoded. Allocated fresh for each
 * record, a stage of 2 MiB cost a mapping, 512 page faults (the kernel
 * zeroing each page) and an unmapping: more CPU than encoding the block
 * with shuf16-pack4. The tier keeps returned stages, up to a byte limit, and
 * hands them out again. */
#ifndef KVT_TIERS_SSD_STAGE_H
#define KVT_TIERS_SSD_STAGE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define KVT_SSD_STAGES_MAX 64 /* stages kept at most */

struct kvt_ssd_stage_buf {
	char *buf; /* page-aligned */
	size_t cap;
};

/* Owned by its tier: made at open, freed at close. */
struct kvt_ssd_stages {
	pthread_mutex_t lock;
	size_t keep_bytes; /* kept bytes at most */
	size_t kept_bytes;
	size_t n;
	struct kvt_ssd_stage_buf kept[KVT_SSD_STAGES_MAX];
	uint64_t made, reused; /* stages allocated, and handed out again */
};

void kvt_ssd_stages_init(struct kvt_ssd_stages *p, size_t keep_bytes);

/* Frees every kept stage. Every stage handed out must be back (or freed). */
void kvt_ssd_stages_fini(struct kvt_ssd_stages *p);

/* A page-aligned stage of at least bytes: a kept one whose size is within
 * 1.5x of bytes rounded up to 64 KiB, else a new one of that size. Its size
 * in *cap, to give back with it. NULL when out of memory. */
char *kvt_ssd_stage_get(struct kvt_ssd_stages *p, size_t bytes, size_t *cap);

/* Give a stage back: kept while the limits allow, else freed. NULL is a
 * no-op. */
void kvt_ssd_stage_put(struct kvt_ssd_stages *p, char *buf, size_t cap);

#endif /* KVT_TIERS_SSD_STAGE_H */
