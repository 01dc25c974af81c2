/* SPDX-License-Identifier: Apache-2.0 */
/* Little-endian wire helpers shared by the frame codecs (proto.c, the
 * sidecar protocol; peer_proto.c, the peer protocol): a bounds-checked reader
 * that never reads past its buffer and remembers the first overrun, and
 * stores of fixed-width integers.
 *
 * A codec reads every field with kvt_rd_*; a read past the end returns 0 and
 * marks the reader bad, so a decoder reads all its fields and checks once with
 * kvt_rd_done(), which also insists the whole buffer was consumed. */
#ifndef KVT_TRANSPORT_WIRE_H
#define KVT_TRANSPORT_WIRE_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kvt_rd {
	const uint8_t *p;
	size_t len, off;
	bool bad;
};

static inline uint16_t kvt_get_u16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t kvt_get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t kvt_get_u64(const uint8_t *p)
{
	return (uint64_t)kvt_get_u32(p) | (uint64_t)kvt_get_u32(p + 4) << 32;
}

static inline void kvt_put_u16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void kvt_put_u32(uint8_t *p, uint32_t v)
{
	kvt_put_u16(p, (uint16_t)v);
	kvt_put_u16(p + 2, (uint16_t)(v >> 16));
}

static inline void kvt_put_u64(uint8_t *p, uint64_t v)
{
	kvt_put_u32(p, (uint32_t)v);
	kvt_put_u32(p + 4, (uint32_t)(v >> 32));
}

/* The next n bytes, or NULL (and the reader marked bad) past the end. */
static inline const uint8_t *kvt_rd_take(struct kvt_rd *r, size_t n)
{
	const uint8_t *p;

	if (r->bad || n > r->len - r->off) {
		r->bad = true;
		return NULL;
	}
	p = r->p + r->off;
	r->off += n;
	return p;
}

static inline uint8_t kvt_rd_u8(struct kvt_rd *r)
{
	const uint8_t *p = kvt_rd_take(r, 1);
	return p ? p[0] : 0;
}

static inline uint16_t kvt_rd_u16(struct kvt_rd *r)
{
	const uint8_t *p = kvt_rd_take(r, 2);
	return p ? kvt_get_u16(p) : 0;
}

static inline uint32_t kvt_rd_u32(struct kvt_rd *r)
{
	const uint8_t *p = kvt_rd_take(r, 4);
	return p ? kvt_get_u32(p) : 0;
}

static inline uint64_t kvt_rd_u64(struct kvt_rd *r)
{
	const uint8_t *p = kvt_rd_take(r, 8);
	return p ? kvt_get_u64(p) : 0;
}

/* A fixed-size field that must be zero (reserved). */
static inline void kvt_rd_zero(struct kvt_rd *r, size_t n)
{
	const uint8_t *p = kvt_rd_take(r, n);

	for (size_t i = 0; p && i < n; i++)
		if (p[i])
			r->bad = true;
}

/* 0 when the whole buffer was consumed and nothing was out of bounds or
 * reserved-but-set, else -EBADMSG. */
static inline int kvt_rd_done(const struct kvt_rd *r)
{
	return !r->bad && r->off == r->len ? 0 : -EBADMSG;
}

#endif /* KVT_TRANSPORT_WIRE_H */
