/* kvtier-bench: shared pieces of the benchmark subcommands.
 *
 * Every figure a bench prints is a ratio against a reference measured in the
 * same run (memcpy, fio, the raw socket), and every timing is a median over
 * repetitions, because the machines are shared and noisy. */
#ifndef KVT_BENCH_H
#define KVT_BENCH_H

#include <stddef.h>
#include <stdint.h>

/* One subcommand: `kvtier-bench NAME [options]`. */
struct kvt_bench_cmd {
	const char *name;
	const char *summary;
	int (*main)(int argc, char **argv); /* argv[0] is the subcommand name */
};

/* Monotonic clock in nanoseconds. */
uint64_t kvt_bench_now_ns(void);

/* The q-quantile (0..1) of v[0..n) (sorts v in place). 0 for n == 0. */
double kvt_bench_quantile(double *v, size_t n, double q);

/* Median of v[0..n) (sorts v in place). */
static inline double kvt_bench_median(double *v, size_t n)
{
	return kvt_bench_quantile(v, n, 0.5);
}

/* Parse a size with an optional K/M/G/T suffix (powers of 1024) or a
 * percentage of total RAM ("25%"). Returns 0 or -EINVAL. */
int kvt_bench_parse_size(const char *s, uint64_t *out);

/* Print bytes as a short human string into buf ("64 KiB", "1.5 GiB"). */
const char *kvt_bench_fmt_bytes(uint64_t bytes, char *buf, size_t len);

/* Page-aligned buffer of len bytes with every page touched; NULL on failure.
 * Free with kvt_bench_free(buf, len). */
void *kvt_bench_alloc(size_t len);
void kvt_bench_free(void *buf, size_t len);

/* The subcommands, each in its own file (bench_<name>.c). */
int kvt_bench_copy_main(int argc, char **argv);
int kvt_bench_dram_main(int argc, char **argv);
int kvt_bench_ssd_main(int argc, char **argv);
int kvt_bench_recompute_main(int argc, char **argv);
int kvt_bench_trace_main(int argc, char **argv);
int kvt_bench_sidecar_main(int argc, char **argv);
int kvt_bench_remote_main(int argc, char **argv);

#endif
