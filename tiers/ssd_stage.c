/* SPDX-License-Identifier: Apache-2.0 */
/* Staging buffers of the SSD tier, kept for reuse (tiers/ssd_stage.h). */
#include "tiers/ssd_stage.h"

#include <stdlib.h>

#define PAGE 4096
#define ROUND (64u << 10)

void kvt_ssd_stages_init(struct kvt_ssd_stages *p, size_t keep_bytes)
{
	*p = (struct kvt_ssd_stages){ .keep_bytes = keep_bytes };
	pthread_mutex_init(&p->lock, NULL);
}

void kvt_ssd_stages_fini(struct kvt_ssd_stages *p)
{
	for (size_t i = 0; i < p->n; i++)
		free(p->kept[i].buf);
	p->n = 0;
	p->kept_bytes = 0;
	pthread_mutex_destroy(&p->lock);
}

char *kvt_ssd_stage_get(struct kvt_ssd_stages *p, size_t bytes, size_t *cap)
{
	size_t best = SIZE_MAX, want = (bytes + ROUND - 1) / ROUND * ROUND;
	char *buf;

	pthread_mutex_lock(&p->lock);
	/* the smallest kept stage that fits without wasting more than half */
	for (size_t i = 0; i < p->n; i++)
		if (p->kept[i].cap >= want && p->kept[i].cap - want <= want / 2 &&
		    (best == SIZE_MAX || p->kept[i].cap < p->kept[best].cap))
			best = i;
	if (best != SIZE_MAX) {
		buf = p->kept[best].buf;
		*cap = p->kept[best].cap;
		p->kept_bytes -= *cap;
		p->kept[best] = p->kept[--p->n];
		p->reused++;
		pthread_mutex_unlock(&p->lock);
		return buf;
	}
	p->made++;
	pthread_mutex_unlock(&p->lock);
	*cap = want;
	return aligned_alloc(PAGE, want);
}

void kvt_ssd_stage_put(struct kvt_ssd_stages *p, char *buf, size_t cap)
{
	if (!buf)
		return;
	pthread_mutex_lock(&p->lock);
	if (p->n < KVT_SSD_STAGES_MAX && p->kept_bytes + cap <= p->keep_bytes) {
		p->kept[p->n++] = (struct kvt_ssd_stage_buf){ buf, cap };
		p->kept_bytes += cap;
		buf = NULL;
	}
	pthread_mutex_unlock(&p->lock);
	free(buf);
}
