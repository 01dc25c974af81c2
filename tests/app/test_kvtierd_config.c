/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierd's configuration as a person meets it: --help documents every
 * option, the config file is read and the command line overrides it,
 * --print-config writes a file kvtierd reads back to the same settings, and
 * bad input is a usage error (exit 2) with a message, never a start. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon_proc.h"
#include "helpers.h"

static char *dir;
static char *sockdir; /* short, under /tmp: the sockets */

/* Run kvtierd with args (a shell word list); returns its exit status and its
 * stdout+stderr in *out (malloc'd). */
static int run(const char *args, char **out)
{
	char cmd[2048];
	size_t len = 0, cap = 1 << 16;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "%s %s 2>&1", kvtd_binary(), args);
	p = popen(cmd, "r");
	assert_non_null(p);
	*out = malloc(cap);
	len = fread(*out, 1, cap - 1, p);
	(*out)[len] = 0;
	return WEXITSTATUS(pclose(p));
}

/* run(), ended by timeout(1) after `seconds` should kvtierd start serving
 * (or hang). */
static int run_limit(const char *args, int seconds, char **out)
{
	char cmd[2048];
	size_t len, cap = 1 << 16;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "timeout -k 1 %d %s %s 2>&1", seconds, kvtd_binary(), args);
	p = popen(cmd, "r");
	assert_non_null(p);
	*out = malloc(cap);
	len = fread(*out, 1, cap - 1, p);
	(*out)[len] = 0;
	return WEXITSTATUS(pclose(p));
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* Remove the lines that mention a token, in place. */
static void drop_token_lines(char *text)
{
	char *dst = text, *line = text;

	while (*line) {
		char *end = strchr(line, '\n');
		size_t n = end ? (size_t)(end - line + 1) : strlen(line);

		if (!memmem(line, n, "token", 5)) {
			memmove(dst, line, n);
			dst += n;
		}
		line += n;
	}
	*dst = 0;
}

static void help_documents_every_option(void **state)
{
	static const char *const opts[] = {
		"--config", "--socket", "--socket-mode", "--socket-group", "--allow-uid",
		"--data-dir", "--dram", "--ssd", "--no-huge-pages", "--no-prefault", "--policy",
		"--ssd-admission", "--ssd-codec", "--metrics", "--workers", "--drain-timeout", "--hello-timeout",
		"--max-conns-per-uid", "--max-ns-per-tenant", "--tenant", "--log-level",
		"--print-config", "--help", "--cluster", "--node-id", "--peer-listen",
		"--cluster-secret-file", "--rdma-device", "--peer-timeout", "sentinel://",
		"CLUSTER",
		"--version", "[tenant NAME]", "SIGTERM", "EXIT STATUS",
	};
	char *out;

	assert_int_equal(run("--help", &out), 0);
	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
		if (!strstr(out, opts[i]))
			fail_msg("--help does not mention %s", opts[i]);
	free(out);
}

/* --version and the ready line name the library's version, not a literal. */
static void version_comes_from_the_library(void **state)
{
	char want[64], *out;
	struct kvtd_proc d = { 0 };
	FILE *f;

	snprintf(want, sizeof(want), "kvtierd %s (protocol ", kvt_version());
	assert_int_equal(run("--version", &out), 0);
	assert_non_null(strstr(out, want));
	free(out);

	assert_int_equal(kvtd_start(&d, NULL, NULL), 0);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0); /* the ready line is written by then */
	snprintf(want, sizeof(want), "kvtierd %s ready", kvt_version());
	f = fopen(d.log, "r");
	assert_non_null(f);
	out = calloc(1, 1 << 16);
	assert_true(fread(out, 1, (1 << 16) - 1, f) > 0);
	fclose(f);
	assert_non_null(strstr(out, want));
	free(out);
	kvtd_cleanup(&d);
}

static void file_then_command_line(void **state)
{
	char ini[512], again[512], args[1400], *out, *out2;

	snprintf(ini, sizeof(ini), "%s/a.ini", dir);
	write_file(ini, "; a comment\n[kvtierd]\nsocket = /tmp/from-file.sock\ndram = 3G\n"
			"ssd = 0\nworkers = 7\nmetrics = off\nlog_level = warn\nallow_uids = 1000, 1001\n"
			"ssd_admission = useful\nssd_codec = shuf16-zstd\n"
			"\n[tenant alice]\ntoken = tok\nsalt = shared\nmodels = Qwen/*\n\n"
			"[tenant bob]\ntoken = tok-b\n");
	snprintf(args, sizeof(args), "--config %s --dram 5G --workers 2 --drain-timeout 2.5 "
		 "--print-config", ini);
	assert_int_equal(run(args, &out), 0);
	/* the command line wins over the file, the file over the defaults */
	assert_non_null(strstr(out, "socket = /tmp/from-file.sock"));
	assert_non_null(strstr(out, "dram = 5G"));
	assert_non_null(strstr(out, "workers = 2"));
	assert_non_null(strstr(out, "ssd_admission = useful\n"));
	assert_non_null(strstr(out, "ssd_codec = shuf16-zstd\n"));
	assert_non_null(strstr(out, "drain_timeout = 2500ms"));
	assert_non_null(strstr(out, "metrics = off"));
	assert_non_null(strstr(out, "log_level = warn"));
	assert_non_null(strstr(out, "allow_uids = 1000,1001"));
	assert_non_null(strstr(out, "[tenant alice]"));
	assert_non_null(strstr(out, "salt = shared"));
	assert_non_null(strstr(out, "models = Qwen/*"));
	assert_non_null(strstr(out, "[tenant bob]"));
	assert_null(strstr(out, "tok-b")); /* tokens are never printed */

	/* what --print-config prints reads back to the same settings (tokens
	 * aside: they are never printed, so they do not come back) */
	snprintf(again, sizeof(again), "%s/again.ini", dir);
	write_file(again, out);
	snprintf(args, sizeof(args), "--config %s --print-config", again);
	assert_int_equal(run(args, &out2), 0);
	drop_token_lines(out);
	drop_token_lines(out2);
	assert_string_equal(out, out2);
	free(out);
	free(out2);

	/* --tenant replaces the file's tenants */
	snprintf(args, sizeof(args), "--config %s --tenant carol:tc:team --print-config", ini);
	assert_int_equal(run(args, &out), 0);
	assert_non_null(strstr(out, "[tenant carol]"));
	assert_non_null(strstr(out, "salt = team"));
	assert_null(strstr(out, "[tenant alice]"));
	free(out);
}

/* A --tenant replaces the file's tenants whole: none of their settings
 * (the models a tenant may open) passes to the command line's. */
static void command_line_tenants_keep_nothing_of_the_file(void **state)
{
	char ini[512], args[1400], *out;

	snprintf(ini, sizeof(ini), "%s/models.ini", dir);
	write_file(ini, "[tenant alice]\ntoken = tok-a\nmodels = Qwen/*\n");
	snprintf(args, sizeof(args), "--config %s --tenant carol:tc --print-config", ini);
	assert_int_equal(run(args, &out), 0);
	assert_non_null(strstr(out, "[tenant carol]\n; token = (set, not shown)\nsalt = carol\n"));
	if (strstr(out, "models"))
		fail_msg("carol took alice's models:\n%s", out);
	free(out);
}

/* The cluster's settings print back as the INI keys they came from. */
static void cluster_settings_print_back(void **state)
{
	char *out;

	assert_int_equal(run("--cluster redis://10.0.0.9:6379 --node-id gpu-7 --peer-listen "
			     "10.0.0.7:7400 --peer-timeout 1500 --cluster-secret-file /etc/s "
			     "--print-config", &out), 0);
	assert_non_null(strstr(out, "cluster = redis://10.0.0.9:6379\n"));
	assert_non_null(strstr(out, "node_id = gpu-7\n"));
	assert_non_null(strstr(out, "peer_listen = 10.0.0.7:7400\n"));
	assert_non_null(strstr(out, "peer_timeout = 1500\n"));
	assert_non_null(strstr(out, "cluster_secret_file = /etc/s\n"));
	free(out);
	/* the directory as the primary that Sentinels name */
	assert_int_equal(run("--cluster sentinel://10.0.0.9:26379,s2:26380/kvt --node-id gpu-7 "
			     "--peer-listen 10.0.0.7:7400 --print-config", &out), 0);
	assert_non_null(strstr(out, "cluster = sentinel://10.0.0.9:26379,s2:26380/kvt\n"));
	free(out);
	assert_int_equal(run("--print-config", &out), 0);
	assert_null(strstr(out, "cluster"));
	free(out);
}

/* --ssd-codec auto (bf16 namespaces packed, others raw) is taken and
 * prints back. */
static void ssd_codec_auto_is_taken(void **state)
{
	char *out;

	(void)state;
	assert_int_equal(run("--ssd-codec auto --print-config", &out), 0);
	assert_non_null(strstr(out, "ssd_codec = auto\n"));
	free(out);
}

static void defaults_without_a_file(void **state)
{
	char *out;

	assert_int_equal(run("--print-config", &out), 0);
	assert_non_null(strstr(out, "dram = 25%"));
	assert_non_null(strstr(out, "ssd = 50%"));
	assert_non_null(strstr(out, "socket_mode = 0660"));
	assert_non_null(strstr(out, "metrics = 127.0.0.1:9464"));
	assert_non_null(strstr(out, "drain_timeout = 30000ms"));
	assert_non_null(strstr(out, "ssd_admission = always\n"));
	assert_non_null(strstr(out, "ssd_codec = raw\n"));
	assert_non_null(strstr(out, "[tenant default]"));
	free(out);
}

static void bad_input_is_a_usage_error(void **state)
{
	static const char *const bad_files[] = {
		"[kvtierd]\ndram = lots\n",
		"[kvtierd]\nno_such_key = 1\n",
		"[elsewhere]\nx = 1\n",
		"[kvtierd]\nworkers = 0\n",
		"[kvtierd]\nssd_admission = sometimes\n",
		"[kvtierd]\nmetrics = nocolon\n",
		"[tenant x]\ncolour = blue\n",
		"[kvtierd]\ncluster = redis://r:6379\nnode_id = n1\n",
		"this is not ini\n",
	};
	static const char *const bad_args[] = {
		"--dram 12Q", "--workers many", "--socket-mode 999", "--tenant no-token",
		"--log-level loud", "--no-such-option", "stray-argument", "--config /nonexistent/x.ini",
		"--drain-timeout 0", "--drain-timeout 5m", "--drain-timeout 3601",
		"--hello-timeout 0.05", "--max-conns-per-uid 70000", "--max-conns-per-uid -1",
		/* the cluster's settings, alone or malformed */
		"--cluster http://redis:6379", "--cluster redis://r:6379",
		"--cluster redis://r:6379 --node-id a", "--cluster redis://r:6379 --node-id 'a b' "
		"--peer-listen 10.0.0.1:7400", "--cluster redis://r:6379 --node-id a --peer-listen "
		"0.0.0.0:7400", "--cluster redis://r:6379 --node-id a --peer-listen 10.0.0.1",
		"--node-id a --peer-listen 10.0.0.1:7400", "--peer-timeout 5",
		/* Sentinels: each HOST:PORT, then the master's name */
		"--cluster sentinel://h:1 --node-id a --peer-listen 10.0.0.1:7400",
		"--cluster sentinel://h/m --node-id a --peer-listen 10.0.0.1:7400",
		"--cluster sentinel://h:1,/m --node-id a --peer-listen 10.0.0.1:7400",
		"--cluster sentinel://h:1/ --node-id a --peer-listen 10.0.0.1:7400",
		"--cluster 'sentinel://h:1/m n' --node-id a --peer-listen 10.0.0.1:7400",
		"--cluster sentinel://h:70000/m --node-id a --peer-listen 10.0.0.1:7400",
		"--cluster sentinel://h:1/m",
	};
	char ini[512], args[700], *out;

	snprintf(ini, sizeof(ini), "%s/bad.ini", dir);
	for (size_t i = 0; i < sizeof(bad_files) / sizeof(bad_files[0]); i++) {
		write_file(ini, bad_files[i]);
		snprintf(args, sizeof(args), "--config %s --print-config", ini);
		if (run(args, &out) != 2)
			fail_msg("config accepted: %s", bad_files[i]);
		assert_true(strlen(out) > 0); /* said why */
		free(out);
	}
	for (size_t i = 0; i < sizeof(bad_args) / sizeof(bad_args[0]); i++) {
		snprintf(args, sizeof(args), "%s --print-config", bad_args[i]);
		if (run(args, &out) != 2)
			fail_msg("arguments accepted: %s", bad_args[i]);
		free(out);
	}
}

/* --config reads a regular file of bounded size and nothing else: a
 * directory, /dev/zero (endless, no newline), a FIFO nobody writes and a file
 * over the limit are usage errors at once, not a spin or a hang. */
static void config_must_be_a_small_regular_file(void **state)
{
	char fifo[512], big[512], args[1400], *out;
	const char *const bad[] = { dir, "/dev/zero", fifo, big };
	FILE *f;

	snprintf(fifo, sizeof(fifo), "%s/fifo.ini", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	snprintf(big, sizeof(big), "%s/big.ini", dir);
	f = fopen(big, "w");
	assert_non_null(f);
	fputs("[kvtierd]\n", f);
	for (int i = 0; i < 40000; i++)
		fputs("; a comment line that makes the file long\n", f);
	fclose(f);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(args, sizeof(args), "--config %s --print-config", bad[i]);
		/* a daemon that spins or blocks on it is ended by the timeout (124) */
		if (run_limit(args, 3, &out) != 2)
			fail_msg("--config %s was not refused:\n%s", bad[i], out);
		if (!strstr(out, bad[i]))
			fail_msg("the message does not name %s:\n%s", bad[i], out);
		free(out);
	}
	unlink(fifo);
	unlink(big);
}

/* The text of a stopped daemon's log (malloc'd). */
static char *read_log(const struct kvtd_proc *d)
{
	char *text = calloc(1, 1 << 20);
	FILE *f = fopen(d->log, "r");

	assert_non_null(f);
	assert_true(fread(text, 1, (1 << 20) - 1, f) > 0);
	fclose(f);
	return text;
}

/* The DRAM tier's default (25%) is of the memory the daemon may use: under a
 * cgroup limit (v2 memory.max, v1 memory.limit_in_bytes) that is the room
 * left under it, not the host's free memory; a --dram that cannot fit is a
 * usage error naming the option and the limit. $KVTIER_CGROUP_DIR points
 * the daemon at a fake cgroup. */
static void dram_is_sized_from_the_cgroup_limit(void **state)
{
	static const struct { const char *file, *used, *value, *want; } cases[] = {
		{ "memory.max", "memory.current", "536870912\n", "dram      128 MiB" },
		{ "memory.limit_in_bytes", "memory.usage_in_bytes", "268435456\n",
		  "dram      64 MiB" },
	};
	const char *extra[] = { "--dram", "25%", "--no-prefault", "--no-gpu", NULL };
	char cg[512], path[600], args[1400], *out;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct kvtd_proc d = { 0 };

		snprintf(cg, sizeof(cg), "%s/cgroup%zu", dir, i);
		assert_int_equal(mkdir(cg, 0755), 0);
		snprintf(path, sizeof(path), "%s/%s", cg, cases[i].file);
		write_file(path, cases[i].value);
		snprintf(path, sizeof(path), "%s/%s", cg, cases[i].used);
		write_file(path, "0\n");
		setenv("KVTIER_CGROUP_DIR", cg, 1);

		assert_int_equal(kvtd_start(&d, NULL, extra), 0);
		assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
		out = read_log(&d);
		if (!strstr(out, cases[i].want))
			fail_msg("expected \"%s\" under a %s of %s:\n%s", cases[i].want,
				 cases[i].file, cases[i].value, out);
		free(out);
		kvtd_cleanup(&d);

		snprintf(args, sizeof(args), "--socket %s/cg.sock --dram 1G --ssd 0 --metrics off "
			 "--no-prefault --no-gpu", sockdir);
		if (run_limit(args, 10, &out) != 2)
			fail_msg("--dram 1G was not refused under a %s of %s:\n%s", cases[i].file,
				 cases[i].value, out);
		if (!strstr(out, "--dram") || !strstr(out, "MiB"))
			fail_msg("the refusal does not name --dram and the limit:\n%s", out);
		free(out);
		unsetenv("KVTIER_CGROUP_DIR");
	}
}

/* A usage error exits 2 with a message naming the option (or the file's
 * section) and what it accepts, before anything is served. */
static void usage_errors_name_the_option_and_what_it_takes(void **state)
{
	static const struct { const char *args, *names, *accepts; } cases[] = {
		{ "--policy nope", "--policy", "tail-lru" },
		{ "--ssd-admission all", "--ssd-admission", "always, reused, useful" },
		{ "--ssd-codec zstd", "--ssd-codec", "shuf16-zstd" },
		{ "--ssd 1K", "--ssd", "4 MiB" },
		{ "--ssd 100T", "--ssd", "free" },
		{ "--metrics 127.0.0.1:99999", "--metrics", "65535" },
		{ "--metrics nohost:80", "--metrics", "65535" },
		{ "--dram 0", "--dram", "1 MiB" },
		{ "--workers 0", "--workers", "256" },
		{ "--log-level loud", "--log-level", "debug" },
	};
	char args[6000], ini[512], *out;
	int n;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(args, sizeof(args), "%s --socket %s/u.sock --data-dir %s/data --no-prefault "
			 "--no-gpu --metrics off", cases[i].args, sockdir, dir);
		if (strstr(cases[i].args, "--metrics"))
			snprintf(args, sizeof(args), "--socket %s/u.sock --data-dir %s/data "
				 "--no-prefault --no-gpu --ssd 0 %s", sockdir, dir, cases[i].args);
		if (run_limit(args, 10, &out) != 2)
			fail_msg("%s: not a usage error:\n%s", cases[i].args, out);
		if (!strstr(out, cases[i].names) || !strstr(out, cases[i].accepts))
			fail_msg("%s: the message does not name %s and \"%s\":\n%s", cases[i].args,
				 cases[i].names, cases[i].accepts, out);
		free(out);
	}
	/* the 65th tenant is told the limit */
	n = 0;
	for (int i = 0; i < 65; i++)
		n += snprintf(args + n, sizeof(args) - (size_t)n, "--tenant t%d:tok%d ", i, i);
	snprintf(args + n, sizeof(args) - (size_t)n, "--print-config");
	assert_int_equal(run(args, &out), 2);
	if (!strstr(out, "--tenant") || !strstr(out, "64"))
		fail_msg("65 tenants: the message does not give the limit:\n%s", out);
	free(out);
	/* a [tenant] section without a token line is an error, not dropped */
	snprintf(ini, sizeof(ini), "%s/notoken.ini", dir);
	write_file(ini, "[tenant alice]\ntoken = ta\n\n[tenant bob]\n\n[tenant carol]\nsalt = c\n");
	snprintf(args, sizeof(args), "--config %s --socket %s/u.sock --dram 16M --ssd 0 "
		 "--metrics off --no-prefault --no-gpu", ini, sockdir);
	assert_int_equal(run_limit(args, 10, &out), 2);
	if (!strstr(out, "bob") || !strstr(out, "token"))
		fail_msg("a tenant without a token was not named:\n%s", out);
	free(out);
}

/* --metrics beyond loopback is allowed, with a warning: it needs no
 * credentials. */
static void metrics_beyond_loopback_warn(void **state)
{
	const char *extra[] = { "--metrics", "0.0.0.0:0", NULL };
	struct kvtd_proc d = { 0 };
	char *out;

	assert_int_equal(kvtd_start(&d, NULL, extra), 0);
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	out = read_log(&d);
	if (!strstr(out, "level=warn event=metrics.exposed"))
		fail_msg("no warning for metrics on 0.0.0.0:\n%s", out);
	free(out);
	kvtd_cleanup(&d);
}

/* A token names its tenant at HELLO: two tenants with one token, or an empty
 * token beside other tenants, are refused before the daemon serves. */
static void ambiguous_tokens_are_refused(void **state)
{
	static const char *const bad_files[] = {
		"[tenant a]\ntoken = same\n[tenant b]\ntoken = same\n",
		"[tenant a]\ntoken = ta\n[tenant b]\nsalt = s\n",
	};
	static const char *const bad_args[] = {
		"--tenant a:t --tenant b:t", "--tenant a: --tenant b:tb",
	};
	char ini[512], args[1400], *out;

	snprintf(ini, sizeof(ini), "%s/tokens.ini", dir);
	for (size_t i = 0; i < 4; i++) {
		if (i < 2) {
			write_file(ini, bad_files[i]);
			snprintf(args, sizeof(args), "--config %s --socket %s/tok.sock --dram 1M --ssd 0 "
				 "--no-prefault --no-gpu", ini, sockdir);
		} else {
			snprintf(args, sizeof(args), "%s --socket %s/tok.sock --dram 1M --ssd 0 "
				 "--no-prefault --no-gpu", bad_args[i - 2], sockdir);
		}
		/* a daemon that took the config would serve: the timeout ends it */
		if (run_limit(args, 10, &out) != 2)
			fail_msg("tokens accepted: %s", i < 2 ? bad_files[i] : bad_args[i - 2]);
		assert_non_null(strstr(out, "token"));
		free(out);
	}
	/* one tenant may go without a token */
	snprintf(args, sizeof(args), "--tenant solo: --print-config");
	assert_int_equal(run(args, &out), 0);
	free(out);
}

/* Settings that cannot work, or that --print-config could not write back
 * as they are, are usage errors (exit 2) naming what is wrong, with
 * --print-config as with a daemon about to serve: a tenant declared twice
 * (old code kept the last token silently), a control character in a
 * tenant's name or salt (it printed broken INI), an empty socket path (exit
 * 1, vaguely), a socket group that does not exist (exit 1), two tenants
 * with one token (printed as if fine, then refused). */
static void config_gaps_are_usage_errors(void **state)
{
	static const struct { const char *file, *args, *says; } cases[] = {
		{ "[tenant a]\ntoken = ta\n[tenant b]\ntoken = tb\n[tenant a]\ntoken = tc\n", "",
		  "twice" },
		{ NULL, "--tenant a:ta --tenant a:tb", "twice" },
		{ NULL, "--tenant \"$(printf 'bad\\nname')\":tok", "--tenant" },
		{ NULL, "--tenant ok:tok:\"$(printf 'salt\\n[kvtierd]')\"", "--tenant" },
		{ "[kvtierd]\nsocket =\n", "", "socket" },
		{ NULL, "--data-dir ''", "--data-dir" },
		{ NULL, "--socket-group rel-no-such-group", "rel-no-such-group" },
		{ NULL, "--tenant a:same --tenant b:same", "token" },
		{ "[tenant a]\ntoken = same\n[tenant b]\ntoken = same\n", "", "token" },
	};
	char ini[512], args[1400], *out;

	snprintf(ini, sizeof(ini), "%s/gaps.ini", dir);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		for (int print = 0; print < 2; print++) {
			int n = 0;

			if (cases[i].file) {
				write_file(ini, cases[i].file);
				n = snprintf(args, sizeof(args), "--config %s ", ini);
			}
			snprintf(args + n, sizeof(args) - (size_t)n, "%s --socket %s/gap.sock "
				 "--dram 1M --ssd 0 --no-prefault --no-gpu --metrics off%s",
				 cases[i].args, sockdir, print ? " --print-config" : "");
			if (strstr(cases[i].args, "socket") || (cases[i].file &&
							       strstr(cases[i].file, "socket")))
				snprintf(args + n, sizeof(args) - (size_t)n, "%s --dram 1M --ssd 0 "
					 "--no-prefault --no-gpu --metrics off%s", cases[i].args,
					 print ? " --print-config" : "");
			if (run_limit(args, 10, &out) != 2)
				fail_msg("%s%s: not a usage error:\n%s", cases[i].file ? cases[i].file : "",
					 args, out);
			if (!strstr(out, cases[i].says))
				fail_msg("%s: the message does not say \"%s\":\n%s", args, cases[i].says,
					 out);
			free(out);
		}
	}
}

/* The daemon's checks of its settings against this machine (the DRAM tier
 * within the memory this process may use, the SSD tier within its file
 * system and at least 4 MiB, the hand-over socket's path within a socket
 * path's length) are --print-config's too: a configuration the daemon
 * refuses with exit 2 is refused the same way, where it used to be printed
 * with exit 0. Nothing is made by --print-config (the data directory). */
static void print_config_refuses_what_the_daemon_refuses(void **state)
{
	static const struct { const char *file, *args, *says; } cases[] = {
		{ NULL, "--dram 1000T --ssd 0", "--dram" },
		{ "[kvtierd]\ndram = 512K\n", "--ssd 0", "--dram" },
		{ NULL, "--dram 1M --ssd 1M", "--ssd" },
		{ "[kvtierd]\nssd = 1000T\n", "--dram 1M", "--ssd" },
		{ NULL, "--dram 1M --ssd 0 --socket %s/%.*s", "--handover-socket" },
	};
	char ini[512], data[512], sock[512], args[2400], more[512], *out;
	struct stat st;

	(void)state;
	snprintf(ini, sizeof(ini), "%s/checks.ini", dir);
	snprintf(sock, sizeof(sock), "%s/checks.sock", sockdir);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bool own_socket = strstr(cases[i].args, "--socket") != NULL;

		/* a socket path of 100 bytes: it fits, but not with ".takeover" */
		snprintf(more, sizeof(more), cases[i].args, sockdir, 99 - (int)strlen(sockdir),
			 "ssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssss"
			 "ssssssssssssssssssssssssssssssssssssssss");
		for (int print = 0; print < 2; print++) {
			int n = 0;

			/* a data directory of its own, not there yet */
			snprintf(data, sizeof(data), "%s/checks-%zu-%d/data", dir, i, print);
			if (cases[i].file) {
				write_file(ini, cases[i].file);
				n = snprintf(args, sizeof(args), "--config %s ", ini);
			}
			snprintf(args + n, sizeof(args) - (size_t)n, "%s%s%s --data-dir %s "
				 "--no-prefault --no-gpu --metrics off%s", more,
				 own_socket ? "" : " --socket ", own_socket ? "" : sock, data,
				 print ? " --print-config" : "");
			if (run_limit(args, 10, &out) != 2)
				fail_msg("%s%s: not a usage error:\n%s", cases[i].file ? cases[i].file : "",
					 args, out);
			if (!strstr(out, cases[i].says))
				fail_msg("%s: the message does not say \"%s\":\n%s", args, cases[i].says,
					 out);
			free(out);
			if (print)
				assert_int_not_equal(stat(data, &st), 0);
		}
	}
}

/* --socket replaces only a stale socket (one left by a daemon that died): a
 * regular file, or a symlink, at the path is refused and left as it was. */
static void only_a_stale_socket_is_replaced(void **state)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char file[512], link[512], sock[512], args[1400], *out;
	const char *const paths[] = { file, link };
	struct stat st;
	int fd;

	snprintf(file, sizeof(file), "%s/precious", sockdir);
	snprintf(link, sizeof(link), "%s/link", sockdir);
	snprintf(sock, sizeof(sock), "%s/stale", sockdir);
	assert_int_equal(mkdir(sock, 0700), 0);
	strcat(sock, "/kvtierd.sock"); /* where kvtd_start puts the socket given sockdir/stale */
	write_file(file, "not a socket\n");
	assert_int_equal(symlink(file, link), 0);
	for (size_t i = 0; i < 2; i++) {
		snprintf(args, sizeof(args), "--socket %s --dram 16M --ssd 0 --metrics off "
			 "--no-prefault --no-gpu", paths[i]);
		if (run_limit(args, 10, &out) == 0)
			fail_msg("kvtierd served on %s:\n%s", paths[i], out);
		if (!strstr(out, "not a socket"))
			fail_msg("no reason given for %s:\n%s", paths[i], out);
		free(out);
		assert_int_equal(lstat(paths[i], &st), 0);
		assert_true(i == 0 ? S_ISREG(st.st_mode) : S_ISLNK(st.st_mode));
	}
	out = NULL;
	{
		FILE *f = fopen(file, "r");
		char line[64] = "";

		assert_non_null(f);
		assert_non_null(fgets(line, sizeof(line), f));
		fclose(f);
		assert_string_equal(line, "not a socket\n");
	}
	/* a socket file nobody listens on is stale: it is replaced */
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(strlen(sock) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, sock, strlen(sock) + 1);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	{
		struct kvtd_proc d = { 0 };

		*strrchr(sock, '/') = 0;
		d.sockdir = strdup(sock);
		assert_int_equal(kvtd_start(&d, NULL, NULL), 0);
		assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
		kvtd_cleanup(&d);
	}
	unlink(link);
	unlink(file);
}

static void a_live_socket_is_not_taken_over(void **state)
{
	struct kvtd_proc d = { 0 };
	char args[600], *out;

	assert_int_equal(kvtd_start(&d, NULL, NULL), 0);
	snprintf(args, sizeof(args), "--socket %s --dram 16M --ssd 0 --metrics off --no-prefault",
		 d.socket);
	assert_int_equal(run(args, &out), 1);
	assert_non_null(strstr(out, "server.open.failed"));
	free(out);
	/* the first daemon still serves */
	{
		struct kvt_client *c = kvtd_connect(&d, NULL);
		assert_non_null(c);
		assert_int_equal(kvt_client_ping(c, "x", 1), 0);
		kvt_client_close(c);
	}
	assert_int_equal(kvtd_stop(&d, SIGTERM), 0);
	kvtd_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(help_documents_every_option),
		cmocka_unit_test(version_comes_from_the_library),
		cmocka_unit_test(file_then_command_line),
		cmocka_unit_test(command_line_tenants_keep_nothing_of_the_file),
		cmocka_unit_test(defaults_without_a_file),
		cmocka_unit_test(cluster_settings_print_back),
		cmocka_unit_test(ssd_codec_auto_is_taken),
		cmocka_unit_test(bad_input_is_a_usage_error),
		cmocka_unit_test(config_must_be_a_small_regular_file),
		cmocka_unit_test(dram_is_sized_from_the_cgroup_limit),
		cmocka_unit_test(usage_errors_name_the_option_and_what_it_takes),
		cmocka_unit_test(metrics_beyond_loopback_warn),
		cmocka_unit_test(ambiguous_tokens_are_refused),
		cmocka_unit_test(config_gaps_are_usage_errors),
		cmocka_unit_test(print_config_refuses_what_the_daemon_refuses),
		cmocka_unit_test(only_a_stale_socket_is_replaced),
		cmocka_unit_test(a_live_socket_is_not_taken_over),
	};
	int rc;

	dir = kvt_test_mkdtemp("kvtierd-config");
	sockdir = kvt_test_sockdir("kvtierd-config");
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	kvt_test_rmdir(dir);
	kvt_test_rmdir(sockdir);
	free(dir);
	free(sockdir);
	return rc;
}
