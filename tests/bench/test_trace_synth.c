/* SPDX-License-Identifier: Apache-2.0 */
/* The synthetic generator: same seed same bytes, a trace the reader accepts
 * in timestamp order, and sharing that follows its knobs. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bench/trace/synth.h"
#include "trace_util.h"

static char *generate(const struct kvt_synth_opts *o, size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);

	assert_non_null(f);
	assert_int_equal(kvt_synth_write(o, f), 0);
	assert_int_equal(fclose(f), 0);
	return buf;
}

static void same_seed_same_trace(void **state)
{
	struct kvt_synth_opts o;
	size_t la, lb, lc;
	char *a, *b, *c;

	kvt_synth_opts_init(&o, sizeof(o));
	o.requests = 500;
	o.seed = 42;
	a = generate(&o, &la);
	b = generate(&o, &lb);
	o.seed = 43;
	c = generate(&o, &lc);
	assert_int_equal(la, lb);
	assert_memory_equal(a, b, la);
	assert_true(la != lc || memcmp(a, c, la));
	free(a);
	free(b);
	free(c);
}

/* Replay a generated trace; returns its infinite-capacity block hit rate. */
static double ideal_rate(const struct kvt_synth_opts *o, uint64_t *requests)
{
	size_t len;
	char *text = generate(o, &len), *path = trace_file("synth", text);
	struct kvt_replay_opts ro;
	struct kvt_replay_stats st;

	one_tier(&ro, "lru", KVT_REPLAY_INFINITE);
	ro.block_tokens = o->block_tokens;
	/* the reader rejects a line out of timestamp order: this checks it too */
	assert_int_equal(replay_file(path, &ro, &st), 0);
	*requests = st.requests;
	trace_file_remove(path);
	free(text);
	return st.blocks ? (double)st.ideal_hit_blocks / (double)st.blocks : 0;
}

static void sharing_follows_the_knobs(void **state)
{
	struct kvt_synth_opts o;
	uint64_t n;
	double singles, convs, agents, one_prompt;

	kvt_synth_opts_init(&o, sizeof(o));
	o.requests = 2000;
	o.seed = kvt_test_seed();

	/* single requests share only their system prompts */
	o.conversation_share = 0;
	o.agent_share = 0;
	singles = ideal_rate(&o, &n);
	assert_int_equal(n, 2000);
	/* conversations re-send their growing context */
	o.conversation_share = 1;
	convs = ideal_rate(&o, &n);
	/* agent loops re-send a long context at every step */
	o.conversation_share = 0;
	o.agent_share = 1;
	agents = ideal_rate(&o, &n);
	assert_true(singles > 0);
	assert_true(convs > singles);
	assert_true(agents > singles);
	/* one shared prompt, no growth: the prompt's blocks are all that hit */
	o.agent_share = 0;
	o.system_prompts = 1;
	o.system_prompt_tokens = 4096;
	o.user_tokens = 512;
	one_prompt = ideal_rate(&o, &n);
	assert_true(one_prompt > singles);
}

static void bad_options(void **state)
{
	struct kvt_synth_opts o;

	kvt_synth_opts_init(&o, sizeof(o));
	o.block_tokens = 0;
	assert_int_equal(kvt_synth_write(&o, stdout), -EINVAL);
	kvt_synth_opts_init(&o, sizeof(o));
	o.conversation_share = 0.8;
	o.agent_share = 0.5;
	assert_int_equal(kvt_synth_write(&o, stdout), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(same_seed_same_trace),
		cmocka_unit_test(sharing_follows_the_knobs),
		cmocka_unit_test(bad_options),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
