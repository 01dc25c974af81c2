/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's insight into its traffic; see insight.h. */
#include "transport/insight.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "store/mrc.h"
#include "transport/textbuf.h"

/* Each namespace's estimator gets this much of the budget; the daemon-wide
 * one gets what they leave, at least half. */
#define NS_MRC_BYTES (512u << 10)

/* The curve's capacities: these times each tier's size. */
static const double factors[] = { 0.125, 0.25, 0.5, 1, 2, 4, 8 };
#define N_FACTORS (sizeof(factors) / sizeof(factors[0]))

struct ns_fig {
	uint64_t id;            /* hash of tenant and descriptor */
	size_t tenant;
	char label[KVT_MODEL_ID_MAX + 32];
	struct kvt_insight_row row;
	struct kvt_mrc *mrc;    /* NULL past the budget */
};

struct kvt_insight {
	size_t n_tenants;
	const char *const *names;
	struct kvt_insight_row *tenant; /* per tenant */
	struct kvt_insight_row *other;  /* per tenant: namespaces past max_ns */
	struct ns_fig *ns;
	unsigned n_ns, max_ns, n_ns_mrc, max_ns_mrc;
	struct kvt_mrc *all;
	double rate;
};

/* Handles: 0..max_ns-1 a namespace with figures, max_ns + t tenant t's
 * other. */

static int mrc_open(size_t budget, double rate, struct kvt_mrc **out)
{
	struct kvt_mrc_opts o;

	kvt_mrc_opts_init(&o, sizeof(o));
	o.budget_bytes = budget;
	o.max_rate = rate;
	o.use_ticks = false; /* the server has no record of a block's last use */
	return kvt_mrc_open(&o, out);
}

int kvt_insight_open(size_t n_tenants, const char *const *tenant_names, unsigned max_ns,
		     size_t mrc_budget, double mrc_rate, struct kvt_insight **out)
{
	struct kvt_insight *in = calloc(1, sizeof(*in));
	int err = -ENOMEM;

	if (!in)
		return -ENOMEM;
	in->n_tenants = n_tenants;
	in->names = tenant_names;
	in->max_ns = max_ns;
	in->rate = mrc_rate;
	in->tenant = calloc(n_tenants, sizeof(*in->tenant));
	in->other = calloc(n_tenants, sizeof(*in->other));
	in->ns = calloc(max_ns ? max_ns : 1, sizeof(*in->ns));
	if (!in->tenant || !in->other || !in->ns)
		goto fail;
	if (mrc_budget) {
		in->max_ns_mrc = (unsigned)(mrc_budget / 2 / NS_MRC_BYTES);
		if (in->max_ns_mrc > max_ns)
			in->max_ns_mrc = max_ns;
		err = mrc_open(mrc_budget - (size_t)in->max_ns_mrc * NS_MRC_BYTES, mrc_rate,
			       &in->all);
		if (err)
			goto fail;
	}
	*out = in;
	return 0;
fail:
	kvt_insight_close(in);
	return err;
}

void kvt_insight_close(struct kvt_insight *in)
{
	if (!in)
		return;
	for (unsigned i = 0; i < in->n_ns; i++)
		kvt_mrc_close(in->ns[i].mrc);
	kvt_mrc_close(in->all);
	free(in->ns);
	free(in->tenant);
	free(in->other);
	free(in);
}

static uint64_t desc_id(size_t t, const struct kvt_ns_desc *d)
{
	uint64_t v[8] = { t, d->layout, d->dtype, d->layers, d->kv_heads, d->head_dim,
			  d->block_tokens, (uint64_t)d->tp_rank << 32 | d->tp_size };
	uint64_t h = XXH3_64bits_withSeed(v, sizeof(v), d->tenant_salt_len);

	h = XXH3_64bits_withSeed(d->tenant_salt, d->tenant_salt_len, h);
	return XXH3_64bits_withSeed(d->model_id, strnlen(d->model_id, KVT_MODEL_ID_MAX), h);
}

int kvt_insight_ns(struct kvt_insight *in, size_t t, const struct kvt_ns_desc *d)
{
	uint64_t id = desc_id(t, d);
	unsigned same = 0;
	struct ns_fig *f;

	for (unsigned i = 0; i < in->n_ns; i++) {
		if (in->ns[i].id == id)
			return (int)i;
		same += in->ns[i].tenant == t &&
			!strncmp(in->ns[i].label, d->model_id, strnlen(d->model_id, KVT_MODEL_ID_MAX));
	}
	if (in->n_ns == in->max_ns)
		return (int)(in->max_ns + t);
	f = &in->ns[in->n_ns];
	f->id = id;
	f->tenant = t;
	/* the model names the namespace; a shard, or a second namespace of the
	 * same model (another layout or dtype), says which */
	snprintf(f->label, sizeof(f->label), "%.*s", (int)strnlen(d->model_id, KVT_MODEL_ID_MAX),
		 d->model_id);
	if (d->tp_size > 1)
		snprintf(f->label + strlen(f->label), sizeof(f->label) - strlen(f->label),
			 "@tp%u/%u", d->tp_rank, d->tp_size);
	if (same)
		snprintf(f->label + strlen(f->label), sizeof(f->label) - strlen(f->label), "#%u",
			 same + 1);
	if (in->all && in->n_ns_mrc < in->max_ns_mrc && !mrc_open(NS_MRC_BYTES, in->rate, &f->mrc))
		in->n_ns_mrc++;
	return (int)in->n_ns++;
}

static void add_row(struct kvt_insight_row *r, uint32_t n, uint32_t hit, uint32_t block_tokens)
{
	r->lookups++;
	r->keys += n;
	r->hits += hit;
	r->tokens_saved += (uint64_t)hit * block_tokens;
}

void kvt_insight_lookup(struct kvt_insight *in, int h, const struct kvt_key *keys, uint32_t n,
			uint32_t hit, uint32_t block_tokens)
{
	struct ns_fig *f = h >= 0 && (unsigned)h < in->n_ns ? &in->ns[h] : NULL;
	size_t t = f ? f->tenant : (size_t)h - in->max_ns;

	if (h < 0 || t >= in->n_tenants)
		return;
	add_row(&in->tenant[t], n, hit, block_tokens);
	add_row(f ? &f->row : &in->other[t], n, hit, block_tokens);
	if (!in->all)
		return;
	/* the reference stream of the MRC: every key looked up, in order; the
	 * namespace's handle keeps equal keys of two namespaces apart */
	for (uint32_t i = 0; i < n; i++) {
		(void)kvt_mrc_ref(in->all, kvt_mrc_hash(in->all, (uint16_t)h, &keys[i]), 0);
		if (f && f->mrc)
			(void)kvt_mrc_ref(f->mrc, kvt_mrc_hash(f->mrc, 0, &keys[i]), 0);
	}
}

/* ---- the curve ------------------------------------------------------------ */

/* Mean bytes of a stored block, 0 when nothing is stored. */
static double mean_block_bytes(const struct kvt_store_stats *st)
{
	uint64_t bytes = 0, blocks = 0;

	for (int t = KVT_TIER_HBM; t < KVT_TIER_COUNT; t++) {
		bytes += st->tier[t].used_bytes;
		blocks += st->tier[t].blocks;
	}
	return blocks ? (double)bytes / (double)blocks : 0;
}

/* One tier's points: capacities f x its size, hit ratios of the tiers down
 * to it. above: blocks of the tiers before it. */
static json_t *tier_curve(struct kvt_mrc *m, const struct kvt_tier_stats *ts, double bb,
			  double above)
{
	json_t *a = json_array();
	uint64_t caps[N_FACTORS];
	double hit[N_FACTORS], blocks = (double)ts->capacity_bytes / bb;

	for (size_t i = 0; i < N_FACTORS; i++)
		caps[i] = (uint64_t)(above + factors[i] * blocks + 0.5);
	if (!a || kvt_mrc_curve(m, caps, N_FACTORS, hit)) {
		json_decref(a);
		return NULL;
	}
	for (size_t i = 0; i < N_FACTORS; i++)
		json_array_append_new(a, json_pack("{s:f, s:I, s:I, s:f}", "capacity_factor",
						   factors[i], "capacity_blocks",
						   (json_int_t)(factors[i] * blocks + 0.5),
						   "capacity_bytes",
						   (json_int_t)(factors[i] * (double)ts->capacity_bytes),
						   "hit_ratio", hit[i]));
	return a;
}

/* Every present tier's curve from estimator m; NULL when there is no
 * estimate yet (no reference, nothing stored). */
static json_t *curves(struct kvt_mrc *m, const struct kvt_store_stats *st)
{
	double bb = mean_block_bytes(st), above = 0;
	json_t *o;

	if (!m || bb <= 0)
		return NULL;
	o = json_object();
	for (int t = KVT_TIER_HBM; o && t < KVT_TIER_COUNT; t++) {
		json_t *c;

		if (!st->tier[t].present)
			continue;
		c = tier_curve(m, &st->tier[t], bb, above);
		if (!c) {
			json_decref(o);
			return NULL;
		}
		json_object_set_new(o, kvt_tier_name(t), c);
		above += (double)st->tier[t].capacity_bytes / bb;
	}
	return o;
}

json_t *kvt_insight_mrc_json(struct kvt_insight *in, const struct kvt_store_stats *st)
{
	struct kvt_mrc_stats ms;
	json_t *tiers = curves(in->all, st);

	if (!tiers)
		return json_null();
	kvt_mrc_stats(in->all, &ms);
	return json_pack("{s:f, s:I, s:I, s:I, s:I, s:o}", "sampling_rate", ms.rate,
			 "references", (json_int_t)ms.refs, "sampled_references",
			 (json_int_t)ms.sampled_refs, "sampled_blocks", (json_int_t)ms.sampled_keys,
			 "memory_bytes", (json_int_t)ms.memory_bytes, "tiers", tiers);
}

/* ---- STATS ---------------------------------------------------------------- */

static json_t *row_json(const struct kvt_insight_row *r)
{
	return json_pack("{s:I, s:I, s:I, s:I, s:I}", "lookups", (json_int_t)r->lookups,
			 "lookup_keys", (json_int_t)r->keys, "lookup_hit_keys", (json_int_t)r->hits,
			 "lookup_miss_keys", (json_int_t)(r->keys - r->hits), "tokens_saved",
			 (json_int_t)r->tokens_saved);
}

json_t *kvt_insight_tenant_json(struct kvt_insight *in, size_t t, const struct kvt_store_stats *st)
{
	json_t *o = row_json(&in->tenant[t]), *nss = json_array();

	if (!o || !nss) {
		json_decref(o);
		json_decref(nss);
		return NULL;
	}
	json_object_set_new(o, "name", json_string(in->names[t]));
	for (unsigned i = 0; i < in->n_ns; i++) {
		json_t *n, *c;

		if (in->ns[i].tenant != t)
			continue;
		n = row_json(&in->ns[i].row);
		if (!n)
			continue;
		json_object_set_new(n, "namespace", json_string(in->ns[i].label));
		c = curves(in->ns[i].mrc, st);
		json_object_set_new(n, "mrc", c ? c : json_null());
		json_array_append_new(nss, n);
	}
	json_object_set_new(o, "namespaces", nss);
	json_object_set_new(o, "other", row_json(&in->other[t]));
	return o;
}

/* ---- metrics ------------------------------------------------------------- */

static void sample(struct kvt_textbuf *b, const char *name, const char *tenant, const char *ns,
		   const char *result, uint64_t v)
{
	kvt_textbuf_printf(b, "%s{tenant=\"", name);
	kvt_textbuf_label(b, tenant);
	if (ns) {
		kvt_textbuf_printf(b, "\",namespace=\"");
		kvt_textbuf_label(b, ns);
	}
	if (result)
		kvt_textbuf_printf(b, "\",result=\"%s", result);
	kvt_textbuf_printf(b, "\"} %llu\n", (unsigned long long)v);
}

static void rows_prom(struct kvt_insight *in, struct kvt_textbuf *b, const char *name,
		      const char *kind)
{
	bool keys = !strcmp(kind, "keys");

	for (size_t t = 0; t < in->n_tenants; t++) {
		const struct kvt_insight_row *r = &in->tenant[t];

		if (!strstr(name, "namespace")) {
			if (keys) {
				sample(b, name, in->names[t], NULL, "hit", r->hits);
				sample(b, name, in->names[t], NULL, "miss", r->keys - r->hits);
			} else {
				sample(b, name, in->names[t], NULL, NULL, r->tokens_saved);
			}
			continue;
		}
		for (unsigned i = 0; i <= in->n_ns; i++) {
			const char *label = i < in->n_ns ? in->ns[i].label : "other";

			if (i < in->n_ns && in->ns[i].tenant != t)
				continue;
			r = i < in->n_ns ? &in->ns[i].row : &in->other[t];
			if (keys) {
				sample(b, name, in->names[t], label, "hit", r->hits);
				sample(b, name, in->names[t], label, "miss", r->keys - r->hits);
			} else {
				sample(b, name, in->names[t], label, NULL, r->tokens_saved);
			}
		}
	}
}

/* The per-tenant and per-namespace families. */
static void tenants_prom(struct kvt_insight *in, struct kvt_textbuf *b)
{
	kvt_textbuf_printf(b, "# HELP kvtier_tenant_lookup_keys_total Keys looked up per tenant, "
			   "by result.\n# TYPE kvtier_tenant_lookup_keys_total counter\n");
	rows_prom(in, b, "kvtier_tenant_lookup_keys_total", "keys");
	kvt_textbuf_printf(b, "# HELP kvtier_tenant_tokens_saved_total Tokens of the blocks "
			   "LOOKUP found (not recomputed), per tenant.\n"
			   "# TYPE kvtier_tenant_tokens_saved_total counter\n");
	rows_prom(in, b, "kvtier_tenant_tokens_saved_total", "tokens");
	kvt_textbuf_printf(b, "# HELP kvtier_namespace_lookup_keys_total Keys looked up per "
			   "namespace (past the configured count, a tenant's others are "
			   "\"other\"), by result.\n"
			   "# TYPE kvtier_namespace_lookup_keys_total counter\n");
	rows_prom(in, b, "kvtier_namespace_lookup_keys_total", "keys");
	kvt_textbuf_printf(b, "# HELP kvtier_namespace_tokens_saved_total Tokens of the blocks "
			   "LOOKUP found, per namespace.\n"
			   "# TYPE kvtier_namespace_tokens_saved_total counter\n");
	rows_prom(in, b, "kvtier_namespace_tokens_saved_total", "tokens");
}

int kvt_insight_prom(struct kvt_insight *in, const struct kvt_store_stats *st, bool tenants,
		     char **text, size_t *len, size_t *cap)
{
	struct kvt_textbuf b = { *text, *len, *cap, false };
	double bb = mean_block_bytes(st), above = 0;

	if (tenants)
		tenants_prom(in, &b);
	if (in->all && bb > 0) {
		kvt_textbuf_printf(&b, "# HELP kvtier_mrc_hit_ratio Estimated LRU hit ratio of the "
				   "tiers down to `tier`, had it capacity_factor times its size "
				   "(sampled reuse distances of every key looked up).\n"
				   "# TYPE kvtier_mrc_hit_ratio gauge\n");
		for (int t = KVT_TIER_HBM; t < KVT_TIER_COUNT; t++) {
			double blocks = (double)st->tier[t].capacity_bytes / bb, hit[N_FACTORS];
			uint64_t caps[N_FACTORS];

			if (!st->tier[t].present)
				continue;
			for (size_t i = 0; i < N_FACTORS; i++)
				caps[i] = (uint64_t)(above + factors[i] * blocks + 0.5);
			above += blocks;
			if (kvt_mrc_curve(in->all, caps, N_FACTORS, hit))
				break; /* no reference yet */
			for (size_t i = 0; i < N_FACTORS; i++)
				kvt_textbuf_printf(&b, "kvtier_mrc_hit_ratio{tier=\"%s\","
						   "capacity_factor=\"%g\"} %.6f\n", kvt_tier_name(t),
						   factors[i], hit[i]);
		}
	}
	*text = b.p;
	*len = b.len;
	*cap = b.cap;
	return b.bad ? -ENOMEM : 0;
}
