/* SPDX-License-Identifier: Apache-2.0 */
/* The rules a region's layers obey, and their faults in words. */
#include "transport/region.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

/* Parts and offsets beyond this are refused: every sum below stays in i128
 * comfortably, and no memory is that large. */
#define REGION_MAX_BYTES (UINT64_C(1) << 56)

/* No page of a lattice shifted by e meets a page of the unshifted one:
 * |e + k*ps| >= page for every k in [-(pages-1), pages-1]. The distance is
 * convex in k, so the k nearest -e/ps (clamped) are the only ones to try. */
static bool lattice_clear(__int128 e, uint64_t ps, uint32_t pages, uint64_t page)
{
	__int128 span = (__int128)pages - 1, k;

	if (pages == 1 || ps == 0)
		return (e < 0 ? -e : e) >= page;
	k = -e / (__int128)ps;
	if (-e % (__int128)ps < 0)
		k--; /* floor */
	for (__int128 c = k; c <= k + 1; c++) {
		__int128 kc = c < -span ? -span : c > span ? span : c, d = e + kc * ps;

		if ((d < 0 ? -d : d) < page)
			return false;
	}
	return true;
}

struct span {
	uint32_t part, layer;
	uint64_t offset;
};

static int span_cmp(const void *a, const void *b)
{
	const struct span *x = a, *y = b;

	if (x->part != y->part)
		return x->part < y->part ? -1 : 1;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Two layers of one part overlap when a page of one (K or V) meets a page
 * of the other. Only layers whose spans meet are compared: sorted by
 * offset, a layer is checked against those starting before its span ends. */
static int layers_apart(const struct kvt_region *r, uint32_t kvn, uint64_t page,
			uint64_t span, struct kvt_region_fault *f)
{
	struct span *s = malloc((size_t)r->layers * sizeof(*s));

	if (!s)
		return -ENOMEM;
	for (uint32_t l = 0; l < r->layers; l++)
		s[l] = (struct span){ r->layer[l].part, l, r->layer[l].offset };
	qsort(s, r->layers, sizeof(*s), span_cmp);
	for (uint32_t i = 0; i < r->layers; i++) {
		for (uint32_t j = i + 1; j < r->layers && s[j].part == s[i].part &&
		     s[j].offset - s[i].offset < span; j++) {
			__int128 d = (__int128)s[j].offset - s[i].offset;
			bool clear = lattice_clear(d, r->page_stride, r->pages, page);

			if (kvn == 2)
				clear = clear && lattice_clear(d + r->kv_stride, r->page_stride,
							       r->pages, page) &&
					lattice_clear(d - r->kv_stride, r->page_stride,
						      r->pages, page);
			if (!clear) {
				uint32_t a = s[i].layer < s[j].layer ? s[i].layer : s[j].layer;

				*f = (struct kvt_region_fault){ KVT_REGION_LAYERS_OVERLAP, a,
					a == s[i].layer ? s[j].layer : s[i].layer, page };
				free(s);
				return -EINVAL;
			}
		}
	}
	free(s);
	return 0;
}

int kvt_region_check(const struct kvt_region *r, uint32_t layers, uint32_t kvn,
		     uint64_t page, struct kvt_region_fault *f)
{
	uint64_t span;

	*f = (struct kvt_region_fault){ KVT_REGION_SHAPE, 0, layers, page };
	if (r->layers != layers || kvn < 1 || kvn > 2 || page == 0 || r->pages == 0 ||
	    (kvn == 1 && r->kv_stride != 0) || r->kv_stride > REGION_MAX_BYTES ||
	    r->page_stride > REGION_MAX_BYTES / ((uint64_t)r->pages + 1))
		return -EINVAL;
	if (r->pages > 1 && r->page_stride < page) {
		*f = (struct kvt_region_fault){ KVT_REGION_PAGES_OVERLAP, 0, 0, page };
		return -EINVAL;
	}
	if (kvn == 2 && !lattice_clear(r->kv_stride, r->page_stride, r->pages, page)) {
		*f = (struct kvt_region_fault){ KVT_REGION_KV_OVERLAP, 0, 0, page };
		return -EINVAL;
	}
	/* bytes from a layer's offset to the end of its last page */
	span = (kvn - 1) * r->kv_stride + (uint64_t)(r->pages - 1) * r->page_stride + page;
	for (uint32_t l = 0; l < r->layers; l++) {
		const struct kvt_region_layer *y = &r->layer[l];
		const struct kvt_region_part *p;

		if (y->part >= r->n_parts) {
			*f = (struct kvt_region_fault){ KVT_REGION_PART_RANGE, l, y->part, 0 };
			return -EINVAL;
		}
		p = &r->parts[y->part];
		if (y->offset > REGION_MAX_BYTES || p->bytes > REGION_MAX_BYTES ||
		    p->offset > REGION_MAX_BYTES || y->offset + span > p->bytes) {
			*f = (struct kvt_region_fault){ KVT_REGION_PAST_PART, l, y->part,
							y->offset > REGION_MAX_BYTES ? UINT64_MAX :
							y->offset + span };
			return -EINVAL;
		}
	}
	return layers_apart(r, kvn, page, span, f);
}

char *kvt_region_fault_str(const struct kvt_region_fault *f, const struct kvt_region *r,
			   char *buf, size_t len)
{
	const struct kvt_region_layer *y = f->layer < r->layers ? &r->layer[f->layer] : NULL;
	const struct kvt_region_layer *o = f->other < r->layers ? &r->layer[f->other] : NULL;
	const uint64_t ps = r->page_stride, kv = r->kv_stride;

	switch (f->kind) {
	case KVT_REGION_SHAPE:
		if (r->layers != f->other)
			snprintf(buf, len, "the memory has %" PRIu32 " layers, the namespace %"
				 PRIu32, r->layers, f->other);
		else
			snprintf(buf, len, "strides not the namespace's (kv_stride %" PRIu64
				 ", page_stride %" PRIu64 ", %" PRIu32 " pages of %" PRIu64
				 " bytes; a layout without V wants kv_stride 0)", kv, ps, r->pages,
				 f->value);
		break;
	case KVT_REGION_PART_RANGE:
		snprintf(buf, len, "layer %" PRIu32 ": part %" PRIu32 " out of range (the "
			 "region has %" PRIu32 " parts)", f->layer, f->other, r->n_parts);
		break;
	case KVT_REGION_PAST_PART:
		snprintf(buf, len, "layer %" PRIu32 ": at offset %" PRIu64 ", its last page ends "
			 "at byte %" PRIu64 ", past part %" PRIu32 " (%" PRIu64 " bytes; "
			 "page_stride %" PRIu64 ", kv_stride %" PRIu64 ", %" PRIu32 " pages)",
			 f->layer, y ? y->offset : 0, f->value, f->other,
			 f->other < r->n_parts ? r->parts[f->other].bytes : 0, ps, kv, r->pages);
		break;
	case KVT_REGION_PAGES_OVERLAP:
		snprintf(buf, len, "layer %" PRIu32 ": page_stride %" PRIu64 " is shorter than "
			 "a page (%" PRIu64 " bytes): its pages overlap", f->layer, ps, f->value);
		break;
	case KVT_REGION_KV_OVERLAP:
		snprintf(buf, len, "layer %" PRIu32 ": kv_stride %" PRIu64 " puts V pages on K "
			 "pages (page_stride %" PRIu64 ", %" PRIu32 " pages of %" PRIu64 " bytes)",
			 f->layer, kv, ps, r->pages, f->value);
		break;
	case KVT_REGION_LAYERS_OVERLAP:
		snprintf(buf, len, "layer %" PRIu32 " (offset %" PRIu64 ") overlaps layer %"
			 PRIu32 " (offset %" PRIu64 ") in part %" PRIu32 " (page_stride %" PRIu64
			 ", kv_stride %" PRIu64 ")", f->layer, y ? y->offset : 0, f->other,
			 o ? o->offset : 0, y ? y->part : 0, ps, kv);
		break;
	default:
		snprintf(buf, len, "layout refused (fault %" PRIu32 ")", f->kind);
	}
	return buf;
}
