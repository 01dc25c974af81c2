/* SPDX-License-Identifier: Apache-2.0 */
/* What a replay reports: one run as JSON or a text table, and a capacity
 * sweep as JSON, a table and an SVG plot. */
#ifndef KVT_TRACE_REPORT_H
#define KVT_TRACE_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "bench/trace/replay.h"

/* One point of a sweep: a policy at one capacity of the swept tier. */
struct kvt_sweep_point {
	const char *policy;
	int tier;          /* enum kvt_tier swept */
	uint64_t capacity; /* blocks, KVT_REPLAY_INFINITE for no limit */
	struct kvt_replay_stats st;
	bool has_prefill;  /* the cost model's estimate below is set */
	double prefill_saved_fraction;
	double mean_ttft_s; /* with the cache */
};

/* Hit rates and per-tier counters of one run (no timings: the caller adds
 * them). Returns a new object, NULL on -ENOMEM. */
json_t *kvt_trace_report_json(const struct kvt_replay_opts *o, const struct kvt_replay_stats *s);

/* The same, as a table for people. */
void kvt_trace_report_text(FILE *f, const struct kvt_replay_opts *o,
			   const struct kvt_replay_stats *s);

/* A sweep as a JSON array of {policy, tier, capacity_blocks, block_hit_rate,
 * token_hit_rate, hits per tier, and with the estimate
 * prefill_saved_fraction, mean_ttft_with_cache_s}. NULL on -ENOMEM. */
json_t *kvt_trace_sweep_json(const struct kvt_sweep_point *p, size_t n);

/* A sweep as a table: one row per capacity, one column per policy; then the
 * prefill saved, when estimated. */
void kvt_trace_sweep_text(FILE *f, const struct kvt_sweep_point *p, size_t n);

/* One more curve for a plot: hit rates rate[i] at capacities cap[i] (blocks)
 * of a tier, e.g. the sampled miss-ratio curve. */
struct kvt_trace_series {
	const char *name;
	int tier;
	const uint64_t *cap;
	const double *rate;
	size_t n;
};

/* A sweep as an SVG plot of block hit rate against capacity (log scale), one
 * line per policy, the ideal (infinite capacity) hit rate dashed, and extra
 * (NULL for none) dotted with square marks. Returns 0 or -EIO. */
int kvt_trace_sweep_svg(FILE *f, const struct kvt_sweep_point *p, size_t n,
			const struct kvt_trace_series *extra, const char *title);

/* Rate a/b, 0 when b is 0. */
static inline double kvt_trace_rate(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0.0;
}

#endif /* KVT_TRACE_REPORT_H */
