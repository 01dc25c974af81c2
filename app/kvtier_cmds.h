/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier (the CLI): its subcommands, one file each (kvtier_<name>.c). */
#ifndef KVT_APP_KVTIER_CMDS_H
#define KVT_APP_KVTIER_CMDS_H

#include <stdio.h>

struct kvt_cli_cmd {
	const char *name;
	const char *summary;
	int (*main)(int argc, char **argv); /* argv[0] is the subcommand name */
	void (*usage)(FILE *f);             /* the subcommand's --help text */
};

/* kvtier calc: sizing calculator (kvtier_calc.c) */
int kvt_calc_main(int argc, char **argv);
void kvt_calc_usage(FILE *f);

/* kvtier stats: a running daemon's counters (kvtier_stats.c) */
int kvt_stats_main(int argc, char **argv);
void kvt_stats_usage(FILE *f);

#endif
