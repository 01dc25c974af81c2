/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier-bench trace: prefix-cache hit rates of a request trace replayed
 * through kvtier's own index, policies and tier capacities, and the replay's
 * speed against parsing the same trace (the reference, measured in the same
 * run). Also generates synthetic traces and converts token-id traces. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <math.h>

#include <jansson.h>

#include "bench/bench.h"
#include "bench/trace/convert.h"
#include "bench/trace/daemon.h"
#include "bench/trace/payload.h"
#include "bench/trace/prefill.h"
#include "bench/trace/reader.h"
#include "bench/trace/replay.h"
#include "bench/trace/report.h"
#include "bench/trace/synth.h"
#include "kvtier/types.h"
#include "store/admission.h"
#include "store/mrc.h"
#include "util/size.h"

#define MAX_POLICIES 16
#define MAX_CAPS 48

struct cfg {
	const char *trace;
	const char *out;            /* --generate / --convert output */
	const char *convert;        /* token-id trace to convert */
	uint64_t generate;          /* requests to generate into --out */
	uint64_t synthetic;         /* requests to generate and replay */
	struct kvt_synth_opts synth;
	struct kvt_replay_opts ro;
	uint64_t tier_bytes[KVT_TIER_COUNT];
	bool tier_set[KVT_TIER_COUNT];
	uint64_t kv_bytes_per_token;
	bool kvbpt_set;
	const char *model;          /* cost model for the prefill estimate, or "none" */
	const char *gpu;
	double mfu;
	struct kvt_prefill_est est;
	bool have_est;
	struct kvt_prefill_est *sweep_est; /* one per sweep point */
	const char *policies[MAX_POLICIES];
	int n_policies;
	bool sweep;
	int sweep_tier;
	uint64_t caps[MAX_CAPS];
	int n_caps;
	const char *svg;
	bool json, skip_bad, quiet;
	uint64_t reorder_window;
	int reps;
	bool payload;
	uint64_t payload_block_bytes;
	const char *ssd_dir;
	const char *socket, *token; /* --socket: replay through a running kvtierd */
	char policy_list[128];
	const char *admissions[MAX_POLICIES]; /* --ssd-admission rules */
	int n_admissions;
	char admission_list[128];
	bool mrc;                   /* sampled miss-ratio curve while replaying */
	uint64_t mrc_caps[MAX_CAPS];
	int n_mrc_caps;
	struct kvt_mrc_opts mrc_opts;
};

static void usage(FILE *f)
{
	fprintf(f,
"usage: kvtier-bench trace [--trace FILE | --synthetic N] [options]\n"
"       kvtier-bench trace --generate N --out FILE [synthetic options]\n"
"       kvtier-bench trace --convert TOKENS.jsonl --out FILE [--block-tokens N]\n"
"\n"
"Replays a JSONL request trace ({\"timestamp\", \"input_length\", \"output_length\",\n"
"\"hash_ids\"} per line) through kvtier's block index and eviction policies and\n"
"reports block and token hit rates per tier beside the ideal (infinite capacity)\n"
"hit rate, and the replay speed against parsing the trace alone. Without a trace\n"
"it replays a synthetic one of 100,000 requests.\n"
"\n"
"input:\n"
"  --trace FILE            trace to replay ('-' = standard input)\n"
"  --synthetic N           generate N synthetic requests (temporary file) and replay them\n"
"  --block-tokens N        tokens per hash id (default 512)\n"
"  --skip-bad              report malformed lines and skip them (default: stop at the first)\n"
"  --reorder-window N      restore timestamp order within N requests (default 0: the\n"
"                          trace must be sorted)\n"
"capacity (a tier is present when given a capacity; default: DRAM, infinite):\n"
"  --capacity-blocks N     DRAM capacity in blocks ('inf' = infinite), the only tier\n"
"                          unless others are given\n"
"  --hbm-blocks N, --dram-blocks N, --ssd-blocks N   tier capacity in blocks or 'inf'\n"
"  --hbm BYTES, --dram BYTES, --ssd BYTES            tier capacity in bytes (K/M/G/T)\n"
"  --kv-bytes-per-token N  KV bytes of one token, for byte capacities and byte counts\n"
"                          (default: the --model's in bf16, 147456 for Qwen3-8B)\n"
"prefill estimate (offload-vs-recompute cost model):\n"
"  --model M               model: a shipped name or a config.json path (default\n"
"                          Qwen3-8B; 'none' for no estimate)\n"
"  --gpu G                 GPU of the model's table (default H100-SXM)\n"
"  --mfu F                 fraction of peak FLOP/s a prefill sustains (default 0.5)\n"
"replay:\n"
"  --policy P[,P...]       lru (default), tail-lru, lfu, cost, ghost-lru, ghost-ends,\n"
"                          class-lru, class-ends, or 'all'; a list replays each\n"
"                          (policies[] in the JSON), or is swept\n"
"  --ssd-admission R[,R...] which blocks evicted into the SSD tier are written there:\n"
"                          always (default), reused (used twice), useful (classes the\n"
"                          tier reads back), or 'all'; a list replays each\n"
"                          (admissions[] in the JSON, with SSD bytes written)\n"
"  --promote               move a hit below the first tier up to it\n"
"  --store-output          also store each request's output blocks\n"
"  --no-reuse-class        store blocks without the reuse class of their request's\n"
"                          output length (its bit length; what class-lru learns from)\n"
"  --reps N                replays timed, median reported (default 3; 1 for stdin)\n"
"  --payload               real bytes through the store API instead of accounting\n"
"  --payload-block-bytes N scaled block size of --payload (default 64K)\n"
"  --ssd-dir DIR           SSD tier directory of --payload (its size: --ssd-blocks)\n"
"  --socket PATH           replay through the kvtierd at PATH instead (LOOKUP, LOAD\n"
"                          the hits, SAVE the rest), blocks of --payload-block-bytes\n"
"                          (default 16K), and report the daemon's counters; its\n"
"                          tiers, policy and --ssd-admission are the daemon's own\n"
"  --token TOKEN           tenant token for --socket\n"
"miss-ratio curve (sampled reuse distances, store/mrc.h):\n"
"  --mrc                   estimate the LRU hit rate at every capacity while replaying\n"
"                          (beside the exact LRU hit rates with --sweep), with its\n"
"                          memory and its cost in replay speed (each repetition\n"
"                          replays with and without it)\n"
"  --mrc-capacities L      comma-separated blocks (default 1-2-5 steps from 1,000 to\n"
"                          1,000,000; also the sweep's capacities with --sweep)\n"
"  --mrc-rate R            highest sampling rate (default 0.01)\n"
"  --mrc-budget BYTES      the estimator's memory (default 4M)\n"
"  --mrc-seed S            sampling hash seed (default 0)\n"
"  --mrc-plain             sample alone (plain SHARDS), without the records' last-use\n"
"                          ticks\n"
"sweep (all in one pass over the trace):\n"
"  --sweep                 hit rate against the capacity of one tier, per policy\n"
"                          (default policies: all)\n"
"  --sweep-tier T          tier swept: hbm, dram (default), ssd\n"
"  --sweep-capacities L    comma-separated blocks (default 1-2-5 steps from 1,000 to\n"
"                          1,000,000, and inf)\n"
"  --svg FILE              also plot the sweep (and the --mrc curve) as SVG\n"
"synthetic trace (--generate, --synthetic):\n"
"  --seed S                generator seed (default 1)\n"
"  --sessions N            sessions interleaved at once (default 64)\n"
"  --system-prompts N      distinct shared system prompts (default 16)\n"
"  --system-prompt-tokens N  mean system prompt length (default 2048)\n"
"  --conversation-share F  share of sessions that are multi-turn (default 0.5)\n"
"  --agent-share F         share that are agent loops re-sending a long context (0.2)\n"
"  --turns N, --agent-steps N, --agent-context-tokens N, --user-tokens N,\n"
"  --output-tokens N       mean sizes (6, 10, 16384, 700, 250)\n"
"  --rate R                mean arrivals per second (default 20)\n"
"output:\n"
"  --json                  print one JSON object\n"
"  --quiet                 no progress line\n"
"  --help                  this text\n");
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;

	if (!s || !*s || *s == '-')
		return -EINVAL;
	errno = 0;
	*out = strtoull(s, &end, 10);
	return errno || *end ? -EINVAL : 0;
}

static int parse_blocks(const char *s, uint64_t *out)
{
	if (!strcmp(s, "inf") || !strcmp(s, "infinite")) {
		*out = KVT_REPLAY_INFINITE;
		return 0;
	}
	return parse_u64(s, out);
}

static int parse_tier(const char *s)
{
	for (int t = KVT_TIER_HBM; t < KVT_TIER_COUNT; t++)
		if (!strcmp(s, kvt_tier_name(t)))
			return t;
	return -EINVAL;
}

/* A registry of names: the policies, the SSD admission rules. */
struct registry {
	const char *what;                  /* for messages */
	const char *(*name_at)(size_t i);  /* NULL past the last */
	const char *(*names)(void);        /* all, for messages */
};

static const char *policy_at(size_t i)
{
	const struct kvt_policy_ops *ops = kvt_policy_at(i);

	return ops ? ops->name : NULL;
}

static const char *admission_at(size_t i)
{
	const struct kvt_admission_ops *ops = kvt_admission_at(i);

	return ops ? ops->name : NULL;
}

static const struct registry policies = { "policy", policy_at, kvt_policy_names };
static const struct registry admissions = { "SSD admission rule", admission_at,
					    kvt_admission_names };

/* A comma-separated list of names of reg (cut up in buf), or "all" (every
 * one), into out[0..*n): the registry's own strings. */
static int split_names(const struct registry *reg, const char *s, char *buf, size_t len,
		       const char **out, int *n)
{
	const char *name;
	char *save, *tok;

	*n = 0;
	if (!strcmp(s, "all")) {
		for (size_t i = 0; (name = reg->name_at(i)) && *n < MAX_POLICIES; i++)
			out[(*n)++] = name;
		return 0;
	}
	snprintf(buf, len, "%s", s);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		size_t i;

		for (i = 0; (name = reg->name_at(i)) && strcmp(name, tok); i++)
			;
		if (!name || *n == MAX_POLICIES) {
			fprintf(stderr, "trace: unknown %s '%s' (one of %s)\n", reg->what, tok,
				reg->names());
			return -EINVAL;
		}
		out[(*n)++] = name;
	}
	return *n ? 0 : -EINVAL;
}

static int split_policies(struct cfg *c, const char *s)
{
	return split_names(&policies, s, c->policy_list, sizeof(c->policy_list), c->policies,
			   &c->n_policies);
}

static int split_admissions(struct cfg *c, const char *s)
{
	return split_names(&admissions, s, c->admission_list, sizeof(c->admission_list),
			   c->admissions, &c->n_admissions);
}

/* A comma-separated list of capacities in blocks ('inf' allowed) into
 * caps[0..*n). */
static int split_caps(const char *s, uint64_t *caps, int *n)
{
	char buf[1024], *save, *tok;

	snprintf(buf, sizeof(buf), "%s", s);
	*n = 0;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (*n == MAX_CAPS || parse_blocks(tok, &caps[*n]) || !caps[*n])
			return -EINVAL;
		(*n)++;
	}
	return *n ? 0 : -EINVAL;
}

/* The 1-2-5 ladder from 1,000 to 1,000,000 blocks into caps[0..*n). */
static void ladder_caps(uint64_t *caps, int *n)
{
	static const uint64_t steps[] = { 1, 2, 5 };

	*n = 0;
	for (uint64_t d = 1000; d <= 1000000; d *= 10)
		for (int k = 0; k < 3 && d * steps[k] <= 1000000; k++)
			caps[(*n)++] = d * steps[k];
}

enum {
	O_TRACE = 256, O_SYNTHETIC, O_GENERATE, O_OUT, O_CONVERT, O_BLOCK_TOKENS, O_SKIP_BAD,
	O_CAP_BLOCKS, O_HBM_BLOCKS, O_DRAM_BLOCKS, O_SSD_BLOCKS, O_HBM, O_DRAM, O_SSD, O_KVBPT,
	O_POLICY, O_PROMOTE, O_STORE_OUTPUT, O_REPS, O_PAYLOAD, O_PAYLOAD_BB, O_SSD_DIR,
	O_SWEEP, O_SWEEP_TIER, O_SWEEP_CAPS, O_SVG, O_SEED, O_SESSIONS, O_PROMPTS,
	O_PROMPT_TOKENS, O_CONV_SHARE, O_AGENT_SHARE, O_TURNS, O_AGENT_STEPS, O_AGENT_CTX,
	O_USER_TOKENS, O_OUTPUT_TOKENS, O_RATE, O_JSON, O_QUIET, O_HELP, O_MODEL, O_GPU, O_MFU,
	O_REORDER, O_MRC, O_MRC_CAPS, O_MRC_RATE, O_MRC_BUDGET, O_MRC_SEED, O_MRC_PLAIN,
	O_SSD_ADMISSION, O_SOCKET, O_TOKEN, O_NO_REUSE_CLASS,
};

static const struct option options[] = {
	{ "trace", required_argument, NULL, O_TRACE },
	{ "synthetic", required_argument, NULL, O_SYNTHETIC },
	{ "generate", required_argument, NULL, O_GENERATE },
	{ "out", required_argument, NULL, O_OUT },
	{ "convert", required_argument, NULL, O_CONVERT },
	{ "block-tokens", required_argument, NULL, O_BLOCK_TOKENS },
	{ "skip-bad", no_argument, NULL, O_SKIP_BAD },
	{ "capacity-blocks", required_argument, NULL, O_CAP_BLOCKS },
	{ "hbm-blocks", required_argument, NULL, O_HBM_BLOCKS },
	{ "dram-blocks", required_argument, NULL, O_DRAM_BLOCKS },
	{ "ssd-blocks", required_argument, NULL, O_SSD_BLOCKS },
	{ "hbm", required_argument, NULL, O_HBM },
	{ "dram", required_argument, NULL, O_DRAM },
	{ "ssd", required_argument, NULL, O_SSD },
	{ "kv-bytes-per-token", required_argument, NULL, O_KVBPT },
	{ "policy", required_argument, NULL, O_POLICY },
	{ "promote", no_argument, NULL, O_PROMOTE },
	{ "store-output", no_argument, NULL, O_STORE_OUTPUT },
	{ "no-reuse-class", no_argument, NULL, O_NO_REUSE_CLASS },
	{ "reps", required_argument, NULL, O_REPS },
	{ "payload", no_argument, NULL, O_PAYLOAD },
	{ "payload-block-bytes", required_argument, NULL, O_PAYLOAD_BB },
	{ "ssd-dir", required_argument, NULL, O_SSD_DIR },
	{ "sweep", no_argument, NULL, O_SWEEP },
	{ "sweep-tier", required_argument, NULL, O_SWEEP_TIER },
	{ "sweep-capacities", required_argument, NULL, O_SWEEP_CAPS },
	{ "svg", required_argument, NULL, O_SVG },
	{ "seed", required_argument, NULL, O_SEED },
	{ "sessions", required_argument, NULL, O_SESSIONS },
	{ "system-prompts", required_argument, NULL, O_PROMPTS },
	{ "system-prompt-tokens", required_argument, NULL, O_PROMPT_TOKENS },
	{ "conversation-share", required_argument, NULL, O_CONV_SHARE },
	{ "agent-share", required_argument, NULL, O_AGENT_SHARE },
	{ "turns", required_argument, NULL, O_TURNS },
	{ "agent-steps", required_argument, NULL, O_AGENT_STEPS },
	{ "agent-context-tokens", required_argument, NULL, O_AGENT_CTX },
	{ "user-tokens", required_argument, NULL, O_USER_TOKENS },
	{ "output-tokens", required_argument, NULL, O_OUTPUT_TOKENS },
	{ "rate", required_argument, NULL, O_RATE },
	{ "json", no_argument, NULL, O_JSON },
	{ "quiet", no_argument, NULL, O_QUIET },
	{ "help", no_argument, NULL, O_HELP },
	{ "model", required_argument, NULL, O_MODEL },
	{ "gpu", required_argument, NULL, O_GPU },
	{ "mfu", required_argument, NULL, O_MFU },
	{ "reorder-window", required_argument, NULL, O_REORDER },
	{ "mrc", no_argument, NULL, O_MRC },
	{ "mrc-capacities", required_argument, NULL, O_MRC_CAPS },
	{ "mrc-rate", required_argument, NULL, O_MRC_RATE },
	{ "mrc-budget", required_argument, NULL, O_MRC_BUDGET },
	{ "mrc-seed", required_argument, NULL, O_MRC_SEED },
	{ "mrc-plain", no_argument, NULL, O_MRC_PLAIN },
	{ "ssd-admission", required_argument, NULL, O_SSD_ADMISSION },
	{ "socket", required_argument, NULL, O_SOCKET },
	{ "token", required_argument, NULL, O_TOKEN },
	{ NULL, 0, NULL, 0 },
};

static int u32_arg(const char *s, uint32_t *out)
{
	uint64_t v;

	if (parse_u64(s, &v) || v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

static int double_arg(const char *s, double *out)
{
	char *end;

	*out = strtod(s, &end);
	return end == s || *end ? -EINVAL : 0;
}

/* Returns 0, 1 for --help, or -EINVAL. */
static int parse_args(int argc, char **argv, struct cfg *c)
{
	uint64_t v = 0;
	int opt, t, err = 0;

	optind = 1;
	while (!err && (opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (opt) {
		case O_TRACE: c->trace = optarg; break;
		case O_SYNTHETIC: err = parse_u64(optarg, &c->synthetic); break;
		case O_GENERATE: err = parse_u64(optarg, &c->generate); break;
		case O_OUT: c->out = optarg; break;
		case O_CONVERT: c->convert = optarg; break;
		case O_BLOCK_TOKENS:
			err = u32_arg(optarg, &c->ro.block_tokens);
			if (!err && !c->ro.block_tokens)
				err = -EINVAL;
			c->synth.block_tokens = c->ro.block_tokens;
			break;
		case O_SKIP_BAD: c->skip_bad = true; break;
		case O_CAP_BLOCKS:
		case O_HBM_BLOCKS:
		case O_DRAM_BLOCKS:
		case O_SSD_BLOCKS:
			t = opt == O_HBM_BLOCKS ? KVT_TIER_HBM :
			    opt == O_SSD_BLOCKS ? KVT_TIER_SSD : KVT_TIER_DRAM;
			err = parse_blocks(optarg, &v);
			if (!err && !v)
				err = -EINVAL; /* a tier with no room: leave it out */
			c->ro.capacity[t] = v;
			c->tier_bytes[t] = 0;
			c->tier_set[t] = true;
			break;
		case O_HBM:
		case O_DRAM:
		case O_SSD:
			t = opt == O_HBM ? KVT_TIER_HBM : opt == O_SSD ? KVT_TIER_SSD : KVT_TIER_DRAM;
			err = kvt_bench_parse_size(optarg, &c->tier_bytes[t]);
			c->tier_set[t] = true;
			break;
		case O_KVBPT:
			err = parse_u64(optarg, &c->kv_bytes_per_token);
			c->kvbpt_set = true;
			break;
		case O_MODEL: c->model = optarg; break;
		case O_GPU: c->gpu = optarg; break;
		case O_MFU: err = double_arg(optarg, &c->mfu); break;
		case O_REORDER:
			err = parse_u64(optarg, &c->reorder_window);
			if (!err && c->reorder_window > (1u << 24))
				err = -EINVAL;
			break;
		case O_POLICY: err = split_policies(c, optarg); break;
		case O_PROMOTE: c->ro.promote = true; break;
		case O_STORE_OUTPUT: c->ro.store_output = true; break;
		case O_NO_REUSE_CLASS: c->ro.reuse_class = false; break;
		case O_REPS:
			err = parse_u64(optarg, &v);
			c->reps = v >= 1 && v <= 100 ? (int)v : 0;
			err = err || !c->reps ? -EINVAL : 0;
			break;
		case O_PAYLOAD: c->payload = true; break;
		case O_PAYLOAD_BB: err = kvt_bench_parse_size(optarg, &c->payload_block_bytes); break;
		case O_SSD_DIR: c->ssd_dir = optarg; break;
		case O_SOCKET: c->socket = optarg; break;
		case O_TOKEN: c->token = optarg; break;
		case O_SWEEP: c->sweep = true; break;
		case O_SWEEP_TIER:
			c->sweep_tier = parse_tier(optarg);
			err = c->sweep_tier < 0 ? -EINVAL : 0;
			break;
		case O_SWEEP_CAPS: err = split_caps(optarg, c->caps, &c->n_caps); break;
		case O_MRC: c->mrc = true; break;
		case O_MRC_CAPS:
			err = split_caps(optarg, c->mrc_caps, &c->n_mrc_caps);
			c->mrc = true;
			break;
		case O_MRC_RATE:
			err = double_arg(optarg, &c->mrc_opts.max_rate);
			if (!err && !(c->mrc_opts.max_rate > 0 && c->mrc_opts.max_rate <= 1))
				err = -EINVAL;
			c->mrc = true;
			break;
		case O_MRC_BUDGET:
			err = kvt_bench_parse_size(optarg, &v);
			c->mrc_opts.budget_bytes = (size_t)v;
			c->mrc = true;
			break;
		case O_MRC_SEED:
			err = parse_u64(optarg, &c->mrc_opts.seed);
			c->mrc = true;
			break;
		case O_MRC_PLAIN:
			c->mrc_opts.use_ticks = false;
			c->mrc = true;
			break;
		case O_SSD_ADMISSION: err = split_admissions(c, optarg); break;
		case O_SVG: c->svg = optarg; break;
		case O_SEED: err = parse_u64(optarg, &c->synth.seed); break;
		case O_SESSIONS: err = u32_arg(optarg, &c->synth.sessions); break;
		case O_PROMPTS: err = u32_arg(optarg, &c->synth.system_prompts); break;
		case O_PROMPT_TOKENS: err = u32_arg(optarg, &c->synth.system_prompt_tokens); break;
		case O_CONV_SHARE: err = double_arg(optarg, &c->synth.conversation_share); break;
		case O_AGENT_SHARE: err = double_arg(optarg, &c->synth.agent_share); break;
		case O_TURNS: err = u32_arg(optarg, &c->synth.turns); break;
		case O_AGENT_STEPS: err = u32_arg(optarg, &c->synth.agent_steps); break;
		case O_AGENT_CTX: err = u32_arg(optarg, &c->synth.agent_context_tokens); break;
		case O_USER_TOKENS: err = u32_arg(optarg, &c->synth.user_tokens); break;
		case O_OUTPUT_TOKENS: err = u32_arg(optarg, &c->synth.output_tokens); break;
		case O_RATE: err = double_arg(optarg, &c->synth.rate_per_s); break;
		case O_JSON: c->json = true; break;
		case O_QUIET: c->quiet = true; break;
		case O_HELP: return 1;
		default: return -EINVAL;
		}
		if (err)
			fprintf(stderr, "trace: bad value for --%s: '%s'\n",
				options[opt - O_TRACE].name, optarg ? optarg : "");
	}
	if (!err && optind < argc) {
		fprintf(stderr, "trace: unexpected argument '%s'\n", argv[optind]);
		err = -EINVAL;
	}
	return err;
}

/* Byte capacities become blocks; a tier given no capacity is absent unless
 * none is given at all (then DRAM is infinite). */
static int resolve_capacities(struct cfg *c)
{
	bool any = false;
	int err;

	if (strcmp(c->model, "none")) {
		err = kvt_prefill_est_init(&c->est, c->model, c->gpu, c->mfu, c->ro.block_tokens, 0);
		if (err) {
			fprintf(stderr, "trace: cost model (--model %s --gpu %s --mfu %g): %s\n",
				c->model, c->gpu, c->mfu, kvt_strerror(err));
			return err;
		}
		c->have_est = true;
		if (!c->kvbpt_set)
			c->kv_bytes_per_token = kvt_model_kv_bytes_per_token(&c->est.model,
									      KVT_DTYPE_BF16);
	}
	c->est.plan.block_bytes = c->kv_bytes_per_token * c->ro.block_tokens;
	c->ro.block_bytes = c->kv_bytes_per_token * c->ro.block_tokens;
	if (!c->ro.block_bytes) {
		fprintf(stderr, "trace: --kv-bytes-per-token must be > 0\n");
		return -EINVAL;
	}
	for (int t = KVT_TIER_HBM; t < KVT_TIER_COUNT; t++) {
		if (c->tier_set[t] && c->tier_bytes[t]) {
			c->ro.capacity[t] = c->tier_bytes[t] / c->ro.block_bytes;
			if (!c->ro.capacity[t]) {
				fprintf(stderr, "trace: %s capacity below one block of %llu bytes\n",
					kvt_tier_name(t), (unsigned long long)c->ro.block_bytes);
				return -EINVAL;
			}
		} else if (c->tier_set[t] && !c->ro.capacity[t]) {
			fprintf(stderr, "trace: %s capacity must be > 0\n", kvt_tier_name(t));
			return -EINVAL;
		}
		any |= c->tier_set[t];
	}
	if (!any)
		c->ro.capacity[KVT_TIER_DRAM] = KVT_REPLAY_INFINITE;
	else
		for (int t = KVT_TIER_HBM; t < KVT_TIER_COUNT; t++)
			if (!c->tier_set[t])
				c->ro.capacity[t] = 0;
	return 0;
}

static int open_reader(const struct cfg *c, bool progress, bool report,
		       struct kvt_trace_reader **r)
{
	struct kvt_trace_reader_opts o;
	int err;

	kvt_trace_reader_opts_init(&o, sizeof(o));
	o.skip_bad = c->skip_bad;
	o.reorder_window = (size_t)c->reorder_window;
	if (!report)
		o.errors = NULL; /* the replay pass reported them already */
	o.progress = progress && !c->quiet;
	err = kvt_trace_reader_open(c->trace, &o, r);
	if (err)
		fprintf(stderr, "trace: %s: %s\n", c->trace, kvt_strerror(err));
	return err;
}

/* CPU time of this thread, in seconds: what a pass costs whatever else the
 * machine runs. */
static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The reference: the same trace read and parsed, nothing replayed. */
static int parse_pass(const struct cfg *c, double *seconds, double *cpu)
{
	struct kvt_trace_reader *r;
	struct kvt_trace_req req;
	uint64_t t0 = kvt_now_ns(), sum = 0;
	double c0 = cpu_s();
	int err = open_reader(c, false, false, &r);

	if (err)
		return err;
	while ((err = kvt_trace_reader_next(r, &req)) == 1)
		sum += req.n_ids;
	*seconds = (double)(kvt_now_ns() - t0) / 1e9;
	*cpu = cpu_s() - c0;
	kvt_trace_reader_close(r);
	return err < 0 ? err : (sum == UINT64_MAX); /* sum keeps the loop honest */
}

struct timed {
	double replay_s; /* in the replay alone */
	double total_s;  /* reading, parsing and replaying */
	double cpu_s;    /* CPU time of reading, parsing and replaying */
	uint64_t bad_lines;
};

/* One pass: every request into every replay of rs[0..n). */
static int replay_pass(struct cfg *c, struct kvt_replay **rs, size_t n, bool progress,
		       struct timed *tm)
{
	struct kvt_trace_reader *r;
	struct kvt_trace_req req;
	uint64_t in_replay = 0, t0 = kvt_now_ns();
	double c0 = cpu_s(), est_cpu = 0;
	int err = open_reader(c, progress, progress, &r);

	if (err)
		return err;
	while ((err = kvt_trace_reader_next(r, &req)) == 1) {
		uint64_t a = kvt_now_ns();

		for (size_t i = 0; i < n && err >= 0; i++)
			err = kvt_replay_request(rs[i], &req);
		in_replay += kvt_now_ns() - a;
		if (err < 0)
			break;
		if (progress && c->have_est) {
			/* the first pass feeds the estimate, outside the timed replay */
			double e0 = cpu_s();
			size_t hits;
			const uint8_t *tiers = kvt_replay_last_hits(rs[0], &hits);

			err = kvt_prefill_est_add(&c->est, req.input_length, tiers, hits);
			for (size_t i = 1; i < n && err >= 0 && c->sweep_est; i++) {
				tiers = kvt_replay_last_hits(rs[i], &hits);
				err = kvt_prefill_est_add(&c->sweep_est[i - 1], req.input_length,
							  tiers, hits);
			}
			est_cpu += cpu_s() - e0;
			if (err < 0)
				break;
		}
	}
	tm->replay_s = (double)in_replay / 1e9;
	tm->total_s = (double)(kvt_now_ns() - t0) / 1e9;
	tm->cpu_s = cpu_s() - c0 - est_cpu;
	tm->bad_lines = kvt_trace_reader_bad_lines(r);
	kvt_trace_reader_close(r);
	if (err < 0)
		fprintf(stderr, "trace: replay: %s\n", kvt_strerror(err));
	return err < 0 ? err : 0;
}

static void close_all(struct kvt_replay **rs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		kvt_replay_close(rs[i]);
}

static int print_json(json_t *j)
{
	char *s = json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(10));

	if (!s)
		return -ENOMEM;
	puts(s);
	free(s);
	return 0;
}

/* One policy's (or admission rule's) result when several are replayed in
 * turn. */
struct policy_row {
	const char *name;
	struct kvt_replay_stats st;
	double replay_s; /* median */
};

/* One accounting run: the main replay (rs[0]) and, with --sweep, one replay
 * per sweep point, fed by the same passes over the trace. */
struct run {
	size_t n, n_sweep;          /* replays per pass; of them, sweep points */
	struct kvt_replay **rs;
	struct kvt_sweep_point *pts;
	int reps;
	bool seekable;              /* a file: it can be read again */
	double rep_s[100], tot_s[100], parse_s[100];
	double cpu_s[100], parse_cpu_s[100], mrc_cpu_s[100];
	double replay_med, total_med, parse_med;
	double cpu_med, parse_cpu_med, mrc_cpu_med;
	struct kvt_replay_stats st; /* of the main replay */
	struct timed tm;            /* of the last pass */
	struct kvt_mrc *mrc;        /* fed by the main replay of the last pass */
	double mrc_s[100], mrc_med; /* replay time of the passes with it */
	double mrc_ratio_med;       /* median over repetitions of with / without */
	double mrc_hit[MAX_CAPS];   /* its curve at c->mrc_caps */
	struct kvt_mrc_stats mrc_st;
};

/* The capacities: the MRC's (default the 1-2-5 ladder from 1,000 to
 * 1,000,000), the sweep's (default the MRC's and infinite), and the number of
 * replays a pass feeds. */
static void plan_sweep(struct cfg *c, struct run *run)
{
	run->n = 1;
	if (c->mrc && !c->n_mrc_caps)
		ladder_caps(c->mrc_caps, &c->n_mrc_caps);
	if (!c->sweep)
		return;
	if (!c->n_caps) {
		if (c->mrc) {
			memcpy(c->caps, c->mrc_caps, (size_t)c->n_mrc_caps * sizeof(*c->caps));
			c->n_caps = c->n_mrc_caps;
		} else {
			ladder_caps(c->caps, &c->n_caps);
		}
		if (c->n_caps < MAX_CAPS)
			c->caps[c->n_caps++] = KVT_REPLAY_INFINITE;
	}
	run->n_sweep = (size_t)c->n_policies * (size_t)c->n_caps;
	run->n += run->n_sweep;
	run->reps = 1;
}

static int alloc_run(struct cfg *c, struct run *run)
{
	run->rs = calloc(run->n, sizeof(*run->rs));
	run->pts = calloc(run->n_sweep ? run->n_sweep : 1, sizeof(*run->pts));
	if (!run->rs || !run->pts)
		return -ENOMEM;
	if (run->n_sweep && c->have_est) {
		c->sweep_est = malloc(run->n_sweep * sizeof(*c->sweep_est));
		if (!c->sweep_est)
			return -ENOMEM;
		for (size_t i = 0; i < run->n_sweep; i++)
			c->sweep_est[i] = c->est; /* no request added yet */
	}
	return 0;
}

/* Fresh replays for one pass: the main one (feeding a fresh estimator when
 * with_mrc), then the sweep points. */
static int open_replays(const struct cfg *c, struct run *run, bool with_mrc)
{
	int err = 0;

	close_all(run->rs, run->n);
	memset(run->rs, 0, run->n * sizeof(*run->rs));
	kvt_mrc_close(run->mrc);
	run->mrc = NULL;
	if (with_mrc) {
		err = kvt_mrc_open(&c->mrc_opts, &run->mrc);
		if (err) {
			fprintf(stderr, "trace: --mrc: %s\n", kvt_strerror(err));
			return err;
		}
	}
	for (size_t i = 0; i < run->n && !err; i++) {
		struct kvt_replay_opts o = c->ro;

		o.mrc = i == 0 ? run->mrc : NULL;
		if (i > 0) {
			struct kvt_sweep_point *p = &run->pts[i - 1];

			p->policy = c->policies[(i - 1) / (size_t)c->n_caps];
			p->tier = c->sweep_tier;
			p->capacity = c->caps[(i - 1) % (size_t)c->n_caps];
			o.policy = p->policy;
			o.capacity[p->tier] = p->capacity;
			o.ideal = false;
		}
		err = kvt_replay_open(&o, &run->rs[i]);
	}
	if (err)
		fprintf(stderr, "trace: replay: %s\n", kvt_strerror(err));
	return err;
}

/* One pass; its times into *replay_s, *cpu (and *total_s). */
static int timed_pass(struct cfg *c, struct run *run, bool with_mrc, bool first,
		      double *replay_s, double *cpu, double *total_s)
{
	int err = open_replays(c, run, with_mrc);

	if (!err)
		err = replay_pass(c, run->rs, run->n, first, &run->tm);
	if (!err && with_mrc) {
		err = kvt_mrc_curve(run->mrc, c->mrc_caps, (size_t)c->n_mrc_caps, run->mrc_hit);
		kvt_mrc_stats(run->mrc, &run->mrc_st);
	}
	if (err)
		return err;
	*replay_s = run->tm.replay_s;
	*cpu = run->tm.cpu_s;
	if (total_s)
		*total_s = run->tm.total_s;
	return 0;
}

/* Every repetition: a replay pass, then (a file, no sweep) the parse-only
 * reference pass. With --mrc and no sweep, each repetition also replays with
 * the estimator, first or second in turn, for its cost; the estimate is that
 * of the last pass with it. */
static int time_reps(struct cfg *c, struct run *run)
{
	for (int rep = 0; rep < run->reps; rep++) {
		bool mrc_first = c->mrc && (c->sweep || rep % 2);
		int err = timed_pass(c, run, mrc_first, rep == 0, &run->rep_s[rep], &run->cpu_s[rep],
				     &run->tot_s[rep]);

		if (!err && mrc_first) {
			run->mrc_s[rep] = run->rep_s[rep];
			run->mrc_cpu_s[rep] = run->cpu_s[rep];
		}
		if (!err && c->mrc && !c->sweep)
			err = timed_pass(c, run, !mrc_first, false,
					 mrc_first ? &run->rep_s[rep] : &run->mrc_s[rep],
					 mrc_first ? &run->cpu_s[rep] : &run->mrc_cpu_s[rep],
					 mrc_first ? &run->tot_s[rep] : NULL);
		if (!err && run->seekable && !c->sweep)
			err = parse_pass(c, &run->parse_s[rep], &run->parse_cpu_s[rep]);
		if (err)
			return err;
	}
	return 0;
}

/* Medians of the timings, the main replay's counters and each sweep point's,
 * with its prefill estimate. */
static void collect(const struct cfg *c, struct run *run)
{
	size_t reps = (size_t)run->reps;

	if (c->mrc && !c->sweep) {
		/* paired before the medians sort them: the two passes of one
		 * repetition ran back to back, under the same load */
		double ratio[100];

		for (size_t i = 0; i < reps; i++)
			ratio[i] = run->mrc_s[i] / run->rep_s[i];
		run->mrc_ratio_med = kvt_bench_median(ratio, reps);
	}
	run->replay_med = kvt_bench_median(run->rep_s, reps);
	run->total_med = kvt_bench_median(run->tot_s, reps);
	run->parse_med = run->seekable && !c->sweep ? kvt_bench_median(run->parse_s, reps) : 0;
	run->mrc_med = c->mrc && !c->sweep ? kvt_bench_median(run->mrc_s, reps) : 0;
	run->cpu_med = kvt_bench_median(run->cpu_s, reps);
	run->parse_cpu_med = run->parse_med > 0 ? kvt_bench_median(run->parse_cpu_s, reps) : 0;
	run->mrc_cpu_med = run->mrc_med > 0 ? kvt_bench_median(run->mrc_cpu_s, reps) : 0;
	kvt_replay_stats(run->rs[0], &run->st);
	for (size_t i = 0; i < run->n_sweep; i++) {
		struct kvt_sweep_point *p = &run->pts[i];

		kvt_replay_stats(run->rs[i + 1], &p->st);
		if (c->sweep_est && c->sweep_est[i].requests) {
			const struct kvt_prefill_est *e = &c->sweep_est[i];

			p->has_prefill = true;
			p->prefill_saved_fraction =
				e->no_cache_s > 0 ? (e->no_cache_s - e->with_cache_s) / e->no_cache_s : 0;
			p->mean_ttft_s = e->with_cache_s / (double)e->requests;
		}
	}
}

/* Block lookups (or requests) per second in the replay, every replay of a
 * pass counted. */
static double per_replay_s(const struct run *run, uint64_t count)
{
	return run->replay_med > 0 ? (double)count * (double)run->n / run->replay_med : 0;
}

/* The exact LRU hit rate of the sweep at capacity cap of the swept tier, -1
 * when the sweep has no such point. */
static double exact_lru(const struct cfg *c, const struct run *run, uint64_t cap)
{
	for (size_t i = 0; i < run->n_sweep; i++) {
		const struct kvt_sweep_point *p = &run->pts[i];

		if (!strcmp(p->policy, "lru") && p->capacity == cap && p->tier == c->sweep_tier)
			return kvt_trace_rate(p->st.hit_blocks, p->st.blocks);
	}
	return -1;
}

/* The largest |sampled - exact| over the capacities that have both. */
static double mrc_max_error(const struct cfg *c, const struct run *run)
{
	double worst = -1;

	for (int i = 0; i < c->n_mrc_caps; i++) {
		double e = exact_lru(c, run, c->mrc_caps[i]);

		if (e >= 0)
			worst = fmax(worst, fabs(run->mrc_hit[i] - e));
	}
	return worst;
}

static json_t *mrc_json(const struct cfg *c, const struct run *run)
{
	const struct kvt_mrc_stats *ms = &run->mrc_st;
	json_t *a = json_array(), *est;
	double worst = mrc_max_error(c, run);

	for (int i = 0; a && i < c->n_mrc_caps; i++) {
		uint64_t cap = c->mrc_caps[i];
		double e = exact_lru(c, run, cap);
		json_t *pt = json_pack("{s:o, s:o, s:f}", "capacity_blocks",
				       cap == KVT_REPLAY_INFINITE ? json_null() : json_integer((json_int_t)cap),
				       "capacity_bytes",
				       cap == KVT_REPLAY_INFINITE ? json_null()
						: json_integer((json_int_t)(cap * c->ro.block_bytes)),
				       "sampled_hit_rate", run->mrc_hit[i]);

		if (pt && e >= 0)
			json_object_set_new(pt, "exact_hit_rate", json_real(e));
		if (!pt || json_array_append_new(a, pt)) {
			json_decref(a);
			return NULL;
		}
	}
	est = json_pack("{s:f, s:f, s:I, s:I, s:I, s:I, s:I, s:b}",
			"sampling_rate", ms->rate, "max_rate", c->mrc_opts.max_rate,
			"sampled_keys", (json_int_t)ms->sampled_keys,
			"sampled_refs", (json_int_t)ms->sampled_refs, "refs", (json_int_t)ms->refs,
			"refs_with_tick", (json_int_t)ms->known_prev,
			"memory_bytes", (json_int_t)ms->memory_bytes, "use_ticks", c->mrc_opts.use_ticks);
	if (est && worst >= 0)
		json_object_set_new(est, "max_abs_error", json_real(worst));
	if (est && run->mrc_med > 0) {
		/* the same replay with and without the estimator, same passes */
		json_object_set_new(est, "replay_s", json_real(run->mrc_med));
		json_object_set_new(est, "replay_s_without", json_real(run->replay_med));
		json_object_set_new(est, "overhead", json_real(run->mrc_ratio_med - 1));
	}
	if (est && run->mrc_cpu_med > 0 && run->cpu_med > run->parse_cpu_med) {
		/* CPU time, whatever else the machine runs: the passes' difference
		 * against the replay's own share (the pass less the parse pass) */
		json_object_set_new(est, "cpu_overhead",
				    json_real((run->mrc_cpu_med - run->cpu_med) /
					      (run->cpu_med - run->parse_cpu_med)));
		json_object_set_new(est, "cpu_ns_per_ref",
				    json_real(1e9 * (run->mrc_cpu_med - run->cpu_med) /
					      (double)(ms->refs ? ms->refs : 1)));
	}
	if (!a || !est) {
		json_decref(a);
		json_decref(est);
		return NULL;
	}
	return json_pack("{s:o, s:o}", "curve", a, "estimator", est);
}

static json_t *policies_json(const struct cfg *c, const struct policy_row *rows, int n)
{
	json_t *a = json_array();

	for (int i = 0; a && i < n; i++) {
		const struct kvt_replay_stats *st = &rows[i].st;
		const struct kvt_replay_tier_stats *ssd = &st->tier[KVT_TIER_SSD];
		json_t *row = json_pack("{s:s, s:f, s:f, s:f, s:f, s:f}", "name", rows[i].name,
					"block_hit_rate", kvt_trace_rate(st->hit_blocks, st->blocks),
					"token_hit_rate", kvt_trace_rate(st->hit_tokens, st->tokens),
					"ideal_block_hit_rate",
					kvt_trace_rate(st->ideal_hit_blocks, st->blocks),
					"replay_s", rows[i].replay_s,
					"lookups_per_s",
					rows[i].replay_s > 0 ? (double)st->blocks / rows[i].replay_s : 0);

		if (row && c->n_admissions > 1 && ssd->capacity) {
			json_object_set_new(row, "ssd_bytes_written", json_integer((json_int_t)ssd->bytes_in));
			json_object_set_new(row, "ssd_blocks_written",
					    json_integer((json_int_t)(ssd->inserted + ssd->demoted_in +
								      ssd->promoted_in)));
			json_object_set_new(row, "ssd_refused", json_integer((json_int_t)ssd->refused));
			json_object_set_new(row, "ssd_block_hit_rate",
					    json_real(kvt_trace_rate(ssd->hit_blocks, st->blocks)));
		}
		if (!row || json_array_append_new(a, row)) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

static int report_json(const struct cfg *c, const struct run *run,
		       const struct policy_row *rows, int n_rows)
{
	const struct kvt_replay_stats *st = &run->st;
	json_t *j = kvt_trace_report_json(&c->ro, st);
	int err;

	if (!j)
		return -ENOMEM;
	if (n_rows) {
		json_t *a = policies_json(c, rows, n_rows);

		if (!a) {
			json_decref(j);
			return -ENOMEM;
		}
		json_object_set_new(j, c->n_admissions > 1 ? "admissions" : "policies", a);
	}
	json_object_set_new(j, "trace", json_string(c->trace));
	json_object_set_new(j, "mode", json_string("accounting"));
	json_object_set_new(j, "bad_lines", json_integer((json_int_t)run->tm.bad_lines));
	json_object_set_new(j, "reps", json_integer(run->reps));
	json_object_set_new(j, "replays_per_pass", json_integer((json_int_t)run->n));
	json_object_set_new(j, "replay_s", json_real(run->replay_med));
	json_object_set_new(j, "total_s", json_real(run->total_med));
	json_object_set_new(j, "lookups_per_s", json_real(per_replay_s(run, st->blocks)));
	json_object_set_new(j, "requests_per_s", json_real(per_replay_s(run, st->requests)));
	json_object_set_new(j, "end_to_end_lookups_per_s",
			    json_real(run->total_med > 0 ? (double)st->blocks / run->total_med : 0));
	if (run->parse_med > 0) {
		json_object_set_new(j, "parse_s", json_real(run->parse_med));
		json_object_set_new(j, "parse_lookups_per_s",
				    json_real((double)st->blocks / run->parse_med));
		/* how long the replay takes per block, against reading it */
		json_object_set_new(j, "replay_over_parse",
				    json_real(run->replay_med / run->parse_med));
	}
	json_object_set_new(j, "prefill", c->have_est ? kvt_prefill_est_json(&c->est) : json_null());
	if (run->n_sweep)
		json_object_set_new(j, "sweep", kvt_trace_sweep_json(run->pts, run->n_sweep));
	if (c->mrc) {
		json_t *m = mrc_json(c, run);

		if (!m) {
			json_decref(j);
			return -ENOMEM;
		}
		json_object_set(j, "mrc", json_object_get(m, "curve"));
		json_object_set(j, "mrc_estimator", json_object_get(m, "estimator"));
		json_decref(m);
	}
	err = print_json(j);
	json_decref(j);
	return err;
}

static void mrc_text(const struct cfg *c, const struct run *run)
{
	const struct kvt_mrc_stats *ms = &run->mrc_st;
	double worst = mrc_max_error(c, run);
	char mem[32];

	printf("\nLRU hit rate by %s capacity, sampled (%s: rate %.4g, %" PRIu64 " blocks sampled, "
	       "%" PRIu64 " of %" PRIu64 " references, %s)%s\n\n%12s %10s", kvt_tier_name(c->sweep_tier),
	       c->mrc_opts.use_ticks ? "with the records' ticks" : "sample alone", ms->rate,
	       ms->sampled_keys, ms->sampled_refs, ms->refs,
	       kvt_fmt_bytes(ms->memory_bytes, mem, sizeof(mem)),
	       worst >= 0 ? ", beside the exact sweep" : "", "capacity", "sampled");
	if (worst >= 0)
		printf(" %10s %10s", "exact", "error");
	printf("\n");
	for (int i = 0; i < c->n_mrc_caps; i++) {
		double e = exact_lru(c, run, c->mrc_caps[i]);
		char cap[32];

		if (c->mrc_caps[i] == KVT_REPLAY_INFINITE)
			snprintf(cap, sizeof(cap), "inf");
		else
			snprintf(cap, sizeof(cap), "%" PRIu64, c->mrc_caps[i]);
		printf("%12s %10.4f", cap, run->mrc_hit[i]);
		if (e >= 0)
			printf(" %10.4f %+10.4f", e, run->mrc_hit[i] - e);
		printf("\n");
	}
	if (worst >= 0)
		printf("largest error %.4f\n", worst);
	if (run->mrc_med > 0)
		printf("replay with the estimator %.3f s, without %.3f s (median of %d each): "
		       "%+.1f%% (median of the repetitions' ratios)\n", run->mrc_med, run->replay_med,
		       run->reps, 100.0 * (run->mrc_ratio_med - 1));
	if (run->mrc_cpu_med > 0 && run->cpu_med > run->parse_cpu_med)
		printf("CPU time: %+.1f%% of the replay's own (%.1f ns per reference)\n",
		       100.0 * (run->mrc_cpu_med - run->cpu_med) / (run->cpu_med - run->parse_cpu_med),
		       1e9 * (run->mrc_cpu_med - run->cpu_med) / (double)(ms->refs ? ms->refs : 1));
}

static void policies_text(const struct cfg *c, const struct policy_row *rows, int n)
{
	bool adm = c->n_admissions > 1;

	printf("\n%-12s %10s %10s %14s", adm ? "admission" : "policy", "block hit", "token hit",
	       "lookups/s");
	if (adm)
		printf(" %10s %16s %12s", "ssd hit", "ssd bytes in", "refused");
	printf("\n");
	for (int i = 0; i < n; i++) {
		const struct kvt_replay_stats *st = &rows[i].st;
		const struct kvt_replay_tier_stats *ssd = &st->tier[KVT_TIER_SSD];

		printf("%-12s %10.4f %10.4f %14.0f", rows[i].name,
		       kvt_trace_rate(st->hit_blocks, st->blocks),
		       kvt_trace_rate(st->hit_tokens, st->tokens),
		       rows[i].replay_s > 0 ? (double)st->blocks / rows[i].replay_s : 0);
		if (adm)
			printf(" %10.4f %16" PRIu64 " %12" PRIu64,
			       kvt_trace_rate(ssd->hit_blocks, st->blocks), ssd->bytes_in, ssd->refused);
		printf("\n");
	}
}

static void report_text(const struct cfg *c, const struct run *run,
			const struct policy_row *rows, int n_rows)
{
	const struct kvt_replay_stats *st = &run->st;
	const struct kvt_prefill_est *e = &c->est;

	kvt_trace_report_text(stdout, &c->ro, st);
	printf("\nreplay %.3f s (median of %d), %.0f block lookups/s, %.0f requests/s in the "
	       "replay; %.3f s end to end", run->replay_med, run->reps,
	       per_replay_s(run, st->blocks), per_replay_s(run, st->requests), run->total_med);
	if (run->parse_med > 0)
		printf("; parsing alone %.3f s (replay/parse %.2f)", run->parse_med,
		       run->replay_med / run->parse_med);
	printf("\n");
	if (run->tm.bad_lines)
		printf("%" PRIu64 " malformed lines skipped\n", run->tm.bad_lines);
	if (c->have_est && e->requests)
		printf("prefill (%s on %s, MFU %.2f): %.1f s without the cache, %.1f s with it "
		       "(%.1f%% saved); mean TTFT %.3f s -> %.3f s\n", e->model.name, e->gpu.name,
		       e->mfu, e->no_cache_s, e->with_cache_s,
		       e->no_cache_s > 0 ? 100.0 * (e->no_cache_s - e->with_cache_s) / e->no_cache_s
					 : 0.0,
		       e->no_cache_s / (double)e->requests, e->with_cache_s / (double)e->requests);
	if (run->n_sweep) {
		printf("\n");
		kvt_trace_sweep_text(stdout, run->pts, run->n_sweep);
	}
	if (n_rows)
		policies_text(c, rows, n_rows);
	if (c->mrc)
		mrc_text(c, run);
}

static int write_svg(const struct cfg *c, const struct run *run)
{
	struct kvt_trace_series mrc = {
		.name = "LRU, sampled (--mrc)", .tier = c->sweep_tier, .cap = c->mrc_caps,
		.rate = run->mrc_hit, .n = (size_t)c->n_mrc_caps,
	};
	FILE *f = fopen(c->svg, "we");
	int err;

	if (!f) {
		err = -errno;
		fprintf(stderr, "trace: %s: %s\n", c->svg, kvt_strerror(err));
		return err;
	}

	err = kvt_trace_sweep_svg(f, run->pts, run->n_sweep, c->mrc ? &mrc : NULL,
				  "kvtier trace replay: hit rate by capacity");
	if (fclose(f) && !err)
		err = -EIO;
	return err;
}

static void free_run(struct cfg *c, struct run *run)
{
	if (run->rs)
		close_all(run->rs, run->n);
	kvt_mrc_close(run->mrc);
	free(run->rs);
	free(run->pts);
	free(c->sweep_est);
	c->sweep_est = NULL;
	memset(run, 0, sizeof(*run));
}

/* Replay, time and collect, with c->ro.policy. */
static int run_one(struct cfg *c, struct run *run)
{
	int err;

	run->seekable = strcmp(c->trace, "-") != 0;
	run->reps = run->seekable ? c->reps : 1;
	plan_sweep(c, run);
	err = alloc_run(c, run);
	if (!err)
		err = time_reps(c, run);
	if (!err)
		collect(c, run);
	return err;
}

/* Several policies (or SSD admission rules) and no sweep: each one replayed
 * and timed in turn (the first one is the main run, with the prefill
 * estimate and the MRC); rows[i] gets the i-th one's counters and replay
 * time. */
static int run_each_policy(struct cfg *c, const struct run *main_run, struct policy_row *rows)
{
	bool have_est = c->have_est, mrc = c->mrc, adm = c->n_admissions > 1;
	const char *const *names = adm ? c->admissions : c->policies;
	int n = adm ? c->n_admissions : c->n_policies, err = 0;

	rows[0] = (struct policy_row){ names[0], main_run->st, main_run->replay_med };
	c->have_est = false;
	c->mrc = false;
	for (int i = 1; i < n && !err; i++) {
		struct run run = { 0 };

		if (adm)
			c->ro.ssd_admission = names[i];
		else
			c->ro.policy = names[i];
		err = run_one(c, &run);
		if (!err)
			rows[i] = (struct policy_row){ names[i], run.st, run.replay_med };
		free_run(c, &run);
	}
	c->ro.policy = c->policies[0];
	c->ro.ssd_admission = c->n_admissions ? c->admissions[0] : NULL;
	c->have_est = have_est;
	c->mrc = mrc;
	return err;
}

static int run_replay(struct cfg *c)
{
	struct run run = { 0 };
	struct policy_row rows[MAX_POLICIES];
	int n_rows = 0, err;

	if (!c->sweep)
		n_rows = c->n_admissions > 1 ? c->n_admissions : c->n_policies > 1 ? c->n_policies : 0;
	c->ro.policy = c->policies[0];
	c->ro.ssd_admission = c->n_admissions ? c->admissions[0] : NULL;
	err = run_one(c, &run);
	if (!err && n_rows)
		err = run_each_policy(c, &run, rows);
	if (err)
		goto out;
	if (c->json)
		err = report_json(c, &run, rows, n_rows);
	else
		report_text(c, &run, rows, n_rows);
	if (!err && c->svg && (run.n_sweep || c->mrc))
		err = write_svg(c, &run);
out:
	free_run(c, &run);
	return err;
}

static int run_payload(struct cfg *c)
{
	struct kvt_payload_opts o;
	struct kvt_payload *p = NULL;
	struct kvt_payload_stats st;
	struct kvt_trace_reader *r = NULL;
	struct kvt_trace_req req;
	uint64_t in_replay = 0;
	int err;

	kvt_payload_opts_init(&o, sizeof(o));
	o.policy = c->policies[0];
	o.block_tokens = c->ro.block_tokens;
	o.reuse_class = c->ro.reuse_class;
	if (c->payload_block_bytes)
		o.block_bytes = c->payload_block_bytes;
	if (c->ro.capacity[KVT_TIER_DRAM] && c->ro.capacity[KVT_TIER_DRAM] != KVT_REPLAY_INFINITE)
		o.dram_blocks = c->ro.capacity[KVT_TIER_DRAM];
	o.ssd_dir = c->ssd_dir;
	if (c->ro.capacity[KVT_TIER_SSD] != KVT_REPLAY_INFINITE)
		o.ssd_blocks = c->ro.capacity[KVT_TIER_SSD];
	if (o.ssd_dir && !o.ssd_blocks) {
		fprintf(stderr, "trace: --ssd-dir needs a finite --ssd-blocks\n");
		return -EINVAL;
	}
	err = kvt_payload_open(&o, &p);
	if (err) {
		fprintf(stderr, "trace: payload store: %s\n", kvt_strerror(err));
		return err;
	}
	err = open_reader(c, true, true, &r);
	if (err)
		goto out;
	while ((err = kvt_trace_reader_next(r, &req)) == 1) {
		uint64_t a = kvt_now_ns();

		err = kvt_payload_request(p, &req);
		in_replay += kvt_now_ns() - a;
		if (err < 0)
			break;
	}
	if (err < 0) {
		fprintf(stderr, "trace: payload replay: %s\n", kvt_strerror(err));
		goto out;
	}
	err = kvt_payload_stats(p, &st);
	if (err)
		goto out;
	{
		double s = (double)in_replay / 1e9;
		json_t *hits = json_object(), *store = json_object(), *j;

		for (int t = KVT_TIER_HBM; t < KVT_TIER_COUNT; t++) {
			const struct kvt_tier_stats *ts = &st.store.tier[t];

			if (!ts->present)
				continue;
			json_object_set_new(hits, kvt_tier_name(t),
					    json_integer((json_int_t)st.tier_hits[t]));
			json_object_set_new(store, kvt_tier_name(t),
					    json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}",
						      "capacity_bytes", (json_int_t)ts->capacity_bytes,
						      "used_bytes", (json_int_t)ts->used_bytes,
						      "evictions", (json_int_t)ts->evictions,
						      "bytes_in", (json_int_t)ts->bytes_in,
						      "bytes_out", (json_int_t)ts->bytes_out,
						      "errors", (json_int_t)ts->errors));
		}
		j = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:f, s:f, s:I, s:I, s:I, "
			      "s:I, s:I, s:I, s:f, s:f, s:o, s:o, s:I}",
			      "trace", c->trace, "mode", "payload", "policy", o.policy,
			      "block_bytes", (json_int_t)o.block_bytes,
			      "dram_blocks", (json_int_t)o.dram_blocks,
			      "requests", (json_int_t)st.requests,
			      "blocks", (json_int_t)st.blocks,
			      "block_hit_rate", kvt_trace_rate(st.hit_blocks, st.blocks),
			      "token_hit_rate", kvt_trace_rate(st.hit_tokens, st.tokens),
			      "puts", (json_int_t)st.puts,
			      "put_exists", (json_int_t)st.put_exists,
			      "put_nospace", (json_int_t)st.put_nospace,
			      "bad_bytes", (json_int_t)st.bad_bytes,
			      "bytes_put", (json_int_t)st.bytes_put,
			      "bytes_got", (json_int_t)st.bytes_got,
			      "replay_s", s,
			      "lookups_per_s", s > 0 ? (double)st.blocks / s : 0.0,
			      "hits", hits, "store_tiers", store,
			      "bad_lines", (json_int_t)kvt_trace_reader_bad_lines(r));

		if (!j) {
			err = -ENOMEM;
			goto out;
		}
		if (c->json) {
			err = print_json(j);
		} else {
			printf("payload replay, policy %s, %" PRIu64 " blocks of %" PRIu64 " bytes in DRAM\n"
			       "requests %" PRIu64 ", block hit rate %.4f, token hit rate %.4f\n"
			       "puts %" PRIu64 ", wrong bytes %" PRIu64 ", %.0f block lookups/s\n",
			       o.policy, o.dram_blocks, o.block_bytes, st.requests,
			       kvt_trace_rate(st.hit_blocks, st.blocks),
			       kvt_trace_rate(st.hit_tokens, st.tokens), st.puts, st.bad_bytes,
			       s > 0 ? (double)st.blocks / s : 0.0);
		}
		json_decref(j);
		if (!err && st.bad_bytes)
			err = -EIO; /* wrong bytes served: the run fails */
	}
out:
	kvt_trace_reader_close(r);
	kvt_payload_close(p);
	return err;
}

/* A counter of the daemon's STATS: root.obj[.sub].key, 0 when absent. */
static json_int_t stat_of(json_t *root, const char *obj, const char *sub, const char *key)
{
	json_t *o = json_object_get(root, obj);

	if (sub)
		o = json_object_get(o, sub);
	return json_integer_value(json_object_get(o, key));
}

/* The trace through a running kvtierd (--socket): what an engine sees, and
 * what the daemon's tiers did with it. */
static int run_daemon(struct cfg *c)
{
	struct kvt_daemon_replay_opts o;
	struct kvt_daemon_replay *d = NULL;
	struct kvt_daemon_replay_stats st;
	struct kvt_trace_reader *r = NULL;
	struct kvt_trace_req req;
	json_t *ds = NULL, *hits, *j;
	char *text = NULL;
	uint64_t t0;
	double s;
	int err;

	kvt_daemon_replay_opts_init(&o, sizeof(o));
	o.socket = c->socket;
	o.token = c->token;
	o.reuse_class = c->ro.reuse_class;
	if (c->payload_block_bytes)
		o.block_bytes = c->payload_block_bytes;
	err = kvt_daemon_replay_open(&o, &d);
	if (err) {
		fprintf(stderr, "trace: kvtierd at %s: %s\n", c->socket, kvt_strerror(err));
		return err;
	}
	err = open_reader(c, true, true, &r);
	if (err)
		goto out;
	t0 = kvt_now_ns();
	while ((err = kvt_trace_reader_next(r, &req)) == 1) {
		err = kvt_daemon_replay_request(d, &req);
		if (err < 0)
			break;
	}
	s = (double)(kvt_now_ns() - t0) / 1e9;
	if (err < 0) {
		fprintf(stderr, "trace: daemon replay: %s\n", kvt_strerror(err));
		goto out;
	}
	kvt_daemon_replay_stats(d, &st);
	err = kvt_daemon_replay_settled_stats(d, &text);
	if (err == -ETIMEDOUT)
		fprintf(stderr, "trace: the daemon's demoter did not settle; its last counters\n");
	else if (err)
		goto out;
	ds = text ? json_loads(text, 0, NULL) : NULL;
	if (!ds) {
		err = -EPROTO;
		goto out;
	}
	hits = json_object();
	for (int t = KVT_TIER_HBM; hits && t < KVT_TIER_COUNT; t++)
		if (st.tier_hits[t])
			json_object_set_new(hits, kvt_tier_name(t),
					    json_integer((json_int_t)st.tier_hits[t]));
	j = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:f, s:o, s:I, s:I, s:I, s:I, s:f, "
		      "s:I, s:I, s:I, s:O, s:O}",
		      "trace", c->trace, "mode", "daemon", "socket", c->socket,
		      "block_bytes", (json_int_t)o.block_bytes,
		      "requests", (json_int_t)st.requests, "blocks", (json_int_t)st.blocks,
		      "block_hit_rate", kvt_trace_rate(st.hit_blocks, st.blocks), "hits", hits,
		      "loaded", (json_int_t)st.loaded, "load_short", (json_int_t)st.load_short,
		      "saved", (json_int_t)st.saved, "save_short", (json_int_t)st.save_short,
		      "replay_s", s,
		      "ssd_bytes_in", stat_of(ds, "tiers", "ssd", "bytes_in"),
		      "ssd_admission_refused", stat_of(ds, "store", NULL, "ssd_admission_refused"),
		      "ssd_admission_refused_bytes",
		      stat_of(ds, "store", NULL, "ssd_admission_refused_bytes"),
		      "tiers", json_object_get(ds, "tiers"), "store", json_object_get(ds, "store"));
	if (!j) {
		err = -ENOMEM;
		goto out;
	}
	if (c->json) {
		err = print_json(j);
	} else {
		printf("daemon replay through %s, %" PRIu64 " requests, blocks of %" PRIu64
		       " bytes, %.1f s\n"
		       "block hit rate %.4f (dram %" PRIu64 ", ssd %" PRIu64 " blocks); loaded %" PRIu64
		       " (%" PRIu64 " gone by the LOAD), saved %" PRIu64 " (%" PRIu64 " not stored)\n"
		       "ssd bytes in %lld, refused by the admission rule %lld blocks, %lld bytes\n",
		       c->socket, st.requests, o.block_bytes, s,
		       kvt_trace_rate(st.hit_blocks, st.blocks), st.tier_hits[KVT_TIER_DRAM],
		       st.tier_hits[KVT_TIER_SSD], st.loaded, st.load_short, st.saved,
		       st.save_short, (long long)stat_of(ds, "tiers", "ssd", "bytes_in"),
		       (long long)stat_of(ds, "store", NULL, "ssd_admission_refused"),
		       (long long)stat_of(ds, "store", NULL, "ssd_admission_refused_bytes"));
	}
	json_decref(j);
out:
	json_decref(ds);
	free(text);
	kvt_trace_reader_close(r);
	kvt_daemon_replay_close(d);
	return err;
}

static int run_generate(struct cfg *c)
{
	FILE *f = !strcmp(c->out, "-") ? stdout : fopen(c->out, "we");
	int err;

	if (!f) {
		err = -errno;
		fprintf(stderr, "trace: %s: %s\n", c->out, kvt_strerror(err));
		return err;
	}
	c->synth.requests = c->generate;
	err = kvt_synth_write(&c->synth, f);
	if (f != stdout && fclose(f) && !err)
		err = -EIO;
	if (err)
		fprintf(stderr, "trace: generate: %s\n", kvt_strerror(err));
	return err;
}

static int run_convert(struct cfg *c)
{
	struct kvt_convert_opts o;
	struct kvt_convert_stats st;
	FILE *in = !strcmp(c->convert, "-") ? stdin : fopen(c->convert, "re"), *out;
	int err;

	if (!in) {
		err = -errno;
		fprintf(stderr, "trace: %s: %s\n", c->convert, kvt_strerror(err));
		return err;
	}
	out = !strcmp(c->out, "-") ? stdout : fopen(c->out, "we");
	if (!out) {
		err = -errno;
		fprintf(stderr, "trace: %s: %s\n", c->out, kvt_strerror(err));
		goto out_in;
	}
	kvt_convert_opts_init(&o, sizeof(o));
	o.block_tokens = c->ro.block_tokens;
	o.skip_bad = c->skip_bad;
	o.label = c->convert;
	err = kvt_trace_convert(in, out, &o, &st);
	if (err)
		fprintf(stderr, "trace: convert: %s\n", kvt_strerror(err));
	else if (out != stdout || c->json)
		fprintf(stderr, "converted %" PRIu64 " requests, %" PRIu64 " blocks (%" PRIu64
			" distinct), %" PRIu64 " malformed lines\n", st.requests, st.blocks,
			st.distinct_blocks, st.bad_lines);
	if (out != stdout && fclose(out) && !err)
		err = -EIO;
out_in:
	if (in != stdin)
		fclose(in);
	return err;
}

int kvt_bench_trace_main(int argc, char **argv)
{
	struct cfg c = { .reps = 3, .sweep_tier = KVT_TIER_DRAM, .kv_bytes_per_token = 147456,
			 .model = "Qwen3-8B", .gpu = "H100-SXM", .mfu = 0.5 };
	char tmp[] = "/tmp/kvtier-trace.XXXXXX";
	bool made_tmp = false;
	int err;

	kvt_synth_opts_init(&c.synth, sizeof(c.synth));
	kvt_replay_opts_init(&c.ro, sizeof(c.ro));
	kvt_mrc_opts_init(&c.mrc_opts, sizeof(c.mrc_opts));
	err = parse_args(argc, argv, &c);
	if (err == 1) {
		usage(stdout);
		return 0;
	}
	if (err) {
		usage(stderr);
		return 2;
	}
	if (!c.n_policies)
		split_policies(&c, c.sweep ? "all" : "lru");
	if ((c.generate || c.convert) && !c.out) {
		fprintf(stderr, "trace: --generate and --convert need --out FILE\n");
		return 2;
	}
	if (c.n_admissions > 1 && (c.n_policies > 1 || c.sweep)) {
		fprintf(stderr, "trace: several --ssd-admission rules with several policies or "
				"--sweep: compare one thing at a time\n");
		return 2;
	}
	if (c.generate)
		return run_generate(&c) ? 1 : 0;
	if (c.convert)
		return run_convert(&c) ? 1 : 0;
	if (resolve_capacities(&c))
		return 2;
	if (!c.trace) {
		int fd = mkstemp(tmp);
		FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;

		if (!f) {
			fprintf(stderr, "trace: temporary trace: %s\n", strerror(errno));
			return 1;
		}
		made_tmp = true;
		c.synth.requests = c.synthetic ? c.synthetic : 100000;
		err = kvt_synth_write(&c.synth, f);
		if (fclose(f) && !err)
			err = -EIO;
		if (err) {
			fprintf(stderr, "trace: generate: %s\n", kvt_strerror(err));
			goto out;
		}
		c.trace = tmp;
	}
	err = c.socket ? run_daemon(&c) : c.payload ? run_payload(&c) : run_replay(&c);
out:
	if (made_tmp)
		unlink(tmp);
	return err ? 1 : 0;
}
