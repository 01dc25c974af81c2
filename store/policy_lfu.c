/* SPDX-License-Identifier: Apache-2.0 */
/* "lfu": least frequently used first, least recently used among equals.
 *
 * A record's use count lives in pval (saturating); the heap orders by it and
 * by the use tick. A record that leaves the tier forgets its count: it comes
 * back, if ever, as new. */
#include <errno.h>
#include <stdlib.h>

#include "store/policy.h"
#include "store/policy_heap.h"

static int lfu_init(struct kvt_policy *p)
{
	struct kvt_policy_heap *h = malloc(sizeof(*h));

	if (!h)
		return -ENOMEM;
	kvt_policy_heap_init(h, p->idx);
	p->state = h;
	return 0;
}

static void lfu_fini(struct kvt_policy *p)
{
	if (p->state)
		kvt_policy_heap_fini(p->state);
	free(p->state);
	p->state = NULL;
}

static void lfu_insert(struct kvt_policy *p, uint32_t i)
{
	/* on -ENOMEM the record stays off the heap: kept, never a victim */
	(void)kvt_policy_heap_push(p->state, i, 1);
}

static void lfu_touch(struct kvt_policy *p, uint32_t i)
{
	struct kvt_policy_heap *h = p->state;
	uint64_t n;

	n = kvt_index_rec(p->idx, i)->pval;
	n = n == UINT64_MAX ? n : n + 1;
	if (kvt_policy_heap_has(h, i))
		kvt_policy_heap_update(h, i, n);
	else
		kvt_index_rec(p->idx, i)->pval = n;
}

/* Back from a hold: its count goes on. */
static void lfu_restore(struct kvt_policy *p, uint32_t i)
{
	(void)kvt_policy_heap_push(p->state, i, kvt_index_rec(p->idx, i)->pval);
}

static void lfu_remove(struct kvt_policy *p, uint32_t i)
{
	kvt_policy_heap_remove(p->state, i);
}

static uint32_t lfu_victim(struct kvt_policy *p)
{
	return kvt_policy_heap_min(p->state);
}

const struct kvt_policy_ops kvt_policy_lfu_ops = {
	.name = "lfu",
	.init = lfu_init,
	.fini = lfu_fini,
	.insert = lfu_insert,
	.touch = lfu_touch,
	.remove = lfu_remove,
	.restore = lfu_restore,
	.leaf_changed = NULL,
	.victim = lfu_victim,
};
