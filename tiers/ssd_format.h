/* On-disk format of the SSD tier: the record header.
 *
 * A segment file is a sequence of records, each starting on a 4 KiB boundary:
 *   [header, 4096 bytes][payload, stored_len bytes, zero-padded to 4 KiB]
 * All integers are little-endian. The header's checksum is XXH3-64 seeded with
 * the data directory's random salt, so bytes inside a block's payload can never
 * pass for a header when recovery rescans past a torn record. */
#ifndef KVT_TIERS_SSD_FORMAT_H
#define KVT_TIERS_SSD_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/types.h"

#define KVT_SSD_PAGE 4096u
#define KVT_SSD_HDR_BYTES KVT_SSD_PAGE
#define KVT_SSD_MAGIC "KVTSSDR1"
#define KVT_SSD_VERSION 1u

#define KVT_SSD_F_PARENT 1u /* the record has a parent key */

/* A decoded header. */
struct kvt_ssd_hdr {
	uint64_t seq;          /* tier-wide write sequence: the newest record of a key wins */
	uint64_t ns_id;        /* 64-bit namespace id (the store's digest of its salt) */
	struct kvt_key key;
	struct kvt_key parent; /* zero unless flags & KVT_SSD_F_PARENT */
	uint32_t flags;
	uint8_t codec;         /* enum kvt_codec_id */
	uint64_t raw_len;      /* bytes of the block */
	uint64_t stored_len;   /* bytes of the payload on disk (before padding) */
	uint64_t payload_sum;  /* XXH3-64 (seed 0) of the stored payload */
};

/* Bytes a record of stored_len payload bytes takes on disk, header included. */
static inline uint64_t kvt_ssd_record_bytes(uint64_t stored_len)
{
	return KVT_SSD_HDR_BYTES + (stored_len + KVT_SSD_PAGE - 1) / KVT_SSD_PAGE * KVT_SSD_PAGE;
}

/* Write h as a 4096-byte header into buf (zeroing the rest), with its
 * checksum seeded by salt. */
void kvt_ssd_hdr_encode(const struct kvt_ssd_hdr *h, uint64_t salt, void *buf);

/* Decode a 4096-byte header. Returns 0, or -EBADMSG when the magic, version,
 * checksum or lengths are wrong (a torn, foreign or zero page). */
int kvt_ssd_hdr_decode(const void *buf, uint64_t salt, struct kvt_ssd_hdr *h);

#endif /* KVT_TIERS_SSD_FORMAT_H */
