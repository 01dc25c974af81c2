/* SPDX-License-Identifier: Apache-2.0 */
/* A copy worker's device streams: one set per device layer backend (CUDA,
 * and the host backend behind --host-copy device), created on first use. */
#ifndef KVT_TRANSPORT_WORKER_DEV_H
#define KVT_TRANSPORT_WORKER_DEV_H

#include <stddef.h>

#include "kvtier/device.h"

struct worker_dev {
	struct kvt_dev *dev;              /* NULL: the slot is free */
	struct kvt_dev_stream *stream[2]; /* [0] saves, [1] loads (high priority) */
	struct kvt_dev_event *ev;
};

/* The slot of devs[0..n) that holds dev's streams, else a free one, else
 * NULL. The slot holding dev wins over a free one wherever they sit: a slot
 * freed after an error (worker_dev_drop) may come before it, and taking
 * that one would give dev a second set of streams (the first leaked) and
 * leave no slot for the backend that was dropped. */
static inline struct worker_dev *worker_dev_slot(struct worker_dev *devs, size_t n,
						 const struct kvt_dev *dev)
{
	struct worker_dev *free_slot = NULL;

	for (size_t k = 0; k < n; k++) {
		if (devs[k].dev == dev)
			return &devs[k];
		if (!devs[k].dev && !free_slot)
			free_slot = &devs[k];
	}
	return free_slot;
}

#endif
