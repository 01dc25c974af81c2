/* SPDX-License-Identifier: Apache-2.0 */
/* The SSD segment log against a real O_DIRECT directory: round trips through
 * every path (aligned, staged, compressed, partial pages), recovery after
 * reopen, corrupt and torn records never served, whole-segment reclaim,
 * stale locs of reused slots, held records' segments passed by.
 * Run with the argument "threads" to force the pread/pwrite fallback. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ssd_test.h"
#include "tiers/ssd.h"
#include "tiers/ssd_format.h"

static bool force_threads;
static uint64_t seed;

/* Memory registered with the tier, as a store registers its DRAM region. */
#define REGION_BYTES (1u << 20)

struct fixture {
	char *dir;
	struct kvt_ssd_opts opts;
	struct kvt_ssd *ssd;
	char *region; /* outlives the tier */
};

static struct kvt_key key_of(uint64_t i)
{
	struct kvt_key k;

	memset(&k, 0, sizeof(k));
	memcpy(k.bytes, &i, sizeof(i));
	k.bytes[15] = 0xa5;
	return k;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	f->dir = ssd_test_dir("ssd_log");
	kvt_ssd_opts_init(&f->opts, sizeof(f->opts));
	f->opts.dir = f->dir;
	f->opts.capacity_bytes = 8ULL << 20;
	f->opts.segment_bytes = 1ULL << 20;
	f->opts.queue_depth = 8;
	f->opts.force_threads = force_threads;
	assert_int_equal(kvt_ssd_open(&f->opts, NULL, NULL, &f->ssd), 0);
	f->region = aligned_alloc(4096, REGION_BYTES);
	assert_non_null(f->region);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	kvt_ssd_close(f->ssd);
	kvt_test_rmdir(f->dir);
	free(f->region);
	free(f->dir);
	free(f);
	return 0;
}

static void *page_alloc(size_t len)
{
	void *p = aligned_alloc(4096, (len + 4095) / 4096 * 4096);

	assert_non_null(p);
	return p;
}

static uint64_t write_one(struct kvt_ssd *ssd, uint64_t i, const void *data, size_t len,
			  const struct kvt_codec_cfg *codec, int want)
{
	struct kvt_ssd_write w = { .ns_id = 7, .key = key_of(i), .parent = key_of(i - 1),
				   .has_parent = i > 0, .data = data, .len = len, .codec = codec };

	assert_int_equal(kvt_ssd_write(ssd, &w, 1), want == 0 ? 1 : 0);
	assert_int_equal(w.res, want);
	return w.loc;
}

static int read_one(struct kvt_ssd *ssd, uint64_t i, uint64_t loc, void *buf, size_t len)
{
	struct kvt_ssd_read r = { .loc = loc, .ns_id = 7, .key = key_of(i), .buf = buf, .len = len };

	kvt_ssd_read(ssd, &r, 1);
	return r.res;
}

static void blocks_round_trip_through_every_path(void **state)
{
	struct fixture *f = *state;
	struct kvt_codec_cfg lz4, shuf;
	const size_t lens[] = { 256 << 10, 100 * 1024 + 7, 12345, 64 << 10, 96 << 10, 4096 };
	enum { N = sizeof(lens) / sizeof(lens[0]) };
	struct kvt_ssd_write w[N];
	struct kvt_ssd_read r[N];
	char *src[N], *dst[N];
	struct kvt_ssd_stats st;

	kvt_codec_cfg_init(&lz4);
	lz4.id = KVT_CODEC_LZ4;
	kvt_codec_cfg_init(&shuf);
	shuf.id = KVT_CODEC_SHUF16_LZ4;
	for (int i = 0; i < N; i++) {
		src[i] = page_alloc(lens[i] + 1);
		dst[i] = page_alloc(lens[i] + 1);
		kvt_test_fill(src[i], lens[i], seed + (uint64_t)i);
		w[i] = (struct kvt_ssd_write){ .ns_id = 7, .key = key_of((uint64_t)i), .data = src[i],
					       .len = lens[i] };
	}
	/* 0: from registered memory (fixed buffers); 1: unaligned source
	 * (staged); 3: zeros via LZ4; 4: bf16-like via shuffle */
	assert_int_equal(kvt_ssd_register_region(f->ssd, f->region, REGION_BYTES), 0);
	memcpy(f->region, src[0], lens[0]);
	w[0].data = f->region;
	w[1].data = src[1] + 1;
	memmove(src[1] + 1, src[1], lens[1]);
	memset(src[3], 0, lens[3]);
	w[3].codec = &lz4;
	for (size_t j = 0; j < lens[4] / 2; j++) {
		uint16_t v = (uint16_t)(0x3f80 + (j % 64));
		memcpy(src[4] + 2 * j, &v, 2);
	}
	w[4].codec = &shuf;
	assert_int_equal(kvt_ssd_write(f->ssd, w, N), N);

	for (int i = 0; i < N; i++) {
		assert_int_equal(w[i].res, 0);
		r[i] = (struct kvt_ssd_read){ .loc = w[i].loc, .ns_id = 7, .key = w[i].key,
					      .buf = dst[i], .len = lens[i] };
	}
	r[2].buf = dst[2] + 1; /* unaligned destination */
	assert_int_equal(kvt_ssd_read(f->ssd, r, N), N);
	for (int i = 0; i < N; i++) {
		assert_int_equal(r[i].res, 0);
		assert_memory_equal(r[i].buf, w[i].data, lens[i]);
	}

	kvt_ssd_stats(f->ssd, &st);
	assert_int_equal(st.writes, N);
	assert_int_equal(st.blocks, N);
	assert_int_equal(st.compressed_writes, 2);
	assert_true(st.write_stored_bytes < st.write_raw_bytes);
	/* forced: the pool; else io_uring, unless the kernel refused it */
	if (force_threads)
		assert_false(st.io.uring);
	else
		assert_true(st.io.uring || st.io.uring_error < 0);
	if (st.io.uring)
		assert_true(st.io.fixed_ops > 0);
	assert_int_equal(st.checksum_failures, 0);
	for (int i = 0; i < N; i++) {
		free(src[i]);
		free(dst[i]);
	}
}

/* Encoded records go through stages (the codec's output, the stored bytes
 * read back); the tier keeps them and hands them out again, so 40 records
 * written and read one batch after another cost a few stages, not 80 fresh
 * allocations (each of which faulted in every page of its block). */
static void encoded_records_reuse_their_stages(void **state)
{
	struct fixture *f = *state;
	const size_t len = 64 << 10;
	struct kvt_codec_cfg pack4;
	char *src = page_alloc(len), *dst = page_alloc(len);
	uint64_t locs[40];
	struct kvt_ssd_stats st;

	kvt_codec_cfg_init(&pack4);
	pack4.id = KVT_CODEC_SHUF16_PACK4;
	for (uint64_t i = 0; i < 40; i++) {
		for (size_t j = 0; j < len / 2; j++) { /* one exponent: packs 4/3 */
			uint16_t v = (uint16_t)(0x3f80 + ((i + j) % 64));
			memcpy(src + 2 * j, &v, 2);
		}
		locs[i] = write_one(f->ssd, i, src, len, &pack4, 0);
	}
	for (uint64_t i = 0; i < 40; i++)
		assert_int_equal(read_one(f->ssd, i, locs[i], dst, len), 0);
	kvt_ssd_stats(f->ssd, &st);
	assert_int_equal(st.compressed_writes, 40);
	assert_int_equal(st.reads, 40);
	print_message("80 stages: %llu made, %llu reused\n", (unsigned long long)st.stages_made,
		      (unsigned long long)st.stages_reused);
	assert_true(st.stages_made <= 2);
	assert_int_equal(st.stages_made + st.stages_reused, 80);
	free(dst);
	free(src);
}

static void wrong_key_or_length_is_a_miss(void **state)
{
	struct fixture *f = *state;
	char *buf = page_alloc(8192), *out = page_alloc(8192);
	uint64_t loc;

	kvt_test_fill(buf, 8192, seed);
	loc = write_one(f->ssd, 1, buf, 8192, NULL, 0);
	assert_int_equal(read_one(f->ssd, 2, loc, out, 8192), -ENOENT);
	assert_int_equal(read_one(f->ssd, 1, loc, out, 4096), -ENOENT);
	assert_int_equal(read_one(f->ssd, 1, loc, out, 8192), 0);
	assert_memory_equal(buf, out, 8192);
	free(out);
	free(buf);
}

struct seen {
	size_t n;
	struct kvt_ssd_rec_info rec[512];
	uint64_t reject_key; /* reject this key index (0 = none) */
};

static int collect_cb(const struct kvt_ssd_rec_info *rec, void *arg)
{
	struct seen *s = arg;
	uint64_t i;

	memcpy(&i, rec->key.bytes, sizeof(i));
	if (s->reject_key && i == s->reject_key)
		return 1;
	assert_true(s->n < 512);
	s->rec[s->n++] = *rec;
	return 0;
}

static const struct kvt_ssd_rec_info *find_rec(const struct seen *s, uint64_t i)
{
	struct kvt_key k = key_of(i);

	for (size_t j = 0; j < s->n; j++)
		if (!memcmp(&s->rec[j].key, &k, sizeof(k)))
			return &s->rec[j];
	return NULL;
}

static void reopen(struct fixture *f, struct seen *s)
{
	kvt_ssd_close(f->ssd);
	f->ssd = NULL;
	assert_int_equal(kvt_ssd_open(&f->opts, collect_cb, s, &f->ssd), 0);
}

static void reopen_recovers_newest_copy_of_each_record(void **state)
{
	struct fixture *f = *state;
	size_t len = 40000;
	char *buf = page_alloc(len), *out = page_alloc(len);
	struct seen *s = calloc(1, sizeof(*s));
	struct kvt_ssd_stats st;

	for (uint64_t i = 1; i <= 30; i++) {
		kvt_test_fill(buf, len, seed + i);
		write_one(f->ssd, i, buf, len, NULL, 0);
	}
	kvt_test_fill(buf, len, seed + 1000);
	write_one(f->ssd, 5, buf, len, NULL, 0); /* a newer copy of key 5 */
	s->reject_key = 9;
	reopen(f, s);

	assert_int_equal(s->n, 29);
	for (size_t j = 1; j < s->n; j++)
		assert_true(s->rec[j - 1].seq < s->rec[j].seq);
	for (uint64_t i = 1; i <= 30; i++) {
		const struct kvt_ssd_rec_info *r = find_rec(s, i);
		if (i == 9) {
			assert_null(r);
			continue;
		}
		assert_non_null(r);
		assert_int_equal(r->ns_id, 7);
		assert_int_equal(r->raw_len, len);
		assert_true(r->has_parent);
		assert_memory_equal(&r->parent, key_of(i - 1).bytes, 16);
		kvt_test_fill(buf, len, seed + (i == 5 ? 1000 : i));
		assert_int_equal(read_one(f->ssd, i, r->loc, out, len), 0);
		assert_memory_equal(buf, out, len);
	}
	kvt_ssd_stats(f->ssd, &st);
	assert_int_equal(st.recovered, 29);
	assert_int_equal(st.recovery_superseded, 1);
	assert_int_equal(st.recovery_torn + st.recovery_corrupt, 0);
	assert_int_equal(st.blocks, 29);
	/* read from the summaries written at close, not scanned */
	assert_int_equal(st.recovery_scanned, 0);
	assert_true(st.recovery_summaries > 0);
	/* writing after recovery goes on in the last segment, seq increasing */
	write_one(f->ssd, 31, buf, len, NULL, 0);
	memset(s, 0, sizeof(*s));
	reopen(f, s);
	assert_int_equal(s->n, 31);
	assert_memory_equal(&s->rec[30].key, key_of(31).bytes, 16);
	free(s);
	free(out);
	free(buf);
}

/* Open the segment file holding loc; *off receives the record's offset. */
static int open_record(struct fixture *f, uint64_t loc, int flags, off_t *off)
{
	char path[4096];

	/* the tier's loc: slot:16 at bit 24, page:24 at bit 0; segment ids are
	 * created in order from 1 in a fresh directory, one slot per segment */
	snprintf(path, sizeof(path), "%s/seg-%016llx.kvt", f->dir,
		 (unsigned long long)((loc >> 24) & 0xffff) + 1);
	*off = (off_t)((loc & 0xffffff) * 4096);
	return open(path, flags);
}

static void poke(struct fixture *f, uint64_t loc, uint64_t at, const void *bytes, size_t n)
{
	off_t off;
	int fd = open_record(f, loc, O_WRONLY, &off);

	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, bytes, n, off + (off_t)at), (ssize_t)n);
	assert_int_equal(fsync(fd), 0);
	close(fd);
}

static void peek(struct fixture *f, uint64_t loc, uint64_t at, void *bytes, size_t n)
{
	off_t off;
	int fd = open_record(f, loc, O_RDONLY, &off);

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, bytes, n, off + (off_t)at), (ssize_t)n);
	close(fd);
}

/* XOR bytes of a record in place: unlike writing a fixed value, this always
 * changes them, whatever the random data held there. */
static void flip(struct fixture *f, uint64_t loc, uint64_t at, const void *mask, size_t n)
{
	unsigned char cur[16];

	assert_true(n <= sizeof(cur));
	peek(f, loc, at, cur, n);
	for (size_t k = 0; k < n; k++)
		cur[k] ^= ((const unsigned char *)mask)[k];
	poke(f, loc, at, cur, n);
}

static void corrupt_records_are_never_served(void **state)
{
	struct fixture *f = *state;
	size_t len = 64 << 10;
	char *buf = page_alloc(len), *out = page_alloc(len);
	struct seen *s = calloc(1, sizeof(*s));
	uint64_t loc[6];
	struct kvt_ssd_stats st;
	struct kvt_codec_cfg lz4;

	kvt_codec_cfg_init(&lz4);
	lz4.id = KVT_CODEC_LZ4;
	for (uint64_t i = 0; i < 6; i++) {
		kvt_test_fill(buf, len, seed + i);
		if (i == 4)
			memset(buf, 0, len / 2);
		loc[i] = write_one(f->ssd, i, buf, len, i == 4 ? &lz4 : NULL, 0);
	}
	/* more than a batch after them (15 records of 17 pages fill a 1 MiB
	 * segment): damage in the first segment cannot be a torn write */
	for (uint64_t i = 100; i < 180; i++) {
		kvt_test_fill(buf, len, seed + i);
		write_one(f->ssd, i, buf, len, NULL, 0);
	}
	/* one flipped payload byte (raw), one flipped header byte, one flipped
	 * byte of a compressed payload, one payload zeroed as by a torn write */
	flip(f, loc[1], 4096 + 777, "\x5a", 1);
	flip(f, loc[2], 40, "\x01", 1);
	flip(f, loc[4], 4096 + 3, "\xff\xfe", 2);
	char *zero = calloc(1, len);
	poke(f, loc[5], 4096, zero, len);
	free(zero);

	for (uint64_t i = 0; i < 6; i++) {
		int rc = read_one(f->ssd, i, loc[i], out, len);
		kvt_test_fill(buf, len, seed + i);
		/* 2: reads fetch only the payload, verified against the checksum
		 * the header carried at write time: a later header corruption
		 * costs the record at recovery, never a wrong byte */
		if (i == 0 || i == 2 || i == 3) {
			assert_int_equal(rc, 0);
			assert_memory_equal(out, buf, len);
		} else {
			assert_int_equal(rc, -EBADMSG);
		}
	}
	kvt_ssd_stats(f->ssd, &st);
	assert_int_equal(st.checksum_failures, 3);

	/* as after a crash (no summaries): the scan finds the four damaged
	 * records, corrupt rather than torn (all earlier writes completed) */
	kvt_ssd_close(f->ssd);
	f->ssd = NULL;
	assert_true(ssd_test_drop_summaries(f->dir) > 0);
	assert_int_equal(kvt_ssd_open(&f->opts, collect_cb, s, &f->ssd), 0);
	kvt_ssd_stats(f->ssd, &st);
	assert_int_equal(s->n, 2 + 80);
	assert_non_null(find_rec(s, 0));
	assert_non_null(find_rec(s, 3));
	assert_int_equal(st.recovery_corrupt, 4);
	assert_int_equal(st.recovery_torn, 0);
	assert_true(st.recovery_scanned > 0);
	for (uint64_t i = 0; i < 6; i++)
		if (i != 0 && i != 3)
			assert_null(find_rec(s, i));
	free(s);
	free(out);
	free(buf);
}

static void dead_segments_are_released_and_space_reused(void **state)
{
	struct fixture *f = *state;
	size_t len = 256 << 10; /* 65 pages a record: 3 per 1 MiB segment */
	char *buf = page_alloc(len), *out = page_alloc(len);
	uint64_t loc[64];
	struct kvt_ssd_stats st;
	struct kvt_ssd_rec_info dropped[8];
	int n = 0;

	kvt_ssd_close(f->ssd);
	f->opts.capacity_bytes = 4ULL << 20;
	f->opts.reclaim_live_fraction = 0.3;
	assert_int_equal(kvt_ssd_open(&f->opts, NULL, NULL, &f->ssd), 0);
	kvt_test_fill(buf, len, seed);

	for (;; n++) {
		struct kvt_ssd_write w = { .ns_id = 7, .key = key_of((uint64_t)n), .data = buf, .len = len };
		kvt_ssd_write(f->ssd, &w, 1);
		if (w.res == -ENOSPC)
			break;
		assert_int_equal(w.res, 0);
		loc[n] = w.loc;
	}
	assert_int_equal(n, 12);
	kvt_ssd_stats(f->ssd, &st);
	assert_int_equal(st.segments, 4);

	/* free a whole segment: it is deleted, and the next write fits */
	for (int i = 0; i < 3; i++)
		kvt_ssd_free(f->ssd, loc[i]);
	kvt_ssd_stats(f->ssd, &st);
	assert_int_equal(st.segments_released, 1);
	assert_int_equal(st.segments, 3);
	loc[n] = write_one(f->ssd, (uint64_t)n, buf, len, NULL, 0);
	n++;

	/* leave one live record in segment 2 (22% live): released when room is
	 * needed, its record reported as dropped */
	kvt_ssd_free(f->ssd, loc[3]);
	kvt_ssd_free(f->ssd, loc[4]);
	assert_int_equal(kvt_ssd_take_dropped(f->ssd, dropped, 8), 0);
	write_one(f->ssd, (uint64_t)n, buf, len, NULL, 0);
	write_one(f->ssd, (uint64_t)n + 1, buf, len, NULL, 0);
	write_one(f->ssd, (uint64_t)n + 2, buf, len, NULL, 0);
	assert_int_equal(kvt_ssd_take_dropped(f->ssd, dropped, 8), 1);
	assert_int_equal(dropped[0].loc, loc[5]);
	assert_memory_equal(&dropped[0].key, key_of(5).bytes, 16);
	assert_int_equal(read_one(f->ssd, 5, loc[5], out, len), -ENOENT);
	/* a segment more than 30% live is not released: the caller must evict */
	write_one(f->ssd, 100, buf, len, NULL, 0);
	write_one(f->ssd, 101, buf, len, NULL, 0);
	write_one(f->ssd, 102, buf, len, NULL, -ENOSPC);
	kvt_ssd_stats(f->ssd, &st);
	assert_int_equal(st.reclaim_dropped, 1);
	assert_int_equal(st.blocks, 12);
	assert_true(st.used_bytes <= st.capacity_bytes);
	assert_int_equal(read_one(f->ssd, 6, loc[6], out, len), 0);
	assert_memory_equal(out, buf, len);
	free(out);
	free(buf);
}

/* Slots are reused: a record written where a released segment's record sat
 * (same slot, same page, same size) gets a different loc, and the old loc
 * frees and reads nothing. A held record's segment is never released; the
 * next emptiest one is, and with none left the write gets -ENOSPC. */
static void stale_locs_and_held_records_survive_reclaim(void **state)
{
	struct fixture *f = *state;
	size_t len = 256 << 10; /* 65 pages a record: 3 per 1 MiB segment */
	char *buf = page_alloc(len), *out = page_alloc(len);
	uint64_t loc[16];
	struct kvt_ssd_stats st;
	struct kvt_ssd_rec_info dropped[8];

	kvt_ssd_close(f->ssd);
	f->opts.capacity_bytes = 4ULL << 20;
	f->opts.reclaim_live_fraction = 0.3;
	assert_int_equal(kvt_ssd_open(&f->opts, NULL, NULL, &f->ssd), 0);
	kvt_test_fill(buf, len, seed);
	for (uint64_t i = 0; i < 12; i++)
		loc[i] = write_one(f->ssd, i, buf, len, NULL, 0);

	/* segments 0 and 1 each keep one live record (25%); 2 is held */
	kvt_ssd_free(f->ssd, loc[0]);
	kvt_ssd_free(f->ssd, loc[1]);
	kvt_ssd_free(f->ssd, loc[3]);
	kvt_ssd_free(f->ssd, loc[4]);
	assert_int_equal(kvt_ssd_hold(f->ssd, loc[2], +1), 0);
	assert_int_equal(kvt_ssd_hold(f->ssd, loc[2], +1), 0); /* holds nest */
	assert_int_equal(kvt_ssd_hold(f->ssd, loc[2], -1), 0);
	assert_int_equal(kvt_ssd_hold(f->ssd, loc[0], +1), -ENOENT); /* freed */

	/* room is made by releasing segment 1, not the held record's 0; the
	 * new segment takes slot 1 again, its first record at loc[3]'s page */
	loc[12] = write_one(f->ssd, 12, buf, len, NULL, 0);
	assert_int_equal(kvt_ssd_take_dropped(f->ssd, dropped, 8), 1);
	assert_int_equal(dropped[0].loc, loc[5]);
	assert_true(loc[12] != loc[3] && loc[12] != loc[4] && loc[12] != loc[5]);
	assert_true(loc[12] != 0);

	/* stale locs (freed, or dropped with their segment) free nothing */
	kvt_ssd_stats(f->ssd, &st);
	uint64_t blocks = st.blocks;
	kvt_ssd_free(f->ssd, loc[3]);
	kvt_ssd_free(f->ssd, loc[4]);
	kvt_ssd_free(f->ssd, loc[5]);
	kvt_ssd_free(f->ssd, loc[0]);
	kvt_ssd_stats(f->ssd, &st);
	assert_int_equal(st.blocks, blocks);
	assert_int_equal(read_one(f->ssd, 12, loc[12], out, len), 0);
	assert_memory_equal(out, buf, len);
	assert_int_equal(read_one(f->ssd, 5, loc[5], out, len), -ENOENT);
	assert_int_equal(read_one(f->ssd, 12, loc[3], out, len), -ENOENT);
	assert_int_equal(kvt_ssd_hold(f->ssd, loc[5], +1), -ENOENT);

	/* fill the new segment; then only the held segment is empty enough */
	loc[13] = write_one(f->ssd, 13, buf, len, NULL, 0);
	loc[14] = write_one(f->ssd, 14, buf, len, NULL, 0);
	write_one(f->ssd, 15, buf, len, NULL, -ENOSPC);
	assert_int_equal(kvt_ssd_take_dropped(f->ssd, dropped, 8), 0);
	assert_int_equal(read_one(f->ssd, 2, loc[2], out, len), 0);
	assert_memory_equal(out, buf, len);

	/* released, it goes like any other */
	assert_int_equal(kvt_ssd_hold(f->ssd, loc[2], -1), 0);
	assert_int_equal(kvt_ssd_hold(f->ssd, loc[2], -1), -ENOENT);
	loc[15] = write_one(f->ssd, 15, buf, len, NULL, 0);
	assert_int_equal(kvt_ssd_take_dropped(f->ssd, dropped, 8), 1);
	assert_int_equal(dropped[0].loc, loc[2]);
	assert_int_equal(read_one(f->ssd, 2, loc[2], out, len), -ENOENT);
	for (uint64_t i = 12; i < 16; i++) {
		assert_int_equal(read_one(f->ssd, i, loc[i], out, len), 0);
		assert_memory_equal(out, buf, len);
	}
	/* a freed held record takes its holds with it */
	assert_int_equal(kvt_ssd_hold(f->ssd, loc[15], +1), 0);
	kvt_ssd_free(f->ssd, loc[15]);
	assert_int_equal(kvt_ssd_hold(f->ssd, loc[15], -1), -ENOENT);
	free(out);
	free(buf);
}

static void records_larger_than_the_scan_window_recover(void **state)
{
	struct fixture *f = *state;
	size_t big = (6 << 20) + 123, small = 10000;
	char *a = page_alloc(big), *b = page_alloc(small), *out = page_alloc(big);
	struct seen *s = calloc(1, sizeof(*s));
	const struct kvt_ssd_rec_info *r;

	kvt_ssd_close(f->ssd);
	f->opts.segment_bytes = 16 << 20;
	f->opts.capacity_bytes = 32 << 20;
	assert_int_equal(kvt_ssd_open(&f->opts, NULL, NULL, &f->ssd), 0);
	kvt_test_fill(a, big, seed);
	kvt_test_fill(b, small, seed + 1);
	write_one(f->ssd, 1, b, small, NULL, 0);
	write_one(f->ssd, 2, a, big, NULL, 0); /* recovery reads it outside its 4 MiB window */
	write_one(f->ssd, 3, b, small, NULL, 0);
	reopen(f, s);
	assert_int_equal(s->n, 3);
	assert_non_null(r = find_rec(s, 2));
	assert_int_equal(read_one(f->ssd, 2, r->loc, out, big), 0);
	assert_memory_equal(out, a, big);
	assert_non_null(r = find_rec(s, 3));
	assert_int_equal(read_one(f->ssd, 3, r->loc, out, small), 0);
	assert_memory_equal(out, b, small);
	free(s);
	free(out);
	free(b);
	free(a);
}

static void oversized_and_bad_arguments_are_refused(void **state)
{
	struct fixture *f = *state;
	size_t len = 2 << 20;
	char *buf = page_alloc(len);
	struct kvt_ssd_opts o = f->opts;
	struct kvt_ssd *other;

	memset(buf, 1, len);
	write_one(f->ssd, 1, buf, len, NULL, -EFBIG);
	write_one(f->ssd, 1, NULL, len, NULL, -EINVAL);
	/* the directory is locked by the open tier */
	assert_int_equal(kvt_ssd_open(&o, NULL, NULL, &other), -EBUSY);
	o.segment_bytes = 1000;
	assert_int_equal(kvt_ssd_open(&o, NULL, NULL, &other), -EINVAL);
	free(buf);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(blocks_round_trip_through_every_path, setup, teardown),
		cmocka_unit_test_setup_teardown(encoded_records_reuse_their_stages, setup, teardown),
		cmocka_unit_test_setup_teardown(wrong_key_or_length_is_a_miss, setup, teardown),
		cmocka_unit_test_setup_teardown(reopen_recovers_newest_copy_of_each_record, setup, teardown),
		cmocka_unit_test_setup_teardown(corrupt_records_are_never_served, setup, teardown),
		cmocka_unit_test_setup_teardown(dead_segments_are_released_and_space_reused, setup, teardown),
		cmocka_unit_test_setup_teardown(stale_locs_and_held_records_survive_reclaim, setup,
						teardown),
		cmocka_unit_test_setup_teardown(records_larger_than_the_scan_window_recover, setup, teardown),
		cmocka_unit_test_setup_teardown(oversized_and_bad_arguments_are_refused, setup, teardown),
	};

	force_threads = argc > 1 && !strcmp(argv[1], "threads");
	if (!force_threads)
		kvt_test_need_io_uring();
	seed = kvt_test_seed();
	return cmocka_run_group_tests_name(force_threads ? "ssd_log (thread pool)" : "ssd_log (io_uring)",
					   tests, NULL, NULL);
}
