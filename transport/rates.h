/* SPDX-License-Identifier: Apache-2.0 */
/* What the machine delivers, measured as it serves: moving averages of an
 * amount (bytes, tokens) over the time it took, for the load-or-recompute
 * plan. */
#ifndef KVT_TRANSPORT_RATES_H
#define KVT_TRANSPORT_RATES_H

#include <pthread.h>
#include <stdint.h>

#include "kvtier/types.h"

/* Each sample is an amount and the seconds it took. The average is kept as
 * seconds per unit (what a plan adds up), each sample moving it
 * KVT_RATE_WEIGHT of the way to its own: a tier that slows down shows within
 * a sample or two, however much it delivered quickly before, and the
 * average of a tier whose loads vary is the time an average load costs. */
#define KVT_RATE_WEIGHT 0.5

struct kvt_rate {
	double cost;                /* seconds per unit, moving average */
	uint64_t samples;
	uint64_t last_ns;           /* kvt_now_ns() of the last sample, 0 = none */
};

void kvt_rate_add(struct kvt_rate *r, double amount, double seconds, uint64_t now_ns);
/* Units per second (1 / cost), 0 before the first sample. */
double kvt_rate_value(const struct kvt_rate *r);

/* The bytes/s each tier delivers to engines: a LOAD's blocks from acquiring
 * them in the store (an SSD read included) to their last layer in engine
 * memory, by the tier LOOKUP found them in. Fed by the copy workers, read by
 * the loop. */
struct kvt_tier_rates {
	pthread_mutex_t lock;
	struct kvt_rate tier[KVT_TIER_COUNT];
};

void kvt_tier_rates_init(struct kvt_tier_rates *t);
void kvt_tier_rates_fini(struct kvt_tier_rates *t);
void kvt_tier_rates_add(struct kvt_tier_rates *t, unsigned tier, uint64_t bytes,
			uint64_t ns);
/* A copy of tier's average. */
struct kvt_rate kvt_tier_rates_get(struct kvt_tier_rates *t, unsigned tier);

#endif /* KVT_TRANSPORT_RATES_H */
