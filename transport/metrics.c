/* SPDX-License-Identifier: Apache-2.0 */
/* The server's counters, rendered two ways: JSON (the STATS reply, read by
 * `kvtier stats`) and Prometheus text (the HTTP endpoint, GET /metrics). Both
 * come from one snapshot of the server's and the store's counters, so a
 * person and a scraper see the same numbers. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "transport/server_int.h"
#include "transport/stats_json.h"
#include "transport/prom_text.h"
#include "transport/textbuf.h"

const double kvt_lat_bounds_us[KVT_LAT_BUCKETS] = {
	5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000,
	100000, 250000, 500000, 1000000, 5000000,
};

void kvt_metrics_observe(struct kvt_server *srv, uint16_t op, uint64_t start_ns, int err)
{
	struct kvt_op_stats *s;
	double us;
	int b = 0;

	if (op == 0 || op >= KVT_OP_COUNT)
		return;
	s = &srv->c.op[op];
	s->count++;
	if (err)
		s->errors++;
	if (!start_ns)
		return; /* WAITs parked: their time is the job's, not theirs */
	us = (double)(kvt_now_ns() - start_ns) / 1e3;
	while (b < KVT_LAT_BUCKETS && us > kvt_lat_bounds_us[b])
		b++;
	s->bucket[b]++;
	s->sum_us += us;
}

static uint64_t ld(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* ---- JSON -------------------------------------------------------------- */

/* WAITs parked on all connections, for their jobs to end. */
static uint64_t waits_parked(const struct kvt_server *srv)
{
	uint64_t parked = 0;

	for (const struct kvt_conn *cn = srv->conns; cn; cn = cn->next)
		parked += cn->n_waits;
	return parked;
}

/* Each builder below makes one section of the STATS object and returns it,
 * NULL when it could not be allocated. jansson's setters ignore a NULL
 * object (and free the value they were given), so a builder fills its
 * section without checking each allocation: a part that could not be made
 * is left out. */

/* The daemon: uptime, connections, jobs, and how engine memory is reached. */
static json_t *server_json(const struct kvt_server *srv)
{
	const struct kvt_server_counters *c = &srv->c;
	json_t *o = json_object();
	const struct kvt_json_count counts[] = {
		{ "connections_open", c->conns_open },
		{ "connections_accepted", c->conns_accepted },
		{ "connections_refused", c->conns_refused },
		{ "connections_refused_uid_limit", c->conns_uid_refused },
		{ "hello_timeouts", c->hello_timeouts },
		{ "hello_delayed", c->hello_delayed },
		{ "namespaces_reclaimed", c->ns_reclaimed },
		{ "hello_refused", c->hello_refused },
		{ "hello_shape_mismatch", c->hello_shape_mismatch },
		{ "bad_frames", c->bad_frames },
		{ "jobs_in_flight", (uint64_t)__atomic_load_n(&srv->busy_jobs, __ATOMIC_RELAXED) },
		{ "waits_parked", waits_parked(srv) },
		{ "jobs_cancelled", c->jobs_cancelled },
		{ "workers", srv->n_threads },
	};

	json_object_set_new(o, "uptime_s", json_real((double)(kvt_now_ns() - srv->start_ns) / 1e9));
	KVT_JSON_SET_COUNTS(o, counts);
	json_object_set_new(o, "gpu", json_boolean(srv->opts.dev_cuda != NULL));
	json_object_set_new(o, "host_copy", json_string(srv->opts.dev_host ? "device" : "direct"));
	return o;
}

/* What SAVE and LOAD copied between engine memory and the store. */
static json_t *copies_json(const struct kvt_server_counters *c, const struct kvt_store_stats *st)
{
	json_t *o = json_object();
	const struct kvt_json_count counts[] = {
		{ "gather_bytes", ld(&c->gather_bytes) },
		{ "scatter_bytes", ld(&c->scatter_bytes) },
		{ "save_blocks", ld(&c->save_blocks) },
		{ "save_already_present", ld(&c->save_present) },
		{ "load_blocks", ld(&c->load_blocks) },
		{ "load_misses", ld(&c->load_misses) },
		/* only LOAD reads through the store's peer tier */
		{ "load_remote_blocks", st->tier[KVT_TIER_REMOTE].hits },
		{ "lookup_remote_keys", c->lookup_remote },
	};

	KVT_JSON_SET_COUNTS(o, counts);
	return o;
}

/* The store's own counts, all tiers together. */
static json_t *store_json(const struct kvt_store_stats *st)
{
	json_t *o = json_object();
	const struct kvt_json_count counts[] = {
		{ "namespaces", st->namespaces },
		{ "blocks", st->blocks },
		{ "recovered_unattached", st->recovered_unattached },
		{ "puts", st->puts },
		{ "gets", st->gets },
		{ "get_misses", st->get_misses },
		{ "removes", st->removes },
		{ "lookups", st->lookups },
		{ "lookup_keys", st->lookup_keys },
		{ "lookup_hit_keys", st->lookup_hit_keys },
		{ "lookup_miss_keys", st->lookup_keys - st->lookup_hit_keys },
		{ "checksum_failures", st->checksum_failures },
		{ "index_bytes", st->index_bytes },
		{ "dram_dropped", st->dram_dropped },
		{ "ssd_copies_dropped", st->ssd_copies_dropped },
		{ "ssd_admission_refused", st->ssd_admission_refused },
		{ "ssd_admission_refused_bytes", st->ssd_admission_refused_bytes },
		{ "demote_batches", st->demote_batches },
		{ "demote_batch_blocks", st->demote_batch_blocks },
		{ "ssd_compressed_writes", st->ssd_compressed_writes },
		{ "ssd_write_raw_bytes", st->ssd_write_raw_bytes },
		{ "ssd_write_stored_bytes", st->ssd_write_stored_bytes },
	};

	KVT_JSON_SET_COUNTS(o, counts);
	return o;
}

/* Into the SSD tier's object o: what its last open found ("recovery") and
 * its health since. */
static void add_ssd_health(json_t *o, const struct kvt_ssd_health *h)
{
	const struct kvt_json_count recovery_counts[] = {
		{ "recovered", h->recovered },
		{ "torn", h->torn },
		{ "corrupt", h->corrupt },
		{ "superseded", h->superseded },
		{ "removed", h->removed },
		{ "quarantined", h->quarantined },
		{ "foreign", h->foreign },
		{ "scanned", h->scanned },
		{ "open_ms", h->open_ms },
	};
	const struct kvt_json_count health_counts[] = {
		{ "tombstones", h->tombstones },
		{ "probes", h->probes },
		{ "resumed", h->resumed },
	};
	json_t *rec = json_object();

	KVT_JSON_SET_COUNTS(rec, recovery_counts);
	json_object_set_new(o, "recovery", rec);
	KVT_JSON_SET_COUNTS(o, health_counts);
}

/* Tier t's table of named counters into c[0..KVT_TIER_COUNTERS_MAX): how
 * many (0 on error). */
static size_t tier_counters(struct kvt_store *store, int t, struct kvt_counter *c)
{
	int n = kvt_store_tier_counters(store, (enum kvt_tier)t, c, KVT_TIER_COUNTERS_MAX);

	return n > 0 ? (size_t)n : 0;
}

/* Into tier object o: its named counters ("counters": name -> value) and
 * the units of those that have one ("units": name -> unit). */
static void add_tier_counters(json_t *o, struct kvt_store *store, int t)
{
	struct kvt_counter c[KVT_TIER_COUNTERS_MAX];
	size_t n = tier_counters(store, t, c);
	json_t *values = json_object(), *units = json_object();

	for (size_t i = 0; i < n; i++) {
		kvt_json_set_count(values, c[i].name, c[i].value);
		if (c[i].unit && *c[i].unit)
			json_object_set_new(units, c[i].name, json_string(c[i].unit));
	}
	json_object_set_new(o, "counters", values);
	json_object_set_new(o, "units", units);
}

/* One tier's figures (the SSD tier's with its health), and its counters. */
static json_t *tier_json(struct kvt_store *store, const struct kvt_store_stats *st, int t,
			 bool paths)
{
	const struct kvt_tier_stats *ts = &st->tier[t];
	json_t *o = json_object();
	const struct kvt_json_count counts[] = {
		{ "capacity_bytes", ts->capacity_bytes },
		{ "used_bytes", ts->used_bytes },
		{ "blocks", ts->blocks },
		{ "hits", ts->hits },
		{ "bytes_in", ts->bytes_in },
		{ "bytes_out", ts->bytes_out },
		{ "evictions", ts->evictions },
		{ "errors", ts->errors },
	};

	KVT_JSON_SET_COUNTS(o, counts);
	json_object_set_new(o, "occupancy", json_real(ts->capacity_bytes ?
		(double)ts->used_bytes / (double)ts->capacity_bytes : 0));
	json_object_set_new(o, "degraded", json_boolean(ts->degraded));
	if (t == KVT_TIER_SSD)
		add_ssd_health(o, &st->ssd);
	add_tier_counters(o, store, t);
	json_t *devices = kvt_metrics_devices_json(store, t, paths);
	if (devices)
		json_object_set_new(o, "devices", devices);
	return o;
}

/* The DRAM tier across a restart: what came back warm from the region
 * handed in, what was dropped and why, the rebuild's time, and what the
 * last clean stop wrote down to SSD (docs/restart.md). */
static json_t *restart_json(const struct kvt_store_stats *st)
{
	const struct kvt_warm_stats *w = &st->warm;
	const struct kvt_json_count counts[] = {
		{ "generation", w->generation },
		{ "warm_blocks", w->blocks },
		{ "warm_bytes", w->bytes },
		{ "verified", w->verified },
		{ "rebuild_us", w->rebuild_us },
	};
	const struct kvt_json_count dropped_counts[] = {
		{ "torn", w->dropped_torn },
		{ "header", w->dropped_header },
		{ "namespace", w->dropped_namespace },
		{ "checksum", w->dropped_checksum },
	};
	const struct kvt_json_count wd_counts[] = {
		{ "blocks", w->write_down.written },
		{ "bytes", w->write_down.written_bytes },
		{ "refused", w->write_down.refused },
		{ "left", w->write_down.left },
		{ "ms", w->write_down.ms },
	};
	json_t *o = json_object(), *dropped = json_object(), *wd = json_object();

	json_object_set_new(o, "warm", json_boolean(w->on));
	json_object_set_new(o, "adopted", json_boolean(w->adopted));
	json_object_set_new(o, "refused", json_boolean(w->refused));
	KVT_JSON_SET_COUNTS(o, counts);
	KVT_JSON_SET_COUNTS(dropped, dropped_counts);
	json_object_set_new(o, "dropped", dropped);
	KVT_JSON_SET_COUNTS(wd, wd_counts);
	json_object_set_new(o, "write_down", wd);
	return o;
}

/* The tiers present, by name (paths: with the SSD devices' directories). */
static json_t *tiers_json(struct kvt_store *store, const struct kvt_store_stats *st, bool paths)
{
	json_t *o = json_object();

	for (int t = KVT_TIER_HBM; t < KVT_TIER_COUNT; t++)
		if (st->tier[t].present)
			json_object_set_new(o, kvt_tier_name(t), tier_json(store, st, t, paths));
	return o;
}

/* LOOKUP's plan and what it is made of: each tier's measured delivery to
 * engines, and the prefill speeds namespaces' engines reported (the first
 * KVT_PLAN_ENGINES_SHOWN, unnamed: stats carry counts, never a tenant or a
 * model). */
#define KVT_PLAN_ENGINES_SHOWN 64

static json_t *plan_json(struct kvt_server *srv, const struct kvt_store_stats *st)
{
	const struct kvt_server_counters *c = &srv->c;
	json_t *o = json_object(), *tiers = json_object(), *engines = json_array();
	uint64_t now = kvt_now_ns(), reporting = 0;

	for (int t = KVT_TIER_HBM; t < KVT_TIER_COUNT; t++) {
		struct kvt_rate r = kvt_tier_rates_get(&srv->rates, (unsigned)t);
		json_t *e;

		if (!st->tier[t].present && !r.samples)
			continue;
		e = json_object();
		json_object_set_new(e, "bytes_per_s", json_real(kvt_rate_value(&r)));
		kvt_json_set_count(e, "samples", r.samples);
		json_object_set_new(e, "age_s", r.samples ? json_real((double)(now - r.last_ns) / 1e9)
							 : json_null());
		json_object_set_new(tiers, kvt_tier_name(t), e);
	}
	for (size_t i = 0; i < srv->opts.n_tenants; i++) {
		for (const struct kvt_ns_use *u = srv->tenant_uses[i]; u; u = u->tnext) {
			json_t *e;

			if (!u->prefill.samples || reporting++ >= KVT_PLAN_ENGINES_SHOWN)
				continue;
			e = json_object();
			json_object_set_new(e, "prefill_tokens_per_s",
					    json_real(kvt_rate_value(&u->prefill)));
			kvt_json_set_count(e, "reports", u->prefill.samples);
			json_array_append_new(engines, e);
		}
	}
	const struct kvt_json_count counts[] = {
		{ "namespaces_reporting", reporting },
		{ "lookups", c->plan_lookups },
		{ "load_blocks", c->plan_load_blocks },
		{ "recompute_blocks", c->plan_recompute_blocks },
		{ "retries", c->plan_retries },
		{ "prefill_reports", c->prefill_reports },
	};

	json_object_set_new(o, "tiers", tiers);
	json_object_set_new(o, "engines", engines);
	KVT_JSON_SET_COUNTS(o, counts);
	return o;
}

/* The upper bounds of the latency buckets, in microseconds (the last bucket
 * of each op, above them all, has none). */
static json_t *latency_bounds_json(void)
{
	json_t *bounds = json_array();

	for (int b = 0; b < KVT_LAT_BUCKETS; b++)
		json_array_append_new(bounds, json_real(kvt_lat_bounds_us[b]));
	return bounds;
}

/* One op's requests, errors and latency histogram. */
static json_t *op_json(const struct kvt_op_stats *s)
{
	uint64_t timed = 0;
	json_t *o = json_object(), *h = json_array();

	for (int b = 0; b <= KVT_LAT_BUCKETS; b++) {
		timed += s->bucket[b];
		json_array_append_new(h, json_integer((json_int_t)s->bucket[b]));
	}
	kvt_json_set_count(o, "count", s->count);
	kvt_json_set_count(o, "errors", s->errors);
	json_object_set_new(o, "mean_us", json_real(timed ? s->sum_us / (double)timed : 0));
	json_object_set_new(o, "latency_buckets", h);
	return o;
}

/* Every op, by name. */
static json_t *ops_json(const struct kvt_server_counters *c)
{
	json_t *o = json_object();

	for (unsigned op = 1; op < KVT_OP_COUNT; op++)
		json_object_set_new(o, kvt_op_name(op), op_json(&c->op[op]));
	return o;
}

/* The cluster's section, from the daemon's hook: NULL when there is no hook
 * or what it returns is not JSON. */
static json_t *cluster_json(struct kvt_server *srv)
{
	char *text;
	json_t *o;

	if (!srv->opts.hooks.json_cb)
		return NULL;
	text = srv->opts.hooks.json_cb(srv->opts.hooks.arg);
	o = text ? json_loads(text, 0, NULL) : NULL;
	free(text);
	return o;
}

/* Set section at key in root, taking it; -ENOMEM when it is NULL. */
static int add_section(json_t *root, const char *key, json_t *section)
{
	if (!section)
		return -ENOMEM;
	json_object_set_new(root, key, section);
	return 0;
}

char *kvt_metrics_json(struct kvt_server *srv, size_t tenant, bool paths)
{
	struct kvt_store_stats st = { .size = sizeof(st) };
	json_t *root = json_object();
	char *text = NULL;

	if (!root)
		return NULL;
	kvt_store_stats(srv->opts.store, &st);
	if (add_section(root, "server", server_json(srv)) ||
	    add_section(root, "copies", copies_json(&srv->c, &st)) ||
	    add_section(root, "store", store_json(&st)) ||
	    add_section(root, "tiers", tiers_json(srv->opts.store, &st, paths)) ||
	    add_section(root, "ops", ops_json(&srv->c)) ||
	    (tenant < srv->opts.n_tenants &&
	     add_section(root, "tenant", kvt_insight_tenant_json(srv->insight, tenant, &st))))
		goto out;
	/* The reply goes without these when they could not be made (short of
	 * memory; for cluster, no hook or no JSON from it). */
	json_object_set_new(root, "plan", plan_json(srv, &st));
	json_object_set_new(root, "latency_bounds_us", latency_bounds_json());
	json_object_set_new(root, "mrc", kvt_insight_mrc_json(srv->insight, &st));
	json_object_set_new(root, "cluster", cluster_json(srv));
	json_object_set_new(root, "restart", restart_json(&st));
	text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
out:
	json_decref(root);
	return text;
}

/* ---- Prometheus text --------------------------------------------------- */

/* The per-tier families, one sample for each tier present. */
enum tier_sample {
	TIER_FIELD,     /* the uint64_t at `field` in struct kvt_tier_stats */
	TIER_OCCUPANCY, /* used / capacity */
	TIER_IN_OUT,    /* bytes_in and bytes_out, as direction="in" and "out" */
	TIER_DEGRADED,  /* 0 or 1 */
};

#define TIER_STAT(member) offsetof(struct kvt_tier_stats, member)

static const struct tier_family {
	const char *name, *type, *help;
	enum tier_sample sample;
	size_t field;
} tier_families[] = {
	{ "kvtier_tier_capacity_bytes", "gauge", "Capacity of each tier.",
	  TIER_FIELD, TIER_STAT(capacity_bytes) },
	{ "kvtier_tier_used_bytes", "gauge",
	  "Bytes each tier holds for its blocks (SSD: the records on disk, headers included).",
	  TIER_FIELD, TIER_STAT(used_bytes) },
	{ "kvtier_tier_occupancy_ratio", "gauge", "used / capacity of each tier.",
	  TIER_OCCUPANCY, 0 },
	{ "kvtier_tier_blocks", "gauge", "Blocks stored in each tier.",
	  TIER_FIELD, TIER_STAT(blocks) },
	{ "kvtier_tier_hits_total", "counter", "Lookups and reads served from each tier.",
	  TIER_FIELD, TIER_STAT(hits) },
	{ "kvtier_tier_bytes_total", "counter", "Bytes moved into (in) and out of (out) each tier.",
	  TIER_IN_OUT, 0 },
	{ "kvtier_tier_evictions_total", "counter", "Blocks that left each tier for lack of room.",
	  TIER_FIELD, TIER_STAT(evictions) },
	{ "kvtier_tier_errors_total", "counter", "I/O errors and checksum mismatches of each tier.",
	  TIER_FIELD, TIER_STAT(errors) },
	{ "kvtier_tier_degraded", "gauge", "1 when a tier is failing and no longer written to.",
	  TIER_DEGRADED, 0 },
};

static void tier_sample(struct kvt_textbuf *b, const struct tier_family *f, const char *tier,
			const struct kvt_tier_stats *ts)
{
	switch (f->sample) {
	case TIER_FIELD: {
		uint64_t v;

		memcpy(&v, (const char *)ts + f->field, sizeof(v));
		kvt_textbuf_printf(b, "%s{tier=\"%s\"} %llu\n", f->name, tier, (unsigned long long)v);
		break;
	}
	case TIER_OCCUPANCY:
		kvt_textbuf_printf(b, "%s{tier=\"%s\"} %.6f\n", f->name, tier, ts->capacity_bytes ?
				   (double)ts->used_bytes / (double)ts->capacity_bytes : 0.0);
		break;
	case TIER_IN_OUT:
		kvt_textbuf_printf(b, "%s{tier=\"%s\",direction=\"in\"} %llu\n", f->name, tier,
				   (unsigned long long)ts->bytes_in);
		kvt_textbuf_printf(b, "%s{tier=\"%s\",direction=\"out\"} %llu\n", f->name, tier,
				   (unsigned long long)ts->bytes_out);
		break;
	case TIER_DEGRADED:
		kvt_textbuf_printf(b, "%s{tier=\"%s\"} %d\n", f->name, tier, ts->degraded ? 1 : 0);
		break;
	}
}

/* What the SSD tier reports beside the per-tier families and its table,
 * from the fields of struct kvt_store_stats kept for older callers (labelled
 * families a table's flat rows do not make). */
static void ssd_prom(struct kvt_textbuf *b, const struct kvt_store_stats *st)
{
	const struct kvt_ssd_health *h = &st->ssd;
	const struct kvt_prom_count written[] = {
		{ "kvtier_demote_batches_total", "counter",
		  "Write batches the demoter sent to the SSD tier (each one group commit).",
		  st->demote_batches },
		{ "kvtier_demote_batch_blocks_total", "counter",
		  "Blocks those batches carried (divided by the batches: the mean batch).",
		  st->demote_batch_blocks },
	};
	const struct kvt_prom_sample write_bytes[] = {
		{ "raw", st->ssd_write_raw_bytes },
		{ "stored", st->ssd_write_stored_bytes },
	};
	const struct kvt_prom_sample records[] = {
		{ "recovered", h->recovered },
		{ "torn", h->torn },
		{ "corrupt", h->corrupt },
		{ "superseded", h->superseded },
		{ "removed", h->removed },
	};
	const struct kvt_prom_sample files[] = {
		{ "quarantined", h->quarantined },
		{ "foreign", h->foreign },
	};

	kvt_prom_counts(b, written, KVT_COUNT_OF(written));
	kvt_prom_labelled(b, "kvtier_ssd_write_bytes_total", "counter",
		 "Bytes of the SSD records written: raw (the blocks) and stored (encoded).",
		 "kind", write_bytes, KVT_COUNT_OF(write_bytes));
	kvt_prom_labelled(b, "kvtier_ssd_recovery_records", "gauge",
		 "What the SSD tier's last open found, by kind.", "kind", records, KVT_COUNT_OF(records));
	kvt_prom_labelled(b, "kvtier_ssd_recovery_files", "gauge",
		 "Files the SSD tier's last open moved to quarantine/ or left in place.",
		 "fate", files, KVT_COUNT_OF(files));
	kvt_prom_help(b, "kvtier_ssd_open_seconds", "gauge", "How long the SSD tier took to open.");
	kvt_textbuf_printf(b, "kvtier_ssd_open_seconds %.3f\n", (double)h->open_ms / 1e3);
}

/* The DRAM tier across a restart (restart_json's figures). */
static void restart_prom(struct kvt_textbuf *b, const struct kvt_store_stats *st)
{
	const struct kvt_warm_stats *w = &st->warm;
	const struct kvt_prom_count counts[] = {
		{ "kvtier_restart_warm_blocks", "gauge",
		  "Blocks found in the DRAM region handed over at the last start.", w->blocks },
		{ "kvtier_restart_warm_bytes", "gauge",
		  "Bytes of the blocks found in the DRAM region handed over at the last start.",
		  w->bytes },
		{ "kvtier_restart_verified_blocks_total", "counter",
		  "Blocks of the handed-over region checked whole at their first use.", w->verified },
		{ "kvtier_restart_region_refused", "gauge",
		  "1 when the region handed in was of another version or geometry (DRAM started "
		  "empty).", w->refused },
		{ "kvtier_restart_generation", "gauge",
		  "Starts the DRAM region has lived through (1: new at this start).", w->generation },
		{ "kvtier_stop_written_down_blocks", "gauge",
		  "Blocks only DRAM held that the last clean stop wrote to SSD.",
		  w->write_down.written },
	};
	const struct kvt_prom_sample dropped[] = {
		{ "torn", w->dropped_torn },
		{ "header", w->dropped_header },
		{ "namespace", w->dropped_namespace },
		{ "checksum", w->dropped_checksum },
	};

	if (!w->on)
		return;
	kvt_prom_counts(b, counts, KVT_COUNT_OF(counts));
	kvt_prom_labelled(b, "kvtier_restart_dropped_blocks", "gauge",
		 "Blocks of the handed-over region dropped, never served, by reason.", "reason",
		 dropped, KVT_COUNT_OF(dropped));
	kvt_prom_help(b, "kvtier_restart_rebuild_seconds", "gauge",
		      "How long indexing the handed-over DRAM region took.");
	kvt_textbuf_printf(b, "kvtier_restart_rebuild_seconds %.6f\n", (double)w->rebuild_us / 1e6);
}

/* The per-tier families, each with a sample for every tier present; then
 * each tier's table of named counters, one family per row:
 * kvtier_<tier>_<name>, with _total for a counter. */
static void tiers_prom(struct kvt_textbuf *b, struct kvt_store *store,
		       const struct kvt_store_stats *st)
{
	for (size_t i = 0; i < KVT_COUNT_OF(tier_families); i++) {
		kvt_prom_help(b, tier_families[i].name, tier_families[i].type, tier_families[i].help);
		for (int t = KVT_TIER_HBM; t < KVT_TIER_COUNT; t++)
			if (st->tier[t].present)
				tier_sample(b, &tier_families[i], kvt_tier_name(t), &st->tier[t]);
	}
	for (int t = KVT_TIER_HBM; t < KVT_TIER_COUNT; t++) {
		struct kvt_counter c[KVT_TIER_COUNTERS_MAX];
		size_t n = st->tier[t].present ? tier_counters(store, t, c) : 0;

		for (size_t i = 0; i < n; i++) {
			bool counter = c[i].kind == KVT_COUNTER_COUNTER;
			char name[128];

			snprintf(name, sizeof(name), "kvtier_%s_%s%s", kvt_tier_name(t), c[i].name,
				 counter ? "_total" : "");
			kvt_prom_count(b, name, counter ? "counter" : "gauge", c[i].help, c[i].value);
		}
	}
}

/* What LOOKUP found and LOAD did not. */
static void lookups_prom(struct kvt_textbuf *b, const struct kvt_server_counters *c,
			 const struct kvt_store_stats *st)
{
	const struct kvt_prom_sample lookup_keys[] = {
		{ "hit", st->lookup_hit_keys },
		{ "miss", st->lookup_keys - st->lookup_hit_keys },
	};

	kvt_prom_labelled(b, "kvtier_lookup_keys_total", "counter", "Keys looked up, by result.",
			  "result", lookup_keys, KVT_COUNT_OF(lookup_keys));
	kvt_prom_count(b, "kvtier_load_misses_total", "counter",
		       "Blocks asked for by LOAD and not found.", ld(&c->load_misses));
}

/* LOOKUP's plan: each tier's measured delivery, what the plan chose, and
 * the blocks and keys other nodes held. */
static void plan_prom(struct kvt_textbuf *b, struct kvt_server *srv,
		      const struct kvt_store_stats *st)
{
	const struct kvt_server_counters *c = &srv->c;
	const struct kvt_prom_sample plan_blocks[] = {
		{ "load", c->plan_load_blocks },
		{ "recompute", c->plan_recompute_blocks },
	};
	const struct kvt_prom_count plan[] = {
		{ "kvtier_plan_retries_total", "counter",
		  "LOOKUPs that took a tier's default rate again, its measurement being stale.",
		  c->plan_retries },
		{ "kvtier_prefill_reports_total", "counter",
		  "Prefill speeds reported by engines (PREFILL).", c->prefill_reports },
		/* only LOAD reads through the store's peer tier (peers are
		 * served local blocks alone) */
		{ "kvtier_load_remote_blocks_total", "counter",
		  "Blocks LOAD brought from other nodes of the cluster.", st->tier[KVT_TIER_REMOTE].hits },
		{ "kvtier_lookup_remote_keys_total", "counter",
		  "Keys LOOKUP reported held by other nodes (tier remote).", c->lookup_remote },
	};

	kvt_prom_help(b, "kvtier_tier_delivered_bytes_per_second", "gauge",
		      "What each tier delivers to engines (LOAD, acquire to engine memory), moving average.");
	for (int t = KVT_TIER_HBM; t < KVT_TIER_COUNT; t++) {
		struct kvt_rate r = kvt_tier_rates_get(&srv->rates, (unsigned)t);

		if (r.samples)
			kvt_textbuf_printf(b, "kvtier_tier_delivered_bytes_per_second{tier=\"%s\"} "
					   "%.0f\n", kvt_tier_name(t), kvt_rate_value(&r));
	}
	kvt_prom_labelled(b, "kvtier_plan_blocks_total", "counter",
			  "Stored blocks LOOKUP's plan had engines load or recompute.", "action",
			  plan_blocks, KVT_COUNT_OF(plan_blocks));
	kvt_prom_counts(b, plan, KVT_COUNT_OF(plan));
}

/* Bytes copied between engine memory and kvtier. */
static void engine_bytes_prom(struct kvt_textbuf *b, const struct kvt_server_counters *c)
{
	const struct kvt_prom_sample engine_bytes[] = {
		{ "gather", ld(&c->gather_bytes) },
		{ "scatter", ld(&c->scatter_bytes) },
	};

	kvt_prom_labelled(b, "kvtier_engine_bytes_total", "counter",
			  "Bytes copied between engine memory and kvtier (gather = save, scatter = load).",
			  "direction", engine_bytes, KVT_COUNT_OF(engine_bytes));
}

/* The store's blocks and what it lost. */
static void store_prom(struct kvt_textbuf *b, const struct kvt_store_stats *st)
{
	const struct kvt_prom_count stored[] = {
		{ "kvtier_blocks", "gauge", "Blocks stored in all tiers.", st->blocks },
		{ "kvtier_recovered_unattached_blocks", "gauge",
		  "Blocks recovered from storage at open whose namespace no HELLO attached since.",
		  st->recovered_unattached },
		{ "kvtier_checksum_failures_total", "counter",
		  "Blocks dropped for a checksum mismatch.", st->checksum_failures },
		{ "kvtier_dram_dropped_total", "counter",
		  "Blocks DRAM let go for lack of room with no copy below (no working SSD tier).",
		  st->dram_dropped },
	};

	kvt_prom_counts(b, stored, KVT_COUNT_OF(stored));
}

/* The daemon's connections and HELLOs. */
static void server_prom(struct kvt_textbuf *b, const struct kvt_server_counters *c)
{
	const struct kvt_prom_count server[] = {
		{ "kvtier_connections", "gauge", "Client connections open.", c->conns_open },
		{ "kvtier_connections_refused_total", "counter",
		  "Connections refused (peer credentials, client limit, per-uid limit).",
		  c->conns_refused },
		{ "kvtier_hello_timeouts_total", "counter",
		  "Connections closed for not saying HELLO in time.", c->hello_timeouts },
		{ "kvtier_namespaces_reclaimed_total", "counter",
		  "Namespaces detached once no block and no connection was left in them.",
		  c->ns_reclaimed },
		{ "kvtier_hello_delayed_total", "counter",
		  "HELLOs held back because their uid failed too many recently.", c->hello_delayed },
		{ "kvtier_hello_refused_total", "counter",
		  "HELLOs refused (token, model not allowed, namespace quota).", c->hello_refused },
		{ "kvtier_hello_shape_mismatch_total", "counter",
		  "HELLOs of a model id already open in another shape (another namespace: no hits).",
		  c->hello_shape_mismatch },
		{ "kvtier_bad_frames_total", "counter", "Frames refused by the parser.", c->bad_frames },
	};

	kvt_prom_counts(b, server, KVT_COUNT_OF(server));
}

/* Requests handled, by op and result. */
static void ops_prom(struct kvt_textbuf *b, const struct kvt_server_counters *c)
{
	kvt_prom_help(b, "kvtier_ops_total", "counter", "Requests handled, by op and result.");
	for (unsigned op = 1; op < KVT_OP_COUNT; op++) {
		kvt_textbuf_printf(b, "kvtier_ops_total{op=\"%s\",result=\"ok\"} %llu\n", kvt_op_name(op),
			(unsigned long long)(c->op[op].count - c->op[op].errors));
		kvt_textbuf_printf(b, "kvtier_ops_total{op=\"%s\",result=\"error\"} %llu\n", kvt_op_name(op),
			(unsigned long long)c->op[op].errors);
	}
}

/* Each op's latency histogram. */
static void latency_prom(struct kvt_textbuf *b, const struct kvt_server_counters *c)
{
	kvt_prom_help(b, "kvtier_op_latency_seconds", "histogram",
		      "Time from a request's arrival to its reply (SAVE/LOAD: to completion).");
	for (unsigned op = 1; op < KVT_OP_COUNT; op++) {
		uint64_t cum = 0;

		for (int i = 0; i < KVT_LAT_BUCKETS; i++) {
			cum += c->op[op].bucket[i];
			kvt_textbuf_printf(b, "kvtier_op_latency_seconds_bucket{op=\"%s\",le=\"%g\"} %llu\n",
				kvt_op_name(op), kvt_lat_bounds_us[i] / 1e6, (unsigned long long)cum);
		}
		cum += c->op[op].bucket[KVT_LAT_BUCKETS];
		kvt_textbuf_printf(b, "kvtier_op_latency_seconds_bucket{op=\"%s\",le=\"+Inf\"} %llu\n",
			kvt_op_name(op), (unsigned long long)cum);
		kvt_textbuf_printf(b, "kvtier_op_latency_seconds_sum{op=\"%s\"} %.9f\n", kvt_op_name(op),
			c->op[op].sum_us / 1e6);
		kvt_textbuf_printf(b, "kvtier_op_latency_seconds_count{op=\"%s\"} %llu\n", kvt_op_name(op),
			(unsigned long long)cum);
	}
}

/* The cluster's families, from the daemon's hook, when there is one. */
static void cluster_prom(struct kvt_textbuf *b, struct kvt_server *srv)
{
	char *text;

	if (!srv->opts.hooks.prom_cb)
		return;
	text = srv->opts.hooks.prom_cb(srv->opts.hooks.arg);
	if (text)
		kvt_textbuf_printf(b, "%s", text);
	free(text);
}

char *kvt_metrics_prom(struct kvt_server *srv)
{
	struct kvt_store_stats st = { .size = sizeof(st) };
	struct kvt_textbuf b = { 0 };

	kvt_store_stats(srv->opts.store, &st);
	tiers_prom(&b, srv->opts.store, &st);
	lookups_prom(&b, &srv->c, &st);
	plan_prom(&b, srv, &st);
	engine_bytes_prom(&b, &srv->c);
	store_prom(&b, &st);
	if (st.tier[KVT_TIER_SSD].present) {
		ssd_prom(&b, &st);
		kvt_metrics_devices_prom(&b, srv->opts.store);
	}
	restart_prom(&b, &st);
	server_prom(&b, &srv->c);
	ops_prom(&b, &srv->c);
	latency_prom(&b, &srv->c);
	if (!b.bad && kvt_insight_prom(srv->insight, &st, srv->opts.metrics_tenants, &b.p, &b.len,
				       &b.cap))
		b.bad = true;
	cluster_prom(&b, srv);
	kvt_process_prom(&b);
	if (b.bad) {
		free(b.p);
		return NULL;
	}
	return b.p;
}
