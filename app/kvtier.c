/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier: the operator's command line. A table of subcommands; each lives in
 * its own file (kvtier_<name>.c) and parses its own options. */
#include <stdio.h>
#include <string.h>

#include "app/kvtier_cmds.h"

static const struct kvt_cli_cmd commands[] = {
	{ "calc", "size a model: KV bytes, memory, users per GPU, decode bounds",
	  kvt_calc_main, kvt_calc_usage },
	{ "stats", "counters of a running kvtierd: tiers, hits, bytes moved, latencies",
	  kvt_stats_main, kvt_stats_usage },
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
	fprintf(f,
		"NAME\n"
		"    kvtier - tiered KV-cache block store: operator commands\n\n"
		"SYNOPSIS\n"
		"    kvtier COMMAND [OPTIONS]\n"
		"    kvtier help COMMAND\n\n"
		"COMMANDS\n");
	for (size_t i = 0; i < N_COMMANDS; i++)
		fprintf(f, "    %-8s %s\n", commands[i].name, commands[i].summary);
	fprintf(f,
		"\n'kvtier COMMAND --help' (or 'kvtier help COMMAND') documents a command's\n"
		"options. Exit status: 0 success, 1 runtime error, 2 usage error.\n");
}

static const struct kvt_cli_cmd *find(const char *name)
{
	for (size_t i = 0; i < N_COMMANDS; i++)
		if (!strcmp(name, commands[i].name))
			return &commands[i];
	return NULL;
}

int main(int argc, char **argv)
{
	const struct kvt_cli_cmd *cmd;

	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "help")) {
		if (argc < 3) {
			usage(stdout);
			return 0;
		}
		cmd = find(argv[2]);
		if (cmd) {
			cmd->usage(stdout);
			return 0;
		}
	} else {
		cmd = find(argv[1]);
		if (cmd)
			return cmd->main(argc - 1, argv + 1);
	}
	fprintf(stderr, "kvtier: unknown command '%s'\n\n", argv[argc < 3 ? 1 : 2]);
	usage(stderr);
	return 2;
}
