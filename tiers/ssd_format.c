/* The record header, encoded field by field in little-endian. */
#include "tiers/ssd_format.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

#include <xxhash.h>

#include "tiers/codec.h"

/* Field offsets; bytes [OFF_SUM + 8, 4096) are zero. */
enum {
	OFF_MAGIC = 0,
	OFF_VERSION = 8,
	OFF_HDR_BYTES = 12,
	OFF_SEQ = 16,
	OFF_NS = 24,
	OFF_KEY = 32,
	OFF_PARENT = 48,
	OFF_FLAGS = 64,
	OFF_CODEC = 68,
	OFF_RAW = 72,
	OFF_STORED = 80,
	OFF_PAYLOAD_SUM = 88,
	OFF_SUM = 96,
};

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

void kvt_ssd_hdr_encode(const struct kvt_ssd_hdr *h, uint64_t salt, void *buf)
{
	uint8_t *p = buf;

	memset(p, 0, KVT_SSD_HDR_BYTES);
	memcpy(p + OFF_MAGIC, KVT_SSD_MAGIC, 8);
	put32(p + OFF_VERSION, KVT_SSD_VERSION);
	put32(p + OFF_HDR_BYTES, KVT_SSD_HDR_BYTES);
	put64(p + OFF_SEQ, h->seq);
	put64(p + OFF_NS, h->ns_id);
	memcpy(p + OFF_KEY, h->key.bytes, KVT_KEY_BYTES);
	memcpy(p + OFF_PARENT, h->parent.bytes, KVT_KEY_BYTES);
	put32(p + OFF_FLAGS, h->flags);
	p[OFF_CODEC] = h->codec;
	put64(p + OFF_RAW, h->raw_len);
	put64(p + OFF_STORED, h->stored_len);
	put64(p + OFF_PAYLOAD_SUM, h->payload_sum);
	put64(p + OFF_SUM, XXH3_64bits_withSeed(p, OFF_SUM, salt));
}

int kvt_ssd_hdr_decode(const void *buf, uint64_t salt, struct kvt_ssd_hdr *h)
{
	const uint8_t *p = buf;

	if (memcmp(p + OFF_MAGIC, KVT_SSD_MAGIC, 8) || get32(p + OFF_VERSION) != KVT_SSD_VERSION ||
	    get32(p + OFF_HDR_BYTES) != KVT_SSD_HDR_BYTES ||
	    get64(p + OFF_SUM) != XXH3_64bits_withSeed(p, OFF_SUM, salt))
		return -EBADMSG;
	h->seq = get64(p + OFF_SEQ);
	h->ns_id = get64(p + OFF_NS);
	memcpy(h->key.bytes, p + OFF_KEY, KVT_KEY_BYTES);
	memcpy(h->parent.bytes, p + OFF_PARENT, KVT_KEY_BYTES);
	h->flags = get32(p + OFF_FLAGS);
	h->codec = p[OFF_CODEC];
	h->raw_len = get64(p + OFF_RAW);
	h->stored_len = get64(p + OFF_STORED);
	h->payload_sum = get64(p + OFF_PAYLOAD_SUM);
	if (!kvt_codec_name((enum kvt_codec_id)h->codec) ||
	    (h->codec == KVT_CODEC_RAW && h->stored_len != h->raw_len) ||
	    h->stored_len > kvt_codec_bound(h->raw_len))
		return -EBADMSG;
	return 0;
}
