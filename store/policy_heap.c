/* SPDX-License-Identifier: Apache-2.0 */
/* The min-heap shared by "lfu" and "cost"; see policy_heap.h. */
#include "store/policy_heap.h"

#include <errno.h>
#include <stdlib.h>

static inline struct kvt_rec *rec(const struct kvt_policy_heap *h, uint32_t i)
{
	return kvt_index_rec(h->idx, i);
}

/* a orders before b: smaller value, or equal value and used longer ago */
static inline bool before(const struct kvt_rec *a, const struct kvt_rec *b)
{
	if (a->pval != b->pval)
		return a->pval < b->pval;
	return (int32_t)(a->pprev - b->pprev) < 0;
}

static inline void put(struct kvt_policy_heap *h, uint32_t pos, uint32_t i)
{
	h->v[pos] = i;
	rec(h, i)->pnext = pos;
}

static void sift_up(struct kvt_policy_heap *h, uint32_t pos)
{
	uint32_t i = h->v[pos];
	struct kvt_rec *r = rec(h, i);

	while (pos > 0) {
		uint32_t up = (pos - 1) / 2;

		if (!before(r, rec(h, h->v[up])))
			break;
		put(h, pos, h->v[up]);
		pos = up;
	}
	put(h, pos, i);
}

static void sift_down(struct kvt_policy_heap *h, uint32_t pos)
{
	uint32_t i = h->v[pos];
	struct kvt_rec *r = rec(h, i);

	for (;;) {
		uint32_t c = 2 * pos + 1;

		if (c >= h->n)
			break;
		if (c + 1 < h->n && before(rec(h, h->v[c + 1]), rec(h, h->v[c])))
			c++;
		if (!before(rec(h, h->v[c]), r))
			break;
		put(h, pos, h->v[c]);
		pos = c;
	}
	put(h, pos, i);
}

void kvt_policy_heap_init(struct kvt_policy_heap *h, struct kvt_index *idx)
{
	h->idx = idx;
	h->v = NULL;
	h->n = h->cap = 0;
	h->tick = 0;
}

void kvt_policy_heap_fini(struct kvt_policy_heap *h)
{
	free(h->v);
	h->v = NULL;
	h->n = h->cap = 0;
}

bool kvt_policy_heap_has(const struct kvt_policy_heap *h, uint32_t i)
{
	uint32_t pos = rec(h, i)->pnext;

	return pos < h->n && h->v[pos] == i;
}

int kvt_policy_heap_push(struct kvt_policy_heap *h, uint32_t i, uint64_t pval)
{
	struct kvt_rec *r = rec(h, i);

	if (h->n == h->cap) {
		uint32_t cap = h->cap ? h->cap * 2 : 1024;
		uint32_t *v = realloc(h->v, (size_t)cap * sizeof(*v));

		if (!v) {
			r->pnext = KVT_NIL;
			return -ENOMEM;
		}
		h->v = v;
		h->cap = cap;
	}
	r->pval = pval;
	r->pprev = ++h->tick;
	h->v[h->n] = i;
	r->pnext = h->n++;
	sift_up(h, r->pnext);
	return 0;
}

void kvt_policy_heap_update(struct kvt_policy_heap *h, uint32_t i, uint64_t pval)
{
	struct kvt_rec *r = rec(h, i);
	uint64_t old = r->pval;

	r->pval = pval;
	r->pprev = ++h->tick;
	/* a fresher tick only ever moves a record later, as does a larger value */
	if (pval < old)
		sift_up(h, r->pnext);
	else
		sift_down(h, r->pnext);
}

void kvt_policy_heap_remove(struct kvt_policy_heap *h, uint32_t i)
{
	struct kvt_rec *r = rec(h, i);
	uint32_t pos = r->pnext;

	if (!kvt_policy_heap_has(h, i))
		return;
	r->pnext = KVT_NIL;
	if (--h->n == pos)
		return;
	uint32_t moved = h->v[h->n];

	put(h, pos, moved);
	sift_up(h, pos);
	sift_down(h, rec(h, moved)->pnext);
}
