/* kvtier-bench: shared pieces of the benchmark subcommands.
 *
 * Every figure a bench prints is a ratio against a reference measured in the
 * same run (memcpy, fio, the raw socket), and every timing is a median over
 * repetitions, because the machines are shared and noisy. */
#ifndef KVT_BENCH_H
#define KVT_BENCH_H

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
void kvt_bench_free(void *buf, size_t len);

/* The subcommands, each in its own file (bench_<name>.c). */
int kvt_bench_copy_main(int argc, char **argv);
int kvt_bench_dram_main(int argc, char **argv);
int kvt_bench_ssd_main(int argc, char **argv);
int kvt_bench_ssd_open_main(int argc, char **argv);
int kvt_bench_recompute_main(int argc, char **argv);
int kvt_bench_trace_main(int argc, char **argv);
int kvt_bench_sidecar_main(int argc, char **argv);
int kvt_bench_remote_main(int argc, char **argv);

#endif
