/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierd's startup errors name what failed and where: the data dir it may
 * not write, the process holding a data dir, a metrics address in use. Each
 * runs the real daemon and reads what it prints before exiting. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon_proc.h"
#include "helpers.h"

static char *dir, *sockdir;

/* kvtierd with args; its exit status, and what it printed in *out. Root
 * loses the capabilities that let it write where the mode says no, so a
 * read-only directory is one for it too. */
static int run(const char *args, char **out)
{
	char cmd[4096];
	size_t len, cap = 1 << 16;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "%s timeout -k 1 20 %s %s 2>&1",
		 geteuid() == 0 ? "setpriv --bounding-set=-dac_override,-dac_read_search,-fowner --" : "",
		 kvtd_binary(), args);
	p = popen(cmd, "r");
	assert_non_null(p);
	*out = malloc(cap);
	len = fread(*out, 1, cap - 1, p);
	(*out)[len] = 0;
	return WEXITSTATUS(pclose(p));
}

static void an_unwritable_data_dir_is_named(void **state)
{
	char data[600], args[1600], *out;

	snprintf(data, sizeof(data), "%s/read-only", dir);
	assert_int_equal(mkdir(data, 0555), 0);
	snprintf(args, sizeof(args), "--socket %s/ro.sock --data-dir %s --dram 16M --ssd 32M "
		 "--metrics off --no-prefault --no-gpu", sockdir, data);
	assert_int_equal(run(args, &out), 1);
	if (!strstr(out, "event=store.open.failed") || !strstr(out, data) ||
	    !strstr(out, "may not write") || !strstr(out, "--data-dir"))
		fail_msg("the refusal does not name the data dir and what to do:\n%s", out);
	free(out);
	rmdir(data);
}

static void a_data_dir_in_use_names_its_holder(void **state)
{
	const char *const extra[] = { "--ssd", "32M", NULL };
	struct kvtd_proc d = { 0 };
	char args[1600], pid[32], *out;

	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	if (kvtd_log_has(&d, "ssd.odirect_refused")) {
		kvtd_cleanup(&d);
		print_message("SKIP: the temp dir's file system has no O_DIRECT: no SSD tier\n");
		skip();
	}
	snprintf(args, sizeof(args), "--socket %s/second.sock --data-dir %s/data --dram 16M "
		 "--ssd 32M --metrics off --no-prefault --no-gpu", sockdir, d.dir);
	assert_int_equal(run(args, &out), 1);
	snprintf(pid, sizeof(pid), "holder_pid=%d", (int)d.pid);
	if (!strstr(out, "event=store.open.failed") || !strstr(out, "locked by") ||
	    !strstr(out, pid))
		fail_msg("the refusal does not name the lock and pid %d:\n%s", (int)d.pid, out);
	free(out);
	/* the first daemon still serves */
	{
		struct kvt_client *c = kvtd_connect(&d, NULL);

		assert_non_null(c);
		assert_int_equal(kvt_client_ping(c, "x", 1), 0);
		kvt_client_close(c);
	}
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

static void a_metrics_address_in_use_is_named(void **state)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	char args[1600], addr[64], *out;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 1), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(sa.sin_port));
	snprintf(args, sizeof(args), "--socket %s/m.sock --data-dir %s/m --dram 16M --ssd 0 "
		 "--metrics %s --no-prefault --no-gpu", sockdir, dir, addr);
	assert_int_equal(run(args, &out), 1);
	if (!strstr(out, "event=metrics.listen_failed") || !strstr(out, addr) ||
	    !strstr(out, "--metrics"))
		fail_msg("the refusal does not name the metrics address %s:\n%s", addr, out);
	free(out);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(an_unwritable_data_dir_is_named),
		cmocka_unit_test(a_data_dir_in_use_names_its_holder),
		cmocka_unit_test(a_metrics_address_in_use_is_named),
	};
	int rc;

	dir = kvt_test_mkdtemp("kvtierd-errors");
	sockdir = kvt_test_sockdir("kvtierd-errors");
	assert_non_null(dir);
	assert_non_null(sockdir);
	chmod(dir, 0755);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	kvt_test_rmdir(dir);
	kvt_test_rmdir(sockdir);
	free(dir);
	free(sockdir);
	return rc;
}
