/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierd's options as one table: a row per option says its names, its
 * value, its range, its default and its help, and the field of struct
 * kvtd_config it sets. The command line (getopt), the config file (INI),
 * --help, --print-config and the man page (made from --help) are all read
 * from the table, so adding an option is adding a row (docs/configuration.md,
 * "Adding an option"). */
#ifndef KVT_APP_DAEMON_OPTIONS_H
#define KVT_APP_DAEMON_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "app/daemon_config.h"

struct kvtd_option;

/* A kind of value: how its text is read into the field and written back as
 * the config file spells it. */
struct kvtd_value_type {
	/* Set the row's field of cfg from text; 0 or -EINVAL (a usage error). */
	int (*parse)(const struct kvtd_option *o, struct kvtd_config *cfg, const char *text);
	/* The field as the config file spells it. */
	void (*print)(const struct kvtd_option *o, const struct kvtd_config *cfg, FILE *f);
	/* Whether the field holds a value (a non-empty string or list): rows
	 * marked KVTD_PRINT_IF_SET print only then. NULL: always. */
	bool (*is_set)(const struct kvtd_option *o, const struct kvtd_config *cfg);
	/* How --help's list of config file keys shows the value ("true|false"),
	 * or NULL. */
	const char *shape;
};

/* The value kinds (daemon_values.c). */
extern const struct kvtd_value_type kvtd_string;   /* one line of at most size - 1 bytes */
extern const struct kvtd_value_type kvtd_off_string; /* a string, "off" or "" for none */
extern const struct kvtd_value_type kvtd_uint;     /* a decimal from min to max */
extern const struct kvtd_value_type kvtd_mode;     /* an octal from min to max */
extern const struct kvtd_value_type kvtd_bool;     /* true/false, yes/no, on/off, 1/0 */
extern const struct kvtd_value_type kvtd_ms;       /* a duration: "2.5", "30s", "500ms" */
extern const struct kvtd_value_type kvtd_size;     /* "64M", "25%": kept as written */
extern const struct kvtd_value_type kvtd_uids;     /* uids, comma-separated, appended */
extern const struct kvtd_value_type kvtd_ssd_dirs; /* PATH[:SIZE], comma-separated, appended */
extern const struct kvtd_value_type kvtd_level;    /* a log level */
extern const struct kvtd_value_type kvtd_host_copy; /* direct or device */

/* What a row that sets no field does on the command line. */
enum kvtd_action {
	KVTD_SET = 0,      /* sets its field (every row with a type) */
	KVTD_CONFIG,       /* --config FILE: read before the other options */
	KVTD_TENANT,       /* --tenant NAME:TOKEN[:SALT] (daemon_tenants.h) */
	KVTD_HELP,
	KVTD_VERSION,
};

/* Row flags. */
#define KVTD_NONEMPTY       (1u << 0) /* a string may not be empty */
#define KVTD_ZERO_OK        (1u << 1) /* 0 is allowed below min (0 = off) */
#define KVTD_PERCENT        (1u << 2) /* a size may be a percentage */
#define KVTD_PRINT_IF_SET   (1u << 3) /* --print-config shows it only when set */
#define KVTD_PRINT_CLUSTER  (1u << 4) /* ... only in a cluster (cluster set) */
#define KVTD_PRINT_NEVER    (1u << 5) /* ... never (an action, not a setting) */

struct kvtd_option {
	const char *name;        /* the long option: --name */
	char letter;             /* the short option -x, or 0 */
	const char *arg;         /* the value's name in --help ("SIZE"); NULL: a flag */
	const char *key;         /* its key in [kvtierd], NULL: command line only; the
	                          * key also answers to the name with '_' for '-' */
	enum kvtd_action action;
	const struct kvtd_value_type *type; /* NULL for an action */
	size_t offset, size;     /* the field of struct kvtd_config it sets */
	long long min, max;      /* the range of a number (a duration: ms; a size:
	                          * bytes, max 0: any) */
	const char *def;         /* the default as the file spells it, read at start;
	                          * NULL: zero, or computed by kvtd_config_defaults */
	const char *flag_value;  /* what the flag sets its field to */
	const char *accepts;     /* what a value may be, for a usage error */
	const char *(*names)(void); /* the accepted names, where a registry knows them */
	bool (*valid)(const char *text); /* a check of a string's form, or NULL */
	const char *help;        /* --help text, filled to the column; "{default}"
	                          * stands for def */
	const char *heading;     /* a line --help prints above this row, after a
	                          * blank line ("" for the blank line alone) */
	const char *sample;      /* a valid value other than the default (tests) */
	unsigned flags;          /* KVTD_* above */
};

/* The table, in --help's order (also --print-config's): at most
 * KVTD_MAX_OPTIONS rows (checked at build time). */
#define KVTD_MAX_OPTIONS 96
extern const struct kvtd_option kvtd_options[];
extern const size_t kvtd_n_options;

/* Checks and copies every string setting shares (daemon_values.c). */
bool kvtd_fits(const char *v, size_t cap);   /* strlen(v) < cap */
bool kvtd_one_line(const char *v);          /* no control character */
void kvtd_set_str(char *dst, size_t cap, const char *src);

/* The row of the config file's key (a '-' read as '_'), or NULL. */
const struct kvtd_option *kvtd_option_by_key(const char *key);

/* What o accepts, for a usage error's "expected ...". */
const char *kvtd_option_accepts(const struct kvtd_option *o);

#endif /* KVT_APP_DAEMON_OPTIONS_H */
