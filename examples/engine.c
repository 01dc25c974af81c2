/* SPDX-License-Identifier: Apache-2.0 */
/* An example engine in C, linked only against libkvtier-client.
 *
 * It does what an inference engine's KV connector does around kvtierd:
 * allocates paged KV memory (a sealed memfd, registered once), computes prefix
 * keys for token sequences that share prefixes, "prefills" their blocks
 * (bytes derived from each key stand in for the model's output), saves the
 * blocks kvtier lacks, drops its own copies, looks the prefixes up again and
 * loads them back into other pages, starting on each layer as it lands, and
 * compares every byte.
 *
 *   kvtier-example-engine [--socket PATH] [--token TOKEN] [--sequences N]
 *                         [--blocks N] [--seed N]
 *
 * Exit status: 0 when every byte came back, 1 otherwise. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvtier/client.h"

/* A small model so the example runs anywhere: 8 layers, 4 KV heads of 64,
 * bf16, 16 tokens per block (64 KiB blocks). */
#define LAYERS 8
#define KV_HEADS 4
#define HEAD_DIM 64
#define BLOCK_TOKENS 16
#define PAGE_BYTES (BLOCK_TOKENS * KV_HEADS * HEAD_DIM * 2)

struct engine {
	uint8_t *kv;          /* [layer][K,V][pages][PAGE_BYTES] */
	int fd;
	uint32_t pages;
	uint64_t bytes;
};

static uint8_t *page_at(const struct engine *e, uint32_t page, uint32_t layer, uint32_t kv)
{
	return e->kv + ((uint64_t)layer * 2 + kv) * e->pages * PAGE_BYTES +
	       (uint64_t)page * PAGE_BYTES;
}

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

/* What the model would have computed for the block named key, layer, K/V. */
static void prefill(uint8_t *dst, const struct kvt_key *key, uint32_t layer, uint32_t kv)
{
	uint64_t s, v;

	memcpy(&s, key->bytes, sizeof(s));
	s = mix(s ^ ((uint64_t)layer << 1 | kv));
	for (size_t i = 0; i < PAGE_BYTES; i += 8) {
		s = mix(s + 0x9e3779b97f4a7c15ull);
		v = s;
		memcpy(dst + i, &v, 8);
	}
}

static int fail(const char *what, int err)
{
	fprintf(stderr, "engine: %s: %s\n", what, kvt_strerror(err));
	return 1;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' }, { "token", required_argument, NULL, 't' },
		{ "sequences", required_argument, NULL, 'n' }, { "blocks", required_argument, NULL, 'b' },
		{ "seed", required_argument, NULL, 'r' }, { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct kvt_client_opts copts;
	struct kvt_client *c;
	struct kvt_ns_desc desc;
	struct kvt_client_ns ns;
	struct kvt_client_region region = { .size = sizeof(region) };
	struct engine e;
	unsigned sequences = 8, blocks = 8, seed = 1;
	uint64_t verified = 0, saved = 0, loaded = 0;
	int opt, err, rid;

	kvt_client_opts_init(&copts, sizeof(copts));
	while ((opt = getopt_long(argc, argv, "s:t:n:b:r:h", opts, NULL)) != -1) {
		switch (opt) {
		case 's': copts.socket_path = optarg; break;
		case 't': copts.token = optarg; break;
		case 'n': sequences = (unsigned)atoi(optarg); break;
		case 'b': blocks = (unsigned)atoi(optarg); break;
		case 'r': seed = (unsigned)atoi(optarg); break;
		default:
			printf("usage: %s [--socket PATH] [--token TOKEN] [--sequences N] "
			       "[--blocks N] [--seed N]\n", argv[0]);
			return opt == 'h' ? 0 : 2;
		}
	}
	if (sequences < 1 || blocks < 2 || blocks > 256 || sequences > 64)
		return 2;

	err = kvt_client_connect(&copts, &c);
	if (err) {
		char path[4096];

		fprintf(stderr, "engine: connect to kvtierd at %s: %s\n",
			kvt_client_socket_path(&copts, path, sizeof(path)), kvt_strerror(err));
		return 1;
	}
	kvt_ns_desc_init(&desc, sizeof(desc));
	snprintf(desc.model_id, sizeof(desc.model_id), "example/tiny-llm");
	desc.layout = KVT_LAYOUT_PAGED_KV;
	desc.dtype = KVT_DTYPE_BF16;
	desc.layers = LAYERS;
	desc.kv_heads = KV_HEADS;
	desc.head_dim = HEAD_DIM;
	desc.block_tokens = BLOCK_TOKENS;
	desc.tp_size = 1;
	err = kvt_client_hello(c, &desc, &ns);
	if (err)
		return fail("hello", err);

	/* paged KV memory: two pages per block of one sequence (save from one
	 * half, load into the other) */
	e.pages = 2 * blocks;
	e.bytes = (uint64_t)LAYERS * 2 * e.pages * PAGE_BYTES;
	e.fd = kvt_client_memfd_create("example-engine-kv", e.bytes, (void **)&e.kv);
	if (e.fd < 0)
		return fail("memfd", e.fd);
	region.memfd = e.fd;
	region.bytes = e.bytes;
	region.layers = LAYERS;
	region.pages = e.pages;
	region.page_stride = PAGE_BYTES;
	region.kv_stride = (uint64_t)e.pages * PAGE_BYTES;
	region.layer_stride = 2 * region.kv_stride;
	rid = kvt_client_register(c, &ns, &region);
	if (rid < 0)
		return fail("register", rid);

	for (unsigned s = 0; s < sequences; s++) {
		uint32_t tokens[256 * BLOCK_TOKENS], pages[256];
		struct kvt_key keys[256];
		uint64_t ticket, state = seed * 1000003ull + 1;
		int hit, n;

		/* every sequence shares its first half with sequence 0 (a system prompt) */
		for (unsigned i = 0; i < blocks * BLOCK_TOKENS; i++) {
			if (i == blocks / 2 * BLOCK_TOKENS)
				state = seed * 1000003ull + s + 2;
			state = mix(state);
			tokens[i] = (uint32_t)(state % 151936);
		}
		n = kvt_client_prefix_keys(&ns, NULL, tokens, blocks * BLOCK_TOKENS, keys, blocks);
		if (n != (int)blocks)
			return fail("prefix keys", n < 0 ? n : -EINVAL);

		/* prefill what kvtier does not have, and hand it the missing blocks */
		hit = kvt_client_lookup(c, &ns, keys, blocks, NULL);
		if (hit < 0)
			return fail("lookup", hit);
		for (unsigned i = (unsigned)hit; i < blocks; i++) {
			pages[i - hit] = i;
			for (uint32_t l = 0; l < LAYERS; l++)
				for (uint32_t kv = 0; kv < 2; kv++)
					prefill(page_at(&e, i, l, kv), &keys[i], l, kv);
		}
		if (hit < (int)blocks) {
			err = kvt_client_save(c, &ns, (uint32_t)rid, hit ? &keys[hit - 1] : NULL,
					      keys + hit, pages, blocks - (unsigned)hit, &ticket);
			if (err)
				return fail("save", err);
			err = kvt_client_wait(c, ticket, -1);
			if (err != (int)blocks - hit)
				return fail("save wait", err < 0 ? err : -EIO);
			saved += blocks - (unsigned)hit;
		}

		/* the engine evicts its copy... */
		memset(e.kv, 0, e.bytes);

		/* ...and a later request with the same prefix loads it back */
		hit = kvt_client_lookup(c, &ns, keys, blocks, NULL);
		if (hit != (int)blocks)
			return fail("lookup after save", hit < 0 ? hit : -ENOENT);
		for (unsigned i = 0; i < blocks; i++)
			pages[i] = blocks + (blocks - 1 - i);
		err = kvt_client_load(c, &ns, (uint32_t)rid, keys, pages, blocks, &ticket);
		if (err)
			return fail("load", err);
		for (uint32_t l = 0; l < LAYERS; l++) {
			uint8_t want[PAGE_BYTES];

			/* layer l is in place: attention over it could start now */
			err = kvt_client_wait_layer(c, ticket, l, -1);
			if (err)
				return fail("wait layer", err);
			for (unsigned i = 0; i < blocks; i++)
				for (uint32_t kv = 0; kv < 2; kv++) {
					prefill(want, &keys[i], l, kv);
					if (memcmp(want, page_at(&e, pages[i], l, kv), PAGE_BYTES)) {
						fprintf(stderr, "engine: sequence %u block %u layer %u: "
							"wrong bytes\n", s, i, l);
						return 1;
					}
					verified += PAGE_BYTES;
				}
		}
		err = kvt_client_wait(c, ticket, -1);
		if (err != (int)blocks)
			return fail("load wait", err < 0 ? err : -EIO);
		loaded += blocks;
	}
	printf("engine: %u sequences x %u blocks: saved %llu blocks, loaded %llu, "
	       "%llu bytes verified\n", sequences, blocks, (unsigned long long)saved,
	       (unsigned long long)loaded, (unsigned long long)verified);
	munmap(e.kv, e.bytes);
	close(e.fd);
	kvt_client_close(c);
	return 0;
}
