/* SPDX-License-Identifier: Apache-2.0 */
/* Byte counts as people write and read them: "64M", "1.5G", "25%" in, and
 * "64 MiB", "1.5 GiB" out. One parser and one printer for the daemon, the CLI
 * and the benches. */
#ifndef KVT_UTIL_SIZE_H
#define KVT_UTIL_SIZE_H

#include <stddef.h>
#include <stdint.h>

/* Parse a size: a non-negative number with an optional K/M/G/T suffix
 * (powers of 1024, optionally followed by "iB" or "B"), or "N%" of `whole`
 * (N <= 100). Returns 0 and *out, or -EINVAL for an empty string, trailing
 * junk, a negative number, NaN, infinity or a value that does not fit in 64
 * bits. */
int kvt_parse_size(const char *s, uint64_t whole, uint64_t *out);

/* Print bytes in binary units into buf: "512 B", "64 KiB", "1.5 GiB" (one
 * decimal unless the value is whole). Returns buf. */
const char *kvt_fmt_bytes(uint64_t bytes, char *buf, size_t len);

#endif /* KVT_UTIL_SIZE_H */
