/* SPDX-License-Identifier: Apache-2.0 */
/* The SSD tier over several directories (ssd_stripe.h): its devices and
 * their states, the ops that go to one device by loc or to all of them,
 * the worker threads that drive the parts of batches, open and close. The
 * batch path is ssd_stripe_batch.c. */
#include "tiers/ssd_stripe_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"

/* Probes of a degraded device: after 1 s, then doubling up to 64 s. */
#define PROBE_FIRST_NS 1000000000ull
#define PROBE_MAX_NS (64 * PROBE_FIRST_NS)

const char *kvt_device_state_name(enum kvt_device_state s)
{
	switch (s) {
	case KVT_DEVICE_OK: return "ok";
	case KVT_DEVICE_DEGRADED: return "degraded";
	case KVT_DEVICE_OUT: return "out";
	case KVT_DEVICE_MISSING: return "missing";
	}
	return "?";
}

static struct stripe *stripe_of(struct kvt_storage_tier *t)
{
	return (struct stripe *)t;
}

/* Whether device d serves (it may still be degraded). */
static bool serving(const struct stripe_dev *dev)
{
	return dev->t && dev->state != KVT_DEVICE_OUT && dev->state != KVT_DEVICE_MISSING;
}

static bool dev_degraded(const struct stripe_dev *dev)
{
	return dev->t->ops->degraded(dev->t);
}

bool kvt_stripe_writable(const struct stripe *st, unsigned d)
{
	return serving(&st->dev[d]) && !dev_degraded(&st->dev[d]);
}

/* ---- failures --------------------------------------------------------------- */

void kvt_stripe_take_out(struct stripe *st, unsigned d, int err, const char *why)
{
	struct stripe_dev *dev = &st->dev[d];
	size_t dropped;

	pthread_mutex_lock(&st->lock);
	if (!serving(dev)) {
		pthread_mutex_unlock(&st->lock);
		return;
	}
	dev->state = KVT_DEVICE_OUT;
	dev->error = err;
	pthread_mutex_unlock(&st->lock);
	/* reads of its locs stop here; those in flight end on their own */
	dropped = kvt_ssd_abandon(kvt_ssd_tier_ssd(dev->t), err, why);
	pthread_mutex_lock(&st->lock);
	dev->dropped += dropped;
	pthread_mutex_unlock(&st->lock);
	kvt_log(KVT_LOG_ERROR, "event=ssd.device_out device=%u dir=%s reason=\"%s\" err=\"%s\" "
		"blocks_lost=%zu action=\"its blocks are misses; the other devices serve; it is "
		"opened again at the next start\"", d, dev->path, why, strerror(-err), dropped);
}

void kvt_stripe_result(struct stripe *st, unsigned d, int res)
{
	/* the device's own failures; -EROFS is a degraded device saying no,
	 * -EFAULT the caller's memory, -ENOENT a stale loc */
	if (res != -EIO && res != -EBADMSG)
		return;
	if (__atomic_add_fetch(&st->dev[d].errors, 1, __ATOMIC_RELAXED) == KVT_SSD_DEVICE_ERRORS)
		kvt_stripe_take_out(st, d, -EIO, "I/O errors past the threshold");
}

/* Whether the directory the device opened is still what its path names:
 * 0, or -ENOENT (deleted, unmounted, replaced). */
static int dir_present(const struct stripe_dev *dev)
{
	struct stat a, b;

	if (fstat(dev->dir_fd, &a) || a.st_nlink == 0)
		return -ENOENT;
	if (stat(dev->path, &b) || b.st_dev != dev->st_dev || b.st_ino != dev->st_ino)
		return -ENOENT;
	return 0;
}

/* Probe device d if it is degraded and due. No lock held. */
static void probe_due(struct stripe *st, unsigned d)
{
	struct stripe_dev *dev = &st->dev[d];
	uint64_t now = kvt_now_ns();
	bool due;

	pthread_mutex_lock(&st->lock);
	if (!serving(dev) || !dev_degraded(dev)) {
		dev->probe_at = 0;
		pthread_mutex_unlock(&st->lock);
		return;
	}
	if (!dev->probe_at) {
		dev->probe_backoff = PROBE_FIRST_NS;
		dev->probe_at = now + dev->probe_backoff;
	}
	due = now >= dev->probe_at;
	if (due) {
		if (dev->probe_backoff < PROBE_MAX_NS)
			dev->probe_backoff *= 2;
		dev->probe_at = now + dev->probe_backoff;
	}
	pthread_mutex_unlock(&st->lock);
	if (due && !dev->t->ops->probe(dev->t)) {
		pthread_mutex_lock(&st->lock);
		dev->probe_at = 0;
		pthread_mutex_unlock(&st->lock);
		kvt_log(KVT_LOG_WARN, "event=ssd.device_resumed device=%u dir=%s", d, dev->path);
	}
}

void kvt_stripe_check(struct stripe *st)
{
	for (unsigned d = 0; d < st->n; d++) {
		struct stripe_dev *dev = &st->dev[d];
		bool live;

		pthread_mutex_lock(&st->lock);
		live = serving(dev);
		pthread_mutex_unlock(&st->lock);
		if (!live)
			continue;
		if (dir_present(dev))
			kvt_stripe_take_out(st, d, -ENOENT, "its directory is gone");
		else
			probe_due(st, d);
	}
}

/* ---- ops by loc, or over every device ------------------------------------- */

/* The device of loc, if it serves; NULL otherwise. */
static struct kvt_storage_tier *dev_of_loc(struct stripe *st, uint64_t loc)
{
	unsigned d = stripe_dev_of(loc);
	struct kvt_storage_tier *t = NULL;

	if (d >= st->n)
		return NULL;
	pthread_mutex_lock(&st->lock);
	if (serving(&st->dev[d]))
		t = st->dev[d].t;
	pthread_mutex_unlock(&st->lock);
	return t;
}

static void op_free(struct kvt_storage_tier *t, uint64_t loc)
{
	struct kvt_storage_tier *dt = dev_of_loc(stripe_of(t), loc);

	if (dt)
		dt->ops->free(dt, loc & STRIPE_LOC_MASK);
}

static int op_hold(struct kvt_storage_tier *t, uint64_t loc, int delta)
{
	struct kvt_storage_tier *dt = dev_of_loc(stripe_of(t), loc);

	return dt ? dt->ops->hold(dt, loc & STRIPE_LOC_MASK, delta) : -ENOENT;
}

/* Each device's records, their locs tagged with it. An out device's are
 * handed over too: they are what taking it out dropped. */
static size_t op_take_dropped(struct kvt_storage_tier *t, struct kvt_tier_rec *out, size_t max)
{
	struct stripe *st = stripe_of(t);
	size_t n = 0;

	for (unsigned d = 0; d < st->n && n < max; d++) {
		struct kvt_storage_tier *dt = st->dev[d].t;
		size_t k = dt ? dt->ops->take_dropped(dt, out + n, max - n) : 0;

		for (size_t j = n; j < n + k; j++)
			out[j].loc = stripe_loc(d, out[j].loc);
		n += k;
	}
	return n;
}

static size_t op_take_recovered(struct kvt_storage_tier *t, struct kvt_tier_rec *out, size_t max)
{
	struct stripe *st = stripe_of(t);

	for (; st->next_rec_dev < st->n; st->next_rec_dev++) {
		unsigned d = st->next_rec_dev;
		struct kvt_storage_tier *dt = st->dev[d].t;
		size_t k = dt ? dt->ops->take_recovered(dt, out, max) : 0;

		if (!k)
			continue;
		for (size_t j = 0; j < k; j++)
			out[j].loc = stripe_loc(d, out[j].loc);
		return k;
	}
	return 0;
}

static uint64_t op_seq_reserve(struct kvt_storage_tier *t)
{
	return __atomic_fetch_add(&stripe_of(t)->seq, 1, __ATOMIC_RELAXED);
}

/* Degraded as a whole: no device takes writes. */
static bool op_degraded(struct kvt_storage_tier *t)
{
	struct stripe *st = stripe_of(t);
	bool any = false;

	pthread_mutex_lock(&st->lock);
	for (unsigned d = 0; d < st->n && !any; d++)
		any = kvt_stripe_writable(st, d);
	pthread_mutex_unlock(&st->lock);
	return !any;
}

/* Probe every degraded device: 0 when one takes writes again. */
static int op_probe(struct kvt_storage_tier *t)
{
	struct stripe *st = stripe_of(t);
	int rc = -EROFS;

	for (unsigned d = 0; d < st->n; d++) {
		struct stripe_dev *dev = &st->dev[d];
		bool live;

		pthread_mutex_lock(&st->lock);
		live = serving(dev);
		pthread_mutex_unlock(&st->lock);
		if (live && (!dev_degraded(dev) || !dev->t->ops->probe(dev->t)))
			rc = 0;
	}
	return rc;
}

static int op_register_region(struct kvt_storage_tier *t, void *base, uint64_t len)
{
	struct stripe *st = stripe_of(t);
	int rc = 0;

	for (unsigned d = 0; d < st->n; d++)
		if (st->dev[d].t) {
			int r = st->dev[d].t->ops->register_region(st->dev[d].t, base, len);

			rc = rc ? rc : r;
		}
	return rc;
}

/* The figures of every serving device, summed (the health counters of
 * every device that opened). */
static void op_stats(struct kvt_storage_tier *t, struct kvt_store_stats *out)
{
	struct stripe *st = stripe_of(t);
	struct kvt_tier_stats *ts = &out->tier[t->kind];
	struct kvt_ssd_health *h = &out->ssd;

	*h = (struct kvt_ssd_health){ 0 };
	ts->capacity_bytes = ts->used_bytes = 0;
	ts->io_fallback = false;
	out->ssd_compressed_writes = out->ssd_write_raw_bytes = out->ssd_write_stored_bytes = 0;
	for (unsigned d = 0; d < st->n; d++) {
		struct kvt_store_stats one = { .size = sizeof(one) };
		struct kvt_tier_stats *os = &one.tier[t->kind];
		struct kvt_ssd_health *oh = &one.ssd;

		if (!st->dev[d].t)
			continue;
		st->dev[d].t->ops->stats(st->dev[d].t, &one);
		pthread_mutex_lock(&st->lock);
		if (serving(&st->dev[d])) {
			ts->capacity_bytes += os->capacity_bytes;
			ts->used_bytes += os->used_bytes;
		}
		pthread_mutex_unlock(&st->lock);
		ts->io_fallback |= os->io_fallback;
		ts->errors += os->errors;
		h->recovered += oh->recovered;
		h->torn += oh->torn;
		h->corrupt += oh->corrupt;
		h->superseded += oh->superseded;
		h->removed += oh->removed;
		h->quarantined += oh->quarantined;
		h->foreign += oh->foreign;
		h->scanned += oh->scanned;
		h->open_ms = oh->open_ms > h->open_ms ? oh->open_ms : h->open_ms;
		h->tombstones += oh->tombstones;
		h->probes += oh->probes;
		h->resumed += oh->resumed;
		out->ssd_compressed_writes += one.ssd_compressed_writes;
		out->ssd_write_raw_bytes += one.ssd_write_raw_bytes;
		out->ssd_write_stored_bytes += one.ssd_write_stored_bytes;
	}
	ts->degraded = op_degraded(t);
}

/* The devices' counters summed, row by row (every device has the same
 * table), then the stripe's own. */
static size_t op_counters(struct kvt_storage_tier *t, struct kvt_counter *out, size_t max)
{
	struct stripe *st = stripe_of(t);
	struct kvt_counter one[KVT_TIER_COUNTERS_MAX];
	uint64_t state[4] = { 0 }, dropped = 0;
	size_t n = 0;

	for (unsigned d = 0; d < st->n; d++) {
		size_t k;

		if (!st->dev[d].t)
			continue;
		k = st->dev[d].t->ops->counters(st->dev[d].t, one, KVT_TIER_COUNTERS_MAX);
		if (!n) {
			n = k < max ? k : max;
			memcpy(out, one, n * sizeof(*out));
		} else {
			for (size_t j = 0; j < n && j < k; j++)
				out[j].value += one[j].value;
		}
	}
	pthread_mutex_lock(&st->lock);
	for (unsigned d = 0; d < st->n; d++) {
		const struct stripe_dev *dev = &st->dev[d];

		state[serving(dev) && dev_degraded(dev) ? KVT_DEVICE_DEGRADED : dev->state]++;
		dropped += dev->dropped;
	}
	pthread_mutex_unlock(&st->lock);
	const struct kvt_counter c[] = {
		{ "devices", "Directories (drives) the SSD tier spans.", "", KVT_COUNTER_GAUGE,
		  st->n },
		{ "devices_degraded", "Devices of the SSD tier taking no writes (still read).", "",
		  KVT_COUNTER_GAUGE, state[KVT_DEVICE_DEGRADED] },
		{ "devices_out", "Devices of the SSD tier taken out or missing at start: their "
		  "blocks are misses.", "", KVT_COUNTER_GAUGE,
		  state[KVT_DEVICE_OUT] + state[KVT_DEVICE_MISSING] },
		{ "devices_blocks_lost", "Blocks dropped when a device was taken out.", "blocks",
		  KVT_COUNTER_COUNTER, dropped },
	};

	return n + KVT_TIER_COUNTERS(out + n, max - n, c);
}

static size_t op_devices(struct kvt_storage_tier *t, struct kvt_tier_device *out, size_t max)
{
	struct stripe *st = stripe_of(t);
	size_t n = 0;

	for (unsigned d = 0; d < st->n && n < max; d++, n++) {
		struct stripe_dev *dev = &st->dev[d];
		struct kvt_tier_device *o = &out[n];
		struct kvt_ssd_stats ss = { 0 };

		*o = (struct kvt_tier_device){ .capacity_bytes = dev->bytes };
		snprintf(o->path, sizeof(o->path), "%s", dev->path);
		if (dev->t) {
			kvt_ssd_stats(kvt_ssd_tier_ssd(dev->t), &ss);
			o->capacity_bytes = ss.capacity_bytes;
			o->used_bytes = ss.used_bytes;
			o->blocks = ss.blocks;
			o->writes = ss.writes;
			o->write_bytes = ss.write_raw_bytes;
			o->reads = ss.reads;
			o->read_bytes = ss.read_bytes;
			o->errors = ss.write_errors + ss.read_errors + ss.sync_errors;
			o->recovered = ss.recovered;
		}
		pthread_mutex_lock(&st->lock);
		o->state = serving(dev) && ss.degraded ? KVT_DEVICE_DEGRADED : dev->state;
		o->error = o->state == KVT_DEVICE_DEGRADED ? ss.degraded_error : dev->error;
		o->dropped = dev->dropped;
		pthread_mutex_unlock(&st->lock);
	}
	return n;
}

/* ---- worker threads ---------------------------------------------------------- */

void kvt_stripe_sub_run(struct stripe_sub *sub)
{
	struct stripe_batch *sb = sub->sb;
	struct kvt_storage_tier *dt = sb->st->dev[sub->d].t;

	dt->ops->wait(dt, &sub->b);
	pthread_mutex_lock(&sb->lock);
	sb->subs_left--;
	pthread_cond_broadcast(&sb->cv);
	/* sb may be gone once this is let go */
	pthread_mutex_unlock(&sb->lock);
}

void kvt_stripe_queue(struct stripe *st, struct stripe_sub *sub)
{
	pthread_mutex_lock(&st->pool_lock);
	sub->claimed = !st->n_workers; /* no workers: the thread in wait drives it */
	sub->next = NULL;
	if (!sub->claimed) {
		if (st->queue_tail)
			st->queue_tail->next = sub;
		else
			st->queue = sub;
		st->queue_tail = sub;
		pthread_cond_signal(&st->pool_cv);
	}
	pthread_mutex_unlock(&st->pool_lock);
}

bool kvt_stripe_claim(struct stripe *st, struct stripe_sub *sub)
{
	bool mine = false;

	pthread_mutex_lock(&st->pool_lock);
	if (!st->n_workers) {
		mine = true;
	} else if (!sub->claimed) {
		struct stripe_sub **p = &st->queue, *prev = NULL;

		while (*p && *p != sub) {
			prev = *p;
			p = &(*p)->next;
		}
		if (*p) {
			*p = sub->next;
			if (st->queue_tail == sub)
				st->queue_tail = prev;
		}
		sub->claimed = mine = true;
	}
	pthread_mutex_unlock(&st->pool_lock);
	return mine;
}

static void *worker_main(void *arg)
{
	struct stripe *st = arg;

	pthread_mutex_lock(&st->pool_lock);
	for (;;) {
		struct stripe_sub *sub;

		while (!st->queue && !st->stop)
			pthread_cond_wait(&st->pool_cv, &st->pool_lock);
		if (!st->queue)
			break;
		sub = st->queue;
		st->queue = sub->next;
		if (!st->queue)
			st->queue_tail = NULL;
		sub->claimed = true;
		pthread_mutex_unlock(&st->pool_lock);
		kvt_stripe_sub_run(sub);
		pthread_mutex_lock(&st->pool_lock);
	}
	pthread_mutex_unlock(&st->pool_lock);
	return NULL;
}

/* ---- open and close ---------------------------------------------------------- */

struct kvt_ssd *kvt_ssd_stripe_device(struct kvt_storage_tier *t, unsigned d)
{
	struct stripe *st = stripe_of(t);

	return d < st->n && st->dev[d].t ? kvt_ssd_tier_ssd(st->dev[d].t) : NULL;
}

static void op_close(struct kvt_storage_tier *t)
{
	struct stripe *st = stripe_of(t);

	pthread_mutex_lock(&st->pool_lock);
	st->stop = true;
	pthread_cond_broadcast(&st->pool_cv);
	pthread_mutex_unlock(&st->pool_lock);
	for (unsigned k = 0; k < st->n_workers; k++)
		pthread_join(st->workers[k], NULL);
	free(st->workers);
	for (unsigned d = 0; d < st->n; d++) {
		if (st->dev[d].t)
			st->dev[d].t->ops->close(st->dev[d].t);
		if (st->dev[d].dir_fd >= 0)
			close(st->dev[d].dir_fd);
		free(st->dev[d].path);
	}
	pthread_cond_destroy(&st->pool_cv);
	pthread_mutex_destroy(&st->pool_lock);
	pthread_mutex_destroy(&st->lock);
	free(st);
}

static const struct kvt_storage_tier_ops stripe_ops = {
	.name = "ssd",
	.submit = kvt_stripe_submit,
	.wait = kvt_stripe_wait,
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
	.devices = op_devices,
	.close = op_close,
};

/* Open device d over dir: 0, or the -errno that leaves it missing. A
 * directory is never made here. */
static int dev_open(struct stripe *st, unsigned d, const struct kvt_ssd_opts *base,
		    const struct kvt_ssd_dir *dir, uint64_t (*segment_bytes_of)(uint64_t))
{
	struct stripe_dev *dev = &st->dev[d];
	struct kvt_ssd_opts so = *base;
	struct stat sb;

	dev->dir_fd = open(dir->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dev->dir_fd < 0 || fstat(dev->dir_fd, &sb))
		return -errno;
	if (!dir->bytes)
		return -ENOSPC; /* no room there */
	dev->st_dev = sb.st_dev;
	dev->st_ino = sb.st_ino;
	so.dir = dir->path;
	so.capacity_bytes = dir->bytes;
	if (segment_bytes_of)
		so.segment_bytes = segment_bytes_of(dir->bytes);
	so.seq_shared = &st->seq;
	return kvt_ssd_tier_open(&so, &dev->t);
}

static int start_workers(struct stripe *st, unsigned live)
{
	unsigned want = live > 1 ? 2 * live : 0;

	if (!want)
		return 0;
	st->workers = calloc(want, sizeof(*st->workers));
	if (!st->workers)
		return -ENOMEM;
	for (; st->n_workers < want; st->n_workers++)
		if (pthread_create(&st->workers[st->n_workers], NULL, worker_main, st))
			return st->n_workers ? 0 : -EAGAIN; /* fewer workers: less parallel */
	return 0;
}

int kvt_ssd_stripe_open(const struct kvt_ssd_opts *base, const struct kvt_ssd_dir *dirs,
			size_t n, uint64_t (*segment_bytes_of)(uint64_t bytes),
			struct kvt_storage_tier **out)
{
	struct stripe *st;
	unsigned live = 0;
	int first_err = 0, err;

	if (!base || !dirs || !out || n < 1 || n > KVT_SSD_MAX_DIRS)
		return -EINVAL;
	for (size_t d = 0; d < n; d++)
		if (!dirs[d].path || !*dirs[d].path)
			return -EINVAL;
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	st->base = (struct kvt_storage_tier){ .ops = &stripe_ops, .kind = KVT_TIER_SSD,
					      .caps = KVT_TIER_CAP_DEMOTE | KVT_TIER_CAP_READ_IOV };
	st->seq = 1;
	pthread_mutex_init(&st->lock, NULL);
	pthread_mutex_init(&st->pool_lock, NULL);
	pthread_cond_init(&st->pool_cv, NULL);
	st->n = (unsigned)n;
	for (unsigned d = 0; d < st->n; d++) {
		struct stripe_dev *dev = &st->dev[d];

		dev->dir_fd = -1;
		dev->bytes = dirs[d].bytes;
		dev->path = strdup(dirs[d].path);
		err = dev->path ? dev_open(st, d, base, &dirs[d], segment_bytes_of) : -ENOMEM;
		if (!err) {
			live++;
			continue;
		}
		/* another process has the directory (most likely another
		 * kvtierd): a configuration to fix, not a drive that failed */
		if (err == -EBUSY)
			kvt_log(KVT_LOG_ERROR, "event=ssd.device_busy device=%u dir=%s "
				"reason=\"locked by another process: one daemon per directory\"", d,
				dirs[d].path);
		if (err == -ENOMEM || err == -EBUSY)
			goto fail;
		dev->t = NULL;
		dev->state = KVT_DEVICE_MISSING;
		dev->error = err;
		first_err = first_err ? first_err : err;
		kvt_log(KVT_LOG_ERROR, "event=ssd.device_missing device=%u dir=%s err=\"%s\" "
			"action=\"started without it: the other devices serve\"", d, dirs[d].path,
			strerror(-err));
	}
	if (!live) {
		err = first_err;
		goto fail;
	}
	err = start_workers(st, live);
	if (err)
		goto fail;
	kvt_log(KVT_LOG_INFO, "event=ssd.stripe devices=%u serving=%u", st->n, live);
	*out = &st->base;
	return 0;
fail:
	op_close(&st->base);
	return err;
}
