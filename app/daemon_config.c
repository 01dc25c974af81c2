/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierd's configuration read in: the defaults, the --config file (INI,
 * libinih), then the command line (getopt), every option found in the table
 * of daemon_options.h, and the checks of settings that go together. */
#include "app/daemon_config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ini.h>

#include "app/daemon_options.h"
#include "app/daemon_tenants.h"
#include "transport/proto.h"

#define KVTD_CONFIG_MAX_BYTES (1 << 20)
#define KVTD_CONFIG_MAX_TEXT "1 MiB"
/* getopt's code of a long-only option: its row, past every letter */
#define LONG_ONLY_CODE 256

void kvtd_config_defaults(struct kvtd_config *cfg)
{
	const char *env = getenv("KVTIER_SOCKET"), *home, *xdg;

	memset(cfg, 0, sizeof(*cfg));
	for (size_t i = 0; i < kvtd_n_options; i++) {
		const struct kvtd_option *o = &kvtd_options[i];

		/* the table's defaults are valid values (test_kvtierd_options) */
		if (o->def && o->type->parse(o, cfg, o->def))
			abort();
	}
	/* the defaults that depend on the uid and the environment */
	if (env && *env)
		kvtd_set_str(cfg->socket_path, sizeof(cfg->socket_path), env);
	else if (geteuid() == 0)
		kvtd_set_str(cfg->socket_path, sizeof(cfg->socket_path), "/run/kvtier/kvtierd.sock");
	else
		snprintf(cfg->socket_path, sizeof(cfg->socket_path), "/tmp/kvtier-%u/kvtierd.sock",
			 (unsigned)geteuid());
	xdg = getenv("XDG_DATA_HOME");
	home = getenv("HOME");
	if (geteuid() == 0)
		kvtd_set_str(cfg->data_dir, sizeof(cfg->data_dir), "/var/lib/kvtier");
	else if (xdg && *xdg)
		snprintf(cfg->data_dir, sizeof(cfg->data_dir), "%s/kvtier", xdg);
	else
		snprintf(cfg->data_dir, sizeof(cfg->data_dir), "%s/.local/share/kvtier",
			 home && *home ? home : "/tmp");
}

/* The config file's text (malloc'd, NUL-terminated): a regular file of at
 * most KVTD_CONFIG_MAX_BYTES. Anything else (a directory, a device such as
 * /dev/zero, a FIFO: opened without blocking, never read) or a larger file
 * is refused with a message. Returns 0 or -EINVAL. */
static int read_config_file(const char *path, char **out)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	const char *why = NULL;
	size_t len = 0;
	struct stat st;
	char *text = NULL;

	if (fd < 0) {
		fprintf(stderr, "kvtierd: --config %s: %s\n", path, strerror(errno));
		return -EINVAL;
	}
	if (fstat(fd, &st))
		why = strerror(errno);
	else if (!S_ISREG(st.st_mode))
		why = "not a regular file";
	else if (st.st_size > KVTD_CONFIG_MAX_BYTES)
		why = "larger than " KVTD_CONFIG_MAX_TEXT ", the limit of a config file";
	else if (!(text = malloc((size_t)st.st_size + 2)))
		why = strerror(ENOMEM);
	/* the file may grow meanwhile: read one byte past its size to notice */
	while (!why) {
		ssize_t n = read(fd, text + len, (size_t)st.st_size + 1 - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			why = strerror(errno);
		else if (len + (size_t)n > (size_t)st.st_size)
			why = "changed while being read";
		else if (n == 0)
			break;
		len += n > 0 ? (size_t)n : 0;
	}
	close(fd);
	if (!why && memchr(text, 0, len))
		why = "holds a NUL byte: not a text file";
	if (why) {
		fprintf(stderr, "kvtierd: --config %s: %s\n", path, why);
		free(text);
		return -EINVAL;
	}
	text[len] = 0;
	*out = text;
	return 0;
}

struct ini_ctx {
	struct kvtd_config *cfg;
	const char *path;
	int err;
};

static int ini_cb(void *user, const char *section, const char *key, const char *v)
{
	struct ini_ctx *ctx = user;
	const struct kvtd_option *o;
	char name[64];
	bool found;
	int err;

	if (!strcmp(section, "kvtierd")) {
		o = kvtd_option_by_key(key);
		err = o ? o->type->parse(o, ctx->cfg, v) : -ENOENT;
		if (err == -ENOENT)
			fprintf(stderr, "kvtierd: %s: [%s] %s: unknown key\n", ctx->path, section, key);
		else if (err)
			fprintf(stderr, "kvtierd: %s: [%s] %s = %s: expected %s\n", ctx->path, section,
				key, v, kvtd_option_accepts(o));
	} else if (kvtd_tenant_section(section, name, sizeof(name))) {
		err = kvtd_tenant_set(ctx->cfg, section, key, v, &found);
		if (err == -ENOENT)
			fprintf(stderr, "kvtierd: %s: [%s] %s: unknown key\n", ctx->path, section, key);
		else if (err)
			fprintf(stderr, "kvtierd: %s: [%s] %s = %s: invalid value%s\n", ctx->path,
				section, key, v,
				found ? "" : " (at most 64 tenants, names of 1 to 32 bytes)");
	} else {
		fprintf(stderr, "kvtierd: %s: unknown section [%s]\n", ctx->path, section);
		ctx->err = -EINVAL;
		return 0;
	}
	if (err)
		ctx->err = -EINVAL;
	return 1;
}

/* Read the --config file over cfg. Returns 0 or -EINVAL with a message. */
static int load_file(struct kvtd_config *cfg)
{
	struct ini_ctx ctx = { .cfg = cfg, .path = cfg->config_path };
	char *text;
	int line;

	if (read_config_file(cfg->config_path, &text))
		return -EINVAL;
	if (kvtd_tenants_declare(cfg, cfg->config_path, text)) {
		free(text);
		return -EINVAL;
	}
	line = ini_parse_string(text, ini_cb, &ctx);
	free(text);
	if (line < 0) {
		fprintf(stderr, "kvtierd: --config %s: %s\n", cfg->config_path, strerror(ENOMEM));
		return -EINVAL;
	}
	if (line > 0) {
		fprintf(stderr, "kvtierd: %s:%d: syntax error\n", cfg->config_path, line);
		return -EINVAL;
	}
	return ctx.err;
}

/* getopt's tables, made from the options' */
struct cli {
	struct option longs[KVTD_MAX_OPTIONS + 1];
	char shorts[2 * KVTD_MAX_OPTIONS + 1];
};

static void cli_tables(struct cli *cli)
{
	size_t n = 0;

	for (size_t i = 0; i < kvtd_n_options; i++) {
		const struct kvtd_option *o = &kvtd_options[i];

		cli->longs[i] = (struct option){
			.name = o->name,
			.has_arg = o->arg ? required_argument : no_argument,
			.val = o->letter ? o->letter : LONG_ONLY_CODE + (int)i,
		};
		if (o->letter) {
			cli->shorts[n++] = o->letter;
			if (o->arg)
				cli->shorts[n++] = ':';
		}
	}
	cli->longs[kvtd_n_options] = (struct option){ 0 };
	cli->shorts[n] = 0;
}

/* The row of getopt's code c, NULL for '?' (an unknown option) */
static const struct kvtd_option *cli_option(int c)
{
	if (c >= LONG_ONLY_CODE && (size_t)(c - LONG_ONLY_CODE) < kvtd_n_options)
		return &kvtd_options[c - LONG_ONLY_CODE];
	for (size_t i = 0; i < kvtd_n_options; i++)
		if (kvtd_options[i].letter && kvtd_options[i].letter == c)
			return &kvtd_options[i];
	return NULL;
}

/* The cluster's settings go together: a directory, a name, an address. */
static int check_cluster(const struct kvtd_config *cfg)
{
	if (!cfg->cluster[0]) {
		if (cfg->node_id[0] || cfg->peer_listen[0] || cfg->rdma_device[0]) {
			fprintf(stderr, "kvtierd: node_id, peer_listen and rdma_device need "
				"--cluster redis://HOST:PORT\n");
			return -EINVAL;
		}
		return 0;
	}
#ifndef KVT_HAVE_CLUSTER
	fprintf(stderr, "kvtierd: --cluster: this kvtierd was built without the cluster "
		"(hiredis was not found at build time)\n");
	return -EINVAL;
#endif
	if (!cfg->node_id[0] || !cfg->peer_listen[0]) {
		fprintf(stderr, "kvtierd: --cluster needs --node-id ID and --peer-listen ADDR:PORT "
			"(the address other nodes reach this one at)\n");
		return -EINVAL;
	}
	return 0;
}

int kvtd_config_load(struct kvtd_config *cfg, int argc, char **argv)
{
	bool first_tenant = true;
	struct cli cli;
	int c, err;

	kvtd_config_defaults(cfg);
	cli_tables(&cli);
	/* pass 1: the config file, so the command line can override it */
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, cli.shorts, cli.longs, NULL)) != -1) {
		const struct kvtd_option *o = cli_option(c);

		if (!o)
			continue;
		if (o->action == KVTD_CONFIG) {
			kvtd_set_str(cfg->config_path, sizeof(cfg->config_path), optarg);
		} else if (o->action == KVTD_HELP) {
			kvtd_usage(stdout);
			return 1;
		} else if (o->action == KVTD_VERSION) {
			printf("kvtierd %s (protocol %d)\n", kvt_version(), KVT_PROTO_VERSION_MAX);
			return 1;
		}
	}
	if (cfg->config_path[0] && load_file(cfg))
		return -EINVAL;
	/* pass 2: the overrides */
	opterr = 1;
	optind = 1;
	while ((c = getopt_long(argc, argv, cli.shorts, cli.longs, NULL)) != -1) {
		const struct kvtd_option *o = cli_option(c);
		const char *value;

		if (!o) {
			fprintf(stderr, "Try 'kvtierd --help'.\n");
			return -EINVAL;
		}
		if (o->action == KVTD_TENANT) {
			if (kvtd_tenant_add_cli(cfg, optarg, &first_tenant))
				return -EINVAL;
			continue;
		}
		if (o->action != KVTD_SET)
			continue;
		value = o->arg ? optarg : o->flag_value;
		err = o->type->parse(o, cfg, value);
		if (err) {
			fprintf(stderr, "kvtierd: --%s %s: expected %s\n", o->name, value,
				kvtd_option_accepts(o));
			return -EINVAL;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kvtierd: unexpected argument '%s'\nTry 'kvtierd --help'.\n", argv[optind]);
		return -EINVAL;
	}
	if (cfg->n_tenants == 0) {
		struct kvtd_tenant *t = kvtd_tenant_named(cfg, "default");
		t->token[0] = 0;
		t->has_token = true; /* the lone tenant, open by design */
	}
	if (check_cluster(cfg))
		return -EINVAL;
	if (cfg->socket_group[0] && !getgrnam(cfg->socket_group)) {
		fprintf(stderr, "kvtierd: --socket-group %s: no such group\n", cfg->socket_group);
		return -EINVAL;
	}
	/* a printed config shows no tokens, so one read back from it lacks
	 * them: it is checked for all else */
	return kvtd_tenants_check(cfg, cfg->print_config);
}
