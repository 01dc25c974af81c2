/* SPDX-License-Identifier: Apache-2.0 */
/* The kinds of value kvtierd's options take (daemon_options.h): how each is
 * read from the command line or the config file into its field, and written
 * back by --print-config as the file spells it. */
#include "app/daemon_options.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/size.h"

bool kvtd_fits(const char *v, size_t cap)
{
	return strlen(v) < cap;
}

/* Each setting is one INI line, and --print-config must write it back as
 * one. */
bool kvtd_one_line(const char *v)
{
	for (; *v; v++)
		if ((unsigned char)*v < 0x20 || *v == 0x7f)
			return false;
	return true;
}

void kvtd_set_str(char *dst, size_t cap, const char *src)
{
	snprintf(dst, cap, "%s", src);
}

static void *field(const struct kvtd_option *o, struct kvtd_config *cfg)
{
	return (char *)cfg + o->offset;
}

static const void *cfield(const struct kvtd_option *o, const struct kvtd_config *cfg)
{
	return (const char *)cfg + o->offset;
}

static int parse_ulong(const char *s, int base, unsigned long max, unsigned long *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, base);
	if (errno || end == s || *end || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

/* ---- strings -------------------------------------------------------------- */

static int string_parse(const struct kvtd_option *o, struct kvtd_config *cfg, const char *v)
{
	if ((o->flags & KVTD_NONEMPTY) && !*v)
		return -EINVAL;
	if (o->valid && !o->valid(v))
		return -EINVAL;
	if (!kvtd_fits(v, o->size) || !kvtd_one_line(v))
		return -EINVAL;
	kvtd_set_str(field(o, cfg), o->size, v);
	return 0;
}

static void string_print(const struct kvtd_option *o, const struct kvtd_config *cfg, FILE *f)
{
	fputs(cfield(o, cfg), f);
}

static bool string_set(const struct kvtd_option *o, const struct kvtd_config *cfg)
{
	return *(const char *)cfield(o, cfg) != 0;
}

const struct kvtd_value_type kvtd_string = {
	.parse = string_parse, .print = string_print, .is_set = string_set,
};

/* "off" (or nothing) turns the setting off: an empty field */
static int off_parse(const struct kvtd_option *o, struct kvtd_config *cfg, const char *v)
{
	if (!strcmp(v, "off") || !*v) {
		*(char *)field(o, cfg) = 0;
		return 0;
	}
	return string_parse(o, cfg, v);
}

static void off_print(const struct kvtd_option *o, const struct kvtd_config *cfg, FILE *f)
{
	fputs(string_set(o, cfg) ? (const char *)cfield(o, cfg) : "off", f);
}

const struct kvtd_value_type kvtd_off_string = { .parse = off_parse, .print = off_print };

/* A size as written ("64M", "25%"), checked here and resolved later
 * (kvtd_config_resolve) against what the machine has. */
static int size_parse(const struct kvtd_option *o, struct kvtd_config *cfg, const char *v)
{
	uint64_t n;

	if (kvt_parse_size(v, (o->flags & KVTD_PERCENT) ? 100 : 0, &n))
		return -EINVAL;
	if (o->max && (n || !(o->flags & KVTD_ZERO_OK)) &&
	    (n < (uint64_t)o->min || n > (uint64_t)o->max))
		return -EINVAL;
	return string_parse(o, cfg, v);
}

const struct kvtd_value_type kvtd_size = {
	.parse = size_parse, .print = string_print, .is_set = string_set,
};

/* ---- numbers -------------------------------------------------------------- */

static int number_parse(const struct kvtd_option *o, struct kvtd_config *cfg, const char *v,
			int base)
{
	unsigned long n;

	if (parse_ulong(v, base, (unsigned long)o->max, &n) || (long long)n < o->min)
		return -EINVAL;
	*(unsigned *)field(o, cfg) = (unsigned)n;
	return 0;
}

static int uint_parse(const struct kvtd_option *o, struct kvtd_config *cfg, const char *v)
{
	return number_parse(o, cfg, v, 10);
}

static void uint_print(const struct kvtd_option *o, const struct kvtd_config *cfg, FILE *f)
{
	fprintf(f, "%u", *(const unsigned *)cfield(o, cfg));
}

const struct kvtd_value_type kvtd_uint = { .parse = uint_parse, .print = uint_print };

static int mode_parse(const struct kvtd_option *o, struct kvtd_config *cfg, const char *v)
{
	return number_parse(o, cfg, v, 8);
}

static void mode_print(const struct kvtd_option *o, const struct kvtd_config *cfg, FILE *f)
{
	fprintf(f, "%04o", *(const unsigned *)cfield(o, cfg));
}

const struct kvtd_value_type kvtd_mode = { .parse = mode_parse, .print = mode_print };

/* A duration in seconds ("30", "2.5", "30s") or milliseconds ("500ms"),
 * from min to max ms (or 0 with KVTD_ZERO_OK). */
static int ms_parse(const struct kvtd_option *o, struct kvtd_config *cfg, const char *s)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || !(v >= 0))
		return -EINVAL;
	if (!strcmp(end, "ms"))
		;
	else if (!*end || !strcmp(end, "s"))
		v *= 1000;
	else
		return -EINVAL;
	if (v > (double)o->max)
		return -EINVAL;
	if (v < (double)o->min && ((unsigned)v || !(o->flags & KVTD_ZERO_OK)))
		return -EINVAL;
	*(unsigned *)field(o, cfg) = (unsigned)v;
	return 0;
}

static void ms_print(const struct kvtd_option *o, const struct kvtd_config *cfg, FILE *f)
{
	fprintf(f, "%ums", *(const unsigned *)cfield(o, cfg));
}

const struct kvtd_value_type kvtd_ms = { .parse = ms_parse, .print = ms_print };

/* ---- words ---------------------------------------------------------------- */

static int bool_parse(const struct kvtd_option *o, struct kvtd_config *cfg, const char *s)
{
	bool *out = field(o, cfg);

	if (!strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcasecmp(s, "on") || !strcmp(s, "1"))
		*out = true;
	else if (!strcasecmp(s, "false") || !strcasecmp(s, "no") || !strcasecmp(s, "off") || !strcmp(s, "0"))
		*out = false;
	else
		return -EINVAL;
	return 0;
}

static void bool_print(const struct kvtd_option *o, const struct kvtd_config *cfg, FILE *f)
{
	fputs(*(const bool *)cfield(o, cfg) ? "true" : "false", f);
}

const struct kvtd_value_type kvtd_bool = {
	.parse = bool_parse, .print = bool_print, .shape = "true|false",
};

static const char *const level_names[] = { "error", "warn", "info", "debug" };

static int level_parse(const struct kvtd_option *o, struct kvtd_config *cfg, const char *s)
{
	enum kvt_log_level *out = field(o, cfg);

	for (int i = 0; i < 4; i++) {
		if (!strcasecmp(s, level_names[i])) {
			*out = (enum kvt_log_level)i;
			return 0;
		}
	}
	if (!strcasecmp(s, "warning")) {
		*out = KVT_LOG_WARN;
		return 0;
	}
	return -EINVAL;
}

static void level_print(const struct kvtd_option *o, const struct kvtd_config *cfg, FILE *f)
{
	fputs(level_names[*(const enum kvt_log_level *)cfield(o, cfg)], f);
}

const struct kvtd_value_type kvtd_level = { .parse = level_parse, .print = level_print };

/* a bool field: true for "device" */
static int host_copy_parse(const struct kvtd_option *o, struct kvtd_config *cfg, const char *v)
{
	if (strcmp(v, "direct") && strcmp(v, "device"))
		return -EINVAL;
	*(bool *)field(o, cfg) = !strcmp(v, "device");
	return 0;
}

static void host_copy_print(const struct kvtd_option *o, const struct kvtd_config *cfg, FILE *f)
{
	fputs(*(const bool *)cfield(o, cfg) ? "device" : "direct", f);
}

const struct kvtd_value_type kvtd_host_copy = {
	.parse = host_copy_parse, .print = host_copy_print, .shape = "direct|device",
};

/* ---- the uid list ---------------------------------------------------------- */

/* Appends to cfg->allow_uids, whatever the row's field (the list has one). */
static int uids_parse(const struct kvtd_option *o, struct kvtd_config *cfg, const char *list)
{
	char buf[1024], *save, *tok;
	unsigned long v;

	(void)o;
	kvtd_set_str(buf, sizeof(buf), list);
	for (tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
		if (parse_ulong(tok, 10, UINT_MAX - 1, &v) || cfg->n_allow_uids >= KVTD_MAX_UIDS)
			return -EINVAL;
		cfg->allow_uids[cfg->n_allow_uids++] = (uid_t)v;
	}
	return 0;
}

static void uids_print(const struct kvtd_option *o, const struct kvtd_config *cfg, FILE *f)
{
	(void)o;
	for (size_t i = 0; i < cfg->n_allow_uids; i++)
		fprintf(f, "%s%u", i ? "," : "", (unsigned)cfg->allow_uids[i]);
}

static bool uids_set(const struct kvtd_option *o, const struct kvtd_config *cfg)
{
	(void)o;
	return cfg->n_allow_uids > 0;
}

const struct kvtd_value_type kvtd_uids = {
	.parse = uids_parse, .print = uids_print, .is_set = uids_set, .shape = "1000,1001",
};

/* ---- the SSD directories ------------------------------------------------------- */

/* Appends each PATH[:SIZE] of the list to cfg->ssd_dirs: SIZE is what
 * follows the last ':' when that reads as a size or a percentage. */
static int ssd_dirs_parse(const struct kvtd_option *o, struct kvtd_config *cfg, const char *list)
{
	char buf[4096 + 64], *save, *tok;

	(void)o;
	if (!kvtd_fits(list, sizeof(buf)) || !kvtd_one_line(list))
		return -EINVAL;
	kvtd_set_str(buf, sizeof(buf), list);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		struct kvtd_ssd_dir *d = &cfg->ssd_dirs[cfg->n_ssd_dirs];
		char *colon = strrchr(tok, ':');
		uint64_t v;

		if (cfg->n_ssd_dirs >= KVT_SSD_MAX_DIRS)
			return -EINVAL;
		*d = (struct kvtd_ssd_dir){ 0 };
		if (colon && colon[1] && kvtd_fits(colon + 1, sizeof(d->spec)) &&
		    !kvt_parse_size(colon + 1, 100, &v)) {
			kvtd_set_str(d->spec, sizeof(d->spec), colon + 1);
			*colon = 0;
		}
		if (!*tok || !kvtd_fits(tok, sizeof(d->path)))
			return -EINVAL;
		for (size_t k = 0; k < cfg->n_ssd_dirs; k++)
			if (!strcmp(cfg->ssd_dirs[k].path, tok))
				return -EINVAL; /* one drive twice */
		kvtd_set_str(d->path, sizeof(d->path), tok);
		cfg->n_ssd_dirs++;
	}
	return 0;
}

static void ssd_dirs_print(const struct kvtd_option *o, const struct kvtd_config *cfg, FILE *f)
{
	(void)o;
	for (size_t i = 0; i < cfg->n_ssd_dirs; i++)
		fprintf(f, "%s%s%s%s", i ? "," : "", cfg->ssd_dirs[i].path,
			cfg->ssd_dirs[i].spec[0] ? ":" : "", cfg->ssd_dirs[i].spec);
}

static bool ssd_dirs_set(const struct kvtd_option *o, const struct kvtd_config *cfg)
{
	(void)o;
	return cfg->n_ssd_dirs > 0;
}

const struct kvtd_value_type kvtd_ssd_dirs = {
	.parse = ssd_dirs_parse, .print = ssd_dirs_print, .is_set = ssd_dirs_set,
	.shape = "/mnt/nvme0/kvtier:1T,/mnt/nvme1/kvtier",
};
