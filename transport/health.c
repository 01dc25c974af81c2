/* SPDX-License-Identifier: Apache-2.0 */
/* What /healthz and /readyz answer: live is "the loop answers"; ready is
 * "send work here": every tier open and none degraded, no drain under way,
 * and the cluster joined when the daemon is in one (its hook says). An
 * orchestrator takes a node out of service on 503 and leaves it running. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/server_int.h"
#include "transport/textbuf.h"

char *kvt_health_ready(struct kvt_server *srv, bool *ready)
{
	struct kvt_store_stats st = { .size = sizeof(st) };
	struct kvt_textbuf b = { 0 };
	const char *cluster = NULL;

	*ready = true;
	if (__atomic_load_n(&srv->stop, __ATOMIC_ACQUIRE)) {
		*ready = false;
		kvt_textbuf_printf(&b, "draining: the daemon is stopping\n");
	}
	kvt_store_stats(srv->opts.store, &st);
	for (int t = KVT_TIER_HBM; t < KVT_TIER_COUNT; t++) {
		if (st.tier[t].present && st.tier[t].degraded) {
			*ready = false;
			kvt_textbuf_printf(&b, "tier %s degraded: failing writes, probed until it "
					   "works again\n", kvt_tier_name(t));
		}
	}
	kvt_health_devices(&b, srv->opts.store);
	if (srv->opts.hooks.ready_cb)
		cluster = srv->opts.hooks.ready_cb(srv->opts.hooks.arg);
	if (cluster) {
		*ready = false;
		kvt_textbuf_printf(&b, "cluster: %s\n", cluster);
	}
	if (*ready)
		kvt_textbuf_printf(&b, "ready\n");
	if (b.bad) {
		free(b.p);
		return NULL;
	}
	return b.p;
}
