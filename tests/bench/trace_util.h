/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers of the trace tests: traces written to temporary files, replayed
 * with given options. */
#ifndef KVT_TESTS_TRACE_UTIL_H
#define KVT_TESTS_TRACE_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/trace/reader.h"
#include "bench/trace/replay.h"
#include "helpers.h"

/* Write text to a new file under $KVT_TEST_TMPDIR (or /tmp); returns its
 * malloc'd path, for trace_file_remove. */
static inline char *trace_file(const char *tag, const char *text)
{
	const char *base = getenv("KVT_TEST_TMPDIR");
	char *path;
	int fd;
	FILE *f;

	if (asprintf(&path, "%s/%s.XXXXXX", base && *base ? base : "/tmp", tag) < 0)
		abort();
	fd = mkstemp(path);
	f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f || fputs(text, f) < 0 || fclose(f))
		abort();
	return path;
}

static inline void trace_file_remove(char *path)
{
	unlink(path);
	free(path);
}

/* Replay the trace at path with o; 0 and *st, or a negative errno. */
static inline int replay_file(const char *path, const struct kvt_replay_opts *o,
			      struct kvt_replay_stats *st)
{
	struct kvt_trace_reader_opts ro;
	struct kvt_trace_reader *r;
	struct kvt_replay *rp;
	struct kvt_trace_req req;
	int err;

	kvt_trace_reader_opts_init(&ro, sizeof(ro));
	err = kvt_trace_reader_open(path, &ro, &r);
	if (err)
		return err;
	err = kvt_replay_open(o, &rp);
	if (err) {
		kvt_trace_reader_close(r);
		return err;
	}
	while ((err = kvt_trace_reader_next(r, &req)) == 1) {
		err = kvt_replay_request(rp, &req);
		if (err)
			break;
	}
	kvt_replay_stats(rp, st);
	kvt_replay_close(rp);
	kvt_trace_reader_close(r);
	return err;
}

/* Options for one DRAM tier of cap blocks under policy. */
static inline void one_tier(struct kvt_replay_opts *o, const char *policy, uint64_t cap)
{
	kvt_replay_opts_init(o, sizeof(*o));
	o->policy = policy;
	o->capacity[KVT_TIER_DRAM] = cap;
}

/* Path of a file of the source tree's tests/data. malloc'd. */
static inline char *data_file(const char *name)
{
	const char *src = getenv("KVT_SOURCE_DIR");
	char *path;

	if (!src || asprintf(&path, "%s/tests/data/%s", src, name) < 0)
		abort();
	return path;
}

#endif
