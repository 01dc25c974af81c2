/* SPDX-License-Identifier: Apache-2.0 */
/* The SSD tier's kept staging buffers (tiers/ssd_stage.h): a stage given
 * back is handed out again for a request it fits within 1.5x, not for one
 * it dwarfs or cannot hold; the byte and count limits free what exceeds
 * them; every stage is page-aligned; what is kept is freed at the end (the
 * sanitizer build's leak checker sees any that stay). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tiers/ssd_stage.h"

static void a_stage_given_back_is_handed_out_again(void **state)
{
	struct kvt_ssd_stages p;
	size_t cap, cap2;
	char *a, *b;

	(void)state;
	kvt_ssd_stages_init(&p, 16 << 20);
	a = kvt_ssd_stage_get(&p, (2 << 20) + 8192, &cap);
	assert_non_null(a);
	assert_int_equal((uintptr_t)a % 4096, 0);
	assert_int_equal(cap, (2 << 20) + (64 << 10)); /* rounded up to 64 KiB */
	memset(a, 1, cap);
	kvt_ssd_stage_put(&p, a, cap);
	b = kvt_ssd_stage_get(&p, 1536 << 10, &cap2); /* smaller, within 1.5x */
	assert_ptr_equal(b, a);
	assert_int_equal(cap2, cap);
	kvt_ssd_stage_put(&p, b, cap2);
	b = kvt_ssd_stage_get(&p, 1 << 20, &cap2); /* it would waste more than half */
	assert_ptr_not_equal(b, a);
	assert_int_equal(cap2, 1 << 20);
	kvt_ssd_stage_put(&p, b, cap2);
	b = kvt_ssd_stage_get(&p, 3 << 20, &cap2); /* too small for it */
	assert_ptr_not_equal(b, a);
	kvt_ssd_stage_put(&p, b, cap2);
	assert_int_equal(p.made, 3);
	assert_int_equal(p.reused, 1);
	assert_int_equal(p.kept_bytes, cap + (1 << 20) + (3 << 20));
	kvt_ssd_stages_fini(&p);
}

static void what_exceeds_the_limits_is_freed(void **state)
{
	struct kvt_ssd_stages p;
	char *bufs[KVT_SSD_STAGES_MAX + 8];
	size_t cap;

	(void)state;
	kvt_ssd_stages_init(&p, 1 << 20);
	for (int i = 0; i < 20; i++)
		bufs[i] = kvt_ssd_stage_get(&p, 64 << 10, &cap);
	for (int i = 0; i < 20; i++)
		kvt_ssd_stage_put(&p, bufs[i], cap);
	assert_int_equal(p.n, 16); /* 1 MiB of 64 KiB stages */
	assert_int_equal(p.kept_bytes, 1 << 20);
	kvt_ssd_stages_fini(&p);

	kvt_ssd_stages_init(&p, 1 << 30);
	for (int i = 0; i < KVT_SSD_STAGES_MAX + 8; i++)
		bufs[i] = kvt_ssd_stage_get(&p, 4096, &cap);
	for (int i = 0; i < KVT_SSD_STAGES_MAX + 8; i++)
		kvt_ssd_stage_put(&p, bufs[i], cap);
	assert_int_equal(p.n, KVT_SSD_STAGES_MAX);
	kvt_ssd_stage_put(&p, NULL, 0);
	kvt_ssd_stages_fini(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_stage_given_back_is_handed_out_again),
		cmocka_unit_test(what_exceeds_the_limits_is_freed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
