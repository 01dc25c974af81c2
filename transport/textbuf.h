/* SPDX-License-Identifier: Apache-2.0 */
/* A growing text buffer for the Prometheus endpoint's page: printf into it,
 * and check once at the end whether memory ran out. */
#ifndef KVT_TRANSPORT_TEXTBUF_H
#define KVT_TRANSPORT_TEXTBUF_H

#include <stdbool.h>
#include <stddef.h>

struct kvt_textbuf {
	char *p;     /* NUL-terminated text; the caller frees it */
	size_t len, cap;
	bool bad;    /* out of memory (or a format error): the text is incomplete */
};

void kvt_textbuf_printf(struct kvt_textbuf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* A Prometheus label value, escaped (backslash, double quote, newline). */
void kvt_textbuf_label(struct kvt_textbuf *b, const char *value);

#endif /* KVT_TRANSPORT_TEXTBUF_H */
