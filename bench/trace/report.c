/* SPDX-License-Identifier: Apache-2.0 */
/* Reports of a replay and of a sweep; see report.h. */
#include "bench/trace/report.h"

#include <errno.h>
#include <math.h>
#include <string.h>

static const char *tier_names[KVT_TIER_COUNT] = { "none", "hbm", "dram", "ssd", "remote" };

static json_t *capacity_json(uint64_t cap)
{
	return cap == KVT_REPLAY_INFINITE ? json_null() : json_integer((json_int_t)cap);
}

json_t *kvt_trace_report_json(const struct kvt_replay_opts *o, const struct kvt_replay_stats *s)
{
	json_t *j = json_object(), *tiers = json_object(), *hits = json_object();

	if (!j || !tiers || !hits) {
		json_decref(j);
		json_decref(tiers);
		json_decref(hits);
		return NULL;
	}
	json_object_set_new(j, "policy", json_string(o->policy));
	json_object_set_new(j, "ssd_admission",
			    json_string(o->ssd_admission ? o->ssd_admission : "always"));
	json_object_set_new(j, "promote", json_boolean(o->promote));
	json_object_set_new(j, "store_output", json_boolean(o->store_output));
	json_object_set_new(j, "block_tokens", json_integer(o->block_tokens));
	json_object_set_new(j, "block_bytes", json_integer((json_int_t)o->block_bytes));
	json_object_set_new(j, "requests", json_integer((json_int_t)s->requests));
	json_object_set_new(j, "blocks", json_integer((json_int_t)s->blocks));
	json_object_set_new(j, "tokens", json_integer((json_int_t)s->tokens));
	json_object_set_new(j, "hit_blocks", json_integer((json_int_t)s->hit_blocks));
	json_object_set_new(j, "hit_tokens", json_integer((json_int_t)s->hit_tokens));
	json_object_set_new(j, "block_hit_rate", json_real(kvt_trace_rate(s->hit_blocks, s->blocks)));
	json_object_set_new(j, "token_hit_rate", json_real(kvt_trace_rate(s->hit_tokens, s->tokens)));
	if (o->ideal) {
		json_object_set_new(j, "ideal_block_hit_rate",
				    json_real(kvt_trace_rate(s->ideal_hit_blocks, s->blocks)));
		json_object_set_new(j, "ideal_token_hit_rate",
				    json_real(kvt_trace_rate(s->ideal_hit_tokens, s->tokens)));
	}
	json_object_set_new(j, "output_blocks", json_integer((json_int_t)s->output_blocks));
	json_object_set_new(j, "dropped_blocks", json_integer((json_int_t)s->dropped));
	json_object_set_new(j, "index_bytes", json_integer((json_int_t)s->index_bytes));
	for (int t = KVT_TIER_HBM; t < KVT_TIER_COUNT; t++) {
		const struct kvt_replay_tier_stats *ts = &s->tier[t];
		json_t *tj;

		if (!ts->capacity)
			continue;
		json_object_set_new(hits, tier_names[t], json_integer((json_int_t)ts->hit_blocks));
		tj = json_pack("{s:o, s:o, s:I, s:I, s:f, s:f, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, "
			       "s:I}",
			       "capacity_blocks", capacity_json(ts->capacity),
			       "capacity_bytes", ts->capacity == KVT_REPLAY_INFINITE ? json_null() :
				       json_integer((json_int_t)(ts->capacity * o->block_bytes)),
			       "hit_blocks", (json_int_t)ts->hit_blocks,
			       "hit_tokens", (json_int_t)ts->hit_tokens,
			       "block_hit_rate", kvt_trace_rate(ts->hit_blocks, s->blocks),
			       "token_hit_rate", kvt_trace_rate(ts->hit_tokens, s->tokens),
			       "blocks", (json_int_t)ts->blocks,
			       "peak_blocks", (json_int_t)ts->peak_blocks,
			       "inserted", (json_int_t)ts->inserted,
			       "demoted_in", (json_int_t)ts->demoted_in,
			       "promoted_in", (json_int_t)ts->promoted_in,
			       "evicted", (json_int_t)ts->evicted,
			       "bytes_in", (json_int_t)ts->bytes_in,
			       "bytes_out", (json_int_t)ts->bytes_out,
			       "refused", (json_int_t)ts->refused);
		json_object_set_new(tiers, tier_names[t], tj);
	}
	json_object_set_new(j, "hits", hits);
	json_object_set_new(j, "tiers", tiers);
	return j;
}

static void fmt_cap(char *buf, size_t len, uint64_t cap)
{
	if (cap == KVT_REPLAY_INFINITE)
		snprintf(buf, len, "inf");
	else
		snprintf(buf, len, "%llu", (unsigned long long)cap);
}

void kvt_trace_report_text(FILE *f, const struct kvt_replay_opts *o,
			   const struct kvt_replay_stats *s)
{
	fprintf(f, "policy %s%s%s, %u tokens per block\n", o->policy,
		o->promote ? ", promotion on hit" : "", o->store_output ? ", outputs stored" : "",
		o->block_tokens);
	fprintf(f, "requests %llu, blocks %llu, tokens %llu\n", (unsigned long long)s->requests,
		(unsigned long long)s->blocks, (unsigned long long)s->tokens);
	fprintf(f, "block hit rate %.4f (ideal %.4f), token hit rate %.4f (ideal %.4f)\n",
		kvt_trace_rate(s->hit_blocks, s->blocks),
		kvt_trace_rate(s->ideal_hit_blocks, s->blocks),
		kvt_trace_rate(s->hit_tokens, s->tokens),
		kvt_trace_rate(s->ideal_hit_tokens, s->tokens));
	fprintf(f, "\n%-6s %12s %10s %10s %12s %12s %14s %14s\n", "tier", "capacity",
		"block hit", "token hit", "evicted", "peak blocks", "bytes in", "bytes out");
	for (int t = KVT_TIER_HBM; t < KVT_TIER_COUNT; t++) {
		const struct kvt_replay_tier_stats *ts = &s->tier[t];
		char cap[32];

		if (!ts->capacity)
			continue;
		fmt_cap(cap, sizeof(cap), ts->capacity);
		fprintf(f, "%-6s %12s %10.4f %10.4f %12llu %12llu %14llu %14llu\n", tier_names[t], cap,
			kvt_trace_rate(ts->hit_blocks, s->blocks),
			kvt_trace_rate(ts->hit_tokens, s->tokens), (unsigned long long)ts->evicted,
			(unsigned long long)ts->peak_blocks, (unsigned long long)ts->bytes_in,
			(unsigned long long)ts->bytes_out);
	}
}

json_t *kvt_trace_sweep_json(const struct kvt_sweep_point *p, size_t n)
{
	json_t *a = json_array();

	if (!a)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		const struct kvt_replay_stats *s = &p[i].st;
		json_t *hits = json_object(), *pt;

		for (int t = KVT_TIER_HBM; t < KVT_TIER_COUNT; t++)
			if (s->tier[t].capacity)
				json_object_set_new(hits, tier_names[t],
						    json_integer((json_int_t)s->tier[t].hit_blocks));
		pt = json_pack("{s:s, s:s, s:o, s:f, s:f, s:o}", "policy", p[i].policy, "tier",
			       tier_names[p[i].tier], "capacity_blocks", capacity_json(p[i].capacity),
			       "block_hit_rate", kvt_trace_rate(s->hit_blocks, s->blocks),
			       "token_hit_rate", kvt_trace_rate(s->hit_tokens, s->tokens), "hits", hits);
		if (pt && p[i].has_prefill) {
			json_object_set_new(pt, "prefill_saved_fraction",
					    json_real(p[i].prefill_saved_fraction));
			json_object_set_new(pt, "mean_ttft_with_cache_s", json_real(p[i].mean_ttft_s));
		}
		if (!pt || json_array_append_new(a, pt)) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

/* Distinct policies and capacities of a sweep, in order of appearance. */
struct axes {
	const char *pol[16];
	size_t n_pol;
	uint64_t cap[64];
	size_t n_cap;
};

static void axes_of(const struct kvt_sweep_point *p, size_t n, struct axes *ax)
{
	memset(ax, 0, sizeof(*ax));
	for (size_t i = 0; i < n; i++) {
		size_t k;

		for (k = 0; k < ax->n_pol && strcmp(ax->pol[k], p[i].policy); k++)
			;
		if (k == ax->n_pol && ax->n_pol < 16)
			ax->pol[ax->n_pol++] = p[i].policy;
		for (k = 0; k < ax->n_cap && ax->cap[k] != p[i].capacity; k++)
			;
		if (k == ax->n_cap && ax->n_cap < 64)
			ax->cap[ax->n_cap++] = p[i].capacity;
	}
}

static const struct kvt_sweep_point *point(const struct kvt_sweep_point *p, size_t n,
					   const char *pol, uint64_t cap)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(p[i].policy, pol) && p[i].capacity == cap)
			return &p[i];
	return NULL;
}

static void hit_cell(FILE *f, const struct kvt_sweep_point *q)
{
	fprintf(f, "   %.4f (%.4f)", kvt_trace_rate(q->st.hit_blocks, q->st.blocks),
		kvt_trace_rate(q->st.hit_tokens, q->st.tokens));
}

static void prefill_cell(FILE *f, const struct kvt_sweep_point *q)
{
	fprintf(f, "   %5.1f%% (%.3fs)", 100.0 * q->prefill_saved_fraction, q->mean_ttft_s);
}

/* One table: a row per capacity, a column per policy, cells by `cell`. */
static void sweep_table(FILE *f, const struct kvt_sweep_point *p, size_t n,
			const struct axes *ax, const char *what,
			void (*cell)(FILE *, const struct kvt_sweep_point *))
{
	fprintf(f, "%s by %s capacity in blocks\n\n%12s", what, tier_names[p[0].tier],
		"capacity");
	for (size_t k = 0; k < ax->n_pol; k++)
		fprintf(f, " %17s", ax->pol[k]);
	fputc('\n', f);
	for (size_t c = 0; c < ax->n_cap; c++) {
		char cap[32];

		fmt_cap(cap, sizeof(cap), ax->cap[c]);
		fprintf(f, "%12s", cap);
		for (size_t k = 0; k < ax->n_pol; k++) {
			const struct kvt_sweep_point *q = point(p, n, ax->pol[k], ax->cap[c]);

			if (q)
				cell(f, q);
			else
				fprintf(f, " %17s", "-");
		}
		fputc('\n', f);
	}
}

void kvt_trace_sweep_text(FILE *f, const struct kvt_sweep_point *p, size_t n)
{
	struct axes ax;

	if (!n)
		return;
	axes_of(p, n, &ax);
	sweep_table(f, p, n, &ax, "block hit rate (token hit rate)", hit_cell);
	if (!p[0].has_prefill)
		return;
	fputc('\n', f);
	sweep_table(f, p, n, &ax, "prefill saved (mean TTFT)", prefill_cell);
}

/* The top of the hit-rate axis: the highest rate drawn plus a margin,
 * rounded up to a tenth, at most 1. */
static double sweep_top(const struct kvt_sweep_point *p, size_t n,
			const struct kvt_trace_series *extra, double ideal)
{
	double m = ideal;

	for (size_t i = 0; i < n; i++)
		m = fmax(m, kvt_trace_rate(p[i].st.hit_blocks, p[i].st.blocks));
	for (size_t i = 0; extra && i < extra->n; i++)
		m = fmax(m, extra->rate[i]);
	return fmin(1.0, ceil((m + 0.05) * 10.0 - 1e-9) / 10.0);
}

int kvt_trace_sweep_svg(FILE *f, const struct kvt_sweep_point *p, size_t n,
			const struct kvt_trace_series *extra, const char *title)
{
	static const char *colors[] = { "#1f77b4", "#d62728", "#2ca02c", "#9467bd",
					"#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f" };
	const double W = 720, H = 440, L = 70, R = extra ? 170 : 150, T = 40, B = 60;
	double lo = INFINITY, hi = 0, ideal = -1, pw = W - L - R, ph = H - T - B, top, step;
	int tier = n ? p[0].tier : extra ? extra->tier : KVT_TIER_DRAM;
	struct axes ax;

	axes_of(p, n, &ax);
	for (size_t i = 0; i < n; i++) {
		if (p[i].capacity == KVT_REPLAY_INFINITE) {
			ideal = kvt_trace_rate(p[i].st.hit_blocks, p[i].st.blocks);
			continue;
		}
		if (p[i].capacity < lo)
			lo = (double)p[i].capacity;
		if (p[i].capacity > hi)
			hi = (double)p[i].capacity;
		if (ideal < 0 && p[i].st.blocks)
			ideal = kvt_trace_rate(p[i].st.ideal_hit_blocks, p[i].st.blocks);
	}
	for (size_t i = 0; extra && i < extra->n; i++) {
		if (extra->cap[i] == KVT_REPLAY_INFINITE)
			continue;
		lo = fmin(lo, (double)extra->cap[i]);
		hi = fmax(hi, (double)extra->cap[i]);
	}
	if (!(lo > 0) || !(hi > 0)) {
		lo = 1;
		hi = 10;
	}
	lo = pow(10, floor(log10(lo)));
	hi = pow(10, ceil(log10(hi)));
	if (hi <= lo)
		hi = lo * 10;
	/* the hit-rate axis ends a little above the highest rate drawn (the
	 * ideal, usually), so the curves use the height instead of its lower
	 * part; ticks every 0.1 up to 0.7, else every 0.2 */
	top = sweep_top(p, n, extra, ideal);
	step = top > 0.75 ? 0.2 : 0.1;
#define X(c) (L + (log10(c) - log10(lo)) / (log10(hi) - log10(lo)) * pw)
#define Y(r) (T + (1.0 - (r) / top) * ph)
#define LEGEND_Y(k) (T + 30 + 18.0 * (double)(k))
	fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
		   "font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
	fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
	fprintf(f, "<text x=\"%.0f\" y=\"22\" font-size=\"14\">%s</text>\n", L, title ? title : "");
	for (int k = 0; k * step <= top + 1e-9; k++) {
		double y = Y(k * step);
		fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
			L, y, L + pw, y);
		fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.1f</text>\n", L - 6, y + 4,
			k * step);
	}
	for (double c = lo; c <= hi * 1.0001; c *= 10) {
		double x = X(c);
		fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
			x, T, x, T + ph);
		fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n", x,
			T + ph + 18, c);
	}
	fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
		   "stroke=\"#333\"/>\n", L, T, pw, ph);
	fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s capacity (blocks, log "
		   "scale)</text>\n", L + pw / 2, H - 16, tier_names[tier]);
	fprintf(f, "<text transform=\"translate(18 %.1f) rotate(-90)\" text-anchor=\"middle\">"
		   "block hit rate</text>\n", T + ph / 2);
	if (ideal >= 0) {
		fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" "
			   "stroke-dasharray=\"6 4\"/>\n", L, Y(ideal), L + pw, Y(ideal));
		/* inside the plot, above the line at its left end, where the
		 * curves are low: the legend to the right stays clear */
		fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">ideal (unlimited capacity) %.4f</text>\n",
			L + 6, Y(ideal) - 6, ideal);
	}
	for (size_t k = 0; k < ax.n_pol; k++) {
		const char *col = colors[k % 8];
		int first = 1;

		fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", col);
		for (size_t c = 0; c < ax.n_cap; c++) {
			const struct kvt_sweep_point *q = point(p, n, ax.pol[k], ax.cap[c]);

			if (!q || q->capacity == KVT_REPLAY_INFINITE)
				continue;
			fprintf(f, "%s%.1f,%.1f", first ? "" : " ", X((double)q->capacity),
				Y(kvt_trace_rate(q->st.hit_blocks, q->st.blocks)));
			first = 0;
		}
		fprintf(f, "\"/>\n");
		for (size_t c = 0; c < ax.n_cap; c++) {
			const struct kvt_sweep_point *q = point(p, n, ax.pol[k], ax.cap[c]);

			if (q && q->capacity != KVT_REPLAY_INFINITE)
				fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
					X((double)q->capacity),
					Y(kvt_trace_rate(q->st.hit_blocks, q->st.blocks)), col);
		}
		fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
			   "stroke-width=\"2\"/><text x=\"%.1f\" y=\"%.1f\">%s%s</text>\n",
			L + pw + 8, LEGEND_Y(k), L + pw + 28, LEGEND_Y(k), col, L + pw + 34,
			LEGEND_Y(k) + 4, ax.pol[k], extra ? " (exact)" : "");
	}
	if (extra && extra->n) {
		int first = 1;

		fprintf(f, "<polyline fill=\"none\" stroke=\"#000\" stroke-width=\"1.5\" "
			   "stroke-dasharray=\"3 3\" points=\"");
		for (size_t i = 0; i < extra->n; i++) {
			if (extra->cap[i] == KVT_REPLAY_INFINITE)
				continue;
			fprintf(f, "%s%.1f,%.1f", first ? "" : " ", X((double)extra->cap[i]),
				Y(extra->rate[i]));
			first = 0;
		}
		fprintf(f, "\"/>\n");
		for (size_t i = 0; i < extra->n; i++)
			if (extra->cap[i] != KVT_REPLAY_INFINITE)
				fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"6\" height=\"6\" "
					   "fill=\"none\" stroke=\"#000\"/>\n",
					X((double)extra->cap[i]) - 3, Y(extra->rate[i]) - 3);
		fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" "
			   "stroke-dasharray=\"3 3\"/><text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
			L + pw + 8, LEGEND_Y(ax.n_pol), L + pw + 28, LEGEND_Y(ax.n_pol), L + pw + 34,
			LEGEND_Y(ax.n_pol) + 4, extra->name);
	}
#undef X
#undef Y
#undef LEGEND_Y
	fprintf(f, "</svg>\n");
	return ferror(f) ? -EIO : 0;
}
