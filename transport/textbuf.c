/* SPDX-License-Identifier: Apache-2.0 */
/* The text buffer; see textbuf.h. */
#include "transport/textbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void kvt_textbuf_printf(struct kvt_textbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		if (b->bad)
			return;
		va_start(ap, fmt);
		n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->bad = true;
			return;
		}
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = b->cap ? b->cap * 2 : 8192;
		while (cap - b->len <= (size_t)n)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->bad = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
}

void kvt_textbuf_label(struct kvt_textbuf *b, const char *value)
{
	for (const char *s = value; *s; s++) {
		if (*s == '\\' || *s == '"')
			kvt_textbuf_printf(b, "\\%c", *s);
		else if (*s == '\n')
			kvt_textbuf_printf(b, "\\n");
		else
			kvt_textbuf_printf(b, "%c", *s);
	}
}
