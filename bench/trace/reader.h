/* SPDX-License-Identifier: Apache-2.0 */
/* Streaming reader of JSONL request traces in the format of the public
 * Mooncake traces, one request per line:
 *
 *   {"timestamp": ms, "input_length": tokens, "output_length": tokens,
 *    "hash_ids": [id, ...]}
 *
 * one hash id per block of a fixed number of tokens (the last block may be
 * partial); equal ids mean an equal prefix up to that block. The reader holds
 * one line and one request at a time, so a trace of any size is read in
 * bounded memory. Blank lines are ignored. Requests are returned in
 * timestamp order, equal timestamps in file order: a trace must be sorted,
 * or no more out of order than its reorder window (a request is held until
 * that many later lines are read; one that comes after a later request was
 * already returned is a malformed line). */
#ifndef KVT_TRACE_READER_H
#define KVT_TRACE_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* One request; its arrays belong to the reader and stay valid until the next
 * kvt_trace_reader_next() or close. */
struct kvt_trace_req {
	uint64_t line;          /* 1-based line number in the trace */
	double timestamp_ms;
	uint64_t input_length;  /* tokens */
	uint64_t output_length; /* tokens */
	const uint64_t *hash_ids;
	size_t n_ids;
};

struct kvt_trace_reader_opts {
	size_t size;        /* sizeof(struct kvt_trace_reader_opts), set by _init */
	bool skip_bad;      /* report a malformed line and go on (default: stop) */
	FILE *errors;       /* where malformed lines are reported (default stderr;
	                     * NULL after _init to stay silent) */
	bool progress;      /* progress line on stderr when it is a terminal */
	const char *label;  /* name used in messages; default the path */
	size_t reorder_window; /* requests held to restore timestamp order
	                     * (default 0: the trace must be sorted) */
	bool full_parser;   /* parse every line with the full JSON parser, not only
	                     * those the fast scanner declines (slower; the two
	                     * agree, which the tests check) */
};

struct kvt_trace_reader;

void kvt_trace_reader_opts_init(struct kvt_trace_reader_opts *opts, size_t size_bytes);

/* Open the trace at path ("-" = standard input). Returns 0 and *out, -EINVAL,
 * or the errno of fopen. */
int kvt_trace_reader_open(const char *path, const struct kvt_trace_reader_opts *opts,
			  struct kvt_trace_reader **out);

/* Read the next request into *req. Returns 1, 0 at the end of the trace,
 * -EBADMSG for a malformed line when skip_bad is off (reported as
 * "label:line: reason" on opts->errors), -ENOMEM, or -EIO. */
int kvt_trace_reader_next(struct kvt_trace_reader *r, struct kvt_trace_req *req);

/* Lines read so far, and malformed lines among them (skipped or not). */
uint64_t kvt_trace_reader_lines(const struct kvt_trace_reader *r);
uint64_t kvt_trace_reader_bad_lines(const struct kvt_trace_reader *r);

/* The last error message, "" if none. Valid until the next call. */
const char *kvt_trace_reader_error(const struct kvt_trace_reader *r);

/* Rewind to the start of the trace (not for standard input). Returns 0 or
 * -ESPIPE, and clears the counters. */
int kvt_trace_reader_rewind(struct kvt_trace_reader *r);

/* Close the trace, clearing any progress line. NULL is accepted. */
void kvt_trace_reader_close(struct kvt_trace_reader *r);

#endif /* KVT_TRACE_READER_H */
