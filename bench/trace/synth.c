/* SPDX-License-Identifier: Apache-2.0 */
/* The synthetic trace generator; see synth.h. */
#include "bench/trace/synth.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

enum kind { SINGLE, CONVERSATION, AGENT };

struct session {
	enum kind kind;
	uint32_t left;        /* requests still to come */
	uint64_t ctx_tokens;  /* tokens every next request starts with */
	uint64_t *ids;        /* ids of the context's full blocks */
	size_t n_ids, cap;
};

struct gen {
	const struct kvt_synth_opts *o;
	uint64_t rng;
	uint64_t next_id;
	uint64_t **prompt_ids;   /* full-block ids of each system prompt */
	uint32_t *prompt_tokens;
	double *prompt_cdf;
	uint64_t *line;          /* ids of the request being written */
	size_t line_cap;
};

void kvt_synth_opts_init(struct kvt_synth_opts *opts, size_t size_bytes)
{
	memset(opts, 0, size_bytes);
	opts->size = size_bytes;
	opts->seed = 1;
	opts->requests = 10000;
	opts->block_tokens = 512;
	opts->rate_per_s = 20;
	opts->sessions = 64;
	opts->system_prompts = 16;
	opts->system_prompt_tokens = 2048;
	opts->conversation_share = 0.5;
	opts->agent_share = 0.2;
	opts->turns = 6;
	opts->agent_steps = 10;
	opts->agent_context_tokens = 16384;
	opts->user_tokens = 700;
	opts->output_tokens = 250;
	opts->max_context_tokens = 131072;
}

/* splitmix64: a good stream from any seed, 0 included */
static uint64_t next_u64(struct gen *g)
{
	uint64_t z = (g->rng += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static double uniform(struct gen *g)
{
	return (double)(next_u64(g) >> 11) * 0x1.0p-53;
}

/* Uniform in [mean/2, 3 mean/2], at least 1. */
static uint64_t around(struct gen *g, uint32_t mean)
{
	uint64_t v = (uint64_t)((double)mean * (0.5 + uniform(g)));

	return v ? v : 1;
}

static int reserve(uint64_t **v, size_t *cap, size_t n)
{
	uint64_t *p;

	if (n <= *cap)
		return 0;
	n = n < 64 ? 64 : n * 2;
	p = realloc(*v, n * sizeof(*p));
	if (!p)
		return -ENOMEM;
	*v = p;
	*cap = n;
	return 0;
}

static int start_session(struct gen *g, struct session *s)
{
	const struct kvt_synth_opts *o = g->o;
	double u = uniform(g), pick = uniform(g);
	uint32_t p = 0, full;
	int err;

	while (p + 1 < o->system_prompts && g->prompt_cdf[p] < pick)
		p++;
	if (u < o->conversation_share) {
		s->kind = CONVERSATION;
		s->left = (uint32_t)around(g, o->turns);
	} else if (u < o->conversation_share + o->agent_share) {
		s->kind = AGENT;
		s->left = (uint32_t)around(g, o->agent_steps);
	} else {
		s->kind = SINGLE;
		s->left = 1;
	}
	full = g->prompt_tokens[p] / o->block_tokens;
	err = reserve(&s->ids, &s->cap, full);
	if (err)
		return err;
	memcpy(s->ids, g->prompt_ids[p], full * sizeof(*s->ids));
	s->n_ids = full;
	s->ctx_tokens = g->prompt_tokens[p];
	if (s->kind == AGENT) {
		/* the agent's documents and tool specs: its own, re-sent every step */
		s->ctx_tokens += around(g, o->agent_context_tokens);
	}
	return 0;
}

static int write_request(struct gen *g, struct session *s, uint64_t ts, FILE *out)
{
	const struct kvt_synth_opts *o = g->o;
	uint32_t bt = o->block_tokens;
	uint64_t in = s->ctx_tokens + around(g, o->user_tokens);
	uint64_t outl = around(g, o->output_tokens);
	size_t n = (size_t)((in + bt - 1) / bt), keep = s->n_ids, j;
	int err;

	/* blocks past the shared full blocks hold new tokens: new ids */
	if (keep > n)
		keep = n;
	err = reserve(&g->line, &g->line_cap, n);
	if (err)
		return err;
	memcpy(g->line, s->ids, keep * sizeof(*s->ids));
	for (j = keep; j < n; j++)
		g->line[j] = g->next_id++;
	if (fprintf(out, "{\"timestamp\": %llu, \"input_length\": %llu, \"output_length\": %llu, "
			 "\"hash_ids\": [", (unsigned long long)ts, (unsigned long long)in,
		    (unsigned long long)outl) < 0)
		return -EIO;
	for (j = 0; j < n; j++)
		if (fprintf(out, j ? ", %llu" : "%llu", (unsigned long long)g->line[j]) < 0)
			return -EIO;
	if (fputs("]}\n", out) < 0)
		return -EIO;

	/* the next request of the session re-sends this input and its output */
	err = reserve(&s->ids, &s->cap, (size_t)(in / bt));
	if (err)
		return err;
	memcpy(s->ids, g->line, (size_t)(in / bt) * sizeof(*s->ids));
	s->n_ids = (size_t)(in / bt);
	s->ctx_tokens = in + outl;
	if (s->ctx_tokens > o->max_context_tokens)
		s->left = 0;
	else
		s->left--;
	return 0;
}

static void gen_free(struct gen *g, struct session *ss, uint32_t n)
{
	for (uint32_t i = 0; ss && i < n; i++)
		free(ss[i].ids);
	free(ss);
	for (uint32_t p = 0; g->prompt_ids && p < g->o->system_prompts; p++)
		free(g->prompt_ids[p]);
	free(g->prompt_ids);
	free(g->prompt_tokens);
	free(g->prompt_cdf);
	free(g->line);
}

int kvt_synth_write(const struct kvt_synth_opts *o, FILE *out)
{
	struct gen g = { .o = o };
	struct session *ss = NULL;
	double ts = 0, sum = 0;
	int err = -ENOMEM;

	if (!o || o->size != sizeof(*o) || !out || !o->block_tokens || !o->sessions ||
	    !o->system_prompts || !(o->rate_per_s > 0) || o->conversation_share < 0 ||
	    o->agent_share < 0 || o->conversation_share + o->agent_share > 1)
		return -EINVAL;
	g.rng = o->seed;
	g.prompt_ids = calloc(o->system_prompts, sizeof(*g.prompt_ids));
	g.prompt_tokens = calloc(o->system_prompts, sizeof(*g.prompt_tokens));
	g.prompt_cdf = calloc(o->system_prompts, sizeof(*g.prompt_cdf));
	ss = calloc(o->sessions, sizeof(*ss));
	if (!g.prompt_ids || !g.prompt_tokens || !g.prompt_cdf || !ss)
		goto out;
	/* Zipf(1) popularity over the prompts */
	for (uint32_t p = 0; p < o->system_prompts; p++)
		sum += 1.0 / (p + 1);
	for (uint32_t p = 0; p < o->system_prompts; p++) {
		uint32_t full;

		g.prompt_cdf[p] = (p ? g.prompt_cdf[p - 1] : 0) + 1.0 / (p + 1) / sum;
		g.prompt_tokens[p] = (uint32_t)around(&g, o->system_prompt_tokens);
		full = g.prompt_tokens[p] / o->block_tokens;
		g.prompt_ids[p] = malloc((full ? full : 1) * sizeof(uint64_t));
		if (!g.prompt_ids[p])
			goto out;
		for (uint32_t b = 0; b < full; b++)
			g.prompt_ids[p][b] = g.next_id++;
	}
	for (uint32_t i = 0; i < o->sessions; i++) {
		err = start_session(&g, &ss[i]);
		if (err)
			goto out;
	}
	for (uint64_t r = 0; r < o->requests; r++) {
		struct session *s = &ss[next_u64(&g) % o->sessions];

		/* exponential gaps: Poisson arrivals at rate_per_s */
		ts += -log(1.0 - uniform(&g)) * 1000.0 / o->rate_per_s;
		err = write_request(&g, s, (uint64_t)ts, out);
		if (!err && s->left == 0)
			err = start_session(&g, s);
		if (err)
			goto out;
	}
	err = fflush(out) ? -EIO : 0;
out:
	gen_free(&g, ss, o->sessions);
	return err;
}
