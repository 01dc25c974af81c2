/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier-bench ssd-open: how long the SSD tier takes to open, reading its
 * segment summaries, against the reference of the same directory opened by
 * scanning every segment (what a tier without summaries does: the log read
 * whole), in the same run.
 *
 * One tier of --blocks blocks of --block bytes is written and closed (which
 * writes the summaries). Each repetition times the recovery job alone
 * (kvt_ssd_recover: the same work on both sides but for what it reads) with
 * the summaries and without them, then kvt_ssd_open end to end both ways
 * (without summaries, open also writes them for the next one). Segment
 * reads are O_DIRECT; the summaries are dropped from the page cache before
 * each run, so both sides read the device. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/bench.h"
#include "kvtier/log.h"
#include "tiers/ssd.h"
#include "tiers/ssd_recover.h"

struct open_args {
	const char *dir;
	uint64_t blocks, block, segment;
	int reps;
	bool json;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier-bench ssd-open [--dir DIR] [--blocks 10000] [--block 64K]\n"
		"                             [--segment 64M] [--reps 3] [--json]\n\n"
		"Writes a tier of BLOCKS blocks under DIR (default .), then times opening it\n"
		"from its segment summaries against opening it by scanning every segment\n"
		"(the summaries deleted), in the same run: medians of REPS, and their ratio.\n");
}

static int parse_args(int argc, char **argv, struct open_args *a)
{
	static const struct option opts[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "blocks", required_argument, NULL, 'n' },
		{ "block", required_argument, NULL, 'b' },
		{ "segment", required_argument, NULL, 's' },
		{ "reps", required_argument, NULL, 'r' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int c;

	*a = (struct open_args){ .dir = ".", .blocks = 10000, .block = 64 << 10,
				 .segment = 64 << 20, .reps = 3 };
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		char *end;

		switch (c) {
		case 'd': a->dir = optarg; break;
		case 'n':
			a->blocks = strtoull(optarg, &end, 10);
			if (*end || !a->blocks)
				goto bad;
			break;
		case 'b':
			if (kvt_bench_parse_size(optarg, &a->block) || !a->block)
				goto bad;
			break;
		case 's':
			if (kvt_bench_parse_size(optarg, &a->segment) || a->segment % 4096)
				goto bad;
			break;
		case 'r':
			a->reps = atoi(optarg);
			if (a->reps < 1 || a->reps > 64)
				goto bad;
			break;
		case 'j': a->json = true; break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -1;
		}
	}
	return 0;
bad:
	fprintf(stderr, "kvtier-bench ssd-open: bad value '%s'\n\n", optarg);
	usage(stderr);
	return -1;
}

/* Delete (drop = true) or evict from the page cache the summaries in dir. */
static int summaries(const char *dir, bool drop)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[8192];
	int n = 0;

	while (d && (e = readdir(d))) {
		size_t len = strlen(e->d_name);
		if (len < 4 || strcmp(e->d_name + len - 4, ".sum"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (drop) {
			n += unlink(path) == 0;
		} else {
			int fd = open(path, O_RDONLY);
			if (fd >= 0) {
				fdatasync(fd);
				posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
				close(fd);
				n++;
			}
		}
	}
	if (d)
		closedir(d);
	return n;
}

/* Only warnings and errors: each open logs what it found at info. */
static void quiet_log(void *arg, enum kvt_log_level level, const char *msg)
{
	if (level <= KVT_LOG_WARN)
		fprintf(stderr, "kvtier: %s\n", msg);
}

static int count_cb(const struct kvt_ssd_rec_info *rec, void *arg)
{
	(*(uint64_t *)arg)++;
	return 0;
}

/* Open and close the tier once; seconds the open took, or < 0. */
static double time_open(const struct kvt_ssd_opts *o, uint64_t want, uint64_t *scanned)
{
	struct kvt_ssd_stats st;
	struct kvt_ssd *ssd;
	uint64_t found = 0, t0 = kvt_now_ns();
	double s;

	if (kvt_ssd_open(o, count_cb, &found, &ssd))
		return -1;
	s = (double)(kvt_now_ns() - t0) / 1e9;
	kvt_ssd_stats(ssd, &st);
	*scanned = st.recovery_scanned;
	kvt_ssd_close(ssd);
	if (found != want) {
		fprintf(stderr, "kvtier-bench ssd-open: found %llu blocks, wrote %llu\n",
			(unsigned long long)found, (unsigned long long)want);
		return -1;
	}
	return s;
}

static void rm_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[8192];

	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.') {
			snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
			unlink(path);
		}
	if (d)
		closedir(d);
	rmdir(dir);
}

/* Run the recovery job alone over dir; seconds it took, or < 0. */
static double time_recover(const char *dir, uint64_t want, uint64_t *scanned)
{
	char path[8192], line[128];
	unsigned long long salt;
	struct kvt_ssd_recovery r;
	uint64_t t0, salt64;
	double s;
	FILE *f;
	int dfd, rc;

	snprintf(path, sizeof(path), "%s/kvtier-ssd.meta", dir);
	f = fopen(path, "r");
	if (!f || !fgets(line, sizeof(line), f) || sscanf(line, "kvtier-ssd %*u salt %llx", &salt) != 1) {
		if (f)
			fclose(f);
		return -1;
	}
	fclose(f);
	salt64 = salt;
	dfd = open(dir, O_RDONLY | O_DIRECTORY);
	if (dfd < 0)
		return -1;
	t0 = kvt_now_ns();
	rc = kvt_ssd_recover(dfd, &salt64, 256, &r);
	s = (double)(kvt_now_ns() - t0) / 1e9;
	close(dfd);
	if (rc)
		return -1;
	*scanned = r.scanned;
	rc = r.n_cands == want ? 0 : -1;
	kvt_ssd_recovery_fini(&r);
	return rc ? -1 : s;
}

int kvt_bench_ssd_open_main(int argc, char **argv)
{
	struct open_args a;
	struct kvt_ssd_opts o;
	struct kvt_ssd *ssd;
	double with[64], without[64], job_with[64], job_without[64], ms, mo, js, jo;
	uint64_t sc_with = 0, sc_without = 0, sc_with2 = 0, sc_without2 = 0, segments;
	char dir[4096], buf[32];
	void *block;
	int err = 0;

	if (parse_args(argc, argv, &a))
		return 2;
	kvt_log_set_handler(quiet_log, NULL);
	snprintf(dir, sizeof(dir), "%s/kvtier-bench-ssd-open.%d", a.dir, (int)getpid());
	block = kvt_bench_alloc(a.block);
	if (!block)
		return 1;
	for (uint64_t i = 0; i < a.block / 8; i++)
		((uint64_t *)block)[i] = i * 0x9e3779b97f4a7c15ULL;
	kvt_ssd_opts_init(&o, sizeof(o));
	o.dir = dir;
	o.segment_bytes = a.segment;
	/* room for the blocks (4 KiB headers included) and a segment to spare */
	o.capacity_bytes = (a.blocks * (a.block + 8192) / a.segment + 2) * a.segment;
	if (kvt_ssd_open(&o, NULL, NULL, &ssd)) {
		fprintf(stderr, "kvtier-bench ssd-open: cannot open a tier in %s\n", dir);
		kvt_bench_free(block, a.block);
		return 1;
	}
	for (uint64_t i = 0; i < a.blocks && !err; i += 32) {
		struct kvt_ssd_write w[32];
		size_t n = a.blocks - i < 32 ? a.blocks - i : 32;

		for (size_t k = 0; k < n; k++) {
			uint64_t id = i + k;
			w[k] = (struct kvt_ssd_write){ .ns_id = 1, .data = block, .len = a.block };
			memcpy(w[k].key.bytes, &id, sizeof(id));
		}
		if (kvt_ssd_write(ssd, w, n) != (int)n)
			err = -EIO;
	}
	kvt_ssd_close(ssd);
	if (err) {
		fprintf(stderr, "kvtier-bench ssd-open: writing the tier failed\n");
		goto out;
	}
	for (int r = 0; r < a.reps && !err; r++) {
		summaries(dir, false);
		job_with[r] = time_recover(dir, a.blocks, &sc_with);
		summaries(dir, false);
		with[r] = time_open(&o, a.blocks, &sc_with2);
		summaries(dir, true);
		job_without[r] = time_recover(dir, a.blocks, &sc_without);
		without[r] = time_open(&o, a.blocks, &sc_without2);
		if (job_with[r] < 0 || job_without[r] < 0 || with[r] < 0 || without[r] < 0 ||
		    sc_with || sc_with2 || !sc_without || !sc_without2)
			err = -EIO;
	}
	if (err) {
		fprintf(stderr, "kvtier-bench ssd-open: an open failed or read the wrong way\n");
		goto out;
	}
	segments = sc_without;
	js = kvt_bench_median(job_with, (size_t)a.reps);
	jo = kvt_bench_median(job_without, (size_t)a.reps);
	ms = kvt_bench_median(with, (size_t)a.reps);
	mo = kvt_bench_median(without, (size_t)a.reps);
	if (a.json) {
		printf("{\"blocks\": %llu, \"block_bytes\": %llu, \"segments\": %llu, "
		       "\"recover_summaries_s\": %.6f, \"recover_scan_s\": %.6f, \"ratio\": %.2f, "
		       "\"open_summaries_s\": %.6f, \"open_scan_s\": %.6f, \"open_ratio\": %.2f}\n",
		       (unsigned long long)a.blocks, (unsigned long long)a.block,
		       (unsigned long long)segments, js, jo, jo / js, ms, mo, mo / ms);
	} else {
		printf("SSD tier of %llu blocks of %s in %llu segments under %s, medians of %d\n",
		       (unsigned long long)a.blocks, kvt_fmt_bytes(a.block, buf, sizeof(buf)),
		       (unsigned long long)segments, a.dir, a.reps);
		printf("                        from summaries     full scan    scan / summaries\n");
		printf("  recovery (the job)    %11.3f ms  %11.3f ms  %10.1f x\n", js * 1e3, jo * 1e3,
		       jo / js);
		printf("  kvt_ssd_open          %11.3f ms  %11.3f ms  %10.1f x\n", ms * 1e3, mo * 1e3,
		       mo / ms);
	}
out:
	rm_dir(dir);
	kvt_bench_free(block, a.block);
	return err ? 1 : 0;
}
