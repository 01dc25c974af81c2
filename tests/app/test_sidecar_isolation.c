/* SPDX-License-Identifier: Apache-2.0 */
/* Tenants against a real kvtierd: wrong tokens refused, requests before HELLO
 * refused, namespaces a tenant may not use refused, and equal prefixes of two
 * tenants never share a block unless the config gives them the same salt. */
#include <dirent.h>
#include <errno.h>
#include <grp.h>
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "daemon_proc.h"
#include "helpers.h"
#include "transport/proto.h"

static struct kvtd_proc d;
static uint64_t seed;

static int setup(void **state)
{
	char *dir = kvt_test_mkdtemp("kvtierd-iso");
	char path[512];
	FILE *f;

	if (!dir)
		return -1;
	snprintf(path, sizeof(path), "%s/kvtierd.ini", dir);
	f = fopen(path, "w");
	if (!f)
		return -1;
	fprintf(f, "[kvtierd]\nworkers = 2\n\n"
		   "[tenant alice]\ntoken = tok-alice\n\n"
		   "[tenant bob]\ntoken = tok-bob\n\n"
		   "[tenant carol]\ntoken = tok-carol\nsalt = alice\n\n"
		   "[tenant dave]\ntoken = tok-dave\nmodels = allowed/*, exact/model\n");
	fclose(f);
	{
		const char *extra[] = { "--config", path, NULL };
		if (kvtd_start(&d, dir, extra))
			return -1;
	}
	free(dir);
	seed = kvt_test_seed();
	return 0;
}

static int teardown(void **state)
{
	int status = kvtd_stop(&d, SIGTERM);

	kvtd_cleanup(&d);
	return status == 0 ? 0 : -1;
}

static void wrong_token_is_refused_and_repeat_offenders_dropped(void **state)
{
	struct kvt_client *c = kvtd_connect(&d, "not-a-token");
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;

	assert_non_null(c);
	kvtd_test_desc(&desc, NULL);
	assert_int_equal(kvt_client_hello(c, &desc, &ns), -EACCES);
	assert_int_equal(kvt_client_hello(c, &desc, &ns), -EACCES);
	assert_int_equal(kvt_client_hello(c, &desc, &ns), -EACCES);
	/* three strikes: the daemon hangs up */
	assert_int_equal(kvt_client_ping(c, "x", 1), -ECONNRESET);
	kvt_client_close(c);

	/* the empty token is not a wildcard when tenants are configured */
	c = kvtd_connect(&d, "");
	assert_int_equal(kvt_client_hello(c, &desc, &ns), -EACCES);
	kvt_client_close(c);
}

static void nothing_before_hello(void **state)
{
	struct kvt_client *c = kvtd_connect(&d, "tok-alice");
	struct kvt_client_ns ns = { .handle = 1, .block_tokens = 4, .max_keys = 16 };
	struct kvt_key key = { { 1 } };

	assert_int_equal(kvt_client_lookup(c, &ns, &key, 1, NULL), -EPERM);
	assert_int_equal(kvt_client_remove(c, &ns, &key, 1), -EPERM);
	assert_int_equal(kvt_client_ping(c, "still here", 10), 0);
	kvt_client_close(c);
}

static void namespaces_outside_the_tenant_are_refused(void **state)
{
	struct kvt_client *c = kvtd_connect(&d, "tok-dave");
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns, other;
	struct kvt_key key = { { 2 } };

	kvtd_test_desc(&desc, "forbidden/model");
	assert_int_equal(kvt_client_hello(c, &desc, &ns), -EACCES);
	kvtd_test_desc(&desc, "allowed/any-size");
	assert_int_equal(kvt_client_hello(c, &desc, &ns), 0);
	kvtd_test_desc(&desc, "exact/model");
	assert_int_equal(kvt_client_hello(c, &desc, &other), 0);
	assert_int_not_equal(ns.handle, other.handle);
	/* a handle this connection was never given */
	other.handle = 9;
	assert_int_equal(kvt_client_lookup(c, &other, &key, 1, NULL), -EBADF);
	/* and no switching tenants on a connection */
	kvt_client_close(c);
	c = kvtd_connect(&d, "tok-dave");
	kvtd_test_desc(&desc, "allowed/x");
	assert_int_equal(kvt_client_hello(c, &desc, &ns), 0);
	kvt_client_close(c);
}

/* Tenant `token` saves the blocks of tokens; returns their keys. */
static void save_as(const char *token, const uint32_t *tokens, size_t n_tokens,
		    struct kvt_key *keys, int n)
{
	struct kvt_client *c = kvtd_connect(&d, token);
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;
	struct engine_mem m;
	uint32_t pages[8];
	uint64_t ticket;

	kvtd_test_desc(&desc, "shared/model");
	assert_int_equal(kvt_client_hello(c, &desc, &ns), 0);
	assert_int_equal(engine_mem_open(&m, c, &ns, &desc, 8), 0);
	assert_int_equal(kvt_client_prefix_keys(&ns, NULL, tokens, n_tokens, keys, (size_t)n), n);
	for (int i = 0; i < n; i++) {
		pages[i] = (uint32_t)i;
		engine_page_fill(&m, (uint32_t)i, seed + (uint64_t)i);
	}
	assert_int_equal(kvt_client_save(c, &ns, (uint32_t)m.region, NULL, keys, pages,
					 (uint32_t)n, &ticket), 0);
	assert_int_equal(kvt_client_wait(c, ticket, -1), n);
	engine_mem_close(&m);
	kvt_client_close(c);
}

/* How many of the blocks of tokens tenant `token` finds, and (when it finds
 * them all) whether it loads back the same bytes. */
static int lookup_as(const char *token, const uint32_t *tokens, size_t n_tokens, int n,
		     struct kvt_key *keys)
{
	struct kvt_client *c = kvtd_connect(&d, token);
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;
	struct engine_mem m;
	uint32_t pages[8];
	uint64_t ticket;
	int hit;

	kvtd_test_desc(&desc, "shared/model");
	assert_int_equal(kvt_client_hello(c, &desc, &ns), 0);
	assert_int_equal(kvt_client_prefix_keys(&ns, NULL, tokens, n_tokens, keys, (size_t)n), n);
	hit = kvt_client_lookup(c, &ns, keys, (uint32_t)n, NULL);
	if (hit == n) {
		assert_int_equal(engine_mem_open(&m, c, &ns, &desc, 8), 0);
		for (int i = 0; i < n; i++)
			pages[i] = (uint32_t)(n - 1 - i);
		assert_int_equal(kvt_client_load(c, &ns, (uint32_t)m.region, keys, pages,
						 (uint32_t)n, &ticket), 0);
		assert_int_equal(kvt_client_wait(c, ticket, -1), n);
		for (int i = 0; i < n; i++)
			assert_int_equal(engine_page_check(&m, pages[i], seed + (uint64_t)i), 0);
		engine_mem_close(&m);
	}
	kvt_client_close(c);
	return hit;
}

static void tenants_do_not_share_blocks_unless_salted_alike(void **state)
{
	uint32_t tokens[16];
	struct kvt_key alice[4], bob[4], carol[4];
	uint64_t s = seed | 1;

	for (int i = 0; i < 16; i++)
		tokens[i] = (uint32_t)kvt_test_rand(&s);
	save_as("tok-alice", tokens, 16, alice, 4);
	/* bob computes other keys for the same tokens and finds nothing */
	assert_int_equal(lookup_as("tok-bob", tokens, 16, 4, bob), 0);
	assert_memory_not_equal(alice, bob, sizeof(alice));
	/* even asking with alice's own keys, bob's namespace does not have them */
	{
		struct kvt_client *c = kvtd_connect(&d, "tok-bob");
		struct kvt_ns_desc desc;
		struct kvt_client_ns ns;

		kvtd_test_desc(&desc, "shared/model");
		assert_int_equal(kvt_client_hello(c, &desc, &ns), 0);
		assert_int_equal(kvt_client_lookup(c, &ns, alice, 4, NULL), 0);
		kvt_client_close(c);
	}
	/* carol shares alice's salt by configuration: same keys, same bytes */
	assert_int_equal(lookup_as("tok-carol", tokens, 16, 4, carol), 4);
	assert_memory_equal(alice, carol, sizeof(alice));
}

/* The daemon's namespaces in use, from STATS. */
static long long namespaces_of(const struct kvtd_proc *proc)
{
	struct kvt_client *c = kvtd_connect(proc, NULL);
	char *text = NULL;
	json_t *root;
	long long n;

	assert_non_null(c);
	assert_int_equal(kvt_client_stats(c, &text), 0);
	kvt_client_close(c);
	root = json_loads(text, 0, NULL);
	assert_non_null(root);
	n = json_integer_value(json_object_get(json_object_get(root, "store"), "namespaces"));
	json_decref(root);
	free(text);
	return n;
}

/* STATS' server.hello_shape_mismatch. */
static long long shape_mismatches(void)
{
	struct kvt_client *c = kvtd_connect(&d, "tok-bob");
	char *text = NULL;
	json_t *root;
	long long n;

	assert_non_null(c);
	assert_int_equal(kvt_client_stats(c, &text), 0);
	kvt_client_close(c);
	root = json_loads(text, 0, NULL);
	assert_non_null(root);
	n = json_integer_value(json_object_get(json_object_get(root, "server"),
					       "hello_shape_mismatch"));
	json_decref(root);
	free(text);
	return n;
}

/* The same model id in another shape is another namespace, which finds
 * none of the blocks saved in the first: HELLO says so (a warning naming
 * both shapes, and a counter). Tensor-parallel ranks of one shape, and
 * another tenant's namespaces, are not other shapes. */
static void the_same_model_in_another_shape_is_flagged(void **state)
{
	struct kvt_client *a = kvtd_connect(&d, "tok-alice"), *b = kvtd_connect(&d, "tok-bob");
	struct kvt_ns_desc desc, other;
	struct kvt_client_ns ns;
	long long before = shape_mismatches();

	assert_non_null(a);
	assert_non_null(b);
	kvtd_test_desc(&desc, "shape/model");
	assert_int_equal(kvt_client_hello(a, &desc, &ns), 0);
	assert_int_equal(shape_mismatches(), before);
	/* the engine's config changed: 8 layers where 4 were */
	other = desc;
	other.layers = 8;
	assert_int_equal(kvt_client_hello(a, &other, &ns), 0);
	assert_int_equal(shape_mismatches(), before + 1);
	assert_true(kvtd_log_has(&d, "event=hello.shape_differs"));
	assert_true(kvtd_log_has(&d, "shape=\"layout=paged dtype=bf16 layers=8 kv_heads=2 "
				 "head_dim=16 block_tokens=4 tp=0/1\" known_shape=\"layout=paged "
				 "dtype=bf16 layers=4 kv_heads=2"));
	/* another tenant's namespaces are its own business */
	assert_int_equal(kvt_client_hello(b, &other, &ns), 0);
	assert_int_equal(shape_mismatches(), before + 1);
	/* the ranks of a tensor-parallel engine: one shape, a namespace each */
	kvtd_test_desc(&desc, "shape/tp");
	desc.tp_size = 2;
	assert_int_equal(kvt_client_hello(a, &desc, &ns), 0);
	desc.tp_rank = 1;
	assert_int_equal(kvt_client_hello(a, &desc, &ns), 0);
	assert_int_equal(shape_mismatches(), before + 1);
	kvt_client_close(a);
	kvt_client_close(b);
}

/* One tenant's 65,536 HELLOs with new model ids (16 per connection, as many
 * as a connection holds) do not use up the store's 65,535 namespaces for the
 * others: a namespace with no block and no connection left is reclaimed. */
static void a_hello_flood_does_not_exhaust_namespaces(void **state)
{
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;
	struct kvt_client *c;
	long long left = -1;
	char model[48];

	for (int i = 0; i < 4096; i++) {
		c = kvtd_connect(&d, "tok-bob");
		assert_non_null(c);
		for (int j = 0; j < 16; j++) {
			snprintf(model, sizeof(model), "flood/%d/%d", i, j);
			kvtd_test_desc(&desc, model);
			assert_int_equal(kvt_client_hello(c, &desc, &ns), 0);
		}
		kvt_client_close(c);
	}
	c = kvtd_connect(&d, "tok-alice");
	kvtd_test_desc(&desc, "after/the-flood");
	assert_int_equal(kvt_client_hello(c, &desc, &ns), 0);
	kvt_client_close(c);
	/* once the daemon has seen the closes, only namespaces with blocks stay */
	for (int i = 0; i < 500 && (left = namespaces_of(&d)) > 4; i++)
		usleep(10000);
	if (left > 4)
		fail_msg("%lld namespaces left after the flood", left);
}

/* --max-ns-per-tenant 4: a tenant whose 4 namespaces hold blocks gets
 * -EDQUOT for a 5th while another tenant goes on; once one of its
 * namespaces is empty and unused it is reclaimed and the tenant gets in. */
static void a_tenant_is_held_to_its_namespace_quota(void **state)
{
	const char *extra[] = { "--max-ns-per-tenant", "4", "--tenant", "alice:ta",
				"--tenant", "bob:tb", NULL };
	struct kvtd_proc q = { 0 };
	struct kvt_client *c, *b;
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns[5];
	struct engine_mem m;
	struct kvt_key keys[4];
	uint32_t tokens[4] = { 1, 2, 3, 4 }, page = 0;
	uint64_t ticket;
	char model[32];

	assert_int_equal(kvtd_start(&q, NULL, extra), 0);
	c = kvtd_connect(&q, "ta");
	assert_non_null(c);
	for (int i = 0; i < 4; i++) {
		snprintf(model, sizeof(model), "quota/%d", i);
		kvtd_test_desc(&desc, model);
		assert_int_equal(kvt_client_hello(c, &desc, &ns[i]), 0);
		if (i == 0)
			assert_int_equal(engine_mem_open(&m, c, &ns[0], &desc, 2), 0);
		/* a region is per namespace: register one for each */
		else
			assert_true(kvt_client_register(c, &ns[i], &(struct kvt_client_region){
				.size = sizeof(struct kvt_client_region), .memfd = m.fd,
				.bytes = m.bytes, .layers = m.layers, .pages = m.pages,
				.layer_stride = m.layer_stride, .kv_stride = m.kv_stride,
				.page_stride = m.page_stride }) == i + 1);
		assert_int_equal(kvt_client_prefix_keys(&ns[i], NULL, tokens, 4, &keys[i], 1), 1);
		assert_int_equal(kvt_client_save(c, &ns[i], (uint32_t)i + 1, NULL, &keys[i], &page,
						 1, &ticket), 0);
		assert_int_equal(kvt_client_wait(c, ticket, -1), 1);
	}
	kvtd_test_desc(&desc, "quota/4");
	assert_int_equal(kvt_client_hello(c, &desc, &ns[4]), -EDQUOT);
	b = kvtd_connect(&q, "tb");
	assert_int_equal(kvt_client_hello(b, &desc, &ns[4]), 0); /* bob's own count */
	kvt_client_close(b);

	/* empty one of alice's and let go of it: her 5th fits again */
	assert_int_equal(kvt_client_remove(c, &ns[0], &keys[0], 1), 1);
	engine_mem_close(&m);
	kvt_client_close(c);
	c = kvtd_connect(&q, "ta");
	kvtd_test_desc(&desc, "quota/4");
	{
		int err = -1;

		/* the daemon sees the close on its own time */
		for (int i = 0; i < 200 && err; i++) {
			err = kvt_client_hello(c, &desc, &ns[4]);
			if (err == -EDQUOT)
				usleep(10000);
			else
				assert_int_equal(err, 0);
		}
		assert_int_equal(err, 0);
	}
	/* the namespaces holding blocks were kept, with their blocks, and joining
	 * one of them charges nothing */
	kvtd_test_desc(&desc, "quota/1");
	assert_int_equal(kvt_client_hello(c, &desc, &ns[1]), 0);
	assert_int_equal(kvt_client_lookup(c, &ns[1], &keys[1], 1, NULL), 1);
	kvt_client_close(c);
	assert_int_equal(kvtd_stop(&q, SIGTERM), 0);
	kvtd_cleanup(&q);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Guessing tokens across reconnects is slowed per uid: after 3 failures
 * each HELLO of the uid waits out a delay that doubles from 0.1 s, so 8
 * guesses take over a second (old code: milliseconds); the right token then
 * still gets in, once the delay has passed. */
static void token_guessing_is_slowed_per_uid(void **state)
{
	const char *extra[] = { "--tenant", "solo:right", NULL };
	struct kvtd_proc q = { 0 };
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;
	struct kvt_client *c;
	double t0, took;
	char guess[32];

	assert_int_equal(kvtd_start(&q, NULL, extra), 0);
	kvtd_test_desc(&desc, NULL);
	t0 = now_s();
	for (int i = 0; i < 8; i++) {
		snprintf(guess, sizeof(guess), "guess-%d", i);
		c = kvtd_connect(&q, guess);
		assert_non_null(c);
		assert_int_equal(kvt_client_hello(c, &desc, &ns), -EACCES);
		kvt_client_close(c);
	}
	took = now_s() - t0;
	if (took < 1.2)
		fail_msg("8 wrong tokens were checked in %.3f s", took);
	c = kvtd_connect(&q, "right");
	assert_int_equal(kvt_client_hello(c, &desc, &ns), 0);
	kvt_client_close(c);
	assert_int_equal(kvtd_stop(&q, SIGTERM), 0);
	kvtd_cleanup(&q);
}

/* Descriptors kvtierd pid holds open. */
static int daemon_fds(pid_t pid)
{
	char path[64];
	int n = 0;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	assert_non_null(dir);
	while (readdir(dir))
		n++;
	closedir(dir);
	return n;
}

/* A HELLO held back for its uid's delay whose client hangs up is closed at
 * once: its descriptor and its place among the uid's connections come back
 * long before the delay ends. Old code kept it for the whole delay (up to
 * 10 s), with the main loop spinning on the hangup meanwhile. */
static void a_held_back_hello_whose_client_hangs_up_is_closed_at_once(void **state)
{
	const char *extra[] = { "--tenant", "solo:right", NULL };
	struct kvtd_proc q = { 0 };
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;
	struct kvt_client *c;
	struct kvt_wr w;
	int base, fd, fds = -1;
	double t0;

	assert_int_equal(kvtd_start(&q, NULL, extra), 0);
	kvtd_test_desc(&desc, NULL);
	base = daemon_fds(q.pid);
	/* 9 failures: the next HELLO of this uid waits 3.2 s */
	for (int i = 0; i < 9; i++) {
		c = kvtd_connect(&q, "wrong");
		assert_non_null(c);
		assert_int_equal(kvt_client_hello(c, &desc, &ns), -EACCES);
		kvt_client_close(c);
	}
	fd = kvtd_connect_raw(&q);
	assert_true(fd >= 0);
	kvt_wr_init(&w);
	assert_int_equal(kvt_proto_enc_hello(&w, 1, "wrong", &desc), 0);
	assert_int_equal(send(fd, w.buf, w.len, MSG_NOSIGNAL), (ssize_t)w.len);
	kvt_wr_free(&w);
	usleep(200 * 1000); /* read and held back */
	close(fd);
	t0 = now_s();
	while (now_s() - t0 < 2.0 && (fds = daemon_fds(q.pid)) > base)
		usleep(20 * 1000);
	if (fds > base)
		fail_msg("a hung-up held-back connection still holds %d fds after %.1f s",
			 fds - base, now_s() - t0);
	assert_int_equal(kvtd_stop(&q, SIGTERM), 0);
	kvtd_cleanup(&q);
}

/* In a child: become uid/gid 4244 with `groups` as supplementary groups,
 * then connect and say HELLO. Exits 0 when let in, 1 when refused. */
static void hello_as_4244(const struct kvtd_proc *proc, const gid_t *groups, size_t n)
{
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;
	struct kvt_client *c;

	if (setgroups(n, groups) || setgid(4244) || setuid(4244))
		_exit(10);
	c = kvtd_connect(proc, NULL);
	kvtd_test_desc(&desc, NULL);
	_exit(c && kvt_client_hello(c, &desc, &ns) == 0 ? 0 : 1);
}

static int child_status(pid_t pid)
{
	int status;

	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

/* A member of --socket-group by a supplementary group (not its primary one)
 * is let in, checked with SO_PEERGROUPS; a uid in no such group is not. */
static void supplementary_members_of_the_socket_group_get_in(void **state)
{
	struct kvtd_proc q = { 0 };
	struct group *g;
	gid_t gid;
	pid_t pid;

	setgrent();
	while ((g = getgrent()) && g->gr_gid == 0)
		;
	assert_non_null(g);
	gid = g->gr_gid;
	{
		const char *extra[] = { "--socket-group", g->gr_name, NULL };

		endgrent();
		assert_int_equal(kvtd_start(&q, NULL, extra), 0);
	}
	assert_int_equal(chmod(q.sockdir, 0711), 0); /* the socket itself is 0660, group gid */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		hello_as_4244(&q, &gid, 1);
	assert_int_equal(child_status(pid), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		hello_as_4244(&q, NULL, 0);
	assert_int_equal(child_status(pid), 1);
	assert_int_equal(kvtd_stop(&q, SIGTERM), 0);
	kvtd_cleanup(&q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(wrong_token_is_refused_and_repeat_offenders_dropped),
		cmocka_unit_test(nothing_before_hello),
		cmocka_unit_test(namespaces_outside_the_tenant_are_refused),
		cmocka_unit_test(tenants_do_not_share_blocks_unless_salted_alike),
		cmocka_unit_test(the_same_model_in_another_shape_is_flagged),
		cmocka_unit_test(a_hello_flood_does_not_exhaust_namespaces),
		cmocka_unit_test(a_tenant_is_held_to_its_namespace_quota),
		cmocka_unit_test(supplementary_members_of_the_socket_group_get_in),
		cmocka_unit_test(token_guessing_is_slowed_per_uid),
		cmocka_unit_test(a_held_back_hello_whose_client_hangs_up_is_closed_at_once),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
