/* SPDX-License-Identifier: Apache-2.0 */
/* The batch path of the SSD tier over several directories (ssd_stripe.h):
 * each record placed (a write: the next device of the weighted round robin;
 * a tombstone: every serving device; a read: its loc's device), the batch
 * split into a part per device, every part submitted at once; in wait the
 * caller's thread drives one part, worker threads the others, and results
 * reach the caller's done_cb on the caller's thread, as they complete. */
#include "tiers/ssd_stripe_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define NO_DEV 0xffu
#define ALL_DEVS 0xfeu

/* ---- placement ---------------------------------------------------------------- */

/* Each writable device's weight: its room in MiB (capacity less live bytes,
 * plus a sixteenth of its capacity: a full device reclaims segments and
 * still takes its share); 0 for one that takes no writes. No lock held. */
static void weights(struct stripe *st, int64_t *w)
{
	for (unsigned d = 0; d < st->n; d++) {
		struct kvt_ssd_stats ss;
		bool writable;

		pthread_mutex_lock(&st->lock);
		writable = kvt_stripe_writable(st, d);
		pthread_mutex_unlock(&st->lock);
		w[d] = 0;
		if (!writable)
			continue;
		kvt_ssd_stats(kvt_ssd_tier_ssd(st->dev[d].t), &ss);
		w[d] = (int64_t)(((ss.capacity_bytes > ss.used_bytes ?
				   ss.capacity_bytes - ss.used_bytes : 0) +
				  ss.capacity_bytes / 16) >> 20) + 1;
	}
}

/* The next device of the smooth weighted round robin (each device gains
 * its weight, the one ahead is picked and pays the total): equal weights
 * take turns, and no device gets two blocks in a row while another of the
 * same weight waits. NO_DEV when none is writable. The stripe's lock held. */
static unsigned wrr_next(struct stripe *st, const int64_t *w)
{
	int64_t total = 0;
	unsigned best = NO_DEV;

	for (unsigned d = 0; d < st->n; d++) {
		if (w[d] <= 0)
			continue;
		st->dev[d].wrr += w[d];
		total += w[d];
		if (best == NO_DEV || st->dev[d].wrr > st->dev[best].wrr)
			best = d;
	}
	if (best != NO_DEV)
		st->dev[best].wrr -= total;
	return best;
}

/* Where each record of b goes: to[i] a device, ALL_DEVS (a tombstone: the
 * devices of *all, every serving one) or NO_DEV; the copies per device
 * into cnt. */
static void place(struct stripe *st, const struct kvt_tier_batch *b, uint8_t *to, size_t *cnt,
		  unsigned *all)
{
	int64_t w[KVT_SSD_MAX_DIRS];

	if (b->write)
		weights(st, w);
	pthread_mutex_lock(&st->lock);
	*all = 0;
	for (unsigned d = 0; d < st->n; d++)
		if (st->dev[d].t && st->dev[d].state != KVT_DEVICE_OUT)
			*all |= 1u << d;
	for (size_t i = 0; i < b->n; i++) {
		const struct kvt_tier_io *io = &b->io[i];
		unsigned d;

		if (b->write && io->tomb) {
			to[i] = *all ? ALL_DEVS : NO_DEV;
			for (d = 0; d < st->n; d++)
				cnt[d] += *all >> d & 1;
			continue;
		}
		d = b->write ? wrr_next(st, w) : stripe_dev_of(io->loc);
		if (d >= st->n || !st->dev[d].t || st->dev[d].state == KVT_DEVICE_OUT) {
			to[i] = NO_DEV;
			continue;
		}
		to[i] = (uint8_t)d;
		cnt[d]++;
	}
	pthread_mutex_unlock(&st->lock);
}

/* ---- results ------------------------------------------------------------------ */

/* Hand the records done over to the caller's done_cb, in the order they
 * completed. The thread in wait only. */
static void deliver(struct stripe_batch *sb)
{
	for (;;) {
		size_t i;

		pthread_mutex_lock(&sb->lock);
		if (sb->n_done == sb->n_ready) {
			pthread_mutex_unlock(&sb->lock);
			return;
		}
		i = sb->ready[sb->n_done++];
		pthread_mutex_unlock(&sb->lock);
		if (sb->b->done_cb)
			sb->b->done_cb(sb->b, i);
	}
}

/* Record i of the caller's batch is done. sb->lock held. */
static void ready_locked(struct stripe_batch *sb, size_t i)
{
	sb->ready[sb->n_ready++] = i;
	pthread_cond_broadcast(&sb->cv);
}

/* A copy completed, on the thread that drives its part: its result into
 * the caller's record (a tombstone's: the first failure of its copies),
 * which is done once its last copy is. */
static void sub_done(struct kvt_tier_batch *pb, size_t j)
{
	struct stripe_sub *sub = pb->arg;
	struct stripe_batch *sb = sub->sb;
	const struct kvt_tier_io *c = &pb->io[j];
	size_t i = sb->outer[(size_t)(c - sb->io)];
	struct kvt_tier_io *io = &sb->b->io[i];
	bool mine;

	kvt_stripe_result(sb->st, sub->d, c->res);
	pthread_mutex_lock(&sb->lock);
	if (!(sb->b->write && io->tomb)) {
		io->res = c->res;
		io->lat_ns = c->lat_ns;
		if (sb->b->write && !c->res)
			io->loc = stripe_loc(sub->d, c->loc);
	} else if (c->res && !io->res) {
		io->res = c->res;
	}
	if (--sb->left[i] == 0)
		ready_locked(sb, i);
	mine = sb->waiting && pthread_equal(sb->waiter, pthread_self());
	pthread_mutex_unlock(&sb->lock);
	if (mine)
		deliver(sb);
}

static void sb_free(struct stripe_batch *sb)
{
	if (!sb)
		return;
	pthread_cond_destroy(&sb->cv);
	pthread_mutex_destroy(&sb->lock);
	free(sb->io);
	free(sb->outer);
	free(sb->left);
	free(sb->ready);
	free(sb);
}

static struct stripe_batch *sb_new(struct stripe *st, struct kvt_tier_batch *b, size_t copies)
{
	struct stripe_batch *sb = calloc(1, sizeof(*sb));

	if (!sb)
		return NULL;
	pthread_mutex_init(&sb->lock, NULL);
	pthread_cond_init(&sb->cv, NULL);
	sb->st = st;
	sb->b = b;
	sb->io = calloc(copies ? copies : 1, sizeof(*sb->io));
	sb->outer = calloc(copies ? copies : 1, sizeof(*sb->outer));
	sb->left = calloc(b->n ? b->n : 1, sizeof(*sb->left));
	sb->ready = calloc(b->n ? b->n : 1, sizeof(*sb->ready));
	if (!sb->io || !sb->outer || !sb->left || !sb->ready) {
		sb_free(sb);
		return NULL;
	}
	return sb;
}

/* ---- submit and wait ------------------------------------------------------------ */

/* Copy each record of b to its devices' parts (sb->io grouped by device,
 * off[d] where device d's begins). */
static void fill(struct stripe_batch *sb, const uint8_t *to, const size_t *cnt, unsigned all)
{
	struct stripe *st = sb->st;
	struct kvt_tier_batch *b = sb->b;
	size_t off[KVT_SSD_MAX_DIRS], pos[KVT_SSD_MAX_DIRS], at = 0;

	for (unsigned d = 0; d < st->n; d++) {
		off[d] = pos[d] = at;
		at += cnt[d];
	}
	for (size_t i = 0; i < b->n; i++) {
		struct kvt_tier_io *io = &b->io[i];

		if (to[i] == NO_DEV) {
			io->res = b->write ? -EROFS : -ENOENT;
			ready_locked(sb, i);
			continue;
		}
		if (io->tomb && b->write)
			io->res = 0;
		for (unsigned d = 0; d < st->n; d++) {
			if (to[i] != d && !(to[i] == ALL_DEVS && (all >> d & 1)))
				continue;
			sb->io[pos[d]] = *io;
			sb->io[pos[d]].loc &= STRIPE_LOC_MASK;
			sb->outer[pos[d]++] = i;
			sb->left[i]++;
		}
	}
	for (unsigned d = 0; d < st->n; d++) {
		struct stripe_sub *sub;

		if (pos[d] == off[d])
			continue;
		sub = &sb->sub[sb->n_sub++];
		*sub = (struct stripe_sub){ .sb = sb, .d = d };
		sub->b = (struct kvt_tier_batch){ .write = b->write, .io = sb->io + off[d],
						  .n = pos[d] - off[d], .done_cb = sub_done,
						  .arg = sub };
	}
}

int kvt_stripe_submit(struct kvt_storage_tier *t, struct kvt_tier_batch *b)
{
	struct stripe *st = (struct stripe *)t;
	size_t cnt[KVT_SSD_MAX_DIRS] = { 0 }, copies = 0;
	struct stripe_batch *sb;
	unsigned all;
	uint8_t *to;

	if (b->write)
		kvt_stripe_check(st);
	/* one device: its own path, nothing copied (a loc of device 0 is the
	 * device's own) */
	if (st->n == 1)
		return st->dev[0].t->ops->submit(st->dev[0].t, b);
	to = malloc(b->n ? b->n : 1);
	if (!to)
		goto nomem;
	place(st, b, to, cnt, &all);
	for (unsigned d = 0; d < st->n; d++)
		copies += cnt[d];
	sb = sb_new(st, b, copies);
	if (!sb) {
		free(to);
		goto nomem;
	}
	b->priv = sb;
	fill(sb, to, cnt, all);
	free(to);
	sb->subs_left = sb->n_sub;
	for (unsigned k = 0; k < sb->n_sub; k++) {
		struct stripe_sub *sub = &sb->sub[k];
		struct kvt_storage_tier *dt = st->dev[sub->d].t;

		sub->submitted = !dt->ops->submit(dt, &sub->b);
		if (sub->submitted)
			continue;
		/* refused: every copy's res is set, nothing is in flight */
		for (size_t j = 0; j < sub->b.n; j++)
			sub_done(&sub->b, j);
		sb->subs_left--;
	}
	/* the first part in flight is the waiting thread's; workers take the rest */
	for (unsigned k = 0, first = 1; k < sb->n_sub; k++) {
		if (!sb->sub[k].submitted)
			continue;
		if (first)
			sb->own = k;
		else
			kvt_stripe_queue(st, &sb->sub[k]);
		first = 0;
	}
	return 0;
nomem:
	for (size_t i = 0; i < b->n; i++)
		b->io[i].res = -ENOMEM;
	return -ENOMEM;
}

void kvt_stripe_wait(struct kvt_storage_tier *t, struct kvt_tier_batch *b)
{
	struct stripe *st = (struct stripe *)t;
	struct stripe_batch *sb = b->priv;

	if (st->n == 1) {
		st->dev[0].t->ops->wait(st->dev[0].t, b);
		for (size_t i = 0; i < b->n; i++)
			kvt_stripe_result(st, 0, b->io[i].res);
		return;
	}
	pthread_mutex_lock(&sb->lock);
	sb->waiter = pthread_self();
	sb->waiting = true;
	pthread_mutex_unlock(&sb->lock);
	deliver(sb);
	/* its own part, and any a worker has not taken yet */
	for (unsigned k = 0; k < sb->n_sub; k++) {
		struct stripe_sub *sub = &sb->sub[k];

		if (sub->submitted && (k == sb->own || kvt_stripe_claim(st, sub)))
			kvt_stripe_sub_run(sub);
	}
	pthread_mutex_lock(&sb->lock);
	while (sb->subs_left || sb->n_done < sb->n_ready) {
		if (sb->n_done < sb->n_ready) {
			pthread_mutex_unlock(&sb->lock);
			deliver(sb);
			pthread_mutex_lock(&sb->lock);
			continue;
		}
		pthread_cond_wait(&sb->cv, &sb->lock);
	}
	pthread_mutex_unlock(&sb->lock);
	b->priv = NULL;
	sb_free(sb);
}
