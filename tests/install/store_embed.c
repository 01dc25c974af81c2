/* SPDX-License-Identifier: Apache-2.0 */
/* A program that embeds the store, built against an installed kvtier with
 * `pkg-config --static --cflags --libs kvtier` (the install test compiles it
 * against the staged prefix): it opens a store with a DRAM and an SSD tier,
 * puts a chain of blocks, looks the prefix up and reads every block back.
 *
 *   store_embed SSD_DIR
 *
 * Exit status: 0 when every byte came back, 1 otherwise. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvtier/store.h>

#define BLOCKS 32

static int fail(const char *what, int err)
{
	fprintf(stderr, "store_embed: %s: %s\n", what, kvt_strerror(err));
	return 1;
}

int main(int argc, char **argv)
{
	struct kvt_store_opts o;
	struct kvt_ns_desc d;
	struct kvt_key keys[BLOCKS];
	struct kvt_store *s;
	struct kvt_ns *ns;
	uint32_t tokens[BLOCKS * 16];
	uint8_t tiers[BLOCKS];
	uint8_t *buf, *back;
	uint64_t bytes;
	int err, n, rc = 1;

	if (argc != 2) {
		fprintf(stderr, "usage: store_embed SSD_DIR\n");
		return 2;
	}
	kvt_store_opts_init(&o, sizeof(o));
	o.dram_bytes = 8 << 20;
	o.dram_huge_pages = false;
	o.ssd_dir = argv[1];
	o.ssd_bytes = 32 << 20;
	err = kvt_store_open(&o, &s);
	if (err)
		return fail("kvt_store_open", err);
	kvt_ns_desc_init(&d, sizeof(d));
	snprintf(d.model_id, sizeof(d.model_id), "example/embedded");
	d.layout = KVT_LAYOUT_PAGED_KV;
	d.dtype = KVT_DTYPE_BF16;
	d.layers = 4;
	d.kv_heads = 4;
	d.head_dim = 64;
	d.block_tokens = 16;
	d.tp_size = 1;
	err = kvt_ns_attach(s, &d, &ns);
	if (err) {
		fail("kvt_ns_attach", err);
		goto out_store;
	}
	bytes = kvt_ns_block_bytes(ns);
	buf = malloc(bytes);
	back = malloc(bytes);
	if (!buf || !back)
		goto out_buf;
	for (size_t i = 0; i < BLOCKS * 16; i++)
		tokens[i] = (uint32_t)(i * 2654435761u);
	n = kvt_ns_prefix_keys(ns, tokens, BLOCKS * 16, keys, BLOCKS);
	if (n != BLOCKS) {
		fail("kvt_ns_prefix_keys", n < 0 ? n : -EINVAL);
		goto out_buf;
	}
	for (int b = 0; b < BLOCKS; b++) {
		memset(buf, b + 1, bytes);
		memcpy(buf, &keys[b], sizeof(keys[b]));
		err = kvt_put(ns, &keys[b], b ? &keys[b - 1] : NULL, buf, bytes);
		if (err) {
			fail("kvt_put", err);
			goto out_buf;
		}
	}
	n = kvt_lookup(ns, keys, BLOCKS, tiers);
	if (n != BLOCKS) {
		fprintf(stderr, "store_embed: lookup found %d of %d blocks\n", n, BLOCKS);
		goto out_buf;
	}
	for (int b = 0; b < BLOCKS; b++) {
		memset(buf, b + 1, bytes);
		memcpy(buf, &keys[b], sizeof(keys[b]));
		err = kvt_get(ns, &keys[b], back, bytes);
		if (err) {
			fail("kvt_get", err);
			goto out_buf;
		}
		if (memcmp(buf, back, bytes)) {
			fprintf(stderr, "store_embed: block %d came back different\n", b);
			goto out_buf;
		}
	}
	printf("store_embed: %d blocks of %llu bytes stored and read back\n", BLOCKS,
	       (unsigned long long)bytes);
	rc = 0;
out_buf:
	free(back);
	free(buf);
out_store:
	kvt_store_close(s);
	return rc;
}
