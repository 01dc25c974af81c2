/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier-bench: shared pieces of the benchmark subcommands.
 *
 * Every figure a bench prints is a ratio against a reference measured in the
 * same run (memcpy, fio, the raw socket), and every timing is a median over
 * repetitions, because the machines are shared and noisy. */
#ifndef KVT_BENCH_H
#define KVT_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/clock.h"
#include "util/size.h"

/* One subcommand: `kvtier-bench NAME [options]`. */
struct kvt_bench_cmd {
	const char *name;
	const char *summary;
	int (*main)(int argc, char **argv); /* argv[0] is the subcommand name */
};

/* The q-quantile (0..1) of v[0..n) (sorts v in place). 0 for n == 0. */
double kvt_bench_quantile(double *v, size_t n, double q);

/* Median of v[0..n) (sorts v in place). */
static inline double kvt_bench_median(double *v, size_t n)
{
	return kvt_bench_quantile(v, n, 0.5);
}

/* kvt_parse_size, with a percentage meaning one of total RAM ("25%"). */
int kvt_bench_parse_size(const char *s, uint64_t *out);

/* Page-aligned buffer of len bytes with every page touched; NULL on failure.
 * Free with kvt_bench_free(buf, len). */
void *kvt_bench_alloc(size_t len);
/* The same in the pages the DRAM tier asks for: transparent huge pages
 * (thp), or 4 KiB pages only. */
void *kvt_bench_alloc_pages(size_t len, bool thp);
void kvt_bench_free(void *buf, size_t len);

/* ---- TCP over loopback (bench_tcp.c) -------------------------------- */

/* Receive `bytes` from a sender thread over a loopback TCP connection,
 * reps times (at most 64): the median in bytes/s, or -errno. Signals that
 * interrupt it are retried. */
double kvt_bench_tcp_loopback(uint64_t bytes, int reps);

/* ---- fio and its memory (bench_fio.c) -------------------------------- */

/* Whether fio is installed. */
bool kvt_bench_have_fio(void);

/* The kvtierd a bench starts into out: opt, else $KVTIERD, else beside
 * this program or in the build tree's app/. 0, or -ENOENT when none runs. */
int kvt_bench_find_kvtierd(const char *opt, char *out, size_t len);

/* Bytes of explicitly reserved huge pages free now (0 when none). */
uint64_t kvt_bench_huge_free(void);

/* len bytes of zeroed memory like fio's: explicit huge pages (MAP_HUGETLB,
 * as --iomem=shmhuge) when huge, else 4 KiB pages (transparent huge pages
 * refused, as fio's malloc'd buffers have none). NULL on failure; munmap. */
void *kvt_bench_region(size_t len, bool huge);

/* A standard normal value from the xorshift state *rng (Box-Muller). */
double kvt_bench_rand_normal(uint64_t *rng);

/* f rounded to bfloat16 (to nearest, ties to even). */
uint16_t kvt_bench_bf16(float f);

/* v[0..n) = bf16 values of a standard normal: what K/V of one scale look
 * like to a codec (the bytes of the sign and exponent repeat, the mantissa
 * bytes are noise). */
void kvt_bench_fill_bf16_normal(uint16_t *v, size_t n, uint64_t *rng);

/* One fio job: io_uring, O_DIRECT, fixed buffers, registered files. */
struct kvt_bench_fio_job {
	const char *file;
	bool write;          /* sequential write, else sequential read */
	uint64_t block, bytes;
	unsigned qd;
	bool huge;           /* --iomem=shmhuge */
	unsigned fdatasync;  /* 0, or fdatasync every this many writes */
};

struct kvt_bench_fio_result {
	double mbps, p50_us, p99_us; /* MB = 1e6 B; completion latency */
};

/* Run the job. Returns 0 or -EIO (fio failed or printed no figure). */
int kvt_bench_fio(const struct kvt_bench_fio_job *job, struct kvt_bench_fio_result *out);

/* The subcommands, each in its own file (bench_<name>.c). */
int kvt_bench_copy_main(int argc, char **argv);
int kvt_bench_dram_main(int argc, char **argv);
int kvt_bench_ssd_main(int argc, char **argv);
int kvt_bench_ssd_open_main(int argc, char **argv);
int kvt_bench_recompute_main(int argc, char **argv);
int kvt_bench_trace_main(int argc, char **argv);
int kvt_bench_sidecar_main(int argc, char **argv);
int kvt_bench_sidecar_ssd_main(int argc, char **argv); /* sidecar --tier ssd */
int kvt_bench_remote_main(int argc, char **argv);
int kvt_bench_nodes_main(int argc, char **argv);
int kvt_bench_restart_main(int argc, char **argv);

#endif
