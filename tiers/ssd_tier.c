/* SPDX-License-Identifier: Apache-2.0 */
/* The SSD tier behind the storage tier ops of tiers/tier.h: see ssd.h. */
#include <errno.h>
#include <stdlib.h>

#include "tiers/ssd.h"

struct ssd_tier {
	struct kvt_storage_tier base; /* first: the ops get this pointer */
	struct kvt_ssd *ssd;
	/* what recovery found, handed out once by take_recovered */
	struct kvt_tier_rec *found;
	size_t n_found, cap_found, next_found;
	/* block reads submitted and not waited for yet, and the most there
	 * were at once (atomic: readers submit from any thread) */
	uint64_t reads_in_flight, reads_in_flight_max;
};

static struct kvt_ssd *ssd_of(struct kvt_storage_tier *t)
{
	return ((struct ssd_tier *)t)->ssd;
}

struct kvt_ssd *kvt_ssd_tier_ssd(struct kvt_storage_tier *t)
{
	return ssd_of(t);
}

static struct kvt_tier_rec rec_of(const struct kvt_ssd_rec_info *r)
{
	return (struct kvt_tier_rec){ .ns_id = r->ns_id, .key = r->key, .parent = r->parent,
				      .has_parent = r->has_parent, .len = r->raw_len,
				      .loc = r->loc };
}

/* Keep what recovery reports; without memory for it, the tier frees it. */
static int found_cb(const struct kvt_ssd_rec_info *r, void *arg)
{
	struct ssd_tier *t = arg;

	if (t->n_found == t->cap_found) {
		size_t cap = t->cap_found ? 2 * t->cap_found : 256;
		struct kvt_tier_rec *v = realloc(t->found, cap * sizeof(*v));

		if (!v)
			return 1;
		t->found = v;
		t->cap_found = cap;
	}
	t->found[t->n_found++] = rec_of(r);
	return 0;
}

/* Count a read batch in flight (n > 0) or done (n < 0), and keep the
 * high-water mark. */
static void reads_in_flight(struct ssd_tier *st, int64_t n)
{
	uint64_t now = __atomic_add_fetch(&st->reads_in_flight, (uint64_t)n, __ATOMIC_RELAXED);
	uint64_t max = __atomic_load_n(&st->reads_in_flight_max, __ATOMIC_RELAXED);

	while (n > 0 && now > max &&
	       !__atomic_compare_exchange_n(&st->reads_in_flight_max, &max, now, true,
					    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

static int op_submit(struct kvt_storage_tier *t, struct kvt_tier_batch *b)
{
	int err;

	if (!b->write)
		reads_in_flight((struct ssd_tier *)t, (int64_t)b->n);
	err = kvt_ssd_submit(ssd_of(t), b);
	if (err && !b->write)
		reads_in_flight((struct ssd_tier *)t, -(int64_t)b->n); /* none is in flight */
	return err;
}

static void op_wait(struct kvt_storage_tier *t, struct kvt_tier_batch *b)
{
	kvt_ssd_wait(ssd_of(t), b);
	if (!b->write)
		reads_in_flight((struct ssd_tier *)t, -(int64_t)b->n);
}

static void op_free(struct kvt_storage_tier *t, uint64_t loc)
{
	kvt_ssd_free(ssd_of(t), loc);
}

static int op_hold(struct kvt_storage_tier *t, uint64_t loc, int delta)
{
	return kvt_ssd_hold(ssd_of(t), loc, delta);
}

static size_t op_take_dropped(struct kvt_storage_tier *t, struct kvt_tier_rec *out, size_t max)
{
	struct kvt_ssd_rec_info d[64];
	size_t n = kvt_ssd_take_dropped(ssd_of(t), d, max < 64 ? max : 64);

	for (size_t k = 0; k < n; k++)
		out[k] = rec_of(&d[k]);
	return n;
}

static size_t op_take_recovered(struct kvt_storage_tier *t, struct kvt_tier_rec *out, size_t max)
{
	struct ssd_tier *st = (struct ssd_tier *)t;
	size_t n = st->n_found - st->next_found;

	if (n > max)
		n = max;
	for (size_t k = 0; k < n; k++)
		out[k] = st->found[st->next_found++];
	if (st->next_found == st->n_found) {
		free(st->found);
		st->found = NULL;
		st->n_found = st->cap_found = st->next_found = 0;
	}
	return n;
}

static uint64_t op_seq_reserve(struct kvt_storage_tier *t)
{
	return kvt_ssd_seq_reserve(ssd_of(t));
}

static bool op_degraded(struct kvt_storage_tier *t)
{
	return kvt_ssd_degraded(ssd_of(t));
}

static int op_probe(struct kvt_storage_tier *t)
{
	return kvt_ssd_probe(ssd_of(t));
}

static int op_register_region(struct kvt_storage_tier *t, void *base, uint64_t len)
{
	return kvt_ssd_register_region(ssd_of(t), base, len);
}

static void op_stats(struct kvt_storage_tier *t, struct kvt_store_stats *st)
{
	struct kvt_tier_stats *ts = &st->tier[t->kind];
	struct kvt_ssd_stats ss;

	kvt_ssd_stats(ssd_of(t), &ss);
	ts->capacity_bytes = ss.capacity_bytes;
	/* what the disk holds for the blocks, as capacity counts it: each
	 * record's header page and its payload's last page whole */
	ts->used_bytes = ss.used_bytes;
	ts->degraded = ss.degraded;
	ts->io_fallback = !ss.io.uring;
	ts->errors += ss.write_errors + ss.read_errors + ss.sync_errors;
	st->ssd = (struct kvt_ssd_health){
		.recovered = ss.recovered, .torn = ss.recovery_torn, .corrupt = ss.recovery_corrupt,
		.superseded = ss.recovery_superseded, .removed = ss.recovery_removed,
		.quarantined = ss.quarantined, .foreign = ss.foreign, .scanned = ss.recovery_scanned,
		.open_ms = ss.open_ns / 1000000, .tombstones = ss.tombstones, .probes = ss.probes,
		.resumed = ss.resumed };
	st->ssd_compressed_writes = ss.compressed_writes;
	st->ssd_write_raw_bytes = ss.write_raw_bytes;
	st->ssd_write_stored_bytes = ss.write_stored_bytes;
}

/* The SSD tier's named counters (tiers/tier.h): a new one is a row here. */
static size_t op_counters(struct kvt_storage_tier *t, struct kvt_counter *out, size_t max)
{
	struct kvt_ssd_stats ss;

	kvt_ssd_stats(ssd_of(t), &ss);
	const struct kvt_counter c[] = {
		{ "compressed_writes", "SSD records written encoded by the codec (the others raw).",
		  "records", KVT_COUNTER_COUNTER, ss.compressed_writes },
		{ "tombstones", "Removals logged in the SSD tier, on disk.", "records",
		  KVT_COUNTER_GAUGE, ss.tombstones },
		{ "probes", "Write probes of a degraded SSD tier.", "", KVT_COUNTER_COUNTER,
		  ss.probes },
		{ "resumed", "Times a degraded SSD tier came back.", "", KVT_COUNTER_COUNTER,
		  ss.resumed },
		{ "recovery_scanned_segments", "Segments the last open read whole (no valid summary).",
		  "segments", KVT_COUNTER_GAUGE, ss.recovery_scanned },
		{ "reads_in_flight_max", "The most block reads the SSD tier had in flight at once "
		  "since it opened (how deep LOADs drive the device).", "blocks", KVT_COUNTER_GAUGE,
		  __atomic_load_n(&((struct ssd_tier *)t)->reads_in_flight_max, __ATOMIC_RELAXED) },
	};

	return KVT_TIER_COUNTERS(out, max, c);
}

static void op_close(struct kvt_storage_tier *t)
{
	struct ssd_tier *st = (struct ssd_tier *)t;

	kvt_ssd_close(st->ssd);
	free(st->found);
	free(st);
}

static const struct kvt_storage_tier_ops ssd_tier_ops = {
	.name = "ssd",
	.submit = op_submit,
	.wait = op_wait,
	.free = op_free,
	.hold = op_hold,
	.take_dropped = op_take_dropped,
	.take_recovered = op_take_recovered,
	.seq_reserve = op_seq_reserve,
	.degraded = op_degraded,
	.probe = op_probe,
	.register_region = op_register_region,
	.stats = op_stats,
	.counters = op_counters,
	.close = op_close,
};

int kvt_ssd_tier_open(const struct kvt_ssd_opts *opts, struct kvt_storage_tier **out)
{
	struct ssd_tier *t;
	int err;

	if (!out)
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->base = (struct kvt_storage_tier){ .ops = &ssd_tier_ops, .kind = KVT_TIER_SSD,
					     .caps = KVT_TIER_CAP_DEMOTE | KVT_TIER_CAP_READ_IOV };
	err = kvt_ssd_open(opts, found_cb, t, &t->ssd);
	if (err) {
		free(t->found);
		free(t);
		return err;
	}
	*out = &t->base;
	return 0;
}
