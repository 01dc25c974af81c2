/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierd --rdma-device through a real kvtierd process: a device libibverbs
 * does not find stops the start with a non-zero exit, naming the device
 * asked for and the devices that exist. (Serving RDMA needs a device; see
 * test_rdma_device and, for the daemon's setup over fake verbs,
 * test_daemon_rdma.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "app/daemon_proc.h"
#include "cluster/verbs.h"

static void an_absent_device_stops_the_start_and_names_those_found(void **state)
{
	char tmpl[] = "/tmp/kvt-rdmad-XXXXXX", cmd[2048], want[600] = "found=\"", *out;
	const struct kvt_verbs_ops *v = kvt_verbs_ibv();
	char names[16][32];
	size_t len, cap = 1 << 16;
	int n, status;
	FILE *p;

	(void)state;
	assert_non_null(mkdtemp(tmpl));
	snprintf(cmd, sizeof(cmd), "head -c 32 /dev/urandom > %s/secret && chmod 600 %s/secret", tmpl,
		 tmpl);
	assert_int_equal(system(cmd), 0);
	snprintf(cmd, sizeof(cmd), "timeout -k 1 20 %s --socket %s/sock --data-dir %s --dram 16M "
		 "--ssd 0 --metrics off --no-prefault --no-gpu --cluster redis://127.0.0.1:1 "
		 "--node-id a --peer-listen 127.0.0.1:1 --cluster-secret-file %s/secret "
		 "--rdma-device kvt-no-such-device 2>&1", kvtd_binary(), tmpl, tmpl, tmpl);
	p = popen(cmd, "r");
	assert_non_null(p);
	out = malloc(cap);
	assert_non_null(out);
	len = fread(out, 1, cap - 1, p);
	out[len] = 0;
	status = pclose(p);
	if (!WIFEXITED(status) || WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 124)
		fail_msg("kvtierd did not stop with an error (status %d):\n%s", status, out);
	if (!strstr(out, "event=cluster.rdma.open_failed device=kvt-no-such-device"))
		fail_msg("no open_failed event naming the device:\n%s", out);
	if (!v) {
		if (!strstr(out, "built without libibverbs"))
			fail_msg("no reason given:\n%s", out);
	} else {
		if (!strstr(out, "err=\"no such RDMA device\""))
			fail_msg("no reason given:\n%s", out);
		n = v->devices(names, 16);
		if (n <= 0)
			strcat(want, "none");
		for (int i = 0; i < n && i < 16; i++) {
			strcat(want, i ? "," : "");
			strcat(want, names[i]);
		}
		strcat(want, "\"");
		if (!strstr(out, want))
			fail_msg("the devices found are not listed as %s:\n%s", want, out);
	}
	if (strstr(out, "event=cluster.start"))
		fail_msg("the cluster started anyway:\n%s", out);
	free(out);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpl);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(an_absent_device_stops_the_start_and_names_those_found),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
