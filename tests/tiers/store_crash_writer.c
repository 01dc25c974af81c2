/* SPDX-License-Identifier: Apache-2.0 */
/* The writer process of test_store_crash: a store with a 1 MiB DRAM tier and
 * an SSD tier in DIR, putting blocks FIRST, FIRST+1, ... as one prefix chain,
 * so the demoter keeps writing to SSD, until it is killed. Once it has put
 * four DRAM tiers' worth (demotion is then under way) it writes one byte to
 * stdout, so the checker can time its kill from real progress rather than
 * from the start of a process that a loaded machine may start slowly.
 *   usage: store_crash_writer DIR FIRST */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvtier/store.h"
#include "store_crash_block.h"

int main(int argc, char **argv)
{
	struct kvt_store *store;
	struct kvt_ns *ns;
	uint32_t n, put = 0;
	char *buf = malloc(SC_BLOCK);
	int rc;

	if (argc < 3 || !buf)
		return 2;
	n = (uint32_t)strtoul(argv[2], NULL, 0);
	rc = sc_open(argv[1], &store, &ns);
	if (rc) {
		fprintf(stderr, "writer: open: %s\n", kvt_strerror(rc));
		return 1;
	}
	for (;; n++) {
		struct kvt_key k = sc_key(n), p = sc_key(n - 1);
		sc_fill(n, buf);
		rc = kvt_put(ns, &k, n ? &p : NULL, buf, SC_BLOCK);
		if (rc && rc != -EEXIST) {
			fprintf(stderr, "writer: put %u: %s\n", n, kvt_strerror(rc));
			return 1;
		}
		if (++put == SC_PROGRESS_PUTS && write(STDOUT_FILENO, "p", 1) != 1)
			return 1;
	}
}
