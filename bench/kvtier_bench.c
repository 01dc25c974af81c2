/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier-bench: measures kvtier against the hardware's own references.
 * One subcommand per area; each prints a table, or one JSON object with --json. */
#include <stdio.h>
#include <string.h>

#include "bench/bench.h"

static const struct kvt_bench_cmd commands[] = {
	{ "copy", "device copies: pinned/pageable, gather/scatter vs one copy",
	  kvt_bench_copy_main },
	{ "dram", "DRAM tier put/get vs memcpy, lookup rate, index bytes/entry",
	  kvt_bench_dram_main },
	{ "ssd", "SSD tier write/read MB/s and latency vs fio; LZ4 +/- shuffle on bf16",
	  kvt_bench_ssd_main },
	{ "ssd-open", "SSD tier open time from segment summaries vs a full scan of the log",
	  kvt_bench_ssd_open_main },
#ifndef KVT_NO_OPENBLAS /* configured with -DKVT_WITH_OPENBLAS=OFF */
	{ "recompute", "offload vs recompute: load time per interconnect vs prefill, break-even",
	  kvt_bench_recompute_main },
#endif
	{ "trace", "prefix-cache hit rates of a request trace, replayed through the store",
	  kvt_bench_trace_main },
	{ "sidecar", "protocol round trips (PING, LOOKUP, SAVE, LOAD) and 2 MiB SAVE/LOAD vs memcpy",
	  kvt_bench_sidecar_main },
	{ "restart", "kvtierd restarted each way its DRAM tier survives: blocks back warm, wrong "
	  "bytes, time to answer, index rebuild", kvt_bench_restart_main },
#ifndef KVT_NO_CLUSTER /* built without hiredis */
	{ "remote", "block fetch between two nodes vs iperf3, directory LOOKUP vs a Redis GET",
	  kvt_bench_remote_main },
	{ "nodes", "a prefix spread over 1-3 holders vs iperf3 from them at once, links shaped by tc",
	  kvt_bench_nodes_main },
#endif
};

static const size_t n_commands = sizeof(commands) / sizeof(commands[0]);

static void usage(FILE *f)
{
	fprintf(f, "usage: kvtier-bench COMMAND [OPTIONS]\n\n"
		   "Benchmarks of kvtier, each reported as a ratio against a reference\n"
		   "measured in the same run. 'kvtier-bench COMMAND --help' for its options.\n\n"
		   "commands:\n");
	for (size_t i = 0; i < n_commands; i++)
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	for (size_t i = 0; i < n_commands; i++)
		if (!strcmp(argv[1], commands[i].name))
			return commands[i].main(argc - 1, argv + 1);
	fprintf(stderr, "kvtier-bench: unknown command '%s'\n\n", argv[1]);
	usage(stderr);
	return 2;
}
