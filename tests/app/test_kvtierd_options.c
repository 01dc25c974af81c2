/* SPDX-License-Identifier: Apache-2.0 */
/* Every row of kvtierd's table of options (app/daemon_options.c) reaches
 * every place an option shows: --help, the man page made from it, the
 * command line, the config file's [kvtierd] keys, --print-config (which
 * reads back to the same settings) and docs/configuration.md. A new row
 * passes with no change here, or names what it lacks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "app/daemon_config.h"
#include "app/daemon_options.h"
#include "helpers.h"

static char *dir;

static int setup(void **state)
{
	(void)state;
	dir = kvt_test_mkdtemp("kvtd-options");
	/* the computed defaults must not depend on the caller's environment */
	setenv("KVTIER_SOCKET", "", 1);
	return dir ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	kvt_test_rmdir(dir);
	free(dir);
	return 0;
}

/* Rows that set a field and run here: the cluster's only where it is built. */
static bool in_use(const struct kvtd_option *o)
{
#ifndef KVT_HAVE_CLUSTER
	if (o->flags & KVTD_PRINT_CLUSTER)
		return false;
#endif
	return o->action == KVTD_SET;
}

static bool field_differs(const struct kvtd_option *o, const struct kvtd_config *a,
			  const struct kvtd_config *b)
{
	return memcmp((const char *)a + o->offset, (const char *)b + o->offset, o->size) != 0;
}

static char *slurp(FILE *f)
{
	size_t len = 0, cap = 1 << 16;
	char *buf = malloc(cap);

	assert_non_null(buf);
	for (size_t n; (n = fread(buf + len, 1, cap - 1 - len, f)) > 0;) {
		len += n;
		if (len + 1 == cap) {
			cap *= 2;
			buf = realloc(buf, cap);
			assert_non_null(buf);
		}
	}
	buf[len] = 0;
	return buf;
}

static char *file_text(const char *path)
{
	FILE *f = fopen(path, "r");
	char *text;

	if (!f)
		fail_msg("%s: cannot open", path);
	text = slurp(f);
	fclose(f);
	return text;
}

/* kvtd_config_load over argv (NULL-terminated after argv[0]) */
static int load(struct kvtd_config *cfg, const char **args)
{
	char *argv[2 * KVTD_MAX_OPTIONS + 8];
	int argc = 0;

	argv[argc++] = (char *)"kvtierd";
	for (; *args; args++)
		argv[argc++] = (char *)*args;
	argv[argc] = NULL;
	return kvtd_config_load(cfg, argc, argv);
}

static char *printed(const struct kvtd_config *cfg)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	kvtd_config_print(cfg, f);
	fclose(f);
	return buf;
}

/* A row's names, ranges and texts are there and do not clash with another's;
 * its default and its sample are values it accepts, and differ. */
static void rows_are_whole(void **state)
{
	(void)state;
	for (size_t i = 0; i < kvtd_n_options; i++) {
		const struct kvtd_option *o = &kvtd_options[i];
		struct kvtd_config cfg;

		if (!o->name || !*o->name || !o->help || !*o->help)
			fail_msg("row %zu: no name or no help", i);
		for (size_t j = 0; j < i; j++) {
			const struct kvtd_option *p = &kvtd_options[j];

			if (!strcmp(o->name, p->name) || (o->letter && o->letter == p->letter) ||
			    (o->key && p->key && !strcmp(o->key, p->key)))
				fail_msg("--%s and --%s share a name, a letter or a key", p->name,
					 o->name);
		}
		if (o->action != KVTD_SET)
			continue;
		if (!o->type || !o->size)
			fail_msg("--%s sets no field", o->name);
		if (!o->arg && !o->flag_value)
			fail_msg("--%s takes no value and sets none", o->name);
		if (o->key && o->arg && !o->accepts && !o->names)
			fail_msg("--%s: no text of what it accepts, for a usage error", o->name);
		if (o->key && !o->sample)
			fail_msg("--%s: no sample value", o->name);
		kvtd_config_defaults(&cfg);
		if (o->sample && o->type->parse(o, &cfg, o->sample))
			fail_msg("--%s: its sample %s is refused", o->name, o->sample);
		if (o->def && o->sample && !strcmp(o->def, o->sample))
			fail_msg("--%s: its sample is its default", o->name);
	}
}

/* Whether CONFIGURATION's list of keys in help names key. */
static bool lists_key(const char *help, const char *key)
{
	const char *list = strstr(help, "\nCONFIGURATION\n"), *end, *p;
	size_t n = strlen(key);

	if (!list || !(end = strstr(list, "[tenant NAME]")))
		return false;
	for (p = list; (p = strstr(p, key)) && p < end; p += n)
		if ((p[-1] == ' ' || p[-1] == '(') && strchr(",) ", p[n]))
			return true;
	return false;
}

/* --help documents each option with its letter and value, and the config
 * file's list names each key; the man page, made from --help, has each. */
static void help_and_man_page_show_every_option(void **state)
{
	const char *man = getenv("KVTD_MAN_PAGE");
	char *help = NULL, *page, cmd[4200], want[160];
	size_t len = 0;
	FILE *f = open_memstream(&help, &len);

	(void)state;
	assert_non_null(f);
	kvtd_usage(f);
	fclose(f);
	assert_non_null(man);
	snprintf(cmd, sizeof(cmd), "gzip -dc '%s'", man);
	f = popen(cmd, "r");
	assert_non_null(f);
	page = slurp(f);
	if (pclose(f) || !*page)
		fail_msg("%s: cannot read the man page", man);
	for (size_t i = 0; i < kvtd_n_options; i++) {
		const struct kvtd_option *o = &kvtd_options[i];
		char roff[96];
		const char *at;
		size_t n = 0;

		if (o->letter)
			snprintf(want, sizeof(want), "-%c, --%s%s%s", o->letter, o->name,
				 o->arg ? " " : "", o->arg ? o->arg : "");
		else
			snprintf(want, sizeof(want), "    --%s%s%s", o->name, o->arg ? " " : "",
				 o->arg ? o->arg : "");
		if (!(at = strstr(help, want)))
			fail_msg("--help does not show \"%s\"", want);
		/* its text follows, from the first word */
		at += strlen(want) + strspn(at + strlen(want), " ");
		if (strncmp(at, o->help, strcspn(o->help, " ")))
			fail_msg("--help shows \"%s\" without its text", want);
		if (o->key && !lists_key(help, o->key))
			fail_msg("--help's CONFIGURATION does not list the key %s", o->key);
		/* roff: "\-\-name" */
		for (const char *p = o->name; *p && n + 3 < sizeof(roff); p++) {
			if (*p == '-')
				roff[n++] = '\\';
			roff[n++] = *p;
		}
		roff[n] = 0;
		snprintf(want, sizeof(want), "\\-\\-%s", roff);
		if (!strstr(page, want))
			fail_msg("%s does not document --%s (rebuilt from --help?)", man, o->name);
	}
	free(help);
	free(page);
}

/* Each key of the file, set to its sample, sets its field; --print-config
 * prints it, and what it prints reads back to the same settings. */
static void file_keys_set_print_and_read_back(void **state)
{
	static struct kvtd_config defaults, from_file, again;
	char path[4200], path2[4200], *out, *out2;
	const char *args[] = { "--config", path, "--print-config", NULL };
	FILE *f;

	(void)state;
	snprintf(path, sizeof(path), "%s/all.ini", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("[kvtierd]\n", f);
	for (size_t i = 0; i < kvtd_n_options; i++)
		if (in_use(&kvtd_options[i]) && kvtd_options[i].key)
			fprintf(f, "%s = %s\n", kvtd_options[i].key, kvtd_options[i].sample);
	fclose(f);
	assert_int_equal(load(&defaults, (const char *[]){ "--print-config", NULL }), 0);
	assert_int_equal(load(&from_file, args), 0);
	out = printed(&from_file);
	for (size_t i = 0; i < kvtd_n_options; i++) {
		const struct kvtd_option *o = &kvtd_options[i];
		char line[128];

		if (!in_use(o) || !o->key)
			continue;
		if (!field_differs(o, &defaults, &from_file))
			fail_msg("%s = %s in the file left its field at the default", o->key,
				 o->sample);
		snprintf(line, sizeof(line), "\n%s = ", o->key);
		if (!(o->flags & KVTD_PRINT_NEVER) && !strstr(out, line))
			fail_msg("--print-config does not print %s:\n%s", o->key, out);
		if ((o->flags & KVTD_PRINT_NEVER) && strstr(out, line))
			fail_msg("--print-config prints %s, an action", o->key);
	}
	snprintf(path2, sizeof(path2), "%s/again.ini", dir);
	f = fopen(path2, "w");
	assert_non_null(f);
	fputs(out, f);
	fclose(f);
	assert_int_equal(load(&again, (const char *[]){ "--config", path2, "--print-config",
							NULL }), 0);
	out2 = printed(&again);
	assert_string_equal(out, out2);
	for (size_t i = 0; i < kvtd_n_options; i++) {
		const struct kvtd_option *o = &kvtd_options[i];

		if (in_use(o) && o->key && !(o->flags & KVTD_PRINT_NEVER) &&
		    field_differs(o, &from_file, &again))
			fail_msg("%s: --print-config's value does not read back the same", o->key);
	}
	free(out);
	free(out2);
}

/* Each option on the command line, with the sample as its value, sets the
 * field as the file's key does; a flag sets what it says. */
static void command_line_sets_what_the_file_sets(void **state)
{
	static struct kvtd_config defaults, from_cli, from_file;
	const char *args[2 * KVTD_MAX_OPTIONS + 2];
	char path[4200];
	size_t n = 0;
	FILE *f;

	(void)state;
	snprintf(path, sizeof(path), "%s/flags.ini", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("[kvtierd]\n", f);
	for (size_t i = 0; i < kvtd_n_options; i++) {
		const struct kvtd_option *o = &kvtd_options[i];
		char *opt;

		if (!in_use(o))
			continue;
		assert_true(asprintf(&opt, "--%s", o->name) > 0);
		args[n++] = opt;
		if (o->arg)
			args[n++] = o->sample;
		if (o->key)
			fprintf(f, "%s = %s\n", o->key, o->arg ? o->sample : o->flag_value);
	}
	args[n] = NULL;
	fclose(f);
	assert_int_equal(load(&defaults, (const char *[]){ NULL }), 0);
	assert_int_equal(load(&from_cli, args), 0);
	assert_int_equal(load(&from_file, (const char *[]){ "--config", path, "--print-config",
							    NULL }), 0);
	for (size_t i = 0; i < kvtd_n_options; i++) {
		const struct kvtd_option *o = &kvtd_options[i];

		if (!in_use(o))
			continue;
		if (!field_differs(o, &defaults, &from_cli))
			fail_msg("--%s left its field at the default", o->name);
		if (o->key && field_differs(o, &from_file, &from_cli))
			fail_msg("--%s and %s in the file set different values", o->name, o->key);
	}
	for (size_t i = 0; i < n; i++)
		if (!strncmp(args[i], "--", 2))
			free((char *)args[i]);
}

/* docs/configuration.md has a row for each option and each key. */
static void configuration_page_names_every_option(void **state)
{
	const char *src = getenv("KVT_SOURCE_DIR");
	char path[4200], want[128];
	char *page;

	(void)state;
	assert_non_null(src);
	snprintf(path, sizeof(path), "%s/docs/configuration.md", src);
	page = file_text(path);
	for (size_t i = 0; i < kvtd_n_options; i++) {
		const struct kvtd_option *o = &kvtd_options[i];

		snprintf(want, sizeof(want), "--%s", o->name);
		if (!strstr(page, want))
			fail_msg("docs/configuration.md does not name --%s", o->name);
		snprintf(want, sizeof(want), "`%s", o->key ? o->key : "");
		if (o->key && !strstr(page, want))
			fail_msg("docs/configuration.md does not name the key %s", o->key);
	}
	free(page);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(rows_are_whole),
		cmocka_unit_test(help_and_man_page_show_every_option),
		cmocka_unit_test(file_keys_set_print_and_read_back),
		cmocka_unit_test(command_line_sets_what_the_file_sets),
		cmocka_unit_test(configuration_page_names_every_option),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
