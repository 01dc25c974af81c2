/* SPDX-License-Identifier: Apache-2.0 */
/* What every storage tier's user needs beside the ops: see tier.h. */
#include "tiers/tier.h"

int kvt_tier_run(struct kvt_storage_tier *t, struct kvt_tier_batch *b)
{
	int ok = 0;

	if (!t->ops->submit(t, b))
		t->ops->wait(t, b);
	for (size_t i = 0; i < b->n; i++)
		ok += b->io[i].res == 0;
	return ok;
}

size_t kvt_tier_counters_copy(struct kvt_counter *out, size_t max, const struct kvt_counter *c,
			      size_t n)
{
	size_t k = n < max ? n : max;

	for (size_t i = 0; i < k; i++)
		out[i] = c[i];
	return k;
}
