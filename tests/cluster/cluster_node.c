/* SPDX-License-Identifier: Apache-2.0 */
/* cluster_node: one node of the multi-node tests, around the cluster's
 * modules as kvtierd will hold them: a store, a peer server, a peer client
 * and a directory on Redis. It reads commands on stdin and answers each
 * with one line on stdout:
 *
 *   put SEED N     store the N-block prefix chain of SEED, publish hints
 *                  -> ok put=N
 *   fetch SEED N   find the chain: locally, then through the directory, and
 *                  fetch the rest from its holders (another holder when one
 *                  fails), verifying every byte
 *                  -> ok local=L remote=R fetched=F bad=B miss=M ms=T dir=D err=E
 *   lookup SEED N  how many leading blocks of the chain other nodes hold
 *                  -> ok remote=R (or a negative errno)
 *   stats          -> ok reachable=0|1 epoch=E members=M joins=J
 *   peerstats      -> ok auth_failures=A blocks_sent=S peer_errors=P
 *   quit
 *
 * Options: --id ID --listen ADDR:PORT --redis URL --secret-file F
 *          [--ttl-ms 3000] [--timeout-ms 800] [--dram BYTES] */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/directory.h"
#include "helpers.h"
#include "kvtier/store.h"
#include "cluster/peer_client.h"
#include "cluster/peer_server.h"
#include "transport/sockio.h"

#define MAX_BLOCKS 256
#define BLOCK_TOKENS 16

static struct kvt_store *store;
static struct kvt_ns *ns;
static uint64_t bb;
static struct kvt_dir *dir;
static struct kvt_peer_server *srv;
static struct kvt_peer_client *cli;
static char self_id[KVT_NODE_ID_MAX + 1];

/* what this node holds, republished when it rejoins under a new epoch */
static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;
static struct kvt_key *held;
static size_t n_held, cap_held;

static void log_cb(void *arg, enum kvt_log_level lvl, const char *msg)
{
	fprintf(stderr, "[%s] %s\n", self_id, msg);
}

static void hold(const struct kvt_key *k, size_t n)
{
	pthread_mutex_lock(&held_mu);
	if (n_held + n > cap_held) {
		cap_held = (n_held + n) * 2;
		held = realloc(held, cap_held * sizeof(*held));
	}
	memcpy(held + n_held, k, n * sizeof(*k));
	n_held += n;
	pthread_mutex_unlock(&held_mu);
	kvt_dir_publish(dir, k, n, KVT_TIER_DRAM);
}

static void on_rejoin(void *arg, uint64_t epoch)
{
	pthread_mutex_lock(&held_mu);
	if (n_held)
		kvt_dir_publish(dir, held, n_held, KVT_TIER_DRAM);
	pthread_mutex_unlock(&held_mu);
}

static struct kvt_ns *find_ns(void *arg, const struct kvt_key *salt)
{
	return memcmp(kvt_ns_salt(ns), salt, sizeof(*salt)) == 0 ? ns : NULL;
}

/* The keys of the n-block chain of seed. */
static void chain(uint64_t seed, int n, struct kvt_key *keys)
{
	uint32_t tokens[MAX_BLOCKS * BLOCK_TOKENS];
	uint64_t s = seed * 2654435761u + 1;

	for (int i = 0; i < n * BLOCK_TOKENS; i++)
		tokens[i] = (uint32_t)kvt_test_rand(&s) % 151936;
	kvt_ns_prefix_keys(ns, tokens, (size_t)n * BLOCK_TOKENS, keys, (size_t)n);
}

static void block_of(const struct kvt_key *k, void *buf)
{
	uint64_t s;

	memcpy(&s, k->bytes, sizeof(s));
	kvt_test_fill(buf, bb, s | 1);
}

static void cmd_put(uint64_t seed, int n)
{
	struct kvt_key keys[MAX_BLOCKS];
	uint8_t *buf = malloc(bb);
	int put = 0;

	chain(seed, n, keys);
	for (int i = 0; i < n; i++) {
		int err;

		block_of(&keys[i], buf);
		err = kvt_put(ns, &keys[i], i ? &keys[i - 1] : NULL, buf, bb);
		if (err && err != -EEXIST)
			break;
		put++;
	}
	hold(keys, (size_t)put);
	free(buf);
	printf("ok put=%d\n", put);
}

/* Whether h lists node. */
static bool holds(const struct kvt_dir_holders *h, const char *node)
{
	for (uint32_t i = 0; i < h->n; i++)
		if (!strcmp(h->h[i].node, node))
			return true;
	return false;
}

static void cmd_fetch(uint64_t seed, int n)
{
	struct kvt_key keys[MAX_BLOCKS];
	struct kvt_dir_holders *hs = calloc(MAX_BLOCKS, sizeof(*hs));
	struct kvt_peer_item items[MAX_BLOCKS];
	struct kvt_slot slots[MAX_BLOCKS];
	uint8_t *want = malloc(bb), *got = malloc(bb);
	uint64_t t0 = kvt_now_ns();
	int local, remote = 0, fetched = 0, bad = 0, first_err = 0, i;
	const char *dstate = "ok";

	chain(seed, n, keys);
	local = kvt_lookup(ns, keys, (size_t)n, NULL);
	i = local;
	if (i < n) {
		remote = kvt_dir_lookup(dir, keys + i, (size_t)(n - i), hs + i);
		if (remote < 0) {
			dstate = remote == -ENOTCONN ? "down" : remote == -ETIMEDOUT ? "timeout" : "error";
			first_err = remote;
			remote = 0;
		}
	}
	/* fetch the prefix the directory knows, a run per holder; when a holder
	 * fails a block, the next holder of that block is tried */
	while (i < local + remote) {
		int advanced = 0;

		for (uint32_t a = 0; a < hs[i].n && !advanced; a++) {
			const struct kvt_dir_holder *h = &hs[i].h[a];
			struct kvt_peer_target t = { .node_id = h->node, .addr = h->addr,
						     .epoch = h->epoch };
			int j = i, k;

			while (j < local + remote && holds(&hs[j], h->node))
				j++;
			for (k = i; k < j; k++) {
				if (kvt_reserve(ns, &keys[k], k ? &keys[k - 1] : NULL, &slots[k]))
					break;
				items[k] = (struct kvt_peer_item){ .key = keys[k], .dst = slots[k].data };
			}
			j = k;
			kvt_peer_fetch(cli, &t, kvt_ns_salt(ns), bb, items + i, (size_t)(j - i));
			for (k = i; k < j; k++) {
				if (items[k].status || advanced != k - i) {
					if (items[k].status && !first_err)
						first_err = items[k].status;
					kvt_abort(ns, &slots[k]);
					continue;
				}
				kvt_commit(ns, &slots[k]);
				advanced++;
			}
		}
		if (!advanced)
			break; /* no holder could serve block i: the rest is a miss */
		for (int k = i; k < i + advanced; k++) {
			block_of(&keys[k], want);
			if (kvt_get(ns, &keys[k], got, bb) || memcmp(want, got, bb))
				bad++;
		}
		hold(keys + i, (size_t)advanced);
		fetched += advanced;
		i += advanced;
	}
	printf("ok local=%d remote=%d fetched=%d bad=%d miss=%d ms=%" PRIu64 " dir=%s err=%d\n",
	       local, remote, fetched, bad, n - local - fetched, (kvt_now_ns() - t0) / 1000000,
	       dstate, first_err);
	free(want);
	free(got);
	free(hs);
}

static void cmd_lookup(uint64_t seed, int n)
{
	struct kvt_key keys[MAX_BLOCKS];
	struct kvt_dir_holders *hs = calloc(MAX_BLOCKS, sizeof(*hs));

	chain(seed, n, keys);
	printf("ok remote=%d\n", kvt_dir_lookup(dir, keys, (size_t)n, hs));
	free(hs);
}

static void cmd_stats(void)
{
	struct kvt_dir_stats st;

	kvt_dir_stats(dir, &st);
	printf("ok reachable=%d epoch=%" PRIu64 " members=%u joins=%" PRIu64 "\n", st.reachable,
	       st.epoch, st.members, st.joins);
}

static void cmd_peerstats(void)
{
	struct kvt_peer_server_stats ss;
	struct kvt_peer_stats ps[16];
	uint64_t errs = 0;
	int n;

	kvt_peer_server_stats(srv, &ss);
	n = kvt_peer_client_stats(cli, ps, 16);
	for (int i = 0; i < n && i < 16; i++)
		errs += ps[i].timeouts + ps[i].conn_errors + ps[i].auth_errors + ps[i].checksum_errors;
	printf("ok auth_failures=%" PRIu64 " blocks_sent=%" PRIu64 " peer_errors=%" PRIu64 "\n",
	       ss.auth_failures, ss.blocks_sent, errs);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "id", 1, 0, 'i' },  { "listen", 1, 0, 'l' },  { "redis", 1, 0, 'r' },
		{ "secret-file", 1, 0, 's' }, { "ttl-ms", 1, 0, 't' }, { "timeout-ms", 1, 0, 'T' },
		{ "dram", 1, 0, 'd' }, { 0, 0, 0, 0 },
	};
	const char *listen = NULL, *redis = NULL, *secret_file = NULL;
	unsigned ttl = 3000, timeout = 800;
	uint64_t dram = 64ull << 20;
	struct kvt_peer_secret secret;
	struct kvt_store_opts so;
	struct kvt_ns_desc d;
	struct kvt_dir_opts dopt;
	struct kvt_peer_server_opts po;
	struct kvt_peer_client_opts co;
	char line[256];
	int c, err;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'i': snprintf(self_id, sizeof(self_id), "%s", optarg); break;
		case 'l': listen = optarg; break;
		case 'r': redis = optarg; break;
		case 's': secret_file = optarg; break;
		case 't': ttl = (unsigned)atoi(optarg); break;
		case 'T': timeout = (unsigned)atoi(optarg); break;
		case 'd': dram = strtoull(optarg, NULL, 0); break;
		default: return 2;
		}
	}
	if (!self_id[0] || !listen || !redis || !secret_file) {
		fprintf(stderr, "usage: cluster_node --id ID --listen ADDR:PORT --redis URL --secret-file F\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if ((err = kvt_peer_secret_load(secret_file, &secret))) {
		fprintf(stderr, "secret: %s\n", kvt_strerror(err));
		return 1;
	}
	kvt_store_opts_init(&so, sizeof(so));
	so.dram_bytes = dram;
	so.dram_huge_pages = false;
	so.dram_slab_bytes = 4 << 20;
	kvt_ns_desc_init(&d, sizeof(d));
	strcpy(d.model_id, "test/cluster");
	d.layout = KVT_LAYOUT_PAGED_KV;
	d.dtype = KVT_DTYPE_BF16;
	d.layers = 8;
	d.kv_heads = 2;
	d.head_dim = 64;
	d.block_tokens = BLOCK_TOKENS; /* 64 KiB blocks */
	d.tp_size = 1;
	if ((err = kvt_store_open(&so, &store)) || (err = kvt_ns_attach(store, &d, &ns))) {
		fprintf(stderr, "store: %s\n", kvt_strerror(err));
		return 1;
	}
	bb = kvt_ns_block_bytes(ns);

	kvt_peer_server_opts_init(&po, sizeof(po));
	po.listen = listen;
	po.node_id = self_id;
	po.secret = &secret;
	po.find_ns_cb = find_ns;
	po.timeout_ms = timeout;
	po.log = log_cb;
	if ((err = kvt_peer_server_open(&po, &srv))) {
		fprintf(stderr, "peer server: %s\n", kvt_strerror(err));
		return 1;
	}
	kvt_peer_client_opts_init(&co, sizeof(co));
	co.node_id = self_id;
	co.secret = &secret;
	co.timeout_ms = timeout;
	co.down_ms = 300;
	co.log = log_cb;
	if ((err = kvt_peer_client_open(&co, &cli)))
		return 1;
	kvt_dir_opts_init(&dopt, sizeof(dopt));
	dopt.url = redis;
	snprintf(dopt.self.id, sizeof(dopt.self.id), "%s", self_id);
	snprintf(dopt.self.addr, sizeof(dopt.self.addr), "%s", listen);
	dopt.member_ttl_ms = ttl;
	dopt.rejoin_cb = on_rejoin;
	dopt.log = log_cb;
	if ((err = kvt_dir_open(&dopt, &dir))) {
		fprintf(stderr, "directory: %s\n", kvt_strerror(err));
		return 1;
	}

	while (fgets(line, sizeof(line), stdin)) {
		unsigned long long seed;
		int n;

		if (sscanf(line, "put %llu %d", &seed, &n) == 2 && n > 0 && n <= MAX_BLOCKS)
			cmd_put(seed, n);
		else if (sscanf(line, "fetch %llu %d", &seed, &n) == 2 && n > 0 && n <= MAX_BLOCKS)
			cmd_fetch(seed, n);
		else if (sscanf(line, "lookup %llu %d", &seed, &n) == 2 && n > 0 && n <= MAX_BLOCKS)
			cmd_lookup(seed, n);
		else if (!strncmp(line, "stats", 5))
			cmd_stats();
		else if (!strncmp(line, "peerstats", 9))
			cmd_peerstats();
		else if (!strncmp(line, "quit", 4))
			break;
		else
			printf("error unknown command\n");
	}
	kvt_dir_close(dir);
	kvt_peer_client_close(cli);
	kvt_peer_server_close(srv);
	kvt_store_close(store);
	free(held);
	return 0;
}
