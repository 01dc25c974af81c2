/* SPDX-License-Identifier: Apache-2.0 */
/* The SSD tier's on-disk structures, encoded field by field in little-endian. */
#include "tiers/ssd_format.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "tiers/codec.h"

/* Record header field offsets; bytes [HDR_SUM + 8, 4096) are zero. */
enum {
	HDR_MAGIC = 0,
	HDR_VERSION = 8,
	HDR_BYTES = 12,
	HDR_SEQ = 16,
	HDR_NS = 24,
	HDR_KEY = 32,
	HDR_PARENT = 48,
	HDR_FLAGS = 64,
	HDR_CODEC = 68,
	HDR_RAW = 72,
	HDR_STORED = 80,
	HDR_PAYLOAD_SUM = 88,
	HDR_SUM = 96,
};

/* Superblock field offsets; bytes [SB_SUM + 8, 4096) are zero. */
enum {
	SB_MAGIC = 0,
	SB_FORMAT = 8,
	SB_BYTES = 12,
	SB_SALT = 16,
	SB_SEG_ID = 24,
	SB_SEG_BYTES = 32,
	SB_NONCE = 40,
	SB_SUM = 48,
};

/* Summary: a 64-byte head, entries, then the checksum of all before it. */
enum {
	SUM_MAGIC = 0,
	SUM_VERSION = 8,
	SUM_ENTRY_BYTES = 12,
	SUM_SEG_ID = 16,
	SUM_NONCE = 24,
	SUM_SEG_PAGES = 32,
	SUM_COVERED = 36,
	SUM_FLAGS = 40,
	SUM_N = 44,
	SUM_HEAD = 64,
};

/* Summary entry offsets. */
enum {
	E_PAGE = 0,
	E_FLAGS = 4,
	E_SEQ = 8,
	E_NS = 16,
	E_KEY = 24,
	E_PARENT = 40,
	E_RAW = 56,
	E_STORED = 64,
	E_PAYLOAD_SUM = 72,
	E_CODEC = 80,
	E_BYTES = 88,
};

#define SUM_F_SEALED 1u

static void put64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return le64toh(v);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

/* Whether a decoded header's lengths and codec are possible. */
static bool hdr_sane(const struct kvt_ssd_hdr *h)
{
	if (h->flags & ~(KVT_SSD_F_PARENT | KVT_SSD_F_TOMB))
		return false;
	if (h->flags & KVT_SSD_F_TOMB)
		return h->raw_len == 0 && h->stored_len == 0 && h->codec == 0;
	return h->raw_len && kvt_codec_name((enum kvt_codec_id)h->codec) &&
	       (h->codec != 0 || h->stored_len == h->raw_len) &&
	       h->stored_len <= kvt_codec_bound(h->raw_len);
}

void kvt_ssd_hdr_encode(const struct kvt_ssd_hdr *h, uint64_t salt, void *buf)
{
	uint8_t *p = buf;

	memset(p, 0, KVT_SSD_HDR_BYTES);
	memcpy(p + HDR_MAGIC, KVT_SSD_MAGIC, KVT_SSD_MAGIC_BYTES);
	put32(p + HDR_VERSION, KVT_SSD_FORMAT);
	put32(p + HDR_BYTES, KVT_SSD_HDR_BYTES);
	put64(p + HDR_SEQ, h->seq);
	put64(p + HDR_NS, h->ns_id);
	memcpy(p + HDR_KEY, h->key.bytes, KVT_KEY_BYTES);
	memcpy(p + HDR_PARENT, h->parent.bytes, KVT_KEY_BYTES);
	put32(p + HDR_FLAGS, h->flags);
	p[HDR_CODEC] = h->codec;
	put64(p + HDR_RAW, h->raw_len);
	put64(p + HDR_STORED, h->stored_len);
	put64(p + HDR_PAYLOAD_SUM, h->payload_sum);
	put64(p + HDR_SUM, XXH3_64bits_withSeed(p, HDR_SUM, salt));
}

bool kvt_ssd_hdr_magic(const void *buf)
{
	return !memcmp(buf, KVT_SSD_MAGIC, KVT_SSD_MAGIC_BYTES);
}

int kvt_ssd_hdr_decode(const void *buf, uint64_t salt, struct kvt_ssd_hdr *h)
{
	const uint8_t *p = buf;

	if (memcmp(p + HDR_MAGIC, KVT_SSD_MAGIC, KVT_SSD_MAGIC_BYTES) ||
	    get32(p + HDR_VERSION) != KVT_SSD_FORMAT || get32(p + HDR_BYTES) != KVT_SSD_HDR_BYTES ||
	    get64(p + HDR_SUM) != XXH3_64bits_withSeed(p, HDR_SUM, salt))
		return -EBADMSG;
	h->seq = get64(p + HDR_SEQ);
	h->ns_id = get64(p + HDR_NS);
	memcpy(h->key.bytes, p + HDR_KEY, KVT_KEY_BYTES);
	memcpy(h->parent.bytes, p + HDR_PARENT, KVT_KEY_BYTES);
	h->flags = get32(p + HDR_FLAGS);
	h->codec = p[HDR_CODEC];
	h->raw_len = get64(p + HDR_RAW);
	h->stored_len = get64(p + HDR_STORED);
	h->payload_sum = get64(p + HDR_PAYLOAD_SUM);
	return hdr_sane(h) ? 0 : -EBADMSG;
}

void kvt_ssd_sb_encode(const struct kvt_ssd_sb *sb, void *buf)
{
	uint8_t *p = buf;

	memset(p, 0, KVT_SSD_PAGE);
	memcpy(p + SB_MAGIC, KVT_SSD_SB_MAGIC, KVT_SSD_MAGIC_BYTES);
	put32(p + SB_FORMAT, KVT_SSD_FORMAT);
	put32(p + SB_BYTES, KVT_SSD_PAGE);
	put64(p + SB_SALT, sb->salt);
	put64(p + SB_SEG_ID, sb->seg_id);
	put64(p + SB_SEG_BYTES, sb->seg_bytes);
	put64(p + SB_NONCE, sb->nonce);
	/* seed 0: recovery reads it before it knows the salt */
	put64(p + SB_SUM, XXH3_64bits(p, SB_SUM));
}

int kvt_ssd_sb_decode(const void *buf, struct kvt_ssd_sb *sb)
{
	const uint8_t *p = buf;

	if (memcmp(p + SB_MAGIC, KVT_SSD_SB_MAGIC, KVT_SSD_MAGIC_BYTES))
		return -ENOENT;
	if (get64(p + SB_SUM) != XXH3_64bits(p, SB_SUM) || get32(p + SB_BYTES) != KVT_SSD_PAGE)
		return -EBADMSG;
	sb->format = get32(p + SB_FORMAT);
	sb->salt = get64(p + SB_SALT);
	sb->seg_id = get64(p + SB_SEG_ID);
	sb->seg_bytes = get64(p + SB_SEG_BYTES);
	sb->nonce = get64(p + SB_NONCE);
	if (sb->format != KVT_SSD_FORMAT || !sb->seg_id || sb->seg_id > KVT_SSD_MAX_SEG_ID ||
	    sb->seg_bytes % KVT_SSD_PAGE || sb->seg_bytes < 2 * KVT_SSD_PAGE)
		return -EBADMSG;
	return 0;
}

size_t kvt_ssd_sum_encode(const struct kvt_ssd_sum_info *info, const struct kvt_ssd_sum_entry *e,
			  size_t n, uint64_t salt, void **out)
{
	size_t len = SUM_HEAD + n * E_BYTES + 8;
	uint8_t *p = calloc(1, len);

	*out = p;
	if (!p)
		return 0;
	memcpy(p + SUM_MAGIC, KVT_SSD_SUM_MAGIC, KVT_SSD_MAGIC_BYTES);
	put32(p + SUM_VERSION, KVT_SSD_FORMAT);
	put32(p + SUM_ENTRY_BYTES, E_BYTES);
	put64(p + SUM_SEG_ID, info->seg_id);
	put64(p + SUM_NONCE, info->nonce);
	put32(p + SUM_SEG_PAGES, info->seg_pages);
	put32(p + SUM_COVERED, info->covered);
	put32(p + SUM_FLAGS, info->sealed ? SUM_F_SEALED : 0);
	put32(p + SUM_N, (uint32_t)n);
	for (size_t i = 0; i < n; i++) {
		uint8_t *q = p + SUM_HEAD + i * E_BYTES;
		const struct kvt_ssd_hdr *h = &e[i].h;

		put32(q + E_PAGE, e[i].page);
		put32(q + E_FLAGS, h->flags);
		put64(q + E_SEQ, h->seq);
		put64(q + E_NS, h->ns_id);
		memcpy(q + E_KEY, h->key.bytes, KVT_KEY_BYTES);
		memcpy(q + E_PARENT, h->parent.bytes, KVT_KEY_BYTES);
		put64(q + E_RAW, h->raw_len);
		put64(q + E_STORED, h->stored_len);
		put64(q + E_PAYLOAD_SUM, h->payload_sum);
		q[E_CODEC] = h->codec;
	}
	put64(p + len - 8, XXH3_64bits_withSeed(p, len - 8, salt));
	return len;
}

int kvt_ssd_sum_decode(const void *buf, size_t len, uint64_t salt,
		       struct kvt_ssd_sum_info *info, struct kvt_ssd_sum_entry **out, size_t *n_out)
{
	const uint8_t *p = buf;
	struct kvt_ssd_sum_entry *e = NULL;
	uint64_t next = 1;
	size_t n;

	*out = NULL;
	*n_out = 0;
	if (len < SUM_HEAD + 8 || memcmp(p + SUM_MAGIC, KVT_SSD_SUM_MAGIC, KVT_SSD_MAGIC_BYTES) ||
	    get32(p + SUM_VERSION) != KVT_SSD_FORMAT || get32(p + SUM_ENTRY_BYTES) != E_BYTES)
		return -EBADMSG;
	n = get32(p + SUM_N);
	if (len != SUM_HEAD + n * E_BYTES + 8 ||
	    get64(p + len - 8) != XXH3_64bits_withSeed(p, len - 8, salt))
		return -EBADMSG;
	info->seg_id = get64(p + SUM_SEG_ID);
	info->nonce = get64(p + SUM_NONCE);
	info->seg_pages = get32(p + SUM_SEG_PAGES);
	info->covered = get32(p + SUM_COVERED);
	info->sealed = get32(p + SUM_FLAGS) & SUM_F_SEALED;
	if (info->covered < 1 || info->covered > info->seg_pages)
		return -EBADMSG;
	if (n && !(e = calloc(n, sizeof(*e))))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const uint8_t *q = p + SUM_HEAD + i * E_BYTES;
		struct kvt_ssd_hdr *h = &e[i].h;

		e[i].page = get32(q + E_PAGE);
		h->flags = get32(q + E_FLAGS);
		h->seq = get64(q + E_SEQ);
		h->ns_id = get64(q + E_NS);
		memcpy(h->key.bytes, q + E_KEY, KVT_KEY_BYTES);
		memcpy(h->parent.bytes, q + E_PARENT, KVT_KEY_BYTES);
		h->raw_len = get64(q + E_RAW);
		h->stored_len = get64(q + E_STORED);
		h->payload_sum = get64(q + E_PAYLOAD_SUM);
		h->codec = q[E_CODEC];
		/* in order, apart, and inside what the summary covers */
		if (!hdr_sane(h) || e[i].page < next ||
		    (uint64_t)e[i].page + kvt_ssd_record_bytes(h->stored_len) / KVT_SSD_PAGE >
			    info->covered) {
			free(e);
			return -EBADMSG;
		}
		next = e[i].page + kvt_ssd_record_bytes(h->stored_len) / KVT_SSD_PAGE;
	}
	*out = e;
	*n_out = n;
	return 0;
}
