/* SPDX-License-Identifier: Apache-2.0 */
/* Requests larger than the DRAM tier: a SAVE and a LOAD of more blocks than
 * it has slots are served whole, in windows, with per-layer completion that
 * holds for every block; a LOAD of several windows read from SSD puts every
 * block intact in its own page, layers reported in order. And a LOAD whose blocks need most of its slots,
 * mostly from SSD,
 * while another client keeps saving (kvtierd --dram 8M --ssd 512M, 56 blocks
 * of 128 KiB): every LOAD finishes with every block byte for byte, a new
 * client's HELLO is answered while it runs, and SIGTERM ends the daemon
 * within its drain timeout. Repeated KVT_WEDGE_ITERS times (default 20): the
 * daemon used to wedge in about half the runs. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdbool.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon_proc.h"
#include "helpers.h"

#define LOAD_BLOCKS 56
#define SAVER_BLOCKS 4
/* the saver keeps its last SAVER_RING chains (32 MiB, four times the DRAM tier)
 * and removes older ones, so the SSD tier never fills */
#define SAVER_RING 64
#define BLOCK_TOKENS 16
/* seconds a LOAD, a HELLO and the daemon's exit may take before the test
 * calls the daemon wedged (the drain timeout is 30 s) */
#define LOAD_DEADLINE_S 30
#define HELLO_DEADLINE_S 10
#define EXIT_DEADLINE_S 40

static uint64_t seed;

/* 4 layers x K,V x 4 heads x 128 dims x bf16 x 16 tokens = 128 KiB */
static void wedge_desc(struct kvt_ns_desc *d)
{
	kvtd_test_desc_128k(d, "test/wedge");
}

static void chain_keys(const struct kvt_client_ns *ns, uint64_t tag, struct kvt_key *keys, int n)
{
	uint32_t tokens[LOAD_BLOCKS * BLOCK_TOKENS];
	uint64_t s = (seed ^ (tag * 0x9e3779b97f4a7c15ULL)) | 1;

	for (int i = 0; i < n * BLOCK_TOKENS; i++)
		tokens[i] = (uint32_t)kvt_test_rand(&s);
	assert_int_equal(kvt_client_prefix_keys(ns, NULL, tokens, (size_t)n * BLOCK_TOKENS, keys,
						(size_t)n), n);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The other client: saves fresh chains of SAVER_BLOCKS blocks until told to
 * stop, so the DRAM tier is always being filled and demoted. */
struct saver {
	const struct kvtd_proc *d;
	int stop;      /* atomic */
	int saves;     /* saves answered */
	int full;      /* of which -ENOSPC */
	int stuck;     /* a save got no answer in time */
	int failed;    /* a save failed with something else than -ENOSPC */
};

static void *saver_main(void *arg)
{
	struct saver *s = arg;
	struct kvt_client *c = kvtd_connect(s->d, NULL);
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;
	struct engine_mem m;
	struct kvt_key keys[SAVER_RING][SAVER_BLOCKS];
	uint32_t pages[SAVER_BLOCKS];

	wedge_desc(&desc);
	if (!c || kvt_client_hello(c, &desc, &ns) ||
	    engine_mem_open(&m, c, &ns, &desc, SAVER_BLOCKS)) {
		s->failed = 1;
		kvt_client_close(c);
		return NULL;
	}
	for (uint32_t i = 0; i < SAVER_BLOCKS; i++) {
		pages[i] = i;
		engine_page_fill(&m, i, seed + 7 * i);
	}
	for (uint64_t n = 1; !__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE); n++) {
		uint64_t ticket;
		int r;

		struct kvt_key *k = keys[n % SAVER_RING];

		if (n > SAVER_RING &&
		    kvt_client_remove(c, &ns, k, SAVER_BLOCKS) < 0) {
			s->failed = !__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE);
			break;
		}
		chain_keys(&ns, 1000000 + n, k, SAVER_BLOCKS);
		if (kvt_client_save(c, &ns, (uint32_t)m.region, NULL, k, pages, SAVER_BLOCKS,
				    &ticket)) {
			s->failed = !__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE);
			break;
		}
		r = kvt_client_wait(c, ticket, LOAD_DEADLINE_S * 1000);
		if (r == -ETIMEDOUT) {
			s->stuck = 1;
			break;
		}
		if (r < 0 && r != -ENOSPC) {
			/* once stopping, the daemon may close the connection */
			s->failed = !__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE);
			break;
		}
		if (r == -ENOSPC)
			__atomic_add_fetch(&s->full, 1, __ATOMIC_RELEASE);
		__atomic_add_fetch(&s->saves, 1, __ATOMIC_RELEASE);
		usleep(5000);
	}
	engine_mem_close(&m);
	kvt_client_close(c);
	return NULL;
}

/* A new client's HELLO, answered or not by the deadline. */
struct hello {
	const struct kvtd_proc *d;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	int result;
};

static void *hello_main(void *arg)
{
	struct hello *h = arg;
	struct kvt_client *c = kvtd_connect(h->d, NULL);
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;
	int r = -ECONNREFUSED;

	kvtd_test_desc(&desc, "test/hello-during-load");
	if (c)
		r = kvt_client_hello(c, &desc, &ns);
	pthread_mutex_lock(&h->lock);
	h->done = true;
	h->result = r;
	pthread_cond_signal(&h->cond);
	pthread_mutex_unlock(&h->lock);
	kvt_client_close(c);
	return NULL;
}

/* Whether the HELLO was answered within the deadline. */
static bool hello_answered(struct hello *h)
{
	struct timespec until;
	bool done;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += HELLO_DEADLINE_S;
	pthread_mutex_lock(&h->lock);
	while (!h->done && pthread_cond_timedwait(&h->cond, &h->lock, &until) != ETIMEDOUT)
		;
	done = h->done;
	pthread_mutex_unlock(&h->lock);
	return done;
}

/* Every call of the test's own client waits for the daemon without a limit:
 * a watchdog kills a daemon that makes an iteration overrun its deadline, so
 * a wedge fails the test instead of hanging it. */
struct watchdog {
	pthread_mutex_t lock;
	pid_t pid;
	double deadline;   /* 0: off */
	int fired;
	int quit;
};

static void *watchdog_main(void *arg)
{
	struct watchdog *w = arg;

	pthread_mutex_lock(&w->lock);
	while (!w->quit) {
		if (w->deadline && now_s() > w->deadline && w->pid > 0) {
			print_message("watchdog: the daemon stopped answering; killing it\n");
			kill(w->pid, SIGKILL);
			w->fired = 1;
			w->deadline = 0;
		}
		pthread_mutex_unlock(&w->lock);
		usleep(100000);
		pthread_mutex_lock(&w->lock);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

static void watchdog_arm(struct watchdog *w, double seconds)
{
	pthread_mutex_lock(&w->lock);
	w->deadline = seconds ? now_s() + seconds : 0;
	pthread_mutex_unlock(&w->lock);
}

/* Fail the test with the reason when the watchdog had to kill the daemon. */
static void assert_alive(struct watchdog *w, int it, const char *what)
{
	int fired;

	pthread_mutex_lock(&w->lock);
	fired = w->fired;
	pthread_mutex_unlock(&w->lock);
	if (fired)
		fail_msg("iteration %d: the daemon wedged (%s got no answer in %d s)", it, what,
			 2 * LOAD_DEADLINE_S);
}

/* SIGTERM, then wait up to `limit` seconds for the exit. Returns the exit
 * status, or -1 when the daemon was still running (it is then killed). */
static int stop_within(struct kvtd_proc *d, int limit)
{
	double until = now_s() + limit;
	int status;

	kill(d->pid, SIGTERM);
	while (now_s() < until) {
		pid_t p = waitpid(d->pid, &status, WNOHANG);
		if (p == d->pid) {
			d->pid = 0;
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		}
		usleep(20000);
	}
	kvtd_stop(d, SIGKILL);
	return -1;
}

static void load_while_saving_never_wedges(void **state)
{
	const char *extra[] = { "--dram", "8M", "--ssd", "512M", NULL };
	const char *env = getenv("KVT_WEDGE_ITERS");
	int iters = env && atoi(env) > 0 ? atoi(env) : 20;
	struct kvtd_proc d = { 0 };
	struct saver sv = { .d = &d };
	struct kvt_client *c;
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;
	struct engine_mem m;
	struct kvt_key keys[LOAD_BLOCKS];
	uint32_t pages[LOAD_BLOCKS];
	uint8_t tiers[LOAD_BLOCKS];
	struct watchdog wd = { .lock = PTHREAD_MUTEX_INITIALIZER };
	pthread_t saver, watch;
	int wedged = 0;

	(void)state;
	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	wd.pid = d.pid;
	assert_int_equal(pthread_create(&watch, NULL, watchdog_main, &wd), 0);
	c = kvtd_connect(&d, NULL);
	assert_non_null(c);
	wedge_desc(&desc);
	assert_int_equal(kvt_client_hello(c, &desc, &ns), 0);
	assert_int_equal(ns.block_bytes, 128u << 10);
	assert_int_equal(engine_mem_open(&m, c, &ns, &desc, LOAD_BLOCKS), 0);
	for (uint32_t i = 0; i < LOAD_BLOCKS; i++)
		pages[i] = i;
	assert_int_equal(pthread_create(&saver, NULL, saver_main, &sv), 0);

	for (int it = 0; it < iters && !wedged; it++) {
		struct hello h = { .d = &d, .lock = PTHREAD_MUTEX_INITIALIZER,
				   .cond = PTHREAD_COND_INITIALIZER };
		pthread_t hello;
		uint64_t ticket;
		int on_ssd = 0, saves0, r;
		double t0;

		watchdog_arm(&wd, 2 * LOAD_DEADLINE_S);
		chain_keys(&ns, (uint64_t)it + 1, keys, LOAD_BLOCKS);
		for (uint32_t i = 0; i < LOAD_BLOCKS; i++)
			engine_page_fill(&m, i, seed + 1000 * (uint64_t)it + i);
		assert_int_equal(kvt_client_save(c, &ns, (uint32_t)m.region, NULL, keys, pages,
						 LOAD_BLOCKS, &ticket), 0);
		r = kvt_client_wait(c, ticket, LOAD_DEADLINE_S * 1000);
		assert_alive(&wd, it, "the SAVE");
		if (r == -ETIMEDOUT) {
			print_message("iteration %d: the SAVE got no answer in %d s\n", it,
				      LOAD_DEADLINE_S);
			wedged = 1;
			break;
		}
		assert_int_equal(r, LOAD_BLOCKS);
		/* the saver pushes them down (a lookup would make them hot, so
		 * look once the saver has saved more than the DRAM tier holds) */
		saves0 = __atomic_load_n(&sv.saves, __ATOMIC_ACQUIRE);
		for (t0 = now_s(); now_s() - t0 < 10 && !__atomic_load_n(&sv.stuck, __ATOMIC_ACQUIRE) &&
		     __atomic_load_n(&sv.saves, __ATOMIC_ACQUIRE) - saves0 < 64; usleep(10000))
			;
		if (__atomic_load_n(&sv.saves, __ATOMIC_ACQUIRE) - saves0 < 64) {
			print_message("iteration %d: the saver made no progress in 10 s\n", it);
			wedged = 1;
			break;
		}
		r = kvt_client_lookup(c, &ns, keys, LOAD_BLOCKS, tiers);
		assert_alive(&wd, it, "a LOOKUP");
		assert_int_equal(r, LOAD_BLOCKS);
		for (int i = 0; i < LOAD_BLOCKS; i++)
			on_ssd += tiers[i] == KVT_TIER_SSD;
		if (on_ssd <= LOAD_BLOCKS / 2)
			fail_msg("iteration %d: only %d of %d blocks went down to SSD (saver: %d saves, "
				 "%d full)", it, on_ssd, LOAD_BLOCKS, sv.saves, sv.full);
		for (uint32_t i = 0; i < LOAD_BLOCKS; i++)
			engine_page_fill(&m, i, 0);

		assert_int_equal(kvt_client_load(c, &ns, (uint32_t)m.region, keys, pages,
						 LOAD_BLOCKS, &ticket), 0);
		assert_int_equal(pthread_create(&hello, NULL, hello_main, &h), 0);
		if (!hello_answered(&h)) {
			print_message("iteration %d: HELLO unanswered after %d s during a LOAD\n",
				      it, HELLO_DEADLINE_S);
			wedged = 1;
		}
		r = kvt_client_wait(c, ticket, wedged ? 1 : LOAD_DEADLINE_S * 1000);
		if (r == -ETIMEDOUT) {
			print_message("iteration %d: the LOAD of %d blocks (%d on SSD) got no answer "
				      "in %d s\n", it, LOAD_BLOCKS, on_ssd, LOAD_DEADLINE_S);
			wedged = 1;
		}
		assert_alive(&wd, it, "the LOAD");
		if (wedged) {
			/* unblock the threads stuck on the daemon */
			kvtd_stop(&d, SIGKILL);
			pthread_join(hello, NULL);
			break;
		}
		pthread_join(hello, NULL);
		assert_int_equal(h.result, 0);
		/* nothing was evicted (the SSD tier never fills, DRAM drops nothing
		 * while the SSD tier works): the whole LOAD is served */
		assert_int_equal(r, LOAD_BLOCKS);
		for (uint32_t i = 0; i < LOAD_BLOCKS; i++)
			if (engine_page_check(&m, i, seed + 1000 * (uint64_t)it + i))
				fail_msg("iteration %d: block %u loaded wrong bytes", it, i);
		assert_false(__atomic_load_n(&sv.stuck, __ATOMIC_ACQUIRE));
	}

	watchdog_arm(&wd, 0);
	if (wd.fired)
		wedged = 1;
	if (!wedged) {
		int status;

		/* SIGTERM while the saver is still at it */
		assert_true(__atomic_load_n(&sv.saves, __ATOMIC_ACQUIRE) > 0);
		__atomic_store_n(&sv.stop, 1, __ATOMIC_RELEASE);
		status = stop_within(&d, EXIT_DEADLINE_S);
		if (status < 0) {
			print_message("SIGTERM did not end the daemon within %d s\n", EXIT_DEADLINE_S);
			wedged = 1;
		} else {
			assert_int_equal(status, 0);
		}
	}
	__atomic_store_n(&sv.stop, 1, __ATOMIC_RELEASE);
	pthread_join(saver, NULL);
	pthread_mutex_lock(&wd.lock);
	wd.quit = 1;
	pthread_mutex_unlock(&wd.lock);
	pthread_join(watch, NULL);
	engine_mem_close(&m);
	kvt_client_close(c);
	kvtd_cleanup(&d);
	assert_false(wedged);
	assert_false(sv.failed);
	assert_false(sv.stuck);
}

/* Whether layer `layer` of engine page `page` holds what engine_page_fill
 * wrote there with seed. */
static bool layer_ok(const struct engine_mem *m, uint32_t page, uint32_t layer, uint64_t seed_)
{
	uint8_t *want = malloc(m->page_bytes);
	bool ok = true;

	for (uint32_t kv = 0; kv < 2 && ok; kv++) {
		kvt_test_fill(want, m->page_bytes, seed_ * 1000003 + layer * 2 + kv + 1);
		ok = !memcmp(want, engine_page(m, page, layer, kv), m->page_bytes);
	}
	free(want);
	return ok;
}

/* Keys of a chain of n blocks (n a multiple of 50), told apart by tag. */
static void long_chain(const struct kvt_client_ns *ns, uint32_t tag, struct kvt_key *keys,
		       uint32_t n)
{
	for (uint32_t i = 0; i < n; i += 50) {
		struct kvt_key part[50];
		uint32_t tokens[50 * BLOCK_TOKENS];
		uint64_t r = seed | 1;

		for (int t = 0; t < 50 * BLOCK_TOKENS; t++)
			tokens[t] = (uint32_t)kvt_test_rand(&r) + i + tag * 1000003u;
		assert_int_equal(kvt_client_prefix_keys(ns, i ? &keys[i - 1] : NULL, tokens,
							50 * BLOCK_TOKENS, part, 50), 50);
		memcpy(&keys[i], part, sizeof(part));
	}
}

/* A daemon with 64 DRAM slots of 128 KiB and an SSD tier, and an engine
 * of `pages` pages connected to it, for requests of up to `keys` keys. */
static struct kvt_client *window_daemon(struct kvtd_proc *d, struct kvt_ns_desc *desc,
					struct kvt_client_ns *ns, struct engine_mem *m,
					uint32_t pages, uint32_t keys)
{
	const char *extra[] = { "--dram", "8M", "--ssd", "512M", NULL };
	struct kvt_client *c;

	assert_int_equal(kvtd_start(d, NULL, extra), 0);
	c = kvtd_connect(d, NULL);
	assert_non_null(c);
	wedge_desc(desc);
	assert_int_equal(kvt_client_hello(c, desc, ns), 0);
	assert_true(ns->max_keys >= keys);
	assert_int_equal(engine_mem_open(m, c, ns, desc, pages), 0);
	return c;
}

/* SAVE keys[i] from pages[i], i < n, and wait for all of them. */
static void save_all(struct kvt_client *c, const struct kvt_client_ns *ns,
		     const struct engine_mem *m, const struct kvt_key *keys, const uint32_t *pages,
		     uint32_t n)
{
	uint64_t ticket;

	assert_int_equal(kvt_client_save(c, ns, (uint32_t)m->region, NULL, keys, pages, n,
					 &ticket), 0);
	assert_int_equal(kvt_client_wait(c, ticket, 60000), (int)n);
}

/* How many of keys[0..n) (all stored) LOOKUP finds on SSD. */
static int blocks_on_ssd(struct kvt_client *c, const struct kvt_client_ns *ns,
			 const struct kvt_key *keys, uint32_t n)
{
	uint8_t *tiers = malloc(n);
	int on_ssd = 0;

	assert_non_null(tiers);
	assert_int_equal(kvt_client_lookup(c, ns, keys, n, tiers), (int)n);
	for (uint32_t i = 0; i < n; i++)
		on_ssd += tiers[i] == KVT_TIER_SSD;
	free(tiers);
	return on_ssd;
}

/* A LOAD of more blocks than the DRAM tier has slots (100 of 128 KiB through
 * 64 slots, all on SSD) is served whole, in windows; a layer reported done
 * is in place for every block of the request. */
static void load_larger_than_the_dram_tier_comes_in_windows(void **state)
{
	enum { N = 100 };
	struct kvtd_proc d = { 0 };
	struct kvt_client *c;
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;
	struct engine_mem m;
	struct kvt_key keys[N];
	uint32_t pages[N];
	uint64_t ticket;

	(void)state;
	c = window_daemon(&d, &desc, &ns, &m, N, N);
	long_chain(&ns, 0, keys, N);
	for (uint32_t i = 0; i < N; i++) {
		pages[i] = i;
		engine_page_fill(&m, i, seed + i);
	}
	/* saved in parts: a SAVE of more than the tier holds is windowed too */
	save_all(c, &ns, &m, keys, pages, N);
	/* everything but the newest blocks went down */
	assert_true(blocks_on_ssd(c, &ns, keys, N) >= N - 64);
	for (uint32_t i = 0; i < N; i++)
		engine_page_fill(&m, i, 0);

	assert_int_equal(kvt_client_load(c, &ns, (uint32_t)m.region, keys, pages, N, &ticket), 0);
	assert_int_equal(kvt_client_wait_layer(c, ticket, 0, 60000), 0);
	for (uint32_t i = 0; i < N; i++)
		if (!layer_ok(&m, i, 0, seed + i))
			fail_msg("layer 0 reported done, but block %u's layer 0 is not in place", i);
	assert_int_equal(kvt_client_wait(c, ticket, 60000), N);
	for (uint32_t i = 0; i < N; i++)
		if (engine_page_check(&m, i, seed + i))
			fail_msg("block %u loaded wrong bytes", i);
	engine_mem_close(&m);
	kvt_client_close(c);
	assert_int_equal(stop_within(&d, EXIT_DEADLINE_S), 0);
	kvtd_cleanup(&d);
}

/* A LOAD of 150 blocks, all on SSD (more than two windows), into pages in
 * another order than they were saved from, with 8 pages of the region left
 * out: every block lands intact in its own page and nothing else is
 * written; the layers are reported in order, and each layer reported done
 * (the watermark, as the client sees it) is in place for every block. */
static void multi_window_load_from_ssd_lands_in_place_in_order(void **state)
{
	enum { N = 150, FILLER = 100, SPARE = 8, PAGES = N + SPARE };
	struct kvtd_proc d = { 0 };
	struct kvt_client *c;
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;
	struct engine_mem m;
	struct kvt_key keys[N], filler[FILLER];
	uint32_t pages[N], into[N], layers_seen = 0;
	bool target[PAGES] = { false };
	uint64_t ticket;
	int on_ssd = 0, result = 0, r;

	(void)state;
	c = window_daemon(&d, &desc, &ns, &m, PAGES, N);
	long_chain(&ns, 1, keys, N);
	long_chain(&ns, 2, filler, FILLER);
	for (uint32_t i = 0; i < N; i++) {
		pages[i] = i;
		engine_page_fill(&m, i, seed + i);
		/* 37 is prime to PAGES: a permutation of the region's pages */
		into[i] = (i * 37 + 5) % PAGES;
		target[into[i]] = true;
	}
	save_all(c, &ns, &m, keys, pages, N);
	/* another chain pushes the newest of them down too */
	save_all(c, &ns, &m, filler, pages, FILLER);
	on_ssd = blocks_on_ssd(c, &ns, keys, N);
	if (on_ssd <= 128)
		fail_msg("only %d of %d blocks on SSD: the LOAD would not read two windows there",
			 on_ssd, N);
	for (uint32_t p = 0; p < PAGES; p++)
		engine_page_fill(&m, p, 0);

	assert_int_equal(kvt_client_load(c, &ns, (uint32_t)m.region, keys, into, N, &ticket), 0);
	for (uint32_t l = 0; l < desc.layers && !result; l++) {
		uint32_t done = 0;

		assert_int_equal(kvt_client_wait_layer(c, ticket, l, 60000), 0);
		r = kvt_client_poll(c, ticket, &result, &done);
		assert_true(r == 0 || r == 1);
		if (r == 1)
			assert_int_equal(result, N);
		if (done < layers_seen || done <= l)
			fail_msg("layer %u waited for, then %u layers done after %u", l, done,
				 layers_seen);
		layers_seen = done;
		for (uint32_t k = 0; k < done && k < desc.layers; k++)
			for (uint32_t i = 0; i < N; i++)
				if (!layer_ok(&m, into[i], k, seed + i))
					fail_msg("%u layers reported done, but layer %u of block %u "
						 "is not in page %u", done, k, i, into[i]);
	}
	if (!result)
		assert_int_equal(kvt_client_wait(c, ticket, 60000), N);
	for (uint32_t i = 0; i < N; i++)
		if (engine_page_check(&m, into[i], seed + i))
			fail_msg("block %u is not intact in page %u", i, into[i]);
	for (uint32_t p = 0; p < PAGES; p++)
		if (!target[p] && engine_page_check(&m, p, 0))
			fail_msg("page %u, no LOAD's target, was written", p);
	engine_mem_close(&m);
	kvt_client_close(c);
	assert_int_equal(stop_within(&d, EXIT_DEADLINE_S), 0);
	kvtd_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(load_larger_than_the_dram_tier_comes_in_windows),
		cmocka_unit_test(multi_window_load_from_ssd_lands_in_place_in_order),
		cmocka_unit_test(load_while_saving_never_wedges),
	};

	seed = kvt_test_seed();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
