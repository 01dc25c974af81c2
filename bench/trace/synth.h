/* SPDX-License-Identifier: Apache-2.0 */
/* Seeded synthetic traces with controllable prefix sharing, in the JSONL
 * format of reader.h, for tests and demos.
 *
 * Requests come from a pool of interleaved sessions, each starting from one
 * of a few shared system prompts (picked with a Zipf-like skew):
 *   - single requests: system prompt + a fresh question;
 *   - conversations: every turn re-sends the whole conversation so far plus a
 *     new message, so the context grows turn by turn;
 *   - agent loops: a long context (documents, tool specs) re-sent at every
 *     step with the last tool output appended.
 * Only full blocks of a context are shared with later requests; the block
 * holding a context's partial tail, and everything after it, is new. Arrivals
 * are Poisson. The same options and seed give the same bytes. */
#ifndef KVT_TRACE_SYNTH_H
#define KVT_TRACE_SYNTH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct kvt_synth_opts {
	size_t size;                   /* sizeof(struct kvt_synth_opts), set by _init */
	uint64_t seed;                 /* default 1 */
	uint64_t requests;             /* default 10,000 */
	uint32_t block_tokens;         /* default 512 */
	double rate_per_s;             /* mean arrival rate (default 20) */
	uint32_t sessions;             /* sessions interleaved at once (default 64) */
	uint32_t system_prompts;       /* distinct shared prompts (default 16) */
	uint32_t system_prompt_tokens; /* mean length (default 2,048) */
	double conversation_share;     /* share of sessions that are conversations (0.5) */
	double agent_share;            /* share that are agent loops (0.2); the rest
	                                * are single requests */
	uint32_t turns;                /* mean turns of a conversation (default 6) */
	uint32_t agent_steps;          /* mean steps of an agent loop (default 10) */
	uint32_t agent_context_tokens; /* mean initial agent context (default 16,384) */
	uint32_t user_tokens;          /* mean new tokens per turn or step (default 700) */
	uint32_t output_tokens;        /* mean output tokens (default 250) */
	uint32_t max_context_tokens;   /* a session ends past this (default 131,072) */
};

void kvt_synth_opts_init(struct kvt_synth_opts *opts, size_t size_bytes);

/* Write opts->requests requests to out. Returns 0, -EINVAL (bad options),
 * -ENOMEM, or -EIO (a write failed). */
int kvt_synth_write(const struct kvt_synth_opts *opts, FILE *out);

#endif /* KVT_TRACE_SYNTH_H */
