/* SPDX-License-Identifier: Apache-2.0 */
/* The cluster directory against a Redis that is not one: a server on a real
 * loopback socket that answers every connection with junk, or accepts and
 * never answers. The node goes local-only (as with a Redis that refuses
 * connections), and says so once in its log, naming the failure; old code
 * only raised its error counter. */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "cluster/directory.h"
#include "helpers.h"

enum fake_mode { FAKE_JUNK, FAKE_SILENT };

struct fake_redis {
	int lfd, port, stop_pipe[2];
	enum fake_mode mode;
	pthread_t th;
	int conns[64];
	int n_conns;
};

static void *fake_thread(void *arg)
{
	struct fake_redis *f = arg;
	static const char junk[] = "%this is not RESP\r\n";

	for (;;) {
		struct pollfd p[2] = { { .fd = f->lfd, .events = POLLIN },
				       { .fd = f->stop_pipe[0], .events = POLLIN } };
		int fd;

		if (poll(p, 2, -1) < 0 || (p[1].revents & POLLIN))
			break;
		fd = accept(f->lfd, NULL, NULL);
		if (fd < 0)
			continue;
		if (f->mode == FAKE_JUNK && write(fd, junk, sizeof(junk) - 1) < 0) {
			/* the client may already be gone */
		}
		if (f->n_conns < 64)
			f->conns[f->n_conns++] = fd; /* held open: silence, or junk then silence */
		else
			close(fd);
	}
	for (int i = 0; i < f->n_conns; i++)
		close(f->conns[i]);
	return NULL;
}

static void fake_start(struct fake_redis *f, enum fake_mode mode)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);

	memset(f, 0, sizeof(*f));
	f->mode = mode;
	f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(f->lfd >= 0);
	assert_int_equal(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(f->lfd, 16), 0);
	assert_int_equal(getsockname(f->lfd, (struct sockaddr *)&a, &len), 0);
	f->port = ntohs(a.sin_port);
	assert_int_equal(pipe(f->stop_pipe), 0);
	assert_int_equal(pthread_create(&f->th, NULL, fake_thread, f), 0);
}

static void fake_stop(struct fake_redis *f)
{
	assert_int_equal(write(f->stop_pipe[1], "x", 1), 1);
	pthread_join(f->th, NULL);
	close(f->stop_pipe[0]);
	close(f->stop_pipe[1]);
	close(f->lfd);
}

/* The directory's log lines of level warn and above, kept for the test. */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char warnings[8192];

static void log_cb(void *arg, enum kvt_log_level lvl, const char *msg)
{
	fprintf(stderr, "  [%s] %s\n", (const char *)arg, msg);
	if (lvl > KVT_LOG_WARN)
		return;
	pthread_mutex_lock(&log_mu);
	strncat(warnings, msg, sizeof(warnings) - strlen(warnings) - 2);
	strcat(warnings, "\n");
	pthread_mutex_unlock(&log_mu);
}

static bool warned(const char *what)
{
	bool yes;

	pthread_mutex_lock(&log_mu);
	yes = strstr(warnings, what) != NULL;
	pthread_mutex_unlock(&log_mu);
	return yes;
}

static void a_bad_redis_is_logged(enum fake_mode mode, const char *name)
{
	struct fake_redis f;
	struct kvt_dir_opts o;
	struct kvt_dir_stats st;
	struct kvt_dir *d = NULL;
	char url[64];
	int waited = 0;

	warnings[0] = 0;
	fake_start(&f, mode);
	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", f.port);
	kvt_dir_opts_init(&o, sizeof(o));
	o.url = url;
	snprintf(o.self.id, sizeof(o.self.id), "n1");
	snprintf(o.self.addr, sizeof(o.self.addr), "10.0.0.1:7400");
	o.member_ttl_ms = 900;
	o.lookup_timeout_ms = 100;
	o.io_timeout_ms = 200;
	o.log = log_cb;
	o.log_arg = (void *)name;
	assert_int_equal(kvt_dir_open(&o, &d), 0);
	while (!warned("redis") && waited < 5000) {
		kvt_test_sleep_ms(20);
		waited += 20;
	}
	kvt_dir_stats(d, &st);
	kvt_dir_close(d);
	fake_stop(&f);
	assert_false(st.reachable);
	assert_true(st.errors >= 1);
	if (!warned("local-only"))
		fail_msg("a %s Redis was not logged (%llu errors):\n%s", name,
			 (unsigned long long)st.errors, warnings);
}

static void a_redis_answering_junk_is_logged(void **state)
{
	a_bad_redis_is_logged(FAKE_JUNK, "junk");
}

static void a_redis_that_never_answers_is_logged(void **state)
{
	a_bad_redis_is_logged(FAKE_SILENT, "silent");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_redis_answering_junk_is_logged),
		cmocka_unit_test(a_redis_that_never_answers_is_logged),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
