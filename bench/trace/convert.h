/* SPDX-License-Identifier: Apache-2.0 */
/* Converts traces of token ids into hash-id traces (reader.h's format) with
 * kvtier's own prefix hashing, so operators can replay their request logs.
 *
 * Input, one request per line: a JSON array of token ids, or an object with
 * the ids under "tokens", "token_ids" or "prompt_token_ids", and optionally
 * "timestamp" (ms; default: the line number - 1) and "output_length"
 * (default 0). Each block of block_tokens tokens gets the key of
 * kvt_prefix_keys (chained from the request's start, salted), and a trailing
 * partial block the key of its own tokens chained the same way; keys are
 * numbered densely in order of first appearance, so equal ids mean an equal
 * prefix. Memory grows with the distinct blocks, not the trace. */
#ifndef KVT_TRACE_CONVERT_H
#define KVT_TRACE_CONVERT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct kvt_convert_opts {
	size_t size;          /* sizeof(struct kvt_convert_opts), set by _init */
	uint32_t block_tokens; /* default 512 */
	const void *salt;     /* mixed into every key (default none) */
	size_t salt_len;
	bool skip_bad;        /* report a malformed line and go on (default stop) */
	FILE *errors;         /* where malformed lines are reported (default stderr) */
	const char *label;    /* name of the input in messages (default "input") */
};

struct kvt_convert_stats {
	uint64_t requests, bad_lines, tokens, blocks, distinct_blocks;
};

void kvt_convert_opts_init(struct kvt_convert_opts *opts, size_t size_bytes);

/* Convert every line of in, writing to out. Returns 0, -EINVAL, -EBADMSG (a
 * malformed line without skip_bad; reported as "label:line: reason"),
 * -ENOMEM, or -EIO. stats may be NULL. */
int kvt_trace_convert(FILE *in, FILE *out, const struct kvt_convert_opts *opts,
		      struct kvt_convert_stats *stats);

#endif /* KVT_TRACE_CONVERT_H */
