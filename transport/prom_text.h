/* SPDX-License-Identifier: Apache-2.0 */
/* Prometheus text exposition into a kvt_textbuf: a family's HELP and TYPE
 * lines and its samples. The server's page (metrics.c) and the daemon's
 * cluster and RDMA counters are written with these, so a family is
 * declared as data: name, type, help and the values read from one
 * snapshot. */
#ifndef KVT_TRANSPORT_PROM_TEXT_H
#define KVT_TRANSPORT_PROM_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "transport/textbuf.h"

/* The # HELP and # TYPE lines of family name. */
void kvt_prom_help(struct kvt_textbuf *b, const char *name, const char *type, const char *help);

/* A family of one unlabelled sample. */
struct kvt_prom_count {
	const char *name, *type, *help;
	uint64_t value;
};

void kvt_prom_count(struct kvt_textbuf *b, const char *name, const char *type, const char *help,
		    uint64_t value);

/* Each of table's n families in turn. */
void kvt_prom_counts(struct kvt_textbuf *b, const struct kvt_prom_count *table, size_t n);

/* One sample of a family whose samples differ by one label. */
struct kvt_prom_sample {
	const char *label_value;
	uint64_t value;
};

/* A family of n samples, each written as name{label="label_value"} value. */
void kvt_prom_labelled(struct kvt_textbuf *b, const char *name, const char *type,
		       const char *help, const char *label, const struct kvt_prom_sample *samples,
		       size_t n);

#define KVT_COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

#endif /* KVT_TRANSPORT_PROM_TEXT_H */
