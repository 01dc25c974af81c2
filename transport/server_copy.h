/* SPDX-License-Identifier: Apache-2.0 */
/* What the sidecar server's copy workers share: a worker, its two copy back
 * ends (server_copy.c), the LOAD (server_load.c); server_jobs.c runs the
 * workers and the SAVE. */
#ifndef KVT_TRANSPORT_SERVER_COPY_H
#define KVT_TRANSPORT_SERVER_COPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/server_int.h"
#include "transport/worker_dev.h"

/* Blocks a worker holds at once (reserved or acquired) before copying them:
 * a request of more blocks goes through in windows, so that no request needs
 * more DRAM slots than the tier has. A window also ends early when the store
 * has no slot to give (-ENOSPC): what it holds is copied and let go first. */
#define WINDOW 64

/* A copy worker. Its device streams and event are created on first use,
 * one set per device layer backend it copies through, and kept
 * (transport/worker_dev.h). */
struct worker {
	struct kvt_server *srv;
	struct worker_dev devs[2];        /* the cuda and the host backend */
};

/* The two copy back ends: engine memory mapped by the daemon and copied
 * with memcpy (direct), or reached through the device layer. */
struct copy_ops {
	/* Copy engine pages[k] into blocks[k], k < n. Returns 0 or -errno. */
	int (*gather)(struct worker *w, struct kvt_job *job, const uint32_t *pages,
		      void *const *blocks, size_t n);
	/* Copy blocks[k] into engine pages[k]. With progress, job->layers_done
	 * advances (and a note is posted) as each layer of all n is in place. */
	int (*scatter)(struct worker *w, struct kvt_job *job, const uint32_t *pages,
		       void *const *blocks, size_t n, bool progress);
};

/* Memory the daemon maps, copied with memcpy. */
extern const struct copy_ops kvt_direct_copy;

/* The back end job's engine memory is copied with. */
const struct copy_ops *kvt_copy_of(const struct kvt_job *job);

/* The engine's own memory failed a job's copy (err: -EFAULT, a hole punched
 * where nothing can back it; or the bytes read straight into it did not
 * verify there): logged against the engine's connection, never blamed on a
 * tier. */
void kvt_job_engine_fault(struct kvt_server *srv, const struct kvt_job *job, int err,
			  const char *action);

/* Destroy the device streams and events w created. */
void kvt_worker_fini(struct worker *w);

/* The engine went, or the server is stopping: nothing more is copied. */
static inline bool kvt_job_cancelled(const struct kvt_job *job)
{
	return __atomic_load_n(&job->conn->dead, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&job->conn->srv->stop, __ATOMIC_ACQUIRE) > 1;
}

/* Run a LOAD (server_load.c). Result: the number of leading blocks loaded
 * (a miss ends the prefix), or a negative errno when not even the first
 * could be (-ENOSPC: the DRAM tier had no slot to bring it up into). */
int32_t kvt_run_load(struct worker *w, struct kvt_job *job);

#endif /* KVT_TRANSPORT_SERVER_COPY_H */
