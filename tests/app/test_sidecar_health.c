/* SPDX-License-Identifier: Apache-2.0 */
/* What operators and orchestrators ask of the metrics listener, over real
 * HTTP GETs to a real kvtierd: /healthz while it runs, /readyz ready or 503
 * with the reason (here a cluster whose directory is out of reach), and the
 * build and process families on /metrics. */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon_proc.h"
#include "helpers.h"
#include "kvtier/version.h"
#include "metrics_checked.h"

/* The body of an answer, after its head. */
static const char *body_of(const char *answer)
{
	const char *b = strstr(answer, "\r\n\r\n");

	assert_non_null(b);
	return b + 4;
}

static void live_and_ready_answer_200(void **state)
{
	const char *const extra[] = { "--metrics", "127.0.0.1:0", NULL };
	struct kvtd_proc d = { 0 };
	char *a;
	int port;

	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	port = kvtd_metrics_port(&d);
	assert_true(port > 0);
	a = kvtd_http_checked(port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
	assert_true(!strncmp(a, "HTTP/1.1 200 ", 13));
	assert_string_equal(body_of(a), "ok\n");
	free(a);
	a = kvtd_http_checked(port, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n");
	if (strncmp(a, "HTTP/1.1 200 ", 13))
		fail_msg("a daemon with its tiers open is not ready:\n%s", a);
	assert_string_equal(body_of(a), "ready\n");
	free(a);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

/* A free TCP port on loopback (free when asked; the daemon binds it next). */
static int free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

static void a_node_outside_its_cluster_is_not_ready(void **state)
{
	struct kvtd_proc d = { 0 };
	char listen[32], secret[600], redis[64], *a;
	const char *const extra[] = { "--metrics", "127.0.0.1:0", "--cluster", redis, "--node-id",
				      "health-a", "--peer-listen", listen, "--cluster-secret-file",
				      secret, NULL };
	int port;

#ifndef KVT_HAVE_CLUSTER
	print_message("SKIP: built without the cluster (no hiredis)\n");
	skip();
#endif
	d.dir = kvt_test_mkdtemp("health");
	assert_non_null(d.dir);
	snprintf(secret, sizeof(secret), "%s/secret", d.dir);
	kvt_test_write_secret(secret, "health-check-secret-of-32-bytes!");
	/* nothing listens there: the node runs local-only, never joined */
	snprintf(redis, sizeof(redis), "redis://127.0.0.1:%d", free_port());
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", free_port());
	assert_int_equal(kvtd_start(&d, d.dir, extra), 0);
	port = kvtd_metrics_port(&d);
	assert_true(port > 0);
	a = kvtd_http_checked(port, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n");
	if (strncmp(a, "HTTP/1.1 503 ", 13) || !strstr(body_of(a), "cluster: not joined"))
		fail_msg("a node that never joined its cluster reads ready:\n%s", a);
	free(a);
	/* alive all the same, and serving */
	a = kvtd_http_checked(port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
	assert_true(!strncmp(a, "HTTP/1.1 200 ", 13));
	free(a);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

static void metrics_carry_build_and_process_families(void **state)
{
	const char *const extra[] = { "--metrics", "127.0.0.1:0", NULL };
	struct kvtd_proc d = { 0 };
	time_t before = time(NULL);
	char *a, series[128];
	double start;
	int port;

	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	port = kvtd_metrics_port(&d);
	assert_true(port > 0);
	a = kvtd_http_checked(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
	snprintf(series, sizeof(series), "kvtier_build_info{version=\"%s\"", kvt_version());
	if (!strstr(a, series))
		fail_msg("no %s in:\n%s", series, a);
	assert_true(kvtd_metric_checked(a, "process_resident_memory_bytes") > 1 << 20);
	assert_true(kvtd_metric_checked(a, "process_virtual_memory_bytes") > 1 << 20);
	/* the socket, its listener, the metrics listener at least */
	assert_true(kvtd_metric_checked(a, "process_open_fds") >= 3);
	assert_true(kvtd_metric_checked(a, "process_max_fds") >=
		    kvtd_metric_checked(a, "process_open_fds"));
	assert_true(kvtd_metric_checked(a, "process_cpu_seconds_total") >= 0);
	start = kvtd_metric_checked(a, "process_start_time_seconds");
	if (start < (double)before - 5 || start > (double)time(NULL) + 5)
		fail_msg("process_start_time_seconds %.2f, started within [%lld, %lld]", start,
			 (long long)before, (long long)time(NULL));
	free(a);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(live_and_ready_answer_200),
		cmocka_unit_test(a_node_outside_its_cluster_is_not_ready),
		cmocka_unit_test(metrics_carry_build_and_process_families),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
