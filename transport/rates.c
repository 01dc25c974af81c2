/* SPDX-License-Identifier: Apache-2.0 */
/* Moving averages of what the machine delivers (see rates.h). */
#include "transport/rates.h"

#include <string.h>

#include "util/clock.h"

void kvt_rate_add(struct kvt_rate *r, double amount, double seconds, uint64_t now_ns)
{
	double cost;

	if (!(amount > 0) || !(seconds > 0))
		return;
	cost = seconds / amount;
	r->cost = r->samples ? r->cost + KVT_RATE_WEIGHT * (cost - r->cost) : cost;
	r->samples++;
	r->last_ns = now_ns;
}

double kvt_rate_value(const struct kvt_rate *r)
{
	return r->samples && r->cost > 0 ? 1 / r->cost : 0;
}

void kvt_tier_rates_init(struct kvt_tier_rates *t)
{
	memset(t, 0, sizeof(*t));
	pthread_mutex_init(&t->lock, NULL);
}

void kvt_tier_rates_fini(struct kvt_tier_rates *t)
{
	pthread_mutex_destroy(&t->lock);
}

void kvt_tier_rates_add(struct kvt_tier_rates *t, unsigned tier, uint64_t bytes, uint64_t ns)
{
	if (tier <= KVT_TIER_NONE || tier >= KVT_TIER_COUNT)
		return;
	pthread_mutex_lock(&t->lock);
	kvt_rate_add(&t->tier[tier], (double)bytes, (double)ns / 1e9, kvt_now_ns());
	pthread_mutex_unlock(&t->lock);
}

struct kvt_rate kvt_tier_rates_get(struct kvt_tier_rates *t, unsigned tier)
{
	struct kvt_rate r = { 0 };

	if (tier <= KVT_TIER_NONE || tier >= KVT_TIER_COUNT)
		return r;
	pthread_mutex_lock(&t->lock);
	r = t->tier[tier];
	pthread_mutex_unlock(&t->lock);
	return r;
}
