/* SPDX-License-Identifier: Apache-2.0 */
/* On-disk format of the SSD tier (format 2): segment superblocks, record
 * headers, and segment summaries.
 *
 * A segment file starts with a superblock page (what recovery needs to adopt
 * the file without any other file: format, directory salt, segment id, a
 * nonce naming this file), then a sequence of records, each on a 4 KiB
 * boundary:
 *   [header, 4096 bytes][payload, stored_len bytes, zero-padded to 4 KiB]
 * A tombstone is a header alone (flag KVT_SSD_F_TOMB, no payload): the key
 * was removed; it hides every older record of the key.
 *
 * A summary (seg-<id>.sum) lists a segment's records as their headers say,
 * so opening reads it instead of the whole segment. It is trusted only when
 * it names the same directory salt, segment id and nonce as the segment's
 * superblock, its checksum holds, and its entries are in order and in range.
 *
 * All integers are little-endian. Record and summary checksums are XXH3-64
 * seeded with the directory's random salt, so bytes inside a block's payload
 * can never pass for a header when recovery rescans past a torn record. */
#ifndef KVT_TIERS_SSD_FORMAT_H
#define KVT_TIERS_SSD_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/types.h"

#define KVT_SSD_PAGE 4096u
#define KVT_SSD_HDR_BYTES KVT_SSD_PAGE
#define KVT_SSD_FORMAT 2u
#define KVT_SSD_MAGIC "KVTSSDR2"       /* record header */
#define KVT_SSD_SB_MAGIC "KVTSSDS2"    /* segment superblock */
#define KVT_SSD_SUM_MAGIC "KVTSSDX2"   /* segment summary */
#define KVT_SSD_MAGIC_BYTES 8

/* Segment ids are 1 .. KVT_SSD_MAX_SEG_ID: far from wrapping, and any other
 * file name is not one of ours. */
#define KVT_SSD_MAX_SEG_ID ((1ULL << 48) - 1)

#define KVT_SSD_F_PARENT 1u /* the record has a parent key */
#define KVT_SSD_F_TOMB 2u   /* a tombstone: the key was removed */

/* A decoded record header. */
struct kvt_ssd_hdr {
	uint64_t seq;          /* tier-wide write sequence: the newest record of a key wins */
	uint64_t ns_id;        /* 64-bit namespace id (the store's digest of its salt) */
	struct kvt_key key;
	struct kvt_key parent; /* zero unless flags & KVT_SSD_F_PARENT */
	uint32_t flags;
	uint8_t codec;         /* enum kvt_codec_id */
	uint64_t raw_len;      /* bytes of the block (0 for a tombstone) */
	uint64_t stored_len;   /* bytes of the payload on disk (before padding) */
	uint64_t payload_sum;  /* XXH3-64 (seed 0) of the stored payload */
};

/* A decoded segment superblock. */
struct kvt_ssd_sb {
	uint32_t format;
	uint64_t salt;         /* the directory's */
	uint64_t seg_id;
	uint64_t seg_bytes;
	uint64_t nonce;        /* random, drawn when the file was made */
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

/* Whether a page starts with a record header's magic (valid or not): a page
 * that does but does not decode is a damaged record, not free space. */
bool kvt_ssd_hdr_magic(const void *buf);

/* Write sb as a 4096-byte superblock into buf. */
void kvt_ssd_sb_encode(const struct kvt_ssd_sb *sb, void *buf);

/* Decode a superblock page. Returns 0, -ENOENT when the page does not start
 * with the superblock magic (not a format 2 segment), -EBADMSG when it does
 * but its checksum or fields are wrong. */
int kvt_ssd_sb_decode(const void *buf, struct kvt_ssd_sb *sb);

/* A summary entry: a record's header and where it starts. */
struct kvt_ssd_sum_entry {
	struct kvt_ssd_hdr h;
	uint32_t page;
};

/* What a summary says about its segment. */
struct kvt_ssd_sum_info {
	uint64_t seg_id;
	uint64_t nonce;
	uint32_t seg_pages;
	uint32_t covered;     /* the entries are every record in pages [1, covered) */
	bool sealed;          /* the segment takes no more records */
};

/* Encode a summary of n entries (by page, ascending) into a malloc'd buffer.
 * Returns its length and *out, or 0 when out of memory. */
size_t kvt_ssd_sum_encode(const struct kvt_ssd_sum_info *info, const struct kvt_ssd_sum_entry *e,
			  size_t n, uint64_t salt, void **out);

/* Decode and check a summary of len bytes: magic, version, checksum (seeded
 * with salt), entries in page order, not overlapping, inside [1, covered),
 * with lengths and codecs that decode. Returns 0 with *e (malloc'd, *n
 * entries; NULL when 0) and *info, -EBADMSG, or -ENOMEM. */
int kvt_ssd_sum_decode(const void *buf, size_t len, uint64_t salt,
		       struct kvt_ssd_sum_info *info, struct kvt_ssd_sum_entry **e, size_t *n);

#endif /* KVT_TIERS_SSD_FORMAT_H */
