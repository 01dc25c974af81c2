/* SPDX-License-Identifier: Apache-2.0 */
/* The streaming JSONL trace reader; see reader.h. */
#include "bench/trace/reader.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

struct kvt_trace_reader {
	struct kvt_trace_reader_opts opts;
	FILE *f;
	bool own_f;
	char *label;
	char *line;
	size_t line_cap;
	uint64_t *ids;
	size_t ids_cap;
	uint64_t lines, bad;
	double last_ts;          /* of the last request returned */
	bool have_ts;
	/* the reorder window: a min-heap by (timestamp, line) */
	struct pending {
		struct kvt_trace_req req;
		uint64_t *ids;
		size_t cap;
	} *pend;
	size_t n_pend;
	bool eof;
	char err[256];
	/* progress */
	bool show;
	uint64_t file_bytes, read_bytes;
	struct timespec last_shown;
};

void kvt_trace_reader_opts_init(struct kvt_trace_reader_opts *opts, size_t size_bytes)
{
	memset(opts, 0, size_bytes);
	opts->size = size_bytes;
	opts->errors = stderr;
}

int kvt_trace_reader_open(const char *path, const struct kvt_trace_reader_opts *opts,
			  struct kvt_trace_reader **out)
{
	struct kvt_trace_reader *r;
	struct stat st;
	int err;

	if (!path || !opts || opts->size != sizeof(*opts) || !out)
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->opts = *opts;
	r->label = strdup(opts->label ? opts->label : path);
	if (!r->label) {
		err = -ENOMEM;
		goto err_free;
	}
	if (!strcmp(path, "-")) {
		r->f = stdin;
	} else {
		r->f = fopen(path, "re");
		if (!r->f) {
			err = -errno;
			goto err_label;
		}
		r->own_f = true;
	}
	if (fstat(fileno(r->f), &st) == 0 && S_ISREG(st.st_mode))
		r->file_bytes = (uint64_t)st.st_size;
	r->show = opts->progress && isatty(STDERR_FILENO);
	*out = r;
	return 0;

err_label:
	free(r->label);
err_free:
	free(r);
	return err;
}

void kvt_trace_reader_close(struct kvt_trace_reader *r)
{
	if (!r)
		return;
	if (r->show)
		fputs("\r\033[K", stderr);
	if (r->own_f)
		fclose(r->f);
	for (size_t i = 0; r->pend && i < r->opts.reorder_window; i++)
		free(r->pend[i].ids);
	free(r->pend);
	free(r->ids);
	free(r->line);
	free(r->label);
	free(r);
}

uint64_t kvt_trace_reader_lines(const struct kvt_trace_reader *r)
{
	return r->lines;
}

uint64_t kvt_trace_reader_bad_lines(const struct kvt_trace_reader *r)
{
	return r->bad;
}

const char *kvt_trace_reader_error(const struct kvt_trace_reader *r)
{
	return r->err;
}

int kvt_trace_reader_rewind(struct kvt_trace_reader *r)
{
	if (!r->own_f || fseeko(r->f, 0, SEEK_SET))
		return -ESPIPE;
	clearerr(r->f);
	r->lines = r->bad = r->read_bytes = 0;
	r->have_ts = false;
	r->err[0] = 0;
	r->n_pend = 0;
	r->eof = false;
	return 0;
}

/* Redrawn at most 4 times a second, only on a terminal. */
static void progress(struct kvt_trace_reader *r)
{
	struct timespec now;
	double dt;

	clock_gettime(CLOCK_MONOTONIC, &now);
	dt = (double)(now.tv_sec - r->last_shown.tv_sec) +
	     (double)(now.tv_nsec - r->last_shown.tv_nsec) / 1e9;
	if (dt < 0.25)
		return;
	r->last_shown = now;
	if (r->file_bytes)
		fprintf(stderr, "\r\033[K%s: %5.1f%%  %llu requests", r->label,
			100.0 * (double)r->read_bytes / (double)r->file_bytes,
			(unsigned long long)r->lines);
	else
		fprintf(stderr, "\r\033[K%s: %llu requests", r->label,
			(unsigned long long)r->lines);
}

static int bad_line(struct kvt_trace_reader *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int bad_line(struct kvt_trace_reader *r, const char *fmt, ...)
{
	int n = snprintf(r->err, sizeof(r->err), "%s:%llu: ", r->label,
			 (unsigned long long)r->lines);
	va_list ap;

	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(r->err))
		vsnprintf(r->err + n, sizeof(r->err) - (size_t)n, fmt, ap);
	va_end(ap);
	r->bad++;
	if (r->opts.errors) {
		if (r->show)
			fputs("\r\033[K", stderr);
		fprintf(r->opts.errors, "%s%s\n", r->err, r->opts.skip_bad ? " (skipped)" : "");
	}
	return -EBADMSG;
}

/* A non-negative integer field. */
static int get_count(struct kvt_trace_reader *r, json_t *obj, const char *name, uint64_t *out)
{
	json_t *v = json_object_get(obj, name);

	if (!v)
		return bad_line(r, "missing field \"%s\"", name);
	if (!json_is_integer(v))
		return bad_line(r, "\"%s\" is not an integer", name);
	if (json_integer_value(v) < 0)
		return bad_line(r, "\"%s\" is negative (%lld)", name,
				(long long)json_integer_value(v));
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

/* ---- the fast path -------------------------------------------------------
 * Traces are millions of lines of one shape; a full JSON parse builds a tree
 * with an allocation per id and runs at tens of MB/s. This scanner accepts
 * only well-formed lines of that shape (the four fields once each, numbers
 * and one array of non-negative integers, no escapes) and hands every
 * other line to jansson, which then parses it or says what is wrong, so the
 * two paths agree on every line the scanner accepts. */

static inline const char *skip_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
		p++;
	return p;
}

/* A JSON integer (no fraction or exponent) that fits int64; false otherwise,
 * or when it is followed by a fraction or exponent. */
static bool scan_int(const char **pp, const char *end, int64_t *out)
{
	const char *p = *pp;
	bool neg = false;
	uint64_t v = 0;

	if (p < end && *p == '-') {
		neg = true;
		p++;
	}
	if (p >= end || *p < '0' || *p > '9' || (*p == '0' && p + 1 < end && p[1] >= '0' &&
						 p[1] <= '9'))
		return false;
	for (; p < end && *p >= '0' && *p <= '9'; p++) {
		if (v > (UINT64_C(1) << 63) / 10)
			return false;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (v > (uint64_t)INT64_MAX + neg)
		return false;
	if (p < end && (*p == '.' || *p == 'e' || *p == 'E'))
		return false;
	*pp = p;
	*out = neg ? (int64_t)(0 - v) : (int64_t)v;
	return true;
}

static int ensure_ids(struct kvt_trace_reader *r, size_t n)
{
	uint64_t *ids;
	size_t cap;

	if (n <= r->ids_cap)
		return 0;
	cap = r->ids_cap ? r->ids_cap * 2 : 256;
	while (cap < n)
		cap *= 2;
	ids = realloc(r->ids, cap * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	r->ids = ids;
	r->ids_cap = cap;
	return 0;
}

/* 1: parsed into req; 0: not for the fast path; -ENOMEM. */
static int parse_fast(struct kvt_trace_reader *r, const char *p, const char *end,
		      struct kvt_trace_req *req)
{
	enum { TS = 1, IN = 2, OUT = 4, IDS = 8 };
	unsigned seen = 0;
	double ts = 0;
	size_t n = 0;

	p = skip_ws(p, end);
	if (p >= end || *p++ != '{')
		return 0;
	for (;;) {
		const char *key, *kend;
		unsigned which;
		int64_t v;

		p = skip_ws(p, end);
		if (p >= end || *p++ != '"')
			return 0;
		key = p;
		while (p < end && *p != '"' && *p != '\\')
			p++;
		if (p >= end || *p != '"')
			return 0;
		kend = p++;
		p = skip_ws(p, end);
		if (p >= end || *p++ != ':')
			return 0;
		p = skip_ws(p, end);
#define KEY_IS(s) ((size_t)(kend - key) == sizeof(s) - 1 && !memcmp(key, s, sizeof(s) - 1))
		which = KEY_IS("timestamp") ? TS : KEY_IS("input_length") ? IN :
			KEY_IS("output_length") ? OUT : KEY_IS("hash_ids") ? IDS : 0;
#undef KEY_IS
		if (!which || (which & seen))
			return 0; /* other fields, and duplicates, are jansson's */
		seen |= which;
		if (which == IDS) {
			if (p >= end || *p++ != '[')
				return 0;
			p = skip_ws(p, end);
			if (p < end && *p == ']') {
				p++;
			} else {
				for (;;) {
					if (!scan_int(&p, end, &v) || v < 0)
						return 0;
					if (n == r->ids_cap && ensure_ids(r, n + 1))
						return -ENOMEM;
					r->ids[n++] = (uint64_t)v;
					p = skip_ws(p, end);
					if (p < end && *p == ',') {
						p = skip_ws(p + 1, end);
						continue;
					}
					if (p < end && *p == ']') {
						p++;
						break;
					}
					return 0;
				}
			}
		} else if (which == TS) {
			char *e;

			/* strtod accepts more than JSON (hex, inf, leading +): only
			 * a JSON number's characters may start it */
			if (p >= end || !(*p == '-' || (*p >= '0' && *p <= '9')))
				return 0;
			ts = strtod(p, &e);
			if (e == p || e > end || !isfinite(ts) || memchr(p, 'x', (size_t)(e - p)) ||
			    memchr(p, 'X', (size_t)(e - p)))
				return 0;
			p = e;
		} else {
			if (!scan_int(&p, end, &v) || v < 0)
				return 0;
			if (which == IN)
				req->input_length = (uint64_t)v;
			else if (which == OUT)
				req->output_length = (uint64_t)v;
		}
		p = skip_ws(p, end);
		if (p < end && *p == ',') {
			p++;
			continue;
		}
		if (p < end && *p == '}')
			break;
		return 0;
	}
	if (skip_ws(p + 1, end) != end || seen != (TS | IN | OUT | IDS))
		return 0;
	if (r->have_ts && ts < r->last_ts)
		return 0; /* the full path reports it */
	if (!r->opts.reorder_window) {
		r->last_ts = ts;
		r->have_ts = true;
	}
	req->timestamp_ms = ts;
	req->hash_ids = r->ids;
	req->n_ids = n;
	req->line = r->lines;
	return 1;
}

static int parse(struct kvt_trace_reader *r, const char *buf, size_t len,
		 struct kvt_trace_req *req)
{
	json_error_t jerr;
	json_t *obj = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr), *v;
	size_t n, i;
	int err = 0;

	if (!obj)
		return bad_line(r, "bad JSON at column %d: %s", jerr.column, jerr.text);
	if (!json_is_object(obj)) {
		err = bad_line(r, "not a JSON object");
		goto out;
	}
	v = json_object_get(obj, "timestamp");
	if (!v) {
		err = bad_line(r, "missing field \"timestamp\"");
		goto out;
	}
	if (!json_is_number(v) || !isfinite(json_number_value(v))) {
		err = bad_line(r, "\"timestamp\" is not a number");
		goto out;
	}
	req->timestamp_ms = json_number_value(v);
	err = get_count(r, obj, "input_length", &req->input_length);
	if (!err)
		err = get_count(r, obj, "output_length", &req->output_length);
	if (err)
		goto out;
	v = json_object_get(obj, "hash_ids");
	if (!v) {
		err = bad_line(r, "missing field \"hash_ids\"");
		goto out;
	}
	if (!json_is_array(v)) {
		err = bad_line(r, "\"hash_ids\" is not an array");
		goto out;
	}
	n = json_array_size(v);
	if (n > r->ids_cap) {
		size_t cap = n < 256 ? 256 : n;
		uint64_t *ids = realloc(r->ids, cap * sizeof(*ids));

		if (!ids) {
			err = -ENOMEM;
			goto out;
		}
		r->ids = ids;
		r->ids_cap = cap;
	}
	for (i = 0; i < n; i++) {
		json_t *id = json_array_get(v, i);

		if (!json_is_integer(id) || json_integer_value(id) < 0) {
			err = bad_line(r, "hash_ids[%zu] is not a non-negative integer", i);
			goto out;
		}
		r->ids[i] = (uint64_t)json_integer_value(id);
	}
	if (r->have_ts && req->timestamp_ms < r->last_ts) {
		if (r->opts.reorder_window)
			err = bad_line(r, "timestamp %.17g before that of a request already "
					  "replayed, %.17g: more than %zu requests out of order",
				       req->timestamp_ms, r->last_ts, r->opts.reorder_window);
		else
			err = bad_line(r, "timestamp %.17g before the previous request's %.17g "
					  "(sort the trace, or give a reorder window)",
				       req->timestamp_ms, r->last_ts);
		goto out;
	}
	if (!r->opts.reorder_window) {
		r->last_ts = req->timestamp_ms;
		r->have_ts = true;
	}
	req->hash_ids = r->ids;
	req->n_ids = n;
	req->line = r->lines;
out:
	json_decref(obj);
	return err;
}

static int read_one(struct kvt_trace_reader *r, struct kvt_trace_req *req)
{
	for (;;) {
		ssize_t len = getline(&r->line, &r->line_cap, r->f);
		size_t i;
		int err;

		if (len < 0) {
			if (ferror(r->f)) {
				snprintf(r->err, sizeof(r->err), "%s: read error", r->label);
				return -EIO;
			}
			return 0;
		}
		r->lines++;
		r->read_bytes += (uint64_t)len;
		if (r->show && (r->lines & 0x3fff) == 0)
			progress(r);
		for (i = 0; i < (size_t)len && strchr(" \t\r\n", r->line[i]); i++)
			;
		if (i == (size_t)len)
			continue;
		err = r->opts.full_parser ? 0 : parse_fast(r, r->line, r->line + len, req);
		if (err == 1)
			return 1;
		if (err == 0)
			err = parse(r, r->line, (size_t)len, req);
		if (err == -EBADMSG && r->opts.skip_bad)
			continue;
		return err ? err : 1;
	}
}

static inline bool pend_before(const struct pending *a, const struct pending *b)
{
	if (a->req.timestamp_ms != b->req.timestamp_ms)
		return a->req.timestamp_ms < b->req.timestamp_ms;
	return a->req.line < b->req.line;
}

static void pend_swap(struct pending *a, struct pending *b)
{
	struct pending t = *a;

	*a = *b;
	*b = t;
}

/* Copy req into the window's free slot and sift it up. */
static int pend_push(struct kvt_trace_reader *r, const struct kvt_trace_req *req)
{
	struct pending *p = &r->pend[r->n_pend];
	size_t i;

	if (req->n_ids > p->cap) {
		uint64_t *ids = realloc(p->ids, req->n_ids * sizeof(*ids));

		if (!ids)
			return -ENOMEM;
		p->ids = ids;
		p->cap = req->n_ids;
	}
	if (req->n_ids)
		memcpy(p->ids, req->hash_ids, req->n_ids * sizeof(*p->ids));
	p->req = *req;
	p->req.hash_ids = p->ids;
	for (i = r->n_pend++; i > 0 && pend_before(&r->pend[i], &r->pend[(i - 1) / 2]);
	     i = (i - 1) / 2)
		pend_swap(&r->pend[i], &r->pend[(i - 1) / 2]);
	return 0;
}

/* Move the earliest request to the slot just past the heap; returns it. */
static const struct kvt_trace_req *pend_pop(struct kvt_trace_reader *r)
{
	size_t i = 0, n;

	n = --r->n_pend;
	pend_swap(&r->pend[0], &r->pend[n]);
	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= n)
			break;
		if (c + 1 < n && pend_before(&r->pend[c + 1], &r->pend[c]))
			c++;
		if (!pend_before(&r->pend[c], &r->pend[i]))
			break;
		pend_swap(&r->pend[c], &r->pend[i]);
		i = c;
	}
	return &r->pend[n].req;
}

int kvt_trace_reader_next(struct kvt_trace_reader *r, struct kvt_trace_req *req)
{
	size_t w = r->opts.reorder_window;
	int err;

	if (!w)
		return read_one(r, req);
	if (!r->pend) {
		r->pend = calloc(w, sizeof(*r->pend));
		if (!r->pend)
			return -ENOMEM;
	}
	/* keep the window full: a request leaves it only when w later lines
	 * have been read, or at the end */
	while (!r->eof && r->n_pend < w) {
		struct kvt_trace_req in;

		err = read_one(r, &in);
		if (err == 0)
			r->eof = true;
		else if (err < 0)
			return err;
		else if ((err = pend_push(r, &in)))
			return err;
	}
	if (!r->n_pend)
		return 0;
	*req = *pend_pop(r);
	r->last_ts = req->timestamp_ms;
	r->have_ts = true;
	return 1;
}
