/* SPDX-License-Identifier: Apache-2.0 */
/* What kvtierd prints of its configuration, from the table of options
 * (daemon_options.h): the manual (--help, also the man page's source) and
 * the effective configuration as a file it reads back (--print-config). */
#include "app/daemon_config.h"

#include <stdbool.h>
#include <string.h>

#include "app/daemon_options.h"
#include "app/daemon_tenants.h"

#define HELP_TEXT_COL 26   /* where an option's text starts */
#define HELP_WIDTH 78      /* the longest line */
#define NO_BREAK '\x1f'    /* a space fill() does not break a line at */

/* Write text's words from column at, each line indented to col and at most
 * HELP_WIDTH wide (a NO_BREAK is a space inside a word); ends the line. */
static void fill(FILE *f, const char *text, int col, int at)
{
	bool first = true;

	while (*text) {
		size_t word = strcspn(text, " ");

		if (!first && at + 1 + (int)word > HELP_WIDTH) {
			fprintf(f, "\n%*s", col, "");
			at = col;
		} else if (!first) {
			fputc(' ', f);
			at++;
		}
		first = false;
		for (size_t i = 0; i < word; i++)
			fputc(text[i] == NO_BREAK ? ' ' : text[i], f);
		at += (int)word;
		text += word;
		while (*text == ' ')
			text++;
	}
	fputc('\n', f);
}

/* o's help with "{default}" replaced by its default */
static const char *help_text(const struct kvtd_option *o, char *buf, size_t cap)
{
	const char *mark = strstr(o->help, "{default}");

	if (!mark || !o->def)
		return o->help;
	snprintf(buf, cap, "%.*s%s%s", (int)(mark - o->help), o->help, o->def, mark + 9);
	return buf;
}

static void usage_option(FILE *f, const struct kvtd_option *o)
{
	char tag[96], help[2048];
	int n;

	if (o->heading)
		fprintf(f, "\n%s%s", o->heading, *o->heading ? "\n" : "");
	if (o->letter)
		n = snprintf(tag, sizeof(tag), "    -%c, --%s", o->letter, o->name);
	else
		n = snprintf(tag, sizeof(tag), "        --%s", o->name);
	if (o->arg)
		n += snprintf(tag + n, sizeof(tag) - (size_t)n, " %s", o->arg);
	/* a tag too long for the column is followed by two spaces */
	fprintf(f, "%-*s", n <= HELP_TEXT_COL - 2 ? HELP_TEXT_COL : n + 2, tag);
	fill(f, help_text(o, help, sizeof(help)), HELP_TEXT_COL,
	     n <= HELP_TEXT_COL - 2 ? HELP_TEXT_COL : n + 2);
}

/* CONFIGURATION's list of the file's keys */
static void usage_keys(FILE *f)
{
	char text[4096];
	size_t n = 0;

	n += (size_t)snprintf(text + n, sizeof(text) - n,
			      "The file has a [kvtierd] section with the long option names as "
			      "keys (");
	for (size_t i = 0; i < kvtd_n_options && n < sizeof(text); i++) {
		const struct kvtd_option *o = &kvtd_options[i];

		if (!o->key)
			continue;
		n += (size_t)snprintf(text + n, sizeof(text) - n, "%s%s%s%s",
				      text[n - 1] != '(' ? ", " : "", o->key,
				      o->type->shape ? "\x1f=\x1f" : "",
				      o->type->shape ? o->type->shape : "");
	}
	if (n < sizeof(text))
		snprintf(text + n, sizeof(text) - n, ") and one [tenant NAME] section per tenant:");
	fputs("    ", f);
	fill(f, text, 4, 4);
}

void kvtd_usage(FILE *f)
{
	fputs(
"NAME\n"
"    kvtierd - the kvtier sidecar daemon: a tiered KV-cache block store for an\n"
"    inference engine on the same node\n"
"\n"
"SYNOPSIS\n"
"    kvtierd [--config FILE] [OPTIONS]\n"
"\n"
"DESCRIPTION\n"
"    kvtierd owns the tiers (pinned host DRAM, an SSD segment log under a data\n"
"    directory) and serves engines over a Unix socket: they save blocks of KV\n"
"    cache by prefix key, look them up and load them back. It runs in the\n"
"    foreground, logs one structured line per event to stderr, and stops\n"
"    gracefully on SIGTERM or SIGINT (stops accepting, finishes the copies in\n"
"    flight, closes the store).\n"
"\n"
"    Settings come from the embedded defaults, then the config file, then the\n"
"    options below, each overriding the last. Sizes take K, M, G, T (powers of\n"
"    1024) or a percentage.\n"
"\n"
"OPTIONS\n", f);
	for (size_t i = 0; i < kvtd_n_options; i++)
		usage_option(f, &kvtd_options[i]);
	fputs(
"\n"
"CONFIGURATION\n", f);
	usage_keys(f);
	fputs(
"\n"
"        [kvtierd]\n"
"        socket = /run/kvtier/kvtierd.sock\n"
"        dram = 64G\n"
"        metrics = 127.0.0.1:9464\n"
"\n"
"        [tenant alice]\n"
"        token = s3cret-a\n"
"        salt = team-a           ; tenants with equal salts share blocks\n"
"        models = Qwen/*, meta-llama/Llama-3.1-8B   ; model ids allowed (fnmatch)\n"
"\n"
"    Without tenants, one tenant named \"default\" with an empty token serves\n"
"    every client the socket lets in.\n"
"\n"
"CLUSTER\n"
"    With --cluster, nodes share blocks: a prefix saved on one node loads on\n"
"    another instead of being recomputed. Each node keeps its membership (a\n"
"    record renewed every second under a 3 s TTL, an epoch from INCR) and a\n"
"    hint per saved block in Redis. A LOOKUP that misses locally asks Redis\n"
"    for the rest of the prefix (at most 50 ms) and reports those blocks\n"
"    with tier remote; a LOAD fetches them from a holder over TCP into DRAM,\n"
"    checksummed end to end, and asks the next holder when one fails. Peers\n"
"    prove the cluster secret (HMAC) before anything is served. Redis out of\n"
"    reach means local-only, and the node rejoins by itself when it is back.\n"
"    With sentinel://, the node asks Redis Sentinel for the primary at each\n"
"    connect and follows a failover; the hints it wrote in the last minute\n"
"    are written again to a new primary.\n"
"    Peer traffic is authenticated, not encrypted: on an untrusted network run\n"
"    it over WireGuard or IPsec.\n"
"\n"
"ENVIRONMENT\n"
"    KVTIER_SOCKET         Default socket path (the client library reads it too).\n"
"    KVTIER_CGROUP_DIR     Read the memory limit from this cgroup directory\n"
"                          instead of the process's own (containers that mount\n"
"                          it elsewhere; tests).\n"
"    LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES  Socket activation (systemd's\n"
"                          kvtierd.socket): the listening Unix socket passed as\n"
"                          fd 3 (or the one named \"sidecar\") is served instead\n"
"                          of binding --socket; its mode and owner are the\n"
"                          socket unit's, and it is left in place at exit.\n"
"    NOTIFY_SOCKET         Where READY=1 (serving) and STOPPING=1 (draining)\n"
"                          are sent, for systemd's Type=notify.\n"
"\n"
"EXIT STATUS\n"
"    0 after a graceful stop, 1 on a runtime error, 2 on a usage error.\n", f);
}

void kvtd_config_print(const struct kvtd_config *cfg, FILE *f)
{
	fputs("[kvtierd]\n", f);
	for (size_t i = 0; i < kvtd_n_options; i++) {
		const struct kvtd_option *o = &kvtd_options[i];

		if (!o->key || (o->flags & KVTD_PRINT_NEVER) ||
		    ((o->flags & KVTD_PRINT_CLUSTER) && !cfg->cluster[0]) ||
		    ((o->flags & KVTD_PRINT_IF_SET) && o->type->is_set && !o->type->is_set(o, cfg)))
			continue;
		fprintf(f, "%s = ", o->key);
		o->type->print(o, cfg, f);
		fputc('\n', f);
	}
	kvtd_tenants_print(cfg, f);
}
