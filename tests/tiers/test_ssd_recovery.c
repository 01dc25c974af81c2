/* SPDX-License-Identifier: Apache-2.0 */
/* What the SSD tier finds in its directory when it opens, on real O_DIRECT
 * files: a lost or emptied meta file is rebuilt from the segments'
 * superblocks; segment files of another directory, unreadable ones and ones
 * of the old format are moved to quarantine/, never deleted; files named like
 * segments that are not (directories, FIFOs, links, ids out of range) are
 * left in place and reported, and never make the tier wrap its segment ids;
 * a reopened tier goes on appending to its last segment; tombstones keep
 * removed records removed and are themselves let go; summaries spare the
 * scan and are checked before they are trusted; a segment made ahead and
 * left empty by a crash is continued; a degraded tier comes back
 * after a probe. Run with the argument "threads" for the thread pool. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "ssd_test.h"
#include "tiers/ssd.h"

#define LEN (40u << 10) /* 11 pages a record: 23 per 1 MiB segment */

static bool force_threads;
static uint64_t seed;

struct fixture {
	char *dir;
	struct kvt_ssd_opts opts;
	struct kvt_ssd *ssd;
	char *buf, *out;
	/* what the last open reported */
	uint64_t seen_loc[1024];
	bool seen[1024];
	size_t n_seen;
};

static struct kvt_key key_of(uint64_t i)
{
	struct kvt_key k;

	memset(&k, 0x3c, sizeof(k));
	memcpy(k.bytes, &i, sizeof(i));
	return k;
}

static int seen_cb(const struct kvt_ssd_rec_info *rec, void *arg)
{
	struct fixture *f = arg;
	uint64_t i;

	memcpy(&i, rec->key.bytes, sizeof(i));
	assert_true(i < 1024);
	assert_false(f->seen[i]);
	f->seen[i] = true;
	f->seen_loc[i] = rec->loc;
	f->n_seen++;
	return 0;
}

static int tier_open(struct fixture *f)
{
	memset(f->seen, 0, sizeof(f->seen));
	f->n_seen = 0;
	return kvt_ssd_open(&f->opts, seen_cb, f, &f->ssd);
}

static void reopen(struct fixture *f)
{
	kvt_ssd_close(f->ssd);
	f->ssd = NULL;
	assert_int_equal(tier_open(f), 0);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	f->dir = ssd_test_dir("ssd_recovery");
	kvt_ssd_opts_init(&f->opts, sizeof(f->opts));
	f->opts.dir = f->dir;
	f->opts.capacity_bytes = 16ULL << 20;
	f->opts.segment_bytes = 1ULL << 20;
	f->opts.queue_depth = 8;
	f->opts.force_threads = force_threads;
	f->buf = aligned_alloc(4096, LEN);
	f->out = aligned_alloc(4096, LEN);
	assert_int_equal(tier_open(f), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	kvt_ssd_close(f->ssd);
	kvt_test_rmdir(f->dir);
	free(f->dir);
	free(f->buf);
	free(f->out);
	free(f);
	return 0;
}

static uint64_t put(struct fixture *f, uint64_t i)
{
	struct kvt_ssd_write w = { .ns_id = 9, .key = key_of(i), .data = f->buf, .len = LEN };

	kvt_test_fill(f->buf, LEN, seed + i);
	assert_int_equal(kvt_ssd_write(f->ssd, &w, 1), 1);
	assert_int_equal(w.res, 0);
	return w.loc;
}

static void tomb(struct fixture *f, uint64_t i, uint64_t seq)
{
	struct kvt_ssd_write w = { .ns_id = 9, .key = key_of(i), .tomb = true, .seq = seq };

	assert_int_equal(kvt_ssd_write(f->ssd, &w, 1), 1);
	assert_int_equal(w.res, 0);
}

/* Record i was reported by the last open and reads back intact. */
static void assert_there(struct fixture *f, uint64_t i)
{
	struct kvt_ssd_read r = { .ns_id = 9, .key = key_of(i), .buf = f->out, .len = LEN };

	if (!f->seen[i])
		fail_msg("record %llu was not recovered", (unsigned long long)i);
	r.loc = f->seen_loc[i];
	assert_int_equal(kvt_ssd_read(f->ssd, &r, 1), 1);
	kvt_test_fill(f->buf, LEN, seed + i);
	assert_memory_equal(f->out, f->buf, LEN);
}

static void path_of(const struct fixture *f, const char *name, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s", f->dir, name);
}

static bool exists(const struct fixture *f, const char *name)
{
	char p[4096];
	struct stat st;

	path_of(f, name, p, sizeof(p));
	return lstat(p, &st) == 0;
}

static void read_file(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY);
	ssize_t n;

	assert_true(fd >= 0);
	n = read(fd, buf, len - 1);
	assert_true(n >= 0);
	buf[n] = 0;
	close(fd);
}

/* A lost meta file (deleted, or emptied) costs nothing: the salt is in
 * every segment's superblock; the file is written again and that is logged. */
static void lost_meta_file_is_rebuilt_from_the_segments(void **state)
{
	struct fixture *f = *state;
	char meta[4096], before[128], after[128];
	struct kvt_ssd_stats st;

	for (uint64_t i = 0; i < 60; i++)
		put(f, i);
	path_of(f, "kvtier-ssd.meta", meta, sizeof(meta));
	read_file(meta, before, sizeof(before));
	for (int round = 0; round < 2; round++) {
		kvt_ssd_close(f->ssd);
		f->ssd = NULL;
		if (round == 0)
			assert_int_equal(unlink(meta), 0);
		else
			assert_int_equal(truncate(meta, 0), 0);
		assert_int_equal(tier_open(f), 0);
		assert_int_equal(f->n_seen, 60);
		for (uint64_t i = 0; i < 60; i++)
			assert_there(f, i);
		read_file(meta, after, sizeof(after));
		assert_string_equal(after, before);
		kvt_ssd_stats(f->ssd, &st);
		assert_int_equal(st.quarantined, 0);
		assert_int_equal(st.segments, 3);
	}
}

/* Copy src (a file) to dst. */
static void copy_file(const char *src, const char *dst)
{
	char cmd[9000];

	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", src, dst);
	assert_int_equal(system(cmd), 0);
}

/* Segment files recovery cannot use are moved to quarantine/, not deleted:
 * one of another directory (another salt), garbage under a segment's name,
 * one without a superblock (format 1), one whose superblock names another
 * segment. The tier's own records are untouched. */
static void unusable_segments_are_quarantined_never_deleted(void **state)
{
	struct fixture *f = *state;
	char *other = ssd_test_dir("ssd_recovery_other"), src[4096], dst[4096];
	struct kvt_ssd_opts o = f->opts;
	struct kvt_ssd *ssd2;
	struct kvt_ssd_write w = { .ns_id = 9, .data = f->buf, .len = LEN };
	struct kvt_ssd_stats st;
	int fd;

	for (uint64_t i = 0; i < 30; i++)
		put(f, i); /* segments 1 and 2 */
	o.dir = other;
	assert_int_equal(kvt_ssd_open(&o, NULL, NULL, &ssd2), 0);
	for (uint64_t i = 0; i < 80; i++) { /* segments 1 to 4 */
		w.key = key_of(500 + i);
		kvt_test_fill(f->buf, LEN, seed + 500 + i);
		assert_int_equal(kvt_ssd_write(ssd2, &w, 1), 1);
	}
	kvt_ssd_close(ssd2);
	kvt_ssd_close(f->ssd);
	f->ssd = NULL;

	snprintf(src, sizeof(src), "%s/seg-0000000000000004.kvt", other);
	path_of(f, "seg-0000000000000004.kvt", dst, sizeof(dst));
	copy_file(src, dst); /* another directory's salt */
	path_of(f, "seg-0000000000000042.kvt", dst, sizeof(dst));
	fd = open(dst, O_WRONLY | O_CREAT, 0644);
	assert_true(fd >= 0);
	kvt_test_fill(f->buf, LEN, 1);
	assert_int_equal(write(fd, f->buf, LEN), LEN); /* garbage */
	close(fd);
	path_of(f, "seg-0000000000000043.kvt", dst, sizeof(dst));
	fd = open(dst, O_WRONLY | O_CREAT, 0644);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 1 << 20), 0); /* zeros: no superblock */
	close(fd);
	path_of(f, "seg-0000000000000001.kvt", src, sizeof(src));
	path_of(f, "seg-0000000000000044.kvt", dst, sizeof(dst));
	copy_file(src, dst); /* a superblock that names segment 1 */

	assert_int_equal(tier_open(f), 0);
	kvt_ssd_stats(f->ssd, &st);
	assert_int_equal(f->n_seen, 30);
	for (uint64_t i = 0; i < 30; i++)
		assert_there(f, i);
	assert_int_equal(st.quarantined, 4);
	assert_false(st.degraded);
	assert_int_equal(ssd_test_count(f->dir, "seg-", ".kvt"), 2);
	snprintf(dst, sizeof(dst), "%s/quarantine", f->dir);
	assert_int_equal(ssd_test_count(dst, "seg-00000000000000", ".kvt"), 4);
	snprintf(src, sizeof(src), "%s/quarantine/seg-0000000000000004.kvt", f->dir);
	assert_int_equal(access(src, F_OK), 0);
	/* and the tier writes on, under new ids */
	put(f, 100);
	reopen(f);
	assert_there(f, 100);
	kvt_test_rmdir(other);
	free(other);
}

/* Files named like segments that are not ours are skipped, reported and
 * left alone; a name with the largest id does not make the tier wrap its
 * ids to 0 (or reuse one). */
static void foreign_files_are_left_in_place(void **state)
{
	struct fixture *f = *state;
	char p[4096], q[4096];
	struct kvt_ssd_stats st;
	int fd;

	for (uint64_t i = 0; i < 10; i++)
		put(f, i);
	kvt_ssd_close(f->ssd);
	f->ssd = NULL;
	path_of(f, "seg-0000000000000005.kvt", p, sizeof(p));
	assert_int_equal(mkdir(p, 0755), 0);
	path_of(f, "seg-0000000000000006.kvt", p, sizeof(p));
	assert_int_equal(mkfifo(p, 0644), 0);
	path_of(f, "seg-0000000000000001.kvt", q, sizeof(q));
	path_of(f, "seg-0000000000000007.kvt", p, sizeof(p));
	assert_int_equal(symlink(q, p), 0);
	path_of(f, "seg-ffffffffffffffff.kvt", p, sizeof(p));
	fd = open(p, O_WRONLY | O_CREAT, 0644);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 1 << 20), 0);
	close(fd);
	path_of(f, "seg-notahexnumber.kvt", p, sizeof(p));
	fd = open(p, O_WRONLY | O_CREAT, 0644);
	assert_true(fd >= 0);
	close(fd);

	assert_int_equal(tier_open(f), 0);
	kvt_ssd_stats(f->ssd, &st);
	assert_int_equal(st.foreign, 5);
	assert_int_equal(st.quarantined, 0);
	assert_false(st.degraded);
	for (uint64_t i = 0; i < 10; i++)
		assert_there(f, i);
	/* fill the last segment and more: new segments get ids after 7, never 0 */
	for (uint64_t i = 10; i < 60; i++)
		put(f, i);
	kvt_ssd_stats(f->ssd, &st);
	assert_false(st.degraded);
	assert_false(exists(f, "seg-0000000000000000.kvt"));
	assert_true(exists(f, "seg-0000000000000008.kvt"));
	assert_true(exists(f, "seg-0000000000000005.kvt"));
	assert_true(exists(f, "seg-0000000000000006.kvt"));
	assert_true(exists(f, "seg-0000000000000007.kvt"));
	assert_true(exists(f, "seg-ffffffffffffffff.kvt"));
	assert_true(exists(f, "seg-notahexnumber.kvt"));
	reopen(f);
	for (uint64_t i = 0; i < 60; i++)
		assert_there(f, i);
}

/* Graceful restarts do not seal the segment being filled: after 40 of them,
 * with a few records each, the tier still holds its records in few segments
 * and has released none for lack of room. */
static void reopened_tier_appends_to_its_last_segment(void **state)
{
	struct fixture *f = *state;
	struct kvt_ssd_stats st;
	uint64_t n = 0;

	for (int round = 0; round < 40; round++) {
		for (int k = 0; k < 3; k++)
			put(f, n++);
		reopen(f);
		assert_int_equal(f->n_seen, n);
	}
	kvt_ssd_stats(f->ssd, &st);
	for (uint64_t i = 0; i < n; i++)
		assert_there(f, i);
	/* 120 records of 11 pages: 6 segments of 23 */
	assert_int_equal(st.segments, (n + 22) / 23);
	assert_int_equal(st.reclaim_dropped, 0);
	assert_int_equal(st.recovery_scanned, 0);
}

/* A tombstone hides older records of its key at recovery, never newer ones
 * (a tombstone's sequence number is taken when the removal happens, so a
 * record written after it wins even if the tombstone reaches the log later). */
static void tombstones_hide_older_records_only(void **state)
{
	struct fixture *f = *state;
	struct kvt_ssd_stats st;
	uint64_t seq_before;

	for (uint64_t i = 0; i < 10; i++)
		put(f, i);
	tomb(f, 3, 0);
	tomb(f, 4, 0);
	seq_before = kvt_ssd_seq_reserve(f->ssd);
	put(f, 4); /* written again after its removal was decided... */
	tomb(f, 4, seq_before); /* ...whose tombstone lands later */
	tomb(f, 777, 0);        /* a tombstone of nothing */
	reopen(f);
	kvt_ssd_stats(f->ssd, &st);
	assert_int_equal(f->n_seen, 9);
	assert_false(f->seen[3]);
	assert_there(f, 4);
	assert_int_equal(st.recovery_removed, 1);    /* 3 */
	assert_int_equal(st.recovery_superseded, 1); /* the first 4 */
	assert_int_equal(st.tombstones, 4);
	/* a key written again after its tombstone is back */
	put(f, 3);
	reopen(f);
	assert_there(f, 3);
}

/* Tombstones are let go once nothing older remains for them to hide: churn
 * through the tier many times over, removing most of what is written, and
 * the tier neither fills with tombstones nor brings a removed key back. */
static void tombstones_are_reclaimed(void **state)
{
	struct fixture *f = *state;
	struct kvt_ssd_stats st;
	uint64_t locs[1024];

	for (uint64_t i = 0; i < 1000; i++) {
		locs[i] = put(f, i % 1024);
		if (i % 10) {
			/* removed: the record freed, its removal logged */
			kvt_ssd_free(f->ssd, locs[i]);
			tomb(f, i % 1024, 0);
		}
	}
	kvt_ssd_stats(f->ssd, &st);
	assert_false(st.degraded);
	/* 47 segments' worth through 16: segments holding tombstones went once
	 * no older one was left, their tombstones with them */
	assert_int_equal(st.tombstones_written, 900);
	assert_true(st.segments <= 16);
	assert_true(st.tombstones < 450);
	assert_true(st.segments_released >= 30);
	uint64_t dropped = st.reclaim_dropped;
	reopen(f);
	/* every key kept is back but those reclaim dropped; no removed one is */
	assert_int_equal(f->n_seen + dropped, 100);
	for (uint64_t i = 0; i < 1000; i++) {
		if (i % 10 && f->seen[i])
			fail_msg("removed record %llu came back", (unsigned long long)i);
		if (f->seen[i])
			assert_there(f, i);
	}
}

/* Open reads summaries, not segments; without them (as after a crash) it
 * scans and finds the same; a damaged summary, or one of another segment,
 * is not trusted: that segment is scanned. */
static void summaries_spare_the_scan_and_are_checked(void **state)
{
	struct fixture *f = *state;
	struct kvt_ssd_stats st;
	char p[4096], q[4096];
	unsigned char b;
	int fd;

	for (uint64_t i = 0; i < 100; i++)
		put(f, i);
	reopen(f);
	kvt_ssd_stats(f->ssd, &st);
	assert_int_equal(f->n_seen, 100);
	assert_int_equal(st.recovery_scanned, 0);
	assert_int_equal(st.recovery_summaries, st.segments);

	kvt_ssd_close(f->ssd);
	f->ssd = NULL;
	assert_int_equal(ssd_test_drop_summaries(f->dir), 5);
	assert_int_equal(tier_open(f), 0);
	kvt_ssd_stats(f->ssd, &st);
	assert_int_equal(f->n_seen, 100);
	assert_int_equal(st.recovery_scanned, 5);
	assert_int_equal(st.recovery_summaries, 0);

	/* summaries again (written at close); then damage two of them */
	kvt_ssd_close(f->ssd);
	f->ssd = NULL;
	path_of(f, "seg-0000000000000002.sum", p, sizeof(p));
	fd = open(p, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, 100), 1);
	b ^= 0x10;
	assert_int_equal(pwrite(fd, &b, 1, 100), 1);
	close(fd);
	path_of(f, "seg-0000000000000001.sum", q, sizeof(q));
	path_of(f, "seg-0000000000000003.sum", p, sizeof(p));
	copy_file(q, p);
	assert_int_equal(tier_open(f), 0);
	kvt_ssd_stats(f->ssd, &st);
	assert_int_equal(f->n_seen, 100);
	assert_int_equal(st.recovery_summaries_rejected, 2);
	assert_int_equal(st.recovery_scanned, 2);
	for (uint64_t i = 0; i < 100; i++)
		assert_there(f, i);
}

/* Copy the regular files of src into dst: what a crash would leave of a
 * tier whose writes have all returned (they went to the device O_DIRECT). */
static void copy_files(const char *src, const char *dst)
{
	DIR *d = opendir(src);
	struct dirent *e;
	char from[4096], to[4096], buf[1 << 16];

	assert_non_null(d);
	while ((e = readdir(d))) {
		struct stat sb;
		ssize_t k;
		int in, out;

		snprintf(from, sizeof(from), "%s/%s", src, e->d_name);
		if (lstat(from, &sb) || !S_ISREG(sb.st_mode))
			continue;
		snprintf(to, sizeof(to), "%s/%s", dst, e->d_name);
		in = open(from, O_RDONLY);
		out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		assert_true(in >= 0 && out >= 0);
		while ((k = read(in, buf, sizeof(buf))) > 0)
			assert_int_equal(write(out, buf, (size_t)k), k);
		assert_int_equal(k, 0);
		close(in);
		close(out);
	}
	closedir(d);
}

/* A crash leaves the segment made ahead (the spare: empty, superblock only)
 * beside the one the records went to, which has no summary yet: the next
 * open finds every record, and appends to the spare. */
static void a_spare_left_by_a_crash_is_continued(void **state)
{
	struct fixture *f = *state;
	struct kvt_ssd_stats st;
	char *copy = ssd_test_dir("ssd_recovery_spare");
	uint64_t n = 0, more;

	do {
		assert_true(n < 23);
		put(f, n++);
		kvt_ssd_stats(f->ssd, &st);
	} while (!st.segments_spare);
	assert_int_equal(st.segments, 1);
	copy_files(f->dir, copy);
	kvt_ssd_close(f->ssd);
	f->ssd = NULL;
	kvt_test_rmdir(f->dir);
	free(f->dir);
	f->dir = copy;
	f->opts.dir = copy;
	assert_int_equal(ssd_test_count(copy, "seg-", ".kvt"), 2);
	assert_int_equal(ssd_test_count(copy, "seg-", ".sum"), 0);

	assert_int_equal(tier_open(f), 0);
	assert_int_equal(f->n_seen, n);
	for (uint64_t i = 0; i < n; i++)
		assert_there(f, i);
	kvt_ssd_stats(f->ssd, &st);
	assert_int_equal(st.segments, 2);
	assert_int_equal(st.segments_spare, 0);
	assert_int_equal(st.recovery_torn, 0);
	assert_int_equal(st.recovery_corrupt, 0);
	/* the spare takes the records now: 23 fill it, the rest go on */
	for (more = n + 30; n < more; n++)
		put(f, n);
	kvt_ssd_stats(f->ssd, &st);
	assert_int_equal(st.segments, 3);
	reopen(f);
	assert_int_equal(f->n_seen, n);
	for (uint64_t i = 0; i < n; i++)
		assert_there(f, i);
}

#ifdef KVT_TESTING
/* A degraded tier is written again once a probe succeeds. */
static void degraded_tier_resumes_after_a_probe(void **state)
{
	struct fixture *f = *state;
	struct kvt_ssd_write w = { .ns_id = 9, .key = key_of(1), .data = f->buf, .len = LEN };
	struct kvt_ssd_stats st;

	put(f, 0);
	kvt_ssd_inject(f->ssd, KVT_SSD_IO_WRITE, 0, 1, -EIO);
	kvt_ssd_write(f->ssd, &w, 1);
	assert_int_equal(w.res, -EIO);
	assert_true(kvt_ssd_degraded(f->ssd));
	kvt_ssd_write(f->ssd, &w, 1);
	assert_int_equal(w.res, -EROFS);
	assert_int_equal(kvt_ssd_probe(f->ssd), 0);
	assert_false(kvt_ssd_degraded(f->ssd));
	put(f, 1);
	put(f, 2);
	kvt_ssd_stats(f->ssd, &st);
	assert_int_equal(st.probes, 1);
	assert_int_equal(st.resumed, 1);
	reopen(f);
	for (uint64_t i = 0; i < 3; i++)
		assert_there(f, i);
	/* a tier that is not degraded probes nothing */
	assert_int_equal(kvt_ssd_probe(f->ssd), 0);
	kvt_ssd_stats(f->ssd, &st);
	assert_int_equal(st.probes, 0);
}
#endif

/* A segment of the wrong size keeps every record that verifies: one cut to
 * half its size keeps the records wholly before the cut, one with bytes
 * appended keeps them all; both are sealed (the tier writes on in a new
 * segment), and what they keep is there after the next open too. Old code
 * quarantined both whole. */
static void segments_of_the_wrong_size_keep_their_intact_records(void **state)
{
	struct fixture *f = *state;
	char p[4096];
	int fd;

	for (uint64_t i = 0; i < 40; i++)
		put(f, i); /* 23 in segment 1, 17 in segment 2 */
	kvt_ssd_close(f->ssd);
	f->ssd = NULL;
	path_of(f, "seg-0000000000000001.kvt", p, sizeof(p));
	assert_int_equal(truncate(p, 512 << 10), 0);
	path_of(f, "seg-0000000000000002.kvt", p, sizeof(p));
	fd = open(p, O_WRONLY | O_APPEND);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, f->buf, 100), 100);
	close(fd);

	assert_int_equal(tier_open(f), 0);
	/* records 0-10 end by page 122 of the 128 left; 11-22 were cut */
	assert_int_equal(f->n_seen, 11 + 17);
	assert_int_equal(ssd_test_count(f->dir, "seg-", ".kvt"), 2);
	put(f, 100);
	assert_int_equal(ssd_test_count(f->dir, "seg-", ".kvt"), 3);
	reopen(f);
	assert_int_equal(f->n_seen, 11 + 17 + 1);
	for (uint64_t i = 0; i < 11; i++)
		assert_there(f, i);
	for (uint64_t i = 23; i < 40; i++)
		assert_there(f, i);
	assert_there(f, 100);
}

/* The meta file is checksummed: a flipped bit in its salt that leaves a
 * valid hex digit is damage, not another directory's salt; the salt comes
 * from the segments, nothing is quarantined, and the file is written again.
 * Old code quarantined every segment and started empty. */
static void a_flipped_bit_in_the_meta_file_loses_nothing(void **state)
{
	struct fixture *f = *state;
	char meta[4096], before[128], after[128], *digit, was;
	struct kvt_ssd_stats st;
	FILE *m;

	for (uint64_t i = 0; i < 30; i++)
		put(f, i);
	kvt_ssd_close(f->ssd);
	f->ssd = NULL;
	path_of(f, "kvtier-ssd.meta", meta, sizeof(meta));
	read_file(meta, before, sizeof(before));
	digit = strstr(before, "salt ");
	assert_non_null(digit);
	digit += 5 + 7;
	was = *digit;
	*digit = was == '2' ? '3' : '2'; /* still a hex digit */
	m = fopen(meta, "w");
	assert_non_null(m);
	fputs(before, m);
	fclose(m);
	*digit = was;

	assert_int_equal(tier_open(f), 0);
	assert_int_equal(f->n_seen, 30);
	for (uint64_t i = 0; i < 30; i++)
		assert_there(f, i);
	kvt_ssd_stats(f->ssd, &st);
	assert_int_equal(st.quarantined, 0);
	read_file(meta, after, sizeof(after));
	assert_string_equal(after, before);
}

/* A whole meta file whose salt no segment carries (another directory's) is
 * refused: the tier does not open, and every segment stays where it was. */
static void segments_that_all_disagree_with_the_meta_file_are_refused(void **state)
{
	struct fixture *f = *state;
	char *other = ssd_test_dir("ssd_recovery_meta"), src[4096], dst[4096];
	struct kvt_ssd_opts o = f->opts;
	struct kvt_ssd *ssd2;

	for (uint64_t i = 0; i < 30; i++)
		put(f, i);
	kvt_ssd_close(f->ssd);
	f->ssd = NULL;
	o.dir = other;
	assert_int_equal(kvt_ssd_open(&o, NULL, NULL, &ssd2), 0);
	kvt_ssd_close(ssd2);
	snprintf(src, sizeof(src), "%s/kvtier-ssd.meta", other);
	path_of(f, "kvtier-ssd.meta", dst, sizeof(dst));
	copy_file(src, dst);

	assert_int_equal(tier_open(f), -EBADMSG);
	f->ssd = NULL;
	assert_int_equal(ssd_test_count(f->dir, "seg-", ".kvt"), 2);
	assert_false(exists(f, "quarantine"));
	kvt_test_rmdir(other);
	free(other);
	/* the right meta file back: everything is there */
	snprintf(src, sizeof(src), "%s/kvtier-ssd.meta", f->dir);
	assert_int_equal(unlink(src), 0);
	assert_int_equal(tier_open(f), 0);
	assert_int_equal(f->n_seen, 30);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(lost_meta_file_is_rebuilt_from_the_segments, setup,
						teardown),
		cmocka_unit_test_setup_teardown(unusable_segments_are_quarantined_never_deleted, setup,
						teardown),
		cmocka_unit_test_setup_teardown(foreign_files_are_left_in_place, setup, teardown),
		cmocka_unit_test_setup_teardown(reopened_tier_appends_to_its_last_segment, setup,
						teardown),
		cmocka_unit_test_setup_teardown(tombstones_hide_older_records_only, setup, teardown),
		cmocka_unit_test_setup_teardown(tombstones_are_reclaimed, setup, teardown),
		cmocka_unit_test_setup_teardown(summaries_spare_the_scan_and_are_checked, setup,
						teardown),
		cmocka_unit_test_setup_teardown(a_spare_left_by_a_crash_is_continued, setup,
						teardown),
		cmocka_unit_test_setup_teardown(segments_of_the_wrong_size_keep_their_intact_records,
						setup, teardown),
		cmocka_unit_test_setup_teardown(a_flipped_bit_in_the_meta_file_loses_nothing, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			segments_that_all_disagree_with_the_meta_file_are_refused, setup, teardown),
#ifdef KVT_TESTING
		cmocka_unit_test_setup_teardown(degraded_tier_resumes_after_a_probe, setup, teardown),
#endif
	};

	force_threads = argc > 1 && !strcmp(argv[1], "threads");
	if (!force_threads)
		kvt_test_need_io_uring();
	seed = kvt_test_seed();
	return cmocka_run_group_tests_name(force_threads ? "ssd_recovery (thread pool)" :
				   "ssd_recovery (io_uring)", tests, NULL, NULL);
}
