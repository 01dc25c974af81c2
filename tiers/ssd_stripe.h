/* SPDX-License-Identifier: Apache-2.0 */
/* The SSD tier over several directories, one per drive: a storage tier
 * (tiers/tier.h, kind KVT_TIER_SSD) made of one SSD tier (ssd.h) per
 * directory, each with its own segments, recovery, I/O rings and capacity,
 * and a thin layer that spreads blocks over them.
 *
 * Placement: each block of a write batch goes to the next device of a
 * smooth weighted round robin, weighted by each device's room (capacity
 * less live bytes, plus a sixteenth of its capacity so that a full device
 * still takes its share while its segments are reclaimed). Consecutive
 * blocks of a batch land on different devices, so the blocks of a prefix,
 * and so a LOAD's, spread over all of them. A record's loc carries its
 * device in its top bits (above KVT_SSD_LOC_BITS): reads, frees and holds go
 * to that device. A removal's tombstone is written to every device, in one
 * sequence shared by all, so a copy of the key on any of them stays hidden.
 *
 * A batch is split by device, every part submitted at once; the thread in
 * wait drives one part and worker threads of the stripe the others, so the
 * devices work in parallel; every done_cb still runs on the thread in wait.
 *
 * Failures cost only the failing device's blocks. A device whose writes
 * fail (a write error, a read-only remount) is degraded: it takes no new
 * blocks, still serves its own, and is probed for writes at growing
 * intervals. A device with KVT_SSD_DEVICE_ERRORS I/O errors, or whose
 * directory is gone (deleted, unmounted), is taken out: its blocks are
 * dropped (misses; the store forgets them) and nothing is read or written
 * there again until the next start, which opens it anew. A directory that
 * is missing or cannot be opened at start is left out and named; the others
 * serve. The whole tier counts as degraded only when no device takes
 * writes. Each step is logged and shown by kvt_tier_device rows (devices). */
#ifndef KVT_TIERS_SSD_STRIPE_H
#define KVT_TIERS_SSD_STRIPE_H

#include <stddef.h>

#include "kvtier/store.h"
#include "tiers/ssd.h"
#include "tiers/tier.h"

/* I/O errors (reads and writes that failed on the device) that take a
 * device out. */
#define KVT_SSD_DEVICE_ERRORS 8

/* Open the tier over dirs[0..n) (1 <= n <= KVT_SSD_MAX_DIRS), each device an
 * SSD tier of base's options with the directory's path and capacity (and
 * segment_bytes from segment_bytes_of(bytes) when that is not NULL). A
 * directory that does not exist is never made (a drive not mounted must not
 * fill the disk below it). Returns 0 and *out (closed by its ops->close; a
 * directory that failed is a MISSING device of it, logged), -EINVAL, -ENOMEM,
 * -EBUSY (a directory another process has open: nothing is kept open), or
 * the error of the first directory when none opens. */
int kvt_ssd_stripe_open(const struct kvt_ssd_opts *base, const struct kvt_ssd_dir *dirs,
			size_t n, uint64_t (*segment_bytes_of)(uint64_t bytes),
			struct kvt_storage_tier **out);

/* The SSD tier of device d of t (a tier kvt_ssd_stripe_open made), or NULL
 * (missing, or d out of range): for tests and diagnostics. */
struct kvt_ssd *kvt_ssd_stripe_device(struct kvt_storage_tier *t, unsigned d);

#endif /* KVT_TIERS_SSD_STRIPE_H */
