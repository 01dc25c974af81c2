/* SPDX-License-Identifier: Apache-2.0 */
/* Where kvtierd finds its memory limit: the tightest limit of its cgroup and
 * every ancestor, v2 (memory.max) or v1 (memory.limit_in_bytes), less what
 * each uses; a cgroup namespace's "/" path is the mount's root; no limit at
 * all leaves the host's available memory. Fake cgroup trees in a temp dir. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "app/daemon_memory.h"
#include "helpers.h"

#define MiB (1ull << 20)

static char *root;

static void put(const char *rel, const char *text)
{
	char path[700], dir[700], *slash;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	snprintf(dir, sizeof(dir), "%s", path);
	for (char *p = dir + strlen(root) + 1; (slash = strchr(p, '/')); p = slash + 1) {
		*slash = 0;
		mkdir(dir, 0755);
		*slash = '/';
	}
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void v2_takes_the_tightest_ancestor(void **state)
{
	struct kvtd_memory m;
	char fs[600];

	put("v2/cgroup.controllers", "cpu memory\n");
	put("v2/a/memory.max", "1073741824\n");
	put("v2/a/memory.current", "209715200\n");
	put("v2/a/b/memory.max", "max\n");
	put("v2/a/b/memory.current", "104857600\n");
	snprintf(fs, sizeof(fs), "%s/v2", root);
	kvtd_memory_measure_at(&m, "0::/a/b\n", fs);
	assert_int_equal(m.cgroup_limit, 1024 * MiB);
	assert_int_equal(m.cgroup_room, 824 * MiB);
	assert_true(m.available <= 824 * MiB);
	assert_true(m.available <= m.host_available);
	assert_non_null(strstr(m.cgroup_dir, "/v2/a"));
}

static void v1_memory_controller_is_found_among_others(void **state)
{
	struct kvtd_memory m;
	char fs[600];

	put("v1/memory/x/memory.limit_in_bytes", "536870912\n");
	put("v1/memory/x/memory.usage_in_bytes", "12582912\n");
	put("v1/memory/memory.limit_in_bytes", "9223372036854771712\n");
	snprintf(fs, sizeof(fs), "%s/v1", root);
	kvtd_memory_measure_at(&m, "5:cpu,cpuacct:/x\n4:memory:/x\n0::/x\n", fs);
	assert_int_equal(m.cgroup_limit, 512 * MiB);
	assert_int_equal(m.cgroup_room, 500 * MiB);
}

static void a_namespaced_path_reads_the_mount_root(void **state)
{
	struct kvtd_memory m;
	char fs[600];

	put("ns/cgroup.controllers", "memory\n");
	put("ns/memory.max", "268435456\n");
	snprintf(fs, sizeof(fs), "%s/ns", root);
	/* the container sees its own cgroup as "/" (and a path not mounted here) */
	kvtd_memory_measure_at(&m, "0::/\n", fs);
	assert_int_equal(m.cgroup_limit, 256 * MiB);
	kvtd_memory_measure_at(&m, "0::/not/here\n", fs);
	assert_int_equal(m.cgroup_limit, 256 * MiB);
}

static void no_limit_leaves_the_host(void **state)
{
	struct kvtd_memory m;
	char fs[600];

	put("none/cgroup.controllers", "memory\n");
	put("none/c/memory.max", "max\n");
	snprintf(fs, sizeof(fs), "%s/none", root);
	kvtd_memory_measure_at(&m, "0::/c\n", fs);
	assert_true(m.cgroup_limit == UINT64_MAX);
	assert_true(m.available == m.host_available);
	assert_true(m.host_available > 0);
	kvtd_memory_measure_at(&m, "", fs);
	assert_true(m.available == m.host_available);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(v2_takes_the_tightest_ancestor),
		cmocka_unit_test(v1_memory_controller_is_found_among_others),
		cmocka_unit_test(a_namespaced_path_reads_the_mount_root),
		cmocka_unit_test(no_limit_leaves_the_host),
	};
	int rc;

	root = kvt_test_mkdtemp("cgroup");
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	kvt_test_rmdir(root);
	free(root);
	return rc;
}
