/* SPDX-License-Identifier: Apache-2.0 */
/* The sampled reuse-distance estimator; see mrc.h for what and why. */
#include "store/mrc.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/opts.h"

/* Time histogram: level k is a ring of TB buckets, each 2^(k + TSHIFT)
 * references wide, holding the previous-reference times too old for level
 * k-1. */
#define TB 64u
#define TL 40
#define TSHIFT 3
/* What every reference pays for is kept small: one reference in EVERY (by a
 * hash of block and time, so no access pattern lines up with it) is counted
 * in its stratum and as a repeat, EVERY times over; those counts are large,
 * so this costs little accuracy. The sampled blocks' references are all
 * processed. */
#define EVERY (1u << KVT_MRC_COUNT_BITS)
/* Reuse-time strata: 0 = unknown, 1..3, then 4 per octave of reuse time up
 * to 2^31. */
#define NS (4 * 31)
/* Distance bins: exact below 16, then 8 per octave up to 2^(4 + OCTAVES);
 * the last one is "cold" (no previous reference known). */
#define OCTAVES 40
#define ND_FIN (16 + 8 * OCTAVES)
#define ND (ND_FIN + 1)
#define COLD ND_FIN
/* Sampled (stratum, bin) pairs wait here and reach the histogram in
 * batches, whose cache misses overlap instead of stalling each reference. */
#define PENDING 256

/* A time histogram: level totals apart, so a sum over levels is a few cache
 * lines. */
struct thist {
	double tot[TL];
	double b[TL][TB];
};

/* The sample table (hot.tab, hot.mask): sampled blocks by hash, open
 * addressing; it grows up to max_cap. */
struct ent {
	uint64_t h; /* 0 = empty */
	uint64_t t; /* time of the last reference */
};

_Static_assert(sizeof(struct ent) == 16, "kvt_mrc_prefetch assumes 16-byte entries");

struct kvt_mrc {
	struct kvt_mrc_hot hot;   /* first: kvt_mrc_ref reads it inline */
	uint64_t half_life;
	uint64_t due;             /* hot.refs at which the counts halve */
	bool use_ticks;
	double rate;
	struct ent *scratch;      /* room to rebuild tab when the threshold drops */
	size_t cap, count, max_cap, max_count; /* max_count: rebuild room */
	uint64_t sampled_refs, known_prev;
	uint64_t advanced;        /* the time histograms are up to this time */
	size_t memory;
	uint32_t pending[PENDING]; /* stratum << 16 | bin */
	uint32_t n_pending;
	double n[NS];             /* references per stratum */
	struct thist th;          /* repeats by previous-reference time */
	struct thist ts;          /* sampled blocks by last-reference time, for
	                           * plain SHARDS distances (no ticks) */
	float hist[NS][ND];       /* sampled references per stratum and distance */
};

static inline struct ent *table(const struct kvt_mrc *m)
{
	return m->hot.tab;
}

static const struct kvt_mrc_opts defaults = {
	.size = sizeof(struct kvt_mrc_opts), .max_rate = 0.01, .budget_bytes = 4u << 20,
	.use_ticks = true,
};

void kvt_mrc_opts_init(struct kvt_mrc_opts *o, size_t size)
{
	kvt_opts_init(o, size, &defaults, sizeof(defaults));
}

/* The next reference kvt_mrc_ref must hand to the slow path: the one whose
 * tick would be 0, or the earliest that can be due to halve the counts (refs
 * grows by at most one per reference). The batch is empty here. */
static void set_limit(struct kvt_mrc *m)
{
	uint64_t wrap = ((m->hot.now >> 32) + 1) << 32;

	m->hot.limit = wrap;
	if (m->due != UINT64_MAX && m->due - m->hot.refs < wrap - m->hot.now)
		m->hot.limit = m->hot.now + (m->due - m->hot.refs);
}

int kvt_mrc_open(const struct kvt_mrc_opts *opts, struct kvt_mrc **out)
{
	struct kvt_mrc_opts full, *o = &full;
	struct kvt_mrc *m;
	size_t cap = 64, room;

	/* an older, shorter struct gets defaults for the fields it lacks */
	full = defaults;
	if (!out || kvt_opts_load(&full, sizeof(full), opts))
		return -EINVAL;
	*out = NULL;
	if (!(o->max_rate > 0 && o->max_rate <= 1) ||
	    o->budget_bytes < sizeof(struct kvt_mrc) + 64 * 3 / 2 * sizeof(struct ent))
		return -EINVAL;
	/* the table and its rebuild space (half its size) share what is left */
	room = o->budget_bytes - sizeof(struct kvt_mrc);
	while (cap * 2 * sizeof(struct ent) * 3 / 2 <= room)
		cap *= 2;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->hot.seed = o->seed;
	m->hot.seed32 = (o->seed * 0x9e3779b97f4a7c15ull) >> 32;
	m->half_life = o->half_life;
	m->use_ticks = o->use_ticks;
	/* the table starts small, so that a small sample stays in cache, and
	 * doubles up to max_cap; the rebuild space is allocated whole, so the
	 * budget is what it is from the start */
	m->max_cap = cap;
	m->max_count = cap / 2;
	m->cap = cap < 1024 ? cap : 1024;
	m->hot.mask = m->cap - 1;
	m->hot.tab = calloc(m->cap, sizeof(struct ent));
	m->scratch = calloc(m->max_count + 1, sizeof(*m->scratch));
	if (!m->hot.tab || !m->scratch) {
		kvt_mrc_close(m);
		return -ENOMEM;
	}
	m->rate = o->max_rate;
	m->hot.thresh = o->max_rate >= 1 ? UINT64_MAX : (uint64_t)ldexp(o->max_rate, 64);
	m->due = o->half_life ? o->half_life : UINT64_MAX;
	set_limit(m);
	m->memory = sizeof(*m) + cap * sizeof(struct ent) + (m->max_count + 1) * sizeof(*m->scratch);
	*out = m;
	return 0;
}

void kvt_mrc_close(struct kvt_mrc *m)
{
	if (!m)
		return;
	free(m->hot.tab);
	free(m->scratch);
	free(m);
}

/* ---- the time histogram -------------------------------------------------- */

/* The finest level whose window (its last TB buckets, up to now) holds t. */
static inline int level_of(uint64_t now, uint64_t t)
{
	int k = 0;

	if (now - t >= (TB << TSHIFT))
		k = 63 - __builtin_clzll((now - t) / (TB << TSHIFT));
	if (k > 0)
		k--;
	while (k < TL - 1 && (t >> (k + TSHIFT)) + TB <= (now >> (k + TSHIFT)))
		k++;
	return k;
}

static inline void th_add(const struct kvt_mrc *m, struct thist *th, uint64_t t, double w)
{
	int k = level_of(m->hot.now, t);

	th->b[k][(t >> (k + TSHIFT)) & (TB - 1)] += w;
	th->tot[k] += w;
}

/* A new bucket starts at every level whose width divides t: the slot it
 * reuses held the bucket TB older, which moves one level up (or, from the
 * last level, out). The times in (from, to] are taken level by level, each
 * level's moves in time order: a bucket a move puts at level k + 1 is left
 * there for at least 31 of that level's widths (496 references at level 1),
 * so within a span shorter than that the order of the levels changes
 * nothing, and a level whose width no time in the span divides ends the
 * work. */
#define SPAN 256
static void th_advance_span(struct thist *th, uint64_t from, uint64_t to)
{
	for (int k = 0; k < TL; k++) {
		uint64_t w = 1ull << (k + TSHIFT), t = (from | (w - 1)) + 1;

		if (t > to)
			break;
		for (; t <= to; t += w) {
			uint32_t slot = (uint32_t)((t >> (k + TSHIFT)) & (TB - 1));
			double c = th->b[k][slot];

			if (c == 0)
				continue;
			th->b[k][slot] = 0;
			th->tot[k] -= c;
			if (k + 1 < TL) {
				uint64_t idx = ((t >> (k + TSHIFT)) - TB) >> 1;

				th->b[k + 1][idx & (TB - 1)] += c;
				th->tot[k + 1] += c;
			}
		}
	}
}

/* The time histograms move lazily: only the references that touch them
 * (one in EVERY, and the sampled ones) bring them up to now. */
static void catch_up(struct kvt_mrc *m)
{
	for (uint64_t a = m->advanced; a < m->hot.now;) {
		uint64_t e = m->hot.now - a > SPAN ? a + SPAN : m->hot.now;

		th_advance_span(&m->th, a, e);
		if (!m->use_ticks)
			th_advance_span(&m->ts, a, e);
		a = e;
	}
	m->advanced = m->hot.now;
}

/* What th holds at times x or later. */
static double sum_since(const struct kvt_mrc *m, const struct thist *th, uint64_t x)
{
	int k0 = level_of(m->hot.now, x), sh = k0 + TSHIFT;
	uint64_t i0 = x >> sh, top = m->hot.now >> sh;
	double s = 0;

	for (int k = 0; k < k0; k++)
		s += th->tot[k];
	for (uint64_t i = i0 + 1; i <= top; i++)
		s += th->b[k0][i & (TB - 1)];
	/* the bucket holding x: the part of its span from x on */
	s += th->b[k0][i0 & (TB - 1)] * (double)(((i0 + 1) << sh) - x) / (double)(1ull << sh);
	return s;
}

/* Distinct blocks referenced strictly between time p and now: the references
 * in between less the repeats among them, or, with no ticks, the sampled
 * blocks referenced since p scaled by the rate (plain SHARDS). */
static uint64_t distance(const struct kvt_mrc *m, uint64_t p)
{
	double d = m->use_ticks ? (double)(m->hot.now - p - 1) - sum_since(m, &m->th, p + 1)
				  : sum_since(m, &m->ts, p + 1) / m->rate;

	return d > 0 ? (uint64_t)(d + 0.5) : 0;
}

/* ---- bins ------------------------------------------------------------------ */

static inline int dbin(uint64_t d)
{
	int e;

	if (d < 16)
		return (int)d;
	e = 63 - __builtin_clzll(d);
	if (e >= 4 + OCTAVES)
		return ND_FIN - 1;
	return 16 + (e - 4) * 8 + (int)((d >> (e - 3)) & 7);
}

/* Distances [lo, hi) of finite bin b. */
static void dbin_span(int b, double *lo, double *hi)
{
	int e, m;

	if (b < 16) {
		*lo = b;
		*hi = b + 1;
		return;
	}
	e = 4 + (b - 16) / 8;
	m = (b - 16) % 8;
	*lo = ldexp(8 + m, e - 3);
	*hi = ldexp(9 + m, e - 3);
}

/* Stratum of reuse time rt >= 1: 1..3 below 4, then 4 per octave. */
static inline int stratum(uint32_t rt)
{
	int e = 31 - __builtin_clz(rt);

	if (e < 2)
		return (int)rt;
	return 4 * (e - 1) + (int)((rt >> (e - 2)) & 3);
}

/* ---- the sample table -------------------------------------------------- */

static struct ent *tab_find(struct kvt_mrc *m, uint64_t h, bool *found)
{
	for (size_t i = h & m->hot.mask;; i = (i + 1) & m->hot.mask) {
		if (table(m)[i].h == h) {
			*found = true;
			return &table(m)[i];
		}
		if (!table(m)[i].h) {
			*found = false;
			return &table(m)[i];
		}
	}
}

static int cmp_h(const void *a, const void *b)
{
	uint64_t x = ((const struct ent *)a)->h, y = ((const struct ent *)b)->h;

	return x < y ? -1 : x > y;
}

static void flush_pending(struct kvt_mrc *m)
{
	for (uint32_t i = 0; i < m->n_pending; i++)
		m->hist[m->pending[i] >> 16][m->pending[i] & 0xffff] += 1;
	m->n_pending = 0;
}

/* Put the sampled blocks of scratch[0..n) into a cleared table. */
static void tab_fill(struct kvt_mrc *m, size_t n)
{
	memset(table(m), 0, m->cap * sizeof(struct ent));
	m->count = 0;
	for (size_t i = 0; i < n; i++) {
		bool found;

		*tab_find(m, m->scratch[i].h, &found) = m->scratch[i];
		m->count++;
	}
}

/* Past half full: double the table, up to max_cap. Returns false when it is
 * at max_cap already (or memory ran out: the table stays as it is). */
static bool tab_grow(struct kvt_mrc *m)
{
	struct ent *t;
	size_t n = 0;

	if (m->cap >= m->max_cap)
		return false;
	t = realloc(m->hot.tab, 2 * m->cap * sizeof(*t));
	if (!t)
		return false;
	for (size_t i = 0; i < m->cap; i++)
		if (t[i].h)
			m->scratch[n++] = t[i];
	m->hot.tab = t;
	m->cap *= 2;
	m->hot.mask = m->cap - 1;
	tab_fill(m, n);
	return true;
}

/* The table is full: keep the 7/8 of its blocks with the smallest hashes,
 * lower the threshold to the smallest hash dropped, and scale what was
 * sampled at the old rate to the new one (fixed-size SHARDS). */
static void lower_threshold(struct kvt_mrc *m)
{
	size_t n = 0, keep;
	double old = m->rate;

	flush_pending(m);
	catch_up(m);
	for (size_t i = 0; i < m->cap; i++)
		if (table(m)[i].h)
			m->scratch[n++] = table(m)[i];
	qsort(m->scratch, n, sizeof(*m->scratch), cmp_h);
	keep = n - n / 8;
	m->hot.thresh = m->scratch[keep].h;
	for (size_t i = keep; i < n && !m->use_ticks; i++)
		th_add(m, &m->ts, m->scratch[i].t, -1);
	m->rate = ldexp((double)m->hot.thresh, -64);
	tab_fill(m, keep);
	for (int s = 0; s < NS; s++)
		for (int b = 0; b < ND; b++)
			m->hist[s][b] *= (float)(m->rate / old);
}

static void halve(struct kvt_mrc *m)
{
	flush_pending(m);
	/* the batch was folded in by the caller */
	for (int s = 0; s < NS; s++) {
		m->n[s] *= 0.5;
		for (int b = 0; b < ND; b++)
			m->hist[s][b] *= 0.5f;
	}
}

/* ---- references ---------------------------------------------------------- */

static inline uint32_t tick(struct kvt_mrc *m)
{
	do
		m->hot.now++;
	while (!(uint32_t)m->hot.now); /* 0 means "no tick": skip it */
	return (uint32_t)m->hot.now;
}

/* Reuse time of a reference at tick now32 whose previous one was at tick
 * prev, 0 when not known. */
static inline uint32_t reuse_time(const struct kvt_mrc *m, uint32_t now32, uint32_t prev)
{
	uint32_t rt = now32 - prev;

	return m->use_ticks && prev && rt < (1u << 31) ? rt : 0;
}

/* A counted reference (one in EVERY) at tick now32: its stratum's count,
 * and its repeat in the time histogram, EVERY times over. */
static void count_ref(struct kvt_mrc *m, uint32_t now32, uint32_t prev)
{
	uint32_t rt = reuse_time(m, now32, prev);
	uint64_t t = m->hot.now - (uint32_t)((uint32_t)m->hot.now - now32);

	m->n[rt ? stratum(rt) : 0] += EVERY;
	if (rt) {
		m->known_prev += EVERY;
		th_add(m, &m->th, t - rt, EVERY);
	}
}

/* Fold the batch of counted references into the counts. */
static void flush_batch(struct kvt_mrc *m)
{
	catch_up(m);
	for (uint32_t i = 0; i < m->hot.n_batch; i++)
		count_ref(m, m->hot.batch[i].now, m->hot.batch[i].prev);
	m->hot.n_batch = 0;
}

/* A reference to a sampled block: its distance, binned in its stratum. */
static void sampled_ref(struct kvt_mrc *m, uint64_t h, uint32_t rt, bool counted)
{
	bool found;
	struct ent *e = tab_find(m, h, &found);
	int b = COLD;

	if (rt)
		b = dbin(distance(m, m->hot.now - rt));
	else if (found)
		b = dbin(distance(m, e->t));
	if (found && !rt) /* a repeat the caller could not tell: 1/R of them */
		th_add(m, &m->th, e->t, 1.0 / m->rate);
	if (!m->use_ticks) {
		if (found)
			th_add(m, &m->ts, e->t, -1);
		th_add(m, &m->ts, m->hot.now, 1);
	}
	if (counted) {
		m->sampled_refs++;
		m->pending[m->n_pending++] = (uint32_t)(rt ? stratum(rt) : 0) << 16 | (uint32_t)b;
		if (m->n_pending == PENDING)
			flush_pending(m);
	}
	if (!found) {
		e->h = h;
		m->count++;
	}
	e->t = m->hot.now;
	if (m->count > m->cap / 2 && !tab_grow(m))
		lower_threshold(m);
}

static uint32_t reference(struct kvt_mrc *m, uint64_t h, uint32_t prev, bool counted)
{
	uint32_t now32;

	flush_batch(m);
	now32 = tick(m);
	if (counted && ++m->hot.refs >= m->due) {
		halve(m);
		m->due += m->half_life;
	}
	if (h < m->hot.thresh) {
		catch_up(m);
		sampled_ref(m, h, reuse_time(m, now32, prev), counted);
	}
	if (counted && KVT_MRC_COUNTED(h, m->hot.now)) {
		catch_up(m);
		count_ref(m, now32, prev);
	}
	set_limit(m);
	return now32;
}

uint32_t kvt_mrc_ref_slow(struct kvt_mrc *m, uint64_t h, uint32_t prev)
{
	return reference(m, h, prev, true);
}

uint32_t kvt_mrc_insert(struct kvt_mrc *m, uint64_t h)
{
	return reference(m, h, 0, false);
}

/* ---- the curve ------------------------------------------------------------- */

/* Sampled fraction of stratum s's references that hit at capacity c. */
static double frac_within(const float *hist, uint64_t c, double *total)
{
	double in = 0, all = 0;

	for (int b = 0; b < ND; b++)
		all += hist[b];
	*total = all;
	if (all <= 0)
		return 0;
	if (c == UINT64_MAX)
		return (all - hist[COLD]) / all;
	for (int b = 0; b < ND_FIN; b++) {
		double lo, hi;

		if (!hist[b])
			continue;
		dbin_span(b, &lo, &hi);
		if (hi <= (double)c)
			in += hist[b];
		else if (lo < (double)c)
			in += hist[b] * ((double)c - lo) / (hi - lo);
	}
	return in / all;
}

int kvt_mrc_curve(struct kvt_mrc *m, const uint64_t *cap, size_t n, double *hit)
{
	double nsum = 0;

	flush_batch(m);
	flush_pending(m);
	for (int s = 0; s < NS; s++)
		nsum += m->n[s];
	if (nsum <= 0)
		return -EAGAIN;
	for (size_t c = 0; c < n; c++) {
		double f[NS], tot[NS], h = 0;

		for (int s = 0; s < NS; s++)
			f[s] = frac_within(m->hist[s], cap[c], &tot[s]);
		for (int s = 0; s < NS; s++) {
			double fs = f[s];

			if (!m->n[s])
				continue;
			if (tot[s] <= 0 && s > 0) {
				/* no sample in this stratum yet: its nearest sampled
				 * neighbours in reuse time stand in for it */
				int lo = s - 1, hi = s + 1;

				while (lo > 0 && tot[lo] <= 0)
					lo--;
				while (hi < NS && tot[hi] <= 0)
					hi++;
				if (lo > 0 && hi < NS)
					fs = (f[lo] * (hi - s) + f[hi] * (s - lo)) / (hi - lo);
				else if (lo > 0)
					fs = f[lo];
				else if (hi < NS)
					fs = f[hi];
			}
			h += m->n[s] * fs;
		}
		hit[c] = h / nsum;
	}
	return 0;
}

void kvt_mrc_stats(const struct kvt_mrc *m, struct kvt_mrc_stats *out)
{
	memset(out, 0, sizeof(*out));
	out->refs = m->hot.refs;
	out->sampled_refs = m->sampled_refs;
	out->sampled_keys = m->count;
	out->known_prev = m->known_prev;
	out->rate = m->rate;
	out->memory_bytes = m->memory;
}
