/* SPDX-License-Identifier: Apache-2.0 */
/* Records forged on disk with valid checksums, for every codec: blocks
 * written through the SSD tier with each codec, then, with the tier
 * closed, their payloads overwritten (noise, the frame's head scrambled, the
 * payload cut short) and their payload checksum and salted header checksum
 * made right again, as a writer who knows the format could. The reopened
 * tier adopts them; reading each gives the block or -EBADMSG, never a crash
 * or a read past a buffer (the sanitizer build checks that), and the tier
 * keeps serving the records that were left alone. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <xxhash.h>

#include "codec_test.h"
#include "ssd_test.h"
#include "tiers/codec.h"
#include "tiers/ssd.h"
#include "tiers/ssd_format.h"

#define LEN (32u << 10)
#define PER_CODEC 4 /* three forgeries and one left alone */
#define N_CODECS KVT_CODEC_LAST
#define N (N_CODECS * PER_CODEC)

static uint64_t seed;

struct seen {
	uint64_t loc[N];
	bool got[N];
};

static struct kvt_key key_of(uint32_t i)
{
	struct kvt_key k;

	memset(&k, 0x7e, sizeof(k));
	memcpy(k.bytes, &i, sizeof(i));
	return k;
}

static int seen_cb(const struct kvt_ssd_rec_info *rec, void *arg)
{
	struct seen *s = arg;
	uint32_t i;

	memcpy(&i, rec->key.bytes, sizeof(i));
	assert_true(i < N);
	s->got[i] = true;
	s->loc[i] = rec->loc;
	return 0;
}

/* Block i: bf16 of small normal values with most low bytes zero, so every
 * codec takes it. */
static void block_of(uint32_t i, uint16_t *v)
{
	uint64_t s = seed + i;

	fill_normal_bf16(v, LEN / 2, &s);
	for (size_t k = 0; k < LEN / 2; k++)
		if (k % 4)
			v[k] &= 0xff00;
}

static uint64_t meta_salt(const char *dir)
{
	char path[4200], buf[128];
	unsigned long long salt = 0;
	unsigned version;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/kvtier-ssd.meta", dir);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	n = read(fd, buf, sizeof(buf) - 1);
	assert_true(n > 0);
	buf[n] = 0;
	close(fd);
	assert_int_equal(sscanf(buf, "kvtier-ssd %u salt %llx", &version, &salt), 2);
	return salt;
}

/* Forge the records of one segment file; counts the codecs seen. */
static void forge_segment(const char *path, uint64_t salt, unsigned *codecs)
{
	int fd = open(path, O_RDWR);
	off_t size;
	char *page = aligned_alloc(4096, 4096);
	char *payload = malloc(LEN + 4096);
	uint64_t s = seed ^ 0x5eed;

	assert_true(fd >= 0);
	size = lseek(fd, 0, SEEK_END);
	for (off_t off = 4096; off + 4096 <= size; off += 4096) {
		struct kvt_ssd_hdr h;
		uint32_t i;
		int how;

		assert_int_equal(pread(fd, page, 4096, off), 4096);
		if (kvt_ssd_hdr_decode(page, salt, &h))
			continue;
		memcpy(&i, h.key.bytes, sizeof(i));
		how = (int)(i % PER_CODEC);
		codecs[h.codec]++;
		if (how == PER_CODEC - 1 || h.stored_len > LEN + 4096)
			continue; /* left alone */
		assert_int_equal(pread(fd, payload, h.stored_len, off + 4096), (ssize_t)h.stored_len);
		if (how == 0) {
			/* noise from the first byte */
			for (uint64_t k = 0; k < h.stored_len; k++)
				payload[k] = (char)kvt_test_rand(&s);
		} else if (how == 1) {
			/* the frame's head scrambled, its body kept */
			for (uint64_t k = 0; k < h.stored_len && k < 64; k++)
				payload[k] ^= (char)(kvt_test_rand(&s) | 1);
		} else {
			/* cut short: what remains is a valid prefix */
			h.stored_len /= 2;
		}
		assert_int_equal(pwrite(fd, payload, h.stored_len, off + 4096),
				 (ssize_t)h.stored_len);
		h.payload_sum = XXH3_64bits(payload, h.stored_len);
		kvt_ssd_hdr_encode(&h, salt, page);
		assert_int_equal(pwrite(fd, page, 4096, off), 4096);
	}
	fsync(fd);
	close(fd);
	free(payload);
	free(page);
}

static void forged_records_of_every_codec_are_misses_or_blocks(void **state)
{
	char *dir = ssd_test_dir("ssd_forged");
	struct kvt_ssd_opts o;
	struct kvt_ssd *ssd;
	struct kvt_codec_cfg cfg[N_CODECS + 1];
	uint16_t *v = malloc(LEN), *out = malloc(LEN);
	unsigned codecs[256] = { 0 };
	struct seen seen = { 0 };
	char path[4200];
	int bad = 0, good = 0;

	kvt_ssd_opts_init(&o, sizeof(o));
	o.dir = dir;
	o.capacity_bytes = 16ull << 20;
	o.segment_bytes = 1ull << 20;
	o.queue_depth = 8;
	assert_int_equal(kvt_ssd_open(&o, NULL, NULL, &ssd), 0);
	for (uint32_t i = 0; i < N; i++) {
		enum kvt_codec_id id = (enum kvt_codec_id)(1 + i / PER_CODEC);
		struct kvt_ssd_write w = { .ns_id = 3, .key = key_of(i), .data = v, .len = LEN };

		kvt_codec_cfg_init(&cfg[id]);
		cfg[id].id = id;
		cfg[id].min_ratio = 1.0;
		w.codec = &cfg[id];
		block_of(i, v);
		assert_int_equal(kvt_ssd_write(ssd, &w, 1), 1);
		assert_int_equal(w.res, 0);
	}
	kvt_ssd_close(ssd);
	ssd_test_drop_summaries(dir); /* the forged headers, not the summaries, are read */
	for (uint64_t id = 1; id < 64; id++) {
		snprintf(path, sizeof(path), "%s/seg-%016llx.kvt", dir, (unsigned long long)id);
		if (access(path, F_OK) == 0)
			forge_segment(path, meta_salt(dir), codecs);
	}
	for (int id = 1; id <= N_CODECS; id++)
		if (codecs[id] != PER_CODEC)
			fail_msg("codec %s: %u of %d records written with it", kvt_codec_name(id),
				 codecs[id], PER_CODEC);

	assert_int_equal(kvt_ssd_open(&o, seen_cb, &seen, &ssd), 0);
	for (uint32_t i = 0; i < N; i++) {
		struct kvt_ssd_read r = { .ns_id = 3, .key = key_of(i), .buf = out, .len = LEN };

		if (!seen.got[i])
			fail_msg("record %u (forged with valid checksums) was not adopted", i);
		r.loc = seen.loc[i];
		assert_true(kvt_ssd_read(ssd, &r, 1) >= 0);
		if (r.res != 0 && r.res != -EBADMSG)
			fail_msg("record %u (%s): read gave %d", i,
				 kvt_codec_name((enum kvt_codec_id)(1 + i / PER_CODEC)), r.res);
		bad += r.res != 0;
		if (i % PER_CODEC == PER_CODEC - 1) {
			/* left alone: the block, byte for byte */
			assert_int_equal(r.res, 0);
			block_of(i, v);
			assert_memory_equal(out, v, LEN);
			good++;
		}
	}
	fprintf(stderr, "%d forged records: %d refused as undecodable, %d decoded to some "
		"bytes; %d intact ones read back\n", N - good, bad, N - good - bad, good);
	assert_true(bad >= N_CODECS); /* noise is undecodable for every codec but raw's kin */
	kvt_ssd_close(ssd);
	kvt_test_rmdir(dir);
	free(dir);
	free(out);
	free(v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(forged_records_of_every_codec_are_misses_or_blocks),
	};

	seed = kvt_test_seed();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
