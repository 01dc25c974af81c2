/* SPDX-License-Identifier: Apache-2.0 */
/* A helper thread of the SSD tier that shares a set of independent jobs with
 * its caller. A read batch verifies (XXH3) and decodes each record as its
 * I/O completes; when a device completes many large records at once, as it
 * does when it serves a deep queue in parallel, one thread checksumming them
 * in turn leaves the device idle at the end of the batch (16 records of
 * 32 MiB: about 60 ms of XXH3 after the last read). Two threads halve that. */
#ifndef KVT_TIERS_SSD_HELPER_H
#define KVT_TIERS_SSD_HELPER_H

#include <stddef.h>
#include <stdint.h>

struct kvt_ssd_helper;

/* fn(arg, k, who) for one job k; who is 0 on the caller's thread, 1 on the
 * helper's. Jobs must not depend on each other. */
typedef void (*kvt_ssd_helper_fn)(void *arg, size_t k, unsigned who);

/* Start the helper's thread. 0, or a negative errno. */
int kvt_ssd_helper_start(struct kvt_ssd_helper **out);

/* Stop and join it; NULL is a no-op. No run may be in progress. */
void kvt_ssd_helper_stop(struct kvt_ssd_helper *h);

/* Run jobs [0, n), the caller and the helper each taking the next one until
 * none is left; returns when all are done. A helper busy with another
 * caller's run (or NULL) leaves them all to this caller. Returns how many
 * the helper ran. */
size_t kvt_ssd_helper_run(struct kvt_ssd_helper *h, size_t n, kvt_ssd_helper_fn fn, void *arg);

#endif /* KVT_TIERS_SSD_HELPER_H */
