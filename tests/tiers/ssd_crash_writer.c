/* SPDX-License-Identifier: Apache-2.0 */
/* The writer process of test_ssd_crash: opens the SSD tier in DIR and writes
 * blocks FIRST, FIRST+1, ... in random batches, printing "ack N" on stdout for
 * each block once kvt_ssd_write reported it durable, until it is killed.
 *   usage: ssd_crash_writer DIR FIRST SEED [threads] */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crash_block.h"

int main(int argc, char **argv)
{
	struct kvt_ssd_opts opts;
	struct kvt_codec_cfg codecs[KVT_CODEC_LAST + 1];
	struct kvt_ssd *ssd;
	uint64_t next, s;
	char *bufs[8];
	int rc;

	if (argc < 4)
		return 2;
	next = strtoull(argv[2], NULL, 0);
	s = strtoull(argv[3], NULL, 0) | 1;
	kvt_ssd_opts_init(&opts, sizeof(opts));
	opts.dir = argv[1];
	opts.capacity_bytes = 64ULL << 20;
	opts.segment_bytes = 1ULL << 20;
	opts.queue_depth = 4;
	opts.force_threads = argc > 4 && !strcmp(argv[4], "threads");
	rc = kvt_ssd_open(&opts, NULL, NULL, &ssd);
	if (rc) {
		fprintf(stderr, "writer: open: %s\n", strerror(-rc));
		return 1;
	}
	for (int c = 0; c <= KVT_CODEC_LAST; c++) {
		kvt_codec_cfg_init(&codecs[c]);
		codecs[c].id = (enum kvt_codec_id)c;
	}
	for (int b = 0; b < 8; b++)
		bufs[b] = aligned_alloc(4096, CRASH_MAX_LEN + 4096);
	for (;;) {
		struct kvt_ssd_write w[8];
		size_t n = 1 + kvt_test_rand(&s) % 8;

		for (size_t b = 0; b < n; b++) {
			uint64_t i = next + b;
			crash_fill(i, bufs[b]);
			w[b] = (struct kvt_ssd_write){ .ns_id = CRASH_NS, .key = crash_key(i),
						       .data = bufs[b], .len = crash_len(i),
						       .codec = &codecs[crash_codec(i)] };
			if (i)
				w[b].parent = crash_key(i - 1), w[b].has_parent = true;
		}
		kvt_ssd_write(ssd, w, n);
		for (size_t b = 0; b < n; b++) {
			if (w[b].res == -ENOSPC)
				continue; /* full: the checker wipes the directory */
			if (w[b].res) {
				fprintf(stderr, "writer: block %" PRIu64 ": %s\n", next + b,
					strerror(-w[b].res));
				return 1;
			}
			/* one write(2) per line: the checker reads whole lines */
			char line[64];
			int len = snprintf(line, sizeof(line), "ack %" PRIu64 "\n", next + b);
			if (write(STDOUT_FILENO, line, (size_t)len) != len)
				return 1;
		}
		next += n;
	}
}
