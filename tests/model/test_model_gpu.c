/* SPDX-License-Identifier: Apache-2.0 */
/* The GPU table: lookups by loose name, MIG slices, PCIe rates. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "kvtier/model.h"

static void table_holds_the_public_specs(void **state)
{
	struct kvt_gpu g;
	const struct kvt_gpu *p;
	size_t n = 0;

	assert_int_equal(kvt_gpu_find("H100-SXM", NULL, &g), 0);
	assert_true(g.mem_bw == 3.35e12);
	assert_true(g.bf16_flops == 989e12);
	assert_int_equal(g.mem_bytes, 80000000000ull);
	assert_int_equal(g.pcie_gen, 5);
	assert_int_equal(kvt_gpu_find("GH200", NULL, &g), 0);
	assert_true(g.c2c_bw == 450e9);
	assert_int_equal(kvt_gpu_find("A100-40GB", NULL, &g), 0);
	assert_true(g.mem_bw == 1.555e12);
	assert_int_equal(g.pcie_gen, 4);
	for (size_t i = 0; (p = kvt_gpu_at(i)); i++, n++)
		assert_true(p->mem_bytes && p->mem_bw > 0 && p->bf16_flops > 0 && p->source);
	assert_true(n >= 9);
}

static void names_are_loose(void **state)
{
	struct kvt_gpu g;

	assert_int_equal(kvt_gpu_find("h100sxm", NULL, &g), 0);
	assert_string_equal(g.name, "H100-SXM");
	assert_int_equal(kvt_gpu_find("a100_80gb", NULL, &g), 0);
	assert_string_equal(g.name, "A100-80GB");
	assert_int_equal(kvt_gpu_find("H100", NULL, &g), -ENOENT); /* SXM or PCIe? */
	assert_int_equal(kvt_gpu_find("TPU", NULL, &g), -ENOENT);
}

static void mig_slices_scale_memory_bandwidth_and_compute(void **state)
{
	struct kvt_gpu g;

	/* 3g.40gb of an H100: 4 of 8 memory slices, 3 of 7 compute */
	assert_int_equal(kvt_gpu_find("H100-SXM/3g.40gb", NULL, &g), 0);
	assert_string_equal(g.name, "H100-SXM/3g.40gb");
	assert_int_equal(g.mem_bytes, 40000000000ull);
	assert_true(fabs(g.mem_bw - 3.35e12 / 2) < 1);
	assert_true(fabs(g.bf16_flops - 989e12 * 3 / 7) < 1);
	assert_null(g.mig);
	/* 1g.5gb of an A100-40GB: 1/8 of memory */
	assert_int_equal(kvt_gpu_find("A100-40GB", "1g.5gb", &g), 0);
	assert_true(fabs(g.mem_bw - 1.555e12 / 8) < 1);
	/* H200's 1g.18gb is one slice of eight */
	assert_int_equal(kvt_gpu_find("H200", "1g.18gb", &g), 0);
	assert_true(fabs(g.mem_bw - 4.8e12 / 8) < 1);
	assert_int_equal(g.mem_bytes, 18000000000ull);
	/* a profile the GPU lacks, a GPU without MIG */
	assert_int_equal(kvt_gpu_find("H100-SXM", "1g.5gb", &g), -ENOENT);
	assert_int_equal(kvt_gpu_find("L40S", "1g.12gb", &g), -ENOENT);
}

static void pcie_rates(void **state)
{
	/* x16, 128b/130b: Gen4 31.5 GB/s, Gen5 63.0 GB/s per direction */
	assert_true(fabs(kvt_pcie_bw(4) - 31.5e9) < 0.01e9);
	assert_true(fabs(kvt_pcie_bw(5) - 63.0e9) < 0.02e9);
	assert_true(kvt_pcie_bw(2) == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(table_holds_the_public_specs),
		cmocka_unit_test(names_are_loose),
		cmocka_unit_test(mig_slices_scale_memory_bandwidth_and_compute),
		cmocka_unit_test(pcie_rates),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
