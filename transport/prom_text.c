/* SPDX-License-Identifier: Apache-2.0 */
/* Prometheus text exposition; see prom_text.h. */
#include "transport/prom_text.h"

void kvt_prom_help(struct kvt_textbuf *b, const char *name, const char *type, const char *help)
{
	kvt_textbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void kvt_prom_count(struct kvt_textbuf *b, const char *name, const char *type, const char *help,
		    uint64_t value)
{
	kvt_prom_help(b, name, type, help);
	kvt_textbuf_printf(b, "%s %llu\n", name, (unsigned long long)value);
}

void kvt_prom_counts(struct kvt_textbuf *b, const struct kvt_prom_count *table, size_t n)
{
	for (size_t i = 0; i < n; i++)
		kvt_prom_count(b, table[i].name, table[i].type, table[i].help, table[i].value);
}

void kvt_prom_labelled(struct kvt_textbuf *b, const char *name, const char *type,
		       const char *help, const char *label, const struct kvt_prom_sample *samples,
		       size_t n)
{
	kvt_prom_help(b, name, type, help);
	for (size_t i = 0; i < n; i++)
		kvt_textbuf_printf(b, "%s{%s=\"%s\"} %llu\n", name, label, samples[i].label_value,
				   (unsigned long long)samples[i].value);
}
