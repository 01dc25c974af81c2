/* SPDX-License-Identifier: Apache-2.0 */
/* The devices of a tier spread over several (the SSD tier over several
 * directories, tiers/ssd_stripe.h), for STATS (tiers.ssd.devices), /metrics
 * (kvtier_ssd_device_* with a device label) and /readyz. A device is named by
 * its number (the order of --ssd-dir); its directory only in STATS over the
 * socket: what needs no credentials (/metrics, /stats, /readyz) names no
 * path (docs/metrics.md). */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "transport/prom_text.h"
#include "transport/server_int.h"
#include "transport/stats_json.h"
#include "transport/textbuf.h"

/* The tier's devices into dv[0..KVT_SSD_MAX_DIRS): how many (0: one device). */
static size_t devices_of(struct kvt_store *store, int t, struct kvt_tier_device *dv)
{
	int n = kvt_store_tier_devices(store, (enum kvt_tier)t, dv, KVT_SSD_MAX_DIRS);

	return n > 0 ? (size_t)n : 0;
}

json_t *kvt_metrics_devices_json(struct kvt_store *store, int t, bool paths)
{
	struct kvt_tier_device dv[KVT_SSD_MAX_DIRS];
	size_t n = devices_of(store, t, dv);
	json_t *a;

	if (!n || !(a = json_array()))
		return NULL;
	for (size_t d = 0; d < n; d++) {
		json_t *o = json_object();
		const struct kvt_json_count counts[] = {
			{ "capacity_bytes", dv[d].capacity_bytes },
			{ "used_bytes", dv[d].used_bytes },
			{ "blocks", dv[d].blocks },
			{ "writes", dv[d].writes },
			{ "write_bytes", dv[d].write_bytes },
			{ "reads", dv[d].reads },
			{ "read_bytes", dv[d].read_bytes },
			{ "errors", dv[d].errors },
			{ "blocks_lost", dv[d].dropped },
			{ "recovered", dv[d].recovered },
		};

		json_object_set_new(o, "device", json_integer((json_int_t)d));
		if (paths)
			json_object_set_new(o, "path", json_string(dv[d].path));
		json_object_set_new(o, "state", json_string(kvt_device_state_name(dv[d].state)));
		json_object_set_new(o, "error", json_string(dv[d].error ? strerror(-dv[d].error) :
							   ""));
		KVT_JSON_SET_COUNTS(o, counts);
		json_array_append_new(a, o);
	}
	return a;
}

struct dev_family {
	const char *name, *type, *help;
	size_t off; /* of the value in struct kvt_tier_device */
};

#define DEV_FIELD(f) offsetof(struct kvt_tier_device, f)

static const struct dev_family dev_families[] = {
	{ "kvtier_ssd_device_capacity_bytes", "gauge", "Capacity of each SSD device.",
	  DEV_FIELD(capacity_bytes) },
	{ "kvtier_ssd_device_used_bytes", "gauge", "Disk bytes of the blocks each SSD device holds.",
	  DEV_FIELD(used_bytes) },
	{ "kvtier_ssd_device_blocks", "gauge", "Blocks each SSD device holds.", DEV_FIELD(blocks) },
	{ "kvtier_ssd_device_writes_total", "counter", "Records written to each SSD device.",
	  DEV_FIELD(writes) },
	{ "kvtier_ssd_device_write_bytes_total", "counter", "Block bytes written to each SSD "
	  "device.", DEV_FIELD(write_bytes) },
	{ "kvtier_ssd_device_reads_total", "counter", "Records read from each SSD device.",
	  DEV_FIELD(reads) },
	{ "kvtier_ssd_device_read_bytes_total", "counter", "Bytes read from each SSD device.",
	  DEV_FIELD(read_bytes) },
	{ "kvtier_ssd_device_errors_total", "counter", "I/O errors of each SSD device.",
	  DEV_FIELD(errors) },
	{ "kvtier_ssd_device_blocks_lost_total", "counter", "Blocks each SSD device lost when it "
	  "was taken out.", DEV_FIELD(dropped) },
};

void kvt_metrics_devices_prom(struct kvt_textbuf *b, struct kvt_store *store)
{
	struct kvt_tier_device dv[KVT_SSD_MAX_DIRS];
	size_t n = devices_of(store, KVT_TIER_SSD, dv);

	if (!n)
		return;
	for (size_t i = 0; i < KVT_COUNT_OF(dev_families); i++) {
		const struct dev_family *f = &dev_families[i];

		kvt_prom_help(b, f->name, f->type, f->help);
		for (size_t d = 0; d < n; d++) {
			uint64_t v;

			memcpy(&v, (const char *)&dv[d] + f->off, sizeof(v));
			kvt_textbuf_printf(b, "%s{device=\"%zu\"} %llu\n", f->name, d,
					   (unsigned long long)v);
		}
	}
	kvt_prom_help(b, "kvtier_ssd_device_state", "gauge", "Each SSD device's state: 1 for "
		      "the one it is in (ok, degraded: reads only, out: taken out, its blocks "
		      "lost, missing: not opened at start).");
	for (size_t d = 0; d < n; d++)
		for (int s = KVT_DEVICE_OK; s <= KVT_DEVICE_MISSING; s++)
			kvt_textbuf_printf(b, "kvtier_ssd_device_state{device=\"%zu\",state=\"%s\"} "
					   "%d\n", d,
					   kvt_device_state_name((enum kvt_device_state)s),
					   dv[d].state == (enum kvt_device_state)s);
}

void kvt_health_devices(struct kvt_textbuf *b, struct kvt_store *store)
{
	struct kvt_tier_device dv[KVT_SSD_MAX_DIRS];
	size_t n = devices_of(store, KVT_TIER_SSD, dv);

	for (size_t d = 0; d < n; d++) {
		static const char *const what[] = {
			[KVT_DEVICE_DEGRADED] = "failing writes: reads only, probed until it "
						"takes writes again",
			[KVT_DEVICE_OUT] = "taken out: its blocks are misses until a restart "
					   "opens it again",
			[KVT_DEVICE_MISSING] = "missing since the start: its blocks are misses",
		};

		if (dv[d].state == KVT_DEVICE_OK)
			continue;
		kvt_textbuf_printf(b, "degraded: ssd device %zu %s (%s); the other devices "
				   "serve\n", d, what[dv[d].state],
				   dv[d].error ? strerror(-dv[d].error) : "");
	}
}
